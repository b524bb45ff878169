/*
 * The FP64 gradient check: every gradient rule (passes/gradients.h), through autodiff and the
 * CPU executor, against central finite differences.
 *
 * Each case is a small graph in the text IR whose parameters are f64; the test appends the loss
 * sum_i ReduceSum(Mul(output_i, w_i)) over the graph's float outputs (w_i random f64 inputs, so
 * that every output element gets its own upstream gradient), differentiates it with respect to
 * every parameter (f8_autodiff_build), runs fwd|bwd, then perturbs each element of each
 * parameter by +-h and runs fwd again. Integer inputs (indices, labels, counts) get random valid
 * values; float inputs are kept away from kinks (Relu, Abs, Max at 0 or ties, top-k at ties).
 * Every op flagged F8_OPF_DIFFERENTIABLE in ir/ops.def must have a case: an op added to the
 * table without one fails this test.
 *
 * Usage: test_gradcheck [SEED]   (fresh inputs each run; the seed is printed to rerun one)
 */
#include <math.h>   // fabs, fmax, sqrt
#include <stdio.h>  // printf, snprintf
#include <stdlib.h> // malloc, free, strtoull
#include <string.h> // strcmp, strncmp, strlen, strchr
#include <time.h>   // time, clock

#include "ir/text.h"              // f8_text_parse
#include "ir/verify.h"            // f8_graph_verify
#include "passes/autodiff.h"      // f8_autodiff_build
#include "passes/canonicalize.h"  // f8_pass_canonicalize_run
#include "runtime/cpu/executor.h" // f8_cpu_executor_*
#include "tests/runtime/test_fill.h" // rng_*, test_find_spec, test_fill
#include "tests/test_support.h"   // CHECK, test_finish

/*
 * Accuracy. A central difference (f(x+h) - f(x-h)) / 2h in f64 with h = 1e-6 is off by about
 * h^2 f''' / 6 ~ 1e-13 (truncation) plus the rounding of the two losses over 2h: 2^-53 times the
 * sum of |the loss's terms| (up to ~100 here) over 2e-6, up to ~5e-9 absolute as measured over
 * 2000 seeds. So an element's error is |autodiff - numeric| / max(|numeric|, FLOOR): relative
 * (TOLERANCE) where the gradient is large, absolute (TOLERANCE * FLOOR = 5e-8) where it is near
 * zero, both well above the finite differences' own error. Norms, attention and cross-entropy
 * read f32 statistics (mean, 1/std, log-sum-exp: their contract) in the backward, which costs
 * them up to ~2e-7 relative: still under the tolerance.
 */
#define STEP 1e-6
#define TOLERANCE 1e-6
#define FLOOR 5e-2
/*
 * Ops whose outputs are f32 by contract whatever their inputs (CrossEntropy's loss, Router's
 * probabilities) cannot be differenced at f64 precision: each loss carries a rounding error of
 * 2^-24 |loss|. Those cases use a five-point stencil, (8(f(x+h) - f(x-h)) - (f(x+2h) - f(x-2h)))
 * / 12h, whose truncation error h^4 f^(5) / 30 allows a large h: 5e-2 for CrossEntropy (a loss
 * of ~6 rounds to ~4e-7, ~1e-5 in the derivative), 1e-2 for the Router (its top-k
 * must not change under +-2h: the logits are spaced ~0.1 apart). A wrong rule is off by far
 * more than F32_TOLERANCE.
 */
#define F32_TOLERANCE 3e-3
#define CE_STEP 5e-2
#define ROUTER_STEP 1e-2

/* A case: the graph's body in the text IR; `fills` names how to fill leaves that need more than
 * the default (test_fill, tests/runtime/test_fill.h); `f32_step`, when not 0, marks an op whose
 * float outputs are f32 by contract and is the five-point stencil's h for it. */
typedef struct gradcheck_case {
	const char *name;
	const char *ir;
	const char *fills;
	double f32_step;
} gradcheck_case;

