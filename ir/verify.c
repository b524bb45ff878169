/*
 * The verifier and the checked entry to the shape functions.
 */
#include "ir/verify.h" // f8_graph_verify, f8_node_infer_types, f8_graph_verify_buffers

#include <stdarg.h> // va_list
#include <stdio.h>  // snprintf, vsnprintf
#include <string.h> // strcmp

#include "ir/alloc.h" // f8_calloc, f8_malloc, f8_free
#include "ir/text.h"  // f8_type_format

/* Fails about node `id`: message, the node's description, its text position. */
static f8_status node_error(const f8_graph *graph, f8_node_id id, f8_diag *diag,
			    const char *format, ...) __attribute__((format(printf, 4, 5)));
static f8_status node_error(const f8_graph *graph, f8_node_id id, f8_diag *diag,
			    const char *format, ...) {
	if (!diag)
		return F8_ERR_INVALID;
	va_list args;
	va_start(args, format);
	f8_diag_setv(diag, F8_ERR_INVALID, format, args);
	va_end(args);
	f8_diag_set_node(diag, graph, id);
	const f8_node *node = &graph->nodes[id];
	if (graph->text_file && node->text_line)
		f8_diag_at(diag, graph->text_file, node->text_line, 1, NULL, 0);
	return F8_ERR_INVALID;
}

static f8_status check_attrs(const f8_graph *graph, f8_node_id id, f8_diag *diag) {
	const f8_node *node = &graph->nodes[id];
	const f8_op_info *info = f8_op_get_info(node->op);
	for (uint32_t i = 0; i < node->n_attrs; i++) {
		const f8_attr *attr = &node->attrs[i];
		const f8_attr_spec *spec = f8_op_find_attr_spec(node->op, attr->name, strlen(attr->name));
		if (!spec)
			return node_error(graph, id, diag, "%s has no attribute '%s'", info->name,
					  attr->name);
		if (spec->kind != attr->kind)
			return node_error(graph, id, diag, "attribute %s must be of kind %s, not %s",
					  attr->name, f8_attr_kind_name(spec->kind),
					  f8_attr_kind_name(attr->kind));
		for (uint32_t j = 0; j < i; j++)
			if (strcmp(node->attrs[j].name, attr->name) == 0)
				return node_error(graph, id, diag, "attribute %s is given twice", attr->name);
	}
	for (uint32_t i = 0; i < info->n_attrs; i++)
		if (info->attrs[i].required && !f8_node_attr(node, info->attrs[i].name))
			return node_error(graph, id, diag, "%s requires attribute %s (%s)", info->name,
					  info->attrs[i].name, f8_attr_kind_name(info->attrs[i].kind));
	return F8_OK;
}

/* "2", "2 to 3" or "1 or more": how many operands an op takes. */
static const char *arity_text(uint8_t min, uint8_t max, char *buffer, size_t size) {
	if (max == F8_VARIADIC)
		snprintf(buffer, size, "%u or more", min);
	else if (min == max)
		snprintf(buffer, size, "%u", min);
	else
		snprintf(buffer, size, "%u to %u", min, max);
	return buffer;
}

static f8_status check_arity(const f8_graph *graph, f8_node_id id, f8_diag *diag) {
	const f8_node *node = &graph->nodes[id];
	const f8_op_info *info = f8_op_get_info(node->op);
	char expected[32];
	if (node->n_inputs < info->min_inputs ||
	    (info->max_inputs != F8_VARIADIC && node->n_inputs > info->max_inputs))
		return node_error(graph, id, diag, "%s takes %s inputs, not %u", info->name,
				  arity_text(info->min_inputs, info->max_inputs, expected, sizeof expected),
				  node->n_inputs);
	if (node->n_outputs < info->min_outputs ||
	    (info->max_outputs != F8_VARIADIC && node->n_outputs > info->max_outputs))
		return node_error(graph, id, diag, "%s makes %s outputs, not %u", info->name,
				  arity_text(info->min_outputs, info->max_outputs, expected, sizeof expected),
				  node->n_outputs);
	// Optional inputs trail the required ones; a variadic op's inputs are all required.
	uint32_t required = info->max_inputs == F8_VARIADIC ? node->n_inputs : info->min_inputs;
	for (uint32_t i = 0; i < required; i++)
		if (node->inputs[i] == F8_NONE)
			return node_error(graph, id, diag, "input %u of %s is required", i, info->name);
	return F8_OK;
}

