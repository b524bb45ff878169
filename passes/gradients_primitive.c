/*
 * Gradient rules of the primitive (ONNX-style) ops: what an imported graph keeps where
 * fuse-patterns found no high-level op. Each gradient is composed from existing ops, with the
 * backward ops of ir/ops.def where a primitive has one (Gather, Slice, Softmax); a gradient of a
 * broadcast operand is summed back to its shape (f8_grad_sum_to).
 *
 * Naming: the value a rule hands back for input i is named by the engine (f8_grad_name); the
 * steps before it are named after it (`<name>.full` before the broadcast sum, ...).
 */
#include <math.h>   // sqrt
#include <stdio.h>  // snprintf
#include <string.h> // strcmp

#include "ir/alloc.h"                  // f8_malloc, f8_free
#include "passes/gradients_internal.h" // F8_GRAD_RULE, f8_grad_* context, grad_* builders

static const double PI = 3.14159265358979323846;

/* The gradient of input `i` of node `n` is wanted; its name goes into `name` and the name of its
 * unreduced form (the broadcast result's shape, `full`) into `unreduced`. */
static bool wanted(f8_grad_context *context, const f8_node *n, uint32_t i, f8_value_id full,
		   char *name, char *unreduced) {
	if (!f8_grad_wants(context, n->inputs[i]))
		return false;
	f8_grad_name(context, n->inputs[i], name, F8_GRAD_NAME_MAX);
	f8_shape shape = grad_type(context, full).shape;
	f8_shape target = grad_type(context, n->inputs[i]).shape;
	if (f8_grad_needs_sum(&shape, &target))
		f8_grad_derive(unreduced, F8_GRAD_NAME_MAX, name, "full");
	else
		snprintf(unreduced, F8_GRAD_NAME_MAX, "%s", name);
	return true;
}

/* Sums `g` back to the shape of input `i` of `n` into dx[i]. */
static f8_status reduce_into(f8_grad_context *context, const f8_node *n, uint32_t i,
			     f8_value_id g, const char *name, f8_value_id *dx, f8_diag *diag) {
	f8_shape target = grad_type(context, n->inputs[i]).shape;
	return f8_grad_sum_to(context, g, &target, name, &dx[i], diag);
}

/* A scalar constant of the dtype of `like`. */
static f8_status constant_like(f8_grad_context *context, f8_value_id like, double value,
			       const char *name, f8_value_id *out, f8_diag *diag) {
	return f8_grad_constant(context, grad_type(context, like).dtype, value, name, out, diag);
}

/* Elementwise with broadcasting. */

F8_GRAD_RULE(ADD) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX], full[F8_GRAD_NAME_MAX];
	f8_status status = F8_OK;
	for (uint32_t i = 0; !status && i < 2; i++)
		if (wanted(context, &n, i, dy[0], name, full))
			status = reduce_into(context, &n, i, dy[0], name, dx, diag);
	return status;
}

F8_GRAD_RULE(SUB) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX], full[F8_GRAD_NAME_MAX], step[F8_GRAD_NAME_MAX];
	f8_status status = F8_OK;
	if (wanted(context, &n, 0, dy[0], name, full))
		status = reduce_into(context, &n, 0, dy[0], name, dx, diag);
	if (!status && wanted(context, &n, 1, dy[0], name, full)) {
		// Sum first, then negate: the Neg runs on the smaller tensor.
		f8_value_id summed = F8_NONE;
		f8_shape target = grad_type(context, n.inputs[1]).shape;
		status = f8_grad_sum_to(context, dy[0], &target, f8_grad_derive(step, sizeof step, name, "pos"),
				     &summed, diag);
		if (!status)
			status = f8_grad_unary(context, F8_OP_NEG, summed, name, &dx[1], diag);
	}
	return status;
}

F8_GRAD_RULE(MUL) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX], full[F8_GRAD_NAME_MAX];
	f8_status status = F8_OK;
	for (uint32_t i = 0; !status && i < 2; i++) {
		f8_value_id g = F8_NONE;
		if (!wanted(context, &n, i, dy[0], name, full))
			continue;
		status = f8_grad_binary(context, F8_OP_MUL, dy[0], n.inputs[1 - i], full, &g, diag);
		if (!status)
			status = reduce_into(context, &n, i, g, name, dx, diag);
	}
	return status;
}

/* y = a / b: da = dy / b, db = -dy * y / b. */
F8_GRAD_RULE(DIV) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX], full[F8_GRAD_NAME_MAX], step[F8_GRAD_NAME_MAX];
	f8_value_id b = n.inputs[1], y = n.outputs[0], g, t, summed;
	f8_status status = F8_OK;
	if (wanted(context, &n, 0, dy[0], name, full)) {
		status = f8_grad_binary(context, F8_OP_DIV, dy[0], b, full, &g, diag);
		if (!status)
			status = reduce_into(context, &n, 0, g, name, dx, diag);
	}
	if (!status && wanted(context, &n, 1, dy[0], name, full)) {
		f8_shape target = grad_type(context, b).shape;
		status = f8_grad_binary(context, F8_OP_MUL, dy[0], y, f8_grad_derive(step, sizeof step, name,
									  "dy_y"), &t, diag);
		if (!status)
			status = f8_grad_binary(context, F8_OP_DIV, t, b, f8_grad_derive(step, sizeof step,
										  name, "neg"), &g, diag);
		if (!status)
			status = f8_grad_sum_to(context, g, &target, f8_grad_derive(step, sizeof step, name,
									      "neg_sum"), &summed, diag);
		if (!status)
			status = f8_grad_unary(context, F8_OP_NEG, summed, name, &dx[1], diag);
	}
	return status;
}

