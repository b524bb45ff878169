/*
 * f8c calibrate: trains a model for a few steps in high precision on the CPU and records how
 * the amax of every Linear layer's GEMM operands moves (tools/calibration.h), into the
 * STATS.json that `--calibration STATS.json --fp8-cv-threshold X` reads to keep the unsteady
 * layers out of FP8.
 *
 * It takes f8c train's options and runs f8c train's loop (runtime/train.h) with an observer,
 * which reads each GEMM's operands after every micro-batch's forward and backward.
 */
#include <stdio.h>  // fprintf
#include <string.h> // strcmp

#include "ir/alloc.h"             // f8_calloc, f8_free
#include "tools/calibration.h"  // f8_calibration_stats
#include "runtime/train.h"        // f8_train_run, f8_train_config
#include "tools/commands.h"       // f8_tool_calibrate, f8_tool_train_args
#include "tools/tool_options.h"   // f8_tool_parse_int

/* A GEMM operand to observe: the value that is operand `role` of Linear layer `scope`. */
typedef struct observed {
	const char *scope;
	const char *role;
	f8_value_id value;
} observed;

/* What the observer keeps between calls. */
typedef struct session {
	f8_calibration_stats *stats;
	observed *observed; // (n_observed), listed at the first call
	uint32_t n_observed;
	int64_t iteration;  // the step being observed, 0 before the first
} session;

/* Adds (scope, role, value) to the observed list unless it is there: dgrad and wgrad read the
 * same output gradient, which must count once. */
static void observe_once(session *s, const char *scope, const char *role, f8_value_id value) {
	for (uint32_t i = 0; i < s->n_observed; i++)
		if (s->observed[i].value == value && strcmp(s->observed[i].role, role) == 0 &&
		    strcmp(s->observed[i].scope, scope) == 0)
			return;
	s->observed[s->n_observed++] = (observed){.scope = scope, .role = role, .value = value};
}

/* The operands of every Linear layer's GEMMs: x and w of the forward, dy of dgrad and wgrad. */
static f8_status list_operands(session *s, const f8_graph *graph, f8_diag *diag) {
	s->observed = f8_calloc(3 * (size_t)graph->n_order + 1, sizeof *s->observed);
	if (!s->observed)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		f8_gemm_kind kind;
		if ((node->op != F8_OP_LINEAR && node->op != F8_OP_LINEAR_WGRAD) ||
		    !f8_gemm_kind_of(node, &kind))
			continue;
		const char *scope = node->scope ? node->scope : graph->values[node->outputs[0]].name;
		if (kind == F8_GEMM_KIND_FWD) {
			observe_once(s, scope, "x", node->inputs[0]);
			observe_once(s, scope, "w", node->inputs[1]);
		} else {
			observe_once(s, scope, "dy", node->inputs[0]);
		}
	}
	if (!s->n_observed)
		return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "the model has no Linear layer to "
				   "calibrate");
	return F8_OK;
}

/* The observer: ends the previous step in the statistics when a new one begins, then records
 * every operand of this micro-batch. */
static f8_status observe(const f8_graph *graph, const f8_executor *executor,
			 int64_t iteration, int64_t micro_batch, void *user, f8_diag *diag) {
	(void)micro_batch;
	session *s = user;
	f8_status status = F8_OK;
	if (!s->observed)
		status = list_operands(s, graph, diag);
	if (!status && s->iteration && iteration != s->iteration)
		status = f8_calibration_stats_end_step(s->stats, diag);
	s->iteration = iteration;
	for (uint32_t i = 0; !status && i < s->n_observed; i++) {
		const observed *o = &s->observed[i];
		f8_rt_tensor values;
		status = f8_executor_read(executor, o->value, &values, diag);
		if (!status)
			status = f8_calibration_stats_observe(s->stats, o->scope, o->role, &values,
							      diag);
		f8_rt_tensor_destroy(&values);
	}
	return status;
}

/* Prints each step's loss, as f8c calibrate's progress. */
static void report(const f8_train_progress *progress, void *user) {
	(void)user;
	if (progress->event == F8_TRAIN_EVENT_STEP)
		fprintf(stderr, "step %lld/%lld: loss %.4f\n", (long long)progress->iteration,
			(long long)progress->train_iters, progress->loss);
}

/* Calibrates `config` (FP8 off: what it observes is the high-precision run) for the FP8 run
 * that `fp8` describes, writing `output`. */
