/*
 * Pattern rewriting support: exact use counts, matching helpers, committing a match in place.
 */
#include <stdio.h>  // snprintf
#include <string.h> // memcpy, memset

#include "ir/alloc.h"      // f8_calloc, f8_realloc, f8_free
#include "ir/arena.h"      // f8_arena_strdup
#include "ir/text.h"       // f8_type_format
#include "ir/verify.h"     // f8_node_infer_types
#include "passes/rewrite.h" // f8_rewriter

/* Grows the per-value and per-node arrays to the graph's current sizes. */
static f8_status grow(f8_rewriter *rw) {
	f8_graph *graph = rw->graph;
	if (graph->n_values > rw->cap_values) {
		uint32_t cap = graph->n_values * 2;
		uint32_t *users = f8_realloc(rw->n_users, cap * sizeof *users);
		if (!users)
			return f8_diag_set(rw->diag, F8_ERR_NOMEM, "out of memory");
		memset(users + rw->cap_values, 0, (cap - rw->cap_values) * sizeof *users);
		rw->n_users = users;
		rw->cap_values = cap;
	}
	if (graph->n_nodes > rw->cap_nodes) {
		uint32_t cap = graph->n_nodes * 2, old = rw->cap_nodes;
		bool *removed = f8_realloc(rw->removed, cap * sizeof *removed);
		if (removed)
			rw->removed = removed;
		f8_node_id *replaced = removed ? f8_realloc(rw->replaced_by, cap * sizeof *replaced) : NULL;
		if (replaced)
			rw->replaced_by = replaced;
		f8_node_id *next = replaced ? f8_realloc(rw->next_new, cap * sizeof *next) : NULL;
		if (!next)
			return f8_diag_set(rw->diag, F8_ERR_NOMEM, "out of memory");
		rw->next_new = next;
		for (uint32_t i = old; i < cap; i++) {
			rw->removed[i] = false;
			rw->replaced_by[i] = rw->next_new[i] = F8_NONE;
		}
		rw->cap_nodes = cap;
	}
	return F8_OK;
}

f8_status f8_rewriter_create(f8_rewriter *rw, f8_graph *graph, f8_diag *diag) {
	*rw = (f8_rewriter){.graph = graph, .diag = diag};
	f8_status status = grow(rw);
	if (!status && !(rw->order = f8_calloc(graph->n_order ? graph->n_order : 1, sizeof *rw->order)))
		status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	if (status) {
		f8_rewriter_destroy(rw);
		return status;
	}
	if (graph->n_order) // an empty graph's order may be NULL, which memcpy must not see
		memcpy(rw->order, graph->order, graph->n_order * sizeof *rw->order);
	rw->n_order = graph->n_order;
	for (uint32_t p = 0; p < graph->n_order; p++) {
		const f8_node *node = &graph->nodes[graph->order[p]];
		for (uint32_t i = 0; i < node->n_inputs; i++)
			if (node->inputs[i] != F8_NONE)
				rw->n_users[node->inputs[i]]++;
	}
	for (uint32_t i = 0; i < graph->n_outputs; i++)
		rw->n_users[graph->outputs[i]]++;
	return F8_OK;
}

void f8_rewriter_destroy(f8_rewriter *rw) {
	f8_free(rw->n_users);
	f8_free(rw->removed);
	f8_free(rw->replaced_by);
	f8_free(rw->next_new);
	f8_free(rw->order);
	*rw = (f8_rewriter){0};
}

void f8_rewrite_match_begin(f8_rewrite_match *m, f8_node_id root) {
	*m = (f8_rewrite_match){.nodes = {root}, .n_nodes = 1};
}

const f8_node *f8_rewrite_peek(const f8_rewriter *rw, f8_value_id value, f8_op op) {
	if (value == F8_NONE)
		return NULL;
	f8_node_id producer = rw->graph->values[value].producer;
	if (producer == F8_NONE || rw->removed[producer] || rw->graph->nodes[producer].op != op)
		return NULL;
	return &rw->graph->nodes[producer];
}

