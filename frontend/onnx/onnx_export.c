/*
 * f8_onnx_export: the ModelProto around the lowered nodes. The header (IR version, opset,
 * producer), the graph inputs with their symbolic dims as dim_params, the weights as
 * initializers whose bytes lie in one external data file at 64-byte aligned offsets, the walk
 * over the program that lowers each node (onnx_export_ops.c), the graph outputs; then the packed
 * model and the weights go to disk (onnx_export_file.c).
 */
#include <stdio.h>  // snprintf
#include <string.h> // memcpy

#include "frontend/onnx/onnx_export.h"          // f8_onnx_export
#include "frontend/onnx/onnx_export_internal.h" // onnx_exporter, export_*
#include "ir/alloc.h"                           // f8_calloc, f8_malloc, f8_free

/* The ONNX IR version for `opset`: the lowest that allows it (ONNX's versioning table). */
static int64_t ir_version_for(int opset) {
	return opset <= 22 ? 10 : opset == 23 ? 11 : 12;
}

/* One dim of a value's type: a constant as a dim_value, a lone symbol as a dim_param; any other
 * symbolic size is left unnamed, which ONNX allows. */
static F8cOnnx__TensorShapeProto__Dimension *dim_proto(onnx_exporter *ex, f8_dim size) {
	F8cOnnx__TensorShapeProto__Dimension *dim = f8_export_alloc(ex, 1, sizeof *dim);
	if (!dim)
		return NULL;
	*dim = (F8cOnnx__TensorShapeProto__Dimension)F8C_ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT;
	uint16_t symbol;
	if (f8_dim_is_const(size)) {
		dim->value_case = F8C_ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
		dim->dim_value = f8_dim_value(size);
	} else if (f8_dim_is_symbol(size, &symbol)) {
		dim->value_case = F8C_ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
		dim->dim_param = (char *)ex->graph->symbols[symbol];
	}
	return dim;
}

/* A TypeProto for a tensor of `type`. */
static F8cOnnx__TypeProto *type_proto(onnx_exporter *ex, const f8_type *type) {
	F8cOnnx__TypeProto *proto = f8_export_alloc(ex, 1, sizeof *proto);
	F8cOnnx__TypeProto__Tensor *tensor = f8_export_alloc(ex, 1, sizeof *tensor);
	F8cOnnx__TensorShapeProto *shape = f8_export_alloc(ex, 1, sizeof *shape);
	F8cOnnx__TensorShapeProto__Dimension **dims;
	dims = f8_export_alloc(ex, type->shape.rank, sizeof *dims);
	if (!proto || !tensor || !shape || !dims)
		return NULL;
	for (int i = 0; i < type->shape.rank; i++)
		if (!(dims[i] = dim_proto(ex, type->shape.dims[i])))
			return NULL;
	*proto = (F8cOnnx__TypeProto)F8C_ONNX__TYPE_PROTO__INIT;
	*tensor = (F8cOnnx__TypeProto__Tensor)F8C_ONNX__TYPE_PROTO__TENSOR__INIT;
	*shape = (F8cOnnx__TensorShapeProto)F8C_ONNX__TENSOR_SHAPE_PROTO__INIT;
	shape->dim = dims, shape->n_dim = type->shape.rank;
	tensor->has_elem_type = true, tensor->elem_type = f8_export_data_type(type->dtype);
	tensor->shape = shape;
	proto->value_case = F8C_ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
	proto->tensor_type = tensor;
	return proto;
}

/* Appends a ValueInfoProto for IR value `id` to *list (*n_list of them). */
static void add_value_info(onnx_exporter *ex, f8_value_id id, F8cOnnx__ValueInfoProto ***list,
			   size_t *n_list) {
	const f8_value *value = &ex->graph->values[id];
	F8cOnnx__ValueInfoProto *info = f8_export_alloc(ex, 1, sizeof *info);
	F8cOnnx__ValueInfoProto **grown = f8_export_alloc(ex, *n_list + 1, sizeof *grown);
	F8cOnnx__TypeProto *type = type_proto(ex, &value->type);
	if (!info || !grown || !type)
		return;
	*info = (F8cOnnx__ValueInfoProto)F8C_ONNX__VALUE_INFO_PROTO__INIT;
	info->name = (char *)(ex->names[id] ? ex->names[id] : value->name);
	info->type = type;
	if (*n_list)
		memcpy(grown, *list, *n_list * sizeof *grown);
	grown[(*n_list)++] = info;
	*list = grown;
}

