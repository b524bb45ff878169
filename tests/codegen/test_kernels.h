/*
 * The kernels test_llvm_lower compiles for both targets: what each computes, its parameters
 * in order (the order of the arguments a call passes), and the tables the checks share.
 */
#ifndef F8_TESTS_CODEGEN_TEST_KERNELS_H
#define F8_TESTS_CODEGEN_TEST_KERNELS_H

#include "codegen/kir.h" // f8_kernel, f8_kir_op
#include "ir/dtype.h"    // f8_dtype

/* The float formats of loads and stores besides f32, with their names. */
enum { N_FORMATS = 5 };
extern const f8_dtype float_formats[N_FORMATS];
extern const char *const format_names[N_FORMATS];

/* The math functions of the math kernel, with their names. */
enum { N_MATH = 6 };
extern const f8_kir_op math_ops[N_MATH];
extern const char *const math_names[N_MATH];

/* How many outputs of each register type the mixed kernel has. */
enum { N_MIXED_I64 = 10, N_MIXED_F32 = 3, N_MIXED_BOOL = 3 };

/* Each returns a new verified kernel (f8_kir_destroy), or NULL with the failure printed. */

/* cast NAME(in x: f32, out y: FORMAT, in scale: f32, out scale_inv: f32, acc amax: f32,
 * size rows, size cols): kir.h's example, y = x * scale per element, the amax of x, and
 * 1 / scale stored once at the end. */
f8_kernel *build_cast(const char *name, f8_dtype format);

/* loads(in a_FORMAT... (N_FORMATS), in w: i32, in flag: bool, out y_FORMAT: f32...,
 * out wide: i64, out flag_wide: i64, size n): every element loaded to its register type and
 * stored as f32 or i64. */
f8_kernel *build_loads(void);

/* stores(in x: f32, in w: i64, out y_FORMAT... (N_FORMATS), out narrow: i32, out copy: i64,
 * out negative: bool, size n): x stored to every float format, w to i32 and i64, x < 0. */
f8_kernel *build_stores(void);

/* softmax(in x, out y, out row_max, out row_sum: f32, acc max, acc sum: f32, size rows,
 * size cols): three block loops per row (max, sum of exp.term, the normalized store by exp),
 * row stores,
 * grid accumulators of the row max and sum with their atomics. */
f8_kernel *build_softmax(void);

/* grid_stats(in x: f32, acc sum, acc amax: f32, acc positives, acc last: i64, size n): one
 * element per grid iteration; the sum, the amax, the count of positives and the last
 * positive index (-1 if none) as grid accumulators and epilogue atomics. */
f8_kernel *build_grid_stats(void);

/* math(in x: f32, out exp, out log, out tanh, out erf, out cos, out sin: f32, size n). */
f8_kernel *build_math(void);

/* arith(in a, in b, in c, out muladd, out sqrtdiv, out floor, out max, out min: f32, size n):
 * a * b + c as a separate mul and add, sqrt(a) / b, floor(a), max and min of a and b. */
f8_kernel *build_arith(void);

/* mixed(in u, in v: i64, in a, in b: f32, out q0..q9: i64, out f0..f2: f32, out p0..p2: bool,
 * size n): integer division, remainder, shifts by v % 128, to_i64(a), bits(a), max, min,
 * abs(neg u), a select; fma(a, b, a), to_f32(u), from_bits(u); is_nan(a), is_finite(a),
 * a != b or not u == v. */
f8_kernel *build_mixed(void);

/* refused(in x: f32, OUT, size n): a grid loop summing x, whose result the top level uses as
 * `how` says: 0 a store (out: f32), 1 an atomic max (acc: f32) of the add's result, 2 an
 * atomic add into an acc buffer of bf16. Each must be refused by the lowering. */
f8_kernel *build_refused(int how);

#endif
