/*
 * The verifier: checks that a graph is well formed (SSA, dominance, arity, attributes, types
 * and shapes, fused kernels, the slab plan). The pass pipeline runs it after every pass in tests
 * and behind --verify. Its last check, f8_graph_verify_buffers (ir/verify_buffers.c), holds a
 * slab plan, the schedule pass's buffer offsets, to the values' lifetimes.
 */
#ifndef F8_IR_VERIFY_H
#define F8_IR_VERIFY_H

#include <stdint.h> // uint64_t

#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/graph.h" // f8_graph, f8_node_id
#include "ir/shape.h" // f8_type

/* The alignment of every buffer in the slab, offset and size: what cudaMalloc gives, and more
 * than any vector access needs. The schedule pass places by it and the check below holds the
 * plan to it. */
enum { F8_SLAB_ALIGNMENT = 256 };

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
 * program and share a phase. Then, when any value has a buffer offset, that the offsets are a
 * slab plan: f8_graph_verify_buffers with no bound on the slab (a graph does not carry its
 * slab's size). Returns F8_OK, F8_ERR_INVALID with the first problem found, naming the node
 * and, for graphs read from text, the file and line, or F8_ERR_NOMEM.
 */
f8_status f8_graph_verify(const f8_graph *graph, f8_diag *diag);

/*
 * Checks the slab plan of `graph` (one that passes f8_graph_verify's other checks, which end with
 * this one): its values' buffer offsets, against liveness derived here on its own, by the schedule
 * pass's rule (passes/schedule.h). A value needs a buffer unless it is a leaf (it persists across
 * steps), an update's source (written in place of its leaf), made and read only inside its fused
 * kernel (never written), or made by no node of the program. A buffer lives from its node's
 * position to its last reader's, in the order a step runs the program (phase cast, then fwd and
 * bwd, then opt, each in program order), where a fused kernel's members stand at each of the
 * kernel's positions (one launch); a graph output's to the end of the step; one made in phase cast
 * and read in fwd or bwd to the last fwd or bwd node, since every micro-batch reads it. Checks:
 *   - a graph with no offset at all is unplanned (a symbolic size, or before schedule): F8_OK;
 *   - no value that needs no buffer has an offset;
 *   - when planned, every value that needs a buffer has one, and its size is bound;
 *   - every offset is a multiple of F8_SLAB_ALIGNMENT;
 *   - with `slab_bytes` > 0, every buffer ends inside the slab (0: no bound, as when the slab
 *     is derived from the offsets);
 *   - no two values alive at one position have byte ranges that meet.
 * A buffer's size is its value's bytes rounded up to F8_SLAB_ALIGNMENT, as the pass reserves.
 * Returns F8_OK, F8_ERR_INVALID with the first problem (the values, their offsets and sizes,
 * and the positions and nodes where both are alive, for an overlap), or F8_ERR_NOMEM.
 */
f8_status f8_graph_verify_buffers(const f8_graph *graph, uint64_t slab_bytes, f8_diag *diag);

#endif