const f8_node *f8_rewrite_take(f8_rewriter *rw, f8_rewrite_match *m, f8_value_id value,
			       f8_op op, const char *why) {
	const f8_node *node = f8_rewrite_peek(rw, value, op);
	if (!node) {
		if (why)
			m->why_not = why;
		return NULL;
	}
	f8_node_id id = rw->graph->values[value].producer;
	for (uint32_t i = 0; i < m->n_nodes; i++)
		if (m->nodes[i] == id)
			return node;
	if (m->n_nodes == F8_REWRITE_MAX_MATCH) {
		m->why_not = "the pattern is too large";
		return NULL;
	}
	m->nodes[m->n_nodes++] = id;
	return node;
}

bool f8_rewrite_scalar(const f8_rewriter *rw, f8_value_id value, double *out) {
	const f8_node *node = f8_rewrite_peek(rw, value, F8_OP_CONSTANT);
	const f8_attr *attr = node ? f8_node_attr(node, "value") : NULL;
	return attr && f8_tensor_data_scalar(attr->tensor, out);
}

bool f8_rewrite_is_weight(const f8_rewriter *rw, f8_value_id value) {
	if (value == F8_NONE)
		return false;
	const f8_value *v = &rw->graph->values[value];
	return v->producer == F8_NONE && (v->role == F8_ROLE_PARAMETER || v->role == F8_ROLE_BUFFER);
}

bool f8_rewrite_match_is_closed(const f8_rewriter *rw, f8_rewrite_match *m) {
	const f8_graph *graph = rw->graph;
	for (uint32_t k = 1; k < m->n_nodes; k++) {
		const f8_node *node = &graph->nodes[m->nodes[k]];
		for (uint32_t o = 0; o < node->n_outputs; o++) {
			f8_value_id value = node->outputs[o];
			uint32_t inside = 0;
			for (uint32_t j = 0; j < m->n_nodes; j++) {
				const f8_node *reader = &graph->nodes[m->nodes[j]];
				for (uint32_t i = 0; i < reader->n_inputs; i++)
					inside += reader->inputs[i] == value;
			}
			if (rw->n_users[value] != inside) {
				m->why_not = "an intermediate value of the pattern is also read elsewhere";
				return false;
			}
		}
	}
	return true;
}

/* Takes the nodes made for a match back out: they were never in the program, and what they
 * read is read once less. */
static void abandon(f8_rewriter *rw, f8_rewrite_match *m) {
	for (uint32_t k = 0; k < m->n_new; k++) {
		const f8_node *node = &rw->graph->nodes[m->new_nodes[k]];
		rw->removed[m->new_nodes[k]] = true;
		for (uint32_t i = 0; i < node->n_inputs; i++)
			if (node->inputs[i] != F8_NONE)
				rw->n_users[node->inputs[i]]--;
	}
	m->n_new = 0;
}

/* Abandons the match's new nodes and keeps `why` (copied: a diagnostic is reused) as its reason. */
static f8_status refuse(f8_rewriter *rw, f8_rewrite_match *m, const char *why) {
	abandon(rw, m);
	m->why_not = f8_arena_strdup(rw->graph->arena, why);
	return m->why_not ? F8_OK : f8_diag_set(rw->diag, F8_ERR_NOMEM, "out of memory");
}

