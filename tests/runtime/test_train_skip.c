/*
 * Iterations that meet a NaN or an inf (runtime/train.h): the fault is put in by the observer,
 * after a micro-batch's forward and backward, where a real one would come from the data or an
 * overflow, on gpt-tiny and a token file of random words written here:
 *   (a) an inf in a gradient accumulator: that iteration is skipped for its gradient norm, its
 *       update changes no parameter (the next iteration sees them bit for bit as before), the
 *       optimizer's step count stays, and the iterations after it train on; with the generated
 *       kernels (codegen's optimizer family) and the reference ones (AdamW's CPU kernel);
 *   (b) FP8 (delayed): a non-finite amax counted in a scaling table skips the iteration too,
 *       before opt (%found_inf), though every gradient is finite;
 *   (c) a run whose skipped iteration was saved resumes: the checkpoint records the skip, and
 *       the resumed run's losses are the uninterrupted run's, bit for bit;
 *   (d) more skips in a row than max_nonfinite_skips stop the run with an error naming the
 *       iteration, the value and the count.
 * Usage: test_train_skip MODEL.json WORK_FOLDER
 */
#define _POSIX_C_SOURCE 200809L // mkdtemp

#include <math.h>   // INFINITY, isfinite
#include <stdio.h>  // printf, snprintf, fopen
#include <stdlib.h> // mkdtemp
#include <string.h> // memcmp, memset, strcmp, strstr

#include "passes/precision.h"    // f8_fp8_options, f8_fp8_options_default
#include "runtime/cpu/backend.h" // f8_cpu_backend_create
#include "runtime/train.h"       // f8_train_run, f8_train_config
#include "tools/compile.h"       // f8_tool_compile_training
#include "tests/runtime/test_tokens.h" // test_write_word_tokens
#include "tests/test_support.h"  // CHECK, test_finish

enum { MAX_STEPS = 12 };

/* What the run did: the callback's steps and skips, the observer's view of one parameter. */
typedef struct watch {
	int64_t inject_from, inject_to; // the iterations whose fault the observer puts in
	bool amax;                      // the fault: a non-finite amax count, not an inf gradient
	double losses[MAX_STEPS + 1];   // STEP, by iteration
	const char *skipped_for[MAX_STEPS + 1];
	int64_t skipped_iters;          // at the end
	f8_rt_tensor weights[MAX_STEPS + 1]; // %layers.0.mlp.fc1.weight as iteration i began
	double steps_taken[MAX_STEPS + 1];   // %iteration as iteration i began
} watch;

static void listen(const f8_train_progress *p, void *user) {
	watch *w = user;
	if (p->iteration > MAX_STEPS)
		return;
	if (p->event == F8_TRAIN_EVENT_STEP)
		w->losses[p->iteration] = p->loss;
	if (p->event == F8_TRAIN_EVENT_SKIP)
		w->skipped_for[p->iteration] = p->skipped_for;
	if (p->event == F8_TRAIN_EVENT_END)
		w->skipped_iters = p->skipped_iters;
}

static f8_value_id value_named(const f8_graph *graph, const char *name) {
	return f8_graph_find_value(graph, name, strlen(name));
}

/* Records the parameter and the step count before this iteration's update; in the chosen
 * iterations puts the fault in. The executor comes const, for observers that only read: the
 * fault is the one place where a test writes where no user could. */
static f8_status observe(const f8_graph *graph, const f8_executor *executor, int64_t iteration,
			 int64_t micro_batch, void *user, f8_diag *diag) {
	watch *w = user;
	if (micro_batch != 0 || iteration > MAX_STEPS)
		return F8_OK;
	f8_status status = f8_executor_read(executor, value_named(graph, "layers.0.mlp.fc1.weight"),
					    &w->weights[iteration], diag);
	w->steps_taken[iteration] = f8_executor_read_scalar(executor, value_named(graph, "iteration"));
	if (status || iteration < w->inject_from || iteration > w->inject_to)
		return status;
	const char *target = w->amax ? "fp8.gradients.nonfinite" : "layers.1.attn.qkv.weight.main_grad";
	f8_value_id value = value_named(graph, target);
	if (value == F8_NONE)
		return f8_diag_set(diag, F8_ERR_INVALID, "the test's graph has no %%%s", target);
	f8_rt_tensor host;
	status = f8_executor_read(executor, value, &host, diag);
	if (!status) {
		f8_rt_tensor_set(&host, 0, w->amax ? f8_rt_tensor_get(&host, 0) + 1 : INFINITY);
		status = f8_executor_write((f8_executor *)executor, value, &host, diag);
	}
	f8_rt_tensor_destroy(&host);
	return status;
}

