/*
 * The kernels of test_llvm_lower (test_kernels.h), built with kir.h's builder. Each build
 * function says the kernel's signature in kir.h's text form; the checks in test_llvm_lower.c
 * pass their arguments in that order.
 */
#include "tests/codegen/test_kernels.h" // build_cast, float_formats, N_FORMATS

#include <stdio.h> // snprintf, printf

#define NONE F8_KIR_NONE

typedef struct builder {
	f8_kernel *k;
	f8_diag diag;
	f8_status status;
} builder;

static uint32_t param(builder *b, const char *name, f8_kernel_param_kind kind, f8_dtype dtype) {
	uint32_t index = 0;
	if (!b->status)
		b->status = f8_kir_add_param(b->k, name, kind, dtype, &index, &b->diag);
	return index;
}

#define OP1(b, op, x) f8_kir_emit((b)->k, F8_KIR_OP_##op, (x), NONE, NONE)
#define OP2(b, op, x, y) f8_kir_emit((b)->k, F8_KIR_OP_##op, (x), (y), NONE)
#define OP3(b, op, x, y, z) f8_kir_emit((b)->k, F8_KIR_OP_##op, (x), (y), (z))

static f8_kir_id begin_grid(builder *b, f8_kir_id extent) {
	f8_kir_id var = NONE;
	if (!b->status)
		b->status = f8_kir_begin_grid_loop(b->k, extent, &var, &b->diag);
	return var;
}

static f8_kir_id begin_block(builder *b, f8_kir_id extent) {
	f8_kir_id var = NONE;
	if (!b->status)
		b->status = f8_kir_begin_block_loop(b->k, extent, &var, &b->diag);
	return var;
}

static f8_kir_id accumulator(builder *b, f8_kir_combine combine, f8_kir_type type) {
	f8_kir_id result = NONE;
	if (!b->status)
		b->status = f8_kir_add_accumulator(b->k, combine, type, &result, &b->diag);
	return result;
}

static void end_loop(builder *b, const f8_kir_id *values, uint32_t n) {
	if (!b->status)
		b->status = f8_kir_end_loop(b->k, values, n, &b->diag);
}

static void store(builder *b, uint32_t buffer, f8_kir_id index, f8_kir_id value) {
	if (!b->status)
		b->status = f8_kir_store(b->k, buffer, index, value, &b->diag);
}

static void atomic(builder *b, f8_kir_combine combine, uint32_t buffer, f8_kir_id index,
		   f8_kir_id value) {
	if (!b->status)
		b->status = f8_kir_atomic(b->k, combine, buffer, index, value, &b->diag);
}

/* The grid loop's trip count for launchers: the size parameter `size`. */
static void grid_size(builder *b, uint32_t size) {
	b->k->grid_sizes[0] = size;
	b->k->n_grid_sizes = 1;
}

/* The finished kernel (verified), or NULL with the failure printed. */
static f8_kernel *finish(builder *b) {
	if (!b->status && f8_kir_error(b->k))
		b->status = f8_diag_set(&b->diag, F8_ERR_INVALID, "%s", f8_kir_error(b->k));
	if (!b->status)
		b->status = f8_kir_verify(b->k, &b->diag);
	if (b->status) {
		printf("building %s: ", b->k->name);
		f8_diag_print(&b->diag, stdout);
		f8_kir_destroy(b->k);
		return NULL;
	}
	return b->k;
}

static builder start(const char *name) {
	builder b = {.k = f8_kir_create(name)};
	f8_diag_clear(&b.diag);
	return b;
}

/* kernel NAME(in x: f32, out y: FORMAT, in scale: f32, out scale_inv: f32, acc amax: f32,
 * size rows, size cols): kir.h's example with the scale's inverse stored once at the end. */
