/*
 * Type and shape functions of the high-level ops (what fuse-patterns makes), the FP8 ops and
 * the collectives. Layout conventions are stated per op; they are the ones the FP8 passes and
 * the runtime rely on.
 */
#include <string.h> // memcpy, strcmp

#include "ir/infer_internal.h" // infer_* helpers, f8_infer_* prototypes

/* Checks that `param` has the shape of the trailing dims of `x` from `axis` on. */
static f8_status require_trailing_shape(const f8_graph *graph, const f8_type *x, int axis,
					const f8_type *param, const char *what, f8_diag *diag) {
	f8_shape trailing = {.rank = (uint8_t)(x->shape.rank - axis)};
	memcpy(trailing.dims, &x->shape.dims[axis], trailing.rank * sizeof(f8_dim));
	if (!f8_shape_equal(&trailing, &param->shape)) {
		char s1[160], s2[160];
		f8_type expected = {.dtype = param->dtype, .shape = trailing};
		return f8_infer_fail(diag, "%s is %s, expected %s (the input's dims from axis %d)", what,
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
	f8_status status = f8_infer_require_float(x, "x", diag);
	if (!status)
		status = f8_infer_require_same_dtype(x, "x", w, "the weight", diag);
	if (!status)
		status = f8_infer_require_flag(node, "transpose_weight", diag);
	if (status)
		return status;
	if (x->shape.rank < 1 || w->shape.rank != 2)
		return f8_infer_fail(diag, "Linear needs x of rank >= 1 and a weight of rank 2");
	bool transposed = f8_node_attr_int(node, "transpose_weight", 0);
	f8_dim k = x->shape.dims[x->shape.rank - 1];
	f8_dim n = w->shape.dims[transposed ? 1 : 0], w_k = w->shape.dims[transposed ? 0 : 1];
	if (!f8_dim_equal(k, w_k)) {
		char s1[64], s2[64];
		return f8_infer_fail(diag, "x has K = %s but the weight %s has K = %s",
				  f8_dim_format(graph, k, s1, sizeof s1), transposed ? "(K, N)" : "(N, K)",
				  f8_dim_format(graph, w_k, s2, sizeof s2));
	}
	if (bias && (bias->shape.rank != 1 || !f8_dim_equal(bias->shape.dims[0], n)))
		return f8_infer_fail(diag, "the bias must have shape (N)");
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
	f8_status status = f8_infer_require_float(x, "x", diag);
	if (!status)
		status = f8_infer_axis(f8_node_attr_int(node, "axis", -1), x->shape.rank, false, "axis",
				    axis, diag);
	if (!status)
		status = require_trailing_shape(graph, x, *axis, gamma, "the scale (gamma)", diag);
	if (!status && !(epsilon > 0.0))
		status = f8_infer_fail(diag, "attribute epsilon must be positive, not %g", epsilon);
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
	f8_status status = f8_infer_require_float(q, "q", diag);
	if (!status)
		status = f8_infer_require_same_dtype(q, "q", k, "k", diag);
	if (!status)
		status = f8_infer_require_same_dtype(q, "q", v, "v", diag);
	if (!status)
		status = f8_infer_require_flag(node, "causal", diag);
	if (status)
		return status;
	if (q->shape.rank != 4 || k->shape.rank != 4 || v->shape.rank != 4)
		return f8_infer_fail(diag, "q, k and v must have rank 4: (batch, heads, seq, head_dim)");
	const f8_dim *dq = q->shape.dims, *dk = k->shape.dims, *dv = v->shape.dims;
	f8_dim group;
	if (!f8_dim_equal(dq[0], dk[0]) || !f8_dim_equal(dk[0], dv[0]))
		return f8_infer_fail(diag, "q, k and v must have the same batch size");
	if (!f8_dim_equal(dk[1], dv[1]) || !f8_dim_div(dq[1], dk[1], &group))
		return f8_infer_fail(diag, "k and v must have the same number of heads, which must "
					"divide q's heads");
	if (!f8_dim_equal(dk[2], dv[2]))
		return f8_infer_fail(diag, "k and v must have the same sequence length");
	if (!f8_dim_equal(dq[3], dk[3]))
		return f8_infer_fail(diag, "q and k must have the same head dimension");
	if (f8_node_attr(node, "scale") && !(f8_node_attr_float(node, "scale", 0) > 0))
		return f8_infer_fail(diag, "attribute scale must be positive");
	if (mask) {
		f8_shape scores = {.rank = 4, .dims = {dq[0], dq[1], dq[2], dk[2]}}, broadcast;
		if (mask->dtype != F8_DTYPE_BOOL && mask->dtype != q->dtype)
			return f8_infer_fail(diag, "the mask must be bool or of q's dtype");
		if ((status = f8_infer_broadcast_shapes(graph, &mask->shape, &scores, &broadcast, diag)))
			return status;
		if (!f8_shape_equal(&broadcast, &scores))
			return f8_infer_fail(diag, "the mask must broadcast to (batch, heads, seq_q, seq_kv)");
	}
	outputs[0] = (f8_type){.dtype = q->dtype, .shape = {.rank = 4, .dims = {dq[0], dq[1], dq[2], dv[3]}}};
	if (node->n_outputs > 1)
		outputs[1] = (f8_type){.dtype = F8_DTYPE_F32, .shape = {.rank = 3, .dims = {dq[0], dq[1], dq[2]}}};
	return F8_OK;
}

/* RingAttention: as Attention (without a mask) over this rank's rows; over several ranks the
 * rows are two chunks of the load-balanced layout, so q and k, v have one sequence length, an
 * even one (a symbolic one is checked by the kernel). */
f8_status f8_infer_ring_attention(const f8_graph *graph, const f8_node *node, f8_type *outputs,
				  f8_diag *diag) {
	f8_status status = f8_infer_attention(graph, node, outputs, diag);
	int64_t ranks = f8_node_attr_int(node, "ranks", 1);
	if (status)
		return status;
	if (ranks < 1)
		return f8_infer_fail(diag, "attribute ranks must be at least 1");
	f8_dim q = infer_input(graph, node, 0)->shape.dims[2];
	f8_dim kv = infer_input(graph, node, 1)->shape.dims[2];
	if (ranks > 1 && (!f8_dim_equal(q, kv) || (f8_dim_is_const(q) && f8_dim_value(q) % 2)))
		return f8_infer_fail(diag, "over %lld ranks, q, k and v must hold one even number of "
				     "rows each (this rank's two chunks of the sequence)",
				     (long long)ranks);
	return F8_OK;
}

f8_status f8_infer_gelu(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			f8_diag *diag) {
	static const char *const approximations[] = {"none", "tanh", NULL};
	f8_status status = f8_infer_require_choice(node, "approximate", approximations, diag);
	return status ? status : f8_infer_unary_float(graph, node, outputs, diag);
}

/* SwiGLU: silu(gate) * up, from two inputs, or from one whose last dim is [gate | up]. */
f8_status f8_infer_swiglu(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			  f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0), *up = infer_input(graph, node, 1);
	f8_status status = f8_infer_require_float(x, "the input", diag);
	if (status)
		return status;
	if (x->shape.rank < 1)
		return f8_infer_fail(diag, "SwiGLU needs rank >= 1");
	outputs[0] = *x;
	if (up) {
		if ((status = f8_infer_require_same_dtype(x, "gate", up, "up", diag)))
			return status;
		if (!f8_shape_equal(&x->shape, &up->shape))
			return f8_infer_fail(diag, "gate and up must have the same shape");
		return F8_OK;
	}
	f8_dim *last = &outputs[0].shape.dims[x->shape.rank - 1];
	if (!f8_dim_div(*last, f8_dim_const(2), last))
		return f8_infer_fail(diag, "the last dimension must be even: it holds gate and up");
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
	f8_status status = f8_infer_require_float(x, "x", diag);
	if (!status)
		status = f8_infer_require_flag(node, "interleaved", diag);
	if (!status)
		status = f8_infer_require_float(cos, "cos", diag);
	if (status)
		return status;
	int rank = cos->shape.rank;
	if (!f8_type_equal(cos, sin) || rank < 2)
		return f8_infer_fail(diag, "cos and sin must have the same type and shape (seq, rotary_dim)");
	if (x->shape.rank < 2 || x->shape.rank < rank)
		return f8_infer_fail(diag, "x must have rank >= 2 and at least the rank of cos: "
					"(..., seq, head_dim)");
	// Leading dims broadcast against x's: 1, or x's own (per-batch tables from position ids).
	for (int i = 0; i < rank - 2; i++) {
		f8_dim dim = cos->shape.dims[i], against = x->shape.dims[x->shape.rank - rank + i];
		if (!f8_dim_equal(dim, f8_dim_const(1)) && !f8_dim_equal(dim, against))
			return f8_infer_fail(diag, "cos and sin's leading dims must be 1 or x's, before "
						"(seq, rotary_dim)");
	}
	f8_dim seq = x->shape.dims[x->shape.rank - 2], head_dim = x->shape.dims[x->shape.rank - 1];
	f8_dim rotary = cos->shape.dims[rank - 1], half;
	if (!f8_dim_equal(cos->shape.dims[rank - 2], seq))
		return f8_infer_fail(diag, "cos and sin must have one row per position of x's sequence");
	if (!f8_dim_div(rotary, f8_dim_const(2), &half))
		return f8_infer_fail(diag, "the rotary dimension must be even");
	if (!f8_dim_equal(rotary, head_dim) &&
	    !(f8_dim_is_const(rotary) && f8_dim_is_const(head_dim) && f8_dim_value(rotary) < f8_dim_value(head_dim)))
		return f8_infer_fail(diag, "the rotary dimension must not exceed the head dimension");
	outputs[0] = *x;
	return F8_OK;
}

/* Embedding: ids (any shape, integer), weight (vocab, hidden) -> (ids..., hidden). With a third
 * input, start ([1] integer), the weight is the rows [start, start + its rows) of a vocabulary
 * of `vocab` (required then) split across ranks: an id outside them gives a row of zeros (the
 * ranks' rows are summed after: Megatron-LM's VocabParallelEmbedding). */
f8_status f8_infer_embedding(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			     f8_diag *diag) {
	const f8_type *ids = infer_input(graph, node, 0), *w = infer_input(graph, node, 1);
	f8_status status = f8_infer_require_integer(ids, "the ids", diag);
	if (!status)
		status = f8_infer_require_float(w, "the weight", diag);
	if (!status && node->n_inputs > 2) {
		status = f8_infer_require_vocab_start(infer_input(graph, node, 2), diag);
		if (!status && !f8_node_attr(node, "vocab"))
			return f8_infer_fail(diag, "an Embedding of a vocabulary shard needs the "
					     "attribute vocab (the whole vocabulary's size)");
	}
	if (status)
		return status;
	if (w->shape.rank != 2)
		return f8_infer_fail(diag, "the weight must have rank 2: (vocab, hidden)");
	if (ids->shape.rank + 1 > F8_MAX_RANK)
		return f8_infer_fail(diag, "the result would have rank > %d", F8_MAX_RANK);
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
	f8_status status = f8_infer_require_float(logits, "the logits", diag);
	if (!status)
		status = f8_infer_require_choice(node, "score", scores, diag);
	if (!status)
		status = f8_infer_require_flag(node, "normalize", diag);
	if (status)
		return status;
	if (logits->shape.rank != 2)
		return f8_infer_fail(diag, "the logits must have rank 2: (tokens, experts)");
	f8_dim experts = logits->shape.dims[1];
	if (top_k < 1 || (f8_dim_is_const(experts) && top_k > f8_dim_value(experts)))
		return f8_infer_fail(diag, "attribute top_k is %lld; it must be in [1, experts]",
				  (long long)top_k);
	f8_shape shape = {.rank = 2, .dims = {logits->shape.dims[0], f8_dim_const(top_k)}};
	outputs[0] = (f8_type){.dtype = F8_DTYPE_F32, .shape = shape};
	outputs[1] = (f8_type){.dtype = F8_DTYPE_I64, .shape = shape};
	return F8_OK;
}

/* Checks indices (tokens, top_k) against x's tokens; the row count tokens * top_k into *rows. */
static f8_status expert_indices(const f8_graph *graph, const f8_type *indices, f8_dim tokens,
				f8_dim *rows, f8_diag *diag) {
	f8_status status = f8_infer_require_integer(indices, "the expert indices", diag);
	if (status)
		return status;
	if (indices->shape.rank != 2 || !f8_dim_equal(indices->shape.dims[0], tokens))
		return f8_infer_fail(diag, "the expert indices must have shape (tokens, top_k)");
	if (!f8_dim_mul(tokens, indices->shape.dims[1], rows)) {
		char s[64];
		return f8_infer_fail(diag, "%s tokens times top_k does not fit a dimension",
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
	f8_status status = f8_infer_require_float(x, "x", diag);
	if (status)
		return status;
	if (x->shape.rank != 2)
		return f8_infer_fail(diag, "x must have rank 2: (tokens, hidden)");
	if (experts < 1)
		return f8_infer_fail(diag, "attribute experts must be at least 1");
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
	f8_status status = f8_infer_require_float(x, "x", diag);
	if (!status)
		status = f8_infer_require_same_dtype(x, "x", w, "the weight", diag);
	if (!status)
		status = f8_infer_require_integer(counts, "the counts", diag);
	if (!status)
		status = f8_infer_require_flag(node, "transpose_weight", diag);
	if (status)
		return status;
	if (x->shape.rank != 2 || w->shape.rank != 3)
		return f8_infer_fail(diag, "GroupedLinear needs x (rows, K) and a weight (experts, N, K)");
	bool transposed = f8_node_attr_int(node, "transpose_weight", 0);
	if (!f8_dim_equal(x->shape.dims[1], w->shape.dims[transposed ? 1 : 2]))
		return f8_infer_fail(diag, "x and the weight disagree on K");
	if (counts->shape.rank != 1 || !f8_dim_equal(counts->shape.dims[0], w->shape.dims[0]))
		return f8_infer_fail(diag, "the counts must have shape (experts), one per weight");
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
	f8_status status = f8_infer_require_float(y, "y", diag);
	if (!status)
		status = f8_infer_require_float(probs, "the probabilities", diag);
	if (status)
		return status;
	if (y->shape.rank != 2 || probs->shape.rank != 2)
		return f8_infer_fail(diag, "MoECombine needs y (tokens * top_k, hidden) and probs "
					"(tokens, top_k)");
	f8_dim tokens = probs->shape.dims[0], rows;
	if ((status = expert_indices(graph, indices, tokens, &rows, diag)))
		return status;
	if (!f8_shape_equal(&probs->shape, &indices->shape) || !f8_dim_equal(rows, y->shape.dims[0]))
		return f8_infer_fail(diag, "y must have tokens * top_k rows, and probs the shape of the "
					"indices");
	outputs[0] = (f8_type){.dtype = y->dtype, .shape = {.rank = 2, .dims = {tokens, y->shape.dims[1]}}};
	return F8_OK;
}

/* The logits' rows, their shape without the last (vocabulary) dim, into *rows: the labels'. */
static f8_status logit_rows(const f8_type *logits, const f8_type *labels, f8_shape *rows,
			    f8_diag *diag) {
	*rows = logits->shape;
	if (rows->rank < 1)
		return f8_infer_fail(diag, "the logits must have rank >= 1: (..., vocab)");
	rows->rank--;
	if (!f8_shape_equal(rows, &labels->shape))
		return f8_infer_fail(diag, "the labels must have the logits' shape without the vocab dim");
	return F8_OK;
}

/* CrossEntropy: logits (..., vocab), labels (...) integer -> the loss (f32; a scalar unless
 * reduction is none), and when asked the log-sum-exp per row (f32, (...)) for the backward. */
f8_status f8_infer_cross_entropy(const f8_graph *graph, const f8_node *node, f8_type *outputs,
				 f8_diag *diag) {
	static const char *const reductions[] = {"mean", "sum", "none", NULL};
	const f8_type *logits = infer_input(graph, node, 0), *labels = infer_input(graph, node, 1);
	f8_status status = f8_infer_require_float(logits, "the logits", diag);
	if (!status)
		status = f8_infer_require_integer(labels, "the labels", diag);
	if (!status)
		status = f8_infer_require_choice(node, "reduction", reductions, diag);
	if (status)
		return status;
	f8_shape rows;
	if ((status = logit_rows(logits, labels, &rows, diag)))
		return status;
	bool keep_rows = strcmp(f8_node_attr_string(node, "reduction", "mean"), "none") == 0;
	outputs[0] = keep_rows ? (f8_type){.dtype = F8_DTYPE_F32, .shape = rows} : infer_scalar(F8_DTYPE_F32);
	if (node->n_outputs > 1)
		outputs[1] = (f8_type){.dtype = F8_DTYPE_F32, .shape = rows};
	return F8_OK;
}

/* CrossEntropyShard: logits (..., shard) of the vocabulary rows [start, start + shard) of
 * `vocab`, labels (...) integer, max (...) float (every rank's row maximum, the same on each),
 * start [1] integer -> sum_exp (...) f32, the sum of exp(logit - max) over the shard, and target
 * (...) f32, the label's logit where the shard holds the label, 0 elsewhere. */
f8_status f8_infer_cross_entropy_shard(const f8_graph *graph, const f8_node *node,
				       f8_type *outputs, f8_diag *diag) {
	const f8_type *logits = infer_input(graph, node, 0), *labels = infer_input(graph, node, 1);
	const f8_type *max = infer_input(graph, node, 2);
	f8_status status = f8_infer_require_float(logits, "the logits", diag);
	if (!status)
		status = f8_infer_require_integer(labels, "the labels", diag);
	if (!status)
		status = f8_infer_require_vocab_start(infer_input(graph, node, 3), diag);
	if (status)
		return status;
	f8_shape rows;
	if ((status = logit_rows(logits, labels, &rows, diag)))
		return status;
	if (!f8_dtype_is_float(max->dtype) || !f8_shape_equal(&rows, &max->shape))
		return f8_infer_fail(diag, "the row maxima must be floats of the labels' shape");
	outputs[0] = outputs[1] = (f8_type){.dtype = F8_DTYPE_F32, .shape = rows};
	return F8_OK;
}

/* CrossEntropyMerge: sum_exp, target (f32), max (float; the rows' shape, summed and reduced
 * over the ranks), labels -> the loss as CrossEntropy's (per row max + log(sum_exp) - target, rows
 * labelled ignore_index left out), and when asked that log-sum-exp per row. */
f8_status f8_infer_cross_entropy_merge(const f8_graph *graph, const f8_node *node,
				       f8_type *outputs, f8_diag *diag) {
	static const char *const reductions[] = {"mean", "sum", "none", NULL};
	const f8_type *labels = infer_input(graph, node, 3);
	f8_status status = f8_infer_require_integer(labels, "the labels", diag);
	if (!status)
		status = f8_infer_require_choice(node, "reduction", reductions, diag);
	for (uint32_t i = 0; !status && i < 3; i++) { // the maxima (2) may be any float
		const f8_type *row = infer_input(graph, node, i);
		if (!(i == 2 ? f8_dtype_is_float(row->dtype) : row->dtype == F8_DTYPE_F32) ||
		    !f8_shape_equal(&row->shape, &labels->shape))
			return f8_infer_fail(diag, "the row sums and targets must be f32, and the "
					     "maxima floats, of the labels' shape");
	}
	if (status)
		return status;
	bool keep_rows = strcmp(f8_node_attr_string(node, "reduction", "mean"), "none") == 0;
	outputs[0] = keep_rows ? (f8_type){.dtype = F8_DTYPE_F32, .shape = labels->shape}
			       : infer_scalar(F8_DTYPE_F32);
	if (node->n_outputs > 1)
		outputs[1] = (f8_type){.dtype = F8_DTYPE_F32, .shape = labels->shape};
	return F8_OK;
}

/* FP8 ops. Scaled tensors are seen as matrices: (rows, cols) = (product of leading dims, last
 * dim). Block scales have shape (ceil(rows / block_rows), ceil(cols / block_cols)); a block
 * size of 0 spans the whole axis, so [1, 0] is one scale per row (rowwise). */

/* The number of blocks of `block` along `dim`: a ceiling for constant dims; a symbolic dim
 * must be divisible. A block of 0 is the whole axis (rowwise scaling is a block of [1, 0]). */
static bool blocks_along(f8_dim dim, int64_t block, f8_dim *out) {
	if (block == 0) {
		*out = f8_dim_const(1);
		return true;
	}
	if (f8_dim_is_const(dim)) {
		*out = f8_dim_const((f8_dim_value(dim) + block - 1) / block);
		return true;
	}
	return f8_dim_div(dim, f8_dim_const(block), out);
}

/* x as a (rows, cols) matrix: rows the product of the leading dims. */
static f8_status matrix_dims(const f8_type *x, f8_dim *rows, f8_dim *cols, f8_diag *diag) {
	f8_shape leading = x->shape;
	leading.rank = x->shape.rank ? x->shape.rank - 1 : 0;
	*cols = x->shape.rank ? x->shape.dims[x->shape.rank - 1] : f8_dim_const(1);
	if (!f8_shape_numel(&leading, rows))
		return f8_infer_fail(diag, "the row count overflows");
	return F8_OK;
}

/* The scale grid of a (rows, cols) matrix under `block` ([rows, cols] INTS), or a scalar when
 * block is NULL. `what` names the operand in messages. */
static f8_status scale_grid(const f8_graph *graph, const f8_type *x, f8_dim rows, f8_dim cols,
			    const f8_attr *block, const char *what, f8_shape *out, f8_diag *diag) {
	*out = (f8_shape){0};
	if (!block)
		return F8_OK;
	if (block->ints.n != 2 || block->ints.items[0] < 0 || block->ints.items[1] < 0)
		return f8_infer_fail(diag, "the block of %s must be two sizes [rows, cols], each "
				  "positive or 0 for the whole axis", what);
	out->rank = 2;
	if (!blocks_along(rows, block->ints.items[0], &out->dims[0]) ||
	    !blocks_along(cols, block->ints.items[1], &out->dims[1])) {
		char s[160];
		return f8_infer_fail(diag, "%s %s does not divide into blocks of %lldx%lld", what,
				  f8_type_format(graph, x, s, sizeof s),
				  (long long)block->ints.items[0], (long long)block->ints.items[1]);
	}
	return F8_OK;
}

/* The scale shape for `x` under the node's attribute `block`, or a scalar. */
static f8_status scale_shape(const f8_graph *graph, const f8_node *node, const f8_type *x,
			     f8_shape *out, f8_diag *diag) {
	const f8_attr *block = f8_node_attr(node, "block");
	f8_dim rows, cols;
	if (block && x->shape.rank < 1)
		return f8_infer_fail(diag, "block scaling needs a tensor of rank >= 1");
	f8_status status = matrix_dims(x, &rows, &cols, diag);
	if (!status)
		status = scale_grid(graph, x, rows, cols, block, "the input", out, diag);
	return status;
}

static f8_status require_fp8_format(const f8_node *node, f8_diag *diag) {
	f8_dtype to = f8_node_attr_dtype(node, "to", F8_DTYPE_UNDEFINED);
	if (!f8_dtype_is_fp8(to))
		return f8_infer_fail(diag, "attribute to must be e4m3 or e5m2, not %s", f8_dtype_name(to));
	return f8_infer_require_flag(node, "saturate", diag);
}

/*
 * A grouped cast's groups (grouped=1): the E slices of an (E, rows, cols) input (an expert's
 * weight each), or the row segments of a (rows, cols) input whose lengths are the i64[E]
 * counts input (the tokens MoEDispatch sorted to each expert). Each group has its own
 * per-tensor scale: the table entries slot .. slot + E - 1, or found from its amax. *groups is
 * E.
 */
static f8_status check_groups(const f8_graph *graph, const f8_node *node, f8_dim *groups,
			      f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0);
	int counts_at = f8_cast_counts_input(node);
	if (f8_node_attr(node, "block"))
		return f8_infer_fail(diag, "a grouped cast scales per group: it takes no block");
	if (x->shape.rank == 3 && counts_at < 0) {
		*groups = x->shape.dims[0];
		return F8_OK;
	}
	if (x->shape.rank != 2 || counts_at < 0)
		return f8_infer_fail(diag, "a grouped cast needs (groups, rows, cols), or (rows, cols) "
					"and the rows per group (the last input)");
	const f8_type *counts = infer_input(graph, node, (uint32_t)counts_at);
	f8_status status = f8_infer_require_integer(counts, "the counts", diag);
	if (status)
		return status;
	if (counts->shape.rank != 1)
		return f8_infer_fail(diag, "the counts must have shape (groups)");
	*groups = counts->shape.dims[0];
	return F8_OK;
}

/*
 * What Quantize and CastTranspose share: the attributes, the input, and the scale input
 * (f8_cast_scale_input). The scale is, with attribute `slot`, a scaling table f32[n] whose
 * entry `slot` is the per-tensor scale (delayed scaling, DESIGN.md); without it, an f32 of the
 * block grid's shape (a scalar without block). *scales is the shape of x's scale_inv: f32[E]
 * for a grouped cast (check_groups), whose table entries are slot .. slot + E - 1.
 */
static f8_status check_cast(const f8_graph *graph, const f8_node *node, f8_shape *scales,
			    f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0);
	int scale_at = f8_cast_scale_input(node);
	const f8_type *scale = scale_at < 0 ? NULL : infer_input(graph, node, (uint32_t)scale_at);
	f8_dtype scale_dtype = f8_node_attr_dtype(node, "scale_dtype", F8_DTYPE_F32);
	const f8_attr *block = f8_node_attr(node, "block");
	int64_t slot = f8_node_attr_int(node, "slot", -1);
	bool grouped = f8_node_attr_int(node, "grouped", 0);
	f8_dim groups = f8_dim_const(1);
	f8_status status = require_fp8_format(node, diag);
	if (!status)
		status = f8_infer_require_flag(node, "grouped", diag);
	if (!status)
		status = f8_infer_require_float(x, "the input", diag);
	if (!status)
		status = scale_shape(graph, node, x, scales, diag);
	if (!status && grouped)
		status = check_groups(graph, node, &groups, diag);
	if (status)
		return status;
	if (grouped)
		*scales = (f8_shape){.rank = 1, .dims = {groups}};
	if (!grouped && node->n_inputs > 2)
		return f8_infer_fail(diag, "a cast takes x and a scale; a third input (the rows per "
					"group) is for grouped=1");
	if (grouped && f8_node_attr(node, "slot") && !scale)
		return f8_infer_fail(diag, "a grouped cast with attribute slot needs the scale table");
	if (f8_dtype_is_fp8(x->dtype))
		return f8_infer_fail(diag, "the input is already FP8");
	if (f8_node_attr_int(node, "margin", 0) < 0)
		return f8_infer_fail(diag, "attribute margin must not be negative");
	if (scale_dtype != F8_DTYPE_F32 && scale_dtype != F8_DTYPE_E8M0)
		return f8_infer_fail(diag, "attribute scale_dtype must be f32 or e8m0");
	if (scale_dtype == F8_DTYPE_E8M0 &&
	    !(block && block->ints.n == 2 && block->ints.items[0] == 1 && block->ints.items[1] == 32))
		return f8_infer_fail(diag, "e8m0 scales are for MX blocks: block must be [1, 32]");
	if (f8_node_attr(node, "slot")) {
		int64_t last = slot + (f8_dim_is_const(groups) ? f8_dim_value(groups) - 1 : 0);
		if (!scale || block || slot < 0)
			return f8_infer_fail(diag, "attribute slot (>= 0) picks a per-tensor scale from a "
						"scale table input: it needs the table and no block");
		if (scale->dtype != F8_DTYPE_F32 || scale->shape.rank != 1 ||
		    (f8_dim_is_const(scale->shape.dims[0]) &&
		     last >= f8_dim_value(scale->shape.dims[0])))
			return f8_infer_fail(diag, "the scale table must be f32[n] with n > slot %lld",
					  (long long)last);
	} else if (scale && (scale->dtype != F8_DTYPE_F32 || !f8_shape_equal(&scale->shape, scales))) {
		return f8_infer_fail(diag, "the scale must be f32 with one entry per block (a scalar "
					"without block)");
	}
	return F8_OK;
}

/*
 * Quantize: x (high precision) -> FP8 codes, then scale_inv (f32, or e8m0 for MX with block
 * [1, 32], shaped by `block`), then the amax of x (f32 scalar, unscaled: what delayed scaling
 * records). With a scale input, scale_inv and the amax are optional outputs (scale_inv is then
 * 1 / scale); without, Quantize finds the scale itself (current, block, MX scaling) and outputs
 * scale_inv. Grouped (check_groups), scale_inv and the amax are f32[E], one per group.
 */
f8_status f8_infer_quantize(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			    f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0);
	bool given = f8_cast_scale_input(node) >= 0;
	f8_shape scales;
	f8_status status = check_cast(graph, node, &scales, diag);
	if (status)
		return status;
	if (!given && node->n_outputs < 2)
		return f8_infer_fail(diag, "Quantize without a scale input finds the scale: it also "
					"outputs scale_inv");
	f8_dtype scale_dtype = f8_node_attr_dtype(node, "scale_dtype", F8_DTYPE_F32);
	outputs[0] = (f8_type){.dtype = f8_node_attr_dtype(node, "to", F8_DTYPE_UNDEFINED),
			       .shape = x->shape};
	if (node->n_outputs > 1)
		outputs[1] = (f8_type){.dtype = scale_dtype, .shape = scales};
	if (node->n_outputs > 2) // per group when grouped, as the scales
		outputs[2] = f8_node_attr_int(node, "grouped", 0)
				     ? (f8_type){.dtype = F8_DTYPE_F32, .shape = scales}
				     : infer_scalar(F8_DTYPE_F32);
	return F8_OK;
}

