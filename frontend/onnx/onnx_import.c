/*
 * The ONNX import: checks the model's header (IR version, opsets), makes parameters of the
 * weights and inputs of the graph inputs, converts the nodes in their (topological) order, and
 * binds the outputs. Each ONNX value name maps to a binding: an IR value, a value known at
 * import time, or both.
 */
#define _POSIX_C_SOURCE 200809L // close

#include <math.h>   // atan2, cos, fabs, fabsf, sin
#include <stdarg.h> // va_list
#include <stdio.h>  // snprintf
#include <string.h> // strchr, strcmp, strlen, strrchr
#include <unistd.h> // close

#include "frontend/onnx/onnx_import.h"   // f8_onnx_load
#include "frontend/onnx/onnx_internal.h" // onnx_importer, onnx_binding
#include "ir/alloc.h"                    // f8_calloc, f8_free
#include "ir/arena.h"                    // f8_arena_strdup
#include "ir/graph.h"                    // f8_initializer_read
#include "ir/verify.h"                   // f8_node_infer_types

f8_status f8_onnx_fail(onnx_importer *im, f8_status status, const char *format, ...) {
	va_list args;
	va_start(args, format);
	f8_diag_setv(im->diag, status, format, args);
	va_end(args);
	return status;
}

/* Names the node in the diagnostic: `node 42 "node_MatMul_7" (MatMul)`. */
static void describe_node(onnx_importer *im, const onnx_node *node) {
	const F8cOnnx__NodeProto *proto = node->proto;
	snprintf(im->diag->node, sizeof im->diag->node, "node %u \"%s\" (%s%s%s)", node->index,
		 proto->name ? proto->name : "", proto->domain && *proto->domain ? proto->domain : "",
		 proto->domain && *proto->domain ? "." : "", proto->op_type ? proto->op_type : "");
}

/* Bindings: an open-addressing table keyed by name. */

static uint32_t name_hash(const char *name) {
	uint32_t hash = 2166136261u; // FNV-1a
	for (const char *c = name; *c; c++)
		hash = (hash ^ (uint8_t)*c) * 16777619u;
	return hash;
}

static onnx_binding *find_binding(const onnx_importer *im, const char *name) {
	if (!im->cap_bindings)
		return NULL;
	for (uint32_t i = name_hash(name) & (im->cap_bindings - 1);; i = (i + 1) & (im->cap_bindings - 1)) {
		onnx_binding *binding = &im->bindings[i];
		if (!binding->name)
			return NULL;
		if (strcmp(binding->name, name) == 0)
			return binding;
	}
}

static f8_status grow_bindings(onnx_importer *im) {
	uint32_t cap = im->cap_bindings ? im->cap_bindings * 2 : 1024;
	onnx_binding *table = f8_calloc(cap, sizeof *table), *old = im->bindings;
	if (!table)
		return f8_diag_set(im->diag, F8_ERR_NOMEM, "out of memory");
	for (uint32_t i = 0; i < im->cap_bindings; i++) {
		if (!old[i].name)
			continue;
		uint32_t j = name_hash(old[i].name) & (cap - 1);
		while (table[j].name)
			j = (j + 1) & (cap - 1);
		table[j] = old[i];
	}
	f8_free(old);
	im->bindings = table;
	im->cap_bindings = cap;
	return F8_OK;
}

/* Adds a binding for `name`, which must be new (ONNX values are assigned once). */
static f8_status add_binding(onnx_importer *im, const char *name, onnx_binding **out) {
	if (!name || !*name)
		return f8_onnx_fail(im, F8_ERR_INVALID, "a value has an empty name");
	if (find_binding(im, name))
		return f8_onnx_fail(im, F8_ERR_INVALID, "value '%s' is defined twice", name);
	if ((im->n_bindings + 1) * 2 > im->cap_bindings) {
		f8_status status = grow_bindings(im);
		if (status)
			return status;
	}
	uint32_t i = name_hash(name) & (im->cap_bindings - 1);
	while (im->bindings[i].name)
		i = (i + 1) & (im->cap_bindings - 1);
	const char *copy = f8_arena_strdup(im->graph->arena, name);
	if (!copy)
		return f8_diag_set(im->diag, F8_ERR_NOMEM, "out of memory");
	im->bindings[i] = (onnx_binding){.name = copy, .value = F8_NONE};
	im->n_bindings++;
	*out = &im->bindings[i];
	return F8_OK;
}

