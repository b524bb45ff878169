/*
 * f8c's CPU training step of gpt-tiny against PyTorch (llm.c's end-to-end test): the model from
 * models/gpt-tiny.json through the pipeline, the training pass and attention-layout (the
 * attention packed as the plans run it), run by the CPU executor on
 * the parameters, tokens and labels of a dump that tests/data/make_reference_dump.py made with
 * PyTorch in float64, then compared with that dump: the logits, the loss, every parameter's
 * gradient, the gradient norm, and the parameters after one AdamW step.
 *
 * Usage: test_reference_gpt_tiny DUMP.safetensors MODEL.json
 */
#include <math.h>   // fabs, sqrt, fmax
#include <stdio.h>  // printf, tmpfile
#include <stdlib.h> // strtod, strtoll
#include <string.h> // strcmp, strlen

#include "frontend/frontend.h"    // f8_frontend_load
#include "ir/verify.h"            // f8_graph_verify
#include "passes/attention_layout.h" // f8_pass_attention_layout_run
#include "passes/pipeline.h"      // f8_pipeline_run
#include "passes/training.h"      // f8_pass_training_run, f8_training_options
#include "runtime/cpu/executor.h" // f8_cpu_executor_*
#include "runtime/safetensors.h"  // f8_safetensors_*
#include "tests/test_support.h"   // CHECK, test_finish

#define DUMP_FORMAT "f8c-reference-dump"
#define DUMP_MAGIC "20261202"
#define DUMP_VERSION "2"

/*
 * Tolerances, as relative-norm errors ||f8c - torch|| / ||torch|| per tensor. The dump is exact
 * float64 rounded once to float32; f8c stores every activation in float32 and runs its GEMMs
 * through sgemm with float32 accumulation (runtime/cpu/kernels.h), so each GEMM of depth K adds
 * a relative error of about sqrt(K) * 2^-24 (K <= 512 here: ~1.4e-6); measured on the logits:
 * 4e-7, on the loss: 0. What a wrong formula does, measured with a float64 NumPy model of the
 * same step: the erf Gelu instead of tanh moves the logits by 5e-5, LayerNorm's epsilon 1e-6
 * instead of 1e-5 by 3e-3, the attention scale 1/d instead of 1/sqrt(d) by 1e-2; a mean over
 * every label instead of the ones not ignored moves the loss by 1.4e-3.
 */
#define LOGITS_TOLERANCE 1e-5
#define LOSS_TOLERANCE 1e-5
/* Gradients: the backward adds two more GEMMs per forward one, the weight gradients summed over
 * batch * seq = 256 rows, and the attention's softmax backward subtracts nearly equal terms;
 * measured: at most 7e-7. A wrong rule (a missing 1/N, a transposed weight gradient, a term
 * dropped from LayerNorm's backward) is off by 1e-2 or more. */
#define GRAD_TOLERANCE 1e-4
/* The gradient norm is a function of the gradients: their tolerance. */
#define GRAD_NORM_TOLERANCE 1e-4
/* AdamW's first step moves each parameter by about lr * sign(g) (m / sqrt(v) = g / |g|), so the
 * updates (after - before) are compared, not the parameters. Where |g| is near Adam's epsilon
 * (1e-8) the update depends on the gradient's last bits, which float32 cannot match; those few
 * elements bound the norm error (measured: at most 1e-4), hence 1e-3. Everywhere else (|g|
 * clipped >= 1e-5, or g exactly 0) each element must match to UPDATE_ABSOLUTE * lr plus two
 * float32 ulps of the parameter: weight decay applied where torch does not (lr * wd * |p| ~ 2e-6
 * for an embedding of std 0.02) fails that, and so does a wrong epsilon, lr or clip. One step
 * cannot see beta1 and beta2: at t = 1, m / (1 - beta1) = g and v / (1 - beta2) = g^2 whatever
 * they are; the second step does (check_second_step). */
#define UPDATE_TOLERANCE 1e-3
#define UPDATE_ABSOLUTE 1e-3
#define UPDATE_SETTLED_GRAD 1e-5

