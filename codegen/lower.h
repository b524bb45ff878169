/*
 * Fused groups -> kernel IR: one kernel per group of the fuse pass (ir/graph.h
 * f8_kernel_group), with the binding of each of its parameters to the graph.
 *
 * A kernel's parameters, in order: the buffers it reads (values produced outside the group,
 * in the order the members first read them), the buffers it writes (members' outputs that
 * leave the group: read by a node outside it, a graph output, or the source of an update), then
 * the sizes (the distinct dims of the group's shapes). Outputs that only combine atomically
 * (an amax, a bias gradient summed over rows) are ACCUMULATE parameters: the launcher zeroes
 * them first. Values made and read inside the group stay in registers.
 *
 * What lowers (f8_codegen_can_lower says so per node, and the fuse pass groups nothing else):
 *   - elementwise ops of ir/ops.def with f32 register arithmetic (Add, Sub, Mul, Div, Pow with
 *     a constant integer exponent, Sqrt, Reciprocal, Neg, Abs, Exp, Log, Tanh, Erf, Sigmoid,
 *     Max, Min, Relu, Identity, Where, Cast to a float dtype), NumPy broadcasting;
 *   - Gelu (erf and tanh forms), GeluGrad, SwiGLU, SwiGLUGrad;
 *   - LayerNorm, RMSNorm (forward);
 *   - ReduceSum over all leading axes (a bias gradient: column sums, atomically);
 *   - Quantize and CastTranspose with a given per-tensor scale (delayed scaling: `slot` of a
 *     scaling table, or a scalar), with their scale_inv and amax outputs.
 * Arithmetic is f32 where the reference executor computes in double and rounds once, so a
 * lowered group matches the reference within f32 rounding, and an FP8 output within one code
 * where the value before the cast differs by an ulp (DESIGN.md: the cast itself is exact).
 */
#ifndef F8_CODEGEN_LOWER_H
#define F8_CODEGEN_LOWER_H

#include <stdbool.h> // bool

#include "codegen/kir.h" // f8_kernel
#include "ir/diag.h"     // f8_status, f8_diag
#include "ir/graph.h"    // f8_graph, f8_node_id, f8_value_id
#include "ir/shape.h"    // f8_dim

/* What a kernel parameter is bound to: a buffer parameter to a value of the graph (its
 * storage), a size parameter to a dim (evaluated with the graph's symbols bound). */
typedef struct f8_kernel_arg {
	f8_value_id value; // buffers; F8_NONE for a size
	f8_dim dim;        // sizes
} f8_kernel_arg;

/* True when codegen can lower `node` of `graph` into a group's kernel (the list above). */
bool f8_codegen_can_lower(const f8_graph *graph, f8_node_id node);

/*
 * Lowers group `group` of `graph` (types inferred, members contiguous) into a new kernel named
 * as the group. Out: *kernel (the caller destroys it with f8_kir_destroy) and *args
 * (kernel->n_params entries, the caller frees them with f8_free). On failure both are NULL and
 * the diagnostic names the group and the node that could not be lowered.
 */
f8_status f8_codegen_lower_group(const f8_graph *graph, uint32_t group, f8_kernel **kernel,
				 f8_kernel_arg **args, f8_diag *diag);

#endif
