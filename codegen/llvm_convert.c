/*
 * Element conversions of the LLVM lowering (loads and stores of every buffer dtype, kir.h), and
 * the small emission helpers the lowering's files share (codegen/llvm_internal.h).
 *
 * Loads decode with integer arithmetic on both targets: every value of bf16, f16, e4m3, e5m2
 * and e8m0 is an f32, so there is nothing to round, only bits to move. Stores round: the host
 * runs the same integer encoder as ir/fp8.c (one rounding, at the target's spacing in the
 * input's binade), on the same layouts (ir/fp8.h f8_float_layout_of: the sign bit, the largest
 * finite code, the codes of inf and NaN, none written down here); NVPTX uses the hardware's cvt
 * instructions, which DESIGN.md defines the numerics by: cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32
 * as they are, cvt.rn.{bf16,f16}.f32 with the canonical NaN of f8_float_encode selected. The
 * e8m0 codes are the layout's too, and the rest of e8m0's conversions is f32's exponent field,
 * which e8m0's is. FP8 stores saturate
 * (f8_float_encode(..., true)); bf16 and f16 stores overflow to inf (f8_float_encode(...,
 * false)), as the reference executor's stores (runtime/tensor.c) do.
 */
#include "codegen/llvm_internal.h" // f8_llvm_emit, f8_llvm_load_convert, f8_llvm_store_convert

#include <assert.h>  // assert
#include <stdbool.h> // bool
#include <string.h>  // strlen

#include "ir/dtype.h" // f8_dtype
#include "ir/fp8.h"   // f8_float_layout, f8_float_layout_of

void f8_llvm_emit_types(f8_llvm_emit *emit) {
	LLVMContextRef context = emit->context;
	emit->i1 = LLVMInt1TypeInContext(context);
	emit->i8 = LLVMInt8TypeInContext(context);
	emit->i16 = LLVMInt16TypeInContext(context);
	emit->i32 = LLVMInt32TypeInContext(context);
	emit->i64 = LLVMInt64TypeInContext(context);
	emit->f32 = LLVMFloatTypeInContext(context);
	// NVPTX buffers are in the global address space, so loads and stores become ld/st.global.
	emit->ptr = LLVMPointerTypeInContext(context, emit->target == F8_LLVM_TARGET_NVPTX ? 1 : 0);
}

LLVMValueRef f8_llvm_f32(const f8_llvm_emit *emit, float value) {
	return LLVMConstReal(emit->f32, value);
}

LLVMValueRef f8_llvm_i32(const f8_llvm_emit *emit, uint32_t value) {
	return LLVMConstInt(emit->i32, value, false);
}

LLVMValueRef f8_llvm_i64(const f8_llvm_emit *emit, uint64_t value) {
	return LLVMConstInt(emit->i64, value, false);
}

LLVMValueRef f8_llvm_intrinsic(const f8_llvm_emit *emit, const char *name, LLVMTypeRef *types,
			       unsigned n_types, LLVMValueRef *args, unsigned n_args) {
	unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
	assert(id != 0 && "an intrinsic LLVM 19 has");
	LLVMValueRef function = LLVMGetIntrinsicDeclaration(emit->module, id, types, n_types);
	LLVMTypeRef type = LLVMIntrinsicGetType(emit->context, id, types, n_types);
	return LLVMBuildCall2(emit->builder, type, function, args, n_args, "");
}

LLVMValueRef f8_llvm_fma(const f8_llvm_emit *emit, LLVMValueRef a, LLVMValueRef b,
			 LLVMValueRef c) {
	LLVMTypeRef type = emit->f32;
	LLVMValueRef args[3] = {a, b, c};
	return f8_llvm_intrinsic(emit, "llvm.fma", &type, 1, args, 3);
}

LLVMValueRef f8_llvm_fabs(const f8_llvm_emit *emit, LLVMValueRef x) {
	LLVMTypeRef type = emit->f32;
	return f8_llvm_intrinsic(emit, "llvm.fabs", &type, 1, &x, 1);
}

LLVMValueRef f8_llvm_bits(const f8_llvm_emit *emit, LLVMValueRef x) {
	return LLVMBuildBitCast(emit->builder, x, emit->i32, "");
}

LLVMValueRef f8_llvm_from_bits(const f8_llvm_emit *emit, LLVMValueRef x) {
	return LLVMBuildBitCast(emit->builder, x, emit->f32, "");
}

