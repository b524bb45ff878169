/*
 * Reference kernels of the FP8 ops (ir/infer_fused.c: Quantize, Dequantize, Amax, CastTranspose)
 * and of ONNX's QuantizeLinear and DequantizeLinear (ir/infer_primitive.c), through the
 * bit-exact numerics of ir/fp8.h. Scaled tensors are (rows, cols) matrices: the product of the
 * leading dims by the last dim. High-precision inputs are decoded to float32 first (exact for
 * bf16, f16; f64 rounds), as the GPU's cast kernels read them.
 */
#include <math.h>   // nearbyint, isnan
#include <stdint.h> // int64_t, uint8_t
#include <string.h> // memcpy

#include "ir/alloc.h"                // f8_free
#include "ir/fp8.h"                  // f8_quantize, f8_amax, f8_scale_from_amax, ...
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

/* With a given scale (delayed scaling): codes = encode(x * scale of x's block, saturate). */
static void quantize_with_scale(const float *x, int64_t rows, int64_t cols, const f8_attr *block,
				const f8_rt_tensor *scale, bool saturate, f8_rt_tensor *codes) {
	uint8_t *out = codes->data;
	if (!block) {
		f8_quantize(x, (size_t)(rows * cols), codes->dtype, (float)f8_cpu_get(scale, 0),
			    saturate, out);
		return;
	}
	int64_t block_rows = block->ints.items[0], block_cols = block->ints.items[1];
	int64_t grid_cols = scale->dims[1];
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < cols; c += block_cols) {
			int64_t width = cols - c < block_cols ? cols - c : block_cols;
			int64_t at = (r / block_rows) * grid_cols + c / block_cols;
			float s = (float)f8_cpu_get(scale, at);
			f8_quantize(x + r * cols + c, (size_t)width, codes->dtype, s, saturate,
				    out + r * cols + c);
		}
}

/*
 * Quantize: x -> FP8 codes. With a scale input, the codes at that scale (per tensor or per
 * block). Without, the scale is found here and scale_inv is the second output: per tensor
 * (current scaling) scale = f8_scale_from_amax(amax of x, margin) with 1 kept for an all-zero
 * (or non-finite) amax, as TransformerEngine's current scaling starts from 1; per block
 * f8_quantize_blocks; MX (e8m0 scales, block [1, 32]) f8_quantize_mx. Block and MX casts
 * saturate, as ir/fp8.h (and every block-scaled recipe) defines them: saturate=0 is refused
 * there rather than ignored.
 */
F8_CPU_KERNEL(QUANTIZE) {
	const f8_rt_tensor *x = call->inputs[0], *scale = f8_cpu_input(call, 1);
	f8_rt_tensor *codes = &call->outputs[0], *scale_inv = f8_cpu_output(call, 1);
	bool saturate = f8_node_attr_int(call->node, "saturate", 1);
	int margin = (int)f8_node_attr_int(call->node, "margin", 0);
	const f8_attr *block = f8_node_attr(call->node, "block");
	int64_t rows, cols;
	matrix_of(x, &rows, &cols);
	if (!scale && block && !saturate) {
		f8_status status = f8_cpu_fail_unsupported(
			call, diag, "block-scaled Quantize always saturates; saturate=0 is not "
				    "supported");
		f8_diag_hint(diag, "drop saturate=0, or quantize per tensor");
		return status;
	}
	const float *xf;
	float *owned;
	f8_status status = as_float(x, &xf, &owned, diag);
	if (status)
		return status;
	size_t n = (size_t)(rows * cols);
	if (scale) {
		quantize_with_scale(xf, rows, cols, block, scale, saturate, codes);
	} else if (!block) {
		float s = f8_scale_from_amax(codes->dtype, f8_amax(xf, n), margin, 1.0f);
		f8_quantize(xf, n, codes->dtype, s, saturate, codes->data);
		f8_cpu_set(scale_inv, 0, 1.0f / s);
	} else if (scale_inv->dtype == F8_DTYPE_E8M0) {
		f8_quantize_mx(xf, (size_t)rows, (size_t)cols, codes->dtype, codes->data,
			       scale_inv->data);
	} else {
		size_t block_rows = (size_t)block->ints.items[0];
		size_t block_cols = (size_t)block->ints.items[1];
		f8_quantize_blocks(xf, (size_t)rows, (size_t)cols, codes->dtype, block_rows,
				   block_cols, margin, codes->data, scale_inv->data);
	}
	f8_free(owned);
	return F8_OK;
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
					     (size_t)block->ints.items[0],
					     (size_t)block->ints.items[1], scales, values);
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

/*
 * CastTranspose: the codes of x * scale (x's shape), the same codes transposed as a
 * (cols, rows) matrix, and the amax of x itself (unscaled, as TransformerEngine's
 * cast_transpose records it for the next scale), in one pass over x.
 */
F8_CPU_KERNEL(CAST_TRANSPOSE) {
	const f8_rt_tensor *x = call->inputs[0], *scale = call->inputs[1];
	f8_rt_tensor *codes = &call->outputs[0], *transposed = &call->outputs[1];
	bool saturate = f8_node_attr_int(call->node, "saturate", 1);
	int64_t rows, cols;
	matrix_of(x, &rows, &cols);
	const float *xf;
	float *owned;
	f8_status status = as_float(x, &xf, &owned, diag);
	if (status)
		return status;
	uint8_t *c = codes->data, *t = transposed->data;
	float s = (float)f8_cpu_get(scale, 0);
	f8_quantize(xf, (size_t)(rows * cols), codes->dtype, s, saturate, c);
	for (int64_t r = 0; r < rows; r++)
		for (int64_t j = 0; j < cols; j++)
			t[j * rows + r] = c[r * cols + j];
	f8_cpu_set(&call->outputs[2], 0, f8_amax(xf, (size_t)(rows * cols)));
	f8_free(owned);
	return F8_OK;
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

/* Placeholders until the kernels land (issue 5). */
F8_CPU_KERNEL(SCALING_UPDATE) {
	return f8_cpu_fail_unsupported(call, diag, "ScalingUpdate has no CPU kernel yet");
}

F8_CPU_KERNEL(FP8_GEMM) {
	return f8_cpu_fail_unsupported(call, diag, "FP8Gemm has no CPU kernel yet");
}
