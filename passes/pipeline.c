/*
 * The pipeline table: every pass, in order, with the reason for its place beside it.
 */
#define _POSIX_C_SOURCE 200809L // strnlen

#include "passes/pipeline.h" // f8_pass, f8_pipeline_run

#include <stdio.h>  // snprintf
#include <string.h> // strcmp, strnlen, memcpy

#include "ir/verify.h"           // f8_graph_verify
#include "passes/attention_layout.h" // f8_pass_attention_layout_run
#include "passes/attention_unfused.h" // f8_pass_attention_unfused_run
#include "passes/bf16.h"          // f8_pass_bf16_run
#include "passes/canonicalize.h"  // f8_pass_canonicalize_run
#include "passes/context_parallel.h" // f8_pass_context_parallel_run
#include "passes/expert_parallel.h" // f8_pass_expert_parallel_run
#include "passes/fp8_cast.h"      // f8_pass_fp8_cast_run
#include "passes/fuse.h"          // f8_pass_fuse_run
#include "passes/fuse_patterns.h" // f8_pass_fuse_patterns_run
#include "passes/pipeline_parallel.h" // f8_pass_pipeline_parallel_run
#include "passes/recompute.h"     // f8_pass_recompute_run
#include "passes/shard.h"         // f8_pass_shard_run
#include "passes/tensor_parallel.h" // f8_pass_tensor_parallel_run
#include "passes/schedule.h"      // f8_pass_schedule_run
#include "passes/training.h"      // f8_pass_training_run

static f8_status canonicalize(f8_graph *graph, const f8_pipeline_options *options, FILE *report,
			      f8_diag *diag) {
	(void)options, (void)report; // it decides nothing a person needs to audit
	return f8_pass_canonicalize_run(graph, diag);
}

static f8_status fuse_patterns(f8_graph *graph, const f8_pipeline_options *options,
			       FILE *report, f8_diag *diag) {
	return f8_pass_fuse_patterns_run(graph, options->evaluator, report, diag);
}

static f8_status bf16(f8_graph *graph, const f8_pipeline_options *options, FILE *report,
		      f8_diag *diag) {
	if (!options->bf16) // the model's own dtypes
		return F8_OK;
	return f8_pass_bf16_run(graph, report, diag);
}

static f8_status attention_unfused(f8_graph *graph, const f8_pipeline_options *options,
				   FILE *report, f8_diag *diag) {
	// The chip the plan is for: the table's, else the FP8 options'; neither: the reference
	// kernels run it (inference without a target), which take attention in any dtype.
	f8_target chip = options->target ? options->target->chip
			 : options->fp8  ? options->fp8->target
					 : F8_TARGET_CPU;
	return f8_pass_attention_unfused_run(graph, chip, report, diag);
}

static f8_status training(f8_graph *graph, const f8_pipeline_options *options, FILE *report,
			  f8_diag *diag) {
	if (!options->training) // compiling for inference
		return F8_OK;
	return f8_pass_training_run(graph, options->training, report, diag);
}

static f8_status precision(f8_graph *graph, const f8_pipeline_options *options, FILE *report,
			   f8_diag *diag) {
	if (!options->fp8 && !options->bf16) // no FP8 asked for, nor GEMMs in BF16 to record
		return F8_OK;
	return f8_pass_precision_run(graph, options->fp8, options->target, report, diag);
}

static f8_status fp8_cast(f8_graph *graph, const f8_pipeline_options *options, FILE *report,
			  f8_diag *diag) {
	if (!options->fp8)
		return F8_OK;
	return f8_pass_fp8_cast_run(graph, options->fp8, report, diag);
}

static f8_status shard(f8_graph *graph, const f8_pipeline_options *options, FILE *report,
		       f8_diag *diag) {
	// A no-op for one rank; for inference too (it shards a training step).
	if (!options->training)
		return F8_OK;
	return f8_pass_shard_run(graph, options->parallel, report, diag);
}

