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
 *
 * Interleaved, as Megatron-LM's forward_backward_pipelining_with_interleaving
 * (--num-layers-per-virtual-pipeline-stage): each stage holds V model chunks (chunk v of stage
 * s is the pipeline's (v PP + s)-th), and a run is one chunk's forward or backward of one
 * micro-batch. The k-th forward of a stage is chunk (k mod PP V) / PP of micro-batch
 * (k / (PP V)) PP + k mod PP (PP micro-batches through chunk 0, then the same through chunk 1,
 * ...); the k-th backward the same with the chunks taken from the last (V - 1 - ...). The
 * warm-up is (PP - s - 1) 2 + (V - 1) PP forwards (all of them when M = PP), then one forward
 * and one backward in turn, then the backwards left. M must be a multiple of PP. A
 * micro-batch's forward chunks run in increasing order and its backward chunks in decreasing
 * order, all its forwards before its backwards, which is its program's order: one context
 * holds it from its chunk 0 forward to its chunk 0 backward.
 *
 * The messages each order sends and receives, and whether a transport that matches them in
 * posting order (NCCL) runs it, are runtime/pipeline_messages.h's.
 */
#ifndef F8_RUNTIME_PIPELINE_SCHEDULE_H
#define F8_RUNTIME_PIPELINE_SCHEDULE_H

#include <stdbool.h> // bool
#include <stdint.h>  // int64_t, uint32_t

typedef struct f8_stage_run {
	bool backward;       // the micro-batch's backward, else its forward
	int64_t micro_batch; // 0 .. M - 1
	uint32_t chunk;      // the stage's model chunk (0 .. V - 1; 0 for 1F1B)
	uint32_t context;    // its executor context, the same for its forward and backward
} f8_stage_run;

/* Stage `stage` (0 .. stages - 1)'s 1F1B order over `micro_batches` (M >= 1): 2 M runs into
 * runs[] (the caller's), on f8_pipeline_1f1b_contexts's contexts. */
void f8_pipeline_1f1b(int64_t stages, int64_t stage, int64_t micro_batches,
		      f8_stage_run *runs);

/* The contexts stage `stage`'s 1F1B order uses: min(stages - stage, M), the micro-batches in
 * flight at most. */
uint32_t f8_pipeline_1f1b_contexts(int64_t stages, int64_t stage, int64_t micro_batches);

/*
 * Stage `stage`'s interleaved order over `chunks` (V >= 1) model chunks and `micro_batches`
 * (M >= 1, a multiple of `stages`): 2 M V runs into runs[] (the caller's); the contexts they
 * use (the micro-batches in flight at most, each from its first forward to its last backward)
 * into *contexts; more than F8_EXECUTOR_CONTEXTS_MAX (64) says 65, and the runs' contexts are
 * then not all set.
 */
void f8_pipeline_interleaved(int64_t stages, int64_t stage, int64_t chunks, int64_t micro_batches,
			     f8_stage_run *runs, uint32_t *contexts);

#endif
