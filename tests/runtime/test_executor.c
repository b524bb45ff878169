/*
 * The CPU executor's own contract (runtime/cpu/executor.h), on small text-IR graphs: phases,
 * values freed or kept, updates moved into leaves only after a whole run succeeded, errors for
 * a value of a phase that did not run and for a kernel's data error, sizes bound at creation,
 * an FP8 step's state: cast-phase caches read by a later forward, scaling frozen for
 * evaluation; and micro-batches in flight on contexts of their own, in pipeline parallelism's
 * 1F1B and interleaved orders, with the runs of one model chunk.
 */
#include <math.h>   // fabs, sqrt
#include <stdio.h>  // sprintf, snprintf
#include <stdlib.h> // malloc, free
#include <string.h> // strlen, strstr

#include "ir/pipeline_chunks.h"   // f8_pipeline_chunks, f8_pipeline_order_chunks
#include "ir/text.h"              // f8_text_parse
#include "ir/verify.h"            // f8_graph_verify
#include "passes/pipeline.h"      // f8_pipeline_run
#include "passes/schedule.h"      // f8_pass_schedule_run
#include "runtime/cpu/executor.h" // f8_cpu_executor
#include "runtime/pipeline_schedule.h" // f8_pipeline_1f1b
#include "tests/test_support.h"   // CHECK, test_finish

static f8_graph *parse(const char *text) {
	f8_graph *graph = NULL;
	f8_diag diag;
	f8_diag_clear(&diag);
	if (f8_text_parse(text, strlen(text), "test", &graph, &diag) ||
	    f8_pipeline_run(graph, "canonicalize", true, &diag)) {
		f8_diag_print(&diag, stdout);
		f8_graph_destroy(graph);
		return NULL;
	}
	return graph;
}

static f8_value_id id(const f8_graph *graph, const char *name) {
	return f8_graph_find_value(graph, name, strlen(name));
}

static float get(const f8_rt_tensor *tensor, int64_t i) {
	return tensor ? (float)f8_rt_tensor_get(tensor, i) : -1e30f;
}

/* A step's shape: x * w in fwd, a "gradient" in bwd, an update of w in opt. */
static const char *const step_graph =
	"graph step {\n"
	"  input %x : f32[n]\n"
	"  param %w : f32[n]\n"
	"  state %count : f32[]\n"
	"  %y = Mul(%x, %w)\n"
	"  %loss = ReduceSum(%y) {keepdims=0}\n"
	"  %g = Mul(%y, %x) phase=bwd\n"
	"  %w_next = Sub(%w, %g) phase=opt\n"
	"  %one = Constant() {value=f32[](1)} phase=opt\n"
	"  %count_next = Add(%count, %one) phase=opt\n"
	"  output %loss\n"
	"  update %w <- %w_next\n"
	"  update %count <- %count_next\n"
	"}\n";