/* The parallel passes' guard: a no-op without the parallelism (`size` <= 1) or for inference;
 * an inference plan asking for it is refused (a plan for inference is one rank's, not made
 * whole). *run says whether the pass runs. */
static f8_status training_only(const f8_pipeline_options *options, int64_t size,
			       const char *option, const char *what, bool *run, f8_diag *diag) {
	*run = options->training && size > 1;
	if (!options->training && size > 1)
		return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "--%s: %s parallelism is built for "
				   "training steps; an inference plan is one rank's", option, what);
	return F8_OK;
}

static f8_status tensor_parallel(f8_graph *graph, const f8_pipeline_options *options,
				 FILE *report, f8_diag *diag) {
	bool run;
	f8_status status = training_only(options, options->parallel ? options->parallel->tensor : 0,
					 "tensor-model-parallel-size", "tensor", &run, diag);
	return status || !run ? status
			      : f8_pass_tensor_parallel_run(graph, options->parallel, report, diag);
}

static f8_status context_parallel(f8_graph *graph, const f8_pipeline_options *options,
				  FILE *report, f8_diag *diag) {
	bool run;
	f8_status status = training_only(options, options->parallel ? options->parallel->context : 0,
					 "context-parallel-size", "context", &run, diag);
	return status || !run ? status
			      : f8_pass_context_parallel_run(graph, options->parallel, report, diag);
}

static f8_status expert_parallel(f8_graph *graph, const f8_pipeline_options *options,
				 FILE *report, f8_diag *diag) {
	bool run;
	f8_status status = training_only(options, options->parallel ? options->parallel->expert : 0,
					 "expert-model-parallel-size", "expert", &run, diag);
	return status || !run ? status
			      : f8_pass_expert_parallel_run(graph, options->parallel, report, diag);
}

static f8_status pipeline_parallel(f8_graph *graph, const f8_pipeline_options *options,
				   FILE *report, f8_diag *diag) {
	bool run;
	f8_status status = training_only(options,
					 options->parallel ? options->parallel->pipeline : 0,
					 "pipeline-model-parallel-size", "pipeline", &run, diag);
	return status || !run ? status
			      : f8_pass_pipeline_parallel_run(graph, options->parallel, report,
							      diag);
}

static f8_status recompute(f8_graph *graph, const f8_pipeline_options *options, FILE *report,
			   f8_diag *diag) {
	// A no-op without a granularity or a budget; the budget's trials fuse for the target.
	return f8_pass_recompute_run(graph, options->recompute, options->target, report, diag);
}

static f8_status attention_layout(f8_graph *graph, const f8_pipeline_options *options,
				 FILE *report, f8_diag *diag) {
	(void)options; // exact on every target: both backends read the packed layouts
	return f8_pass_attention_layout_run(graph, report, diag);
}

static f8_status fuse(f8_graph *graph, const f8_pipeline_options *options, FILE *report,
		      f8_diag *diag) {
	// The same kernels for training and inference, with FP8 or without: only the target's
	// table decides what lowers.
	return f8_pass_fuse_run(graph, options->target, report, diag);
}

static f8_status schedule(f8_graph *graph, const f8_pipeline_options *options, FILE *report,
			  f8_diag *diag) {
	(void)options;
	return f8_pass_schedule_run(graph, NULL, report, diag);
}

