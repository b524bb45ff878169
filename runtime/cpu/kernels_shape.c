/*
 * Reference kernels of the ops that move elements without arithmetic (Reshape, Transpose,
 * Squeeze, Unsqueeze, Concat, Split, Slice, Expand, Gather, GatherND, Trilu), make them
 * (Constant, ConstantOfShape, Shape, Range) or add them up along an axis (CumSum). Moves are
 * byte copies, so every dtype is exact; output shapes are the ones type inference gave, which
 * the executor allocated, so Reshape and its kin are a plain copy.
 */
#include <math.h>   // isnan
#include <stdbool.h> // bool
#include <stdint.h> // int64_t
#include <stdlib.h> // qsort
#include <string.h> // memcpy

#include "ir/alloc.h"                // f8_free
#include "ir/shape.h"                // f8_slice_clamp
#include "runtime/cpu/kernel_util.h" // f8_cpu_load, f8_cpu_store, f8_cpu_axis
#include "runtime/cpu/kernels.h"     // F8_CPU_KERNEL, f8_cpu_dim, f8_cpu_fail

/* Bytes of one element of `tensor`. */
static size_t element_size(const f8_rt_tensor *tensor) {
	return f8_dtype_get_info(tensor->dtype)->bytes;
}

/* The row-major element strides of `tensor`, into strides[rank]. */
static void strides_of(const f8_rt_tensor *tensor, int64_t *strides) {
	int64_t stride = 1;
	for (int d = tensor->rank - 1; d >= 0; d--) {
		strides[d] = stride;
		stride *= tensor->dims[d];
	}
}

/*
 * out[index] = src[offset + sum_d index[d] * strides[d]] for every index of out (whose dims the
 * view has; strides in elements, any sign, 0 to broadcast). Adjacent dims that the view walks
 * contiguously are merged, so that a transpose of heads copies whole head rows at a time.
 */
static void copy_view(const f8_rt_tensor *src, int64_t offset, const int64_t *strides,
		      f8_rt_tensor *out) {
	int64_t dims[F8_MAX_RANK], view_strides[F8_MAX_RANK];
	int rank = 0;
	for (int d = 0; d < out->rank; d++) {
		if (out->dims[d] == 0)
			return;
		if (out->dims[d] == 1)
			continue;
		if (rank > 0 && view_strides[rank - 1] == strides[d] * out->dims[d]) {
			dims[rank - 1] *= out->dims[d];
			view_strides[rank - 1] = strides[d];
		} else {
			dims[rank] = out->dims[d];
			view_strides[rank++] = strides[d];
		}
	}
	if (rank == 0)
		dims[0] = 1, view_strides[0] = 1, rank = 1;
	size_t size = element_size(out);
	int64_t inner = dims[rank - 1], inner_stride = view_strides[rank - 1], runs = 1;
	for (int d = 0; d < rank - 1; d++)
		runs *= dims[d];
	const char *from = src->data;
	char *to = out->data;
	for (int64_t run = 0; run < runs; run++) {
		int64_t at = offset, rest = run;
		for (int d = rank - 2; d >= 0; d--) {
			at += (rest % dims[d]) * view_strides[d];
			rest /= dims[d];
		}
		char *dest = to + (size_t)(run * inner) * size;
		if (inner_stride == 1) {
			memcpy(dest, from + (size_t)at * size, (size_t)inner * size);
		} else if (size == 4) {
			for (int64_t j = 0; j < inner; j++)
				memcpy(dest + 4 * j, from + (size_t)(at + j * inner_stride) * 4, 4);
		} else {
			for (int64_t j = 0; j < inner; j++)
				memcpy(dest + (size_t)j * size,
				       from + (size_t)(at + j * inner_stride) * size, size);
		}
	}
}

/* The same bytes, in the shape type inference gave: Reshape (its 0 and -1 already resolved),
 * Squeeze, Unsqueeze. */
static f8_status copy_bytes(const f8_cpu_kernel_call *call) {
	if (call->outputs[0].n_bytes)
		memcpy(call->outputs[0].data, call->inputs[0]->data, call->outputs[0].n_bytes);
	return F8_OK;
}

F8_CPU_KERNEL(RESHAPE) {
	(void)diag;
	return copy_bytes(call);
}

