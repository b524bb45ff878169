/*
 * fuse-patterns: ONNX primitive subgraphs -> high-level ops (Linear, LayerNorm, RMSNorm, Gelu,
 * SwiGLU, Rope, Attention, Embedding).
 */
#ifndef F8_PASSES_FUSE_PATTERNS_H
#define F8_PASSES_FUSE_PATTERNS_H

#include <stdio.h> // FILE

#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/graph.h" // f8_graph, f8_value_id

/*
 * Computes a value of a graph from its constants and bound sizes, for a pass that must know
 * it to decide (an attention mask's pattern). The compile driver fills it with the CPU
 * reference kernels (tools/evaluate.h): passes run no kernels themselves.
 *   evaluate: fills *values with the value's elements widened to double, in row-major order
 *             of its type's (constant) shape (allocated with f8_malloc; the caller frees it),
 *             and *assumed with what it fed the graph's inputs with ("" when it read none;
 *             static storage). F8_ERR_UNSUPPORTED, saying why, when the value depends on what
 *             is not known when compiling: a parameter, an input it does not fill, a size not
 *             bound, or more elements than it evaluates.
 */
typedef struct f8_value_evaluator {
	f8_status (*evaluate)(const struct f8_value_evaluator *self, const f8_graph *graph,
			      f8_value_id value, double **values, const char **assumed,
			      f8_diag *diag);
} f8_value_evaluator;

/*
 * Replaces each recognized subgraph by its high-level op, in place; unmatched nodes stay. With
 * `report` not NULL, writes how many of each pattern fused and, for each primitive node left
 * where a pattern looks, why it did not fuse.
 *
 * An attention's additive mask becomes its causal flag only when it is proven causal: by its
 * structure (Where over tril(ones)), or, with an `evaluator` (NULL: none), by its value at the
 * graph's bound sizes (0 on and below the diagonal, the dtype's lowest or -inf above, for every
 * batch and head); any other mask stays an input of the Attention, and the report says why.
 * With an evaluator, an integer or boolean value a float computation reads that depends only on
 * the bound sizes (and, in a training step, the inputs f8c train fills) is folded into a
 * Constant (OPT's positions, a CumSum of its mask), of at most 65536 elements; the report lists
 * each.
 */
f8_status f8_pass_fuse_patterns_run(f8_graph *graph, const f8_value_evaluator *evaluator,
				    FILE *report, f8_diag *diag);

#endif
