/*
 * The reference kernel of Attention (ir/infer_fused.c, f8_infer_attention): softmax(scale q k^T
 * + mask) v per (batch, head), with causal masking, a bool or additive mask, grouped-query heads
 * and the log-sum-exp the backward reads. Computed in double, one query row at a time; the keys
 * and values of a kv head are loaded once for every query head that shares them. AttentionPacked
 * is the same kernel over q, k and v read in place from one packed tensor.
 */
#include <math.h>   // exp, log, isnan, INFINITY
#include <stdint.h> // int64_t

#include "ir/alloc.h"                   // f8_free
#include "runtime/cpu/kernel_forward.h" // f8_cpu_attention_shape, f8_cpu_attention_keys
#include "runtime/cpu/kernel_util.h"    // f8_cpu_load, f8_cpu_store, f8_cpu_alloc
#include "runtime/cpu/kernels.h"        // F8_CPU_KERNEL

/* Scratch rows of one call: the keys and values of a kv head, a query, its scores, the mask's
 * row and the output row. */
typedef struct attention_scratch {
	double *keys, *values, *query, *scores, *mask, *out;
	bool *attends;
} attention_scratch;

/*
 * One query row: out = sum_j p_j v_j with p = softmax over the attended keys, and its
 * log-sum-exp; a row that attends no key (or only keys at -inf) gives 0 and -inf.
 */
static double attention_row(const f8_cpu_attention_shape *s, attention_scratch *w, int64_t b,
			    int64_t h, int64_t i) {
	int64_t n = f8_cpu_attention_keys(s, i); // keys 0 .. n - 1 may be attended
	f8_cpu_attention_mask_row(s, b, h, i, n, w->mask);
	double max = -INFINITY;
	for (int64_t j = 0; j < n; j++) {
		w->attends[j] = !s->bool_mask || w->mask[j] != 0.0;
		if (!w->attends[j])
			continue;
		const double *key = w->keys + j * s->head_dim;
		double dot = 0.0;
		for (int64_t d = 0; d < s->head_dim; d++)
			dot += w->query[d] * key[d];
		w->scores[j] = s->scale * dot + (s->mask && !s->bool_mask ? w->mask[j] : 0.0);
		if (!isnan(max) && (isnan(w->scores[j]) || w->scores[j] > max))
			max = w->scores[j];
	}
	for (int64_t d = 0; d < s->value_dim; d++)
		w->out[d] = 0.0;
	if (max == -INFINITY)
		return -INFINITY;
	double sum = 0.0;
	for (int64_t j = 0; j < n; j++) {
		if (!w->attends[j])
			continue;
		double p = exp(w->scores[j] - max);
		const double *value = w->values + j * s->value_dim;
		sum += p;
		for (int64_t d = 0; d < s->value_dim; d++)
			w->out[d] += p * value[d];
	}
	for (int64_t d = 0; d < s->value_dim; d++)
		w->out[d] /= sum;
	return max + log(sum);
}

/* The attention of `s` over q, k and v (one tensor for AttentionPacked, where the shape's
 * rows place each operand) into out and, when not NULL, lse (batch, heads, seq_q). */
static f8_status attention(const f8_cpu_attention_shape *s, const f8_rt_tensor *q,
			   const f8_rt_tensor *k, const f8_rt_tensor *v, f8_rt_tensor *out,
			   f8_rt_tensor *lse, f8_diag *diag) {
	int64_t kv_size = s->seq_kv * s->head_dim, v_size = s->seq_kv * s->value_dim;
	int64_t doubles = kv_size + v_size + s->head_dim + 2 * s->seq_kv + s->value_dim;
	double *buffer;
	bool *attends;
	f8_status status = f8_cpu_alloc(doubles, sizeof(double), (void **)&buffer, diag);
	if (status)
		return status;
	if ((status = f8_cpu_alloc(s->seq_kv, sizeof(bool), (void **)&attends, diag))) {
		f8_free(buffer);
		return status;
	}
	attention_scratch w = {.keys = buffer, .values = buffer + kv_size};
	w.query = w.values + v_size;
	w.scores = w.query + s->head_dim;
	w.mask = w.scores + s->seq_kv;
	w.out = w.mask + s->seq_kv;
	w.attends = attends;
	int64_t group = s->heads / s->kv_heads;
	for (int64_t b = 0; b < s->batch; b++) {
		for (int64_t kvh = 0; kvh < s->kv_heads; kvh++) {
			for (int64_t j = 0; j < s->seq_kv; j++) {
				f8_cpu_load(k, f8_cpu_attention_row(&s->k, b, kvh, j), 1, s->head_dim,
					    w.keys + j * s->head_dim);
				f8_cpu_load(v, f8_cpu_attention_row(&s->v, b, kvh, j), 1, s->value_dim,
					    w.values + j * s->value_dim);
			}
			// Query head h reads kv head h / group.
			for (int64_t h = kvh * group; h < (kvh + 1) * group; h++) {
				for (int64_t i = 0; i < s->seq_q; i++) {
					f8_cpu_load(q, f8_cpu_attention_row(&s->q, b, h, i), 1,
						    s->head_dim, w.query);
					double row_lse = attention_row(s, &w, b, h, i);
					f8_cpu_store(out, f8_cpu_attention_row(&s->out, b, h, i), 1,
						     s->value_dim, w.out);
					if (lse)
						f8_cpu_set(lse, (b * s->heads + h) * s->seq_q + i, row_lse);
				}
			}
		}
	}
	f8_free(attends);
	f8_free(buffer);
	return F8_OK;
}

F8_CPU_KERNEL(ATTENTION) {
	f8_cpu_attention_shape s = f8_cpu_attention_shape_of(call, 0, 3);
	return attention(&s, call->inputs[0], call->inputs[1], call->inputs[2], &call->outputs[0],
			 f8_cpu_output(call, 1), diag);
}

/* q, k and v read in place from qkv, out written with its heads merged at each token. */
F8_CPU_KERNEL(ATTENTION_PACKED) {
	f8_cpu_attention_shape s = f8_cpu_attention_packed_shape_of(call, 0, 1);
	const f8_rt_tensor *qkv = call->inputs[0];
	return attention(&s, qkv, qkv, qkv, &call->outputs[0], f8_cpu_output(call, 1), diag);
}
