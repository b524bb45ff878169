/*
 * The CUDA backend's NCCL communicators (runtime/cuda/nccl.h).
 */
#include "runtime/cuda/nccl.h" // f8_nccl_*

#include <sched.h>  // sched_yield

#include "ir/alloc.h"                // f8_calloc, f8_free
#include "runtime/cuda/driver.h"     // f8_cuda_check
#include "runtime/cuda/libraries.h"  // f8_cuda_api, f8_cuda_load

enum { WORLD = F8_DIST_GROUPS - 1 }; // the group of every axis

struct f8_nccl {
	f8_dist *dist;
	ncclComm_t world;
	ncclComm_t groups[F8_DIST_GROUPS]; // by axes; NULL: none made
	bool failed;                   // a call failed: the communicators are aborted, not finalized
	bool aborted;                  // after an asynchronous error: no communicator is left
	// The communicators a group of calls (f8_nccl_group_start) touched, to settle at its end.
	bool grouping;
	uint32_t touched[F8_DIST_GROUPS];
	uint32_t n_touched;
};

/* A failure of NCCL's `call` over the group of `axes`, with NCCL's words. */
static f8_status failed(f8_nccl *nccl, ncclComm_t comm, ncclResult_t result, const char *call,
			uint32_t axes, f8_diag *diag) {
	char group[32];
	const char *last = f8_cuda_api.ncclGetLastError(comm);
	nccl->failed = true;
	bool said = last && *last;
	return f8_diag_set(diag, F8_ERR_IO, "NCCL's %s over group %s failed: %s%s%s%s", call,
			   axes == WORLD ? "world" : f8_mesh_group_name(axes, group, sizeof group),
			   f8_cuda_api.ncclGetErrorString(result), said ? " (" : "",
			   said ? last : "", said ? ")" : "");
}

/* A non-blocking communicator's call to its end: while NCCL answers ncclInProgress, its state is
 * polled (the wait for the other ranks, which f8_dist's watchdog holds to the timeout). */
static f8_status settle(f8_nccl *nccl, ncclComm_t comm, ncclResult_t result, const char *call,
			uint32_t axes, f8_diag *diag) {
	if (result == ncclInProgress)
		f8_dist_waiting(nccl->dist, call, axes);
	while (result == ncclInProgress) {
		ncclResult_t state = ncclSuccess;
		ncclResult_t asked = f8_cuda_api.ncclCommGetAsyncError(comm, &state);
		result = asked != ncclSuccess ? asked : state;
		if (result == ncclInProgress)
			sched_yield();
	}
	f8_dist_waiting(nccl->dist, NULL, 0);
	return result == ncclSuccess ? F8_OK : failed(nccl, comm, result, call, axes, diag);
}

/*
 * A non-blocking ncclCommSplit to its end. NCCL writes the new communicator into *made only when
 * the split is complete, from its own thread (2.28's init.cc: "*newcomm should be
 * NCCL_COMM_NULL until comm split fully complete"), so until then there is no communicator to
 * poll: the parent's asynchronous error is watched while the pointer is awaited, then the new
 * communicator's own state is settled. An H100 run of 2026-12-07 found the pointer still NULL
 * right after the call.
 */
static f8_status split_made(f8_nccl *nccl, ncclComm_t *made, ncclResult_t result, uint32_t axes,
			    f8_diag *diag) {
	volatile ncclComm_t *pointer = made;
	if (result != ncclSuccess && result != ncclInProgress)
		return failed(nccl, nccl->world, result, "ncclCommSplit", axes, diag);
	f8_dist_waiting(nccl->dist, "ncclCommSplit", axes);
	while (!*pointer) {
		ncclResult_t state = ncclSuccess;
		ncclResult_t asked = f8_cuda_api.ncclCommGetAsyncError(nccl->world, &state);
		result = asked != ncclSuccess ? asked : state;
		if (result != ncclSuccess && result != ncclInProgress) {
			f8_dist_waiting(nccl->dist, NULL, 0);
			return failed(nccl, nccl->world, result, "ncclCommSplit", axes, diag);
		}
		sched_yield();
	}
	f8_dist_waiting(nccl->dist, NULL, 0);
	f8_status status = settle(nccl, *made, ncclInProgress, "ncclCommSplit", axes, diag);
	// The parent stays busy until its side of the split returns: a next split on it before
	// then fails with "Attempt to use communicator before the previous operation returned
	// ncclSuccess" (an H100 run of 2026-12-07, 22:51 UTC, on the second of 31 splits).
	if (!status)
		status = settle(nccl, nccl->world, ncclInProgress, "ncclCommSplit", axes, diag);
	return status;
}

