/*
 * The CUDA driver layer: each driver call made once, here, with its result checked and turned
 * into a diagnostic (runtime/cuda/driver.h).
 */
#include "runtime/cuda/driver.h"    // f8_cuda_*
#include "runtime/cuda/libraries.h" // f8_cuda_api, f8_cuda_load

#include <stdarg.h> // va_list, va_start, va_end
#include <stdint.h> // uintptr_t
#include <stdio.h>  // vsnprintf
#include <string.h> // memset, strlen

/* Adds printf-style text after the diagnostic's message, truncated to what it holds (written
 * at the message's end: none of the arguments may point into it). `diag` may be NULL. */
static void append(f8_diag *diag, const char *format, ...) __attribute__((format(printf, 2, 3)));
static void append(f8_diag *diag, const char *format, ...) {
	if (!diag)
		return;
	size_t used = strlen(diag->message);
	va_list args;
	va_start(args, format);
	vsnprintf(diag->message + used, sizeof diag->message - used, format, args);
	va_end(args);
}

/* The driver's name and text of `result`, for messages; never NULL. */
static void error_texts(CUresult result, const char **name, const char **text) {
	*name = "CUDA_ERROR_UNKNOWN";
	*text = "unknown error";
	if (!f8_cuda_loaded(F8_CUDA_LIBRARY_DRIVER))
		return;
	if (f8_cuda_api.cuGetErrorName(result, name) != CUDA_SUCCESS || !*name)
		*name = "CUDA_ERROR_UNKNOWN";
	if (f8_cuda_api.cuGetErrorString(result, text) != CUDA_SUCCESS || !*text)
		*text = "unknown error";
}

static f8_status status_of(CUresult result) {
	switch (result) {
	case CUDA_ERROR_OUT_OF_MEMORY:
		return F8_ERR_NOMEM;
	case CUDA_ERROR_INVALID_PTX:
	case CUDA_ERROR_INVALID_IMAGE:
	case CUDA_ERROR_NO_BINARY_FOR_GPU:
	case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
		return F8_ERR_INVALID;
	case CUDA_ERROR_NO_DEVICE:
	case CUDA_ERROR_STUB_LIBRARY:
	case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
	case CUDA_ERROR_JIT_COMPILER_NOT_FOUND:
		return F8_ERR_UNSUPPORTED;
	default:
		return F8_ERR_IO;
	}
}

f8_status f8_cuda_check(CUresult result, const char *call, f8_diag *diag) {
	if (result == CUDA_SUCCESS)
		return F8_OK;
	const char *name, *text;
	error_texts(result, &name, &text);
	f8_status status = f8_diag_set(diag, status_of(result), "%s failed: %s (%s)", call, name,
				       text);
	switch (result) {
	case CUDA_ERROR_NO_DEVICE:
		f8_diag_hint(diag, "no CUDA device is visible: check nvidia-smi and "
				   "CUDA_VISIBLE_DEVICES");
		break;
	case CUDA_ERROR_STUB_LIBRARY:
		f8_diag_hint(diag, "the CUDA toolkit's stub libcuda.so was loaded instead of the "
				   "driver's: run where the NVIDIA driver is installed, and keep "
				   "lib64/stubs off LD_LIBRARY_PATH");
		break;
	case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
		f8_diag_hint(diag, "the NVIDIA kernel module and libcuda differ in version: use "
				   "the pair that the driver installed");
		break;
	case CUDA_ERROR_OUT_OF_MEMORY:
		f8_diag_hint(diag, "the device is out of memory: use smaller sizes, or free what "
				   "another process holds (nvidia-smi lists them)");
		break;
	default:
		break;
	}
	return status;
}

f8_status f8_cuda_open(f8_cuda_device *device, f8_diag *diag) {
	return f8_cuda_open_ordinal(device, 0, diag);
}

