/*
 * Type and shape functions of the primitive (ONNX-style) ops, and the helpers all the shape
 * functions share. Semantics follow the ONNX operator specs, with shapes and indices as
 * attributes (see ir/ops.def).
 */
#include <stdarg.h> // va_list
#include <string.h> // strcmp

#include "ir/infer_internal.h" // infer_* helpers, f8_infer_* prototypes

/* A dim meaning "to the end" in Slice ends: anything at least this large. */
#define SLICE_TO_END (INT64_MAX / 2)

f8_status f8_infer_fail(f8_diag *diag, const char *format, ...) {
	va_list args;
	va_start(args, format);
	f8_diag_setv(diag, F8_ERR_INVALID, format, args);
	va_end(args);
	return F8_ERR_INVALID;
}

f8_status f8_infer_require_float(const f8_type *type, const char *what, f8_diag *diag) {
	if (!f8_dtype_is_float(type->dtype) || type->dtype == F8_DTYPE_E8M0)
		return f8_infer_fail(diag, "%s must be a float tensor, not %s", what,
				  f8_dtype_name(type->dtype));
	return F8_OK;
}

f8_status f8_infer_require_integer(const f8_type *type, const char *what, f8_diag *diag) {
	if (!f8_dtype_is_integer(type->dtype))
		return f8_infer_fail(diag, "%s must be an integer tensor, not %s", what,
				  f8_dtype_name(type->dtype));
	return F8_OK;
}

f8_status f8_infer_require_vocab_start(const f8_type *start, f8_diag *diag) {
	f8_status status = f8_infer_require_integer(start, "the vocabulary start", diag);
	if (!status && (start->shape.rank != 1 || !f8_dim_is_const(start->shape.dims[0]) ||
			f8_dim_value(start->shape.dims[0]) != 1))
		return f8_infer_fail(diag, "the vocabulary start must have shape [1]");
	return status;
}

f8_status f8_infer_require_same_dtype(const f8_type *a, const char *a_what, const f8_type *b,
				   const char *b_what, f8_diag *diag) {
	if (a->dtype != b->dtype)
		return f8_infer_fail(diag, "%s is %s but %s is %s; they must have the same dtype",
				  a_what, f8_dtype_name(a->dtype), b_what, f8_dtype_name(b->dtype));
	return F8_OK;
}

f8_status f8_infer_common_dtype(const f8_graph *graph, const f8_node *node, f8_dtype *out,
			     f8_diag *diag) {
	const f8_type *first = infer_input(graph, node, 0);
	for (uint32_t i = 1; i < node->n_inputs; i++) {
		const f8_type *other = infer_input(graph, node, i);
		if (other->dtype != first->dtype)
			return f8_infer_fail(diag, "input 0 is %s but input %u is %s; they must have "
						"the same dtype", f8_dtype_name(first->dtype), i,
					  f8_dtype_name(other->dtype));
	}
	*out = first->dtype;
	return F8_OK;
}

f8_status f8_infer_broadcast_shapes(const f8_graph *graph, const f8_shape *a, const f8_shape *b,
			  f8_shape *out, f8_diag *diag) {
	f8_shape result = {.rank = a->rank > b->rank ? a->rank : b->rank};
	for (int i = 0; i < result.rank; i++) {
		int ia = i - (result.rank - a->rank), ib = i - (result.rank - b->rank);
		f8_dim da = ia >= 0 ? a->dims[ia] : f8_dim_const(1);
		f8_dim db = ib >= 0 ? b->dims[ib] : f8_dim_const(1);
		if (f8_dim_equal(da, db) || f8_dim_equal(db, f8_dim_const(1))) {
			result.dims[i] = da;
		} else if (f8_dim_equal(da, f8_dim_const(1))) {
			result.dims[i] = db;
		} else {
			char sa[64], sb[64];
			return f8_infer_fail(diag, "cannot broadcast dimension %s with %s (axis %d of "
						"the result)", f8_dim_format(graph, da, sa, sizeof sa),
					  f8_dim_format(graph, db, sb, sizeof sb), i);
		}
	}
	*out = result;
	return F8_OK;
}

f8_status f8_infer_axis(int64_t axis, int rank, bool allow_end, const char *what, int *out,
		     f8_diag *diag) {
	if (!f8_axis_normalize(axis, rank, allow_end, out))
		return f8_infer_fail(diag, "%s %lld is out of range for rank %d", what, (long long)axis,
				  rank);
	return F8_OK;
}

f8_status f8_infer_require_flag(const f8_node *node, const char *name, f8_diag *diag) {
	int64_t value = f8_node_attr_int(node, name, 0);
	if (value != 0 && value != 1)
		return f8_infer_fail(diag, "attribute %s must be 0 or 1, not %lld", name, (long long)value);
	return F8_OK;
}

f8_status f8_infer_require_choice(const f8_node *node, const char *name, const char *const *choices,
			       f8_diag *diag) {
	const char *value = f8_node_attr_string(node, name, NULL);
	if (!value)
		return F8_OK;
	for (const char *const *choice = choices; *choice; choice++)
		if (strcmp(value, *choice) == 0)
			return F8_OK;
	return f8_infer_fail(diag, "attribute %s is \"%s\", which is not one of its values", name, value);
}

/* Elementwise ops. */