F8_CPU_KERNEL(SQUEEZE) {
	(void)diag;
	return copy_bytes(call);
}

F8_CPU_KERNEL(UNSQUEEZE) {
	(void)diag;
	return copy_bytes(call);
}

/* Transpose: out dim i is x dim perm[i] (perm reverses the dims when absent). */
F8_CPU_KERNEL(TRANSPOSE) {
	(void)diag;
	const f8_rt_tensor *x = call->inputs[0];
	const f8_attr *perm = f8_node_attr(call->node, "perm");
	int64_t x_strides[F8_MAX_RANK], strides[F8_MAX_RANK];
	strides_of(x, x_strides);
	for (int i = 0; i < x->rank; i++)
		strides[i] = x_strides[perm ? perm->ints.items[i] : x->rank - 1 - i];
	copy_view(x, 0, strides, &call->outputs[0]);
	return F8_OK;
}

/* Expand: x broadcast to the output's shape. */
F8_CPU_KERNEL(EXPAND) {
	(void)diag;
	const f8_rt_tensor *x = call->inputs[0];
	f8_rt_tensor *out = &call->outputs[0];
	int64_t x_strides[F8_MAX_RANK], strides[F8_MAX_RANK];
	strides_of(x, x_strides);
	for (int d = 0; d < out->rank; d++) {
		int xd = d - (out->rank - x->rank);
		strides[d] = xd < 0 || x->dims[xd] == 1 ? 0 : x_strides[xd];
	}
	copy_view(x, 0, strides, out);
	return F8_OK;
}

/* The layout Concat and Split share: the whole tensor is `outer` rows of whole_row bytes, and
 * each part a band of those rows: dims[axis] * inner_bytes bytes at the same place in each. */
typedef struct band_layout {
	int axis;
	int64_t outer;
	size_t inner_bytes; // bytes of one step along the axis
	size_t whole_row;
} band_layout;

static band_layout band_layout_of(const f8_rt_tensor *whole, int64_t axis_attr) {
	int axis = f8_cpu_axis(axis_attr, whole->rank);
	size_t inner = (size_t)f8_cpu_dims_product(whole, axis + 1, whole->rank);
	band_layout layout = {.axis = axis, .outer = f8_cpu_dims_product(whole, 0, axis),
			      .inner_bytes = inner * element_size(whole)};
	layout.whole_row = (size_t)whole->dims[axis] * layout.inner_bytes;
	return layout;
}

F8_CPU_KERNEL(CONCAT) {
	(void)diag;
	f8_rt_tensor *out = &call->outputs[0];
	band_layout layout = band_layout_of(out, f8_node_attr_int(call->node, "axis", 0));
	size_t at = 0;
	for (uint32_t i = 0; i < call->node->n_inputs; i++) {
		const f8_rt_tensor *part = call->inputs[i];
		size_t part_row = (size_t)part->dims[layout.axis] * layout.inner_bytes;
		for (int64_t o = 0; part_row && o < layout.outer; o++)
			memcpy((char *)out->data + (size_t)o * layout.whole_row + at,
			       (const char *)part->data + (size_t)o * part_row, part_row);
		at += part_row;
	}
	return F8_OK;
}

F8_CPU_KERNEL(SPLIT) {
	(void)diag;
	const f8_rt_tensor *x = call->inputs[0];
	band_layout layout = band_layout_of(x, f8_node_attr_int(call->node, "axis", 0));
	size_t at = 0;
	for (uint32_t i = 0; i < call->node->n_outputs; i++) {
		f8_rt_tensor *part = &call->outputs[i];
		size_t part_row = (size_t)part->dims[layout.axis] * layout.inner_bytes;
		for (int64_t o = 0; part_row && o < layout.outer; o++)
			memcpy((char *)part->data + (size_t)o * part_row,
			       (const char *)x->data + (size_t)o * layout.whole_row + at, part_row);
		at += part_row;
	}
	return F8_OK;
}

