/*
 * The CPU executor: program order, one kernel call per node (per fused group: its generated
 * kernel), intermediate values freed after their last use, updates applied when a run has
 * succeeded.
 */
#include "runtime/cpu/executor.h" // f8_cpu_executor

#include <stdio.h>  // snprintf
#include <string.h> // memcpy, memset

#include "ir/alloc.h"              // f8_calloc, f8_free
#include "runtime/cpu/generated.h" // f8_cpu_generated_create, f8_cpu_generated_run
#include "runtime/cpu/kernels.h"   // f8_cpu_kernel_get, f8_cpu_kernel_call

/* The run's plan: the nodes to run, and for each value the position of its last read in the
 * run (KEPT: kept after the run: an output, an update's source, or keep_all; NOT_READ). */
#define KEPT UINT32_MAX
#define NOT_READ (UINT32_MAX - 1)
typedef struct run_plan {
	f8_node_id *nodes;
	uint32_t n_nodes;
	uint32_t *last_read; // (n_values)
} run_plan;

struct f8_cpu_executor {
	const f8_graph *graph;
	int64_t *symbol_values; // (graph->n_symbols)
	f8_rt_tensor *tensors;  // (graph->n_values) leaves for the executor's life, others per run
	bool *made;             // (graph->n_values) made by the last run and still held
	bool keep_all;
	bool freeze_scaling; // f8_cpu_executor_freeze_scaling
	bool interpreter;    // f8_cpu_executor_use_interpreter
	// The fused groups' generated kernels, compiled by the first run that runs a group.
	f8_cpu_generated *generated;
	// Scratch for one node's operands, sized by the largest arity in the graph (a GlobalNorm
	// reads every parameter's gradient: hundreds for a large model).
	const f8_rt_tensor **inputs;
	f8_rt_tensor *outputs;
	// The plan of each phase mask, made by its first run: every micro-batch runs the same.
	run_plan plans[F8_PHASES_ALL + 1];
	// Buffers of freed values, kept for the next value of the same size: a step frees and
	// makes the same sizes over and over, and going back to the system each time costs
	// page faults that take longer than the arithmetic (until the slab planner comes).
	struct spare {
		void *data;
		size_t n_bytes;
	} *spares;
	uint32_t n_spares, cap_spares;
};

static void forget_plans(f8_cpu_executor *executor) {
	for (uint32_t i = 0; i <= F8_PHASES_ALL; i++) {
		f8_free(executor->plans[i].nodes);
		f8_free(executor->plans[i].last_read);
		executor->plans[i] = (run_plan){0};
	}
}

/* Frees `tensor`'s data into the spares (or to the system when they cannot grow). */
static void recycle(f8_cpu_executor *executor, f8_rt_tensor *tensor) {
	if (tensor->owned && tensor->data) {
		if (executor->n_spares == executor->cap_spares) {
			uint32_t cap = executor->cap_spares ? 2 * executor->cap_spares : 64;
			struct spare *grown = f8_realloc(executor->spares, cap * sizeof *grown);
			if (grown) {
				executor->spares = grown;
				executor->cap_spares = cap;
			}
		}
		if (executor->n_spares < executor->cap_spares) {
			executor->spares[executor->n_spares++] =
				(struct spare){.data = tensor->data, .n_bytes = tensor->n_bytes};
			*tensor = (f8_rt_tensor){0};
			return;
		}
	}
	f8_rt_tensor_destroy(tensor);
}

void f8_cpu_executor_dims(const f8_cpu_executor *executor, const f8_type *type, int64_t *dims) {
	for (int i = 0; i < type->shape.rank; i++)
		f8_dim_evaluate(type->shape.dims[i], executor->symbol_values, &dims[i]);
}

/* Checks that every value's dims evaluate to sizes (>= 0, no overflow) under the binding. */
static f8_status check_sizes(const f8_cpu_executor *executor, f8_diag *diag) {
	const f8_graph *graph = executor->graph;
	for (uint32_t v = 0; v < graph->n_values; v++) {
		const f8_type *type = &graph->values[v].type;
		for (int i = 0; i < type->shape.rank; i++) {
			int64_t size = 0;
			bool fits = f8_dim_evaluate(type->shape.dims[i], executor->symbol_values, &size);
			if (!fits || size < 0)
				return f8_diag_set(diag, F8_ERR_ARGUMENT, "with these sizes, dim %d of "
						   "%%%s is %s", i, graph->values[v].name,
						   fits ? "negative" : "too large");
		}
	}
	return F8_OK;
}