f8_status f8_node_infer_types(const f8_graph *graph, f8_node_id id, f8_type *outputs,
			      f8_diag *diag) {
	const f8_node *node = &graph->nodes[id];
	f8_status status = check_arity(graph, id, diag);
	if (!status)
		status = check_attrs(graph, id, diag);
	if (status)
		return status;
	for (uint32_t i = 0; i < node->n_inputs; i++) {
		f8_value_id input = node->inputs[i];
		if (input != F8_NONE && graph->values[input].type.dtype == F8_DTYPE_UNDEFINED)
			return node_error(graph, id, diag, "input %u (%%%s) has no type yet", i,
					  graph->values[input].name);
	}
	for (uint32_t i = 0; i < node->n_outputs; i++)
		outputs[i] = (f8_type){0};
	f8_diag local;
	f8_diag_clear(&local);
	status = f8_op_get_info(node->op)->infer(graph, node, outputs, &local);
	if (status)
		return node_error(graph, id, diag, "%s", local.message);
	for (uint32_t i = 0; i < node->n_outputs; i++) {
		f8_dim numel;
		if (!f8_shape_numel(&outputs[i].shape, &numel))
			return node_error(graph, id, diag, "output %u would have more elements than a "
					  "tensor can (its size overflows)", i);
	}
	return F8_OK;
}

f8_status f8_node_check_output_type(const f8_graph *graph, f8_node_id id, uint32_t index,
				    const f8_type *inferred, f8_diag *diag) {
	const f8_value *value = &graph->values[graph->nodes[id].outputs[index]];
	if (value->type.dtype == F8_DTYPE_UNDEFINED) {
		node_error(graph, id, diag, "output %%%s has no type", value->name);
		f8_diag_hint(diag, "the canonicalize pass infers types: f8c dump-ir FILE --after "
				   "canonicalize");
		return F8_ERR_INVALID;
	}
	if (f8_type_equal(&value->type, inferred))
		return F8_OK;
	char declared_text[256], inferred_text[256];
	return node_error(graph, id, diag, "output %%%s is declared %s but the op makes %s",
			  value->name,
			  f8_type_format(graph, &value->type, declared_text, sizeof declared_text),
			  f8_type_format(graph, inferred, inferred_text, sizeof inferred_text));
}

/* Fails about value `value`'s placements with "output %y <message>" about the node that makes
 * it (with its text position), or "param %w <message>" for a leaf. */
static f8_status placement_error(const f8_graph *graph, const f8_value *value, f8_diag *diag,
				 const char *format, ...) __attribute__((format(printf, 4, 5)));
static f8_status placement_error(const f8_graph *graph, const f8_value *value, f8_diag *diag,
				 const char *format, ...) {
	char message[F8_DIAG_MESSAGE_MAX];
	va_list args;
	va_start(args, format);
	vsnprintf(message, sizeof message, format, args);
	va_end(args);
	if (value->producer != F8_NONE)
		return node_error(graph, value->producer, diag, "output %%%s %s", value->name, message);
	return f8_diag_set(diag, F8_ERR_INVALID, "%s %%%s %s", f8_role_name(value->role),
			   value->name, message);
}

/* A dimension split part by part over `axis`: its parts above 0, each split evenly over the
 * axis's ranks, and, when no other axis splits that dimension, adding up to the whole of it
 * (the part times the ranks). What runtime/placement.c copies by. */
static f8_status verify_parts(const f8_graph *graph, const f8_value *value, f8_mesh_axis axis,
			      f8_diag *diag) {
	const f8_placement *placement = &value->placement[axis];
	int64_t ranks = graph->mesh[axis] > 1 ? graph->mesh[axis] : 1, sum = 0;
	for (int i = 0; i < placement->n_parts; i++) {
		if (placement->parts[i] <= 0 || placement->parts[i] % ranks)
			return placement_error(graph, value, diag, "is split over mesh axis %s in a "
					       "part of %lld, which its %lld ranks do not split evenly",
					       f8_mesh_axis_name(axis), (long long)placement->parts[i],
					       (long long)ranks);
		sum += placement->parts[i];
	}
	bool alone = true;
	for (int other = 0; other < F8_MESH_AXIS_COUNT; other++)
		alone &= other == (int)axis ||
			 value->placement[other].kind != F8_PLACEMENT_KIND_SHARD ||
			 value->placement[other].dim != placement->dim;
	f8_dim size = value->type.shape.dims[placement->dim];
	if (alone && f8_dim_is_const(size) && sum != f8_dim_value(size) * ranks)
		return placement_error(graph, value, diag, "is split over mesh axis %s in parts "
				       "adding up to %lld, but its dimension %u holds %lld a rank "
				       "(%lld ranks)", f8_mesh_axis_name(axis), (long long)sum,
				       (unsigned)placement->dim, (long long)f8_dim_value(size),
				       (long long)ranks);
	return F8_OK;
}