/* Dequantize: FP8 codes, scale_inv (f32 or e8m0, shaped by `block`) -> `to` (f32, bf16, f16). */
f8_status f8_infer_dequantize(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			      f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0), *scale_inv = infer_input(graph, node, 1);
	f8_dtype to = f8_node_attr_dtype(node, "to", F8_DTYPE_UNDEFINED);
	f8_shape scales;
	if (!f8_dtype_is_fp8(x->dtype))
		return f8_infer_fail(diag, "the input must be e4m3 or e5m2, not %s", f8_dtype_name(x->dtype));
	if (to != F8_DTYPE_F32 && to != F8_DTYPE_BF16 && to != F8_DTYPE_F16)
		return f8_infer_fail(diag, "attribute to must be f32, bf16 or f16");
	f8_status status = scale_shape(graph, node, x, &scales, diag);
	if (status)
		return status;
	if ((scale_inv->dtype != F8_DTYPE_F32 && scale_inv->dtype != F8_DTYPE_E8M0) ||
	    !f8_shape_equal(&scale_inv->shape, &scales))
		return f8_infer_fail(diag, "scale_inv must be f32 or e8m0 with one entry per block (a "
					"scalar without block)");
	outputs[0] = (f8_type){.dtype = to, .shape = x->shape};
	return F8_OK;
}