static ncclConfig_t config_of(void) {
	ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
	int version = 0;
	// The library's own version, which may be older than the header's: the struct is the same
	// from 2.28.0 on (ncclConfig_v22800).
	if (f8_cuda_api.ncclGetVersion(&version) == ncclSuccess && version < (int)config.version)
		config.version = (unsigned)version;
	config.blocking = 0;
	return config;
}

/* The world's id: rank 0's, handed to every rank by f8_dist_broadcast (over MPI, or over the
 * TCP store under the key "broadcast/N" when no MPI launched the run; one process: its own). */
static f8_status world_id(f8_nccl *nccl, ncclUniqueId *id, f8_diag *diag) {
	f8_dist *dist = nccl->dist;
	int64_t world = dist ? f8_dist_world(dist) : 1;
	ncclUniqueId mine = {0};
	f8_status status = F8_OK;
	if (!dist || f8_dist_rank(dist) == 0) {
		ncclResult_t result = f8_cuda_api.ncclGetUniqueId(&mine);
		if (result != ncclSuccess)
			status = failed(nccl, NULL, result, "ncclGetUniqueId", WORLD, diag);
	}
	if (world == 1) {
		*id = mine;
		return status;
	}
	// The others stop too when rank 0 could not make it, instead of waiting for it: rank 0
	// agrees with its failure (its own diagnostic stands) before it returns.
	status = f8_dist_agree(dist, WORLD, status, "make NCCL's id", diag);
	if (!status)
		status = f8_dist_broadcast(dist, &mine, sizeof mine, "NCCL's id", diag);
	*id = mine;
	return status;
}

f8_status f8_nccl_create(f8_dist *dist, uint32_t groups, f8_nccl **out, f8_diag *diag) {
	*out = NULL;
	f8_status status = f8_cuda_load(F8_CUDA_LIBRARY_NCCL, diag);
	if (status)
		return status;
	f8_nccl *nccl = f8_calloc(1, sizeof *nccl);
	if (!nccl)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	nccl->dist = dist;
	ncclUniqueId id;
	status = world_id(nccl, &id, diag);
	if (!status) {
		ncclConfig_t config = config_of();
		int world = dist ? (int)f8_dist_world(dist) : 1;
		int rank = dist ? (int)f8_dist_rank(dist) : 0;
		ncclResult_t result =
			f8_cuda_api.ncclCommInitRankConfig(&nccl->world, world, id, rank, &config);
		status = nccl->world ? settle(nccl, nccl->world, result, "ncclCommInitRank", WORLD, diag)
				     : failed(nccl, NULL, result, "ncclCommInitRank", WORLD, diag);
	}
	// Every rank splits the same groups in the same order: each split is the world's collective.
	for (uint32_t axes = 1; !status && axes < F8_DIST_GROUPS; axes++) {
		if (!(groups & 1u << axes))
			continue;
		ncclConfig_t config = config_of();
		config.splitShare = 1; // the world's resources, shared: fewer buffers per group
		ncclResult_t result = f8_cuda_api.ncclCommSplit(
			nccl->world, (int)f8_dist_group_index(dist, axes),
			(int)f8_dist_group_rank(dist, axes), &nccl->groups[axes], &config);
		status = split_made(nccl, &nccl->groups[axes], result, axes, diag);
	}
	if (status) {
		nccl->failed = true;
		f8_nccl_destroy(nccl);
		return status;
	}
	*out = nccl;
	return F8_OK;
}

/* Ends one communicator: finalize (flushing what it has queued) and destroy, or abort after a
 * failure (ncclCommDestroy could wait for ever on a peer that is gone). */
static void end(f8_nccl *nccl, ncclComm_t comm) {
	if (!comm)
		return;
	if (nccl->failed) {
		f8_cuda_api.ncclCommAbort(comm);
		return;
	}
	ncclResult_t result = f8_cuda_api.ncclCommFinalize(comm);
	if (result == ncclInProgress || result == ncclSuccess)
		result = settle(nccl, comm, result, "ncclCommFinalize", WORLD, NULL) ? ncclSystemError
										   : ncclSuccess;
	if (result == ncclSuccess)
		f8_cuda_api.ncclCommDestroy(comm);
	else
		f8_cuda_api.ncclCommAbort(comm);
}

void f8_nccl_destroy(f8_nccl *nccl) {
	if (!nccl)
		return;
	for (uint32_t axes = 1; axes < F8_DIST_GROUPS; axes++)
		end(nccl, nccl->groups[axes]);
	end(nccl, nccl->world);
	f8_free(nccl);
}