/* y = a^b: da = dy * b * a^(b-1) (a constant exponent folded), db = dy * y * log(a). */
F8_GRAD_RULE(POW) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX], full[F8_GRAD_NAME_MAX], step[F8_GRAD_NAME_MAX];
	f8_value_id a = n.inputs[0], b = n.inputs[1], y = n.outputs[0], g, p, k, c;
	f8_status status = F8_OK;
	double exponent;
	if (wanted(context, &n, 0, dy[0], name, full)) {
		if (f8_grad_scalar_constant(f8_grad_graph(context), b, &exponent)) {
			// k = exponent * a^(exponent - 1), with the powers 1 and 0 spelled out.
			if (exponent == 2.0) {
				p = a;
			} else {
				status = constant_like(context, a, exponent - 1.0, f8_grad_derive(step, sizeof step,
						       name, "exponent"), &c, diag);
				if (!status)
					status = f8_grad_binary(context, F8_OP_POW, a, c, f8_grad_derive(step,
							     sizeof step, name, "power"), &p, diag);
			}
			if (!status)
				status = constant_like(context, a, exponent, f8_grad_derive(step, sizeof step,
						       name, "factor"), &c, diag);
			if (!status)
				status = f8_grad_binary(context, F8_OP_MUL, p, c, f8_grad_derive(step, sizeof step,
						     name, "slope"), &k, diag);
		} else {
			status = constant_like(context, a, 1.0, f8_grad_derive(step, sizeof step, name, "one"),
					       &c, diag);
			f8_value_id b_minus_1 = F8_NONE;
			if (!status)
				status = f8_grad_binary(context, F8_OP_SUB, b, c, f8_grad_derive(step, sizeof step,
						     name, "exponent"), &b_minus_1, diag);
			if (!status)
				status = f8_grad_binary(context, F8_OP_POW, a, b_minus_1, f8_grad_derive(step,
						     sizeof step, name, "power"), &p, diag);
			if (!status)
				status = f8_grad_binary(context, F8_OP_MUL, b, p, f8_grad_derive(step, sizeof step,
						     name, "slope"), &k, diag);
		}
		if (!status)
			status = f8_grad_binary(context, F8_OP_MUL, dy[0], k, full, &g, diag);
		if (!status)
			status = reduce_into(context, &n, 0, g, name, dx, diag);
	}
	if (!status && wanted(context, &n, 1, dy[0], name, full)) {
		status = f8_grad_unary(context, F8_OP_LOG, a, f8_grad_derive(step, sizeof step, name, "log"),
				    &p, diag);
		if (!status)
			status = f8_grad_binary(context, F8_OP_MUL, y, p, f8_grad_derive(step, sizeof step, name,
					     "slope"), &k, diag);
		if (!status)
			status = f8_grad_binary(context, F8_OP_MUL, dy[0], k, full, &g, diag);
		if (!status)
			status = reduce_into(context, &n, 1, g, name, dx, diag);
	}
	return status;
}

/* The comparison `op` of a and b, as a bool mask named `<name>.<suffix>`. */
static f8_status compare(f8_grad_context *context, f8_op op, f8_value_id a, f8_value_id b,
			 const char *name, const char *suffix, f8_value_id *out, f8_diag *diag) {
	char step[F8_GRAD_NAME_MAX];
	return f8_grad_binary(context, op, a, b, f8_grad_derive(step, sizeof step, name, suffix), out, diag);
}

/* Where(mask, dy, otherwise): dy where the mask holds. */
static f8_status select(f8_grad_context *context, f8_value_id mask, f8_value_id dy,
			f8_value_id otherwise, const char *name, f8_value_id *out, f8_diag *diag) {
	f8_value_id inputs[3] = {mask, dy, otherwise};
	return f8_grad_op(context, F8_OP_WHERE, inputs, 3, NULL, 0, name, out, diag);
}

/* Max and Min: the gradient goes to the operand that won; a tie splits it in halves, as
 * torch.maximum's backward does. */
static f8_status extremum(f8_grad_context *context, f8_node_id node, const f8_value_id *dy,
			  f8_value_id *dx, f8_op wins, f8_op loses, f8_diag *diag) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX], full[F8_GRAD_NAME_MAX], step[F8_GRAD_NAME_MAX];
	f8_value_id tie = F8_NONE, half = F8_NONE, zero = F8_NONE, split = F8_NONE;
	f8_value_id g = F8_NONE, mask = F8_NONE;
	f8_status status = F8_OK;
	for (uint32_t i = 0; !status && i < 2; i++) {
		if (!wanted(context, &n, i, dy[0], name, full))
			continue;
		if (tie == F8_NONE) {
			f8_value_id c = F8_NONE;
			status = compare(context, F8_OP_EQUAL, n.inputs[0], n.inputs[1], name, "tie",
					 &tie, diag);
			if (!status)
				status = constant_like(context, dy[0], 0.5, f8_grad_derive(step, sizeof step,
						       name, "half"), &c, diag);
			if (!status)
				status = f8_grad_binary(context, F8_OP_MUL, dy[0], c, f8_grad_derive(step,
						     sizeof step, name, "shared"), &half, diag);
			if (!status)
				status = constant_like(context, dy[0], 0.0, f8_grad_derive(step, sizeof step,
						       name, "zero"), &zero, diag);
			if (!status)
				status = select(context, tie, half, zero, f8_grad_derive(step, sizeof step,
						name, "split"), &split, diag);
		}
		if (!status)
			status = compare(context, i == 0 ? wins : loses, n.inputs[0], n.inputs[1], name,
					 "wins", &mask, diag);
		if (!status)
			status = select(context, mask, dy[0], split, full, &g, diag);
		if (!status)
			status = reduce_into(context, &n, i, g, name, dx, diag);
	}
	return status;
}

F8_GRAD_RULE(MAX) {
	return extremum(context, node, dy, dx, F8_OP_GREATER, F8_OP_LESS, diag);
}

F8_GRAD_RULE(MIN) {
	return extremum(context, node, dy, dx, F8_OP_LESS, F8_OP_GREATER, diag);
}

F8_GRAD_RULE(WHERE) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX], full[F8_GRAD_NAME_MAX], step[F8_GRAD_NAME_MAX];
	f8_value_id zero = F8_NONE, g = F8_NONE;
	f8_status status = F8_OK;
	for (uint32_t i = 1; !status && i < 3; i++) {
		if (!wanted(context, &n, i, dy[0], name, full))
			continue;
		if (zero == F8_NONE)
			status = constant_like(context, dy[0], 0.0, f8_grad_derive(step, sizeof step, name,
					       "zero"), &zero, diag);
		f8_value_id inputs[3] = {n.inputs[0], i == 1 ? dy[0] : zero, i == 1 ? zero : dy[0]};
		if (!status)
			status = f8_grad_op(context, F8_OP_WHERE, inputs, 3, NULL, 0, full, &g, diag);
		if (!status)
			status = reduce_into(context, &n, i, g, name, dx, diag);
	}
	return status;
}

