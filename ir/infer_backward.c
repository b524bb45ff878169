/*
 * Type and shape functions of the backward ops (what the training pass's gradient rules make)
 * and the optimizer ops. Each comment states the op's semantics: the reference kernels in
 * runtime/cpu/ implement exactly that. Backward ops take the upstream gradient first.
 *
 * Saved statistics (a norm's mean and rstd, an attention's out and lse, a router's probs) are
 * inputs so that a device kernel need not recompute them; the CPU reference recomputes them in
 * double from the other inputs, which makes its backward the exact derivative of its forward.
 */
#include <string.h> // strcmp

#include "ir/infer_internal.h" // infer_* helpers, f8_infer_* prototypes

static f8_status require_same_type(const f8_graph *graph, const f8_type *a, const char *a_what,
				   const f8_type *b, const char *b_what, f8_diag *diag) {
	if (f8_type_equal(a, b))
		return F8_OK;
	char s1[160], s2[160];
	return f8_infer_fail(diag, "%s is %s but %s is %s; they must match", a_what,
			  f8_type_format(graph, a, s1, sizeof s1), b_what,
			  f8_type_format(graph, b, s2, sizeof s2));
}

static bool is_scalar(const f8_type *type) {
	return type->shape.rank == 0;
}

/* LinearWgrad: dy (..., N), x (..., K) -> dw (N, K) = sum over the leading dims of dy^T x, or
 * (K, N) with transpose_weight=1 (the layout of the Linear's weight it is the gradient of). */
f8_status f8_infer_linear_wgrad(const f8_graph *graph, const f8_node *node, f8_type *outputs,
				f8_diag *diag) {
	const f8_type *dy = infer_input(graph, node, 0), *x = infer_input(graph, node, 1);
	f8_status status = f8_infer_require_float(dy, "dy", diag);
	if (!status)
		status = f8_infer_require_same_dtype(dy, "dy", x, "x", diag);
	if (!status)
		status = f8_infer_require_flag(node, "transpose_weight", diag);
	if (status)
		return status;
	int rank = x->shape.rank;
	if (rank < 1 || dy->shape.rank != rank)
		return f8_infer_fail(diag, "dy and x must have the same rank, at least 1");
	for (int i = 0; i < rank - 1; i++)
		if (!f8_dim_equal(dy->shape.dims[i], x->shape.dims[i]))
			return f8_infer_fail(diag, "dy and x must agree on every dim but the last");
	f8_dim n = dy->shape.dims[rank - 1], k = x->shape.dims[rank - 1];
	bool transposed = f8_node_attr_int(node, "transpose_weight", 0);
	outputs[0] = (f8_type){.dtype = dy->dtype,
			       .shape = {.rank = 2, .dims = {transposed ? k : n, transposed ? n : k}}};
	return F8_OK;
}

/* LayerNormGrad: dy, x, gamma, mean, rstd (LayerNorm's extra outputs) -> dx (like x),
 * dgamma (like gamma), and when asked dbeta (like gamma). Statistics are over x's dims from
 * axis, as in the forward. */
f8_status f8_infer_layer_norm_grad(const f8_graph *graph, const f8_node *node, f8_type *outputs,
				   f8_diag *diag) {
	const f8_type *dy = infer_input(graph, node, 0), *x = infer_input(graph, node, 1);
	const f8_type *gamma = infer_input(graph, node, 2), *mean = infer_input(graph, node, 3);
	const f8_type *rstd = infer_input(graph, node, 4);
	f8_status status = require_same_type(graph, dy, "dy", x, "x", diag);
	if (!status)
		status = f8_infer_require_float(gamma, "gamma", diag);
	if (!status)
		status = require_same_type(graph, mean, "mean", rstd, "rstd", diag);
	if (status)
		return status;
	outputs[0] = *x;
	for (uint32_t i = 1; i < node->n_outputs; i++)
		outputs[i] = *gamma;
	return F8_OK;
}

