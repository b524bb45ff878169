/*
 * cuBLASLt matmuls from row-major products (runtime/cuda/gemm_lt.h).
 */
#include "runtime/cuda/gemm_lt.h" // f8_cuda_lt, f8_cuda_lt_call, f8_cuda_product

#include <stdio.h>  // snprintf
#include <string.h> // memset

#include "runtime/cuda/driver.h"    // f8_cuda_alloc, f8_cuda_free
#include "runtime/cuda/libraries.h" // f8_cuda_api

f8_status f8_cuda_lt_check(cublasStatus_t result, const char *call, f8_diag *diag) {
	if (result == CUBLAS_STATUS_SUCCESS)
		return F8_OK;
	f8_status status = F8_ERR_IO;
	if (result == CUBLAS_STATUS_ALLOC_FAILED)
		status = F8_ERR_NOMEM;
	else if (result == CUBLAS_STATUS_NOT_SUPPORTED || result == CUBLAS_STATUS_ARCH_MISMATCH)
		status = F8_ERR_UNSUPPORTED;
	else if (result == CUBLAS_STATUS_INVALID_VALUE)
		status = F8_ERR_ARGUMENT;
	return f8_diag_set(diag, status, "%s failed: %s (%s)", call,
			   f8_cuda_api.cublasLtGetStatusName(result),
			   f8_cuda_api.cublasLtGetStatusString(result));
}

bool f8_cuda_lt_data_type(f8_dtype dtype, cudaDataType *out) {
	switch (dtype) {
	case F8_DTYPE_F32: *out = CUDA_R_32F; return true;
	case F8_DTYPE_BF16: *out = CUDA_R_16BF; return true;
	case F8_DTYPE_F16: *out = CUDA_R_16F; return true;
	case F8_DTYPE_F64: *out = CUDA_R_64F; return true;
	case F8_DTYPE_E4M3: *out = CUDA_R_8F_E4M3; return true;
	case F8_DTYPE_E5M2: *out = CUDA_R_8F_E5M2; return true;
	default: return false;
	}
}

f8_status f8_cuda_lt_open(f8_cuda_lt *lt, CUstream stream, uint64_t workspace_bytes,
			  f8_diag *diag) {
	memset(lt, 0, sizeof *lt);
	lt->stream = stream;
	lt->workspace_bytes = workspace_bytes;
	f8_status status = f8_cuda_lt_check(f8_cuda_api.cublasLtCreate(&lt->handle), "cublasLtCreate",
					    diag);
	if (!status)
		status = f8_cuda_lt_check(f8_cuda_api.cublasLtMatmulPreferenceCreate(&lt->preference),
					  "cublasLtMatmulPreferenceCreate", diag);
	if (!status)
		status = f8_cuda_lt_check(f8_cuda_api.cublasLtMatmulPreferenceSetAttribute(
						  lt->preference,
						  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
						  &workspace_bytes, sizeof workspace_bytes),
					  "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)",
					  diag);
	if (!status && workspace_bytes) // cuMemAlloc aligns to 256 bytes at least
		status = f8_cuda_alloc(workspace_bytes, &lt->workspace, diag);
	return status;
}

void f8_cuda_lt_close(f8_cuda_lt *lt) {
	if (lt->preference)
		f8_cuda_api.cublasLtMatmulPreferenceDestroy(lt->preference);
	if (lt->handle)
		f8_cuda_api.cublasLtDestroy(lt->handle);
	f8_cuda_free(lt->workspace, NULL);
	memset(lt, 0, sizeof *lt);
}

f8_status f8_cuda_lt_desc_set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
			      const void *value, size_t size, f8_diag *diag) {
	return f8_cuda_lt_check(f8_cuda_api.cublasLtMatmulDescSetAttribute(desc, attribute, value,
									   size),
				"cublasLtMatmulDescSetAttribute", diag);
}

f8_status f8_cuda_lt_desc_set_pointer(cublasLtMatmulDesc_t desc,
				      cublasLtMatmulDescAttributes_t attribute, CUdeviceptr pointer,
				      f8_diag *diag) {
	const void *address = (const void *)(uintptr_t)pointer;
	return f8_cuda_lt_desc_set(desc, attribute, &address, sizeof address, diag);
}

f8_status f8_cuda_lt_layout_create(cublasLtMatrixLayout_t *out, f8_dtype dtype, int64_t rows,
				   int64_t cols, int64_t ld, int32_t batch, int64_t stride,
				   f8_diag *diag) {
	cudaDataType type = CUDA_R_32F;
	f8_cuda_lt_data_type(dtype, &type);
	f8_status status = f8_cuda_lt_check(
		f8_cuda_api.cublasLtMatrixLayoutCreate(out, type, (uint64_t)rows, (uint64_t)cols, ld),
		"cublasLtMatrixLayoutCreate", diag);
	if (!status && batch > 1)
		status = f8_cuda_lt_check(f8_cuda_api.cublasLtMatrixLayoutSetAttribute(
						  *out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
						  sizeof batch),
					  "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)", diag);
	if (!status && batch > 1)
		status = f8_cuda_lt_check(f8_cuda_api.cublasLtMatrixLayoutSetAttribute(
						  *out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
						  &stride, sizeof stride),
					  "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)",
					  diag);
	return status;
}

f8_status f8_cuda_lt_layout_set_cols(cublasLtMatrixLayout_t layout, int64_t cols, f8_diag *diag) {
	uint64_t value = (uint64_t)cols;
	return f8_cuda_lt_check(f8_cuda_api.cublasLtMatrixLayoutSetAttribute(
					layout, CUBLASLT_MATRIX_LAYOUT_COLS, &value, sizeof value),
				"cublasLtMatrixLayoutSetAttribute(COLS)", diag);
}

