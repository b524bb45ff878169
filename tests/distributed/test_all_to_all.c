/*
 * AllToAllDispatch and AllToAllCombine (runtime/cpu/kernels_all_to_all.c), expert parallelism's
 * exchange, against the layout ir/ops.def gives them: every rank makes the same random rows and
 * counts of every rank (the seed from rank 0's clock, printed; some experts get no rows), runs
 * the dispatch over the group with MPI's all-to-all (f8_dist_all_to_all), and checks, bit for
 * bit, that what it received is every rank's rows of its experts grouped by local expert and
 * then by the rank they came from, the buffer's other rows zeros, with the rows per local expert
 * and per rank; that the dispatch given those counts (a gradient's) receives the same; and that
 * the combine sends every row back to its place (the round trip is the identity). One process
 * (no mpirun) checks a group of one rank the same way; CTest runs it so and under mpirun with 2
 * and 3 ranks. With two ranks or more it also checks that point-to-point messages are matched by
 * their tag (the interleaved pipeline's): rank 1 receives rank 0's second message first, by
 * its tag.
 *
 * usage: [mpirun -np N] test_all_to_all
 */
#include <stdio.h>  // printf, snprintf
#include <string.h> // strlen, memcmp, memcpy

#include "ir/text.h"                 // f8_text_parse
#include "passes/pipeline.h"         // f8_pipeline_run
#include "runtime/cpu/kernels.h"     // f8_cpu_kernel_get, f8_cpu_kernel_call, f8_cpu_ring
#include "runtime/distributed.h"     // f8_dist_*
#include "tests/distributed/test_ranks.h" // test_ranks_start
#include "tests/runtime/test_fill.h" // rng_state, rng_uniform
#include "tests/test_support.h"      // CHECK, test_finish

enum { LOCAL = 2, ROWS = 7, HIDDEN = 3, MAX_RANKS = 8 };

static f8_dist *dist;

static f8_status all_to_all(void *context, const void *out, const size_t *out_bytes, void *in,
			    const size_t *in_bytes, f8_diag *diag) {
	(void)context;
	return f8_dist_all_to_all(dist, 1u << F8_MESH_AXIS_EP, out, out_bytes, in, in_bytes, diag);
}

/* Runs the kernel of `graph`'s node at place `at` on `inputs` into `outputs` (created to the
 * node's types, zeroed), with `ring` (NULL: one rank). */
static f8_status run(const f8_graph *graph, uint32_t at, const f8_rt_tensor *const *inputs,
		     f8_rt_tensor *outputs, const f8_cpu_ring *ring) {
	const f8_node *node = &graph->nodes[graph->order[at]];
	f8_diag diag = {0};
	for (uint32_t o = 0; o < node->n_outputs; o++) {
		const f8_type *type = &graph->values[node->outputs[o]].type;
		int64_t dims[F8_MAX_RANK];
		for (int d = 0; d < type->shape.rank; d++)
			dims[d] = f8_dim_value(type->shape.dims[d]);
		if (f8_rt_tensor_create(type->dtype, type->shape.rank, dims, &outputs[o], &diag))
			return F8_ERR_NOMEM;
	}
	f8_cpu_kernel_call call = {.graph = graph, .node = node, .inputs = inputs,
				   .outputs = outputs, .ring = ring};
	f8_status status = f8_cpu_kernel_get(node->op)(&call, &diag);
	if (status)
		f8_diag_print(&diag, stdout);
	return status;
}

