/*
 * The GPU side of test_llvm_lower (gpu_launch.h): the few CUDA driver functions it needs,
 * looked up in libcuda.so.1 with dlsym, with their stable ABI declared here.
 */
#define _POSIX_C_SOURCE 200809L // dlopen

#include "tests/codegen/gpu_launch.h" // test_launch, test_gpu_run

#include <dlfcn.h>  // dlopen, dlsym
#include <stdio.h>  // printf
#include <string.h> // strcmp

#include "ir/dtype.h" // f8_dtype_get_info

void test_arg_buffer(test_launch *l, void *buffer, size_t count, f8_dtype dtype) {
	l->values[l->n] = buffer;
	l->args[l->n] = &l->values[l->n];
	l->counts[l->n] = count;
	l->dtypes[l->n] = dtype;
	l->n++;
}

void test_arg_size(test_launch *l, int64_t size) {
	l->sizes[l->n] = size;
	l->args[l->n] = &l->sizes[l->n];
	l->dtypes[l->n] = F8_DTYPE_UNDEFINED;
	l->n++;
}

typedef int cu_result; // CUresult: 0 is CUDA_SUCCESS
typedef unsigned long long cu_pointer;
typedef struct cu_opaque *cu_handle; // CUcontext, CUmodule, CUfunction

static struct {
	cu_result (*init)(unsigned flags);
	cu_result (*device_get)(int *device, int ordinal);
	cu_result (*primary_context)(cu_handle *context, int device);
	cu_result (*set_current)(cu_handle context);
	cu_result (*load_module)(cu_handle *module, const void *image);
	cu_result (*get_function)(cu_handle *function, cu_handle module, const char *name);
	cu_result (*alloc)(cu_pointer *pointer, size_t bytes);
	cu_result (*free)(cu_pointer pointer);
	cu_result (*to_device)(cu_pointer to, const void *from, size_t bytes);
	cu_result (*to_host)(void *to, cu_pointer from, size_t bytes);
	cu_result (*launch)(cu_handle function, unsigned grid_x, unsigned grid_y, unsigned grid_z,
			    unsigned block_x, unsigned block_y, unsigned block_z, unsigned shared,
			    void *stream, void **params, void **extra);
	cu_result (*synchronize)(void);
	cu_result (*error_string)(cu_result error, const char **text);
	cu_handle module;
	const f8_kernel *const *kernels;
	const f8_launch_geometry *geometry;
	uint32_t n_kernels;
} cuda;

static bool cuda_ok(cu_result result, const char *what) {
	if (result == 0)
		return true;
	const char *text = "?";
	if (cuda.error_string)
		cuda.error_string(result, &text);
	printf("CUDA: %s: error %d (%s)\n", what, result, text);
	return false;
}

/* dlsym's object pointer into a function pointer, through memcpy as POSIX allows. */
static bool lookup(void *library, const char *name, void *function) {
	void *symbol = dlsym(library, name);
	if (!symbol)
		printf("CUDA: libcuda.so.1 has no %s\n", name);
	memcpy(function, &symbol, sizeof symbol);
	return symbol != NULL;
}

