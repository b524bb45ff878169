/*
 * RingAttention and RingAttentionGrad on GPUs by all-gathered keys and values
 * (runtime/cuda/ring_attention.h).
 */
#include "runtime/cuda/ring_attention.h"

#include "ir/alloc.h"               // f8_calloc, f8_realloc, f8_free
#include "ir/dtype.h"               // f8_dtype_get_info
#include "ir/ops.h"                 // f8_node_attr_int
#include "runtime/cuda/driver.h"    // f8_cuda_alloc, f8_cuda_free, f8_cuda_memset_2d_async
#include "runtime/cuda/gemm_lt.h"   // f8_cuda_lt_check, f8_cuda_lt_layout_create
#include "runtime/cuda/kept_buffer.h" // f8_cuda_kept_buffer
#include "runtime/cuda/libraries.h" // f8_cuda_api, f8_cuda_load

struct f8_cuda_ring_attention {
	const f8_graph *graph;
	f8_cuda_attention *attention;
	f8_cuda_collectives *collectives;
	CUstream stream;
	cublasLtHandle_t lt;
	cublasLtMatrixTransformDesc_t sum; // C = alpha A + beta B, f32 scalars
	// The gathered K and V and the gradients' partial sums, one buffer grown to the largest
	// node.
	f8_cuda_kept_buffer buffer;
};

f8_status f8_cuda_ring_attention_create(const f8_graph *graph, f8_cuda_attention *attention,
					f8_cuda_collectives *collectives, CUstream stream,
					f8_cuda_ring_attention **out, f8_diag *diag) {
	*out = NULL;
	f8_status status = f8_cuda_load(F8_CUDA_LIBRARY_CUBLASLT, diag);
	if (status)
		return status;
	f8_cuda_ring_attention *rings = f8_calloc(1, sizeof *rings);
	if (!rings)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	*rings = (f8_cuda_ring_attention){.graph = graph, .attention = attention,
					  .collectives = collectives, .stream = stream};
	status = f8_cuda_lt_check(f8_cuda_api.cublasLtCreate(&rings->lt), "cublasLtCreate", diag);
	if (!status)
		status = f8_cuda_lt_check(f8_cuda_api.cublasLtMatrixTransformDescCreate(&rings->sum,
											CUDA_R_32F),
					  "cublasLtMatrixTransformDescCreate", diag);
	if (status) {
		f8_cuda_ring_attention_destroy(rings);
		return status;
	}
	*out = rings;
	return F8_OK;
}

void f8_cuda_ring_attention_destroy(f8_cuda_ring_attention *rings) {
	if (!rings)
		return;
	if (rings->sum)
		f8_cuda_api.cublasLtMatrixTransformDescDestroy(rings->sum);
	if (rings->lt)
		f8_cuda_api.cublasLtDestroy(rings->lt);
	f8_cuda_kept_buffer_free(&rings->buffer);
	f8_free(rings);
}

uint64_t f8_cuda_ring_attention_device_bytes(const f8_cuda_ring_attention *rings) {
	return rings ? rings->buffer.allocated : 0;
}

/* Bytes rounded up to the 256 that cuDNN's and cuBLASLt's operands are aligned to here. */
static uint64_t aligned(uint64_t bytes) {
	return (bytes + 255) / 256 * 256;
}

/*
 * C = alpha A + beta B over `slabs` runs of `count` elements of `dtype`, each run `pitch`
 * elements after the one before in all three: one cublasLtMatrixTransform of column-major
 * (count x slabs) matrices.
 */
static f8_status transform(f8_cuda_ring_attention *rings, f8_dtype dtype, int64_t count,
			   int64_t slabs, int64_t pitch, float alpha, CUdeviceptr a, float beta,
			   CUdeviceptr b, CUdeviceptr c, f8_diag *diag) {
	if (!count || !slabs)
		return F8_OK;
	cublasLtMatrixLayout_t layout = NULL;
	f8_status status = f8_cuda_lt_layout_create(&layout, dtype, count, slabs, pitch, 1, 0, diag);
	if (!status)
		status = f8_cuda_lt_check(
			f8_cuda_api.cublasLtMatrixTransform(
				rings->lt, rings->sum, &alpha, (const void *)(uintptr_t)a, layout,
				&beta, (const void *)(uintptr_t)b, layout, (void *)(uintptr_t)c,
				layout, rings->stream),
			"cublasLtMatrixTransform", diag);
	if (layout)
		f8_cuda_api.cublasLtMatrixLayoutDestroy(layout);
	return status;
}

