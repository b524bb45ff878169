/*
 * attention-unfused: f32 Attention on a GPU target in primitives (the contract is in
 * passes/attention_unfused.h).
 *
 * requires: types (canonicalize), high-level ops (fuse-patterns); no backward yet.
 * provides: the decomposed Attentions' nodes in their places; the program rebuilt.
 *
 * One walk over the program: an Attention that decomposes is replaced by its primitives, the
 * last of which (the MatMul with v, the log-sum-exp's Add) take over its output values, as
 * passes/rewrite.c's commit does, so that names, types and readers stay as they were.
 */
#include "passes/attention_unfused.h" // f8_pass_attention_unfused_run

#include <math.h>   // INFINITY, sqrt
#include <stdio.h>  // fprintf, snprintf
#include <string.h> // memcpy

#include "ir/alloc.h"  // f8_malloc, f8_free
#include "ir/arena.h"  // f8_arena_strdup
#include "ir/ops.h"    // f8_node_attr_int, f8_node_attr_float, f8_tensor_data_make_scalar
#include "ir/text.h"   // f8_type_format
#include "ir/verify.h" // f8_node_infer_types

enum {
	NAME_MAX_BYTES = 320, // a value's name and a suffix
	REASON_MAX = 480,
	MAX_NEW = 24,         // nodes one Attention becomes, at most (with GQA and the lse)
	MAX_BIASES = 8,       // distinct (sq, skv) of causal biases in one plan
};

typedef struct causal_bias {
	f8_dim seq_q, seq_kv;
	f8_value_id value;
} causal_bias;

typedef struct unfuser {
	f8_graph *graph;
	f8_target chip;
	f8_diag *diag;
	FILE *report;
	f8_node_id *order; // the new program, n_order nodes so far
	uint32_t n_order;
	const f8_node *attention; // the node being decomposed (its scope, location)
	const char *base;         // its output's name, the stem of the new values' names
	causal_bias biases[MAX_BIASES];
	uint32_t n_biases;
	uint32_t n_decomposed, n_kept;
} unfuser;

static f8_status nomem(unfuser *u) {
	return f8_diag_set(u->diag, F8_ERR_NOMEM, "out of memory in the attention-unfused pass");
}

/*
 * A forward node of `op` reading `inputs`, with `attrs`, its one output named
 * <base>.<suffix>, in the Attention's scope and place, its type inferred; appended to the new
 * program; its output into *out.
 */
static f8_status add(unfuser *u, f8_op op, const f8_value_id *inputs, uint32_t n_inputs,
		     const f8_attr *attrs, uint32_t n_attrs, const char *suffix, f8_value_id *out) {
	f8_graph *graph = u->graph;
	char name[NAME_MAX_BYTES];
	snprintf(name, sizeof name, "%s.%s", u->base, suffix);
	const char *names[1] = {name};
	f8_node_id id;
	f8_status status = f8_graph_add_node(graph, op, inputs, n_inputs, 1, names, &id, u->diag);
	if (status)
		return status;
	if (n_attrs && f8_node_set_attrs(graph, id, attrs, n_attrs))
		return nomem(u);
	f8_node *node = &graph->nodes[id];
	node->phase = F8_PHASE_FWD;
	node->scope = u->attention->scope;
	node->location = u->attention->location;
	f8_type type;
	if ((status = f8_node_infer_types(graph, id, &type, u->diag))) {
		f8_diag_set_node(u->diag, graph, id);
		return status;
	}
	graph->values[node->outputs[0]].type = type;
	u->order[u->n_order++] = id;
	*out = node->outputs[0];
	return F8_OK;
}

static f8_attr ints_attr(const char *name, int64_t *items, uint32_t n) {
	return (f8_attr){.name = name, .kind = F8_ATTR_INTS, .ints = {.n = n, .items = items}};
}

