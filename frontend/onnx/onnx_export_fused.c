/*
 * The ONNX forms of Rope, Attention and the mixture-of-experts ops.
 *
 * Rope and Attention are written as torch.onnx writes Llama's and GPT-2's, which fuse-patterns
 * recognizes: x * cos + rotate_half(x) * sin; softmax(q k^T * scale + causal mask) v with
 * grouped-query k and v repeated by Unsqueeze, Expand and Reshape. The causal mask is made once
 * per (dtype, sequence lengths) and shared by every layer.
 *
 * A MoE layer (Router, MoEDispatch, GroupedLinear..., MoECombine) has no standard ONNX form that
 * keeps static shapes, so it is written dense: every expert runs on every token, and the combine
 * weights each expert's result by the token's gate, its top-k probability (renormalized over the
 * k when the router normalizes) or 0. The result is the routed layer's, at experts / top_k
 * times its FLOPs. Top-k is found without TopK or ScatterElements, which f8c's IR lacks, by
 * ranking: expert e is chosen when fewer than top_k experts beat it, where j beats e when
 * p_j > p_e, or p_j = p_e and j < e (TopK's order: the lower index first on ties).
 */
#include <math.h>   // sqrt
#include <stdio.h>  // snprintf
#include <string.h> // strcmp

#include "frontend/onnx/onnx_export_internal.h" // onnx_exporter, export_*

static const int64_t SLICE_TO_END = INT64_MAX; // what exporters write for "to the end"

/* Rope: x * cos + rotate_half(x) * sin, rotate_half(x) = Concat(-x[..., h:], x[..., :h]). */
void f8_export_lower_rope(onnx_exporter *ex, const f8_node *node) {
	const f8_shape *x_shape = &f8_export_input_type(ex, node, 0)->shape;
	const f8_shape *cos_shape = &f8_export_input_type(ex, node, 1)->shape;
	f8_dim head_dim = x_shape->dims[x_shape->rank - 1];
	f8_dim rotary = cos_shape->dims[cos_shape->rank - 1];
	bool interleaved = f8_node_attr_int(node, "interleaved", 0);
	if (interleaved || !f8_dim_is_const(head_dim) || !f8_dim_equal(head_dim, rotary)) {
		f8_export_unsupported(ex, "Rope %s: export-onnx writes rotate-half rope over the "
				   "whole head", interleaved ? "interleaved" : "on part of a head");
		return;
	}
	int64_t half = f8_dim_value(head_dim) / 2;
	const char *x = f8_export_input(ex, node, 0), *cos = f8_export_input(ex, node, 1);
	const char *sin = f8_export_input(ex, node, 2);
	const char *last_axis = f8_export_ints(ex, INTS(-1)), *step = f8_export_ints(ex, INTS(1));
	const char *start = f8_export_ints(ex, INTS(0)), *middle = f8_export_ints(ex, INTS(half));
	const char *end = f8_export_ints(ex, INTS(SLICE_TO_END));
	const char *direct = f8_export_op(ex, "Mul", "x_cos", IN(x, cos));
	const char *upper = f8_export_op(ex, "Slice", "x_upper", IN(x, middle, end, last_axis, step));
	const char *lower = f8_export_op(ex, "Slice", "x_lower", IN(x, start, middle, last_axis, step));
	const char *negated = f8_export_op(ex, "Neg", "x_upper_neg", IN(upper));
	const char *rotated = f8_export_op(ex, "Concat", "x_rotated", IN(negated, lower));
	f8_export_attr_int(ex, f8_export_last(ex), "axis", -1);
	const char *rotated_sin = f8_export_op(ex, "Mul", "x_rotated_sin", IN(rotated, sin));
	f8_export_op_to(ex, "Add", f8_export_output(ex, node, 0), IN(direct, rotated_sin));
}

/*
 * The additive causal mask (seq_q, seq_kv) of `dtype`, made once:
 * Where(Equal(Trilu(Expand(1, [seq_q, seq_kv]), upper=0), 0), lowest, 0), as torch.onnx writes
 * it; fuse-patterns reads it back as Attention's causal flag.
 */
