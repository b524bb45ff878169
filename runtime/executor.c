/*
 * The executor core (runtime/executor.h): where values live, the run plans of the phases, the
 * checks made before a run, the runs through the backend, the updates.
 */
#include "runtime/executor.h" // f8_executor

#include <math.h>   // NAN
#include <stdio.h>  // snprintf
#include <string.h> // memcpy, strlen

#include "ir/alloc.h" // f8_calloc, f8_free
#include "ir/ops.h"   // f8_node_attr
#include "ir/pipeline_chunks.h" // f8_pipeline_chunk_run
#include "ir/shape.h" // f8_dim_evaluate, f8_axis_normalize, f8_slice_clamp
#include "runtime/placement.h" // f8_rt_collective_axes

enum { ALIGNMENT = 256 }; // what backends align buffers to, and the leaves' offsets to

/* The run's plan: the nodes to run, and for each value the position of its last read in the
 * run (KEPT: kept after the run: an output, an update's source, or keep_all; NOT_READ). */
#define KEPT UINT32_MAX
#define NOT_READ (UINT32_MAX - 1)
typedef struct run_plan {
	f8_node_id *nodes;
	uint32_t n_nodes;
	uint32_t *last_read; // (n_values)
	// F8_RUN_CONTINUE: the values made outside the run that it reads, which the context's
	// last run must have kept.
	f8_value_id *carried;
	uint32_t n_carried;
} run_plan;

/* A run's plan slot: its phase mask with F8_RUN_KEEP and F8_RUN_CONTINUE above it. */
enum { RUN_PLANS = 4 * (F8_PHASES_ALL + 1) };
static uint32_t plan_index(uint32_t phases) {
	return (phases & F8_PHASES_ALL) | ((phases & F8_RUN_KEEP) ? F8_PHASES_ALL + 1 : 0) |
	       ((phases & F8_RUN_CONTINUE) ? 2 * (F8_PHASES_ALL + 1) : 0);
}

/* A buffer of a value made in a run, kept for the next value of the same size: a step frees
 * and makes the same sizes over and over (when values have buffers of their own). */
typedef struct spare {
	f8_buffer *buffer;
	uint64_t n_bytes;
} spare;

struct f8_executor {
	const f8_graph *graph;
	f8_backend *backend;
	int64_t *symbol_values;  // (graph->n_symbols)
	f8_tensor_view *views;   // (n_values) where each value lives
	f8_tensor_view *planned_views; // (n_values) the same in the slab plan, kept for keep_all off
	f8_buffer *leaves, *slab, *frozen;
	uint64_t leaf_bytes, slab_bytes, frozen_bytes;
	bool planned;            // the graph has slab offsets
	bool keep_all, freeze_scaling, state_lost;
	bool *made;              // (n_values) made by the last run and still readable: the
				 // current context's made_in[]
	// Contexts (f8_executor_set_contexts): context c's values live in slabs[c] (slabs[0] is
	// `slab`), and made_in[c] says which of them its runs left readable.
	uint32_t n_contexts, context;
	f8_buffer **slabs;
	bool **made_in;
	bool *owned;             // (n_values) views[v].buffer is v's own (per-value memory)
	f8_value_id *target_of;  // (n_values) an update source's leaf, else F8_NONE
	bool *scaling_source;    // (n_values) a source a ScalingUpdate makes
	uint64_t *frozen_offset; // (n_values) a scaling source's offset in `frozen`
	run_plan plans[RUN_PLANS]; // by the run's phase mask and flags (plan_index)
	// Model chunks (f8_executor_set_chunks): each node's, and the plans of the runs of one
	// chunk, chunk c's at chunk_plans[c RUN_PLANS + plan_index].
	uint8_t *chunk_of;
	uint32_t n_chunks;
	run_plan *chunk_plans;
	spare *spares;
	uint32_t n_spares, cap_spares;
};

static bool is_leaf(const f8_graph *graph, f8_value_id v) {
	return graph->values[v].producer == F8_NONE;
}

static bool per_value(const f8_executor *executor) {
	return !executor->planned || executor->keep_all;
}

void f8_executor_dims(const f8_executor *executor, const f8_type *type, int64_t *dims) {
	for (int i = 0; i < type->shape.rank; i++)
		f8_dim_evaluate(type->shape.dims[i], executor->symbol_values, &dims[i]);
}