f8_status f8_infer_broadcast(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			     f8_diag *diag) {
	f8_status status = f8_infer_common_dtype(graph, node, &outputs[0].dtype, diag);
	if (status)
		return status;
	if (outputs[0].dtype == F8_DTYPE_BOOL)
		return f8_infer_fail(diag, "arithmetic on bool tensors is not defined");
	return f8_infer_broadcast_shapes(graph, &infer_input(graph, node, 0)->shape,
			       &infer_input(graph, node, 1)->shape, &outputs[0].shape, diag);
}

f8_status f8_infer_unary(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			 f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0);
	if (x->dtype == F8_DTYPE_BOOL)
		return f8_infer_fail(diag, "the input must be numeric, not bool");
	outputs[0] = *x;
	return F8_OK;
}

f8_status f8_infer_unary_float(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			       f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0);
	f8_status status = f8_infer_require_float(x, "the input", diag);
	if (status)
		return status;
	outputs[0] = *x;
	return F8_OK;
}

f8_status f8_infer_dropout(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			   f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0);
	double ratio = f8_node_attr_float(node, "ratio", 0.5);
	if (!(ratio >= 0.0 && ratio < 1.0))
		return f8_infer_fail(diag, "attribute ratio must be in [0, 1), not %g", ratio);
	f8_status status = f8_infer_require_float(x, "the input", diag);
	if (status)
		return status;
	outputs[0] = *x;
	if (node->n_outputs > 1)
		outputs[1] = (f8_type){.dtype = F8_DTYPE_BOOL, .shape = x->shape};
	return F8_OK;
}

f8_status f8_infer_is_nan(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			  f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0);
	f8_status status = f8_infer_require_float(x, "the input", diag);
	if (status)
		return status;
	outputs[0] = (f8_type){.dtype = F8_DTYPE_BOOL, .shape = x->shape};
	return F8_OK;
}

f8_status f8_infer_compare(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			   f8_diag *diag) {
	f8_dtype dtype;
	f8_status status = f8_infer_common_dtype(graph, node, &dtype, diag);
	if (status)
		return status;
	outputs[0].dtype = F8_DTYPE_BOOL;
	return f8_infer_broadcast_shapes(graph, &infer_input(graph, node, 0)->shape,
			       &infer_input(graph, node, 1)->shape, &outputs[0].shape, diag);
}

f8_status f8_infer_logical(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			   f8_diag *diag) {
	for (uint32_t i = 0; i < node->n_inputs; i++)
		if (infer_input(graph, node, i)->dtype != F8_DTYPE_BOOL)
			return f8_infer_fail(diag, "input %u must be bool, not %s", i,
					  f8_dtype_name(infer_input(graph, node, i)->dtype));
	outputs[0] = *infer_input(graph, node, 0);
	if (node->n_inputs == 2)
		return f8_infer_broadcast_shapes(graph, &infer_input(graph, node, 0)->shape,
				       &infer_input(graph, node, 1)->shape, &outputs[0].shape, diag);
	return F8_OK;
}

f8_status f8_infer_where(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			 f8_diag *diag) {
	const f8_type *cond = infer_input(graph, node, 0);
	const f8_type *x = infer_input(graph, node, 1), *y = infer_input(graph, node, 2);
	if (cond->dtype != F8_DTYPE_BOOL)
		return f8_infer_fail(diag, "the condition must be bool, not %s", f8_dtype_name(cond->dtype));
	f8_status status = f8_infer_require_same_dtype(x, "input 1", y, "input 2", diag);
	if (!status)
		status = f8_infer_broadcast_shapes(graph, &x->shape, &y->shape, &outputs[0].shape, diag);
	if (!status)
		status = f8_infer_broadcast_shapes(graph, &cond->shape, &outputs[0].shape, &outputs[0].shape, diag);
	outputs[0].dtype = x->dtype;
	return status;
}

f8_status f8_infer_cast(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			f8_diag *diag) {
	f8_dtype to = f8_node_attr_dtype(node, "to", F8_DTYPE_UNDEFINED);
	if (f8_node_attr(node, "saturate") && !f8_dtype_is_fp8(to))
		return f8_infer_fail(diag, "attribute saturate applies to casts to e4m3 or e5m2 only");
	f8_status status = f8_infer_require_flag(node, "saturate", diag);
	if (status)
		return status;
	outputs[0] = (f8_type){.dtype = to, .shape = infer_input(graph, node, 0)->shape};
	return F8_OK;
}

f8_status f8_infer_cast_like(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			     f8_diag *diag) {
	f8_status status = f8_infer_require_flag(node, "saturate", diag);
	outputs[0] = (f8_type){.dtype = infer_input(graph, node, 1)->dtype,
			       .shape = infer_input(graph, node, 0)->shape};
	return status;
}

/* Matrix products. */

