/*
 * Unit tests of the precision and fp8-cast passes on gpt-tiny's training step: every GEMM gets a
 * decision with a reason; the defaults put every Linear GEMM but the head's in FP8 (fwd, dgrad
 * and wgrad), with the formats of the options; each policy (first and last layers, exclude
 * patterns, --no-fp8-wgrad, calibration, precision-config rules) changes exactly the GEMMs it
 * names and says so in the reason; patterns and rules that match nothing are errors; what the
 * target cannot run is an error naming the GEMM, or with allow_fallback a recorded decision;
 * after fp8-cast the FP8 GEMMs are FP8Gemms, the tables have one slot per cast tensor, the
 * graph verifies; allocation failure at every allocation of both passes is reported as such.
 * Under --bf16 (passes/bf16.h): without FP8 every GEMM is recorded BF16 with its reason, the
 * parameters, their accumulators and moments stay f32 and each is read through its BF16 copy;
 * with FP8 the FP8 GEMMs write BF16 and the head's reason says BF16; allocation failure in the
 * bf16 pass is reported as such.
 *
 * usage: test_precision SOURCE_DIR
 */
#include <stdio.h>  // printf, snprintf
#include <string.h> // strcmp, strstr, strncmp, strlen

#include "frontend/frontend.h"  // f8_frontend_load
#include "ir/text.h"            // f8_text_parse
#include "ir/verify.h"          // f8_graph_verify
#include "passes/bf16.h"        // f8_pass_bf16_run
#include "passes/canonicalize.h" // f8_pass_canonicalize_run
#include "passes/fp8_cast.h"    // f8_pass_fp8_cast_run
#include "passes/pipeline.h"    // f8_pipeline_run_with
#include "passes/precision.h"   // f8_pass_precision_run, f8_fp8_options
#include "tests/test_support.h" // CHECK, test_fail_allocations_after

static const char *source_dir;

/* gpt-tiny with batch 2 and seq 128 bound, compiled through `last` with `fp8` and `bf16`;
 * NULL (with a message) on failure, the status in *status when not NULL. */
static f8_graph *compile_with(const f8_fp8_options *fp8, bool bf16, const char *last,
			      f8_status *status_out, f8_diag *diag) {
	char path[512];
	snprintf(path, sizeof path, "%s/models/gpt-tiny.json", source_dir);
	const f8_dim_binding dims[] = {{"batch", 2}, {"seq", 128}};
	f8_frontend_options options = {.dims = dims, .n_dims = 2, .seed = 1};
	f8_training_options training = f8_training_options_default();
	f8_pipeline_options compile_options = {.training = &training, .fp8 = fp8, .bf16 = bf16};
	f8_graph *graph = NULL;
	f8_diag_clear(diag);
	f8_status status = f8_frontend_load(path, &options, &graph, diag);
	if (!status)
		status = f8_pipeline_run_with(graph, last, true, &compile_options, NULL, diag);
	if (status_out)
		*status_out = status;
	if (status) {
		if (!status_out)
			f8_diag_print(diag, stdout);
		f8_graph_destroy(graph);
		return NULL;
	}
	return graph;
}

/* compile_with without --bf16. */
static f8_graph *compile(const f8_fp8_options *fp8, const char *last, f8_status *status_out,
			 f8_diag *diag) {
	return compile_with(fp8, false, last, status_out, diag);
}

/* The decision of each GEMM, by scope and kind. The batched MatMuls of f32 attention for
 * sm_90 (passes/attention_unfused.h: q k^T and p v) are left out: products of two
 * activations, always high precision (test_defaults checks them); these tests are about the
 * Linear layers' GEMMs. */
typedef struct decision {
	const char *scope;
	f8_gemm_kind kind;
	bool linear;
	bool fp8;
	f8_dtype format;
	f8_recipe recipe;
	const char *reason;
} decision;

enum { MAX_GEMMS = 128 };

static int decisions_of(const f8_graph *graph, decision *out) {
	int n = 0;
	for (uint32_t i = 0; i < graph->n_order && n < MAX_GEMMS; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		if (!(f8_op_get_info(node->op)->flags & F8_OPF_GEMM) || node->op == F8_OP_MATMUL)
			continue;
		const f8_precision *p = &graph->values[node->outputs[0]].precision;
		decision *d = &out[n++];
		d->scope = node->scope ? node->scope : "";
		d->linear = f8_gemm_kind_of(node, &d->kind);
		d->fp8 = f8_dtype_is_fp8(p->format);
		d->format = p->format;
		d->recipe = p->recipe;
		d->reason = p->reason;
	}
	return n;
}

