/*
 * Pipeline parallelism's messages in posting order (runtime/pipeline_messages.h): each stage's
 * operations from its runs, then the pairs' queues compared and the NCCL groups simulated.
 */
#include "runtime/pipeline_messages.h" // f8_pipeline_messages_*

#include <assert.h> // assert
#include <stdio.h>  // snprintf
#include <string.h> // memcpy, memset

#include "ir/alloc.h" // f8_calloc, f8_free

int64_t f8_pipeline_messages_of_runs(int64_t stages, int64_t chunks, int64_t stage,
				     const f8_stage_run *runs, int64_t n_runs,
				     f8_pipeline_op *ops) {
	assert(stages >= 1 && chunks >= 1 && stage >= 0 && stage < stages);
	if (stages == 1) // no pipeline: nothing to send
		return 0;
	int64_t last = stages * chunks - 1, n = 0;
	for (int64_t r = 0; r < n_runs; r++) {
		const f8_stage_run *run = &runs[r];
		assert(run->chunk < chunks);
		int64_t g = (int64_t)run->chunk * stages + stage;
		uint32_t before = (uint32_t)((g + stages - 1) % stages);
		uint32_t after = (uint32_t)((g + 1) % stages);
		int64_t i = run->micro_batch;
		// The receive first: the send carries what the run computed from it.
		if (!run->backward && g > 0)
			ops[n++] = (f8_pipeline_op){false, before, {false, i, (uint32_t)(g - 1)}, true};
		if (!run->backward && g < last)
			ops[n++] = (f8_pipeline_op){true, after, {false, i, (uint32_t)g}, false};
		if (run->backward && g < last)
			ops[n++] = (f8_pipeline_op){false, after, {true, i, (uint32_t)g}, true};
		if (run->backward && g > 0)
			ops[n++] = (f8_pipeline_op){true, before, {true, i, (uint32_t)(g - 1)}, false};
	}
	if (n) // the flush's group
		ops[n - 1].closes_group = true;
	return n;
}

/* A message for a person: "micro-batch 3's activation from chunk 0 of stage 1 to chunk 1 of
 * stage 0" (without the chunks when a stage holds one). */
static void describe(char *out, size_t size, const f8_pipeline_message *message, int64_t stages,
		     int64_t chunks) {
	int64_t from = message->boundary, to = from + 1;
	if (message->gradient)
		from = to, to = message->boundary;
	if (chunks == 1) {
		snprintf(out, size, "micro-batch %lld's %s from stage %lld %sto stage %lld",
			 (long long)message->micro_batch,
			 message->gradient ? "gradient" : "activation", (long long)from,
			 message->gradient ? "back " : "", (long long)to);
		return;
	}
	snprintf(out, size, "micro-batch %lld's %s from chunk %lld of stage %lld %sto chunk %lld of "
		 "stage %lld", (long long)message->micro_batch,
		 message->gradient ? "gradient" : "activation", (long long)(from / stages),
		 (long long)(from % stages), message->gradient ? "back " : "",
		 (long long)(to / stages), (long long)(to % stages));
}

static bool same_message(const f8_pipeline_message *a, const f8_pipeline_message *b) {
	return a->gradient == b->gradient && a->micro_batch == b->micro_batch &&
	       a->boundary == b->boundary;
}

/* The index of the next operation of ops[from .. n) that sends to (or receives from) `peer`,
 * or n. */
static int64_t next_with(const f8_pipeline_op *ops, int64_t n, int64_t from, bool send,
			 uint32_t peer) {
	while (from < n && (ops[from].send != send || ops[from].peer != peer))
		from++;
	return from;
}

/* (a): pair a -> b's sends on a are, in order, b's receives from a. */
static f8_status check_pair(int64_t stages, int64_t chunks, const f8_pipeline_op *const *ops,
			    const int64_t *n_ops, uint32_t a, uint32_t b, f8_diag *diag) {
	char sent[160], received[160];
	int64_t i = next_with(ops[a], n_ops[a], 0, true, b);
	int64_t j = next_with(ops[b], n_ops[b], 0, false, a);
	for (int64_t k = 1; i < n_ops[a] || j < n_ops[b]; k++) {
		if (i < n_ops[a])
			describe(sent, sizeof sent, &ops[a][i].message, stages, chunks);
		if (j < n_ops[b])
			describe(received, sizeof received, &ops[b][j].message, stages, chunks);
		if (j == n_ops[b])
			return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "point-to-point messages "
					   "matched in order would not pair up: stage %u's send #%lld "
					   "to stage %u (%s) has no receive there", a, (long long)k, b,
					   sent);
		if (i == n_ops[a])
			return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "point-to-point messages "
					   "matched in order would not pair up: stage %u's receive "
					   "#%lld from stage %u (%s) has no send there", b, (long long)k,
					   a, received);
		if (!same_message(&ops[a][i].message, &ops[b][j].message))
			return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "point-to-point messages "
					   "matched in order would mismatch: stage %u's send #%lld to "
					   "stage %u is %s, and stage %u's receive #%lld from stage %u is "
					   "%s", a, (long long)k, b, sent, b, (long long)k, a, received);
		i = next_with(ops[a], n_ops[a], i + 1, true, b);
		j = next_with(ops[b], n_ops[b], j + 1, false, a);
	}
	return F8_OK;
}

