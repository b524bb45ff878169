/*
 * The JSON form of a graph, built with jansson.
 */
#include "ir/json.h" // f8_json_print

#include <jansson.h> // json_t, json_pack, json_dumpf
#include <string.h>  // memcpy

#include "ir/fp8.h"  // f8_float_decode
#include "ir/alloc.h" // f8_malloc, f8_free
#include "ir/text.h" // f8_dim_format

/* A dim: a number when constant, else its text ("batch*seq"). */
static json_t *dim_json(const f8_graph *graph, f8_dim dim) {
	if (f8_dim_is_const(dim))
		return json_integer(f8_dim_value(dim));
	char text[128];
	return json_string(f8_dim_format(graph, dim, text, sizeof text));
}

static json_t *dims_json(const f8_graph *graph, const f8_dim *dims, uint32_t n) {
	json_t *array = json_array();
	for (uint32_t i = 0; array && i < n; i++)
		json_array_append_new(array, dim_json(graph, dims[i]));
	return array;
}

/* Tensor elements as numbers (small floats decoded; their codes are in the text form). */
static json_t *tensor_json(const f8_graph *graph, const f8_tensor_data *tensor) {
	const f8_dtype_info *info = f8_dtype_get_info(tensor->dtype);
	json_t *values = json_array();
	const unsigned char *data = tensor->data;
	size_t count = info->bytes ? tensor->n_bytes / info->bytes : 0;
	for (size_t i = 0; values && i < count; i++) {
		const unsigned char *element = data + i * info->bytes;
		json_t *item;
		if (tensor->dtype == F8_DTYPE_F64) {
			double v;
			memcpy(&v, element, sizeof v);
			item = json_real(v);
		} else if (tensor->dtype == F8_DTYPE_F32) {
			float v;
			memcpy(&v, element, sizeof v);
			item = json_real(v);
		} else if (info->kind == F8_DTYPE_KIND_FLOAT) {
			uint16_t bits = 0;
			memcpy(&bits, element, info->bytes);
			item = json_real(f8_float_decode(tensor->dtype, bits));
		} else if (tensor->dtype == F8_DTYPE_I64) {
			int64_t v;
			memcpy(&v, element, sizeof v);
			item = json_integer(v);
		} else if (tensor->dtype == F8_DTYPE_I32) {
			int32_t v;
			memcpy(&v, element, sizeof v);
			item = json_integer(v);
		} else if (tensor->dtype == F8_DTYPE_I8) {
			item = json_integer((int8_t)*element);
		} else {
			item = json_integer(*element);
		}
		json_array_append_new(values, item);
	}
	return json_pack("{s:s, s:o, s:o}", "dtype", info->name, "shape",
			 dims_json(graph, tensor->shape.dims, tensor->shape.rank), "values", values);
}

static json_t *attr_json(const f8_graph *graph, const f8_attr *attr) {
	json_t *array;
	switch (attr->kind) {
	case F8_ATTR_INT:
		return json_integer(attr->i);
	case F8_ATTR_FLOAT:
		return json_real(attr->f);
	case F8_ATTR_STRING:
		return json_string(attr->s);
	case F8_ATTR_INTS:
		array = json_array();
		for (uint32_t i = 0; array && i < attr->ints.n; i++)
			json_array_append_new(array, json_integer(attr->ints.items[i]));
		return array;
	case F8_ATTR_FLOATS:
		array = json_array();
		for (uint32_t i = 0; array && i < attr->floats.n; i++)
			json_array_append_new(array, json_real(attr->floats.items[i]));
		return array;
	case F8_ATTR_DTYPE:
		return json_string(f8_dtype_name(attr->dtype));
	case F8_ATTR_DIM:
		return dim_json(graph, attr->dim);
	case F8_ATTR_DIMS:
		return dims_json(graph, attr->dims.items, attr->dims.n);
	case F8_ATTR_TENSOR:
		return tensor_json(graph, attr->tensor);
	default:
		return json_null();
	}
}

/* The value's placements, keyed by mesh axis: {"tp": {"shard": 0}, "dp": {"partial": "sum"},
 * "pp": {"tied": true}},
 * a dimension split part by part with its parts ({"shard": 0, "parts": [128, 64, 64]});
 * NULL when it is replicated on every axis (replicated axes are left out, as the text leaves
 * them out). */