static void test_phases_and_updates(void) {
	f8_graph *graph = parse(step_graph);
	CHECK(graph != NULL);
	if (!graph)
		return;
	f8_diag diag;
	f8_diag_clear(&diag);
	int64_t n = 3;
	f8_cpu_executor *executor = NULL;
	CHECK(f8_cpu_executor_create(graph, &n, &executor, &diag) == F8_OK);
	f8_rt_tensor *x = f8_cpu_executor_leaf(executor, id(graph, "x"));
	f8_rt_tensor *w = f8_cpu_executor_leaf(executor, id(graph, "w"));
	CHECK(x && w && x->dims[0] == 3 && f8_cpu_executor_leaf(executor, id(graph, "y")) == NULL);
	for (int i = 0; i < 3; i++) {
		f8_rt_tensor_set(x, i, i + 1.0);
		f8_rt_tensor_set(w, i, 0.5 * (i + 1));
	}
	// fwd only: the loss is kept, the intermediate y is gone, nothing is updated.
	CHECK(f8_cpu_executor_run(executor, F8_PHASE_BIT(F8_PHASE_FWD), &diag) == F8_OK);
	CHECK(fabs(get(f8_cpu_executor_value(executor, id(graph, "loss")), 0) - 7.0) < 1e-6);
	CHECK(f8_cpu_executor_value(executor, id(graph, "y")) == NULL);
	// opt alone reads %g, made in bwd: an error naming it, and w stays as it was.
	CHECK(f8_cpu_executor_run(executor, F8_PHASE_BIT(F8_PHASE_OPT), &diag) == F8_ERR_ARGUMENT);
	CHECK(strstr(diag.message, "%g") && strstr(diag.message, "bwd"));
	CHECK(get(f8_cpu_executor_value(executor, id(graph, "w")), 1) == 1.0f);
	// The whole step: w -= x * x * w, count += 1; the updates moved the new values in.
	f8_diag_clear(&diag);
	CHECK(f8_cpu_executor_run(executor, F8_PHASES_ALL, &diag) == F8_OK);
	const f8_rt_tensor *w_after = f8_cpu_executor_value(executor, id(graph, "w"));
	CHECK(get(w_after, 0) == 0.0f && get(w_after, 1) == 1.0f - 4.0f && get(w_after, 2) == -12.0f);
	CHECK(get(f8_cpu_executor_value(executor, id(graph, "count")), 0) == 1.0f);
	CHECK(f8_cpu_executor_value(executor, id(graph, "w_next")) == NULL);
	CHECK(f8_cpu_executor_run(executor, F8_PHASES_ALL, &diag) == F8_OK);
	CHECK(get(f8_cpu_executor_value(executor, id(graph, "count")), 0) == 2.0f);
	// keep_all keeps every value, and the updates copy instead of moving.
	f8_cpu_executor_keep_all(executor, true);
	CHECK(f8_cpu_executor_run(executor, F8_PHASES_ALL, &diag) == F8_OK);
	CHECK(f8_cpu_executor_value(executor, id(graph, "y")) != NULL);
	CHECK(get(f8_cpu_executor_value(executor, id(graph, "w_next")), 0) ==
	      get(f8_cpu_executor_value(executor, id(graph, "w")), 0));
	CHECK(get(f8_cpu_executor_value(executor, id(graph, "count")), 0) == 3.0f);
	f8_cpu_executor_destroy(executor);
	f8_graph_destroy(graph);
}

/* A kernel's data error fails the run, names the node, and applies no update. */
static void test_failed_run_changes_nothing(void) {
	f8_graph *graph = parse("graph g {\n"
				"  input %ids : i64[2]\n"
				"  param %table : f32[4, 2]\n"
				"  %rows = Embedding(%ids, %table)\n"
				"  %sum = ReduceSum(%rows) {keepdims=0}\n"
				"  %scaled = Mul(%table, %table)\n"
				"  output %sum\n"
				"  update %table <- %scaled\n"
				"}\n");
	CHECK(graph != NULL);
	if (!graph)
		return;
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_cpu_executor *executor = NULL;
	CHECK(f8_cpu_executor_create(graph, NULL, &executor, &diag) == F8_OK);
	f8_rt_tensor *ids = f8_cpu_executor_leaf(executor, id(graph, "ids"));
	f8_rt_tensor *table = f8_cpu_executor_leaf(executor, id(graph, "table"));
	for (int i = 0; i < 8; i++)
		f8_rt_tensor_set(table, i, 3.0);
	f8_rt_tensor_set(ids, 0, 1);
	f8_rt_tensor_set(ids, 1, 7); // out of the table's 4 rows
	CHECK(f8_cpu_executor_run(executor, F8_PHASES_ALL, &diag) != F8_OK);
	CHECK(diag.node[0] && strstr(diag.node, "Embedding"));
	CHECK(get(f8_cpu_executor_value(executor, id(graph, "table")), 0) == 3.0f);
	f8_rt_tensor_set(ids, 1, 2);
	f8_diag_clear(&diag);
	CHECK(f8_cpu_executor_run(executor, F8_PHASES_ALL, &diag) == F8_OK);
	CHECK(get(f8_cpu_executor_value(executor, id(graph, "sum")), 0) == 12.0f);
	CHECK(get(f8_cpu_executor_value(executor, id(graph, "table")), 0) == 9.0f);
	f8_cpu_executor_destroy(executor);
	f8_graph_destroy(graph);
}

/* Sizes are checked when they are bound: at least 1, and no overflow. */
static void test_bad_sizes(void) {
	f8_graph *graph = parse("graph g {\n  input %x : f32[n, n, n]\n  %y = Neg(%x)\n"
				"  output %y\n}\n");
	CHECK(graph != NULL);
	if (!graph)
		return;
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_cpu_executor *executor = NULL;
	int64_t zero = 0, huge = INT64_MAX / 2;
	CHECK(f8_cpu_executor_create(graph, &zero, &executor, &diag) == F8_ERR_ARGUMENT);
	CHECK(executor == NULL && strstr(diag.message, "at least 1"));
	CHECK(f8_cpu_executor_create(graph, &huge, &executor, &diag) != F8_OK);
	CHECK(executor == NULL);
	f8_graph_destroy(graph);
}