/* Elementwise, one input. Each computes dx from dy, x and y. */

/* The name of input 0's gradient when wanted (false: nothing to do). */
static bool wanted_x(f8_grad_context *context, const f8_node *n, char *name) {
	if (!f8_grad_wants(context, n->inputs[0]))
		return false;
	f8_grad_name(context, n->inputs[0], name, F8_GRAD_NAME_MAX);
	return true;
}

/* dx = dy * factor. */
static f8_status times(f8_grad_context *context, f8_value_id dy, f8_value_id factor,
		       const char *name, f8_value_id *dx, f8_diag *diag) {
	return f8_grad_binary(context, F8_OP_MUL, dy, factor, name, dx, diag);
}

/* y = sqrt(x): dx = dy * 0.5 / y. */
F8_GRAD_RULE(SQRT) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX], step[F8_GRAD_NAME_MAX];
	if (!wanted_x(context, &n, name))
		return F8_OK;
	f8_value_id half = F8_NONE, g = F8_NONE;
	f8_status status = constant_like(context, dy[0], 0.5, f8_grad_derive(step, sizeof step, name,
					 "half"), &half, diag);
	if (!status)
		status = times(context, dy[0], half, f8_grad_derive(step, sizeof step, name, "halved"), &g,
			       diag);
	return status ? status : f8_grad_binary(context, F8_OP_DIV, g, n.outputs[0], name, &dx[0], diag);
}

/* y = 1/x: dx = -dy * y * y. */
F8_GRAD_RULE(RECIPROCAL) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX], step[F8_GRAD_NAME_MAX];
	if (!wanted_x(context, &n, name))
		return F8_OK;
	f8_value_id square = F8_NONE, g = F8_NONE;
	f8_status status = f8_grad_binary(context, F8_OP_MUL, n.outputs[0], n.outputs[0],
				       f8_grad_derive(step, sizeof step, name, "square"), &square, diag);
	if (!status)
		status = times(context, dy[0], square, f8_grad_derive(step, sizeof step, name, "neg"), &g,
			       diag);
	return status ? status : f8_grad_unary(context, F8_OP_NEG, g, name, &dx[0], diag);
}

F8_GRAD_RULE(NEG) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX];
	return wanted_x(context, &n, name) ? f8_grad_unary(context, F8_OP_NEG, dy[0], name, &dx[0], diag)
					   : F8_OK;
}

/* dx = dy * sign(x), 0 at 0 (as torch.abs). */
F8_GRAD_RULE(ABS) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX], step[F8_GRAD_NAME_MAX];
	if (!wanted_x(context, &n, name))
		return F8_OK;
	f8_value_id x = n.inputs[0], zero, positive, negative, minus, below;
	f8_status status = constant_like(context, x, 0.0, f8_grad_derive(step, sizeof step, name,
					 "zero"), &zero, diag);
	if (!status)
		status = compare(context, F8_OP_GREATER, x, zero, name, "positive", &positive, diag);
	if (!status)
		status = compare(context, F8_OP_LESS, x, zero, name, "negative", &negative, diag);
	if (!status)
		status = f8_grad_unary(context, F8_OP_NEG, dy[0], f8_grad_derive(step, sizeof step, name,
				    "minus"), &minus, diag);
	if (!status)
		status = select(context, negative, minus, zero, f8_grad_derive(step, sizeof step, name,
				"below"), &below, diag);
	return status ? status : select(context, positive, dy[0], below, name, &dx[0], diag);
}

/* y = exp(x): dx = dy * y. */
F8_GRAD_RULE(EXP) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX];
	return wanted_x(context, &n, name) ? times(context, dy[0], n.outputs[0], name, &dx[0], diag)
					   : F8_OK;
}

/* dx = dy / x. */
F8_GRAD_RULE(LOG) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX];
	return wanted_x(context, &n, name)
		       ? f8_grad_binary(context, F8_OP_DIV, dy[0], n.inputs[0], name, &dx[0], diag)
		       : F8_OK;
}

/* dx = dy * (1 - y * y) for tanh; dx = dy * y * (1 - y) for the sigmoid. */
static f8_status one_minus_rule(f8_grad_context *context, f8_node_id node, const f8_value_id *dy,
				f8_value_id *dx, bool tanh_form, f8_diag *diag) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX], step[F8_GRAD_NAME_MAX];
	if (!wanted_x(context, &n, name))
		return F8_OK;
	f8_value_id y = n.outputs[0], one = F8_NONE, square = y, rest = F8_NONE, slope = F8_NONE;
	f8_status status = constant_like(context, y, 1.0, f8_grad_derive(step, sizeof step, name, "one"),
					 &one, diag);
	if (!status && tanh_form)
		status = f8_grad_binary(context, F8_OP_MUL, y, y, f8_grad_derive(step, sizeof step, name,
				     "square"), &square, diag);
	if (!status)
		status = f8_grad_binary(context, F8_OP_SUB, one, square, f8_grad_derive(step, sizeof step,
				     name, tanh_form ? "slope" : "rest"), &rest, diag);
	slope = rest;
	if (!status && !tanh_form)
		status = f8_grad_binary(context, F8_OP_MUL, y, rest, f8_grad_derive(step, sizeof step, name,
				     "slope"), &slope, diag);
	return status ? status : times(context, dy[0], slope, name, &dx[0], diag);
}

F8_GRAD_RULE(TANH) {
	return one_minus_rule(context, node, dy, dx, true, diag);
}

F8_GRAD_RULE(SIGMOID) {
	return one_minus_rule(context, node, dy, dx, false, diag);
}

