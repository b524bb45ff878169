/*
 * FP8 numerics: float32 <-> BF16/F16/E4M3/E5M2/E8M0 conversions done on the integer bits of the
 * float32 (so there is exactly one rounding, as in the hardware), amax and scales, and the
 * per-tensor, block and MX quantizers built on them. Every layout fact comes from the dtype
 * table, through f8_float_layout_of; one encoder and one decoder serve all four signed formats.
 */
#include "ir/fp8.h" // f8_float_encode, f8_round, f8_quantize_blocks, F8_MX_BLOCK

#include <assert.h> // assert
#include <float.h>  // FLT_MAX, FLT_TRUE_MIN
#include <math.h>   // ldexpf, fabsf, copysignf, isnan, isinf, NAN, INFINITY
#include <string.h> // memcpy

#include "ir/dtype.h" // f8_dtype_get_info, f8_dtype_is_fp8

static uint32_t f8_float_bits(float value) {
	uint32_t bits;
	memcpy(&bits, &value, sizeof bits);
	return bits;
}

/*
 * The layout from the dtype row (ir/fp8.h says what each field is). A format whose exponent
 * and mantissa fill the code has no sign bit (E8M0). The NaN written is the all-ones
 * magnitude: the hardware's canonical NaN (0x7F for both FP8 formats, 0x7FFF for the 16-bit
 * ones, 0xFF for E8M0). A format without mantissa bits has no subnormals, so its smallest code
 * is a normal one: E8M0's code 0 is 2^-bias.
 */
f8_float_layout f8_float_layout_of(f8_dtype dtype) {
	const f8_dtype_info *info = f8_dtype_get_info(dtype);
	assert(info->kind == F8_DTYPE_KIND_FLOAT && info->has_nan && info->bytes <= 2);
	int width = (int)info->bytes * 8;
	bool is_signed = 1 + info->exponent_bits + info->mantissa_bits == width;
	assert(is_signed || info->exponent_bits + info->mantissa_bits == width);
	uint32_t sign_bit = is_signed ? 1u << (width - 1) : 0;
	uint32_t all_ones = (is_signed ? sign_bit : 1u << width) - 1;
	uint32_t exponent_ones = ((1u << info->exponent_bits) - 1) << info->mantissa_bits;
	uint32_t max_magnitude = info->has_inf ? exponent_ones - 1 : all_ones - 1;
	f8_float_layout layout = {
		.width = width,
		.exponent_bits = info->exponent_bits,
		.mantissa_bits = info->mantissa_bits,
		.bias = info->bias,
		.min_exponent = info->mantissa_bits ? 1 - info->bias : -info->bias,
		.max_exponent = (int)(max_magnitude >> info->mantissa_bits) - info->bias,
		.sign_bit = sign_bit,
		.max_magnitude = max_magnitude,
		.inf_magnitude = exponent_ones,
		.nan_magnitude = all_ones,
		.has_inf = info->has_inf,
	};
	// The row's largest finite value is the one its bits give: the scales use the former.
	uint32_t max_mantissa = max_magnitude & ((1u << info->mantissa_bits) - 1);
	assert(ldexp(1.0 + ldexp((double)max_mantissa, -info->mantissa_bits),
		     layout.max_exponent) == info->max);
	(void)max_mantissa;
	return layout;
}

/* Number of significant bits of x > 0: floor(log2 x) + 1. */
static int f8_bit_length(uint32_t x) {
	assert(x != 0);
	return 32 - __builtin_clz(x);
}

/*
 * A finite nonzero float32 magnitude (bits without the sign) as significand * 2^exponent,
 * exactly; returns floor(log2 |value|). Subnormal inputs keep their exact value.
 */
static int f8_float_split(uint32_t magnitude, uint32_t *significand, int *exponent) {
	uint32_t biased = magnitude >> 23;
	if (biased != 0) {
		*significand = (magnitude & 0x7FFFFFu) | 0x800000u;
		*exponent = (int)biased - 150;
	} else {
		*significand = magnitude;
		*exponent = -149;
	}
	return *exponent + f8_bit_length(*significand) - 1;
}

/* x / 2^shift rounded to nearest, ties to even; shift >= 1, x < 2^24. */
static uint32_t f8_shift_round(uint32_t x, int shift) {
	assert(shift >= 1 && x < (1u << 24));
	if (shift > 24) // x < 2^(shift - 1): below half of the smallest step
		return 0;
	uint32_t kept = x >> shift;
	uint32_t rest = x & ((1u << shift) - 1);
	uint32_t half = 1u << (shift - 1);
	if (rest > half || (rest == half && (kept & 1)))
		kept++;
	return kept;
}