/* (b)'s state: each stage's current group ops[s][at[s] .. end[s]) (at[s] == n_ops[s]: the
 * stage is done), and how many sends and receives each pair has posted. */
typedef struct simulation {
	int64_t stages;
	const f8_pipeline_op *const *ops;
	const int64_t *n_ops;
	int64_t *place;           // per operation, stage after stage: its index in its pair's queue
	int64_t *first;           // (stages) stage s's first entry of place[]
	int64_t *at, *end;        // (stages)
	int64_t *sends_posted;    // (stages * stages) [from * stages + to]
	int64_t *receives_posted; // (stages * stages) [to * stages + from]
} simulation;

/* Each operation's place in its pair's queue: the how-manieth send to (or receive from) its
 * peer it is on its stage. */
static void number_places(simulation *sim) {
	int64_t stages = sim->stages, at = 0;
	int64_t *sends = sim->sends_posted, *receives = sim->receives_posted; // zero, used here
	for (int64_t s = 0; s < stages; s++) {
		sim->first[s] = at;
		for (int64_t i = 0; i < sim->n_ops[s]; i++) {
			const f8_pipeline_op *op = &sim->ops[s][i];
			int64_t *count = op->send ? &sends[s * stages + op->peer]
						  : &receives[s * stages + op->peer];
			sim->place[at++] = (*count)++;
		}
	}
	memset(sends, 0, (size_t)(stages * stages) * sizeof *sends);
	memset(receives, 0, (size_t)(stages * stages) * sizeof *receives);
}

/* Stage s posts its group at at[s]: up to and with the operation that closes it (or the last). */
static void post_group(simulation *sim, int64_t s) {
	const f8_pipeline_op *ops = sim->ops[s];
	int64_t e = sim->at[s];
	while (e + 1 < sim->n_ops[s] && !ops[e].closes_group)
		e++;
	sim->end[s] = e + 1;
	for (int64_t i = sim->at[s]; i < sim->end[s]; i++)
		if (ops[i].send)
			sim->sends_posted[s * sim->stages + ops[i].peer]++;
		else
			sim->receives_posted[s * sim->stages + ops[i].peer]++;
}

/* The first operation of stage s's current group whose peer has not posted the matching one
 * yet, or -1: the group completes. */
static int64_t waiting_on(const simulation *sim, int64_t s) {
	for (int64_t i = sim->at[s]; i < sim->end[s]; i++) {
		const f8_pipeline_op *op = &sim->ops[s][i];
		int64_t pair = op->peer * sim->stages + s;
		int64_t posted = op->send ? sim->receives_posted[pair] : sim->sends_posted[pair];
		if (posted <= sim->place[sim->first[s] + i])
			return i;
	}
	return -1;
}

/* (b) for stages whose queues pair up: every group completes, or F8_ERR_UNSUPPORTED naming the
 * stages that wait on each other. */
static f8_status simulate(simulation *sim, int64_t chunks, f8_diag *diag) {
	int64_t stages = sim->stages;
	number_places(sim);
	for (int64_t s = 0; s < stages; s++)
		if (sim->at[s] < sim->n_ops[s])
			post_group(sim, s);
	for (bool moved = true; moved;) {
		moved = false;
		for (int64_t s = 0; s < stages; s++) {
			if (sim->at[s] == sim->n_ops[s] || waiting_on(sim, s) >= 0)
				continue;
			sim->at[s] = sim->end[s];
			if (sim->at[s] < sim->n_ops[s])
				post_group(sim, s);
			moved = true;
		}
	}
	int64_t first = -1, stuck = 0;
	for (int64_t s = 0; s < stages; s++)
		if (sim->at[s] < sim->n_ops[s])
			first = first < 0 ? s : first, stuck++;
	if (!stuck)
		return F8_OK;
	// The deadlock is a cycle of stages each waiting on the next. A stuck stage waits only on
	// a stuck one (one that is done posted all its operations, and the queues pair up), and on
	// one only, so following the waits from any stuck stage enters the cycle within PP steps.
	int64_t s = first;
	for (int64_t steps = 0; steps < stages; steps++)
		s = sim->ops[s][waiting_on(sim, s)].peer;
	char cycle[F8_DIAG_MESSAGE_MAX] = "", what[160];
	size_t used = 0;
	int64_t start = s;
	do {
		const f8_pipeline_op *op = &sim->ops[s][waiting_on(sim, s)];
		describe(what, sizeof what, &op->message, stages, chunks);
		int wrote = snprintf(cycle + used, sizeof cycle - used,
				     "%sstage %lld waits for stage %u to %s %s", used ? ", while " : "",
				     (long long)s, op->peer, op->send ? "receive" : "send", what);
		used = wrote < 0 ? used : used + (size_t)wrote;
		used = used < sizeof cycle ? used : sizeof cycle - 1;
		s = op->peer;
	} while (s != start);
	return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "point-to-point messages matched in order "
			   "and posted in the stages' groups deadlock (%lld of %lld stages stuck): %s",
			   (long long)stuck, (long long)stages, cycle);
}

