/*
 * The softmax family (codegen/lower.h): Softmax and SoftmaxGrad over the last axis, each a
 * kernel of its own: what passes/attention_unfused.c's f32 attention and its backward need on
 * the GPU besides the GEMMs.
 *
 * One row a grid iteration, the row's columns by block loops (on the GPU a block a row, its
 * threads along the columns: coalesced), the row's statistics combined over the block:
 *   Softmax:     max over the row (NaN if any is, as the reference's), then sum exp(x - max),
 *                then y = exp(x - max) / sum; three reads of x, one write;
 *   SoftmaxGrad: dot = sum dy y, then dx = y (dy - dot); two reads of dy and y, one write.
 * In f32 where the reference (runtime/cpu/kernels_reduce.c, kernels_grad_nn.c) computes in
 * double and rounds once; exp is the accurate one (llvm_math.c) in both the sum and the
 * stored terms, so that a row sums to 1 within f32 rounding. A row that is all -inf is NaN,
 * as the reference's (attention-unfused never makes one).
 */
#include "codegen/lower_internal.h" // f8_lower, f8_lower_*

#include "ir/ops.h" // f8_node_attr_int, f8_axis_normalize

static bool is_float(f8_dtype dtype) {
	return dtype == F8_DTYPE_F32 || dtype == F8_DTYPE_BF16 || dtype == F8_DTYPE_F16;
}

bool f8_lower_softmax_lowers(const f8_graph *graph, const f8_node *node) {
	if (node->n_outputs != 1 || node->n_inputs < 1)
		return false;
	const f8_type *x = &graph->values[node->inputs[0]].type;
	int axis;
	if (x->shape.rank < 1 ||
	    !f8_axis_normalize(f8_node_attr_int(node, "axis", -1), x->shape.rank, false, &axis) ||
	    axis != x->shape.rank - 1)
		return false; // another axis would read with strides: not lowered yet
	for (uint32_t i = 0; i < node->n_inputs; i++)
		if (node->inputs[i] == F8_NONE || !is_float(graph->values[node->inputs[i]].type.dtype))
			return false;
	return is_float(graph->values[node->outputs[0]].type.dtype);
}

/* The row's element at column c of buffer `param`. */
static f8_kir_id at(f8_lower *lw, uint32_t param, f8_kir_id row, f8_kir_id cols, f8_kir_id c) {
	return f8_kir_load(lw->kernel, param, EMIT(lw, ADD, EMIT(lw, MUL, row, cols, NONE), c, NONE));
}

/* A block loop over the row's columns with one accumulator of `combine`: its result into
 * *result, the loop's column into *c (the caller emits the term and ends the loop). */
static f8_status begin_row_loop(f8_lower *lw, f8_kir_id cols, f8_kir_combine combine,
				f8_kir_id *c, f8_kir_id *result) {
	f8_status status = f8_kir_begin_block_loop(lw->kernel, cols, c, lw->diag);
	if (!status && combine != F8_KIR_COMBINE_COUNT)
		status = f8_kir_add_accumulator(lw->kernel, combine, F8_KIR_TYPE_F32, result,
						lw->diag);
	return status;
}

/* Softmax's row: three block loops. */
static f8_status softmax_row(f8_lower *lw, uint32_t x, uint32_t y, f8_kir_id row, f8_kir_id cols) {
	f8_kir_id c, max, sum, v;
	f8_status status = begin_row_loop(lw, cols, F8_KIR_COMBINE_MAX, &c, &max);
	if (status)
		return status;
	v = at(lw, x, row, cols, c);
	if ((status = f8_kir_end_loop(lw->kernel, &v, 1, lw->diag)))
		return status;
	if ((status = begin_row_loop(lw, cols, F8_KIR_COMBINE_ADD, &c, &sum)))
		return status;
	v = EMIT(lw, EXP, EMIT(lw, SUB, at(lw, x, row, cols, c), max, NONE), NONE, NONE);
	if ((status = f8_kir_end_loop(lw->kernel, &v, 1, lw->diag)))
		return status;
	if ((status = begin_row_loop(lw, cols, F8_KIR_COMBINE_COUNT, &c, NULL)))
		return status;
	f8_kir_id e = EMIT(lw, EXP, EMIT(lw, SUB, at(lw, x, row, cols, c), max, NONE), NONE, NONE);
	if (y != F8_NONE)
		status = f8_kir_store(lw->kernel, y, EMIT(lw, ADD, EMIT(lw, MUL, row, cols, NONE), c,
							  NONE),
				      EMIT(lw, DIV, e, sum, NONE), lw->diag);
	return status ? status : f8_kir_end_loop(lw->kernel, NULL, 0, lw->diag);
}

