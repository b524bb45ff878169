/*
 * The collective nodes on NCCL (runtime/cuda/collectives.h).
 */
#include "runtime/cuda/collectives.h" // f8_cuda_collectives_*

#include <stdint.h> // INT32_MAX
#include <string.h> // strcmp

#include "ir/alloc.h"               // f8_calloc, f8_realloc, f8_free
#include "ir/ops.h"                 // f8_op_get_info
#include "runtime/cuda/all_to_all.h" // f8_cuda_all_to_all_run, f8_cuda_all_to_all_staging
#include "runtime/cuda/kept_buffer.h" // f8_cuda_kept_buffer
#include "runtime/cuda/driver.h"    // f8_cuda_alloc, f8_cuda_check, f8_cuda_stream_*
#include "runtime/cuda/libraries.h" // f8_cuda_api
#include "runtime/cuda/nccl.h"      // f8_nccl_*
#include "runtime/placement.h"      // f8_rt_part_runs, f8_rt_collective_packs

enum { WORLD = F8_DIST_GROUPS - 1 }; // the group of every axis

/* The largest pitch a 2-D copy takes on the GPUs f8c targets (CU_DEVICE_ATTRIBUTE_MAX_PITCH
 * is 2^31 - 1 on Hopper); longer rows are copied one by one. */
#define MAX_PITCH ((uint64_t)INT32_MAX)

/* A buffer a send goes from, and the event recorded after the NCCL group that sent it. */
typedef struct send_slot {
	CUdeviceptr data;
	uint64_t bytes;
	CUevent done;
	bool busy; // held by a send not yet issued, or issued and not known done
} send_slot;

/* A send held back until the next receive (or a flush): its slot, group, peer and bytes. */
typedef struct held_send {
	send_slot *slot;
	uint32_t group, peer;
	uint64_t bytes;
} held_send;

struct f8_cuda_collectives {
	const f8_graph *graph;
	f8_dist *dist;
	bool every_group;
	bool point_to_point;
	f8_nccl *nccl;
	// Staging for the parts that are not one contiguous run.
	f8_cuda_kept_buffer staging;
	// The sends: their buffers (each allocated once, its address never moving), and those
	// held back.
	send_slot **slots;
	uint32_t n_slots;
	held_send *held;
	uint32_t n_held;
};

/* The group of `axes` as NCCL sees it: the axes of more than one rank, or all of them with
 * every_group; 0 for a copy. */
static uint32_t group_of(const f8_cuda_collectives *c, uint32_t axes) {
	return c->every_group ? axes : f8_dist_group_spanned(c->dist, axes);
}

f8_status f8_cuda_collectives_create(f8_dist *dist, const f8_graph *graph, bool every_group,
				     f8_cuda_collectives **out, f8_diag *diag) {
	*out = NULL;
	int64_t world = dist ? f8_dist_world(dist) : 1;
	if (world == 1 && !every_group)
		return F8_OK;
	f8_cuda_collectives *c = f8_calloc(1, sizeof *c);
	if (!c)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	*c = (f8_cuda_collectives){.graph = graph, .dist = dist, .every_group = every_group};
	f8_status status = F8_OK;
	int64_t wanted[F8_DIST_GROUPS] = {0};
	for (uint32_t i = 0; i < graph->n_order; i++) {
		f8_node_id id = graph->order[i];
		uint32_t axes;
		if (!f8_rt_collective_axes(&graph->nodes[id], &axes) || !group_of(c, axes))
			continue;
		wanted[group_of(c, axes)] = 1;
		c->point_to_point |= graph->nodes[id].op == F8_OP_SEND ||
				     graph->nodes[id].op == F8_OP_RECV;
	}
	// NCCL opened on every rank before any rank waits for the others' communicators.
	bool wants = false;
	for (uint32_t g = 1; g < F8_DIST_GROUPS; g++)
		wants |= wanted[g] != 0;
	if (!status && wants)
		status = f8_cuda_load(F8_CUDA_LIBRARY_NCCL, diag);
	// Every rank takes part in the same splits: the union of the groups every rank wants.
	if (world > 1)
		status = f8_dist_agree(dist, WORLD, status, "make its NCCL communicators", diag);
	if (!status && world > 1)
		status = f8_dist_all_reduce(dist, WORLD, wanted, F8_DIST_GROUPS, F8_DTYPE_I64,
					    F8_REDUCTION_MAX, diag);
	uint32_t groups = 0; // bit `axes` for each group that gets a communicator
	for (uint32_t g = 1; g < F8_DIST_GROUPS; g++)
		groups |= wanted[g] ? 1u << g : 0;
	if (!status && groups)
		status = f8_nccl_create(dist, groups, &c->nccl, diag);
	if (status || !groups) {
		f8_cuda_collectives_destroy(c);
		return status;
	}
	*out = c;
	return F8_OK;
}

