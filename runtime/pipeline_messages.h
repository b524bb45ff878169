/*
 * Pipeline parallelism's point-to-point messages as a stage's runs issue them, and whether a
 * transport that matches them by order alone runs a schedule (runtime/pipeline_schedule.h).
 *
 * A run of chunk v on stage s of PP is the pipeline's position g = v PP + s; boundary g is what
 * goes between positions g and g + 1 (the pipeline-parallel pass tags its activation 2 g, the
 * training pass its gradient 2 g + 1). As the passes place the Send and Recv nodes in the
 * chunk's program (passes/pipeline_parallel.c: the chunk's Recv, its nodes, its Send;
 * passes/training.c: the backward's Recv of the gradient of what the chunk sent, its Send of
 * the gradient of what it received):
 *   - a forward receives boundary g - 1's activation from stage (g - 1) mod PP, unless g is
 *     the model's first position, then sends boundary g's to stage (g + 1) mod PP, unless g is
 *     the last;
 *   - a backward receives boundary g's gradient from stage (g + 1) mod PP, unless g is the
 *     last, then sends boundary g - 1's to stage (g - 1) mod PP, unless g is the first.
 * The receive always comes first: what a run sends is computed from what it received (the
 * chunk's layers lie between), so every topological order of the program has them so.
 *
 * MPI matches the messages by tag. NCCL has no tags: a directed pair's k-th send meets its k-th
 * receive. And the CUDA backend holds each send back and posts it in one NCCL group with the
 * stage's next receive, the rest at the step's flush (runtime/cuda/collectives.h), where an
 * NCCL send waits for its receive and a stream runs one group after the other. A schedule runs
 * there when
 *   (a) for every directed pair a -> b, the messages a sends are, in order, those b receives:
 *       else a message lands in another's buffer, and since every boundary carries the same
 *       shape (the residual stream) nothing fails, the training is just wrong;
 *   (b) the stages' groups all complete, where a stage posts a group once its group before
 *       completed, an operation completes once its peer posted the matching one (NCCL may
 *       finish a small send early; nothing promises it, so this is the model), and a group
 *       once all its operations did. Otherwise some stages wait on each other for good.
 * f8_pipeline_messages_check decides both for a layout, before the first step
 * (runtime/train.c, for a backend with ordered_messages, runtime/backend.h).
 *
 * 1F1B passes both. The interleaved schedule pairs up (with PP = 2 too: both ends of a pair
 * take its activations and gradients in the one order the schedule gives), but its groups
 * complete only when M = PP: past that, the first stage's chunk 0 forwards receive nothing, so
 * their sends wait for a backward's receive, and the stages end up in a ring each waiting for
 * the next to receive. Megatron-LM's batching, where each forward and backward pair's sends go
 * in one group with the receives of the stage's next forward and next backward (posted a step
 * ahead, into buffers of their own), completes for every layout; with its calls' order in a
 * group (send to the previous stage, receive from it, send to the next, receive from it) PP = 2
 * does not pair up past M = PP: the two stages put a pair's activation and gradient in opposite
 * orders, which is why it once required PP > 2 (tests/runtime/test_pipeline_messages.c holds
 * all this).
 *
 * What else goes over pp is outside a step's schedule and needs no check: the optimizer's
 * exchange of a tied embedding's gradient (passes/shard.c) comes after the step's flush, so
 * each pair's queue holds it last on both sides; an evaluation, inference and an observed step
 * (runtime/train.h) run each micro-batch's program whole, one after another (an evaluation
 * flushing the sends after each), which tests/runtime/test_pipeline_messages.c holds
 * deadlock-free for every layout.
 */
#ifndef F8_RUNTIME_PIPELINE_MESSAGES_H
#define F8_RUNTIME_PIPELINE_MESSAGES_H

#include <stdbool.h> // bool
#include <stdint.h>  // int64_t, uint32_t

#include "ir/diag.h"                   // f8_status, f8_diag
#include "runtime/pipeline_schedule.h" // f8_stage_run

/* One message: micro-batch `micro_batch`'s activation over boundary `boundary` (from position
 * boundary to boundary + 1), or its gradient (back from boundary + 1 to boundary). */
typedef struct f8_pipeline_message {
	bool gradient;       // the gradient going back, else the activation going forward
	int64_t micro_batch; // 0 .. M - 1
	uint32_t boundary;   // 0 .. PP V - 2: its tag / 2
} f8_pipeline_message;

/* One point-to-point operation of a stage: a send of `message` to stage `peer`, or a receive
 * of it from there; and whether the stage then posts the operations since its group before as
 * one group (an NCCL group, which completes when all of them do). */
typedef struct f8_pipeline_op {
	bool send;
	uint32_t peer;
	f8_pipeline_message message;
	bool closes_group;
} f8_pipeline_op;

/*
 * Stage `stage` (of `stages`, each holding `chunks` model chunks)'s operations, in the order
 * its `n_runs` runs issue them (as above), into ops[] (the caller's, room for 2 n_runs); their
 * number. They are grouped as the CUDA backend posts them: each receive closes a group (with
 * the sends held since the group before), and the last operation closes one (the flush).
 */
int64_t f8_pipeline_messages_of_runs(int64_t stages, int64_t chunks, int64_t stage,
				     const f8_stage_run *runs, int64_t n_runs,
				     f8_pipeline_op *ops);

/*
 * Checks (a) and (b) above over every stage's operations: ops[s], n_ops[s] of them, for stage
 * s of `stages` holding `chunks` chunks each (the chunks name the messages in the diagnostic),
 * posted in their order (within a group too: NCCL's queue of a pair is the order of its calls)
 * in the groups closes_group ends (a stage's last operation ends its last group in any case).
 * F8_OK; F8_ERR_UNSUPPORTED with the first mismatch (the pair, the place in its queue and the
 * two messages) or the deadlock (the stages that wait on each other, each with the operation
 * it waits on); F8_ERR_NOMEM. Any hint is the caller's to give.
 */
f8_status f8_pipeline_messages_check_ops(int64_t stages, int64_t chunks,
					 const f8_pipeline_op *const *ops, const int64_t *n_ops,
					 f8_diag *diag);

/*
 * The schedule runtime/train.c runs for `stages` (PP >= 1) stages of `chunks` (V >= 1) chunks
 * over `micro_batches` (M >= 1): 1F1B when V is 1, else the interleaved one (M a multiple of
 * PP, as train.c requires before it asks); every stage's operations derived from its order and
 * checked by f8_pipeline_messages_check_ops. Its statuses; the message names PP, V and M.
 */
f8_status f8_pipeline_messages_check(int64_t stages, int64_t chunks, int64_t micro_batches,
				     f8_diag *diag);

#endif
