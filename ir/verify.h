/*
 * The verifier: checks that a graph is well formed (SSA, dominance, arity, attributes, types
 * and shapes, fused kernels). The pass pipeline runs it after every pass in tests and behind --verify.
 */
#ifndef F8_IR_VERIFY_H
#define F8_IR_VERIFY_H

#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/graph.h" // f8_graph, f8_node_id
#include "ir/shape.h" // f8_type

/*
 * Checks node `id`'s arity and attributes against its op's schema and that its present inputs
 * have types, then computes the types its outputs must have into `outputs` (one per output).
 * On failure returns F8_ERR_INVALID with a message naming the node in `diag`.
 */
f8_status f8_node_infer_types(const f8_graph *graph, f8_node_id id, f8_type *outputs,
			      f8_diag *diag);

/*
 * Checks that output `index` of node `id` has the type `inferred` (from f8_node_infer_types).
 * Returns F8_ERR_INVALID naming the node and both types, or saying that it has no type yet.
 */
f8_status f8_node_check_output_type(const f8_graph *graph, f8_node_id id, uint32_t index,
				    const f8_type *inferred, f8_diag *diag);

/*
 * Checks the whole graph: leaves are typed and have leaf roles; every node in the program
 * order appears once, reads only values defined above it (leaves or earlier nodes' outputs),
 * passes f8_node_infer_types, and has outputs whose declared types equal the inferred ones;
 * graph outputs are defined; each fused kernel has members, which stand together in the
 * program and share a phase. Returns F8_OK or F8_ERR_INVALID with the first problem found,
 * naming the node and, for graphs read from text, the file and line.
 */
f8_status f8_graph_verify(const f8_graph *graph, f8_diag *diag);

#endif