LLVMTypeRef f8_llvm_storage_type(const f8_llvm_emit *emit, f8_dtype dtype) {
	switch (dtype) {
	case F8_DTYPE_F32:
		return emit->f32;
	case F8_DTYPE_BF16:
	case F8_DTYPE_F16:
		return emit->i16;
	case F8_DTYPE_E4M3:
	case F8_DTYPE_E5M2:
	case F8_DTYPE_E8M0:
	case F8_DTYPE_BOOL:
		return emit->i8;
	case F8_DTYPE_I32:
		return emit->i32;
	case F8_DTYPE_I64:
		return emit->i64;
	default:
		return NULL;
	}
}

/* The layout of a signed small float format (bf16, f16, e4m3, e5m2): ir/fp8.c's. */
static f8_float_layout signed_layout_of(f8_dtype dtype) {
	assert(dtype == F8_DTYPE_BF16 || dtype == F8_DTYPE_F16 || dtype == F8_DTYPE_E4M3 ||
	       dtype == F8_DTYPE_E5M2);
	return f8_float_layout_of(dtype);
}

/*
 * The layout of e8m0, whose exponent field is f32's (8 bits, bias 127): its code is an f32's
 * biased exponent, which its encoder and decoder below move without rebiasing.
 */
static f8_float_layout e8m0_layout(void) {
	f8_float_layout layout = f8_float_layout_of(F8_DTYPE_E8M0);
	assert(layout.exponent_bits == 8 && layout.mantissa_bits == 0 && layout.bias == 127);
	return layout;
}

static LLVMValueRef smax32(const f8_llvm_emit *emit, LLVMValueRef a, LLVMValueRef b) {
	LLVMTypeRef type = emit->i32;
	LLVMValueRef args[2] = {a, b};
	return f8_llvm_intrinsic(emit, "llvm.smax", &type, 1, args, 2);
}

static LLVMValueRef smin32(const f8_llvm_emit *emit, LLVMValueRef a, LLVMValueRef b) {
	LLVMTypeRef type = emit->i32;
	LLVMValueRef args[2] = {a, b};
	return f8_llvm_intrinsic(emit, "llvm.smin", &type, 1, args, 2);
}

/*
 * significand / 2^shift rounded to nearest even (ir/fp8.c's f8_shift_round). `shift` is
 * clamped to 1..25 first: any shift above 24 gives 0 for a significand below 2^24, as there,
 * and the clamp keeps the shifts defined for the inputs (zero, inf, NaN) whose result is
 * selected away or comes out right anyway.
 */
static LLVMValueRef shift_round(const f8_llvm_emit *emit, LLVMValueRef significand,
				LLVMValueRef shift) {
	LLVMBuilderRef b = emit->builder;
	LLVMValueRef one = f8_llvm_i32(emit, 1);
	shift = smax32(emit, smin32(emit, shift, f8_llvm_i32(emit, 25)), one);
	LLVMValueRef kept = LLVMBuildLShr(b, significand, shift, "");
	LLVMValueRef mask = LLVMBuildSub(b, LLVMBuildShl(b, one, shift, ""), one, "");
	LLVMValueRef rest = LLVMBuildAnd(b, significand, mask, "");
	LLVMValueRef half = LLVMBuildShl(b, one, LLVMBuildSub(b, shift, one, ""), "");
	LLVMValueRef above = LLVMBuildICmp(b, LLVMIntUGT, rest, half, "");
	LLVMValueRef tie = LLVMBuildICmp(b, LLVMIntEQ, rest, half, "");
	LLVMValueRef odd = LLVMBuildTrunc(b, kept, emit->i1, "");
	LLVMValueRef up = LLVMBuildOr(b, above, LLVMBuildAnd(b, tie, odd, ""), "");
	return LLVMBuildAdd(b, kept, LLVMBuildZExt(b, up, emit->i32, ""), "");
}

/*
 * f32 -> the code of `format` in an i32, as f8_float_encode(format, x, saturate): the value is
 * rounded once at the format's spacing in the input's binade (the subnormal spacing below the
 * smallest normal). Since codes are (exponent - 1) * 2^mantissa_bits + significand, a rounding
 * that carries into the next binade lands on the right code, and overflow, infinities included
 * (their "binade" is 128), is a code above the largest finite one: one select makes it the
 * largest finite code (saturate) or infinity (a format with one). Zero falls out too (a zero
 * significand rounds to code 0); only NaN needs its own select.
 */
