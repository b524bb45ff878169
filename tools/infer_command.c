/*
 * f8c infer: runs a model's forward graph on the CPU reference backend, inputs and outputs as
 * NumPy .npy files.
 */
#define _POSIX_C_SOURCE 200809L // mkdir

#include <errno.h>    // errno, EEXIST
#include <stdio.h>    // fprintf, snprintf
#include <string.h>   // strcmp, strchr, strerror
#include <sys/stat.h> // mkdir

#include "frontend/frontend.h"    // f8_frontend_options
#include "ir/alloc.h"             // f8_calloc, f8_free
#include "passes/pipeline.h"      // f8_pipeline_options
#include "runtime/plan.h"         // f8_plan_is_dir, f8_plan_load
#include "runtime/cpu/backend.h"  // f8_cpu_backend_create
#include "runtime/executor.h"     // f8_executor
#include "runtime/npy.h"          // f8_npy_read, f8_npy_write
#include "runtime/parameters.h"   // f8_rt_parameters_init
#include "tools/commands.h"       // f8_tool_infer
#include "tools/compile.h"        // f8_tool_load_model, f8_tool_run_passes
#include "tools/tool_options.h"   // f8_tool_parse_dim_binding

enum { MAX_ITEMS = 64 };

static int usage(const char *problem) {
	fprintf(stderr, "f8c infer: %s\n"
			"usage: f8c infer MODEL|PLAN_DIR --input NAME=FILE.npy... [--dim NAME=N]... "
			"--output-dir DIR [--seed N] [--kernels generated|reference]\n"
			"HINT: every graph input needs an --input; symbolic sizes are taken from the "
			"inputs' shapes (or --dim); each output is written as DIR/NAME.npy\n",
		problem);
	return 2;
}

typedef struct named_file {
	const char *name, *path;
} named_file;

typedef struct infer_request {
	const char *model, *output_dir;
	named_file inputs[MAX_ITEMS];
	uint32_t n_inputs;
	f8_dim_binding dims[MAX_ITEMS];
	uint32_t n_dims;
	int64_t seed;
	bool reference_kernels; // --kernels reference: node by node, no generated kernels
} infer_request;

/* Parses the command line into *request; returns 0, or the usage exit status. */
static int parse_arguments(int argc, char **argv, infer_request *request) {
	for (int i = 1; i < argc; i++) {
		bool has_value = i + 1 < argc;
		if (strcmp(argv[i], "--input") == 0) {
			char *equals = has_value ? strchr(argv[++i], '=') : NULL;
			if (!equals || equals == argv[i] || !equals[1])
				return usage("--input needs NAME=FILE.npy");
			if (request->n_inputs == MAX_ITEMS)
				return usage("too many --input options");
			*equals = '\0';
			request->inputs[request->n_inputs++] = (named_file){argv[i], equals + 1};
		} else if (strcmp(argv[i], "--dim") == 0) {
			if (!has_value || request->n_dims == MAX_ITEMS ||
			    !f8_tool_parse_dim_binding(argv[++i], &request->dims[request->n_dims++]))
				return usage("--dim needs NAME=N with N a positive integer");
		} else if (strcmp(argv[i], "--output-dir") == 0) {
			if (!has_value)
				return usage("--output-dir needs a folder");
			request->output_dir = argv[++i];
		} else if (strcmp(argv[i], "--seed") == 0) {
			if (!has_value || !f8_tool_parse_int(argv[++i], 0, INT64_MAX, &request->seed))
				return usage("--seed needs a non-negative integer");
		} else if (strcmp(argv[i], "--kernels") == 0) {
			const char *which = has_value ? argv[++i] : "";
			if (strcmp(which, "generated") != 0 && strcmp(which, "reference") != 0)
				return usage("--kernels needs generated or reference");
			request->reference_kernels = strcmp(which, "reference") == 0;
		} else if (argv[i][0] == '-' && argv[i][1]) {
			fprintf(stderr, "f8c infer: unknown option '%s'\n", argv[i]);
			return usage("see the options below");
		} else if (request->model) {
			return usage("give one model file");
		} else {
			request->model = argv[i];
		}
	}
	if (!request->model)
		return usage("no model file given");
	if (!request->output_dir)
		return usage("no --output-dir given");
	return 0;
}

/* Binds each symbol that an input's dim is, alone, to the size of the array given for it;
 * symbol_values[s] stays 0 for symbols no input shows. */