static const char *causal_mask(onnx_exporter *ex, f8_dtype dtype, f8_dim seq_q, f8_dim seq_kv) {
	export_cached key = {.kind = EXPORT_CACHE_MASK, .dtype = dtype,
			     .shape = {.rank = 2, .dims = {seq_q, seq_kv}}};
	const char *mask = f8_export_cache_find(ex, &key);
	if (mask || ex->status)
		return mask;
	const char *shape = f8_export_shape(ex, key.shape.dims, 2);
	const char *zero = f8_export_scalar(ex, dtype, 0.0), *one = f8_export_scalar(ex, dtype, 1.0);
	const char *lowest = f8_export_scalar(ex, dtype, -f8_dtype_get_info(dtype)->max);
	bool shared = f8_export_enter_shared(ex);
	const char *ones = f8_export_shared_op(ex, "Expand", "causal_mask/ones", IN(one, shape));
	const char *lower = f8_export_shared_op(ex, "Trilu", "causal_mask/lower", IN(ones));
	f8_export_attr_int(ex, f8_export_last(ex), "upper", 0);
	const char *hidden = f8_export_shared_op(ex, "Equal", "causal_mask/hidden", IN(lower, zero));
	mask = f8_export_shared_op(ex, "Where", "causal_mask", IN(hidden, lowest, zero));
	ex->shared = shared;
	f8_export_cache_add(ex, &key, mask);
	return ex->status ? NULL : mask;
}

/* Grouped-query k or v (batch, kv_heads, seq, d) repeated to (batch, heads, seq, d), each kv
 * head `group` times in a row: Unsqueeze(2), Expand([1, 1, group, 1, 1]), Reshape. */
static const char *repeat_heads(onnx_exporter *ex, const char *kv, const char *what,
				int64_t heads, int64_t group, f8_dim head_dim) {
	if (group == 1)
		return kv;
	char name[32];
	snprintf(name, sizeof name, "%s_grouped", what);
	const char *grouped = f8_export_op(ex, "Unsqueeze", name, IN(kv, f8_export_ints(ex, INTS(2))));
	snprintf(name, sizeof name, "%s_expanded", what);
	const char *expanded = f8_export_op(ex, "Expand", name,
					 IN(grouped, f8_export_ints(ex, INTS(1, 1, group, 1, 1))));
	snprintf(name, sizeof name, "%s_repeated", what);
	return f8_export_op(ex, "Reshape", name,
			 IN(expanded, f8_export_ints(ex, INTS(0, heads, -1, f8_dim_value(head_dim)))));
}

/* The scores' mask input: an additive float mask as it is, a boolean one (true attends) as
 * Where(mask, 0, lowest). */
static const char *mask_input(onnx_exporter *ex, const f8_node *node, f8_dtype dtype) {
	const char *mask = f8_export_input(ex, node, 3);
	if (!mask || f8_export_input_type(ex, node, 3)->dtype != F8_DTYPE_BOOL)
		return mask;
	return f8_export_op(ex, "Where", "mask", IN(mask, f8_export_scalar(ex, dtype, 0.0),
			 f8_export_scalar(ex, dtype, -f8_dtype_get_info(dtype)->max)));
}

/* Attention: softmax(q k^T * scale [+ causal mask] [+ mask]) v, k and v repeated to q's heads. */
void f8_export_lower_attention(onnx_exporter *ex, const f8_node *node) {
	const f8_dim *q_dims = f8_export_input_type(ex, node, 0)->shape.dims;
	const f8_dim *k_dims = f8_export_input_type(ex, node, 1)->shape.dims;
	f8_dtype dtype = f8_export_input_type(ex, node, 0)->dtype;
	if (node->n_outputs > 1 || !f8_dim_is_const(q_dims[1]) || !f8_dim_is_const(k_dims[1]) ||
	    !f8_dim_is_const(q_dims[3])) {
		f8_export_unsupported(ex, "Attention with symbolic heads or head size, or its "
				   "log-sum-exp output");
		return;
	}
	int64_t heads = f8_dim_value(q_dims[1]), group = heads / f8_dim_value(k_dims[1]);
	double default_scale = 1.0 / sqrt((double)f8_dim_value(q_dims[3]));
	double scale = f8_node_attr_float(node, "scale", default_scale);
	const char *q = f8_export_input(ex, node, 0);
	const char *k = repeat_heads(ex, f8_export_input(ex, node, 1), "k", heads, group, q_dims[3]);
	const char *v = repeat_heads(ex, f8_export_input(ex, node, 2), "v", heads, group, q_dims[3]);
	const char *k_t = f8_export_op(ex, "Transpose", "k_t", IN(k));
	f8_export_attr_ints(ex, f8_export_last(ex), "perm", INTS(0, 1, 3, 2));
	const char *scores = f8_export_op(ex, "MatMul", "scores", IN(q, k_t));
	scores = f8_export_op(ex, "Mul", "scores_scaled", IN(scores, f8_export_scalar(ex, dtype, scale)));
	if (f8_node_attr_int(node, "causal", 0))
		scores = f8_export_op(ex, "Add", "scores_causal",
				   IN(scores, causal_mask(ex, dtype, q_dims[2], k_dims[2])));
	if (node->n_inputs > 3 && node->inputs[3] != F8_NONE) {
		const char *mask = mask_input(ex, node, dtype);
		scores = f8_export_op(ex, "Add", "scores_masked", IN(scores, mask));
	}
	const char *probs = f8_export_op(ex, "Softmax", "probs", IN(scores));
	f8_export_attr_int(ex, f8_export_last(ex), "axis", -1);
	f8_export_op_to(ex, "MatMul", f8_export_output(ex, node, 0), IN(probs, v));
}

