/*
 * The parts of forward kernels that other kernels compute again: norm statistics, the attention
 * shape, the router's scores and the MoE permutation (see kernel_forward.h).
 */
#include "runtime/cpu/kernel_forward.h" // f8_cpu_attention_shape, f8_cpu_moe_rows

#include <assert.h> // assert
#include <math.h>   // sqrt
#include <stdlib.h> // qsort

#include "ir/alloc.h"                // f8_free
#include "runtime/cpu/kernel_util.h" // f8_cpu_axis, f8_cpu_load, f8_cpu_sigmoid, f8_cpu_alloc

/* Norms. */

f8_status f8_cpu_norm_create(const f8_cpu_kernel_call *call, const f8_rt_tensor *x,
			     const f8_rt_tensor *gamma, int64_t scratch_rows, f8_cpu_norm *norm,
			     f8_diag *diag) {
	int axis = f8_cpu_axis(f8_node_attr_int(call->node, "axis", -1), x->rank);
	*norm = (f8_cpu_norm){.rows = f8_cpu_dims_product(x, 0, axis),
			      .cols = f8_cpu_dims_product(x, axis, x->rank),
			      .epsilon = f8_node_attr_float(call->node, "epsilon", 1e-5)};
	f8_status status = f8_cpu_alloc((1 + scratch_rows) * norm->cols, sizeof(double),
					(void **)&norm->scratch, diag);
	if (!status)
		f8_cpu_load(gamma, 0, 1, norm->cols, norm->scratch);
	return status;
}

double f8_cpu_layer_norm_rstd(const f8_cpu_norm *norm, const double *x, double *mean) {
	double sum = 0.0, squares = 0.0;
	for (int64_t j = 0; j < norm->cols; j++)
		sum += x[j];
	*mean = sum / (double)norm->cols;
	for (int64_t j = 0; j < norm->cols; j++)
		squares += (x[j] - *mean) * (x[j] - *mean);
	return 1.0 / sqrt(squares / (double)norm->cols + norm->epsilon);
}

double f8_cpu_rms_norm_rstd(const f8_cpu_norm *norm, const double *x) {
	double squares = 0.0;
	for (int64_t j = 0; j < norm->cols; j++)
		squares += x[j] * x[j];
	return 1.0 / sqrt(squares / (double)norm->cols + norm->epsilon);
}

/* Attention. */

/* The attributes and the mask of the call, into the shape whose sizes are filled. */
static void attention_attributes(const f8_cpu_kernel_call *call, uint32_t mask_input,
				 f8_cpu_attention_shape *shape) {
	f8_cpu_attention_shape s = *shape;
	s.causal = f8_node_attr_int(call->node, "causal", 0);
	s.mask = f8_cpu_input(call, mask_input);
	s.scale = f8_node_attr_float(call->node, "scale", 1.0 / sqrt((double)s.head_dim));
	if (s.mask) {
		s.bool_mask = s.mask->dtype == F8_DTYPE_BOOL;
		int64_t stride = 1;
		for (int d = 3; d >= 0; d--) {
			int md = d - (4 - s.mask->rank);
			s.mask_strides[d] = md < 0 || s.mask->dims[md] == 1 ? 0 : stride;
			if (md >= 0)
				stride *= s.mask->dims[md];
		}
	}
	*shape = s;
}

/* The rows of a (batch, heads, seq, dim) tensor of its own. */
static f8_cpu_attention_rows own_rows(int64_t heads, int64_t seq, int64_t dim) {
	return (f8_cpu_attention_rows){.base = 0, .batch = heads * seq * dim, .head = seq * dim,
				       .seq = dim};
}

f8_cpu_attention_shape f8_cpu_attention_shape_of(const f8_cpu_kernel_call *call,
						 uint32_t q_input, uint32_t mask_input) {
	const f8_rt_tensor *q = call->inputs[q_input], *k = call->inputs[q_input + 1];
	const f8_rt_tensor *v = call->inputs[q_input + 2];
	f8_cpu_attention_shape s = {
		.batch = q->dims[0], .heads = q->dims[1], .kv_heads = k->dims[1],
		.seq_q = q->dims[2], .seq_kv = k->dims[2], .head_dim = q->dims[3],
		.value_dim = v->dims[3],
	};
	s.q = own_rows(s.heads, s.seq_q, s.head_dim);
	s.k = own_rows(s.kv_heads, s.seq_kv, s.head_dim);
	s.v = own_rows(s.kv_heads, s.seq_kv, s.value_dim);
	s.out = own_rows(s.heads, s.seq_q, s.value_dim);
	attention_attributes(call, mask_input, &s);
	return s;
}

