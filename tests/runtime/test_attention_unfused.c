/*
 * f32 attention decomposed for a GPU target (passes/attention_unfused.h) trains as the
 * Attention op does: gpt-tiny (multi-head) and llama-tiny (grouped-query: 4 query heads over
 * 2 kv heads) compiled without FP8 for cpu (Attention and AttentionGrad, the reference
 * kernels) and for sm_90 (batched MatMuls, Softmax and their backward, autodiff's), each run
 * for two steps on the CPU backend with its generated kernels: the same loss and gradient norm
 * within f32 rounding. The sm_90 plan has no Attention node and carries the decision's reason;
 * the cpu plan keeps its Attentions (gpt-tiny's as AttentionPacked, the attention-layout pass's).
 * Usage: test_attention_unfused MODELS_FOLDER WORK_FOLDER
 */
#define _POSIX_C_SOURCE 200809L // mkdtemp

#include <math.h>   // fabs, isfinite
#include <stdio.h>  // printf, snprintf, fopen
#include <stdlib.h> // mkdtemp
#include <string.h> // memset, strstr

#include "codegen/target.h"      // f8_codegen_target_table
#include "runtime/cpu/backend.h" // f8_cpu_backend_create
#include "runtime/train.h"       // f8_train_run, f8_train_config
#include "tools/compile.h"       // f8_tool_compile_training
#include "tests/runtime/test_tokens.h" // test_write_word_tokens
#include "tests/test_support.h"  // CHECK, test_finish

enum { STEPS = 2 };

typedef struct heard {
	double losses[STEPS + 1], grad_norms[STEPS + 1]; // by iteration
	int steps;
} heard;

static void listen(const f8_train_progress *progress, void *user) {
	heard *h = user;
	if (progress->event != F8_TRAIN_EVENT_STEP || progress->iteration > STEPS)
		return;
	h->losses[progress->iteration] = progress->loss;
	h->grad_norms[progress->iteration] = progress->grad_norm;
	h->steps++;
}

/* An llm.c token file of a few byte-words repeated: learnable by gpt-tiny. */
static bool write_tokens(const char *path) {
	static const char *const words[4] = {"soft ", "max ", "keys ", "values "};
	return test_write_word_tokens(path, words, 4, 8000, 99);
}

/* The step's nodes of `op`, and whether a Softmax output carries the decision's reason. */
static uint32_t count_op(const f8_graph *graph, f8_op op, bool *reasoned) {
	uint32_t n = 0;
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		if (node->op != op)
			continue;
		n++;
		const char *reason = graph->values[node->outputs[0]].precision.reason;
		if (reasoned && reason && strstr(reason, "cuDNN has no f32 fused attention"))
			*reasoned = true;
	}
	return n;
}

/* Compiles `model`'s step for `chip` without FP8 and trains STEPS steps of it. */
static bool train(const char *model, const char *data, f8_target chip, heard *h) {
	memset(h, 0, sizeof *h);
	f8_train_config c = {.model = model, .data = data, .data_format = F8_TOKEN_FORMAT_AUTO,
			     .split = {9, 1}, .n_split = 2, .micro_batch_size = 2,
			     .global_batch_size = 2, .seq_length = 16, .train_iters = STEPS,
			     .seed = 11, .log_interval = 1};
	f8_tool_compile_options compile = {.model = model,
					   .optimizer = f8_training_options_default(),
					   .target = f8_codegen_target_table(chip)};
	compile.optimizer.lr = 3e-3;
	f8_training_options optimizer = f8_tool_optimizer(&compile, &c);
	c.schedule = f8_tool_schedule(&optimizer);
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_graph *step = NULL;
	f8_status status = f8_cpu_backend_create(F8_CPU_KERNELS_GENERATED, &c.backend, &diag);
	if (!status)
		status = f8_tool_compile_training(&compile, &c, &step, &diag);
	if (!status) {
		bool reasoned = false;
		// gpt-tiny's cpu plan holds its attention packed (passes/attention_layout.h).
		uint32_t attention = count_op(step, F8_OP_ATTENTION, NULL) +
				     count_op(step, F8_OP_ATTENTION_PACKED, NULL);
		uint32_t grads = count_op(step, F8_OP_ATTENTION_GRAD, NULL) +
				 count_op(step, F8_OP_ATTENTION_PACKED_GRAD, NULL);
		uint32_t softmax = count_op(step, F8_OP_SOFTMAX, &reasoned);
		printf("%s for %s: %u Attention, %u AttentionGrad, %u Softmax%s\n", model,
		       f8_target_name(chip), attention, grads, softmax,
		       reasoned ? " (with the reason)" : "");
		if (chip == F8_TARGET_CPU)
			CHECK(attention > 0 && grads == attention && softmax == 0);
		else
			CHECK(attention == 0 && grads == 0 && softmax > 0 && reasoned &&
			      count_op(step, F8_OP_SOFTMAX_GRAD, NULL) == softmax);
	}
	c.graph = step;
	if (!status)
		status = f8_train_run(&c, listen, h, &diag);
	f8_backend_destroy(c.backend);
	f8_graph_destroy(step);
	if (status)
		f8_diag_print(&diag, stdout);
	return status == F8_OK && h->steps == STEPS;
}

static double relative(double a, double b) {
	return fabs(a - b) / (fabs(b) > 0 ? fabs(b) : 1);
}

static void test_model(const char *models, const char *name, const char *data) {
	char model[2200];
	snprintf(model, sizeof model, "%s/%s", models, name);
	heard fused, unfused;
	bool ok = train(model, data, F8_TARGET_CPU, &fused);
	ok &= train(model, data, F8_TARGET_SM_90, &unfused);
	CHECK(ok);
	for (int i = 1; ok && i <= STEPS; i++) {
		double loss = relative(unfused.losses[i], fused.losses[i]);
		double norm = relative(unfused.grad_norms[i], fused.grad_norms[i]);
		printf("  step %d: loss %.9g (cpu) %.9g (sm_90), relative %.2g; grad norm %.9g, "
		       "%.9g, relative %.2g\n", i, fused.losses[i], unfused.losses[i], loss,
		       fused.grad_norms[i], unfused.grad_norms[i], norm);
		CHECK(isfinite(unfused.losses[i]) && isfinite(unfused.grad_norms[i]));
		// f32 rounding of the scores and probabilities, which the Attention op keeps in
		// double, amplified by a step of AdamW at the second step.
		CHECK(loss <= 1e-5 && norm <= 1e-4);
	}
}

int main(int argc, char **argv) {
	if (argc != 3) {
		printf("usage: test_attention_unfused MODELS_FOLDER WORK_FOLDER\n");
		return 2;
	}
	char work[2048];
	snprintf(work, sizeof work, "%s/f8c-attention-unfused-XXXXXX", argv[2]);
	if (!mkdtemp(work)) {
		printf("cannot make a folder in %s\n", argv[2]);
		return 1;
	}
	char data[2200];
	snprintf(data, sizeof data, "%s/tokens.bin", work);
	CHECK(write_tokens(data));
	test_model(argv[1], "gpt-tiny.json", data);
	test_model(argv[1], "llama-tiny.json", data);
	return test_finish();
}
