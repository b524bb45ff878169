/*
 * The training loop, on any backend (runtime/backend.h): a model, a token file and the
 * hyperparameters in; the steps run, metrics out (a JSONL file and a callback for the console),
 * checkpoints saved and resumed bit for bit.
 *
 * One iteration: with FP8, a run of cast (the weights' FP8 copies, once per step); for each
 * micro-batch, a batch from the training range (runtime/tokens.h) into the graph's token input
 * and %labels, a run of fwd|bwd (gradients add into the accumulators); then a run of opt (clip,
 * AdamW, the accumulators zeroed). An iteration whose loss, gradient norm or an FP8 amax was not
 * finite is skipped, as Megatron-LM's loss scaler skips an overflowed step: its update is not
 * applied (AdamW's found_inf, passes/training.h), its optimizer step not counted (the learning
 * rate and the bias correction stay), the FP8 tables keep their scales (they skip non-finite
 * amaxes themselves), and it is reported and counted in the metrics; more than
 * max_nonfinite_skips in a row stop the run. Every eval_interval iterations, the mean loss over
 * eval_iters fixed batches of the validation range (cast, then fwd only, with the FP8 scaling
 * state frozen). The step comes compiled (a plan's, or the compile driver's, tools/compile.h,
 * for one micro-batch size and sequence length): it runs the slab plan of its schedule pass.
 */
#ifndef F8_RUNTIME_TRAIN_H
#define F8_RUNTIME_TRAIN_H

#include <stdbool.h> // bool
#include <stdint.h>  // int64_t, uint64_t

#include "ir/diag.h"           // f8_status, f8_diag
#include "ir/graph.h"          // f8_graph
#include "runtime/backend.h"   // f8_backend
#include "runtime/distributed.h" // f8_dist
#include "runtime/executor.h"  // f8_executor
#include "runtime/plan.h"      // f8_plan_weight_init
#include "runtime/safetensors.h" // f8_safetensors
#include "runtime/tokens.h"    // f8_token_format

/* Called after each micro-batch's forward and backward, with the executor holding every value
 * that run made (it keeps all of them when an observer is set): f8c calibrate reads the GEMM
 * operands there (f8_executor_read). `iteration` is the one being computed (1-based),
 * `micro_batch` counts from 0 within it. A failure stops the run with its status. Under
 * pipeline parallelism an observed run takes each micro-batch's forward and backward in turn,
 * not in the 1F1B order (whose forward and backward are runs apart). */
typedef f8_status (*f8_train_observer)(const f8_graph *graph, const f8_executor *executor,
				       int64_t iteration, int64_t micro_batch, void *user,
				       f8_diag *diag);

/* The learning-rate schedule the step was compiled with (the compile driver fills it): what a
 * checkpoint records and a run that resumes it must share, as Megatron-LM checks on load. */
typedef struct f8_train_schedule {
	double lr, min_lr;       // --lr, --min-lr
	int64_t warmup_iters;    // --lr-warmup-iters
	int64_t decay_iters;     // --lr-decay-iters as compiled (0 given: --train-iters)
	const char *decay_style; // --lr-decay-style: constant, linear or cosine
} f8_train_schedule;

/* A run, Megatron-LM's option names in the comments. What the step was compiled with (the
 * model, the optimizer, FP8) is the compile driver's (tools/compile.h), not the run's. */
