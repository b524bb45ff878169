/*
 * Reverse-mode automatic differentiation (passes/autodiff.h) and the context the gradient rules
 * build through (passes/gradients.h).
 *
 * A run marks the values that want a gradient: float values (f64, f32, bf16, f16) on a path from
 * a wrt value to the loss. It counts how many gradient contributions each will receive (one per
 * reading slot of an on-path node), which fixes the names: `<value>.grad` for the gradient of a
 * value, `<value>.grad.<k>` for its contributions when it has several. Then it walks the forward
 * program backwards and gives each on-path node's rule the gradients of its outputs. What a rule
 * returns for an input is added into that input's gradient as soon as it arrives, as PyTorch
 * accumulates: a contribution does not stay alive until the producer's turn, and the Add that
 * completes the sum is the value named `<value>.grad`.
 *
 * Integer and bool values carry no gradient (an argmax, a mask, a cast to integers: zero almost
 * everywhere, as in PyTorch); an FP8 value between a wrt value and the loss is an error, since
 * no rule knows what its rounding should pass back.
 */
#include "passes/autodiff.h" // f8_autodiff_build

#include <stdarg.h> // va_list
#include <stdio.h>  // snprintf, vsnprintf
#include <string.h> // strcmp, strlen

#include "ir/alloc.h"                  // f8_calloc, f8_malloc, f8_free
#include "ir/text.h"                   // f8_type_format
#include "ir/verify.h"                 // f8_node_infer_types
#include "passes/gradients_internal.h" // f8_grad_context, f8_grad_rule_get, f8_grad_name

struct f8_grad_context {
	f8_graph *graph;
	f8_phase phase;      // of the nodes emitted
	uint32_t n_values;   // values when the run began: the size of the per-value arrays
	uint32_t n_nodes;    // nodes when the run began: the size of `current`
	bool *wants;         // (n_values) on a path from a wrt value to the loss, float
	uint32_t *expected;  // (n_values) contributions the on-path readers will make
	uint32_t *named;     // (n_values) contribution names handed out so far
	uint32_t *received;  // (n_values) contributions added so far
	f8_value_id *grad;   // (n_values) the gradient summed so far, F8_NONE before any
	f8_node_id *current; // (n_nodes) the node that stands for a forward node now
	f8_node_id node;     // the forward node whose rule runs, F8_NONE outside rules
};

/* The float dtypes that gradients flow through; FP8 and E8M0 are storage formats. */
static bool has_gradients(f8_dtype dtype) {
	return dtype == F8_DTYPE_F64 || dtype == F8_DTYPE_F32 || dtype == F8_DTYPE_BF16 ||
	       dtype == F8_DTYPE_F16;
}

f8_graph *f8_grad_graph(f8_grad_context *context) {
	return context->graph;
}

bool f8_grad_wants(const f8_grad_context *context, f8_value_id value) {
	return value < context->n_values && context->wants[value];
}

/* Where forward node `node` stands now (f8_grad_forward_output replaces nodes). */
static f8_node_id resolve(const f8_grad_context *context, f8_node_id node) {
	return node < context->n_nodes ? context->current[node] : node;
}

void f8_grad_name(f8_grad_context *context, f8_value_id value, char *buffer, size_t size) {
	const char *name = context->graph->values[value].name;
	if (value >= context->n_values || context->expected[value] <= 1) {
		snprintf(buffer, size, "%s.grad", name);
		return;
	}
	snprintf(buffer, size, "%s.grad.%u", name, ++context->named[value]);
}

