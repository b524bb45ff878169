/*
 * What the lowering's files share (codegen/lower.c: the single-kernel groups, elementwise
 * chains, Gelu, norms and casts with a given scale; lower_multi.c: the groups that lower to
 * several kernels; lower_norm_grad.c, lower_swiglu.c, lower_embedding.c, lower_optimizer.c,
 * lower_casts.c, lower_layout.c, lower_reduce.c, lower_optimizer_scalars.c and the others
 * named below: the other ops; lower_members.c: the table by kernel family that picks among
 * them): the builder of one kernel of a group and its helpers. Not for use outside codegen/.
 */
#ifndef F8_CODEGEN_LOWER_INTERNAL_H
#define F8_CODEGEN_LOWER_INTERNAL_H

#include <stdbool.h> // bool
#include <stdint.h>  // uint32_t

#include "codegen/kir.h"   // f8_kernel, f8_kir_id
#include "codegen/lower.h" // f8_kernel_arg, f8_lowered_group
#include "ir/graph.h"      // f8_graph, f8_node_id, f8_value_id

/* A member's output made in a register of the current loop. */
typedef struct f8_lower_reg {
	f8_value_id value;
	f8_kir_id reg;
} f8_lower_reg;

/* An amax a cast records: combined per row (norm groups), per kernel, then atomically. */
typedef struct f8_lower_amax {
	f8_value_id value;
	uint32_t param;
	bool nan_to_inf;       // param is a guard's output (f8_lower_amax_guard): NaN combined as +inf
	f8_kir_id element;     // this element's |x|, set while the member is emitted
	f8_kir_id row_result;  // norm groups: the block loop's result
	f8_kir_id grid_result; // the grid loop's result
} f8_lower_amax;

enum { F8_LOWER_MAX_AMAX = 16 }; // the most casts with an amax in one kernel

/* A bias gradient (a ReduceSum member over the leading axes) whose sums leave the group: the
 * kernel stores its partial column sums into scratch buffer `scratch` through OUT parameter
 * `param`, and a second kernel adds them in order (f8_lower_sum_partials, below). */
typedef struct f8_lower_partial_sum {
	f8_value_id value;
	uint32_t scratch, param;
} f8_lower_partial_sum;

typedef struct f8_lower {
	const f8_graph *graph;
	uint32_t group;
	f8_kernel *kernel;
	f8_diag *diag;
	f8_node_id *members; // (n_members) in program order
	uint32_t n_members;
	f8_kernel_arg *args; // (kernel->n_params) the parameters' bindings
	bool norm;           // a norm group: rows with block loops
	f8_shape anchor;
	f8_kir_id dims[F8_MAX_RANK]; // the anchor's dims
	f8_kir_id rows, cols;        // product of the leading dims, the last dim
	f8_kir_id index, row, col;   // the current element
	f8_lower_reg *regs;
	uint32_t n_regs, regs_capacity;
	f8_lower_amax amax[F8_LOWER_MAX_AMAX];
	uint32_t n_amax;
	f8_kir_id scales[F8_LOWER_MAX_AMAX]; // per cast member, in member order: its scale (top level)
	uint32_t slot_params[F8_LOWER_MAX_AMAX]; // per cast member: the size parameter of its slot
	uint32_t n_slot_params;
	uint32_t n_scales, next_scale;
	f8_kir_id mask;       // the current element's mask (a tile at a tensor's edge), or NONE
	f8_lower_partial_sum partial_sums[F8_LOWER_MAX_AMAX];
	uint32_t n_partial_sums;
	f8_dim anchor_rows, anchor_cols; // the anchor as a (rows, cols) matrix, for the partials
	int64_t partial_rows;            // the rows one partial sums: a tile's 16, else 1
	struct f8_lower_tile *tile; // lower_tile.c's state while it builds a kernel, else NULL
} f8_lower;


