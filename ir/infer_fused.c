/*
 * Type and shape functions of the high-level ops (what fuse-patterns makes), the FP8 ops and
 * the collectives. Layout conventions are stated per op; they are the ones the FP8 passes and
 * the runtime rely on.
 */
#include <string.h> // memcpy

#include "ir/infer_internal.h" // infer_* helpers, f8_infer_* prototypes

/* Checks that `param` has the shape of the trailing dims of `x` from `axis` on. */
static f8_status require_trailing_shape(const f8_graph *graph, const f8_type *x, int axis,
					const f8_type *param, const char *what, f8_diag *diag) {
	f8_shape trailing = {.rank = (uint8_t)(x->shape.rank - axis)};
	memcpy(trailing.dims, &x->shape.dims[axis], trailing.rank * sizeof(f8_dim));
	if (!f8_shape_equal(&trailing, &param->shape)) {
		char s1[160], s2[160];
		f8_type expected = {.dtype = param->dtype, .shape = trailing};
		return infer_fail(diag, "%s is %s, expected %s (the input's dims from axis %d)", what,
				  f8_type_format(graph, param, s1, sizeof s1),
				  f8_type_format(graph, &expected, s2, sizeof s2), axis);
	}
	return F8_OK;
}

/* Linear: x (..., K), w (N, K) as PyTorch stores it (K-major, what Hopper's TN GEMM wants), or
 * with transpose_weight=1 w (K, N) as ONNX MatMul and GPT-2's Conv1D store it; optional bias (N)
 * -> (..., N). */
f8_status f8_infer_linear(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			  f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0), *w = infer_input(graph, node, 1);
	const f8_type *bias = infer_input(graph, node, 2);
	f8_status status = infer_require_float(x, "x", diag);
	if (!status)
		status = infer_require_same_dtype(x, "x", w, "the weight", diag);
	if (!status)
		status = infer_require_flag(node, "transpose_weight", diag);
	if (status)
		return status;
	if (x->shape.rank < 1 || w->shape.rank != 2)
		return infer_fail(diag, "Linear needs x of rank >= 1 and a weight of rank 2");
	bool transposed = f8_node_attr_int(node, "transpose_weight", 0);
	f8_dim k = x->shape.dims[x->shape.rank - 1];
	f8_dim n = w->shape.dims[transposed ? 1 : 0], w_k = w->shape.dims[transposed ? 0 : 1];
	if (!f8_dim_equal(k, w_k)) {
		char s1[64], s2[64];
		return infer_fail(diag, "x has K = %s but the weight %s has K = %s",
				  f8_dim_format(graph, k, s1, sizeof s1), transposed ? "(K, N)" : "(N, K)",
				  f8_dim_format(graph, w_k, s2, sizeof s2));
	}
	if (bias && (bias->shape.rank != 1 || !f8_dim_equal(bias->shape.dims[0], n)))
		return infer_fail(diag, "the bias must have shape (N)");
	outputs[0] = *x;
	outputs[0].shape.dims[x->shape.rank - 1] = n;
	return F8_OK;
}

/* The (..., 1, ..., 1) f32 shape of per-row statistics (mean, rstd) of a norm over `axis`. */
static f8_type norm_statistics(const f8_type *x, int axis) {
	f8_type stats = {.dtype = F8_DTYPE_F32, .shape = x->shape};
	for (int i = axis; i < x->shape.rank; i++)
		stats.shape.dims[i] = f8_dim_const(1);
	return stats;
}

static f8_status norm_common(const f8_graph *graph, const f8_node *node, int *axis,
			     f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0), *gamma = infer_input(graph, node, 1);
	double epsilon = f8_node_attr_float(node, "epsilon", 1e-5);
	f8_status status = infer_require_float(x, "x", diag);
	if (!status)
		status = infer_axis(f8_node_attr_int(node, "axis", -1), x->shape.rank, false, "axis",
				    axis, diag);
	if (!status)
		status = require_trailing_shape(graph, x, *axis, gamma, "the scale (gamma)", diag);
	if (!status && !(epsilon > 0.0))
		status = infer_fail(diag, "attribute epsilon must be positive, not %g", epsilon);
	return status;
}

