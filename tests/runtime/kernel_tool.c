/*
 * kernel_tool: runs a text-IR graph on the CPU executor with leaves read from .npy files and
 * writes its outputs as .npy files, for tests/runtime/test_kernels_numpy.py to check the
 * reference kernels against NumPy.
 *
 * usage: kernel_tool GRAPH.f8t DIR [SYMBOL=VALUE ...]
 *   every leaf %name is read from DIR/name.npy (converted to the leaf's dtype: f32 data fills
 *   a bf16 or FP8 leaf, rounded as a store rounds), every graph output %name is written to
 *   DIR/name.npy (bf16 and FP8 outputs widened to f32, which .npy can hold). Exit status 0 on
 *   success, 1 with the diagnostic on stderr otherwise (a kernel's data error included).
 */
#include <stdio.h>  // fprintf, snprintf
#include <stdlib.h> // strtoll
#include <string.h> // strchr, strlen

#include "ir/text.h"              // f8_text_parse_file
#include "passes/pipeline.h"      // f8_pipeline_run
#include "runtime/cpu/executor.h" // f8_cpu_executor
#include "runtime/npy.h"          // f8_npy_read, f8_npy_write

/* Binds SYMBOL=VALUE arguments to the graph's symbols; false on an unknown or missing one. */
static bool bind_symbols(const f8_graph *graph, int argc, char **argv, int64_t *values) {
	for (uint32_t s = 0; s < graph->n_symbols; s++)
		values[s] = 0;
	for (int i = 0; i < argc; i++) {
		const char *equals = strchr(argv[i], '=');
		uint32_t s = 0;
		while (equals && s < graph->n_symbols &&
		       !(strlen(graph->symbols[s]) == (size_t)(equals - argv[i]) &&
			 strncmp(graph->symbols[s], argv[i], (size_t)(equals - argv[i])) == 0))
			s++;
		if (!equals || s == graph->n_symbols) {
			fprintf(stderr, "kernel_tool: %s is not SYMBOL=VALUE for a symbol of the "
					"graph\n", argv[i]);
			return false;
		}
		values[s] = strtoll(equals + 1, NULL, 10);
	}
	for (uint32_t s = 0; s < graph->n_symbols; s++)
		if (values[s] < 1) {
			fprintf(stderr, "kernel_tool: symbol %s has no value\n", graph->symbols[s]);
			return false;
		}
	return true;
}

/* Fills every leaf from DIR/name.npy. */
static f8_status read_leaves(const f8_graph *graph, f8_cpu_executor *executor, const char *dir,
			     f8_diag *diag) {
	for (uint32_t i = 0; i < graph->n_inputs; i++) {
		const f8_value *value = &graph->values[graph->inputs[i]];
		char path[4096];
		snprintf(path, sizeof path, "%s/%s.npy", dir, value->name);
		f8_rt_tensor data;
		f8_status status = f8_npy_read(path, &data, diag);
		if (status)
			return status;
		f8_rt_tensor *leaf = f8_cpu_executor_leaf(executor, graph->inputs[i]);
		bool same_shape = data.rank == leaf->rank;
		for (int d = 0; same_shape && d < leaf->rank; d++)
			same_shape = data.dims[d] == leaf->dims[d];
		if (!same_shape) {
			f8_rt_tensor_destroy(&data);
			return f8_diag_set(diag, F8_ERR_ARGUMENT, "%s does not have the shape "
					   "of %%%s", path, value->name);
		}
		int64_t n = f8_rt_tensor_numel(leaf);
		for (int64_t j = 0; j < n; j++)
			f8_rt_tensor_set(leaf, j, f8_rt_tensor_get(&data, j));
		f8_rt_tensor_destroy(&data);
	}
	return F8_OK;
}

/* Writes every graph output to DIR/name.npy, widening what .npy cannot hold to f32. */
static f8_status write_outputs(const f8_graph *graph, const f8_cpu_executor *executor,
			       const char *dir, f8_diag *diag) {
	for (uint32_t i = 0; i < graph->n_outputs; i++) {
		const f8_value *value = &graph->values[graph->outputs[i]];
		const f8_rt_tensor *tensor = f8_cpu_executor_value(executor, graph->outputs[i]);
		if (!tensor)
			return f8_diag_set(diag, F8_ERR_ARGUMENT, "%%%s was not made", value->name);
		char path[4096];
		snprintf(path, sizeof path, "%s/%s.npy", dir, value->name);
		f8_dtype dtype = tensor->dtype;
		if (dtype != F8_DTYPE_BF16 && !f8_dtype_is_fp8(dtype) && dtype != F8_DTYPE_E8M0) {
			f8_status status = f8_npy_write(path, tensor, diag);
			if (status)
				return status;
			continue;
		}
		f8_rt_tensor wide;
		int64_t n = f8_rt_tensor_numel(tensor);
		f8_status status = f8_rt_tensor_create(F8_DTYPE_F32, tensor->rank, tensor->dims,
						       &wide, diag);
		for (int64_t j = 0; !status && j < n; j++)
			f8_rt_tensor_set(&wide, j, f8_rt_tensor_get(tensor, j));
		if (!status)
			status = f8_npy_write(path, &wide, diag);
		f8_rt_tensor_destroy(&wide);
		if (status)
			return status;
	}
	return F8_OK;
}

int main(int argc, char **argv) {
	if (argc < 3) {
		fprintf(stderr, "usage: kernel_tool GRAPH.f8t DIR [SYMBOL=VALUE ...]\n");
		return 2;
	}
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_graph *graph = NULL;
	f8_cpu_executor *executor = NULL;
	int64_t symbols[64];
	f8_status status = f8_text_parse_file(argv[1], &graph, &diag);
	if (!status)
		status = f8_pipeline_run(graph, "canonicalize", true, &diag);
	if (!status && (graph->n_symbols > 64 || !bind_symbols(graph, argc - 3, argv + 3, symbols)))
		status = f8_diag_set(&diag, F8_ERR_ARGUMENT, "bad symbol values");
	if (!status)
		status = f8_cpu_executor_create(graph, symbols, &executor, &diag);
	if (!status)
		status = read_leaves(graph, executor, argv[2], &diag);
	if (!status)
		status = f8_cpu_executor_run(executor, F8_PHASES_ALL, &diag);
	if (!status)
		status = write_outputs(graph, executor, argv[2], &diag);
	if (status)
		f8_diag_print(&diag, stderr);
	f8_cpu_executor_destroy(executor);
	f8_graph_destroy(graph);
	return status ? 1 : 0;
}
