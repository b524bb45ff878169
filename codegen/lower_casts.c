/*
 * Casts under the recipes that find their scales from the data (codegen/lower.h), each a lone
 * cast group of two kernels: the first finds the amaxes the scales come from, the second casts
 * (runtime/cpu/kernels_fp8.c and ir/fp8.c define the semantics; the codes, scale_invs and amax
 * are bit-exact with them, the values being read from memory):
 *
 *   current   one scale for the tensor: the amax into a scratch, then scale =
 *             f8_scale_from_amax(format, amax, margin, 1) and the codes; codes^T from the
 *             codes by a third kernel of 64x64 tiles (lower_tile.c), so that every store is
 *             along rows (storing each code^T a byte at a time, a sector apart, made the
 *             cast about 12x slower than reading x twice on an H200).
 *   rowwise   block [1, 0]: a scale per row of x; x^T's copy has its own, a scale per column
 *   1x128     of x. block [1, W]: a scale per W columns of a row; x^T's per W rows of a column.
 *   MX 1x32   block [1, 32] with E8M0 scales: 2^(floor(log2 amax) - emax), the codes x / it.
 *   128x128   block [B, B]: a scale per B x B block, shared by x^T's copy (codes^T is the codes
 *             transposed, scale_inv^T the grid transposed).
 *
 * Where a row's block scales come from its own elements (row blocks), the cast kernel finds
 * them itself: a grid iteration per (row, block), a block loop for the block's amax and one for
 * its codes. What crosses rows (a column's amax for x^T's copy, a square block's, the tensor's)
 * the first kernel combines into a scratch with atomic maxes: per chunk of CHUNK_ROWS rows
 * (each thread's max over the chunk's rows, one atomic per column or per block), so that the
 * reads stay along the rows. Every scale is computed from its amax where it is used, the same
 * arithmetic everywhere, so the copies agree. Blocks of rows must hold whole chunks (W or B a
 * multiple of CHUNK_ROWS); edge blocks may be partial.
 */
#include "codegen/lower_internal.h" // f8_lower, f8_lower_*

#include <stdio.h>  // snprintf

#include "ir/fp8.h" // f8_float_layout_of
#include "ir/ops.h" // f8_node_attr_*

enum { CHUNK_ROWS = 8 }; // rows per grid iteration where a kernel combines across rows

typedef enum granularity { PER_TENSOR, ROW_BLOCKS, SQUARE_BLOCKS } granularity;

/* How a cast node casts, from its attributes and types. */
typedef struct recipe {
	const f8_node *node;
	granularity kind;
	int64_t width;         // ROW_BLOCKS: a block's columns, 0 for the whole row; SQUARE: B
	bool mx, transpose;
	f8_dtype format;
	int margin;
	f8_dim rows, cols;     // x as a (rows, cols) matrix
	f8_value_id codes, codes_t, scale_inv, scale_inv_t, amax; // F8_NONE where absent
	// Per tensor with codes^T: the cast writes the codes row-major (into scratch
	// `codes_scratch` where they leave the group nowhere) and a kernel of tiles transposes
	// them, rather than storing each code^T a byte a sector apart.
	bool transpose_by_tiles;
	uint32_t codes_scratch;
} recipe;

static bool is_float(f8_dtype dtype) {
	return dtype == F8_DTYPE_F32 || dtype == F8_DTYPE_BF16 || dtype == F8_DTYPE_F16;
}