f8_status f8_onnx_bind_known(onnx_importer *im, const onnx_node *node, uint32_t index,
			  onnx_known *known) {
	onnx_binding *binding;
	f8_status status = add_binding(im, node->proto->output[index], &binding);
	if (!status)
		binding->known = known;
	return status;
}

f8_status f8_onnx_bind_alias(onnx_importer *im, const onnx_node *node, uint32_t index,
			  const onnx_binding *target) {
	onnx_binding *binding;
	f8_value_id value = target->value;
	onnx_known *known = target->known;
	f8_status status = add_binding(im, node->proto->output[index], &binding);
	if (!status)
		binding->value = value, binding->known = known;
	return status;
}

f8_status f8_onnx_value_of(onnx_importer *im, onnx_binding *binding, f8_value_id *out) {
	if (binding->value != F8_NONE) {
		*out = binding->value;
		return F8_OK;
	}
	const onnx_known *known = binding->known;
	if (!f8_onnx_known_is_concrete(known)) {
		f8_onnx_fail(im, F8_ERR_UNSUPPORTED, "value '%s' is computed from a symbolic size and "
			  "used as data; f8c needs that size fixed", binding->name);
		f8_diag_hint(im->diag, "bind the model's symbolic sizes with --dim, for example "
				       "--dim batch=8 --dim seq=2048");
		return F8_ERR_UNSUPPORTED;
	}
	f8_tensor_data tensor;
	f8_status status = f8_onnx_known_to_tensor(im, known, &tensor);
	f8_node_id id;
	if (!status)
		status = f8_graph_add_node(im->graph, F8_OP_CONSTANT, NULL, 0, 1, &binding->name, &id,
					   im->diag);
	f8_attr attr = {.name = "value", .kind = F8_ATTR_TENSOR, .tensor = &tensor};
	if (!status && f8_node_set_attrs(im->graph, id, &attr, 1))
		status = f8_diag_set(im->diag, F8_ERR_NOMEM, "out of memory");
	if (status)
		return status;
	f8_value_id value = im->graph->nodes[id].outputs[0];
	im->graph->values[value].type = (f8_type){.dtype = known->dtype, .shape = known->shape};
	binding->value = *out = value;
	return F8_OK;
}

/* The value of metadata entry `key`, or NULL. */
static const char *metadata(F8cOnnx__StringStringEntryProto *const *entries, size_t n,
			    const char *key) {
	for (size_t i = 0; i < n; i++)
		if (entries[i]->key && strcmp(entries[i]->key, key) == 0)
			return entries[i]->value;
	return NULL;
}

/*
 * The module path torch.onnx records for a node, "model.layers.0.self_attn.q_proj", from its
 * name_scopes metadata: a Python list of the scopes from the root, the last being the node's own
 * name ("['', 'model', ..., 'model.layers.0.self_attn.q_proj', 'linear']"). NULL when absent.
 */
static f8_status node_scope(onnx_importer *im, const F8cOnnx__NodeProto *proto,
			    const char **out) {
	*out = NULL;
	const char *list = metadata(proto->metadata_props, proto->n_metadata_props,
				    "pkg.torch.onnx.name_scopes");
	const char *items[2] = {NULL, NULL}; // the last two quoted items' starts
	size_t lengths[2] = {0, 0};
	for (const char *c = list; c && *c; c++) {
		if (*c != '\'')
			continue;
		const char *end = strchr(c + 1, '\'');
		if (!end)
			break;
		items[0] = items[1], lengths[0] = lengths[1];
		items[1] = c + 1, lengths[1] = (size_t)(end - c - 1);
		c = end;
	}
	if (!items[0] || !lengths[0])
		return F8_OK;
	*out = f8_arena_strndup(im->graph->arena, items[0], lengths[0]);
	return *out ? F8_OK : f8_diag_set(im->diag, F8_ERR_NOMEM, "out of memory");
}

/* Adds IR node `op` for the ONNX node with outputs named `names` (NULL entries: fresh
 * names), its name, place and scope, and its outputs' types; *out gets its id. */