/* A node with more operands than any fixed array would hold: a GlobalNorm over hundreds of
 * gradients, or an exporter's wide Concat. */
static void test_wide_node(void) {
	enum { N = 300 };
	char *text = malloc(64 * N + 256), *at = text;
	at += sprintf(at, "graph wide {\n");
	for (int i = 0; i < N; i++)
		at += sprintf(at, "  param %%p%d : f32[2]\n", i);
	at += sprintf(at, "  %%all = Concat(");
	for (int i = 0; i < N; i++)
		at += sprintf(at, "%s%%p%d", i ? ", " : "", i);
	at += sprintf(at, ") {axis=0}\n  %%norm = GlobalNorm(");
	for (int i = 0; i < N; i++)
		at += sprintf(at, "%s%%p%d", i ? ", " : "", i);
	sprintf(at, ")\n  output %%all, %%norm\n}\n");
	f8_graph *graph = parse(text);
	free(text);
	CHECK(graph != NULL);
	if (!graph)
		return;
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_cpu_executor *executor = NULL;
	CHECK(f8_cpu_executor_create(graph, NULL, &executor, &diag) == F8_OK);
	for (int i = 0; executor && i < N; i++) {
		char name[16];
		snprintf(name, sizeof name, "p%d", i);
		f8_rt_tensor *p = f8_cpu_executor_leaf(executor, id(graph, name));
		f8_rt_tensor_set(p, 0, i);
		f8_rt_tensor_set(p, 1, 2.0);
	}
	CHECK(executor && f8_cpu_executor_run(executor, F8_PHASES_ALL, &diag) == F8_OK);
	const f8_rt_tensor *all = executor ? f8_cpu_executor_value(executor, id(graph, "all")) : NULL;
	CHECK(all && all->dims[0] == 2 * N && get(all, 2 * (N - 1)) == N - 1);
	// sqrt(sum of i^2 for i < N + N * 4)
	double expected = sqrt((N - 1.0) * N * (2 * N - 1.0) / 6 + 4.0 * N);
	const f8_rt_tensor *norm = executor ? f8_cpu_executor_value(executor, id(graph, "norm")) : NULL;
	CHECK(norm && fabs(get(norm, 0) - expected) < 1e-3);
	f8_cpu_executor_destroy(executor);
	f8_graph_destroy(graph);
}

/* One run that makes an update's source and then reads the leaf would read stale state. */
static void test_stale_read_refused(void) {
	f8_graph *graph = parse("graph g {\n"
				"  input %g : f32[2]\n"
				"  state %acc : f32[2]\n"
				"  %acc_next = Add(%acc, %g) phase=bwd\n"
				"  %use = Neg(%acc) phase=opt\n"
				"  output %use\n"
				"  update %acc <- %acc_next\n"
				"}\n");
	CHECK(graph != NULL);
	if (!graph)
		return;
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_cpu_executor *executor = NULL;
	CHECK(f8_cpu_executor_create(graph, NULL, &executor, &diag) == F8_OK);
	CHECK(f8_cpu_executor_run(executor, F8_PHASES_ALL, &diag) == F8_ERR_ARGUMENT);
	CHECK(strstr(diag.message, "%acc") && strstr(diag.message, "stale"));
	f8_diag_clear(&diag);
	CHECK(f8_cpu_executor_run(executor, F8_PHASE_BIT(F8_PHASE_BWD), &diag) == F8_OK);
	CHECK(f8_cpu_executor_run(executor, F8_PHASE_BIT(F8_PHASE_OPT), &diag) == F8_OK);
	f8_cpu_executor_destroy(executor);
	f8_graph_destroy(graph);
}

/*
 * An FP8 step's state: phase cast quantizes the weight into cache leaves (and updates the
 * weights' scaling table), which a later fwd run reads; while scaling is frozen the table stays
 * as it was, but the caches still follow the weight.
 */
