/*
 * exp, log, tanh, erf, cos and sin of f32 as instruction sequences of our own, emitted into
 * LLVM IR the same way for both targets: only IEEE f32 operations (add, mul, div, fma, all
 * correctly rounded, and i64 <-> f32 conversions to nearest) and integer arithmetic, no libm
 * and no libdevice (nor llvm.sin and llvm.cos, which NVPTX selects as sin.approx and
 * cos.approx), so that the host JIT and the GPU compute the same bits. Straight-line code (selects, not branches), so that a warp never
 * diverges and a caller may emit it anywhere.
 *
 * Measured maximum error over every f32 input (2^32 values, host JIT against glibc's double
 * precision exp/log/tanh/erf/cos/sin rounded to the nearest f32's ulp; the test's --exhaustive
 * reproduces it):
 *   exp   0.92 ulp   (results below 2^-126 in ulps of the subnormal spacing)
 *   log   0.84 ulp
 *   tanh  1.03 ulp
 *   erf   1.00 ulp   (relative everywhere; near 0, erf(x) = x + x * Q(x^2) keeps it relative,
 *                    and for subnormal x the result is x * 2/sqrt(pi) within 1 ulp)
 *   cos   0.79 ulp   (every finite argument, 2^127 too: the reduction by pi/2 is Payne and
 *   sin   0.79 ulp    Hanek's, in integers, not one whose error grows with the argument)
 * Specials: NaN in, the same NaN out; exp overflows to +inf above ~88.72 and underflows to 0
 * below ~-103.97; log(0) = -inf, log(x < 0) = NaN, log(+inf) = +inf; tanh(+-inf) = +-1,
 * erf(+-inf) = +-1; cos and sin of +-inf are NaN, sin(-0) = -0.
 *
 * The coefficients are near-minimax polynomials fitted for this file (Lawson's iteratively
 * reweighted least squares in 40-digit arithmetic against mpmath's functions, on the reduced
 * intervals below, weighted for relative error), then rounded to f32.
 */
#include "codegen/llvm_internal.h" // f8_llvm_emit, f8_llvm_math, f8_llvm_fma

#include <assert.h> // assert

/* p(z) = c[0] + z * (c[1] + z * (...)), by Horner's rule with fma. */
static LLVMValueRef horner(const f8_llvm_emit *emit, const float *c, int n, LLVMValueRef z) {
	LLVMValueRef p = f8_llvm_f32(emit, c[n - 1]);
	for (int i = n - 2; i >= 0; i--)
		p = f8_llvm_fma(emit, p, z, f8_llvm_f32(emit, c[i]));
	return p;
}

static LLVMValueRef fmul(const f8_llvm_emit *emit, LLVMValueRef a, LLVMValueRef b) {
	return LLVMBuildFMul(emit->builder, a, b, "");
}

static LLVMValueRef fadd(const f8_llvm_emit *emit, LLVMValueRef a, LLVMValueRef b) {
	return LLVMBuildFAdd(emit->builder, a, b, "");
}

static LLVMValueRef fsub(const f8_llvm_emit *emit, LLVMValueRef a, LLVMValueRef b) {
	return LLVMBuildFSub(emit->builder, a, b, "");
}

/* a `predicate` b ? then : otherwise; an ordered predicate is false for NaN. */
static LLVMValueRef pick(const f8_llvm_emit *emit, LLVMRealPredicate predicate, LLVMValueRef a,
			 LLVMValueRef b, LLVMValueRef then, LLVMValueRef otherwise) {
	LLVMValueRef condition = LLVMBuildFCmp(emit->builder, predicate, a, b, "");
	return LLVMBuildSelect(emit->builder, condition, then, otherwise, "");
}

/* NaN in, the same NaN out: the last select of every function. */
static LLVMValueRef keep_nan(const f8_llvm_emit *emit, LLVMValueRef x, LLVMValueRef y) {
	return pick(emit, LLVMRealUNO, x, x, x, y);
}

