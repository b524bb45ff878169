/*
 * The reference kernel of Attention (ir/infer_fused.c, f8_infer_attention): softmax(scale q k^T
 * + mask) v per (batch, head), with causal masking, a bool or additive mask, grouped-query heads
 * and the log-sum-exp the backward reads. Computed in double, one query row at a time; the keys
 * and values of a kv head are loaded once for every query head that shares them.
 */
#include <math.h>   // exp, log, sqrt, isinf, INFINITY
#include <stdint.h> // int64_t

#include "ir/alloc.h"                // f8_free
#include "runtime/cpu/kernel_util.h" // f8_cpu_load, f8_cpu_store, f8_cpu_alloc
#include "runtime/cpu/kernels.h"     // F8_CPU_KERNEL

/* The sizes of one Attention call. */
typedef struct attention_shape {
	int64_t batch, heads, kv_heads, seq_q, seq_kv, head_dim, value_dim;
	double scale;
	bool causal;
	const f8_rt_tensor *mask; // NULL, bool (true attends) or additive
	int64_t mask_strides[4];  // element strides of the mask over (batch, heads, seq_q, seq_kv),
				  // 0 where it broadcasts
} attention_shape;

static attention_shape attention_shape_of(const f8_cpu_kernel_call *call) {
	const f8_rt_tensor *q = call->inputs[0], *k = call->inputs[1], *v = call->inputs[2];
	attention_shape s = {
		.batch = q->dims[0], .heads = q->dims[1], .kv_heads = k->dims[1],
		.seq_q = q->dims[2], .seq_kv = k->dims[2], .head_dim = q->dims[3],
		.value_dim = v->dims[3],
		.causal = f8_node_attr_int(call->node, "causal", 0),
		.mask = f8_cpu_input(call, 3),
	};
	s.scale = f8_node_attr_float(call->node, "scale", 1.0 / sqrt((double)s.head_dim));
	if (s.mask) {
		int64_t stride = 1;
		for (int d = 3; d >= 0; d--) {
			int md = d - (4 - s.mask->rank);
			s.mask_strides[d] = md < 0 || s.mask->dims[md] == 1 ? 0 : stride;
			if (md >= 0)
				stride *= s.mask->dims[md];
		}
	}
	return s;
}

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
static double attention_row(const attention_shape *s, attention_scratch *w, int64_t b, int64_t h,
			    int64_t i) {
	int64_t last = s->causal ? i + (s->seq_kv - s->seq_q) : s->seq_kv - 1;
	if (last > s->seq_kv - 1)
		last = s->seq_kv - 1;
	int64_t n = last + 1 < 0 ? 0 : last + 1; // keys 0 .. last may be attended
	bool bool_mask = s->mask && s->mask->dtype == F8_DTYPE_BOOL;
	if (s->mask)
		f8_cpu_load(s->mask, b * s->mask_strides[0] + h * s->mask_strides[1] +
				     i * s->mask_strides[2], s->mask_strides[3], n, w->mask);
	double max = -INFINITY;
	for (int64_t j = 0; j < n; j++) {
		w->attends[j] = !bool_mask || w->mask[j] != 0.0;
		if (!w->attends[j])
			continue;
		const double *key = w->keys + j * s->head_dim;
		double dot = 0.0;
		for (int64_t d = 0; d < s->head_dim; d++)
			dot += w->query[d] * key[d];
		w->scores[j] = s->scale * dot + (s->mask && !bool_mask ? w->mask[j] : 0.0);
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

F8_CPU_KERNEL(ATTENTION) {
	const f8_rt_tensor *q = call->inputs[0], *k = call->inputs[1], *v = call->inputs[2];
	f8_rt_tensor *out = &call->outputs[0], *lse = f8_cpu_output(call, 1);
	attention_shape s = attention_shape_of(call);
	int64_t kv_size = s.seq_kv * s.head_dim, v_size = s.seq_kv * s.value_dim;
	int64_t doubles = kv_size + v_size + s.head_dim + 2 * s.seq_kv + s.value_dim;
	double *buffer;
	bool *attends;
	f8_status status = f8_cpu_alloc(doubles, sizeof(double), (void **)&buffer, diag);
	if (status)
		return status;
	if ((status = f8_cpu_alloc(s.seq_kv, sizeof(bool), (void **)&attends, diag))) {
		f8_free(buffer);
		return status;
	}
	attention_scratch w = {.keys = buffer, .values = buffer + kv_size};
	w.query = w.values + v_size;
	w.scores = w.query + s.head_dim;
	w.mask = w.scores + s.seq_kv;
	w.out = w.mask + s.seq_kv;
	w.attends = attends;
	int64_t group = s.heads / s.kv_heads;
	for (int64_t b = 0; b < s.batch; b++) {
		for (int64_t kvh = 0; kvh < s.kv_heads; kvh++) {
			f8_cpu_load(k, (b * s.kv_heads + kvh) * kv_size, 1, kv_size, w.keys);
			f8_cpu_load(v, (b * s.kv_heads + kvh) * v_size, 1, v_size, w.values);
			// Query head h reads kv head h / group.
			for (int64_t h = kvh * group; h < (kvh + 1) * group; h++) {
				for (int64_t i = 0; i < s.seq_q; i++) {
					int64_t row = (b * s.heads + h) * s.seq_q + i;
					f8_cpu_load(q, row * s.head_dim, 1, s.head_dim, w.query);
					double row_lse = attention_row(&s, &w, b, h, i);
					f8_cpu_store(out, row * s.value_dim, 1, s.value_dim, w.out);
					if (lse)
						f8_cpu_set(lse, row, row_lse);
				}
			}
		}
	}
	f8_free(attends);
	f8_free(buffer);
	return F8_OK;
}
