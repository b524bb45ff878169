/*
 * Reference kernels of the FP8 ops (ir/infer_fused.c: Quantize, Dequantize, Amax, CastTranspose,
 * ScalingUpdate; FP8Gemm is in kernels_fp8_gemm.c) and of ONNX's QuantizeLinear and
 * DequantizeLinear (ir/infer_primitive.c), through the bit-exact numerics of ir/fp8.h. Scaled
 * tensors are (rows, cols) matrices: the product of the leading dims by the last dim; a block
 * size of 0 spans the whole axis. High-precision inputs are decoded to float32 first (exact for
 * bf16, f16; f64 rounds), as the GPU's cast kernels read them.
 */
#include <math.h>   // nearbyint, isnan, isfinite
#include <stdint.h> // int64_t, uint8_t
#include <string.h> // memcpy, memset, strcmp

#include "ir/alloc.h"                // f8_free
#include "ir/fp8.h"                  // f8_quantize, f8_amax, f8_float_encode, ...
#include "ir/ops.h"                  // f8_cast_scale_input, f8_cast_counts_input
#include "runtime/cpu/kernel_forward.h" // f8_cpu_moe_check_counts
#include "runtime/cpu/kernel_util.h" // f8_cpu_alloc, f8_cpu_get, f8_cpu_set
#include "runtime/cpu/kernels.h"     // F8_CPU_KERNEL, f8_cpu_fail

/* `tensor` as float32: its own data when it is f32, else a decoded copy in *owned. */
static f8_status as_float(const f8_rt_tensor *tensor, const float **out, float **owned,
			  f8_diag *diag) {
	*owned = NULL;
	int64_t n = f8_rt_tensor_numel(tensor);
	if (tensor->dtype == F8_DTYPE_F32) {
		*out = tensor->data;
		return F8_OK;
	}
	f8_status status = f8_cpu_alloc(n, sizeof(float), (void **)owned, diag);
	for (int64_t i = 0; !status && i < n; i++)
		(*owned)[i] = (float)f8_cpu_get(tensor, i);
	*out = *owned;
	return status;
}

/* Stores float32 values into `out`, rounding to its dtype (exact when it is f32). */
static void store_floats(const float *values, f8_rt_tensor *out) {
	int64_t n = f8_rt_tensor_numel(out);
	if (out->dtype == F8_DTYPE_F32) {
		if (n)
			memcpy(out->data, values, (size_t)n * sizeof(float));
		return;
	}
	for (int64_t i = 0; i < n; i++)
		f8_cpu_set(out, i, values[i]);
}

/* The (rows, cols) matrix view of `tensor`: cols the last dim (1 for a scalar). */
static void matrix_of(const f8_rt_tensor *tensor, int64_t *rows, int64_t *cols) {
	*cols = tensor->rank ? tensor->dims[tensor->rank - 1] : 1;
	*rows = tensor->rank ? f8_cpu_dims_product(tensor, 0, tensor->rank - 1) : 1;
}

/* A block size along an axis of `extent` elements: 0 spans the whole axis (rowwise is [1, 0]);
 * never 0, so that an empty axis still divides. */
static size_t block_along(int64_t block, int64_t extent) {
	int64_t size = block == 0 ? extent : block;
	return size > 0 ? (size_t)size : 1;
}

/*
 * How a Quantize or CastTranspose node casts, read once from its attributes and scale input.
 * The scale is given (delayed scaling: a scalar, a table entry picked by `slot`, or a grid of
 * one f32 per block) or found from the data (current per-tensor, block, rowwise, MX).
 */
typedef struct cast_recipe {
	f8_dtype format;
	bool saturate;
	int margin;
	const f8_attr *block;       // NULL: per tensor
	bool mx;                    // block [1, 32] with e8m0 scales (ir/fp8.h f8_quantize_mx)
	const f8_rt_tensor *grid;   // a given scale per block, or NULL
	bool given;                 // a per-tensor scale is given: `scale`
	float scale;
} cast_recipe;

