/*
 * Where a step's time goes on the GPU, by f8c's own timing (f8c train --profile FILE): a pair
 * of CUDA events around every launch the backend queues, each launch in a category (the
 * cuBLASLt GEMMs by their operands' precision, cuDNN's attention forward and backward, each
 * kernel family of the generated kernels, device copies), folded into totals when a run ends.
 * The first step (up to and including its first optimizer run) is the warm-up and is not
 * counted. What the events do not cover is idle: the GPU waiting for the host between launches
 * and between runs (the executor's bookkeeping, the token copies, the loss read back).
 *
 * Events cost about a microsecond of host time each, so a profiled run is slower than one
 * without; the GPU times of the launches are what they are, and a run that is replayed as a
 * CUDA graph has no launches to time: the backend does not replay while it profiles.
 *
 * Also the device memory in use at the end of every run (cuMemGetInfo: f8c's buffers, the
 * libraries' and the context's), whose largest value is the run's peak.
 */
#ifndef F8_RUNTIME_CUDA_PROFILE_H
#define F8_RUNTIME_CUDA_PROFILE_H

#include <stdint.h> // uint32_t, uint64_t

#include "ir/diag.h"             // f8_status, f8_diag
#include "runtime/cuda/driver.h" // CUstream

typedef struct f8_cuda_profile f8_cuda_profile;

f8_status f8_cuda_profile_create(f8_cuda_profile **out, f8_diag *diag);
void f8_cuda_profile_destroy(f8_cuda_profile *profile); // NULL allowed

/* Around one launch (a kernel, a library call, a copy) queued on `stream`: `category` is a
 * static string ("gemm fp8", "kernels: norm"), compared by its contents; `item` numbers what
 * was launched (a node, a group: the caller's numbering, the same each step) and `name` (which
 * outlives the profile) says what it made ("layers.3.mlp.fc1"), for the file's list of the
 * launches by their time, the layers' alike summed ("layers.*.mlp.fc1"). */
f8_status f8_cuda_profile_start(f8_cuda_profile *profile, CUstream stream, const char *category,
				uint32_t item, const char *name, f8_diag *diag);
f8_status f8_cuda_profile_stop(f8_cuda_profile *profile, CUstream stream, f8_diag *diag);

/* When a run (backend.h, run_begin's key: a phase mask) begins, and when it has ended and been
 * synchronized: the run's launches are then folded into the totals (once the warm-up is over),
 * and the device memory in use is read. */
void f8_cuda_profile_run_begin(f8_cuda_profile *profile, uint32_t key);
f8_status f8_cuda_profile_run_end(f8_cuda_profile *profile, f8_diag *diag);

/*
 * Writes the totals as JSON to `path` (written whole or not at all): the steps counted, the
 * wall time per step, per category its time per step, launches per step and share of the wall
 * time, every launch item (by category and name, layers alike summed; "top") with its time
 * per step, the most first (tools/step_alone.py sets each GEMM and kernel family against its
 * time alone, so it needs them all, not only the largest), the idle time, the device memory's
 * peak and `f8c_peak_bytes` (what f8c's buffers came to). A one-line summary into `summary`
 * (size bytes) for the console.
 */
f8_status f8_cuda_profile_write(const f8_cuda_profile *profile, const char *path,
				uint64_t f8c_peak_bytes, char *summary, size_t size, f8_diag *diag);

#endif
