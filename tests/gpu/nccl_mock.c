/*
 * The CUDA backend's NCCL communicators (runtime/cuda/nccl.c) without a GPU or NCCL: the file
 * runs against a fake library table (f8_cuda_api) whose NCCL keeps non-blocking communicators
 * (ncclConfig_t.blocking = 0) as strictly as NCCL 2.28's src/init.cc does. Every call that needs
 * a ready communicator (a split of it, a collective, a send or receive, finalize, destroy) on
 * one whose asynchronous state is still ncclInProgress fails with ncclInvalidArgument, as
 * ncclCommEnsureReady does ("Attempt to use communicator before the previous operation returned
 * ncclSuccess"), and the test counts each such call. ncclCommInitRankConfig and ncclCommSplit
 * answer ncclInProgress; a split leaves its parent busy, writes the new communicator's pointer
 * only some polls later (NCCL writes it from its own thread, and it stays NULL until then), and
 * the new communicator is busy for some more polls after that; some splits leave the parent
 * busy after the child is ready, which is the order the H100 run of 2026-12-07 met. Time is the
 * count of ncclCommGetAsyncError and cuEventQuery calls; the waits are drawn from a seeded
 * generator, so that a run repeats (`nccl_mock SEED`). An event is not ready for its first few
 * queries.
 *
 * Held: one rank's world and 31 groups' communicators are made without a call on a busy one;
 * f8_nccl_synchronize waits for an event that is not ready yet; an asynchronous error on one
 * group while it waits is its failure, naming the group, and aborts every communicator, the
 * world last; f8_nccl_destroy finalizes (settled) and destroys each, or aborts each after a
 * failure; AllReduce, AllGather, ReduceScatter and a grouped send and receive settle their
 * communicators. The two bugs commit 8bbb3f4 mended fail here: a synchronize that took its
 * first 'not ready' for a failure, and a split that left its parent busy for the next one.
 * nccl_check runs the real library on one GPU; this is where its non-blocking states are
 * driven through every order.
 */
#define _POSIX_C_SOURCE 200809L // alarm

#include <stdint.h> // uint32_t, uint64_t
#include <stdio.h>  // printf, snprintf
#include <stdlib.h> // strtoul
#include <string.h> // memset, strstr
#include <unistd.h> // alarm

#include "runtime/cuda/driver.h"    // f8_cuda_check, defined below
#include "runtime/cuda/libraries.h" // f8_cuda_api_table, f8_cuda_load, defined below
#include "runtime/cuda/nccl.h"      // f8_nccl_*
#include "tests/test_support.h"     // CHECK, test_finish

enum { WORLD = F8_DIST_GROUPS - 1, MAX_COMMS = 2 * F8_DIST_GROUPS, MAX_EVENTS = 8 };

static const char busy_message[] =
	"Attempt to use communicator before the previous operation returned ncclSuccess";

/* ---- Time and chance ----------------------------------------------------------------------- */

static uint64_t random_state;
static long now; // one tick a poll: what NCCL's own thread gets done while the caller polls

/* A draw in [low, high], from xorshift64: the same waits for the same seed. */
static long draw(long low, long high) {
	random_state ^= random_state << 13;
	random_state ^= random_state >> 7;
	random_state ^= random_state << 17;
	return low + (long)(random_state % (uint64_t)(high - low + 1));
}

/* ---- NCCL's communicators ------------------------------------------------------------------ */

struct ncclComm {
	int order;            // made n-th since the last reset: 0 the world, n the n-th split
	long ready_at;        // the tick its last operation ends: ncclInProgress before it
	ncclResult_t error;   // an asynchronous error reported from the tick error_at on
	long error_at;
	bool finalized, destroyed, aborted;
	int ended_as;         // the how-many-th communicator ended, from 1
};

/* A split's new communicator, written into the caller's pointer at its tick. */
typedef struct pending_split {
	ncclComm_t parent;
	ncclComm_t *where;
	ncclComm_t made;
	long at;
} pending_split;