void f8_cuda_collectives_destroy(f8_cuda_collectives *c) {
	if (!c)
		return;
	f8_nccl_destroy(c->nccl);
	for (uint32_t i = 0; i < c->n_slots; i++) {
		(void)f8_cuda_free(c->slots[i]->data, NULL);
		if (c->slots[i]->done)
			f8_cuda_api.cuEventDestroy(c->slots[i]->done);
		f8_free(c->slots[i]);
	}
	f8_free(c->slots);
	f8_free(c->held);
	f8_cuda_kept_buffer_free(&c->staging);
	f8_free(c);
}

bool f8_cuda_collectives_run_over(const f8_cuda_collectives *c, uint32_t axes) {
	return c && group_of(c, axes); // one without a communicator is refused when it runs
}

uint64_t f8_cuda_collectives_device_bytes(const f8_cuda_collectives *c) {
	uint64_t bytes = c ? c->staging.allocated : 0;
	for (uint32_t i = 0; c && i < c->n_slots; i++)
		bytes += c->slots[i]->bytes;
	return bytes;
}

bool f8_cuda_collectives_point_to_point(const f8_cuda_collectives *c) {
	return c && c->point_to_point;
}

/* A staging buffer of at least `bytes`. */
static f8_status staging_of(f8_cuda_collectives *c, uint64_t bytes, CUdeviceptr *out,
			    f8_diag *diag) {
	return f8_cuda_kept_buffer_get(&c->staging, bytes, out, diag);
}

/* Where a tensor is split among the ranks: along `axis` (not negative), in balanced chunks
 * (context parallelism's two a rank) or one part a rank. */
typedef struct split {
	int axis;
	bool balanced;
} split;

/* The split of a collective node's operands of rank `rank`: its attributes. */
static split split_of(const f8_node *node, int rank) {
	int axis = (int)f8_node_attr_int(node, "axis", 0);
	return (split){.axis = axis < 0 ? axis + rank : axis,
		       .balanced = f8_node_attr_int(node, "balanced", 0) != 0};
}

/* Rank r's part of `whole` (dims of `view`) between the whole at `whole` and the part at
 * `part`: f8_rt_part_runs's runs as 2-D copies. */
static f8_status copy_part(split how, const f8_tensor_view *view, CUdeviceptr whole,
			   CUdeviceptr part, uint32_t ranks, uint32_t r, bool to_part,
			   CUstream stream, f8_diag *diag) {
	f8_rt_part_run runs[2];
	int count = f8_rt_part_runs(view->dims, view->rank, how.axis, ranks, r,
				    f8_dtype_get_info(view->dtype)->bytes, how.balanced, runs);
	f8_status status = F8_OK;
	for (int k = 0; !status && k < count; k++) {
		const f8_rt_part_run *run = &runs[k];
		if (!run->width || !run->rows)
			continue;
		CUdeviceptr w = whole + run->whole_at, p = part + run->part_at;
		// One row, or pitches past what a 2-D copy takes: row by row.
		if (run->rows == 1 || run->whole_pitch > MAX_PITCH || run->part_pitch > MAX_PITCH) {
			for (uint64_t i = 0; !status && i < run->rows; i++)
				status = f8_cuda_copy_device_async(
					to_part ? p + i * run->part_pitch : w + i * run->whole_pitch,
					to_part ? w + i * run->whole_pitch : p + i * run->part_pitch,
					run->width, stream, diag);
			continue;
		}
		uint64_t whole_pitch = run->whole_pitch, part_pitch = run->part_pitch;
		CUDA_MEMCPY2D copy = {
			.srcMemoryType = CU_MEMORYTYPE_DEVICE,
			.srcDevice = to_part ? w : p,
			.srcPitch = to_part ? whole_pitch : part_pitch,
			.dstMemoryType = CU_MEMORYTYPE_DEVICE,
			.dstDevice = to_part ? p : w,
			.dstPitch = to_part ? part_pitch : whole_pitch,
			.WidthInBytes = run->width,
			.Height = run->rows,
		};
		status = f8_cuda_check(f8_cuda_api.cuMemcpy2DAsync(&copy, stream), "cuMemcpy2DAsync",
				       diag);
	}
	return status;
}

