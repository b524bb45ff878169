/*
 * The training loop with FP8 (runtime/train.c with f8_train_config.fp8), on gpt-tiny and a
 * token file of repeated random words written here:
 *   (a) every recipe (delayed, current, rowwise, block, mxfp8) trains: finite losses, and the
 *       JSONL step records carry fp8_nonfinite_amax (0 here) when there are scaling tables;
 *   (b) evaluation leaves the FP8 state alone: a run that evaluates after every step logs the
 *       same training losses, bit for bit, as one that never evaluates;
 *   (c) resume with FP8 is bit-exact: 4 steps straight against 2 saved, then 2 resumed; the
 *       checkpoint holds the scaling tables (scale, amax_history, nonfinite) and no weight
 *       cache;
 *   (d) the generated kernels (the default) train as the reference kernels do;
 *   (e) so they do under --bf16 (passes/bf16.h), with FP8 and without, within BF16's rounding:
 *       each BF16 store may round the other way where the generated f32 arithmetic and the
 *       reference's double fall on either side of a BF16 rounding boundary; and the --bf16
 *       run's losses stay close to the f32 run's.
 * Usage: test_train_fp8 MODEL.json WORK_FOLDER
 */
#define _POSIX_C_SOURCE 200809L // mkdtemp

#include <math.h>   // isfinite, fabs
#include <stdio.h>  // printf, snprintf, fopen
#include <stdlib.h> // mkdtemp, free
#include <string.h> // strstr, memset

#include "passes/fp8_cast.h"     // F8_FP8_TABLE_*
#include "passes/precision.h"    // f8_fp8_options, f8_fp8_options_default
#include "runtime/safetensors.h" // f8_safetensors_open, f8_safetensors_find
#include "runtime/cpu/backend.h" // f8_cpu_backend_create, f8_cpu_backend_cache_kernels
#include "runtime/train.h"       // f8_train_run, f8_train_config
#include "tools/compile.h"       // f8_tool_compile_training
#include "tools/tool_options.h"  // f8_tool_kernel_cache
#include "tests/runtime/test_tokens.h" // test_write_word_tokens
#include "tests/test_support.h"  // CHECK, test_finish, test_read_file

enum { MAX_STEPS = 8 };

/* What the callback heard: each step's loss. */
typedef struct heard {
	double losses[MAX_STEPS + 1]; // by iteration
	int64_t nonfinite;
	int steps;
	f8_executor_memory memory; // at the end
	uint64_t peak_bytes;       // the backend's, at the end
} heard;

static void listen(const f8_train_progress *progress, void *user) {
	heard *h = user;
	if (progress->event == F8_TRAIN_EVENT_END) {
		h->memory = progress->memory;
		h->peak_bytes = progress->peak_bytes;
	}
	if (progress->event != F8_TRAIN_EVENT_STEP || progress->iteration > MAX_STEPS)
		return;
	h->losses[progress->iteration] = progress->loss;
	h->nonfinite = progress->fp8_nonfinite_amax;
	h->steps++;
}

/* An llm.c token file of a few byte-words repeated: learnable by gpt-tiny. */
static bool write_tokens(const char *path) {
	static const char *const words[5] = {"fp8 ", "scales ", "amax ", "history ", "cast "};
	return test_write_word_tokens(path, words, 5, 20000, 12345);
}

/* A run and what its step is compiled with. */
typedef struct setup {
	f8_train_config run;
	f8_tool_compile_options compile;
} setup;

static setup config_for(const char *model, const char *data, int64_t iters) {
	setup c = {.run = {.model = model, .data = data, .data_format = F8_TOKEN_FORMAT_AUTO,
			   .split = {9, 1}, .n_split = 2, .micro_batch_size = 2,
			   .global_batch_size = 4, .seq_length = 16, .train_iters = iters,
			   .seed = 7, .log_interval = 1},
		   .compile = {.model = model, .optimizer = f8_training_options_default()}};
	c.compile.optimizer.lr = 3e-3;
	return c;
}

/* How the runs' CPU backends run the fused groups (test_generated_kernels switches it). */
static f8_cpu_kernels kernels = F8_CPU_KERNELS_GENERATED;

/* Compiles the step as f8c train does, and trains it. */
static bool train(const setup *config, heard *h) {
	memset(h, 0, sizeof *h);
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_train_config c = config->run;
	f8_training_options optimizer = f8_tool_optimizer(&config->compile, &c);
	c.schedule = f8_tool_schedule(&optimizer);
	f8_graph *step = NULL;
	char cache[4096];
	f8_status status = f8_cpu_backend_create(kernels, &c.backend, &diag);
	if (!status)
		status = f8_cpu_backend_cache_kernels(
			c.backend, f8_tool_kernel_cache(cache, sizeof cache), &diag);
	if (!status)
		status = f8_tool_compile_training(&config->compile, &c, &step, &diag);
	c.graph = step;
	if (!status)
		status = f8_train_run(&c, listen, h, &diag);
	f8_backend_destroy(c.backend);
	f8_graph_destroy(step);
	if (status)
		f8_diag_print(&diag, stdout);
	return status == F8_OK;
}