static struct ncclComm comms[MAX_COMMS];
static int n_comms, n_ended;
static pending_split pending[MAX_COMMS];
static int n_pending;
static ncclComm_t grouped[MAX_COMMS]; // the communicators the open group's calls touched
static int n_grouped, group_depth;
static const char *last_error = "";
static int busy_calls;     // calls on a communicator that was not ready: NCCL refuses them
static int misuses;        // calls on one already ended, or out of NCCL's order
static int parent_outlived; // splits whose parent stayed busy after the child was ready
static ncclResult_t fail_next_all_reduce = ncclSuccess;

static void reset(void) {
	memset(comms, 0, sizeof comms);
	n_comms = n_ended = n_pending = n_grouped = group_depth = 0;
	busy_calls = misuses = parent_outlived = 0;
	last_error = "";
}

static void misuse(const char *what) {
	if (misuses++ < 5)
		printf("misuse: %s\n", what);
}

/* Time passes: the splits whose tick has come write their pointers, as NCCL's thread would. */
static void tick(void) {
	now++;
	for (int i = 0; i < n_pending; i++)
		if (pending[i].at <= now) {
			*pending[i].where = pending[i].made;
			pending[i--] = pending[--n_pending];
		}
}

/* NCCL's ncclCommEnsureReady: whether `comm` may be used by `call` now. */
static bool ensure_ready(ncclComm_t comm, const char *call) {
	if (!comm || comm->destroyed || comm->aborted) {
		misuse(call);
		return false;
	}
	if (now < comm->ready_at) {
		if (busy_calls++ < 5)
			printf("%s on communicator %d, busy until tick %ld at %ld: %s\n", call,
			       comm->order, comm->ready_at, now, busy_message);
		last_error = busy_message;
		return false;
	}
	return true;
}

static ncclComm_t comm_new(long ready_at) {
	if (n_comms == MAX_COMMS) {
		misuse("too many communicators");
		return NULL;
	}
	ncclComm_t comm = &comms[n_comms];
	comm->order = n_comms++;
	comm->ready_at = ready_at;
	return comm;
}

static ncclResult_t fake_get_version(int *version) {
	*version = 22803;
	return ncclSuccess;
}

static const char *fake_get_error_string(ncclResult_t result) {
	switch (result) {
	case ncclSuccess: return "no error";
	case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
	case ncclRemoteError: return "remote process exited or there was a network error";
	case ncclInProgress: return "NCCL operation in progress";
	default: return "unhandled system error";
	}
}

static const char *fake_get_last_error(ncclComm_t comm) {
	(void)comm;
	return last_error;
}

static ncclResult_t fake_get_unique_id(ncclUniqueId *id) {
	memset(id, 0x5a, sizeof *id);
	return ncclSuccess;
}

/* NCCL writes the communicator at once and initializes it in its own thread. */
static ncclResult_t fake_init_rank_config(ncclComm_t *out, int ranks, ncclUniqueId id, int rank,
					  ncclConfig_t *config) {
	(void)id;
	if (ranks != 1 || rank != 0 || config->blocking != 0)
		misuse("ncclCommInitRankConfig: not one non-blocking rank");
	*out = comm_new(now + draw(1, 5));
	return *out ? ncclInProgress : ncclSystemError;
}

static ncclResult_t fake_split(ncclComm_t parent, int color, int key, ncclComm_t *out,
			       ncclConfig_t *config) {
	*out = NULL; // "*newcomm should be NCCL_COMM_NULL until comm split fully complete"
	if (!ensure_ready(parent, "ncclCommSplit"))
		return ncclInvalidArgument;
	if (color != 0 || key != 0 || config->blocking != 0 || n_pending == MAX_COMMS)
		misuse("ncclCommSplit: not one rank's non-blocking split");
	long written = now + draw(1, 6);
	// The child's first poll after its pointer appears still finds it in progress.
	ncclComm_t child = comm_new(written + 1 + draw(1, 4));
	if (!child)
		return ncclSystemError;
	parent->ready_at = written + draw(1, 8);
	parent_outlived += parent->ready_at > child->ready_at;
	pending[n_pending++] =
		(pending_split){.parent = parent, .where = out, .made = child, .at = written};
	return ncclInProgress;
}