/* cos' = -sin, sin' = cos. */
F8_GRAD_RULE(COS) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX], step[F8_GRAD_NAME_MAX];
	if (!wanted_x(context, &n, name))
		return F8_OK;
	f8_value_id sine = F8_NONE, g = F8_NONE;
	f8_status status = f8_grad_unary(context, F8_OP_SIN, n.inputs[0], f8_grad_derive(step, sizeof step,
				      name, "sin"), &sine, diag);
	if (!status)
		status = times(context, dy[0], sine, f8_grad_derive(step, sizeof step, name, "neg"), &g,
			       diag);
	return status ? status : f8_grad_unary(context, F8_OP_NEG, g, name, &dx[0], diag);
}

F8_GRAD_RULE(SIN) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX], step[F8_GRAD_NAME_MAX];
	if (!wanted_x(context, &n, name))
		return F8_OK;
	f8_value_id cosine = F8_NONE;
	f8_status status = f8_grad_unary(context, F8_OP_COS, n.inputs[0], f8_grad_derive(step, sizeof step,
				      name, "cos"), &cosine, diag);
	return status ? status : times(context, dy[0], cosine, name, &dx[0], diag);
}

/* erf'(x) = 2 / sqrt(pi) * exp(-x^2). */
F8_GRAD_RULE(ERF) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX], step[F8_GRAD_NAME_MAX];
	if (!wanted_x(context, &n, name))
		return F8_OK;
	f8_value_id x = n.inputs[0], square, negative, bell, c, slope;
	f8_status status = f8_grad_binary(context, F8_OP_MUL, x, x, f8_grad_derive(step, sizeof step, name,
				       "square"), &square, diag);
	if (!status)
		status = f8_grad_unary(context, F8_OP_NEG, square, f8_grad_derive(step, sizeof step, name,
				    "exponent"), &negative, diag);
	if (!status)
		status = f8_grad_unary(context, F8_OP_EXP, negative, f8_grad_derive(step, sizeof step, name,
				    "bell"), &bell, diag);
	if (!status)
		status = constant_like(context, x, 2.0 / sqrt(PI), f8_grad_derive(step, sizeof step, name,
				       "factor"), &c, diag);
	if (!status)
		status = f8_grad_binary(context, F8_OP_MUL, bell, c, f8_grad_derive(step, sizeof step, name,
				     "slope"), &slope, diag);
	return status ? status : times(context, dy[0], slope, name, &dx[0], diag);
}

/* dx = dy where x > 0 (where y > 0: the same set). */
F8_GRAD_RULE(RELU) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX], step[F8_GRAD_NAME_MAX];
	if (!wanted_x(context, &n, name))
		return F8_OK;
	f8_value_id zero = F8_NONE, positive = F8_NONE;
	f8_status status = constant_like(context, n.inputs[0], 0.0, f8_grad_derive(step, sizeof step,
					 name, "zero"), &zero, diag);
	if (!status)
		status = compare(context, F8_OP_GREATER, n.inputs[0], zero, name, "positive", &positive,
				 diag);
	return status ? status : select(context, positive, dy[0], zero, name, &dx[0], diag);
}

/* The identity and what the IR runs as one: Dropout's inference form, and AllReduce, whose
 * backward is the identity (Megatron-LM's g operator). An Identity with a `group` is its
 * conjugate, Megatron-LM's f, which the tensor-parallel pass puts before a column-parallel
 * GEMM: the identity forward, and its gradient, whose terms the group's ranks hold, summed over
 * the group. */
F8_GRAD_RULE(IDENTITY) {
	f8_node n = grad_node(context, node);
	const char *group = f8_node_attr_string(&n, "group", NULL);
	if (!group) {
		dx[0] = dy[0];
		return F8_OK;
	}
	char name[F8_GRAD_NAME_MAX];
	if (!wanted_x(context, &n, name))
		return F8_OK;
	f8_attr attrs[2] = {{.name = "group", .kind = F8_ATTR_STRING, .s = group},
			    {.name = "op", .kind = F8_ATTR_STRING, .s = "sum"}};
	return f8_grad_op(context, F8_OP_ALL_REDUCE, dy, 1, attrs, 2, name, &dx[0], diag);
}

F8_GRAD_RULE(DROPOUT) {
	(void)context, (void)node, (void)diag;
	dx[0] = dy[0];
	return F8_OK;
}

F8_GRAD_RULE(ALL_REDUCE) {
	f8_node n = grad_node(context, node);
	const char *op = f8_node_attr_string(&n, "op", "sum");
	if (strcmp(op, "sum") != 0)
		return f8_grad_unsupported(context, node, diag, "an AllReduce of op %s has no gradient "
					   "rule (only sum has)", op);
	for (uint32_t i = 0; i < n.n_inputs; i++)
		dx[i] = dy[i];
	return F8_OK;
}

/* A cast's gradient is cast back to the input's dtype. */
static f8_status cast_back(f8_grad_context *context, f8_node_id node, const f8_value_id *dy,
			   f8_value_id *dx, f8_diag *diag) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX];
	if (!wanted_x(context, &n, name))
		return F8_OK;
	f8_dtype to = grad_type(context, n.inputs[0]).dtype;
	if (grad_type(context, dy[0]).dtype == to) {
		dx[0] = dy[0];
		return F8_OK;
	}
	f8_attr attr = {.name = "to", .kind = F8_ATTR_DTYPE, .dtype = to};
	return f8_grad_op(context, F8_OP_CAST, dy, 1, &attr, 1, name, &dx[0], diag);
}

F8_GRAD_RULE(CAST) {
	return cast_back(context, node, dy, dx, diag);
}

/* CastLike: x's gradient is cast back; the dtype donor has none. */
F8_GRAD_RULE(CAST_LIKE) {
	return cast_back(context, node, dy, dx, diag);
}

/* Matrix products. */

/* The Transpose of `x` swapping its last two dims. */
static f8_status swap_last_two(f8_grad_context *context, f8_value_id x, const char *name,
			       f8_value_id *out, f8_diag *diag) {
	int rank = grad_type(context, x).shape.rank;
	int64_t perm[F8_MAX_RANK];
	for (int i = 0; i < rank; i++)
		perm[i] = i;
	perm[rank - 2] = rank - 1;
	perm[rank - 1] = rank - 2;
	f8_attr attr = grad_attr_ints("perm", perm, (uint32_t)rank);
	return f8_grad_op(context, F8_OP_TRANSPOSE, &x, 1, &attr, 1, name, out, diag);
}

