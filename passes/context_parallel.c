/*
 * The context-parallel pass (passes/context_parallel.h says what it does and why).
 *
 * One walk over the forward in program order. Each value knows the dimension along which it
 * holds the rank's tokens (dim[v]), or WHOLE. A node reading a split value is rewritten by its
 * op's rule: the dimension its outputs hold the tokens in, its attributes that size the
 * sequence divided by CP, the whole values it meets read through their LocalShard. New values
 * keep their whole types until the end, so every comparison on the way is in whole sizes; the
 * types are inferred again once, after the walk.
 */
#include "passes/context_parallel.h" // f8_pass_context_parallel_run

#include <string.h> // strcmp

#include "ir/alloc.h"                      // f8_calloc, f8_free
#include "ir/arena.h"                      // f8_arena_concat
#include "passes/canonicalize.h"           // f8_pass_remove_dead_nodes
#include "passes/tensor_parallel_internal.h" // f8_tp_add_node, f8_tp_infer_all

/* Not split; or an MoE's dispatched rows: this rank's tokens' rows, grouped by expert (no
 * longer in sequence order, so only what runs row by row may read them). */
enum { WHOLE = -1, ROWS = -2 };

typedef struct cp_pass {
	f8_graph *graph;
	f8_diag *diag;
	int64_t ranks, seq;      // CP; the whole sequence's length
	f8_dim batch;            // the tokens' first dimension
	int8_t *dim;             // per value: the dimension holding the rank's tokens, WHOLE, ROWS
	f8_value_id *shard_of;   // per value: its LocalShard {balanced=1} (or positions' lookup)
	uint8_t *learned;        // per value: 1 made from a parameter, 2 not, 0 not known yet
	f8_value_id positions;   // this rank's positions, [seq / CP] i64, made once
	f8_node_id *order;       // the new program
	uint32_t n_order, capacity, n_values;
	uint32_t n_ring, n_shards, n_tables, n_attrs;
} cp_pass;

static f8_status nomem(f8_diag *diag) {
	return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory in the context-parallel pass");
}

static const f8_type *type_of(const cp_pass *cp, f8_value_id v) {
	return &cp->graph->values[v].type;
}

static bool is_seq(const cp_pass *cp, f8_dim size) {
	return f8_dim_is_const(size) && f8_dim_value(size) == cp->seq;
}

static bool is_one(f8_dim size) {
	return f8_dim_is_const(size) && f8_dim_value(size) == 1;
}

/* F8_ERR_UNSUPPORTED naming node `id` and why it cannot run on the rank's tokens. */
static f8_status refuse(cp_pass *cp, f8_node_id id, const char *why) {
	const f8_graph *graph = cp->graph;
	const f8_node *node = &graph->nodes[id];
	f8_diag_set(cp->diag, F8_ERR_UNSUPPORTED, "--context-parallel-size %lld: %%%s (%s) %s",
		    (long long)cp->ranks, graph->values[node->outputs[0]].name,
		    f8_op_name(node->op), why);
	f8_diag_hint(cp->diag, "context parallelism splits the sequence through what runs token by "
		     "token and through attention (as ring attention); a model that mixes tokens "
		     "another way trains without it");
	return F8_ERR_UNSUPPORTED;
}

/* Whether `v` is a parameter or made from one (a Cast of it): a value with a gradient. */
static bool learned(cp_pass *cp, f8_value_id v) {
	const f8_graph *graph = cp->graph;
	if (cp->learned[v])
		return cp->learned[v] == 1;
	bool is = graph->values[v].role == F8_ROLE_PARAMETER;
	f8_node_id producer = graph->values[v].producer;
	for (uint32_t i = 0; !is && producer != F8_NONE && i < graph->nodes[producer].n_inputs; i++)
		is = learned(cp, graph->nodes[producer].inputs[i]);
	cp->learned[v] = is ? 1 : 2;
	return is;
}

/* Adds a node of `op` (one output, typed `type`: whole sizes until the end) before the node
 * being rewritten; its output into *out. */
static f8_status add(cp_pass *cp, f8_op op, const f8_value_id *inputs, uint32_t n,
		     const f8_attr *attrs, uint32_t n_attrs, const char *scope, const char *name,
		     const f8_type *type, f8_value_id *out) {
	f8_graph *graph = cp->graph;
	if (graph->n_values + 2 >= cp->n_values || cp->n_order + 2 >= cp->capacity)
		return f8_diag_set(cp->diag, F8_ERR_INVALID, "context-parallel: too many new nodes "
				   "(a bug)");
	f8_node_id id;
	f8_status status = f8_tp_add_node(graph, op, inputs, n, attrs, n_attrs, scope, name, &id,
					  cp->diag);
	if (status)
		return status;
	*out = graph->nodes[id].outputs[0];
	graph->values[*out].type = *type;
	cp->order[cp->n_order++] = id;
	return F8_OK;
}

