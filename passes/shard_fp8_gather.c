/*
 * Sequence parallelism's FP8 all-gather, TransformerEngine's (passes/shard_internal.h): where a
 * value is gathered over tp in high precision only to be cast to FP8 per tensor (a
 * column-parallel GEMM's input under --sequence-parallel; in E4M3 also a gradient the backward
 * gathers), the rank's shard is cast instead, by a Quantize, and the FP8 codes are gathered, a
 * byte an element, the transposed copy the TN GEMMs read made from the gathered codes (Reshape,
 * Transpose) rather than gathered too; the transposed copy's scale_inv is the codes' (Identity).
 *
 *   delayed   the shard is cast at the table's scale, the same on every rank; its amax (the
 *             shard's) is then max-reduced over tp with the table's others by the shard pass.
 *   current   the shard's amax is max-reduced over tp first (Amax, NanToInf, AllReduce) and
 *             the scale found from it (ScaleFromAmax), so every rank casts at the whole
 *             tensor's scale; the NaN of a shard's amax made +inf first, because the max over
 *             ranks drops a NaN where +inf survives it: one rank's NaN amax gives every rank
 *             the scale of a non-finite amax, the same bits.
 *
 * Either way the codes and scales are those of the cast after the gather, bit for bit. The new
 * nodes run in the cast's phase; the high-precision gather goes.
 */
#include "passes/shard_internal.h" // f8_shard_gather_fp8

#include <string.h> // memcpy

#include "ir/alloc.h"  // f8_calloc, f8_free
#include "ir/arena.h"  // f8_arena_alloc, f8_arena_concat
#include "ir/verify.h" // f8_node_infer_types

/* What a rewrite adds around the cast, in program order: before it (current scaling's amax,
 * its NaN made +inf, its reduction, the scale), after it (the gather, the rows, their
 * transpose, the scale_inv's copy). */
enum { BEFORE = 4, AFTER = 4 };

typedef struct gatherer {
	f8_graph *graph;
	f8_diag *diag;
	f8_node_id (*before)[BEFORE], (*after)[AFTER]; // per original node
	bool *dropped;                                  // per original node: the old gather
} gatherer;

static f8_status nomem(f8_diag *diag) {
	return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory in the shard pass");
}

/* The nodes that read `v`, and the graph's outputs that are it, counted. */
static uint32_t readers_of(const f8_graph *graph, f8_value_id v) {
	uint32_t n = 0;
	for (uint32_t p = 0; p < graph->n_order; p++) {
		const f8_node *node = &graph->nodes[graph->order[p]];
		for (uint32_t i = 0; i < node->n_inputs; i++)
			n += node->inputs[i] == v;
	}
	for (uint32_t i = 0; i < graph->n_outputs; i++)
		n += graph->outputs[i] == v;
	return n;
}

/* Adds node `op` on `input` with `attrs` in the phase and scope of node `like` (appended to the
 * program: the rewrite places it), making `made`, a value some other node made until now, or
 * (`made` F8_NONE) a fresh value named `name` `suffix`, typed by inference; *out the node. */
static f8_status add(gatherer *g, f8_op op, f8_value_id input, const f8_attr *attrs,
		     uint32_t n_attrs, const f8_node *like, f8_value_id made, const char *name,
		     const char *suffix, f8_node_id *out) {
	f8_graph *graph = g->graph;
	const char *named = made == F8_NONE ? f8_arena_concat(graph->arena, name, suffix) : NULL;
	f8_value_id *outputs = made == F8_NONE ? NULL : f8_arena_alloc(graph->arena,
								      sizeof *outputs);
	if (made == F8_NONE ? !named : !outputs)
		return nomem(g->diag);
	f8_phase phase = like->phase;
	const char *scope = like->scope;
	f8_status status = f8_graph_add_node(graph, op, &input, 1, made == F8_NONE ? 1 : 0,
					     made == F8_NONE ? &named : NULL, out, g->diag);
	if (!status && n_attrs && f8_node_set_attrs(graph, *out, attrs, n_attrs))
		status = nomem(g->diag);
	if (status)
		return status;
	f8_node *node = &graph->nodes[*out];
	node->phase = phase;
	node->scope = scope;
	if (made != F8_NONE) {
		outputs[0] = made;
		node->outputs = outputs, node->n_outputs = 1;
		graph->values[made].producer = *out, graph->values[made].output_index = 0;
		return F8_OK;
	}
	f8_type types[1];
	if (!(status = f8_node_infer_types(graph, *out, types, g->diag)))
		graph->values[node->outputs[0]].type = types[0];
	return status;
}

