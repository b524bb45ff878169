/*
 * The attention-layout pass: attention that reads q, k and v in place from the QKV projection's
 * output and writes its output, and in the backward dq, dk and dv, where the next GEMM reads
 * them, as TransformerEngine's qkv_layout "bs3hd" (and "bshd" for the output) does: no copies
 * around it.
 *
 * requires: types, the backward (training; a forward alone is rewritten too), fuse not yet run
 *           (a node already in a kernel is left as it is).
 * provides: AttentionPacked and AttentionPackedGrad (ir/ops.def) where the rewrite is exact,
 *           their layout's decision in the reason of the attention's output and of the dqkv
 *           gradient, and the reason it was not made on the output of every Attention kept.
 *
 * Why: a transformer's attention reads q, k and v as (b, h, s, d) and the QKV GEMM writes them
 * as (b, s, [q | k | v]) = (b, s, h + 2 h_kv, d); the IR says so with a Split, a Reshape and a
 * Transpose for each, and the Transpose and Reshape of the output back to (b, s, h d), and the
 * backward mirrors them (dq, dk, dv transposed, reshaped and concatenated into dqkv). Values in
 * the IR have buffers of their own, so each of those is a copy kernel: 18 per layer, 40 ms of
 * gpt-1.3b's 292 ms FP8 step on an H100 (tools/bench_gpu.md). cuDNN's attention takes strided
 * tensors (runtime/cuda/attention.c), and the CPU reference reads rows at any offset, so the
 * copies are not needed.
 *
 * The rewrite, for an Attention(q, k, v[, mask]) that is exactly this packing:
 *   qkv (b, s, (h + 2 h_kv) d) -Split(axis 2, [h d, h_kv d, h_kv d])-> q, k, v
 *   each -Reshape (b, s, heads, d)-> -Transpose [0 2 1 3]-> the Attention's input, in order;
 *   out -Transpose [0 2 1 3]-> -Reshape (b, s, h d)-> merged
 * becomes merged, lse = AttentionPacked(qkv[, mask]) {heads, kv_heads, causal, scale}, which
 * takes over merged and the lse (their names, types and readers stay). Each AttentionGrad of
 * it (dout, q, k, v, out, lse[, mask]) whose dout is dmerged -Reshape (b, s, h, d)-> -Transpose
 * [0 2 1 3]-> and whose dq, dk, dv are each -Transpose [0 2 1 3]-> -Reshape (b, s, heads d)->
 * and then Concat(axis 2) in that order into dqkv, becomes dqkv = AttentionPackedGrad(dmerged,
 * qkv, merged, lse[, mask]), which takes over dqkv. Every node of the match leaves the program.
 *
 * It is made only when nothing else reads a value the match removes (the Split's parts, the
 * transposed q, k, v, the output in (b, h, s, d), ...; not a graph output either), when every
 * reader of q, k, v and out among them is the Attention or such an AttentionGrad (a recompute
 * clone that reads them, or RoPE between the Split and the Attention as Llama's, keeps the
 * copies), and when the match has no node in a fused kernel yet. Otherwise the graph is left
 * as it is and the Attention's output reason says why. Exact on every target: both backends
 * compute the same attention from the same elements, only the addresses differ.
 */
#ifndef F8_PASSES_ATTENTION_LAYOUT_H
#define F8_PASSES_ATTENTION_LAYOUT_H

#include <stdio.h> // FILE

#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/graph.h" // f8_graph

/* Runs the pass on `graph`, writing each decision with its reason to `report` when not NULL.
 * F8_ERR_NOMEM when out of memory; the graph is then left as it was or rewritten in part, each
 * part complete (a node added but not yet in the program is unused). */
f8_status f8_pass_attention_layout_run(f8_graph *graph, FILE *report, f8_diag *diag);

#endif
