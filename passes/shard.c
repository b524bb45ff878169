/*
 * The shard pass (passes/shard.h): the layout checked against the model, the mesh on the graph,
 * and the collectives of data parallelism and of the FP8 amaxes.
 *
 * requires: canonicalize, training, fp8-cast.
 */
#include "passes/shard.h" // f8_pass_shard_run, f8_parallel_options

#include <string.h> // strlen, memcpy

#include "ir/alloc.h"  // f8_calloc, f8_free
#include "ir/arena.h"  // f8_arena_alloc
#include "ir/memory.h" // f8_memory_type_bytes

bool f8_parallel_options_any(const f8_parallel_options *o) {
	return o && (o->world > 1 || o->tensor > 1 || o->pipeline > 1 || o->context > 1 ||
		     o->expert > 1);
}

static int64_t at_least_one(int64_t size) {
	return size > 0 ? size : 1;
}

f8_status f8_parallel_mesh(const f8_parallel_options *o, uint32_t *mesh, f8_diag *diag) {
	int64_t world = at_least_one(o->world), tp = at_least_one(o->tensor);
	int64_t pp = at_least_one(o->pipeline), cp = at_least_one(o->context);
	int64_t ep = at_least_one(o->expert);
	int64_t model = tp * cp * pp;
	if (world > (int64_t)1 << 20 || model > world || world % model) {
		f8_diag_set(diag, F8_ERR_ARGUMENT, "the world size %lld is not a multiple of TP %lld x "
			    "CP %lld x PP %lld = %lld", (long long)world, (long long)tp, (long long)cp,
			    (long long)pp, (long long)model);
		f8_diag_hint(diag, "the data-parallel size is what is left: world / (TP x CP x PP)");
		return F8_ERR_ARGUMENT;
	}
	int64_t data = world / model; // Megatron-LM's data-parallel size: EP x DP
	if (data % ep) {
		f8_diag_set(diag, F8_ERR_ARGUMENT, "--expert-model-parallel-size %lld does not divide "
			    "the data-parallel size %lld (world %lld / (TP %lld x CP %lld x PP %lld))",
			    (long long)ep, (long long)data, (long long)world, (long long)tp,
			    (long long)cp, (long long)pp);
		f8_diag_hint(diag, "expert parallelism takes its ranks from data parallelism, as "
			     "Megatron-LM's does");
		return F8_ERR_ARGUMENT;
	}
	mesh[F8_MESH_AXIS_TP] = (uint32_t)tp;
	mesh[F8_MESH_AXIS_CP] = (uint32_t)cp;
	mesh[F8_MESH_AXIS_EP] = (uint32_t)ep;
	mesh[F8_MESH_AXIS_DP] = (uint32_t)(data / ep);
	mesh[F8_MESH_AXIS_PP] = (uint32_t)pp;
	return F8_OK;
}

/* What the layout checks ask of the model. */
typedef struct model_facts {
	int64_t heads, query_groups; // of the first Attention (0: none)
	int64_t layers;              // "layers.<i>." scopes
	int64_t seq;                 // the tokens' second dimension (0: unknown)
	int64_t experts;             // of the first MoEDispatch (0: dense)
} model_facts;

static int64_t const_dim(const f8_type *type, int d) {
	return d < type->shape.rank && f8_dim_is_const(type->shape.dims[d])
		       ? f8_dim_value(type->shape.dims[d]) : 0;
}

static model_facts facts_of(const f8_graph *graph) {
	model_facts f = {0};
	for (uint32_t p = 0; p < graph->n_order; p++) {
		const f8_node *node = &graph->nodes[graph->order[p]];
		int layer = f8_scope_layer(node->scope, NULL);
		f.layers = layer + 1 > f.layers ? layer + 1 : f.layers;
		if (node->op == F8_OP_ATTENTION && !f.heads) {
			f.heads = const_dim(&graph->values[node->inputs[0]].type, 1);
			f.query_groups = const_dim(&graph->values[node->inputs[1]].type, 1);
		}
		if (node->op == F8_OP_MOE_DISPATCH && !f.experts)
			f.experts = f8_node_attr_int(node, "experts", 0);
	}
	for (uint32_t i = 0; i < graph->n_inputs; i++) {
		const f8_value *input = &graph->values[graph->inputs[i]];
		if (input->role == F8_ROLE_INPUT && strcmp(input->name, "tokens") == 0)
			f.seq = const_dim(&input->type, 1);
	}
	return f;
}