static f8_fp8_options options_for(f8_recipe recipe) {
	f8_fp8_options fp8 = f8_fp8_options_default();
	fp8.recipe = recipe;
	fp8.amax_history_len = 4;
	fp8.target = F8_TARGET_CPU; // every recipe, no shape rules
	return fp8;
}

static void test_recipes(const char *model, const char *data, const char *work) {
	static const f8_recipe recipes[] = {F8_RECIPE_DELAYED, F8_RECIPE_CURRENT, F8_RECIPE_ROWWISE,
					    F8_RECIPE_BLOCK, F8_RECIPE_MXFP8};
	for (size_t i = 0; i < sizeof recipes / sizeof recipes[0]; i++) {
		f8_fp8_options fp8 = options_for(recipes[i]);
		char metrics[2200];
		snprintf(metrics, sizeof metrics, "%s/%s.jsonl", work, f8_recipe_name(recipes[i]));
		setup c = config_for(model, data, 2);
		c.compile.fp8 = &fp8;
		c.run.metrics = metrics;
		heard h;
		bool ok = train(&c, &h);
		printf("(a) %s: losses %.6f, %.6f\n", f8_recipe_name(recipes[i]), h.losses[1],
		       h.losses[2]);
		CHECK(ok && h.steps == 2 && isfinite(h.losses[1]) && isfinite(h.losses[2]));
		size_t len = 0;
		char *text = test_read_file(metrics, &len);
		bool delayed = recipes[i] == F8_RECIPE_DELAYED;
		// Only delayed scaling keeps tables; the other recipes find their scales in the cast.
		CHECK(text && (strstr(text, "\"fp8_nonfinite_amax\": 0,") != NULL) == delayed);
		CHECK(h.nonfinite == (delayed ? 0 : -1));
		free(text);
	}
}

/* (b): evaluations after every step change no training loss. */
static void test_evaluation_frozen(const char *model, const char *data) {
	f8_fp8_options fp8 = options_for(F8_RECIPE_DELAYED);
	setup c = config_for(model, data, 3);
	c.compile.fp8 = &fp8;
	heard plain, evaluated;
	bool ok = train(&c, &plain);
	c.run.eval_interval = 1, c.run.eval_iters = 2;
	ok &= train(&c, &evaluated);
	CHECK(ok && plain.steps == 3 && evaluated.steps == 3);
	for (int i = 1; i <= 3; i++)
		CHECK(plain.losses[i] == evaluated.losses[i]);
	printf("(b) with and without evaluation: %.9g, %.9g at step 3\n", plain.losses[3],
	       evaluated.losses[3]);
}

/* (c): resume, and what the checkpoint holds. */
static void test_resume(const char *model, const char *data, const char *work) {
	f8_fp8_options fp8 = options_for(F8_RECIPE_DELAYED);
	char folder[2200];
	snprintf(folder, sizeof folder, "%s/ckpt", work);
	setup c = config_for(model, data, 4);
	c.compile.fp8 = &fp8;
	c.compile.optimizer.decay_iters = 4; // the schedule of the whole run, in each part of it
	heard straight, first, second;
	bool ok = train(&c, &straight);
	c.run.train_iters = 2, c.run.save = folder;
	ok &= train(&c, &first);
	c.run.train_iters = 4, c.run.save = NULL, c.run.load = folder;
	ok &= train(&c, &second);
	CHECK(ok && straight.steps == 4 && first.steps == 2 && second.steps == 2);
	CHECK(straight.losses[1] == first.losses[1] && straight.losses[2] == first.losses[2]);
	CHECK(straight.losses[3] == second.losses[3] && straight.losses[4] == second.losses[4]);
	printf("(c) step 4: straight %.9g, resumed %.9g\n", straight.losses[4], second.losses[4]);
	char path[2400];
	snprintf(path, sizeof path, "%s/iter_0000002/optimizer.safetensors", folder);
	f8_safetensors *file = NULL;
	f8_diag diag;
	CHECK(f8_safetensors_open(path, &file, &diag) == F8_OK);
	static const char *const tables[3] = {F8_FP8_TABLE_WEIGHTS, F8_FP8_TABLE_ACTIVATIONS,
					      F8_FP8_TABLE_GRADIENTS};
	static const char *const parts[3] = {"scale", "amax_history", "nonfinite"};
	for (int t = 0; file && t < 3; t++)
		for (int p = 0; p < 3; p++) {
			char name[96];
			snprintf(name, sizeof name, "%s.%s", tables[t], parts[p]);
			if (!f8_safetensors_find(file, name))
				printf("  the checkpoint lacks %s\n", name);
			CHECK(f8_safetensors_find(file, name) != NULL);
		}
	f8_safetensors_close(file);
	// No weight cache (%<param>.fp8, .fp8_t, ...) in either file: the cast phase remakes them.
	for (int which = 0; which < 2; which++) {
		snprintf(path, sizeof path, "%s/iter_0000002/%s.safetensors", folder,
			 which ? "optimizer" : "weights");
		CHECK(f8_safetensors_open(path, &file, &diag) == F8_OK);
		for (size_t i = 0; file && i < f8_safetensors_count(file); i++)
			CHECK(!strstr(f8_safetensors_name(file, i), ".fp8"));
		f8_safetensors_close(file);
	}
}

