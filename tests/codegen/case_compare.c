/*
 * The comparison rule of kernel outputs against the reference (tests/codegen/case_compare.h).
 */
#include "tests/codegen/case_compare.h" // f8_case_compare, case_comparison

#include <math.h>   // fabs, isfinite, isnan
#include <string.h> // memcmp

#include "ir/dtype.h" // f8_dtype_is_fp8
#include "ir/fp8.h"   // f8_float_decode

uint64_t f8_case_hash(const void *data, size_t bytes) {
	uint64_t hash = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < bytes; i++)
		hash = (hash ^ ((const uint8_t *)data)[i]) * 0x100000001b3ull;
	return hash;
}

int f8_case_code_distance(f8_dtype dtype, uint8_t a, uint8_t b) {
	if (a == b)
		return 0;
	float x = f8_float_decode(dtype, a), y = f8_float_decode(dtype, b);
	if (isnan(x) || isnan(y))
		return 99;
	int between = 0; // codes strictly between x and y
	float low = x < y ? x : y, high = x < y ? y : x;
	for (uint32_t c = 0; c < 256; c++) {
		float z = f8_float_decode(dtype, c);
		between += z > low && z < high;
	}
	return between + 1;
}

void f8_case_compare(const f8_rt_tensor *reference, const void *got, bool fp8_neighbour,
		  bool rounded_twice, case_comparison *out) {
	f8_dtype dtype = reference->dtype;
	f8_rt_tensor view = *reference;
	view.data = (void *)got;
	*out = (case_comparison){.count = f8_rt_tensor_numel(reference), .first = -1};
	out->identical = reference->n_bytes == 0 || memcmp(reference->data, got,
							   reference->n_bytes) == 0;
	if (out->identical)
		return;
	double largest = 0;
	for (int64_t i = 0; i < out->count; i++) {
		double x = fabs(f8_rt_tensor_get(reference, i));
		if (isfinite(x) && x > largest)
			largest = x;
	}
	bool codes = f8_dtype_is_fp8(dtype) && dtype != F8_DTYPE_E8M0;
	for (int64_t i = 0; i < out->count; i++) {
		double want = f8_rt_tensor_get(reference, i), have = f8_rt_tensor_get(&view, i);
		double error = fabs(want - have);
		bool ok = (isnan(want) && isnan(have)) || want == have;
		if (!ok && codes && fp8_neighbour) {
			uint8_t a = ((const uint8_t *)reference->data)[i];
			uint8_t b = ((const uint8_t *)got)[i];
			ok = f8_case_code_distance(dtype, a, b) <= 1 || error <= 1e-5 * largest;
		} else if (!ok && !codes) {
			double relative = dtype == F8_DTYPE_BF16 ? (rounded_twice ? 2.0 : 1.0) / 128 : 2e-5;
			ok = error <= relative * fabs(want) + 1e-5 * largest;
		}
		if (!ok && out->bad++ == 0) {
			out->first = i;
			out->want = want;
			out->got = have;
		}
	}
}
