/*
 * The reference kernels of RingAttention and RingAttentionGrad (ir/ops.def): context
 * parallelism's attention, with the key and value blocks going round the ring of the group's
 * ranks (call->ring; one rank without it). Rank r holds chunks r and 2 ranks - 1 - r of the
 * sequence (causal load balancing: every rank has as many keys before its queries); each step
 * attends its query rows to the block it holds, by the rows' places in the whole sequence, and
 * merges the block's partial results into the rows' running ones by their log-sum-exp, as
 * flash attention merges tiles. Everything is in double, rounded once at the end, so that the
 * result agrees with Attention's over the gathered sequence to its last bits but for the order
 * of the sums. The backward sends each block's dk and dv round with it, each rank adding its
 * rows' terms, and the block's own rank gets them back after the last step.
 */
#include <math.h>   // exp, log, INFINITY
#include <string.h> // memset

#include "ir/alloc.h"                   // f8_free
#include "runtime/cpu/kernel_forward.h" // f8_cpu_attention_shape_of
#include "runtime/cpu/kernel_util.h"    // f8_cpu_load, f8_cpu_store, f8_cpu_alloc
#include "runtime/cpu/kernels.h"        // F8_CPU_KERNEL, f8_cpu_ring

/* The ring of a call: its group's, or one rank's. */
static f8_cpu_ring ring_of(const f8_cpu_kernel_call *call) {
	return call->ring ? *call->ring : (f8_cpu_ring){.ranks = 1, .place = 0};
}

/* Refuses a call whose attribute `ranks` is not its ring's (several in one process), or whose
 * rows over several ranks are not two chunks of one size each. */
static f8_status check_ranks(const f8_cpu_kernel_call *call, f8_diag *diag) {
	int64_t ranks = f8_node_attr_int(call->node, "ranks", 1);
	uint32_t q = call->node->op == F8_OP_RING_ATTENTION ? 0 : 1;
	int64_t rows = call->inputs[q]->dims[2], kv_rows = call->inputs[q + 1]->dims[2];
	if (ranks > 1 && (rows != kv_rows || rows % 2))
		return f8_cpu_fail(call, diag, "over %lld ranks, q holds %lld rows and k %lld: each "
				   "must hold this rank's two chunks of the sequence, of one size",
				   (long long)ranks, (long long)rows, (long long)kv_rows);
	if (ranks == ring_of(call).ranks)
		return F8_OK;
	f8_status status = f8_cpu_fail_unsupported(call, diag, "a ring of %lld ranks needs more "
						   "than one rank; this one has %lld",
						   (long long)ranks, (long long)ring_of(call).ranks);
	f8_diag_hint(diag, "run it under mpirun with the context-parallel ranks");
	return status;
}

/* The place in the whole sequence of row `i` of the `rows` rows rank `place` of `ranks` holds
 * (its two chunks: place and 2 ranks - 1 - place). */
static int64_t position(int64_t i, int64_t rows, int64_t place, int64_t ranks) {
	int64_t chunk = rows / 2;
	return i < chunk ? place * chunk + i : (2 * ranks - 1 - place) * chunk + (i - chunk);
}

/* One step round the ring, or nothing on one rank: `block` (doubles) is sent on and the one
 * before's arrives in its place (through `spare`, of the same size). */
static f8_status shift(const f8_cpu_ring *ring, double **block, double **spare, int64_t count,
		       f8_diag *diag) {
	if (ring->ranks == 1)
		return F8_OK;
	f8_status status = ring->shift(ring->context, *block, *spare,
				       (size_t)count * sizeof(double), diag);
	double *received = *spare;
	*spare = *block;
	*block = received;
	return status;
}

/* A call's shape and what it holds in double. */
typedef struct ring_call {
	f8_cpu_attention_shape s;
	f8_cpu_ring ring;
	int64_t q_size, k_size, v_size; // per (batch, head): rows x dims
} ring_call;

static ring_call ring_call_of(const f8_cpu_kernel_call *call, uint32_t q_input) {
	enum { NO_MASK = 99 }; // an input it never has
	ring_call c = {.s = f8_cpu_attention_shape_of(call, q_input, NO_MASK), .ring = ring_of(call)};
	c.q_size = c.s.seq_q * c.s.head_dim;
	c.k_size = c.s.seq_kv * c.s.head_dim;
	c.v_size = c.s.seq_kv * c.s.value_dim;
	return c;
}

/* Whether query row i (of this rank) attends key row j of the block of rank `from`. */
static bool attends(const ring_call *c, int64_t i, int64_t j, int64_t from) {
	return !c->s.causal || position(j, c->s.seq_kv, from, c->ring.ranks) <=
				       position(i, c->s.seq_q, c->ring.place, c->ring.ranks);
}

static double dot(const double *a, const double *b, int64_t n) {
	double sum = 0.0;
	for (int64_t d = 0; d < n; d++)
		sum += a[d] * b[d];
	return sum;
}