static f8_attr dims_attr(const char *name, f8_dim *items, uint32_t n) {
	return (f8_attr){.name = name, .kind = F8_ATTR_DIMS, .dims = {.n = n, .items = items}};
}

/* A scalar Constant of `dtype`. */
static f8_status constant(unfuser *u, f8_dtype dtype, double value, const char *suffix,
			  f8_value_id *out) {
	uint8_t bytes[8];
	f8_tensor_data tensor = f8_tensor_data_make_scalar(dtype, value, bytes);
	f8_attr attr = {.name = "value", .kind = F8_ATTR_TENSOR, .tensor = &tensor};
	return add(u, F8_OP_CONSTANT, NULL, 0, &attr, 1, suffix, out);
}

/* k or v (b, kvh, s, e) read by every query head of its group: (b, h, s, e). */
static f8_status expand_heads(unfuser *u, f8_value_id x, f8_dim heads, const char *what,
			      f8_value_id *out) {
	const f8_shape shape = u->graph->values[x].type.shape;
	f8_dim group;
	if (f8_dim_equal(shape.dims[1], heads)) {
		*out = x;
		return F8_OK;
	}
	f8_dim_div(heads, shape.dims[1], &group); // shape inference checked that it divides
	char suffix[48];
	int64_t axis[1] = {2};
	f8_attr unsqueeze = ints_attr("axes", axis, 1);
	f8_dim wide[5] = {shape.dims[0], shape.dims[1], group, shape.dims[2], shape.dims[3]};
	f8_attr expand = dims_attr("shape", wide, 5);
	f8_dim merged[4] = {shape.dims[0], heads, shape.dims[2], shape.dims[3]};
	f8_attr reshape = dims_attr("shape", merged, 4);
	f8_value_id a, b;
	snprintf(suffix, sizeof suffix, "%s_unsqueezed", what);
	f8_status status = add(u, F8_OP_UNSQUEEZE, &x, 1, &unsqueeze, 1, suffix, &a);
	snprintf(suffix, sizeof suffix, "%s_expanded", what);
	if (!status)
		status = add(u, F8_OP_EXPAND, &a, 1, &expand, 1, suffix, &b);
	snprintf(suffix, sizeof suffix, "%s_heads", what);
	if (!status)
		status = add(u, F8_OP_RESHAPE, &b, 1, &reshape, 1, suffix, out);
	return status;
}

/* The causal bias (sq, skv) for `offset` = skv - sq >= 0: made at its first reader, shared by
 * the others of the same sizes. */
static f8_status causal_bias_of(unfuser *u, f8_dim seq_q, f8_dim seq_kv, int64_t offset,
				f8_value_id *out) {
	for (uint32_t i = 0; i < u->n_biases; i++)
		if (f8_dim_equal(u->biases[i].seq_q, seq_q) && f8_dim_equal(u->biases[i].seq_kv, seq_kv)) {
			*out = u->biases[i].value;
			return F8_OK;
		}
	uint8_t bytes[8];
	f8_tensor_data minus_inf = f8_tensor_data_make_scalar(F8_DTYPE_F32, -INFINITY, bytes);
	f8_dim dims[2] = {seq_q, seq_kv};
	f8_attr fill[2] = {dims_attr("shape", dims, 2),
			   {.name = "value", .kind = F8_ATTR_TENSOR, .tensor = &minus_inf}};
	f8_attr upper[2] = {{.name = "upper", .kind = F8_ATTR_INT, .i = 1},
			    {.name = "k", .kind = F8_ATTR_INT, .i = offset + 1}};
	// Named after the first reader, but shared: a plan's layers of one sequence length read one.
	f8_value_id filled;
	f8_status status = add(u, F8_OP_CONSTANT_OF_SHAPE, NULL, 0, fill, 2, "causal_fill", &filled);
	if (!status)
		status = add(u, F8_OP_TRILU, &filled, 1, upper, 2, "causal_bias", out);
	if (!status && u->n_biases < MAX_BIASES)
		u->biases[u->n_biases++] = (causal_bias){seq_q, seq_kv, *out};
	return status;
}

