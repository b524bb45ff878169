/*
 * Kernels -> an ORC LLJIT (codegen/host_jit.h). The JIT's target machine is the host's own
 * CPU and features (so that fma and floor are instructions, not library calls); the process's
 * symbols are visible to the JIT in case LLVM still calls a runtime function. The code is
 * compiled at creation by looking every kernel up once.
 */
#include "codegen/host_jit.h" // f8_host_jit_create, f8_host_kernel

#include <pthread.h> // pthread_once
#include <stdbool.h> // bool
#include <stdint.h>  // uintptr_t
#include <string.h>  // strcmp, strlen, memcpy

#include <llvm-c/Core.h>          // LLVMModuleCreateWithNameInContext
#include <llvm-c/Error.h>         // LLVMGetErrorMessage
#include <llvm-c/LLJIT.h>         // LLVMOrcCreateLLJIT, LLVMOrcLLJITLookup
#include <llvm-c/Orc.h>           // LLVMOrcCreateNewThreadSafeContext
#include <llvm-c/Target.h>        // LLVMInitializeNativeTarget
#include <llvm-c/TargetMachine.h> // LLVMCreateTargetMachine, LLVMGetHostCPUName

#include "codegen/llvm_lower.h" // f8_llvm_lower, f8_llvm_optimize
#include "ir/alloc.h"           // f8_calloc, f8_free

struct f8_host_jit {
	LLVMOrcLLJITRef lljit;
	f8_host_kernel *entries; // (n_kernels)
	const char **names;      // (n_kernels) the kernels' names, copied into `text`
	char *text;
	uint32_t n_kernels;
};

static pthread_once_t native_once = PTHREAD_ONCE_INIT;
static bool native_ready;

static void native_initialize(void) {
	native_ready = !LLVMInitializeNativeTarget() && !LLVMInitializeNativeAsmPrinter();
}

/* Fills the diagnostic from an LLVM error, which it consumes. */
static f8_status llvm_error(LLVMErrorRef error, f8_status status, const char *what,
			    f8_diag *diag) {
	char *message = LLVMGetErrorMessage(error);
	status = f8_diag_set(diag, status, "host JIT: %s: %s", what, message);
	LLVMDisposeErrorMessage(message);
	return status;
}

/* An LLJIT for this machine, which also resolves the process's symbols. */
static f8_status create_lljit(f8_host_jit *jit, f8_diag *diag) {
	pthread_once(&native_once, native_initialize);
	if (!native_ready)
		return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "host JIT: LLVM has no target for "
				   "this machine");
	LLVMOrcJITTargetMachineBuilderRef machine_builder;
	LLVMErrorRef error = LLVMOrcJITTargetMachineBuilderDetectHost(&machine_builder);
	if (error)
		return llvm_error(error, F8_ERR_UNSUPPORTED, "detecting the host", diag);
	LLVMOrcLLJITBuilderRef builder = LLVMOrcCreateLLJITBuilder();
	LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(builder, machine_builder);
	if ((error = LLVMOrcCreateLLJIT(&jit->lljit, builder)))
		return llvm_error(error, F8_ERR_UNSUPPORTED, "creating the JIT", diag);
	LLVMOrcDefinitionGeneratorRef generator;
	error = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(
		&generator, LLVMOrcLLJITGetGlobalPrefix(jit->lljit), NULL, NULL);
	if (error)
		return llvm_error(error, F8_ERR_UNSUPPORTED, "the process's symbols", diag);
	LLVMOrcJITDylibAddGenerator(LLVMOrcLLJITGetMainJITDylib(jit->lljit), generator);
	return F8_OK;
}

/* A target machine like the JIT's, for the optimizer's cost model; NULL when none is made. */
static LLVMTargetMachineRef host_machine(const char *triple) {
	LLVMTargetRef target;
	char *message = NULL;
	if (LLVMGetTargetFromTriple(triple, &target, &message)) {
		LLVMDisposeMessage(message);
		return NULL;
	}
	char *cpu = LLVMGetHostCPUName(), *features = LLVMGetHostCPUFeatures();
	LLVMTargetMachineRef machine =
		LLVMCreateTargetMachine(target, triple, cpu, features, LLVMCodeGenLevelDefault,
					LLVMRelocDefault, LLVMCodeModelJITDefault);
	LLVMDisposeMessage(cpu);
	LLVMDisposeMessage(features);
	return machine;
}

