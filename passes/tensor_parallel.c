/*
 * The tensor-parallel pass (passes/tensor_parallel.h): regions found by following each Linear's
 * output, then split.
 *
 * requires: canonicalize, fuse-patterns, bf16; before attention-unfused and training.
 */
#include "passes/tensor_parallel.h" // f8_pass_tensor_parallel_run
#include "passes/tensor_parallel_internal.h" // f8_tp_infer_all, f8_tp_split_vocabulary

#include <string.h> // strlen, memcpy

#include "ir/alloc.h"  // f8_calloc, f8_free
#include "ir/arena.h"  // f8_arena_alloc_array, f8_arena_concat
#include "ir/verify.h" // f8_node_infer_types

enum { WHOLE = -1 }; // a value every rank holds whole

typedef enum tp_role { TP_NONE, TP_COLUMN, TP_ROW } tp_role;

typedef struct tp_pass {
	f8_graph *graph;
	f8_diag *diag;
	int64_t ranks;
	int8_t *dim;             // per value: the dimension split over TP, WHOLE otherwise
	uint32_t *stamp;         // per value: the trial that split it
	uint32_t trial;          // the trial under way, from 1
	const int64_t **parts;   // per column-parallel output: its split dimension's parts
	uint8_t *n_parts;
	tp_role *role;           // per node
	uint32_t *uses;          // per value: the live nodes that read it, and graph outputs
	uint32_t *position;      // per node: its place in the program
	// A trial (one region): what it set, to take back when it fails.
	f8_value_id *touched;
	uint32_t n_touched;
	f8_node_id *claimed;
	uint32_t n_claimed;
	const char *why; // why the trial failed, in the graph's arena or static
	f8_node_id why_node;
	uint32_t n_regions, n_column, n_row;
	uint32_t n_scattered, n_gathered; // sequence parallelism's
} tp_pass;

static f8_status nomem(f8_diag *diag) {
	return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory in the tensor-parallel pass");
}

static const f8_type *type_of(const tp_pass *t, f8_value_id v) {
	return &t->graph->values[v].type;
}

static int64_t const_dim(const f8_type *type, int d) {
	return d >= 0 && d < type->shape.rank && f8_dim_is_const(type->shape.dims[d])
		       ? f8_dim_value(type->shape.dims[d]) : -1;
}

/* Fails the trial at `node` for `why`. */
static bool refuse(tp_pass *t, f8_node_id node, const char *why) {
	t->why = why;
	t->why_node = node;
	return false;
}

/* Value `v` split along `d` in this trial; false on a conflict with what it is already. */
static bool set_dim(tp_pass *t, f8_node_id node, f8_value_id v, int d) {
	if (t->dim[v] == d && t->stamp[v] == t->trial)
		return true;
	if (t->dim[v] != WHOLE)
		return refuse(t, node, "a value would be split along two dimensions");
	t->dim[v] = (int8_t)d;
	t->stamp[v] = t->trial;
	t->touched[t->n_touched++] = v;
	return true;
}

/* The dimension along which this trial splits `v` (WHOLE when it does not: a region found
 * before is none of this one's business, as in a parallel attention and MLP block). */
static int in_trial(const tp_pass *t, f8_value_id v) {
	return t->stamp[v] == t->trial ? t->dim[v] : WHOLE;
}

/* Whether the trial under way claimed node `id`. */
static bool claimed_now(const tp_pass *t, f8_node_id id) {
	for (uint32_t i = 0; i < t->n_claimed; i++)
		if (t->claimed[i] == id)
			return true;
	return false;
}

/* The parameter behind GEMM operand `v` when only this GEMM reads it: `v` itself, or the one
 * its Cast reads (--bf16's copy of an f32 master weight); F8_NONE otherwise. */
static f8_value_id own_parameter(const tp_pass *t, f8_value_id v) {
	const f8_graph *graph = t->graph;
	f8_node_id producer = graph->values[v].producer;
	if (t->uses[v] != 1)
		return F8_NONE;
	if (producer != F8_NONE && graph->nodes[producer].op == F8_OP_CAST)
		v = graph->nodes[producer].inputs[0];
	return graph->values[v].role == F8_ROLE_PARAMETER && t->uses[v] == 1 ? v : F8_NONE;
}

/* The dimension of Linear `node`'s weight that holds its output features: 0 as PyTorch stores
 * it (N, K), 1 with transpose_weight (K, N, as ONNX MatMul and GPT-2's Conv1D store it). */
static int features_dim(const f8_node *node) {
	int experts = node->op == F8_OP_GROUPED_LINEAR; // (experts, N, K): one more in front
	return experts + (f8_node_attr_int(node, "transpose_weight", 0) ? 1 : 0);
}

/* The dimension of the weight that holds its input features (K). */
static int inputs_dim(const f8_node *node) {
	return node->op == F8_OP_GROUPED_LINEAR ? 3 - features_dim(node) : 1 - features_dim(node);
}

/* Whether `node` is a GEMM of a weight the pass splits: Linear, or an MoE's GroupedLinear (its
 * experts' FFNs split as Megatron-LM's expert tensor parallelism splits them). */
static bool is_linear(const f8_node *node) {
	return node->op == F8_OP_LINEAR || node->op == F8_OP_GROUPED_LINEAR;
}

/* The weight and bias inputs of Linear `node` (a GroupedLinear's third input is its counts). */
static uint32_t n_parameters(const f8_node *node) {
	return node->op == F8_OP_GROUPED_LINEAR ? 2 : node->n_inputs;
}

/* Whether Linear `node`'s weight and bias are parameters only it reads, none split yet. */
static bool own_parameters(const tp_pass *t, const f8_node *node) {
	for (uint32_t i = 1; i < n_parameters(node); i++)
		if (own_parameter(t, node->inputs[i]) == F8_NONE ||
		    in_trial(t, node->inputs[i]) != WHOLE)
			return false;
	return true;
}

/* Linear `id` made column-parallel in this trial, when it can be: its weight and bias its own
 * parameters, its output features a multiple of TP, its input whole. */
static bool claim_column(tp_pass *t, f8_node_id id) {
	const f8_node *node = &t->graph->nodes[id];
	if (t->role[id] != TP_NONE)
		return refuse(t, id, "the Linear is in another region");
	if (t->dim[node->inputs[0]] != WHOLE)
		return refuse(t, id, "a column-parallel GEMM would read a split input");
	if (!own_parameters(t, node))
		return refuse(t, id, "its weight or bias is not a parameter of its own (tied "
			      "weights stay whole)");
	int64_t rows = const_dim(type_of(t, node->inputs[1]), features_dim(node));
	if (rows < 0 || rows % t->ranks)
		return refuse(t, id, "TP does not divide its output features");
	t->role[id] = TP_COLUMN;
	t->claimed[t->n_claimed++] = id;
	f8_value_id out = node->outputs[0];
	return set_dim(t, id, out, type_of(t, out)->shape.rank - 1);
}

