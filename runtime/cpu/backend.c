/*
 * The CPU backend (runtime/cpu/backend.h): host buffers, nodes through their reference
 * kernels, fused groups through their generated kernels or their members.
 */
#include "runtime/cpu/backend.h" // f8_cpu_backend_create

#include <stdint.h> // uintptr_t
#include <string.h> // memcpy, memset, strcmp

#include "ir/alloc.h"            // f8_malloc, f8_calloc, f8_free
#include "runtime/cpu/kernels.h" // f8_cpu_kernel_get, f8_cpu_kernel_call
#include "runtime/placement.h"   // f8_rt_copy_slice, f8_rt_copy_balanced, f8_rt_collective_packs
#include "runtime/tensor.h"      // f8_rt_tensor_convert
#ifndef F8C_NO_LLVM
#include "runtime/cpu/generated.h" // f8_cpu_generated
#endif

enum { ALIGNMENT = 256 };

struct f8_buffer {
	void *memory;        // as allocated; NULL for a buffer that borrows its data
	unsigned char *data; // aligned to ALIGNMENT (a borrowed one: as it is)
	uint64_t n_bytes;
};

/* The members of a group, in program order. */
typedef struct members {
	f8_node_id *nodes;
	uint32_t n;
} members;

typedef struct cpu_backend {
	f8_backend base;
	f8_cpu_kernels kernels;
	f8_dist *dist;                // the ranks the collectives span, or NULL: one process
	const f8_cpu_ring *ring;      // while a ring collective runs: its group's exchange
	uint32_t ring_axes;           // that group's axes
	const f8_graph *graph;
	const int64_t *symbol_values; // the executor's, bound at prepare
	members *groups;              // (n_groups)
	uint32_t n_groups;            // the graph's, kept: the graph may go before the backend
#ifndef F8C_NO_LLVM
	f8_cpu_generated *generated;  // compiled by the first group run through it
#endif
	char *kernel_cache;           // the compiled kernels' folder, or NULL: none
	// Scratch for one node's operands, sized by the largest arity in the graph (a GlobalNorm
	// reads every parameter's gradient: hundreds for a large model).
	f8_rt_tensor *inputs, *outputs, *temporary;
	const f8_rt_tensor **input_pointers;
	bool *in_place;
	// A group run through its members: one buffer for its values that have none, reused.
	f8_buffer *inside;
	uint64_t inside_bytes;
	f8_tensor_view *group_views;  // (n_values) the views with those values' memory
} cpu_backend;

static cpu_backend *cpu_of(f8_backend *backend) {
	return (cpu_backend *)backend;
}

void *f8_cpu_view_data(const f8_tensor_view *view) {
	return view->buffer ? view->buffer->data + view->offset : NULL;
}

f8_rt_tensor f8_cpu_view_tensor(const f8_tensor_view *view) {
	f8_rt_tensor tensor = {.dtype = view->dtype, .rank = view->rank,
			       .data = view->n_bytes ? f8_cpu_view_data(view) : NULL,
			       .n_bytes = view->n_bytes, .owned = false};
	memcpy(tensor.dims, view->dims, sizeof tensor.dims);
	return tensor;
}

static f8_status buffer_create(f8_backend *backend, uint64_t n_bytes, f8_buffer **out,
			       f8_diag *diag) {
	*out = NULL;
	f8_buffer *buffer = f8_calloc(1, sizeof *buffer);
	if (buffer && n_bytes + ALIGNMENT > n_bytes && n_bytes < SIZE_MAX - ALIGNMENT)
		buffer->memory = f8_malloc((size_t)n_bytes + ALIGNMENT);
	if (!buffer || !buffer->memory) {
		f8_free(buffer);
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory: a buffer of %llu bytes",
				   (unsigned long long)n_bytes);
	}
	uintptr_t address = (uintptr_t)buffer->memory;
	buffer->data = (unsigned char *)buffer->memory +
		       ((ALIGNMENT - address % ALIGNMENT) % ALIGNMENT);
	buffer->n_bytes = n_bytes;
	f8_backend_count(backend, n_bytes, true);
	*out = buffer;
	return F8_OK;
}

static void buffer_destroy(f8_backend *backend, f8_buffer *buffer) {
	if (!buffer)
		return;
	f8_backend_count(backend, buffer->n_bytes, false);
	f8_free(buffer->memory);
	f8_free(buffer);
}

