/*
 * The expert-parallel pass (passes/expert_parallel.h says what it does and why).
 *
 * Per MoEDispatch, in program order: its rows go through an AllToAllDispatch placed right after
 * it, whose outputs every GroupedLinear that read the dispatch's rows or counts reads instead;
 * the MoECombine of the same expert indices reads its rows through an AllToAllCombine placed
 * right before it; the GroupedLinears' weights keep this rank's experts. Types are inferred
 * again once, at the end.
 */
#include "passes/expert_parallel.h" // f8_pass_expert_parallel_run

#include <string.h> // memcpy

#include "ir/alloc.h"                        // f8_calloc, f8_free
#include "ir/arena.h"                        // f8_arena_concat
#include "passes/tensor_parallel_internal.h" // f8_tp_add_node, f8_tp_infer_all

typedef struct ep_pass {
	f8_graph *graph;
	f8_diag *diag;
	int64_t ranks;                 // EP
	f8_node_id *after, *before;    // per node: the exchange placed right after, right before
	uint32_t n_layers, n_weights;
} ep_pass;

static f8_status nomem(f8_diag *diag) {
	return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory in the expert-parallel pass");
}

/* F8_ERR_UNSUPPORTED naming node `id` and why its MoE layer cannot be split. */
static f8_status refuse(ep_pass *ep, f8_node_id id, const char *why) {
	const f8_graph *graph = ep->graph;
	const f8_node *node = &graph->nodes[id];
	f8_diag_set(ep->diag, F8_ERR_UNSUPPORTED, "--expert-model-parallel-size %lld: %%%s (%s) %s",
		    (long long)ep->ranks, graph->values[node->outputs[0]].name,
		    f8_op_name(node->op), why);
	f8_diag_hint(ep->diag, "expert parallelism splits MoE layers of a Router, an MoEDispatch, "
		     "GroupedLinears whose weights are the experts' parameters, and an MoECombine "
		     "of the same expert indices, as f8c's MoE descriptions build them");
	return F8_ERR_UNSUPPORTED;
}

/* The parameter behind a GroupedLinear's weight `w`: `w`, or what the Cast making it reads
 * (--bf16's copy of an f32 master weight); F8_NONE when neither is one. */
static f8_value_id expert_weight(const f8_graph *graph, f8_value_id w) {
	f8_node_id producer = graph->values[w].producer;
	if (producer != F8_NONE && graph->nodes[producer].op == F8_OP_CAST)
		w = graph->nodes[producer].inputs[0];
	return graph->values[w].role == F8_ROLE_PARAMETER ? w : F8_NONE;
}

/* The experts' weight `w` (E, ...) made this rank's E / EP, placed shard over ep along dim 0
 * (once: two GEMMs may read one weight). */
static void split_weight(ep_pass *ep, f8_value_id w, int64_t experts) {
	f8_value *value = &ep->graph->values[w];
	if (value->placement[F8_MESH_AXIS_EP].kind == F8_PLACEMENT_KIND_SHARD)
		return;
	value->type.shape.dims[0] = f8_dim_const(experts / ep->ranks);
	value->placement[F8_MESH_AXIS_EP] = (f8_placement){.kind = F8_PLACEMENT_KIND_SHARD,
							   .dim = 0};
	ep->n_weights++;
}

/* The next node from position *p on that reads `v`, and at which input (*input, from which the
 * search goes on within the node); F8_NONE when none does. */
static f8_node_id next_reader(const f8_graph *graph, f8_value_id v, uint32_t *p,
			      uint32_t *input) {
	for (; *p < graph->n_order; (*p)++, *input = 0) {
		const f8_node *node = &graph->nodes[graph->order[*p]];
		for (; *input < node->n_inputs; (*input)++)
			if (node->inputs[*input] == v)
				return graph->order[*p];
	}
	return F8_NONE;
}

/* Whether every node that reads `v` is a GroupedLinear reading it as its rows. */
static bool feeds_gemms_only(const f8_graph *graph, f8_value_id v) {
	uint32_t at = 0, input = 0;
	for (f8_node_id r; (r = next_reader(graph, v, &at, &input)) != F8_NONE; input++)
		if (graph->nodes[r].op != F8_OP_GROUPED_LINEAR || input != 0)
			return false;
	return true;
}