/* `v`'s LocalShard {group="cp", axis, balanced=1}: the rank's two chunks of the sequence along
 * `axis`, made once; its tokens along `axis`. */
static f8_status shard(cp_pass *cp, f8_value_id v, int axis, const char *scope,
		       f8_value_id *out) {
	if (cp->shard_of[v] != F8_NONE && cp->dim[cp->shard_of[v]] == axis) {
		*out = cp->shard_of[v];
		return F8_OK;
	}
	if (cp->shard_of[v] != F8_NONE)
		return f8_diag_set(cp->diag, F8_ERR_UNSUPPORTED, "--context-parallel-size %lld: "
				   "%%%s is read along two dimensions as the sequence",
				   (long long)cp->ranks, cp->graph->values[v].name);
	f8_attr attrs[4] = {{.name = "group", .kind = F8_ATTR_STRING, .s = "cp"},
			    {.name = "axis", .kind = F8_ATTR_INT, .i = axis},
			    {.name = "ranks", .kind = F8_ATTR_INT, .i = cp->ranks},
			    {.name = "balanced", .kind = F8_ATTR_INT, .i = 1}};
	f8_graph *graph = cp->graph;
	f8_type type = graph->values[v].type;
	f8_node_id producer = graph->values[v].producer; // beside what it shards, when made
	scope = producer != F8_NONE ? graph->nodes[producer].scope : scope;
	f8_status status = add(cp, F8_OP_LOCAL_SHARD, &v, 1, attrs, 4, scope,
			       f8_arena_concat(graph->arena, graph->values[v].name, ".cp"), &type,
			       out);
	if (status)
		return status;
	cp->shard_of[v] = *out;
	cp->dim[*out] = (int8_t)axis;
	cp->n_shards++;
	return F8_OK;
}

/* Whether `v` is a (batch, seq, ...) input of the step (the tokens, position ids), which each
 * rank is fed whole. */
static bool sequence_input(const cp_pass *cp, f8_value_id v) {
	const f8_value *value = &cp->graph->values[v];
	return value->role == F8_ROLE_INPUT && value->producer == F8_NONE &&
	       value->type.shape.rank >= 2 && f8_dim_equal(value->type.shape.dims[0], cp->batch) &&
	       is_seq(cp, value->type.shape.dims[1]);
}

/* Slice {starts=[0], ends=[seq]} along dim 0 (steps 1) of a learned table `v`'s producer reads:
 * the table, else F8_NONE. */
static f8_value_id first_rows_of(const cp_pass *cp, f8_value_id v) {
	const f8_graph *graph = cp->graph;
	f8_node_id producer = graph->values[v].producer;
	if (producer == F8_NONE || graph->nodes[producer].op != F8_OP_SLICE)
		return F8_NONE;
	const f8_node *slice = &graph->nodes[producer];
	const f8_attr *starts = f8_node_attr(slice, "starts"), *ends = f8_node_attr(slice, "ends");
	const f8_attr *axes = f8_node_attr(slice, "axes"), *steps = f8_node_attr(slice, "steps");
	f8_value_id table = slice->inputs[0];
	bool first = starts && ends && starts->dims.n == 1 && ends->dims.n == 1 &&
		     f8_dim_is_const(starts->dims.items[0]) &&
		     f8_dim_value(starts->dims.items[0]) == 0 && is_seq(cp, ends->dims.items[0]) &&
		     (!axes || (axes->ints.n == 1 && axes->ints.items[0] == 0)) &&
		     (!steps || (steps->ints.n == 1 && steps->ints.items[0] == 1)) &&
		     type_of(cp, table)->shape.rank == 2;
	return first ? table : F8_NONE;
}

/* A learned position table's first `seq` rows `v` as this rank's rows: an Embedding of the
 * rank's positions (LocalShard of Range), whose gradient is the rank's rows' only. */