f8_status f8_grad_unsupported(f8_grad_context *context, f8_node_id node, f8_diag *diag,
			      const char *format, ...) {
	va_list args;
	va_start(args, format);
	f8_diag_setv(diag, F8_ERR_UNSUPPORTED, format, args);
	va_end(args);
	f8_node_id id = resolve(context, node);
	f8_diag_set_node(diag, context->graph, id);
	// The place in the model, as the verifier gives it: the text IR's line, else the JSON's.
	const f8_graph *graph = context->graph;
	const f8_node *n = &graph->nodes[id];
	if (graph->text_file && n->text_line)
		f8_diag_at(diag, graph->text_file, n->text_line, 1, NULL, 0);
	else if (n->location.file && n->location.line)
		f8_diag_at(diag, n->location.file, n->location.line, n->location.column, NULL, 0);
	return F8_ERR_UNSUPPORTED;
}

/* Whether `name` is free in the graph and among the first n_taken names of `taken`. */
static bool name_is_free(const f8_graph *graph, const char *name,
			 char (*taken)[F8_GRAD_NAME_MAX], uint32_t n_taken) {
	if (f8_graph_find_value(graph, name, strlen(name)) != F8_NONE)
		return false;
	for (uint32_t i = 0; i < n_taken; i++)
		if (strcmp(taken[i], name) == 0)
			return false;
	return true;
}

/* `base`, or `base_<k>` for the first k that is free, into names[n_taken]. The suffix is not
 * `.k`: `<value>.grad.<k>` names contributions. */
static void unique_name(const f8_graph *graph, const char *base, char (*names)[F8_GRAD_NAME_MAX],
			uint32_t n_taken) {
	char *out = names[n_taken];
	snprintf(out, F8_GRAD_NAME_MAX, "%s", base);
	for (uint32_t k = 1; !name_is_free(graph, out, names, n_taken); k++)
		snprintf(out, F8_GRAD_NAME_MAX, "%.*s_%u", F8_GRAD_NAME_MAX - 12, base, k);
}

/* Copies `attrs` into `sorted` in the order of `op`'s schema, with the schema's name pointers.
 * False when one is not in the schema (a rule's mistake). */
static bool sort_attrs(f8_op op, const f8_attr *attrs, uint32_t n_attrs, f8_attr *sorted) {
	const f8_op_info *info = f8_op_get_info(op);
	uint32_t n = 0;
	for (uint32_t s = 0; s < info->n_attrs; s++) {
		for (uint32_t i = 0; i < n_attrs; i++) {
			if (strcmp(attrs[i].name, info->attrs[s].name) == 0) {
				sorted[n] = attrs[i];
				sorted[n++].name = info->attrs[s].name;
				break;
			}
		}
	}
	return n == n_attrs;
}

/* Gives the outputs of the new node `id` their inferred types, and role grad when it reads a
 * gradient. A type error is a rule's mistake: F8_ERR_INVALID about the forward node. */
static f8_status type_new_node(f8_grad_context *context, f8_node_id id, f8_diag *diag) {
	f8_graph *graph = context->graph;
	uint32_t n_outputs = graph->nodes[id].n_outputs;
	f8_type *types = f8_calloc(n_outputs ? n_outputs : 1, sizeof *types);
	if (!types)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory differentiating");
	f8_diag refusal;
	f8_diag_clear(&refusal);
	f8_status status = f8_node_infer_types(graph, id, types, &refusal);
	if (status == F8_ERR_NOMEM) {
		status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory differentiating");
	} else if (status) {
		status = f8_diag_set(diag, F8_ERR_INVALID, "the gradient rule made an ill-typed %s: %s",
				     f8_op_name(graph->nodes[id].op), refusal.message);
		if (context->node != F8_NONE)
			f8_diag_set_node(diag, graph, resolve(context, context->node));
	}
	const f8_node *node = &graph->nodes[id];
	bool reads_gradient = false;
	for (uint32_t i = 0; i < node->n_inputs; i++)
		reads_gradient |= node->inputs[i] != F8_NONE &&
				  graph->values[node->inputs[i]].role == F8_ROLE_GRADIENT;
	for (uint32_t i = 0; !status && i < n_outputs; i++) {
		graph->values[node->outputs[i]].type = types[i];
		if (reads_gradient)
			graph->values[node->outputs[i]].role = F8_ROLE_GRADIENT;
	}
	f8_free(types);
	return status;
}

