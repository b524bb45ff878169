/*
 * The comparison rule of kernel outputs against the reference (tests/codegen/case_compare.h).
 */
#include "tests/codegen/case_compare.h" // f8_case_compare, case_comparison

#include <math.h>   // fabs, isfinite, isnan
#include <string.h> // memcmp

#include "ir/alloc.h" // f8_calloc, f8_free
#include "ir/dtype.h" // f8_dtype_is_fp8
#include "ir/fp8.h"   // f8_float_decode
#include "ir/ops.h"   // f8_node_attr_float

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

/* The reference's statistics of row `x` (`cols` values): RMSNorm's rstd, or LayerNorm's mean
 * and rstd, in double. */
static void row_statistics(const double *x, int64_t cols, bool layer, double epsilon,
			   double *mean, double *rstd) {
	double sum = 0, squares = 0;
	for (int64_t i = 0; i < cols; i++)
		sum += x[i];
	*mean = layer ? sum / (double)cols : 0;
	for (int64_t i = 0; i < cols; i++)
		squares += (x[i] - *mean) * (x[i] - *mean);
	*rstd = 1.0 / sqrt(squares / (double)cols + epsilon);
}

/* A ReduceSum's M: its input's magnitudes summed as the sum sums them (over attribute axes, all
 * when absent), into out (the output's elements in order). */
static f8_status reduce_magnitude(const f8_graph *graph, const f8_node *node,
				  const f8_rt_tensor *x, f8_rt_tensor *out, f8_diag *diag) {
	const f8_attr *axes = f8_node_attr(node, "axes");
	bool reduced[F8_MAX_RANK] = {0};
	int64_t kept = 1;
	for (int d = 0; d < x->rank; d++)
		reduced[d] = !axes;
	for (uint32_t i = 0; axes && i < axes->ints.n; i++) {
		int64_t axis = axes->ints.items[i];
		axis = axis < 0 ? axis + x->rank : axis;
		if (axis < 0 || axis >= x->rank)
			return f8_diag_set(diag, F8_ERR_INVALID, "%%%s: a ReduceSum axis out of range",
					   graph->values[node->outputs[0]].name);
		reduced[axis] = true;
	}
	for (int d = 0; d < x->rank; d++)
		kept *= reduced[d] ? 1 : x->dims[d];
	double *sum = f8_calloc(kept ? (size_t)kept : 1, sizeof *sum);
	f8_status status = sum ? f8_rt_tensor_create(F8_DTYPE_F32, 1, &kept, out, diag)
			       : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	int64_t n = f8_rt_tensor_numel(x);
	for (int64_t i = 0; !status && i < n; i++) {
		int64_t at = 0, rest = i, scale = 1; // the kept dims' mixed radix, the last fastest
		for (int d = x->rank - 1; d >= 0; d--) {
			int64_t index = rest % x->dims[d];
			rest /= x->dims[d];
			if (!reduced[d]) {
				at += index * scale;
				scale *= x->dims[d];
			}
		}
		sum[at] += fabs(f8_rt_tensor_get(x, i));
	}
	for (int64_t i = 0; !status && i < kept; i++)
		f8_rt_tensor_set(out, i, sum[i]);
	f8_free(sum);
	return status;
}

/* A CrossEntropyMerge's reduced loss's M: its counted rows' |max + log(sum_exp) - target|,
 * summed, over their count for a mean (as the reference kernel reduces the rows). */
static f8_status merge_magnitude(const f8_graph *graph, const f8_node *node,
				 const f8_rt_tensor *const *tensors, f8_rt_tensor *out,
				 f8_diag *diag) {
	const f8_rt_tensor *sums = tensors[node->inputs[0]], *target = tensors[node->inputs[1]];
	const f8_rt_tensor *max = tensors[node->inputs[2]], *labels = tensors[node->inputs[3]];
	if (!sums || !target || !max || !labels)
		return f8_diag_set(diag, F8_ERR_INVALID, "%%%s: its CrossEntropyMerge's inputs are "
				   "missing", graph->values[node->outputs[0]].name);
	int64_t ignore_index = f8_node_attr_int(node, "ignore_index", -100), one = 1, counted = 0;
	double total = 0;
	for (int64_t r = 0; r < f8_rt_tensor_numel(labels); r++) {
		if (f8_rt_tensor_get(labels, r) == (double)ignore_index)
			continue;
		total += fabs(f8_rt_tensor_get(max, r) + log(f8_rt_tensor_get(sums, r)) -
			      f8_rt_tensor_get(target, r));
		counted++;
	}
	if (!isfinite(total)) // a non-finite term: no bound from it (the result must match as is)
		total = 0;
	bool mean = strcmp(f8_node_attr_string(node, "reduction", "mean"), "mean") == 0;
	f8_status status = f8_rt_tensor_create(F8_DTYPE_F32, 1, &one, out, diag);
	if (!status)
		f8_rt_tensor_set(out, 0, mean && counted ? total / (double)counted : total);
	return status;
}

