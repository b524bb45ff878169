/*
 * The CPU executor (runtime/cpu/executor.h): the core on a CPU backend, values as host tensors.
 */
#include "runtime/cpu/executor.h" // f8_cpu_executor

#include "ir/alloc.h"            // f8_calloc, f8_free
#include "runtime/cpu/backend.h" // f8_cpu_backend_create, f8_cpu_view_tensor

struct f8_cpu_executor {
	f8_backend *backend;
	f8_executor *core;
	f8_rt_tensor *host; // (n_values) the last tensor handed out for each value
};

f8_status f8_cpu_executor_create(const f8_graph *graph, const int64_t *symbol_values,
				 f8_cpu_executor **out, f8_diag *diag) {
	*out = NULL;
	f8_cpu_executor *executor = f8_calloc(1, sizeof *executor);
	if (!executor || !(executor->host = f8_calloc(graph->n_values + 1, sizeof *executor->host))) {
		f8_free(executor);
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	}
	f8_cpu_kernels kernels = f8_cpu_backend_has_generated() ? F8_CPU_KERNELS_GENERATED
							       : F8_CPU_KERNELS_REFERENCE;
	f8_status status = f8_cpu_backend_create(kernels, &executor->backend, diag);
	if (!status)
		status = f8_executor_create(graph, symbol_values, executor->backend, &executor->core,
					    diag);
	if (status) {
		f8_cpu_executor_destroy(executor);
		return status;
	}
	*out = executor;
	return F8_OK;
}

void f8_cpu_executor_destroy(f8_cpu_executor *executor) {
	if (!executor)
		return;
	f8_executor_destroy(executor->core);
	f8_backend_destroy(executor->backend);
	f8_free(executor->host);
	f8_free(executor);
}

f8_executor *f8_cpu_executor_core(const f8_cpu_executor *executor) {
	return executor->core;
}

void f8_cpu_executor_keep_all(f8_cpu_executor *executor, bool keep) {
	f8_executor_keep_all(executor->core, keep);
}

void f8_cpu_executor_use_interpreter(f8_cpu_executor *executor, bool interpreter) {
	if (interpreter || f8_cpu_backend_has_generated())
		f8_cpu_backend_use(executor->backend, interpreter ? F8_CPU_KERNELS_REFERENCE
								  : F8_CPU_KERNELS_GENERATED);
}

void f8_cpu_executor_freeze_scaling(f8_cpu_executor *executor, bool freeze) {
	f8_executor_freeze_scaling(executor->core, freeze);
}

f8_rt_tensor *f8_cpu_executor_leaf(f8_cpu_executor *executor, f8_value_id value) {
	const f8_graph *graph = f8_executor_graph(executor->core);
	if (value >= graph->n_values || graph->values[value].producer != F8_NONE)
		return NULL;
	executor->host[value] = f8_cpu_view_tensor(f8_executor_view(executor->core, value));
	return &executor->host[value];
}

f8_status f8_cpu_executor_run(f8_cpu_executor *executor, uint32_t phases, f8_diag *diag) {
	return f8_executor_run(executor->core, phases, diag);
}

const f8_rt_tensor *f8_cpu_executor_value(const f8_cpu_executor *executor, f8_value_id value) {
	const f8_tensor_view *view = f8_executor_view(executor->core, value);
	if (!view || (!view->buffer && view->n_bytes))
		return NULL;
	executor->host[value] = f8_cpu_view_tensor(view);
	return &executor->host[value];
}

void f8_cpu_executor_dims(const f8_cpu_executor *executor, const f8_type *type, int64_t *dims) {
	f8_executor_dims(executor->core, type, dims);
}