f8_kernel *build_cast(const char *name, f8_dtype format) {
	builder b = start(name);
	uint32_t x = param(&b, "x", F8_KERNEL_PARAM_IN, F8_DTYPE_F32);
	uint32_t y = param(&b, "y", F8_KERNEL_PARAM_OUT, format);
	uint32_t scale = param(&b, "scale", F8_KERNEL_PARAM_IN, F8_DTYPE_F32);
	uint32_t scale_inv = param(&b, "scale_inv", F8_KERNEL_PARAM_OUT, F8_DTYPE_F32);
	uint32_t amax = param(&b, "amax", F8_KERNEL_PARAM_ACCUMULATE, F8_DTYPE_F32);
	uint32_t rows = param(&b, "rows", F8_KERNEL_PARAM_SIZE, F8_DTYPE_I64);
	uint32_t cols = param(&b, "cols", F8_KERNEL_PARAM_SIZE, F8_DTYPE_I64);
	f8_kir_id n_rows = f8_kir_size(b.k, rows), n_cols = f8_kir_size(b.k, cols);
	f8_kir_id zero = f8_kir_const_i64(b.k, 0);
	f8_kir_id s0 = f8_kir_load(b.k, scale, zero);
	f8_kir_id r = begin_grid(&b, n_rows);
	f8_kir_id kernel_max = accumulator(&b, F8_KIR_COMBINE_MAX, F8_KIR_TYPE_F32);
	f8_kir_id s = f8_kir_load(b.k, scale, zero);
	f8_kir_id c = begin_block(&b, n_cols);
	f8_kir_id row_max = accumulator(&b, F8_KIR_COMBINE_MAX, F8_KIR_TYPE_F32);
	f8_kir_id i = OP2(&b, ADD, OP2(&b, MUL, r, n_cols), c);
	f8_kir_id xv = f8_kir_load(b.k, x, i);
	store(&b, y, i, OP2(&b, MUL, xv, s));
	f8_kir_id a = OP1(&b, ABS, xv);
	end_loop(&b, &a, 1);
	end_loop(&b, &row_max, 1);
	atomic(&b, F8_KIR_COMBINE_MAX, amax, zero, kernel_max);
	store(&b, scale_inv, zero, OP2(&b, DIV, f8_kir_const_f32(b.k, 1.0), s0));
	grid_size(&b, rows);
	return finish(&b);
}

const f8_dtype float_formats[N_FORMATS] = {F8_DTYPE_BF16, F8_DTYPE_F16, F8_DTYPE_E4M3,
					  F8_DTYPE_E5M2, F8_DTYPE_E8M0};
const char *const format_names[N_FORMATS] = {"bf16", "f16", "e4m3", "e5m2", "e8m0"};

/* kernel loads(in a_FORMAT..., in w: i32, in flag: bool, out y_FORMAT: f32..., out wide: i64,
 * out flag_wide: i64, size n): each element loaded and stored as its register type. */
f8_kernel *build_loads(void) {
	builder b = start("loads");
	uint32_t in[N_FORMATS], out[N_FORMATS];
	char name[32];
	for (int f = 0; f < N_FORMATS; f++) {
		snprintf(name, sizeof name, "a_%s", format_names[f]);
		in[f] = param(&b, name, F8_KERNEL_PARAM_IN, float_formats[f]);
	}
	uint32_t w = param(&b, "w", F8_KERNEL_PARAM_IN, F8_DTYPE_I32);
	uint32_t flag = param(&b, "flag", F8_KERNEL_PARAM_IN, F8_DTYPE_BOOL);
	for (int f = 0; f < N_FORMATS; f++) {
		snprintf(name, sizeof name, "y_%s", format_names[f]);
		out[f] = param(&b, name, F8_KERNEL_PARAM_OUT, F8_DTYPE_F32);
	}
	uint32_t wide = param(&b, "wide", F8_KERNEL_PARAM_OUT, F8_DTYPE_I64);
	uint32_t flag_wide = param(&b, "flag_wide", F8_KERNEL_PARAM_OUT, F8_DTYPE_I64);
	uint32_t n = param(&b, "n", F8_KERNEL_PARAM_SIZE, F8_DTYPE_I64);
	f8_kir_id i = begin_grid(&b, f8_kir_size(b.k, n));
	for (int f = 0; f < N_FORMATS; f++)
		store(&b, out[f], i, f8_kir_load(b.k, in[f], i));
	store(&b, wide, i, f8_kir_load(b.k, w, i));
	store(&b, flag_wide, i, OP1(&b, TO_I64, f8_kir_load(b.k, flag, i)));
	end_loop(&b, NULL, 0);
	grid_size(&b, n);
	return finish(&b);
}

