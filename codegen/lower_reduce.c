/*
 * The reduce family (codegen/lower.h): ReduceSum, ReduceMean and ReduceMax over any axes of a
 * float tensor, keepdims or not (it changes the output's shape, not its elements), each a
 * kernel of its own. A bias gradient that a GeluGrad's kernel takes (activation_grad) is
 * lower.c's and lower_tile.c's, summed there from the tiles.
 *
 * One grid iteration per output element: the output's elements are x's kept axes in order, and
 * element o reduces the R elements of x whose kept coordinates are o's, at
 * base(o) + offset(r) for r over the reduced axes' coordinates (strides of x). Two forms:
 *   - R a constant of at most UNROLLED: the R terms in registers, in order, one output element
 *     a thread (no block loop), so that a sum over a short axis (a pos_embed gradient over the
 *     batch) does not take a block of threads for a few elements;
 *   - else a block loop over the R elements with an add (or max) accumulator, which the GPU
 *     combines over the block's threads in a fixed order (codegen/llvm_lower.h).
 * Neither uses atomics across blocks: the result is the same on every run. The sum is f32,
 * where the reference sums in double and rounds once; ReduceMean divides it by R; ReduceMax
 * propagates NaN, as the reference does.
 *
 * A ReduceSum over all leading axes of a matrix (a bias gradient the kernel that makes its
 * gradient did not take: proj's and fc2's, whose gradients come out of a LayerNorm backward)
 * is lower.c's instead, by the tiles of lower_tile.c: a block reads a 64 x 64 tile along its
 * rows and writes one f32 partial per column per 16 rows, and a second kernel adds them in row
 * order. Read by the forms above, each block would walk one column down the rows, 2 bytes of
 * each 32-byte sector used (ncu, 2026-12-07: 229 us for GPT-1.3B's 16384 x 2048 gradient, 10%
 * of the copy's rate).
 */
#include "codegen/lower_internal.h" // f8_lower, f8_lower_*

#include <math.h> // INFINITY

#include "ir/ops.h" // f8_node_attr

enum { UNROLLED = 16 }; // the most terms of an output element summed in registers

static f8_kir_id i64(f8_lower *lw, int64_t value) {
	return f8_kir_const_i64(lw->kernel, value);
}

static bool is_float(f8_dtype dtype) {
	return dtype == F8_DTYPE_F32 || dtype == F8_DTYPE_BF16 || dtype == F8_DTYPE_F16;
}

/* Which axes of a tensor of `rank` dims `node` reduces (all where it names none), into
 * reduced[rank]; false when an axis is outside the rank. */
static bool reduced_axes(const f8_node *node, int rank, bool *reduced) {
	const f8_attr *axes = f8_node_attr(node, "axes");
	for (int d = 0; d < rank; d++)
		reduced[d] = axes == NULL;
	for (uint32_t i = 0; axes && i < axes->ints.n; i++) {
		int axis;
		if (!f8_axis_normalize(axes->ints.items[i], rank, false, &axis))
			return false;
		reduced[axis] = true;
	}
	return true;
}

bool f8_lower_reduce_lowers(const f8_graph *graph, const f8_node *node) {
	const f8_type *x = &graph->values[node->inputs[0]].type;
	bool reduced[F8_MAX_RANK];
	return node->n_outputs == 1 && is_float(x->dtype) &&
	       is_float(graph->values[node->outputs[0]].type.dtype) &&
	       reduced_axes(node, x->shape.rank, reduced);
}

/* `dim` in the body: a constant, or its size parameter's value. */
static f8_kir_id dim_value(f8_lower *lw, f8_dim dim) {
	if (f8_dim_is_const(dim))
		return i64(lw, f8_dim_value(dim));
	return f8_kir_size(lw->kernel, f8_lower_size_param(lw, dim));
}

/* The axes of x split into the kept ones and the reduced ones, in order, with x's strides. */
typedef struct axes_split {
	int n_kept, n_reduced;
	f8_kir_id kept_dims[F8_MAX_RANK], kept_strides[F8_MAX_RANK];
	f8_kir_id reduced_dims[F8_MAX_RANK], reduced_strides[F8_MAX_RANK];
} axes_split;

static axes_split split_axes(f8_lower *lw, const f8_shape *x, const bool *reduced) {
	axes_split s = {0};
	f8_kir_id strides[F8_MAX_RANK], stride = i64(lw, 1), dims[F8_MAX_RANK];
	for (int d = x->rank - 1; d >= 0; d--) {
		dims[d] = dim_value(lw, x->dims[d]);
		strides[d] = stride;
		stride = EMIT(lw, MUL, stride, dims[d], NONE);
	}
	for (int d = 0; d < x->rank; d++) {
		if (reduced[d]) {
			s.reduced_dims[s.n_reduced] = dims[d];
			s.reduced_strides[s.n_reduced++] = strides[d];
		} else {
			s.kept_dims[s.n_kept] = dims[d];
			s.kept_strides[s.n_kept++] = strides[d];
		}
	}
	return s;
}

/* sum_k c_k stride_k over the coordinates c_k of `index` in the row-major dims `dims`. */
static f8_kir_id strided(f8_lower *lw, f8_kir_id index, const f8_kir_id *dims,
			 const f8_kir_id *strides, int n) {
	f8_kir_id at = i64(lw, 0), rest = index;
	for (int k = n - 1; k >= 0; k--) {
		f8_kir_id c = k ? EMIT(lw, REM, rest, dims[k], NONE) : rest;
		at = EMIT(lw, ADD, at, EMIT(lw, MUL, c, strides[k], NONE), NONE);
		if (k)
			rest = EMIT(lw, DIV, rest, dims[k], NONE);
	}
	return at;
}