f8_status f8_infer_amax(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			f8_diag *diag) {
	f8_status status = f8_infer_require_float(infer_input(graph, node, 0), "the input", diag);
	outputs[0] = infer_scalar(F8_DTYPE_F32);
	return status;
}

/* ScaleFromAmax: f32 amaxes -> their scales, f32 of the same shape, for an FP8 format. */
f8_status f8_infer_scale_from_amax(const f8_graph *graph, const f8_node *node, f8_type *outputs,
				   f8_diag *diag) {
	const f8_type *amax = infer_input(graph, node, 0);
	if (amax->dtype != F8_DTYPE_F32)
		return f8_infer_fail(diag, "the amax must be f32");
	if (!f8_dtype_is_fp8(f8_node_attr_dtype(node, "format", F8_DTYPE_UNDEFINED)))
		return f8_infer_fail(diag, "attribute format must be an FP8 format");
	outputs[0] = *amax;
	return F8_OK;
}

/*
 * CastTranspose: Quantize's inputs and attributes; in one read of x (rows, cols), the FP8 copy
 * (x's shape), the transposed copy (cols, rows) for the TN-only GEMMs, the scale_inv of each,
 * and the amax of x. The transposed copy is x's transpose quantized under the same recipe:
 * with a per-tensor scale it is the copy's codes transposed (one scale_inv, written twice);
 * with blocks, x^T is cut into blocks of the same shape, so 1x128 blocks run along the other
 * axis (scales of their own) and 128x128 blocks are the same blocks, transposed. Grouped, the
 * transposed copy of (E, rows, cols) is (E, cols, rows), each group's matrix transposed; of
 * (rows, cols) with counts it is (cols, rows), each group's columns its rows' segment; both
 * copies share the group's scale.
 */
