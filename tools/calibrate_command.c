/*
 * f8c calibrate: trains a model for a few steps in high precision on the CPU and records how
 * the amax of every Linear layer's GEMM operands moves (runtime/calibration.h), into the
 * STATS.json that `--calibration STATS.json --fp8-cv-threshold X` reads to keep the unsteady
 * layers out of FP8.
 *
 * It takes f8c train's options and drives the steps itself, as runtime/train.c does (a run of
 * fwd|bwd per micro-batch, then opt), with the executor keeping every value so that each GEMM's
 * operands can be read after the run.
 */
#include <math.h>   // isfinite
#include <stdio.h>  // fprintf
#include <string.h> // strcmp

#include "frontend/frontend.h"    // f8_frontend_load
#include "ir/alloc.h"             // f8_calloc, f8_free
#include "passes/pipeline.h"      // f8_pipeline_run_with
#include "runtime/calibration.h"  // f8_calibration_stats
#include "runtime/cpu/executor.h" // f8_cpu_executor
#include "runtime/parameters.h"   // f8_rt_parameters_init
#include "runtime/tokens.h"       // f8_tokens, f8_batch_sampler
#include "runtime/train.h"        // f8_train_config, f8_train_check_config
#include "tools/commands.h"       // f8_tool_calibrate, f8_tool_train_args
#include "tools/tool_options.h"   // f8_tool_parse_int

/* A GEMM operand to observe: the value that is operand `role` of Linear layer `scope`. */
typedef struct observed {
	const char *scope;
	const char *role;
	f8_value_id value;
} observed;

/* Everything a calibration run holds. */
typedef struct session {
	const f8_train_config *config;
	f8_graph *graph;
	f8_cpu_executor *executor;
	f8_value_id tokens, labels, loss;
	int64_t micro_batches;
	f8_tokens data;
	f8_token_range ranges[3];
	f8_batch_sampler sampler;
	observed *observed;       // (n_observed)
	uint32_t n_observed;
} session;

static f8_status find_value(const f8_graph *graph, const char *name, f8_value_id *out,
			    f8_diag *diag) {
	*out = f8_graph_find_value(graph, name, strlen(name));
	if (*out == F8_NONE)
		return f8_diag_set(diag, F8_ERR_INVALID, "the training graph has no %%%s", name);
	return F8_OK;
}

/* The token input (the integer input besides the labels) and the symbols it binds: batch and
 * seq from --micro-batch-size and --seq-length; every other symbol must be bound by --dim. */
static f8_status bind_tokens(session *s, int64_t *symbol_values, f8_diag *diag) {
	const f8_graph *graph = s->graph;
	s->tokens = F8_NONE;
	for (uint32_t i = 0; i < graph->n_inputs; i++) {
		const f8_value *value = &graph->values[graph->inputs[i]];
		if (value->role == F8_ROLE_INPUT && graph->inputs[i] != s->labels &&
		    f8_dtype_is_integer(value->type.dtype) && value->type.shape.rank == 2)
			s->tokens = graph->inputs[i];
	}
	if (s->tokens == F8_NONE)
		return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "the model has no token input "
				   "(batch, seq) of integers");
	const int64_t sizes[2] = {s->config->micro_batch_size, s->config->seq_length};
	const f8_type *type = &graph->values[s->tokens].type;
	for (int d = 0; d < 2; d++) {
		uint16_t symbol;
		if (f8_dim_is_symbol(type->shape.dims[d], &symbol))
			symbol_values[symbol] = sizes[d];
	}
	for (uint32_t i = 0; i < graph->n_symbols; i++)
		if (!symbol_values[i]) {
			f8_diag_set(diag, F8_ERR_ARGUMENT, "size %s of the model is not known",
				    graph->symbols[i]);
			f8_diag_hint(diag, "give it with --dim %s=N", graph->symbols[i]);
			return F8_ERR_ARGUMENT;
		}
	return F8_OK;
}

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
static f8_status list_operands(session *s, f8_diag *diag) {
	const f8_graph *graph = s->graph;
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

/* Loads the model, compiles the training step in high precision, makes the executor. */
static f8_status set_up_model(session *s, f8_diag *diag) {
	const f8_train_config *c = s->config;
	f8_training_options optimizer = c->optimizer;
	optimizer.micro_batches = c->global_batch_size / c->micro_batch_size;
	if (optimizer.decay_iters == 0)
		optimizer.decay_iters = c->train_iters;
	s->micro_batches = optimizer.micro_batches;
	f8_frontend_options options = {.dims = c->dims, .n_dims = c->n_dims, .seed = c->seed};
	f8_pipeline_options compile = {.training = &optimizer}; // FP8 off: what it observes
	f8_status status = f8_frontend_load(c->model, &options, &s->graph, diag);
	if (!status)
		status = f8_pipeline_run_with(s->graph, NULL, true, &compile, NULL, diag);
	if (!status)
		status = find_value(s->graph, "labels", &s->labels, diag);
	if (!status)
		status = find_value(s->graph, "loss", &s->loss, diag);
	int64_t *symbol_values = NULL;
	if (!status && !(symbol_values = f8_calloc(s->graph->n_symbols + 1, sizeof(int64_t))))
		status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	if (!status)
		status = bind_tokens(s, symbol_values, diag);
	if (!status)
		status = f8_cpu_executor_create(s->graph, symbol_values, &s->executor, diag);
	f8_free(symbol_values);
	if (!status) {
		f8_cpu_executor_keep_all(s->executor, true);
		status = f8_rt_parameters_init(s->executor, s->graph, c->seed, diag);
	}
	return status ? status : list_operands(s, diag);
}

/* The logits' vocabulary (what CrossEntropy reads), 0 when it is not a constant. */
static int64_t vocabulary(const f8_graph *graph) {
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		if (node->op != F8_OP_CROSS_ENTROPY)
			continue;
		const f8_type *logits = &graph->values[node->inputs[0]].type;
		f8_dim vocab = logits->shape.dims[logits->shape.rank - 1];
		return f8_dim_is_const(vocab) ? f8_dim_value(vocab) : 0;
	}
	return 0;
}