f8_status f8_cuda_lt_call_create(const f8_cuda_product *p, f8_cuda_lt_call *call, f8_diag *diag) {
	memset(call, 0, sizeof *call);
	call->shape = *p;
	call->alpha = 1.0;
	call->wide = p->y_dtype == F8_DTYPE_F64;
	cublasComputeType_t compute = call->wide ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
	cudaDataType scale = call->wide ? CUDA_R_64F : CUDA_R_32F;
	f8_status status = f8_cuda_lt_check(
		f8_cuda_api.cublasLtMatmulDescCreate(&call->desc, compute, scale),
		"cublasLtMatmulDescCreate", diag);
	int32_t trans_a = p->trans_q ? CUBLAS_OP_T : CUBLAS_OP_N;
	int32_t trans_b = p->trans_p ? CUBLAS_OP_T : CUBLAS_OP_N;
	if (!status)
		status = f8_cuda_lt_desc_set(call->desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a,
					     sizeof trans_a, diag);
	if (!status)
		status = f8_cuda_lt_desc_set(call->desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b,
					     sizeof trans_b, diag);
	// A = Q: column-major (n x k), or (k x n) when transposed; B = P: (k x m), or (m x k).
	if (!status)
		status = f8_cuda_lt_layout_create(&call->a, p->q_dtype, p->trans_q ? p->k : p->n,
						  p->trans_q ? p->n : p->k, p->ld_q, p->batch,
						  p->stride_q, diag);
	if (!status)
		status = f8_cuda_lt_layout_create(&call->b, p->p_dtype, p->trans_p ? p->m : p->k,
						  p->trans_p ? p->k : p->m, p->ld_p, p->batch,
						  p->stride_p, diag);
	if (!status)
		status = f8_cuda_lt_layout_create(&call->c, p->y_dtype, p->n, p->m, p->ld_y, p->batch,
						  p->stride_y, diag);
	if (!status)
		status = f8_cuda_lt_layout_create(&call->d, p->y_dtype, p->n, p->m, p->ld_y, p->batch,
						  p->stride_y, diag);
	return status;
}

void f8_cuda_lt_call_destroy(f8_cuda_lt_call *call) {
	cublasLtMatrixLayout_t layouts[4] = {call->a, call->b, call->c, call->d};
	for (int i = 0; i < 4; i++)
		if (layouts[i])
			f8_cuda_api.cublasLtMatrixLayoutDestroy(layouts[i]);
	if (call->desc)
		f8_cuda_api.cublasLtMatmulDescDestroy(call->desc);
	memset(call, 0, sizeof *call);
}

f8_status f8_cuda_lt_call_choose(f8_cuda_lt *lt, f8_cuda_lt_call *call,
				 const uint32_t alignments[4], bool *found, char *why,
				 size_t why_size, f8_diag *diag) {
	static const cublasLtMatmulPreferenceAttributes_t attributes[4] = {
		CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
		CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
	*found = false;
	for (int i = 0; i < 4; i++) {
		f8_status status = f8_cuda_lt_check(f8_cuda_api.cublasLtMatmulPreferenceSetAttribute(
							    lt->preference, attributes[i],
							    &alignments[i], sizeof alignments[i]),
						    "cublasLtMatmulPreferenceSetAttribute", diag);
		if (status)
			return status;
	}
	cublasLtMatmulHeuristicResult_t result;
	memset(&result, 0, sizeof result);
	int count = 0;
	cublasStatus_t asked = f8_cuda_api.cublasLtMatmulAlgoGetHeuristic(
		lt->handle, call->desc, call->a, call->b, call->c, call->d, lt->preference, 1, &result,
		&count);
	if (asked == CUBLAS_STATUS_SUCCESS && count > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
		call->algo = result.algo;
		*found = true;
		return F8_OK;
	}
	// NOT_SUPPORTED and INVALID_VALUE are how the heuristic refuses a configuration.
	if (asked != CUBLAS_STATUS_SUCCESS && asked != CUBLAS_STATUS_NOT_SUPPORTED &&
	    asked != CUBLAS_STATUS_INVALID_VALUE)
		return f8_cuda_lt_check(asked, "cublasLtMatmulAlgoGetHeuristic", diag);
	snprintf(why, why_size, "%s", asked != CUBLAS_STATUS_SUCCESS
					      ? f8_cuda_api.cublasLtGetStatusName(asked)
					      : "no result");
	return F8_OK;
}

f8_status f8_cuda_lt_call_run(const f8_cuda_lt *lt, const f8_cuda_lt_call *call, CUdeviceptr p,
			      CUdeviceptr q, CUdeviceptr c, CUdeviceptr d, f8_diag *diag) {
	float alpha32 = (float)call->alpha, beta32 = (float)call->beta;
	const void *alpha = call->wide ? (const void *)&call->alpha : (const void *)&alpha32;
	const void *beta = call->wide ? (const void *)&call->beta : (const void *)&beta32;
	return f8_cuda_lt_check(
		f8_cuda_api.cublasLtMatmul(lt->handle, call->desc, alpha, (const void *)(uintptr_t)q,
					   call->a, (const void *)(uintptr_t)p, call->b, beta,
					   (const void *)(uintptr_t)c, call->c, (void *)(uintptr_t)d,
					   call->d, &call->algo, (void *)(uintptr_t)lt->workspace,
					   lt->workspace_bytes, lt->stream),
		"cublasLtMatmul", diag);
}
