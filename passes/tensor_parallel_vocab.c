/*
 * Vocabulary parallelism, the tensor-parallel pass's last split (passes/tensor_parallel.h): the
 * embedding table and the output head split by vocabulary rows over tp, as Megatron-LM's
 * VocabParallelEmbedding and its column-parallel output layer, so that no rank holds or
 * multiplies the whole vocabulary.
 *
 *   Embedding   each rank looks up the ids its rows hold (Embedding with a third input, its
 *               first row; zeros for the others), and the ranks' rows are summed (AllReduce
 *               over tp, Megatron's g; under --sequence-parallel the sequence pass makes it
 *               the ReduceScatter Megatron-LM's embedding ends in).
 *   head        column-parallel over the vocabulary, behind Identity {group="tp"} (f); its
 *               logits stay split (placement shard=tp on the last dim), and the training pass
 *               builds the loss for them (CrossEntropyShard and CrossEntropyMerge around the
 *               all-reduces of the rows' statistics: Megatron's vocab_parallel_cross_entropy).
 *
 * A table is split when every reader is an Embedding of the tokens (the first (batch, seq)
 * integer input) or the head (through --bf16's Cast of the master weight too), TP divides its
 * rows, and the head's logits are the graph's output; tied embeddings split the one table for
 * both. A position table stays whole, as Megatron-LM keeps it; so does anything else, with the
 * reason in the report.
 */
#include "passes/tensor_parallel_internal.h" // f8_tp_split_vocabulary
#include "passes/tensor_parallel.h"          // f8_tp_vocab_start

#include <string.h> // strcmp

#include "ir/alloc.h" // f8_calloc, f8_free
#include "ir/arena.h" // f8_arena_concat, f8_arena_alloc_array

typedef struct vocab_pass {
	f8_graph *graph;
	f8_diag *diag;
	int64_t ranks;
	FILE *report;
	f8_node_id head;    // the Linear that makes the graph's output, or F8_NONE
	f8_value_id tokens; // the token ids: the first (batch, seq) integer input
	// This rank's first row ([1] i64) of each vocabulary size split (a token table and a
	// position table differ), made once each.
	f8_value_id *starts;
	int64_t *start_vocab;
	uint32_t n_starts;
	f8_node_id *before; // per node: the new node to run just before it (F8_NONE: none)
	f8_node_id *after;  // per node: the new node to run just after it
	uint32_t n_tables;
} vocab_pass;

static f8_status nomem(f8_diag *diag) {
	return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory in the tensor-parallel pass");
}

static const char *scope_of(const vocab_pass *v, f8_node_id id) {
	return v->graph->nodes[id].scope;
}

static f8_status add_node(vocab_pass *v, f8_op op, const f8_value_id *inputs, uint32_t n,
			  const f8_attr *attrs, uint32_t n_attrs, const char *scope,
			  const char *name, f8_node_id *out) {
	return f8_tp_add_node(v->graph, op, inputs, n, attrs, n_attrs, scope, name, out, v->diag);
}

static bool is_reading(const f8_node *node, f8_value_id value, uint32_t input) {
	return node->n_inputs > input && node->inputs[input] == value;
}

/* The dimension of the vocabulary in `node`'s read of a table at input `input`: 0 for an
 * Embedding of the tokens and a head's (V, K) weight, 1 for a head's (K, V); -1 for any other
 * read (a position table, looked up by positions, stays whole, as Megatron-LM keeps it). */
static int vocab_dim(const vocab_pass *v, f8_node_id id, f8_value_id value) {
	const f8_node *node = &v->graph->nodes[id];
	if (node->op == F8_OP_EMBEDDING && is_reading(node, value, 1) && node->n_inputs == 2 &&
	    node->inputs[0] == v->tokens)
		return 0;
	if (id == v->head && is_reading(node, value, 1) && node->inputs[0] != value)
		return f8_node_attr_int(node, "transpose_weight", 0) ? 1 : 0;
	return -1;
}