static LLVMValueRef encode_integer(const f8_llvm_emit *emit, const f8_float_layout *format,
				   LLVMValueRef x, bool saturate) {
	LLVMBuilderRef b = emit->builder;
	LLVMValueRef bits = f8_llvm_bits(emit, x);
	LLVMValueRef negative = LLVMBuildICmp(b, LLVMIntSLT, bits, f8_llvm_i32(emit, 0), "");
	LLVMValueRef sign = LLVMBuildSelect(b, negative, f8_llvm_i32(emit, format->sign_bit),
					    f8_llvm_i32(emit, 0), "");
	LLVMValueRef magnitude = LLVMBuildAnd(b, bits, f8_llvm_i32(emit, 0x7FFFFFFFu), "");
	LLVMValueRef biased = LLVMBuildLShr(b, magnitude, f8_llvm_i32(emit, 23), "");
	LLVMValueRef normal = LLVMBuildICmp(b, LLVMIntNE, biased, f8_llvm_i32(emit, 0), "");
	LLVMValueRef fraction = LLVMBuildAnd(b, magnitude, f8_llvm_i32(emit, 0x7FFFFFu), "");
	LLVMValueRef implicit = LLVMBuildOr(b, fraction, f8_llvm_i32(emit, 0x800000u), "");
	LLVMValueRef significand = LLVMBuildSelect(b, normal, implicit, magnitude, "");
	LLVMValueRef exponent = LLVMBuildSelect(
		b, normal, LLVMBuildSub(b, biased, f8_llvm_i32(emit, 150), ""),
		f8_llvm_i32(emit, (uint32_t)-149), "");
	// floor(log2 |x|) = exponent + bit length of the significand - 1
	LLVMTypeRef i32 = emit->i32;
	LLVMValueRef ctlz_args[2] = {significand, LLVMConstInt(emit->i1, 0, false)};
	LLVMValueRef zeros = f8_llvm_intrinsic(emit, "llvm.ctlz", &i32, 1, ctlz_args, 2);
	LLVMValueRef top = LLVMBuildSub(
		b, LLVMBuildAdd(b, exponent, f8_llvm_i32(emit, 31), ""), zeros, "");
	LLVMValueRef binade = smax32(emit, top, f8_llvm_i32(emit, (uint32_t)format->min_exponent));
	LLVMValueRef quantum =
		LLVMBuildSub(b, binade, f8_llvm_i32(emit, (uint32_t)format->mantissa_bits), "");
	LLVMValueRef rounded =
		shift_round(emit, significand, LLVMBuildSub(b, quantum, exponent, ""));
	LLVMValueRef code = LLVMBuildAdd(
		b,
		LLVMBuildShl(b,
			     LLVMBuildSub(b, binade,
					  f8_llvm_i32(emit, (uint32_t)format->min_exponent), ""),
			     f8_llvm_i32(emit, (uint32_t)format->mantissa_bits), ""),
		rounded, "");
	LLVMValueRef max = f8_llvm_i32(emit, format->max_magnitude);
	LLVMValueRef overflow = f8_llvm_i32(
		emit, saturate || !format->has_inf ? format->max_magnitude : format->inf_magnitude);
	code = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntUGT, code, max, ""), overflow, code, "");
	LLVMValueRef result = LLVMBuildOr(b, sign, code, "");
	LLVMValueRef nan =
		LLVMBuildICmp(b, LLVMIntUGT, magnitude, f8_llvm_i32(emit, 0x7F800000u), "");
	return LLVMBuildSelect(b, nan, f8_llvm_i32(emit, format->nan_magnitude), result, "");
}

/* An inline PTX instruction of type i16 (f32 ...) with `n_args` f32 operands. */
static LLVMValueRef ptx_convert(const f8_llvm_emit *emit, const char *text, LLVMValueRef *args,
				unsigned n_args) {
	LLVMTypeRef params[2] = {emit->f32, emit->f32};
	LLVMTypeRef type = LLVMFunctionType(emit->i16, params, n_args, false);
	const char *constraints = n_args == 2 ? "=h,f,f" : "=h,f";
	LLVMValueRef code = LLVMGetInlineAsm(type, text, strlen(text), constraints,
					     strlen(constraints), false, false,
					     LLVMInlineAsmDialectATT, false);
	return LLVMBuildCall2(emit->builder, type, code, args, n_args, "");
}

