/*
 * Training checkpoints, laid out as Megatron-LM lays them out, in files Hugging Face tools read:
 *
 *   FOLDER/latest_checkpointed_iteration.txt   the iteration of the newest complete save
 *   FOLDER/iter_0000010/weights.safetensors    every parameter, by the model's parameter
 *                                              names, in its dtype (the f32 master weights)
 *   FOLDER/iter_0000010/optimizer.safetensors  every optimizer state leaf by its name
 *                                              (<param>.exp_avg, <param>.exp_avg_sq, iteration,
 *                                              FP8 scaling state; gradient accumulators are zero
 *                                              between steps and are not saved), and in its
 *                                              metadata the data sampler's state, the
 *                                              iterations skipped for a non-finite value and
 *                                              the run's settings
 *
 * Under several ranks each rank writes its shard instead, as Megatron-LM's distributed
 * checkpoints do (no rank gathers the model):
 *
 *   FOLDER/iter_0000010/weights-00001-of-00004.safetensors    rank 1's parts of the split
 *   FOLDER/iter_0000010/optimizer-00001-of-00004.safetensors  tensors, and of the tensors every
 *                                                             rank holds whole, rank 0 writes
 *                                                             the one copy
 *
 * Each part's layout is in its file's metadata ("layout.NAME": runtime/placement.h,
 * f8_rt_part_layout), so a load rebuilds each whole from the parts and takes its own part under
 * whatever layout it runs: a checkpoint saved under TP2 x DP2 resumes on one rank, and one
 * rank's under TP2. A shard's record says version 2 and how many shards there are. Pipeline
 * stages hold parameters of their own: each stage writes its own (the tied embedding, which
 * the first and the last stage both hold, the first stage alone), and a leaf that every stage
 * has alike (the optimizer's step count) is in each stage's shard, alike.
 *
 * The FP8 scaling tables (runtime/scaling_tables.h) are keyed by slot labels: the optimizer
 * file's metadata "slots.<table>" lists what each slot scales, a line a slot, and a load gives
 * each slot of its step the scale and amax history of the stored slot of its label. So a
 * table resumes under another layout although each program numbers its slots (each pipeline
 * stage from 0), and the stages' tables, one copy per stage, make one run's. The count of
 * skipped amaxes is the stored copies' sum, kept by the first stage that has the table. A
 * table stored without labels (by an earlier f8c) loads by slot number.
 *
 * A save writes its iteration's files into a staging folder (iter_0000010.saving), puts
 * that in place of iter_0000010 in one rename (an exchange where the iteration is there
 * already), and only then moves latest_checkpointed_iteration.txt to it (atomically too): a
 * save cut short, by a kill, a full disk or a read-only folder, leaves the previous checkpoint
 * the latest and every checkpoint it names whole, a save over the latest one's own iteration
 * included. A state that holds a NaN or an inf is not saved (the
 * error names the tensor): a checkpoint always resumes. Both files carry "format" = "f8c-checkpoint",
 * "version" = "1", the iteration and a save id, so a pair that two saves wrote is refused.
 * Loading reads and checks everything first and only then writes the executor's leaves: a torn,
 * foreign or mismatched checkpoint is refused with the leaves as they were.
 */
#ifndef F8_RUNTIME_CHECKPOINT_H
#define F8_RUNTIME_CHECKPOINT_H

#include <stdint.h> // int64_t, uint64_t

#include "ir/diag.h"              // f8_status, f8_diag
#include "ir/graph.h"             // f8_graph
#include "runtime/distributed.h"  // f8_dist
#include "runtime/executor.h"     // f8_executor

/* What a checkpoint records beside the tensors. */
typedef struct f8_checkpoint_info {
	int64_t iteration;      // iterations done
	uint64_t sampler_state; // the training batch sampler's state (runtime/tokens.h)
	uint64_t seed;          // the run's --seed
	int64_t consumed_tokens;
	int64_t skipped_iters;  // of the iterations done, those skipped for a non-finite value
				// (their optimizer step not taken: %iteration counts the others)
	const char *model;      // the model file's name, for people reading the metadata
	// Settings of the run that a resumed run must share to continue it (the learning-rate
	// schedule): saved as metadata "setting.<key>"; on load each must equal the stored one.
	const char *const *setting_keys, *const *setting_values; // (n_settings)
	uint32_t n_settings;
	f8_dist *dist;          // the run's ranks, or NULL: one process
} f8_checkpoint_info;

/*
 * Saves the params and state leaves of the executor's graph as iteration info->iteration of
 * the checkpoint folder `folder` (created when missing), with `info`. With info->dist of
 * several ranks, every rank calls it and writes its shard: rank 0 makes the staging folder,
 * every rank writes its files, and rank 0 installs the folder and the latest record once all
 * have; the ranks agree on each step, so every rank returns the same failure, and a failed
 * save leaves the folder as it was.
 */
f8_status f8_checkpoint_save(const char *folder, const f8_executor *executor,
			     const f8_checkpoint_info *info, f8_diag *diag);

/*
 * Loads the latest checkpoint of `folder` (or `folder` itself when it holds the two files) into
 * the params and state leaves of the executor's graph, and its record into *info. On entry
 * info's settings are the current run's: a stored setting that differs fails with
 * F8_ERR_ARGUMENT naming it. Every parameter and state leaf must be there with its exact dtype
 * and shape (a leaf the ranks hold parts of: the whole tensor, of which this rank takes its
 * part; from shards, the whole its parts make, which must hold as many elements), and nothing
 * else may be (under pipeline parallelism, where a stage has some of the leaves: every stored
 * tensor must be a leaf of some stage's program, which the stages check together). With
 * info->dist of several ranks, every rank calls it and the ranks agree on the outcome before
 * any writes a leaf: every rank returns the same failure. info->model is left as it was.
 */
f8_status f8_checkpoint_load(const char *folder, f8_executor *executor,
			     f8_checkpoint_info *info, f8_diag *diag);

#endif