bool f8_nccl_has(const f8_nccl *nccl, uint32_t axes) {
	return nccl && axes < F8_DIST_GROUPS && nccl->groups[axes];
}

/* The communicator of `axes`, or a failure naming `call`. */
static f8_status comm_of(f8_nccl *nccl, uint32_t axes, const char *call, ncclComm_t *out,
			 f8_diag *diag) {
	if (nccl && nccl->aborted)
		return f8_diag_set(diag, F8_ERR_IO, "NCCL's %s: the communicators were aborted after "
				   "an error", call);
	if (!f8_nccl_has(nccl, axes)) {
		char group[32];
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "NCCL's %s over group %s: the run made no "
				   "communicator for it", call,
				   f8_mesh_group_name(axes, group, sizeof group));
	}
	*out = nccl->groups[axes];
	return F8_OK;
}

/* The end of a call on `comm`: settled now, or at the group's end. */
static f8_status issued(f8_nccl *nccl, ncclComm_t comm, ncclResult_t result, const char *call,
			uint32_t axes, f8_diag *diag) {
	if (nccl->grouping && (result == ncclSuccess || result == ncclInProgress)) {
		bool known = false;
		for (uint32_t i = 0; i < nccl->n_touched; i++)
			known |= nccl->touched[i] == axes;
		if (!known)
			nccl->touched[nccl->n_touched++] = axes;
		return F8_OK;
	}
	return settle(nccl, comm, result, call, axes, diag);
}

static f8_status reduce_type(f8_dtype dtype, ncclDataType_t *out, f8_diag *diag) {
	switch (dtype) {
	case F8_DTYPE_F32: *out = ncclFloat32; return F8_OK;
	case F8_DTYPE_F64: *out = ncclFloat64; return F8_OK;
	case F8_DTYPE_F16: *out = ncclFloat16; return F8_OK;
	case F8_DTYPE_BF16: *out = ncclBfloat16; return F8_OK;
	case F8_DTYPE_I32: *out = ncclInt32; return F8_OK;
	case F8_DTYPE_I64: *out = ncclInt64; return F8_OK;
	case F8_DTYPE_U8: *out = ncclUint8; return F8_OK;
	default:
		return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "NCCL reduces no %s",
				   f8_dtype_name(dtype));
	}
}

f8_status f8_nccl_all_reduce(f8_nccl *nccl, uint32_t axes, CUdeviceptr in, CUdeviceptr out,
			     size_t count, f8_dtype dtype, f8_reduction reduction, CUstream stream,
			     f8_diag *diag) {
	ncclComm_t comm = NULL;
	ncclDataType_t type = ncclFloat32;
	f8_status status = comm_of(nccl, axes, "AllReduce", &comm, diag);
	if (!status)
		status = reduce_type(dtype, &type, diag);
	if (status)
		return status;
	ncclResult_t result = f8_cuda_api.ncclAllReduce(
		(const void *)in, (void *)out, count, type,
		reduction == F8_REDUCTION_MAX ? ncclMax : ncclSum, comm, (cudaStream_t)stream);
	return issued(nccl, comm, result, "AllReduce", axes, diag);
}

f8_status f8_nccl_all_gather(f8_nccl *nccl, uint32_t axes, CUdeviceptr in, CUdeviceptr out,
			     size_t bytes, CUstream stream, f8_diag *diag) {
	ncclComm_t comm = NULL;
	f8_status status = comm_of(nccl, axes, "AllGather", &comm, diag);
	if (status)
		return status;
	ncclResult_t result = f8_cuda_api.ncclAllGather((const void *)in, (void *)out, bytes,
							ncclUint8, comm, (cudaStream_t)stream);
	return issued(nccl, comm, result, "AllGather", axes, diag);
}

f8_status f8_nccl_reduce_scatter(f8_nccl *nccl, uint32_t axes, CUdeviceptr in, CUdeviceptr out,
				 size_t count, f8_dtype dtype, CUstream stream, f8_diag *diag) {
	ncclComm_t comm = NULL;
	ncclDataType_t type = ncclFloat32;
	f8_status status = comm_of(nccl, axes, "ReduceScatter", &comm, diag);
	if (!status)
		status = reduce_type(dtype, &type, diag);
	if (status)
		return status;
	ncclResult_t result = f8_cuda_api.ncclReduceScatter(
		(const void *)in, (void *)out, count, type, ncclSum, comm, (cudaStream_t)stream);
	return issued(nccl, comm, result, "ReduceScatter", axes, diag);
}

