/*
 * Training checkpoints: a folder with two safetensors files, as Hugging Face tools read them.
 *
 *   weights.safetensors    every parameter, by the model's parameter names, in its dtype (the
 *                          f32 master weights)
 *   optimizer.safetensors  every optimizer state leaf by its name (<param>.exp_avg,
 *                          <param>.exp_avg_sq, iteration; gradient accumulators are zero
 *                          between steps and are not saved), and in its metadata the data
 *                          sampler's state and what the run was
 *
 * Both files carry the same metadata "format" = "f8c-checkpoint", "version" = "1", the
 * iteration and a save id, so a pair that two different saves wrote is refused. Each file is
 * written atomically (runtime/atomic_file.h). Loading reads and checks everything first and
 * only then writes the executor's leaves: a torn, foreign or mismatched checkpoint is refused
 * with the leaves as they were.
 */
#ifndef F8_RUNTIME_CHECKPOINT_H
#define F8_RUNTIME_CHECKPOINT_H

#include <stdint.h> // int64_t, uint64_t

#include "ir/diag.h"              // f8_status, f8_diag
#include "ir/graph.h"             // f8_graph
#include "runtime/cpu/executor.h" // f8_cpu_executor

/* What a checkpoint records beside the tensors. */
typedef struct f8_checkpoint_info {
	int64_t iteration;      // iterations done
	uint64_t sampler_state; // the training batch sampler's state (runtime/tokens.h)
	uint64_t seed;          // the run's --seed
	int64_t consumed_tokens;
	const char *model;      // the model file's name, for people reading the metadata
} f8_checkpoint_info;

/* Saves the params and state leaves of `graph` held by `executor` into folder `folder`
 * (created when missing), with `info`. */
f8_status f8_checkpoint_save(const char *folder, const f8_graph *graph,
			     const f8_cpu_executor *executor, const f8_checkpoint_info *info,
			     f8_diag *diag);

/*
 * Loads the checkpoint in `folder` into the params and state leaves of `graph` in `executor`,
 * and its record into *info (info->model is NULL: the caller has its own). Every parameter and
 * state leaf must be there with its exact dtype and shape, and nothing else may be.
 */
f8_status f8_checkpoint_load(const char *folder, const f8_graph *graph,
			     f8_cpu_executor *executor, f8_checkpoint_info *info, f8_diag *diag);

#endif