/* SoftmaxGrad's row: two block loops. */
static f8_status softmax_grad_row(f8_lower *lw, uint32_t dy, uint32_t y, uint32_t dx,
				  f8_kir_id row, f8_kir_id cols) {
	f8_kir_id c, dot, v;
	f8_status status = begin_row_loop(lw, cols, F8_KIR_COMBINE_ADD, &c, &dot);
	if (status)
		return status;
	v = EMIT(lw, MUL, at(lw, dy, row, cols, c), at(lw, y, row, cols, c), NONE);
	if ((status = f8_kir_end_loop(lw->kernel, &v, 1, lw->diag)))
		return status;
	if ((status = begin_row_loop(lw, cols, F8_KIR_COMBINE_COUNT, &c, NULL)))
		return status;
	f8_kir_id g = EMIT(lw, MUL, at(lw, y, row, cols, c),
			   EMIT(lw, SUB, at(lw, dy, row, cols, c), dot, NONE), NONE);
	if (dx != F8_NONE)
		status = f8_kir_store(lw->kernel, dx, EMIT(lw, ADD, EMIT(lw, MUL, row, cols, NONE), c,
							   NONE),
				      g, lw->diag);
	return status ? status : f8_kir_end_loop(lw->kernel, NULL, 0, lw->diag);
}

f8_status f8_lower_softmax(const f8_graph *graph, uint32_t group, f8_node_id *members,
			   uint32_t n_members, f8_lowered_group *out, f8_diag *diag) {
	(void)n_members; // a lone node
	const f8_node *node = &graph->nodes[members[0]];
	bool grad = node->op == F8_OP_SOFTMAX_GRAD;
	const f8_shape *x = &graph->values[node->inputs[0]].type.shape;
	f8_lower lw;
	f8_status status = f8_lower_begin(&lw, graph, group, members, 1, graph->groups[group].name,
					  diag);
	if (status)
		return status;
	f8_dim rows = f8_dim_const(1), cols = x->dims[x->rank - 1];
	for (int d = 0; !status && d + 1 < x->rank; d++)
		if (!f8_dim_mul(rows, x->dims[d], &rows))
			status = f8_lower_fail(&lw, members[0], "its row count overflows");
	uint32_t in0, in1 = F8_NONE, to, p_rows, p_cols;
	if (!status)
		status = f8_lower_bind_input(&lw, node->inputs[0], &in0);
	if (!status && grad)
		status = f8_lower_bind_input(&lw, node->inputs[1], &in1);
	if (!status)
		status = f8_lower_bind_output(&lw, node->outputs[0], F8_KERNEL_PARAM_OUT, &to);
	if (!status)
		status = f8_lower_add_size(&lw, rows, &p_rows);
	if (!status)
		status = f8_lower_add_size(&lw, cols, &p_cols);
	f8_kir_id row;
	if (!status) {
		lw.kernel->grid_sizes[0] = p_rows;
		lw.kernel->n_grid_sizes = 1;
		status = f8_kir_begin_grid_loop(lw.kernel, f8_kir_size(lw.kernel, p_rows), &row, diag);
	}
	if (!status) {
		f8_kir_id n = f8_kir_size(lw.kernel, p_cols);
		status = grad ? softmax_grad_row(&lw, in0, in1, to, row, n)
			      : softmax_row(&lw, in0, to, row, n);
	}
	if (!status)
		status = f8_kir_end_loop(lw.kernel, NULL, 0, diag);
	return f8_lower_end(&lw, status, out);
}
