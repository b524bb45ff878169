/*
 * The training pass: turns a forward (inference) graph into one training step.
 *
 * requires: canonicalize (types), fuse-patterns (high-level ops); the graph's first output is
 * the logits (..., vocab), float.
 *
 * It adds a labels input and the loss (CrossEntropy, mean over labels that are not
 * ignore_index), the backward program (passes/autodiff.h), and the optimizer: FP32 master
 * weights, gradient accumulation over micro-batches, global-norm clipping, a learning-rate
 * schedule and AdamW. The result is an ordinary graph, in three phases:
 *   fwd  the model and the loss;
 *   bwd  the gradients, added into one f32 accumulator per parameter (main_grad, as
 *        Megatron-LM calls it);
 *   opt  iteration + 1, the learning rate, the gradient norm and the clip, AdamW, the
 *        accumulators zeroed. A gradient norm that is not finite, or a %found_inf that is not
 *        0, skips AdamW's step (the weights and moments stay; the accumulators are zeroed).
 * A step runs fwd|bwd once per micro-batch, then opt once.
 *
 * The names the runtime relies on:
 *   input  %labels                 i64, the logits' shape without the vocab dim
 *   input  %found_inf              f32 scalar, written before opt: not 0 skips the step
 *                                  (a micro-batch's loss or an FP8 amax was not finite)
 *   state  %<param>.main_grad      f32 like the parameter: the gradient accumulator
 *   state  %<param>.exp_avg        f32 like the parameter: AdamW's first moment
 *   state  %<param>.exp_avg_sq     f32 like the parameter: AdamW's second moment
 *   state  %iteration              i64 scalar: the optimizer steps taken so far (opt adds
 *                                  1; a runtime that skipped the step sets it back)
 *   output %loss (fwd), %grad_norm and %lr (opt), f32 scalars, in that order
 * A parameter whose dtype is not f32 becomes an f32 master weight, and a Cast to its old dtype
 * feeds what read it. Under --bf16 the bf16 pass has made the forward read BF16 Casts of the
 * f32 parameters already (passes/bf16.h): their gradients come back through those Casts as
 * f32, and weight decay is decided by what reads the copy. Updates carry the new parameters, moments, accumulators and iteration to
 * the next step.
 */
#ifndef F8_PASSES_TRAINING_H
#define F8_PASSES_TRAINING_H

#include <stdbool.h> // bool
#include <stdint.h>  // int64_t
#include <stdio.h>   // FILE

#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/graph.h" // f8_graph

/* X(ENUM, name): learning-rate decay styles (Megatron-LM's --lr-decay-style). */
#define F8_LR_DECAY_LIST(X)      \
	X(CONSTANT, "constant")  \
	X(LINEAR, "linear")      \
	X(COSINE, "cosine")

typedef enum f8_lr_decay {
#define F8_LR_DECAY_ENUM(e, name) F8_LR_DECAY_##e,
	F8_LR_DECAY_LIST(F8_LR_DECAY_ENUM)
#undef F8_LR_DECAY_ENUM
	F8_LR_DECAY_COUNT
} f8_lr_decay;

/* The style's name as --lr-decay-style takes it ("cosine"), or "?" when out of range. */
const char *f8_lr_decay_name(f8_lr_decay decay);

/* Looks a style up by its name; true and *out set when found. */
bool f8_lr_decay_from_name(const char *name, f8_lr_decay *out);

/* The training hyperparameters, Megatron-LM's names in the comments. */
typedef struct f8_training_options {
	double lr;               // --lr: the peak learning rate
	double min_lr;           // --min-lr: where decay ends
	int64_t warmup_iters;    // --lr-warmup-iters
	int64_t decay_iters;     // --lr-decay-iters (the train iterations by default)
	f8_lr_decay decay_style; // --lr-decay-style
	double beta1, beta2;     // --adam-beta1, --adam-beta2
	double epsilon;          // --adam-eps
	double weight_decay;     // --weight-decay; 0 for norms, biases and embeddings
	double clip_grad;        // --clip-grad: the largest global gradient norm; 0: no clipping
	int64_t micro_batches;   // micro-batches per step (global batch / micro batch / data parallel)
	int64_t ignore_index;    // labels equal to it count for nothing (-100, as PyTorch)
} f8_training_options;

/* The defaults, Megatron-LM's where it has one: lr 3e-4 (Megatron has none), min_lr 0, no
 * warm-up, decay_iters 0, constant style (Megatron: linear, over decay_iters), beta1 0.9,
 * beta2 0.999, epsilon 1e-8, weight_decay 0.01, clip_grad 1.0, one micro-batch,
 * ignore_index -100. */
f8_training_options f8_training_options_default(void);

/* Checks `options` for values out of range or contradicting each other (min_lr above lr, a
 * decaying schedule without decay_iters past warm-up, ...): F8_ERR_ARGUMENT naming the option
 * with its f8c train spelling. */
f8_status f8_training_options_check(const f8_training_options *options, f8_diag *diag);

/* Runs the pass on `graph` with `options` (NULL: the defaults); writes each decision (master
 * weights made, parameters without weight decay and why) to `report` when not NULL. */
f8_status f8_pass_training_run(f8_graph *graph, const f8_training_options *options, FILE *report,
			       f8_diag *diag);

#endif
