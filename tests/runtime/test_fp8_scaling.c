/*
 * The FP8 scaling kernels (runtime/cpu/kernels_fp8.c, kernels_fp8_gemm.c) through text-IR graphs
 * run by the CPU executor:
 *   - ScalingUpdate against hand-computed values: the history roll over two steps, max against
 *     most_recent, the margin, an amax of 0 keeping the scale, NaN and inf skipping their slot
 *     (history and scale unchanged) and counted in nonfinite;
 *   - Quantize with a slot of a scale table: codes, scale_inv and amax by hand;
 *   - CastTranspose under each granularity (given scale, slot, current, 1x128, 128x128, rowwise
 *     [1, 0] and [1, cols], MX) against Quantize of x and of an explicitly transposed x, code for
 *     code and scale for scale;
 *   - FP8Gemm per tensor, rowwise (by rows, and by a per-tensor operand), 1x128 by 128x128
 *     blocks, MX and E5M2 x E4M3 against a dequantize-then-double-GEMM reference, on fresh random
 *     inputs of every sign and several binades (never zero), within the accumulation bound that
 *     kernels_fp8_gemm.c documents.
 *   - grouped casts (per-expert scaling: rows by counts, an (E, N, K) weight's slices, a slot
 *     range of a table) and FP8GroupedGemm's fwd, dgrad and wgrad against the dense ops on each
 *     expert's rows, bit for bit, an expert without tokens included, and padding rows after
 *     the counted ones (not read; zero codes and zero output rows there); ScalingUpdate taking
 *     a grouped cast's amaxes as consecutive slots.
 * The seed comes from the clock and is printed; F8C_TEST_SEED=N repeats a run.
 */
#include <math.h>   // fabs, ldexp, isnan, signbit, NAN, INFINITY
#include <stdio.h>  // printf, snprintf
#include <stdlib.h> // getenv, strtoull
#include <string.h> // strlen, strcmp
#include <time.h>   // time

#include "ir/fp8.h"                  // f8_scale_from_amax
#include "ir/text.h"                 // f8_text_parse
#include "passes/pipeline.h"         // f8_pipeline_run
#include "runtime/cpu/executor.h"    // f8_cpu_executor
#include "runtime/cpu/kernels.h"     // f8_cpu_kernel_get, f8_cpu_kernel_call
#include "tests/runtime/test_direct.h" // test_run_direct
#include "tests/runtime/test_fill.h" // rng_state, rng_next, rng_uniform, rng_int
#include "tests/test_support.h"      // CHECK, test_finish

/* The graph under test and its executor. */
static f8_graph *graph;
static f8_cpu_executor *executor;

static void teardown(void) {
	f8_cpu_executor_destroy(executor);
	f8_graph_destroy(graph);
	executor = NULL;
	graph = NULL;
}

/* Parses and types `text` and makes an executor that keeps every value. */
static bool setup(const char *text) {
	f8_diag diag;
	f8_diag_clear(&diag);
	graph = NULL;
	executor = NULL;
	if (f8_text_parse(text, strlen(text), "test", &graph, &diag) ||
	    f8_pipeline_run(graph, "canonicalize", true, &diag) ||
	    f8_cpu_executor_create(graph, NULL, &executor, &diag)) {
		f8_diag_print(&diag, stdout);
		printf("%s", text);
		teardown();
		return false;
	}
	f8_cpu_executor_keep_all(executor, true);
	return true;
}

static f8_status execute(uint32_t phases) {
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_status status = f8_cpu_executor_run(executor, phases, &diag);
	if (status)
		f8_diag_print(&diag, stdout);
	return status;
}

static const f8_rt_tensor *value(const char *name) {
	return f8_cpu_executor_value(executor, f8_graph_find_value(graph, name, strlen(name)));
}

static f8_rt_tensor *leaf(const char *name) {
	return f8_cpu_executor_leaf(executor, f8_graph_find_value(graph, name, strlen(name)));
}

static void fill(const char *name, const double *values, int64_t n) {
	f8_rt_tensor *tensor = leaf(name);
	CHECK(tensor && f8_rt_tensor_numel(tensor) == n);
	for (int64_t i = 0; tensor && i < n && i < f8_rt_tensor_numel(tensor); i++)
		f8_rt_tensor_set(tensor, i, values[i]);
}

/* Checks value `name` element for element, exactly (NaN where NaN is wanted). */
static void expect(const char *name, const double *want, int64_t n) {
	const f8_rt_tensor *tensor = value(name);
	CHECK(tensor && f8_rt_tensor_numel(tensor) == n);
	for (int64_t i = 0; tensor && i < n && i < f8_rt_tensor_numel(tensor); i++) {
		double got = f8_rt_tensor_get(tensor, i);
		bool ok = got == want[i] || (isnan(got) && isnan(want[i]));
		if (!ok)
			printf("  %%%s[%lld] = %.9g, expected %.9g\n", name, (long long)i, got, want[i]);
		CHECK(ok);
	}
}

