/*
 * The shard pass (passes/shard.h): the layout checked against the model, the mesh on the graph,
 * and the collectives of data parallelism (the distributed optimizer's buckets too) and of the
 * FP8 amaxes; sequence parallelism's FP8 all-gather is passes/shard_fp8_gather.c.
 *
 * requires: canonicalize, training, fp8-cast.
 */
#include "passes/shard.h" // f8_pass_shard_run, f8_parallel_options

#include <string.h> // strlen, memcpy

#include "ir/alloc.h"  // f8_calloc, f8_free
#include "ir/arena.h"  // f8_arena_alloc, f8_arena_concat
#include "ir/memory.h" // f8_memory_type_bytes
#include "ir/verify.h" // f8_node_infer_types
#include "passes/shard_internal.h" // f8_shard_gather_fp8

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
	if (!status && o->virtual_stage_layers > 0 && pp < 2)
		status = f8_diag_set(diag, F8_ERR_ARGUMENT, "--num-layers-per-virtual-pipeline-stage "
				     "interleaves model chunks over the pipeline's stages: it needs "
				     "--pipeline-model-parallel-size above 1");
	if (!status && o->virtual_stage_layers > 0 && f.layers > 0 &&
	    (f.layers / pp) % o->virtual_stage_layers)
		status = f8_diag_set(diag, F8_ERR_ARGUMENT, "--num-layers-per-virtual-pipeline-stage "
				     "%lld does not divide the %lld layers of a pipeline stage",
				     (long long)o->virtual_stage_layers, (long long)(f.layers / pp));
	int64_t micro_batches = o->micro_batch > 0 && o->global_batch > 0
					? o->global_batch / (o->micro_batch * data) : 0;
	bool interleaved = o->virtual_stage_layers > 0 && f.layers > 0 &&
			   f.layers / pp > o->virtual_stage_layers;
	if (!status && interleaved && micro_batches > 0 && micro_batches % pp) {
		f8_diag_set(diag, F8_ERR_ARGUMENT, "the interleaved schedule runs the micro-batches "
			    "in groups of --pipeline-model-parallel-size %lld, and a step has %lld "
			    "(--global-batch-size / (--micro-batch-size x the data-parallel size))",
			    (long long)pp, (long long)micro_batches);
		f8_diag_hint(diag, "as Megatron-LM, the interleaved schedule needs the micro-batches "
			     "a step to be a multiple of the pipeline's stages");
		status = F8_ERR_ARGUMENT;
	}
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

f8_status f8_parallel_check(const f8_graph *graph, const f8_parallel_options *options,
			    uint32_t *mesh, f8_diag *diag) {
	f8_status status = f8_parallel_mesh(options, mesh, diag);
	return status ? status : check_layout(graph, options, mesh, diag);
}

f8_status f8_parallel_forward_mesh(const f8_graph *graph, const f8_parallel_options *options,
				   const char *pass, uint32_t *mesh, f8_diag *diag) {
	for (uint32_t p = 0; p < graph->n_order; p++)
		if (graph->nodes[graph->order[p]].phase != F8_PHASE_FWD)
			return f8_diag_set(diag, F8_ERR_INVALID, "%s: the graph has a backward "
					   "already (the pass splits the forward, before training)",
					   pass);
	// An earlier pass (tensor- or context-parallel) checked the layout on the whole model.
	bool sharded = f8_graph_mesh_ranks(graph) > 1;
	f8_status status = sharded ? f8_parallel_mesh(options, mesh, diag)
				   : f8_parallel_check(graph, options, mesh, diag);
	if (!status && sharded && memcmp(graph->mesh, mesh, F8_MESH_AXIS_COUNT * sizeof *mesh))
		status = f8_diag_set(diag, F8_ERR_INVALID, "%s: the graph's mesh is not the one the "
				     "parallel options make", pass);
	return status;
}

/* F8_ERR_ARGUMENT for --sequence-parallel without tensor parallelism to split over. */
static f8_status check_sequence_parallel(const f8_parallel_options *o, const uint32_t *mesh,
					 f8_diag *diag) {
	if (o->sequence_parallel && mesh[F8_MESH_AXIS_TP] < 2)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "--sequence-parallel splits the sequence "
				   "over the tensor-parallel ranks: it needs "
				   "--tensor-model-parallel-size above 1");
	return F8_OK;
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
		if (!(names[i] = f8_arena_concat(graph->arena, graph->values[inputs[i]].name,
						 suffix)))
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

/* Whether leaf `v` (a parameter, or its accumulator or moments) holds this rank's experts: split
 * over ep by the expert-parallel pass. */
static bool holds_experts(const f8_graph *graph, f8_value_id v) {
	return graph->values[v].placement[F8_MESH_AXIS_EP].kind == F8_PLACEMENT_KIND_SHARD;
}

/* The `n` accumulators `grads` summed over the group of `axes` in one AllReduce placed at the
 * head of phase opt, which every opt node reads instead. */
static f8_status sum_over(f8_graph *graph, const f8_value_id *grads, uint32_t n, uint32_t axes,
			  f8_diag *diag) {
	char name[32];
	const char *group = f8_arena_strdup(graph->arena, f8_mesh_group_name(axes, name,
									       sizeof name));
	f8_node_id all_reduce = F8_NONE;
	f8_status status = !group ? nomem(diag)
			   : add_all_reduce(graph, grads, n, group, "sum", F8_PHASE_OPT, "optimizer",
					    ".reduced", &all_reduce, diag);
	uint32_t first_opt = F8_NONE;
	for (uint32_t p = 0; !status && p + 1 < graph->n_order; p++) {
		f8_node *node = &graph->nodes[graph->order[p]];
		if (node->phase != F8_PHASE_OPT)
			continue;
		first_opt = first_opt == F8_NONE ? p : first_opt;
		for (uint32_t j = 0; j < node->n_inputs; j++)
			for (uint32_t k = 0; k < n; k++)
				if (node->inputs[j] == grads[k])
					node->inputs[j] = graph->nodes[all_reduce].outputs[k];
	}
	if (status)
		return status;
	place_before(graph, all_reduce, first_opt == F8_NONE ? graph->n_order - 1 : first_opt);
	for (uint32_t k = 0; k < n; k++)
		mark_partial(graph, grads[k], axes, F8_REDUCTION_SUM);
	return F8_OK;
}