f8_status f8_infer_matmul(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			  f8_diag *diag) {
	const f8_type *a = infer_input(graph, node, 0), *b = infer_input(graph, node, 1);
	f8_status status = f8_infer_require_same_dtype(a, "A", b, "B", diag);
	if (status)
		return status;
	if (a->shape.rank == 0 || b->shape.rank == 0)
		return f8_infer_fail(diag, "MatMul operands must have rank >= 1");
	// ONNX (NumPy) semantics: a vector operand gains a unit dim that the result drops again.
	f8_shape sa = a->shape, sb = b->shape;
	if (sa.rank == 1) {
		sa.dims[1] = sa.dims[0];
		sa.dims[0] = f8_dim_const(1);
		sa.rank = 2;
	}
	if (sb.rank == 1) {
		sb.dims[1] = f8_dim_const(1);
		sb.rank = 2;
	}
	f8_dim k_a = sa.dims[sa.rank - 1], k_b = sb.dims[sb.rank - 2];
	if (!f8_dim_equal(k_a, k_b)) {
		char s1[64], s2[64];
		return f8_infer_fail(diag, "inner dimensions differ: A has K = %s, B has K = %s",
				  f8_dim_format(graph, k_a, s1, sizeof s1),
				  f8_dim_format(graph, k_b, s2, sizeof s2));
	}
	f8_shape batch_a = {.rank = (uint8_t)(sa.rank - 2)}, batch_b = {.rank = (uint8_t)(sb.rank - 2)};
	memcpy(batch_a.dims, sa.dims, batch_a.rank * sizeof(f8_dim));
	memcpy(batch_b.dims, sb.dims, batch_b.rank * sizeof(f8_dim));
	f8_shape result;
	if ((status = f8_infer_broadcast_shapes(graph, &batch_a, &batch_b, &result, diag)))
		return status;
	if (a->shape.rank > 1)
		result.dims[result.rank++] = sa.dims[sa.rank - 2];
	if (b->shape.rank > 1)
		result.dims[result.rank++] = sb.dims[sb.rank - 1];
	outputs[0] = (f8_type){.dtype = a->dtype, .shape = result};
	return F8_OK;
}

f8_status f8_infer_gemm(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			f8_diag *diag) {
	const f8_type *a = infer_input(graph, node, 0), *b = infer_input(graph, node, 1);
	const f8_type *c = infer_input(graph, node, 2);
	f8_status status = f8_infer_require_same_dtype(a, "A", b, "B", diag);
	if (!status)
		status = f8_infer_require_flag(node, "transA", diag);
	if (!status)
		status = f8_infer_require_flag(node, "transB", diag);
	if (status)
		return status;
	if (a->shape.rank != 2 || b->shape.rank != 2)
		return f8_infer_fail(diag, "Gemm operands must be matrices (rank 2)");
	bool trans_a = f8_node_attr_int(node, "transA", 0), trans_b = f8_node_attr_int(node, "transB", 0);
	f8_dim m = a->shape.dims[trans_a], k_a = a->shape.dims[!trans_a];
	f8_dim k_b = b->shape.dims[trans_b], n = b->shape.dims[!trans_b];
	if (!f8_dim_equal(k_a, k_b)) {
		char s1[64], s2[64];
		return f8_infer_fail(diag, "inner dimensions differ: A has K = %s, B has K = %s",
				  f8_dim_format(graph, k_a, s1, sizeof s1),
				  f8_dim_format(graph, k_b, s2, sizeof s2));
	}
	outputs[0] = (f8_type){.dtype = a->dtype, .shape = {.rank = 2, .dims = {m, n}}};
	if (c) {
		f8_shape broadcast;
		if ((status = f8_infer_require_same_dtype(a, "A", c, "C", diag)) ||
		    (status = f8_infer_broadcast_shapes(graph, &outputs[0].shape, &c->shape, &broadcast, diag)))
			return status;
		if (!f8_shape_equal(&broadcast, &outputs[0].shape))
			return f8_infer_fail(diag, "C must broadcast to the (M, N) result");
	}
	return F8_OK;
}

/* Indexing and shape manipulation. */

f8_status f8_infer_gather(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			  f8_diag *diag) {
	const f8_type *data = infer_input(graph, node, 0), *indices = infer_input(graph, node, 1);
	int axis;
	f8_status status = f8_infer_require_integer(indices, "indices", diag);
	if (!status)
		status = f8_infer_axis(f8_node_attr_int(node, "axis", 0), data->shape.rank, false,
				    "axis", &axis, diag);
	if (status)
		return status;
	if (data->shape.rank - 1 + indices->shape.rank > F8_MAX_RANK)
		return f8_infer_fail(diag, "the result would have rank > %d", F8_MAX_RANK);
	f8_shape result = {0};
	for (int i = 0; i < axis; i++)
		result.dims[result.rank++] = data->shape.dims[i];
	for (int i = 0; i < indices->shape.rank; i++)
		result.dims[result.rank++] = indices->shape.dims[i];
	for (int i = axis + 1; i < data->shape.rank; i++)
		result.dims[result.rank++] = data->shape.dims[i];
	outputs[0] = (f8_type){.dtype = data->dtype, .shape = result};
	return F8_OK;
}