static f8_status add_node(onnx_importer *im, const onnx_node *node, f8_op op,
			  const f8_value_id *inputs, uint32_t n_inputs, const f8_attr *attrs,
			  uint32_t n_attrs, uint32_t n_outputs, const char *const *names,
			  f8_node_id *out) {
	const F8cOnnx__NodeProto *proto = node->proto;
	f8_node_id id;
	f8_status status = f8_graph_add_node(im->graph, op, inputs, n_inputs, n_outputs, names, &id,
					     im->diag);
	if (!status && n_attrs && f8_node_set_attrs(im->graph, id, attrs, n_attrs))
		status = f8_diag_set(im->diag, F8_ERR_NOMEM, "out of memory");
	if (status)
		return status;
	f8_node *ir_node = &im->graph->nodes[id];
	ir_node->name = proto->name && *proto->name ? f8_arena_strdup(im->graph->arena, proto->name)
						    : NULL;
	ir_node->location = (f8_location){.file = im->path, .index = node->index};
	if ((status = node_scope(im, proto, &ir_node->scope)))
		return status;
	f8_type types[16];
	if ((status = f8_node_infer_types(im->graph, id, types, im->diag)))
		return status;
	for (uint32_t i = 0; i < n_outputs; i++)
		im->graph->values[ir_node->outputs[i]].type = types[i];
	*out = id;
	return F8_OK;
}

f8_status f8_onnx_emit_step(onnx_importer *im, const onnx_node *node, f8_op op,
			    const f8_value_id *inputs, uint32_t n_inputs, const f8_attr *attrs,
			    uint32_t n_attrs, f8_value_id *out) {
	const char *names[1] = {NULL};
	f8_node_id id;
	f8_status status = add_node(im, node, op, inputs, n_inputs, attrs, n_attrs, 1, names, &id);
	if (!status)
		*out = im->graph->nodes[id].outputs[0];
	return status;
}

f8_status f8_onnx_emit(onnx_importer *im, const onnx_node *node, f8_op op, const f8_value_id *inputs,
		    uint32_t n_inputs, const f8_attr *attrs, uint32_t n_attrs, uint32_t n_outputs,
		    f8_node_id *out) {
	const F8cOnnx__NodeProto *proto = node->proto;
	const char *names[16] = {0};
	if (n_outputs > 16 || n_outputs > proto->n_output)
		return f8_onnx_fail(im, F8_ERR_INVALID, "%s has %zu outputs; f8c expects %u",
				 proto->op_type, proto->n_output, n_outputs);
	for (uint32_t i = 0; i < n_outputs; i++)
		names[i] = proto->output[i] && *proto->output[i] ? proto->output[i] : NULL;
	for (uint32_t i = 0; i < n_outputs; i++)
		if (names[i] && find_binding(im, names[i]))
			return f8_onnx_fail(im, F8_ERR_INVALID, "value '%s' is defined twice", names[i]);
	f8_node_id id;
	f8_status status = add_node(im, node, op, inputs, n_inputs, attrs, n_attrs, n_outputs, names,
				    &id);
	if (status)
		return status;
	const f8_node *ir_node = &im->graph->nodes[id];
	for (uint32_t i = 0; i < n_outputs; i++) {
		f8_value_id value = ir_node->outputs[i];
		if (names[i]) {
			onnx_binding *binding;
			if ((status = add_binding(im, names[i], &binding)))
				return status;
			binding->value = value;
		}
	}
	if (out)
		*out = id;
	return F8_OK;
}

/* The header: IR version and the opsets of the domains the model imports. */
static f8_status check_header(onnx_importer *im, const F8cOnnx__ModelProto *model) {
	if (!model->graph)
		return f8_onnx_fail(im, F8_ERR_INVALID, "the model has no graph");
	if (model->n_functions)
		return f8_onnx_fail(im, F8_ERR_UNSUPPORTED, "the model defines local functions (%s%s%s); "
				 "f8c reads exporters' inlined graphs only",
				 model->functions[0]->domain ? model->functions[0]->domain : "",
				 model->functions[0]->domain ? "." : "",
				 model->functions[0]->name ? model->functions[0]->name : "");
	bool imported = false;
	for (size_t i = 0; i < model->n_opset_import; i++) {
		const char *domain = model->opset_import[i]->domain ? model->opset_import[i]->domain : "";
		if (*domain == '\0' || strcmp(domain, "ai.onnx") == 0)
			im->opset = model->opset_import[i]->version, imported = true;
	}
	if (!imported || im->opset < ONNX_OPSET_MIN || im->opset > ONNX_OPSET_MAX) {
		if (!imported)
			f8_onnx_fail(im, F8_ERR_UNSUPPORTED, "the model imports no opset of the default "
				  "ONNX domain");
		else
			f8_onnx_fail(im, F8_ERR_UNSUPPORTED, "the model uses ONNX opset %lld; f8c reads "
				  "opsets %d to %d", (long long)im->opset, ONNX_OPSET_MIN, ONNX_OPSET_MAX);
		f8_diag_hint(im->diag, "export with opset_version between %d and %d", ONNX_OPSET_MIN,
			     ONNX_OPSET_MAX);
		return F8_ERR_UNSUPPORTED;
	}
	const F8cOnnx__GraphProto *graph = model->graph;
	if (graph->n_node > ONNX_MAX_NODES || graph->n_initializer > ONNX_MAX_INITIALIZERS)
		return f8_onnx_fail(im, F8_ERR_UNSUPPORTED, "the graph has %zu nodes and %zu initializers; "
				 "f8c reads at most %d of each", graph->n_node, graph->n_initializer,
				 ONNX_MAX_NODES);
	return F8_OK;
}

