/*
 * Pattern rewriting support for passes that replace subgraphs by single nodes (fuse-patterns
 * now; fuse later): use counts kept exact while rewriting, matching helpers, and the commit of a
 * match, which puts the new nodes where the match's root stood and takes over the root's output
 * value, so its name, type and readers stay as they were.
 *
 * A match is a root node and the interior nodes it absorbs. It may be committed only when
 * nothing outside it reads an interior value; f8_rewrite_match_is_closed checks that.
 */
#ifndef F8_PASSES_REWRITE_H
#define F8_PASSES_REWRITE_H

#include <stdbool.h> // bool
#include <stdint.h>  // uint32_t

#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/graph.h" // f8_graph, f8_node, f8_value_id
#include "ir/ops.h"   // f8_op, f8_attr

enum { F8_REWRITE_MAX_MATCH = 48 };

typedef struct f8_rewriter {
	f8_graph *graph;
	f8_diag *diag;
	uint32_t *n_users;        // per value: readers among live nodes, plus one per graph output
	bool *removed;            // per node: taken out by a committed match
	f8_node_id *replaced_by;  // per node: the first node of its replacement, or F8_NONE
	f8_node_id *next_new;     // per node: the next node of the same replacement, or F8_NONE
	uint32_t cap_values, cap_nodes; // sizes of the per-value and per-node arrays
	f8_node_id *order;        // (n_order) the program when the rewriter was made
	uint32_t n_order;
} f8_rewriter;

typedef struct f8_rewrite_match {
	f8_node_id nodes[F8_REWRITE_MAX_MATCH]; // nodes[0] is the root
	uint32_t n_nodes;
	const char *why_not; // when matching failed after the root's op matched: why, for --report
	f8_node_id new_nodes[8]; // created for the replacement, in program order
	uint32_t n_new;
} f8_rewrite_match;

f8_status f8_rewriter_create(f8_rewriter *rw, f8_graph *graph, f8_diag *diag);
void f8_rewriter_destroy(f8_rewriter *rw);

/* Starts a match at `root`. */
void f8_rewrite_match_begin(f8_rewrite_match *m, f8_node_id root);

/*
 * The node producing `value` when it is live and its op is `op`, added to the match as an
 * interior node; NULL otherwise (with m->why_not set to `why` when not NULL).
 */
const f8_node *f8_rewrite_take(f8_rewriter *rw, f8_rewrite_match *m, f8_value_id value,
			       f8_op op, const char *why);

/* The producer of `value` if its op is `op`, without adding it to the match; else NULL. */
const f8_node *f8_rewrite_peek(const f8_rewriter *rw, f8_value_id value, f8_op op);

/* The value of a Constant with one element (any shape of numel 1), into *out. */
bool f8_rewrite_scalar(const f8_rewriter *rw, f8_value_id value, double *out);

/* Whether `value` is a leaf of role PARAMETER or BUFFER (a weight). */
bool f8_rewrite_is_weight(const f8_rewriter *rw, f8_value_id value);

/* True when no node outside the match reads an interior value (and none is a graph output). */
bool f8_rewrite_match_is_closed(const f8_rewriter *rw, f8_rewrite_match *m);

/*
 * Creates a node for the replacement (it goes, in creation order, where the root stands) reading
 * `inputs`, with `attrs`, one output of a fresh name, and infers its type: *out its output. When
 * the op refuses its operands (a shape or attribute the pattern did not check), the match's new
 * nodes are taken back, m->why_not says why, *out is F8_NONE and the status is still F8_OK: a
 * pattern that cannot be expressed is a no-match, not an error.
 */
f8_status f8_rewrite_add(f8_rewriter *rw, f8_rewrite_match *m, f8_op op,
			 const f8_value_id *inputs, uint32_t n_inputs, const f8_attr *attrs,
			 uint32_t n_attrs, f8_value_id *out);

/*
 * Commits the match: the last node added takes over the root's output value, the matched nodes
 * leave the program, use counts follow; *committed true. When nothing was added (a refusal) or
 * the last node's type differs from the root's, the new nodes are taken back, m->why_not says
 * why and *committed is false. The new nodes have the root's scope, name and location.
 */
f8_status f8_rewrite_commit(f8_rewriter *rw, f8_rewrite_match *m, bool *committed);

/* Rebuilds the program order with the replacements in place. Call once, at the end. */
f8_status f8_rewriter_finish(f8_rewriter *rw);

#endif
