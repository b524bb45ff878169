/*
 * The pipeline-parallel pass (passes/pipeline_parallel.h says what it does and why).
 *
 * Every node of the forward gets a place: a layer's model chunk (the pipeline's g-th of PP V,
 * held by stage g mod PP), PRE (before the layers, reading no layer's output: made wherever it
 * is read) or POST (after them: the last chunk's). A stage keeps its chunks' nodes (and POST's,
 * when it holds the last chunk) and the PRE nodes they read; each chunk but the pipeline's
 * first receives the one value it reads from the chunk before through a Recv, and each but the
 * last sends the one value the chunks after it read through a Send.
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
	int64_t stages, stage;  // PP; this program's stage
	int64_t chunks, per;    // model chunks in the pipeline (PP V); layers a chunk
	int *place;             // per node: its chunk, PRE or POST
	bool *kept;             // per node: in this stage's program
	int *made_by;           // per value: its maker's place (PRE for leaves)
	f8_value_id *boundary;  // (chunks) what chunk g sends to chunk g + 1; F8_NONE for the last
} pp_pass;

/* The stage holding chunk g (or POST: the last chunk's). */
static int64_t stage_of(const pp_pass *pp, int place) {
	return place == POST ? (pp->chunks - 1) % pp->stages : place % pp->stages;
}

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
				return refuse(pp, id, "reads a later model chunk's value");
			place = from != PRE && layer < 0 ? POST : place;
		}
		pp->place[id] = layer >= 0 ? (int)(layer / pp->per) : place;
		for (uint32_t o = 0; o < node->n_outputs; o++)
			pp->made_by[node->outputs[o]] = pp->place[id];
	}
	return F8_OK;
}

/* The nodes of stage `s` into kept[]: its chunks' layers', POST's when it holds the last chunk,
 * and the PRE nodes they read. */
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
		kept[id] = (place != PRE && stage_of(pp, place) == s) || (place == PRE && read);
		for (uint32_t i = 0; kept[id] && i < node->n_inputs; i++)
			if (node->inputs[i] != F8_NONE)
				wanted[node->inputs[i]] = true;
	}
	f8_free(wanted);
}

/*
 * The one value each chunk sends to the next into pp->boundary[] (made by chunk g's layers and
 * read by chunk g + 1's nodes or POST's): a node reading another chunk's value but the one
 * before its own, or a second value of the one before, is refused, and so is a chunk that
 * sends nothing.
 */