static ncclResult_t fake_get_async_error(ncclComm_t comm, ncclResult_t *state) {
	tick();
	if (!comm || comm->destroyed || comm->aborted) {
		misuse("ncclCommGetAsyncError on a communicator that is gone");
		return ncclInvalidArgument;
	}
	if (comm->error != ncclSuccess && comm->error_at <= now)
		*state = comm->error;
	else
		*state = now < comm->ready_at ? ncclInProgress : ncclSuccess;
	return ncclSuccess;
}

static void ended(ncclComm_t comm) {
	comm->ended_as = ++n_ended;
}

static ncclResult_t fake_finalize(ncclComm_t comm) {
	if (!ensure_ready(comm, "ncclCommFinalize"))
		return ncclInvalidArgument;
	comm->finalized = true;
	comm->ready_at = now + draw(1, 4); // the flush of what it has queued
	return ncclInProgress;
}

static ncclResult_t fake_destroy(ncclComm_t comm) {
	if (!ensure_ready(comm, "ncclCommDestroy"))
		return ncclInvalidArgument;
	if (!comm->finalized)
		misuse("ncclCommDestroy before ncclCommFinalize");
	comm->destroyed = true;
	ended(comm);
	return ncclSuccess;
}

/* NCCL aborts a communicator in any state, busy or failed; only once. A split of it still in
 * flight is aborted too (ncclGroupJobAbort) and writes no pointer: the caller's memory may be
 * freed next. */
static ncclResult_t fake_abort(ncclComm_t comm) {
	if (!comm || comm->destroyed || comm->aborted) {
		misuse("ncclCommAbort on a communicator that is gone");
		return ncclInvalidArgument;
	}
	for (int i = 0; i < n_pending; i++)
		if (pending[i].parent == comm)
			pending[i--] = pending[--n_pending];
	comm->aborted = true;
	ended(comm);
	return ncclSuccess;
}

/* A collective or a send or receive: queued in the open group, or enqueued now, which may
 * answer ncclInProgress (the communicator busy for a while) or ncclSuccess. */
static ncclResult_t issue(ncclComm_t comm, cudaStream_t stream, const char *call) {
	if (!ensure_ready(comm, call))
		return ncclInvalidArgument;
	if (!stream)
		misuse("a collective on no stream");
	if (group_depth) {
		bool known = false;
		for (int i = 0; i < n_grouped; i++)
			known |= grouped[i] == comm;
		if (!known)
			grouped[n_grouped++] = comm;
		return ncclSuccess;
	}
	comm->ready_at = now + draw(0, 3);
	return now < comm->ready_at ? ncclInProgress : ncclSuccess;
}

static ncclResult_t fake_all_reduce(const void *in, void *out, size_t count, ncclDataType_t type,
				    ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
	(void)in, (void)out, (void)count, (void)type, (void)op;
	if (fail_next_all_reduce != ncclSuccess) {
		ncclResult_t result = fail_next_all_reduce;
		fail_next_all_reduce = ncclSuccess;
		last_error = "fake: a peer went away";
		return result;
	}
	return issue(comm, stream, "ncclAllReduce");
}

static ncclResult_t fake_all_gather(const void *in, void *out, size_t count, ncclDataType_t type,
				    ncclComm_t comm, cudaStream_t stream) {
	(void)in, (void)out, (void)count, (void)type;
	return issue(comm, stream, "ncclAllGather");
}

static ncclResult_t fake_reduce_scatter(const void *in, void *out, size_t count,
					ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
					cudaStream_t stream) {
	(void)in, (void)out, (void)count, (void)type, (void)op;
	return issue(comm, stream, "ncclReduceScatter");
}

static ncclResult_t fake_send(const void *data, size_t count, ncclDataType_t type, int peer,
			      ncclComm_t comm, cudaStream_t stream) {
	(void)data, (void)count, (void)type;
	if (peer != 0)
		misuse("ncclSend to a rank that one rank's group lacks");
	return issue(comm, stream, "ncclSend");
}

