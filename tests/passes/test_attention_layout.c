/*
 * The attention-layout pass (passes/attention_layout.h):
 *   - exact: an attention with its backward between a Split and a Concat, f32 and bf16, GQA,
 *     causal or with a mask, with a recompute clone or without, compiled through fuse and
 *     schedule with the pass and without it, runs on the CPU backend to the same bytes (the
 *     copies it removes move bytes, and the packed kernels compute the same sums in the same
 *     order);
 *   - where it applies: gpt-tiny's training step (FP8 delayed under --bf16, and with full
 *     recompute, whose clones repeat the chain) has every Attention packed, no Split,
 *     Transpose or Concat left, the reasons in the plan, and its text round-trips;
 *     selective recompute of core_attn packs the backward's clone of each Attention too;
 *   - where it must not: llama-tiny (RoPE between the Split and the Attention) and a transposed
 *     q that is a graph output keep their programs as they were, the kept Attention's output
 *     saying why;
 *   - allocation failure at every allocation leaves the graph as it was, verified.
 * Usage: test_attention_layout SOURCE_DIR
 */
#include <stdio.h>  // printf, snprintf
#include <string.h> // strcmp, strstr, memcmp, strlen

#include "codegen/target.h"              // f8_codegen_target_table
#include "frontend/frontend.h"           // f8_frontend_load
#include "ir/alloc.h"                    // f8_free
#include "ir/text.h"                     // f8_text_parse, f8_text_print_string
#include "ir/verify.h"                   // f8_graph_verify
#include "passes/attention_layout.h"     // f8_pass_attention_layout_run
#include "passes/pipeline.h"             // f8_pipeline_run_with, f8_pipeline_run_named
#include "passes/recompute.h"            // f8_recompute_options
#include "runtime/cpu/backend.h"         // f8_cpu_backend_create
#include "tests/gpu/check_graph.h"       // check_tensor_make
#include "tests/runtime/test_backend_ops.h" // backend_ops_run
#include "tests/runtime/test_fill.h"     // rng_state, test_fill
#include "tests/test_support.h"          // CHECK, test_finish, test_fail_allocations_after

static const char *source_dir;

/* An attention with its backward as the JSON frontend and autodiff spell it: qkv
 * (2, 6, (4 + 2 x 2) x 8) split into q, k, v, each to heads and transposed, the output back
 * to (b, s, h d); dmerged to heads, AttentionGrad, dq, dk, dv back and concatenated. `dtype`,
 * `attrs` (the Attention's and AttentionGrad's), an optional mask input and its use; with
 * `clone`, the backward reads the out and lse of a second Attention of the same q, k, v (as
 * selective recompute of core_attn makes it). */