/* The readers of `value` (and, when `through_cast`, of a Cast of it: --bf16's copy of the
 * master weight) as vocabulary reads along one dimension, into *dim; false with *why when one
 * is not, or the value is an output of the graph. */
static bool vocab_reads(const vocab_pass *v, f8_value_id value, bool through_cast, int *dim,
			const char **why) {
	const f8_graph *graph = v->graph;
	for (uint32_t o = 0; o < graph->n_outputs; o++)
		if (graph->outputs[o] == value) {
			*why = "it (or its copy) is an output of the graph";
			return false;
		}
	for (uint32_t q = 0; q < graph->n_order; q++) {
		f8_node_id id = graph->order[q];
		const f8_node *node = &graph->nodes[id];
		for (uint32_t i = 0; i < node->n_inputs; i++) {
			if (node->inputs[i] != value)
				continue;
			if (through_cast && node->op == F8_OP_CAST) {
				if (!vocab_reads(v, node->outputs[0], false, dim, why))
					return false;
				continue;
			}
			int d = vocab_dim(v, id, value);
			if (d < 0 || (*dim >= 0 && d != *dim)) {
				*why = "it is read by more than the token embedding and the output head "
				       "(a position table stays whole)";
				return false;
			}
			*dim = d;
		}
	}
	return true;
}

/* Whether parameter `p` can be split by vocabulary rows: read only by the token Embedding and
 * the head (vocab_reads), along one dimension (into *dim) TP divides. *why says why not. */
static bool splits(const vocab_pass *v, f8_value_id p, int *dim, const char **why) {
	const f8_graph *graph = v->graph;
	*dim = -1;
	if (graph->values[p].placement[F8_MESH_AXIS_TP].kind != F8_PLACEMENT_KIND_REPLICATED) {
		*why = "it is split already";
		return false;
	}
	if (!vocab_reads(v, p, true, dim, why))
		return false;
	const f8_type *type = &graph->values[p].type;
	if (*dim < 0 || !f8_dim_is_const(type->shape.dims[*dim]) ||
	    f8_dim_value(type->shape.dims[*dim]) % v->ranks) {
		*why = *dim < 0 ? "nothing reads it" : "TP does not divide its vocabulary";
		return false;
	}
	return true;
}

/* The parameter behind a table or weight input `value` (itself, or what its Cast reads). */
static f8_value_id parameter_behind(const f8_graph *graph, f8_value_id value) {
	f8_node_id producer = graph->values[value].producer;
	if (producer != F8_NONE && graph->nodes[producer].op == F8_OP_CAST)
		value = graph->nodes[producer].inputs[0];
	return graph->values[value].role == F8_ROLE_PARAMETER ? value : F8_NONE;
}

f8_status f8_tp_vocab_start(f8_graph *graph, int64_t ranks, int64_t vocab, const char *scope,
			    f8_node_id *range, f8_node_id *shard, f8_diag *diag) {
	f8_attr attrs[4] = {{.name = "start", .kind = F8_ATTR_INT, .i = 0},
			    {.name = "limit", .kind = F8_ATTR_DIM, .dim = f8_dim_const(vocab)},
			    {.name = "delta", .kind = F8_ATTR_INT, .i = vocab / ranks},
			    {.name = "dtype", .kind = F8_ATTR_DTYPE, .dtype = F8_DTYPE_I64}};
	f8_attr over[3] = {{.name = "group", .kind = F8_ATTR_STRING, .s = "tp"},
			   {.name = "axis", .kind = F8_ATTR_INT, .i = 0},
			   {.name = "ranks", .kind = F8_ATTR_INT, .i = ranks}};
	f8_status status = f8_tp_add_node(graph, F8_OP_RANGE, NULL, 0, attrs, 4, scope,
					  f8_arena_concat(graph->arena, scope, ".vocab_starts"),
					  range, diag);
	f8_value_id starts = status ? F8_NONE : graph->nodes[*range].outputs[0];
	if (!status)
		status = f8_tp_add_node(graph, F8_OP_LOCAL_SHARD, &starts, 1, over, 3, scope,
					f8_arena_concat(graph->arena, scope, ".vocab_start"), shard,
					diag);
	if (status)
		return status;
	f8_value_id start = graph->nodes[*shard].outputs[0];
	graph->values[starts].type = (f8_type){.dtype = F8_DTYPE_I64,
					       .shape = {.rank = 1, .dims = {f8_dim_const(ranks)}}};
	graph->values[start].type = (f8_type){.dtype = F8_DTYPE_I64,
					      .shape = {.rank = 1, .dims = {f8_dim_const(1)}}};
	return F8_OK;
}