f8_cpu_attention_shape f8_cpu_attention_packed_shape_of(const f8_cpu_kernel_call *call,
							uint32_t qkv_input, uint32_t mask_input) {
	const f8_rt_tensor *qkv = call->inputs[qkv_input];
	int64_t heads = f8_node_attr_int(call->node, "heads", 1);
	int64_t kv_heads = f8_node_attr_int(call->node, "kv_heads", heads);
	int64_t width = qkv->dims[2], d = width / (heads + 2 * kv_heads); // inference checked it
	f8_cpu_attention_shape s = {
		.batch = qkv->dims[0], .heads = heads, .kv_heads = kv_heads, .seq_q = qkv->dims[1],
		.seq_kv = qkv->dims[1], .head_dim = d, .value_dim = d,
	};
	int64_t token = width, sequence = qkv->dims[1] * width;
	s.q = (f8_cpu_attention_rows){.base = 0, .batch = sequence, .head = d, .seq = token};
	s.k = (f8_cpu_attention_rows){.base = heads * d, .batch = sequence, .head = d, .seq = token};
	s.v = (f8_cpu_attention_rows){.base = (heads + kv_heads) * d, .batch = sequence, .head = d,
				      .seq = token};
	s.out = (f8_cpu_attention_rows){.base = 0, .batch = qkv->dims[1] * heads * d, .head = d,
					.seq = heads * d};
	attention_attributes(call, mask_input, &s);
	return s;
}

int64_t f8_cpu_attention_keys(const f8_cpu_attention_shape *shape, int64_t i) {
	int64_t end = shape->causal ? i + shape->seq_kv - shape->seq_q + 1 : shape->seq_kv;
	return end < 0 ? 0 : end > shape->seq_kv ? shape->seq_kv : end;
}

void f8_cpu_attention_mask_row(const f8_cpu_attention_shape *shape, int64_t b, int64_t h,
			       int64_t i, int64_t n, double *out) {
	const int64_t *strides = shape->mask_strides;
	if (shape->mask)
		f8_cpu_load(shape->mask, b * strides[0] + h * strides[1] + i * strides[2],
			    strides[3], n, out);
}

/* Mixture of experts. */

void f8_cpu_router_scores(double *x, int64_t experts, bool sigmoid) {
	if (!sigmoid) {
		f8_cpu_softmax(x, experts);
		return;
	}
	for (int64_t e = 0; e < experts; e++)
		x[e] = f8_cpu_sigmoid(x[e]);
}

f8_status f8_cpu_moe_expert(const f8_cpu_kernel_call *call, const f8_rt_tensor *indices,
			    int64_t copy, int64_t experts, double *expert, f8_diag *diag) {
	*expert = f8_cpu_get(indices, copy);
	if (*expert >= 0 && (experts <= 0 || *expert < (double)experts))
		return F8_OK;
	long long token = copy / indices->dims[1], choice = copy % indices->dims[1];
	f8_status status;
	if (*expert < 0)
		status = f8_cpu_fail(call, diag, "expert index %.0f of token %lld (choice %lld) is "
				     "negative", *expert, token, choice);
	else
		status = f8_cpu_fail(call, diag, "expert index %.0f of token %lld (choice %lld) is "
				     "outside [0, %lld)", *expert, token, choice,
				     (long long)experts);
	f8_diag_hint(diag, "the indices must be a Router's, over as many experts");
	return status;
}

/* A token copy and its expert, the sort key of the permutation. */
typedef struct moe_copy {
	double expert; // exact: an integer index read as a double, compared as read
	int64_t copy;
} moe_copy;

/* By expert, then by copy: a total order, so that qsort gives a stable sort's result. */
static int compare_copies(const void *a, const void *b) {
	const moe_copy *x = a, *y = b;
	if (x->expert != y->expert)
		return x->expert < y->expert ? -1 : 1;
	return (x->copy > y->copy) - (x->copy < y->copy);
}

f8_status f8_cpu_moe_rows(const f8_cpu_kernel_call *call, const f8_rt_tensor *indices,
			  int64_t experts, int64_t **rows, int64_t *counts, f8_diag *diag) {
	int64_t n = f8_rt_tensor_numel(indices);
	moe_copy *copies;
	*rows = NULL;
	f8_status status = f8_cpu_alloc(n, sizeof(moe_copy), (void **)&copies, diag);
	for (int64_t c = 0; !status && c < n; c++) {
		copies[c].copy = c;
		status = f8_cpu_moe_expert(call, indices, c, experts, &copies[c].expert, diag);
	}
	if (!status)
		status = f8_cpu_alloc(n, sizeof(int64_t), (void **)rows, diag);
	if (!status && n > 0) {
		qsort(copies, (size_t)n, sizeof(moe_copy), compare_copies);
		for (int64_t row = 0; row < n; row++)
			(*rows)[copies[row].copy] = row;
	}
	if (!status && counts) {
		assert(experts > 0);
		for (int64_t e = 0; e < experts; e++)
			counts[e] = 0;
		for (int64_t row = 0; row < n; row++) // checked below experts
			counts[(int64_t)copies[row].expert]++;
	}
	f8_free(copies);
	return status;
}

f8_status f8_cpu_moe_check_counts(const f8_cpu_kernel_call *call, const f8_rt_tensor *counts,
				  int64_t rows, int64_t *largest, int64_t *total, f8_diag *diag) {
	int64_t sum = 0, experts = counts->dims[0];
	*largest = 0;
	if (total)
		*total = 0;
	for (int64_t e = 0; e < experts; e++) {
		double count = f8_cpu_get(counts, e);
		if (!(count >= 0 && count <= (double)(rows - sum)))
			return f8_cpu_fail(call, diag, "the counts (expert %lld has %.0f rows "
					   "after %lld) do not fit the %lld rows of x",
					   (long long)e, count, (long long)sum, (long long)rows);
		sum += (int64_t)count;
		*largest = (int64_t)count > *largest ? (int64_t)count : *largest;
	}
	if (total)
		*total = sum;
	return F8_OK;
}
