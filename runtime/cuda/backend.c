/*
 * The CUDA backend (runtime/cuda/backend.h): device buffers, the plan's kernels launched by
 * their recorded bindings and geometry, GEMMs and attention through the libraries.
 */
#define _POSIX_C_SOURCE 200809L // nanosleep

#include "runtime/cuda/backend.h" // f8_cuda_backend_create

#include <stdio.h>  // snprintf
#include <stdlib.h> // getenv, strtoul
#include <string.h> // memcmp, memcpy, strcmp
#include <time.h>   // nanosleep

#include "ir/alloc.h"                // f8_calloc, f8_free
#include "ir/ops.h"                  // f8_op_get_info, F8_OPF_GEMM
#include "runtime/cuda/all_to_all.h" // f8_cuda_all_to_all_run
#include "runtime/cuda/attention.h"  // f8_cuda_attention
#include "runtime/cuda/collectives.h" // f8_cuda_collectives
#include "runtime/cuda/driver.h"     // f8_cuda_*
#include "runtime/cuda/gemm.h"       // f8_cuda_gemms
#include "runtime/cuda/ring_attention.h" // f8_cuda_ring_attention
#include "runtime/cuda/libraries.h"  // f8_cuda_load, f8_cuda_api
#include "runtime/cuda/overlap.h"    // f8_cuda_overlap, f8_cuda_access
#include "runtime/cuda/profile.h"    // f8_cuda_profile
#include "runtime/executor.h"        // F8_EXECUTOR_CONTEXTS_MAX

#include <nvtx3/nvToolsExt.h> // nvtxRangePushA, nvtxRangePop: header-only, free without a tool

enum { ALIGNMENT = 256 };

struct f8_buffer {
	CUdeviceptr address; // 0 for a buffer of no bytes
	uint64_t n_bytes;
};

/* One launch of a group, bound once at prepare: its sizes evaluated, its tables placed. */
typedef struct cuda_launch {
	const f8_plan_kernel *kernel;
	CUfunction function;
	int64_t *sizes;          // (the kernel's n_params) a size parameter's value
	int64_t rows;            // the product of the grid sizes
	int64_t **table_cells;   // (n_params) a table's cells as last uploaded, or NULL
	bool *table_uploaded;    // (n_params) whether table_cells is on the device yet
	CUdeviceptr *table_at;   // (n_params) where a table lives on the device
} cuda_launch;

typedef struct cuda_group {
	cuda_launch *launches;   // (n_launches)
	uint64_t *scratch_at;    // (n_scratch) offsets into the backend's scratch
	uint64_t shared_bytes;   // its scratch but the error flag, from the scratch's start
	bool ran;                // since the last synchronize, with an error to read
} cuda_group;

/* A run recorded as a CUDA graph (backend.h, run_begin), by its key. The first run of a key
 * runs as it comes (it uploads the launch tables, and the libraries make what they make on
 * first use); the second is captured and then launched; every later one is replayed. */
typedef struct cuda_recording {
	uint32_t key;
	uint32_t runs;             // begun so far
	CUgraphExec graph;         // 0 until the second run has been captured
	uint32_t *error_groups;    // the groups with a data-error flag the run sets
	uint32_t n_error_groups;
} cuda_recording;

/* A step's kinds of run: its phases' runs, frozen or not, and under pipeline parallelism a
 * forward and a backward on each executor context. */
enum { MAX_RECORDINGS = 16 + 2 * F8_EXECUTOR_CONTEXTS_MAX, RANGE_MAX = 96 };

typedef struct cuda_backend {
	f8_backend base;
	const f8_plan *plan;
	f8_cuda_options options;
	f8_cuda_device device;
	bool opened;
	bool sync_each;          // F8C_CUDA_SYNC=1
	unsigned comm_delay_ms;  // F8C_COMM_DELAY_MS: each collective held back that long
	CUstream stream;
	CUmodule module;
	CUfunction *functions;   // (plan->n_kernels)
	// What prepare made.
	const f8_graph *graph;
	const int64_t *symbol_values;
	cuda_group *groups;      // (plan->n_groups)
	CUdeviceptr scratch;     // every group's scratch, one allocation (f8_plan_scratch_layout)
	uint64_t scratch_bytes;
	CUdeviceptr tables;      // every launch's tables, one allocation
	uint64_t table_bytes;
	f8_cuda_gemms *gemms;
	f8_cuda_attention *attention;
	f8_cuda_ring_attention *rings; // context parallelism's attention
	// One launch's arguments and one node's addresses, sized for the largest.
	void **args;
	CUdeviceptr *pointers;
	CUdeviceptr *inputs, *outputs;
	// CUDA graphs of the runs: off with --no-cuda-graph, F8C_CUDA_SYNC, --profile and for a
	// graph the step cannot be captured with (a GroupedLinear or an all-to-all reads its counts
	// on the host).
	bool graphs;
	cuda_recording recordings[MAX_RECORDINGS];
	uint32_t n_recordings;
	cuda_recording *capturing; // the run being captured, or NULL
	const char *no_graphs;     // why the runs are not replayed, or NULL
	f8_cuda_profile *profile;  // with --profile
	// NCCL's collectives, made at the first prepare (NULL: every collective is a copy).
	f8_cuda_collectives *collectives;
	bool collectives_made;
	// The communication stream and what is pending on it (the block before wait_slot says
	// why): 0 when every collective runs on `stream` (no NCCL, F8C_CUDA_SYNC, --profile).
	CUstream comm_stream;
	CUevent forked;            // recorded on `stream` before a collective; comm_stream waits
	CUevent *comm_done;        // (n_comm_done) recorded after a collective, by pending's slot
	uint32_t n_comm_done;
	f8_cuda_overlap pending;   // the collectives `stream` has not waited for yet
	f8_cuda_access access;     // what the work being queued reads and writes
	char range[RANGE_MAX];     // the NVTX range open now ("layers.3 bwd"), or ""
	char families[F8_KERNEL_FAMILY_COUNT][40]; // the profile's categories of the groups
} cuda_backend;

static cuda_backend *cuda_of(f8_backend *backend) {
	return (cuda_backend *)backend;
}

static const f8_backend_interface cuda_interface;

bool f8_cuda_backend_is(const f8_backend *backend) {
	return backend && backend->interface == &cuda_interface;
}

const char *f8_cuda_backend_device(const f8_backend *backend, uint64_t *total_bytes) {
	const cuda_backend *cuda = (const cuda_backend *)backend;
	if (total_bytes)
		*total_bytes = cuda->device.total_memory;
	return cuda->device.name;
}

/* The device address of a view; 0 for one without a buffer. */
static CUdeviceptr address_of(const f8_tensor_view *view) {
	return view->buffer && view->buffer->address ? view->buffer->address + view->offset : 0;
}

static f8_status buffer_create(f8_backend *backend, uint64_t n_bytes, f8_buffer **out,
			       f8_diag *diag) {
	*out = NULL;
	f8_buffer *buffer = f8_calloc(1, sizeof *buffer);
	if (!buffer)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	f8_status status = n_bytes ? f8_cuda_alloc((size_t)n_bytes, &buffer->address, diag) : F8_OK;
	if (status == F8_ERR_NOMEM) {
		size_t free_bytes = 0, total = 0;
		(void)f8_cuda_memory_info(&free_bytes, &total, NULL);
		f8_diag_set(diag, F8_ERR_NOMEM, "the GPU has %.2f GiB free of %.2f GiB; the plan "
			    "needs a buffer of %.2f GiB more (%.2f GiB held so far)",
			    free_bytes / 1073741824.0, total / 1073741824.0, n_bytes / 1073741824.0,
			    backend->allocated_bytes / 1073741824.0);
		f8_diag_hint(diag, "compile the plan for a smaller --micro-batch-size or "
				   "--seq-length, with recompute, or for more GPUs");
	}
	if (status) {
		f8_free(buffer);
		return status;
	}
	buffer->n_bytes = n_bytes;
	f8_backend_count(backend, n_bytes, true);
	*out = buffer;
	return F8_OK;
}

