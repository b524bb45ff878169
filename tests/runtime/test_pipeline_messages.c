/*
 * runtime/pipeline_messages.h: which pipeline schedules a transport that matches messages in
 * posting order (NCCL, with the CUDA backend's groups) runs, over a grid of layouts; each
 * stage's operations against the program order the passes make; Megatron-LM's grouping of the
 * same messages, which runs every layout; and the check failing, with its diagnostic, on orders
 * made wrong on purpose and when allocation fails.
 */
#include <stdio.h>  // printf
#include <string.h> // strstr

#include "runtime/pipeline_messages.h" // f8_pipeline_messages_*
#include "tests/test_support.h"        // CHECK, test_finish

enum { MAX_STAGES = 8, MAX_RUNS = 2 * 32 * 4, MAX_OPS = 2 * MAX_RUNS };

static f8_stage_run runs[MAX_STAGES][MAX_RUNS];
static f8_pipeline_op ops[MAX_STAGES][MAX_OPS];
static int64_t n_ops[MAX_STAGES];

/* The check over ops[] as the stages hold them now. */
static f8_status check_ops(int64_t stages, int64_t chunks, f8_diag *diag) {
	const f8_pipeline_op *lists[MAX_STAGES];
	for (int64_t s = 0; s < stages; s++)
		lists[s] = ops[s];
	f8_diag_clear(diag);
	return f8_pipeline_messages_check_ops(stages, chunks, lists, n_ops, diag);
}

/* Every stage's runs of one micro-batch after another, each whole: its forward chunks in
 * order and, with `backward`, then its backward chunks from the last (an evaluation's and
 * inference's runs without it, an observed step's with it, runtime/train.h); into ops[]. */
static void in_turn(int64_t stages, int64_t chunks, int64_t micro_batches, bool backward) {
	for (int64_t s = 0; s < stages; s++) {
		int64_t n = 0;
		for (int64_t i = 0; i < micro_batches; i++) {
			for (int64_t v = 0; v < chunks; v++)
				runs[s][n++] = (f8_stage_run){false, i, (uint32_t)v, 0};
			for (int64_t v = chunks - 1; backward && v >= 0; v--)
				runs[s][n++] = (f8_stage_run){true, i, (uint32_t)v, 0};
		}
		n_ops[s] = f8_pipeline_messages_of_runs(stages, chunks, s, runs[s], n, ops[s]);
	}
}

/* Every stage's 1F1B runs over `micro_batches` and their operations, into ops[]. */
static void one_f_one_b(int64_t stages, int64_t micro_batches) {
	for (int64_t s = 0; s < stages; s++) {
		f8_pipeline_1f1b(stages, s, micro_batches, runs[s]);
		n_ops[s] = f8_pipeline_messages_of_runs(stages, 1, s, runs[s], 2 * micro_batches,
							ops[s]);
	}
}

/*
 * A stage's operations against its program, as dump-ir prints the final program of gpt-tiny's
 * stage 0 under PP 2 with 2 chunks a stage (distributed.pipeline_parallel checks these tags):
 * forward Send tag 0 (chunk 0), Recv tag 2 and Send tag 4 (chunk 1); backward Recv tag 5 and
 * Send tag 3 (chunk 1), Recv tag 1 (chunk 0). A message's tag is 2 boundary + gradient.
 */
static void test_program_order(void) {
	in_turn(2, 2, 1, true);
	const int want_tags[] = {0, 2, 4, 5, 3, 1};
	const bool want_send[] = {true, false, true, false, true, false};
	CHECK(n_ops[0] == 6);
	for (int i = 0; i < 6 && i < n_ops[0]; i++) {
		const f8_pipeline_op *op = &ops[0][i];
		CHECK(op->send == want_send[i] && op->peer == 1 && op->message.micro_batch == 0 &&
		      (int)(2 * op->message.boundary + op->message.gradient) == want_tags[i]);
	}
	// Stage 1 (positions 1 and 3, the loss's): Recv 0, Send 2, Recv 4; backward Send 5
	// (position 3 receives nothing back), Recv 3, Send 1.
	const int stage1_tags[] = {0, 2, 4, 5, 3, 1};
	const bool stage1_send[] = {false, true, false, true, false, true};
	CHECK(n_ops[1] == 6);
	for (int i = 0; i < 6 && i < n_ops[1]; i++)
		CHECK(ops[1][i].send == stage1_send[i] && ops[1][i].peer == 0 &&
		      (int)(2 * ops[1][i].message.boundary + ops[1][i].message.gradient) ==
			      stage1_tags[i]);
}

