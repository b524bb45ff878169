/*
 * The CPU executor's own contract (runtime/cpu/executor.h), on small text-IR graphs: phases,
 * values freed or kept, updates moved into leaves only after a whole run succeeded, errors for
 * a value of a phase that did not run and for a kernel's data error, sizes bound at creation.
 */
#include <math.h>   // fabs, sqrt
#include <stdio.h>  // sprintf, snprintf
#include <stdlib.h> // malloc, free
#include <string.h> // strlen, strstr

#include "ir/text.h"              // f8_text_parse
#include "ir/verify.h"            // f8_graph_verify
#include "passes/pipeline.h"      // f8_pipeline_run
#include "runtime/cpu/executor.h" // f8_cpu_executor
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

int main(void) {
	test_wide_node();
	test_stale_read_refused();
	test_phases_and_updates();
	test_failed_run_changes_nothing();
	test_bad_sizes();
	return test_finish();
}