/* LayerNorm: x, gamma, optional beta (both shaped like x's dims from axis) -> y, and when asked
 * the mean and 1/std (f32, x's shape with ones from axis) that the backward reads. */
f8_status f8_infer_layer_norm(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			      f8_diag *diag) {
	int axis;
	f8_status status = norm_common(graph, node, &axis, diag);
	const f8_type *x = infer_input(graph, node, 0), *beta = infer_input(graph, node, 2);
	if (!status && beta)
		status = require_trailing_shape(graph, x, axis, beta, "the bias (beta)", diag);
	if (status)
		return status;
	outputs[0] = *x;
	for (uint32_t i = 1; i < node->n_outputs; i++)
		outputs[i] = norm_statistics(x, axis);
	return F8_OK;
}

/* RMSNorm: x, gamma -> y, and when asked 1/rms (f32) for the backward. The statistics are f32
 * whatever x is; the normalized x is rounded to x's dtype before gamma multiplies it (Hugging
 * Face's order, which exported bf16 models spell with two Casts). */
f8_status f8_infer_rms_norm(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			    f8_diag *diag) {
	int axis;
	f8_status status = norm_common(graph, node, &axis, diag);
	if (status)
		return status;
	const f8_type *x = infer_input(graph, node, 0);
	outputs[0] = *x;
	if (node->n_outputs > 1)
		outputs[1] = norm_statistics(x, axis);
	return F8_OK;
}

/* Attention: q (batch, heads, seq_q, d), k (batch, kv_heads, seq_kv, d),
 * v (batch, kv_heads, seq_kv, d_v), heads a multiple of kv_heads (grouped-query), optional mask
 * (bool: true attends; or additive float) broadcastable to (batch, heads, seq_q, seq_kv)
 * -> out (batch, heads, seq_q, d_v); a row that attends to no key gives 0 (as
 * scaled_dot_product_attention's NaN guard does); and when asked the softmax log-sum-exp
 * (f32, (batch, heads, seq_q)) that the backward reads. */
f8_status f8_infer_attention(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			     f8_diag *diag) {
	const f8_type *q = infer_input(graph, node, 0), *k = infer_input(graph, node, 1);
	const f8_type *v = infer_input(graph, node, 2), *mask = infer_input(graph, node, 3);
	f8_status status = infer_require_float(q, "q", diag);
	if (!status)
		status = infer_require_same_dtype(q, "q", k, "k", diag);
	if (!status)
		status = infer_require_same_dtype(q, "q", v, "v", diag);
	if (!status)
		status = infer_require_flag(node, "causal", diag);
	if (status)
		return status;
	if (q->shape.rank != 4 || k->shape.rank != 4 || v->shape.rank != 4)
		return infer_fail(diag, "q, k and v must have rank 4: (batch, heads, seq, head_dim)");
	const f8_dim *dq = q->shape.dims, *dk = k->shape.dims, *dv = v->shape.dims;
	f8_dim group;
	if (!f8_dim_equal(dq[0], dk[0]) || !f8_dim_equal(dk[0], dv[0]))
		return infer_fail(diag, "q, k and v must have the same batch size");
	if (!f8_dim_equal(dk[1], dv[1]) || !f8_dim_div(dq[1], dk[1], &group))
		return infer_fail(diag, "k and v must have the same number of heads, which must "
					"divide q's heads");
	if (!f8_dim_equal(dk[2], dv[2]))
		return infer_fail(diag, "k and v must have the same sequence length");
	if (!f8_dim_equal(dq[3], dk[3]))
		return infer_fail(diag, "q and k must have the same head dimension");
	if (f8_node_attr(node, "scale") && !(f8_node_attr_float(node, "scale", 0) > 0))
		return infer_fail(diag, "attribute scale must be positive");
	if (mask) {
		f8_shape scores = {.rank = 4, .dims = {dq[0], dq[1], dq[2], dk[2]}}, broadcast;
		if (mask->dtype != F8_DTYPE_BOOL && mask->dtype != q->dtype)
			return infer_fail(diag, "the mask must be bool or of q's dtype");
		if ((status = infer_broadcast(graph, &mask->shape, &scores, &broadcast, diag)))
			return status;
		if (!f8_shape_equal(&broadcast, &scores))
			return infer_fail(diag, "the mask must broadcast to (batch, heads, seq_q, seq_kv)");
	}
	outputs[0] = (f8_type){.dtype = q->dtype, .shape = {.rank = 4, .dims = {dq[0], dq[1], dq[2], dv[3]}}};
	if (node->n_outputs > 1)
		outputs[1] = (f8_type){.dtype = F8_DTYPE_F32, .shape = {.rank = 3, .dims = {dq[0], dq[1], dq[2]}}};
	return F8_OK;
}

