/*
 * The golden IR test runner. A golden file is text IR with directives in comments:
 *
 *   # passes: canonicalize            passes to run, verifying after each (none: verify only)
 *   # fp8: --fp8-recipe block         FP8 options for precision and fp8-cast, as f8c takes them
 *                                     (tools/fp8_options.h; none: their defaults); --bf16 here
 *                                     is for the bf16 pass (FP8 stays on, as in f8c audit)
 *   # parallel: --world-size 2          parallel options for the shard pass, as f8c takes them
 *                                     (tools/parallel_options.h; none: one rank)
 *   # recompute: --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
 *                                     recompute options for the recompute pass, as f8c takes
 *                                     them (tools/recompute_options.h; none: nothing to recompute)
 *   graph g { ... }                   the input
 *   # expect:                         then the exact text the printer must produce, or
 *   # expect-error:                   then the exact diagnostic (as f8c prints it)
 *
 * Besides the comparison, every printed graph must round-trip (parse, print gives the same
 * text) and have a JSON form that jansson reads back. `golden --update FILE` rewrites the
 * expected part from what f8c does now (review the diff before committing it).
 */
#define _POSIX_C_SOURCE 200809L // open_memstream

#include <jansson.h> // json_loads, to check the JSON form
#include <libgen.h>  // basename
#include <stdio.h>   // FILE, fopen, printf
#include <stdlib.h>  // free
#include <string.h>  // strstr, strcmp

#include "codegen/target.h" // f8_codegen_target_table_for
#include "ir/alloc.h"        // f8_free
#include "ir/json.h"         // f8_json_print
#include "ir/text.h"         // f8_text_parse, f8_text_print_string
#include "ir/verify.h"       // f8_graph_verify
#include "tests/test_support.h" // test_read_file
#include "passes/pipeline.h" // f8_pipeline_run_named
#include "tools/fp8_options.h" // f8_tool_fp8_args, the FP8 options' table
#include "tools/parallel_options.h"  // f8_tool_parallel_args
#include "tools/recompute_options.h" // f8_tool_recompute_args

enum { MAX_PASSES = 16 };

/* Reads "# passes: a, b" from the input part into names (pointers into `line_copy`). */
static size_t read_passes(const char *input, char *line_copy, size_t size, const char **names) {
	const char *line = strstr(input, "# passes:");
	if (!line)
		return 0;
	line += strlen("# passes:");
	size_t len = strcspn(line, "\n");
	if (len >= size)
		len = size - 1;
	memcpy(line_copy, line, len);
	line_copy[len] = '\0';
	size_t n = 0;
	for (char *token = strtok(line_copy, " ,\t"); token && n < MAX_PASSES; token = strtok(NULL, " ,\t"))
		names[n++] = token;
	return n;
}

/* Splits the words of the directive `marker` ("# fp8:") of the input part into argv (pointers
 * into `copy`, `size` bytes); their count, 0 without the line. */
static int read_words(const char *input, const char *marker, char *copy, size_t size,
		      char **argv, int max) {
	const char *line = strstr(input, marker);
	int argc = 0;
	if (!line)
		return 0;
	line += strlen(marker);
	size_t len = strcspn(line, "\n");
	if (len >= size)
		len = size - 1;
	memcpy(copy, line, len);
	copy[len] = '\0';
	for (char *token = strtok(copy, " \t"); token && argc < max; token = strtok(NULL, " \t"))
		argv[argc++] = token;
	return argc;
}

/* Reads "# fp8: --opt value ..." from the input part into fp8 with the FP8 options' table;
 * without the line, fp8 keeps the defaults. Fails as f8c would on a bad option. */
static f8_status read_fp8(const char *input, f8_tool_fp8_args *fp8, f8_diag *diag) {
	char copy[512];
	char *argv[64];
	int argc = read_words(input, "# fp8:", copy, sizeof copy, argv, 64);
	for (int i = 0; i < argc; i++) {
		bool taken;
		f8_status status = f8_tool_fp8_parse_arg(fp8, argc, argv, &i, &taken, diag);
		if (!status && !taken)
			status = f8_diag_set(diag, F8_ERR_ARGUMENT, "'%s' is not an FP8 option", argv[i]);
		if (status)
			return status;
	}
	return f8_tool_fp8_finish(fp8, diag);
}

/* Reads "# recompute: --opt value ..." likewise; without the line, nothing is recomputed. */
static f8_status read_recompute(const char *input, f8_tool_recompute_args *args, f8_diag *diag) {
	char copy[512];
	char *argv[64];
	int argc = read_words(input, "# recompute:", copy, sizeof copy, argv, 64);
	for (int i = 0; i < argc; i++) {
		bool taken;
		f8_status status = f8_tool_recompute_parse_arg(args, argc, argv, &i, &taken, diag);
		if (!status && !taken)
			status = f8_diag_set(diag, F8_ERR_ARGUMENT, "'%s' is not a recompute option",
					     argv[i]);
		if (status)
			return status;
	}
	return f8_tool_recompute_finish(args, diag);
}

/* Reads "# parallel: --opt value ..." likewise; without the line, one rank. */
static f8_status read_parallel(const char *input, f8_tool_parallel_args *args, f8_diag *diag) {
	char copy[512];
	char *argv[64];
	int argc = read_words(input, "# parallel:", copy, sizeof copy, argv, 64);
	for (int i = 0; i < argc; i++) {
		bool taken;
		f8_status status = f8_tool_parallel_parse_arg(args, argc, argv, &i, &taken, diag);
		if (!status && !taken)
			status = f8_diag_set(diag, F8_ERR_ARGUMENT, "'%s' is not a parallel option",
					     argv[i]);
		if (status)
			return status;
	}
	return F8_OK;
}

