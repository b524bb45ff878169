/*
 * The pipeline-parallel pass: Megatron-LM's pipeline parallelism
 * (--pipeline-model-parallel-size) on the forward graph, before autodiff derives the backward
 * from it. Every rank of a pipeline stage runs that stage's program; the plan for a cluster is
 * one program per stage (f8_parallel_options.stage says which this one is).
 *
 * requires: canonicalize (types), fuse-patterns, bf16, and the tensor- and context-parallel
 * passes when they run (they split within a layer, this pass splits the layers); before
 * attention-unfused and training, which then derive each stage's backward, with its
 * collectives, from its forward.
 *
 * The layers (the scopes "layers.<i>.", f8_scope_layer) are cut into PP runs of L / PP, stage
 * s holding layers [s L / PP, (s + 1) L / PP); under the interleaved schedule
 * (--num-layers-per-virtual-pipeline-stage N) into PP V model chunks of N, stage s holding chunks
 * s, s + PP, ..., each with its own Recv and Send (the last stage's chunks send to the first
 * stage's next), tagged 2 g for the activation after chunk g (the training pass tags its
 * gradient 2 g + 1). What runs before the first layer and does not
 * read a layer's output (the embeddings, RoPE's tables, masks) is made on every stage that
 * reads it; what reads a layer's output without a layer's scope (the final norm, the head) is
 * the last stage's. Each stage but the first receives one activation from the stage before it
 * (Recv {group="pp", peer=s-1}, the residual stream), and each but the last sends one
 * (Send {group="pp", peer=s+1}): a model whose stages exchange anything else is refused. A
 * parameter the first and the last stage both read (a GPT's embedding table tied to its head)
 * is held by both, placed tied=pp, and the shard pass sums its gradient between them
 * (Megatron-LM's embedding group); one two other stages read is refused. The training pass
 * gives the last stage the loss; each other stage's backward starts from the gradient the
 * stage after it sends back (passes/training.h).
 */
#ifndef F8_PASSES_PIPELINE_PARALLEL_H
#define F8_PASSES_PIPELINE_PARALLEL_H

#include <stdio.h> // FILE

#include "ir/diag.h"      // f8_status, f8_diag
#include "ir/graph.h"     // f8_graph
#include "passes/shard.h" // f8_parallel_options

/*
 * Runs the pass over `graph` (nothing when PP is 1): checks the layout against the model, sets
 * graph->mesh (or checks the earlier passes'), and keeps stage options->stage's program. Its
 * decisions to `report` when not NULL. F8_ERR_ARGUMENT for a layout the model cannot take or a
 * stage outside the pipeline, F8_ERR_UNSUPPORTED for a model whose stages would exchange more
 * than one activation or share a parameter but as above, F8_ERR_INVALID for a graph with a
 * backward,
 * F8_ERR_NOMEM.
 */
f8_status f8_pass_pipeline_parallel_run(f8_graph *graph, const f8_parallel_options *options,
					FILE *report, f8_diag *diag);

#endif
