/*
 * Host tensors: allocation and element access by index in any stored dtype.
 */
#include "runtime/tensor.h" // f8_rt_tensor

#include <assert.h> // assert
#include <math.h>   // trunc, isnan
#include <string.h> // memcpy

#include "ir/alloc.h" // f8_calloc, f8_free
#include "ir/fp8.h"   // f8_float_encode, f8_float_decode

int64_t f8_rt_tensor_numel(const f8_rt_tensor *tensor) {
	int64_t n = 1;
	for (int i = 0; i < tensor->rank; i++)
		n *= tensor->dims[i];
	return n;
}

f8_status f8_rt_tensor_create(f8_dtype dtype, int rank, const int64_t *dims, f8_rt_tensor *out,
			      f8_diag *diag) {
	*out = (f8_rt_tensor){.dtype = dtype};
	if (rank < 0 || rank > F8_MAX_RANK)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "a tensor of rank %d (the most is %d)", rank,
				   F8_MAX_RANK);
	size_t size = f8_dtype_get_info(dtype)->bytes, n = 1;
	for (int i = 0; i < rank; i++) {
		if (dims[i] < 0)
			return f8_diag_set(diag, F8_ERR_ARGUMENT, "dim %d of a tensor is negative", i);
		if (dims[i] && n > SIZE_MAX / size / (size_t)dims[i])
			return f8_diag_set(diag, F8_ERR_ARGUMENT, "a tensor too large to allocate");
		n *= (size_t)dims[i];
	}
	void *data = NULL;
	if (n && !(data = f8_calloc(n, size)))
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory for a tensor of %zu bytes",
				   n * size);
	out->rank = rank;
	if (rank)
		memcpy(out->dims, dims, (size_t)rank * sizeof dims[0]);
	out->data = data;
	out->n_bytes = n * size;
	out->owned = true;
	return F8_OK;
}

void f8_rt_tensor_destroy(f8_rt_tensor *tensor) {
	if (!tensor)
		return;
	if (tensor->owned)
		f8_free(tensor->data);
	*tensor = (f8_rt_tensor){0};
}

/*
 * BF16 is the upper half of a float32: decoding is a shift, and encoding rounds the lower half
 * to nearest even on the bits, which is f8_float_encode(BF16, value, false) for every float but
 * NaN: its overflow to inf and its subnormals come out the same (the two agree on all 2^32
 * floats; tests/runtime/test_kernels_forward.c holds them to it around every boundary). NaNs
 * take the general path, for its canonical NaN. The fast path matters: a --bf16 step stores
 * and loads BF16 everywhere.
 */
static float bf16_decode(uint16_t bits) {
	uint32_t wide = (uint32_t)bits << 16;
	if ((wide & 0x7FFFFFFFu) > 0x7F800000u) // NaN
		return f8_float_decode(F8_DTYPE_BF16, bits);
	float v;
	memcpy(&v, &wide, 4);
	return v;
}