/* Runs the test's input; returns what f8c printed (IR or diagnostic) in a malloc'd string. */
static char *run(const char *input, size_t input_len, const char *file_name, bool *errored,
		 bool *round_trip_ok) {
	char pass_line[256];
	const char *passes[MAX_PASSES];
	size_t n_passes = read_passes(input, pass_line, sizeof pass_line, passes);
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_graph *graph = NULL;
	f8_tool_fp8_args fp8;
	f8_tool_recompute_args recompute = {0};
	f8_tool_parallel_args parallel = {0};
	f8_status status = f8_tool_fp8_init(&fp8, "golden", true, &diag);
	if (!status)
		status = read_fp8(input, &fp8, &diag);
	if (!status)
		status = read_recompute(input, &recompute, &diag);
	if (!status)
		status = read_parallel(input, &parallel, &diag);
	if (!status)
		status = f8_text_parse(input, input_len, file_name, &graph, &diag);
	const f8_fp8_options *planned = f8_tool_fp8_options(&fp8);
	if (!status)
		status = n_passes ? f8_pipeline_run_named(graph, passes, n_passes, true, planned,
							  fp8.bf16, &parallel.options,
							  &recompute.options,
							  f8_codegen_target_table_for(planned), &diag)
				  : f8_graph_verify(graph, &diag);
	f8_tool_fp8_destroy(&fp8);
	char *output = NULL;
	size_t output_len = 0;
	*errored = status != F8_OK;
	*round_trip_ok = true;
	if (status) {
		FILE *stream = open_memstream(&output, &output_len);
		f8_diag_print(&diag, stream);
		fclose(stream);
		f8_graph_destroy(graph);
		return output;
	}
	char *printed;
	size_t printed_len;
	if (f8_text_print_string(graph, &printed, &printed_len)) {
		f8_graph_destroy(graph);
		return NULL;
	}
	// Round trip: the printed text parses back into a graph that prints the same.
	f8_graph *again = NULL;
	char *reprinted = NULL;
	size_t reprinted_len = 0;
	if (f8_text_parse(printed, printed_len, file_name, &again, &diag) ||
	    f8_text_print_string(again, &reprinted, &reprinted_len) ||
	    strcmp(printed, reprinted) != 0) {
		printf("round trip failed:\n--- printed\n%s--- reprinted\n%s", printed,
		       reprinted ? reprinted : "(did not parse)\n");
		f8_diag_print(&diag, stdout);
		*round_trip_ok = false;
	}
	// The JSON form is valid JSON.
	char *json = NULL;
	size_t json_len = 0;
	FILE *stream = open_memstream(&json, &json_len);
	f8_status json_status = f8_json_print(graph, stream, &diag);
	fclose(stream);
	json_error_t error;
	json_t *loaded = json_status ? NULL : json_loads(json, 0, &error);
	if (!loaded) {
		printf("the JSON form does not load: %s\n", json_status ? diag.message : error.text);
		*round_trip_ok = false;
	}
	json_decref(loaded);
	free(json);
	output = strdup(printed);
	f8_free(printed);
	f8_free(reprinted);
	f8_graph_destroy(again);
	f8_graph_destroy(graph);
	return output;
}

int main(int argc, char **argv) {
	bool update = argc == 3 && strcmp(argv[1], "--update") == 0;
	if (argc != 2 && !update) {
		fprintf(stderr, "usage: golden [--update] FILE.f8t\n");
		return 2;
	}
	const char *path = argv[argc - 1];
	size_t len;
	char *text = test_read_file(path, &len);
	if (!text) {
		fprintf(stderr, "golden: cannot read %s\n", path);
		return 2;
	}
	char *marker = strstr(text, "\n# expect");
	if (!marker) {
		fprintf(stderr, "golden: %s has no '# expect:' or '# expect-error:' line\n", path);
		return 2;
	}
	marker++;
	bool expect_error = strncmp(marker, "# expect-error:\n", 16) == 0;
	if (!expect_error && strncmp(marker, "# expect:\n", 10) != 0) {
		fprintf(stderr, "golden: %s: the marker must be '# expect:' or '# expect-error:' alone on its line\n", path);
		return 2;
	}
	const char *expected = strchr(marker, '\n') + 1;
	char *path_copy = strdup(path);
	bool errored, round_trip_ok;
	char *actual = run(text, (size_t)(marker - text), basename(path_copy), &errored, &round_trip_ok);
	int failed = 0;
	if (!actual) {
		printf("FAIL %s: out of memory\n", path);
		failed = 1;
	} else if (update) {
		FILE *out = fopen(path, "wb");
		fwrite(text, 1, (size_t)(marker - text), out);
		fprintf(out, "%s\n%s", errored ? "# expect-error:" : "# expect:", actual);
		fclose(out);
		printf("updated %s\n", path);
	} else if (errored != expect_error || strcmp(actual, expected) != 0 || !round_trip_ok) {
		printf("FAIL %s\n--- expected (%s)\n%s--- actual (%s)\n%s", path,
		       expect_error ? "an error" : "IR", expected, errored ? "an error" : "IR", actual);
		failed = 1;
	} else {
		printf("ok %s\n", path);
	}
	free(actual);
	free(path_copy);
	free(text);
	return failed;
}
