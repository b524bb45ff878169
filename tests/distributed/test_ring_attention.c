/*
 * RingAttention and RingAttentionGrad (runtime/cpu/kernels_ring_attention.c) against Attention
 * and AttentionGrad over the whole sequence: every rank makes the same random q, k, v and dout
 * of the whole sequence (the seed from rank 0's clock, printed), runs the whole attention and
 * its backward, takes its rows (chunks r and 2 ranks - 1 - r: causal load balancing), runs the
 * ring kernels over the group with MPI's sendrecv (f8_dist_ring_shift), and checks its output,
 * log-sum-exp, dq, dk and dv against the whole's rows at its places. Causal and not, with
 * grouped-query heads. Then the collectives of the same layout (balanced=1) through the CPU
 * backend: LocalShard takes the rank's rows, AllGather puts every rank's back in their places,
 * ReduceScatter sums the ranks' wholes into each rank's rows. One process (no mpirun) checks the
 * ring of one rank the same way; CTest runs it so and under mpirun with 2 and 3 ranks.
 *
 * usage: [mpirun -np N] test_ring_attention
 */
#include <math.h>   // fabs
#include <stdio.h>  // printf
#include <string.h> // strlen, memcpy

#include "ir/text.h"                 // f8_text_parse
#include "passes/pipeline.h"         // f8_pipeline_run
#include "runtime/cpu/backend.h"     // f8_cpu_backend_create_distributed
#include "runtime/executor.h"        // f8_executor_*
#include "runtime/cpu/kernels.h"     // f8_cpu_kernel_get, f8_cpu_kernel_call, f8_cpu_ring
#include "runtime/distributed.h"     // f8_dist_*
#include "tests/distributed/test_ranks.h" // test_ranks_start
#include "tests/runtime/test_fill.h" // rng_state, rng_uniform
#include "tests/test_support.h"      // CHECK, test_finish

enum { BATCH = 2, HEADS = 4, KV_HEADS = 2, DIM = 8, CHUNK = 3 };

static f8_dist *dist;

static f8_status shift(void *context, const void *out, void *in, size_t bytes, f8_diag *diag) {
	(void)context;
	return f8_dist_ring_shift(dist, 1u << F8_MESH_AXIS_CP, out, in, bytes, diag);
}

/* A (BATCH, heads, seq, DIM) f32 tensor, random in [-2, 2) or zero. */
static f8_rt_tensor tensor(int64_t heads, int64_t seq, bool random) {
	int64_t dims[4] = {BATCH, heads, seq, DIM};
	f8_rt_tensor t = {0};
	f8_diag diag = {0};
	CHECK(f8_rt_tensor_create(F8_DTYPE_F32, 4, dims, &t, &diag) == F8_OK);
	for (int64_t i = 0; random && i < f8_rt_tensor_numel(&t); i++)
		f8_rt_tensor_set(&t, i, rng_uniform(-2, 2));
	return t;
}

/* Rows of `whole` (batch, heads, seq[, inner]) at this rank's places into `part` (batch, heads,
 * rows[, inner]); inner: the elements of a row. */
static void rows_of(f8_rt_tensor *whole, f8_rt_tensor *part, int64_t inner, int64_t place,
		    int64_t ranks) {
	int64_t seq = whole->dims[2], rows = part->dims[2]; // (batch, heads, seq, ...)
	int64_t outer = f8_rt_tensor_numel(whole) / (seq * inner);
	size_t row = (size_t)inner * sizeof(float);
	for (int64_t o = 0; o < outer; o++) {
		for (int64_t i = 0; i < rows; i++) {
			int64_t at = i < CHUNK ? place * CHUNK + i : (2 * ranks - 1 - place) * CHUNK + i - CHUNK;
			memcpy((float *)part->data + (o * rows + i) * inner,
			       (float *)whole->data + (o * seq + at) * inner, row);
		}
	}
}

/* The largest difference of `got` from `want` relative to want's largest magnitude. */
static double error(const f8_rt_tensor *got, const f8_rt_tensor *want) {
	double worst = 0, scale = 1e-30;
	for (int64_t i = 0; i < f8_rt_tensor_numel(want); i++) {
		double w = f8_rt_tensor_get(want, i);
		scale = fabs(w) > scale ? fabs(w) : scale;
		double d = fabs(f8_rt_tensor_get(got, i) - w);
		worst = d > worst ? d : worst;
	}
	return worst / scale;
}

