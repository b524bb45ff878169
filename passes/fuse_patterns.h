/*
 * fuse-patterns: ONNX primitive subgraphs -> high-level ops (Linear, LayerNorm, RMSNorm, Gelu,
 * SwiGLU, Rope, Attention, Embedding).
 */
#ifndef F8_PASSES_FUSE_PATTERNS_H
#define F8_PASSES_FUSE_PATTERNS_H

#include <stdio.h> // FILE

#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/graph.h" // f8_graph

/*
 * Replaces each recognized subgraph by its high-level op, in place; unmatched nodes stay. With
 * `report` not NULL, writes how many of each pattern fused and, for each primitive node left
 * where a pattern looks, why it did not fuse.
 */
f8_status f8_pass_fuse_patterns_run(f8_graph *graph, FILE *report, f8_diag *diag);

#endif