static cast_recipe recipe_of(const f8_cpu_kernel_call *call, f8_dtype format,
			     const f8_rt_tensor *scale_inv) {
	const f8_node *node = call->node;
	int scale_at = f8_cast_scale_input(node);
	const f8_rt_tensor *scale = scale_at < 0 ? NULL : f8_cpu_input(call, (uint32_t)scale_at);
	cast_recipe recipe = {.format = format,
			      .saturate = f8_node_attr_int(node, "saturate", 1),
			      .margin = (int)f8_node_attr_int(node, "margin", 0),
			      .block = f8_node_attr(node, "block")};
	recipe.mx = recipe.block && scale_inv && scale_inv->dtype == F8_DTYPE_E8M0;
	if (scale && f8_node_attr(node, "slot")) {
		recipe.given = true;
		recipe.scale = (float)f8_cpu_get(scale, f8_node_attr_int(node, "slot", 0));
	} else if (scale && !recipe.block) {
		recipe.given = true;
		recipe.scale = (float)f8_cpu_get(scale, 0);
	} else if (scale) {
		recipe.grid = scale;
	}
	return recipe;
}

/* codes = encode(x * the scale of x's block): the given grid (grid_cols per row of blocks). */
static void quantize_with_grid(const float *x, int64_t rows, int64_t cols, size_t block_rows,
			       size_t block_cols, const f8_rt_tensor *grid, f8_dtype format,
			       bool saturate, uint8_t *codes) {
	int64_t grid_cols = grid->rank == 2 ? grid->dims[1] : 1;
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < cols; c += (int64_t)block_cols) {
			int64_t width = cols - c < (int64_t)block_cols ? cols - c : (int64_t)block_cols;
			int64_t at = (r / (int64_t)block_rows) * grid_cols + c / (int64_t)block_cols;
			f8_quantize(x + r * cols + c, (size_t)width, format,
				    (float)f8_cpu_get(grid, at), saturate, codes + r * cols + c);
		}
}

/*
 * Casts the row-major (rows, cols) matrix x under `recipe` into codes (rows * cols bytes) and,
 * when not NULL, scale_inv (the recipe's grid over this matrix, or a scalar). Given scales give
 * scale_inv = 1 / scale (in float32, as the found per-tensor scale's is); found ones come from
 * ir/fp8.h's quantizers. Current per-tensor scaling keeps a scale of 1 for an all-zero or
 * non-finite amax, as TransformerEngine's current scaling starts from 1.
 */
static void quantize_matrix(const float *x, int64_t rows, int64_t cols, const cast_recipe *recipe,
			    uint8_t *codes, f8_rt_tensor *scale_inv) {
	size_t n = (size_t)(rows * cols);
	size_t block_rows = 0, block_cols = 0;
	if (recipe->block) {
		block_rows = block_along(recipe->block->ints.items[0], rows);
		block_cols = block_along(recipe->block->ints.items[1], cols);
	}
	if (recipe->grid) {
		quantize_with_grid(x, rows, cols, block_rows, block_cols, recipe->grid,
				   recipe->format, recipe->saturate, codes);
		int64_t blocks = f8_rt_tensor_numel(recipe->grid);
		for (int64_t i = 0; scale_inv && i < blocks; i++)
			f8_cpu_set(scale_inv, i, 1.0f / (float)f8_cpu_get(recipe->grid, i));
	} else if (recipe->given || !recipe->block) {
		float s = recipe->given ? recipe->scale
					: f8_scale_from_amax(recipe->format, f8_amax(x, n),
							     recipe->margin, 1.0f);
		f8_quantize(x, n, recipe->format, s, recipe->saturate, codes);
		if (scale_inv)
			f8_cpu_set(scale_inv, 0, 1.0f / s);
	} else if (recipe->mx) {
		f8_quantize_mx(x, (size_t)rows, (size_t)cols, recipe->format, codes,
			       scale_inv->data);
	} else {
		f8_quantize_blocks(x, (size_t)rows, (size_t)cols, recipe->format, block_rows,
				   block_cols, recipe->margin, codes, scale_inv->data);
	}
}

/* Block-scaled casts find their scales and always saturate (ir/fp8.h defines them so, as every
 * block-scaled recipe does): saturate=0 is refused there rather than ignored. */
static f8_status check_saturation(const f8_cpu_kernel_call *call, const cast_recipe *recipe,
				  f8_diag *diag) {
	if (recipe->given || recipe->grid || !recipe->block || recipe->saturate)
		return F8_OK;
	f8_status status = f8_cpu_fail_unsupported(
		call, diag, "a block-scaled cast always saturates; saturate=0 is not supported");
	f8_diag_hint(diag, "drop saturate=0, or quantize per tensor");
	return status;
}

