/*
 * The CPU backend (runtime/backend.h): host memory, the reference kernels of
 * runtime/cpu/kernels.h for every node, and for the fused groups either their generated kernels
 * (runtime/cpu/generated.h: lowered by codegen/, compiled by ORC JIT when a run first needs
 * them) or their members one by one through the reference kernels: the oracle the generated
 * kernels are held to.
 *
 * A reference kernel whose output is in place of one of its inputs (an update's source in its
 * leaf) computes into a host buffer of its own, copied into place after it: the reference
 * kernels are written for outputs apart from their inputs. A generated kernel writes in place,
 * as it will on the GPU. A fused group run through its members keeps the values made and read
 * inside it (which the slab plan gives no memory) in one host buffer it keeps for them.
 */
#ifndef F8_RUNTIME_CPU_BACKEND_H
#define F8_RUNTIME_CPU_BACKEND_H

#include <stdbool.h> // bool
#include <stdint.h>  // uint32_t

#include "ir/diag.h"         // f8_status, f8_diag
#include "runtime/backend.h" // f8_backend, f8_tensor_view
#include "runtime/distributed.h" // f8_dist
#include "runtime/tensor.h"  // f8_rt_tensor

/* How the CPU backend runs the fused groups. */
typedef enum f8_cpu_kernels {
	F8_CPU_KERNELS_GENERATED, // their generated kernels (`--kernels generated`)
	F8_CPU_KERNELS_REFERENCE, // their members through the reference kernels
	F8_CPU_KERNELS_COUNT
} f8_cpu_kernels;

/* True when this build has the generated kernels (it was built with LLVM). */
bool f8_cpu_backend_has_generated(void);

/* A CPU backend running the fused groups as `kernels` says; *out is the caller's
 * (f8_backend_destroy). F8_ERR_UNSUPPORTED for the generated kernels in a build without LLVM
 * (the hint says what to do); F8_ERR_NOMEM. */
f8_status f8_cpu_backend_create(f8_cpu_kernels kernels, f8_backend **out, f8_diag *diag);

/* f8_cpu_backend_create for one rank of a run on several: its collectives span the ranks of
 * `dist` (runtime/distributed.h; not owned, it outlives the backend; NULL: one process), through
 * MPI: F8_ERR_UNSUPPORTED for ranks that meet at a TCP store (no MPI launched them). */
f8_status f8_cpu_backend_create_distributed(f8_cpu_kernels kernels, f8_dist *dist,
					    f8_backend **out, f8_diag *diag);

/* Switches how the groups run from the next run on; `backend` must be a CPU backend. */
void f8_cpu_backend_use(f8_backend *backend, f8_cpu_kernels kernels);

/* Keeps the generated kernels compiled in `folder` between runs (codegen/kernel_cache.h;
 * NULL: compiled every time, the default); the folder is copied. Takes effect where the kernels
 * are next compiled: call it before the first run. F8_ERR_NOMEM when the copy fails. */
f8_status f8_cpu_backend_cache_kernels(f8_backend *backend, const char *folder, f8_diag *diag);

/* True when `backend` is a CPU backend. */
bool f8_cpu_backend_is(const f8_backend *backend);

/* The host address of a view on a CPU backend's buffer; NULL for a view without a buffer. */
void *f8_cpu_view_data(const f8_tensor_view *view);

/* A host tensor of a view's memory (not owned: destroying it frees nothing). */
f8_rt_tensor f8_cpu_view_tensor(const f8_tensor_view *view);

/*
 * Views of host tensors the caller owns (tensors[0 .. n)), for running kernels on them: views[i]
 * views tensors[i]'s data through a buffer that borrows it (none for a tensor without data).
 * Release them with f8_cpu_views_release before the tensors go. F8_ERR_NOMEM.
 */
f8_status f8_cpu_views_borrow(const f8_rt_tensor *tensors, uint32_t n, f8_tensor_view *views,
			      f8_diag *diag);

/* Frees the buffers of views made by f8_cpu_views_borrow (not the tensors' data). */
void f8_cpu_views_release(f8_tensor_view *views, uint32_t n);

#endif
