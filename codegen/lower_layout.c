/*
 * The layout and fill families (codegen/lower.h): nodes that move elements without arithmetic
 * or make them from attributes, each a kernel of its own, so that on the GPU no node but a
 * library call (GEMMs, attention, collectives) runs outside a generated kernel.
 *
 * Every kernel here is one grid loop over the elements of the tensor it walks, no block loop
 * (on the GPU one element a thread, codegen/llvm_lower.h), the index of the element it reads
 * found from the index of the one it writes by division and remainder by the dims:
 *   Reshape, Squeeze, Unsqueeze: the same order of elements, out[i] = x[i];
 *   Transpose, Expand, Slice: a strided view of x, out[i] = x[offset + sum_d c_d(i) stride_d]
 *     over the coordinates c_d(i) of i in the output: a transpose's strides are x's permuted,
 *     an expansion's 0 along a broadcast axis, a slice's x's times its steps from its first
 *     element, which is clamped at run time as ONNX does (runtime/cpu/kernels_shape.c);
 *   SliceGrad: dx[i] is dy's element where i is one the slice took, else 0: a masked load,
 *     which gives 0 without reading (kir.h);
 *   Trilu: out[i] is x[i] where i's (row, column) of its trailing matrix is in the kept
 *     triangle (j - r >= k upper, <= k lower), else 0: a masked load likewise (the causal bias
 *     of passes/attention_unfused.c);
 *   Concat: the grid over the output, each element from the input whose band along the axis
 *     holds its coordinate (a masked load from each input, the one inside selected);
 *   Split: the grid over the input, each element stored into the part whose band holds it:
 *     every part in one kernel, x read once.
 * A dim that is a constant is one in the code (a division by it is a multiply or a shift once
 * LLVM is done), a symbolic one a size argument; the grid's trip count is a size argument of
 * its own (the elements), which the launcher sizes the grid by. Elements go through registers
 * that hold their dtype exactly (f32, bf16, f16, e4m3, i64, i32, bool); e5m2, whose infinity
 * would saturate on store, and e8m0 are not lowered.
 *
 * Fills: Constant, and ConstantOfShape where no optimizer kernel takes it (a zeroing of a
 * gradient accumulator is lower_optimizer.c's): one value in the kernel's code, or for a
 * Constant of several elements its elements as the constants of a table (kir.h), which the
 * launcher writes, so that the code does not grow with the constant (TABLE_MAX elements at
 * most: a table travels in plan.json).
 *
 * These kernels are correct, not fast: a transpose reads with strides (lower_tile.c's shared
 * tiles would make both sides coalesced) and a move is not fused with its neighbours, which
 * could read through the view instead; both are performance work for later.
 */
#include "codegen/lower_internal.h" // f8_lower, f8_lower_*

#include <string.h> // memcpy

#include "ir/alloc.h" // f8_calloc, f8_free
#include "ir/fp8.h"   // f8_float_decode
#include "ir/ops.h" // f8_node_attr, f8_node_attr_int

enum { TABLE_MAX = 4096 }; // the most elements of a Constant made from a table

/* The dtypes whose elements a load and a store move exactly (kir.h's conversions). */
static bool moves_exactly(f8_dtype dtype) {
	switch (dtype) {
	case F8_DTYPE_F32:
	case F8_DTYPE_BF16:
	case F8_DTYPE_F16:
	case F8_DTYPE_E4M3:
	case F8_DTYPE_I64:
	case F8_DTYPE_I32:
	case F8_DTYPE_BOOL:
		return true;
	default:
		return false;
	}
}

static f8_kir_id i64(f8_lower *lw, int64_t value) {
	return f8_kir_const_i64(lw->kernel, value);
}

static const f8_shape *shape_of(const f8_lower *lw, f8_value_id value) {
	return &lw->graph->values[value].type.shape;
}

