/*
 * The tiled lowering and the row form of elementwise groups (codegen/lower_internal.h).
 *
 * Tiles: groups whose outputs need the anchor's columns gathered (a CastTranspose's
 * transposed codes, a bias gradient's column sums) run by 64x64 tiles of the anchor viewed as
 * a (rows, cols) matrix, so that every access to memory is along rows:
 *
 *   for.grid %t < ceil(rows / 64) * ceil(cols / 64)          (tile row band, tile column band)
 *     for.block %e < 4096: row i = e / 64, column j = e % 64 of the tile
 *       the members at (tr0 + i, tc0 + j), masked outside the tensor; the codes row-major;
 *       each value to transpose or sum stored into its shared array @tileN[i * 65 + j]
 *     for.block %e < 4096: column i = e / 64, row j = e % 64 of the tile
 *       codes_t[(tc0 + i) * rows + tr0 + j] = @tileN[j * 65 + i] * scale
 *     for.block %q < 256: column q % 64, rows 16 (q / 64) .. 16 (q / 64) + 15 of the tile
 *       partials[(tr0 / 16 + q / 64) * cols + tc0 + q % 64] = the sum of those rows of @tileN
 *
 * Consecutive iterations of the first two loops touch consecutive bytes of memory, so the GPU's
 * vector form (codegen/llvm_loops.c) makes them 16-byte accesses; the transposed codes are
 * written 64 bytes a row of the tile instead of one byte a sector. A tile row is padded to 65
 * elements: the second loop reads a column, whose elements then fall in different banks. The
 * bias gradient stores one partial per column per 16 rows (a scratch of rows / 16 x cols f32,
 * each element written once), which a second kernel adds in row order
 * (lower_internal.h f8_lower_sum_partials): the same bits on every run, where f32 atomics
 * added them in the blocks' order.
 *
 * A norm group cannot be tiled (a tile needs the statistics of whole rows), so its
 * CastTransposes write the codes row-major only (to a scratch buffer where the codes leave the
 * group nowhere) and a second kernel per CastTranspose transposes them by tiles. Where the
 * codes' rows and columns are constant multiples of 4 it moves them as 4-byte words and never
 * decodes them (16-byte loads and stores on the GPU, a 4.3 KB shared tile, a few integer ops a
 * code: the kernel is a copy); else a code at a time through an f32 tile, codes decoding
 * exactly to f32 and encoding back to the same code.
 *
 * Rows: an elementwise group whose inputs broadcast along the anchor's rows or columns runs a
 * grid loop over rows and a block loop over each row where the rows are long enough to keep a
 * block's threads busy, so that the row and the column come without a division per element.
 */
#include "codegen/lower_internal.h" // f8_lower, f8_lower_tile_*

#include <stdio.h> // snprintf

#include "ir/alloc.h" // f8_calloc, f8_free

enum {
	TILE = F8_LOWER_TILE,        // a tile's rows and columns
	TILE_PITCH = TILE + 1,       // a tile row in its shared array: padded (the header says why)
	TILE_ELEMENTS = TILE * TILE, // one block loop iteration each
	SUM_ROWS = F8_LOWER_TILE_SUM_ROWS, // the rows of a tile one partial column sum adds
	SUM_PARTS = TILE / SUM_ROWS, // partial sums per column of a tile
	MAX_TILES = 2,               // shared tiles a kernel may keep: 2 x 16.6 KB of f32
	MAX_CASTS = F8_LOWER_MAX_AMAX,
	WORD = 4,                    // FP8 codes in the 4-byte word a norm's transposes move
	WORDS = TILE / WORD,         // words in a tile row
	WORD_PITCH = WORDS + 1,      // a tile row of words in its shared array, padded as above
};

/* A value kept in a shared array per tile: a CastTranspose's input or a bias gradient's. */
typedef struct tile_value {
	f8_value_id value;
	uint32_t array;  // its shared array
	bool stored;     // its store into the array is emitted
} tile_value;

/* A CastTranspose of a tiled group, or of a norm group (left to a kernel of its own). */
typedef struct tile_cast {
	const f8_node *node;
	uint32_t codes_t;  // tiled: the transposed codes' OUT parameter
	f8_kir_id scale;   // tiled: its scale, once emitted
	uint32_t tile;     // tiled: its input's index in values
	uint32_t codes;    // norm: the parameter the codes are stored through
	uint32_t scratch;  // norm: the scratch buffer of the codes, F8_NONE: the codes' value
} tile_cast;

