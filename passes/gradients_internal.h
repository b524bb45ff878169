/*
 * What the gradient rules (passes/gradients*.c) share besides the contract of gradients.h: the
 * naming of gradients, which the autodiff engine decides (passes/autodiff.c), an emit that names
 * every output, and small builders (constants, zeros, the sum of a broadcast gradient back to an
 * input's shape). Not part of the passes' API.
 */
#ifndef F8_PASSES_GRADIENTS_INTERNAL_H
#define F8_PASSES_GRADIENTS_INTERNAL_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t

#include "passes/gradients.h" // f8_grad_context, f8_grad_emit

enum { F8_GRAD_NAME_MAX = 256 }; // room for a value's name and a gradient suffix

/* Engine side (passes/autodiff.c). */

/*
 * The name the next gradient contribution to `value` gets, into `buffer`: `<value>.grad` when
 * it is the only one the engine expects, else `<value>.grad.<k>` (the engine then names their
 * sum `<value>.grad`). Each call hands out the next k.
 */
void f8_grad_name(f8_grad_context *context, f8_value_id value, char *buffer, size_t size);

/*
 * f8_grad_emit with a name per output: names[i] names output i (made unique; NULL, or a NULL
 * entry, derives one). Outputs read from a gradient are marked role grad.
 */
f8_status f8_grad_emit_named(f8_grad_context *context, f8_op op, const f8_value_id *inputs,
			     uint32_t n_inputs, const f8_attr *attrs, uint32_t n_attrs,
			     uint32_t n_outputs, const char *const *names, f8_value_id *outputs,
			     f8_diag *diag);

/* Fails with F8_ERR_UNSUPPORTED about forward node `node` (message printf-style) and a hint. */
f8_status f8_grad_unsupported(f8_grad_context *context, f8_node_id node, f8_diag *diag,
			      const char *format, ...) __attribute__((format(printf, 4, 5)));

/* Rule side (passes/gradients.c). */

/* The type of `value`, copied: the value table moves as nodes are emitted. */
static inline f8_type grad_type(f8_grad_context *context, f8_value_id value) {
	return f8_grad_graph(context)->values[value].type;
}

/* Forward node `node`, copied for the same reason (its operand and attribute arrays live in the
 * graph's arena and stay put). */
static inline f8_node grad_node(f8_grad_context *context, f8_node_id node) {
	return f8_grad_graph(context)->nodes[node];
}

/* `base` + "." + `suffix` into `buffer`; returns `buffer`. */
const char *f8_grad_derive(char *buffer, size_t size, const char *base, const char *suffix);

/* `name` when `last`, else `name`.`suffix` into `buffer`: the name of a step of a chain whose
 * last node takes the chain's name. */
const char *f8_grad_step_name(char *buffer, size_t size, const char *name, bool last,
			   const char *suffix);

/* Emits a one-output node named `name` (NULL: derived) into *out. */
f8_status f8_grad_op(f8_grad_context *context, f8_op op, const f8_value_id *inputs,
		  uint32_t n_inputs, const f8_attr *attrs, uint32_t n_attrs, const char *name,
		  f8_value_id *out, f8_diag *diag);

/* A one-input, one-output node without attributes. */
f8_status f8_grad_unary(f8_grad_context *context, f8_op op, f8_value_id x, const char *name,
		     f8_value_id *out, f8_diag *diag);

/* A two-input, one-output node without attributes (Add, Mul, ...). */
f8_status f8_grad_binary(f8_grad_context *context, f8_op op, f8_value_id a, f8_value_id b,
		      const char *name, f8_value_id *out, f8_diag *diag);

/* A scalar Constant `value` of `dtype` (a float dtype or an integer one). */
f8_status f8_grad_constant(f8_grad_context *context, f8_dtype dtype, double value,
			const char *name, f8_value_id *out, f8_diag *diag);

/* ConstantOfShape `value` with `type`: the zeros that stand for a gradient nothing flows into. */
f8_status f8_grad_fill(f8_grad_context *context, const f8_type *type, double value,
		    const char *name, f8_value_id *out, f8_diag *diag);

/* Reshape of `x` to `shape` (no node when it has that shape already). */
f8_status f8_grad_reshape(f8_grad_context *context, f8_value_id x, const f8_shape *shape,
		       const char *name, f8_value_id *out, f8_diag *diag);

/* Whether a gradient of shape `full` must be summed to reach `target` (broadcast undone). */
bool f8_grad_needs_sum(const f8_shape *full, const f8_shape *target);

/*
 * The gradient `g` of a broadcast result summed back to an input of shape `target`: ReduceSum
 * over the broadcast axes with keepdims, then a Reshape when ranks differ; `g` itself when
 * nothing was broadcast.
 */
f8_status f8_grad_sum_to(f8_grad_context *context, f8_value_id g, const f8_shape *target,
		      const char *name, f8_value_id *out, f8_diag *diag);

/* The value of a Constant of one element at `value` into *out; false when it is not one. */
bool f8_grad_scalar_constant(const f8_graph *graph, f8_value_id value, double *out);

/* The attribute builders. */
static inline f8_attr grad_attr_int(const char *name, int64_t value) {
	return (f8_attr){.name = name, .kind = F8_ATTR_INT, .i = value};
}
static inline f8_attr grad_attr_float(const char *name, double value) {
	return (f8_attr){.name = name, .kind = F8_ATTR_FLOAT, .f = value};
}
static inline f8_attr grad_attr_ints(const char *name, int64_t *items, uint32_t n) {
	return (f8_attr){.name = name, .kind = F8_ATTR_INTS, .ints = {.n = n, .items = items}};
}
static inline f8_attr grad_attr_dims(const char *name, f8_dim *items, uint32_t n) {
	return (f8_attr){.name = name, .kind = F8_ATTR_DIMS, .dims = {.n = n, .items = items}};
}

#endif