f8_status f8_infer_gelu(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			f8_diag *diag) {
	static const char *const approximations[] = {"none", "tanh", NULL};
	f8_status status = infer_require_choice(node, "approximate", approximations, diag);
	return status ? status : f8_infer_unary_float(graph, node, outputs, diag);
}

/* SwiGLU: silu(gate) * up, from two inputs, or from one whose last dim is [gate | up]. */
f8_status f8_infer_swiglu(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			  f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0), *up = infer_input(graph, node, 1);
	f8_status status = infer_require_float(x, "the input", diag);
	if (status)
		return status;
	if (x->shape.rank < 1)
		return infer_fail(diag, "SwiGLU needs rank >= 1");
	outputs[0] = *x;
	if (up) {
		if ((status = infer_require_same_dtype(x, "gate", up, "up", diag)))
			return status;
		if (!f8_shape_equal(&x->shape, &up->shape))
			return infer_fail(diag, "gate and up must have the same shape");
		return F8_OK;
	}
	f8_dim *last = &outputs[0].shape.dims[x->shape.rank - 1];
	if (!f8_dim_div(*last, f8_dim_const(2), last))
		return infer_fail(diag, "the last dimension must be even: it holds gate and up");
	return F8_OK;
}

/* Rope: x (..., seq, head_dim), cos and sin (seq, rotary_dim) with leading dims that broadcast
 * to x's (exporters write (1, 1, seq, rotary_dim), or (batch, 1, seq, rotary_dim) when position
 * ids are an input), rotary_dim even and at most
 * head_dim (partial rotary leaves the rest as it is); rotate-half unless interleaved. */
f8_status f8_infer_rope(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0), *cos = infer_input(graph, node, 1);
	const f8_type *sin = infer_input(graph, node, 2);
	f8_status status = infer_require_float(x, "x", diag);
	if (!status)
		status = infer_require_flag(node, "interleaved", diag);
	if (!status)
		status = infer_require_float(cos, "cos", diag);
	if (status)
		return status;
	int rank = cos->shape.rank;
	if (!f8_type_equal(cos, sin) || rank < 2)
		return infer_fail(diag, "cos and sin must have the same type and shape (seq, rotary_dim)");
	if (x->shape.rank < 2 || x->shape.rank < rank)
		return infer_fail(diag, "x must have rank >= 2 and at least the rank of cos: "
					"(..., seq, head_dim)");
	// Leading dims broadcast against x's: 1, or x's own (per-batch tables from position ids).
	for (int i = 0; i < rank - 2; i++) {
		f8_dim dim = cos->shape.dims[i], against = x->shape.dims[x->shape.rank - rank + i];
		if (!f8_dim_equal(dim, f8_dim_const(1)) && !f8_dim_equal(dim, against))
			return infer_fail(diag, "cos and sin's leading dims must be 1 or x's, before "
						"(seq, rotary_dim)");
	}
	f8_dim seq = x->shape.dims[x->shape.rank - 2], head_dim = x->shape.dims[x->shape.rank - 1];
	f8_dim rotary = cos->shape.dims[rank - 1], half;
	if (!f8_dim_equal(cos->shape.dims[rank - 2], seq))
		return infer_fail(diag, "cos and sin must have one row per position of x's sequence");
	if (!f8_dim_div(rotary, f8_dim_const(2), &half))
		return infer_fail(diag, "the rotary dimension must be even");
	if (!f8_dim_equal(rotary, head_dim) &&
	    !(f8_dim_is_const(rotary) && f8_dim_is_const(head_dim) && f8_dim_value(rotary) < f8_dim_value(head_dim)))
		return infer_fail(diag, "the rotary dimension must not exceed the head dimension");
	outputs[0] = *x;
	return F8_OK;
}