static void buffer_destroy(f8_backend *backend, f8_buffer *buffer) {
	if (!buffer)
		return;
	f8_backend_count(backend, buffer->n_bytes, false);
	(void)f8_cuda_free(buffer->address, NULL); // nothing to report to
	f8_free(buffer);
}

/* The device memory of a view that must have some. */
static f8_status memory_of(const f8_tensor_view *view, CUdeviceptr *out, f8_diag *diag) {
	*out = address_of(view);
	if (!*out && view->n_bytes)
		return f8_diag_set(diag, F8_ERR_INVALID, "a view of %llu bytes has no buffer",
				   (unsigned long long)view->n_bytes);
	if (*out && view->offset + view->n_bytes > view->buffer->n_bytes)
		return f8_diag_set(diag, F8_ERR_INVALID, "a view of %llu bytes at %llu leaves its "
				   "buffer of %llu", (unsigned long long)view->n_bytes,
				   (unsigned long long)view->offset,
				   (unsigned long long)view->buffer->n_bytes);
	return F8_OK;
}

/*
 * Collectives over NCCL run on a stream of their own, the communication stream, so that a
 * data-parallel bucket's reduce-scatter runs while the rest of the backward computes, and a
 * pipeline's send or receive while the stage computes (Megatron-LM and PyTorch's DDP keep
 * their NCCL calls on side streams for this). Each collective forks from the main stream (an
 * event recorded there, waited on by the communication stream: it sees everything queued
 * before it) and records a "done" event after itself. The collectives keep the order they
 * were issued in, one stream for all, which every rank issues alike: NCCL needs a
 * communicator's calls in the same order on every rank, and the staging buffer and the held
 * sends (runtime/cuda/collectives.c) are used by one stream at a time. The main stream waits
 * (runtime/cuda/overlap.h) before queuing anything that touches what a pending collective
 * writes, or writes what it reads: by address, since the planner reuses memory. It waits for
 * all of them at the joins: synchronize, a read back to the host, a run's end (a CUDA graph's
 * capture must rejoin every stream it forked before it ends) and begin, and before the
 * all-to-all, ring attention and GroupedLinear, which use NCCL or the staging buffer on the main
 * stream or read counts to the host. Event fork and join is what stream capture follows, so a
 * captured run replays the same overlap. F8C_CUDA_SYNC and --profile time or check each call
 * on the main stream: the overlap is off there, as it is without NCCL.
 */

/* The host waits for everything on the communication stream, watching NCCL for a peer that
 * is gone: where the main stream could not be made to wait (the pending table has forgotten
 * the collectives by then, or never held one), nothing may run on past them. */
static void comm_drain(cuda_backend *cuda) {
	(void)f8_cuda_collectives_synchronize(cuda->collectives, cuda->comm_stream, NULL);
}

/* The main stream waits for the collective whose done event is in `slot`, and so for every
 * collective issued before it; if that cannot be queued, the host waits for them all. */
static f8_status wait_slot(cuda_backend *cuda, uint32_t slot, f8_diag *diag) {
	f8_status status = f8_cuda_check(f8_cuda_api.cuStreamWaitEvent(cuda->stream,
									cuda->comm_done[slot], 0),
					 "cuStreamWaitEvent", diag);
	if (status)
		comm_drain(cuda);
	return status;
}

/* A join: the main stream waits for every pending collective. */
static f8_status join_collectives(cuda_backend *cuda, f8_diag *diag) {
	uint32_t slot;
	return f8_cuda_overlap_take_all(&cuda->pending, &slot) ? wait_slot(cuda, slot, diag)
							       : F8_OK;
}

/* The main stream waits for the pending collectives that cuda->access conflicts with. */
static f8_status wait_for_access(cuda_backend *cuda, f8_diag *diag) {
	uint32_t slot;
	return f8_cuda_overlap_take(&cuda->pending, &cuda->access, &slot)
		       ? wait_slot(cuda, slot, diag) : F8_OK;
}

/* Adds a view's bytes to cuda->access: what is read (or written, `write`). */
static f8_status access_view(cuda_backend *cuda, bool write, const f8_tensor_view *view,
			     f8_diag *diag) {
	CUdeviceptr at = address_of(view);
	return at ? f8_cuda_access_add(&cuda->access, write, at, view->n_bytes, diag) : F8_OK;
}

/* Before the main stream reads (or writes, `write`) one view. */
static f8_status wait_for_view(cuda_backend *cuda, bool write, const f8_tensor_view *view,
			       f8_diag *diag) {
	if (!cuda->pending.n_entries)
		return F8_OK;
	f8_cuda_access_clear(&cuda->access);
	f8_status status = access_view(cuda, write, view, diag);
	return status ? status : wait_for_access(cuda, diag);
}

static f8_status upload(f8_backend *backend, const f8_tensor_view *to, const void *from,
			f8_diag *diag) {
	cuda_backend *cuda = cuda_of(backend);
	CUdeviceptr address;
	f8_status status = memory_of(to, &address, diag);
	if (!status)
		status = wait_for_view(cuda, true, to, diag);
	if (!status && to->n_bytes)
		status = f8_cuda_copy_to_device_async(address, from, to->n_bytes, cuda->stream, diag);
	if (!status && to->n_bytes) // the host memory is the caller's again on return
		status = f8_cuda_stream_synchronize(cuda->stream, diag);
	return status;
}

static f8_status download(f8_backend *backend, const f8_tensor_view *from, void *to,
			  f8_diag *diag) {
	cuda_backend *cuda = cuda_of(backend);
	CUdeviceptr address;
	f8_status status = memory_of(from, &address, diag);
	if (!status) // a read back to the host: a join
		status = join_collectives(cuda, diag);
	if (!status && from->n_bytes)
		status = f8_cuda_copy_to_host_async(to, address, from->n_bytes, cuda->stream, diag);
	if (!status && from->n_bytes)
		status = f8_cuda_stream_synchronize(cuda->stream, diag);
	return status;
}

static f8_status zero(f8_backend *backend, const f8_tensor_view *view, f8_diag *diag) {
	cuda_backend *cuda = cuda_of(backend);
	CUdeviceptr address;
	f8_status status = memory_of(view, &address, diag);
	if (!status)
		status = wait_for_view(cuda, true, view, diag);
	if (!status && view->n_bytes)
		status = f8_cuda_memset_async(address, 0, view->n_bytes, cuda->stream, diag);
	return status;
}

