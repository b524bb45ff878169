/*
 * The gradient rules: one function per differentiable op of ir/ops.def (F8_OPF_DIFFERENTIABLE),
 * named by its enum (f8_grad_ADD, f8_grad_LAYER_NORM, ...). The table in passes/gradients.c is
 * generated from ops.def and takes the address of f8_grad_<ENUM> for exactly the ops flagged
 * differentiable, so that a flagged op without a rule is a link error.
 *
 * A rule is given the forward node and the gradient flowing into each of its outputs, and
 * emits (through the context) the nodes that compute the gradient of each input that wants one.
 */
#ifndef F8_PASSES_GRADIENTS_H
#define F8_PASSES_GRADIENTS_H

#include <stdbool.h> // bool
#include <stdint.h>  // uint32_t

#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/graph.h" // f8_graph, f8_node_id, f8_value_id
#include "ir/ops.h"   // f8_op, f8_attr

/* The state of one autodiff run (passes/autodiff.c), which rules build through. */
typedef struct f8_grad_context f8_grad_context;

/*
 * A rule: node `node` of the forward program; dy[i] the gradient of its output i (F8_NONE when
 * none flows into it: a rule treats it as zeros); it sets dx[i] for each input i with
 * f8_grad_wants(context, input) to a value of that input's type (or leaves F8_NONE: no gradient,
 * as for an integer index input). dx arrives filled with F8_NONE.
 */
typedef f8_status (*f8_grad_rule)(f8_grad_context *context, f8_node_id node,
				  const f8_value_id *dy, f8_value_id *dx, f8_diag *diag);

#define F8_GRAD_RULE(e)                                                                        \
	f8_status f8_grad_##e(f8_grad_context *context, f8_node_id node, const f8_value_id *dy, \
			      f8_value_id *dx, f8_diag *diag)
#define X(e, ...) F8_GRAD_RULE(e);
#include "ir/ops.def"
#undef X

/* The rule of `op`, or NULL when the op has none. */
f8_grad_rule f8_grad_rule_get(f8_op op);

/* The graph being differentiated (its tables move as nodes are added: re-read pointers). */
f8_graph *f8_grad_graph(f8_grad_context *context);

/* True when a gradient of `value` is needed (it lies on a path from a wrt value to the loss). */
bool f8_grad_wants(const f8_grad_context *context, f8_value_id value);

/*
 * Emits a node of `op` reading `inputs` (n_inputs; F8_NONE for an omitted optional input) with
 * `attrs` (n_attrs, in any order; copied), making n_outputs values whose ids go to outputs[],
 * with types inferred at once (a rule may read them), in the autodiff's phase and the scope of
 * the node being differentiated. `name` names the first output ("<name>", then "<name>.1", ...,
 * made unique); NULL derives one.
 */
f8_status f8_grad_emit(f8_grad_context *context, f8_op op, const f8_value_id *inputs,
		       uint32_t n_inputs, const f8_attr *attrs, uint32_t n_attrs,
		       uint32_t n_outputs, const char *name, f8_value_id *outputs, f8_diag *diag);

/*
 * Output `index` of forward node `node`, added to it (and its type inferred) when the node has
 * fewer outputs: the statistics a norm's or an attention's backward reads.
 */
f8_status f8_grad_forward_output(f8_grad_context *context, f8_node_id node, uint32_t index,
				 f8_value_id *out, f8_diag *diag);

#endif
