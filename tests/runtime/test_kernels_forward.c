/*
 * The forward reference kernels (runtime/cpu/kernels_*.c but the backward and optimizer ones)
 * against hand-computed values: small text-IR graphs run by the CPU executor, one behaviour per
 * check (broadcasting, attributes, optional outputs, the data errors each kernel reports). Then
 * the f32 fast paths against the generic path: each hot kernel runs once on aligned f32
 * tensors and once on misaligned ones (which kernel_util.h reads element by element through
 * f8_rt_tensor_get/set), and the outputs must agree bit for bit; and the BF16 fast path of
 * f8_rt_tensor_get/set against ir/fp8.h's general conversion (every BF16 value decoded, every
 * BF16 upper half with the lower halves around each rounding boundary encoded; the encoding was
 * checked once on all 2^32 floats, a minute and a half). Last, allocation failure in the
 * kernels that allocate scratch memory.
 * tests/runtime/test_kernels_numpy.py covers the same kernels against NumPy on random inputs.
 */
#include <math.h>   // fabs, sqrt, exp, log, erf, tanh, isinf, isnan, signbit
#include <stdlib.h> // malloc, free
#include <string.h> // strlen, strstr, memcpy, memcmp

#include "ir/fp8.h"                  // f8_float_decode, f8_float_encode
#include "ir/text.h"                 // f8_text_parse
#include "passes/pipeline.h"         // f8_pipeline_run
#include "runtime/cpu/executor.h"    // f8_cpu_executor
#include "runtime/cpu/kernels.h"     // f8_cpu_kernel_get, f8_cpu_kernel_call
#include "tests/runtime/test_direct.h" // test_run_direct
#include "tests/test_support.h"      // CHECK, test_finish

/* The graph under test, its executor and the last diagnostic. */
static f8_graph *graph;
static f8_cpu_executor *executor;
static f8_diag diag;

/* Parses and types `text`, and makes an executor for it with `symbols` (NULL when none). */
static bool setup(const char *text, const int64_t *symbols) {
	f8_diag_clear(&diag);
	graph = NULL;
	executor = NULL;
	if (f8_text_parse(text, strlen(text), "test", &graph, &diag) ||
	    f8_pipeline_run(graph, "canonicalize", true, &diag) ||
	    f8_cpu_executor_create(graph, symbols, &executor, &diag)) {
		f8_diag_print(&diag, stdout);
		f8_graph_destroy(graph);
		graph = NULL;
		return false;
	}
	f8_cpu_executor_keep_all(executor, true);
	return true;
}

static void teardown(void) {
	f8_cpu_executor_destroy(executor);
	f8_graph_destroy(graph);
	executor = NULL;
	graph = NULL;
}

static f8_value_id id(const char *name) {
	return f8_graph_find_value(graph, name, strlen(name));
}

/* Fills leaf `name` with `values` (n of them, converted to its dtype). */
static void fill(const char *name, const double *values, int64_t n) {
	f8_rt_tensor *leaf = f8_cpu_executor_leaf(executor, id(name));
	CHECK(leaf && f8_rt_tensor_numel(leaf) == n);
	for (int64_t i = 0; leaf && i < n && i < f8_rt_tensor_numel(leaf); i++)
		f8_rt_tensor_set(leaf, i, values[i]);
}

static f8_status execute(void) {
	f8_diag_clear(&diag);
	return f8_cpu_executor_run(executor, F8_PHASES_ALL, &diag);
}

/* Element i of value `name` after the run (NaN when there is none). */
static double at(const char *name, int64_t i) {
	const f8_rt_tensor *tensor = f8_cpu_executor_value(executor, id(name));
	return tensor && i < f8_rt_tensor_numel(tensor) ? f8_rt_tensor_get(tensor, i) : NAN;
}

/* True when `got` is `want` to float32 precision (a few ulps). */
static bool near(double got, double want) {
	return fabs(got - want) <= 1e-6 * (1.0 + fabs(want));
}

/* Checks every element of `name` against want[0..n). */
static void expect(const char *name, const double *want, int64_t n) {
	const f8_rt_tensor *tensor = f8_cpu_executor_value(executor, id(name));
	CHECK(tensor && f8_rt_tensor_numel(tensor) == n);
	for (int64_t i = 0; tensor && i < n; i++) {
		double got = at(name, i);
		bool ok = near(got, want[i]) || (isnan(got) && isnan(want[i])) ||
			  (isinf(got) && got == want[i]);
		if (!ok)
			printf("  %%%s[%lld] = %.9g, expected %.9g\n", name, (long long)i, got,
			       want[i]);
		CHECK(ok);
	}
}

#define EXPECT(name, ...)                                                               \
	do {                                                                            \
		const double want_[] = {__VA_ARGS__};                                   \
		expect(name, want_, (int64_t)(sizeof want_ / sizeof want_[0]));         \
	} while (0)

#define FILL(name, ...)                                                                 \
	do {                                                                            \
		const double values_[] = {__VA_ARGS__};                                 \
		fill(name, values_, (int64_t)(sizeof values_ / sizeof values_[0]));     \
	} while (0)

/* Runs the node that makes `name` directly on the run's inputs, into outputs filled with
 * garbage first (the executor hands a kernel zeroed outputs; this shows that the kernel writes
 * what it must itself), and checks that `name` gets the run's value in elements [0, from) and
 * +0 in [from, numel). */
static void expect_zero_tail(const char *name, int64_t from) {
	const f8_node *node = &graph->nodes[graph->values[id(name)].producer];
	f8_rt_tensor outputs[TEST_DIRECT_MAX] = {0};
	CHECK(test_run_direct(graph, executor, node, outputs, &diag) == F8_OK);
	for (uint32_t i = 0; i < node->n_outputs && i < TEST_DIRECT_MAX; i++) {
		for (int64_t j = 0; node->outputs[i] == id(name) && j < f8_rt_tensor_numel(&outputs[i]);
		     j++) {
			double got = f8_rt_tensor_get(&outputs[i], j);
			bool ok = j < from ? got == at(name, j) : got == 0 && !signbit(got);
			if (!ok)
				printf("  %%%s[%lld] = %.9g run directly\n", name, (long long)j, got);
			CHECK(ok);
		}
		f8_rt_tensor_destroy(&outputs[i]);
	}
}

