/*
 * libFuzzer target for f8c report's inputs and page (tools/report_inputs.c, report_html.c): the
 * first byte picks what the rest is, as `f8c report` tells its inputs apart:
 *   even: a metrics JSONL file (f8c train --metrics, --log-fp8-stats lines included), read with
 *         f8_report_add_metrics;
 *   odd:  a JSON document, taken by f8_report_add_document (an audit, a calibration, a
 *         profile) when it is an object.
 * Then the page is written, to /dev/null. The promises:
 *   - a read fails with a status and a message, or adds what it says (a metrics file that
 *     reads has a run of at least one record);
 *   - the page is written with F8_OK whatever was read;
 * and never a crash, a hang (libFuzzer's -timeout), a leak or a sanitizer report. A broken
 * promise aborts, so libFuzzer keeps the input.
 *
 * Built by the `fuzz` preset (F8C_FUZZ=ON, clang, -fsanitize=fuzzer,address,undefined); seeds in
 * tests/fuzz/corpus_report/.
 */
#define _POSIX_C_SOURCE 200809L // mkdtemp (fuzz_support.h)

#include <jansson.h> // json_loadb
#include <stdint.h>  // uint8_t
#include <stdio.h>   // fopen, fprintf, snprintf
#include <stdlib.h>  // abort, atexit

#include "tests/fuzz/fuzz_support.h" // fuzz_make_folder, fuzz_write_file, fuzz_remove_folder
#include "tools/report.h"            // f8_report

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char folder[256], path[400];
static FILE *sink, *warnings;

static void clean_up(void) {
	fuzz_remove_folder(folder);
	if (sink)
		fclose(sink);
	if (warnings)
		fclose(warnings);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
	(void)argc, (void)argv;
	fuzz_make_folder("report", folder, sizeof folder);
	snprintf(path, sizeof path, "%s/run.jsonl", folder);
	sink = fopen("/dev/null", "w");
	warnings = fopen("/dev/null", "w");
	if (!sink || !warnings) {
		fprintf(stderr, "fuzz_report: cannot open /dev/null\n");
		abort();
	}
	atexit(clean_up);
	return 0;
}

static void fail(const char *what, const f8_diag *diag) {
	fprintf(stderr, "fuzz_report: %s\n", what);
	if (diag)
		f8_diag_print(diag, stderr);
	abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
	if (size < 1)
		return 0;
	f8_report report = {0};
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_status status;
	if (data[0] % 2 == 0) {
		fuzz_write_file("report", path, data + 1, size - 1);
		status = f8_report_add_metrics(&report, path, warnings, &diag);
		if (status && !diag.message[0])
			fail("a failed read without a message", &diag);
		if (!status && (report.n_runs != 1 || json_array_size(report.runs[0].records) < 1))
			fail("a metrics file read with no record", NULL);
	} else {
		json_t *document = json_loadb((const char *)data + 1, size - 1, 0, NULL);
		status = json_is_object(document)
				 ? f8_report_add_document(&report, "fuzz.json", document, &diag)
				 : F8_OK;
		json_decref(document);
		if (status && !diag.message[0])
			fail("a refused document without a message", &diag);
	}
	f8_diag_clear(&diag);
	if (f8_report_label_slots(&report, &diag) ||
	    f8_report_write_html(&report, "fuzz", sink, &diag))
		fail("the page was not written", &diag);
	f8_report_free(&report);
	return 0;
}
