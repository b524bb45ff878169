/*
 * The parts of a plan's training step on their own, for tools/step_alone.py to set against the
 * same parts inside the step (f8c train --profile, runtime/cuda/profile.h): issue 15's "each FP8
 * GEMM in the step within 10% of the same GEMM alone" and "each memory-bound kernel family at
 * 80% of the copy bandwidth" need both sides measured on one GPU in one session.
 *
 *   step_alone PLAN [RUNS]      (on the GPU machine; RUNS timed runs of each, default 30)
 *
 * Prints JSON lines on stdout:
 *   - "device": the GPU's name and cuBLASLt's version;
 *   - "copy": a device-to-device copy (cuMemcpyDtoDAsync) of 256 MiB and 1 GiB, 3 warm-up runs,
 *     the median of RUNS timed by CUDA events, its bytes counted read plus written;
 *   - "gemm": each distinct GEMM of the plan (the layers' alike taken once: "layers.*.mlp.fc1"),
 *     run by the backend's own cuBLASLt plan of the whole graph (runtime/cuda/gemm.h: the same
 *     descriptor, layouts, scale modes, fast-accumulation setting, epilogue and heuristic
 *     algorithm as in the step), on operands of its shapes and dtypes allocated on their own
 *     (256-byte aligned, as the slab's) and filled with random values (FP8 codes of a normal
 *     distribution of a seventh of the format's largest value, their scale_invs its inverse):
 *     5 warm-up runs, then RUNS runs back to back and RUNS runs each after a 256 MiB memset that
 *     leaves none of the operands in L2, each run between two events; the medians and minima;
 *   - "group": each fused group of the plan, its family, the name the profile gives it (its
 *     first member's first output, as runtime/cuda/backend.c names it) and the bytes its
 *     launches bind: every buffer argument (a table's cells too) counted once per launch at its
 *     value's size, the rule of plan.json's estimates (tools/compile.c), so what a kernel must
 *     read and write at the least (a re-read, a partial sum in scratch is not counted).
 *
 * Errors go to stderr with the diagnostic's text; exit 1. The plan's sizes must be constants
 * (the bench plans are compiled with their micro-batch and sequence length).
 */
#include <math.h>   // cos, log, sqrt
#include <stdio.h>  // printf, fprintf
#include <stdlib.h> // qsort, strtol
#include <string.h> // strcmp, strncmp, memcpy

#include "ir/alloc.h"               // f8_calloc, f8_free
#include "ir/dtype.h"               // f8_dtype_get_info, f8_dtype_name
#include "ir/gemm.h"                // f8_gemm_sizes, f8_gemm_kind_of, f8_gemm_kind_name
#include "ir/ops.h"                 // F8_OPF_GEMM, f8_op_get_info
#include "runtime/cuda/driver.h"    // f8_cuda_open, f8_cuda_alloc, f8_cuda_event_*
#include "runtime/cuda/gemm.h"      // f8_cuda_gemms_create, f8_cuda_gemm_run
#include "runtime/cuda/libraries.h" // f8_cuda_load, f8_cuda_api
#include "runtime/plan.h"           // f8_plan_load, f8_plan
#include "runtime/tensor.h"         // f8_rt_tensor_create, f8_rt_tensor_set

enum {
	WARMUP = 5,
	MAX_OPERANDS = 16,
	CHUNK = 1 << 20,         // host elements filled, then tiled on the device
	FLUSH_BYTES = 256 << 20, // more than an H100's or H200's 50 MiB of L2
};

/* What a run of this program shares: the stream and the timing events (2 x runs). */
typedef struct bench {
	CUstream stream;
	CUevent *events;
	int runs;
	CUdeviceptr flush; // FLUSH_BYTES, written before each flushed run
	uint64_t rng;
} bench;