/* `x` of rank 1 as a matrix: (1, K) as a left operand, (K, 1) as a right one. */
static f8_status as_matrix(f8_grad_context *context, f8_value_id x, bool left, const char *name,
			   f8_value_id *out, f8_diag *diag) {
	f8_shape shape = grad_type(context, x).shape;
	if (shape.rank != 1) {
		*out = x;
		return F8_OK;
	}
	f8_shape matrix = {.rank = 2, .dims = {left ? f8_dim_const(1) : shape.dims[0],
					       left ? shape.dims[0] : f8_dim_const(1)}};
	return f8_grad_reshape(context, x, &matrix, name, out, diag);
}

/*
 * MatMul with NumPy's rules: a vector operand is a matrix of one row (left) or one column
 * (right) whose unit dim the result drops; batch dims broadcast. dA = dY B^T and dB = A^T dY on
 * the matrix forms, summed over the batch dims an operand was broadcast along.
 */
F8_GRAD_RULE(MATMUL) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX], step[F8_GRAD_NAME_MAX];
	f8_value_id a = n.inputs[0], b = n.inputs[1], a2, b2, dy2, t, g;
	f8_shape sa = grad_type(context, a).shape, sb = grad_type(context, b).shape;
	f8_shape y2 = grad_type(context, dy[0]).shape;
	if (sb.rank == 1) // the dropped column dim comes back last,
		y2.dims[y2.rank++] = f8_dim_const(1);
	if (sa.rank == 1) { // and the dropped row dim before it
		y2.dims[y2.rank] = y2.dims[y2.rank - 1];
		y2.dims[y2.rank - 1] = f8_dim_const(1);
		y2.rank++;
	}
	const char *dy_name = f8_grad_graph(context)->values[dy[0]].name;
	f8_status status = f8_grad_reshape(context, dy[0], &y2, f8_grad_derive(step, sizeof step, dy_name,
					"matrix"), &dy2, diag);
	bool want[2] = {f8_grad_wants(context, a), f8_grad_wants(context, b)};
	for (uint32_t i = 0; !status && i < 2; i++) {
		if (!want[i])
			continue;
		f8_grad_name(context, n.inputs[i], name, sizeof name);
		f8_value_id other = n.inputs[1 - i];
		status = as_matrix(context, other, i == 1, f8_grad_derive(step, sizeof step, name, "other"),
				   i == 0 ? &b2 : &a2, diag);
		if (!status)
			status = swap_last_two(context, i == 0 ? b2 : a2, f8_grad_derive(step, sizeof step,
					       name, "other_t"), &t, diag);
		f8_value_id inputs[2] = {i == 0 ? dy2 : t, i == 0 ? t : dy2};
		if (!status)
			status = f8_grad_op(context, F8_OP_MATMUL, inputs, 2, NULL, 0,
					 f8_grad_derive(step, sizeof step, name, "full"), &g, diag);
		// Sum over broadcast batch dims against the matrix form, then drop its unit dim.
		f8_shape target = i == 0 ? sa : sb;
		if (target.rank == 1)
			target = (f8_shape){.rank = 2, .dims = {i == 0 ? f8_dim_const(1) : target.dims[0],
								i == 0 ? target.dims[0] : f8_dim_const(1)}};
		f8_value_id summed = F8_NONE;
		if (!status)
			status = f8_grad_sum_to(context, g, &target, f8_grad_step_name(step, sizeof step, name,
					     target.rank == (i == 0 ? sa : sb).rank, "matrix"), &summed,
					     diag);
		if (!status)
			status = f8_grad_reshape(context, summed, i == 0 ? &sa : &sb, name, &dx[i], diag);
	}
	return status;
}

/* The attributes of a Gemm, defaults left out. */
static uint32_t gemm_attrs(f8_attr *attrs, double alpha, int64_t trans_a, int64_t trans_b) {
	uint32_t n = 0;
	if (alpha != 1.0)
		attrs[n++] = grad_attr_float("alpha", alpha);
	if (trans_a)
		attrs[n++] = grad_attr_int("transA", 1);
	if (trans_b)
		attrs[n++] = grad_attr_int("transB", 1);
	return n;
}

/* Y = alpha op(A) op(B) + beta C: each operand's gradient is a Gemm of dY and the other
 * operand in the layout that gives the operand's own. */
F8_GRAD_RULE(GEMM) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX], step[F8_GRAD_NAME_MAX];
	f8_value_id a = n.inputs[0], b = n.inputs[1], c = n.n_inputs > 2 ? n.inputs[2] : F8_NONE;
	double alpha = f8_node_attr_float(&n, "alpha", 1.0), beta = f8_node_attr_float(&n, "beta", 1.0);
	int64_t ta = f8_node_attr_int(&n, "transA", 0), tb = f8_node_attr_int(&n, "transB", 0);
	f8_attr attrs[3];
	f8_status status = F8_OK;
	if (f8_grad_wants(context, a)) {
		f8_value_id inputs[2] = {ta ? b : dy[0], ta ? dy[0] : b};
		uint32_t n_attrs = ta ? gemm_attrs(attrs, alpha, tb, 1) : gemm_attrs(attrs, alpha, 0, !tb);
		f8_grad_name(context, a, name, sizeof name);
		status = f8_grad_op(context, F8_OP_GEMM, inputs, 2, attrs, n_attrs, name, &dx[0], diag);
	}
	if (!status && f8_grad_wants(context, b)) {
		f8_value_id inputs[2] = {tb ? dy[0] : a, tb ? a : dy[0]};
		uint32_t n_attrs = tb ? gemm_attrs(attrs, alpha, 1, ta) : gemm_attrs(attrs, alpha, !ta, 0);
		f8_grad_name(context, b, name, sizeof name);
		status = f8_grad_op(context, F8_OP_GEMM, inputs, 2, attrs, n_attrs, name, &dx[1], diag);
	}
	if (!status && c != F8_NONE && f8_grad_wants(context, c)) {
		f8_value_id g = dy[0], factor = F8_NONE;
		f8_shape target = grad_type(context, c).shape;
		f8_grad_name(context, c, name, sizeof name);
		if (beta != 1.0) {
			f8_shape full = grad_type(context, dy[0]).shape;
			status = constant_like(context, dy[0], beta, f8_grad_derive(step, sizeof step, name,
					       "beta"), &factor, diag);
			if (!status)
				status = times(context, dy[0], factor, f8_grad_step_name(step, sizeof step, name,
					       !f8_grad_needs_sum(&full, &target), "full"), &g, diag);
		}
		if (!status)
			status = f8_grad_sum_to(context, g, &target, name, &dx[2], diag);
	}
	return status;
}