static ncclResult_t fake_recv(void *data, size_t count, ncclDataType_t type, int peer,
			      ncclComm_t comm, cudaStream_t stream) {
	(void)data, (void)count, (void)type;
	if (peer != 0)
		misuse("ncclRecv from a rank that one rank's group lacks");
	return issue(comm, stream, "ncclRecv");
}

static ncclResult_t fake_group_start(void) {
	if (group_depth++ == 0)
		n_grouped = 0;
	return ncclSuccess;
}

/* The group's calls go together: every communicator they touched is busy for a while. */
static ncclResult_t fake_group_end(void) {
	if (group_depth == 0) {
		misuse("ncclGroupEnd without ncclGroupStart");
		return ncclInvalidUsage;
	}
	if (--group_depth)
		return ncclSuccess;
	for (int i = 0; i < n_grouped; i++)
		grouped[i]->ready_at = now + draw(1, 4);
	return n_grouped ? ncclInProgress : ncclSuccess;
}

/* ---- The driver's events ------------------------------------------------------------------- */

struct CUevent_st {
	bool live;
	int not_ready; // queries left that answer CUDA_ERROR_NOT_READY
};

static struct CUevent_st events[MAX_EVENTS];
static int events_live;
static int event_not_ready = 3; // the queries each new event answers 'not ready'
static CUstream the_stream = (CUstream)(uintptr_t)0x5354; // an address only