/* Slice: x[start:end:step] along each listed axis (ONNX clamping; negative steps walk back). */
F8_CPU_KERNEL(SLICE) {
	const f8_rt_tensor *x = call->inputs[0];
	f8_rt_tensor *out = &call->outputs[0];
	const f8_attr *starts = f8_node_attr(call->node, "starts");
	const f8_attr *ends = f8_node_attr(call->node, "ends");
	const f8_attr *axes = f8_node_attr(call->node, "axes");
	const f8_attr *steps = f8_node_attr(call->node, "steps");
	int64_t strides[F8_MAX_RANK], offset = 0;
	strides_of(x, strides);
	for (uint32_t i = 0; i < starts->dims.n; i++) {
		int axis = f8_cpu_axis(axes ? axes->ints.items[i] : (int64_t)i, x->rank);
		int64_t step = steps ? steps->ints.items[i] : 1, size = x->dims[axis];
		int64_t start = f8_cpu_dim(call, starts->dims.items[i]);
		int64_t end = f8_cpu_dim(call, ends->dims.items[i]);
		int64_t length = f8_slice_clamp(size, &start, &end, step);
		if (length != out->dims[axis])
			return f8_cpu_fail(call, diag, "slicing axis %d (size %lld) from %lld to "
						       "%lld gives %lld elements, but the output "
						       "has %lld",
					   axis, (long long)size, (long long)start, (long long)end,
					   (long long)length, (long long)out->dims[axis]);
		offset += start * strides[axis];
		strides[axis] *= step;
	}
	copy_view(x, offset, strides, out);
	return F8_OK;
}

/* Reports index `index` along an axis of `size` as out of range. */
static f8_status index_error(const f8_cpu_kernel_call *call, f8_diag *diag, int64_t index,
			     int64_t position, int64_t size) {
	f8_status status = f8_cpu_fail(call, diag, "index %lld at position %lld of the indices is "
						   "outside [-%lld, %lld)", (long long)index,
				       (long long)position, (long long)size, (long long)size);
	f8_diag_hint(diag, "indices may count from the end (negative) but must stay in the axis");
	return status;
}

/* Gather (ONNX): out[a..., i..., b...] = data[a..., indices[i...], b...] along `axis`. */
F8_CPU_KERNEL(GATHER) {
	const f8_rt_tensor *data = call->inputs[0], *indices = call->inputs[1];
	f8_rt_tensor *out = &call->outputs[0];
	int axis = f8_cpu_axis(f8_node_attr_int(call->node, "axis", 0), data->rank);
	int64_t outer = f8_cpu_dims_product(data, 0, axis), axis_size = data->dims[axis];
	size_t row = (size_t)f8_cpu_dims_product(data, axis + 1, data->rank) * element_size(data);
	int64_t n = f8_rt_tensor_numel(indices);
	for (int64_t p = 0; p < n; p++) {
		int64_t index = (int64_t)f8_cpu_get(indices, p);
		if (index < -axis_size || index >= axis_size)
			return index_error(call, diag, index, p, axis_size);
		if (index < 0)
			index += axis_size;
		for (int64_t o = 0; row && o < outer; o++) {
			size_t from = (size_t)(o * axis_size + index) * row;
			memcpy((char *)out->data + (size_t)(o * n + p) * row,
			       (const char *)data->data + from, row);
		}
	}
	return F8_OK;
}

/* GatherND (ONNX): per batch (the first batch_dims dims of both), each index tuple of the
 * last indices dim (m entries) picks the slice data[batch, i_0, ..., i_{m-1}]. */
F8_CPU_KERNEL(GATHER_ND) {
	const f8_rt_tensor *data = call->inputs[0], *indices = call->inputs[1];
	f8_rt_tensor *out = &call->outputs[0];
	int b = (int)f8_node_attr_int(call->node, "batch_dims", 0);
	int m = (int)indices->dims[indices->rank - 1];
	int64_t batches = f8_cpu_dims_product(data, 0, b);
	int64_t tuples = f8_cpu_dims_product(indices, b, indices->rank - 1);
	int64_t slice = f8_cpu_dims_product(data, b + m, data->rank);
	int64_t batch_size = f8_cpu_dims_product(data, b, data->rank);
	size_t size = element_size(data), slice_bytes = (size_t)slice * size;
	for (int64_t batch = 0; batch < batches; batch++) {
		for (int64_t t = 0; t < tuples; t++) {
			int64_t tuple = batch * tuples + t, at = batch * batch_size;
			for (int i = 0; i < m; i++) {
				int64_t size_i = data->dims[b + i], position = tuple * m + i;
				int64_t index = (int64_t)f8_cpu_get(indices, position);
				if (index < -size_i || index >= size_i)
					return index_error(call, diag, index, position, size_i);
				at += (index < 0 ? index + size_i : index) *
				      f8_cpu_dims_product(data, b + i + 1, data->rank);
			}
			if (slice_bytes)
				memcpy((char *)out->data + (size_t)tuple * slice_bytes,
				       (const char *)data->data + (size_t)at * size, slice_bytes);
		}
	}
	return F8_OK;
}