/* Whether the node's inputs (all present) and outputs are of one dtype that moves exactly. */
static bool one_movable_dtype(const f8_graph *graph, const f8_node *node) {
	f8_dtype dtype = graph->values[node->outputs[0]].type.dtype;
	for (uint32_t i = 0; i < node->n_inputs; i++)
		if (node->inputs[i] == F8_NONE || graph->values[node->inputs[i]].type.dtype != dtype)
			return false;
	for (uint32_t o = 0; o < node->n_outputs; o++)
		if (node->outputs[o] == F8_NONE || graph->values[node->outputs[o]].type.dtype != dtype)
			return false;
	return moves_exactly(dtype);
}

/* A Slice's or SliceGrad's attributes as the kernels read them: starts (dims), axes and steps
 * (nonzero) of the same count, every axis inside the rank of the sliced tensor. */
static bool slice_attributes_lower(const f8_node *node, int rank) {
	const f8_attr *starts = f8_node_attr(node, "starts");
	const f8_attr *axes = f8_node_attr(node, "axes"), *steps = f8_node_attr(node, "steps");
	if (!starts || (axes && axes->ints.n != starts->dims.n) ||
	    (steps && steps->ints.n != starts->dims.n) || starts->dims.n > (uint32_t)rank)
		return false;
	for (uint32_t i = 0; i < starts->dims.n; i++) {
		int axis;
		if (!f8_axis_normalize(axes ? axes->ints.items[i] : (int64_t)i, rank, false, &axis) ||
		    (steps && steps->ints.items[i] == 0))
			return false;
	}
	return true;
}

bool f8_lower_layout_lowers(const f8_graph *graph, const f8_node *node) {
	if (node->n_inputs == 0 || node->n_outputs == 0 || !one_movable_dtype(graph, node))
		return false;
	int in_rank = graph->values[node->inputs[0]].type.shape.rank;
	int out_rank = graph->values[node->outputs[0]].type.shape.rank;
	switch (node->op) {
	case F8_OP_SLICE:
		return slice_attributes_lower(node, in_rank);
	case F8_OP_SLICE_GRAD:
		return slice_attributes_lower(node, out_rank) && in_rank == out_rank;
	case F8_OP_TRANSPOSE: {
		const f8_attr *perm = f8_node_attr(node, "perm");
		if (in_rank != out_rank || (perm && perm->ints.n != (uint32_t)in_rank))
			return false;
		for (uint32_t i = 0; perm && i < perm->ints.n; i++)
			if (perm->ints.items[i] < 0 || perm->ints.items[i] >= in_rank)
				return false;
		return true;
	}
	case F8_OP_EXPAND:
		return in_rank <= out_rank;
	case F8_OP_TRILU:
		return in_rank >= 2 && in_rank == out_rank;
	case F8_OP_CONCAT:
	case F8_OP_SPLIT: {
		int axis;
		return f8_axis_normalize(f8_node_attr_int(node, "axis", 0), in_rank, false, &axis) &&
		       in_rank == out_rank;
	}
	default: // Reshape, Squeeze, Unsqueeze: the same elements in the same order
		return true;
	}
}

/* Parameters and dims. */

/* The size parameter of the grid's trip count: the elements of `shape`, recorded as the grid's
 * size for launchers; its index into *index. */
static f8_status add_grid_size(f8_lower *lw, const f8_shape *shape, uint32_t *index) {
	f8_dim numel;
	if (!f8_shape_numel(shape, &numel))
		return f8_lower_fail(lw, lw->members[0], "its element count overflows");
	f8_status status = f8_lower_add_size(lw, numel, index);
	if (!status) {
		lw->kernel->grid_sizes[0] = *index;
		lw->kernel->n_grid_sizes = 1;
	}
	return status;
}

/* `dim` in the body: a constant, or its size parameter's value. */
static f8_kir_id dim_value(f8_lower *lw, f8_dim dim) {
	if (f8_dim_is_const(dim))
		return i64(lw, f8_dim_value(dim));
	return f8_kir_size(lw->kernel, f8_lower_size_param(lw, dim));
}

static void dims_of(f8_lower *lw, const f8_shape *shape, f8_kir_id *dims) {
	for (int d = 0; d < shape->rank; d++)
		dims[d] = dim_value(lw, shape->dims[d]);
}