/* A bias gradient of a tiled group: its partials' OUT parameter and its input's tile. */
typedef struct tile_sum {
	const f8_node *node;
	uint32_t param, tile;
} tile_sum;

struct f8_lower_tile {
	bool norm;                 // a norm group's transposes, not a tiled kernel
	tile_value values[MAX_TILES];
	uint32_t n_values;
	tile_cast casts[MAX_CASTS];
	uint32_t n_casts;
	tile_sum sums[MAX_CASTS];
	uint32_t n_sums;
	f8_kir_id i, j;            // the current element's row and column in its tile
};

/* The buffer parameter bound to `value`, or F8_NONE. */
static uint32_t param_of(const f8_lower *lw, f8_value_id value) {
	for (uint32_t p = 0; p < lw->kernel->n_params; p++)
		if (lw->args[p].value == value && lw->kernel->params[p].kind != F8_KERNEL_PARAM_SIZE)
			return p;
	return F8_NONE;
}

static bool anchor_shaped(const f8_lower *lw, f8_value_id value) {
	return f8_shape_equal(&lw->graph->values[value].type.shape, &lw->anchor);
}

static f8_kir_id i64(f8_lower *lw, int64_t value) {
	return f8_kir_const_i64(lw->kernel, value);
}

/* The value a member keeps in a tile (its input), or F8_NONE: a CastTranspose whose transposed
 * codes leave the group, a bias gradient whose sums do. */
static f8_value_id tiled_value(const f8_lower *lw, const f8_node *node) {
	if (node->op == F8_OP_CAST_TRANSPOSE && f8_lower_escapes(lw, node->outputs[1]))
		return node->inputs[0];
	if (node->op == F8_OP_REDUCE_SUM && f8_lower_escapes(lw, node->outputs[0]))
		return node->inputs[0];
	return F8_NONE;
}

bool f8_lower_tile_fits(const f8_lower *lw) {
	if (lw->norm || lw->anchor.rank < 2)
		return false;
	f8_value_id values[MAX_TILES + 1];
	uint32_t n = 0;
	for (uint32_t m = 0; m < lw->n_members; m++) {
		const f8_node *node = &lw->graph->nodes[lw->members[m]];
		f8_value_id value = tiled_value(lw, node);
		if (value == F8_NONE)
			continue;
		if (!anchor_shaped(lw, value))
			return false;
		uint32_t i = 0;
		while (i < n && values[i] != value)
			i++;
		if (i == n && n++ == MAX_TILES)
			return false;
		values[i] = value;
	}
	return n > 0;
}

/* The number of elements of the anchor, as a dim. */
static bool anchor_numel(const f8_lower *lw, f8_dim *numel) {
	return f8_shape_numel(&lw->anchor, numel);
}

/* A norm's CastTranspose: where its codes go (their value's parameter, or a new scratch buffer
 * and an OUT parameter bound to it). */
static f8_status add_norm_cast(f8_lower *lw, const f8_node *node, f8_lowered_group *out) {
	struct f8_lower_tile *tile = lw->tile;
	if (!f8_lower_escapes(lw, node->outputs[1]))
		return F8_OK;
	if (tile->n_casts == MAX_CASTS)
		return f8_lower_fail(lw, lw->members[0], "more than %d casts", MAX_CASTS);
	tile_cast *cast = &tile->casts[tile->n_casts++];
	*cast = (tile_cast){.node = node, .codes = param_of(lw, node->outputs[0]),
			    .scratch = F8_NONE, .tile = F8_NONE, .codes_t = F8_NONE};
	if (cast->codes != F8_NONE)
		return F8_OK;
	f8_dim count;
	if (!anchor_numel(lw, &count))
		return f8_lower_fail(lw, lw->members[0], "its size does not fit a dim");
	f8_dtype dtype = lw->graph->values[node->outputs[0]].type.dtype;
	f8_status status = f8_lower_add_scratch(out, dtype, count, &cast->scratch, lw->diag);
	if (!status)
		status = f8_lower_add_scratch_param(lw, out, cast->scratch, F8_KERNEL_PARAM_OUT,
						    &cast->codes);
	return status;
}