/* Emits an instruction, or records that the builder failed (f8_kir_error says why). */
#define EMIT(lw, op, a, b, c) f8_kir_emit((lw)->kernel, F8_KIR_OP_##op, (a), (b), (c))
#define NONE F8_KIR_NONE


/* Fails the lowering of `node` with F8_ERR_UNSUPPORTED, naming the kernel and the node. */
f8_status f8_lower_fail(f8_lower *lw, f8_node_id node, const char *format, ...)
	__attribute__((format(printf, 3, 4)));

/* True when `value`, made by a member, is read outside the group, is a graph output or the
 * source of an update. */
bool f8_lower_escapes(const f8_lower *lw, f8_value_id value);

/* Parameters: a buffer bound to `value`; a size for `dim` (one per distinct dim; its index in
 * *index); the size parameter holding `dim`, or F8_NONE. Parameters are named by kind and
 * position (in0, out1, acc0, size2), so that identical layers lower to identical kernels. */
f8_status f8_lower_add_buffer(f8_lower *lw, f8_value_id value, f8_kernel_param_kind kind);
f8_status f8_lower_add_size(f8_lower *lw, f8_dim dim, uint32_t *index);
uint32_t f8_lower_size_param(const f8_lower *lw, f8_dim dim);
/* A size parameter for each symbolic dim of `shape` (a constant one is a constant of the code). */
f8_status f8_lower_add_symbolic_sizes(f8_lower *lw, const f8_shape *shape);
/* A buffer parameter bound to scratch buffer `scratch` of *out; its index into *index. */
f8_status f8_lower_add_scratch_param(f8_lower *lw, const f8_lowered_group *out, uint32_t scratch,
				     f8_kernel_param_kind kind, uint32_t *index);

/* An f32 constant; `v` as a value stored as `dtype` reads back (rounded for bf16). */
f8_kir_id f8_lower_constant(f8_lower *lw, double value);
f8_kir_id f8_lower_round_to(f8_lower *lw, f8_dtype dtype, f8_kir_id v);

/* Starts one kernel of group `group` named `name` (members shared, not owned); ends it: on
 * success (status F8_OK and a kernel that verifies) it becomes the next launch of *out, else
 * it is freed and the status returned. */
f8_status f8_lower_begin(f8_lower *lw, const f8_graph *graph, uint32_t group,
			 f8_node_id *members, uint32_t n_members, const char *name, f8_diag *diag);
f8_status f8_lower_end(f8_lower *lw, f8_status status, f8_lowered_group *out);

/* Adds a scratch buffer of `count` elements of `dtype` to *out; its index into *index. */
f8_status f8_lower_add_scratch(f8_lowered_group *out, f8_dtype dtype, f8_dim count,
			       uint32_t *index, f8_diag *diag);

/*
 * The tiled lowering (codegen/lower_tile.c). A group whose members include a CastTranspose or
 * a bias gradient (ReduceSum over the leading axes), over a matrix anchor, runs by 64x64
 * tiles: lower.c's members emitted per element of a tile, the values transposed or summed by
 * columns kept in shared arrays. A norm group's CastTransposes are left to a second kernel
 * that transposes the codes the first wrote.
 *   f8_lower_tile_fits: whether group `lw` (its parameters added) lowers by tiles;
 *   f8_lower_tile_begin: the state of a tiled group, or of a norm group's transposes, with
 *     the parameters they need besides add_params' (a norm's codes that leave the group
 *     nowhere go to a scratch buffer of *out);
 *   f8_lower_tiled: the grid loop of a tiled group;
 *   f8_lower_tile_cast, f8_lower_tile_sum: lower.c's emission of a CastTranspose (its input
 *     `x`, its scale) and of a ReduceSum (its input) at the current element of a tile, or of a
 *     norm's row;
 *   f8_lower_tile_transposes: after a norm group's kernel, its codes transposed (launches of
 *     *out);
 *   f8_lower_tile_release: frees the state (NULL after).
 */