static void chain_text(char *out, size_t size, const char *dtype, const char *attrs,
		       bool mask, bool clone) {
	char again[256] = "", mask_input[64] = "";
	if (mask)
		snprintf(mask_input, sizeof mask_input, "  input %%m : %s[2, 1, 6, 6]\n", dtype);
	if (clone)
		snprintf(again, sizeof again, "  %%core_r, %%lse_r = Attention(%%q_bhsd, %%k_bhsd, "
			 "%%v_bhsd%s)%s phase=bwd\n", mask ? ", %m" : "", attrs);
	snprintf(out, size,
		 "graph chain {\n"
		 "  input %%qkv : %s[2, 6, 64]\n"
		 "  input %%dmerged : %s[2, 6, 32]\n"
		 "%s"
		 "  %%q, %%k, %%v = Split(%%qkv) {axis=-1, split=[32, 16, 16]} scope=\"attn\"\n"
		 "  %%q_bshd = Reshape(%%q) {shape=[2, 6, 4, 8]}\n"
		 "  %%q_bhsd = Transpose(%%q_bshd) {perm=[0, 2, 1, 3]}\n"
		 "  %%k_bshd = Reshape(%%k) {shape=[2, 6, 2, 8]}\n"
		 "  %%k_bhsd = Transpose(%%k_bshd) {perm=[0, 2, 1, 3]}\n"
		 "  %%v_bshd = Reshape(%%v) {shape=[2, 6, 2, 8]}\n"
		 "  %%v_bhsd = Transpose(%%v_bshd) {perm=[0, 2, 1, 3]}\n"
		 "  %%core, %%lse = Attention(%%q_bhsd, %%k_bhsd, %%v_bhsd%s)%s scope=\"attn.core\"\n"
		 "  %%core_bshd = Transpose(%%core) {perm=[0, 2, 1, 3]}\n"
		 "  %%merged = Reshape(%%core_bshd) {shape=[2, 6, 32]}\n"
		 "  %%dcore_bshd = Reshape(%%dmerged) {shape=[2, 6, 4, 8]} phase=bwd\n"
		 "  %%dcore = Transpose(%%dcore_bshd) {perm=[0, 2, 1, 3]} phase=bwd\n"
		 "%s"
		 "  %%dq, %%dk, %%dv = AttentionGrad(%%dcore, %%q_bhsd, %%k_bhsd, %%v_bhsd, %%%s, "
		 "%%%s%s)%s phase=bwd\n"
		 "  %%dq_bshd = Transpose(%%dq) {perm=[0, 2, 1, 3]} phase=bwd\n"
		 "  %%dq_merged = Reshape(%%dq_bshd) {shape=[2, 6, 32]} phase=bwd\n"
		 "  %%dk_bshd = Transpose(%%dk) {perm=[0, 2, 1, 3]} phase=bwd\n"
		 "  %%dk_merged = Reshape(%%dk_bshd) {shape=[2, 6, 16]} phase=bwd\n"
		 "  %%dv_bshd = Transpose(%%dv) {perm=[0, 2, 1, 3]} phase=bwd\n"
		 "  %%dv_merged = Reshape(%%dv_bshd) {shape=[2, 6, 16]} phase=bwd\n"
		 "  %%dqkv = Concat(%%dq_merged, %%dk_merged, %%dv_merged) {axis=2} phase=bwd\n"
		 "  output %%merged, %%lse, %%dqkv\n"
		 "}\n",
		 dtype, dtype, mask_input, mask ? ", %m" : "",
		 attrs, again, clone ? "core_r" : "core", clone ? "lse_r" : "lse", mask ? ", %m" : "",
		 attrs);
}

static f8_graph *parse(const char *text) {
	f8_graph *graph = NULL;
	f8_diag diag;
	f8_diag_clear(&diag);
	if (f8_text_parse(text, strlen(text), "chain", &graph, &diag)) {
		f8_diag_print(&diag, stdout);
		return NULL;
	}
	return graph;
}

/* The nodes of `op` in the program. */
static uint32_t count_op(const f8_graph *graph, f8_op op) {
	uint32_t n = 0;
	for (uint32_t i = 0; i < graph->n_order; i++)
		n += graph->nodes[graph->order[i]].op == op;
	return n;
}

/* The program's ops, in order, as text: what "left as it was" compares. */
static void ops_of(const f8_graph *graph, char *out, size_t size) {
	size_t used = 0;
	out[0] = '\0';
	for (uint32_t i = 0; i < graph->n_order && used < size; i++) {
		int n = snprintf(out + used, size - used, "%s ",
				 f8_op_name(graph->nodes[graph->order[i]].op));
		used += n > 0 ? (size_t)n : 0;
	}
}

/* The chain through canonicalize, [attention-layout,] fuse and schedule for cpu, run on the
 * CPU backend (reference kernels) on leaves drawn from `seed`: its outputs into outputs[3]. */
static bool compile_and_run(const char *text, bool layout, bool clone, uint64_t seed,
			    f8_rt_tensor *outputs) {
	f8_graph *graph = parse(text);
	if (!graph)
		return false;
	const char *with[] = {"canonicalize", "attention-layout", "fuse", "schedule"};
	const char *without[] = {"canonicalize", "fuse", "schedule"};
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_status status = f8_pipeline_run_named(graph, layout ? with : without, layout ? 4 : 3,
						 true, NULL, false, NULL, NULL,
						 f8_codegen_target_table(F8_TARGET_CPU), &diag);
	if (!status) {
		uint32_t packed = count_op(graph, F8_OP_ATTENTION_PACKED);
		uint32_t grads = count_op(graph, F8_OP_ATTENTION_PACKED_GRAD);
		uint32_t attentions = clone ? 2 : 1;
		CHECK(layout ? packed == attentions && grads == 1 && count_op(graph, F8_OP_SPLIT) == 0 &&
				       count_op(graph, F8_OP_TRANSPOSE) == 0 &&
				       count_op(graph, F8_OP_CONCAT) == 0 &&
				       graph->n_order == attentions + 1
			     : packed == 0 && count_op(graph, F8_OP_ATTENTION) == attentions);
	}
	f8_rt_tensor leaves[3] = {0};
	rng_state = seed;
	for (uint32_t i = 0; !status && i < graph->n_inputs; i++) {
		const char *name = graph->values[graph->inputs[i]].name;
		if (!check_tensor_make(graph, NULL, graph->inputs[i], &leaves[i]) ||
		    !test_fill(&leaves[i], name[0] == 'm' ? "uniform:-2:0" : "uniform:-2:2", ""))
			status = F8_ERR_NOMEM;
	}
	f8_backend *backend = NULL;
	f8_executor_memory memory;
	if (!status)
		status = f8_cpu_backend_create(F8_CPU_KERNELS_REFERENCE, &backend, &diag);
	if (!status)
		status = backend_ops_run(backend, graph, leaves, outputs, &memory, &diag);
	if (status)
		f8_diag_print(&diag, stdout);
	f8_backend_destroy(backend);
	for (uint32_t i = 0; i < 3; i++)
		f8_rt_tensor_destroy(&leaves[i]);
	f8_graph_destroy(graph);
	return status == F8_OK;
}