f8_status f8_lower_tile_begin(f8_lower *lw, f8_lowered_group *out) {
	lw->tile = f8_calloc(1, sizeof *lw->tile);
	if (!lw->tile)
		return f8_diag_set(lw->diag, F8_ERR_NOMEM, "out of memory");
	lw->tile->norm = lw->norm;
	f8_status status = F8_OK;
	for (uint32_t m = 0; lw->norm && !status && m < lw->n_members; m++) {
		const f8_node *node = &lw->graph->nodes[lw->members[m]];
		if (node->op == F8_OP_CAST_TRANSPOSE)
			status = add_norm_cast(lw, node, out);
	}
	if (!status && lw->norm && lw->tile->n_casts == 0)
		f8_lower_tile_release(lw); // nothing to transpose: the norm kernel as it was
	return status;
}

void f8_lower_tile_release(f8_lower *lw) {
	f8_free(lw->tile);
	lw->tile = NULL;
}

/* The index of `value`'s tile, a shared array declared for it the first time. */
static f8_status tile_of(f8_lower *lw, f8_value_id value, uint32_t *index) {
	struct f8_lower_tile *tile = lw->tile;
	for (*index = 0; *index < tile->n_values; ++*index)
		if (tile->values[*index].value == value)
			return F8_OK;
	if (tile->n_values == MAX_TILES)
		return f8_diag_set(lw->diag, F8_ERR_INVALID, "kernel %s: more than %d tiles",
				   lw->graph->groups[lw->group].name, MAX_TILES);
	char name[16];
	snprintf(name, sizeof name, "tile%u", tile->n_values);
	tile_value *v = &tile->values[tile->n_values];
	*v = (tile_value){.value = value};
	f8_status status = f8_kir_add_shared(lw->kernel, name, F8_DTYPE_F32, TILE * TILE_PITCH,
					     &v->array, lw->diag);
	if (!status)
		tile->n_values++;
	return status;
}

/* The tiles, casts and sums of a tiled group, in member order. */
static f8_status plan_tiles(f8_lower *lw) {
	struct f8_lower_tile *tile = lw->tile;
	f8_status status = F8_OK;
	for (uint32_t m = 0; !status && m < lw->n_members; m++) {
		const f8_node *node = &lw->graph->nodes[lw->members[m]];
		f8_value_id value = tiled_value(lw, node);
		uint32_t index;
		if (value == F8_NONE || (status = tile_of(lw, value, &index)))
			continue;
		if (node->op == F8_OP_CAST_TRANSPOSE)
			tile->casts[tile->n_casts++] = (tile_cast){
				.node = node, .codes_t = param_of(lw, node->outputs[1]),
				.scale = F8_KIR_NONE, .tile = index, .codes = F8_NONE,
				.scratch = F8_NONE};
		else
			tile->sums[tile->n_sums++] = (tile_sum){
				.node = node, .param = f8_lower_partial_param(lw, node->outputs[0]),
				.tile = index};
	}
	return status;
}

/* Stores `x` (0 outside the tensor) into its tile at the current element, once. */
static f8_status store_tile(f8_lower *lw, uint32_t index, f8_kir_id x) {
	struct f8_lower_tile *tile = lw->tile;
	tile_value *v = &tile->values[index];
	if (v->stored)
		return F8_OK;
	v->stored = true;
	f8_kir_id at = EMIT(lw, ADD, EMIT(lw, MUL, tile->i, i64(lw, TILE_PITCH), NONE), tile->j, NONE);
	f8_kir_id kept = EMIT(lw, SELECT, lw->mask, x, f8_lower_constant(lw, 0));
	return f8_kir_store_shared(lw->kernel, v->array, at, kept, lw->diag);
}

f8_status f8_lower_tile_cast(f8_lower *lw, const f8_node *node, f8_kir_id x, f8_kir_id scale) {
	struct f8_lower_tile *tile = lw->tile;
	for (uint32_t c = 0; c < tile->n_casts; c++) {
		tile_cast *cast = &tile->casts[c];
		if (cast->node != node)
			continue;
		if (tile->norm) // the codes, for the transposing kernel, where no store made them
			return cast->scratch == F8_NONE
				? F8_OK
				: f8_kir_store_if(lw->kernel, cast->codes, lw->index,
						  EMIT(lw, MUL, x, scale, NONE), lw->mask, lw->diag);
		cast->scale = scale;
		return store_tile(lw, cast->tile, x);
	}
	return F8_OK; // its transposed codes leave the group nowhere
}

