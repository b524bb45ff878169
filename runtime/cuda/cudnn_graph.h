/*
 * A small checked layer over cuDNN's backend API (cudnn_graph.h, called through the table of
 * runtime/cuda/libraries.h): one operation graph built descriptor by descriptor (tensors,
 * pointwise, matmul, reduction and reshape nodes), its engine chosen by heuristics and finalized
 * into an execution plan, and the variant pack of a run. runtime/cuda/attention.c builds its
 * composite attention graphs with it.
 *
 * Building is sticky: the first cuDNN call that fails sets the builder's status and diagnostic,
 * and every later call does nothing, so that a graph reads as the list of its nodes, with one
 * check at the end. A failure's message names the node of the f8c graph it is for, the call,
 * cudnnGetErrorString and cudnnGetLastErrorString's text, the shape and the cuDNN version.
 *
 * Every descriptor made is kept in the graph's list until f8_cudnn_graph_destroy: the plan
 * refers to the engine config, which refers to the operation graph and its nodes.
 */
#ifndef F8_RUNTIME_CUDA_CUDNN_GRAPH_H
#define F8_RUNTIME_CUDA_CUDNN_GRAPH_H

#include <stdbool.h> // bool
#include <stdint.h>  // int64_t, uint32_t, uint64_t

#include <cuda.h>        // CUdeviceptr
#include <cudnn_graph.h> // cudnnBackendDescriptor_t, cudnnDataType_t, cudnnPointwiseMode_t

#include "ir/diag.h" // f8_status, f8_diag

typedef cudnnBackendDescriptor_t f8_cudnn_tensor; // a finalized tensor descriptor

/* Where a non-virtual tensor's address comes from at run time. */
typedef enum f8_cudnn_binding_kind {
	F8_CUDNN_BIND_INPUT,     // the node's input `index` + `offset` (a head of a packed qkv)
	F8_CUDNN_BIND_OUTPUT,    // the node's output `index` + `offset`
	F8_CUDNN_BIND_WORKSPACE, // the plan's workspace + `offset` (f8c's part, below the engine's)
	F8_CUDNN_BIND_HOST,      // a by-value scalar at `host`, which lives as long as the graph
} f8_cudnn_binding_kind;

typedef struct f8_cudnn_binding {
	int64_t uid;
	f8_cudnn_binding_kind kind;
	uint32_t index;    // INPUT, OUTPUT
	uint64_t offset;   // bytes from the workspace's start, or from the input's or output's
	const void *host;  // HOST
} f8_cudnn_binding;

enum {
	F8_CUDNN_MAX_OPS = 64,      // operation nodes of one graph (the backward has about 40)
	F8_CUDNN_MAX_BINDINGS = 24, // non-virtual tensors of one graph
	F8_CUDNN_FIRST_VIRTUAL = 1000, // virtual tensors' uids count from here
};

/* One graph: its descriptors, its plan once chosen, and what a run binds. */
typedef struct f8_cudnn_graph {
	// Context for messages, set by the caller before building.
	const char *node;  // "Attention node 3 (%o = Attention)"
	const char *shape; // "b=2 h_q=8 h_kv=2 s_q=128 s_kv=128 d=64 d_v=64 bf16 causal"
	cudnnHandle_t handle;
	f8_status status; // the first failure, F8_OK while none
	f8_diag *diag;

	cudnnBackendDescriptor_t *descriptors; // (n_descriptors) every one made, destroyed last first
	uint32_t n_descriptors, cap_descriptors;
	cudnnBackendDescriptor_t ops[F8_CUDNN_MAX_OPS];
	uint32_t n_ops;
	int64_t next_virtual; // the next virtual tensor's uid
	f8_cudnn_binding bindings[F8_CUDNN_MAX_BINDINGS];
	uint32_t n_bindings;

	// The choice, after f8_cudnn_graph_plan.
	cudnnBackendDescriptor_t plan;
	int64_t engine;            // the engine's global index
	int64_t engine_configs;    // how many heuristics mode A gave
	int64_t engine_choice;     // which of them (0-based)
	int64_t engines_in_graph;  // CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT
	uint64_t engine_workspace; // bytes the plan needs
} f8_cudnn_graph;

/* The loaded cuDNN's version as "9.14.0", into a static buffer. */
const char *f8_cudnn_version_text(void);

/* Starts `graph` for `handle`, reporting into `diag` with `node` and `shape` (both must live
 * as long as the graph is built and run). */
void f8_cudnn_graph_init(f8_cudnn_graph *graph, cudnnHandle_t handle, const char *node,
			 const char *shape, f8_diag *diag);