/* RMSNormGrad: dy, x, gamma, rstd -> dx (like x), dgamma (like gamma). The rounding of the
 * normalized x to x's dtype in the forward is passed straight through. */
f8_status f8_infer_rms_norm_grad(const f8_graph *graph, const f8_node *node, f8_type *outputs,
				 f8_diag *diag) {
	const f8_type *dy = infer_input(graph, node, 0), *x = infer_input(graph, node, 1);
	const f8_type *gamma = infer_input(graph, node, 2);
	f8_status status = require_same_type(graph, dy, "dy", x, "x", diag);
	if (!status)
		status = f8_infer_require_float(gamma, "gamma", diag);
	if (status)
		return status;
	outputs[0] = *x;
	outputs[1] = *gamma;
	return F8_OK;
}

/* AttentionGrad: dout, q, k, v, out, lse (Attention's outputs), optional mask -> dq, dk, dv
 * (like q, k, v); with grouped-query attention dk and dv sum over the query heads that share a
 * key head. Attributes as the forward's. */
f8_status f8_infer_attention_grad(const f8_graph *graph, const f8_node *node, f8_type *outputs,
				  f8_diag *diag) {
	const f8_type *dout = infer_input(graph, node, 0), *out = infer_input(graph, node, 4);
	const f8_type *lse = infer_input(graph, node, 5);
	f8_status status = require_same_type(graph, dout, "dout", out, "out", diag);
	if (!status)
		status = f8_infer_require_float(lse, "lse", diag);
	if (status)
		return status;
	for (uint32_t i = 0; i < 3; i++) {
		const f8_type *operand = infer_input(graph, node, i + 1);
		if (operand->shape.rank != 4)
			return f8_infer_fail(diag, "q, k and v must have rank 4");
		outputs[i] = *operand;
	}
	return F8_OK;
}

/* GeluGrad: dy, x -> dx = dy * gelu'(x), with the forward's approximation. */
f8_status f8_infer_gelu_grad(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			     f8_diag *diag) {
	const f8_type *dy = infer_input(graph, node, 0), *x = infer_input(graph, node, 1);
	static const char *const approximations[] = {"none", "tanh", NULL};
	f8_status status = f8_infer_require_choice(node, "approximate", approximations, diag);
	if (!status)
		status = require_same_type(graph, dy, "dy", x, "x", diag);
	if (!status)
		status = f8_infer_require_float(x, "x", diag);
	outputs[0] = *x;
	return status;
}

/* SwiGLUGrad: dy, x[, up] -> the gradients of SwiGLU's inputs: with one packed input x
 * (..., 2n) = [gate | up], dx (..., 2n); with two, dgate and dup. */
f8_status f8_infer_swiglu_grad(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			       f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 1), *up = infer_input(graph, node, 2);
	uint32_t n_inputs = up ? 2 : 1;
	if (node->n_outputs != n_inputs)
		return f8_infer_fail(diag, "SwiGLUGrad has one output per input of the SwiGLU (%u)",
				  n_inputs);
	f8_type y;
	f8_node forward = *node;
	forward.inputs++, forward.n_inputs--;
	f8_status status = f8_infer_swiglu(graph, &forward, &y, diag);
	if (!status)
		status = require_same_type(graph, infer_input(graph, node, 0), "dy", &y,
					   "the SwiGLU's output", diag);
	if (status)
		return status;
	outputs[0] = *x;
	if (up)
		outputs[1] = *up;
	return F8_OK;
}

/* EmbeddingGrad: dy (ids..., hidden), ids -> dw (vocab, hidden): row r is the sum of the rows of
 * dy whose id is r. With a third input, start (as Embedding's), row r sums the ids start + r
 * and ids outside [start, start + vocab) are this rank's to leave out. */