/* The ops of the model zoo's dense models first. */

static void test_linear(void) {
	if (!setup("graph g {\n  input %x : f32[2, 3]\n  param %w : f32[2, 3]\n"
		   "  param %wt : f32[3, 2]\n  param %b : f32[2]\n"
		   "  %y = Linear(%x, %w, %b)\n  %yt = Linear(%x, %wt) {transpose_weight=1}\n"
		   "  output %y, %yt\n}\n", NULL))
	{
		CHECK(false);
		return;
	}
	FILL("x", 1, 2, 3, 4, 5, 6);
	FILL("w", 1, 0, -1, 0.5, 0.5, 0.5);
	FILL("wt", 1, 0.5, 0, 0.5, -1, 0.5);
	FILL("b", 10, 20);
	CHECK(execute() == F8_OK);
	EXPECT("y", 1 - 3 + 10, 3 + 20, 4 - 6 + 10, 7.5 + 20);
	EXPECT("yt", -2, 3, -2, 7.5);
	teardown();
}

static void test_matmul_gemm(void) {
	if (!setup("graph g {\n  input %a : f32[2, 1, 1, 2]\n  input %b : f32[3, 2, 1]\n"
		   "  input %v : f32[2]\n  input %m : f32[2, 2]\n  input %c : f32[2]\n"
		   "  %ab = MatMul(%a, %b)\n  %mv = MatMul(%m, %v)\n"
		   "  %g = Gemm(%m, %m, %c) {alpha=2.0, beta=0.5, transB=1}\n"
		   "  output %ab, %mv, %g\n}\n", NULL))
	{
		CHECK(false);
		return;
	}
	FILL("a", 1, 2, 3, 4);
	FILL("b", 1, 1, 0, 1, 2, 0);
	FILL("v", 1, -1);
	FILL("m", 1, 2, 3, 4);
	FILL("c", 10, 20);
	CHECK(execute() == F8_OK);
	// (2, 1, 1, 2) x (3, 2, 1): the batch (2, 1) with (3) broadcasts -> (2, 3, 1, 1).
	EXPECT("ab", 3, 2, 2, 7, 4, 6);
	EXPECT("mv", -1, -1);
	// 2 * m m^T + 0.5 * c: m m^T = [[5, 11], [11, 25]].
	EXPECT("g", 15, 32, 27, 60);
	teardown();
}

static void test_embedding(void) {
	if (!setup("graph g {\n  input %ids : i64[2, 2]\n  param %w : f32[3, 2]\n"
		   "  %e = Embedding(%ids, %w)\n  output %e\n}\n", NULL))
	{
		CHECK(false);
		return;
	}
	FILL("w", 0, 1, 10, 11, 20, 21);
	FILL("ids", 2, 0, 1, 2);
	CHECK(execute() == F8_OK);
	EXPECT("e", 20, 21, 0, 1, 10, 11, 20, 21);
	FILL("ids", 2, 0, 3, 2);
	CHECK(execute() == F8_ERR_INVALID);
	CHECK(strstr(diag.message, "id 3") && strstr(diag.message, "[1, 0]") &&
	      strstr(diag.node, "Embedding") && diag.hint[0]);
	teardown();
}

static void test_norms(void) {
	if (!setup("graph g {\n  input %x : f32[2, 4]\n  param %gamma : f32[4]\n"
		   "  param %beta : f32[4]\n"
		   "  %y, %mean, %rstd = LayerNorm(%x, %gamma, %beta) {epsilon=0.001}\n"
		   "  %r, %rrstd = RMSNorm(%x, %gamma)\n  output %y, %mean, %rstd, %r, %rrstd\n}\n",
		   NULL))
	{
		CHECK(false);
		return;
	}
	FILL("x", 1, 2, 3, 4, -1, 1, -1, 1);
	FILL("gamma", 1, 2, 1, 2);
	FILL("beta", 0, 0, 1, 1);
	CHECK(execute() == F8_OK);
	double s0 = 1 / sqrt(1.25 + 0.001), s1 = 1 / sqrt(1 + 0.001);
	EXPECT("y", -1.5 * s0, -0.5 * s0 * 2, 0.5 * s0 + 1, 1.5 * s0 * 2 + 1, -s1, 2 * s1, 1 - s1,
	       2 * s1 + 1);
	EXPECT("mean", 2.5, 0);
	EXPECT("rstd", s0, s1);
	double r0 = 1 / sqrt(7.5 + 1e-5), r1 = 1 / sqrt(1 + 1e-5);
	EXPECT("rrstd", r0, r1);
	// The normalized x is rounded to f32 before gamma multiplies it.
	EXPECT("r", (float)r0, (float)(2 * r0) * 2.0, (float)(3 * r0), (float)(4 * r0) * 2.0,
	       -(float)r1, (float)r1 * 2.0, -(float)r1, (float)r1 * 2.0);
	teardown();
}

/* RMSNorm on bf16: the normalized value is rounded to bf16 before the gamma product. */
static void test_rms_norm_bf16(void) {
	if (!setup("graph g {\n  input %x : bf16[3]\n  param %gamma : bf16[3]\n"
		   "  %r = RMSNorm(%x, %gamma)\n  output %r\n}\n", NULL))
	{
		CHECK(false);
		return;
	}
	FILL("x", 1, 2, 3);
	FILL("gamma", 3, 3, 3);
	CHECK(execute() == F8_OK);
	// rstd = 1 / sqrt(14 / 3 + 1e-5) = 0.46291: 3 * rstd = 1.38873 -> bf16 1.390625, times 3
	// is 4.171875 -> 4.1875; without that first rounding 4.16619 would give 4.15625.
	EXPECT("r", 1.390625, 2.78125, 4.1875);
	teardown();
}