/* The gather node that makes cast `id`'s input when the cast may take its place: a per-tensor
 * E4M3 CastTranspose (at a table's scale, or finding its own) of the one value a plain
 * AllGather makes along a dimension that is not the last, read by nothing else; else F8_NONE. */
static f8_node_id gather_of(const f8_graph *graph, f8_node_id id) {
	const f8_node *cast = &graph->nodes[id];
	bool given = cast->n_inputs >= 2 && cast->inputs[1] != F8_NONE;
	if (cast->op != F8_OP_CAST_TRANSPOSE || f8_node_attr_int(cast, "grouped", 0) ||
	    f8_node_attr(cast, "block") || (cast->n_inputs >= 3 && cast->inputs[2] != F8_NONE) ||
	    (given && !f8_node_attr(cast, "slot")) ||
	    graph->values[cast->outputs[0]].type.dtype != F8_DTYPE_E4M3)
		return F8_NONE;
	f8_node_id id_gather = graph->values[cast->inputs[0]].producer;
	if (id_gather == F8_NONE)
		return F8_NONE;
	const f8_node *gather = &graph->nodes[id_gather];
	int rank = graph->values[cast->inputs[0]].type.shape.rank;
	int axis = (int)f8_node_attr_int(gather, "axis", 0);
	axis = axis < 0 ? axis + rank : axis;
	bool plain = gather->op == F8_OP_ALL_GATHER && gather->n_inputs == 1 &&
		     !f8_node_attr_int(gather, "replicated", 0) &&
		     !f8_node_attr_int(gather, "balanced", 0) && axis >= 0 && axis < rank - 1;
	return plain && readers_of(graph, cast->inputs[0]) == 1 ? id_gather : F8_NONE;
}

/* Cast `id` of what gather `id_gather` makes rewritten as the file's comment says. */
static f8_status rewrite(gatherer *g, f8_node_id id, f8_node_id id_gather) {
	f8_graph *graph = g->graph;
	const f8_node cast = graph->nodes[id], gather = graph->nodes[id_gather];
	bool given = cast.n_inputs >= 2 && cast.inputs[1] != F8_NONE;
	f8_value_id shard = gather.inputs[0], codes = cast.outputs[0], codes_t = cast.outputs[1];
	f8_value_id scale_inv = cast.outputs[2], scale_inv_t = cast.outputs[3];
	f8_value_id amax = cast.outputs[4];
	f8_type local = graph->values[codes].type;
	int rank = local.shape.rank, axis = (int)f8_node_attr_int(&gather, "axis", 0);
	axis = axis < 0 ? axis + rank : axis;
	local.shape.dims[axis] = graph->values[shard].type.shape.dims[axis];
	const char *name = graph->values[codes].name;
	f8_attr over[3] = {{.name = "group", .kind = F8_ATTR_STRING,
			    .s = f8_node_attr_string(&gather, "group", "tp")},
			   {.name = "axis", .kind = F8_ATTR_INT, .i = axis},
			   {.name = "ranks", .kind = F8_ATTR_INT,
			    .i = f8_node_attr_int(&gather, "ranks", 1)}};
	f8_attr max[2] = {over[0], {.name = "op", .kind = F8_ATTR_STRING, .s = "max"}};
	f8_attr scaling[2] = {{.name = "format", .kind = F8_ATTR_DTYPE, .dtype = F8_DTYPE_E4M3},
			      {.name = "margin", .kind = F8_ATTR_INT,
			       .i = f8_node_attr_int(&cast, "margin", 0)}};
	f8_dim flat[2] = {f8_dim_const(-1), local.shape.dims[rank - 1]};
	int64_t swap[2] = {1, 0};
	f8_attr rows = {.name = "shape", .kind = F8_ATTR_DIMS, .dims = {.n = 2, .items = flat}};
	f8_attr perm = {.name = "perm", .kind = F8_ATTR_INTS, .ints = {.n = 2, .items = swap}};
	f8_node_id *ahead = g->before[id], *behind = g->after[id];
	f8_status status = F8_OK;
	if (!given) { // current scaling: the whole tensor's amax, then its scale
		status = add(g, F8_OP_AMAX, shard, NULL, 0, &cast, F8_NONE, name, ".shard_amax",
			     &ahead[0]);
		if (!status)
			status = add(g, F8_OP_NAN_TO_INF, graph->nodes[ahead[0]].outputs[0], NULL, 0,
				     &cast, F8_NONE, name, ".shard_amax.nan_as_inf", &ahead[1]);
		if (!status)
			status = add(g, F8_OP_ALL_REDUCE, graph->nodes[ahead[1]].outputs[0], max, 2,
				     &cast, F8_NONE, name, ".amax", &ahead[2]);
		if (!status)
			status = add(g, F8_OP_SCALE_FROM_AMAX, graph->nodes[ahead[2]].outputs[0],
				     scaling, 2, &cast, F8_NONE, name, ".scale", &ahead[3]);
	}
	f8_value_id *inputs = status ? NULL : f8_arena_alloc(graph->arena, 2 * sizeof *inputs);
	f8_value_id *outputs = status ? NULL : f8_arena_alloc(graph->arena, 3 * sizeof *outputs);
	if (!status && (!inputs || !outputs))
		status = nomem(g->diag);
	if (status)
		return status;
	// The cast: a Quantize of the shard (codes, scale_inv, amax) at the table's scale or the
	// one found; its codes are the shard's, a fresh value the gather makes in their place.
	inputs[0] = shard;
	inputs[1] = given ? cast.inputs[1] : graph->nodes[ahead[3]].outputs[0];
	outputs[0] = codes, outputs[1] = scale_inv, outputs[2] = amax;
	f8_node *quantize = &graph->nodes[id];
	quantize->op = F8_OP_QUANTIZE;
	quantize->inputs = inputs, quantize->n_inputs = 2;
	quantize->outputs = outputs, quantize->n_outputs = 3;
	graph->values[scale_inv].output_index = 1, graph->values[amax].output_index = 2;
	status = add(g, F8_OP_ALL_GATHER, codes, over, 3, &cast, F8_NONE, name, ".shard",
		     &behind[0]);
	if (status)
		return status;
	f8_value_id shard_codes = graph->nodes[behind[0]].outputs[0];
	graph->nodes[behind[0]].outputs[0] = codes;
	graph->nodes[behind[0]].inputs[0] = shard_codes;
	graph->nodes[id].outputs[0] = shard_codes;
	graph->values[shard_codes].producer = id, graph->values[shard_codes].output_index = 0;
	graph->values[shard_codes].type = local;
	graph->values[shard_codes].precision = graph->values[codes].precision;
	graph->values[codes].producer = behind[0], graph->values[codes].output_index = 0;
	// The gathered codes' rows transposed make the transposed copy; its scale_inv is theirs.
	status = add(g, F8_OP_RESHAPE, codes, &rows, 1, &cast, F8_NONE, name, ".rows", &behind[1]);
	if (!status)
		status = add(g, F8_OP_TRANSPOSE, graph->nodes[behind[1]].outputs[0], &perm, 1, &cast,
			     codes_t, NULL, NULL, &behind[2]);
	if (!status)
		status = add(g, F8_OP_IDENTITY, scale_inv, NULL, 0, &cast, scale_inv_t, NULL, NULL,
			     &behind[3]);
	if (status)
		return status;
	g->dropped[id_gather] = true;
	return F8_OK;
}

