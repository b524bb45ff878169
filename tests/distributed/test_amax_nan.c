/*
 * One rank's NaN amax is every rank's non-finite amax: the NanToInf the shard pass puts on each
 * amax before its AllReduce {op="max"} over ranks (passes/shard.c for a ScalingUpdate's amaxes,
 * passes/shard_fp8_gather.c for current scaling's under sequence parallelism), run on the CPU
 * backend over mpirun's ranks, whose all-reduce is MPI's MAX as it is (runtime/cpu/backend.c:
 * the graph, not the backend, keeps the NaN, as on GPUs where NCCL's max drops it too). Each
 * rank casts its own x at a table's scale (a delayed cast's amax) and finds current scaling's
 * scale from its Amax reduced over the ranks; the last rank's x holds a NaN (a negative one,
 * with a payload). On every rank, with the reference kernels and with the generated ones (the
 * NanToInf fused into the cast's and the Amax's kernels, which the test checks), the reduced
 * amaxes are +inf and the scale 1 (a non-finite amax's), the same bits everywhere; without the
 * NaN they are the largest |x| over the ranks. The same graph without its NanToInf nodes runs
 * too, and each rank prints what MPI made of the NaN (not checked: Open MPI's MAX keeps or
 * drops a NaN by the order it combines the ranks in, so the ranks may disagree). One process (no
 * mpirun) checks a group of one rank; CTest runs it so and under mpirun with 2 and 3 ranks.
 *
 * usage: [mpirun -np N] test_amax_nan
 */
#include <math.h>   // INFINITY
#include <stdio.h>  // printf, snprintf
#include <string.h> // memcpy, strcmp, strlen

#include "codegen/target.h"               // f8_codegen_target_table_for
#include "ir/fp8.h"                       // f8_scale_from_amax
#include "ir/text.h"                      // f8_text_parse
#include "passes/pipeline.h"              // f8_pipeline_run_with
#include "runtime/cpu/backend.h"          // f8_cpu_backend_create_distributed
#include "runtime/distributed.h"          // f8_dist_*
#include "tests/distributed/test_ranks.h" // test_ranks_start
#include "tests/runtime/test_backend_ops.h" // backend_ops_run
#include "tests/test_support.h"           // CHECK, test_finish

enum { ROWS = 8, COLS = 40, OUTPUTS = 4 };

static uint32_t bits_of(float f) {
	uint32_t bits;
	memcpy(&bits, &f, sizeof bits);
	return bits;
}

/* The graph, compiled for inference through fuse and schedule (the codegen table's fusion),
 * over `ranks` data-parallel ranks; `guarded`: with the shard pass's NanToInf nodes. Outputs:
 * the delayed cast's reduced amax, current scaling's reduced amax, the scale found from it,
 * the codes. */
static f8_graph *amax_graph(int64_t ranks, bool guarded) {
	char mesh[32] = "", text[2048];
	if (ranks > 1)
		snprintf(mesh, sizeof mesh, "  mesh dp=%lld\n", (long long)ranks);
	snprintf(text, sizeof text,
		 "graph amaxes {\n%s"
		 "  input %%x : f32[%d, %d]\n"
		 "  scale %%table : f32[2]\n"
		 "  %%codes, %%scale_inv, %%amax = Quantize(%%x, %%table) {to=e4m3, slot=1}\n"
		 "%s"
		 "  %%reduced = AllReduce(%%%s) {group=\"dp\", op=\"max\"}\n"
		 "  %%shard_amax = Amax(%%x)\n"
		 "%s"
		 "  %%current = AllReduce(%%%s) {group=\"dp\", op=\"max\"}\n"
		 "  %%scale = ScaleFromAmax(%%current) {format=e4m3}\n"
		 "  output %%reduced, %%current, %%scale, %%codes\n}\n",
		 mesh, ROWS, COLS, guarded ? "  %amax.nan_as_inf = NanToInf(%amax)\n" : "",
		 guarded ? "amax.nan_as_inf" : "amax",
		 guarded ? "  %shard_amax.nan_as_inf = NanToInf(%shard_amax)\n" : "",
		 guarded ? "shard_amax.nan_as_inf" : "shard_amax");
	f8_pipeline_options options = {.target = f8_codegen_target_table_for(NULL)};
	f8_graph *graph = NULL;
	f8_diag diag = {0};
	f8_status status = f8_text_parse(text, strlen(text), "test_amax_nan", &graph, &diag);
	if (!status)
		status = f8_pipeline_run_with(graph, NULL, true, &options, NULL, &diag);
	if (status) {
		f8_diag_print(&diag, stdout);
		CHECK(status == F8_OK);
		f8_graph_destroy(graph);
		return NULL;
	}
	return graph;
}

/* Whether every NanToInf of `graph` is in the kernel of the node that makes its amax: the
 * guard costs no launch of its own. */
static bool guards_fused(const f8_graph *graph) {
	uint32_t n = 0;
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		if (node->op != F8_OP_NAN_TO_INF)
			continue;
		f8_node_id producer = graph->values[node->inputs[0]].producer;
		if (producer == F8_NONE || node->group == F8_NONE ||
		    graph->nodes[producer].group != node->group)
			return false;
		n++;
	}
	return n == 2;
}

/* This rank's x: (i - 100) / 64 times rank + 1 (exact in f32), so that the last rank's last
 * element is the largest |x| of all; with `nan`, element 37 a negative NaN with a payload. */