static uint64_t aligned(uint64_t n) {
	return (n + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
}

/* The view of value v in `buffer` at `offset` (dims with the symbols bound). */
static f8_tensor_view view_of(const f8_executor *executor, f8_value_id v, f8_buffer *buffer,
			      uint64_t offset) {
	const f8_type *type = &executor->graph->values[v].type;
	f8_tensor_view view = {.buffer = buffer, .offset = offset, .dtype = type->dtype,
			       .rank = type->shape.rank};
	f8_executor_dims(executor, type, view.dims);
	view.n_bytes = f8_dtype_get_info(type->dtype)->bytes;
	for (int i = 0; i < view.rank; i++)
		view.n_bytes *= (uint64_t)view.dims[i];
	return view;
}

/* Checks that every value's dims evaluate to sizes (>= 0, no overflow) under the binding. */
static f8_status check_sizes(const f8_executor *executor, f8_diag *diag) {
	const f8_graph *graph = executor->graph;
	for (uint32_t v = 0; v < graph->n_values; v++) {
		const f8_type *type = &graph->values[v].type;
		uint64_t bytes = f8_dtype_get_info(type->dtype)->bytes;
		for (int i = 0; i < type->shape.rank; i++) {
			int64_t size = 0;
			bool fits = f8_dim_evaluate(type->shape.dims[i], executor->symbol_values, &size);
			if (fits && size > 0 && bytes > (UINT64_MAX >> 2) / (uint64_t)size)
				fits = false;
			if (!fits || size < 0)
				return f8_diag_set(diag, F8_ERR_ARGUMENT, "with these sizes, dim %d of "
						   "%%%s is %s", i, graph->values[v].name,
						   fits ? "negative" : "too large");
			bytes *= (uint64_t)size;
		}
	}
	return F8_OK;
}

/*
 * Checks that every Slice's output, as the run's sizes make it, is what its input holds: a
 * size bound at run time (an f8c infer array's sequence, in a model compiled with a symbolic
 * one) may ask for more rows than a table has (a learned position table sliced to `seq`), and
 * a generated kernel, which trusts the graph's sizes, would read past the table. The reference
 * kernel checks the same and says it in the same words.
 */
static f8_status check_slices(const f8_executor *executor, f8_diag *diag) {
	const f8_graph *graph = executor->graph;
	for (uint32_t p = 0; p < graph->n_order; p++) {
		const f8_node *node = &graph->nodes[graph->order[p]];
		const f8_attr *starts = f8_node_attr(node, "starts");
		const f8_attr *ends = f8_node_attr(node, "ends");
		if (node->op != F8_OP_SLICE || !starts || !ends || ends->dims.n != starts->dims.n)
			continue;
		const f8_attr *axes = f8_node_attr(node, "axes");
		const f8_attr *steps = f8_node_attr(node, "steps");
		const f8_value *x = &graph->values[node->inputs[0]];
		const f8_value *y = &graph->values[node->outputs[0]];
		for (uint32_t i = 0; i < starts->dims.n; i++) {
			int axis;
			if (!f8_axis_normalize(axes ? axes->ints.items[i] : (int64_t)i, x->type.shape.rank,
					       false, &axis))
				continue; // the verifier's to say
			int64_t step = steps ? steps->ints.items[i] : 1, size, start, end, out;
			if (step == 0 ||
			    !f8_dim_evaluate(x->type.shape.dims[axis], executor->symbol_values, &size) ||
			    !f8_dim_evaluate(starts->dims.items[i], executor->symbol_values, &start) ||
			    !f8_dim_evaluate(ends->dims.items[i], executor->symbol_values, &end) ||
			    !f8_dim_evaluate(y->type.shape.dims[axis], executor->symbol_values, &out))
				continue;
			int64_t length = f8_slice_clamp(size, &start, &end, step);
			if (length == out)
				continue;
			f8_diag_set_node(diag, graph, graph->order[p]);
			f8_diag_hint(diag, "%%%s has %lld along axis %d; a sequence longer than the "
				     "model's positions? Give shorter inputs", x->name, (long long)size,
				     axis);
			return f8_diag_set(diag, F8_ERR_ARGUMENT, "slicing axis %d (size %lld) from "
					   "%lld to %lld gives %lld elements, but the output has %lld "
					   "with these sizes", axis, (long long)size, (long long)start,
					   (long long)end, (long long)length, (long long)out);
		}
	}
	return F8_OK;
}

static f8_status make_buffer(f8_executor *executor, uint64_t n_bytes, f8_buffer **out,
			     f8_diag *diag) {
	return executor->backend->interface->buffer_create(executor->backend, n_bytes, out, diag);
}

static void free_buffer(f8_executor *executor, f8_buffer *buffer) {
	if (buffer)
		executor->backend->interface->buffer_destroy(executor->backend, buffer);
}

/* The update targets and the sources ScalingUpdate makes. */
static void index_updates(f8_executor *executor) {
	const f8_graph *graph = executor->graph;
	for (uint32_t v = 0; v < graph->n_values; v++)
		executor->target_of[v] = F8_NONE;
	for (uint32_t i = 0; i < graph->n_updates; i++) {
		f8_update update = graph->updates[i];
		executor->target_of[update.source] = update.target;
		f8_node_id producer = graph->values[update.source].producer;
		executor->scaling_source[update.source] =
			graph->nodes[producer].op == F8_OP_SCALING_UPDATE;
	}
}

/* The leaves' buffer, zeroed, each leaf at an aligned offset. */
static f8_status make_leaves(f8_executor *executor, f8_diag *diag) {
	const f8_graph *graph = executor->graph;
	uint64_t bytes = 0;
	for (uint32_t i = 0; i < graph->n_inputs; i++) {
		f8_value_id v = graph->inputs[i];
		executor->views[v] = view_of(executor, v, NULL, bytes);
		bytes += aligned(executor->views[v].n_bytes);
	}
	executor->leaf_bytes = bytes;
	f8_status status = make_buffer(executor, bytes, &executor->leaves, diag);
	f8_tensor_view all = {.buffer = executor->leaves, .n_bytes = bytes, .dtype = F8_DTYPE_U8,
			      .rank = 1, .dims = {(int64_t)bytes}};
	if (!status && bytes)
		status = executor->backend->interface->zero(executor->backend, &all, diag);
	for (uint32_t i = 0; !status && i < graph->n_inputs; i++)
		executor->views[graph->inputs[i]].buffer = executor->leaves;
	return status;
}

/*
 * The slab plan's views: each stored value at its offset in the slab; an update's source in
 * its leaf; a value with no offset (it stays inside a fused kernel) without a buffer. The slab
 * is as large as its highest end; F8_ERR_ARGUMENT when an offset is not aligned.
 */
static f8_status plan_views(f8_executor *executor, f8_diag *diag) {
	const f8_graph *graph = executor->graph;
	uint64_t slab = 0;
	for (uint32_t v = 0; v < graph->n_values; v++) {
		const f8_value *value = &graph->values[v];
		if (is_leaf(graph, v))
			continue;
		if (executor->target_of[v] != F8_NONE) {
			executor->planned_views[v] = executor->views[executor->target_of[v]];
			continue;
		}
		executor->planned_views[v] = view_of(executor, v, NULL, 0);
		if (value->buffer_offset < 0)
			continue;
		if ((uint64_t)value->buffer_offset % ALIGNMENT)
			return f8_diag_set(diag, F8_ERR_ARGUMENT, "%%%s's slab offset %lld is not a "
					   "multiple of %d", value->name,
					   (long long)value->buffer_offset, ALIGNMENT);
		executor->planned_views[v].offset = (uint64_t)value->buffer_offset;
		uint64_t end = (uint64_t)value->buffer_offset + aligned(executor->planned_views[v].n_bytes);
		slab = end > slab ? end : slab;
	}
	executor->slab_bytes = slab;
	f8_status status = make_buffer(executor, slab, &executor->slab, diag);
	for (uint32_t v = 0; !status && v < graph->n_values; v++)
		if (!is_leaf(graph, v) && executor->target_of[v] == F8_NONE &&
		    graph->values[v].buffer_offset >= 0)
			executor->planned_views[v].buffer = executor->slab;
	return status;
}

/* The views of the values that are not leaves: the slab plan's, or with a buffer per value
 * none yet (made as each value is), an update's source in its leaf either way. */
static void reset_views(f8_executor *executor) {
	const f8_graph *graph = executor->graph;
	for (uint32_t v = 0; v < graph->n_values; v++) {
		if (is_leaf(graph, v))
			continue;
		if (executor->target_of[v] != F8_NONE)
			executor->views[v] = executor->views[executor->target_of[v]];
		else if (per_value(executor))
			executor->views[v] = view_of(executor, v, NULL, 0);
		else
			executor->views[v] = executor->planned_views[v];
	}
}

f8_status f8_executor_create(const f8_graph *graph, const int64_t *symbol_values,
			     f8_backend *backend, f8_executor **out, f8_diag *diag) {
	*out = NULL;
	for (uint32_t s = 0; s < graph->n_symbols; s++)
		if (symbol_values[s] < 1)
			return f8_diag_set(diag, F8_ERR_ARGUMENT, "size %s is %lld; sizes must be at "
					   "least 1", graph->symbols[s], (long long)symbol_values[s]);
	f8_executor *executor = f8_calloc(1, sizeof *executor);
	if (!executor)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	executor->graph = graph;
	executor->backend = backend;
	size_t n = graph->n_values ? graph->n_values : 1;
	executor->symbol_values = f8_calloc(graph->n_symbols ? graph->n_symbols : 1, sizeof(int64_t));
	executor->views = f8_calloc(n, sizeof *executor->views);
	executor->planned_views = f8_calloc(n, sizeof *executor->planned_views);
	executor->made = f8_calloc(n, sizeof *executor->made);
	executor->owned = f8_calloc(n, sizeof *executor->owned);
	executor->target_of = f8_calloc(n, sizeof *executor->target_of);
	executor->scaling_source = f8_calloc(n, sizeof *executor->scaling_source);
	executor->frozen_offset = f8_calloc(n, sizeof *executor->frozen_offset);
	f8_status status = F8_OK;
	if (!executor->symbol_values || !executor->views || !executor->planned_views ||
	    !executor->made || !executor->owned || !executor->target_of ||
	    !executor->scaling_source || !executor->frozen_offset)
		status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	if (!status && graph->n_symbols)
		memcpy(executor->symbol_values, symbol_values, graph->n_symbols * sizeof(int64_t));
	if (!status)
		status = check_sizes(executor, diag);
	if (!status)
		status = check_slices(executor, diag);
	if (!status) {
		index_updates(executor);
		for (uint32_t v = 0; v < graph->n_values; v++)
			executor->planned |= graph->values[v].buffer_offset >= 0;
		status = make_leaves(executor, diag);
	}
	if (!status && executor->planned)
		status = plan_views(executor, diag);
	if (!status)
		reset_views(executor);
	if (!status)
		status = backend->interface->prepare(backend, graph, executor->symbol_values, diag);
	if (status) {
		f8_executor_destroy(executor);
		return status;
	}
	*out = executor;
	return F8_OK;
}

static void free_plan(run_plan *plan) {
	f8_free(plan->nodes);
	f8_free(plan->last_read);
	f8_free(plan->carried);
	*plan = (run_plan){0};
}

static void forget_plans(f8_executor *executor) {
	for (uint32_t i = 0; i < RUN_PLANS; i++)
		free_plan(&executor->plans[i]);
	for (uint32_t i = 0; executor->chunk_plans && i < RUN_PLANS * executor->n_chunks; i++)
		free_plan(&executor->chunk_plans[i]);
}

/* The chunk a run's flags name (F8_RUN_CHUNK: its number + 1), 0 for a run of every chunk. */
static uint32_t run_chunk(uint32_t phases) {
	return (phases & F8_RUN_CHUNK_MASK) >> F8_RUN_CHUNK_SHIFT;
}

/* Whether a run of `phases` (with its chunk) runs node `id`. */
static bool selects(const f8_executor *executor, uint32_t phases, f8_node_id id) {
	const f8_node *node = &executor->graph->nodes[id];
	uint32_t chunk = run_chunk(phases);
	return (phases & F8_PHASE_BIT(node->phase)) &&
	       (!chunk || executor->chunk_of[id] == chunk - 1);
}

/* Gives value v's own buffer back (to the spares, or to the backend when they cannot grow). */
static void release_own(f8_executor *executor, f8_value_id v) {
	if (!executor->owned[v])
		return;
	f8_buffer *buffer = executor->views[v].buffer;
	uint64_t n_bytes = executor->views[v].n_bytes;
	executor->owned[v] = false;
	executor->views[v].buffer = NULL;
	if (executor->n_spares == executor->cap_spares) {
		uint32_t cap = executor->cap_spares ? 2 * executor->cap_spares : 64;
		spare *grown = f8_realloc(executor->spares, cap * sizeof *grown);
		if (grown) {
			executor->spares = grown;
			executor->cap_spares = cap;
		}
	}
	if (executor->n_spares < executor->cap_spares)
		executor->spares[executor->n_spares++] = (spare){.buffer = buffer, .n_bytes = n_bytes};
	else
		free_buffer(executor, buffer);
}

/* Value v is done with in this run: not readable any more, its own buffer given back. */
static void forget(f8_executor *executor, f8_value_id v) {
	executor->made[v] = false;
	release_own(executor, v);
}

/* Frees what the last run made (leaves stay). */
static void release_run(f8_executor *executor) {
	for (uint32_t v = 0; v < executor->graph->n_values; v++)
		if (executor->made[v])
			forget(executor, v);
}

void f8_executor_destroy(f8_executor *executor) {
	if (!executor)
		return;
	for (uint32_t v = 0; executor->owned && v < executor->graph->n_values; v++)
		release_own(executor, v);
	for (uint32_t i = 0; i < executor->n_spares; i++)
		free_buffer(executor, executor->spares[i].buffer);
	f8_free(executor->spares);
	forget_plans(executor);
	free_buffer(executor, executor->leaves);
	free_buffer(executor, executor->slab);
	free_buffer(executor, executor->frozen);
	for (uint32_t c = 1; c < executor->n_contexts; c++) {
		free_buffer(executor, executor->slabs[c]);
		f8_free(executor->made_in[c]);
	}
	if (executor->made_in)
		executor->made = executor->made_in[0];
	f8_free(executor->slabs);
	f8_free(executor->made_in);
	f8_free(executor->symbol_values);
	f8_free(executor->views);
	f8_free(executor->planned_views);
	f8_free(executor->made);
	f8_free(executor->owned);
	f8_free(executor->target_of);
	f8_free(executor->scaling_source);
	f8_free(executor->frozen_offset);
	f8_free(executor->chunk_of);
	f8_free(executor->chunk_plans);
	f8_free(executor);
}

const f8_graph *f8_executor_graph(const f8_executor *executor) {
	return executor->graph;
}

f8_backend *f8_executor_backend(const f8_executor *executor) {
	return executor->backend;
}

/* Whether value v lives in the slab plan's slab (a context's own). */
static bool in_slab(const f8_executor *executor, f8_value_id v) {
	return !is_leaf(executor->graph, v) && executor->target_of[v] == F8_NONE &&
	       executor->graph->values[v].buffer_offset >= 0;
}

f8_status f8_executor_set_contexts(f8_executor *executor, uint32_t n, f8_diag *diag) {
	if (n < 1 || n > F8_EXECUTOR_CONTEXTS_MAX)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "%u contexts: from 1 to %d", n,
				   F8_EXECUTOR_CONTEXTS_MAX);
	if (n > 1 && per_value(executor))
		return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "several micro-batches in flight need "
				   "the schedule pass's slab plan: %s",
				   executor->planned ? "every value is kept (keep_all)"
						     : "this graph has no slab offsets");
	if (n <= (executor->n_contexts ? executor->n_contexts : 1))
		return F8_OK;
	if (!executor->slabs) {
		f8_buffer **slabs = f8_calloc(F8_EXECUTOR_CONTEXTS_MAX, sizeof *slabs);
		bool **made_in = f8_calloc(F8_EXECUTOR_CONTEXTS_MAX, sizeof *made_in);
		if (!slabs || !made_in) {
			f8_free(slabs);
			f8_free(made_in);
			return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
		}
		executor->slabs = slabs, executor->made_in = made_in;
		executor->slabs[0] = executor->slab;
		executor->made_in[0] = executor->made;
		executor->n_contexts = 1;
	}
	while (executor->n_contexts < n) {
		uint32_t c = executor->n_contexts;
		executor->made_in[c] = f8_calloc(executor->graph->n_values + 1, sizeof(bool));
		if (!executor->made_in[c])
			return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
		f8_status status = make_buffer(executor, executor->slab_bytes, &executor->slabs[c],
					       diag);
		if (status) {
			f8_free(executor->made_in[c]);
			executor->made_in[c] = NULL;
			return status;
		}
		executor->n_contexts++;
	}
	return F8_OK;
}