/* Frees what prepare made, so that the backend can prepare again or go. */
static void release_prepared(cuda_backend *cuda) {
	const f8_plan *plan = cuda->plan;
	for (uint32_t g = 0; cuda->groups && g < plan->n_groups; g++) {
		cuda_group *group = &cuda->groups[g];
		for (uint32_t l = 0; group->launches && l < plan->groups[g].n_launches; l++) {
			cuda_launch *launch = &group->launches[l];
			for (uint32_t p = 0; launch->table_cells && p < launch->kernel->n_params; p++)
				f8_free(launch->table_cells[p]);
			f8_free(launch->table_cells);
			f8_free(launch->table_uploaded);
			f8_free(launch->table_at);
			f8_free(launch->sizes);
		}
		f8_free(group->launches);
		f8_free(group->scratch_at);
	}
	f8_free(cuda->groups);
	cuda->groups = NULL;
	for (uint32_t i = 0; i < cuda->n_recordings; i++) {
		f8_cuda_graph_destroy(cuda->recordings[i].graph);
		f8_free(cuda->recordings[i].error_groups);
	}
	cuda->n_recordings = 0;
	cuda->capturing = NULL;
	if (cuda->gemms) // what prepare counted, as the others below
		f8_backend_count(&cuda->base, f8_cuda_gemms_device_bytes(cuda->gemms), false);
	f8_backend_count(&cuda->base, f8_cuda_attention_device_bytes(cuda->attention), false);
	f8_cuda_gemms_destroy(cuda->gemms);
	cuda->gemms = NULL;
	f8_backend_count(&cuda->base, f8_cuda_ring_attention_device_bytes(cuda->rings), false);
	f8_cuda_ring_attention_destroy(cuda->rings);
	cuda->rings = NULL;
	f8_cuda_attention_destroy(cuda->attention);
	cuda->attention = NULL;
	if (cuda->scratch)
		f8_backend_count(&cuda->base, cuda->scratch_bytes, false);
	if (cuda->tables)
		f8_backend_count(&cuda->base, cuda->table_bytes, false);
	(void)f8_cuda_free(cuda->scratch, NULL);
	(void)f8_cuda_free(cuda->tables, NULL);
	cuda->scratch = cuda->tables = 0;
	cuda->scratch_bytes = cuda->table_bytes = 0;
	f8_free(cuda->args);
	f8_free(cuda->pointers);
	f8_free(cuda->inputs);
	f8_free(cuda->outputs);
	cuda->args = NULL;
	cuda->pointers = cuda->inputs = cuda->outputs = NULL;
}

static uint64_t aligned(uint64_t bytes) {
	return (bytes + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
}

/* Binds launch `l` of group `g`: its sizes, its rows, where its tables go. */
static f8_status bind_launch(cuda_backend *cuda, uint32_t g, uint32_t l, f8_diag *diag) {
	const f8_plan_launch *record = &cuda->plan->groups[g].launches[l];
	cuda_launch *launch = &cuda->groups[g].launches[l];
	const f8_plan_kernel *kernel = &cuda->plan->kernels[record->kernel];
	launch->kernel = kernel;
	launch->function = cuda->functions[record->kernel];
	uint32_t n = kernel->n_params + 1;
	launch->sizes = f8_calloc(n, sizeof *launch->sizes);
	launch->table_cells = f8_calloc(n, sizeof *launch->table_cells);
	launch->table_uploaded = f8_calloc(n, sizeof *launch->table_uploaded);
	launch->table_at = f8_calloc(n, sizeof *launch->table_at);
	if (!launch->sizes || !launch->table_cells || !launch->table_uploaded || !launch->table_at)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	for (uint32_t p = 0; p < kernel->n_params; p++) {
		const f8_plan_arg *arg = &record->args[p];
		switch (kernel->params[p].kind) {
		case F8_KERNEL_PARAM_SIZE:
			if (!f8_dim_evaluate(arg->dim, cuda->symbol_values, &launch->sizes[p]))
				return f8_diag_set(diag, F8_ERR_ARGUMENT, "kernel %s: size %s "
						   "overflows", kernel->name, kernel->params[p].name);
			break;
		case F8_KERNEL_PARAM_TABLE: {
			size_t cells = (size_t)arg->table->n_rows * arg->table->n_columns;
			if (!(launch->table_cells[p] = f8_calloc(cells + 1, sizeof(int64_t))))
				return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
			launch->table_at[p] = cuda->table_bytes; // an offset until the allocation
			cuda->table_bytes += aligned(cells * sizeof(int64_t));
			break;
		}
		default:
			break;
		}
	}
	launch->rows = 1;
	for (uint32_t i = 0; i < kernel->n_grid_sizes; i++)
		launch->rows *= launch->sizes[kernel->grid_sizes[i]];
	return F8_OK;
}

/* Whether any node of the graph satisfies `test`. */
static bool graph_has(const f8_graph *graph, bool (*test)(const f8_node *node)) {
	for (uint32_t i = 0; i < graph->n_order; i++)
		if (test(&graph->nodes[graph->order[i]]))
			return true;
	return false;
}

static bool is_gemm(const f8_node *node) {
	return (f8_op_get_info(node->op)->flags & F8_OPF_GEMM) != 0;
}

static bool is_ring(const f8_node *node) {
	return node->op == F8_OP_RING_ATTENTION || node->op == F8_OP_RING_ATTENTION_GRAD;
}

/* cuDNN's: Attention's nodes, and the calls of context parallelism's (ring_attention.h). */
static bool is_attention(const f8_node *node) {
	return node->op == F8_OP_ATTENTION || node->op == F8_OP_ATTENTION_GRAD ||
	       node->op == F8_OP_ATTENTION_PACKED || node->op == F8_OP_ATTENTION_PACKED_GRAD ||
	       is_ring(node);
}

static bool is_grouped(const f8_node *node) {
	return node->op == F8_OP_GROUPED_LINEAR || node->op == F8_OP_GROUPED_LINEAR_WGRAD;
}

/* An op whose output is its input's bytes: a copy, or nothing where the planner put both in
 * one place. */
static bool is_view(const f8_node *node) {
	return node->op == F8_OP_RESHAPE || node->op == F8_OP_SQUEEZE ||
	       node->op == F8_OP_UNSQUEEZE || node->op == F8_OP_IDENTITY;
}

static bool is_all_to_all(const f8_node *node) {
	return node->op == F8_OP_ALL_TO_ALL_DISPATCH || node->op == F8_OP_ALL_TO_ALL_COMBINE;
}

/* Why this backend will not replay its runs as CUDA graphs, or NULL when it will. */
static const char *why_no_graphs(const cuda_backend *cuda, const f8_graph *graph) {
	if (!cuda->options.cuda_graphs)
		return "--no-cuda-graph";
	if (cuda->sync_each)
		return "F8C_CUDA_SYNC=1 synchronizes after every launch";
	if (cuda->options.profile)
		return "--profile times every launch";
	if (graph_has(graph, is_grouped))
		return "a GroupedLinear reads its rows per expert on the host";
	if (graph_has(graph, is_all_to_all)) // over NCCL or not
		return "expert parallelism's all-to-all reads its counts on the host";
	if (f8_cuda_collectives_point_to_point(cuda->collectives))
		return "pipeline parallelism's sends over NCCL go with a later run's receive";
	return NULL;
}

/* The communication stream and its fork event, once NCCL's collectives are made: not with
 * F8C_CUDA_SYNC or --profile, which check or time each call on the main stream. */
static f8_status comm_stream_create(cuda_backend *cuda, f8_diag *diag) {
	if (!cuda->collectives || cuda->sync_each || cuda->options.profile || cuda->comm_stream)
		return F8_OK;
	f8_status status = cuda->forked ? F8_OK
					: f8_cuda_check(f8_cuda_api.cuEventCreate(
								&cuda->forked, CU_EVENT_DISABLE_TIMING),
							"cuEventCreate", diag);
	if (!status)
		status = f8_cuda_stream_create(&cuda->comm_stream, diag);
	return status;
}

static f8_status prepare(f8_backend *backend, const f8_graph *graph,
			 const int64_t *symbol_values, f8_diag *diag) {
	cuda_backend *cuda = cuda_of(backend);
	release_prepared(cuda);
	const f8_plan *plan = cuda->plan;
	if (graph != plan->graph)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "the CUDA backend runs the graph of its "
				   "plan, not another");
	cuda->graph = graph;
	cuda->symbol_values = symbol_values;
	if (!cuda->collectives_made) { // every rank makes its communicators here, together
		const char *every = getenv("F8C_NCCL");
		f8_status made = f8_cuda_collectives_create(cuda->options.dist, graph,
							    every && strcmp(every, "1") == 0,
							    &cuda->collectives, diag);
		if (made) // every rank failed with it (agreed): a later prepare tries again
			return made;
		cuda->collectives_made = true;
	}
	f8_status status = comm_stream_create(cuda, diag);
	if (status)
		return status;
	cuda->no_graphs = why_no_graphs(cuda, graph);
	cuda->graphs = !cuda->no_graphs;
	uint32_t most_params = 1, most_operands = 1;
	for (uint32_t k = 0; k < plan->n_kernels; k++)
		most_params = plan->kernels[k].n_params > most_params ? plan->kernels[k].n_params
								      : most_params;
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		most_operands = node->n_inputs > most_operands ? node->n_inputs : most_operands;
		most_operands = node->n_outputs > most_operands ? node->n_outputs : most_operands;
	}
	cuda->args = f8_calloc(most_params, sizeof *cuda->args);
	cuda->pointers = f8_calloc(most_params, sizeof *cuda->pointers);
	cuda->inputs = f8_calloc(most_operands, sizeof *cuda->inputs);
	cuda->outputs = f8_calloc(most_operands, sizeof *cuda->outputs);
	cuda->groups = f8_calloc(plan->n_groups + 1, sizeof *cuda->groups);
	if (!cuda->args || !cuda->pointers || !cuda->inputs || !cuda->outputs || !cuda->groups)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	uint64_t **scratch_at = f8_calloc(plan->n_groups + 1, sizeof *scratch_at);
	uint64_t *shared = f8_calloc(plan->n_groups + 1, sizeof *shared);
	if (!scratch_at || !shared)
		status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	for (uint32_t g = 0; !status && g < plan->n_groups; g++) {
		const f8_plan_group *record = &plan->groups[g];
		cuda_group *group = &cuda->groups[g];
		group->launches = f8_calloc(record->n_launches + 1, sizeof *group->launches);
		group->scratch_at = f8_calloc(record->n_scratch + 1, sizeof *group->scratch_at);
		if (!group->launches || !group->scratch_at)
			status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
		scratch_at[g] = group->scratch_at;
	}
	if (!status)
		status = f8_plan_scratch_layout(plan, symbol_values, scratch_at, shared,
						&cuda->scratch_bytes, diag);
	for (uint32_t g = 0; !status && g < plan->n_groups; g++) {
		cuda->groups[g].shared_bytes = shared[g];
		for (uint32_t l = 0; !status && l < plan->groups[g].n_launches; l++)
			status = bind_launch(cuda, g, l, diag);
	}
	f8_free(scratch_at);
	f8_free(shared);
	if (!status && cuda->scratch_bytes &&
	    !(status = f8_cuda_alloc(cuda->scratch_bytes, &cuda->scratch, diag)))
		f8_backend_count(&cuda->base, cuda->scratch_bytes, true);
	if (!status && cuda->table_bytes &&
	    !(status = f8_cuda_alloc(cuda->table_bytes, &cuda->tables, diag)))
		f8_backend_count(&cuda->base, cuda->table_bytes, true);
	for (uint32_t g = 0; !status && g < plan->n_groups; g++)
		for (uint32_t l = 0; l < plan->groups[g].n_launches; l++) {
			cuda_launch *launch = &cuda->groups[g].launches[l];
			for (uint32_t p = 0; p < launch->kernel->n_params; p++)
				if (launch->kernel->params[p].kind == F8_KERNEL_PARAM_TABLE)
					launch->table_at[p] += cuda->tables;
		}
	// Each library's bytes counted as soon as it holds them: release_prepared takes them off.
	if (!status && graph_has(graph, is_gemm))
		status = f8_cuda_gemms_create(graph, symbol_values, cuda->stream, &cuda->gemms, diag);
	if (cuda->gemms)
		f8_backend_count(&cuda->base, f8_cuda_gemms_device_bytes(cuda->gemms), true);
	if (!status && graph_has(graph, is_attention))
		status = f8_cuda_attention_create(graph, symbol_values, cuda->stream,
						  cuda->options.deterministic, cuda->options.dist,
						  &cuda->attention, diag);
	f8_backend_count(&cuda->base, f8_cuda_attention_device_bytes(cuda->attention), true);
	if (!status && graph_has(graph, is_ring))
		status = f8_cuda_ring_attention_create(graph, cuda->attention, cuda->collectives,
						       cuda->stream, &cuda->rings, diag);
	return status;
}