/* kernel stores(in x: f32, in w: i64, out y_FORMAT..., out narrow: i32, out copy: i64,
 * out negative: bool, size n). */
f8_kernel *build_stores(void) {
	builder b = start("stores");
	uint32_t x = param(&b, "x", F8_KERNEL_PARAM_IN, F8_DTYPE_F32);
	uint32_t w = param(&b, "w", F8_KERNEL_PARAM_IN, F8_DTYPE_I64);
	uint32_t out[N_FORMATS];
	char name[32];
	for (int f = 0; f < N_FORMATS; f++) {
		snprintf(name, sizeof name, "y_%s", format_names[f]);
		out[f] = param(&b, name, F8_KERNEL_PARAM_OUT, float_formats[f]);
	}
	uint32_t narrow = param(&b, "narrow", F8_KERNEL_PARAM_OUT, F8_DTYPE_I32);
	uint32_t copy = param(&b, "copy", F8_KERNEL_PARAM_OUT, F8_DTYPE_I64);
	uint32_t negative = param(&b, "negative", F8_KERNEL_PARAM_OUT, F8_DTYPE_BOOL);
	uint32_t n = param(&b, "n", F8_KERNEL_PARAM_SIZE, F8_DTYPE_I64);
	f8_kir_id zero = f8_kir_const_f32(b.k, 0.0);
	f8_kir_id i = begin_grid(&b, f8_kir_size(b.k, n));
	f8_kir_id xv = f8_kir_load(b.k, x, i), wv = f8_kir_load(b.k, w, i);
	for (int f = 0; f < N_FORMATS; f++)
		store(&b, out[f], i, xv);
	store(&b, narrow, i, wv);
	store(&b, copy, i, wv);
	store(&b, negative, i, OP2(&b, LT, xv, zero));
	end_loop(&b, NULL, 0);
	grid_size(&b, n);
	return finish(&b);
}

/* kernel softmax(in x, out y, out row_max, out row_sum: f32, acc max, acc sum: f32, size rows,
 * size cols): three block loops per row, row-level stores, grid accumulators and atomics. */
f8_kernel *build_softmax(void) {
	builder b = start("softmax");
	uint32_t x = param(&b, "x", F8_KERNEL_PARAM_IN, F8_DTYPE_F32);
	uint32_t y = param(&b, "y", F8_KERNEL_PARAM_OUT, F8_DTYPE_F32);
	uint32_t row_max = param(&b, "row_max", F8_KERNEL_PARAM_OUT, F8_DTYPE_F32);
	uint32_t row_sum = param(&b, "row_sum", F8_KERNEL_PARAM_OUT, F8_DTYPE_F32);
	uint32_t max = param(&b, "max", F8_KERNEL_PARAM_ACCUMULATE, F8_DTYPE_F32);
	uint32_t sum = param(&b, "sum", F8_KERNEL_PARAM_ACCUMULATE, F8_DTYPE_F32);
	uint32_t rows = param(&b, "rows", F8_KERNEL_PARAM_SIZE, F8_DTYPE_I64);
	uint32_t cols = param(&b, "cols", F8_KERNEL_PARAM_SIZE, F8_DTYPE_I64);
	f8_kir_id n_rows = f8_kir_size(b.k, rows), n_cols = f8_kir_size(b.k, cols);
	f8_kir_id r = begin_grid(&b, n_rows);
	f8_kir_id kernel_max = accumulator(&b, F8_KIR_COMBINE_MAX, F8_KIR_TYPE_F32);
	f8_kir_id kernel_sum = accumulator(&b, F8_KIR_COMBINE_ADD, F8_KIR_TYPE_F32);
	f8_kir_id base = OP2(&b, MUL, r, n_cols);
	f8_kir_id c = begin_block(&b, n_cols);
	f8_kir_id m = accumulator(&b, F8_KIR_COMBINE_MAX, F8_KIR_TYPE_F32);
	f8_kir_id xv = f8_kir_load(b.k, x, OP2(&b, ADD, base, c));
	end_loop(&b, &xv, 1);
	c = begin_block(&b, n_cols);
	f8_kir_id s = accumulator(&b, F8_KIR_COMBINE_ADD, F8_KIR_TYPE_F32);
	f8_kir_id xc = f8_kir_load(b.k, x, OP2(&b, ADD, base, c));
	f8_kir_id e = OP1(&b, EXP_TERM, OP2(&b, SUB, xc, m));
	end_loop(&b, &e, 1);
	c = begin_block(&b, n_cols);
	f8_kir_id i = OP2(&b, ADD, base, c);
	e = OP1(&b, EXP, OP2(&b, SUB, f8_kir_load(b.k, x, i), m));
	store(&b, y, i, OP2(&b, DIV, e, s));
	end_loop(&b, NULL, 0);
	store(&b, row_max, r, m);
	store(&b, row_sum, r, s);
	f8_kir_id values[2] = {m, s};
	end_loop(&b, values, 2);
	f8_kir_id zero = f8_kir_const_i64(b.k, 0);
	atomic(&b, F8_KIR_COMBINE_MAX, max, zero, kernel_max);
	atomic(&b, F8_KIR_COMBINE_ADD, sum, zero, kernel_sum);
	grid_size(&b, rows);
	return finish(&b);
}

