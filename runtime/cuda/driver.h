/*
 * A thin, checked layer over the CUDA driver API: the primary context of device 0, PTX modules
 * (the driver's JIT log kept in the diagnostic), device memory, copies, events and kernel
 * launches by the geometry codegen chose. Every driver call's result is checked; a failure is
 * an f8_diag naming the call with cuGetErrorName and cuGetErrorString.
 *
 * Nothing here includes LLVM or links codegen: the GPU side of f8c loads the PTX text a plan
 * carries and needs only libcuda. Kernels launch by ir/launch.h's geometry, the one codegen
 * chooses and the plan records.
 *
 * Copies and memsets named _async are queued on the given stream (0: the context's default
 * stream) and complete in stream order; the others return when the bytes are in place.
 */
#ifndef F8_RUNTIME_CUDA_DRIVER_H
#define F8_RUNTIME_CUDA_DRIVER_H

#include <stddef.h> // size_t
#include <stdint.h> // uint8_t, uint32_t, int64_t

#include <cuda.h> // CUresult, CUdevice, CUcontext, CUmodule, CUfunction, CUdeviceptr, CUevent

#include "ir/diag.h"   // f8_status, f8_diag
#include "ir/launch.h" // f8_launch_geometry, f8_launch_grid_blocks

/* The device f8c runs on, and its primary context (current on the calling thread). */
typedef struct f8_cuda_device {
	CUdevice device;
	CUcontext context;         // the primary context, retained by f8_cuda_open
	char name[256];            // "NVIDIA H200"
	int multiprocessors;       // 132 on an H200
	int compute_major;         // 9 for Hopper
	int compute_minor;
	size_t total_memory;       // bytes
	int driver_version;        // 13000 for CUDA 13.0
} f8_cuda_device;

/* How to launch one kernel of a PTX module: ir/launch.h's f8_launch_geometry, which codegen
 * chose and the plan or a kernel-case manifest carries. */

/*
 * Turns `result` into a status: F8_OK for CUDA_SUCCESS, else a failure whose message names
 * `call` ("cuMemAlloc") with the driver's error name and text, and a hint where one helps (no
 * device, the toolkit's stub libcuda loaded, out of memory). CUDA_ERROR_OUT_OF_MEMORY gives
 * F8_ERR_NOMEM, a PTX the driver cannot compile F8_ERR_INVALID, no device or driver
 * F8_ERR_UNSUPPORTED, anything else F8_ERR_IO (the device failed). `diag` may be NULL.
 */
f8_status f8_cuda_check(CUresult result, const char *call, f8_diag *diag);

/*
 * cuInit, device 0, its primary context retained and made current on this thread, and the
 * device's name and properties into *device. On failure *device holds no context.
 */
f8_status f8_cuda_open(f8_cuda_device *device, f8_diag *diag);

/* As f8_cuda_open, on the device of ordinal `ordinal` (a process's local rank). */
f8_status f8_cuda_open_ordinal(f8_cuda_device *device, int ordinal, f8_diag *diag);

/* Releases the primary context (the driver frees what was left in it when the last user
 * releases it). A device that was not opened is allowed. */
void f8_cuda_close(f8_cuda_device *device);

/*
 * Loads the PTX module `ptx` (text, terminated) into the current context; the driver compiles
 * it for the device now. On failure *module is NULL and the diagnostic carries the driver's
 * JIT error log (ptxas's messages, with the line of the PTX) after the call's error.
 */
f8_status f8_cuda_module_load(const char *ptx, CUmodule *module, f8_diag *diag);

/* Unloads a module; NULL is allowed. Its functions die with it. */
void f8_cuda_module_unload(CUmodule module);

/* The entry called `name` of `module` into *function; F8_ERR_ARGUMENT naming it when the
 * module has none of that name. */
f8_status f8_cuda_module_function(CUmodule module, const char *name, CUfunction *function,
				  f8_diag *diag);

/* Allocates `bytes` (> 0) of device memory into *pointer (0 on failure). Free with
 * f8_cuda_free. */
f8_status f8_cuda_alloc(size_t bytes, CUdeviceptr *pointer, f8_diag *diag);

/* Frees device memory from f8_cuda_alloc; 0 is allowed. */
f8_status f8_cuda_free(CUdeviceptr pointer, f8_diag *diag);

/* Sets `bytes` bytes at `pointer` to `value`, in stream order. */
f8_status f8_cuda_memset_async(CUdeviceptr pointer, uint8_t value, size_t bytes,
			       CUstream stream, f8_diag *diag);

