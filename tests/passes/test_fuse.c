/*
 * Unit tests of the fuse pass on gpt-tiny, compiled through the whole pipeline with the verifier
 * after every pass: with FP8 (the defaults: HYBRID, delayed) and without, for training and for
 * inference. Every kernel verifies; every Quantize, CastTranspose, LayerNorm, Gelu, GeluGrad and
 * ScalingUpdate is in a kernel, with the members its family admits; nothing but library nodes
 * (GEMMs, attention) stays outside a kernel; the kernels are counted per family; the fused graph's text reads back the same; the report has a line per kernel and a
 * summary; a second fuse is refused with a clear error and leaves the graph as it was (the
 * choice passes/fuse.h documents); without a target table (or with one that lowers nothing)
 * nothing is fused and the report says why; allocation failure at every allocation of the pass
 * is reported as such and leaves the graph unfused.
 *
 * usage: test_fuse SOURCE_DIR
 */
#define _POSIX_C_SOURCE 200809L // open_memstream

#include <stdio.h>  // printf, snprintf, open_memstream
#include <stdlib.h> // free
#include <string.h> // strcmp, strstr

#include "codegen/target.h"     // f8_codegen_target_table_for
#include "frontend/frontend.h"  // f8_frontend_load
#include "ir/alloc.h"           // f8_free
#include "ir/text.h"            // f8_text_parse, f8_text_print_string
#include "ir/verify.h"          // f8_graph_verify
#include "passes/fuse.h"        // f8_pass_fuse_run
#include "passes/pipeline.h"    // f8_pipeline_run_with, f8_pipeline_find
#include "tests/test_support.h" // CHECK, test_fail_allocations_after

static const char *source_dir;

/* models/`model`.json with batch 2 and seq 128 bound, compiled through `last` (NULL: the whole
 * pipeline) for training (or inference) with `fp8` (NULL: none); NULL with a message on
 * failure. */
static f8_graph *compile_model(const char *model, bool training, const f8_fp8_options *fp8,
			       const char *last) {
	char path[512];
	snprintf(path, sizeof path, "%s/models/%s.json", source_dir, model);
	const f8_dim_binding dims[] = {{"batch", 2}, {"seq", 128}};
	f8_frontend_options options = {.dims = dims, .n_dims = 2, .seed = 1};
	f8_training_options hyperparameters = f8_training_options_default();
	f8_pipeline_options compile_options = {.training = training ? &hyperparameters : NULL,
					       .fp8 = fp8,
					       .target = f8_codegen_target_table_for(fp8)};
	f8_graph *graph = NULL;
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_status status = f8_frontend_load(path, &options, &graph, &diag);
	if (!status)
		status = f8_pipeline_run_with(graph, last, true, &compile_options, NULL, &diag);
	if (status) {
		f8_diag_print(&diag, stdout);
		f8_graph_destroy(graph);
		return NULL;
	}
	return graph;
}

static f8_graph *compile(bool training, const f8_fp8_options *fp8, const char *last) {
	return compile_model("gpt-tiny", training, fp8, last);
}

static bool must_be_fused(f8_op op) {
	switch (op) {
	case F8_OP_QUANTIZE:
	case F8_OP_CAST_TRANSPOSE:
	case F8_OP_LAYER_NORM:
	case F8_OP_RMS_NORM:
	case F8_OP_LAYER_NORM_GRAD:
	case F8_OP_RMS_NORM_GRAD:
	case F8_OP_GELU:
	case F8_OP_GELU_GRAD:
	case F8_OP_SWIGLU:
	case F8_OP_SWIGLU_GRAD:
	case F8_OP_EMBEDDING:
	case F8_OP_EMBEDDING_GRAD:
	case F8_OP_ADAMW:
	case F8_OP_SCALING_UPDATE:
		return true;
	default:
		return false;
	}
}

static bool is_cast_of(const f8_node *node, f8_value_id source) {
	return (node->op == F8_OP_QUANTIZE || node->op == F8_OP_CAST_TRANSPOSE) &&
	       node->inputs[0] == source;
}

/* Checks that each kernel holds what its family admits (passes/fuse.h), counting kernels per
 * family into per_family. */