/* Linear `id`, reading a split input, made row-parallel: its input split along its features. */
static bool claim_row(tp_pass *t, f8_node_id id) {
	const f8_node *node = &t->graph->nodes[id];
	f8_value_id x = node->inputs[0];
	if (t->role[id] == TP_ROW && claimed_now(t, id)) // visited again after a pull
		return true;
	if (t->role[id] != TP_NONE)
		return refuse(t, id, "the Linear is in another region");
	if (in_trial(t, x) != type_of(t, x)->shape.rank - 1)
		return refuse(t, id, "a Linear reads a value split along another dimension than its "
			      "features");
	if (!own_parameters(t, node))
		return refuse(t, id, "the row-parallel GEMM's weight or bias is not a parameter of "
			      "its own");
	int64_t columns = const_dim(type_of(t, node->inputs[1]), inputs_dim(node));
	if (columns < 0 || columns % t->ranks)
		return refuse(t, id, "TP does not divide the row-parallel GEMM's input features");
	t->role[id] = TP_ROW;
	t->claimed[t->n_claimed++] = id;
	return true; // its output is whole once reduced
}

/* The parts `parts` (n) of column-parallel output `v`'s split dimension, as a Split or SwiGLU
 * reads them; each a multiple of TP, and the same for every reader. */
static bool set_parts(tp_pass *t, f8_node_id node, f8_value_id v, const int64_t *parts,
		      uint32_t n) {
	f8_node_id producer = t->graph->values[v].producer;
	if (producer == F8_NONE || t->role[producer] != TP_COLUMN)
		return refuse(t, node, "it splits a split dimension into parts that no "
			      "column-parallel GEMM writes");
	for (uint32_t i = 0; i < n; i++)
		if (parts[i] % t->ranks)
			return refuse(t, node, "TP does not divide each of the parts it splits");
	if (t->n_parts[v] && (t->n_parts[v] != n || memcmp(t->parts[v], parts, n * sizeof *parts)))
		return refuse(t, node, "readers of the GEMM's output split it into other parts");
	if (n > F8_MAX_PLACEMENT_PARTS)
		return refuse(t, node, "it splits into too many parts");
	int64_t *stored = f8_arena_alloc_array(t->graph->arena, n, sizeof *stored);
	if (!stored)
		return refuse(t, node, "out of memory");
	memcpy(stored, parts, n * sizeof *parts);
	t->parts[v] = stored;
	t->n_parts[v] = (uint8_t)n;
	return true;
}

/* The Linear, in no region yet, whose output reaches `v` through ops that only move or rotate
 * it (Reshape, Transpose, Rope, a GQA's Unsqueeze and Expand, Cast), each value read once:
 * where a region needs `v` split, that Linear is split with it (separate q, k and v
 * projections; Llama's gate and up). F8_NONE when there is none. */
static f8_node_id chain_root(const tp_pass *t, f8_value_id v) {
	const f8_graph *graph = t->graph;
	for (;;) {
		f8_node_id producer = graph->values[v].producer;
		if (producer == F8_NONE || t->uses[v] != 1)
			return F8_NONE;
		const f8_node *node = &graph->nodes[producer];
		switch (node->op) {
		case F8_OP_LINEAR:
		case F8_OP_GROUPED_LINEAR:
			return t->role[producer] == TP_NONE ? producer : F8_NONE;
		case F8_OP_RESHAPE:
		case F8_OP_TRANSPOSE:
		case F8_OP_UNSQUEEZE:
		case F8_OP_EXPAND:
		case F8_OP_ROPE:
		case F8_OP_CAST:
			v = node->inputs[0];
			break;
		default:
			return F8_NONE;
		}
	}
}

/* Value `v`, which node `id` needs split and is whole, split with its chain's Linear (*pulled,
 * to be visited again from there); else the region fails for `why`. */
static bool pull(tp_pass *t, f8_node_id id, f8_value_id v, f8_node_id *pulled, const char *why) {
	f8_node_id root = chain_root(t, v);
	if (root == F8_NONE)
		return refuse(t, id, why);
	*pulled = root;
	return claim_column(t, root);
}

/* Elementwise (broadcasting) `id`: its outputs split where its split inputs are. A whole input
 * that does not broadcast along that dimension is split too when a Linear writes it (pull);
 * else the region fails. */
static bool visit_elementwise(tp_pass *t, f8_node_id id, f8_node_id *pulled) {
	const f8_node *node = &t->graph->nodes[id];
	int rank = type_of(t, node->outputs[0])->shape.rank, d = WHOLE;
	for (uint32_t i = 0; i < node->n_inputs; i++) {
		f8_value_id v = node->inputs[i];
		if (in_trial(t, v) == WHOLE)
			continue;
		int at = in_trial(t, v) + rank - type_of(t, v)->shape.rank;
		if (d != WHOLE && at != d)
			return refuse(t, id, "its inputs are split along different dimensions");
		d = at;
	}
	for (uint32_t i = 0; i < node->n_inputs; i++) {
		f8_value_id v = node->inputs[i];
		const f8_type *type = type_of(t, v);
		int at = d - (rank - type->shape.rank);
		if (in_trial(t, v) != WHOLE || at < 0 || const_dim(type, at) == 1)
			continue;
		return pull(t, id, v, pulled, "it reads a whole value with a split one, elementwise");
	}
	for (uint32_t o = 0; o < node->n_outputs; o++)
		if (!set_dim(t, id, node->outputs[o], d))
			return false;
	return true;
}

/* Reshape: the split dimension keeps its place and the dimensions before it; it may merge with
 * the ones after it (heads x head_dim into features) or be cut (features into heads x
 * head_dim, the heads a multiple of TP). */
static bool visit_reshape(tp_pass *t, f8_node_id id, int d) {
	const f8_node *node = &t->graph->nodes[id];
	const f8_type *in = type_of(t, node->inputs[0]), *out = type_of(t, node->outputs[0]);
	// The output dimension that starts where the split one does: the dimensions before it
	// hold as many elements as those before the split one (batch x seq flattened, say).
	f8_dim before = f8_dim_const(1), after = f8_dim_const(1);
	for (int i = 0; i < d; i++)
		if (!f8_dim_mul(before, in->shape.dims[i], &before))
			return refuse(t, id, "a Reshape's sizes are too complex to follow");
	int k = 0;
	while (k < out->shape.rank && !f8_dim_equal(after, before) &&
	       f8_dim_mul(after, out->shape.dims[k], &after))
		k++;
	if (k >= out->shape.rank || !f8_dim_equal(after, before))
		return refuse(t, id, "a Reshape moves the split dimension into the ones before it");
	int64_t a = const_dim(in, d), b = const_dim(out, k);
	if (a < 0 || b < 0)
		return refuse(t, id, "a Reshape's split dimension is not a constant");
	int64_t product = a;
	for (int i = d + 1; product < b && i < in->shape.rank; i++)
		product *= const_dim(in, i) > 0 ? const_dim(in, i) : b + 1;
	int64_t cut = b;
	for (int i = k + 1; cut < a && i < out->shape.rank; i++)
		cut *= const_dim(out, i) > 0 ? const_dim(out, i) : a + 1;
	bool merges = product == b, cuts = cut == a && b % t->ranks == 0;
	if (!merges && !cuts)
		return refuse(t, id, "a Reshape splits its split dimension across others");
	return set_dim(t, id, node->outputs[0], k);
}