static f8_status position_rows(cp_pass *cp, f8_value_id v, f8_value_id table, const char *scope,
			       f8_value_id *out) {
	f8_graph *graph = cp->graph;
	f8_status status = F8_OK;
	if (cp->positions == F8_NONE) {
		f8_attr range[4] = {{.name = "start", .kind = F8_ATTR_INT, .i = 0},
				    {.name = "limit", .kind = F8_ATTR_DIM,
				     .dim = f8_dim_const(cp->seq)},
				    {.name = "delta", .kind = F8_ATTR_INT, .i = 1},
				    {.name = "dtype", .kind = F8_ATTR_DTYPE, .dtype = F8_DTYPE_I64}};
		f8_type type = {.dtype = F8_DTYPE_I64,
				.shape = {.rank = 1, .dims = {f8_dim_const(cp->seq)}}};
		f8_value_id whole;
		status = add(cp, F8_OP_RANGE, NULL, 0, range, 4, scope, "cp.positions_whole", &type,
			     &whole);
		if (!status) // named after the whole range's LocalShard
			status = shard(cp, whole, 0, scope, &cp->positions);
		if (status)
			return status;
	}
	const f8_shape *rows = &type_of(cp, table)->shape;
	f8_attr vocab = {.name = "vocab", .kind = F8_ATTR_DIM, .dim = rows->dims[0]};
	f8_value_id inputs[2] = {cp->positions, table};
	f8_type type = graph->values[v].type;
	status = add(cp, F8_OP_EMBEDDING, inputs, 2, &vocab, 1, scope,
		     f8_arena_concat(graph->arena, graph->values[v].name, ".cp"), &type, out);
	if (status)
		return status;
	cp->shard_of[v] = *out;
	cp->dim[*out] = 0;
	cp->n_tables++;
	return F8_OK;
}

/*
 * The rank's rows along `a` of `v`, a whole value along the sequence that node `id` reads: its
 * LocalShard, or for a learned position table position_rows; for sequence parallelism's
 * LocalShard over tp of such a value, that LocalShard of the value's rows (the rank's tokens
 * over cp, then its part of them over tp). Made once; anything else is refused.
 */
static f8_status rows_of(cp_pass *cp, f8_node_id id, f8_value_id v, int a, f8_value_id *out) {
	f8_graph *graph = cp->graph;
	if ((*out = cp->shard_of[v]) != F8_NONE)
		return cp->dim[*out] == a ? F8_OK
					  : refuse(cp, id, "reads a whole value along two dimensions");
	const char *scope = graph->nodes[id].scope;
	if (is_seq(cp, type_of(cp, v)->shape.dims[a])) {
		if (!learned(cp, v))
			return shard(cp, v, a, scope, out);
		f8_value_id table = first_rows_of(cp, v);
		if (table == F8_NONE || a != 0)
			return refuse(cp, id, "reads a learned value along the whole sequence (only a "
				      "position table's first rows, Slice {starts=[0], ends=[seq]}, "
				      "are looked up by the rank's positions)");
		return position_rows(cp, v, table, scope, out);
	}
	f8_node_id producer = graph->values[v].producer;
	const f8_node *sp = producer != F8_NONE ? &graph->nodes[producer] : NULL;
	const char *group = sp && sp->op == F8_OP_LOCAL_SHARD
				    ? f8_node_attr_string(sp, "group", "") : "";
	if (strcmp(group, "tp") != 0 || f8_node_attr_int(sp, "axis", -1) != a ||
	    f8_node_attr_int(sp, "balanced", 0))
		return refuse(cp, id, "reads a value whose size where the sequence is split is not "
			      "the sequence's");
	f8_value_id whole = sp->inputs[0], inner;
	f8_status status = rows_of(cp, producer, whole, a, &inner);
	if (status)
		return status;
	sp = &graph->nodes[producer]; // rows_of may have moved the nodes
	f8_attr attrs[3] = {{.name = "group", .kind = F8_ATTR_STRING, .s = "tp"},
			    {.name = "axis", .kind = F8_ATTR_INT, .i = a},
			    {.name = "ranks", .kind = F8_ATTR_INT,
			     .i = f8_node_attr_int(sp, "ranks", 1)}};
	f8_type type = graph->values[v].type;
	status = add(cp, F8_OP_LOCAL_SHARD, &inner, 1, attrs, 3, sp->scope,
		     f8_arena_concat(graph->arena, graph->values[v].name, ".cp"), &type, out);
	if (!status) {
		cp->shard_of[v] = *out;
		cp->dim[*out] = (int8_t)a;
	}
	return status;
}

/*
 * Input `i` of node `id`, whose outputs (of rank `rank`) hold the tokens along `at`, made to
 * match: a value split there or broadcast along it stands; a whole value along the sequence is
 * read through rows_of; anything else is refused.
 */