/* Whether `value` is read by a node of the program or is a graph output. */
static bool is_read(const f8_graph *graph, f8_value_id value) {
	for (uint32_t i = 0; i < graph->n_outputs; i++)
		if (graph->outputs[i] == value)
			return true;
	for (uint32_t p = 0; p < graph->n_order; p++) {
		const f8_node *node = &graph->nodes[graph->order[p]];
		for (uint32_t i = 0; i < node->n_inputs; i++)
			if (node->inputs[i] == value)
				return true;
	}
	return false;
}

/* The last new node's output replaced by `taken`, the node's output it stands for. */
static void take_over(unfuser *u, f8_value_id made, f8_value_id taken) {
	f8_graph *graph = u->graph;
	f8_node_id last = graph->values[made].producer;
	graph->nodes[last].outputs[0] = taken;
	graph->values[taken].producer = last;
	graph->values[taken].output_index = 0;
}

/* lse = max + log(sum(exp(s - max))) over the keys, (b, h, sq) f32, into the Attention's. */
static f8_status log_sum_exp(unfuser *u, f8_value_id scores, f8_value_id taken) {
	int64_t last[1] = {-1};
	f8_attr keep[2] = {ints_attr("axes", last, 1), {.name = "keepdims", .kind = F8_ATTR_INT, .i = 1}};
	f8_attr drop[2] = {ints_attr("axes", last, 1), {.name = "keepdims", .kind = F8_ATTR_INT, .i = 0}};
	f8_attr squeeze = ints_attr("axes", last, 1);
	f8_value_id max = F8_NONE, centred = F8_NONE, terms = F8_NONE, sum = F8_NONE;
	f8_value_id log_sum = F8_NONE, max_row = F8_NONE, lse = F8_NONE;
	f8_status status = add(u, F8_OP_REDUCE_MAX, &scores, 1, keep, 2, "lse_max", &max);
	f8_value_id pair[2] = {scores, max};
	if (!status)
		status = add(u, F8_OP_SUB, pair, 2, NULL, 0, "lse_centred", &centred);
	if (!status)
		status = add(u, F8_OP_EXP, &centred, 1, NULL, 0, "lse_terms", &terms);
	if (!status)
		status = add(u, F8_OP_REDUCE_SUM, &terms, 1, drop, 2, "lse_sum", &sum);
	if (!status)
		status = add(u, F8_OP_LOG, &sum, 1, NULL, 0, "lse_log", &log_sum);
	if (!status)
		status = add(u, F8_OP_SQUEEZE, &max, 1, &squeeze, 1, "lse_max_row", &max_row);
	f8_value_id parts[2] = {log_sum, max_row};
	if (!status)
		status = add(u, F8_OP_ADD, parts, 2, NULL, 0, "lse_made", &lse);
	if (!status)
		take_over(u, lse, taken);
	return status;
}

/* Why Attention `node` stays as it is, into `why`; NULL when it decomposes (its causal
 * offset skv - sq into *offset). */
static const char *kept_because(const unfuser *u, const f8_node *node, int64_t *offset) {
	const f8_graph *graph = u->graph;
	const f8_type *q = &graph->values[node->inputs[0]].type;
	const f8_type *k = &graph->values[node->inputs[1]].type;
	*offset = 0;
	if (!f8_node_attr(node, "scale") && !f8_dim_is_const(q->shape.dims[3]))
		return "a symbolic head dimension and no scale attribute: the default scale "
		       "1/sqrt(d) is not a constant";
	if (node->n_inputs > 3 && node->inputs[3] != F8_NONE)
		return "a mask input: a row it masks entirely is 0 in Attention, NaN through a "
		       "Softmax, so the decomposition would not be exact";
	if (!f8_node_attr_int(node, "causal", 0))
		return NULL;
	f8_dim sq = q->shape.dims[2], skv = k->shape.dims[2];
	if (f8_dim_equal(sq, skv))
		return NULL;
	if (!f8_dim_is_const(sq) || !f8_dim_is_const(skv))
		return "causal with query and key lengths that are not known to be equal";
	*offset = f8_dim_value(skv) - f8_dim_value(sq);
	return *offset < 0 ? "causal with more queries than keys: the first rows attend no key"
			   : NULL;
}

