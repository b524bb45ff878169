/*
 * f8c export-onnx: writes an f8c JSON model description (a models/ file) as an ONNX model with
 * made-up weights (frontend/onnx/onnx_export.h), so that every configuration can also go
 * through the ONNX path and be held against onnxruntime.
 *   f8c export-onnx MODEL.json -o MODEL.onnx [--seed N] [--opset N]
 * Exit status: 0 written, 1 the model could not be read or written, 2 the command line is wrong.
 */
#define _POSIX_C_SOURCE 200809L // stat, sigaction

#include <errno.h>    // errno
#include <signal.h>   // sigaction, sig_atomic_t, SIGINT, SIGTERM, SIGHUP
#include <stdbool.h>  // bool
#include <stdio.h>    // fprintf, snprintf
#include <stdlib.h>   // strtoull
#include <string.h>   // strcmp, strlen, strrchr
#include <sys/stat.h> // stat

#include "frontend/frontend.h"          // f8_frontend_load
#include "frontend/onnx/onnx_export.h"  // f8_onnx_export, f8_onnx_export_options
#include "tools/commands.h"             // f8_tool_export_onnx

#ifndef F8C_VERSION
#define F8C_VERSION "unknown"
#endif

static int usage(const char *problem) {
	fprintf(stderr, "f8c export-onnx: %s\n"
			"usage: f8c export-onnx MODEL.json -o MODEL.onnx [--seed N] [--opset N]\n"
			"HINT: MODEL.json is an f8c model description (models/*.json); the "
			"weights go to MODEL.onnx.data next to MODEL.onnx, made up from --seed "
			"(default %d); --opset is %d to %d (default %d)\n",
		problem, F8_ONNX_EXPORT_SEED_DEFAULT, F8_ONNX_EXPORT_OPSET_MIN,
		F8_ONNX_EXPORT_OPSET_MAX, F8_ONNX_EXPORT_OPSET_DEFAULT);
	return 2;
}

/* Parses a decimal unsigned integer (digits only, no sign, no overflow) into *out. */
static bool parse_u64(const char *text, uint64_t *out) {
	char *end;
	if (!text || text[0] < '0' || text[0] > '9')
		return false;
	errno = 0;
	unsigned long long value = strtoull(text, &end, 10);
	if (errno || *end)
		return false;
	*out = value;
	return true;
}

/* True when `a` and `b` name the same existing file. */
static bool same_file(const char *a, const char *b) {
	struct stat sa, sb;
	return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
	       sa.st_ino == sb.st_ino;
}

/* Refuses to write over the model description itself, as the model or as its data. */
static int check_not_input(const char *input, const char *output) {
	char data[4096];
	snprintf(data, sizeof data, "%s.data", output);
	if (!same_file(input, output) && !same_file(input, data) && strcmp(input, output) != 0)
		return 0;
	fprintf(stderr, "f8c export-onnx: %s would overwrite the model description %s\n"
			"HINT: give -o a new file name, like MODEL.onnx\n", output, input);
	return 2;
}

/* Set by SIGINT, SIGTERM and SIGHUP: the writer stops and removes its temporary files, so that an
 * interrupted export of a large model leaves no hidden hundreds of GB behind. */
static volatile sig_atomic_t interrupted;

static void on_signal(int signal) {
	(void)signal;
	interrupted = 1;
}

static void catch_signals(void) {
	struct sigaction action = {.sa_handler = on_signal};
	sigemptyset(&action.sa_mask);
	sigaction(SIGINT, &action, NULL);
	sigaction(SIGTERM, &action, NULL);
	sigaction(SIGHUP, &action, NULL);
}

static bool has_extension(const char *path, const char *extension) {
	const char *dot = strrchr(path, '.');
	return dot && strcmp(dot, extension) == 0;
}

int f8_tool_export_onnx(int argc, char **argv) {
	const char *input = NULL, *output = NULL;
	f8_onnx_export_options options = {.seed = F8_ONNX_EXPORT_SEED_DEFAULT,
					  .opset = F8_ONNX_EXPORT_OPSET_DEFAULT,
					  .producer_version = F8C_VERSION,
					  .interrupted = &interrupted};
	for (int i = 1; i < argc; i++) {
		uint64_t value;
		if (strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--output") == 0) {
			if (++i == argc)
				return usage("-o needs the ONNX file to write");
			output = argv[i];
		} else if (strcmp(argv[i], "--seed") == 0) {
			if (++i == argc || !parse_u64(argv[i], &options.seed))
				return usage("--seed needs a non-negative integer below 2^64");
		} else if (strcmp(argv[i], "--opset") == 0) {
			if (++i == argc || !parse_u64(argv[i], &value) ||
			    value < F8_ONNX_EXPORT_OPSET_MIN || value > F8_ONNX_EXPORT_OPSET_MAX)
				return usage("--opset needs an opset export-onnx writes");
			options.opset = (int)value;
		} else if (argv[i][0] == '-' && argv[i][1]) {
			fprintf(stderr, "f8c export-onnx: unknown option '%s'\n", argv[i]);
			return usage("see the options below");
		} else if (input) {
			return usage("give one model description");
		} else {
			input = argv[i];
		}
	}
	if (!input)
		return usage("no model description given");
	if (!output)
		return usage("no output file given (-o MODEL.onnx)");
	if (!has_extension(input, ".json"))
		return usage("export-onnx reads f8c model descriptions (.json), whose weights it "
			     "makes up; an ONNX or text IR model has a form of its own");
	int refused = check_not_input(input, output);
	if (refused)
		return refused;

	f8_diag diag;
	f8_diag_clear(&diag);
	f8_graph *graph = NULL;
	catch_signals();
	f8_status status = f8_frontend_load(input, NULL, &graph, &diag);
	if (!status)
		status = f8_onnx_export(graph, output, &options, &diag);
	if (status)
		f8_diag_print(&diag, stderr);
	f8_graph_destroy(graph);
	return status == F8_OK ? 0 : status == F8_ERR_ARGUMENT ? 2 : 1;
}