/* The address of a value a launch binds, zeroed first for an ACCUMULATE parameter. */
static f8_status bound_address(cuda_backend *cuda, const f8_plan_kernel *kernel, uint32_t p,
			       const f8_tensor_view *views, f8_value_id value,
			       CUdeviceptr *out, f8_diag *diag) {
	const f8_tensor_view *view = &views[value];
	*out = address_of(view);
	if (!*out && view->n_bytes)
		return f8_diag_set(diag, F8_ERR_INVALID, "kernel %s: parameter %s (%%%s) is not "
				   "stored", kernel->name, kernel->params[p].name,
				   cuda->graph->values[value].name);
	return F8_OK;
}

/* Fills launch table `p` with its constants and the addresses of the values it names,
 * uploading it when it differs from what the device has (only when a view moved: an executor
 * keeps its views, so a step's tables are uploaded once), and zeroes its ACCUMULATE cells. */
static f8_status fill_table(cuda_backend *cuda, cuda_launch *launch, const f8_plan_table *table,
			    uint32_t p, const f8_tensor_view *views, f8_diag *diag) {
	size_t n = (size_t)table->n_rows * table->n_columns;
	int64_t *cells = launch->table_cells[p];
	bool changed = !launch->table_uploaded[p];
	f8_status status = F8_OK;
	for (size_t i = 0; !status && i < n; i++) {
		int64_t cell = table->constants[i];
		f8_value_id value = table->values[i];
		if (value != F8_NONE) {
			CUdeviceptr address;
			status = bound_address(cuda, launch->kernel, p, views, value, &address, diag);
			cell = (int64_t)address;
			if (!status && address &&
			    table->columns[i % table->n_columns] == F8_KERNEL_PARAM_ACCUMULATE)
				status = f8_cuda_memset_async(address, 0, views[value].n_bytes,
							      cuda->stream, diag);
		}
		changed |= cells[i] != cell;
		cells[i] = cell;
	}
	if (status || !changed)
		return status;
	// The stream may still read the old cells: wait, then copy while nothing runs.
	status = f8_cuda_stream_synchronize(cuda->stream, diag);
	if (!status)
		status = f8_cuda_copy_to_device(launch->table_at[p], cells, n * sizeof *cells, diag);
	launch->table_uploaded[p] = !status;
	return status;
}

static f8_status run_launch(cuda_backend *cuda, uint32_t g, uint32_t l,
			    const f8_tensor_view *views, f8_diag *diag) {
	const f8_plan_launch *record = &cuda->plan->groups[g].launches[l];
	cuda_launch *launch = &cuda->groups[g].launches[l];
	const f8_plan_kernel *kernel = launch->kernel;
	f8_status status = F8_OK;
	for (uint32_t p = 0; !status && p < kernel->n_params; p++) {
		const f8_plan_arg *arg = &record->args[p];
		f8_kernel_param_kind kind = kernel->params[p].kind;
		if (kind == F8_KERNEL_PARAM_SIZE) {
			cuda->args[p] = &launch->sizes[p];
			continue;
		}
		if (kind == F8_KERNEL_PARAM_TABLE) {
			status = fill_table(cuda, launch, arg->table, p, views, diag);
			cuda->pointers[p] = launch->table_at[p];
		} else if (arg->scratch != F8_NONE) {
			cuda->pointers[p] = cuda->scratch + cuda->groups[g].scratch_at[arg->scratch];
		} else {
			status = bound_address(cuda, kernel, p, views, arg->value, &cuda->pointers[p],
					       diag);
			if (!status && cuda->pointers[p] && kind == F8_KERNEL_PARAM_ACCUMULATE)
				status = f8_cuda_memset_async(cuda->pointers[p], 0,
							      views[arg->value].n_bytes, cuda->stream,
							      diag);
		}
		cuda->args[p] = &cuda->pointers[p];
	}
	if (!status)
		status = f8_cuda_launch(launch->function, kernel->name, &kernel->geometry,
					launch->rows, cuda->args, cuda->stream, diag);
	return status;
}

