/*
 * canonicalize: type and shape inference, then dead-code elimination.
 */
#ifndef F8_PASSES_CANONICALIZE_H
#define F8_PASSES_CANONICALIZE_H

#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/graph.h" // f8_graph

/*
 * Fills in the type of every node output that has none, checks the ones that have one against
 * what the op makes, and removes nodes none of whose outputs is used (unless the op has side
 * effects). Fails with F8_ERR_INVALID naming the node on a type error.
 */
f8_status f8_pass_canonicalize_run(f8_graph *graph, f8_diag *diag);

/* Removes the nodes that feed no graph output, no update and no op with side effects (what
 * canonicalize does after inference; passes that cut a graph call it too). */
f8_status f8_pass_remove_dead_nodes(f8_graph *graph, f8_diag *diag);

#endif