/* Runs the kernel of `graph`'s one node on `inputs` into `outputs` (created to the node's
 * types with `seq` bound, zeroed), with `ring` (NULL: one rank). */
static f8_status run(const f8_graph *graph, const f8_rt_tensor *const *inputs,
		     f8_rt_tensor *outputs, const f8_cpu_ring *ring, int64_t seq) {
	const f8_node *node = &graph->nodes[graph->order[0]];
	int64_t symbols[1] = {seq};
	f8_diag diag = {0};
	for (uint32_t o = 0; o < node->n_outputs; o++) {
		const f8_type *type = &graph->values[node->outputs[o]].type;
		int64_t dims[F8_MAX_RANK];
		for (int d = 0; d < type->shape.rank; d++)
			f8_dim_evaluate(type->shape.dims[d], symbols, &dims[d]);
		if (f8_rt_tensor_create(type->dtype, type->shape.rank, dims, &outputs[o], &diag))
			return F8_ERR_NOMEM;
	}
	f8_cpu_kernel_call call = {.graph = graph, .node = node, .symbol_values = symbols,
				   .inputs = inputs, .outputs = outputs, .ring = ring};
	f8_status status = f8_cpu_kernel_get(node->op)(&call, &diag);
	if (status)
		f8_diag_print(&diag, stdout);
	return status;
}

static f8_graph *parse(const char *text) {
	f8_graph *graph = NULL;
	f8_diag diag = {0};
	if (f8_text_parse(text, strlen(text), "test", &graph, &diag) ||
	    f8_pipeline_run(graph, "canonicalize", true, &diag)) {
		f8_diag_print(&diag, stdout);
		f8_graph_destroy(graph);
		return NULL;
	}
	return graph;
}

/* A graph of `op` (Attention, RingAttention) with `attrs` on q, k, v (seq rows), then its
 * gradient op on dout g and the forward's out o and lse l: two nodes, run one at a time. */
static f8_graph *attention_graph(const char *op, const char *attrs) {
	char text[2048];
	snprintf(text, sizeof text,
		 "graph %s {\n input %%q : f32[%d, %d, seq, %d]\n input %%k : f32[%d, %d, seq, %d]\n"
		 " input %%v : f32[%d, %d, seq, %d]\n input %%g : f32[%d, %d, seq, %d]\n"
		 " input %%o : f32[%d, %d, seq, %d]\n input %%l : f32[%d, %d, seq]\n"
		 " %%y, %%lse = %s(%%q, %%k, %%v) {%s}\n"
		 " %%dq, %%dk, %%dv = %sGrad(%%g, %%q, %%k, %%v, %%o, %%l) {%s}\n"
		 " output %%y, %%lse, %%dq, %%dk, %%dv\n}\n",
		 op, BATCH, HEADS, DIM, BATCH, KV_HEADS, DIM, BATCH, KV_HEADS, DIM, BATCH, HEADS, DIM,
		 BATCH, HEADS, DIM, BATCH, HEADS, op, attrs, op, attrs);
	return parse(text);
}