/* The host memory of a view that must have some. */
static f8_status memory_of(const f8_tensor_view *view, void **out, f8_diag *diag) {
	*out = f8_cpu_view_data(view);
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

static f8_status upload(f8_backend *backend, const f8_tensor_view *to, const void *from,
			f8_diag *diag) {
	(void)backend;
	void *data;
	f8_status status = memory_of(to, &data, diag);
	if (!status && to->n_bytes)
		memcpy(data, from, to->n_bytes);
	return status;
}

static f8_status download(f8_backend *backend, const f8_tensor_view *from, void *to,
			  f8_diag *diag) {
	(void)backend;
	void *data;
	f8_status status = memory_of(from, &data, diag);
	if (!status && from->n_bytes)
		memcpy(to, data, from->n_bytes);
	return status;
}

static f8_status zero(f8_backend *backend, const f8_tensor_view *view, f8_diag *diag) {
	(void)backend;
	void *data;
	f8_status status = memory_of(view, &data, diag);
	if (!status && view->n_bytes)
		memset(data, 0, view->n_bytes);
	return status;
}

/* Frees what prepare made, so that the backend can prepare another graph or go. */
static void release_prepared(cpu_backend *cpu) {
	for (uint32_t g = 0; cpu->groups && g < cpu->n_groups; g++)
		f8_free(cpu->groups[g].nodes);
	f8_free(cpu->groups);
#ifndef F8C_NO_LLVM
	f8_cpu_generated_destroy(cpu->generated);
	cpu->generated = NULL;
#endif
	f8_free(cpu->inputs);
	f8_free(cpu->outputs);
	f8_free(cpu->temporary);
	f8_free(cpu->input_pointers);
	f8_free(cpu->in_place);
	buffer_destroy(&cpu->base, cpu->inside);
	f8_free(cpu->group_views);
	cpu->groups = NULL;
	cpu->inside_bytes = 0;
	cpu->n_groups = 0;
	cpu->inputs = cpu->outputs = cpu->temporary = NULL;
	cpu->input_pointers = NULL;
	cpu->in_place = NULL;
	cpu->inside = NULL;
	cpu->group_views = NULL;
}

static f8_status prepare(f8_backend *backend, const f8_graph *graph,
			 const int64_t *symbol_values, f8_diag *diag) {
	cpu_backend *cpu = cpu_of(backend);
	release_prepared(cpu);
	cpu->graph = graph;
	cpu->symbol_values = symbol_values;
	cpu->n_groups = graph->n_groups;
	uint32_t most = 1;
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		most = node->n_inputs > most ? node->n_inputs : most;
		most = node->n_outputs > most ? node->n_outputs : most;
	}
	size_t n_values = graph->n_values ? graph->n_values : 1;
	cpu->inputs = f8_calloc(most, sizeof *cpu->inputs);
	cpu->outputs = f8_calloc(most, sizeof *cpu->outputs);
	cpu->temporary = f8_calloc(most, sizeof *cpu->temporary);
	cpu->input_pointers = f8_calloc(most, sizeof *cpu->input_pointers);
	cpu->in_place = f8_calloc(most, sizeof *cpu->in_place);
	cpu->group_views = f8_calloc(n_values, sizeof *cpu->group_views);
	cpu->groups = f8_calloc(graph->n_groups + 1, sizeof *cpu->groups);
	if (!cpu->inputs || !cpu->outputs || !cpu->temporary || !cpu->input_pointers ||
	    !cpu->in_place || !cpu->group_views || !cpu->groups)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	for (uint32_t i = 0; i < graph->n_order; i++) {
		uint32_t g = graph->nodes[graph->order[i]].group;
		if (g == F8_NONE)
			continue;
		members *group = &cpu->groups[g];
		if (!group->nodes && !(group->nodes = f8_calloc(graph->n_order, sizeof *group->nodes)))
			return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
		group->nodes[group->n++] = graph->order[i];
	}
	return F8_OK;
}

/* Whether views a and b share bytes. */
static bool overlap(const f8_tensor_view *a, const f8_tensor_view *b) {
	return a->buffer && a->buffer == b->buffer && a->n_bytes && b->n_bytes &&
	       a->offset < b->offset + b->n_bytes && b->offset < a->offset + a->n_bytes;
}