/*
 * Weights: float tensors of rank >= 1 with more than one element become parameters (trainable,
 * their data referenced), or buffers where the exporter says so; the rest (integer tensors,
 * scalars) are constants known at import.
 */
/* Whether torch.export recorded initializer `name` as a buffer (not trained) in the graph's
 * value_info metadata. */
static bool is_buffer(const F8cOnnx__GraphProto *graph, const char *name) {
	for (size_t i = 0; i < graph->n_value_info; i++) {
		const F8cOnnx__ValueInfoProto *info = graph->value_info[i];
		if (info->n_metadata_props && info->name && strcmp(info->name, name) == 0) {
			const char *kind = metadata(info->metadata_props, info->n_metadata_props,
						    "pkg.torch.export.graph_signature.InputSpec.kind");
			return kind && strcmp(kind, "BUFFER") == 0;
		}
	}
	return false;
}

/* The first n f32 values of an f32 initializer's data into out; false when they cannot be read
 * or the data is not f32 (the caller then treats the weight as it would any other, so the
 * reader's message is dropped). */
static bool read_f32(const f8_initializer *init, uint64_t n, float *out) {
	if (init->dtype != F8_DTYPE_F32 || n * sizeof *out > init->n_bytes)
		return false;
	f8_diag ignored;
	f8_diag_clear(&ignored);
	return f8_initializer_read(init, n * sizeof *out, out, "", &ignored) == F8_OK;
}

/*
 * Whether an initializer holds a sinusoidal position table, (1, .., positions, 2h) with row p =
 * (sin(p f_0), .., sin(p f_h-1), cos(p f_0), .., cos(p f_h-1)), as GPT-J's embed_positions: the
 * model's code computes it and never trains it, though the exporter wrote it as a weight and
 * marked it no buffer. At most 2^20 elements are read; row 0 (zeros, then ones) is checked first.
 */
static bool sinusoidal_table(const f8_initializer *init, const f8_type *type) {
	int rank = type->shape.rank;
	int64_t lead = 1, p = 0, d = 0;
	for (int i = 0; i < rank; i++) {
		if (!f8_dim_is_const(type->shape.dims[i]))
			return false;
		int64_t n = f8_dim_value(type->shape.dims[i]);
		if (i < rank - 2)
			lead *= n;
		else if (i == rank - 2)
			p = n;
		else
			d = n;
	}
	if (rank < 2 || lead != 1 || p < 2 || d < 2 || d % 2 || p * d > (1 << 20))
		return false;
	float *t = f8_malloc((size_t)(p * d) * sizeof *t);
	int64_t h = d / 2;
	bool table = t && read_f32(init, (uint64_t)d, t);
	for (int64_t j = 0; table && j < d; j++)
		table = fabsf(t[j] - (j < h ? 0.0f : 1.0f)) <= 1e-6f;
	table = table && read_f32(init, (uint64_t)(p * d), t);
	for (int64_t j = 0; table && j < h; j++) {
		double f = atan2(t[d + j], t[d + h + j]);
		for (int64_t q = 0; table && q < p; q++)
			table = fabs(t[q * d + j] - sin((double)q * f)) <= 1e-3 &&
				fabs(t[q * d + h + j] - cos((double)q * f)) <= 1e-3;
	}
	f8_free(t);
	return table;
}