struct f8_lower_tile;
enum {
	F8_LOWER_TILE = 64,          // a tile's rows and columns
	F8_LOWER_TILE_SUM_ROWS = 16, // the rows of a tile one partial of a bias gradient sums
};
bool f8_lower_tile_fits(const f8_lower *lw);
f8_status f8_lower_tile_begin(f8_lower *lw, f8_lowered_group *out);
f8_status f8_lower_tiled(f8_lower *lw);
f8_status f8_lower_tile_cast(f8_lower *lw, const f8_node *node, f8_kir_id x, f8_kir_id scale);
f8_status f8_lower_tile_sum(f8_lower *lw, const f8_node *node, f8_kir_id x);
f8_status f8_lower_tile_transposes(f8_lower *lw, f8_lowered_group *out);

/* A kernel of group `group` (`members`, n of them) named `name` that transposes FP8 codes of
 * shape `anchor`, viewed as a (rows, cols) matrix, by tiles: from value `codes`, or from
 * scratch buffer `scratch` of *out where that is not F8_NONE, into value `codes_t` (cols,
 * rows). What a norm group's CastTransposes and the current-scaling casts use. */
f8_status f8_lower_transpose_codes(const f8_graph *graph, uint32_t group, f8_node_id *members,
				   uint32_t n_members, const f8_shape *anchor, f8_value_id codes,
				   uint32_t scratch, f8_value_id codes_t, const char *name,
				   f8_lowered_group *out, f8_diag *diag);
void f8_lower_tile_release(f8_lower *lw);

/* The row form of elementwise groups (codegen/lower_tile.c): whether it fits (some input
 * broadcasts along rows or columns, or a bias gradient needs the column, and the rows are a
 * constant of at least 256 elements, the threads of a block); the grid loop over rows with a
 * block loop over each row, the row and column without a division per element. */
bool f8_lower_rows_fit(const f8_lower *lw);
f8_status f8_lower_rows(f8_lower *lw);

/* lower.c's member emission and loops, for lower_tile.c:
 *   emit_member: one member at the current element (lw->index, row, col, mask);
 *   begin_grid: the grid loop over `extent` with the amaxes' accumulators;
 *   row_accumulators: the amaxes' accumulators of the block loop just opened;
 *   begin_columns: a block loop over `extent` columns of row lw->row with them, lw->col and
 *     lw->index its column and element;
 *   end_loop: passes a failed `status` through, else ends the innermost loop with each amax's
 *     value per iteration: the element's, or (`row`) the block loop's result;
 *   record_grid_sizes: the grid loop's trip count for launchers, the anchor's dims, all
 *     (`with_last`) or the leading ones. */
f8_status f8_lower_emit_member(f8_lower *lw, f8_node_id id);
f8_status f8_lower_begin_grid(f8_lower *lw, f8_kir_id extent, f8_kir_id *var);
f8_status f8_lower_row_accumulators(f8_lower *lw);
f8_status f8_lower_begin_columns(f8_lower *lw, f8_kir_id extent);
f8_status f8_lower_end_loop(f8_lower *lw, bool row, f8_status status);
void f8_lower_record_grid_sizes(f8_lower *lw, bool with_last);

/* Whether `node` (a ReduceSum) sums every axis of its input but the last, named in order: a
 * bias gradient, which lower.c's kernels sum by columns (f8_lower_fused). */
bool f8_lower_sums_leading_axes(const f8_graph *graph, const f8_node *node);

/* The groups of lower.c's ops (elementwise chains, Gelu and GeluGrad, norms, casts with a
 * given scale, bias gradients), of whichever family: one kernel, or a norm's and the
 * transposes of its codes. */
f8_status f8_lower_fused(const f8_graph *graph, uint32_t group, f8_node_id *members,
			 uint32_t n_members, f8_lowered_group *out, f8_diag *diag);

/* The groups of codegen/lower_multi.c, each its first member's op. */
f8_status f8_lower_cross_entropy(const f8_graph *graph, uint32_t group, f8_node_id *members,
				 f8_lowered_group *out, f8_diag *diag);
