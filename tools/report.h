/*
 * f8c report's inputs and its page: what a user who trains in FP8 would rather look at than
 * read, in one self-contained HTML file (no script, no network; every picture an SVG written
 * here, with a table of its data beside it).
 *
 * Inputs (tools/report_inputs.c), any number and mix:
 *   - runs: metrics JSONL files of f8c train (--metrics), each a series of lines; the first is
 *     the baseline the others are held to. A line that is not a JSON object (malformed, or cut
 *     off by a killed run) is reported with file:line and skipped.
 *   - the scaling state: a run's --log-fp8-stats lines (each slot's newest amax and scale,
 *     every N iterations), or a checkpoint folder's FP8 tables (each slot's amax history).
 *   - an audit document (tools/audit_command.c: a model with its options, a plan folder, or a
 *     saved `f8c audit --json`): the precision map and the memory.
 *   - a calibration STATS.json (tools/calibration.h): the amax's variation per layer.
 *   - a GPU run's profile (f8c train --device cuda --profile FILE): where the step's time goes.
 * The page (tools/report_html.c) draws what its inputs hold and says what it lacks.
 */
#ifndef F8_TOOLS_REPORT_H
#define F8_TOOLS_REPORT_H

#include <jansson.h> // json_t
#include <stdbool.h> // bool
#include <stdint.h>  // int64_t, uint32_t
#include <stdio.h>   // FILE

#include "ir/diag.h" // f8_status, f8_diag

/* One metrics file. */
typedef struct f8_report_run {
	char *path;
	char *label;        // its name in legends: the file's name less .jsonl
	json_t *records;    // the lines that parsed, in order: JSON objects
	uint32_t skipped;   // lines reported and skipped
} f8_report_run;

/* One FP8 scaling table over the recorded steps. */
typedef struct f8_report_table {
	char *source;       // the run's label, or the checkpoint folder
	char *name;         // "fp8.weights"
	char **labels;      // (n_slots) what each slot scales: "w of layers.0.attn.qkv"
	char **formats;     // (n_slots) "E4M3", "E5M2", or NULL where unknown
	uint32_t n_slots;
	int64_t *steps;     // (n_steps) ascending: iterations, or with `updates` the table's
	uint32_t n_steps;   // updates numbered from 1 (a checkpoint's history)
	bool updates;
	int64_t *nonfinite; // (n_steps) the table's non-finite amaxes skipped so far, or -1
	double *amax;       // [n_steps][n_slots]; NAN where it was not finite
	double *scale;      // [n_steps][n_slots], or NULL where not recorded (a checkpoint's
			    // history holds amaxes only)
} f8_report_table;

typedef struct f8_report {
	f8_report_run *runs;
	uint32_t n_runs;
	f8_report_table *tables;
	uint32_t n_tables;
	json_t *audit;           // an audit document, or NULL
	char *audit_source;      // what it was made from
	json_t *calibration;     // a calibration STATS.json, or NULL
	char *calibration_path;
	json_t *profile;         // a GPU run's step-time breakdown (f8c train --profile), or NULL
	char *profile_path;
} f8_report;

/* Reads a metrics JSONL file as a run (and its --log-fp8-stats lines as tables). Each line
 * that is not a JSON object is reported on `warnings` as "FILE:LINE: ..." and skipped.
 * F8_ERR_IO when the file cannot be read, F8_ERR_PARSE when no line parsed. */
f8_status f8_report_add_metrics(f8_report *report, const char *path, FILE *warnings,
				f8_diag *diag);

/* Reads the FP8 tables of the checkpoint folder's latest iteration (a folder f8c train --save
 * wrote). F8_ERR_IO, F8_ERR_PARSE. A checkpoint without FP8 tables adds none and says so on
 * `warnings`. */
f8_status f8_report_add_checkpoint(f8_report *report, const char *folder, FILE *warnings,
				   f8_diag *diag);

/* Takes `document` (a calibration STATS.json, an audit document, or a GPU run's profile,
 * told apart by their keys; the report keeps the reference). F8_ERR_PARSE for anything
 * else. */
f8_status f8_report_add_document(f8_report *report, const char *source, json_t *document,
				 f8_diag *diag);

/* Names the slots that only have numbers ("slot 3": a checkpoint's tables) from the audit's
 * operands (their scale_table and slot), with their formats. F8_ERR_NOMEM. */
f8_status f8_report_label_slots(f8_report *report, f8_diag *diag);

/* Whether a folder is a checkpoint folder (it has latest_checkpointed_iteration.txt). */
int f8_report_is_checkpoint(const char *folder);

void f8_report_free(f8_report *report);

/* Writes the page. F8_ERR_IO. */
f8_status f8_report_write_html(const f8_report *report, const char *title, FILE *out,
			       f8_diag *diag);

#endif
