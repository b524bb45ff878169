/*
 * The tensor-parallel pass: Megatron-LM's tensor parallelism (--tensor-model-parallel-size) on
 * the forward graph, before autodiff derives the backward from it.
 *
 * requires: canonicalize (types), fuse-patterns (Linear, Attention, SwiGLU), bf16; before
 * attention-unfused (which decomposes each rank's heads) and training,
 * so that the backward's collectives come from the forward's: the gradient of the f operator
 * below is the all-reduce of a column-parallel GEMM's dgrad, and each rank's weight gradients
 * are its own shards'. The shard pass, after fp8-cast, adds the rest (data parallelism, the
 * amaxes' reduction, the gradient norm over the shards).
 *
 * A region is a column-parallel Linear (its weight split by output features; an MoE's
 * GroupedLinear split so in each expert, as Megatron-LM's expert tensor parallelism), what
 * follows it elementwise or head by head (Split, Reshape, Transpose, Rope, Attention, the
 * activation), and the row-parallel Linear it ends in (its weight split by input features), as
 * Megatron-LM pairs QKV with the attention's output projection and FC1 with FC2. The pass finds the regions by
 * following each Linear's output through ops whose split it knows; a Linear whose output
 * reaches anything else (a norm, the residual, the loss) is kept whole on every rank, with its
 * reason in the report. Another
 * Linear whose output meets the region where it must be split (elementwise: SwiGLU's gate and
 * up; attention's k and v from projections of their own, through their reshapes, RoPE and a
 * GQA's expansion) is split with it. A weight stored (K, N) (transpose_weight: ONNX MatMul,
 * GPT-2's Conv1D) is split along its N or K as the layout says; a Split without sizes splits
 * into equal parts; a Reshape may flatten the dimensions before the split one (batch x seq).
 *
 * What a region's ranks run, each its share of the heads or of the FFN's columns:
 *   column-parallel   Identity {group="tp"} (Megatron's f: the identity, whose gradient is
 *                     all-reduced over TP) before the GEMM; the weight and bias split along
 *                     dim 0, part by part where the output is split into parts (QKV's q, k
 *                     and v; SwiGLU's gate and up), so that each rank holds its heads of each.
 *   row-parallel      the GEMM without its bias, its output partial over TP, one AllReduce
 *                     (sum, group "tp"; Megatron's g, whose gradient is the identity), then
 *                     the bias; the weight split along dim 1.
 * The attributes that name a split dimension's size (Split's sizes, Reshape's and Expand's
 * shapes) are divided by TP; shapes are inferred again. The parameters' placements say how
 * the ranks split them (`shard=tp:0[128 64 64]`); so do the activations'.
 *
 * With --sequence-parallel, what runs token by token between the regions (elementwise ops, the
 * norms, on values of the residual stream's shape [batch, seq, ...]) is split along the
 * sequence (dim 1) over tp: each row-parallel AllReduce becomes a ReduceScatter along it and
 * each f an AllGather (their gradients the other way round); a whole value read there takes
 * this rank's tokens (LocalShard, whose gradient gathers them: the embeddings' output); a
 * parameter read there (a norm's weight, a bias) is read through Identity {group="tp"}, so its
 * gradient sums the ranks' tokens' terms; anything else that reads a split value (the output
 * head) reads it gathered with replicated=1 (its gradient is LocalShard of the whole one).
 * The sequence must be a constant TP divides.
 *
 * Vocabulary parallelism (passes/tensor_parallel_vocab.c): the embedding table and the output
 * head split by vocabulary rows; the embedding's ranks' rows summed over tp, the logits left
 * split for the training pass's vocabulary-parallel cross-entropy.
 */
#ifndef F8_PASSES_TENSOR_PARALLEL_H
#define F8_PASSES_TENSOR_PARALLEL_H

#include <stdio.h> // FILE

#include "ir/diag.h"       // f8_status, f8_diag
#include "ir/graph.h"      // f8_graph
#include "passes/shard.h"  // f8_parallel_options

/*
 * Runs the pass over `graph` (nothing when TP is 1): checks the layout against the model (as
 * the shard pass does), sets graph->mesh, and splits the regions. Its decisions to `report`
 * when not NULL. F8_ERR_ARGUMENT for a layout the model cannot take, F8_ERR_INVALID for a graph
 * with a mesh already or a backward, F8_ERR_NOMEM.
 */
f8_status f8_pass_tensor_parallel_run(f8_graph *graph, const f8_parallel_options *options,
				      FILE *report, f8_diag *diag);

/*
 * This rank's first row of a vocabulary of `vocab` rows split evenly over tp: Range {0, vocab,
 * vocab / ranks} (every rank's first row, into *range) and its LocalShard over tp (this rank's,
 * [1] i64, into *shard), two new nodes in `scope`, appended to the program. The embedding's
 * lookup and the training pass's vocabulary-parallel cross-entropy read it.
 */
f8_status f8_tp_vocab_start(f8_graph *graph, int64_t ranks, int64_t vocab, const char *scope,
			    f8_node_id *range, f8_node_id *shard, f8_diag *diag);

#endif
