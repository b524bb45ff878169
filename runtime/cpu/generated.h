/*
 * The CPU backend's generated kernels: every fused group of a graph lowered to kernel IR
 * (codegen/program.h) and compiled for this machine by ORC JIT (codegen/host_jit.h), so that
 * the executor runs a group with one call instead of its members one by one. What a group
 * computes is what its members compute (tests/codegen/test_lower_groups.c holds every group
 * against the reference kernels); values made and read inside a group are never stored.
 */
#ifndef F8_RUNTIME_CPU_GENERATED_H
#define F8_RUNTIME_CPU_GENERATED_H

#include <stdint.h> // int64_t, uint32_t

#include "ir/diag.h"        // f8_status, f8_diag
#include "ir/graph.h"       // f8_graph, f8_value_id
#include "runtime/backend.h" // f8_tensor_view
#include "runtime/tensor.h"  // f8_rt_tensor

typedef struct f8_cpu_generated f8_cpu_generated;

/* Lowers and compiles every group of `graph` (fused, types inferred; it must outlive the
 * result), through the cache of compiled kernels in `cache_folder` (NULL: none;
 * codegen/kernel_cache.h). *out is the caller's (f8_cpu_generated_destroy); NULL on failure,
 * with the diagnostic of the group that could not be lowered or compiled. */
f8_status f8_cpu_generated_create(const f8_graph *graph, const char *cache_folder,
				  f8_cpu_generated **out, f8_diag *diag);

void f8_cpu_generated_destroy(f8_cpu_generated *generated);

/* The values group `group` writes (n of them into *n). Owned by `generated`. */
const f8_value_id *f8_cpu_generated_outputs(const f8_cpu_generated *generated, uint32_t group,
					    uint32_t *n);

/*
 * Runs group `group`: reads its inputs from views[value] and writes its outputs there (a CPU
 * backend's host memory, runtime/cpu/backend.h; an output may be in place of an input), with
 * the graph's symbols bound to `symbol_values`. Each launch's ACCUMULATE arguments are zeroed
 * before it, as a GPU launcher zeroes them (codegen/kir.h); OUT arguments are not. F8_ERR_INVALID
 * when a value it binds has no memory; F8_ERR_ARGUMENT when a size does not evaluate or the
 * data is wrong (an id outside a table). Launches reuse argument arrays `generated` holds: one
 * run at a time.
 */
f8_status f8_cpu_generated_run(f8_cpu_generated *generated, uint32_t group,
			       const f8_tensor_view *views, const int64_t *symbol_values,
			       f8_diag *diag);

/* f8_cpu_generated_run on host tensors the caller owns, one per value of the graph (by id;
 * those the group neither reads nor writes may be empty), for tests and tools. */
f8_status f8_cpu_generated_run_tensors(f8_cpu_generated *generated, uint32_t group,
				       const f8_rt_tensor *tensors, const int64_t *symbol_values,
				       f8_diag *diag);

#endif