/* Unsqueeze or Squeeze: the split dimension's new place; false when it would be removed. */
static bool visit_axes(tp_pass *t, f8_node_id id, int d) {
	const f8_node *node = &t->graph->nodes[id];
	const f8_attr *axes = f8_node_attr(node, "axes");
	bool unsqueeze = node->op == F8_OP_UNSQUEEZE;
	const f8_type *in = type_of(t, node->inputs[0]), *out = type_of(t, node->outputs[0]);
	int rank = unsqueeze ? out->shape.rank : in->shape.rank, at = d;
	bool listed[F8_MAX_RANK] = {false};
	if (rank > F8_MAX_RANK) // shapes never are (ir/shape.h); gcc's -O3 cannot know it
		return refuse(t, id, "a shape of more dimensions than f8c keeps");
	for (uint32_t i = 0; axes && i < axes->ints.n; i++) {
		int axis;
		if (f8_axis_normalize(axes->ints.items[i], rank, false, &axis))
			listed[axis] = true;
	}
	if (!unsqueeze && !axes)
		for (int i = 0; i < rank; i++)
			listed[i] = const_dim(in, i) == 1;
	if (!unsqueeze && listed[d])
		return refuse(t, id, "a Squeeze removes the split dimension");
	if (unsqueeze) { // the input's d-th dimension lands on the d-th unlisted place
		int seen = -1;
		for (at = 0; at < rank; at++)
			if (!listed[at] && ++seen == d)
				break;
	} else {
		for (int i = 0; i < d; i++)
			at -= listed[i];
	}
	return set_dim(t, id, node->outputs[0], at);
}

/* Node `id` of the region, one of its inputs split: its outputs' split, or false (t->why). A
 * Linear pulled into the region into *pulled. */
static bool visit(tp_pass *t, f8_node_id id, f8_node_id *pulled) {
	const f8_node *node = &t->graph->nodes[id];
	bool split = false;
	for (uint32_t i = 0; i < node->n_inputs; i++)
		split |= in_trial(t, node->inputs[i]) != WHOLE;
	if (!split)
		return true;
	if (t->role[id] == TP_COLUMN) // the seed, or a GEMM pulled in: its input is whole
		return claimed_now(t, id) ? true
					  : refuse(t, id, "another region's column-parallel GEMM reads "
						   "a value this one splits");
	f8_value_id x = node->inputs[0];
	int d = in_trial(t, x), rank = type_of(t, x)->shape.rank;
	const f8_op_info *info = f8_op_get_info(node->op);
	switch (node->op) {
	case F8_OP_LINEAR:
	case F8_OP_GROUPED_LINEAR:
		if (node->op == F8_OP_GROUPED_LINEAR && in_trial(t, node->inputs[2]) != WHOLE)
			return refuse(t, id, "a GroupedLinear's counts are split");
		return claim_row(t, id);
	case F8_OP_SPLIT: {
		const f8_attr *sizes = f8_node_attr(node, "split");
		int axis;
		if (!f8_axis_normalize(f8_node_attr_int(node, "axis", 0), rank, false, &axis))
			return refuse(t, id, "a Split's axis is out of range");
		uint32_t n = sizes ? sizes->dims.n : node->n_outputs;
		if (axis == d && n > F8_MAX_PLACEMENT_PARTS)
			return refuse(t, id, "a Split of the split dimension into too many parts");
		int64_t parts[F8_MAX_PLACEMENT_PARTS]; // without sizes: equal parts
		for (uint32_t i = 0; axis == d && i < n; i++)
			parts[i] = !sizes ? const_dim(type_of(t, x), d) / n
				   : f8_dim_is_const(sizes->dims.items[i])
					   ? f8_dim_value(sizes->dims.items[i]) : 1;
		if (axis == d && !set_parts(t, id, x, parts, n))
			return false;
		for (uint32_t o = 0; o < node->n_outputs; o++)
			if (!set_dim(t, id, node->outputs[o], d))
				return false;
		return true;
	}
	case F8_OP_SWIGLU:
		if (node->n_inputs == 2)
			return visit_elementwise(t, id, pulled);
		if (d != rank - 1)
			return refuse(t, id, "SwiGLU reads a value split along another dimension than "
				      "its features");
		int64_t half = const_dim(type_of(t, x), d) / 2, halves[2] = {half, half};
		return set_parts(t, id, x, halves, 2) && set_dim(t, id, node->outputs[0], d);
	case F8_OP_RESHAPE:
		return visit_reshape(t, id, d);
	case F8_OP_TRANSPOSE: {
		const f8_attr *perm = f8_node_attr(node, "perm");
		for (uint32_t j = 0; perm && j < perm->ints.n; j++)
			if (perm->ints.items[j] == d)
				return set_dim(t, id, node->outputs[0], (int)j);
		return refuse(t, id, "a Transpose without its permutation");
	}
	case F8_OP_UNSQUEEZE:
	case F8_OP_SQUEEZE:
		return visit_axes(t, id, d);
	case F8_OP_EXPAND: {
		const f8_type *out = type_of(t, node->outputs[0]);
		int at = d + out->shape.rank - rank;
		if (!f8_dim_equal(type_of(t, x)->shape.dims[d], out->shape.dims[at]))
			return refuse(t, id, "an Expand broadcasts the split dimension");
		return set_dim(t, id, node->outputs[0], at);
	}
	case F8_OP_ATTENTION:
	case F8_OP_ROPE: // split along the heads, the same in each of q, k and v
		for (uint32_t i = 0; i < (node->op == F8_OP_ATTENTION ? 3u : 1u); i++) {
			f8_value_id v = node->inputs[i];
			if (in_trial(t, v) == WHOLE)
				return pull(t, id, v, pulled, "attention reads q, k or v whole, and no "
					    "projection of its own writes it");
			if (in_trial(t, v) != 1 || type_of(t, v)->shape.rank != 4)
				return refuse(t, id, "attention whose q, k and v are not split along "
					      "their heads");
		}
		for (uint32_t i = node->op == F8_OP_ATTENTION ? 3 : 1; i < node->n_inputs; i++)
			if (in_trial(t, node->inputs[i]) != WHOLE ||
			    (type_of(t, node->inputs[i])->shape.rank >= 3 &&
			     const_dim(type_of(t, node->inputs[i]),
				       type_of(t, node->inputs[i])->shape.rank - 3) != 1))
				return refuse(t, id, "attention with a mask or table per head");
		for (uint32_t o = 0; o < node->n_outputs; o++)
			if (!set_dim(t, id, node->outputs[o], 1))
				return false;
		return true;
	case F8_OP_MATMUL: { // batched, over the heads: both operands split along one batch dim
		f8_value_id b = node->inputs[1];
		int rank_b = type_of(t, b)->shape.rank;
		if (in_trial(t, x) == WHOLE || in_trial(t, b) == WHOLE)
			return pull(t, id, in_trial(t, x) == WHOLE ? x : b, pulled, "a MatMul reads a "
				    "whole operand with a split one, and no projection of its own "
				    "writes it");
		if (rank != rank_b || d >= rank - 2 || in_trial(t, b) != d)
			return refuse(t, id, "a MatMul whose operands are not split along one batch "
				      "dimension");
		return set_dim(t, id, node->outputs[0], d);
	}
	case F8_OP_SOFTMAX:
	case F8_OP_LOG_SOFTMAX: {
		int axis;
		if (!f8_axis_normalize(f8_node_attr_int(node, "axis", -1), rank, false, &axis) ||
		    axis == d)
			return refuse(t, id, "a softmax over the split dimension");
		return set_dim(t, id, node->outputs[0], d);
	}
	default:
		if (info->flags & F8_OPF_ELEMENTWISE)
			return visit_elementwise(t, id, pulled);
		return refuse(t, id, "no rule splits this op's input (a norm, the residual or the "
			      "loss reads the GEMM's output)");
	}
}