/* The recipe of cast `node`; false when no kernel here casts it. */
static bool recipe_of(const f8_graph *graph, const f8_node *node, recipe *r) {
	const f8_type *x = &graph->values[node->inputs[0]].type;
	const f8_attr *block = f8_node_attr(node, "block");
	bool transpose = node->op == F8_OP_CAST_TRANSPOSE;
	f8_value_id at[5] = {F8_NONE, F8_NONE, F8_NONE, F8_NONE, F8_NONE};
	for (uint32_t o = 0; o < node->n_outputs && o < 5; o++)
		at[o] = node->outputs[o];
	*r = (recipe){.node = node, .transpose = transpose,
		      .format = graph->values[node->outputs[0]].type.dtype,
		      .margin = (int)f8_node_attr_int(node, "margin", 0), .codes = at[0],
		      .codes_t = transpose ? at[1] : F8_NONE, .scale_inv = transpose ? at[2] : at[1],
		      .scale_inv_t = transpose ? at[3] : F8_NONE, .amax = transpose ? at[4] : at[2],
		      .codes_scratch = F8_NONE};
	r->mx = block && r->scale_inv != F8_NONE &&
		graph->values[r->scale_inv].type.dtype == F8_DTYPE_E8M0;
	if (x->shape.rank < 1 || !is_float(x->dtype))
		return false;
	r->cols = x->shape.dims[x->shape.rank - 1];
	r->rows = f8_dim_const(1);
	for (int d = 0; d + 1 < x->shape.rank; d++)
		if (!f8_dim_mul(r->rows, x->shape.dims[d], &r->rows))
			return false;
	if (!block) {
		r->kind = PER_TENSOR;
		return true;
	}
	if (block->ints.n != 2)
		return false;
	int64_t block_rows = block->ints.items[0], block_cols = block->ints.items[1];
	if (block_rows == 1 && (block_cols == 0 || block_cols % CHUNK_ROWS == 0)) {
		r->kind = ROW_BLOCKS; // x^T's blocks are W rows of a column: whole chunks
		r->width = block_cols;
		return true;
	}
	r->kind = SQUARE_BLOCKS;
	r->width = block_rows;
	return !r->mx && block_rows == block_cols && block_rows > 0 && block_rows % CHUNK_ROWS == 0;
}

/* A Quantize or CastTranspose with no scale input, saturating, in a recipe above. */
bool f8_lower_cast_recipe_lowers(const f8_graph *graph, const f8_node *node) {
	recipe r;
	return f8_node_attr_int(node, "saturate", 1) && recipe_of(graph, node, &r) &&
	       (r.format == F8_DTYPE_E4M3 || r.format == F8_DTYPE_E5M2) &&
	       (r.mx || r.kind == PER_TENSOR || r.scale_inv == F8_NONE ||
		graph->values[r.scale_inv].type.dtype == F8_DTYPE_F32);
}

/* The casts this file owns: those with no scale input. */
bool f8_lower_cast_recipe_owns(const f8_node *node) {
	return (node->op == F8_OP_QUANTIZE || node->op == F8_OP_CAST_TRANSPOSE) &&
	       (node->n_inputs < 2 || node->inputs[1] == F8_NONE);
}

/* One kernel of the group: its builder, the recipe, x's parameter and the matrix's sizes. */
typedef struct kernel {
	f8_lower lw;
	const recipe *r;
	uint32_t x, p_rows, p_cols;
	f8_kir_id rows, cols;
} kernel;

static f8_kir_id i64(kernel *k, int64_t value) {
	return f8_kir_const_i64(k->lw.kernel, value);
}

static f8_kir_id f32(kernel *k, double value) {
	return f8_lower_constant(&k->lw, value);
}

static f8_status begin(kernel *k, const recipe *r, const f8_graph *graph, uint32_t group,
		       f8_node_id *members, const char *suffix, f8_diag *diag) {
	char name[80];
	snprintf(name, sizeof name, "%s%s", graph->groups[group].name, suffix);
	*k = (kernel){.r = r};
	f8_status status = f8_lower_begin(&k->lw, graph, group, members, 1, name, diag);
	return status ? status : f8_lower_bind_input(&k->lw, r->node->inputs[0], &k->x);
}

/* After the buffers: the sizes rows and cols, and their values at the top level. */
static f8_status sizes(kernel *k) {
	f8_status status = f8_lower_add_size(&k->lw, k->r->rows, &k->p_rows);
	if (!status)
		status = f8_lower_add_size(&k->lw, k->r->cols, &k->p_cols);
	if (!status) { // the launcher's grid: a row per iteration or more (a bound is enough)
		k->lw.kernel->grid_sizes[0] = k->p_rows;
		k->lw.kernel->n_grid_sizes = 1;
		k->rows = f8_kir_size(k->lw.kernel, k->p_rows);
		k->cols = f8_kir_size(k->lw.kernel, k->p_cols);
	}
	return status;
}

static f8_kir_id x_at(kernel *k, f8_kir_id row, f8_kir_id col) {
	f8_lower *lw = &k->lw;
	return f8_kir_load(lw->kernel, k->x, EMIT(lw, ADD, EMIT(lw, MUL, row, k->cols, NONE), col, NONE));
}

static f8_kir_id ceil_div(kernel *k, f8_kir_id a, f8_kir_id b) {
	f8_lower *lw = &k->lw;
	return EMIT(lw, DIV, EMIT(lw, ADD, a, EMIT(lw, SUB, b, i64(k, 1), NONE), NONE), b, NONE);
}

/* 2^e as f32, exactly, for an i64 e in E8M0's range, [-127, 127] (2^-127 is an f32
 * subnormal): built from f32's bits (bias 127, 23 mantissa bits). */