/* Fails the graph (as its own calls do) when `result`, of `call`, is not success; for cuDNN
 * calls made outside the graph's helpers (cudnnCreate, cudnnSetStream). */
void f8_cudnn_graph_check(f8_cudnn_graph *graph, cudnnStatus_t result, const char *call);

/* Destroys every descriptor of the graph (NULL is allowed) and empties it. */
void f8_cudnn_graph_destroy(f8_cudnn_graph *graph);

/* A finalized tensor of `type`, dims and strides (4 of each), `uid`; virtual or not. Byte
 * alignment 16, as cudnn-frontend's default. NULL once the graph has failed. */
f8_cudnn_tensor f8_cudnn_tensor_make(f8_cudnn_graph *graph, int64_t uid, cudnnDataType_t type,
				     const int64_t *dims, const int64_t *strides, bool is_virtual);

/* A virtual tensor with the next virtual uid. */
f8_cudnn_tensor f8_cudnn_virtual(f8_cudnn_graph *graph, cudnnDataType_t type, const int64_t *dims,
				 const int64_t *strides);

/* A by-value scalar of `type` (FLOAT: a float, INT32: an int32_t) at `host`, dims and strides
 * {1, 1, 1, 1} as the frontend expands them, bound to its uid. */
f8_cudnn_tensor f8_cudnn_scalar(f8_cudnn_graph *graph, int64_t uid, cudnnDataType_t type,
				const void *host);

/* Records where non-virtual tensor `uid` is at run time. */
void f8_cudnn_bind(f8_cudnn_graph *graph, int64_t uid, f8_cudnn_binding_kind kind,
		   uint32_t index, uint64_t offset);

/*
 * A pointwise node of `mode` computing in `precision` into y: x alone, x with b, or x, b and the
 * condition t (BINARY_SELECT: y = t ? x : b). `axis` >= 0 sets CUDNN_ATTR_POINTWISE_AXIS (for
 * GEN_INDEX, and where the frontend sets it). Returns y.
 */
f8_cudnn_tensor f8_cudnn_pointwise(f8_cudnn_graph *graph, cudnnPointwiseMode_t mode,
				   cudnnDataType_t precision, int64_t axis, f8_cudnn_tensor x,
				   f8_cudnn_tensor b, f8_cudnn_tensor t, f8_cudnn_tensor y);

/* c = a b (batched over the leading dims, broadcast where a or b has fewer heads), FLOAT
 * compute; the override tensors (NULL for none) give M, N or K per batch. */
void f8_cudnn_matmul(f8_cudnn_graph *graph, f8_cudnn_tensor a, f8_cudnn_tensor b,
		     f8_cudnn_tensor c, f8_cudnn_tensor m_override, f8_cudnn_tensor n_override,
		     f8_cudnn_tensor k_override);

/* y = the reduction `op` (ADD, MAX) of x over the dims where y has 1 (or fewer heads), FLOAT. */
void f8_cudnn_reduction(f8_cudnn_graph *graph, cudnnReduceTensorOp_t op, f8_cudnn_tensor x,
			f8_cudnn_tensor y);

/* y = x seen with y's dims and strides (a transpose, when the strides swap). */
void f8_cudnn_reshape(f8_cudnn_graph *graph, f8_cudnn_tensor x, f8_cudnn_tensor y);

/*
 * Finalizes the operation graph of the nodes added, asks heuristics (CUDNN_HEUR_MODE_A) for
 * engine configs, and keeps the first that finalizes into an execution plan, skipping those
 * with CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC when `deterministic`. F8_ERR_UNSUPPORTED when
 * none does, naming the first refusal.
 */
f8_status f8_cudnn_graph_plan(f8_cudnn_graph *graph, bool deterministic);

/* The chosen plan's engine, for messages and --verbose: "engine 7 (config 1 of 3 from
 * heuristics mode A, 9 engines for the graph), workspace 1024 bytes". */
void f8_cudnn_graph_describe(const f8_cudnn_graph *graph, char *out, size_t size);

/*
 * Runs the plan on the handle's stream: every binding's address from `inputs`, `outputs`,
 * `workspace` (f8c's tensors below `engine_offset`, the engine's workspace from there) or
 * its host scalar. F8_ERR_ARGUMENT for an address that is 0 or not 16-byte aligned (naming the
 * tensor by binding); F8_ERR_IO when cuDNN fails.
 */
f8_status f8_cudnn_graph_execute(f8_cudnn_graph *graph, const CUdeviceptr *inputs,
				 const CUdeviceptr *outputs, CUdeviceptr workspace,
				 uint64_t engine_offset, f8_diag *diag);

#endif