static double uniform(bench *b) { // splitmix64, in (0, 1)
	uint64_t z = (b->rng += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	z ^= z >> 31;
	return ((double)(z >> 11) + 0.5) * 0x1.0p-53;
}

static double normal(bench *b) { // Box-Muller
	return sqrt(-2.0 * log(uniform(b))) * cos(6.283185307179586 * uniform(b));
}

/* The spread the fill gives a dtype's values: a seventh of an FP8 format's largest value (64 of
 * E4M3's 448, 8192 of E5M2's 57344), as a scaled tensor's amax lands near the top; a bias's
 * 0.05 else. */
static double spread_of(f8_dtype dtype) {
	return dtype == F8_DTYPE_E4M3 ? 64.0 : dtype == F8_DTYPE_E5M2 ? 8192.0 : 0.05;
}

/* `name` with every "layers.<digits>" as "layers.*", into out (size bytes): the profile's way
 * of summing the layers' alike (runtime/cuda/profile.c). */
static void alike_name(const char *name, char *out, size_t size) {
	size_t n = 0;
	for (const char *c = name; *c && n + 1 < size;) {
		if (strncmp(c, "layers.", 7) == 0 && c[7] >= '0' && c[7] <= '9') {
			for (const char *s = "layers.*"; *s && n + 1 < size; s++)
				out[n++] = *s;
			for (c += 7; *c >= '0' && *c <= '9'; c++) {
			}
			continue;
		}
		out[n++] = *c++;
	}
	out[n] = '\0';
}

/* The elements of value v, or -1 when a dim is not a constant. */
static int64_t numel_of(const f8_graph *graph, f8_value_id v) {
	const f8_type *type = &graph->values[v].type;
	int64_t n = 1;
	for (int d = 0; d < type->shape.rank; d++) {
		if (!f8_dim_is_const(type->shape.dims[d]))
			return -1;
		n *= f8_dim_value(type->shape.dims[d]);
	}
	return n;
}

static int compare_floats(const void *a, const void *b) {
	float x = *(const float *)a, y = *(const float *)b;
	return x < y ? -1 : x > y;
}

/* The median of n times (sorted in place). */
static double median_of(float *times, int n) {
	qsort(times, (size_t)n, sizeof *times, compare_floats);
	return n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
}

/* Fills `bytes` at `pointer` with `dtype` values of a normal distribution of `spread` (a host
 * chunk of up to CHUNK elements, copied over the buffer), or with `constant` when it is not 0. */
static f8_status fill(bench *b, CUdeviceptr pointer, f8_dtype dtype, int64_t n, double spread,
		      double constant, f8_diag *diag) {
	int64_t chunk = n < CHUNK ? n : CHUNK;
	f8_rt_tensor host = {0};
	f8_status status = f8_rt_tensor_create(dtype, 1, &chunk, &host, diag);
	for (int64_t i = 0; !status && i < chunk; i++)
		f8_rt_tensor_set(&host, i, constant != 0 ? constant : spread * normal(b));
	size_t element = f8_dtype_get_info(dtype)->bytes;
	for (int64_t at = 0; !status && at < n; at += chunk) {
		int64_t count = n - at < chunk ? n - at : chunk;
		status = f8_cuda_copy_to_device(pointer + (uint64_t)at * element, host.data,
						(size_t)count * element, diag);
	}
	f8_rt_tensor_destroy(&host);
	return status;
}

/* Times b->runs runs of what `run` queues, each between two events and, when `flush`, after a
 * memset of b->flush; *median and *least in milliseconds. */
typedef f8_status (*queue_fn)(void *context, f8_diag *diag);

static f8_status time_runs(bench *b, queue_fn run, void *context, bool flush, double *median,
			   double *least, f8_diag *diag) {
	f8_status status = F8_OK;
	for (int i = 0; !status && i < b->runs; i++) {
		if (flush)
			status = f8_cuda_memset_async(b->flush, (uint8_t)i, FLUSH_BYTES, b->stream,
						      diag);
		if (!status)
			status = f8_cuda_event_record(b->events[2 * i], b->stream, diag);
		if (!status)
			status = run(context, diag);
		if (!status)
			status = f8_cuda_event_record(b->events[2 * i + 1], b->stream, diag);
	}
	if (!status)
		status = f8_cuda_stream_synchronize(b->stream, diag);
	float *times = f8_calloc((size_t)b->runs, sizeof *times);
	if (!status && !times)
		status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	for (int i = 0; !status && i < b->runs; i++)
		status = f8_cuda_event_elapsed(b->events[2 * i], b->events[2 * i + 1], &times[i], diag);
	if (!status) {
		*median = median_of(times, b->runs);
		*least = times[0];
	}
	f8_free(times);
	return status;
}

typedef struct copy_run {
	bench *b;
	CUdeviceptr from, to;
	size_t bytes;
} copy_run;

static f8_status queue_copy(void *context, f8_diag *diag) {
	copy_run *c = context;
	return f8_cuda_copy_device_async(c->to, c->from, c->bytes, c->b->stream, diag);
}

/* The device-to-device copy's bandwidth at `bytes`, one "copy" line. */
static f8_status time_copy(bench *b, size_t bytes, f8_diag *diag) {
	copy_run c = {.b = b, .bytes = bytes};
	f8_status status = f8_cuda_alloc(bytes, &c.from, diag);
	if (!status)
		status = f8_cuda_alloc(bytes, &c.to, diag);
	if (!status)
		status = f8_cuda_memset_async(c.from, 0x3C, bytes, b->stream, diag);
	for (int i = 0; !status && i < 3; i++)
		status = queue_copy(&c, diag);
	double median = 0, least = 0;
	if (!status)
		status = time_runs(b, queue_copy, &c, false, &median, &least, diag);
	if (!status)
		printf("{\"copy\": {\"size_bytes\": %zu, \"moved_bytes\": %zu, \"median_ms\": %.5f, "
		       "\"min_ms\": %.5f, \"gb_per_s\": %.1f, \"runs\": %d}}\n", bytes, 2 * bytes,
		       median, least, 2.0 * (double)bytes / (median * 1e6), b->runs);
	f8_cuda_free(c.from, NULL);
	f8_cuda_free(c.to, NULL);
	return status;
}

typedef struct gemm_run {
	f8_cuda_gemms *gemms;
	f8_node_id node;
	CUdeviceptr inputs[MAX_OPERANDS], outputs[MAX_OPERANDS];
} gemm_run;

static f8_status queue_gemm(void *context, f8_diag *diag) {
	gemm_run *g = context;
	return f8_cuda_gemm_run(g->gemms, g->node, g->inputs, g->outputs, diag);
}

/* Allocates and fills GEMM node `id`'s operands, times it, prints its "gemm" line. */
static f8_status time_gemm(bench *b, const f8_graph *graph, f8_cuda_gemms *gemms, f8_node_id id,
			   const char *alike, uint32_t items, f8_diag *diag) {
	const f8_node *node = &graph->nodes[id];
	gemm_run g = {.gemms = gemms, .node = id};
	if (node->n_inputs > MAX_OPERANDS || node->n_outputs > MAX_OPERANDS)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "a GEMM of too many operands");
	bool fp8 = node->op == F8_OP_FP8_GEMM;
	f8_status status = F8_OK;
	for (uint32_t i = 0; !status && i < node->n_inputs + node->n_outputs; i++) {
		bool input = i < node->n_inputs;
		f8_value_id v = input ? node->inputs[i] : node->outputs[i - node->n_inputs];
		CUdeviceptr *at = input ? &g.inputs[i] : &g.outputs[i - node->n_inputs];
		if (v == F8_NONE)
			continue;
		f8_dtype dtype = graph->values[v].type.dtype;
		int64_t n = numel_of(graph, v);
		if (n < 0)
			return f8_diag_set(diag, F8_ERR_ARGUMENT, "%%%s's size is not a constant",
					   graph->values[v].name);
		size_t bytes = (size_t)n * f8_dtype_get_info(dtype)->bytes;
		status = f8_cuda_alloc(bytes ? bytes : 1, at, diag);
		// An FP8Gemm's inputs 2 and 3 are the scale_invs of 0 and 1: the fill's inverse.
		double constant = fp8 && input && (i == 2 || i == 3)
					  ? 1.0 / spread_of(graph->values[node->inputs[i - 2]].type.dtype)
					  : 0.0;
		if (!status && input)
			status = fill(b, *at, dtype, n, spread_of(dtype), constant, diag);
	}
	for (int i = 0; !status && i < WARMUP; i++)
		status = queue_gemm(&g, diag);
	double median = 0, least = 0, flushed = 0, flushed_least = 0;
	if (!status)
		status = time_runs(b, queue_gemm, &g, false, &median, &least, diag);
	if (!status)
		status = time_runs(b, queue_gemm, &g, true, &flushed, &flushed_least, diag);
	int64_t m = 0, n = 0, k = 0;
	f8_gemm_sizes(graph, node, &m, &n, &k);
	f8_gemm_kind kind = F8_GEMM_KIND_FWD;
	bool has_kind = f8_gemm_kind_of(node, &kind);
	if (!status) {
		double flops = 2.0 * (double)m * (double)n * (double)k;
		printf("{\"gemm\": \"%s\", \"node\": \"%s\", \"op\": \"%s\", \"scope\": \"%s\", "
		       "\"kind\": \"%s\", \"items\": %u, \"m\": %lld, \"n\": %lld, \"k\": %lld, "
		       "\"a\": \"%s\", \"b\": \"%s\", \"y\": \"%s\", \"median_ms\": %.5f, "
		       "\"min_ms\": %.5f, \"flushed_median_ms\": %.5f, \"flushed_min_ms\": %.5f, "
		       "\"tflop_per_s\": %.1f, \"runs\": %d}\n",
		       alike, graph->values[node->outputs[0]].name, f8_op_get_info(node->op)->name,
		       node->scope ? node->scope : "", has_kind ? f8_gemm_kind_name(kind) : "",
		       items, (long long)m, (long long)n, (long long)k,
		       f8_dtype_name(graph->values[node->inputs[0]].type.dtype),
		       f8_dtype_name(graph->values[node->inputs[1]].type.dtype),
		       f8_dtype_name(graph->values[node->outputs[0]].type.dtype), median, least,
		       flushed, flushed_least, flops / (median * 1e9), b->runs);
		fflush(stdout);
	}
	for (uint32_t i = 0; i < node->n_inputs; i++)
		f8_cuda_free(g.inputs[i], NULL);
	for (uint32_t i = 0; i < node->n_outputs; i++)
		f8_cuda_free(g.outputs[i], NULL);
	return status;
}

