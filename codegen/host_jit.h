/*
 * Kernels -> host machine code in an ORC LLJIT, for the CPU backend: each kernel lowered for
 * the host (codegen/llvm_lower.h), LLVM's O2 pipeline, then compiled for this machine's CPU.
 * A kernel is then called as `fn(args)` with CUDA's kernelParams convention, the same argument
 * array the GPU runtime passes to cuLaunchKernel.
 */
#ifndef F8_CODEGEN_HOST_JIT_H
#define F8_CODEGEN_HOST_JIT_H

#include <stdbool.h> // bool
#include <stdint.h>  // uint32_t

#include "codegen/kir.h" // f8_kernel
#include "ir/diag.h"     // f8_status, f8_diag

/* The compiled kernels of one f8_host_jit_create call. */
typedef struct f8_host_jit f8_host_jit;

/* A compiled kernel: args[i] points at parameter i's value (a `void *` buffer pointer or an
 * `int64_t` size). Runs the whole grid on the calling thread. */
typedef void (*f8_host_kernel)(void **args);

/*
 * Compiles `kernels` (n of them, distinct names) into a new JIT: lowers, optimizes and compiles
 * all of them now, so that lookups only look up. The kernels are not referred to afterwards.
 * `cache_folder` (NULL: none) keeps compiled kernels between runs (codegen/kernel_cache.h):
 * kernels found there are linked without LLVM's optimizer and code generator, and kernels
 * compiled here are stored there.
 * Out: *jit, the caller's (f8_host_jit_destroy), NULL on failure with the diagnostic (as
 * f8_llvm_lower's, or F8_ERR_UNSUPPORTED when LLVM cannot make a JIT for this machine). Safe
 * to call from several threads: LLVM's native target is initialised once.
 */
f8_status f8_host_jit_create(const f8_kernel *const *kernels, uint32_t n,
			     const char *cache_folder, f8_host_jit **jit, f8_diag *diag);

/* The kernel called `name`, or NULL when the JIT holds none of that name. */
f8_host_kernel f8_host_jit_lookup(const f8_host_jit *jit, const char *name);

/* Whether the JIT's code came from its cache folder's object file rather than LLVM. */
bool f8_host_jit_cached(const f8_host_jit *jit);

/* Frees the JIT and its code; NULL is allowed. Its kernels' pointers die with it. */
void f8_host_jit_destroy(f8_host_jit *jit);

#endif
