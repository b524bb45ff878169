/*
 * The executor core: runs a compiled graph on any backend (runtime/backend.h), written once.
 * It holds the program (the nodes of each phase in program order), says where every value
 * lives, runs the nodes and fused groups through the backend, checks what only the program can
 * show (a value of a phase that did not run, a leaf read after its update's source was made),
 * applies the updates, and freezes the FP8 scaling state for evaluation. Training, checkpoints,
 * the initial parameters, calibration and inference take an f8_executor, never a backend's type.
 *
 * Memory. Leaves (inputs, parameters, optimizer state, scaling tables, weight caches) live for
 * the executor's life, in one buffer, zeroed at creation; the caller fills them
 * (f8_executor_write). When the schedule pass planned the graph (its values carry slab offsets),
 * every value a step stores lives at its offset in one slab buffer, made once: the backend runs
 * the memory plan of the compiled step, and its allocated bytes are the slab's plus the
 * leaves'. An update's source is written in place of its leaf, as the schedule planned. A graph
 * without offsets (symbolic sizes, a text graph that never ran the schedule pass), or an
 * executor told to keep every value, gets a buffer per value instead, made when the value is
 * made and freed after its last read.
 *
 * A run executes the nodes of the phases asked for, in program order; the graph's outputs that
 * it made stay readable until the next run. A training step is a run of cast, a run of fwd|bwd
 * per micro-batch, then a run of opt.
 */
#ifndef F8_RUNTIME_EXECUTOR_H
#define F8_RUNTIME_EXECUTOR_H

#include <stdbool.h> // bool
#include <stdint.h>  // int64_t, uint32_t, uint64_t

#include "ir/diag.h"         // f8_status, f8_diag
#include "ir/graph.h"        // f8_graph, f8_value_id, f8_phase
#include "runtime/backend.h" // f8_backend, f8_tensor_view
#include "runtime/tensor.h"  // f8_rt_tensor

typedef struct f8_executor f8_executor;

/* The phase mask of one phase. */
#define F8_PHASE_BIT(phase) (1u << (phase))
#define F8_PHASES_ALL ((1u << F8_PHASE_COUNT) - 1)

/*
 * Flags of a run, or'ed into its phase mask, for a micro-batch whose forward and backward run
 * apart, with other micro-batches' runs between (pipeline parallelism's 1F1B schedule):
 * F8_RUN_KEEP keeps what the other phases read of the values the run makes, in its context's
 * memory; a run with F8_RUN_CONTINUE on the same context then reads them (fwd | F8_RUN_KEEP,
 * later bwd | F8_RUN_CONTINUE), and fails naming the first it reads that the context's last
 * run did not keep.
 */
#define F8_RUN_KEEP (1u << 30)
#define F8_RUN_CONTINUE (1u << 31)

/*
 * A run of one model chunk (pipeline parallelism's interleaved schedule, ir/pipeline_chunks.h),
 * or'ed into the phase mask: only the nodes of its phases in chunk `c` (f8_executor_set_chunks
 * says each node's) run. A micro-batch's runs go chunk by chunk on one context, each with
 * F8_RUN_KEEP but its last and F8_RUN_CONTINUE but its first: fwd of chunk 0, 1, ..., then
 * bwd of chunk V - 1, ..., 0, each continuing what the runs before it made.
 */
#define F8_RUN_CHUNK_SHIFT 8
#define F8_RUN_CHUNK(c) (((uint32_t)(c) + 1) << F8_RUN_CHUNK_SHIFT)
#define F8_RUN_CHUNK_MASK (0xFFu << F8_RUN_CHUNK_SHIFT)

/* The most contexts an executor has (f8_executor_set_contexts). */
#define F8_EXECUTOR_CONTEXTS_MAX 64

/*
 * Prepares to run `graph` (verified; it must outlive the executor and not change) on `backend`
 * (borrowed: it must outlive the executor), with the graph's symbols bound to `symbol_values`
 * (graph->n_symbols values, each >= 1; copied; NULL when there are none). Makes the leaves'
 * buffer, zeroed, and the slab when the graph is planned, and has the backend prepare the
 * graph. F8_ERR_ARGUMENT when a size evaluates to a negative number or overflows, or when a
 * planned value's offset leaves the slab; F8_ERR_NOMEM; a backend's failure as it reports it.
 */
f8_status f8_executor_create(const f8_graph *graph, const int64_t *symbol_values,
			     f8_backend *backend, f8_executor **out, f8_diag *diag);

/* Frees the executor and the buffers it made (not the backend). NULL is allowed. */
void f8_executor_destroy(f8_executor *executor);

const f8_graph *f8_executor_graph(const f8_executor *executor);
f8_backend *f8_executor_backend(const f8_executor *executor);