/* The first node of group `g` in program order, for messages. */
static f8_node_id first_member(const f8_graph *graph, uint32_t g) {
	for (uint32_t i = 0; i < graph->n_order; i++)
		if (graph->nodes[graph->order[i]].group == g)
			return graph->order[i];
	return F8_NONE;
}

/* Enters the NVTX range of `node`: its layer ("layers.3", else its scope's first part) and
 * phase, so that a profile (Nsight Systems) reads like the model. Ranges are host-side marks,
 * pushed only when the label changes: consecutive launches of one layer share one. */
static void enter_range(cuda_backend *cuda, const f8_node *node) {
	const char *scope = node->scope && *node->scope ? node->scope : "step";
	size_t n = strcspn(scope, ".");
	if (strncmp(scope, "layers.", 7) == 0)
		n = 7 + strcspn(scope + 7, ".");
	char label[RANGE_MAX];
	snprintf(label, sizeof label, "%.*s %s", (int)n, scope, f8_phase_name(node->phase));
	if (strcmp(label, cuda->range) == 0)
		return;
	if (cuda->range[0])
		nvtxRangePop();
	nvtxRangePushA(label);
	memcpy(cuda->range, label, sizeof label);
}

static void leave_range(cuda_backend *cuda) {
	if (cuda->range[0])
		nvtxRangePop();
	cuda->range[0] = '\0';
}

/* The profile's category of a node outside the groups (runtime/cuda/profile.h). */
static const char *category_of(const cuda_backend *cuda, const f8_node *node) {
	if (is_gemm(node)) {
		f8_dtype a = cuda->graph->values[node->inputs[0]].type.dtype;
		return a == F8_DTYPE_E4M3 || a == F8_DTYPE_E5M2 ? "gemm fp8"
		       : a == F8_DTYPE_BF16			 ? "gemm bf16"
		       : a == F8_DTYPE_F16			 ? "gemm f16"
								 : "gemm f32";
	}
	if (is_attention(node))
		return node->op == F8_OP_ATTENTION || node->op == F8_OP_ATTENTION_PACKED
			       ? "attention fwd" : "attention bwd";
	return "device copies";
}

/* With F8C_CUDA_SYNC=1: waits for what was just queued, so that a fault names its source. */
static f8_status checked(cuda_backend *cuda, f8_node_id node, const char *what, f8_diag *diag) {
	if (!cuda->sync_each)
		return F8_OK;
	f8_status status = f8_cuda_stream_synchronize(cuda->stream, diag);
	if (status && diag) {
		if (node != F8_NONE && !diag->node[0])
			f8_diag_set_node(diag, cuda->graph, node);
		f8_diag_hint(diag, "the fault is in %s", what);
	}
	return status;
}

/* Before the main stream queues group `g`'s launches: it waits for the pending collectives
 * they conflict with, by the values its launches bind (their IN parameters and table columns
 * read, the others written; the scratch and the tables are no collective's). */
static f8_status wait_for_group(cuda_backend *cuda, uint32_t g, const f8_tensor_view *views,
				f8_diag *diag) {
	if (!cuda->pending.n_entries)
		return F8_OK;
	f8_cuda_access_clear(&cuda->access);
	const f8_plan_group *record = &cuda->plan->groups[g];
	f8_status status = F8_OK;
	for (uint32_t l = 0; !status && l < record->n_launches; l++) {
		const f8_plan_kernel *kernel = cuda->groups[g].launches[l].kernel;
		for (uint32_t p = 0; !status && p < kernel->n_params; p++) {
			const f8_plan_arg *arg = &record->launches[l].args[p];
			f8_kernel_param_kind kind = kernel->params[p].kind;
			if (kind == F8_KERNEL_PARAM_TABLE) {
				const f8_plan_table *table = arg->table;
				size_t n = (size_t)table->n_rows * table->n_columns;
				for (size_t i = 0; !status && i < n; i++)
					if (table->values[i] != F8_NONE)
						status = access_view(
							cuda,
							table->columns[i % table->n_columns] !=
								F8_KERNEL_PARAM_IN,
							&views[table->values[i]], diag);
			} else if (kind != F8_KERNEL_PARAM_SIZE && arg->scratch == F8_NONE &&
				   arg->value != F8_NONE) {
				status = access_view(cuda, kind != F8_KERNEL_PARAM_IN,
						     &views[arg->value], diag);
			}
		}
	}
	return status ? status : wait_for_access(cuda, diag);
}

/* A node's operands into cuda->access: its inputs read, its outputs written. */
static f8_status node_access(cuda_backend *cuda, const f8_node *node,
			     const f8_tensor_view *views, f8_diag *diag) {
	f8_cuda_access_clear(&cuda->access);
	f8_status status = F8_OK;
	for (uint32_t j = 0; !status && j < node->n_inputs; j++)
		if (node->inputs[j] != F8_NONE)
			status = access_view(cuda, false, &views[node->inputs[j]], diag);
	for (uint32_t j = 0; !status && j < node->n_outputs; j++)
		status = access_view(cuda, true, &views[node->outputs[j]], diag);
	return status;
}

/* Before the main stream queues a node outside the groups (a library call, a copy, a
 * collective of one rank). A GroupedLinear reads its counts to the host: a join. */
static f8_status wait_for_node(cuda_backend *cuda, const f8_node *node,
			       const f8_tensor_view *views, f8_diag *diag) {
	if (!cuda->pending.n_entries)
		return F8_OK;
	if (is_grouped(node))
		return join_collectives(cuda, diag);
	// A view of its input in place queues nothing (copy_node): no wait for a collective that
	// reads it, a data-parallel bucket's reduce-scatter say.
	if (is_view(node) && node->n_inputs && node->n_outputs &&
	    address_of(&views[node->inputs[0]]) == address_of(&views[node->outputs[0]]))
		return F8_OK;
	f8_status status = node_access(cuda, node, views, diag);
	return status ? status : wait_for_access(cuda, diag);
}

/* The done event of `slot`, made the first time the slot is used (a run's pending collectives
 * are alike from run to run, so a captured run finds its events made by the run before it). */
static f8_status comm_done_event(cuda_backend *cuda, uint32_t slot, f8_diag *diag) {
	if (slot < cuda->n_comm_done)
		return F8_OK;
	CUevent *events = f8_realloc(cuda->comm_done, (slot + 1) * sizeof *events);
	if (!events)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	cuda->comm_done = events;
	f8_status status = F8_OK;
	for (; !status && cuda->n_comm_done <= slot; cuda->n_comm_done += !status)
		status = f8_cuda_check(f8_cuda_api.cuEventCreate(&events[cuda->n_comm_done],
								  CU_EVENT_DISABLE_TIMING),
				       "cuEventCreate", diag);
	return status;
}

/* F8C_COMM_DELAY_MS's pause, run by the driver in the communication stream's order. */
static void CUDA_CB comm_delay(void *milliseconds) {
	unsigned ms = *(const unsigned *)milliseconds;
	struct timespec pause = {ms / 1000, (long)(ms % 1000) * 1000000};
	nanosleep(&pause, NULL);
}

/* The communication stream waits for what the main stream has queued so far; under
 * F8C_COMM_DELAY_MS it then pauses, so that each collective ends well after the compute queued
 * behind it starts, and a wait the compute stream misses shows as wrong results: a check for
 * one GPU, whose collectives of one rank otherwise end at once (backend_ops_cuda with
 * F8C_NCCL=1). */