/* Runs node `id`'s reference kernel on `views`: its outputs zeroed first, as the kernels
 * expect, or for an output in place of an input computed apart and copied in after. */
static f8_status run_reference(cpu_backend *cpu, f8_node_id id, const f8_tensor_view *views,
			       f8_diag *diag) {
	const f8_graph *graph = cpu->graph;
	const f8_node *node = &graph->nodes[id];
	for (uint32_t j = 0; j < node->n_inputs; j++) {
		f8_value_id v = node->inputs[j];
		cpu->input_pointers[j] = NULL;
		if (v == F8_NONE)
			continue;
		cpu->inputs[j] = f8_cpu_view_tensor(&views[v]);
		if (!cpu->inputs[j].data && cpu->inputs[j].n_bytes)
			return f8_diag_set(diag, F8_ERR_INVALID, "input %u (%%%s) is not stored", j,
					   graph->values[v].name);
		cpu->input_pointers[j] = &cpu->inputs[j];
	}
	f8_status status = F8_OK;
	for (uint32_t j = 0; !status && j < node->n_outputs; j++) {
		const f8_tensor_view *out = &views[node->outputs[j]];
		cpu->in_place[j] = false;
		for (uint32_t i = 0; i < node->n_inputs; i++)
			cpu->in_place[j] |= node->inputs[i] != F8_NONE &&
					    overlap(out, &views[node->inputs[i]]);
		if (!cpu->in_place[j]) {
			cpu->outputs[j] = f8_cpu_view_tensor(out);
			if (!cpu->outputs[j].data && cpu->outputs[j].n_bytes)
				status = f8_diag_set(diag, F8_ERR_INVALID, "output %u (%%%s) is not "
						     "stored", j, graph->values[node->outputs[j]].name);
			else if (cpu->outputs[j].n_bytes)
				memset(cpu->outputs[j].data, 0, cpu->outputs[j].n_bytes);
			continue;
		}
		status = f8_rt_tensor_create(out->dtype, out->rank, out->dims, &cpu->temporary[j],
					     diag);
		cpu->outputs[j] = cpu->temporary[j];
	}
	f8_cpu_kernel_call call = {.graph = graph, .node = node,
				   .symbol_values = cpu->symbol_values,
				   .inputs = cpu->input_pointers, .outputs = cpu->outputs,
				   .ring = cpu->ring};
	if (!status)
		status = f8_cpu_kernel_get(node->op)(&call, diag);
	for (uint32_t j = 0; j < node->n_outputs; j++) {
		if (!cpu->in_place[j])
			continue;
		if (!status && cpu->temporary[j].n_bytes)
			memcpy(f8_cpu_view_data(&views[node->outputs[j]]), cpu->temporary[j].data,
			       cpu->temporary[j].n_bytes);
		f8_rt_tensor_destroy(&cpu->temporary[j]);
		cpu->in_place[j] = false;
	}
	return status;
}

static f8_status run_node(f8_backend *backend, f8_node_id node, const f8_tensor_view *views,
			  f8_diag *diag) {
	return run_reference(cpu_of(backend), node, views, diag);
}

/* MPI has no bf16 or f16: a collective of those reduces an f32 copy (`count` elements of
 * `dtype` at `data`, made by widen into *wide) and rounds it to nearest even once, at the end
 * (narrow); NCCL sums them in their dtype, rounding at each step, so this sum is the closer
 * one. */
static bool narrow_dtype(f8_dtype dtype) {
	return dtype == F8_DTYPE_BF16 || dtype == F8_DTYPE_F16;
}

static f8_status widen(const void *data, size_t count, f8_dtype dtype, f8_rt_tensor *wide,
		       f8_diag *diag) {
	int64_t dims[1] = {(int64_t)count};
	f8_rt_tensor from = {.dtype = dtype, .rank = 1, .dims = {dims[0]}, .data = (void *)data,
			     .n_bytes = count * f8_dtype_get_info(dtype)->bytes};
	f8_status status = f8_rt_tensor_create(F8_DTYPE_F32, 1, dims, wide, diag);
	if (!status)
		f8_rt_tensor_convert(wide, &from);
	return status;
}