static f8_kir_id power_of_two(kernel *k, f8_kir_id e) {
	f8_lower *lw = &k->lw;
	f8_kir_id normal = EMIT(lw, FROM_BITS, EMIT(lw, SHL, EMIT(lw, ADD, e, i64(k, 127), NONE),
						      i64(k, 23), NONE), NONE, NONE);
	f8_kir_id subnormal = EMIT(lw, FROM_BITS, i64(k, 0x00400000), NONE, NONE);
	return EMIT(lw, SELECT, EMIT(lw, LE, i64(k, -126), e, NONE), normal, subnormal);
}

/*
 * The multiplier that casts a block of amax `amax`, and into *stored what its scale_inv holds:
 * f8_scale_from_amax(format, amax, margin, 1) and 1 / it; MX: 2^-shared_exp and 2^shared_exp
 * (shared_exp = floor(log2 amax) - emax clamped to E8M0's range, [-127, 127]; its top for an
 * infinite amax; NaN for a NaN amax, which makes every code of the block NaN, as
 * f8_quantize_mx). emax and the range are the layouts' (ir/fp8.h), as f8_quantize_mx reads them.
 */
static f8_kir_id multiplier(kernel *k, f8_kir_id amax, f8_kir_id *stored) {
	f8_lower *lw = &k->lw;
	if (!k->r->mx) {
		f8_kir_id scale = f8_lower_scale_from_amax(lw, k->r->format, k->r->margin, amax);
		*stored = EMIT(lw, DIV, f32(k, 1), scale, NONE);
		return scale;
	}
	int emax = f8_float_layout_of(k->r->format).max_exponent;
	f8_float_layout scale = f8_float_layout_of(F8_DTYPE_E8M0);
	// The amax's f32 exponent field (bias 127): 255 for inf and NaN; 0 for a subnormal,
	// which the clamp takes to the bottom of the range.
	f8_kir_id field = EMIT(lw, REM, EMIT(lw, SHR, EMIT(lw, BITS, amax, NONE, NONE), i64(k, 23), NONE),
			       i64(k, 256), NONE);
	f8_kir_id shared = EMIT(lw, SUB, field, i64(k, 127 + emax), NONE);
	shared = EMIT(lw, MAX, EMIT(lw, MIN, shared, i64(k, scale.max_exponent), NONE),
		      i64(k, scale.min_exponent), NONE);
	shared = EMIT(lw, SELECT, EMIT(lw, EQ, field, i64(k, 255), NONE),
		      i64(k, scale.max_exponent), shared);
	*stored = power_of_two(k, shared);
	f8_kir_id inverse = power_of_two(k, EMIT(lw, NEG, shared, NONE, NONE));
	f8_kir_id nan = EMIT(lw, IS_NAN, amax, NONE, NONE);
	*stored = EMIT(lw, SELECT, nan, amax, *stored);
	return EMIT(lw, SELECT, nan, amax, inverse);
}

static f8_status store(kernel *k, uint32_t param, f8_kir_id index, f8_kir_id value) {
	if (param == F8_NONE)
		return F8_OK;
	return f8_kir_store(k->lw.kernel, param, index, value, k->lw.diag);
}

/* Ends the open loops (block then grid, ...), each with the accumulator values given: `n`
 * loops, values[i] for loop i from the innermost (NONE: no accumulator). */
static f8_status end_loops(kernel *k, const f8_kir_id *values, int n) {
	f8_status status = F8_OK;
	for (int i = 0; !status && i < n; i++)
		status = f8_kir_end_loop(k->lw.kernel, &values[i], values[i] == NONE ? 0 : 1, k->lw.diag);
	return status;
}

/* A block loop over `extent` with, `max`, one max accumulator of f32 into *result. */
static f8_status block_loop(kernel *k, f8_kir_id extent, bool max, f8_kir_id *var,
			    f8_kir_id *result) {
	f8_status status = f8_kir_begin_block_loop(k->lw.kernel, extent, var, k->lw.diag);
	if (!status && max)
		status = f8_kir_add_accumulator(k->lw.kernel, F8_KIR_COMBINE_MAX, F8_KIR_TYPE_F32,
						result, k->lw.diag);
	return status;
}

static f8_status grid_loop(kernel *k, f8_kir_id extent, bool max, f8_kir_id *var,
			   f8_kir_id *result) {
	f8_status status = f8_kir_begin_grid_loop(k->lw.kernel, extent, var, k->lw.diag);
	if (!status && max)
		status = f8_kir_add_accumulator(k->lw.kernel, F8_KIR_COMBINE_MAX, F8_KIR_TYPE_F32,
						result, k->lw.diag);
	return status;
}