/* A typed value's placements on the mesh: a split dimension is one of its own, and only a float
 * value awaits a reduction (partial values are gradients and amaxes). The mesh's sizes are not
 * in the IR, so that a split dimension divides by its axis's size is left to the plan. Several
 * axes may split one dimension (ir/graph.h says in which order). */
static f8_status verify_placements(const f8_graph *graph, const f8_value *value, f8_diag *diag) {
	for (int i = 0; i < F8_MESH_AXIS_COUNT; i++) {
		const f8_placement *placement = &value->placement[i];
		const char *axis = f8_mesh_axis_name((f8_mesh_axis)i);
		uint8_t rank = value->type.shape.rank;
		if ((unsigned)placement->kind >= F8_PLACEMENT_KIND_COUNT)
			return placement_error(graph, value, diag, "has placement kind %d over mesh axis "
					       "%s, which does not exist", (int)placement->kind, axis);
		if (placement->kind == F8_PLACEMENT_KIND_SHARD && placement->dim >= rank) {
			char type[160];
			return placement_error(graph, value, diag, "is split along dimension %u over mesh "
					       "axis %s, but its type %s has %u dimension%s",
					       (unsigned)placement->dim, axis,
					       f8_type_format(graph, &value->type, type, sizeof type),
					       (unsigned)rank, rank == 1 ? "" : "s");
		}
		if (placement->kind == F8_PLACEMENT_KIND_TIED && value->role != F8_ROLE_PARAMETER)
			return placement_error(graph, value, diag, "is tied over mesh axis %s, but it is "
					       "no parameter: only a parameter is held by two stages",
					       axis);
		if (placement->kind == F8_PLACEMENT_KIND_SHARD && placement->n_parts > 1) {
			f8_status status = verify_parts(graph, value, (f8_mesh_axis)i, diag);
			if (status)
				return status;
		}
		if (placement->kind != F8_PLACEMENT_KIND_PARTIAL)
			continue;
		if ((unsigned)placement->reduction >= F8_REDUCTION_COUNT)
			return placement_error(graph, value, diag, "awaits reduction %d over mesh axis %s, "
					       "which does not exist", (int)placement->reduction, axis);
		if (!f8_dtype_is_float(value->type.dtype))
			return placement_error(graph, value, diag, "awaits a %s over mesh axis %s, but it "
					       "is %s: only float values (gradients, amaxes) are partial",
					       f8_reduction_name(placement->reduction), axis,
					       f8_dtype_name(value->type.dtype));
	}
	return F8_OK;
}

/* Each update: a leaf of a role that holds state (not an input the user feeds, not a buffer),
 * updated at most once per phase, from a value the program defines, of the leaf's type. */
static f8_status verify_updates(const f8_graph *graph, const bool *defined, f8_diag *diag) {
	for (uint32_t i = 0; i < graph->n_updates; i++) {
		f8_update update = graph->updates[i];
		if (update.target >= graph->n_values || update.source >= graph->n_values)
			return f8_diag_set(diag, F8_ERR_INVALID, "update %u refers to a value that does "
					   "not exist", i);
		const f8_value *target = &graph->values[update.target];
		const f8_value *source = &graph->values[update.source];
		f8_role role = target->role;
		if (target->producer != F8_NONE || role == F8_ROLE_INPUT || role == F8_ROLE_BUFFER ||
		    !f8_role_is_leaf(role))
			return f8_diag_set(diag, F8_ERR_INVALID, "update %u writes %%%s, a %s; only "
					   "param, state, scale and amax_history leaves carry state",
					   i, target->name, f8_role_name(role));
		if (!defined[update.source] || source->producer == F8_NONE)
			return f8_diag_set(diag, F8_ERR_INVALID, "update %u reads %%%s, which no node "
					   "of the program makes", i, source->name);
		if (!f8_type_equal(&target->type, &source->type)) {
			char s1[160], s2[160];
			return f8_diag_set(diag, F8_ERR_INVALID, "update %u writes %%%s (%s) from %%%s "
					   "(%s): the types differ", i, target->name,
					   f8_type_format(graph, &target->type, s1, sizeof s1),
					   source->name,
					   f8_type_format(graph, &source->type, s2, sizeof s2));
		}
		f8_phase phase = graph->nodes[source->producer].phase;
		for (uint32_t j = 0; j < i; j++) {
			const f8_value *other = &graph->values[graph->updates[j].source];
			if (graph->updates[j].target == update.target &&
			    graph->nodes[other->producer].phase == phase)
				return f8_diag_set(diag, F8_ERR_INVALID, "%%%s is updated twice in phase "
						   "%s (updates %u and %u)", target->name,
						   f8_phase_name(phase), j, i);
		}
	}
	return F8_OK;
}

