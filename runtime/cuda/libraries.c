/*
 * The CUDA libraries opened by dlopen, their functions looked up by dlsym
 * (runtime/cuda/libraries.h).
 */
#include "runtime/cuda/libraries.h" // f8_cuda_api, f8_cuda_load

#include <dlfcn.h>  // dlopen, dlsym, dlerror
#include <stdio.h>  // snprintf
#include <stdlib.h> // getenv

f8_cuda_api_table f8_cuda_api;

static unsigned opened; // the f8_cuda_library bits loaded so far

#define F8_CUDA_STRING_OF(x) #x
#define F8_CUDA_NAME_OF(function) F8_CUDA_STRING_OF(function) // after expansion: cuMemAlloc_v2

/* The oldest cuDNN whose composite attention graphs f8c builds (runtime/cuda/attention.h). */
enum { OLDEST_CUDNN = 91400 };
/* The oldest NCCL f8c's communicators are written for (its ncclConfig_t, ncclCommSplit). */
enum { OLDEST_NCCL = 22803 };

typedef struct library_info {
	f8_cuda_library bit;
	const char *file;  // the soname
	const char *where; // for the hint: what provides it
} library_info;

static const library_info libraries_known[] = {
	{F8_CUDA_LIBRARY_DRIVER, "libcuda.so.1", "the NVIDIA driver (580 or newer)"},
	{F8_CUDA_LIBRARY_CUBLASLT, "libcublasLt.so.13", "the CUDA 13 toolkit's cuBLAS"},
	{F8_CUDA_LIBRARY_CUDNN, "libcudnn.so.9", "cuDNN 9.14 or newer for CUDA 13"},
	{F8_CUDA_LIBRARY_NCCL, "libnccl.so.2", "NCCL 2.28.3 or newer for CUDA 13"},
};

/* dlopen by the loader's search, then in the toolkit's usual folders. */
static void *open_library(const char *file) {
	void *handle = dlopen(file, RTLD_NOW | RTLD_LOCAL);
	const char *home = getenv("CUDA_HOME");
	const char *folders[] = {home, "/usr/local/cuda"};
	for (size_t i = 0; !handle && i < sizeof folders / sizeof *folders; i++) {
		if (!folders[i] || !*folders[i])
			continue;
		char path[4096];
		snprintf(path, sizeof path, "%s/lib64/%s", folders[i], file);
		handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	}
	return handle;
}

/* Looks up `name` in `handle` into *slot; false when it is missing. */
static bool find(void *handle, const char *name, void **slot) {
	*slot = dlsym(handle, name);
	return *slot != NULL;
}

static f8_status fill(const library_info *library, void *handle, f8_diag *diag) {
	const char *missing = NULL;
#define F8_CUDA_FIND(function)                                                            \
	if (!missing && !find(handle, F8_CUDA_NAME_OF(function), (void **)&f8_cuda_api.function)) \
		missing = F8_CUDA_NAME_OF(function);
	switch (library->bit) {
	case F8_CUDA_LIBRARY_DRIVER:
		F8_CUDA_DRIVER_FUNCTIONS(F8_CUDA_FIND)
		break;
	case F8_CUDA_LIBRARY_CUBLASLT:
		F8_CUBLASLT_FUNCTIONS(F8_CUDA_FIND)
		break;
	case F8_CUDA_LIBRARY_CUDNN:
		F8_CUDNN_FUNCTIONS(F8_CUDA_FIND)
		break;
	case F8_CUDA_LIBRARY_NCCL:
		F8_NCCL_FUNCTIONS(F8_CUDA_FIND)
		break;
	}
#undef F8_CUDA_FIND
	if (missing) {
		f8_status status = f8_diag_set(diag, F8_ERR_UNSUPPORTED, "%s has no %s: it is older than f8c needs",
					       library->file, missing);
		f8_diag_hint(diag, "install %s", library->where);
		return status;
	}
	return F8_OK;
}

f8_status f8_cuda_load(unsigned libraries, f8_diag *diag) {
	for (size_t i = 0; i < sizeof libraries_known / sizeof *libraries_known; i++) {
		const library_info *library = &libraries_known[i];
		if (!(libraries & library->bit) || (opened & library->bit))
			continue;
		void *handle = open_library(library->file);
		if (!handle) {
			f8_status status = f8_diag_set(diag, F8_ERR_UNSUPPORTED,
						       "the CUDA backend needs %s, which could not be opened: %s",
						       library->file, dlerror());
			f8_diag_hint(diag, "install %s, or put its folder on LD_LIBRARY_PATH (or set "
					   "CUDA_HOME)", library->where);
			return status;
		}
		f8_status status = fill(library, handle, diag);
		if (status) {
			dlclose(handle);
			return status;
		}
		if (library->bit == F8_CUDA_LIBRARY_CUDNN) {
			size_t version = f8_cuda_api.cudnnGetVersion();
			if (version < OLDEST_CUDNN) {
				dlclose(handle);
				status = f8_diag_set(diag, F8_ERR_UNSUPPORTED,
						     "%s is cuDNN %zu.%zu.%zu; f8c's attention needs 9.14 or newer",
						     library->file, version / 10000, version / 100 % 100,
						     version % 100);
				f8_diag_hint(diag, "install %s", library->where);
				return status;
			}
		}
		int nccl = 0;
		if (library->bit == F8_CUDA_LIBRARY_NCCL &&
		    (f8_cuda_api.ncclGetVersion(&nccl) != ncclSuccess || nccl < OLDEST_NCCL)) {
			dlclose(handle);
			status = f8_diag_set(diag, F8_ERR_UNSUPPORTED, "%s is NCCL %d.%d.%d; f8c's "
					     "communicators need 2.28.3 or newer", library->file,
					     nccl / 10000, nccl / 100 % 100, nccl % 100);
			f8_diag_hint(diag, "install %s", library->where);
			return status;
		}
		opened |= library->bit;
	}
	return F8_OK;
}

bool f8_cuda_loaded(unsigned libraries) {
	return (opened & libraries) == libraries;
}