static void narrow(void *data, f8_dtype dtype, const f8_rt_tensor *wide) {
	f8_rt_tensor to = {.dtype = dtype, .rank = 1, .dims = {wide->dims[0]}, .data = data,
			   .n_bytes = (size_t)wide->dims[0] * f8_dtype_get_info(dtype)->bytes};
	f8_rt_tensor_convert(&to, wide);
}

/* MPI's reduce-scatter (a sum) of `in` into this rank's `count` elements at `out`. */
static f8_status reduce_scatter(cpu_backend *cpu, uint32_t axes, const void *in, void *out,
				size_t count, f8_dtype dtype, f8_diag *diag) {
	if (!narrow_dtype(dtype))
		return f8_dist_reduce_scatter(cpu->dist, axes, in, out, count, dtype,
					      F8_REDUCTION_SUM, diag);
	size_t whole = count * f8_dist_group_size(cpu->dist, axes);
	int64_t dims[1] = {(int64_t)count};
	f8_rt_tensor wide_in = {0}, wide_out = {0};
	f8_status status = widen(in, whole, dtype, &wide_in, diag);
	if (!status)
		status = f8_rt_tensor_create(F8_DTYPE_F32, 1, dims, &wide_out, diag);
	if (!status)
		status = f8_dist_reduce_scatter(cpu->dist, axes, wide_in.data, wide_out.data, count,
						F8_DTYPE_F32, F8_REDUCTION_SUM, diag);
	if (!status)
		narrow(out, dtype, &wide_out);
	f8_rt_tensor_destroy(&wide_in);
	f8_rt_tensor_destroy(&wide_out);
	return status;
}

/* Between the whole `whole` and rank `r`'s part `part` along `axis` (of `n` ranks): a slice,
 * or the two chunks of balanced=1. */
static void copy_part(const f8_node *n, const f8_tensor_view *whole, void *whole_data,
		      void *part, int axis, int64_t ranks, int64_t r, size_t element,
		      bool to_part) {
	if (f8_node_attr_int(n, "balanced", 0))
		f8_rt_copy_balanced(whole_data, part, whole->dims, whole->rank, axis, ranks, r,
				    element, to_part);
	else
		f8_rt_copy_slice(whole_data, part, whole->dims, whole->rank, axis, NULL, 0, ranks, r,
				 element, to_part);
}

/*
 * AllGather, ReduceScatter and LocalShard of input `i` (into output `i`) over several ranks,
 * along their axis: MPI's all-gather, its reduce-scatter (a sum), or this rank's part copied
 * out of the replicated input. Along axis 0 each rank's part is a contiguous run of bytes; along
 * another (sequence parallelism's, 1), or in context parallelism's balanced chunks, the parts
 * are gathered into a staging buffer and put in place, or staged contiguous before the
 * reduce-scatter.
 */
static f8_status run_part(cpu_backend *cpu, const f8_node *n, uint32_t i, uint32_t axes,
			  const f8_tensor_view *views, f8_diag *diag) {
	const f8_tensor_view *in = &views[n->inputs[i]], *out = &views[n->outputs[i]];
	size_t element = f8_dtype_get_info(out->dtype)->bytes;
	const f8_tensor_view *whole = n->op == F8_OP_ALL_GATHER ? out : in;
	int axis = (int)f8_node_attr_int(n, "axis", 0);
	axis = axis < 0 ? axis + whole->rank : axis;
	int64_t ranks = f8_dist_group_size(cpu->dist, axes);
	uint32_t place = f8_dist_group_rank(cpu->dist, axes);
	bool contiguous = !f8_node_attr_int(n, "balanced", 0); // every dimension before axis is 1
	for (int d = 0; d < axis; d++)
		contiguous &= whole->dims[d] == 1;
	if (n->op == F8_OP_LOCAL_SHARD) {
		if (out->n_bytes)
			copy_part(n, in, f8_cpu_view_data(in), f8_cpu_view_data(out), axis, ranks,
				  place, element, true);
		return F8_OK;
	}
	if (contiguous && n->op == F8_OP_ALL_GATHER)
		return f8_dist_all_gather(cpu->dist, axes, f8_cpu_view_data(in),
					  f8_cpu_view_data(out), (size_t)in->n_bytes, diag);
	if (contiguous)
		return reduce_scatter(cpu, axes, f8_cpu_view_data(in), f8_cpu_view_data(out),
				      (size_t)out->n_bytes / element, out->dtype, diag);
	char *staged = f8_malloc((size_t)whole->n_bytes + 1);
	if (!staged)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory staging a %s",
				   f8_op_name(n->op));
	f8_status status = F8_OK;
	size_t part = (size_t)whole->n_bytes / (size_t)ranks;
	if (n->op == F8_OP_ALL_GATHER) {
		status = f8_dist_all_gather(cpu->dist, axes, f8_cpu_view_data(in), staged,
					    (size_t)in->n_bytes, diag);
		for (int64_t r = 0; !status && part && r < ranks; r++)
			copy_part(n, out, f8_cpu_view_data(out), staged + (size_t)r * part, axis,
				  ranks, r, element, false);
	} else { // ReduceScatter: each rank's part of the input staged contiguous, in rank order
		for (int64_t r = 0; part && r < ranks; r++)
			copy_part(n, in, f8_cpu_view_data(in), staged + (size_t)r * part, axis, ranks,
				  r, element, true);
		status = reduce_scatter(cpu, axes, staged, f8_cpu_view_data(out), part / element,
					out->dtype, diag);
	}
	f8_free(staged);
	return status;
}

