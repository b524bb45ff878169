/*
 * Context parallelism's RingAttention and RingAttentionGrad (ir/ops.def) on GPUs: what the CPU
 * backend's ring kernels compute (runtime/cpu/kernels_ring_attention.c), by all-gathered keys
 * and values instead of a ring (TransformerEngine's cp_comm_type "all_gather"): K and V are
 * gathered over the context-parallel group into the whole sequence in order
 * (f8_cuda_collectives_sequence), and this rank's query rows attend it in cuDNN calls whose
 * masks are plain bottom-right causal ones (f8_cuda_attention_ring_calls): the rank's chunk r
 * attends the first (r + 1) c keys and its chunk 2R - 1 - r the first (2R - r) c, so no
 * partial results are merged by their log-sum-exp and every output row is one cuDNN softmax.
 * The backward runs the same calls; their dK and dV over the whole sequence are summed
 * (cublasLtMatrixTransform: C = A + B, no hand-written kernel; where the second call alone has
 * terms, a 2-D copy), zero past the keys they attend, and reduce-scattered back to the ranks
 * that hold those rows. Each call's lse rows go through a packed copy of their own (cuDNN's
 * statistics must be packed; attention.c says why): 2-D copies before and after the calls.
 * Extra roundings against the CPU's one: each call's dK and dV to bf16, their sum, and
 * NCCL's bf16 sums over the ranks.
 *
 * A group of one rank (no NCCL: every collective of its group is a copy; or odd rows, which
 * only one rank holds) reads K and V in place and writes the node's dK and dV directly; the two causal calls are the same as on
 * several ranks (its first half's rows against the first half, the rest against all), so one
 * GPU runs the calls, the masks and the sum that several do. With F8C_NCCL=1 the gather and
 * the reduce-scatter go through NCCL over the one rank too.
 *
 * Memory: the gathered K and V (R x the rank's), and in the backward the two calls' dK and dV
 * and their sum over the whole sequence (with the collectives' staging, about 5 R x a rank's K
 * and V), and the lse rows: buffers of this object, grown to the largest node and kept (a CUDA
 * graph captured after the first step reads them). The ring's overlap of each
 * block's transfer with the attention of the one before is not built: the gather precedes the
 * calls.
 */
#ifndef F8_RUNTIME_CUDA_RING_ATTENTION_H
#define F8_RUNTIME_CUDA_RING_ATTENTION_H

#include <stdint.h> // uint32_t, uint64_t

#include <cuda.h> // CUdeviceptr, CUstream

#include "ir/diag.h"                  // f8_status, f8_diag
#include "ir/graph.h"                 // f8_graph, f8_node_id
#include "runtime/backend.h"          // f8_tensor_view
#include "runtime/cuda/attention.h"   // f8_cuda_attention
#include "runtime/cuda/collectives.h" // f8_cuda_collectives

typedef struct f8_cuda_ring_attention f8_cuda_ring_attention;

/* The ring nodes of `graph` run on `stream` with `attention`'s plans of their calls and over
 * `collectives` (NULL: every group of one rank). Opens cuBLASLt. *out is the caller's. */
f8_status f8_cuda_ring_attention_create(const f8_graph *graph, f8_cuda_attention *attention,
					f8_cuda_collectives *collectives, CUstream stream,
					f8_cuda_ring_attention **out, f8_diag *diag);

/*
 * Queues ring node `node` over the group of `axes`: `views` the executor's, `inputs` and
 * `outputs` the device addresses of the node's operands. F8_ERR_UNSUPPORTED for a ring of
 * several ranks without their communicator; F8_ERR_IO, F8_ERR_NOMEM.
 */
f8_status f8_cuda_ring_attention_run(f8_cuda_ring_attention *rings, f8_node_id node,
				     uint32_t axes, const f8_tensor_view *views,
				     const CUdeviceptr *inputs, const CUdeviceptr *outputs,
				     f8_diag *diag);

/* Device bytes of its buffers now (the outgrown ones too). */
uint64_t f8_cuda_ring_attention_device_bytes(const f8_cuda_ring_attention *rings);

/* NULL is allowed. */
void f8_cuda_ring_attention_destroy(f8_cuda_ring_attention *rings);

#endif
