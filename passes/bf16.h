/*
 * The bf16 pass: mixed precision as Megatron-LM's --bf16 means it. The forward computes in BF16
 * while the parameters stay f32: they are the master weights, which AdamW updates with f32
 * moments from f32 gradient accumulators (main_grad, Megatron's gradient-accumulation fusion).
 *
 * requires: canonicalize (types), fuse-patterns (the high-level ops); the forward graph only
 * (training has not run: the backward is derived from the BF16 forward, not retyped after it).
 *
 * What it does to the forward, in program order:
 *   - each float parameter (f32, or f16 and f64, which become f32 master weights as the
 *     training pass makes them) is read through one Cast to BF16, `%<param>.bf16`, placed just
 *     before its first reader: autodiff then carries the BF16 gradient back through that Cast's
 *     gradient, a Cast to f32, into the f32 accumulator. A parameter that is BF16 already keeps
 *     its dtype (the model's own), and the training pass makes its master weight as it does
 *     without --bf16;
 *   - each float graph input is read through a Cast to BF16 (`%<input>.bf16`) likewise;
 *   - every node's outputs are inferred again from its (now BF16) operands: activations,
 *     norms, residual adds, attention, GELU and SwiGLU, the GEMMs and the logits become BF16.
 *     An op that takes one float dtype and meets BF16 with an operand of another (a constant
 *     of the model, a value it computes in f32 on purpose) gets that operand through a Cast to
 *     BF16 as well; an op that takes mixed dtypes keeps them (RoPE's f32 tables);
 *   - the GEMM of a mixture of experts' router (the Linear or MatMul whose output a Router
 *     reads as logits) stays f32: its master weight read as it is, its BF16 input through a
 *     Cast to f32 (`%<input>.f32`), so that BF16 rounding does not flip the top-k choice of a
 *     token whose best experts are close (Megatron-LM's --moe-router-dtype fp32); the Router's
 *     probabilities are f32 by the op's definition in any case.
 * Each Cast's output carries its reason ("kept BF16: --bf16: ..."), as the precision pass's
 * decisions do. What stays f32 does so by the ops' own definitions, which hold for any dtype:
 * norms' mean and rstd, attention's softmax statistics (lse), and the loss: CrossEntropy reads
 * BF16 logits, computes in f32 and writes its gradient in BF16, as Megatron's fused cross
 * entropy does. The GEMMs' decisions (BF16, or FP8 with --fp8-format, whose FP8 GEMMs then
 * write BF16) are the precision pass's, with their reasons.
 *
 * A graph with no float parameter or input is left as it is.
 */
#ifndef F8_PASSES_BF16_H
#define F8_PASSES_BF16_H

#include <stdio.h> // FILE

#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/graph.h" // f8_graph

/* Runs the pass on `graph`. Writes what it made (the copies, the casts an op needed, how many
 * values are BF16 now) to `report` when not NULL. F8_ERR_INVALID when the graph has a backward
 * already (hint: run it before training), or when an op refuses BF16 operands (naming it). */
f8_status f8_pass_bf16_run(f8_graph *graph, FILE *report, f8_diag *diag);

#endif