/* Trilu: the upper (j - i >= k) or lower (j - i <= k) triangle of each trailing matrix, the
 * rest zero (the output starts zeroed). */
F8_CPU_KERNEL(TRILU) {
	(void)diag;
	const f8_rt_tensor *x = call->inputs[0];
	f8_rt_tensor *out = &call->outputs[0];
	bool upper = f8_node_attr_int(call->node, "upper", 1);
	int64_t k = f8_node_attr_int(call->node, "k", 0);
	int64_t rows = x->dims[x->rank - 2], cols = x->dims[x->rank - 1];
	int64_t matrices = f8_cpu_dims_product(x, 0, x->rank - 2);
	size_t size = element_size(x);
	for (int64_t mtx = 0; mtx < matrices; mtx++)
		for (int64_t i = 0; i < rows; i++)
			for (int64_t j = 0; j < cols; j++) {
				if (upper ? j - i < k : j - i > k)
					continue;
				size_t at = (size_t)((mtx * rows + i) * cols + j) * size;
				memcpy((char *)out->data + at, (const char *)x->data + at, size);
			}
	return F8_OK;
}

/* CumSum: running sums along `axis` in double, inclusive unless exclusive=1 (each element the
 * sum of those before it), from the end when reverse=1. */
F8_CPU_KERNEL(CUM_SUM) {
	const f8_rt_tensor *x = call->inputs[0];
	f8_rt_tensor *out = &call->outputs[0];
	int axis = f8_cpu_axis(f8_node_attr_int(call->node, "axis", 0), x->rank);
	bool exclusive = f8_node_attr_int(call->node, "exclusive", 0);
	bool reverse = f8_node_attr_int(call->node, "reverse", 0);
	int64_t outer = f8_cpu_dims_product(x, 0, axis), n = x->dims[axis];
	int64_t inner = f8_cpu_dims_product(x, axis + 1, x->rank);
	double *line;
	f8_status status = f8_cpu_alloc(n, sizeof(double), (void **)&line, diag);
	if (status)
		return status;
	for (int64_t o = 0; o < outer; o++)
		for (int64_t i = 0; i < inner; i++) {
			int64_t start = o * n * inner + i;
			f8_cpu_load(x, start, inner, n, line);
			double sum = 0.0;
			for (int64_t s = 0; s < n; s++) {
				int64_t j = reverse ? n - 1 - s : s;
				double value = line[j];
				line[j] = exclusive ? sum : sum + value;
				sum += value;
			}
			f8_cpu_store(out, start, inner, n, line);
		}
	f8_free(line);
	return F8_OK;
}

/* One element of a TopK line: its value and its place along the axis. */
typedef struct ranked {
	double value;
	int64_t index;
} ranked;

/* Largest first, NaN above every number (as NumPy sorts it last); equal values by place. */
static int larger_first(const void *pa, const void *pb) {
	const ranked *a = pa, *b = pb;
	bool na = isnan(a->value), nb = isnan(b->value);
	if (na != nb)
		return na ? -1 : 1;
	if (!na && a->value != b->value)
		return a->value > b->value ? -1 : 1;
	return a->index < b->index ? -1 : a->index > b->index;
}

/* Smallest first, NaN below none (last); equal values by place. */
static int smaller_first(const void *pa, const void *pb) {
	const ranked *a = pa, *b = pb;
	bool na = isnan(a->value), nb = isnan(b->value);
	if (na != nb)
		return na ? 1 : -1;
	if (!na && a->value != b->value)
		return a->value < b->value ? -1 : 1;
	return a->index < b->index ? -1 : a->index > b->index;
}

