/*
 * The pipeline-parallel pass (passes/pipeline_parallel.h says what it does and why).
 *
 * Every node of the forward gets a place: a layer's stage, PRE (before the layers, reading no
 * layer's output: made wherever it is read) or POST (after them: the last stage's). A stage
 * keeps its layers' nodes (and POST's, when last) and the PRE nodes they read; the values it
 * reads from the stage before come through one Recv, and the one value the stages after it
 * read goes out through one Send.
 */
#include "passes/pipeline_parallel.h" // f8_pass_pipeline_parallel_run

#include <string.h> // memcpy

#include "ir/alloc.h"                      // f8_calloc, f8_free
#include "ir/arena.h"                      // f8_arena_concat
#include "passes/tensor_parallel_internal.h" // f8_tp_add_node

enum { PRE = -1, POST = -2 };

typedef struct pp_pass {
	f8_graph *graph;
	f8_diag *diag;
	int64_t stages, stage, per; // PP; this program's stage; layers a stage
	int *place;                 // per node: its stage, PRE or POST
	bool *kept;                 // per node: in this stage's program
	int *made_by;               // per value: its maker's place (PRE for leaves)
} pp_pass;

static f8_status nomem(f8_diag *diag) {
	return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory in the pipeline-parallel pass");
}

static const char *name_of(const pp_pass *pp, f8_value_id v) {
	return pp->graph->values[v].name;
}

/* F8_ERR_UNSUPPORTED naming what node `id` does that the stages cannot split. */
static f8_status refuse(pp_pass *pp, f8_node_id id, const char *why) {
	const f8_graph *graph = pp->graph;
	f8_diag_set(pp->diag, F8_ERR_UNSUPPORTED, "--pipeline-model-parallel-size %lld: %%%s (%s) "
		    "%s", (long long)pp->stages, name_of(pp, graph->nodes[id].outputs[0]),
		    f8_op_name(graph->nodes[id].op), why);
	f8_diag_hint(pp->diag, "pipeline parallelism cuts the model between layers (scopes "
		     "\"layers.<i>.\"), one activation passing from each stage to the next");
	return F8_ERR_UNSUPPORTED;
}

/* Each node's place: a layer's stage, PRE, or POST (reads a layer's or POST's output). */
static f8_status place_nodes(pp_pass *pp) {
	f8_graph *graph = pp->graph;
	for (uint32_t v = 0; v < graph->n_values; v++)
		pp->made_by[v] = PRE;
	for (uint32_t p = 0; p < graph->n_order; p++) {
		f8_node_id id = graph->order[p];
		const f8_node *node = &graph->nodes[id];
		int layer = f8_scope_layer(node->scope, NULL), place = PRE;
		for (uint32_t i = 0; i < node->n_inputs; i++) {
			int from = node->inputs[i] == F8_NONE ? PRE : pp->made_by[node->inputs[i]];
			if (layer >= 0 && from == POST)
				return refuse(pp, id, "reads a value made after the layers");
			if (layer >= 0 && from >= 0 && from > layer / pp->per)
				return refuse(pp, id, "reads a later stage's value");
			place = from != PRE && layer < 0 ? POST : place;
		}
		pp->place[id] = layer >= 0 ? (int)(layer / pp->per) : place;
		for (uint32_t o = 0; o < node->n_outputs; o++)
			pp->made_by[node->outputs[o]] = pp->place[id];
	}
	return F8_OK;
}

/* The nodes of stage `s` into kept[]: its layers', POST's when last, and the PRE nodes they
 * read. */
static void keep_stage(pp_pass *pp, int64_t s, bool *kept) {
	f8_graph *graph = pp->graph;
	bool *wanted = f8_calloc(graph->n_values + 1, sizeof *wanted);
	for (uint32_t p = graph->n_order; wanted && p-- > 0;) {
		f8_node_id id = graph->order[p];
		const f8_node *node = &graph->nodes[id];
		int place = pp->place[id];
		bool read = false;
		for (uint32_t o = 0; o < node->n_outputs && !read; o++)
			read = wanted[node->outputs[o]];
		kept[id] = place == s || (place == POST && s == pp->stages - 1) ||
			   (place == PRE && read);
		for (uint32_t i = 0; kept[id] && i < node->n_inputs; i++)
			if (node->inputs[i] != F8_NONE)
				wanted[node->inputs[i]] = true;
	}
	f8_free(wanted);
}

/*
 * The one value stage `s` receives (made by stage s - 1's layers and read by this stage's
 * nodes) into *in, and the one it sends (made by its layers and read by a later stage's or
 * POST's) into *out; F8_NONE where there is none (the first stage's in, the last's out).
 */