static json_t *placements_json(const f8_value *value) {
	json_t *object = NULL;
	for (int axis = 0; axis < F8_MESH_AXIS_COUNT; axis++) {
		const f8_placement *placement = &value->placement[axis];
		if (placement->kind == F8_PLACEMENT_KIND_REPLICATED)
			continue;
		if (!object && !(object = json_object()))
			return NULL;
		const char *kind = f8_placement_kind_name(placement->kind);
		json_t *entry = placement->kind == F8_PLACEMENT_KIND_SHARD
			? json_pack("{s:i}", kind, (int)placement->dim)
			: placement->kind == F8_PLACEMENT_KIND_TIED
			? json_pack("{s:b}", kind, 1)
			: json_pack("{s:s}", kind, f8_reduction_name(placement->reduction));
		json_t *parts = placement->n_parts > 1 ? json_array() : NULL;
		for (unsigned i = 0; parts && i < placement->n_parts; i++)
			json_array_append_new(parts, json_integer(placement->parts[i]));
		if (entry && parts)
			json_object_set_new(entry, "parts", parts);
		json_object_set_new(object, f8_mesh_axis_name((f8_mesh_axis)axis), entry);
	}
	return object;
}

static json_t *value_json(const f8_graph *graph, f8_value_id id) {
	const f8_value *value = &graph->values[id];
	json_t *object = json_pack("{s:s, s:s, s:s, s:o}", "name", value->name, "role",
				   f8_role_name(value->role), "dtype", f8_dtype_name(value->type.dtype),
				   "shape", dims_json(graph, value->type.shape.dims, value->type.shape.rank));
	if (!object)
		return NULL;
	const f8_precision *precision = &value->precision;
	if (precision->format != F8_DTYPE_UNDEFINED || precision->recipe != F8_RECIPE_NONE ||
	    precision->reason) {
		json_t *decision = json_pack("{s:s, s:s}", "format", f8_dtype_name(precision->format),
					     "recipe", f8_recipe_name(precision->recipe));
		if (decision && precision->scaling_slot != F8_NONE)
			json_object_set_new(decision, "slot", json_integer(precision->scaling_slot));
		if (decision && precision->reason)
			json_object_set_new(decision, "reason", json_string(precision->reason));
		json_object_set_new(object, "precision", decision);
	}
	json_t *placements = placements_json(value);
	if (placements)
		json_object_set_new(object, "placements", placements);
	if (value->buffer_offset >= 0)
		json_object_set_new(object, "offset", json_integer(value->buffer_offset));
	if (value->recompute)
		json_object_set_new(object, "recompute", json_true());
	return object;
}

static json_t *node_json(const f8_graph *graph, const f8_node *node) {
	json_t *inputs = json_array(), *outputs = json_array(), *attrs = json_object();
	for (uint32_t i = 0; inputs && i < node->n_inputs; i++)
		json_array_append_new(inputs, node->inputs[i] == F8_NONE
						      ? json_null()
						      : json_string(graph->values[node->inputs[i]].name));
	for (uint32_t i = 0; outputs && i < node->n_outputs; i++)
		json_array_append_new(outputs, value_json(graph, node->outputs[i]));
	for (uint32_t i = 0; attrs && i < node->n_attrs; i++)
		json_object_set_new(attrs, node->attrs[i].name, attr_json(graph, &node->attrs[i]));
	json_t *object = json_pack("{s:s, s:o, s:o, s:o, s:s}", "op", f8_op_name(node->op), "inputs",
				   inputs, "outputs", outputs, "attrs", attrs, "phase",
				   f8_phase_name(node->phase));
	if (object && node->scope)
		json_object_set_new(object, "scope", json_string(node->scope));
	if (object && node->recompute)
		json_object_set_new(object, "recompute", json_string(node->recompute));
	if (object && node->name)
		json_object_set_new(object, "name", json_string(node->name));
	if (object && node->location.file) {
		json_t *location = json_pack("{s:s}", "file", node->location.file);
		if (location && node->location.index != F8_NONE)
			json_object_set_new(location, "node_index", json_integer(node->location.index));
		else if (location)
			json_object_set_new(location, "line", json_integer(node->location.line)),
				json_object_set_new(location, "column", json_integer(node->location.column));
		json_object_set_new(object, "location", location);
	}
	if (object && node->group < graph->n_groups)
		json_object_set_new(object, "kernel", json_string(graph->groups[node->group].name));
	return object;
}

