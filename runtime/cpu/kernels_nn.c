/*
 * Reference kernels of the matrix products and the transformer building blocks: MatMul, Gemm,
 * Linear (GEMMs through CBLAS, kernels.h), LayerNorm, RMSNorm, Gelu, SwiGLU, Rope, Embedding
 * and CrossEntropy. Semantics are the comments of their shape functions (ir/infer_fused.c,
 * ir/infer_primitive.c). Everything but the GEMMs is computed in double and rounded once per
 * stored element; rows are loaded and stored through kernel_util.h, whose f32 path is the fast
 * path of these hot kernels.
 */
#include <math.h>   // exp, log, erf, tanh, isnan, isinf, INFINITY
#include <stdio.h>  // snprintf
#include <string.h> // memcpy, strcmp

#include "ir/alloc.h"                   // f8_free
#include "runtime/cpu/kernel_forward.h" // f8_cpu_norm_create, f8_cpu_layer_norm_rstd
#include "runtime/cpu/kernel_util.h"    // f8_cpu_load, f8_cpu_store, f8_cpu_gemm, f8_cpu_sigmoid
#include "runtime/cpu/kernels.h"        // F8_CPU_KERNEL, f8_cpu_fail

/* Matrix products. */

/* y (rows, n) = accumulators + bias (n), rounded to y's dtype; without bias the accumulators
 * as they are. */
static void store_with_bias(const f8_cpu_gemm *gemm, const f8_rt_tensor *bias, int64_t rows,
			    int64_t n, f8_rt_tensor *y) {
	if (!bias) {
		f8_cpu_gemm_store(gemm, y);
		return;
	}
	double b[F8_CPU_CHUNK], v[F8_CPU_CHUNK];
	for (int64_t c0 = 0; c0 < n; c0 += F8_CPU_CHUNK) {
		int64_t width = f8_cpu_chunk(n - c0);
		f8_cpu_load(bias, c0, 1, width, b);
		for (int64_t r = 0; r < rows; r++) {
			int64_t at = r * n + c0;
			for (int64_t j = 0; j < width; j++)
				v[j] = f8_cpu_gemm_result(gemm, at + j) + b[j];
			f8_cpu_store(y, at, 1, width, v);
		}
	}
}

F8_CPU_KERNEL(LINEAR) {
	const f8_rt_tensor *x = call->inputs[0], *w = call->inputs[1];
	const f8_rt_tensor *bias = f8_cpu_input(call, 2);
	f8_rt_tensor *y = &call->outputs[0];
	bool transposed = f8_node_attr_int(call->node, "transpose_weight", 0);
	int64_t k = x->dims[x->rank - 1], n = y->dims[y->rank - 1];
	int64_t m = f8_cpu_dims_product(x, 0, x->rank - 1);
	f8_cpu_gemm gemm;
	f8_status status = f8_cpu_gemm_create(call, x, w, y, m, n, k, &gemm, diag);
	if (status)
		return status;
	// y = x w^T for w (N, K); y = x w for w (K, N).
	f8_cpu_gemm_run(&gemm, false, !transposed, m, n, k, 0, k, 0, transposed ? n : k, 0, n);
	store_with_bias(&gemm, bias, m, n, y);
	f8_cpu_gemm_destroy(&gemm);
	return F8_OK;
}

/* A tensor standing for the batch dims of a matrix operand of `rank` (its first rank - 2 dims;
 * none for a vector), for broadcasting the batch of a MatMul. */
static f8_rt_tensor batch_of(const f8_rt_tensor *t, int matrix_dims) {
	f8_rt_tensor batch = {.dtype = t->dtype, .rank = t->rank - matrix_dims};
	if (batch.rank < 0)
		batch.rank = 0;
	for (int i = 0; i < batch.rank; i++)
		batch.dims[i] = t->dims[i];
	return batch;
}