/* A name "<base><suffix>" in the graph's arena (NULL: out of memory). */
static const char *derived(ep_pass *ep, const char *base, const char *suffix) {
	return f8_arena_concat(ep->graph->arena, base, suffix);
}

/* The MoE layer of dispatch `id` at position `p`: the exchange both ways, the experts' weights
 * split. */
static f8_status split_layer(ep_pass *ep, f8_node_id id, uint32_t p) {
	f8_graph *graph = ep->graph;
	const f8_node dispatch = graph->nodes[id];
	f8_value_id rows = dispatch.outputs[0], counts = dispatch.outputs[1];
	f8_value_id indices = dispatch.inputs[1];
	int64_t experts = f8_node_attr_int(&dispatch, "experts", 0);
	if (experts % ep->ranks)
		return f8_diag_set(ep->diag, F8_ERR_ARGUMENT, "--expert-model-parallel-size %lld "
				   "does not divide the %lld experts of %%%s", (long long)ep->ranks,
				   (long long)experts, graph->values[rows].name);
	const char *base = graph->values[rows].name;
	f8_attr attrs[2] = {{.name = "group", .kind = F8_ATTR_STRING, .s = "ep"},
			    {.name = "ranks", .kind = F8_ATTR_INT, .i = ep->ranks}};
	const char *names[3] = {derived(ep, base, ".received"), derived(ep, base, ".local_counts"),
				derived(ep, base, ".received_counts")};
	if (!names[0] || !names[1] || !names[2])
		return nomem(ep->diag);
	f8_node_id exchange;
	f8_status status = f8_graph_add_node(graph, F8_OP_ALL_TO_ALL_DISPATCH,
					     (f8_value_id[2]){rows, counts}, 2, 3, names, &exchange,
					     ep->diag);
	if (status)
		return status;
	if (f8_node_set_attrs(graph, exchange, attrs, 2))
		return nomem(ep->diag);
	graph->nodes[exchange].scope = dispatch.scope;
	ep->after[id] = exchange;
	const f8_node *ex = &graph->nodes[exchange];
	f8_value_id received = ex->outputs[0], local_counts = ex->outputs[1];
	f8_value_id received_counts = ex->outputs[2];
	// The experts' GEMMs: every reader of the rows or the counts but the exchange.
	uint32_t n_gemms = 0;
	for (int which = 0; which < 2; which++) {
		f8_value_id v = which ? counts : rows;
		uint32_t at = p + 1, input = 0;
		for (f8_node_id r; (r = next_reader(graph, v, &at, &input)) != F8_NONE; input++) {
			f8_node *reader = &graph->nodes[r];
			if (r == exchange)
				continue;
			// The rows: a GroupedLinear's x, or tensor parallelism's Identity before
			// its column-parallel GEMMs (which reads them as they come).
			bool gemm = reader->op == F8_OP_GROUPED_LINEAR && input == (which ? 2u : 0u);
			if (!gemm && (which || reader->op != F8_OP_IDENTITY ||
				      !feeds_gemms_only(graph, reader->outputs[0])))
				return refuse(ep, r, which ? "reads the dispatch's counts, and is not "
					      "a GroupedLinear's counts"
					      : "reads the dispatch's rows, and is not a GroupedLinear "
						"(or tensor parallelism's Identity before one)");
			reader->inputs[input] = which ? local_counts : received;
		}
	}
	// The GEMMs of the experts: those that read the local counts now.
	for (uint32_t q = p + 1; q < graph->n_order; q++) {
		f8_node *node = &graph->nodes[graph->order[q]];
		if (node->op != F8_OP_GROUPED_LINEAR || node->inputs[2] != local_counts)
			continue;
		f8_value_id w = expert_weight(graph, node->inputs[1]);
		if (w == F8_NONE)
			return refuse(ep, graph->order[q], "has a weight that is not a parameter (or "
				      "a Cast of one): the experts' weights are what the ranks split");
		split_weight(ep, w, experts);
		n_gemms++;
	}
	if (!n_gemms)
		return refuse(ep, id, "reaches no GroupedLinear through its counts");
	// The combine of the same indices.
	f8_node_id combine = F8_NONE;
	for (uint32_t q = p + 1; q < graph->n_order && combine == F8_NONE; q++) {
		const f8_node *node = &graph->nodes[graph->order[q]];
		if (node->op == F8_OP_MOE_COMBINE && node->inputs[2] == indices)
			combine = graph->order[q];
	}
	if (combine == F8_NONE)
		return refuse(ep, id, "has no MoECombine of its expert indices to send the rows "
			      "back to");
	const char *back = derived(ep, graph->values[graph->nodes[combine].inputs[0]].name,
				   ".returned");
	if (!back)
		return nomem(ep->diag);
	f8_node_id returned;
	status = f8_tp_add_node(graph, F8_OP_ALL_TO_ALL_COMBINE,
				(f8_value_id[3]){graph->nodes[combine].inputs[0], counts,
						 received_counts},
				3, attrs, 2, graph->nodes[combine].scope, back, &returned, ep->diag);
	if (status)
		return status;
	graph->nodes[combine].inputs[0] = graph->nodes[returned].outputs[0];
	ep->before[combine] = returned;
	ep->n_layers++;
	return F8_OK;
}

