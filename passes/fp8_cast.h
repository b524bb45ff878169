/*
 * The fp8-cast pass: turns every GEMM the precision pass marked FP8 into an FP8Gemm on FP8
 * operands, with the casts that make them and the scaling state they need.
 *
 * requires: precision (the decisions), training when there is a backward.
 *
 * Operands, in Hopper's TN form (both K-major):
 *   fwd    Linear(x, w)                    -> FP8Gemm(x8, w8)      x E4M3, w E4M3
 *   dgrad  Linear(dy, w) {transpose_weight} -> FP8Gemm(dy8, w8t)   dy E5M2 under HYBRID
 *   wgrad  LinearWgrad(dy, x)              -> FP8Gemm(dy8t, x8t)
 * One cast per (source tensor, recipe): a value read by several FP8 GEMMs (x by fwd and wgrad,
 * q/k/v projections reading one norm) is cast once; a cast that must also give the transposed
 * copy is a CastTranspose (one read of the source). The FP8Gemm keeps the GEMM's output value
 * (its name, type and decision annotation); the cast outputs carry their own annotations:
 * format, recipe, scaling slot, and a reason ("fwd input of layers.0.mlp.fc1, HYBRID -> E4M3").
 * High-precision operands stay where they are: nothing is dequantized, since every FP8 copy is
 * made from a high-precision value that the graph still has.
 *
 * Weights (an FP8 GEMM's weight operand that is a parameter, or a Cast of one) are cast from
 * the parameter itself (the f32 master weight) once per optimizer step, in phase cast, into
 * leaves of role cache (`%<param>.fp8`, `.fp8_t`, `.fp8_scale_inv`, `.fp8_scale_inv_t`) that
 * every micro-batch reads.
 *
 * Delayed scaling keeps one table per group of slots, each updated by one ScalingUpdate at the
 * end of the phase that observes its amaxes:
 *   %fp8.weights.*      phase cast  weights
 *   %fp8.activations.*  phase fwd   GEMM inputs of the forward (and wgrad's x)
 *   %fp8.gradients.*    phase bwd   output gradients (dgrad's and wgrad's dy)
 * each with `scale` (f32[n], role scale, 1 at start, as TransformerEngine starts),
 * `amax_history` (f32[len, n], role amax_history, row 0 the newest) and `nonfinite` (i64[],
 * role state: the slots whose amax was NaN or inf, so whose update was skipped). The casts read
 * their slot of the table (Quantize/CastTranspose {slot=i}) and record the amax of what they
 * cast. The other recipes find their scales in the cast and keep no state.
 *
 * Granularity per recipe: current and delayed per tensor; rowwise one scale per row of each
 * K-major operand (block [1, K]); block 1x128 for activations and gradients, 128x128 for
 * weights; mxfp8 1x32 blocks with E8M0 scales for every operand.
 */
#ifndef F8_PASSES_FP8_CAST_H
#define F8_PASSES_FP8_CAST_H

#include <stdio.h> // FILE

#include "ir/diag.h"           // f8_status, f8_diag
#include "ir/fp8.h"            // F8_FP8_TABLE_WEIGHTS, ..._ACTIVATIONS, ..._GRADIENTS
#include "ir/graph.h"          // f8_graph
#include "passes/precision.h"  // f8_fp8_options

/* The tables' name prefixes, in slot-group order: F8_FP8_TABLE_* (ir/fp8.h). */

/* Runs the pass with `options` (the same the precision pass ran with). Writes a summary (casts,
 * slots per table) to `report` when not NULL. */
f8_status f8_pass_fp8_cast_run(f8_graph *graph, const f8_fp8_options *options, FILE *report,
			       f8_diag *diag);

#endif