typedef struct f8_train_config {
	const char *model;                // what the step was compiled from, for the record (a
					  // checkpoint's metadata); the run never opens it
	const f8_graph *graph;            // the compiled training step to run (a plan's, or
					  // tools/compile.h's): required
	const f8_safetensors *weights;    // a plan's initial weights, or NULL
	const f8_plan_weight_init *weight_init; // a --weights seed plan's record, or NULL: the
					  // parameters without weights are made from --seed
	f8_train_schedule schedule;       // the step's learning-rate schedule
	const char *data;                 // --data
	f8_token_format data_format;      // --data-format
	double split[3];                  // --split: train, valid, test weights
	int n_split;
	int64_t micro_batch_size;         // --micro-batch-size
	int64_t global_batch_size;        // --global-batch-size (a multiple of the micro batch)
	int64_t seq_length;               // --seq-length
	int64_t train_iters;              // --train-iters: the iteration to stop after
	uint64_t seed;                    // --seed: weights and data order
	int64_t eval_interval, eval_iters; // --eval-interval, --eval-iters (0: no evaluation)
	int64_t log_interval;             // --log-interval
	int64_t max_nonfinite_skips;      // --max-nonfinite-skips: iterations skipped in a row
					  // before the run stops (0: the first stops it)
	const char *save;                 // --save: checkpoint folder, or NULL
	int64_t save_interval;            // --save-interval (0: only at the end)
	const char *load;                 // --load: resume from this folder, or NULL
	const char *metrics;              // --metrics: JSONL file, or NULL
	int64_t log_fp8_stats;            // --log-fp8-stats: every N iterations, each FP8 scaling
					  // slot's newest amax and its scale, and each table's count
					  // of non-finite amaxes skipped, into the metrics (a line
					  // naming the slots first); 0: never. Needs the delayed
					  // recipe's tables
	f8_backend *backend;              // what runs the step (borrowed; the caller makes it:
					  // the CPU backend, --kernels generated|reference)
	f8_dist *dist;                    // the run's ranks (runtime/distributed.h; borrowed), or
					  // NULL: one process. Each data-parallel rank runs its share
					  // of every global batch; rank 0 alone reports, writes the
					  // metrics and saves (the replicas hold the same state)
	double distributed_timeout_minutes; // --distributed-timeout-minutes: a collective that
					  // waits longer for the other ranks stops the run
					  // (f8_dist_set_timeout; 0: never)
	int64_t check_replicas_interval;  // --check-weight-hash-across-dp-replicas-interval:
					  // every N iterations the data-parallel replicas' parameters,
					  // optimizer and FP8 scaling state are held to the same bits
					  // (0: never)
	f8_train_observer observe;        // NULL: none
	void *observe_user;               // given to observe
} f8_train_config;

/* What a callback hears after each logged iteration, evaluation, save and at the end. */
typedef enum f8_train_event {
	F8_TRAIN_EVENT_START,
	F8_TRAIN_EVENT_STEP,
	F8_TRAIN_EVENT_EVAL,
	F8_TRAIN_EVENT_SAVE,
	F8_TRAIN_EVENT_SKIP,
	F8_TRAIN_EVENT_END,
	F8_TRAIN_EVENT_COUNT
} f8_train_event;

typedef struct f8_train_progress {
	f8_train_event event;
	int64_t iteration, train_iters; // iterations done, and the last one
	double loss;                    // STEP, SKIP: mean over the iteration's micro-batches
	double lr, grad_norm;           // STEP, SKIP
	const char *skipped_for;        // SKIP: what was not finite: "loss", "fp8 amax" or
					// "gradient norm"
	int64_t skipped_iters;          // STEP, SKIP, END: iterations skipped so far (a resumed
					// run counts its checkpoint's)
	double eval_loss;               // EVAL
	double tokens_per_second;       // STEP: over the last logged interval
	int64_t fp8_nonfinite_amax;     // STEP: NaN or inf amaxes the FP8 scaling tables skipped
					// so far (their nonfinite counts summed); -1 without tables
	double elapsed_seconds;         // since the start of this run
	int64_t parameters;             // START: the number of trained parameters
	double first_loss, last_loss;   // END: of this run's first and last iterations
	double best_eval;               // END: the lowest eval loss (NAN without evaluations)
	const char *path;               // SAVE: the folder
	f8_executor_memory memory;      // START, END: the executor's buffers (runtime/executor.h)
	uint64_t peak_bytes;            // START, END: the most the backend had allocated so far
} f8_train_progress;

typedef void (*f8_train_callback)(const f8_train_progress *progress, void *user);

/* Checks a configuration for contradictions (a global batch not a multiple of the micro
 * batch, min_lr above lr, warm-up past the end, ...) before anything runs. */
f8_status f8_train_check_config(const f8_train_config *config, f8_diag *diag);

/* Whether a model input of this name is one f8c train fills itself, besides the tokens and
 * labels: an export's attention_mask (all ones) and position_ids (0..seq-1 in every row), what
 * Megatron-LM's GPT pretraining gives a batch that is a window of the token stream. */
bool f8_train_fills_input(const char *name);

/* Fills `tensor` (rank 2: batch, seq; made by the caller) as f8c train fills the model input
 * `name` (f8_train_fills_input): attention_mask all ones, position_ids 0..seq-1 in every row.
 * F8_ERR_UNSUPPORTED for another name, another rank, or position_ids not of integers. */
f8_status f8_train_fill_input(const char *name, f8_rt_tensor *tensor, f8_diag *diag);

/* Runs `config`, calling `callback` (may be NULL) with `user` as it goes. */
f8_status f8_train_run(const f8_train_config *config, f8_train_callback callback, void *user,
		       f8_diag *diag);

#endif