f8_status f8_executor_set_chunks(f8_executor *executor, const uint8_t *chunk_of,
				 uint32_t n_chunks, f8_diag *diag) {
	const f8_graph *graph = executor->graph;
	if (n_chunks < 1 || n_chunks > F8_PIPELINE_CHUNKS_MAX)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "%u model chunks: from 1 to %d", n_chunks,
				   F8_PIPELINE_CHUNKS_MAX);
	for (uint32_t id = 0; id < graph->n_nodes; id++)
		if (chunk_of[id] >= n_chunks)
			return f8_diag_set(diag, F8_ERR_ARGUMENT, "node %u's model chunk is %u of %u",
					   id, chunk_of[id], n_chunks);
	// A fused kernel runs whole: its members must be one chunk's. And the runs of a
	// micro-batch's chunks must come in program order, which the slab plan's lifetimes follow.
	uint32_t run[F8_PHASE_COUNT] = {0};
	for (uint32_t p = 0; p < graph->n_order; p++) {
		f8_node_id id = graph->order[p];
		f8_phase phase = graph->nodes[id].phase;
		if (!f8_pipeline_chunked(phase))
			continue;
		uint32_t at = f8_pipeline_chunk_run(phase, chunk_of[id], n_chunks);
		if (at < run[phase]) {
			f8_diag_set(diag, F8_ERR_INVALID, "model chunk %u's %s node stands after a "
				    "later run's node in the program, whose memory plan follows its "
				    "order", chunk_of[id], f8_phase_name(phase));
			f8_diag_set_node(diag, graph, id);
			return F8_ERR_INVALID;
		}
		run[phase] = at;
	}
	for (uint32_t p = 1; p < graph->n_order; p++) {
		f8_node_id id = graph->order[p], before = graph->order[p - 1];
		uint32_t group = graph->nodes[id].group;
		if (group != F8_NONE && graph->nodes[before].group == group &&
		    chunk_of[before] != chunk_of[id]) {
			f8_diag_set(diag, F8_ERR_INVALID, "fused kernel %s holds nodes of model chunks "
				    "%u and %u, which run apart", graph->groups[group].name,
				    chunk_of[before], chunk_of[id]);
			f8_diag_set_node(diag, graph, id);
			return F8_ERR_INVALID;
		}
	}
	uint8_t *copy = f8_malloc(graph->n_nodes + 1);
	run_plan *plans = f8_calloc((size_t)RUN_PLANS * n_chunks, sizeof *plans);
	if (!copy || !plans) {
		f8_free(copy), f8_free(plans);
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	}
	memcpy(copy, chunk_of, graph->n_nodes);
	forget_plans(executor);
	f8_free(executor->chunk_of), f8_free(executor->chunk_plans);
	executor->chunk_of = copy, executor->chunk_plans = plans, executor->n_chunks = n_chunks;
	return F8_OK;
}

