/*
 * Reference kernels of the mixture-of-experts ops (ir/infer_fused.c): Router (scores, top-k,
 * probabilities), MoEDispatch (token copies sorted by expert, stably), GroupedLinear (one GEMM
 * per expert over its rows, through CBLAS) and MoECombine (the copies un-permuted and summed,
 * weighted). Dispatch and Combine derive the same permutation from the same indices, through
 * the one f8_cpu_moe_rows (kernel_forward.h) that the gradients use too.
 */
#include <math.h>   // isnan
#include <stdint.h> // int64_t
#include <string.h> // memcpy, strcmp

#include "ir/alloc.h"                   // f8_free
#include "runtime/cpu/kernel_forward.h" // f8_cpu_router_scores, f8_cpu_moe_rows
#include "runtime/cpu/kernel_util.h"    // f8_cpu_load, f8_cpu_store, f8_cpu_gemm
#include "runtime/cpu/kernels.h"        // F8_CPU_KERNEL

/*
 * Router: per token, scores over the experts (softmax of the logits, or each logit's sigmoid),
 * the top_k experts by score (ties: the lower expert index first; a NaN score is never picked
 * over a number), their scores as probabilities (divided by their sum when normalize=1), in
 * descending order of score, and their indices.
 */
F8_CPU_KERNEL(ROUTER) {
	const f8_rt_tensor *logits = call->inputs[0];
	f8_rt_tensor *probs = &call->outputs[0], *indices = &call->outputs[1];
	bool sigmoid = strcmp(f8_node_attr_string(call->node, "score", "softmax"), "sigmoid") == 0;
	bool normalize = f8_node_attr_int(call->node, "normalize", 0);
	int64_t tokens = logits->dims[0], experts = logits->dims[1];
	int64_t top_k = probs->dims[1];
	double *buffer;
	f8_status status = f8_cpu_alloc(experts + 2 * top_k, sizeof(double), (void **)&buffer,
					diag);
	if (status)
		return status;
	double *scores = buffer, *chosen = buffer + experts, *picked = chosen + top_k;
	for (int64_t t = 0; t < tokens; t++) {
		f8_cpu_load(logits, t * experts, 1, experts, scores);
		f8_cpu_router_scores(scores, experts, sigmoid);
		double total = 0.0;
		for (int64_t i = 0; i < top_k; i++) {
			int64_t best = -1;
			for (int64_t e = 0; e < experts; e++) {
				bool taken = false;
				for (int64_t p = 0; p < i && !taken; p++)
					taken = picked[p] == (double)e;
				if (!taken && (best < 0 || scores[e] > scores[best] ||
					       (isnan(scores[best]) && !isnan(scores[e]))))
					best = e;
			}
			picked[i] = (double)best;
			chosen[i] = scores[best];
			total += scores[best];
		}
		for (int64_t i = 0; i < top_k; i++)
			chosen[i] = normalize ? chosen[i] / total : chosen[i];
		f8_cpu_store(probs, t * top_k, 1, top_k, chosen);
		f8_cpu_store(indices, t * top_k, 1, top_k, picked);
	}
	f8_free(buffer);
	return F8_OK;
}

/* MoEDispatch: x's token rows copied to their places in expert order, and the rows per expert. */
F8_CPU_KERNEL(MOE_DISPATCH) {
	const f8_rt_tensor *x = call->inputs[0], *indices = call->inputs[1];
	f8_rt_tensor *out = &call->outputs[0], *counts_out = &call->outputs[1];
	int64_t experts = counts_out->dims[0], n = f8_rt_tensor_numel(indices);
	int64_t *row, *counts;
	f8_status status = f8_cpu_alloc(experts, sizeof(int64_t), (void **)&counts, diag);
	if (status)
		return status;
	if ((status = f8_cpu_moe_rows(call, indices, experts, &row, counts, diag))) {
		f8_free(counts);
		return status;
	}
	size_t row_bytes = (size_t)x->dims[1] * f8_dtype_get_info(x->dtype)->bytes;
	for (int64_t i = 0; row_bytes && i < n; i++) {
		size_t token = (size_t)(i / indices->dims[1]);
		memcpy((char *)out->data + (size_t)row[i] * row_bytes,
		       (const char *)x->data + token * row_bytes, row_bytes);
	}
	for (int64_t e = 0; e < experts; e++)
		f8_cpu_set(counts_out, e, (double)counts[e]);
	f8_free(counts);
	f8_free(row);
	return F8_OK;
}

/* GroupedLinear: rows [sum(counts[:e]), sum(counts[:e+1])) of x times w[e] (w[e]^T for (N, K)
 * weights); the counts must be non-negative and add up to at most the rows: the rows after
 * them are padding (an all-to-all's receive buffer), not read, and their output rows zeros. */
F8_CPU_KERNEL(GROUPED_LINEAR) {
	const f8_rt_tensor *x = call->inputs[0], *w = call->inputs[1], *counts = call->inputs[2];
	f8_rt_tensor *y = &call->outputs[0];
	bool transposed = f8_node_attr_int(call->node, "transpose_weight", 0);
	int64_t rows = x->dims[0], k = x->dims[1], n = y->dims[1], experts = w->dims[0];
	int64_t largest, total;
	f8_status status = f8_cpu_moe_check_counts(call, counts, rows, &largest, &total, diag);
	f8_cpu_gemm gemm;
	if (status || (status = f8_cpu_gemm_create(call, x, w, y, largest, n, k, &gemm, diag)))
		return status;
	int64_t start = 0;
	for (int64_t e = 0; e < experts; e++) {
		int64_t m = (int64_t)f8_cpu_get(counts, e);
		f8_cpu_gemm_run(&gemm, false, !transposed, m, n, k, start * k, k, e * n * k,
				transposed ? n : k, start * n, n);
		start += m;
	}
	f8_cpu_gemm_zero(&gemm, total * n, (rows - total) * n);
	f8_cpu_gemm_store(&gemm, y);
	f8_cpu_gemm_destroy(&gemm);
	return F8_OK;
}

/* MoECombine: out[t] = sum_k probs[t, k] * y[row of copy (t, k)], in double, the rows those
 * of MoEDispatch's permutation; no experts attribute bounds the indices. */
F8_CPU_KERNEL(MOE_COMBINE) {
	const f8_rt_tensor *y = call->inputs[0], *probs = call->inputs[1];
	const f8_rt_tensor *indices = call->inputs[2];
	f8_rt_tensor *out = &call->outputs[0];
	int64_t top_k = indices->dims[1], hidden = y->dims[1];
	int64_t *row;
	double *buffer = NULL;
	f8_status status = f8_cpu_moe_rows(call, indices, 0, &row, NULL, diag);
	if (status)
		return status;
	status = f8_cpu_alloc(2 * hidden, sizeof(double), (void **)&buffer, diag);
	for (int64_t t = 0; !status && t < out->dims[0]; t++) {
		double *sum = buffer, *v = buffer + hidden;
		for (int64_t j = 0; j < hidden; j++)
			sum[j] = 0.0;
		for (int64_t c = 0; c < top_k; c++) {
			double p = f8_cpu_get(probs, t * top_k + c);
			f8_cpu_load(y, row[t * top_k + c] * hidden, 1, hidden, v);
			for (int64_t j = 0; j < hidden; j++)
				sum[j] += p * v[j];
		}
		f8_cpu_store(out, t * hidden, 1, hidden, sum);
	}
	f8_free(buffer);
	f8_free(row);
	return status;
}
