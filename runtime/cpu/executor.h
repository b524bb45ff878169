/*
 * The CPU executor: runs a verified IR graph, node by node in program order, with the reference
 * kernels (runtime/cpu/kernels.h). It is the oracle every faster path is checked against.
 *
 * Leaves (inputs, parameters, buffers, optimizer state) live in the executor for its lifetime:
 * it allocates them zeroed at creation and the caller fills them (f8_cpu_executor_leaf). A run
 * executes the nodes of the phases asked for, frees each intermediate value after its last use
 * in that run, keeps the graph's outputs that the run made until the next run, and at its end
 * applies the graph's updates whose source the run made (the source's buffer moves into the
 * leaf: no copy). A training step is a run of fwd|bwd per micro-batch, then a run of opt.
 */
#ifndef F8_RUNTIME_CPU_EXECUTOR_H
#define F8_RUNTIME_CPU_EXECUTOR_H

#include <stdbool.h> // bool
#include <stdint.h>  // int64_t, uint32_t

#include "ir/diag.h"        // f8_status, f8_diag
#include "ir/graph.h"       // f8_graph, f8_value_id, f8_phase
#include "runtime/tensor.h" // f8_rt_tensor

typedef struct f8_cpu_executor f8_cpu_executor;

/* The phase mask of one phase. */
#define F8_PHASE_BIT(phase) (1u << (phase))
#define F8_PHASES_ALL ((1u << F8_PHASE_COUNT) - 1)

/*
 * Prepares to run `graph` (verified; it must outlive the executor and not change) with its
 * symbols bound to `symbol_values` (graph->n_symbols values, each >= 1; copied). Allocates every
 * leaf, zeroed. F8_ERR_ARGUMENT when a size evaluates to a negative number or overflows,
 * F8_ERR_NOMEM when memory runs out.
 */
f8_status f8_cpu_executor_create(const f8_graph *graph, const int64_t *symbol_values,
				 f8_cpu_executor **out, f8_diag *diag);

/* Frees the executor and every tensor it holds. NULL is allowed. */
void f8_cpu_executor_destroy(f8_cpu_executor *executor);

/* Keep every value a run makes, not only the outputs (for op-by-op comparisons and tests).
 * Fused groups then run node by node through the reference kernels, so that the values made
 * inside a group exist to be kept. */
void f8_cpu_executor_keep_all(f8_cpu_executor *executor, bool keep);

/*
 * The fused groups of the graph (the fuse pass's kernels) run through their generated kernels
 * (runtime/cpu/generated.h: lowered by codegen/, compiled by ORC JIT at the first run that
 * runs one) unless `interpreter` is true: then every node runs through its reference kernel,
 * the oracle the generated kernels are held to. Off at creation.
 */
void f8_cpu_executor_use_interpreter(f8_cpu_executor *executor, bool interpreter);

/*
 * While `freeze` is true, runs do not apply the updates whose source a ScalingUpdate node made:
 * the FP8 scaling tables (scale, amax history, non-finite count) stay as they are, so that an
 * evaluation neither moves the scales nor records its amaxes, as TransformerEngine's
 * evaluation under torch.no_grad leaves them. The ScalingUpdate nodes still run (their outputs
 * are readable until the next run); every other update applies as usual, the FP8 weight caches
 * of the cast phase included. Not frozen at creation.
 */
void f8_cpu_executor_freeze_scaling(f8_cpu_executor *executor, bool freeze);

/* The tensor of leaf `value`, for the caller to fill or read; NULL if `value` is not a leaf. */
f8_rt_tensor *f8_cpu_executor_leaf(f8_cpu_executor *executor, f8_value_id value);

/*
 * Runs the nodes whose phase is in `phases` (F8_PHASE_BIT(F8_PHASE_FWD) | ...), in program order,
 * then applies the updates whose source it made. A node reading a value that this run did not
 * make and that is not a leaf fails with F8_ERR_ARGUMENT naming both; so does a run in which a
 * node reads a leaf after the source of its update was made (it would read stale state). On a
 * failure the leaves are as they were before the run (updates are applied only after every node
 * succeeded).
 */
f8_status f8_cpu_executor_run(f8_cpu_executor *executor, uint32_t phases, f8_diag *diag);

/* Value `value` as the last run left it (a leaf, an output the run made, or with keep_all any
 * value it made); NULL when there is none. Owned by the executor, valid until the next run. */
const f8_rt_tensor *f8_cpu_executor_value(const f8_cpu_executor *executor, f8_value_id value);

/* The concrete dims of `type` with the executor's symbols bound, into dims (rank of them). */
void f8_cpu_executor_dims(const f8_cpu_executor *executor, const f8_type *type, int64_t *dims);

#endif
