/*
 * Attention and AttentionGrad on the GPU through cuDNN (runtime/cuda/attention.h), checked
 * against the CPU reference kernels (runtime/cpu/kernels_attention.c,
 * kernels_grad_attention.c), as the backend test table does for every op
 * (tests/runtime/test_backend_ops.c): each case is a text-IR graph of one Attention and its
 * AttentionGrad, on fresh random inputs, with every output compared by normalized error
 * (tests/runtime/test_compare.h) against a tolerance per dtype.
 *
 * The GPU runs the forward, then the backward on its own o and lse (as a training step does);
 * the reference runs the backward on the reference's. Outputs are poisoned (0xFF bytes: NaN)
 * before a run, so that an element cuDNN did not write cannot pass. Cases: causal and not; head
 * dims 32, 64, 128; seq 128 and 200 (not a multiple of 128: cuDNN <= 9.15's backward needs its
 * padding-mask workaround there); GQA (8 query heads, 2 kv heads) and MQA; causal with
 * s_q < s_kv (the IR's bottom-right rule); an additive mask; f16; the forward without lse;
 * seq 1024 (many tiles); f32 with its backward and f32 forward alone, which may have no
 * engine (then the refusal must say that f32 attention needs --bf16);
 * and the deterministic mode, whose dq, dk and dv must be bit-identical on two runs.
 * Layouts: BHSD (Attention), and the packed cases' AttentionPacked (q, k and v read in place
 * from one qkv (b, s, (h + 2 h_kv) d), o and dO (b, s, h d), dq, dk and dv written in place into
 * one dqkv: TransformerEngine's bs3hd and bshd) with GQA, a mask and the deterministic mode.
 *
 * Every case prints the plans' engine choice (f8_cuda_attention_describe) and each output's
 * NMSE, its bound and the largest error relative to the largest reference magnitude; a
 * failure prints cuDNN's message. The seed comes from the clock and is printed;
 * F8_TEST_SEED=N repeats a run. An argument runs only the cases whose title contains it.
 *
 * As a ctest without a GPU (f8_cuda_open or the cuDNN load answers F8_ERR_UNSUPPORTED) it
 * prints why and exits 77, which ctest counts as skipped.
 *
 * usage: attention_check [TITLE_PART]
 */
#include <math.h>   // ldexp
#include <stdio.h>  // printf, snprintf
#include <stdlib.h> // getenv, strtoul
#include <string.h> // strlen, strstr, memcmp
#include <time.h>   // time

#include "ir/alloc.h"                   // f8_calloc, f8_free
#include "ir/dtype.h"                   // f8_dtype_get_info, f8_dtype_name
#include "runtime/cuda/attention.h"     // f8_cuda_attention_*
#include "runtime/cuda/driver.h"        // f8_cuda_open, f8_cuda_memset_async, f8_cuda_copy_*
#include "runtime/cuda/libraries.h"     // f8_cuda_load, f8_cuda_api
#include "tests/gpu/check_graph.h"      // check_graph_parse, check_reference_run, ...
#include "tests/runtime/test_compare.h" // test_compare
#include "tests/runtime/test_fill.h"    // rng_state, test_fill
#include "tests/test_support.h"         // CHECK, test_finish

typedef struct attention_case {
	const char *title;
	const char *dtype;    // of q, k, v: "bf16", "f16", "f32"
	int64_t batch, heads, kv_heads, seq_q, seq_kv, head_dim;
	bool causal;
	bool mask;            // an additive mask (batch, 1, s_q, s_kv) of q's dtype
	bool forward_only;    // Attention without lse and no AttentionGrad
	bool deterministic;   // also planned deterministic: dq, dk, dv bit-identical on two runs
	bool may_refuse;      // cuDNN may have no engine; the refusal must say "needs --bf16"
	bool packed;          // AttentionPacked and AttentionPackedGrad (self-attention: s_q = s_kv)
} attention_case;

