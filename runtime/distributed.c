/*
 * A run on several ranks (runtime/distributed.h): the launcher's environment, the mesh, and MPI
 * or the TCP store (the collectives over the store are runtime/distributed_store.c's).
 *
 * MPI is opened at run time, as the CUDA libraries are (runtime/cuda/libraries.h), so that one
 * f8c runs one rank where there is no MPI (a GPU node's image) and several where there is: Open
 * MPI's libmpi.so.40 (F8C_MPI_LIBRARY names another file), its functions and its predefined
 * handles (the communicator, datatypes and operations the header's macros name, Open MPI's
 * ompi_mpi_* objects) by dlsym. Handles are pointers in Open MPI's ABI; MPICH's differ.
 */
#define _POSIX_C_SOURCE 200809L // clock_gettime, pthread_cond_timedwait

#include "runtime/distributed.h" // f8_dist, f8_dist_launch

#include <dlfcn.h>   // dlopen, dlsym, dlerror
#include <errno.h>   // errno, ETIMEDOUT
#include <pthread.h> // pthread_create, the watchdog's lock and condition
#include <stdio.h>   // fprintf
#include <stdlib.h>  // getenv, strtoll
#include <string.h>  // memcpy
#include <time.h>    // clock_gettime
#include <unistd.h>  // _exit

#include "ir/alloc.h"                   // f8_calloc, f8_free
#include "runtime/distributed_store.h"   // f8_dist_store_exchange
#include "runtime/tcp_store.h"           // f8_tcp_store

/* Open MPI's ABI: handles are pointers to its objects; MPI_SUCCESS is 0; MPI_IN_PLACE is 1. */
typedef void *mpi_handle;
enum { MPI_OK = 0, MPI_ERROR_STRING_MAX = 256 };
#define MPI_IN_PLACE_BUFFER ((void *)1)

static struct mpi_api {
	void *library;
	int (*Init)(int *argc, char ***argv);
	int (*Initialized)(int *flag);
	int (*Finalize)(void);
	int (*Comm_size)(mpi_handle comm, int *size);
	int (*Comm_rank)(mpi_handle comm, int *rank);
	int (*Comm_split)(mpi_handle comm, int color, int key, mpi_handle *out);
	int (*Comm_free)(mpi_handle *comm);
	int (*Allreduce)(const void *in, void *out, int count, mpi_handle type, mpi_handle op,
			 mpi_handle comm);
	int (*Allgather)(const void *in, int in_count, mpi_handle in_type, void *out,
			 int out_count, mpi_handle out_type, mpi_handle comm);
	int (*Reduce_scatter_block)(const void *in, void *out, int count, mpi_handle type,
				    mpi_handle op, mpi_handle comm);
	int (*Alltoallv)(const void *out, const int *out_counts, const int *out_displs,
			 mpi_handle out_type, void *in, const int *in_counts, const int *in_displs,
			 mpi_handle in_type, mpi_handle comm);
	int (*Barrier)(mpi_handle comm);
	int (*Sendrecv)(const void *out, int out_count, mpi_handle out_type, int to, int out_tag,
			void *in, int in_count, mpi_handle in_type, int from, int in_tag,
			mpi_handle comm, void *status);
	int (*Isend)(const void *data, int count, mpi_handle type, int to, int tag, mpi_handle comm,
		     mpi_handle *request);
	int (*Waitall)(int count, mpi_handle *requests, void *statuses);
	int (*Test)(mpi_handle *request, int *flag, void *status);
	int (*Recv)(void *data, int count, mpi_handle type, int from, int tag, mpi_handle comm,
		    void *status);
	int (*Get_count)(const void *status, mpi_handle type, int *count);
	int (*Error_string)(int code, char *text, int *len);
	mpi_handle comm_world, type_float, type_double, type_int64, type_byte, op_sum, op_max;
} mpi;

