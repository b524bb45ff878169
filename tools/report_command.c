/*
 * f8c report: one self-contained HTML file of the pictures an FP8 user would rather look at
 * than read (tools/report.h): loss curves of runs side by side, the precision map, the
 * scaling state over steps, the memory.
 *
 *   f8c report [RUN.jsonl | CHECKPOINT/ | PLAN/ | STATS.json | AUDIT.json | PROFILE.json]...
 *              [MODEL [audit options]] -o report.html [--title TEXT]
 *
 * Each input is told by what it is: a .jsonl file is a run (the first the baseline); a folder
 * with latest_checkpointed_iteration.txt a checkpoint, one with plan.json a plan (audited); a
 * .json file holding a calibration, an audit document or a GPU run's profile is taken as such. A model (a JSON
 * description, an ONNX file, a text IR graph) comes last: every argument after it but -o and
 * --title is f8c audit's (--fp8-format, --seq-length, ...). The page is written atomically.
 */
#define _POSIX_C_SOURCE 200809L // stat

#include <stdbool.h> // bool
#include <stdio.h>  // fprintf
#include <string.h> // strcmp, strlen
#include <sys/stat.h> // stat

#include "ir/alloc.h"            // f8_calloc, f8_free
#include "runtime/atomic_file.h" // f8_atomic_file
#include "runtime/plan.h"        // f8_plan_is_dir
#include "tools/commands.h"      // f8_tool_report, f8_tool_audit_document
#include "tools/report.h"        // f8_report
#include "tools/report_util.h"   // f8_report_ends_with

static void print_usage(FILE *out) {
	fprintf(out,
		"usage: f8c report [RUN.jsonl | CHECKPOINT | PLAN | STATS.json | AUDIT.json | "
		"PROFILE.json]... "
		"[MODEL [audit options]] -o REPORT.html [--title TEXT]\n"
		"  RUN.jsonl    f8c train's --metrics file: loss, eval loss, learning rate, gradient "
		"norm; several overlay, the first the baseline; with --log-fp8-stats N, the FP8 "
		"scaling state\n"
		"  CHECKPOINT   a --save folder: its latest checkpoint's FP8 amax histories\n"
		"  PLAN         a plan folder (f8c compile): its precision map and memory\n"
		"  STATS.json   f8c calibrate's statistics: each amax's variation per layer\n"
		"  PROFILE.json f8c train --device cuda --profile's file: where a step's time goes\n"
		"  AUDIT.json   f8c audit --json --memory's document, saved\n"
		"  MODEL        a model and, after it, f8c audit's options (f8c audit --help): its "
		"precision map and memory\n"
		"  -o, --output the HTML file to write (one file: no script, nothing fetched)\n"
		"  --title      the page's title (default: f8c report)\n");
}

static int usage(const char *problem) {
	fprintf(stderr, "f8c report: %s\n", problem);
	print_usage(stderr);
	return 2;
}

static int fail(const f8_diag *diag) {
	f8_diag_print(diag, stderr);
	return diag->status == F8_ERR_ARGUMENT ? 2 : 1;
}

static bool is_dir(const char *path) {
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Takes one input (not a model); 0 or the exit status of an error it printed. */
static int add_input(f8_report *report, const char *input) {
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_status status;
	if (f8_report_ends_with(input, ".jsonl")) {
		status = f8_report_add_metrics(report, input, stderr, &diag);
	} else if (is_dir(input) && f8_report_is_checkpoint(input)) {
		status = f8_report_add_checkpoint(report, input, stderr, &diag);
	} else if (is_dir(input) && f8_plan_is_dir(input)) {
		json_t *document = NULL;
		char *argv[] = {"report", (char *)input};
		int code = f8_tool_audit_document(2, argv, &document);
		if (code)
			return code;
		status = f8_report_add_document(report, input, document, &diag);
		json_decref(document);
	} else if (is_dir(input)) {
		return usage("a folder that is neither a checkpoint (latest_checkpointed_iteration"
			     ".txt) nor a plan (plan.json)");
	} else {
		json_error_t error;
		json_t *document = json_load_file(input, 0, &error);
		if (!document) {
			fprintf(stderr, "f8c report: %s:%d: %s\n", input, error.line, error.text);
			return 1;
		}
		status = f8_report_add_document(report, input, document, &diag);
		json_decref(document);
	}
	return status ? fail(&diag) : 0;
}

/* Whether `input` is a model to audit (rather than a report input): an ONNX file, a text IR
 * graph, or a .json file that holds neither a calibration nor an audit. */
static bool is_model(const char *input) {
	if (f8_report_ends_with(input, ".onnx") || f8_report_ends_with(input, ".f8t"))
		return true;
	if (!f8_report_ends_with(input, ".json") || is_dir(input))
		return false;
	json_t *document = json_load_file(input, 0, NULL);
	bool model = document && !json_object_get(document, "gemms") &&
		     !json_object_get(document, "tensors") && !json_object_get(document, "categories");
	json_decref(document);
	return model;
}

int f8_tool_report(int argc, char **argv) {
	const char *output = NULL, *title = "f8c report";
	f8_report report = {0};
	// The model's audit arguments: "report", MODEL, its options.
	char **audit = f8_calloc((size_t)argc + 1, sizeof *audit);
	int n_audit = 0, code = audit ? 0 : usage("out of memory");
	for (int i = 1; !code && i < argc; i++) {
		const char *arg = argv[i];
		if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
			print_usage(stdout);
			f8_free(audit);
			return 0;
		} else if (strcmp(arg, "-o") == 0 || strcmp(arg, "--output") == 0 ||
			   strcmp(arg, "--title") == 0) {
			if (i + 1 >= argc)
				code = usage("an option without its value");
			else if (arg[2] == 't')
				title = argv[++i];
			else
				output = argv[++i];
		} else if (n_audit) {
			audit[n_audit++] = argv[i]; // the model's own options
		} else if (arg[0] == '-') {
			char problem[256];
			snprintf(problem, sizeof problem, "unknown option %s (a model's options come "
				 "after the model, which comes last among the inputs)", arg);
			code = usage(problem);
		} else if (is_model(arg)) {
			audit[n_audit++] = "report";
			audit[n_audit++] = argv[i];
		} else {
			code = add_input(&report, arg);
		}
	}
	if (!code && !output)
		code = usage("no output: give -o REPORT.html");
	if (!code && !n_audit && !report.n_runs && !report.n_tables && !report.audit &&
	    !report.calibration && !report.profile)
		code = usage("nothing to report: give a run, a checkpoint, a plan, a calibration, a "
			     "profile or a model");
	if (!code && n_audit) {
		json_t *document = NULL;
		code = f8_tool_audit_document(n_audit, audit, &document);
		f8_diag diag;
		f8_diag_clear(&diag);
		if (!code && f8_report_add_document(&report, audit[1], document, &diag))
			code = fail(&diag);
		json_decref(document);
	}
	if (!code) {
		f8_diag diag;
		f8_diag_clear(&diag);
		f8_atomic_file *file = NULL;
		f8_status status = f8_report_label_slots(&report, &diag);
		if (!status)
			status = f8_atomic_file_open(output, &file, &diag);
		if (!status)
			status = f8_report_write_html(&report, title, f8_atomic_file_stream(file),
						      &diag);
		if (!status)
			status = f8_atomic_file_commit(file, &diag);
		else if (file)
			f8_atomic_file_abort(file);
		if (status)
			code = fail(&diag);
		else
			fprintf(stderr, "f8c report: wrote %s\n", output);
	}
	f8_report_free(&report);
	f8_free(audit);
	return code;
}