/*
 * This rank's query rows `q` attended to the block of rank `from` (keys `k` and values `v` of
 * every (batch, kv head)), merged into the rows' running maxima, sums and (with `v`) weighted
 * values `acc`: each row's scores against the block, the running results rescaled once to the
 * new maximum. Without `v`, only the maxima and sums (the backward's log-sum-exp).
 */
static void attend_block(const ring_call *c, const double *q, const double *k, const double *v,
			 int64_t from, double *max, double *sum, double *acc, double *scores) {
	const f8_cpu_attention_shape *s = &c->s;
	int64_t group = s->heads / s->kv_heads;
	for (int64_t b = 0; b < s->batch; b++) {
		for (int64_t h = 0; h < s->heads; h++) {
			int64_t kv = b * s->kv_heads + h / group;
			const double *keys = k + kv * c->k_size;
			for (int64_t i = 0; i < s->seq_q; i++) {
				int64_t row = (b * s->heads + h) * s->seq_q + i;
				const double *query = q + row * s->head_dim;
				double block_max = -INFINITY;
				for (int64_t j = 0; j < s->seq_kv; j++) {
					scores[j] = attends(c, i, j, from)
						? s->scale * dot(query, keys + j * s->head_dim, s->head_dim)
						: -INFINITY;
					block_max = scores[j] > block_max ? scores[j] : block_max;
				}
				if (block_max == -INFINITY)
					continue;
				double top = block_max > max[row] ? block_max : max[row];
				double keep = exp(max[row] - top); // 0 for the first block
				double *out = acc ? acc + row * s->value_dim : NULL;
				sum[row] *= keep;
				for (int64_t d = 0; out && d < s->value_dim; d++)
					out[d] *= keep;
				for (int64_t j = 0; j < s->seq_kv; j++) {
					if (scores[j] == -INFINITY)
						continue;
					double p = exp(scores[j] - top);
					sum[row] += p;
					const double *value = v ? v + kv * c->v_size + j * s->value_dim : NULL;
					for (int64_t d = 0; out && d < s->value_dim; d++)
						out[d] += p * value[d];
				}
				max[row] = top;
			}
		}
	}
}

F8_CPU_KERNEL(RING_ATTENTION) {
	f8_status status = check_ranks(call, diag);
	if (status)
		return status;
	ring_call c = ring_call_of(call, 0);
	const f8_cpu_attention_shape *s = &c.s;
	int64_t rows = s->batch * s->heads * s->seq_q;
	int64_t keys = s->batch * s->kv_heads * c.k_size, values = s->batch * s->kv_heads * c.v_size;
	int64_t block_count = keys + values;
	int64_t q_count = rows * s->head_dim, acc_count = rows * s->value_dim;
	int64_t total = q_count + acc_count + 2 * rows + 2 * block_count + s->seq_kv;
	double *buffer;
	if ((status = f8_cpu_alloc(total, sizeof(double), (void **)&buffer, diag)))
		return status;
	memset(buffer, 0, (size_t)total * sizeof(double)); // the sums start at 0
	double *q = buffer, *acc = q + q_count, *max = acc + acc_count, *sum = max + rows;
	double *block = sum + rows, *spare = block + block_count, *scores = spare + block_count;
	f8_cpu_load(call->inputs[0], 0, 1, q_count, q);
	f8_cpu_load(call->inputs[1], 0, 1, keys, block);
	f8_cpu_load(call->inputs[2], 0, 1, values, block + keys);
	for (int64_t r = 0; r < rows; r++)
		max[r] = -INFINITY;
	for (int64_t step = 0; !status && step < c.ring.ranks; step++) {
		int64_t from = (c.ring.place - step + c.ring.ranks) % c.ring.ranks;
		attend_block(&c, q, block, block + keys, from, max, sum, acc, scores);
		if (step + 1 < c.ring.ranks)
			status = shift(&c.ring, &block, &spare, block_count, diag);
	}
	f8_rt_tensor *lse = f8_cpu_output(call, 1);
	for (int64_t row = 0; !status && row < rows; row++) {
		double *out = acc + row * s->value_dim;
		for (int64_t d = 0; d < s->value_dim; d++)
			out[d] = sum[row] > 0 ? out[d] / sum[row] : 0.0;
		f8_cpu_store(&call->outputs[0], row * s->value_dim, 1, s->value_dim, out);
		if (lse)
			f8_cpu_set(lse, row, sum[row] > 0 ? max[row] + log(sum[row]) : -INFINITY);
	}
	f8_free(buffer);
	return status;
}

/* The backward: with p = exp(scale q k^T - lse) and D = rowsum(dout * out) per row,
 * dv = p^T dout, ds = p * (dout v^T - D), dq = scale ds k, dk = scale ds^T q; dk and dv
 * accumulate in the block as it goes round. The log-sum-exp is made again in double by a first
 * round of the ring (the forward's output is f32), as Attention's backward recomputes it. */
