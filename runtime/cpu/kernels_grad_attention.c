/*
 * Reference kernel of AttentionGrad (ir/infer_backward.c): the gradients of q, k and v of
 * softmax(q k^T * scale + mask) v, with the forward's causal rule (query i attends the keys
 * j <= i + seq_kv - seq_q), grouped-query heads (query head h reads key head h / group), a
 * bool mask (true attends) or an additive one, and rows that attend nothing giving 0.
 *
 * The probabilities are recomputed in double from q, k and the mask, each row normalized by
 * its own max and sum rather than by the f32 lse input: the exps are needed either way, and
 * the f32 rounding of lse would leave an f64 gradient check about 1e-7 off and rows that sum
 * to 1 only within it. The out input is not read either: sum_j p_j dp_j replaces the usual
 * rowsum(dout * out), exactly, where out is rounded to its dtype.
 */
#include <math.h>   // exp, sqrt, INFINITY
#include <stdint.h> // int64_t
#include <string.h> // memset

#include "ir/alloc.h"                // f8_free
#include "runtime/cpu/kernel_util.h" // f8_cpu_load, f8_cpu_store, f8_cpu_alloc
#include "runtime/cpu/kernels.h"     // F8_CPU_KERNEL

/* The sizes and attributes of one AttentionGrad call. */
typedef struct attention_shape {
	int64_t batch, heads, kv_heads, seq_q, seq_kv, dim, dim_v;
	double scale;
	bool causal;
	const f8_rt_tensor *mask; // NULL when none
	bool bool_mask;
	int64_t mask_strides[4]; // broadcast to (batch, heads, seq_q, seq_kv): 0 where it is 1
} attention_shape;

static attention_shape attention_shape_of(const f8_cpu_kernel_call *call) {
	const f8_rt_tensor *q = call->inputs[1], *k = call->inputs[2], *v = call->inputs[3];
	attention_shape shape = {
		.batch = q->dims[0], .heads = q->dims[1], .kv_heads = k->dims[1],
		.seq_q = q->dims[2], .seq_kv = k->dims[2], .dim = q->dims[3], .dim_v = v->dims[3],
		.causal = f8_node_attr_int(call->node, "causal", 0),
		.mask = f8_cpu_input(call, 6),
	};
	shape.scale = f8_node_attr_float(call->node, "scale", 1.0 / sqrt((double)shape.dim));
	if (shape.mask) {
		const f8_rt_tensor *mask = shape.mask;
		shape.bool_mask = mask->dtype == F8_DTYPE_BOOL;
		int64_t stride = 1;
		for (int d = 3; d >= 0; d--) {
			int md = d - (4 - mask->rank);
			shape.mask_strides[d] = md < 0 || mask->dims[md] == 1 ? 0 : stride;
			if (md >= 0)
				stride *= mask->dims[md];
		}
	}
	return shape;
}

/* Scratch of one (batch, kv head) block: its keys and values, their gradients' sums over the
 * query heads of the group, and one query row's vectors. */
typedef struct attention_scratch {
	double *k, *v, *dk, *dv;           // (seq_kv, dim) and (seq_kv, dim_v)
	double *q, *dout, *dq;             // (dim), (dim_v), (dim)
	double *scores, *probs, *dp, *mask; // (seq_kv) each
} attention_scratch;

static f8_status attention_scratch_create(const attention_shape *s, attention_scratch *scratch,
					  f8_diag *diag) {
	int64_t n = 2 * s->seq_kv * (s->dim + s->dim_v) + 2 * s->dim + s->dim_v + 4 * s->seq_kv;
	double *p;
	f8_status status = f8_cpu_alloc(n, sizeof(double), (void **)&p, diag);
	*scratch = (attention_scratch){0};
	if (status || !p)
		return status;
	scratch->k = p, p += s->seq_kv * s->dim;
	scratch->v = p, p += s->seq_kv * s->dim_v;
	scratch->dk = p, p += s->seq_kv * s->dim;
	scratch->dv = p, p += s->seq_kv * s->dim_v;
	scratch->q = p, p += s->dim;
	scratch->dout = p, p += s->dim_v;
	scratch->dq = p, p += s->dim;
	scratch->scores = p, p += s->seq_kv;
	scratch->probs = p, p += s->seq_kv;
	scratch->dp = p, p += s->seq_kv;
	scratch->mask = p;
	return F8_OK;
}

static double dot(const double *a, const double *b, int64_t n) {
	double sum = 0;
	for (int64_t i = 0; i < n; i++)
		sum += a[i] * b[i];
	return sum;
}

/*
 * The probabilities of query row i of (batch b, head h) into scratch->probs[0..*limit), the
 * keys it may attend being those below *limit (the causal rule); false when it attends none.
 */