void f8_executor_use_context(f8_executor *executor, uint32_t context) {
	if (context == executor->context || context >= executor->n_contexts ||
	    per_value(executor)) // keep_all went back to context 0: one context
		return;
	executor->context = context;
	executor->made = executor->made_in[context];
	for (uint32_t v = 0; v < executor->graph->n_values; v++)
		if (in_slab(executor, v))
			executor->views[v].buffer = executor->planned_views[v].buffer =
				executor->slabs[context];
}

void f8_executor_keep_all(f8_executor *executor, bool keep) {
	if (keep == executor->keep_all)
		return;
	f8_executor_use_context(executor, 0); // a value of its own each: one context
	release_run(executor);
	forget_plans(executor); // what a run keeps is part of its plan
	executor->keep_all = keep;
	reset_views(executor);
}

void f8_executor_freeze_scaling(f8_executor *executor, bool freeze) {
	executor->freeze_scaling = freeze;
}

bool f8_executor_has(const f8_executor *executor, f8_value_id value) {
	return value < executor->graph->n_values &&
	       (is_leaf(executor->graph, value) || executor->made[value]);
}

const f8_tensor_view *f8_executor_view(const f8_executor *executor, f8_value_id value) {
	return f8_executor_has(executor, value) ? &executor->views[value] : NULL;
}