/* What the check of the fused kernels knows of one kernel so far. */
typedef struct kernel_seen {
	uint32_t last;    // the program position of its last member met, F8_NONE before the first
	f8_phase phase;   // its first member's phase
} kernel_seen;

/* Checks node `id` at program position `step` against its kernel's members met before it. */
static f8_status verify_kernel_member(const f8_graph *graph, f8_node_id id, uint32_t step,
				      kernel_seen *seen, f8_diag *diag) {
	const f8_node *node = &graph->nodes[id];
	if (node->group >= graph->n_groups)
		return node_error(graph, id, diag, "its kernel index %u is out of range: the graph "
				  "has %u kernel(s)", node->group, graph->n_groups);
	kernel_seen *kernel = &seen[node->group];
	const char *name = graph->groups[node->group].name;
	if (kernel->last != F8_NONE && kernel->last + 1 != step) {
		char previous[F8_DIAG_NODE_MAX];
		uint32_t between = step - kernel->last - 1;
		node_error(graph, id, diag, "in kernel %s but not next to its previous member, "
			   "%s: %u node%s outside the kernel stand%s between them", name,
			   f8_graph_describe_node(graph, graph->order[kernel->last], previous,
						  sizeof previous),
			   between, between == 1 ? "" : "s", between == 1 ? "s" : "");
		f8_diag_hint(diag, "a kernel's members stand together in the program, so that a "
			     "backend runs the kernel where its first member stands");
		return F8_ERR_INVALID;
	}
	if (kernel->last != F8_NONE && kernel->phase != node->phase)
		return node_error(graph, id, diag, "in kernel %s but of phase %s, while the "
				  "kernel's first member is of phase %s: a kernel runs in one phase",
				  name,
				  f8_phase_name(node->phase), f8_phase_name(kernel->phase));
	if (kernel->last == F8_NONE)
		kernel->phase = node->phase;
	kernel->last = step;
	return F8_OK;
}

/* The fused kernels: a node's kernel exists, each kernel's members stand together in the
 * program and share a phase, and each kernel has a member. */
static f8_status verify_kernels(const f8_graph *graph, f8_diag *diag) {
	kernel_seen *seen = f8_malloc((graph->n_groups ? graph->n_groups : 1) * sizeof *seen);
	if (!seen)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory verifying the graph");
	for (uint32_t g = 0; g < graph->n_groups; g++)
		seen[g].last = F8_NONE;
	f8_status status = F8_OK;
	for (uint32_t step = 0; !status && step < graph->n_order; step++)
		if (graph->nodes[graph->order[step]].group != F8_NONE)
			status = verify_kernel_member(graph, graph->order[step], step, seen, diag);
	for (uint32_t g = 0; !status && g < graph->n_groups; g++) {
		if (seen[g].last != F8_NONE)
			continue;
		status = f8_diag_set(diag, F8_ERR_INVALID, "kernel %s (%s) has no member: no "
				     "node of the program names it", graph->groups[g].name,
				     f8_kernel_family_name(graph->groups[g].family));
	}
	f8_free(seen);
	return status;
}

/* Whether any value has a buffer offset, that is whether the graph holds a slab plan to check:
 * looked at here so that verifying an unplanned graph (after every pass before schedule, in
 * tests) costs the slab check's allocations and liveness nothing. */
static bool has_offsets(const f8_graph *graph) {
	for (f8_value_id v = 0; v < graph->n_values; v++)
		if (graph->values[v].buffer_offset >= 0)
			return true;
	return false;
}