/*
 * The grid: PP 2..8, V 1..4, M = PP .. 4 PP by PP, and 1F1B over M = 1..10.
 *
 * 1F1B passes everywhere: each stage's groups are Megatron-LM's send_forward_recv_backward and
 * send_backward_recv_forward, which meet their peers' one for one.
 *
 * The interleaved schedule pairs up everywhere, PP = 2 included: both stages' orders come from
 * one formula, so the messages that share a pair there (activations and gradients both ways)
 * go in the same order on both ends. (Megatron-LM's old PP > 2 rule came from its batching of
 * a step's four messages into one call, where with PP = 2 two sends have one peer.) It
 * deadlocks, though, whenever M > PP, for every PP: the first stage's chunk 0 forwards receive
 * nothing, so their sends wait for a later receive (a backward's) and go in one group with the
 * send of the backward before; the next stage's receive of that activation comes after it
 * needs the first stage's next forward input, which that stage posts only after the stuck group
 * (PP 2, V 2, M 4: stage 0's group {send gradient 0 back, send activation 3, receive gradient 1}
 * waits for stage 1's receive of activation 3, two groups on, while stage 1 waits for stage 0
 * to receive micro-batch 2's activation into chunk 1, the group after the stuck one). With
 * M = PP every forward is warm-up, there is no steady state, and it completes.
 */
static void test_grid(void) {
	f8_diag diag;
	for (int64_t pp = 2; pp <= MAX_STAGES; pp++) {
		for (int64_t v = 1; v <= 4; v++) {
			for (int64_t m = pp; m <= 4 * pp; m += pp) {
				f8_diag_clear(&diag);
				f8_status status = f8_pipeline_messages_check(pp, v, m, &diag);
				bool passes = v == 1 || m == pp;
				bool ok = passes ? status == F8_OK
						 : status == F8_ERR_UNSUPPORTED &&
							   strstr(diag.message, "deadlock") &&
							   !strstr(diag.message, "mismatch");
				CHECK(ok);
				if (!ok)
					printf("PP %lld V %lld M %lld: %s\n", (long long)pp, (long long)v,
					       (long long)m, status ? diag.message : "passes");
			}
		}
		for (int64_t m = 1; m <= 10; m++) {
			f8_status status = f8_pipeline_messages_check(pp, 1, m, &diag);
			CHECK(status == F8_OK);
			if (status)
				printf("1F1B PP %lld M %lld: %s\n", (long long)pp, (long long)m,
				       diag.message);
		}
	}
	// Whole micro-batches one after another (evaluation, inference, an observed step) pass
	// for every layout, so they need no check of their own; an evaluation's forwards also
	// with the flush after each micro-batch that runtime/train.c's evaluate does (else the
	// first stage, which receives nothing, would hold every micro-batch's sends to the end).
	for (int64_t pp = 2; pp <= MAX_STAGES; pp++)
		for (int64_t v = 1; v <= 4; v++)
			for (int form = 0; form < 3; form++) {
				bool backward = form == 1, flushed = form == 2;
				in_turn(pp, v, 2 * pp, backward);
				for (int64_t s = 0; flushed && s < pp; s++)
					for (int64_t i = 0; i < n_ops[s]; i++)
						ops[s][i].closes_group |=
							i + 1 == n_ops[s] ||
							ops[s][i + 1].message.micro_batch !=
								ops[s][i].message.micro_batch;
				f8_status status = check_ops(pp, v, &diag);
				CHECK(status == F8_OK);
				if (status)
					printf("in turn PP %lld V %lld%s: %s\n", (long long)pp,
					       (long long)v, backward  ? " with backward"
							     : flushed ? " flushed a micro-batch at a time"
								       : "",
					       diag.message);
			}
}