f8_status f8_lower_tile_sum(f8_lower *lw, const f8_node *node, f8_kir_id x) {
	struct f8_lower_tile *tile = lw->tile;
	for (uint32_t s = 0; !tile->norm && s < tile->n_sums; s++)
		if (tile->sums[s].node == node)
			return store_tile(lw, tile->sums[s].tile, x);
	uint32_t param = f8_lower_partial_param(lw, node->outputs[0]); // a norm's: per element
	return param == F8_NONE ? F8_OK
				: f8_kir_store_if(lw->kernel, param, lw->index, x, lw->mask,
						  lw->diag);
}

/* ---- the row form of elementwise groups ---- */

static bool is_cast(const f8_node *node) {
	return node->op == F8_OP_QUANTIZE || node->op == F8_OP_CAST_TRANSPOSE;
}

/* Whether some member reads an input from outside the group that broadcasts along the
 * anchor's rows or columns (its index needs the element's row or column), or is a bias
 * gradient (its column). */
static bool reads_rows_or_columns(const f8_lower *lw) {
	const f8_graph *graph = lw->graph;
	for (uint32_t m = 0; m < lw->n_members; m++) {
		const f8_node *node = &graph->nodes[lw->members[m]];
		if (node->op == F8_OP_REDUCE_SUM)
			return true;
		for (uint32_t i = 0; i < node->n_inputs && !(is_cast(node) && i == 1); i++) {
			f8_value_id input = node->inputs[i];
			f8_node_id producer = input == F8_NONE ? F8_NONE : graph->values[input].producer;
			if (input == F8_NONE || (producer != F8_NONE &&
						 graph->nodes[producer].group == lw->group))
				continue;
			const f8_shape *shape = &graph->values[input].type.shape;
			f8_dim numel;
			bool scalar = f8_shape_numel(shape, &numel) && f8_dim_is_const(numel) &&
				      f8_dim_value(numel) == 1;
			if (!scalar && !f8_shape_equal(shape, &lw->anchor))
				return true;
		}
	}
	return false;
}

bool f8_lower_rows_fit(const f8_lower *lw) {
	const f8_shape *anchor = &lw->anchor;
	if (anchor->rank < 2)
		return false;
	f8_dim last = anchor->dims[anchor->rank - 1];
	return f8_dim_is_const(last) && f8_dim_value(last) >= 256 && reads_rows_or_columns(lw);
}

f8_status f8_lower_rows(f8_lower *lw) {
	f8_lower_record_grid_sizes(lw, false);
	f8_kir_id var;
	f8_status status = f8_lower_begin_grid(lw, lw->rows, &var);
	if (!status)
		lw->row = var;
	if (!status)
		status = f8_lower_begin_columns(lw, lw->cols);
	for (uint32_t m = 0; !status && m < lw->n_members; m++)
		status = f8_lower_emit_member(lw, lw->members[m]);
	return f8_lower_end_loop(lw, true, f8_lower_end_loop(lw, false, status));
}

/* ---- the tiled loops ---- */

/* The tile grid: ceil(rows / 64) x ceil(cols / 64) tiles, tile t's first row and column
 * (tr0, tc0) once the grid loop is open. The launcher sizes the grid by 4096 elements a
 * block. */
typedef struct tile_grid {
	f8_kir_id rows, cols, tiles, across; // `across`: tiles along a row band
	f8_kir_id tr0, tc0;
} tile_grid;

static tile_grid grid_of(f8_lower *lw, f8_kir_id rows, f8_kir_id cols) {
	tile_grid g = {.rows = rows, .cols = cols};
	f8_kir_id down = EMIT(lw, DIV, EMIT(lw, ADD, rows, i64(lw, TILE - 1), NONE), i64(lw, TILE), NONE);
	g.across = EMIT(lw, DIV, EMIT(lw, ADD, cols, i64(lw, TILE - 1), NONE), i64(lw, TILE), NONE);
	g.tiles = EMIT(lw, MUL, down, g.across, NONE);
	lw->kernel->n_grid_sizes = 0;
	for (int d = 0; d < lw->anchor.rank; d++)
		lw->kernel->grid_sizes[lw->kernel->n_grid_sizes++] =
			f8_lower_size_param(lw, lw->anchor.dims[d]);
	lw->kernel->grid_divisor = TILE_ELEMENTS;
	return g;
}