static void check_families(const f8_graph *graph, uint32_t *per_family) {
	for (uint32_t i = 0; i < graph->n_order;) {
		const f8_node *seed = &graph->nodes[graph->order[i]];
		uint32_t group = seed->group;
		if (group == F8_NONE) {
			CHECK(!must_be_fused(seed->op));
			i++;
			continue;
		}
		CHECK(group < graph->n_groups && graph->groups[group].reason[0]);
		f8_kernel_family family = graph->groups[group].family;
		per_family[family]++;
		uint32_t end = i + 1;
		while (end < graph->n_order && graph->nodes[graph->order[end]].group == group)
			end++;
		for (uint32_t m = i + 1; m < end; m++) {
			const f8_node *node = &graph->nodes[graph->order[m]];
			CHECK(node->phase == seed->phase);
			f8_value_id first = seed->outputs[0];
			if (family == F8_KERNEL_FAMILY_NORM || family == F8_KERNEL_FAMILY_NORM_GRAD ||
			    family == F8_KERNEL_FAMILY_ACTIVATION)
				CHECK(is_cast_of(node, first));
			else if (family == F8_KERNEL_FAMILY_ACTIVATION_GRAD)
				CHECK(is_cast_of(node, first) ||
				      (node->op == F8_OP_REDUCE_SUM && node->inputs[0] == first &&
				       seed->op == F8_OP_GELU_GRAD));
			else if (family == F8_KERNEL_FAMILY_OPTIMIZER)
				CHECK(node->op == F8_OP_ADAMW || node->op == F8_OP_CONSTANT_OF_SHAPE);
			else if (family == F8_KERNEL_FAMILY_CAST) // the bias gradient of its source
				CHECK(m == i + 1 && end == i + 2 && node->op == F8_OP_REDUCE_SUM &&
				      seed->op == F8_OP_CAST_TRANSPOSE && seed->inputs[1] != F8_NONE &&
				      node->inputs[0] == seed->inputs[0] &&
				      strstr(graph->groups[group].reason, "and the bias gradient of"));
			else
				CHECK(family == F8_KERNEL_FAMILY_ELEMENTWISE);
			if (is_cast_of(node, node->inputs[0])) // casts that find their scales: alone
				CHECK(node->n_inputs > 1 && node->inputs[1] != F8_NONE);
		}
		if (family == F8_KERNEL_FAMILY_NORM)
			CHECK(seed->op == F8_OP_LAYER_NORM || seed->op == F8_OP_RMS_NORM);
		if (family == F8_KERNEL_FAMILY_NORM_GRAD)
			CHECK(seed->op == F8_OP_LAYER_NORM_GRAD || seed->op == F8_OP_RMS_NORM_GRAD);
		if (family == F8_KERNEL_FAMILY_ACTIVATION)
			CHECK(seed->op == F8_OP_GELU || seed->op == F8_OP_SWIGLU);
		if (family == F8_KERNEL_FAMILY_ACTIVATION_GRAD)
			CHECK(seed->op == F8_OP_GELU_GRAD || seed->op == F8_OP_SWIGLU_GRAD);
		if (family == F8_KERNEL_FAMILY_OPTIMIZER)
			CHECK(seed->op == F8_OP_ADAMW);
		if (family == F8_KERNEL_FAMILY_EMBEDDING || family == F8_KERNEL_FAMILY_EMBEDDING_GRAD)
			CHECK(end == i + 1 && (seed->op == F8_OP_EMBEDDING ||
					       seed->op == F8_OP_EMBEDDING_GRAD));
		if (family == F8_KERNEL_FAMILY_LAYOUT)
			CHECK(seed->op == F8_OP_RESHAPE || seed->op == F8_OP_TRANSPOSE ||
			      seed->op == F8_OP_SPLIT || seed->op == F8_OP_CONCAT ||
			      seed->op == F8_OP_SLICE || seed->op == F8_OP_SLICE_GRAD ||
			      seed->op == F8_OP_SQUEEZE || seed->op == F8_OP_UNSQUEEZE ||
			      seed->op == F8_OP_EXPAND || seed->op == F8_OP_TRILU);
		if (family == F8_KERNEL_FAMILY_SOFTMAX)
			CHECK(end == i + 1 && (seed->op == F8_OP_SOFTMAX ||
					       seed->op == F8_OP_SOFTMAX_GRAD));
		if (family == F8_KERNEL_FAMILY_REDUCE)
			CHECK(seed->op == F8_OP_REDUCE_SUM || seed->op == F8_OP_REDUCE_MEAN ||
			      seed->op == F8_OP_REDUCE_MAX);
		if (family == F8_KERNEL_FAMILY_FILL)
			CHECK(seed->op == F8_OP_CONSTANT || seed->op == F8_OP_CONSTANT_OF_SHAPE);
		if (family == F8_KERNEL_FAMILY_GLOBAL_NORM)
			CHECK(seed->op == F8_OP_GLOBAL_NORM);
		if (family == F8_KERNEL_FAMILY_LEARNING_RATE)
			CHECK(seed->op == F8_OP_LEARNING_RATE);
		i = end;
	}
}