/* Loads the tokens, checks them against the vocabulary, splits them, starts the sampler. */
static f8_status set_up_data(session *s, f8_diag *diag) {
	const f8_train_config *c = s->config;
	int64_t vocab = vocabulary(s->graph);
	if (vocab < 1)
		return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "the logits' vocabulary size is not a "
				   "constant");
	f8_status status = f8_tokens_load(c->data, c->data_format, &s->data, diag);
	if (!status)
		status = f8_tokens_check_vocab(&s->data, (uint32_t)vocab, diag);
	if (!status)
		status = f8_tokens_split(s->data.n, c->split, c->n_split, s->ranges, diag);
	if (!status)
		f8_batch_sampler_init(&s->sampler, &s->data, c->seed);
	return status;
}

/* One micro-batch: a batch in, fwd|bwd, every operand observed; its loss in *loss. */
static f8_status micro_batch(session *s, f8_calibration_stats *stats, double *loss,
			     f8_diag *diag) {
	f8_rt_tensor *tokens = f8_cpu_executor_leaf(s->executor, s->tokens);
	f8_rt_tensor *labels = f8_cpu_executor_leaf(s->executor, s->labels);
	if (tokens->dtype != F8_DTYPE_I64 || labels->dtype != F8_DTYPE_I64)
		return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "the token input and labels must be i64");
	f8_status status = f8_batch_sample(&s->sampler, s->ranges[0],
					   (size_t)s->config->micro_batch_size,
					   (size_t)s->config->seq_length, tokens->data, labels->data,
					   diag);
	if (!status)
		status = f8_cpu_executor_run(s->executor, F8_PHASE_BIT(F8_PHASE_FWD) |
					     F8_PHASE_BIT(F8_PHASE_BWD), diag);
	for (uint32_t i = 0; !status && i < s->n_observed; i++) {
		const observed *o = &s->observed[i];
		const f8_rt_tensor *values = f8_cpu_executor_value(s->executor, o->value);
		status = values ? f8_calibration_stats_observe(stats, o->scope, o->role, values, diag)
				: f8_diag_set(diag, F8_ERR_INVALID, "the run kept no %%%s",
					      s->graph->values[o->value].name);
	}
	const f8_rt_tensor *value = f8_cpu_executor_value(s->executor, s->loss);
	*loss = value ? f8_rt_tensor_get(value, 0) : 0;
	return status;
}

/* The steps: micro-batches, the optimizer, the step ended in the statistics. */
static f8_status run_steps(session *s, f8_calibration_stats *stats, f8_diag *diag) {
	for (int64_t step = 1; step <= s->config->train_iters; step++) {
		double sum = 0;
		for (int64_t m = 0; m < s->micro_batches; m++) {
			double loss = 0;
			f8_status status = micro_batch(s, stats, &loss, diag);
			if (status)
				return status;
			sum += loss;
		}
		double loss = sum / (double)s->micro_batches;
		if (!isfinite(loss))
			return f8_diag_set(diag, F8_ERR_INVALID, "the loss is %g at step %lld", loss,
					   (long long)step);
		f8_status status = f8_cpu_executor_run(s->executor, F8_PHASE_BIT(F8_PHASE_OPT), diag);
		if (!status)
			status = f8_calibration_stats_end_step(stats, diag);
		if (status)
			return status;
		fprintf(stderr, "step %lld/%lld: loss %.4f\n", (long long)step,
			(long long)s->config->train_iters, loss);
	}
	return F8_OK;
}

/* Calibrates `config` under `fp8`'s format and scaling, writing `output`. */
static f8_status calibrate(const f8_train_config *config, const f8_fp8_options *fp8,
			   const char *output, f8_diag *diag) {
	session s = {.config = config};
	f8_calibration_settings settings = {.format = fp8->format,
					    .amax_history_len = fp8->amax_history_len,
					    .amax_algo = fp8->amax_algo, .margin = fp8->margin};
	f8_calibration_stats *stats = NULL;
	f8_calibration_file *file = NULL;
	f8_status status = f8_train_check_config(config, diag);
	if (!status)
		status = f8_calibration_stats_create(&settings, &stats, diag);
	if (!status)
		status = set_up_model(&s, diag);
	if (!status)
		status = set_up_data(&s, diag);
	if (!status)
		status = run_steps(&s, stats, diag);
	if (!status)
		status = f8_calibration_stats_summarize(stats, config->model, &file, diag);
	if (!status)
		status = f8_calibration_write(output, file, diag);
	if (!status)
		fprintf(stderr, "wrote %s: the amax statistics of %zu (layer, operand) pairs over "
			"%lld steps\n", output, file->calibration.n_entries,
			(long long)config->train_iters);
	f8_calibration_file_destroy(file);
	f8_calibration_stats_destroy(stats);
	f8_free(s.observed);
	f8_tokens_destroy(&s.data);
	f8_cpu_executor_destroy(s.executor);
	f8_graph_destroy(s.graph);
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
	.needs_train_iters = false};

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
		if (calibrate(config, &fp8->options, output, &diag)) {
			f8_diag_print(&diag, stderr);
			code = diag.status == F8_ERR_ARGUMENT ? 2 : 1;
		}
	}
	f8_tool_train_args_destroy(args);
	f8_free(rest);
	return code == 3 ? 0 : code; // 3: --help
}
