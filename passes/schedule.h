/*
 * The schedule pass's first part: buffer liveness -> offsets in one slab. Every value a step
 * writes to memory gets the byte offset of its buffer in one slab, reused once the value is
 * dead, so that the runtime allocates the slab once and a plan states the step's activation
 * memory. (The program order stays as the passes left it; the micro-batch schedule of pipeline
 * parallelism, 1F1B, joins this pass with the PP issue.)
 *
 * requires: types inferred, fuse (values made and read inside one fused kernel never reach
 * memory, so they get no buffer).
 *
 * A value is live from the node that makes it to the last node that reads it, in the order a
 * step runs them: phase cast, then fwd and bwd, then opt, each in program order (a cast node
 * may stand after fwd nodes that it runs before); graph outputs live to the end of the step. A
 * fused kernel is one launch: its members write from its first position and read until its
 * last, so that no kernel writes over what it still reads (a transposed copy, an amax). A value
 * made in phase cast and read in fwd or bwd lives to the last fwd or bwd node: cast runs once a
 * step, fwd and bwd once per micro-batch, and each micro-batch reads it.
 * Update sources (new weights, moments, gradient accumulators, scaling tables, weight caches)
 * are written in place of their leaves, as Megatron-LM's optimizer updates in place: the
 * executor refuses a run that reads a leaf after its update's source is made. Leaves (inputs,
 * parameters, optimizer state, scaling tables, weight caches) are not in the slab: they
 * persist across steps. Offsets are aligned to F8_SLAB_ALIGNMENT (ir/verify.h: 256 bytes, what
 * cudaMalloc gives, and more than any vector access needs); values are placed largest first,
 * each at the lowest offset whose range is free over its lifetime. A graph whose sizes are not
 * all bound is left unplanned (offsets -1): a plan is for one batch and sequence size. The plan
 * made is checked by f8_graph_verify_buffers (ir/verify.h), which derives the lifetimes on its
 * own; a plan that fails it is an internal error.
 */
#ifndef F8_PASSES_SCHEDULE_H
#define F8_PASSES_SCHEDULE_H

#include <stdint.h> // uint64_t
#include <stdio.h>  // FILE

#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/graph.h" // f8_graph

/* What the buffer plan came to. */
typedef struct f8_buffer_plan {
	uint64_t slab_bytes;   // the slab: the highest offset + size over all values
	uint64_t total_bytes;  // every planned value's own size, summed: the slab without reuse
	uint32_t n_values;     // values planned
	uint32_t n_in_kernels; // values that stay inside a fused kernel, so have no buffer
	bool planned;          // false: a size was symbolic, nothing planned
} f8_buffer_plan;

/*
 * Sets each written value's buffer_offset as the header says (or leaves all at -1 when a size
 * is symbolic), its summary into *plan when not NULL; a line with it to `report`. F8_ERR_NOMEM
 * when memory runs out.
 */
f8_status f8_pass_schedule_run(f8_graph *graph, f8_buffer_plan *plan, FILE *report,
			       f8_diag *diag);

/* The buffer plan a graph's offsets describe, recomputed from them: slab_bytes, total_bytes,
 * n_values and planned (n_in_kernels is the pass's own count: 0 here). */
f8_buffer_plan f8_buffer_plan_of(const f8_graph *graph);

#endif
