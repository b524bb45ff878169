/*
 * The table of gradient rules, generated from ir/ops.def, and the builders the rules share
 * (passes/gradients_internal.h). The rules themselves are in gradients_primitive.c (the ONNX-style
 * ops, for imported graphs that did not fuse) and gradients_fused.c (the high-level ops, through
 * their backward ops).
 */
#include "passes/gradients.h" // f8_grad_rule, f8_grad_rule_get

#include <assert.h> // assert
#include <stdio.h>  // snprintf
#include <string.h> // memcpy

#include "passes/gradients_internal.h" // grad_* builders

/*
 * The address of f8_grad_<ENUM> is taken only for ops flagged differentiable: a flagged op
 * without a rule is a link error. The condition is an integer constant expression, so the
 * initializer is folded by the compiler, and the function of an op that is not flagged is not
 * referenced at all (checked with GCC 12 and clang at -O0, with and without the sanitizers:
 * no undefined symbol for it in the object file).
 */
static const f8_grad_rule rules[] = {
#define X(e, name, min_in, max_in, min_out, max_out, attrs, infer, flags) \
	[F8_OP_##e] = ((flags) & F8_OPF_DIFFERENTIABLE) ? f8_grad_##e : NULL,
#include "ir/ops.def"
#undef X
};
static_assert(sizeof rules / sizeof rules[0] == F8_OP_COUNT, "one rule slot per op");

f8_grad_rule f8_grad_rule_get(f8_op op) {
	return (unsigned)op < F8_OP_COUNT ? rules[op] : NULL;
}

const char *f8_grad_derive(char *buffer, size_t size, const char *base, const char *suffix) {
	snprintf(buffer, size, "%s.%s", base, suffix);
	return buffer;
}

const char *f8_grad_step_name(char *buffer, size_t size, const char *name, bool last,
			   const char *suffix) {
	return last ? name : f8_grad_derive(buffer, size, name, suffix);
}

f8_status f8_grad_op(f8_grad_context *context, f8_op op, const f8_value_id *inputs,
		  uint32_t n_inputs, const f8_attr *attrs, uint32_t n_attrs, const char *name,
		  f8_value_id *out, f8_diag *diag) {
	const char *names[1] = {name};
	return f8_grad_emit_named(context, op, inputs, n_inputs, attrs, n_attrs, 1, names, out, diag);
}

f8_status f8_grad_unary(f8_grad_context *context, f8_op op, f8_value_id x, const char *name,
		     f8_value_id *out, f8_diag *diag) {
	return f8_grad_op(context, op, &x, 1, NULL, 0, name, out, diag);
}

f8_status f8_grad_binary(f8_grad_context *context, f8_op op, f8_value_id a, f8_value_id b,
		      const char *name, f8_value_id *out, f8_diag *diag) {
	f8_value_id inputs[2] = {a, b};
	return f8_grad_op(context, op, inputs, 2, NULL, 0, name, out, diag);
}

f8_status f8_grad_constant(f8_grad_context *context, f8_dtype dtype, double value,
			const char *name, f8_value_id *out, f8_diag *diag) {
	uint8_t bytes[8];
	f8_tensor_data tensor = f8_tensor_data_make_scalar(dtype, value, bytes);
	f8_attr attr = {.name = "value", .kind = F8_ATTR_TENSOR, .tensor = &tensor};
	return f8_grad_op(context, F8_OP_CONSTANT, NULL, 0, &attr, 1, name, out, diag);
}

f8_status f8_grad_fill(f8_grad_context *context, const f8_type *type, double value,
		    const char *name, f8_value_id *out, f8_diag *diag) {
	uint8_t bytes[8];
	f8_tensor_data tensor = f8_tensor_data_make_scalar(type->dtype, value, bytes);
	f8_dim dims[F8_MAX_RANK];
	memcpy(dims, type->shape.dims, type->shape.rank * sizeof *dims);
	f8_attr attrs[2] = {grad_attr_dims("shape", dims, type->shape.rank),
			    {.name = "value", .kind = F8_ATTR_TENSOR, .tensor = &tensor}};
	return f8_grad_op(context, F8_OP_CONSTANT_OF_SHAPE, NULL, 0, attrs, 2, name, out, diag);
}

f8_status f8_grad_reshape(f8_grad_context *context, f8_value_id x, const f8_shape *shape,
		       const char *name, f8_value_id *out, f8_diag *diag) {
	f8_type type = grad_type(context, x);
	if (f8_shape_equal(&type.shape, shape)) {
		*out = x;
		return F8_OK;
	}
	f8_dim dims[F8_MAX_RANK];
	memcpy(dims, shape->dims, shape->rank * sizeof *dims);
	f8_attr attr = grad_attr_dims("shape", dims, shape->rank);
	return f8_grad_op(context, F8_OP_RESHAPE, &x, 1, &attr, 1, name, out, diag);
}

bool f8_grad_needs_sum(const f8_shape *full, const f8_shape *target) {
	return !f8_shape_equal(full, target);
}

f8_status f8_grad_sum_to(f8_grad_context *context, f8_value_id g, const f8_shape *target,
		      const char *name, f8_value_id *out, f8_diag *diag) {
	f8_shape full = grad_type(context, g).shape;
	if (f8_shape_equal(&full, target)) {
		*out = g;
		return F8_OK;
	}
	assert(full.rank >= target->rank);
	int lead = full.rank - target->rank;
	int64_t axes[F8_MAX_RANK];
	uint32_t n_axes = 0;
	for (int i = 0; i < full.rank; i++) {
		// A dim of 1 needs no sum: the Reshape drops or keeps it.
		bool broadcast = !f8_dim_equal(full.dims[i], f8_dim_const(1)) &&
				 (i < lead || f8_dim_equal(target->dims[i - lead], f8_dim_const(1)));
		if (broadcast)
			axes[n_axes++] = i;
	}
	f8_value_id summed = g;
	char step[F8_GRAD_NAME_MAX];
	f8_shape kept = full;
	for (uint32_t i = 0; i < n_axes; i++)
		kept.dims[axes[i]] = f8_dim_const(1);
	bool reshape = !f8_shape_equal(&kept, target);
	if (n_axes) {
		f8_attr attrs[2] = {grad_attr_ints("axes", axes, n_axes), grad_attr_int("keepdims", 1)};
		f8_status status = f8_grad_op(context, F8_OP_REDUCE_SUM, &g, 1, attrs, 2,
					   f8_grad_step_name(step, sizeof step, name, !reshape, "sum"),
					   &summed, diag);
		if (status)
			return status;
	}
	return f8_grad_reshape(context, summed, target, name, out, diag);
}

bool f8_grad_scalar_constant(const f8_graph *graph, f8_value_id value, double *out) {
	f8_node_id producer = graph->values[value].producer;
	if (producer == F8_NONE || graph->nodes[producer].op != F8_OP_CONSTANT)
		return false;
	const f8_attr *attr = f8_node_attr(&graph->nodes[producer], "value");
	return attr && f8_tensor_data_scalar(attr->tensor, out);
}