/* Allocates value v's tensor, zeroed, with its type's dims: a spare of its size, or new. */
static f8_status allocate(f8_cpu_executor *executor, f8_value_id v, f8_diag *diag) {
	const f8_type *type = &executor->graph->values[v].type;
	int64_t dims[F8_MAX_RANK];
	f8_cpu_executor_dims(executor, type, dims);
	size_t n_bytes = f8_dtype_get_info(type->dtype)->bytes; // sizes checked at creation
	for (int i = 0; i < type->shape.rank; i++)
		n_bytes *= (size_t)dims[i];
	for (uint32_t i = executor->n_spares; n_bytes && i-- > 0;) {
		if (executor->spares[i].n_bytes != n_bytes)
			continue;
		f8_rt_tensor *tensor = &executor->tensors[v];
		*tensor = (f8_rt_tensor){.dtype = type->dtype, .rank = type->shape.rank,
					 .data = executor->spares[i].data, .n_bytes = n_bytes,
					 .owned = true};
		memcpy(tensor->dims, dims, sizeof dims);
		memset(tensor->data, 0, n_bytes);
		executor->spares[i] = executor->spares[--executor->n_spares];
		return F8_OK;
	}
	f8_status status = f8_rt_tensor_create(type->dtype, type->shape.rank, dims,
					       &executor->tensors[v], diag);
	if (status && diag) {
		// The cause is copied out first: formatting diag->message into itself overlaps.
		const char *reason = status == F8_ERR_NOMEM ? "out of memory" : diag->message;
		char cause[F8_DIAG_MESSAGE_MAX];
		snprintf(cause, sizeof cause, "%s", reason);
		f8_diag_set(diag, status, "cannot allocate %%%s: %s", executor->graph->values[v].name,
			    cause);
	}
	return status;
}

f8_status f8_cpu_executor_create(const f8_graph *graph, const int64_t *symbol_values,
				 f8_cpu_executor **out, f8_diag *diag) {
	*out = NULL;
	for (uint32_t s = 0; s < graph->n_symbols; s++)
		if (symbol_values[s] < 1)
			return f8_diag_set(diag, F8_ERR_ARGUMENT, "size %s is %lld; sizes must be at "
					   "least 1", graph->symbols[s], (long long)symbol_values[s]);
	f8_cpu_executor *executor = f8_calloc(1, sizeof *executor);
	if (!executor)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	executor->graph = graph;
	executor->symbol_values = f8_calloc(graph->n_symbols ? graph->n_symbols : 1, sizeof(int64_t));
	executor->tensors = f8_calloc(graph->n_values ? graph->n_values : 1, sizeof(f8_rt_tensor));
	executor->made = f8_calloc(graph->n_values ? graph->n_values : 1, sizeof(bool));
	if (!executor->symbol_values || !executor->tensors || !executor->made) {
		f8_cpu_executor_destroy(executor);
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	}
	uint32_t max_inputs = 1, max_outputs = 1;
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		max_inputs = node->n_inputs > max_inputs ? node->n_inputs : max_inputs;
		max_outputs = node->n_outputs > max_outputs ? node->n_outputs : max_outputs;
	}
	executor->inputs = f8_calloc(max_inputs, sizeof *executor->inputs);
	executor->outputs = f8_calloc(max_outputs, sizeof *executor->outputs);
	if (!executor->inputs || !executor->outputs) {
		f8_cpu_executor_destroy(executor);
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	}
	if (graph->n_symbols)
		memcpy(executor->symbol_values, symbol_values, graph->n_symbols * sizeof(int64_t));
	f8_status status = check_sizes(executor, diag);
	for (uint32_t i = 0; !status && i < graph->n_inputs; i++)
		status = allocate(executor, graph->inputs[i], diag);
	if (status) {
		f8_cpu_executor_destroy(executor);
		return status;
	}
	*out = executor;
	return F8_OK;
}

/* Frees what the last run made (leaves stay). */
static void release_run(f8_cpu_executor *executor) {
	for (uint32_t v = 0; v < executor->graph->n_values; v++) {
		if (executor->made[v]) {
			recycle(executor, &executor->tensors[v]);
			executor->made[v] = false;
		}
	}
}