/*
 * A packed AllGather or ReduceScatter (packs) as one MPI collective: each rank's parts of the
 * tensors one after another in a staging buffer, the buffers of the ranks in rank order (each
 * tensor's part along axis 0 is a contiguous run of bytes).
 */
static f8_status run_packed(cpu_backend *cpu, const f8_node *n, uint32_t axes,
			    const f8_tensor_view *views, f8_diag *diag) {
	bool gather = n->op == F8_OP_ALL_GATHER;
	size_t ranks = f8_dist_group_size(cpu->dist, axes), bytes = 0; // one rank's parts
	for (uint32_t i = 0; i < n->n_inputs; i++)
		bytes += (size_t)views[n->outputs[i]].n_bytes / (gather ? ranks : 1);
	f8_dtype dtype = views[n->inputs[0]].dtype;
	char *staged = f8_malloc((ranks + 1) * bytes + 1);
	if (!staged)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory staging a %s",
				   f8_op_name(n->op));
	char *mine = staged + ranks * bytes; // this rank's parts, or its reduced ones
	size_t at = 0;
	for (uint32_t i = 0; i < n->n_inputs; i++) {
		const f8_tensor_view *in = &views[n->inputs[i]];
		size_t part = gather ? (size_t)in->n_bytes : (size_t)in->n_bytes / ranks;
		const char *data = f8_cpu_view_data(in);
		if (gather && part)
			memcpy(mine + at, data, part);
		for (size_t r = 0; !gather && part && r < ranks; r++)
			memcpy(staged + r * bytes + at, data + r * part, part);
		at += part;
	}
	f8_status status = gather ? f8_dist_all_gather(cpu->dist, axes, mine, staged, bytes, diag)
				  : reduce_scatter(cpu, axes, staged, mine,
						   bytes / f8_dtype_get_info(dtype)->bytes, dtype,
						   diag);
	at = 0;
	for (uint32_t i = 0; !status && i < n->n_outputs; i++) {
		const f8_tensor_view *out = &views[n->outputs[i]];
		size_t part = gather ? (size_t)out->n_bytes / ranks : (size_t)out->n_bytes;
		char *data = f8_cpu_view_data(out);
		for (size_t r = 0; gather && part && r < ranks; r++)
			memcpy(data + r * part, staged + r * bytes + at, part);
		if (!gather && part)
			memcpy(data, mine + at, part);
		at += part;
	}
	f8_free(staged);
	return status;
}

/* AllGather, ReduceScatter and LocalShard over several ranks: packed into one collective when
 * they can be (run_packed), else each input on its own (run_part). */
static f8_status run_parts(cpu_backend *cpu, const f8_node *n, uint32_t axes,
			   const f8_tensor_view *views, f8_diag *diag) {
	if (f8_rt_collective_packs(n, views))
		return run_packed(cpu, n, axes, views, diag);
	f8_status status = F8_OK;
	for (uint32_t i = 0; !status && i < n->n_inputs; i++)
		status = run_part(cpu, n, i, axes, views, diag);
	return status;
}