/* Indexing and shapes. */

/* GatherGrad adds dy's slices back at the gathered positions. */
F8_GRAD_RULE(GATHER) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX];
	if (!wanted_x(context, &n, name))
		return F8_OK;
	f8_shape data = grad_type(context, n.inputs[0]).shape;
	int axis;
	f8_axis_normalize(f8_node_attr_int(&n, "axis", 0), data.rank, false, &axis);
	f8_attr attrs[2] = {{.name = "size", .kind = F8_ATTR_DIM, .dim = data.dims[axis]},
			    grad_attr_int("axis", axis)};
	f8_value_id inputs[2] = {dy[0], n.inputs[1]};
	return f8_grad_op(context, F8_OP_GATHER_GRAD, inputs, 2, attrs, axis ? 2 : 1, name, &dx[0],
		       diag);
}

/* Reshape, Unsqueeze and Squeeze move no element: the gradient takes the input's shape back. */
static f8_status reshape_back(f8_grad_context *context, f8_node_id node, const f8_value_id *dy,
			      f8_value_id *dx, f8_diag *diag) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX];
	if (!wanted_x(context, &n, name))
		return F8_OK;
	f8_shape shape = grad_type(context, n.inputs[0]).shape;
	return f8_grad_reshape(context, dy[0], &shape, name, &dx[0], diag);
}

F8_GRAD_RULE(RESHAPE) {
	return reshape_back(context, node, dy, dx, diag);
}

F8_GRAD_RULE(UNSQUEEZE) {
	return reshape_back(context, node, dy, dx, diag);
}

F8_GRAD_RULE(SQUEEZE) {
	return reshape_back(context, node, dy, dx, diag);
}

/* The inverse permutation (the default perm, reversing, is its own inverse). */
F8_GRAD_RULE(TRANSPOSE) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX];
	if (!wanted_x(context, &n, name))
		return F8_OK;
	const f8_attr *perm = f8_node_attr(&n, "perm");
	int64_t inverse[F8_MAX_RANK];
	for (uint32_t i = 0; perm && i < perm->ints.n; i++)
		inverse[perm->ints.items[i]] = i;
	f8_attr attr = grad_attr_ints("perm", inverse, perm ? perm->ints.n : 0);
	return f8_grad_op(context, F8_OP_TRANSPOSE, dy, 1, &attr, perm ? 1 : 0, name, &dx[0], diag);
}

/* Concat: one Split of dy along the axis, one part per input. */
F8_GRAD_RULE(CONCAT) {
	f8_node n = grad_node(context, node);
	if (n.n_inputs == 1) {
		dx[0] = dy[0];
		return F8_OK;
	}
	int rank = grad_type(context, dy[0]).shape.rank, axis;
	f8_axis_normalize(f8_node_attr_int(&n, "axis", 0), rank, false, &axis);
	char (*names)[F8_GRAD_NAME_MAX] = f8_malloc(n.n_inputs * sizeof *names);
	const char **pointers = f8_malloc(n.n_inputs * sizeof *pointers);
	f8_dim *sizes = f8_malloc(n.n_inputs * sizeof *sizes);
	f8_status status = names && pointers && sizes
				   ? F8_OK
				   : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory differentiating");
	for (uint32_t i = 0; !status && i < n.n_inputs; i++) {
		f8_grad_name(context, n.inputs[i], names[i], sizeof names[i]);
		pointers[i] = names[i];
		sizes[i] = grad_type(context, n.inputs[i]).shape.dims[axis];
	}
	f8_attr attrs[2] = {grad_attr_int("axis", axis), grad_attr_dims("split", sizes, n.n_inputs)};
	if (!status)
		status = f8_grad_emit_named(context, F8_OP_SPLIT, dy, 1, attrs, 2, n.n_inputs,
					    pointers, dx, diag);
	f8_free(names);
	f8_free(pointers);
	f8_free(sizes);
	return status;
}

/* Split: the outputs' gradients concatenated, zeros for an output nothing flowed into. */
F8_GRAD_RULE(SPLIT) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX], step[F8_GRAD_NAME_MAX];
	if (!wanted_x(context, &n, name))
		return F8_OK;
	if (n.n_outputs == 1) {
		dx[0] = dy[0];
		return F8_OK;
	}
	f8_value_id *parts = f8_malloc(n.n_outputs * sizeof *parts);
	f8_status status = parts ? F8_OK
				 : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory differentiating");
	for (uint32_t o = 0; !status && o < n.n_outputs; o++) {
		parts[o] = dy[o];
		if (parts[o] != F8_NONE)
			continue;
		const f8_value *out = &f8_grad_graph(context)->values[n.outputs[o]];
		f8_type type = out->type;
		snprintf(step, sizeof step, "%s.grad.zero", out->name);
		status = f8_grad_fill(context, &type, 0.0, step, &parts[o], diag);
		if (!status)
			f8_grad_graph(context)->values[parts[o]].role = F8_ROLE_GRADIENT;
	}
	f8_attr axis = grad_attr_int("axis", f8_node_attr_int(&n, "axis", 0));
	if (!status)
		status = f8_grad_op(context, F8_OP_CONCAT, parts, n.n_outputs, &axis, 1, name, &dx[0],
				 diag);
	f8_free(parts);
	return status;
}