uint16_t f8_rt_bf16_encode(float value) {
	uint32_t bits;
	memcpy(&bits, &value, 4);
	if ((bits & 0x7FFFFFFFu) > 0x7F800000u) // NaN
		return (uint16_t)f8_float_encode(F8_DTYPE_BF16, value, false);
	return (uint16_t)((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

double f8_rt_tensor_get(const f8_rt_tensor *tensor, int64_t i) {
	const unsigned char *p = tensor->data;
	switch (tensor->dtype) {
	case F8_DTYPE_F64: {
		double v;
		memcpy(&v, p + 8 * i, 8);
		return v;
	}
	case F8_DTYPE_F32: {
		float v;
		memcpy(&v, p + 4 * i, 4);
		return v;
	}
	case F8_DTYPE_BF16: {
		uint16_t bits;
		memcpy(&bits, p + 2 * i, 2);
		return bf16_decode(bits);
	}
	case F8_DTYPE_F16: {
		uint16_t bits;
		memcpy(&bits, p + 2 * i, 2);
		return f8_float_decode(tensor->dtype, bits);
	}
	case F8_DTYPE_E4M3:
	case F8_DTYPE_E5M2:
	case F8_DTYPE_E8M0:
		return f8_float_decode(tensor->dtype, p[i]);
	case F8_DTYPE_I64: {
		int64_t v;
		memcpy(&v, p + 8 * i, 8);
		return (double)v;
	}
	case F8_DTYPE_I32: {
		int32_t v;
		memcpy(&v, p + 4 * i, 4);
		return v;
	}
	case F8_DTYPE_I8:
		return (int8_t)p[i];
	case F8_DTYPE_U8:
	case F8_DTYPE_BOOL:
		return p[i];
	default:
		return 0.0;
	}
}

/* value truncated toward zero and clamped to [min, max]; NaN gives 0. Converting a double out
 * of an integer type's range is undefined behaviour in C, so clamp first. */
static double to_integer(double value, double min, double max) {
	if (isnan(value))
		return 0.0;
	value = trunc(value);
	return value < min ? min : value > max ? max : value;
}

void f8_rt_tensor_set(f8_rt_tensor *tensor, int64_t i, double value) {
	unsigned char *p = tensor->data;
	switch (tensor->dtype) {
	case F8_DTYPE_F64:
		memcpy(p + 8 * i, &value, 8);
		return;
	case F8_DTYPE_F32: {
		float v = (float)value;
		memcpy(p + 4 * i, &v, 4);
		return;
	}
	case F8_DTYPE_BF16: {
		uint16_t bits = f8_rt_bf16_encode((float)value);
		memcpy(p + 2 * i, &bits, 2);
		return;
	}
	case F8_DTYPE_F16: {
		uint16_t bits = (uint16_t)f8_float_encode(tensor->dtype, (float)value, false);
		memcpy(p + 2 * i, &bits, 2);
		return;
	}
	case F8_DTYPE_E4M3:
	case F8_DTYPE_E5M2:
		p[i] = (uint8_t)f8_float_encode(tensor->dtype, (float)value, true);
		return;
	case F8_DTYPE_E8M0:
		p[i] = f8_e8m0_encode((float)value, F8_ROUND_NEAREST_EVEN);
		return;
	case F8_DTYPE_I64: {
		// 2^63 is the first double past INT64_MAX: clamp below it.
		double clamped = to_integer(value, -0x1p63, 0x1p63);
		int64_t v = clamped >= 0x1p63 ? INT64_MAX : (int64_t)clamped;
		memcpy(p + 8 * i, &v, 8);
		return;
	}
	case F8_DTYPE_I32: {
		int32_t v = (int32_t)to_integer(value, INT32_MIN, INT32_MAX);
		memcpy(p + 4 * i, &v, 4);
		return;
	}
	case F8_DTYPE_I8:
		p[i] = (uint8_t)(int8_t)to_integer(value, INT8_MIN, INT8_MAX);
		return;
	case F8_DTYPE_U8:
		p[i] = (uint8_t)to_integer(value, 0, UINT8_MAX);
		return;
	case F8_DTYPE_BOOL:
		p[i] = value != 0.0;
		return;
	default:
		return;
	}
}

void f8_rt_tensor_convert(f8_rt_tensor *dst, const f8_rt_tensor *src) {
	int64_t n = f8_rt_tensor_numel(src);
	assert(n == f8_rt_tensor_numel(dst));
	if (dst->dtype == src->dtype) {
		if (n)
			memcpy(dst->data, src->data, src->n_bytes);
		return;
	}
	for (int64_t i = 0; i < n; i++)
		f8_rt_tensor_set(dst, i, f8_rt_tensor_get(src, i));
}

bool f8_rt_tensor_valid(const f8_rt_tensor *tensor) {
	if (tensor->dtype <= F8_DTYPE_UNDEFINED || tensor->dtype >= F8_DTYPE_COUNT ||
	    tensor->rank < 0 || tensor->rank > F8_MAX_RANK)
		return false;
	uint64_t n = f8_dtype_get_info(tensor->dtype)->bytes;
	for (int i = 0; i < tensor->rank; i++) {
		if (tensor->dims[i] < 0 ||
		    (tensor->dims[i] && n > SIZE_MAX / (uint64_t)tensor->dims[i]))
			return false;
		n *= (uint64_t)tensor->dims[i];
	}
	return n == tensor->n_bytes && (n == 0 || tensor->data);
}

bool f8_rt_tensor_same_type(const f8_rt_tensor *a, const f8_rt_tensor *b) {
	if (a->dtype != b->dtype || a->rank != b->rank)
		return false;
	for (int i = 0; i < a->rank; i++)
		if (a->dims[i] != b->dims[i])
			return false;
	return true;
}

int64_t f8_rt_tensor_find_nonfinite(const f8_rt_tensor *tensor) {
	int64_t n = f8_rt_tensor_numel(tensor);
	// By the exponent's bits, all ones in a NaN or an inf: one test an element, no conversion.
	switch (tensor->dtype) {
	case F8_DTYPE_F64: {
		const uint64_t *x = tensor->data;
		for (int64_t i = 0; i < n; i++)
			if ((x[i] & 0x7ff0000000000000ull) == 0x7ff0000000000000ull)
				return i;
		return -1;
	}
	case F8_DTYPE_F32: {
		const uint32_t *x = tensor->data;
		for (int64_t i = 0; i < n; i++)
			if ((x[i] & 0x7f800000u) == 0x7f800000u)
				return i;
		return -1;
	}
	case F8_DTYPE_F16:
	case F8_DTYPE_BF16: {
		uint16_t exponent = tensor->dtype == F8_DTYPE_F16 ? 0x7c00 : 0x7f80;
		const uint16_t *x = tensor->data;
		for (int64_t i = 0; i < n; i++)
			if ((x[i] & exponent) == exponent)
				return i;
		return -1;
	}
	default:
		return -1;
	}
}