static f8_status meet(cp_pass *cp, f8_node_id id, uint32_t i, int rank, int at) {
	f8_graph *graph = cp->graph;
	f8_value_id v = graph->nodes[id].inputs[i], local;
	const f8_shape *shape = &type_of(cp, v)->shape;
	int a = at - (rank - shape->rank);
	if (cp->dim[v] != WHOLE)
		return cp->dim[v] == a ? F8_OK
				       : refuse(cp, id, "reads two values split along different "
						"dimensions");
	if (a < 0 || is_one(shape->dims[a]))
		return F8_OK; // broadcast along the sequence
	f8_status status = rows_of(cp, id, v, a, &local);
	if (!status)
		graph->nodes[id].inputs[i] = local;
	return status;
}

/* Input 0's split dimension, or WHOLE. */
static int first_dim(const cp_pass *cp, const f8_node *node) {
	return cp->dim[node->inputs[0]];
}

/* Every output holds the tokens along `d` (its rank above d), or none does. */
static void set_outputs(cp_pass *cp, const f8_node *node, int d) {
	for (uint32_t o = 0; o < node->n_outputs; o++)
		cp->dim[node->outputs[o]] = d < type_of(cp, node->outputs[o])->shape.rank
						    ? (int8_t)d : WHOLE;
}

/* Attribute `name` of node `id` (DIMS), item `k` divided by CP when it sizes the sequence. */
static f8_status divide_item(cp_pass *cp, f8_node_id id, const char *name, int k) {
	f8_graph *graph = cp->graph;
	f8_node *node = &graph->nodes[id];
	f8_attr *attrs = f8_calloc(node->n_attrs + 1, sizeof *attrs);
	f8_dim *dims = NULL;
	f8_status status = attrs ? F8_OK : nomem(cp->diag);
	for (uint32_t i = 0; !status && i < node->n_attrs; i++) {
		attrs[i] = node->attrs[i];
		if (strcmp(attrs[i].name, name) != 0 || attrs[i].kind != F8_ATTR_DIMS || k < 0 ||
		    k >= (int)attrs[i].dims.n)
			continue;
		f8_dim size = attrs[i].dims.items[k], local;
		if (f8_dim_is_const(size) && f8_dim_value(size) <= 1)
			continue; // -1 (inferred), 0 (the input's) or an Expand's 1: the rank's own
		if (!f8_dim_div(size, f8_dim_const(cp->ranks), &local))
			status = refuse(cp, id, "sizes the sequence with a number CP does not divide");
		else if (!(dims = f8_calloc(attrs[i].dims.n + 1, sizeof *dims)))
			status = nomem(cp->diag);
		for (uint32_t j = 0; !status && j < attrs[i].dims.n; j++)
			dims[j] = (int)j == k ? local : attrs[i].dims.items[j];
		if (!status)
			attrs[i].dims.items = dims;
	}
	if (!status && dims && f8_node_set_attrs(graph, id, attrs, node->n_attrs))
		status = nomem(cp->diag);
	if (!status && dims)
		cp->n_attrs++;
	f8_free(dims);
	f8_free(attrs);
	return status;
}

/*
 * Reshape: the output dimension whose end is where the input's split dimension ends (the same
 * count of elements up to there) holds the tokens, when it holds the whole sequence innermost:
 * (b, s, h) -> (b, s, heads, d), (b, s, h) -> (b * s, h) and back.
 */
static f8_status split_reshape(cp_pass *cp, f8_node_id id, int d) {
	const f8_node *node = &cp->graph->nodes[id];
	const f8_shape *in = &type_of(cp, node->inputs[0])->shape;
	const f8_shape *out = &type_of(cp, node->outputs[0])->shape;
	f8_dim through = f8_dim_const(1), prefix = f8_dim_const(1), whole;
	for (int j = 0; j <= d; j++)
		if (!f8_dim_mul(through, in->dims[j], &through))
			return refuse(cp, id, "has sizes too complex to follow");
	for (int k = 0; k < out->rank; k++) {
		if (!f8_dim_mul(prefix, out->dims[k], &prefix))
			break;
		if (!f8_dim_equal(prefix, through))
			continue;
		if (!f8_dim_div(out->dims[k], f8_dim_const(cp->seq), &whole))
			return refuse(cp, id, "reshapes the sequence into a dimension that does not "
				      "hold it whole");
		set_outputs(cp, node, k);
		return divide_item(cp, id, "shape", k);
	}
	return refuse(cp, id, "merges the sequence with a dimension after it");
}