/* Whether every reader of a column-parallel output split part by part reads it by its parts
 * (a Split along the split dimension, SwiGLU's halves): any other reader (an activation before
 * the Split, a row-parallel GEMM) would take each rank's [q_r k_r v_r] for a slice of the whole
 * [q k v]. */
static bool parts_read_by_parts(tp_pass *t) {
	const f8_graph *graph = t->graph;
	for (uint32_t c = 0; c < t->n_claimed; c++) {
		const f8_node *gemm = &graph->nodes[t->claimed[c]];
		f8_value_id y = gemm->outputs[0];
		if (t->role[t->claimed[c]] != TP_COLUMN || t->n_parts[y] < 2)
			continue;
		for (uint32_t p = 0; p < graph->n_order; p++) {
			const f8_node *node = &graph->nodes[graph->order[p]];
			bool reads = false;
			for (uint32_t i = 0; i < node->n_inputs; i++)
				reads |= node->inputs[i] == y;
			bool by_parts = node->op == F8_OP_SPLIT ||
					(node->op == F8_OP_SWIGLU && node->n_inputs == 1);
			if (reads && !by_parts)
				return refuse(t, graph->order[p], "a GEMM's output split into parts is "
					      "read whole by another op");
		}
	}
	return true;
}

/* Takes a failed trial back. */
static void take_back(tp_pass *t) {
	for (uint32_t i = 0; i < t->n_touched; i++) {
		f8_value_id v = t->touched[i];
		t->dim[v] = WHOLE;
		t->stamp[v] = 0;
		t->parts[v] = NULL;
		t->n_parts[v] = 0;
	}
	for (uint32_t i = 0; i < t->n_claimed; i++)
		t->role[t->claimed[i]] = TP_NONE;
}

/* The region of Linear `seed` (at program position `at`): whether it could be split. */
static bool try_region(tp_pass *t, uint32_t at) {
	f8_graph *graph = t->graph;
	t->n_touched = t->n_claimed = 0;
	t->why = NULL;
	t->trial++;
	bool ok = claim_column(t, graph->order[at]);
	for (uint32_t p = at + 1; ok && p < graph->n_order; p++) {
		f8_node_id pulled = F8_NONE;
		ok = visit(t, graph->order[p], &pulled);
		if (ok && pulled != F8_NONE) // visit from the pulled GEMM on, this node again too
			p = t->position[pulled];
	}
	for (uint32_t i = 0; ok && i < graph->n_outputs; i++)
		if (in_trial(t, graph->outputs[i]) != WHOLE)
			ok = refuse(t, graph->values[graph->outputs[i]].producer,
				    "its output is an output of the graph (an output head "
				    "is split by vocabulary instead, where it can be)");
	ok = ok && parts_read_by_parts(t);
	bool row = false;
	for (uint32_t i = 0; ok && i < t->n_claimed; i++)
		row |= t->role[t->claimed[i]] == TP_ROW;
	if (ok && !row)
		ok = refuse(t, graph->order[at], "its output reaches no row-parallel GEMM");
	if (!ok)
		take_back(t);
	return ok;
}

/* Split dimension `d`'s size, as an attribute's item, divided by TP. */
static f8_dim divided(f8_dim size, int64_t ranks) {
	return f8_dim_is_const(size) && f8_dim_value(size) > 0
		       ? f8_dim_const(f8_dim_value(size) / ranks) : size; // -1: inferred
}

/* The attributes of node `id` that size its output's split dimension, divided by TP. */
static f8_status divide_attrs(tp_pass *t, f8_node_id id) {
	f8_graph *graph = t->graph;
	f8_node *node = &graph->nodes[id];
	f8_value_id x = node->inputs[0], y = node->outputs[0];
	const char *name = node->op == F8_OP_SPLIT ? "split" : "shape";
	if ((node->op != F8_OP_SPLIT && node->op != F8_OP_RESHAPE && node->op != F8_OP_EXPAND) ||
	    t->dim[x] == WHOLE)
		return F8_OK;
	int axis = -1;
	if (node->op == F8_OP_SPLIT &&
	    (!f8_axis_normalize(f8_node_attr_int(node, "axis", 0), type_of(t, x)->shape.rank,
				false, &axis) || axis != t->dim[x]))
		return F8_OK; // split along another dimension: the sizes stand
	f8_attr *attrs = f8_calloc(node->n_attrs + 1, sizeof *attrs);
	int64_t *ints = NULL;
	f8_dim *dims = NULL;
	if (!attrs)
		return nomem(t->diag);
	f8_status status = F8_OK;
	for (uint32_t i = 0; !status && i < node->n_attrs; i++) {
		attrs[i] = node->attrs[i];
		if (strcmp(attrs[i].name, name) != 0)
			continue;
		if (attrs[i].kind == F8_ATTR_INTS) {
			if (!(ints = f8_calloc(attrs[i].ints.n + 1, sizeof *ints)))
				status = nomem(t->diag);
			for (uint32_t k = 0; !status && k < attrs[i].ints.n; k++)
				ints[k] = attrs[i].ints.items[k] / t->ranks;
			attrs[i].ints.items = ints;
		} else if (attrs[i].kind == F8_ATTR_DIMS) {
			// Split's sizes each; a Reshape's or Expand's the split dimension's (an
			// Expand's shape aligned to the output from the right; its 1s keep theirs).
			uint32_t n = attrs[i].dims.n;
			int at = t->dim[y] - (type_of(t, y)->shape.rank - (int)n);
			if (!(dims = f8_calloc(n + 1, sizeof *dims)))
				status = nomem(t->diag);
			for (uint32_t k = 0; !status && k < n; k++) {
				f8_dim size = attrs[i].dims.items[k];
				bool split = node->op == F8_OP_SPLIT || ((int)k == at &&
					     !(f8_dim_is_const(size) && f8_dim_value(size) == 1));
				dims[k] = split ? divided(size, t->ranks) : size;
			}
			attrs[i].dims.items = dims;
		}
	}
	if (!status && f8_node_set_attrs(graph, id, attrs, node->n_attrs))
		status = nomem(t->diag);
	f8_free(ints);
	f8_free(dims);
	f8_free(attrs);
	return status;
}

