/*
 * The model loader: picks the frontend by the file's extension, then binds `--dim` sizes.
 */
#include <string.h> // strcmp, strlen, strrchr

#include "frontend/frontend.h"          // f8_frontend_load
#include "frontend/json/model_json.h"   // f8_json_model_load
#include "frontend/onnx/onnx_import.h"  // f8_onnx_import
#include "ir/text.h"                    // f8_text_parse_file
#include "ir/verify.h"                  // f8_graph_verify
#include "passes/pipeline.h"            // f8_pipeline_run

static bool has_extension(const char *path, const char *extension) {
	const char *dot = strrchr(path, '.');
	return dot && strcmp(dot, extension) == 0;
}

f8_status f8_frontend_bind_dims(f8_graph *graph, const f8_dim_binding *dims, uint32_t n_dims,
				f8_diag *diag) {
	for (uint32_t b = 0; b < n_dims; b++) {
		const f8_dim_binding *binding = &dims[b];
		uint32_t symbol = F8_NONE;
		for (uint32_t i = 0; i < graph->n_symbols && symbol == F8_NONE; i++)
			if (strcmp(graph->symbols[i], binding->name) == 0)
				symbol = i;
		if (symbol == F8_NONE) {
			f8_diag_set(diag, F8_ERR_ARGUMENT, "--dim %s: the model has no size called '%s'",
				    binding->name, binding->name);
			f8_diag_hint(diag, "the model's symbolic sizes are in its inputs' types "
					   "(f8c dump-ir MODEL)");
			return F8_ERR_ARGUMENT;
		}
		if (binding->value < 1)
			return f8_diag_set(diag, F8_ERR_ARGUMENT, "--dim %s=%lld: a size must be at least 1",
					   binding->name, (long long)binding->value);
		for (uint32_t v = 0; v < graph->n_values; v++) {
			f8_value *value = &graph->values[v];
			if (value->producer != F8_NONE) {
				// Inference derives it again from the bound inputs, so a size that no longer
				// fits (seq past the position table) is reported at the op it breaks.
				value->type = (f8_type){0};
				continue;
			}
			for (int i = 0; i < value->type.shape.rank; i++)
				if (!f8_dim_substitute(value->type.shape.dims[i], (uint16_t)symbol,
						       binding->value, &value->type.shape.dims[i]))
					return f8_diag_set(diag, F8_ERR_ARGUMENT, "--dim %s=%lld makes the "
							   "size of %%%s overflow", binding->name,
							   (long long)binding->value, value->name);
		}
		for (uint32_t n = 0; n < graph->n_nodes; n++) {
			f8_node *node = &graph->nodes[n];
			for (uint32_t a = 0; a < node->n_attrs; a++) {
				f8_attr *attr = &node->attrs[a];
				bool ok = true;
				if (attr->kind == F8_ATTR_DIM)
					ok = f8_dim_substitute(attr->dim, (uint16_t)symbol, binding->value,
							       &attr->dim);
				for (uint32_t i = 0; ok && attr->kind == F8_ATTR_DIMS && i < attr->dims.n; i++)
					ok = f8_dim_substitute(attr->dims.items[i], (uint16_t)symbol,
							       binding->value, &attr->dims.items[i]);
				if (!ok)
					return f8_diag_set(diag, F8_ERR_ARGUMENT, "--dim %s=%lld makes "
							   "attribute %s overflow", binding->name,
							   (long long)binding->value, attr->name);
			}
		}
	}
	return F8_OK;
}

f8_status f8_frontend_load(const char *path, const f8_frontend_options *options, f8_graph **out,
			   f8_diag *diag) {
	static const f8_frontend_options no_options;
	if (!options)
		options = &no_options;
	*out = NULL;
	f8_graph *graph = NULL;
	f8_status status;
	bool onnx = has_extension(path, ".onnx");
	if (onnx) // binds dims as it reads the inputs, so shape arithmetic folds to constants
		status = f8_onnx_import(path, options->dims, options->n_dims, &graph, diag);
	else if (has_extension(path, ".json"))
		status = f8_json_model_load(path, options->vocab_multiple, &graph, diag);
	else
		status = f8_text_parse_file(path, &graph, diag);
	if (!status && !onnx && options->n_dims)
		status = f8_frontend_bind_dims(graph, options->dims, options->n_dims, diag);
	if (!status)
		status = f8_pipeline_run(graph, "canonicalize", false, diag);
	if (status) {
		f8_graph_destroy(graph);
		return status;
	}
	*out = graph;
	return F8_OK;
}
