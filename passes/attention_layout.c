/*
 * attention-layout: Attention and AttentionGrad read and write the QKV projection's packed
 * layout in place (the contract is in passes/attention_layout.h).
 *
 * requires: types; fuse not yet run.
 * provides: AttentionPacked(Grad) in the places of the matched Attention(Grad)s; the program
 *           rebuilt without the copies they replace.
 *
 * One walk over the program's Attentions: each is matched with its input chain back to one
 * Split, its output chain, and every AttentionGrad that reads it with theirs; the readers of
 * every value the match would remove are checked against the match; then the packed nodes
 * take over the values that leave the match (merged, the lse, dqkv), as passes/rewrite.c's
 * commit does, so that names, types and readers stay as they were.
 */
#include "passes/attention_layout.h" // f8_pass_attention_layout_run

#include <stdarg.h> // va_list
#include <stdio.h>  // fprintf, snprintf, vsnprintf
#include <string.h> // memcpy

#include "ir/alloc.h"  // f8_calloc, f8_malloc, f8_free
#include "ir/arena.h"  // f8_arena_strdup
#include "ir/ops.h"    // f8_node_attr*, f8_op_name
#include "ir/text.h"   // f8_type_format
#include "ir/verify.h" // f8_node_infer_types

enum {
	MAX_GRADS = 4,                          // AttentionGrads of one Attention
	MAX_CLONES = 3,                         // recompute clones of one Attention
	MAX_MEMBERS = 9 + MAX_GRADS * 9,        // the copies a match removes
	WHY_MAX = 240,
	REASON_MAX = 1024,
};

typedef struct layout_pass {
	f8_graph *graph;
	FILE *report;
	f8_diag *diag;
	uint32_t n_nodes;        // the nodes when the pass began: the arrays below are this long
	bool *in_program;        // (n_nodes)
	bool *removed;           // (n_nodes) leaves the program
	f8_node_id *replaced_by; // (n_nodes) the packed node that takes its place, or F8_NONE
	uint32_t *first_reader;  // (n_values + 1) readers of value v: readers[first_reader[v] ..
	f8_node_id *readers;     //   first_reader[v + 1]), in program order
	bool *escapes;           // (n_values) a graph output or an update's source
	uint32_t *match_of;      // (n_nodes) an Attention's own match, F8_NONE before it is tried
	bool *claimed;           // (n_nodes) an Attention in a match made (its own, or a clone)
	uint32_t n_packed, n_kept;
} layout_pass;

/* A recompute clone of a matched Attention: the same q, k, v, mask and attributes, its outputs
 * read by AttentionGrads alone (selective recompute of core_attn makes one in the backward). */
typedef struct clone {
	f8_node_id node;
	f8_value_id core, lse;
	f8_value_id out;   // its packed node's (b, s, h d) output, made by prepare_packed
	f8_node_id packed;
	const char *reason;
} clone;

/* One Attention's match: what leaves the program and what the packed nodes take over. */
typedef struct match {
	f8_node_id attention;
	f8_value_id qkv, mask, core, merged, lse;
	f8_node_id out_transpose; // the output's Transpose back to (b, s, h, d)
	int64_t heads, kv_heads;
	clone clones[MAX_CLONES];
	uint32_t n_clones;
	f8_node_id grads[MAX_GRADS];
	f8_value_id dmerged[MAX_GRADS], dqkv[MAX_GRADS];
	uint32_t grad_source[MAX_GRADS]; // what each reads: 0 the Attention, c + 1 clone c
	uint32_t n_grads;
	f8_node_id members[MAX_MEMBERS]; // the copies (not the Attention, not its gradients)
	uint32_t n_members;
	bool matched;
	bool superseded; // kept alone, then found to be a clone of a later match
	char why_not[WHY_MAX];
	// The rewrite, made before anything changes: the packed nodes (outputs not yet taken
	// over), and the reasons of merged and each dqkv, or of the kept Attention's output.
	f8_node_id packed, packed_grads[MAX_GRADS];
	const char *reason, *grad_reasons[MAX_GRADS];
} match;

static f8_status nomem(layout_pass *lp) {
	return f8_diag_set(lp->diag, F8_ERR_NOMEM, "out of memory in the attention-layout pass");
}

static bool no_match(match *m, const char *format, ...) __attribute__((format(printf, 2, 3)));
static bool no_match(match *m, const char *format, ...) {
	va_list args;
	va_start(args, format);
	vsnprintf(m->why_not, sizeof m->why_not, format, args);
	va_end(args);
	return false;
}

