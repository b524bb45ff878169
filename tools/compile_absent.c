/*
 * The compile driver of a build without LLVM (-DF8C_LLVM=OFF, tools/compile.h): an f8c for the
 * machines that run plans, which have the CUDA libraries but no compiler toolchain. Everything
 * that would compile a model fails saying so and how to get a plan; f8c compile and f8c
 * export-onnx, which exist only to compile or write models, do the same.
 */
#include <stdio.h> // fprintf

#include "tools/commands.h" // f8_tool_compile, f8_tool_export_onnx
#include "tools/compile.h"  // the driver's functions

/* The refusal, with its hint. */
static f8_status refuse(f8_diag *diag, const char *what) {
	f8_diag_set(diag, F8_ERR_UNSUPPORTED, "this f8c was built without LLVM (-DF8C_LLVM=OFF): "
		    "it runs plans and cannot %s", what);
	f8_diag_hint(diag, "compile a plan with a full build of f8c (f8c compile MODEL ... -o PLAN) "
		     "and give this one the plan folder");
	return F8_ERR_UNSUPPORTED;
}

bool f8_tool_can_compile(void) {
	return false;
}

f8_status f8_tool_load_model(const char *path, const f8_frontend_options *options,
			     f8_graph **out, f8_diag *diag) {
	(void)path, (void)options;
	*out = NULL;
	return refuse(diag, "load a model");
}

f8_status f8_tool_bind_dims(f8_graph *graph, const f8_dim_binding *dims, uint32_t n_dims,
			    f8_diag *diag) {
	(void)graph, (void)dims, (void)n_dims;
	return refuse(diag, "bind a model's sizes");
}

int64_t f8_tool_described_seq(const char *path) {
	(void)path;
	return 0;
}

bool f8_tool_vocab_padding(const char *path, int64_t vocab_multiple, char *line, size_t size) {
	(void)path, (void)vocab_multiple, (void)line, (void)size;
	return false;
}

f8_status f8_tool_run_passes(f8_graph *graph, const char *after, bool verify,
			     const f8_pipeline_options *options, FILE *report, f8_diag *diag) {
	(void)graph, (void)after, (void)verify, (void)options, (void)report;
	return refuse(diag, "run the compiler's passes");
}

f8_status f8_tool_compile_training(const f8_tool_compile_options *compile,
				   const f8_train_config *run, f8_graph **out, f8_diag *diag) {
	(void)compile, (void)run;
	*out = NULL;
	return refuse(diag, "compile a model");
}

f8_status f8_tool_compile_inference(const f8_tool_compile_options *compile, uint64_t seed,
				    f8_graph **out, f8_diag *diag) {
	(void)compile, (void)seed;
	*out = NULL;
	return refuse(diag, "compile a model");
}

f8_status f8_tool_plan_make(f8_graph *graph, bool training, bool ptx, const char *model,
			    const char *const *args, uint32_t n_args, f8_plan **out, f8_diag *diag) {
	(void)training, (void)ptx, (void)model, (void)args, (void)n_args;
	f8_graph_destroy(graph);
	*out = NULL;
	return refuse(diag, "generate kernels");
}

/* A command that exists only in a full build. */
static int absent(const char *command) {
	f8_diag diag;
	f8_diag_clear(&diag);
	char what[64];
	snprintf(what, sizeof what, "run f8c %s", command);
	refuse(&diag, what);
	f8_diag_print(&diag, stderr);
	return 1;
}

int f8_tool_compile(int argc, char **argv) {
	(void)argc, (void)argv;
	return absent("compile");
}

int f8_tool_export_onnx(int argc, char **argv) {
	(void)argc, (void)argv;
	return absent("export-onnx");
}