static f8_status comm_fork(cuda_backend *cuda, f8_diag *diag) {
	f8_status status = f8_cuda_check(f8_cuda_api.cuEventRecord(cuda->forked, cuda->stream),
					 "cuEventRecord", diag);
	if (!status)
		status = f8_cuda_check(f8_cuda_api.cuStreamWaitEvent(cuda->comm_stream,
								     cuda->forked, 0),
				       "cuStreamWaitEvent", diag);
	if (!status && cuda->comm_delay_ms)
		status = f8_cuda_check(f8_cuda_api.cuLaunchHostFunc(cuda->comm_stream, comm_delay,
								    &cuda->comm_delay_ms),
				       "cuLaunchHostFunc", diag);
	return status;
}

/*
 * Queues collective node `id` (or, with F8_NONE, the held sends: a flush) on the
 * communication stream, forked from the main stream, and adds it to the pending collectives
 * with what it reads and writes (cuda->inputs and cuda->outputs hold its operands). Whatever
 * it queued before a failure is pending too, so that the joins wait for it.
 */
static f8_status comm_issue(cuda_backend *cuda, f8_node_id id, uint32_t axes,
			    const f8_tensor_view *views, f8_diag *diag) {
	f8_status status = F8_OK;
	if (id != F8_NONE)
		status = node_access(cuda, &cuda->graph->nodes[id], views, diag);
	else
		f8_cuda_access_clear(&cuda->access);
	uint32_t slot = f8_cuda_overlap_free_slot(&cuda->pending);
	if (!status)
		status = comm_done_event(cuda, slot, diag);
	if (!status)
		status = comm_fork(cuda, diag);
	if (status)
		return status;
	status = id == F8_NONE ? f8_cuda_collectives_flush(cuda->collectives, cuda->comm_stream,
							   diag)
			       : f8_cuda_collectives_run(cuda->collectives, id, axes, views,
							 cuda->inputs, cuda->outputs,
							 cuda->comm_stream, diag);
	f8_status done = f8_cuda_check(f8_cuda_api.cuEventRecord(cuda->comm_done[slot],
								 cuda->comm_stream),
				       "cuEventRecord", status ? NULL : diag);
	status = status ? status : done;
	if (done) { // the joins cannot see it: the host waits for the stream as a whole
		comm_drain(cuda);
		return status;
	}
	f8_status added = f8_cuda_overlap_add(&cuda->pending, &cuda->access, slot,
					      status ? NULL : diag);
	if (added) // out of memory for the table: wait for this one now
		(void)wait_slot(cuda, slot, NULL);
	return status ? status : added;
}

static f8_status run_group(f8_backend *backend, uint32_t g, const f8_tensor_view *views,
			   f8_diag *diag) {
	cuda_backend *cuda = cuda_of(backend);
	if (!cuda->groups || g >= cuda->plan->n_groups)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "group %u is not in the prepared plan", g);
	cuda_group *group = &cuda->groups[g];
	const f8_plan_group *record = &cuda->plan->groups[g];
	f8_node_id first = first_member(cuda->graph, g);
	if (first != F8_NONE)
		enter_range(cuda, &cuda->graph->nodes[first]);
	const char *made = first != F8_NONE && cuda->graph->nodes[first].n_outputs
				   ? cuda->graph->values[cuda->graph->nodes[first].outputs[0]].name
				   : cuda->graph->groups[g].name;
	f8_status status = wait_for_group(cuda, g, views, diag);
	if (!status && cuda->profile)
		status = f8_cuda_profile_start(cuda->profile, cuda->stream,
					       cuda->families[cuda->graph->groups[g].family], g,
					       made, diag);
	if (!status && group->shared_bytes) // the shared region's start: its own part
		status = f8_cuda_memset_async(cuda->scratch, 0, group->shared_bytes, cuda->stream,
					      diag);
	if (!status && record->error && record->error_scratch) // its error flag, kept apart
		status = f8_cuda_memset_async(cuda->scratch +
						      group->scratch_at[record->error_scratch - 1],
					      0, sizeof(int64_t), cuda->stream, diag);
	for (uint32_t l = 0; !status && l < record->n_launches; l++)
		status = run_launch(cuda, g, l, views, diag);
	if (!status && cuda->profile)
		status = f8_cuda_profile_stop(cuda->profile, cuda->stream, diag);
	group->ran |= !status && record->error;
	if (!status) {
		char what[160];
		snprintf(what, sizeof what, "fused group %s", cuda->graph->groups[g].name);
		status = checked(cuda, first, what, diag);
	}
	if (status && diag && !diag->node[0] && first != F8_NONE)
		f8_diag_set_node(diag, cuda->graph, first);
	return status;
}

/* The node's operands' device addresses into cuda->inputs and cuda->outputs. */
static void operands(cuda_backend *cuda, const f8_node *node, const f8_tensor_view *views) {
	for (uint32_t j = 0; j < node->n_inputs; j++)
		cuda->inputs[j] = node->inputs[j] == F8_NONE ? 0 : address_of(&views[node->inputs[j]]);
	for (uint32_t j = 0; j < node->n_outputs; j++)
		cuda->outputs[j] = address_of(&views[node->outputs[j]]);
}

/* A node whose output `i` is its input `i`'s bytes as they are: a copy, unless it is in place. */
static f8_status copy_node(cuda_backend *cuda, const f8_node *node, uint32_t i,
			   const f8_tensor_view *views, f8_diag *diag) {
	const f8_tensor_view *in = &views[node->inputs[i]], *out = &views[node->outputs[i]];
	if (in->n_bytes != out->n_bytes)
		return f8_diag_set(diag, F8_ERR_INVALID, "%s of %llu bytes into %llu",
				   f8_op_get_info(node->op)->name, (unsigned long long)in->n_bytes,
				   (unsigned long long)out->n_bytes);
	CUdeviceptr from = address_of(in), to = address_of(out);
	if (!out->n_bytes || from == to)
		return F8_OK;
	if (!from || !to)
		return f8_diag_set(diag, F8_ERR_INVALID, "%s: an operand is not stored",
				   f8_op_get_info(node->op)->name);
	return f8_cuda_copy_device_async(to, from, out->n_bytes, cuda->stream, diag);
}

/* Queues node `id` outside the groups: a library call or a copy; *what names it for
 * F8C_CUDA_SYNC's message (NULL when the node has no GPU kernel, which is the error). */
static f8_status issue_node(cuda_backend *cuda, f8_node_id id, const f8_tensor_view *views,
			    const char **what, f8_diag *diag) {
	const f8_node *node = &cuda->graph->nodes[id];
	if (is_gemm(node) && cuda->gemms) {
		*what = "a cuBLASLt GEMM";
		return f8_cuda_gemm_run(cuda->gemms, id, cuda->inputs, cuda->outputs, diag);
	}
	if (is_attention(node) && cuda->attention) {
		*what = "a cuDNN attention graph";
		return f8_cuda_attention_run(cuda->attention, id, cuda->inputs, cuda->outputs, diag);
	}
	if (is_view(node)) {
		*what = "a device copy";
		return copy_node(cuda, node, 0, views, diag);
	}
	*what = NULL;
	f8_status status = f8_diag_set(diag, F8_ERR_UNSUPPORTED, "%s has no GPU kernel in this "
				       "plan: it is neither in a fused group nor a library call",
				       f8_op_get_info(node->op)->name);
	f8_diag_hint(diag, "compile the plan with an f8c whose codegen lowers %s",
		     f8_op_get_info(node->op)->name);
	return status;
}