f8_status f8_cuda_open_ordinal(f8_cuda_device *device, int ordinal, f8_diag *diag) {
	memset(device, 0, sizeof *device);
	f8_status status = f8_cuda_load(F8_CUDA_LIBRARY_DRIVER, diag);
	if (status)
		return status;
	status = f8_cuda_check(f8_cuda_api.cuInit(0), "cuInit", diag);
	if (!status)
		status = f8_cuda_check(f8_cuda_api.cuDriverGetVersion(&device->driver_version),
				       "cuDriverGetVersion", diag);
	if (!status)
		status = f8_cuda_check(f8_cuda_api.cuDeviceGet(&device->device, ordinal), "cuDeviceGet", diag);
	if (!status)
		status = f8_cuda_check(f8_cuda_api.cuDevicePrimaryCtxRetain(&device->context, device->device),
				       "cuDevicePrimaryCtxRetain", diag);
	if (status) {
		device->context = NULL;
		return status;
	}
	status = f8_cuda_check(f8_cuda_api.cuCtxSetCurrent(device->context), "cuCtxSetCurrent", diag);
	if (!status)
		status = f8_cuda_check(f8_cuda_api.cuDeviceGetName(device->name, (int)sizeof device->name,
						       device->device),
				       "cuDeviceGetName", diag);
	if (!status)
		status = f8_cuda_check(
			f8_cuda_api.cuDeviceGetAttribute(&device->multiprocessors,
					     CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device->device),
			"cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)", diag);
	if (!status)
		status = f8_cuda_check(
			f8_cuda_api.cuDeviceGetAttribute(&device->compute_major,
					     CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
					     device->device),
			"cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)", diag);
	if (!status)
		status = f8_cuda_check(
			f8_cuda_api.cuDeviceGetAttribute(&device->compute_minor,
					     CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
					     device->device),
			"cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)", diag);
	if (!status)
		status = f8_cuda_check(f8_cuda_api.cuDeviceTotalMem(&device->total_memory, device->device),
				       "cuDeviceTotalMem", diag);
	if (status)
		f8_cuda_close(device);
	return status;
}

void f8_cuda_close(f8_cuda_device *device) {
	if (!device->context)
		return;
	// Nothing to report to: a release that fails leaves the context to the process's end.
	(void)f8_cuda_api.cuDevicePrimaryCtxRelease(device->device);
	device->context = NULL;
}

f8_status f8_cuda_module_load(const char *ptx, CUmodule *module, f8_diag *diag) {
	*module = NULL;
	// The driver writes ptxas's messages into these and the size back into the option.
	char error_log[8192] = {0};
	CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
	void *values[] = {error_log, (void *)(uintptr_t)(sizeof error_log - 1)};
	CUresult result = f8_cuda_api.cuModuleLoadDataEx(module, ptx, 2, options, values);
	if (result == CUDA_SUCCESS)
		return F8_OK;
	*module = NULL;
	f8_status status = f8_cuda_check(result, "cuModuleLoadDataEx", diag);
	if (error_log[0]) // after the call's error, as much of the log as the message holds
		append(diag, ": %s", error_log);
	if (status == F8_ERR_INVALID)
		f8_diag_hint(diag, "the PTX did not compile for this device: the log above is "
				   "ptxas's; f8c's PTX targets sm_90 with PTX ISA 8.0");
	return status;
}

void f8_cuda_module_unload(CUmodule module) {
	if (module)
		(void)f8_cuda_api.cuModuleUnload(module); // nothing to report to; the context frees it at worst
}

f8_status f8_cuda_module_function(CUmodule module, const char *name, CUfunction *function,
				  f8_diag *diag) {
	CUresult result = f8_cuda_api.cuModuleGetFunction(function, module, name);
	if (result == CUDA_ERROR_NOT_FOUND) {
		*function = NULL;
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "cuModuleGetFunction: the module has no "
							  "kernel called %s", name);
	}
	return f8_cuda_check(result, "cuModuleGetFunction", diag);
}