/* In the grid loop over tiles (`t`): the tile's first row and column. */
static void place_tile(f8_lower *lw, tile_grid *g, f8_kir_id t) {
	g->tr0 = EMIT(lw, MUL, EMIT(lw, DIV, t, g->across, NONE), i64(lw, TILE), NONE);
	g->tc0 = EMIT(lw, MUL, EMIT(lw, REM, t, g->across, NONE), i64(lw, TILE), NONE);
}

/* Opens a block loop over a tile's elements: *major = e / 64, *minor = e % 64, the element's
 * row and column in the tensor (rows: `transposed` ? minor : major) and the mask of those
 * inside it. */
static f8_status open_tile_loop(f8_lower *lw, const tile_grid *g, bool transposed,
				f8_kir_id *major, f8_kir_id *minor, f8_kir_id *row, f8_kir_id *col,
				f8_kir_id *mask) {
	f8_kir_id e;
	f8_status status = f8_kir_begin_block_loop(lw->kernel, i64(lw, TILE_ELEMENTS), &e, lw->diag);
	if (status)
		return status;
	*major = EMIT(lw, DIV, e, i64(lw, TILE), NONE);
	*minor = EMIT(lw, REM, e, i64(lw, TILE), NONE);
	*row = EMIT(lw, ADD, g->tr0, transposed ? *minor : *major, NONE);
	*col = EMIT(lw, ADD, g->tc0, transposed ? *major : *minor, NONE);
	*mask = EMIT(lw, AND, EMIT(lw, LT, *row, g->rows, NONE), EMIT(lw, LT, *col, g->cols, NONE),
		     NONE);
	return F8_OK;
}

/* The members at each element of the tile, row by row, with the amaxes' block accumulators. */
static f8_status members_loop(f8_lower *lw, const tile_grid *g) {
	struct f8_lower_tile *tile = lw->tile;
	f8_kir_id row, col, mask;
	f8_status status = open_tile_loop(lw, g, false, &tile->i, &tile->j, &row, &col, &mask);
	if (!status)
		status = f8_lower_row_accumulators(lw);
	if (status)
		return status;
	lw->row = row, lw->col = col, lw->mask = mask;
	lw->index = EMIT(lw, ADD, EMIT(lw, MUL, row, g->cols, NONE), col, NONE);
	for (uint32_t m = 0; !status && m < lw->n_members; m++)
		status = f8_lower_emit_member(lw, lw->members[m]);
	lw->mask = NONE;
	return f8_lower_end_loop(lw, false, status);
}

/* The transposed codes of each cast, from its tile, column by column of the tile. */
static f8_status transpose_loop(f8_lower *lw, const tile_grid *g) {
	struct f8_lower_tile *tile = lw->tile;
	f8_kir_id major, minor, row, col, mask;
	f8_status status = open_tile_loop(lw, g, true, &major, &minor, &row, &col, &mask);
	if (status)
		return status;
	f8_kir_id at = EMIT(lw, ADD, EMIT(lw, MUL, minor, i64(lw, TILE_PITCH), NONE), major, NONE);
	f8_kir_id index = EMIT(lw, ADD, EMIT(lw, MUL, col, g->rows, NONE), row, NONE);
	for (uint32_t c = 0; !status && c < tile->n_casts; c++) {
		const tile_cast *cast = &tile->casts[c];
		f8_kir_id x = f8_kir_load_shared(lw->kernel, tile->values[cast->tile].array, at);
		status = f8_kir_store_if(lw->kernel, cast->codes_t, index,
					 EMIT(lw, MUL, x, cast->scale, NONE), mask, lw->diag);
	}
	return status ? status : f8_kir_end_loop(lw->kernel, NULL, 0, lw->diag);
}