/* Row-major element strides of a tensor of `rank` dims `dims`. */
static void strides_of(f8_lower *lw, const f8_kir_id *dims, int rank, f8_kir_id *strides) {
	f8_kir_id stride = i64(lw, 1);
	for (int d = rank - 1; d >= 0; d--) {
		strides[d] = stride;
		stride = EMIT(lw, MUL, stride, dims[d], NONE);
	}
}

/* The coordinates of flat index `index` in a row-major tensor of `rank` dims `dims` (in
 * range: the first coordinate is what is left after the others). */
static void coordinates(f8_lower *lw, f8_kir_id index, const f8_kir_id *dims, int rank,
			f8_kir_id *coords) {
	f8_kir_id rest = index;
	for (int d = rank - 1; d > 0; d--) {
		coords[d] = EMIT(lw, REM, rest, dims[d], NONE);
		rest = EMIT(lw, DIV, rest, dims[d], NONE);
	}
	if (rank > 0)
		coords[0] = rest;
}

/* The grid loop over the elements size parameter `grid_size` counts; its variable into *var. */
static f8_status begin_elements(f8_lower *lw, uint32_t grid_size, f8_kir_id *var) {
	return f8_kir_begin_grid_loop(lw->kernel, f8_kir_size(lw->kernel, grid_size), var, lw->diag);
}

/* A Slice's or SliceGrad's first index along an axis of `size` for a start of `start` and a
 * step of sign `step`: from the end where negative, then clamped to [0, size] (a forward step)
 * or [0, size - 1] (a backward one), as the reference kernels and shape inference clamp. */
static f8_kir_id slice_first(f8_lower *lw, f8_kir_id start, f8_kir_id size, int64_t step) {
	f8_kir_id from_end = EMIT(lw, ADD, start, size, NONE);
	f8_kir_id v = EMIT(lw, SELECT, EMIT(lw, LT, start, i64(lw, 0), NONE), from_end, start);
	f8_kir_id high = step > 0 ? size : EMIT(lw, SUB, size, i64(lw, 1), NONE);
	return EMIT(lw, MIN, EMIT(lw, MAX, v, i64(lw, 0), NONE), high, NONE);
}

/* The sliced axes of a Slice or SliceGrad on a tensor of `rank` dims: per axis its step (0 for
 * an axis not sliced) and its start. */
typedef struct slicing {
	int64_t steps[F8_MAX_RANK];
	f8_dim starts[F8_MAX_RANK];
} slicing;

static slicing slicing_of(const f8_node *node, int rank) {
	slicing s = {.steps = {0}};
	const f8_attr *starts = f8_node_attr(node, "starts");
	const f8_attr *axes = f8_node_attr(node, "axes"), *steps = f8_node_attr(node, "steps");
	for (uint32_t i = 0; i < starts->dims.n; i++) {
		int axis = 0;
		f8_axis_normalize(axes ? axes->ints.items[i] : (int64_t)i, rank, false, &axis);
		s.steps[axis] = steps ? steps->ints.items[i] : 1;
		s.starts[axis] = starts->dims.items[i];
	}
	return s;
}

/* The starts' size parameters (those that are symbolic). */
static f8_status add_start_sizes(f8_lower *lw, const slicing *s, int rank) {
	f8_status status = F8_OK;
	for (int d = 0; !status && d < rank; d++)
		if (s->steps[d] && !f8_dim_is_const(s->starts[d])) {
			uint32_t index;
			status = f8_lower_add_size(lw, s->starts[d], &index);
		}
	return status;
}

/* Transpose, Expand, Slice, and the moves that keep the order (Reshape, Squeeze, Unsqueeze):
 * out[i] = x[offset + sum_d c_d(i) stride_d]. */