f8_status f8_infer_cast_transpose(const f8_graph *graph, const f8_node *node, f8_type *outputs,
				  f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0);
	f8_shape scales, scales_t;
	f8_dim rows, cols;
	f8_status status = check_cast(graph, node, &scales, diag);
	if (!status)
		status = matrix_dims(x, &rows, &cols, diag);
	if (status)
		return status;
	if (x->shape.rank < 2)
		return f8_infer_fail(diag, "CastTranspose needs rank >= 2");
	bool grouped = f8_node_attr_int(node, "grouped", 0);
	f8_type transposed = {.dtype = x->dtype, .shape = {.rank = 2, .dims = {cols, rows}}};
	if (grouped && x->shape.rank == 3) // each group's matrix transposed
		transposed.shape = (f8_shape){.rank = 3, .dims = {x->shape.dims[0], cols,
								  x->shape.dims[1]}};
	if (grouped)
		scales_t = scales;
	else
		status = scale_grid(graph, &transposed, cols, rows, f8_node_attr(node, "block"),
				    "the transposed input", &scales_t, diag);
	if (status)
		return status;
	f8_dtype to = f8_node_attr_dtype(node, "to", F8_DTYPE_UNDEFINED);
	f8_dtype scale_dtype = f8_node_attr_dtype(node, "scale_dtype", F8_DTYPE_F32);
	outputs[0] = (f8_type){.dtype = to, .shape = x->shape};
	outputs[1] = (f8_type){.dtype = to, .shape = transposed.shape};
	outputs[2] = (f8_type){.dtype = scale_dtype, .shape = scales};
	outputs[3] = (f8_type){.dtype = scale_dtype, .shape = scales_t};
	outputs[4] = grouped ? (f8_type){.dtype = F8_DTYPE_F32, .shape = scales}
			     : infer_scalar(F8_DTYPE_F32);
	return F8_OK;
}