/*
 * Data parallelism: the gradient accumulators (the leaves a backward node adds to) summed over
 * the group of `axes` in one AllReduce at the head of phase opt, which every opt node reads
 * instead; those the distributed optimizer reduce-scatters (`scattered`, by value) are left to
 * it. The experts' (expert parallelism's) are summed in a second one over the same group
 * without ep: the ranks that hold the same experts (none when that is one rank). The counts of
 * the others and of the experts' into *n and *n_experts, the bytes summed into *bytes.
 */
static f8_status reduce_gradients(f8_graph *graph, uint32_t axes, const bool *scattered,
				  uint32_t *n, uint32_t *n_experts, uint64_t *bytes, f8_diag *diag) {
	f8_value_id *grads = f8_calloc(2 * (size_t)graph->n_updates + 1, sizeof *grads);
	if (!grads)
		return nomem(diag);
	f8_value_id *experts = grads + graph->n_updates;
	uint32_t n_grads = 0, n_summed = 0; // of the experts': those summed
	uint32_t expert_axes = axes & ~(1u << F8_MESH_AXIS_EP);
	*n = *n_experts = 0, *bytes = 0;
	for (uint32_t i = 0; i < graph->n_updates; i++) {
		f8_value_id target = graph->updates[i].target;
		const f8_node *by = &graph->nodes[graph->values[graph->updates[i].source].producer];
		if (graph->values[target].role != F8_ROLE_OPTIMIZER_STATE ||
		    by->phase != F8_PHASE_BWD || by->op != F8_OP_ADD || scattered[target])
			continue;
		bool expert = holds_experts(graph, target);
		*n_experts += expert;
		if (expert && !expert_axes)
			continue;
		if (expert)
			experts[n_summed++] = target;
		else
			grads[n_grads++] = target;
		*bytes += f8_memory_type_bytes(&graph->values[target].type);
	}
	*n = n_grads;
	f8_status status = n_grads ? sum_over(graph, grads, n_grads, axes, diag) : F8_OK;
	if (!status && n_summed)
		status = sum_over(graph, experts, n_summed, expert_axes, diag);
	f8_free(grads);
	return status;
}

/*
 * The distributed optimizer (Megatron-LM's --use-distributed-optimizer; ZeRO stage 1): each
 * data-parallel rank keeps and updates 1/ranks of every parameter's AdamW state. Per trained
 * parameter whose first dimension the ranks divide: the gradient accumulator reduce-scattered
 * along it (instead of all-reduced), this rank's rows of the parameter (LocalShard), AdamW on
 * those rows with moments of that shape (placed shard along dim 0), and the updated rows
 * all-gathered into the parameter. A parameter the ranks do not divide keeps the replicated
 * update (all-reduced gradient, whole moments). An expert's parameters (expert parallelism's)
 * are split so over the ranks that hold the same experts, as Megatron-LM's expert data-parallel
 * group splits them. The gradient norm is the square root of the shards' squared norm summed
 * over the ranks, plus the replicated gradients'.
 */
/* A group the optimizer's state is split over: its name, axes and ranks. */
typedef struct sharding {
	const char *group;
	uint32_t axes, ranks;
} sharding;

typedef struct distributor {
	f8_graph *graph;
	sharding data;    // the data-parallel ranks (ep+dp, cp+dp...)
	sharding experts; // an expert's: those of the same experts (data without ep)
	f8_diag *diag;
	f8_node_id *before, *after, *next; // per node: chains of new nodes to place around it
	uint32_t capacity, n_original;     // new nodes' room; the program's length before
	bool *scattered;                   // per value: an accumulator this pass reduce-scatters
	f8_value_id *shard_of;             // per scattered accumulator: this rank's reduced rows
	uint32_t n_sharded, n_kept;
	uint64_t bytes;                    // the reduce-scattered gradients' bytes
	bool distributed;                  // the distributed optimizer runs (on some rank)
} distributor;

/* Appends new node `id` to a chain (*head, linked through d->next). */
static void chain(distributor *d, f8_node_id *head, f8_node_id id) {
	while (*head != F8_NONE)
		head = &d->next[*head];
	*head = id;
}

/* Adds a node of `op` in phase opt (scope "optimizer"), at the program's end, its outputs
 * typed; its output (if any) into *out. */
static f8_status add_opt(f8_graph *graph, f8_op op, const f8_value_id *inputs, uint32_t n,
			 const f8_attr *attrs, uint32_t n_attrs, const char *name, f8_node_id *id,
			 f8_diag *diag) {
	f8_status status = f8_graph_add_node(graph, op, inputs, n, name ? 1 : 0,
					     name ? &name : NULL, id, diag);
	if (!status && n_attrs && f8_node_set_attrs(graph, *id, attrs, n_attrs))
		status = nomem(diag);
	if (status)
		return status;
	graph->nodes[*id].phase = F8_PHASE_OPT;
	graph->nodes[*id].scope = "optimizer";
	f8_type type;
	if (name && !(status = f8_node_infer_types(graph, *id, &type, diag)))
		graph->values[graph->nodes[*id].outputs[0]].type = type;
	return status;
}

/* add_opt for the distributor, within the room it made for new nodes. */
static f8_status add_opt_node(distributor *d, f8_op op, const f8_value_id *inputs, uint32_t n,
			      const f8_attr *attrs, uint32_t n_attrs, const char *name,
			      f8_node_id *out) {
	if (d->graph->n_nodes + 1 >= d->capacity)
		return f8_diag_set(d->diag, F8_ERR_INVALID, "shard: too many new nodes (a bug)");
	// appended to the program: place_chains places it
	return add_opt(d->graph, op, inputs, n, attrs, n_attrs, name, out, d->diag);
}

/* The group parameter `p`'s optimizer state is split over. */
static const sharding *sharding_of(const distributor *d, f8_value_id p) {
	return holds_experts(d->graph, p) ? &d->experts : &d->data;
}

/* A collective of `op` along axis 0 over the group of `s`, of `input`. */
static f8_status add_parts(distributor *d, const sharding *s, f8_op op, f8_value_id input,
			   const char *suffix, f8_node_id *out) {
	f8_attr attrs[3] = {{.name = "group", .kind = F8_ATTR_STRING, .s = s->group},
			    {.name = "axis", .kind = F8_ATTR_INT, .i = 0},
			    {.name = "ranks", .kind = F8_ATTR_INT, .i = s->ranks}};
	f8_graph *graph = d->graph;
	const char *name = f8_arena_concat(graph->arena, graph->values[input].name, suffix);
	return name ? add_opt_node(d, op, &input, 1, attrs, 3, name, out) : nomem(d->diag);
}

