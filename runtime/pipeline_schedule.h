/*
 * Pipeline parallelism's schedule: the order in which one stage runs its micro-batches'
 * forwards and backwards, and the executor context each runs on (runtime/executor.h: a
 * micro-batch's forward keeps there what its backward reads).
 *
 * 1F1B, as Megatron-LM's forward_backward_pipelining_without_interleaving: stage s of PP runs
 * the forwards of its first min(PP - s - 1, M) micro-batches (the warm-up), then one forward
 * and one backward in turn (the forward of micro-batch i + warm-up, the backward of
 * micro-batch i), then the backwards left (the cool-down). The last stage runs each
 * micro-batch's backward right after its forward; a stage has at most as many micro-batches in
 * flight as stages from it to the last, so the first stage's activation memory is PP
 * micro-batches', not M's. Forwards and backwards each run in micro-batch order.
 */
#ifndef F8_RUNTIME_PIPELINE_SCHEDULE_H
#define F8_RUNTIME_PIPELINE_SCHEDULE_H

#include <stdbool.h> // bool
#include <stdint.h>  // int64_t, uint32_t

typedef struct f8_stage_run {
	bool backward;       // the micro-batch's backward, else its forward
	int64_t micro_batch; // 0 .. M - 1
	uint32_t context;    // its executor context, the same for its forward and backward
} f8_stage_run;

/* Stage `stage` (0 .. stages - 1)'s 1F1B order over `micro_batches` (M >= 1): 2 M runs into
 * runs[] (the caller's); the contexts they use into *contexts (f8_pipeline_1f1b_contexts). */
void f8_pipeline_1f1b(int64_t stages, int64_t stage, int64_t micro_batches,
		      f8_stage_run *runs, uint32_t *contexts);

/* The contexts stage `stage`'s 1F1B order uses: min(stages - stage, M), the micro-batches in
 * flight at most. */
uint32_t f8_pipeline_1f1b_contexts(int64_t stages, int64_t stage, int64_t micro_batches);

#endif