void f8_cpu_executor_destroy(f8_cpu_executor *executor) {
	if (!executor)
		return;
	if (executor->tensors)
		for (uint32_t v = 0; v < executor->graph->n_values; v++)
			f8_rt_tensor_destroy(&executor->tensors[v]);
	for (uint32_t i = 0; i < executor->n_spares; i++)
		f8_free(executor->spares[i].data);
	f8_free(executor->spares);
	forget_plans(executor);
	f8_cpu_generated_destroy(executor->generated);
	f8_free(executor->inputs);
	f8_free(executor->outputs);
	f8_free(executor->symbol_values);
	f8_free(executor->tensors);
	f8_free(executor->made);
	f8_free(executor);
}

void f8_cpu_executor_keep_all(f8_cpu_executor *executor, bool keep) {
	if (keep != executor->keep_all)
		forget_plans(executor); // what a run keeps is part of its plan
	executor->keep_all = keep;
}

void f8_cpu_executor_use_interpreter(f8_cpu_executor *executor, bool interpreter) {
	executor->interpreter = interpreter;
}

void f8_cpu_executor_freeze_scaling(f8_cpu_executor *executor, bool freeze) {
	executor->freeze_scaling = freeze;
}

static bool is_leaf(const f8_graph *graph, f8_value_id v) {
	return graph->values[v].producer == F8_NONE;
}

f8_rt_tensor *f8_cpu_executor_leaf(f8_cpu_executor *executor, f8_value_id value) {
	if (value >= executor->graph->n_values || !is_leaf(executor->graph, value))
		return NULL;
	return &executor->tensors[value];
}

const f8_rt_tensor *f8_cpu_executor_value(const f8_cpu_executor *executor, f8_value_id value) {
	if (value >= executor->graph->n_values)
		return NULL;
	if (is_leaf(executor->graph, value) || executor->made[value])
		return &executor->tensors[value];
	return NULL;
}


/*
 * Updates apply when a run ends, so within one run a leaf keeps its old contents after the
 * source of its update is made: a node reading it then would compute with stale state (an
 * optimizer reading the gradient accumulator in the same run that added to it). Such a run is
 * refused; the phases run apart (fwd|bwd, then opt) read what they should.
 */
static f8_status check_stale_reads(const f8_graph *graph, const run_plan *plan, f8_diag *diag) {
	uint32_t n = graph->n_values ? graph->n_values : 1;
	f8_value_id *target_of = f8_malloc(n * sizeof *target_of);
	bool *stale = f8_calloc(n, sizeof *stale);
	f8_status status = target_of && stale ? F8_OK
					      : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	for (uint32_t v = 0; !status && v < graph->n_values; v++)
		target_of[v] = F8_NONE;
	for (uint32_t i = 0; !status && i < graph->n_updates; i++)
		target_of[graph->updates[i].source] = graph->updates[i].target;
	for (uint32_t p = 0; !status && p < plan->n_nodes; p++) {
		const f8_node *node = &graph->nodes[plan->nodes[p]];
		for (uint32_t j = 0; !status && j < node->n_inputs; j++) {
			f8_value_id v = node->inputs[j];
			if (v == F8_NONE || !stale[v])
				continue;
			f8_diag_set(diag, F8_ERR_ARGUMENT, "input %u (%%%s) is read after its update's "
				    "source was made in the same run, so it would be stale", j,
				    graph->values[v].name);
			f8_diag_hint(diag, "run the phases that update state apart from the ones that "
				     "read it (a training step: fwd|bwd, then opt)");
			f8_diag_set_node(diag, graph, plan->nodes[p]);
			status = F8_ERR_ARGUMENT;
		}
		for (uint32_t j = 0; j < node->n_outputs; j++)
			if (target_of[node->outputs[j]] != F8_NONE)
				stale[target_of[node->outputs[j]]] = true;
	}
	f8_free(target_of);
	f8_free(stale);
	return status;
}