/* Every node of gpt-tiny outside a kernel runs in a library on the target (GEMMs, attention):
 * on a GPU everything else is a generated kernel. Returns how many stay outside. */
static uint32_t check_only_library_outside(const f8_graph *graph, const f8_fp8_options *fp8) {
	const f8_target_table *target = f8_codegen_target_table_for(fp8);
	uint32_t outside = 0;
	for (uint32_t i = 0; i < graph->n_order; i++) {
		f8_node_id id = graph->order[i];
		if (graph->nodes[id].group != F8_NONE)
			continue;
		outside++;
		bool library = target->runs_in_library && target->runs_in_library(graph, id);
		if (!library)
			printf("  FAIL %s outside any kernel, and no library runs it\n",
			       f8_op_name(graph->nodes[id].op));
		CHECK(library);
	}
	return outside;
}

/* The fused graph's text parses back, verifies and prints the same. */
static void check_round_trip(const f8_graph *graph) {
	char *printed = NULL, *reprinted = NULL;
	size_t printed_len = 0, reprinted_len = 0;
	f8_graph *again = NULL;
	f8_diag diag;
	f8_diag_clear(&diag);
	CHECK(f8_text_print_string(graph, &printed, &printed_len) == F8_OK);
	CHECK(printed && f8_text_parse(printed, printed_len, "fused", &again, &diag) == F8_OK);
	CHECK(again && f8_graph_verify(again, &diag) == F8_OK);
	CHECK(again && f8_text_print_string(again, &reprinted, &reprinted_len) == F8_OK);
	CHECK(printed && reprinted && strcmp(printed, reprinted) == 0);
	CHECK(again && again->n_groups == graph->n_groups);
	if (diag.message[0])
		f8_diag_print(&diag, stdout);
	f8_free(printed);
	f8_free(reprinted);
	f8_graph_destroy(again);
}

/* A second fuse, as the pipeline runs it, is refused and changes nothing. */
static void check_refused_again(f8_graph *graph) {
	char *before = NULL, *after = NULL;
	size_t len;
	f8_diag diag;
	f8_diag_clear(&diag);
	const f8_pass *fuse = f8_pipeline_find("fuse");
	const f8_pipeline_options options = {0};
	CHECK(fuse != NULL);
	if (!fuse)
		return;
	CHECK(f8_text_print_string(graph, &before, &len) == F8_OK);
	CHECK(fuse->run(graph, &options, NULL, &diag) == F8_ERR_INVALID);
	CHECK(strstr(diag.message, "fused already") && strstr(diag.hint, "fuse runs once"));
	CHECK(f8_text_print_string(graph, &after, &len) == F8_OK);
	CHECK(before && after && strcmp(before, after) == 0);
	f8_free(before);
	f8_free(after);
}