/* Transpose: the split dimension where the permutation puts it. */
static f8_status split_transpose(cp_pass *cp, f8_node_id id, int d) {
	const f8_node *node = &cp->graph->nodes[id];
	const f8_attr *perm = f8_node_attr(node, "perm");
	int rank = type_of(cp, node->inputs[0])->shape.rank;
	for (int j = 0; j < rank; j++)
		if (perm ? j < (int)perm->ints.n && perm->ints.items[j] == d : rank - 1 - j == d) {
			set_outputs(cp, node, j);
			return F8_OK;
		}
	return refuse(cp, id, "has a permutation f8c cannot read");
}

/* Unsqueeze and Squeeze: the split dimension moved by the axes added or removed before it. */
static f8_status split_axes(cp_pass *cp, f8_node_id id, int d) {
	const f8_node *node = &cp->graph->nodes[id];
	const f8_shape *in = &type_of(cp, node->inputs[0])->shape;
	int out_rank = type_of(cp, node->outputs[0])->shape.rank;
	const f8_attr *axes = f8_node_attr(node, "axes");
	bool named[F8_MAX_RANK] = {false}; // Unsqueeze: the output's new axes; Squeeze: removed
	int rank = node->op == F8_OP_UNSQUEEZE ? out_rank : in->rank, axis;
	for (uint32_t k = 0; axes && k < axes->ints.n; k++)
		if (f8_axis_normalize(axes->ints.items[k], rank, false, &axis))
			named[axis] = true;
	for (int j = 0; !axes && j < in->rank; j++) // Squeeze without axes: every 1
		named[j] = is_one(in->dims[j]);
	if (node->op == F8_OP_SQUEEZE && named[d])
		return refuse(cp, id, "removes the sequence's dimension");
	int at = 0;
	if (node->op == F8_OP_SQUEEZE) {
		for (int j = 0; j < d; j++)
			at += !named[j];
	} else {
		for (int seen = -1; at < out_rank; at++)
			if (!named[at] && ++seen == d)
				break;
	}
	set_outputs(cp, node, at);
	return F8_OK;
}

/* Attention as RingAttention over cp: q, k and v each hold the rank's rows along dim 2. */
static f8_status ring_attention(cp_pass *cp, f8_node_id id) {
	f8_graph *graph = cp->graph;
	f8_node *node = &graph->nodes[id];
	if (node->n_inputs > 3)
		return refuse(cp, id, "has a mask (ring attention takes causal masking only)");
	for (uint32_t i = 0; i < 3; i++)
		if (cp->dim[node->inputs[i]] != 2 || type_of(cp, node->inputs[i])->shape.rank != 4)
			return refuse(cp, id, "does not read q, k and v each split along the "
				      "sequence (b, heads, seq, d)");
	for (uint32_t i = 0; i < 3; i++) // the ring's chunks are one sequence's, not sequences'
		if (!is_seq(cp, type_of(cp, node->inputs[i])->shape.dims[2]))
			return refuse(cp, id, "attends over a dimension that is not the sequence (a "
				      "reshape packed sequences into it)");
	f8_attr attrs[4] = {{.name = "group", .kind = F8_ATTR_STRING, .s = "cp"},
			    {.name = "ranks", .kind = F8_ATTR_INT, .i = cp->ranks}};
	uint32_t n = 2;
	for (uint32_t i = 0; i < node->n_attrs; i++)
		if (strcmp(node->attrs[i].name, "causal") == 0 ||
		    strcmp(node->attrs[i].name, "scale") == 0)
			attrs[n++] = node->attrs[i];
	if (f8_node_set_attrs(graph, id, attrs, n))
		return nomem(cp->diag);
	node->op = F8_OP_RING_ATTENTION;
	set_outputs(cp, node, 2);
	cp->n_ring++;
	return F8_OK;
}

/* Whether axis attribute `name` (default `fallback`) of node `id` is the split dimension. */
static bool along(const cp_pass *cp, const f8_node *node, const char *name, int64_t fallback,
		  int d) {
	int axis;
	int rank = type_of(cp, node->inputs[0])->shape.rank;
	return !f8_axis_normalize(f8_node_attr_int(node, name, fallback), rank, false, &axis) ||
	       axis == d;
}

/*
 * An MoE block (Megatron-LM's dropless token dispatch) on the rank's tokens: the router's
 * scores and choices per token, the dispatch's rows (ROWS) through the experts' grouped GEMMs
 * and their activation, and the combine back to the tokens. *done when `id` is one of them.
 */