/* Whether the parts of `how` are each one contiguous run: along axis 0 (or only ones before
 * it), not balanced. */
static bool contiguous(split how, const f8_tensor_view *whole) {
	bool one = !how.balanced;
	for (int d = 0; d < how.axis; d++)
		one &= whole->dims[d] == 1;
	return one;
}

/* An AllGather (`gather`) of every rank's `part` into `whole`, or a ReduceScatter of every
 * rank's `whole` into the sum's `part`, the tensor split as `how` says, over `group`. */
static f8_status exchange_part(f8_cuda_collectives *c, bool gather, split how, uint32_t group,
			       const f8_tensor_view *whole, CUdeviceptr whole_at,
			       CUdeviceptr part_at, CUstream stream, f8_diag *diag) {
	uint32_t ranks = f8_dist_group_size(c->dist, group);
	size_t element = f8_dtype_get_info(whole->dtype)->bytes;
	uint64_t part = whole->n_bytes / ranks;
	if (!whole->n_bytes)
		return F8_OK;
	if (contiguous(how, whole))
		return gather ? f8_nccl_all_gather(c->nccl, group, part_at, whole_at, (size_t)part,
						   stream, diag)
			      : f8_nccl_reduce_scatter(c->nccl, group, whole_at, part_at,
						       (size_t)part / element, whole->dtype, stream,
						       diag);
	CUdeviceptr staged;
	f8_status status = staging_of(c, whole->n_bytes, &staged, diag);
	if (gather) {
		if (!status)
			status = f8_nccl_all_gather(c->nccl, group, part_at, staged, (size_t)part,
						    stream, diag);
		for (uint32_t r = 0; !status && r < ranks; r++)
			status = copy_part(how, whole, whole_at, staged + r * part, ranks, r, false,
					   stream, diag);
		return status;
	}
	for (uint32_t r = 0; !status && r < ranks; r++) // each rank's part contiguous, in order
		status = copy_part(how, whole, whole_at, staged + r * part, ranks, r, true, stream,
				   diag);
	if (!status)
		status = f8_nccl_reduce_scatter(c->nccl, group, staged, part_at,
						(size_t)part / element, whole->dtype, stream, diag);
	return status;
}

/* AllGather, ReduceScatter or LocalShard of input i into output i. */
static f8_status run_part(f8_cuda_collectives *c, const f8_node *node, uint32_t i,
			  uint32_t group, const f8_tensor_view *views, const CUdeviceptr *inputs,
			  const CUdeviceptr *outputs, CUstream stream, f8_diag *diag) {
	const f8_tensor_view *in = &views[node->inputs[i]], *out = &views[node->outputs[i]];
	bool gather = node->op == F8_OP_ALL_GATHER;
	const f8_tensor_view *whole = gather ? out : in;
	split how = split_of(node, whole->rank);
	if (node->op != F8_OP_LOCAL_SHARD)
		return exchange_part(c, gather, how, group, whole, gather ? outputs[i] : inputs[i],
				     gather ? inputs[i] : outputs[i], stream, diag);
	if (!whole->n_bytes)
		return F8_OK;
	return copy_part(how, in, inputs[i], outputs[i], f8_dist_group_size(c->dist, group),
			 f8_dist_group_rank(c->dist, group), true, stream, diag);
}