/* The pipeline through fuse for training or inference, with FP8 or without. */
static void test_gpt_tiny(bool training, bool with_fp8) {
	f8_fp8_options fp8 = f8_fp8_options_default();
	f8_graph *graph = compile(training, with_fp8 ? &fp8 : NULL, NULL);
	CHECK(graph != NULL);
	if (!graph)
		return;
	f8_diag diag;
	f8_diag_clear(&diag);
	CHECK(f8_graph_verify(graph, &diag) == F8_OK);
	uint32_t per_family[F8_KERNEL_FAMILY_COUNT] = {0};
	check_families(graph, per_family);
	printf("gpt-tiny %s, %s FP8: %u kernels:", training ? "training" : "inference",
	       with_fp8 ? "with" : "without", graph->n_groups);
	for (int family = 0; family < F8_KERNEL_FAMILY_COUNT; family++)
		printf("%s %u %s", family ? "," : "", per_family[family],
		       f8_kernel_family_name((f8_kernel_family)family));
	printf("\n");
	// 4 layers: two LayerNorms each and the final one, each with its gradient in training; a
	// Gelu each (a GeluGrad in training); the token embedding, its gradient; one optimizer.
	CHECK(per_family[F8_KERNEL_FAMILY_NORM] == 9);
	CHECK(per_family[F8_KERNEL_FAMILY_NORM_GRAD] == (training ? 9u : 0u));
	CHECK(per_family[F8_KERNEL_FAMILY_ACTIVATION] == 4);
	CHECK(per_family[F8_KERNEL_FAMILY_ACTIVATION_GRAD] == (training ? 4u : 0u));
	CHECK(per_family[F8_KERNEL_FAMILY_CROSS_ENTROPY] == (training ? 2u : 0u));
	CHECK(per_family[F8_KERNEL_FAMILY_EMBEDDING] == 1);
	CHECK(per_family[F8_KERNEL_FAMILY_EMBEDDING_GRAD] == (training ? 1u : 0u));
	CHECK(per_family[F8_KERNEL_FAMILY_OPTIMIZER] == (training ? 1u : 0u));
	// FP8: a ScalingUpdate per table; inference has no gradients' table.
	CHECK(per_family[F8_KERNEL_FAMILY_SCALING] == (with_fp8 ? (training ? 3u : 2u) : 0u));
	CHECK(with_fp8 == (per_family[F8_KERNEL_FAMILY_CAST] > 0));
	// Bias gradients: fc1's in its GeluGrad's kernel; qkv's, with FP8, in the E5M2
	// CastTranspose's of the same gradient; proj's and fc2's (whose gradients a norm's
	// backward makes) and pos_embed's over the batch are reduce kernels of their own.
	CHECK(per_family[F8_KERNEL_FAMILY_REDUCE] == (training ? (with_fp8 ? 9u : 13u) : 0u));
	// The optimizer's scalars: the schedule and the gradients' norm, one kernel each.
	CHECK(per_family[F8_KERNEL_FAMILY_LEARNING_RATE] == (training ? 1u : 0u));
	CHECK(per_family[F8_KERNEL_FAMILY_GLOBAL_NORM] == (training ? 1u : 0u));
	// Per layer: the Split of qkv, three Reshapes and Transposes into heads, one of each back;
	// the Slice of pos_embed; in training as many for the gradients (the Concat of dqkv in
	// place of the Split), and the Reshape and SliceGrad of pos_embed's gradient. f32
	// attention for sm_90 is MatMuls and Softmax (passes/attention_unfused.h): per layer k's
	// Transpose, and one Trilu of the causal bias for all; in training per layer the
	// Transposes of the MatMuls' other operands (k^T, q, v, p) and k^T's gradient back.
	CHECK(per_family[F8_KERNEL_FAMILY_LAYOUT] ==
	      (training ? 4 * (18 + 1 + 5) + 3u + 1u : 4 * (9 + 1) + 1u + 1u));
	CHECK(per_family[F8_KERNEL_FAMILY_SOFTMAX] == (training ? 8u : 4u));
	check_only_library_outside(graph, with_fp8 ? &fp8 : NULL);
	check_round_trip(graph);
	check_refused_again(graph);
	f8_graph_destroy(graph);
}

/* In training with FP8, each GeluGrad's kernel holds its E5M2 cast and fc1's bias gradient,
 * which moved up past the GEMMs; each norm's kernel holds its output's cast. */
static void test_members(void) {
	f8_fp8_options fp8 = f8_fp8_options_default();
	f8_graph *graph = compile(true, &fp8, NULL);
	CHECK(graph != NULL);
	if (!graph)
		return;
	uint32_t with_reduce = 0, norms_with_cast = 0;
	for (uint32_t i = 0; i + 2 < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		const f8_node *next = &graph->nodes[graph->order[i + 1]];
		const f8_node *third = &graph->nodes[graph->order[i + 2]];
		if (node->op == F8_OP_GELU_GRAD) {
			with_reduce += next->group == node->group && third->group == node->group &&
				       next->op == F8_OP_CAST_TRANSPOSE &&
				       third->op == F8_OP_REDUCE_SUM;
			CHECK(strstr(graph->groups[node->group].reason, "E5M2 cast and transpose"));
			CHECK(strstr(graph->groups[node->group].reason, "bias gradient of"));
		}
		if (node->op == F8_OP_LAYER_NORM && next->group == node->group &&
		    is_cast_of(next, node->outputs[0]))
			norms_with_cast++;
	}
	CHECK(with_reduce == 4);
	// The final norm feeds the head, which stays high precision: no cast to take.
	CHECK(norms_with_cast == 8);
	f8_graph_destroy(graph);
}