static f8_status plan_run(const f8_cpu_executor *executor, uint32_t phases, run_plan *plan,
			  f8_diag *diag) {
	const f8_graph *graph = executor->graph;
	plan->nodes = f8_calloc(graph->n_order ? graph->n_order : 1, sizeof(f8_node_id));
	plan->last_read = f8_calloc(graph->n_values ? graph->n_values : 1, sizeof(uint32_t));
	if (!plan->nodes || !plan->last_read)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory planning a run");
	plan->n_nodes = 0;
	for (uint32_t v = 0; v < graph->n_values; v++)
		plan->last_read[v] = NOT_READ;
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		if (!(phases & F8_PHASE_BIT(node->phase)))
			continue;
		for (uint32_t j = 0; j < node->n_inputs; j++)
			if (node->inputs[j] != F8_NONE)
				plan->last_read[node->inputs[j]] = plan->n_nodes;
		plan->nodes[plan->n_nodes++] = graph->order[i];
	}
	for (uint32_t i = 0; i < graph->n_outputs; i++)
		plan->last_read[graph->outputs[i]] = KEPT;
	for (uint32_t i = 0; i < graph->n_updates; i++)
		plan->last_read[graph->updates[i].source] = KEPT;
	if (executor->keep_all)
		for (uint32_t v = 0; v < graph->n_values; v++)
			plan->last_read[v] = KEPT;
	return check_stale_reads(graph, plan, diag);
}

/* Runs node `id` at position `position` of the run: checks its inputs are there, allocates its
 * outputs, calls its kernel, frees the inputs it read last. */
static f8_status run_node(f8_cpu_executor *executor, f8_node_id id, uint32_t position,
			  const run_plan *plan, f8_diag *diag) {
	const f8_graph *graph = executor->graph;
	const f8_node *node = &graph->nodes[id];
	const f8_rt_tensor **inputs = executor->inputs;
	for (uint32_t j = 0; j < node->n_inputs; j++) {
		f8_value_id v = node->inputs[j];
		inputs[j] = v == F8_NONE ? NULL : f8_cpu_executor_value(executor, v);
		if (v != F8_NONE && !inputs[j]) {
			f8_diag_set(diag, F8_ERR_ARGUMENT, "input %u (%%%s) was not computed in this "
				    "run: it is made in phase %s", j, graph->values[v].name,
				    f8_phase_name(graph->nodes[graph->values[v].producer].phase));
			f8_diag_set_node(diag, graph, id);
			return F8_ERR_ARGUMENT;
		}
	}
	for (uint32_t j = 0; j < node->n_outputs; j++) {
		f8_status status = allocate(executor, node->outputs[j], diag);
		if (status)
			return status;
		executor->made[node->outputs[j]] = true;
	}
	// The kernel fills outputs[0..n): gather them, since values are not contiguous.
	f8_rt_tensor *outputs = executor->outputs;
	for (uint32_t j = 0; j < node->n_outputs; j++)
		outputs[j] = executor->tensors[node->outputs[j]];
	f8_cpu_kernel_call call = {.graph = graph, .node = node,
				   .symbol_values = executor->symbol_values, .inputs = inputs,
				   .outputs = outputs};
	f8_status status = f8_cpu_kernel_get(node->op)(&call, diag);
	for (uint32_t j = 0; j < node->n_outputs; j++)
		executor->tensors[node->outputs[j]] = outputs[j];
	if (status) {
		if (diag && !diag->node[0])
			f8_diag_set_node(diag, graph, id);
		return status;
	}
	for (uint32_t j = 0; j < node->n_inputs; j++) {
		f8_value_id v = node->inputs[j];
		if (v != F8_NONE && executor->made[v] && plan->last_read[v] == position) {
			recycle(executor, &executor->tensors[v]);
			executor->made[v] = false;
		}
	}
	// An output nothing reads in this run (a statistic only the backward wants) goes now.
	for (uint32_t j = 0; j < node->n_outputs; j++) {
		f8_value_id v = node->outputs[j];
		if (plan->last_read[v] == NOT_READ) {
			recycle(executor, &executor->tensors[v]);
			executor->made[v] = false;
		}
	}
	return F8_OK;
}

/* Frees value v when position `position` read it last in this run. */
static void release_if_last(f8_cpu_executor *executor, f8_value_id v, uint32_t position,
			    const run_plan *plan) {
	if (v != F8_NONE && executor->made[v] && plan->last_read[v] == position) {
		recycle(executor, &executor->tensors[v]);
		executor->made[v] = false;
	}
}

/*
 * Runs fused group `group`, whose first member stands at `position` of the run, through its
 * generated kernel (compiled by the first call): checks the inputs it reads from outside are
 * there, allocates what it writes, calls it, frees what its members read last. Its members
 * are contiguous in the run (ir/graph.h): their count into *members.
 */
