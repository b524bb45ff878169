/*
 * The backend seam (DESIGN.md, "Compile and run"): what the executor core (runtime/executor.h)
 * asks of a device, and nothing more. A backend owns its memory and its kernels; the core owns
 * the program: the order of the nodes, the phases, which value lives where, the updates, the
 * checks. The CPU backend (runtime/cpu/backend.h) is the first implementation; the CUDA backend
 * implements the same interface.
 *
 * Memory is in buffers the backend makes; the core hands a backend tensor views into them (a
 * buffer, a byte offset, a dtype and concrete dims). A run of a node or of a fused group gets
 * the views of every value of the graph, indexed by value id: it reads its inputs and writes
 * its outputs there. A value the step never stores (one made and read inside a fused kernel)
 * has a view without a buffer. An update's source is viewed in its leaf's storage: a run writes
 * the new weights, moments, accumulators and scaling state in place, as the schedule pass
 * planned (passes/schedule.h), so a kernel must allow an output to be one of its inputs.
 *
 * Every call returns a status and fills the diagnostic; none exits. Calls may be asynchronous
 * (a GPU's stream): download and synchronize are where the host sees the results.
 */
#ifndef F8_RUNTIME_BACKEND_H
#define F8_RUNTIME_BACKEND_H

#include <stdbool.h> // bool
#include <stdint.h>  // uint64_t, int64_t

#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/dtype.h" // f8_dtype
#include "ir/graph.h" // f8_graph, f8_node_id, f8_mesh_axis
#include "ir/shape.h" // F8_MAX_RANK

typedef struct f8_backend f8_backend; // a backend instance: its device, streams and kernels
typedef struct f8_buffer f8_buffer;   // memory a backend made

/* A tensor as a backend sees it: bytes at `offset` of `buffer`, row-major. */
typedef struct f8_tensor_view {
	f8_buffer *buffer;         // NULL: the value is never stored (inside a fused kernel)
	uint64_t offset;           // bytes from the buffer's start
	uint64_t n_bytes;          // numel * the dtype's size
	f8_dtype dtype;
	int rank;
	int64_t dims[F8_MAX_RANK]; // (rank)
} f8_tensor_view;