/* (d): the fused groups' generated kernels (the default) against every node through its
 * reference kernel (--kernels reference), 4 steps, with FP8 and without: the losses agree to
 * f32 rounding amplified by 4 steps of training (and, with FP8, by an FP8 code that rounds the
 * other way where the generated f32 arithmetic and the reference's double land on either side
 * of a rounding boundary). */
static void test_generated_kernels(const char *model, const char *data) {
	f8_fp8_options fp8 = options_for(F8_RECIPE_DELAYED);
	for (int with_fp8 = 0; with_fp8 < 2; with_fp8++) {
		setup c = config_for(model, data, 4);
		c.compile.fp8 = with_fp8 ? &fp8 : NULL;
		heard generated, reference;
		bool ok = train(&c, &generated);
		kernels = F8_CPU_KERNELS_REFERENCE;
		ok &= train(&c, &reference);
		kernels = F8_CPU_KERNELS_GENERATED;
		CHECK(ok && generated.steps == 4 && reference.steps == 4);
		// The generated kernels run the slab plan: the backend allocated the plan's slab and
		// the leaves, nothing else (the reference kernels' groups need their inner values).
		const f8_executor_memory *m = &generated.memory;
		CHECK(m->planned && m->slab_bytes > 0 && m->other_bytes == 0);
		CHECK(generated.peak_bytes == m->slab_bytes + m->leaf_bytes);
		CHECK(reference.peak_bytes >= reference.memory.slab_bytes + reference.memory.leaf_bytes);
		printf("(d) %s: slab %llu B + leaves %llu B; peak %llu B (generated), %llu B (reference)\n",
		       with_fp8 ? "FP8" : "F32", (unsigned long long)m->slab_bytes,
		       (unsigned long long)m->leaf_bytes, (unsigned long long)generated.peak_bytes,
		       (unsigned long long)reference.peak_bytes);
		double worst = 0;
		for (int i = 1; i <= 4; i++) {
			double difference = fabs(generated.losses[i] - reference.losses[i]);
			worst = difference / reference.losses[i] > worst
					? difference / reference.losses[i] : worst;
		}
		printf("(d) %s: step 4 generated %.9g, reference %.9g; worst relative difference "
		       "%.2g\n", with_fp8 ? "FP8" : "F32", generated.losses[4], reference.losses[4],
		       worst);
		CHECK(worst <= (with_fp8 ? 1e-3 : 1e-5));
	}
}

/* (e): --bf16's step, generated kernels against the reference ones, and against f32. */
static void test_bf16(const char *model, const char *data) {
	f8_fp8_options fp8 = options_for(F8_RECIPE_DELAYED);
	setup c = config_for(model, data, 4);
	heard f32;
	bool ok = train(&c, &f32);
	c.compile.bf16 = true;
	for (int with_fp8 = 0; with_fp8 < 2; with_fp8++) {
		c.compile.fp8 = with_fp8 ? &fp8 : NULL;
		heard generated, reference;
		ok &= train(&c, &generated);
		kernels = F8_CPU_KERNELS_REFERENCE;
		ok &= train(&c, &reference);
		kernels = F8_CPU_KERNELS_GENERATED;
		CHECK(ok && generated.steps == 4 && reference.steps == 4);
		double worst = 0, from_f32 = 0;
		for (int i = 1; i <= 4; i++) {
			double difference = fabs(generated.losses[i] - reference.losses[i]);
			double off = fabs(reference.losses[i] - f32.losses[i]) / f32.losses[i];
			worst = difference / reference.losses[i] > worst
					? difference / reference.losses[i] : worst;
			from_f32 = off > from_f32 ? off : from_f32;
		}
		printf("(e) --bf16%s: step 4 generated %.9g, reference %.9g, f32 %.9g; worst relative "
		       "difference %.2g, from f32 %.2g\n", with_fp8 ? " with FP8" : "",
		       generated.losses[4], reference.losses[4], f32.losses[4], worst, from_f32);
		CHECK(worst <= 2e-3);
		CHECK(from_f32 <= 2e-2);
		CHECK(generated.losses[4] != f32.losses[4]); // BF16 really ran
	}
}

int main(int argc, char **argv) {
	if (argc != 3) {
		printf("usage: test_train_fp8 MODEL.json WORK_FOLDER\n");
		return 2;
	}
	char work[2048];
	snprintf(work, sizeof work, "%s/f8c-train-fp8-XXXXXX", argv[2]);
	if (!mkdtemp(work)) {
		printf("cannot make a folder in %s\n", argv[2]);
		return 1;
	}
	char data[2200];
	snprintf(data, sizeof data, "%s/tokens.bin", work);
	CHECK(write_tokens(data));
	test_recipes(argv[1], data, work);
	test_evaluation_frozen(argv[1], data);
	test_resume(argv[1], data, work);
	test_generated_kernels(argv[1], data);
	test_bf16(argv[1], data);
	return test_finish();
}