/* Opens MPI once; F8_ERR_UNSUPPORTED naming what is missing. */
static f8_status open_mpi(f8_diag *diag) {
	if (mpi.library)
		return F8_OK;
	const char *file = getenv("F8C_MPI_LIBRARY") ? getenv("F8C_MPI_LIBRARY") : "libmpi.so.40";
	// Global: Open MPI's components, which it opens itself, look its symbols up.
	void *library = dlopen(file, RTLD_NOW | RTLD_GLOBAL);
	if (!library) {
		f8_diag_set(diag, F8_ERR_UNSUPPORTED, "several ranks need MPI, and %s cannot be "
			    "opened: %s", file, dlerror());
		f8_diag_hint(diag, "install Open MPI (tools/install-deps.sh: openmpi-bin), or name "
			     "its libmpi with F8C_MPI_LIBRARY");
		return F8_ERR_UNSUPPORTED;
	}
	const struct {
		const char *name;
		void **slot;
		bool object; // a predefined handle: the object's address is the handle
	} symbols[] = {
		{"MPI_Init", (void **)&mpi.Init, false},
		{"MPI_Initialized", (void **)&mpi.Initialized, false},
		{"MPI_Finalize", (void **)&mpi.Finalize, false},
		{"MPI_Comm_size", (void **)&mpi.Comm_size, false},
		{"MPI_Comm_rank", (void **)&mpi.Comm_rank, false},
		{"MPI_Comm_split", (void **)&mpi.Comm_split, false},
		{"MPI_Comm_free", (void **)&mpi.Comm_free, false},
		{"MPI_Allreduce", (void **)&mpi.Allreduce, false},
		{"MPI_Allgather", (void **)&mpi.Allgather, false},
		{"MPI_Reduce_scatter_block", (void **)&mpi.Reduce_scatter_block, false},
		{"MPI_Alltoallv", (void **)&mpi.Alltoallv, false},
		{"MPI_Barrier", (void **)&mpi.Barrier, false},
		{"MPI_Sendrecv", (void **)&mpi.Sendrecv, false},
		{"MPI_Isend", (void **)&mpi.Isend, false},
		{"MPI_Waitall", (void **)&mpi.Waitall, false},
		{"MPI_Test", (void **)&mpi.Test, false},
		{"MPI_Recv", (void **)&mpi.Recv, false},
		{"MPI_Get_count", (void **)&mpi.Get_count, false},
		{"MPI_Error_string", (void **)&mpi.Error_string, false},
		{"ompi_mpi_comm_world", &mpi.comm_world, true},
		{"ompi_mpi_float", &mpi.type_float, true},
		{"ompi_mpi_double", &mpi.type_double, true},
		{"ompi_mpi_int64_t", &mpi.type_int64, true},
		{"ompi_mpi_byte", &mpi.type_byte, true},
		{"ompi_mpi_op_sum", &mpi.op_sum, true},
		{"ompi_mpi_op_max", &mpi.op_max, true},
	};
	for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; i++) {
		void *found = dlsym(library, symbols[i].name);
		if (!found) {
			dlclose(library);
			f8_diag_set(diag, F8_ERR_UNSUPPORTED, "%s has no %s: f8c runs on Open MPI's "
				    "libmpi (its ABI, 4 or newer)", file, symbols[i].name);
			f8_diag_hint(diag, "install Open MPI, or name its libmpi with F8C_MPI_LIBRARY");
			return F8_ERR_UNSUPPORTED;
		}
		*symbols[i].slot = found;
	}
	mpi.library = library;
	return F8_OK;
}