/*
 * The dK (or dV) of the two causal calls into `to`, each (slabs, whole rows, width): a's
 * keys[0] rows are where both have terms (a + b), then b's alone up to keys[1], then zeros
 * (keys this rank's queries attend none of).
 */
static f8_status sum_calls(f8_cuda_ring_attention *rings, f8_dtype dtype, int64_t slabs,
			   int64_t whole_rows, int64_t width, const int64_t *keys, CUdeviceptr a,
			   CUdeviceptr b, CUdeviceptr to, f8_diag *diag) {
	size_t element = f8_dtype_get_info(dtype)->bytes;
	int64_t pitch = whole_rows * width;
	f8_status status = transform(rings, dtype, keys[0] * width, slabs, pitch, 1.0f, a, 1.0f, b,
				     to, diag);
	uint64_t from = (uint64_t)(keys[0] * width) * element;
	if (!status)
		status = f8_cuda_copy_2d_async(to + from, (size_t)pitch * element, b + from,
					       (size_t)pitch * element,
					       (size_t)((keys[1] - keys[0]) * width) * element,
					       (size_t)slabs, rings->stream, diag);
	uint64_t zero_from = (uint64_t)(keys[1] * width) * element;
	uint64_t zeros = (uint64_t)((whole_rows - keys[1]) * width) * element;
	if (!status && zeros && slabs)
		status = f8_cuda_memset_2d_async(to + zero_from, (size_t)pitch * element, 0,
						 (size_t)zeros, (size_t)slabs, rings->stream, diag);
	return status;
}

/* An operand's address from query row `row` on: (b, h, rows, width) of `element` bytes. */
static CUdeviceptr from_row(CUdeviceptr at, int64_t row, int64_t width, size_t element) {
	return at ? at + (uint64_t)(row * width) * element : 0;
}

/* The lse rows [q_from, q_from + rows) of a node's (slabs, pitch) lse, between the node's
 * tensor at `node_lse` and a packed (slabs, rows) copy at `packed`: out of the node's when
 * `to_packed`. cuDNN's statistics are packed tensors (attention.c says why). */
static f8_status move_lse(f8_cuda_ring_attention *rings, CUdeviceptr node_lse, CUdeviceptr packed,
			  int64_t slabs, int64_t pitch, int64_t q_from, int64_t rows,
			  bool to_packed, f8_diag *diag) {
	CUdeviceptr view = node_lse + (uint64_t)q_from * 4;
	size_t width = (size_t)rows * 4, view_pitch = (size_t)pitch * 4;
	return to_packed ? f8_cuda_copy_2d_async(packed, width, view, view_pitch, width,
						 (size_t)slabs, rings->stream, diag)
			 : f8_cuda_copy_2d_async(view, view_pitch, packed, width, width,
						 (size_t)slabs, rings->stream, diag);
}

