/*
 * Gradient rules of the high-level ops (what fuse-patterns makes). A GEMM's gradients are GEMMs
 * the FP8 passes plan for like the forward one: the dgrad of a Linear is a Linear reading the
 * same weight transposed, its wgrad a LinearWgrad. The others go through their backward op
 * (ir/ops.def, "Backward ops"), which reads the statistics its forward op saved (a norm's mean and
 * rstd, an attention's log-sum-exp): f8_grad_forward_output asks the forward node for them.
 */
#include <stdio.h> // snprintf

#include "passes/gradients_internal.h" // F8_GRAD_RULE, f8_grad_* context, grad_* builders

/*
 * Emits backward op `op` whose output j is the gradient of the forward node's input grad_of[j],
 * naming each output for that input, and hands them to dx.
 */
static f8_status emit_gradients(f8_grad_context *context, const f8_node *forward, f8_op op,
				const f8_value_id *inputs, uint32_t n_inputs, const f8_attr *attrs,
				uint32_t n_attrs, const uint32_t *grad_of, uint32_t n_outputs,
				f8_value_id *dx, f8_diag *diag) {
	char names[4][F8_GRAD_NAME_MAX];
	const char *pointers[4] = {NULL, NULL, NULL, NULL};
	f8_value_id outputs[4];
	for (uint32_t j = 0; j < n_outputs; j++) {
		f8_grad_name(context, forward->inputs[grad_of[j]], names[j], sizeof names[j]);
		pointers[j] = names[j];
	}
	f8_status status = f8_grad_emit_named(context, op, inputs, n_inputs, attrs, n_attrs,
					      n_outputs, pointers, outputs, diag);
	for (uint32_t j = 0; !status && j < n_outputs; j++)
		dx[grad_of[j]] = outputs[j];
	return status;
}

/* Refuses a gradient flowing into an output from `first` on: the statistics a norm, an attention
 * or a cross-entropy saves for its backward op, which takes no gradient for them. */
static f8_status statistics_have_no_gradient(f8_grad_context *context, f8_node_id node,
					     const f8_value_id *dy, uint32_t first,
					     f8_diag *diag) {
	f8_node forward = grad_node(context, node);
	for (uint32_t o = first; o < forward.n_outputs; o++) {
		if (dy[o] == F8_NONE)
			continue;
		const f8_graph *graph = f8_grad_graph(context);
		f8_grad_unsupported(context, node, diag, "the loss depends on %%%s, a statistic the "
				    "backward of %s does not differentiate",
				    graph->values[forward.outputs[o]].name, f8_op_name(forward.op));
		f8_diag_hint(diag, "read only output 0 of %s on the way to the loss",
			     f8_op_name(forward.op));
		return F8_ERR_UNSUPPORTED;
	}
	return F8_OK;
}

/* Linear: dgrad = Linear(dy, w) with the weight's layout flipped; wgrad = LinearWgrad(dy, x) in
 * the weight's layout; the bias's gradient sums dy over its leading axes. */
F8_GRAD_RULE(LINEAR) {
	f8_node n = grad_node(context, node);
	f8_value_id x = n.inputs[0], w = n.inputs[1], b = n.n_inputs > 2 ? n.inputs[2] : F8_NONE;
	int64_t transposed = f8_node_attr_int(&n, "transpose_weight", 0);
	char name[F8_GRAD_NAME_MAX];
	f8_status status = F8_OK;
	if (f8_grad_wants(context, x)) {
		f8_attr flip = grad_attr_int("transpose_weight", 1);
		f8_value_id inputs[2] = {dy[0], w};
		f8_grad_name(context, x, name, sizeof name);
		status = f8_grad_op(context, F8_OP_LINEAR, inputs, 2, &flip, !transposed, name, &dx[0],
				 diag);
	}
	if (!status && f8_grad_wants(context, w)) {
		f8_attr layout = grad_attr_int("transpose_weight", 1);
		f8_value_id inputs[2] = {dy[0], x};
		f8_grad_name(context, w, name, sizeof name);
		status = f8_grad_op(context, F8_OP_LINEAR_WGRAD, inputs, 2, &layout, transposed != 0,
				 name, &dx[1], diag);
	}
	if (!status && b != F8_NONE && f8_grad_wants(context, b)) {
		int rank = grad_type(context, dy[0]).shape.rank;
		int64_t leading[F8_MAX_RANK];
		for (int i = 0; i + 1 < rank; i++)
			leading[i] = i;
		f8_attr attrs[2] = {grad_attr_ints("axes", leading, (uint32_t)(rank - 1)),
				    grad_attr_int("keepdims", 0)};
		f8_grad_name(context, b, name, sizeof name);
		if (rank == 1)
			dx[2] = dy[0];
		else
			status = f8_grad_op(context, F8_OP_REDUCE_SUM, dy, 1, attrs, 2, name, &dx[2], diag);
	}
	return status;
}