/*
 * ScalingUpdate(scale f32[n], amax_history f32[len, n], nonfinite i64[], amax_0 .. amax_n-1)
 *   -> (scale', amax_history', nonfinite'): delayed scaling's step for one table of n slots
 * (TransformerEngine's amax-and-scale update). An amax input is a scalar, one slot, or an
 * f32[k] of a grouped cast, k consecutive slots; the slots follow the inputs in order. For each
 * slot i with a finite amax_i, the history rolls down one row and row 0 takes amax_i; the amax
 * used is the largest of column i (algo "max") or row 0 ("most_recent"); scale'_i =
 * f8_scale_from_amax(format, that amax, margin, scale_i), so an amax of 0 keeps the scale. A
 * non-finite amax_i leaves slot i's history and scale as they were and adds 1 to nonfinite.
 */
f8_status f8_infer_scaling_update(const f8_graph *graph, const f8_node *node, f8_type *outputs,
				  f8_diag *diag) {
	static const char *const algos[] = {"max", "most_recent", NULL};
	const f8_type *scale = infer_input(graph, node, 0), *history = infer_input(graph, node, 1);
	const f8_type *nonfinite = infer_input(graph, node, 2);
	f8_status status = f8_infer_require_choice(node, "algo", algos, diag);
	if (status)
		return status;
	if (!f8_dtype_is_fp8(f8_node_attr_dtype(node, "format", F8_DTYPE_UNDEFINED)))
		return f8_infer_fail(diag, "attribute format must be e4m3 or e5m2");
	if (f8_node_attr_int(node, "margin", 0) < 0)
		return f8_infer_fail(diag, "attribute margin must not be negative");
	int64_t n = 0; // the slots: one per scalar amax, k per f32[k] (a grouped cast's)
	for (uint32_t i = 3; i < node->n_inputs; i++) {
		const f8_type *amax = infer_input(graph, node, i);
		bool vector = amax && amax->shape.rank == 1 && f8_dim_is_const(amax->shape.dims[0]);
		if (!amax || amax->dtype != F8_DTYPE_F32 || !(amax->shape.rank == 0 || vector))
			return f8_infer_fail(diag, "input %u must be an f32 amax: a scalar, or f32[k] "
					  "for k slots", i);
		n += vector ? f8_dim_value(amax->shape.dims[0]) : 1;
	}
	if (!scale || !history || !nonfinite || scale->dtype != F8_DTYPE_F32 ||
	    scale->shape.rank != 1 || !f8_dim_equal(scale->shape.dims[0], f8_dim_const(n)))
		return f8_infer_fail(diag, "the scale table must be f32[%lld], one entry per amax input",
				  (long long)n);
	if (history->dtype != F8_DTYPE_F32 || history->shape.rank != 2 ||
	    !f8_dim_is_const(history->shape.dims[0]) || f8_dim_value(history->shape.dims[0]) < 1 ||
	    !f8_dim_equal(history->shape.dims[1], f8_dim_const(n)))
		return f8_infer_fail(diag, "the amax history must be f32[length, %lld], length >= 1",
				  (long long)n);
	if (nonfinite->dtype != F8_DTYPE_I64 || nonfinite->shape.rank != 0)
		return f8_infer_fail(diag, "the non-finite count must be an i64 scalar");
	outputs[0] = *scale;
	outputs[1] = *history;
	outputs[2] = *nonfinite;
	return F8_OK;
}

