/*
 * Pipeline parallelism's orders of one stage's runs: 1F1B and interleaved.
 */
#include "runtime/pipeline_schedule.h" // f8_pipeline_1f1b

#include <assert.h> // assert

uint32_t f8_pipeline_1f1b_contexts(int64_t stages, int64_t stage, int64_t micro_batches) {
	assert(stages >= 1 && stage >= 0 && stage < stages && micro_batches >= 1);
	int64_t in_flight = stages - stage;
	return (uint32_t)(in_flight < micro_batches ? in_flight : micro_batches);
}

void f8_pipeline_1f1b(int64_t stages, int64_t stage, int64_t micro_batches,
		      f8_stage_run *runs) {
	int64_t m = micro_batches, after = stages - stage - 1;
	int64_t warmup = after < m ? after : m;
	int64_t in_flight = f8_pipeline_1f1b_contexts(stages, stage, m);
	int64_t n = 0, forwards = 0, backwards = 0;
	// A micro-batch's context is its number modulo the micro-batches in flight: micro-batch
	// i + in_flight's forward comes after micro-batch i's backward.
	for (; forwards < warmup; forwards++)
		runs[n++] = (f8_stage_run){false, forwards, 0, (uint32_t)(forwards % in_flight)};
	for (; forwards < m; forwards++, backwards++) {
		runs[n++] = (f8_stage_run){false, forwards, 0, (uint32_t)(forwards % in_flight)};
		runs[n++] = (f8_stage_run){true, backwards, 0, (uint32_t)(backwards % in_flight)};
	}
	for (; backwards < m; backwards++)
		runs[n++] = (f8_stage_run){true, backwards, 0, (uint32_t)(backwards % in_flight)};
}

/* The stage's k-th forward (or backward) of the interleaved order: its micro-batch and chunk. */
static f8_stage_run interleaved_run(int64_t stages, int64_t chunks, int64_t k, bool backward) {
	int64_t group = k / (stages * chunks), in_group = k % (stages * chunks);
	int64_t chunk = in_group / stages;
	return (f8_stage_run){.backward = backward, .micro_batch = group * stages + in_group % stages,
			      .chunk = (uint32_t)(backward ? chunks - 1 - chunk : chunk)};
}

void f8_pipeline_interleaved(int64_t stages, int64_t stage, int64_t chunks, int64_t micro_batches,
			     f8_stage_run *runs, uint32_t *contexts) {
	assert(stages >= 1 && stage >= 0 && stage < stages && chunks >= 1 && micro_batches >= 1 &&
	       micro_batches % stages == 0);
	int64_t total = micro_batches * chunks;
	int64_t warmup = (stages - stage - 1) * 2 + (chunks - 1) * stages;
	warmup = micro_batches == stages || warmup > total ? total : warmup;
	int64_t n = 0, forwards = 0, backwards = 0;
	for (; forwards < warmup; forwards++)
		runs[n++] = interleaved_run(stages, chunks, forwards, false);
	for (; forwards < total; forwards++, backwards++) {
		runs[n++] = interleaved_run(stages, chunks, forwards, false);
		runs[n++] = interleaved_run(stages, chunks, backwards, true);
	}
	for (; backwards < total; backwards++)
		runs[n++] = interleaved_run(stages, chunks, backwards, true);
	// Contexts by first fit: a micro-batch takes the lowest free one at its chunk 0 forward and
	// gives it back after its chunk 0 backward. More than 64 in flight: *contexts says 65.
	uint64_t busy = 0;
	uint32_t used = 0, held[64] = {0};
	for (int64_t r = 0; r < n && used <= 64; r++) {
		uint32_t *slot = &held[runs[r].micro_batch % 64];
		if (!runs[r].backward && runs[r].chunk == 0) {
			uint32_t c = 0;
			while (c < 64 && (busy >> c & 1))
				c++;
			used = c + 1 > used ? c + 1 : used;
			if (c == 64)
				break;
			busy |= 1ull << c;
			*slot = c;
		}
		runs[r].context = *slot;
		if (runs[r].backward && runs[r].chunk == 0)
			busy &= ~(1ull << *slot);
	}
	*contexts = used;
}
