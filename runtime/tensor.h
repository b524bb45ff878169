/*
 * Host tensors of the runtime: a dtype, concrete dims and the bytes, row-major, little-endian.
 *
 * A tensor either owns its data (f8_rt_tensor_create, freed by f8_rt_tensor_destroy) or is a
 * view of someone else's (owned == false: destroying it frees nothing). Element access by
 * index goes through f8_rt_tensor_get/set, which convert from and to double: exactly for every
 * dtype f8c stores (f32, f64, bf16, f16, e4m3, e5m2, e8m0 decode exactly; integers up to 2^53),
 * and rounding to nearest even on the way in, saturating for the FP8 formats as sm_90's
 * cvt.rn.satfinite does (ir/fp8.h); a double is first rounded to float32 on its way to a
 * narrower float. BF16 and F16 stores do not saturate (overflow gives inf, as a Cast does).
 */
#ifndef F8_RUNTIME_TENSOR_H
#define F8_RUNTIME_TENSOR_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // int64_t

#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/dtype.h" // f8_dtype
#include "ir/shape.h" // F8_MAX_RANK

typedef struct f8_rt_tensor {
	f8_dtype dtype;
	int rank;
	int64_t dims[F8_MAX_RANK]; // (rank) every dim >= 0
	void *data;                // (numel * dtype size) bytes; NULL when numel is 0
	size_t n_bytes;
	bool owned;                // data was allocated by f8_rt_tensor_create
} f8_rt_tensor;

/* The element count: the product of dims (1 for rank 0). */
int64_t f8_rt_tensor_numel(const f8_rt_tensor *tensor);

/*
 * Allocates a zeroed tensor of `dtype` and `dims` (rank of them) into *out, through f8_calloc.
 * F8_ERR_ARGUMENT for a rank beyond F8_MAX_RANK, a negative dim or a size that overflows;
 * F8_ERR_NOMEM when allocation fails (*out is then left empty).
 */
f8_status f8_rt_tensor_create(f8_dtype dtype, int rank, const int64_t *dims, f8_rt_tensor *out,
			      f8_diag *diag);

/* Frees the data of an owned tensor and empties it. NULL and empty tensors are allowed. */
void f8_rt_tensor_destroy(f8_rt_tensor *tensor);

/* float32 -> BF16 bits, rounded to nearest even, overflowing to inf: f8_float_encode(BF16,
 * value, false), fast (what every BF16 store of the CPU backend runs). */
uint16_t f8_rt_bf16_encode(float value);

/* Element i (flat, row-major) as a double. */
double f8_rt_tensor_get(const f8_rt_tensor *tensor, int64_t i);

/* The index of the first NaN or inf of a floating-point tensor (f64, f32, f16, bf16; FP8 codes
 * are not looked at), or -1 when there is none or the dtype is another. */
int64_t f8_rt_tensor_find_nonfinite(const f8_rt_tensor *tensor);

/* Stores `value` at element i, rounded to the tensor's dtype (see the file comment); integers
 * are truncated toward zero and clamped to their range (NaN gives 0), booleans are
 * value != 0. */
void f8_rt_tensor_set(f8_rt_tensor *tensor, int64_t i, double value);

/* Copies src's elements into dst (the same element count), each converted to dst's dtype as
 * f8_rt_tensor_set does (the bytes as they are when the dtypes agree). */
void f8_rt_tensor_convert(f8_rt_tensor *dst, const f8_rt_tensor *src);

/* True when the tensor's fields agree: a dtype, a rank up to F8_MAX_RANK, dims >= 0 whose
 * product times the element size is n_bytes without overflow, and data unless that is 0. */
bool f8_rt_tensor_valid(const f8_rt_tensor *tensor);

/* True when both have the same dtype and dims. */
bool f8_rt_tensor_same_type(const f8_rt_tensor *a, const f8_rt_tensor *b);

#endif