static LLVMValueRef with_sign_of(const f8_llvm_emit *emit, LLVMValueRef magnitude,
				 LLVMValueRef sign) {
	LLVMTypeRef type = emit->f32;
	LLVMValueRef args[2] = {magnitude, sign};
	return f8_llvm_intrinsic(emit, "llvm.copysign", &type, 1, args, 2);
}

/* 2^k for an i32 k in -126..127, built from its bits. */
static LLVMValueRef power_of_two(const f8_llvm_emit *emit, LLVMValueRef k) {
	LLVMBuilderRef b = emit->builder;
	LLVMValueRef biased = LLVMBuildAdd(b, k, f8_llvm_i32(emit, 127), "");
	return f8_llvm_from_bits(emit, LLVMBuildShl(b, biased, f8_llvm_i32(emit, 23), ""));
}

// ln 2 = LN2_HI + LN2_LO; LN2_HI has 16 significant bits, so k * LN2_HI is exact for |k| < 2^8.
static const float LN2_HI = 0x1.62e4p-1f, LN2_LO = 0x1.7f7d1cp-20f;

/* e^r = 1 + r + r^2 * q(r) for |r| <= ln2/2 + a little (k may round the other way). */
static const float EXP_Q[] = {0x1.fffffap-2f, 0x1.55547ap-3f, 0x1.55596p-5f, 0x1.124b32p-7f,
			      0x1.6a0786p-10f};

/*
 * e^x for x clamped to [-104, 89] (NaN to -104; the caller selects NaN back): x = k ln2 + r
 * with k = round(x / ln2) (adding and subtracting 1.5 * 2^23 rounds to nearest even), r by
 * Cody and Waite's two-step subtraction with fma, e^r by the polynomial, then 2^k in two exact
 * factors 2^(k/2) * 2^(k - k/2), so that only the last multiplication rounds, also where the
 * result is subnormal (k down to -150) or overflows to +inf (k = 128 and e^r >= 1).
 */
static LLVMValueRef exp_clamped(const f8_llvm_emit *emit, LLVMValueRef x) {
	LLVMBuilderRef b = emit->builder;
	LLVMValueRef low = f8_llvm_f32(emit, -104.0f), high = f8_llvm_f32(emit, 89.0f);
	x = pick(emit, LLVMRealOGE, x, low, x, low);
	x = pick(emit, LLVMRealOLT, x, high, x, high);
	LLVMValueRef magic = f8_llvm_f32(emit, 0x1.8p23f);
	LLVMValueRef t = fmul(emit, x, f8_llvm_f32(emit, 0x1.715476p+0f)); // x * log2(e)
	LLVMValueRef k = fsub(emit, fadd(emit, t, magic), magic);
	LLVMValueRef minus_k = LLVMBuildFNeg(b, k, "");
	LLVMValueRef r = f8_llvm_fma(emit, minus_k, f8_llvm_f32(emit, LN2_HI), x);
	r = f8_llvm_fma(emit, minus_k, f8_llvm_f32(emit, LN2_LO), r);
	LLVMValueRef q = horner(emit, EXP_Q, 5, r);
	LLVMValueRef one = f8_llvm_f32(emit, 1.0f);
	LLVMValueRef p = f8_llvm_fma(emit, f8_llvm_fma(emit, q, r, one), r, one);
	LLVMValueRef ki = LLVMBuildFPToSI(b, k, emit->i32, "");
	LLVMValueRef k1 = LLVMBuildAShr(b, ki, f8_llvm_i32(emit, 1), "");
	LLVMValueRef k2 = LLVMBuildSub(b, ki, k1, "");
	return fmul(emit, fmul(emit, p, power_of_two(emit, k1)), power_of_two(emit, k2));
}

static LLVMValueRef exp_f32(const f8_llvm_emit *emit, LLVMValueRef x) {
	return keep_nan(emit, x, exp_clamped(emit, x));
}

/* log((1+s)/(1-s)) = 2s + s * R(s^2), R(z) = z * r(z), for |s| <= (sqrt2 - 1)/(sqrt2 + 1). */
static const float LOG_R[] = {0x1.555554p-1f, 0x1.999a88p-2f, 0x1.24352p-2f, 0x1.e38b28p-3f};