/* "f32[4, 8]" of a view or a host tensor, into text. */
static const char *type_text(f8_dtype dtype, int rank, const int64_t *dims, char *text,
			     size_t size) {
	size_t used = (size_t)snprintf(text, size, "%s[", f8_dtype_name(dtype));
	for (int i = 0; i < rank && used < size; i++)
		used += (size_t)snprintf(text + used, size - used, "%s%lld", i ? ", " : "",
					 (long long)dims[i]);
	if (used < size)
		snprintf(text + used, size - used, "]");
	return text;
}

f8_status f8_executor_write(f8_executor *executor, f8_value_id value, const f8_rt_tensor *host,
			    f8_diag *diag) {
	const f8_graph *graph = executor->graph;
	if (value >= graph->n_values || !is_leaf(graph, value))
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "%s%s is not a leaf: only leaves are "
				   "written", value < graph->n_values ? "%" : "value ",
				   value < graph->n_values ? graph->values[value].name : "?");
	const f8_tensor_view *view = &executor->views[value];
	bool same = host->dtype == view->dtype && host->rank == view->rank;
	for (int i = 0; same && i < view->rank; i++)
		same = host->dims[i] == view->dims[i];
	if (!same) {
		char want[128], have[128];
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "%%%s is %s; the data given is %s",
				   graph->values[value].name,
				   type_text(view->dtype, view->rank, view->dims, want, sizeof want),
				   type_text(host->dtype, host->rank, host->dims, have, sizeof have));
	}
	if (!view->n_bytes)
		return F8_OK;
	return executor->backend->interface->upload(executor->backend, view, host->data, diag);
}

f8_status f8_executor_read(const f8_executor *executor, f8_value_id value, f8_rt_tensor *host,
			   f8_diag *diag) {
	*host = (f8_rt_tensor){0};
	const f8_tensor_view *view = f8_executor_view(executor, value);
	if (!view || (!view->buffer && view->n_bytes))
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "%%%s cannot be read: the last run did "
				   "not keep it", value < executor->graph->n_values
				   ? executor->graph->values[value].name : "?");
	f8_status status = f8_rt_tensor_create(view->dtype, view->rank, view->dims, host, diag);
	if (!status && view->n_bytes)
		status = executor->backend->interface->download(executor->backend, view, host->data,
								diag);
	if (status)
		f8_rt_tensor_destroy(host);
	return status;
}

double f8_executor_read_scalar(const f8_executor *executor, f8_value_id value) {
	f8_rt_tensor host;
	if (f8_executor_read(executor, value, &host, NULL))
		return NAN;
	double x = f8_rt_tensor_numel(&host) ? f8_rt_tensor_get(&host, 0) : NAN;
	f8_rt_tensor_destroy(&host);
	return x;
}

