/*
 * FP8 numerics: bit-exact conversions between float32 and the small float formats, amax and
 * scale computation, and block quantization (1x128, 128x128, MX 32-element blocks).
 *
 * Contract (DESIGN.md): conversions are bit-exact with sm_90's `cvt.rn.satfinite`: round to
 * nearest, ties to even; in saturating mode a finite value beyond the largest finite value
 * becomes that value (with its sign), and so does +-inf; NaN stays NaN. In non-saturating mode
 * (ONNX Cast with saturate=0) overflow gives NaN for E4M3 (it has no infinity) and inf for E5M2.
 * "Overflow" means the value rounds (to nearest even, at the format's precision) to something
 * larger than the largest finite value. Subnormals of every format are produced and read exactly.
 * NaN patterns: a NaN input gives the canonical NaN with the sign dropped, as sm_90 does (checked
 * on an H200 for every float32 input): 0x7F for E4M3 and E5M2, 0x7FFF for BF16 and F16, in both
 * modes. The NaN of non-saturating E4M3 overflow (and of +-inf) keeps the sign: S.1111.111.
 *
 * The bit layouts come from the dtype table (ir/dtype.h); nothing here repeats them. What the
 * encoders need of a layout (the sign bit, the largest finite code, the codes of inf and NaN,
 * the exponent range) is derived from a dtype row in one place, f8_float_layout_of, which the
 * LLVM lowering (codegen/llvm_convert.c, codegen/lower_casts.c) reads as well: the generated
 * kernels and these numerics cannot disagree about a layout.
 */
#ifndef F8_IR_FP8_H
#define F8_IR_FP8_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // uint8_t, uint16_t, uint32_t

#include "ir/diag.h"  // f8_status
#include "ir/dtype.h" // f8_dtype

/* Delayed scaling's tables (passes/fp8_cast.h makes them; runtime/scaling_tables.h reads
 * them), in slot-group order: the names of their leaves' prefixes. */
#define F8_FP8_TABLE_WEIGHTS "fp8.weights"
#define F8_FP8_TABLE_ACTIVATIONS "fp8.activations"
#define F8_FP8_TABLE_GRADIENTS "fp8.gradients"

/*
 * The layout of a small float format (BF16, F16, E4M3, E5M2, E8M0) in the terms the encoders
 * and decoders use, derived from its dtype row. A magnitude is a code without its sign bit;
 * codes of one sign grow with the value, so comparing magnitudes compares values. Formats with
 * infinities (IEEE-like) give the all-ones exponent to inf and NaN; E4M3 (no inf) gives only
 * its all-ones code to NaN, so its largest finite magnitude is one below it. E8M0 has no sign,
 * no zero and no subnormals: code c is 2^(c - bias) for c up to max_magnitude.
 *   BF16: 0x7F7F max, 0x7F80 inf, 0x7FFF NaN; F16: 0x7BFF, 0x7C00, 0x7FFF;
 *   E4M3: 0x7E max (448), no inf, 0x7F NaN; E5M2: 0x7B max (57344), 0x7C inf, 0x7F NaN;
 *   E8M0: 0xFE max (2^127), no inf, 0xFF NaN.
 */
typedef struct f8_float_layout {
	int width;              // bits of a code: 8 or 16
	int exponent_bits;
	int mantissa_bits;      // stored fraction bits
	int bias;
	int min_exponent;       // of the smallest normal: 1 - bias (E8M0: -bias, its code 0)
	int max_exponent;       // of the largest finite value, MX's emax: 8 E4M3, 15 E5M2, 127 E8M0
	uint32_t sign_bit;      // 0 for E8M0
	uint32_t max_magnitude; // the largest finite value's code
	uint32_t inf_magnitude; // with has_inf: the all-ones exponent and a zero mantissa
	uint32_t nan_magnitude; // the NaN the encoders write: all ones (the hardware's canonical)
	bool has_inf;
} f8_float_layout;

/* The layout of `dtype`, one of BF16, F16, E4M3, E5M2, E8M0, from its row of ir/dtype.h. */
f8_float_layout f8_float_layout_of(f8_dtype dtype);

/* Rounding of float32 -> E8M0, which has no mantissa: the MX recipe picks per use. */
typedef enum f8_round {
	F8_ROUND_NEAREST_EVEN, // 1.5 * 2^e -> 2^(e+1): a tie goes up (see f8_e8m0_encode)
	F8_ROUND_DOWN,         // toward zero: 2^floor(log2 x)
	F8_ROUND_UP,           // toward +inf: 2^ceil(log2 x)
	F8_ROUND_COUNT
} f8_round;

/*
 * float32 -> the bits of `dtype`, one of BF16, F16, E4M3, E5M2 (right-aligned in the result).
 * `saturate` as described above; for BF16 and F16 non-saturating overflow gives inf, and
 * saturating is cvt.rn.satfinite.{bf16,f16}.f32.
 */
