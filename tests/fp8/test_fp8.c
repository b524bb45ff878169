/*
 * Tests of the FP8 numerics (ir/fp8.c) against each format's definition, which this file writes
 * down again from the specifications (OCP OFP8 for E4M3/E5M2, OCP MX for E8M0, IEEE 754 for F16,
 * BF16 as truncated binary32) instead of reading it from the dtype table or the code under test:
 * decoding of every code, encoding at and around every midpoint in both modes, the special
 * values, E8M0 rounding, amax and scales, and per-tensor, block and MX quantization on random
 * inputs.
 *
 * Usage: test_fp8 [SEED]. Without a seed a fresh one is taken from the clock; it is printed so
 * that a failure can be replayed. Each failing check is printed with its values (the first
 * F8_TEST_PRINT_MAX of them); the last line is "N passed, M failed"; exit status 0 only if M = 0.
 */
#include <float.h>    // FLT_MAX, FLT_MIN, FLT_TRUE_MIN
#include <inttypes.h> // PRIu64, PRIx32
#include <math.h>     // ldexp, frexp, fabs, isnan, isinf, nextafterf, signbit, NAN, INFINITY
#include <stdarg.h>   // va_list
#include <stdbool.h>  // bool
#include <stdint.h>   // uint32_t, uint64_t
#include <stdio.h>    // printf, vprintf
#include <stdlib.h>   // strtoull, qsort, malloc, free
#include <string.h>   // memcpy
#include <time.h>     // time, clock

#include "ir/dtype.h" // f8_dtype
#include "ir/fp8.h"   // f8_float_encode, f8_float_decode, f8_e8m0_encode, f8_quantize_blocks

enum { F8_TEST_PRINT_MAX = 200 };

static uint64_t f8_test_passed, f8_test_failed;

/* Counts one check; prints it (file:line, then the printf-style message) when it fails. */
static bool f8_test_check(bool ok, int line, const char *format, ...)
	__attribute__((format(printf, 3, 4)));
static bool f8_test_check(bool ok, int line, const char *format, ...) {
	if (ok) {
		f8_test_passed++;
		return true;
	}
	if (f8_test_failed++ < F8_TEST_PRINT_MAX) {
		va_list args;
		va_start(args, format);
		printf("FAIL test_fp8.c:%d: ", line);
		vprintf(format, args);
		printf("\n");
		va_end(args);
		if (f8_test_failed == F8_TEST_PRINT_MAX)
			printf("(further failures are counted, not printed)\n");
	}
	return false;
}
#define CHECK(ok, ...) f8_test_check((ok), __LINE__, __VA_ARGS__)

/* splitmix64: small, seedable, and the same on every platform. */
static uint64_t f8_test_state;