static bool starts_with(const char *text, const char *prefix) {
	return strncmp(text, prefix, strlen(prefix)) == 0;
}

/* The defaults: 4 layers x 4 Linear x 3 GEMMs in FP8, the head's 3 GEMMs kept F32. */
static void test_defaults(void) {
	f8_fp8_options fp8 = f8_fp8_options_default();
	f8_diag diag;
	f8_graph *graph = compile(&fp8, "precision", NULL, &diag);
	CHECK(graph != NULL);
	if (!graph)
		return;
	decision d[MAX_GEMMS];
	int n = decisions_of(graph, d), n_fp8 = 0, n_head = 0, per_kind[F8_GEMM_KIND_COUNT] = {0};
	for (int i = 0; i < n; i++) {
		CHECK(d[i].reason && d[i].reason[0]);
		CHECK(d[i].linear);
		if (!d[i].fp8) {
			n_head += strcmp(d[i].scope, "head") == 0;
			CHECK(strcmp(d[i].scope, "head") == 0);
			CHECK(starts_with(d[i].reason, "kept F32: the output head"));
			CHECK(d[i].format == F8_DTYPE_F32 && d[i].recipe == F8_RECIPE_NONE);
			continue;
		}
		n_fp8++;
		per_kind[d[i].kind]++;
		CHECK(d[i].recipe == F8_RECIPE_DELAYED);
		CHECK(d[i].format == (d[i].kind == F8_GEMM_KIND_FWD ? F8_DTYPE_E4M3 : F8_DTYPE_E5M2));
		char expected[160];
		snprintf(expected, sizeof expected, "%s of %s: FP8, HYBRID -> ",
			 f8_gemm_kind_name(d[i].kind), d[i].scope);
		if (!starts_with(d[i].reason, expected))
			printf("FAIL reason \"%s\", expected it to start \"%s\"\n", d[i].reason, expected);
		CHECK(starts_with(d[i].reason, expected));
	}
	CHECK(n == 51 && n_fp8 == 48 && n_head == 3);
	// f32 attention in MatMuls for sm_90: per layer q k^T and p v, and in the backward their
	// dgrads (two each), 24 in all, each kept F32 as a product of two activations.
	uint32_t n_matmul = 0;
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		if (node->op != F8_OP_MATMUL)
			continue;
		const f8_precision *p = &graph->values[node->outputs[0]].precision;
		n_matmul++;
		CHECK(p->format == F8_DTYPE_F32 && p->reason &&
		      strstr(p->reason, "kept F32: MatMul: f8c plans FP8 for Linear layers only"));
	}
	CHECK(n_matmul == 24);
	for (int k = 0; k < F8_GEMM_KIND_COUNT; k++)
		CHECK(per_kind[k] == 16);
	f8_graph_destroy(graph);
}

/* After fp8-cast: FP8Gemms where FP8 was decided, 16 slots in each table, weight caches. */
static void test_cast(void) {
	f8_fp8_options fp8 = f8_fp8_options_default();
	f8_diag diag;
	f8_graph *graph = compile(&fp8, "fp8-cast", NULL, &diag);
	CHECK(graph != NULL);
	if (!graph)
		return;
	int n_fp8_gemms = 0, n_high = 0, n_caches = 0, n_cast_phase = 0;
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		n_fp8_gemms += node->op == F8_OP_FP8_GEMM;
		n_high += node->op == F8_OP_LINEAR || node->op == F8_OP_LINEAR_WGRAD;
		n_cast_phase += node->phase == F8_PHASE_CAST;
	}
	for (uint32_t i = 0; i < graph->n_inputs; i++)
		n_caches += graph->values[graph->inputs[i]].role == F8_ROLE_WEIGHT_CACHE;
	CHECK(n_fp8_gemms == 48 && n_high == 3);
	// 16 weights: a Quantize... no: fwd and dgrad read each, so 16 CastTransposes and one
	// ScalingUpdate; each weight caches codes, transposed codes and their two scale_invs.
	CHECK(n_cast_phase == 17);
	CHECK(n_caches == 64);
	static const char *const tables[] = {"fp8.weights.scale", "fp8.activations.scale",
					     "fp8.gradients.scale"};
	for (int t = 0; t < 3; t++) {
		f8_value_id v = f8_graph_find_value(graph, tables[t], strlen(tables[t]));
		CHECK(v != F8_NONE);
		if (v == F8_NONE)
			continue;
		const f8_type *type = &graph->values[v].type;
		CHECK(type->shape.rank == 1 && f8_dim_value(type->shape.dims[0]) == 16);
		CHECK(graph->values[v].initializer && graph->values[v].initializer->n_bytes == 64);
	}
	CHECK(f8_graph_verify(graph, &diag) == F8_OK);
	f8_graph_destroy(graph);
}

