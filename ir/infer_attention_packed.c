/*
 * Type and shape functions of the packed attention ops (ir/ops.def: AttentionPacked and its
 * gradient), the layouts the attention-layout pass gives Attention and AttentionGrad where q, k
 * and v are the heads of one QKV projection's output.
 */
#include "ir/infer_internal.h" // infer_input, f8_infer_* helpers and prototypes

enum { MAX_HEADS = 1 << 20 }; // far above any model's; keeps (heads + 2 kv_heads) * d in range

/* The packing of qkv (batch, seq, (heads + 2 kv_heads) * d) by the node's attributes: the
 * heads into *heads and *kv_heads, the head dim into *head_dim. */
static f8_status packing(const f8_graph *graph, const f8_node *node, const f8_type *qkv,
			 int64_t *heads, int64_t *kv_heads, f8_dim *head_dim, f8_diag *diag) {
	f8_status status = f8_infer_require_float(qkv, "qkv", diag);
	if (!status)
		status = f8_infer_require_flag(node, "causal", diag);
	if (status)
		return status;
	if (qkv->shape.rank != 3)
		return f8_infer_fail(diag, "qkv must have rank 3: (batch, seq, (heads + 2 kv_heads) "
					"* head_dim)");
	*heads = f8_node_attr_int(node, "heads", 0);
	*kv_heads = f8_node_attr_int(node, "kv_heads", *heads);
	if (*heads < 1 || *heads > MAX_HEADS || *kv_heads < 1 || *kv_heads > MAX_HEADS)
		return f8_infer_fail(diag, "heads %lld and kv_heads %lld must be in [1, %d]",
				  (long long)*heads, (long long)*kv_heads, MAX_HEADS);
	if (*heads % *kv_heads != 0)
		return f8_infer_fail(diag, "kv_heads %lld must divide heads %lld",
				  (long long)*kv_heads, (long long)*heads);
	f8_dim parts = f8_dim_const(*heads + 2 * *kv_heads);
	if (!f8_dim_div(qkv->shape.dims[2], parts, head_dim) ||
	    (f8_dim_is_const(*head_dim) && f8_dim_value(*head_dim) < 1)) {
		char width[64];
		f8_dim_format(graph, qkv->shape.dims[2], width, sizeof width);
		return f8_infer_fail(diag, "qkv's last dim %s is not heads + 2 kv_heads = %lld heads "
					"of one head dim", width, (long long)(*heads + 2 * *kv_heads));
	}
	if (f8_node_attr(node, "scale") && !(f8_node_attr_float(node, "scale", 0) > 0))
		return f8_infer_fail(diag, "attribute scale must be positive");
	return F8_OK;
}

/* AttentionPacked: qkv (batch, seq, (heads + 2 kv_heads) * d), optional mask as Attention's
 * (broadcastable to (batch, heads, seq, seq)) -> out (batch, seq, heads * d), and when asked
 * the log-sum-exp (f32, (batch, heads, seq)). */
f8_status f8_infer_attention_packed(const f8_graph *graph, const f8_node *node, f8_type *outputs,
				    f8_diag *diag) {
	const f8_type *qkv = infer_input(graph, node, 0), *mask = infer_input(graph, node, 1);
	int64_t heads = 0, kv_heads = 0;
	f8_dim head_dim, width;
	f8_status status = packing(graph, node, qkv, &heads, &kv_heads, &head_dim, diag);
	if (status)
		return status;
	const f8_dim *d = qkv->shape.dims;
	if (!f8_dim_mul(f8_dim_const(heads), head_dim, &width))
		return f8_infer_fail(diag, "heads * head_dim has no form as a dim");
	if (mask) {
		f8_shape scores = {.rank = 4, .dims = {d[0], f8_dim_const(heads), d[1], d[1]}};
		f8_shape broadcast;
		if (mask->dtype != F8_DTYPE_BOOL && mask->dtype != qkv->dtype)
			return f8_infer_fail(diag, "the mask must be bool or of qkv's dtype");
		if ((status = f8_infer_broadcast_shapes(graph, &mask->shape, &scores, &broadcast, diag)))
			return status;
		if (!f8_shape_equal(&broadcast, &scores))
			return f8_infer_fail(diag, "the mask must broadcast to (batch, heads, seq, seq)");
	}
	outputs[0] = (f8_type){.dtype = qkv->dtype, .shape = {.rank = 3, .dims = {d[0], d[1], width}}};
	if (node->n_outputs > 1)
		outputs[1] = (f8_type){.dtype = F8_DTYPE_F32,
				       .shape = {.rank = 3, .dims = {d[0], f8_dim_const(heads), d[1]}}};
	return F8_OK;
}

/* Checks that input `what` has the type the forward gave its output. */
static f8_status require_type(const f8_graph *graph, const f8_type *got, const f8_type *want,
			      const char *what, f8_diag *diag) {
	if (got->dtype == want->dtype && f8_shape_equal(&got->shape, &want->shape))
		return F8_OK;
	char s1[160], s2[160];
	return f8_infer_fail(diag, "%s is %s, expected %s", what,
			  f8_type_format(graph, got, s1, sizeof s1),
			  f8_type_format(graph, want, s2, sizeof s2));
}

/* AttentionPackedGrad: dout (batch, seq, heads * d), qkv, out, lse (AttentionPacked's outputs),
 * optional mask -> dqkv, packed as qkv; with grouped-query heads the gradients of k and v sum
 * over the query heads that share them. Attributes as the forward's. */
f8_status f8_infer_attention_packed_grad(const f8_graph *graph, const f8_node *node,
					 f8_type *outputs, f8_diag *diag) {
	f8_value_id forward_inputs[2] = {node->inputs[1], node->n_inputs > 4 ? node->inputs[4] : F8_NONE};
	f8_node forward = *node;
	forward.inputs = forward_inputs;
	forward.n_inputs = 2;
	forward.n_outputs = 2;
	f8_type made[2];
	f8_status status = f8_infer_attention_packed(graph, &forward, made, diag);
	if (!status)
		status = require_type(graph, infer_input(graph, node, 0), &made[0], "dout", diag);
	if (!status)
		status = require_type(graph, infer_input(graph, node, 2), &made[0], "out", diag);
	if (!status)
		status = require_type(graph, infer_input(graph, node, 3), &made[1], "lse", diag);
	if (status)
		return status;
	outputs[0] = *infer_input(graph, node, 1);
	return F8_OK;
}