f8_executor_memory f8_executor_memory_of(const f8_executor *executor) {
	uint32_t contexts = executor->n_contexts ? executor->n_contexts : 1;
	return (f8_executor_memory){.planned = executor->planned, .contexts = contexts,
				    .slab_bytes = executor->slab_bytes * contexts,
				    .leaf_bytes = executor->leaf_bytes,
				    .other_bytes = executor->frozen_bytes};
}

/*
 * Before a run: every input a node reads is a leaf or made earlier in the run; and, since an
 * update's source is written in place of its leaf, no node reads a leaf after its update's
 * source is made (it would read the new state where the program means the old: an optimizer
 * reading the gradient accumulator in the run that added to it). The phases run apart
 * (fwd|bwd, then opt) read what they should.
 */
static f8_status check_run(const f8_executor *executor, uint32_t phases, run_plan *plan,
			   f8_diag *diag) {
	const f8_graph *graph = executor->graph;
	uint32_t n = graph->n_values ? graph->n_values : 1;
	bool *stale = f8_calloc(n, sizeof *stale), *made = f8_calloc(n, sizeof *made);
	f8_status status = stale && made ? F8_OK : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	// A run that continues the context's last one reads what that run kept: what the phases
	// before its own made (checked at run time: run_carried).
	if (!status && (phases & F8_RUN_CONTINUE)) {
		uint32_t first = plan->n_nodes ? graph->nodes[plan->nodes[0]].phase : F8_PHASE_COUNT;
		// A chunk's run continues its micro-batch's runs of the chunks before it.
		uint32_t chunk = run_chunk(phases), at = 0;
		if (chunk && plan->n_nodes)
			at = f8_pipeline_chunk_run(graph->nodes[plan->nodes[0]].phase, chunk - 1,
						   executor->n_chunks);
		plan->carried = f8_calloc(n, sizeof *plan->carried);
		if (!plan->carried)
			status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
		// Their update sources are in their leaves by now: a leaf they update reads stale,
		// as it would in one run of all the phases.
		for (uint32_t p = 0; !status && p < graph->n_order; p++) {
			f8_node_id id = graph->order[p];
			const f8_node *node = &graph->nodes[id];
			bool before = node->phase < first ||
				      (chunk && f8_pipeline_chunked(node->phase) &&
				       f8_pipeline_chunk_run(node->phase,
						executor->chunk_of[id], executor->n_chunks) < at);
			if (!before || selects(executor, phases, id))
				continue;
			for (uint32_t j = 0; j < node->n_outputs; j++) {
				f8_value_id v = node->outputs[j];
				made[v] = true;
				if (executor->target_of[v] != F8_NONE)
					stale[executor->target_of[v]] = true;
			}
		}
	}
	for (uint32_t p = 0; !status && p < plan->n_nodes; p++) {
		const f8_node *node = &graph->nodes[plan->nodes[p]];
		for (uint32_t j = 0; !status && j < node->n_inputs; j++) {
			f8_value_id v = node->inputs[j];
			if (v == F8_NONE)
				continue;
			bool carried = plan->carried && !is_leaf(graph, v) && made[v] &&
				       !selects(executor, phases, graph->values[v].producer);
			if (carried) {
				bool listed = false;
				for (uint32_t c = 0; c < plan->n_carried && !listed; c++)
					listed = plan->carried[c] == v;
				if (!listed)
					plan->carried[plan->n_carried++] = v;
			}
			if (!is_leaf(graph, v) && !made[v]) {
				f8_diag_set(diag, F8_ERR_ARGUMENT, "input %u (%%%s) was not computed "
					    "in this run: it is made in phase %s", j,
					    graph->values[v].name,
					    f8_phase_name(graph->nodes[graph->values[v].producer].phase));
				status = F8_ERR_ARGUMENT;
			} else if (stale[v]) {
				f8_diag_set(diag, F8_ERR_ARGUMENT, "input %u (%%%s) is read after its "
					    "update's source was made in the same run, so it would be "
					    "stale", j, graph->values[v].name);
				f8_diag_hint(diag, "run the phases that update state apart from the "
					     "ones that read it (a training step: fwd|bwd, then opt)");
				status = F8_ERR_ARGUMENT;
			}
			if (status)
				f8_diag_set_node(diag, graph, plan->nodes[p]);
		}
		for (uint32_t j = 0; j < node->n_outputs; j++) {
			f8_value_id v = node->outputs[j];
			made[v] = true;
			if (executor->target_of[v] != F8_NONE)
				stale[executor->target_of[v]] = true;
		}
	}
	f8_free(stale);
	f8_free(made);
	return status;
}