f8_status f8_grad_emit_named(f8_grad_context *context, f8_op op, const f8_value_id *inputs,
			     uint32_t n_inputs, const f8_attr *attrs, uint32_t n_attrs,
			     uint32_t n_outputs, const char *const *names, f8_value_id *outputs,
			     f8_diag *diag) {
	f8_graph *graph = context->graph;
	f8_attr sorted[16];
	if (n_attrs > sizeof sorted / sizeof sorted[0] || !sort_attrs(op, attrs, n_attrs, sorted))
		return f8_diag_set(diag, F8_ERR_INVALID, "a gradient rule gave %s an attribute it does "
				   "not have", f8_op_name(op));
	char (*unique)[F8_GRAD_NAME_MAX] = f8_malloc((n_outputs ? n_outputs : 1) * sizeof *unique);
	const char **final = f8_malloc((n_outputs ? n_outputs : 1) * sizeof *final);
	f8_status status = unique && final ? F8_OK
					   : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory differentiating");
	char derived[F8_GRAD_NAME_MAX];
	f8_node_id forward = context->node != F8_NONE ? resolve(context, context->node) : F8_NONE;
	const f8_node *origin = forward != F8_NONE ? &graph->nodes[forward] : NULL;
	snprintf(derived, sizeof derived, "%s.bwd",
		 origin && origin->n_outputs ? graph->values[origin->outputs[0]].name : "grad");
	for (uint32_t i = 0; !status && i < n_outputs; i++) {
		unique_name(graph, names && names[i] ? names[i] : derived, unique, i);
		final[i] = unique[i];
	}
	f8_node_id id;
	if (!status)
		status = f8_graph_add_node(graph, op, inputs, n_inputs, n_outputs, final, &id, diag);
	if (!status && f8_node_set_attrs(graph, id, sorted, n_attrs))
		status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory differentiating");
	f8_free(unique);
	f8_free(final);
	if (status)
		return status;
	f8_node *node = &graph->nodes[id];
	node->phase = context->phase;
	if (forward != F8_NONE) {
		node->scope = graph->nodes[forward].scope;
		node->location = graph->nodes[forward].location;
	}
	if ((status = type_new_node(context, id, diag)))
		return status;
	for (uint32_t i = 0; i < n_outputs; i++)
		outputs[i] = graph->nodes[id].outputs[i];
	return F8_OK;
}

f8_status f8_grad_emit(f8_grad_context *context, f8_op op, const f8_value_id *inputs,
		       uint32_t n_inputs, const f8_attr *attrs, uint32_t n_attrs,
		       uint32_t n_outputs, const char *name, f8_value_id *outputs, f8_diag *diag) {
	if (!name)
		return f8_grad_emit_named(context, op, inputs, n_inputs, attrs, n_attrs, n_outputs,
					  NULL, outputs, diag);
	char (*names)[F8_GRAD_NAME_MAX] = f8_malloc((n_outputs ? n_outputs : 1) * sizeof *names);
	const char **pointers = f8_malloc((n_outputs ? n_outputs : 1) * sizeof *pointers);
	f8_status status = names && pointers ? F8_OK
					     : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory differentiating");
	for (uint32_t i = 0; !status && i < n_outputs; i++) {
		if (i == 0)
			snprintf(names[i], F8_GRAD_NAME_MAX, "%s", name);
		else
			snprintf(names[i], F8_GRAD_NAME_MAX, "%s.%u", name, i);
		pointers[i] = names[i];
	}
	if (!status)
		status = f8_grad_emit_named(context, op, inputs, n_inputs, attrs, n_attrs, n_outputs,
					    pointers, outputs, diag);
	f8_free(names);
	f8_free(pointers);
	return status;
}