f8_status f8_cuda_collectives_sequence(f8_cuda_collectives *c, uint32_t axes, bool gather,
				       const f8_tensor_view *part, CUdeviceptr part_at,
				       CUdeviceptr whole_at, CUstream stream, f8_diag *diag) {
	uint32_t group = group_of(c, axes);
	f8_tensor_view whole = *part;
	uint32_t ranks = f8_dist_group_size(c->dist, group);
	whole.dims[2] *= ranks;
	whole.n_bytes *= ranks;
	return exchange_part(c, gather, (split){.axis = 2, .balanced = true}, group, &whole,
			     whole_at, part_at, stream, diag);
}

/*
 * A packed AllGather or ReduceScatter: the staging buffer holds the group's ranks' runs one
 * after another, each run this rank's parts of the tensors in order, then (past them) this
 * rank's own run, as the CPU backend lays them out.
 */
static f8_status run_packed(f8_cuda_collectives *c, const f8_node *node, uint32_t group,
			    const f8_tensor_view *views, const CUdeviceptr *inputs,
			    const CUdeviceptr *outputs, CUstream stream, f8_diag *diag) {
	bool gather = node->op == F8_OP_ALL_GATHER;
	uint32_t ranks = f8_dist_group_size(c->dist, group);
	uint64_t bytes = 0; // one rank's run
	for (uint32_t i = 0; i < node->n_inputs; i++)
		bytes += views[node->outputs[i]].n_bytes / (gather ? ranks : 1);
	f8_dtype dtype = views[node->inputs[0]].dtype;
	size_t element = f8_dtype_get_info(dtype)->bytes;
	CUdeviceptr staged;
	f8_status status = staging_of(c, (ranks + 1) * bytes, &staged, diag);
	CUdeviceptr mine = staged + ranks * bytes;
	uint64_t at = 0;
	for (uint32_t i = 0; !status && i < node->n_inputs; i++) {
		const f8_tensor_view *in = &views[node->inputs[i]];
		uint64_t part = gather ? in->n_bytes : in->n_bytes / ranks;
		if (gather && part)
			status = f8_cuda_copy_device_async(mine + at, inputs[i], part, stream, diag);
		for (uint32_t r = 0; !status && !gather && part && r < ranks; r++)
			status = f8_cuda_copy_device_async(staged + r * bytes + at,
							   inputs[i] + r * part, part, stream, diag);
		at += part;
	}
	if (!status)
		status = gather ? f8_nccl_all_gather(c->nccl, group, mine, staged, bytes, stream, diag)
				: f8_nccl_reduce_scatter(c->nccl, group, staged, mine,
							 bytes / element, dtype, stream, diag);
	at = 0;
	for (uint32_t i = 0; !status && i < node->n_outputs; i++) {
		const f8_tensor_view *out = &views[node->outputs[i]];
		uint64_t part = gather ? out->n_bytes / ranks : out->n_bytes;
		for (uint32_t r = 0; !status && gather && part && r < ranks; r++)
			status = f8_cuda_copy_device_async(outputs[i] + r * part,
							   staged + r * bytes + at, part, stream, diag);
		if (!status && !gather && part)
			status = f8_cuda_copy_device_async(outputs[i], mine + at, part, stream, diag);
		at += part;
	}
	return status;
}

/* A buffer of at least `bytes` that no send holds: one whose send is done, or a new one. Never
 * waits for a send. */