/*
 * log x: subnormals are scaled by 2^23 first; x = 2^e * m with m in [sqrt(1/2), sqrt(2)) by
 * moving the exponent bits (subtracting the bits of sqrt(1/2) makes the split fall there);
 * f = m - 1 is exact; with s = f / (2 + f), log(1 + f) = f - (hfsq - s * (hfsq + R)),
 * hfsq = f^2 / 2, which keeps the large term f exact and the rounding in the small ones; e ln2
 * is added in two parts (e * LN2_HI exact).
 */
static LLVMValueRef log_f32(const f8_llvm_emit *emit, LLVMValueRef x) {
	LLVMBuilderRef b = emit->builder;
	LLVMValueRef subnormal = LLVMBuildFCmp(b, LLVMRealOLT, x, f8_llvm_f32(emit, 0x1p-126f), "");
	LLVMValueRef scaled = fmul(emit, x, f8_llvm_f32(emit, 0x1p23f));
	scaled = LLVMBuildSelect(b, subnormal, scaled, x, "");
	const uint32_t sqrt_half = 0x3F3504F3u; // the bits of sqrt(1/2)
	LLVMValueRef t =
		LLVMBuildSub(b, f8_llvm_bits(emit, scaled), f8_llvm_i32(emit, sqrt_half), "");
	LLVMValueRef e = LLVMBuildSub(
		b, LLVMBuildAShr(b, t, f8_llvm_i32(emit, 23), ""),
		LLVMBuildSelect(b, subnormal, f8_llvm_i32(emit, 23), f8_llvm_i32(emit, 0), ""), "");
	LLVMValueRef m = f8_llvm_from_bits(
		emit, LLVMBuildAdd(b, LLVMBuildAnd(b, t, f8_llvm_i32(emit, 0x7FFFFFu), ""),
				   f8_llvm_i32(emit, sqrt_half), ""));
	LLVMValueRef f = fsub(emit, m, f8_llvm_f32(emit, 1.0f));
	LLVMValueRef s = LLVMBuildFDiv(b, f, fadd(emit, f8_llvm_f32(emit, 2.0f), f), "");
	LLVMValueRef z = fmul(emit, s, s);
	LLVMValueRef r = fmul(emit, horner(emit, LOG_R, 4, z), z);
	LLVMValueRef hfsq = fmul(emit, fmul(emit, f8_llvm_f32(emit, 0.5f), f), f);
	LLVMValueRef dk = LLVMBuildSIToFP(b, e, emit->f32, "");
	LLVMValueRef lo = f8_llvm_fma(emit, s, fadd(emit, hfsq, r),
				      fmul(emit, dk, f8_llvm_f32(emit, LN2_LO)));
	LLVMValueRef y = fsub(emit, fmul(emit, dk, f8_llvm_f32(emit, LN2_HI)),
			      fsub(emit, fsub(emit, hfsq, lo), f));
	LLVMValueRef zero = f8_llvm_f32(emit, 0.0f), inf = f8_llvm_f32(emit, __builtin_inff());
	y = pick(emit, LLVMRealOEQ, x, inf, inf, y);
	y = pick(emit, LLVMRealOEQ, x, zero, LLVMBuildFNeg(b, inf, ""), y);
	LLVMValueRef nan = f8_llvm_from_bits(emit, f8_llvm_i32(emit, 0x7FC00000u));
	y = pick(emit, LLVMRealOLT, x, zero, nan, y);
	return keep_nan(emit, x, y);
}

/* tanh x = x + x^3 * t(x^2) for |x| < 0.875. */
static const float TANH_T[] = {-0x1.555554p-2f, 0x1.1110eap-3f, -0x1.ba12bap-5f, 0x1.65ce74p-6f,
			       -0x1.1e55d4p-7f, 0x1.aed87ap-9f, -0x1.05d01p-10f, 0x1.641f9ep-13f};

/*
 * tanh x: the odd polynomial below 0.875; above, 1 - 2 / (e^(2|x|) + 1); either with the sign
 * of x (the polynomial's fma would turn -0 into +0). |x| is clamped to 9.5, where tanh rounds
 * to 1 (and inf stays finite on the way).
 */