/* PP 2 interleaved, as above: M = 2 passes; M = 4 deadlocks, and the diagnostic names the two
 * stages, the micro-batches, the chunks and the directions they wait on. */
static void test_two_stages(void) {
	f8_diag diag;
	CHECK(f8_pipeline_messages_check(2, 2, 2, &diag) == F8_OK);
	f8_diag_clear(&diag);
	CHECK(f8_pipeline_messages_check(2, 2, 4, &diag) == F8_ERR_UNSUPPORTED);
	const char *want = "the interleaved schedule of 2 pipeline stages of 2 model chunks each "
			   "over 4 micro-batches: point-to-point messages matched in order and "
			   "posted in the stages' groups deadlock (2 of 2 stages stuck): stage 0 waits for stage 1 to receive micro-batch 3's activation "
			   "from chunk 0 of stage 0 to chunk 0 of stage 1, while stage 1 waits for "
			   "stage 0 to receive micro-batch 2's activation from chunk 0 of stage 1 to "
			   "chunk 1 of stage 0";
	CHECK(strcmp(diag.message, want) == 0);
	if (strcmp(diag.message, want) != 0)
		printf("got:  %s\nwant: %s\n", diag.message, want);
}

/* A run's receive and send, where it has them. */
typedef struct run_ops {
	f8_pipeline_op receive, send;
	bool has_receive, has_send;
} run_ops;

static run_ops ops_of_run(int64_t stages, int64_t chunks, int64_t stage, const f8_stage_run *run) {
	f8_pipeline_op two[2];
	int64_t n = f8_pipeline_messages_of_runs(stages, chunks, stage, run, 1, two);
	run_ops r = {.has_receive = false};
	for (int64_t i = 0; i < n; i++) {
		two[i].closes_group = false;
		if (two[i].send)
			r.send = two[i], r.has_send = true;
		else
			r.receive = two[i], r.has_receive = true;
	}
	return r;
}

/* Appends one group of stage s to ops[s]: the sends of `forward` and `backward` and the
 * receives of `next_forward` and `next_backward` (each may be NULL or have none), in
 * Megatron-LM's call order (send to the previous stage: the backward's; receive from it: the
 * forward's; send to the next; receive from it) or, `in_order`, forwards' first. */
static void megatron_group(int64_t s, const run_ops *forward, const run_ops *backward,
			   const run_ops *next_forward, const run_ops *next_backward, bool in_order) {
	const f8_pipeline_op *put[4] = {
		backward && backward->has_send ? &backward->send : NULL,
		next_forward && next_forward->has_receive ? &next_forward->receive : NULL,
		forward && forward->has_send ? &forward->send : NULL,
		next_backward && next_backward->has_receive ? &next_backward->receive : NULL};
	static const int megatron_order[4] = {0, 1, 2, 3}, forwards_first[4] = {2, 0, 1, 3};
	int64_t start = n_ops[s];
	for (int k = 0; k < 4; k++) {
		const f8_pipeline_op *op = put[(in_order ? forwards_first : megatron_order)[k]];
		if (op)
			ops[s][n_ops[s]++] = *op;
	}
	if (n_ops[s] > start)
		ops[s][n_ops[s] - 1].closes_group = true;
}

/*
 * The interleaved order's messages grouped as Megatron-LM's
 * forward_backward_pipelining_with_interleaving batches them: the first forward's receive
 * alone; each warm-up forward's send with the next forward's receive (the last's with the first
 * backward's too); in the steady state each forward and backward pair's sends with the
 * receives of the next forward and the next backward, posted a step ahead; each cool-down
 * backward's send with the next backward's receive.
 */