/* Each bias gradient's partial column sums over 16 rows of its tile, stored in their places. */
static f8_status sum_loop(f8_lower *lw, const tile_grid *g) {
	struct f8_lower_tile *tile = lw->tile;
	f8_kir_id q;
	f8_status status = f8_kir_begin_block_loop(lw->kernel, i64(lw, TILE * SUM_PARTS), &q, lw->diag);
	if (status)
		return status;
	f8_kir_id column = EMIT(lw, REM, q, i64(lw, TILE), NONE);
	f8_kir_id first = EMIT(lw, MUL, EMIT(lw, DIV, q, i64(lw, TILE), NONE), i64(lw, SUM_ROWS), NONE);
	f8_kir_id col = EMIT(lw, ADD, g->tc0, column, NONE);
	f8_kir_id inside = EMIT(lw, LT, col, g->cols, NONE);
	f8_kir_id partial = EMIT(lw, DIV, EMIT(lw, ADD, g->tr0, first, NONE), i64(lw, SUM_ROWS), NONE);
	f8_kir_id at_partial = EMIT(lw, ADD, EMIT(lw, MUL, partial, g->cols, NONE), col, NONE);
	for (uint32_t s = 0; !status && s < tile->n_sums; s++) {
		uint32_t array = tile->values[tile->sums[s].tile].array;
		f8_kir_id sum = f8_lower_constant(lw, 0);
		for (int r = 0; r < SUM_ROWS; r++) {
			f8_kir_id row = EMIT(lw, ADD, first, i64(lw, r), NONE);
			f8_kir_id at = EMIT(lw, ADD, EMIT(lw, MUL, row, i64(lw, TILE_PITCH), NONE), column, NONE);
			sum = EMIT(lw, ADD, sum, f8_kir_load_shared(lw->kernel, array, at), NONE);
		}
		status = f8_kir_store_if(lw->kernel, tile->sums[s].param, at_partial, sum, inside,
					 lw->diag);
	}
	return status ? status : f8_kir_end_loop(lw->kernel, NULL, 0, lw->diag);
}

f8_status f8_lower_tiled(f8_lower *lw) {
	f8_status status = plan_tiles(lw);
	if (status)
		return status;
	tile_grid g = grid_of(lw, lw->rows, lw->cols);
	f8_kir_id t;
	status = f8_lower_begin_grid(lw, g.tiles, &t);
	if (status)
		return status;
	place_tile(lw, &g, t);
	status = members_loop(lw, &g);
	if (!status && lw->tile->n_casts)
		status = transpose_loop(lw, &g);
	if (!status && lw->tile->n_sums)
		status = sum_loop(lw, &g);
	return f8_lower_end_loop(lw, true, status);
}

/* ---- a norm's transposes ---- */

/* Whether a norm's codes can be transposed as 4-byte words: the rows (the anchor's leading
 * dims' product) and the columns constants that are multiples of WORD, so that every row of
 * the codes and of the transposed codes starts at a word. */
static bool moves_words(const f8_lower *lw) {
	int rank = lw->anchor.rank;
	int64_t rows = 1; // modulo WORD
	for (int d = 0; d < rank; d++) {
		f8_dim dim = lw->anchor.dims[d];
		if (!f8_dim_is_const(dim))
			return false;
		if (d + 1 < rank)
			rows = rows * (f8_dim_value(dim) % WORD) % WORD;
	}
	return rank >= 2 && rows == 0 && f8_dim_value(lw->anchor.dims[rank - 1]) % WORD == 0;
}

/* The rows and columns of the codes' (rows, cols) view, from the size parameters. */
static void codes_dims(f8_lower *lw, f8_kir_id *rows, f8_kir_id *cols) {
	f8_kernel *k = lw->kernel;
	int rank = lw->anchor.rank;
	*rows = i64(lw, 1);
	*cols = rank ? f8_kir_size(k, f8_lower_size_param(lw, lw->anchor.dims[rank - 1])) : i64(lw, 1);
	for (int d = 0; d + 1 < rank; d++)
		*rows = EMIT(lw, MUL, *rows, f8_kir_size(k, f8_lower_size_param(lw, lw->anchor.dims[d])),
			     NONE);
}

/* The transposing kernel's body: codes (parameter `codes`) through tile `array` to the
 * transposed codes (`codes_t`), a code an iteration, decoded to f32 and encoded back. */