/* LayerNorm: LayerNormGrad(dy, x, gamma, mean, rstd) -> dx, dgamma[, dbeta]. */
F8_GRAD_RULE(LAYER_NORM) {
	f8_status status = statistics_have_no_gradient(context, node, dy, 1, diag);
	f8_value_id mean = F8_NONE, rstd = F8_NONE;
	if (!status)
		status = f8_grad_forward_output(context, node, 1, &mean, diag);
	if (!status)
		status = f8_grad_forward_output(context, node, 2, &rstd, diag);
	if (status)
		return status;
	f8_node n = grad_node(context, node);
	bool has_beta = n.n_inputs > 2 && n.inputs[2] != F8_NONE;
	f8_value_id inputs[5] = {dy[0], n.inputs[0], n.inputs[1], mean, rstd};
	static const uint32_t grad_of[3] = {0, 1, 2};
	return emit_gradients(context, &n, F8_OP_LAYER_NORM_GRAD, inputs, 5, n.attrs, n.n_attrs,
			      grad_of, has_beta ? 3 : 2, dx, diag);
}

/* RMSNorm: RMSNormGrad(dy, x, gamma, rstd) -> dx, dgamma. */
F8_GRAD_RULE(RMS_NORM) {
	f8_status status = statistics_have_no_gradient(context, node, dy, 1, diag);
	f8_value_id rstd = F8_NONE;
	if (!status)
		status = f8_grad_forward_output(context, node, 1, &rstd, diag);
	if (status)
		return status;
	f8_node n = grad_node(context, node);
	f8_value_id inputs[4] = {dy[0], n.inputs[0], n.inputs[1], rstd};
	static const uint32_t grad_of[2] = {0, 1};
	return emit_gradients(context, &n, F8_OP_RMS_NORM_GRAD, inputs, 4, n.attrs, n.n_attrs,
			      grad_of, 2, dx, diag);
}

/* What an attention's backward reads besides its inputs: `mask` (F8_NONE: none) must not need a
 * gradient, the log-sum-exp (output 1, a statistic) none either; the forward's log-sum-exp into
 * *lse (the output added when the forward was not asked for it). */
static f8_status attention_statistics(f8_grad_context *context, f8_node_id node,
				      f8_value_id mask, const f8_value_id *dy, f8_value_id *lse,
				      f8_diag *diag) {
	*lse = F8_NONE;
	if (mask != F8_NONE && f8_grad_wants(context, mask))
		return f8_grad_unsupported(context, node, diag, "the loss depends on the attention "
					   "mask %%%s, which has no gradient",
					   f8_grad_graph(context)->values[mask].name);
	f8_status status = statistics_have_no_gradient(context, node, dy, 1, diag);
	return status ? status : f8_grad_forward_output(context, node, 1, lse, diag);
}

/* Attention and RingAttention: `grad_op`(dout, q, k, v, out, lse[, mask]) -> dq, dk, dv, with
 * the forward's attributes; the log-sum-exp is a statistic. A mask is data: a float one that
 * depends on a parameter has no gradient here. */
static f8_status attention_gradient(f8_grad_context *context, f8_node_id node, f8_op grad_op,
				    const f8_value_id *dy, f8_value_id *dx, f8_diag *diag) {
	f8_node n = grad_node(context, node);
	f8_value_id mask = n.n_inputs > 3 ? n.inputs[3] : F8_NONE, lse;
	f8_status status = attention_statistics(context, node, mask, dy, &lse, diag);
	if (status)
		return status;
	n = grad_node(context, node);
	f8_value_id inputs[7] = {dy[0], n.inputs[0], n.inputs[1], n.inputs[2], n.outputs[0], lse,
				 mask};
	static const uint32_t grad_of[3] = {0, 1, 2};
	return emit_gradients(context, &n, grad_op, inputs, mask != F8_NONE ? 7 : 6, n.attrs,
			      n.n_attrs, grad_of, 3, dx, diag);
}

/* Attention: AttentionGrad. */
F8_GRAD_RULE(ATTENTION) {
	return attention_gradient(context, node, F8_OP_ATTENTION_GRAD, dy, dx, diag);
}

/* AttentionPacked: AttentionPackedGrad(dout, qkv, out, lse[, mask]) -> dqkv, packed as qkv.
 * The mask as Attention's. */