static const char *const fp8_step_graph =
	"graph fp8step {\n"
	"  input %x : f32[2, 4]\n"
	"  param %w : f32[3, 4]\n"
	"  scale %scale : f32[1]\n"
	"  amax_history %history : f32[2, 1]\n"
	"  state %nonfinite : i64[]\n"
	"  cache %w8 : e4m3[3, 4]\n"
	"  cache %w8_scale_inv : f32[]\n"
	"  %w8_next, %w8_scale_inv_next, %w_amax = Quantize(%w, %scale) {to=e4m3, slot=0} "
	"phase=cast\n"
	"  %scale_next, %history_next, %nonfinite_next = ScalingUpdate(%scale, %history, "
	"%nonfinite, %w_amax) {format=e4m3, algo=\"most_recent\"} phase=cast\n"
	"  %x8, %x8_scale_inv = Quantize(%x) {to=e4m3}\n"
	"  %y = FP8Gemm(%x8, %w8, %x8_scale_inv, %w8_scale_inv) {to=f32, gemm=\"fwd\"}\n"
	"  output %y\n"
	"  update %w8 <- %w8_next\n"
	"  update %w8_scale_inv <- %w8_scale_inv_next\n"
	"  update %scale <- %scale_next\n"
	"  update %history <- %history_next\n"
	"  update %nonfinite <- %nonfinite_next\n"
	"}\n";

/* y against want (2 x 3) to float32 precision: the scale_invs 1/224 and 1/28 are rounded. */
static bool y_is(const f8_cpu_executor *executor, const f8_graph *graph, const double *want) {
	const f8_rt_tensor *y = f8_cpu_executor_value(executor, id(graph, "y"));
	bool ok = y != NULL;
	for (int i = 0; ok && i < 6; i++)
		ok = fabs(get(y, i) - want[i]) <= 1e-6 * (1 + fabs(want[i]));
	return ok;
}

static void test_cast_phase_and_frozen_scaling(void) {
	f8_graph *graph = parse(fp8_step_graph);
	CHECK(graph != NULL);
	if (!graph)
		return;
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_cpu_executor *executor = NULL;
	CHECK(f8_cpu_executor_create(graph, NULL, &executor, &diag) == F8_OK);
	if (!executor) {
		f8_graph_destroy(graph);
		return;
	}
	const double x[] = {1, 0, 0, 0, 0, 1, 2, 0};
	const double w[] = {1, 2, -4, 0.5, 8, -16, 0.25, 3, 1, 1, 1, 1};
	f8_rt_tensor *xl = f8_cpu_executor_leaf(executor, id(graph, "x"));
	f8_rt_tensor *wl = f8_cpu_executor_leaf(executor, id(graph, "w"));
	for (int i = 0; i < 8; i++)
		f8_rt_tensor_set(xl, i, x[i]);
	for (int i = 0; i < 12; i++)
		f8_rt_tensor_set(wl, i, w[i]);
	f8_rt_tensor_set(f8_cpu_executor_leaf(executor, id(graph, "scale")), 0, 1.0);
	uint32_t fwd = F8_PHASE_BIT(F8_PHASE_FWD), cast = F8_PHASE_BIT(F8_PHASE_CAST);
#define STATE(name) get(f8_cpu_executor_value(executor, id(graph, name)), 0)
	// Before any cast the caches are zero: the forward reads them, not the weight.
	CHECK(f8_cpu_executor_run(executor, fwd, &diag) == F8_OK);
	CHECK(y_is(executor, graph, (const double[]){0, 0, 0, 0, 0, 0}));
	// Cast at scale 1 (every weight is an E4M3 value): the next forward is x w^T; the table
	// records amax 16 and moves the scale to 448 / 16.
	CHECK(f8_cpu_executor_run(executor, cast, &diag) == F8_OK);
	CHECK(STATE("scale") == 28.0f && STATE("history") == 16.0f && STATE("w8_scale_inv") == 1.0f);
	CHECK(f8_cpu_executor_run(executor, fwd, &diag) == F8_OK);
	CHECK(y_is(executor, graph, (const double[]){1, 8, 1, -6, -15.5, 3}));
	// Frozen: halve the weight; the cast remakes the caches at the kept scale 28 (codes of
	// w / 2 * 28, all exact for the columns x reads), but the table does not move.
	f8_cpu_executor_freeze_scaling(executor, true);
	for (int i = 0; i < 12; i++)
		f8_rt_tensor_set(wl, i, w[i] / 2);
	CHECK(f8_cpu_executor_run(executor, cast, &diag) == F8_OK);
	CHECK(STATE("scale") == 28.0f && STATE("history") == 16.0f && STATE("nonfinite") == 0);
	CHECK(get(f8_cpu_executor_value(executor, id(graph, "history")), 1) == 0.0f);
	CHECK(STATE("scale_next") == 56.0f); // what an unfrozen run would have applied
	CHECK(STATE("w8") == 14.0f && STATE("w8_scale_inv") == 1.0f / 28.0f);
	CHECK(f8_cpu_executor_run(executor, fwd, &diag) == F8_OK);
	CHECK(y_is(executor, graph, (const double[]){0.5, 4, 0.5, -3, -7.75, 1.5}));
	// Thawed: the next cast records amax 8 (the history rolls) and the scale follows it.
	f8_cpu_executor_freeze_scaling(executor, false);
	CHECK(f8_cpu_executor_run(executor, cast, &diag) == F8_OK);
	CHECK(STATE("scale") == 56.0f && STATE("history") == 8.0f);
	CHECK(get(f8_cpu_executor_value(executor, id(graph, "history")), 1) == 16.0f);
#undef STATE
	f8_cpu_executor_destroy(executor);
	f8_graph_destroy(graph);
}

