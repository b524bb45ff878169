/*
 * Pipeline parallelism's 1F1B order of one stage's runs.
 */
#include "runtime/pipeline_schedule.h" // f8_pipeline_1f1b

#include <assert.h> // assert

uint32_t f8_pipeline_1f1b_contexts(int64_t stages, int64_t stage, int64_t micro_batches) {
	assert(stages >= 1 && stage >= 0 && stage < stages && micro_batches >= 1);
	int64_t in_flight = stages - stage;
	return (uint32_t)(in_flight < micro_batches ? in_flight : micro_batches);
}

void f8_pipeline_1f1b(int64_t stages, int64_t stage, int64_t micro_batches,
		      f8_stage_run *runs, uint32_t *contexts) {
	int64_t m = micro_batches, after = stages - stage - 1;
	int64_t warmup = after < m ? after : m;
	int64_t in_flight = f8_pipeline_1f1b_contexts(stages, stage, m);
	int64_t n = 0, forwards = 0, backwards = 0;
	// A micro-batch's context is its number modulo the micro-batches in flight: micro-batch
	// i + in_flight's forward comes after micro-batch i's backward.
	for (; forwards < warmup; forwards++)
		runs[n++] = (f8_stage_run){false, forwards, (uint32_t)(forwards % in_flight)};
	for (; forwards < m; forwards++, backwards++) {
		runs[n++] = (f8_stage_run){false, forwards, (uint32_t)(forwards % in_flight)};
		runs[n++] = (f8_stage_run){true, backwards, (uint32_t)(backwards % in_flight)};
	}
	for (; backwards < m; backwards++)
		runs[n++] = (f8_stage_run){true, backwards, (uint32_t)(backwards % in_flight)};
	*contexts = (uint32_t)in_flight;
}
