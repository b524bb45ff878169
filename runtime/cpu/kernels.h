/*
 * The reference kernels of the CPU backend: one per op of ir/ops.def, found by op in a table
 * generated from that same list (runtime/cpu/kernels.c), so that an op without a kernel is a
 * link error, not a surprise at run time.
 *
 * Numerics (the backend is the project's oracle, DESIGN.md): each kernel computes in double and
 * rounds once per stored element to the output's dtype (f8_rt_tensor_set: to float32 first, then
 * to BF16/F16/FP8 by round-to-nearest-even, FP8 saturating as sm_90's cvt.rn.satfinite); sums and
 * dot products accumulate in double. GEMMs on f32/bf16/f16/fp8 operands decode them exactly to
 * float32 and run OpenBLAS's cblas_sgemm (float32 accumulation, as the GPU's tensor cores do);
 * on f64 operands cblas_dgemm, so that the FP64 gradient check is exact. A kernel may have a fast
 * path for f32 as long as it computes the same thing. FP8Gemm's accumulation is described in
 * kernels_fp8_gemm.c (sgemm where each operand's scale is constant along K, dgemm on the
 * exactly dequantized operands for block and MX scales).
 */
#ifndef F8_RUNTIME_CPU_KERNELS_H
#define F8_RUNTIME_CPU_KERNELS_H

#include <stdint.h> // int64_t

#include "ir/diag.h"        // f8_status, f8_diag
#include "ir/graph.h"       // f8_graph, f8_node
#include "ir/ops.h"         // f8_op, ops.def
#include "runtime/tensor.h" // f8_rt_tensor

/*
 * One call of a kernel: a node of a graph with its input tensors and its output tensors,
 * which the executor has allocated (zeroed) with the shapes type inference gave them, the
 * graph's symbols bound to `symbol_values`. A kernel reads its attributes from `node`
 * (f8_node_attr_*, f8_cpu_dim for DIM attributes), fills every output, and returns F8_OK, or a
 * status with a diagnostic for what only the data can show (an index out of range).
 */
/* A collective kernel's exchange with the other ranks of its group (ring attention's): this
 * rank's place among `ranks`, and one step round the ring (send `bytes` at `out` to the next
 * place, receive as many from the one before into `in`). */
typedef struct f8_cpu_ring {
	int64_t ranks, place;
	f8_status (*shift)(void *context, const void *out, void *in, size_t bytes, f8_diag *diag);
	void *context;
} f8_cpu_ring;

typedef struct f8_cpu_kernel_call {
	const f8_graph *graph;
	const f8_node *node;
	const int64_t *symbol_values;      // (graph->n_symbols) the value of each symbol
	const f8_rt_tensor *const *inputs; // (node->n_inputs) NULL for an omitted optional input
	f8_rt_tensor *outputs;             // (node->n_outputs) allocated, zeroed, to be filled
	const f8_cpu_ring *ring;           // a collective's group of several ranks; NULL: one
} f8_cpu_kernel_call;

typedef f8_status (*f8_cpu_kernel_fn)(const f8_cpu_kernel_call *call, f8_diag *diag);

/* The kernels, named by the op's enum: f8_cpu_kernel_ADD, f8_cpu_kernel_LAYER_NORM, ... Define
 * one with F8_CPU_KERNEL(LAYER_NORM) { ... } (its parameters are `call` and `diag`). */
#define F8_CPU_KERNEL(e) f8_status f8_cpu_kernel_##e(const f8_cpu_kernel_call *call, f8_diag *diag)
#define X(e, ...) F8_CPU_KERNEL(e);
#include "ir/ops.def"
#undef X

/* The kernel of `op`. */
f8_cpu_kernel_fn f8_cpu_kernel_get(f8_op op);

/* The value of `dim` with the call's symbols bound. */
int64_t f8_cpu_dim(const f8_cpu_kernel_call *call, f8_dim dim);

/* Fails a kernel with a data error about its node: `return f8_cpu_fail(call, diag, "...")`. */
f8_status f8_cpu_fail(const f8_cpu_kernel_call *call, f8_diag *diag, const char *format, ...)
	__attribute__((format(printf, 3, 4)));

#endif