static void megatron_groups(int64_t stages, int64_t chunks, int64_t micro_batches, bool in_order) {
	static run_ops forwards[MAX_RUNS], backwards[MAX_RUNS];
	int64_t n = micro_batches * chunks;
	for (int64_t s = 0; s < stages; s++) {
		uint32_t contexts;
		f8_pipeline_interleaved(stages, s, chunks, micro_batches, runs[s], &contexts);
		int64_t f = 0, b = 0, warmup = -1;
		for (int64_t r = 0; r < 2 * n; r++) {
			if (runs[s][r].backward && warmup < 0)
				warmup = f;
			if (runs[s][r].backward)
				backwards[b++] = ops_of_run(stages, chunks, s, &runs[s][r]);
			else
				forwards[f++] = ops_of_run(stages, chunks, s, &runs[s][r]);
		}
		int64_t steady = n - warmup;
		n_ops[s] = 0;
		megatron_group(s, NULL, NULL, &forwards[0], NULL, in_order);
		for (int64_t k = 0; k < warmup; k++)
			megatron_group(s, &forwards[k], NULL, k + 1 < n ? &forwards[k + 1] : NULL,
				       k == warmup - 1 && steady > 0 ? &backwards[0] : NULL, in_order);
		if (steady == 0)
			megatron_group(s, NULL, NULL, NULL, &backwards[0], in_order);
		for (int64_t k = 0; k < steady; k++)
			megatron_group(s, &forwards[warmup + k], &backwards[k],
				       warmup + k + 1 < n ? &forwards[warmup + k + 1] : NULL,
				       k + 1 < n ? &backwards[k + 1] : NULL, in_order);
		for (int64_t k = steady; k < n; k++)
			megatron_group(s, NULL, &backwards[k], NULL,
				       k + 1 < n ? &backwards[k + 1] : NULL, in_order);
	}
}

/*
 * What a grouping that runs every layout looks like: Megatron-LM's. In the calls' order its
 * code makes them, PP = 2 does not pair up once M > PP (in the steady state stage 0 sends a
 * gradient before an activation where stage 1 receives the activation first: why Megatron-LM
 * once required PP > 2); PP > 2 passes. With each pair's messages in one order on both ends,
 * every layout of the grid passes: the receives posted a step ahead are what the CUDA
 * backend's grouping lacks.
 */
static void test_megatron_groups(void) {
	f8_diag diag;
	for (int64_t pp = 2; pp <= MAX_STAGES; pp++) {
		for (int64_t v = 2; v <= 4; v++) {
			for (int64_t m = pp; m <= 4 * pp; m += pp) {
				for (int in_order = 0; in_order < 2; in_order++) {
					megatron_groups(pp, v, m, in_order);
					f8_status status = check_ops(pp, v, &diag);
					bool ok = in_order || pp > 2 || m == pp
							  ? status == F8_OK
							  : status == F8_ERR_UNSUPPORTED &&
								    strstr(diag.message, "would mismatch");
					CHECK(ok);
					if (!ok)
						printf("Megatron-LM's groups%s, PP %lld V %lld M %lld: %s\n",
						       in_order ? " in order" : "", (long long)pp,
						       (long long)v, (long long)m,
						       status ? diag.message : "passes");
				}
			}
		}
	}
	megatron_groups(2, 2, 4, false);
	CHECK(check_ops(2, 2, &diag) == F8_ERR_UNSUPPORTED);
	CHECK(strstr(diag.message, "would mismatch: stage 0's send #6 to stage 1 is micro-batch 0's "
				   "gradient from chunk 1 of stage 0 back to chunk 0 of stage 1, and "
				   "stage 1's receive #6 from stage 0 is micro-batch 3's activation from "
				   "chunk 0 of stage 0 to chunk 0 of stage 1") != NULL);
}

static void swap_ops(int64_t stage, int64_t i, int64_t j) {
	f8_pipeline_op kept = ops[stage][i];
	ops[stage][i] = ops[stage][j];
	ops[stage][j] = kept;
}

