/*
 * The compile driver's value evaluator (tools/evaluate.h).
 */
#include "tools/evaluate.h"

#include <string.h> // strcmp

#include "ir/alloc.h"          // f8_calloc, f8_free, f8_malloc
#include "runtime/cpu/kernels.h" // f8_cpu_kernel_get, f8_cpu_kernel_call
#include "runtime/tensor.h"    // f8_rt_tensor
#include "runtime/train.h"     // f8_train_fills_input, f8_train_fill_input

/* The dims of a value whose sizes are all bound, into dims; false when one is not. */
static bool concrete(const f8_type *type, int64_t *dims, uint64_t *bytes) {
	uint64_t n = 1;
	for (int d = 0; d < type->shape.rank; d++) {
		if (!f8_dim_is_const(type->shape.dims[d]))
			return false;
		dims[d] = f8_dim_value(type->shape.dims[d]);
		n *= (uint64_t)dims[d];
	}
	*bytes = n * f8_dtype_get_info(type->dtype)->bytes;
	return true;
}

/* Marks the value's cone: the nodes (by position in the program) that compute it, and checks
 * its leaves. */
static f8_status cone(const f8_tool_evaluator *e, const f8_graph *graph, f8_value_id value,
		      bool *needed, bool *in_cone, const char **assumed, f8_diag *diag) {
	needed[value] = true;
	uint64_t total = 0;
	for (uint32_t p = graph->n_order; p-- > 0;) {
		const f8_node *node = &graph->nodes[graph->order[p]];
		for (uint32_t o = 0; o < node->n_outputs && !in_cone[p]; o++)
			in_cone[p] = needed[node->outputs[o]];
		for (uint32_t i = 0; in_cone[p] && i < node->n_inputs; i++)
			if (node->inputs[i] != F8_NONE)
				needed[node->inputs[i]] = true;
		for (uint32_t a = 0; in_cone[p] && a < node->n_attrs; a++) {
			const f8_attr *attr = &node->attrs[a];
			bool bound = attr->kind != F8_ATTR_DIM || f8_dim_is_const(attr->dim);
			for (uint32_t i = 0; attr->kind == F8_ATTR_DIMS && i < attr->dims.n; i++)
				bound &= f8_dim_is_const(attr->dims.items[i]);
			if (!bound)
				return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "a size of its %s is not "
						   "bound", f8_op_name(node->op));
		}
	}
	for (uint32_t v = 0; v < graph->n_values; v++) {
		if (!needed[v])
			continue;
		const f8_value *x = &graph->values[v];
		int64_t dims[F8_MAX_RANK];
		uint64_t bytes;
		if (!concrete(&x->type, dims, &bytes))
			return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "the size of %%%s is not bound",
					   x->name);
		total += bytes;
		if (x->producer != F8_NONE)
			continue;
		if (x->role != F8_ROLE_INPUT)
			return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "it reads %s %%%s",
					   f8_role_name(x->role), x->name);
		if (!e->fill_training_inputs || !f8_train_fills_input(x->name))
			return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "it reads the input %%%s",
					   x->name);
		*assumed = "attention_mask all ones and position_ids 0..seq-1, as f8c train feeds "
			   "them";
	}
	if (total > F8_TOOL_EVALUATE_MAX_BYTES)
		return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "its computation takes %.1f GiB, more "
				   "than the compiler evaluates", (double)total / (1 << 30));
	return F8_OK;
}