f8_status f8_pipeline_messages_check_ops(int64_t stages, int64_t chunks,
					 const f8_pipeline_op *const *ops, const int64_t *n_ops,
					 f8_diag *diag) {
	assert(stages >= 1 && chunks >= 1);
	int64_t total = 0;
	for (int64_t s = 0; s < stages; s++) {
		for (int64_t i = 0; i < n_ops[s]; i++)
			assert(ops[s][i].peer < stages && ops[s][i].peer != s);
		total += n_ops[s];
	}
	f8_status status = F8_OK;
	for (uint32_t a = 0; !status && a < stages; a++)
		for (uint32_t b = 0; !status && b < stages; b++)
			if (a != b)
				status = check_pair(stages, chunks, ops, n_ops, a, b, diag);
	if (status)
		return status;
	size_t pairs = (size_t)(stages * stages);
	simulation sim = {.stages = stages, .ops = ops, .n_ops = n_ops,
			  .place = f8_calloc((size_t)total + 1, sizeof *sim.place),
			  .first = f8_calloc((size_t)stages, sizeof *sim.first),
			  .at = f8_calloc((size_t)stages, sizeof *sim.at),
			  .end = f8_calloc((size_t)stages, sizeof *sim.end),
			  .sends_posted = f8_calloc(pairs, sizeof *sim.sends_posted),
			  .receives_posted = f8_calloc(pairs, sizeof *sim.receives_posted)};
	status = sim.place && sim.first && sim.at && sim.end && sim.sends_posted &&
				 sim.receives_posted
			 ? simulate(&sim, chunks, diag)
			 : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	f8_free(sim.place), f8_free(sim.first), f8_free(sim.at), f8_free(sim.end);
	f8_free(sim.sends_posted), f8_free(sim.receives_posted);
	return status;
}

f8_status f8_pipeline_messages_check(int64_t stages, int64_t chunks, int64_t micro_batches,
				     f8_diag *diag) {
	assert(stages >= 1 && chunks >= 1 && micro_batches >= 1 &&
	       (chunks == 1 || micro_batches % stages == 0));
	if (stages == 1)
		return F8_OK;
	int64_t n_runs = 2 * micro_batches * chunks;
	f8_stage_run *runs = f8_calloc((size_t)n_runs, sizeof *runs);
	f8_pipeline_op *ops = f8_calloc((size_t)(stages * 2 * n_runs), sizeof *ops);
	const f8_pipeline_op **lists = f8_calloc((size_t)stages, sizeof *lists);
	int64_t *n_ops = f8_calloc((size_t)stages, sizeof *n_ops);
	f8_status status = runs && ops && lists && n_ops
				   ? F8_OK
				   : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	for (int64_t s = 0; !status && s < stages; s++) {
		uint32_t contexts; // the executor's business, not the messages'
		if (chunks == 1)
			f8_pipeline_1f1b(stages, s, micro_batches, runs);
		else
			f8_pipeline_interleaved(stages, s, chunks, micro_batches, runs, &contexts);
		lists[s] = ops + s * 2 * n_runs;
		n_ops[s] = f8_pipeline_messages_of_runs(stages, chunks, s, runs, n_runs,
							ops + s * 2 * n_runs);
	}
	if (!status)
		status = f8_pipeline_messages_check_ops(stages, chunks, lists, n_ops, diag);
	if (status == F8_ERR_UNSUPPORTED && diag) {
		char why[F8_DIAG_MESSAGE_MAX], chunked[48] = "";
		memcpy(why, diag->message, sizeof why);
		if (chunks > 1)
			snprintf(chunked, sizeof chunked, " of %lld model chunks each", (long long)chunks);
		f8_diag_set(diag, status, "the %s schedule of %lld pipeline stages%s over %lld "
			    "micro-batches: %s", chunks == 1 ? "1F1B" : "interleaved",
			    (long long)stages, chunked, (long long)micro_batches, why);
	}
	f8_free(runs), f8_free(ops), f8_free(lists), f8_free(n_ops);
	return status;
}
