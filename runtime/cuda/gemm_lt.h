/*
 * cuBLASLt matmuls as the GEMM plans (runtime/cuda/gemm.c) make them, internal to runtime/cuda/.
 *
 * A GEMM is first a row-major product Y (m, n) = op(P) (m, k) op(Q) (k, n). A row-major matrix
 * is the column-major matrix of its transpose, so cuBLASLt computes Y^T (n x m) = op(Q)^T
 * op(P)^T: its A is Q, its B is P, its m is the product's n and its n the product's m. A call
 * holds the descriptor and the layouts of that mapping, made once, and the algorithm the
 * heuristic gave for the pointers' alignments; running it sets only pointers. Every cuBLASLt
 * result is checked into a diagnostic that names the cuBLASLt function.
 */
#ifndef F8_RUNTIME_CUDA_GEMM_LT_H
#define F8_RUNTIME_CUDA_GEMM_LT_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // int64_t, uint32_t, uint64_t

#include <cublasLt.h> // cublasLt*
#include <cuda.h>     // CUdeviceptr, CUstream

#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/dtype.h" // f8_dtype

/* A row-major product Y (m, n) = op(P) (m, k) op(Q) (k, n): P stored (m, k), or (k, m) when
 * trans_p; Q stored (k, n), or (n, k) when trans_q; `batch` of them, each operand's next one
 * `stride_*` elements on (0: the same matrix for every one). */
typedef struct f8_cuda_product {
	f8_dtype p_dtype, q_dtype, y_dtype;
	int64_t m, n, k;
	bool trans_p, trans_q;
	int64_t ld_p, ld_q, ld_y; // row pitches, in elements
	int32_t batch;
	int64_t stride_p, stride_q, stride_y;
} f8_cuda_product;

/* What the calls share: the handle, one preference (its alignments set per question), the
 * workspace and the stream. */
typedef struct f8_cuda_lt {
	cublasLtHandle_t handle;
	cublasLtMatmulPreference_t preference;
	CUdeviceptr workspace;    // 256-byte aligned
	uint64_t workspace_bytes;
	CUstream stream;
} f8_cuda_lt;

/* One cublasLtMatmul: the descriptor, the layouts of cuBLASLt's A (= Q), B (= P), C and D, the
 * algorithm, and alpha and beta (doubles for an f64 product, else given as floats). */
typedef struct f8_cuda_lt_call {
	cublasLtMatmulDesc_t desc;
	cublasLtMatrixLayout_t a, b, c, d;
	cublasLtMatmulAlgo_t algo;
	bool wide;
	double alpha, beta;
	f8_cuda_product shape;
} f8_cuda_lt_call;

/* `result` as a status (ALLOC_FAILED: F8_ERR_NOMEM; NOT_SUPPORTED, ARCH_MISMATCH:
 * F8_ERR_UNSUPPORTED; INVALID_VALUE: F8_ERR_ARGUMENT; else F8_ERR_IO) with a message naming
 * `call` and cuBLASLt's name and text of the status. */
f8_status f8_cuda_lt_check(cublasStatus_t result, const char *call, f8_diag *diag);

/* cuBLASLt's type of `dtype` (f32, bf16, f16, f64, e4m3, e5m2); false for any other. */
bool f8_cuda_lt_data_type(f8_dtype dtype, cudaDataType *out);

/* The handle, the preference with a workspace of `workspace_bytes`, and the workspace, for
 * calls on `stream`; cuBLASLt must be loaded (runtime/cuda/libraries.h). Close frees what open
 * made, also after a failed open of a zeroed `lt`. */
f8_status f8_cuda_lt_open(f8_cuda_lt *lt, CUstream stream, uint64_t workspace_bytes,
			  f8_diag *diag);
void f8_cuda_lt_close(f8_cuda_lt *lt);

/* Sets a descriptor attribute, or a pointer-valued one to the device address `pointer`. */
f8_status f8_cuda_lt_desc_set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
			      const void *value, size_t size, f8_diag *diag);
f8_status f8_cuda_lt_desc_set_pointer(cublasLtMatmulDesc_t desc,
				      cublasLtMatmulDescAttributes_t attribute, CUdeviceptr pointer,
				      f8_diag *diag);

/* A column-major layout of `dtype` (rows x cols, leading dimension ld), of `batch` matrices
 * `stride` elements apart when batch > 1. */
f8_status f8_cuda_lt_layout_create(cublasLtMatrixLayout_t *out, f8_dtype dtype, int64_t rows,
				   int64_t cols, int64_t ld, int32_t batch, int64_t stride,
				   f8_diag *diag);

/* Sets the columns of `layout` (a grouped GEMM's per-expert size). */
f8_status f8_cuda_lt_layout_set_cols(cublasLtMatrixLayout_t layout, int64_t cols, f8_diag *diag);

/* The descriptor and layouts of product `p`, computing in f32 (CUBLAS_COMPUTE_32F, no TF32) or
 * in f64 for an f64 product; alpha 1, beta 0, C laid out as D. Destroy allows a zeroed call and
 * one whose create failed. */
f8_status f8_cuda_lt_call_create(const f8_cuda_product *p, f8_cuda_lt_call *call, f8_diag *diag);
void f8_cuda_lt_call_destroy(f8_cuda_lt_call *call);

/*
 * Asks the heuristic for one algorithm for `call` with pointers aligned to alignments[] (A, B,
 * C, D, in bytes) and the shared workspace, into call->algo. *found is false when it has none;
 * `why` then holds its answer (the status it gave, or "no result"). Fails only when asking
 * fails otherwise.
 */
f8_status f8_cuda_lt_call_choose(f8_cuda_lt *lt, f8_cuda_lt_call *call,
				 const uint32_t alignments[4], bool *found, char *why,
				 size_t why_size, f8_diag *diag);

/* Queues `call` on the stream with P at p, Q at q, C at c and D at d. */
f8_status f8_cuda_lt_call_run(const f8_cuda_lt *lt, const f8_cuda_lt_call *call, CUdeviceptr p,
			      CUdeviceptr q, CUdeviceptr c, CUdeviceptr d, f8_diag *diag);

#endif