static f8_status boundaries(pp_pass *pp, f8_value_id *in, f8_value_id *out) {
	f8_graph *graph = pp->graph;
	*in = *out = F8_NONE;
	for (uint32_t p = 0; p < graph->n_order; p++) {
		f8_node_id id = graph->order[p];
		const f8_node *node = &graph->nodes[id];
		for (uint32_t i = 0; i < node->n_inputs; i++) {
			f8_value_id v = node->inputs[i];
			int from = v == F8_NONE ? PRE : pp->made_by[v];
			int64_t reader = pp->place[id] == POST ? pp->stages - 1 : pp->place[id];
			if (from < 0 || reader < 0 || from == reader)
				continue; // made before the layers, or on the reader's stage
			if (from != reader - 1 && reader > 0)
				return refuse(pp, id, "reads a value of a stage other than the one "
					      "before it");
			f8_value_id *slot = reader == pp->stage ? in : from == pp->stage ? out : NULL;
			if (slot && *slot != F8_NONE && *slot != v)
				return refuse(pp, id, "reads a second value from the stage before it: "
					      "f8c sends one activation between stages");
			if (slot)
				*slot = v;
		}
	}
	if ((pp->stage > 0 && *in == F8_NONE) || (pp->stage < pp->stages - 1 && *out == F8_NONE))
		return f8_diag_set(pp->diag, F8_ERR_UNSUPPORTED, "--pipeline-model-parallel-size "
				   "%lld: stage %lld %s no value", (long long)pp->stages,
				   (long long)pp->stage, *in == F8_NONE && pp->stage > 0
				   ? "receives" : "sends");
	return F8_OK;
}

/*
 * A parameter read on the first and the last stage (tied embeddings: the first stage's lookup,
 * the last's head) is tied over pp (placed `tied=pp`): both hold it whole, and the shard pass
 * sums its gradient between them. One read on any other two stages is refused.
 */
static f8_status tie_shared(pp_pass *pp) {
	f8_graph *graph = pp->graph;
	int *stage_of = f8_malloc((graph->n_values + 1) * sizeof *stage_of);
	bool *kept = f8_calloc(graph->n_nodes + 1, sizeof *kept);
	bool *tied = f8_calloc(graph->n_values + 1, sizeof *tied);
	f8_status status = stage_of && kept && tied ? F8_OK : nomem(pp->diag);
	for (uint32_t v = 0; !status && v < graph->n_values; v++)
		stage_of[v] = -1;
	int64_t last = pp->stages - 1;
	for (int64_t s = 0; !status && s < pp->stages; s++) {
		keep_stage(pp, s, kept);
		for (uint32_t p = 0; !status && p < graph->n_order; p++) {
			const f8_node *node = &graph->nodes[graph->order[p]];
			for (uint32_t i = 0; kept[graph->order[p]] && i < node->n_inputs; i++) {
				f8_value_id v = node->inputs[i];
				if (v == F8_NONE || graph->values[v].role != F8_ROLE_PARAMETER ||
				    stage_of[v] == s)
					continue;
				if (stage_of[v] < 0) {
					stage_of[v] = (int)s;
					continue;
				}
				if (stage_of[v] == 0 && s == last) {
					tied[v] = true;
					continue;
				}
				f8_diag_set(pp->diag, F8_ERR_UNSUPPORTED, "--pipeline-model-parallel-size "
					    "%lld: %%%s is read on stages %d and %lld: only a parameter "
					    "of the first and the last stage (tied embeddings) can be held "
					    "by two", (long long)pp->stages, name_of(pp, v), stage_of[v],
					    (long long)s);
				f8_diag_hint(pp->diag, "pipeline parallelism gives each layer's "
					     "parameters to one stage");
				status = F8_ERR_UNSUPPORTED;
			}
		}
	}
	for (uint32_t v = 0; !status && v < graph->n_values; v++)
		if (tied[v])
			graph->values[v].placement[F8_MESH_AXIS_PP] = (f8_placement){
				.kind = F8_PLACEMENT_KIND_TIED};
	f8_free(stage_of);
	f8_free(kept);
	f8_free(tied);
	return status;
}

/* This stage's program: Recv of `in`, the kept nodes, Send of `out`; the outputs and the
 * leaves of the other stages dropped. */