/* Every distinct GEMM of the graph (the first of the layers' alike), timed alone. */
static f8_status time_gemms(bench *b, const f8_graph *graph, f8_diag *diag) {
	int64_t *symbols = f8_calloc(graph->n_symbols + 1, sizeof *symbols);
	char (*names)[160] = f8_calloc(graph->n_order + 1, sizeof *names);
	if (!symbols || !names) {
		f8_free(symbols);
		f8_free(names);
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	}
	for (uint32_t s = 0; s < graph->n_symbols; s++)
		symbols[s] = 1; // unused: every size the GEMMs read is checked to be a constant
	f8_cuda_gemms *gemms = NULL;
	f8_status status = f8_cuda_gemms_create(graph, symbols, b->stream, &gemms, diag);
	for (uint32_t i = 0; !status && i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		if (!(f8_op_get_info(node->op)->flags & F8_OPF_GEMM) || !node->n_outputs)
			continue;
		alike_name(graph->values[node->outputs[0]].name, names[i], sizeof names[i]);
		uint32_t items = 1;
		bool seen = false;
		for (uint32_t j = 0; j < i && !seen; j++)
			seen = strcmp(names[j], names[i]) == 0;
		if (seen)
			continue;
		for (uint32_t j = i + 1; j < graph->n_order; j++) {
			const f8_node *other = &graph->nodes[graph->order[j]];
			char name[160];
			if (!(f8_op_get_info(other->op)->flags & F8_OPF_GEMM) || !other->n_outputs)
				continue;
			alike_name(graph->values[other->outputs[0]].name, name, sizeof name);
			items += strcmp(name, names[i]) == 0;
		}
		status = time_gemm(b, graph, gemms, graph->order[i], names[i], items, diag);
	}
	f8_cuda_gemms_destroy(gemms);
	f8_free(symbols);
	f8_free(names);
	return status;
}

