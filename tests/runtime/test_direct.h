/*
 * A node's reference kernel run directly, outside the executor, on the values an executor's run
 * gave its inputs, into outputs filled with garbage first: the executor hands a kernel zeroed
 * outputs, so only a direct run shows what a kernel writes itself (the padding a grouped GEMM or
 * cast must zero). Header-only, like tests/test_support.h: each test is one executable of its
 * own.
 */
#ifndef F8_TESTS_RUNTIME_TEST_DIRECT_H
#define F8_TESTS_RUNTIME_TEST_DIRECT_H

#include "runtime/cpu/executor.h" // f8_cpu_executor_value, f8_cpu_executor_dims
#include "runtime/cpu/kernels.h"  // f8_cpu_kernel_get, f8_cpu_kernel_call

enum { TEST_DIRECT_MAX = 8 }; // the inputs and the outputs a node may have here

/* Runs `node` of `graph` on `executor`'s values of its inputs into outputs[] (node->n_outputs
 * of them, at most TEST_DIRECT_MAX, created and filled with 7; the caller destroys them). */
static inline f8_status test_run_direct(const f8_graph *graph, const f8_cpu_executor *executor,
					const f8_node *node, f8_rt_tensor *outputs,
					f8_diag *diag) {
	const f8_rt_tensor *inputs[TEST_DIRECT_MAX] = {0};
	if (node->n_inputs > TEST_DIRECT_MAX || node->n_outputs > TEST_DIRECT_MAX)
		return f8_diag_set(diag, F8_ERR_INVALID, "a node of more than %d operands",
				   TEST_DIRECT_MAX);
	for (uint32_t i = 0; i < node->n_inputs; i++)
		inputs[i] = f8_cpu_executor_value(executor, node->inputs[i]);
	for (uint32_t i = 0; i < node->n_outputs; i++) {
		const f8_type *type = &graph->values[node->outputs[i]].type;
		int64_t dims[F8_MAX_RANK];
		f8_cpu_executor_dims(executor, type, dims);
		f8_status status = f8_rt_tensor_create(type->dtype, type->shape.rank, dims,
						       &outputs[i], diag);
		if (status)
			return status;
		for (int64_t j = 0; j < f8_rt_tensor_numel(&outputs[i]); j++)
			f8_rt_tensor_set(&outputs[i], j, 7);
	}
	f8_cpu_kernel_call call = {.graph = graph, .node = node, .inputs = inputs,
				   .outputs = outputs};
	return f8_cpu_kernel_get(node->op)(&call, diag);
}

#endif