/*
 * MPI's all-reduce of `view` in place (bf16 and f16 through an f32 copy, as widen says). A max
 * is MPI's MAX as it is, which may drop a NaN, as NCCL's does on GPUs: the graph makes each
 * amax's NaN +inf before its max over ranks (passes/shard.c guard_amax, the NanToInf nodes),
 * so that one rank's NaN amax is every rank's +inf on both backends. The one other max over
 * ranks the passes make, the vocabulary-parallel loss's row maxima (passes/training.c), needs
 * no such care: a NaN logit makes its row's summed exponentials, all-reduced, NaN on every
 * rank.
 */
static f8_status all_reduce_view(cpu_backend *cpu, uint32_t axes, const f8_tensor_view *view,
				 f8_reduction reduction, f8_diag *diag) {
	size_t count = (size_t)(view->n_bytes / f8_dtype_get_info(view->dtype)->bytes);
	void *data = f8_cpu_view_data(view);
	if (!narrow_dtype(view->dtype))
		return f8_dist_all_reduce(cpu->dist, axes, data, count, view->dtype, reduction,
					  diag);
	f8_rt_tensor wide = {0};
	f8_status status = widen(data, count, view->dtype, &wide, diag);
	if (!status)
		status = f8_dist_all_reduce(cpu->dist, axes, wide.data, count, F8_DTYPE_F32,
					    reduction, diag);
	if (!status)
		narrow(data, view->dtype, &wide);
	f8_rt_tensor_destroy(&wide);
	return status;
}

/* One step round the ring of the collective that runs (cpu->ring_axes): MPI's sendrecv. */
static f8_status ring_shift(void *context, const void *out, void *in, size_t bytes,
			    f8_diag *diag) {
	cpu_backend *cpu = context;
	return f8_dist_ring_shift(cpu->dist, cpu->ring_axes, out, in, bytes, diag);
}

/* The all-to-all of the collective that runs (cpu->ring_axes): MPI's all-to-all. */
static f8_status all_to_all(void *context, const void *out, const size_t *out_bytes, void *in,
			    const size_t *in_bytes, f8_diag *diag) {
	cpu_backend *cpu = context;
	return f8_dist_all_to_all(cpu->dist, cpu->ring_axes, out, out_bytes, in, in_bytes, diag);
}

/*
 * A collective: over a group of one rank, the reference kernel (each output its input); over
 * several, AllReduce runs the reference kernel and then MPI's all-reduce on the outputs in
 * place, AllGather, ReduceScatter and LocalShard run run_parts, Send and Recv MPI's send and
 * receive to and from their peer, and RingAttention and its gradient, AllToAllDispatch and
 * AllToAllCombine run their reference kernels with the group's exchange.
 */
static f8_status run_collective(f8_backend *backend, f8_node_id node, uint32_t axes,
				const f8_tensor_view *views, f8_diag *diag) {
	cpu_backend *cpu = cpu_of(backend);
	const f8_node *n = &cpu->graph->nodes[node];
	bool several = f8_dist_group_size(cpu->dist, axes) > 1;
	f8_status status;
	if (several && (n->op == F8_OP_ALL_GATHER || n->op == F8_OP_REDUCE_SCATTER ||
			n->op == F8_OP_LOCAL_SHARD)) {
		status = run_parts(cpu, n, axes, views, diag);
	} else if (several && (n->op == F8_OP_SEND || n->op == F8_OP_RECV)) {
		uint32_t peer = (uint32_t)f8_node_attr_int(n, "peer", 0);
		int tag = (int)f8_node_attr_int(n, "tag", 0);
		const f8_tensor_view *view = n->op == F8_OP_SEND ? &views[n->inputs[0]]
								 : &views[n->outputs[0]];
		status = n->op == F8_OP_SEND
				 ? f8_dist_send(cpu->dist, axes, peer, tag, f8_cpu_view_data(view),
						(size_t)view->n_bytes, diag)
				 : f8_dist_recv(cpu->dist, axes, peer, tag, f8_cpu_view_data(view),
						(size_t)view->n_bytes, diag);
	} else if (several && (n->op == F8_OP_RING_ATTENTION ||
			       n->op == F8_OP_RING_ATTENTION_GRAD ||
			       n->op == F8_OP_ALL_TO_ALL_DISPATCH ||
			       n->op == F8_OP_ALL_TO_ALL_COMBINE)) {
		f8_cpu_ring ring = {.ranks = f8_dist_group_size(cpu->dist, axes),
				    .place = f8_dist_group_rank(cpu->dist, axes),
				    .shift = ring_shift, .all_to_all = all_to_all, .context = cpu};
		cpu->ring = &ring;
		cpu->ring_axes = axes;
		status = run_reference(cpu, node, views, diag);
		cpu->ring = NULL;
	} else {
		status = run_reference(cpu, node, views, diag);
		if (status || n->op != F8_OP_ALL_REDUCE || !several)
			return status;
		const char *op = f8_node_attr_string(n, "op", "sum");
		f8_reduction reduction = strcmp(op, "max") == 0 ? F8_REDUCTION_MAX
								: F8_REDUCTION_SUM;
		for (uint32_t i = 0; !status && i < n->n_outputs; i++)
			status = all_reduce_view(cpu, axes, &views[n->outputs[i]], reduction, diag);
	}
	if (status && diag && !diag->node[0])
		f8_diag_set_node(diag, cpu->graph, node);
	return status;
}