static f8_status find_boundaries(pp_pass *pp) {
	f8_graph *graph = pp->graph;
	for (int64_t g = 0; g < pp->chunks; g++)
		pp->boundary[g] = F8_NONE;
	for (uint32_t p = 0; p < graph->n_order; p++) {
		f8_node_id id = graph->order[p];
		const f8_node *node = &graph->nodes[id];
		for (uint32_t i = 0; i < node->n_inputs; i++) {
			f8_value_id v = node->inputs[i];
			int from = v == F8_NONE ? PRE : pp->made_by[v];
			int64_t reader = pp->place[id] == POST ? pp->chunks - 1 : pp->place[id];
			if (from < 0 || reader < 0 || from == reader)
				continue; // made before the layers, or in the reader's chunk
			if (from != reader - 1)
				return refuse(pp, id, "reads a value of a model chunk other than the one "
					      "before it");
			if (pp->boundary[from] != F8_NONE && pp->boundary[from] != v)
				return refuse(pp, id, "reads a second value from the model chunk before "
					      "it: f8c sends one activation between chunks");
			pp->boundary[from] = v;
		}
	}
	for (int64_t g = 0; g + 1 < pp->chunks; g++)
		if (pp->boundary[g] == F8_NONE)
			return f8_diag_set(pp->diag, F8_ERR_UNSUPPORTED, "--pipeline-model-parallel-"
					   "size %lld: model chunk %lld sends no value to the next",
					   (long long)pp->stages, (long long)g);
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

/* The point-to-point attributes of the boundary after chunk g, to or from `peer`: with several
 * chunks a stage, each boundary's activation has tag 2 g (its gradient, the training pass's,
 * 2 g + 1), since two stages exchange several kinds of message. */
static uint32_t boundary_attrs(const pp_pass *pp, int64_t g, int64_t peer, f8_attr *attrs) {
	attrs[0] = (f8_attr){.name = "group", .kind = F8_ATTR_STRING, .s = "pp"};
	attrs[1] = (f8_attr){.name = "peer", .kind = F8_ATTR_INT, .i = peer};
	attrs[2] = (f8_attr){.name = "tag", .kind = F8_ATTR_INT, .i = 2 * g};
	return pp->chunks > pp->stages ? 3 : 2;
}

/* Chunk g's Recv of what chunk g - 1 sends, into *received (placed in order[*n]). */
static f8_status add_recv(pp_pass *pp, int64_t g, f8_node_id *order, uint32_t *n,
			  f8_value_id *received) {
	f8_graph *graph = pp->graph;
	f8_value_id in = pp->boundary[g - 1];
	const f8_type *type = &graph->values[in].type;
	f8_dim dims[F8_MAX_RANK];
	memcpy(dims, type->shape.dims, sizeof dims);
	f8_attr attrs[5], tag;
	uint32_t n_attrs = boundary_attrs(pp, g - 1, stage_of(pp, (int)(g - 1)), attrs);
	tag = attrs[2];
	attrs[2] = (f8_attr){.name = "dtype", .kind = F8_ATTR_DTYPE, .dtype = type->dtype};
	attrs[3] = (f8_attr){.name = "shape", .kind = F8_ATTR_DIMS,
			     .dims = {.n = type->shape.rank, .items = dims}};
	attrs[4] = tag;
	f8_node_id id;
	// Scoped "pipeline", not a layer's: the stage's own layers are what counts.
	f8_status status = f8_tp_add_node(graph, F8_OP_RECV, NULL, 0, attrs, n_attrs + 2,
					  "pipeline", f8_arena_concat(graph->arena,
								      name_of(pp, in), ".recv"),
					  &id, pp->diag);
	if (status)
		return status;
	order[(*n)++] = id;
	*received = graph->nodes[id].outputs[0];
	graph->values[*received].type = *type;
	return F8_OK;
}

/* Chunk g's Send of what chunk g + 1 reads (placed in order[*n]). */
static f8_status add_send(pp_pass *pp, int64_t g, f8_node_id *order, uint32_t *n) {
	f8_graph *graph = pp->graph;
	f8_attr attrs[3];
	uint32_t n_attrs = boundary_attrs(pp, g, stage_of(pp, (int)(g + 1)), attrs);
	f8_node_id id;
	f8_status status = f8_graph_add_node(graph, F8_OP_SEND, &pp->boundary[g], 1, 0, NULL, &id,
					     pp->diag);
	if (!status && f8_node_set_attrs(graph, id, attrs, n_attrs))
		status = nomem(pp->diag);
	if (status)
		return status;
	graph->nodes[id].scope = "pipeline";
	order[(*n)++] = id;
	return F8_OK;
}

/*
 * This stage's program: the kept PRE nodes, then each of its chunks in order: its Recv, its
 * nodes (and POST's after the last chunk's), its Send; the outputs and the leaves of the other
 * stages dropped. A stage that holds no loss outputs what it sends, which the training pass
 * reads.
 */
static f8_status rewrite(pp_pass *pp) {
	f8_graph *graph = pp->graph;
	// The program as it was: each Recv and Send added below is appended to graph->order too,
	// and pp->place and pp->kept know only the nodes that were.
	uint32_t n_program = graph->n_order;
	uint32_t cap = n_program + 2 * (uint32_t)pp->chunks + 1;
	f8_node_id *order = f8_calloc(cap, sizeof *order);
	if (!order)
		return nomem(pp->diag);
	uint32_t n = 0;
	f8_status status = F8_OK;
	for (uint32_t p = 0; p < n_program; p++)
		if (pp->kept[graph->order[p]] && pp->place[graph->order[p]] == PRE)
			order[n++] = graph->order[p];
	bool last = stage_of(pp, POST) == pp->stage;
	if (!last)
		graph->n_outputs = 0;
	for (int64_t g = pp->stage; !status && g < pp->chunks; g += pp->stages) {
		f8_value_id received = F8_NONE;
		if (g > 0)
			status = add_recv(pp, g, order, &n, &received);
		for (uint32_t p = 0; !status && p < n_program; p++) {
			f8_node_id id = graph->order[p];
			int place = pp->place[id];
			if (!pp->kept[id] || !(place == g || (place == POST && g == pp->chunks - 1)))
				continue;
			f8_node *node = &graph->nodes[id];
			for (uint32_t i = 0; g > 0 && i < node->n_inputs; i++)
				node->inputs[i] = node->inputs[i] == pp->boundary[g - 1]
							  ? received : node->inputs[i];
			order[n++] = id;
		}
		if (!status && g + 1 < pp->chunks) {
			status = add_send(pp, g, order, &n);
			// A stage without the loss outputs what it sends (the training pass seeds its
			// backward from their gradients).
			if (!status && !last && f8_graph_add_output(graph, pp->boundary[g]))
				status = nomem(pp->diag);
		}
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
	int64_t per_stage = layers / pp.stages, per_chunk = options->virtual_stage_layers;
	if (per_chunk > 0 && per_stage % per_chunk)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "--num-layers-per-virtual-pipeline-stage "
				   "%lld does not divide the %lld layers of a pipeline stage",
				   (long long)per_chunk, (long long)per_stage);
	pp.per = per_chunk > 0 ? per_chunk : per_stage;
	pp.chunks = layers / pp.per;
	pp.place = f8_calloc(graph->n_nodes + 1, sizeof *pp.place);
	pp.kept = f8_calloc(graph->n_nodes + 1, sizeof *pp.kept);
	pp.made_by = f8_calloc(graph->n_values + 1, sizeof *pp.made_by);
	pp.boundary = f8_calloc((size_t)pp.chunks, sizeof *pp.boundary);
	status = pp.place && pp.kept && pp.made_by && pp.boundary ? F8_OK : nomem(diag);
	if (!status)
		status = place_nodes(&pp);
	if (!status)
		status = tie_shared(&pp);
	if (!status)
		status = find_boundaries(&pp);
	if (!status) {
		keep_stage(&pp, pp.stage, pp.kept);
		status = rewrite(&pp);
	}
	if (!status)
		memcpy(graph->mesh, mesh, sizeof mesh);
	for (int64_t g = pp.stage; !status && report && g < pp.chunks; g += pp.stages) {
		if (g == pp.stage)
			fprintf(report, "pipeline-parallel: stage %lld of %lld", (long long)pp.stage,
				(long long)pp.stages);
		fprintf(report, "%s layers %lld to %lld", g == pp.stage ? ":" : ";",
			(long long)(g * pp.per), (long long)((g + 1) * pp.per - 1));
		if (pp.chunks > pp.stages)
			fprintf(report, " (model chunk %lld of %lld)", (long long)g, (long long)pp.chunks);
		if (g > 0)
			fprintf(report, "; receives %%%s", name_of(&pp, pp.boundary[g - 1]));
		if (g + 1 < pp.chunks)
			fprintf(report, "; sends %%%s", name_of(&pp, pp.boundary[g]));
		else
			fprintf(report, "; the head and the loss");
		if (g + pp.stages >= pp.chunks)
			fputc('\n', report);
	}
	f8_free(pp.place), f8_free(pp.kept), f8_free(pp.made_by), f8_free(pp.boundary);
	return status;
}