/* An llm.c token file of a few byte-words repeated: learnable by gpt-tiny. */
static bool write_tokens(const char *path) {
	static const char *const words[5] = {"loss ", "scale ", "amax ", "skip ", "inf "};
	return test_write_word_tokens(path, words, 5, 20000, 4321);
}

typedef struct setup {
	f8_train_config run;
	f8_tool_compile_options compile;
	f8_fp8_options fp8;
} setup;

static setup config_for(const char *model, const char *data, int64_t iters) {
	setup c = {.run = {.model = model, .data = data, .data_format = F8_TOKEN_FORMAT_AUTO,
			   .split = {9, 1}, .n_split = 2, .micro_batch_size = 2,
			   .global_batch_size = 4, .seq_length = 16, .train_iters = iters,
			   .seed = 11, .log_interval = 1, .max_nonfinite_skips = 3},
		   .compile = {.model = model, .optimizer = f8_training_options_default()},
		   .fp8 = f8_fp8_options_default()};
	c.compile.optimizer.lr = 3e-3;
	c.compile.optimizer.decay_iters = MAX_STEPS;
	c.fp8.amax_history_len = 4;
	c.fp8.target = F8_TARGET_CPU;
	return c;
}

/* Compiles the step as f8c train does and trains it, the observer watching; the run's status,
 * its diagnostic's message in `message`. */
/* How the runs' CPU backends run the fused groups. */
static f8_cpu_kernels kernels = F8_CPU_KERNELS_GENERATED;

static f8_status train(setup *config, watch *w, char *message, size_t size) {
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_train_config c = config->run;
	c.observe = observe, c.observe_user = w;
	f8_training_options optimizer = f8_tool_optimizer(&config->compile, &c);
	c.schedule = f8_tool_schedule(&optimizer);
	f8_graph *step = NULL;
	f8_status status = f8_cpu_backend_create(kernels, &c.backend, &diag);
	if (!status)
		status = f8_tool_compile_training(&config->compile, &c, &step, &diag);
	c.graph = step;
	if (!status)
		status = f8_train_run(&c, listen, w, &diag);
	f8_backend_destroy(c.backend);
	f8_graph_destroy(step);
	snprintf(message, size, "%s", status ? diag.message : "");
	if (status)
		f8_diag_print(&diag, stdout);
	return status;
}

static void release(watch *w) {
	for (int i = 0; i <= MAX_STEPS; i++)
		f8_rt_tensor_destroy(&w->weights[i]);
}

static bool same_bytes(const f8_rt_tensor *a, const f8_rt_tensor *b) {
	return a->data && b->data && a->n_bytes == b->n_bytes &&
	       memcmp(a->data, b->data, a->n_bytes) == 0;
}

/* (a): an inf gradient at iteration 3 of 6. */
static void test_gradient(const char *model, const char *data) {
	setup c = config_for(model, data, 6);
	watch w = {.inject_from = 3, .inject_to = 3};
	char message[1024];
	f8_status status = train(&c, &w, message, sizeof message);
	printf("(a) %s kernels: skipped for: %s; losses %.6f %.6f %.6f %.6f\n",
	       kernels == F8_CPU_KERNELS_GENERATED ? "generated" : "reference",
	       w.skipped_for[3] ? w.skipped_for[3] : "-", w.losses[2], w.losses[4], w.losses[5],
	       w.losses[6]);
	CHECK(status == F8_OK && w.skipped_iters == 1);
	CHECK(w.skipped_for[3] && strcmp(w.skipped_for[3], "gradient norm") == 0);
	for (int i = 1; i <= 6; i++)
		CHECK((i == 3) == (w.skipped_for[i] != NULL) && (i == 3 || isfinite(w.losses[i])));
	CHECK(!same_bytes(&w.weights[2], &w.weights[3]));  // iteration 2 updated the weights
	CHECK(same_bytes(&w.weights[3], &w.weights[4]));   // the skipped iteration 3 did not
	CHECK(!same_bytes(&w.weights[4], &w.weights[5]));  // and iteration 4 trains on
	CHECK(w.steps_taken[3] == 2 && w.steps_taken[4] == 2 && w.steps_taken[6] == 4);
	release(&w);
}