static bool attention_probabilities(const attention_shape *s, attention_scratch *scratch,
				    int64_t b, int64_t h, int64_t i, int64_t *limit) {
	int64_t end = s->causal ? i + s->seq_kv - s->seq_q + 1 : s->seq_kv;
	*limit = end < 0 ? 0 : end > s->seq_kv ? s->seq_kv : end;
	if (s->mask) {
		const int64_t *strides = s->mask_strides;
		int64_t offset = b * strides[0] + h * strides[1] + i * strides[2];
		f8_cpu_load(s->mask, offset, strides[3], *limit, scratch->mask);
	}
	double max = -INFINITY, sum = 0;
	for (int64_t j = 0; j < *limit; j++) {
		double score = s->scale * dot(scratch->q, scratch->k + j * s->dim, s->dim);
		if (s->mask)
			score = s->bool_mask ? (scratch->mask[j] != 0 ? score : -INFINITY)
					     : score + scratch->mask[j];
		scratch->scores[j] = score;
		max = score > max ? score : max;
	}
	if (max == -INFINITY)
		return false;
	for (int64_t j = 0; j < *limit; j++)
		sum += scratch->probs[j] = exp(scratch->scores[j] - max);
	for (int64_t j = 0; j < *limit; j++)
		scratch->probs[j] /= sum;
	return true;
}

/*
 * One query row: with p its probabilities and dp_j = dout . v_j,
 *   ds_j = p_j (dp_j - sum_j p_j dp_j); dq = scale sum_j ds_j k_j;
 *   dk_j += scale ds_j q; dv_j += p_j dout.
 * dq into scratch->dq; false (dq untouched) when the row attends nothing.
 */
static bool attention_row_grad(const attention_shape *s, attention_scratch *scratch, int64_t b,
			       int64_t h, int64_t i) {
	int64_t limit;
	if (!attention_probabilities(s, scratch, b, h, i, &limit))
		return false;
	double weighted = 0;
	for (int64_t j = 0; j < limit; j++) {
		scratch->dp[j] = dot(scratch->dout, scratch->v + j * s->dim_v, s->dim_v);
		weighted += scratch->probs[j] * scratch->dp[j];
	}
	memset(scratch->dq, 0, (size_t)s->dim * sizeof(double));
	for (int64_t j = 0; j < limit; j++) {
		double p = scratch->probs[j], ds = s->scale * p * (scratch->dp[j] - weighted);
		const double *key = scratch->k + j * s->dim;
		double *dkey = scratch->dk + j * s->dim, *dvalue = scratch->dv + j * s->dim_v;
		for (int64_t d = 0; d < s->dim; d++) {
			scratch->dq[d] += ds * key[d];
			dkey[d] += ds * scratch->q[d];
		}
		for (int64_t d = 0; d < s->dim_v; d++)
			dvalue[d] += p * scratch->dout[d];
	}
	return true;
}

/* The rows of every query head of key head kv of batch b: dq stored per row, dk and dv summed
 * over the group in double and stored once. */
static void attention_block_grad(const f8_cpu_kernel_call *call, const attention_shape *s,
				 attention_scratch *scratch, int64_t b, int64_t kv) {
	const f8_rt_tensor *dout = call->inputs[0], *q = call->inputs[1];
	f8_rt_tensor *dq = &call->outputs[0];
	int64_t kv_block = (b * s->kv_heads + kv) * s->seq_kv, group = s->heads / s->kv_heads;
	f8_cpu_load(call->inputs[2], kv_block * s->dim, 1, s->seq_kv * s->dim, scratch->k);
	f8_cpu_load(call->inputs[3], kv_block * s->dim_v, 1, s->seq_kv * s->dim_v, scratch->v);
	memset(scratch->dk, 0, (size_t)(s->seq_kv * s->dim) * sizeof(double));
	memset(scratch->dv, 0, (size_t)(s->seq_kv * s->dim_v) * sizeof(double));
	for (int64_t h = kv * group; h < (kv + 1) * group; h++) {
		for (int64_t i = 0; i < s->seq_q; i++) {
			int64_t row = (b * s->heads + h) * s->seq_q + i;
			f8_cpu_load(q, row * s->dim, 1, s->dim, scratch->q);
			f8_cpu_load(dout, row * s->dim_v, 1, s->dim_v, scratch->dout);
			if (attention_row_grad(s, scratch, b, h, i))
				f8_cpu_store(dq, row * s->dim, 1, s->dim, scratch->dq);
		}
	}
	f8_cpu_store(&call->outputs[1], kv_block * s->dim, 1, s->seq_kv * s->dim, scratch->dk);
	f8_cpu_store(&call->outputs[2], kv_block * s->dim_v, 1, s->seq_kv * s->dim_v,
		     scratch->dv);
}

/* dq, dk, dv of the attention, one (batch, kv head) block at a time. */
F8_CPU_KERNEL(ATTENTION_GRAD) {
	attention_shape shape = attention_shape_of(call);
	attention_scratch scratch;
	f8_status status = attention_scratch_create(&shape, &scratch, diag);
	if (status || !scratch.k) // no scratch: every output is empty
		return status;
	for (int64_t b = 0; b < shape.batch; b++)
		for (int64_t kv = 0; kv < shape.kv_heads; kv++)
			attention_block_grad(call, &shape, &scratch, b, kv);
	f8_free(scratch.k);
	return F8_OK;
}