/* The readers of every value among the program's nodes, and which values escape the step. */
static f8_status index_readers(layout_pass *lp) {
	const f8_graph *graph = lp->graph;
	uint32_t n_values = graph->n_values, n_reads = 0;
	lp->first_reader = f8_calloc((size_t)n_values + 1, sizeof *lp->first_reader);
	lp->escapes = f8_calloc(n_values ? n_values : 1, sizeof *lp->escapes);
	if (!lp->first_reader || !lp->escapes)
		return nomem(lp);
	for (uint32_t p = 0; p < graph->n_order; p++) {
		const f8_node *node = &graph->nodes[graph->order[p]];
		lp->in_program[graph->order[p]] = true;
		for (uint32_t i = 0; i < node->n_inputs; i++)
			if (node->inputs[i] != F8_NONE)
				lp->first_reader[node->inputs[i] + 1]++, n_reads++;
	}
	for (uint32_t v = 0; v < n_values; v++)
		lp->first_reader[v + 1] += lp->first_reader[v];
	lp->readers = f8_malloc((n_reads ? n_reads : 1) * sizeof *lp->readers);
	uint32_t *next = f8_malloc((n_values ? n_values : 1) * sizeof *next);
	if (!lp->readers || !next) {
		f8_free(next);
		return nomem(lp);
	}
	memcpy(next, lp->first_reader, n_values * sizeof *next);
	for (uint32_t p = 0; p < graph->n_order; p++) {
		const f8_node *node = &graph->nodes[graph->order[p]];
		for (uint32_t i = 0; i < node->n_inputs; i++) {
			f8_value_id v = node->inputs[i];
			// A node reading a value twice counts once: the checks ask who reads it.
			if (v != F8_NONE && (next[v] == lp->first_reader[v] ||
					     lp->readers[next[v] - 1] != graph->order[p]))
				lp->readers[next[v]++] = graph->order[p];
		}
	}
	// Slots left by repeated reads hold F8_NONE, which no check takes for a node.
	for (uint32_t v = 0; v < n_values; v++)
		for (uint32_t r = next[v]; r < lp->first_reader[v + 1]; r++)
			lp->readers[r] = F8_NONE;
	f8_free(next);
	for (uint32_t o = 0; o < graph->n_outputs; o++)
		lp->escapes[graph->outputs[o]] = true;
	for (uint32_t u = 0; u < graph->n_updates; u++)
		lp->escapes[graph->updates[u].source] = true;
	return F8_OK;
}

/* The producer of `value` when it is a node of the program of `op`, in no kernel; else NULL. */
static const f8_node *producer(const layout_pass *lp, f8_value_id value, f8_op op,
			       f8_node_id *id) {
	if (value == F8_NONE)
		return NULL;
	f8_node_id p = lp->graph->values[value].producer;
	if (p == F8_NONE || p >= lp->n_nodes || !lp->in_program[p])
		return NULL;
	const f8_node *node = &lp->graph->nodes[p];
	if (node->op != op || node->group != F8_NONE)
		return NULL;
	*id = p;
	return node;
}

/* Whether every reader of `value` is one of allowed[0..n) and it does not escape the step. */
static bool read_only_by(const layout_pass *lp, f8_value_id value, const f8_node_id *allowed,
			 uint32_t n) {
	if (lp->escapes[value])
		return false;
	for (uint32_t r = lp->first_reader[value]; r < lp->first_reader[value + 1]; r++) {
		f8_node_id reader = lp->readers[r];
		bool found = reader == F8_NONE;
		for (uint32_t i = 0; i < n && !found; i++)
			found = allowed[i] == reader;
		if (!found)
			return false;
	}
	return true;
}

/* The one reader of `value`, or F8_NONE when it has none or several. */
static f8_node_id only_reader(const layout_pass *lp, f8_value_id value) {
	f8_node_id only = F8_NONE;
	for (uint32_t r = lp->first_reader[value]; r < lp->first_reader[value + 1]; r++) {
		if (lp->readers[r] == F8_NONE)
			continue;
		if (only != F8_NONE)
			return F8_NONE;
		only = lp->readers[r];
	}
	return lp->escapes[value] ? F8_NONE : only;
}

/* Whether `node` is a Transpose that swaps the heads and the sequence of a rank-4 tensor. */
static bool swaps_heads(const f8_node *node) {
	const f8_attr *perm = f8_node_attr(node, "perm");
	static const int64_t want[4] = {0, 2, 1, 3};
	if (!perm || perm->kind != F8_ATTR_INTS || perm->ints.n != 4)
		return false;
	for (int i = 0; i < 4; i++)
		if (perm->ints.items[i] != want[i])
			return false;
	return true;
}

/* Whether `node`'s input is split along its last axis (of 3). */
static bool last_of_three(const f8_graph *graph, const f8_node *node) {
	const f8_type *x = &graph->values[node->op == F8_OP_SPLIT ? node->inputs[0]
								 : node->outputs[0]].type;
	int axis;
	return x->shape.rank == 3 &&
	       f8_axis_normalize(f8_node_attr_int(node, "axis", 0), 3, false, &axis) && axis == 2;
}

static const f8_shape *shape_of(const f8_graph *graph, f8_value_id v) {
	return &graph->values[v].type.shape;
}

/* Whether Reshape `node` turns (b, s, n d) into (b, s, n, d) (`split`) or back, with n a
 * constant; n into *heads, d into *head_dim. */
