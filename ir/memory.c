/*
 * A step's device memory by part (ir/memory.h).
 */
#include "ir/memory.h" // f8_memory_estimate_of

#include <stdbool.h> // bool

#include "ir/alloc.h"  // f8_calloc, f8_malloc, f8_free
#include "ir/dtype.h"  // f8_dtype_get_info
#include "ir/ops.h"    // f8_op_get_info, F8_OPF_GEMM
#include "ir/verify.h" // F8_SLAB_ALIGNMENT

static const char *const part_names[] = {
#define F8_MEMORY_PART_NAME(e, name, what) name,
	F8_MEMORY_PART_LIST(F8_MEMORY_PART_NAME)
#undef F8_MEMORY_PART_NAME
};
static const char *const part_whats[] = {
#define F8_MEMORY_PART_WHAT(e, name, what) what,
	F8_MEMORY_PART_LIST(F8_MEMORY_PART_WHAT)
#undef F8_MEMORY_PART_WHAT
};
static_assert(sizeof part_names / sizeof part_names[0] == F8_MEMORY_PART_COUNT, "one name each");

const char *f8_memory_part_name(f8_memory_part part) {
	return part < F8_MEMORY_PART_COUNT ? part_names[part] : "?";
}

const char *f8_memory_part_what(f8_memory_part part) {
	return part < F8_MEMORY_PART_COUNT ? part_whats[part] : "?";
}

uint64_t f8_memory_aligned(uint64_t bytes) {
	return (bytes + F8_SLAB_ALIGNMENT - 1) / F8_SLAB_ALIGNMENT * F8_SLAB_ALIGNMENT;
}

uint64_t f8_memory_type_bytes(const f8_type *type) {
	uint64_t n = f8_dtype_get_info(type->dtype)->bytes;
	for (int d = 0; d < type->shape.rank; d++) {
		if (!f8_dim_is_const(type->shape.dims[d]))
			return 0;
		n *= (uint64_t)f8_dim_value(type->shape.dims[d]);
	}
	return n;
}

/* The part a leaf belongs to: by role, and a state leaf by what updates it (`updated`: the
 * gradient accumulators in the backward, the scaling state by a ScalingUpdate, AdamW's the
 * rest; see state_parts). */
static f8_memory_part leaf_part(const f8_graph *graph, f8_value_id v, const uint8_t *updated) {
	switch (graph->values[v].role) {
	case F8_ROLE_PARAMETER:
	case F8_ROLE_BUFFER:
		return F8_MEMORY_PARAMETERS;
	case F8_ROLE_WEIGHT_CACHE:
		return F8_MEMORY_FP8_WEIGHTS;
	case F8_ROLE_SCALE:
	case F8_ROLE_AMAX_HISTORY:
		return F8_MEMORY_SCALING;
	case F8_ROLE_OPTIMIZER_STATE:
		return updated ? (f8_memory_part)updated[v] : F8_MEMORY_OPTIMIZER;
	default:
		return F8_MEMORY_INPUTS;
	}
}

/* Whether attention nodes a and b share a cuDNN plan (and so its workspace): the same op,
 * operand types and outputs (runtime/cuda/attention.c keys its plans by shape and dtype). */
static bool same_attention(const f8_graph *graph, const f8_node *a, const f8_node *b) {
	if (a->op != b->op || a->n_inputs != b->n_inputs || a->n_outputs != b->n_outputs)
		return false;
	for (uint32_t i = 0; i < a->n_inputs; i++) {
		if ((a->inputs[i] == F8_NONE) != (b->inputs[i] == F8_NONE))
			return false;
		if (a->inputs[i] != F8_NONE &&
		    !f8_type_equal(&graph->values[a->inputs[i]].type, &graph->values[b->inputs[i]].type))
			return false;
	}
	return true;
}

static bool is_packed_attention(f8_op op) {
	return op == F8_OP_ATTENTION_PACKED || op == F8_OP_ATTENTION_PACKED_GRAD;
}

/*
 * f8c's tensors in the workspace of attention node `node`'s cuDNN plan, as
 * runtime/cuda/attention.c lays them out: the forward's log-sum-exp when the node does not
 * output it; the backward's dQ accumulator (f32, q's shape; the deterministic backward has
 * none, and is not assumed) and softmax_sum (f32, a row per query).
 */