static f8_status evaluate(const f8_value_evaluator *self, const f8_graph *graph,
			  f8_value_id value, double **values, const char **assumed,
			  f8_diag *diag) {
	const f8_tool_evaluator *e = (const f8_tool_evaluator *)self;
	*values = NULL;
	*assumed = "";
	bool *needed = f8_calloc(graph->n_values + 1, sizeof *needed);
	bool *in_cone = f8_calloc(graph->n_order + 1, sizeof *in_cone);
	uint32_t *last_use = f8_calloc(graph->n_values + 1, sizeof *last_use);
	f8_rt_tensor *tensors = f8_calloc(graph->n_values + 1, sizeof *tensors);
	int64_t *symbols = f8_calloc(graph->n_symbols + 1, sizeof *symbols);
	f8_status status = needed && in_cone && last_use && tensors && symbols
				   ? cone(e, graph, value, needed, in_cone, assumed, diag)
				   : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	for (uint32_t s = 0; symbols && s < graph->n_symbols; s++)
		symbols[s] = 1; // every size in the cone is a constant: none is read
	// The leaves, and where each value is read last, so that its tensor goes then.
	for (uint32_t v = 0; !status && v < graph->n_values; v++) {
		const f8_value *x = &graph->values[v];
		int64_t dims[F8_MAX_RANK];
		uint64_t bytes;
		if (!needed[v] || x->producer != F8_NONE)
			continue;
		concrete(&x->type, dims, &bytes);
		status = f8_rt_tensor_create(x->type.dtype, x->type.shape.rank, dims, &tensors[v],
					     diag);
		if (!status)
			status = f8_train_fill_input(x->name, &tensors[v], diag);
	}
	for (uint32_t p = 0; !status && p < graph->n_order; p++) {
		const f8_node *node = &graph->nodes[graph->order[p]];
		for (uint32_t i = 0; in_cone[p] && i < node->n_inputs; i++)
			if (node->inputs[i] != F8_NONE)
				last_use[node->inputs[i]] = p;
	}
	last_use[value] = graph->n_order; // kept to the end
	for (uint32_t p = 0; !status && p < graph->n_order; p++) {
		if (!in_cone[p])
			continue;
		const f8_node *node = &graph->nodes[graph->order[p]];
		const f8_rt_tensor *inputs[256];
		f8_rt_tensor outputs[16] = {0};
		if (node->n_inputs > 256 || node->n_outputs > 16) {
			status = f8_diag_set(diag, F8_ERR_UNSUPPORTED, "it computes a %s of %u inputs",
					     f8_op_name(node->op), node->n_inputs);
			break;
		}
		for (uint32_t i = 0; i < node->n_inputs; i++)
			inputs[i] = node->inputs[i] == F8_NONE ? NULL : &tensors[node->inputs[i]];
		for (uint32_t o = 0; !status && o < node->n_outputs; o++) {
			const f8_type *type = &graph->values[node->outputs[o]].type;
			int64_t dims[F8_MAX_RANK];
			uint64_t bytes;
			concrete(type, dims, &bytes);
			status = f8_rt_tensor_create(type->dtype, type->shape.rank, dims, &outputs[o],
						     diag);
		}
		f8_cpu_kernel_call call = {.graph = graph, .node = node, .symbol_values = symbols,
					   .inputs = inputs, .outputs = outputs};
		if (!status)
			status = f8_cpu_kernel_get(node->op)(&call, diag);
		for (uint32_t o = 0; o < node->n_outputs; o++) {
			if (!status && needed[node->outputs[o]])
				tensors[node->outputs[o]] = outputs[o];
			else
				f8_rt_tensor_destroy(&outputs[o]);
		}
		for (uint32_t i = 0; i < node->n_inputs; i++)
			if (node->inputs[i] != F8_NONE && last_use[node->inputs[i]] == p)
				f8_rt_tensor_destroy(&tensors[node->inputs[i]]);
	}
	int64_t n = status ? 0 : f8_rt_tensor_numel(&tensors[value]);
	if (!status && !(*values = f8_malloc((size_t)(n ? n : 1) * sizeof **values)))
		status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	for (int64_t i = 0; !status && i < n; i++)
		(*values)[i] = f8_rt_tensor_get(&tensors[value], i);
	for (uint32_t v = 0; tensors && v < graph->n_values; v++)
		f8_rt_tensor_destroy(&tensors[v]);
	f8_free(needed);
	f8_free(in_cone);
	f8_free(last_use);
	f8_free(tensors);
	f8_free(symbols);
	return status;
}

f8_tool_evaluator f8_tool_evaluator_make(bool training) {
	return (f8_tool_evaluator){.base = {.evaluate = evaluate}, .fill_training_inputs = training};
}