static f8_status import_initializers(onnx_importer *im, const F8cOnnx__GraphProto *graph) {
	for (size_t i = 0; i < graph->n_initializer; i++) {
		const F8cOnnx__TensorProto *tensor = graph->initializer[i];
		f8_type type = {0};
		uint64_t n_bytes;
		onnx_binding *binding;
		f8_status status = f8_onnx_tensor_check(im, tensor, &type, &n_bytes);
		if (!status)
			status = add_binding(im, tensor->name, &binding);
		if (status) {
			if (!im->diag->node[0])
				snprintf(im->diag->node, sizeof im->diag->node, "initializer %zu", i);
			return status;
		}
		bool small = n_bytes <= ONNX_MAX_KNOWN_ELEMENTS * f8_dtype_get_info(type.dtype)->bytes;
		bool parameter = f8_dtype_is_float(type.dtype) && type.shape.rank >= 1 &&
				 n_bytes > f8_dtype_get_info(type.dtype)->bytes;
		if (!parameter && !small) {
			snprintf(im->diag->node, sizeof im->diag->node, "initializer %zu", i);
			return f8_onnx_fail(im, F8_ERR_UNSUPPORTED, "initializer '%s' is a %s tensor of %llu "
					 "bytes: f8c folds constants up to %d elements and trains float "
					 "weights", tensor->name, f8_dtype_name(type.dtype),
					 (unsigned long long)n_bytes, ONNX_MAX_KNOWN_ELEMENTS);
		}
		if (!parameter) {
			status = f8_onnx_tensor_known(im, tensor, &type, &binding->known);
		} else {
			const f8_initializer *init;
			status = f8_onnx_tensor_initializer(im, tensor, n_bytes, &init);
			// A buffer as the exporter marks it, or a sinusoidal table it did not mark.
			bool buffer = !status && (is_buffer(graph, tensor->name) ||
						  sinusoidal_table(init, &type));
			if (!status)
				status = f8_graph_add_input(im->graph, tensor->name,
							    buffer ? F8_ROLE_BUFFER : F8_ROLE_PARAMETER,
							    &type, &binding->value, im->diag);
			if (!status)
				im->graph->values[binding->value].initializer = init;
		}
		if (status)
			return status;
	}
	return F8_OK;
}

/* Whether a dim_param can be a symbol: a name as the text IR writes them, [A-Za-z_][\w.]*,
 * so that "2*seq" or "batch size" cannot pass for an expression or two names. */
static bool is_symbol_name(const char *name) {
	if (!((*name >= 'a' && *name <= 'z') || (*name >= 'A' && *name <= 'Z') || *name == '_'))
		return false;
	for (const char *c = name; *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
		      *c == '_' || *c == '.'))
			return false;
	return true;
}

/* The type of a graph input, its symbolic dims interned and --dim bindings applied. */
static f8_status input_type(onnx_importer *im, const F8cOnnx__ValueInfoProto *info, f8_type *out) {
	const F8cOnnx__TypeProto *type = info->type;
	const char *name = info->name ? info->name : "";
	if (!type || type->value_case != F8C_ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE)
		return f8_onnx_fail(im, F8_ERR_UNSUPPORTED, "graph input '%s' is not a tensor", name);
	const F8cOnnx__TypeProto__Tensor *tensor = type->tensor_type;
	if (!f8_onnx_dtype(tensor->elem_type, &out->dtype))
		return f8_onnx_fail(im, F8_ERR_UNSUPPORTED, "graph input '%s' has type %s, which f8c does "
				 "not read", name, f8_onnx_dtype_name(tensor->elem_type));
	if (!tensor->shape)
		return f8_onnx_fail(im, F8_ERR_UNSUPPORTED, "graph input '%s' has no shape", name);
	if (tensor->shape->n_dim > F8_MAX_RANK)
		return f8_onnx_fail(im, F8_ERR_UNSUPPORTED, "graph input '%s' has rank %zu > %d", name,
				 tensor->shape->n_dim, F8_MAX_RANK);
	out->shape.rank = (uint8_t)tensor->shape->n_dim;
	for (size_t i = 0; i < tensor->shape->n_dim; i++) {
		const F8cOnnx__TensorShapeProto__Dimension *dim = tensor->shape->dim[i];
		f8_dim *to = &out->shape.dims[i];
		if (dim->value_case == F8C_ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
			if (dim->dim_value < 0)
				return f8_onnx_fail(im, F8_ERR_INVALID, "graph input '%s' has a negative "
						 "dimension", name);
			*to = f8_dim_const(dim->dim_value);
			continue;
		}
		const char *param = dim->value_case == F8C_ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM
					    ? dim->dim_param : NULL;
		if (!param || !*param) {
			f8_onnx_fail(im, F8_ERR_UNSUPPORTED, "dimension %zu of graph input '%s' has neither "
				  "a size nor a name", i, name);
			f8_diag_hint(im->diag, "name the exporter's dynamic dimensions (torch.export.Dim) "
					       "or give fixed sizes");
			return F8_ERR_UNSUPPORTED;
		}
		if (!is_symbol_name(param)) {
			f8_onnx_fail(im, F8_ERR_UNSUPPORTED, "dimension %zu of graph input '%s' is named "
				  "'%.60s', which is not a plain name", i, name, param);
			f8_diag_hint(im->diag, "f8c takes letters, digits, '_' and '.' (like batch or "
					       "seq_len); rename the exporter's dynamic dims, or fix the size "
					       "with --dim");
			return F8_ERR_UNSUPPORTED;
		}
		bool bound = false;
		for (uint32_t b = 0; b < im->n_dims && !bound; b++) {
			if (strcmp(im->dims[b].name, param) == 0) {
				*to = f8_dim_const(im->dims[b].value);
				im->dims_used[b] = bound = true;
			}
		}
		uint16_t symbol;
		if (!bound) {
			f8_status status = f8_graph_intern_symbol(im->graph, param, strlen(param), &symbol);
			if (status)
				return f8_diag_set(im->diag, status, "cannot intern dimension '%s'", param);
			*to = f8_dim_symbol(symbol);
		}
	}
	return F8_OK;
}