f8_status f8_lower_cross_entropy_grad(const f8_graph *graph, uint32_t group,
				      f8_node_id *members, f8_lowered_group *out, f8_diag *diag);
f8_status f8_lower_scaling_update(const f8_graph *graph, uint32_t group, f8_node_id *members,
				  f8_lowered_group *out, f8_diag *diag);

/* The row families' shared helpers (codegen/lower_members.c). */

/* The buffer parameter bound to `value`, or F8_NONE. */
uint32_t f8_lower_find_param(const f8_lower *lw, f8_value_id value);
/* The OUT parameter of bias gradient `value`'s partial sums (lw->partial_sums), or F8_NONE. */
uint32_t f8_lower_partial_param(const f8_lower *lw, f8_value_id value);
/* An IN parameter for `value`, the one already bound to it if any; its index into *index. */
f8_status f8_lower_bind_input(f8_lower *lw, f8_value_id value, uint32_t *index);
/* A parameter of `kind` for member output `value` when it leaves the group (f8_lower_escapes),
 * its index into *index; F8_NONE there when it does not (or `value` is F8_NONE). */
f8_status f8_lower_bind_output(f8_lower *lw, f8_value_id value, f8_kernel_param_kind kind,
			       uint32_t *index);
bool f8_lower_is_cast(const f8_node *node);

/*
 * An amax's guard: a member NanToInf of an amax another member computes (a cast's or an
 * Amax's), which the shard pass puts before the amax's max over ranks and the fuse pass in the
 * amax's kernel (passes/fuse.c guards_amax). The kernel makes the guard's output, not the
 * amax: the same maximum of each element's |x| made +inf where it is NaN (a select an element,
 * in a kernel that reads memory), since NaN -> +inf of a max is the max of the NaN -> +inf of
 * its terms (a NaN tops every |x| as +inf does); Amax's store kernel makes the stored value's
 * NaN +inf. (Not the block's maximum before the atomic: the GPU has it only per block, and the
 * kernel IR takes nothing computed from it.) f8_lower_amax_guard: the member guarding `amax`,
 * or F8_NONE; f8_lower_is_amax_guard: whether member `node` is one; f8_lower_nan_to_inf: `v`
 * with a NaN made +inf.
 */
f8_node_id f8_lower_amax_guard(const f8_lower *lw, f8_value_id amax);
bool f8_lower_is_amax_guard(const f8_lower *lw, const f8_node *node);
f8_kir_id f8_lower_nan_to_inf(f8_lower *lw, f8_kir_id v);
/* The casts among members [first, n_members), in order, into casts[] (F8_LOWER_MAX_AMAX of
 * them at most) and *n, their amaxes' guards passed over; F8_ERR_UNSUPPORTED naming the member
 * for any other member or one cast too many, `what` saying what the kernel holds ("the norm's
 * gradient and its casts of dx"). */
f8_status f8_lower_cast_members(f8_lower *lw, uint32_t first, f8_node_id *casts, uint32_t *n,
				const char *what);

/*
 * A cast member (Quantize or CastTranspose with a given per-tensor scale: a scalar, or `slot`
 * of a table) of a kernel that computes the value it casts. Its parameters: the scale (IN),
 * the codes and the transposed codes (OUT), the scale_invs (OUT), the amax (ACCUMULATE), each
 * F8_NONE where the output does not leave the group (the amax's guard's output in its place where
 * a member guards it). While the kernel is built: the scale
 * (loaded at the top level), the amax's accumulators' results (a block loop's per row, the
 * grid loop's), and the current iteration's |x| (the max over the values it stored).
 */
typedef struct f8_lower_cast {
	const f8_node *node;
	uint32_t scale, slot; // the slot: a size parameter (f8_lower_cast_slot)
	uint32_t codes, codes_t, scale_inv, scale_inv_t, amax;
	bool amax_nan_to_inf; // amax is its guard's output (f8_lower_amax_guard)
	f8_kir_id scale_value;
	f8_kir_id row_amax, grid_amax;
	f8_kir_id element_amax; // NONE at the start of each iteration
} f8_lower_cast;