/* Parameter `w` split along `dim` (in `parts`, n, when more than one). */
static void split_parameter(tp_pass *t, f8_value_id w, int dim, const int64_t *parts,
			    uint8_t n) {
	f8_value *value = &t->graph->values[w];
	value->type.shape.dims[dim] = divided(value->type.shape.dims[dim], t->ranks);
	value->placement[F8_MESH_AXIS_TP] = (f8_placement){
		.kind = F8_PLACEMENT_KIND_SHARD, .dim = (uint8_t)dim, .n_parts = n > 1 ? n : 0,
		.parts = n > 1 ? parts : NULL};
}

/* Adds a node of `op` reading `inputs` (n) with `attrs`, in `scope`, its one output `name`. */
f8_status f8_tp_add_node(f8_graph *graph, f8_op op, const f8_value_id *inputs, uint32_t n,
			 const f8_attr *attrs, uint32_t n_attrs, const char *scope, const char *name,
			 f8_node_id *out, f8_diag *diag) {
	if (!name)
		return nomem(diag);
	f8_status status = f8_graph_add_node(graph, op, inputs, n, 1, &name, out, diag);
	if (!status && n_attrs && f8_node_set_attrs(graph, *out, attrs, n_attrs))
		status = nomem(diag);
	if (!status)
		graph->nodes[*out].scope = scope;
	return status;
}

static f8_status add_node(tp_pass *t, f8_op op, const f8_value_id *inputs, uint32_t n,
			  const f8_attr *attrs, uint32_t n_attrs, const char *scope,
			  const char *name, f8_node_id *out) {
	return f8_tp_add_node(t->graph, op, inputs, n, attrs, n_attrs, scope, name, out, t->diag);
}

/* Every reader of `from` (nodes in the program, graph outputs) reads `to` instead. */
static void redirect(f8_graph *graph, f8_value_id from, f8_value_id to, f8_node_id except) {
	for (uint32_t p = 0; p < graph->n_order; p++) {
		f8_node *node = &graph->nodes[graph->order[p]];
		for (uint32_t i = 0; graph->order[p] != except && i < node->n_inputs; i++)
			if (node->inputs[i] == from)
				node->inputs[i] = to;
	}
	for (uint32_t i = 0; i < graph->n_outputs; i++)
		if (graph->outputs[i] == from)
			graph->outputs[i] = to;
}

static const f8_attr tp_group = {.name = "group", .kind = F8_ATTR_STRING, .s = "tp"};

/* A row-parallel output whose readers move to its sum. */
typedef struct moved_readers {
	f8_value_id from, to;
	f8_node_id except; // the collective that reads it
} moved_readers;

f8_status f8_tp_infer_all(f8_graph *graph, f8_diag *diag) {
	f8_status status = F8_OK;
	for (uint32_t p = 0; !status && p < graph->n_order; p++) {
		f8_node *node = &graph->nodes[graph->order[p]];
		f8_type *types = f8_calloc(node->n_outputs + 1, sizeof *types);
		if (!types)
			return nomem(diag);
		if ((status = f8_node_infer_types(graph, graph->order[p], types, diag)))
			f8_diag_set_node(diag, graph, graph->order[p]);
		for (uint32_t o = 0; !status && o < node->n_outputs; o++)
			graph->values[node->outputs[o]].type = types[o];
		f8_free(types);
	}
	return status;
}

/*
 * The regions split: parameters, Identity before each column-parallel GEMM's input (one per
 * input value), AllReduce and the bias after each row-parallel GEMM, the attributes, the new
 * program (the new nodes beside their GEMMs), the shapes inferred again and the placements.
 */
static f8_status split_regions(tp_pass *t) {
	f8_graph *graph = t->graph;
	uint32_t n_original = graph->n_order, n_values = graph->n_values;
	f8_node_id *order = f8_calloc(3 * n_original + 1, sizeof *order);
	f8_value_id *copy_of = f8_calloc(n_values + 1, sizeof *copy_of);
	f8_node_id *original = f8_calloc(n_original + 1, sizeof *original);
	moved_readers *moved = f8_calloc(n_original + 1, sizeof *moved);
	if (!order || !copy_of || !original || !moved) {
		f8_free(order), f8_free(copy_of), f8_free(original), f8_free(moved);
		return nomem(t->diag);
	}
	memcpy(original, graph->order, n_original * sizeof *original);
	for (uint32_t v = 0; v <= n_values; v++)
		copy_of[v] = F8_NONE;
	f8_status status = F8_OK;
	// The attributes first, on the graph as the search saw it; the readers of each
	// row-parallel output are moved to its sum last, so that values keep their ids meanwhile.
	for (uint32_t p = 0; !status && p < n_original; p++)
		status = divide_attrs(t, original[p]);
	uint32_t n = 0, n_moved = 0;
	for (uint32_t p = 0; !status && p < n_original; p++) {
		f8_node_id id = original[p];
		f8_node *node = &graph->nodes[id];
		if (t->role[id] == TP_NONE) {
			order[n++] = id;
			continue;
		}
		f8_value_id x = node->inputs[0], y = node->outputs[0];
		const char *scope = node->scope;
		if (t->role[id] == TP_COLUMN) {
			if (copy_of[x] == F8_NONE) { // Megatron's f, once per input
				const char *base = graph->values[x].name; // a sum's, if x moves
				for (uint32_t i = 0; i < n_moved; i++)
					base = moved[i].from == x ? graph->values[moved[i].to].name
								  : base;
				f8_node_id copy;
				const char *name = f8_arena_concat(graph->arena, base, ".tp");
				status = add_node(t, F8_OP_IDENTITY, &x, 1, &tp_group, 1, scope, name,
						  &copy);
				if (status)
					break;
				copy_of[x] = graph->nodes[copy].outputs[0];
				order[n++] = copy;
			}
			node = &graph->nodes[id];
			node->inputs[0] = copy_of[x];
			for (uint32_t i = 1; i < n_parameters(node); i++) // the weight's, the bias
				split_parameter(t, own_parameter(t, node->inputs[i]),
						i == 1 ? features_dim(node) : 0, t->parts[y],
						t->n_parts[y]);
			t->n_column++;
			order[n++] = id;
			continue;
		}
		// Row-parallel: GEMM (partial), AllReduce, then the bias on the sum.
		split_parameter(t, own_parameter(t, node->inputs[1]), inputs_dim(node), NULL, 0);
		f8_value_id bias = node->op == F8_OP_LINEAR && node->n_inputs == 3 ? node->inputs[2]
										   : F8_NONE;
		if (bias != F8_NONE)
			node->n_inputs = 2;
		const char *name = graph->values[y].name;
		graph->values[y].name = f8_arena_concat(graph->arena, name, ".partial");
		f8_attr sum[2] = {tp_group, {.name = "op", .kind = F8_ATTR_STRING, .s = "sum"}};
		f8_node_id reduce, add = F8_NONE;
		const char *reduced = name; // the sum's name, or its own before the bias's Add
		if (bias != F8_NONE)
			reduced = f8_arena_concat(graph->arena, name, ".reduced");
		status = add_node(t, F8_OP_ALL_REDUCE, &y, 1, sum, 2, scope, reduced, &reduce);
		f8_value_id out = status ? F8_NONE : graph->nodes[reduce].outputs[0];
		if (!status && bias != F8_NONE) {
			f8_value_id operands[2] = {out, bias};
			status = add_node(t, F8_OP_ADD, operands, 2, NULL, 0, scope, name, &add);
			out = status ? F8_NONE : graph->nodes[add].outputs[0];
		}
		if (status)
			break;
		moved[n_moved++] = (moved_readers){.from = y, .to = out, .except = reduce};
		graph->values[y].placement[F8_MESH_AXIS_TP] = (f8_placement){
			.kind = F8_PLACEMENT_KIND_PARTIAL, .reduction = F8_REDUCTION_SUM};
		order[n++] = id;
		order[n++] = reduce;
		if (add != F8_NONE)
			order[n++] = add;
		t->n_row++;
	}
	if (!status && f8_graph_set_order(graph, order, n))
		status = nomem(t->diag);
	for (uint32_t i = 0; !status && i < n_moved; i++)
		redirect(graph, moved[i].from, moved[i].to, moved[i].except);
	if (!status)
		status = f8_tp_infer_all(t->graph, t->diag);
	for (uint32_t v = 0; !status && v < n_values; v++)
		if (t->dim[v] != WHOLE && graph->values[v].role == F8_ROLE_ACTIVATION)
			graph->values[v].placement[F8_MESH_AXIS_TP] = (f8_placement){
				.kind = F8_PLACEMENT_KIND_SHARD, .dim = (uint8_t)t->dim[v]};
	f8_free(order), f8_free(copy_of), f8_free(original), f8_free(moved);
	return status;
}

