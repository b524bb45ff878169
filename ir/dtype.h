/*
 * Element types of f8c: the one table of their facts (storage size, name, bit layout, range),
 * from which the enum, the name lookup and every range check are generated.
 *
 * The floating-point rows carry the exact layout (exponent bits, mantissa bits, bias) and the
 * special-value conventions, because the FP8 numerics are derived from them, in one place
 * (ir/fp8.h f8_float_layout_of) for both ir/fp8.c and the kernels codegen/ generates:
 *   E4M3 is the FN variant (no infinities, max 448, NaN = S.1111.111),
 *   E5M2 is IEEE-like (max 57344, infinities, NaN),
 *   E8M0 is the OCP MX scale type (no sign, no zero, 2^-127 .. 2^127, 0xFF = NaN).
 */
#ifndef F8_IR_DTYPE_H
#define F8_IR_DTYPE_H

#include <assert.h>  // static_assert
#include <stdbool.h> // bool
#include <stddef.h>  // size_t

typedef enum f8_dtype_kind {
	F8_DTYPE_KIND_NONE,  // the undefined type of a value whose type is not inferred yet
	F8_DTYPE_KIND_FLOAT, // sign (unless E8M0), exponent, mantissa
	F8_DTYPE_KIND_INT,   // two's complement
	F8_DTYPE_KIND_UINT,
	F8_DTYPE_KIND_BOOL,
	F8_DTYPE_KIND_COUNT
} f8_dtype_kind;

/*
 * X(ENUM, name, bytes, kind, exponent bits, mantissa bits, bias, has_inf, has_nan, max finite)
 * `max` is the largest finite value (floats) or the largest value (integers); the smallest
 * integer follows from the kind. Sub-byte types are not in the table: nothing in f8c uses them.
 */
#define F8_DTYPE_LIST(X)                                                         \
	X(UNDEFINED, "?", 0, NONE, 0, 0, 0, false, false, 0.0)                   \
	X(F64, "f64", 8, FLOAT, 11, 52, 1023, true, true, 1.7976931348623157e308) \
	X(F32, "f32", 4, FLOAT, 8, 23, 127, true, true, 3.4028234663852886e38)    \
	X(BF16, "bf16", 2, FLOAT, 8, 7, 127, true, true, 3.3895313892515355e38)   \
	X(F16, "f16", 2, FLOAT, 5, 10, 15, true, true, 65504.0)                   \
	X(E4M3, "e4m3", 1, FLOAT, 4, 3, 7, false, true, 448.0)                    \
	X(E5M2, "e5m2", 1, FLOAT, 5, 2, 15, true, true, 57344.0)                  \
	X(E8M0, "e8m0", 1, FLOAT, 8, 0, 127, false, true, 1.7014118346046923e38)  \
	X(I64, "i64", 8, INT, 0, 0, 0, false, false, 9.2233720368547758e18)       \
	X(I32, "i32", 4, INT, 0, 0, 0, false, false, 2147483647.0)                \
	X(I8, "i8", 1, INT, 0, 0, 0, false, false, 127.0)                         \
	X(U8, "u8", 1, UINT, 0, 0, 0, false, false, 255.0)                        \
	X(BOOL, "bool", 1, BOOL, 0, 0, 0, false, false, 1.0)

typedef enum f8_dtype {
#define F8_DTYPE_ENUM(e, ...) F8_DTYPE_##e,
	F8_DTYPE_LIST(F8_DTYPE_ENUM)
#undef F8_DTYPE_ENUM
	F8_DTYPE_COUNT
} f8_dtype;

/* The facts of one dtype; one row of F8_DTYPE_LIST. */
typedef struct f8_dtype_info {
	const char *name;     // as in the text IR: "e4m3"
	size_t bytes;         // storage size of one element
	f8_dtype_kind kind;
	int exponent_bits;    // floats only
	int mantissa_bits;    // floats only: stored fraction bits
	int bias;             // floats only: exponent bias
	bool has_inf;
	bool has_nan;
	double max;           // largest finite value (floats), largest value (integers)
} f8_dtype_info;

/* The row of `dtype`; `dtype` must be < F8_DTYPE_COUNT. */
const f8_dtype_info *f8_dtype_get_info(f8_dtype dtype);

/* The name of `dtype` ("bf16"), or "?" when it is out of range. */
const char *f8_dtype_name(f8_dtype dtype);

/*
 * Looks up a dtype by its text name, `len` bytes at `name` (no terminator needed).
 * Returns true and sets *out when found; the undefined type "?" is not found by name.
 */
bool f8_dtype_from_name(const char *name, size_t len, f8_dtype *out);

static inline bool f8_dtype_is_float(f8_dtype dtype) {
	return f8_dtype_get_info(dtype)->kind == F8_DTYPE_KIND_FLOAT;
}

/* E4M3 and E5M2: the two element formats of FP8 GEMM operands (E8M0 is a scale type). */
static inline bool f8_dtype_is_fp8(f8_dtype dtype) {
	return dtype == F8_DTYPE_E4M3 || dtype == F8_DTYPE_E5M2;
}

static inline bool f8_dtype_is_integer(f8_dtype dtype) {
	f8_dtype_kind kind = f8_dtype_get_info(dtype)->kind;
	return kind == F8_DTYPE_KIND_INT || kind == F8_DTYPE_KIND_UINT;
}

#endif