/* The dispatch, the combine of its rows back, and the dispatch given the counts received. */
static f8_graph *exchange_graph(int64_t ranks) {
	char text[1024];
	int64_t experts = LOCAL * ranks;
	snprintf(text, sizeof text,
		 "graph exchange {\n input %%x : f32[%d, %d]\n input %%counts : i64[%lld]\n"
		 " %%y, %%local, %%received = AllToAllDispatch(%%x, %%counts) {group=\"ep\", "
		 "ranks=%lld}\n"
		 " %%back = AllToAllCombine(%%y, %%counts, %%received) {group=\"ep\", ranks=%lld}\n"
		 " %%again = AllToAllDispatch(%%x, %%counts, %%received) {group=\"ep\", "
		 "ranks=%lld}\n"
		 " output %%local, %%back, %%again\n}\n",
		 ROWS, HIDDEN, (long long)experts, (long long)ranks, (long long)ranks,
		 (long long)ranks);
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

/* Every rank's rows and counts (the same on every rank): rank r's counts of its ROWS rows over
 * the experts, some of them none, and its rows, random. */
static void make_data(int64_t ranks, int64_t counts[][MAX_RANKS * LOCAL],
		      float rows[][ROWS * HIDDEN]) {
	int64_t experts = LOCAL * ranks;
	for (int64_t r = 0; r < ranks; r++) {
		for (int64_t e = 0; e < experts; e++)
			counts[r][e] = 0;
		for (int64_t i = 0; i < ROWS; i++) { // each row to a random expert; every third
			int64_t e = (int64_t)rng_uniform(0, (double)experts); // expert stays empty
			counts[r][e % 3 == 2 ? (e + 1) % experts : e]++;
		}
		for (int64_t i = 0; i < ROWS * HIDDEN; i++)
			rows[r][i] = (float)rng_uniform(-2, 2);
	}
}

/* The rank at `place`: its dispatch, the dispatch given the counts, and the combine, checked. */
static void check_exchange(int64_t place, int64_t ranks) {
	f8_graph *graph = exchange_graph(ranks);
	CHECK(graph != NULL);
	if (!graph)
		return;
	static int64_t counts[MAX_RANKS][MAX_RANKS * LOCAL];
	static float rows[MAX_RANKS][ROWS * HIDDEN];
	make_data(ranks, counts, rows);
	int64_t experts = LOCAL * ranks, x_dims[2] = {ROWS, HIDDEN}, counts_dims[1] = {experts};
	f8_diag diag = {0};
	f8_rt_tensor x = {0}, c = {0};
	CHECK(f8_rt_tensor_create(F8_DTYPE_F32, 2, x_dims, &x, &diag) == F8_OK);
	CHECK(f8_rt_tensor_create(F8_DTYPE_I64, 1, counts_dims, &c, &diag) == F8_OK);
	memcpy(x.data, rows[place], sizeof rows[place]);
	memcpy(c.data, counts[place], (size_t)experts * sizeof(int64_t));
	// What the rank's experts receive: by local expert, then by the rank it came from.
	float want[MAX_RANKS * ROWS * HIDDEN] = {0};
	int64_t want_local[LOCAL] = {0}, want_received[MAX_RANKS * LOCAL] = {0}, at = 0;
	for (int64_t l = 0; l < LOCAL; l++) {
		int64_t e = place * LOCAL + l;
		for (int64_t r = 0; r < ranks; r++) {
			int64_t first = 0;
			for (int64_t k = 0; k < e; k++)
				first += counts[r][k];
			memcpy(&want[at * HIDDEN], &rows[r][first * HIDDEN],
			       (size_t)(counts[r][e] * HIDDEN) * sizeof(float));
			at += counts[r][e];
			want_local[l] += counts[r][e];
			want_received[r * LOCAL + l] = counts[r][e];
		}
	}
	f8_cpu_ring ring = {.ranks = ranks, .place = place, .all_to_all = all_to_all};
	const f8_cpu_ring *group = ranks > 1 ? &ring : NULL;
	f8_rt_tensor out[3] = {{0}}, back[1] = {{0}}, again[3] = {{0}};
	const f8_rt_tensor *dispatch_in[2] = {&x, &c};
	bool ran = run(graph, 0, dispatch_in, out, group) == F8_OK;
	CHECK(ran);
	if (ran) {
		CHECK(out[0].n_bytes == sizeof(float) * (size_t)(ranks * ROWS * HIDDEN) &&
		      memcmp(out[0].data, want, out[0].n_bytes) == 0);
		CHECK(memcmp(out[1].data, want_local, sizeof want_local) == 0);
		CHECK(memcmp(out[2].data, want_received, (size_t)experts * sizeof(int64_t)) == 0);
		const f8_rt_tensor *combine_in[3] = {&out[0], &c, &out[2]};
		CHECK(run(graph, 1, combine_in, back, group) == F8_OK &&
		      memcmp(back[0].data, x.data, x.n_bytes) == 0);
		const f8_rt_tensor *given_in[3] = {&x, &c, &out[2]};
		CHECK(run(graph, 2, given_in, again, group) == F8_OK &&
		      memcmp(again[0].data, out[0].data, out[0].n_bytes) == 0);
	}
	for (int i = 0; i < 3; i++)
		f8_rt_tensor_destroy(&out[i]), f8_rt_tensor_destroy(&again[i]);
	f8_rt_tensor_destroy(&back[0]);
	f8_rt_tensor_destroy(&x), f8_rt_tensor_destroy(&c);
	f8_graph_destroy(graph);
}

/* Rank 0 sends 11 with tag 1, then 22 with tag 0; rank 1 receives tag 0's first (22), then
 * tag 1's (11): each tag's messages are matched apart. */
static void check_tags(int64_t place) {
	f8_diag diag = {0};
	uint32_t axes = 1u << F8_MESH_AXIS_EP;
	int64_t sent[2] = {11, 22}, got[2] = {0, 0};
	if (place == 0) {
		CHECK(f8_dist_send(dist, axes, 1, 1, &sent[0], sizeof sent[0], &diag) == F8_OK);
		CHECK(f8_dist_send(dist, axes, 1, 0, &sent[1], sizeof sent[1], &diag) == F8_OK);
		CHECK(f8_dist_complete_sends(dist, &diag) == F8_OK);
	} else if (place == 1) {
		CHECK(f8_dist_recv(dist, axes, 0, 0, &got[0], sizeof got[0], &diag) == F8_OK);
		CHECK(f8_dist_recv(dist, axes, 0, 1, &got[1], sizeof got[1], &diag) == F8_OK);
		CHECK(got[0] == 22 && got[1] == 11);
	}
}

int main(void) {
	f8_dist_launch launch;
	int64_t seed;
	if (!(dist = test_ranks_start(F8_MESH_AXIS_EP, &launch, &seed)))
		return 1;
	if (launch.world > MAX_RANKS) {
		printf("at most %d ranks\n", MAX_RANKS);
		f8_dist_destroy(dist);
		return 1;
	}
	for (int trial = 0; trial < 4; trial++) {
		rng_state = (uint64_t)seed + (uint64_t)trial;
		check_exchange(f8_dist_group_rank(dist, 1u << F8_MESH_AXIS_EP), launch.world);
	}
	if (launch.world > 1)
		check_tags(f8_dist_group_rank(dist, 1u << F8_MESH_AXIS_EP));
	f8_dist_destroy(dist);
	return test_finish();
}