f8_status f8_nccl_send(f8_nccl *nccl, uint32_t axes, uint32_t peer, CUdeviceptr data,
		       size_t bytes, CUstream stream, f8_diag *diag) {
	ncclComm_t comm = NULL;
	f8_status status = comm_of(nccl, axes, "Send", &comm, diag);
	if (status)
		return status;
	ncclResult_t result = f8_cuda_api.ncclSend((const void *)data, bytes, ncclUint8, (int)peer,
						   comm, (cudaStream_t)stream);
	return issued(nccl, comm, result, "Send", axes, diag);
}

f8_status f8_nccl_recv(f8_nccl *nccl, uint32_t axes, uint32_t peer, CUdeviceptr data,
		       size_t bytes, CUstream stream, f8_diag *diag) {
	ncclComm_t comm = NULL;
	f8_status status = comm_of(nccl, axes, "Recv", &comm, diag);
	if (status)
		return status;
	ncclResult_t result = f8_cuda_api.ncclRecv((void *)data, bytes, ncclUint8, (int)peer, comm,
						   (cudaStream_t)stream);
	return issued(nccl, comm, result, "Recv", axes, diag);
}

f8_status f8_nccl_group_start(f8_nccl *nccl, f8_diag *diag) {
	ncclResult_t result = f8_cuda_api.ncclGroupStart();
	if (result != ncclSuccess)
		return failed(nccl, NULL, result, "ncclGroupStart", WORLD, diag);
	nccl->grouping = true;
	nccl->n_touched = 0;
	return F8_OK;
}

f8_status f8_nccl_group_end(f8_nccl *nccl, f8_diag *diag) {
	nccl->grouping = false;
	ncclResult_t result = f8_cuda_api.ncclGroupEnd();
	if (result != ncclSuccess && result != ncclInProgress)
		return failed(nccl, NULL, result, "ncclGroupEnd", WORLD, diag);
	f8_status status = F8_OK;
	for (uint32_t i = 0; !status && i < nccl->n_touched; i++)
		status = settle(nccl, nccl->groups[nccl->touched[i]], ncclInProgress, "ncclGroupEnd",
				nccl->touched[i], diag);
	nccl->n_touched = 0;
	return status;
}

/* The first asynchronous error of any communicator (the world's as axes WORLD), or
 * ncclSuccess; *comm and *axes say whose. */
static ncclResult_t async_error(const f8_nccl *nccl, ncclComm_t *comm, uint32_t *axes) {
	for (uint32_t g = 0; g < F8_DIST_GROUPS; g++) {
		*comm = g ? nccl->groups[g] : nccl->world;
		*axes = g ? g : WORLD;
		ncclResult_t state = ncclSuccess;
		if (*comm && f8_cuda_api.ncclCommGetAsyncError(*comm, &state) == ncclSuccess &&
		    state != ncclSuccess && state != ncclInProgress)
			return state;
	}
	return ncclSuccess;
}

/* Aborts every communicator now, the splits before the world whose resources they share:
 * their kernels that wait for a peer that is gone end. */
static void abort_all(f8_nccl *nccl) {
	for (uint32_t g = 1; g <= F8_DIST_GROUPS; g++) {
		ncclComm_t *comm = g < F8_DIST_GROUPS ? &nccl->groups[g] : &nccl->world;
		if (*comm)
			f8_cuda_api.ncclCommAbort(*comm);
		*comm = NULL;
	}
	nccl->aborted = true;
}

f8_status f8_nccl_synchronize(f8_nccl *nccl, CUstream stream, const char *what, f8_diag *diag) {
	CUevent done;
	f8_status status = f8_cuda_check(f8_cuda_api.cuEventCreate(&done, CU_EVENT_DISABLE_TIMING),
					 "cuEventCreate", diag);
	if (status)
		return status;
	CUresult result = f8_cuda_api.cuEventRecord(done, stream);
	f8_dist_waiting(nccl->dist, what, WORLD);
	if (result == CUDA_SUCCESS)
		result = f8_cuda_api.cuEventQuery(done);
	for (; result == CUDA_ERROR_NOT_READY; result = f8_cuda_api.cuEventQuery(done)) {
		ncclComm_t comm;
		uint32_t axes;
		ncclResult_t error = async_error(nccl, &comm, &axes);
		if (error != ncclSuccess) {
			status = failed(nccl, comm, error, what, axes, diag);
			abort_all(nccl);
			break;
		}
		sched_yield();
	}
	f8_dist_waiting(nccl->dist, NULL, 0);
	if (!status && result != CUDA_SUCCESS)
		status = f8_cuda_check(result, "cuEventQuery", diag);
	f8_cuda_api.cuEventDestroy(done);
	return status;
}