/* Finds the decision of `kind` at `scope`. */
static const decision *find(const decision *d, int n, const char *scope, f8_gemm_kind kind) {
	for (int i = 0; i < n; i++)
		if (strcmp(d[i].scope, scope) == 0 && d[i].kind == kind)
			return &d[i];
	return NULL;
}

/* The policy rules change exactly the GEMMs they name, with the rule in the reason. */
static void test_policy(void) {
	f8_fp8_options fp8 = f8_fp8_options_default();
	fp8.layers_at_start_high = 1;
	fp8.layers_at_end_high = 1;
	fp8.wgrad = false;
	const char *exclude[] = {"layers.2.mlp.*"};
	fp8.exclude = exclude;
	fp8.n_exclude = 1;
	f8_diag diag;
	f8_graph *graph = compile(&fp8, "precision", NULL, &diag);
	CHECK(graph != NULL);
	if (!graph)
		return;
	decision d[MAX_GEMMS];
	int n = decisions_of(graph, d);
	for (int i = 0; i < n; i++) {
		const decision *g = &d[i];
		bool first = starts_with(g->scope, "layers.0."), last = starts_with(g->scope, "layers.3.");
		bool excluded = starts_with(g->scope, "layers.2.mlp.");
		bool wgrad = g->kind == F8_GEMM_KIND_WGRAD; // --no-fp8-wgrad comes first
		if (first)
			CHECK(!g->fp8 && strstr(g->reason, wgrad ? "--no-fp8-wgrad" : "first 1 layer(s)"));
		else if (last)
			CHECK(!g->fp8 && strstr(g->reason, wgrad ? "--no-fp8-wgrad" : "last 1 layer(s)"));
		else if (strcmp(g->scope, "head") == 0)
			CHECK(!g->fp8);
		else if (g->kind == F8_GEMM_KIND_WGRAD)
			CHECK(!g->fp8 && strstr(g->reason, "--no-fp8-wgrad"));
		else if (excluded)
			CHECK(!g->fp8 && strstr(g->reason, "--fp8-exclude 'layers.2.mlp.*'"));
		else
			CHECK(g->fp8);
	}
	f8_graph_destroy(graph);

	const char *nothing[] = {"layers.9.*"};
	fp8 = f8_fp8_options_default();
	fp8.exclude = nothing;
	fp8.n_exclude = 1;
	f8_status status;
	graph = compile(&fp8, "precision", &status, &diag);
	CHECK(!graph && status == F8_ERR_ARGUMENT && strstr(diag.message, "matches no GEMM"));
}