/* F8_ERR_ARGUMENT naming the numbers when `size` (> 1) does not divide `what` (> 0). */
static f8_status divides(int64_t size, const char *option, int64_t what, const char *of,
			 f8_diag *diag) {
	if (size <= 1 || what <= 0 || what % size == 0)
		return F8_OK;
	return f8_diag_set(diag, F8_ERR_ARGUMENT, "%s %lld does not divide the %lld %s", option,
			   (long long)size, (long long)what, of);
}

/* The layout against the model and the batch, as Megatron-LM checks it. */
static f8_status check_layout(const f8_graph *graph, const f8_parallel_options *o,
			      const uint32_t *mesh, f8_diag *diag) {
	model_facts f = facts_of(graph);
	int64_t tp = mesh[F8_MESH_AXIS_TP], pp = mesh[F8_MESH_AXIS_PP];
	int64_t cp = mesh[F8_MESH_AXIS_CP], ep = mesh[F8_MESH_AXIS_EP];
	int64_t data = ep * mesh[F8_MESH_AXIS_DP];
	f8_status status = divides(tp, "--tensor-model-parallel-size", f.heads, "attention heads",
				   diag);
	if (!status && f.query_groups != f.heads)
		status = divides(tp, "--tensor-model-parallel-size", f.query_groups,
				 "key-value heads (query groups)", diag);
	if (!status)
		status = divides(pp, "--pipeline-model-parallel-size", f.layers, "layers", diag);
	if (!status && o->virtual_stage_layers > 0 && f.layers > 0 &&
	    (f.layers / pp) % o->virtual_stage_layers)
		status = f8_diag_set(diag, F8_ERR_ARGUMENT, "--num-layers-per-virtual-pipeline-stage "
				     "%lld does not divide the %lld layers of a pipeline stage",
				     (long long)o->virtual_stage_layers, (long long)(f.layers / pp));
	if (!status && cp > 1 && f.seq > 0 && f.seq % (2 * cp))
		status = f8_diag_set(diag, F8_ERR_ARGUMENT, "the sequence of %lld tokens does not "
				     "split into 2 x --context-parallel-size = %lld chunks (causal load "
				     "balancing)", (long long)f.seq, (long long)(2 * cp));
	if (!status && ep > 1 && !f.experts)
		status = f8_diag_set(diag, F8_ERR_ARGUMENT, "--expert-model-parallel-size %lld: the "
				     "model has no experts", (long long)ep);
	if (!status)
		status = divides(ep, "--expert-model-parallel-size", f.experts, "experts", diag);
	if (!status && o->micro_batch > 0 && o->global_batch > 0 &&
	    o->global_batch % (o->micro_batch * data)) {
		f8_diag_set(diag, F8_ERR_ARGUMENT, "--global-batch-size %lld is not a multiple of "
			    "--micro-batch-size %lld x the data-parallel size %lld",
			    (long long)o->global_batch, (long long)o->micro_batch, (long long)data);
		f8_diag_hint(diag, "each data-parallel rank runs global / (micro x data-parallel) "
			     "micro-batches a step");
		status = F8_ERR_ARGUMENT;
	}
	return status;
}

/* F8_ERR_UNSUPPORTED for what the pass does not shard yet, naming the option. */
static f8_status not_yet(const f8_parallel_options *o, const uint32_t *mesh, f8_diag *diag) {
	const char *option = mesh[F8_MESH_AXIS_TP] > 1	 ? "--tensor-model-parallel-size"
			     : mesh[F8_MESH_AXIS_CP] > 1 ? "--context-parallel-size"
			     : mesh[F8_MESH_AXIS_EP] > 1 ? "--expert-model-parallel-size"
			     : mesh[F8_MESH_AXIS_PP] > 1 ? "--pipeline-model-parallel-size"
			     : o->distributed_optimizer	 ? "--use-distributed-optimizer"
			     : o->virtual_stage_layers	 ? "--num-layers-per-virtual-pipeline-stage"
							 : NULL;
	if (!option)
		return F8_OK;
	f8_diag_set(diag, F8_ERR_UNSUPPORTED, "%s: the shard pass runs data parallelism so far; "
		    "this parallelism is not built yet", option);
	f8_diag_hint(diag, "train data-parallel: leave it out, and the world size is the "
		     "data-parallel size");
	return F8_ERR_UNSUPPORTED;
}

/* "<name><suffix>" in the graph's arena. */
static const char *named(f8_graph *graph, const char *name, const char *suffix) {
	size_t a = strlen(name), b = strlen(suffix);
	char *text = f8_arena_alloc(graph->arena, a + b + 1);
	if (text) {
		memcpy(text, name, a);
		memcpy(text + a, suffix, b + 1);
	}
	return text;
}