/* Whether parameter `p`'s first dimension is a constant its group's ranks (more than one)
 * divide. */
static bool divisible(const distributor *d, f8_value_id p) {
	const f8_shape *shape = &d->graph->values[p].type.shape;
	uint32_t ranks = sharding_of(d, p)->ranks;
	return ranks > 1 && shape->rank >= 1 && f8_dim_is_const(shape->dims[0]) &&
	       f8_dim_value(shape->dims[0]) % ranks == 0;
}

/* The moments leaf `v` as this rank's rows of the group of `s`, placed shard along dim 0 (after
 * any axis that splits it already: an expert's moments are split over ep first). */
static void shard_leaf(distributor *d, const sharding *s, f8_value_id v) {
	f8_value *value = &d->graph->values[v];
	value->type.shape.dims[0] = f8_dim_const(f8_dim_value(value->type.shape.dims[0]) / s->ranks);
	for (int axis = 0; axis < F8_MESH_AXIS_COUNT; axis++)
		if (s->axes & 1u << axis)
			value->placement[axis] = (f8_placement){.kind = F8_PLACEMENT_KIND_SHARD,
								.dim = 0};
}

/* One AdamW node `id` on shards: its gradient reduce-scattered (placed before `head`, the
 * first opt node; the shard's value into d->shard_of), the parameter's rows, the update
 * gathered. */
static f8_status shard_adamw(distributor *d, f8_node_id id, f8_node_id head) {
	f8_graph *graph = d->graph;
	f8_value_id p = graph->nodes[id].inputs[0], acc = graph->nodes[id].inputs[1];
	const sharding *s = sharding_of(d, p);
	f8_node_id scatter, local, gather;
	f8_status status = add_parts(d, s, F8_OP_REDUCE_SCATTER, acc, ".shard", &scatter);
	if (!status)
		status = add_parts(d, s, F8_OP_LOCAL_SHARD, p, ".shard", &local);
	if (status)
		return status;
	d->scattered[acc] = true;
	d->shard_of[acc] = graph->nodes[scatter].outputs[0];
	d->bytes += f8_memory_type_bytes(&graph->values[acc].type);
	mark_partial(graph, acc, s->axes, F8_REDUCTION_SUM);
	shard_leaf(d, s, graph->nodes[id].inputs[2]);
	shard_leaf(d, s, graph->nodes[id].inputs[3]);
	f8_node *adamw = &graph->nodes[id];
	adamw->inputs[0] = graph->nodes[local].outputs[0];
	adamw->inputs[1] = graph->nodes[scatter].outputs[0];
	f8_type types[3];
	if ((status = f8_node_infer_types(graph, id, types, d->diag)))
		return status;
	for (int i = 0; i < 3; i++)
		graph->values[graph->nodes[id].outputs[i]].type = types[i];
	if ((status = add_parts(d, s, F8_OP_ALL_GATHER, graph->nodes[id].outputs[0], ".gathered",
				&gather)))
		return status;
	for (uint32_t i = 0; i < graph->n_updates; i++)
		if (graph->updates[i].target == p)
			graph->updates[i].source = graph->nodes[gather].outputs[0];
	chain(d, &d->before[head], scatter);
	chain(d, &d->before[id], local);
	chain(d, &d->after[id], gather);
	d->n_sharded++;
	return F8_OK;
}

/*
 * The gradient norm over split gradients: GlobalNorm `id`'s inputs in classes by the axes
 * their ranks split them over (tp where the tensor-parallel pass split the parameter, ep where
 * the expert-parallel pass did, the data-parallel axes where the distributed optimizer
 * reduce-scatters it, several of them, or none), each
 * class's norm squared and summed over its axes' group, the classes' squares added; `id`
 * becomes the square root of that sum, so its value (what the loop and clipping read) is the
 * whole norm, and every rank's is the same.
 */