F8_GRAD_RULE(ATTENTION_PACKED) {
	f8_node n = grad_node(context, node);
	f8_value_id mask = n.n_inputs > 1 ? n.inputs[1] : F8_NONE, lse;
	f8_status status = attention_statistics(context, node, mask, dy, &lse, diag);
	if (status)
		return status;
	n = grad_node(context, node);
	f8_value_id inputs[5] = {dy[0], n.inputs[0], n.outputs[0], lse, mask};
	static const uint32_t grad_of[1] = {0};
	return emit_gradients(context, &n, F8_OP_ATTENTION_PACKED_GRAD, inputs,
			      mask != F8_NONE ? 5 : 4, n.attrs, n.n_attrs, grad_of, 1, dx, diag);
}

/* Gelu: GeluGrad(dy, x) with the forward's approximation. */
F8_GRAD_RULE(GELU) {
	f8_node n = grad_node(context, node);
	f8_value_id inputs[2] = {dy[0], n.inputs[0]};
	static const uint32_t grad_of[1] = {0};
	return emit_gradients(context, &n, F8_OP_GELU_GRAD, inputs, 2, n.attrs, n.n_attrs, grad_of,
			      1, dx, diag);
}

/* SwiGLU: SwiGLUGrad(dy, x[, up]) -> one gradient per input. */
F8_GRAD_RULE(SWIGLU) {
	f8_node n = grad_node(context, node);
	bool packed = n.n_inputs < 2 || n.inputs[1] == F8_NONE;
	f8_value_id inputs[3] = {dy[0], n.inputs[0], packed ? F8_NONE : n.inputs[1]};
	static const uint32_t grad_of[2] = {0, 1};
	return emit_gradients(context, &n, F8_OP_SWIGLU_GRAD, inputs, packed ? 2 : 3, NULL, 0,
			      grad_of, packed ? 1 : 2, dx, diag);
}

/* Rope: RopeGrad(dy, cos, sin) rotates the gradient back. The tables are buffers: a gradient
 * wanted for them is refused. */
F8_GRAD_RULE(ROPE) {
	f8_node n = grad_node(context, node);
	for (uint32_t i = 1; i < 3; i++) {
		if (!f8_grad_wants(context, n.inputs[i]))
			continue;
		f8_grad_unsupported(context, node, diag, "Rope has no gradient for its %s table, and "
				    "the loss depends on %%%s through it", i == 1 ? "cos" : "sin",
				    f8_grad_graph(context)->values[n.inputs[i]].name);
		f8_diag_hint(diag, "compute the rotary tables from buffers and positions, not from "
			     "trained parameters");
		return F8_ERR_UNSUPPORTED;
	}
	f8_value_id inputs[3] = {dy[0], n.inputs[1], n.inputs[2]};
	static const uint32_t grad_of[1] = {0};
	return emit_gradients(context, &n, F8_OP_ROPE_GRAD, inputs, 3, n.attrs, n.n_attrs, grad_of,
			      1, dx, diag);
}

/* Embedding: EmbeddingGrad(dy, ids) sums the rows of dy into the table's rows. */
F8_GRAD_RULE(EMBEDDING) {
	f8_node n = grad_node(context, node);
	f8_value_id ids = n.inputs[0], table = n.inputs[1];
	if (!f8_grad_wants(context, table))
		return F8_OK;
	f8_attr vocab = {.name = "vocab", .kind = F8_ATTR_DIM,
			 .dim = grad_type(context, table).shape.dims[0]};
	f8_value_id inputs[3] = {dy[0], ids, n.n_inputs > 2 ? n.inputs[2] : F8_NONE};
	static const uint32_t grad_of[1] = {1};
	return emit_gradients(context, &n, F8_OP_EMBEDDING_GRAD, inputs, n.n_inputs > 2 ? 3 : 2,
			      &vocab, 1, grad_of, 1, dx, diag);
}

/* RingAttention: RingAttentionGrad over the same ring (its attributes). */
F8_GRAD_RULE(RING_ATTENTION) {
	return attention_gradient(context, node, F8_OP_RING_ATTENTION_GRAD, dy, dx, diag);
}

/* CrossEntropy: CrossEntropyGrad(dloss, logits, labels, lse). */
F8_GRAD_RULE(CROSS_ENTROPY) {
	f8_status status = statistics_have_no_gradient(context, node, dy, 1, diag);
	f8_value_id lse = F8_NONE;
	if (!status)
		status = f8_grad_forward_output(context, node, 1, &lse, diag);
	if (status)
		return status;
	f8_node n = grad_node(context, node);
	f8_value_id inputs[4] = {dy[0], n.inputs[0], n.inputs[1], lse};
	static const uint32_t grad_of[1] = {0};
	return emit_gradients(context, &n, F8_OP_CROSS_ENTROPY_GRAD, inputs, 4, n.attrs, n.n_attrs,
			      grad_of, 1, dx, diag);
}

/* CrossEntropyShard: CrossEntropyShardGrad(dsum_exp, dtarget, logits, labels, max, start) for
 * the logits. The row maxima get none: the loss does not depend on them (they cancel out of
 * max + log(sum_exp)), they only keep exp in range. */