static bool reshapes_heads(const f8_graph *graph, const f8_node *node, bool split,
			   int64_t *heads, f8_dim *head_dim) {
	const f8_shape *in = shape_of(graph, node->inputs[0]), *out = shape_of(graph, node->outputs[0]);
	const f8_shape *packed = split ? in : out, *heads_shape = split ? out : in;
	f8_dim width;
	if (packed->rank != 3 || heads_shape->rank != 4 ||
	    !f8_dim_equal(packed->dims[0], heads_shape->dims[0]) ||
	    !f8_dim_equal(packed->dims[1], heads_shape->dims[1]) ||
	    !f8_dim_is_const(heads_shape->dims[2]) ||
	    !f8_dim_mul(heads_shape->dims[2], heads_shape->dims[3], &width) ||
	    !f8_dim_equal(width, packed->dims[2]))
		return false;
	*heads = f8_dim_value(heads_shape->dims[2]);
	*head_dim = heads_shape->dims[3];
	return true;
}

static void add_member(match *m, f8_node_id id) {
	if (m->n_members < MAX_MEMBERS)
		m->members[m->n_members++] = id;
}

/* The Attention's inputs back to one Split of qkv: q, k, v its parts 0, 1, 2, each reshaped
 * to heads and transposed; only these nodes read the parts and the reshaped heads. */
static bool match_inputs(const layout_pass *lp, match *m) {
	const f8_graph *graph = lp->graph;
	const f8_node *attention = &graph->nodes[m->attention];
	const f8_node *split = NULL;
	f8_node_id split_id = F8_NONE;
	int64_t heads[3];
	f8_dim head_dim[3];
	static const char *const names[3] = {"q", "k", "v"};
	for (uint32_t i = 0; i < 3; i++) {
		f8_value_id x = attention->inputs[i];
		f8_node_id t_id, r_id, s_id;
		const f8_node *t = producer(lp, x, F8_OP_TRANSPOSE, &t_id);
		if (!t || !swaps_heads(t)) {
			f8_node_id by = graph->values[x].producer;
			return no_match(m, "%s is made by %s, not by a Transpose of the QKV output's "
					"heads to (b, h, s, d) (RoPE between the Split and the "
					"Attention, say)", names[i],
					by == F8_NONE ? "no node" : f8_op_name(graph->nodes[by].op));
		}
		const f8_node *r = producer(lp, t->inputs[0], F8_OP_RESHAPE, &r_id);
		if (!r || !reshapes_heads(graph, r, true, &heads[i], &head_dim[i]))
			return no_match(m, "%s is not a Reshape of (b, s, h d) to (b, s, h, d) "
					"transposed", names[i]);
		f8_value_id part = r->inputs[0];
		const f8_node *s = producer(lp, part, F8_OP_SPLIT, &s_id);
		if (!s || graph->values[part].output_index != i || (split && s_id != split_id))
			return no_match(m, "%s is not part %u of one Split into q, k and v", names[i],
					i);
		split = s, split_id = s_id;
		if (!read_only_by(lp, part, &r_id, 1) || !read_only_by(lp, r->outputs[0], &t_id, 1))
			return no_match(m, "another node reads %s's part or its heads (b, s, h, d)",
					names[i]);
		add_member(m, r_id);
		add_member(m, t_id);
	}
	if (split->n_outputs != 3 || !last_of_three(graph, split))
		return no_match(m, "the Split is not of a (b, s, width) tensor into 3 parts along "
				"its last axis");
	if (heads[1] != heads[2] || !f8_dim_equal(head_dim[0], head_dim[1]) ||
	    !f8_dim_equal(head_dim[0], head_dim[2]))
		return no_match(m, "q, k and v do not share one head dim, or k and v their heads");
	add_member(m, split_id);
	m->qkv = split->inputs[0];
	m->heads = heads[0];
	m->kv_heads = heads[1];
	return true;
}

/* The output's Transpose to (b, s, h, d) and Reshape to (b, s, h d): merged. */
static bool match_output(const layout_pass *lp, match *m) {
	const f8_graph *graph = lp->graph;
	f8_node_id t_id = F8_NONE, r_id;
	for (uint32_t r = lp->first_reader[m->core]; r < lp->first_reader[m->core + 1]; r++) {
		f8_node_id reader = lp->readers[r];
		if (reader != F8_NONE && graph->nodes[reader].op == F8_OP_TRANSPOSE)
			t_id = t_id == F8_NONE ? reader : F8_NONE - 1; // a second one: no match
	}
	const f8_node *t = t_id < lp->n_nodes ? &graph->nodes[t_id] : NULL;
	if (!t || t->group != F8_NONE || !swaps_heads(t))
		return no_match(m, "the output is not read by one Transpose back to (b, s, h, d)");
	r_id = only_reader(lp, t->outputs[0]);
	const f8_node *r = r_id != F8_NONE ? &graph->nodes[r_id] : NULL;
	int64_t heads;
	f8_dim head_dim;
	if (!r || r->op != F8_OP_RESHAPE || r->group != F8_NONE ||
	    !reshapes_heads(graph, r, false, &heads, &head_dim) || heads != m->heads)
		return no_match(m, "the output's (b, s, h, d) is not only reshaped to (b, s, h d)");
	add_member(m, t_id);
	add_member(m, r_id);
	m->out_transpose = t_id;
	m->merged = r->outputs[0];
	return true;
}

static bool same_float_attr(const f8_node *a, const f8_node *b, const char *name) {
	const f8_attr *x = f8_node_attr(a, name), *y = f8_node_attr(b, name);
	return !x == !y && (!x || f8_node_attr_float(a, name, 0) == f8_node_attr_float(b, name, 0));
}

