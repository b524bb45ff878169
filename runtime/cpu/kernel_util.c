/*
 * Helpers the reference kernels share: element runs as doubles, the sigmoid and the softmax,
 * broadcasting plans, GEMM operands for CBLAS (see kernel_util.h).
 */
#include "runtime/cpu/kernel_util.h" // f8_cpu_load, f8_cpu_broadcast, f8_cpu_gemm

#include <assert.h> // assert
#include <cblas.h>  // cblas_sgemm, cblas_dgemm, blasint
#include <limits.h> // INT_MAX
#include <math.h>   // exp, isnan, INFINITY
#include <stdarg.h> // va_list
#include <stdint.h> // uintptr_t, INT64_MAX
#include <string.h> // memset

#include "ir/alloc.h" // f8_malloc, f8_free

/* True when `tensor` holds `dtype` at an address its elements can be read at directly. */
static bool direct(const f8_rt_tensor *tensor, f8_dtype dtype, size_t align) {
	return tensor->dtype == dtype && (uintptr_t)tensor->data % align == 0;
}

void f8_cpu_load(const f8_rt_tensor *tensor, int64_t offset, int64_t stride, int64_t n,
		 double *out) {
	if (n <= 0)
		return;
	if (direct(tensor, F8_DTYPE_F32, sizeof(float))) {
		const float *p = (const float *)tensor->data + offset;
		if (stride == 1)
			for (int64_t j = 0; j < n; j++)
				out[j] = p[j];
		else
			for (int64_t j = 0; j < n; j++)
				out[j] = p[j * stride];
	} else if (direct(tensor, F8_DTYPE_F64, sizeof(double))) {
		const double *p = (const double *)tensor->data + offset;
		for (int64_t j = 0; j < n; j++)
			out[j] = p[j * stride];
	} else {
		for (int64_t j = 0; j < n; j++)
			out[j] = f8_rt_tensor_get(tensor, offset + j * stride);
	}
}

/* `value` clamped to the range of integer dtype `dtype`, NaN to 0, so that the conversion in
 * f8_rt_tensor_set is defined. The largest i64 is not a double: the largest double below it. */
static double clamp_integer(f8_dtype dtype, double value) {
	const f8_dtype_info *info = f8_dtype_get_info(dtype);
	double high = dtype == F8_DTYPE_I64 ? 9223372036854774784.0 : info->max;
	double low = info->kind == F8_DTYPE_KIND_UINT ? 0.0 : -info->max - 1.0;
	if (isnan(value))
		return 0.0;
	return value < low ? low : value > high ? high : value;
}

void f8_cpu_set(f8_rt_tensor *tensor, int64_t i, double value) {
	if (f8_dtype_is_integer(tensor->dtype))
		value = clamp_integer(tensor->dtype, value);
	f8_rt_tensor_set(tensor, i, value);
}

double f8_cpu_get(const f8_rt_tensor *tensor, int64_t i) {
	return f8_rt_tensor_get(tensor, i);
}

double f8_cpu_round(f8_dtype dtype, double value) {
	if (dtype == F8_DTYPE_F64)
		return value;
	if (dtype == F8_DTYPE_F32)
		return (float)value;
	uint64_t storage = 0; // room for any element, aligned for any
	f8_rt_tensor scalar = {.dtype = dtype, .data = &storage,
			       .n_bytes = f8_dtype_get_info(dtype)->bytes};
	f8_cpu_set(&scalar, 0, value);
	return f8_rt_tensor_get(&scalar, 0);
}

void f8_cpu_store(f8_rt_tensor *tensor, int64_t offset, int64_t stride, int64_t n,
		  const double *in) {
	if (n <= 0)
		return;
	if (direct(tensor, F8_DTYPE_F32, sizeof(float))) {
		float *p = (float *)tensor->data + offset;
		if (stride == 1)
			for (int64_t j = 0; j < n; j++)
				p[j] = (float)in[j];
		else
			for (int64_t j = 0; j < n; j++)
				p[j * stride] = (float)in[j];
	} else if (direct(tensor, F8_DTYPE_F64, sizeof(double))) {
		double *p = (double *)tensor->data + offset;
		for (int64_t j = 0; j < n; j++)
			p[j * stride] = in[j];
	} else {
		for (int64_t j = 0; j < n; j++)
			f8_cpu_set(tensor, offset + j * stride, in[j]);
	}
}

int64_t f8_cpu_dims_product(const f8_rt_tensor *tensor, int from, int to) {
	int64_t n = 1;
	for (int i = from; i < to; i++)
		n *= tensor->dims[i];
	return n;
}

int f8_cpu_axis(int64_t axis, int rank) {
	int out = 0;
	bool ok = f8_axis_normalize(axis, rank, false, &out);
	assert(ok);
	(void)ok;
	return out;
}