#define FILL(name, ...)                                                                 \
	do {                                                                            \
		const double values_[] = {__VA_ARGS__};                                 \
		fill(name, values_, (int64_t)(sizeof values_ / sizeof values_[0]));     \
	} while (0)

#define EXPECT(name, ...)                                                               \
	do {                                                                            \
		const double want_[] = {__VA_ARGS__};                                   \
		expect(name, want_, (int64_t)(sizeof want_ / sizeof want_[0]));         \
	} while (0)

/* float32 arithmetic, as the kernels' scale computation does it. */
static double f32_div(float a, float b) {
	return (double)(a / b);
}

/* ScalingUpdate. Four slots, history length 3: slot 0 finite, slot 1 amax 0 over an all-zero
 * history, slot 2 NaN, slot 3 inf. %next is the max/margin-0/E4M3 table, which the graph
 * updates; %recent reads the same table with most_recent, margin 1, E5M2 (placed first: a read
 * of the table after its update's source is made would be stale). */
static void test_scaling_update(void) {
	if (!setup("graph g {\n"
		   "  scale %scale : f32[4]\n  amax_history %history : f32[3, 4]\n"
		   "  state %nonfinite : i64[]\n"
		   "  input %a0 : f32[]\n  input %a1 : f32[]\n  input %a2 : f32[]\n  input %a3 : f32[]\n"
		   "  %rs, %rh, %rn = ScalingUpdate(%scale, %history, %nonfinite, %a0, %a1, %a2, %a3)"
		   " {format=e5m2, algo=\"most_recent\", margin=1}\n"
		   "  %s, %h, %n = ScalingUpdate(%scale, %history, %nonfinite, %a0, %a1, %a2, %a3)"
		   " {format=e4m3, algo=\"max\"}\n"
		   "  output %rs, %rh, %rn\n"
		   "  update %scale <- %s\n  update %history <- %h\n  update %nonfinite <- %n\n}\n")) {
		CHECK(false);
		return;
	}
	FILL("scale", 0.5, 0.25, 2, 4);
	FILL("history", 7, 0, 1, 1, /* row 1 */ 1, 0, 2, 2, /* row 2 */ 100, 0, 3, 3);
	FILL("nonfinite", 5);
	FILL("a0", 2);
	FILL("a1", 0);
	FILL("a2", NAN);
	FILL("a3", INFINITY);
	CHECK(execute(F8_PHASES_ALL) == F8_OK);
	// Slot 0 rolls (100 drops out) and takes 2; slots 2 and 3 stay; slot 1 rolls its zeros.
	const double rolled[] = {2, 0, 1, 1, 7, 0, 2, 2, 1, 0, 3, 3};
	expect("h", rolled, 12);
	expect("rh", rolled, 12);
	// max: slot 0 over {2, 7, 1} -> 448 / 7; amax 0 keeps 0.25; NaN and inf keep theirs.
	EXPECT("s", f32_div(448.0f, 7.0f), 0.25, 2, 4);
	// most_recent with margin 1 in E5M2: 57344 / 2 / 2.
	EXPECT("rs", 14336, 0.25, 2, 4);
	EXPECT("n", 7);
	EXPECT("rn", 7);
	// The updates applied: the next step sees the new table. Slot 0 takes 500, 7 survives in
	// row 2; slot 1 finally sees an amax (0.5); slots 2 and 3 get finite amaxes now.
	EXPECT("history", 2, 0, 1, 1, 7, 0, 2, 2, 1, 0, 3, 3);
	FILL("a0", 500);
	FILL("a1", 0.5);
	FILL("a2", 0.25);
	FILL("a3", 1);
	CHECK(execute(F8_PHASES_ALL) == F8_OK);
	EXPECT("h", 500, 0.5, 0.25, 1, 2, 0, 1, 1, 7, 0, 2, 2);
	EXPECT("s", f32_div(448.0f, 500.0f), 896, f32_div(448.0f, 2.0f), f32_div(448.0f, 2.0f));
	EXPECT("rs", f32_div(57344.0f, 500.0f) / 2, 57344, 57344 * 2, 57344 / 2);
	EXPECT("n", 7);
	teardown();
}

/* Quantize with a slot of a scale table: the codes at that scale, scale_inv = 1 / scale, and
 * the amax of x before scaling. */
static void test_quantize_slot(void) {
	if (!setup("graph g {\n  input %x : f32[2, 3]\n  scale %table : f32[3]\n"
		   "  %q, %qi, %qa = Quantize(%x, %table) {to=e4m3, slot=1}\n"
		   "  %r, %ri, %ra = Quantize(%x, %table) {to=e5m2, slot=2}\n"
		   "  output %q, %qi, %qa, %r, %ri, %ra\n}\n")) {
		CHECK(false);
		return;
	}
	FILL("x", 1, -2, 3, 0.5, 100, -224);
	FILL("table", 1, 2, 0.5);
	CHECK(execute(F8_PHASES_ALL) == F8_OK);
	// x * 2: 200 lies between E4M3's 192 and 208 at a tie, to the even mantissa 192.
	EXPECT("q", 2, -4, 6, 1, 192, -448);
	EXPECT("qi", 0.5);
	EXPECT("qa", 224);
	// x / 2 in E5M2 (two mantissa bits): 50 rounds to 48; 112 = 1.11b * 2^6 is exact.
	EXPECT("r", 0.5, -1, 1.5, 0.25, 48, -112);
	EXPECT("ri", 2);
	EXPECT("ra", 224);
	teardown();
}