static f8_status lower_view(f8_lower *lw, f8_lowered_group *out) {
	const f8_node *node = &lw->graph->nodes[lw->members[0]];
	const f8_shape *x = shape_of(lw, node->inputs[0]), *y = shape_of(lw, node->outputs[0]);
	bool keeps_order = node->op == F8_OP_RESHAPE || node->op == F8_OP_SQUEEZE ||
			   node->op == F8_OP_UNSQUEEZE;
	slicing s = {.steps = {0}};
	if (node->op == F8_OP_SLICE)
		s = slicing_of(node, x->rank);
	uint32_t in, to, grid;
	f8_status status = f8_lower_bind_input(lw, node->inputs[0], &in);
	if (!status)
		status = f8_lower_bind_output(lw, node->outputs[0], F8_KERNEL_PARAM_OUT, &to);
	if (!status)
		status = add_grid_size(lw, y, &grid);
	if (!status && !keeps_order)
		status = f8_lower_add_symbolic_sizes(lw, x);
	if (!status && !keeps_order)
		status = f8_lower_add_symbolic_sizes(lw, y);
	if (!status)
		status = add_start_sizes(lw, &s, x->rank);
	if (status)
		return f8_lower_end(lw, status, out);
	f8_kir_id x_dims[F8_MAX_RANK], y_dims[F8_MAX_RANK], x_strides[F8_MAX_RANK];
	f8_kir_id strides[F8_MAX_RANK], offset = i64(lw, 0);
	if (!keeps_order) {
		dims_of(lw, x, x_dims);
		dims_of(lw, y, y_dims);
		strides_of(lw, x_dims, x->rank, x_strides);
	}
	if (node->op == F8_OP_TRANSPOSE) {
		const f8_attr *perm = f8_node_attr(node, "perm");
		for (int d = 0; d < y->rank; d++)
			strides[d] = x_strides[perm ? perm->ints.items[d] : y->rank - 1 - d];
	} else if (node->op == F8_OP_EXPAND) { // 0 along the axes x broadcasts (a dim of 1)
		for (int d = 0; d < y->rank; d++) {
			int xd = d - (y->rank - x->rank);
			strides[d] = xd < 0 ? i64(lw, 0)
				: EMIT(lw, SELECT, EMIT(lw, EQ, x_dims[xd], i64(lw, 1), NONE), i64(lw, 0),
				       x_strides[xd]);
		}
	} else if (node->op == F8_OP_SLICE) {
		for (int d = 0; d < x->rank; d++) {
			strides[d] = x_strides[d];
			if (!s.steps[d])
				continue;
			f8_kir_id first = slice_first(lw, dim_value(lw, s.starts[d]), x_dims[d], s.steps[d]);
			offset = EMIT(lw, ADD, offset, EMIT(lw, MUL, first, x_strides[d], NONE), NONE);
			strides[d] = EMIT(lw, MUL, x_strides[d], i64(lw, s.steps[d]), NONE);
		}
	}
	f8_kir_id i, coords[F8_MAX_RANK];
	status = begin_elements(lw, grid, &i);
	if (status)
		return f8_lower_end(lw, status, out);
	f8_kir_id at = i;
	if (!keeps_order) {
		coordinates(lw, i, y_dims, y->rank, coords);
		at = offset;
		for (int d = 0; d < y->rank; d++)
			at = EMIT(lw, ADD, at, EMIT(lw, MUL, coords[d], strides[d], NONE), NONE);
	}
	if (to != F8_NONE)
		status = f8_kir_store(lw->kernel, to, i, f8_kir_load(lw->kernel, in, at), lw->diag);
	if (!status)
		status = f8_kir_end_loop(lw->kernel, NULL, 0, lw->diag);
	return f8_lower_end(lw, status, out);
}

/* SliceGrad: the grid over dx; along a sliced axis of step t from `first`, coordinate c is
 * the slice's element j = (c - first) / t where that divides and 0 <= j < dy's dim; dx[i] is
 * dy at those j where every axis has one, else 0 (the masked load's). */