/* The initializer of weight `w`: its type, and its bytes at w->offset of the file `location`. */
static void add_weight(onnx_exporter *ex, const export_weight *w, const char *location) {
	const f8_value *value = &ex->graph->values[w->value];
	char offset[24], length[24];
	snprintf(offset, sizeof offset, "%llu", (unsigned long long)w->offset);
	snprintf(length, sizeof length, "%llu", (unsigned long long)w->n_bytes);
	F8cOnnx__TensorProto *tensor = f8_export_tensor(ex, value->name, value->type.dtype,
						     &value->type.shape, NULL, 0);
	F8cOnnx__StringStringEntryProto **entries = f8_export_alloc(ex, 3, sizeof *entries);
	if (!tensor || !entries || !(entries[0] = f8_export_entry(ex, "location", location)) ||
	    !(entries[1] = f8_export_entry(ex, "offset", offset)) ||
	    !(entries[2] = f8_export_entry(ex, "length", length)))
		return;
	tensor->external_data = entries, tensor->n_external_data = 3;
	tensor->has_data_location = true;
	tensor->data_location = F8C_ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
	f8_export_add_initializer(ex, tensor);
}

/* Fails unless leaf `value` is a weight f8c can make up: without contents, f32, bf16 or f16,
 * of a constant size (into *numel). */
static bool check_weight(onnx_exporter *ex, const f8_value *value, f8_dim *numel) {
	f8_dtype dtype = value->type.dtype;
	if (value->initializer) {
		f8_export_fail(ex, F8_ERR_UNSUPPORTED, "%%%s has contents from a model file; "
			    "export-onnx makes up the weights of model descriptions", value->name);
		return false;
	}
	if (!f8_shape_numel(&value->type.shape, numel) || !f8_dim_is_const(*numel) ||
	    (dtype != F8_DTYPE_F32 && dtype != F8_DTYPE_BF16 && dtype != F8_DTYPE_F16)) {
		f8_export_fail(ex, F8_ERR_UNSUPPORTED, "weight %%%s is not f32, bf16 or f16 of a "
			    "constant size", value->name);
		return false;
	}
	return true;
}

/*
 * The graph's leaves: inputs become graph inputs; parameters and buffers become weights, laid out
 * in the data file in declaration order, each at a multiple of F8_ONNX_EXPORT_ALIGN. The weights
 * go to `weights` (room for graph->n_inputs), their count to *n_weights, the file's size to *size.
 */
static void declare_leaves(onnx_exporter *ex, const char *location, export_weight *weights,
			   uint32_t *n_weights, uint64_t *size) {
	const f8_graph *graph = ex->graph;
	const uint64_t align = F8_ONNX_EXPORT_ALIGN;
	for (uint32_t i = 0; i < graph->n_inputs && !ex->status; i++) {
		f8_value_id id = graph->inputs[i];
		const f8_value *value = &graph->values[id];
		f8_dim numel;
		ex->names[id] = value->name;
		if (value->role == F8_ROLE_INPUT) {
			add_value_info(ex, id, &ex->proto->input, &ex->proto->n_input);
		} else if (value->role != F8_ROLE_PARAMETER && value->role != F8_ROLE_BUFFER) {
			f8_export_fail(ex, F8_ERR_UNSUPPORTED, "%%%s is a %s: export-onnx writes "
				    "forward graphs, whose leaves are inputs and weights",
				    value->name, f8_role_name(value->role));
		} else if (check_weight(ex, value, &numel)) {
			export_weight *w = &weights[(*n_weights)++];
			size_t width = f8_dtype_get_info(value->type.dtype)->bytes;
			w->value = id;
			w->offset = (*size + align - 1) / align * align;
			w->n_bytes = (uint64_t)f8_dim_value(numel) * width;
			*size = w->offset + w->n_bytes;
			add_weight(ex, w, location);
		}
	}
}

/* Lowers the program's nodes in order, then declares the graph's outputs. */
static void lower_program(onnx_exporter *ex) {
	const f8_graph *graph = ex->graph;
	for (uint32_t p = 0; p < graph->n_order && !ex->status; p++) {
		ex->node = &graph->nodes[graph->order[p]];
		f8_export_lower_node(ex, ex->node);
		if (ex->status && !ex->diag->node[0])
			f8_diag_set_node(ex->diag, graph, graph->order[p]);
	}
	ex->node = NULL;
	for (uint32_t i = 0; i < graph->n_outputs && !ex->status; i++) {
		f8_value_id id = graph->outputs[i];
		if (ex->forms[id] != EXPORT_FORM_PLAIN || !ex->names[id])
			f8_export_fail(ex, F8_ERR_UNSUPPORTED, "graph output %%%s is not a plain "
				    "tensor", graph->values[id].name);
		add_value_info(ex, id, &ex->proto->output, &ex->proto->n_output);
	}
}

/* The header: IR version, the default domain's opset, the producer, what the model is. */
static void write_header(onnx_exporter *ex, const f8_onnx_export_options *options,
			 F8cOnnx__ModelProto *model) {
	F8cOnnx__OperatorSetIdProto *opset = f8_export_alloc(ex, 1, sizeof *opset);
	F8cOnnx__OperatorSetIdProto **opsets = f8_export_alloc(ex, 1, sizeof *opsets);
	if (!opset || !opsets)
		return;
	*opset = (F8cOnnx__OperatorSetIdProto)F8C_ONNX__OPERATOR_SET_ID_PROTO__INIT;
	opset->domain = "", opset->has_version = true, opset->version = options->opset;
	opsets[0] = opset;
	model->has_ir_version = true, model->ir_version = ir_version_for(options->opset);
	model->opset_import = opsets, model->n_opset_import = 1;
	model->producer_name = "f8c";
	const char *version = options->producer_version ? options->producer_version : "unknown";
	model->producer_version = (char *)version;
	char doc[512];
	snprintf(doc, sizeof doc, "Written by f8c export-onnx from the model description %s; "
		 "weights made up from seed %llu (Megatron-LM's initialization).%s",
		 ex->graph->name, (unsigned long long)options->seed,
		 ex->has_moe ? " Mixture-of-experts layers are dense: every expert runs on every "
			       "token, weighted by its top-k router probability or 0 (experts / "
			       "top_k times the FLOPs of routing)." : "");
	model->doc_string = f8_export_strdup(ex, doc);
}