static f8_status import_inputs(onnx_importer *im, const F8cOnnx__GraphProto *graph) {
	for (size_t i = 0; i < graph->n_input; i++) {
		const F8cOnnx__ValueInfoProto *info = graph->input[i];
		if (info->name && find_binding(im, info->name))
			continue; // an initializer listed as an input too (keep_initializers_as_inputs)
		f8_type type = {0};
		onnx_binding *binding;
		f8_status status = input_type(im, info, &type);
		if (!status)
			status = add_binding(im, info->name, &binding);
		if (!status)
			status = f8_graph_add_input(im->graph, info->name, F8_ROLE_INPUT, &type,
						    &binding->value, im->diag);
		if (status)
			return status;
	}
	for (uint32_t b = 0; b < im->n_dims; b++) {
		if (!im->dims_used[b]) {
			f8_diag_set(im->diag, F8_ERR_ARGUMENT, "--dim %s: the model's inputs have no "
				    "dimension called '%s'", im->dims[b].name, im->dims[b].name);
			f8_diag_hint(im->diag, "the symbolic sizes are in the inputs' types (f8c dump-ir "
					       "MODEL)");
			return F8_ERR_ARGUMENT;
		}
	}
	return F8_OK;
}

static f8_status convert_nodes(onnx_importer *im, const F8cOnnx__GraphProto *graph) {
	onnx_binding **inputs = NULL;
	size_t cap = 0;
	f8_status status = F8_OK;
	for (size_t i = 0; !status && i < graph->n_node; i++) {
		const F8cOnnx__NodeProto *proto = graph->node[i];
		onnx_node node = {.proto = proto, .index = (uint32_t)i, .n_inputs = (uint32_t)proto->n_input};
		if (!proto->op_type || !*proto->op_type) {
			status = f8_onnx_fail(im, F8_ERR_INVALID, "the node has no op_type");
		} else if (proto->n_input > ONNX_MAX_NODE_INPUTS) {
			status = f8_onnx_fail(im, F8_ERR_UNSUPPORTED, "%zu inputs; f8c reads at most %d",
					   proto->n_input, ONNX_MAX_NODE_INPUTS);
		} else if (proto->n_input > cap) {
			f8_free(inputs);
			cap = proto->n_input;
			if (!(inputs = f8_calloc(cap, sizeof *inputs)))
				status = f8_diag_set(im->diag, F8_ERR_NOMEM, "out of memory");
		}
		for (size_t j = 0; !status && j < proto->n_input; j++) {
			const char *name = proto->input[j];
			inputs[j] = name && *name ? find_binding(im, name) : NULL;
			if (name && *name && !inputs[j])
				status = f8_onnx_fail(im, F8_ERR_INVALID, "input %zu '%s' is not defined before "
						   "this node", j, name);
		}
		node.inputs = inputs;
		if (!status)
			status = f8_onnx_convert_node(im, &node);
		if (status && status != F8_ERR_NOMEM) // name the ONNX node, not the IR one it became
			describe_node(im, &node);
	}
	f8_free(inputs);
	return status;
}