/* The name of forward output `index` of an op that makes statistics for its backward. */
static const char *statistic_name(f8_op op, uint32_t index) {
	switch (op) {
	case F8_OP_LAYER_NORM:
		return index == 1 ? "mean" : "rstd";
	case F8_OP_RMS_NORM:
		return "rstd";
	case F8_OP_ATTENTION:
	case F8_OP_ATTENTION_PACKED:
	case F8_OP_CROSS_ENTROPY:
		return "lse";
	case F8_OP_DROPOUT:
		return "mask";
	default:
		return "out";
	}
}

/*
 * Output `index` of forward node `node`: a node cannot grow outputs in place (its values are
 * made with it), so a copy with index + 1 outputs takes the old node's place in the program and
 * its values; the values made for the copy's first outputs are left unused.
 */
f8_status f8_grad_forward_output(f8_grad_context *context, f8_node_id node, uint32_t index,
				 f8_value_id *out, f8_diag *diag) {
	f8_graph *graph = context->graph;
	f8_node_id old = resolve(context, node);
	f8_node before = graph->nodes[old];
	if (index < before.n_outputs) {
		*out = before.outputs[index];
		return F8_OK;
	}
	if (index >= f8_op_get_info(before.op)->max_outputs)
		return f8_diag_set(diag, F8_ERR_INVALID, "a gradient rule asked %s for output %u, "
				   "which it does not have", f8_op_name(before.op), index);
	uint32_t n_outputs = index + 1;
	// Zeroed: the outputs the node has keep their names, and unique_name compares the new
	// ones against every entry before them, those included (as empty strings).
	char (*names)[F8_GRAD_NAME_MAX] = f8_calloc(n_outputs, sizeof *names);
	const char **pointers = f8_calloc(n_outputs, sizeof *pointers);
	f8_status status = names && pointers ? F8_OK
					     : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory differentiating");
	const char *first = graph->values[before.outputs[0]].name;
	for (uint32_t i = before.n_outputs; !status && i < n_outputs; i++) {
		char base[F8_GRAD_NAME_MAX];
		snprintf(base, sizeof base, "%s.%s", first, statistic_name(before.op, i));
		unique_name(graph, base, names, i);
		pointers[i] = names[i];
	}
	f8_node_id id;
	if (!status)
		status = f8_graph_add_node(graph, before.op, before.inputs, before.n_inputs, n_outputs,
					   pointers, &id, diag);
	f8_free(names);
	f8_free(pointers);
	if (status)
		return status;
	// f8_graph_add_node appended the copy to the program: it goes where the old node stood.
	graph->n_order--;
	for (uint32_t p = 0; p < graph->n_order; p++)
		if (graph->order[p] == old)
			graph->order[p] = id;
	f8_node *copy = &graph->nodes[id];
	copy->n_attrs = before.n_attrs;
	copy->attrs = before.attrs; // in the arena, never changed in place: sharing is safe
	copy->scope = before.scope;
	copy->name = before.name;
	copy->phase = before.phase;
	copy->location = before.location;
	copy->text_line = before.text_line;
	for (uint32_t i = 0; i < before.n_outputs; i++) {
		copy->outputs[i] = before.outputs[i];
		graph->values[before.outputs[i]].producer = id;
	}
	if (node < context->n_nodes)
		context->current[node] = id;
	f8_node_id saved = context->node;
	context->node = node;
	status = type_new_node(context, id, diag);
	context->node = saved;
	if (!status)
		*out = graph->nodes[id].outputs[index];
	return status;
}