static f8_status split_moe(cp_pass *cp, f8_node_id id, bool *done) {
	const f8_node *node = &cp->graph->nodes[id];
	bool rows = false, tokens = true; // some input is rows; the others' tokens along dim 0
	for (uint32_t i = 0; i < node->n_inputs; i++) {
		rows |= cp->dim[node->inputs[i]] == ROWS;
		tokens &= i == 0 || cp->dim[node->inputs[i]] == 0;
	}
	*done = true;
	switch (node->op) {
	case F8_OP_ROUTER:
		if (first_dim(cp, node) != 0)
			return refuse(cp, id, "does not read the tokens' scores (tokens, experts)");
		set_outputs(cp, node, 0);
		return F8_OK;
	case F8_OP_MOE_DISPATCH:
		if (cp->dim[node->inputs[0]] != 0 || cp->dim[node->inputs[1]] != 0)
			return refuse(cp, id, "does not read the tokens and their experts");
		set_outputs(cp, node, ROWS);
		return F8_OK;
	case F8_OP_MOE_COMBINE:
		if (first_dim(cp, node) != ROWS || !tokens)
			return refuse(cp, id, "does not read the dispatched rows and the tokens' scores");
		set_outputs(cp, node, 0);
		return F8_OK;
	case F8_OP_GROUPED_LINEAR: case F8_OP_SWIGLU: case F8_OP_GELU: case F8_OP_LINEAR:
		if (first_dim(cp, node) != ROWS)
			break;
		set_outputs(cp, node, ROWS); // row by row
		return F8_OK;
	default:
		break;
	}
	*done = false;
	return rows ? refuse(cp, id, "reads an MoE's dispatched rows, grouped by expert") : F8_OK;
}

/* Node `id`, which reads a split value, rewritten by its op's rule. */
static f8_status split_node(cp_pass *cp, f8_node_id id) {
	f8_graph *graph = cp->graph;
	const f8_node *node = &graph->nodes[id];
	int d = first_dim(cp, node), rank = type_of(cp, node->inputs[0])->shape.rank;
	int out_rank = type_of(cp, node->outputs[0])->shape.rank;
	bool done;
	f8_status status = split_moe(cp, id, &done);
	if (status || done)
		return status;
	// meet() adds nodes, which may move graph->nodes: what the rules read of the node is
	// copied out first.
	f8_op op = node->op;
	uint32_t n_inputs = node->n_inputs;
	if (f8_op_get_info(op)->flags & F8_OPF_ELEMENTWISE) {
		int at = WHOLE; // the outputs' split dimension, from the split inputs
		for (uint32_t i = 0; i < n_inputs; i++) {
			f8_value_id v = node->inputs[i];
			int here = cp->dim[v] == WHOLE ? WHOLE
				   : cp->dim[v] + out_rank - type_of(cp, v)->shape.rank;
			if (here != WHOLE && at != WHOLE && here != at)
				return refuse(cp, id, "reads values split along different dimensions");
			at = here != WHOLE ? here : at;
		}
		for (uint32_t i = 0; !status && i < n_inputs; i++)
			status = meet(cp, id, i, out_rank, at);
		if (!status)
			set_outputs(cp, &graph->nodes[id], at);
		return status;
	}
	switch (op) {
	case F8_OP_LINEAR: case F8_OP_SWIGLU: case F8_OP_GELU:
		if (d == WHOLE || d >= rank - 1)
			return refuse(cp, id, "reads the sequence as its features");
		for (uint32_t i = 1; op == F8_OP_SWIGLU && !status && i < n_inputs; i++)
			status = meet(cp, id, i, rank, d);
		break;
	case F8_OP_LAYER_NORM: case F8_OP_RMS_NORM: {
		int axis;
		if (d == WHOLE || !f8_axis_normalize(f8_node_attr_int(node, "axis", -1), rank,
						     false, &axis) || d >= axis)
			return refuse(cp, id, "normalizes along the sequence");
		break;
	}
	case F8_OP_SOFTMAX: case F8_OP_LOG_SOFTMAX:
		if (d == WHOLE || along(cp, node, "axis", -1, d))
			return refuse(cp, id, "runs along the sequence");
		break;
	case F8_OP_EMBEDDING: // the ids' tokens; the table (and a vocabulary shard's start) whole
		if (d == WHOLE)
			return refuse(cp, id, "reads a split table");
		break;
	case F8_OP_ROPE:
		if (d != rank - 2)
			return refuse(cp, id, "does not read its rows split along the sequence "
				      "(b, heads, seq, d)");
		for (uint32_t i = 1; !status && i < n_inputs; i++)
			status = meet(cp, id, i, rank, d);
		break;
	case F8_OP_SPLIT:
		if (d == WHOLE || along(cp, node, "axis", 0, d))
			return refuse(cp, id, "splits along the sequence");
		break;
	case F8_OP_CONCAT: {
		d = WHOLE;
		for (uint32_t i = 0; i < node->n_inputs && d == WHOLE; i++)
			d = cp->dim[node->inputs[i]] == WHOLE ? WHOLE
			    : cp->dim[node->inputs[i]] + out_rank - type_of(cp, node->inputs[i])->shape.rank;
		int axis;
		if (!f8_axis_normalize(f8_node_attr_int(node, "axis", 0), out_rank, false, &axis) ||
		    axis == d)
			return refuse(cp, id, "concatenates along the sequence");
		for (uint32_t i = 0; !status && i < n_inputs; i++)
			status = meet(cp, id, i, out_rank, d);
		break;
	}
	case F8_OP_RESHAPE:
		return d == WHOLE ? refuse(cp, id, "reshapes a split shape") : split_reshape(cp, id, d);
	case F8_OP_TRANSPOSE:
		return split_transpose(cp, id, d);
	case F8_OP_UNSQUEEZE: case F8_OP_SQUEEZE:
		return split_axes(cp, id, d);
	case F8_OP_EXPAND:
		if (d == WHOLE)
			return refuse(cp, id, "expands a split value");
		d += out_rank - rank;
		set_outputs(cp, node, d);
		return divide_item(cp, id, "shape", d - (out_rank - (int)(f8_node_attr(node, "shape")
									->dims.n)));
	case F8_OP_ATTENTION:
		return ring_attention(cp, id);
	case F8_OP_ALL_REDUCE: // tensor parallelism's collectives: each output as its input
		for (uint32_t o = 0; o < node->n_outputs; o++)
			cp->dim[node->outputs[o]] = cp->dim[node->inputs[o]];
		return F8_OK;
	case F8_OP_ALL_GATHER: case F8_OP_REDUCE_SCATTER: case F8_OP_LOCAL_SHARD:
		if (d == WHOLE || f8_node_attr_int(node, "balanced", 0))
			return refuse(cp, id, "moves split values in a way f8c cannot follow");
		break; // sequence parallelism's: the rank's tokens split again over tp
	default:
		return refuse(cp, id, "is not an op f8c splits along the sequence");
	}
	if (!status)
		set_outputs(cp, &graph->nodes[id], d);
	return status;
}