/* kernel grid_stats(in x: f32, acc sum, acc amax: f32, acc positives, acc last: i64, size n):
 * one element per grid iteration, four grid accumulators, four epilogue atomics. */
f8_kernel *build_grid_stats(void) {
	builder b = start("grid_stats");
	uint32_t x = param(&b, "x", F8_KERNEL_PARAM_IN, F8_DTYPE_F32);
	uint32_t sum = param(&b, "sum", F8_KERNEL_PARAM_ACCUMULATE, F8_DTYPE_F32);
	uint32_t amax = param(&b, "amax", F8_KERNEL_PARAM_ACCUMULATE, F8_DTYPE_F32);
	uint32_t positives = param(&b, "positives", F8_KERNEL_PARAM_ACCUMULATE, F8_DTYPE_I64);
	uint32_t last = param(&b, "last", F8_KERNEL_PARAM_ACCUMULATE, F8_DTYPE_I64);
	uint32_t n = param(&b, "n", F8_KERNEL_PARAM_SIZE, F8_DTYPE_I64);
	f8_kir_id zero = f8_kir_const_f32(b.k, 0.0), minus_one = f8_kir_const_i64(b.k, -1);
	f8_kir_id i = begin_grid(&b, f8_kir_size(b.k, n));
	f8_kir_id results[4];
	results[0] = accumulator(&b, F8_KIR_COMBINE_ADD, F8_KIR_TYPE_F32);
	results[1] = accumulator(&b, F8_KIR_COMBINE_MAX, F8_KIR_TYPE_F32);
	results[2] = accumulator(&b, F8_KIR_COMBINE_ADD, F8_KIR_TYPE_I64);
	results[3] = accumulator(&b, F8_KIR_COMBINE_MAX, F8_KIR_TYPE_I64);
	f8_kir_id xv = f8_kir_load(b.k, x, i);
	f8_kir_id positive = OP2(&b, LT, zero, xv);
	f8_kir_id values[4] = {xv, OP1(&b, ABS, xv), OP1(&b, TO_I64, positive),
			       OP3(&b, SELECT, positive, i, minus_one)};
	end_loop(&b, values, 4);
	f8_kir_id at = f8_kir_const_i64(b.k, 0);
	atomic(&b, F8_KIR_COMBINE_ADD, sum, at, results[0]);
	atomic(&b, F8_KIR_COMBINE_MAX, amax, at, results[1]);
	atomic(&b, F8_KIR_COMBINE_ADD, positives, at, results[2]);
	atomic(&b, F8_KIR_COMBINE_MAX, last, at, results[3]);
	grid_size(&b, n);
	return finish(&b);
}