/* What FP8Gemm and FP8GroupedGemm share: the gemm attribute, both operands FP8 (not E5M2 x
 * E5M2, which the hardware has no GEMM for), and `to` f32, bf16 or f16. */
static f8_status check_fp8_gemm(const f8_node *node, const f8_type *a, const f8_type *b,
				f8_diag *diag) {
	static const char *const gemms[] = {"fwd", "dgrad", "wgrad", NULL};
	f8_dtype to = f8_node_attr_dtype(node, "to", F8_DTYPE_UNDEFINED);
	f8_status status = f8_infer_require_choice(node, "gemm", gemms, diag);
	if (status)
		return status;
	if (!f8_dtype_is_fp8(a->dtype) || !f8_dtype_is_fp8(b->dtype))
		return f8_infer_fail(diag, "both operands must be FP8, not %s and %s",
				  f8_dtype_name(a->dtype), f8_dtype_name(b->dtype));
	if (a->dtype == F8_DTYPE_E5M2 && b->dtype == F8_DTYPE_E5M2)
		return f8_infer_fail(diag, "E5M2 x E5M2 has no FP8 GEMM on the hardware");
	if (to != F8_DTYPE_F32 && to != F8_DTYPE_BF16 && to != F8_DTYPE_F16)
		return f8_infer_fail(diag, "attribute to must be f32, bf16 or f16");
	return F8_OK;
}

/* An FP8Gemm operand's scale_inv: a scalar without `block_attr`, else the grid of (rows, K). */
static f8_status check_gemm_scale(const f8_graph *graph, const f8_node *node, uint32_t input,
				  const char *block_attr, f8_dim rows, f8_dim k, const char *what,
				  f8_diag *diag) {
	const f8_type *operand = infer_input(graph, node, input - 2);
	const f8_type *scale_inv = infer_input(graph, node, input);
	f8_shape grid;
	f8_status status = scale_grid(graph, operand, rows, k, f8_node_attr(node, block_attr),
				      what, &grid, diag);
	if (status)
		return status;
	if (!scale_inv || (scale_inv->dtype != F8_DTYPE_F32 && scale_inv->dtype != F8_DTYPE_E8M0) ||
	    !f8_shape_equal(&scale_inv->shape, &grid))
		return f8_infer_fail(diag, "the scale_inv of %s must be f32 (or e8m0) with one entry per "
					"block of %s (a scalar without it)", what, block_attr);
	return F8_OK;
}