/* Two micro-batches in flight on two contexts (pipeline parallelism's 1F1B): each forward
 * keeps its %y in its context's slab for its backward, which the other micro-batch's forward,
 * run between them, does not touch; the accumulated gradient is the two micro-batches'. A
 * backward that continues a context whose forward did not keep %y is refused, naming it; so
 * are contexts without a slab plan. */
static void test_contexts(void) {
	f8_graph *graph = parse("graph micro {\n"
				"  input %x : f32[3]\n"
				"  param %w : f32[3]\n"
				"  state %acc : f32[3]\n"
				"  %y = Mul(%x, %w)\n"
				"  %loss = ReduceSum(%y) {keepdims=0}\n"
				"  %g = Mul(%y, %x) phase=bwd\n"
				"  %acc_next = Add(%acc, %g) phase=bwd\n"
				"  output %loss\n"
				"  update %acc <- %acc_next\n"
				"}\n");
	CHECK(graph != NULL);
	if (!graph)
		return;
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_cpu_executor *executor = NULL;
	CHECK(f8_cpu_executor_create(graph, NULL, &executor, &diag) == F8_OK);
	f8_executor *core = executor ? f8_cpu_executor_core(executor) : NULL;
	CHECK(core && f8_executor_set_contexts(core, 2, &diag) == F8_ERR_UNSUPPORTED &&
	      strstr(diag.message, "slab plan"));
	f8_cpu_executor_destroy(executor);
	executor = NULL;
	f8_diag_clear(&diag);
	CHECK(f8_pass_schedule_run(graph, NULL, NULL, &diag) == F8_OK);
	CHECK(f8_cpu_executor_create(graph, NULL, &executor, &diag) == F8_OK);
	if (!executor) {
		f8_graph_destroy(graph);
		return;
	}
	core = f8_cpu_executor_core(executor);
	CHECK(f8_executor_set_contexts(core, 2, &diag) == F8_OK);
	CHECK(f8_executor_memory_of(core).contexts == 2);
	f8_value_id x = id(graph, "x");
	f8_rt_tensor *w = f8_cpu_executor_leaf(executor, id(graph, "w"));
	for (int i = 0; i < 3; i++)
		f8_rt_tensor_set(w, i, i + 1.0);
	const double xs[2][3] = {{1, 2, 3}, {-1, 0.5, 2}};
	f8_rt_tensor batch;
	CHECK(f8_rt_tensor_create(F8_DTYPE_F32, 1, (const int64_t[]){3}, &batch, &diag) == F8_OK);
	const uint32_t fwd = F8_PHASE_BIT(F8_PHASE_FWD) | F8_RUN_KEEP;
	const uint32_t bwd = F8_PHASE_BIT(F8_PHASE_BWD) | F8_RUN_CONTINUE;
	// forward 0, forward 1, backward 0, backward 1
	const struct { uint32_t phases, context; } order[4] = {{fwd, 0}, {fwd, 1}, {bwd, 0}, {bwd, 1}};
	for (int r = 0; r < 4; r++) {
		for (int i = 0; i < 3; i++)
			f8_rt_tensor_set(&batch, i, xs[order[r].context][i]);
		f8_executor_use_context(core, order[r].context);
		CHECK(f8_executor_write(core, x, &batch, &diag) == F8_OK);
		CHECK(f8_executor_run(core, order[r].phases, &diag) == F8_OK);
	}
	// acc = sum over the micro-batches of x * w * x
	const f8_rt_tensor *acc = f8_cpu_executor_value(executor, id(graph, "acc"));
	for (int i = 0; i < 3; i++)
		CHECK(get(acc, i) == (float)((xs[0][i] * xs[0][i] + xs[1][i] * xs[1][i]) * (i + 1)));
	// Context 1's backward ran: nothing kept there any more.
	CHECK(f8_executor_run(core, bwd, &diag) == F8_ERR_ARGUMENT && strstr(diag.message, "%y"));
	// A forward that did not keep: the backward that continues it is refused.
	f8_executor_use_context(core, 0);
	f8_diag_clear(&diag);
	CHECK(f8_executor_run(core, F8_PHASE_BIT(F8_PHASE_FWD), &diag) == F8_OK);
	CHECK(f8_executor_run(core, bwd, &diag) == F8_ERR_ARGUMENT && strstr(diag.message, "%y"));
	f8_rt_tensor_destroy(&batch);
	f8_cpu_executor_destroy(executor);
	f8_graph_destroy(graph);
}