static const f8_pass pipeline[] = {
	{"canonicalize", canonicalize,
	 "first: every later pass reads inferred types and wants no dead nodes to plan for"},
	{"fuse-patterns", fuse_patterns,
	 "before training: autodiff and the FP8 passes work on Linear, Attention and the norms, "
	 "whose gradients and casts are known, not on the primitives exporters spell them with"},
	{"bf16", bf16,
	 "after fuse-patterns, on the high-level ops whose statistics stay f32 in any dtype; "
	 "before training, so that autodiff derives the backward from the BF16 forward and the "
	 "gradients reach the f32 master weights through their Casts; a no-op without --bf16"},
	{"tensor-parallel", tensor_parallel,
	 "after fuse-patterns, whose Linear, Attention and SwiGLU it splits, and bf16, whose weight "
	 "casts it splits with their weights; before attention-unfused, which then decomposes each "
	 "rank's heads, and training, so that autodiff derives each rank's backward from its "
	 "forward, the collectives' gradients included; a no-op without "
	 "--tensor-model-parallel-size"},
	{"context-parallel", context_parallel,
	 "after tensor-parallel, which splits heads and features (and under --sequence-parallel "
	 "the sequence again, within the rank's tokens); before attention-unfused, which would "
	 "decompose the Attention this pass makes RingAttention, and training, so that autodiff "
	 "derives the ring's backward and the training pass builds the loss over the split "
	 "sequence; a no-op without --context-parallel-size"},
	{"expert-parallel", expert_parallel,
	 "after tensor-parallel and context-parallel, which split the experts' FFNs and the "
	 "sequence within a layer; before pipeline-parallel, which deals out the layers whose "
	 "experts this pass splits, and training, so that autodiff derives the exchange's "
	 "backward (the rows' gradients sent back the way they came) from its forward; a no-op "
	 "without --expert-model-parallel-size"},
	{"pipeline-parallel", pipeline_parallel,
	 "after tensor-parallel and context-parallel, which split within the layers this pass "
	 "deals out to the stages; before attention-unfused and training, so that autodiff "
	 "derives each stage's backward from its forward (the gradient of what it receives sent "
	 "back) and the training pass gives the last stage the loss; a no-op without "
	 "--pipeline-model-parallel-size"},
	{"attention-unfused", attention_unfused,
	 "after bf16, which decides the attention's dtype (cuDNN's fused attention takes bf16, "
	 "not f32); before training, so that autodiff derives the backward of an f32 attention "
	 "on a GPU target from its MatMuls and Softmax; a no-op for cpu plans"},
	{"training", training,
	 "before the precision passes: they decide for the backward GEMMs (dgrad, wgrad) and the "
	 "gradients' E5M2 casts too, so the backward must exist; a no-op for inference"},
	{"precision", precision,
	 "after training, so that dgrad and wgrad are GEMMs of their own to decide; before "
	 "fp8-cast, which only carries out what it decided; a no-op without FP8"},
	{"fp8-cast", fp8_cast,
	 "after precision (it rewrites the GEMMs marked FP8); before shard and recompute, which "
	 "must see the casts and the scaling state to reduce amaxes and reuse scales"},
	{"shard", shard,
	 "after fp8-cast, whose scaling tables' amaxes it reduces over the ranks that hold a "
	 "tensor and whose casts of sequence-parallel gathers it moves before them (the FP8 "
	 "all-gather), and after training, whose gradient accumulators it reduces over data "
	 "parallelism; before recompute, which keeps its collectives, and fuse; a no-op on one "
	 "rank"},
	{"recompute", recompute,
	 "after fp8-cast, so that a recomputed cast reads the scale its original read and the "
	 "scaling tables' updates can be ordered after it, and after shard, whose collectives "
	 "it keeps rather than recomputes; before fuse, which groups the recomputing nodes like "
	 "any others, and schedule, whose slab then holds a dropped value only where it is made "
	 "again; a no-op without --recompute-granularity or --memory-budget"},
	{"attention-layout", attention_layout,
	 "after training and recompute, so that it sees each attention's backward and the "
	 "recompute clones that read its values (and keeps the copies where they do), and after "
	 "tensor-parallel, which follows the Split, Transposes and Attention to split heads and "
	 "leaves each rank's local shapes; before fuse, which would make the copies kernels"},
	{"fuse", fuse,
	 "after the passes that add nodes (fp8-cast, shard, recompute), so that "
	 "its kernels see every cast; before schedule, which plans buffers for what the kernels "
	 "still write to memory"},
	{"schedule", schedule,
	 "last: buffers are planned for what the fused kernels still write to memory, over the "
	 "program order every other pass has settled"},
};