/*
 * A grouped cast (grouped=1, ir/infer_fused.c): group g's rows, the g-th slice of an
 * (E, rows, cols) x or the g-th segment of counts' rows, quantized per tensor at the table's
 * entry slot + g, or at the scale found from the group's amax as current scaling finds it;
 * scale_inv[g] = 1 / that scale and, when asked, amax[g] the group's amax. The counts must be
 * non-negative and add up to at most the rows: the rows after them are padding
 * (f8_cpu_moe_check_counts), in no group's amax, their codes those of +0.
 */
static f8_status quantize_groups(const f8_cpu_kernel_call *call, const float *x,
				 const cast_recipe *recipe, uint8_t *codes, f8_rt_tensor *scale_inv,
				 f8_rt_tensor *amax, f8_diag *diag) {
	const f8_rt_tensor *input = call->inputs[0];
	int counts_at = f8_cast_counts_input(call->node);
	int scale_at = f8_cast_scale_input(call->node);
	const f8_rt_tensor *table = scale_at < 0 ? NULL : call->inputs[scale_at];
	int64_t slot = f8_node_attr_int(call->node, "slot", 0);
	int64_t cols = input->dims[input->rank - 1], groups = f8_rt_tensor_numel(scale_inv);
	int64_t rows = f8_cpu_dims_product(input, 0, input->rank - 1), largest, total = rows;
	const f8_rt_tensor *counts = counts_at < 0 ? NULL : call->inputs[counts_at];
	f8_status status = counts ? f8_cpu_moe_check_counts(call, counts, rows, &largest, &total,
							    diag)
				  : F8_OK;
	for (int64_t g = 0, start = 0; !status && g < groups; g++) {
		int64_t length = counts ? (int64_t)f8_cpu_get(counts, g) : rows / groups;
		size_t n = (size_t)(length * cols), at = (size_t)(start * cols);
		float group_amax = f8_amax(x + at, n);
		float scale = table ? (float)f8_cpu_get(table, slot + g)
				    : f8_scale_from_amax(recipe->format, group_amax, recipe->margin,
							 1.0f);
		f8_quantize(x + at, n, recipe->format, scale, recipe->saturate, codes + at);
		f8_cpu_set(scale_inv, g, 1.0f / scale);
		if (amax)
			f8_cpu_set(amax, g, group_amax);
		start += length;
	}
	if (!status && rows > total && cols > 0)
		memset(codes + total * cols, (int)f8_float_encode(recipe->format, 0.0f, true),
		       (size_t)((rows - total) * cols));
	return status;
}

/*
 * Quantize: x -> FP8 codes, scale_inv (optional with a given scale), and the amax of x
 * (optional; unscaled, what delayed scaling records). With a scale input: the codes at that
 * scale, the scalar, the table entry `slot`, or one per block. Without: the scale found here,
 * per tensor (current scaling) from the amax of x, per block by f8_quantize_blocks (block
 * [1, 0] is one scale per row), MX (e8m0 scales, block [1, 32]) by f8_quantize_mx.
 */
F8_CPU_KERNEL(QUANTIZE) {
	const f8_rt_tensor *x = call->inputs[0];
	f8_rt_tensor *codes = &call->outputs[0], *scale_inv = f8_cpu_output(call, 1);
	f8_rt_tensor *amax = f8_cpu_output(call, 2);
	cast_recipe recipe = recipe_of(call, codes->dtype, scale_inv);
	int64_t rows, cols;
	matrix_of(x, &rows, &cols);
	f8_status status = check_saturation(call, &recipe, diag);
	const float *xf;
	float *owned = NULL;
	if (!status)
		status = as_float(x, &xf, &owned, diag);
	if (status)
		return status;
	if (f8_node_attr_int(call->node, "grouped", 0)) {
		status = quantize_groups(call, xf, &recipe, codes->data, scale_inv, amax, diag);
	} else {
		quantize_matrix(xf, rows, cols, &recipe, codes->data, scale_inv);
		if (amax)
			f8_cpu_set(amax, 0, f8_amax(xf, (size_t)(rows * cols)));
	}
	f8_free(owned);
	return status;
}

/* Dequantize: decode(codes) * scale_inv of the code's block (f32, or e8m0 for MX), rounded to
 * `to`. */