static f8_status run_node(f8_backend *backend, f8_node_id id, const f8_tensor_view *views,
			  f8_diag *diag) {
	cuda_backend *cuda = cuda_of(backend);
	const f8_node *node = &cuda->graph->nodes[id];
	operands(cuda, node, views);
	enter_range(cuda, node);
	const char *what = NULL;
	const char *made = node->n_outputs ? cuda->graph->values[node->outputs[0]].name : NULL;
	f8_status status = wait_for_node(cuda, node, views, diag);
	if (!status && cuda->profile)
		status = f8_cuda_profile_start(cuda->profile, cuda->stream, category_of(cuda, node),
					       cuda->graph->n_groups + id, made, diag);
	if (!status)
		status = issue_node(cuda, id, views, &what, diag);
	if (!status && cuda->profile)
		status = f8_cuda_profile_stop(cuda->profile, cuda->stream, diag);
	if (!status && what)
		status = checked(cuda, id, what, diag);
	if (status && diag && !diag->node[0])
		f8_diag_set_node(diag, cuda->graph, id);
	return status;
}

/* After a collective node's calls were queued: checked under F8C_CUDA_SYNC, and a failure
 * named by its node. */
static f8_status collective_done(cuda_backend *cuda, f8_node_id id, f8_status status,
				 f8_diag *diag) {
	if (!status && cuda->sync_each)
		status = checked(cuda, id, f8_op_get_info(cuda->graph->nodes[id].op)->name, diag);
	if (status && diag && !diag->node[0])
		f8_diag_set_node(diag, cuda->graph, id);
	return status;
}

/* Queues collective node `id` over NCCL (`over`) or the ring attention or all-to-all of one
 * rank: NCCL's collectives on the communication stream where there is one; the rest, which
 * use NCCL or the staging buffer on the main stream or read to the host, after a join. */
static f8_status issue_collective(cuda_backend *cuda, f8_node_id id, uint32_t axes, bool over,
				  const f8_tensor_view *views, f8_diag *diag) {
	const f8_node *node = &cuda->graph->nodes[id];
	if (over && cuda->comm_stream && !is_ring(node) && !is_all_to_all(node))
		return comm_issue(cuda, id, axes, views, diag);
	f8_status status = join_collectives(cuda, diag);
	if (status)
		return status;
	if (is_ring(node))
		return f8_cuda_ring_attention_run(cuda->rings, id, axes, views, cuda->inputs,
						  cuda->outputs, diag);
	if (over)
		return f8_cuda_collectives_run(cuda->collectives, id, axes, views, cuda->inputs,
					       cuda->outputs, cuda->stream, diag);
	f8_cuda_all_to_all_group alone = {.ranks = 1};
	return f8_cuda_all_to_all_run(&alone, cuda->graph, id, views, cuda->inputs,
				      cuda->outputs, cuda->stream, diag);
}

static f8_status run_collective(f8_backend *backend, f8_node_id id, uint32_t axes,
				const f8_tensor_view *views, f8_diag *diag) {
	cuda_backend *cuda = cuda_of(backend);
	const f8_node *node = &cuda->graph->nodes[id];
	f8_status status = F8_OK;
	bool over = f8_cuda_collectives_run_over(cuda->collectives, axes);
	// Ring attention is cuDNN's calls, over NCCL or a group of one rank; an all-to-all of one
	// rank without NCCL keeps its rows (runtime/cuda/all_to_all.h).
	if (is_ring(node) || over || is_all_to_all(node)) {
		operands(cuda, node, views);
		enter_range(cuda, node);
		uint64_t before = f8_cuda_ring_attention_device_bytes(cuda->rings) +
				  f8_cuda_collectives_device_bytes(cuda->collectives);
		status = issue_collective(cuda, id, axes, over, views, diag);
		// Their buffers grow as they run: counted as they do.
		f8_backend_count(&cuda->base,
				 f8_cuda_ring_attention_device_bytes(cuda->rings) +
					 f8_cuda_collectives_device_bytes(cuda->collectives) - before,
				 true);
		return collective_done(cuda, id, status, diag);
	}
	// Any other collective of one rank: every output its input.
	bool packed = node->op == F8_OP_ALL_REDUCE || node->op == F8_OP_ALL_GATHER ||
		      node->op == F8_OP_REDUCE_SCATTER; // an output per input, each its copy
	if ((node->n_inputs == 1 && node->n_outputs == 1) ||
	    (packed && node->n_inputs == node->n_outputs)) {
		status = wait_for_node(cuda, node, views, diag);
		for (uint32_t i = 0; !status && i < node->n_inputs; i++)
			status = copy_node(cuda, node, i, views, diag);
	} else {
		status = f8_diag_set(diag, F8_ERR_UNSUPPORTED, "%s over a group of one rank: it "
				     "needs more than one rank (it moves data between ranks)",
				     f8_op_get_info(node->op)->name);
	}
	if (status && diag && !diag->node[0])
		f8_diag_set_node(diag, cuda->graph, id);
	return status;
}

/* Reads the data errors of the groups that ran since the last synchronize. */
static f8_status read_errors(cuda_backend *cuda, f8_diag *diag) {
	const f8_plan *plan = cuda->plan;
	f8_status status = F8_OK;
	for (uint32_t g = 0; cuda->groups && g < plan->n_groups; g++) {
		cuda_group *group = &cuda->groups[g];
		if (!group->ran)
			continue;
		group->ran = false;
		const f8_plan_group *record = &plan->groups[g];
		int64_t flag = 0;
		if (status || !record->error || !record->error_scratch)
			continue;
		status = f8_cuda_copy_to_host(
			&flag, cuda->scratch + group->scratch_at[record->error_scratch - 1],
			sizeof flag, diag);
		if (!status && flag) {
			status = f8_diag_set(diag, F8_ERR_ARGUMENT, "%s (row %lld)", record->error,
					     (long long)(flag - 1));
			f8_node_id node = first_member(cuda->graph, g);
			if (node != F8_NONE)
				f8_diag_set_node(diag, cuda->graph, node);
		}
	}
	return status;
}

static cuda_recording *recording_of(cuda_backend *cuda, uint32_t key) {
	for (uint32_t i = 0; i < cuda->n_recordings; i++)
		if (cuda->recordings[i].key == key)
			return &cuda->recordings[i];
	if (cuda->n_recordings == MAX_RECORDINGS)
		return NULL; // more kinds of run than a step has: the rest run as they come
	cuda->recordings[cuda->n_recordings] = (cuda_recording){.key = key};
	return &cuda->recordings[cuda->n_recordings++];
}

/* The groups of a run that set a data-error flag are marked as having run, as the calls that
 * a replay stands for would have marked them, so that synchronize reads their flags. */
static void mark_error_groups(cuda_backend *cuda, const cuda_recording *recording) {
	for (uint32_t i = 0; i < recording->n_error_groups; i++)
		cuda->groups[recording->error_groups[i]].ran = true;
}

static f8_status run_begin(f8_backend *backend, uint32_t key, bool *replayed, f8_diag *diag) {
	cuda_backend *cuda = cuda_of(backend);
	*replayed = false;
	if (cuda->profile)
		f8_cuda_profile_run_begin(cuda->profile, key);
	cuda_recording *recording = cuda->graphs ? recording_of(cuda, key) : NULL;
	if (!recording)
		return F8_OK;
	recording->runs++;
	// A replay or a capture starts from a join: a capture cannot wait for work queued before
	// it began, and a replay's reads and writes are not told here.
	f8_status joined = join_collectives(cuda, diag);
	if (joined)
		return joined;
	if (recording->graph) {
		f8_status status = f8_cuda_graph_launch(recording->graph, cuda->stream, diag);
		*replayed = !status;
		if (!status)
			mark_error_groups(cuda, recording);
		return status;
	}
	if (recording->runs < 2) // the first run uploads the launch tables: not capturable
		return F8_OK;
	f8_status status = f8_cuda_capture_begin(cuda->stream, diag);
	if (!status)
		cuda->capturing = recording;
	return status;
}