F8_CPU_KERNEL(MATMUL) {
	(void)diag;
	const f8_rt_tensor *a = call->inputs[0], *b = call->inputs[1];
	f8_rt_tensor *y = &call->outputs[0];
	// A vector operand is a (1, K) or (K, 1) matrix whose unit dim the result drops.
	int64_t k = a->dims[a->rank - 1];
	int64_t m = a->rank > 1 ? a->dims[a->rank - 2] : 1;
	int64_t n = b->rank > 1 ? b->dims[b->rank - 1] : 1;
	int result_matrix_dims = (a->rank > 1) + (b->rank > 1);
	f8_rt_tensor batch_y = batch_of(y, result_matrix_dims);
	f8_rt_tensor batch_a = batch_of(a, a->rank > 1 ? 2 : 1);
	f8_rt_tensor batch_b = batch_of(b, b->rank > 1 ? 2 : 1);
	const f8_rt_tensor *batch_inputs[2] = {&batch_a, &batch_b};
	f8_cpu_broadcast plan;
	f8_cpu_broadcast_init(&plan, &batch_y, batch_inputs, 2);
	f8_cpu_gemm gemm;
	f8_status status = f8_cpu_gemm_create(call, a, b, y, m, n, k, &gemm, diag);
	if (status)
		return status;
	for (int64_t run = 0; run < plan.runs; run++) {
		int64_t offsets[2];
		f8_cpu_broadcast_offsets(&plan, run, offsets);
		for (int64_t j = 0; j < plan.inner; j++) {
			int64_t batch = run * plan.inner + j;
			int64_t ia = offsets[0] + j * plan.inner_strides[0];
			int64_t ib = offsets[1] + j * plan.inner_strides[1];
			f8_cpu_gemm_run(&gemm, false, false, m, n, k, ia * m * k, k, ib * k * n, n,
					batch * m * n, n);
		}
	}
	f8_cpu_gemm_store(&gemm, y);
	f8_cpu_gemm_destroy(&gemm);
	return F8_OK;
}

/* Gemm (ONNX): y = alpha op(A) op(B) + beta C, C broadcast to (M, N); the product is the GEMM's,
 * alpha and beta are applied in double. */
F8_CPU_KERNEL(GEMM) {
	const f8_rt_tensor *a = call->inputs[0], *b = call->inputs[1], *c = f8_cpu_input(call, 2);
	f8_rt_tensor *y = &call->outputs[0];
	bool trans_a = f8_node_attr_int(call->node, "transA", 0);
	bool trans_b = f8_node_attr_int(call->node, "transB", 0);
	double alpha = f8_node_attr_float(call->node, "alpha", 1.0);
	double beta = f8_node_attr_float(call->node, "beta", 1.0);
	int64_t m = y->dims[0], n = y->dims[1], k = a->dims[trans_a ? 0 : 1];
	f8_cpu_gemm gemm;
	f8_status status = f8_cpu_gemm_create(call, a, b, y, m, n, k, &gemm, diag);
	if (status)
		return status;
	f8_cpu_gemm_run(&gemm, trans_a, trans_b, m, n, k, 0, a->dims[1], 0, b->dims[1], 0, n);
	f8_cpu_broadcast plan;
	const f8_rt_tensor *inputs[1] = {c ? c : y};
	f8_cpu_broadcast_init(&plan, y, inputs, 1);
	double cv[F8_CPU_CHUNK], v[F8_CPU_CHUNK];
	for (int64_t run = 0; run < plan.runs; run++) {
		int64_t offset;
		f8_cpu_broadcast_offsets(&plan, run, &offset);
		for (int64_t j0 = 0; j0 < plan.inner; j0 += F8_CPU_CHUNK) {
			int64_t width = f8_cpu_chunk(plan.inner - j0);
			int64_t at = run * plan.inner + j0;
			int64_t stride = plan.inner_strides[0];
			if (c)
				f8_cpu_load(c, offset + j0 * stride, stride, width, cv);
			for (int64_t j = 0; j < width; j++)
				v[j] = alpha * f8_cpu_gemm_result(&gemm, at + j) +
				       (c ? beta * cv[j] : 0.0);
			f8_cpu_store(y, at, 1, width, v);
		}
	}
	f8_cpu_gemm_destroy(&gemm);
	return F8_OK;
}