/* Whether node `id` reads a split value. */
static bool any_split(const cp_pass *cp, const f8_node *node) {
	for (uint32_t i = 0; i < node->n_inputs; i++)
		if (cp->dim[node->inputs[i]] != WHOLE)
			return true;
	return false;
}

/* The walk: inputs along the sequence sharded at their readers, split readers rewritten. */
static f8_status walk(cp_pass *cp) {
	f8_graph *graph = cp->graph;
	uint32_t n_original = graph->n_order;
	f8_node_id *original = f8_calloc(n_original + 1, sizeof *original);
	if (!original)
		return nomem(cp->diag);
	memcpy(original, graph->order, n_original * sizeof *original);
	f8_status status = F8_OK;
	for (uint32_t p = 0; !status && p < n_original; p++) {
		f8_node_id id = original[p];
		for (uint32_t i = 0; !status && i < graph->nodes[id].n_inputs; i++) {
			f8_value_id v = graph->nodes[id].inputs[i], local;
			if (!sequence_input(cp, v))
				continue;
			status = shard(cp, v, 1, graph->nodes[id].scope, &local);
			if (!status)
				graph->nodes[id].inputs[i] = local;
		}
		if (!status && any_split(cp, &graph->nodes[id]))
			status = split_node(cp, id);
		cp->order[cp->n_order++] = id;
	}
	f8_free(original);
	f8_value_id logits = graph->n_outputs ? graph->outputs[0] : F8_NONE;
	if (!status && logits != F8_NONE && cp->dim[logits] != WHOLE &&
	    (cp->dim[logits] != 1 || type_of(cp, logits)->shape.rank != 3))
		status = refuse(cp, graph->values[logits].producer, "is the logits, split along the "
				"sequence but not as (batch, seq, vocab): the loss takes the labels' "
				"rows in that layout");
	for (uint32_t i = 1; !status && i < graph->n_outputs; i++)
		if (cp->dim[graph->outputs[i]] != WHOLE)
			status = refuse(cp, graph->values[graph->outputs[i]].producer, "is an output "
					"of the model besides the logits, split along the sequence");
	if (!status && f8_graph_set_order(graph, cp->order, cp->n_order))
		status = nomem(cp->diag);
	return status;
}