static f8_status bind_from_arrays(const f8_graph *graph, const f8_value_id *values,
				  const f8_rt_tensor *arrays, uint32_t n, const infer_request *request,
				  int64_t *symbol_values, f8_diag *diag) {
	for (uint32_t i = 0; i < n; i++) {
		const f8_value *value = &graph->values[values[i]];
		if (value->type.shape.rank != arrays[i].rank)
			return f8_diag_set(diag, F8_ERR_ARGUMENT, "input %%%s has rank %d but its array "
					   "has rank %d", value->name, value->type.shape.rank,
					   arrays[i].rank);
		for (int d = 0; d < arrays[i].rank; d++) {
			uint16_t symbol;
			if (!f8_dim_is_symbol(value->type.shape.dims[d], &symbol))
				continue;
			if (symbol_values[symbol] && symbol_values[symbol] != arrays[i].dims[d])
				return f8_diag_set(diag, F8_ERR_ARGUMENT, "size %s is %lld by one input "
						   "and %lld by %%%s", graph->symbols[symbol],
						   (long long)symbol_values[symbol],
						   (long long)arrays[i].dims[d], value->name);
			symbol_values[symbol] = arrays[i].dims[d];
		}
	}
	// --dim sizes the frontend bound are gone from the types, but not from the symbol table.
	for (uint32_t s = 0; s < graph->n_symbols; s++)
		for (uint32_t i = 0; i < request->n_dims && !symbol_values[s]; i++)
			if (strcmp(request->dims[i].name, graph->symbols[s]) == 0)
				symbol_values[s] = request->dims[i].value;
	for (uint32_t s = 0; s < graph->n_symbols; s++)
		if (symbol_values[s] < 1) {
			f8_diag_set(diag, F8_ERR_ARGUMENT, "size %s is not known from the inputs",
				    graph->symbols[s]);
			f8_diag_hint(diag, "give it with --dim %s=N", graph->symbols[s]);
			return F8_ERR_ARGUMENT;
		}
	return F8_OK;
}

/* Copies `array` into the executor's input leaf, converting exactly (an integer array into a
 * float input and back) and checking the shape against the bound sizes. */
static f8_status set_input(f8_executor *executor, const f8_graph *graph, f8_value_id id,
			   const f8_rt_tensor *array, f8_diag *diag) {
	const f8_tensor_view *leaf = f8_executor_view(executor, id);
	const char *name = graph->values[id].name;
	for (int d = 0; d < leaf->rank; d++)
		if (leaf->dims[d] != array->dims[d])
			return f8_diag_set(diag, F8_ERR_ARGUMENT, "input %%%s: dim %d of the array is "
					   "%lld, the model wants %lld", name, d,
					   (long long)array->dims[d], (long long)leaf->dims[d]);
	f8_rt_tensor converted;
	f8_status status = f8_rt_tensor_create(leaf->dtype, leaf->rank, leaf->dims, &converted,
					       diag);
	if (!status)
		f8_rt_tensor_convert(&converted, array);
	for (int64_t i = 0; !status && leaf->dtype != array->dtype &&
			    i < f8_rt_tensor_numel(&converted); i++) {
		double x = f8_rt_tensor_get(array, i);
		if (f8_rt_tensor_get(&converted, i) != x && x == x)
			status = f8_diag_set(diag, F8_ERR_ARGUMENT, "input %%%s: element %lld (%g) "
					     "does not fit %s", name, (long long)i, x,
					     f8_dtype_name(leaf->dtype));
	}
	if (!status)
		status = f8_executor_write(executor, id, &converted, diag);
	f8_rt_tensor_destroy(&converted);
	return status;
}

/* Writes output `value` as DIR/NAME.npy, widening dtypes .npy has no code for to f32. */
static f8_status write_output(const char *folder, const f8_graph *graph, f8_value_id id,
			      const f8_rt_tensor *tensor, f8_diag *diag) {
	const char *name = graph->values[id].name;
	if (strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "output %%%s cannot be a file name", name);
	char path[4096];
	if (snprintf(path, sizeof path, "%s/%s.npy", folder, name) >= (int)sizeof path)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "the path for output %%%s is too long", name);
	f8_dtype dtype = tensor->dtype;
	if (dtype != F8_DTYPE_BF16 && !f8_dtype_is_fp8(dtype) && dtype != F8_DTYPE_E8M0)
		return f8_npy_write(path, tensor, diag);
	f8_rt_tensor wide;
	f8_status status = f8_rt_tensor_create(F8_DTYPE_F32, tensor->rank, tensor->dims, &wide, diag);
	if (!status) {
		f8_rt_tensor_convert(&wide, tensor);
		status = f8_npy_write(path, &wide, diag);
	}
	f8_rt_tensor_destroy(&wide);
	return status;
}