f8_status f8_cuda_alloc(size_t bytes, CUdeviceptr *pointer, f8_diag *diag) {
	*pointer = 0;
	f8_status status = f8_cuda_check(f8_cuda_api.cuMemAlloc(pointer, bytes), "cuMemAlloc", diag);
	if (status) {
		*pointer = 0;
		append(diag, " (%zu bytes)", bytes); // the size helps more than the driver's text
	}
	return status;
}

f8_status f8_cuda_free(CUdeviceptr pointer, f8_diag *diag) {
	return pointer ? f8_cuda_check(f8_cuda_api.cuMemFree(pointer), "cuMemFree", diag) : F8_OK;
}

f8_status f8_cuda_memset_async(CUdeviceptr pointer, uint8_t value, size_t bytes,
			       CUstream stream, f8_diag *diag) {
	return f8_cuda_check(f8_cuda_api.cuMemsetD8Async(pointer, value, bytes, stream), "cuMemsetD8Async",
			     diag);
}

f8_status f8_cuda_copy_2d_async(CUdeviceptr to, size_t to_pitch, CUdeviceptr from,
				size_t from_pitch, size_t width, size_t height, CUstream stream,
				f8_diag *diag) {
	if (!width || !height)
		return F8_OK;
	CUDA_MEMCPY2D copy = {.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = from,
			      .srcPitch = from_pitch, .dstMemoryType = CU_MEMORYTYPE_DEVICE,
			      .dstDevice = to, .dstPitch = to_pitch, .WidthInBytes = width,
			      .Height = height};
	return f8_cuda_check(f8_cuda_api.cuMemcpy2DAsync(&copy, stream), "cuMemcpy2DAsync", diag);
}

f8_status f8_cuda_memset_2d_async(CUdeviceptr pointer, size_t pitch, uint8_t value, size_t width,
				  size_t height, CUstream stream, f8_diag *diag) {
	return f8_cuda_check(f8_cuda_api.cuMemsetD2D8Async(pointer, pitch, value, width, height,
							   stream),
			     "cuMemsetD2D8Async", diag);
}

f8_status f8_cuda_copy_to_device(CUdeviceptr destination, const void *source, size_t bytes,
				 f8_diag *diag) {
	return f8_cuda_check(f8_cuda_api.cuMemcpyHtoD(destination, source, bytes), "cuMemcpyHtoD", diag);
}

f8_status f8_cuda_copy_to_host(void *destination, CUdeviceptr source, size_t bytes,
			       f8_diag *diag) {
	return f8_cuda_check(f8_cuda_api.cuMemcpyDtoH(destination, source, bytes), "cuMemcpyDtoH", diag);
}

f8_status f8_cuda_copy_device_async(CUdeviceptr destination, CUdeviceptr source, size_t bytes,
				    CUstream stream, f8_diag *diag) {
	return f8_cuda_check(f8_cuda_api.cuMemcpyDtoDAsync(destination, source, bytes, stream),
			     "cuMemcpyDtoDAsync", diag);
}

f8_status f8_cuda_synchronize(f8_diag *diag) {
	return f8_cuda_check(f8_cuda_api.cuCtxSynchronize(), "cuCtxSynchronize", diag);
}

f8_status f8_cuda_copy_to_device_async(CUdeviceptr destination, const void *source, size_t bytes,
				       CUstream stream, f8_diag *diag) {
	return f8_cuda_check(f8_cuda_api.cuMemcpyHtoDAsync(destination, source, bytes, stream),
			     "cuMemcpyHtoDAsync", diag);
}

f8_status f8_cuda_copy_to_host_async(void *destination, CUdeviceptr source, size_t bytes,
				     CUstream stream, f8_diag *diag) {
	return f8_cuda_check(f8_cuda_api.cuMemcpyDtoHAsync(destination, source, bytes, stream),
			     "cuMemcpyDtoHAsync", diag);
}

f8_status f8_cuda_stream_create(CUstream *stream, f8_diag *diag) {
	*stream = NULL;
	return f8_cuda_check(f8_cuda_api.cuStreamCreate(stream, CU_STREAM_NON_BLOCKING),
			     "cuStreamCreate", diag);
}