/* Normalizations. */

/* LayerNorm: y = (x - mean) * rstd * gamma + beta, the biased variance, rstd = 1/sqrt(var + eps);
 * the optional outputs are mean and rstd per row (f32). */
F8_CPU_KERNEL(LAYER_NORM) {
	const f8_rt_tensor *x = call->inputs[0], *gamma = call->inputs[1];
	const f8_rt_tensor *beta = f8_cpu_input(call, 2);
	f8_rt_tensor *mean_out = f8_cpu_output(call, 1), *rstd_out = f8_cpu_output(call, 2);
	f8_cpu_norm norm;
	f8_status status = f8_cpu_norm_create(call, x, gamma, 2, &norm, diag);
	if (status)
		return status;
	int64_t rows = norm.rows, cols = norm.cols;
	double *g = norm.scratch, *row = g + cols, *b = row + cols;
	for (int64_t j = 0; j < cols; j++)
		b[j] = 0.0;
	if (beta)
		f8_cpu_load(beta, 0, 1, cols, b);
	for (int64_t r = 0; r < rows; r++) {
		f8_cpu_load(x, r * cols, 1, cols, row);
		double mean, rstd = f8_cpu_layer_norm_rstd(&norm, row, &mean);
		for (int64_t j = 0; j < cols; j++)
			row[j] = (row[j] - mean) * rstd * g[j] + b[j];
		f8_cpu_store(&call->outputs[0], r * cols, 1, cols, row);
		if (mean_out)
			f8_cpu_set(mean_out, r, mean);
		if (rstd_out)
			f8_cpu_set(rstd_out, r, rstd);
	}
	f8_free(norm.scratch);
	return F8_OK;
}

/* RMSNorm: rstd = 1/sqrt(mean(x^2) + eps); y = round_to_x_dtype(x * rstd) * gamma (the rounding
 * is Hugging Face's `.to(input_dtype)` before the weight multiplies); optional output rstd
 * (f32). */
F8_CPU_KERNEL(RMS_NORM) {
	const f8_rt_tensor *x = call->inputs[0], *gamma = call->inputs[1];
	f8_rt_tensor *rstd_out = f8_cpu_output(call, 1);
	f8_cpu_norm norm;
	f8_status status = f8_cpu_norm_create(call, x, gamma, 1, &norm, diag);
	if (status)
		return status;
	int64_t cols = norm.cols;
	double *g = norm.scratch, *row = g + cols;
	for (int64_t r = 0; r < norm.rows; r++) {
		f8_cpu_load(x, r * cols, 1, cols, row);
		double rstd = f8_cpu_rms_norm_rstd(&norm, row);
		if (x->dtype == F8_DTYPE_F32) // f8_cpu_round's own f32 case, unrolled for speed
			for (int64_t j = 0; j < cols; j++)
				row[j] = (double)(float)(row[j] * rstd) * g[j];
		else
			for (int64_t j = 0; j < cols; j++)
				row[j] = f8_cpu_round(x->dtype, row[j] * rstd) * g[j];
		f8_cpu_store(&call->outputs[0], r * cols, 1, cols, row);
		if (rstd_out)
			f8_cpu_set(rstd_out, r, rstd);
	}
	f8_free(norm.scratch);
	return F8_OK;
}

/* Activations. */

/* Gelu: 0.5 x (1 + erf(x / sqrt 2)), or with approximate="tanh"
 * 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))). */