/* Embedding: ids (any shape, integer), weight (vocab, hidden) -> (ids..., hidden). */
f8_status f8_infer_embedding(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			     f8_diag *diag) {
	const f8_type *ids = infer_input(graph, node, 0), *w = infer_input(graph, node, 1);
	f8_status status = infer_require_integer(ids, "the ids", diag);
	if (!status)
		status = infer_require_float(w, "the weight", diag);
	if (status)
		return status;
	if (w->shape.rank != 2)
		return infer_fail(diag, "the weight must have rank 2: (vocab, hidden)");
	if (ids->shape.rank + 1 > F8_MAX_RANK)
		return infer_fail(diag, "the result would have rank > %d", F8_MAX_RANK);
	outputs[0] = (f8_type){.dtype = w->dtype, .shape = ids->shape};
	outputs[0].shape.dims[outputs[0].shape.rank++] = w->shape.dims[1];
	return F8_OK;
}

/*
 * Mixture of experts, as Megatron-LM and TransformerEngine run it: a router picks top_k experts
 * per token, a dispatch permutes token copies so each expert's rows are contiguous, one grouped
 * GEMM per projection runs every expert on its rows, and a combine un-permutes and sums the
 * copies weighted by the router's probabilities. Shapes stay static (tokens * top_k rows);
 * how many rows each expert gets is data, in `counts`.
 */

/* Router: logits (tokens, experts) -> probs (tokens, top_k) f32, indices (tokens, top_k) i64. */
f8_status f8_infer_router(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			  f8_diag *diag) {
	static const char *const scores[] = {"softmax", "sigmoid", NULL};
	const f8_type *logits = infer_input(graph, node, 0);
	int64_t top_k = f8_node_attr_int(node, "top_k", 0);
	f8_status status = infer_require_float(logits, "the logits", diag);
	if (!status)
		status = infer_require_choice(node, "score", scores, diag);
	if (!status)
		status = infer_require_flag(node, "normalize", diag);
	if (status)
		return status;
	if (logits->shape.rank != 2)
		return infer_fail(diag, "the logits must have rank 2: (tokens, experts)");
	f8_dim experts = logits->shape.dims[1];
	if (top_k < 1 || (f8_dim_is_const(experts) && top_k > f8_dim_value(experts)))
		return infer_fail(diag, "attribute top_k is %lld; it must be in [1, experts]",
				  (long long)top_k);
	f8_shape shape = {.rank = 2, .dims = {logits->shape.dims[0], f8_dim_const(top_k)}};
	outputs[0] = (f8_type){.dtype = F8_DTYPE_F32, .shape = shape};
	outputs[1] = (f8_type){.dtype = F8_DTYPE_I64, .shape = shape};
	return F8_OK;
}

/* Checks indices (tokens, top_k) against x's tokens; the row count tokens * top_k into *rows. */
static f8_status expert_indices(const f8_graph *graph, const f8_type *indices, f8_dim tokens,
				f8_dim *rows, f8_diag *diag) {
	f8_status status = infer_require_integer(indices, "the expert indices", diag);
	if (status)
		return status;
	if (indices->shape.rank != 2 || !f8_dim_equal(indices->shape.dims[0], tokens))
		return infer_fail(diag, "the expert indices must have shape (tokens, top_k)");
	if (!f8_dim_mul(tokens, indices->shape.dims[1], rows)) {
		char s[64];
		return infer_fail(diag, "%s tokens times top_k does not fit a dimension",
				  f8_dim_format(graph, tokens, s, sizeof s));
	}
	return F8_OK;
}

/* MoEDispatch: x (tokens, hidden), indices (tokens, top_k) -> x sorted by expert
 * (tokens * top_k, hidden) and the rows per expert (experts) i64. */