const f8_kir_op math_ops[N_MATH] = {F8_KIR_OP_EXP, F8_KIR_OP_LOG, F8_KIR_OP_TANH,
				    F8_KIR_OP_ERF, F8_KIR_OP_COS, F8_KIR_OP_SIN};
const char *const math_names[N_MATH] = {"exp", "log", "tanh", "erf", "cos", "sin"};

/* kernel math(in x: f32, out exp, out log, out tanh, out erf, out cos, out sin: f32,
 * size n). */
f8_kernel *build_math(void) {
	builder b = start("math");
	uint32_t x = param(&b, "x", F8_KERNEL_PARAM_IN, F8_DTYPE_F32);
	uint32_t out[N_MATH];
	for (int m = 0; m < N_MATH; m++)
		out[m] = param(&b, math_names[m], F8_KERNEL_PARAM_OUT, F8_DTYPE_F32);
	uint32_t n = param(&b, "n", F8_KERNEL_PARAM_SIZE, F8_DTYPE_I64);
	f8_kir_id i = begin_grid(&b, f8_kir_size(b.k, n));
	f8_kir_id xv = f8_kir_load(b.k, x, i);
	for (int m = 0; m < N_MATH; m++)
		store(&b, out[m], i, f8_kir_emit(b.k, math_ops[m], xv, NONE, NONE));
	end_loop(&b, NULL, 0);
	grid_size(&b, n);
	return finish(&b);
}

/* kernel arith(in a, in b, in c, out muladd, out sqrtdiv, out floor, out max, out min: f32,
 * size n): a separate mul and add (never an fma), sqrt and division (correctly rounded). */
f8_kernel *build_arith(void) {
	builder b = start("arith");
	uint32_t in[3], out[5];
	const char *in_names[3] = {"a", "b", "c"};
	const char *out_names[5] = {"muladd", "sqrtdiv", "floor", "max", "min"};
	for (int p = 0; p < 3; p++)
		in[p] = param(&b, in_names[p], F8_KERNEL_PARAM_IN, F8_DTYPE_F32);
	for (int p = 0; p < 5; p++)
		out[p] = param(&b, out_names[p], F8_KERNEL_PARAM_OUT, F8_DTYPE_F32);
	uint32_t n = param(&b, "n", F8_KERNEL_PARAM_SIZE, F8_DTYPE_I64);
	f8_kir_id i = begin_grid(&b, f8_kir_size(b.k, n));
	f8_kir_id a = f8_kir_load(b.k, in[0], i), bv = f8_kir_load(b.k, in[1], i);
	f8_kir_id c = f8_kir_load(b.k, in[2], i);
	store(&b, out[0], i, OP2(&b, ADD, OP2(&b, MUL, a, bv), c));
	store(&b, out[1], i, OP2(&b, DIV, OP1(&b, SQRT, a), bv));
	store(&b, out[2], i, OP1(&b, FLOOR, a));
	store(&b, out[3], i, OP2(&b, MAX, a, bv));
	store(&b, out[4], i, OP2(&b, MIN, a, bv));
	end_loop(&b, NULL, 0);
	grid_size(&b, n);
	return finish(&b);
}

/* kernel mixed(in u, in v: i64, in a, in b: f32, out q..: i64, out f..: f32, out p..: bool,
 * size n): integer arithmetic, shifts, conversions, bit moves, fma, predicates. */