static f8_status plan_run(const f8_executor *executor, uint32_t phases, run_plan *plan,
			  f8_diag *diag) {
	const f8_graph *graph = executor->graph;
	plan->nodes = f8_calloc(graph->n_order ? graph->n_order : 1, sizeof(f8_node_id));
	plan->last_read = f8_calloc(graph->n_values ? graph->n_values : 1, sizeof(uint32_t));
	if (!plan->nodes || !plan->last_read)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory planning a run");
	plan->n_nodes = 0;
	for (uint32_t v = 0; v < graph->n_values; v++)
		plan->last_read[v] = NOT_READ;
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		if (!selects(executor, phases, graph->order[i]))
			continue;
		for (uint32_t j = 0; j < node->n_inputs; j++)
			if (node->inputs[j] != F8_NONE)
				plan->last_read[node->inputs[j]] = plan->n_nodes;
		plan->nodes[plan->n_nodes++] = graph->order[i];
	}
	for (uint32_t i = 0; i < graph->n_outputs; i++)
		plan->last_read[graph->outputs[i]] = KEPT;
	for (uint32_t i = 0; i < graph->n_updates; i++)
		plan->last_read[graph->updates[i].source] = KEPT;
	if (executor->keep_all)
		for (uint32_t v = 0; v < graph->n_values; v++)
			plan->last_read[v] = KEPT;
	// F8_RUN_KEEP: what the other phases (and chunks) read of what this run makes, or of what
	// it reads from the runs it continues, stays, for the runs that continue this one on its
	// context (a value this run neither makes nor reads is not its to keep or free).
	for (uint32_t i = 0; (phases & F8_RUN_KEEP) && i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		if (selects(executor, phases, graph->order[i]))
			continue;
		for (uint32_t j = 0; j < node->n_inputs; j++) {
			f8_value_id v = node->inputs[j];
			if (v != F8_NONE && !is_leaf(graph, v))
				plan->last_read[v] = KEPT;
		}
	}
	return check_run(executor, phases, plan, diag);
}

/* A buffer of its own for value v (a spare of its size, or a new one), when values have their
 * own; in the slab plan and for update sources (in their leaves) nothing to do. */
static f8_status place(f8_executor *executor, f8_value_id v, f8_diag *diag) {
	if (!per_value(executor) || executor->target_of[v] != F8_NONE || executor->owned[v])
		return F8_OK;
	f8_tensor_view *view = &executor->views[v];
	for (uint32_t i = executor->n_spares; i-- > 0;) {
		if (executor->spares[i].n_bytes != view->n_bytes)
			continue;
		view->buffer = executor->spares[i].buffer;
		executor->spares[i] = executor->spares[--executor->n_spares];
		executor->owned[v] = true;
		return F8_OK;
	}
	f8_status status = make_buffer(executor, view->n_bytes, &view->buffer, diag);
	if (status && diag) {
		char cause[F8_DIAG_MESSAGE_MAX]; // copied first: formatting diag->message into itself
		snprintf(cause, sizeof cause, "%s", status == F8_ERR_NOMEM ? "out of memory"
									   : diag->message);
		return f8_diag_set(diag, status, "cannot allocate %%%s: %s",
				   executor->graph->values[v].name, cause);
	}
	executor->owned[v] = !status;
	return status;
}

/* The frozen scaling state's buffer, made the first time scaling is frozen: each ScalingUpdate
 * source at an aligned offset. */
static f8_status make_frozen(f8_executor *executor, f8_diag *diag) {
	if (executor->frozen)
		return F8_OK;
	const f8_graph *graph = executor->graph;
	uint64_t bytes = 0;
	for (uint32_t v = 0; v < graph->n_values; v++) {
		if (!executor->scaling_source[v])
			continue;
		executor->frozen_offset[v] = bytes;
		bytes += aligned(executor->views[executor->target_of[v]].n_bytes);
	}
	executor->frozen_bytes = bytes;
	return make_buffer(executor, bytes, &executor->frozen, diag);
}

/* Points the scaling sources at their leaves, or while frozen at the frozen buffer. */
static void point_scaling_sources(f8_executor *executor) {
	const f8_graph *graph = executor->graph;
	for (uint32_t v = 0; v < graph->n_values; v++) {
		if (!executor->scaling_source[v])
			continue;
		executor->views[v] = executor->views[executor->target_of[v]];
		if (executor->freeze_scaling) {
			executor->views[v].buffer = executor->frozen;
			executor->views[v].offset = executor->frozen_offset[v];
		}
	}
}

/* Gives back what position `position` of the run read last (its own buffers). */
static void release_reads(f8_executor *executor, const f8_node *node, uint32_t position,
			  const run_plan *plan) {
	for (uint32_t j = 0; j < node->n_inputs; j++) {
		f8_value_id v = node->inputs[j];
		if (v != F8_NONE && executor->made[v] && plan->last_read[v] == position)
			forget(executor, v);
	}
}

/* An output nothing reads in this run (a statistic only the backward wants) goes now. */
static void release_unread(f8_executor *executor, const f8_node *node, const run_plan *plan) {
	for (uint32_t j = 0; j < node->n_outputs; j++)
		if (plan->last_read[node->outputs[j]] == NOT_READ)
			forget(executor, node->outputs[j]);
}

/* Runs node `id` at position `position` of the run through the backend; with `issue` false
 * (the backend replays the run) only the executor's side of it. */
static f8_status run_node(f8_executor *executor, f8_node_id id, uint32_t position,
			  const run_plan *plan, bool issue, f8_diag *diag) {
	const f8_graph *graph = executor->graph;
	const f8_node *node = &graph->nodes[id];
	f8_backend *backend = executor->backend;
	f8_status status = F8_OK;
	for (uint32_t j = 0; !status && j < node->n_outputs; j++) {
		status = place(executor, node->outputs[j], diag);
		executor->made[node->outputs[j]] = !status;
	}
	uint32_t axes;
	if (status || !issue)
		;
	else if (f8_rt_collective_axes(node, &axes))
		status = backend->interface->run_collective(backend, id, axes, executor->views, diag);
	else
		status = backend->interface->run_node(backend, id, executor->views, diag);
	if (status) {
		if (diag && !diag->node[0])
			f8_diag_set_node(diag, graph, id);
		return status;
	}
	release_reads(executor, node, position, plan);
	release_unread(executor, node, plan);
	return F8_OK;
}

/*
 * Runs fused group `group`, whose first member stands at `position` of the run, through the
 * backend (with `issue` false, only the executor's side of it); its members are contiguous in
 * the run (ir/graph.h): their count into *members.
 */