/* Adds contribution `g` into the gradient of `value`, summing as soon as there are two. */
static f8_status accumulate(f8_grad_context *context, f8_value_id value, f8_value_id g,
			    f8_diag *diag) {
	f8_graph *graph = context->graph;
	if (g >= context->n_values && graph->values[g].producer != F8_NONE)
		graph->values[g].role = F8_ROLE_GRADIENT;
	context->received[value]++;
	if (context->grad[value] == F8_NONE) {
		context->grad[value] = g;
		return F8_OK;
	}
	char name[F8_GRAD_NAME_MAX];
	const char *suffix = context->received[value] >= context->expected[value] ? "grad"
										   : "grad.partial";
	snprintf(name, sizeof name, "%s.%s", graph->values[value].name, suffix);
	f8_value_id inputs[2] = {context->grad[value], g}, sum;
	const char *names[1] = {name};
	f8_status status = f8_grad_emit_named(context, F8_OP_ADD, inputs, 2, NULL, 0, 1, names, &sum,
					      diag);
	if (!status)
		context->grad[value] = sum;
	return status;
}

/* The per-value marks of one run (all sized by the graph's values when it began). */
typedef struct marks {
	bool *from_wrt; // depends on a wrt value, through values of any dtype
	bool *to_loss;  // the loss depends on it, through values of any dtype
	bool *forward;  // depends on a wrt value through float values only
} marks;

/* Marks what depends on the wrt values and what the loss depends on; context->wants gets the
 * float values on a path from one to the other. */
static void mark_paths(f8_grad_context *context, const f8_node_id *order, uint32_t n_order,
		       f8_value_id loss, const f8_value_id *wrt, uint32_t n_wrt, marks *m) {
	const f8_graph *graph = context->graph;
	for (uint32_t i = 0; i < n_wrt; i++) {
		m->from_wrt[wrt[i]] = true;
		m->forward[wrt[i]] = has_gradients(graph->values[wrt[i]].type.dtype);
	}
	for (uint32_t p = 0; p < n_order; p++) {
		const f8_node *node = &graph->nodes[order[p]];
		bool any = false, floats = false;
		for (uint32_t i = 0; i < node->n_inputs; i++) {
			if (node->inputs[i] == F8_NONE)
				continue;
			any |= m->from_wrt[node->inputs[i]];
			floats |= m->forward[node->inputs[i]];
		}
		for (uint32_t o = 0; o < node->n_outputs; o++) {
			f8_value_id out = node->outputs[o];
			m->from_wrt[out] |= any;
			m->forward[out] |= floats && has_gradients(graph->values[out].type.dtype);
		}
	}
	m->to_loss[loss] = true;
	context->wants[loss] = m->forward[loss];
	for (uint32_t p = n_order; p-- > 0;) {
		const f8_node *node = &graph->nodes[order[p]];
		bool any = false, wanted = false;
		for (uint32_t o = 0; o < node->n_outputs; o++) {
			any |= m->to_loss[node->outputs[o]];
			wanted |= context->wants[node->outputs[o]];
		}
		for (uint32_t i = 0; i < node->n_inputs; i++) {
			f8_value_id in = node->inputs[i];
			if (in == F8_NONE)
				continue;
			m->to_loss[in] |= any;
			context->wants[in] |= wanted && m->forward[in];
		}
	}
}

/* Whether node `id` lies on a path: it reads a value that wants a gradient and makes one. */
static bool on_path(const f8_grad_context *context, f8_node_id id) {
	const f8_node *node = &context->graph->nodes[id];
	bool reads = false, makes = false;
	for (uint32_t i = 0; i < node->n_inputs; i++)
		reads |= node->inputs[i] != F8_NONE && context->wants[node->inputs[i]];
	for (uint32_t o = 0; o < node->n_outputs; o++)
		makes |= context->wants[node->outputs[o]];
	return reads && makes;
}

/*
 * Refuses what has no gradient: a wrt value the loss depends on that is not float, an FP8 value
 * between a wrt value and the loss, an on-path node without a rule. Counts the contributions
 * each value will receive.
 */