/*
 * NVPTX f32 -> e4m3 or e5m2: cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 d, a, b puts a's code in the
 * high byte and b's in the low one; a is 0 and only the low byte is kept.
 */
static LLVMValueRef encode_fp8_ptx(const f8_llvm_emit *emit, f8_dtype dtype, LLVMValueRef x) {
	const char *text = dtype == F8_DTYPE_E4M3 ? "cvt.rn.satfinite.e4m3x2.f32 $0, $1, $2;"
						  : "cvt.rn.satfinite.e5m2x2.f32 $0, $1, $2;";
	LLVMValueRef args[2] = {f8_llvm_f32(emit, 0.0f), x};
	return LLVMBuildTrunc(emit->builder, ptx_convert(emit, text, args, 2), emit->i8, "");
}

/*
 * NVPTX f32 -> bf16 or f16: cvt.rn rounds to nearest even (subnormals kept: no .ftz) and
 * overflows to inf, as f8_float_encode(..., false) does (a bf16 activation that overflows is
 * seen, not hidden at the largest finite value); the canonical NaN is selected whatever the
 * input NaN was, as there.
 */
static LLVMValueRef encode_half_ptx(const f8_llvm_emit *emit, f8_dtype dtype, LLVMValueRef x) {
	LLVMBuilderRef b = emit->builder;
	f8_float_layout format = signed_layout_of(dtype);
	const char *text =
		dtype == F8_DTYPE_BF16 ? "cvt.rn.bf16.f32 $0, $1;" : "cvt.rn.f16.f32 $0, $1;";
	LLVMValueRef code = LLVMBuildZExt(b, ptx_convert(emit, text, &x, 1), emit->i32, "");
	LLVMValueRef nan = LLVMBuildFCmp(b, LLVMRealUNO, x, x, "");
	code = LLVMBuildSelect(b, nan, f8_llvm_i32(emit, format.nan_magnitude), code, "");
	return LLVMBuildTrunc(b, code, emit->i16, "");
}

/*
 * f32 -> e8m0 as f8_e8m0_encode(x, F8_ROUND_NEAREST_EVEN), the rounding the reference's stores
 * use: the exponent field, plus one when the mantissa is at least half (a tie goes up: 2^(e+1)
 * is the even neighbour), at most the largest code (0xFE, 2^127); a subnormal rounds to code 1
 * (2^-126) from 1.5 * 2^-127 up, else to code 0 (2^-127), as zero does; +inf is the largest
 * code; NaN and negative values (not -0) are NaN, 0xFF.
 */
static LLVMValueRef encode_e8m0(const f8_llvm_emit *emit, LLVMValueRef x) {
	LLVMBuilderRef b = emit->builder;
	f8_float_layout layout = e8m0_layout();
	LLVMValueRef bits = f8_llvm_bits(emit, x);
	LLVMValueRef magnitude = LLVMBuildAnd(b, bits, f8_llvm_i32(emit, 0x7FFFFFFFu), "");
	LLVMValueRef biased = LLVMBuildLShr(b, magnitude, f8_llvm_i32(emit, 23), "");
	LLVMValueRef fraction = LLVMBuildAnd(b, magnitude, f8_llvm_i32(emit, 0x7FFFFFu), "");
	LLVMValueRef up = LLVMBuildICmp(b, LLVMIntUGE, fraction, f8_llvm_i32(emit, 0x400000u), "");
	LLVMValueRef code = smin32(emit, LLVMBuildAdd(b, biased, LLVMBuildZExt(b, up, emit->i32, ""), ""),
				   f8_llvm_i32(emit, layout.max_magnitude));
	LLVMValueRef subnormal = LLVMBuildICmp(b, LLVMIntEQ, biased, f8_llvm_i32(emit, 0), "");
	LLVMValueRef sub_code = LLVMBuildZExt(
		b, LLVMBuildICmp(b, LLVMIntUGE, magnitude, f8_llvm_i32(emit, 0x600000u), ""),
		emit->i32, "");
	code = LLVMBuildSelect(b, subnormal, sub_code, code, "");
	LLVMValueRef infinite =
		LLVMBuildICmp(b, LLVMIntEQ, magnitude, f8_llvm_i32(emit, 0x7F800000u), "");
	code = LLVMBuildSelect(b, infinite, f8_llvm_i32(emit, layout.max_magnitude), code, "");
	LLVMValueRef nan =
		LLVMBuildICmp(b, LLVMIntUGT, magnitude, f8_llvm_i32(emit, 0x7F800000u), "");
	LLVMValueRef negative = LLVMBuildAnd(
		b, LLVMBuildICmp(b, LLVMIntSLT, bits, f8_llvm_i32(emit, 0), ""),
		LLVMBuildICmp(b, LLVMIntNE, magnitude, f8_llvm_i32(emit, 0), ""), "");
	code = LLVMBuildSelect(b, LLVMBuildOr(b, nan, negative, ""),
			       f8_llvm_i32(emit, layout.nan_magnitude), code, "");
	return LLVMBuildTrunc(b, code, emit->i8, "");
}