static LLVMValueRef tanh_f32(const f8_llvm_emit *emit, LLVMValueRef x) {
	LLVMValueRef a = f8_llvm_fabs(emit, x);
	LLVMValueRef z = fmul(emit, x, x);
	LLVMValueRef small = f8_llvm_fma(emit, fmul(emit, x, z), horner(emit, TANH_T, 8, z), x);
	LLVMValueRef clamp = f8_llvm_f32(emit, 9.5f), one = f8_llvm_f32(emit, 1.0f);
	LLVMValueRef clamped = pick(emit, LLVMRealOLT, a, clamp, a, clamp);
	LLVMValueRef e = exp_clamped(emit, fadd(emit, clamped, clamped));
	LLVMValueRef large = fsub(emit, one,
				  LLVMBuildFDiv(emit->builder, f8_llvm_f32(emit, 2.0f),
						fadd(emit, e, one), ""));
	LLVMValueRef y = pick(emit, LLVMRealOLT, a, f8_llvm_f32(emit, 0.875f), small, large);
	return keep_nan(emit, x, with_sign_of(emit, y, x)); // tanh(-0) = -0 too
}

/* erf x = x + x * q(x^2) for |x| < 0.875. */
static const float ERF_Q[] = {0x1.06eba8p-3f, -0x1.812744p-2f, 0x1.ce2e84p-4f, -0x1.b819a6p-6f,
			      0x1.553abap-8f, -0x1.ae7f9p-11f, 0x1.6bdf4ap-14f};

/* erfc(x) e^(x^2) = c(x - 2) on [0.875, 4]. */
static const float ERFC_C[] = {0x1.05867p-2f,   -0x1.b56faep-4f, 0x1.56793p-5f,
			       -0x1.faa306p-7f, 0x1.6310fcp-8f,  -0x1.e664fcp-10f,
			       0x1.460df8p-11f, -0x1.1b65fp-13f, 0x1.d2c7cap-15f,
			       -0x1.456a96p-15f};

/*
 * erf x: the odd polynomial below 0.875; above, 1 - e^(-x^2) c(|x| - 2); either with the sign
 * of x. |x| is clamped to 4, where erf rounds to 1. x^2 = hi + lo exactly (fma), and
 * e^(-hi - lo) is e^(-hi) (1 - lo), so that the rounding of x^2 does not reach the result.
 */
static LLVMValueRef erf_f32(const f8_llvm_emit *emit, LLVMValueRef x) {
	LLVMBuilderRef b = emit->builder;
	LLVMValueRef a = f8_llvm_fabs(emit, x);
	LLVMValueRef small = f8_llvm_fma(emit, x, horner(emit, ERF_Q, 7, fmul(emit, x, x)), x);
	LLVMValueRef clamp = f8_llvm_f32(emit, 4.0f);
	LLVMValueRef clamped = pick(emit, LLVMRealOLT, a, clamp, a, clamp);
	LLVMValueRef c = horner(emit, ERFC_C, 10, fsub(emit, clamped, f8_llvm_f32(emit, 2.0f)));
	LLVMValueRef hi = fmul(emit, clamped, clamped);
	LLVMValueRef lo = f8_llvm_fma(emit, clamped, clamped, LLVMBuildFNeg(b, hi, ""));
	LLVMValueRef e = exp_clamped(emit, LLVMBuildFNeg(b, hi, ""));
	LLVMValueRef minus_e = LLVMBuildFNeg(b, e, "");
	e = f8_llvm_fma(emit, minus_e, lo, e);
	LLVMValueRef large = f8_llvm_fma(emit, LLVMBuildFNeg(b, e, ""), c, f8_llvm_f32(emit, 1.0f));
	LLVMValueRef y = pick(emit, LLVMRealOLT, a, f8_llvm_f32(emit, 0.875f), small, large);
	return keep_nan(emit, x, with_sign_of(emit, y, x));
}

/* sin r = r + r^3 s(r^2) and cos r = 1 - r^2/2 + r^4 c(r^2) for |r| <= pi/4 (and a little). */
static const float SIN_S[] = {-0x1.555556p-3f, 0x1.111108p-7f, -0x1.a00f7ap-13f,
			      0x1.6cd0aap-19f};
