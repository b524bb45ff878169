/*
 * The CUDA backend's collective nodes over several GPUs, on NCCL (runtime/cuda/nccl.h), doing
 * what the CPU backend's MPI collectives do (runtime/cpu/backend.c), so that a plan runs alike
 * on both:
 *
 *   AllReduce        each input reduced (sum or max) into its output, one ncclAllReduce each
 *                    (a max drops a NaN: an amax's comes +inf from the graph, f8_nccl_all_reduce);
 *   AllGather        along axis 0 (each rank's part a contiguous run) one ncclAllGather; along
 *                    another axis, or in context parallelism's balanced chunks, gathered into a
 *                    staging buffer and each rank's part put in place by 2-D copies
 *                    (runtime/placement.h, f8_rt_part_runs); several inputs along axis 0 of one
 *                    dtype (the distributed optimizer's buckets) packed into one;
 *   ReduceScatter    likewise, the parts staged contiguous before one ncclReduceScatter (a sum);
 *   LocalShard       this rank's part copied out of the replicated input;
 *   Send, Recv       ncclSend and ncclRecv over the group. A send's bytes are copied to a
 *                    buffer of their own, and the send is held back and queued with the next
 *                    receive as one NCCL group (or at a flush: the training loop's, before the
 *                    ranks next agree): 1F1B's pairs, which Megatron-LM batches, so that two
 *                    stages that each send before they receive do not wait on each other (an
 *                    NCCL send waits for its receive, and a communicator's calls run in the
 *                    order they were queued). A buffer is used again once its group is done.
 *                    NCCL has no tags: a pair's messages meet in the order they are posted,
 *                    the interleaved schedule's tags unread. Which schedules pair them up and
 *                    complete under this grouping is runtime/pipeline_messages.h's to say: the
 *                    training loop checks its schedule there before the first step (1F1B
 *                    passes; the interleaved one only with PP micro-batches a step);
 *   AllToAllDispatch and AllToAllCombine
 *                    expert parallelism's exchange of the tokens' rows, in
 *                    runtime/cuda/all_to_all.h: the counts read to the host (exchanged first,
 *                    unless given), then one group of a send and a receive per peer, the rows
 *                    regrouped through the staging buffer. The sends held back stay held
 *                    (f8_cuda_collectives_run says why).
 *
 * Context parallelism's RingAttention is cuDNN's calls over K and V gathered here
 * (f8_cuda_collectives_sequence below; runtime/cuda/ring_attention.h).
 *
 * A group of one rank is a copy (an all-to-all's: its rows kept, runtime/cuda/all_to_all.h) and
 * never reaches here, unless the backend was asked to run every collective through NCCL
 * (F8C_NCCL=1: how one GPU tests these paths).
 */
#ifndef F8_RUNTIME_CUDA_COLLECTIVES_H
#define F8_RUNTIME_CUDA_COLLECTIVES_H

#include <stdbool.h> // bool
#include <stdint.h>  // uint32_t

#include <cuda.h> // CUdeviceptr, CUstream

#include "ir/diag.h"             // f8_status, f8_diag
#include "ir/graph.h"            // f8_graph, f8_node_id
#include "runtime/backend.h"     // f8_tensor_view
#include "runtime/distributed.h" // f8_dist

typedef struct f8_cuda_collectives f8_cuda_collectives;

/*
 * The collectives of `graph` (prepared: its collective nodes are final) for `dist`'s run: the
 * groups its collectives span, agreed with every other rank (their union: a communicator split
 * is the world's collective), made into communicators. `every_group`: groups of one rank too
 * (F8C_NCCL=1). *out is the caller's; NULL with F8_OK when no collective needs NCCL.
 * The failures of f8_nccl_create.
 */
f8_status f8_cuda_collectives_create(f8_dist *dist, const f8_graph *graph, bool every_group,
				     f8_cuda_collectives **out, f8_diag *diag);

void f8_cuda_collectives_destroy(f8_cuda_collectives *collectives);

/* Whether collective nodes over the group of `axes` run here: a group of more than one rank
 * (or any, with F8C_NCCL=1); else they are copies. NULL `collectives`: none do. */
bool f8_cuda_collectives_run_over(const f8_cuda_collectives *collectives, uint32_t axes);

/* Device bytes of its staging buffers (the outgrown ones too) and its sends' buffers now: they
 * grow as the collectives run. 0 for NULL. */
uint64_t f8_cuda_collectives_device_bytes(const f8_cuda_collectives *collectives);

/* Whether the graph sends or receives over NCCL: its runs cannot be CUDA graphs then (a send
 * is queued in a later run's group). */
bool f8_cuda_collectives_point_to_point(const f8_cuda_collectives *collectives);

/*
 * Queues collective node `node` of the graph over the group of `axes` on `stream`: `views` the
 * executor's (dims and bytes), `inputs` and `outputs` the device addresses of the node's
 * operands. F8_ERR_IO when NCCL or the device fails, F8_ERR_NOMEM for the staging buffers.
 */
f8_status f8_cuda_collectives_run(f8_cuda_collectives *collectives, f8_node_id node,
				  uint32_t axes, const f8_tensor_view *views,
				  const CUdeviceptr *inputs, const CUdeviceptr *outputs,
				  CUstream stream, f8_diag *diag);

/*
 * Context parallelism's keys or values (runtime/cuda/ring_attention.h) over the group of
 * `axes`: with `gather`, every rank's `part` ((b, h, rows, d) at `part_at`: chunks r and
 * 2R - 1 - r of the sequence, R the group's ranks) all-gathered into the whole sequence in
 * order, (b, h, R rows, d) at `whole_at`; else every rank's whole (a gradient) summed and
 * reduce-scattered back into the parts. Queued on `stream`. `collectives` must not be NULL:
 * a group without one holds the whole sequence already.
 */
f8_status f8_cuda_collectives_sequence(f8_cuda_collectives *collectives, uint32_t axes,
				       bool gather, const f8_tensor_view *part, CUdeviceptr part_at,
				       CUdeviceptr whole_at, CUstream stream, f8_diag *diag);

/* Queues the sends held back (as one group) on `stream`. NULL `collectives` is allowed. */
f8_status f8_cuda_collectives_flush(f8_cuda_collectives *collectives, CUstream stream,
				    f8_diag *diag);

/* Waits for `stream` (and the NCCL calls on it), watching the communicators for errors
 * (f8_nccl_synchronize). */
f8_status f8_cuda_collectives_synchronize(f8_cuda_collectives *collectives, CUstream stream,
					  f8_diag *diag);

#endif