double f8_cpu_sigmoid(double x) {
	// exp of a positive argument overflows for large |x|; the two forms avoid it.
	if (x >= 0)
		return 1.0 / (1.0 + exp(-x));
	double e = exp(x);
	return e / (1.0 + e);
}

void f8_cpu_softmax(double *x, int64_t n) {
	double max = -INFINITY, sum = 0.0;
	for (int64_t i = 0; i < n; i++)
		max = x[i] > max ? x[i] : max;
	for (int64_t i = 0; i < n; i++)
		sum += x[i] = exp(x[i] - max);
	for (int64_t i = 0; i < n; i++)
		x[i] /= sum;
}

void f8_cpu_broadcast_init(f8_cpu_broadcast *plan, const f8_rt_tensor *out,
			   const f8_rt_tensor *const *inputs, int n_inputs) {
	assert(n_inputs >= 1 && n_inputs <= F8_CPU_BROADCAST_MAX);
	int rank = out->rank;
	int64_t strides[F8_CPU_BROADCAST_MAX][F8_MAX_RANK];
	for (int i = 0; i < n_inputs; i++) {
		const f8_rt_tensor *in = inputs[i];
		int64_t stride = 1;
		for (int d = rank - 1; d >= 0; d--) {
			int id = d - (rank - in->rank);
			strides[i][d] = id < 0 || in->dims[id] == 1 ? 0 : stride;
			if (id >= 0)
				stride *= in->dims[id];
		}
	}
	*plan = (f8_cpu_broadcast){.n_inputs = n_inputs};
	bool empty = false;
	// Unit dims say nothing; adjacent dims that every input walks alike become one.
	for (int d = 0; d < rank; d++) {
		empty |= out->dims[d] == 0;
		if (out->dims[d] == 1)
			continue;
		int last = plan->rank - 1;
		bool merge = last >= 0;
		for (int i = 0; merge && i < n_inputs; i++)
			merge = plan->strides[i][last] == strides[i][d] * out->dims[d];
		if (merge) {
			plan->dims[last] *= out->dims[d];
			for (int i = 0; i < n_inputs; i++)
				plan->strides[i][last] = strides[i][d];
		} else {
			plan->dims[plan->rank] = out->dims[d];
			for (int i = 0; i < n_inputs; i++)
				plan->strides[i][plan->rank] = strides[i][d];
			plan->rank++;
		}
	}
	if (plan->rank == 0)
		plan->dims[plan->rank++] = 1;
	plan->inner = plan->dims[plan->rank - 1];
	plan->runs = empty ? 0 : 1;
	for (int d = 0; d < plan->rank - 1; d++)
		plan->runs *= plan->dims[d];
	for (int i = 0; i < n_inputs; i++)
		plan->inner_strides[i] = plan->strides[i][plan->rank - 1];
}

void f8_cpu_broadcast_offsets(const f8_cpu_broadcast *plan, int64_t run, int64_t *offsets) {
	for (int i = 0; i < plan->n_inputs; i++)
		offsets[i] = 0;
	for (int d = plan->rank - 2; d >= 0 && run; d--) {
		int64_t index = run % plan->dims[d];
		run /= plan->dims[d];
		for (int i = 0; i < plan->n_inputs; i++)
			offsets[i] += index * plan->strides[i][d];
	}
}

f8_status f8_cpu_fail_unsupported(const f8_cpu_kernel_call *call, f8_diag *diag,
				  const char *format, ...) {
	va_list args;
	va_start(args, format);
	f8_diag_setv(diag, F8_ERR_UNSUPPORTED, format, args);
	va_end(args);
	if (diag)
		f8_diag_set_node(diag, call->graph, (f8_node_id)(call->node - call->graph->nodes));
	return F8_ERR_UNSUPPORTED;
}

f8_status f8_cpu_alloc(int64_t n, size_t size, void **out, f8_diag *diag) {
	*out = NULL;
	if (n <= 0)
		return F8_OK;
	if ((uint64_t)n > SIZE_MAX / size || !(*out = f8_malloc((size_t)n * size)))
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory for %lld scratch elements",
				   (long long)n);
	return F8_OK;
}

/* `tensor` as an array of the GEMM's working type: in place when it has it, else a copy in
 * *owned (exact: every dtype but f64 and large integers decodes exactly to float32). */
static f8_status gemm_operand(const f8_rt_tensor *tensor, bool wide, const void **out,
			      void **owned, f8_diag *diag) {
	*owned = NULL;
	size_t size = wide ? sizeof(double) : sizeof(float);
	if (direct(tensor, wide ? F8_DTYPE_F64 : F8_DTYPE_F32, size)) {
		*out = tensor->data;
		return F8_OK;
	}
	int64_t n = f8_rt_tensor_numel(tensor);
	f8_status status = f8_cpu_alloc(n, size, owned, diag);
	if (status)
		return status;
	if (wide)
		f8_cpu_load(tensor, 0, 1, n, *owned);
	else
		for (int64_t i = 0; i < n; i++)
			((float *)*owned)[i] = (float)f8_rt_tensor_get(tensor, i);
	*out = *owned;
	return F8_OK;
}

