/*
 * Kernels -> PTX text (codegen/nvptx.h): one LLVM context and module per call, the NVPTX
 * target machine made once per call (its creation is cheap next to the code generation).
 */
#include "codegen/nvptx.h" // f8_nvptx_compile

#include <pthread.h> // pthread_once
#include <string.h>  // memcpy

#include <llvm-c/Core.h>          // LLVMContextCreate, LLVMModuleCreateWithNameInContext
#include <llvm-c/Target.h>        // LLVMInitializeNVPTXTarget, LLVMCreateTargetDataLayout
#include <llvm-c/TargetMachine.h> // LLVMCreateTargetMachine, LLVMTargetMachineEmitToMemoryBuffer

#include "ir/alloc.h" // f8_malloc

static pthread_once_t nvptx_once = PTHREAD_ONCE_INIT;

static void nvptx_initialize(void) {
	LLVMInitializeNVPTXTargetInfo();
	LLVMInitializeNVPTXTarget();
	LLVMInitializeNVPTXTargetMC();
	LLVMInitializeNVPTXAsmPrinter();
}

/* The NVPTX target machine into *machine. */
static f8_status nvptx_machine(LLVMTargetMachineRef *machine, f8_diag *diag) {
	pthread_once(&nvptx_once, nvptx_initialize);
	LLVMTargetRef target;
	char *message = NULL;
	if (LLVMGetTargetFromTriple(F8_NVPTX_TRIPLE, &target, &message)) {
		f8_status status = f8_diag_set(diag, F8_ERR_UNSUPPORTED,
					       "no NVPTX target in this LLVM: %s",
					       message ? message : "");
		f8_diag_hint(diag, "f8c needs LLVM 19 built with the NVPTX back end (llvm-19-dev)");
		LLVMDisposeMessage(message);
		return status;
	}
	*machine = LLVMCreateTargetMachine(target, F8_NVPTX_TRIPLE, F8_NVPTX_CPU,
					   F8_NVPTX_FEATURES, LLVMCodeGenLevelDefault,
					   LLVMRelocDefault, LLVMCodeModelDefault);
	return F8_OK;
}

/* The module's PTX text into *text, in memory of f8_malloc. */
static f8_status emit_ptx(LLVMTargetMachineRef machine, LLVMModuleRef module, char **text,
			  f8_diag *diag) {
	LLVMMemoryBufferRef buffer = NULL;
	char *message = NULL;
	if (LLVMTargetMachineEmitToMemoryBuffer(machine, module, LLVMAssemblyFile, &message,
						&buffer)) {
		f8_status status = f8_diag_set(diag, F8_ERR_INVALID,
					       "the NVPTX back end failed: %s",
					       message ? message : "");
		LLVMDisposeMessage(message);
		return status;
	}
	size_t size = LLVMGetBufferSize(buffer);
	f8_status status = F8_OK;
	if ((*text = f8_malloc(size + 1))) {
		memcpy(*text, LLVMGetBufferStart(buffer), size);
		(*text)[size] = '\0';
	} else {
		status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory for %zu bytes of PTX",
				     size);
	}
	LLVMDisposeMemoryBuffer(buffer);
	return status;
}

f8_status f8_nvptx_compile(const f8_kernel *const *kernels, uint32_t n, char **ptx,
			   f8_launch_geometry *geometry, f8_diag *diag) {
	*ptx = NULL;
	LLVMTargetMachineRef machine = NULL;
	f8_status status = nvptx_machine(&machine, diag);
	if (status)
		return status;
	LLVMContextRef context = LLVMContextCreate();
	LLVMModuleRef module = LLVMModuleCreateWithNameInContext("f8c", context);
	LLVMSetTarget(module, F8_NVPTX_TRIPLE);
	LLVMTargetDataRef layout = LLVMCreateTargetDataLayout(machine);
	LLVMSetModuleDataLayout(module, layout);
	LLVMDisposeTargetData(layout);
	for (uint32_t i = 0; !status && i < n; i++)
		status = f8_llvm_lower(module, kernels[i], F8_LLVM_TARGET_NVPTX, &geometry[i],
				       diag);
	if (!status)
		status = f8_llvm_optimize(module, machine, diag);
	if (!status)
		status = emit_ptx(machine, module, ptx, diag);
	LLVMDisposeModule(module);
	LLVMContextDispose(context);
	LLVMDisposeTargetMachine(machine);
	return status;
}