F8_CPU_KERNEL(DEQUANTIZE) {
	const f8_rt_tensor *codes = call->inputs[0], *scale_inv = call->inputs[1];
	f8_rt_tensor *y = &call->outputs[0];
	const f8_attr *block = f8_node_attr(call->node, "block");
	int64_t rows, cols, n = f8_rt_tensor_numel(codes);
	matrix_of(codes, &rows, &cols);
	float *values;
	f8_status status = f8_cpu_alloc(n, sizeof(float), (void **)&values, diag);
	if (status)
		return status;
	if (!block) {
		f8_dequantize(codes->data, (size_t)n, codes->dtype, (float)f8_cpu_get(scale_inv, 0),
			      values);
	} else if (scale_inv->dtype == F8_DTYPE_E8M0 && block->ints.items[0] == 1 &&
		   block->ints.items[1] == F8_MX_BLOCK) {
		f8_dequantize_mx(codes->data, (size_t)rows, (size_t)cols, codes->dtype,
				 scale_inv->data, values);
	} else {
		const float *scales;
		float *owned;
		if (!(status = as_float(scale_inv, &scales, &owned, diag)))
			f8_dequantize_blocks(codes->data, (size_t)rows, (size_t)cols, codes->dtype,
					     block_along(block->ints.items[0], rows),
					     block_along(block->ints.items[1], cols), scales, values);
		f8_free(owned);
	}
	if (!status)
		store_floats(values, y);
	f8_free(values);
	return status;
}

/* Amax: max |x| over the tensor (f8_amax: NaN if any NaN, inf if any inf, 0 when empty). */
F8_CPU_KERNEL(AMAX) {
	const float *xf;
	float *owned;
	f8_status status = as_float(call->inputs[0], &xf, &owned, diag);
	if (status)
		return status;
	f8_cpu_set(&call->outputs[0], 0,
		   f8_amax(xf, (size_t)f8_rt_tensor_numel(call->inputs[0])));
	f8_free(owned);
	return F8_OK;
}

/* ScaleFromAmax: f8_scale_from_amax(format, amax, margin, 1) of each amax. */
F8_CPU_KERNEL(SCALE_FROM_AMAX) {
	(void)diag;
	const f8_rt_tensor *amax = call->inputs[0];
	f8_dtype format = f8_node_attr_dtype(call->node, "format", F8_DTYPE_E4M3);
	int margin = (int)f8_node_attr_int(call->node, "margin", 0);
	for (int64_t i = 0; i < f8_rt_tensor_numel(amax); i++)
		f8_cpu_set(&call->outputs[0], i,
			   f8_scale_from_amax(format, (float)f8_cpu_get(amax, i), margin, 1.0f));
	return F8_OK;
}

/* out (cols, rows) = in (rows, cols) transposed, for elements of `size` bytes. */
static void transpose(const void *in, int64_t rows, int64_t cols, size_t size, void *out) {
	const unsigned char *from = in;
	unsigned char *to = out;
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < cols; c++)
			memcpy(to + (size_t)(c * rows + r) * size, from + (size_t)(r * cols + c) * size,
			       size);
}

/* True when x^T's copy is x's copy transposed: one scale for the tensor, or square blocks, which
 * cut x^T into x's blocks transposed (same amax, same scale). */
static bool transposes_alike(const cast_recipe *recipe) {
	return recipe->given || !recipe->block ||
	       (!recipe->mx && recipe->block->ints.items[0] == recipe->block->ints.items[1]);
}

/* The transposed copy of a recipe whose blocks are not x's blocks transposed (1x128, rowwise,
 * MX): x^T quantized as a matrix of its own, through the same quantize_matrix as x. */
static f8_status quantize_transposed(const f8_cpu_kernel_call *call, const float *x, int64_t rows,
				     int64_t cols, const cast_recipe *recipe, f8_diag *diag) {
	if (recipe->grid) {
		f8_status status = f8_cpu_fail_unsupported(
			call, diag, "CastTranspose with a given scale per %lldx%lld block has no "
				    "scales for the transposed copy's blocks",
			(long long)recipe->block->ints.items[0], (long long)recipe->block->ints.items[1]);
		f8_diag_hint(diag, "give square blocks, a per-tensor scale, or no scale (found in "
				   "the cast)");
		return status;
	}
	float *xt;
	f8_status status = f8_cpu_alloc(rows * cols, sizeof(float), (void **)&xt, diag);
	if (status)
		return status;
	transpose(x, rows, cols, sizeof(float), xt);
	quantize_matrix(xt, cols, rows, recipe, call->outputs[1].data, &call->outputs[3]);
	f8_free(xt);
	return F8_OK;
}