f8_status f8_infer_moe_dispatch(const f8_graph *graph, const f8_node *node, f8_type *outputs,
				f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0), *indices = infer_input(graph, node, 1);
	int64_t experts = f8_node_attr_int(node, "experts", 0);
	f8_status status = infer_require_float(x, "x", diag);
	if (status)
		return status;
	if (x->shape.rank != 2)
		return infer_fail(diag, "x must have rank 2: (tokens, hidden)");
	if (experts < 1)
		return infer_fail(diag, "attribute experts must be at least 1");
	f8_dim rows;
	if ((status = expert_indices(graph, indices, x->shape.dims[0], &rows, diag)))
		return status;
	outputs[0] = (f8_type){.dtype = x->dtype, .shape = {.rank = 2, .dims = {rows, x->shape.dims[1]}}};
	outputs[1] = (f8_type){.dtype = F8_DTYPE_I64,
			       .shape = {.rank = 1, .dims = {f8_dim_const(experts)}}};
	return F8_OK;
}

/* GroupedLinear: x (rows, K) sorted by expert, w (experts, N, K), or (experts, K, N) with
 * transpose_weight=1 (as the dgrad of a GroupedLinear reads it), counts (experts) -> (rows, N);
 * rows [sum(counts[:e]), sum(counts[:e+1])) are multiplied by w[e]. */
f8_status f8_infer_grouped_linear(const f8_graph *graph, const f8_node *node, f8_type *outputs,
				  f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0), *w = infer_input(graph, node, 1);
	const f8_type *counts = infer_input(graph, node, 2);
	f8_status status = infer_require_float(x, "x", diag);
	if (!status)
		status = infer_require_same_dtype(x, "x", w, "the weight", diag);
	if (!status)
		status = infer_require_integer(counts, "the counts", diag);
	if (!status)
		status = infer_require_flag(node, "transpose_weight", diag);
	if (status)
		return status;
	if (x->shape.rank != 2 || w->shape.rank != 3)
		return infer_fail(diag, "GroupedLinear needs x (rows, K) and a weight (experts, N, K)");
	bool transposed = f8_node_attr_int(node, "transpose_weight", 0);
	if (!f8_dim_equal(x->shape.dims[1], w->shape.dims[transposed ? 1 : 2]))
		return infer_fail(diag, "x and the weight disagree on K");
	if (counts->shape.rank != 1 || !f8_dim_equal(counts->shape.dims[0], w->shape.dims[0]))
		return infer_fail(diag, "the counts must have shape (experts), one per weight");
	outputs[0] = (f8_type){.dtype = x->dtype,
			       .shape = {.rank = 2, .dims = {x->shape.dims[0],
							     w->shape.dims[transposed ? 2 : 1]}}};
	return F8_OK;
}

/* MoECombine: y (tokens * top_k, hidden) sorted by expert, probs and indices (tokens, top_k)
 * -> (tokens, hidden): each token's copies un-permuted and summed, weighted by probs. */
f8_status f8_infer_moe_combine(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			       f8_diag *diag) {
	const f8_type *y = infer_input(graph, node, 0), *probs = infer_input(graph, node, 1);
	const f8_type *indices = infer_input(graph, node, 2);
	f8_status status = infer_require_float(y, "y", diag);
	if (!status)
		status = infer_require_float(probs, "the probabilities", diag);
	if (status)
		return status;
	if (y->shape.rank != 2 || probs->shape.rank != 2)
		return infer_fail(diag, "MoECombine needs y (tokens * top_k, hidden) and probs "
					"(tokens, top_k)");
	f8_dim tokens = probs->shape.dims[0], rows;
	if ((status = expert_indices(graph, indices, tokens, &rows, diag)))
		return status;
	if (!f8_shape_equal(&probs->shape, &indices->shape) || !f8_dim_equal(rows, y->shape.dims[0]))
		return infer_fail(diag, "y must have tokens * top_k rows, and probs the shape of the "
					"indices");
	outputs[0] = (f8_type){.dtype = y->dtype, .shape = {.rank = 2, .dims = {tokens, y->shape.dims[1]}}};
	return F8_OK;
}