f8_status f8_infer_embedding_grad(const f8_graph *graph, const f8_node *node, f8_type *outputs,
				  f8_diag *diag) {
	const f8_type *dy = infer_input(graph, node, 0), *ids = infer_input(graph, node, 1);
	f8_status status = f8_infer_require_float(dy, "dy", diag);
	if (!status)
		status = f8_infer_require_integer(ids, "the ids", diag);
	if (!status && node->n_inputs > 2)
		status = f8_infer_require_vocab_start(infer_input(graph, node, 2), diag);
	if (status)
		return status;
	if (dy->shape.rank != ids->shape.rank + 1)
		return f8_infer_fail(diag, "dy must have the ids' shape and one more dim, hidden");
	for (int i = 0; i < ids->shape.rank; i++)
		if (!f8_dim_equal(dy->shape.dims[i], ids->shape.dims[i]))
			return f8_infer_fail(diag, "dy must have the ids' shape and one more dim, hidden");
	const f8_attr *vocab = f8_node_attr(node, "vocab");
	outputs[0] = (f8_type){.dtype = dy->dtype,
			       .shape = {.rank = 2, .dims = {vocab->dim, dy->shape.dims[ids->shape.rank]}}};
	return F8_OK;
}

/* GatherGrad: dy, indices -> the gradient of Gather's data, of size `size` along `axis`:
 * zeros, then dy's slices added at the gathered positions (repeats accumulate). */
f8_status f8_infer_gather_grad(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			       f8_diag *diag) {
	const f8_type *dy = infer_input(graph, node, 0), *indices = infer_input(graph, node, 1);
	f8_status status = f8_infer_require_float(dy, "dy", diag);
	if (!status)
		status = f8_infer_require_integer(indices, "indices", diag);
	if (status)
		return status;
	int data_rank = dy->shape.rank - indices->shape.rank + 1, axis;
	if (data_rank < 1)
		return f8_infer_fail(diag, "dy has too small a rank for these indices");
	if ((status = f8_infer_axis(f8_node_attr_int(node, "axis", 0), data_rank, false, "axis", &axis,
				 diag)))
		return status;
	f8_shape data = {.rank = (uint8_t)data_rank};
	for (int i = 0; i < data_rank; i++)
		data.dims[i] = i < axis ? dy->shape.dims[i]
					: i == axis ? f8_node_attr(node, "size")->dim
						    : dy->shape.dims[i + indices->shape.rank - 1];
	outputs[0] = (f8_type){.dtype = dy->dtype, .shape = data};
	return F8_OK;
}

/* TopKGrad: dy (TopK's values' gradient) and TopK's indices, of one shape -> dx, that shape
 * with `axis` `size` long: zeros with each dy element at its index along the axis. */
f8_status f8_infer_top_k_grad(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			      f8_diag *diag) {
	const f8_type *dy = infer_input(graph, node, 0), *indices = infer_input(graph, node, 1);
	f8_status status = f8_infer_require_float(dy, "dy", diag);
	if (!status)
		status = f8_infer_require_integer(indices, "indices", diag);
	if (!status && !f8_shape_equal(&dy->shape, &indices->shape))
		status = f8_infer_fail(diag, "dy and the indices differ in shape");
	int axis;
	if (!status)
		status = f8_infer_axis(f8_node_attr_int(node, "axis", -1), dy->shape.rank, false,
				       "axis", &axis, diag);
	if (status)
		return status;
	f8_shape shape = dy->shape;
	shape.dims[axis] = f8_node_attr(node, "size")->dim;
	outputs[0] = (f8_type){.dtype = dy->dtype, .shape = shape};
	return F8_OK;
}

/* SliceGrad: dy -> zeros of `shape` with dy written where Slice (same starts, ends, axes,
 * steps) took it from. */
