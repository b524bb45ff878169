/*
 * f8c dump-ir: reads a model, runs the pipeline through a pass, prints the IR as text or JSON;
 * or prints a plan's graph (f8c compile's folder), which is past every pass.
 * Through precision or fp8-cast it plans FP8 with the FP8 options (tools/fp8_options.h; their
 * defaults when none is given), so the IR shows every decision inline.
 */
#include <stdio.h>  // fprintf
#include <string.h> // strcmp, strchr

#include "frontend/frontend.h" // f8_frontend_options
#include "ir/json.h"         // f8_json_print
#include "ir/text.h"         // f8_text_print
#include "ir/verify.h"       // f8_graph_verify
#include "passes/pipeline.h" // f8_pipeline_find, f8_pipeline_options
#include "runtime/plan.h"    // f8_plan_is_dir, f8_plan_load
#include "tools/commands.h"  // f8_tool_dump_ir
#include "tools/compile.h"   // f8_tool_load_model, f8_tool_run_passes
#include "tools/fp8_options.h"  // f8_tool_fp8_args
#include "tools/parallel_options.h"  // f8_tool_parallel_args
#include "tools/recompute_options.h" // f8_tool_recompute_args
#include "tools/tool_options.h" // f8_tool_parse_dim_binding

static void print_usage(FILE *out) {
	fprintf(out, "usage: f8c dump-ir MODEL [--dim NAME=N]... [--after PASS] [--format text|json] "
		     "[--verify] [--report] [--bf16] [FP8 options] [recompute options] "
		     "[parallel options]\n");
}

static int usage(const char *problem) {
	fprintf(stderr, "f8c dump-ir: %s\n", problem);
	print_usage(stderr);
	fprintf(stderr, "HINT: MODEL is an ONNX file, a JSON model description (models/*.json) or "
			"the text IR (*.f8ir); --dim binds a symbolic size; --after runs the pipeline "
			"through PASS first; --report says on stderr what the passes decided and why; "
			"f8c dump-ir --help lists the FP8 options\n");
	return 2;
}

/* Prints a diagnostic; the exit status it calls for. */
static int fail(const f8_diag *diag) {
	f8_diag_print(diag, stderr);
	return diag->status == F8_ERR_ARGUMENT ? 2 : 1;
}

enum { MAX_BINDINGS = 32 };

/* The command line: everything but the FP8 options, which go to an f8_tool_fp8_args. */
typedef struct request {
	const char *path, *after, *format;
	bool verify, report, help;
	f8_dim_binding dims[MAX_BINDINGS];
	uint32_t n_dims;
	f8_tool_recompute_args recompute; // --recompute-*, --memory-budget
	f8_tool_parallel_args parallel;   // --world-size, --tensor-model-parallel-size ...
} request;

/* Parses the command line into r and fp8; 0 or the exit status of an error it printed. */
static int parse(int argc, char **argv, request *r, f8_tool_fp8_args *fp8) {
	r->format = "text";
	for (int i = 1; i < argc; i++) {
		f8_diag diag;
		f8_diag_clear(&diag);
		bool taken;
		if (f8_tool_fp8_parse_arg(fp8, argc, argv, &i, &taken, &diag))
			return fail(&diag);
		if (!taken && f8_tool_recompute_parse_arg(&r->recompute, argc, argv, &i, &taken,
							  &diag))
			return fail(&diag);
		if (!taken && f8_tool_parallel_parse_arg(&r->parallel, argc, argv, &i, &taken, &diag))
			return fail(&diag);
		if (taken)
			continue;
		if (strcmp(argv[i], "--help") == 0) {
			r->help = true;
			return 0;
		}
		if (strcmp(argv[i], "--dim") == 0) {
			if (++i == argc)
				return usage("--dim needs NAME=N");
			if (r->n_dims == MAX_BINDINGS)
				return usage("too many --dim options");
			if (!f8_tool_parse_dim_binding(argv[i], &r->dims[r->n_dims++]))
				return usage("--dim needs NAME=N with N a positive integer");
		} else if (strcmp(argv[i], "--after") == 0) {
			if (++i == argc)
				return usage("--after needs a pass name");
			r->after = argv[i];
		} else if (strcmp(argv[i], "--format") == 0) {
			if (++i == argc)
				return usage("--format needs text or json");
			r->format = argv[i];
		} else if (strcmp(argv[i], "--verify") == 0) {
			r->verify = true;
		} else if (strcmp(argv[i], "--report") == 0) {
			r->report = true;
		} else if (argv[i][0] == '-' && argv[i][1]) {
			fprintf(stderr, "f8c dump-ir: unknown option '%s'\n", argv[i]);
			return usage("see the options below");
		} else if (r->path) {
			return usage("give one model file");
		} else {
			r->path = argv[i];
		}
	}
	if (!r->path)
		return usage("no model file given");
	if (strcmp(r->format, "text") != 0 && strcmp(r->format, "json") != 0)
		return usage("--format must be text or json");
	f8_diag diag;
	f8_diag_clear(&diag);
	if (f8_tool_recompute_finish(&r->recompute, &diag))
		return fail(&diag);
	return 0;
}