/* The check fails on orders made wrong: two sends of one stage swapped (the pair's queues
 * mismatch), a receive dropped (a send left without one), and a stage that receives its
 * gradient before it sends the activation (a deadlock). */
static void test_wrong_orders(void) {
	f8_diag diag;
	// PP 4 1F1B over 4: stage 1 receives activation 0 from stage 0, sends it to stage 2, ...
	one_f_one_b(4, 4);
	CHECK(check_ops(4, 1, &diag) == F8_OK);
	// Stage 1's warm-up: R0<0 S0>2 R1<0 S1>2: its first two sends to stage 2 swapped.
	CHECK(ops[1][1].send && ops[1][3].send && ops[1][1].peer == 2 && ops[1][3].peer == 2);
	swap_ops(1, 1, 3);
	CHECK(check_ops(4, 1, &diag) == F8_ERR_UNSUPPORTED);
	CHECK(strstr(diag.message, "would mismatch: stage 1's send #1 to stage 2 is micro-batch "
				   "1's activation from stage 1 to stage 2, and stage 2's receive #1 "
				   "from stage 1 is micro-batch 0's activation from stage 1 to stage "
				   "2") != NULL);
	swap_ops(1, 1, 3);
	// Stage 2's last receive from stage 1 (activation 3) dropped.
	int64_t last = n_ops[2] - 1;
	while (last >= 0 && (ops[2][last].send || ops[2][last].peer != 1))
		last--;
	CHECK(last >= 0 && ops[2][last].message.micro_batch == 3 && !ops[2][last].message.gradient);
	for (int64_t i = last; i + 1 < n_ops[2]; i++)
		ops[2][i] = ops[2][i + 1];
	n_ops[2]--;
	CHECK(check_ops(4, 1, &diag) == F8_ERR_UNSUPPORTED);
	CHECK(strstr(diag.message, "would not pair up: stage 1's send #4 to stage 2 (micro-batch "
				   "3's activation from stage 1 to stage 2) has no receive there") !=
	      NULL);
	// PP 2 1F1B over 1: stage 0 sends activation 0, then receives its gradient. Receiving
	// first, it waits for stage 1's gradient, which stage 1 makes only from that activation.
	one_f_one_b(2, 1);
	CHECK(n_ops[0] == 2 && ops[0][0].send && !ops[0][1].send);
	CHECK(check_ops(2, 1, &diag) == F8_OK);
	swap_ops(0, 0, 1);
	CHECK(check_ops(2, 1, &diag) == F8_ERR_UNSUPPORTED);
	CHECK(strstr(diag.message, "deadlock (2 of 2 stages stuck): stage 0 waits for stage 1 to "
				   "send micro-batch 0's gradient from stage 1 back to stage 0, while "
				   "stage 1 waits for stage 0 to send micro-batch 0's activation from "
				   "stage 0 to stage 1") != NULL);
	if (!strstr(diag.message, "deadlock"))
		printf("%s\n", diag.message);
}

/* Allocation failing at each of the check's allocations: F8_ERR_NOMEM, nothing leaked (the
 * sanitizer build's), until there are enough and the deadlock is found again. */
static void test_allocation_failure(void) {
	f8_diag diag;
	f8_status status = F8_ERR_NOMEM;
	long n = 0;
	for (; n < 64 && status == F8_ERR_NOMEM; n++) {
		test_fail_allocations_after(n);
		f8_diag_clear(&diag);
		status = f8_pipeline_messages_check(4, 2, 8, &diag);
		test_allocations_restore();
		CHECK(status == F8_ERR_NOMEM || status == F8_ERR_UNSUPPORTED);
	}
	CHECK(status == F8_ERR_UNSUPPORTED && n > 1 && strstr(diag.message, "deadlock"));
}

int main(void) {
	test_program_order();
	test_grid();
	test_two_stages();
	test_wrong_orders();
	test_megatron_groups();
	test_allocation_failure();
	return test_finish();
}