/* Per tensor, kernel 1: the amax of x into scratch `found` (and the grid's trip count: rows). */
static f8_status tensor_amax(kernel *k, f8_lowered_group *out, uint32_t found) {
	f8_lower *lw = &k->lw;
	uint32_t into;
	f8_status status = f8_lower_add_scratch_param(lw, out, found, F8_KERNEL_PARAM_ACCUMULATE, &into);
	if (!status)
		status = sizes(k);
	f8_kir_id r, c, row_max, grid_max;
	if (!status)
		status = grid_loop(k, k->rows, true, &r, &grid_max);
	if (!status)
		status = block_loop(k, k->cols, true, &c, &row_max);
	if (status)
		return status;
	f8_kir_id values[2] = {EMIT(lw, ABS, x_at(k, r, c), NONE, NONE), row_max};
	status = end_loops(k, values, 2);
	return status ? status : f8_kir_atomic(lw->kernel, F8_KIR_COMBINE_MAX, into, i64(k, 0),
					       grid_max, lw->diag);
}

/* The cast kernels' outputs: codes, codes^T, scale_inv, scale_inv^T (OUT), the amax (OUT per
 * tensor, where it is copied from the scratch; else ACCUMULATE). */
typedef struct outputs {
	uint32_t codes, codes_t, scale_inv, scale_inv_t, amax;
} outputs;

static f8_status bind_outputs(kernel *k, outputs *o) {
	f8_lower *lw = &k->lw;
	const recipe *r = k->r;
	f8_kernel_param_kind amax_kind = r->kind == PER_TENSOR ? F8_KERNEL_PARAM_OUT
							    : F8_KERNEL_PARAM_ACCUMULATE;
	f8_status status = f8_lower_bind_output(lw, r->codes, F8_KERNEL_PARAM_OUT, &o->codes);
	o->codes_t = F8_NONE; // a kernel of tiles makes codes^T where transpose_by_tiles
	if (!status && !r->transpose_by_tiles)
		status = f8_lower_bind_output(lw, r->codes_t, F8_KERNEL_PARAM_OUT, &o->codes_t);
	if (!status)
		status = f8_lower_bind_output(lw, r->scale_inv, F8_KERNEL_PARAM_OUT, &o->scale_inv);
	if (!status)
		status = f8_lower_bind_output(lw, r->scale_inv_t, F8_KERNEL_PARAM_OUT, &o->scale_inv_t);
	o->amax = F8_NONE;
	if (!status && r->kind != SQUARE_BLOCKS) // square blocks: kernel 1 finds it
		status = f8_lower_bind_output(lw, r->amax, amax_kind, &o->amax);
	return status;
}

/* A cast kernel's parameters: kernel 1's amaxes (scratch `found`, into *amax_in; none where
 * `found` is F8_NONE), the outputs, the sizes. */
static f8_status cast_params(kernel *k, f8_lowered_group *out, uint32_t found, uint32_t *amax_in,
			     outputs *o) {
	*amax_in = F8_NONE;
	f8_status status = F8_OK;
	if (found != F8_NONE)
		status = f8_lower_add_scratch_param(&k->lw, out, found, F8_KERNEL_PARAM_IN, amax_in);
	if (!status)
		status = bind_outputs(k, o);
	return status ? status : sizes(k);
}

/* Per tensor, kernel 2: the scale from the amax, the codes (and codes^T, unless a kernel of
 * tiles transposes the codes after it) of every element. */