static f8_status check_paths(f8_grad_context *context, const f8_node_id *order, uint32_t n_order,
			     const f8_value_id *wrt, uint32_t n_wrt, const marks *m, f8_diag *diag) {
	const f8_graph *graph = context->graph;
	for (uint32_t i = 0; i < n_wrt; i++) {
		const f8_value *value = &graph->values[wrt[i]];
		if (m->to_loss[wrt[i]] && !has_gradients(value->type.dtype)) {
			f8_diag_set(diag, F8_ERR_UNSUPPORTED, "the loss depends on %%%s, a %s value: only "
				    "f64, f32, bf16 and f16 values have gradients", value->name,
				    f8_dtype_name(value->type.dtype));
			f8_diag_hint(diag, "differentiate with respect to float values only");
			return F8_ERR_UNSUPPORTED;
		}
	}
	for (uint32_t p = 0; p < n_order; p++) {
		f8_node_id id = order[p];
		const f8_node *node = &graph->nodes[id];
		for (uint32_t o = 0; o < node->n_outputs; o++) {
			const f8_value *out = &graph->values[node->outputs[o]];
			if (!m->from_wrt[node->outputs[o]] || !m->to_loss[node->outputs[o]] ||
			    !f8_dtype_is_float(out->type.dtype) || has_gradients(out->type.dtype))
				continue;
			if (node->op == F8_OP_QUANTIZE_LINEAR) {
				// A model that quantizes itself (QDQ): its FP8 is fixed for inference.
				f8_grad_unsupported(context, id, diag, "the model quantizes %%%s to %s "
						    "itself (QuantizeLinear), and the loss depends on "
						    "it: f8c trains in its own FP8 recipes, not through "
						    "a model's fixed scales", out->name,
						    f8_dtype_name(out->type.dtype));
				f8_diag_hint(diag, "export the model without its QuantizeLinear / "
					     "DequantizeLinear pairs and train it with --fp8-format; "
					     "the quantized model runs as it is with f8c infer");
				return F8_ERR_UNSUPPORTED;
			}
			f8_grad_unsupported(context, id, diag, "its output %%%s is %s, which no gradient "
					    "flows through, and the loss depends on it", out->name,
					    f8_dtype_name(out->type.dtype));
			f8_diag_hint(diag, "differentiate before the FP8 passes insert their casts");
			return F8_ERR_UNSUPPORTED;
		}
		if (!on_path(context, id))
			continue;
		if (!f8_grad_rule_get(node->op)) {
			f8_grad_unsupported(context, id, diag, "%s has no gradient rule, and the loss "
					    "depends on what it reads", f8_op_name(node->op));
			f8_diag_hint(diag, "the ops with gradients are those flagged differentiable in "
				     "ir/ops.def; keep this one off the path from the parameters to the "
				     "loss, or give it a rule in passes/gradients*.c");
			return F8_ERR_UNSUPPORTED;
		}
		for (uint32_t i = 0; i < node->n_inputs; i++)
			if (node->inputs[i] != F8_NONE && context->wants[node->inputs[i]])
				context->expected[node->inputs[i]]++;
	}
	return F8_OK;
}

/* The gradient of the loss: `seed` (expanded to the loss's shape), or ones. */
static f8_status make_seed(f8_grad_context *context, f8_value_id loss, f8_value_id seed,
			   f8_diag *diag) {
	f8_graph *graph = context->graph;
	f8_type type = graph->values[loss].type;
	char name[F8_GRAD_NAME_MAX];
	snprintf(name, sizeof name, "%s.grad", graph->values[loss].name);
	context->node = graph->values[loss].producer;
	f8_value_id g = seed;
	f8_status status = F8_OK;
	if (seed != F8_NONE && type.shape.rank > 0) {
		f8_attr shape = grad_attr_dims("shape", type.shape.dims, type.shape.rank);
		status = f8_grad_op(context, F8_OP_EXPAND, &seed, 1, &shape, 1, name, &g, diag);
	} else if (seed == F8_NONE) {
		status = type.shape.rank ? f8_grad_fill(context, &type, 1.0, name, &g, diag)
					 : f8_grad_constant(context, type.dtype, 1.0, name, &g, diag);
	}
	if (!status && g >= context->n_values)
		graph->values[g].role = F8_ROLE_GRADIENT;
	context->grad[loss] = g;
	context->node = F8_NONE;
	return status;
}