/*
 * FP8Gemm(a, b, a_scale_inv, b_scale_inv [, bias]) {to, gemm, a_block, b_block}: the TN GEMM
 * of Hopper's FP8 tensor cores, y = (a * a_scale_inv) (b * b_scale_inv)^T + bias, with a
 * (..., K) and b (N, K) FP8 codes, both K-major, and y (..., N) of dtype `to`. Each scale_inv
 * is a scalar, or with a_block / b_block the grid of that operand's blocks (rowwise is a block
 * of [1, K]; e8m0 grids are MX). `gemm` says which GEMM of a layer this is (fwd, dgrad, wgrad),
 * for the audit. E5M2 x E5M2 does not exist on the hardware and is refused.
 */
f8_status f8_infer_fp8_gemm(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			    f8_diag *diag) {
	const f8_type *a = infer_input(graph, node, 0), *b = infer_input(graph, node, 1);
	const f8_type *bias = infer_input(graph, node, 4);
	f8_dtype to = f8_node_attr_dtype(node, "to", F8_DTYPE_UNDEFINED);
	f8_status status = check_fp8_gemm(node, a, b, diag);
	if (status)
		return status;
	if (a->shape.rank < 2 || b->shape.rank != 2)
		return f8_infer_fail(diag, "a must be (..., K) and b (N, K)");
	f8_dim m, k, n = b->shape.dims[0];
	if ((status = matrix_dims(a, &m, &k, diag)))
		return status;
	if (!f8_dim_equal(k, b->shape.dims[1])) {
		char sa[160], sb[160];
		return f8_infer_fail(diag, "the K of a %s and b %s differ", f8_type_format(graph, a, sa, sizeof sa),
				  f8_type_format(graph, b, sb, sizeof sb));
	}
	status = check_gemm_scale(graph, node, 2, "a_block", m, k, "a", diag);
	if (!status)
		status = check_gemm_scale(graph, node, 3, "b_block", n, k, "b", diag);
	if (status)
		return status;
	if (bias && (bias->dtype != to || bias->shape.rank != 1 || !f8_dim_equal(bias->shape.dims[0], n)))
		return f8_infer_fail(diag, "the bias must be %s[N]", f8_dtype_name(to));
	outputs[0] = (f8_type){.dtype = to, .shape = a->shape};
	outputs[0].shape.dims[a->shape.rank - 1] = n;
	return F8_OK;
}

/*
 * FP8GroupedGemm(a, b, a_scale_inv f32[E], b_scale_inv f32[E], counts i64[E]) {to, gemm}: one
 * FP8Gemm per expert e, over its rows [sum(counts[:e]), sum(counts[:e+1])), each operand's
 * copy scaled per expert (a grouped cast's scale_inv). fwd and dgrad: a (rows, K) and b
 * (E, N, K) -> (rows, N), a's rows of expert e times b[e]^T. wgrad: a (N, rows) and b
 * (K, rows), the transposed copies of dy and x -> (E, N, K), expert e's columns of a times
 * those of b^T.
 */
f8_status f8_infer_fp8_grouped_gemm(const f8_graph *graph, const f8_node *node,
				    f8_type *outputs, f8_diag *diag) {
	const f8_type *a = infer_input(graph, node, 0), *b = infer_input(graph, node, 1);
	const f8_type *counts = infer_input(graph, node, 4);
	f8_dtype to = f8_node_attr_dtype(node, "to", F8_DTYPE_UNDEFINED);
	f8_status status = check_fp8_gemm(node, a, b, diag);
	if (!status)
		status = f8_infer_require_integer(counts, "the counts", diag);
	if (status)
		return status;
	if (counts->shape.rank != 1)
		return f8_infer_fail(diag, "the counts must have shape (experts)");
	f8_dim experts = counts->shape.dims[0];
	for (uint32_t i = 2; i < 4; i++) {
		const f8_type *scale_inv = infer_input(graph, node, i);
		if (scale_inv->dtype != F8_DTYPE_F32 || scale_inv->shape.rank != 1 ||
		    !f8_dim_equal(scale_inv->shape.dims[0], experts))
			return f8_infer_fail(diag, "the scale_inv of %s must be f32[experts], one per "
					  "expert", i == 2 ? "a" : "b");
	}
	bool wgrad = strcmp(f8_node_attr_string(node, "gemm", ""), "wgrad") == 0;
	if (wgrad) {
		if (a->shape.rank != 2 || b->shape.rank != 2 ||
		    !f8_dim_equal(a->shape.dims[1], b->shape.dims[1]))
			return f8_infer_fail(diag, "a wgrad's a (N, rows) and b (K, rows) must share "
						"the rows");
		outputs[0] = (f8_type){.dtype = to, .shape = {.rank = 3, .dims = {experts,
							a->shape.dims[0], b->shape.dims[0]}}};
		return F8_OK;
	}
	if (a->shape.rank != 2 || b->shape.rank != 3 || !f8_dim_equal(b->shape.dims[0], experts))
		return f8_infer_fail(diag, "a must be (rows, K) and b (experts, N, K)");
	if (!f8_dim_equal(a->shape.dims[1], b->shape.dims[2]))
		return f8_infer_fail(diag, "the K of a and b differ");
	outputs[0] = (f8_type){.dtype = to,
			       .shape = {.rank = 2, .dims = {a->shape.dims[0], b->shape.dims[1]}}};
	return F8_OK;
}

/* Collectives. `group` names the mesh axis whose ranks take part. */

static f8_status require_group(const f8_node *node, f8_diag *diag) {
	const char *group = f8_node_attr_string(node, "group", "");
	uint32_t axes;
	if (!f8_mesh_group_from_name(group, strlen(group), &axes))
		return f8_infer_fail(diag, "attribute group \"%s\" is not a group of mesh axes (tp, cp, "
				  "ep, dp, pp, several joined by '+' in that order: \"tp+dp\")", group);
	return F8_OK;
}

/* AllReduce(x_0, .., x_n-1) -> (y_0, .., y_n-1): each x_i reduced over the group, the n in one
 * collective (the amaxes of a phase, packed). */
f8_status f8_infer_all_reduce(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			      f8_diag *diag) {
	static const char *const reductions[] = {"sum", "max", NULL};
	f8_status status = require_group(node, diag);
	if (!status)
		status = f8_infer_require_choice(node, "op", reductions, diag);
	if (!status && node->n_outputs != node->n_inputs)
		return f8_infer_fail(diag, "AllReduce makes one output per input (%u inputs, %u "
				  "outputs)", node->n_inputs, node->n_outputs);
	for (uint32_t i = 0; !status && i < node->n_inputs; i++)
		outputs[i] = *infer_input(graph, node, i);
	return status;
}