/* The dump's hyperparameters and sizes, from its metadata. */
typedef struct dump_config {
	int64_t batch, seq, ignore_index;
	double lr, beta1, beta2, eps, weight_decay, clip_grad;
} dump_config;

/* Errors of a tensor against the reference. */
typedef struct errors {
	double max_abs, rel_norm;
} errors;

static errors compare(const f8_rt_tensor *got, const f8_rt_tensor *want) {
	double diff2 = 0, ref2 = 0, max_abs = 0;
	int64_t n = f8_rt_tensor_numel(want);
	for (int64_t i = 0; i < n; i++) {
		double a = f8_rt_tensor_get(got, i), b = f8_rt_tensor_get(want, i);
		diff2 += (a - b) * (a - b);
		ref2 += b * b;
		max_abs = fmax(max_abs, fabs(a - b));
	}
	return (errors){max_abs, ref2 > 0 ? sqrt(diff2 / ref2) : sqrt(diff2)};
}

static bool same_dims(const f8_rt_tensor *a, const f8_rt_tensor *b) {
	if (a->rank != b->rank)
		return false;
	for (int i = 0; i < a->rank; i++)
		if (a->dims[i] != b->dims[i])
			return false;
	return true;
}

static void print_diag(const char *what, const f8_diag *diag) {
	printf("FAIL %s:\n", what);
	f8_diag_print(diag, stdout);
}

/* Reads tensor `name` of the dump into *out; false (with a FAIL line) when it is missing. */
static bool read_dump(const f8_safetensors *dump, const char *name, f8_rt_tensor *out) {
	f8_diag diag;
	f8_diag_clear(&diag);
	if (f8_safetensors_read(dump, name, out, &diag) == F8_OK)
		return true;
	print_diag(name, &diag);
	test_failed++;
	return false;
}

static bool metadata_number(const f8_safetensors *dump, const char *key, double *out) {
	const char *text = f8_safetensors_metadata(dump, key);
	char *end = NULL;
	*out = text ? strtod(text, &end) : 0;
	if (text && end != text && *end == '\0')
		return true;
	printf("FAIL the dump's metadata has no number \"%s\" (it has \"%s\")\n", key,
	       text ? text : "nothing");
	return false;
}

/* Checks the dump's format, magic and version, then reads its configuration. A dump of another
 * format or version is refused: its tensors may not mean what this test thinks they mean. */
static bool read_config(const f8_safetensors *dump, const char *path, dump_config *config) {
	const char *keys[] = {"format", "magic", "version"};
	const char *expected[] = {DUMP_FORMAT, DUMP_MAGIC, DUMP_VERSION};
	for (int i = 0; i < 3; i++) {
		const char *found = f8_safetensors_metadata(dump, keys[i]);
		if (!found || strcmp(found, expected[i]) != 0) {
			printf("FAIL %s: metadata %s is \"%s\", expected \"%s\": not a reference "
			       "dump this test reads\nHINT: regenerate it with "
			       "tests/data/make_reference_dump.py\n", path, keys[i],
			       found ? found : "(missing)", expected[i]);
			return false;
		}
	}
	double batch = 0, seq = 0, ignore_index = 0;
	bool ok = metadata_number(dump, "batch", &batch) && metadata_number(dump, "seq", &seq) &&
		  metadata_number(dump, "ignore_index", &ignore_index) &&
		  metadata_number(dump, "lr", &config->lr) &&
		  metadata_number(dump, "beta1", &config->beta1) &&
		  metadata_number(dump, "beta2", &config->beta2) &&
		  metadata_number(dump, "eps", &config->eps) &&
		  metadata_number(dump, "weight_decay", &config->weight_decay) &&
		  metadata_number(dump, "clip_grad", &config->clip_grad);
	config->batch = (int64_t)batch, config->seq = (int64_t)seq;
	config->ignore_index = (int64_t)ignore_index;
	const char *torch = f8_safetensors_metadata(dump, "torch");
	const char *made = f8_safetensors_metadata(dump, "made");
	printf("dump %s: torch %s, made %s; batch %lld, seq %lld, lr %g, betas (%g, %g), eps %g, "
	       "weight decay %g, clip %g\n", path, torch ? torch : "?", made ? made : "?",
	       (long long)config->batch,
	       (long long)config->seq, config->lr, config->beta1, config->beta2, config->eps,
	       config->weight_decay, config->clip_grad);
	return ok;
}