static uint64_t f8_test_random(void) {
	uint64_t z = (f8_test_state += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* Uniform in lo..hi, inclusive. */
static int64_t f8_test_random_between(int64_t lo, int64_t hi) {
	return lo + (int64_t)(f8_test_random() % (uint64_t)(hi - lo + 1));
}

/* Uniform in [-1, 1). */
static double f8_test_random_unit(void) {
	return (double)(f8_test_random() >> 11) * 0x1p-52 - 1.0;
}

static uint32_t f8_test_bits(float value) {
	uint32_t bits;
	memcpy(&bits, &value, sizeof bits);
	return bits;
}

static float f8_test_float(uint32_t bits) {
	float value;
	memcpy(&value, &bits, sizeof value);
	return value;
}

/* A double as a float, with what lies beyond float32's range made an infinity explicitly. */
static float f8_test_to_float(double x) {
	if (fabs(x) > FLT_MAX)
		return x > 0 ? INFINITY : -INFINITY;
	return (float)x;
}

/* Same value, or both NaN; zeros must agree in sign. */
static bool f8_test_same(double a, double b) {
	if (isnan(a) || isnan(b))
		return isnan(a) && isnan(b);
	return a == b && signbit(a) == signbit(b);
}

/*
 * A signed format as its specification states it. `ieee`: the all-ones exponent holds inf
 * (mantissa 0) and NaN; otherwise (E4M3, the "FN" variant) only S.1111.111 is NaN and the rest
 * of the top binade is finite. `nan` is the NaN that any NaN input must give: the canonical NaN
 * of sm_90's cvt, sign dropped.
 */
typedef struct f8_test_format {
	f8_dtype dtype;
	const char *name;
	int exponent_bits, mantissa_bits, bias;
	bool ieee;
	double max;   // largest finite value, from the specification's table
	uint32_t nan; // canonical NaN
} f8_test_format;

static const f8_test_format f8_test_formats[] = {
	{F8_DTYPE_E4M3, "e4m3", 4, 3, 7, false, 448.0, 0x7F},
	{F8_DTYPE_E5M2, "e5m2", 5, 2, 15, true, 57344.0, 0x7F},
	{F8_DTYPE_BF16, "bf16", 8, 7, 127, true, 0x1.FEp127, 0x7FFF},
	{F8_DTYPE_F16, "f16", 5, 10, 15, true, 65504.0, 0x7FFF},
};
enum { F8_TEST_FORMATS = sizeof f8_test_formats / sizeof f8_test_formats[0] };

static int f8_test_width(const f8_test_format *f) {
	return 1 + f->exponent_bits + f->mantissa_bits;
}

static uint32_t f8_test_sign_bit(const f8_test_format *f) {
	return 1u << (f8_test_width(f) - 1);
}

/* The value of a magnitude code by the formula alone, ignoring the special values. */
static double f8_test_formula(const f8_test_format *f, uint32_t magnitude) {
	uint32_t mantissa = magnitude & ((1u << f->mantissa_bits) - 1);
	uint32_t exponent = magnitude >> f->mantissa_bits;
	if (exponent == 0)
		return ldexp((double)mantissa, 1 - f->bias - f->mantissa_bits);
	return ldexp(1.0 + ldexp((double)mantissa, -f->mantissa_bits), (int)exponent - f->bias);
}

/* The value of a code: (-1)^s * 2^(e - bias) * 1.m, or 2^(1 - bias) * 0.m, or a special. */
static double f8_test_value(const f8_test_format *f, uint32_t code) {
	uint32_t sign = code & f8_test_sign_bit(f);
	uint32_t magnitude = code & ~f8_test_sign_bit(f);
	uint32_t mantissa_ones = (1u << f->mantissa_bits) - 1;
	uint32_t exponent = magnitude >> f->mantissa_bits;
	uint32_t exponent_ones = (1u << f->exponent_bits) - 1;
	double value;
	if (f->ieee && exponent == exponent_ones)
		value = (magnitude & mantissa_ones) ? NAN : INFINITY;
	else if (!f->ieee && exponent == exponent_ones &&
		 (magnitude & mantissa_ones) == mantissa_ones)
		value = NAN;
	else
		value = f8_test_formula(f, magnitude);
	return sign ? -value : value;
}

/* The code a value beyond the largest finite one gives (sign bit clear). */
static uint32_t f8_test_overflow_code(const f8_test_format *f, bool saturate) {
	uint32_t exponent_ones = (1u << f->exponent_bits) - 1;
	if (saturate)
		return f->ieee ? (exponent_ones << f->mantissa_bits) - 1
			       : (exponent_ones << f->mantissa_bits) + (1u << f->mantissa_bits) - 2;
	return f->ieee ? exponent_ones << f->mantissa_bits : f8_test_sign_bit(f) - 1;
}

/* The non-negative finite values of a format, ascending, then the virtual next one. */
typedef struct f8_test_ladder {
	double *values;
	uint32_t *codes;
	size_t count; // finite values; values[count] is the virtual one past the largest
} f8_test_ladder;

static int f8_test_compare_rungs(const void *a, const void *b) {
	const double *x = a, *y = b;
	return (*x > *y) - (*x < *y);
}

/*
 * Built by sorting the values of all codes, not by assuming that codes grow with values; the
 * codes are then looked up again by value. The virtual rung is the formula's value of the code
 * after the largest finite one.
 */
static f8_test_ladder f8_test_ladder_build(const f8_test_format *f) {
	uint32_t half = f8_test_sign_bit(f);
	f8_test_ladder ladder = {malloc((half + 1) * sizeof(double)),
				 malloc((half + 1) * sizeof(uint32_t)), 0};
	if (!ladder.values || !ladder.codes) {
		printf("out of memory\n");
		exit(2);
	}
	for (uint32_t code = 0; code < half; code++) {
		double value = f8_test_value(f, code);
		if (!isnan(value) && !isinf(value))
			ladder.values[ladder.count++] = value;
	}
	qsort(ladder.values, ladder.count, sizeof(double), f8_test_compare_rungs);
	uint32_t code = 0;
	for (size_t i = 0; i < ladder.count; i++) {
		while (f8_test_value(f, code) != ladder.values[i])
			code++;
		ladder.codes[i] = code;
	}
	ladder.codes[ladder.count] = ladder.codes[ladder.count - 1] + 1;
	ladder.values[ladder.count] = f8_test_formula(f, ladder.codes[ladder.count]);
	return ladder;
}

static void f8_test_ladder_free(f8_test_ladder *ladder) {
	free(ladder->values);
	free(ladder->codes);
}

/*
 * The reference encoder: the nearest rung by search, ties to the even code, and overflow when
 * the virtual rung wins or is passed. Exact: every float32 and every rung is a double, and the
 * differences taken below are of neighbours, so they are exact too.
 */
static uint32_t f8_test_encode(const f8_test_format *f, const f8_test_ladder *ladder, double x,
			       bool saturate) {
	if (isnan(x))
		return f->nan;
	uint32_t sign = signbit(x) ? f8_test_sign_bit(f) : 0;
	double a = fabs(x);
	uint32_t overflow = sign | f8_test_overflow_code(f, saturate);
	if (a >= ladder->values[ladder->count])
		return overflow;
	size_t lo = 0, hi = ladder->count; // values[lo] <= a < values[hi]
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (ladder->values[mid] <= a)
			lo = mid;
		else
			hi = mid;
	}
	double below = a - ladder->values[lo], above = ladder->values[hi] - a;
	size_t pick = below < above ? lo : above < below ? hi : (ladder->codes[lo] % 2 ? hi : lo);
	if (pick == ladder->count)
		return overflow;
	return sign | ladder->codes[pick];
}

/* Half the spacing of the format's values at |v| (the subnormal spacing below the normals). */
static double f8_test_half_ulp(const f8_test_format *f, double v) {
	int exponent = 1 - f->bias;
	if (v != 0.0) {
		int e;
		frexp(fabs(v), &e);
		if (e - 1 > exponent)
			exponent = e - 1;
	}
	return ldexp(1.0, exponent - f->mantissa_bits - 1);
}

static void f8_test_decode_all(const f8_test_format *f) {
	for (uint32_t code = 0; code < (1u << f8_test_width(f)); code++) {
		double want = f8_test_value(f, code);
		float got = f8_float_decode(f->dtype, code);
		CHECK(f8_test_same(got, want), "%s decode 0x%" PRIx32 ": got %.9g, want %.9g",
		      f->name, code, got, want);
	}
}

/* Every code's own value gives the code back, in both modes; inf and NaN as specified. */
static void f8_test_round_trip(const f8_test_format *f) {
	for (uint32_t code = 0; code < (1u << f8_test_width(f)); code++) {
		double value = f8_test_value(f, code);
		uint32_t sign = code & f8_test_sign_bit(f);
		for (int saturate = 0; saturate <= 1; saturate++) {
			uint32_t want = code;
			if (isnan(value))
				want = f->nan;
			else if (isinf(value))
				want = sign | f8_test_overflow_code(f, saturate);
			uint32_t got = f8_float_encode(f->dtype, (float)value, saturate);
			CHECK(got == want,
			      "%s encode(%.9g) of code 0x%" PRIx32 " saturate=%d: got 0x%" PRIx32
			      ", want 0x%" PRIx32,
			      f->name, value, code, saturate, got, want);
		}
	}
}

static void f8_test_encode_one(const f8_test_format *f, const f8_test_ladder *ladder, float x,
			       bool saturate, const char *what) {
	uint32_t want = f8_test_encode(f, ladder, x, saturate);
	uint32_t got = f8_float_encode(f->dtype, x, saturate);
	CHECK(got == want,
	      "%s encode(%.9g = 0x%08" PRIx32 ") saturate=%d (%s): got 0x%" PRIx32
	      ", want 0x%" PRIx32,
	      f->name, x, f8_test_bits(x), saturate, what, got, want);
}

/*
 * At every midpoint between neighbouring values (the one between the largest finite value and
 * the virtual next one too), one float32 ulp either side of it, and at a random point on each
 * side: the expected code is written from the pair itself, not from the reference encoder.
 */
static void f8_test_midpoints(const f8_test_format *f, const f8_test_ladder *ladder) {
	for (size_t i = 0; i < ladder->count; i++) {
		double a = ladder->values[i], b = ladder->values[i + 1];
		uint32_t lo = ladder->codes[i], hi = ladder->codes[i + 1];
		CHECK(hi == lo + 1, "%s: test ladder not consecutive at %.9g", f->name, a);
		float mid = (float)((a + b) / 2);
		CHECK((double)mid == (a + b) / 2, "%s: midpoint of %.9g, %.9g not a float", f->name,
		      a, b);
		float below = nextafterf(mid, 0.0f), above = nextafterf(mid, INFINITY);
		uint32_t a_bits = f8_test_bits((float)a), mid_bits = f8_test_bits(mid);
		uint32_t b_bits = f8_test_bits(f8_test_to_float(b)); // BF16's virtual rung is 2^128
		float random_below =
			f8_test_float((uint32_t)f8_test_random_between(a_bits + 1, mid_bits - 1));
		float random_above =
			f8_test_float((uint32_t)f8_test_random_between(mid_bits + 1, b_bits - 1));
		bool virtual_hi = i + 1 == ladder->count;
		for (int saturate = 0; saturate <= 1; saturate++) {
			uint32_t want_hi = virtual_hi ? f8_test_overflow_code(f, saturate) : hi;
			uint32_t want_mid = lo % 2 == 0 ? lo : want_hi;
			struct {
				float x;
				uint32_t want;
				const char *what;
			} cases[] = {
				{below, lo, "below midpoint"},
				{mid, want_mid, "midpoint"},
				{above, want_hi, "above midpoint"},
				{random_below, lo, "random below midpoint"},
				{random_above, want_hi, "random above midpoint"},
			};
			for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
				for (int negative = 0; negative <= 1; negative++) {
					float x = negative ? -cases[k].x : cases[k].x;
					uint32_t want = cases[k].want |
							(negative ? f8_test_sign_bit(f) : 0);
					uint32_t got = f8_float_encode(f->dtype, x, saturate);
					CHECK(got == want,
					      "%s encode(%.9g) saturate=%d (%s of %.9g and %.9g): "
					      "got 0x%" PRIx32 ", want 0x%" PRIx32,
					      f->name, x, saturate, cases[k].what, a, b, got, want);
				}
		}
	}
}

/* inf, NaN of every kind, float32's extremes and subnormals, random bit patterns. */
static void f8_test_specials(const f8_test_format *f, const f8_test_ladder *ladder) {
	static const uint32_t nans[] = {0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001,
					0x7FFFFFFF, 0xFFFFFFFF, 0x7FBFFFFF, 0x7FC00001};
	for (int saturate = 0; saturate <= 1; saturate++) {
		for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
			uint32_t got = f8_float_encode(f->dtype, f8_test_float(nans[i]), saturate);
			CHECK(got == f->nan,
			      "%s encode(NaN 0x%08" PRIx32 ") saturate=%d: got 0x%" PRIx32
			      ", want 0x%" PRIx32,
			      f->name, nans[i], saturate, got, f->nan);
		}
		float extremes[] = {INFINITY,
				    -INFINITY,
				    FLT_MAX,
				    -FLT_MAX,
				    (float)f->max * 2.0f,
				    -(float)f->max * 4.0f,
				    FLT_MIN,
				    -FLT_MIN,
				    FLT_TRUE_MIN,
				    -FLT_TRUE_MIN,
				    0.0f,
				    -0.0f};
		for (size_t i = 0; i < sizeof extremes / sizeof extremes[0]; i++)
			f8_test_encode_one(f, ladder, extremes[i], saturate, "extreme");
		// float32 subnormals: all of them are zeros of the 8-bit formats and of F16; BF16
		// shares float32's exponent range and must round them at its own spacing.
		for (uint32_t bits = 1; bits < 0x800000u; bits += 97) {
			f8_test_encode_one(f, ladder, f8_test_float(bits), saturate, "subnormal");
			f8_test_encode_one(f, ladder, f8_test_float(bits | 0x80000000u), saturate,
					   "subnormal");
		}
		f8_test_encode_one(f, ladder, f8_test_float(0x7FFFFF), saturate, "subnormal");
		for (int i = 0; i < 200000; i++) {
			uint32_t bits = (uint32_t)f8_test_random();
			f8_test_encode_one(f, ladder, f8_test_float(bits), saturate, "random bits");
			// the same, near the format's own range, where the rounding is
			int exponent = (int)f8_test_random_between(-f->bias - f->mantissa_bits - 2,
								   f->bias + 2);
			float x = f8_test_to_float(ldexp(f8_test_random_unit(), exponent));
			f8_test_encode_one(f, ladder, x, saturate, "random in range");
		}
	}
}