/* Attention `id` in primitives, its nodes appended to the new program. */
static f8_status decompose(unfuser *u, f8_node_id id, int64_t offset) {
	f8_graph *graph = u->graph;
	const f8_node node = graph->nodes[id]; // a copy: adding nodes may move the array
	u->attention = &node;
	u->base = graph->values[node.outputs[0]].name;
	const f8_type q = graph->values[node.inputs[0]].type;
	const f8_type k = graph->values[node.inputs[1]].type;
	f8_dim heads = q.shape.dims[1];
	double scale = f8_node_attr_float(&node, "scale",
					  1.0 / sqrt((double)f8_dim_value(q.shape.dims[3])));
	int64_t swap[4] = {0, 1, 3, 2};
	f8_attr transpose = ints_attr("perm", swap, 4);
	f8_attr last_axis = {.name = "axis", .kind = F8_ATTR_INT, .i = -1};
	f8_value_id keys = F8_NONE, values = F8_NONE, keys_t = F8_NONE, product = F8_NONE;
	f8_value_id factor = F8_NONE, scores = F8_NONE, bias = F8_NONE, probabilities = F8_NONE;
	f8_value_id out = F8_NONE;
	f8_status status = expand_heads(u, node.inputs[1], heads, "k", &keys);
	if (!status)
		status = expand_heads(u, node.inputs[2], heads, "v", &values);
	if (!status)
		status = add(u, F8_OP_TRANSPOSE, &keys, 1, &transpose, 1, "k_t", &keys_t);
	f8_value_id qk[2] = {node.inputs[0], keys_t};
	if (!status)
		status = add(u, F8_OP_MATMUL, qk, 2, NULL, 0, "qk", &product);
	if (!status)
		status = constant(u, q.dtype, scale, "scale", &factor);
	f8_value_id scaled[2] = {product, factor};
	if (!status)
		status = add(u, F8_OP_MUL, scaled, 2, NULL, 0, "scores", &scores);
	if (!status && f8_node_attr_int(&node, "causal", 0)) {
		status = causal_bias_of(u, q.shape.dims[2], k.shape.dims[2], offset, &bias);
		f8_value_id masked[2] = {scores, bias};
		if (!status)
			status = add(u, F8_OP_ADD, masked, 2, NULL, 0, "scores_causal", &scores);
	}
	if (!status)
		status = add(u, F8_OP_SOFTMAX, &scores, 1, &last_axis, 1, "probabilities",
			     &probabilities);
	f8_value_id pv[2] = {probabilities, values};
	if (!status)
		status = add(u, F8_OP_MATMUL, pv, 2, NULL, 0, "out", &out);
	if (status)
		return status;
	take_over(u, out, node.outputs[0]);
	if (node.n_outputs > 1 && node.outputs[1] != F8_NONE && is_read(graph, node.outputs[1]) &&
	    (status = log_sum_exp(u, scores, node.outputs[1])))
		return status;
	// The decision, where the plan's other decisions are: on the probabilities, the tensor
	// it costs (a value's reason, as the bf16 pass's casts and precision's GEMMs carry).
	char reason[REASON_MAX], shape[160];
	f8_value *p = &graph->values[probabilities];
	snprintf(reason, sizeof reason, "f32 attention on %s: cuDNN has no f32 fused attention; "
		 "decomposed into batched MatMul + Softmax, O(s^2) memory per head (%s "
		 "probabilities), as TransformerEngine's unfused attention",
		 f8_target_name(u->chip), f8_type_format(graph, &p->type, shape, sizeof shape));
	if (!(p->precision.reason = f8_arena_strdup(graph->arena, reason)))
		return nomem(u);
	p->precision.format = p->type.dtype;
	if (u->report)
		fprintf(u->report, "attention-unfused: %s: %s\n",
			node.scope ? node.scope : u->base, reason);
	u->n_decomposed++;
	return F8_OK;
}