/* Bytes the launches of group g bind (the file comment's rule); -1 when a size is symbolic. */
static double group_bytes(const f8_plan *plan, uint32_t g) {
	const f8_graph *graph = plan->graph;
	const f8_plan_group *group = &plan->groups[g];
	double bytes = 0;
	for (uint32_t l = 0; l < group->n_launches; l++) {
		const f8_plan_launch *launch = &group->launches[l];
		const f8_plan_kernel *kernel = &plan->kernels[launch->kernel];
		for (uint32_t p = 0; p < kernel->n_params; p++) {
			const f8_plan_arg *arg = &launch->args[p];
			const f8_plan_table *table = arg->table;
			size_t cells = table ? (size_t)table->n_rows * table->n_columns : 1;
			for (size_t c = 0; c < cells; c++) {
				f8_value_id v = table ? table->values[c] : arg->value;
				if (kernel->params[p].kind == F8_KERNEL_PARAM_SIZE || v == F8_NONE)
					continue;
				int64_t n = numel_of(graph, v);
				if (n < 0)
					return -1;
				bytes += (double)n * (double)f8_dtype_get_info(
							     graph->values[v].type.dtype)->bytes;
			}
		}
	}
	return bytes;
}

/* One "group" line per fused group. */
static void print_groups(const f8_plan *plan) {
	const f8_graph *graph = plan->graph;
	for (uint32_t g = 0; g < plan->n_groups; g++) {
		f8_node_id first = F8_NONE;
		for (uint32_t i = 0; i < graph->n_order && first == F8_NONE; i++)
			if (graph->nodes[graph->order[i]].group == g)
				first = graph->order[i];
		const char *made = first != F8_NONE && graph->nodes[first].n_outputs
					   ? graph->values[graph->nodes[first].outputs[0]].name
					   : graph->groups[g].name;
		char alike[160];
		alike_name(made, alike, sizeof alike);
		printf("{\"group\": \"%s\", \"name\": \"%s\", \"kernel\": \"%s\", \"family\": \"%s\", "
		       "\"launches\": %u, \"bytes\": %.0f}\n", alike, made, graph->groups[g].name,
		       f8_kernel_family_name(graph->groups[g].family), plan->groups[g].n_launches,
		       group_bytes(plan, g));
	}
}