/*
 * The encoder behind f8_float_encode. The value is rounded once, at the spacing of the target
 * format in the binade of the input (the subnormal spacing below the smallest normal). Because
 * codes are laid out as (exponent - 1) * 2^mantissa_bits + significand, a rounding that carries
 * into the next binade, or from the subnormals into the normals, lands on the right code without
 * a special case; overflow then is just a magnitude above the largest finite one.
 */
static uint32_t f8_encode_layout(const f8_float_layout *layout, float value, bool saturate) {
	uint32_t bits = f8_float_bits(value);
	uint32_t sign = (bits >> 31) ? layout->sign_bit : 0;
	uint32_t magnitude = bits & 0x7FFFFFFFu;
	uint32_t overflow = saturate          ? layout->max_magnitude
			    : layout->has_inf ? layout->inf_magnitude
					      : layout->nan_magnitude;
	// sm_90 drops the sign of a NaN (seen for every negative NaN input, in all four formats).
	if (magnitude > 0x7F800000u)
		return layout->nan_magnitude;
	// E4M3's overflow NaN keeps the sign, as ONNX's reference does: it stands for a signed inf.
	if (magnitude == 0x7F800000u)
		return sign | overflow;
	if (magnitude == 0)
		return sign;

	uint32_t significand;
	int exponent;
	int top = f8_float_split(magnitude, &significand, &exponent);
	int binade = top > layout->min_exponent ? top : layout->min_exponent;
	int quantum = binade - layout->mantissa_bits; // exponent of the target's last place
	// quantum > exponent always: every target has fewer mantissa bits than float32 and a
	// subnormal spacing coarser than 2^-149, so the shift is a right shift.
	uint32_t rounded = f8_shift_round(significand, quantum - exponent);
	uint32_t code =
		((uint32_t)(binade - layout->min_exponent) << layout->mantissa_bits) + rounded;
	if (code > layout->max_magnitude)
		return sign | overflow;
	return sign | code;
}

uint32_t f8_float_encode(f8_dtype dtype, float value, bool saturate) {
	assert(dtype == F8_DTYPE_BF16 || dtype == F8_DTYPE_F16 || f8_dtype_is_fp8(dtype));
	f8_float_layout layout = f8_float_layout_of(dtype);
	return f8_encode_layout(&layout, value, saturate);
}

/* E8M0: no sign, no mantissa, no zero; code c is 2^(c - bias), the all-ones code is NaN. */
static float f8_e8m0_decode(const f8_float_layout *layout, uint32_t bits) {
	assert(bits <= layout->nan_magnitude);
	if (bits == layout->nan_magnitude)
		return NAN;
	return ldexpf(1.0f, (int)bits - layout->bias);
}

float f8_float_decode(f8_dtype dtype, uint32_t bits) {
	f8_float_layout layout = f8_float_layout_of(dtype);
	if (dtype == F8_DTYPE_E8M0)
		return f8_e8m0_decode(&layout, bits);
	assert(dtype == F8_DTYPE_BF16 || dtype == F8_DTYPE_F16 || f8_dtype_is_fp8(dtype));
	assert(bits <= (layout.sign_bit << 1) - 1);
	float sign = (bits & layout.sign_bit) ? -1.0f : 1.0f;
	uint32_t magnitude = bits & ~layout.sign_bit;
	if (magnitude > layout.max_magnitude) {
		if (layout.has_inf && magnitude == layout.inf_magnitude)
			return copysignf(INFINITY, sign);
		return copysignf(NAN, sign);
	}
	int p = layout.mantissa_bits;
	uint32_t exponent_field = magnitude >> p;
	uint32_t mantissa = magnitude & ((1u << p) - 1);
	// Every value of these formats is a float32, so the products below are exact.
	if (exponent_field == 0)
		return sign * ldexpf((float)mantissa, layout.min_exponent - p);
	return sign * ldexpf((float)(mantissa | (1u << p)),
			     (int)exponent_field - 1 + layout.min_exponent - p);
}