/* TopK: along `axis`, the k largest (or smallest) values in order and their indices, equal
 * values in the order of their places (ONNX's rule); sorted or not, the order is the same. */
F8_CPU_KERNEL(TOP_K) {
	const f8_rt_tensor *x = call->inputs[0];
	f8_rt_tensor *values = &call->outputs[0], *indices = &call->outputs[1];
	int axis = f8_cpu_axis(f8_node_attr_int(call->node, "axis", -1), x->rank);
	bool largest = f8_node_attr_int(call->node, "largest", 1);
	int64_t outer = f8_cpu_dims_product(x, 0, axis), n = x->dims[axis];
	int64_t inner = f8_cpu_dims_product(x, axis + 1, x->rank), k = values->dims[axis];
	if (k > n)
		return f8_cpu_fail(call, diag, "k is %lld, more than the %lld elements along axis %d",
				   (long long)k, (long long)n, axis);
	double *line;
	ranked *order;
	f8_status status = f8_cpu_alloc(n + 1, sizeof *line, (void **)&line, diag);
	if (!status && (status = f8_cpu_alloc(n + 1, sizeof *order, (void **)&order, diag)))
		f8_free(line);
	if (status)
		return status;
	for (int64_t o = 0; o < outer; o++)
		for (int64_t i = 0; i < inner; i++) {
			f8_cpu_load(x, o * n * inner + i, inner, n, line);
			for (int64_t j = 0; j < n; j++)
				order[j] = (ranked){.value = line[j], .index = j};
			qsort(order, (size_t)n, sizeof *order, largest ? larger_first : smaller_first);
			for (int64_t j = 0; j < k; j++)
				line[j] = order[j].value;
			f8_cpu_store(values, o * k * inner + i, inner, k, line);
			for (int64_t j = 0; j < k; j++)
				line[j] = (double)order[j].index;
			f8_cpu_store(indices, o * k * inner + i, inner, k, line);
		}
	f8_free(line);
	f8_free(order);
	return F8_OK;
}

/* Tensors made from attributes. */

F8_CPU_KERNEL(CONSTANT) {
	const f8_tensor_data *value = f8_node_attr(call->node, "value")->tensor;
	f8_rt_tensor *out = &call->outputs[0];
	if (value->n_bytes != out->n_bytes)
		return f8_cpu_fail(call, diag, "the constant holds %zu bytes, its output %zu",
				   value->n_bytes, out->n_bytes);
	if (out->n_bytes)
		memcpy(out->data, value->data, out->n_bytes);
	return F8_OK;
}

/* ConstantOfShape: every element the one value of attribute value (0.0f when absent: the
 * output starts zeroed). */
F8_CPU_KERNEL(CONSTANT_OF_SHAPE) {
	(void)diag;
	const f8_attr *value = f8_node_attr(call->node, "value");
	f8_rt_tensor *out = &call->outputs[0];
	if (!value)
		return F8_OK;
	size_t size = element_size(out);
	for (size_t at = 0; at < out->n_bytes; at += size)
		memcpy((char *)out->data + at, value->tensor->data, size);
	return F8_OK;
}

/* Shape: the input's dims from start to end (as a Slice of the dims). */
F8_CPU_KERNEL(SHAPE) {
	(void)diag;
	const f8_rt_tensor *x = call->inputs[0];
	f8_rt_tensor *out = &call->outputs[0];
	int64_t start = f8_node_attr_int(call->node, "start", 0), end = x->rank;
	f8_slice_clamp(x->rank, &start, &end, 1); // out's length is type inference's
	for (int64_t i = 0; i < out->dims[0]; i++)
		f8_cpu_set(out, i, (double)x->dims[start + i]);
	return F8_OK;
}

/* Range: start, start + delta, ... (the length type inference found from the limit). */
F8_CPU_KERNEL(RANGE) {
	(void)diag;
	f8_rt_tensor *out = &call->outputs[0];
	int64_t start = f8_node_attr_int(call->node, "start", 0);
	int64_t delta = f8_node_attr_int(call->node, "delta", 1);
	for (int64_t i = 0; i < out->dims[0]; i++)
		f8_cpu_set(out, i, (double)start + (double)i * (double)delta);
	return F8_OK;
}