static f8_status lower_slice_grad(f8_lower *lw, f8_lowered_group *out) {
	const f8_node *node = &lw->graph->nodes[lw->members[0]];
	const f8_shape *dy = shape_of(lw, node->inputs[0]), *dx = shape_of(lw, node->outputs[0]);
	slicing s = slicing_of(node, dx->rank);
	uint32_t in, to, grid;
	f8_status status = f8_lower_bind_input(lw, node->inputs[0], &in);
	if (!status)
		status = f8_lower_bind_output(lw, node->outputs[0], F8_KERNEL_PARAM_OUT, &to);
	if (!status)
		status = add_grid_size(lw, dx, &grid);
	if (!status)
		status = f8_lower_add_symbolic_sizes(lw, dy);
	if (!status)
		status = f8_lower_add_symbolic_sizes(lw, dx);
	if (!status)
		status = add_start_sizes(lw, &s, dx->rank);
	if (status)
		return f8_lower_end(lw, status, out);
	f8_kir_id dy_dims[F8_MAX_RANK], dx_dims[F8_MAX_RANK], dy_strides[F8_MAX_RANK];
	f8_kir_id firsts[F8_MAX_RANK];
	dims_of(lw, dy, dy_dims);
	dims_of(lw, dx, dx_dims);
	strides_of(lw, dy_dims, dy->rank, dy_strides);
	for (int d = 0; d < dx->rank; d++)
		firsts[d] = s.steps[d] ? slice_first(lw, dim_value(lw, s.starts[d]), dx_dims[d], s.steps[d])
				       : NONE;
	f8_kir_id i, coords[F8_MAX_RANK];
	status = begin_elements(lw, grid, &i);
	if (status)
		return f8_lower_end(lw, status, out);
	coordinates(lw, i, dx_dims, dx->rank, coords);
	f8_kir_id at = i64(lw, 0), inside = NONE;
	for (int d = 0; d < dx->rank; d++) {
		f8_kir_id j = coords[d];
		if (s.steps[d]) {
			// The distance from the first element in the step's direction, in steps.
			int64_t step = s.steps[d] > 0 ? s.steps[d] : -s.steps[d];
			f8_kir_id distance = s.steps[d] > 0 ? EMIT(lw, SUB, coords[d], firsts[d], NONE)
							    : EMIT(lw, SUB, firsts[d], coords[d], NONE);
			j = EMIT(lw, DIV, distance, i64(lw, step), NONE);
			f8_kir_id ok = EMIT(lw, AND, EMIT(lw, LE, i64(lw, 0), distance, NONE),
					    EMIT(lw, LT, j, dy_dims[d], NONE), NONE);
			if (step != 1)
				ok = EMIT(lw, AND, ok,
					  EMIT(lw, EQ, EMIT(lw, REM, distance, i64(lw, step), NONE),
					       i64(lw, 0), NONE),
					  NONE);
			inside = inside == NONE ? ok : EMIT(lw, AND, inside, ok, NONE);
		}
		at = EMIT(lw, ADD, at, EMIT(lw, MUL, j, dy_strides[d], NONE), NONE);
	}
	if (to != F8_NONE)
		status = f8_kir_store(lw->kernel, to, i, f8_kir_load_if(lw->kernel, in, at, inside),
				      lw->diag);
	if (!status)
		status = f8_kir_end_loop(lw->kernel, NULL, 0, lw->diag);
	return f8_lower_end(lw, status, out);
}

/* Trilu: the grid over out, each element x's where its (row, column) is in the triangle. */
static f8_status lower_trilu(f8_lower *lw, f8_lowered_group *out) {
	const f8_node *node = &lw->graph->nodes[lw->members[0]];
	const f8_shape *x = shape_of(lw, node->inputs[0]);
	bool upper = f8_node_attr_int(node, "upper", 1);
	int64_t k = f8_node_attr_int(node, "k", 0);
	uint32_t in, to, grid;
	f8_status status = f8_lower_bind_input(lw, node->inputs[0], &in);
	if (!status)
		status = f8_lower_bind_output(lw, node->outputs[0], F8_KERNEL_PARAM_OUT, &to);
	if (!status)
		status = add_grid_size(lw, x, &grid);
	if (!status)
		status = f8_lower_add_symbolic_sizes(lw, x);
	f8_kir_id i;
	if (!status)
		status = begin_elements(lw, grid, &i);
	if (status)
		return f8_lower_end(lw, status, out);
	f8_kir_id rows = dim_value(lw, x->dims[x->rank - 2]), cols = dim_value(lw, x->dims[x->rank - 1]);
	f8_kir_id j = EMIT(lw, REM, i, cols, NONE);
	f8_kir_id r = EMIT(lw, REM, EMIT(lw, DIV, i, cols, NONE), rows, NONE);
	f8_kir_id diagonal = EMIT(lw, SUB, j, r, NONE);
	f8_kir_id kept = upper ? EMIT(lw, LE, i64(lw, k), diagonal, NONE)
			       : EMIT(lw, LE, diagonal, i64(lw, k), NONE);
	if (to != F8_NONE)
		status = f8_kir_store(lw->kernel, to, i, f8_kir_load_if(lw->kernel, in, i, kept),
				      lw->diag);
	if (!status)
		status = f8_kir_end_loop(lw->kernel, NULL, 0, lw->diag);
	return f8_lower_end(lw, status, out);
}

