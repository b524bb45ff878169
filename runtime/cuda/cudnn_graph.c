/*
 * cuDNN backend-API graphs, descriptor by descriptor, with sticky error checking
 * (runtime/cuda/cudnn_graph.h). The descriptor attributes follow what cudnn-frontend sets for
 * the same nodes (include/cudnn_frontend/node/{pointwise,matmul,reduction,reshape}.h and its
 * tensor, heuristics and execution-plan builders), so that cuDNN sees the graphs it matches.
 */
#include "runtime/cuda/cudnn_graph.h" // f8_cudnn_graph

#include <stdarg.h> // va_list
#include <stdio.h>  // snprintf, vsnprintf
#include <string.h> // strlen

#include "ir/alloc.h"               // f8_realloc, f8_calloc, f8_free
#include "runtime/cuda/libraries.h" // f8_cuda_api

const char *f8_cudnn_version_text(void) {
	static char text[32];
	size_t version = f8_cuda_api.cudnnGetVersion();
	snprintf(text, sizeof text, "%zu.%zu.%zu", version / 10000, version / 100 % 100,
		 version % 100);
	return text;
}

/* The f8c status of a cuDNN failure: what cuDNN will not do (a category 2000 refusal of a
 * parameter, 3000 not supported) is UNSUPPORTED, an allocation NOMEM, the rest IO. */
static f8_status status_of(cudnnStatus_t result) {
	switch (result) {
	case CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED:
	case CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED:
		return F8_ERR_NOMEM;
	default:
		break;
	}
	switch (CUDNN_STATUS_CATEGORY(result)) {
	case CUDNN_STATUS_BAD_PARAM:
	case CUDNN_STATUS_NOT_SUPPORTED:
		return F8_ERR_UNSUPPORTED;
	default:
		return F8_ERR_IO;
	}
}

/* Fails the graph: `call` returned `result`. The message is written once, by the first
 * failure; cudnnGetLastErrorString is read at once, before another call replaces it. */
static void failed(f8_cudnn_graph *graph, cudnnStatus_t result, const char *call) {
	if (graph->status)
		return;
	char last[512] = "";
	f8_cuda_api.cudnnGetLastErrorString(last, sizeof last);
	size_t n = strlen(last);
	while (n && (last[n - 1] == '\n' || last[n - 1] == ' '))
		last[--n] = '\0';
	graph->status = f8_diag_set(graph->diag, status_of(result),
				    "%s: %s failed: %s: %s [%s; cuDNN %s]", graph->node, call,
				    f8_cuda_api.cudnnGetErrorString(result),
				    last[0] ? last : "(cuDNN gave no further text)", graph->shape,
				    f8_cudnn_version_text());
	f8_diag_hint(graph->diag, "CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr in the environment "
				  "makes cuDNN print its reasons");
}

static void check(f8_cudnn_graph *graph, cudnnStatus_t result, const char *call) {
	if (result != CUDNN_STATUS_SUCCESS)
		failed(graph, result, call);
}

void f8_cudnn_graph_check(f8_cudnn_graph *graph, cudnnStatus_t result, const char *call) {
	check(graph, result, call);
}