/*
 * Sequence parallelism (Megatron-LM's --sequence-parallel), after the regions are split: what
 * runs between them (the residual stream, the norms, dropout, the biases after the reduce) is
 * split along the sequence over tp instead of repeated on every rank.
 */
typedef struct sp_pass {
	tp_pass *t;
	f8_dim batch, seq;       // the tokens' sizes
	bool *split;             // per value: split along the sequence (dim 1 of [b, s, ...])
	f8_value_id *shard_of;   // per value: its LocalShard along the sequence, made once
	f8_value_id *gather_of;  // per value: its AllGather {replicated=1}, made once
	f8_value_id *copy_of;    // per parameter: its Identity {group="tp"}, made once
	uint8_t *learned;        // per value: 1 made from a parameter, 2 not, 0 not known yet
	f8_node_id *order;       // the new program
	uint32_t n_order, capacity, n_values;
	uint32_t n_scattered, n_gathered; // row reduces become ReduceScatter; f becomes AllGather
} sp_pass;

/* Whether `v` (output `index` of its node) has the residual stream's shape, [batch, seq, ...]
 * (an extra output of a norm or dropout: [batch, seq] and any dtype). */
static bool stream_shaped(const sp_pass *sp, f8_value_id v, uint32_t index) {
	const f8_type *type = &sp->t->graph->values[v].type;
	if (type->shape.rank < 2 || !f8_dim_equal(type->shape.dims[0], sp->batch) ||
	    !f8_dim_equal(type->shape.dims[1], sp->seq))
		return false;
	return index > 0 || (type->shape.rank == 3 && f8_dtype_is_float(type->dtype));
}

/* Whether node `id`'s outputs are split along the sequence: a row-parallel reduce, or an op
 * that runs token by token (elementwise, a norm) on values of the stream's shape. */
static bool sequence_op(const sp_pass *sp, f8_node_id id) {
	const f8_graph *graph = sp->t->graph;
	const f8_node *node = &graph->nodes[id];
	const char *group = node->op == F8_OP_ALL_REDUCE ? f8_node_attr_string(node, "group", "")
							 : NULL;
	bool runs = (group && strcmp(group, "tp") == 0 && node->phase == F8_PHASE_FWD) ||
		    node->op == F8_OP_LAYER_NORM || node->op == F8_OP_RMS_NORM ||
		    (f8_op_get_info(node->op)->flags & F8_OPF_ELEMENTWISE &&
		     node->op != F8_OP_IDENTITY);
	for (uint32_t o = 0; runs && o < node->n_outputs; o++)
		runs = stream_shaped(sp, node->outputs[o], o) &&
		       graph->values[node->outputs[o]].placement[F8_MESH_AXIS_TP].kind ==
			       F8_PLACEMENT_KIND_REPLICATED;
	return runs;
}

static f8_status sp_add(sp_pass *sp, f8_op op, f8_value_id input, const f8_attr *attrs,
			uint32_t n_attrs, const char *scope, const char *suffix, f8_value_id *out) {
	f8_graph *graph = sp->t->graph;
	f8_node_id id;
	if (graph->n_values + 2 >= sp->n_values || sp->n_order + 1 >= sp->capacity)
		return f8_diag_set(sp->t->diag, F8_ERR_INVALID, "tensor-parallel: too many new nodes "
				   "(a bug)");
	const char *name = f8_arena_concat(graph->arena, graph->values[input].name, suffix);
	f8_status status = add_node(sp->t, op, &input, 1, attrs, n_attrs, scope, name, &id);
	if (status)
		return status;
	f8_type type;
	if ((status = f8_node_infer_types(graph, id, &type, sp->t->diag)))
		return status;
	*out = graph->nodes[id].outputs[0];
	graph->values[*out].type = type;
	sp->order[sp->n_order++] = id;
	return F8_OK;
}

/* Whether `v` is a parameter or made from one (a Cast of it, Gemma's 1 + w, an Unsqueeze):
 * a value whose gradient the ranks' tokens each hold a term of. */
static bool learned(sp_pass *sp, f8_value_id v) {
	const f8_graph *graph = sp->t->graph;
	if (sp->learned[v])
		return sp->learned[v] == 1;
	bool is = graph->values[v].role == F8_ROLE_PARAMETER;
	f8_node_id producer = graph->values[v].producer;
	for (uint32_t i = 0; !is && producer != F8_NONE && i < graph->nodes[producer].n_inputs; i++)
		is = learned(sp, graph->nodes[producer].inputs[i]);
	sp->learned[v] = is ? 1 : 2;
	return is;
}

/* The attributes of a collective over tp along `axis`. */
static void over_tp(const sp_pass *sp, int axis, f8_attr *attrs) {
	attrs[0] = tp_group;
	attrs[1] = (f8_attr){.name = "axis", .kind = F8_ATTR_INT, .i = axis};
	attrs[2] = (f8_attr){.name = "ranks", .kind = F8_ATTR_INT, .i = sp->t->ranks};
}

/* Input `i` of sequence op `id` made to match its split outputs: a split input stands; one
 * that broadcasts along the sequence stands too, a parameter behind Identity {group="tp"} (its
 * gradient's terms are the ranks' tokens'); any other takes this rank's tokens (LocalShard,
 * whose gradient gathers them: Megatron's scatter to the sequence-parallel region). */