static f8_status import_outputs(onnx_importer *im, const F8cOnnx__GraphProto *graph) {
	for (size_t i = 0; i < graph->n_output; i++) {
		const char *name = graph->output[i]->name ? graph->output[i]->name : "";
		onnx_binding *binding = find_binding(im, name);
		f8_value_id value;
		if (!binding)
			return f8_onnx_fail(im, F8_ERR_INVALID, "graph output '%s' is never computed", name);
		f8_status status = f8_onnx_value_of(im, binding, &value);
		if (!status && f8_graph_add_output(im->graph, value))
			status = f8_diag_set(im->diag, F8_ERR_NOMEM, "out of memory");
		if (status)
			return status;
	}
	return F8_OK;
}

/* The graph's name: the ONNX graph's, else the file's stem. */
static const char *graph_name(const F8cOnnx__GraphProto *graph, const char *path) {
	if (graph && graph->name && *graph->name)
		return graph->name;
	const char *slash = strrchr(path, '/');
	return slash ? slash + 1 : path;
}

/* Where a model comes from: a file, or bytes in memory with a name and an external-data root. */
typedef struct model_source {
	const char *path;     // the file, or the name messages use for bytes in memory
	const uint8_t *bytes; // NULL: read `path`
	size_t size;
	const char *folder;   // for bytes in memory: the external data's root, or NULL for none
} model_source;

static f8_status import(const model_source *source, const f8_dim_binding *dims, uint32_t n_dims,
			f8_graph **out, f8_diag *diag) {
	*out = NULL;
	onnx_importer im = {.diag = diag, .dims = dims, .n_dims = n_dims, .folder_fd = -1};
	F8cOnnx__ModelProto *model = NULL;
	f8_status status = f8_graph_create("onnx", &im.graph);
	if (status)
		return f8_diag_set(diag, status, "out of memory");
	if (!(im.path = f8_arena_strdup(im.graph->arena, source->path)) ||
	    !(im.dims_used = f8_calloc(n_dims ? n_dims : 1, sizeof *im.dims_used)))
		status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	if (!status && !source->bytes)
		status = f8_onnx_model_read(&im, source->path, &model);
	else if (!status && source->folder)
		status = f8_onnx_open_folder(&im, source->folder);
	else if (!status) // no root: any external data is refused when opened
		im.folder = "(no folder)/";
	if (!status && source->bytes)
		status = f8_onnx_model_unpack(&im, source->bytes, source->size, &model);
	if (!status)
		status = check_header(&im, model);
	if (!status) {
		const char *name = f8_arena_strdup(im.graph->arena,
						   graph_name(model->graph, source->path));
		if (name)
			im.graph->name = name;
		status = import_initializers(&im, model->graph);
	}
	if (!status)
		status = import_inputs(&im, model->graph);
	if (!status)
		status = convert_nodes(&im, model->graph);
	if (!status)
		status = import_outputs(&im, model->graph);
	if (status && !diag->file[0])
		f8_diag_at(diag, source->path, 0, 0, NULL, 0);
	f8_onnx_model_free(model);
	f8_free(im.bindings);
	f8_free(im.dims_used);
	if (im.folder_fd >= 0)
		close(im.folder_fd);
	if (status) {
		f8_graph_destroy(im.graph);
		return status;
	}
	*out = im.graph;
	return F8_OK;
}

f8_status f8_onnx_import(const char *path, const f8_dim_binding *dims, uint32_t n_dims,
			 f8_graph **out, f8_diag *diag) {
	model_source source = {.path = path};
	return import(&source, dims, n_dims, out, diag);
}

f8_status f8_onnx_import_memory(const void *bytes, size_t size, const char *name,
				const char *folder, const f8_dim_binding *dims, uint32_t n_dims,
				f8_graph **out, f8_diag *diag) {
	model_source source = {.path = name, .bytes = bytes ? bytes : "", .size = size,
			       .folder = folder};
	return import(&source, dims, n_dims, out, diag);
}

f8_status f8_onnx_load(const char *path, f8_graph **out, f8_diag *diag) {
	return f8_onnx_import(path, NULL, 0, out, diag);
}