/* Copies `height` rows of `width` bytes, each `from_pitch` bytes after the one before at
 * `from` and `to_pitch` at `to` (device memory both, not overlapping), in stream order. */
f8_status f8_cuda_copy_2d_async(CUdeviceptr to, size_t to_pitch, CUdeviceptr from,
				size_t from_pitch, size_t width, size_t height, CUstream stream,
				f8_diag *diag);

/* Sets `width` bytes of each of `height` rows `pitch` bytes apart, from `pointer`, to `value`,
 * in stream order. */
f8_status f8_cuda_memset_2d_async(CUdeviceptr pointer, size_t pitch, uint8_t value, size_t width,
				  size_t height, CUstream stream, f8_diag *diag);

/* Copies `bytes` from host memory to the device, and from the device to host memory; both
 * return when the copy is complete (after the work queued before them). */
f8_status f8_cuda_copy_to_device(CUdeviceptr destination, const void *source, size_t bytes,
				 f8_diag *diag);
f8_status f8_cuda_copy_to_host(void *destination, CUdeviceptr source, size_t bytes,
			       f8_diag *diag);

/* Copies `bytes` between two device buffers that do not overlap, in stream order. */
f8_status f8_cuda_copy_device_async(CUdeviceptr destination, CUdeviceptr source, size_t bytes,
				    CUstream stream, f8_diag *diag);

/* Copies between host and device memory in stream order: the host memory must stay as it is
 * until the stream has done the copy (pinned memory makes them truly asynchronous; pageable
 * memory works too, staged by the driver). */
f8_status f8_cuda_copy_to_device_async(CUdeviceptr destination, const void *source, size_t bytes,
				       CUstream stream, f8_diag *diag);
f8_status f8_cuda_copy_to_host_async(void *destination, CUdeviceptr source, size_t bytes,
				     CUstream stream, f8_diag *diag);

/* A stream of its own that does not wait for the legacy default stream (one that can be
 * captured into a CUDA graph); destroy allows 0. */
f8_status f8_cuda_stream_create(CUstream *stream, f8_diag *diag);
void f8_cuda_stream_destroy(CUstream stream);

/* Waits for the work queued on `stream`; a kernel's fault shows here. */
f8_status f8_cuda_stream_synchronize(CUstream stream, f8_diag *diag);

/* The device memory free and in all, in bytes. */
f8_status f8_cuda_memory_info(size_t *free_bytes, size_t *total_bytes, f8_diag *diag);

/* Waits for all work of the current context. Errors of kernels that ran since the last
 * check (an illegal address, a trap) show here, as a failure of cuCtxSynchronize. */
f8_status f8_cuda_synchronize(f8_diag *diag);

/* Events for timing: created with timing on; elapsed waits for `end` and gives the time
 * between the two records in milliseconds. */
f8_status f8_cuda_event_create(CUevent *event, f8_diag *diag);
void f8_cuda_event_destroy(CUevent event);
f8_status f8_cuda_event_record(CUevent event, CUstream stream, f8_diag *diag);
f8_status f8_cuda_event_elapsed(CUevent start, CUevent end, float *milliseconds, f8_diag *diag);


/*
 * Stream capture into a CUDA graph: capture_begin starts recording what is queued on `stream`
 * (in thread-local mode: calls of other threads are not caught) instead of running it;
 * capture_end stops and instantiates the recording, which nothing has run yet, into *out (0
 * when the capture failed: a call that cannot be captured, such as a synchronize, ends it with
 * an error); graph_launch queues a recording on a stream. graph_destroy allows 0.
 */
f8_status f8_cuda_capture_begin(CUstream stream, f8_diag *diag);
f8_status f8_cuda_capture_end(CUstream stream, CUgraphExec *out, f8_diag *diag);
f8_status f8_cuda_graph_launch(CUgraphExec graph, CUstream stream, f8_diag *diag);
void f8_cuda_graph_destroy(CUgraphExec graph);

/*
 * Launches `function` (called `name`, for messages) with `geometry` over `rows` rows on
 * `stream`, with kernelParams `args` (args[i] points at parameter i's value: a CUdeviceptr for
 * a buffer, an int64_t for a size, as codegen's ABI says). Queues the launch only: the
 * kernel's own faults show at the next synchronize. F8_ERR_ARGUMENT for a geometry of no
 * threads or rows per block.
 */
f8_status f8_cuda_launch(CUfunction function, const char *name, const f8_launch_geometry *geometry,
			 int64_t rows, void **args, CUstream stream, f8_diag *diag);

#endif