static f8_status match_input(sp_pass *sp, f8_node_id id, uint32_t i) {
	f8_graph *graph = sp->t->graph;
	f8_value_id v = graph->nodes[id].inputs[i];
	const f8_type *type = &graph->values[v].type;
	int rank = graph->values[graph->nodes[id].outputs[0]].type.shape.rank;
	int at = 1 - (rank - type->shape.rank);
	if (sp->split[v])
		return F8_OK;
	const char *scope = graph->nodes[id].scope;
	f8_status status = F8_OK;
	if (at < 0 || (f8_dim_is_const(type->shape.dims[at]) &&
		       f8_dim_value(type->shape.dims[at]) == 1)) {
		if (!learned(sp, v))
			return F8_OK;
		if (sp->copy_of[v] == F8_NONE)
			status = sp_add(sp, F8_OP_IDENTITY, v, &tp_group, 1, scope, ".tp",
					&sp->copy_of[v]);
		if (!status)
			graph->nodes[id].inputs[i] = sp->copy_of[v];
		return status;
	}
	if (sp->shard_of[v] == F8_NONE) {
		f8_attr attrs[3];
		over_tp(sp, at, attrs);
		status = sp_add(sp, F8_OP_LOCAL_SHARD, v, attrs, 3, scope, ".sp", &sp->shard_of[v]);
		if (!status)
			sp->split[sp->shard_of[v]] = true;
	}
	if (!status)
		graph->nodes[id].inputs[i] = sp->shard_of[v];
	return status;
}

/* Node `id`, which reads split values but runs on whole ones: Megatron's f (Identity before a
 * column-parallel GEMM) becomes the gather of its input (whose gradient reduce-scatters the
 * ranks' terms); any other reader (the output head) reads the input gathered with
 * replicated=1 (its gradient is every rank's whole one: LocalShard takes this rank's). */
static f8_status gather_inputs(sp_pass *sp, f8_node_id id) {
	f8_graph *graph = sp->t->graph;
	f8_node *node = &graph->nodes[id];
	f8_attr attrs[4];
	over_tp(sp, 1, attrs);
	if (node->op == F8_OP_IDENTITY && f8_node_attr_string(node, "group", NULL) &&
	    sp->split[node->inputs[0]]) {
		node->op = F8_OP_ALL_GATHER;
		sp->n_gathered++;
		return f8_node_set_attrs(graph, id, attrs, 3) ? nomem(sp->t->diag) : F8_OK;
	}
	attrs[3] = (f8_attr){.name = "replicated", .kind = F8_ATTR_INT, .i = 1};
	for (uint32_t i = 0; i < graph->nodes[id].n_inputs; i++) {
		f8_value_id v = graph->nodes[id].inputs[i];
		if (!sp->split[v])
			continue;
		if (sp->gather_of[v] == F8_NONE) {
			f8_status status = sp_add(sp, F8_OP_ALL_GATHER, v, attrs, 4,
						  graph->nodes[id].scope, ".gathered",
						  &sp->gather_of[v]);
			if (status)
				return status;
		}
		graph->nodes[id].inputs[i] = sp->gather_of[v];
	}
	return F8_OK;
}

/* The token ids (the first (batch, seq) i64 input) into *tokens, their sequence a constant TP
 * divides; F8_ERR_ARGUMENT otherwise. Checked before the regions are split, so that a refusal
 * leaves the graph as it was. */
static f8_status sequence_tokens(const tp_pass *t, const f8_value **tokens) {
	const f8_graph *graph = t->graph;
	*tokens = NULL;
	for (uint32_t i = 0; i < graph->n_inputs && !*tokens; i++) {
		const f8_value *input = &graph->values[graph->inputs[i]];
		if (input->role == F8_ROLE_INPUT && input->type.dtype == F8_DTYPE_I64 &&
		    input->type.shape.rank == 2)
			*tokens = input;
	}
	if (*tokens && f8_dim_is_const((*tokens)->type.shape.dims[1]) &&
	    f8_dim_value((*tokens)->type.shape.dims[1]) % t->ranks == 0)
		return F8_OK;
	f8_diag_set(t->diag, F8_ERR_ARGUMENT, "--sequence-parallel needs the tokens' sequence "
		    "length bound, and TP %lld dividing it", (long long)t->ranks);
	f8_diag_hint(t->diag, "a training plan binds it (--seq-length); dump-ir and audit take "
		     "--dim seq=N");
	return F8_ERR_ARGUMENT;
}

/* The forward rewritten for sequence parallelism, as the comment above says; `tokens` (whose
 * sizes sequence_tokens checked) by value: the value table may have moved since. */
static f8_status sequence_parallel(tp_pass *t, f8_value_id tokens) {
	f8_graph *graph = t->graph;
	sp_pass sp = {.t = t, .batch = graph->values[tokens].type.shape.dims[0],
		      .seq = graph->values[tokens].type.shape.dims[1]};
	uint32_t n_original = graph->n_order;
	sp.n_values = graph->n_values + 4 * n_original + 64;
	sp.capacity = 4 * n_original + 64;
	sp.split = f8_calloc(sp.n_values, sizeof *sp.split);
	sp.shard_of = f8_malloc(sp.n_values * sizeof *sp.shard_of);
	sp.gather_of = f8_malloc(sp.n_values * sizeof *sp.gather_of);
	sp.copy_of = f8_malloc(sp.n_values * sizeof *sp.copy_of);
	sp.learned = f8_calloc(sp.n_values, sizeof *sp.learned);
	sp.order = f8_calloc(sp.capacity, sizeof *sp.order);
	f8_node_id *original = f8_calloc(n_original + 1, sizeof *original);
	f8_status status = sp.split && sp.shard_of && sp.gather_of && sp.copy_of && sp.learned &&
				   sp.order && original ? F8_OK : nomem(t->diag);
	for (uint32_t v = 0; !status && v < sp.n_values; v++)
		sp.shard_of[v] = sp.gather_of[v] = sp.copy_of[v] = F8_NONE;
	if (!status)
		memcpy(original, graph->order, n_original * sizeof *original);
	for (uint32_t p = 0; !status && p < n_original; p++) {
		f8_node_id id = original[p];
		f8_node *node = &graph->nodes[id];
		if (node->phase != F8_PHASE_FWD || !sequence_op(&sp, id)) {
			status = gather_inputs(&sp, id);
			sp.order[sp.n_order++] = id;
			continue;
		}
		if (node->op == F8_OP_ALL_REDUCE) { // the row-parallel sum, reduce-scattered
			f8_attr attrs[3];
			over_tp(&sp, 1, attrs);
			node->op = F8_OP_REDUCE_SCATTER;
			sp.n_scattered++;
			if (f8_node_set_attrs(graph, id, attrs, 3))
				status = nomem(t->diag);
		}
		bool scattered = node->op == F8_OP_REDUCE_SCATTER; // match_input may move the nodes
		for (uint32_t i = 0; !status && !scattered && i < graph->nodes[id].n_inputs; i++)
			status = match_input(&sp, id, i);
		sp.order[sp.n_order++] = id;
		for (uint32_t o = 0; !status && o < graph->nodes[id].n_outputs; o++)
			sp.split[graph->nodes[id].outputs[o]] = true;
	}
	for (uint32_t i = 0; !status && i < graph->n_outputs; i++) { // outputs leave whole
		f8_value_id v = graph->outputs[i];
		f8_attr attrs[4];
		over_tp(&sp, 1, attrs);
		attrs[3] = (f8_attr){.name = "replicated", .kind = F8_ATTR_INT, .i = 1};
		if (sp.split[v] && sp.gather_of[v] == F8_NONE)
			status = sp_add(&sp, F8_OP_ALL_GATHER, v, attrs, 4,
					graph->nodes[graph->values[v].producer].scope, ".gathered",
					&sp.gather_of[v]);
		if (!status && sp.split[v])
			graph->outputs[i] = sp.gather_of[v];
	}
	if (!status && f8_graph_set_order(graph, sp.order, sp.n_order))
		status = nomem(t->diag);
	if (!status)
		status = f8_tp_infer_all(t->graph, t->diag);
	for (uint32_t v = 0; !status && v < graph->n_values; v++) {
		if (!sp.split[v])
			continue;
		f8_node_id producer = graph->values[v].producer; // a LocalShard of a broadcast input
		int dim = graph->nodes[producer].op == F8_OP_LOCAL_SHARD
				  ? (int)f8_node_attr_int(&graph->nodes[producer], "axis", 1) : 1;
		graph->values[v].placement[F8_MESH_AXIS_TP] = (f8_placement){
			.kind = F8_PLACEMENT_KIND_SHARD, .dim = (uint8_t)dim};
	}
	t->n_scattered = sp.n_scattered;
	t->n_gathered = sp.n_gathered;
	f8_free(sp.split), f8_free(sp.shard_of), f8_free(sp.gather_of), f8_free(sp.copy_of);
	f8_free(sp.learned);
	f8_free(sp.order), f8_free(original);
	return status;
}