f8_status f8_rewrite_add(f8_rewriter *rw, f8_rewrite_match *m, f8_op op,
			 const f8_value_id *inputs, uint32_t n_inputs, const f8_attr *attrs,
			 uint32_t n_attrs, f8_value_id *out) {
	f8_graph *graph = rw->graph;
	f8_node_id id;
	*out = F8_NONE;
	if (m->n_new == sizeof m->new_nodes / sizeof m->new_nodes[0])
		return refuse(rw, m, "the replacement would take too many nodes");
	f8_status status = f8_graph_add_node(graph, op, inputs, n_inputs, 1, NULL, &id, rw->diag);
	if (!status && n_attrs && f8_node_set_attrs(graph, id, attrs, n_attrs))
		status = f8_diag_set(rw->diag, F8_ERR_NOMEM, "out of memory");
	if (!status)
		status = grow(rw);
	if (status)
		return status;
	const f8_node *root = &graph->nodes[m->nodes[0]];
	f8_node *node = &graph->nodes[id];
	node->scope = root->scope;
	node->name = root->name;
	node->location = root->location;
	node->phase = root->phase;
	for (uint32_t i = 0; i < n_inputs; i++)
		if (inputs[i] != F8_NONE)
			rw->n_users[inputs[i]]++;
	m->new_nodes[m->n_new++] = id;
	// An op that refuses its operands (a shape the pattern did not check) is a no-match.
	f8_type type;
	f8_diag refusal;
	f8_diag_clear(&refusal);
	if (f8_node_infer_types(graph, id, &type, &refusal))
		return refusal.status == F8_ERR_NOMEM ? f8_diag_set(rw->diag, F8_ERR_NOMEM, "out of memory")
						      : refuse(rw, m, refusal.message);
	graph->values[node->outputs[0]].type = type;
	*out = node->outputs[0];
	return F8_OK;
}

f8_status f8_rewrite_commit(f8_rewriter *rw, f8_rewrite_match *m, bool *committed) {
	f8_graph *graph = rw->graph;
	*committed = false;
	if (m->n_new == 0)
		return F8_OK; // f8_rewrite_add refused
	f8_node_id root = m->nodes[0], last = m->new_nodes[m->n_new - 1];
	f8_value_id taken = graph->nodes[root].outputs[0];
	f8_value_id fresh = graph->nodes[last].outputs[0];
	if (!f8_type_equal(&graph->values[taken].type, &graph->values[fresh].type)) {
		char was[160], now[160], why[F8_DIAG_MESSAGE_MAX];
		snprintf(why, sizeof why, "the fused op would make %s where the subgraph makes %s",
			 f8_type_format(graph, &graph->values[fresh].type, now, sizeof now),
			 f8_type_format(graph, &graph->values[taken].type, was, sizeof was));
		return refuse(rw, m, why);
	}
	graph->nodes[last].outputs[0] = taken;
	graph->values[taken].producer = last;
	graph->values[taken].output_index = 0;
	for (uint32_t k = 0; k < m->n_nodes; k++) {
		const f8_node *node = &graph->nodes[m->nodes[k]];
		rw->removed[m->nodes[k]] = true;
		for (uint32_t i = 0; i < node->n_inputs; i++)
			if (node->inputs[i] != F8_NONE)
				rw->n_users[node->inputs[i]]--;
	}
	rw->replaced_by[root] = m->new_nodes[0];
	for (uint32_t i = 0; i + 1 < m->n_new; i++)
		rw->next_new[m->new_nodes[i]] = m->new_nodes[i + 1];
	*committed = true;
	return F8_OK;
}

/* Appends node `id` to `order`, or its replacement when it was replaced (recursively: a new
 * node can itself be the root of a later match). */
static void emit(const f8_rewriter *rw, f8_node_id id, f8_node_id *order, uint32_t *n) {
	if (!rw->removed[id]) {
		order[(*n)++] = id;
		return;
	}
	for (f8_node_id next = rw->replaced_by[id]; next != F8_NONE; next = rw->next_new[next])
		emit(rw, next, order, n);
}

f8_status f8_rewriter_finish(f8_rewriter *rw) {
	f8_graph *graph = rw->graph;
	f8_node_id *order = f8_calloc(graph->n_nodes ? graph->n_nodes : 1, sizeof *order);
	if (!order)
		return f8_diag_set(rw->diag, F8_ERR_NOMEM, "out of memory");
	uint32_t n = 0;
	for (uint32_t p = 0; p < rw->n_order; p++)
		emit(rw, rw->order[p], order, &n);
	f8_status status = f8_graph_set_order(graph, order, n);
	f8_free(order);
	return status ? f8_diag_set(rw->diag, status, "out of memory") : F8_OK;
}