/* In training, one optimizer kernel holds every AdamW and the zeroing of every gradient
 * accumulator (the ConstantOfShape each update takes the next value from), moved together. */
static void test_optimizer(void) {
	f8_graph *graph = compile(true, NULL, NULL);
	CHECK(graph != NULL);
	if (!graph)
		return;
	uint32_t adamw = 0, in_kernel = 0, zeroings = 0, zeroed = 0, group = F8_NONE;
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		if (node->op == F8_OP_ADAMW) {
			adamw++;
			group = group == F8_NONE ? node->group : group;
			in_kernel += node->group == group && group != F8_NONE;
		}
		if (node->op == F8_OP_CONSTANT_OF_SHAPE && node->phase == F8_PHASE_OPT) {
			zeroings++;
			zeroed += node->group == group && group != F8_NONE;
		}
	}
	printf("optimizer: %u of %u AdamW and %u of %u zeroings in one kernel\n", in_kernel, adamw,
	       zeroed, zeroings);
	CHECK(adamw == 52 && in_kernel == adamw && zeroed == zeroings && zeroings == adamw);
	CHECK(group != F8_NONE && graph->groups[group].family == F8_KERNEL_FAMILY_OPTIMIZER &&
	      strstr(graph->groups[group].reason, "AdamW of 52 parameters") &&
	      strstr(graph->groups[group].reason, "zeroing of their 52 gradient accumulators"));
	f8_graph_destroy(graph);
}

/* llama-tiny in training with FP8: each SwiGLU's kernel holds the E4M3 cast of its output,
 * each SwiGLUGrad's the E5M2 cast of dx; the RMSNormGrads are norm_grad kernels. */
static void test_llama_tiny(void) {
	f8_fp8_options fp8 = f8_fp8_options_default();
	f8_graph *graph = compile_model("llama-tiny", true, &fp8, NULL);
	CHECK(graph != NULL);
	if (!graph)
		return;
	uint32_t per_family[F8_KERNEL_FAMILY_COUNT] = {0}, swiglu_cast = 0, swiglu_grad_cast = 0;
	check_families(graph, per_family);
	for (uint32_t i = 0; i + 1 < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		const f8_node *next = &graph->nodes[graph->order[i + 1]];
		bool cast = next->group == node->group && is_cast_of(next, node->outputs[0]);
		swiglu_cast += node->op == F8_OP_SWIGLU && cast;
		swiglu_grad_cast += node->op == F8_OP_SWIGLU_GRAD && cast;
	}
	printf("llama-tiny training with FP8: %u kernels, %u norm_grad, %u SwiGLU and %u "
	       "SwiGLUGrad with their casts\n", graph->n_groups,
	       per_family[F8_KERNEL_FAMILY_NORM_GRAD], swiglu_cast, swiglu_grad_cast);
	CHECK(per_family[F8_KERNEL_FAMILY_NORM_GRAD] == 9);
	CHECK(swiglu_cast == 4 && swiglu_grad_cast == 4);
	CHECK(per_family[F8_KERNEL_FAMILY_OPTIMIZER] == 1);
	f8_graph_destroy(graph);
}

/* Under current and block scaling the casts find their scales: each is a kernel of its own
 * (check_families checks that no other kernel holds one). */
static void test_recipes(void) {
	const f8_recipe recipes[] = {F8_RECIPE_CURRENT, F8_RECIPE_BLOCK};
	for (int i = 0; i < 2; i++) {
		f8_fp8_options fp8 = f8_fp8_options_default();
		fp8.recipe = recipes[i];
		f8_graph *graph = compile(true, &fp8, NULL);
		CHECK(graph != NULL);
		if (!graph)
			continue;
		uint32_t per_family[F8_KERNEL_FAMILY_COUNT] = {0}, casts = 0;
		check_families(graph, per_family);
		for (uint32_t n = 0; n < graph->n_order; n++) {
			const f8_node *node = &graph->nodes[graph->order[n]];
			casts += node->op == F8_OP_QUANTIZE || node->op == F8_OP_CAST_TRANSPOSE;
		}
		printf("%s scaling: %u casts, %u cast kernels\n", f8_recipe_name(recipes[i]), casts,
		       per_family[F8_KERNEL_FAMILY_CAST]);
		CHECK(casts > 0 && per_family[F8_KERNEL_FAMILY_CAST] == casts);
		check_only_library_outside(graph, &fp8);
		f8_graph_destroy(graph);
	}
}