static const float COS_C[] = {0x1.555556p-5f, -0x1.6c16b8p-10f, 0x1.a010dap-16f,
			      -0x1.241da2p-22f};

/* The bits of 2/pi after the binary point, 32 to a word, behind a word of zeros: a window into
 * them starts at a bit that depends on x's exponent, and the zeros let the smallest reduced
 * arguments (|x| >= pi/4) use the same window arithmetic as the largest. */
static const uint32_t TWO_OVER_PI[8] = {0,          0xa2f9836eu, 0x4e441529u, 0xfc2757d1u,
					0xf534ddc0u, 0xdb629599u, 0x3c439041u, 0xfe5163abu};

// pi/2 = PIO2_HI + PIO2_LO to about 2^-49 relative.
static const float PIO2_HI = 0x1.921fb6p+0f, PIO2_LO = -0x1.777a5cp-25f;

/* Words w and w + 1 of TWO_OVER_PI as one i64, for an i32 w in 0..6 (by selects, not a table
 * in memory, so that both targets run the same straight-line code without a global). */
static LLVMValueRef two_over_pi_pair(const f8_llvm_emit *emit, LLVMValueRef w) {
	LLVMBuilderRef b = emit->builder;
	LLVMValueRef pair = NULL;
	for (int k = 6; k >= 0; k--) {
		uint64_t bits = (uint64_t)TWO_OVER_PI[k] << 32 | TWO_OVER_PI[k + 1];
		LLVMValueRef value = f8_llvm_i64(emit, bits);
		pair = pair ? LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntEQ, w, f8_llvm_i32(emit, (uint32_t)k), ""),
					      value, pair, "")
			    : value;
	}
	return pair;
}

/* |x| = quadrant pi/2 + hi + lo, modulo 2 pi, |hi + lo| <= pi/4, hi + lo to about 2^-48. */
typedef struct reduced {
	LLVMValueRef hi, lo; // f32
	LLVMValueRef quadrant; // i32, its two low bits are what matters
} reduced;

/*
 * Payne and Hanek's reduction of a = |x| >= pi/4, in integers, for every finite f32 (a table
 * of 2/pi's bits instead of Cody and Waite's few constants, whose error grows with the
 * argument: positions of a long sequence times RoPE's frequencies reach 10^5 and more).
 * a = M 2^E (M the 24-bit significand); a 2/pi modulo 4 needs only the bits of 2/pi from
 * weight 2^(1-E) on: the earlier ones make multiples of 4. Of those, 96 bits times M give a
 * 120-bit product whose bits of weights 2^1 .. 2^-62 are a 2/pi modulo 4, with an error below
 * 2^-62 (the rest of the product and of 2/pi): rounded to the nearest quadrant, the remaining
 * fraction (an i64 of 2^-62 units) becomes two f32s and is multiplied by pi/2 in two parts.
 * The reduced argument keeps about 48 bits, and its error stays below 2^-61 even where it is
 * small (a near a multiple of pi/2): far below half an ulp of sin or cos there. Below pi/4 the
 * argument is a itself.
 */