/* Loads, compiles through r->after and prints; the exit status. */
static int run(const request *r, const f8_tool_fp8_args *fp8) {
	const char *path = r->path, *after = r->after, *format = r->format;
	bool verify = r->verify, report = r->report;
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_graph *graph = NULL;
	f8_plan *plan = NULL;
	f8_frontend_options options = {.dims = r->dims, .n_dims = r->n_dims};
	f8_status status;
	if (f8_plan_is_dir(path)) { // a plan: its graph, after every pass, checked as it loads
		status = f8_plan_load(path, F8C_VERSION, &plan, &diag);
		if (!status && (after || r->n_dims)) {
			f8_diag_set(&diag, F8_ERR_ARGUMENT, "%s is a plan: its graph is compiled "
				    "through every pass already", path);
			f8_diag_hint(&diag, "drop --after and --dim, or give the model instead");
			status = F8_ERR_ARGUMENT;
		}
		if (!status) {
			graph = plan->graph;
			plan->graph = NULL;
		}
	} else {
		status = f8_tool_load_model(path, &options, &graph, &diag);
	}
	f8_plan_destroy(plan);
	// Through a pass at or past training compiles a training step, with the default
	// hyperparameters (f8c train sets its own), and so does tensor-parallel's, the forward of
	// one; at or past precision, FP8 too.
	f8_training_options hyperparameters = f8_training_options_default();
	const f8_pass *last = after ? f8_pipeline_find(after) : NULL;
	const f8_fp8_options *planned = last && last >= f8_pipeline_find("precision")
						? f8_tool_fp8_options(fp8) : NULL;
	f8_pipeline_options compile = {
		.training = last && last >= f8_pipeline_find("tensor-parallel") ? &hyperparameters
										  : NULL,
		.fp8 = planned, .bf16 = fp8->bf16, .recompute = &r->recompute.options,
		.parallel = &r->parallel.options};
	if (!status && after)
		status = f8_tool_run_passes(graph, after, verify, &compile, report ? stderr : NULL,
					    &diag);
	if (!status && verify)
		status = f8_graph_verify(graph, &diag);
	if (!status)
		status = strcmp(format, "json") == 0 ? f8_json_print(graph, stdout, &diag)
						      : f8_text_print(graph, stdout);
	if (status == F8_ERR_IO && !diag.message[0])
		f8_diag_set(&diag, status, "cannot write the output");
	else if (status == F8_ERR_NOMEM && !diag.message[0]) // the text printer's
		f8_diag_set(&diag, status, "out of memory printing the IR");
	if (status)
		f8_diag_print(&diag, stderr);
	f8_graph_destroy(graph);
	return status == F8_OK ? 0 : status == F8_ERR_ARGUMENT ? 2 : 1;
}

/* Whether the pipeline through `after` (NULL: none of it) stops before pass `pass` (precision:
 * planning FP8; bf16: --bf16's); an unknown pass does not (the pipeline names the passes). */
static bool stops_before(const char *after, const char *pass) {
	const f8_pass *last = after ? f8_pipeline_find(after) : NULL;
	return !after || (last && last < f8_pipeline_find(pass));
}

int f8_tool_dump_ir(int argc, char **argv) {
	request r = {0};
	f8_tool_fp8_args fp8;
	f8_diag diag;
	f8_diag_clear(&diag);
	if (f8_tool_fp8_init(&fp8, "dump-ir", true, &diag))
		return fail(&diag);
	int code = parse(argc, argv, &r, &fp8);
	if (!code && r.help) {
		print_usage(stdout);
		f8_tool_fp8_print_help(stdout, true);
		f8_tool_recompute_print_help(stdout);
		f8_tool_parallel_print_help(stdout);
	} else if (!code && f8_tool_fp8_given(&fp8) && stops_before(r.after, "precision")) {
		code = usage("the FP8 options act from --after precision on (precision, fp8-cast "
			     "and later)");
	} else if (!code && fp8.bf16 && stops_before(r.after, "bf16")) {
		code = usage("--bf16 acts from --after bf16 on (bf16, training and later)");
	} else if (!code && r.parallel.given && stops_before(r.after, "tensor-parallel")) {
		code = usage("the parallel options act from --after tensor-parallel on");
	} else if (!code && r.recompute.given && stops_before(r.after, "recompute")) {
		code = usage("the recompute options act from --after recompute on (recompute, fuse "
			     "and schedule)");
	} else if (!code) {
		code = f8_tool_fp8_finish(&fp8, &diag) ? fail(&diag) : run(&r, &fp8);
	}
	f8_tool_fp8_destroy(&fp8);
	return code;
}