/* The arrays' sequence (the symbol `seq`) against a JSON description's longest, in its words
 * (the executor would refuse the position table's Slice in the graph's). */
static f8_status check_sequence(const infer_request *request, const f8_graph *graph,
				const int64_t *symbol_values, f8_diag *diag) {
	for (uint32_t s = 0; s < graph->n_symbols; s++)
		if (strcmp(graph->symbols[s], "seq") == 0) {
			char what[64];
			snprintf(what, sizeof what, "the arrays' sequence of %lld tokens",
				 (long long)symbol_values[s]);
			return f8_tool_check_seq(request->model, symbol_values[s], what, diag);
		}
	return F8_OK;
}

/* The ids an Embedding reads from a given array: each below the table's rows, or an error
 * naming the first that is not, its position and the vocabulary (as f8c train says of its
 * token files), before anything runs. */
static f8_status check_ids(const f8_graph *graph, const f8_value_id *ids,
			   const f8_rt_tensor *arrays, uint32_t n_arrays,
			   const int64_t *symbol_values, f8_diag *diag) {
	for (uint32_t p = 0; p < graph->n_order; p++) {
		const f8_node *node = &graph->nodes[graph->order[p]];
		if (node->op != F8_OP_EMBEDDING || node->n_inputs < 2)
			continue;
		int64_t rows;
		const f8_type *table = &graph->values[node->inputs[1]].type;
		if (table->shape.rank < 1 ||
		    !f8_dim_evaluate(table->shape.dims[0], symbol_values, &rows))
			continue;
		for (uint32_t i = 0; i < n_arrays; i++) {
			const f8_rt_tensor *a = &arrays[i];
			if (ids[i] != node->inputs[0] ||
			    (a->dtype != F8_DTYPE_I64 && a->dtype != F8_DTYPE_I32))
				continue;
			int64_t n = f8_rt_tensor_numel(a);
			for (int64_t k = 0; k < n; k++) {
				int64_t id = a->dtype == F8_DTYPE_I64 ? ((const int64_t *)a->data)[k]
								       : ((const int32_t *)a->data)[k];
				if (id >= 0 && id < rows)
					continue;
				f8_diag_hint(diag, "were the ids made for another model? %s needs ids "
					     "in [0, %lld)", graph->values[node->inputs[1]].name,
					     (long long)rows);
				return f8_diag_set(diag, F8_ERR_ARGUMENT, "token %lld at position %lld "
						   "of %%%s is not in the model's vocabulary of %lld",
						   (long long)id, (long long)k,
						   graph->values[ids[i]].name, (long long)rows);
			}
		}
	}
	return F8_OK;
}