/* Binds the cast's scale (first, with the kernel's other inputs) and its outputs (after them). */
f8_status f8_lower_cast_inputs(f8_lower *lw, f8_lower_cast *cast, const f8_node *node);
f8_status f8_lower_cast_outputs(f8_lower *lw, f8_lower_cast *cast);
/* After the kernel's other sizes: the slot's size parameter. At the top level: the scale. */
f8_status f8_lower_cast_slot(f8_lower *lw, f8_lower_cast *cast);
void f8_lower_cast_load_scale(f8_lower *lw, f8_lower_cast *cast);
/* A max accumulator for the amax in the open loop: the block loop's (`row`) or the grid's. */
f8_status f8_lower_cast_add_accumulator(f8_lower *lw, f8_lower_cast *cast, bool row);
/* Stores x * scale (converted to the codes' dtype on store) at `index` and, for a
 * CastTranspose, at `index_t`; folds |x| into cast->element_amax. */
f8_status f8_lower_cast_store(f8_lower *lw, f8_lower_cast *cast, f8_kir_id x, f8_kir_id index,
			      f8_kir_id index_t);
/* After the grid loop: the amax combined into its buffer, the scale_invs stored. */
f8_status f8_lower_cast_epilogue(f8_lower *lw, f8_lower_cast *cast);

/* A kernel of its own (the group's next launch, named NAME_roundN) that stores the `count` f32
 * sums of scratch buffer `sums` into member output `value` (bf16 or f16), rounding each once:
 * for sums that f32 atomics combined into a scratch because `value` is of another dtype. */
f8_status f8_lower_round_sums(const f8_graph *graph, uint32_t group, f8_node_id *members,
			      uint32_t sums, f8_value_id value, f8_dim count, f8_lowered_group *out,
			      f8_diag *diag);

/*
 * Column sums in an order the shapes fix (no float atomics, whose order on a GPU is the blocks'
 * schedule, so that a kernel's outputs are the same bits on every run): a kernel whose grid
 * iterations each sum a group of rows stores each group's sums per column into partials
 * [n_partials, cols] of an f32 scratch buffer (each element written once, in its place), and a
 * second kernel adds the partials of each column in index order, as TransformerEngine's
 * LayerNorm backward does with its workspace. The extra traffic is the partials' write and
 * read: n_partials x cols f32 twice, as many 4-byte accesses as the atomics they replace
 * (rows / rows_per_partial per column), mostly in L2.
 *   f8_lower_partials_count: the scratch's elements, cols times the partials of
 *     ceil(rows / group_rows) groups of group_partials each (group_partials <= group_rows);
 *     symbolic rows: (rows + group_partials - 1) cols, a bound; false on overflow;
 *   f8_lower_sum_partials: the kernel of its own (the group's next launch, NAME_sumN) that,
 *     for i < n, stores into member output values[i] (F8_NONE: none; any float dtype, rounded
 *     once) the sum over p < ceil(rows / rows_per_partial), in order of p, of
 *     partials[i][p * cols + c], for each column c: a grid iteration per column, the partials
 *     by a block loop whose accumulator the GPU combines in a fixed order (strided reads of
 *     one column: not coalesced, but n_partials x cols is small beside the rows). At most
 *     F8_LOWER_MAX_AMAX sums, all of the same rows and cols.
 */
bool f8_lower_partials_count(f8_dim rows, int64_t group_rows, int64_t group_partials,
			     f8_dim cols, f8_dim *count);
f8_status f8_lower_sum_partials(const f8_graph *graph, uint32_t group, f8_node_id *members,
				const uint32_t *partials, const f8_value_id *values, uint32_t n,
				f8_dim rows, int64_t rows_per_partial, f8_dim cols,
				f8_lowered_group *out, f8_diag *diag);

