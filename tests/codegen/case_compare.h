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
 *     value (noise around zero crosses subnormal codes); the cast's amax then within one ulp
 *     of its input's dtype (test_lower_groups.c: that input's largest element may round the
 *     other way too);
 *   - a column sum (case_is_column_sum: a norm gradient's dgamma and dbeta, sums over the rows)
 *     also within its terms' own error: one rounding of the element's dtype (1/128 for bf16,
 *     2e-5 for f32) of M = sum_r |term_r|, which the test computes from the reference's
 *     inputs (f8_case_column_magnitude). A sum of terms of both signs is far smaller than M,
 *     so a bound relative to the result alone does not hold: RMSNormGrad's term is
 *     dy * round_x(x * rstd) (the forward's rounding to bf16, case_rounded_twice), and an f32
 *     rstd that rounds x * rstd the other way moves the term by one bf16 ulp of it, up to
 *     2^-7 |term|, with r terms of such errors adding up; the f32 accumulation adds at most
 *     rows * 2^-24 M, and LayerNormGrad's f32 x - mean an absolute error of its operands'
 *     size, both well inside the same bound ((|x| + |mean|) rstd |dy| are its terms). A
 *     ReduceSum (a bias gradient) likewise, M the sum of its input's magnitudes over the
 *     reduced elements: a term computed in the group (a GELU gradient in f32, then rounded to
 *     bf16) may round the other way than the reference's double, by one ulp of its own, and
 *     the sum of terms of both signs is far smaller than their magnitudes (only a ReduceSum
 *     of terms its group computes: one of a kernel's inputs has terms that round alike). So is a
 *     CrossEntropyMerge's reduced loss (sum or mean), M its rows' |lse - target| summed (and
 *     divided likewise): the tests' random rows have both signs, and the f32 sum of them carries
 *     their error, not the result's.
 */
#ifndef F8_TESTS_CODEGEN_CASE_COMPARE_H
#define F8_TESTS_CODEGEN_CASE_COMPARE_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // int64_t, uint8_t, uint64_t
#include <string.h>  // strcmp

#include "ir/diag.h"        // f8_diag, f8_status
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

/* Whether `value` is a column sum of the rule above: dgamma or dbeta of a LayerNormGrad,
 * dgamma of an RMSNormGrad, a ReduceSum's output, a CrossEntropyMerge's reduced loss. */
static inline bool case_is_column_sum(const f8_graph *graph, f8_value_id value) {
	f8_node_id producer = graph->values[value].producer;
	if (producer == F8_NONE)
		return false;
	const f8_node *node = &graph->nodes[producer];
	if (node->op == F8_OP_REDUCE_SUM) { // of terms computed in the group: else no term rounds
		f8_node_id in = graph->values[node->inputs[0]].producer;
		return in != F8_NONE && graph->nodes[in].group == node->group;
	}
	if (node->op == F8_OP_CROSS_ENTROPY_MERGE)
		return node->outputs[0] == value &&
		       strcmp(f8_node_attr_string(node, "reduction", "mean"), "none") != 0;
	bool layer = node->op == F8_OP_LAYER_NORM_GRAD;
	if (!layer && node->op != F8_OP_RMS_NORM_GRAD)
		return false;
	for (uint32_t o = 1; o < node->n_outputs && o < (layer ? 3u : 2u); o++)
		if (node->outputs[o] == value)
			return true;
	return false;
}

/*
 * The magnitudes M of column sum `value` (case_is_column_sum): per element, the sum over the
 * rows of its terms' magnitudes, from its producer's inputs dy and x in `tensors` (indexed by
 * value id; the statistics recomputed from x in double, as the reference kernels do), or a
 * ReduceSum's input. *out is
 * created (f32, one element per column; the caller destroys it). F8_ERR_INVALID when `value` is no
 * column sum or an input is missing, F8_ERR_NOMEM, with the diagnostic.
 */
f8_status f8_case_column_magnitude(const f8_graph *graph, f8_value_id value,
				   const f8_rt_tensor *const *tensors, f8_rt_tensor *out,
				   f8_diag *diag);

/*
 * Compares `got` (the kernel's bytes, reference->n_bytes of them, of reference's dtype) with
 * `reference` by the rule above; `fp8_neighbour` allows FP8 codes one apart, `rounded_twice`
 * two bf16 ulps; `magnitude` (NULL: none), a column sum's M per element
 * (f8_case_column_magnitude), its terms' error. Nothing is written but *out.
 */
void f8_case_compare(const f8_rt_tensor *reference, const void *got, bool fp8_neighbour,
		     bool rounded_twice, const f8_rt_tensor *magnitude, case_comparison *out);

#endif
