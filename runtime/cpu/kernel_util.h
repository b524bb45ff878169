/*
 * Helpers the reference kernels share (runtime/cpu/kernels_*.c), so that each kernel states its
 * arithmetic once, in double, whatever the dtypes:
 *   - runs of elements loaded as doubles and stored back rounded to the tensor's dtype, with a
 *     direct path for f32 and f64 that gives the same bits as f8_rt_tensor_get/set (the f32
 *     fast path of the hot kernels is this path: the arithmetic between load and store is the
 *     generic one, so both paths compute the same thing by construction);
 *   - NumPy broadcasting of up to three inputs onto an output, with the dims merged so that the
 *     innermost run is as long as it can be;
 *   - the sigmoid and the softmax that every kernel computes them by;
 *   - GEMM operands as float32 (cblas_sgemm) or float64 (cblas_dgemm) arrays, as kernels.h's
 *     numerics paragraph asks, and the one check that a GEMM's sizes fit CBLAS.
 * What a forward kernel and its gradient must compute alike is in kernel_forward.h.
 */
#ifndef F8_RUNTIME_CPU_KERNEL_UTIL_H
#define F8_RUNTIME_CPU_KERNEL_UTIL_H

#include <stdbool.h> // bool
#include <stdint.h>  // int64_t

#include "ir/diag.h"             // f8_status, f8_diag
#include "runtime/cpu/kernels.h" // f8_cpu_kernel_call
#include "runtime/tensor.h"      // f8_rt_tensor

/* The most elements a kernel keeps in a stack buffer of doubles at a time. */
enum { F8_CPU_CHUNK = 1024 };

/* The length of the next chunk when `remaining` elements are left. */
static inline int64_t f8_cpu_chunk(int64_t remaining) {
	return remaining < F8_CPU_CHUNK ? remaining : F8_CPU_CHUNK;
}

/* The input `i` of the call, or NULL when omitted (or beyond the node's inputs). */
static inline const f8_rt_tensor *f8_cpu_input(const f8_cpu_kernel_call *call, uint32_t i) {
	return i < call->node->n_inputs ? call->inputs[i] : NULL;
}

/* Output `i` of the call, or NULL when the node has fewer outputs. */
static inline f8_rt_tensor *f8_cpu_output(const f8_cpu_kernel_call *call, uint32_t i) {
	return i < call->node->n_outputs ? &call->outputs[i] : NULL;
}

/* out[j] = element offset + j * stride of `tensor`, as a double, j < n (stride may be 0). */
void f8_cpu_load(const f8_rt_tensor *tensor, int64_t offset, int64_t stride, int64_t n,
		 double *out);

/*
 * Element offset + j * stride of `tensor` = in[j] rounded to its dtype, j < n: as
 * f8_rt_tensor_set, except that a value beyond an integer dtype's range is clamped to it
 * (f8_rt_tensor_set's conversion would be undefined there) and NaN stores 0.
 */
void f8_cpu_store(f8_rt_tensor *tensor, int64_t offset, int64_t stride, int64_t n,
		  const double *in);

/* Element i of `tensor` as a double (exact for every dtype but i64 beyond 2^53). */
double f8_cpu_get(const f8_rt_tensor *tensor, int64_t i);

/* Element i of `tensor` = `value` rounded to its dtype, as f8_cpu_store stores it: clamped to
 * an integer dtype's range, NaN storing 0 there. */
void f8_cpu_set(f8_rt_tensor *tensor, int64_t i, double value);

/* `value` rounded to `dtype` as a store and a load of that dtype would round it. */
double f8_cpu_round(f8_dtype dtype, double value);

/* The product of dims [from, to) of `tensor`. */
int64_t f8_cpu_dims_product(const f8_rt_tensor *tensor, int from, int to);

/* Normalizes a possibly negative axis against `rank` (the verifier has range-checked it). */
int f8_cpu_axis(int64_t axis, int rank);

/* 1 / (1 + exp(-x)), in a form whose exp cannot overflow: the one sigmoid of every kernel, so
 * that a forward and its gradient agree to the bit. */
double f8_cpu_sigmoid(double x);

/* x[0..n) replaced by its softmax exp(x - max) / sum(exp(x - max)), in double: NaNs where a NaN
 * or an infinite maximum leaves it undefined. */
void f8_cpu_softmax(double *x, int64_t n);

/* The most inputs a broadcast plan takes (Where's three). */
enum { F8_CPU_BROADCAST_MAX = 3 };

/*
 * NumPy broadcasting of `n_inputs` inputs onto an output, as runs: the output is `runs`
 * contiguous runs of `inner` elements; run r starts at output element r * inner and, in input
 * i, at the offset f8_cpu_broadcast_offsets gives, from which input i advances by
 * `inner_strides[i]` (1, or 0 where it is broadcast) per element.
 */