/* F8_ERR_INVALID when the graph has a backward already. */
static f8_status check_forward(const unfuser *u) {
	const f8_graph *graph = u->graph;
	for (uint32_t i = 0; i < graph->n_order; i++) {
		if (graph->nodes[graph->order[i]].phase == F8_PHASE_FWD)
			continue;
		f8_diag_set(u->diag, F8_ERR_INVALID, "attention-unfused rewrites the forward's "
			    "attention, and this graph has a backward already");
		f8_diag_hint(u->diag, "run attention-unfused before training, so that autodiff "
			     "derives the backward from the primitives (the pipeline's order)");
		f8_diag_set_node(u->diag, graph, graph->order[i]);
		return F8_ERR_INVALID;
	}
	return F8_OK;
}

/* The f32 Attentions of the program: how many, into *count. */
static uint32_t count_f32_attention(const f8_graph *graph) {
	uint32_t count = 0;
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		count += node->op == F8_OP_ATTENTION &&
			 graph->values[node->inputs[0]].type.dtype == F8_DTYPE_F32;
	}
	return count;
}

f8_status f8_pass_attention_unfused_run(f8_graph *graph, f8_target chip, FILE *report,
					f8_diag *diag) {
	unfuser u = {.graph = graph, .chip = chip, .diag = diag, .report = report};
	uint32_t n_attention = count_f32_attention(graph);
	// cpu runs Attention in any dtype (the reference kernels); cuDNN takes bf16 and fp16.
	if (chip == F8_TARGET_CPU || n_attention == 0)
		return F8_OK;
	f8_status status = check_forward(&u);
	if (status)
		return status;
	uint32_t n_old = graph->n_order;
	f8_node_id *old = f8_malloc((n_old ? n_old : 1) * sizeof *old);
	u.order = f8_malloc(((size_t)n_old + (size_t)n_attention * MAX_NEW + 1) * sizeof *u.order);
	if (!old || !u.order)
		status = nomem(&u);
	if (!status && n_old) // an empty graph's order may be NULL
		memcpy(old, graph->order, n_old * sizeof *old);
	for (uint32_t p = 0; !status && p < n_old; p++) {
		const f8_node *node = &graph->nodes[old[p]];
		int64_t offset;
		const char *why = NULL;
		bool ours = node->op == F8_OP_ATTENTION &&
			    graph->values[node->inputs[0]].type.dtype == F8_DTYPE_F32;
		if (ours && !(why = kept_because(&u, node, &offset))) {
			status = decompose(&u, old[p], offset);
			continue;
		}
		if (ours) {
			u.n_kept++;
			if (report)
				fprintf(report, "attention-unfused: %s: kept Attention (f32 on %s): %s; "
					"the CUDA backend refuses it (compile with --bf16)\n",
					node->scope ? node->scope : graph->values[node->outputs[0]].name,
					f8_target_name(chip), why);
		}
		u.order[u.n_order++] = old[p];
	}
	if (!status && f8_graph_set_order(graph, u.order, u.n_order))
		status = nomem(&u);
	if (!status && report)
		fprintf(report, "attention-unfused: %u f32 Attention(s) on %s decomposed into "
			"MatMul + Softmax, %u kept\n", u.n_decomposed, f8_target_name(chip), u.n_kept);
	f8_free(old);
	f8_free(u.order);
	return status;
}