/* A random value of either sign, its magnitude 0.3..1.5 times 2^-4..2^4: never zero. */
static double random_value(void) {
	return (rng_next() & 1 ? 1 : -1) * ldexp(rng_uniform(0.3, 1.5), (int)rng_int(-4, 4));
}

/* Checks that values `a` and `b` hold the same elements (compared as doubles: the same codes
 * and scales decode to the same values, and NaN matches NaN). */
static void expect_same(const char *what, const char *a, const char *b) {
	const f8_rt_tensor *x = value(a), *y = value(b);
	CHECK(x && y && f8_rt_tensor_numel(x) == f8_rt_tensor_numel(y));
	int64_t n = x && y ? f8_rt_tensor_numel(x) : 0, wrong = 0;
	for (int64_t i = 0; y && i < n && i < f8_rt_tensor_numel(y); i++) {
		double u = f8_rt_tensor_get(x, i), v = f8_rt_tensor_get(y, i);
		if (!(u == v || (isnan(u) && isnan(v))) && wrong++ == 0)
			printf("  %s: %%%s[%lld] = %.9g, %%%s has %.9g\n", what, a, (long long)i, u,
			       b, v);
	}
	CHECK(wrong == 0);
}

/* The scale_inv of element (row, k) of a (rows, K) operand whose scale_inv is `scales` under
 * block [block_rows, block_cols] (0: the whole axis; scalar scales: no block). */
static double scale_inv_at(const f8_rt_tensor *scales, const int64_t *block, int64_t rows,
			   int64_t k, int64_t row, int64_t col) {
	if (scales->rank == 0)
		return f8_rt_tensor_get(scales, 0);
	int64_t block_rows = block[0] ? block[0] : rows, block_cols = block[1] ? block[1] : k;
	return f8_rt_tensor_get(scales, (row / block_rows) * scales->dims[1] + col / block_cols);
}

/* Checks that codes times scale_inv (under block, {0, 0} per tensor) give back `x` (rows, cols)
 * to the format's precision: half an ulp (2^-4 of the value for E4M3, 2^-3 for E5M2), or the
 * smallest subnormal for values below the normals, after saturation at the format's largest
 * value. A wrong format, block or scale anywhere in a cast shows here, whatever Quantize does. */
static void check_dequantized(const char *what, const char *codes_name, const char *scales_name,
			      const int64_t *block, const char *x_name) {
	const f8_rt_tensor *codes = value(codes_name), *scales = value(scales_name);
	const f8_rt_tensor *x = value(x_name);
	bool e5m2 = codes->dtype == F8_DTYPE_E5M2;
	double relative = e5m2 ? 0x1p-3 : 0x1p-4, smallest = e5m2 ? 0x1p-16 : 0x1p-9;
	double largest = e5m2 ? 57344 : 448;
	int64_t rows = x->dims[0], cols = x->dims[1], wrong = 0;
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < cols; c++) {
			double scale_inv = scale_inv_at(scales, block, rows, cols, r, c);
			double want = f8_rt_tensor_get(x, r * cols + c);
			if (fabs(want) > largest * scale_inv)
				want = want < 0 ? -largest * scale_inv : largest * scale_inv;
			double got = f8_rt_tensor_get(codes, r * cols + c) * scale_inv;
			if (!(fabs(got - want) <= relative * fabs(want) + smallest * scale_inv) &&
			    wrong++ == 0)
				printf("  %s: %%%s[%lld, %lld] gives %.9g for %.9g\n", what, codes_name,
				       (long long)r, (long long)c, got, want);
		}
	CHECK(wrong == 0);
}

/* CastTranspose under `attrs` (with `scale`, an input list suffix like ", %s", or "") against
 * Quantize of x and of xt, a (rows, cols) matrix and its transpose filled here. */
