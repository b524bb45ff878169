/*
 * The comparison rule of a kernel's output against the reference kernels', shared by the host
 * check of every fusion group (tests/codegen/test_lower_groups.c), the program that makes the
 * kernel cases (tests/gpu/make_kernel_cases.c, which also holds the host JIT to it) and the one
 * that runs them on a GPU (tests/gpu/gpu_kernel_check.c). Tolerances are relative to
 * each element and to the tensor's largest finite magnitude, since an f32 result that cancels
 * (a LayerNorm output near -beta, a sum of terms of both signs) carries the absolute error of
 * its terms:
 *   - equal values pass, and NaN matches NaN;
 *   - f32 (and e8m0, amaxes, column sums) within 2e-5 of the element plus 1e-5 of the largest;
 *   - bf16 within one bf16 ulp (1/128) of the element plus 1e-5 of the largest; two (2/128)
 *     where the value is rounded twice (case_rounded_twice): an RMSNorm rounds x * rstd to the
 *     input's dtype before the weight multiplies (Hugging Face's `.to(input_dtype)`), so an f32
 *     rstd that rounds that product the other way moves the output by one ulp times the
 *     weight, and its own rounding adds one;
 *   - FP8 codes (e4m3, e5m2) equal, or, where the value before the cast was computed inside
 *     the group (it may differ by an f32 ulp from the reference's, which computes in double
 *     and rounds once), one code apart in value order or within 1e-5 of the largest decoded
 *     value (noise around zero crosses subnormal codes).
 */
#ifndef F8_TESTS_CODEGEN_CASE_COMPARE_H
#define F8_TESTS_CODEGEN_CASE_COMPARE_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // int64_t, uint8_t, uint64_t

#include "ir/graph.h"       // f8_graph, f8_value_id
#include "runtime/tensor.h" // f8_rt_tensor

/* The outcome of one comparison: how many elements are outside the rule, the first of them
 * with both values (as doubles), and whether the bytes are identical. */
typedef struct case_comparison {
	int64_t count;    // elements compared
	int64_t bad;      // outside the rule
	int64_t first;    // index of the first bad element, -1 when none
	double want, got; // the reference's and the kernel's value there
	bool identical;   // every byte equal
} case_comparison;

/* The 64-bit FNV-1a hash of `bytes` bytes: how the cases carry the host JIT's outputs (the
 * tensors themselves would not fit in what a GPU run can carry), so that the GPU's outputs are
 * checked bit for bit against them. */
uint64_t f8_case_hash(const void *data, size_t bytes);

/* How far apart two FP8 codes of `dtype` are in value order: 0 equal, 1 neighbours, 99 when
 * one is NaN and the other is not the same code. */
int f8_case_code_distance(f8_dtype dtype, uint8_t a, uint8_t b);

/* Whether `value` is rounded twice in its computation (the rule above): the output of an
 * RMSNorm of bf16 or f16 input. */
static inline bool case_rounded_twice(const f8_graph *graph, f8_value_id value) {
	f8_node_id producer = graph->values[value].producer;
	if (producer == F8_NONE || graph->nodes[producer].op != F8_OP_RMS_NORM ||
	    graph->nodes[producer].outputs[0] != value)
		return false;
	f8_dtype x = graph->values[graph->nodes[producer].inputs[0]].type.dtype;
	return x == F8_DTYPE_BF16 || x == F8_DTYPE_F16;
}

/*
 * Compares `got` (the kernel's bytes, reference->n_bytes of them, of reference's dtype) with
 * `reference` by the rule above; `fp8_neighbour` allows FP8 codes one apart, `rounded_twice`
 * two bf16 ulps. Nothing is written but *out.
 */
void f8_case_compare(const f8_rt_tensor *reference, const void *got, bool fp8_neighbour,
		  bool rounded_twice, case_comparison *out);

#endif