/* --precision-config rules, in order; calibration by coefficient of variation. */
static void test_rules_and_calibration(void) {
	f8_fp8_options fp8 = f8_fp8_options_default();
	const f8_precision_rule rules[] = {
		{.scope = "layers.1.attn.*", .kinds = 1u << F8_GEMM_KIND_WGRAD, .fp8 = false,
		 .reason = "unstable in our runs", .where = "config.json: rule 1"},
		{.scope = "head", .fp8 = true, .recipe = F8_RECIPE_CURRENT,
		 .where = "config.json: rule 2"},
	};
	fp8.rules = rules;
	fp8.n_rules = 2;
	const f8_calibration_entry entries[] = {
		{.scope = "layers.2.mlp.fc1", .role = "dy", .amax_mean = 1e-3, .amax_std = 9e-4,
		 .amax_cv = 0.9, .max_step_ratio = 4, .steps = 20},
		{.scope = "layers.1.mlp.fc1", .role = "x", .amax_mean = 3, .amax_std = 0.3,
		 .amax_cv = 0.1, .max_step_ratio = 1.2, .steps = 20},
	};
	// Statistics are bound to their model's Linear layers: gpt-tiny's, from its training step.
	f8_diag diag;
	f8_graph *graph = compile(NULL, "training", NULL, &diag);
	uint32_t layers = 0;
	uint64_t digest = graph ? f8_calibration_digest(graph, &layers) : 0;
	CHECK(graph && layers == 17);
	f8_graph_destroy(graph);
	const f8_calibration calibration = {.entries = entries, .n_entries = 2,
					    .source = "stats.json", .model = "gpt-tiny.json",
					    .digest = digest, .layers = layers};
	fp8.calibration = &calibration;
	fp8.cv_threshold = 0.5;
	graph = compile(&fp8, "precision", NULL, &diag);
	CHECK(graph != NULL);
	if (!graph)
		return;
	decision d[MAX_GEMMS];
	int n = decisions_of(graph, d);
	const decision *g = find(d, n, "layers.1.attn.qkv", F8_GEMM_KIND_WGRAD);
	CHECK(g && !g->fp8 && strstr(g->reason, "config.json: rule 1: unstable in our runs"));
	g = find(d, n, "layers.1.attn.qkv", F8_GEMM_KIND_FWD);
	CHECK(g && g->fp8);
	g = find(d, n, "head", F8_GEMM_KIND_FWD);
	CHECK(g && g->fp8 && g->recipe == F8_RECIPE_CURRENT && strstr(g->reason, "by config.json: rule 2"));
	g = find(d, n, "layers.2.mlp.fc1", F8_GEMM_KIND_DGRAD);
	CHECK(g && !g->fp8 && strstr(g->reason, "calibration (stats.json)") &&
	      strstr(g->reason, "CV 0.9 > --fp8-cv-threshold 0.5"));
	g = find(d, n, "layers.1.mlp.fc1", F8_GEMM_KIND_FWD);
	CHECK(g && g->fp8);
	f8_graph_destroy(graph);

	const f8_calibration_entry stranger = {.scope = "decoder.9.ffn", .role = "x"};
	const f8_calibration foreign = {.entries = &stranger, .n_entries = 1, .source = "s.json",
					.digest = digest, .layers = layers};
	fp8 = f8_fp8_options_default();
	fp8.calibration = &foreign;
	fp8.cv_threshold = 0.5;
	f8_status status;
	graph = compile(&fp8, "precision", &status, &diag);
	CHECK(!graph && status == F8_ERR_ARGUMENT && strstr(diag.message, "decoder.9.ffn"));
	// Another model's statistics (its digest), though every scope matched: refused, naming it.
	f8_calibration other = calibration;
	other.model = "gpt2-124m.json";
	other.digest = digest ^ 1;
	fp8 = f8_fp8_options_default();
	fp8.calibration = &other;
	fp8.cv_threshold = 0.5;
	graph = compile(&fp8, "precision", &status, &diag);
	CHECK(!graph && status == F8_ERR_ARGUMENT && strstr(diag.message, "gpt2-124m.json") &&
	      strstr(diag.message, "not of this model"));
	const f8_precision_rule stray = {.scope = "encoder.*", .fp8 = false, .where = "c.json: rule 1"};
	fp8 = f8_fp8_options_default();
	fp8.rules = &stray;
	fp8.n_rules = 1;
	graph = compile(&fp8, "precision", &status, &diag);
	CHECK(!graph && status == F8_ERR_ARGUMENT && strstr(diag.message, "c.json: rule 1"));
}

/* MXFP8 on sm_90 is an error naming the GEMM; allowed to fall back, recorded; fine on sm_100. */
static void test_target(void) {
	f8_fp8_options fp8 = f8_fp8_options_default();
	fp8.recipe = F8_RECIPE_MXFP8;
	f8_diag diag;
	f8_status status;
	f8_graph *graph = compile(&fp8, "precision", &status, &diag);
	CHECK(!graph && status == F8_ERR_UNSUPPORTED && strstr(diag.message, "needs sm_100") &&
	      strstr(diag.hint, "--allow-fallback") && diag.node[0]);
	fp8.allow_fallback = true;
	graph = compile(&fp8, "fp8-cast", NULL, &diag);
	CHECK(graph != NULL);
	if (graph) {
		decision d[MAX_GEMMS];
		int n = decisions_of(graph, d);
		for (int i = 0; i < n; i++)
			CHECK(!d[i].fp8 && (strcmp(d[i].scope, "head") == 0 ||
					    strstr(d[i].reason, "fallback by --allow-fallback")));
		f8_graph_destroy(graph);
	}
	fp8.allow_fallback = false;
	fp8.target = F8_TARGET_SM_100;
	graph = compile(&fp8, "fp8-cast", NULL, &diag);
	CHECK(graph != NULL);
	f8_graph_destroy(graph);
	// The E4M3 format puts the gradients in E4M3 too.
	fp8 = f8_fp8_options_default();
	fp8.format = F8_FP8_FORMAT_E4M3;
	graph = compile(&fp8, "precision", NULL, &diag);
	CHECK(graph != NULL);
	if (graph) {
		decision d[MAX_GEMMS];
		const decision *g = find(d, decisions_of(graph, d), "layers.1.mlp.fc2",
					 F8_GEMM_KIND_DGRAD);
		CHECK(g && g->fp8 && g->format == F8_DTYPE_E4M3 && strstr(g->reason, "dy E4M3"));
		f8_graph_destroy(graph);
	}
	fp8.amax_history_len = 0;
	CHECK(f8_fp8_options_check(&fp8, &diag) == F8_ERR_ARGUMENT &&
	      strstr(diag.message, "--fp8-amax-history-len") && diag.hint[0]);
}