f8_status f8_infer_slice_grad(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			      f8_diag *diag) {
	const f8_type *dy = infer_input(graph, node, 0);
	const f8_attr *shape = f8_node_attr(node, "shape");
	if (shape->dims.n != dy->shape.rank)
		return f8_infer_fail(diag, "attribute shape must have dy's rank");
	f8_type x = {.dtype = dy->dtype, .shape = {.rank = (uint8_t)shape->dims.n}};
	for (uint32_t i = 0; i < shape->dims.n; i++)
		x.shape.dims[i] = shape->dims.items[i];
	// The slice of x must have dy's shape: check with Slice's own shape function.
	f8_value probe = {.type = x};
	f8_graph view = *graph;
	view.values = &probe;
	f8_value_id input = 0;
	f8_node slice = *node;
	slice.inputs = &input;
	f8_type sliced;
	f8_status status = f8_infer_slice(&view, &slice, &sliced, diag);
	if (status)
		return status;
	if (!f8_type_equal(&sliced, dy))
		return require_same_type(graph, dy, "dy", &sliced, "the slice of attribute shape",
					 diag);
	outputs[0] = x;
	return F8_OK;
}

/* SoftmaxGrad: dy, y (the softmax) -> dx = y * (dy - sum(dy * y)) along axis.
 * LogSoftmaxGrad: dy, y (the log-softmax) -> dx = dy - exp(y) * sum(dy) along axis. */
f8_status f8_infer_softmax_grad(const f8_graph *graph, const f8_node *node, f8_type *outputs,
				f8_diag *diag) {
	const f8_type *dy = infer_input(graph, node, 0), *y = infer_input(graph, node, 1);
	f8_status status = require_same_type(graph, dy, "dy", y, "y", diag);
	if (!status)
		status = f8_infer_softmax(graph, node, outputs, diag);
	return status;
}

/* CrossEntropyGrad: dloss (like the loss), logits, labels, lse -> dlogits (like the logits) =
 * (softmax(logits) - onehot(label)) * dloss, divided by the number of labels that are not
 * ignore_index for reduction mean; rows whose label is ignore_index get 0. */
f8_status f8_infer_cross_entropy_grad(const f8_graph *graph, const f8_node *node,
				      f8_type *outputs, f8_diag *diag) {
	const f8_type *logits = infer_input(graph, node, 1), *labels = infer_input(graph, node, 2);
	f8_type loss[2];
	f8_node forward = *node;
	forward.inputs++, forward.n_inputs = 2, forward.n_outputs = 2;
	f8_status status = f8_infer_cross_entropy(graph, &forward, loss, diag);
	if (!status)
		status = require_same_type(graph, infer_input(graph, node, 0), "dloss", &loss[0],
					   "the loss", diag);
	if (!status)
		status = require_same_type(graph, infer_input(graph, node, 3), "lse", &loss[1],
					   "the log-sum-exp per row", diag);
	(void)labels;
	outputs[0] = *logits;
	return status;
}

/* CrossEntropyShardGrad: dsum_exp, dtarget (the rows' shape), logits, labels, max, start (as
 * CrossEntropyShard's) -> dlogits = dsum_exp * exp(logit - max) + dtarget at the label's logit
 * where the shard holds it. */
f8_status f8_infer_cross_entropy_shard_grad(const f8_graph *graph, const f8_node *node,
					    f8_type *outputs, f8_diag *diag) {
	f8_type sums[2];
	f8_node forward = *node;
	forward.inputs += 2, forward.n_inputs = 4, forward.n_outputs = 2;
	f8_status status = f8_infer_cross_entropy_shard(graph, &forward, sums, diag);
	for (uint32_t i = 0; !status && i < 2; i++)
		status = require_same_type(graph, infer_input(graph, node, i),
					   i ? "dtarget" : "dsum_exp", &sums[i],
					   "the shard's row sums", diag);
	outputs[0] = *infer_input(graph, node, 2);
	return status;
}

/* CrossEntropyMergeGrad: dloss (like the loss), sum_exp, labels -> dsum_exp = w / sum_exp and
 * dtarget = -w per row, w the row's weight in the loss (dloss over the counted rows for mean,
 * 0 for a row labelled ignore_index). */