static f8_status free_slot(f8_cuda_collectives *c, uint64_t bytes, send_slot **out,
			   f8_diag *diag) {
	for (uint32_t i = 0; i < c->n_slots; i++) {
		send_slot *slot = c->slots[i];
		bool held = false;
		for (uint32_t h = 0; h < c->n_held; h++)
			held |= c->held[h].slot == slot;
		if (slot->bytes < bytes || held)
			continue;
		CUresult state = slot->busy ? f8_cuda_api.cuEventQuery(slot->done) : CUDA_SUCCESS;
		if (state == CUDA_ERROR_NOT_READY)
			continue;
		if (state != CUDA_SUCCESS)
			return f8_cuda_check(state, "cuEventQuery", diag);
		*out = slot;
		return F8_OK;
	}
	send_slot **slots = f8_realloc(c->slots, (c->n_slots + 1) * sizeof *slots);
	if (!slots)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	c->slots = slots;
	send_slot *slot = f8_calloc(1, sizeof *slot);
	if (!slot)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	slot->bytes = bytes;
	f8_status status = f8_cuda_alloc(bytes, &slot->data, diag);
	if (!status)
		status = f8_cuda_check(f8_cuda_api.cuEventCreate(&slot->done, CU_EVENT_DISABLE_TIMING),
				       "cuEventCreate", diag);
	if (status) {
		(void)f8_cuda_free(slot->data, NULL);
		f8_free(slot);
		return status;
	}
	c->slots[c->n_slots++] = slot;
	*out = slot;
	return F8_OK;
}

/* A Send: its bytes copied to a slot of their own on the stream, and the send held back until
 * the next receive or flush (send_held). */
static f8_status hold_send(f8_cuda_collectives *c, const f8_node *node, uint32_t group,
			   const f8_tensor_view *view, CUdeviceptr data, CUstream stream,
			   f8_diag *diag) {
	held_send *held = f8_realloc(c->held, (c->n_held + 1) * sizeof *held);
	if (!held)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	c->held = held;
	send_slot *slot = NULL;
	f8_status status = free_slot(c, view->n_bytes ? view->n_bytes : 1, &slot, diag);
	if (!status && view->n_bytes)
		status = f8_cuda_copy_device_async(slot->data, data, view->n_bytes, stream, diag);
	if (status)
		return status;
	slot->busy = true;
	c->held[c->n_held++] = (held_send){.slot = slot, .group = group, .bytes = view->n_bytes,
					    .peer = (uint32_t)f8_node_attr_int(node, "peer", 0)};
	return F8_OK;
}

/* A Recv's group, peer and destination. */
typedef struct receive {
	uint32_t group, peer;
	CUdeviceptr data;
	size_t bytes;
} receive;

/*
 * The sends held back, and the receive `recv` (NULL: none), queued on `stream` as one NCCL
 * group: the pairs Megatron-LM batches (send_forward_recv_backward and
 * send_backward_recv_forward), whose two directions then progress together. Each sent slot's
 * event is recorded after the group.
 */
static f8_status send_held(f8_cuda_collectives *c, const receive *recv, CUstream stream,
			   f8_diag *diag) {
	if (!c->n_held && !recv)
		return F8_OK;
	f8_status status = f8_nccl_group_start(c->nccl, diag);
	for (uint32_t h = 0; !status && h < c->n_held; h++)
		status = f8_nccl_send(c->nccl, c->held[h].group, c->held[h].peer,
				      c->held[h].slot->data, c->held[h].bytes, stream, diag);
	if (!status && recv)
		status = f8_nccl_recv(c->nccl, recv->group, recv->peer, recv->data, recv->bytes,
				      stream, diag);
	f8_status ended = f8_nccl_group_end(c->nccl, status ? NULL : diag);
	status = status ? status : ended;
	for (uint32_t h = 0; !status && h < c->n_held; h++)
		status = f8_cuda_check(f8_cuda_api.cuEventRecord(c->held[h].slot->done, stream),
				       "cuEventRecord", diag);
	c->n_held = 0;
	return status;
}

f8_status f8_cuda_collectives_flush(f8_cuda_collectives *c, CUstream stream, f8_diag *diag) {
	return c ? send_held(c, NULL, stream, diag) : F8_OK;
}