static f8_status split_norm(distributor *d, f8_node_id id) {
	f8_graph *graph = d->graph;
	enum { CLASSES = 8 }; // the subsets of {tp, the distributed optimizer's, ep}, with pp
	uint32_t n = graph->nodes[id].n_inputs, masks[CLASSES] = {0}, n_classes = 0;
	f8_value_id *members = f8_calloc(CLASSES * (size_t)n + 1, sizeof *members);
	uint32_t counts[CLASSES] = {0};
	if (!members)
		return nomem(d->diag);
	for (uint32_t i = 0; i < n; i++) {
		f8_value_id v = graph->nodes[id].inputs[i];
		bool tp = graph->values[v].placement[F8_MESH_AXIS_TP].kind == F8_PLACEMENT_KIND_SHARD;
		// An expert's shards: over its group and ep, which is the data-parallel group.
		uint32_t mask = (tp ? 1u << F8_MESH_AXIS_TP : 0) | (d->scattered[v] ? d->data.axes : 0) |
				(holds_experts(graph, v) ? 1u << F8_MESH_AXIS_EP : 0) |
				(graph->mesh[F8_MESH_AXIS_PP] > 1 ? 1u << F8_MESH_AXIS_PP : 0);
		uint32_t c = 0;
		while (c < n_classes && masks[c] != mask)
			c++;
		if (c == n_classes)
			masks[n_classes++] = mask;
		members[(size_t)c * n + counts[c]++] = d->scattered[v] ? d->shard_of[v] : v;
	}
	// The classes in one order on every rank; under PP every class any stage can have, an
	// empty one as a zero: the stages hold different parameters, and each class's AllReduce
	// must be every rank's.
	uint32_t pp = graph->mesh[F8_MESH_AXIS_PP] > 1 ? 1u << F8_MESH_AXIS_PP : 0;
	if (pp) {
		uint32_t tp = graph->mesh[F8_MESH_AXIS_TP] > 1 ? 1u << F8_MESH_AXIS_TP : 0;
		uint32_t data = d->distributed ? d->data.axes : 0;
		uint32_t ep = graph->mesh[F8_MESH_AXIS_EP] > 1 ? 1u << F8_MESH_AXIS_EP : 0;
		for (uint32_t k = 0; k < CLASSES; k++) {
			uint32_t candidate = pp | (k & 1 ? tp : 0) | (k & 2 ? data : 0) |
					     (k & 4 ? ep : 0);
			uint32_t c = 0;
			while (c < n_classes && masks[c] != candidate)
				c++;
			if (c == n_classes && n_classes < CLASSES)
				masks[n_classes++] = candidate;
		}
	}
	for (uint32_t a = 0; a < n_classes; a++) // ascending masks, the members moved along
		for (uint32_t b = a + 1; b < n_classes; b++) {
			if (masks[b] >= masks[a])
				continue;
			uint32_t mask = masks[a], count = counts[a];
			masks[a] = masks[b], counts[a] = counts[b];
			masks[b] = mask, counts[b] = count;
			for (uint32_t i = 0; i < n; i++) {
				f8_value_id swap = members[(size_t)a * n + i];
				members[(size_t)a * n + i] = members[(size_t)b * n + i];
				members[(size_t)b * n + i] = swap;
			}
		}
	const char *base = graph->values[graph->nodes[id].outputs[0]].name;
	f8_value_id total = F8_NONE;
	f8_status status = F8_OK;
	for (uint32_t c = 0; !status && c < n_classes; c++) {
		char group[32], suffix[48];
		f8_mesh_group_name(masks[c], group, sizeof group);
		snprintf(suffix, sizeof suffix, ".%s", masks[c] ? group : "whole");
		for (char *at = suffix; *at; at++)
			*at = *at == '+' ? '_' : *at;
		const char *name = f8_arena_concat(graph->arena, base, suffix);
		f8_node_id norm, square, sum = F8_NONE, add;
		uint8_t bytes[8];
		f8_tensor_data zero = f8_tensor_data_make_scalar(F8_DTYPE_F32, 0.0, bytes);
		f8_attr value = {.name = "value", .kind = F8_ATTR_TENSOR, .tensor = &zero};
		status = counts[c] ? add_opt_node(d, F8_OP_GLOBAL_NORM, &members[(size_t)c * n],
						  counts[c], NULL, 0, name, &norm)
				   : add_opt_node(d, F8_OP_CONSTANT, NULL, 0, &value, 1, name, &norm);
		f8_value_id last = status ? F8_NONE : graph->nodes[norm].outputs[0];
		f8_value_id pair[2] = {last, last};
		if (!status)
			status = add_opt_node(d, F8_OP_MUL, pair, 2, NULL, 0,
					      f8_arena_concat(graph->arena, name, "_square"),
					      &square);
		if (!status) {
			chain(d, &d->before[id], norm);
			chain(d, &d->before[id], square);
			last = graph->nodes[square].outputs[0];
		}
		const char *over = masks[c] ? f8_arena_strdup(graph->arena, group) : NULL;
		f8_attr sum_attrs[2] = {{.name = "group", .kind = F8_ATTR_STRING, .s = over},
					{.name = "op", .kind = F8_ATTR_STRING, .s = "sum"}};
		if (!status && masks[c] && !over)
			status = nomem(d->diag);
		if (!status && masks[c])
			status = add_opt_node(d, F8_OP_ALL_REDUCE, &last, 1, sum_attrs, 2,
					      f8_arena_concat(graph->arena, name, "_square_sum"),
					      &sum);
		if (!status && sum != F8_NONE) {
			chain(d, &d->before[id], sum);
			last = graph->nodes[sum].outputs[0];
		}
		if (!status && total != F8_NONE) {
			f8_value_id both[2] = {total, last};
			char partial[24];
			snprintf(partial, sizeof partial, ".square_%u", c);
			const char *sum_name = f8_arena_concat(graph->arena, base,
							       c + 1 == n_classes ? ".square" : partial);
			status = add_opt_node(d, F8_OP_ADD, both, 2, NULL, 0, sum_name, &add);
			if (!status) {
				chain(d, &d->before[id], add);
				last = graph->nodes[add].outputs[0];
			}
		}
		total = last;
	}
	f8_free(members);
	if (status)
		return status;
	f8_node *root = &graph->nodes[id]; // GlobalNorm becomes the square root of the total
	f8_value_id *input = f8_arena_alloc(graph->arena, sizeof *input);
	if (!input)
		return nomem(d->diag);
	*input = total;
	root->op = F8_OP_SQRT;
	root->inputs = input;
	root->n_inputs = 1;
	f8_type type;
	return f8_node_infer_types(graph, id, &type, d->diag);
}

/* The program with the new nodes placed around their anchors. */
static f8_status place_chains(distributor *d) {
	f8_graph *graph = d->graph;
	f8_node_id *order = f8_calloc(graph->n_nodes + 1, sizeof *order);
	if (!order)
		return nomem(d->diag);
	uint32_t n = 0;
	for (uint32_t p = 0; p < d->n_original; p++) {
		f8_node_id id = graph->order[p];
		for (f8_node_id k = d->before[id]; k != F8_NONE; k = d->next[k])
			order[n++] = k;
		order[n++] = id;
		for (f8_node_id k = d->after[id]; k != F8_NONE; k = d->next[k])
			order[n++] = k;
	}
	f8_status status = f8_graph_set_order(graph, order, n) ? nomem(d->diag) : F8_OK;
	f8_free(order);
	return status;
}

/* The program's chains and the per-value arrays, with room for the new nodes: three per AdamW
 * (the distributed optimizer's), four per class of the gradient norm and three to add them. */
static f8_status distributor_init(distributor *d) {
	f8_graph *graph = d->graph;
	uint32_t n_adamw = 0;
	for (uint32_t p = 0; p < graph->n_order; p++)
		n_adamw += graph->nodes[graph->order[p]].op == F8_OP_ADAMW;
	d->capacity = graph->n_nodes + 3 * n_adamw + 20;
	d->n_original = graph->n_order;
	d->before = f8_malloc(d->capacity * sizeof *d->before);
	d->after = f8_malloc(d->capacity * sizeof *d->after);
	d->next = f8_malloc(d->capacity * sizeof *d->next);
	d->scattered = f8_calloc(graph->n_values + 1, sizeof *d->scattered);
	d->shard_of = f8_calloc(graph->n_values + 1, sizeof *d->shard_of);
	if (!d->before || !d->after || !d->next || !d->scattered || !d->shard_of)
		return nomem(d->diag);
	for (uint32_t i = 0; i < d->capacity; i++)
		d->before[i] = d->after[i] = d->next[i] = F8_NONE;
	return F8_OK;
}

static void distributor_destroy(distributor *d) {
	f8_free(d->before);
	f8_free(d->after);
	f8_free(d->next);
	f8_free(d->scattered);
	f8_free(d->shard_of);
}

