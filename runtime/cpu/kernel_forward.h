/*
 * The parts of forward kernels that other kernels compute again. The gradient kernels
 * (kernels_grad_*.c) recompute a forward's intermediates in double from its inputs rather than
 * read its f32 outputs, and MoECombine undoes MoEDispatch's permutation from the same indices:
 * each part is defined once here, so that both sides compute the same thing by construction.
 *   - a norm's rows, columns and epsilon, LayerNorm's mean and rstd, RMSNorm's rstd;
 *   - the shape of an Attention call, its mask's rows and the keys its causal rule leaves;
 *   - the router's scores, the check of an expert index, the permutation of the token copies
 *     into expert order, and the check of GroupedLinear's rows per expert.
 */
#ifndef F8_RUNTIME_CPU_KERNEL_FORWARD_H
#define F8_RUNTIME_CPU_KERNEL_FORWARD_H

#include <stdbool.h> // bool
#include <stdint.h>  // int64_t, uint32_t

#include "ir/diag.h"             // f8_status, f8_diag
#include "runtime/cpu/kernels.h" // f8_cpu_kernel_call
#include "runtime/tensor.h"      // f8_rt_tensor

/* Norms: LayerNorm, RMSNorm and their gradients. */

/* A norm as LayerNorm, RMSNorm and their gradients read it from their node, and its scratch. */
typedef struct f8_cpu_norm {
	int64_t rows;    // the product of x's dims before the node's axis (default -1)
	int64_t cols;    // the product of the rest: the length of one normalized row
	double epsilon;  // the node's epsilon (default 1e-5)
	double *scratch; // (1 + scratch rows, cols): gamma, then the kernel's rows; for f8_free
} f8_cpu_norm;

/* The norm that `call` takes of `x` into *norm, its scratch allocated (NULL when empty) with
 * gamma (cols) loaded into its first row. F8_ERR_NOMEM (nothing allocated) on failure. */
f8_status f8_cpu_norm_create(const f8_cpu_kernel_call *call, const f8_rt_tensor *x,
			     const f8_rt_tensor *gamma, int64_t scratch_rows, f8_cpu_norm *norm,
			     f8_diag *diag);

/* LayerNorm's statistics of the row x[0..norm->cols): its mean into *mean, and returned
 * 1/sqrt(biased variance + epsilon). */
double f8_cpu_layer_norm_rstd(const f8_cpu_norm *norm, const double *x, double *mean);

/* RMSNorm's 1/sqrt(mean(x^2) + epsilon) of the row x[0..norm->cols). */
double f8_cpu_rms_norm_rstd(const f8_cpu_norm *norm, const double *x);

/* Attention and its gradient. */

/* Where an operand's rows lie: row i of head h of batch b starts at element
 * base + b * batch + h * head + i * seq, its head_dim (or value_dim) elements at unit stride.
 * Attention's operands are (batch, heads, seq, dim) tensors of their own; AttentionPacked's q,
 * k and v are the heads of one (batch, seq, (heads + 2 kv_heads) * d) tensor. */
typedef struct f8_cpu_attention_rows {
	int64_t base, batch, head, seq;
} f8_cpu_attention_rows;

static inline int64_t f8_cpu_attention_row(const f8_cpu_attention_rows *rows, int64_t b,
					   int64_t h, int64_t i) {
	return rows->base + b * rows->batch + h * rows->head + i * rows->seq;
}

/* The sizes, attributes and operand layouts of one Attention (or AttentionGrad) call, packed
 * or not. The gradients of q, k, v and out lie as they do. */
typedef struct f8_cpu_attention_shape {
	int64_t batch, heads, kv_heads, seq_q, seq_kv, head_dim, value_dim;
	double scale;
	bool causal;
	const f8_rt_tensor *mask; // NULL, bool (true attends) or additive
	bool bool_mask;           // the mask is bool
	int64_t mask_strides[4];  // element strides of the mask over (batch, heads, seq_q, seq_kv),
				  // 0 where it broadcasts
	f8_cpu_attention_rows q, k, v, out;
} f8_cpu_attention_shape;

