/*
 * Expert parallelism's AllToAllDispatch and AllToAllCombine (ir/ops.def) on the GPU, doing what
 * the reference kernels do (runtime/cpu/kernels_all_to_all.c), so that a plan runs alike on both.
 * Rank j of the group holds experts [j E / ranks, (j + 1) E / ranks), so a rank's rows for rank
 * j's experts are one contiguous run of its rows.
 *
 * The counts (and the rows received per rank and local expert: given as input 2, or exchanged
 * over NCCL first, each rank sending rank j its counts of j's experts) are read to the host,
 * after the stream is waited for, and checked as the reference checks them. The rows then go as
 * one NCCL group of a send and a receive per peer (the rank itself too: how one GPU tests it,
 * F8C_NCCL=1) into a staging buffer, and are regrouped by local expert, then source rank, by
 * device-to-device copies, as Megatron-LM's dispatcher sorts its chunks after its all-to-all;
 * the rows past those that arrived are zeroed. Combine undoes each step in reverse. A group of
 * one rank without NCCL copies its rows in place of the exchange: with one rank the regrouping
 * is the identity.
 *
 * Reading the counts waits for the stream mid-run: a run with these nodes cannot be a CUDA graph
 * (the backend's why_no_graphs). Megatron-LM's dispatcher waits for its counts too.
 *
 * tests/gpu/all_to_all_mock.c holds the layouts over 1 to 4 ranks to the op's definition on the
 * host (host memory for the device's, threads for NCCL's ranks); the backend test table runs
 * the groups of one rank on a GPU, with and without NCCL.
 */
#ifndef F8_RUNTIME_CUDA_ALL_TO_ALL_H
#define F8_RUNTIME_CUDA_ALL_TO_ALL_H

#include <stdint.h> // uint32_t, uint64_t

#include <cuda.h> // CUdeviceptr, CUstream

#include "ir/diag.h"           // f8_status, f8_diag
#include "ir/graph.h"          // f8_graph, f8_node, f8_node_id
#include "runtime/backend.h"   // f8_tensor_view
#include "runtime/cuda/nccl.h" // f8_nccl

/* The group an all-to-all runs over. */
typedef struct f8_cuda_all_to_all_group {
	f8_nccl *nccl;         // NULL: a group of one rank without NCCL, whose exchange is a copy
	uint32_t axes;         // the group, as f8_nccl_* take it
	uint32_t ranks, place; // the group's size, and this rank's place in it
	CUdeviceptr staging;   // f8_cuda_all_to_all_staging(node)'s bytes, with `nccl`; else 0
} f8_cuda_all_to_all_group;

/* The staging bytes all-to-all node `node` needs over NCCL, with `views` the executor's: the
 * rows of its (ranks x rows, hidden) tensor (what can arrive, or leave, at most), then room for
 * the counts received. */
uint64_t f8_cuda_all_to_all_staging(const f8_node *node, const f8_tensor_view *views);

/*
 * Runs AllToAllDispatch or AllToAllCombine node `id` of `graph` over `group` on `stream`:
 * `views` the executor's (dims and bytes), `inputs` and `outputs` the device addresses of the
 * node's operands. Waits for the stream (to read the counts) before it returns; the rows' exchange
 * is queued. F8_ERR_INVALID naming the node for counts that are negative, or do not fit the
 * rows, or that disagree with what this rank sends itself; F8_ERR_UNSUPPORTED for a node whose
 * `ranks` is not the group's; F8_ERR_IO when NCCL or the device fails; F8_ERR_NOMEM.
 */
f8_status f8_cuda_all_to_all_run(const f8_cuda_all_to_all_group *group, const f8_graph *graph,
				 f8_node_id id, const f8_tensor_view *views,
				 const CUdeviceptr *inputs, const CUdeviceptr *outputs,
				 CUstream stream, f8_diag *diag);

#endif