static f8_status rewrite(pp_pass *pp, f8_value_id in, f8_value_id out) {
	f8_graph *graph = pp->graph;
	f8_node_id *order = f8_calloc(graph->n_order + 3, sizeof *order);
	if (!order)
		return nomem(pp->diag);
	uint32_t n = 0;
	f8_status status = F8_OK;
	f8_value_id received = F8_NONE;
	if (in != F8_NONE) {
		const f8_type *type = &graph->values[in].type;
		f8_dim dims[F8_MAX_RANK];
		memcpy(dims, type->shape.dims, sizeof dims);
		f8_attr attrs[4] = {{.name = "group", .kind = F8_ATTR_STRING, .s = "pp"},
				    {.name = "peer", .kind = F8_ATTR_INT, .i = pp->stage - 1},
				    {.name = "dtype", .kind = F8_ATTR_DTYPE, .dtype = type->dtype},
				    {.name = "shape", .kind = F8_ATTR_DIMS,
				     .dims = {.n = type->shape.rank, .items = dims}}};
		f8_node_id id;
		// Scoped "pipeline", not a layer's: the stage's own layers are what counts.
		status = f8_tp_add_node(graph, F8_OP_RECV, NULL, 0, attrs, 4, "pipeline",
					f8_arena_concat(graph->arena, name_of(pp, in), ".recv"), &id,
					pp->diag);
		if (!status) {
			order[n++] = id;
			received = graph->nodes[id].outputs[0];
			graph->values[received].type = graph->values[in].type;
		}
	}
	for (uint32_t p = 0; !status && p < graph->n_order; p++) {
		f8_node_id id = graph->order[p];
		if (!pp->kept[id])
			continue;
		f8_node *node = &graph->nodes[id];
		for (uint32_t i = 0; i < node->n_inputs; i++)
			node->inputs[i] = node->inputs[i] == in ? received : node->inputs[i];
		order[n++] = id;
	}
	if (!status && out != F8_NONE) {
		f8_attr attrs[2] = {{.name = "group", .kind = F8_ATTR_STRING, .s = "pp"},
				    {.name = "peer", .kind = F8_ATTR_INT, .i = pp->stage + 1}};
		f8_node_id id;
		status = f8_graph_add_node(graph, F8_OP_SEND, &out, 1, 0, NULL, &id, pp->diag);
		if (!status && f8_node_set_attrs(graph, id, attrs, 2))
			status = nomem(pp->diag);
		if (!status) {
			graph->nodes[id].scope = "pipeline";
			order[n++] = id;
		}
		// The stage's output, which the training pass reads: the activation it sends.
		graph->outputs[0] = out;
		graph->n_outputs = 1;
	}
	if (!status && f8_graph_set_order(graph, order, n))
		status = nomem(pp->diag);
	f8_free(order);
	if (status)
		return status;
	// The leaves this stage does not read (the other stages' parameters) leave its program.
	bool *read = f8_calloc(graph->n_values + 1, sizeof *read);
	if (!read)
		return nomem(pp->diag);
	for (uint32_t p = 0; p < graph->n_order; p++) {
		const f8_node *node = &graph->nodes[graph->order[p]];
		for (uint32_t i = 0; i < node->n_inputs; i++)
			if (node->inputs[i] != F8_NONE)
				read[node->inputs[i]] = true;
	}
	uint32_t kept = 0;
	for (uint32_t i = 0; i < graph->n_inputs; i++) {
		f8_role role = graph->values[graph->inputs[i]].role;
		if (read[graph->inputs[i]] || role == F8_ROLE_INPUT)
			graph->inputs[kept++] = graph->inputs[i];
	}
	graph->n_inputs = kept;
	f8_free(read);
	return F8_OK;
}

f8_status f8_pass_pipeline_parallel_run(f8_graph *graph, const f8_parallel_options *options,
					FILE *report, f8_diag *diag) {
	if (!options || options->pipeline <= 1)
		return F8_OK;
	uint32_t mesh[F8_MESH_AXIS_COUNT];
	f8_status status = f8_parallel_forward_mesh(graph, options, "pipeline-parallel", mesh,
						    diag);
	if (status)
		return status;
	pp_pass pp = {.graph = graph, .diag = diag, .stages = mesh[F8_MESH_AXIS_PP],
		      .stage = options->stage};
	if (pp.stage < 0 || pp.stage >= pp.stages)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "--pipeline-stage %lld: the pipeline has "
				   "stages 0 to %lld", (long long)pp.stage, (long long)pp.stages - 1);
	int layers = 0;
	for (uint32_t p = 0; p < graph->n_order; p++) {
		int layer = f8_scope_layer(graph->nodes[graph->order[p]].scope, NULL);
		layers = layer + 1 > layers ? layer + 1 : layers;
	}
	if (layers < pp.stages || layers % pp.stages)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "--pipeline-model-parallel-size %lld does "
				   "not divide the model's %d layers", (long long)pp.stages, layers);
	pp.per = layers / pp.stages;
	pp.place = f8_calloc(graph->n_nodes + 1, sizeof *pp.place);
	pp.kept = f8_calloc(graph->n_nodes + 1, sizeof *pp.kept);
	pp.made_by = f8_calloc(graph->n_values + 1, sizeof *pp.made_by);
	status = pp.place && pp.kept && pp.made_by ? F8_OK : nomem(diag);
	f8_value_id in = F8_NONE, out = F8_NONE;
	if (!status)
		status = place_nodes(&pp);
	if (!status)
		status = tie_shared(&pp);
	if (!status)
		status = boundaries(&pp, &in, &out);
	if (!status) {
		keep_stage(&pp, pp.stage, pp.kept);
		status = rewrite(&pp, in, out);
	}
	if (!status)
		memcpy(graph->mesh, mesh, sizeof mesh);
	if (!status && report)
		fprintf(report, "pipeline-parallel: stage %lld of %lld: layers %lld to %lld%s%s%s%s%s\n",
			(long long)pp.stage, (long long)pp.stages, (long long)(pp.stage * pp.per),
			(long long)((pp.stage + 1) * pp.per - 1),
			in != F8_NONE ? "; receives %" : "", in != F8_NONE ? name_of(&pp, in) : "",
			out != F8_NONE ? "; sends %" : "", out != F8_NONE ? name_of(&pp, out) : "",
			pp.stage == pp.stages - 1 ? "; the head and the loss" : "");
	f8_free(pp.place), f8_free(pp.kept), f8_free(pp.made_by);
	return status;
}