static void check_cast_transpose(const char *what, int64_t rows, int64_t cols, const char *attrs,
				 const char *scale, int64_t block_rows, int64_t block_cols) {
	char text[2048];
	snprintf(text, sizeof text,
		 "graph g {\n  input %%x : f32[%lld, %lld]\n  input %%xt : f32[%lld, %lld]\n"
		 "  input %%s : f32[]\n  scale %%table : f32[2]\n"
		 "  %%c, %%ct, %%ci, %%cti, %%ca = CastTranspose(%%x%s) {%s}\n"
		 "  %%q, %%qi, %%qa = Quantize(%%x%s) {%s}\n"
		 "  %%p, %%pi = Quantize(%%xt%s) {%s}\n"
		 "  output %%c, %%ct, %%ci, %%cti, %%ca, %%q, %%qi, %%qa, %%p, %%pi\n}\n",
		 (long long)rows, (long long)cols, (long long)cols, (long long)rows, scale, attrs,
		 scale, attrs, scale, attrs);
	if (!setup(text)) {
		printf("  %s: the graph does not set up\n", what);
		CHECK(false);
		return;
	}
	f8_rt_tensor *x = leaf("x"), *xt = leaf("xt");
	for (int64_t r = 0; r < rows; r++) {
		double row_scale = ldexp(1.0, (int)rng_int(-6, 6)); // rows of different binades
		for (int64_t c = 0; c < cols; c++) {
			double v = random_value() * row_scale;
			f8_rt_tensor_set(x, r * cols + c, v);
			f8_rt_tensor_set(xt, c * rows + r, v);
		}
	}
	FILL("s", rng_uniform(0.5, 4));
	FILL("table", rng_uniform(0.5, 4), rng_uniform(0.5, 4));
	CHECK(execute(F8_PHASES_ALL) == F8_OK);
	printf("CastTranspose %s\n", what);
	expect_same(what, "c", "q");
	expect_same(what, "ci", "qi");
	expect_same(what, "ca", "qa");
	expect_same(what, "ct", "p");
	expect_same(what, "cti", "pi");
	const int64_t block[2] = {block_rows, block_cols};
	check_dequantized(what, "c", "ci", block, "x");
	check_dequantized(what, "ct", "cti", block, "xt");
	teardown();
}

static void test_cast_transpose(void) {
	// Odd sizes: partial blocks at the bottom and right edges, in both copies.
	int64_t rows = rng_int(129, 300), cols = rng_int(129, 300);
	char rowwise[64];
	snprintf(rowwise, sizeof rowwise, "to=e4m3, block=[1, %lld]", (long long)cols);
	check_cast_transpose("given scale", rows, cols, "to=e5m2", ", %s", 0, 0);
	check_cast_transpose("slot", rows, cols, "to=e4m3, slot=1", ", %table", 0, 0);
	check_cast_transpose("current", rows, cols, "to=e4m3, margin=1", "", 0, 0);
	check_cast_transpose("1x128", rows, cols, "to=e5m2, block=[1, 128]", "", 1, 128);
	check_cast_transpose("128x128", rows, cols, "to=e4m3, block=[128, 128]", "", 128, 128);
	check_cast_transpose("rowwise [1, 0]", rows, cols, "to=e4m3, block=[1, 0]", "", 1, 0);
	check_cast_transpose("rowwise [1, cols]", rows, cols, rowwise, "", 1, cols);
	check_cast_transpose("MX", rows, cols, "to=e4m3, block=[1, 32], scale_dtype=e8m0", "", 1,
			     32);
	// The transposed 128x128 copy is the codes transposed: its scale grid is transposed too.
	if (setup("graph g {\n  input %x : f32[130, 260]\n"
		  "  %c, %ct, %ci, %cti, %ca = CastTranspose(%x) {to=e4m3, block=[128, 128]}\n"
		  "  output %ct, %cti\n}\n")) {
		f8_rt_tensor *x = leaf("x");
		for (int64_t i = 0; i < f8_rt_tensor_numel(x); i++)
			f8_rt_tensor_set(x, i, random_value());
		CHECK(execute(F8_PHASES_ALL) == F8_OK);
		const f8_rt_tensor *ci = value("ci"), *cti = value("cti");
		CHECK(ci->dims[0] == 2 && ci->dims[1] == 3 && cti->dims[0] == 3 && cti->dims[1] == 2);
		for (int i = 0; i < 2; i++)
			for (int j = 0; j < 3; j++)
				CHECK(f8_rt_tensor_get(ci, i * 3 + j) == f8_rt_tensor_get(cti, j * 2 + i));
		teardown();
	} else {
		CHECK(false);
	}
}

/* One FP8Gemm recipe: the operands' casts and the GEMM's block attributes. */
typedef struct gemm_case {
	const char *what;
	const char *a_cast, *b_cast; // Quantize attributes of x and of w
	int64_t a_block[2], b_block[2];
	bool a_blocked, b_blocked;
	const char *to;
	bool per_row; // the kernel's float32-accumulation path
} gemm_case;

/* Runs x (m, k) and w (n, k), random, through the case's casts and FP8Gemm with a bias, and
 * checks y against the dequantized operands multiplied in double. The bound per element:
 * float32 accumulation (per-row path) errs by at most k * 2^-24 of sum |a*b| (here 2^-23 for
 * margin), and the one rounding to `to` by half its ulp. */