static f8_status calibrate(f8_tool_train_args *args, const f8_fp8_options *fp8,
			   const char *output, f8_diag *diag) {
	f8_train_config *config = f8_tool_train_args_config(args);
	session s = {0};
	f8_calibration_settings settings = {.format = fp8->format,
					    .amax_history_len = fp8->amax_history_len,
					    .amax_algo = fp8->amax_algo, .margin = fp8->margin};
	f8_calibration_file *file = NULL;
	f8_tool_train_args_compile(args)->fp8 = NULL;
	config->observe = observe;
	config->observe_user = &s;
	f8_status status = f8_calibration_stats_create(&settings, &s.stats, diag);
	if (!status) // compiled now, without FP8
		status = f8_tool_train_args_ready(args, diag);
	if (!status)
		status = f8_train_run(config, report, NULL, diag);
	if (!status && s.iteration)
		status = f8_calibration_stats_end_step(s.stats, diag);
	if (!status)
		status = f8_calibration_stats_summarize(s.stats, config->model, &file, diag);
	if (!status) // bound to the model's layers
		file->calibration.digest = f8_calibration_digest(config->graph,
								 &file->calibration.layers);
	if (!status)
		status = f8_calibration_write(output, file, diag);
	if (!status)
		fprintf(stderr, "wrote %s: the amax statistics of %zu (layer, operand) pairs over "
			"%lld steps\n", output, file->calibration.n_entries,
			(long long)config->train_iters);
	f8_calibration_file_destroy(file);
	f8_calibration_stats_destroy(s.stats);
	f8_free(s.observed);
	return status;
}

static const f8_tool_train_command command = {
	.name = "calibrate",
	.usage = "MODEL --data TOKENS.bin --steps N -o STATS.json [OPTIONS]",
	.own_options = "  --steps N            steps to train and observe, in high precision\n"
		       "  -o, --output FILE    the statistics (STATS.json) to write\n"
		       "The statistics stand for the FP8 run that --fp8-format, "
		       "--fp8-amax-history-len,\n--fp8-amax-compute-algo and --fp8-margin describe "
		       "(default: hybrid, 1024, max, 0).\n",
	.needs_train_iters = false,
	.needs_data = true,
	.needs_seq_length = true};

/* Takes --steps and -o out of argv into *steps and *output, the rest into rest (n in
 * *n_rest); 0 or the exit status of an error it printed. */
static int own_options(int argc, char **argv, int64_t *steps, const char **output, char **rest,
		       int *n_rest) {
	*n_rest = 0;
	for (int i = 0; i < argc; i++) {
		bool is_steps = strcmp(argv[i], "--steps") == 0;
		bool is_output = strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--output") == 0;
		if (!is_steps && !is_output) {
			rest[(*n_rest)++] = argv[i];
			continue;
		}
		if (i + 1 == argc || (is_steps && !f8_tool_parse_int(argv[i + 1], 1, INT32_MAX, steps))) {
			fprintf(stderr, "f8c calibrate: %s needs %s\n", argv[i],
				is_steps ? "a number of steps >= 1" : "a file name");
			return 2;
		}
		if (is_output)
			*output = argv[i + 1];
		i++;
	}
	return 0;
}

/* Clears what f8c train takes that a calibration has no use for (a --config made for training
 * may hold it), naming what was set in `ignored` ("" when nothing). --steps stands for
 * --train-iters. */
static void drop_unused(f8_train_config *c, char *ignored, size_t size) {
	const struct { bool set; const char *name; } unused[] = {
		{c->train_iters != 0, "--train-iters"}, {c->save != NULL, "--save"},
		{c->load != NULL, "--load"}, {c->metrics != NULL, "--metrics"},
		{c->eval_interval || c->eval_iters, "--eval-interval and --eval-iters"}};
	size_t used = 0;
	ignored[0] = '\0';
	for (size_t i = 0; i < sizeof unused / sizeof unused[0]; i++)
		if (unused[i].set && used < size)
			used += (size_t)snprintf(ignored + used, size - used, "%s%s", used ? ", " : "",
						 unused[i].name);
	c->train_iters = 0;
	c->save = c->load = c->metrics = NULL;
	c->save_interval = c->eval_interval = c->eval_iters = 0;
}

int f8_tool_calibrate(int argc, char **argv) {
	int64_t steps = 0;
	const char *output = NULL;
	int n_rest;
	char **rest = f8_calloc((size_t)argc + 1, sizeof *rest);
	if (!rest)
		return fprintf(stderr, "f8c calibrate: out of memory\n"), 1;
	f8_tool_train_args *args = NULL;
	int code = own_options(argc, argv, &steps, &output, rest, &n_rest);
	if (!code)
		code = f8_tool_train_args_parse(&command, n_rest, rest, &args);
	if (!code && (!steps || !output)) {
		fprintf(stderr, "f8c calibrate: %s\nusage: f8c calibrate %s\n",
			!steps ? "no --steps given" : "no -o STATS.json given", command.usage);
		code = 2;
	}
	if (!code) {
		f8_train_config *config = f8_tool_train_args_config(args);
		char ignored[160];
		drop_unused(config, ignored, sizeof ignored);
		if (ignored[0])
			fprintf(stderr, "f8c calibrate: ignoring %s: a calibration trains --steps "
				"steps and observes, no more\n", ignored);
		config->train_iters = steps;
		f8_diag diag;
		f8_diag_clear(&diag);
		const f8_tool_fp8_args *fp8 = f8_tool_train_args_fp8(args);
		if (calibrate(args, &fp8->options, output, &diag)) {
			f8_diag_print(&diag, stderr);
			code = diag.status == F8_ERR_ARGUMENT ? 2 : 1;
		}
	}
	f8_tool_train_args_destroy(args);
	f8_free(rest);
	return code == 3 ? 0 : code; // 3: --help
}