/* SliceGrad writes dy where the Slice took it from, zeros elsewhere. */
F8_GRAD_RULE(SLICE) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX];
	if (!wanted_x(context, &n, name))
		return F8_OK;
	f8_shape shape = grad_type(context, n.inputs[0]).shape;
	f8_attr attrs[5] = {grad_attr_dims("shape", shape.dims, shape.rank)};
	uint32_t n_attrs = 1;
	for (uint32_t i = 0; i < n.n_attrs; i++)
		attrs[n_attrs++] = n.attrs[i];
	return f8_grad_op(context, F8_OP_SLICE_GRAD, dy, 1, attrs, n_attrs, name, &dx[0], diag);
}

/* Expand broadcasts: the gradient sums back. */
F8_GRAD_RULE(EXPAND) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX];
	if (!wanted_x(context, &n, name))
		return F8_OK;
	f8_shape shape = grad_type(context, n.inputs[0]).shape;
	return f8_grad_sum_to(context, dy[0], &shape, name, &dx[0], diag);
}

/* Trilu keeps a triangle: its gradient is the same triangle of dy. */
F8_GRAD_RULE(TRILU) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX];
	if (!wanted_x(context, &n, name))
		return F8_OK;
	return f8_grad_op(context, F8_OP_TRILU, dy, 1, n.attrs, n.n_attrs, name, &dx[0], diag);
}

/* Softmax and LogSoftmax through their backward ops, which read the forward's output. */
static f8_status softmax_back(f8_grad_context *context, f8_node_id node, const f8_value_id *dy,
			      f8_value_id *dx, f8_op op, f8_diag *diag) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX];
	if (!wanted_x(context, &n, name))
		return F8_OK;
	f8_value_id inputs[2] = {dy[0], n.outputs[0]};
	return f8_grad_op(context, op, inputs, 2, n.attrs, n.n_attrs, name, &dx[0], diag);
}

F8_GRAD_RULE(SOFTMAX) {
	return softmax_back(context, node, dy, dx, F8_OP_SOFTMAX_GRAD, diag);
}

F8_GRAD_RULE(LOG_SOFTMAX) {
	return softmax_back(context, node, dy, dx, F8_OP_LOG_SOFTMAX_GRAD, diag);
}

/* Reductions. */

/* What a reduction keeps: its output's shape with keepdims (ones at the reduced axes), the
 * reduced axes, and the number of elements each output element summarizes when constant. */
typedef struct reduction {
	f8_shape kept;
	int64_t axes[F8_MAX_RANK];
	uint32_t n_axes;
	bool count_is_const;
	int64_t count;
} reduction;

static reduction reduction_of(const f8_node *n, const f8_shape *x) {
	reduction r = {.kept = *x, .count_is_const = true, .count = 1};
	const f8_attr *axes = f8_node_attr(n, "axes");
	bool reduced[F8_MAX_RANK] = {false};
	for (uint32_t i = 0; axes && i < axes->ints.n; i++) {
		int axis;
		if (f8_axis_normalize(axes->ints.items[i], x->rank, false, &axis))
			reduced[axis] = true;
	}
	for (int i = 0; i < x->rank; i++) {
		if (axes && !reduced[i])
			continue;
		r.axes[r.n_axes++] = i;
		r.count_is_const &= f8_dim_is_const(x->dims[i]);
		r.count *= f8_dim_is_const(x->dims[i]) ? f8_dim_value(x->dims[i]) : 1;
		r.kept.dims[i] = f8_dim_const(1);
	}
	return r;
}

/* dy with the reduced axes back (size 1), named after `name`. */
static f8_status kept_gradient(f8_grad_context *context, f8_value_id dy, const reduction *r,
			       const char *name, f8_value_id *out, f8_diag *diag) {
	char step[F8_GRAD_NAME_MAX];
	return f8_grad_reshape(context, dy, &r->kept, f8_grad_derive(step, sizeof step, name, "kept"), out,
			    diag);
}

/* Broadcasts `g` (kept shape) to x's shape. */
static f8_status expand_to(f8_grad_context *context, f8_value_id g, const f8_shape *x,
			   const char *name, f8_value_id *out, f8_diag *diag) {
	f8_dim dims[F8_MAX_RANK];
	for (int i = 0; i < x->rank; i++)
		dims[i] = x->dims[i];
	f8_attr attr = grad_attr_dims("shape", dims, x->rank);
	return f8_grad_op(context, F8_OP_EXPAND, &g, 1, &attr, 1, name, out, diag);
}

F8_GRAD_RULE(REDUCE_SUM) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX];
	if (!wanted_x(context, &n, name))
		return F8_OK;
	f8_shape x = grad_type(context, n.inputs[0]).shape;
	reduction r = reduction_of(&n, &x);
	f8_value_id kept = F8_NONE;
	f8_status status = kept_gradient(context, dy[0], &r, name, &kept, diag);
	return status ? status : expand_to(context, kept, &x, name, &dx[0], diag);
}

/* The mean's gradient is the sum's divided by the count: a constant when the reduced dims are,
 * else counted at run time (a ReduceSum of ones). */
F8_GRAD_RULE(REDUCE_MEAN) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX], step[F8_GRAD_NAME_MAX];
	if (!wanted_x(context, &n, name))
		return F8_OK;
	f8_type x = grad_type(context, n.inputs[0]);
	reduction r = reduction_of(&n, &x.shape);
	f8_value_id kept = F8_NONE, count = F8_NONE, share = F8_NONE;
	f8_status status = kept_gradient(context, dy[0], &r, name, &kept, diag);
	if (!status && r.count_is_const) {
		status = constant_like(context, dy[0], 1.0 / (double)r.count,
				       f8_grad_derive(step, sizeof step, name, "inverse_count"), &count, diag);
		if (!status)
			status = times(context, kept, count, f8_grad_derive(step, sizeof step, name, "share"),
				       &share, diag);
	} else if (!status) {
		f8_value_id ones = F8_NONE;
		f8_attr attrs[2] = {grad_attr_ints("axes", r.axes, r.n_axes),
				    grad_attr_int("keepdims", 1)};
		status = f8_grad_fill(context, &x, 1.0, f8_grad_derive(step, sizeof step, name, "ones"), &ones,
				   diag);
		if (!status)
			status = f8_grad_op(context, F8_OP_REDUCE_SUM, &ones, 1, attrs, 2,
					 f8_grad_derive(step, sizeof step, name, "count"), &count, diag);
		if (!status)
			status = f8_grad_binary(context, F8_OP_DIV, kept, count, f8_grad_derive(step, sizeof step,
					     name, "share"), &share, diag);
	}
	return status ? status : expand_to(context, share, &x.shape, name, &dx[0], diag);
}