void f8_cuda_stream_destroy(CUstream stream) {
	if (stream)
		(void)f8_cuda_api.cuStreamDestroy(stream); // nothing to report to
}

f8_status f8_cuda_stream_synchronize(CUstream stream, f8_diag *diag) {
	return f8_cuda_check(f8_cuda_api.cuStreamSynchronize(stream), "cuStreamSynchronize", diag);
}

f8_status f8_cuda_memory_info(size_t *free_bytes, size_t *total_bytes, f8_diag *diag) {
	return f8_cuda_check(f8_cuda_api.cuMemGetInfo(free_bytes, total_bytes), "cuMemGetInfo",
			     diag);
}

f8_status f8_cuda_event_create(CUevent *event, f8_diag *diag) {
	return f8_cuda_check(f8_cuda_api.cuEventCreate(event, CU_EVENT_DEFAULT), "cuEventCreate", diag);
}

void f8_cuda_event_destroy(CUevent event) {
	if (event)
		(void)f8_cuda_api.cuEventDestroy(event); // nothing to report to
}

f8_status f8_cuda_event_record(CUevent event, CUstream stream, f8_diag *diag) {
	return f8_cuda_check(f8_cuda_api.cuEventRecord(event, stream), "cuEventRecord", diag);
}

f8_status f8_cuda_event_elapsed(CUevent start, CUevent end, float *milliseconds, f8_diag *diag) {
	f8_status status = f8_cuda_check(f8_cuda_api.cuEventSynchronize(end), "cuEventSynchronize", diag);
	if (!status)
		status = f8_cuda_check(f8_cuda_api.cuEventElapsedTime(milliseconds, start, end),
				       "cuEventElapsedTime", diag);
	return status;
}

f8_status f8_cuda_capture_begin(CUstream stream, f8_diag *diag) {
	return f8_cuda_check(f8_cuda_api.cuStreamBeginCapture(stream,
							      CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
			     "cuStreamBeginCapture", diag);
}

f8_status f8_cuda_capture_end(CUstream stream, CUgraphExec *out, f8_diag *diag) {
	*out = 0;
	CUgraph graph = NULL;
	f8_status status = f8_cuda_check(f8_cuda_api.cuStreamEndCapture(stream, &graph),
					 "cuStreamEndCapture", diag);
	if (!status)
		status = f8_cuda_check(f8_cuda_api.cuGraphInstantiateWithFlags(out, graph, 0),
				       "cuGraphInstantiateWithFlags", diag);
	if (graph) // the executable graph keeps what it needs of it
		(void)f8_cuda_api.cuGraphDestroy(graph);
	if (status)
		*out = 0;
	return status;
}

f8_status f8_cuda_graph_launch(CUgraphExec graph, CUstream stream, f8_diag *diag) {
	return f8_cuda_check(f8_cuda_api.cuGraphLaunch(graph, stream), "cuGraphLaunch", diag);
}

void f8_cuda_graph_destroy(CUgraphExec graph) {
	if (graph)
		(void)f8_cuda_api.cuGraphExecDestroy(graph); // nothing to report to
}

f8_status f8_cuda_launch(CUfunction function, const char *name, const f8_launch_geometry *geometry,
			 int64_t rows, void **args, CUstream stream, f8_diag *diag) {
	if (geometry->threads_per_block == 0 || geometry->rows_per_block == 0)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "%s: a launch geometry of %u threads and "
							  "%u rows per block",
				   name, geometry->threads_per_block, geometry->rows_per_block);
	uint32_t blocks = f8_launch_grid_blocks(geometry, rows);
	CUresult result = f8_cuda_api.cuLaunchKernel(function, blocks, 1, 1, geometry->threads_per_block, 1, 1,
					 0, stream, args, NULL);
	f8_status status = f8_cuda_check(result, "cuLaunchKernel", diag);
	if (status)
		append(diag, " (%s: %u blocks of %u threads)", name, blocks,
		       geometry->threads_per_block);
	return status;
}
