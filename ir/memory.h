/*
 * The device memory a training step's plan takes on one GPU, by part, from its graph: what
 * `f8c audit --memory` prints, plan.json's "memory" section holds and the recompute pass's
 * budget counts.
 *
 * Exact from the graph: the leaves by what they hold (each leaf's bytes, aligned as the
 * runtime's leaf buffer lays them out: F8_SLAB_ALIGNMENT) and the slab (the schedule pass's
 * offsets: every value a step stores, at its peak). From the CUDA backend's rules: cuBLASLt's
 * workspace (F8_MEMORY_GEMM_WORKSPACE_BYTES, which runtime/cuda/gemm.c allocates) and f8c's
 * tensors in cuDNN attention's workspaces (one per distinct shape, as runtime/cuda/attention.c
 * lays them out; the engine's own part is cuDNN's choice at load and is not counted). Measured:
 * the CUDA context with cuBLASLt's and cuDNN's handles (F8_MEMORY_CUDA_RUNTIME_BYTES). Not from
 * the graph: the generated kernels' scratch, which codegen sizes (a plan adds it:
 * f8_memory_estimate.part[F8_MEMORY_WORKSPACES]).
 */
#ifndef F8_IR_MEMORY_H
#define F8_IR_MEMORY_H

#include <stdbool.h> // bool
#include <stdint.h>  // uint64_t

#include "ir/graph.h" // f8_graph

/* cuBLASLt's workspace, TransformerEngine's on Hopper (GPU-FACTS.md 1.7): runtime/cuda/gemm.c
 * gives cuBLASLt this much. */
#define F8_MEMORY_GEMM_WORKSPACE_BYTES ((uint64_t)32 << 20)

/* The CUDA context and the cuBLASLt and cuDNN handles on an H200, what the device's used memory
 * holds besides f8c's own allocations: 0.53 GiB measured as device peak minus f8c's peak in
 * every bench run of 2026-12-04 (tools/gpu_results/2026-12-04-bench, CUDA 13.0, cuDNN 9.14). */
#define F8_MEMORY_CUDA_RUNTIME_BYTES ((uint64_t)544 << 20)

/* X(ENUM, name, what it holds): the parts of a step's device memory, in the order printed. */
#define F8_MEMORY_PART_LIST(X)                                                                 \
	X(PARAMETERS, "parameters", "the weights (f32 master weights under --bf16) and buffers") \
	X(GRADIENTS, "gradients", "the gradient accumulators (main_grad)")                    \
	X(OPTIMIZER, "optimizer states", "AdamW's moments and the step count")               \
	X(FP8_WEIGHTS, "FP8 weight copies", "FP8 weights and their transposes, cast once a step") \
	X(SCALING, "scaling state", "FP8 scale tables, amax histories, non-finite counts")       \
	X(INPUTS, "inputs", "tokens, labels and the step's scalars")                            \
	X(ACTIVATIONS, "activations", "the slab: every value a step stores, at its peak")      \
	X(WORKSPACES, "workspaces", "cuBLASLt's, f8c's part of cuDNN attention's, kernel scratch") \
	X(RUNTIME, "CUDA runtime", "the CUDA context, cuBLASLt and cuDNN (measured on an H200)")

typedef enum f8_memory_part {
#define F8_MEMORY_PART_ENUM(e, name, what) F8_MEMORY_##e,
	F8_MEMORY_PART_LIST(F8_MEMORY_PART_ENUM)
#undef F8_MEMORY_PART_ENUM
	F8_MEMORY_PART_COUNT
} f8_memory_part;

const char *f8_memory_part_name(f8_memory_part part);
/* What the part holds, in words. */
const char *f8_memory_part_what(f8_memory_part part);

typedef struct f8_memory_estimate {
	bool planned;                          // the slab is planned (sizes bound, schedule run)
	uint64_t part[F8_MEMORY_PART_COUNT];   // bytes per part
	uint64_t saved_activations;            // of ACTIVATIONS: values the forward stores for the
					       // backward (made in fwd, read in bwd), summed
	uint64_t recomputed_activations;       // forward values dropped and recomputed, summed
	uint64_t total;                        // the parts, summed
} f8_memory_estimate;

/*
 * The memory of `graph`'s step on one GPU, as above. Leaves and values whose sizes are
 * symbolic count 0, and `planned` is false when the slab has no offsets (the schedule pass has
 * not run, or a size was symbolic).
 */
f8_memory_estimate f8_memory_estimate_of(const f8_graph *graph);

/* The bytes of a tensor of `type`; 0 when a size is symbolic. */
uint64_t f8_memory_type_bytes(const f8_type *type);

/* `bytes` rounded up to F8_SLAB_ALIGNMENT, as the slab, the leaves and the scratch place them. */
uint64_t f8_memory_aligned(uint64_t bytes);

/* Adds `bytes` to `part` and to the total (the plan's kernel scratch, say). */
void f8_memory_estimate_add(f8_memory_estimate *estimate, f8_memory_part part, uint64_t bytes);

#endif
