/*
 * The training loop on a backend that matches messages in posting order (runtime/backend.h,
 * ordered_messages: the CUDA backend's NCCL), here a CPU backend that says it does: under
 * mpirun with 2 ranks, gpt-tiny in 2 pipeline stages (runtime/pipeline_messages.h)
 *   (a) the interleaved schedule (2 model chunks a stage) over 4 micro-batches is refused on
 *       every rank before the model is made (the backend never allocated a byte), the message
 *       naming the layout and the stages that would wait on each other, the hint the layouts
 *       that run (--global-batch-size 2, 1F1B);
 *   (b) over 2 micro-batches (every forward warm-up) it trains; over 3, not a multiple of the
 *       stages, it is refused for that, before the check of (a) and the model;
 *   (c) so does 1F1B over 4.
 * The CPU backend's MPI matches by tag, so (b) and (c) run as they would anyway: what is held
 * here is which layouts the check lets through, and where the refusal comes.
 * Usage: test_pipeline_ordered MODEL.json WORK_FOLDER (one process: skipped)
 */
#include <math.h>   // isfinite
#include <stdio.h>  // printf, snprintf
#include <string.h> // strstr

#include "runtime/cpu/backend.h"        // f8_cpu_backend_create_distributed
#include "runtime/train.h"              // f8_train_run, f8_train_config
#include "tools/compile.h"              // f8_tool_compile_training
#include "tests/distributed/test_ranks.h" // test_ranks_start
#include "tests/runtime/test_tokens.h"  // test_write_word_tokens
#include "tests/test_support.h"         // CHECK, test_finish

/* The losses the leader heard. */
typedef struct heard {
	int steps;
	double loss;
} heard;

static void listen(const f8_train_progress *progress, void *user) {
	heard *h = user;
	if (progress->event == F8_TRAIN_EVENT_STEP)
		h->steps++, h->loss = progress->loss;
}

/* The CPU backend's interface, but matching messages in posting order. */
static f8_backend_interface ordered;

/* One training step of gpt-tiny under PP 2 over `micro_batches` (micro-batches of 1; the step
 * compiled for `compiled` of them, which the shard pass checks), interleaved with
 * `virtual_layers` layers a chunk (0: 1F1B); its status, the diagnostic into *diag, what the
 * leader heard into *h and the most bytes the backend held into *peak. */
static f8_status train(const char *model, const char *data, f8_dist *dist,
		       const f8_dist_launch *launch, int64_t micro_batches, int64_t compiled,
		       int64_t virtual_layers, heard *h, uint64_t *peak, f8_diag *diag) {
	*h = (heard){0};
	f8_diag_clear(diag);
	f8_parallel_options parallel = {.world = launch->world, .pipeline = 2,
					.virtual_stage_layers = virtual_layers,
					.stage = launch->rank, .micro_batch = 1,
					.global_batch = compiled};
	f8_train_config run = {.model = model, .data = data, .data_format = F8_TOKEN_FORMAT_AUTO,
			       .split = {9, 1}, .n_split = 2, .micro_batch_size = 1,
			       .global_batch_size = micro_batches, .seq_length = 16,
			       .train_iters = 1, .seed = 7, .log_interval = 1, .dist = dist};
	f8_tool_compile_options compile = {.model = model,
					   .optimizer = f8_training_options_default(),
					   .parallel = &parallel};
	f8_training_options optimizer = f8_tool_optimizer(&compile, &run);
	run.schedule = f8_tool_schedule(&optimizer);
	f8_graph *step = NULL;
	f8_status status = f8_cpu_backend_create_distributed(F8_CPU_KERNELS_REFERENCE, dist,
							     &run.backend, diag);
	if (!status) {
		ordered = *run.backend->interface;
		ordered.ordered_messages = true;
		run.backend->interface = &ordered;
		status = f8_tool_compile_training(&compile, &run, &step, diag);
	}
	run.graph = step;
	if (!status)
		status = f8_train_run(&run, listen, h, diag);
	*peak = run.backend ? run.backend->peak_bytes : 0;
	f8_backend_destroy(run.backend);
	f8_graph_destroy(step);
	return status;
}

int main(int argc, char **argv) {
	if (argc != 3) {
		printf("usage: test_pipeline_ordered MODEL.json WORK_FOLDER\n");
		return 2;
	}
	f8_dist_launch launch;
	int64_t seed;
	f8_dist *dist = test_ranks_start(F8_MESH_AXIS_PP, &launch, &seed);
	CHECK(dist != NULL);
	if (dist && launch.world != 2) {
		printf("SKIPPED: 2 ranks wanted (mpirun -np 2), %lld started\n",
		       (long long)launch.world);
		f8_dist_destroy(dist);
		return 77;
	}
	char data[4096];
	static const char *const words[4] = {"stage ", "chunk ", "send ", "receive "};
	snprintf(data, sizeof data, "%s/pipeline_ordered_tokens_%lld.bin", argv[2],
		 (long long)launch.rank); // the same tokens on each rank, a file each
	CHECK(dist && test_write_word_tokens(data, words, 4, 4000, 99));
	f8_diag diag;
	heard h;
	uint64_t peak;
	if (dist) {
		f8_status status = train(argv[1], data, dist, &launch, 4, 4, 1, &h, &peak, &diag);
		CHECK(status == F8_ERR_UNSUPPORTED && h.steps == 0 && peak == 0);
		CHECK(strstr(diag.message, "the interleaved schedule of 2 pipeline stages of 2 model "
					   "chunks each over 4 micro-batches: point-to-point "
					   "messages matched in order and posted in the stages' "
					   "groups deadlock (2 of 2 stages stuck): stage 0 waits for "
					   "stage 1") != NULL);
		CHECK(strstr(diag.hint, "each send in one group with the stage's next receive") &&
		      strstr(diag.hint, "What runs: --global-batch-size 2 (PP micro-batches a "
					"data-parallel rank), the 1F1B schedule") != NULL);
		printf("rank %lld, (a) interleaved over 4: %s\nHINT: %s\n", (long long)launch.rank,
		       diag.message, diag.hint);
		// Compiled for 2, run over 3: the training loop's own check, before the message
		// check's (which takes the micro-batches in groups of the stages) and the model.
		status = train(argv[1], data, dist, &launch, 3, 2, 1, &h, &peak, &diag);
		CHECK(status == F8_ERR_ARGUMENT && h.steps == 0 && peak == 0 &&
		      strstr(diag.message, "groups of the 2 pipeline stages, and a step has 3") != NULL);
		printf("rank %lld, interleaved over 3: %s\n", (long long)launch.rank, diag.message);
		status = train(argv[1], data, dist, &launch, 2, 2, 1, &h, &peak, &diag);
		CHECK(status == F8_OK && peak > 0 &&
		      (launch.rank > 0 || (h.steps == 1 && isfinite(h.loss))));
		if (status)
			f8_diag_print(&diag, stdout);
		status = train(argv[1], data, dist, &launch, 4, 4, 0, &h, &peak, &diag);
		CHECK(status == F8_OK && (launch.rank > 0 || (h.steps == 1 && isfinite(h.loss))));
		if (status)
			f8_diag_print(&diag, stdout);
	}
	f8_dist_destroy(dist);
	return test_finish();
}