/* (b): FP8 delayed scaling, a non-finite amax counted at iteration 2. */
static void test_amax(const char *model, const char *data) {
	setup c = config_for(model, data, 4);
	c.fp8.recipe = F8_RECIPE_DELAYED;
	c.compile.fp8 = &c.fp8;
	watch w = {.inject_from = 2, .inject_to = 2, .amax = true};
	char message[1024];
	f8_status status = train(&c, &w, message, sizeof message);
	printf("(b) skipped for: %s\n", w.skipped_for[2] ? w.skipped_for[2] : "-");
	CHECK(status == F8_OK && w.skipped_iters == 1);
	CHECK(w.skipped_for[2] && strcmp(w.skipped_for[2], "fp8 amax") == 0);
	CHECK(same_bytes(&w.weights[2], &w.weights[3]) && !same_bytes(&w.weights[3], &w.weights[4]));
	CHECK(isfinite(w.losses[3]) && isfinite(w.losses[4]));
	release(&w);
}

/* (c): 8 iterations with a skip at 3, against 4 saved, then 4 resumed. */
static void test_resume(const char *model, const char *data, const char *work) {
	setup straight = config_for(model, data, 8);
	watch a = {.inject_from = 3, .inject_to = 3};
	char message[1024], folder[2200];
	f8_status status = train(&straight, &a, message, sizeof message);
	snprintf(folder, sizeof folder, "%s/checkpoint", work);
	setup first = config_for(model, data, 4), second = config_for(model, data, 8);
	first.run.save = folder;
	second.run.load = folder;
	watch b = {.inject_from = 3, .inject_to = 3}, c = {.inject_from = 0, .inject_to = -1};
	f8_status saved = train(&first, &b, message, sizeof message);
	f8_status resumed = saved ? saved : train(&second, &c, message, sizeof message);
	printf("(c) straight %.9f, resumed %.9f (iteration 8)\n", a.losses[8], c.losses[8]);
	CHECK(status == F8_OK && saved == F8_OK && resumed == F8_OK);
	CHECK(b.skipped_iters == 1 && c.skipped_iters == 1); // the resumed run counts the saved skip
	CHECK(c.steps_taken[5] == 3);
	for (int i = 5; i <= 8; i++)
		CHECK(a.losses[i] == c.losses[i]);
	release(&a), release(&b), release(&c);
}

/* (d): a fault in every iteration from 2 on, 3 skips allowed in a row. */
static void test_stop(const char *model, const char *data) {
	setup c = config_for(model, data, 10);
	watch w = {.inject_from = 2, .inject_to = MAX_STEPS};
	char message[1024];
	f8_status status = train(&c, &w, message, sizeof message);
	printf("(d) %s\n", message);
	CHECK(status == F8_ERR_INVALID);
	CHECK(strstr(message, "iteration 5") && strstr(message, "gradient norm") &&
	      strstr(message, "4 iterations in a row") && strstr(message, "--max-nonfinite-skips 3"));
	CHECK(w.skipped_for[5] && !w.skipped_for[6]); // the run went no further
	release(&w);
}

int main(int argc, char **argv) {
	if (argc != 3) {
		fprintf(stderr, "usage: test_train_skip MODEL.json WORK_FOLDER\n");
		return 2;
	}
	char work[2048], data[2100];
	snprintf(work, sizeof work, "%s/train_skip_XXXXXX", argv[2]);
	if (!mkdtemp(work)) {
		fprintf(stderr, "cannot make a folder in %s\n", argv[2]);
		return 2;
	}
	snprintf(data, sizeof data, "%s/tokens.bin", work);
	CHECK(write_tokens(data));
	test_gradient(argv[1], data);
	kernels = F8_CPU_KERNELS_REFERENCE;
	test_gradient(argv[1], data);
	kernels = F8_CPU_KERNELS_GENERATED;
	test_amax(argv[1], data);
	test_resume(argv[1], data, work);
	test_stop(argv[1], data);
	return test_finish();
}
