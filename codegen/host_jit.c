/*
 * Kernels -> an ORC LLJIT (codegen/host_jit.h). The JIT's target machine is the host's own
 * CPU and features (so that fma and floor are instructions, not library calls); the process's
 * symbols are visible to the JIT in case LLVM still calls a runtime function. The code is
 * compiled at creation by looking every kernel up once; with a cache folder, a module compiled
 * before is linked from its object file (codegen/kernel_cache.h).
 */
#include "codegen/host_jit.h" // f8_host_jit_create, f8_host_kernel

#include <pthread.h> // pthread_once
#include <stdbool.h> // bool
#include <stdint.h>  // uintptr_t
#include <stdio.h>   // snprintf
#include <string.h>  // strcmp, strlen, memcpy

#include <llvm-c/Core.h>          // LLVMModuleCreateWithNameInContext
#include <llvm-c/Error.h>         // LLVMGetErrorMessage
#include <llvm-c/LLJIT.h>         // LLVMOrcCreateLLJIT, LLVMOrcLLJITLookup
#include <llvm-c/Orc.h>           // LLVMOrcCreateNewThreadSafeContext
#include <llvm-c/Target.h>        // LLVMInitializeNativeTarget
#include <llvm-c/TargetMachine.h> // LLVMCreateTargetMachine, LLVMGetHostCPUName

#include "codegen/kernel_cache.h" // f8_kernel_cache_open, f8_kernel_cache_load
#include "codegen/llvm_lower.h"   // f8_llvm_lower, f8_llvm_optimize
#include "ir/alloc.h"           // f8_calloc, f8_free

/* The object file the JIT made of the kernels' module, for the cache. */
typedef struct object_capture {
	uint8_t *bytes;
	size_t size;
	uint32_t count; // object files made: one module, one
} object_capture;