uint32_t f8_float_encode(f8_dtype dtype, float value, bool saturate);

/* The bits of `dtype` (BF16, F16, E4M3, E5M2, E8M0) -> float32, exactly. */
float f8_float_decode(f8_dtype dtype, uint32_t bits);

/*
 * float32 -> E8M0 (OCP MX v1.0): the power of two nearest `value` under `round`, clamped to
 * 2^-127 .. 2^127 (saturating: +inf and values above 2^127 give 0xFE). Zero and positive values
 * below the range give 0x00 (2^-127, the smallest scale); NaN and negative values give 0xFF
 * (NaN), since a scale is never negative; -0 counts as zero. Under F8_ROUND_NEAREST_EVEN the
 * midpoint is the linear one, 1.5 * 2^e, and a tie always goes up to 2^(e+1): with no mantissa
 * the significand of 2^e is 1, odd, and that of 2^(e+1) = 10b * 2^e even (1.5 -> 2, 3 -> 4).
 * ml_dtypes' float8_e8m0fnu rounds the same way.
 */
uint8_t f8_e8m0_encode(float value, f8_round round);

/* max |x| over n values; NaN if any value is NaN, inf if any is infinite; 0 for n == 0. */
float f8_amax(const float *x, size_t n);

/*
 * The scale for an FP8 cast: scale = fp8_max / amax / 2^margin, multiplied before the cast.
 * amax == 0 or a non-finite amax keeps `previous_scale` (the caller counts non-finite amaxes);
 * so does a negative amax, which no amax computation gives. Computed in float32 as
 * (fp8_max / amax) * 2^-margin, the order TransformerEngine uses. A scale that overflows float32
 * (tiny amax) is clamped to FLT_MAX; one that underflows to 0 (a margin beyond any sensible one)
 * to the smallest positive float, so that a scale is always positive.
 */
float f8_scale_from_amax(f8_dtype format, float amax, int margin, float previous_scale);

/*
 * Per-tensor quantization: codes[i] = encode(format, x[i] * scale, saturate), i < n.
 * Dequantization: y[i] = decode(format, codes[i]) * scale_inv.
 */
void f8_quantize(const float *x, size_t n, f8_dtype format, float scale, bool saturate,
		 uint8_t *codes);
void f8_dequantize(const uint8_t *codes, size_t n, f8_dtype format, float scale_inv, float *y);

/*
 * Block quantization of a row-major (rows, cols) matrix in blocks of (block_rows, block_cols):
 * 1x128 for activations and gradients, 128x128 for weights (DeepSeek-V3 style, cuBLASLt
 * VEC128_32F / BLK128x128_32F). Edge blocks are partial. Each block gets its own
 * scale = f8_scale_from_amax(format, block amax, margin, 1.0f), saturating casts, and its
 * scale_inv = 1 / scale is written to
 * scale_inv[(r / block_rows) * ceil(cols / block_cols) + c / block_cols], an array of
 * ceil(rows / block_rows) * ceil(cols / block_cols) floats.
 * codes: rows * cols bytes. Returns F8_ERR_ARGUMENT for a non-FP8 format or a zero block size.
 */
f8_status f8_quantize_blocks(const float *x, size_t rows, size_t cols, f8_dtype format,
			     size_t block_rows, size_t block_cols, int margin, uint8_t *codes,
			     float *scale_inv);
void f8_dequantize_blocks(const uint8_t *codes, size_t rows, size_t cols, f8_dtype format,
			  size_t block_rows, size_t block_cols, const float *scale_inv, float *y);

enum { F8_MX_BLOCK = 32 };

/*
 * MXFP8 quantization (OCP MX v1.0, section 6.3) of a row-major (rows, cols) matrix along rows,
 * in blocks of 32 elements (the last one of a row may be partial): for each block,
 * shared_exp = floor(log2(amax)) - emax(format) (emax: the exponent of the largest normal,
 * 8 for E4M3, 15 for E5M2), clamped to -127..127, stored as E8M0 in
 * scales[r * ceil(cols / 32) + c / 32]; each element is encode(format, x / 2^shared_exp,
 * saturate = true). A block whose amax is 0 gets scale 2^-127. A NaN in a block makes its
 * scale NaN (0xFF) and all its codes the format's NaN (0x7F), and dequantization then gives NaN
 * for the whole block. An infinity (and no NaN) makes floor(log2(amax)) infinite, so the
 * block's shared_exp clamps to 127: infinities saturate to +-max and dequantize to +-inf again
 * (max * 2^127 overflows float32); the finite elements are encoded at that scale like any other.
 * Returns F8_ERR_ARGUMENT for a non-FP8 format.
 */
f8_status f8_quantize_mx(const float *x, size_t rows, size_t cols, f8_dtype format,
			 uint8_t *codes, uint8_t *scales);
void f8_dequantize_mx(const uint8_t *codes, size_t rows, size_t cols, f8_dtype format,
		      const uint8_t *scales, float *y);

#endif