/* AttentionGrad `id` of the match's Attention: dout from dmerged through the mirror chain, its
 * dq, dk, dv through their chains into one Concat, dqkv. */
static bool match_grad(const layout_pass *lp, match *m, f8_node_id id) {
	const f8_graph *graph = lp->graph;
	const f8_node *g = &graph->nodes[id], *a = &graph->nodes[m->attention];
	f8_value_id mask = g->n_inputs > 6 ? g->inputs[6] : F8_NONE;
	uint32_t source = F8_NONE; // whose out and lse it reads: the Attention's or a clone's
	if (g->inputs[4] == m->core && m->lse != F8_NONE && g->inputs[5] == m->lse)
		source = 0;
	for (uint32_t c = 0; c < m->n_clones && source == F8_NONE; c++)
		if (g->inputs[4] == m->clones[c].core && m->clones[c].lse != F8_NONE &&
		    g->inputs[5] == m->clones[c].lse)
			source = c + 1;
	if (g->group != F8_NONE || g->n_outputs != 3 || g->inputs[1] != a->inputs[0] ||
	    g->inputs[2] != a->inputs[1] || g->inputs[3] != a->inputs[2] || source == F8_NONE ||
	    mask != m->mask || f8_node_attr_int(g, "causal", 0) != f8_node_attr_int(a, "causal", 0) ||
	    !same_float_attr(g, a, "scale"))
		return no_match(m, "an AttentionGrad reads it with other operands or attributes");
	if (m->n_grads == MAX_GRADS)
		return no_match(m, "more than %d AttentionGrads read it", MAX_GRADS);
	f8_node_id t_id, r_id;
	int64_t heads;
	f8_dim head_dim;
	const f8_node *t = producer(lp, g->inputs[0], F8_OP_TRANSPOSE, &t_id);
	const f8_node *r = t && swaps_heads(t) ? producer(lp, t->inputs[0], F8_OP_RESHAPE, &r_id)
					       : NULL;
	if (!r || !reshapes_heads(graph, r, true, &heads, &head_dim) || heads != m->heads ||
	    !read_only_by(lp, g->inputs[0], &id, 1) || !read_only_by(lp, t->inputs[0], &t_id, 1) ||
	    !f8_type_equal(&graph->values[r->inputs[0]].type, &graph->values[m->merged].type))
		return no_match(m, "its gradient's dout is not only dmerged (b, s, h d) reshaped and "
				"transposed to (b, h, s, d)");
	add_member(m, r_id);
	add_member(m, t_id);
	m->dmerged[m->n_grads] = r->inputs[0];
	f8_node_id concat_id = F8_NONE;
	for (uint32_t j = 0; j < 3; j++) {
		f8_node_id back_id = only_reader(lp, g->outputs[j]);
		const f8_node *back = back_id != F8_NONE ? &graph->nodes[back_id] : NULL;
		f8_node_id merge_id = back && back->op == F8_OP_TRANSPOSE && swaps_heads(back) &&
					      back->group == F8_NONE
					      ? only_reader(lp, back->outputs[0])
					      : F8_NONE;
		const f8_node *merge = merge_id != F8_NONE ? &graph->nodes[merge_id] : NULL;
		int64_t expected = j == 0 ? m->heads : m->kv_heads;
		if (!merge || merge->op != F8_OP_RESHAPE || merge->group != F8_NONE ||
		    !reshapes_heads(graph, merge, false, &heads, &head_dim) || heads != expected)
			return no_match(m, "its gradient's d%s is not only transposed and reshaped "
					"back to (b, s, h d)", j == 0 ? "q" : j == 1 ? "k" : "v");
		f8_node_id c_id = only_reader(lp, merge->outputs[0]);
		if (c_id == F8_NONE || (concat_id != F8_NONE && c_id != concat_id))
			return no_match(m, "its gradient's dq, dk, dv do not go into one Concat alone");
		concat_id = c_id;
		const f8_node *c = &graph->nodes[c_id];
		if (c->op != F8_OP_CONCAT || c->group != F8_NONE || c->n_inputs != 3 ||
		    c->inputs[j] != merge->outputs[0] || !last_of_three(graph, c))
			return no_match(m, "its gradient's dq, dk, dv are not concatenated in order "
					"along the last axis into dqkv");
		add_member(m, back_id);
		add_member(m, merge_id);
	}
	const f8_node *c = &graph->nodes[concat_id];
	if (!f8_type_equal(&graph->values[c->outputs[0]].type, &graph->values[m->qkv].type))
		return no_match(m, "dqkv is not of qkv's type");
	add_member(m, concat_id);
	m->dqkv[m->n_grads] = c->outputs[0];
	m->grad_source[m->n_grads] = source;
	m->grads[m->n_grads++] = id;
	return true;
}

/* Whether `id` is among the match's gradients. */
static bool is_grad(const match *m, f8_node_id id) {
	for (uint32_t i = 0; i < m->n_grads; i++)
		if (m->grads[i] == id)
			return true;
	return false;
}