f8_status f8_infer_reshape(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			   f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0);
	const f8_attr *shape = f8_node_attr(node, "shape");
	f8_status status = f8_infer_require_flag(node, "allowzero", diag);
	if (status)
		return status;
	bool allow_zero = f8_node_attr_int(node, "allowzero", 0);
	if (shape->dims.n > F8_MAX_RANK)
		return f8_infer_fail(diag, "attribute shape has rank %u > %d", shape->dims.n, F8_MAX_RANK);
	f8_shape result = {.rank = (uint8_t)shape->dims.n};
	f8_dim known = f8_dim_const(1), total;
	int infer_at = -1;
	for (uint32_t i = 0; i < shape->dims.n; i++) {
		f8_dim dim = shape->dims.items[i];
		if (f8_dim_equal(dim, f8_dim_const(-1))) {
			if (infer_at >= 0)
				return f8_infer_fail(diag, "attribute shape has more than one -1");
			infer_at = (int)i;
			continue;
		}
		if (f8_dim_equal(dim, f8_dim_const(0)) && !allow_zero) {
			if (i >= x->shape.rank)
				return f8_infer_fail(diag, "shape[%u] = 0 copies a dimension the input "
							"(rank %d) does not have", i, x->shape.rank);
			dim = x->shape.dims[i];
		} else if (!f8_dim_proven_nonnegative(dim)) {
			return f8_infer_fail(diag, "shape[%u] is negative", i);
		}
		result.dims[i] = dim;
		if (!f8_dim_mul(known, dim, &known))
			return f8_infer_fail(diag, "the element count of attribute shape overflows");
	}
	if (!f8_shape_numel(&x->shape, &total))
		return f8_infer_fail(diag, "the input's element count overflows");
	if (infer_at >= 0 && !f8_dim_div(total, known, &result.dims[infer_at])) {
		char s1[64], s2[64];
		return f8_infer_fail(diag, "cannot infer the -1 in shape: %s elements do not divide "
					"into parts of %s", f8_dim_format(graph, total, s1, sizeof s1),
				  f8_dim_format(graph, known, s2, sizeof s2));
	}
	f8_dim result_total;
	if (!f8_shape_numel(&result, &result_total) || !f8_dim_equal(total, result_total)) {
		char s1[64], s2[64], s3[160];
		return f8_infer_fail(diag, "cannot reshape %s (%s elements) to %s elements",
				  f8_type_format(graph, x, s3, sizeof s3),
				  f8_dim_format(graph, total, s1, sizeof s1),
				  f8_dim_format(graph, result_total, s2, sizeof s2));
	}
	outputs[0] = (f8_type){.dtype = x->dtype, .shape = result};
	return F8_OK;
}

/* Reads the INTS attribute `name` as axes of a tensor of `rank`, normalized, without repeats. */
static f8_status read_axes(const f8_node *node, const char *name, int rank, bool *is_axis,
			   f8_diag *diag) {
	const f8_attr *axes = f8_node_attr(node, name);
	for (int i = 0; i < F8_MAX_RANK + 1; i++)
		is_axis[i] = false;
	for (uint32_t i = 0; axes && i < axes->ints.n; i++) {
		int axis;
		f8_status status = f8_infer_axis(axes->ints.items[i], rank, false, name, &axis, diag);
		if (status)
			return status;
		if (is_axis[axis])
			return f8_infer_fail(diag, "attribute %s names axis %d twice", name, axis);
		is_axis[axis] = true;
	}
	return F8_OK;
}

f8_status f8_infer_transpose(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			     f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0);
	const f8_attr *perm = f8_node_attr(node, "perm");
	int rank = x->shape.rank;
	if (perm && perm->ints.n != (uint32_t)rank)
		return f8_infer_fail(diag, "attribute perm has %u entries for an input of rank %d",
				  perm->ints.n, rank);
	bool seen[F8_MAX_RANK] = {false};
	outputs[0] = (f8_type){.dtype = x->dtype, .shape = {.rank = (uint8_t)rank}};
	for (int i = 0; i < rank; i++) {
		int64_t from = perm ? perm->ints.items[i] : rank - 1 - i;
		if (from < 0 || from >= rank || seen[from])
			return f8_infer_fail(diag, "attribute perm is not a permutation of 0..%d", rank - 1);
		seen[from] = true;
		outputs[0].shape.dims[i] = x->shape.dims[from];
	}
	return F8_OK;
}

f8_status f8_infer_unsqueeze(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			     f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0);
	const f8_attr *axes = f8_node_attr(node, "axes");
	int rank = x->shape.rank + (int)axes->ints.n;
	if (rank > F8_MAX_RANK)
		return f8_infer_fail(diag, "the result would have rank %d > %d", rank, F8_MAX_RANK);
	bool is_axis[F8_MAX_RANK + 1];
	f8_status status = read_axes(node, "axes", rank, is_axis, diag);
	if (status)
		return status;
	outputs[0] = (f8_type){.dtype = x->dtype, .shape = {.rank = (uint8_t)rank}};
	for (int i = 0, from = 0; i < rank; i++)
		outputs[0].shape.dims[i] = is_axis[i] ? f8_dim_const(1) : x->shape.dims[from++];
	return F8_OK;
}

f8_status f8_infer_squeeze(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			   f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0);
	bool is_axis[F8_MAX_RANK + 1];
	f8_status status = read_axes(node, "axes", x->shape.rank, is_axis, diag);
	if (status)
		return status;
	bool all_ones = !f8_node_attr(node, "axes");
	outputs[0] = (f8_type){.dtype = x->dtype};
	for (int i = 0; i < x->shape.rank; i++) {
		bool one = f8_dim_equal(x->shape.dims[i], f8_dim_const(1));
		if (is_axis[i] && !one)
			return f8_infer_fail(diag, "cannot squeeze axis %d: its size is not 1", i);
		if (!(is_axis[i] || (all_ones && one)))
			outputs[0].shape.dims[outputs[0].shape.rank++] = x->shape.dims[i];
	}
	return F8_OK;
}