static f8_status nomem(f8_diag *diag) {
	return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory in the shard pass");
}

/*
 * Adds an AllReduce of `inputs` (n) over `group` with `op`, in `phase` and `scope`, its outputs
 * "<input><suffix>" typed as the inputs; *out the node. It stands at the program's end until
 * the caller places it.
 */
static f8_status add_all_reduce(f8_graph *graph, const f8_value_id *inputs, uint32_t n,
				const char *group, const char *op, f8_phase phase, const char *scope,
				const char *suffix, f8_node_id *out, f8_diag *diag) {
	const char **names = f8_calloc(n + 1, sizeof *names);
	f8_status status = names ? F8_OK : nomem(diag);
	for (uint32_t i = 0; !status && i < n; i++)
		if (!(names[i] = named(graph, graph->values[inputs[i]].name, suffix)))
			status = nomem(diag);
	if (!status)
		status = f8_graph_add_node(graph, F8_OP_ALL_REDUCE, inputs, n, n, names, out, diag);
	f8_free(names);
	if (status)
		return status;
	f8_attr attrs[2] = {{.name = "group", .kind = F8_ATTR_STRING, .s = group},
			    {.name = "op", .kind = F8_ATTR_STRING, .s = op}};
	if (f8_node_set_attrs(graph, *out, attrs, 2))
		return nomem(diag);
	f8_node *node = &graph->nodes[*out];
	node->phase = phase;
	node->scope = scope;
	for (uint32_t i = 0; i < n; i++)
		graph->values[node->outputs[i]].type = graph->values[inputs[i]].type;
	return F8_OK;
}

/* Moves node `id` (the program's last) to stand just before position `before`. */
static void place_before(f8_graph *graph, f8_node_id id, uint32_t before) {
	uint32_t last = graph->n_order - 1;
	memmove(&graph->order[before + 1], &graph->order[before],
		(last - before) * sizeof *graph->order);
	graph->order[before] = id;
}

/* Marks `v` as awaiting `reduction` over the axes of `axes`. */
static void mark_partial(f8_graph *graph, f8_value_id v, uint32_t axes, f8_reduction reduction) {
	for (int axis = 0; axis < F8_MESH_AXIS_COUNT; axis++)
		if (axes & 1u << axis)
			graph->values[v].placement[axis] = (f8_placement){
				.kind = F8_PLACEMENT_KIND_PARTIAL, .reduction = reduction};
}

/*
 * Data parallelism: the gradient accumulators (the leaves a backward node adds to) summed over
 * `group` in one AllReduce at the head of phase opt, which every opt node reads instead. The
 * count and bytes into *n and *bytes.
 */
static f8_status reduce_gradients(f8_graph *graph, const char *group, uint32_t axes, uint32_t *n,
				  uint64_t *bytes, f8_diag *diag) {
	f8_value_id *grads = f8_calloc(graph->n_updates + 1, sizeof *grads);
	if (!grads)
		return nomem(diag);
	*n = 0, *bytes = 0;
	for (uint32_t i = 0; i < graph->n_updates; i++) {
		f8_value_id target = graph->updates[i].target;
		const f8_node *by = &graph->nodes[graph->values[graph->updates[i].source].producer];
		if (graph->values[target].role == F8_ROLE_OPTIMIZER_STATE &&
		    by->phase == F8_PHASE_BWD && by->op == F8_OP_ADD) {
			grads[(*n)++] = target;
			*bytes += f8_memory_type_bytes(&graph->values[target].type);
		}
	}
	f8_node_id all_reduce = F8_NONE;
	f8_status status = *n ? add_all_reduce(graph, grads, *n, group, "sum", F8_PHASE_OPT,
					      "optimizer", ".reduced", &all_reduce, diag)
			      : F8_OK;
	uint32_t first_opt = F8_NONE;
	for (uint32_t p = 0; !status && all_reduce != F8_NONE && p + 1 < graph->n_order; p++) {
		f8_node *node = &graph->nodes[graph->order[p]];
		if (node->phase != F8_PHASE_OPT)
			continue;
		first_opt = first_opt == F8_NONE ? p : first_opt;
		for (uint32_t j = 0; j < node->n_inputs; j++)
			for (uint32_t k = 0; k < *n; k++)
				if (node->inputs[j] == grads[k])
					node->inputs[j] = graph->nodes[all_reduce].outputs[k];
	}
	if (!status && all_reduce != F8_NONE) {
		place_before(graph, all_reduce, first_opt == F8_NONE ? graph->n_order - 1 : first_opt);
		for (uint32_t k = 0; k < *n; k++)
			mark_partial(graph, grads[k], axes, F8_REDUCTION_SUM);
	}
	f8_free(grads);
	return status;
}