f8_status f8_graph_verify(const f8_graph *graph, f8_diag *diag) {
	// defined[v]: value v is available at this point of the program.
	bool *defined = f8_calloc(graph->n_values ? graph->n_values : 1, sizeof *defined);
	// position[n]: where node n stands in the program, F8_NONE when it is not in it.
	uint32_t *position = f8_malloc((graph->n_nodes ? graph->n_nodes : 1) * sizeof *position);
	f8_type *types = NULL;
	uint32_t cap_types = 0;
	f8_status status = F8_OK;
	if (!defined || !position) {
		status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory verifying the graph");
		goto done;
	}
	for (uint32_t i = 0; i < graph->n_inputs; i++) {
		const f8_value *value = &graph->values[graph->inputs[i]];
		if (!f8_role_is_leaf(value->role) || value->producer != F8_NONE)
			status = f8_diag_set(diag, F8_ERR_INVALID, "input %%%s has role %s, which is not "
						   "a leaf role", value->name, f8_role_name(value->role));
		else if (value->type.dtype == F8_DTYPE_UNDEFINED)
			status = f8_diag_set(diag, F8_ERR_INVALID, "input %%%s has no type", value->name);
		else if (!f8_shape_numel(&value->type.shape, &(f8_dim){0}))
			status = f8_diag_set(diag, F8_ERR_INVALID, "input %%%s has more elements than a "
					     "tensor can (its size overflows)", value->name);
		else
			status = verify_placements(graph, value, diag);
		if (status)
			goto done;
		defined[graph->inputs[i]] = true;
	}
	for (f8_node_id id = 0; id < graph->n_nodes; id++)
		position[id] = F8_NONE;
	for (uint32_t i = 0; i < graph->n_order; i++) {
		f8_node_id id = graph->order[i];
		if (id >= graph->n_nodes) {
			status = f8_diag_set(diag, F8_ERR_INVALID, "the program lists node %u, which "
						   "does not exist", id);
			goto done;
		}
		if (position[id] != F8_NONE) {
			status = node_error(graph, id, diag, "the node appears twice in the program");
			goto done;
		}
		position[id] = i;
	}
	for (uint32_t step = 0; step < graph->n_order; step++) {
		f8_node_id id = graph->order[step];
		const f8_node *node = &graph->nodes[id];
		if (node->recompute && node->phase != F8_PHASE_BWD) {
			status = node_error(graph, id, diag, "a node that recomputes a forward node "
					    "(recompute=...) runs in phase bwd, not %s",
					    f8_phase_name(node->phase));
			goto done;
		}
		for (uint32_t i = 0; i < node->n_inputs; i++) {
			f8_value_id input = node->inputs[i];
			if (input == F8_NONE)
				continue;
			if (input >= graph->n_values) {
				status = node_error(graph, id, diag, "input %u refers to value %u, "
						    "which does not exist", i, input);
				goto done;
			}
			if (!defined[input]) {
				const f8_value *value = &graph->values[input];
				bool later = value->producer != F8_NONE && position[value->producer] != F8_NONE;
				status = node_error(graph, id, diag,
						    later ? "input %u (%%%s) is used before it is defined"
							  : "input %u (%%%s) is not defined in the program",
						    i, value->name);
				goto done;
			}
		}
		if (node->n_outputs > cap_types) {
			f8_free(types);
			cap_types = node->n_outputs;
			if (!(types = f8_calloc(cap_types, sizeof *types))) {
				status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory verifying the graph");
				goto done;
			}
		}
		if ((status = f8_node_infer_types(graph, id, types, diag)))
			goto done;
		for (uint32_t i = 0; i < node->n_outputs; i++) {
			const f8_value *value = &graph->values[node->outputs[i]];
			if (value->producer != id || value->output_index != i) {
				status = node_error(graph, id, diag, "output %u (%%%s) is not linked to "
						    "its node", i, value->name);
				goto done;
			}
			if (f8_role_is_leaf(value->role)) {
				status = node_error(graph, id, diag, "output %%%s has role %s, which is for "
						    "leaves", value->name, f8_role_name(value->role));
				goto done;
			}
			if ((status = f8_node_check_output_type(graph, id, i, &types[i], diag)) ||
			    (status = verify_placements(graph, value, diag)))
				goto done;
			defined[node->outputs[i]] = true;
		}
	}
	for (uint32_t i = 0; i < graph->n_outputs; i++) {
		f8_value_id output = graph->outputs[i];
		if (output >= graph->n_values || !defined[output]) {
			status = f8_diag_set(diag, F8_ERR_INVALID, "graph output %u (%%%s) is not "
						   "defined in the program", i,
					     output < graph->n_values ? graph->values[output].name : "?");
			goto done;
		}
	}
	if (!status)
		status = verify_updates(graph, defined, diag);
	if (!status)
		status = verify_kernels(graph, diag);
	// Last, as the slab check derives lifetimes from the program and kernels checked above. No
	// slab bound: the graph does not carry the slab's size, which is derived from the offsets.
	if (!status && has_offsets(graph))
		status = f8_graph_verify_buffers(graph, 0, diag);
done:
	f8_free(defined);
	f8_free(position);
	f8_free(types);
	return status;
}