static f8_status run_end(f8_backend *backend, uint32_t key, bool issued, f8_diag *diag) {
	(void)key; // the recording being captured is the one run_begin began
	cuda_backend *cuda = cuda_of(backend);
	cuda_recording *recording = cuda->capturing;
	leave_range(cuda);
	if (!recording)
		return F8_OK;
	cuda->capturing = NULL;
	CUgraphExec graph = 0;
	// The capture rejoins the communication stream first, or it ends with an error.
	f8_status joined = join_collectives(cuda, issued ? diag : NULL);
	f8_status status = f8_cuda_capture_end(cuda->stream, &graph, issued ? diag : NULL);
	status = joined ? joined : status;
	if (!issued) { // a call failed while capturing: nothing ran, and nothing is kept
		f8_cuda_graph_destroy(graph);
		return F8_OK;
	}
	if (status) {
		f8_diag_hint(diag, "a call of the run cannot be captured into a CUDA graph; "
				   "--no-cuda-graph runs every launch as it comes");
		return status;
	}
	uint32_t n = 0;
	for (uint32_t g = 0; g < cuda->plan->n_groups; g++)
		n += cuda->groups[g].ran;
	recording->error_groups = f8_calloc(n + 1, sizeof *recording->error_groups);
	if (!recording->error_groups) {
		f8_cuda_graph_destroy(graph);
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	}
	for (uint32_t g = 0; g < cuda->plan->n_groups; g++)
		if (cuda->groups[g].ran)
			recording->error_groups[recording->n_error_groups++] = g;
	recording->graph = graph;
	// What was captured has not run: this run is the recording's first launch.
	return f8_cuda_graph_launch(graph, cuda->stream, diag);
}

static f8_status flush(f8_backend *backend, f8_diag *diag) {
	cuda_backend *cuda = cuda_of(backend);
	// The held sends' copies were queued on the communication stream: their sends go there.
	if (cuda->comm_stream && f8_cuda_collectives_point_to_point(cuda->collectives))
		return comm_issue(cuda, F8_NONE, 0, NULL, diag);
	return f8_cuda_collectives_flush(cuda->collectives, cuda->stream, diag);
}

static f8_status synchronize(f8_backend *backend, f8_diag *diag) {
	cuda_backend *cuda = cuda_of(backend);
	leave_range(cuda);
	f8_status status = join_collectives(cuda, diag);
	if (!status)
		status = cuda->collectives ? f8_cuda_collectives_synchronize(cuda->collectives,
									     cuda->stream, diag)
					   : f8_cuda_stream_synchronize(cuda->stream, diag);
	if (status) {
		f8_diag_hint(diag, "run again with F8C_CUDA_SYNC=1 to learn which kernel or "
				   "library call failed");
		return status;
	}
	status = read_errors(cuda, diag);
	if (!status && cuda->profile)
		status = f8_cuda_profile_run_end(cuda->profile, diag);
	return status;
}

static void destroy(f8_backend *backend) {
	cuda_backend *cuda = cuda_of(backend);
	if (cuda->stream && cuda->collectives) { // what is held back goes, so that no peer waits
		// for it for ever; a peer that is gone is the watchdog's and NCCL's errors' to end
		(void)flush(backend, NULL);
		(void)join_collectives(cuda, NULL);
		(void)f8_cuda_collectives_synchronize(cuda->collectives, cuda->stream, NULL);
	} else if (cuda->stream) {
		(void)f8_cuda_stream_synchronize(cuda->stream, NULL);
	}
	if (cuda->comm_stream) // whatever a failed join left there, NCCL watched for a lost peer
		comm_drain(cuda);
	f8_cuda_stream_destroy(cuda->comm_stream);
	if (cuda->forked)
		(void)f8_cuda_api.cuEventDestroy(cuda->forked);
	for (uint32_t i = 0; i < cuda->n_comm_done; i++)
		(void)f8_cuda_api.cuEventDestroy(cuda->comm_done[i]);
	f8_free(cuda->comm_done);
	f8_cuda_overlap_free(&cuda->pending);
	f8_cuda_access_free(&cuda->access);
	f8_cuda_collectives_destroy(cuda->collectives);
	release_prepared(cuda);
	f8_cuda_profile_destroy(cuda->profile);
	f8_cuda_module_unload(cuda->module);
	f8_free(cuda->functions);
	f8_cuda_stream_destroy(cuda->stream);
	if (cuda->opened)
		f8_cuda_close(&cuda->device);
	f8_free(cuda);
}

static const f8_backend_interface cuda_interface = {
	.name = "cuda",
	.prepare = prepare,
	.buffer_create = buffer_create,
	.buffer_destroy = buffer_destroy,
	.upload = upload,
	.download = download,
	.zero = zero,
	.run_group = run_group,
	.run_node = run_node,
	.run_collective = run_collective,
	.run_begin = run_begin,
	.run_end = run_end,
	.flush = flush,
	.ordered_messages = true,
	.synchronize = synchronize,
	.destroy = destroy,
};

f8_status f8_cuda_backend_create(const f8_plan *plan, const f8_cuda_options *options,
				 f8_backend **out, f8_diag *diag) {
	*out = NULL;
	cuda_backend *cuda = f8_calloc(1, sizeof *cuda);
	if (!cuda)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	cuda->base.interface = &cuda_interface;
	cuda->plan = plan;
	if (options)
		cuda->options = *options;
	const char *sync = getenv("F8C_CUDA_SYNC");
	cuda->sync_each = sync && strcmp(sync, "0") != 0 && *sync;
	const char *delay = getenv("F8C_COMM_DELAY_MS");
	cuda->comm_delay_ms = delay ? (unsigned)strtoul(delay, NULL, 10) : 0;
	for (int f = 0; f < F8_KERNEL_FAMILY_COUNT; f++)
		snprintf(cuda->families[f], sizeof cuda->families[f], "kernels: %s",
			 f8_kernel_family_name((f8_kernel_family)f));
	f8_status status = cuda->options.profile ? f8_cuda_profile_create(&cuda->profile, diag)
						 : F8_OK;
	if (!status)
		status = f8_cuda_open_ordinal(&cuda->device, cuda->options.device, diag);
	cuda->opened = !status;
	if (!status && cuda->device.compute_major < 9) {
		status = f8_diag_set(diag, F8_ERR_UNSUPPORTED, "%s is sm_%d%d; the plan's kernels "
				     "are for sm_90 (Hopper) or newer", cuda->device.name,
				     cuda->device.compute_major, cuda->device.compute_minor);
	}
	if (!status)
		status = f8_cuda_stream_create(&cuda->stream, diag);
	if (!status && plan->n_kernels)
		status = f8_cuda_module_load(plan->ptx, &cuda->module, diag);
	if (!status && !(cuda->functions = f8_calloc(plan->n_kernels + 1, sizeof *cuda->functions)))
		status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	for (uint32_t k = 0; !status && k < plan->n_kernels; k++)
		status = f8_cuda_module_function(cuda->module, plan->kernels[k].name,
						 &cuda->functions[k], diag);
	if (status) {
		destroy(&cuda->base);
		return status;
	}
	*out = &cuda->base;
	return F8_OK;
}

const char *f8_cuda_backend_replays(const f8_backend *backend) {
	return ((const cuda_backend *)backend)->no_graphs;
}

f8_status f8_cuda_backend_profile_write(const f8_backend *backend, const char *path,
					char *summary, size_t size, f8_diag *diag) {
	const cuda_backend *cuda = (const cuda_backend *)backend;
	if (!cuda->profile)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "the backend was made without --profile");
	return f8_cuda_profile_write(cuda->profile, path, backend->peak_bytes, summary, size, diag);
}