/*
 * Several micro-batches in flight: `n` contexts, each with a slab of its own (the schedule
 * pass's plan, once per context), so that the values one micro-batch's forward keeps for its
 * backward outlive other micro-batches' runs. A run uses the current context
 * (f8_executor_use_context; 0 at creation); the leaves are every context's. The contexts only
 * grow; F8_ERR_UNSUPPORTED for more than one without the slab plan (a graph without offsets,
 * or keep_all), F8_ERR_ARGUMENT past F8_EXECUTOR_CONTEXTS_MAX.
 */
f8_status f8_executor_set_contexts(f8_executor *executor, uint32_t n, f8_diag *diag);
void f8_executor_use_context(f8_executor *executor, uint32_t context);

/* Each node's model chunk, chunk_of[node] (graph->n_nodes entries, copied; ir/pipeline_chunks.h
 * finds them), n_chunks of them, for the runs of F8_RUN_CHUNK. F8_ERR_INVALID when a fused
 * kernel holds nodes of two chunks (it cannot run apart), F8_ERR_ARGUMENT for a chunk out of
 * range, F8_ERR_NOMEM. */
f8_status f8_executor_set_chunks(f8_executor *executor, const uint8_t *chunk_of,
				 uint32_t n_chunks, f8_diag *diag);

/* Keep every value a run makes, not only the outputs (op-by-op comparisons, calibration):
 * each value gets a buffer of its own, and fused groups run node by node, so that the values
 * made inside a group exist to be kept. Off at creation; turning it on goes back to context 0.
 */
void f8_executor_keep_all(f8_executor *executor, bool keep);

/*
 * While `freeze` is true, runs do not change the FP8 scaling state: the sources that
 * ScalingUpdate nodes make (scale, amax history, non-finite count) are written to a buffer of
 * their own instead of their leaves, and dropped at the run's end, so that an evaluation
 * neither moves the scales nor records its amaxes, as TransformerEngine's evaluation under
 * torch.no_grad leaves them. The ScalingUpdate nodes still run (their outputs are readable
 * until the next run); every other update applies as usual, the FP8 weight caches of the cast
 * phase included. Not frozen at creation.
 */
void f8_executor_freeze_scaling(f8_executor *executor, bool freeze);

/*
 * Runs the nodes whose phase is in `phases` (F8_PHASE_BIT(F8_PHASE_FWD) | ...), in program
 * order. Before anything runs, a node reading a value that this run does not make and that is
 * not a leaf fails with F8_ERR_ARGUMENT naming both, and so does a run in which a node would
 * read a leaf after the source of its update was made (it would read stale state): the leaves
 * are then as they were. A kernel's failure (a data error: a token id outside the vocabulary)
 * names its node; when the run had written an update's source in place by then, the state is
 * no longer one step's, and every later run fails saying so (F8_ERR_INVALID): load a
 * checkpoint into a new executor.
 */
f8_status f8_executor_run(f8_executor *executor, uint32_t phases, f8_diag *diag);

/* Whether `value` can be read now: a leaf, an output the last run made, or with keep_all any
 * value it made. */
bool f8_executor_has(const f8_executor *executor, f8_value_id value);

/* Where `value` lives now (its buffer, offset, dtype and dims); NULL unless f8_executor_has.
 * Valid until the next run (a leaf's: for the executor's life). */
const f8_tensor_view *f8_executor_view(const f8_executor *executor, f8_value_id value);

/* Copies `host` into leaf `value`. F8_ERR_ARGUMENT when `value` is not a leaf or `host` has
 * another dtype or other dims (named in the message). */
f8_status f8_executor_write(f8_executor *executor, f8_value_id value, const f8_rt_tensor *host,
			    f8_diag *diag);

/* Copies `value` into *host, which the call makes (f8_rt_tensor_create; the caller destroys
 * it). F8_ERR_ARGUMENT when the value cannot be read now (f8_executor_has), naming it. */
f8_status f8_executor_read(const f8_executor *executor, f8_value_id value, f8_rt_tensor *host,
			   f8_diag *diag);

/* Element 0 of `value` as a double (a loss, a learning rate); NAN when it cannot be read. */
double f8_executor_read_scalar(const f8_executor *executor, f8_value_id value);

/* The concrete dims of `type` with the executor's symbols bound, into dims (rank of them). */
void f8_executor_dims(const f8_executor *executor, const f8_type *type, int64_t *dims);

/* What the executor's memory came to. */
typedef struct f8_executor_memory {
	bool planned;         // the slab plan is in use
	uint32_t contexts;    // slabs (f8_executor_set_contexts)
	uint64_t slab_bytes;  // the slabs (0 when not planned)
	uint64_t leaf_bytes;  // the leaves' buffer
	uint64_t other_bytes; // the frozen scaling state's buffer
} f8_executor_memory;

f8_executor_memory f8_executor_memory_of(const f8_executor *executor);

#endif