/* The chain with and without the pass: the same bytes in every output. */
static void test_exact(const char *dtype, const char *attrs, bool mask, bool clone) {
	char text[4096];
	chain_text(text, sizeof text, dtype, attrs, mask, clone);
	f8_rt_tensor with[3] = {0}, without[3] = {0};
	bool ran = compile_and_run(text, true, clone, 7, with) &&
		   compile_and_run(text, false, clone, 7, without);
	CHECK(ran);
	bool same = ran;
	for (uint32_t o = 0; ran && o < 3; o++)
		same &= with[o].n_bytes == without[o].n_bytes &&
			memcmp(with[o].data, without[o].data, with[o].n_bytes) == 0;
	printf("%s%s%s%s: with the pass and without, %s\n", dtype, attrs, mask ? " masked" : "",
	       clone ? ", a recompute clone" : "", same ? "the same bytes" : "DIFFERENT");
	CHECK(same);
	for (uint32_t o = 0; o < 3; o++) {
		f8_rt_tensor_destroy(&with[o]);
		f8_rt_tensor_destroy(&without[o]);
	}
}

/* models/`model`.json's training step (batch 2, seq 64) with FP8 delayed under --bf16 and
 * `recompute`, through the pipeline up to pass `until` (NULL: the whole); NULL with a message
 * on failure. */
static f8_graph *compile_model(const char *model, const f8_recompute_options *recompute,
			       const char *until) {
	char path[512];
	snprintf(path, sizeof path, "%s/models/%s.json", source_dir, model);
	const f8_dim_binding dims[] = {{"batch", 2}, {"seq", 64}};
	f8_frontend_options options = {.dims = dims, .n_dims = 2, .seed = 1};
	f8_training_options training = f8_training_options_default();
	f8_fp8_options fp8 = f8_fp8_options_default();
	f8_pipeline_options compile = {.training = &training, .fp8 = &fp8, .bf16 = true,
				       .recompute = recompute,
				       .target = f8_codegen_target_table_for(&fp8)};
	f8_graph *graph = NULL;
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_status status = f8_frontend_load(path, &options, &graph, &diag);
	if (!status)
		status = f8_pipeline_run_with(graph, until, true, &compile, NULL, &diag);
	if (status) {
		f8_diag_print(&diag, stdout);
		f8_graph_destroy(graph);
		return NULL;
	}
	return graph;
}

/* Whether some value's reason holds `text`. */
static bool some_reason(const f8_graph *graph, const char *text) {
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		for (uint32_t o = 0; o < node->n_outputs; o++) {
			const char *reason = graph->values[node->outputs[o]].precision.reason;
			if (reason && strstr(reason, text))
				return true;
		}
	}
	return false;
}

/* The nodes of an attention's copies (a Split, Transpose or Concat) left in the program. */
static uint32_t copies_left(const f8_graph *graph) {
	return count_op(graph, F8_OP_SPLIT) + count_op(graph, F8_OP_TRANSPOSE) +
	       count_op(graph, F8_OP_CONCAT);
}