static void check_gemm(const gemm_case *g, int64_t m, int64_t n, int64_t k) {
	char text[2048], blocks[96] = "";
	if (g->a_blocked)
		snprintf(blocks, sizeof blocks, ", a_block=[%lld, %lld]", (long long)g->a_block[0],
			 (long long)g->a_block[1]);
	if (g->b_blocked)
		snprintf(blocks + strlen(blocks), sizeof blocks - strlen(blocks),
			 ", b_block=[%lld, %lld]", (long long)g->b_block[0], (long long)g->b_block[1]);
	snprintf(text, sizeof text,
		 "graph g {\n  input %%x : f32[%lld, %lld]\n  input %%w : f32[%lld, %lld]\n"
		 "  input %%bias : %s[%lld]\n"
		 "  %%a, %%sa = Quantize(%%x) {%s}\n  %%b, %%sb = Quantize(%%w) {%s}\n"
		 "  %%y = FP8Gemm(%%a, %%b, %%sa, %%sb, %%bias) {to=%s, gemm=\"fwd\"%s}\n"
		 "  output %%y\n}\n",
		 (long long)m, (long long)k, (long long)n, (long long)k, g->to, (long long)n,
		 g->a_cast, g->b_cast, g->to, blocks);
	if (!setup(text)) {
		printf("  %s: the graph does not set up\n", g->what);
		CHECK(false);
		return;
	}
	const char *names[3] = {"x", "w", "bias"};
	for (int i = 0; i < 3; i++) {
		f8_rt_tensor *t = leaf(names[i]);
		for (int64_t j = 0; j < f8_rt_tensor_numel(t); j++)
			f8_rt_tensor_set(t, j, random_value());
	}
	CHECK(execute(F8_PHASES_ALL) == F8_OK);
	const f8_rt_tensor *a = value("a"), *b = value("b"), *sa = value("sa"), *sb = value("sb");
	const f8_rt_tensor *y = value("y"), *bias = value("bias");
	// Half an ulp of `to`, relative (bf16's a little more: the store rounds to float32 first).
	double unit = strcmp(g->to, "f32") == 0 ? 0x1p-24 : 0x1p-8 + 0x1p-24;
	double accumulation = g->per_row ? (double)(k + 2) * 0x1p-23 : (double)(k + 2) * 0x1p-52;
	int64_t wrong = 0;
	for (int64_t r = 0; r < m; r++)
		for (int64_t c = 0; c < n; c++) {
			double sum = f8_rt_tensor_get(bias, c), magnitude = fabs(sum);
			for (int64_t i = 0; i < k; i++) {
				double term = f8_rt_tensor_get(a, r * k + i) *
					      scale_inv_at(sa, g->a_block, m, k, r, i) *
					      f8_rt_tensor_get(b, c * k + i) *
					      scale_inv_at(sb, g->b_block, n, k, c, i);
				sum += term;
				magnitude += fabs(term);
			}
			double got = f8_rt_tensor_get(y, r * n + c);
			double accumulated = accumulation * magnitude;
			double bound = accumulated + unit * (fabs(sum) + accumulated);
			if (!(fabs(got - sum) <= bound) && wrong++ == 0)
				printf("  %s: y[%lld, %lld] = %.9g, reference %.9g (bound %.3g)\n", g->what,
				       (long long)r, (long long)c, got, sum, bound);
		}
	printf("FP8Gemm %s: %lld x %lld x %lld\n", g->what, (long long)m, (long long)k, (long long)n);
	CHECK(wrong == 0);
	teardown();
}

static void test_fp8_gemm(void) {
	const gemm_case cases[] = {
		{"per tensor", "to=e4m3", "to=e4m3", {0}, {0}, false, false, "f32", true},
		{"rowwise", "to=e4m3, block=[1, 0]", "to=e4m3, block=[1, 0]", {1, 0}, {1, 0}, true,
		 true, "f32", true},
		{"rowwise by per tensor", "to=e4m3, block=[1, 0]", "to=e4m3", {1, 0}, {0}, true, false,
		 "f32", true},
		{"1x128 by 128x128", "to=e4m3, block=[1, 128]", "to=e4m3, block=[128, 128]",
		 {1, 128}, {128, 128}, true, true, "f32", false},
		{"MX", "to=e4m3, block=[1, 32], scale_dtype=e8m0",
		 "to=e4m3, block=[1, 32], scale_dtype=e8m0", {1, 32}, {1, 32}, true, true, "f32",
		 false},
		{"E5M2 x E4M3", "to=e5m2", "to=e4m3", {0}, {0}, false, false, "f32", true},
		{"E5M2 x E4M3 blocks, bf16", "to=e5m2, block=[1, 128]", "to=e4m3, block=[128, 128]",
		 {1, 128}, {128, 128}, true, true, "bf16", false},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		check_gemm(&cases[i], rng_int(1, 9), rng_int(129, 200), rng_int(129, 300));
}

/* Checks that `part` (a matrix, or a scalar as 1x1) is the block of `whole` (`cols` columns)
 * at row0, col0, element for element. */
static void expect_part(const char *what, const char *whole, int64_t cols, int64_t row0,
			int64_t col0, const char *part) {
	const f8_rt_tensor *w = value(whole), *p = value(part);
	CHECK(w && p);
	if (!w || !p)
		return;
	int64_t rows = p->rank == 2 ? p->dims[0] : 1, width = p->rank == 2 ? p->dims[1] : 1;
	int64_t wrong = 0;
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < width; c++) {
			int64_t at = (row0 + r) * cols + col0 + c;
			double u = at < f8_rt_tensor_numel(w) ? f8_rt_tensor_get(w, at) : NAN;
			double v = f8_rt_tensor_get(p, r * width + c);
			if (u != v && wrong++ == 0)
				printf("  %s: %%%s[%lld] = %.9g, %%%s[%lld, %lld] has %.9g\n", what, whole,
				       (long long)at, u, part, (long long)r, (long long)c, v);
		}
	CHECK(wrong == 0);
}