/* Checks the arguments: ids in range, a float loss, a scalar seed of the loss's dtype. */
static f8_status check_arguments(const f8_graph *graph, f8_value_id loss, f8_value_id seed,
				 const f8_value_id *wrt, uint32_t n_wrt, f8_diag *diag) {
	if (loss >= graph->n_values)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "the loss is value %u, which does not exist",
				   loss);
	const f8_type *type = &graph->values[loss].type;
	if (!has_gradients(type->dtype))
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "the loss %%%s is %s; it must be f64, f32, "
				   "bf16 or f16", graph->values[loss].name, f8_dtype_name(type->dtype));
	if (seed != F8_NONE &&
	    (seed >= graph->n_values || graph->values[seed].type.dtype != type->dtype ||
	     graph->values[seed].type.shape.rank != 0))
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "the seed must be a scalar of the loss's "
				   "dtype (%s)", f8_dtype_name(type->dtype));
	for (uint32_t i = 0; i < n_wrt; i++)
		if (wrt[i] >= graph->n_values)
			return f8_diag_set(diag, F8_ERR_ARGUMENT, "wrt[%u] is value %u, which does not "
					   "exist", i, wrt[i]);
	return F8_OK;
}

/* Runs the rule of on-path node `id` and adds what it returns into its inputs' gradients.
 * dy and dx are scratch arrays large enough for the node. */
static f8_status differentiate(f8_grad_context *context, f8_node_id id, f8_value_id *dy,
			       f8_value_id *dx, f8_diag *diag) {
	f8_node node = context->graph->nodes[id];
	bool flows = false;
	for (uint32_t o = 0; o < node.n_outputs; o++) {
		dy[o] = context->grad[node.outputs[o]];
		flows |= dy[o] != F8_NONE;
	}
	if (!flows)
		return F8_OK; // the gradients of its outputs are all zero
	for (uint32_t i = 0; i < node.n_inputs; i++)
		dx[i] = F8_NONE;
	context->node = id;
	f8_status status = f8_grad_rule_get(node.op)(context, id, dy, dx, diag);
	for (uint32_t i = 0; !status && i < node.n_inputs; i++) {
		f8_value_id input = node.inputs[i];
		if (dx[i] == F8_NONE || !f8_grad_wants(context, input))
			continue;
		const f8_graph *graph = context->graph;
		if (!f8_type_equal(&graph->values[dx[i]].type, &graph->values[input].type)) {
			char s1[160], s2[160];
			f8_diag_set(diag, F8_ERR_INVALID, "the gradient rule of %s made %s for input %u, "
				    "which is %s", f8_op_name(node.op),
				    f8_type_format(graph, &graph->values[dx[i]].type, s1, sizeof s1), i,
				    f8_type_format(graph, &graph->values[input].type, s2, sizeof s2));
			f8_diag_set_node(diag, graph, resolve(context, id));
			return F8_ERR_INVALID;
		}
		status = accumulate(context, input, dx[i], diag);
	}
	context->node = F8_NONE;
	return status;
}