uint8_t f8_e8m0_encode(float value, f8_round round) {
	assert((unsigned)round < F8_ROUND_COUNT);
	const f8_float_layout layout = f8_float_layout_of(F8_DTYPE_E8M0);
	const int lowest = layout.min_exponent, highest = layout.max_exponent;
	const uint8_t nan_code = (uint8_t)layout.nan_magnitude;
	uint32_t bits = f8_float_bits(value);
	uint32_t magnitude = bits & 0x7FFFFFFFu;
	if (magnitude > 0x7F800000u || ((bits >> 31) && magnitude != 0))
		return nan_code; // NaN, and negatives: a scale is never negative
	if (magnitude == 0)
		return 0; // zero (either sign) is below the range
	if (magnitude == 0x7F800000u)
		return (uint8_t)layout.max_magnitude;

	uint32_t significand;
	int exponent;
	int result = f8_float_split(magnitude, &significand, &exponent);
	int length = f8_bit_length(significand);
	uint32_t fraction = significand - (1u << (length - 1)); // value / 2^result - 1, scaled
	uint32_t half = length >= 2 ? 1u << (length - 2) : 0;
	bool exact = fraction == 0;
	switch (round) {
	case F8_ROUND_DOWN:
		break;
	case F8_ROUND_UP:
		result += !exact;
		break;
	case F8_ROUND_NEAREST_EVEN:
		// A tie goes up: the kept significand, 1, is odd; 2^(result + 1) is the even one.
		if (!exact && fraction >= half)
			result++;
		break;
	default:
		assert(0);
	}
	if (result < lowest)
		result = lowest;
	if (result > highest)
		result = highest;
	return (uint8_t)(result + layout.bias);
}

float f8_amax(const float *x, size_t n) {
	float amax = 0.0f;
	for (size_t i = 0; i < n; i++) {
		float magnitude = fabsf(x[i]);
		if (isnan(magnitude))
			return NAN; // nothing can change the answer now
		if (magnitude > amax)
			amax = magnitude;
	}
	return amax;
}

/*
 * Done in float32 in the order the formula is written, (fp8_max / amax) * 2^-margin, like
 * TransformerEngine's scale update, so that the scales agree with it bit for bit.
 */
float f8_scale_from_amax(f8_dtype format, float amax, int margin, float previous_scale) {
	if (!(amax > 0.0f) || isinf(amax))
		return previous_scale;
	float max = (float)f8_dtype_get_info(format)->max;
	float scale = ldexpf(max / amax, -margin);
	if (isinf(scale))
		return FLT_MAX;
	if (scale == 0.0f) // only a margin beyond any sensible one gets here
		return FLT_TRUE_MIN;
	return scale;
}

void f8_quantize(const float *x, size_t n, f8_dtype format, float scale, bool saturate,
		 uint8_t *codes) {
	assert(f8_dtype_is_fp8(format));
	f8_float_layout layout = f8_float_layout_of(format);
	for (size_t i = 0; i < n; i++)
		codes[i] = (uint8_t)f8_encode_layout(&layout, x[i] * scale, saturate);
}

/* The 256 values of an FP8 format, so that the dequantizers decode by lookup. */
static void f8_decode_table(f8_dtype format, float table[256]) {
	for (uint32_t code = 0; code < 256; code++)
		table[code] = f8_float_decode(format, code);
}

void f8_dequantize(const uint8_t *codes, size_t n, f8_dtype format, float scale_inv, float *y) {
	assert(f8_dtype_is_fp8(format));
	float table[256];
	f8_decode_table(format, table);
	for (size_t i = 0; i < n; i++)
		y[i] = table[codes[i]] * scale_inv;
}

static size_t f8_ceil_div(size_t a, size_t b) {
	return a / b + (a % b != 0);
}

/* One (block_rows, block_cols) tile of a row-major matrix, clipped to the matrix. */
typedef struct f8_tile {
	size_t row, col;   // first element
	size_t rows, cols; // extent, smaller than the block at the bottom and right edges
} f8_tile;

static f8_tile f8_tile_at(size_t block_row, size_t block_col, size_t rows, size_t cols,
			  size_t block_rows, size_t block_cols) {
	f8_tile tile = {block_row * block_rows, block_col * block_cols, block_rows, block_cols};
	if (tile.rows > rows - tile.row)
		tile.rows = rows - tile.row;
	if (tile.cols > cols - tile.col)
		tile.cols = cols - tile.col;
	return tile;
}

f8_status f8_quantize_blocks(const float *x, size_t rows, size_t cols, f8_dtype format,
			     size_t block_rows, size_t block_cols, int margin, uint8_t *codes,
			     float *scale_inv) {
	if (!f8_dtype_is_fp8(format) || block_rows == 0 || block_cols == 0)
		return F8_ERR_ARGUMENT;
	f8_float_layout layout = f8_float_layout_of(format);
	size_t grid_rows = f8_ceil_div(rows, block_rows), grid_cols = f8_ceil_div(cols, block_cols);
	for (size_t br = 0; br < grid_rows; br++) {
		for (size_t bc = 0; bc < grid_cols; bc++) {
			f8_tile tile = f8_tile_at(br, bc, rows, cols, block_rows, block_cols);
			float amax = 0.0f;
			for (size_t r = tile.row; r < tile.row + tile.rows; r++) {
				float row_amax = f8_amax(x + r * cols + tile.col, tile.cols);
				if (isnan(row_amax) || row_amax > amax)
					amax = row_amax;
				if (isnan(amax))
					break;
			}
			float scale = f8_scale_from_amax(format, amax, margin, 1.0f);
			scale_inv[br * grid_cols + bc] = 1.0f / scale;
			for (size_t r = tile.row; r < tile.row + tile.rows; r++)
				for (size_t c = tile.col; c < tile.col + tile.cols; c++)
					codes[r * cols + c] = (uint8_t)f8_encode_layout(
						&layout, x[r * cols + c] * scale, true);
		}
	}
	return F8_OK;
}