static void test_gpt_tiny(void) {
	f8_graph *step = compile_model("gpt-tiny", NULL, NULL);
	CHECK(step != NULL);
	if (step) {
		printf("gpt-tiny FP8 delayed: %u AttentionPacked, %u AttentionPackedGrad, %u "
		       "Attention, %u copies left\n", count_op(step, F8_OP_ATTENTION_PACKED),
		       count_op(step, F8_OP_ATTENTION_PACKED_GRAD), count_op(step, F8_OP_ATTENTION),
		       copies_left(step));
		CHECK(count_op(step, F8_OP_ATTENTION_PACKED) == 4 &&
		      count_op(step, F8_OP_ATTENTION_PACKED_GRAD) == 4 &&
		      count_op(step, F8_OP_ATTENTION) == 0 && count_op(step, F8_OP_ATTENTION_GRAD) == 0 &&
		      copies_left(step) == 0);
		CHECK(some_reason(step, "q, k and v read in place from layers.0.attn.qkv") &&
		      some_reason(step, "dq, dk and dv written in place into dqkv"));
		// The text form round-trips with the new ops.
		char *text = NULL, *again = NULL;
		size_t len = 0;
		f8_graph *parsed = NULL;
		f8_diag diag;
		f8_diag_clear(&diag);
		CHECK(f8_text_print_string(step, &text, &len) == F8_OK &&
		      f8_text_parse(text, len, "gpt-tiny", &parsed, &diag) == F8_OK &&
		      f8_graph_verify(parsed, &diag) == F8_OK &&
		      f8_text_print_string(parsed, &again, &len) == F8_OK && strcmp(text, again) == 0);
		f8_free(text);
		f8_free(again);
		f8_graph_destroy(parsed);
	}
	f8_graph_destroy(step);
	// Full recompute clones the layer, the chain with it: the clones are packed too.
	f8_recompute_options full = {.granularity = F8_RECOMPUTE_GRANULARITY_FULL,
				     .method = F8_RECOMPUTE_METHOD_UNIFORM, .num_layers = 1};
	step = compile_model("gpt-tiny", &full, NULL);
	CHECK(step != NULL);
	if (step) {
		printf("gpt-tiny, full recompute: %u AttentionPacked, %u AttentionPackedGrad, %u "
		       "copies left\n", count_op(step, F8_OP_ATTENTION_PACKED),
		       count_op(step, F8_OP_ATTENTION_PACKED_GRAD), copies_left(step));
		CHECK(count_op(step, F8_OP_ATTENTION_PACKED) == 8 &&
		      count_op(step, F8_OP_ATTENTION_PACKED_GRAD) == 4 && copies_left(step) == 0);
	}
	f8_graph_destroy(step);
}

/* Selective recompute of core_attn: a clone of each Attention in the backward reads the same q,
 * k, v and its AttentionGrad reads the clone's out and lse: both packed, no copy left. */
static void test_recompute_clones(const f8_recompute_options *selective) {
	f8_graph *step = compile_model("gpt-tiny", selective, NULL);
	CHECK(step != NULL);
	if (step) {
		printf("gpt-tiny, selective recompute of core_attn: %u AttentionPacked, %u "
		       "AttentionPackedGrad, %u Attention, %u copies left\n",
		       count_op(step, F8_OP_ATTENTION_PACKED),
		       count_op(step, F8_OP_ATTENTION_PACKED_GRAD), count_op(step, F8_OP_ATTENTION),
		       copies_left(step));
		CHECK(count_op(step, F8_OP_ATTENTION_PACKED) == 8 &&
		      count_op(step, F8_OP_ATTENTION_PACKED_GRAD) == 4 &&
		      count_op(step, F8_OP_ATTENTION) == 0 && copies_left(step) == 0 &&
		      some_reason(step, "the recompute of an attention"));
	}
	f8_graph_destroy(step);
}

/* Compiled through recompute, then the pass alone: nothing packed, the program's ops as they
 * were, each kept Attention's output saying why (`why`). */
