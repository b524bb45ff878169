/*
 * f8c compile: a model's training step through every pass and codegen, written as a plan
 * folder (runtime/plan.h): plan.json, the decision record, kernels.ptx, the generated kernels
 * for sm_90, and weights.safetensors, the model's initial weights. It takes f8c train's options (Megatron-LM's names) and the FP8 options;
 * those that shape the graph (batch and sequence sizes, the optimizer, FP8) are compiled in and
 * recorded; --data and the other run options are not needed. --weights seed records how the
 * weights of a model without weights of its own are made (the rule, --seed, each parameter's
 * rule and dtype) in plan.json, so that the plan, not each run's --seed, fixes them.
 */
#define _POSIX_C_SOURCE 200809L // clock_gettime

#include <stdbool.h> // bool
#include <stdio.h>  // fprintf, printf
#include <string.h> // strcmp
#include <time.h>   // clock_gettime

#include "ir/alloc.h"         // f8_calloc, f8_free
#include "runtime/plan.h"     // f8_plan_write
#include "tools/commands.h"   // f8_tool_compile, f8_tool_train_args
#include "tools/compile.h"    // f8_tool_compile_training, f8_tool_plan_make
#include "tools/fp8_options.h" // f8_tool_fp8_warn_none

static const f8_tool_train_command command = {
	.name = "compile",
	.usage = "MODEL -o PLAN_DIR [--micro-batch-size N] [--seq-length N] [OPTIONS]",
	.own_options = "  -o, --output DIR     the plan folder to write (plan.json, kernels.ptx, "
		       "weights.safetensors)\n"
		       "  --inference          the forward graph (for f8c infer), not a training step\n"
		       "  --weights file|seed  where the initial weights come from: file (default) "
		       "the plan's weights.safetensors (a model's own weights), the parameters a "
		       "JSON description leaves to f8c made from each run's --seed; seed: a model "
		       "without weights of its own, the rule and this --seed recorded in plan.json, "
		       "every run making the same weights\n",
	.needs_train_iters = false,
	.needs_data = false,
	.needs_seq_length = false}; // a training step needs it; compile() says so

/* Takes -o, --inference and --weights out of argv into *output, *inference and *seed_weights,
 * the rest into rest (n in *n_rest); 0 or the exit status of an error it printed. */
static int own_options(int argc, char **argv, const char **output, bool *inference,
		       bool *seed_weights, char **rest, int *n_rest) {
	*n_rest = 0;
	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "--inference") == 0) {
			*inference = true;
			continue;
		}
		// Not among the compile arguments the plan records: f8c train PLAN reads those back
		// as its own options, and plan.json's weight_init says it already.
		if (strcmp(argv[i], "--weights") == 0) {
			if (i + 1 == argc)
				return fprintf(stderr, "f8c compile: --weights needs file or seed\n"), 2;
			const char *mode = argv[++i];
			if (strcmp(mode, "file") != 0 && strcmp(mode, "seed") != 0)
				return fprintf(stderr, "f8c compile: --weights: cannot use '%s'\nHINT: "
					       "--weights file (the default) or --weights seed\n",
					       mode), 2;
			*seed_weights = strcmp(mode, "seed") == 0;
			continue;
		}
		if (strcmp(argv[i], "--config") == 0)
			return fprintf(stderr, "f8c compile: --config is not taken: a plan records its "
				       "options as given\nHINT: give them on the command line\n"), 2;
		if (strcmp(argv[i], "-o") != 0 && strcmp(argv[i], "--output") != 0) {
			rest[(*n_rest)++] = argv[i];
			continue;
		}
		if (i + 1 == argc)
			return fprintf(stderr, "f8c compile: %s needs a folder\n", argv[i]), 2;
		*output = argv[++i];
	}
	return 0;
}

static double seconds_since(const struct timespec *start) {
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - start->tv_sec) + 1e-9 * (double)(now.tv_nsec - start->tv_nsec);
}

/* Compiles and writes the plan, with its weights' record when `seed_weights`; the compile
 * arguments are rest[1 .. n_rest) but the model. */
static f8_status compile(f8_tool_train_args *options, bool inference, bool seed_weights,
			 char **rest, int n_rest, const char *output, f8_diag *diag) {
	const f8_train_config *config = f8_tool_train_args_config(options);
	const f8_tool_compile_options *compiled = f8_tool_train_args_compile(options);
	struct timespec start;
	clock_gettime(CLOCK_MONOTONIC, &start);
	f8_graph *graph = NULL;
	f8_plan *plan = NULL;
	const char **args = f8_calloc((size_t)n_rest + 1, sizeof *args);
	uint32_t n_args = 0;
	for (int i = 1; args && i < n_rest; i++)
		if (rest[i] != config->model)
			args[n_args++] = rest[i];
	if (args && inference)
		args[n_args++] = "--inference";
	if (!inference && !config->seq_length) {
		f8_free(args);
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "no --seq-length given: a training plan "
				   "is for one micro-batch size and sequence length");
	}
	f8_status status = !args ? f8_diag_set(diag, F8_ERR_NOMEM, "out of memory")
		: inference ? f8_tool_compile_inference(compiled, config->seed, &graph, diag)
			    : f8_tool_compile_training(compiled, config, &graph, diag);
	double passes = seconds_since(&start);
	uint32_t nodes = graph ? graph->n_order : 0, groups = graph ? graph->n_groups : 0;
	if (!status)
		f8_tool_fp8_warn_none(f8_tool_train_args_fp8(options), graph, "compile", stderr);
	if (!status)
		status = f8_tool_plan_make(graph, !inference, true, config->model, args, n_args,
					   &plan, diag);
	if (!status && seed_weights)
		status = f8_plan_record_weight_init(plan, config->seed, config->model, diag);
	double codegen = seconds_since(&start) - passes;
	if (!status)
		status = f8_plan_write(output, plan, diag);
	char padding[200];
	if (!status && f8_tool_vocab_padding(config->model, compiled->vocab_multiple, padding,
					     sizeof padding))
		printf("f8c compile: %s\n", padding);
	if (!status)
		printf("f8c compile: %s: %u nodes, %u fused groups, %u distinct kernels, %zu bytes of "
		       "PTX; passes %.2f s, codegen %.2f s, %.2f s in all\n", output, nodes, groups,
		       plan->n_kernels, strlen(plan->ptx), passes, codegen, seconds_since(&start));
	f8_plan_destroy(plan); // the graph with it
	f8_free(args);
	return status;
}

int f8_tool_compile(int argc, char **argv) {
	const char *output = NULL;
	bool inference = false, seed_weights = false;
	int n_rest;
	char **rest = f8_calloc((size_t)argc + 1, sizeof *rest);
	if (!rest)
		return fprintf(stderr, "f8c compile: out of memory\n"), 1;
	f8_tool_train_args *args = NULL;
	int code = own_options(argc, argv, &output, &inference, &seed_weights, rest, &n_rest);
	if (!code)
		code = f8_tool_train_args_parse(&command, n_rest, rest, &args);
	if (!code && !output) {
		fprintf(stderr, "f8c compile: no -o PLAN_DIR given\nusage: f8c compile %s\n",
			command.usage);
		code = 2;
	}
	if (!code) {
		f8_diag diag;
		f8_diag_clear(&diag);
		if (compile(args, inference, seed_weights, rest, n_rest, output, &diag)) {
			f8_diag_print(&diag, stderr);
			code = diag.status == F8_ERR_ARGUMENT ? 2 : 1;
		}
	}
	f8_tool_train_args_destroy(args);
	f8_free(rest);
	return code == 3 ? 0 : code; // 3: --help, which is not an error
}