/* Whether `id` is the match's Attention or one of its clones. */
static bool is_source(const match *m, f8_node_id id) {
	if (id == m->attention)
		return true;
	for (uint32_t c = 0; c < m->n_clones; c++)
		if (m->clones[c].node == id)
			return true;
	return false;
}

/* Every AttentionGrad that reads the Attention's (or a clone's) q, k, v, out or lse, matched;
 * the readers of q, k, v and each out checked against the match. */
static bool match_grads(const layout_pass *lp, match *m) {
	const f8_graph *graph = lp->graph;
	const f8_node *a = &graph->nodes[m->attention];
	f8_value_id read[5 + 2 * MAX_CLONES] = {a->inputs[0], a->inputs[1], a->inputs[2], m->core,
						m->lse};
	uint32_t n_read = 5;
	for (uint32_t c = 0; c < m->n_clones; c++) {
		read[n_read++] = m->clones[c].core;
		read[n_read++] = m->clones[c].lse;
	}
	for (uint32_t i = 0; i < n_read; i++) {
		if (read[i] == F8_NONE)
			continue;
		for (uint32_t r = lp->first_reader[read[i]]; r < lp->first_reader[read[i] + 1]; r++) {
			f8_node_id reader = lp->readers[r];
			if (reader == F8_NONE || is_source(m, reader) || is_grad(m, reader) ||
			    graph->nodes[reader].op != F8_OP_ATTENTION_GRAD)
				continue;
			if (!match_grad(lp, m, reader))
				return false;
		}
	}
	f8_node_id allowed[MAX_GRADS + 1 + MAX_CLONES];
	memcpy(allowed, m->grads, m->n_grads * sizeof *allowed);
	uint32_t n_allowed = m->n_grads;
	allowed[n_allowed++] = m->attention;
	for (uint32_t c = 0; c < m->n_clones; c++)
		allowed[n_allowed++] = m->clones[c].node;
	for (uint32_t i = 0; i < 3; i++)
		if (!read_only_by(lp, a->inputs[i], allowed, n_allowed))
			return no_match(m, "its %s (b, h, s, d) is read by a node besides it, its clones "
					"and its AttentionGrads, or is a graph output",
					i == 0 ? "q" : i == 1 ? "k" : "v");
	for (uint32_t c = 0; c < m->n_clones; c++)
		if (!read_only_by(lp, m->clones[c].core, m->grads, m->n_grads))
			return no_match(m, "the output of its recompute clone is read by a node besides "
					"its AttentionGrads, or is a graph output");
	allowed[m->n_grads] = m->out_transpose;
	if (!read_only_by(lp, m->core, allowed, m->n_grads + 1))
		return no_match(m, "its output (b, h, s, d) is read by a node besides its Transpose "
				"and its AttentionGrads, or is a graph output");
	return true;
}

/* The Attention's recompute clones: the other Attentions reading its q, k, v (and mask) with
 * its attributes, not yet in another match. */
static bool find_clones(const layout_pass *lp, match *m) {
	const f8_graph *graph = lp->graph;
	const f8_node *a = &graph->nodes[m->attention];
	f8_value_id q = a->inputs[0];
	for (uint32_t r = lp->first_reader[q]; r < lp->first_reader[q + 1]; r++) {
		f8_node_id id = lp->readers[r];
		if (id == F8_NONE || id == m->attention || graph->nodes[id].op != F8_OP_ATTENTION)
			continue;
		const f8_node *c = &graph->nodes[id];
		bool same = c->n_inputs == a->n_inputs && c->group == F8_NONE &&
			    f8_node_attr_int(c, "causal", 0) == f8_node_attr_int(a, "causal", 0) &&
			    same_float_attr(c, a, "scale");
		for (uint32_t i = 0; same && i < a->n_inputs; i++)
			same = c->inputs[i] == a->inputs[i];
		if (!same)
			continue; // not a clone: the readers' check refuses the match
		if (m->n_clones == MAX_CLONES || lp->claimed[id])
			return no_match(m, "another Attention reads its q, k and v");
		m->clones[m->n_clones++] = (clone){
			.node = id, .core = c->outputs[0],
			.lse = c->n_outputs > 1 ? c->outputs[1] : F8_NONE, .out = F8_NONE};
	}
	return true;
}

/* Matches the Attention `id` whole (see passes/attention_layout.h); false with m->why_not. */
static bool match_attention(const layout_pass *lp, f8_node_id id, match *m) {
	const f8_node *a = &lp->graph->nodes[id];
	*m = (match){.attention = id, .mask = a->n_inputs > 3 ? a->inputs[3] : F8_NONE,
		     .core = a->outputs[0], .lse = a->n_outputs > 1 ? a->outputs[1] : F8_NONE};
	if (a->group != F8_NONE)
		return no_match(m, "it is in a fused kernel already");
	return match_inputs(lp, m) && match_output(lp, m) && find_clones(lp, m) &&
	       match_grads(lp, m);
}