/* The program with each exchange in its place: after its dispatch, before its combine. */
static f8_status place_exchanges(ep_pass *ep, uint32_t n_original) {
	f8_graph *graph = ep->graph;
	f8_node_id *order = f8_calloc(graph->n_order + 1, sizeof *order);
	if (!order)
		return nomem(ep->diag);
	uint32_t n = 0;
	for (uint32_t p = 0; p < n_original; p++) {
		f8_node_id id = graph->order[p];
		if (ep->before[id] != F8_NONE)
			order[n++] = ep->before[id];
		order[n++] = id;
		if (ep->after[id] != F8_NONE)
			order[n++] = ep->after[id];
	}
	f8_status status = n != graph->n_order
				   ? f8_diag_set(ep->diag, F8_ERR_INVALID, "expert-parallel: %u nodes "
						 "placed of the program's %u", n, graph->n_order)
			   : f8_graph_set_order(graph, order, n) ? nomem(ep->diag) : F8_OK;
	f8_free(order);
	return status;
}

f8_status f8_pass_expert_parallel_run(f8_graph *graph, const f8_parallel_options *options,
				      FILE *report, f8_diag *diag) {
	if (!options || options->expert <= 1)
		return F8_OK;
	uint32_t mesh[F8_MESH_AXIS_COUNT];
	f8_status status = f8_parallel_forward_mesh(graph, options, "expert-parallel", mesh, diag);
	if (status)
		return status;
	ep_pass ep = {.graph = graph, .diag = diag, .ranks = mesh[F8_MESH_AXIS_EP]};
	uint32_t n_original = graph->n_order, n_nodes = graph->n_nodes;
	ep.after = f8_malloc(n_nodes * sizeof *ep.after);
	ep.before = f8_malloc(n_nodes * sizeof *ep.before);
	status = ep.after && ep.before ? F8_OK : nomem(diag);
	for (uint32_t i = 0; !status && i < n_nodes; i++)
		ep.after[i] = ep.before[i] = F8_NONE;
	for (uint32_t p = 0; !status && p < n_original; p++)
		if (graph->nodes[graph->order[p]].op == F8_OP_MOE_DISPATCH)
			status = split_layer(&ep, graph->order[p], p);
	if (!status)
		status = place_exchanges(&ep, n_original);
	if (!status)
		status = f8_tp_infer_all(graph, diag);
	if (!status) {
		memcpy(graph->mesh, mesh, sizeof mesh);
		if (report)
			fprintf(report, "expert-parallel: %u MoE layers' experts split over ep = %lld "
				"ranks (%u expert weights placed shard along dim 0); each layer's "
				"rows sent to their experts' ranks by AllToAllDispatch and back by "
				"AllToAllCombine\n", ep.n_layers, (long long)ep.ranks, ep.n_weights);
	}
	f8_free(ep.after), f8_free(ep.before);
	return status;
}
