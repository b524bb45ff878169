/*
 * Graph construction: the value and node tables, the name index, symbols, and the name
 * tables of the IR's small enums.
 */
#include "ir/graph.h" // f8_graph, f8_value, f8_node

#include <ctype.h>  // isdigit
#include <stdint.h> // INT32_MAX
#include <stdio.h>  // snprintf
#include <stdlib.h> // strtol
#include <string.h> // strlen, strncmp, memcmp, memcpy

#include "ir/alloc.h"  // f8_realloc, f8_free
#include "ir/launch.h" // F8_KERNEL_PARAM_LIST

/* Name tables of the small enums, generated from their lists. */
#define NAME_TABLE(type, LIST, COUNT)                                                      \
	static const char *const type##_names[] = {LIST(NAME_ENTRY)};                      \
	static_assert(sizeof type##_names / sizeof type##_names[0] == COUNT,               \
		      #type " names must match the enum");                                 \
	const char *f8_##type##_name(f8_##type value) {                                    \
		return (unsigned)value < COUNT ? type##_names[value] : "?";                \
	}                                                                                  \
	bool f8_##type##_from_name(const char *name, size_t len, f8_##type *out) {         \
		for (int i = 0; i < COUNT; i++) {                                          \
			if (strlen(type##_names[i]) == len &&                              \
			    memcmp(type##_names[i], name, len) == 0) {                     \
				*out = (f8_##type)i;                                       \
				return true;                                               \
			}                                                                  \
		}                                                                          \
		return false;                                                              \
	}
#define NAME_ENTRY(e, name, ...) name,
NAME_TABLE(role, F8_ROLE_LIST, F8_ROLE_COUNT)
NAME_TABLE(phase, F8_PHASE_LIST, F8_PHASE_COUNT)
NAME_TABLE(recipe, F8_RECIPE_LIST, F8_RECIPE_COUNT)
NAME_TABLE(mesh_axis, F8_MESH_AXIS_LIST, F8_MESH_AXIS_COUNT)
NAME_TABLE(kernel_param_kind, F8_KERNEL_PARAM_LIST, F8_KERNEL_PARAM_COUNT)
NAME_TABLE(reduction, F8_REDUCTION_LIST, F8_REDUCTION_COUNT)
NAME_TABLE(placement_kind, F8_PLACEMENT_KIND_LIST, F8_PLACEMENT_KIND_COUNT)
NAME_TABLE(kernel_family, F8_KERNEL_FAMILY_LIST, F8_KERNEL_FAMILY_COUNT)
#undef NAME_ENTRY
#undef NAME_TABLE

bool f8_role_is_leaf(f8_role role) {
	static const bool leaf[] = {
#define F8_ROLE_LEAF(e, name, is_leaf) is_leaf,
		F8_ROLE_LIST(F8_ROLE_LEAF)
#undef F8_ROLE_LEAF
	};
	return (unsigned)role < F8_ROLE_COUNT && leaf[role];
}

/* Grows `*items` (of `size`-byte elements, capacity `*cap`) to hold at least `need`. */
static f8_status grow(void **items, uint32_t *cap, uint32_t need, size_t size) {
	if (need <= *cap)
		return F8_OK;
	uint64_t new_cap = *cap ? *cap : 16;
	while (new_cap < need)
		new_cap *= 2;
	if (new_cap > UINT32_MAX - 1)
		return F8_ERR_NOMEM;
	void *grown = f8_realloc(*items, (size_t)new_cap * size);
	if (!grown)
		return F8_ERR_NOMEM;
	*items = grown;
	*cap = (uint32_t)new_cap;
	return F8_OK;
}

#define GROW(array, cap, need) grow((void **)&(array), &(cap), (need), sizeof *(array))

f8_status f8_graph_create(const char *name, f8_graph **out) {
	*out = NULL;
	f8_graph *graph = f8_calloc(1, sizeof *graph);
	if (!graph)
		return F8_ERR_NOMEM;
	graph->arena = f8_arena_create();
	if (!graph->arena || !(graph->name = f8_arena_strdup(graph->arena, name))) {
		f8_graph_destroy(graph);
		return F8_ERR_NOMEM;
	}
	*out = graph;
	return F8_OK;
}

void f8_graph_destroy(f8_graph *graph) {
	if (!graph)
		return;
	f8_free(graph->values);
	f8_free(graph->nodes);
	f8_free(graph->order);
	f8_free(graph->inputs);
	f8_free(graph->outputs);
	f8_free(graph->updates);
	f8_free(graph->groups);
	f8_free(graph->symbols);
	f8_free(graph->name_index);
	f8_arena_destroy(graph->arena);
	f8_free(graph);
}

f8_status f8_graph_intern_symbol(f8_graph *graph, const char *name, size_t len, uint16_t *out) {
	for (uint32_t i = 0; i < graph->n_symbols; i++) {
		if (strlen(graph->symbols[i]) == len && memcmp(graph->symbols[i], name, len) == 0) {
			*out = (uint16_t)i;
			return F8_OK;
		}
	}
	if (graph->n_symbols > UINT16_MAX)
		return F8_ERR_INVALID; // symbol ids are 16 bits in f8_dim
	if (GROW(graph->symbols, graph->cap_symbols, graph->n_symbols + 1))
		return F8_ERR_NOMEM;
	const char *copy = f8_arena_strndup(graph->arena, name, len);
	if (!copy)
		return F8_ERR_NOMEM;
	graph->symbols[graph->n_symbols] = copy;
	*out = (uint16_t)graph->n_symbols++;
	return F8_OK;
}

/* FNV-1a: the name index only needs a fast, decent spread. */
static uint32_t hash_name(const char *name, size_t len) {
	uint32_t hash = 2166136261u;
	for (size_t i = 0; i < len; i++)
		hash = (hash ^ (unsigned char)name[i]) * 16777619u;
	return hash;
}

f8_value_id f8_graph_find_value(const f8_graph *graph, const char *name, size_t len) {
	if (!graph->name_index_cap)
		return F8_NONE;
	uint32_t mask = graph->name_index_cap - 1;
	for (uint32_t slot = hash_name(name, len) & mask;; slot = (slot + 1) & mask) {
		f8_value_id id = graph->name_index[slot];
		if (id == F8_NONE)
			return F8_NONE;
		const char *candidate = graph->values[id].name;
		if (strlen(candidate) == len && memcmp(candidate, name, len) == 0)
			return id;
	}
}

static void index_insert(f8_graph *graph, f8_value_id id) {
	const char *name = graph->values[id].name;
	uint32_t mask = graph->name_index_cap - 1;
	uint32_t slot = hash_name(name, strlen(name)) & mask;
	while (graph->name_index[slot] != F8_NONE)
		slot = (slot + 1) & mask;
	graph->name_index[slot] = id;
}

/* Keeps the index at most half full, so that probes stay short. */
static f8_status index_reserve(f8_graph *graph, uint32_t n_values) {
	if ((uint64_t)n_values * 2 <= graph->name_index_cap)
		return F8_OK;
	uint32_t cap = graph->name_index_cap ? graph->name_index_cap : 64;
	while ((uint64_t)n_values * 2 > cap) {
		if (cap > UINT32_MAX / 2)
			return F8_ERR_NOMEM;
		cap *= 2;
	}
	uint32_t *index = f8_malloc((size_t)cap * sizeof *index);
	if (!index)
		return F8_ERR_NOMEM;
	memset(index, 0xff, (size_t)cap * sizeof *index);
	f8_free(graph->name_index);
	graph->name_index = index;
	graph->name_index_cap = cap;
	for (f8_value_id id = 0; id < graph->n_values; id++)
		index_insert(graph, id);
	return F8_OK;
}

/* Creates a value named `name` (NULL: a fresh name "tN"), leaving the rest to the caller. */
static f8_status new_value(f8_graph *graph, const char *name, f8_value_id *out, f8_diag *diag) {
	char fresh[32];
	if (!name) {
		// Fresh names are "t" and a number; skip numbers the model already uses.
		for (uint32_t n = graph->n_values;; n++) {
			snprintf(fresh, sizeof fresh, "t%u", n);
			if (f8_graph_find_value(graph, fresh, strlen(fresh)) == F8_NONE)
				break;
		}
		name = fresh;
	} else if (f8_graph_find_value(graph, name, strlen(name)) != F8_NONE) {
		return f8_diag_set(diag, F8_ERR_INVALID, "value %%%s is defined twice", name);
	}
	if (graph->n_values == F8_NONE - 1 || GROW(graph->values, graph->cap_values, graph->n_values + 1) ||
	    index_reserve(graph, graph->n_values + 1))
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory adding value %%%s", name);
	const char *copy = f8_arena_strdup(graph->arena, name);
	if (!copy)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory adding value %%%s", name);
	f8_value_id id = graph->n_values++;
	graph->values[id] = (f8_value){
		.name = copy,
		.role = F8_ROLE_ACTIVATION,
		.producer = F8_NONE,
		.precision = {.scaling_slot = F8_NONE},
		.buffer_offset = -1,
	};
	index_insert(graph, id);
	*out = id;
	return F8_OK;
}

f8_status f8_graph_add_input(f8_graph *graph, const char *name, f8_role role, const f8_type *type,
			     f8_value_id *out, f8_diag *diag) {
	assert(f8_role_is_leaf(role));
	f8_value_id id;
	f8_status status = new_value(graph, name, &id, diag);
	if (status)
		return status;
	if (GROW(graph->inputs, graph->cap_inputs, graph->n_inputs + 1))
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory adding input %%%s", name);
	graph->values[id].role = role;
	graph->values[id].type = *type;
	graph->inputs[graph->n_inputs++] = id;
	*out = id;
	return F8_OK;
}

f8_status f8_graph_add_node(f8_graph *graph, f8_op op, const f8_value_id *inputs,
			    uint32_t n_inputs, uint32_t n_outputs, const char *const *output_names,
			    f8_node_id *out, f8_diag *diag) {
	assert((unsigned)op < F8_OP_COUNT);
	if (graph->n_nodes == F8_NONE - 1 || GROW(graph->nodes, graph->cap_nodes, graph->n_nodes + 1) ||
	    GROW(graph->order, graph->cap_order, graph->n_order + 1))
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory adding a %s node", f8_op_name(op));
	f8_value_id *input_ids = f8_arena_alloc_array(graph->arena, n_inputs, sizeof *input_ids);
	f8_value_id *output_ids = f8_arena_alloc_array(graph->arena, n_outputs, sizeof *output_ids);
	if ((n_inputs && !input_ids) || (n_outputs && !output_ids))
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory adding a %s node", f8_op_name(op));
	if (n_inputs)
		memcpy(input_ids, inputs, n_inputs * sizeof *input_ids);
	f8_node_id id = graph->n_nodes;
	for (uint32_t i = 0; i < n_outputs; i++) {
		f8_status status = new_value(graph, output_names ? output_names[i] : NULL,
					     &output_ids[i], diag);
		if (status)
			return status;
		graph->values[output_ids[i]].producer = id;
		graph->values[output_ids[i]].output_index = i;
	}
	graph->nodes[id] = (f8_node){
		.op = op,
		.n_inputs = n_inputs,
		.n_outputs = n_outputs,
		.inputs = input_ids,
		.outputs = output_ids,
		.group = F8_NONE,
		.location = {.index = F8_NONE},
	};
	graph->n_nodes++;
	graph->order[graph->n_order++] = id;
	*out = id;
	return F8_OK;
}

/* Copies the payload of `attr` into the arena so that the node owns it. */
static f8_status copy_attr(f8_arena *arena, const f8_attr *attr, f8_attr *copy) {
	*copy = *attr;
	switch (attr->kind) {
	case F8_ATTR_STRING:
		copy->s = f8_arena_strdup(arena, attr->s);
		return copy->s ? F8_OK : F8_ERR_NOMEM;
	case F8_ATTR_INTS:
		copy->ints.items = f8_arena_alloc_array(arena, attr->ints.n, sizeof(int64_t));
		if (attr->ints.n && !copy->ints.items)
			return F8_ERR_NOMEM;
		if (attr->ints.n)
			memcpy(copy->ints.items, attr->ints.items, attr->ints.n * sizeof(int64_t));
		return F8_OK;
	case F8_ATTR_FLOATS:
		copy->floats.items = f8_arena_alloc_array(arena, attr->floats.n, sizeof(double));
		if (attr->floats.n && !copy->floats.items)
			return F8_ERR_NOMEM;
		if (attr->floats.n)
			memcpy(copy->floats.items, attr->floats.items, attr->floats.n * sizeof(double));
		return F8_OK;
	case F8_ATTR_DIMS:
		copy->dims.items = f8_arena_alloc_array(arena, attr->dims.n, sizeof(f8_dim));
		if (attr->dims.n && !copy->dims.items)
			return F8_ERR_NOMEM;
		if (attr->dims.n)
			memcpy(copy->dims.items, attr->dims.items, attr->dims.n * sizeof(f8_dim));
		return F8_OK;
	case F8_ATTR_TENSOR: {
		f8_tensor_data *tensor = f8_arena_alloc(arena, sizeof *tensor);
		if (!tensor)
			return F8_ERR_NOMEM;
		*tensor = *attr->tensor;
		tensor->data = f8_arena_alloc(arena, tensor->n_bytes);
		if (!tensor->data)
			return F8_ERR_NOMEM;
		if (tensor->n_bytes)
			memcpy(tensor->data, attr->tensor->data, tensor->n_bytes);
		copy->tensor = tensor;
		return F8_OK;
	}
	default:
		return F8_OK;
	}
}

f8_status f8_node_set_attrs(f8_graph *graph, f8_node_id id, const f8_attr *attrs,
			    uint32_t n_attrs) {
	f8_attr *copies = f8_arena_alloc_array(graph->arena, n_attrs, sizeof *copies);
	if (n_attrs && !copies)
		return F8_ERR_NOMEM;
	for (uint32_t i = 0; i < n_attrs; i++)
		if (copy_attr(graph->arena, &attrs[i], &copies[i]))
			return F8_ERR_NOMEM;
	f8_node *node = &graph->nodes[id];
	node->attrs = copies;
	node->n_attrs = n_attrs;
	return F8_OK;
}

f8_status f8_graph_add_output(f8_graph *graph, f8_value_id value) {
	if (GROW(graph->outputs, graph->cap_outputs, graph->n_outputs + 1))
		return F8_ERR_NOMEM;
	graph->outputs[graph->n_outputs++] = value;
	return F8_OK;
}

f8_status f8_graph_add_update(f8_graph *graph, f8_value_id target, f8_value_id source) {
	if (GROW(graph->updates, graph->cap_updates, graph->n_updates + 1))
		return F8_ERR_NOMEM;
	graph->updates[graph->n_updates++] = (f8_update){.target = target, .source = source};
	return F8_OK;
}

f8_status f8_graph_add_group(f8_graph *graph, const char *name, f8_kernel_family family,
			     const char *reason, uint32_t *out, f8_diag *diag) {
	if (f8_graph_find_group(graph, name, strlen(name)) != F8_NONE)
		return f8_diag_set(diag, F8_ERR_INVALID, "kernel %s is defined twice", name);
	const char *name_copy = f8_arena_strdup(graph->arena, name);
	const char *reason_copy = f8_arena_strdup(graph->arena, reason ? reason : "");
	if (!name_copy || !reason_copy || graph->n_groups == F8_NONE - 1 ||
	    GROW(graph->groups, graph->cap_groups, graph->n_groups + 1))
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory adding kernel %s", name);
	graph->groups[graph->n_groups] =
		(f8_kernel_group){.name = name_copy, .family = family, .reason = reason_copy};
	*out = graph->n_groups++;
	return F8_OK;
}

uint32_t f8_graph_find_group(const f8_graph *graph, const char *name, size_t len) {
	for (uint32_t i = 0; i < graph->n_groups; i++)
		if (strlen(graph->groups[i].name) == len && memcmp(graph->groups[i].name, name, len) == 0)
			return i;
	return F8_NONE;
}

f8_status f8_graph_set_order(f8_graph *graph, const f8_node_id *order, uint32_t n) {
	if (GROW(graph->order, graph->cap_order, n))
		return F8_ERR_NOMEM;
	if (n) // an empty program may come with no array at all
		memmove(graph->order, order, (size_t)n * sizeof *order);
	graph->n_order = n;
	return F8_OK;
}

const char *f8_graph_describe_node(const f8_graph *graph, f8_node_id id, char *buffer,
				   size_t size) {
	const f8_node *node = &graph->nodes[id];
	int used = snprintf(buffer, size, "node %u (", id);
	if (node->n_outputs && used >= 0 && (size_t)used < size)
		used += snprintf(buffer + used, size - used, "%%%s = ",
				 graph->values[node->outputs[0]].name);
	if (used >= 0 && (size_t)used < size)
		used += snprintf(buffer + used, size - used, "%s", f8_op_name(node->op));
	if (node->name && used >= 0 && (size_t)used < size)
		used += snprintf(buffer + used, size - used, " \"%s\"", node->name);
	if (node->scope && used >= 0 && (size_t)used < size)
		used += snprintf(buffer + used, size - used, " in %s", node->scope);
	if (used >= 0 && (size_t)used < size)
		snprintf(buffer + used, size - used, ")");
	return buffer;
}

uint64_t f8_graph_mesh_ranks(const f8_graph *graph) {
	uint64_t ranks = 1;
	for (int axis = 0; axis < F8_MESH_AXIS_COUNT; axis++)
		ranks *= f8_graph_mesh_size(graph, (f8_mesh_axis)axis);
	return ranks;
}

bool f8_mesh_group_from_name(const char *name, size_t len, uint32_t *axes) {
	*axes = 0;
	int last = -1; // the axes in mesh order, each once
	for (size_t at = 0; at <= len;) {
		size_t end = at;
		while (end < len && name[end] != '+')
			end++;
		f8_mesh_axis axis;
		if (end == at || !f8_mesh_axis_from_name(name + at, end - at, &axis) ||
		    (int)axis <= last)
			return false;
		*axes |= 1u << axis;
		last = (int)axis;
		at = end + 1;
	}
	return *axes != 0;
}

const char *f8_mesh_group_name(uint32_t axes, char *buffer, size_t size) {
	size_t used = 0;
	if (size)
		buffer[0] = '\0';
	for (int axis = 0; axis < F8_MESH_AXIS_COUNT && used < size; axis++)
		if (axes & 1u << axis)
			used += (size_t)snprintf(buffer + used, size - used, "%s%s", used ? "+" : "",
						 f8_mesh_axis_name((f8_mesh_axis)axis));
	return buffer;
}

void f8_mesh_coordinates(const uint32_t *sizes, uint64_t rank, uint32_t *coordinates) {
	for (int axis = 0; axis < F8_MESH_AXIS_COUNT; axis++) {
		uint32_t size = sizes[axis] ? sizes[axis] : 1;
		coordinates[axis] = (uint32_t)(rank % size);
		rank /= size;
	}
}

int f8_scope_layer(const char *scope, const char **module) {
	static const char *const stems[] = {"layers.", "layer.", "h.", "blocks.", "layers/", NULL};
	for (const char *at = scope; at && *at; at++) {
		if (at != scope && at[-1] != '.' && at[-1] != '/')
			continue;
		for (int i = 0; stems[i]; i++) {
			size_t len = strlen(stems[i]);
			if (strncmp(at, stems[i], len) != 0 || !isdigit((unsigned char)at[len]))
				continue;
			char *end;
			long layer = strtol(at + len, &end, 10);
			if (*end && *end != '.' && *end != '/')
				continue; // "h.3x": not a layer's index
			if (module)
				*module = *end ? end + 1 : end;
			return layer > INT32_MAX ? -1 : (int)layer;
		}
	}
	return -1;
}

void f8_diag_set_node(f8_diag *diag, const f8_graph *graph, f8_node_id id) {
	if (diag)
		f8_graph_describe_node(graph, id, diag->node, sizeof diag->node);
}