/* The facts the documentation states. */
static void f8_test_documented_facts(void) {
	CHECK(f8_float_decode(F8_DTYPE_E4M3, 0x7E) == 448.0f, "e4m3 0x7e is 448");
	CHECK(isnan(f8_float_decode(F8_DTYPE_E4M3, 0x7F)), "e4m3 0x7f is NaN");
	CHECK(isnan(f8_float_decode(F8_DTYPE_E4M3, 0xFF)), "e4m3 0xff is NaN");
	CHECK(f8_float_decode(F8_DTYPE_E4M3, 0x78) == 256.0f,
	      "e4m3 0x78 is 256 (finite top binade)");
	CHECK(f8_float_decode(F8_DTYPE_E5M2, 0x7B) == 57344.0f, "e5m2 0x7b is 57344");
	CHECK(f8_float_decode(F8_DTYPE_E5M2, 0x7C) == INFINITY, "e5m2 0x7c is inf");
	CHECK(f8_float_decode(F8_DTYPE_E5M2, 0xFC) == -INFINITY, "e5m2 0xfc is -inf");
	CHECK(isnan(f8_float_decode(F8_DTYPE_E5M2, 0x7D)), "e5m2 0x7d is NaN");
	CHECK(f8_float_decode(F8_DTYPE_E4M3, 0x01) == 0x1p-9f, "e4m3 smallest subnormal 2^-9");
	CHECK(f8_float_decode(F8_DTYPE_E5M2, 0x01) == 0x1p-16f, "e5m2 smallest subnormal 2^-16");
	CHECK(f8_float_encode(F8_DTYPE_E4M3, 464.0f, false) == 0x7E, "e4m3 464 is a tie: 448");
	CHECK(f8_float_encode(F8_DTYPE_E4M3, nextafterf(464.0f, 500.0f), false) == 0x7F,
	      "e4m3 just above 464 overflows to NaN");
	CHECK(f8_float_encode(F8_DTYPE_E4M3, -1e6f, false) == 0xFF, "e4m3 -1e6: -NaN S.1111.111");
	CHECK(f8_float_encode(F8_DTYPE_E4M3, -1e6f, true) == 0xFE, "e4m3 -1e6 saturates to -448");
	CHECK(f8_float_encode(F8_DTYPE_E5M2, 61440.0f, false) == 0x7C, "e5m2 61440 is a tie: inf");
	CHECK(f8_float_encode(F8_DTYPE_E5M2, 61440.0f, true) == 0x7B, "e5m2 61440 saturates");
	CHECK(f8_float_encode(F8_DTYPE_E5M2, -INFINITY, false) == 0xFC, "e5m2 -inf");
	CHECK(f8_float_encode(F8_DTYPE_BF16, 0x1.FFp127f, false) == 0x7F80,
	      "bf16 overflow tie: inf");
	CHECK(f8_float_encode(F8_DTYPE_F16, 65520.0f, false) == 0x7C00, "f16 65520 is a tie: inf");
	CHECK(f8_float_encode(F8_DTYPE_F16, 65520.0f, true) == 0x7BFF, "f16 65520 saturates");
}

