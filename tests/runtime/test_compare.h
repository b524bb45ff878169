/*
 * The comparison of an output with the CPU reference's by normalized error, shared by the
 * backend test table (tests/runtime/test_backend_ops.c) and the device checks of library nodes
 * (tests/gpu/attention_check.c):
 *
 *     NMSE = sum((got - reference)^2) / sum(reference^2)    over the elements finite in both
 *
 * and the rules NMSE does not see: a NaN or infinity where the reference has none or another,
 * and, for an exact dtype, any difference. Header-only, like tests/runtime/test_fill.h.
 */
#ifndef F8_TESTS_RUNTIME_TEST_COMPARE_H
#define F8_TESTS_RUNTIME_TEST_COMPARE_H

#include <math.h>    // isfinite, isnan, fabs, INFINITY
#include <stdbool.h> // bool
#include <stdint.h>  // int64_t

#include "runtime/tensor.h" // f8_rt_tensor, f8_rt_tensor_get, f8_rt_tensor_numel

/* One output against the reference's: the NMSE over the finite elements; how many elements
 * differ at all, and how many break the rules NMSE does not see; the element that differs
 * most (a rule's break first), to name in a failure; and the largest difference over the
 * largest reference magnitude, for reports. */
typedef struct test_comparison {
	double nmse;
	int64_t differ, bad; // elements not equal; elements against the rules
	int64_t at;          // the element shown, -1 when none differs
	double want, got;    // its values
	double max_relative; // max |got - reference| / max |reference|, over finite elements
} test_comparison;

static inline test_comparison test_compare(const f8_rt_tensor *got, const f8_rt_tensor *want,
					   bool exact) {
	test_comparison result = {.at = -1};
	double error = 0, energy = 0, most = -1, largest_error = 0, largest = 0;
	int64_t n = f8_rt_tensor_numel(want);
	for (int64_t i = 0; i < n; i++) {
		double a = f8_rt_tensor_get(got, i), b = f8_rt_tensor_get(want, i);
		bool finite = isfinite(a) && isfinite(b);
		if (finite) {
			error += (a - b) * (a - b);
			energy += b * b;
			largest_error = fabs(a - b) > largest_error ? fabs(a - b) : largest_error;
			largest = fabs(b) > largest ? fabs(b) : largest;
		}
		if (a == b || (isnan(a) && isnan(b)))
			continue;
		result.differ++;
		bool against_rules = !finite || exact;
		result.bad += against_rules;
		double weight = against_rules ? INFINITY : fabs(a - b);
		if (weight > most) {
			most = weight;
			result.at = i;
			result.want = b;
			result.got = a;
		}
	}
	result.nmse = energy > 0 ? error / energy : error > 0 ? INFINITY : 0;
	result.max_relative = largest > 0 ? largest_error / largest : largest_error;
	return result;
}

#endif