LLVMValueRef f8_llvm_store_convert_pair(const f8_llvm_emit *emit, f8_dtype dtype,
					LLVMValueRef low, LLVMValueRef high) {
	assert(emit->target == F8_LLVM_TARGET_NVPTX &&
	       (dtype == F8_DTYPE_E4M3 || dtype == F8_DTYPE_E5M2));
	const char *text = dtype == F8_DTYPE_E4M3 ? "cvt.rn.satfinite.e4m3x2.f32 $0, $1, $2;"
						  : "cvt.rn.satfinite.e5m2x2.f32 $0, $1, $2;";
	LLVMValueRef args[2] = {high, low}; // the first operand's code goes to the high byte
	return ptx_convert(emit, text, args, 2);
}

LLVMValueRef f8_llvm_store_convert(const f8_llvm_emit *emit, f8_dtype dtype, LLVMValueRef value) {
	LLVMBuilderRef b = emit->builder;
	bool nvptx = emit->target == F8_LLVM_TARGET_NVPTX;
	switch (dtype) {
	case F8_DTYPE_F32:
	case F8_DTYPE_I64:
		return value;
	case F8_DTYPE_I32:
		return LLVMBuildTrunc(b, value, emit->i32, "");
	case F8_DTYPE_BOOL:
		return LLVMBuildZExt(b, value, emit->i8, "");
	case F8_DTYPE_E8M0:
		return encode_e8m0(emit, value);
	case F8_DTYPE_E4M3:
	case F8_DTYPE_E5M2:
		if (nvptx)
			return encode_fp8_ptx(emit, dtype, value);
		break;
	case F8_DTYPE_BF16:
	case F8_DTYPE_F16:
		if (nvptx)
			return encode_half_ptx(emit, dtype, value);
		break;
	default:
		assert(0 && "a dtype no buffer may have");
		return NULL;
	}
	f8_float_layout format = signed_layout_of(dtype);
	LLVMTypeRef storage = f8_llvm_storage_type(emit, dtype);
	bool saturate = dtype == F8_DTYPE_E4M3 || dtype == F8_DTYPE_E5M2; // as the reference stores
	return LLVMBuildTrunc(b, encode_integer(emit, &format, value, saturate), storage, "");
}

/*
 * A code of `format` (zero-extended to i32) -> f32: a normal code moves its exponent and
 * mantissa into place; a subnormal one is mantissa * 2^(min_exponent - mantissa_bits), exact
 * in f32 (for bf16, whose exponent range is f32's, the normal formula covers subnormals too);
 * inf and NaN are selected, the NaN as sign | 0x7FC00000 like f8_float_decode's copysignf(NAN).
 */
