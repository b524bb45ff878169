/*
 * The compile driver: a model through the frontend, every pass and codegen, into a compiled
 * step or a plan (runtime/plan.h). The one part of the f8c command that needs the compiler
 * (frontend/, codegen/, LLVM, protobuf-c): the runtime below it only runs what this makes.
 * A build without LLVM (-DF8C_LLVM=OFF: an f8c for the machines that run plans) has
 * tools/compile_absent.c in place of tools/compile.c: every function here then fails with
 * F8_ERR_UNSUPPORTED, saying to compile the plan with a full build.
 */
#ifndef F8_TOOLS_COMPILE_H
#define F8_TOOLS_COMPILE_H

#include <stdbool.h> // bool
#include <stdint.h>  // uint32_t

#include <stdio.h>   // FILE

#include "frontend/frontend.h" // f8_frontend_options (the type only)
#include "ir/diag.h"           // f8_status, f8_diag
#include "ir/graph.h"          // f8_graph
#include "passes/pipeline.h"   // f8_pipeline_options
#include "passes/precision.h"  // f8_fp8_options
#include "passes/training.h"   // f8_training_options
#include "runtime/plan.h"      // f8_plan
#include "runtime/train.h"     // f8_train_config, f8_train_fills_input

/* What a training step or a forward graph is compiled from and with (f8c train's and f8c
 * compile's options that shape the graph; the sizes are the run's, f8_train_config). */
typedef struct f8_tool_compile_options {
	const char *model;             // MODEL: ONNX, JSON description or text IR
	const f8_dim_binding *dims;    // --dim: sizes the model needs besides batch and seq
	uint32_t n_dims;
	f8_training_options optimizer; // --lr ... (micro_batches and decay_iters resolved by
				       // f8_tool_optimizer)
	const f8_fp8_options *fp8;     // --fp8-format ...: FP8; NULL: no FP8
	bool bf16;                     // --bf16: the forward in BF16 over f32 master weights
	const f8_recompute_options *recompute; // --recompute-*, --memory-budget; NULL: none
	const f8_parallel_options *parallel;   // the layout and world size; NULL: one rank
	int64_t vocab_multiple;        // --make-vocab-size-divisible-by; 0: the description's
	// The chip's table (codegen/target.h); NULL: the FP8 options' --target, else sm_90.
	// Lets a caller compile a plan without FP8 for cpu (the oracle's own plan).
	const f8_target_table *target;
} f8_tool_compile_options;

/* The optimizer's options as a run compiles them: micro-batches from the run's batch sizes,
 * the decay over the whole run unless --lr-decay-iters says otherwise. */
f8_training_options f8_tool_optimizer(const f8_tool_compile_options *compile,
				      const f8_train_config *run);

/* The learning-rate schedule of `optimizer` (f8_tool_optimizer's), for the run's record. */
f8_train_schedule f8_tool_schedule(const f8_training_options *optimizer);

/* True when this f8c compiles models (it was built with LLVM). */
bool f8_tool_can_compile(void);

/* The model at `path` as an IR graph (frontend/frontend.h's f8_frontend_load). */
f8_status f8_tool_load_model(const char *path, const f8_frontend_options *options,
			     f8_graph **out, f8_diag *diag);

/* Binds symbolic sizes of a loaded model (f8_frontend_bind_dims). */
f8_status f8_tool_bind_dims(f8_graph *graph, const f8_dim_binding *dims, uint32_t n_dims,
			    f8_diag *diag);

/* The sequence length a JSON model description declares, or 0 (another kind of model, or a
 * file that does not read). */
int64_t f8_tool_described_seq(const char *path);

/* F8_ERR_ARGUMENT, naming `what` (the sequences: "--seq-length 200") and both lengths, when
 * `seq` is longer than the JSON description at `path` says its model takes ("seq": the rows
 * of its learned position table; Megatron-LM asserts the same against
 * --max-position-embeddings); F8_OK otherwise, and for any other kind of model. */
f8_status f8_tool_check_seq(const char *path, int64_t seq, const char *what, f8_diag *diag);

/* When the JSON description at `path` pads its vocabulary (to a multiple of `vocab_multiple`,
 * 0: the description's own, by default 128), the line saying so, in Megatron-LM's words, into
 * `line` (`size` bytes), and true; false for no padding or another kind of model. */
bool f8_tool_vocab_padding(const char *path, int64_t vocab_multiple, char *line, size_t size);

/* The pipeline through `after` (NULL: every pass) for `options`, whose target table the driver
 * fills from options->fp8 (codegen/target.h) when it has none (f8_pipeline_run_with). */
f8_status f8_tool_run_passes(f8_graph *graph, const char *after, bool verify,
			     const f8_pipeline_options *options, FILE *report, f8_diag *diag);

/*
 * Compiles compile->model's training step as f8c train runs it: the model loaded with the
 * --dim sizes and the run's seed, the token input's batch and seq bound to the run's
 * micro-batch size and sequence length (a step is compiled for one size, so that the schedule
 * pass plans its memory), every pass of the pipeline with the optimizer (f8_tool_optimizer)
 * and the FP8 options. *out is the caller's; NULL on failure.
 */
f8_status f8_tool_compile_training(const f8_tool_compile_options *compile,
				   const f8_train_config *run, f8_graph **out, f8_diag *diag);

/* The forward graph of compile->model, its --dim sizes bound, through every pass (FP8 with
 * the FP8 options), weights made from `seed`: what f8c infer runs. *out is the caller's; NULL
 * on failure. */
f8_status f8_tool_compile_inference(const f8_tool_compile_options *compile, uint64_t seed,
				    f8_graph **out, f8_diag *diag);

/*
 * The plan of compiled `graph` (taken: the plan owns it, on failure too): its kernels lowered
 * and compiled to PTX for sm_90, each group's launches and scratch, the slab, the estimates,
 * `model` and `args` (n_args; copied) as the record of what it was compiled from. With `ptx`
 * false the kernels are lowered but not compiled (LLVM does not run): a plan for its memory
 * estimate (f8_plan_memory: the groups' scratch), which neither runs nor is written. *out is
 * the caller's (f8_plan_destroy); NULL on failure.
 */
f8_status f8_tool_plan_make(f8_graph *graph, bool training, bool ptx, const char *model,
			    const char *const *args, uint32_t n_args, f8_plan **out, f8_diag *diag);

#endif