#define SET(graph, descriptor, attribute, type, count, values)                                  \
	do {                                                                                    \
		if (!(graph)->status)                                                           \
			check((graph),                                                          \
			      f8_cuda_api.cudnnBackendSetAttribute((descriptor), (attribute),   \
								   (type), (count), (values)),  \
			      "cudnnBackendSetAttribute(" #attribute ")");                       \
	} while (0)

/* A new descriptor of `type`, kept in the graph's list; NULL once the graph has failed. */
static cudnnBackendDescriptor_t make(f8_cudnn_graph *graph, cudnnBackendDescriptorType_t type,
				     const char *what) {
	if (graph->status)
		return NULL;
	if (graph->n_descriptors == graph->cap_descriptors) {
		uint32_t cap = graph->cap_descriptors ? 2 * graph->cap_descriptors : 64;
		cudnnBackendDescriptor_t *grown =
			f8_realloc(graph->descriptors, cap * sizeof *graph->descriptors);
		if (!grown) {
			graph->status = f8_diag_set(graph->diag, F8_ERR_NOMEM,
						    "%s: out of memory building its cuDNN graph",
						    graph->node);
			return NULL;
		}
		graph->descriptors = grown;
		graph->cap_descriptors = cap;
	}
	cudnnBackendDescriptor_t descriptor = NULL;
	char call[96];
	snprintf(call, sizeof call, "cudnnBackendCreateDescriptor(%s)", what);
	check(graph, f8_cuda_api.cudnnBackendCreateDescriptor(type, &descriptor), call);
	if (graph->status)
		return NULL;
	graph->descriptors[graph->n_descriptors++] = descriptor;
	return descriptor;
}

#define MAKE(graph, type) make((graph), (type), #type)

static void finalize(f8_cudnn_graph *graph, cudnnBackendDescriptor_t descriptor, const char *what) {
	if (graph->status)
		return;
	char call[96];
	snprintf(call, sizeof call, "cudnnBackendFinalize(%s)", what);
	check(graph, f8_cuda_api.cudnnBackendFinalize(descriptor), call);
}

void f8_cudnn_graph_init(f8_cudnn_graph *graph, cudnnHandle_t handle, const char *node,
			 const char *shape, f8_diag *diag) {
	*graph = (f8_cudnn_graph){.node = node, .shape = shape, .handle = handle, .diag = diag,
				  .next_virtual = F8_CUDNN_FIRST_VIRTUAL, .engine = -1};
}

void f8_cudnn_graph_destroy(f8_cudnn_graph *graph) {
	if (!graph)
		return;
	for (uint32_t i = graph->n_descriptors; i-- > 0;)
		f8_cuda_api.cudnnBackendDestroyDescriptor(graph->descriptors[i]);
	f8_free(graph->descriptors);
	graph->descriptors = NULL;
	graph->n_descriptors = graph->cap_descriptors = 0;
	graph->plan = NULL;
}

f8_cudnn_tensor f8_cudnn_tensor_make(f8_cudnn_graph *graph, int64_t uid, cudnnDataType_t type,
				     const int64_t *dims, const int64_t *strides, bool is_virtual) {
	cudnnBackendDescriptor_t tensor = MAKE(graph, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
	int64_t alignment = 16;
	bool by_value = false;
	SET(graph, tensor, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
	SET(graph, tensor, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
	SET(graph, tensor, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
	SET(graph, tensor, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
	SET(graph, tensor, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
	SET(graph, tensor, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
	SET(graph, tensor, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
	finalize(graph, tensor, "tensor");
	return graph->status ? NULL : tensor;
}

f8_cudnn_tensor f8_cudnn_virtual(f8_cudnn_graph *graph, cudnnDataType_t type, const int64_t *dims,
				 const int64_t *strides) {
	return f8_cudnn_tensor_make(graph, graph->next_virtual++, type, dims, strides, true);
}

f8_cudnn_tensor f8_cudnn_scalar(f8_cudnn_graph *graph, int64_t uid, cudnnDataType_t type,
				const void *host) {
	static const int64_t ones[4] = {1, 1, 1, 1};
	cudnnBackendDescriptor_t tensor = MAKE(graph, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
	int64_t alignment = 16;
	bool is_virtual = false, by_value = true;
	SET(graph, tensor, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
	SET(graph, tensor, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, ones);
	SET(graph, tensor, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, ones);
	SET(graph, tensor, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
	SET(graph, tensor, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
	SET(graph, tensor, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
	SET(graph, tensor, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
	finalize(graph, tensor, "by-value tensor");
	if (graph->status)
		return NULL;
	f8_cudnn_bind(graph, uid, F8_CUDNN_BIND_HOST, 0, 0);
	graph->bindings[graph->n_bindings - 1].host = host;
	return tensor;
}

void f8_cudnn_bind(f8_cudnn_graph *graph, int64_t uid, f8_cudnn_binding_kind kind,
		   uint32_t index, uint64_t offset) {
	if (graph->status)
		return;
	if (graph->n_bindings == F8_CUDNN_MAX_BINDINGS) {
		graph->status = f8_diag_set(graph->diag, F8_ERR_INVALID,
					    "%s: its cuDNN graph has more than %d tensors in memory",
					    graph->node, F8_CUDNN_MAX_BINDINGS);
		return;
	}
	graph->bindings[graph->n_bindings++] =
		(f8_cudnn_binding){.uid = uid, .kind = kind, .index = index, .offset = offset};
}

static void add_op(f8_cudnn_graph *graph, cudnnBackendDescriptor_t op) {
	if (graph->status)
		return;
	if (graph->n_ops == F8_CUDNN_MAX_OPS) {
		graph->status = f8_diag_set(graph->diag, F8_ERR_INVALID,
					    "%s: its cuDNN graph has more than %d nodes", graph->node,
					    F8_CUDNN_MAX_OPS);
		return;
	}
	graph->ops[graph->n_ops++] = op;
}

f8_cudnn_tensor f8_cudnn_pointwise(f8_cudnn_graph *graph, cudnnPointwiseMode_t mode,
				   cudnnDataType_t precision, int64_t axis, f8_cudnn_tensor x,
				   f8_cudnn_tensor b, f8_cudnn_tensor t, f8_cudnn_tensor y) {
	cudnnBackendDescriptor_t pointwise = MAKE(graph, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
	SET(graph, pointwise, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
	SET(graph, pointwise, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &precision);
	if (axis >= 0)
		SET(graph, pointwise, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
	finalize(graph, pointwise, "pointwise");
	cudnnBackendDescriptor_t op = MAKE(graph, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
	SET(graph, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
	    &pointwise);
	SET(graph, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
	if (b)
		SET(graph, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
		    &b);
	if (t)
		SET(graph, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
		    &t);
	SET(graph, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
	finalize(graph, op, "pointwise operation");
	add_op(graph, op);
	return graph->status ? NULL : y;
}

void f8_cudnn_matmul(f8_cudnn_graph *graph, f8_cudnn_tensor a, f8_cudnn_tensor b,
		     f8_cudnn_tensor c, f8_cudnn_tensor m_override, f8_cudnn_tensor n_override,
		     f8_cudnn_tensor k_override) {
	cudnnBackendDescriptor_t matmul = MAKE(graph, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
	cudnnDataType_t compute = CUDNN_DATA_FLOAT;
	SET(graph, matmul, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
	finalize(graph, matmul, "matmul");
	cudnnBackendDescriptor_t op = MAKE(graph, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
	SET(graph, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
	SET(graph, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
	SET(graph, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
	SET(graph, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &matmul);
	if (m_override)
		SET(graph, op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC,
		    CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m_override);
	if (n_override)
		SET(graph, op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC,
		    CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n_override);
	if (k_override)
		SET(graph, op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC,
		    CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &k_override);
	finalize(graph, op, "matmul operation");
	add_op(graph, op);
}

void f8_cudnn_reduction(f8_cudnn_graph *graph, cudnnReduceTensorOp_t operation,
			f8_cudnn_tensor x, f8_cudnn_tensor y) {
	cudnnBackendDescriptor_t reduction = MAKE(graph, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
	cudnnDataType_t compute = CUDNN_DATA_FLOAT;
	SET(graph, reduction, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
	SET(graph, reduction, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1,
	    &operation);
	finalize(graph, reduction, "reduction");
	cudnnBackendDescriptor_t op = MAKE(graph, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
	SET(graph, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
	SET(graph, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
	SET(graph, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
	    &reduction);
	finalize(graph, op, "reduction operation");
	add_op(graph, op);
}

void f8_cudnn_reshape(f8_cudnn_graph *graph, f8_cudnn_tensor x, f8_cudnn_tensor y) {
	cudnnBackendDescriptor_t op = MAKE(graph, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
	SET(graph, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
	SET(graph, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
	finalize(graph, op, "reshape operation");
	add_op(graph, op);
}

/* A query of one attribute of `descriptor` into `values` (up to `capacity`), the count into
 * *count. */
static void get(f8_cudnn_graph *graph, cudnnBackendDescriptor_t descriptor,
		cudnnBackendAttributeName_t attribute, cudnnBackendAttributeType_t type,
		int64_t capacity, int64_t *count, void *values, const char *what) {
	if (graph->status)
		return;
	char call[96];
	snprintf(call, sizeof call, "cudnnBackendGetAttribute(%s)", what);
	check(graph, f8_cuda_api.cudnnBackendGetAttribute(descriptor, attribute, type, capacity,
							  count, values),
	      call);
}

/* Whether engine config `config` may be used: its engine and notes read, and with
 * `deterministic` none of them NONDETERMINISTIC. The engine's global index into *engine. */
static bool config_allowed(f8_cudnn_graph *graph, cudnnBackendDescriptor_t config,
			   bool deterministic, int64_t *engine_index) {
	cudnnBackendDescriptor_t engine = MAKE(graph, CUDNN_BACKEND_ENGINE_DESCRIPTOR);
	int64_t count = 0;
	get(graph, config, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count,
	    &engine, "ENGINECFG_ENGINE");
	get(graph, engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &count, engine_index,
	    "ENGINE_GLOBAL_INDEX");
	cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
	int64_t n_notes = 0;
	get(graph, engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
	    CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n_notes, notes, "ENGINE_NUMERICAL_NOTE");
	if (graph->status)
		return false;
	for (int64_t i = 0; deterministic && i < n_notes; i++)
		if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC)
			return false;
	return true;
}

f8_status f8_cudnn_graph_plan(f8_cudnn_graph *graph, bool deterministic) {
	cudnnBackendDescriptor_t operations = MAKE(graph, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
	SET(graph, operations, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &graph->handle);
	SET(graph, operations, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
	    graph->n_ops, graph->ops);
	finalize(graph, operations, "operation graph");
	int64_t count = 0;
	get(graph, operations, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64, 1,
	    &count, &graph->engines_in_graph, "OPERATIONGRAPH_ENGINE_GLOBAL_COUNT");

	cudnnBackendDescriptor_t heuristics = MAKE(graph, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
	cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A; // TransformerEngine's choice
	SET(graph, heuristics, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR,
	    1, &operations);
	SET(graph, heuristics, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
	finalize(graph, heuristics, "engine heuristics");
	// The results twice: their count, then that many engine configs made beforehand
	// (cudnn_frontend_Heuristics.h).
	int64_t n_configs = 0;
	get(graph, heuristics, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
	    &n_configs, NULL, "ENGINEHEUR_RESULTS count");
	if (graph->status)
		return graph->status;
	cudnnBackendDescriptor_t *configs = NULL;
	if (n_configs > 0) {
		configs = f8_calloc((size_t)n_configs, sizeof *configs);
		if (!configs)
			return graph->status = f8_diag_set(graph->diag, F8_ERR_NOMEM,
							   "%s: out of memory choosing its engine",
							   graph->node);
		for (int64_t i = 0; i < n_configs; i++)
			configs[i] = MAKE(graph, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
		get(graph, heuristics, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
		    n_configs, &n_configs, configs, "ENGINEHEUR_RESULTS");
	}
	graph->engine_configs = n_configs;

	// The first config whose plan finalizes, as cudnn-frontend's check_support and build_plans
	// do; the first refusal is kept for the message when none does.
	char refusal[400] = "";
	int64_t skipped = 0;
	for (int64_t i = 0; !graph->status && !graph->plan && i < n_configs; i++) {
		int64_t engine = -1;
		if (!config_allowed(graph, configs[i], deterministic, &engine)) {
			skipped += !graph->status;
			continue;
		}
		cudnnBackendDescriptor_t plan = MAKE(graph, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
		SET(graph, plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1,
		    &graph->handle);
		SET(graph, plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR,
		    1, &configs[i]);
		if (graph->status)
			break;
		cudnnStatus_t result = f8_cuda_api.cudnnBackendFinalize(plan);
		if (result != CUDNN_STATUS_SUCCESS) {
			if (!refusal[0]) {
				char last[256] = "";
				f8_cuda_api.cudnnGetLastErrorString(last, sizeof last);
				snprintf(refusal, sizeof refusal, "engine %lld: %s: %s",
					 (long long)engine, f8_cuda_api.cudnnGetErrorString(result),
					 last[0] ? last : "(no further text)");
			}
			continue;
		}
		int64_t workspace = 0;
		get(graph, plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &count,
		    &workspace, "EXECUTION_PLAN_WORKSPACE_SIZE");
		graph->plan = plan;
		graph->engine = engine;
		graph->engine_choice = i;
		graph->engine_workspace = workspace > 0 ? (uint64_t)workspace : 0;
	}
	f8_free(configs);
	if (graph->status || graph->plan)
		return graph->status;
	char skipped_text[64] = "";
	if (skipped)
		snprintf(skipped_text, sizeof skipped_text, ", %lld of them skipped as NONDETERMINISTIC",
			 (long long)skipped);
	graph->status = f8_diag_set(
		graph->diag, F8_ERR_UNSUPPORTED,
		"%s: no cuDNN engine runs its graph: heuristics (mode A) gave %lld engine config(s)%s "
		"of the %lld engine(s) cuDNN has for the graph%s%s [%s; cuDNN %s]",
		graph->node, (long long)n_configs, skipped_text, (long long)graph->engines_in_graph,
		refusal[0] ? "; the first refused: " : "", refusal, graph->shape,
		f8_cudnn_version_text());
	if (skipped && skipped == n_configs)
		f8_diag_hint(graph->diag, "run without the deterministic option, or with a shape "
					  "whose deterministic engine exists");
	else
		f8_diag_hint(graph->diag, "CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr in the "
					  "environment makes cuDNN print its reasons");
	return graph->status;
}

void f8_cudnn_graph_describe(const f8_cudnn_graph *graph, char *out, size_t size) {
	if (!graph->plan) {
		snprintf(out, size, "no plan");
		return;
	}
	snprintf(out, size,
		 "engine %lld (config %lld of %lld from heuristics mode A, %lld engines for the "
		 "graph), workspace %llu bytes",
		 (long long)graph->engine, (long long)graph->engine_choice + 1,
		 (long long)graph->engine_configs, (long long)graph->engines_in_graph,
		 (unsigned long long)graph->engine_workspace);
}

f8_status f8_cudnn_graph_execute(f8_cudnn_graph *graph, const CUdeviceptr *inputs,
				 const CUdeviceptr *outputs, CUdeviceptr workspace,
				 uint64_t engine_offset, f8_diag *diag) {
	int64_t uids[F8_CUDNN_MAX_BINDINGS];
	void *pointers[F8_CUDNN_MAX_BINDINGS];
	for (uint32_t i = 0; i < graph->n_bindings; i++) {
		const f8_cudnn_binding *binding = &graph->bindings[i];
		CUdeviceptr address = 0;
		const char *what = "";
		switch (binding->kind) {
		case F8_CUDNN_BIND_INPUT: // a part of a packed tensor at its offset
			address = inputs[binding->index] ? inputs[binding->index] + binding->offset : 0;
			what = "input";
			break;
		case F8_CUDNN_BIND_OUTPUT:
			address = outputs[binding->index] ? outputs[binding->index] + binding->offset
							  : 0;
			what = "output";
			break;
		case F8_CUDNN_BIND_WORKSPACE:
			address = workspace + binding->offset;
			what = "workspace tensor";
			break;
		case F8_CUDNN_BIND_HOST:
			break;
		}
		uids[i] = binding->uid;
		if (binding->kind == F8_CUDNN_BIND_HOST) {
			pointers[i] = (void *)binding->host;
			continue;
		}
		if (!address || address % 16 != 0)
			return f8_diag_set(diag, F8_ERR_ARGUMENT,
					   "%s: its %s %u is at %#llx, %s", graph->node, what,
					   binding->index, (unsigned long long)address,
					   address ? "not 16-byte aligned as cuDNN's tensors are declared"
						   : "which is no address");
		pointers[i] = (void *)(uintptr_t)address;
	}
	void *engine_workspace = graph->engine_workspace
					 ? (void *)(uintptr_t)(workspace + engine_offset) : NULL;
	// A variant pack per run: cheap next to the kernels, and the addresses are the run's.
	f8_cudnn_graph run = *graph;
	run.status = F8_OK;
	run.diag = diag;
	run.descriptors = NULL;
	run.n_descriptors = run.cap_descriptors = 0;
	cudnnBackendDescriptor_t pack = MAKE(&run, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
	SET(&run, pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, graph->n_bindings, uids);
	SET(&run, pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, graph->n_bindings,
	    pointers);
	SET(&run, pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &engine_workspace);
	finalize(&run, pack, "variant pack");
	if (!run.status)
		check(&run, f8_cuda_api.cudnnBackendExecute(graph->handle, graph->plan, pack),
		      "cudnnBackendExecute");
	f8_status status = run.status;
	f8_cudnn_graph_destroy(&run);
	if (status == F8_ERR_UNSUPPORTED) { // what cuDNN refuses at run time is a failed run
		status = F8_ERR_IO;
		if (diag)
			diag->status = status;
	}
	return status;
}
