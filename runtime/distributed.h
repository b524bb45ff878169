/*
 * A run on several ranks (DESIGN.md, "Distributed"): which rank this process is, from its
 * launcher's environment; where it stands on the plan's device mesh; and the communication the
 * CPU backend's collectives and the training loop's agreements need.
 *
 * One process per rank. The launcher's variables, in this order of preference: Open MPI's
 * (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK), torchrun's (RANK,
 * WORLD_SIZE, LOCAL_RANK), Slurm's (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID); none: one
 * process. How the ranks of more than one meet:
 *
 * - MPI, when MPI launched them: mpirun, or srun's MPI launch (srun --mpi=pmix or pmi2, which
 *   set PMIX_RANK or PMI_RANK), or srun without MASTER_ADDR and MASTER_PORT. MPI is opened at
 *   run time (Open MPI's libmpi.so.40, or the file F8C_MPI_LIBRARY names); every call below
 *   goes through it.
 * - A TCP store (runtime/tcp_store.h) at MASTER_ADDR:MASTER_PORT, served by rank 0, when no MPI
 *   launched them: torchrun, or srun without an MPI launch and with MASTER_ADDR and MASTER_PORT
 *   set (as Megatron-LM's Slurm scripts set them). Both are then required. The store carries the
 *   control plane a GPU run needs: the agreements, the barrier, the small host all-reduces and
 *   all-gathers of the training loop (losses, counts, checkpoint records) and the broadcast of
 *   NCCL's id; the data goes through NCCL. The CPU backend's collectives are MPI's: the point to
 *   point calls, ring shifts, all-to-alls and reduce-scatters over more than one rank are
 *   refused there (F8_ERR_UNSUPPORTED), and f8c refuses a CPU run of several ranks before
 *   training.
 *
 * A group of ranks is named by the mesh axes it spans (f8_mesh_group_from_name): the ranks that
 * differ only along those axes.
 */
#ifndef F8_RUNTIME_DISTRIBUTED_H
#define F8_RUNTIME_DISTRIBUTED_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // uint32_t, int64_t

#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/dtype.h" // f8_dtype
#include "ir/graph.h" // f8_reduction, F8_MESH_AXIS_COUNT
#include "runtime/tcp_store.h" // f8_tcp_store

/* Where the launcher put this process. */
typedef struct f8_dist_launch {
	int64_t rank, world, local_rank;
	const char *launcher; // "mpirun", "torchrun", "srun", or "none" (one process)
	// The ranks meet at a TCP store, not through MPI (several ranks that no MPI launched).
	bool store;
	const char *store_host; // MASTER_ADDR (the environment's string), where `store`
	uint16_t store_port;    // MASTER_PORT (the next under torchrun's agent store, or
				// F8C_STORE_PORT), where `store`
	// Seconds the waits for the other ranks that f8_dist_create makes may take (the store's
	// join); f8_dist_set_timeout sets it for the calls after. 0: no limit.
	double timeout;
} f8_dist_launch;

/* Ten minutes, Megatron-LM's --distributed-timeout-minutes default. */
#define F8_DIST_TIMEOUT_DEFAULT 600.0

/* This process's launch from its environment, as above (timeout: F8_DIST_TIMEOUT_DEFAULT).
 * F8_ERR_ARGUMENT naming the variable when one does not parse or the rank is outside the
 * world, and naming MASTER_ADDR or MASTER_PORT when a store launch lacks it. */
f8_status f8_dist_launch_from_environment(f8_dist_launch *out, f8_diag *diag);

typedef struct f8_dist f8_dist;

/* How many groups of mesh axes there are: a group is named by its axes' bits (1 <<
 * f8_mesh_axis), 1 .. F8_DIST_GROUPS - 1; all of them, F8_DIST_GROUPS - 1, is the world. */
#define F8_DIST_GROUPS (1u << F8_MESH_AXIS_COUNT)

