/*
 * test_llvm_lower's kernel calls: the argument array both targets take (CUDA's kernelParams
 * convention), and, with --gpu, the same call on a GPU through the CUDA driver, which is
 * loaded at run time (dlopen), so that the test builds and runs where there is none.
 */
#ifndef F8_TESTS_CODEGEN_GPU_LAUNCH_H
#define F8_TESTS_CODEGEN_GPU_LAUNCH_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // int64_t, uint32_t

#include "codegen/kir.h"        // f8_kernel
#include "codegen/llvm_lower.h" // f8_launch_geometry
#include "ir/dtype.h"           // f8_dtype

enum { TEST_MAX_ARGS = 32 };

/* The arguments of one call: args[i] points at values[i] (a buffer) or sizes[i]. */
typedef struct test_launch {
	void *values[TEST_MAX_ARGS];
	int64_t sizes[TEST_MAX_ARGS];
	void *args[TEST_MAX_ARGS];
	size_t counts[TEST_MAX_ARGS];    // buffers: elements
	f8_dtype dtypes[TEST_MAX_ARGS];  // buffers: the element dtype; sizes: F8_DTYPE_UNDEFINED
	int n;
	bool order_dependent; // sums of f32 whose order differs between the targets
} test_launch;

void test_arg_buffer(test_launch *l, void *buffer, size_t count, f8_dtype dtype);
void test_arg_size(test_launch *l, int64_t size);

/* Loads the driver and `ptx`, whose entries are `kernels` (n) launched with `geometry`;
 * false, with the reason printed, when there is no GPU to run on. */
bool test_gpu_open(const char *ptx, const f8_kernel *const *kernels,
		   const f8_launch_geometry *geometry, uint32_t n);

/* Runs kernel `name` on the GPU with the call's buffers (copied there and back, all of them,
 * so that accumulators start from the host's values); false, printed, on a CUDA error. */
bool test_gpu_run(const char *name, test_launch *l);

#endif