static f8_status distribute_optimizer(distributor *d) {
	f8_graph *graph = d->graph;
	f8_node_id head = F8_NONE;
	for (uint32_t p = 0; p < graph->n_order && head == F8_NONE; p++)
		head = graph->nodes[graph->order[p]].phase == F8_PHASE_OPT ? graph->order[p] : head;
	f8_status status = F8_OK;
	for (uint32_t p = 0; !status && p < d->n_original; p++) {
		f8_node_id id = graph->order[p];
		const f8_node *node = &graph->nodes[id];
		if (node->op != F8_OP_ADAMW)
			continue;
		f8_value_id acc = node->inputs[1];
		if (!divisible(d, node->inputs[0]) ||
		    graph->values[acc].role != F8_ROLE_OPTIMIZER_STATE) {
			d->n_kept++;
			continue;
		}
		status = shard_adamw(d, id, head);
	}
	return status;
}

/* The elements of a bucket at most: Megatron-LM's default bucket size (40M parameters), which
 * bounds the staging a packed collective needs. */
#define BUCKET_ELEMENTS 40000000.0

/* The `count` collectives `members` (program order) packed into one: the first (a
 * ReduceScatter's place) or the last (an AllGather's) takes the others' inputs and outputs,
 * which keep their names; the others leave the program (`order`: room for it). */
static f8_status pack(f8_graph *graph, const f8_node_id *members, uint32_t count, bool gather,
		      f8_node_id *order, f8_diag *diag) {
	f8_node_id kept = members[gather ? count - 1 : 0];
	f8_value_id *inputs = f8_arena_alloc(graph->arena, count * sizeof *inputs);
	f8_value_id *outputs = f8_arena_alloc(graph->arena, count * sizeof *outputs);
	if (!inputs || !outputs)
		return nomem(diag);
	for (uint32_t k = 0; k < count; k++) {
		const f8_node *member = &graph->nodes[members[k]];
		inputs[k] = member->inputs[0];
		outputs[k] = member->outputs[0];
		graph->values[outputs[k]].producer = kept;
		graph->values[outputs[k]].output_index = k;
	}
	f8_node *packed = &graph->nodes[kept];
	packed->inputs = inputs, packed->n_inputs = count;
	packed->outputs = outputs, packed->n_outputs = count;
	uint32_t length = 0;
	for (uint32_t p = 0; p < graph->n_order; p++) {
		f8_node_id id = graph->order[p];
		bool merged = false;
		for (uint32_t k = 0; k < count && !merged; k++)
			merged = members[k] == id && id != kept;
		if (!merged)
			order[length++] = id;
	}
	return f8_graph_set_order(graph, order, length) ? nomem(diag) : F8_OK;
}

/*
 * The distributed optimizer's buckets: its ReduceScatters over `group` (at the head of phase
 * opt, one per gradient) packed into one a bucket, at the bucket's first one's place, and its
 * AllGathers (one after each AdamW) into one a bucket, at the bucket's last one's place (after
 * every update it gathers), as Megatron-LM's distributed optimizer reduce-scatters its gradient
 * buffer and all-gathers its parameter buffer a bucket at a time. A bucket holds one dtype and
 * up to BUCKET_ELEMENTS elements of the whole parameters (a larger one alone), in program
 * order.
 */
static f8_status pack_buckets(f8_graph *graph, f8_op op, const char *group, f8_diag *diag) {
	bool gather = op == F8_OP_ALL_GATHER;
	f8_node_id *members = f8_calloc(graph->n_order + 1, sizeof *members);
	f8_node_id *order = f8_calloc(graph->n_order + 1, sizeof *order);
	f8_status status = members && order ? F8_OK : nomem(diag);
	for (int dtype = 0; !status && dtype < F8_DTYPE_COUNT; dtype++) {
		uint32_t count = 0;
		for (uint32_t p = 0; p < graph->n_order; p++) {
			const f8_node *node = &graph->nodes[graph->order[p]];
			if (node->op == op && node->phase == F8_PHASE_OPT && node->n_inputs == 1 &&
			    strcmp(f8_node_attr_string(node, "group", ""), group) == 0 &&
			    !f8_node_attr_int(node, "axis", 0) &&
			    graph->values[node->inputs[0]].type.dtype == (f8_dtype)dtype)
				members[count++] = graph->order[p];
		}
		for (uint32_t first = 0, next; !status && first < count; first = next) {
			double elements = 0;
			for (next = first; next < count; next++) { // the whole parameter's elements
				const f8_node *member = &graph->nodes[members[next]];
				double more = (double)f8_memory_type_bytes(
						      &graph->values[member->inputs[0]].type) /
					      (double)f8_dtype_get_info((f8_dtype)dtype)->bytes *
					      (gather ? (double)f8_node_attr_int(member, "ranks", 1) : 1);
				if (next > first && elements + more > BUCKET_ELEMENTS)
					break;
				elements += more;
			}
			if (next - first > 1)
				status = pack(graph, members + first, next - first, gather, order, diag);
		}
	}
	f8_free(members);
	f8_free(order);
	return status;
}

/* Tensor and expert parallelism's optimizer state: each AdamW's accumulator and moments placed
 * as its parameter, which the tensor- or expert-parallel pass split (before the distributed
 * optimizer splits them further). The count of split parameters into *n. */
static void place_split_state(f8_graph *graph, uint32_t *n) {
	static const f8_mesh_axis axes[2] = {F8_MESH_AXIS_TP, F8_MESH_AXIS_EP};
	*n = 0;
	for (uint32_t p = 0; p < graph->n_order; p++) {
		const f8_node *node = &graph->nodes[graph->order[p]];
		if (node->op != F8_OP_ADAMW)
			continue;
		bool split = false;
		for (int a = 0; a < 2; a++) {
			const f8_placement *by = &graph->values[node->inputs[0]].placement[axes[a]];
			if (by->kind != F8_PLACEMENT_KIND_SHARD)
				continue;
			for (uint32_t i = 1; i < 4 && i < node->n_inputs; i++)
				if (f8_role_is_leaf(graph->values[node->inputs[i]].role))
					graph->values[node->inputs[i]].placement[axes[a]] = *by;
			split = true;
		}
		*n += split;
	}
}

/*
 * Pipeline parallelism's tied parameters (placed tied=pp: the embedding table the first and
 * the last stage both hold): at the head of phase opt, each one's gradient accumulator summed
 * between the two stages, the first stage sending before it receives and the last after, so
 * that both add the same two terms in the same order (the same bits); every opt node reads
 * the sum, but the last stage's gradient norm, which leaves it to the first's. The count into
 * *n.
 */