static f8_status transpose_body(f8_lower *lw, uint32_t codes, uint32_t codes_t, uint32_t array) {
	f8_kernel *k = lw->kernel;
	f8_kir_id rows, cols;
	codes_dims(lw, &rows, &cols);
	tile_grid g = grid_of(lw, rows, cols);
	f8_kir_id t, major, minor, row, col, mask;
	f8_status status = f8_kir_begin_grid_loop(k, g.tiles, &t, lw->diag);
	if (status)
		return status;
	place_tile(lw, &g, t);
	if ((status = open_tile_loop(lw, &g, false, &major, &minor, &row, &col, &mask)))
		return status;
	f8_kir_id x = f8_kir_load_if(k, codes, EMIT(lw, ADD, EMIT(lw, MUL, row, cols, NONE), col, NONE),
				     mask);
	status = f8_kir_store_shared(
		k, array, EMIT(lw, ADD, EMIT(lw, MUL, major, i64(lw, TILE_PITCH), NONE), minor, NONE), x,
		lw->diag);
	if (!status)
		status = f8_kir_end_loop(k, NULL, 0, lw->diag);
	if (!status)
		status = open_tile_loop(lw, &g, true, &major, &minor, &row, &col, &mask);
	if (status)
		return status;
	f8_kir_id y = f8_kir_load_shared(
		k, array, EMIT(lw, ADD, EMIT(lw, MUL, minor, i64(lw, TILE_PITCH), NONE), major, NONE));
	status = f8_kir_store_if(k, codes_t, EMIT(lw, ADD, EMIT(lw, MUL, col, rows, NONE), row, NONE),
				 y, mask, lw->diag);
	if (!status)
		status = f8_kir_end_loop(k, NULL, 0, lw->diag);
	return status ? status : f8_kir_end_loop(k, NULL, 0, lw->diag);
}

/*
 * The transposing kernel's body where moves_words holds: the codes (parameter `codes`) and the
 * transposed codes (`codes_t`) read and written as words, never decoded. The first block loop
 * keeps the tile's words, WORDS a row, in shared array `array`; in the second, word g of the
 * transposed codes' tile row c (the tile's column c) takes byte c % 4 of word c / 4 of tile
 * rows 4g .. 4g + 3, the first row's into its low byte. Words are little-endian (the host and
 * the GPU): byte j of a word is its code at column 4w + j.
 */
static f8_status transpose_words(f8_lower *lw, uint32_t codes, uint32_t codes_t, uint32_t array) {
	f8_kernel *k = lw->kernel;
	f8_kir_id rows, cols, t, e;
	codes_dims(lw, &rows, &cols);
	tile_grid g = grid_of(lw, rows, cols);
	f8_status status = f8_kir_begin_grid_loop(k, g.tiles, &t, lw->diag);
	if (status)
		return status;
	place_tile(lw, &g, t);
	f8_kir_id word = i64(lw, WORD), words = i64(lw, WORDS), pitch = i64(lw, WORD_PITCH);
	f8_kir_id row_words = EMIT(lw, DIV, cols, word, NONE); // words in a row of the codes
	f8_kir_id col_words = EMIT(lw, DIV, rows, word, NONE); // and of the transposed codes
	// The tile's rows, a word an iteration.
	if ((status = f8_kir_begin_block_loop(k, i64(lw, TILE * WORDS), &e, lw->diag)))
		return status;
	f8_kir_id i = EMIT(lw, DIV, e, words, NONE), w = EMIT(lw, REM, e, words, NONE);
	f8_kir_id row = EMIT(lw, ADD, g.tr0, i, NONE);
	f8_kir_id at = EMIT(lw, ADD, EMIT(lw, DIV, g.tc0, word, NONE), w, NONE);
	f8_kir_id mask = EMIT(lw, AND, EMIT(lw, LT, row, rows, NONE), EMIT(lw, LT, at, row_words, NONE),
			      NONE);
	f8_kir_id x = f8_kir_load_if(k, codes, EMIT(lw, ADD, EMIT(lw, MUL, row, row_words, NONE), at,
						    NONE), mask);
	status = f8_kir_store_shared(k, array, EMIT(lw, ADD, EMIT(lw, MUL, i, pitch, NONE), w, NONE), x,
				     lw->diag);
	if (!status)
		status = f8_kir_end_loop(k, NULL, 0, lw->diag);
	// The tile's columns, a word of four rows an iteration.
	if (!status)
		status = f8_kir_begin_block_loop(k, i64(lw, TILE * WORDS), &e, lw->diag);
	if (status)
		return status;
	f8_kir_id c = EMIT(lw, DIV, e, words, NONE), group = EMIT(lw, REM, e, words, NONE);
	f8_kir_id col = EMIT(lw, ADD, g.tc0, c, NONE);
	at = EMIT(lw, ADD, EMIT(lw, DIV, g.tr0, word, NONE), group, NONE);
	mask = EMIT(lw, AND, EMIT(lw, LT, col, cols, NONE), EMIT(lw, LT, at, col_words, NONE), NONE);
	f8_kir_id shift = EMIT(lw, MUL, EMIT(lw, REM, c, word, NONE), i64(lw, 8), NONE);
	f8_kir_id first = EMIT(lw, ADD, EMIT(lw, MUL, EMIT(lw, MUL, group, word, NONE), pitch, NONE),
			       EMIT(lw, DIV, c, word, NONE), NONE);
	f8_kir_id y = NONE;
	// Byte shift / 8 of row 4 group + j to byte j: a word loads sign-extended to i64, and the
	// shift left by 56 drops all but the byte wanted.
	for (int j = 0; j < WORD; j++) {
		x = f8_kir_load_shared(k, array, EMIT(lw, ADD, first, i64(lw, j * WORD_PITCH), NONE));
		x = EMIT(lw, SHL, EMIT(lw, SHR, x, shift, NONE), i64(lw, 56), NONE);
		x = EMIT(lw, SHR, x, i64(lw, 56 - 8 * j), NONE);
		y = j ? EMIT(lw, ADD, y, x, NONE) : x;
	}
	f8_kir_id index = EMIT(lw, ADD, EMIT(lw, MUL, col, col_words, NONE), at, NONE);
	status = f8_kir_store_if(k, codes_t, index, y, mask, lw->diag);
	if (!status)
		status = f8_kir_end_loop(k, NULL, 0, lw->diag);
	return status ? status : f8_kir_end_loop(k, NULL, 0, lw->diag);
}