static void f8_test_e8m0_decode(void) {
	for (uint32_t code = 0; code < 256; code++) {
		double want = code == 255 ? NAN : ldexp(1.0, (int)code - 127);
		float got = f8_float_decode(F8_DTYPE_E8M0, code);
		CHECK(f8_test_same(got, want), "e8m0 decode 0x%02" PRIx32 ": got %.9g, want %.9g",
		      code, got, want);
	}
}

/*
 * E8M0 by definition: the power of two below (DOWN), above (UP), or nearest with the linear
 * midpoint 1.5 * 2^k going up (NEAREST_EVEN); clamped to 2^-127..2^127; NaN for NaN and
 * negatives; 0x00 for zero and what lies below the range; 0xFE for +inf.
 */
static uint8_t f8_test_e8m0(float x, f8_round round) {
	if (isnan(x) || (x < 0.0f))
		return 0xFF;
	if (x == 0.0f)
		return 0x00;
	if (isinf(x))
		return 0xFE;
	int e;
	double fraction = frexp((double)x, &e); // x = fraction * 2^e, fraction in [0.5, 1)
	int k = e - 1;                          // 2^k <= x < 2^(k+1)
	bool exact = fraction == 0.5;
	if (round == F8_ROUND_UP && !exact)
		k++;
	if (round == F8_ROUND_NEAREST_EVEN && fraction >= 0.75)
		k++;
	if (k < -127)
		k = -127;
	if (k > 127)
		k = 127;
	return (uint8_t)(k + 127);
}

