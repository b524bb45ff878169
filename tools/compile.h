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
#include "runtime/plan.h"      // f8_plan
#include "runtime/train.h"     // f8_train_config

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

/* The pipeline through `after` (NULL: every pass) for `options`, whose target table the driver
 * fills from options->fp8 (codegen/target.h) when it has none (f8_pipeline_run_with). */
f8_status f8_tool_run_passes(f8_graph *graph, const char *after, bool verify,
			     const f8_pipeline_options *options, FILE *report, f8_diag *diag);

/*
 * Compiles config->model's training step as f8c train runs it: the model loaded with config's
 * --dim sizes and seed, the token input's batch and seq bound to the micro-batch size and the
 * sequence length (a step is compiled for one size, so that the schedule pass plans its
 * memory), every pass of the pipeline with the optimizer (micro-batches from the batch sizes,
 * the decay over the run unless --lr-decay-iters says otherwise) and the FP8 options. *out is
 * the caller's; NULL on failure.
 */
f8_status f8_tool_compile_training(const f8_train_config *config, f8_graph **out, f8_diag *diag);

/* The forward graph of config->model, its --dim sizes bound, through every pass (FP8 with the
 * FP8 options): what f8c infer runs. *out is the caller's; NULL on failure. */
f8_status f8_tool_compile_inference(const f8_train_config *config, f8_graph **out,
				    f8_diag *diag);

/*
 * The plan of compiled `graph` (taken: the plan owns it, on failure too): its kernels lowered
 * and compiled to PTX for sm_90, each group's launches and scratch, the slab, the estimates,
 * `model` and `args` (n_args; copied) as the record of what it was compiled from. *out is the
 * caller's (f8_plan_destroy); NULL on failure.
 */
f8_status f8_tool_plan_make(f8_graph *graph, bool training, const char *model,
			    const char *const *args, uint32_t n_args, f8_plan **out, f8_diag *diag);

#endif