f8_status f8_infer_cross_entropy_merge_grad(const f8_graph *graph, const f8_node *node,
					    f8_type *outputs, f8_diag *diag) {
	const f8_type *sum_exp = infer_input(graph, node, 1), *labels = infer_input(graph, node, 2);
	f8_status status = f8_infer_require_integer(labels, "the labels", diag);
	if (!status && (sum_exp->dtype != F8_DTYPE_F32 ||
			!f8_shape_equal(&sum_exp->shape, &labels->shape)))
		return f8_infer_fail(diag, "the row sums must be f32 of the labels' shape");
	bool keep_rows = strcmp(f8_node_attr_string(node, "reduction", "mean"), "none") == 0;
	f8_type loss = keep_rows ? *sum_exp : infer_scalar(F8_DTYPE_F32);
	if (!status)
		status = require_same_type(graph, infer_input(graph, node, 0), "dloss", &loss,
					   "the loss", diag);
	outputs[0] = outputs[1] = *sum_exp;
	return status;
}

/* RouterGrad: dprobs, logits, probs, indices (the Router's outputs) -> dlogits (like logits),
 * through the forward's score (softmax or sigmoid), top-k selection and normalization. */
f8_status f8_infer_router_grad(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			       f8_diag *diag) {
	const f8_type *dprobs = infer_input(graph, node, 0), *logits = infer_input(graph, node, 1);
	const f8_type *probs = infer_input(graph, node, 2);
	f8_status status = require_same_type(graph, dprobs, "dprobs", probs, "probs", diag);
	if (!status)
		status = f8_infer_require_float(logits, "the logits", diag);
	outputs[0] = *logits;
	return status;
}

/* MoEDispatchGrad: dy (tokens * top_k, hidden) sorted by expert, indices (tokens, top_k) ->
 * dx (tokens, hidden): each token's copies un-permuted and summed. */
f8_status f8_infer_moe_dispatch_grad(const f8_graph *graph, const f8_node *node,
				     f8_type *outputs, f8_diag *diag) {
	const f8_type *dy = infer_input(graph, node, 0), *indices = infer_input(graph, node, 1);
	f8_status status = f8_infer_require_float(dy, "dy", diag);
	if (!status)
		status = f8_infer_require_integer(indices, "the expert indices", diag);
	if (status)
		return status;
	f8_dim rows;
	if (dy->shape.rank != 2 || indices->shape.rank != 2 ||
	    !f8_dim_mul(indices->shape.dims[0], indices->shape.dims[1], &rows) ||
	    !f8_dim_equal(rows, dy->shape.dims[0]))
		return f8_infer_fail(diag, "dy must be (tokens * top_k, hidden) for indices (tokens, top_k)");
	outputs[0] = (f8_type){.dtype = dy->dtype,
			       .shape = {.rank = 2, .dims = {indices->shape.dims[0], dy->shape.dims[1]}}};
	return F8_OK;
}

/* GroupedLinearWgrad: dy (rows, N), x (rows, K), counts (experts) -> dw (experts, N, K), or
 * (experts, K, N) with transpose_weight=1: expert e's rows of dy^T x. */
f8_status f8_infer_grouped_linear_wgrad(const f8_graph *graph, const f8_node *node,
					f8_type *outputs, f8_diag *diag) {
	const f8_type *dy = infer_input(graph, node, 0), *x = infer_input(graph, node, 1);
	const f8_type *counts = infer_input(graph, node, 2);
	f8_status status = f8_infer_require_float(dy, "dy", diag);
	if (!status)
		status = f8_infer_require_same_dtype(dy, "dy", x, "x", diag);
	if (!status)
		status = f8_infer_require_integer(counts, "the counts", diag);
	if (!status)
		status = f8_infer_require_flag(node, "transpose_weight", diag);
	if (status)
		return status;
	if (dy->shape.rank != 2 || x->shape.rank != 2 || counts->shape.rank != 1 ||
	    !f8_dim_equal(dy->shape.dims[0], x->shape.dims[0]))
		return f8_infer_fail(diag, "GroupedLinearWgrad needs dy (rows, N), x (rows, K), counts "
					"(experts)");
	bool transposed = f8_node_attr_int(node, "transpose_weight", 0);
	f8_dim n = dy->shape.dims[1], k = x->shape.dims[1];
	outputs[0] = (f8_type){.dtype = dy->dtype,
			       .shape = {.rank = 3, .dims = {counts->shape.dims[0], transposed ? k : n,
							     transposed ? n : k}}};
	return F8_OK;
}