static f8_status run_group(f8_cpu_executor *executor, uint32_t group, uint32_t position,
			   const run_plan *plan, uint32_t *members, f8_diag *diag) {
	const f8_graph *graph = executor->graph;
	*members = 0;
	while (position + *members < plan->n_nodes &&
	       graph->nodes[plan->nodes[position + *members]].group == group)
		(*members)++;
	f8_status status = F8_OK;
	if (!executor->generated &&
	    (status = f8_cpu_generated_create(graph, &executor->generated, diag)))
		return status;
	for (uint32_t m = 0; m < *members; m++) {
		f8_node_id id = plan->nodes[position + m];
		const f8_node *node = &graph->nodes[id];
		for (uint32_t j = 0; j < node->n_inputs; j++) {
			f8_value_id v = node->inputs[j];
			f8_node_id producer = v == F8_NONE ? F8_NONE : graph->values[v].producer;
			if (v == F8_NONE || (producer != F8_NONE && graph->nodes[producer].group == group))
				continue;
			if (!f8_cpu_executor_value(executor, v)) {
				f8_diag_set(diag, F8_ERR_ARGUMENT, "input %u (%%%s) was not computed "
					    "in this run: it is made in phase %s", j,
					    graph->values[v].name,
					    f8_phase_name(graph->nodes[producer].phase));
				f8_diag_set_node(diag, graph, id);
				return F8_ERR_ARGUMENT;
			}
		}
	}
	uint32_t n_outputs;
	const f8_value_id *outputs = f8_cpu_generated_outputs(executor->generated, group, &n_outputs);
	for (uint32_t o = 0; !status && o < n_outputs; o++) {
		status = allocate(executor, outputs[o], diag);
		if (!status)
			executor->made[outputs[o]] = true;
	}
	if (!status)
		status = f8_cpu_generated_run(executor->generated, group, executor->tensors,
					      executor->symbol_values, diag);
	if (status) {
		if (diag && !diag->node[0])
			f8_diag_set_node(diag, graph, plan->nodes[position]);
		return status;
	}
	for (uint32_t m = 0; m < *members; m++) {
		const f8_node *node = &graph->nodes[plan->nodes[position + m]];
		for (uint32_t j = 0; j < node->n_inputs; j++)
			release_if_last(executor, node->inputs[j], position + m, plan);
	}
	for (uint32_t o = 0; o < n_outputs; o++)
		if (plan->last_read[outputs[o]] == NOT_READ) {
			recycle(executor, &executor->tensors[outputs[o]]);
			executor->made[outputs[o]] = false;
		}
	return F8_OK;
}

/* Moves (or, for a value also kept as an output, copies) each made update source into its
 * leaf; a ScalingUpdate's not while scaling is frozen. */
static void apply_updates(f8_cpu_executor *executor) {
	const f8_graph *graph = executor->graph;
	for (uint32_t i = 0; i < graph->n_updates; i++) {
		f8_update update = graph->updates[i];
		if (!executor->made[update.source])
			continue;
		f8_node_id producer = graph->values[update.source].producer;
		if (executor->freeze_scaling && graph->nodes[producer].op == F8_OP_SCALING_UPDATE)
			continue;
		f8_rt_tensor *target = &executor->tensors[update.target];
		f8_rt_tensor *source = &executor->tensors[update.source];
		bool is_output = false;
		for (uint32_t j = 0; j < graph->n_outputs; j++)
			is_output |= graph->outputs[j] == update.source;
		if (is_output || executor->keep_all) {
			memcpy(target->data, source->data, source->n_bytes);
		} else {
			recycle(executor, target);
			*target = *source;
			*source = (f8_rt_tensor){0};
			executor->made[update.source] = false;
		}
	}
}

f8_status f8_cpu_executor_run(f8_cpu_executor *executor, uint32_t phases, f8_diag *diag) {
	release_run(executor);
	run_plan *plan = &executor->plans[phases & F8_PHASES_ALL];
	f8_status status = F8_OK;
	if (!plan->nodes && (status = plan_run(executor, phases & F8_PHASES_ALL, plan, diag))) {
		f8_free(plan->nodes);
		f8_free(plan->last_read);
		*plan = (run_plan){0};
	}
	for (uint32_t i = 0; !status && i < plan->n_nodes;) {
		uint32_t group = executor->graph->nodes[plan->nodes[i]].group;
		if (group == F8_NONE || executor->interpreter || executor->keep_all) {
			status = run_node(executor, plan->nodes[i], i, plan, diag);
			i++;
		} else {
			uint32_t members = 0;
			status = run_group(executor, group, i, plan, &members, diag);
			i += members;
		}
	}
	if (!status)
		apply_updates(executor);
	else
		release_run(executor);
	return status;
}