/* Hopper's shape rule on a GEMM whose K is 70. */
static void test_shapes(void) {
	static const char text[] =
		"graph g {\n"
		"  input %x : f32[64, 70]\n"
		"  param %w : f32[32, 70]\n"
		"  %y = Linear(%x, %w) scope=\"layers.0.fc\"\n"
		"  output %y\n"
		"}\n";
	f8_fp8_options fp8 = f8_fp8_options_default();
	fp8.head_fp8 = true; // the one Linear makes the graph's output: it is the head
	for (int fallback = 0; fallback < 2; fallback++) {
		f8_diag diag;
		f8_diag_clear(&diag);
		f8_graph *graph = NULL;
		f8_status status = f8_text_parse(text, strlen(text), "shape.f8t", &graph, &diag);
		if (!status)
			status = f8_pass_canonicalize_run(graph, &diag);
		fp8.allow_fallback = fallback;
		if (!status)
			status = f8_pass_precision_run(graph, &fp8, NULL, NULL, &diag);
		if (status && status != F8_ERR_UNSUPPORTED)
			f8_diag_print(&diag, stdout);
		if (!fallback) {
			CHECK(status == F8_ERR_UNSUPPORTED && strstr(diag.message, "K=70 is not a "
								       "multiple of 16"));
		} else {
			f8_value_id y = f8_graph_find_value(graph, "y", 1);
			CHECK(status == F8_OK && y != F8_NONE &&
			      strstr(graph->values[y].precision.reason, "kept F32: fallback") &&
			      strstr(graph->values[y].precision.reason, "K=70"));
		}
		f8_graph_destroy(graph);
	}
}

/* Every allocation of both passes may fail: the status says so, nothing crashes or leaks. */
static void test_allocation_failures(void) {
	f8_fp8_options fp8 = f8_fp8_options_default();
	f8_diag diag;
	bool succeeded = false;
	for (long n = 0; !succeeded && n < 100000; n++) {
		f8_graph *graph = compile(&fp8, "training", NULL, &diag);
		CHECK(graph != NULL);
		if (!graph)
			return;
		test_fail_allocations_after(n);
		f8_status status = f8_pass_precision_run(graph, &fp8, NULL, NULL, &diag);
		if (!status)
			status = f8_pass_fp8_cast_run(graph, &fp8, NULL, &diag);
		test_allocations_restore();
		if (status != F8_OK && status != F8_ERR_NOMEM)
			printf("FAIL allocation %ld: %s\n", n, diag.message);
		CHECK(status == F8_OK || status == F8_ERR_NOMEM);
		succeeded = status == F8_OK;
		f8_graph_destroy(graph);
		n += n > 200 ? 37 : 0; // every allocation early, then a sample: the graph is large
	}
	CHECK(succeeded);
}

/* --bf16 without FP8: 51 GEMMs recorded BF16 by precision, f32 master weights, moments and
 * accumulators, each parameter read through its BF16 copy, the loss f32, no FP8 cast. */