/* The 1F1B order against Megatron-LM's: 4 stages, 6 micro-batches; stage 0 warms up with 3
 * forwards, the last stage with none; forwards and backwards each in micro-batch order, a
 * micro-batch's forward before its backward, on one context, which no other micro-batch in
 * flight holds. */
static void test_1f1b_order(void) {
	f8_stage_run runs[12];
	uint32_t contexts = 0;
	f8_pipeline_1f1b(4, 0, 6, runs);
	contexts = f8_pipeline_1f1b_contexts(4, 0, 6);
	const char *want = "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5";
	char got[64] = "";
	for (int r = 0; r < 12; r++)
		sprintf(got + strlen(got), "%s%c%lld", r ? " " : "", runs[r].backward ? 'B' : 'F',
			(long long)runs[r].micro_batch);
	CHECK(strcmp(got, want) == 0 && contexts == 4);
	if (strcmp(got, want) != 0)
		printf("stage 0 of 4: %s, want %s\n", got, want);
	f8_pipeline_1f1b(4, 3, 6, runs);
	contexts = f8_pipeline_1f1b_contexts(4, 3, 6);
	CHECK(contexts == 1 && !runs[0].backward && runs[1].backward && runs[1].micro_batch == 0);
	f8_pipeline_1f1b(4, 1, 2, runs); // fewer micro-batches than the warm-up
	contexts = f8_pipeline_1f1b_contexts(4, 1, 2);
	CHECK(contexts == 2 && !runs[0].backward && !runs[1].backward && runs[2].backward);
	for (int64_t stage = 0; stage < 4; stage++) {
		for (int64_t m = 1; m <= 6; m++) {
			f8_pipeline_1f1b(4, stage, m, runs);
			contexts = f8_pipeline_1f1b_contexts(4, stage, m);
			int64_t forwards = 0, backwards = 0;
			int64_t holder[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
			bool ok = contexts >= 1 && contexts <= 4 - stage;
			for (int64_t r = 0; ok && r < 2 * m; r++) {
				uint32_t c = runs[r].context;
				ok = c < contexts;
				if (ok && !runs[r].backward) {
					ok = runs[r].micro_batch == forwards++ && holder[c] < 0;
					holder[c] = runs[r].micro_batch;
				} else if (ok) {
					ok = runs[r].micro_batch == backwards++ &&
					     holder[c] == runs[r].micro_batch;
					holder[c] = -1;
				}
			}
			CHECK(ok && forwards == m && backwards == m);
		}
	}
}

/* Whether one stage's interleaved runs are consistent: each (micro-batch, chunk) forward and
 * backward once; per chunk, forwards and backwards in micro-batch order; a micro-batch's
 * forwards in increasing chunk order, then its backwards in decreasing order, all on one
 * context that no other micro-batch in flight holds. */
static bool interleaved_consistent(const f8_stage_run *runs, int64_t v, int64_t m,
				   uint32_t contexts) {
	int64_t next_f[8] = {0}, next_b[8] = {0}, done[64], holder[64];
	uint32_t context_of[64];
	for (int i = 0; i < 64; i++)
		done[i] = 0, holder[i] = -1, context_of[i] = UINT32_MAX;
	bool ok = contexts >= 1 && contexts <= 64;
	for (int64_t r = 0; ok && r < 2 * m * v; r++) {
		const f8_stage_run *run = &runs[r];
		int64_t i = run->micro_batch, c = run->chunk;
		ok = i >= 0 && i < m && c >= 0 && c < v && run->context < contexts;
		if (ok && !run->backward) {
			// forwards: chunk c of i after chunk c - 1 of i (done[i] counts them)
			ok = next_f[c]++ == i && done[i] == c;
			if (ok && c == 0) {
				ok = holder[run->context] < 0;
				holder[run->context] = i, context_of[i] = run->context;
			}
		} else if (ok) {
			ok = next_b[c]++ == i && done[i] == v + (v - 1 - c);
			if (ok && c == 0)
				holder[run->context] = -1;
		}
		ok = ok && context_of[i] == run->context && holder[run->context] == (run->backward && c == 0 ? -1 : i);
		done[i]++;
	}
	for (int64_t c = 0; ok && c < v; c++)
		ok = next_f[c] == m && next_b[c] == m;
	return ok;
}

/*
 * The interleaved order against Megatron-LM's (PP 2, V 2, M 4, stage 0: a warm-up of 4
 * forwards), each stage's consistent, and the whole pipeline run as message passing (a
 * forward of global chunk g waits for chunk g - 1's activation, a backward for chunk g + 1's
 * gradient; sends never wait): it finishes for every PP, V and M tried, without deadlock.
 */
static void test_interleaved_order(void) {
	enum { MAX_RUNS = 2 * 16 * 4 };
	f8_stage_run runs[4][MAX_RUNS];
	uint32_t contexts = 0;
	f8_pipeline_interleaved(2, 0, 2, 4, runs[0], &contexts);
	const char *want = "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 "
			   "B3.1 B2.0 B3.0";
	char got[256] = "";
	for (int r = 0; r < 16; r++)
		sprintf(got + strlen(got), "%s%c%lld.%u", r ? " " : "", runs[0][r].backward ? 'B' : 'F',
			(long long)runs[0][r].micro_batch, runs[0][r].chunk);
	CHECK(strcmp(got, want) == 0);
	if (strcmp(got, want) != 0)
		printf("interleaved stage 0 of 2: %s, want %s\n", got, want);
	for (int64_t pp = 2; pp <= 4; pp++) {
		for (int64_t v = 1; v <= 4; v++) {
			for (int64_t m = pp; m <= 16 && 2 * m * v <= MAX_RUNS; m += pp) {
				bool ok = true;
				uint32_t n_contexts[4];
				for (int64_t s = 0; s < pp; s++) {
					f8_pipeline_interleaved(pp, s, v, m, runs[s], &n_contexts[s]);
					ok = ok && interleaved_consistent(runs[s], v, m, n_contexts[s]);
				}
				// made[i][g]: 1 forward done, 2 backward done, per micro-batch and
				// global chunk; a run may go when its peer's message is there.
				static uint8_t made[16][16];
				memset(made, 0, sizeof made);
				int64_t at[4] = {0}, chunks = pp * v, left = 2 * m * v * pp;
				bool moved = true;
				while (ok && left > 0 && moved) {
					moved = false;
					for (int64_t s = 0; s < pp; s++) {
						if (at[s] == 2 * m * v)
							continue;
						const f8_stage_run *run = &runs[s][at[s]];
						int64_t g = run->chunk * pp + s, i = run->micro_batch;
						bool ready = run->backward
							? g == chunks - 1 || made[i][g + 1] == 2
							: g == 0 || made[i][g - 1] >= 1;
						if (!ready)
							continue;
						made[i][g] = run->backward ? 2 : 1;
						at[s]++, left--, moved = true;
					}
				}
				CHECK(ok && left == 0);
				if (!ok || left)
					printf("interleaved PP %lld V %lld M %lld: %s\n", (long long)pp,
					       (long long)v, (long long)m,
					       ok ? "deadlock" : "a stage's order is inconsistent");
			}
		}
	}
}

/*
 * Model chunks (ir/pipeline_chunks.h) of a stage holding layers 0 and 2 of a 2-stage
 * pipeline: each node's chunk from its layer, from what it reads, or for a node that reads no
 * chunk's value (the constant, the Recvs) from its readers; the executor refuses the program
 * while its backward stands in the wrong order (chunk 0's Recv before chunk 1's nodes), and
 * takes it once f8_pipeline_order_chunks has laid it out; a forward node that reads a later
 * chunk's value is refused, naming both.
 */
static void test_model_chunks(void) {
	const char *text =
		"graph chunks {\n"
		"  mesh pp=2\n"
		"  input %x : f32[4]\n"
		"  %c = Constant() {value=f32[4](1, 2, 3, 4)}\n"
		"  %a = Mul(%x, %c) scope=\"layers.0.mlp\"\n"
		"  Send(%a) {group=\"pp\", peer=1, tag=0} scope=\"pipeline\"\n"
		"  %r = Recv() {group=\"pp\", peer=1, dtype=f32, shape=[4], tag=2} scope=\"pipeline\"\n"
		"  %b = Add(%r, %c) scope=\"layers.2.mlp\"\n"
		"  %y = Neg(%b) scope=\"head\"\n"
		"  %g = Recv() {group=\"pp\", peer=1, dtype=f32, shape=[4], tag=1} scope=\"pipeline\" "
		"phase=bwd\n"
		"  %ga = Mul(%g, %c) scope=\"layers.0.mlp\" phase=bwd\n"
		"  %gb = Neg(%y) scope=\"head\" phase=bwd\n"
		"  %gr = Mul(%gb, %x) scope=\"layers.2.mlp\" phase=bwd\n"
		"  Send(%gr) {group=\"pp\", peer=1, tag=3} scope=\"pipeline\" phase=bwd\n"
		"  output %y, %ga\n"
		"}\n";
	f8_graph *graph = parse(text);
	CHECK(graph != NULL);
	if (!graph)
		return;
	f8_diag diag = {0};
	uint8_t chunk[32] = {0};
	uint32_t n = 0;
	CHECK(f8_pipeline_chunks(graph, chunk, &n, &diag) == F8_OK && n == 2);
	const char *names[] = {"c", "a", "r", "b", "y", "g", "ga", "gb", "gr"};
	const uint8_t want[] = {0, 0, 1, 1, 1, 0, 0, 1, 1};
	for (int i = 0; i < 9; i++) {
		f8_node_id producer = graph->values[id(graph, names[i])].producer;
		CHECK(chunk[producer] == want[i]);
		if (chunk[producer] != want[i])
			printf("%%%s: chunk %u, want %u\n", names[i], chunk[producer], want[i]);
	}
	f8_cpu_executor *executor = NULL;
	CHECK(f8_cpu_executor_create(graph, NULL, &executor, &diag) == F8_OK);
	f8_executor *core = executor ? f8_cpu_executor_core(executor) : NULL;
	f8_status refused = core ? f8_executor_set_chunks(core, chunk, n, &diag) : F8_OK;
	CHECK(refused == F8_ERR_INVALID &&
	      strstr(diag.message, "model chunk 1's bwd node stands after a later run's"));
	if (refused != F8_ERR_INVALID)
		printf("set_chunks: %d %s\n", refused, diag.message);
	f8_cpu_executor_destroy(executor);
	executor = NULL;
	f8_diag_clear(&diag);
	CHECK(f8_pipeline_order_chunks(graph, &diag) == F8_OK &&
	      f8_pipeline_chunks(graph, chunk, &n, &diag) == F8_OK);
	CHECK(f8_cpu_executor_create(graph, NULL, &executor, &diag) == F8_OK);
	core = executor ? f8_cpu_executor_core(executor) : NULL;
	CHECK(core && f8_executor_set_chunks(core, chunk, n, &diag) == F8_OK);
	// A chunk's run of a chunk the program does not have is refused.
	CHECK(core && f8_executor_run(core, F8_PHASE_BIT(F8_PHASE_FWD) | F8_RUN_CHUNK(2), &diag) ==
		      F8_ERR_ARGUMENT);
	f8_cpu_executor_destroy(executor);
	f8_graph_destroy(graph);

	// Layer 0 reading layer 2's value: the program's cut is wrong.
	const char *wrong =
		"graph wrong {\n"
		"  mesh pp=2\n"
		"  input %x : f32[4]\n"
		"  %b = Neg(%x) scope=\"layers.2.mlp\"\n"
		"  %a = Neg(%b) scope=\"layers.0.mlp\"\n"
		"  output %a\n"
		"}\n";
	graph = parse(wrong);
	f8_diag_clear(&diag);
	CHECK(graph && f8_pipeline_chunks(graph, chunk, &n, &diag) == F8_ERR_INVALID &&
	      strstr(diag.message, "model chunk 0's fwd reads %b, which chunk 1's fwd makes later"));
	f8_graph_destroy(graph);
}

int main(void) {
	test_contexts();
	test_1f1b_order();
	test_interleaved_order();
	test_model_chunks();
	test_cast_phase_and_frozen_scaling();
	test_wide_node();
	test_stale_read_refused();
	test_phases_and_updates();
	test_failed_run_changes_nothing();
	test_bad_sizes();
	return test_finish();
}