/* Loads the model and compiles one training step with the dump's hyperparameters: constant lr,
 * no warm-up, one micro-batch. The training pass's report goes to `report`. */
static f8_graph *compile(const char *model, const dump_config *config, FILE *report) {
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_graph *graph = NULL;
	f8_training_options options = f8_training_options_default();
	options.lr = options.min_lr = config->lr;
	options.warmup_iters = 0;
	options.decay_style = F8_LR_DECAY_CONSTANT;
	options.beta1 = config->beta1, options.beta2 = config->beta2;
	options.epsilon = config->eps;
	options.weight_decay = config->weight_decay;
	options.clip_grad = config->clip_grad;
	options.micro_batches = 1;
	options.ignore_index = config->ignore_index;
	if (f8_frontend_load(model, NULL, &graph, &diag) ||
	    f8_pipeline_run(graph, "fuse-patterns", true, &diag) ||
	    f8_pass_training_run(graph, &options, report, &diag) ||
	    f8_pass_attention_layout_run(graph, report, &diag) || f8_graph_verify(graph, &diag)) {
		print_diag("compiling the training step", &diag);
		f8_graph_destroy(graph);
		return NULL;
	}
	// The attention as the plans run it: q, k, v read in place from the QKV output.
	uint32_t packed = 0;
	for (uint32_t i = 0; i < graph->n_order; i++)
		packed += graph->nodes[graph->order[i]].op == F8_OP_ATTENTION_PACKED_GRAD;
	printf("attention-layout: %u AttentionPackedGrad in the step\n", packed);
	CHECK(packed > 0);
	return graph;
}

/* An executor with the graph's symbols bound by name: batch and seq from the dump. */
static f8_cpu_executor *create_executor(const f8_graph *graph, const dump_config *config) {
	int64_t values[64];
	if (graph->n_symbols > 64) {
		printf("FAIL the graph has %u symbols\n", graph->n_symbols);
		return NULL;
	}
	for (uint32_t s = 0; s < graph->n_symbols; s++) {
		if (strcmp(graph->symbols[s], "batch") == 0) {
			values[s] = config->batch;
		} else if (strcmp(graph->symbols[s], "seq") == 0) {
			values[s] = config->seq;
		} else {
			printf("FAIL the training graph has a symbol %s besides batch and seq\n",
			       graph->symbols[s]);
			return NULL;
		}
	}
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_cpu_executor *executor = NULL;
	if (f8_cpu_executor_create(graph, values, &executor, &diag)) {
		print_diag("creating the executor", &diag);
		return NULL;
	}
	return executor;
}

static f8_value_id find(const f8_graph *graph, const char *name) {
	return f8_graph_find_value(graph, name, strlen(name));
}

/* Copies dump tensor `dump_name` into leaf `leaf_name`, which must have its dims. */
static bool fill_leaf(f8_cpu_executor *executor, const f8_graph *graph,
		      const f8_safetensors *dump, const char *leaf_name, const char *dump_name) {
	f8_rt_tensor *leaf = f8_cpu_executor_leaf(executor, find(graph, leaf_name));
	f8_rt_tensor source = {0};
	bool ok = leaf && read_dump(dump, dump_name, &source) && same_dims(leaf, &source);
	if (ok)
		for (int64_t i = 0; i < f8_rt_tensor_numel(&source); i++)
			f8_rt_tensor_set(leaf, i, f8_rt_tensor_get(&source, i));
	else
		printf("FAIL leaf %%%s (from %s): %s\n", leaf_name, dump_name,
		       !leaf ? "not a leaf of the training graph" : "missing or of other dims");
	f8_rt_tensor_destroy(&source);
	return ok;
}

/* Fills every parameter, the tokens and the labels; every param.* of the dump must be one of
 * the graph's parameters and the other way round. */