/* Runs a group's members, in order, through their reference kernels on `views`. */
static f8_status run_list(cpu_backend *cpu, const members *list, const f8_tensor_view *views,
			  f8_diag *diag) {
	f8_status status = F8_OK;
	for (uint32_t m = 0; !status && m < list->n; m++)
		status = run_reference(cpu, list->nodes[m], views, diag);
	if (status && diag && !diag->node[0] && list->n)
		f8_diag_set_node(diag, cpu->graph, list->nodes[0]);
	return status;
}

/*
 * Runs group `group` through its members' reference kernels. The values made and read inside
 * it have no buffer in the slab plan: while the group runs they live in one buffer the backend
 * keeps for them, grown to the largest group's (counted in the backend's bytes: the reference
 * path needs more memory than the plan).
 */
static f8_status run_members(cpu_backend *cpu, uint32_t group, const f8_tensor_view *views,
			     f8_diag *diag) {
	const f8_graph *graph = cpu->graph;
	const members *list = &cpu->groups[group];
	uint64_t need = 0;
	for (uint32_t m = 0; m < list->n; m++) {
		const f8_node *node = &graph->nodes[list->nodes[m]];
		for (uint32_t j = 0; j < node->n_outputs; j++) {
			const f8_tensor_view *view = &views[node->outputs[j]];
			if (!view->buffer && view->n_bytes)
				need += (view->n_bytes + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
		}
	}
	if (!need) // every value has memory of the plan's
		return run_list(cpu, list, views, diag);
	f8_status status = F8_OK;
	if (need > cpu->inside_bytes) {
		buffer_destroy(&cpu->base, cpu->inside);
		cpu->inside = NULL;
		cpu->inside_bytes = 0;
		if ((status = buffer_create(&cpu->base, need, &cpu->inside, diag)))
			return status;
		cpu->inside_bytes = need;
	}
	memcpy(cpu->group_views, views, graph->n_values * sizeof *views);
	uint64_t offset = 0;
	for (uint32_t m = 0; m < list->n; m++) {
		const f8_node *node = &graph->nodes[list->nodes[m]];
		for (uint32_t j = 0; j < node->n_outputs; j++) {
			f8_tensor_view *view = &cpu->group_views[node->outputs[j]];
			if (view->buffer || !view->n_bytes)
				continue;
			view->buffer = cpu->inside;
			view->offset = offset;
			offset += (view->n_bytes + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
		}
	}
	return run_list(cpu, list, cpu->group_views, diag);
}

static f8_status run_group(f8_backend *backend, uint32_t group, const f8_tensor_view *views,
			   f8_diag *diag) {
	cpu_backend *cpu = cpu_of(backend);
	if (cpu->kernels == F8_CPU_KERNELS_REFERENCE)
		return run_members(cpu, group, views, diag);
#ifdef F8C_NO_LLVM
	return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "this f8c was built without LLVM: it has no "
			   "generated kernels");
#else
	f8_status status = F8_OK;
	if (!cpu->generated &&
	    (status = f8_cpu_generated_create(cpu->graph, cpu->kernel_cache, &cpu->generated,
					      diag)))
		return status;
	return f8_cpu_generated_run(cpu->generated, group, views, cpu->symbol_values, diag);
#endif
}

static f8_status synchronize(f8_backend *backend, f8_diag *diag) {
	(void)backend, (void)diag;
	return F8_OK;
}

static void destroy(f8_backend *backend) {
	cpu_backend *cpu = cpu_of(backend);
	release_prepared(cpu);
	f8_free(cpu->kernel_cache);
	f8_free(cpu);
}

static const f8_backend_interface cpu_interface = {
	.name = "cpu",
	.prepare = prepare,
	.buffer_create = buffer_create,
	.buffer_destroy = buffer_destroy,
	.upload = upload,
	.download = download,
	.zero = zero,
	.run_group = run_group,
	.run_node = run_node,
	.run_collective = run_collective,
	.synchronize = synchronize,
	.destroy = destroy,
};

bool f8_cpu_backend_has_generated(void) {
#ifdef F8C_NO_LLVM
	return false;
#else
	return true;
#endif
}

f8_status f8_cpu_backend_create(f8_cpu_kernels kernels, f8_backend **out, f8_diag *diag) {
	return f8_cpu_backend_create_distributed(kernels, NULL, out, diag);
}

f8_status f8_cpu_backend_create_distributed(f8_cpu_kernels kernels, f8_dist *dist,
					    f8_backend **out, f8_diag *diag) {
	*out = NULL;
	if (kernels == F8_CPU_KERNELS_GENERATED && !f8_cpu_backend_has_generated()) {
		f8_diag_set(diag, F8_ERR_UNSUPPORTED, "this f8c was built without LLVM, so the CPU "
			    "backend has no generated kernels");
		f8_diag_hint(diag, "run with --kernels reference, or use a build with LLVM");
		return F8_ERR_UNSUPPORTED;
	}
	if (f8_dist_store(dist)) {
		f8_diag_set(diag, F8_ERR_UNSUPPORTED, "the CPU backend's collectives need MPI, and "
			    "these %lld ranks were started without it", (long long)f8_dist_world(dist));
		f8_diag_hint(diag, "launch with mpirun or srun --mpi, or use --device cuda");
		return F8_ERR_UNSUPPORTED;
	}
	cpu_backend *cpu = f8_calloc(1, sizeof *cpu);
	if (!cpu)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	cpu->base.interface = &cpu_interface;
	cpu->kernels = kernels;
	cpu->dist = dist;
	*out = &cpu->base;
	return F8_OK;
}

void f8_cpu_backend_use(f8_backend *backend, f8_cpu_kernels kernels) {
	cpu_of(backend)->kernels = kernels;
}

f8_status f8_cpu_backend_cache_kernels(f8_backend *backend, const char *folder, f8_diag *diag) {
	cpu_backend *cpu = cpu_of(backend);
	char *copy = NULL;
	if (folder && !(copy = f8_strdup(folder)))
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	f8_free(cpu->kernel_cache);
	cpu->kernel_cache = copy;
	return F8_OK;
}

bool f8_cpu_backend_is(const f8_backend *backend) {
	return backend && backend->interface == &cpu_interface;
}

f8_status f8_cpu_views_borrow(const f8_rt_tensor *tensors, uint32_t n, f8_tensor_view *views,
			      f8_diag *diag) {
	for (uint32_t i = 0; i < n; i++) {
		const f8_rt_tensor *t = &tensors[i];
		views[i] = (f8_tensor_view){.n_bytes = t->n_bytes, .dtype = t->dtype, .rank = t->rank};
		memcpy(views[i].dims, t->dims, sizeof views[i].dims);
		if (!t->data)
			continue;
		if (!(views[i].buffer = f8_calloc(1, sizeof *views[i].buffer))) {
			f8_cpu_views_release(views, i);
			return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
		}
		*views[i].buffer = (f8_buffer){.data = t->data, .n_bytes = t->n_bytes};
	}
	return F8_OK;
}

void f8_cpu_views_release(f8_tensor_view *views, uint32_t n) {
	for (uint32_t i = 0; i < n; i++) {
		f8_free(views[i].buffer);
		views[i].buffer = NULL;
	}
}
