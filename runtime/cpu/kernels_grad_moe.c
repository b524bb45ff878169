/*
 * Reference kernels of the backward ops of mixture-of-experts layers (ir/infer_backward.c):
 * RouterGrad, MoEDispatchGrad, GroupedLinearWgrad and MoECombineGrad.
 *
 * The layout is the forward's (ir/infer_fused.c): token t's copy k is copy t * top_k + k, and
 * the dispatched rows are the copies sorted stably by expert, so that expert e's rows are
 * contiguous, counts[e] of them, in token order: the permutation of f8_cpu_moe_rows
 * (kernel_forward.h), the forward's own.
 */
#include <stdint.h> // int64_t
#include <string.h> // memset, strcmp

#include "ir/alloc.h"                   // f8_free
#include "runtime/cpu/kernel_forward.h" // f8_cpu_router_scores, f8_cpu_moe_rows
#include "runtime/cpu/kernel_util.h"    // f8_cpu_load, f8_cpu_store, f8_cpu_gemm, f8_cpu_alloc
#include "runtime/cpu/kernels.h"        // F8_CPU_KERNEL

/*
 * Through the forward's three steps, per token, with s the scores and c_k = s[index_k]:
 *   normalize: p_k = c_k / S, S = sum_k c_k, so dc_k = (dp_k - sum_k dp_k p_k) / S (else
 *   dc_k = dp_k); top-k: ds[index_k] += dc_k (the selection itself has no gradient);
 *   softmax: dlogits = s (ds - sum(ds s)); sigmoid: dlogits = ds s (1 - s).
 * The scores are recomputed in double from the logits; the probs input is not read.
 */
F8_CPU_KERNEL(ROUTER_GRAD) {
	const f8_rt_tensor *dprobs = call->inputs[0], *logits = call->inputs[1];
	const f8_rt_tensor *indices = call->inputs[3];
	int64_t tokens = logits->dims[0], experts = logits->dims[1], top_k = indices->dims[1];
	bool sigmoid = strcmp(f8_node_attr_string(call->node, "score", "softmax"), "sigmoid") == 0;
	bool normalize = f8_node_attr_int(call->node, "normalize", 0);
	double *scores;
	f8_status status = f8_cpu_alloc(2 * experts + top_k, sizeof(double), (void **)&scores,
					diag);
	if (status)
		return status;
	double *dscores = scores + experts, *dchosen = dscores + experts;
	for (int64_t t = 0; t < tokens && !status; t++) {
		f8_cpu_load(logits, t * experts, 1, experts, scores);
		f8_cpu_router_scores(scores, experts, sigmoid);
		f8_cpu_load(dprobs, t * top_k, 1, top_k, dchosen);
		double chosen_sum = 0, weighted = 0;
		for (int64_t k = 0; k < top_k && !status; k++) {
			double e;
			status = f8_cpu_moe_expert(call, indices, t * top_k + k, experts, &e, diag);
			if (!status)
				chosen_sum += scores[(int64_t)e],
					weighted += dchosen[k] * scores[(int64_t)e];
		}
		memset(dscores, 0, (size_t)experts * sizeof(double));
		for (int64_t k = 0; k < top_k && !status; k++) {
			double dc = normalize ? (dchosen[k] - weighted / chosen_sum) / chosen_sum
					      : dchosen[k];
			dscores[(int64_t)f8_cpu_get(indices, t * top_k + k)] += dc;
		}
		double inner = 0;
		for (int64_t e = 0; e < experts; e++)
			inner += dscores[e] * scores[e];
		for (int64_t e = 0; e < experts; e++)
			dscores[e] = sigmoid ? dscores[e] * scores[e] * (1.0 - scores[e])
					     : scores[e] * (dscores[e] - inner);
		if (!status)
			f8_cpu_store(&call->outputs[0], t * experts, 1, experts, dscores);
	}
	f8_free(scores);
	return status;
}

