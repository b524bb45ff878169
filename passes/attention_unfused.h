/*
 * The attention-unfused pass: f32 attention on a GPU target spelled in primitives, as
 * TransformerEngine's UnfusedDotProductAttention does when no fused backend takes the dtype.
 *
 * requires: types (canonicalize), high-level ops (fuse-patterns), the forward only (training
 *           has not run: autodiff derives the backward from the primitives).
 * provides: no f32 Attention on sm_90 or sm_100 where the decomposition is exact (below).
 *
 * Why: the CUDA backend runs Attention through cuDNN's fused attention (runtime/cuda/
 * attention.c), which runs fp16 and bf16 only; an f32 model (compiled without --bf16) would
 * otherwise compile into a plan the GPU refuses. A plan for cpu keeps its Attention (the
 * reference kernels run it in any dtype), and so does bf16 or f16 attention on any target.
 *
 * What an f32 Attention(q, k, v) {causal, scale} of q (b, h, sq, d), k (b, kvh, skv, d),
 * v (b, kvh, skv, dv) becomes, in its place in the forward:
 *   k, v   with h > kvh (grouped-query): Unsqueeze at 2, Expand to (b, kvh, h/kvh, skv, .),
 *          Reshape to (b, h, skv, .), so that query head j reads kv head j / (h/kvh), as the
 *          op does; the Expand's gradient sums the group's heads back;
 *   scores MatMul(q, Transpose(k, 0 1 3 2)) * scale (1/sqrt(d) by default), (b, h, sq, skv);
 *   causal + the causal bias (sq, skv): -inf where key j > query i + skv - sq, 0 elsewhere,
 *          made once per plan for each (sq, skv) as Trilu(ConstantOfShape(-inf), k=skv-sq+1);
 *   p      Softmax over the keys, whose output carries the decision's reason;
 *   out    MatMul(p, v), which takes over the Attention's output value (name, readers);
 *   lse    when the Attention's log-sum-exp output is read: max + log(sum(exp(s - max))).
 * Exact where every query row attends some key: no mask input, and with causal sq <= skv (a
 * row that attends no key is 0 in the Attention op and NaN through a Softmax). An Attention
 * with a mask, or causal with more queries than keys (or sizes it cannot compare), is kept,
 * and the report says why: the CUDA backend then refuses it with its hint (--bf16).
 */
#ifndef F8_PASSES_ATTENTION_UNFUSED_H
#define F8_PASSES_ATTENTION_UNFUSED_H

#include <stdio.h> // FILE

#include "ir/diag.h"       // f8_status, f8_diag
#include "ir/graph.h"      // f8_graph
#include "passes/target.h" // f8_target

/* Runs the pass on `graph` for a plan compiled for `chip` (F8_TARGET_CPU: nothing to do).
 * Writes each decision with its reason to `report` when not NULL. F8_ERR_INVALID when the
 * graph has a backward already (the decomposition must come before autodiff), F8_ERR_NOMEM. */
f8_status f8_pass_attention_unfused_run(f8_graph *graph, f8_target chip, FILE *report,
					f8_diag *diag);

#endif