/*
 * Joins the run of `launch` on a mesh of `mesh` (ranks along each axis, F8_MESH_AXIS_COUNT of
 * them, 0 or 1: one): with more than one rank, MPI is opened and initialized and its world
 * checked against the launcher's; or, for a store launch, rank 0 serves the store, every rank
 * joins it and they wait for each other (launch->timeout). F8_ERR_ARGUMENT when the mesh's
 * ranks are not the launcher's world size; F8_ERR_UNSUPPORTED when MPI cannot be opened or its
 * world is not the launcher's (the message says which); F8_ERR_IO when the store cannot be
 * served or reached, or a rank does not join in time. *out is the caller's (f8_dist_destroy,
 * which finalizes MPI, or leaves the store: rank 0's serves until the others have left).
 */
f8_status f8_dist_create(const f8_dist_launch *launch, const uint32_t *mesh, f8_dist **out,
			 f8_diag *diag);

void f8_dist_destroy(f8_dist *dist);

/* Marks this rank's run as failed before f8_dist_destroy: over the TCP store it then leaves
 * without a goodbye, so that the other ranks' next wait fails at once naming it rather than at
 * the timeout (under MPI, the launcher stops them when this process exits non-zero). */
void f8_dist_fail(f8_dist *dist);

int64_t f8_dist_rank(const f8_dist *dist);

/* The TCP store of a store launch of several ranks; NULL under MPI and for one rank. */
f8_tcp_store *f8_dist_store(f8_dist *dist);
int64_t f8_dist_world(const f8_dist *dist);

/* This rank's coordinate along mesh axis `axis`. */
uint32_t f8_dist_coordinate(const f8_dist *dist, f8_mesh_axis axis);

/* The ranks of the group of `axes` (bits 1 << f8_mesh_axis), and this rank's place in it. */
uint32_t f8_dist_group_size(const f8_dist *dist, uint32_t axes);
uint32_t f8_dist_group_rank(const f8_dist *dist, uint32_t axes);

/*
 * Reduces `count` elements of `dtype` at `data` in place over the group of `axes` with
 * `reduction`: every rank of the group ends with the same bits. f32, f64 and i64 (a group of
 * one rank: any dtype, untouched). F8_ERR_UNSUPPORTED for another dtype, F8_ERR_IO when
 * communication fails (the message names the call and the group).
 */
f8_status f8_dist_all_reduce(f8_dist *dist, uint32_t axes, void *data, size_t count,
			     f8_dtype dtype, f8_reduction reduction, f8_diag *diag);

/* Gathers `bytes` bytes from each rank of the group of `axes` into `out` (the group's size
 * times `bytes`), in the order of the ranks in the group. */
f8_status f8_dist_all_gather(f8_dist *dist, uint32_t axes, const void *in, void *out, size_t bytes,
			     f8_diag *diag);

/* Reduces `in` (the group's size times `count` elements of `dtype`) over the group of `axes`
 * with `reduction`, and leaves this rank's `count` of the result, the part at its place in the
 * group, in `out`: MPI_Reduce_scatter_block. f32, f64 and i64. */
f8_status f8_dist_reduce_scatter(f8_dist *dist, uint32_t axes, const void *in, void *out,
				 size_t count, f8_dtype dtype, f8_reduction reduction,
				 f8_diag *diag);

/* One step around the ring of the group of `axes`: sends `bytes` bytes at `out` to the next
 * rank of the group (its place + 1, wrapping) and receives as many from the one before into
 * `in` (separate buffers): ring attention's exchange of key and value blocks. */
f8_status f8_dist_ring_shift(f8_dist *dist, uint32_t axes, const void *out, void *in,
			     size_t bytes, f8_diag *diag);

/* Every rank of the group of `axes` sends `out_bytes[r]` bytes to the rank at place r (the
 * runs of `out` one after another, in place order) and receives `in_bytes[r]` from it (into the
 * runs of `in`, so): expert parallelism's exchange of the tokens' rows, whose sizes the ranks
 * have agreed on before (MPI_Alltoallv). A group of one rank copies its one run. */
f8_status f8_dist_all_to_all(f8_dist *dist, uint32_t axes, const void *out,
			     const size_t *out_bytes, void *in, const size_t *in_bytes,
			     f8_diag *diag);