/* MoECombineGrad: dout (tokens, hidden), y, probs, indices (MoECombine's inputs) -> dy (like y):
 * each copy gets dout of its token times its probability; dprobs (like probs): the dot product
 * of dout and the copy. */
f8_status f8_infer_moe_combine_grad(const f8_graph *graph, const f8_node *node,
				    f8_type *outputs, f8_diag *diag) {
	f8_type out;
	f8_node forward = *node;
	forward.inputs++, forward.n_inputs = 3, forward.n_outputs = 1;
	f8_status status = f8_infer_moe_combine(graph, &forward, &out, diag);
	if (!status)
		status = require_same_type(graph, infer_input(graph, node, 0), "dout", &out,
					   "the MoECombine's output", diag);
	if (status)
		return status;
	outputs[0] = *infer_input(graph, node, 1);
	outputs[1] = *infer_input(graph, node, 2);
	return F8_OK;
}

/* GlobalNorm: any number of float tensors -> the f32 scalar sqrt(sum of the squares of all their
 * elements), accumulated in f64. */
f8_status f8_infer_global_norm(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			       f8_diag *diag) {
	for (uint32_t i = 0; i < node->n_inputs; i++) {
		f8_status status = f8_infer_require_float(infer_input(graph, node, i), "every input", diag);
		if (status)
			return status;
	}
	outputs[0] = infer_scalar(F8_DTYPE_F32);
	return F8_OK;
}

/*
 * LearningRate: the iteration (integer scalar, 1-based) -> the f32 scalar learning rate:
 * lr * it / warmup while it <= warmup (linear warm-up); after it, decay from lr to min_lr over
 * the iterations (warmup, decay_iters] by `style`: constant (stays lr), linear, or cosine
 * (min_lr + (lr - min_lr) * (1 + cos(pi * ratio)) / 2, ratio = (it - warmup) /
 * (decay_iters - warmup)); min_lr past decay_iters. Computed in f64, rounded to f32.
 */
f8_status f8_infer_learning_rate(const f8_graph *graph, const f8_node *node, f8_type *outputs,
				 f8_diag *diag) {
	static const char *const styles[] = {"constant", "linear", "cosine", NULL};
	const f8_type *iteration = infer_input(graph, node, 0);
	f8_status status = f8_infer_require_integer(iteration, "the iteration", diag);
	if (!status)
		status = f8_infer_require_choice(node, "style", styles, diag);
	if (status)
		return status;
	if (!is_scalar(iteration))
		return f8_infer_fail(diag, "the iteration must be a scalar");
	double lr = f8_node_attr_float(node, "lr", 0), min_lr = f8_node_attr_float(node, "min_lr", 0);
	int64_t warmup = f8_node_attr_int(node, "warmup", 0);
	int64_t decay = f8_node_attr_int(node, "decay_iters", 0);
	if (!(lr >= 0) || !(min_lr >= 0) || min_lr > lr)
		return f8_infer_fail(diag, "needs 0 <= min_lr <= lr (lr %g, min_lr %g)", lr, min_lr);
	if (warmup < 0 || (strcmp(f8_node_attr_string(node, "style", "constant"), "constant") != 0 &&
			   decay <= warmup))
		return f8_infer_fail(diag, "needs warmup >= 0 and, to decay, decay_iters > warmup "
					"(warmup %lld, decay_iters %lld)", (long long)warmup,
				  (long long)decay);
	outputs[0] = infer_scalar(F8_DTYPE_F32);
	return F8_OK;
}