/* The report: a line per kernel, then the summary and the nodes left outside. */
static void test_report(void) {
	f8_fp8_options fp8 = f8_fp8_options_default();
	f8_graph *graph = compile(true, &fp8, "fp8-cast");
	CHECK(graph != NULL);
	if (!graph)
		return;
	char *text = NULL;
	size_t len = 0;
	FILE *report = open_memstream(&text, &len);
	f8_diag diag;
	f8_diag_clear(&diag);
	CHECK(report && f8_pass_fuse_run(graph, f8_codegen_target_table_for(&fp8), report,
					 &diag) == F8_OK);
	if (report)
		fclose(report);
	uint32_t lines = 0;
	for (const char *at = text; at && (at = strstr(at, "\nfuse: k")); at++)
		lines++;
	CHECK(text && strncmp(text, "fuse: k0 ", 9) == 0);
	CHECK(lines + 1 == graph->n_groups);
	CHECK(text && strstr(text, " kernels (") && strstr(text, " nodes fused\n"));
	CHECK(text && strstr(text, "fuse: left outside kernels: ") && strstr(text, " FP8Gemm"));
	free(text);
	f8_graph_destroy(graph);
}

/* Without a target table, or with the passes' own (the chip facts, no supports_node), nothing
 * lowers: no kernels, and the report's first line says why. */
static void test_no_target(void) {
	const f8_target_table *tables[] = {NULL, f8_target_table_default(F8_TARGET_SM_90)};
	for (int i = 0; i < 2; i++) {
		f8_graph *graph = compile(true, NULL, "fp8-cast");
		CHECK(graph != NULL);
		if (!graph)
			return;
		char *text = NULL;
		size_t len = 0;
		FILE *report = open_memstream(&text, &len);
		f8_diag diag;
		f8_diag_clear(&diag);
		CHECK(report && f8_pass_fuse_run(graph, tables[i], report, &diag) == F8_OK);
		if (report)
			fclose(report);
		CHECK(graph->n_groups == 0 && f8_graph_verify(graph, &diag) == F8_OK);
		CHECK(text && strncmp(text, "fuse: nothing fused: no target table", 36) == 0 &&
		      strstr(text, "fuse: 0 kernels; 0 of "));
		free(text);
		f8_graph_destroy(graph);
	}
}

/* Every allocation of the pass may fail: the status says so, and the graph stays unfused and
 * valid. */
static void test_allocation_failures(void) {
	f8_graph *graph = compile(true, NULL, "fp8-cast");
	CHECK(graph != NULL);
	if (!graph)
		return;
	char *before = NULL;
	size_t len;
	CHECK(f8_text_print_string(graph, &before, &len) == F8_OK);
	bool succeeded = false;
	for (long n = 0; !succeeded && n < 100000; n++) {
		f8_diag diag;
		f8_diag_clear(&diag);
		test_fail_allocations_after(n);
		f8_status status = f8_pass_fuse_run(graph, f8_codegen_target_table_for(NULL),
						    NULL, &diag);
		test_allocations_restore();
		CHECK(status == F8_OK || status == F8_ERR_NOMEM);
		succeeded = status == F8_OK;
		if (succeeded)
			break;
		char *after = NULL;
		CHECK(graph->n_groups == 0 && f8_graph_verify(graph, &diag) == F8_OK);
		CHECK(f8_text_print_string(graph, &after, &len) == F8_OK);
		CHECK(before && after && strcmp(before, after) == 0);
		f8_free(after);
	}
	CHECK(succeeded && graph->n_groups > 0);
	f8_free(before);
	f8_graph_destroy(graph);
}

int main(int argc, char **argv) {
	source_dir = argc > 1 ? argv[1] : ".";
	test_gpt_tiny(true, true);
	test_gpt_tiny(true, false);
	test_gpt_tiny(false, true);
	test_gpt_tiny(false, false);
	test_members();
	test_optimizer();
	test_llama_tiny();
	test_recipes();
	test_report();
	test_no_target();
	test_allocation_failures();
	return test_finish();
}