/* The gates (tokens, experts) f32: 1 where an expert ranks among the top k of `probs`, else 0. */
static const char *top_k_mask(onnx_exporter *ex, const char *probs, int64_t experts,
			      int64_t top_k) {
	uint8_t *earlier = f8_arena_alloc_array(ex->arena, (size_t)(experts * experts), 1);
	if (!earlier) {
		f8_export_fail(ex, F8_ERR_NOMEM, "out of memory writing the ONNX model");
		return NULL;
	}
	for (int64_t e = 0; e < experts; e++)
		for (int64_t j = 0; j < e; j++)
			earlier[e * experts + j] = 1; // [e][j]: expert j comes before expert e
	f8_shape square = {.rank = 2, .dims = {f8_dim_const(experts), f8_dim_const(experts)}};
	const char *order = f8_export_constant(ex, F8_DTYPE_BOOL, &square, earlier,
					    (size_t)(experts * experts));
	const char *own = f8_export_op(ex, "Unsqueeze", "p_e", IN(probs, f8_export_ints(ex, INTS(2))));
	const char *other = f8_export_op(ex, "Unsqueeze", "p_j", IN(probs, f8_export_ints(ex, INTS(1))));
	const char *greater = f8_export_op(ex, "Greater", "j_greater", IN(other, own));
	const char *tied = f8_export_op(ex, "Equal", "j_tied", IN(other, own));
	const char *tied_before = f8_export_op(ex, "And", "j_tied_before", IN(tied, order));
	const char *beats = f8_export_op(ex, "Or", "j_beats", IN(greater, tied_before));
	const char *counted = f8_export_op(ex, "Cast", "j_beats_f32", IN(beats));
	f8_export_attr_int(ex, f8_export_last(ex), "to", f8_export_data_type(F8_DTYPE_F32));
	const char *rank = f8_export_op(ex, "ReduceSum", "rank",
				     IN(counted, f8_export_ints(ex, INTS(2))));
	f8_export_attr_int(ex, f8_export_last(ex), "keepdims", 0);
	const char *chosen = f8_export_op(ex, "Less", "chosen",
				       IN(rank, f8_export_scalar(ex, F8_DTYPE_F32, (double)top_k)));
	const char *mask = f8_export_op(ex, "Cast", "chosen_f32", IN(chosen));
	f8_export_attr_int(ex, f8_export_last(ex), "to", f8_export_data_type(F8_DTYPE_F32));
	return mask;
}

/* Router: logits (tokens, experts) -> the dense gates (tokens, experts) f32, standing for both
 * outputs (probabilities and expert ids). */