/*
 * Runs the node that makes `name` (a matrix of `cols` columns) directly on the run's inputs,
 * into outputs filled with garbage first (the executor hands a kernel zeroed outputs; this shows
 * that the kernel writes the padding's zeros itself), and checks that `name` gets the run's
 * elements but in rows row0.. and columns col0.. (the padding), which must be +0.
 */
static void expect_zero_padding(const char *what, const char *name, int64_t cols, int64_t row0,
				int64_t col0) {
	f8_value_id v = f8_graph_find_value(graph, name, strlen(name));
	const f8_node *node = &graph->nodes[graph->values[v].producer];
	const f8_rt_tensor *run = value(name);
	f8_rt_tensor outputs[TEST_DIRECT_MAX] = {0};
	f8_diag diag;
	CHECK(run && test_run_direct(graph, executor, node, outputs, &diag) == F8_OK);
	int64_t wrong = 0, zeros = 0;
	for (uint32_t i = 0; i < node->n_outputs && i < TEST_DIRECT_MAX; i++) {
		for (int64_t j = 0; run && node->outputs[i] == v && j < f8_rt_tensor_numel(run); j++) {
			double got = f8_rt_tensor_get(&outputs[i], j), want = f8_rt_tensor_get(run, j);
			bool padding = j / cols >= row0 && j % cols >= col0;
			zeros += padding;
			bool ok = padding ? got == 0 && !signbit(got) && want == 0 && !signbit(want)
					  : got == want || (isnan(got) && isnan(want));
			if (!ok && wrong++ == 0)
				printf("  %s: %%%s[%lld] = %.9g run directly, %.9g in the run\n", what,
				       name, (long long)j, got, want);
		}
		f8_rt_tensor_destroy(&outputs[i]);
	}
	CHECK(wrong == 0 && zeros > 0);
}

/*
 * Grouped casts and FP8GroupedGemm (a mixture of experts' per-expert scaling), against the
 * dense ops on each expert's own rows: three experts of which the middle one got no token.
 * Current scaling finds each expert's scale from its own rows (x, dy) or slice (w), so the
 * grouped codes, scales and amaxes are those of Quantize / CastTranspose on that expert alone,
 * and each expert's fwd, dgrad and wgrad have the bits of FP8Gemm on its copies; the empty
 * expert gets scale 1, amax 0 and a zero weight gradient. A grouped Quantize with a slot reads
 * the table entries slot .. slot + 2, and ScalingUpdate takes its f32[3] amax as three slots.
 * After the counted rows come `pad` rows of padding (an all-to-all's receive buffer of a static
 * size) holding large garbage: no group's amax or scale sees it, its codes are +0's (in the
 * transposed copies' last columns too) and the fwd's and dgrad's rows there zeros; the wgrad's
 * operands get two more columns of garbage codes, which it must not read either.
 */