/* The constant number of elements one output element reduces, or -1 when it is symbolic. */
static int64_t constant_terms(const f8_shape *x, const bool *reduced) {
	int64_t terms = 1;
	for (int d = 0; d < x->rank; d++) {
		if (!reduced[d])
			continue;
		if (!f8_dim_is_const(x->dims[d]))
			return -1;
		terms *= f8_dim_value(x->dims[d]);
		if (terms > UNROLLED)
			return terms;
	}
	return terms;
}

f8_status f8_lower_reduce(const f8_graph *graph, uint32_t group, f8_node_id *members,
			  uint32_t n_members, f8_lowered_group *out, f8_diag *diag) {
	const f8_node *node = &graph->nodes[members[0]];
	const f8_shape *x = &graph->values[node->inputs[0]].type.shape;
	const f8_shape *y = &graph->values[node->outputs[0]].type.shape;
	bool reduced[F8_MAX_RANK], max = node->op == F8_OP_REDUCE_MAX;
	reduced_axes(node, x->rank, reduced);
	if (node->op == F8_OP_REDUCE_SUM && f8_lower_sums_leading_axes(graph, node)) // by tiles
		return f8_lower_fused(graph, group, members, n_members, out, diag);
	int64_t terms = constant_terms(x, reduced);
	bool unrolled = terms >= 0 && terms <= UNROLLED;
	f8_lower lw;
	f8_status status = f8_lower_begin(&lw, graph, group, members, 1, graph->groups[group].name,
					  diag);
	if (status)
		return status;
	uint32_t in, to, p_outputs, index;
	f8_dim n_outputs = f8_dim_const(1), n_terms = f8_dim_const(1);
	bool sized = f8_shape_numel(y, &n_outputs);
	for (int d = 0; sized && d < x->rank; d++)
		if (reduced[d])
			sized = f8_dim_mul(n_terms, x->dims[d], &n_terms);
	if (!sized)
		status = f8_lower_fail(&lw, members[0], "its element count overflows");
	if (!status)
		status = f8_lower_bind_input(&lw, node->inputs[0], &in);
	if (!status)
		status = f8_lower_bind_output(&lw, node->outputs[0], F8_KERNEL_PARAM_OUT, &to);
	if (!status)
		status = f8_lower_add_size(&lw, n_outputs, &p_outputs);
	if (!status && !f8_dim_is_const(n_terms))
		status = f8_lower_add_size(&lw, n_terms, &index);
	for (int d = 0; !status && d < x->rank; d++)
		if (!f8_dim_is_const(x->dims[d]))
			status = f8_lower_add_size(&lw, x->dims[d], &index);
	if (status)
		return f8_lower_end(&lw, status, out);
	lw.kernel->grid_sizes[0] = p_outputs;
	lw.kernel->n_grid_sizes = 1;
	axes_split s = split_axes(&lw, x, reduced);
	f8_kir_id R = dim_value(&lw, n_terms), o, r, result;
	status = f8_kir_begin_grid_loop(lw.kernel, f8_kir_size(lw.kernel, p_outputs), &o, diag);
	if (status)
		return f8_lower_end(&lw, status, out);
	f8_kir_id base = strided(&lw, o, s.kept_dims, s.kept_strides, s.n_kept);
	if (unrolled) { // R terms in order, from the combine's identity as the reference's
		result = f8_kir_const_f32(lw.kernel, max ? -INFINITY : 0.0);
		for (int64_t t = 0; t < terms; t++) {
			f8_kir_id at = EMIT(&lw, ADD, base, strided(&lw, i64(&lw, t), s.reduced_dims,
								   s.reduced_strides, s.n_reduced), NONE);
			f8_kir_id v = f8_kir_load(lw.kernel, in, at);
			result = max ? EMIT(&lw, MAX, result, v, NONE) : EMIT(&lw, ADD, result, v, NONE);
		}
	} else {
		status = f8_kir_begin_block_loop(lw.kernel, R, &r, diag);
		if (!status)
			status = f8_kir_add_accumulator(lw.kernel, max ? F8_KIR_COMBINE_MAX
								       : F8_KIR_COMBINE_ADD,
							F8_KIR_TYPE_F32, &result, diag);
		if (status)
			return f8_lower_end(&lw, status, out);
		f8_kir_id at = EMIT(&lw, ADD, base, strided(&lw, r, s.reduced_dims, s.reduced_strides,
							     s.n_reduced), NONE);
		f8_kir_id v = f8_kir_load(lw.kernel, in, at);
		status = f8_kir_end_loop(lw.kernel, &v, 1, diag);
	}
	if (!status && node->op == F8_OP_REDUCE_MEAN)
		result = EMIT(&lw, DIV, result, EMIT(&lw, TO_F32, R, NONE, NONE), NONE);
	if (!status && to != F8_NONE)
		status = f8_kir_store(lw.kernel, to, o, result, diag);
	if (!status)
		status = f8_kir_end_loop(lw.kernel, NULL, 0, diag);
	return f8_lower_end(&lw, status, out);
}