static CUresult fake_event_create(CUevent *event, unsigned flags) {
	(void)flags;
	for (int i = 0; i < MAX_EVENTS; i++)
		if (!events[i].live) {
			events[i] = (struct CUevent_st){.live = true, .not_ready = event_not_ready};
			events_live++;
			*event = &events[i];
			return CUDA_SUCCESS;
		}
	return CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult fake_event_record(CUevent event, CUstream stream) {
	if (!event->live || stream != the_stream)
		misuse("cuEventRecord of another event or stream");
	return CUDA_SUCCESS;
}

static CUresult fake_event_query(CUevent event) {
	tick();
	if (!event->live)
		misuse("cuEventQuery of a destroyed event");
	if (event->not_ready > 0) {
		event->not_ready--;
		return CUDA_ERROR_NOT_READY;
	}
	return CUDA_SUCCESS;
}

static CUresult fake_event_destroy(CUevent event) {
	if (!event->live)
		misuse("cuEventDestroy twice");
	event->live = false;
	events_live--;
	return CUDA_SUCCESS;
}

f8_cuda_api_table f8_cuda_api = {
	.cuEventCreate = fake_event_create,
	.cuEventRecord = fake_event_record,
	.cuEventQuery = fake_event_query,
	.cuEventDestroy = fake_event_destroy,
	.ncclGetVersion = fake_get_version,
	.ncclGetErrorString = fake_get_error_string,
	.ncclGetLastError = fake_get_last_error,
	.ncclGetUniqueId = fake_get_unique_id,
	.ncclCommInitRankConfig = fake_init_rank_config,
	.ncclCommSplit = fake_split,
	.ncclCommGetAsyncError = fake_get_async_error,
	.ncclCommFinalize = fake_finalize,
	.ncclCommDestroy = fake_destroy,
	.ncclCommAbort = fake_abort,
	.ncclAllReduce = fake_all_reduce,
	.ncclAllGather = fake_all_gather,
	.ncclReduceScatter = fake_reduce_scatter,
	.ncclSend = fake_send,
	.ncclRecv = fake_recv,
	.ncclGroupStart = fake_group_start,
	.ncclGroupEnd = fake_group_end,
};

/* driver.c's, which links libcuda's loader: the test's table stands in for both. */
f8_status f8_cuda_load(unsigned libraries, f8_diag *diag) {
	(void)diag;
	if (libraries != F8_CUDA_LIBRARY_NCCL)
		misuse("f8_cuda_load of another library");
	return F8_OK;
}

f8_status f8_cuda_check(CUresult result, const char *call, f8_diag *diag) {
	return result == CUDA_SUCCESS
		       ? F8_OK
		       : f8_diag_set(diag, F8_ERR_IO, "%s failed (CUresult %d)", call, (int)result);
}

/* ---- The checks ---------------------------------------------------------------------------- */

/* The world and 31 groups of one process (nccl_check's call); NULL on failure. */
static f8_nccl *create(void) {
	reset();
	f8_diag diag = {0};
	f8_nccl *nccl = NULL;
	uint32_t groups = 0;
	for (uint32_t axes = 1; axes < F8_DIST_GROUPS; axes++)
		groups |= 1u << axes;
	f8_status status = f8_nccl_create(NULL, groups, &nccl, &diag);
	if (status)
		printf("f8_nccl_create: %s\n", diag.message);
	CHECK(!status && nccl);
	CHECK(n_comms == F8_DIST_GROUPS && n_pending == 0);
	return nccl;
}

static void check_create_and_destroy(void) {
	f8_nccl *nccl = create();
	bool all = nccl != NULL;
	for (uint32_t axes = 1; nccl && axes < F8_DIST_GROUPS; axes++)
		all &= f8_nccl_has(nccl, axes);
	CHECK(all);
	printf("made the world and %d groups; %d splits left the parent busy after the child\n",
	       n_comms - 1, parent_outlived);
	// The fake must keep meeting the order the H100 met, or the parent's settling goes
	// unchecked: a change of the draws that loses it fails here.
	CHECK(parent_outlived > 0);
	CHECK(busy_calls == 0);
	f8_nccl_destroy(nccl);
	bool finalized = true;
	for (int i = 0; i < n_comms; i++)
		finalized &= comms[i].finalized && comms[i].destroyed && !comms[i].aborted;
	CHECK(finalized);
	// The splits share the world's resources: it ends last.
	CHECK(comms[0].ended_as == n_comms);
	CHECK(busy_calls == 0 && misuses == 0);
}

static void check_synchronize_waits(void) {
	f8_nccl *nccl = create();
	f8_diag diag = {0};
	for (int not_ready = 0; nccl && not_ready <= 5; not_ready++) {
		event_not_ready = not_ready;
		f8_status status = f8_nccl_synchronize(nccl, the_stream, "the step", &diag);
		if (status)
			printf("synchronize, %d queries not ready: %s\n", not_ready, diag.message);
		CHECK(!status);
	}
	CHECK(events_live == 0);
	f8_nccl_destroy(nccl);
	CHECK(busy_calls == 0 && misuses == 0);
}

static void check_collectives(void) {
	f8_nccl *nccl = create();
	f8_diag diag = {0};
	uint32_t tp = 1u << F8_MESH_AXIS_TP, dp = 1u << F8_MESH_AXIS_DP,
		 pp = 1u << F8_MESH_AXIS_PP;
	CUdeviceptr in = 0x1000, out = 0x2000;
	f8_status status = F8_OK;
	for (int round = 0; nccl && !status && round < 8; round++) {
		status = f8_nccl_all_reduce(nccl, tp, in, out, 16, F8_DTYPE_F32, F8_REDUCTION_SUM,
					    the_stream, &diag);
		if (!status)
			status = f8_nccl_all_gather(nccl, tp | dp, in, out, 64, the_stream, &diag);
		if (!status)
			status = f8_nccl_reduce_scatter(nccl, dp, in, out, 16, F8_DTYPE_BF16,
							the_stream, &diag);
		// Right after the collectives, on the communicators they may leave busy.
		if (!status)
			status = f8_nccl_group_start(nccl, &diag);
		if (!status)
			status = f8_nccl_send(nccl, pp, 0, in, 64, the_stream, &diag);
		if (!status)
			status = f8_nccl_recv(nccl, pp, 0, out, 64, the_stream, &diag);
		if (!status)
			status = f8_nccl_send(nccl, tp, 0, in, 64, the_stream, &diag);
		if (!status)
			status = f8_nccl_group_end(nccl, &diag);
		if (!status)
			status = f8_nccl_all_reduce(nccl, pp, in, out, 4, F8_DTYPE_F32,
						    F8_REDUCTION_MAX, the_stream, &diag);
	}
	if (status)
		printf("collectives: %s\n", diag.message);
	CHECK(!status);
	f8_nccl_destroy(nccl);
	CHECK(busy_calls == 0 && misuses == 0);
}

/* An asynchronous error on the group tp+dp while synchronize polls: the failure names it, and
 * every communicator is aborted, the world last; destroy then has nothing left to end. */
static void check_async_error(void) {
	f8_nccl *nccl = create();
	if (!nccl)
		return;
	uint32_t axes = 1u << F8_MESH_AXIS_TP | 1u << F8_MESH_AXIS_DP;
	// The splits are made in the order of their bits, so the group of `axes` is split axes-th.
	ncclComm_t group = &comms[axes];
	group->error = ncclRemoteError;
	group->error_at = now + 2 * F8_DIST_GROUPS; // some sweeps into synchronize's wait
	last_error = "fake: rank 1 went away";
	event_not_ready = 1000;
	f8_diag diag = {0};
	f8_status status = f8_nccl_synchronize(nccl, the_stream, "the step's gradients", &diag);
	event_not_ready = 3;
	char name[32];
	f8_mesh_group_name(axes, name, sizeof name);
	printf("an asynchronous error: %s\n", diag.message);
	CHECK(status == F8_ERR_IO);
	CHECK(strstr(diag.message, name) && strstr(diag.message, "the step's gradients") &&
	      strstr(diag.message, "went away)")); // NCCL's last error, in closed brackets
	bool all_aborted = true;
	for (int i = 0; i < n_comms; i++)
		all_aborted &= comms[i].aborted && !comms[i].destroyed;
	CHECK(all_aborted && comms[0].ended_as == n_comms);
	CHECK(events_live == 0);
	status = f8_nccl_all_reduce(nccl, axes, 0x1000, 0x2000, 4, F8_DTYPE_F32, F8_REDUCTION_SUM,
				    the_stream, &diag);
	CHECK(status == F8_ERR_IO && strstr(diag.message, "aborted"));
	int ended_before = n_ended;
	f8_nccl_destroy(nccl);
	CHECK(n_ended == ended_before);
	CHECK(busy_calls == 0 && misuses == 0);
}

/* A collective that fails at once: destroy aborts every communicator instead of finalizing. */
static void check_destroy_after_failure(void) {
	f8_nccl *nccl = create();
	if (!nccl)
		return;
	fail_next_all_reduce = ncclRemoteError;
	f8_diag diag = {0};
	f8_status status = f8_nccl_all_reduce(nccl, 1u << F8_MESH_AXIS_DP, 0x1000, 0x2000, 4,
					      F8_DTYPE_F32, F8_REDUCTION_SUM, the_stream, &diag);
	printf("a failed AllReduce: %s\n", diag.message);
	CHECK(status == F8_ERR_IO && strstr(diag.message, "AllReduce"));
	f8_nccl_destroy(nccl);
	bool all_aborted = true;
	for (int i = 0; i < n_comms; i++)
		all_aborted &= comms[i].aborted && !comms[i].finalized;
	CHECK(all_aborted && comms[0].ended_as == n_comms);
	CHECK(busy_calls == 0 && misuses == 0);
}

int main(int argc, char **argv) {
	unsigned long seed = argc > 1 ? strtoul(argv[1], NULL, 10) : 20261207;
	printf("seed %lu\n", seed);
	random_state = seed * 0x9E3779B97F4A7C15u | 1; // xorshift's state must not be zero
	// A wait that never ends (a pointer polled without letting time pass) fails, not hangs.
	alarm(60);
	check_create_and_destroy();
	check_synchronize_waits();
	check_collectives();
	check_async_error();
	check_destroy_after_failure();
	return test_finish();
}