/* One case: the ring of `ranks` (this process at `place`) against the whole sequence. */
static void check_case(bool causal, int64_t place, int64_t ranks) {
	const char *attrs = causal ? "causal=1" : "causal=0";
	char ring_attrs[128];
	snprintf(ring_attrs, sizeof ring_attrs, "group=\"cp\", ranks=%lld, %s", (long long)ranks,
		 attrs);
	f8_graph *whole_graph = attention_graph("Attention", attrs);
	f8_graph *ring_graph = attention_graph("RingAttention", ring_attrs);
	CHECK(whole_graph && ring_graph);
	if (!whole_graph || !ring_graph) {
		f8_graph_destroy(whole_graph);
		return;
	}
	int64_t seq = 2 * CHUNK * ranks, rows = 2 * CHUNK;
	f8_rt_tensor q = tensor(HEADS, seq, true), k = tensor(KV_HEADS, seq, true);
	f8_rt_tensor v = tensor(KV_HEADS, seq, true), g = tensor(HEADS, seq, true);
	// The whole sequence: forward, then backward from its own outputs.
	f8_rt_tensor whole[5] = {0}, grads[3] = {0}, part[5] = {0}, part_grads[3] = {0};
	const f8_rt_tensor *forward[3] = {&q, &k, &v};
	f8_graph forward_graph = *whole_graph, backward_graph = *whole_graph;
	backward_graph.order = whole_graph->order + 1;
	CHECK(run(&forward_graph, forward, whole, NULL, seq) == F8_OK);
	const f8_rt_tensor *backward[6] = {&g, &q, &k, &v, &whole[0], &whole[1]};
	CHECK(run(&backward_graph, backward, grads, NULL, seq) == F8_OK);
	// This rank's rows, round the ring.
	f8_rt_tensor lq = tensor(HEADS, rows, false), lk = tensor(KV_HEADS, rows, false);
	f8_rt_tensor lv = tensor(KV_HEADS, rows, false), lg = tensor(HEADS, rows, false);
	rows_of(&q, &lq, DIM, place, ranks), rows_of(&k, &lk, DIM, place, ranks);
	rows_of(&v, &lv, DIM, place, ranks), rows_of(&g, &lg, DIM, place, ranks);
	f8_cpu_ring ring = {.ranks = ranks, .place = place, .shift = shift};
	const f8_cpu_ring *over = ranks > 1 ? &ring : NULL;
	const f8_rt_tensor *ring_forward[3] = {&lq, &lk, &lv};
	f8_graph ring_forward_graph = *ring_graph, ring_backward_graph = *ring_graph;
	ring_backward_graph.order = ring_graph->order + 1;
	CHECK(run(&ring_forward_graph, ring_forward, part, over, rows) == F8_OK);
	const f8_rt_tensor *ring_backward[6] = {&lg, &lq, &lk, &lv, &part[0], &part[1]};
	CHECK(run(&ring_backward_graph, ring_backward, part_grads, over, rows) == F8_OK);
	// The whole's rows at this rank's places, against the ring's.
	f8_rt_tensor want_y = tensor(HEADS, rows, false), want_dq = tensor(HEADS, rows, false);
	f8_rt_tensor want_dk = tensor(KV_HEADS, rows, false), want_dv = tensor(KV_HEADS, rows, false);
	int64_t lse_dims[3] = {BATCH, HEADS, rows};
	f8_rt_tensor want_lse = {0};
	f8_diag diag = {0};
	CHECK(f8_rt_tensor_create(F8_DTYPE_F32, 3, lse_dims, &want_lse, &diag) == F8_OK);
	rows_of(&whole[0], &want_y, DIM, place, ranks);
	rows_of(&whole[1], &want_lse, 1, place, ranks);
	rows_of(&grads[0], &want_dq, DIM, place, ranks);
	rows_of(&grads[1], &want_dk, DIM, place, ranks);
	rows_of(&grads[2], &want_dv, DIM, place, ranks);
	const struct {
		const char *name;
		const f8_rt_tensor *got, *want;
	} outputs[] = {{"out", &part[0], &want_y}, {"lse", &part[1], &want_lse},
		       {"dq", &part_grads[0], &want_dq}, {"dk", &part_grads[1], &want_dk},
		       {"dv", &part_grads[2], &want_dv}};
	for (size_t i = 0; i < sizeof outputs / sizeof outputs[0]; i++) {
		double e = error(outputs[i].got, outputs[i].want);
		bool ok = e <= 1e-6;
		printf("%s rank %lld of %lld, %s: %s within %.1e of the whole sequence's (%.1e)\n",
		       ok ? "ok  " : "FAIL", (long long)place, (long long)ranks,
		       causal ? "causal" : "not causal", outputs[i].name, 1e-6, e);
		CHECK(ok);
	}
	f8_rt_tensor *all[] = {&q, &k, &v, &g, &lq, &lk, &lv, &lg, &want_y, &want_dq, &want_dk,
			       &want_dv, &want_lse};
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
		f8_rt_tensor_destroy(all[i]);
	for (int i = 0; i < 5; i++)
		f8_rt_tensor_destroy(&whole[i]), f8_rt_tensor_destroy(&part[i]);
	for (int i = 0; i < 3; i++)
		f8_rt_tensor_destroy(&grads[i]), f8_rt_tensor_destroy(&part_grads[i]);
	f8_graph_destroy(whole_graph);
	f8_graph_destroy(ring_graph);
}