static uint64_t attention_workspace(const f8_graph *graph, const f8_node *node) {
	bool packed = is_packed_attention(node->op);
	bool forward = node->op == F8_OP_ATTENTION || node->op == F8_OP_ATTENTION_PACKED;
	f8_value_id q = node->inputs[forward ? 0 : 1];
	const f8_type *type = &graph->values[q].type;
	uint64_t rows = 1, head_dim; // rows: batch x heads x seq_q
	for (int d = 0; d < (packed ? 3 : 4); d++)
		if (!f8_dim_is_const(type->shape.dims[d]))
			return 0;
	if (packed) { // qkv (batch, seq, (heads + 2 kv_heads) * d), inference checked
		int64_t heads = f8_node_attr_int(node, "heads", 1);
		int64_t parts = heads + 2 * f8_node_attr_int(node, "kv_heads", heads);
		rows = (uint64_t)f8_dim_value(type->shape.dims[0]) *
		       (uint64_t)f8_dim_value(type->shape.dims[1]) * (uint64_t)heads;
		head_dim = (uint64_t)(f8_dim_value(type->shape.dims[2]) / parts);
	} else {
		for (int d = 0; d < 3; d++)
			rows *= (uint64_t)f8_dim_value(type->shape.dims[d]);
		head_dim = (uint64_t)f8_dim_value(type->shape.dims[3]);
	}
	if (forward)
		return node->n_outputs < 2 ? f8_memory_aligned(rows * 4) : 0;
	return f8_memory_aligned(rows * head_dim * 4) + f8_memory_aligned(rows * 4);
}

/* Per value, the part of the state leaf each update targets: SCALING for a ScalingUpdate's,
 * GRADIENTS for a backward node's (the accumulators), OPTIMIZER otherwise. NULL when out of
 * memory (every state leaf is then counted as the optimizer's). */
static uint8_t *state_parts(const f8_graph *graph) {
	uint8_t *part = f8_malloc(graph->n_values + 1);
	for (uint32_t v = 0; part && v < graph->n_values; v++)
		part[v] = F8_MEMORY_OPTIMIZER;
	for (uint32_t i = 0; part && i < graph->n_updates; i++) {
		const f8_node *by = &graph->nodes[graph->values[graph->updates[i].source].producer];
		uint8_t *target = &part[graph->updates[i].target];
		if (by->op == F8_OP_SCALING_UPDATE)
			*target = F8_MEMORY_SCALING;
		else if (by->phase == F8_PHASE_BWD && *target != F8_MEMORY_SCALING)
			*target = F8_MEMORY_GRADIENTS;
	}
	return part;
}

void f8_memory_estimate_add(f8_memory_estimate *estimate, f8_memory_part part, uint64_t bytes) {
	estimate->part[part] += bytes;
	estimate->total += bytes;
}

f8_memory_estimate f8_memory_estimate_of(const f8_graph *graph) {
	f8_memory_estimate e = {0};
	uint8_t *updated = state_parts(graph);
	for (uint32_t i = 0; i < graph->n_inputs; i++) {
		f8_value_id v = graph->inputs[i];
		e.part[leaf_part(graph, v, updated)] +=
			f8_memory_aligned(f8_memory_type_bytes(&graph->values[v].type));
	}
	f8_free(updated);
	// Which values a bwd node reads: the forward's saved activations among the stored.
	bool *read_in_bwd = f8_calloc(graph->n_values ? graph->n_values : 1, sizeof *read_in_bwd);
	bool gemms = false;
	for (uint32_t p = 0; p < graph->n_order; p++) {
		const f8_node *node = &graph->nodes[graph->order[p]];
		gemms |= (f8_op_get_info(node->op)->flags & F8_OPF_GEMM) != 0;
		for (uint32_t j = 0; read_in_bwd && node->phase == F8_PHASE_BWD && j < node->n_inputs; j++)
			if (node->inputs[j] != F8_NONE)
				read_in_bwd[node->inputs[j]] = true;
		if (node->op != F8_OP_ATTENTION && node->op != F8_OP_ATTENTION_GRAD &&
		    !is_packed_attention(node->op))
			continue;
		bool shared = false; // with an earlier node: one plan, one workspace
		for (uint32_t q = 0; q < p && !shared; q++)
			shared = same_attention(graph, node, &graph->nodes[graph->order[q]]);
		if (!shared)
			e.part[F8_MEMORY_WORKSPACES] += attention_workspace(graph, node);
	}
	if (gemms)
		e.part[F8_MEMORY_WORKSPACES] += F8_MEMORY_GEMM_WORKSPACE_BYTES;
	for (uint32_t v = 0; v < graph->n_values; v++) {
		const f8_value *value = &graph->values[v];
		uint64_t bytes = f8_memory_aligned(f8_memory_type_bytes(&value->type));
		if (value->recompute)
			e.recomputed_activations += bytes;
		if (value->buffer_offset < 0)
			continue;
		e.planned = true;
		uint64_t end = (uint64_t)value->buffer_offset + bytes;
		if (end > e.part[F8_MEMORY_ACTIVATIONS])
			e.part[F8_MEMORY_ACTIVATIONS] = end;
		if (read_in_bwd && read_in_bwd[v] &&
		    graph->nodes[value->producer].phase == F8_PHASE_FWD)
			e.saved_activations += bytes;
	}
	f8_free(read_in_bwd);
	e.part[F8_MEMORY_RUNTIME] = F8_MEMORY_CUDA_RUNTIME_BYTES;
	for (int part = 0; part < F8_MEMORY_PART_COUNT; part++)
		e.total += e.part[part];
	return e;
}