static void test_activations(void) {
	if (!setup("graph g {\n  input %x : f32[4]\n  input %up : f32[4]\n  input %p : f32[2, 8]\n"
		   "  %ge = Gelu(%x)\n  %gt = Gelu(%x) {approximate=\"tanh\"}\n"
		   "  %s2 = SwiGLU(%x, %up)\n  %s1 = SwiGLU(%p)\n"
		   "  %c = Cos(%x)\n  %s = Sin(%x)\n  %re = Relu(%x)\n  %sg = Sigmoid(%x)\n"
		   "  output %ge, %gt, %s2, %s1, %c, %s, %re, %sg\n}\n", NULL))
	{
		CHECK(false);
		return;
	}
	FILL("x", 1, -2, 0, 30);
	FILL("up", 2, 1, 5, 1);
	FILL("p", 1, -2, 0, 30, 2, 1, 5, 1, 0, 0, 0, 0, 1, 1, 1, 1);
	CHECK(execute() == F8_OK);
	EXPECT("ge", 0.8413447460685429, -0.04550026389635842, 0, 30);
	EXPECT("gt", 0.8411919906082768, -0.04540230591222, 0, 30);
	double silu1 = 1 / (1 + exp(-1.0)), silu_2 = -2 / (1 + exp(2.0));
	EXPECT("s2", silu1 * 2, silu_2, 0, 30);
	EXPECT("s1", silu1 * 2, silu_2, 0, 30, 0, 0, 0, 0);
	EXPECT("c", cos(1.0), cos(-2.0), 1, cos(30.0));
	EXPECT("s", sin(1.0), sin(-2.0), 0, sin(30.0));
	EXPECT("re", 1, 0, 0, 30);
	EXPECT("sg", 1 / (1 + exp(-1.0)), 1 / (1 + exp(2.0)), 0.5, 1 / (1 + exp(-30.0)));
	teardown();
}