/* AllGather and ReduceScatter over `ranks` ranks along `axis`: an output per input (LocalShard:
 * one). */
static f8_status gather_scatter(const f8_graph *graph, const f8_node *node, bool gather,
				f8_type *outputs, f8_diag *diag) {
	int64_t ranks = f8_node_attr_int(node, "ranks", 0);
	f8_status status = require_group(node, diag);
	if (status)
		return status;
	if (ranks < 1)
		return f8_infer_fail(diag, "attribute ranks must be positive");
	if (node->n_outputs != node->n_inputs)
		return f8_infer_fail(diag, "%s makes one output per input (%u inputs, %u outputs)",
				  f8_op_name(node->op), node->n_inputs, node->n_outputs);
	for (uint32_t i = 0; i < node->n_inputs; i++) {
		const f8_type *x = infer_input(graph, node, i);
		int axis;
		if ((status = f8_infer_axis(f8_node_attr_int(node, "axis", 0), x->shape.rank, false,
					    "axis", &axis, diag)))
			return status;
		outputs[i] = *x;
		f8_dim *dim = &outputs[i].shape.dims[axis];
		bool ok = gather ? f8_dim_mul(*dim, f8_dim_const(ranks), dim)
				 : f8_dim_div(*dim, f8_dim_const(ranks), dim);
		if (!ok)
			return f8_infer_fail(diag, "dimension %d of input %u does not %s over %lld "
					  "ranks", axis, i, gather ? "gather" : "divide evenly",
					  (long long)ranks);
	}
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

/* LocalShard(x) {group, axis, ranks}: this rank's 1/ranks of x along `axis`, the part whose
 * index is its place in the group (the distributed optimizer's share of a replicated
 * parameter). */
f8_status f8_infer_local_shard(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			       f8_diag *diag) {
	return gather_scatter(graph, node, false, outputs, diag);
}

/* The counts of an all-to-all over `ranks`: counts (E) integer, E a multiple of ranks, and
 * when given recv_counts (ranks, E / ranks) integer; *local E / ranks. */
static f8_status all_to_all_counts(const f8_type *counts, const f8_type *recv_counts,
				   int64_t ranks, f8_dim *local, f8_diag *diag) {
	f8_status status = f8_infer_require_integer(counts, "the counts", diag);
	if (!status && recv_counts)
		status = f8_infer_require_integer(recv_counts, "the received counts", diag);
	if (status)
		return status;
	if (ranks < 1)
		return f8_infer_fail(diag, "attribute ranks must be positive");
	if (counts->shape.rank != 1 || !f8_dim_is_const(counts->shape.dims[0]) ||
	    f8_dim_value(counts->shape.dims[0]) % ranks)
		return f8_infer_fail(diag, "the counts must have shape (experts), the experts a "
				  "multiple of the %lld ranks", (long long)ranks);
	*local = f8_dim_const(f8_dim_value(counts->shape.dims[0]) / ranks);
	if (recv_counts && (recv_counts->shape.rank != 2 ||
			    !f8_dim_equal(recv_counts->shape.dims[0], f8_dim_const(ranks)) ||
			    !f8_dim_equal(recv_counts->shape.dims[1], *local)))
		return f8_infer_fail(diag, "the received counts must have shape (ranks, experts / "
				  "ranks)");
	return F8_OK;
}

f8_status f8_infer_all_to_all_dispatch(const f8_graph *graph, const f8_node *node,
				       f8_type *outputs, f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0), *counts = infer_input(graph, node, 1);
	const f8_type *recv_counts = node->n_inputs > 2 && node->inputs[2] != F8_NONE
					     ? infer_input(graph, node, 2) : NULL;
	int64_t ranks = f8_node_attr_int(node, "ranks", 0);
	f8_dim local;
	f8_status status = require_group(node, diag);
	if (!status)
		status = f8_infer_require_float(x, "x", diag);
	if (!status)
		status = all_to_all_counts(counts, recv_counts, ranks, &local, diag);
	if (status)
		return status;
	if (x->shape.rank != 2)
		return f8_infer_fail(diag, "x must have rank 2: (rows, hidden)");
	outputs[0] = *x;
	if (!f8_dim_mul(x->shape.dims[0], f8_dim_const(ranks), &outputs[0].shape.dims[0]))
		return f8_infer_fail(diag, "x's rows times the ranks do not fit a dimension");
	if (node->n_outputs > 1)
		outputs[1] = (f8_type){.dtype = F8_DTYPE_I64, .shape = {.rank = 1, .dims = {local}}};
	if (node->n_outputs > 2)
		outputs[2] = (f8_type){.dtype = F8_DTYPE_I64,
				       .shape = {.rank = 2, .dims = {f8_dim_const(ranks), local}}};
	return F8_OK;
}

f8_status f8_infer_all_to_all_combine(const f8_graph *graph, const f8_node *node,
				      f8_type *outputs, f8_diag *diag) {
	const f8_type *y = infer_input(graph, node, 0), *counts = infer_input(graph, node, 1);
	const f8_type *recv_counts = infer_input(graph, node, 2);
	int64_t ranks = f8_node_attr_int(node, "ranks", 0);
	f8_dim local;
	f8_status status = require_group(node, diag);
	if (!status)
		status = f8_infer_require_float(y, "y", diag);
	if (!status)
		status = all_to_all_counts(counts, recv_counts, ranks, &local, diag);
	if (status)
		return status;
	if (y->shape.rank != 2)
		return f8_infer_fail(diag, "y must have rank 2: (ranks x rows, hidden)");
	outputs[0] = *y;
	if (!f8_dim_div(y->shape.dims[0], f8_dim_const(ranks), &outputs[0].shape.dims[0]))
		return f8_infer_fail(diag, "y's rows do not divide over the %lld ranks",
				  (long long)ranks);
	return F8_OK;
}

f8_status f8_infer_send(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			f8_diag *diag) {
	(void)graph, (void)outputs;
	if (f8_node_attr_int(node, "peer", -1) < 0)
		return f8_infer_fail(diag, "attribute peer must not be negative");
	int64_t tag = f8_node_attr_int(node, "tag", 0);
	if (tag < 0 || tag > 32767) // MPI_TAG_UB is at least 32767
		return f8_infer_fail(diag, "attribute tag is %lld: it must be in [0, 32767]",
				     (long long)tag);
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
		return f8_infer_fail(diag, "attribute shape has rank %u > %d", shape->dims.n, F8_MAX_RANK);
	outputs[0] = (f8_type){.dtype = f8_node_attr_dtype(node, "dtype", F8_DTYPE_UNDEFINED),
			       .shape = {.rank = (uint8_t)shape->dims.n}};
	memcpy(outputs[0].shape.dims, shape->dims.items, shape->dims.n * sizeof(f8_dim));
	return F8_OK;
}
