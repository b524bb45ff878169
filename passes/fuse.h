/*
 * The fuse pass: groups nodes into the fused kernels that codegen/ lowers (ir/graph.h,
 * f8_kernel_group), each with a reason that says what the kernel saves.
 *
 * requires: canonicalize (types), fp8-cast (the casts it groups), and every pass that adds
 * nodes (recompute; shard, when it comes): the groups must see every node.
 *
 * Greedy, in program order: the first node not yet in a kernel that may start one (a seed)
 * starts kernel k<n>, which grows by consumers of its members' outputs that its family admits,
 * that are of its phase, and whose other inputs are made before the kernel (a leaf, a member,
 * or a node that stands before the kernel's first member). A consumer that joins moves up to
 * just after the kernel's last member: its inputs are ready there, and nothing in between can
 * read what it makes, since it stood after all of it. A node is in one kernel at most. The
 * families of v1, what codegen lowers:
 *   norm             LayerNorm or RMSNorm (any phase) + each Quantize or CastTranspose of its
 *                    first output
 *   norm_grad        LayerNormGrad or RMSNormGrad + the casts of dx (its first output: the E5M2
 *                    copy an FP8 dgrad GEMM reads)
 *   activation       Gelu or SwiGLU + the casts of its output
 *   activation_grad  GeluGrad or SwiGLUGrad + the casts of its first output (SwiGLUGrad's
 *                    two-output form: of either) + for GeluGrad one ReduceSum of that output over
 *                    all its leading axes (axes [0 .. rank-2], keepdims 0: the bias gradient)
 *   elementwise      a chain of ops flagged F8_OPF_ELEMENTWISE that make one shape (a scalar
 *                    too; other inputs may broadcast to it), + the casts of its values of that
 *                    shape; a Range (each element from its index) starts one too, so that the
 *                    Cast of RoPE's positions joins it. Left out: Dropout (it draws random numbers), IsNaN, the comparisons
 *                    and logical ops and anything else making bool, CastLike; Gelu and GeluGrad
 *                    are activations. A lone op is a kernel too, a scalar one as well (the
 *                    optimizer's clipping arithmetic, the iteration's increment: on a GPU the
 *                    optimizer phase runs on the device, nothing read back).
 *   cast             a Quantize or CastTranspose no other kernel took, alone. Only a cast with a
 *                    given scale (delayed scaling) joins the kernels above: one that finds its
 *                    scales from the data (current, rowwise, block, MX) needs them before its
 *                    first code, so it is always a kernel of its own
 *   cross_entropy    a CrossEntropy alone; a CrossEntropyGrad alone
 *   embedding        an Embedding alone; embedding_grad: an EmbeddingGrad alone
 *   optimizer        every AdamW of the phase (they are independent: none reads what another
 *                    makes) + the ConstantOfShape that makes the next value of a gradient
 *                    accumulator a member reads (the zeroing for the next step): the kernel
 *                    takes them all, scanning the program from its seed on, not only readers of
 *                    its values, each moving up as a join does, for any number of parameters
 *                    (the kernel reaches them through a table: its code does not grow with them)
 *   scaling          a ScalingUpdate alone
 *   layout           a Reshape, Transpose, Squeeze, Unsqueeze, Expand, Slice, SliceGrad, Concat
 *                    or Split alone (an element move; fusing one with its neighbours, which
 *                    could read through it, is for later)
 *   reduce           a ReduceSum, ReduceMean or ReduceMax alone (a ReduceSum no activation_grad
 *                    kernel took as its bias gradient)
 *   fill             a Constant alone; a ConstantOfShape no optimizer kernel took as a zeroing
 *   global_norm      a GlobalNorm alone; learning_rate: a LearningRate alone
 *   rope             a Rope alone; a RopeGrad alone (each element reads its pair's partner, so
 *                    the x it rotates comes from memory)
 * A node seeds or joins a kernel only when the target table says codegen can lower it
 * (passes/target.h, supports_node; codegen fills it with f8_codegen_can_lower) and does not run
 * it in a library (runs_in_library): what codegen cannot lower yet (Pow, an AdamW of
 * a symbolic shape, ...) stays outside and runs as its own op. Every other node (GEMMs,
 * Attention, collectives: the target's library calls; ops codegen does not lower) stays outside
 * any kernel. Without a table that answers supports_node nothing lowers, so nothing is
 * grouped. The program changes
 * only by the moves above; values, types and annotations stay as they are.
 *
 * The pass runs once: a graph that has kernels already is refused (F8_ERR_INVALID), since
 * grouping the groups again would decide nothing new and a second run over a changed graph
 * could not keep the first run's names.
 */
#ifndef F8_PASSES_FUSE_H
#define F8_PASSES_FUSE_H

#include <stdio.h> // FILE

#include "ir/diag.h"       // f8_status, f8_diag
#include "ir/graph.h"      // f8_graph
#include "passes/target.h" // f8_target_table

/*
 * Groups `graph`'s nodes into kernels as above, for the target `target` describes (NULL, or
 * a table without supports_node: no kernels, and the report says why): adds the kernels
 * (graph->groups, named k0, k1, ... in program order), sets each member's `group` and moves
 * joining members up in the program. Writes one line per kernel (name, family, its members'
 * ops and scopes) and a summary (kernels per family, nodes fused, nodes left outside any kernel
 * by op) to `report` when not NULL. F8_ERR_INVALID when the graph has kernels already,
 * F8_ERR_NOMEM when memory runs out; on failure the graph is left as it was.
 */
f8_status f8_pass_fuse_run(f8_graph *graph, const f8_target_table *target, FILE *report,
			   f8_diag *diag);

#endif