/* Point to point over the group of `axes`: `bytes` to, or from, the rank at place `peer` of it
 * (pipeline parallelism's activations and their gradients between neighbouring stages; the
 * messages between two ranks are received in the order they were sent). A send does not wait
 * for its receive: it starts (MPI_Isend, from a copy of `data`, which the caller may reuse at
 * once) and is complete after f8_dist_complete_sends, so that two stages that each send before
 * they receive (1F1B's steady state: one stage's activation out while the next stage's
 * gradient comes back) do not wait on each other. A receive waits for its message. A receive
 * takes the next message from `peer` with the same `tag` (0 .. 32767): the interleaved
 * schedule's messages between two stages, activations and gradients of several model chunks,
 * each have their own, so that each kind is matched in its own order. */
f8_status f8_dist_send(f8_dist *dist, uint32_t axes, uint32_t peer, int tag, const void *data,
			size_t bytes, f8_diag *diag);
f8_status f8_dist_recv(f8_dist *dist, uint32_t axes, uint32_t peer, int tag, void *data,
			size_t bytes, f8_diag *diag);

/* Waits until every send under way has been received, and frees their copies (a training step
 * calls it before its optimizer; destroy does). NULL is allowed. */
f8_status f8_dist_complete_sends(f8_dist *dist, f8_diag *diag);

/*
 * Every rank's `status` made one over the group of `axes`: a rank's own failure stands; where
 * this rank went well but another failed, the most negative status code of the group (F8_ERR_*
 * are negative), with a message that says another rank could not `what`. `dist` NULL: `status`.
 * Every rank of the group calls it, failed or not: after it they go on, or stop, together.
 */
f8_status f8_dist_agree(f8_dist *dist, uint32_t axes, f8_status status, const char *what,
			f8_diag *diag);

/* The axes of `axes` that have more than one rank (a group along an axis of one rank is the
 * same group without it). */
uint32_t f8_dist_group_spanned(const f8_dist *dist, uint32_t axes);

/* Which group of `axes` this rank is in: the mixed radix of its coordinates off those axes, the
 * same on every rank of the group and different between groups (a communicator split's color;
 * f8_dist_group_rank is its key). */
uint32_t f8_dist_group_index(const f8_dist *dist, uint32_t axes);

/* Waits until every rank has come here. */
f8_status f8_dist_barrier(f8_dist *dist, f8_diag *diag);

/*
 * Rank 0's `bytes` at `data` into every rank's `data`; every rank calls it, with the same
 * `bytes` and `what` (the value's name, for messages: "NCCL's id"). Under MPI, an all-gather of
 * every rank's; over the store, rank 0 sets a key the others get. `dist` NULL or one rank: a
 * no-op.
 */
f8_status f8_dist_broadcast(f8_dist *dist, void *data, size_t bytes, const char *what,
			    f8_diag *diag);

/*
 * Megatron-LM's --distributed-timeout-minutes: from now on, a collective that waits longer than
 * `seconds` for the other ranks (one died, or hangs) stops this rank: a watchdog thread prints
 * which rank waited, in which call over which group, for how long, and exits the process with
 * status 3, and the launcher stops the others (mpirun does so when a rank exits with an
 * error; torchrun too). Nothing is then half-written: checkpoints and metrics are written whole
 * or not at all. 0 turns it off. A no-op on one rank. F8_ERR_NOMEM when the thread cannot start.
 * Over the store, its waits are held to `seconds` themselves and fail (F8_ERR_IO) naming the
 * ranks that did not arrive, and a rank that died fails the others' waits at once, naming it:
 * the watchdog holds NCCL's waits (f8_dist_waiting).
 */
f8_status f8_dist_set_timeout(f8_dist *dist, double seconds, f8_diag *diag);

/* Marks the start (`call` non-NULL, such as "NCCL's AllReduce") and the end (NULL) of a wait for
 * the other ranks outside f8_dist's own calls (the CUDA backend waiting for its NCCL
 * collectives to finish): the watchdog holds it to the timeout as it does its own calls. NULL
 * `dist` is allowed. */
void f8_dist_waiting(f8_dist *dist, const char *call, uint32_t axes);

#endif