/* The shape of the call whose q (batch, heads, seq_q, head_dim), k (batch, kv_heads, seq_kv,
 * head_dim) and v (batch, kv_heads, seq_kv, value_dim) are inputs q_input, q_input + 1 and
 * q_input + 2, and whose optional mask is input mask_input. */
f8_cpu_attention_shape f8_cpu_attention_shape_of(const f8_cpu_kernel_call *call,
						 uint32_t q_input, uint32_t mask_input);

/* The shape of an AttentionPacked (or its gradient's) call whose qkv (batch, seq,
 * (heads + 2 kv_heads) * d) is input qkv_input, heads and kv_heads the node's attributes, and
 * whose optional mask is input mask_input; out (batch, seq, heads * d). */
f8_cpu_attention_shape f8_cpu_attention_packed_shape_of(const f8_cpu_kernel_call *call,
							uint32_t qkv_input, uint32_t mask_input);

/* How many keys query row i may attend, keys 0 .. count - 1: all of them, or with the causal
 * rule those j <= i + seq_kv - seq_q (none, for a row before them all). */
int64_t f8_cpu_attention_keys(const f8_cpu_attention_shape *shape, int64_t i);

/* Keys 0 .. n - 1 of the mask's row for query i of batch b, head h, into out[n]; nothing
 * without a mask. */
void f8_cpu_attention_mask_row(const f8_cpu_attention_shape *shape, int64_t b, int64_t h,
			       int64_t i, int64_t n, double *out);

/* Mixture of experts: Router, MoEDispatch, GroupedLinear, MoECombine and their gradients. */

/* Router's scores of one token's logits x[0..experts), in place: their softmax, or with
 * `sigmoid` each one's sigmoid. */
void f8_cpu_router_scores(double *x, int64_t experts, bool sigmoid);

/*
 * Expert index `copy` of `indices` (tokens, top_k; copy t * top_k + k is token t's choice k)
 * into *expert: F8_OK, or a failure of the call naming the token and the choice when the index
 * is negative or, with `experts` > 0, not below `experts`.
 */
f8_status f8_cpu_moe_expert(const f8_cpu_kernel_call *call, const f8_rt_tensor *indices,
			    int64_t copy, int64_t experts, double *expert, f8_diag *diag);

/*
 * The permutation of MoEDispatch, which MoECombine and the gradients of both undo: the copies
 * of indices (tokens, top_k) sorted by expert index, in copy order within an expert (a stable
 * sort). *rows (tokens * top_k; an allocation for f8_free, NULL when empty) gets the row of each
 * copy in that order; counts (experts of them), when not NULL, the rows of each expert.
 * `experts` bounds the indices, or is 0 where the op has no bound (MoECombine): any non-negative
 * index sorts then, and nothing is allocated by its size. An index f8_cpu_moe_expert refuses
 * fails, as there.
 */
f8_status f8_cpu_moe_rows(const f8_cpu_kernel_call *call, const f8_rt_tensor *indices,
			  int64_t experts, int64_t **rows, int64_t *counts, f8_diag *diag);

/*
 * Checks the rows per expert `counts` (experts) against x's `rows` as GroupedLinear reads them:
 * none negative, adding up to at most `rows` (an all-to-all's receive buffer has a static
 * size, an upper bound: the rows after the counted ones are padding, which the grouped ops
 * never read and whose outputs they write as zeros). The largest count into *largest, their
 * sum into *total (when not NULL). A failure of the call for a negative count or counts past
 * the rows.
 */
f8_status f8_cpu_moe_check_counts(const f8_cpu_kernel_call *call, const f8_rt_tensor *counts,
				  int64_t rows, int64_t *largest, int64_t *total, f8_diag *diag);

#endif