static const char *const f8_test_round_names[] = {"nearest", "down", "up"};

static void f8_test_e8m0_one(float x, f8_round round, uint8_t want, const char *what) {
	uint8_t got = f8_e8m0_encode(x, round);
	CHECK(got == want, "e8m0 encode(%.9g = 0x%08" PRIx32 ", %s) (%s): got 0x%02x, want 0x%02x",
	      x, f8_test_bits(x), f8_test_round_names[round], what, got, want);
}

static void f8_test_e8m0_encode(void) {
	for (int k = -127; k <= 127; k++) {
		float p = (float)ldexp(1.0, k), tie = (float)ldexp(1.5, k);
		uint8_t code = (uint8_t)(k + 127), next = (uint8_t)(k < 127 ? k + 128 : 254);
		for (int r = 0; r < F8_ROUND_COUNT; r++)
			f8_test_e8m0_one(p, (f8_round)r, code, "power of two");
		float just_above = nextafterf(p, INFINITY);
		f8_test_e8m0_one(just_above, F8_ROUND_DOWN, code, "just above 2^k");
		f8_test_e8m0_one(just_above, F8_ROUND_UP, next, "just above 2^k");
		f8_test_e8m0_one(just_above, F8_ROUND_NEAREST_EVEN, code, "just above 2^k");
		f8_test_e8m0_one(nextafterf(tie, 0.0f), F8_ROUND_NEAREST_EVEN, code,
				 "below 1.5*2^k");
		f8_test_e8m0_one(tie, F8_ROUND_NEAREST_EVEN, next, "1.5*2^k, a tie");
		f8_test_e8m0_one(nextafterf(tie, INFINITY), F8_ROUND_NEAREST_EVEN, next,
				 "above 1.5*2^k");
		f8_test_e8m0_one(tie, F8_ROUND_DOWN, code, "1.5*2^k");
		f8_test_e8m0_one(tie, F8_ROUND_UP, next, "1.5*2^k");
		float just_below =
			nextafterf(2.0f * p, 0.0f); // 2^(k+1) overflows float32 at k = 127
		if (k == 127)
			just_below = FLT_MAX;
		f8_test_e8m0_one(just_below, F8_ROUND_DOWN, code, "just below 2^(k+1)");
		f8_test_e8m0_one(just_below, F8_ROUND_UP, next, "just below 2^(k+1)");
		f8_test_e8m0_one(just_below, F8_ROUND_NEAREST_EVEN, next, "just below 2^(k+1)");
	}
	struct {
		float x;
		uint8_t want;
		const char *what;
	} fixed[] = {
		{0.0f, 0x00, "zero"},
		{-0.0f, 0x00, "-0"},
		{-1.0f, 0xFF, "negative"},
		{-FLT_TRUE_MIN, 0xFF, "tiny negative"},
		{NAN, 0xFF, "NaN"},
		{-NAN, 0xFF, "-NaN"},
		{INFINITY, 0xFE, "inf"},
		{-INFINITY, 0xFF, "-inf"},
		{FLT_MAX, 0xFE, "FLT_MAX"},
		{0x1.8p127f, 0xFE, "1.5*2^127"},
		{FLT_TRUE_MIN, 0x00, "2^-149"},
		{0x1p-128f, 0x00, "2^-128"},
		{0x1.8p-128f, 0x00, "1.5*2^-128"},
		{0x1.FFFFF8p-128f, 0x00, "just below 2^-127"},
	};
	for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
		for (int r = 0; r < F8_ROUND_COUNT; r++)
			f8_test_e8m0_one(fixed[i].x, (f8_round)r, fixed[i].want, fixed[i].what);
	f8_test_e8m0_one(f8_test_float(0x7F800001), F8_ROUND_UP, 0xFF, "signalling NaN");
	for (int i = 0; i < 300000; i++) {
		float x = f8_test_float((uint32_t)f8_test_random());
		f8_round r = (f8_round)(i % F8_ROUND_COUNT);
		f8_test_e8m0_one(x, r, f8_test_e8m0(x, r), "random bits");
	}
}