/* What a backend does; each backend fills one of these, static and constant. */
typedef struct f8_backend_interface {
	const char *name; // "cpu", "cpu-generated", "cuda": in messages and --verbose

	/* Prepares to run `graph` (verified, fused) with its symbols bound to `symbol_values`
	 * (graph->n_symbols; both must outlive the runs, not the backend): loads or compiles its
	 * kernels, makes their workspaces. Before any run; a later prepare replaces what an
	 * earlier one made, so one backend serves one executor at a time. */
	f8_status (*prepare)(f8_backend *backend, const f8_graph *graph,
			     const int64_t *symbol_values, f8_diag *diag);

	/* A buffer of `n_bytes` (0 allowed), aligned to 256 bytes, its contents undefined. */
	f8_status (*buffer_create)(f8_backend *backend, uint64_t n_bytes, f8_buffer **out,
				   f8_diag *diag);
	void (*buffer_destroy)(f8_backend *backend, f8_buffer *buffer);

	/* Host bytes into a view and back; n_bytes is the view's. */
	f8_status (*upload)(f8_backend *backend, const f8_tensor_view *to, const void *from,
			    f8_diag *diag);
	f8_status (*download)(f8_backend *backend, const f8_tensor_view *from, void *to,
			      f8_diag *diag);
	/* Zeroes a view's bytes. */
	f8_status (*zero)(f8_backend *backend, const f8_tensor_view *view, f8_diag *diag);

	/* Runs fused group `group` of the prepared graph: reads and writes views[value] for the
	 * values it reads from outside the group and those it writes. */
	f8_status (*run_group)(f8_backend *backend, uint32_t group, const f8_tensor_view *views,
			       f8_diag *diag);
	/* Runs node `node` outside any group: a library call (a GEMM, attention) or, on a
	 * backend that has one, its reference kernel. */
	f8_status (*run_node)(f8_backend *backend, f8_node_id node, const f8_tensor_view *views,
			      f8_diag *diag);
	/* Runs collective node `node` (AllReduce, AllGather, ...) on the communicator of its
	 * group: the ranks that differ only along the mesh axes `axes` (bits 1 << f8_mesh_axis,
	 * f8_mesh_group_from_name). */
	f8_status (*run_collective)(f8_backend *backend, f8_node_id node, uint32_t axes,
				    const f8_tensor_view *views, f8_diag *diag);

	/*
	 * Optional (NULL: a backend that replays nothing). A run of a planned executor repeats
	 * exactly, run after run of the same phases: the same groups and nodes in the same order,
	 * on the same views (the slab's and the leaves' addresses do not move). The executor
	 * brackets such a run with run_begin and run_end, `key` naming it (the phase mask and flags,
	 * F8_RUN_KEY_FROZEN while the scaling state is frozen, whose views differ, and the
	 * context). A backend may
	 * record the calls between them and, on a later run of the same key, queue the recording
	 * instead (a CUDA graph): run_begin then answers *replayed = true, and the executor makes
	 * none of the run's calls, only its own bookkeeping. Otherwise the executor makes the calls
	 * and then calls run_end, with `issued` false when one of them failed (a backend drops
	 * what it was recording); synchronize follows either way. A run_begin that fails has
	 * queued nothing of the run (the leaves are as they were).
	 */
	f8_status (*run_begin)(f8_backend *backend, uint32_t key, bool *replayed, f8_diag *diag);
	f8_status (*run_end)(f8_backend *backend, uint32_t key, bool issued, f8_diag *diag);

	/* Optional (NULL: a backend that holds nothing back). Issues the messages the backend
	 * holds back: the CUDA backend queues a pipeline send with its next receive, as one NCCL
	 * group (runtime/cuda/collectives.h), so that two stages that each send before they
	 * receive do not wait on each other; the training loop calls this where the sends must
	 * be on their way (before the ranks next agree, and at the end of a step's runs). */
	f8_status (*flush)(f8_backend *backend, f8_diag *diag);

	/* Whether the backend matches a pair's sends and receives in the order they are posted,
	 * without tags, each send held back until the stage's next receive or flush (the CUDA
	 * backend on NCCL); false: by tag (MPI's). The training loop then runs only a pipeline
	 * schedule whose messages pair up in order and do not deadlock so
	 * (runtime/pipeline_messages.h), and says so before the first step. */
	bool ordered_messages;

	/* Waits until everything asked of the backend so far is done. */
	f8_status (*synchronize)(f8_backend *backend, f8_diag *diag);

	/* Frees the backend (its buffers must have been destroyed). */
	void (*destroy)(f8_backend *backend);
} f8_backend_interface;

/* run_begin's key: the phase mask with the run's flags (runtime/executor.h: F8_RUN_KEEP and
 * F8_RUN_CONTINUE, the top bits; F8_RUN_CHUNK, bits 8-15), the bit that marks a run while the
 * FP8 scaling state is
 * frozen, and the context it runs on (its slab's address differs) above that. */
#define F8_RUN_KEY_FROZEN (1u << 16)
#define F8_RUN_KEY_CONTEXT_SHIFT 20

/* Every backend's struct starts with this, so that the core reaches its interface. */
struct f8_backend {
	const f8_backend_interface *interface;
	uint64_t allocated_bytes; // in buffers now, kept by the backend
	uint64_t peak_bytes;      // the most allocated_bytes has been
};

/* The backend's name. */
static inline const char *f8_backend_name(const f8_backend *backend) {
	return backend->interface->name;
}

/* Frees `backend`; NULL is allowed. */
static inline void f8_backend_destroy(f8_backend *backend) {
	if (backend)
		backend->interface->destroy(backend);
}

/* Counts a buffer of n_bytes made (a backend calls this from buffer_create) or freed. */
static inline void f8_backend_count(f8_backend *backend, uint64_t n_bytes, bool made) {
	backend->allocated_bytes = made ? backend->allocated_bytes + n_bytes
					: backend->allocated_bytes - n_bytes;
	if (backend->allocated_bytes > backend->peak_bytes)
		backend->peak_bytes = backend->allocated_bytes;
}

#endif