/* Elementwise unary op OP on a signed (or positive) f64 parameter. */
#define UNARY(op, fill)                                                                        \
	{#op, "param %x : f64[2, 3]\n%y = " #op "(%x)\noutput %y", fill, 0}

static const gradcheck_case cases[] = {
	// Elementwise, binary ones with broadcasting (the gradient sums over broadcast dims).
	{"Add broadcast",
	 "param %a : f64[2, 3]\n" "param %b : f64[3]\n" "%y = Add(%a, %b)\n" "output %y", "", 0},
	{"Sub broadcast both",
	 "param %a : f64[2, 1]\n" "param %b : f64[1, 3]\n" "%y = Sub(%a, %b)\n" "output %y", "", 0},
	{"Mul", "param %a : f64[2, 3]\nparam %b : f64[2, 3]\n%y = Mul(%a, %b)\noutput %y", "", 0},
	{"Div broadcast",
	 "param %a : f64[2, 3]\n" "param %b : f64[3]\n" "%y = Div(%a, %b)\n" "output %y", "", 0},
	{"Pow broadcast exponent",
	 "param %a : f64[2, 3]\n" "param %b : f64[3]\n" "%y = Pow(%a, %b)\n"
	 "output %y", "a=positive", 0},
	{"Max broadcast",
	 "param %a : f64[2, 3]\n" "param %b : f64[3]\n" "%y = Max(%a, %b)\n" "output %y", "", 0},
	{"Min", "param %a : f64[2, 3]\nparam %b : f64[2, 3]\n%y = Min(%a, %b)\noutput %y", "", 0},
	UNARY(Sqrt, "x=positive"),
	UNARY(Reciprocal, ""),
	UNARY(Neg, ""),
	UNARY(Abs, ""),
	UNARY(Exp, ""),
	UNARY(Log, "x=positive"),
	UNARY(Tanh, ""),
	UNARY(Cos, ""),
	UNARY(Sin, ""),
	UNARY(Erf, ""),
	UNARY(Sigmoid, ""),
	UNARY(Relu, ""),
	UNARY(Identity, ""),
	{"Dropout (inference: identity)",
	 "param %x : f64[2, 3]\n" "%y, %mask = Dropout(%x) {ratio=0.3}\n" "output %y", "", 0},
	{"Where broadcast",
	 "input %c : bool[2, 3]\n" "param %a : f64[2, 3]\n" "param %b : f64[3]\n"
	 "%y = Where(%c, %a, %b)\n" "output %y", "c=bool", 0},
	{"Cast f64 to f64", "param %x : f64[2, 3]\n%y = Cast(%x) {to=f64}\noutput %y", "", 0},
	{"Cast f64 to f32",
	 "param %x : f64[2, 3]\n" "%y = Cast(%x) {to=f32}\n" "output %y", "", ROUTER_STEP},
	{"CastLike",
	 "param %x : f64[2, 3]\n" "input %like : f64[1]\n" "%y = CastLike(%x, %like)\n"
	 "output %y", "", 0},
	// Matrix products.
	{"MatMul",
	 "param %a : f64[2, 3]\n" "param %b : f64[3, 4]\n" "%y = MatMul(%a, %b)\n"
	 "output %y", "", 0},
	{"MatMul batched broadcast",
	 "param %a : f64[2, 1, 2, 3]\n" "param %b : f64[3, 3, 2]\n" "%y = MatMul(%a, %b)\n"
	 "output %y", "", 0},
	{"MatMul vector operands",
	 "param %a : f64[3]\n" "param %b : f64[3, 4]\n" "param %c : f64[2, 3]\n"
	 "%y = MatMul(%a, %b)\n" "%z = MatMul(%c, %a)\n" "output %y, %z", "", 0},
	{"Gemm", "param %a : f64[2, 3]\nparam %b : f64[3, 4]\n%y = Gemm(%a, %b)\noutput %y", "", 0},
	{"Gemm transA transB alpha beta C",
	 "param %a : f64[3, 2]\n" "param %b : f64[4, 3]\n" "param %c : f64[4]\n"
	 "%y = Gemm(%a, %b, %c) {alpha=0.7, beta=1.3, transA=1, transB=1}\n" "output %y", "", 0},
	{"Gemm C (M, 1)",
	 "param %a : f64[2, 3]\n" "param %b : f64[3, 4]\n" "param %c : f64[2, 1]\n"
	 "%y = Gemm(%a, %b, %c) {beta=-0.5}\n" "output %y", "", 0},
	{"Linear bias",
	 "param %x : f64[2, 3, 4]\n" "param %w : f64[5, 4]\n" "param %b : f64[5]\n"
	 "%y = Linear(%x, %w, %b)\n" "output %y", "", 0},
	{"Linear transpose_weight",
	 "param %x : f64[3, 4]\n" "param %w : f64[4, 5]\n"
	 "%y = Linear(%x, %w) {transpose_weight=1}\n" "output %y", "", 0},
	{"Linear transpose_weight bias, x rank 1",
	 "param %x : f64[4]\n" "param %w : f64[4, 3]\n" "param %b : f64[3]\n"
	 "%y = Linear(%x, %w, %b) {transpose_weight=1}\n" "output %y", "", 0},
	// Indexing and shapes.
	{"Gather axis 0, negative and repeated indices",
	 "param %x : f64[4, 3]\n" "input %i : i64[2, 3]\n" "%y = Gather(%x, %i)\n"
	 "output %y", "i=int:-4:3", 0},
	{"Gather axis 1, scalar index",
	 "param %x : f64[2, 4, 2]\n" "input %i : i64[]\n" "input %j : i64[3]\n"
	 "%y = Gather(%x, %i) {axis=1}\n" "%z = Gather(%x, %j) {axis=-1}\n"
	 "output %y, %z", "i=int:0:3 j=int:0:1", 0},
	{"Reshape", "param %x : f64[2, 6]\n%y = Reshape(%x) {shape=[3, -1, 2]}\noutput %y", "", 0},
	{"Transpose",
	 "param %x : f64[2, 3, 2]\n" "%y = Transpose(%x) {perm=[1, 2, 0]}\n" "%z = Transpose(%x)\n"
	 "output %y, %z", "", 0},
	{"Unsqueeze", "param %x : f64[2, 3]\n%y = Unsqueeze(%x) {axes=[0, -1]}\noutput %y", "", 0},
	{"Squeeze",
	 "param %x : f64[2, 1, 3, 1]\n" "%y = Squeeze(%x) {axes=[1]}\n" "%z = Squeeze(%x)\n"
	 "output %y, %z", "", 0},
	{"Concat",
	 "param %a : f64[2, 1]\n" "param %b : f64[2, 3]\n" "param %c : f64[2, 2]\n"
	 "%y = Concat(%a, %b, %c) {axis=-1}\n" "output %y", "", 0},
	{"Split sizes",
	 "param %x : f64[2, 6]\n" "%a, %b, %c = Split(%x) {axis=1, split=[1, 2, 3]}\n"
	 "output %a, %b, %c", "", 0},
	{"Split equal, one output unused",
	 "param %x : f64[4, 3]\n" "%a, %b = Split(%x)\n" "output %b", "", 0},
	{"Slice steps",
	 "param %x : f64[5, 6]\n"
	 "%y = Slice(%x) {starts=[1, 5], ends=[5, 0], axes=[0, 1], steps=[2, -2]}\n"
	 "output %y", "", 0},
	{"Slice negative start",
	 "param %x : f64[3, 5]\n" "%y = Slice(%x) {starts=[-3], ends=[100], axes=[1]}\n"
	 "output %y", "", 0},
	{"Expand", "param %x : f64[3, 1]\n%y = Expand(%x) {shape=[2, 3, 4]}\noutput %y", "", 0},
	{"Trilu upper and lower",
	 "param %x : f64[2, 3, 4]\n" "%u = Trilu(%x) {upper=1, k=1}\n"
	 "%l = Trilu(%x) {upper=0, k=-1}\n" "output %u, %l", "", 0},
	{"Softmax",
	 "param %x : f64[2, 4]\n" "%y = Softmax(%x)\n" "%z = Softmax(%x) {axis=0}\n"
	 "output %y, %z", "", 0},
	{"LogSoftmax",
	 "param %x : f64[2, 4]\n" "%y = LogSoftmax(%x)\n" "%z = LogSoftmax(%x) {axis=0}\n"
	 "output %y, %z", "", 0},
	{"ReduceSum keepdims",
	 "param %x : f64[2, 3, 2]\n" "%y = ReduceSum(%x) {axes=[0, 2], keepdims=0}\n"
	 "%z = ReduceSum(%x) {axes=[1]}\n" "%w = ReduceSum(%x) {keepdims=0}\n"
	 "output %y, %z, %w", "", 0},
	{"ReduceMean keepdims",
	 "param %x : f64[2, 3, 2]\n" "%y = ReduceMean(%x) {axes=[-1], keepdims=0}\n"
	 "%z = ReduceMean(%x) {axes=[0, 1]}\n" "%w = ReduceMean(%x)\n" "output %y, %z, %w", "", 0},
	{"ReduceMax keepdims",
	 "param %x : f64[2, 3, 2]\n" "%y = ReduceMax(%x) {axes=[1], keepdims=0}\n"
	 "%z = ReduceMax(%x) {axes=[0, 2]}\n" "output %y, %z", "", 0},
	{"CumSum",
	 "param %x : f64[2, 4]\n" "%y = CumSum(%x) {axis=1}\n"
	 "%z = CumSum(%x) {axis=-1, exclusive=1}\n" "%w = CumSum(%x) {axis=0, reverse=1}\n"
	 "%v = CumSum(%x) {axis=1, exclusive=1, reverse=1}\n" "output %y, %z, %w, %v", "", 0},
	{"TopK",
	 "param %x : f64[3, 5]\n" "%v, %i = TopK(%x) {k=2}\n"
	 "%s, %j = TopK(%x) {k=3, axis=0, largest=0}\n" "output %v, %s", "", 0},
	// High-level ops.
	{"LayerNorm with beta",
	 "param %x : f64[2, 3, 4]\n" "param %g : f64[4]\n" "param %b : f64[4]\n"
	 "%y = LayerNorm(%x, %g, %b) {epsilon=1e-05}\n" "output %y", "", 0},
	{"LayerNorm without beta, axis -2",
	 "param %x : f64[2, 3, 4]\n" "param %g : f64[3, 4]\n"
	 "%y = LayerNorm(%x, %g) {axis=-2, epsilon=0.1}\n" "output %y", "", 0},
	{"RMSNorm",
	 "param %x : f64[2, 3, 4]\n" "param %g : f64[4]\n" "%y = RMSNorm(%x, %g) {epsilon=1e-06}\n"
	 "output %y", "", 0},
	{"RMSNorm axis 1",
	 "param %x : f64[2, 2, 3]\n" "param %g : f64[2, 3]\n" "%y = RMSNorm(%x, %g) {axis=1}\n"
	 "output %y", "", 0},
	{"Gelu erf", "param %x : f64[2, 4]\n%y = Gelu(%x)\noutput %y", "", 0},
	{"Gelu tanh",
	 "param %x : f64[2, 4]\n" "%y = Gelu(%x) {approximate=\"tanh\"}\n" "output %y", "", 0},
	{"SwiGLU packed", "param %x : f64[2, 6]\n%y = SwiGLU(%x)\noutput %y", "", 0},
	{"SwiGLU split",
	 "param %g : f64[2, 3]\n" "param %u : f64[2, 3]\n" "%y = SwiGLU(%g, %u)\n"
	 "output %y", "", 0},
	{"Embedding repeated ids",
	 "param %w : f64[5, 3]\n" "input %ids : i64[2, 4]\n" "%y = Embedding(%ids, %w)\n"
	 "output %y", "ids=int:0:4", 0},
	{"Rope rotate-half",
	 "param %x : f64[1, 2, 3, 4]\n" "input %cos : f64[3, 4]\n" "input %sin : f64[3, 4]\n"
	 "%y = Rope(%x, %cos, %sin)\n" "output %y", "", 0},
	{"Rope partial",
	 "param %x : f64[1, 2, 3, 6]\n" "input %cos : f64[1, 1, 3, 2]\n"
	 "input %sin : f64[1, 1, 3, 2]\n" "%y = Rope(%x, %cos, %sin)\n" "output %y", "", 0},
	{"Rope interleaved",
	 "param %x : f64[2, 1, 3, 4]\n" "input %cos : f64[2, 1, 3, 4]\n"
	 "input %sin : f64[2, 1, 3, 4]\n" "%y = Rope(%x, %cos, %sin) {interleaved=1}\n"
	 "output %y", "", 0},
	{"Rope interleaved partial",
	 "param %x : f64[1, 2, 3, 6]\n" "input %cos : f64[3, 4]\n" "input %sin : f64[3, 4]\n"
	 "%y = Rope(%x, %cos, %sin) {interleaved=1}\n" "output %y", "", 0},
	{"Attention",
	 "param %q : f64[1, 2, 3, 4]\n" "param %k : f64[1, 2, 3, 4]\n"
	 "param %v : f64[1, 2, 3, 4]\n" "%y = Attention(%q, %k, %v)\n" "output %y", "", 0},
	{"Attention causal",
	 "param %q : f64[2, 1, 4, 3]\n" "param %k : f64[2, 1, 4, 3]\n"
	 "param %v : f64[2, 1, 4, 3]\n" "%y = Attention(%q, %k, %v) {causal=1}\n"
	 "output %y", "", 0},
	{"Attention GQA causal",
	 "param %q : f64[1, 4, 3, 2]\n" "param %k : f64[1, 2, 3, 2]\n"
	 "param %v : f64[1, 2, 3, 2]\n" "%y = Attention(%q, %k, %v) {causal=1}\n"
	 "output %y", "", 0},
	{"RingAttention, one rank: GQA causal",
	 "param %q : f64[1, 4, 4, 2]\n" "param %k : f64[1, 2, 4, 2]\n"
	 "param %v : f64[1, 2, 4, 2]\n"
	 "%y, %lse = RingAttention(%q, %k, %v) {group=\"cp\", ranks=1, causal=1}\n"
	 "output %y", "", 0},
	{"Attention bool mask, seq_q != seq_kv, scale",
	 "param %q : f64[1, 2, 2, 3]\n" "param %k : f64[1, 2, 4, 3]\n"
	 "param %v : f64[1, 2, 4, 2]\n" "input %m : bool[1, 1, 2, 4]\n"
	 "%y = Attention(%q, %k, %v, %m) {scale=0.3}\n" "output %y", "m=bool:0.7", 0},
	{"Attention additive mask, GQA",
	 "param %q : f64[1, 2, 3, 2]\n" "param %k : f64[1, 1, 3, 2]\n"
	 "param %v : f64[1, 1, 3, 2]\n" "input %m : f64[1, 2, 3, 3]\n"
	 "%y = Attention(%q, %k, %v, %m)\n" "output %y", "m=uniform:-2:0", 0},
	{"AttentionPacked causal, GQA",
	 "param %qkv : f64[2, 3, 16]\n"
	 "%y = AttentionPacked(%qkv) {heads=2, kv_heads=1, causal=1}\n" "output %y", "", 0},
	{"AttentionPacked additive mask, scale",
	 "param %qkv : f64[1, 3, 9]\n" "input %m : f64[1, 1, 3, 3]\n"
	 "%y = AttentionPacked(%qkv, %m) {heads=1, scale=0.3}\n" "output %y", "m=uniform:-2:0", 0},
	{"CrossEntropy mean, ignored labels",
	 "param %x : f64[2, 3, 5]\n" "input %t : i64[2, 3]\n" "%y = CrossEntropy(%x, %t)\n"
	 "output %y", "t=labels:5:-100", CE_STEP},
	{"CrossEntropy sum, ignore_index 2",
	 "param %x : f64[4, 5]\n" "input %t : i64[4]\n"
	 "%y = CrossEntropy(%x, %t) {ignore_index=2, reduction=\"sum\"}\n"
	 "output %y", "t=labels:5:2", CE_STEP},
	{"CrossEntropy none",
	 "param %x : f64[2, 3, 4]\n" "input %t : i64[2, 3]\n"
	 "%y = CrossEntropy(%x, %t) {reduction=\"none\"}\n"
	 "output %y", "t=labels:4:-100", CE_STEP},
	{"CrossEntropyShard and CrossEntropyMerge: one rank's whole vocabulary",
	 "param %x : f64[2, 3, 5]\n" "input %t : i64[2, 3]\n" "input %s : i64[1]\n"
	 "%m = ReduceMax(%x) {axes=[-1], keepdims=0}\n"
	 "%e, %g = CrossEntropyShard(%x, %t, %m, %s) {vocab=5}\n"
	 "%y = CrossEntropyMerge(%e, %g, %m, %t)\n" "output %y", "t=labels:5:-100 s=int:0:0",
	 CE_STEP},
	{"CrossEntropyShard and CrossEntropyMerge: columns 4..7 of 9, sum",
	 "param %x : f64[3, 4]\n" "input %t : i64[3]\n" "input %s : i64[1]\n" "input %m : f64[3]\n"
	 "%e, %g = CrossEntropyShard(%x, %t, %m, %s) {vocab=9}\n"
	 "%y = CrossEntropyMerge(%e, %g, %m, %t) {reduction=\"sum\"}\n" "output %y",
	 "t=labels:9:-100 s=int:4:4 m=uniform:0:1", CE_STEP},
	{"Embedding of a vocabulary shard",
	 "param %w : f64[4, 3]\n" "input %i : i64[2, 5]\n" "input %s : i64[1]\n"
	 "%y = Embedding(%i, %w, %s) {vocab=10}\n" "output %y", "i=int:0:9 s=int:3:3", 0},
	{"Router softmax",
	 "param %x : f64[4, 5]\n" "%p, %i = Router(%x) {top_k=2}\n"
	 "output %p", "x=spaced", ROUTER_STEP},
	{"Router sigmoid normalized",
	 "param %x : f64[4, 5]\n" "%p, %i = Router(%x) {top_k=3, score=\"sigmoid\", normalize=1}\n"
	 "output %p", "x=spaced", ROUTER_STEP},
	{"Router softmax normalized",
	 "param %x : f64[3, 4]\n" "%p, %i = Router(%x) {top_k=2, normalize=1}\n"
	 "output %p", "x=spaced", ROUTER_STEP},
	{"MoEDispatch",
	 "param %x : f64[4, 3]\n" "input %e : i64[4, 2]\n"
	 "%s, %n = MoEDispatch(%x, %e) {experts=3}\n" "output %s", "e=topk:3", 0},
	{"GroupedLinear",
	 "param %x : f64[6, 3]\n" "param %w : f64[3, 2, 3]\n" "input %n : i64[3]\n"
	 "%y = GroupedLinear(%x, %w, %n)\n" "output %y", "n=counts:6", 0},
	{"GroupedLinear transpose_weight",
	 "param %x : f64[5, 2]\n" "param %w : f64[2, 2, 3]\n" "input %n : i64[2]\n"
	 "%y = GroupedLinear(%x, %w, %n) {transpose_weight=1}\n" "output %y", "n=counts:5", 0},
	{"MoECombine",
	 "param %y : f64[6, 2]\n" "param %p : f64[3, 2]\n" "input %e : i64[3, 2]\n"
	 "%z = MoECombine(%y, %p, %e)\n" "output %z", "e=topk:4", 0},
	{"MoE layer: router, dispatch, experts, combine",
	 "param %x : f64[3, 2]\n" "param %l : f64[3, 4]\n" "param %w : f64[4, 2, 2]\n"
	 "%p, %i = Router(%l) {top_k=2}\n" "%s, %n = MoEDispatch(%x, %i) {experts=4}\n"
	 "%h = GroupedLinear(%s, %w, %n)\n" "%pp = Cast(%p) {to=f64}\n"
	 "%y = MoECombine(%h, %pp, %i)\n" "output %y", "l=spaced", ROUTER_STEP},
	// Collectives: one rank in one process, where they are the identity.
	{"AllReduce", "param %x : f64[2, 3]\n%y = AllReduce(%x) {group=\"tp\"}\noutput %y", "", 0},
	{"AllGather",
	 "param %x : f64[2, 3]\n" "%y = AllGather(%x) {group=\"dp\", axis=0, ranks=1}\n"
	 "output %y", "", 0},
	{"ReduceScatter",
	 "param %x : f64[2, 3]\n" "%y = ReduceScatter(%x) {group=\"dp\", axis=1, ranks=1}\n"
	 "output %y", "", 0},
	{"LocalShard",
	 "param %x : f64[2, 3]\n" "%y = LocalShard(%x) {group=\"tp\", axis=1, ranks=1}\n"
	 "output %y", "", 0},
	{"AllGather replicated (sequence parallelism's, before the head)",
	 "param %x : f64[2, 3]\n"
	 "%y = AllGather(%x) {group=\"tp\", axis=1, ranks=1, replicated=1}\n" "output %y", "", 0},
	{"AllToAllDispatch and AllToAllCombine, one rank (the rows squared between)",
	 "param %x : f64[6, 2]\n" "input %n : i64[3]\n"
	 "%y, %l, %r = AllToAllDispatch(%x, %n) {group=\"ep\", ranks=1}\n"
	 "%h = Mul(%y, %y)\n"
	 "%z = AllToAllCombine(%h, %n, %r) {group=\"ep\", ranks=1}\n" "output %z", "n=counts:6", 0},
	{"Identity over a group (Megatron's f)",
	 "param %x : f64[2, 3]\n" "%y = Identity(%x) {group=\"tp\"}\n" "output %y", "", 0},
};

#define N_CASES (sizeof cases / sizeof cases[0])

/* Adds a node of `op` reading `inputs` with one output; its id in *out. */
static f8_status add_node(f8_graph *graph, f8_op op, const f8_value_id *inputs, uint32_t n,
			  const f8_attr *attrs, uint32_t n_attrs, f8_value_id *out, f8_diag *diag) {
	f8_node_id node;
	f8_status status = f8_graph_add_node(graph, op, inputs, n, 1, NULL, &node, diag);
	if (!status && n_attrs)
		status = f8_node_set_attrs(graph, node, attrs, n_attrs);
	if (!status)
		*out = graph->nodes[node].outputs[0];
	return status;
}

/* The loss: the sum over the graph's float outputs of ReduceSum(Mul(f64(output), w)) with w a
 * fresh f64 input per output; the graph's outputs become the loss alone. */
static f8_status add_loss(f8_graph *graph, f8_value_id *loss, f8_diag *diag) {
	// Attribute names are the schema's own strings (f8_attr.name: static storage).
	const f8_attr to_f64 = {.name = f8_op_find_attr_spec(F8_OP_CAST, "to", 2)->name,
				.kind = F8_ATTR_DTYPE, .dtype = F8_DTYPE_F64};
	const f8_attr no_keepdims = {
		.name = f8_op_find_attr_spec(F8_OP_REDUCE_SUM, "keepdims", 8)->name,
		.kind = F8_ATTR_INT, .i = 0};
	f8_status status = F8_OK;
	*loss = F8_NONE;
	uint32_t n_outputs = graph->n_outputs;
	for (uint32_t i = 0; !status && i < n_outputs; i++) {
		f8_value_id out = graph->outputs[i], weight = F8_NONE, product = F8_NONE;
		f8_value_id sum = F8_NONE;
		f8_type type = graph->values[out].type;
		if (!f8_dtype_is_float(type.dtype))
			continue;
		if (type.dtype != F8_DTYPE_F64)
			status = add_node(graph, F8_OP_CAST, &out, 1, &to_f64, 1, &out, diag);
		type.dtype = F8_DTYPE_F64;
		char name[32];
		snprintf(name, sizeof name, "gradcheck_w%u", i);
		if (!status)
			status = f8_graph_add_input(graph, name, F8_ROLE_INPUT, &type, &weight,
						    diag);
		f8_value_id operands[2] = {out, weight};
		if (!status)
			status = add_node(graph, F8_OP_MUL, operands, 2, NULL, 0, &product, diag);
		if (!status)
			status = add_node(graph, F8_OP_REDUCE_SUM, &product, 1, &no_keepdims, 1,
					  &sum, diag);
		f8_value_id terms[2] = {*loss, sum};
		if (!status && *loss != F8_NONE)
			status = add_node(graph, F8_OP_ADD, terms, 2, NULL, 0, &sum, diag);
		*loss = sum;
	}
	graph->n_outputs = 0;
	if (!status && *loss == F8_NONE)
		status = f8_diag_set(diag, F8_ERR_INVALID, "the case has no float output");
	if (!status)
		status = f8_graph_add_output(graph, *loss);
	return status ? status : f8_pass_canonicalize_run(graph, diag);
}

/* A parsed, typed case with its loss and gradients, ready to run. */
typedef struct prepared {
	f8_graph *graph;
	f8_value_id loss;
	f8_value_id params[16], grads[16];
	uint32_t n_params;
} prepared;

/* Parses the case, records which ops it covers, adds the loss and the backward program. */
static f8_status prepare(const gradcheck_case *c, bool *covered, prepared *out, f8_diag *diag) {
	char text[4096];
	snprintf(text, sizeof text, "graph gradcheck {\n%s\n}\n", c->ir);
	*out = (prepared){0};
	f8_status status = f8_text_parse(text, strlen(text), c->name, &out->graph, diag);
	if (!status)
		status = f8_pass_canonicalize_run(out->graph, diag);
	if (status)
		return status;
	f8_graph *graph = out->graph;
	for (uint32_t i = 0; i < graph->n_order; i++)
		covered[graph->nodes[graph->order[i]].op] = true;
	if ((status = add_loss(graph, &out->loss, diag)) || (status = f8_graph_verify(graph, diag)))
		return status;
	for (uint32_t i = 0; i < graph->n_inputs && out->n_params < 16; i++)
		if (graph->values[graph->inputs[i]].role == F8_ROLE_PARAMETER)
			out->params[out->n_params++] = graph->inputs[i];
	status = f8_autodiff_build(graph, out->loss, F8_NONE, out->params, out->n_params,
				   F8_PHASE_BWD, out->grads, diag);
	for (uint32_t i = 0; !status && i < out->n_params; i++)
		if (out->grads[i] != F8_NONE)
			status = f8_graph_add_output(graph, out->grads[i]);
	return status ? status : f8_graph_verify(graph, diag);
}

/* Fills every leaf of the prepared graph with fresh random values by the case's fills. */
static bool fill_leaves(f8_cpu_executor *executor, const prepared *p, const char *fills) {
	bool ok = true;
	char spec[64];
	for (uint32_t i = 0; i < p->graph->n_inputs; i++) {
		const f8_value *value = &p->graph->values[p->graph->inputs[i]];
		test_find_spec(fills, value->name, spec, sizeof spec);
		// By default a parameter is away from zero and kinks, an input uniform in [-1, 1].
		ok &= test_fill(f8_cpu_executor_leaf(executor, p->graph->inputs[i]), spec,
				value->role == F8_ROLE_PARAMETER ? "signed" : "uniform:-1:1");
	}
	return ok;
}

/* The loss with element i of parameter leaf t set to x (restored by the caller). */
static bool loss_at(f8_cpu_executor *executor, const prepared *p, f8_rt_tensor *t, int64_t i,
		    double x, double *loss, f8_diag *diag) {
	f8_rt_tensor_set(t, i, x);
	if (f8_cpu_executor_run(executor, F8_PHASE_BIT(F8_PHASE_FWD), diag))
		return false;
	*loss = f8_rt_tensor_get(f8_cpu_executor_value(executor, p->loss), 0);
	return true;
}

/* d loss / d t[i] by central differences: two points with STEP, or five with f32_step. */
static bool numeric_gradient(f8_cpu_executor *executor, const prepared *p, f8_rt_tensor *t,
			     int64_t i, double f32_step, double *out, f8_diag *diag) {
	bool f32 = f32_step > 0;
	double x = f8_rt_tensor_get(t, i), h = f32 ? f32_step : STEP;
	double plus, minus, plus2 = 0, minus2 = 0;
	bool ok = loss_at(executor, p, t, i, x + h, &plus, diag) &&
		  loss_at(executor, p, t, i, x - h, &minus, diag);
	if (ok && f32)
		ok = loss_at(executor, p, t, i, x + 2 * h, &plus2, diag) &&
		     loss_at(executor, p, t, i, x - 2 * h, &minus2, diag);
	// The steps actually taken: x + h is rounded, and dividing by the rounded step is exact.
	double step = (x + h) - (x - h);
	*out = f32 ? (8 * (plus - minus) - (plus2 - minus2)) / (6 * step) : (plus - minus) / step;
	f8_rt_tensor_set(t, i, x);
	return ok;
}

/* The gradients the fwd|bwd run made, copied (the finite differences' runs replace them). */
static double **read_gradients(f8_cpu_executor *executor, const prepared *p) {
	double **analytic = calloc(p->n_params, sizeof *analytic);
	for (uint32_t k = 0; analytic && k < p->n_params; k++) {
		int64_t n = f8_rt_tensor_numel(f8_cpu_executor_leaf(executor, p->params[k]));
		const f8_rt_tensor *g = p->grads[k] == F8_NONE ? NULL
					: f8_cpu_executor_value(executor, p->grads[k]);
		analytic[k] = calloc((size_t)n + 1, sizeof **analytic);
		for (int64_t i = 0; g && analytic[k] && i < n; i++)
			analytic[k][i] = f8_rt_tensor_get(g, i);
	}
	return analytic;
}

/* Compares autodiff's gradients with finite differences on every element; the worst error. */
static bool check_gradients(f8_cpu_executor *executor, const prepared *p, double f32_step,
			    double *worst, int64_t *elements, f8_diag *diag) {
	*worst = 0, *elements = 0;
	double **analytic = read_gradients(executor, p);
	bool ok = analytic != NULL;
	for (uint32_t k = 0; ok && k < p->n_params; k++) {
		f8_rt_tensor *t = f8_cpu_executor_leaf(executor, p->params[k]);
		int64_t n = f8_rt_tensor_numel(t);
		for (int64_t i = 0; ok && i < n; i++) {
			double numeric;
			if (!(ok = numeric_gradient(executor, p, t, i, f32_step, &numeric, diag)))
				break;
			double error = fabs(analytic[k][i] - numeric) / fmax(fabs(numeric), FLOOR);
			if (error > *worst)
				*worst = error;
			if (error > (f32_step > 0 ? F32_TOLERANCE : TOLERANCE))
				printf("  %%%s[%lld]: autodiff %.12g, finite differences %.12g\n",
				       p->graph->values[p->params[k]].name, (long long)i,
				       analytic[k][i], numeric);
		}
		*elements += n;
	}
	for (uint32_t k = 0; analytic && k < p->n_params; k++)
		free(analytic[k]);
	free(analytic);
	return ok;
}

/* Runs one case: prepare, fill, fwd|bwd, finite differences. */
static void run_case(const gradcheck_case *c, bool *covered) {
	f8_diag diag;
	f8_diag_clear(&diag);
	prepared p;
	f8_cpu_executor *executor = NULL;
	int64_t symbols[1] = {1}, elements = 0; // the cases have no symbols
	uint32_t fwd_bwd = F8_PHASE_BIT(F8_PHASE_FWD) | F8_PHASE_BIT(F8_PHASE_BWD);
	double worst = 0;
	bool ok = prepare(c, covered, &p, &diag) == F8_OK &&
		  f8_cpu_executor_create(p.graph, symbols, &executor, &diag) == F8_OK &&
		  fill_leaves(executor, &p, c->fills) &&
		  f8_cpu_executor_run(executor, fwd_bwd, &diag) == F8_OK;
	// The run's gradients are read before the finite differences' runs replace them.
	ok = ok && check_gradients(executor, &p, c->f32_step, &worst, &elements, &diag);
	double tolerance = c->f32_step > 0 ? F32_TOLERANCE : TOLERANCE;
	if (!ok) {
		printf("FAIL %s:\n", c->name);
		f8_diag_print(&diag, stdout);
	} else {
		printf("%s %-48s %3lld elements, max error %.2e (tolerance %.0e)\n",
		       worst < tolerance ? "ok  " : "FAIL", c->name, (long long)elements, worst,
		       tolerance);
	}
	CHECK(ok && worst < tolerance);
	f8_cpu_executor_destroy(executor);
	f8_graph_destroy(p.graph);
}

int main(int argc, char **argv) {
	setvbuf(stdout, NULL, _IOLBF, 0); // a crash keeps what was printed before it
	uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 0)
				 : (uint64_t)time(NULL) * 1000003u ^ (uint64_t)clock();
	rng_state = seed;
	printf("gradcheck seed %llu (rerun with: test_gradcheck %llu)\n", (unsigned long long)seed,
	       (unsigned long long)seed);
	clock_t start = clock();
	bool covered[F8_OP_COUNT] = {false};
	for (size_t i = 0; i < N_CASES; i++)
		run_case(&cases[i], covered);
	for (int op = 0; op < F8_OP_COUNT; op++) {
		if (!(f8_op_get_info((f8_op)op)->flags & F8_OPF_DIFFERENTIABLE))
			continue;
		if (!covered[op])
			printf("FAIL %s is differentiable but no gradient check case covers it\n",
			       f8_op_name((f8_op)op));
		CHECK(covered[op]);
	}
	printf("%zu cases in %.2f s of CPU time\n", N_CASES,
	       (double)(clock() - start) / CLOCKS_PER_SEC);
	return test_finish();
}