f8_status f8_infer_concat(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			  f8_diag *diag) {
	const f8_type *first = infer_input(graph, node, 0);
	int axis;
	f8_status status = f8_infer_common_dtype(graph, node, &outputs[0].dtype, diag);
	if (!status)
		status = f8_infer_axis(f8_node_attr_int(node, "axis", 0), first->shape.rank, false,
				    "axis", &axis, diag);
	if (status)
		return status;
	outputs[0].shape = first->shape;
	for (uint32_t i = 1; i < node->n_inputs; i++) {
		const f8_shape *shape = &infer_input(graph, node, i)->shape;
		if (shape->rank != first->shape.rank)
			return f8_infer_fail(diag, "input %u has rank %d, input 0 has rank %d", i,
					  shape->rank, first->shape.rank);
		for (int d = 0; d < shape->rank; d++) {
			if (d == axis)
				continue;
			if (!f8_dim_equal(shape->dims[d], first->shape.dims[d]))
				return f8_infer_fail(diag, "input %u differs from input 0 in dimension %d, "
							"which is not the concat axis", i, d);
		}
		f8_dim *sum = &outputs[0].shape.dims[axis];
		if (!f8_dim_add(*sum, shape->dims[axis], sum))
			return f8_infer_fail(diag, "the concatenated size along axis %d is not a single "
						"product of sizes (f8c dims are monomials)", axis);
	}
	return F8_OK;
}

f8_status f8_infer_split(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			 f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0);
	const f8_attr *split = f8_node_attr(node, "split");
	int axis;
	f8_status status = f8_infer_axis(f8_node_attr_int(node, "axis", 0), x->shape.rank, false,
				      "axis", &axis, diag);
	if (status)
		return status;
	f8_dim whole = x->shape.dims[axis], sum = f8_dim_const(0), equal_part;
	if (split && split->dims.n != node->n_outputs)
		return f8_infer_fail(diag, "attribute split has %u sizes for %u outputs", split->dims.n,
				  node->n_outputs);
	if (!split && !f8_dim_div(whole, f8_dim_const(node->n_outputs), &equal_part)) {
		char s[64];
		return f8_infer_fail(diag, "dimension %d (%s) does not split into %u equal parts", axis,
				  f8_dim_format(graph, whole, s, sizeof s), node->n_outputs);
	}
	for (uint32_t i = 0; i < node->n_outputs; i++) {
		f8_dim part = split ? split->dims.items[i] : equal_part;
		if (!f8_dim_proven_nonnegative(part))
			return f8_infer_fail(diag, "split size %u is negative", i);
		if (!f8_dim_add(sum, part, &sum))
			return f8_infer_fail(diag, "the split sizes do not add up to one size");
		outputs[i] = *x;
		outputs[i].shape.dims[axis] = part;
	}
	if (!f8_dim_equal(sum, whole)) {
		char s1[64], s2[64];
		return f8_infer_fail(diag, "the split sizes add up to %s, but dimension %d is %s",
				  f8_dim_format(graph, sum, s1, sizeof s1), axis,
				  f8_dim_format(graph, whole, s2, sizeof s2));
	}
	return F8_OK;
}

/*
 * The length of x[start:end] along a symbolic dim of `size`, step 1: negative constant bounds
 * count from the end, ends past the end clamp to it. The bounds must be provably ordered
 * (0 <= start <= end <= size); what cannot be proven is an error, not a guess.
 */
static bool symbolic_slice_length(f8_dim size, f8_dim start, f8_dim end, f8_dim *out) {
	if (f8_dim_is_const(start) && f8_dim_value(start) < 0 && !f8_dim_add(size, start, &start))
		return false;
	if (f8_dim_is_const(end) && f8_dim_value(end) >= SLICE_TO_END)
		end = size;
	else if (f8_dim_is_const(end) && f8_dim_value(end) < 0 && !f8_dim_add(size, end, &end))
		return false;
	if (!f8_dim_proven_le(end, size)) {
		if (f8_dim_proven_le(size, end))
			end = size;
		else if (!(f8_dim_is_const(size) && !f8_dim_is_const(end)))
			return false;
		// else x[:seq] of a table sized for the longest sequence: seq is taken to fit, as
		// every exporter's position tables assume (runtime/executor.c checks it when seq
		// is bound at run time).
	}
	if (!f8_dim_proven_nonnegative(start))
		return false;
	if (f8_dim_proven_le(end, start)) {
		*out = f8_dim_const(0);
		return true;
	}
	return f8_dim_proven_le(start, end) && f8_dim_sub(end, start, out);
}

