/*
 * The CUDA libraries, opened at run time: libcuda (the driver), libcublasLt, libcudnn and, for a
 * run on several GPUs, libnccl, each by dlopen when the CUDA backend first needs it, so that one f8c binary runs on machines
 * without a GPU (CI, a laptop) and trains on those with one, and a missing or too-old library
 * is a diagnostic that names it instead of a loader error before main.
 *
 * The functions f8c calls are listed once per library below; each list makes a table of
 * pointers of the functions' own types (from the headers this build compiled against), looked
 * up by the names the headers give them: cuda.h maps some names to versioned symbols
 * (cuMemAlloc is cuMemAlloc_v2), and the table follows, since the lookup stringizes the name
 * after macro expansion. Calls go through the table: `f8_cuda_api.cuInit(0)`.
 *
 * A function that is added to a list must exist in the oldest library f8c supports on its
 * machines: libcuda of driver 580 (CUDA 13.0), cuBLASLt 13.0, cuDNN 9.14, NCCL 2.28.3
 * (../README.md).
 */
#ifndef F8_RUNTIME_CUDA_LIBRARIES_H
#define F8_RUNTIME_CUDA_LIBRARIES_H

#include <stdbool.h> // bool

#include <cublasLt.h>    // cublasLt*
#include <cuda.h>        // cu*
#include <cudnn_graph.h> // cudnnBackend*
#include <nccl.h>        // nccl*

#include "ir/diag.h" // f8_status, f8_diag

/* X(function) for each driver function f8c calls. */
#define F8_CUDA_DRIVER_FUNCTIONS(X)  \
	X(cuGetErrorName)            \
	X(cuGetErrorString)          \
	X(cuInit)                    \
	X(cuDriverGetVersion)        \
	X(cuDeviceGet)               \
	X(cuDeviceGetName)           \
	X(cuDeviceGetAttribute)      \
	X(cuDeviceTotalMem)          \
	X(cuDevicePrimaryCtxRetain)  \
	X(cuDevicePrimaryCtxRelease) \
	X(cuCtxSetCurrent)           \
	X(cuCtxSynchronize)          \
	X(cuModuleLoadDataEx)        \
	X(cuModuleUnload)            \
	X(cuModuleGetFunction)       \
	X(cuFuncSetAttribute)        \
	X(cuMemAlloc)                \
	X(cuMemFree)                 \
	X(cuMemGetInfo)              \
	X(cuMemAllocHost)            \
	X(cuMemFreeHost)             \
	X(cuMemsetD8Async)           \
	X(cuMemsetD2D8Async)         \
	X(cuMemcpyHtoD)              \
	X(cuMemcpyDtoH)              \
	X(cuMemcpyHtoDAsync)         \
	X(cuMemcpyDtoHAsync)         \
	X(cuMemcpyDtoDAsync)         \
	X(cuMemcpy2DAsync)           \
	X(cuStreamCreate)            \
	X(cuStreamDestroy)           \
	X(cuStreamSynchronize)       \
	X(cuStreamWaitEvent)         \
	X(cuLaunchHostFunc)          \
	X(cuStreamBeginCapture)      \
	X(cuStreamEndCapture)        \
	X(cuGraphInstantiateWithFlags) \
	X(cuGraphLaunch)             \
	X(cuGraphExecDestroy)        \
	X(cuGraphDestroy)            \
	X(cuEventCreate)             \
	X(cuEventDestroy)            \
	X(cuEventRecord)             \
	X(cuEventSynchronize)        \
	X(cuEventQuery)              \
	X(cuEventElapsedTime)        \
	X(cuLaunchKernel)