/*
 * Concat and Split: the whole tensor (Concat's output, Split's input) is outer x A x inner
 * along the axis (A its dim there), each part a band of the axis: part k's elements are the
 * whole's whose axis coordinate a lies in [s_k, s_k + z_k), at (o z_k + a - s_k) inner + n in
 * the part. Concat's grid walks the whole and loads from the part that holds the element;
 * Split's walks it and stores into that part.
 */
static f8_status lower_bands(f8_lower *lw, f8_lowered_group *out) {
	const f8_node *node = &lw->graph->nodes[lw->members[0]];
	bool concat = node->op == F8_OP_CONCAT;
	f8_value_id whole = concat ? node->outputs[0] : node->inputs[0];
	const f8_value_id *parts = concat ? node->inputs : node->outputs;
	uint32_t n_parts = concat ? node->n_inputs : node->n_outputs;
	const f8_shape *shape = shape_of(lw, whole);
	int axis = 0;
	f8_axis_normalize(f8_node_attr_int(node, "axis", 0), shape->rank, false, &axis);
	uint32_t whole_param, grid, *part_params = f8_calloc(n_parts + 1, sizeof *part_params);
	if (!part_params)
		return f8_lower_end(lw, f8_diag_set(lw->diag, F8_ERR_NOMEM, "out of memory"), out);
	f8_status status = F8_OK;
	if (concat) {
		for (uint32_t k = 0; !status && k < n_parts; k++)
			status = f8_lower_bind_input(lw, parts[k], &part_params[k]);
		if (!status)
			status = f8_lower_bind_output(lw, whole, F8_KERNEL_PARAM_OUT, &whole_param);
	} else {
		status = f8_lower_bind_input(lw, whole, &whole_param);
		for (uint32_t k = 0; !status && k < n_parts; k++)
			status = f8_lower_bind_output(lw, parts[k], F8_KERNEL_PARAM_OUT, &part_params[k]);
	}
	if (!status)
		status = add_grid_size(lw, shape, &grid);
	if (!status)
		status = f8_lower_add_symbolic_sizes(lw, shape);
	for (uint32_t k = 0; !status && k < n_parts; k++)
		if (!f8_dim_is_const(shape_of(lw, parts[k])->dims[axis])) {
			uint32_t index;
			status = f8_lower_add_size(lw, shape_of(lw, parts[k])->dims[axis], &index);
		}
	f8_kir_id dims[F8_MAX_RANK], inner = NONE, i = NONE;
	if (!status) {
		dims_of(lw, shape, dims);
		inner = i64(lw, 1);
		for (int d = axis + 1; d < shape->rank; d++)
			inner = EMIT(lw, MUL, inner, dims[d], NONE);
		status = begin_elements(lw, grid, &i);
	}
	if (status) {
		f8_free(part_params);
		return f8_lower_end(lw, status, out);
	}
	f8_kir_id q = EMIT(lw, DIV, i, inner, NONE), n = EMIT(lw, REM, i, inner, NONE);
	f8_kir_id a = EMIT(lw, REM, q, dims[axis], NONE), o = EMIT(lw, DIV, q, dims[axis], NONE);
	f8_kir_id start = i64(lw, 0), v = NONE;
	for (uint32_t k = 0; !status && k < n_parts; k++) {
		f8_kir_id z = dim_value(lw, shape_of(lw, parts[k])->dims[axis]);
		f8_kir_id end = EMIT(lw, ADD, start, z, NONE);
		f8_kir_id inside = EMIT(lw, AND, EMIT(lw, LE, start, a, NONE), EMIT(lw, LT, a, end, NONE),
					NONE);
		f8_kir_id row = EMIT(lw, ADD, EMIT(lw, MUL, o, z, NONE), EMIT(lw, SUB, a, start, NONE),
				     NONE);
		f8_kir_id at = EMIT(lw, ADD, EMIT(lw, MUL, row, inner, NONE), n, NONE);
		if (concat) {
			f8_kir_id loaded = f8_kir_load_if(lw->kernel, part_params[k], at, inside);
			v = v == NONE ? loaded : EMIT(lw, SELECT, inside, loaded, v);
		} else if (part_params[k] != F8_NONE) {
			if (v == NONE)
				v = f8_kir_load(lw->kernel, whole_param, i);
			status = f8_kir_store_if(lw->kernel, part_params[k], at, v, inside, lw->diag);
		}
		start = end;
	}
	if (!status && concat && whole_param != F8_NONE && v != NONE)
		status = f8_kir_store(lw->kernel, whole_param, i, v, lw->diag);
	if (!status)
		status = f8_kir_end_loop(lw->kernel, NULL, 0, lw->diag);
	f8_free(part_params);
	return f8_lower_end(lw, status, out);
}