f8_status f8_infer_slice(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			 f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0);
	const f8_attr *starts = f8_node_attr(node, "starts"), *ends = f8_node_attr(node, "ends");
	const f8_attr *axes = f8_node_attr(node, "axes"), *steps = f8_node_attr(node, "steps");
	uint32_t n = starts->dims.n;
	if (ends->dims.n != n || (axes && axes->ints.n != n) || (steps && steps->ints.n != n))
		return f8_infer_fail(diag, "attributes starts, ends, axes and steps must have the same "
					"length");
	bool seen[F8_MAX_RANK] = {false};
	outputs[0] = *x;
	for (uint32_t i = 0; i < n; i++) {
		int axis;
		f8_status status = f8_infer_axis(axes ? axes->ints.items[i] : (int64_t)i, x->shape.rank,
					      false, "axes", &axis, diag);
		if (status)
			return status;
		if (seen[axis])
			return f8_infer_fail(diag, "attribute axes names axis %d twice", axis);
		seen[axis] = true;
		int64_t step = steps ? steps->ints.items[i] : 1;
		f8_dim start = starts->dims.items[i], end = ends->dims.items[i];
		f8_dim size = x->shape.dims[axis], *out = &outputs[0].shape.dims[axis];
		if (step == 0)
			return f8_infer_fail(diag, "steps[%u] is 0", i);
		if (f8_dim_is_const(size) && f8_dim_is_const(start) && f8_dim_is_const(end)) {
			int64_t from = f8_dim_value(start), to = f8_dim_value(end);
			*out = f8_dim_const(f8_slice_clamp(f8_dim_value(size), &from, &to, step));
		} else if (step != 1 || !symbolic_slice_length(size, start, end, out)) {
			char s1[64], s2[64], s3[64];
			return f8_infer_fail(diag, "cannot slice dimension %d (%s) from %s to %s with step "
						"%lld: the bounds are not provably in order", axis,
					  f8_dim_format(graph, size, s1, sizeof s1),
					  f8_dim_format(graph, start, s2, sizeof s2),
					  f8_dim_format(graph, end, s3, sizeof s3), (long long)step);
		}
	}
	return F8_OK;
}

f8_status f8_infer_expand(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			  f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0);
	const f8_attr *shape = f8_node_attr(node, "shape");
	if (shape->dims.n > F8_MAX_RANK)
		return f8_infer_fail(diag, "attribute shape has rank %u > %d", shape->dims.n, F8_MAX_RANK);
	f8_shape target = {.rank = (uint8_t)shape->dims.n};
	memcpy(target.dims, shape->dims.items, shape->dims.n * sizeof(f8_dim));
	outputs[0].dtype = x->dtype;
	return f8_infer_broadcast_shapes(graph, &x->shape, &target, &outputs[0].shape, diag);
}

/* Makes a concrete shape from DIMS attribute `name`, rejecting negative sizes. */
static f8_status dims_to_shape(const f8_node *node, const char *name, f8_shape *out,
			       f8_diag *diag) {
	const f8_attr *dims = f8_node_attr(node, name);
	if (dims->dims.n > F8_MAX_RANK)
		return f8_infer_fail(diag, "attribute %s has rank %u > %d", name, dims->dims.n, F8_MAX_RANK);
	*out = (f8_shape){.rank = (uint8_t)dims->dims.n};
	for (uint32_t i = 0; i < dims->dims.n; i++) {
		if (!f8_dim_proven_nonnegative(dims->dims.items[i]))
			return f8_infer_fail(diag, "attribute %s has a negative size", name);
		out->dims[i] = dims->dims.items[i];
	}
	return F8_OK;
}

f8_status f8_infer_constant(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			    f8_diag *diag) {
	(void)graph, (void)diag;
	const f8_tensor_data *value = f8_node_attr(node, "value")->tensor;
	outputs[0] = (f8_type){.dtype = value->dtype, .shape = value->shape};
	return F8_OK;
}

f8_status f8_infer_constant_of_shape(const f8_graph *graph, const f8_node *node,
				     f8_type *outputs, f8_diag *diag) {
	(void)graph;
	const f8_attr *value = f8_node_attr(node, "value");
	f8_dim numel = f8_dim_const(1);
	if (value && (!f8_shape_numel(&value->tensor->shape, &numel) ||
		      !f8_dim_equal(numel, f8_dim_const(1))))
		return f8_infer_fail(diag, "attribute value must hold exactly one element");
	outputs[0].dtype = value ? value->tensor->dtype : F8_DTYPE_F32;
	return dims_to_shape(node, "shape", &outputs[0].shape, diag);
}

f8_status f8_infer_shape(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			 f8_diag *diag) {
	(void)diag;
	int rank = infer_input(graph, node, 0)->shape.rank;
	int64_t start = f8_node_attr_int(node, "start", 0), end = f8_node_attr_int(node, "end", rank);
	int64_t length = f8_slice_clamp(rank, &start, &end, 1);
	outputs[0] = (f8_type){.dtype = F8_DTYPE_I64, .shape = {.rank = 1, .dims = {f8_dim_const(length)}}};
	return F8_OK;
}

f8_status f8_infer_range(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			 f8_diag *diag) {
	int64_t start = f8_node_attr_int(node, "start", 0), delta = f8_node_attr_int(node, "delta", 1);
	f8_dim limit = f8_node_attr(node, "limit")->dim;
	f8_dtype dtype = f8_node_attr_dtype(node, "dtype", F8_DTYPE_I64);
	if (delta == 0)
		return f8_infer_fail(diag, "attribute delta is 0");
	if (dtype == F8_DTYPE_BOOL || dtype == F8_DTYPE_E8M0)
		return f8_infer_fail(diag, "attribute dtype must be numeric");
	f8_dim length;
	if (f8_dim_is_const(limit)) {
		// max(0, ceil((limit - start) / delta)), for either sign of delta, in unsigned
		// arithmetic: the span and |delta| may not fit an int64_t.
		int64_t end = f8_dim_value(limit);
		bool up = delta > 0;
		uint64_t step = up ? (uint64_t)delta : 0 - (uint64_t)delta;
		bool empty = up ? end <= start : end >= start;
		uint64_t span = up ? (uint64_t)end - (uint64_t)start : (uint64_t)start - (uint64_t)end;
		uint64_t count = empty ? 0 : 1 + (span - 1) / step;
		if (count > (uint64_t)INT64_MAX)
			return f8_infer_fail(diag, "the Range has more elements than a tensor can");
		length = f8_dim_const((int64_t)count);
	} else if (delta != 1 || !f8_dim_sub(limit, f8_dim_const(start), &length) ||
		   !f8_dim_proven_nonnegative(length)) {
		char s[64];
		return f8_infer_fail(diag, "Range from %lld to symbolic %s needs delta 1 and a limit "
					"provably >= start", (long long)start,
				  f8_dim_format(graph, limit, s, sizeof s));
	}
	outputs[0] = (f8_type){.dtype = dtype, .shape = {.rank = 1, .dims = {length}}};
	return F8_OK;
}