/* The fused kernels, by index: name, family, reason. */
static json_t *kernels_json(const f8_graph *graph) {
	json_t *kernels = json_array();
	for (uint32_t i = 0; kernels && i < graph->n_groups; i++) {
		const f8_kernel_group *group = &graph->groups[i];
		json_t *kernel = json_pack("{s:s, s:s, s:s}", "name", group->name, "family",
					   f8_kernel_family_name(group->family), "reason",
					   group->reason ? group->reason : "");
		json_array_append_new(kernels, kernel);
	}
	return kernels;
}

/* Set when an allocation jansson asked for failed inside a scope. Global as jansson's allocator. */
static bool jansson_out_of_memory;

static void *jansson_malloc(size_t size) {
	void *ptr = f8_malloc(size);
	if (!ptr)
		jansson_out_of_memory = true;
	return ptr;
}

void f8_jansson_enter(f8_jansson_scope *scope) {
	json_get_alloc_funcs(&scope->saved_malloc, &scope->saved_free);
	json_set_alloc_funcs(jansson_malloc, f8_free);
	jansson_out_of_memory = false;
}

bool f8_jansson_out_of_memory(void) {
	return jansson_out_of_memory;
}

bool f8_jansson_leave(f8_jansson_scope *scope) {
	json_set_alloc_funcs(scope->saved_malloc, scope->saved_free);
	return jansson_out_of_memory;
}

/* Builds and writes the document; inside a jansson scope. */
static f8_status print_document(const f8_graph *graph, FILE *out, f8_diag *diag) {
	json_t *symbols = json_array(), *inputs = json_array(), *nodes = json_array();
	json_t *outputs = json_array(), *updates = json_array();
	for (uint32_t i = 0; updates && i < graph->n_updates; i++)
		json_array_append_new(updates, json_pack("{s:s, s:s}", "target",
							 graph->values[graph->updates[i].target].name,
							 "source",
							 graph->values[graph->updates[i].source].name));
	for (uint32_t i = 0; symbols && i < graph->n_symbols; i++)
		json_array_append_new(symbols, json_string(graph->symbols[i]));
	for (uint32_t i = 0; inputs && i < graph->n_inputs; i++)
		json_array_append_new(inputs, value_json(graph, graph->inputs[i]));
	for (uint32_t i = 0; nodes && i < graph->n_order; i++)
		json_array_append_new(nodes, node_json(graph, &graph->nodes[graph->order[i]]));
	for (uint32_t i = 0; outputs && i < graph->n_outputs; i++)
		json_array_append_new(outputs, json_string(graph->values[graph->outputs[i]].name));
	// json_pack steals the references with "o", also when it fails, so nothing leaks.
	json_t *document = json_pack("{s:s, s:i, s:s, s:o, s:o, s:o, s:o, s:o}", "format",
				     "f8c-graph", "version", 1, "name", graph->name, "symbols",
				     symbols, "inputs", inputs, "nodes", nodes, "outputs", outputs,
				     "updates", updates);
	if (!document)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory building the JSON form");
	if (graph->n_groups) // after fuse only, as a value's annotations appear once decided
		json_object_set_new(document, "kernels", kernels_json(graph));
	if (f8_graph_mesh_ranks(graph) > 1) { // after shard, on more than one rank
		json_t *mesh = json_object();
		for (int axis = 0; mesh && axis < F8_MESH_AXIS_COUNT; axis++)
			json_object_set_new(mesh, f8_mesh_axis_name((f8_mesh_axis)axis),
					    json_integer(f8_graph_mesh_size(graph, (f8_mesh_axis)axis)));
		json_object_set_new(document, "mesh", mesh);
	}
	if (jansson_out_of_memory) { // a value went missing: write nothing rather than less
		json_decref(document);
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory building the JSON form");
	}
	int failed = json_dumpf(document, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
	json_decref(document);
	if (jansson_out_of_memory)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory writing the JSON form");
	if (failed || fputc('\n', out) == EOF)
		return f8_diag_set(diag, F8_ERR_IO, "cannot write the JSON form");
	return F8_OK;
}

f8_status f8_json_print(const f8_graph *graph, FILE *out, f8_diag *diag) {
	f8_jansson_scope scope;
	f8_jansson_enter(&scope);
	f8_status status = print_document(graph, out, diag);
	f8_jansson_leave(&scope);
	return status;
}