f8_status f8_cuda_collectives_run(f8_cuda_collectives *c, f8_node_id id, uint32_t axes,
				  const f8_tensor_view *views, const CUdeviceptr *inputs,
				  const CUdeviceptr *outputs, CUstream stream, f8_diag *diag) {
	const f8_node *node = &c->graph->nodes[id];
	uint32_t group = group_of(c, axes);
	f8_status status = F8_OK;
	int64_t ranks_planned = f8_node_attr_int(node, "ranks", 0);
	if (ranks_planned && ranks_planned != (int64_t)f8_dist_group_size(c->dist, group))
		return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "%s over %lld ranks needs them; this group "
				   "has %u", f8_op_get_info(node->op)->name, (long long)ranks_planned,
				   f8_dist_group_size(c->dist, group));
	if (node->op == F8_OP_SEND || node->op == F8_OP_RECV) {
		uint32_t peer = (uint32_t)f8_node_attr_int(node, "peer", 0);
		uint32_t ranks = f8_dist_group_size(c->dist, group);
		if (peer >= ranks || peer == f8_dist_group_rank(c->dist, group))
			return f8_diag_set(diag, F8_ERR_INVALID, "%s with place %u of a group of %u "
					   "rank%s: it needs more than one rank, and a peer other "
					   "than this one", f8_op_get_info(node->op)->name, peer,
					   ranks, ranks == 1 ? "" : "s");
	}
	switch (node->op) {
	case F8_OP_ALL_REDUCE: {
		const char *op = f8_node_attr_string(node, "op", "sum");
		f8_reduction reduction = strcmp(op, "max") == 0 ? F8_REDUCTION_MAX : F8_REDUCTION_SUM;
		for (uint32_t i = 0; !status && i < node->n_inputs; i++) {
			const f8_tensor_view *out = &views[node->outputs[i]];
			if (out->n_bytes)
				status = f8_nccl_all_reduce(
					c->nccl, group, inputs[i], outputs[i],
					(size_t)(out->n_bytes / f8_dtype_get_info(out->dtype)->bytes),
					out->dtype, reduction, stream, diag);
		}
		break;
	}
	case F8_OP_ALL_GATHER:
	case F8_OP_REDUCE_SCATTER:
	case F8_OP_LOCAL_SHARD:
		if (f8_rt_collective_packs(node, views))
			status = run_packed(c, node, group, views, inputs, outputs, stream, diag);
		for (uint32_t i = 0; !f8_rt_collective_packs(node, views) && !status && i < node->n_inputs; i++)
			status = run_part(c, node, i, group, views, inputs, outputs, stream, diag);
		break;
	case F8_OP_SEND:
		status = hold_send(c, node, group, &views[node->inputs[0]], inputs[0], stream, diag);
		break;
	case F8_OP_RECV: {
		receive recv = {.group = group, .peer = (uint32_t)f8_node_attr_int(node, "peer", 0),
				.data = outputs[0], .bytes = (size_t)views[node->outputs[0]].n_bytes};
		status = send_held(c, &recv, stream, diag);
		break;
	}
	case F8_OP_ALL_TO_ALL_DISPATCH:
	case F8_OP_ALL_TO_ALL_COMBINE: {
		// The sends held back stay held, to go with their receive as 1F1B pairs them: the
		// all-to-all's group is its own (held sends are not queued in NCCL yet, so none
		// joins it), over expert-parallel ranks that all run the same stage's program, and
		// needs nothing a held send carries. Sent alone here instead, a send would wait for
		// its receive, the wait the pairing is there to avoid. Its waits for the counts hold
		// the sends as the waits of the GroupedLinear next to it do.
		f8_cuda_all_to_all_group over = {.nccl = c->nccl, .axes = group,
						 .ranks = f8_dist_group_size(c->dist, group),
						 .place = f8_dist_group_rank(c->dist, group)};
		status = staging_of(c, f8_cuda_all_to_all_staging(node, views), &over.staging, diag);
		if (!status)
			status = f8_cuda_all_to_all_run(&over, c->graph, id, views, inputs, outputs,
							stream, diag);
		break;
	}
	default: // RingAttention runs through runtime/cuda/ring_attention.h
		status = f8_diag_set(diag, F8_ERR_UNSUPPORTED, "%s has no NCCL path",
				     f8_op_get_info(node->op)->name);
		break;
	}
	return status;
}

f8_status f8_cuda_collectives_synchronize(f8_cuda_collectives *c, CUstream stream,
					  f8_diag *diag) {
	return f8_nccl_synchronize(c->nccl, stream, "NCCL's collectives", diag);
}