/* CrossEntropy: logits (..., vocab), labels (...) integer -> the loss (f32; a scalar unless
 * reduction is none), and when asked the log-sum-exp per row (f32, (...)) for the backward. */
f8_status f8_infer_cross_entropy(const f8_graph *graph, const f8_node *node, f8_type *outputs,
				 f8_diag *diag) {
	static const char *const reductions[] = {"mean", "sum", "none", NULL};
	const f8_type *logits = infer_input(graph, node, 0), *labels = infer_input(graph, node, 1);
	f8_status status = infer_require_float(logits, "the logits", diag);
	if (!status)
		status = infer_require_integer(labels, "the labels", diag);
	if (!status)
		status = infer_require_choice(node, "reduction", reductions, diag);
	if (status)
		return status;
	f8_shape rows = logits->shape;
	if (rows.rank < 1)
		return infer_fail(diag, "the logits must have rank >= 1: (..., vocab)");
	rows.rank--;
	if (!f8_shape_equal(&rows, &labels->shape))
		return infer_fail(diag, "the labels must have the logits' shape without the vocab dim");
	bool keep_rows = strcmp(f8_node_attr_string(node, "reduction", "mean"), "none") == 0;
	outputs[0] = keep_rows ? (f8_type){.dtype = F8_DTYPE_F32, .shape = rows} : infer_scalar(F8_DTYPE_F32);
	if (node->n_outputs > 1)
		outputs[1] = (f8_type){.dtype = F8_DTYPE_F32, .shape = rows};
	return F8_OK;
}

/* FP8 ops. Scaled tensors are seen as matrices: (rows, cols) = (product of leading dims, last
 * dim). Block scales have shape (ceil(rows / block_rows), ceil(cols / block_cols)). */

/* The number of blocks of `block` along `dim`: a ceiling for constant dims; a symbolic dim
 * must be divisible. */
static bool blocks_along(f8_dim dim, int64_t block, f8_dim *out) {
	if (f8_dim_is_const(dim)) {
		*out = f8_dim_const((f8_dim_value(dim) + block - 1) / block);
		return true;
	}
	return f8_dim_div(dim, f8_dim_const(block), out);
}

/* The scale shape for `x` under the INTS attribute `block` ([rows, cols]), or a scalar. */
static f8_status scale_shape(const f8_graph *graph, const f8_node *node, const f8_type *x,
			     f8_shape *out, f8_diag *diag) {
	const f8_attr *block = f8_node_attr(node, "block");
	*out = (f8_shape){0};
	if (!block)
		return F8_OK;
	if (block->ints.n != 2 || block->ints.items[0] < 1 || block->ints.items[1] < 1)
		return infer_fail(diag, "attribute block must be two positive sizes [rows, cols]");
	if (x->shape.rank < 1)
		return infer_fail(diag, "block scaling needs a tensor of rank >= 1");
	f8_shape leading = x->shape;
	leading.rank--;
	f8_dim rows, cols = x->shape.dims[x->shape.rank - 1];
	if (!f8_shape_numel(&leading, &rows))
		return infer_fail(diag, "the row count overflows");
	out->rank = 2;
	if (!blocks_along(rows, block->ints.items[0], &out->dims[0]) ||
	    !blocks_along(cols, block->ints.items[1], &out->dims[1])) {
		char s[160];
		return infer_fail(diag, "%s does not divide into blocks of %lldx%lld",
				  f8_type_format(graph, x, s, sizeof s),
				  (long long)block->ints.items[0], (long long)block->ints.items[1]);
	}
	return F8_OK;
}

static f8_status require_fp8_format(const f8_node *node, f8_diag *diag) {
	f8_dtype to = f8_node_attr_dtype(node, "to", F8_DTYPE_UNDEFINED);
	if (!f8_dtype_is_fp8(to))
		return infer_fail(diag, "attribute to must be e4m3 or e5m2, not %s", f8_dtype_name(to));
	return infer_require_flag(node, "saturate", diag);
}

/* Quantize: x (high precision) -> FP8 codes. With a scale input (delayed scaling: f32, shaped
 * by `block`) it has one output; without, it finds the scale itself (current, block, MX
 * scaling) and also outputs scale_inv (f32, or e8m0 for MX with block [1, 32]). */
