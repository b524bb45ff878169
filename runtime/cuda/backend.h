/*
 * The CUDA backend (runtime/backend.h) on one GPU: device 0's primary context, one stream for
 * the step, device buffers (the executor's slab and leaves, each one allocation), the plan's
 * generated kernels (kernels.ptx, loaded once; each fused group's launches as the plan records
 * them, by their recorded geometry), the GEMMs through cuBLASLt (runtime/cuda/gemm.h) and
 * attention through cuDNN (runtime/cuda/attention.h).
 *
 * It runs a plan (runtime/plan.h), never a graph alone: the kernels and their bindings are the
 * plan's, made by the compiler, so the GPU runs what the plan records and nothing the runtime
 * lowers again. A node that is neither in a fused group nor a library call has no GPU kernel in
 * the plan: running it is an error that names it (the compiler decides what is a kernel; the
 * backend never falls back to something else). Reshape, Squeeze, Unsqueeze and Identity outside
 * a group are a device copy, which is all they are.
 *
 * Everything is queued on the stream; upload and download wait for it. A run that repeats
 * (runtime/backend.h, run_begin) is captured into a CUDA graph at its second time and
 * replayed from then on, so that a step costs a few graph launches of host time, not one call
 * per kernel; NVTX ranges name each layer's forward and backward for a profiler. Data errors that the
 * kernels report (a token id outside the vocabulary) are read at synchronize, where the run
 * that made them ends, and name the group's node. With F8C_CUDA_SYNC=1 in the environment,
 * every group and node is followed by a synchronize, so that a kernel's fault names the group
 * or node it came from (CUDA_LAUNCH_BLOCKING's purpose, at f8c's level).
 *
 * A collective on a mesh axis of one rank is a copy (an all-to-all keeps its rows: the first
 * of them by its counts, read on the host, the rest zeros). A run on several GPUs (options.dist, one
 * process per GPU, the device by the process's local rank) runs its collectives through NCCL
 * (runtime/cuda/collectives.h); the communicators are made at the first prepare, every rank
 * together. F8C_NCCL=1 in the environment runs the collectives of one rank through NCCL too:
 * how one GPU exercises those paths.
 */
#ifndef F8_RUNTIME_CUDA_BACKEND_H
#define F8_RUNTIME_CUDA_BACKEND_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t

#include "ir/diag.h"         // f8_status, f8_diag
#include "runtime/backend.h"     // f8_backend
#include "runtime/distributed.h" // f8_dist
#include "runtime/plan.h"    // f8_plan

typedef struct f8_cuda_options {
	bool deterministic; // cuDNN's deterministic backward, any kernel choice likewise
	bool cuda_graphs;   // replay each kind of run as a CUDA graph (f8c train's default;
			    // --no-cuda-graph turns it off)
	bool profile;       // time every launch (runtime/cuda/profile.h); no CUDA graphs then
	f8_dist *dist;      // the run's ranks (borrowed), or NULL: one process
	int device;         // the GPU's ordinal: the process's local rank
} f8_cuda_options;

/*
 * A CUDA backend for `plan` (borrowed: it must outlive the backend; it prepares plan->graph
 * only): opens libcuda (runtime/cuda/libraries.h) and device 0, and loads kernels.ptx, whose
 * compile log is in the diagnostic when the driver refuses it. *out is the caller's
 * (f8_backend_destroy). F8_ERR_UNSUPPORTED when there is no GPU or driver (or none of ordinal
 * options->device), or the device is older than the plan's target (sm_90); F8_ERR_INVALID for a PTX the driver cannot compile;
 * F8_ERR_NOMEM.
 */
f8_status f8_cuda_backend_create(const f8_plan *plan, const f8_cuda_options *options,
				 f8_backend **out, f8_diag *diag);

/* True when `backend` is a CUDA backend. */
bool f8_cuda_backend_is(const f8_backend *backend);

/* Why the backend does not replay its runs as CUDA graphs ("--no-cuda-graph", "a
 * GroupedLinear reads its rows per expert on the host", "expert parallelism's all-to-all reads
 * its counts on the host"), or NULL when it does; after prepare. */
const char *f8_cuda_backend_replays(const f8_backend *backend);

/* With options.profile: writes the step-time breakdown to `path` as JSON, and a one-line
 * summary into `summary` (runtime/cuda/profile.h). */
f8_status f8_cuda_backend_profile_write(const f8_backend *backend, const char *path,
					char *summary, size_t size, f8_diag *diag);

/* The device's name ("NVIDIA H200") and its memory, for messages and --verbose. */
const char *f8_cuda_backend_device(const f8_backend *backend, uint64_t *total_bytes);

#endif