static void test_grouped(void) {
	int64_t c0 = rng_int(1, 9), c2 = rng_int(1, 9), pad = rng_int(1, 3), k = 48, n = 32;
	int64_t counted = c0 + c2, rows = counted + pad;
	char text[4096];
	snprintf(text, sizeof text,
		 "graph g {\n"
		 "  input %%x0 : f32[%lld, 48]\n  input %%x2 : f32[%lld, 48]\n"
		 "  input %%xp : f32[%lld, 48]\n"
		 "  input %%d0 : f32[%lld, 32]\n  input %%d2 : f32[%lld, 32]\n"
		 "  input %%dp : f32[%lld, 32]\n"
		 "  input %%w : f32[3, 32, 48]\n  input %%w0 : f32[32, 48]\n"
		 "  input %%w2 : f32[32, 48]\n  input %%counts : i64[3]\n"
		 "  input %%atp : e4m3[48, 2]\n  input %%gtp : e5m2[32, 2]\n"
		 "  scale %%table : f32[4]\n  amax_history %%history : f32[2, 4]\n"
		 "  state %%nonfinite : i64[]\n  input %%first : f32[]\n"
		 "  %%x = Concat(%%x0, %%x2, %%xp) {axis=0}\n"
		 "  %%d = Concat(%%d0, %%d2, %%dp) {axis=0}\n"
		 "  %%a, %%at, %%sa, %%sat, %%aa = CastTranspose(%%x, %%counts) {to=e4m3, grouped=1}\n"
		 "  %%b, %%bt, %%sb, %%sbt, %%ba = CastTranspose(%%w) {to=e4m3, grouped=1}\n"
		 "  %%g, %%gt, %%sg, %%sgt, %%ga = CastTranspose(%%d, %%counts) {to=e5m2, grouped=1}\n"
		 "  %%atw = Concat(%%at, %%atp) {axis=1}\n  %%gtw = Concat(%%gt, %%gtp) {axis=1}\n"
		 "  %%y = FP8GroupedGemm(%%a, %%b, %%sa, %%sb, %%counts) {to=f32, gemm=\"fwd\"}\n"
		 "  %%dx = FP8GroupedGemm(%%g, %%bt, %%sg, %%sbt, %%counts) {to=f32, gemm=\"dgrad\"}\n"
		 "  %%dw = FP8GroupedGemm(%%gtw, %%atw, %%sgt, %%sat, %%counts) "
		 "{to=f32, gemm=\"wgrad\"}\n"
		 "  %%q, %%qs, %%qa = Quantize(%%x, %%table, %%counts) {to=e4m3, slot=1, grouped=1}\n"
		 "  %%q0, %%qs0, %%qa0 = Quantize(%%x0, %%table) {to=e4m3, slot=1}\n"
		 "  %%q2, %%qs2, %%qa2 = Quantize(%%x2, %%table) {to=e4m3, slot=3}\n"
		 "  %%next, %%hnext, %%nfnext = ScalingUpdate(%%table, %%history, %%nonfinite, "
		 "%%first, %%qa) {format=e4m3}\n",
		 (long long)c0, (long long)c2, (long long)pad, (long long)c0, (long long)c2,
		 (long long)pad);
	// The dense ops on expert e's own rows: '#' stands for e.
	static const char dense[] =
		"  %a#, %at#, %sa#, %sat#, %aa# = CastTranspose(%x#) {to=e4m3}\n"
		"  %b#, %bt#, %sb#, %sbt#, %ba# = CastTranspose(%w#) {to=e4m3}\n"
		"  %g#, %gt#, %sg#, %sgt#, %ga# = CastTranspose(%d#) {to=e5m2}\n"
		"  %y# = FP8Gemm(%a#, %b#, %sa#, %sb#) {to=f32, gemm=\"fwd\"}\n"
		"  %dx# = FP8Gemm(%g#, %bt#, %sg#, %sbt#) {to=f32, gemm=\"dgrad\"}\n"
		"  %dw# = FP8Gemm(%gt#, %at#, %sgt#, %sat#) {to=f32, gemm=\"wgrad\"}\n";
	for (int e = 0; e < 3; e += 2) {
		size_t used = strlen(text);
		for (const char *c = dense; *c && used + 1 < sizeof text; c++)
			text[used++] = *c == '#' ? (char)('0' + e) : *c;
		text[used] = '\0';
	}
	snprintf(text + strlen(text), sizeof text - strlen(text),
		 "  output %%a, %%at, %%sa, %%aa, %%bt, %%sb, %%sbt, %%g, %%gt, %%y, %%dx, %%dw, %%q, "
		 "%%qs, %%qa, %%next, %%q0, %%q2, %%qs0, %%qs2, %%qa0, %%qa2, %%a0, %%at0, %%sa0, "
		 "%%aa0, %%bt0, %%sb0, %%y0, %%dx0, %%dw0, %%a2, %%at2, %%sa2, %%aa2, %%bt2, %%sb2, "
		 "%%y2, %%dx2, %%dw2, %%g0, %%g2\n}\n");
	if (!setup(text)) {
		CHECK(false);
		return;
	}
	const char *randoms[] = {"x0", "x2", "d0", "d2", "w", "xp", "dp", "atp", "gtp"};
	for (size_t i = 0; i < sizeof randoms / sizeof randoms[0]; i++) {
		f8_rt_tensor *t = leaf(randoms[i]);
		double scale = i == 4 ? 0.1 : i >= 5 ? 1000 : 1.0; // the padding's garbage: large
		for (int64_t j = 0; j < f8_rt_tensor_numel(t); j++)
			f8_rt_tensor_set(t, j, random_value() * scale);
	}
	const f8_rt_tensor *w = leaf("w");
	f8_rt_tensor *w0 = leaf("w0"), *w2 = leaf("w2");
	for (int64_t j = 0; j < n * k; j++) {
		f8_rt_tensor_set(w0, j, f8_rt_tensor_get(w, j));
		f8_rt_tensor_set(w2, j, f8_rt_tensor_get(w, 2 * n * k + j));
	}
	FILL("counts", (double)c0, 0, (double)c2);
	FILL("table", 4, 0.5, 2, 8);
	FILL("history", 0, 0, 0, 0, 0, 0, 0, 0);
	FILL("first", 3);
	CHECK(execute(F8_PHASES_ALL) == F8_OK);
	// Codes, scales and amaxes per expert; the transposed copies' columns.
	expect_part("x's codes, expert 0", "a", k, 0, 0, "a0");
	expect_part("x's codes, expert 2", "a", k, c0, 0, "a2");
	expect_part("x^T's codes, expert 0", "at", rows, 0, 0, "at0");
	expect_part("x^T's codes, expert 2", "at", rows, 0, c0, "at2");
	expect_part("x's scale_inv, expert 0", "sa", 1, 0, 0, "sa0");
	expect_part("x's scale_inv, expert 2", "sa", 1, 2, 0, "sa2");
	expect_part("x's amax, expert 0", "aa", 1, 0, 0, "aa0");
	expect_part("x's amax, expert 2", "aa", 1, 2, 0, "aa2");
	expect_part("dy's codes, expert 2", "g", n, c0, 0, "g2");
	expect_part("w's slice 2 transposed", "bt", n, 2 * k, 0, "bt2");
	expect_part("w's scale_inv, slice 0", "sb", 1, 0, 0, "sb0");
	expect_part("w^T's scale_inv, slice 2", "sbt", 1, 2, 0, "sb2");
	const f8_rt_tensor *sa = value("sa"), *aa = value("aa");
	CHECK(sa && aa && f8_rt_tensor_get(sa, 1) == 1.0 && f8_rt_tensor_get(aa, 1) == 0.0);
	// Each expert's GEMMs: the bits of FP8Gemm on its copies; the empty expert's dW is 0.
	expect_part("fwd, expert 0", "y", n, 0, 0, "y0");
	expect_part("fwd, expert 2", "y", n, c0, 0, "y2");
	expect_part("dgrad, expert 0", "dx", k, 0, 0, "dx0");
	expect_part("dgrad, expert 2", "dx", k, c0, 0, "dx2");
	expect_part("wgrad, expert 0", "dw", k, 0, 0, "dw0");
	expect_part("wgrad, expert 2", "dw", k, 2 * n, 0, "dw2");
	const f8_rt_tensor *dw = value("dw");
	int64_t nonzero = 0;
	for (int64_t j = 0; dw && j < n * k; j++)
		nonzero += f8_rt_tensor_get(dw, n * k + j) != 0.0;
	CHECK(dw && nonzero == 0);
	// The slot: expert e at table entry 1 + e; the update takes %qa as slots 1..3.
	expect_part("slot 1, expert 0", "q", k, 0, 0, "q0");
	expect_part("slot 3, expert 2", "q", k, c0, 0, "q2");
	expect_part("slot 1's scale_inv", "qs", 1, 0, 0, "qs0");
	expect_part("slot 3's scale_inv", "qs", 1, 2, 0, "qs2");
	expect_part("slot 1's amax", "qa", 1, 0, 0, "qa0");
	expect_part("slot 3's amax", "qa", 1, 2, 0, "qa2");
	const f8_rt_tensor *qs = value("qs"), *qa = value("qa"), *next = value("next");
	CHECK(qs && f8_rt_tensor_get(qs, 1) == 0.5);
	CHECK(qa && next);
	for (int e = 0; qa && next && e < 3; e++) {
		float table[4] = {4, 0.5f, 2, 8};
		float want = f8_scale_from_amax(F8_DTYPE_E4M3, (float)f8_rt_tensor_get(qa, e), 0,
						table[1 + e]);
		CHECK(f8_rt_tensor_get(next, 1 + e) == (double)want);
	}
	CHECK(next && f8_rt_tensor_get(next, 0) ==
			      (double)f8_scale_from_amax(F8_DTYPE_E4M3, 3.0f, 0, 4.0f));
	// The padding: +0 codes and zero rows, written by the kernels themselves (the other
	// elements as in the run); the amaxes and scales above never saw its garbage.
	expect_zero_padding("x's codes", "a", k, counted, 0);
	expect_zero_padding("x^T's codes", "at", rows, 0, counted);
	expect_zero_padding("dy's codes", "g", n, counted, 0);
	expect_zero_padding("dy^T's codes", "gt", rows, 0, counted);
	expect_zero_padding("the slot's codes", "q", k, counted, 0);
	expect_zero_padding("fwd", "y", n, counted, 0);
	expect_zero_padding("dgrad", "dx", k, counted, 0);
	printf("grouped casts and FP8GroupedGemm: experts of %lld, 0 and %lld rows, then %lld of "
	       "padding\n", (long long)c0, (long long)c2, (long long)pad);
	teardown();
}

int main(void) {
	const char *fixed = getenv("F8C_TEST_SEED");
	rng_state = fixed ? strtoull(fixed, NULL, 10) : (uint64_t)time(NULL);
	printf("seed %llu (F8C_TEST_SEED=%llu repeats this run)\n", (unsigned long long)rng_state,
	       (unsigned long long)rng_state);
	test_scaling_update();
	test_quantize_slot();
	test_cast_transpose();
	test_fp8_gemm();
	test_grouped();
	return test_finish();
}