static reduced reduce_pio2(const f8_llvm_emit *emit, LLVMValueRef a) {
	LLVMBuilderRef b = emit->builder;
	LLVMValueRef bits = f8_llvm_bits(emit, a);
	LLVMValueRef significand = LLVMBuildZExt(
		b, LLVMBuildOr(b, LLVMBuildAnd(b, bits, f8_llvm_i32(emit, 0x7FFFFFu), ""),
			       f8_llvm_i32(emit, 0x800000u), ""),
		emit->i64, "");
	// a = M 2^E with E = biased - 150; with the table's word of zeros in front, the window
	// starts after bit E + 30 of the table: word (E + 30) / 32, shifted by (E + 30) % 32.
	// For a >= pi/4, E + 30 >= 6; at the largest E (104), the window ends in word 7.
	LLVMValueRef start = LLVMBuildSub(b, LLVMBuildLShr(b, bits, f8_llvm_i32(emit, 23), ""),
					  f8_llvm_i32(emit, 120), "");
	LLVMValueRef word = LLVMBuildAShr(b, start, f8_llvm_i32(emit, 5), "");
	LLVMValueRef shift = LLVMBuildZExt(b, LLVMBuildAnd(b, start, f8_llvm_i32(emit, 31), ""),
					   emit->i64, "");
	LLVMValueRef mask = f8_llvm_i64(emit, 0xFFFFFFFFu), window[3];
	for (int i = 0; i < 3; i++) {
		LLVMValueRef at = LLVMBuildAdd(b, word, f8_llvm_i32(emit, (uint32_t)i), "");
		LLVMValueRef pair = LLVMBuildShl(b, two_over_pi_pair(emit, at), shift, "");
		window[i] = LLVMBuildLShr(b, pair, f8_llvm_i64(emit, 32), ""); // 32 bits
	}
	// The product's bits 32 .. 95 (weights 2^-62 .. 2^1), its 32-bit columns with carries.
	LLVMValueRef low = LLVMBuildMul(b, significand, window[2], "");
	LLVMValueRef middle = LLVMBuildAdd(b, LLVMBuildMul(b, significand, window[1], ""),
					   LLVMBuildLShr(b, low, f8_llvm_i64(emit, 32), ""), "");
	LLVMValueRef high = LLVMBuildAdd(b, LLVMBuildMul(b, significand, window[0], ""),
					 LLVMBuildLShr(b, middle, f8_llvm_i64(emit, 32), ""), "");
	LLVMValueRef fixed = LLVMBuildOr(b, LLVMBuildShl(b, high, f8_llvm_i64(emit, 32), ""),
					 LLVMBuildAnd(b, middle, mask, ""), "");
	// To the nearest quadrant: the top two bits after adding half of one; the fraction left
	// in [-1/2, 1/2) quadrants, signed.
	fixed = LLVMBuildAdd(b, fixed, f8_llvm_i64(emit, (uint64_t)1 << 61), "");
	LLVMValueRef quadrant = LLVMBuildTrunc(b, LLVMBuildLShr(b, fixed, f8_llvm_i64(emit, 62), ""),
					       emit->i32, "");
	LLVMValueRef fraction = LLVMBuildSub(
		b, LLVMBuildAnd(b, fixed, f8_llvm_i64(emit, ((uint64_t)1 << 62) - 1), ""),
		f8_llvm_i64(emit, (uint64_t)1 << 61), "");
	// fraction = f_hi + f_lo (48 of its bits), then times pi/2 2^-62 as r_hi + r_lo: the
	// scaling by 2^-62 is exact, the products' errors are carried by fma.
	LLVMValueRef f_hi = LLVMBuildSIToFP(b, fraction, emit->f32, "");
	LLVMValueRef rest = LLVMBuildSub(b, fraction, LLVMBuildFPToSI(b, f_hi, emit->i64, ""), "");
	LLVMValueRef f_lo = LLVMBuildSIToFP(b, rest, emit->f32, "");
	LLVMValueRef unit = f8_llvm_f32(emit, 0x1p-62f);
	f_hi = fmul(emit, f_hi, unit);
	f_lo = fmul(emit, f_lo, unit);
	LLVMValueRef pio2_hi = f8_llvm_f32(emit, PIO2_HI);
	LLVMValueRef r_hi = fmul(emit, f_hi, pio2_hi);
	LLVMValueRef error = f8_llvm_fma(emit, f_hi, pio2_hi, LLVMBuildFNeg(b, r_hi, ""));
	LLVMValueRef r_lo = f8_llvm_fma(emit, f_hi, f8_llvm_f32(emit, PIO2_LO),
					f8_llvm_fma(emit, f_lo, pio2_hi, error));
	LLVMValueRef sum = fadd(emit, r_hi, r_lo);
	r_lo = fsub(emit, r_lo, fsub(emit, sum, r_hi));
	LLVMValueRef small = LLVMBuildFCmp(b, LLVMRealOLT, a, f8_llvm_f32(emit, 0x1.921fb6p-1f), "");
	return (reduced){
		.hi = LLVMBuildSelect(b, small, a, sum, ""),
		.lo = LLVMBuildSelect(b, small, f8_llvm_f32(emit, 0.0f), r_lo, ""),
		.quadrant = LLVMBuildSelect(b, small, f8_llvm_i32(emit, 0), quadrant, ""),
	};
}

