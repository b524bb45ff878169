/*
 * What the shard pass's files share (passes/shard.c, the layout, data parallelism, the
 * distributed optimizer and the amaxes; passes/shard_fp8_gather.c, sequence parallelism's FP8
 * all-gather).
 */
#ifndef F8_PASSES_SHARD_INTERNAL_H
#define F8_PASSES_SHARD_INTERNAL_H

#include <stdint.h> // uint32_t

#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/graph.h" // f8_graph

/*
 * Sequence parallelism's FP8 all-gather (passes/shard_fp8_gather.c says how): every per-tensor
 * E4M3 cast of a value gathered over tp in high precision only to be cast becomes a cast of the
 * rank's shard and a gather of its FP8 codes. Before the amax reduction (the shard cast's amax
 * joins it). The casts rewritten into *n.
 */
f8_status f8_shard_gather_fp8(f8_graph *graph, uint32_t *n, f8_diag *diag);

#endif