static LLVMValueRef decode_small_float(const f8_llvm_emit *emit, const f8_float_layout *format,
				       LLVMValueRef code) {
	LLVMBuilderRef b = emit->builder;
	int shift = 23 - format->mantissa_bits;
	LLVMValueRef negative =
		LLVMBuildICmp(b, LLVMIntNE,
			      LLVMBuildAnd(b, code, f8_llvm_i32(emit, format->sign_bit), ""),
			      f8_llvm_i32(emit, 0), "");
	LLVMValueRef sign = LLVMBuildSelect(b, negative, f8_llvm_i32(emit, 0x80000000u),
					    f8_llvm_i32(emit, 0), "");
	LLVMValueRef magnitude = LLVMBuildAnd(b, code, f8_llvm_i32(emit, format->sign_bit - 1), "");
	// (exponent field + 127 - bias) << 23 | mantissa << shift, with one add of the rebias
	LLVMValueRef bits = LLVMBuildAdd(
		b, LLVMBuildShl(b, magnitude, f8_llvm_i32(emit, (uint32_t)shift), ""),
		f8_llvm_i32(emit, (uint32_t)(127 - format->bias) << 23), "");
	if (format->bias != 127) {
		LLVMValueRef exponent_field = LLVMBuildLShr(
			b, magnitude, f8_llvm_i32(emit, (uint32_t)format->mantissa_bits), "");
		LLVMValueRef subnormal =
			LLVMBuildICmp(b, LLVMIntEQ, exponent_field, f8_llvm_i32(emit, 0), "");
		float quantum = 1.0f;
		for (int e = format->min_exponent - format->mantissa_bits; e < 0; e++)
			quantum *= 0.5f; // exact: the formats' quanta are normal f32s
		LLVMValueRef value = LLVMBuildUIToFP(b, magnitude, emit->f32, "");
		value = LLVMBuildFMul(b, value, f8_llvm_f32(emit, quantum), "");
		bits = LLVMBuildSelect(b, subnormal, f8_llvm_bits(emit, value), bits, "");
	}
	LLVMValueRef special = LLVMBuildICmp(b, LLVMIntUGT, magnitude,
					     f8_llvm_i32(emit, format->max_magnitude), "");
	LLVMValueRef special_bits = f8_llvm_i32(emit, 0x7FC00000u);
	if (format->has_inf) {
		LLVMValueRef infinite = LLVMBuildICmp(b, LLVMIntEQ, magnitude,
						      f8_llvm_i32(emit, format->inf_magnitude), "");
		special_bits = LLVMBuildSelect(b, infinite, f8_llvm_i32(emit, 0x7F800000u),
					       special_bits, "");
	}
	bits = LLVMBuildSelect(b, special, special_bits, bits, "");
	return f8_llvm_from_bits(emit, LLVMBuildOr(b, sign, bits, ""));
}

/* e8m0 -> f32: code c is 2^(c - 127); code 0 is 2^-127, an f32 subnormal; 0xFF is NaN. */
static LLVMValueRef decode_e8m0(const f8_llvm_emit *emit, LLVMValueRef code) {
	LLVMBuilderRef b = emit->builder;
	f8_float_layout layout = e8m0_layout();
	LLVMValueRef bits = LLVMBuildShl(b, code, f8_llvm_i32(emit, 23), "");
	LLVMValueRef zero = LLVMBuildICmp(b, LLVMIntEQ, code, f8_llvm_i32(emit, 0), "");
	bits = LLVMBuildSelect(b, zero, f8_llvm_i32(emit, 0x00400000u), bits, "");
	LLVMValueRef nan =
		LLVMBuildICmp(b, LLVMIntEQ, code, f8_llvm_i32(emit, layout.nan_magnitude), "");
	bits = LLVMBuildSelect(b, nan, f8_llvm_i32(emit, 0x7FC00000u), bits, "");
	return f8_llvm_from_bits(emit, bits);
}

LLVMValueRef f8_llvm_load_convert(const f8_llvm_emit *emit, f8_dtype dtype, LLVMValueRef stored) {
	LLVMBuilderRef b = emit->builder;
	switch (dtype) {
	case F8_DTYPE_F32:
	case F8_DTYPE_I64:
		return stored;
	case F8_DTYPE_I32:
		return LLVMBuildSExt(b, stored, emit->i64, "");
	case F8_DTYPE_BOOL:
		return LLVMBuildICmp(b, LLVMIntNE, stored, LLVMConstInt(emit->i8, 0, false), "");
	case F8_DTYPE_E8M0:
		return decode_e8m0(emit, LLVMBuildZExt(b, stored, emit->i32, ""));
	case F8_DTYPE_BF16:
	case F8_DTYPE_F16:
	case F8_DTYPE_E4M3:
	case F8_DTYPE_E5M2: {
		f8_float_layout format = signed_layout_of(dtype);
		return decode_small_float(emit, &format, LLVMBuildZExt(b, stored, emit->i32, ""));
	}
	default:
		assert(0 && "a dtype no buffer may have");
		return NULL;
	}
}