bool test_gpu_open(const char *ptx, const f8_kernel *const *kernels,
		   const f8_launch_geometry *geometry, uint32_t n) {
	void *library = dlopen("libcuda.so.1", RTLD_NOW);
	if (!library) {
		printf("CUDA: no driver (%s)\n", dlerror());
		return false;
	}
	bool found = lookup(library, "cuInit", &cuda.init) &&
		     lookup(library, "cuDeviceGet", &cuda.device_get) &&
		     lookup(library, "cuDevicePrimaryCtxRetain", &cuda.primary_context) &&
		     lookup(library, "cuCtxSetCurrent", &cuda.set_current) &&
		     lookup(library, "cuModuleLoadData", &cuda.load_module) &&
		     lookup(library, "cuModuleGetFunction", &cuda.get_function) &&
		     lookup(library, "cuMemAlloc_v2", &cuda.alloc) &&
		     lookup(library, "cuMemFree_v2", &cuda.free) &&
		     lookup(library, "cuMemcpyHtoD_v2", &cuda.to_device) &&
		     lookup(library, "cuMemcpyDtoH_v2", &cuda.to_host) &&
		     lookup(library, "cuLaunchKernel", &cuda.launch) &&
		     lookup(library, "cuCtxSynchronize", &cuda.synchronize) &&
		     lookup(library, "cuGetErrorString", &cuda.error_string);
	int device;
	cu_handle context;
	if (!found || !cuda_ok(cuda.init(0), "cuInit") ||
	    !cuda_ok(cuda.device_get(&device, 0), "cuDeviceGet") ||
	    !cuda_ok(cuda.primary_context(&context, device), "cuDevicePrimaryCtxRetain") ||
	    !cuda_ok(cuda.set_current(context), "cuCtxSetCurrent") ||
	    !cuda_ok(cuda.load_module(&cuda.module, ptx), "cuModuleLoadData"))
		return false;
	cuda.kernels = kernels;
	cuda.geometry = geometry;
	cuda.n_kernels = n;
	return true;
}

/* The launch's grid: min(ceil(rows / rows_per_block), max_blocks), at least 1 (llvm_lower.h),
 * rows the product of the sizes the kernel's grid_sizes name. */
static unsigned grid_of(const f8_kernel *kernel, const f8_launch_geometry *geometry,
			const test_launch *l) {
	int64_t rows = 1;
	for (uint32_t i = 0; i < kernel->n_grid_sizes; i++)
		rows *= l->sizes[kernel->grid_sizes[i]];
	int64_t blocks = (rows + geometry->rows_per_block - 1) / geometry->rows_per_block;
	if (blocks > geometry->max_blocks)
		blocks = geometry->max_blocks;
	return blocks < 1 ? 1u : (unsigned)blocks;
}

bool test_gpu_run(const char *name, test_launch *l) {
	uint32_t k = 0;
	while (k < cuda.n_kernels && strcmp(cuda.kernels[k]->name, name) != 0)
		k++;
	cu_handle function;
	if (k == cuda.n_kernels || !cuda_ok(cuda.get_function(&function, cuda.module, name), name))
		return false;
	cu_pointer device[TEST_MAX_ARGS] = {0};
	void *args[TEST_MAX_ARGS];
	bool ok = true;
	for (int i = 0; i < l->n; i++) {
		args[i] = &l->sizes[i];
		if (l->dtypes[i] == F8_DTYPE_UNDEFINED)
			continue;
		size_t bytes = l->counts[i] * f8_dtype_get_info(l->dtypes[i])->bytes;
		ok = ok && cuda_ok(cuda.alloc(&device[i], bytes + 1), "cuMemAlloc") &&
		     cuda_ok(cuda.to_device(device[i], l->values[i], bytes), "cuMemcpyHtoD");
		args[i] = &device[i];
	}
	const f8_launch_geometry *geometry = &cuda.geometry[k];
	unsigned grid = grid_of(cuda.kernels[k], geometry, l);
	ok = ok && cuda_ok(cuda.launch(function, grid, 1, 1, geometry->threads_per_block, 1, 1, 0,
				       NULL, args, NULL), name) &&
	     cuda_ok(cuda.synchronize(), name);
	for (int i = 0; i < l->n; i++) {
		if (l->dtypes[i] == F8_DTYPE_UNDEFINED || !device[i])
			continue;
		size_t bytes = l->counts[i] * f8_dtype_get_info(l->dtypes[i])->bytes;
		ok = ok && cuda_ok(cuda.to_host(l->values[i], device[i], bytes), "cuMemcpyDtoH");
		cuda.free(device[i]);
	}
	return ok;
}