F8_CPU_KERNEL(GELU) {
	(void)diag;
	const f8_rt_tensor *x = call->inputs[0];
	f8_rt_tensor *y = &call->outputs[0];
	const char *approximate = f8_node_attr_string(call->node, "approximate", "none");
	bool tanh_form = strcmp(approximate, "tanh") == 0;
	const double sqrt_half = 0.70710678118654752440, sqrt_2_over_pi = 0.79788456080286535588;
	int64_t total = f8_rt_tensor_numel(x);
	double v[F8_CPU_CHUNK];
	for (int64_t i0 = 0; i0 < total; i0 += F8_CPU_CHUNK) {
		int64_t n = f8_cpu_chunk(total - i0);
		f8_cpu_load(x, i0, 1, n, v);
		if (tanh_form)
			for (int64_t j = 0; j < n; j++) {
				double u = v[j], inner = sqrt_2_over_pi * (u + 0.044715 * u * u * u);
				v[j] = 0.5 * u * (1.0 + tanh(inner));
			}
		else
			for (int64_t j = 0; j < n; j++)
				v[j] = 0.5 * v[j] * (1.0 + erf(v[j] * sqrt_half));
		f8_cpu_store(y, i0, 1, n, v);
	}
	return F8_OK;
}

/* SwiGLU: silu(gate) * up, gate and up the two inputs or the halves of the packed one's last
 * dim ([gate | up]). */
F8_CPU_KERNEL(SWIGLU) {
	(void)diag;
	const f8_rt_tensor *x = call->inputs[0], *up = f8_cpu_input(call, 1);
	f8_rt_tensor *y = &call->outputs[0];
	int64_t width = y->rank ? y->dims[y->rank - 1] : 1;
	int64_t rows = width ? f8_rt_tensor_numel(y) / width : 0;
	// Row r of gate and up start at these offsets, each row `width` long.
	int64_t row_stride = up ? width : 2 * width, up_shift = up ? 0 : width;
	const f8_rt_tensor *up_tensor = up ? up : x;
	double g[F8_CPU_CHUNK], u[F8_CPU_CHUNK];
	for (int64_t r = 0; r < rows; r++) {
		for (int64_t c0 = 0; c0 < width; c0 += F8_CPU_CHUNK) {
			int64_t n = f8_cpu_chunk(width - c0);
			f8_cpu_load(x, r * row_stride + c0, 1, n, g);
			f8_cpu_load(up_tensor, r * row_stride + up_shift + c0, 1, n, u);
			for (int64_t j = 0; j < n; j++)
				g[j] = g[j] * f8_cpu_sigmoid(g[j]) * u[j];
			f8_cpu_store(y, r * width + c0, 1, n, g);
		}
	}
	return F8_OK;
}

/* Rope. */

/* The row of cos/sin (rank cos->rank, rows (..., seq)) that row `row` of x (rows (..., seq))
 * reads: cos's leading dims align with x's dims just before seq and broadcast where they are 1. */
static int64_t rope_table_row(const f8_rt_tensor *x, const f8_rt_tensor *cos, int64_t row) {
	int64_t table_row = 0, table_stride = 1;
	int shift = x->rank - cos->rank;
	for (int d = x->rank - 2; d >= 0 && d - shift >= 0; d--) {
		int64_t index = row % x->dims[d];
		row /= x->dims[d];
		int64_t size = cos->dims[d - shift];
		table_row += (size == 1 ? 0 : index) * table_stride;
		table_stride *= size;
	}
	return table_row;
}

/* Rotates the first rotary_dim dims of `v` (a row of x) by the angles whose cos and sin are in
 * c and s: rotate-half pairs (i, i + half), interleaved pairs (2i, 2i + 1). */
static void rope_rotate(double *v, const double *c, const double *s, int64_t rotary,
			bool interleaved) {
	int64_t half = rotary / 2;
	for (int64_t i = 0; i < half; i++) {
		int64_t p = interleaved ? 2 * i : i, q = interleaved ? 2 * i + 1 : i + half;
		double first = v[p], second = v[q];
		v[p] = first * c[p] - second * s[p];
		v[q] = second * c[q] + first * s[q];
	}
}