static void f8_test_amax_and_scale(void) {
	float values[] = {1.0f, -3.0f, 2.0f, -0.0f};
	CHECK(f8_amax(values, 0) == 0.0f, "amax of nothing is 0");
	CHECK(f8_amax(values, 4) == 3.0f, "amax {1,-3,2,-0}: got %g", f8_amax(values, 4));
	float zeros[] = {-0.0f, 0.0f};
	CHECK(f8_test_same(f8_amax(zeros, 2), 0.0), "amax {-0, 0} is +0");
	float with_nan[] = {1.0f, NAN, INFINITY, 5.0f};
	CHECK(isnan(f8_amax(with_nan, 4)), "amax with NaN (and inf) is NaN");
	float nan_last[] = {-INFINITY, 2.0f, -NAN};
	CHECK(isnan(f8_amax(nan_last, 3)), "amax with NaN last is NaN");
	float with_inf[] = {1.0f, -INFINITY, 5.0f};
	CHECK(f8_amax(with_inf, 3) == INFINITY, "amax with -inf is inf");

	CHECK(f8_scale_from_amax(F8_DTYPE_E4M3, 448.0f, 0, 7.0f) == 1.0f, "448/448 = 1");
	CHECK(f8_scale_from_amax(F8_DTYPE_E5M2, 57344.0f, 0, 7.0f) == 1.0f, "57344/57344 = 1");
	CHECK(f8_scale_from_amax(F8_DTYPE_E4M3, 1.0f, 0, 7.0f) == 448.0f, "448/1");
	CHECK(f8_scale_from_amax(F8_DTYPE_E4M3, 1.0f, 1, 7.0f) == 224.0f, "margin 1 halves");
	CHECK(f8_scale_from_amax(F8_DTYPE_E4M3, 1.0f, 3, 7.0f) == 56.0f, "margin 3: / 8");
	CHECK(f8_scale_from_amax(F8_DTYPE_E4M3, 1.0f, -2, 7.0f) == 1792.0f, "margin -2: * 4");
	CHECK(f8_scale_from_amax(F8_DTYPE_E5M2, 0.5f, 0, 7.0f) == 114688.0f, "57344/0.5");
	CHECK(f8_scale_from_amax(F8_DTYPE_E4M3, 0.0f, 0, 7.0f) == 7.0f, "amax 0 keeps previous");
	CHECK(f8_scale_from_amax(F8_DTYPE_E4M3, -0.0f, 0, 7.0f) == 7.0f, "amax -0 keeps previous");
	CHECK(f8_scale_from_amax(F8_DTYPE_E4M3, NAN, 0, 7.0f) == 7.0f, "amax NaN keeps previous");
	CHECK(f8_scale_from_amax(F8_DTYPE_E4M3, INFINITY, 0, 7.0f) == 7.0f, "amax inf keeps");
	CHECK(f8_scale_from_amax(F8_DTYPE_E4M3, FLT_TRUE_MIN, 0, 7.0f) == FLT_MAX,
	      "tiny amax clamps to FLT_MAX");
	CHECK(f8_scale_from_amax(F8_DTYPE_E4M3, 1e-37f, 0, 7.0f) == FLT_MAX,
	      "amax 1e-37: 4.48e39 clamps to FLT_MAX");
	float big = f8_scale_from_amax(F8_DTYPE_E4M3, FLT_MAX, 0, 7.0f);
	CHECK(big > 0.0f && big * FLT_MAX <= 448.0f * (1 + 0x1p-22f), "amax FLT_MAX: %g", big);
	CHECK(f8_scale_from_amax(F8_DTYPE_E4M3, 1.0f, 400, 7.0f) > 0.0f, "scale never 0");
	// Random amaxes: the scale is 448 / amax rounded once, so amax * scale is 448 within
	// float32's rounding, and 2^margin divides it exactly.
	for (int i = 0; i < 10000; i++) {
		int exponent = (int)f8_test_random_between(-100, 100);
		float amax = (float)ldexp(1.5 + 0.5 * f8_test_random_unit(), exponent);
		int margin = (int)f8_test_random_between(-3, 3);
		float scale = f8_scale_from_amax(F8_DTYPE_E4M3, amax, margin, 7.0f);
		double want = 448.0 / amax / ldexp(1.0, margin);
		CHECK(fabs(scale - want) <= want * 0x1p-24,
		      "scale(amax %.9g, margin %d) = %.9g, want %.9g", amax, margin, scale, want);
	}
}

/* Random float with a magnitude 2^-spread .. 2^spread around 2^center, sometimes 0 or -0. */
static float f8_test_random_value(int center, int spread) {
	uint64_t pick = f8_test_random() % 64;
	if (pick == 0)
		return 0.0f;
	if (pick == 1)
		return -0.0f;
	return f8_test_to_float(ldexp(f8_test_random_unit(),
				      center + (int)f8_test_random_between(-spread, spread)));
}

static void f8_test_per_tensor(const f8_test_format *f, const f8_test_ladder *ladder) {
	enum { N = 1000 };
	float x[N], y[N];
	uint8_t codes[N];
	for (int i = 0; i < N; i++)
		x[i] = f8_test_random_value(0, 12);
	x[0] = NAN;
	x[1] = INFINITY;
	for (int saturate = 0; saturate <= 1; saturate++) {
		float scale = 37.25f, scale_inv = 1.0f / scale;
		f8_quantize(x, N, f->dtype, scale, saturate, codes);
		f8_dequantize(codes, N, f->dtype, scale_inv, y);
		for (int i = 0; i < N; i++) {
			uint32_t want = f8_test_encode(f, ladder, x[i] * scale, saturate);
			float want_y = (float)f8_test_value(f, codes[i]) * scale_inv;
			CHECK(codes[i] == want && f8_test_same(y[i], want_y),
			      "%s quantize(%.9g * %g) saturate=%d: code 0x%02x (want 0x%02" PRIx32
			      "), dequantized %.9g (want %.9g)",
			      f->name, x[i], scale, saturate, codes[i], want, y[i], want_y);
		}
	}
}

/*
 * Block quantization of a (rows, cols) matrix in (block_rows, block_cols) blocks against the
 * contract: each block's amax computed here, scale = max / amax (1 when amax is 0), every code
 * by the reference encoder, scale_inv exactly 1 / scale, and the dequantized values within half
 * a format ulp (at that scale) of the inputs, plus float32's roundings of scale_inv and product.
 */