static f8_status run_group(f8_executor *executor, uint32_t group, uint32_t position,
			   const run_plan *plan, bool issue, uint32_t *members, f8_diag *diag) {
	const f8_graph *graph = executor->graph;
	*members = 0;
	while (position + *members < plan->n_nodes &&
	       graph->nodes[plan->nodes[position + *members]].group == group)
		(*members)++;
	f8_status status = F8_OK;
	for (uint32_t m = 0; !status && m < *members; m++) {
		const f8_node *node = &graph->nodes[plan->nodes[position + m]];
		for (uint32_t j = 0; !status && j < node->n_outputs; j++) {
			status = place(executor, node->outputs[j], diag);
			executor->made[node->outputs[j]] = !status;
		}
	}
	if (!status && issue)
		status = executor->backend->interface->run_group(executor->backend, group,
								 executor->views, diag);
	if (status) {
		if (diag && !diag->node[0])
			f8_diag_set_node(diag, graph, plan->nodes[position]);
		return status;
	}
	for (uint32_t m = 0; m < *members; m++)
		release_reads(executor, &graph->nodes[plan->nodes[position + m]], position + m, plan);
	for (uint32_t m = 0; m < *members; m++)
		release_unread(executor, &graph->nodes[plan->nodes[position + m]], plan);
	return F8_OK;
}

/* After a run that succeeded: the update sources were written in their leaves; those that
 * are not outputs are not readable by their own names any more. The scaling state made while
 * frozen stays readable until the next run (it is in the frozen buffer, and no leaf took it). */
static void end_updates(f8_executor *executor) {
	const f8_graph *graph = executor->graph;
	for (uint32_t i = 0; i < graph->n_updates; i++) {
		f8_value_id source = graph->updates[i].source;
		if (!executor->made[source] || executor->keep_all ||
		    (executor->freeze_scaling && executor->scaling_source[source]))
			continue; // kept: the frozen buffer is not a leaf's
		bool is_output = false;
		for (uint32_t j = 0; j < graph->n_outputs; j++)
			is_output |= graph->outputs[j] == source;
		if (!is_output)
			executor->made[source] = false;
	}
}

/* Whether the run has written an update's source in place of its leaf. */
static bool wrote_state(const f8_executor *executor) {
	const f8_graph *graph = executor->graph;
	for (uint32_t i = 0; i < graph->n_updates; i++) {
		f8_value_id source = graph->updates[i].source;
		if (executor->made[source] && !(executor->freeze_scaling &&
						executor->scaling_source[source]))
			return true;
	}
	return false;
}

f8_status f8_executor_run(f8_executor *executor, uint32_t phases, f8_diag *diag) {
	if (executor->state_lost)
		return f8_diag_set(diag, F8_ERR_INVALID, "an earlier run failed after it had written "
				   "state in place: the leaves are not one step's state");
	uint32_t flags = phases & (F8_RUN_KEEP | F8_RUN_CONTINUE | F8_RUN_CHUNK_MASK);
	phases = (phases & F8_PHASES_ALL) | flags;
	uint32_t chunk = run_chunk(phases);
	if (chunk > executor->n_chunks)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "a run of model chunk %u: the program has "
				   "%u (f8_executor_set_chunks)", chunk - 1, executor->n_chunks);
	if (!(flags & F8_RUN_CONTINUE))
		release_run(executor);
	run_plan *plan = chunk ? &executor->chunk_plans[(chunk - 1) * RUN_PLANS + plan_index(phases)]
			       : &executor->plans[plan_index(phases)];
	f8_status status = F8_OK;
	if (!plan->nodes && (status = plan_run(executor, phases, plan, diag))) {
		free_plan(plan);
		return status;
	}
	for (uint32_t c = 0; c < plan->n_carried; c++) {
		f8_value_id v = plan->carried[c];
		if (executor->made[v])
			continue;
		f8_diag_hint(diag, "run the phases before it on this context first, with "
			     "F8_RUN_KEEP");
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "the run continues context %u's last run, "
				   "but that did not keep %%%s, which it reads", executor->context,
				   executor->graph->values[v].name);
	}
	if (executor->freeze_scaling)
		status = make_frozen(executor, diag);
	point_scaling_sources(executor);
	// A planned run repeats exactly (backend.h, run_begin): the backend may replay it.
	f8_backend *backend = executor->backend;
	uint32_t key = phases | (executor->freeze_scaling ? F8_RUN_KEY_FROZEN : 0) |
		       executor->context << F8_RUN_KEY_CONTEXT_SHIFT;
	bool bracketed = !status && !per_value(executor) && backend->interface->run_begin &&
			 backend->interface->run_end;
	bool replayed = false, begun = false;
	if (bracketed)
		begun = !(status = backend->interface->run_begin(backend, key, &replayed, diag));
	for (uint32_t i = 0; !status && i < plan->n_nodes;) {
		uint32_t group = executor->graph->nodes[plan->nodes[i]].group;
		if (group == F8_NONE || executor->keep_all) {
			status = run_node(executor, plan->nodes[i], i, plan, !replayed, diag);
			i++;
		} else {
			uint32_t members = 0;
			status = run_group(executor, group, i, plan, !replayed, &members, diag);
			i += members;
		}
	}
	if (begun && !replayed) {
		f8_diag ignored = {0}; // the first failure is the one to report
		f8_status ended = backend->interface->run_end(backend, key, !status,
							      status ? &ignored : diag);
		status = status ? status : ended;
	}
	if (!status)
		status = backend->interface->synchronize(backend, diag);
	if (status) {
		executor->state_lost = wrote_state(executor);
		release_run(executor);
		return status;
	}
	end_updates(executor);
	return F8_OK;
}