/* The packed nodes' attributes: heads, kv_heads, and the Attention's causal and scale. */
static uint32_t packed_attrs(const match *m, const f8_node *attention, f8_attr *attrs) {
	uint32_t n = 0;
	attrs[n++] = (f8_attr){.name = "heads", .kind = F8_ATTR_INT, .i = m->heads};
	attrs[n++] = (f8_attr){.name = "kv_heads", .kind = F8_ATTR_INT, .i = m->kv_heads};
	const f8_attr *causal = f8_node_attr(attention, "causal");
	const f8_attr *scale = f8_node_attr(attention, "scale");
	if (causal)
		attrs[n++] = *causal;
	if (scale)
		attrs[n++] = *scale;
	return n;
}

/*
 * A packed node of `op` for node `old` (its scope, name, location, phase and recompute reason),
 * reading inputs[0..n_inputs), with n_outputs outputs: those with a value in taken[] must have
 * its type (the node takes them over at commit), the others (F8_NONE there) are its own, named
 * `fresh` (the first) and typed by inference. *out its id. It is not in the program yet (the
 * caller's order says where it goes). F8_ERR_INVALID when a type differs (the match let through
 * what the op does not compute).
 */
static f8_status packed_node(layout_pass *lp, const match *m, f8_op op, f8_node_id old,
			     const f8_value_id *inputs, uint32_t n_inputs,
			     const f8_value_id *taken, uint32_t n_outputs, const char *fresh,
			     f8_node_id *out) {
	f8_graph *graph = lp->graph;
	f8_attr attrs[4];
	uint32_t n_attrs = packed_attrs(m, &graph->nodes[m->attention], attrs);
	const char *names[2] = {taken[0] == F8_NONE ? fresh : NULL, NULL};
	f8_node_id id;
	f8_status status = f8_graph_add_node(graph, op, inputs, n_inputs, n_outputs, names, &id,
					     lp->diag);
	if (status)
		return status;
	if (f8_node_set_attrs(graph, id, attrs, n_attrs))
		return nomem(lp);
	f8_node *node = &graph->nodes[id];
	const f8_node *was = &graph->nodes[old];
	node->scope = was->scope;
	node->name = was->name;
	node->location = was->location;
	node->text_line = was->text_line;
	node->phase = was->phase;
	node->recompute = was->recompute;
	f8_type types[2];
	if ((status = f8_node_infer_types(graph, id, types, lp->diag)))
		return status;
	for (uint32_t o = 0; o < n_outputs; o++) {
		if (taken[o] == F8_NONE) {
			graph->values[node->outputs[o]].type = types[o];
			continue;
		}
		if (f8_type_equal(&types[o], &graph->values[taken[o]].type))
			continue;
		f8_diag_set(lp->diag, F8_ERR_INVALID, "attention-layout: %s's output %u would not be "
			    "%%%s's type", f8_op_name(op), o, graph->values[taken[o]].name);
		f8_diag_set_node(lp->diag, graph, old);
		return F8_ERR_INVALID;
	}
	*out = id;
	return F8_OK;
}

/* Node `id`'s outputs become taken[0..n) where those are values: their producer is it. */
static void take_over(f8_graph *graph, f8_node_id id, const f8_value_id *taken, uint32_t n) {
	for (uint32_t o = 0; o < n; o++) {
		if (taken[o] == F8_NONE)
			continue;
		graph->nodes[id].outputs[o] = taken[o];
		graph->values[taken[o]].producer = id;
		graph->values[taken[o]].output_index = o;
	}
}

/* `was` joined with `decision` after "; " (or alone), in the graph's arena; NULL when out of
 * memory. */
static const char *joined(layout_pass *lp, const char *was, const char *decision) {
	char reason[2 * REASON_MAX + 4];
	snprintf(reason, sizeof reason, "%s%s%s", was ? was : "", was ? "; " : "", decision);
	return f8_arena_strdup(lp->graph->arena, reason);
}

/* The packed nodes of a match, and its reasons: on merged (the packed attention's output) the
 * attention's precision decision and the layout, on a clone's packed output likewise; on each
 * dqkv the gradients' and the layout. Nothing the program reads changes. */