static f8_status tensor_cast(kernel *k, f8_lowered_group *out, uint32_t found) {
	f8_lower *lw = &k->lw;
	uint32_t amax_in;
	outputs o;
	f8_status status = cast_params(k, out, found, &amax_in, &o);
	if (status)
		return status;
	f8_kir_id zero = i64(k, 0), inverse, r, c;
	f8_kir_id amax = f8_kir_load(lw->kernel, amax_in, zero);
	f8_kir_id scale = multiplier(k, amax, &inverse);
	status = store(k, o.scale_inv, zero, inverse);
	if (!status)
		status = store(k, o.scale_inv_t, zero, inverse);
	if (!status)
		status = store(k, o.amax, zero, amax);
	if (!status)
		status = grid_loop(k, k->rows, false, &r, NULL);
	if (!status)
		status = block_loop(k, k->cols, false, &c, NULL);
	if (status)
		return status;
	f8_kir_id scaled = EMIT(lw, MUL, x_at(k, r, c), scale, NONE);
	uint32_t codes = o.codes;
	if (k->r->transpose_by_tiles && k->r->codes_scratch != F8_NONE)
		status = f8_lower_add_scratch_param(lw, out, k->r->codes_scratch, F8_KERNEL_PARAM_OUT,
						    &codes);
	if (!status)
		status = store(k, codes, EMIT(lw, ADD, EMIT(lw, MUL, r, k->cols, NONE), c, NONE),
			       scaled);
	if (!status && !k->r->transpose_by_tiles)
		status = store(k, o.codes_t, EMIT(lw, ADD, EMIT(lw, MUL, c, k->rows, NONE), r, NONE),
			       scaled);
	const f8_kir_id none[2] = {NONE, NONE};
	return status ? status : end_loops(k, none, 2);
}

/* The chunk's rows (CHUNK_ROWS from `first`, the last row repeated past the end: its |x| again,
 * which changes no max). */
static void chunk_rows(kernel *k, f8_kir_id first, f8_kir_id *rows) {
	f8_lower *lw = &k->lw;
	f8_kir_id last = EMIT(lw, SUB, k->rows, i64(k, 1), NONE);
	for (int j = 0; j < CHUNK_ROWS; j++)
		rows[j] = EMIT(lw, MIN, EMIT(lw, ADD, first, i64(k, j), NONE), last, NONE);
}

/* max |x| over the chunk's rows at column c. */
static f8_kir_id chunk_max(kernel *k, const f8_kir_id *rows, f8_kir_id c) {
	f8_lower *lw = &k->lw;
	f8_kir_id m = NONE;
	for (int j = 0; j < CHUNK_ROWS; j++) {
		f8_kir_id a = EMIT(lw, ABS, x_at(k, rows[j], c), NONE, NONE);
		m = m == NONE ? a : EMIT(lw, MAX, m, a, NONE);
	}
	return m;
}

/* The rows of a block of x^T's copy under row blocks: W, or all of them (rowwise). */
static f8_kir_id rows_per_block(kernel *k) {
	return k->r->width ? i64(k, k->r->width) : k->rows;
}

/* Row blocks, kernel 1 (CastTranspose only): each column's amax over each block of rows into
 * scratch `found` [blocks of rows, cols], one atomic per column per chunk. */
static f8_status column_amax(kernel *k, f8_lowered_group *out, uint32_t found) {
	f8_lower *lw = &k->lw;
	uint32_t into;
	f8_status status = f8_lower_add_scratch_param(lw, out, found, F8_KERNEL_PARAM_ACCUMULATE, &into);
	if (!status)
		status = sizes(k);
	f8_kir_id chunk, c, rows[CHUNK_ROWS];
	if (!status)
		status = grid_loop(k, ceil_div(k, k->rows, i64(k, CHUNK_ROWS)), false, &chunk, NULL);
	if (status)
		return status;
	f8_kir_id first = EMIT(lw, MUL, chunk, i64(k, CHUNK_ROWS), NONE);
	f8_kir_id block = EMIT(lw, DIV, first, rows_per_block(k), NONE);
	chunk_rows(k, first, rows);
	if ((status = block_loop(k, k->cols, false, &c, NULL)))
		return status;
	status = f8_kir_atomic(lw->kernel, F8_KIR_COMBINE_MAX, into,
			       EMIT(lw, ADD, EMIT(lw, MUL, block, k->cols, NONE), c, NONE),
			       chunk_max(k, rows, c), lw->diag);
	const f8_kir_id none[2] = {NONE, NONE};
	return status ? status : end_loops(k, none, 2);
}

/* Row blocks: in the first row of a block of rows (a block loop of no iteration in the
 * others), the scale_invs of x^T's copy for the columns first .. first + length. */
static f8_status transposed_scale_invs(kernel *k, uint32_t scale_inv_t, uint32_t column_amax,
				       f8_kir_id row, f8_kir_id first, f8_kir_id length) {
	f8_lower *lw = &k->lw;
	f8_kir_id row_block = EMIT(lw, DIV, row, rows_per_block(k), NONE), j, inverse;
	f8_kir_id row_blocks = ceil_div(k, k->rows, rows_per_block(k));
	f8_kir_id leads = EMIT(lw, EQ, EMIT(lw, REM, row, rows_per_block(k), NONE), i64(k, 0), NONE);
	f8_status status = block_loop(k, EMIT(lw, SELECT, leads, length, i64(k, 0)), false, &j, NULL);
	if (status)
		return status;
	f8_kir_id c = EMIT(lw, ADD, first, j, NONE);
	f8_kir_id at = EMIT(lw, ADD, EMIT(lw, MUL, row_block, k->cols, NONE), c, NONE);
	multiplier(k, f8_kir_load(lw->kernel, column_amax, at), &inverse);
	status = store(k, scale_inv_t, EMIT(lw, ADD, EMIT(lw, MUL, c, row_blocks, NONE), row_block, NONE),
		       inverse);
	return status ? status : end_loops(k, (const f8_kir_id[]){NONE}, 1);
}