/*
 * CastTranspose: from one read of x (rows, cols), its FP8 copy and scale_inv as Quantize makes
 * them, the copy of x^T (cols, rows) under the same recipe with its scale_inv, and the amax of
 * x (unscaled, as TransformerEngine's cast_transpose records it for the next scale). Per tensor
 * and with square blocks the transposed copy is the codes transposed (scale_inv transposed);
 * with 1x128, rowwise and MX blocks x^T has blocks of its own, quantized from a transposed copy
 * of x.
 */
F8_CPU_KERNEL(CAST_TRANSPOSE) {
	const f8_rt_tensor *x = call->inputs[0];
	f8_rt_tensor *codes = &call->outputs[0], *scale_inv = &call->outputs[2];
	cast_recipe recipe = recipe_of(call, codes->dtype, scale_inv);
	int64_t rows, cols;
	matrix_of(x, &rows, &cols);
	f8_status status = check_saturation(call, &recipe, diag);
	const float *xf;
	float *owned = NULL;
	if (!status)
		status = as_float(x, &xf, &owned, diag);
	if (status)
		return status;
	if (f8_node_attr_int(call->node, "grouped", 0)) {
		// Each group's matrix transposed (E, rows, cols); or, grouped by counts, each
		// group's rows become its columns of the one transposed matrix, and the padding
		// rows' codes of +0 its last columns.
		status = quantize_groups(call, xf, &recipe, codes->data, scale_inv,
					 &call->outputs[4], diag);
		int64_t groups = f8_rt_tensor_numel(scale_inv);
		int64_t slices = x->rank == 3 ? groups : 1, slice_rows = rows / slices;
		for (int64_t g = 0; !status && g < slices; g++)
			transpose((const uint8_t *)codes->data + g * slice_rows * cols, slice_rows,
				  cols, 1, (uint8_t *)call->outputs[1].data + g * slice_rows * cols);
		if (!status && groups)
			memcpy(call->outputs[3].data, scale_inv->data,
			       (size_t)groups * sizeof(float));
		f8_free(owned);
		return status;
	}
	quantize_matrix(xf, rows, cols, &recipe, codes->data, scale_inv);
	if (transposes_alike(&recipe)) {
		transpose(codes->data, rows, cols, 1, call->outputs[1].data);
		const f8_rt_tensor *grid = scale_inv;
		int64_t grid_rows = grid->rank == 2 ? grid->dims[0] : 1;
		int64_t grid_cols = grid->rank == 2 ? grid->dims[1] : 1;
		transpose(grid->data, grid_rows, grid_cols, f8_dtype_get_info(grid->dtype)->bytes,
			  call->outputs[3].data);
	} else {
		status = quantize_transposed(call, xf, rows, cols, &recipe, diag);
	}
	if (!status)
		f8_cpu_set(&call->outputs[4], 0, f8_amax(xf, (size_t)(rows * cols)));
	f8_free(owned);
	return status;
}

/* ONNX linear quantization. */

/* The element of a QuantizeLinear / DequantizeLinear scale (or zero point) that element i of x
 * uses: the scalar, the entry of i's index along `axis`, or (block_size > 0) the entry at i's
 * index with the axis component divided by block_size. */
static int64_t linear_scale_index(const f8_rt_tensor *x, const f8_rt_tensor *scale, int axis,
				  int64_t block_size, int64_t i) {
	if (scale->rank == 0)
		return 0;
	int64_t at = 0, stride = 1;
	for (int d = x->rank - 1; d >= 0; d--) {
		int64_t index = i % x->dims[d];
		i /= x->dims[d];
		if (block_size == 0) {
			if (d == axis)
				return index;
			continue;
		}
		at += (d == axis ? index / block_size : index) * stride;
		stride *= scale->dims[d];
	}
	return at;
}

/*
 * QuantizeLinear: y = x / scale + zero_point, in double; to i8/u8 rounded half to even and
 * clamped (saturate for integers, as ONNX defines), to FP8 converted as a Cast with
 * `saturate` does (ONNX's zero point of an FP8 quantization is 0).
 */