F8_CPU_KERNEL(RING_ATTENTION_GRAD) {
	f8_status status = check_ranks(call, diag);
	if (status)
		return status;
	ring_call c = ring_call_of(call, 1);
	const f8_cpu_attention_shape *s = &c.s;
	int64_t rows = s->batch * s->heads * s->seq_q, group = s->heads / s->kv_heads;
	int64_t keys = s->batch * s->kv_heads * c.k_size, values = s->batch * s->kv_heads * c.v_size;
	int64_t block_count = 2 * (keys + values); // k, v, dk, dv
	(void)call->inputs[5]; // the forward's f32 log-sum-exp: made again in double below
	int64_t q_count = rows * s->head_dim, o_count = rows * s->value_dim;
	int64_t total = 2 * q_count + 2 * o_count + 3 * rows + 2 * block_count + s->seq_kv;
	double *buffer;
	if ((status = f8_cpu_alloc(total, sizeof(double), (void **)&buffer, diag)))
		return status;
	memset(buffer, 0, (size_t)total * sizeof(double)); // dq, dk and dv start at 0
	double *q = buffer, *dq = q + q_count, *dout = dq + q_count, *out = dout + o_count;
	double *lse = out + o_count, *delta = lse + rows, *sum = delta + rows;
	double *block = sum + rows, *spare = block + block_count, *scores = spare + block_count;
	f8_cpu_load(call->inputs[0], 0, 1, o_count, dout);
	f8_cpu_load(call->inputs[1], 0, 1, q_count, q);
	f8_cpu_load(call->inputs[2], 0, 1, keys, block);
	f8_cpu_load(call->inputs[3], 0, 1, values, block + keys);
	f8_cpu_load(call->inputs[4], 0, 1, o_count, out);
	for (int64_t row = 0; row < rows; row++) {
		delta[row] = dot(dout + row * s->value_dim, out + row * s->value_dim, s->value_dim);
		lse[row] = -INFINITY; // the running maximum, until the round is done
	}
	for (int64_t step = 0; !status && step < c.ring.ranks; step++) { // a whole round
		int64_t from = (c.ring.place - step + c.ring.ranks) % c.ring.ranks;
		attend_block(&c, q, block, NULL, from, lse, sum, NULL, scores);
		status = shift(&c.ring, &block, &spare, block_count, diag);
	}
	for (int64_t row = 0; row < rows; row++)
		lse[row] = sum[row] > 0 ? lse[row] + log(sum[row]) : -INFINITY;
	for (int64_t step = 0; !status && step < c.ring.ranks; step++) {
		int64_t from = (c.ring.place - step + c.ring.ranks) % c.ring.ranks;
		double *k_all = block, *v_all = block + keys;
		double *dk_all = v_all + values, *dv_all = dk_all + keys;
		for (int64_t b = 0; b < s->batch; b++) {
			for (int64_t h = 0; h < s->heads; h++) {
				int64_t kv = b * s->kv_heads + h / group;
				const double *k = k_all + kv * c.k_size, *v = v_all + kv * c.v_size;
				double *dk = dk_all + kv * c.k_size, *dv = dv_all + kv * c.v_size;
				for (int64_t i = 0; i < s->seq_q; i++) {
					int64_t row = (b * s->heads + h) * s->seq_q + i;
					if (lse[row] == -INFINITY) // attends no key: no gradient
						continue;
					const double *query = q + row * s->head_dim;
					const double *g = dout + row * s->value_dim;
					double *dquery = dq + row * s->head_dim;
					for (int64_t j = 0; j < s->seq_kv; j++) {
						if (!attends(&c, i, j, from))
							continue;
						const double *key = k + j * s->head_dim;
						double p = exp(s->scale * dot(query, key, s->head_dim) -
							       lse[row]);
						double dp = dot(g, v + j * s->value_dim, s->value_dim);
						double ds = p * (dp - delta[row]);
						for (int64_t d = 0; d < s->value_dim; d++)
							dv[j * s->value_dim + d] += p * g[d];
						for (int64_t d = 0; d < s->head_dim; d++) {
							dquery[d] += s->scale * ds * key[d];
							dk[j * s->head_dim + d] += s->scale * ds * query[d];
						}
					}
				}
			}
		}
		// Every step sends the block on, the last one back to its own rank.
		status = shift(&c.ring, &block, &spare, block_count, diag);
	}
	if (!status) {
		f8_cpu_store(&call->outputs[0], 0, 1, q_count, dq);
		f8_cpu_store(&call->outputs[1], 0, 1, keys, block + keys + values);
		f8_cpu_store(&call->outputs[2], 0, 1, values, block + 2 * keys + values);
	}
	f8_free(buffer);
	return status;
}
