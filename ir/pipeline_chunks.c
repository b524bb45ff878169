/*
 * Pipeline parallelism's model chunks in one stage's program (ir/pipeline_chunks.h says the
 * rules).
 */
#include "ir/pipeline_chunks.h" // f8_pipeline_chunks

#include <string.h> // memset

#include "ir/alloc.h" // f8_calloc, f8_free

enum { UNKNOWN = 0xFF, NONE = 0xFE };

/* Each layer's chunk into layer_chunk[] (the runs of consecutive layers present); their count. */
static uint32_t chunk_layers(const f8_graph *graph, int *layer_chunk, int n_layers) {
	bool *present = f8_calloc((size_t)n_layers + 1, sizeof *present);
	if (!present)
		return 0;
	for (uint32_t p = 0; p < graph->n_order; p++) {
		int layer = f8_scope_layer(graph->nodes[graph->order[p]].scope, NULL);
		if (layer >= 0)
			present[layer] = true;
	}
	uint32_t runs = 0;
	for (int l = 0; l < n_layers; l++) {
		runs += present[l] && (l == 0 || !present[l - 1]);
		layer_chunk[l] = present[l] ? (int)runs - 1 : -1;
	}
	f8_free(present);
	return runs;
}

/* The chunk of node `id` from what it reads (UNKNOWN when it reads no chunk's value). */
static uint8_t chunk_from_inputs(const f8_graph *graph, const uint8_t *chunk, f8_node_id id) {
	const f8_node *node = &graph->nodes[id];
	int latest_bwd = -1, latest_fwd = -1;
	for (uint32_t i = 0; i < node->n_inputs; i++) {
		f8_value_id v = node->inputs[i];
		f8_node_id producer = v == F8_NONE ? F8_NONE : graph->values[v].producer;
		if (producer == F8_NONE || !f8_pipeline_chunked(graph->nodes[producer].phase) ||
		    chunk[producer] == UNKNOWN)
			continue;
		int c = chunk[producer];
		if (graph->nodes[producer].phase == F8_PHASE_BWD)
			latest_bwd = latest_bwd < 0 || c < latest_bwd ? c : latest_bwd;
		else
			latest_fwd = c > latest_fwd ? c : latest_fwd;
	}
	if (node->phase == F8_PHASE_BWD && latest_bwd >= 0)
		return (uint8_t)latest_bwd;
	return latest_fwd >= 0 ? (uint8_t)latest_fwd : UNKNOWN;
}