f8_status f8_case_column_magnitude(const f8_graph *graph, f8_value_id value,
				   const f8_rt_tensor *const *tensors, f8_rt_tensor *out,
				   f8_diag *diag) {
	if (!case_is_column_sum(graph, value))
		return f8_diag_set(diag, F8_ERR_INVALID, "%%%s is no column sum of a norm gradient",
				   graph->values[value].name);
	const f8_node *node = &graph->nodes[graph->values[value].producer];
	if (node->op == F8_OP_CROSS_ENTROPY_MERGE)
		return merge_magnitude(graph, node, tensors, out, diag);
	if (node->op == F8_OP_REDUCE_SUM) {
		if (!tensors[node->inputs[0]])
			return f8_diag_set(diag, F8_ERR_INVALID, "%%%s: its ReduceSum's input is "
					   "missing", graph->values[value].name);
		return reduce_magnitude(graph, node, tensors[node->inputs[0]], out, diag);
	}
	bool layer = node->op == F8_OP_LAYER_NORM_GRAD;
	bool dbeta = layer && node->n_outputs > 2 && node->outputs[2] == value;
	const f8_rt_tensor *dy = tensors[node->inputs[0]], *x = tensors[node->inputs[1]];
	if (!dy || !x || x->rank < 1 || f8_rt_tensor_numel(dy) != f8_rt_tensor_numel(x))
		return f8_diag_set(diag, F8_ERR_INVALID, "%%%s: its norm gradient's dy or x is "
				   "missing", graph->values[value].name);
	int64_t cols = x->dims[x->rank - 1], rows = cols ? f8_rt_tensor_numel(x) / cols : 0;
	double epsilon = f8_node_attr_float(node, "epsilon", 1e-5);
	double *row = f8_calloc(cols ? (size_t)cols : 1, sizeof *row);
	double *sum = f8_calloc(cols ? (size_t)cols : 1, sizeof *sum);
	f8_status status = row && sum ? f8_rt_tensor_create(F8_DTYPE_F32, 1, &cols, out, diag)
				      : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	for (int64_t r = 0; !status && r < rows; r++) {
		double mean = 0, rstd = 1;
		for (int64_t i = 0; i < cols; i++)
			row[i] = f8_rt_tensor_get(x, r * cols + i);
		if (!dbeta)
			row_statistics(row, cols, layer, epsilon, &mean, &rstd);
		for (int64_t i = 0; i < cols; i++) {
			double g = fabs(f8_rt_tensor_get(dy, r * cols + i));
			sum[i] += dbeta ? g : g * (fabs(row[i]) + fabs(mean)) * rstd;
		}
	}
	for (int64_t i = 0; !status && i < cols; i++)
		f8_rt_tensor_set(out, i, sum[i]);
	f8_free(row);
	f8_free(sum);
	return status;
}

void f8_case_compare(const f8_rt_tensor *reference, const void *got, bool fp8_neighbour,
		     bool rounded_twice, const f8_rt_tensor *magnitude, case_comparison *out) {
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
			double rounding = dtype == F8_DTYPE_BF16 ? 1.0 / 128 : 2e-5;
			double relative = rounded_twice ? 2 * rounding : rounding;
			// A column sum's terms' error: one rounding of each term's magnitude.
			double terms = magnitude && i < f8_rt_tensor_numel(magnitude)
					       ? rounding * f8_rt_tensor_get(magnitude, i) : 0;
			ok = error <= relative * fabs(want) + terms + 1e-5 * largest;
		}
		if (!ok && out->bad++ == 0) {
			out->first = i;
			out->want = want;
			out->got = have;
		}
	}
}