/* dx[t] = the sum over k of dy at the dispatched row of copy (t, k), in double. */
F8_CPU_KERNEL(MOE_DISPATCH_GRAD) {
	const f8_rt_tensor *dy = call->inputs[0], *indices = call->inputs[1];
	int64_t tokens = indices->dims[0], top_k = indices->dims[1], hidden = dy->dims[1];
	int64_t experts = f8_node_attr_int(call->node, "experts", 0), *position;
	double *sum;
	f8_status status = f8_cpu_moe_rows(call, indices, experts, &position, NULL, diag);
	if (status)
		return status;
	// One spare element, so that the scratch exists even when hidden is 0.
	if ((status = f8_cpu_alloc(2 * hidden + 1, sizeof(double), (void **)&sum, diag)))
		goto done;
	double *row = sum + hidden;
	for (int64_t t = 0; t < tokens; t++) {
		memset(sum, 0, (size_t)hidden * sizeof(double));
		for (int64_t k = 0; k < top_k; k++) {
			f8_cpu_load(dy, position[t * top_k + k] * hidden, 1, hidden, row);
			for (int64_t i = 0; i < hidden; i++)
				sum[i] += row[i];
		}
		f8_cpu_store(&call->outputs[0], t * hidden, 1, hidden, sum);
	}
	f8_free(sum);
done:
	f8_free(position);
	return status;
}

/* dw[e] = dy_e^T x_e (N, K), or x_e^T dy_e (K, N) transposed, over expert e's rows: one GEMM
 * per expert through f8_cpu_gemm; an expert without rows gets zeros. The rows after the counted
 * ones (padding, f8_cpu_moe_check_counts) are not read. */
F8_CPU_KERNEL(GROUPED_LINEAR_WGRAD) {
	const f8_rt_tensor *dy = call->inputs[0], *x = call->inputs[1], *counts = call->inputs[2];
	f8_rt_tensor *dw = &call->outputs[0];
	int64_t rows = x->dims[0], n = dy->dims[1], k = x->dims[1], experts = counts->dims[0];
	int64_t largest;
	f8_status status = f8_cpu_moe_check_counts(call, counts, rows, &largest, NULL, diag);
	bool transposed = f8_node_attr_int(call->node, "transpose_weight", 0);
	const f8_rt_tensor *a = transposed ? x : dy, *b = transposed ? dy : x;
	int64_t m = transposed ? k : n, cols = transposed ? n : k;
	f8_cpu_gemm gemm;
	if (status || (status = f8_cpu_gemm_create(call, a, b, dw, m, cols, largest, &gemm, diag)))
		return status;
	for (int64_t e = 0, first = 0; e < experts; e++) {
		int64_t count = (int64_t)f8_cpu_get(counts, e);
		f8_cpu_gemm_run(&gemm, true, false, m, cols, count, first * m, m, first * cols,
				cols, e * m * cols, cols);
		first += count;
	}
	f8_cpu_gemm_store(&gemm, dw);
	f8_cpu_gemm_destroy(&gemm);
	return F8_OK;
}

/*
 * The forward is out[t] = sum_k probs[t, k] y[row(t, k)]: dy[row(t, k)] = probs[t, k] dout[t],
 * dprobs[t, k] = dout[t] . y[row(t, k)], in double. MoECombine has no experts attribute: any
 * non-negative expert index sorts.
 */
F8_CPU_KERNEL(MOE_COMBINE_GRAD) {
	const f8_rt_tensor *dout = call->inputs[0], *y = call->inputs[1], *probs = call->inputs[2];
	const f8_rt_tensor *indices = call->inputs[3];
	int64_t tokens = indices->dims[0], top_k = indices->dims[1], hidden = y->dims[1];
	int64_t *position;
	double *grad;
	f8_status status = f8_cpu_moe_rows(call, indices, 0, &position, NULL, diag);
	if (status)
		return status;
	if ((status = f8_cpu_alloc(3 * hidden + 1, sizeof(double), (void **)&grad, diag)))
		goto done;
	double *copy = grad + hidden, *scaled = copy + hidden;
	for (int64_t t = 0; t < tokens; t++) {
		f8_cpu_load(dout, t * hidden, 1, hidden, grad);
		for (int64_t k = 0; k < top_k; k++) {
			int64_t c = t * top_k + k, row = position[c];
			double p = f8_cpu_get(probs, c), dot = 0;
			f8_cpu_load(y, row * hidden, 1, hidden, copy);
			for (int64_t i = 0; i < hidden; i++) {
				dot += grad[i] * copy[i];
				scaled[i] = p * grad[i];
			}
			f8_cpu_store(&call->outputs[0], row * hidden, 1, hidden, scaled);
			f8_cpu_set(&call->outputs[1], c, dot);
		}
	}
	f8_free(grad);
done:
	f8_free(position);
	return status;
}
