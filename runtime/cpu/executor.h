/*
 * The CPU executor: the executor core (runtime/executor.h) on a CPU backend of its own
 * (runtime/cpu/backend.h), with the leaves and values as host tensors that point into the
 * backend's memory. For tests and tools that fill and inspect values directly; training,
 * checkpoints, parameters, calibration and inference take the core's f8_executor
 * (f8_cpu_executor_core), which runs on any backend.
 *
 * Leaves live for the executor's lifetime, zeroed at creation; the caller fills them through
 * f8_cpu_executor_leaf. A run executes the nodes of the phases asked for (the core's rules:
 * checks before the run, updates written in place of their leaves, outputs kept until the
 * next run). The fused groups run through their generated kernels unless the executor is
 * told to use the reference kernels.
 */
#ifndef F8_RUNTIME_CPU_EXECUTOR_H
#define F8_RUNTIME_CPU_EXECUTOR_H

#include <stdbool.h> // bool
#include <stdint.h>  // int64_t, uint32_t

#include "ir/diag.h"          // f8_status, f8_diag
#include "ir/graph.h"         // f8_graph, f8_value_id, f8_phase
#include "runtime/executor.h" // f8_executor, F8_PHASE_BIT, F8_PHASES_ALL
#include "runtime/tensor.h"   // f8_rt_tensor

typedef struct f8_cpu_executor f8_cpu_executor;

/*
 * Prepares to run `graph` (verified; it must outlive the executor and not change) with its
 * symbols bound to `symbol_values` (graph->n_symbols values, each >= 1; copied) on a CPU backend
 * that runs the fused groups through their generated kernels where this build has them (else
 * through the reference kernels). f8_executor_create's failures.
 */
f8_status f8_cpu_executor_create(const f8_graph *graph, const int64_t *symbol_values,
				 f8_cpu_executor **out, f8_diag *diag);

/* Frees the executor, its backend and every tensor it holds. NULL is allowed. */
void f8_cpu_executor_destroy(f8_cpu_executor *executor);

/* The executor core it runs (owned by it). */
f8_executor *f8_cpu_executor_core(const f8_cpu_executor *executor);

/* f8_executor_keep_all. */
void f8_cpu_executor_keep_all(f8_cpu_executor *executor, bool keep);

/* Every node runs through its reference kernel when `interpreter` is true, the oracle the
 * generated kernels are held to; else the fused groups run through their generated kernels
 * (compiled by the first run that runs one). */
void f8_cpu_executor_use_interpreter(f8_cpu_executor *executor, bool interpreter);

/* f8_executor_freeze_scaling. */
void f8_cpu_executor_freeze_scaling(f8_cpu_executor *executor, bool freeze);

/* The host tensor of leaf `value`, for the caller to fill or read (valid for the executor's
 * life); NULL if `value` is not a leaf. */
f8_rt_tensor *f8_cpu_executor_leaf(f8_cpu_executor *executor, f8_value_id value);

/* f8_executor_run. */
f8_status f8_cpu_executor_run(f8_cpu_executor *executor, uint32_t phases, f8_diag *diag);

/* Value `value` as the last run left it (a leaf, an output the run made, or with keep_all any
 * value it made); NULL when there is none. Owned by the executor, valid until the next run. */
const f8_rt_tensor *f8_cpu_executor_value(const f8_cpu_executor *executor, f8_value_id value);

/* The concrete dims of `type` with the executor's symbols bound, into dims (rank of them). */
void f8_cpu_executor_dims(const f8_cpu_executor *executor, const f8_type *type, int64_t *dims);

#endif
