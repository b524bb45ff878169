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
 * What lowers (f8_codegen_can_lower says so per node; it is the target table's supports_node,
 * codegen/target.h, and the fuse pass groups nothing else):
 *   - elementwise ops of ir/ops.def with f32 register arithmetic (Add, Sub, Mul, Div, Sqrt,
 *     Reciprocal, Neg, Abs, Exp, Log, Tanh, Erf, Cos, Sin, Sigmoid, Max, Min, Relu, Identity,
 *     Where, Cast to f32 or bf16 of a float, an integer or a bool), NumPy broadcasting (rows of
 *     256 or more: one block per row), Range (each element from its index, as any of f32,
 *     bf16, i64, i32: it starts the chain of RoPE's positions),
 *     and i64 Add, Sub, Mul, Max, Min, Identity (an iteration counter's increment); a
 *     scalar (rank 0) chain too, the optimizer's clipping arithmetic;
 *   - Gelu (erf and tanh forms), GeluGrad, SwiGLU, SwiGLUGrad (packed and two-input forms);
 *   - LayerNorm, RMSNorm (the row read once into shared memory) and their gradients
 *     (lower_norm_grad.c: dgamma and dbeta by per-chunk atomics);
 *   - ReduceSum over all leading axes in a GeluGrad's kernel (a bias gradient: column sums from
 *     the cast's tiles); ReduceSum, ReduceMean, ReduceMax over any axes as kernels of their own
 *     (lower_reduce.c: one output element a grid iteration, no atomics: deterministic);
 *   - the element moves Reshape, Squeeze, Unsqueeze, Expand, Transpose, Slice, SliceGrad,
 *     Concat, Split and the fills Constant, ConstantOfShape (lower_layout.c: one element a
 *     thread, indexes by division and remainder by the dims);
 *   - GlobalNorm (per-chunk sums of squares over a table of the inputs, then their sum in one
 *     block) and LearningRate (the schedule in f32) (lower_optimizer_scalars.c);
 *   - Rope and RopeGrad, rotate-half or interleaved, partial rotary, tables broadcast per
 *     batch (lower_rope.c: one element a thread, which reads its pair's partner);
 *   - Quantize and CastTranspose with a given per-tensor scale (delayed scaling: `slot` of a
 *     scaling table, an argument, or a scalar), with their scale_inv and amax outputs; a group
 *     with a CastTranspose runs by 64x64 tiles (lower_tile.c), the transposed codes written
 *     from shared memory; casts that find their scales (current, rowwise, 1x128, 128x128, MX
 *     1x32 with e8m0 scales: lower_casts.c, an amax kernel then the cast), bit-exact;
 *   - CrossEntropy (its rows, then their mean or sum in a second kernel) and CrossEntropyGrad
 *     (the count of labelled rows, then the rows), a label outside the vocabulary reported;
 *     the vocabulary-parallel loss's CrossEntropyShard, CrossEntropyMerge and their gradients
 *     (lower_cross_entropy_shard.c: a kernel each, the shard's columns from its start input);
 *   - Embedding and EmbeddingGrad (scatter-add by atomics), an id outside the table reported;
 *     of a vocabulary shard too (a start input: other ranks' ids give zeros, add nothing);
 *   - AdamW over every parameter with the zeroing of the gradient accumulators, one
 *     multi-tensor kernel of constant size (lower_optimizer.c: chunks of 4096 elements over
 *     all parameters, their buffers found through a table);
 *   - ScalingUpdate (the slots' amaxes gathered, then one row per slot); Amax and ScaleFromAmax
 *     alone, current scaling's under sequence parallelism (lower_amax.c: chunks' maxima by an
 *     atomic max, then stored; a scale per amax), bit-exact.
 * Arithmetic is f32 where the reference executor computes in double and rounds once, so a
 * lowered group matches the reference within f32 rounding, and an FP8 output within one code
 * where the value before the cast differs by an ulp (DESIGN.md: the cast itself is exact).
 */
#ifndef F8_CODEGEN_LOWER_H
#define F8_CODEGEN_LOWER_H

#include <stdbool.h> // bool
#include <stdint.h>  // uint32_t

#include "codegen/kir.h" // f8_kernel
#include "ir/diag.h"     // f8_status, f8_diag
#include "ir/graph.h"    // f8_graph, f8_node_id, f8_value_id
#include "ir/shape.h"    // f8_dim

/* A buffer the kernels of one group share that is no value of the graph: what one kernel
 * leaves for the next (a cross-entropy's per-row losses before their mean), or a data error
 * the kernels found. The launcher zeroes it before the group's first kernel. */
typedef struct f8_kernel_scratch {
	f8_dtype dtype;
	f8_dim count; // elements
} f8_kernel_scratch;

/* One cell of a table (below): the address of a value's storage, or a constant. */
typedef struct f8_kernel_table_cell {
	f8_value_id value; // the address of its storage (0 where it has no elements); F8_NONE:
			   // the constant
	int64_t constant;
} f8_kernel_table_cell;

/*
 * What the launcher writes into a table parameter (kir.h) before the launch: n_rows rows of
 * n_columns i64s, row by row, each cell a constant or the device address (the host's on the
 * CPU backend) of a value's storage. `columns` says how the kernel uses each column's
 * addresses: F8_KERNEL_PARAM_IN (loads through them), F8_KERNEL_PARAM_OUT (stores, and perhaps loads
 * after), or F8_KERNEL_PARAM_SIZE (no addresses: constants only). A cell of an IN or OUT column
 * may be a constant too (0: the row has no such buffer, and the kernel does not touch it).
 * The values a table names are bound as a buffer parameter's are: a launcher allocates them,
 * an OUT column's are the group's outputs.
 */
typedef struct f8_kernel_table {
	uint32_t n_rows, n_columns;
	f8_kernel_param_kind *columns;   // (n_columns)
	const char *const *names;     // (n_columns) static text: what each column holds
	f8_kernel_table_cell *cells;  // (n_rows * n_columns)
} f8_kernel_table;

/* What a kernel parameter is bound to: a buffer parameter to a value of the graph (its
 * storage) or to a scratch buffer of its group, a size parameter to a dim (evaluated with the
 * graph's symbols bound), a table parameter to a table of its group. */
typedef struct f8_kernel_arg {
	f8_value_id value;      // buffers bound to a value; F8_NONE otherwise (and for tables)
	uint32_t scratch;       // buffers bound to a scratch buffer: its index; F8_NONE otherwise
	f8_dim dim;             // sizes
	f8_kernel_table *table; // tables: what to fill it with, owned by the binding; else NULL
} f8_kernel_arg;

/* Frees `table` (NULL: nothing) with what it holds. */
void f8_kernel_table_destroy(f8_kernel_table *table);

/* Frees the tables of bindings args[0 .. n_params) (a launch's, one per parameter of its
 * kernel), leaving NULL there. Whoever frees a launch's bindings calls it first. */
void f8_kernel_args_free_tables(f8_kernel_arg *args, uint32_t n_params);

/* One launch: a kernel and its bindings. */
typedef struct f8_kernel_launch {
	f8_kernel *kernel;
	f8_kernel_arg *args; // (kernel->n_params)
} f8_kernel_launch;

/*
 * A group lowered: its kernels, launched in order (most groups have one; a cross-entropy
 * reduces its rows' losses in a second), and the scratch buffers they share. When `error` is
 * not NULL, scratch buffer `error_scratch` (one i64) holds 0 after the launches, or 1 + the
 * position of a data error the kernels found, which the runtime reports with `error` (a label
 * outside the vocabulary).
 */
typedef struct f8_lowered_group {
	f8_kernel_launch *launches; // (n_launches)
	uint32_t n_launches;
	f8_kernel_scratch *scratch; // (n_scratch)
	uint32_t n_scratch;
	const char *error;          // static text (a label or an id out of range), or NULL
	uint32_t error_scratch;
} f8_lowered_group;

/* True when codegen can lower `node` of `graph` into a group's kernel (the list above). */
bool f8_codegen_can_lower(const f8_graph *graph, f8_node_id node);

/*
 * Lowers group `group` of `graph` (types inferred, members contiguous) into *out: kernels
 * named after the group (k3, k3_reduce), owned by *out until f8_lowered_group_release. On
 * failure *out is empty and the diagnostic names the group and the node that could not be
 * lowered.
 */
f8_status f8_codegen_lower_group(const f8_graph *graph, uint32_t group, f8_lowered_group *out,
				 f8_diag *diag);

/* Frees what *group holds (kernels, bindings and their tables, scratch) and empties it; a
 * launch whose bindings were taken (args NULL) frees nothing of them. */
void f8_lowered_group_release(f8_lowered_group *group);

#endif
