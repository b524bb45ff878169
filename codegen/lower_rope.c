/*
 * The rope family (codegen/lower.h): Rope and RopeGrad, each a kernel of its own, one grid
 * loop over the elements of x (or dy), no block loop (on the GPU one element a thread).
 *
 * Rope rotates pairs of the first rotary_dim columns of each row of x (..., seq, head_dim) by
 * the angles whose cos and sin are the row's position's row of the tables (..., seq,
 * rotary_dim), and passes the rest of the row through (partial rotary), as the reference
 * kernels do (runtime/cpu/kernels_nn.c, kernels_grad_nn.c):
 *   y[p]  = x[p] cos[p] - x[q] sin[p],   y[q]  = x[q] cos[q] + x[p] sin[q]
 *   dx[p] = dy[p] cos[p] + dy[q] sin[q], dx[q] = dy[q] cos[q] - dy[p] sin[p]
 * for the pairs (p, q) = (i, i + rotary_dim / 2) (rotate-half) or (2i, 2i + 1) (interleaved):
 * each element reads its own and its partner's element of the row, so that an element's value
 * needs no other thread. The tables' leading dims broadcast against x's just before seq (1, or
 * x's own: per-batch tables from position ids), so a row's table row comes from the row's
 * coordinates by division and remainder.
 *
 * x's dims that are constants are constants of the code (a division by head_dim is a multiply
 * or a shift), a symbolic one a size argument; the elements are a size argument of their own,
 * which the launcher sizes the grid by. The arithmetic is f32, the output rounded once on
 * store, where the reference computes in double and rounds once: a few f32 ulps apart.
 */
#include "codegen/lower_internal.h" // f8_lower, f8_lower_*

#include "ir/ops.h" // f8_node_attr_int

static bool float_dtype(f8_dtype dtype) {
	return dtype == F8_DTYPE_F32 || dtype == F8_DTYPE_BF16 || dtype == F8_DTYPE_F16;
}

/* Shape inference has checked the shapes (ir/infer_fused.c f8_infer_rope); the dtypes are
 * those a load reads exactly and a store rounds as the reference's stores do. */
bool f8_lower_rope_lowers(const f8_graph *graph, const f8_node *node) {
	if (node->n_inputs != 3 || node->n_outputs != 1)
		return false;
	for (uint32_t i = 0; i < 3; i++)
		if (node->inputs[i] == F8_NONE || !float_dtype(graph->values[node->inputs[i]].type.dtype))
			return false;
	return float_dtype(graph->values[node->outputs[0]].type.dtype);
}

static f8_kir_id i64(f8_lower *lw, int64_t value) {
	return f8_kir_const_i64(lw->kernel, value);
}

/* `dim` in the body: a constant, or its size parameter's value (added before). */
static f8_kir_id dim_value(f8_lower *lw, f8_dim dim) {
	if (f8_dim_is_const(dim))
		return i64(lw, f8_dim_value(dim));
	return f8_kir_size(lw->kernel, f8_lower_size_param(lw, dim));
}

/* The table row that row `row` of x (its rows: all dims but the last) reads: the coordinates
 * of x's dims from seq back, each times the table's stride along the aligned dim, 0 where the
 * table's dim is 1 (runtime/cpu/kernels_nn.c rope_table_row). */
static f8_kir_id table_row(f8_lower *lw, const f8_shape *x, const f8_shape *table, f8_kir_id row) {
	int shift = x->rank - table->rank;
	f8_kir_id index = i64(lw, 0), stride = i64(lw, 1), rest = row;
	for (int d = x->rank - 2; d >= 0 && d - shift >= 0; d--) {
		f8_kir_id extent = dim_value(lw, x->dims[d]);
		f8_dim size = table->dims[d - shift];
		bool broadcast = f8_dim_is_const(size) && f8_dim_value(size) == 1;
		if (!broadcast) {
			f8_kir_id coordinate = EMIT(lw, REM, rest, extent, NONE);
			index = EMIT(lw, ADD, index, EMIT(lw, MUL, coordinate, stride, NONE), NONE);
			stride = EMIT(lw, MUL, stride, dim_value(lw, size), NONE);
		}
		if (d - shift > 0)
			rest = EMIT(lw, DIV, rest, extent, NONE);
	}
	return index;
}

/* The element's value: the rotation of element `col` of the row (rotate-half or interleaved)
 * for Rope, its transpose for RopeGrad; columns from rotary_dim on pass through. */