static const attention_case cases[] = {
	{"bf16 d64 s128", "bf16", 2, 8, 8, 128, 128, 64, .causal = false},
	{"bf16 d64 s128 causal", "bf16", 2, 8, 8, 128, 128, 64, .causal = true},
	{"bf16 d64 s200 causal", "bf16", 2, 8, 8, 200, 200, 64, .causal = true},
	{"bf16 d32 s200", "bf16", 2, 8, 8, 200, 200, 32, .causal = false},
	{"bf16 d128 s128 causal", "bf16", 2, 8, 8, 128, 128, 128, .causal = true},
	{"bf16 d128 s200 causal", "bf16", 2, 4, 4, 200, 200, 128, .causal = true},
	{"bf16 GQA 8/2 d64 s128 causal", "bf16", 2, 8, 2, 128, 128, 64, .causal = true},
	{"bf16 GQA 8/2 d128 s200", "bf16", 2, 8, 2, 200, 200, 128, .causal = false},
	{"bf16 MQA 8/1 d32 s128 causal", "bf16", 2, 8, 1, 128, 128, 32, .causal = true},
	{"bf16 MQA 8/1 d64 s200 causal", "bf16", 2, 8, 1, 200, 200, 64, .causal = true},
	{"bf16 causal s_q 128 < s_kv 256 (bottom-right)", "bf16", 2, 4, 4, 128, 256, 64,
	 .causal = true},
	{"bf16 additive mask, causal", "bf16", 2, 4, 4, 128, 128, 64, .causal = true, .mask = true},
	{"bf16 forward without lse", "bf16", 2, 4, 4, 128, 128, 64, .causal = true,
	 .forward_only = true},
	{"f16 d64 s128 causal", "f16", 2, 4, 4, 128, 128, 64, .causal = true},
	{"bf16 deterministic GQA 8/2 d64 s200 causal", "bf16", 2, 8, 2, 200, 200, 64,
	 .causal = true, .deterministic = true},
	{"bf16 deterministic d128 s128", "bf16", 2, 4, 4, 128, 128, 128, .deterministic = true},
	{"bf16 GQA 8/2 d128 s1024 causal", "bf16", 2, 8, 2, 1024, 1024, 128, .causal = true},
	{"f32 d64 s128 causal", "f32", 2, 4, 4, 128, 128, 64, .causal = true, .may_refuse = true},
	{"f32 forward only d64 s128 causal", "f32", 2, 4, 4, 128, 128, 64, .causal = true,
	 .forward_only = true, .may_refuse = true},
	{"packed bf16 d64 s128 causal", "bf16", 2, 8, 8, 128, 128, 64, .causal = true,
	 .packed = true},
	{"packed bf16 d32 s200", "bf16", 2, 4, 4, 200, 200, 32, .packed = true},
	{"packed bf16 GQA 8/2 d128 s200 causal", "bf16", 2, 8, 2, 200, 200, 128, .causal = true,
	 .packed = true},
	{"packed bf16 additive mask, causal", "bf16", 2, 4, 4, 128, 128, 64, .causal = true,
	 .mask = true, .packed = true},
	{"packed bf16 forward without lse", "bf16", 2, 4, 4, 128, 128, 64, .causal = true,
	 .forward_only = true, .packed = true},
	{"packed f16 d64 s128 causal", "f16", 2, 4, 4, 128, 128, 64, .causal = true,
	 .packed = true},
	{"packed bf16 deterministic GQA 8/2 d64 s200 causal", "bf16", 2, 8, 2, 200, 200, 64,
	 .causal = true, .deterministic = true, .packed = true},
	{"packed bf16 d128 s1024 causal", "bf16", 1, 4, 4, 1024, 1024, 128, .causal = true,
	 .packed = true},
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

/*
 * The NMSE bound of an output. With u the unit roundoff of the I/O dtype (2^-8 bf16, 2^-11
 * f16), both sides read the same rounded inputs; the reference then computes in double and
 * rounds once, while cuDNN computes the scores in f32 (exact products of bf16, f32 sums: about
 * 2^-24 relative, nothing at this scale) but rounds P to the I/O dtype before P V ("bmm2
 * aType as i/o type"), which moves each term by up to u relative: o is off by about u/sqrt(3)
 * rms relative (the terms' errors add as a random walk, like the output they make), plus its
 * own rounding, about u/2. So o's NMSE is near u^2/2; the bound is 4 u^2 (2^-14 for bf16: an
 * rms error of two roundings per element). The gradients carry two more such roundings (P and
 * dS to the I/O dtype before the dV, dK and dQ GEMMs) and o's error entering
 * D = rowsum(dO * O): 16 u^2. lse is f32 statistics of f32 scores (a max and the log of a sum
 * of exps, hardware exp and log a few f32 ulps): about 1e-7 relative, NMSE 1e-14; the bound
 * 1e-9. What the bounds catch: a causal mask one column off or a wrong scale (NMSE 1e-2 or
 * more, or a NaN row), a kv head mapped to the wrong query heads (NMSE near 1), lse in log2
 * (0.2). Measured on an H200 with cuDNN 9.14: o 5e-6, the gradients 1.2e-5, lse 5e-15 for
 * bf16, a tenth of the bounds or less. f32 I/O (only the forward has an engine on cuDNN 9.14;
 * it computes in full f32, 7e-14 measured) is held to f16's bounds, which TF32 tensor cores
 * (u = 2^-11) would also meet.
 */
static double tolerance_of(f8_dtype io, f8_dtype output, bool gradient) {
	if (output == F8_DTYPE_F32 && io != F8_DTYPE_F32)
		return 1e-9; // lse
	int bits = io == F8_DTYPE_BF16 ? 8 : 11;
	double u = ldexp(1.0, -bits);
	return (gradient ? 16.0 : 4.0) * u * u;
}

static unsigned seed;

/* A packed case's body: qkv (b, s, (h + 2 h_kv) d), dO (b, s, h d). */
static void packed_body(const attention_case *c, const char *mask_input, const char *mask_arg,
			char *out, size_t size) {
	const char *t = c->dtype;
	long long b = c->batch, h = c->heads, hk = c->kv_heads, s = c->seq_q, d = c->head_dim;
	char attrs[64];
	snprintf(attrs, sizeof attrs, " {heads=%lld, kv_heads=%lld%s}", h, hk,
		 c->causal ? ", causal=1" : "");
	int n = snprintf(out, size, "  input %%qkv : %s[%lld, %lld, %lld]\n"
			 "  input %%do : %s[%lld, %lld, %lld]\n%s",
			 t, b, s, (h + 2 * hk) * d, t, b, s, h * d, mask_input);
	if (c->forward_only)
		snprintf(out + n, size - (size_t)n,
			 "  %%o = AttentionPacked(%%qkv%s)%s\n  output %%o\n", mask_arg, attrs);
	else
		snprintf(out + n, size - (size_t)n,
			 "  %%o, %%lse = AttentionPacked(%%qkv%s)%s\n"
			 "  %%dqkv = AttentionPackedGrad(%%do, %%qkv, %%o, %%lse%s)%s\n"
			 "  output %%o, %%lse, %%dqkv\n", mask_arg, attrs, mask_arg, attrs);
}

/* The body of the case's graph (leaves, nodes, outputs; check_graph_parse's `body`) into
 * `out`. */
static void case_body(const attention_case *c, char *out, size_t size) {
	const char *t = c->dtype;
	long long b = c->batch, h = c->heads, hk = c->kv_heads, sq = c->seq_q, skv = c->seq_kv;
	long long d = c->head_dim;
	char mask_input[96] = "", mask_arg[8] = "";
	if (c->mask) {
		snprintf(mask_input, sizeof mask_input, "  input %%m : %s[%lld, 1, %lld, %lld]\n", t,
			 b, sq, skv);
		snprintf(mask_arg, sizeof mask_arg, ", %%m");
	}
	if (c->packed) {
		packed_body(c, mask_input, mask_arg, out, size);
		return;
	}
	const char *attrs = c->causal ? " {causal=1}" : "";
	int n = snprintf(out, size,
			 "  input %%q : %s[%lld, %lld, %lld, %lld]\n"
			 "  input %%k : %s[%lld, %lld, %lld, %lld]\n"
			 "  input %%v : %s[%lld, %lld, %lld, %lld]\n"
			 "  input %%do : %s[%lld, %lld, %lld, %lld]\n%s",
			 t, b, h, sq, d, t, b, hk, skv, d, t, b, hk, skv, d, t, b, h, sq, d,
			 mask_input);
	if (c->forward_only)
		snprintf(out + n, size - (size_t)n,
			 "  %%o = Attention(%%q, %%k, %%v%s)%s\n  output %%o\n", mask_arg, attrs);
	else
		snprintf(out + n, size - (size_t)n,
			 "  %%o, %%lse = Attention(%%q, %%k, %%v%s)%s\n"
			 "  %%dq, %%dk, %%dv = AttentionGrad(%%do, %%q, %%k, %%v, %%o, %%lse%s)%s\n"
			 "  output %%o, %%lse, %%dq, %%dk, %%dv\n",
			 mask_arg, attrs, mask_arg, attrs);
}

/* Poisons node `id`'s outputs (0xFF: NaN in every float dtype) and runs it on the GPU. */
static f8_status gpu_run(f8_cuda_attention *attention, const f8_graph *graph, f8_node_id id,
			 const check_device_values *values, f8_diag *diag) {
	const f8_node *node = &graph->nodes[id];
	CUdeviceptr inputs[8] = {0}, outputs[4] = {0};
	for (uint32_t i = 0; i < node->n_inputs; i++)
		inputs[i] = node->inputs[i] == F8_NONE ? 0 : values->pointers[node->inputs[i]];
	f8_status status = F8_OK;
	for (uint32_t o = 0; !status && o < node->n_outputs; o++) {
		f8_rt_tensor shape;
		outputs[o] = values->pointers[node->outputs[o]];
		if (!check_tensor_make(graph, NULL, node->outputs[o], &shape))
			return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
		status = f8_cuda_memset_async(outputs[o], 0xFF, shape.n_bytes, NULL, diag);
		f8_rt_tensor_destroy(&shape);
	}
	if (!status)
		status = f8_cuda_attention_run(attention, id, inputs, outputs, diag);
	if (!status)
		status = f8_cuda_synchronize(diag);
	return status;
}

/* Value `id` from the GPU into a new host tensor. */
static f8_status download(const f8_graph *graph, f8_value_id id,
			  const check_device_values *values, f8_rt_tensor *out, f8_diag *diag) {
	if (!check_tensor_make(graph, NULL, id, out))
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	return out->n_bytes ? f8_cuda_copy_to_host(out->data, values->pointers[id], out->n_bytes,
						   diag)
			    : F8_OK;
}

/* The nodes of the case's graph: its Attention and its AttentionGrad (F8_NONE: none). */
static void find_nodes(const f8_graph *graph, f8_node_id *forward, f8_node_id *backward) {
	*forward = *backward = F8_NONE;
	for (uint32_t i = 0; i < graph->n_order; i++) {
		f8_node_id id = graph->order[i];
		f8_op op = graph->nodes[id].op;
		if (op == F8_OP_ATTENTION || op == F8_OP_ATTENTION_PACKED)
			*forward = id;
		if (op == F8_OP_ATTENTION_GRAD || op == F8_OP_ATTENTION_PACKED_GRAD)
			*backward = id;
	}
}

/* Compares every graph output on the GPU with the reference; true when all are in bounds. */
static bool compare_outputs(const f8_graph *graph, const f8_rt_tensor *want,
			    const check_device_values *values, f8_diag *diag) {
	bool ok = true;
	f8_dtype io = graph->values[graph->inputs[0]].type.dtype;
	for (uint32_t o = 0; o < graph->n_outputs; o++) {
		f8_value_id id = graph->outputs[o];
		const f8_value *value = &graph->values[id];
		f8_rt_tensor got;
		if (download(graph, id, values, &got, diag)) {
			printf("  FAIL reading %%%s: ", value->name);
			f8_diag_print(diag, stdout);
			return false;
		}
		f8_op by = graph->nodes[value->producer].op;
		bool gradient = by == F8_OP_ATTENTION_GRAD || by == F8_OP_ATTENTION_PACKED_GRAD;
		double tolerance = tolerance_of(io, value->type.dtype, gradient);
		test_comparison r = test_compare(&got, &want[id], false);
		bool passed = r.bad == 0 && r.nmse <= tolerance;
		printf("  %-4s %-5s NMSE %-9.3g (bound %.2g) max error %.3g of the largest; %lld of "
		       "%lld differ", value->name, f8_dtype_name(value->type.dtype), r.nmse,
		       tolerance, r.max_relative, (long long)r.differ,
		       (long long)f8_rt_tensor_numel(&got));
		if (!passed && r.at >= 0)
			printf(", %s at %lld: reference %.9g, GPU %.9g",
			       r.bad ? "against the rules" : "the most", (long long)r.at, r.want, r.got);
		printf(" %s\n", passed ? "ok" : "FAIL");
		ok &= passed;
		f8_rt_tensor_destroy(&got);
	}
	return ok;
}

/* Plans the case with `deterministic`, prints the plans' choices; NULL (the failure printed,
 * or for a case that may be refused, the refusal checked) when cuDNN refuses it. */
static f8_cuda_attention *plan_case(const attention_case *c, const f8_graph *graph,
				    bool deterministic, bool *refused) {
	f8_diag diag = {0};
	f8_cuda_attention *attention = NULL;
	*refused = false;
	f8_status status = f8_cuda_attention_create(graph, NULL, NULL, deterministic, NULL, &attention,
						    &diag);
	if (status) {
		*refused = true;
		bool expected = c->may_refuse && status == F8_ERR_UNSUPPORTED &&
				strstr(diag.message, "needs --bf16");
		printf("  %s: ", expected ? "refused, as allowed" : "FAIL planning");
		f8_diag_print(&diag, stdout);
		CHECK(expected);
		return NULL;
	}
	f8_node_id forward, backward;
	find_nodes(graph, &forward, &backward);
	char text[600];
	f8_cuda_attention_describe(attention, forward, text, sizeof text);
	printf("  plan %s\n", text);
	if (backward != F8_NONE) {
		f8_cuda_attention_describe(attention, backward, text, sizeof text);
		printf("  plan %s\n", text);
	}
	printf("  device bytes %llu\n",
	       (unsigned long long)f8_cuda_attention_device_bytes(attention));
	return attention;
}

/* Runs the case's nodes on the GPU with `attention`, the backward twice: the gradients of the
 * first run into first[] (AttentionGrad's outputs, in order), *identical when the second
 * gave the same bytes. The device values hold the second run's outputs. */
static bool run_twice(f8_cuda_attention *attention, const f8_graph *graph,
		      const check_device_values *values, f8_rt_tensor *first, bool *identical) {
	f8_diag diag = {0};
	f8_node_id forward, backward;
	find_nodes(graph, &forward, &backward);
	f8_status status = gpu_run(attention, graph, forward, values, &diag);
	*identical = true;
	for (int run = 0; !status && backward != F8_NONE && run < 2; run++) {
		status = gpu_run(attention, graph, backward, values, &diag);
		for (uint32_t o = 0; !status && o < graph->nodes[backward].n_outputs; o++) {
			f8_value_id id = graph->nodes[backward].outputs[o];
			if (run == 0) {
				status = download(graph, id, values, &first[o], &diag);
				continue;
			}
			f8_rt_tensor again;
			status = download(graph, id, values, &again, &diag);
			if (!status && memcmp(again.data, first[o].data, again.n_bytes) != 0)
				*identical = false;
			f8_rt_tensor_destroy(&again);
		}
	}
	if (status) {
		printf("  FAIL running: ");
		f8_diag_print(&diag, stdout);
		return false;
	}
	return true;
}

static void run_case(uint32_t index) {
	const attention_case *c = &cases[index];
	printf("%s\n", c->title);
	f8_diag diag = {0};
	char body[2048];
	case_body(c, body, sizeof body);
	f8_graph *graph = check_graph_parse(c->title, body, &diag);
	if (!graph) {
		printf("  FAIL building the graph: ");
		f8_diag_print(&diag, stdout);
		CHECK(false);
		return;
	}
	rng_state = ((uint64_t)seed << 32) ^ index;
	f8_rt_tensor *tensors = f8_calloc(graph->n_values, sizeof *tensors);
	bool ok = tensors != NULL;
	// Scores spread over a few units (q, k in [-2, 2] give a score sd of about 1.3 after
	// 1/sqrt(d)): softmaxes neither flat nor one-hot. Never zeros but by chance.
	for (uint32_t i = 0; ok && i < graph->n_inputs; i++) {
		f8_value_id id = graph->inputs[i];
		const char *name = graph->values[id].name;
		const char *fill = name[0] == 'q' || name[0] == 'k' ? "uniform:-2:2"
				   : name[0] == 'm'                 ? "uniform:-2:0"
								    : "uniform:-1:1";
		ok = check_tensor_make(graph, NULL, id, &tensors[id]) &&
		     test_fill(&tensors[id], fill, "");
	}
	f8_node_id forward, backward;
	find_nodes(graph, &forward, &backward);
	f8_status status = ok ? check_reference_run(graph, NULL, forward, tensors, &diag)
			      : F8_ERR_NOMEM;
	if (!status && backward != F8_NONE)
		status = check_reference_run(graph, NULL, backward, tensors, &diag);
	if (status) {
		printf("  FAIL the reference: ");
		f8_diag_print(&diag, stdout);
		CHECK(false);
	}
	// The reference's outputs go to the device too; gpu_run poisons a node's outputs before it
	// runs, so the GPU never reads them.
	check_device_values values = {0};
	if (!status && (status = check_device_values_create(graph, tensors, &values, &diag))) {
		printf("  FAIL device memory: ");
		f8_diag_print(&diag, stdout);
		CHECK(false);
	}
	bool refused = false;
	f8_cuda_attention *attention = status ? NULL : plan_case(c, graph, false, &refused);
	if (attention) {
		f8_rt_tensor first[3] = {0};
		bool identical;
		bool passed = run_twice(attention, graph, &values, first, &identical) &&
			      compare_outputs(graph, tensors, &values, &diag);
		if (backward != F8_NONE)
			printf("  default mode: dq, dk, dv %s on two runs\n",
			       identical ? "bit-identical" : "differ");
		for (int o = 0; o < 3; o++)
			f8_rt_tensor_destroy(&first[o]);
		CHECK(passed);
		printf("  %s\n", passed ? "OK" : "FAIL");
	} else if (!status && !refused) {
		CHECK(false);
	}
	f8_cuda_attention_destroy(attention);
	if (c->deterministic && !status && !refused) {
		attention = plan_case(c, graph, true, &refused);
		f8_rt_tensor first[3] = {0};
		bool identical = false;
		bool passed = attention && run_twice(attention, graph, &values, first, &identical) &&
			      compare_outputs(graph, tensors, &values, &diag);
		printf("  deterministic: dq, dk, dv %s on two runs %s\n",
		       identical ? "bit-identical" : "DIFFER", passed && identical ? "OK" : "FAIL");
		CHECK(passed && identical);
		for (int o = 0; o < 3; o++)
			f8_rt_tensor_destroy(&first[o]);
		f8_cuda_attention_destroy(attention);
	}
	check_device_values_destroy(&values);
	check_tensors_destroy(graph, tensors);
	f8_graph_destroy(graph);
}

int main(int argc, char **argv) {
	setvbuf(stdout, NULL, _IOLBF, 0); // lines in order with cuDNN's own logging on stderr
	f8_cuda_device device;
	f8_diag diag = {0};
	f8_status status = f8_cuda_open(&device, &diag);
	if (!status)
		status = f8_cuda_load(F8_CUDA_LIBRARY_CUDNN, &diag);
	if (status == F8_ERR_UNSUPPORTED) {
		printf("attention_check: needs a GPU with cuDNN 9.14 or newer: ");
		f8_diag_print(&diag, stdout);
		f8_cuda_close(&device);
		return 77;
	}
	if (status) {
		f8_diag_print(&diag, stdout);
		return 1;
	}
	const char *fixed = getenv("F8_TEST_SEED");
	seed = fixed ? (unsigned)strtoul(fixed, NULL, 10) : (unsigned)time(NULL);
	time_t now = time(NULL);
	printf("%s, sm_%d%d, driver %d, cuDNN %zu (headers %d), %s", device.name,
	       device.compute_major, device.compute_minor, device.driver_version,
	       f8_cuda_api.cudnnGetVersion(), CUDNN_VERSION, ctime(&now));
	printf("seed %u (F8_TEST_SEED=%u repeats this run)\n", seed, seed);
	const char *only = argc > 1 ? argv[1] : NULL;
	for (uint32_t i = 0; i < N_CASES; i++)
		if (!only || strstr(cases[i].title, only))
			run_case(i);
	f8_cuda_close(&device);
	return test_finish();
}