static void test_rope(void) {
	if (!setup("graph g {\n  input %x : f32[2, 1, 2, 4]\n  input %cos : f32[2, 4]\n"
		   "  input %sin : f32[2, 4]\n  input %pc : f32[1, 2, 2]\n"
		   "  input %ps : f32[1, 2, 2]\n"
		   "  input %bc : f32[2, 1, 2, 4]\n  input %bs : f32[2, 1, 2, 4]\n"
		   "  %h = Rope(%x, %cos, %sin)\n  %i = Rope(%x, %cos, %sin) {interleaved=1}\n"
		   "  %p = Rope(%x, %pc, %ps)\n  %b = Rope(%x, %bc, %bs)\n"
		   "  output %h, %i, %p, %b\n}\n", NULL))
	{
		CHECK(false);
		return;
	}
	FILL("x", 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4);
	FILL("cos", 0.5, 0.6, 0.5, 0.6, 1, 1, 1, 1);
	FILL("sin", 0.1, 0.2, 0.1, 0.2, 0, 0, 0, 0);
	FILL("pc", 0.5, 0.5, 1, 1);
	FILL("ps", 0.1, 0.1, 0, 0);
	// Per batch tables: batch 0 the identity, batch 1 a quarter turn (cos 0, sin 1).
	FILL("bc", 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
	FILL("bs", 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
	CHECK(execute() == F8_OK);
	EXPECT("h", 0.2, 0.4, 1.6, 2.8, 1, 2, 3, 4, 0.2, 0.4, 1.6, 2.8, 1, 2, 3, 4);
	EXPECT("i", 0.3, 1.4, 1.1, 3.0, 1, 2, 3, 4, 0.3, 1.4, 1.1, 3.0, 1, 2, 3, 4);
	// Partial rotary: dims past rotary_dim (2) pass through.
	EXPECT("p", 0.3, 1.1, 3, 4, 1, 2, 3, 4, 0.3, 1.1, 3, 4, 1, 2, 3, 4);
	EXPECT("b", 1, 2, 3, 4, 1, 2, 3, 4, -3, -4, 1, 2, -3, -4, 1, 2);
	teardown();
}

static void test_attention(void) {
	if (!setup("graph g {\n  input %q : f32[1, 2, 2, 2]\n  input %k : f32[1, 1, 2, 2]\n"
		   "  input %v : f32[1, 1, 2, 2]\n  input %bm : bool[2, 2]\n"
		   "  input %am : f32[1, 1, 2, 2]\n"
		   "  %o, %lse = Attention(%q, %k, %v) {causal=1}\n"
		   "  %ob, %lseb = Attention(%q, %k, %v, %bm)\n"
		   "  %oa = Attention(%q, %k, %v, %am) {scale=1.0}\n"
		   "  output %o, %lse, %ob, %lseb, %oa\n}\n", NULL))
	{
		CHECK(false);
		return;
	}
	FILL("q", 1, 0, 0, 1, 0, 1, 1, 0);
	FILL("k", 1, 0, 0, 1);
	FILL("v", 1, 2, 3, 4);
	FILL("bm", 0, 0, 1, 1);
	FILL("am", 0, -INFINITY, 0, 0);
	CHECK(execute() == F8_OK);
	double s = 1 / sqrt(2.0), p0 = 1 / (1 + exp(s)), p1 = 1 - p0, lse1 = log(1 + exp(s));
	// Two query heads share the one kv head; causal: row 0 sees key 0 only.
	double e = exp(-s), r0 = 1 / (1 + e), r1 = e / (1 + e);
	EXPECT("o", 1, 2, p0 * 1 + p1 * 3, p0 * 2 + p1 * 4, 1, 2,
	       r0 * 1 + r1 * 3, r0 * 2 + r1 * 4);
	EXPECT("lse", s, lse1, 0, log(exp(s) + 1));
	// A bool mask row with no key gives 0 and an lse of -inf.
	EXPECT("ob", 0, 0, p0 * 1 + p1 * 3, p0 * 2 + p1 * 4, 0, 0, r0 + 3 * r1, 2 * r0 + 4 * r1);
	EXPECT("lseb", -INFINITY, lse1, -INFINITY, log(exp(s) + 1));
	double a0 = 1 / (1 + exp(1.0)), a1 = 1 - a0;
	EXPECT("oa", 1, 2, a0 + 3 * a1, 2 * a0 + 4 * a1, 1, 2, a1 + 3 * a0, 2 * a1 + 4 * a0);
	teardown();
}

static void test_cross_entropy(void) {
	if (!setup("graph g {\n  input %logits : f32[3, 3]\n  input %labels : i64[3]\n"
		   "  %mean, %lse = CrossEntropy(%logits, %labels)\n"
		   "  %sum = CrossEntropy(%logits, %labels) {reduction=\"sum\"}\n"
		   "  %none = CrossEntropy(%logits, %labels) {reduction=\"none\", ignore_index=1}\n"
		   "  output %mean, %lse, %sum, %none\n}\n", NULL)) {
		CHECK(false);
		return;
	}
	FILL("logits", 1, 2, 3, 1, 1, 1, 0, 0, 1000);
	FILL("labels", 2, 1, 1);
	CHECK(execute() == F8_OK);
	double lse0 = log(exp(1.0) + exp(2.0) + exp(3.0)), lse1 = 1 + log(3.0), lse2 = 1000.0;
	EXPECT("lse", lse0, lse1, lse2);
	EXPECT("mean", ((lse0 - 3) + log(3.0) + 1000) / 3);
	EXPECT("sum", (lse0 - 3) + log(3.0) + 1000);
	EXPECT("none", lse0 - 3, 0, 0); // ignore_index=1: rows 1 and 2 count for nothing
	// -100 is ignored by default; where ignore_index is 1 it is a label out of range.
	FILL("labels", 2, -100, 1);
	CHECK(execute() == F8_ERR_INVALID && strstr(diag.message, "label -100") &&
	      strstr(diag.message, "[1]") && strstr(diag.node, "CrossEntropy"));
	teardown();
	if (!setup("graph g {\n  input %logits : f32[3, 3]\n  input %labels : i64[3]\n"
		   "  %mean = CrossEntropy(%logits, %labels)\n  output %mean\n}\n", NULL)) {
		CHECK(false);
		return;
	}
	FILL("logits", 1, 2, 3, 1, 1, 1, 0, 0, 1000);
	FILL("labels", 2, -100, 1);
	CHECK(execute() == F8_OK);
	EXPECT("mean", ((lse0 - 3) + 1000) / 2);
	// Every row ignored: the mean of nothing is 0.
	FILL("labels", -100, -100, -100);
	CHECK(execute() == F8_OK);
	EXPECT("mean", 0);
	teardown();
}

static void test_binary_broadcast(void) {
	if (!setup("graph g {\n  input %a : f32[2, 3]\n  input %row : f32[3]\n"
		   "  input %col : f32[2, 1]\n  input %i : i64[2]\n  input %j : i64[2]\n"
		   "  %add = Add(%a, %row)\n  %sub = Sub(%col, %row)\n  %mul = Mul(%a, %col)\n"
		   "  %div = Div(%row, %col)\n  %pow = Pow(%a, %col)\n  %idiv = Div(%i, %j)\n"
		   "  %max = Max(%a, %row)\n  %lt = Less(%a, %row)\n  %eq = Equal(%col, %row)\n"
		   "  %w = Where(%lt, %a, %row)\n  %nl = Not(%lt)\n  %and = And(%lt, %eq)\n"
		   "  output %add, %sub, %mul, %div, %pow, %idiv, %max, %lt, %eq, %w, %nl\n"
		   "  output %and\n}\n",
		   NULL))
	{
		CHECK(false);
		return;
	}
	FILL("a", 1, 2, 3, 4, 5, 6);
	FILL("row", 10, 2, 4);
	FILL("col", 2, 4);
	FILL("i", 7, -7);
	FILL("j", 2, 2);
	CHECK(execute() == F8_OK);
	EXPECT("add", 11, 4, 7, 14, 7, 10);
	EXPECT("sub", -8, 0, -2, -6, 2, 0);
	EXPECT("mul", 2, 4, 6, 16, 20, 24);
	EXPECT("div", 5, 1, 2, 2.5, 0.5, 1);
	EXPECT("pow", 1, 4, 9, 256, 625, 1296);
	EXPECT("idiv", 3, -3); // truncated toward zero
	EXPECT("max", 10, 2, 4, 10, 5, 6);
	EXPECT("lt", 1, 0, 1, 1, 0, 0);
	EXPECT("eq", 0, 1, 0, 0, 0, 1);
	EXPECT("w", 1, 2, 3, 4, 2, 4);
	EXPECT("nl", 0, 1, 0, 0, 1, 1);
	EXPECT("and", 0, 0, 0, 0, 0, 0);
	teardown();
}

static void test_moves(void) {
	if (!setup("graph g {\n  input %x : f32[2, 3]\n"
		   "  %r = Reshape(%x) {shape=[3, -1]}\n  %t = Transpose(%x)\n"
		   "  %a, %b = Split(%x) {axis=1, split=[1, 2]}\n  %c = Concat(%b, %a) {axis=-1}\n"
		   "  %s = Slice(%x) {starts=[-1, 2], ends=[-3, -100], steps=[-1, -2]}\n"
		   "  %u = Unsqueeze(%x) {axes=[0, 2]}\n  %e = Expand(%a) {shape=[2, 2]}\n"
		   "  %sq = Squeeze(%u)\n  %ti = Trilu(%x) {k=1}\n  %tl = Trilu(%x) {upper=0}\n"
		   "  output %r, %t, %a, %b, %c, %s, %u, %e, %sq, %ti, %tl\n}\n", NULL))
	{
		CHECK(false);
		return;
	}
	FILL("x", 1, 2, 3, 4, 5, 6);
	CHECK(execute() == F8_OK);
	EXPECT("r", 1, 2, 3, 4, 5, 6);
	EXPECT("t", 1, 4, 2, 5, 3, 6);
	EXPECT("a", 1, 4);
	EXPECT("b", 2, 3, 5, 6);
	EXPECT("c", 2, 3, 1, 5, 6, 4);
	EXPECT("s", 6, 4, 3, 1);
	EXPECT("u", 1, 2, 3, 4, 5, 6);
	EXPECT("e", 1, 1, 4, 4);
	EXPECT("sq", 1, 2, 3, 4, 5, 6);
	EXPECT("ti", 0, 2, 3, 0, 0, 6);
	EXPECT("tl", 1, 0, 0, 4, 5, 0);
	teardown();
}

static void test_symbolic_slice_and_range(void) {
	const int64_t symbols[] = {3};
	if (!setup("graph g {\n  param %table : f32[5, 2]\n"
		   "  %pos = Slice(%table) {starts=[0], ends=[seq]}\n"
		   "  %r = Range() {limit=seq}\n"
		   "  %rf = Range() {start=5, limit=-1, delta=-2, dtype=f32}\n"
		   "  %c = Cast(%r) {to=f32}\n  %u = Unsqueeze(%c) {axes=[1]}\n"
		   "  %k = Constant() {value=f32[1, 2](0.5, 2)}\n  %m = Mul(%u, %k)\n"
		   "  %z = ConstantOfShape() {shape=[seq], value=i32[1](7)}\n  %sh = Shape(%pos)\n"
		   "  output %pos, %r, %rf, %m, %z, %sh\n}\n", symbols))
	{
		CHECK(false);
		return;
	}
	FILL("table", 0, 1, 2, 3, 4, 5, 6, 7, 8, 9);
	CHECK(execute() == F8_OK);
	EXPECT("pos", 0, 1, 2, 3, 4, 5);
	EXPECT("r", 0, 1, 2);
	EXPECT("rf", 5, 3, 1);
	EXPECT("m", 0, 0, 0.5, 2, 1, 4);
	EXPECT("z", 7, 7, 7);
	EXPECT("sh", 3, 2);
	teardown();
}

static void test_casts(void) {
	if (!setup("graph g {\n  input %x : f32[5]\n"
		   "  %b = Cast(%x) {to=bf16}\n  %q = Cast(%x) {to=e4m3}\n"
		   "  %qn = Cast(%x) {to=e4m3, saturate=0}\n  %i = Cast(%x) {to=i32}\n"
		   "  %bl = Cast(%x) {to=bool}\n  %n = IsNaN(%x)\n  %f = Cast(%b) {to=f32}\n"
		   "  output %b, %q, %qn, %i, %bl, %n, %f\n}\n", NULL))
	{
		CHECK(false);
		return;
	}
	FILL("x", 1.00390625, -1000, 0.3, 1e20, NAN);
	CHECK(execute() == F8_OK);
	EXPECT("f", 1.0, -1000, 0.30078125, 9.972771014849226e+19, NAN);
	EXPECT("q", 1.0, -448, 0.3125, 448, NAN);
	EXPECT("qn", 1.0, NAN, 0.3125, NAN, NAN);
	EXPECT("i", 1, -1000, 0, 2147483647, 0);
	EXPECT("bl", 1, 1, 1, 1, 1);
	EXPECT("n", 0, 0, 0, 0, 1);
	teardown();
}

static void test_reductions(void) {
	if (!setup("graph g {\n  input %x : f32[2, 3]\n  input %gi : i64[2]\n"
		   "  input %nd : i64[2, 2]\n"
		   "  %s = ReduceSum(%x) {axes=[1], keepdims=0}\n  %m = ReduceMean(%x) {axes=[0]}\n"
		   "  %mx = ReduceMax(%x)\n  %sm = Softmax(%x)\n  %ls = LogSoftmax(%x) {axis=0}\n"
		   "  %cs = CumSum(%x) {axis=1}\n"
		   "  %ce = CumSum(%x) {axis=1, exclusive=1, reverse=1}\n"
		   "  %g = Gather(%x, %gi) {axis=1}\n  %gn = GatherND(%x, %nd)\n"
		   "  output %s, %m, %mx, %sm, %ls, %cs, %ce, %g, %gn\n}\n", NULL))
	{
		CHECK(false);
		return;
	}
	FILL("x", 1, 2, 3, 4, 6, 8);
	FILL("gi", -1, 0);
	FILL("nd", 1, 2, 0, 1);
	CHECK(execute() == F8_OK);
	EXPECT("s", 6, 18);
	EXPECT("m", 2.5, 4, 5.5);
	EXPECT("mx", 8);
	double z0 = exp(1.0) + exp(2.0) + exp(3.0), z1 = exp(4.0) + exp(6.0) + exp(8.0);
	EXPECT("sm", exp(1.0) / z0, exp(2.0) / z0, exp(3.0) / z0, exp(4.0) / z1, exp(6.0) / z1,
	       exp(8.0) / z1);
	double c0 = log(exp(1.0) + exp(4.0)), c1 = log(exp(2.0) + exp(6.0));
	double c2 = log(exp(3.0) + exp(8.0));
	EXPECT("ls", 1 - c0, 2 - c1, 3 - c2, 4 - c0, 6 - c1, 8 - c2);
	EXPECT("cs", 1, 3, 6, 4, 10, 18);
	EXPECT("ce", 5, 3, 0, 14, 8, 0);
	EXPECT("g", 3, 1, 8, 4);
	EXPECT("gn", 8, 2);
	FILL("gi", 3, 0);
	CHECK(execute() == F8_ERR_INVALID && strstr(diag.message, "index 3"));
	teardown();
}

static void test_moe(void) {
	if (!setup("graph g {\n  input %logits : f32[3, 3]\n  input %x : f32[3, 2]\n"
		   "  param %w : f32[3, 2, 2]\n"
		   "  %p, %i = Router(%logits) {top_k=2, normalize=1}\n"
		   "  %ps, %is = Router(%logits) {top_k=1, score=\"sigmoid\"}\n"
		   "  %d, %n = MoEDispatch(%x, %i) {experts=3}\n"
		   "  %h = GroupedLinear(%d, %w, %n)\n"
		   "  %ht = GroupedLinear(%d, %w, %n) {transpose_weight=1}\n"
		   "  %y = MoECombine(%h, %p, %i)\n"
		   "  output %p, %i, %ps, %is, %d, %n, %h, %ht, %y\n}\n", NULL))
	{
		CHECK(false);
		return;
	}
	// Token 0 prefers experts 2 then 0; token 1 ties all three (lower index first);
	// token 2 prefers 1 then 2.
	FILL("logits", 1, 0, 2, 5, 5, 5, 0, 3, 1);
	FILL("x", 1, 2, 3, 4, 5, 6);
	// Experts 0 and 1 scale by 1 and 2; expert 2's weight is not symmetric, so that the
	// (N, K) and (K, N) layouts differ.
	FILL("w", 1, 0, 0, 1, 2, 0, 0, 2, 0, 3, 1, 0);
	CHECK(execute() == F8_OK);
	double a = exp(2.0) / (exp(2.0) + exp(1.0)), b = 1 - a; // top-2 of a softmax, normalized
	double c = exp(3.0) / (exp(3.0) + exp(1.0));
	EXPECT("p", a, b, 0.5, 0.5, c, 1 - c);
	EXPECT("i", 2, 0, 0, 1, 1, 2);
	EXPECT("ps", 1 / (1 + exp(-2.0)), 1 / (1 + exp(-5.0)), 1 / (1 + exp(-3.0)));
	EXPECT("is", 2, 0, 1);
	// Sorted by expert, stably: e0 <- (t0, k1), (t1, k0); e1 <- (t1, k1), (t2, k0);
	// e2 <- (t0, k0), (t2, k1).
	EXPECT("n", 2, 2, 2);
	EXPECT("d", 1, 2, 3, 4, 3, 4, 5, 6, 1, 2, 5, 6);
	EXPECT("h", 1, 2, 3, 4, 6, 8, 10, 12, 6, 1, 18, 5);
	EXPECT("ht", 1, 2, 3, 4, 6, 8, 10, 12, 2, 3, 6, 15);
	EXPECT("y", 6 * a + b, a + 2 * b, 4.5, 6, 10 * c + 18 * (1 - c), 12 * c + 5 * (1 - c));
	teardown();
	// Counts that add up to fewer rows than x has (an all-to-all's receive buffer of a
	// static size): rows 3 and 4 are padding, never read, and their output rows zeros.
	if (!setup("graph g {\n  input %x : f32[5, 2]\n  input %n : i64[3]\n"
		   "  param %w : f32[3, 2, 2]\n  %h = GroupedLinear(%x, %w, %n)\n"
		   "  %ht = GroupedLinear(%x, %w, %n) {transpose_weight=1}\n  output %h, %ht\n}\n",
		   NULL))
	{
		CHECK(false);
		return;
	}
	FILL("x", 1, 2, 3, 4, 5, 6, 100, -200, 300, 400);
	FILL("w", 1, 0, 0, 1, 2, 0, 0, 2, 0, 3, 1, 0);
	FILL("n", 1, 2, 2);
	CHECK(execute() == F8_OK);
	EXPECT("h", 1, 2, 6, 8, 10, 12, -600, 100, 1200, 300);
	FILL("n", 1, 0, 2);
	CHECK(execute() == F8_OK);
	EXPECT("h", 1, 2, 12, 3, 18, 5, 0, 0, 0, 0);
	EXPECT("ht", 1, 2, 4, 9, 6, 15, 0, 0, 0, 0);
	expect_zero_tail("h", 6);
	expect_zero_tail("ht", 6);
	FILL("n", 0, 0, 0); // no row counted: all padding
	CHECK(execute() == F8_OK);
	EXPECT("h", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
	// Counts past the rows and a negative count are still refused.
	FILL("n", 1, 2, 3);
	CHECK(execute() == F8_ERR_INVALID && strstr(diag.message, "do not fit the 5 rows"));
	FILL("n", 1, -1, 2);
	CHECK(execute() == F8_ERR_INVALID && strstr(diag.message, "do not fit"));
	teardown();
}

static void test_fp8(void) {
	if (!setup("graph g {\n  input %x : f32[2, 3]\n  input %scale : f32[]\n"
		   "  %q, %si = Quantize(%x) {to=e4m3}\n  %dq = Dequantize(%q, %si) {to=f32}\n"
		   "  %qs = Quantize(%x, %scale) {to=e5m2}\n  %am = Amax(%x)\n"
		   "  %c, %ct, %csi, %ctsi, %ca = CastTranspose(%x, %scale) {to=e4m3}\n"
		   "  %ql = QuantizeLinear(%x, %scale) {to=i8}\n"
		   "  %dl = DequantizeLinear(%ql, %scale)\n"
		   "  output %q, %si, %dq, %qs, %am, %c, %ct, %csi, %ctsi, %ca, %ql, %dl\n}\n",
		   NULL))
	{
		CHECK(false);
		return;
	}
	FILL("x", 1, -2, 3, 0.5, 100, -224);
	FILL("scale", 2);
	CHECK(execute() == F8_OK);
	// amax 224: scale 448 / 224 = 2; codes of 2, -4, 6, 1, 200 (-> 192, e4m3's neighbour
	// with an even mantissa at the tie 200 = 192 + 8), -448.
	EXPECT("si", 0.5);
	EXPECT("q", 2, -4, 6, 1, 192, -448);
	EXPECT("dq", 1, -2, 3, 0.5, 96, -224);
	EXPECT("am", 224);
	EXPECT("qs", 2, -4, 6, 1, 192, -448);
	EXPECT("c", 2, -4, 6, 1, 192, -448);
	EXPECT("ct", 2, 1, -4, 192, 6, -448);
	EXPECT("csi", 0.5);
	EXPECT("ctsi", 0.5);
	EXPECT("ca", 224);
	// x / 2 rounded half to even: 0.5, -1, 1.5, 0.25, 50, -112 -> 0, -1, 2, 0, 50, -112.
	EXPECT("ql", 0, -1, 2, 0, 50, -112);
	EXPECT("dl", 0, -2, 4, 0, 100, -224);
	teardown();
}

static void test_collectives(void) {
	if (!setup("graph g {\n  input %x : f32[2]\n  %r = AllReduce(%x) {group=\"tp\"}\n"
		   "  %gth = AllGather(%r) {group=\"tp\", axis=0, ranks=1}\n  output %gth\n}\n",
		   NULL))
	{
		CHECK(false);
		return;
	}
	FILL("x", 3, 4);
	CHECK(execute() == F8_OK);
	EXPECT("gth", 3, 4);
	teardown();
	if (!setup("graph g {\n  input %x : f32[2]\n"
		   "  %g = AllGather(%x) {group=\"dp\", axis=0, ranks=2}\n  output %g\n}\n", NULL))
	{
		CHECK(false);
		return;
	}
	CHECK(execute() == F8_ERR_UNSUPPORTED && strstr(diag.hint, "MPI") &&
	      strstr(diag.hint, "distributed"));
	teardown();
}

/* The f32 fast paths against the generic path. */

static uint64_t random_state = 12345;

static double random_uniform(void) {
	random_state = random_state * 6364136223846793005ull + 1442695040888963407ull;
	return (double)(random_state >> 11) / 9007199254740992.0 * 4.0 - 2.0;
}

/* A copy of `tensor` whose data sits one byte past an aligned address, in *storage. */
static f8_rt_tensor misaligned(const f8_rt_tensor *tensor, char **storage) {
	f8_rt_tensor copy = *tensor;
	*storage = malloc(tensor->n_bytes + 16);
	copy.data = *storage + 1;
	copy.owned = false;
	if (tensor->n_bytes)
		memcpy(copy.data, tensor->data, tensor->n_bytes);
	return copy;
}

/* Runs the last node of the graph in `text` directly, on random inputs, aligned and misaligned,
 * and checks that every output has the same bytes both ways. */
static void check_paths_agree(const char *text) {
	if (!setup(text, NULL)) {
		CHECK(false);
		return;
	}
	const f8_node *node = &graph->nodes[graph->order[graph->n_order - 1]];
	const f8_rt_tensor *inputs[8], *shifted_inputs[8];
	f8_rt_tensor copies[8], outputs[4], shifted_outputs[4];
	char *storage[12] = {0};
	for (uint32_t i = 0; i < node->n_inputs; i++) {
		f8_rt_tensor *leaf = f8_cpu_executor_leaf(executor, node->inputs[i]);
		for (int64_t j = 0; j < f8_rt_tensor_numel(leaf); j++)
			f8_rt_tensor_set(leaf, j, f8_dtype_is_integer(leaf->dtype)
							  ? (double)(j % 3) : random_uniform());
		inputs[i] = leaf;
		copies[i] = misaligned(leaf, &storage[i]);
		shifted_inputs[i] = &copies[i];
	}
	for (uint32_t i = 0; i < node->n_outputs; i++) {
		const f8_type *type = &graph->values[node->outputs[i]].type;
		int64_t dims[F8_MAX_RANK];
		f8_cpu_executor_dims(executor, type, dims);
		f8_rt_tensor_create(type->dtype, type->shape.rank, dims, &outputs[i], &diag);
		shifted_outputs[i] = misaligned(&outputs[i], &storage[8 + i]);
	}
	f8_cpu_kernel_call call = {.graph = graph, .node = node, .inputs = inputs,
				   .outputs = outputs};
	f8_cpu_kernel_call shifted = {.graph = graph, .node = node, .inputs = shifted_inputs,
				      .outputs = shifted_outputs};
	CHECK(f8_cpu_kernel_get(node->op)(&call, &diag) == F8_OK);
	CHECK(f8_cpu_kernel_get(node->op)(&shifted, &diag) == F8_OK);
	for (uint32_t i = 0; i < node->n_outputs; i++) {
		size_t n = outputs[i].n_bytes;
		bool same = !n || memcmp(outputs[i].data, shifted_outputs[i].data, n) == 0;
		if (!same)
			printf("  %s: output %u differs between the f32 and the generic path\n",
			       f8_op_name(node->op), i);
		CHECK(same);
		f8_rt_tensor_destroy(&outputs[i]);
	}
	for (int i = 0; i < 12; i++)
		free(storage[i]);
	teardown();
}

static void test_fast_paths(void) {
	check_paths_agree("graph g {\n  input %a : f32[4, 1, 300]\n  input %b : f32[3, 1]\n"
			  "  %y = Add(%a, %b)\n  output %y\n}\n");
	check_paths_agree("graph g {\n  input %x : f32[3, 1100]\n  %y = Gelu(%x) "
			  "{approximate=\"tanh\"}\n  output %y\n}\n");
	check_paths_agree("graph g {\n  input %x : f32[3, 40]\n  param %g : f32[40]\n"
			  "  param %b : f32[40]\n  %y, %m, %r = LayerNorm(%x, %g, %b)\n"
			  "  output %y, %m, %r\n}\n");
	check_paths_agree("graph g {\n  input %x : f32[3, 40]\n  param %g : f32[40]\n"
			  "  %y, %r = RMSNorm(%x, %g)\n  output %y, %r\n}\n");
	check_paths_agree("graph g {\n  input %x : f32[3, 7, 5]\n  %y = Softmax(%x) {axis=1}\n"
			  "  output %y\n}\n");
	check_paths_agree("graph g {\n  input %q : f32[2, 4, 5, 8]\n  input %k : f32[2, 2, 6, 8]\n"
			  "  input %v : f32[2, 2, 6, 3]\n  input %m : f32[5, 6]\n"
			  "  %o, %l = Attention(%q, %k, %v, %m) {causal=1}\n  output %o, %l\n}\n");
	check_paths_agree("graph g {\n  input %x : f32[4, 9]\n  input %l : i64[4]\n"
			  "  %y, %s = CrossEntropy(%x, %l)\n  output %y, %s\n}\n");
	check_paths_agree("graph g {\n  input %x : f32[5, 6]\n  param %w : f32[7, 6]\n"
			  "  param %b : f32[7]\n  %y = Linear(%x, %w, %b)\n  output %y\n}\n");
	check_paths_agree("graph g {\n  input %x : f32[2, 3, 4, 8]\n  input %c : f32[4, 6]\n"
			  "  input %s : f32[4, 6]\n  %y = Rope(%x, %c, %s)\n  output %y\n}\n");
	check_paths_agree("graph g {\n  input %x : f32[2, 12]\n  %y = SwiGLU(%x)\n"
			  "  output %y\n}\n");
}

/* The BF16 fast path of f8_rt_tensor_get/set is ir/fp8.h's conversion, NaNs included. */
static void test_bf16_fast_path(void) {
	uint16_t code = 0;
	f8_rt_tensor one = {.dtype = F8_DTYPE_BF16, .rank = 0, .data = &code, .n_bytes = 2};
	int decoded = 0, encoded = 0;
	for (uint32_t bits = 0; bits <= 0xFFFF; bits++) {
		code = (uint16_t)bits;
		double got = f8_rt_tensor_get(&one, 0);
		float want = f8_float_decode(F8_DTYPE_BF16, bits);
		decoded += (isnan(got) && isnan(want)) || got == (double)want;
		// The lower halves at and around the tie, and the ends.
		static const uint32_t lows[] = {0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x1234, 0xC000};
		for (size_t l = 0; l < sizeof lows / sizeof lows[0]; l++) {
			uint32_t wide = bits << 16 | lows[l];
			float value;
			memcpy(&value, &wide, 4);
			encoded += f8_rt_bf16_encode(value) ==
				   (uint16_t)f8_float_encode(F8_DTYPE_BF16, value, false);
		}
	}
	CHECK(decoded == 0x10000);
	CHECK(encoded == 8 * 0x10000);
	// A store through f8_rt_tensor_set is the same rounding, from double through float.
	f8_rt_tensor_set(&one, 0, 1.0 + 0x1p-8); // a tie: to even, 1.0
	CHECK(code == 0x3F80);
	f8_rt_tensor_set(&one, 0, 1.0 + 0x1p-8 + 0x1p-20); // past the tie: up
	CHECK(code == 0x3F81);
	f8_rt_tensor_set(&one, 0, 0x1.ffp127); // past the largest finite: inf
	CHECK(code == 0x7F80);
}

/* Runs the last node of the graph in `text` directly with allocation failing after 0, 1, ...
 * allocations: each failure is F8_ERR_NOMEM and leaks nothing (the sanitizer build checks),
 * until enough allocations succeed. */
static void check_allocation_failures(const char *text) {
	if (!setup(text, NULL)) {
		CHECK(false);
		return;
	}
	const f8_node *node = &graph->nodes[graph->order[graph->n_order - 1]];
	const f8_rt_tensor *inputs[8];
	f8_rt_tensor outputs[8];
	for (uint32_t i = 0; i < node->n_inputs; i++)
		inputs[i] = f8_cpu_executor_leaf(executor, node->inputs[i]);
	for (uint32_t i = 0; i < node->n_outputs; i++) {
		const f8_type *type = &graph->values[node->outputs[i]].type;
		int64_t dims[F8_MAX_RANK];
		f8_cpu_executor_dims(executor, type, dims);
		f8_rt_tensor_create(type->dtype, type->shape.rank, dims, &outputs[i], &diag);
	}
	f8_cpu_kernel_call call = {.graph = graph, .node = node, .inputs = inputs,
				   .outputs = outputs};
	f8_status status = F8_ERR_NOMEM;
	int failures = 0;
	for (long n = 0; status == F8_ERR_NOMEM && n < 16; n++) {
		f8_diag_clear(&diag);
		test_fail_allocations_after(n);
		status = f8_cpu_kernel_get(node->op)(&call, &diag);
		test_allocations_restore();
		failures += status == F8_ERR_NOMEM;
		CHECK(status == F8_OK || (status == F8_ERR_NOMEM && diag.message[0]));
	}
	CHECK(status == F8_OK && failures > 0);
	for (uint32_t i = 0; i < node->n_outputs; i++)
		f8_rt_tensor_destroy(&outputs[i]);
	teardown();
}

static void test_allocation_failures(void) {
	check_allocation_failures("graph g {\n  input %x : bf16[3, 4]\n  param %w : bf16[5, 4]\n"
				  "  %y = Linear(%x, %w)\n  output %y\n}\n");
	check_allocation_failures("graph g {\n  input %x : f32[3, 4]\n  param %g : f32[4]\n"
				  "  %y = LayerNorm(%x, %g)\n  output %y\n}\n");
	check_allocation_failures("graph g {\n  input %q : f32[1, 2, 3, 4]\n"
				  "  input %k : f32[1, 1, 3, 4]\n  input %v : f32[1, 1, 3, 4]\n"
				  "  %o = Attention(%q, %k, %v)\n  output %o\n}\n");
	check_allocation_failures("graph g {\n  input %x : f32[3, 4]\n  input %l : i64[3]\n"
				  "  %y = CrossEntropy(%x, %l)\n  output %y\n}\n");
	check_allocation_failures("graph g {\n  input %x : f32[3, 4]\n  input %i : i64[3, 2]\n"
				  "  %d, %n = MoEDispatch(%x, %i) {experts=2}\n  output %d, %n\n}\n");
	check_allocation_failures("graph g {\n  input %x : bf16[3, 4]\n"
				  "  %q, %s = Quantize(%x) {to=e4m3}\n  output %q, %s\n}\n");
	check_allocation_failures("graph g {\n  input %x : f32[3, 4]\n"
				  "  %y = CumSum(%x) {axis=0}\n  output %y\n}\n");
	check_allocation_failures("graph g {\n  input %x : bf16[3, 4]\n"
				  "  %c, %ct, %ci, %cti, %ca = CastTranspose(%x) {to=e4m3, "
				  "block=[1, 128]}\n  output %c\n}\n");
	check_allocation_failures("graph g {\n  input %a : e4m3[3, 4]\n  input %b : e4m3[5, 4]\n"
				  "  input %sa : f32[]\n  input %sb : f32[]\n"
				  "  %y = FP8Gemm(%a, %b, %sa, %sb) {to=bf16, gemm=\"fwd\"}\n"
				  "  output %y\n}\n");
	check_allocation_failures("graph g {\n  input %a : e4m3[3, 4]\n  input %b : e4m3[5, 4]\n"
				  "  input %sa : f32[3, 2]\n  input %sb : f32[]\n"
				  "  %y = FP8Gemm(%a, %b, %sa, %sb) {to=f32, gemm=\"fwd\", "
				  "a_block=[1, 2]}\n  output %y\n}\n");
}

int main(void) {
	test_linear();
	test_matmul_gemm();
	test_embedding();
	test_norms();
	test_rms_norm_bf16();
	test_activations();
	test_rope();
	test_attention();
	test_cross_entropy();
	test_binary_broadcast();
	test_moves();
	test_symbolic_slice_and_range();
	test_casts();
	test_reductions();
	test_moe();
	test_fp8();
	test_collectives();
	test_fast_paths();
	test_bf16_fast_path();
	test_allocation_failures();
	return test_finish();
}