/* X(function) for each cuBLASLt function f8c calls. */
#define F8_CUBLASLT_FUNCTIONS(X)              \
	X(cublasLtGetVersion)                 \
	X(cublasLtGetStatusName)              \
	X(cublasLtGetStatusString)            \
	X(cublasLtCreate)                     \
	X(cublasLtDestroy)                    \
	X(cublasLtMatmulDescCreate)           \
	X(cublasLtMatmulDescDestroy)          \
	X(cublasLtMatmulDescSetAttribute)     \
	X(cublasLtMatrixLayoutCreate)         \
	X(cublasLtMatrixLayoutDestroy)        \
	X(cublasLtMatrixLayoutSetAttribute)   \
	X(cublasLtMatmulPreferenceCreate)     \
	X(cublasLtMatmulPreferenceDestroy)    \
	X(cublasLtMatmulPreferenceSetAttribute) \
	X(cublasLtMatmulAlgoGetHeuristic)     \
	X(cublasLtMatmul)                     \
	X(cublasLtMatrixTransformDescCreate)  \
	X(cublasLtMatrixTransformDescDestroy) \
	X(cublasLtMatrixTransformDescSetAttribute) \
	X(cublasLtMatrixTransform)

/* X(function) for each cuDNN function f8c calls (the backend API of cudnn_graph.h). */
#define F8_CUDNN_FUNCTIONS(X)            \
	X(cudnnGetVersion)               \
	X(cudnnGetErrorString)           \
	X(cudnnGetLastErrorString)       \
	X(cudnnCreate)                   \
	X(cudnnDestroy)                  \
	X(cudnnSetStream)                \
	X(cudnnBackendCreateDescriptor)  \
	X(cudnnBackendDestroyDescriptor) \
	X(cudnnBackendSetAttribute)      \
	X(cudnnBackendGetAttribute)      \
	X(cudnnBackendFinalize)          \
	X(cudnnBackendExecute)

/* X(function) for each NCCL function f8c calls (runtime/cuda/nccl.h). */
#define F8_NCCL_FUNCTIONS(X)        \
	X(ncclGetVersion)           \
	X(ncclGetErrorString)       \
	X(ncclGetLastError)         \
	X(ncclGetUniqueId)          \
	X(ncclCommInitRankConfig)   \
	X(ncclCommSplit)            \
	X(ncclCommGetAsyncError)    \
	X(ncclCommFinalize)         \
	X(ncclCommDestroy)          \
	X(ncclCommAbort)            \
	X(ncclAllReduce)            \
	X(ncclAllGather)            \
	X(ncclReduceScatter)        \
	X(ncclSend)                 \
	X(ncclRecv)                 \
	X(ncclGroupStart)           \
	X(ncclGroupEnd)

#define F8_CUDA_API_FIELD(function) __typeof__(&function) function;

/* The tables; a library's part is set once f8_cuda_load has opened it. */
typedef struct f8_cuda_api_table {
	F8_CUDA_DRIVER_FUNCTIONS(F8_CUDA_API_FIELD)
	F8_CUBLASLT_FUNCTIONS(F8_CUDA_API_FIELD)
	F8_CUDNN_FUNCTIONS(F8_CUDA_API_FIELD)
	F8_NCCL_FUNCTIONS(F8_CUDA_API_FIELD)
} f8_cuda_api_table;

#undef F8_CUDA_API_FIELD

extern f8_cuda_api_table f8_cuda_api;

/* The libraries, one bit each, for f8_cuda_load. */
typedef enum f8_cuda_library {
	F8_CUDA_LIBRARY_DRIVER = 1,   // libcuda.so.1
	F8_CUDA_LIBRARY_CUBLASLT = 2, // libcublasLt.so.13
	F8_CUDA_LIBRARY_CUDNN = 4,    // libcudnn.so.9
	F8_CUDA_LIBRARY_NCCL = 8,     // libnccl.so.2
} f8_cuda_library;

/*
 * Opens the libraries in `libraries` (an OR of f8_cuda_library) that are not open yet and
 * fills their part of f8_cuda_api. A library is looked for by the loader's search path
 * (LD_LIBRARY_PATH, the ld.so cache), then in $CUDA_HOME/lib64 and /usr/local/cuda/lib64.
 * F8_ERR_UNSUPPORTED when one is missing or lacks a function (the message names the library
 * and the function, the hint where to get it), or when cuDNN is older than 9.14 (the version
 * f8c's attention graphs are written for) or NCCL older than 2.28.3. Not thread-safe: call it from one thread before
 * others use the table.
 */
f8_status f8_cuda_load(unsigned libraries, f8_diag *diag);

/* True when every library of `libraries` is open. */
bool f8_cuda_loaded(unsigned libraries);

#endif