/*
 * AdamW: param, grad, m, v, lr (f32 scalar), step (integer scalar, 1-based: the bias correction's
 * t), optional grad_scale (f32 scalar; the gradient is multiplied by it first: clipping and the
 * average over micro-batches) -> param', m', v', as torch.optim.AdamW computes them, in f32:
 *   g = grad * grad_scale; param *= 1 - lr * weight_decay;
 *   m = beta1 * m + (1 - beta1) * g; v = beta2 * v + (1 - beta2) * g * g;
 *   param -= (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + epsilon).
 * param and grad may be any float dtype of the same shape (param is the f32 master weight); m
 * and v are f32 of that shape. Defaults: beta1 0.9, beta2 0.999, epsilon 1e-8, weight_decay 0.
 * Two more optional f32 scalars skip the step, so that a step that met a NaN or an inf leaves
 * the weights and moments as they were (apex's and TransformerEngine's fused Adam take a
 * no-op flag, torch's GradScaler skips optimizer.step on found_inf): grad_norm (input 7), the
 * global norm of the gradient, skips it when it is not finite; found_inf (input 8) when it is
 * not 0. A skipped step's outputs are param, m and v unchanged.
 */
f8_status f8_infer_adamw(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			 f8_diag *diag) {
	const f8_type *param = infer_input(graph, node, 0), *grad = infer_input(graph, node, 1);
	const f8_type *m = infer_input(graph, node, 2), *v = infer_input(graph, node, 3);
	const f8_type *lr = infer_input(graph, node, 4), *step = infer_input(graph, node, 5);
	const f8_type *grad_scale = infer_input(graph, node, 6);
	f8_status status = f8_infer_require_float(param, "the parameter", diag);
	if (!status)
		status = f8_infer_require_float(grad, "the gradient", diag);
	if (!status && !f8_shape_equal(&param->shape, &grad->shape))
		status = f8_infer_fail(diag, "the gradient must have the parameter's shape");
	f8_type moment = {.dtype = F8_DTYPE_F32, .shape = param->shape};
	if (!status)
		status = require_same_type(graph, m, "m", &moment, "f32 like the parameter", diag);
	if (!status)
		status = require_same_type(graph, v, "v", &moment, "f32 like the parameter", diag);
	if (!status && (lr->dtype != F8_DTYPE_F32 || !is_scalar(lr)))
		status = f8_infer_fail(diag, "lr must be an f32 scalar");
	if (!status && (!f8_dtype_is_integer(step->dtype) || !is_scalar(step)))
		status = f8_infer_fail(diag, "step must be an integer scalar");
	if (!status && grad_scale && (grad_scale->dtype != F8_DTYPE_F32 || !is_scalar(grad_scale)))
		status = f8_infer_fail(diag, "grad_scale must be an f32 scalar");
	const f8_type *grad_norm = infer_input(graph, node, 7), *found_inf = infer_input(graph, node, 8);
	if (!status && grad_norm && (grad_norm->dtype != F8_DTYPE_F32 || !is_scalar(grad_norm)))
		status = f8_infer_fail(diag, "grad_norm must be an f32 scalar");
	if (!status && found_inf && (found_inf->dtype != F8_DTYPE_F32 || !is_scalar(found_inf)))
		status = f8_infer_fail(diag, "found_inf must be an f32 scalar");
	double beta1 = f8_node_attr_float(node, "beta1", 0.9);
	double beta2 = f8_node_attr_float(node, "beta2", 0.999);
	double epsilon = f8_node_attr_float(node, "epsilon", 1e-8);
	double weight_decay = f8_node_attr_float(node, "weight_decay", 0.0);
	if (!status && !(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1 && epsilon > 0 &&
			 weight_decay >= 0))
		status = f8_infer_fail(diag, "needs 0 <= beta1, beta2 < 1, epsilon > 0 and "
					  "weight_decay >= 0");
	if (status)
		return status;
	outputs[0] = *param;
	outputs[1] = moment;
	outputs[2] = moment;
	return F8_OK;
}