/* Embedding `id` of a split table of `vocab` rows: reads this rank's start, and its partial
 * rows are summed over tp after it. */
static f8_status split_embedding(vocab_pass *v, f8_node_id id, int64_t vocab) {
	f8_graph *graph = v->graph;
	f8_status status = F8_OK;
	f8_value_id start = F8_NONE;
	for (uint32_t i = 0; i < v->n_starts; i++)
		start = v->start_vocab[i] == vocab ? v->starts[i] : start;
	if (start == F8_NONE) {
		f8_node_id range, shard;
		status = f8_tp_vocab_start(graph, v->ranks, vocab, scope_of(v, id), &range, &shard,
					   v->diag);
		if (status)
			return status;
		v->before[id] = shard, v->before[shard] = range;
		start = graph->nodes[shard].outputs[0];
		v->starts[v->n_starts] = start;
		v->start_vocab[v->n_starts++] = vocab;
	}
	f8_node *node = &graph->nodes[id];
	f8_value_id inputs[3] = {node->inputs[0], node->inputs[1], start};
	node->inputs = f8_arena_alloc_array(graph->arena, 3, sizeof *node->inputs);
	if (!node->inputs)
		return nomem(v->diag);
	memcpy(node->inputs, inputs, sizeof inputs);
	node->n_inputs = 3;
	f8_attr size = {.name = "vocab", .kind = F8_ATTR_DIM, .dim = f8_dim_const(vocab)};
	if (f8_node_set_attrs(graph, id, &size, 1))
		return nomem(v->diag);
	f8_value_id y = node->outputs[0];
	const char *name = graph->values[y].name;
	graph->values[y].name = f8_arena_concat(graph->arena, name, ".partial");
	graph->values[y].placement[F8_MESH_AXIS_TP] =
		(f8_placement){.kind = F8_PLACEMENT_KIND_PARTIAL, .reduction = F8_REDUCTION_SUM};
	f8_attr sum[2] = {{.name = "group", .kind = F8_ATTR_STRING, .s = "tp"},
			  {.name = "op", .kind = F8_ATTR_STRING, .s = "sum"}};
	f8_node_id reduce;
	if ((status = add_node(v, F8_OP_ALL_REDUCE, &y, 1, sum, 2, scope_of(v, id), name, &reduce)))
		return status;
	f8_value_id out = graph->nodes[reduce].outputs[0];
	graph->values[out].type = graph->values[y].type;
	for (uint32_t p = 0; p < graph->n_order; p++) { // every reader moves to the sum
		f8_node *reader = &graph->nodes[graph->order[p]];
		for (uint32_t i = 0; graph->order[p] != reduce && i < reader->n_inputs; i++)
			if (reader->inputs[i] == y)
				reader->inputs[i] = out;
	}
	for (uint32_t o = 0; o < graph->n_outputs; o++)
		if (graph->outputs[o] == y)
			graph->outputs[o] = out;
	v->after[id] = reduce;
	return F8_OK;
}