f8_status f8_infer_quantize(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			    f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0), *scale = infer_input(graph, node, 1);
	f8_dtype scale_dtype = f8_node_attr_dtype(node, "scale_dtype", F8_DTYPE_F32);
	const f8_attr *block = f8_node_attr(node, "block");
	f8_shape scales;
	f8_status status = require_fp8_format(node, diag);
	if (!status)
		status = infer_require_float(x, "the input", diag);
	if (!status)
		status = scale_shape(graph, node, x, &scales, diag);
	if (status)
		return status;
	if (f8_dtype_is_fp8(x->dtype))
		return infer_fail(diag, "the input is already FP8");
	if (f8_node_attr_int(node, "margin", 0) < 0)
		return infer_fail(diag, "attribute margin must not be negative");
	if (scale_dtype != F8_DTYPE_F32 && scale_dtype != F8_DTYPE_E8M0)
		return infer_fail(diag, "attribute scale_dtype must be f32 or e8m0");
	if (scale_dtype == F8_DTYPE_E8M0 &&
	    !(block && block->ints.n == 2 && block->ints.items[0] == 1 && block->ints.items[1] == 32))
		return infer_fail(diag, "e8m0 scales are for MX blocks: block must be [1, 32]");
	if ((scale != NULL) == (node->n_outputs == 2))
		return infer_fail(diag, "Quantize takes a scale input and has one output, or takes "
					"none and also outputs scale_inv");
	if (scale) {
		if (scale->dtype != F8_DTYPE_F32 || !f8_shape_equal(&scale->shape, &scales))
			return infer_fail(diag, "the scale must be f32 with one entry per block (a "
						"scalar without block)");
	}
	outputs[0] = (f8_type){.dtype = f8_node_attr_dtype(node, "to", F8_DTYPE_UNDEFINED), .shape = x->shape};
	if (!scale)
		outputs[1] = (f8_type){.dtype = scale_dtype, .shape = scales};
	return F8_OK;
}

/* Dequantize: FP8 codes, scale_inv (f32 or e8m0, shaped by `block`) -> `to` (f32, bf16, f16). */
f8_status f8_infer_dequantize(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			      f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0), *scale_inv = infer_input(graph, node, 1);
	f8_dtype to = f8_node_attr_dtype(node, "to", F8_DTYPE_UNDEFINED);
	f8_shape scales;
	if (!f8_dtype_is_fp8(x->dtype))
		return infer_fail(diag, "the input must be e4m3 or e5m2, not %s", f8_dtype_name(x->dtype));
	if (to != F8_DTYPE_F32 && to != F8_DTYPE_BF16 && to != F8_DTYPE_F16)
		return infer_fail(diag, "attribute to must be f32, bf16 or f16");
	f8_status status = scale_shape(graph, node, x, &scales, diag);
	if (status)
		return status;
	if ((scale_inv->dtype != F8_DTYPE_F32 && scale_inv->dtype != F8_DTYPE_E8M0) ||
	    !f8_shape_equal(&scale_inv->shape, &scales))
		return infer_fail(diag, "scale_inv must be f32 or e8m0 with one entry per block (a "
					"scalar without block)");
	outputs[0] = (f8_type){.dtype = to, .shape = x->shape};
	return F8_OK;
}

f8_status f8_infer_amax(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			f8_diag *diag) {
	f8_status status = infer_require_float(infer_input(graph, node, 0), "the input", diag);
	outputs[0] = infer_scalar(F8_DTYPE_F32);
	return status;
}

/* CastTranspose: x (..., cols) high precision, scale f32 scalar -> the FP8 copy (x's shape), its
 * transpose (cols, rows) for the TN-only GEMMs, and the amax, in one read of x. */