static void f8_test_blocks(const f8_test_format *f, const f8_test_ladder *ladder, size_t rows,
			   size_t cols, size_t block_rows, size_t block_cols) {
	size_t grid_rows = (rows + block_rows - 1) / block_rows;
	size_t grid_cols = (cols + block_cols - 1) / block_cols;
	float *x = malloc(rows * cols * sizeof *x), *y = malloc(rows * cols * sizeof *y);
	uint8_t *codes = malloc(rows * cols);
	float *scale_inv = malloc(grid_rows * grid_cols * sizeof *scale_inv);
	if (!x || !y || !codes || !scale_inv) {
		printf("out of memory\n");
		exit(2);
	}
	for (size_t r = 0; r < rows; r++)
		for (size_t c = 0; c < cols; c++) // magnitudes change every few rows and columns
			x[r * cols + c] = f8_test_random_value((int)((r / 5 + c / 9) % 50) - 25, 8);
	for (size_t r = 0; r < rows && r < block_rows; r++) // block (0, 1) is all zeros
		for (size_t c = block_cols; c < cols && c < 2 * block_cols; c++)
			x[r * cols + c] = (c % 2) ? -0.0f : 0.0f;
	char what[64];
	snprintf(what, sizeof what, "%s %zux%zu in %zux%zu blocks", f->name, rows, cols, block_rows,
		 block_cols);
	f8_status status = f8_quantize_blocks(x, rows, cols, f->dtype, block_rows, block_cols, 0,
					      codes, scale_inv);
	CHECK(status == F8_OK, "%s: status %d", what, status);
	f8_dequantize_blocks(codes, rows, cols, f->dtype, block_rows, block_cols, scale_inv, y);
	for (size_t br = 0; br < grid_rows; br++)
		for (size_t bc = 0; bc < grid_cols; bc++) {
			size_t r_end = (br + 1) * block_rows < rows ? (br + 1) * block_rows : rows;
			size_t c_end = (bc + 1) * block_cols < cols ? (bc + 1) * block_cols : cols;
			double amax = 0.0;
			for (size_t r = br * block_rows; r < r_end; r++)
				for (size_t c = bc * block_cols; c < c_end; c++)
					if (fabs(x[r * cols + c]) > amax)
						amax = fabs(x[r * cols + c]);
			float scale = amax == 0.0 ? 1.0f : (float)f->max / (float)amax;
			if (isinf(scale))
				scale = FLT_MAX;
			float got = scale_inv[br * grid_cols + bc];
			CHECK(f8_test_bits(got) == f8_test_bits(1.0f / scale),
			      "%s: block (%zu, %zu) amax %.9g: scale_inv %.9g, want %.9g", what, br,
			      bc, amax, got, 1.0f / scale);
			for (size_t r = br * block_rows; r < r_end; r++)
				for (size_t c = bc * block_cols; c < c_end; c++) {
					size_t i = r * cols + c;
					uint32_t want =
						f8_test_encode(f, ladder, x[i] * scale, true);
					double error = fabs((double)y[i] - x[i]);
					double tolerance = f8_test_half_ulp(f, x[i] * scale) /
								   scale * (1 + 0x1p-20) +
							   fabs(x[i]) * 0x1p-21;
					CHECK(codes[i] == want && error <= tolerance,
					      "%s: x[%zu][%zu] = %.9g: code 0x%02x (want "
					      "0x%02" PRIx32
					      "), dequantized %.9g, error %.3g > %.3g",
					      what, r, c, x[i], codes[i], want, y[i], error,
					      tolerance);
				}
		}
	free(x);
	free(y);
	free(codes);
	free(scale_inv);
}

/* NaN and inf in a block: the scale stays 1 (NaN/inf amax keeps it), inf saturates. */
static void f8_test_blocks_specials(const f8_test_format *f) {
	float x[2 * 4] = {1.0f, NAN, 2.0f, 3.0f, 0.5f, -INFINITY, 2.0f, 0.25f};
	uint8_t codes[8];
	float scale_inv[2], y[8];
	CHECK(f8_quantize_blocks(x, 2, 4, f->dtype, 1, 4, 0, codes, scale_inv) == F8_OK,
	      "%s special blocks", f->name);
	f8_dequantize_blocks(codes, 2, 4, f->dtype, 1, 4, scale_inv, y);
	CHECK(scale_inv[0] == 1.0f && scale_inv[1] == 1.0f,
	      "%s: NaN/inf blocks keep scale 1: %g %g", f->name, scale_inv[0], scale_inv[1]);
	CHECK(isnan(y[1]) && y[0] == 1.0f && y[5] == -(float)f->max && y[7] == 0.25f,
	      "%s: NaN/inf block values %g %g %g %g", f->name, y[0], y[1], y[5], y[7]);
	CHECK(f8_quantize_blocks(x, 2, 4, F8_DTYPE_BF16, 1, 4, 0, codes, scale_inv) ==
		      F8_ERR_ARGUMENT,
	      "quantize_blocks refuses bf16");
	CHECK(f8_quantize_blocks(x, 2, 4, f->dtype, 0, 4, 0, codes, scale_inv) == F8_ERR_ARGUMENT,
	      "quantize_blocks refuses block_rows 0");
	CHECK(f8_quantize_blocks(x, 2, 4, f->dtype, 1, 0, 0, codes, scale_inv) == F8_ERR_ARGUMENT,
	      "quantize_blocks refuses block_cols 0");
}

/* The exponent of the largest normal, from the layout: the top binade is finite in E4M3. */
static int f8_test_emax(const f8_test_format *f) {
	int top = (1 << f->exponent_bits) - 1;
	return (f->ieee ? top - 1 : top) - f->bias;
}

/*
 * MX quantization (OCP MX v1.0 6.3) of a (rows, cols) matrix in 32-element row blocks: scales
 * from this file's own floor(log2(amax)), codes by the reference encoder on x / 2^shared_exp
 * (exact in double), dequantization exact, and every element within half an ulp at its scale
 * unless it saturated, in which case it is +-max * 2^shared_exp.
 */