/* FP8: each ScalingUpdate's amaxes max-reduced over `group` just before it, in one AllReduce.
 * The tables' count and amaxes into *n_tables and *n_amaxes. */
static f8_status reduce_amaxes(f8_graph *graph, const char *group, uint32_t axes,
			       uint32_t *n_tables, uint32_t *n_amaxes, f8_diag *diag) {
	*n_tables = *n_amaxes = 0;
	for (uint32_t p = 0; p < graph->n_order; p++) {
		f8_node_id update = graph->order[p];
		if (graph->nodes[update].op != F8_OP_SCALING_UPDATE)
			continue;
		uint32_t n = graph->nodes[update].n_inputs - 3;
		f8_node_id all_reduce;
		f8_status status = add_all_reduce(graph, graph->nodes[update].inputs + 3, n, group,
						  "max", graph->nodes[update].phase, "fp8", ".reduced",
						  &all_reduce, diag);
		if (status)
			return status;
		f8_node *node = &graph->nodes[update];
		for (uint32_t i = 0; i < n; i++) {
			mark_partial(graph, node->inputs[3 + i], axes, F8_REDUCTION_MAX);
			node->inputs[3 + i] = graph->nodes[all_reduce].outputs[i];
		}
		place_before(graph, all_reduce, p++);
		*n_tables += 1, *n_amaxes += n;
	}
	return F8_OK;
}

f8_status f8_pass_shard_run(f8_graph *graph, const f8_parallel_options *options, FILE *report,
			    f8_diag *diag) {
	if (!f8_parallel_options_any(options))
		return F8_OK;
	if (f8_graph_mesh_ranks(graph) > 1)
		return f8_diag_set(diag, F8_ERR_INVALID, "shard: the graph is sharded already (it has "
				   "a mesh)");
	bool backward = false;
	for (uint32_t p = 0; p < graph->n_order && !backward; p++)
		backward = graph->nodes[graph->order[p]].phase == F8_PHASE_BWD;
	if (!backward)
		return f8_diag_set(diag, F8_ERR_INVALID, "shard: the graph has no backward (the pass "
				   "shards a training step)");
	uint32_t mesh[F8_MESH_AXIS_COUNT];
	f8_status status = f8_parallel_mesh(options, mesh, diag);
	if (!status)
		status = check_layout(graph, options, mesh, diag);
	if (!status)
		status = not_yet(options, mesh, diag);
	if (status)
		return status;
	memcpy(graph->mesh, mesh, sizeof mesh);
	// The data-parallel group: EP x DP, where the ranks hold the same weights.
	uint32_t data = 0, amax = 0;
	for (int axis = 0; axis < F8_MESH_AXIS_COUNT; axis++) {
		bool spans = mesh[axis] > 1;
		data |= spans && (axis == F8_MESH_AXIS_EP || axis == F8_MESH_AXIS_DP) ? 1u << axis : 0;
		amax |= spans && axis != F8_MESH_AXIS_PP ? 1u << axis : 0;
	}
	char data_group[32], amax_group[32];
	f8_mesh_group_name(data, data_group, sizeof data_group);
	f8_mesh_group_name(amax, amax_group, sizeof amax_group);
	const char *data_name = f8_arena_strdup(graph->arena, data_group);
	const char *amax_name = f8_arena_strdup(graph->arena, amax_group);
	if (!data_name || !amax_name)
		return nomem(diag);
	uint32_t n_grads = 0, n_tables = 0, n_amaxes = 0;
	uint64_t grad_bytes = 0;
	if (data)
		status = reduce_gradients(graph, data_name, data, &n_grads, &grad_bytes, diag);
	if (!status && amax)
		status = reduce_amaxes(graph, amax_name, amax, &n_tables, &n_amaxes, diag);
	if (!status && report) {
		fprintf(report, "shard: mesh");
		for (int axis = 0; axis < F8_MESH_AXIS_COUNT; axis++)
			fprintf(report, " %s=%u", f8_mesh_axis_name((f8_mesh_axis)axis), mesh[axis]);
		fprintf(report, "\nshard: %u gradients summed over %s in one AllReduce a step, %llu "
			"bytes\n", n_grads, data_group, (unsigned long long)grad_bytes);
		if (n_tables)
			fprintf(report, "shard: the %u amaxes of %u scaling tables max-reduced over %s, "
				"one AllReduce per table and phase\n", n_amaxes, n_tables, amax_group);
	}
	return status;
}