static void test_kept(const char *model, const f8_recompute_options *recompute,
		      const char *why) {
	f8_graph *graph = compile_model(model, recompute, "recompute");
	CHECK(graph != NULL);
	if (!graph)
		return;
	static char before[1 << 16], after[1 << 16];
	ops_of(graph, before, sizeof before);
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_status status = f8_pass_attention_layout_run(graph, NULL, &diag);
	if (!status)
		status = f8_graph_verify(graph, &diag);
	if (status)
		f8_diag_print(&diag, stdout);
	CHECK(status == F8_OK);
	if (!status) {
		ops_of(graph, after, sizeof after);
		printf("%s%s: %u AttentionPacked, the program %s, the reason %s\n", model,
		       recompute ? " (selective recompute of core_attn)" : "",
		       count_op(graph, F8_OP_ATTENTION_PACKED),
		       strcmp(before, after) == 0 ? "as it was" : "CHANGED",
		       some_reason(graph, why) ? "given" : "MISSING");
		CHECK(count_op(graph, F8_OP_ATTENTION_PACKED) == 0 && strcmp(before, after) == 0 &&
		      some_reason(graph, why));
	}
	f8_graph_destroy(graph);
}

/* A transposed q that is a graph output: the pass leaves the chain as it is. */
static void test_graph_output(void) {
	char chain[4096], text[4200];
	chain_text(chain, sizeof chain, "f32", " {causal=1}", false, false);
	char *outputs = strstr(chain, "output %merged, %lse, %dqkv");
	*outputs = '\0';
	snprintf(text, sizeof text, "%soutput %%merged, %%lse, %%dqkv, %%q_bhsd\n}\n", chain);
	f8_graph *graph = parse(text);
	CHECK(graph != NULL);
	if (!graph)
		return;
	f8_diag diag;
	f8_diag_clear(&diag);
	const char *names[] = {"canonicalize", "attention-layout"};
	f8_status status = f8_pipeline_run_named(graph, names, 2, true, NULL, false, NULL, NULL,
						 NULL, &diag);
	CHECK(status == F8_OK && count_op(graph, F8_OP_ATTENTION) == 1 &&
	      count_op(graph, F8_OP_ATTENTION_PACKED) == 0 && some_reason(graph, "graph output"));
	f8_graph_destroy(graph);
}

/* Allocation failure at each allocation: F8_ERR_NOMEM and the graph as it was (its text), or
 * the rewrite whole. */
static void test_allocation_failure(void) {
	char text[4096];
	chain_text(text, sizeof text, "bf16", " {causal=1}", false, true);
	f8_graph *graph = parse(text);
	f8_diag diag;
	f8_diag_clear(&diag);
	const char *canonicalize[] = {"canonicalize"};
	CHECK(graph && f8_pipeline_run_named(graph, canonicalize, 1, true, NULL, false, NULL, NULL,
					     NULL, &diag) == F8_OK);
	if (!graph)
		return;
	char *before = NULL;
	size_t len;
	CHECK(f8_text_print_string(graph, &before, &len) == F8_OK);
	bool succeeded = false;
	long failures = 0;
	for (long n = 0; !succeeded && n < 10000; n++) {
		f8_diag_clear(&diag);
		test_fail_allocations_after(n);
		f8_status status = f8_pass_attention_layout_run(graph, NULL, &diag);
		test_allocations_restore();
		CHECK(status == F8_OK || status == F8_ERR_NOMEM);
		succeeded = status == F8_OK;
		if (succeeded)
			break;
		failures++;
		char *after = NULL;
		CHECK(f8_graph_verify(graph, &diag) == F8_OK);
		CHECK(f8_text_print_string(graph, &after, &len) == F8_OK);
		CHECK(before && after && strcmp(before, after) == 0);
		f8_free(after);
	}
	printf("allocation failure: %ld failing runs left the graph as it was, then it ran\n",
	       failures);
	CHECK(succeeded && count_op(graph, F8_OP_ATTENTION_PACKED) == 2 &&
	      f8_graph_verify(graph, &diag) == F8_OK);
	f8_free(before);
	f8_graph_destroy(graph);
}

int main(int argc, char **argv) {
	if (argc != 2) {
		printf("usage: test_attention_layout SOURCE_DIR\n");
		return 2;
	}
	source_dir = argv[1];
	test_exact("f32", " {causal=1}", false, false);
	test_exact("f32", " {scale=0.3}", true, false);
	test_exact("bf16", " {causal=1}", false, false);
	test_exact("bf16", " {causal=1}", true, true);
	test_gpt_tiny();
	test_kept("llama-tiny", NULL, "q is made by Rope");
	f8_recompute_options selective = {.granularity = F8_RECOMPUTE_GRANULARITY_SELECTIVE,
					  .modules = 1u << F8_RECOMPUTE_MODULE_CORE_ATTN};
	test_recompute_clones(&selective);
	test_graph_output();
	test_allocation_failure();
	return test_finish();
}