/* The tokens (the first (batch, seq) i64 input), their sequence a constant 2 x CP divides, into
 * cp->batch and cp->seq; F8_ERR_ARGUMENT otherwise. */
static f8_status find_tokens(cp_pass *cp) {
	const f8_graph *graph = cp->graph;
	const f8_value *tokens = NULL;
	for (uint32_t i = 0; i < graph->n_inputs && !tokens; i++) {
		const f8_value *input = &graph->values[graph->inputs[i]];
		if (input->role == F8_ROLE_INPUT && input->type.dtype == F8_DTYPE_I64 &&
		    input->type.shape.rank == 2)
			tokens = input;
	}
	if (tokens && f8_dim_is_const(tokens->type.shape.dims[1]) &&
	    f8_dim_value(tokens->type.shape.dims[1]) % (2 * cp->ranks) == 0) {
		cp->batch = tokens->type.shape.dims[0];
		cp->seq = f8_dim_value(tokens->type.shape.dims[1]);
		return F8_OK;
	}
	f8_diag_set(cp->diag, F8_ERR_ARGUMENT, "--context-parallel-size %lld needs the tokens' "
		    "sequence length bound, and 2 x CP = %lld dividing it", (long long)cp->ranks,
		    (long long)(2 * cp->ranks));
	f8_diag_hint(cp->diag, "a training plan binds it (--seq-length); dump-ir and audit take "
		     "--dim seq=N");
	return F8_ERR_ARGUMENT;
}

f8_status f8_pass_context_parallel_run(f8_graph *graph, const f8_parallel_options *options,
				       FILE *report, f8_diag *diag) {
	if (!options || options->context <= 1)
		return F8_OK;
	uint32_t mesh[F8_MESH_AXIS_COUNT];
	f8_status status = f8_parallel_forward_mesh(graph, options, "context-parallel", mesh, diag);
	if (status)
		return status;
	cp_pass cp = {.graph = graph, .diag = diag, .ranks = mesh[F8_MESH_AXIS_CP],
		      .positions = F8_NONE};
	if ((status = find_tokens(&cp)))
		return status;
	uint32_t n_original = graph->n_order;
	cp.n_values = graph->n_values + 4 * n_original + 64;
	cp.capacity = 4 * n_original + 64;
	cp.dim = f8_malloc(cp.n_values * sizeof *cp.dim);
	cp.shard_of = f8_malloc(cp.n_values * sizeof *cp.shard_of);
	cp.learned = f8_calloc(cp.n_values, sizeof *cp.learned);
	cp.order = f8_calloc(cp.capacity, sizeof *cp.order);
	status = cp.dim && cp.shard_of && cp.learned && cp.order ? F8_OK : nomem(diag);
	for (uint32_t v = 0; !status && v < cp.n_values; v++)
		cp.dim[v] = WHOLE, cp.shard_of[v] = F8_NONE;
	if (!status)
		status = walk(&cp);
	if (!status) // a position table's Slice, now unread
		status = f8_pass_remove_dead_nodes(graph, diag);
	if (!status)
		status = f8_tp_infer_all(graph, diag);
	for (uint32_t v = 0; !status && v < graph->n_values; v++)
		if (cp.dim[v] != WHOLE && !(cp.dim[v] == ROWS && graph->values[v].output_index))
			// dispatched rows: this rank's, along dim 0 (their counts per expert are
			// not a part of anything)
			graph->values[v].placement[F8_MESH_AXIS_CP] = (f8_placement){
				.kind = F8_PLACEMENT_KIND_SHARD,
				.dim = (uint8_t)(cp.dim[v] == ROWS ? 0 : cp.dim[v])};
	if (!status) {
		memcpy(graph->mesh, mesh, sizeof mesh);
		if (report)
			fprintf(report, "context-parallel: the sequence of %lld tokens in 2 x CP = %lld "
				"chunks over cp, rank r holding chunks r and %lld - r (causal load "
				"balancing); %u Attention as RingAttention, %u values read through "
				"their LocalShard {balanced=1}, %u position tables looked up by the "
				"rank's positions, %u shape attributes divided\n", (long long)cp.seq,
				(long long)(2 * cp.ranks), (long long)(2 * cp.ranks - 1), cp.n_ring,
				cp.n_shards, cp.n_tables, cp.n_attrs);
	}
	f8_free(cp.dim), f8_free(cp.shard_of), f8_free(cp.learned), f8_free(cp.order);
	return status;
}
