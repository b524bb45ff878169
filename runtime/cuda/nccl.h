/*
 * The CUDA backend's communicators, through NCCL (DESIGN.md, "Distributed"): one communicator
 * for each group of mesh axes a run's collectives use, split from a world communicator.
 *
 * Rank 0 makes the world's id (ncclGetUniqueId) and f8_dist hands it to every rank
 * (f8_dist_broadcast: over MPI when MPI launched the run, else over the TCP store at
 * MASTER_ADDR:MASTER_PORT: runtime/distributed.h); a run of one process makes it alone. The
 * groups are split (ncclCommSplit, color f8_dist_group_index, key f8_dist_group_rank, so that a
 * communicator's ranks are the group's places) in one order on every rank: a split is a
 * collective of the whole world, and ranks that run different programs (pipeline stages) must
 * still make the same ones, so the caller passes the union of every rank's groups (which
 * runtime/cuda/collectives.c agrees on with f8_dist's all-reduce, over MPI or the store alike).
 *
 * The communicators are non-blocking (ncclConfig_t.blocking = 0): each call returns at once and
 * its enqueueing is polled to its end, with the run's distributed timeout; an asynchronous error
 * a communicator reports (a peer that died, a network failure) aborts every communicator and is
 * the call's failure, naming the call, the group and NCCL's last message. A collective is queued
 * on the caller's stream, where a CUDA graph can capture it.
 */
#ifndef F8_RUNTIME_CUDA_NCCL_H
#define F8_RUNTIME_CUDA_NCCL_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // uint32_t

#include <cuda.h> // CUdeviceptr, CUstream

#include "ir/diag.h"             // f8_status, f8_diag
#include "ir/dtype.h"            // f8_dtype
#include "ir/graph.h"            // f8_reduction
#include "runtime/distributed.h" // f8_dist

typedef struct f8_nccl f8_nccl;

/*
 * Communicators on the current CUDA context for `dist`'s run (NULL: one process): the world's,
 * then one for each group of axes whose bit is set in `groups` (bit `axes`, for axes 1 ..
 * 2^F8_MESH_AXIS_COUNT - 1; every rank passes the same bits). NCCL is opened first
 * (runtime/cuda/libraries.h). *out is the caller's (f8_nccl_destroy). F8_ERR_UNSUPPORTED when
 * libnccl is missing or too old; F8_ERR_IO when NCCL fails (the message names the call).
 */
f8_status f8_nccl_create(f8_dist *dist, uint32_t groups, f8_nccl **out, f8_diag *diag);

/* Ends the communicators: finalized and destroyed, or aborted when one has failed. NULL is
 * allowed. */
void f8_nccl_destroy(f8_nccl *nccl);

/* Whether the group of `axes` has a communicator. */
bool f8_nccl_has(const f8_nccl *nccl, uint32_t axes);

/*
 * The collectives over the group of `axes`, queued on `stream`; counts are elements of `dtype`
 * (f32, f64, f16, bf16, i32, i64 or u8). Each fails with F8_ERR_IO naming the collective and
 * the group when NCCL does, F8_ERR_UNSUPPORTED for a dtype NCCL cannot reduce, F8_ERR_ARGUMENT
 * for a group without a communicator.
 *
 * all_reduce: `count` elements reduced in place or into `out` (sum or max) on every rank.
 * NCCL's float max is fmaxf's, which drops a NaN, as MPI's MAX on the CPU may: the graph makes
 * each amax's NaN +inf before its max over ranks (the shard pass's NanToInf nodes), so that one
 * rank's NaN amax is every rank's +inf on both backends, and neither backend touches the data.
 * Where it differs from the CPU backend's MPI: it sums bf16 and f16 in their dtype, rounding at
 * each step (the CPU sums them in f32).
 * all_gather: each rank's `bytes` from `in` into `out`, the group's places in order.
 * reduce_scatter: `in` of the group's size times `count` summed over the group; this rank's
 * `count` (its place's) into `out`.
 */
f8_status f8_nccl_all_reduce(f8_nccl *nccl, uint32_t axes, CUdeviceptr in, CUdeviceptr out,
			     size_t count, f8_dtype dtype, f8_reduction reduction, CUstream stream,
			     f8_diag *diag);
f8_status f8_nccl_all_gather(f8_nccl *nccl, uint32_t axes, CUdeviceptr in, CUdeviceptr out,
			     size_t bytes, CUstream stream, f8_diag *diag);
f8_status f8_nccl_reduce_scatter(f8_nccl *nccl, uint32_t axes, CUdeviceptr in, CUdeviceptr out,
				 size_t count, f8_dtype dtype, CUstream stream, f8_diag *diag);

/*
 * Point to point over the group of `axes`: `bytes` to, or from, the rank at place `peer`. NCCL
 * matches a pair's sends and receives in the order each side queues them. Between
 * f8_nccl_group_start and f8_nccl_group_end the calls go as one (a send and a receive between
 * two ranks that would otherwise each wait for the other's).
 */
f8_status f8_nccl_send(f8_nccl *nccl, uint32_t axes, uint32_t peer, CUdeviceptr data,
		       size_t bytes, CUstream stream, f8_diag *diag);
f8_status f8_nccl_recv(f8_nccl *nccl, uint32_t axes, uint32_t peer, CUdeviceptr data,
		       size_t bytes, CUstream stream, f8_diag *diag);
f8_status f8_nccl_group_start(f8_nccl *nccl, f8_diag *diag);
f8_status f8_nccl_group_end(f8_nccl *nccl, f8_diag *diag);

/*
 * Waits for `stream` to finish what it has been given, polling every communicator's
 * asynchronous error meanwhile: the wait for a collective's peers, which f8_dist's watchdog
 * holds to the run's timeout (f8_dist_waiting names `what`). An error aborts the communicators
 * and is F8_ERR_IO with NCCL's words.
 */
f8_status f8_nccl_synchronize(f8_nccl *nccl, CUstream stream, const char *what, f8_diag *diag);

#endif
