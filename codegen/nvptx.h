/*
 * Kernels -> one PTX module for sm_90: each kernel lowered (codegen/llvm_lower.h), LLVM's O2
 * pipeline, then the NVPTX back end's assembly. The runtime loads the text with the CUDA
 * driver (cuModuleLoadData) and launches each entry with its geometry; nothing else of LLVM is
 * needed on the GPU's side.
 */
#ifndef F8_CODEGEN_NVPTX_H
#define F8_CODEGEN_NVPTX_H

#include <stdint.h> // uint32_t

#include "codegen/kir.h"        // f8_kernel
#include "codegen/llvm_lower.h" // f8_launch_geometry
#include "ir/diag.h"            // f8_status, f8_diag

// The target: 64-bit CUDA, Hopper, PTX ISA 8.0 (CUDA 12.0's ptxas and every later one accept
// it; cvt.rn.satfinite.e4m3x2 needs 7.8, max.NaN 7.0).
#define F8_NVPTX_TRIPLE "nvptx64-nvidia-cuda"
#define F8_NVPTX_CPU "sm_90"
#define F8_NVPTX_FEATURES "+ptx80"

/*
 * Compiles `kernels` (n of them, distinct names) into one PTX module. Out: *ptx, the module's
 * text, terminated (the caller frees it with f8_free), and geometry[i], how to launch
 * kernels[i] (the caller's array of n). With `cache_folder` (NULL: none), each kernel's text
 * is kept there under its lowered module's key (codegen/kernel_cache.h) and taken from there
 * the next time, unoptimized and unemitted: the same text. On failure *ptx is NULL and the
 * diagnostic names the kernel: as f8_llvm_lower's, or F8_ERR_UNSUPPORTED when this LLVM has no
 * NVPTX back end.
 */
f8_status f8_nvptx_compile(const f8_kernel *const *kernels, uint32_t n, const char *cache_folder,
			   char **ptx, f8_launch_geometry *geometry, f8_diag *diag);

#endif