static bool fill_inputs(f8_cpu_executor *executor, const f8_graph *graph,
			const f8_safetensors *dump) {
	bool ok = true;
	size_t n_params = 0, n_dump = 0;
	char name[512];
	for (uint32_t i = 0; i < graph->n_inputs; i++) {
		const f8_value *value = &graph->values[graph->inputs[i]];
		if (value->role != F8_ROLE_PARAMETER)
			continue;
		snprintf(name, sizeof name, "param.%s", value->name);
		ok &= fill_leaf(executor, graph, dump, value->name, name);
		n_params++;
	}
	for (size_t i = 0; i < f8_safetensors_count(dump); i++)
		n_dump += strncmp(f8_safetensors_name(dump, i), "param.", 6) == 0;
	if (n_params != n_dump) {
		printf("FAIL the graph has %zu parameters, the dump %zu\n", n_params, n_dump);
		ok = false;
	}
	ok &= fill_leaf(executor, graph, dump, "tokens", "tokens");
	ok &= fill_leaf(executor, graph, dump, "labels", "labels");
	return ok;
}

/* Compares value `value_name` as the last run left it with dump tensor `dump_name`. */
static void check_value(const f8_cpu_executor *executor, const f8_graph *graph,
			const f8_safetensors *dump, const char *value_name, const char *dump_name,
			double tolerance) {
	const f8_rt_tensor *got = f8_cpu_executor_value(executor, find(graph, value_name));
	f8_rt_tensor want = {0};
	if (!got) {
		printf("FAIL %%%s: the run left no such value\n", value_name);
		test_failed++;
		return;
	}
	if (!read_dump(dump, dump_name, &want))
		return;
	if (!same_dims(got, &want)) {
		printf("FAIL %%%s: rank %d, the dump's %s rank %d (or other dims)\n", value_name,
		       got->rank, dump_name, want.rank);
		test_failed++;
	} else {
		errors e = compare(got, &want);
		bool ok = e.rel_norm < tolerance;
		printf("%s %-40s max abs %.3e  rel norm %.3e  (tolerance %.0e)\n",
		       ok ? "ok  " : "FAIL", value_name, e.max_abs, e.rel_norm, tolerance);
		CHECK(ok);
	}
	f8_rt_tensor_destroy(&want);
}

/* Runs fwd|bwd and compares the logits, the loss and each parameter's gradient accumulator. */
static bool check_forward_backward(f8_cpu_executor *executor, const f8_graph *graph,
				   const f8_safetensors *dump) {
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_cpu_executor_keep_all(executor, true);
	if (f8_cpu_executor_run(executor, F8_PHASE_BIT(F8_PHASE_FWD) | F8_PHASE_BIT(F8_PHASE_BWD),
				&diag)) {
		print_diag("running fwd|bwd", &diag);
		test_failed++;
		return false;
	}
	check_value(executor, graph, dump, "logits", "logits", LOGITS_TOLERANCE);
	check_value(executor, graph, dump, "loss", "loss", LOSS_TOLERANCE);
	char value_name[512], dump_name[512];
	for (uint32_t i = 0; i < graph->n_inputs; i++) {
		const f8_value *value = &graph->values[graph->inputs[i]];
		if (value->role != F8_ROLE_PARAMETER)
			continue;
		snprintf(value_name, sizeof value_name, "%s.main_grad", value->name);
		snprintf(dump_name, sizeof dump_name, "grad.%s", value->name);
		check_value(executor, graph, dump, value_name, dump_name, GRAD_TOLERANCE);
	}
	return true;
}

/* Checks one parameter's AdamW update (see UPDATE_TOLERANCE): after - before against the
 * dump's step1 - param, by norm and, where the gradient settles the update, element by
 * element. */