static void test_bf16_alone(void) {
	f8_diag diag;
	f8_graph *graph = compile_with(NULL, true, "fp8-cast", NULL, &diag);
	CHECK(graph != NULL);
	if (!graph)
		return;
	decision d[MAX_GEMMS];
	int n = decisions_of(graph, d), n_bf16 = 0;
	for (int i = 0; i < n; i++)
		n_bf16 += d[i].format == F8_DTYPE_BF16 && d[i].recipe == F8_RECIPE_NONE && d[i].reason &&
			  starts_with(d[i].reason, "kept BF16: --bf16 without --fp8-format: BF16 "
					  "operands and output, f32 accumulation");
	CHECK(n == 51 && n_bf16 == 51);
	int n_params = 0, n_copies = 0, n_f32_state = 0, n_casts = 0;
	for (uint32_t i = 0; i < graph->n_inputs; i++) {
		const f8_value *v = &graph->values[graph->inputs[i]];
		if (v->role == F8_ROLE_PARAMETER)
			n_params += v->type.dtype == F8_DTYPE_F32;
		if (v->role == F8_ROLE_OPTIMIZER_STATE && v->type.dtype == F8_DTYPE_F32)
			n_f32_state++; // main_grad, exp_avg, exp_avg_sq of each
		char name[320];
		snprintf(name, sizeof name, "%s.bf16", v->name);
		f8_value_id copy = f8_graph_find_value(graph, name, strlen(name));
		n_copies += v->role == F8_ROLE_PARAMETER && copy != F8_NONE &&
			    graph->values[copy].type.dtype == F8_DTYPE_BF16 &&
			    starts_with(graph->values[copy].precision.reason, "kept BF16: --bf16: ");
	}
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		n_casts += node->op == F8_OP_QUANTIZE || node->op == F8_OP_CAST_TRANSPOSE;
		if (node->op == F8_OP_CROSS_ENTROPY)
			CHECK(graph->values[node->inputs[0]].type.dtype == F8_DTYPE_BF16 &&
			      graph->values[node->outputs[0]].type.dtype == F8_DTYPE_F32);
	}
	CHECK(n_params == 52 && n_copies == 52 && n_f32_state == 3 * 52 && n_casts == 0);
	CHECK(f8_graph_verify(graph, &diag) == F8_OK);
	f8_graph_destroy(graph);
}

/* --bf16 with the default FP8: the FP8 GEMMs write BF16, the head is kept BF16. */
static void test_bf16_with_fp8(void) {
	f8_fp8_options fp8 = f8_fp8_options_default();
	f8_diag diag;
	f8_graph *graph = compile_with(&fp8, true, "fp8-cast", NULL, &diag);
	CHECK(graph != NULL);
	if (!graph)
		return;
	int n_fp8 = 0, n_head = 0;
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		const f8_value *out = &graph->values[node->outputs[0]];
		if (node->op == F8_OP_FP8_GEMM)
			n_fp8 += out->type.dtype == F8_DTYPE_BF16 &&
				 f8_node_attr_dtype(node, "to", F8_DTYPE_UNDEFINED) == F8_DTYPE_BF16;
		else if (f8_op_get_info(node->op)->flags & F8_OPF_GEMM)
			n_head += out->type.dtype == F8_DTYPE_BF16 && node->scope &&
				  strcmp(node->scope, "head") == 0 &&
				  starts_with(out->precision.reason, "kept BF16: the output head");
	}
	CHECK(n_fp8 == 48 && n_head == 3);
	f8_graph_destroy(graph);
}

/* Every allocation of the bf16 pass may fail, and then says so. */
static void test_bf16_allocation_failures(void) {
	f8_diag diag;
	bool succeeded = false;
	for (long n = 0; !succeeded && n < 100000; n++) {
		f8_graph *graph = compile(NULL, "fuse-patterns", NULL, &diag);
		CHECK(graph != NULL);
		if (!graph)
			return;
		test_fail_allocations_after(n);
		f8_status status = f8_pass_bf16_run(graph, NULL, &diag);
		test_allocations_restore();
		if (status != F8_OK && status != F8_ERR_NOMEM)
			printf("FAIL allocation %ld: %s\n", n, diag.message);
		CHECK(status == F8_OK || status == F8_ERR_NOMEM);
		succeeded = status == F8_OK;
		if (succeeded)
			CHECK(f8_graph_verify(graph, &diag) == F8_OK);
		f8_graph_destroy(graph);
		n += n > 200 ? 37 : 0;
	}
	CHECK(succeeded);
}

int main(int argc, char **argv) {
	source_dir = argc > 1 ? argv[1] : ".";
	test_defaults();
	test_cast();
	test_policy();
	test_rules_and_calibration();
	test_target();
	test_shapes();
	test_allocation_failures();
	test_bf16_alone();
	test_bf16_with_fp8();
	test_bf16_allocation_failures();
	return test_finish();
}