/* Allocates the context's arrays for the graph as it is now. */
static f8_status context_create(f8_grad_context *context, f8_graph *graph, f8_phase phase,
				f8_diag *diag) {
	*context = (f8_grad_context){.graph = graph, .phase = phase, .node = F8_NONE,
				     .n_values = graph->n_values, .n_nodes = graph->n_nodes};
	size_t values = graph->n_values ? graph->n_values : 1;
	size_t nodes = graph->n_nodes ? graph->n_nodes : 1;
	context->wants = f8_calloc(values, sizeof *context->wants);
	context->expected = f8_calloc(values, sizeof *context->expected);
	context->named = f8_calloc(values, sizeof *context->named);
	context->received = f8_calloc(values, sizeof *context->received);
	context->grad = f8_malloc(values * sizeof *context->grad);
	context->current = f8_malloc(nodes * sizeof *context->current);
	if (!context->wants || !context->expected || !context->named || !context->received ||
	    !context->grad || !context->current)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory differentiating");
	for (uint32_t v = 0; v < graph->n_values; v++)
		context->grad[v] = F8_NONE;
	for (uint32_t n = 0; n < graph->n_nodes; n++)
		context->current[n] = n;
	return F8_OK;
}

static void context_destroy(f8_grad_context *context) {
	f8_free(context->wants);
	f8_free(context->expected);
	f8_free(context->named);
	f8_free(context->received);
	f8_free(context->grad);
	f8_free(context->current);
}

/* The largest input and output counts of the nodes in `order`: the size of the scratch arrays. */
static uint32_t largest_arity(const f8_graph *graph, const f8_node_id *order, uint32_t n_order) {
	uint32_t most = 1;
	for (uint32_t p = 0; p < n_order; p++) {
		const f8_node *node = &graph->nodes[order[p]];
		most = node->n_inputs > most ? node->n_inputs : most;
		most = node->n_outputs > most ? node->n_outputs : most;
	}
	return most;
}

/* The backward walk: each on-path node in reverse program order, its rule run. */
static f8_status walk_backward(f8_grad_context *context, const f8_node_id *order,
			       uint32_t n_order, f8_diag *diag) {
	uint32_t arity = largest_arity(context->graph, order, n_order);
	f8_value_id *dy = f8_malloc(arity * sizeof *dy), *dx = f8_malloc(arity * sizeof *dx);
	f8_status status = dy && dx ? F8_OK
				    : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory differentiating");
	for (uint32_t p = n_order; !status && p-- > 0;)
		if (on_path(context, order[p]))
			status = differentiate(context, order[p], dy, dx, diag);
	f8_free(dy);
	f8_free(dx);
	return status;
}

f8_status f8_autodiff_build(f8_graph *graph, f8_value_id loss, f8_value_id seed,
			    const f8_value_id *wrt, uint32_t n_wrt, f8_phase phase,
			    f8_value_id *grads, f8_diag *diag) {
	for (uint32_t i = 0; i < n_wrt; i++)
		grads[i] = F8_NONE;
	f8_status status = check_arguments(graph, loss, seed, wrt, n_wrt, diag);
	if (status)
		return status;
	f8_grad_context context;
	size_t values = graph->n_values ? graph->n_values : 1;
	marks m = {f8_calloc(values, 1), f8_calloc(values, 1), f8_calloc(values, 1)};
	uint32_t n_order = graph->n_order;
	// The forward program as it is now: the walk must not see the nodes it adds.
	f8_node_id *order = f8_malloc((n_order ? n_order : 1) * sizeof *order);
	status = context_create(&context, graph, phase, diag);
	if (!status && (!m.from_wrt || !m.to_loss || !m.forward || !order))
		status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory differentiating");
	if (!status) {
		if (n_order) // an empty graph's order may be NULL
			memcpy(order, graph->order, n_order * sizeof *order);
		mark_paths(&context, order, n_order, loss, wrt, n_wrt, &m);
		status = check_paths(&context, order, n_order, wrt, n_wrt, &m, diag);
	}
	if (!status && context.wants[loss]) {
		status = make_seed(&context, loss, seed, diag);
		if (!status)
			status = walk_backward(&context, order, n_order, diag);
	}
	for (uint32_t i = 0; !status && i < n_wrt; i++)
		grads[i] = context.grad[wrt[i]];
	f8_free(m.from_wrt);
	f8_free(m.to_loss);
	f8_free(m.forward);
	f8_free(order);
	context_destroy(&context);
	return status;
}
