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
#include "passes/fuse_patterns.h" // f8_value_evaluator
#include "passes/precision.h" // f8_fp8_options
#include "passes/recompute.h" // f8_recompute_options
#include "passes/shard.h"     // f8_parallel_options
#include "passes/target.h"    // f8_target_table
#include "passes/training.h"  // f8_training_options

/*
 * What a compilation is for, given to every pass.
 *
 * The target: the passes never include codegen/, so what a kernel may hold reaches them as a
 * table (passes/target.h) that the compile driver gets from codegen (codegen/target.h,
 * f8_codegen_target_table_for(fp8): the FP8 options' --target when FP8 is planned, else
 * sm_90). fuse groups only what the table's supports_node lowers: without a table it groups
 * nothing and its report says so. precision reads the chip's FP8 GEMM rules from the table,
 * or, without one, from f8_target_table_default(fp8->target), so that planning FP8 needs no
 * codegen; a table for another chip than fp8->target is an F8_ERR_ARGUMENT. fp8-cast carries
 * out precision's decisions in Hopper's TN form on every chip, and asks the table nothing yet.
 */
typedef struct f8_pipeline_options {
	// Compile a training step with these hyperparameters; NULL compiles for inference, and
	// the passes that build training (training) leave the graph as it is.
	const f8_training_options *training;
	// Plan FP8 with these options; NULL plans no FP8, and precision and fp8-cast leave the
	// graph as it is (Megatron-LM trains in FP8 only when --fp8-format is given), but for
	// precision recording the GEMMs' BF16 under bf16.
	const f8_fp8_options *fp8;
	// --bf16, Megatron-LM's mixed precision: the forward in BF16 over f32 master weights
	// (passes/bf16.h); false leaves the model's own dtypes, and the bf16 pass does nothing.
	bool bf16;
	// What the chip runs and codegen lowers, as above; NULL: no kernels, chip facts from fp8.
	const f8_target_table *target;
	// Megatron-LM's --recompute-* options and --memory-budget (passes/recompute.h); NULL or
	// zeroed: nothing is recomputed.
	const f8_recompute_options *recompute;
	// Megatron-LM's parallel layout and the world size (passes/shard.h); NULL or zeroed: one
	// rank.
	const f8_parallel_options *parallel;
	// What computes a value from the graph's constants and bound sizes (the compile driver's
	// CPU reference kernels, tools/evaluate.h), for fuse-patterns to prove an attention mask
	// causal by its value; NULL: masks are proven by their structure alone.
	const f8_value_evaluator *evaluator;
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
 * Runs the pipeline from its first pass through the pass named `last` (NULL: all of them), for
 * inference without a target table: for the prefixes that stop before fuse (the frontends'
 * canonicalize); run the whole pipeline with f8_pipeline_run_with and a table. With `verify`,
 * runs the verifier after each pass and fails naming the pass that broke the graph.
 * F8_ERR_ARGUMENT when `last` is not a pass (the hint lists them).
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
 * `fp8` (NULL: f8_fp8_options_default()), a named bf16 pass when `bf16`, a named shard or
 * recompute pass with `parallel` and `recompute` (NULL: one rank, nothing to recompute), every
 * pass with `target` (may be NULL: see f8_pipeline_options). */
f8_status f8_pipeline_run_named(f8_graph *graph, const char *const *names, size_t n, bool verify,
				const f8_fp8_options *fp8, bool bf16,
				const f8_parallel_options *parallel,
				const f8_recompute_options *recompute,
				const f8_target_table *target, f8_diag *diag);

#endif