F8_GRAD_RULE(CROSS_ENTROPY_SHARD) {
	f8_node n = grad_node(context, node);
	if (!f8_grad_wants(context, n.inputs[0]))
		return F8_OK;
	if (dy[0] == F8_NONE || dy[1] == F8_NONE)
		return f8_grad_unsupported(context, node, diag, "the loss depends on one of the "
					   "shard's row sums but not the other (they are the two "
					   "halves of a cross-entropy)");
	f8_value_id inputs[6] = {dy[0], dy[1], n.inputs[0], n.inputs[1], n.inputs[2], n.inputs[3]};
	static const uint32_t grad_of[1] = {0};
	return emit_gradients(context, &n, F8_OP_CROSS_ENTROPY_SHARD_GRAD, inputs, 6, n.attrs,
			      n.n_attrs, grad_of, 1, dx, diag);
}

/* CrossEntropyMerge: CrossEntropyMergeGrad(dloss, sum_exp, labels) for the row sums and the
 * targets; the maxima get none (CrossEntropyShard's rule says why). */
F8_GRAD_RULE(CROSS_ENTROPY_MERGE) {
	f8_status status = statistics_have_no_gradient(context, node, dy, 1, diag);
	if (status)
		return status;
	f8_node n = grad_node(context, node);
	f8_value_id inputs[3] = {dy[0], n.inputs[0], n.inputs[3]};
	static const uint32_t grad_of[2] = {0, 1};
	return emit_gradients(context, &n, F8_OP_CROSS_ENTROPY_MERGE_GRAD, inputs, 3, n.attrs,
			      n.n_attrs, grad_of, 2, dx, diag);
}

/* Router: RouterGrad(dprobs, logits, probs, indices); the indices are integers. */
F8_GRAD_RULE(ROUTER) {
	if (dy[0] == F8_NONE)
		return F8_OK;
	f8_node n = grad_node(context, node);
	f8_value_id inputs[4] = {dy[0], n.inputs[0], n.outputs[0], n.outputs[1]};
	static const uint32_t grad_of[1] = {0};
	return emit_gradients(context, &n, F8_OP_ROUTER_GRAD, inputs, 4, n.attrs, n.n_attrs,
			      grad_of, 1, dx, diag);
}

/* MoEDispatch: MoEDispatchGrad(dy, indices) un-permutes and sums each token's copies. */
F8_GRAD_RULE(MOE_DISPATCH) {
	if (dy[0] == F8_NONE)
		return F8_OK;
	f8_node n = grad_node(context, node);
	f8_value_id inputs[2] = {dy[0], n.inputs[1]};
	static const uint32_t grad_of[1] = {0};
	return emit_gradients(context, &n, F8_OP_MOE_DISPATCH_GRAD, inputs, 2, n.attrs, n.n_attrs,
			      grad_of, 1, dx, diag);
}

/* GroupedLinear: dgrad = GroupedLinear(dy, w, counts) with the weight's layout flipped, wgrad =
 * GroupedLinearWgrad(dy, x, counts) in the weight's layout. */
F8_GRAD_RULE(GROUPED_LINEAR) {
	f8_node n = grad_node(context, node);
	f8_value_id x = n.inputs[0], w = n.inputs[1], counts = n.inputs[2];
	int64_t transposed = f8_node_attr_int(&n, "transpose_weight", 0);
	f8_attr layout = grad_attr_int("transpose_weight", 1);
	char name[F8_GRAD_NAME_MAX];
	f8_status status = F8_OK;
	if (f8_grad_wants(context, x)) {
		f8_value_id inputs[3] = {dy[0], w, counts};
		f8_grad_name(context, x, name, sizeof name);
		status = f8_grad_op(context, F8_OP_GROUPED_LINEAR, inputs, 3, &layout, !transposed, name,
				 &dx[0], diag);
	}
	if (!status && f8_grad_wants(context, w)) {
		f8_value_id inputs[3] = {dy[0], x, counts};
		f8_grad_name(context, w, name, sizeof name);
		status = f8_grad_op(context, F8_OP_GROUPED_LINEAR_WGRAD, inputs, 3, &layout,
				 transposed != 0, name, &dx[1], diag);
	}
	return status;
}

/* MoECombine: MoECombineGrad(dout, y, probs, indices) -> dy, dprobs. */
F8_GRAD_RULE(MOE_COMBINE) {
	f8_node n = grad_node(context, node);
	f8_value_id inputs[4] = {dy[0], n.inputs[0], n.inputs[1], n.inputs[2]};
	static const uint32_t grad_of[2] = {0, 1};
	return emit_gradients(context, &n, F8_OP_MOE_COMBINE_GRAD, inputs, 4, NULL, 0, grad_of, 2,
			      dx, diag);
}