/* The head, its weight split by vocabulary: its input behind f, its logits split. */
static f8_status split_head(vocab_pass *v) {
	f8_graph *graph = v->graph;
	f8_node_id id = v->head;
	f8_value_id x = graph->nodes[id].inputs[0];
	f8_attr group = {.name = "group", .kind = F8_ATTR_STRING, .s = "tp"};
	f8_node_id copy;
	f8_status status = add_node(v, F8_OP_IDENTITY, &x, 1, &group, 1, scope_of(v, id),
				    f8_arena_concat(graph->arena, graph->values[x].name, ".tp"),
				    &copy);
	if (status)
		return status;
	f8_value_id y = graph->nodes[copy].outputs[0];
	graph->values[y].type = graph->values[x].type;
	graph->nodes[id].inputs[0] = y;
	v->before[id] = copy;
	f8_value_id logits = graph->nodes[id].outputs[0];
	graph->values[logits].placement[F8_MESH_AXIS_TP] = (f8_placement){
		.kind = F8_PLACEMENT_KIND_SHARD,
		.dim = (uint8_t)(graph->values[logits].type.shape.rank - 1)};
	return F8_OK;
}

/* Parameter `p` split along `dim` by TP; its Cast copies are inferred again later. */
static void split_table(vocab_pass *v, f8_value_id p, int dim) {
	f8_value *value = &v->graph->values[p];
	int64_t rows = f8_dim_value(value->type.shape.dims[dim]);
	value->type.shape.dims[dim] = f8_dim_const(rows / v->ranks);
	value->placement[F8_MESH_AXIS_TP] =
		(f8_placement){.kind = F8_PLACEMENT_KIND_SHARD, .dim = (uint8_t)dim};
}

/* The program with the new nodes (ids from `n_nodes` on, appended by f8_graph_add_node) beside
 * the ones they serve. */
static f8_status reorder(vocab_pass *v, uint32_t n_nodes) {
	f8_graph *graph = v->graph;
	uint32_t n = graph->n_order, capacity = graph->n_nodes + 1, k = 0;
	f8_node_id *order = f8_calloc(capacity, sizeof *order);
	if (!order)
		return nomem(v->diag);
	for (uint32_t p = 0; p < n; p++) {
		f8_node_id id = graph->order[p], chain[3];
		uint32_t depth = 0;
		if (id >= n_nodes) // new: placed beside the node it serves
			continue;
		for (f8_node_id b = v->before[id]; b != F8_NONE && depth < 3; b = v->before[b])
			chain[depth++] = b;
		while (depth)
			order[k++] = chain[--depth];
		order[k++] = id;
		if (v->after[id] != F8_NONE)
			order[k++] = v->after[id];
	}
	f8_status status = f8_graph_set_order(graph, order, k) ? nomem(v->diag) : F8_OK;
	f8_free(order);
	return status;
}

/* The head: the Linear without a bias whose output is the graph's first output and read by
 * nothing else, its input whole; F8_NONE when there is none (Megatron-LM's output layer has no
 * bias; a head with one stays whole). */
static f8_node_id find_head(const f8_graph *graph, FILE *report) {
	if (!graph->n_outputs)
		return F8_NONE;
	f8_value_id logits = graph->outputs[0];
	f8_node_id id = graph->values[logits].producer;
	const char *why = NULL;
	if (id == F8_NONE || graph->nodes[id].op != F8_OP_LINEAR)
		why = "the graph's output is not made by a Linear";
	else if (graph->nodes[id].n_inputs != 2)
		why = "it has a bias";
	else if (graph->values[logits].placement[F8_MESH_AXIS_TP].kind !=
			 F8_PLACEMENT_KIND_REPLICATED ||
		 graph->values[graph->nodes[id].inputs[0]].placement[F8_MESH_AXIS_TP].kind !=
			 F8_PLACEMENT_KIND_REPLICATED)
		why = "its input or output is split already";
	for (uint32_t p = 0; !why && p < graph->n_order; p++) {
		const f8_node *node = &graph->nodes[graph->order[p]];
		for (uint32_t i = 0; i < node->n_inputs; i++)
			if (node->inputs[i] == logits)
				why = "its logits are read by more than the loss";
	}
	if (why && report)
		fprintf(report, "tensor-parallel: output head kept whole (%%%s): %s\n",
			graph->values[logits].name, why);
	return why ? F8_NONE : id;
}