/* The gradient goes to the positions of the maximum, shared equally between ties (as
 * torch.amax's backward). */
F8_GRAD_RULE(REDUCE_MAX) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX], step[F8_GRAD_NAME_MAX];
	if (!wanted_x(context, &n, name))
		return F8_OK;
	f8_type x = grad_type(context, n.inputs[0]);
	reduction r = reduction_of(&n, &x.shape);
	f8_value_id kept = F8_NONE, max = F8_NONE, hits = F8_NONE, mask = F8_NONE;
	f8_value_id count = F8_NONE, share = F8_NONE;
	f8_attr to = {.name = "to", .kind = F8_ATTR_DTYPE, .dtype = x.dtype};
	f8_attr attrs[2] = {grad_attr_ints("axes", r.axes, r.n_axes), grad_attr_int("keepdims", 1)};
	f8_status status = kept_gradient(context, dy[0], &r, name, &kept, diag);
	if (!status)
		status = f8_grad_reshape(context, n.outputs[0], &r.kept, f8_grad_derive(step, sizeof step, name,
				      "max"), &max, diag);
	if (!status)
		status = compare(context, F8_OP_EQUAL, n.inputs[0], max, name, "hits", &hits, diag);
	if (!status)
		status = f8_grad_op(context, F8_OP_CAST, &hits, 1, &to, 1, f8_grad_derive(step, sizeof step, name,
				 "mask"), &mask, diag);
	if (!status)
		status = f8_grad_op(context, F8_OP_REDUCE_SUM, &mask, 1, attrs, 2,
				 f8_grad_derive(step, sizeof step, name, "ties"), &count, diag);
	if (!status)
		status = f8_grad_binary(context, F8_OP_DIV, kept, count, f8_grad_derive(step, sizeof step, name,
				     "share"), &share, diag);
	return status ? status : times(context, mask, share, name, &dx[0], diag);
}

/* TopK: the values' gradient goes back to the places TopK took them from; the indices have
 * none. */
F8_GRAD_RULE(TOP_K) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX];
	if (dy[0] == F8_NONE || !wanted_x(context, &n, name))
		return F8_OK;
	f8_shape data = grad_type(context, n.inputs[0]).shape;
	int axis;
	f8_axis_normalize(f8_node_attr_int(&n, "axis", -1), data.rank, false, &axis);
	f8_attr attrs[2] = {grad_attr_int("axis", axis),
			    {.name = "size", .kind = F8_ATTR_DIM, .dim = data.dims[axis]}};
	f8_value_id inputs[2] = {dy[0], n.outputs[1]};
	return f8_grad_op(context, F8_OP_TOP_K_GRAD, inputs, 2, attrs, 2, name, &dx[0], diag);
}

/* A cumulative sum's gradient is the cumulative sum of dy the other way. */
F8_GRAD_RULE(CUM_SUM) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX];
	if (!wanted_x(context, &n, name))
		return F8_OK;
	f8_attr attrs[3] = {grad_attr_int("axis", f8_node_attr_int(&n, "axis", 0)),
			    grad_attr_int("exclusive", f8_node_attr_int(&n, "exclusive", 0)),
			    grad_attr_int("reverse", !f8_node_attr_int(&n, "reverse", 0))};
	uint32_t n_attrs = 1;
	if (attrs[1].i)
		n_attrs++;
	if (attrs[2].i)
		attrs[n_attrs++] = attrs[2];
	return f8_grad_op(context, F8_OP_CUM_SUM, dy, 1, attrs, n_attrs, name, &dx[0], diag);
}

/* Collectives: gathering and scattering are each other's gradients (over the same group). */
static f8_status collective_back(f8_grad_context *context, f8_node_id node, const f8_value_id *dy,
				 f8_value_id *dx, f8_op op, f8_diag *diag) {
	f8_node n = grad_node(context, node);
	char name[F8_GRAD_NAME_MAX];
	if (!wanted_x(context, &n, name))
		return F8_OK;
	return f8_grad_op(context, op, dy, 1, n.attrs, n.n_attrs, name, &dx[0], diag);
}

/* AllGather's readers hold the ranks' terms of its gradient, to be summed and split again;
 * unless replicated=1, where every rank's gradient is the whole one, of which it takes its part.
 * LocalShard's gradient is the parts gathered (Megatron's scatter to the sequence-parallel
 * region). */
F8_GRAD_RULE(ALL_GATHER) {
	f8_node n = grad_node(context, node);
	if (!f8_node_attr_int(&n, "replicated", 0))
		return collective_back(context, node, dy, dx, F8_OP_REDUCE_SCATTER, diag);
	char name[F8_GRAD_NAME_MAX];
	if (!wanted_x(context, &n, name))
		return F8_OK;
	f8_attr attrs[8]; // AllGather's attributes but replicated (its schema has 5)
	uint32_t n_attrs = 0;
	for (uint32_t i = 0; i < n.n_attrs && n_attrs < sizeof attrs / sizeof attrs[0]; i++)
		if (strcmp(n.attrs[i].name, "replicated") != 0)
			attrs[n_attrs++] = n.attrs[i];
	return f8_grad_op(context, F8_OP_LOCAL_SHARD, dy, 1, attrs, n_attrs, name, &dx[0], diag);
}

F8_GRAD_RULE(LOCAL_SHARD) {
	return collective_back(context, node, dy, dx, F8_OP_ALL_GATHER, diag);
}

F8_GRAD_RULE(REDUCE_SCATTER) {
	return collective_back(context, node, dy, dx, F8_OP_ALL_GATHER, diag);
}