void f8_dequantize_blocks(const uint8_t *codes, size_t rows, size_t cols, f8_dtype format,
			  size_t block_rows, size_t block_cols, const float *scale_inv, float *y) {
	assert(f8_dtype_is_fp8(format) && block_rows != 0 && block_cols != 0);
	float table[256];
	f8_decode_table(format, table);
	size_t grid_cols = f8_ceil_div(cols, block_cols);
	for (size_t r = 0; r < rows; r++)
		for (size_t c = 0; c < cols; c++) {
			float s = scale_inv[(r / block_rows) * grid_cols + c / block_cols];
			y[r * cols + c] = table[codes[r * cols + c]] * s;
		}
}

/*
 * One MX block of n <= 32 elements, its scale of layout `scale` (E8M0). Dividing by
 * 2^shared_exp is exact except where the quotient falls into float32's subnormals, and such a
 * quotient is far below half the smallest subnormal of either FP8 format, so it encodes to the
 * same signed zero either way.
 */
static uint8_t f8_quantize_mx_block(const f8_float_layout *layout,
				    const f8_float_layout *scale, const float *x, size_t n,
				    uint8_t *codes) {
	const int lowest = scale->min_exponent, highest = scale->max_exponent;
	float amax = f8_amax(x, n);
	if (isnan(amax)) {
		for (size_t i = 0; i < n; i++)
			codes[i] = (uint8_t)layout->nan_magnitude;
		return (uint8_t)scale->nan_magnitude;
	}
	int shared_exp = lowest;
	if (isinf(amax)) {
		shared_exp = highest; // floor(log2(inf)) is above every clamp
	} else if (amax > 0.0f) {
		uint32_t significand;
		int exponent;
		shared_exp = f8_float_split(f8_float_bits(amax), &significand, &exponent) -
			     layout->max_exponent;
		if (shared_exp < lowest)
			shared_exp = lowest;
		if (shared_exp > highest)
			shared_exp = highest;
	}
	for (size_t i = 0; i < n; i++)
		codes[i] = (uint8_t)f8_encode_layout(layout, ldexpf(x[i], -shared_exp), true);
	return (uint8_t)(shared_exp + scale->bias);
}

f8_status f8_quantize_mx(const float *x, size_t rows, size_t cols, f8_dtype format, uint8_t *codes,
			 uint8_t *scales) {
	if (!f8_dtype_is_fp8(format))
		return F8_ERR_ARGUMENT;
	f8_float_layout layout = f8_float_layout_of(format);
	f8_float_layout scale = f8_float_layout_of(F8_DTYPE_E8M0);
	size_t blocks = f8_ceil_div(cols, F8_MX_BLOCK);
	for (size_t r = 0; r < rows; r++)
		for (size_t b = 0; b < blocks; b++) {
			size_t c = b * F8_MX_BLOCK;
			size_t n = cols - c < F8_MX_BLOCK ? cols - c : F8_MX_BLOCK;
			scales[r * blocks + b] = f8_quantize_mx_block(
				&layout, &scale, x + r * cols + c, n, codes + r * cols + c);
		}
	return F8_OK;
}

void f8_dequantize_mx(const uint8_t *codes, size_t rows, size_t cols, f8_dtype format,
		      const uint8_t *scales, float *y) {
	assert(f8_dtype_is_fp8(format));
	const f8_float_layout scale_layout = f8_float_layout_of(F8_DTYPE_E8M0);
	const uint8_t nan_scale = (uint8_t)scale_layout.nan_magnitude;
	float table[256];
	f8_decode_table(format, table);
	size_t blocks = f8_ceil_div(cols, F8_MX_BLOCK);
	for (size_t r = 0; r < rows; r++)
		for (size_t c = 0; c < cols; c++) {
			uint8_t scale = scales[r * blocks + c / F8_MX_BLOCK];
			float value = table[codes[r * cols + c]];
			// Exact: the product of an FP8 value and 2^-127..2^127 is a float32 or inf.
			y[r * cols + c] = scale == nan_scale
						  ? NAN
						  : ldexpf(value, (int)scale - scale_layout.bias);
		}
}
