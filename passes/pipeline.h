/*
 * The pass pipeline: the passes in the order they run, and ways to run all of them, a prefix
 * (`--after PASS`), or a named list (the golden tests).
 */
#ifndef F8_PASSES_PIPELINE_H
#define F8_PASSES_PIPELINE_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdio.h>   // FILE

#include "ir/diag.h"          // f8_status, f8_diag
#include "ir/graph.h"         // f8_graph
#include "passes/precision.h" // f8_fp8_options
#include "passes/training.h"  // f8_training_options

/* What a compilation is for, given to every pass. */
typedef struct f8_pipeline_options {
	// Compile a training step with these hyperparameters; NULL compiles for inference, and
	// the passes that build training (training) leave the graph as it is.
	const f8_training_options *training;
	// Plan FP8 with these options; NULL plans no FP8, and precision and fp8-cast leave the
	// graph as it is (Megatron-LM trains in FP8 only when --fp8-format is given).
	const f8_fp8_options *fp8;
} f8_pipeline_options;

/* A pass rewrites the graph in place; on failure it fills `diag` and returns its status. A pass
 * that makes decisions writes what it decided and why to `report` when that is not NULL. */
typedef f8_status (*f8_pass_fn)(f8_graph *graph, const f8_pipeline_options *options,
				FILE *report, f8_diag *diag);

typedef struct f8_pass {
	const char *name; // as in --after and in golden tests: "canonicalize"
	f8_pass_fn run;
	const char *why;  // why it stands where it stands in the pipeline
} f8_pass;

/* The pipeline, in order: n passes in *count. */
const f8_pass *f8_pipeline_passes(size_t *count);

/* The pass named `name`, or NULL. */
const f8_pass *f8_pipeline_find(const char *name);

/*
 * Runs the pipeline from its first pass through the pass named `last` (NULL: all of them).
 * With `verify`, runs the verifier after each pass and fails naming the pass that broke the
 * graph. F8_ERR_ARGUMENT when `last` is not a pass (the hint lists them).
 */
f8_status f8_pipeline_run(f8_graph *graph, const char *last, bool verify, f8_diag *diag);

/* f8_pipeline_run with the passes' reports written to `report` (NULL: none). */
f8_status f8_pipeline_run_reported(f8_graph *graph, const char *last, bool verify, FILE *report,
				   f8_diag *diag);

/* f8_pipeline_run_reported for what `options` asks (NULL: inference). */
f8_status f8_pipeline_run_with(f8_graph *graph, const char *last, bool verify,
			       const f8_pipeline_options *options, FILE *report, f8_diag *diag);

/* Runs the passes named in `names` (n of them), in that order, verifying as above; a named
 * training pass runs with the default hyperparameters, a named precision or fp8-cast pass with
 * `fp8` (NULL: f8_fp8_options_default()). */
f8_status f8_pipeline_run_named(f8_graph *graph, const char *const *names, size_t n, bool verify,
				const f8_fp8_options *fp8, f8_diag *diag);

#endif
