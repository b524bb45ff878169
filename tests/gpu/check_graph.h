/*
 * What the device checks of library nodes share (tests/gpu/gemm_check.c, attention_check.c): a
 * small text-IR graph parsed and typed without the passes (the GPU machine has no LLVM, and the
 * IR library has the shape inference), host tensors of its values with the symbols bound, the
 * CPU reference kernels run node by node on them (runtime/cpu/kernels.h, the oracle), and device
 * copies of the values. Header-only, like tests/runtime/test_fill.h: each check is one
 * executable.
 */
#ifndef F8_TESTS_GPU_CHECK_GRAPH_H
#define F8_TESTS_GPU_CHECK_GRAPH_H

#include <stdio.h>  // snprintf
#include <stdlib.h> // strtoll
#include <string.h> // strlen, strstr

#include "ir/alloc.h"            // f8_calloc, f8_free
#include "ir/text.h"             // f8_text_parse
#include "ir/verify.h"           // f8_node_infer_types, f8_graph_verify
#include "runtime/cpu/kernels.h" // f8_cpu_kernel_call, f8_cpu_kernel_get
#include "runtime/cuda/driver.h" // f8_cuda_alloc, f8_cuda_free, f8_cuda_copy_*
#include "runtime/tensor.h"      // f8_rt_tensor

/* Parses `body` (leaves, nodes, outputs) as `graph NAME { body }`, types every node in program
 * order (the canonicalize pass's inference) and verifies the graph; NULL with the failure in
 * `diag`. */
static inline f8_graph *check_graph_parse(const char *name, const char *body, f8_diag *diag) {
	size_t size = strlen(body) + 64;
	char *text = f8_malloc(size);
	if (!text) {
		f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
		return NULL;
	}
	int n = snprintf(text, size, "graph check {\n%s}\n", body);
	f8_graph *graph = NULL;
	f8_status status = f8_text_parse(text, (size_t)n, name, &graph, diag);
	f8_free(text);
	for (uint32_t i = 0; !status && i < graph->n_order; i++) {
		f8_node_id id = graph->order[i];
		f8_type types[8];
		status = f8_node_infer_types(graph, id, types, diag);
		for (uint32_t o = 0; !status && o < graph->nodes[id].n_outputs; o++)
			graph->values[graph->nodes[id].outputs[o]].type = types[o];
	}
	if (!status)
		status = f8_graph_verify(graph, diag);
	if (status) {
		f8_graph_destroy(graph);
		return NULL;
	}
	return graph;
}

/* Binds "name=value ..." to the graph's symbols into values (graph->n_symbols of them); false
 * when a symbol is left without a value or the list names one the graph lacks. */
static inline bool check_graph_symbols(const f8_graph *graph, const char *list, int64_t *values) {
	for (uint32_t s = 0; s < graph->n_symbols; s++) {
		size_t len = strlen(graph->symbols[s]);
		const char *p = list ? strstr(list, graph->symbols[s]) : NULL;
		while (p && !((p == list || p[-1] == ' ') && p[len] == '='))
			p = strstr(p + 1, graph->symbols[s]);
		if (!p)
			return false;
		values[s] = strtoll(p + len + 1, NULL, 10);
	}
	return true;
}

/* A zeroed host tensor of value `id`'s type with the symbols bound. */
static inline bool check_tensor_make(const f8_graph *graph, const int64_t *symbols, f8_value_id id,
				     f8_rt_tensor *out) {
	const f8_type *type = &graph->values[id].type;
	int64_t dims[F8_MAX_RANK];
	for (int d = 0; d < type->shape.rank; d++)
		if (!f8_dim_evaluate(type->shape.dims[d], symbols, &dims[d]))
			return false;
	return f8_rt_tensor_create(type->dtype, type->shape.rank, dims, out, NULL) == F8_OK;
}

/* Destroys tensors[] (one per value of the graph, as the calls here make them; NULL is none)
 * and frees the array. */
static inline void check_tensors_destroy(const f8_graph *graph, f8_rt_tensor *tensors) {
	for (uint32_t v = 0; tensors && v < graph->n_values; v++)
		f8_rt_tensor_destroy(&tensors[v]);
	f8_free(tensors);
}

/* Runs node `id`'s reference kernel on tensors[] (by value id; NULL inputs where absent), its
 * outputs made into tensors[] (the caller destroys them). */
static inline f8_status check_reference_run(const f8_graph *graph, const int64_t *symbols,
					    f8_node_id id, f8_rt_tensor *tensors, f8_diag *diag) {
	const f8_node *node = &graph->nodes[id];
	const f8_rt_tensor *inputs[16] = {0};
	f8_rt_tensor outputs[8] = {{0}};
	if (node->n_inputs > 16 || node->n_outputs > 8)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "a node too wide for the check");
	for (uint32_t i = 0; i < node->n_inputs; i++)
		inputs[i] = node->inputs[i] == F8_NONE ? NULL : &tensors[node->inputs[i]];
	for (uint32_t o = 0; o < node->n_outputs; o++)
		if (!check_tensor_make(graph, symbols, node->outputs[o], &outputs[o]))
			return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	f8_cpu_kernel_call call = {.graph = graph, .node = node, .symbol_values = symbols,
				   .inputs = inputs, .outputs = outputs};
	f8_status status = f8_cpu_kernel_get(node->op)(&call, diag);
	for (uint32_t o = 0; o < node->n_outputs; o++) {
		f8_rt_tensor_destroy(&tensors[node->outputs[o]]);
		tensors[node->outputs[o]] = outputs[o];
	}
	return status;
}

/* Device memory of every value (by id; 0 where a value has no bytes), each value that has host
 * data copied in. */
typedef struct check_device_values {
	CUdeviceptr *pointers; // (n)
	uint32_t n;
} check_device_values;

static inline f8_status check_device_values_create(const f8_graph *graph,
						   const f8_rt_tensor *tensors,
						   check_device_values *out, f8_diag *diag) {
	out->n = graph->n_values;
	out->pointers = f8_calloc(graph->n_values + 1, sizeof *out->pointers);
	if (!out->pointers)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	for (uint32_t v = 0; v < graph->n_values; v++) {
		size_t bytes = tensors[v].n_bytes;
		f8_status status = bytes ? f8_cuda_alloc(bytes, &out->pointers[v], diag) : F8_OK;
		if (!status && bytes && tensors[v].data)
			status = f8_cuda_copy_to_device(out->pointers[v], tensors[v].data, bytes, diag);
		if (status)
			return status;
	}
	return F8_OK;
}

static inline void check_device_values_destroy(check_device_values *values) {
	for (uint32_t v = 0; values->pointers && v < values->n; v++)
		f8_cuda_free(values->pointers[v], NULL);
	f8_free(values->pointers);
	values->pointers = NULL;
}

#endif