/* Lowers and optimizes the kernels into one module of `context` for the JIT's target. */
static f8_status build_module(f8_host_jit *jit, const f8_kernel *const *kernels, uint32_t n,
			      LLVMContextRef context, LLVMModuleRef *out, f8_diag *diag) {
	const char *triple = LLVMOrcLLJITGetTripleString(jit->lljit);
	LLVMModuleRef module = LLVMModuleCreateWithNameInContext("f8c", context);
	LLVMSetTarget(module, triple);
	LLVMSetDataLayout(module, LLVMOrcLLJITGetDataLayoutStr(jit->lljit));
	f8_status status = F8_OK;
	for (uint32_t i = 0; !status && i < n; i++) {
		f8_launch_geometry geometry;
		status = f8_llvm_lower(module, kernels[i], F8_LLVM_TARGET_HOST, &geometry, diag);
	}
	if (!status) {
		LLVMTargetMachineRef machine = host_machine(triple);
		status = f8_llvm_optimize(module, machine, diag);
		if (machine)
			LLVMDisposeTargetMachine(machine);
	}
	if (status) {
		LLVMDisposeModule(module);
		return status;
	}
	*out = module;
	return F8_OK;
}

/* Copies the kernels' names into the JIT (one allocation for all). */
static f8_status copy_names(f8_host_jit *jit, const f8_kernel *const *kernels, uint32_t n,
			    f8_diag *diag) {
	size_t size = 0;
	for (uint32_t i = 0; i < n; i++)
		size += strlen(kernels[i]->name) + 1;
	jit->text = f8_malloc(size + 1);
	jit->names = f8_calloc(n + 1, sizeof *jit->names);
	jit->entries = f8_calloc(n + 1, sizeof *jit->entries);
	if (!jit->text || !jit->names || !jit->entries)
		return f8_diag_set(diag, F8_ERR_NOMEM, "host JIT: out of memory");
	char *at = jit->text;
	for (uint32_t i = 0; i < n; i++) {
		size_t length = strlen(kernels[i]->name) + 1;
		memcpy(at, kernels[i]->name, length);
		jit->names[i] = at;
		at += length;
	}
	jit->n_kernels = n;
	return F8_OK;
}

/* Adds the kernels' module to the JIT and compiles it by looking every kernel up. */
static f8_status compile(f8_host_jit *jit, const f8_kernel *const *kernels, uint32_t n,
			 f8_diag *diag) {
	LLVMOrcThreadSafeContextRef shared = LLVMOrcCreateNewThreadSafeContext();
	LLVMModuleRef module;
	f8_status status = build_module(jit, kernels, n, LLVMOrcThreadSafeContextGetContext(shared),
					&module, diag);
	if (!status) {
		LLVMOrcThreadSafeModuleRef owned = LLVMOrcCreateNewThreadSafeModule(module, shared);
		LLVMErrorRef error = LLVMOrcLLJITAddLLVMIRModule(
			jit->lljit, LLVMOrcLLJITGetMainJITDylib(jit->lljit), owned);
		if (error)
			status = llvm_error(error, F8_ERR_INVALID, "adding the kernels", diag);
	}
	LLVMOrcDisposeThreadSafeContext(shared); // the module keeps its context alive
	for (uint32_t i = 0; !status && i < n; i++) {
		LLVMOrcExecutorAddress address = 0;
		LLVMErrorRef error = LLVMOrcLLJITLookup(jit->lljit, &address, jit->names[i]);
		if (error)
			status = llvm_error(error, F8_ERR_INVALID, jit->names[i], diag);
		else
			jit->entries[i] = (f8_host_kernel)(uintptr_t)address;
	}
	return status;
}

f8_status f8_host_jit_create(const f8_kernel *const *kernels, uint32_t n, f8_host_jit **out,
			     f8_diag *diag) {
	*out = NULL;
	f8_host_jit *jit = f8_calloc(1, sizeof *jit);
	if (!jit)
		return f8_diag_set(diag, F8_ERR_NOMEM, "host JIT: out of memory");
	f8_status status = copy_names(jit, kernels, n, diag);
	if (!status)
		status = create_lljit(jit, diag);
	if (!status)
		status = compile(jit, kernels, n, diag);
	if (status) {
		f8_host_jit_destroy(jit);
		return status;
	}
	*out = jit;
	return F8_OK;
}

f8_host_kernel f8_host_jit_lookup(const f8_host_jit *jit, const char *name) {
	for (uint32_t i = 0; i < jit->n_kernels; i++)
		if (strcmp(jit->names[i], name) == 0)
			return jit->entries[i];
	return NULL;
}

void f8_host_jit_destroy(f8_host_jit *jit) {
	if (!jit)
		return;
	if (jit->lljit) {
		LLVMErrorRef error = LLVMOrcDisposeLLJIT(jit->lljit);
		if (error)
			LLVMConsumeError(error);
	}
	f8_free(jit->entries);
	f8_free(jit->names);
	f8_free(jit->text);
	f8_free(jit);
}