static void f8_test_mx(const f8_test_format *f, const f8_test_ladder *ladder) {
	enum { ROWS = 37, COLS = 100, BLOCKS = (COLS + 31) / 32 };
	static float x[ROWS * COLS], y[ROWS * COLS];
	static uint8_t codes[ROWS * COLS], scales[ROWS * BLOCKS];
	for (int r = 0; r < ROWS; r++)
		for (int c = 0; c < COLS; c++) // block magnitudes from 2^-150 to 2^120
			x[r * COLS + c] =
				f8_test_random_value((int)((r * 7 + c / 32 * 13) % 270) - 150, 6);
	for (int c = 32; c < 64; c++)
		x[0 * COLS + c] = 0.0f; // amax 0
	x[1 * COLS + 40] = NAN;
	x[2 * COLS + 70] = -INFINITY;
	for (int c = 0; c < 32; c++)
		x[3 * COLS + c] = (float)ldexp(f8_test_random_unit(), -140); // float32 subnormals
	for (int c = 64; c < 96; c++)
		x[4 * COLS + c] = (float)ldexp(f8_test_random_unit(), 127); // the largest floats
	x[4 * COLS + 70] = FLT_MAX;
	CHECK(f8_quantize_mx(x, ROWS, COLS, f->dtype, codes, scales) == F8_OK, "%s mx", f->name);
	f8_dequantize_mx(codes, ROWS, COLS, f->dtype, scales, y);
	for (int r = 0; r < ROWS; r++)
		for (int b = 0; b < BLOCKS; b++) {
			int c0 = b * 32, c1 = c0 + 32 < COLS ? c0 + 32 : COLS;
			double amax = 0.0;
			bool nan = false;
			for (int c = c0; c < c1; c++) {
				nan |= isnan(x[r * COLS + c]);
				if (fabs(x[r * COLS + c]) > amax)
					amax = fabs(x[r * COLS + c]);
			}
			int shared = -127;
			if (isinf(amax)) {
				shared = 127;
			} else if (amax > 0) {
				int e;
				frexp(amax, &e);
				shared = e - 1 - f8_test_emax(f);
				shared = shared < -127 ? -127 : shared > 127 ? 127 : shared;
			}
			uint8_t want_scale = nan ? 0xFF : (uint8_t)(shared + 127);
			uint8_t got_scale = scales[r * BLOCKS + b];
			CHECK(got_scale == want_scale,
			      "%s mx block (%d, %d) amax %.9g: scale 0x%02x, "
			      "want 0x%02x",
			      f->name, r, b, amax, got_scale, want_scale);
			for (int c = c0; c < c1; c++) {
				int i = r * COLS + c;
				double scaled = ldexp(x[i], -shared);
				uint32_t want =
					nan ? f->nan : f8_test_encode(f, ladder, scaled, true);
				double value = f8_test_value(f, codes[i]);
				double want_y = nan ? NAN : ldexp(value, shared);
				if (!nan && fabs(want_y) > FLT_MAX)
					want_y = want_y > 0 ? INFINITY : -INFINITY;
				bool saturated = fabs(scaled) > f->max;
				double error = fabs(scaled - value);
				bool close =
					nan || (saturated ? fabs(value) == f->max
							  : error <= f8_test_half_ulp(f, scaled));
				CHECK(codes[i] == want && f8_test_same(y[i], want_y) && close,
				      "%s mx x[%d][%d] = %.9g, 2^%d: code 0x%02x (want 0x%02" PRIx32
				      "), dequantized %.9g (want %.9g)",
				      f->name, r, c, x[i], shared, codes[i], want, y[i], want_y);
			}
		}
	CHECK(f8_quantize_mx(x, 1, 32, F8_DTYPE_E8M0, codes, scales) == F8_ERR_ARGUMENT,
	      "quantize_mx refuses e8m0");
	CHECK(f8_quantize_mx(x, 1, 32, F8_DTYPE_BF16, codes, scales) == F8_ERR_ARGUMENT,
	      "quantize_mx refuses bf16");
}

int main(int argc, char **argv) {
	uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 0)
				 : (uint64_t)time(NULL) * 1000003u ^ (uint64_t)clock();
	printf("seed %" PRIu64 " (replay: %s %" PRIu64 ")\n", seed, argv[0], seed);
	f8_test_state = seed;

	for (int i = 0; i < F8_TEST_FORMATS; i++) {
		const f8_test_format *f = &f8_test_formats[i];
		f8_test_ladder ladder = f8_test_ladder_build(f);
		CHECK(ladder.values[ladder.count - 1] == f->max,
		      "%s: the test's own table gives max "
		      "%.9g, the specification %.9g",
		      f->name, ladder.values[ladder.count - 1], f->max);
		f8_test_decode_all(f);
		f8_test_round_trip(f);
		f8_test_midpoints(f, &ladder);
		f8_test_specials(f, &ladder);
		if (f8_dtype_is_fp8(f->dtype)) {
			f8_test_per_tensor(f, &ladder);
			f8_test_blocks(f, &ladder, 200, 300, 1, 128);
			f8_test_blocks(f, &ladder, 200, 300, 128, 128);
			f8_test_blocks(f, &ladder, 200, 300, 3, 7);
			f8_test_blocks(f, &ladder, 128, 256, 128, 128);
			f8_test_blocks_specials(f);
			f8_test_mx(f, &ladder);
		}
		f8_test_ladder_free(&ladder);
	}
	f8_test_documented_facts();
	f8_test_e8m0_decode();
	f8_test_e8m0_encode();
	f8_test_amax_and_scale();

	printf("%" PRIu64 " passed, %" PRIu64 " failed\n", f8_test_passed, f8_test_failed);
	return f8_test_failed == 0 ? 0 : 1;
}