static f8_status prepare_packed(layout_pass *lp, match *m) {
	f8_graph *graph = lp->graph;
	char qkv[160], decision[REASON_MAX], name[400];
	const f8_value *source = &graph->values[m->qkv];
	f8_type_format(graph, &source->type, qkv, sizeof qkv);
	snprintf(decision, sizeof decision, "layout: q, k and v read in place from %s %s as "
		 "(b, s, %lld + 2 x %lld heads, d) and the output written as (b, s, h d) "
		 "(TransformerEngine's bs3hd and bshd; cuDNN takes the strides): its Split, 3 "
		 "Reshapes and 3 Transposes and its output's Transpose and Reshape, 9 copies, gone",
		 source->name, qkv, (long long)m->heads, (long long)m->kv_heads);
	const f8_value *merged = &graph->values[m->merged];
	const char *was = merged->precision.format == F8_DTYPE_UNDEFINED
				  ? graph->values[m->core].precision.reason
				  : merged->precision.reason;
	if (!(m->reason = joined(lp, was, decision)))
		return nomem(lp);
	for (uint32_t c = 0; c < m->n_clones; c++)
		if (!(m->clones[c].reason = joined(lp, graph->values[m->clones[c].core].precision.reason,
						   "layout: the recompute of an attention whose q, "
						   "k and v are read in place from the QKV output, "
						   "its output written as (b, s, h d)")))
			return nomem(lp);
	for (uint32_t g = 0; g < m->n_grads; g++) {
		const f8_value *dqkv = &graph->values[m->dqkv[g]];
		was = dqkv->precision.format == F8_DTYPE_UNDEFINED
			      ? graph->values[graph->nodes[m->grads[g]].outputs[0]].precision.reason
			      : dqkv->precision.reason;
		m->grad_reasons[g] = joined(lp, was, "layout: dq, dk and dv written in place into "
					    "dqkv as qkv lies, dout read as (b, s, h d): the Reshape "
					    "and Transpose of dout and the Transposes, Reshapes and "
					    "Concat of dq, dk and dv, 9 copies, gone");
		if (!m->grad_reasons[g])
			return nomem(lp);
	}
	f8_value_id inputs[2] = {m->qkv, m->mask}, taken[2] = {m->merged, m->lse};
	uint32_t n_inputs = m->mask != F8_NONE ? 2 : 1;
	f8_status status = packed_node(lp, m, F8_OP_ATTENTION_PACKED, m->attention, inputs, n_inputs,
				       taken, m->lse != F8_NONE ? 2 : 1, NULL, &m->packed);
	for (uint32_t c = 0; !status && c < m->n_clones; c++) {
		clone *k = &m->clones[c];
		f8_value_id clone_taken[2] = {F8_NONE, k->lse};
		snprintf(name, sizeof name, "%s.bshd", graph->values[k->core].name);
		if (f8_graph_find_value(graph, name, strlen(name)) != F8_NONE)
			name[0] = '\0'; // taken: a fresh "tN" name
		status = packed_node(lp, m, F8_OP_ATTENTION_PACKED, k->node, inputs, n_inputs,
				     clone_taken, k->lse != F8_NONE ? 2 : 1, name[0] ? name : NULL,
				     &k->packed);
		if (!status)
			k->out = graph->nodes[k->packed].outputs[0];
	}
	for (uint32_t g = 0; !status && g < m->n_grads; g++) {
		uint32_t from = m->grad_source[g];
		f8_value_id out = from ? m->clones[from - 1].out : m->merged;
		f8_value_id lse = from ? m->clones[from - 1].lse : m->lse;
		f8_value_id grad_inputs[5] = {m->dmerged[g], m->qkv, out, lse, m->mask};
		status = packed_node(lp, m, F8_OP_ATTENTION_PACKED_GRAD, m->grads[g], grad_inputs,
				     m->mask != F8_NONE ? 5 : 4, &m->dqkv[g], 1, NULL,
				     &m->packed_grads[g]);
	}
	return status;
}

/* Commits a prepared match: the packed nodes take over merged, the lses and each dqkv (their
 * precision decisions too, where they had none), and the matched nodes leave the program. */
static void commit(layout_pass *lp, const match *m) {
	f8_graph *graph = lp->graph;
	f8_value *merged = &graph->values[m->merged];
	if (merged->precision.format == F8_DTYPE_UNDEFINED)
		merged->precision = graph->values[m->core].precision;
	merged->precision.reason = m->reason;
	f8_value_id taken[2] = {m->merged, m->lse};
	take_over(graph, m->packed, taken, m->lse != F8_NONE ? 2 : 1);
	lp->replaced_by[m->attention] = m->packed;
	for (uint32_t c = 0; c < m->n_clones; c++) {
		const clone *k = &m->clones[c];
		f8_value *out = &graph->values[k->out];
		out->precision = graph->values[k->core].precision;
		out->precision.reason = k->reason;
		f8_value_id clone_taken[2] = {F8_NONE, k->lse};
		take_over(graph, k->packed, clone_taken, k->lse != F8_NONE ? 2 : 1);
		lp->replaced_by[k->node] = k->packed;
	}
	for (uint32_t g = 0; g < m->n_grads; g++) {
		f8_value *dqkv = &graph->values[m->dqkv[g]];
		if (dqkv->precision.format == F8_DTYPE_UNDEFINED)
			dqkv->precision = graph->values[graph->nodes[m->grads[g]].outputs[0]].precision;
		dqkv->precision.reason = m->grad_reasons[g];
		take_over(graph, m->packed_grads[g], &m->dqkv[g], 1);
		lp->replaced_by[m->grads[g]] = m->packed_grads[g];
	}
	for (uint32_t i = 0; i < m->n_members; i++)
		lp->removed[m->members[i]] = true;
	lp->n_packed += 1 + m->n_clones;
	if (lp->report)
		fprintf(lp->report, "attention-layout: %s: packed, q, k and v read in place from %s "
			"(%u recompute clone%s, %u AttentionGrad%s): %u copies gone\n",
			graph->values[m->core].name, graph->values[m->qkv].name, m->n_clones,
			m->n_clones == 1 ? "" : "s", m->n_grads, m->n_grads == 1 ? "" : "s",
			m->n_members);
}

/* An Attention kept with its copies: why, on its output and in the report. */
static void keep(layout_pass *lp, const match *m) {
	f8_graph *graph = lp->graph;
	graph->values[m->core].precision.reason = m->reason;
	lp->n_kept++;
	if (lp->report)
		fprintf(lp->report, "attention-layout: %s: kept: %s\n", graph->values[m->core].name,
			m->why_not);
}