/*
 * Row blocks, kernel 2: a grid iteration per (row, block of W columns): the block's amax, its
 * scale_inv, its codes; with CastTranspose, the same elements' codes in x^T's copy at the scale
 * of their column's block of rows (kernel 1's amaxes), and, in the first row of a block of
 * rows, that block's scale_invs of x^T's copy. The amax of x is the max of the blocks'.
 */
static f8_status row_blocks_cast(kernel *k, f8_lowered_group *out, uint32_t found) {
	f8_lower *lw = &k->lw;
	const recipe *r = k->r;
	uint32_t column_amax_in;
	outputs o;
	f8_status status = cast_params(k, out, r->transpose ? found : F8_NONE, &column_amax_in, &o);
	if (status)
		return status;
	lw->kernel->grid_sizes[lw->kernel->n_grid_sizes++] = k->p_cols;
	f8_kir_id width = r->width ? i64(k, r->width) : k->cols, g, j, amax, block_amax;
	f8_kir_id blocks = ceil_div(k, k->cols, width);
	if ((status = grid_loop(k, EMIT(lw, MUL, k->rows, blocks, NONE), true, &g, &amax)))
		return status;
	f8_kir_id row = EMIT(lw, DIV, g, blocks, NONE), block = EMIT(lw, REM, g, blocks, NONE);
	f8_kir_id first = EMIT(lw, MUL, block, width, NONE);
	f8_kir_id length = EMIT(lw, MIN, width, EMIT(lw, SUB, k->cols, first, NONE), NONE);
	f8_kir_id row_block = EMIT(lw, DIV, row, rows_per_block(k), NONE);
	if ((status = block_loop(k, length, true, &j, &block_amax)))
		return status;
	f8_kir_id a = EMIT(lw, ABS, x_at(k, row, EMIT(lw, ADD, first, j, NONE)), NONE, NONE);
	if ((status = end_loops(k, &a, 1)))
		return status;
	f8_kir_id inverse, scale = multiplier(k, block_amax, &inverse);
	status = store(k, o.scale_inv, EMIT(lw, ADD, EMIT(lw, MUL, row, blocks, NONE), block, NONE),
		       inverse);
	if (!status)
		status = block_loop(k, length, false, &j, NULL);
	if (status)
		return status;
	f8_kir_id c = EMIT(lw, ADD, first, j, NONE), x = x_at(k, row, c);
	status = store(k, o.codes, EMIT(lw, ADD, EMIT(lw, MUL, row, k->cols, NONE), c, NONE),
		       EMIT(lw, MUL, x, scale, NONE));
	f8_kir_id column_at = EMIT(lw, ADD, EMIT(lw, MUL, row_block, k->cols, NONE), c, NONE);
	if (!status && r->transpose) {
		f8_kir_id unused, scale_t = multiplier(k, f8_kir_load(lw->kernel, column_amax_in,
								      column_at), &unused);
		status = store(k, o.codes_t, EMIT(lw, ADD, EMIT(lw, MUL, c, k->rows, NONE), row, NONE),
			       EMIT(lw, MUL, x, scale_t, NONE));
	}
	if (!status)
		status = end_loops(k, (const f8_kir_id[]){NONE}, 1);
	if (!status && o.scale_inv_t != F8_NONE)
		status = transposed_scale_invs(k, o.scale_inv_t, column_amax_in, row, first, length);
	if (!status)
		status = end_loops(k, &block_amax, 1);
	if (!status && o.amax != F8_NONE)
		status = f8_kir_atomic(lw->kernel, F8_KIR_COMBINE_MAX, o.amax, i64(k, 0), amax,
				       lw->diag);
	return status;
}

/* Square blocks, kernel 1: each B x B block's amax into scratch `found` [blocks of rows,
 * blocks of columns], a grid iteration per (chunk of rows, block of columns) with one atomic;
 * the amax of x (an output) combined over the grid. */