F8_CPU_KERNEL(ROPE) {
	const f8_rt_tensor *x = call->inputs[0], *cos = call->inputs[1], *sin = call->inputs[2];
	f8_rt_tensor *y = &call->outputs[0];
	bool interleaved = f8_node_attr_int(call->node, "interleaved", 0);
	int64_t head_dim = x->dims[x->rank - 1], rotary = cos->dims[cos->rank - 1];
	int64_t rows = f8_cpu_dims_product(x, 0, x->rank - 1);
	double *buffer;
	f8_status status = f8_cpu_alloc(head_dim + 2 * rotary, sizeof(double), (void **)&buffer,
					diag);
	if (status)
		return status;
	double *v = buffer, *c = buffer + head_dim, *s = buffer + head_dim + rotary;
	int64_t loaded = -1; // the table row in c and s: consecutive x rows often share it
	for (int64_t r = 0; r < rows; r++) {
		int64_t table_row = rope_table_row(x, cos, r);
		if (table_row != loaded) {
			f8_cpu_load(cos, table_row * rotary, 1, rotary, c);
			f8_cpu_load(sin, table_row * rotary, 1, rotary, s);
			loaded = table_row;
		}
		f8_cpu_load(x, r * head_dim, 1, head_dim, v);
		rope_rotate(v, c, s, rotary, interleaved);
		f8_cpu_store(y, r * head_dim, 1, head_dim, v);
	}
	f8_free(buffer);
	return F8_OK;
}

/* Lookups and the loss. */

/* Formats the multi-index of flat element `flat` of `tensor` ("[1, 5]") into `buffer`. */
static const char *format_index(const f8_rt_tensor *tensor, int64_t flat, char *buffer,
				size_t size) {
	int64_t index[F8_MAX_RANK];
	for (int d = tensor->rank - 1; d >= 0; d--) {
		index[d] = tensor->dims[d] ? flat % tensor->dims[d] : 0;
		flat = tensor->dims[d] ? flat / tensor->dims[d] : 0;
	}
	size_t used = (size_t)snprintf(buffer, size, "[");
	for (int d = 0; d < tensor->rank && used < size; d++)
		used += (size_t)snprintf(buffer + used, size - used, "%s%lld", d ? ", " : "",
					 (long long)index[d]);
	if (used < size)
		snprintf(buffer + used, size - used, "]");
	return buffer;
}

/* Embedding: row ids[p] of the weight, for every position p of the ids. */
/* The first vocabulary row of a rank's shard (input `i`, [1]), or 0 without one. */
static int64_t shard_start(const f8_cpu_kernel_call *call, uint32_t i) {
	return call->node->n_inputs > i ? (int64_t)f8_cpu_get(call->inputs[i], 0) : 0;
}

/* The whole vocabulary's size: attribute vocab, or `rows` (the table's or the logits'). */
static int64_t whole_vocab(const f8_cpu_kernel_call *call, int64_t rows) {
	const f8_attr *vocab = f8_node_attr(call->node, "vocab");
	int64_t size;
	return vocab && f8_dim_evaluate(vocab->dim, call->symbol_values, &size) ? size : rows;
}

/* Embedding: the rows of w the ids name; with a start input (a vocabulary shard) an id outside
 * [start, start + rows) gives zeros, and the id is checked against the whole vocabulary. */