f8_status f8_lower_layout(const f8_graph *graph, uint32_t group, f8_node_id *members,
			  uint32_t n_members, f8_lowered_group *out, f8_diag *diag) {
	(void)n_members; // a lone node
	f8_lower lw;
	f8_status status = f8_lower_begin(&lw, graph, group, members, 1, graph->groups[group].name,
					  diag);
	if (status)
		return status;
	switch (graph->nodes[members[0]].op) {
	case F8_OP_SLICE_GRAD: return lower_slice_grad(&lw, out);
	case F8_OP_TRILU: return lower_trilu(&lw, out);
	case F8_OP_CONCAT:
	case F8_OP_SPLIT: return lower_bands(&lw, out);
	default: return lower_view(&lw, out);
	}
}

/* Fills. */

/* Element `i` of `tensor` as a table cell holds it: an integer's value, a bool's 0 or 1, a
 * float's value as the bits of an f32 (exact: every dtype moves_exactly takes is in f32). */
static int64_t element_cell(const f8_tensor_data *tensor, size_t i) {
	const uint8_t *at = (const uint8_t *)tensor->data + i * f8_dtype_get_info(tensor->dtype)->bytes;
	switch (tensor->dtype) {
	case F8_DTYPE_I64: {
		int64_t v;
		memcpy(&v, at, sizeof v);
		return v;
	}
	case F8_DTYPE_I32: {
		int32_t v;
		memcpy(&v, at, sizeof v);
		return v;
	}
	case F8_DTYPE_BOOL: return at[0] != 0;
	case F8_DTYPE_F32: {
		uint32_t bits;
		memcpy(&bits, at, sizeof bits);
		return bits;
	}
	default: { // bf16, f16, e4m3
		uint32_t code = 0, bits;
		memcpy(&code, at, f8_dtype_get_info(tensor->dtype)->bytes);
		float v = f8_float_decode(tensor->dtype, code);
		memcpy(&bits, &v, sizeof bits);
		return bits;
	}
	}
}

/* The register value of a cell (element_cell's form) of a `dtype` element. */
static f8_kir_id cell_value(f8_lower *lw, f8_dtype dtype, f8_kir_id cell) {
	switch (f8_kir_type_of_dtype(dtype)) {
	case F8_KIR_TYPE_F32: return EMIT(lw, FROM_BITS, cell, NONE, NONE);
	case F8_KIR_TYPE_BOOL: return EMIT(lw, NE, cell, i64(lw, 0), NONE);
	default: return cell;
	}
}