f8_status f8_pipeline_chunks(const f8_graph *graph, uint8_t *chunk, uint32_t *n_chunks,
			     f8_diag *diag) {
	*n_chunks = 1;
	memset(chunk, 0, graph->n_nodes);
	if (f8_graph_mesh_size(graph, F8_MESH_AXIS_PP) <= 1)
		return F8_OK; // no pipeline: one program, one run a phase
	int n_layers = 0;
	for (uint32_t p = 0; p < graph->n_order; p++) {
		int layer = f8_scope_layer(graph->nodes[graph->order[p]].scope, NULL);
		n_layers = layer + 1 > n_layers ? layer + 1 : n_layers;
	}
	int *layer_chunk = f8_calloc((size_t)n_layers + 1, sizeof *layer_chunk);
	// Per value: the earliest chunk of its forward readers, the latest of its backward ones.
	uint8_t *first_fwd = f8_malloc(graph->n_values + 1), *first_bwd = f8_malloc(graph->n_values + 1);
	if (!layer_chunk || !first_fwd || !first_bwd) {
		f8_free(layer_chunk), f8_free(first_fwd), f8_free(first_bwd);
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory finding the model chunks");
	}
	uint32_t runs = chunk_layers(graph, layer_chunk, n_layers);
	f8_status status = F8_OK;
	if (runs > F8_PIPELINE_CHUNKS_MAX)
		status = f8_diag_set(diag, F8_ERR_UNSUPPORTED, "a pipeline stage of %u model chunks: "
				     "f8c runs at most %d", runs, F8_PIPELINE_CHUNKS_MAX);
	if (status || runs <= 1) {
		f8_free(layer_chunk), f8_free(first_fwd), f8_free(first_bwd);
		return status;
	}
	// Forward over the program: a layer's nodes, then the others from what they read.
	for (uint32_t p = 0; p < graph->n_order; p++) {
		f8_node_id id = graph->order[p];
		const f8_node *node = &graph->nodes[id];
		int layer = f8_scope_layer(node->scope, NULL);
		chunk[id] = !f8_pipeline_chunked(node->phase) ? 0 : layer >= 0 ? (uint8_t)layer_chunk[layer]
				       : chunk_from_inputs(graph, chunk, id);
	}
	// Backward over it: the nodes that read no chunk's value, from their readers.
	memset(first_fwd, NONE, graph->n_values + 1);
	memset(first_bwd, NONE, graph->n_values + 1);
	for (uint32_t p = graph->n_order; p-- > 0;) {
		f8_node_id id = graph->order[p];
		const f8_node *node = &graph->nodes[id];
		if (!f8_pipeline_chunked(node->phase))
			continue;
		bool bwd = node->phase == F8_PHASE_BWD;
		if (chunk[id] == UNKNOWN) {
			uint8_t from = NONE;
			for (uint32_t o = 0; o < node->n_outputs; o++) {
				uint8_t c = bwd ? first_bwd[node->outputs[o]] : first_fwd[node->outputs[o]];
				if (c != NONE && (from == NONE || (bwd ? c > from : c < from)))
					from = c;
			}
			chunk[id] = from == NONE ? 0 : from;
		}
		for (uint32_t i = 0; i < node->n_inputs; i++) {
			f8_value_id v = node->inputs[i];
			if (v == F8_NONE)
				continue;
			uint8_t *first = bwd ? &first_bwd[v] : &first_fwd[v];
			if (*first == NONE || (bwd ? chunk[id] > *first : chunk[id] < *first))
				*first = chunk[id];
		}
	}
	// Every value made in a run its readers' runs follow (or share).
	for (uint32_t p = 0; !status && p < graph->n_order; p++) {
		f8_node_id id = graph->order[p];
		const f8_node *node = &graph->nodes[id];
		if (!f8_pipeline_chunked(node->phase))
			continue;
		uint32_t at = f8_pipeline_chunk_run(node->phase, chunk[id], runs);
		for (uint32_t i = 0; !status && i < node->n_inputs; i++) {
			f8_value_id v = node->inputs[i];
			f8_node_id producer = v == F8_NONE ? F8_NONE : graph->values[v].producer;
			if (producer == F8_NONE || !f8_pipeline_chunked(graph->nodes[producer].phase) ||
			    f8_pipeline_chunk_run(graph->nodes[producer].phase, chunk[producer], runs) <= at)
				continue;
			f8_diag_set(diag, F8_ERR_INVALID, "model chunk %u's %s reads %%%s, which chunk "
				    "%u's %s makes later", chunk[id], f8_phase_name(node->phase),
				    graph->values[v].name, chunk[producer],
				    f8_phase_name(graph->nodes[producer].phase));
			f8_diag_set_node(diag, graph, id);
			status = F8_ERR_INVALID;
		}
	}
	if (!status)
		*n_chunks = runs;
	f8_free(layer_chunk), f8_free(first_fwd), f8_free(first_bwd);
	return status;
}

f8_status f8_pipeline_order_chunks(f8_graph *graph, f8_diag *diag) {
	uint8_t *chunk = f8_malloc(graph->n_nodes + 1);
	uint32_t *at = f8_malloc((graph->n_order + 1) * sizeof *at);
	f8_node_id *moved = f8_malloc((graph->n_order + 1) * sizeof *moved);
	uint32_t runs = 1, n = 0;
	f8_status status = chunk && at && moved
				   ? f8_pipeline_chunks(graph, chunk, &runs, diag)
				   : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory ordering the chunks");
	for (uint32_t p = 0; !status && runs > 1 && p < graph->n_order; p++)
		if (f8_pipeline_chunked(graph->nodes[graph->order[p]].phase))
			at[n++] = p;
	// A stable pass per run: run r's nodes, in program order.
	uint32_t k = 0;
	for (uint32_t r = 0; !status && runs > 1 && r < 2 * runs; r++)
		for (uint32_t i = 0; i < n; i++) {
			f8_node_id id = graph->order[at[i]];
			if (f8_pipeline_chunk_run(graph->nodes[id].phase, chunk[id], runs) == r)
				moved[k++] = id;
		}
	for (uint32_t i = 0; !status && runs > 1 && i < n; i++)
		graph->order[at[i]] = moved[i];
	f8_free(chunk), f8_free(at), f8_free(moved);
	return status;
}