F8_CPU_KERNEL(EMBEDDING) {
	const f8_rt_tensor *ids = call->inputs[0], *w = call->inputs[1];
	f8_rt_tensor *y = &call->outputs[0];
	int64_t rows = w->dims[0], n = f8_rt_tensor_numel(ids);
	int64_t start = shard_start(call, 2), vocab = whole_vocab(call, rows);
	size_t row_bytes = (size_t)w->dims[1] * f8_dtype_get_info(w->dtype)->bytes;
	for (int64_t p = 0; p < n; p++) {
		double id = f8_cpu_get(ids, p);
		if (!(id >= 0 && id < (double)vocab)) {
			char where[128];
			f8_status status = f8_cpu_fail(
				call, diag, "id %.0f at position %s of the ids is outside the "
					    "vocabulary [0, %lld)",
				id, format_index(ids, p, where, sizeof where), (long long)vocab);
			f8_diag_hint(diag, "check the tokenizer's vocabulary size against the "
					   "embedding table's rows");
			return status;
		}
		int64_t row = (int64_t)id - start;
		if (row_bytes && row >= 0 && row < rows)
			memcpy((char *)y->data + (size_t)p * row_bytes,
			       (const char *)w->data + (size_t)row * row_bytes, row_bytes);
		else if (row_bytes)
			memset((char *)y->data + (size_t)p * row_bytes, 0, row_bytes);
	}
	return F8_OK;
}

/* log(sum(exp(row))) of `n` values, stable: max + log(sum(exp(row - max))); -inf when every
 * value is -inf (no mass at all). */
static double log_sum_exp(const double *row, int64_t n) {
	double max = -INFINITY;
	for (int64_t j = 0; j < n; j++)
		if (!isnan(max) && (isnan(row[j]) || row[j] > max))
			max = row[j];
	if (max == -INFINITY || isnan(max) || isinf(max))
		return max;
	double sum = 0.0;
	for (int64_t j = 0; j < n; j++)
		sum += exp(row[j] - max);
	return max + log(sum);
}

/* Fails for a label that is neither ignore_index nor inside the vocabulary [0, vocab). */
static f8_status check_label(const f8_cpu_kernel_call *call, const f8_rt_tensor *labels,
			     int64_t r, double label, int64_t ignore_index, int64_t vocab,
			     f8_diag *diag) {
	if (label == (double)ignore_index || (label >= 0 && label < (double)vocab))
		return F8_OK;
	char where[128];
	f8_status status = f8_cpu_fail(call, diag, "label %.0f at position %s is outside the "
					     "vocabulary [0, %lld)",
				       label, format_index(labels, r, where, sizeof where),
				       (long long)vocab);
	f8_diag_hint(diag, "labels must index the logits' last dim, or equal ignore_index (%lld)",
		     (long long)ignore_index);
	return status;
}

/* CrossEntropyShard: per row, the sum of exp(logit - max) over this rank's shard of the
 * vocabulary, and the label's logit where the shard [start, start + shard) holds it (else 0). */
F8_CPU_KERNEL(CROSS_ENTROPY_SHARD) {
	const f8_rt_tensor *logits = call->inputs[0], *labels = call->inputs[1];
	const f8_rt_tensor *max = call->inputs[2];
	int64_t shard = logits->dims[logits->rank - 1], rows = f8_rt_tensor_numel(labels);
	int64_t ignore_index = f8_node_attr_int(call->node, "ignore_index", -100);
	int64_t start = shard_start(call, 3), vocab = whole_vocab(call, shard);
	double *row;
	f8_status status = f8_cpu_alloc(shard + 1, sizeof(double), (void **)&row, diag);
	for (int64_t r = 0; !status && r < rows; r++) {
		double label = f8_cpu_get(labels, r), m = f8_cpu_get(max, r), sum = 0.0;
		if ((status = check_label(call, labels, r, label, ignore_index, vocab, diag)))
			break;
		f8_cpu_load(logits, r * shard, 1, shard, row);
		for (int64_t j = 0; j < shard; j++)
			sum += exp(row[j] - m);
		int64_t at = (int64_t)label - start;
		f8_cpu_set(&call->outputs[0], r, sum);
		f8_cpu_set(&call->outputs[1], r, label != (double)ignore_index && at >= 0 &&
							  at < shard ? row[at] : 0.0);
	}
	f8_free(row);
	return status;
}