/* One launcher's variables: the rank, the world size, the rank on this node. */
static const struct launcher {
	const char *name, *rank, *world, *local_rank;
} launchers[] = {
	{"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
	{"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
	{"srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
};

/* Variable `name` as an integer in [min, max] into *out; 0 when unset (and *out = fallback). */
static f8_status read_variable(const char *name, int64_t min, int64_t max, int64_t fallback,
			       int64_t *out, f8_diag *diag) {
	const char *text = getenv(name);
	*out = fallback;
	if (!text)
		return F8_OK;
	char *end;
	errno = 0;
	long long value = strtoll(text, &end, 10);
	if (!*text || *end || errno || value < min || value > max) {
		f8_diag_set(diag, F8_ERR_ARGUMENT, "the environment's %s=\"%s\" is not a whole number "
			    "from %lld to %lld", name, text, (long long)min, (long long)max);
		f8_diag_hint(diag, "the launcher sets it (mpirun, torchrun, srun); leave it unset to "
			     "run one process");
		return F8_ERR_ARGUMENT;
	}
	*out = value;
	return F8_OK;
}

/*
 * Whether `launch` (of several ranks) meets at the TCP store: torchrun's always; srun's when
 * no MPI launch is under way (srun --mpi sets PMIx's or PMI's rank) and MASTER_ADDR or
 * MASTER_PORT is set, as Megatron-LM's Slurm scripts set them; else MPI, as before.
 */
static bool launched_without_mpi(const f8_dist_launch *launch) {
	if (strcmp(launch->launcher, "torchrun") == 0)
		return true;
	return strcmp(launch->launcher, "srun") == 0 && !getenv("PMIX_RANK") &&
	       !getenv("PMI_RANK") && (getenv("MASTER_ADDR") || getenv("MASTER_PORT"));
}

/* MASTER_ADDR and MASTER_PORT into `launch`; F8_ERR_ARGUMENT naming the one missing. */
static f8_status read_store_address(f8_dist_launch *launch, f8_diag *diag) {
	const char *host = getenv("MASTER_ADDR");
	const char *missing = !host || !*host ? "MASTER_ADDR" : !getenv("MASTER_PORT") ? "MASTER_PORT"
											: NULL;
	if (missing) {
		f8_diag_set(diag, F8_ERR_ARGUMENT, "%s started rank %lld of %lld without MPI, and the "
			    "environment has no %s: the ranks meet at a TCP store at MASTER_ADDR:"
			    "MASTER_PORT, which rank 0 serves", launch->launcher,
			    (long long)launch->rank, (long long)launch->world, missing);
		f8_diag_hint(diag, "torchrun sets both; under srun, export MASTER_ADDR (the first "
			     "node's name) and MASTER_PORT (a free port), or launch with MPI "
			     "(srun --mpi=pmix, mpirun)");
		return F8_ERR_ARGUMENT;
	}
	int64_t port;
	f8_status status = read_variable("MASTER_PORT", 1, 65535, 0, &port, diag);
	// torchrun's agent on the first node serves PyTorch's own store at MASTER_PORT and tells
	// its workers so (TORCHELASTIC_USE_AGENT_STORE): f8c's store takes the next port there,
	// or F8C_STORE_PORT where it is set.
	const char *agent = getenv("TORCHELASTIC_USE_AGENT_STORE");
	if (!status && getenv("F8C_STORE_PORT"))
		status = read_variable("F8C_STORE_PORT", 1, 65535, 0, &port, diag);
	else if (!status && agent && strcmp(agent, "True") == 0) {
		if (port == 65535) {
			f8_diag_set(diag, F8_ERR_ARGUMENT, "torchrun's agent serves its store at "
				    "MASTER_PORT 65535, and f8c's store takes the next port, which "
				    "there is not");
			f8_diag_hint(diag, "set F8C_STORE_PORT to a free port on the first node");
			return F8_ERR_ARGUMENT;
		}
		port++;
	}
	launch->store_host = host;
	launch->store_port = (uint16_t)port;
	return status;
}

f8_status f8_dist_launch_from_environment(f8_dist_launch *out, f8_diag *diag) {
	*out = (f8_dist_launch){.world = 1, .launcher = "none", .timeout = F8_DIST_TIMEOUT_DEFAULT};
	for (size_t i = 0; i < sizeof launchers / sizeof launchers[0]; i++) {
		const struct launcher *l = &launchers[i];
		if (!getenv(l->world) && !getenv(l->rank))
			continue;
		int64_t world, rank, local;
		f8_status status = read_variable(l->world, 1, 1 << 20, 1, &world, diag);
		if (!status)
			status = read_variable(l->rank, 0, world - 1, 0, &rank, diag);
		if (!status)
			status = read_variable(l->local_rank, 0, world - 1, 0, &local, diag);
		if (status)
			return status;
		*out = (f8_dist_launch){.rank = rank, .world = world, .local_rank = local,
					.launcher = l->name, .timeout = F8_DIST_TIMEOUT_DEFAULT};
		out->store = world > 1 && launched_without_mpi(out);
		return out->store ? read_store_address(out, diag) : F8_OK;
	}
	return F8_OK;
}


struct f8_dist {
	f8_dist_launch launch;
	uint32_t mesh[F8_MESH_AXIS_COUNT], coordinates[F8_MESH_AXIS_COUNT];
	bool mpi;                      // MPI initialized here: finalized by destroy
	// A store launch's: the store, and each group's count of exchanges (by spanned axes).
	f8_tcp_store *store;
	uint64_t rounds[F8_DIST_GROUPS], broadcasts;
	mpi_handle groups[F8_DIST_GROUPS]; // by axes mask (of axes above one rank), split at creation
	bool made[F8_DIST_GROUPS];
	// The watchdog (f8_dist_set_timeout): what this rank waits in, since when.
	double timeout;                // seconds; 0: no watchdog
	pthread_t watchdog;
	bool watching, stop;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	const char *waiting_in;        // the MPI call, or NULL
	uint32_t waiting_axes;
	struct timespec since;
	// The sends under way (f8_dist_send), each from a copy of its data, until
	// f8_dist_complete_sends.
	struct pending_send {
		mpi_handle request;
		void *copy;
		uint32_t axes;
	} *sends;
	uint32_t n_sends, cap_sends;
};

static double seconds_between(const struct timespec *a, const struct timespec *b) {
	return (double)(b->tv_sec - a->tv_sec) + 1e-9 * (double)(b->tv_nsec - a->tv_nsec);
}

/* The watchdog: once a second, whether the call this rank waits in has outwaited the timeout. */
static void *watch(void *argument) {
	f8_dist *dist = argument;
	pthread_mutex_lock(&dist->lock);
	while (!dist->stop) {
		struct timespec now, until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += 1;
		pthread_cond_timedwait(&dist->wake, &dist->lock, &until);
		clock_gettime(CLOCK_MONOTONIC, &now);
		double waited = dist->waiting_in ? seconds_between(&dist->since, &now) : 0;
		if (dist->stop || waited <= dist->timeout)
			continue;
		char group[32];
		uint32_t spanned = 0; // the group's axes of more than one rank, for its name
		for (int axis = 0; axis < F8_MESH_AXIS_COUNT; axis++)
			spanned |= dist->mesh[axis] > 1 ? dist->waiting_axes & 1u << axis : 0;
		fprintf(stderr, "f8c: rank %lld of %lld: no answer for %.0f s in %s over group %s "
			"(%u ranks): another rank died or hangs; stopping (--distributed-timeout-minutes "
			"%.4g)\n", (long long)dist->launch.rank, (long long)dist->launch.world, waited,
			dist->waiting_in, f8_mesh_group_name(spanned, group, sizeof group),
			f8_dist_group_size(dist, dist->waiting_axes), dist->timeout / 60);
		fflush(stderr);
		_exit(3); // the launcher stops the others; the main thread is stuck in MPI
	}
	pthread_mutex_unlock(&dist->lock);
	return NULL;
}

void f8_dist_waiting(f8_dist *dist, const char *call, uint32_t axes) {
	if (!dist || !dist->watching)
		return;
	pthread_mutex_lock(&dist->lock);
	dist->waiting_in = call;
	dist->waiting_axes = axes;
	clock_gettime(CLOCK_MONOTONIC, &dist->since);
	pthread_mutex_unlock(&dist->lock);
}

f8_status f8_dist_set_timeout(f8_dist *dist, double seconds, f8_diag *diag) {
	if (!dist || dist->launch.world == 1)
		return F8_OK;
	if (dist->store)
		f8_tcp_store_set_timeout(dist->store, seconds);
	if (dist->watching) {
		pthread_mutex_lock(&dist->lock);
		dist->timeout = seconds;
		pthread_mutex_unlock(&dist->lock);
		return F8_OK;
	}
	if (seconds <= 0)
		return F8_OK;
	dist->timeout = seconds;
	if (pthread_mutex_init(&dist->lock, NULL) || pthread_cond_init(&dist->wake, NULL) ||
	    pthread_create(&dist->watchdog, NULL, watch, dist))
		return f8_diag_set(diag, F8_ERR_NOMEM, "cannot start the collectives' watchdog");
	dist->watching = true;
	return F8_OK;
}

int64_t f8_dist_rank(const f8_dist *dist) {
	return dist ? dist->launch.rank : 0;
}

int64_t f8_dist_world(const f8_dist *dist) {
	return dist ? dist->launch.world : 1;
}

f8_tcp_store *f8_dist_store(f8_dist *dist) {
	return dist ? dist->store : NULL;
}

uint32_t f8_dist_coordinate(const f8_dist *dist, f8_mesh_axis axis) {
	return dist ? dist->coordinates[axis] : 0;
}

uint32_t f8_dist_group_size(const f8_dist *dist, uint32_t axes) {
	uint32_t size = 1;
	for (int axis = 0; dist && axis < F8_MESH_AXIS_COUNT; axis++)
		size *= axes & 1u << axis ? dist->mesh[axis] : 1;
	return size;
}

uint32_t f8_dist_group_rank(const f8_dist *dist, uint32_t axes) {
	uint32_t rank = 0; // mixed radix of the group's coordinates, the innermost axis fastest
	for (int axis = F8_MESH_AXIS_COUNT - 1; dist && axis >= 0; axis--)
		if (axes & 1u << axis)
			rank = rank * dist->mesh[axis] + dist->coordinates[axis];
	return rank;
}

static f8_status group_of(f8_dist *dist, uint32_t axes, mpi_handle *out, f8_diag *diag);

/*
 * The exchange of `bytes` at `mine` over the group of `axes` through the store
 * (runtime/distributed_store.h): the group as this rank sees it, in its next round.
 */
static f8_status store_exchange(f8_dist *dist, uint32_t axes, const char *what, const void *mine,
				size_t bytes, f8_dist_store_combine combine, f8_dtype dtype,
				f8_reduction reduction, void *out, f8_diag *diag) {
	axes = f8_dist_group_spanned(dist, axes);
	uint32_t size = f8_dist_group_size(dist, axes);
	int64_t *ranks = f8_calloc(size, sizeof *ranks);
	if (!ranks)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	// Each place's world rank: its coordinates are this rank's, but along the group's axes.
	for (uint32_t place = 0; place < size; place++) {
		int64_t rank = 0, stride = 1;
		uint32_t digits = place;
		for (int axis = 0; axis < F8_MESH_AXIS_COUNT; axis++) {
			uint32_t coordinate = dist->coordinates[axis];
			if (axes & 1u << axis)
				coordinate = digits % dist->mesh[axis], digits /= dist->mesh[axis];
			rank += stride * coordinate;
			stride *= dist->mesh[axis];
		}
		ranks[place] = rank;
	}
	char axes_name[32], name[48];
	f8_mesh_group_name(axes, axes_name, sizeof axes_name);
	snprintf(name, sizeof name, "%s.%u", axes_name, f8_dist_group_index(dist, axes));
	f8_dist_store_group group = {.store = dist->store, .name = name, .axes = axes_name,
				     .round = ++dist->rounds[axes], .size = size,
				     .place = f8_dist_group_rank(dist, axes), .ranks = ranks};
	f8_status status = f8_dist_store_exchange(&group, what, mine, bytes, combine, dtype,
						  reduction, out, diag);
	f8_free(ranks);
	return status;
}

/* A store launch's start: rank 0 serves, every rank joins, and they wait for each other. */
static f8_status join_store(f8_dist *dist, f8_diag *diag) {
	const f8_dist_launch *launch = &dist->launch;
	f8_tcp_store_options options = {.host = launch->store_host, .port = launch->store_port,
					.rank = launch->rank, .world = launch->world,
					.serve = launch->rank == 0, .timeout = launch->timeout};
	f8_status status = f8_tcp_store_create(&options, &dist->store, diag);
	return status ? status : f8_dist_barrier(dist, diag);
}

/* The failure of a CPU backend's collective over the store. */
static f8_status needs_mpi(const f8_dist *dist, const char *what, f8_diag *diag) {
	f8_diag_set(diag, F8_ERR_UNSUPPORTED, "%s over several ranks: %s started them without MPI, "
		    "and the CPU backend's collectives need MPI", what, dist->launch.launcher);
	f8_diag_hint(diag, "launch with mpirun or srun --mpi, or use --device cuda");
	return F8_ERR_UNSUPPORTED;
}

f8_status f8_dist_create(const f8_dist_launch *launch, const uint32_t *mesh, f8_dist **out,
			 f8_diag *diag) {
	*out = NULL;
	f8_dist *dist = f8_calloc(1, sizeof *dist);
	if (!dist)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	dist->launch = *launch;
	int64_t ranks = 1;
	for (int axis = 0; axis < F8_MESH_AXIS_COUNT; axis++) {
		dist->mesh[axis] = mesh && mesh[axis] ? mesh[axis] : 1;
		ranks *= dist->mesh[axis];
	}
	if (ranks != launch->world) {
		f8_dist_destroy(dist);
		f8_diag_set(diag, F8_ERR_ARGUMENT, "the plan's mesh has %lld ranks, but %s started %lld",
			    (long long)ranks, launch->launcher, (long long)launch->world);
		f8_diag_hint(diag, "start as many processes as the mesh has ranks (mpirun -np %lld), or "
			     "compile for this world size (--world-size %lld)", (long long)ranks,
			     (long long)launch->world);
		return F8_ERR_ARGUMENT;
	}
	f8_mesh_coordinates(dist->mesh, (uint64_t)launch->rank, dist->coordinates);
	if (launch->world == 1) {
		*out = dist;
		return F8_OK;
	}
	if (launch->store) {
		f8_status status = join_store(dist, diag);
		if (status) {
			f8_dist_destroy(dist);
			return status;
		}
		*out = dist;
		return F8_OK;
	}
	f8_status status = open_mpi(diag);
	int initialized = 0, size = 0, rank = 0;
	if (!status)
		mpi.Initialized(&initialized);
	if (!status && !initialized && mpi.Init(NULL, NULL) != MPI_OK)
		status = f8_diag_set(diag, F8_ERR_IO, "MPI_Init failed");
	if (status) {
		f8_dist_destroy(dist);
		return status;
	}
	dist->mpi = !initialized;
	mpi.Comm_size(mpi.comm_world, &size);
	mpi.Comm_rank(mpi.comm_world, &rank);
	if (size != launch->world || rank != launch->rank) {
		f8_diag_set(diag, F8_ERR_UNSUPPORTED, "%s started rank %lld of %lld, but MPI's world "
			    "has rank %d of %d", launch->launcher, (long long)launch->rank,
			    (long long)launch->world, rank, size);
		f8_diag_hint(diag, "the CPU backend's collectives are MPI's: start the ranks with "
			     "mpirun (or srun with MPI); on GPUs, srun's ranks meet without MPI where "
			     "MASTER_ADDR and MASTER_PORT are set");
		f8_dist_destroy(dist);
		return F8_ERR_UNSUPPORTED;
	}
	// Every group now, in one order on every rank: MPI_Comm_split is a collective of the
	// whole world, and ranks that run different programs (pipeline stages) would otherwise
	// make them in different orders, waiting for each other for ever.
	for (uint32_t axes = 1; !status && axes < F8_DIST_GROUPS; axes++) {
		bool spans = true;
		for (int axis = 0; axis < F8_MESH_AXIS_COUNT; axis++)
			spans &= !(axes & 1u << axis) || dist->mesh[axis] > 1;
		mpi_handle group;
		if (spans)
			status = group_of(dist, axes, &group, diag);
	}
	if (status) {
		f8_dist_destroy(dist);
		return status;
	}
	*out = dist;
	return F8_OK;
}

void f8_dist_destroy(f8_dist *dist) {
	if (!dist)
		return;
	f8_dist_complete_sends(dist, NULL);
	f8_free(dist->sends);
	if (dist->watching) {
		pthread_mutex_lock(&dist->lock);
		dist->stop = true;
		pthread_cond_signal(&dist->wake);
		pthread_mutex_unlock(&dist->lock);
		pthread_join(dist->watchdog, NULL);
		pthread_cond_destroy(&dist->wake);
		pthread_mutex_destroy(&dist->lock);
	}
	f8_tcp_store_destroy(dist->store);
	for (uint32_t g = 0; g < F8_DIST_GROUPS; g++)
		if (dist->made[g])
			mpi.Comm_free(&dist->groups[g]);
	if (dist->mpi)
		mpi.Finalize();
	f8_free(dist);
}

void f8_dist_fail(f8_dist *dist) {
	if (dist)
		f8_tcp_store_fail(dist->store);
}

uint32_t f8_dist_group_spanned(const f8_dist *dist, uint32_t axes) {
	axes &= F8_DIST_GROUPS - 1;
	for (int axis = 0; axis < F8_MESH_AXIS_COUNT; axis++)
		axes &= dist && dist->mesh[axis] > 1 ? ~0u : ~(1u << axis);
	return axes;
}

uint32_t f8_dist_group_index(const f8_dist *dist, uint32_t axes) {
	uint32_t index = 0; // mixed radix of the coordinates off the group's axes
	for (int axis = F8_MESH_AXIS_COUNT - 1; dist && axis >= 0; axis--)
		if (!(axes & 1u << axis))
			index = index * dist->mesh[axis] + dist->coordinates[axis];
	return index;
}

/* The communicator of the group of `axes`: the ranks whose coordinates agree off those axes. */
static f8_status group_of(f8_dist *dist, uint32_t axes, mpi_handle *out, f8_diag *diag) {
	axes = f8_dist_group_spanned(dist, axes); // an axis of one rank adds none
	if (!dist->made[axes]) {
		int color = (int)f8_dist_group_index(dist, axes);
		if (mpi.Comm_split(mpi.comm_world, color, (int)f8_dist_group_rank(dist, axes),
				   &dist->groups[axes]) != MPI_OK) {
			char name[32];
			return f8_diag_set(diag, F8_ERR_IO, "MPI_Comm_split for group %s failed",
					   f8_mesh_group_name(axes, name, sizeof name));
		}
		dist->made[axes] = true;
	}
	*out = dist->groups[axes];
	return F8_OK;
}

static f8_status failed(const char *call, uint32_t axes, int code, f8_diag *diag) {
	char name[32], text[MPI_ERROR_STRING_MAX] = "";
	int len = 0;
	mpi.Error_string(code, text, &len);
	return f8_diag_set(diag, F8_ERR_IO, "%s over group %s failed: %s", call,
			   f8_mesh_group_name(axes, name, sizeof name), text);
}

/* MPI's type for a reduction of `count` elements of `dtype`, or F8_ERR_UNSUPPORTED naming
 * `what` ("an all-reduce"). */
static f8_status reduction_type(const char *what, size_t count, f8_dtype dtype,
				mpi_handle *type, f8_diag *diag) {
	*type = dtype == F8_DTYPE_F32	? mpi.type_float
		: dtype == F8_DTYPE_F64 ? mpi.type_double
		: dtype == F8_DTYPE_I64 ? mpi.type_int64 : NULL;
	if (*type && count <= (size_t)INT32_MAX)
		return F8_OK;
	return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "%s of %zu %s elements: the CPU backend "
			   "reduces up to 2^31 f32, f64 or i64", what, count, f8_dtype_name(dtype));
}

f8_status f8_dist_all_reduce(f8_dist *dist, uint32_t axes, void *data, size_t count,
			     f8_dtype dtype, f8_reduction reduction, f8_diag *diag) {
	if (f8_dist_group_size(dist, axes) == 1 || count == 0)
		return F8_OK;
	if (dist->store && dtype != F8_DTYPE_F32 && dtype != F8_DTYPE_F64 && dtype != F8_DTYPE_I64)
		return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "an all-reduce of %s elements: the store "
				   "reduces f32, f64 or i64", f8_dtype_name(dtype));
	if (dist->store)
		return store_exchange(dist, axes, "an all-reduce", data,
				      count * f8_dtype_get_info(dtype)->bytes, F8_DIST_STORE_REDUCE,
				      dtype, reduction, data, diag);
	mpi_handle type;
	f8_status found = reduction_type("an all-reduce", count, dtype, &type, diag);
	if (found)
		return found;
	mpi_handle group;
	f8_status status = group_of(dist, axes, &group, diag);
	f8_dist_waiting(dist, "MPI_Allreduce", axes);
	int code = status ? MPI_OK
			  : mpi.Allreduce(MPI_IN_PLACE_BUFFER, data, (int)count, type,
					  reduction == F8_REDUCTION_MAX ? mpi.op_max : mpi.op_sum, group);
	f8_dist_waiting(dist, NULL, 0);
	return status ? status : code != MPI_OK ? failed("MPI_Allreduce", axes, code, diag) : F8_OK;
}

f8_status f8_dist_all_gather(f8_dist *dist, uint32_t axes, const void *in, void *out, size_t bytes,
			     f8_diag *diag) {
	if (f8_dist_group_size(dist, axes) == 1) {
		memcpy(out, in, bytes);
		return F8_OK;
	}
	if (dist->store)
		return store_exchange(dist, axes, "an all-gather", in, bytes, F8_DIST_STORE_GATHER,
				      F8_DTYPE_U8, F8_REDUCTION_SUM, out, diag);
	mpi_handle group;
	f8_status status = bytes > (size_t)INT32_MAX
				   ? f8_diag_set(diag, F8_ERR_UNSUPPORTED, "an all-gather of %zu bytes "
						 "a rank", bytes)
				   : group_of(dist, axes, &group, diag);
	f8_dist_waiting(dist, "MPI_Allgather", axes);
	int code = status ? MPI_OK
			  : mpi.Allgather(in, (int)bytes, mpi.type_byte, out, (int)bytes, mpi.type_byte,
					  group);
	f8_dist_waiting(dist, NULL, 0);
	return status ? status : code != MPI_OK ? failed("MPI_Allgather", axes, code, diag) : F8_OK;
}

f8_status f8_dist_reduce_scatter(f8_dist *dist, uint32_t axes, const void *in, void *out,
				 size_t count, f8_dtype dtype, f8_reduction reduction,
				 f8_diag *diag) {
	size_t bytes = count * f8_dtype_get_info(dtype)->bytes;
	if (f8_dist_group_size(dist, axes) == 1) {
		if (bytes)
			memcpy(out, in, bytes);
		return F8_OK;
	}
	if (dist->store)
		return needs_mpi(dist, "a reduce-scatter", diag);
	mpi_handle type, group;
	f8_status status = reduction_type("a reduce-scatter", count, dtype, &type, diag);
	if (!status)
		status = group_of(dist, axes, &group, diag);
	f8_dist_waiting(dist, "MPI_Reduce_scatter_block", axes);
	int code = status || count == 0
			   ? MPI_OK
			   : mpi.Reduce_scatter_block(in, out, (int)count, type,
						      reduction == F8_REDUCTION_MAX ? mpi.op_max
										    : mpi.op_sum,
						      group);
	f8_dist_waiting(dist, NULL, 0);
	return status ? status
	       : code != MPI_OK ? failed("MPI_Reduce_scatter_block", axes, code, diag) : F8_OK;
}

f8_status f8_dist_ring_shift(f8_dist *dist, uint32_t axes, const void *out, void *in,
			     size_t bytes, f8_diag *diag) {
	uint32_t n = f8_dist_group_size(dist, axes), place = f8_dist_group_rank(dist, axes);
	if (n == 1) {
		if (bytes)
			memmove(in, out, bytes);
		return F8_OK;
	}
	if (dist->store)
		return needs_mpi(dist, "a ring shift", diag);
	mpi_handle group;
	f8_status status = bytes > (size_t)INT32_MAX
				   ? f8_diag_set(diag, F8_ERR_UNSUPPORTED, "a ring shift of %zu bytes",
						 bytes)
				   : group_of(dist, axes, &group, diag);
	f8_dist_waiting(dist, "MPI_Sendrecv", axes);
	int code = status ? MPI_OK
			  : mpi.Sendrecv(out, (int)bytes, mpi.type_byte, (int)((place + 1) % n), 0, in,
					 (int)bytes, mpi.type_byte, (int)((place + n - 1) % n), 0,
					 group, NULL); // NULL: MPI_STATUS_IGNORE
	f8_dist_waiting(dist, NULL, 0);
	return status ? status : code != MPI_OK ? failed("MPI_Sendrecv", axes, code, diag) : F8_OK;
}

/* A byte count or offset as MPI's int; false past INT32_MAX. */
static bool as_int(size_t bytes, int *out) {
	*out = (int)bytes;
	return bytes <= (size_t)INT32_MAX;
}

f8_status f8_dist_all_to_all(f8_dist *dist, uint32_t axes, const void *out,
			     const size_t *out_bytes, void *in, const size_t *in_bytes,
			     f8_diag *diag) {
	uint32_t n = f8_dist_group_size(dist, axes);
	if (n == 1) {
		if (in_bytes[0] != out_bytes[0])
			return f8_diag_set(diag, F8_ERR_INVALID, "an all-to-all of one rank sends "
					   "%zu bytes to itself but expects %zu", out_bytes[0],
					   in_bytes[0]);
		if (out_bytes[0])
			memmove(in, out, out_bytes[0]);
		return F8_OK;
	}
	if (dist->store)
		return needs_mpi(dist, "an all-to-all", diag);
	int *counts = f8_calloc(4 * (size_t)n, sizeof *counts);
	if (!counts)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory for an all-to-all's counts");
	int *out_counts = counts, *out_displs = counts + n, *in_counts = counts + 2 * n;
	int *in_displs = counts + 3 * n;
	size_t out_at = 0, in_at = 0;
	bool fits = true;
	for (uint32_t r = 0; r < n; r++) {
		fits &= as_int(out_bytes[r], &out_counts[r]) && as_int(out_at, &out_displs[r]) &&
			as_int(in_bytes[r], &in_counts[r]) && as_int(in_at, &in_displs[r]);
		out_at += out_bytes[r];
		in_at += in_bytes[r];
	}
	mpi_handle group;
	f8_status status = !fits || out_at > (size_t)INT32_MAX || in_at > (size_t)INT32_MAX
				   ? f8_diag_set(diag, F8_ERR_UNSUPPORTED, "an all-to-all of %zu bytes "
						 "out and %zu in (MPI counts bytes in an int)",
						 out_at, in_at)
				   : group_of(dist, axes, &group, diag);
	f8_dist_waiting(dist, "MPI_Alltoallv", axes);
	int code = status ? MPI_OK
			  : mpi.Alltoallv(out, out_counts, out_displs, mpi.type_byte, in, in_counts,
					  in_displs, mpi.type_byte, group);
	f8_dist_waiting(dist, NULL, 0);
	f8_free(counts);
	return status ? status : code != MPI_OK ? failed("MPI_Alltoallv", axes, code, diag) : F8_OK;
}

f8_status f8_dist_send(f8_dist *dist, uint32_t axes, uint32_t peer, int tag, const void *data,
			size_t bytes, f8_diag *diag) {
	if (dist->store)
		return needs_mpi(dist, "a send", diag);
	mpi_handle group;
	f8_status status = bytes > (size_t)INT32_MAX
				   ? f8_diag_set(diag, F8_ERR_UNSUPPORTED, "a send of %zu bytes", bytes)
			   : peer >= f8_dist_group_size(dist, axes)
				   ? f8_diag_set(diag, F8_ERR_ARGUMENT, "a send to place %u of a group "
						 "of %u", peer, f8_dist_group_size(dist, axes))
				   : group_of(dist, axes, &group, diag);
	// The sends received by now give their copies back (a step sends an activation per
	// micro-batch: the copies would pile up until the step's end).
	uint32_t kept = 0;
	for (uint32_t i = 0; !status && i < dist->n_sends; i++) {
		int done = 0;
		long long ignored[8]; // MPI_Status: 24 bytes in Open MPI's ABI
		if (mpi.Test(&dist->sends[i].request, &done, ignored) == MPI_OK && done)
			f8_free(dist->sends[i].copy);
		else
			dist->sends[kept++] = dist->sends[i];
	}
	if (!status)
		dist->n_sends = kept;
	if (!status && dist->n_sends == dist->cap_sends) {
		uint32_t cap = dist->cap_sends ? 2 * dist->cap_sends : 16;
		struct pending_send *grown = f8_realloc(dist->sends, cap * sizeof *grown);
		if (!grown)
			return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
		dist->sends = grown, dist->cap_sends = cap;
	}
	void *copy = status ? NULL : f8_malloc(bytes ? bytes : 1);
	if (!status && !copy)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory for a send of %zu bytes", bytes);
	if (status)
		return status;
	memcpy(copy, data, bytes);
	mpi_handle request = NULL;
	int code = mpi.Isend(copy, (int)bytes, mpi.type_byte, (int)peer, tag, group, &request);
	if (code != MPI_OK) {
		f8_free(copy);
		return failed("MPI_Isend", axes, code, diag);
	}
	dist->sends[dist->n_sends++] = (struct pending_send){request, copy, axes};
	return F8_OK;
}

f8_status f8_dist_complete_sends(f8_dist *dist, f8_diag *diag) {
	if (!dist || !dist->n_sends)
		return F8_OK;
	mpi_handle *requests = f8_calloc(dist->n_sends, sizeof *requests);
	long long *statuses = f8_calloc((size_t)dist->n_sends * 8, sizeof *statuses);
	if (!requests || !statuses) {
		f8_free(requests);
		f8_free(statuses);
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	}
	for (uint32_t i = 0; i < dist->n_sends; i++)
		requests[i] = dist->sends[i].request;
	f8_dist_waiting(dist, "MPI_Waitall", dist->sends[0].axes);
	int code = mpi.Waitall((int)dist->n_sends, requests, statuses); // MPI_Status: 24 bytes
	f8_dist_waiting(dist, NULL, 0);
	uint32_t axes = dist->sends[0].axes;
	// A failed wait may leave sends under way: their copies are left to them (the run stops).
	for (uint32_t i = 0; code == MPI_OK && i < dist->n_sends; i++)
		f8_free(dist->sends[i].copy);
	dist->n_sends = 0;
	f8_free(requests);
	f8_free(statuses);
	return code != MPI_OK ? failed("MPI_Waitall", axes, code, diag) : F8_OK;
}

f8_status f8_dist_recv(f8_dist *dist, uint32_t axes, uint32_t peer, int tag, void *data,
			size_t bytes, f8_diag *diag) {
	if (dist->store)
		return needs_mpi(dist, "a receive", diag);
	mpi_handle group;
	f8_status status = bytes > (size_t)INT32_MAX
				   ? f8_diag_set(diag, F8_ERR_UNSUPPORTED, "a receive of %zu bytes",
						 bytes)
			   : peer >= f8_dist_group_size(dist, axes)
				   ? f8_diag_set(diag, F8_ERR_ARGUMENT, "a receive from place %u of a "
						 "group of %u", peer, f8_dist_group_size(dist, axes))
				   : group_of(dist, axes, &group, diag);
	f8_dist_waiting(dist, "MPI_Recv", axes);
	long long received[8] = {0}; // MPI_Status: 24 bytes in Open MPI's ABI
	int code = status ? MPI_OK
			  : mpi.Recv(data, (int)bytes, mpi.type_byte, (int)peer, tag, group, received);
	f8_dist_waiting(dist, NULL, 0);
	int count = (int)bytes;
	if (!status && code == MPI_OK)
		code = mpi.Get_count(received, mpi.type_byte, &count);
	if (!status && code == MPI_OK && count != (int)bytes) // a shorter message: a plan bug
		return f8_diag_set(diag, F8_ERR_INVALID, "a receive from place %u of its group "
				   "expected %zu bytes and got %d", peer, bytes, count);
	return status ? status : code != MPI_OK ? failed("MPI_Recv", axes, code, diag) : F8_OK;
}

f8_status f8_dist_agree(f8_dist *dist, uint32_t axes, f8_status status, const char *what,
			f8_diag *diag) {
	if (!dist)
		return status;
	int64_t worst = -(int64_t)status; // the max of the negated codes: the most negative code
	f8_diag local = {0};
	f8_status reduced = f8_dist_all_reduce(dist, axes, &worst, 1, F8_DTYPE_I64,
					       F8_REDUCTION_MAX, &local);
	if (reduced)
		return status ? status : f8_diag_set(diag, reduced, "%s", local.message);
	if (status || !worst)
		return status;
	return f8_diag_set(diag, (f8_status)-worst, "another rank could not %s (its message says "
			   "why)", what);
}

f8_status f8_dist_barrier(f8_dist *dist, f8_diag *diag) {
	if (f8_dist_world(dist) == 1)
		return F8_OK;
	int64_t none = 0;
	if (dist->store)
		return store_exchange(dist, F8_DIST_GROUPS - 1, "a barrier", &none, 0,
				      F8_DIST_STORE_REDUCE, F8_DTYPE_I64, F8_REDUCTION_SUM, &none, diag);
	f8_dist_waiting(dist, "MPI_Barrier", (1u << F8_MESH_AXIS_COUNT) - 1);
	int code = mpi.Barrier(mpi.comm_world);
	f8_dist_waiting(dist, NULL, 0);
	return code == MPI_OK ? F8_OK
			      : failed("MPI_Barrier", (1u << F8_MESH_AXIS_COUNT) - 1, code, diag);
}

f8_status f8_dist_broadcast(f8_dist *dist, void *data, size_t bytes, const char *what,
			    f8_diag *diag) {
	int64_t world = f8_dist_world(dist);
	if (world == 1)
		return F8_OK;
	if (!dist->store) { // every rank's, of which rank 0's is kept
		uint8_t *all = f8_calloc((size_t)world, bytes ? bytes : 1);
		if (!all)
			return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
		f8_status status = f8_dist_all_gather(dist, F8_DIST_GROUPS - 1, data, all, bytes,
						      diag);
		if (!status)
			memcpy(data, all, bytes);
		f8_free(all);
		return status;
	}
	char key[48];
	snprintf(key, sizeof key, "broadcast/%llu", (unsigned long long)++dist->broadcasts);
	if (dist->launch.rank == 0)
		return f8_tcp_store_set(dist->store, key, data, bytes, diag);
	void *value;
	size_t got;
	f8_diag local = {0};
	f8_status status = f8_tcp_store_get(dist->store, key, &value, &got, NULL, &local);
	if (status)
		return f8_diag_set(diag, status, "%s from rank 0: %s", what, local.message);
	if (got != bytes)
		status = f8_diag_set(diag, F8_ERR_INVALID, "%s from rank 0 is %zu bytes, not %zu",
				     what, got, bytes);
	else
		memcpy(data, value, bytes);
	f8_free(value);
	return status;
}