f8_status f8_tp_split_vocabulary(f8_graph *graph, int64_t ranks, FILE *report,
				 uint32_t *n_tables, f8_diag *diag) {
	vocab_pass v = {.graph = graph, .diag = diag, .ranks = ranks, .report = report,
			.head = find_head(graph, report), .tokens = F8_NONE};
	for (uint32_t i = 0; i < graph->n_inputs && v.tokens == F8_NONE; i++) {
		const f8_value *input = &graph->values[graph->inputs[i]];
		if (input->role == F8_ROLE_INPUT && f8_dtype_is_integer(input->type.dtype) &&
		    input->type.shape.rank == 2)
			v.tokens = graph->inputs[i];
	}
	*n_tables = 0;
	// Every node this pass may add (per Embedding: an AllReduce; the start's two; f) has room.
	uint32_t n_nodes = graph->n_nodes, capacity = 2 * graph->n_nodes + 4;
	v.before = f8_malloc(capacity * sizeof *v.before);
	v.after = f8_malloc(capacity * sizeof *v.after);
	v.starts = f8_calloc(graph->n_order + 2, sizeof *v.starts);
	v.start_vocab = f8_calloc(graph->n_order + 2, sizeof *v.start_vocab);
	f8_value_id *tables = f8_calloc(graph->n_order + 2, sizeof *tables);
	if (!v.before || !v.after || !tables || !v.starts || !v.start_vocab) {
		f8_free(v.before), f8_free(v.after), f8_free(tables);
		f8_free(v.starts), f8_free(v.start_vocab);
		return nomem(diag);
	}
	for (uint32_t i = 0; i < capacity; i++)
		v.before[i] = v.after[i] = F8_NONE;
	// The candidates: each Embedding's table and the head's weight, once each.
	uint32_t n = 0;
	for (uint32_t p = 0; p < graph->n_order; p++) {
		const f8_node *node = &graph->nodes[graph->order[p]];
		f8_value_id table = F8_NONE;
		if (node->op == F8_OP_EMBEDDING && node->n_inputs == 2)
			table = parameter_behind(graph, node->inputs[1]);
		else if (graph->order[p] == v.head)
			table = parameter_behind(graph, node->inputs[1]);
		bool seen = table == F8_NONE;
		for (uint32_t i = 0; i < n && !seen; i++)
			seen = tables[i] == table;
		if (!seen)
			tables[n++] = table;
	}
	f8_status status = F8_OK;
	bool head_split = false;
	for (uint32_t t = 0; !status && t < n; t++) {
		int dim;
		const char *why = NULL;
		f8_value_id p = tables[t];
		if (!splits(&v, p, &dim, &why)) {
			if (report)
				fprintf(report, "tensor-parallel: vocabulary kept whole: %%%s: %s\n",
					graph->values[p].name, why);
			continue;
		}
		int64_t vocab = f8_dim_value(graph->values[p].type.shape.dims[dim]);
		split_table(&v, p, dim);
		uint32_t n_order = graph->n_order;
		for (uint32_t q = 0; !status && q < n_order; q++) {
			f8_node_id id = graph->order[q];
			const f8_node *node = &graph->nodes[id];
			if (node->op == F8_OP_EMBEDDING && node->n_inputs == 2 &&
			    parameter_behind(graph, node->inputs[1]) == p)
				status = split_embedding(&v, id, vocab);
			else if (id == v.head && parameter_behind(graph, node->inputs[1]) == p)
				head_split = true;
		}
		if (report && !status)
			fprintf(report, "tensor-parallel: vocabulary parallel: %%%s split into %lld "
				"rows per rank%s\n", graph->values[p].name, (long long)(vocab / ranks),
				head_split && parameter_behind(graph, graph->nodes[v.head].inputs[1]) == p
					? " (with the output head's logits)" : "");
		(*n_tables)++;
	}
	if (!status && head_split)
		status = split_head(&v);
	if (!status && *n_tables)
		status = reorder(&v, n_nodes);
	if (!status && *n_tables)
		status = f8_tp_infer_all(graph, diag);
	f8_free(v.before), f8_free(v.after), f8_free(tables);
	f8_free(v.starts), f8_free(v.start_vocab);
	return status;
}