/* CrossEntropyMerge: per row max + log(sum_exp) - target, the rows reduced as CrossEntropy's;
 * the second output, when asked, max + log(sum_exp). */
F8_CPU_KERNEL(CROSS_ENTROPY_MERGE) {
	const f8_rt_tensor *sum_exp = call->inputs[0], *target = call->inputs[1];
	const f8_rt_tensor *max = call->inputs[2], *labels = call->inputs[3];
	f8_rt_tensor *loss = &call->outputs[0], *lse_out = f8_cpu_output(call, 1);
	int64_t ignore_index = f8_node_attr_int(call->node, "ignore_index", -100);
	const char *reduction = f8_node_attr_string(call->node, "reduction", "mean");
	bool keep_rows = strcmp(reduction, "none") == 0;
	int64_t rows = f8_rt_tensor_numel(labels), counted = 0;
	double total = 0.0;
	(void)diag;
	for (int64_t r = 0; r < rows; r++) {
		double lse = f8_cpu_get(max, r) + log(f8_cpu_get(sum_exp, r)), value = 0.0;
		if (lse_out)
			f8_cpu_set(lse_out, r, lse);
		if (f8_cpu_get(labels, r) != (double)ignore_index) {
			value = lse - f8_cpu_get(target, r);
			total += value;
			counted++;
		}
		if (keep_rows)
			f8_cpu_set(loss, r, value);
	}
	if (!keep_rows)
		f8_cpu_set(loss, 0, strcmp(reduction, "sum") == 0 ? total
					   : counted ? total / (double)counted : 0.0);
	return F8_OK;
}

/* CrossEntropy: per row lse - logit[label]; rows labelled ignore_index (-100, as PyTorch, when
 * the attribute is absent) count for nothing; reduction mean (over counted rows; 0 when none),
 * sum, or none (ignored rows 0). Second output, when asked: lse per row (every row). */
F8_CPU_KERNEL(CROSS_ENTROPY) {
	const f8_rt_tensor *logits = call->inputs[0], *labels = call->inputs[1];
	f8_rt_tensor *loss = &call->outputs[0], *lse_out = f8_cpu_output(call, 1);
	int64_t ignore_index = f8_node_attr_int(call->node, "ignore_index", -100);
	const char *reduction = f8_node_attr_string(call->node, "reduction", "mean");
	bool keep_rows = strcmp(reduction, "none") == 0;
	int64_t vocab = logits->dims[logits->rank - 1], rows = f8_rt_tensor_numel(labels);
	double *row;
	f8_status status = f8_cpu_alloc(vocab, sizeof(double), (void **)&row, diag);
	if (status)
		return status;
	double total = 0.0;
	int64_t counted = 0;
	for (int64_t r = 0; r < rows; r++) {
		f8_cpu_load(logits, r * vocab, 1, vocab, row);
		double lse = log_sum_exp(row, vocab), label = f8_cpu_get(labels, r), value = 0.0;
		if (lse_out)
			f8_cpu_set(lse_out, r, lse);
		if (label != (double)ignore_index) {
			if (!(label >= 0 && label < (double)vocab)) {
				char where[128];
				f8_free(row);
				status = f8_cpu_fail(
					call, diag, "label %.0f at position %s is outside the "
						    "vocabulary [0, %lld)",
					label, format_index(labels, r, where, sizeof where),
					(long long)vocab);
				f8_diag_hint(diag, "labels must index the logits' last dim, or "
						   "equal ignore_index (%lld)",
					     (long long)ignore_index);
				return status;
			}
			value = lse - row[(int64_t)label];
			total += value;
			counted++;
		}
		if (keep_rows)
			f8_cpu_set(loss, r, value);
	}
	f8_free(row);
	if (!keep_rows)
		f8_cpu_set(loss, 0, strcmp(reduction, "sum") == 0 ? total
					   : counted ? total / (double)counted : 0.0);
	return F8_OK;
}