f8_status f8_infer_trilu(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			 f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0);
	if (x->shape.rank < 2)
		return f8_infer_fail(diag, "Trilu needs rank >= 2, the input has rank %d", x->shape.rank);
	outputs[0] = *x;
	return f8_infer_require_flag(node, "upper", diag);
}

f8_status f8_infer_softmax(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			   f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0);
	int axis;
	f8_status status = f8_infer_require_float(x, "the input", diag);
	if (!status)
		status = f8_infer_axis(f8_node_attr_int(node, "axis", -1), x->shape.rank, false, "axis",
				    &axis, diag);
	outputs[0] = *x;
	return status;
}

f8_status f8_infer_reduce(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			  f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0);
	bool is_axis[F8_MAX_RANK + 1];
	f8_status status = f8_infer_require_flag(node, "keepdims", diag);
	if (!status)
		status = read_axes(node, "axes", x->shape.rank, is_axis, diag);
	if (status)
		return status;
	if (x->dtype == F8_DTYPE_BOOL)
		return f8_infer_fail(diag, "the input must be numeric, not bool");
	bool all = !f8_node_attr(node, "axes"), keep = f8_node_attr_int(node, "keepdims", 1);
	outputs[0] = (f8_type){.dtype = x->dtype};
	for (int i = 0; i < x->shape.rank; i++) {
		if (!(all || is_axis[i]))
			outputs[0].shape.dims[outputs[0].shape.rank++] = x->shape.dims[i];
		else if (keep)
			outputs[0].shape.dims[outputs[0].shape.rank++] = f8_dim_const(1);
	}
	return F8_OK;
}

/* GatherND: data (r dims), indices (q dims, the last of constant size m) with batch_dims b
 * -> indices.shape[:-1] + data.shape[b+m:]. */
f8_status f8_infer_gather_nd(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			     f8_diag *diag) {
	const f8_type *data = infer_input(graph, node, 0), *indices = infer_input(graph, node, 1);
	int64_t batch_dims = f8_node_attr_int(node, "batch_dims", 0);
	f8_status status = f8_infer_require_integer(indices, "indices", diag);
	if (status)
		return status;
	int r = data->shape.rank, q = indices->shape.rank;
	if (r < 1 || q < 1)
		return f8_infer_fail(diag, "data and indices must have rank >= 1");
	if (batch_dims < 0 || batch_dims >= (int64_t)(r < q ? r : q))
		return f8_infer_fail(diag, "attribute batch_dims is %lld; it must be in [0, %d)",
				  (long long)batch_dims, r < q ? r : q);
	f8_dim last = indices->shape.dims[q - 1];
	if (!f8_dim_is_const(last) || f8_dim_value(last) < 1 ||
	    f8_dim_value(last) > r - batch_dims) {
		char s[64];
		return f8_infer_fail(diag, "the last dimension of indices (%s) must be a constant in "
					"[1, %lld]", f8_dim_format(graph, last, s, sizeof s),
				  (long long)(r - batch_dims));
	}
	for (int i = 0; i < batch_dims; i++)
		if (!f8_dim_equal(data->shape.dims[i], indices->shape.dims[i]))
			return f8_infer_fail(diag, "batch dimension %d differs between data and indices", i);
	int m = (int)f8_dim_value(last);
	if (q - 1 + r - (int)batch_dims - m > F8_MAX_RANK)
		return f8_infer_fail(diag, "the result would have rank > %d", F8_MAX_RANK);
	f8_shape result = {0};
	for (int i = 0; i < q - 1; i++)
		result.dims[result.rank++] = indices->shape.dims[i];
	for (int i = (int)batch_dims + m; i < r; i++)
		result.dims[result.rank++] = data->shape.dims[i];
	outputs[0] = (f8_type){.dtype = data->dtype, .shape = result};
	return F8_OK;
}

f8_status f8_infer_cum_sum(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			   f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0);
	int axis;
	f8_status status = f8_infer_axis(f8_node_attr_int(node, "axis", 0), x->shape.rank, false,
				      "axis", &axis, diag);
	if (!status)
		status = f8_infer_require_flag(node, "exclusive", diag);
	if (!status)
		status = f8_infer_require_flag(node, "reverse", diag);
	if (!status)
		status = f8_infer_unary(graph, node, outputs, diag);
	return status;
}