/* The use counts and positions the search reads. */
static void count_uses(tp_pass *t) {
	f8_graph *graph = t->graph;
	for (uint32_t p = 0; p < graph->n_order; p++) {
		const f8_node *node = &graph->nodes[graph->order[p]];
		t->position[graph->order[p]] = p;
		for (uint32_t i = 0; i < node->n_inputs; i++)
			t->uses[node->inputs[i]]++;
	}
	for (uint32_t i = 0; i < graph->n_outputs; i++)
		t->uses[graph->outputs[i]]++;
}

f8_status f8_pass_tensor_parallel_run(f8_graph *graph, const f8_parallel_options *options,
				      FILE *report, f8_diag *diag) {
	if (!options || options->tensor <= 1)
		return F8_OK;
	if (f8_graph_mesh_ranks(graph) > 1)
		return f8_diag_set(diag, F8_ERR_INVALID, "tensor-parallel: the graph is sharded "
				   "already (it has a mesh)");
	for (uint32_t p = 0; p < graph->n_order; p++)
		if (graph->nodes[graph->order[p]].phase != F8_PHASE_FWD)
			return f8_diag_set(diag, F8_ERR_INVALID, "tensor-parallel: the graph has a "
					   "backward already (the pass splits the forward, before "
					   "training)");
	uint32_t mesh[F8_MESH_AXIS_COUNT];
	f8_status status = f8_parallel_check(graph, options, mesh, diag);
	if (status)
		return status;
	uint32_t values = graph->n_values + 1, nodes = graph->n_nodes + 1;
	tp_pass t = {.graph = graph, .diag = diag, .ranks = mesh[F8_MESH_AXIS_TP]};
	t.dim = f8_malloc(values * sizeof *t.dim);
	t.parts = f8_calloc(values, sizeof *t.parts);
	t.n_parts = f8_calloc(values, sizeof *t.n_parts);
	t.uses = f8_calloc(values, sizeof *t.uses);
	t.stamp = f8_calloc(values, sizeof *t.stamp);
	t.touched = f8_calloc(values, sizeof *t.touched);
	t.role = f8_calloc(nodes, sizeof *t.role);
	t.position = f8_calloc(nodes, sizeof *t.position);
	t.claimed = f8_calloc(nodes, sizeof *t.claimed);
	if (!t.dim || !t.parts || !t.n_parts || !t.uses || !t.stamp || !t.touched || !t.role ||
	    !t.position || !t.claimed)
		status = nomem(diag);
	if (!status) {
		memset(t.dim, WHOLE, values * sizeof *t.dim);
		count_uses(&t);
	}
	for (uint32_t p = 0; !status && p < graph->n_order; p++) {
		f8_node_id id = graph->order[p];
		if (!is_linear(&graph->nodes[id]) || t.role[id] != TP_NONE)
			continue;
		if (try_region(&t, p)) {
			t.n_regions++;
		} else if (report && !(graph->n_outputs && // the head: vocabulary parallelism's
				      graph->nodes[id].outputs[0] == graph->outputs[0])) {
			fprintf(report, "tensor-parallel: kept whole: %s (%s): %s", graph->nodes[id].scope
				? graph->nodes[id].scope : "", graph->values[graph->nodes[id].outputs[0]].name,
				t.why);
			if (t.why_node != id && t.why_node != F8_NONE)
				fprintf(report, " at %s", graph->values[
					graph->nodes[t.why_node].outputs[0]].name);
			fputc('\n', report);
		}
	}
	const f8_value *tokens = NULL;
	if (!status && options->sequence_parallel)
		status = sequence_tokens(&t, &tokens);
	f8_value_id token_id = tokens ? (f8_value_id)(tokens - graph->values) : F8_NONE;
	if (!status)
		status = split_regions(&t);
	uint32_t n_tables = 0;
	if (!status)
		status = f8_tp_split_vocabulary(graph, t.ranks, report, &n_tables, diag);
	if (!status && !t.n_regions && !n_tables) { // nothing split: the graph is as it was
		f8_diag_set(diag, F8_ERR_UNSUPPORTED, "--tensor-model-parallel-size %lld: no GEMM or "
			    "vocabulary of the model can be split (--report says why for each)",
			    (long long)t.ranks);
		f8_diag_hint(diag, "tensor parallelism splits a Linear whose output reaches another "
			     "Linear through elementwise and per-head ops, as Megatron-LM's attention "
			     "and MLP blocks, and an embedding table and output head by vocabulary");
		status = F8_ERR_UNSUPPORTED;
	}
	if (!status && options->sequence_parallel)
		status = sequence_parallel(&t, token_id);
	if (!status) {
		memcpy(graph->mesh, mesh, sizeof mesh);
		if (report)
			fprintf(report, "tensor-parallel: %u regions over TP %lld: %u column-parallel and "
				"%u row-parallel GEMMs\n", t.n_regions, (long long)t.ranks, t.n_column,
				t.n_row);
		if (report && options->sequence_parallel)
			fprintf(report, "tensor-parallel: sequence parallel: the residual stream split "
				"along the sequence over tp; %u row-parallel sums reduce-scattered, %u "
				"column-parallel inputs all-gathered\n", t.n_scattered, t.n_gathered);
	}
	f8_free(t.dim), f8_free(t.parts), f8_free(t.n_parts), f8_free(t.uses), f8_free(t.stamp);
	f8_free(t.touched), f8_free(t.role), f8_free(t.position), f8_free(t.claimed);
	return status;
}