static void layout_pass_destroy(layout_pass *lp) {
	f8_free(lp->in_program);
	f8_free(lp->removed);
	f8_free(lp->replaced_by);
	f8_free(lp->first_reader);
	f8_free(lp->readers);
	f8_free(lp->escapes);
	f8_free(lp->match_of);
	f8_free(lp->claimed);
}

/* Every Attention of the program matched and its rewrite (or the reason it is kept) prepared,
 * into matches[0..*n); nothing the program reads has changed yet. Every match is made against
 * the graph as it was: a match only removes nodes its own chains hold, so one Attention's
 * rewrite cannot change another's match. An Attention kept alone and then found to be the
 * recompute clone of a later match is superseded by it. */
static f8_status prepare(layout_pass *lp, const f8_node_id *old, uint32_t n_old, match *matches,
			 uint32_t *n) {
	f8_graph *graph = lp->graph;
	*n = 0;
	for (uint32_t p = 0; p < n_old; p++) {
		if (graph->nodes[old[p]].op != F8_OP_ATTENTION || lp->claimed[old[p]])
			continue;
		match *m = &matches[*n];
		lp->match_of[old[p]] = (*n)++;
		m->matched = match_attention(lp, old[p], m);
		f8_status status;
		if (m->matched) {
			lp->claimed[old[p]] = true;
			for (uint32_t c = 0; c < m->n_clones; c++) {
				f8_node_id id = m->clones[c].node;
				lp->claimed[id] = true;
				if (lp->match_of[id] != F8_NONE)
					matches[lp->match_of[id]].superseded = true;
			}
			status = prepare_packed(lp, m);
		} else {
			char decision[REASON_MAX];
			snprintf(decision, sizeof decision, "layout: q, k, v and the output kept as "
				 "(b, h, s, d) copies: %s", m->why_not);
			m->reason = joined(lp, graph->values[m->core].precision.reason, decision);
			status = m->reason ? F8_OK : nomem(lp);
		}
		if (status)
			return status;
	}
	return F8_OK;
}

f8_status f8_pass_attention_layout_run(f8_graph *graph, FILE *report, f8_diag *diag) {
	layout_pass lp = {.graph = graph, .report = report, .diag = diag, .n_nodes = graph->n_nodes};
	uint32_t n_old = graph->n_order, n_nodes = graph->n_nodes ? graph->n_nodes : 1;
	uint32_t n_attention = 0, n_matches = 0;
	for (uint32_t p = 0; p < n_old; p++)
		n_attention += graph->nodes[graph->order[p]].op == F8_OP_ATTENTION;
	if (!n_attention)
		return F8_OK;
	lp.in_program = f8_calloc(n_nodes, sizeof *lp.in_program);
	lp.removed = f8_calloc(n_nodes, sizeof *lp.removed);
	lp.claimed = f8_calloc(n_nodes, sizeof *lp.claimed);
	lp.replaced_by = f8_malloc(n_nodes * sizeof *lp.replaced_by);
	lp.match_of = f8_malloc(n_nodes * sizeof *lp.match_of);
	f8_node_id *old = f8_malloc(n_old * sizeof *old), *order = f8_malloc(n_old * sizeof *order);
	match *matches = f8_calloc(n_attention, sizeof *matches);
	f8_status status = !lp.in_program || !lp.removed || !lp.claimed || !lp.replaced_by ||
					   !lp.match_of || !old || !order || !matches
				   ? nomem(&lp)
				   : F8_OK;
	for (uint32_t i = 0; !status && i < graph->n_nodes; i++)
		lp.replaced_by[i] = lp.match_of[i] = F8_NONE;
	if (!status) {
		memcpy(old, graph->order, n_old * sizeof *old);
		status = index_readers(&lp);
	}
	if (!status)
		status = prepare(&lp, old, n_old, matches, &n_matches);
	if (status) {
		// The nodes made so far were appended to the program: it is put back as it was (within
		// the capacity it has, so without allocating); they are left unused.
		if (old && graph->n_order > n_old)
			f8_graph_set_order(graph, old, n_old);
	} else {
		// From here on nothing allocates: the rewrite is whole or not at all.
		for (uint32_t i = 0; i < n_matches; i++)
			if (matches[i].matched)
				commit(&lp, &matches[i]);
			else if (!matches[i].superseded)
				keep(&lp, &matches[i]);
		uint32_t n = 0;
		for (uint32_t p = 0; p < n_old; p++) {
			if (lp.replaced_by[old[p]] != F8_NONE)
				order[n++] = lp.replaced_by[old[p]];
			else if (!lp.removed[old[p]])
				order[n++] = old[p];
		}
		f8_graph_set_order(graph, order, n); // n <= n_old: within its capacity
		if (report)
			fprintf(report, "attention-layout: %u Attention(s) read q, k, v in place, %u "
				"kept with their copies\n", lp.n_packed, lp.n_kept);
	}
	f8_free(old);
	f8_free(order);
	f8_free(matches);
	layout_pass_destroy(&lp);
	return status;
}