f8_status f8_cpu_gemm_create(const f8_cpu_kernel_call *call, const f8_rt_tensor *a,
			     const f8_rt_tensor *b, const f8_rt_tensor *out, int64_t m, int64_t n,
			     int64_t k, f8_cpu_gemm *gemm, f8_diag *diag) {
	*gemm = (f8_cpu_gemm){0};
	// blasint is int, or a 64-bit integer in an ILP64 OpenBLAS.
	const int64_t blas_max = sizeof(blasint) < sizeof(int64_t) ? INT_MAX : INT64_MAX;
	bool calls_blas = m > 0 && n > 0 && k > 0; // f8_cpu_gemm_run does the empty ones itself
	if (calls_blas && (m > blas_max || n > blas_max || k > blas_max)) {
		f8_status status = f8_cpu_fail_unsupported(
			call, diag, "a GEMM of %lld x %lld times %lld x %lld is too large for "
				    "CBLAS, whose sizes are at most %lld", (long long)m,
			(long long)k, (long long)k, (long long)n, (long long)blas_max);
		f8_diag_hint(diag, "the CPU reference multiplies through CBLAS: split the op "
				   "into smaller ones");
		return status;
	}
	gemm->wide = a->dtype == F8_DTYPE_F64 || f8_dtype_is_integer(a->dtype);
	gemm->largest = m > n ? (m > k ? m : k) : (n > k ? n : k);
	size_t size = gemm->wide ? sizeof(double) : sizeof(float);
	f8_status status = gemm_operand(a, gemm->wide, &gemm->a, &gemm->a_owned, diag);
	if (!status)
		status = gemm_operand(b, gemm->wide, &gemm->b, &gemm->b_owned, diag);
	if (!status) {
		if (direct(out, gemm->wide ? F8_DTYPE_F64 : F8_DTYPE_F32, size))
			gemm->result = out->data;
		else if (!(status = f8_cpu_alloc(f8_rt_tensor_numel(out), size,
						 &gemm->result_owned, diag)))
			gemm->result = gemm->result_owned;
	}
	if (status)
		f8_cpu_gemm_destroy(gemm);
	return status;
}

void f8_cpu_gemm_run(const f8_cpu_gemm *gemm, bool transpose_a, bool transpose_b, int64_t m,
		     int64_t n, int64_t k, int64_t a_offset, int64_t lda, int64_t b_offset,
		     int64_t ldb, int64_t c_offset, int64_t ldc) {
	if (m == 0 || n == 0)
		return;
	assert(m <= gemm->largest && n <= gemm->largest && k <= gemm->largest);
	assert(lda <= gemm->largest && ldb <= gemm->largest && ldc <= gemm->largest);
	if (k == 0) { // BLAS refuses the leading dimension 0 that an empty K gives
		size_t size = gemm->wide ? sizeof(double) : sizeof(float);
		for (int64_t i = 0; i < m; i++)
			memset((char *)gemm->result + (size_t)(c_offset + i * ldc) * size, 0,
			       (size_t)n * size);
		return;
	}
	enum CBLAS_TRANSPOSE ta = transpose_a ? CblasTrans : CblasNoTrans;
	enum CBLAS_TRANSPOSE tb = transpose_b ? CblasTrans : CblasNoTrans;
	if (gemm->wide)
		cblas_dgemm(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)k, 1.0,
			    (const double *)gemm->a + a_offset, (blasint)lda,
			    (const double *)gemm->b + b_offset, (blasint)ldb, 0.0,
			    (double *)gemm->result + c_offset, (blasint)ldc);
	else
		cblas_sgemm(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)k, 1.0f,
			    (const float *)gemm->a + a_offset, (blasint)lda,
			    (const float *)gemm->b + b_offset, (blasint)ldb, 0.0f,
			    (float *)gemm->result + c_offset, (blasint)ldc);
}

void f8_cpu_gemm_zero(const f8_cpu_gemm *gemm, int64_t offset, int64_t n) {
	size_t size = gemm->wide ? sizeof(double) : sizeof(float);
	if (n > 0) // all-zero bits are +0 in both working types
		memset((char *)gemm->result + (size_t)offset * size, 0, (size_t)n * size);
}

void f8_cpu_gemm_store(const f8_cpu_gemm *gemm, f8_rt_tensor *out) {
	if (gemm->result == out->data)
		return;
	int64_t n = f8_rt_tensor_numel(out);
	for (int64_t i = 0; i < n; i++)
		f8_cpu_set(out, i, f8_cpu_gemm_result(gemm, i));
}

void f8_cpu_gemm_destroy(f8_cpu_gemm *gemm) {
	f8_free(gemm->a_owned);
	f8_free(gemm->b_owned);
	f8_free(gemm->result_owned);
	*gemm = (f8_cpu_gemm){0};
}