f8_status f8_infer_cast_transpose(const f8_graph *graph, const f8_node *node, f8_type *outputs,
				  f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0), *scale = infer_input(graph, node, 1);
	f8_status status = require_fp8_format(node, diag);
	if (!status)
		status = infer_require_float(x, "the input", diag);
	if (status)
		return status;
	if (x->shape.rank < 2)
		return infer_fail(diag, "CastTranspose needs rank >= 2");
	if (scale->dtype != F8_DTYPE_F32 || scale->shape.rank != 0)
		return infer_fail(diag, "the scale must be an f32 scalar");
	f8_shape leading = x->shape;
	leading.rank--;
	f8_dim rows, cols = x->shape.dims[x->shape.rank - 1];
	if (!f8_shape_numel(&leading, &rows))
		return infer_fail(diag, "the row count overflows");
	f8_dtype to = f8_node_attr_dtype(node, "to", F8_DTYPE_UNDEFINED);
	outputs[0] = (f8_type){.dtype = to, .shape = x->shape};
	outputs[1] = (f8_type){.dtype = to, .shape = {.rank = 2, .dims = {cols, rows}}};
	outputs[2] = infer_scalar(F8_DTYPE_F32);
	return F8_OK;
}

/* Collectives. `group` names the mesh axis whose ranks take part. */

static f8_status require_group(const f8_node *node, f8_diag *diag) {
	const char *group = f8_node_attr_string(node, "group", "");
	f8_mesh_axis axis;
	if (!f8_mesh_axis_from_name(group, strlen(group), &axis))
		return infer_fail(diag, "attribute group \"%s\" is not a mesh axis (tp, cp, ep, dp, pp)",
				  group);
	return F8_OK;
}

f8_status f8_infer_all_reduce(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			      f8_diag *diag) {
	static const char *const reductions[] = {"sum", "max", NULL};
	f8_status status = require_group(node, diag);
	if (!status)
		status = infer_require_choice(node, "op", reductions, diag);
	outputs[0] = *infer_input(graph, node, 0);
	return status;
}

/* AllGather and ReduceScatter over `ranks` ranks along `axis`. */
static f8_status gather_scatter(const f8_graph *graph, const f8_node *node, bool gather,
				f8_type *outputs, f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0);
	int64_t ranks = f8_node_attr_int(node, "ranks", 0);
	int axis;
	f8_status status = require_group(node, diag);
	if (!status)
		status = infer_axis(f8_node_attr_int(node, "axis", 0), x->shape.rank, false, "axis",
				    &axis, diag);
	if (status)
		return status;
	if (ranks < 1)
		return infer_fail(diag, "attribute ranks must be positive");
	outputs[0] = *x;
	f8_dim *dim = &outputs[0].shape.dims[axis];
	bool ok = gather ? f8_dim_mul(*dim, f8_dim_const(ranks), dim)
			 : f8_dim_div(*dim, f8_dim_const(ranks), dim);
	if (!ok)
		return infer_fail(diag, "dimension %d does not %s over %lld ranks", axis,
				  gather ? "gather" : "divide evenly", (long long)ranks);
	return F8_OK;
}

f8_status f8_infer_all_gather(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			      f8_diag *diag) {
	return gather_scatter(graph, node, true, outputs, diag);
}

f8_status f8_infer_reduce_scatter(const f8_graph *graph, const f8_node *node, f8_type *outputs,
				  f8_diag *diag) {
	return gather_scatter(graph, node, false, outputs, diag);
}

f8_status f8_infer_send(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			f8_diag *diag) {
	(void)graph, (void)outputs;
	if (f8_node_attr_int(node, "peer", -1) < 0)
		return infer_fail(diag, "attribute peer must not be negative");
	return require_group(node, diag);
}

f8_status f8_infer_recv(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			f8_diag *diag) {
	(void)graph;
	f8_status status = f8_infer_send(graph, node, outputs, diag);
	if (status)
		return status;
	const f8_attr *shape = f8_node_attr(node, "shape");
	if (shape->dims.n > F8_MAX_RANK)
		return infer_fail(diag, "attribute shape has rank %u > %d", shape->dims.n, F8_MAX_RANK);
	outputs[0] = (f8_type){.dtype = f8_node_attr_dtype(node, "dtype", F8_DTYPE_UNDEFINED),
			       .shape = {.rank = (uint8_t)shape->dims.n}};
	memcpy(outputs[0].shape.dims, shape->dims.items, shape->dims.n * sizeof(f8_dim));
	return F8_OK;
}