/* The same for a cell known at compile time: a constant of the code. */
static f8_kir_id constant_value(f8_lower *lw, f8_dtype dtype, int64_t cell) {
	switch (f8_kir_type_of_dtype(dtype)) {
	case F8_KIR_TYPE_F32: {
		uint32_t bits = (uint32_t)cell;
		float v;
		memcpy(&v, &bits, sizeof v);
		return f8_kir_const_f32(lw->kernel, v);
	}
	case F8_KIR_TYPE_BOOL: return f8_kir_const_bool(lw->kernel, cell != 0);
	default: return i64(lw, cell);
	}
}

/* The tensor a fill takes its values from: Constant's `value` (its elements), ConstantOfShape's
 * (one element, or none: zeros). */
static const f8_tensor_data *fill_tensor(const f8_node *node) {
	const f8_attr *value = f8_node_attr(node, "value");
	return value ? value->tensor : NULL;
}

bool f8_lower_fill_lowers(const f8_graph *graph, const f8_node *node) {
	if (node->n_outputs != 1)
		return false;
	const f8_type *type = &graph->values[node->outputs[0]].type;
	const f8_tensor_data *tensor = fill_tensor(node);
	if (!moves_exactly(type->dtype) || (tensor && tensor->dtype != type->dtype))
		return false;
	size_t element = f8_dtype_get_info(type->dtype)->bytes;
	if (node->op == F8_OP_CONSTANT_OF_SHAPE)
		return !tensor || tensor->n_bytes == element;
	f8_dim numel;
	return tensor && f8_shape_numel(&type->shape, &numel) && f8_dim_is_const(numel) &&
	       f8_dim_value(numel) <= TABLE_MAX && tensor->n_bytes == (size_t)f8_dim_value(numel) * element;
}

/* The table of a Constant of n elements: a row each, one column, its cell. */
static f8_kernel_table *constant_table(const f8_tensor_data *tensor, uint32_t n) {
	static const char *const names[1] = {"element"};
	static const f8_kernel_param_kind kinds[1] = {F8_KERNEL_PARAM_SIZE};
	f8_kernel_table *table = f8_lower_table_create(n, 1, kinds, names);
	for (uint32_t r = 0; table && r < n; r++)
		table->cells[r].constant = element_cell(tensor, r);
	return table;
}

/* A fill: out[i] = the one value, or the table's row i. */
f8_status f8_lower_fill(const f8_graph *graph, uint32_t group, f8_node_id *members,
			uint32_t n_members, f8_lowered_group *out, f8_diag *diag) {
	(void)n_members; // a lone node
	const f8_node *node = &graph->nodes[members[0]];
	const f8_tensor_data *tensor = fill_tensor(node);
	f8_dtype dtype = graph->values[node->outputs[0]].type.dtype;
	size_t element = f8_dtype_get_info(dtype)->bytes;
	uint32_t n = tensor ? (uint32_t)(tensor->n_bytes / element) : 1;
	f8_kernel_table *table = NULL;
	if (n > 1 && !(table = constant_table(tensor, n)))
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	f8_lower lw;
	f8_status status = f8_lower_begin(&lw, graph, group, members, 1, graph->groups[group].name,
					  diag);
	if (status) {
		f8_kernel_table_destroy(table);
		return status;
	}
	uint32_t cells = F8_NONE, to, grid;
	if (table)
		status = f8_lower_add_table_param(&lw, table, &cells);
	if (!status)
		status = f8_lower_bind_output(&lw, node->outputs[0], F8_KERNEL_PARAM_OUT, &to);
	if (!status)
		status = add_grid_size(&lw, &graph->values[node->outputs[0]].type.shape, &grid);
	f8_kir_id i, one = NONE;
	if (!status && !table)
		one = constant_value(&lw, dtype, tensor ? element_cell(tensor, 0) : 0);
	if (!status)
		status = begin_elements(&lw, grid, &i);
	if (!status && to != F8_NONE) {
		f8_kir_id v = table ? cell_value(&lw, dtype, f8_kir_load(lw.kernel, cells, i)) : one;
		status = f8_kir_store(lw.kernel, to, i, v, diag);
	}
	if (!status)
		status = f8_kir_end_loop(lw.kernel, NULL, 0, diag);
	status = f8_lower_end(&lw, status, out);
	if (status) // f8_lower_end freed the bindings, not their table
		f8_kernel_table_destroy(table);
	return status;
}
