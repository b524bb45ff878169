/*
 * canonicalize: the first pass. Makes the graph typed and free of dead nodes, so that every
 * later pass can read types and plan only for work that matters.
 *
 * requires: leaves typed; nodes in an order where every value is defined before its use.
 * provides: every value typed; no node whose results nobody reads (side effects excepted).
 *
 * Constant folding (Shape -> Gather -> Concat chains of exported ONNX graphs) joins this pass
 * with the ONNX frontend, which is the first producer of such chains.
 */
#include "passes/canonicalize.h" // f8_pass_canonicalize_run

#include "ir/alloc.h"  // f8_calloc, f8_free
#include "ir/verify.h" // f8_node_infer_types, f8_node_check_output_type

/* Infers the output types of every node in program order. */
static f8_status infer_types(f8_graph *graph, f8_diag *diag) {
	f8_type *types = NULL;
	uint32_t cap = 0;
	f8_status status = F8_OK;
	for (uint32_t position = 0; !status && position < graph->n_order; position++) {
		f8_node_id id = graph->order[position];
		const f8_node *node = &graph->nodes[id];
		if (node->n_outputs > cap) {
			f8_free(types);
			cap = node->n_outputs;
			if (!(types = f8_calloc(cap, sizeof *types))) {
				status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory inferring types");
				break;
			}
		}
		if ((status = f8_node_infer_types(graph, id, types, diag)))
			break;
		for (uint32_t i = 0; !status && i < node->n_outputs; i++) {
			f8_value *value = &graph->values[node->outputs[i]];
			if (value->type.dtype == F8_DTYPE_UNDEFINED)
				value->type = types[i];
			else
				status = f8_node_check_output_type(graph, id, i, &types[i], diag);
		}
	}
	f8_free(types);
	return status;
}

/* Walks the program backwards so that a chain of dead nodes goes in one sweep. */
f8_status f8_pass_remove_dead_nodes(f8_graph *graph, f8_diag *diag) {
	bool *live = f8_calloc(graph->n_values ? graph->n_values : 1, sizeof *live);
	f8_node_id *kept = f8_calloc(graph->n_order ? graph->n_order : 1, sizeof *kept);
	if (!live || !kept) {
		f8_free(live);
		f8_free(kept);
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory removing dead nodes");
	}
	for (uint32_t i = 0; i < graph->n_outputs; i++)
		live[graph->outputs[i]] = true;
	for (uint32_t i = 0; i < graph->n_updates; i++) // state carried to the next step
		live[graph->updates[i].source] = true;
	uint32_t n_kept = 0;
	for (uint32_t position = graph->n_order; position-- > 0;) {
		const f8_node *node = &graph->nodes[graph->order[position]];
		bool keep = f8_op_get_info(node->op)->flags & F8_OPF_SIDE_EFFECT;
		for (uint32_t i = 0; i < node->n_outputs && !keep; i++)
			keep = live[node->outputs[i]];
		if (!keep)
			continue;
		kept[n_kept++] = graph->order[position];
		for (uint32_t i = 0; i < node->n_inputs; i++)
			if (node->inputs[i] != F8_NONE)
				live[node->inputs[i]] = true;
	}
	// `kept` is in reverse program order.
	for (uint32_t i = 0; i < n_kept / 2; i++) {
		f8_node_id swap = kept[i];
		kept[i] = kept[n_kept - 1 - i];
		kept[n_kept - 1 - i] = swap;
	}
	f8_status status = f8_graph_set_order(graph, kept, n_kept);
	f8_free(live);
	f8_free(kept);
	return status ? f8_diag_set(diag, status, "out of memory removing dead nodes") : F8_OK;
}

f8_status f8_pass_canonicalize_run(f8_graph *graph, f8_diag *diag) {
	f8_status status = infer_types(graph, diag);
	return status ? status : f8_pass_remove_dead_nodes(graph, diag);
}