/* TopK: the k largest (largest=1, the default) or smallest elements along `axis` and their
 * indices (i64), the axis k long; k at most the axis where both are known. */
f8_status f8_infer_top_k(const f8_graph *graph, const f8_node *node, f8_type *outputs,
			 f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0);
	int axis;
	int64_t k = f8_node_attr_int(node, "k", 0);
	f8_status status = f8_infer_require_float(x, "TopK's input (f8c ranks floats only)", diag);
	if (!status)
		status = f8_infer_axis(f8_node_attr_int(node, "axis", -1), x->shape.rank, false,
				       "axis", &axis, diag);
	if (!status)
		status = f8_infer_require_flag(node, "largest", diag);
	if (!status)
		status = f8_infer_require_flag(node, "sorted", diag);
	if (status)
		return status;
	if (k < 0)
		return f8_infer_fail(diag, "k is %lld: it must not be negative", (long long)k);
	f8_dim size = x->shape.dims[axis];
	if (f8_dim_is_const(size) && k > f8_dim_value(size))
		return f8_infer_fail(diag, "k is %lld, more than the %lld elements along axis %d",
				     (long long)k, (long long)f8_dim_value(size), axis);
	f8_shape shape = x->shape;
	shape.dims[axis] = f8_dim_const(k);
	outputs[0] = (f8_type){.dtype = x->dtype, .shape = shape};
	outputs[1] = (f8_type){.dtype = F8_DTYPE_I64, .shape = shape};
	return F8_OK;
}

/* The scale of QuantizeLinear / DequantizeLinear: a scalar (per tensor), one per slice along
 * `axis` (per axis), or, with block_size, x's shape with that axis divided into blocks. */
static f8_status linear_quantization_scale(const f8_graph *graph, const f8_node *node,
					   const f8_type *x, const f8_type *scale, f8_diag *diag) {
	f8_status status = f8_infer_require_float(scale, "the scale", diag);
	if (status)
		return status;
	if (scale->shape.rank == 0)
		return F8_OK;
	int axis;
	status = f8_infer_axis(f8_node_attr_int(node, "axis", 1), x->shape.rank, false, "axis", &axis,
			    diag);
	if (status)
		return status;
	int64_t block_size = f8_node_attr_int(node, "block_size", 0);
	if (block_size < 0)
		return f8_infer_fail(diag, "attribute block_size is negative");
	if (block_size == 0) {
		if (scale->shape.rank != 1 || !f8_dim_equal(scale->shape.dims[0], x->shape.dims[axis]))
			return f8_infer_fail(diag, "a per-axis scale must have shape (x.shape[%d])", axis);
		return F8_OK;
	}
	if (scale->shape.rank != x->shape.rank)
		return f8_infer_fail(diag, "a blocked scale must have the rank of x");
	(void)graph;
	return F8_OK;
}

/* QuantizeLinear (ONNX): y = saturate(round(x / scale) + zero_point) in dtype `to`, which
 * the frontend takes from the zero point or output_dtype. */
f8_status f8_infer_quantize_linear(const f8_graph *graph, const f8_node *node, f8_type *outputs,
				   f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0), *scale = infer_input(graph, node, 1);
	const f8_type *zero_point = infer_input(graph, node, 2);
	f8_dtype to = f8_node_attr_dtype(node, "to", F8_DTYPE_UNDEFINED);
	f8_status status = f8_infer_require_float(x, "x", diag);
	if (!status)
		status = linear_quantization_scale(graph, node, x, scale, diag);
	if (!status)
		status = f8_infer_require_flag(node, "saturate", diag);
	if (status)
		return status;
	if (!f8_dtype_is_fp8(to) && to != F8_DTYPE_I8 && to != F8_DTYPE_U8)
		return f8_infer_fail(diag, "QuantizeLinear to %s: f8c quantizes to e4m3, e5m2, i8 or u8",
				  f8_dtype_name(to));
	if (zero_point && zero_point->dtype != to)
		return f8_infer_fail(diag, "the zero point is %s but attribute to is %s",
				  f8_dtype_name(zero_point->dtype), f8_dtype_name(to));
	outputs[0] = (f8_type){.dtype = to, .shape = x->shape};
	return F8_OK;
}

/* DequantizeLinear (ONNX): y = (x - zero_point) * scale, in the scale's dtype. */
f8_status f8_infer_dequantize_linear(const f8_graph *graph, const f8_node *node,
				     f8_type *outputs, f8_diag *diag) {
	const f8_type *x = infer_input(graph, node, 0), *scale = infer_input(graph, node, 1);
	const f8_type *zero_point = infer_input(graph, node, 2);
	if (!f8_dtype_is_fp8(x->dtype) && x->dtype != F8_DTYPE_I8 && x->dtype != F8_DTYPE_U8)
		return f8_infer_fail(diag, "DequantizeLinear of %s: f8c dequantizes e4m3, e5m2, i8 or u8",
				  f8_dtype_name(x->dtype));
	if (zero_point && zero_point->dtype != x->dtype)
		return f8_infer_fail(diag, "the zero point is %s but x is %s",
				  f8_dtype_name(zero_point->dtype), f8_dtype_name(x->dtype));
	f8_status status = linear_quantization_scale(graph, node, x, scale, diag);
	if (status)
		return status;
	outputs[0] = (f8_type){.dtype = scale->dtype, .shape = x->shape};
	return F8_OK;
}