const f8_pass *f8_pipeline_passes(size_t *count) {
	*count = sizeof pipeline / sizeof pipeline[0];
	return pipeline;
}

const f8_pass *f8_pipeline_find(const char *name) {
	for (size_t i = 0; i < sizeof pipeline / sizeof pipeline[0]; i++)
		if (strcmp(pipeline[i].name, name) == 0)
			return &pipeline[i];
	return NULL;
}

static f8_status unknown_pass(const char *name, f8_diag *diag) {
	f8_diag_set(diag, F8_ERR_ARGUMENT, "there is no pass named '%s'", name);
	char names[256] = "";
	size_t used = 0;
	for (size_t i = 0; i < sizeof pipeline / sizeof pipeline[0] && used < sizeof names; i++)
		used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "",
					 pipeline[i].name);
	f8_diag_hint(diag, "the passes, in pipeline order: %s", names);
	return F8_ERR_ARGUMENT;
}

static f8_status run_one(f8_graph *graph, const f8_pass *pass, bool verify,
			 const f8_pipeline_options *options, FILE *report, f8_diag *diag) {
	f8_status status = pass->run(graph, options, report, diag);
	if (status || !verify)
		return status;
	status = f8_graph_verify(graph, diag);
	if (status && diag) { // say which pass broke the graph, before what is broken
		char original[F8_DIAG_MESSAGE_MAX];
		memcpy(original, diag->message, sizeof original);
		int prefix = snprintf(diag->message, sizeof diag->message, "after pass %s: ", pass->name);
		if (prefix > 0 && (size_t)prefix < sizeof diag->message) {
			size_t room = sizeof diag->message - (size_t)prefix - 1;
			size_t len = strnlen(original, room);
			memcpy(diag->message + prefix, original, len);
			diag->message[prefix + len] = '\0';
		}
	}
	return status;
}

f8_status f8_pipeline_run(f8_graph *graph, const char *last, bool verify, f8_diag *diag) {
	return f8_pipeline_run_reported(graph, last, verify, NULL, diag);
}

f8_status f8_pipeline_run_reported(f8_graph *graph, const char *last, bool verify, FILE *report,
				   f8_diag *diag) {
	return f8_pipeline_run_with(graph, last, verify, NULL, report, diag);
}

f8_status f8_pipeline_run_with(f8_graph *graph, const char *last, bool verify,
			       const f8_pipeline_options *options, FILE *report, f8_diag *diag) {
	const f8_pipeline_options inference = {0};
	if (!options)
		options = &inference;
	if (last && !f8_pipeline_find(last))
		return unknown_pass(last, diag);
	for (size_t i = 0; i < sizeof pipeline / sizeof pipeline[0]; i++) {
		f8_status status = run_one(graph, &pipeline[i], verify, options, report, diag);
		if (status)
			return status;
		if (last && strcmp(pipeline[i].name, last) == 0)
			break;
	}
	return F8_OK;
}

f8_status f8_pipeline_run_named(f8_graph *graph, const char *const *names, size_t n, bool verify,
				const f8_fp8_options *fp8, bool bf16,
				const f8_parallel_options *parallel,
				const f8_recompute_options *recompute,
				const f8_target_table *target, f8_diag *diag) {
	f8_training_options defaults = f8_training_options_default();
	f8_fp8_options fp8_defaults = f8_fp8_options_default();
	const f8_pipeline_options training = {.training = &defaults,
					      .fp8 = fp8 ? fp8 : &fp8_defaults,
					      .bf16 = bf16, .target = target,
					      .parallel = parallel, .recompute = recompute};
	for (size_t i = 0; i < n; i++) {
		const f8_pass *pass = f8_pipeline_find(names[i]);
		if (!pass)
			return unknown_pass(names[i], diag);
		f8_status status = run_one(graph, pass, verify, &training, NULL, diag);
		if (status)
			return status;
	}
	return F8_OK;
}