static void fill_x(f8_rt_tensor *x, int64_t rank, bool nan) {
	float *data = x->data;
	for (int64_t i = 0; i < ROWS * COLS; i++)
		data[i] = (float)((double)(i - 100) / 64.0 * (double)(rank + 1));
	if (nan) {
		uint32_t bits = 0xffc01234u; // -NaN, payload 0x401234
		memcpy(&data[37], &bits, sizeof bits);
	}
}

/* One run of `graph` on this rank's backend of `kernels`; outputs[] made here. */
static f8_status run(const f8_graph *graph, f8_dist *dist, f8_cpu_kernels kernels,
		     const f8_rt_tensor *leaves, f8_rt_tensor *outputs) {
	f8_diag diag = {0};
	f8_backend *backend = NULL;
	f8_executor_memory memory;
	f8_status status = f8_cpu_backend_create_distributed(kernels, dist, &backend, &diag);
	if (!status)
		status = backend_ops_run(backend, graph, leaves, outputs, &memory, &diag);
	f8_backend_destroy(backend);
	if (status)
		f8_diag_print(&diag, stdout);
	return status;
}

/* The leaves in graph->inputs order: x (this rank's, NaN or not) and the table (scales 1). */
static bool make_leaves(const f8_graph *graph, int64_t rank, bool nan, f8_rt_tensor *leaves) {
	for (uint32_t i = 0; i < graph->n_inputs; i++) {
		const f8_value *leaf = &graph->values[graph->inputs[i]];
		int64_t dims[F8_MAX_RANK];
		for (int d = 0; d < leaf->type.shape.rank; d++)
			dims[d] = f8_dim_value(leaf->type.shape.dims[d]);
		if (f8_rt_tensor_create(leaf->type.dtype, leaf->type.shape.rank, dims, &leaves[i],
					NULL))
			return false;
		if (strcmp(leaf->name, "x") == 0)
			fill_x(&leaves[i], rank, nan);
		else
			for (int64_t j = 0; j < f8_rt_tensor_numel(&leaves[i]); j++)
				f8_rt_tensor_set(&leaves[i], j, 1.0);
	}
	return true;
}

/* The guarded graph on the backend of `kernels`, with and without the last rank's NaN. */
static void check_guarded(const f8_graph *graph, f8_dist *dist, const f8_dist_launch *launch,
			  f8_cpu_kernels kernels, const char *name) {
	for (int nan = 0; nan < 2; nan++) {
		f8_rt_tensor leaves[2] = {0}, outputs[OUTPUTS] = {0};
		bool made = graph->n_inputs == 2 &&
			    make_leaves(graph, launch->rank, nan && launch->rank == launch->world - 1,
					leaves);
		CHECK(made);
		if (made && !run(graph, dist, kernels, leaves, outputs)) {
			// Without the NaN: the last rank's last element (fill_x).
			float want = nan ? INFINITY
					 : (float)((double)(ROWS * COLS - 101) / 64.0 *
						   (double)launch->world);
			const float *reduced = outputs[0].data, *current = outputs[1].data;
			const float *scale = outputs[2].data;
			printf("rank %lld, %s, %s: reduced amaxes %g and %g, scale %g\n",
			       (long long)launch->rank, name, nan ? "a NaN on the last rank" : "no NaN",
			       (double)*reduced, (double)*current, (double)*scale);
			CHECK(bits_of(*reduced) == bits_of(want));
			CHECK(bits_of(*current) == bits_of(want));
			// A non-finite amax gives scale 1, on every rank alike.
			CHECK(bits_of(*scale) ==
			      bits_of(f8_scale_from_amax(F8_DTYPE_E4M3, want, 0, 1.0f)));
			CHECK(!nan || *scale == 1.0f);
		}
		for (int i = 0; i < 2; i++)
			f8_rt_tensor_destroy(&leaves[i]);
		for (int i = 0; i < OUTPUTS; i++)
			f8_rt_tensor_destroy(&outputs[i]);
	}
}

/* The graph without the NanToInf nodes, the NaN on the last rank: what MPI's MAX made of it,
 * printed. */
static void show_unguarded(f8_dist *dist, const f8_dist_launch *launch) {
	f8_graph *graph = amax_graph(launch->world, false);
	f8_rt_tensor leaves[2] = {0}, outputs[OUTPUTS] = {0};
	if (graph && make_leaves(graph, launch->rank, launch->rank == launch->world - 1, leaves) &&
	    !run(graph, dist, F8_CPU_KERNELS_REFERENCE, leaves, outputs))
		printf("rank %lld, without NanToInf (not checked): reduced amaxes %g and %g\n",
		       (long long)launch->rank, (double)*(const float *)outputs[0].data,
		       (double)*(const float *)outputs[1].data);
	for (int i = 0; i < 2; i++)
		f8_rt_tensor_destroy(&leaves[i]);
	for (int i = 0; i < OUTPUTS; i++)
		f8_rt_tensor_destroy(&outputs[i]);
	f8_graph_destroy(graph);
}

int main(void) {
	f8_dist_launch launch;
	int64_t seed;
	f8_dist *dist = test_ranks_start(F8_MESH_AXIS_DP, &launch, &seed);
	CHECK(dist != NULL);
	f8_graph *graph = dist ? amax_graph(launch.world, true) : NULL;
	if (graph) {
		CHECK(guards_fused(graph));
		check_guarded(graph, dist, &launch, F8_CPU_KERNELS_REFERENCE, "reference kernels");
		check_guarded(graph, dist, &launch, F8_CPU_KERNELS_GENERATED, "generated kernels");
		show_unguarded(dist, &launch);
	}
	f8_graph_destroy(graph);
	f8_dist_destroy(dist);
	return test_finish();
}