int main(int argc, char **argv) {
	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: step_alone PLAN [RUNS]\n");
		return 2;
	}
	bench b = {.runs = argc > 2 ? (int)strtol(argv[2], NULL, 10) : 30, .rng = 15};
	if (b.runs < 1)
		b.runs = 1;
	f8_diag diag = {0};
	f8_plan *plan = NULL;
	f8_cuda_device device = {0};
	f8_status status = f8_plan_load(argv[1], F8C_VERSION, &plan, &diag);
	if (!status)
		print_groups(plan);
	if (!status)
		status = f8_cuda_open(&device, &diag);
	if (!status)
		status = f8_cuda_load(F8_CUDA_LIBRARY_CUBLASLT, &diag);
	if (!status)
		status = f8_cuda_stream_create(&b.stream, &diag);
	if (!status && !(b.events = f8_calloc(2 * (size_t)b.runs, sizeof *b.events)))
		status = f8_diag_set(&diag, F8_ERR_NOMEM, "out of memory");
	int made = 0;
	for (; !status && made < 2 * b.runs; made++)
		status = f8_cuda_event_create(&b.events[made], &diag);
	if (!status)
		status = f8_cuda_alloc(FLUSH_BYTES, &b.flush, &diag);
	if (!status)
		printf("{\"device\": \"%s\", \"cublaslt\": %d, \"runs\": %d}\n", device.name,
		       (int)f8_cuda_api.cublasLtGetVersion(), b.runs);
	if (!status)
		status = time_copy(&b, (size_t)256 << 20, &diag);
	if (!status)
		status = time_copy(&b, (size_t)1 << 30, &diag);
	if (!status)
		status = time_gemms(&b, plan->graph, &diag);
	if (status) {
		fprintf(stderr, "step_alone: ");
		f8_diag_print(&diag, stderr);
	}
	for (int i = 0; i < made; i++)
		f8_cuda_event_destroy(b.events[i]);
	f8_free(b.events);
	f8_cuda_free(b.flush, NULL);
	f8_cuda_stream_destroy(b.stream);
	f8_cuda_close(&device);
	f8_plan_destroy(plan);
	return status ? 1 : 0;
}