f8_status f8_cuda_ring_attention_run(f8_cuda_ring_attention *rings, f8_node_id id,
				     uint32_t axes, const f8_tensor_view *views,
				     const CUdeviceptr *inputs, const CUdeviceptr *outputs,
				     f8_diag *diag) {
	const f8_node *node = &rings->graph->nodes[id];
	bool backward = node->op == F8_OP_RING_ATTENTION_GRAD;
	int64_t ranks = f8_node_attr_int(node, "ranks", 1);
	uint32_t q = backward ? 1 : 0; // q's input; k and v follow it
	const f8_tensor_view *qv = &views[node->inputs[q]], *kv = &views[node->inputs[q + 1]];
	const f8_tensor_view *vv = &views[node->inputs[q + 2]];
	size_t element = f8_dtype_get_info(qv->dtype)->bytes;
	int64_t head_dim = qv->dims[3], value_dim = vv->dims[3], rows = kv->dims[2];
	int64_t slabs = kv->dims[0] * kv->dims[1]; // (batch, kv heads)
	int64_t q_slabs = qv->dims[0] * qv->dims[1]; // (batch, heads): the lse's
	// Over NCCL the sequence is gathered and the gradients reduce-scattered, also over one rank
	// (F8C_NCCL=1), but for odd rows, which only one rank holds: its parts would not be two
	// chunks of one size, and the gather is the tensor itself.
	bool over = f8_cuda_collectives_run_over(rings->collectives, axes) && rows % 2 == 0;
	if (!over && ranks != 1)
		return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "%s: a ring of %lld ranks needs more "
				   "than one rank; this group has 1", f8_op_get_info(node->op)->name,
				   (long long)ranks);
	int64_t q_from[2], keys[2], q_rows[2];
	uint32_t calls = f8_cuda_attention_ring_calls(rings->attention, id, q_from, keys);
	if (!calls)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "node %u has no ring calls planned", id);
	for (uint32_t i = 0; i < calls; i++)
		q_rows[i] = (i + 1 < calls ? q_from[i + 1] : rows) - q_from[i];

	// The buffer: the gathered K and V; a backward's two calls' dK and dV and their sums over
	// the whole sequence before the reduce-scatter; the two calls' lse rows, packed.
	uint64_t k_whole = aligned(kv->n_bytes * (uint64_t)ranks);
	uint64_t v_whole = aligned(vv->n_bytes * (uint64_t)ranks);
	uint64_t gathered = over ? k_whole + v_whole : 0;
	uint64_t partial = backward && calls == 2 ? 2 * (k_whole + v_whole) : 0;
	uint64_t summed = backward && over ? k_whole + v_whole : 0;
	bool lse = backward || node->n_outputs > 1;
	uint64_t packed = calls == 2 && lse ? aligned((uint64_t)(q_slabs * rows) * 4) : 0;
	CUdeviceptr buffer = 0;
	f8_status status = F8_OK;
	if (gathered + partial + summed + packed)
		status = f8_cuda_kept_buffer_get(&rings->buffer, gathered + partial + summed + packed,
						 &buffer, diag);
	CUdeviceptr lse_at = buffer + gathered + partial + summed; // the packed lse rows
	CUdeviceptr k = inputs[q + 1], v = inputs[q + 2];
	if (!status && over) {
		k = buffer;
		v = buffer + k_whole;
		status = f8_cuda_collectives_sequence(rings->collectives, axes, true, kv,
						      inputs[q + 1], k, rings->stream, diag);
		if (!status)
			status = f8_cuda_collectives_sequence(rings->collectives, axes, true, vv,
							      inputs[q + 2], v, rings->stream, diag);
	}
	if (status)
		return status;

	if (!backward) {
		for (uint32_t i = 0; !status && i < calls; i++) {
			// One call's lse is the node's own; two calls' go through the packed rows.
			CUdeviceptr node_lse = node->n_outputs > 1 ? outputs[1] : 0;
			CUdeviceptr in[3] = {from_row(inputs[0], q_from[i], head_dim, element), k, v};
			CUdeviceptr out[2] = {from_row(outputs[0], q_from[i], value_dim, element),
					      packed ? lse_at : node_lse};
			status = f8_cuda_attention_run_ring_call(rings->attention, id, i, in, out,
								 diag);
			if (!status && packed && node_lse)
				status = move_lse(rings, node_lse, lse_at, q_slabs, rows, q_from[i],
						  q_rows[i], false, diag);
		}
		return status;
	}

	// dK and dV: a call's own, its pair's sum, or (one call, no collective) the node's.
	CUdeviceptr dk = outputs[1], dv = outputs[2];
	if (over) {
		dk = buffer + gathered + partial;
		dv = dk + k_whole;
	}
	for (uint32_t i = 0; !status && i < calls; i++) {
		CUdeviceptr at = buffer + gathered + i * (k_whole + v_whole);
		if (packed)
			status = move_lse(rings, inputs[5], lse_at, q_slabs, rows, q_from[i],
					  q_rows[i], true, diag);
		CUdeviceptr in[6] = {from_row(inputs[0], q_from[i], value_dim, element),
				     from_row(inputs[1], q_from[i], head_dim, element),
				     k,
				     v,
				     from_row(inputs[4], q_from[i], value_dim, element),
				     packed ? lse_at : inputs[5]};
		CUdeviceptr out[3] = {from_row(outputs[0], q_from[i], head_dim, element),
				      calls == 2 ? at : dk, calls == 2 ? at + k_whole : dv};
		if (!status)
			status = f8_cuda_attention_run_ring_call(rings->attention, id, i, in, out,
								 diag);
	}
	int64_t whole_rows = ranks * rows; // without NCCL one rank's: ranks is 1 (checked above)
	CUdeviceptr first = buffer + gathered, second = first + k_whole + v_whole;
	if (!status && calls == 2)
		status = sum_calls(rings, kv->dtype, slabs, whole_rows, head_dim, keys, first, second,
				   dk, diag);
	if (!status && calls == 2)
		status = sum_calls(rings, vv->dtype, slabs, whole_rows, value_dim, keys,
				   first + k_whole, second + k_whole, dv, diag);
	if (!status && over)
		status = f8_cuda_collectives_sequence(rings->collectives, axes, false, kv,
						      outputs[1], dk, rings->stream, diag);
	if (!status && over)
		status = f8_cuda_collectives_sequence(rings->collectives, axes, false, vv,
						      outputs[2], dv, rings->stream, diag);
	return status;
}