/* The transposing kernel (lower_internal.h): as words where moves_words holds (both
 * parameters then i32 buffers bound to the codes, the shared tile 4.3 KB), else a code at a
 * time through an f32 tile. */
f8_status f8_lower_transpose_codes(const f8_graph *graph, uint32_t group, f8_node_id *members,
				   uint32_t n_members, const f8_shape *anchor, f8_value_id codes,
				   uint32_t scratch, f8_value_id codes_t, const char *name,
				   f8_lowered_group *out, f8_diag *diag) {
	f8_lower lw;
	f8_status status = f8_lower_begin(&lw, graph, group, members, n_members, name, diag);
	if (status)
		return status;
	lw.anchor = *anchor;
	bool words = moves_words(&lw);
	uint32_t param = 0, size, array;
	status = scratch == F8_NONE
		? f8_lower_add_buffer(&lw, codes, F8_KERNEL_PARAM_IN)
		: f8_lower_add_scratch_param(&lw, out, scratch, F8_KERNEL_PARAM_IN, &param);
	if (!status)
		status = f8_lower_add_buffer(&lw, codes_t, F8_KERNEL_PARAM_OUT);
	for (int d = 0; !status && d < lw.anchor.rank; d++)
		status = f8_lower_add_size(&lw, lw.anchor.dims[d], &size);
	if (!status && words) // the codes' bytes, read and written 4 at a time
		lw.kernel->params[0].dtype = lw.kernel->params[1].dtype = F8_DTYPE_I32;
	if (!status)
		status = words ? f8_kir_add_shared(lw.kernel, "tile0", F8_DTYPE_I32, TILE * WORD_PITCH,
						   &array, lw.diag)
			       : f8_kir_add_shared(lw.kernel, "tile0", F8_DTYPE_F32, TILE * TILE_PITCH,
						   &array, lw.diag);
	if (!status)
		status = words ? transpose_words(&lw, 0, 1, array) : transpose_body(&lw, 0, 1, array);
	return f8_lower_end(&lw, status, out);
}

/* A kernel of the group transposing the codes of `cast` (its codes as the norm kernel left
 * them: a value or a scratch buffer) into its transposed codes. */
static f8_status transpose_codes(const f8_lower *norm, const tile_cast *cast, uint32_t n,
				 f8_lowered_group *out) {
	char name[160];
	snprintf(name, sizeof name, "%s_transpose%u", norm->graph->groups[norm->group].name, n);
	return f8_lower_transpose_codes(norm->graph, norm->group, norm->members, norm->n_members,
					&norm->anchor, cast->node->outputs[0], cast->scratch,
					cast->node->outputs[1], name, out, norm->diag);
}

f8_status f8_lower_tile_transposes(f8_lower *lw, f8_lowered_group *out) {
	f8_status status = F8_OK;
	for (uint32_t c = 0; lw->tile && lw->tile->norm && !status && c < lw->tile->n_casts; c++)
		status = transpose_codes(lw, &lw->tile->casts[c], c, out);
	return status;
}