static f8_status exchange_tied(f8_graph *graph, uint32_t *n, f8_diag *diag) {
	*n = 0;
	// The stage, from its forward's messages over pp: the first stage's begin with a Send (its
	// first chunk receives nothing), the last stage's end with a Recv (its last chunk sends
	// nothing); under 1F1B and interleaved alike.
	f8_op first_message = F8_OP_COUNT, last_message = F8_OP_COUNT;
	uint32_t first_opt = F8_NONE;
	for (uint32_t p = 0; p < graph->n_order; p++) {
		const f8_node *node = &graph->nodes[graph->order[p]];
		bool pp = strcmp(f8_node_attr_string(node, "group", ""), "pp") == 0;
		if (node->phase == F8_PHASE_FWD && pp &&
		    (node->op == F8_OP_SEND || node->op == F8_OP_RECV)) {
			first_message = first_message == F8_OP_COUNT ? node->op : first_message;
			last_message = node->op;
		}
		first_opt = first_opt == F8_NONE && node->phase == F8_PHASE_OPT ? p : first_opt;
	}
	bool sends = first_message == F8_OP_SEND, receives = last_message == F8_OP_RECV;
	if (sends == receives || first_opt == F8_NONE)
		return F8_OK; // a middle stage (or none): it holds no tied parameter
	int64_t peer = sends ? (int64_t)graph->mesh[F8_MESH_AXIS_PP] - 1 : 0;
	// The tied parameters' AdamW nodes first: the program moves as the exchanges go in.
	f8_node_id *tied = f8_calloc(graph->n_order + 1, sizeof *tied);
	uint32_t n_tied = 0;
	if (!tied)
		return nomem(diag);
	for (uint32_t p = 0; p < graph->n_order; p++) {
		const f8_node *node = &graph->nodes[graph->order[p]];
		if (node->op == F8_OP_ADAMW &&
		    graph->values[node->inputs[0]].placement[F8_MESH_AXIS_PP].kind ==
			    F8_PLACEMENT_KIND_TIED)
			tied[n_tied++] = graph->order[p];
	}
	f8_status status = F8_OK;
	for (uint32_t t = 0; !status && t < n_tied; t++) {
		f8_node_id adamw = tied[t];
		f8_value_id acc = graph->nodes[adamw].inputs[1];
		const f8_type *type = &graph->values[acc].type;
		f8_dim dims[F8_MAX_RANK];
		memcpy(dims, type->shape.dims, sizeof dims);
		f8_attr attrs[4] = {{.name = "group", .kind = F8_ATTR_STRING, .s = "pp"},
				    {.name = "peer", .kind = F8_ATTR_INT, .i = peer},
				    {.name = "dtype", .kind = F8_ATTR_DTYPE, .dtype = type->dtype},
				    {.name = "shape", .kind = F8_ATTR_DIMS,
				     .dims = {.n = type->shape.rank, .items = dims}}};
		const char *name = graph->values[acc].name;
		const char *other_name = f8_arena_concat(graph->arena, name, ".tied_other");
		const char *sum_name = f8_arena_concat(graph->arena, name, ".tied");
		// In program order (each new node is the program's last until placed): the first
		// stage sends, then receives; the last receives, then sends.
		uint32_t at = first_opt + 3 * *n;
		f8_node_id send = F8_NONE, recv = F8_NONE, add = F8_NONE;
		for (int step = 0; !status && step < 2; step++) {
			bool sending = (step == 0) == sends;
			status = sending ? add_opt(graph, F8_OP_SEND, &acc, 1, attrs, 2, NULL, &send,
						   diag)
					 : add_opt(graph, F8_OP_RECV, NULL, 0, attrs, 4, other_name,
						   &recv, diag);
			if (!status)
				place_before(graph, sending ? send : recv, at++);
		}
		if (status)
			break;
		f8_value_id other = graph->nodes[recv].outputs[0];
		f8_value_id terms[2] = {sends ? acc : other, sends ? other : acc};
		if ((status = add_opt(graph, F8_OP_ADD, terms, 2, NULL, 0, sum_name, &add, diag)))
			break;
		place_before(graph, add, at);
		f8_value_id sum = graph->nodes[add].outputs[0];
		for (int axis = 0; axis < F8_MESH_AXIS_COUNT; axis++) // split as the accumulator
			if (axis != F8_MESH_AXIS_PP)
				graph->values[sum].placement[axis] = graph->values[other].placement[axis] =
					graph->values[acc].placement[axis];
		for (uint32_t q = 0; q < graph->n_order; q++) { // opt's readers read the sum
			f8_node_id id = graph->order[q];
			f8_node *node = &graph->nodes[id];
			if (node->phase != F8_PHASE_OPT || id == send || id == add)
				continue;
			uint32_t kept = 0;
			for (uint32_t i = 0; i < node->n_inputs; i++) {
				bool norm = node->op == F8_OP_GLOBAL_NORM && node->inputs[i] == acc;
				if (norm && !sends)
					continue; // the first stage's norm counts it
				node->inputs[kept++] = node->inputs[i] == acc ? sum : node->inputs[i];
			}
			node->n_inputs = kept;
		}
		(*n)++;
	}
	f8_free(tied);
	return status;
}

/* Whether FP8 amax `v` is of a grouped cast (an MoE's, one per expert): under expert
 * parallelism, this rank's experts'. */
static bool experts_amax(const f8_graph *graph, f8_value_id v) {
	f8_node_id producer = graph->values[v].producer;
	return graph->mesh[F8_MESH_AXIS_EP] > 1 && producer != F8_NONE &&
	       f8_node_attr_int(&graph->nodes[producer], "grouped", 0);
}

/*
 * Amax `v` with each NaN made +inf, in *guarded: a NanToInf of its producer's phase and scope,
 * standing just after the producer (where the fuse pass puts it in the producer's kernel), or
 * at program position *before, in phase `phase`, for an amax nothing makes. *before moves down
 * with the nodes it passes. The max over ranks that follows (MPI's MAX, NCCL's fmaxf) drops a
 * NaN where +inf survives it, so that one rank's NaN amax is every rank's non-finite amax.
 */
static f8_status guard_amax(f8_graph *graph, f8_value_id v, f8_phase phase, uint32_t *before,
			    f8_value_id *guarded, f8_diag *diag) {
	const char *name = f8_arena_concat(graph->arena, graph->values[v].name, ".nan_as_inf");
	f8_node_id guard;
	f8_status status = name ? f8_graph_add_node(graph, F8_OP_NAN_TO_INF, &v, 1, 1, &name,
						    &guard, diag)
				: nomem(diag);
	if (status)
		return status;
	f8_node_id producer = graph->values[v].producer;
	f8_node *node = &graph->nodes[guard];
	node->phase = producer != F8_NONE ? graph->nodes[producer].phase : phase;
	node->scope = producer != F8_NONE ? graph->nodes[producer].scope : "fp8";
	*guarded = node->outputs[0];
	graph->values[*guarded].type = graph->values[v].type;
	uint32_t at = *before;
	for (uint32_t q = 0; producer != F8_NONE && q < *before; q++)
		if (graph->order[q] == producer)
			at = q + 1;
	place_before(graph, guard, at);
	(*before)++;
	return F8_OK;
}

