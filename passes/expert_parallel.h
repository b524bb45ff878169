/*
 * The expert-parallel pass: Megatron-LM's expert parallelism (--expert-model-parallel-size) on
 * the forward graph, before autodiff derives the backward from it.
 *
 * requires: canonicalize (types), fuse-patterns, bf16, and the tensor- and context-parallel
 * passes when they run (they split within the attention and the experts' FFNs, and the
 * sequence; this pass splits the experts); before pipeline-parallel, which deals out the layers
 * this pass has rewritten, and training, so that the exchange's backward comes from its
 * forward.
 *
 * EP ranks are taken from data parallelism (Megatron-LM's layout): each runs its own micro-
 * batches, and rank j of the group "ep" holds experts [j E / EP, (j + 1) E / EP) of every MoE
 * layer. In each MoE layer (Router, MoEDispatch, GroupedLinears, MoECombine):
 *   the router     runs on the rank's own tokens, its weight replicated;
 *   the dispatch   still sorts the rank's token copies by expert over all E experts; then
 *                  AllToAllDispatch {group="ep"} sends each expert's rows to the rank holding
 *                  it (the counts first), and the experts' GroupedLinears read what arrived,
 *                  grouped by local expert, with the rows per local expert as their counts;
 *   the weights    of the experts (E, N, K) become this rank's (E / EP, N, K), placed shard over
 *                  ep along dim 0, so that their initial values and checkpoints are the
 *                  whole model's slices;
 *   the combine    reads AllToAllCombine {group="ep"}: the experts' outputs sent back to the
 *                  ranks and places their copies came from.
 * The receive buffer holds what the rank's experts could get at most (EP x the rank's own
 * copies, every token of the group routed here); the rows after what arrived are zeros, and the
 * grouped GEMMs and casts leave them out (their counts add up to at most the rows). The shard
 * pass then sums the experts' gradients over the ranks holding the same experts (data
 * parallelism without ep: Megatron-LM's expert data-parallel group) and the others' over ep
 * too, and reduces an expert GEMM's FP8 amaxes over the same ranks as its gradient.
 */
#ifndef F8_PASSES_EXPERT_PARALLEL_H
#define F8_PASSES_EXPERT_PARALLEL_H

#include <stdio.h> // FILE

#include "ir/diag.h"      // f8_status, f8_diag
#include "ir/graph.h"     // f8_graph
#include "passes/shard.h" // f8_parallel_options

/*
 * Runs the pass over `graph` (nothing when EP is 1): checks the layout against the model, sets
 * graph->mesh (or checks the earlier passes'), and splits the experts. Its decisions to
 * `report` when not NULL. F8_ERR_ARGUMENT for a layout the model cannot take (no experts, or
 * EP not dividing them), F8_ERR_UNSUPPORTED naming an MoE layer it cannot split,
 * F8_ERR_INVALID for a graph with a backward, F8_ERR_NOMEM.
 */
f8_status f8_pass_expert_parallel_run(f8_graph *graph, const f8_parallel_options *options,
				      FILE *report, f8_diag *diag);

#endif