static f8_status square_amax(kernel *k, f8_lowered_group *out, uint32_t found) {
	f8_lower *lw = &k->lw;
	uint32_t into, amax_out;
	f8_status status = f8_lower_add_scratch_param(lw, out, found, F8_KERNEL_PARAM_ACCUMULATE, &into);
	if (!status)
		status = f8_lower_bind_output(lw, k->r->amax, F8_KERNEL_PARAM_ACCUMULATE, &amax_out);
	if (!status)
		status = sizes(k);
	if (status)
		return status;
	f8_kir_id side = i64(k, k->r->width), blocks = ceil_div(k, k->cols, side);
	f8_kir_id chunks = ceil_div(k, k->rows, i64(k, CHUNK_ROWS)), g, j, amax, block_amax;
	f8_kir_id rows[CHUNK_ROWS];
	if ((status = grid_loop(k, EMIT(lw, MUL, chunks, blocks, NONE), true, &g, &amax)))
		return status;
	f8_kir_id chunk = EMIT(lw, DIV, g, blocks, NONE), block = EMIT(lw, REM, g, blocks, NONE);
	f8_kir_id first_row = EMIT(lw, MUL, chunk, i64(k, CHUNK_ROWS), NONE);
	f8_kir_id first = EMIT(lw, MUL, block, side, NONE);
	f8_kir_id length = EMIT(lw, MIN, side, EMIT(lw, SUB, k->cols, first, NONE), NONE);
	chunk_rows(k, first_row, rows);
	if ((status = block_loop(k, length, true, &j, &block_amax)))
		return status;
	f8_kir_id m = chunk_max(k, rows, EMIT(lw, ADD, first, j, NONE));
	if ((status = end_loops(k, &m, 1)))
		return status;
	f8_kir_id at = EMIT(lw, ADD, EMIT(lw, MUL, EMIT(lw, DIV, first_row, side, NONE), blocks, NONE),
			    block, NONE);
	status = f8_kir_atomic(lw->kernel, F8_KIR_COMBINE_MAX, into, at, block_amax, lw->diag);
	if (!status)
		status = end_loops(k, &block_amax, 1);
	if (!status && amax_out != F8_NONE)
		status = f8_kir_atomic(lw->kernel, F8_KIR_COMBINE_MAX, amax_out, i64(k, 0), amax,
				       lw->diag);
	return status;
}

/* Square blocks, kernel 2: every element's codes (x^T's copy the same codes transposed) at its
 * block's scale; in the first row of a block of rows, the scale_invs of its blocks, and of
 * x^T's copy (the grid transposed). */
static f8_status square_cast(kernel *k, f8_lowered_group *out, uint32_t found) {
	f8_lower *lw = &k->lw;
	uint32_t amax_in;
	outputs o;
	f8_status status = cast_params(k, out, found, &amax_in, &o);
	if (status)
		return status;
	f8_kir_id side = i64(k, k->r->width), blocks = ceil_div(k, k->cols, side);
	f8_kir_id row_blocks = ceil_div(k, k->rows, side), r, c, s, inverse;
	if ((status = grid_loop(k, k->rows, false, &r, NULL)))
		return status;
	f8_kir_id row_block = EMIT(lw, DIV, r, side, NONE);
	f8_kir_id first_block = EMIT(lw, MUL, row_block, blocks, NONE);
	if ((status = block_loop(k, k->cols, false, &c, NULL)))
		return status;
	f8_kir_id amax = f8_kir_load(lw->kernel, amax_in,
				     EMIT(lw, ADD, first_block, EMIT(lw, DIV, c, side, NONE), NONE));
	f8_kir_id scaled = EMIT(lw, MUL, x_at(k, r, c), multiplier(k, amax, &inverse), NONE);
	status = store(k, o.codes, EMIT(lw, ADD, EMIT(lw, MUL, r, k->cols, NONE), c, NONE), scaled);
	if (!status)
		status = store(k, o.codes_t, EMIT(lw, ADD, EMIT(lw, MUL, c, k->rows, NONE), r, NONE),
			       scaled);
	if (!status)
		status = end_loops(k, (const f8_kir_id[]){NONE}, 1);
	f8_kir_id leads = EMIT(lw, EQ, EMIT(lw, REM, r, side, NONE), i64(k, 0), NONE);
	if (!status)
		status = block_loop(k, EMIT(lw, SELECT, leads, blocks, i64(k, 0)), false, &s, NULL);
	if (status)
		return status;
	multiplier(k, f8_kir_load(lw->kernel, amax_in, EMIT(lw, ADD, first_block, s, NONE)), &inverse);
	status = store(k, o.scale_inv, EMIT(lw, ADD, first_block, s, NONE), inverse);
	if (!status)
		status = store(k, o.scale_inv_t,
			       EMIT(lw, ADD, EMIT(lw, MUL, s, row_blocks, NONE), row_block, NONE), inverse);
	const f8_kir_id none[2] = {NONE, NONE};
	return status ? status : end_loops(k, none, 2);
}