struct f8_host_jit {
	LLVMOrcLLJITRef lljit;
	f8_host_kernel *entries; // (n_kernels)
	const char **names;      // (n_kernels) the kernels' names, copied into `text`
	char *text;
	uint32_t n_kernels;
	object_capture capture;
	bool cached; // linked from the cache's object file
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

/* Lowers the kernels into one module of `context` for the JIT's target. */
static f8_status lower_module(f8_host_jit *jit, const f8_kernel *const *kernels, uint32_t n,
			      LLVMContextRef context, LLVMModuleRef *out, f8_diag *diag) {
	LLVMModuleRef module = LLVMModuleCreateWithNameInContext("f8c", context);
	LLVMSetTarget(module, LLVMOrcLLJITGetTripleString(jit->lljit));
	LLVMSetDataLayout(module, LLVMOrcLLJITGetDataLayoutStr(jit->lljit));
	f8_status status = F8_OK;
	for (uint32_t i = 0; !status && i < n; i++) {
		f8_launch_geometry geometry;
		status = f8_llvm_lower(module, kernels[i], F8_LLVM_TARGET_HOST, &geometry, diag);
	}
	if (status) {
		LLVMDisposeModule(module);
		return status;
	}
	*out = module;
	return F8_OK;
}

/* Runs LLVM's optimizer on the lowered module, for the JIT's target. */
static f8_status optimize_module(f8_host_jit *jit, LLVMModuleRef module, f8_diag *diag) {
	LLVMTargetMachineRef machine = host_machine(LLVMOrcLLJITGetTripleString(jit->lljit));
	f8_status status = f8_llvm_optimize(module, machine, diag);
	if (machine)
		LLVMDisposeTargetMachine(machine);
	return status;
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

/* Copies the object file the JIT makes of the module (a module makes one), for the cache. */
static LLVMErrorRef capture_object(void *context, LLVMMemoryBufferRef *object) {
	object_capture *capture = context;
	if (capture->count++ == 0) {
		capture->size = LLVMGetBufferSize(*object);
		if ((capture->bytes = f8_malloc(capture->size + 1)))
			memcpy(capture->bytes, LLVMGetBufferStart(*object), capture->size);
	}
	return NULL;
}

/* What the code generator is told besides the module: the JIT's triple and this CPU, with its
 * features (the cache's key, codegen/kernel_cache.h). A new string, the caller's. */
static char *target_description(const f8_host_jit *jit) {
	char *cpu = LLVMGetHostCPUName(), *features = LLVMGetHostCPUFeatures();
	const char *triple = LLVMOrcLLJITGetTripleString(jit->lljit);
	size_t size = strlen(triple) + strlen(cpu) + strlen(features) + 3;
	char *description = f8_malloc(size);
	if (description)
		snprintf(description, size, "%s %s %s", triple, cpu, features);
	LLVMDisposeMessage(cpu);
	LLVMDisposeMessage(features);
	return description;
}

/* Adds the optimized module to the JIT; `capture`: its object file is copied. */
static f8_status add_module(f8_host_jit *jit, LLVMModuleRef module,
			    LLVMOrcThreadSafeContextRef shared, bool capture, f8_diag *diag) {
	if (capture)
		LLVMOrcObjectTransformLayerSetTransform(LLVMOrcLLJITGetObjTransformLayer(jit->lljit),
							capture_object, &jit->capture);
	LLVMOrcThreadSafeModuleRef owned = LLVMOrcCreateNewThreadSafeModule(module, shared);
	LLVMErrorRef error = LLVMOrcLLJITAddLLVMIRModule(
		jit->lljit, LLVMOrcLLJITGetMainJITDylib(jit->lljit), owned);
	return error ? llvm_error(error, F8_ERR_INVALID, "adding the kernels", diag) : F8_OK;
}

/* Adds the cache's object file of the kernels to the JIT, which takes it. */
static f8_status add_object(f8_host_jit *jit, LLVMMemoryBufferRef object,
			    const f8_kernel_cache_entry *entry, f8_diag *diag) {
	LLVMErrorRef error = LLVMOrcLLJITAddObjectFile(
		jit->lljit, LLVMOrcLLJITGetMainJITDylib(jit->lljit), object);
	if (!error)
		return F8_OK;
	f8_status status = llvm_error(error, F8_ERR_INVALID, "adding the cached kernels", diag);
	f8_diag_hint(diag, "remove %s/%s.o, or run with F8C_KERNEL_CACHE=off", entry->folder,
		     entry->key);
	return status;
}

/* Compiles what the JIT holds by looking every kernel up. */
static f8_status look_up_all(f8_host_jit *jit, f8_diag *diag) {
	for (uint32_t i = 0; i < jit->n_kernels; i++) {
		LLVMOrcExecutorAddress address = 0;
		LLVMErrorRef error = LLVMOrcLLJITLookup(jit->lljit, &address, jit->names[i]);
		if (error)
			return llvm_error(error, F8_ERR_INVALID, jit->names[i], diag);
		jit->entries[i] = (f8_host_kernel)(uintptr_t)address;
	}
	return F8_OK;
}

/*
 * Lowers the kernels and compiles them, or, when `cache_folder` holds them compiled for this
 * machine, links its object file instead of running LLVM's optimizer and code generator; a
 * module compiled here is stored there.
 */
static f8_status compile(f8_host_jit *jit, const f8_kernel *const *kernels, uint32_t n,
			 const char *cache_folder, f8_diag *diag) {
	LLVMOrcThreadSafeContextRef shared = LLVMOrcCreateNewThreadSafeContext();
	LLVMModuleRef module;
	f8_status status = lower_module(jit, kernels, n, LLVMOrcThreadSafeContextGetContext(shared),
					&module, diag);
	f8_kernel_cache_entry entry = {.lock = -1};
	bool cached = false;
	LLVMMemoryBufferRef object = NULL;
	if (!status && cache_folder) {
		char *target = target_description(jit);
		cached = target && f8_kernel_cache_open(cache_folder, module, target, &entry);
		f8_free(target);
		object = cached ? f8_kernel_cache_load(&entry) : NULL;
	}
	if (!status && object) {
		LLVMDisposeModule(module);
		status = add_object(jit, object, &entry, diag);
		jit->cached = true;
	} else if (!status) {
		status = optimize_module(jit, module, diag);
		if (status)
			LLVMDisposeModule(module);
		else
			status = add_module(jit, module, shared, cached, diag);
	}
	LLVMOrcDisposeThreadSafeContext(shared); // the module keeps its context alive
	if (!status)
		status = look_up_all(jit, diag);
	if (!status && cached && !object && jit->capture.count == 1 && jit->capture.bytes)
		f8_kernel_cache_store(&entry, jit->capture.bytes, jit->capture.size);
	f8_free(jit->capture.bytes); // stored: the JIT runs its own copy
	jit->capture.bytes = NULL;
	f8_kernel_cache_close(&entry);
	return status;
}

f8_status f8_host_jit_create(const f8_kernel *const *kernels, uint32_t n,
			     const char *cache_folder, f8_host_jit **out, f8_diag *diag) {
	*out = NULL;
	f8_host_jit *jit = f8_calloc(1, sizeof *jit);
	if (!jit)
		return f8_diag_set(diag, F8_ERR_NOMEM, "host JIT: out of memory");
	f8_status status = copy_names(jit, kernels, n, diag);
	if (!status)
		status = create_lljit(jit, diag);
	if (!status)
		status = compile(jit, kernels, n, cache_folder, diag);
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

bool f8_host_jit_cached(const f8_host_jit *jit) {
	return jit->cached;
}

void f8_host_jit_destroy(f8_host_jit *jit) {
	if (!jit)
		return;
	if (jit->lljit) {
		LLVMErrorRef error = LLVMOrcDisposeLLJIT(jit->lljit);
		if (error)
			LLVMConsumeError(error);
	}
	f8_free(jit->capture.bytes);
	f8_free(jit->entries);
	f8_free(jit->names);
	f8_free(jit->text);
	f8_free(jit);
}