static void check_update(const f8_rt_tensor *after, const f8_safetensors *dump, const char *name,
			 double lr, double clip_coefficient) {
	char key[512];
	f8_rt_tensor before = {0}, want = {0}, grad = {0};
	snprintf(key, sizeof key, "param.%s", name);
	bool ok = read_dump(dump, key, &before);
	snprintf(key, sizeof key, "step1.%s", name);
	ok = ok && read_dump(dump, key, &want);
	snprintf(key, sizeof key, "grad.%s", name);
	ok = ok && read_dump(dump, key, &grad) && same_dims(after, &want);
	double diff2 = 0, ref2 = 0, max_abs = 0;
	int64_t off = 0;
	for (int64_t i = 0; ok && i < f8_rt_tensor_numel(&want); i++) {
		double p = f8_rt_tensor_get(&before, i), g = f8_rt_tensor_get(&grad, i);
		double got = f8_rt_tensor_get(after, i) - p, ref = f8_rt_tensor_get(&want, i) - p;
		double error = fabs(got - ref), ulp2 = ldexp(fmax(fabs(p), fabs(p + ref)), -22);
		diff2 += error * error, ref2 += ref * ref, max_abs = fmax(max_abs, error);
		bool settled = g == 0 || fabs(g) * clip_coefficient >= UPDATE_SETTLED_GRAD;
		off += settled && error > UPDATE_ABSOLUTE * lr + ulp2;
	}
	double rel_norm = ref2 > 0 ? sqrt(diff2 / ref2) : sqrt(diff2);
	bool pass = ok && rel_norm < UPDATE_TOLERANCE && off == 0;
	printf("%s step1 %-34s max abs %.3e  rel norm %.3e  elements off %lld\n",
	       pass ? "ok  " : "FAIL", name, max_abs, rel_norm, (long long)off);
	CHECK(pass);
	f8_rt_tensor_destroy(&before);
	f8_rt_tensor_destroy(&want);
	f8_rt_tensor_destroy(&grad);
}

/* Runs opt and compares the gradient norm, the learning rate and every updated parameter. */
static void check_optimizer(f8_cpu_executor *executor, const f8_graph *graph,
			    const f8_safetensors *dump, const dump_config *config, FILE *report) {
	f8_diag diag;
	f8_diag_clear(&diag);
	if (f8_cpu_executor_run(executor, F8_PHASE_BIT(F8_PHASE_OPT), &diag)) {
		print_diag("running opt", &diag);
		test_failed++;
		return;
	}
	check_value(executor, graph, dump, "grad_norm", "grad_norm", GRAD_NORM_TOLERANCE);
	const f8_rt_tensor *lr = f8_cpu_executor_value(executor, find(graph, "lr"));
	CHECK(lr && fabs(f8_rt_tensor_get(lr, 0) - config->lr) <= 1e-7 * config->lr);
	f8_rt_tensor norm = {0};
	if (!read_dump(dump, "grad_norm", &norm))
		return;
	double clip = fmin(1.0, config->clip_grad / (f8_rt_tensor_get(&norm, 0) + 1e-6));
	f8_rt_tensor_destroy(&norm);
	int before = test_failed;
	for (uint32_t i = 0; i < graph->n_inputs; i++) {
		const f8_value *value = &graph->values[graph->inputs[i]];
		if (value->role == F8_ROLE_PARAMETER)
			check_update(f8_cpu_executor_value(executor, graph->inputs[i]), dump,
				     value->name, config->lr, clip);
	}
	if (test_failed > before && report) {
		printf("the training pass's report, for the weight decay decisions:\n");
		rewind(report);
		for (int c; (c = fgetc(report)) != EOF;)
			putchar(c);
	}
}

/*
 * The second step, on the same batch from the parameters the first left (see
 * make_reference_dump.py): the loss and gradient norm there, then each parameter's second
 * update, f8c's after2 - after1 against the dump's step2 - step1, by norm. At step 1 Adam's
 * update is about lr * sign(g) whatever beta1 and beta2 are; at step 2 the moments mix two
 * gradients, so a wrong beta moves the update by far more than UPDATE_TOLERANCE (measured
 * 2026-12-02: beta2 0.999 for 0.95 gives at least 7e-3 on every parameter, beta1 0.8 for 0.9 at
 * least 4e-2; the right ones at most 2.1e-4). f8c's step-1 parameters differ from the dump's by the step-1 errors above,
 * which move step 2's gradient by about as much: well inside the tolerance.
 */