/* FP8: each ScalingUpdate's amaxes, each NaN made +inf (guard_amax), max-reduced over the group
 * of `axes` just before it, in one AllReduce; the experts' over the same group without ep (the
 * ranks of other experts hold other tensors), in another (none when that is one rank). The
 * tables' count and the amaxes' (the others', the experts') into *n_tables, *n_amaxes and
 * *n_experts. */
static f8_status reduce_amaxes(f8_graph *graph, uint32_t axes, uint32_t *n_tables,
			       uint32_t *n_amaxes, uint32_t *n_experts, f8_diag *diag) {
	*n_tables = *n_amaxes = *n_experts = 0;
	f8_status status = F8_OK;
	for (uint32_t p = 0; !status && p < graph->n_order; p++) {
		f8_node_id update = graph->order[p];
		if (graph->nodes[update].op != F8_OP_SCALING_UPDATE)
			continue;
		*n_tables += 1;
		for (int experts = 0; !status && experts < 2; experts++) {
			uint32_t over = experts ? axes & ~(1u << F8_MESH_AXIS_EP) : axes;
			const f8_node *node = &graph->nodes[update];
			uint32_t n = node->n_inputs - 3, k = 0;
			f8_value_id *amaxes = f8_calloc(n + 1, sizeof *amaxes);
			if (!amaxes)
				return nomem(diag);
			for (uint32_t i = 0; i < n; i++)
				if (experts_amax(graph, node->inputs[3 + i]) == (experts != 0))
					amaxes[k++] = node->inputs[3 + i];
			char name[32];
			const char *group = f8_arena_strdup(graph->arena,
							    f8_mesh_group_name(over, name, sizeof name));
			f8_phase phase = node->phase;
			f8_value_id *guarded = k && over ? f8_calloc(k, sizeof *guarded) : NULL;
			if (k && over && (!group || !guarded))
				status = nomem(diag);
			for (uint32_t j = 0; !status && guarded && j < k; j++)
				status = guard_amax(graph, amaxes[j], phase, &p, &guarded[j], diag);
			f8_node_id all_reduce = F8_NONE;
			if (!status && guarded)
				status = add_all_reduce(graph, guarded, k, group, "max", phase, "fp8",
							".reduced", &all_reduce, diag);
			for (uint32_t j = 0; !status && all_reduce != F8_NONE && j < k; j++) {
				node = &graph->nodes[update];
				mark_partial(graph, amaxes[j], over, F8_REDUCTION_MAX);
				mark_partial(graph, guarded[j], over, F8_REDUCTION_MAX);
				for (uint32_t i = 0; i < n; i++)
					if (node->inputs[3 + i] == amaxes[j])
						node->inputs[3 + i] =
							graph->nodes[all_reduce].outputs[j];
			}
			f8_free(guarded);
			for (uint32_t j = 0; j < k; j++) // a slot each, a grouped cast's f32[k] k
				*(experts ? n_experts : n_amaxes) += (uint32_t)f8_memory_type_bytes(
					&graph->values[amaxes[j]].type) / sizeof(float);
			if (!status && all_reduce != F8_NONE)
				place_before(graph, all_reduce, p++);
			f8_free(amaxes);
		}
	}
	return status;
}