/* A table of n_rows rows of n_columns cells (codegen/lower.h), columns[c] each column's kind
 * and names its static names, every cell F8_NONE and 0 until the caller fills it; NULL when
 * memory runs out. A table parameter (named table0, table1, ...) bound to `table`, which the
 * binding owns once the kernel becomes a launch (f8_lower_end; on its failure the caller still
 * owns it); its index into *index. */
f8_kernel_table *f8_lower_table_create(uint32_t n_rows, uint32_t n_columns,
				       const f8_kernel_param_kind *columns, const char *const *names);
f8_status f8_lower_add_table_param(f8_lower *lw, f8_kernel_table *table, uint32_t *index);

/* The ops of the other lowering files: whether a node lowers (f8_codegen_can_lower asks for
 * the ops each file owns), and the group lowered, given its members in program order (the
 * group's family picks the file, f8_lower_family_group). */
bool f8_lower_norm_grad_lowers(const f8_graph *graph, const f8_node *node);
bool f8_lower_swiglu_lowers(const f8_graph *graph, const f8_node *node);
bool f8_lower_embedding_lowers(const f8_graph *graph, const f8_node *node);
bool f8_lower_optimizer_lowers(const f8_graph *graph, const f8_node *node);
bool f8_lower_cast_recipe_owns(const f8_node *node);
bool f8_lower_cast_recipe_lowers(const f8_graph *graph, const f8_node *node);
f8_status f8_lower_cast_recipe(const f8_graph *graph, uint32_t group, f8_node_id *members,
			       uint32_t n_members, f8_lowered_group *out, f8_diag *diag);
f8_status f8_lower_optimizer(const f8_graph *graph, uint32_t group, f8_node_id *members,
			     uint32_t n_members, f8_lowered_group *out, f8_diag *diag);
f8_status f8_lower_embedding(const f8_graph *graph, uint32_t group, f8_node_id *members,
			     uint32_t n_members, f8_lowered_group *out, f8_diag *diag);
f8_status f8_lower_swiglu(const f8_graph *graph, uint32_t group, f8_node_id *members,
			  uint32_t n_members, f8_lowered_group *out, f8_diag *diag);

/* codegen/lower_layout.c: the element moves (Reshape, Squeeze, Unsqueeze, Expand, Transpose,
 * Slice, SliceGrad, Concat, Split, Trilu: the layout family) and the fills (Constant, ConstantOfShape
 * that no optimizer kernel takes: the fill family). codegen/lower_reduce.c: ReduceSum,
 * ReduceMean and ReduceMax over any axes (the reduce family). codegen/lower_optimizer_scalars.c:
 * GlobalNorm and LearningRate (their families of one node each). */
bool f8_lower_layout_lowers(const f8_graph *graph, const f8_node *node);
bool f8_lower_fill_lowers(const f8_graph *graph, const f8_node *node);
bool f8_lower_reduce_lowers(const f8_graph *graph, const f8_node *node);
bool f8_lower_optimizer_scalar_lowers(const f8_graph *graph, const f8_node *node);
f8_status f8_lower_layout(const f8_graph *graph, uint32_t group, f8_node_id *members,
			  uint32_t n_members, f8_lowered_group *out, f8_diag *diag);
f8_status f8_lower_fill(const f8_graph *graph, uint32_t group, f8_node_id *members,
			uint32_t n_members, f8_lowered_group *out, f8_diag *diag);
f8_status f8_lower_reduce(const f8_graph *graph, uint32_t group, f8_node_id *members,
			  uint32_t n_members, f8_lowered_group *out, f8_diag *diag);
f8_status f8_lower_global_norm(const f8_graph *graph, uint32_t group, f8_node_id *members,
			       uint32_t n_members, f8_lowered_group *out, f8_diag *diag);
f8_status f8_lower_learning_rate(const f8_graph *graph, uint32_t group, f8_node_id *members,
				 uint32_t n_members, f8_lowered_group *out, f8_diag *diag);