static f8_status emit_element(f8_lower *lw, const f8_node *node, uint32_t x, uint32_t cos,
			      uint32_t sin, uint32_t y, f8_kir_id index) {
	const f8_graph *graph = lw->graph;
	const f8_shape *xs = &graph->values[node->inputs[0]].type.shape;
	const f8_shape *ts = &graph->values[node->inputs[1]].type.shape;
	bool interleaved = f8_node_attr_int(node, "interleaved", 0) != 0;
	bool grad = node->op == F8_OP_ROPE_GRAD;
	f8_kir_id head_dim = dim_value(lw, xs->dims[xs->rank - 1]);
	f8_kir_id rotary = dim_value(lw, ts->dims[ts->rank - 1]);
	f8_kir_id row = EMIT(lw, DIV, index, head_dim, NONE);
	f8_kir_id col = EMIT(lw, REM, index, head_dim, NONE);
	f8_kir_id rotating = EMIT(lw, LT, col, rotary, NONE);
	// The pair's first element (p) and the partner of this one; outside the rotary columns
	// the partner is the element itself, so that its index stays in the row.
	f8_kir_id first, partner;
	if (interleaved) {
		first = EMIT(lw, EQ, EMIT(lw, REM, col, i64(lw, 2), NONE), i64(lw, 0), NONE);
		partner = EMIT(lw, SELECT, first, EMIT(lw, ADD, col, i64(lw, 1), NONE),
			       EMIT(lw, SUB, col, i64(lw, 1), NONE));
	} else {
		f8_kir_id half = EMIT(lw, DIV, rotary, i64(lw, 2), NONE);
		first = EMIT(lw, LT, col, half, NONE);
		partner = EMIT(lw, SELECT, first, EMIT(lw, ADD, col, half, NONE),
			       EMIT(lw, SUB, col, half, NONE));
	}
	partner = EMIT(lw, SELECT, rotating, partner, col);
	f8_kir_id table = EMIT(lw, MUL, table_row(lw, xs, ts, row), rotary, NONE);
	f8_kir_id own = EMIT(lw, ADD, table, col, NONE);
	f8_kir_id other = EMIT(lw, ADD, EMIT(lw, SUB, index, col, NONE), partner, NONE);
	f8_kernel *k = lw->kernel;
	f8_kir_id v = f8_kir_load(k, x, index), w = f8_kir_load(k, x, other);
	// The tables only where the column rotates: a masked load reads nothing (kir.h).
	f8_kir_id c = f8_kir_load_if(k, cos, own, rotating);
	// Rope's sine is the element's own; its transpose takes the partner's.
	f8_kir_id s = f8_kir_load_if(k, sin, grad ? EMIT(lw, ADD, table, partner, NONE) : own,
				     rotating);
	// Rope: the first of a pair takes - x[q] sin, the second + x[p] sin; the transpose the
	// other signs.
	f8_kir_id turned = EMIT(lw, MUL, w, s, NONE);
	f8_kir_id minus = grad ? EMIT(lw, NOT, first, NONE, NONE) : first;
	f8_kir_id straight = EMIT(lw, MUL, v, c, NONE);
	f8_kir_id rotated = EMIT(lw, SELECT, minus, EMIT(lw, SUB, straight, turned, NONE),
				 EMIT(lw, ADD, straight, turned, NONE));
	f8_kir_id value = EMIT(lw, SELECT, rotating, rotated, v);
	if (f8_kir_error(k))
		return f8_lower_fail(lw, lw->members[0], "%s", f8_kir_error(k));
	return f8_kir_store(k, y, index, value, lw->diag);
}

f8_status f8_lower_rope(const f8_graph *graph, uint32_t group, f8_node_id *members,
			uint32_t n_members, f8_lowered_group *out, f8_diag *diag) {
	f8_lower lw;
	f8_status status = f8_lower_begin(&lw, graph, group, members, n_members,
					  graph->groups[group].name, diag);
	if (status)
		return status;
	const f8_node *node = &graph->nodes[members[0]];
	if (n_members != 1) // the fuse pass admits nothing to a rope kernel yet
		status = f8_lower_fail(&lw, members[1], "a rope kernel holds its Rope or RopeGrad "
				       "alone");
	uint32_t x = F8_NONE, cos = F8_NONE, sin = F8_NONE, y = F8_NONE, elements = F8_NONE;
	if (!status)
		status = f8_lower_bind_input(&lw, node->inputs[0], &x);
	if (!status)
		status = f8_lower_bind_input(&lw, node->inputs[1], &cos);
	if (!status)
		status = f8_lower_bind_input(&lw, node->inputs[2], &sin);
	if (!status)
		status = f8_lower_add_buffer(&lw, node->outputs[0], F8_KERNEL_PARAM_OUT);
	if (!status)
		y = lw.kernel->n_params - 1;
	const f8_shape *xs = &graph->values[node->inputs[0]].type.shape;
	f8_dim numel;
	if (!status && !f8_shape_numel(xs, &numel))
		status = f8_lower_fail(&lw, members[0], "its element count overflows");
	if (!status)
		status = f8_lower_add_size(&lw, numel, &elements);
	if (!status)
		status = f8_lower_add_symbolic_sizes(&lw, xs);
	if (!status)
		status = f8_lower_add_symbolic_sizes(&lw, &graph->values[node->inputs[1]].type.shape);
	f8_kir_id index;
	if (!status) {
		lw.kernel->grid_sizes[0] = elements;
		lw.kernel->n_grid_sizes = 1;
		status = f8_kir_begin_grid_loop(lw.kernel, f8_kir_size(lw.kernel, elements), &index,
						diag);
	}
	if (!status)
		status = emit_element(&lw, node, x, cos, sin, y, index);
	if (!status)
		status = f8_kir_end_loop(lw.kernel, NULL, 0, diag);
	return f8_lower_end(&lw, status, out);
}