f8_status f8_pass_shard_run(f8_graph *graph, const f8_parallel_options *options, FILE *report,
			    f8_diag *diag) {
	if (!f8_parallel_options_any(options))
		return F8_OK;
	// The tensor-, context- and pipeline-parallel passes, before training, set the mesh when
	// they split the model; they checked the layout on the whole model (the heads, sequence
	// and layers seen here are each rank's share).
	bool split_before = f8_graph_mesh_ranks(graph) > 1;
	bool backward = false, sharded = false; // sharded: this pass's collectives are there
	for (uint32_t p = 0; p < graph->n_order; p++) {
		const f8_node *node = &graph->nodes[graph->order[p]];
		backward |= node->phase == F8_PHASE_BWD;
		sharded |= node->phase == F8_PHASE_OPT &&
			   (f8_op_get_info(node->op)->flags & F8_OPF_COLLECTIVE);
	}
	if (sharded)
		return f8_diag_set(diag, F8_ERR_INVALID, "shard: the graph is sharded already (its "
				   "optimizer has collectives)");
	if (!backward)
		return f8_diag_set(diag, F8_ERR_INVALID, "shard: the graph has no backward (the pass "
				   "shards a training step)");
	uint32_t mesh[F8_MESH_AXIS_COUNT];
	f8_status status = split_before ? f8_parallel_mesh(options, mesh, diag)
					: f8_parallel_check(graph, options, mesh, diag);
	if (!status)
		status = check_sequence_parallel(options, mesh, diag);
	if (status)
		return status;
	const char *pass = mesh[F8_MESH_AXIS_TP] > 1 ? "tensor-parallel"
			   : mesh[F8_MESH_AXIS_CP] > 1 ? "context-parallel"
			   : mesh[F8_MESH_AXIS_EP] > 1 ? "expert-parallel"
			   : mesh[F8_MESH_AXIS_PP] > 1 ? "pipeline-parallel" : NULL;
	if (!split_before && pass)
		return f8_diag_set(diag, F8_ERR_INVALID, "shard: the %s pass splits the model before "
				   "training, and it has not run", pass);
	if (split_before && memcmp(graph->mesh, mesh, sizeof mesh) != 0)
		return f8_diag_set(diag, F8_ERR_INVALID, "shard: the graph's mesh is not the one the "
				   "parallel options make");
	memcpy(graph->mesh, mesh, sizeof mesh);
	// The gradients' group: EP x DP, where the ranks hold the same weights and run other
	// micro-batches, and CP, whose ranks hold the same weights and run other tokens of the
	// same sequences (Megatron-LM's data-parallel group with context parallelism).
	uint32_t data = 0, amax = 0;
	for (int axis = 0; axis < F8_MESH_AXIS_COUNT; axis++) {
		bool spans = mesh[axis] > 1;
		data |= spans && (axis == F8_MESH_AXIS_EP || axis == F8_MESH_AXIS_DP ||
				  axis == F8_MESH_AXIS_CP) ? 1u << axis : 0;
		amax |= spans && axis != F8_MESH_AXIS_PP ? 1u << axis : 0;
	}
	char data_group[32], amax_group[32];
	f8_mesh_group_name(data, data_group, sizeof data_group);
	f8_mesh_group_name(amax, amax_group, sizeof amax_group);
	const char *data_name = f8_arena_strdup(graph->arena, data_group);
	if (!data_name)
		return nomem(diag);
	uint32_t n_grads = 0, n_tables = 0, n_amaxes = 0, n_tied = 0, n_split = 0;
	uint32_t n_expert_grads = 0, n_expert_amaxes = 0;
	if (mesh[F8_MESH_AXIS_TP] > 1 || mesh[F8_MESH_AXIS_EP] > 1) // first: the tied exchange's
		place_split_state(graph, &n_split);                 // sums are split as these
	if (mesh[F8_MESH_AXIS_PP] > 1 && (status = exchange_tied(graph, &n_tied, diag)))
		return status;
	uint64_t grad_bytes = 0;
	uint32_t expert_axes = data & ~(1u << F8_MESH_AXIS_EP);
	char expert_group[32];
	const char *expert_name = f8_arena_strdup(graph->arena, f8_mesh_group_name(
		expert_axes, expert_group, sizeof expert_group));
	if (!expert_name)
		return nomem(diag);
	distributor d = {.graph = graph, .diag = diag,
			 .data = {.group = data_name, .axes = data,
				  .ranks = mesh[F8_MESH_AXIS_EP] * mesh[F8_MESH_AXIS_DP] *
					   mesh[F8_MESH_AXIS_CP]},
			 .experts = {.group = expert_name, .axes = expert_axes,
				     .ranks = mesh[F8_MESH_AXIS_DP] * mesh[F8_MESH_AXIS_CP]}};
	status = distributor_init(&d);
	d.distributed = data && options->distributed_optimizer;
	if (!status && d.distributed)
		status = distribute_optimizer(&d);
	f8_node_id norm = F8_NONE;
	for (uint32_t p = 0; p < graph->n_order; p++)
		norm = graph->nodes[graph->order[p]].op == F8_OP_GLOBAL_NORM ? graph->order[p] : norm;
	if (!status && norm != F8_NONE && (n_split || d.n_sharded || mesh[F8_MESH_AXIS_PP] > 1))
		status = split_norm(&d, norm);
	if (!status)
		status = place_chains(&d);
	for (int experts = 0; !status && d.distributed && experts < 2; experts++) {
		const char *group = experts ? expert_name : data_name;
		status = pack_buckets(graph, F8_OP_REDUCE_SCATTER, group, diag);
		if (!status)
			status = pack_buckets(graph, F8_OP_ALL_GATHER, group, diag);
	}
	if (!status && data)
		status = reduce_gradients(graph, data, d.scattered, &n_grads, &n_expert_grads,
					  &grad_bytes, diag);
	distributor_destroy(&d);
	uint32_t n_fp8_gathers = 0;
	if (!status && options->sequence_parallel)
		status = f8_shard_gather_fp8(graph, &n_fp8_gathers, diag);
	if (!status && amax)
		status = reduce_amaxes(graph, amax, &n_tables, &n_amaxes, &n_expert_amaxes, diag);
	if (!status && report) {
		fprintf(report, "shard: mesh");
		for (int axis = 0; axis < F8_MESH_AXIS_COUNT; axis++)
			fprintf(report, " %s=%u", f8_mesh_axis_name((f8_mesh_axis)axis), mesh[axis]);
		fputc('\n', report);
		char experts_group[32];
		f8_mesh_group_name(data & ~(1u << F8_MESH_AXIS_EP), experts_group,
				   sizeof experts_group);
		bool apart = data & ~(1u << F8_MESH_AXIS_EP); // the experts' group: several ranks
		if (data)
			fprintf(report, "shard: %u gradients summed over %s in one AllReduce a step, "
				"%llu bytes in all\n", n_grads, data_group,
				(unsigned long long)grad_bytes);
		if (data && n_expert_grads && apart)
			fprintf(report, "shard: the experts' %u gradients summed over %s (the ranks "
				"that hold the same experts), in another AllReduce\n", n_expert_grads,
				experts_group);
		else if (data && n_expert_grads)
			fprintf(report, "shard: the experts' %u gradients not summed (one rank holds "
				"each expert)\n", n_expert_grads);
		if (options->distributed_optimizer && data)
			fprintf(report, "shard: distributed optimizer: %u parameters' AdamW state and "
				"update split over the %u ranks of %s (gradients reduce-scattered, %llu "
				"bytes, in one ReduceScatter a dtype; updates all-gathered, in one "
				"AllGather a dtype), %u kept whole (a first dimension the ranks do not "
				"divide, or not an accumulator's update; an expert's split over the ranks "
				"that hold the same experts)\n", d.n_sharded,
				d.data.ranks, data_group, (unsigned long long)d.bytes, d.n_kept);
		if (n_fp8_gathers)
			fprintf(report, "shard: sequence parallelism's FP8 all-gather: %u values "
				"gathered over tp only to be cast (the column-parallel inputs; in E4M3 "
				"also the gradients the backward gathers) cast on the rank's shard, at "
				"the table's scale or under current scaling at the scale of the amax "
				"reduced over tp, and gathered as FP8 codes, their transposed copies "
				"made after the gather\n", n_fp8_gathers);
		if (n_tables)
			fprintf(report, "shard: the %u amaxes of %u scaling tables max-reduced over %s, "
				"one AllReduce per table and phase, each amax's NaN made +inf first "
				"(NanToInf: the max drops a NaN)\n", n_amaxes, n_tables, amax_group);
		bool amax_apart = amax & ~(1u << F8_MESH_AXIS_EP);
		f8_mesh_group_name(amax & ~(1u << F8_MESH_AXIS_EP), experts_group,
				   sizeof experts_group);
		if (n_expert_amaxes && amax_apart)
			fprintf(report, "shard: the experts' %u amaxes max-reduced over %s (the ranks "
				"that hold the same experts), in another AllReduce per table and "
				"phase\n", n_expert_amaxes, experts_group);
		else if (n_expert_amaxes)
			fprintf(report, "shard: the experts' %u amaxes not reduced (one rank holds "
				"each expert)\n", n_expert_amaxes);
	}
	return status;
}