typedef struct f8_cpu_broadcast {
	int rank;                                            // merged dims, at least 1
	int64_t dims[F8_MAX_RANK];                           // (rank)
	int n_inputs;
	int64_t strides[F8_CPU_BROADCAST_MAX][F8_MAX_RANK];  // (n_inputs, rank) 0 where broadcast
	int64_t inner;                                       // dims[rank - 1]
	int64_t runs;                                        // numel / inner (0 when empty)
	int64_t inner_strides[F8_CPU_BROADCAST_MAX];         // strides[i][rank - 1]
} f8_cpu_broadcast;

/* Plans the broadcast of `inputs` (each broadcastable to `out`, as type inference checked). */
void f8_cpu_broadcast_init(f8_cpu_broadcast *plan, const f8_rt_tensor *out,
			   const f8_rt_tensor *const *inputs, int n_inputs);

/* The start offsets of run `run` in each input, into offsets[n_inputs]. */
void f8_cpu_broadcast_offsets(const f8_cpu_broadcast *plan, int64_t run, int64_t *offsets);

/*
 * The operands and result of GEMMs, as kernels.h's numerics asks: f64 (and integer) tensors go
 * through cblas_dgemm on doubles, every other float dtype through cblas_sgemm on its exact
 * float32 decoding. An operand that already has the working type is used in place; `result` is
 * the output's own data when the output has the working type, else a scratch array.
 */
typedef struct f8_cpu_gemm {
	bool wide;             // double (dgemm) rather than float (sgemm)
	const void *a, *b;     // the operands in the working type
	void *result;          // (numel of the output) accumulators in the working type
	void *a_owned, *b_owned, *result_owned; // what f8_cpu_gemm_destroy frees
	int64_t largest;       // the largest size f8_cpu_gemm_create checked
} f8_cpu_gemm;

/*
 * Sets up `gemm` for operands `a`, `b` and output `out` of `call`, for products of at most `m`
 * rows, `n` columns and `k` terms each (every f8_cpu_gemm_run's m, n, k and leading dims are
 * among these). The one check of every caller that the sizes fit CBLAS's int: beyond it (and
 * none of them 0), F8_ERR_UNSUPPORTED naming them. F8_ERR_NOMEM when the operands cannot be
 * converted. Nothing to free on failure; on success f8_cpu_gemm_destroy frees what it
 * allocated.
 */
f8_status f8_cpu_gemm_create(const f8_cpu_kernel_call *call, const f8_rt_tensor *a,
			     const f8_rt_tensor *b, const f8_rt_tensor *out, int64_t m, int64_t n,
			     int64_t k, f8_cpu_gemm *gemm, f8_diag *diag);

/* result[c_offset..] (m, n; ldc) = op(a[a_offset..]) (m, k) * op(b[b_offset..]) (k, n),
 * row-major, op transposing when asked; m, n, k, lda, ldb and ldc within the sizes that
 * f8_cpu_gemm_create checked. */
void f8_cpu_gemm_run(const f8_cpu_gemm *gemm, bool transpose_a, bool transpose_b, int64_t m,
		     int64_t n, int64_t k, int64_t a_offset, int64_t lda, int64_t b_offset,
		     int64_t ldb, int64_t c_offset, int64_t ldc);

/* result[offset, offset + n) = 0: what no f8_cpu_gemm_run writes (a grouped GEMM's padding rows
 * after its counted ones), before f8_cpu_gemm_store stores it. */
void f8_cpu_gemm_zero(const f8_cpu_gemm *gemm, int64_t offset, int64_t n);

/* Accumulator i of the result as a double. */
static inline double f8_cpu_gemm_result(const f8_cpu_gemm *gemm, int64_t i) {
	return gemm->wide ? ((const double *)gemm->result)[i] : ((const float *)gemm->result)[i];
}

/* Stores the result into `out` unchanged (rounded to its dtype) where it is not there already. */
void f8_cpu_gemm_store(const f8_cpu_gemm *gemm, f8_rt_tensor *out);

/* Frees what f8_cpu_gemm_create allocated (never the tensors' own data) and clears `gemm`;
 * `gemm` may be one that is already destroyed. */
void f8_cpu_gemm_destroy(f8_cpu_gemm *gemm);

/* Like f8_cpu_fail (kernels.h), with F8_ERR_UNSUPPORTED: what the data asks is valid but this
 * backend does not do it. */
f8_status f8_cpu_fail_unsupported(const f8_cpu_kernel_call *call, f8_diag *diag,
				  const char *format, ...) __attribute__((format(printf, 3, 4)));

/* f8_malloc of n elements of `size` bytes, failing with F8_ERR_NOMEM in `diag` (n may be 0). */
f8_status f8_cpu_alloc(int64_t n, size_t size, void **out, f8_diag *diag);

#endif