/* A kernel of the group: `first` builds it between begin and f8_lower_end. */
typedef f8_status (*kernel_body)(kernel *k, f8_lowered_group *out, uint32_t found);

static f8_status one_kernel(const recipe *r, const f8_graph *graph, uint32_t group,
			    f8_node_id *members, const char *suffix, kernel_body body,
			    uint32_t found, f8_lowered_group *out, f8_diag *diag) {
	kernel k;
	f8_status status = begin(&k, r, graph, group, members, suffix, diag);
	if (status && !k.lw.kernel)
		return status;
	if (!status)
		status = body(&k, out, found);
	return f8_lower_end(&k.lw, status, out);
}

/* Per tensor: whether codes^T leaves the group, and so is made by a kernel of tiles from the
 * codes (a scratch buffer for them where they do not leave it). */
static f8_status plan_transpose(const f8_graph *graph, uint32_t group, recipe *r,
				f8_lowered_group *out, f8_diag *diag) {
	f8_lower probe = {.graph = graph, .group = group}; // what f8_lower_escapes reads
	r->codes_scratch = F8_NONE;
	r->transpose_by_tiles = r->transpose && f8_lower_escapes(&probe, r->codes_t);
	if (!r->transpose_by_tiles || f8_lower_escapes(&probe, r->codes))
		return F8_OK;
	f8_dim count;
	if (!f8_shape_numel(&graph->values[r->codes].type.shape, &count))
		return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "kernel %s: the codes' size overflows",
				   graph->groups[group].name);
	return f8_lower_add_scratch(out, r->format, count, &r->codes_scratch, diag);
}

f8_status f8_lower_cast_recipe(const f8_graph *graph, uint32_t group, f8_node_id *members,
			       uint32_t n_members, f8_lowered_group *out, f8_diag *diag) {
	recipe r;
	if (n_members != 1 || !recipe_of(graph, &graph->nodes[members[0]], &r))
		return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "kernel %s: a cast that finds its scales "
				   "is a kernel of its own, under a recipe codegen knows",
				   graph->groups[group].name);
	// The scratch of kernel 1's amaxes: one per tensor, per block of x^T's copy (whose
	// scale_inv has that shape), per square block (scale_inv's shape).
	f8_dim count = f8_dim_const(1);
	if (r.kind == ROW_BLOCKS && r.transpose)
		f8_shape_numel(&graph->values[r.scale_inv_t].type.shape, &count);
	if (r.kind == SQUARE_BLOCKS)
		f8_shape_numel(&graph->values[r.scale_inv].type.shape, &count);
	uint32_t found = F8_NONE;
	f8_status status = F8_OK;
	if (r.kind != ROW_BLOCKS || r.transpose)
		status = f8_lower_add_scratch(out, F8_DTYPE_F32, count, &found, diag);
	if (status)
		return status;
	switch (r.kind) {
	case PER_TENSOR:
		status = plan_transpose(graph, group, &r, out, diag);
		if (!status)
			status = one_kernel(&r, graph, group, members, "_amax", tensor_amax, found, out,
					    diag);
		if (!status)
			status = one_kernel(&r, graph, group, members, "", tensor_cast, found, out, diag);
		if (!status && r.transpose_by_tiles) {
			char name[96];
			snprintf(name, sizeof name, "%s_transpose", graph->groups[group].name);
			status = f8_lower_transpose_codes(graph, group, members, 1,
							  &graph->values[r.node->inputs[0]].type.shape,
							  r.codes, r.codes_scratch, r.codes_t, name, out,
							  diag);
		}
		return status;
	case ROW_BLOCKS:
		if (r.transpose)
			status = one_kernel(&r, graph, group, members, "_amax", column_amax, found, out,
					    diag);
		return status ? status : one_kernel(&r, graph, group, members, "", row_blocks_cast,
						    found, out, diag);
	default:
		status = one_kernel(&r, graph, group, members, "_amax", square_amax, found, out, diag);
		return status ? status : one_kernel(&r, graph, group, members, "", square_cast, found,
						    out, diag);
	}
}