f8_kernel *build_mixed(void) {
	builder b = start("mixed");
	uint32_t u = param(&b, "u", F8_KERNEL_PARAM_IN, F8_DTYPE_I64);
	uint32_t v = param(&b, "v", F8_KERNEL_PARAM_IN, F8_DTYPE_I64);
	uint32_t a = param(&b, "a", F8_KERNEL_PARAM_IN, F8_DTYPE_F32);
	uint32_t bb = param(&b, "b", F8_KERNEL_PARAM_IN, F8_DTYPE_F32);
	uint32_t q[N_MIXED_I64], f[N_MIXED_F32], p[N_MIXED_BOOL];
	char name[16];
	for (int k = 0; k < N_MIXED_I64; k++) {
		snprintf(name, sizeof name, "q%d", k);
		q[k] = param(&b, name, F8_KERNEL_PARAM_OUT, F8_DTYPE_I64);
	}
	for (int k = 0; k < N_MIXED_F32; k++) {
		snprintf(name, sizeof name, "f%d", k);
		f[k] = param(&b, name, F8_KERNEL_PARAM_OUT, F8_DTYPE_F32);
	}
	for (int k = 0; k < N_MIXED_BOOL; k++) {
		snprintf(name, sizeof name, "p%d", k);
		p[k] = param(&b, name, F8_KERNEL_PARAM_OUT, F8_DTYPE_BOOL);
	}
	uint32_t n = param(&b, "n", F8_KERNEL_PARAM_SIZE, F8_DTYPE_I64);
	f8_kir_id i = begin_grid(&b, f8_kir_size(b.k, n));
	f8_kir_id uv = f8_kir_load(b.k, u, i), vv = f8_kir_load(b.k, v, i);
	f8_kir_id av = f8_kir_load(b.k, a, i), bv = f8_kir_load(b.k, bb, i);
	f8_kir_id amount = OP2(&b, REM, vv, f8_kir_const_i64(b.k, 128));
	f8_kir_id ints[N_MIXED_I64] = {
		OP2(&b, DIV, uv, vv), OP2(&b, REM, uv, vv), OP2(&b, SHL, uv, amount),
		OP2(&b, SHR, uv, amount), OP1(&b, TO_I64, av), OP1(&b, BITS, av),
		OP2(&b, MAX, uv, vv), OP2(&b, MIN, uv, vv), OP1(&b, ABS, OP1(&b, NEG, uv)),
		OP3(&b, SELECT, OP2(&b, LE, uv, vv), OP2(&b, SUB, uv, vv), OP2(&b, MUL, uv, vv)),
	};
	f8_kir_id floats[N_MIXED_F32] = {OP3(&b, FMA, av, bv, av), OP1(&b, TO_F32, uv),
					 OP1(&b, FROM_BITS, uv)};
	f8_kir_id flags[N_MIXED_BOOL] = {
		OP1(&b, IS_NAN, av), OP1(&b, IS_FINITE, av),
		OP2(&b, OR, OP2(&b, NE, av, bv), OP1(&b, NOT, OP2(&b, EQ, uv, vv))),
	};
	for (int k = 0; k < N_MIXED_I64; k++)
		store(&b, q[k], i, ints[k]);
	for (int k = 0; k < N_MIXED_F32; k++)
		store(&b, f[k], i, floats[k]);
	for (int k = 0; k < N_MIXED_BOOL; k++)
		store(&b, p[k], i, flags[k]);
	end_loop(&b, NULL, 0);
	grid_size(&b, n);
	return finish(&b);
}

/* A grid loop with an add accumulator whose result the top level uses as `how` says: 0 a
 * store, 1 an atomic max of it (another combine), 2 an atomic add on a bf16 buffer. */
f8_kernel *build_refused(int how) {
	builder b = start("refused");
	uint32_t x = param(&b, "x", F8_KERNEL_PARAM_IN, F8_DTYPE_F32);
	uint32_t out = how == 0 ? param(&b, "out", F8_KERNEL_PARAM_OUT, F8_DTYPE_F32)
				: param(&b, "out", F8_KERNEL_PARAM_ACCUMULATE,
					how == 2 ? F8_DTYPE_BF16 : F8_DTYPE_F32);
	uint32_t n = param(&b, "n", F8_KERNEL_PARAM_SIZE, F8_DTYPE_I64);
	f8_kir_id zero = f8_kir_const_i64(b.k, 0);
	f8_kir_id i = begin_grid(&b, f8_kir_size(b.k, n));
	f8_kir_id total = accumulator(&b, F8_KIR_COMBINE_ADD, F8_KIR_TYPE_F32);
	f8_kir_id xv = f8_kir_load(b.k, x, i);
	end_loop(&b, &xv, 1);
	if (how == 0)
		store(&b, out, zero, total);
	else
		atomic(&b, how == 1 ? F8_KIR_COMBINE_MAX : F8_KIR_COMBINE_ADD, out, zero, total);
	return finish(&b);
}