F8_CPU_KERNEL(QUANTIZE_LINEAR) {
	(void)diag;
	const f8_rt_tensor *x = call->inputs[0], *scale = call->inputs[1];
	const f8_rt_tensor *zero_point = f8_cpu_input(call, 2);
	f8_rt_tensor *y = &call->outputs[0];
	int axis = x->rank ? f8_cpu_axis(f8_node_attr_int(call->node, "axis", 1), x->rank) : 0;
	int64_t block_size = f8_node_attr_int(call->node, "block_size", 0);
	bool saturate = f8_node_attr_int(call->node, "saturate", 1);
	int64_t n = f8_rt_tensor_numel(x);
	for (int64_t i = 0; i < n; i++) {
		int64_t s = linear_scale_index(x, scale, axis, block_size, i);
		double value = f8_cpu_get(x, i) / f8_cpu_get(scale, s);
		double zero = zero_point ? f8_cpu_get(zero_point, s) : 0.0;
		if (f8_dtype_is_fp8(y->dtype)) {
			((uint8_t *)y->data)[i] =
				(uint8_t)f8_float_encode(y->dtype, (float)(value + zero), saturate);
		} else {
			double rounded = isnan(value) ? 0.0 : nearbyint(value) + zero;
			f8_cpu_set(y, i, rounded); // clamps to the integer range
		}
	}
	return F8_OK;
}

/* DequantizeLinear: y = (x - zero_point) * scale in double, in the scale's dtype. */
F8_CPU_KERNEL(DEQUANTIZE_LINEAR) {
	(void)diag;
	const f8_rt_tensor *x = call->inputs[0], *scale = call->inputs[1];
	const f8_rt_tensor *zero_point = f8_cpu_input(call, 2);
	f8_rt_tensor *y = &call->outputs[0];
	int axis = x->rank ? f8_cpu_axis(f8_node_attr_int(call->node, "axis", 1), x->rank) : 0;
	int64_t block_size = f8_node_attr_int(call->node, "block_size", 0);
	int64_t n = f8_rt_tensor_numel(x);
	for (int64_t i = 0; i < n; i++) {
		int64_t s = linear_scale_index(x, scale, axis, block_size, i);
		double zero = zero_point ? f8_cpu_get(zero_point, s) : 0.0;
		f8_cpu_set(y, i, (f8_cpu_get(x, i) - zero) * f8_cpu_get(scale, s));
	}
	return F8_OK;
}

/*
 * ScalingUpdate(scale f32[n], amax_history f32[len, n], nonfinite i64[], amax_0 .. amax_n-1):
 * delayed scaling's step for one table (ir/infer_fused.c; an f32[k] amax input is k slots in
 * a row). For a finite amax_i, column i of
 * the history rolls down one row (the oldest row drops out) and row 0 takes amax_i; the amax
 * used is the column's largest ("max") or row 0 ("most_recent"); scale'_i is
 * f8_scale_from_amax(format, that amax, margin, scale_i), which keeps the scale for an amax of
 * 0. A NaN or infinite amax_i leaves slot i as it was and counts in nonfinite.
 */
F8_CPU_KERNEL(SCALING_UPDATE) {
	(void)diag;
	const f8_node *node = call->node;
	const f8_rt_tensor *scale = call->inputs[0], *history = call->inputs[1];
	f8_rt_tensor *scale_out = &call->outputs[0], *history_out = &call->outputs[1];
	f8_dtype format = f8_node_attr_dtype(node, "format", F8_DTYPE_E4M3);
	bool most_recent = strcmp(f8_node_attr_string(node, "algo", "max"), "most_recent") == 0;
	int margin = (int)f8_node_attr_int(node, "margin", 0);
	int64_t length = history->dims[0], n = scale->dims[0], skipped = 0;
	// Both tables are f32 (type inference checked), in the executor's aligned buffers.
	float *scales = scale_out->data, *rows = history_out->data;
	if (n) {
		memcpy(scales, scale->data, (size_t)n * sizeof(float));
		memcpy(rows, history->data, (size_t)(length * n) * sizeof(float));
	}
	for (int64_t i = 0, input = 3, at = 0; i < n; i++, at++) {
		if (at == f8_rt_tensor_numel(call->inputs[input])) // a grouped cast's f32[k] is k slots
			input++, at = 0;
		float amax = (float)f8_cpu_get(call->inputs[input], at);
		if (!isfinite(amax)) {
			skipped++;
			continue;
		}
		for (int64_t r = length - 1; r > 0; r--)
			rows[r * n + i] = rows[(r - 1) * n + i];
		rows[i] = amax;
		float used = amax;
		for (int64_t r = 1; !most_recent && r < length; r++)
			used = rows[r * n + i] > used ? rows[r * n + i] : used;
		scales[i] = f8_scale_from_amax(format, used, margin, scales[i]);
	}
	int64_t count;
	memcpy(&count, call->inputs[2]->data, sizeof count);
	count += skipped;
	memcpy(call->outputs[2].data, &count, sizeof count);
	return F8_OK;
}