void f8_export_lower_router(onnx_exporter *ex, const f8_node *node) {
	const f8_type *type = f8_export_input_type(ex, node, 0);
	f8_dim experts = type->shape.dims[1];
	if (!f8_dim_is_const(experts) || f8_dim_value(experts) > 4096) {
		f8_export_unsupported(ex, "a Router over a symbolic or huge number of experts");
		return;
	}
	const char *logits = f8_export_input(ex, node, 0);
	if (type->dtype != F8_DTYPE_F32) { // the router's probabilities are f32
		logits = f8_export_op(ex, "Cast", "logits_f32", IN(logits));
		f8_export_attr_int(ex, f8_export_last(ex), "to", f8_export_data_type(F8_DTYPE_F32));
	}
	bool sigmoid = strcmp(f8_node_attr_string(node, "score", "softmax"), "sigmoid") == 0;
	const char *probs = f8_export_op(ex, sigmoid ? "Sigmoid" : "Softmax", "scores", IN(logits));
	if (!sigmoid)
		f8_export_attr_int(ex, f8_export_last(ex), "axis", -1);
	const char *mask = top_k_mask(ex, probs, f8_dim_value(experts),
				      f8_node_attr_int(node, "top_k", 1));
	const char *gates = f8_export_op(ex, "Mul", "top_k", IN(probs, mask));
	if (f8_node_attr_int(node, "normalize", 0)) {
		const char *sum = f8_export_op(ex, "ReduceSum", "top_k_sum",
					    IN(gates, f8_export_ints(ex, INTS(1))));
		f8_export_attr_int(ex, f8_export_last(ex), "keepdims", 1);
		gates = f8_export_op(ex, "Div", "gates", IN(gates, sum));
	}
	f8_export_bind(ex, node, 0, gates, EXPORT_FORM_GATES);
	f8_export_bind(ex, node, 1, NULL, EXPORT_FORM_ROUTE);
	ex->has_moe = true;
}

/* MoEDispatch: the tokens x (tokens, hidden) as the dense rows (1, tokens, hidden), which
 * broadcast over the experts. */
void f8_export_lower_moe_dispatch(onnx_exporter *ex, const f8_node *node) {
	const char *x = f8_export_input(ex, node, 0);
	f8_export_input_form(ex, node, 1, EXPORT_FORM_ROUTE);
	const char *rows = f8_export_op(ex, "Unsqueeze", "dense", IN(x, f8_export_ints(ex, INTS(0))));
	f8_export_bind(ex, node, 0, rows, EXPORT_FORM_EXPERT_ROWS);
	f8_export_bind(ex, node, 1, NULL, EXPORT_FORM_ROUTE);
}

/* GroupedLinear: every expert on every row, MatMul(rows, Transpose(w)) -> (experts, tokens, n). */
void f8_export_lower_grouped_linear(onnx_exporter *ex, const f8_node *node) {
	const char *rows = f8_export_input_form(ex, node, 0, EXPORT_FORM_EXPERT_ROWS);
	const char *weight = f8_export_input(ex, node, 1);
	f8_export_input_form(ex, node, 2, EXPORT_FORM_ROUTE);
	const char *weight_t = f8_export_op(ex, "Transpose", "weight_t", IN(weight));
	f8_export_attr_ints(ex, f8_export_last(ex), "perm", INTS(0, 2, 1));
	const char *out = f8_export_op(ex, "MatMul", "dense", IN(rows, weight_t));
	f8_export_bind(ex, node, 0, out, EXPORT_FORM_EXPERT_ROWS);
}

/* MoECombine: sum over experts of y (experts, tokens, hidden) times the gates (tokens, experts)
 * -> (tokens, hidden). */
void f8_export_lower_moe_combine(onnx_exporter *ex, const f8_node *node) {
	const char *y = f8_export_input_form(ex, node, 0, EXPORT_FORM_EXPERT_ROWS);
	const char *gates = f8_export_input_form(ex, node, 1, EXPORT_FORM_GATES);
	f8_export_input_form(ex, node, 2, EXPORT_FORM_ROUTE);
	f8_dtype dtype = f8_export_input_type(ex, node, 0)->dtype;
	const char *by_expert = f8_export_op(ex, "Transpose", "gates_t", IN(gates));
	f8_export_attr_ints(ex, f8_export_last(ex), "perm", INTS(1, 0));
	const char *weights = f8_export_op(ex, "Unsqueeze", "weights",
					IN(by_expert, f8_export_ints(ex, INTS(2))));
	if (dtype != F8_DTYPE_F32) {
		weights = f8_export_op(ex, "Cast", "weights_cast", IN(weights));
		f8_export_attr_int(ex, f8_export_last(ex), "to", f8_export_data_type(dtype));
	}
	const char *weighted = f8_export_op(ex, "Mul", "weighted", IN(y, weights));
	f8_export_op_to(ex, "ReduceSum", f8_export_output(ex, node, 0),
		     IN(weighted, f8_export_ints(ex, INTS(0))));
	f8_export_attr_int(ex, f8_export_last(ex), "keepdims", 0);
}