/* Builds the whole ModelProto into *model, all of it in the exporter's arena. */
static void build_model(onnx_exporter *ex, const f8_onnx_export_options *options,
			const export_paths *paths, F8cOnnx__ModelProto *model,
			export_weight *weights, uint32_t *n_weights, uint64_t *data_size) {
	const f8_graph *graph = ex->graph;
	*model = (F8cOnnx__ModelProto)F8C_ONNX__MODEL_PROTO__INIT;
	model->graph = ex->proto;
	ex->proto->name = (char *)graph->name;
	for (uint32_t v = 0; v < graph->n_values; v++) // no helper may take an IR value's name
		f8_export_reserve(ex, graph->values[v].name);
	declare_leaves(ex, paths->data_location, weights, n_weights, data_size);
	lower_program(ex);
	write_header(ex, options, model); // last: it says whether the graph has dense MoE layers
}

/* Packs `model` and writes it and its weights. */
static f8_status write_model(onnx_exporter *ex, const F8cOnnx__ModelProto *model,
			     const export_paths *paths, const export_weight *weights,
			     uint32_t n_weights, uint64_t data_size,
			     const f8_onnx_export_options *options) {
	size_t size = f8c_onnx__model_proto__get_packed_size(model);
	if (size > INT32_MAX)
		return f8_diag_set(ex->diag, F8_ERR_UNSUPPORTED, "the model's graph takes %zu "
				   "bytes, more than protobuf's 2 GiB", size);
	uint8_t *packed = f8_malloc(size ? size : 1);
	if (!packed)
		return f8_diag_set(ex->diag, F8_ERR_NOMEM, "out of memory writing the ONNX model");
	f8c_onnx__model_proto__pack(model, packed);
	f8_status status = f8_export_write_files(ex->graph, packed, size, paths, weights, n_weights,
					      data_size, options, ex->diag);
	f8_free(packed);
	return status;
}

f8_status f8_onnx_export(const f8_graph *graph, const char *path,
			 const f8_onnx_export_options *options, f8_diag *diag) {
	static const f8_onnx_export_options defaults = {.seed = F8_ONNX_EXPORT_SEED_DEFAULT,
							.opset = F8_ONNX_EXPORT_OPSET_DEFAULT};
	if (!options)
		options = &defaults;
	if (options->opset < F8_ONNX_EXPORT_OPSET_MIN ||
	    options->opset > F8_ONNX_EXPORT_OPSET_MAX) {
		f8_diag_set(diag, F8_ERR_ARGUMENT, "opset %d: export-onnx writes opsets %d to %d",
			    options->opset, F8_ONNX_EXPORT_OPSET_MIN, F8_ONNX_EXPORT_OPSET_MAX);
		return F8_ERR_ARGUMENT;
	}
	export_paths paths;
	f8_status status = f8_export_make_paths(path, &paths, diag);
	if (status)
		return status;
	F8cOnnx__GraphProto graph_proto = F8C_ONNX__GRAPH_PROTO__INIT;
	F8cOnnx__ModelProto model;
	onnx_exporter ex = {.graph = graph, .diag = diag, .opset = options->opset,
			    .proto = &graph_proto, .arena = f8_arena_create()};
	ex.names = f8_calloc(graph->n_values + 1u, sizeof *ex.names);
	ex.forms = f8_calloc(graph->n_values + 1u, sizeof *ex.forms);
	ex.symbol_sizes = f8_calloc(graph->n_symbols + 1u, sizeof *ex.symbol_sizes);
	export_weight *weights = f8_calloc(graph->n_inputs + 1u, sizeof *weights);
	uint32_t n_weights = 0;
	uint64_t data_size = 0;
	if (!ex.arena || !ex.names || !ex.forms || !ex.symbol_sizes || !weights)
		f8_export_fail(&ex, F8_ERR_NOMEM, "out of memory writing the ONNX model");
	else
		build_model(&ex, options, &paths, &model, weights, &n_weights, &data_size);
	status = ex.status ? ex.status
			   : write_model(&ex, &model, &paths, weights, n_weights, data_size,
					 options);
	f8_free(weights);
	f8_free(ex.names);
	f8_free(ex.forms);
	f8_free(ex.symbol_sizes);
	f8_arena_destroy(ex.arena);
	return status;
}