/* Runs the request: load, compile for inference, read the inputs, run, write the outputs. */
static f8_status infer(const infer_request *request, f8_diag *diag) {
	f8_graph *graph = NULL;
	f8_backend *backend = NULL;
	f8_executor *executor = NULL;
	f8_rt_tensor arrays[MAX_ITEMS] = {0};
	f8_value_id ids[MAX_ITEMS];
	int64_t *symbol_values = NULL;
	f8_frontend_options options = {.dims = request->dims, .n_dims = request->n_dims,
				       .seed = (uint64_t)request->seed};
	f8_plan *plan = NULL;
	f8_status status;
	if (f8_plan_is_dir(request->model)) { // an inference plan: compiled, checked, its weights
		status = f8_plan_load(request->model, F8C_VERSION, &plan, diag);
		if (!status && plan->training) {
			status = f8_diag_set(diag, F8_ERR_ARGUMENT, "%s is a training plan",
					     request->model);
			f8_diag_hint(diag, "compile the forward graph: f8c compile MODEL --inference "
				     "-o DIR");
		}
		if (!status && request->n_dims)
			status = f8_diag_set(diag, F8_ERR_ARGUMENT, "--dim: %s is compiled already",
					     request->model);
		if (!status)
			graph = plan->graph;
	} else {
		const f8_pipeline_options inference = {0};
		status = f8_tool_load_model(request->model, &options, &graph, diag);
		if (!status)
			status = f8_tool_run_passes(graph, NULL, true, &inference, NULL, diag);
	}
	for (uint32_t i = 0; !status && i < request->n_inputs; i++) {
		const char *name = request->inputs[i].name;
		ids[i] = f8_graph_find_value(graph, name, strlen(name));
		if (ids[i] == F8_NONE || graph->values[ids[i]].role != F8_ROLE_INPUT)
			status = f8_diag_set(diag, F8_ERR_ARGUMENT, "the model has no input named '%s'",
					     name);
		for (uint32_t j = 0; !status && j < i; j++)
			if (ids[j] == ids[i])
				status = f8_diag_set(diag, F8_ERR_ARGUMENT, "input '%s' is given twice",
						     name);
		if (!status)
			status = f8_npy_read(request->inputs[i].path, &arrays[i], diag);
	}
	for (uint32_t i = 0; !status && i < graph->n_inputs; i++) {
		const f8_value *value = &graph->values[graph->inputs[i]];
		bool given = false;
		for (uint32_t j = 0; j < request->n_inputs; j++)
			given |= ids[j] == graph->inputs[i];
		if (value->role == F8_ROLE_INPUT && !given) {
			f8_diag_set(diag, F8_ERR_ARGUMENT, "no array for input %%%s", value->name);
			f8_diag_hint(diag, "add --input %s=FILE.npy", value->name);
			status = F8_ERR_ARGUMENT;
		}
	}
	if (!status && !(symbol_values = f8_calloc(graph->n_symbols + 1, sizeof *symbol_values)))
		status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	if (!status)
		status = bind_from_arrays(graph, ids, arrays, request->n_inputs, request,
					  symbol_values, diag);
	if (!status && !plan)
		status = check_sequence(request, graph, symbol_values, diag);
	if (!status)
		status = check_ids(graph, ids, arrays, request->n_inputs, symbol_values, diag);
	if (!status)
		status = f8_cpu_backend_create(request->reference_kernels ||
							       !f8_cpu_backend_has_generated()
						       ? F8_CPU_KERNELS_REFERENCE
						       : F8_CPU_KERNELS_GENERATED, &backend, diag);
	char folder[4096];
	if (!status)
		status = f8_cpu_backend_cache_kernels(
			backend, f8_tool_kernel_cache(folder, sizeof folder), diag);
	if (!status)
		status = f8_executor_create(graph, symbol_values, backend, &executor, diag);
	if (!status)
		status = f8_rt_parameters_init(executor, NULL, (uint64_t)request->seed,
					       plan ? plan->weights : NULL,
					       plan ? plan->weight_init : NULL, diag);
	for (uint32_t i = 0; !status && i < request->n_inputs; i++)
		status = set_input(executor, graph, ids[i], &arrays[i], diag);
	if (!status)
		status = f8_executor_run(executor, F8_PHASES_ALL, diag);
	if (!status && mkdir(request->output_dir, 0777) != 0 && errno != EEXIST)
		status = f8_diag_set(diag, F8_ERR_IO, "cannot make folder %s: %s",
				     request->output_dir, strerror(errno));
	for (uint32_t i = 0; !status && i < graph->n_outputs; i++) {
		f8_rt_tensor output;
		status = f8_executor_read(executor, graph->outputs[i], &output, diag);
		if (!status)
			status = write_output(request->output_dir, graph, graph->outputs[i], &output,
					      diag);
		f8_rt_tensor_destroy(&output);
	}
	for (uint32_t i = 0; i < request->n_inputs; i++)
		f8_rt_tensor_destroy(&arrays[i]);
	f8_free(symbol_values);
	f8_executor_destroy(executor);
	f8_backend_destroy(backend);
	if (plan)
		f8_plan_destroy(plan); // its graph with it
	else
		f8_graph_destroy(graph);
	return status;
}

int f8_tool_infer(int argc, char **argv) {
	infer_request request = {0};
	int code = parse_arguments(argc, argv, &request);
	if (code)
		return code;
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_status status = infer(&request, &diag);
	if (status) {
		f8_diag_print(&diag, stderr);
		return status == F8_ERR_ARGUMENT ? 2 : 1;
	}
	return 0;
}
