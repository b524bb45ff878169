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
 * rowsum(dout * out), exactly, where out is rounded to its dtype. AttentionPackedGrad is the same
 * kernel over q, k, v and their gradients in place in one packed tensor each.
 */
#include <math.h>   // exp, INFINITY
#include <stdint.h> // int64_t
#include <string.h> // memset

#include "ir/alloc.h"                   // f8_free
#include "runtime/cpu/kernel_forward.h" // f8_cpu_attention_shape, f8_cpu_attention_keys
#include "runtime/cpu/kernel_util.h"    // f8_cpu_load, f8_cpu_store, f8_cpu_alloc
#include "runtime/cpu/kernels.h"        // F8_CPU_KERNEL

/* Scratch of one (batch, kv head) block: its keys and values, their gradients' sums over the
 * query heads of the group, and one query row's vectors. */
typedef struct attention_scratch {
	double *k, *v, *dk, *dv;            // (seq_kv, head_dim) and (seq_kv, value_dim)
	double *q, *dout, *dq;              // (head_dim), (value_dim), (head_dim)
	double *scores, *probs, *dp, *mask; // (seq_kv) each
} attention_scratch;

static f8_status attention_scratch_create(const f8_cpu_attention_shape *s,
					  attention_scratch *scratch, f8_diag *diag) {
	int64_t n = 2 * s->seq_kv * (s->head_dim + s->value_dim) + 2 * s->head_dim + s->value_dim +
		    4 * s->seq_kv;
	double *p;
	f8_status status = f8_cpu_alloc(n, sizeof(double), (void **)&p, diag);
	*scratch = (attention_scratch){0};
	if (status || !p)
		return status;
	scratch->k = p, p += s->seq_kv * s->head_dim;
	scratch->v = p, p += s->seq_kv * s->value_dim;
	scratch->dk = p, p += s->seq_kv * s->head_dim;
	scratch->dv = p, p += s->seq_kv * s->value_dim;
	scratch->q = p, p += s->head_dim;
	scratch->dout = p, p += s->value_dim;
	scratch->dq = p, p += s->head_dim;
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
static bool attention_probabilities(const f8_cpu_attention_shape *s, attention_scratch *scratch,
				    int64_t b, int64_t h, int64_t i, int64_t *limit) {
	*limit = f8_cpu_attention_keys(s, i);
	f8_cpu_attention_mask_row(s, b, h, i, *limit, scratch->mask);
	double max = -INFINITY, sum = 0;
	for (int64_t j = 0; j < *limit; j++) {
		const double *key = scratch->k + j * s->head_dim;
		double score = s->scale * dot(scratch->q, key, s->head_dim);
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
static bool attention_row_grad(const f8_cpu_attention_shape *s, attention_scratch *scratch,
			       int64_t b, int64_t h, int64_t i) {
	int64_t limit;
	if (!attention_probabilities(s, scratch, b, h, i, &limit))
		return false;
	double weighted = 0;
	for (int64_t j = 0; j < limit; j++) {
		scratch->dp[j] = dot(scratch->dout, scratch->v + j * s->value_dim, s->value_dim);
		weighted += scratch->probs[j] * scratch->dp[j];
	}
	memset(scratch->dq, 0, (size_t)s->head_dim * sizeof(double));
	for (int64_t j = 0; j < limit; j++) {
		double p = scratch->probs[j], ds = s->scale * p * (scratch->dp[j] - weighted);
		const double *key = scratch->k + j * s->head_dim;
		double *dkey = scratch->dk + j * s->head_dim;
		double *dvalue = scratch->dv + j * s->value_dim;
		for (int64_t d = 0; d < s->head_dim; d++) {
			scratch->dq[d] += ds * key[d];
			dkey[d] += ds * scratch->q[d];
		}
		for (int64_t d = 0; d < s->value_dim; d++)
			dvalue[d] += p * scratch->dout[d];
	}
	return true;
}

/* The operands of one call: q, k, v, dout in, dq, dk, dv out (AttentionPacked's gradient: one
 * tensor for the three inputs and one for the three outputs, the shape's rows placing each). */
typedef struct attention_operands {
	const f8_rt_tensor *q, *k, *v, *dout;
	f8_rt_tensor *dq, *dk, *dv;
} attention_operands;

/* Rows 0 .. seq_kv - 1 of head h of batch b, laid out by `rows`, into out (seq_kv, dim). */
static void load_rows(const f8_rt_tensor *t, const f8_cpu_attention_rows *rows, int64_t b,
		      int64_t h, int64_t seq, int64_t dim, double *out) {
	for (int64_t j = 0; j < seq; j++)
		f8_cpu_load(t, f8_cpu_attention_row(rows, b, h, j), 1, dim, out + j * dim);
}

static void store_rows(f8_rt_tensor *t, const f8_cpu_attention_rows *rows, int64_t b, int64_t h,
		       int64_t seq, int64_t dim, const double *in) {
	for (int64_t j = 0; j < seq; j++)
		f8_cpu_store(t, f8_cpu_attention_row(rows, b, h, j), 1, dim, in + j * dim);
}

/* The rows of every query head of key head kv of batch b: dq stored per row, dk and dv summed
 * over the group in double and stored once. */
static void attention_block_grad(const attention_operands *o, const f8_cpu_attention_shape *s,
				 attention_scratch *scratch, int64_t b, int64_t kv) {
	int64_t group = s->heads / s->kv_heads;
	int64_t keys_size = s->seq_kv * s->head_dim, values_size = s->seq_kv * s->value_dim;
	load_rows(o->k, &s->k, b, kv, s->seq_kv, s->head_dim, scratch->k);
	load_rows(o->v, &s->v, b, kv, s->seq_kv, s->value_dim, scratch->v);
	memset(scratch->dk, 0, (size_t)keys_size * sizeof(double));
	memset(scratch->dv, 0, (size_t)values_size * sizeof(double));
	for (int64_t h = kv * group; h < (kv + 1) * group; h++) {
		for (int64_t i = 0; i < s->seq_q; i++) {
			int64_t q_row = f8_cpu_attention_row(&s->q, b, h, i);
			f8_cpu_load(o->q, q_row, 1, s->head_dim, scratch->q);
			f8_cpu_load(o->dout, f8_cpu_attention_row(&s->out, b, h, i), 1, s->value_dim,
				    scratch->dout);
			if (attention_row_grad(s, scratch, b, h, i))
				f8_cpu_store(o->dq, q_row, 1, s->head_dim, scratch->dq);
		}
	}
	store_rows(o->dk, &s->k, b, kv, s->seq_kv, s->head_dim, scratch->dk);
	store_rows(o->dv, &s->v, b, kv, s->seq_kv, s->value_dim, scratch->dv);
}

/* dq, dk, dv of the attention, one (batch, kv head) block at a time. */
static f8_status attention_grad(const attention_operands *operands,
				const f8_cpu_attention_shape *shape, f8_diag *diag) {
	attention_scratch scratch;
	f8_status status = attention_scratch_create(shape, &scratch, diag);
	if (status || !scratch.k) // no scratch: every output is empty
		return status;
	for (int64_t b = 0; b < shape->batch; b++)
		for (int64_t kv = 0; kv < shape->kv_heads; kv++)
			attention_block_grad(operands, shape, &scratch, b, kv);
	f8_free(scratch.k);
	return F8_OK;
}

F8_CPU_KERNEL(ATTENTION_GRAD) {
	f8_cpu_attention_shape shape = f8_cpu_attention_shape_of(call, 1, 6);
	attention_operands operands = {
		.q = call->inputs[1], .k = call->inputs[2], .v = call->inputs[3],
		.dout = call->inputs[0], .dq = &call->outputs[0], .dk = &call->outputs[1],
		.dv = &call->outputs[2]};
	return attention_grad(&operands, &shape, diag);
}

/* dqkv, packed as qkv: dq, dk and dv written in place into their heads. */
F8_CPU_KERNEL(ATTENTION_PACKED_GRAD) {
	f8_cpu_attention_shape shape = f8_cpu_attention_packed_shape_of(call, 1, 4);
	const f8_rt_tensor *qkv = call->inputs[1];
	f8_rt_tensor *dqkv = &call->outputs[0];
	attention_operands operands = {.q = qkv, .k = qkv, .v = qkv, .dout = call->inputs[0],
				       .dq = dqkv, .dk = dqkv, .dv = dqkv};
	return attention_grad(&operands, &shape, diag);
}