static void check_second_step(f8_cpu_executor *executor, const f8_graph *graph,
			      const f8_safetensors *dump) {
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_rt_tensor *after1 = calloc(graph->n_values, sizeof *after1);
	bool ok = after1 != NULL;
	for (uint32_t i = 0; ok && i < graph->n_inputs; i++) { // f8c's parameters after step 1
		f8_value_id v = graph->inputs[i];
		const f8_rt_tensor *p = f8_cpu_executor_value(executor, v);
		if (graph->values[v].role != F8_ROLE_PARAMETER)
			continue;
		ok = f8_rt_tensor_create(p->dtype, p->rank, p->dims, &after1[v], &diag) == F8_OK;
		if (ok)
			memcpy(after1[v].data, p->data, p->n_bytes);
	}
	ok = ok && f8_cpu_executor_run(executor, F8_PHASE_BIT(F8_PHASE_FWD) |
							 F8_PHASE_BIT(F8_PHASE_BWD), &diag) == F8_OK;
	if (ok)
		check_value(executor, graph, dump, "loss", "loss2", LOSS_TOLERANCE);
	ok = ok && f8_cpu_executor_run(executor, F8_PHASE_BIT(F8_PHASE_OPT), &diag) == F8_OK;
	if (!ok)
		print_diag("running the second step", &diag);
	CHECK(ok);
	if (ok)
		check_value(executor, graph, dump, "grad_norm", "grad_norm2", GRAD_NORM_TOLERANCE);
	for (uint32_t i = 0; ok && i < graph->n_inputs; i++) {
		f8_value_id v = graph->inputs[i];
		const char *name = graph->values[v].name;
		if (graph->values[v].role != F8_ROLE_PARAMETER)
			continue;
		char key[512];
		f8_rt_tensor step1 = {0}, step2 = {0};
		snprintf(key, sizeof key, "step1.%s", name);
		bool read = read_dump(dump, key, &step1);
		snprintf(key, sizeof key, "step2.%s", name);
		read = read && read_dump(dump, key, &step2);
		const f8_rt_tensor *after2 = f8_cpu_executor_value(executor, v);
		double diff2 = 0, ref2 = 0;
		for (int64_t e = 0; read && e < f8_rt_tensor_numel(&step2); e++) {
			double got = f8_rt_tensor_get(after2, e) - f8_rt_tensor_get(&after1[v], e);
			double ref = f8_rt_tensor_get(&step2, e) - f8_rt_tensor_get(&step1, e);
			diff2 += (got - ref) * (got - ref), ref2 += ref * ref;
		}
		double rel_norm = ref2 > 0 ? sqrt(diff2 / ref2) : sqrt(diff2);
		bool pass = read && rel_norm < UPDATE_TOLERANCE;
		printf("%s step2 %-34s rel norm %.3e\n", pass ? "ok  " : "FAIL", name, rel_norm);
		CHECK(pass);
		f8_rt_tensor_destroy(&step1);
		f8_rt_tensor_destroy(&step2);
	}
	for (uint32_t v = 0; after1 && v < graph->n_values; v++)
		f8_rt_tensor_destroy(&after1[v]);
	free(after1);
}

int main(int argc, char **argv) {
	if (argc != 3) {
		fprintf(stderr, "usage: %s DUMP.safetensors MODEL.json\n", argv[0]);
		return 2;
	}
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_safetensors *dump = NULL;
	if (f8_safetensors_open(argv[1], &dump, &diag)) {
		print_diag("opening the dump", &diag);
		return 1;
	}
	dump_config config = {0};
	FILE *report = tmpfile();
	f8_graph *graph = NULL;
	f8_cpu_executor *executor = NULL;
	bool ready = read_config(dump, argv[1], &config) &&
		     (graph = compile(argv[2], &config, report)) &&
		     (executor = create_executor(graph, &config)) &&
		     fill_inputs(executor, graph, dump);
	CHECK(ready);
	if (ready && check_forward_backward(executor, graph, dump)) {
		check_optimizer(executor, graph, dump, &config, report);
		check_second_step(executor, graph, dump);
	}
	f8_cpu_executor_destroy(executor);
	f8_graph_destroy(graph);
	f8_safetensors_close(dump);
	if (report)
		fclose(report);
	return test_finish();
}