/* LocalShard, AllGather and ReduceScatter {balanced=1} along the sequence (dim 2) of a
 * (BATCH, HEADS, seq, DIM) tensor every rank holds the same, through the CPU backend. */
static void check_balanced_parts(int64_t place, int64_t ranks) {
	char text[1024];
	const char *over = "group=\"cp\", axis=2, ranks=%lld, balanced=1";
	char attrs[96];
	snprintf(attrs, sizeof attrs, over, (long long)ranks);
	int64_t seq = 2 * CHUNK * ranks;
	snprintf(text, sizeof text,
		 "graph parts {\n mesh cp=%lld\n input %%x : f32[%d, %d, %lld, %d]\n"
		 " %%y = LocalShard(%%x) {%s}\n %%z = AllGather(%%y) {%s}\n"
		 " %%w = ReduceScatter(%%x) {%s}\n output %%y, %%z, %%w\n}\n",
		 (long long)ranks, BATCH, HEADS, (long long)seq, DIM, attrs, attrs, attrs);
	f8_graph *graph = parse(text);
	CHECK(graph != NULL);
	if (!graph)
		return;
	f8_rt_tensor x = tensor(HEADS, seq, true), rows = tensor(HEADS, 2 * CHUNK, false);
	f8_rt_tensor got[3] = {0};
	rows_of(&x, &rows, DIM, place, ranks);
	f8_backend *backend = NULL;
	f8_executor *executor = NULL;
	f8_diag diag = {0};
	f8_status status = f8_cpu_backend_create_distributed(F8_CPU_KERNELS_REFERENCE,
							     ranks > 1 ? dist : NULL, &backend, &diag);
	if (!status)
		status = f8_executor_create(graph, NULL, backend, &executor, &diag);
	if (!status)
		status = f8_executor_write(executor, graph->inputs[0], &x, &diag);
	if (!status)
		status = f8_executor_run(executor, F8_PHASES_ALL, &diag);
	for (int i = 0; !status && i < 3; i++)
		status = f8_executor_read(executor, graph->outputs[i], &got[i], &diag);
	if (status)
		f8_diag_print(&diag, stdout);
	CHECK(status == F8_OK);
	if (!status) {
		f8_rt_tensor summed = tensor(HEADS, 2 * CHUNK, false);
		for (int64_t i = 0; i < f8_rt_tensor_numel(&summed); i++)
			f8_rt_tensor_set(&summed, i, (double)ranks * f8_rt_tensor_get(&rows, i));
		const struct {
			const char *what;
			const f8_rt_tensor *got, *want;
		} cases[] = {{"LocalShard: the rank's chunks", &got[0], &rows},
			     {"AllGather: every rank's chunks in their places", &got[1], &x},
			     {"ReduceScatter: the ranks' wholes summed, the rank's chunks", &got[2],
			      &summed}};
		for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
			bool ok = f8_rt_tensor_numel(cases[i].got) == f8_rt_tensor_numel(cases[i].want) &&
				  error(cases[i].got, cases[i].want) <= 1e-6;
			printf("%s rank %lld of %lld, balanced=1 %s\n", ok ? "ok  " : "FAIL",
			       (long long)place, (long long)ranks, cases[i].what);
			CHECK(ok);
		}
		f8_rt_tensor_destroy(&summed);
	}
	for (int i = 0; i < 3; i++)
		f8_rt_tensor_destroy(&got[i]);
	f8_rt_tensor_destroy(&x), f8_rt_tensor_destroy(&rows);
	f8_executor_destroy(executor);
	f8_backend_destroy(backend);
	f8_graph_destroy(graph);
}

int main(void) {
	f8_dist_launch launch;
	int64_t seed;
	if (!(dist = test_ranks_start(F8_MESH_AXIS_CP, &launch, &seed)))
		return 1;
	for (int causal = 1; causal >= 0; causal--) {
		rng_state = (uint64_t)seed + (uint64_t)causal;
		check_case(causal, f8_dist_group_rank(dist, 1u << F8_MESH_AXIS_CP), launch.world);
	}
	rng_state = (uint64_t)seed + 2;
	check_balanced_parts(f8_dist_group_rank(dist, 1u << F8_MESH_AXIS_CP), launch.world);
	f8_dist_destroy(dist);
	return test_finish();
}
