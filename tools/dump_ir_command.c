/*
 * f8c dump-ir: reads a model, runs the pipeline through a pass, prints the IR as text or JSON.
 */
#include <stdio.h>  // fprintf
#include <string.h> // strcmp, strchr

#include "frontend/frontend.h" // f8_frontend_load, f8_dim_binding
#include "ir/json.h"         // f8_json_print
#include "ir/text.h"         // f8_text_print
#include "ir/verify.h"       // f8_graph_verify
#include "passes/pipeline.h" // f8_pipeline_run
#include "tools/commands.h"  // f8_tool_dump_ir
#include "tools/tool_options.h" // f8_tool_parse_dim_binding

static int usage(const char *problem) {
	fprintf(stderr, "f8c dump-ir: %s\n"
			"usage: f8c dump-ir MODEL [--dim NAME=N]... [--after PASS] [--format text|json] "
			"[--verify] [--report]\n"
			"HINT: MODEL is an ONNX file, a JSON model description (models/*.json) or the "
			"text IR (*.f8ir); --dim binds a symbolic size; --after runs the pipeline through "
			"PASS first; --report says on stderr what the passes decided and why\n",
		problem);
	return 2;
}

int f8_tool_dump_ir(int argc, char **argv) {
	const char *path = NULL, *after = NULL, *format = "text";
	bool verify = false, report = false;
	enum { MAX_BINDINGS = 32 };
	f8_dim_binding dims[MAX_BINDINGS];
	uint32_t n_dims = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--dim") == 0) {
			if (++i == argc)
				return usage("--dim needs NAME=N");
			if (n_dims == MAX_BINDINGS)
				return usage("too many --dim options");
			if (!f8_tool_parse_dim_binding(argv[i], &dims[n_dims++]))
				return usage("--dim needs NAME=N with N a positive integer");
		} else if (strcmp(argv[i], "--after") == 0) {
			if (++i == argc)
				return usage("--after needs a pass name");
			after = argv[i];
		} else if (strcmp(argv[i], "--format") == 0) {
			if (++i == argc)
				return usage("--format needs text or json");
			format = argv[i];
		} else if (strcmp(argv[i], "--verify") == 0) {
			verify = true;
		} else if (strcmp(argv[i], "--report") == 0) {
			report = true;
		} else if (argv[i][0] == '-' && argv[i][1]) {
			fprintf(stderr, "f8c dump-ir: unknown option '%s'\n", argv[i]);
			return usage("see the options below");
		} else if (path) {
			return usage("give one model file");
		} else {
			path = argv[i];
		}
	}
	if (!path)
		return usage("no model file given");
	if (strcmp(format, "text") != 0 && strcmp(format, "json") != 0)
		return usage("--format must be text or json");

	f8_diag diag;
	f8_diag_clear(&diag);
	f8_graph *graph = NULL;
	f8_frontend_options options = {.dims = dims, .n_dims = n_dims};
	f8_status status = f8_frontend_load(path, &options, &graph, &diag);
	// Through a pass at or past training compiles a training step, with the default
	// hyperparameters (f8c train sets its own).
	f8_training_options hyperparameters = f8_training_options_default();
	const f8_pass *last = after ? f8_pipeline_find(after) : NULL;
	f8_pipeline_options compile = {
		.training = last && last >= f8_pipeline_find("training") ? &hyperparameters : NULL};
	if (!status && after)
		status = f8_pipeline_run_with(graph, after, verify, &compile, report ? stderr : NULL,
					      &diag);
	if (!status && verify)
		status = f8_graph_verify(graph, &diag);
	if (!status)
		status = strcmp(format, "json") == 0 ? f8_json_print(graph, stdout, &diag)
						      : f8_text_print(graph, stdout);
	if (status == F8_ERR_IO && !diag.message[0])
		f8_diag_set(&diag, status, "cannot write the output");
	if (status)
		f8_diag_print(&diag, stderr);
	f8_graph_destroy(graph);
	return status == F8_OK ? 0 : status == F8_ERR_ARGUMENT ? 2 : 1;
}