/* codegen/lower_amax.c: Amax alone (the reduce family: the chunks' maxima by an atomic max
 * into a scratch, then stored) and ScaleFromAmax (the scaling family, a grid iteration per
 * amax); f8_lower_scale_from_amax: f8_scale_from_amax(format, amax, margin, 1) of an f32
 * amax, bit for bit, for margins within [-127, 149] (f8_lower_amax_lowers holds a
 * ScaleFromAmax's there), also the current-scaling casts' (lower_casts.c). */
bool f8_lower_amax_lowers(const f8_graph *graph, const f8_node *node);
f8_status f8_lower_amax_group(const f8_graph *graph, uint32_t group, f8_node_id *members,
			      uint32_t n_members, f8_lowered_group *out, f8_diag *diag);
f8_status f8_lower_scale_from_amax_group(const f8_graph *graph, uint32_t group,
					 f8_node_id *members, uint32_t n_members,
					 f8_lowered_group *out, f8_diag *diag);
f8_kir_id f8_lower_scale_from_amax(f8_lower *lw, f8_dtype format, int margin, f8_kir_id amax);

/* codegen/lower_cross_entropy_shard.c: the vocabulary-parallel cross-entropy's four ops
 * (CrossEntropyShard, CrossEntropyMerge and their gradients), each a cross_entropy kernel of
 * its own. */
bool f8_lower_cross_entropy_shard_lowers(const f8_graph *graph, const f8_node *node);
f8_status f8_lower_cross_entropy_shard(const f8_graph *graph, uint32_t group, f8_node_id *members,
				       uint32_t n_members, f8_lowered_group *out, f8_diag *diag);

/* codegen/lower_softmax.c: Softmax and SoftmaxGrad over the last axis (the softmax family, a
 * kernel each). */
bool f8_lower_softmax_lowers(const f8_graph *graph, const f8_node *node);
f8_status f8_lower_softmax(const f8_graph *graph, uint32_t group, f8_node_id *members,
			   uint32_t n_members, f8_lowered_group *out, f8_diag *diag);

/* codegen/lower_moe.c: Router, MoEDispatch, MoECombine and their gradients (the moe family, a
 * group each). */
bool f8_lower_moe_lowers(const f8_graph *graph, const f8_node *node);
f8_status f8_lower_moe(const f8_graph *graph, uint32_t group, f8_node_id *members,
		       uint32_t n_members, f8_lowered_group *out, f8_diag *diag);

/* codegen/lower_rope.c: Rope and RopeGrad (the rope family, a kernel each). */
bool f8_lower_rope_lowers(const f8_graph *graph, const f8_node *node);
f8_status f8_lower_rope(const f8_graph *graph, uint32_t group, f8_node_id *members,
			uint32_t n_members, f8_lowered_group *out, f8_diag *diag);

/*
 * lower.c's questions to the other files (codegen/lower_members.c), so that a new family
 * touches lower.c nowhere:
 *   f8_lower_file_owns: whether a file other than lower.c and lower_multi.c owns `node`'s op
 *     and, when one does, whether the node lowers (*lowers); asked per node, before the fuse
 *     pass has grouped it, so by op;
 *   f8_lower_family_group: group `group` lowered by its family (graph->groups[group].family),
 *     through one table by f8_kernel_family generated from ir/graph.h's F8_KERNEL_FAMILY_LIST;
 *     F8_ERR_INVALID naming the kernel when its first member is of no op that starts a kernel
 *     of that family (the fuse pass's seeds: a text IR may declare any family).
 */
bool f8_lower_file_owns(const f8_graph *graph, const f8_node *node, bool *lowers);
f8_status f8_lower_family_group(const f8_graph *graph, uint32_t group, f8_node_id *members,
				uint32_t n_members, f8_lowered_group *out, f8_diag *diag);
f8_status f8_lower_norm_grad(const f8_graph *graph, uint32_t group, f8_node_id *members,
			     uint32_t n_members, f8_lowered_group *out, f8_diag *diag);

#endif
