/*
 * The context-parallel pass: Megatron-LM's context parallelism (--context-parallel-size) on the
 * forward graph, before autodiff derives the backward from it.
 *
 * requires: canonicalize (types), fuse-patterns (Linear, Attention, the norms), bf16, and the
 * tensor-parallel pass when TP is above 1 (it splits heads and features, this pass the
 * sequence); before attention-unfused and training, so that the backward's ring comes from the
 * forward's and the training pass builds the loss over the split sequence.
 *
 * The sequence (the tokens' second dimension, a constant) is cut into 2 x CP chunks, and rank r
 * of the group "cp" runs chunks r and 2 CP - 1 - r (causal load balancing: each rank's rows
 * see as many keys as every other's). What each rank's program gets:
 *   inputs       each (batch, seq, ...) input (the tokens, position ids) read through
 *                LocalShard {group="cp", axis=1, balanced=1}: every rank is fed the whole
 *                batch, as Megatron-LM's get_batch_on_this_cp_rank slices it after loading.
 *   token-wise   what runs token by token (elementwise ops, Linear, the norms, the
 *                activations, Embedding, Split, Concat, Reshape, Transpose, Unsqueeze, Expand,
 *                Rope, tensor parallelism's collectives) runs on the rank's tokens; the
 *                attributes that size the sequence (a Reshape's or Expand's shape) are divided
 *                by CP.
 *   whole tables a value along the whole sequence that meets the rank's tokens (RoPE's cos and
 *                sin, made from Range) is read through its LocalShard {balanced=1}; a learned
 *                position table read as its first rows (Slice {starts=[0], ends=[seq]}: GPT's
 *                wpe) becomes an Embedding of this rank's positions (LocalShard of Range), so
 *                that its gradient is this rank's rows' and sums over cp with the others.
 *   attention    Attention becomes RingAttention {group="cp", ranks=CP}: the key and value
 *                blocks go round the group's ring, partial outputs merged by their
 *                log-sum-exp (ir/ops.def).
 *   MoE          Megatron-LM's dropless dispatch runs token by token: each rank routes its
 *                own tokens, the dispatched rows (grouped by expert) go through the experts'
 *                grouped GEMMs and back to the rank's tokens by the combine.
 *   the logits   stay split along the sequence (placed shard over cp along dim 1); the training
 *                pass takes the labels' LocalShard and makes the loss the sum of the ranks'
 *                token losses over the count of their tokens, both summed over cp.
 * The shard pass then sums the gradients over cp with data parallelism's ("cp+dp") and reduces
 * the FP8 amaxes over it. Anything else that reads a split value (a reduction or a slice along
 * the sequence, an attention mask) is refused, naming the node: f8c does not
 * guess at a layout it cannot keep exact.
 */
#ifndef F8_PASSES_CONTEXT_PARALLEL_H
#define F8_PASSES_CONTEXT_PARALLEL_H

#include <stdio.h> // FILE

#include "ir/diag.h"      // f8_status, f8_diag
#include "ir/graph.h"     // f8_graph
#include "passes/shard.h" // f8_parallel_options

/*
 * Runs the pass over `graph` (nothing when CP is 1): checks the layout against the model, sets
 * graph->mesh (or checks the tensor-parallel pass's), and splits the sequence. Its decisions to
 * `report` when not NULL. F8_ERR_ARGUMENT for a layout the model cannot take (the sequence not
 * a constant 2 x CP divides), F8_ERR_UNSUPPORTED naming a node it cannot split, F8_ERR_INVALID
 * for a graph with a backward, F8_ERR_NOMEM.
 */
f8_status f8_pass_context_parallel_run(f8_graph *graph, const f8_parallel_options *options,
				       FILE *report, f8_diag *diag);

#endif