/*
 * sin x or cos x (`cosine`): |x| reduced to r = hi + lo in quadrant j, then both polynomials of
 * r, sin r = hi + (hi^3 s(hi^2) + lo (1 - hi^2/2)) and cos r = 1 - hi^2/2 + hi^4 c(hi^2) - hi lo
 * (1 - hi^2/2 rounded once, its error added back), and the one the quadrant picks (cos x is
 * sin x in quadrant j + 1), negated in quadrants 2 and 3; sin takes x's sign (sin(-0) = -0).
 * Infinities give NaN.
 */
static LLVMValueRef sin_cos_f32(const f8_llvm_emit *emit, LLVMValueRef x, bool cosine) {
	LLVMBuilderRef b = emit->builder;
	LLVMValueRef a = f8_llvm_fabs(emit, x);
	reduced r = reduce_pio2(emit, a);
	LLVMValueRef one = f8_llvm_f32(emit, 1.0f);
	LLVMValueRef z = fmul(emit, r.hi, r.hi), half_z = fmul(emit, z, f8_llvm_f32(emit, 0.5f));
	LLVMValueRef lo_term = f8_llvm_fma(emit, LLVMBuildFNeg(b, r.lo, ""), half_z, r.lo);
	LLVMValueRef sine = fadd(emit, r.hi, f8_llvm_fma(emit, fmul(emit, r.hi, z),
							 horner(emit, SIN_S, 4, z), lo_term));
	LLVMValueRef w = fsub(emit, one, half_z);
	LLVMValueRef tail = fadd(emit, fsub(emit, fsub(emit, one, w), half_z),
				 f8_llvm_fma(emit, fmul(emit, z, z), horner(emit, COS_C, 4, z),
					     LLVMBuildFNeg(b, fmul(emit, r.hi, r.lo), "")));
	LLVMValueRef cosine_r = fadd(emit, w, tail);
	LLVMValueRef quadrant = cosine ? LLVMBuildAdd(b, r.quadrant, f8_llvm_i32(emit, 1), "")
				       : r.quadrant;
	LLVMValueRef odd = LLVMBuildTrunc(b, quadrant, emit->i1, "");
	LLVMValueRef y = LLVMBuildSelect(b, odd, cosine_r, sine, "");
	// The sign: bit 1 of the quadrant moved to bit 31, and for sin x's own.
	LLVMValueRef sign = LLVMBuildShl(b, LLVMBuildAnd(b, quadrant, f8_llvm_i32(emit, 2), ""),
					 f8_llvm_i32(emit, 30), "");
	if (!cosine)
		sign = LLVMBuildXor(b, sign, LLVMBuildAnd(b, f8_llvm_bits(emit, x),
							  f8_llvm_i32(emit, 0x80000000u), ""), "");
	y = f8_llvm_from_bits(emit, LLVMBuildXor(b, f8_llvm_bits(emit, y), sign, ""));
	LLVMValueRef nan = f8_llvm_from_bits(emit, f8_llvm_i32(emit, 0x7FC00000u));
	y = pick(emit, LLVMRealOEQ, a, f8_llvm_f32(emit, __builtin_inff()), nan, y);
	return keep_nan(emit, x, y);
}

LLVMValueRef f8_llvm_math(const f8_llvm_emit *emit, f8_kir_op op, LLVMValueRef x) {
	switch (op) {
	case F8_KIR_OP_EXP:
		return exp_f32(emit, x);
	case F8_KIR_OP_LOG:
		return log_f32(emit, x);
	case F8_KIR_OP_TANH:
		return tanh_f32(emit, x);
	case F8_KIR_OP_ERF:
		return erf_f32(emit, x);
	case F8_KIR_OP_COS:
		return sin_cos_f32(emit, x, true);
	case F8_KIR_OP_SIN:
		return sin_cos_f32(emit, x, false);
	default:
		assert(0 && "not a math function");
		return NULL;
	}
}