f8_status f8_shard_gather_fp8(f8_graph *graph, uint32_t *n, f8_diag *diag) {
	*n = 0;
	uint32_t n_original = graph->n_order, n_nodes = graph->n_nodes;
	gatherer g = {.graph = graph, .diag = diag,
		      .before = f8_calloc(n_nodes + 1, sizeof *g.before),
		      .after = f8_calloc(n_nodes + 1, sizeof *g.after),
		      .dropped = f8_calloc(n_nodes + 1, sizeof *g.dropped)};
	f8_node_id *order = f8_calloc((size_t)n_nodes * (1 + BEFORE + AFTER) + 1, sizeof *order);
	f8_status status = g.before && g.after && g.dropped && order ? F8_OK : nomem(diag);
	for (uint32_t i = 0; !status && i < n_nodes; i++) {
		for (int k = 0; k < BEFORE; k++)
			g.before[i][k] = F8_NONE;
		for (int k = 0; k < AFTER; k++)
			g.after[i][k] = F8_NONE;
	}
	for (uint32_t p = 0; !status && p < n_original; p++) {
		f8_node_id id = graph->order[p], id_gather = gather_of(graph, id);
		if (id_gather != F8_NONE && !(status = rewrite(&g, id, id_gather)))
			(*n)++;
	}
	uint32_t length = 0;
	for (uint32_t p = 0; !status && *n && p < n_original; p++) {
		f8_node_id id = graph->order[p];
		for (int k = 0; k < BEFORE; k++)
			if (g.before[id][k] != F8_NONE)
				order[length++] = g.before[id][k];
		if (!g.dropped[id])
			order[length++] = id;
		for (int k = 0; k < AFTER; k++)
			if (g.after[id][k] != F8_NONE)
				order[length++] = g.after[id][k];
	}
	if (!status && *n && f8_graph_set_order(graph, order, length))
		status = nomem(diag);
	f8_free(g.before), f8_free(g.after), f8_free(g.dropped), f8_free(order);
	return status;
}
