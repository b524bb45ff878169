/*
 * The backend test table (DESIGN.md, "Compile and run"; ggml's test-backend-ops): a case for
 * every op of ir/ops.def, each a small text-IR graph compiled by the pipeline through fuse and
 * schedule for inference (so that what fuses runs through generated kernels, from a planned
 * slab), run through the executor core on every backend present, on the same fresh random
 * leaves, and every graph output compared with the CPU reference backend's by normalized error
 *
 *     NMSE = sum((got - reference)^2) / sum(reference^2)
 *
 * with a tolerance per dtype (backend_ops_tolerance, tests/runtime/test_backend_ops.h). Where
 * an op cannot run alone in one process (Send, Recv, a gather over several ranks), its case
 * checks that every backend refuses the run with a message that says why. A coverage check
 * fails naming every op of ir/ops.def that no case's compiled graph holds.
 *
 * The CUDA backend runs plans only, and the GPU machine has no LLVM to compile them: with
 * --write-cases DIR, each case that can run alone on a GPU is compiled for sm_90 as f8c compile
 * does (f8_tool_plan_make) and written to DIR with its leaves (the same fill as here) and the
 * CPU reference backend's outputs; tests/gpu/backend_ops_cuda.c runs them there by the same
 * rule. A case that cannot (a refused one, or one with a node that is neither in a fused
 * group, a library call nor a device copy: an op codegen does not lower yet) is listed in
 * DIR/manifest.json with the reason (the layout: tests/runtime/test_backend_ops.h).
 *
 * The seed comes from the clock and is printed; F8_TEST_SEED=N repeats a run. Each case draws
 * from a stream of its own (the seed and its index), so a case's data does not depend on the
 * cases before it. An argument runs only the cases whose title contains it; F8_TEST_VERBOSE=1
 * prints every output's comparison, not only those that fail.
 *
 * usage: test_backend_ops [TITLE_PART]
 *        test_backend_ops --write-cases DIR [TITLE_PART]
 */
#include <errno.h>    // errno, EEXIST
#include <jansson.h>  // json_t, json_pack, json_dump_file
#include <stdio.h>    // printf, snprintf
#include <stdlib.h>   // getenv, strtoul
#include <string.h>   // strstr, strcmp
#include <sys/stat.h> // mkdir
#include <time.h>     // time

#include "codegen/target.h"       // f8_codegen_target_table_for
#include "ir/alloc.h"             // f8_calloc, f8_free
#include "ir/dtype.h"             // f8_dtype_name, f8_dtype_is_float
#include "ir/ops.h"               // f8_op, f8_op_name
#include "ir/text.h"              // f8_text_parse
#include "passes/pipeline.h"      // f8_pipeline_run_with, f8_pipeline_options
#include "runtime/cpu/backend.h"  // f8_cpu_backend_create, F8_CPU_KERNELS_*
#include "runtime/executor.h"     // f8_executor_memory
#include "runtime/plan.h"         // f8_plan_write, f8_plan_destroy
#include "runtime/safetensors.h"  // f8_safetensors_write
#include "tests/runtime/test_backend_ops.h" // backend_ops_run, _compare, _tolerance, ...
#include "tests/runtime/test_fill.h" // rng_state, test_fill, test_find_spec
#include "tests/test_support.h"   // CHECK, test_finish
#include "tools/compile.h"        // f8_tool_plan_make

/* The backends: the first is the reference every other is compared with. A backend this build
 * or machine lacks answers F8_ERR_UNSUPPORTED from create and is skipped, said so once; the
 * CUDA backend joins as one more entry. */
typedef struct backend_entry {
	const char *name; // in the report
	f8_status (*create)(f8_backend **out, f8_diag *diag);
} backend_entry;

static f8_status create_cpu_reference(f8_backend **out, f8_diag *diag) {
	return f8_cpu_backend_create(F8_CPU_KERNELS_REFERENCE, out, diag);
}

static f8_status create_cpu_generated(f8_backend **out, f8_diag *diag) {
	return f8_cpu_backend_create(F8_CPU_KERNELS_GENERATED, out, diag);
}

static const backend_entry backends[] = {
	{"cpu-reference", create_cpu_reference},
	{"cpu-generated", create_cpu_generated},
};
enum { N_BACKENDS = sizeof backends / sizeof backends[0] };

/*
 * One case: a graph's body (leaves, nodes, outputs; the "graph case { }" around it is added),
 * how its leaves are filled, and what to expect.
 *   fill:      "name=spec ..." in tests/runtime/test_fill.h's specs; a leaf not named gets its
 *              dtype's default (default_fill). Integer leaves are always named: ids, labels
 *              and counts have ranges only the case knows.
 *   refused:   NULL: the run succeeds; else every backend fails it with a message holding this.
 *   tolerance: 0: each output's dtype's (backend_ops_tolerance); else this bound for every output.
 */
typedef struct op_case {
	const char *title;
	const char *text;
	const char *fill;
	const char *refused;
	double tolerance;
} op_case;

#define IN(name, type) "input %" name " : " type "\n"

/* FP8Gemm's bound for a backend on Hopper: its FP8 tensor cores accumulate in about 14 bits of
 * mantissa (DeepSeek-V3's report, 3.3.2), an error of about sqrt(K) 2^-14 relative to an output
 * for K of a few hundred: NMSE about K 2^-28. The CPU backends run one FP8Gemm (the library
 * node's emulation, exact products and a double sum) and agree exactly. */
#define FP8_GEMM_TOLERANCE 2e-6 // K 96 .. 200 below: 200 * 2^-28 = 7.5e-7, with room

/* bf16 attention's bound for cuDNN, which rounds P to bf16 before P V: o's NMSE near u^2 / 2
 * for u = 2^-8, bound 4 u^2 (tests/gpu/attention_check.c derives it; 5e-6 measured on an
 * H200). The CPU backends run one reference kernel and agree exactly. */
#define ATTENTION_BF16_TOLERANCE 6.1e-5 // 4 * 2^-16
/* Its gradients': two more roundings to bf16 in cuDNN's backward (P and dS before the dV, dK
 * and dQ GEMMs) and o's error in rowsum(dO * O), 16 u^2 as tests/gpu/attention_check.c bounds
 * them. */
#define ATTENTION_BF16_GRAD_TOLERANCE 2.5e-4 // 16 * 2^-16

static const op_case cases[] = {
	// Elementwise arithmetic: fused into elementwise kernels where codegen lowers the op.
	{.title = "Add, broadcast",
	 IN("a", "f32[6, 45]") IN("b", "f32[45]") "%y = Add(%a, %b)\noutput %y\n"},
	{.title = "Add bf16, broadcast rows", IN("a", "bf16[3, 5, 40]") IN("b", "bf16[5, 40]")
	 "%y = Add(%a, %b)\noutput %y\n"},
	{.title = "Sub, broadcast column", IN("a", "f32[6, 45]") IN("b", "f32[6, 1]")
	 "%y = Sub(%a, %b)\noutput %y\n"},
	{.title = "Mul",
	 IN("a", "f32[7, 33]") IN("b", "f32[7, 33]") "%y = Mul(%a, %b)\noutput %y\n"},
	{.title = "Mul bf16, scalar",
	 IN("a", "bf16[9, 70]") IN("b", "bf16[]") "%y = Mul(%a, %b)\noutput %y\n"},
	{.title = "Div",
	 IN("a", "f32[5, 39]") IN("b", "f32[5, 39]") "%y = Div(%a, %b)\noutput %y\n",
	 "b=signed"},
	{.title = "Pow", IN("a", "f32[4, 21]") IN("b", "f32[21]") "%y = Pow(%a, %b)\noutput %y\n",
	 "a=uniform:0.1:4 b=uniform:-2:3"},
	{.title = "Sqrt", IN("x", "f32[6, 35]") "%y = Sqrt(%x)\noutput %y\n", "x=uniform:0.01:50"},
	{.title = "Reciprocal",
	 IN("x", "f32[6, 35]") "%y = Reciprocal(%x)\noutput %y\n", "x=signed"},
	{.title = "Neg bf16", IN("x", "bf16[6, 35]") "%y = Neg(%x)\noutput %y\n"},
	{.title = "Abs", IN("x", "f32[6, 35]") "%y = Abs(%x)\noutput %y\n"},
	{.title = "Exp", IN("x", "f32[6, 35]") "%y = Exp(%x)\noutput %y\n", "x=uniform:-9:9"},
	{.title = "Exp bf16", IN("x", "bf16[3, 50]") "%y = Exp(%x)\noutput %y\n", "x=uniform:-5:5"},
	{.title = "Log", IN("x", "f32[6, 35]") "%y = Log(%x)\noutput %y\n", "x=uniform:0.01:100"},
	{.title = "Tanh", IN("x", "f32[6, 35]") "%y = Tanh(%x)\noutput %y\n", "x=uniform:-5:5"},
	{.title = "Cos", IN("x", "f32[6, 35]") "%y = Cos(%x)\noutput %y\n", "x=uniform:-9:9"},
	{.title = "Sin", IN("x", "f32[6, 35]") "%y = Sin(%x)\noutput %y\n", "x=uniform:-9:9"},
	// Arguments far from 0 (RoPE's angles: positions times frequencies up to 1), where a
	// reduction by pi/2 that loses bits would show.
	{.title = "Cos, arguments to 8192", IN("x", "f32[6, 35]") "%y = Cos(%x)\noutput %y\n",
	 "x=uniform:-8192:8192"},
	{.title = "Sin, arguments to 10^5", IN("x", "f32[6, 35]") "%y = Sin(%x)\noutput %y\n",
	 "x=uniform:-100000:100000"},
	{.title = "Cos, Sin bf16, arguments to 3000", IN("x", "bf16[7, 40]")
	 "%c = Cos(%x)\n%s = Sin(%x)\noutput %c, %s\n", "x=uniform:-3000:3000"},
	{.title = "Erf", IN("x", "f32[6, 35]") "%y = Erf(%x)\noutput %y\n", "x=uniform:-4:4"},
	{.title = "Sigmoid",
	 IN("x", "f32[6, 35]") "%y = Sigmoid(%x)\noutput %y\n", "x=uniform:-20:20"},
	{.title = "Max, broadcast", IN("a", "f32[5, 3, 14]") IN("b", "f32[3, 1]")
	 "%y = Max(%a, %b)\noutput %y\n"},
	{.title = "Min",
	 IN("a", "bf16[5, 42]") IN("b", "bf16[5, 42]") "%y = Min(%a, %b)\noutput %y\n"},
	{.title = "Relu", IN("x", "f32[6, 35]") "%y = Relu(%x)\noutput %y\n"},
	{.title = "Identity", IN("x", "f32[6, 35]") "%y = Identity(%x)\noutput %y\n"},
	{.title = "Dropout (inference: identity, mask all true)", IN("x", "f32[6, 35]")
	 "%y, %mask = Dropout(%x) {ratio=0.3}\noutput %y, %mask\n"},
	{.title = "IsNaN of a Log of both signs", IN("x", "f32[6, 35]")
	 "%l = Log(%x)\n%y = IsNaN(%l)\noutput %y\n"},
	// The shard pass's guard of an amax before its max over ranks: each NaN +inf.
	{.title = "NanToInf of a Log of both signs", IN("x", "f32[6, 35]")
	 "%l = Log(%x)\n%y = NanToInf(%l)\noutput %y\n"},
	{.title = "NanToInf bf16 of a Log of both signs", IN("x", "bf16[6, 35]")
	 "%l = Log(%x)\n%y = NanToInf(%l)\noutput %y\n"},
	// Comparisons on small integers, so that ties are common; logic on random bools.
	{.title = "Equal",
	 IN("a", "f32[6, 35]") IN("b", "f32[35]") "%y = Equal(%a, %b)\noutput %y\n",
	 "a=int:1:3 b=int:1:3"},
	{.title = "Less",
	 IN("a", "f32[6, 35]") IN("b", "f32[6, 35]") "%y = Less(%a, %b)\noutput %y\n",
	 "a=int:1:3 b=int:1:3"},
	{.title = "Greater",
	 IN("a", "i64[6, 35]") IN("b", "i64[6, 1]") "%y = Greater(%a, %b)\noutput %y\n",
	 "a=int:-3:3 b=int:-3:3"},
	{.title = "LessOrEqual", IN("a", "f32[6, 35]") IN("b", "f32[6, 35]")
	 "%y = LessOrEqual(%a, %b)\noutput %y\n", "a=int:1:3 b=int:1:3"},
	{.title = "GreaterOrEqual", IN("a", "bf16[6, 35]") IN("b", "bf16[6, 35]")
	 "%y = GreaterOrEqual(%a, %b)\noutput %y\n", "a=int:1:3 b=int:1:3"},
	{.title = "Not", IN("a", "bool[6, 35]") "%y = Not(%a)\noutput %y\n"},
	{.title = "And",
	 IN("a", "bool[6, 35]") IN("b", "bool[35]") "%y = And(%a, %b)\noutput %y\n"},
	{.title = "Or",
	 IN("a", "bool[6, 35]") IN("b", "bool[6, 35]") "%y = Or(%a, %b)\noutput %y\n"},
	{.title = "Where", IN("c", "bool[6, 35]") IN("a", "f32[6, 35]") IN("b", "f32[35]")
	 "%y = Where(%c, %a, %b)\noutput %y\n"},
	{.title = "Where bf16", IN("c", "bool[4, 1]") IN("a", "bf16[4, 50]") IN("b", "bf16[4, 50]")
	 "%y = Where(%c, %a, %b)\noutput %y\n"},
	// Casts, over a range that saturates FP8 and underflows it.
	{.title = "Cast f32 -> bf16", IN("x", "f32[6, 35]") "%y = Cast(%x) {to=bf16}\noutput %y\n",
	 "x=uniform:-600:600"},
	{.title = "Cast bf16 -> f32", IN("x", "bf16[6, 35]") "%y = Cast(%x) {to=f32}\noutput %y\n"},
	{.title = "Cast i64 -> f32, beyond 2^24", IN("x", "i64[6, 35]")
	 "%y = Cast(%x) {to=f32}\noutput %y\n", "x=int:-100000000:100000000"},
	{.title = "Cast i32 -> f32, bool -> f32", IN("x", "i32[5, 21]") IN("b", "bool[5, 21]")
	 "%y = Cast(%x) {to=f32}\n%z = Cast(%b) {to=f32}\noutput %y, %z\n", "x=int:-5000:5000"},
	// To bf16 through f32, as the reference rounds (twice: 2^24 + 2^16 + 1 is 2^24 + 2^16 as
	// an f32, that 2^24 as a bf16, not the 2^24 + 2^17 of one rounding).
	{.title = "Cast i64 -> bf16, through f32", IN("x", "i64[2, 5]")
	 "%y = Cast(%x) {to=bf16}\noutput %y\n",
	 "x=list:16842753,-16842753,33685505,-33685503,16777217,2147483647,-3,0,255,"
	 "1099511627775"},
	{.title = "Cast f32 -> e4m3, e5m2 (saturating)", IN("x", "f32[6, 35]") IN("y", "f32[6, 35]")
	 "%a = Cast(%x) {to=e4m3}\n%b = Cast(%y) {to=e5m2}\noutput %a, %b\n",
	 "x=uniform:-600:600 y=uniform:-70000:70000"},
	{.title = "Cast bf16 -> e4m3 NaN, e5m2 inf (not saturating)", IN("x", "bf16[6, 35]")
	 IN("y", "bf16[6, 35]")
	 "%a = Cast(%x) {to=e4m3, saturate=0}\n%b = Cast(%y) {to=e5m2, saturate=0}\n"
	 "output %a, %b\n", "x=uniform:-600:600 y=uniform:-70000:70000"},
	{.title = "Cast f32 -> i32", IN("x", "f32[6, 35]") "%y = Cast(%x) {to=i32}\noutput %y\n",
	 "x=uniform:-300:300"},
	{.title = "CastLike f32 like bf16", IN("x", "f32[6, 35]") IN("t", "bf16[2]")
	 "%y = CastLike(%x, %t)\noutput %y\n"},
	// GEMMs: library nodes.
	{.title = "MatMul, broadcast batch", IN("a", "f32[3, 7, 20]") IN("b", "f32[20, 11]")
	 "%y = MatMul(%a, %b)\noutput %y\n"},
	{.title = "MatMul bf16", IN("a", "bf16[2, 9, 24]") IN("b", "bf16[2, 24, 13]")
	 "%y = MatMul(%a, %b)\noutput %y\n"},
	{.title = "Gemm alpha, beta, transB",
	 IN("a", "f32[9, 30]") IN("b", "f32[14, 30]") IN("c", "f32[14]")
	 "%y = Gemm(%a, %b, %c) {alpha=0.7, beta=-1.3, transB=1}\noutput %y\n"},
	// Element moves and shapes.
	{.title = "Gather axis 1, negative indices", IN("x", "f32[5, 9, 3]") IN("i", "i64[2, 4]")
	 "%y = Gather(%x, %i) {axis=1}\noutput %y\n", "i=int:-9:8"},
	{.title = "GatherND",
	 IN("x", "f32[5, 4, 6]") IN("i", "i64[7, 2]") "%y = GatherND(%x, %i)\noutput %y\n",
	 "i=int:0:3"},
	{.title = "Reshape",
	 IN("x", "f32[4, 9, 5]") "%y = Reshape(%x) {shape=[-1, 15]}\noutput %y\n"},
	{.title = "Transpose",
	 IN("x", "f32[3, 5, 7]") "%y = Transpose(%x) {perm=[2, 0, 1]}\noutput %y\n"},
	{.title = "Unsqueeze",
	 IN("x", "bf16[3, 5]") "%y = Unsqueeze(%x) {axes=[0, -1]}\noutput %y\n"},
	{.title = "Squeeze", IN("x", "f32[5, 1, 7]") "%y = Squeeze(%x) {axes=[1]}\noutput %y\n"},
	{.title = "Concat", IN("a", "f32[3, 4]") IN("b", "f32[3, 7]")
	 "%y = Concat(%a, %b, %a) {axis=1}\noutput %y\n"},
	{.title = "Split", IN("x", "f32[4, 10]")
	 "%a, %b, %c = Split(%x) {axis=1, split=[2, 5, 3]}\noutput %a, %b, %c\n"},
	{.title = "Slice with steps", IN("x", "f32[7, 9]")
	 "%y = Slice(%x) {starts=[1, 8], ends=[7, 0], axes=[0, 1], steps=[2, -3]}\noutput %y\n"},
	{.title = "Expand", IN("x", "f32[5, 1]") "%y = Expand(%x) {shape=[3, 5, 7]}\noutput %y\n"},
	// The same moves with other axes and dtypes, each a layout kernel (lower_layout.c).
	{.title = "Transpose heads (0, 2, 1, 3)", IN("x", "f32[2, 5, 3, 7]")
	 "%y = Transpose(%x) {perm=[0, 2, 1, 3]}\noutput %y\n"},
	{.title = "Transpose bf16 of the last two, reversed i64", IN("x", "bf16[3, 9, 70]")
	 IN("i", "i64[4, 3, 5]")
	 "%y = Transpose(%x) {perm=[0, 2, 1]}\n%j = Transpose(%i)\noutput %y, %j\n",
	 "i=int:-50:50"},
	{.title = "Concat on a middle axis, e4m3", IN("a", "f32[2, 3, 5]") IN("b", "f32[2, 4, 5]")
	 IN("q", "e4m3[3, 2, 4]") IN("r", "e4m3[3, 1, 4]")
	 "%y = Concat(%a, %b) {axis=1}\n%z = Concat(%q, %r, %q) {axis=-2}\noutput %y, %z\n",
	 "q=uniform:-400:400 r=uniform:-400:400"},
	{.title = "Concat on the last axis, bf16", IN("a", "bf16[3, 4, 6]") IN("b", "bf16[3, 4, 1]")
	 "%y = Concat(%a, %b) {axis=2}\noutput %y\n"},
	{.title = "Split on a middle axis, one part unread", IN("x", "f32[3, 9, 4]")
	 "%a, %b, %c = Split(%x) {axis=1, split=[4, 2, 3]}\n%d = Neg(%b)\noutput %a, %c, %d\n"},
	{.title = "Split on the last axis, i64", IN("x", "i64[5, 12]")
	 "%a, %b = Split(%x) {axis=-1, split=[7, 5]}\noutput %a, %b\n", "x=int:-9:9"},
	{.title = "Slice with start offsets", IN("x", "f32[6, 10, 5]")
	 "%y = Slice(%x) {starts=[2, -7], ends=[5, 9], axes=[1, 0]}\noutput %y\n"},
	{.title = "SliceGrad with a start offset", IN("dy", "f32[4, 3]")
	 "%dx = SliceGrad(%dy) {shape=[9, 3], starts=[3], ends=[7], axes=[0]}\noutput %dx\n"},
	{.title = "Expand bf16 of a middle axis", IN("x", "bf16[4, 1, 6]")
	 "%y = Expand(%x) {shape=[2, 4, 5, 6]}\noutput %y\n"},
	{.title = "Constant, read by a fused Mul", IN("x", "f32[5, 7]")
	 "%c = Constant() {value=f32[7](0.5, -1.25, 3, 7.5, -0.125, 2.75, -6)}\n"
	 "%y = Mul(%x, %c)\noutput %y, %c\n"},
	{.title = "ConstantOfShape, read by a fused Add", IN("x", "f32[5, 7]")
	 "%c = ConstantOfShape() {shape=[5, 7], value=f32[](1.5)}\n%y = Add(%x, %c)\n"
	 "output %y, %c\n"},
	{.title = "Shape", IN("x", "f32[5, 7, 3]") "%s = Shape(%x) {start=1}\noutput %s\n"},
	{.title = "Range, read by a fused Mul", IN("x", "f32[4, 19]")
	 "%r = Range() {start=3, limit=40, delta=2, dtype=f32}\n%y = Mul(%x, %r)\noutput %y, %r\n"},
	{.title = "Range i64 down, Cast to f32 in its kernel",
	 "%r = Range() {start=50, limit=-300, delta=-7}\n%f = Cast(%r) {to=f32}\n"
	 "output %r, %f\n"},
	{.title = "Range bf16 beyond 2^24", "%r = Range() {start=16842700, limit=16842800, "
	 "dtype=bf16}\n%i = Range() {start=-5, limit=9, dtype=i32}\noutput %r, %i\n"},
	// Llama's RoPE tables: positions to 8192 times the inverse frequencies, their cos and sin.
	{.title = "RoPE tables: Range, Cast, Unsqueeze, Mul, Cos, Sin", IN("f", "f32[1, 16]")
	 "%p = Range() {limit=8192}\n%pf = Cast(%p) {to=f32}\n"
	 "%col = Unsqueeze(%pf) {axes=[1]}\n%a = Mul(%col, %f)\n%c = Cos(%a)\n%s = Sin(%a)\n"
	 "output %c, %s\n", "f=uniform:0.0001:1"},
	{.title = "Trilu", IN("x", "f32[2, 6, 9]") "%y = Trilu(%x) {upper=0, k=1}\noutput %y\n"},
	{.title = "Softmax",
	 IN("x", "f32[6, 37]") "%y = Softmax(%x)\noutput %y\n", "x=uniform:-8:8"},
	{.title = "Softmax bf16 axis 0",
	 IN("x", "bf16[6, 37]") "%y = Softmax(%x) {axis=0}\noutput %y\n"},
	{.title = "LogSoftmax",
	 IN("x", "f32[6, 37]") "%y = LogSoftmax(%x)\noutput %y\n", "x=uniform:-8:8"},
	{.title = "ReduceMean",
	 IN("x", "f32[5, 6, 7]") "%y = ReduceMean(%x) {axes=[1], keepdims=1}\noutput %y\n"},
	{.title = "ReduceSum", IN("x", "f32[5, 6, 7]")
	 "%y = ReduceSum(%x) {axes=[0, 2], keepdims=0}\noutput %y\n"},
	{.title = "ReduceMax bf16", IN("x", "bf16[5, 6, 7]")
	 "%y = ReduceMax(%x) {axes=[-1], keepdims=0}\noutput %y\n"},
	// Each a reduce kernel (lower_reduce.c): terms in registers (16 or fewer), or a block loop.
	{.title = "ReduceSum over leading axes (a bias gradient)", IN("x", "f32[4, 33, 20]")
	 "%y = ReduceSum(%x) {axes=[0, 1], keepdims=0}\noutput %y\n"},
	{.title = "ReduceSum over the first axis, keepdims", IN("x", "f32[5, 8, 9]")
	 "%y = ReduceSum(%x) {axes=[0], keepdims=1}\noutput %y\n"},
	{.title = "ReduceSum over a middle axis, bf16", IN("x", "bf16[3, 40, 6]")
	 "%y = ReduceSum(%x) {axes=[1], keepdims=0}\noutput %y\n"},
	{.title = "ReduceSum over the trailing axes, and all", IN("x", "f32[7, 6, 45]")
	 "%y = ReduceSum(%x) {axes=[1, 2], keepdims=0}\n%z = ReduceSum(%x) {keepdims=0}\n"
	 "output %y, %z\n", "x=uniform:0.5:3"}, // one sign: a sum of 1890 that cannot cancel
	{.title = "ReduceMax over leading axes of a NaN, ReduceMean", IN("x", "f32[9, 4, 6]")
	 "%l = Log(%x)\n%y = ReduceMax(%l) {axes=[0, 1], keepdims=0}\n"
	 "%z = ReduceMean(%x) {axes=[0, 2], keepdims=1}\noutput %y, %z\n"},
	{.title = "CumSum", IN("x", "f32[5, 13]")
	 "%y = CumSum(%x) {axis=1}\n%z = CumSum(%x) {axis=0, exclusive=1, reverse=1}\n"
	 "output %y, %z\n"},
	{.title = "TopK, largest and smallest", IN("x", "f32[6, 17]")
	 "%v, %i = TopK(%x) {k=4}\n%s, %j = TopK(%x) {k=3, axis=0, largest=0}\n"
	 "output %v, %i, %s, %j\n"},
	{.title = "TopKGrad", IN("dy", "f32[6, 4]") IN("i", "i64[6, 4]")
	 "%dx = TopKGrad(%dy, %i) {axis=1, size=17}\noutput %dx\n", "i=int:0:16"},
	{.title = "QuantizeLinear to i8, per axis",
	 IN("x", "f32[6, 21]") IN("s", "f32[21]") IN("z", "i8[21]")
	 "%q = QuantizeLinear(%x, %s, %z) {to=i8, axis=1}\noutput %q\n",
	 "x=uniform:-50:50 s=uniform:0.1:1 z=int:-5:5"},
	{.title = "DequantizeLinear from i8, per axis", IN("q", "i8[6, 21]") IN("s", "f32[21]")
	 IN("z", "i8[21]") "%d = DequantizeLinear(%q, %s, %z) {axis=1}\noutput %d\n",
	 "q=int:-128:127 s=uniform:0.1:1 z=int:-5:5"},
	// High-level ops.
	{.title = "Linear with bias",
	 IN("x", "f32[3, 5, 40]") IN("w", "f32[24, 40]") IN("b", "f32[24]")
	 "%y = Linear(%x, %w, %b)\noutput %y\n"},
	{.title = "Linear bf16, transpose_weight", IN("x", "bf16[7, 36]") IN("w", "bf16[36, 20]")
	 "%y = Linear(%x, %w) {transpose_weight=1}\noutput %y\n"},
	{.title = "LayerNorm", IN("x", "f32[3, 7, 96]") IN("g", "f32[96]") IN("b", "f32[96]")
	 "%y, %mean, %rstd = LayerNorm(%x, %g, %b) {epsilon=1e-05}\noutput %y, %mean, %rstd\n",
	 "x=uniform:-3:5"},
	{.title = "LayerNorm bf16, no beta", IN("x", "bf16[21, 72]") IN("g", "bf16[72]")
	 "%y = LayerNorm(%x, %g) {epsilon=1e-05}\noutput %y\n"},
	{.title = "RMSNorm", IN("x", "f32[3, 7, 88]") IN("g", "f32[88]")
	 "%y, %rstd = RMSNorm(%x, %g) {epsilon=1e-06}\noutput %y, %rstd\n"},
	{.title = "RMSNorm bf16", IN("x", "bf16[21, 72]") IN("g", "bf16[72]")
	 "%y = RMSNorm(%x, %g) {epsilon=1e-06}\noutput %y\n"},
	{.title = "Attention causal, GQA", IN("q", "f32[2, 4, 7, 16]") IN("k", "f32[2, 2, 9, 16]")
	 IN("v", "f32[2, 2, 9, 12]")
	 "%o, %lse = Attention(%q, %k, %v) {causal=1}\noutput %o, %lse\n"},
	{.title = "Attention bf16, additive mask, scale", IN("q", "bf16[1, 3, 6, 20]")
	 IN("k", "bf16[1, 3, 11, 20]") IN("v", "bf16[1, 3, 11, 20]") IN("m", "bf16[6, 11]")
	 "%o = Attention(%q, %k, %v, %m) {scale=0.3}\noutput %o\n", "m=uniform:-2:0", NULL,
	 ATTENTION_BF16_TOLERANCE},
	// The packed layout (passes/attention_layout.h): q, k, v read in place from one qkv
	// (b, s, (h + 2 h_kv) d), out (b, s, h d). Head dims of 16 run on cuDNN; f32 and 20 are
	// the reference's alone (the GPU refuses them, saying why).
	{.title = "AttentionPacked bf16 causal, GQA", IN("qkv", "bf16[2, 40, 128]")
	 "%o, %lse = AttentionPacked(%qkv) {heads=4, kv_heads=2, causal=1}\noutput %o, %lse\n",
	 NULL, NULL, ATTENTION_BF16_TOLERANCE},
	{.title = "AttentionPacked f32, additive mask, scale", IN("qkv", "f32[2, 6, 60]")
	 IN("m", "f32[2, 1, 6, 6]")
	 "%o = AttentionPacked(%qkv, %m) {heads=1, scale=0.3}\noutput %o\n", "m=uniform:-2:0"},
	{.title = "Gelu erf",
	 IN("x", "f32[5, 7, 36]") "%y = Gelu(%x)\noutput %y\n", "x=uniform:-6:6"},
	{.title = "Gelu tanh bf16",
	 IN("x", "bf16[5, 77]") "%y = Gelu(%x) {approximate=\"tanh\"}\noutput %y\n",
	 "x=uniform:-6:6"},
	{.title = "SwiGLU packed",
	 IN("x", "f32[5, 7, 80]") "%y = SwiGLU(%x)\noutput %y\n", "x=uniform:-6:6"},
	{.title = "SwiGLU gate, up bf16", IN("g", "bf16[9, 44]") IN("u", "bf16[9, 44]")
	 "%y = SwiGLU(%g, %u)\noutput %y\n"},
	{.title = "Rope rotate-half, partial", IN("x", "f32[2, 3, 7, 20]") IN("c", "f32[7, 12]")
	 IN("s", "f32[7, 12]") "%y = Rope(%x, %c, %s)\noutput %y\n",
	 "c=uniform:-1:1 s=uniform:-1:1"},
	{.title = "Rope interleaved bf16", IN("x", "bf16[1, 2, 5, 12]") IN("c", "bf16[5, 12]")
	 IN("s", "bf16[5, 12]") "%y = Rope(%x, %c, %s) {interleaved=1}\noutput %y\n",
	 "c=uniform:-1:1 s=uniform:-1:1"},
	{.title = "Rope per-batch tables", IN("x", "f32[3, 2, 9, 16]") IN("c", "f32[3, 1, 9, 16]")
	 IN("s", "f32[3, 1, 9, 16]") "%y = Rope(%x, %c, %s)\noutput %y\n",
	 "c=uniform:-1:1 s=uniform:-1:1"},
	{.title = "Embedding", IN("ids", "i64[3, 7]") IN("w", "f32[50, 24]")
	 "%y = Embedding(%ids, %w)\noutput %y\n", "ids=int:0:49"},
	{.title = "Embedding bf16 table, i32 ids", IN("ids", "i32[13]") IN("w", "bf16[31, 40]")
	 "%y = Embedding(%ids, %w)\noutput %y\n", "ids=int:0:30"},
	{.title = "Embedding of a vocabulary shard (rows 25..49 of 60)", IN("ids", "i64[3, 7]")
	 IN("w", "f32[25, 24]") IN("s", "i64[1]")
	 "%y = Embedding(%ids, %w, %s) {vocab=60}\noutput %y\n", "ids=int:0:59 s=int:25:25"},
	{.title = "Embedding of a vocabulary shard, bf16 table, i32 ids (rows 0..19 of 40)",
	 IN("ids", "i32[17]") IN("w", "bf16[20, 32]") IN("s", "i64[1]")
	 "%y = Embedding(%ids, %w, %s) {vocab=40}\noutput %y\n", "ids=int:0:39 s=int:0:0"},
	{.title = "Router softmax top 2", IN("x", "f32[12, 6]")
	 "%p, %i = Router(%x) {top_k=2}\noutput %p, %i\n", "x=spaced"},
	{.title = "Router sigmoid top 3, normalized", IN("x", "f32[10, 7]")
	 "%p, %i = Router(%x) {top_k=3, score=\"sigmoid\", normalize=1}\noutput %p, %i\n",
	 "x=spaced"},
	{.title = "MoEDispatch", IN("x", "f32[12, 20]") IN("e", "i64[12, 2]")
	 "%d, %n = MoEDispatch(%x, %e) {experts=5}\noutput %d, %n\n", "e=topk:5"},
	{.title = "GroupedLinear",
	 IN("x", "f32[24, 20]") IN("w", "f32[5, 16, 20]") IN("n", "i64[5]")
	 "%y = GroupedLinear(%x, %w, %n)\noutput %y\n", "n=counts:24"},
	{.title = "MoECombine", IN("y", "f32[24, 16]") IN("p", "f32[12, 2]") IN("e", "i64[12, 2]")
	 "%z = MoECombine(%y, %p, %e)\noutput %z\n", "e=topk:5"},
	{.title = "CrossEntropy mean, ignored labels", IN("x", "f32[2, 7, 50]") IN("t", "i64[2, 7]")
	 "%l, %lse = CrossEntropy(%x, %t) {ignore_index=-100, reduction=\"mean\"}\n"
	 "output %l, %lse\n", "x=uniform:-10:10 t=labels:50:-100"},
	{.title = "CrossEntropy bf16, none", IN("x", "bf16[9, 75]") IN("t", "i64[9]")
	 "%l = CrossEntropy(%x, %t) {reduction=\"none\"}\noutput %l\n", "t=labels:75:-100"},
	{.title = "CrossEntropyShard (columns 50..99 of 120) and CrossEntropyMerge",
	 IN("x", "f32[2, 7, 50]") IN("t", "i64[2, 7]") IN("s", "i64[1]")
	 "%m = ReduceMax(%x) {axes=[-1], keepdims=0}\n"
	 "%e, %g = CrossEntropyShard(%x, %t, %m, %s) {vocab=120}\n"
	 "%l, %lse = CrossEntropyMerge(%e, %g, %m, %t)\noutput %e, %g, %l, %lse\n",
	 "x=uniform:-10:10 t=labels:120:-100 s=int:50:50"},
	{.title = "CrossEntropyShard bf16, CrossEntropyMerge none", IN("x", "bf16[9, 75]")
	 IN("t", "i64[9]") IN("s", "i64[1]") IN("m", "f32[9]")
	 "%e, %g = CrossEntropyShard(%x, %t, %m, %s) {vocab=75}\n"
	 "%l = CrossEntropyMerge(%e, %g, %m, %t) {reduction=\"none\"}\noutput %l\n",
	 "t=labels:75:-100 s=int:0:0 m=uniform:1:2"},
	// The vocabulary-parallel loss's ops alone (codegen/lower_cross_entropy_shard.c: a kernel
	// each), their statistics as their producers would leave them.
	{.title = "CrossEntropyShard alone, bf16 (columns 75..149 of 150)", IN("x", "bf16[9, 75]")
	 IN("t", "i64[9]") IN("m", "f32[9]") IN("s", "i64[1]")
	 "%e, %g = CrossEntropyShard(%x, %t, %m, %s) {vocab=150}\noutput %e, %g\n",
	 "x=uniform:-8:8 t=labels:150:-100 m=uniform:8:10 s=int:75:75"},
	{.title = "CrossEntropyMerge alone, sum", IN("e", "f32[3, 11]") IN("g", "f32[3, 11]")
	 IN("m", "f32[3, 11]") IN("t", "i64[3, 11]")
	 "%l, %lse = CrossEntropyMerge(%e, %g, %m, %t) {reduction=\"sum\"}\noutput %l, %lse\n",
	 "e=uniform:0.5:40 g=uniform:-6:6 m=uniform:2:8 t=labels:64:-100"},
	// Backward ops. One that reads what its forward saved (mean and rstd, o and lse, the
	// router's choice) follows that forward op, so that its inputs agree.
	{.title = "LinearWgrad", IN("dy", "f32[3, 5, 24]") IN("x", "f32[3, 5, 40]")
	 "%dw = LinearWgrad(%dy, %x)\noutput %dw\n"},
	{.title = "LinearWgrad bf16, transpose_weight",
	 IN("dy", "bf16[11, 24]") IN("x", "bf16[11, 36]")
	 "%dw = LinearWgrad(%dy, %x) {transpose_weight=1}\noutput %dw\n"},
	{.title = "LayerNormGrad", IN("x", "f32[3, 7, 96]") IN("g", "f32[96]") IN("b", "f32[96]")
	 IN("dy", "f32[3, 7, 96]")
	 "%y, %mean, %rstd = LayerNorm(%x, %g, %b) {epsilon=1e-05}\n"
	 "%dx, %dg, %db = LayerNormGrad(%dy, %x, %g, %mean, %rstd) {epsilon=1e-05}\n"
	 "output %dx, %dg, %db\n"},
	{.title = "RMSNormGrad bf16",
	 IN("x", "bf16[3, 7, 72]") IN("g", "bf16[72]") IN("dy", "bf16[3, 7, 72]")
	 "%y, %rstd = RMSNorm(%x, %g) {epsilon=1e-06}\n"
	 "%dx, %dg = RMSNormGrad(%dy, %x, %g, %rstd) {epsilon=1e-06}\noutput %dx, %dg\n"},
	{.title = "AttentionGrad causal, GQA", IN("q", "f32[2, 4, 5, 8]") IN("k", "f32[2, 2, 7, 8]")
	 IN("v", "f32[2, 2, 7, 6]") IN("do", "f32[2, 4, 5, 6]")
	 "%o, %lse = Attention(%q, %k, %v) {causal=1}\n"
	 "%dq, %dk, %dv = AttentionGrad(%do, %q, %k, %v, %o, %lse) {causal=1}\n"
	 "output %dq, %dk, %dv\n"},
	{.title = "AttentionPackedGrad bf16 causal, GQA", IN("qkv", "bf16[2, 40, 128]")
	 IN("do", "bf16[2, 40, 64]")
	 "%o, %lse = AttentionPacked(%qkv) {heads=4, kv_heads=2, causal=1}\n"
	 "%dqkv = AttentionPackedGrad(%do, %qkv, %o, %lse) {heads=4, kv_heads=2, causal=1}\n"
	 "output %dqkv\n", NULL, NULL, ATTENTION_BF16_GRAD_TOLERANCE},
	{.title = "AttentionPackedGrad f32, additive mask", IN("qkv", "f32[2, 5, 48]")
	 IN("m", "f32[5, 5]") IN("do", "f32[2, 5, 16]")
	 "%o, %lse = AttentionPacked(%qkv, %m) {heads=2}\n"
	 "%dqkv = AttentionPackedGrad(%do, %qkv, %o, %lse, %m) {heads=2}\n"
	 "output %dqkv\n", "m=uniform:-2:0"},
	// The copies around an attention as a model spells them, which the attention-layout pass
	// takes out: the forward's and the backward's, in one graph.
	{.title = "Attention between Split and Concat, packed",
	 IN("qkv", "bf16[2, 24, 128]") IN("dmerged", "bf16[2, 24, 64]")
	 "%q, %k, %v = Split(%qkv) {axis=2, split=[64, 32, 32]}\n"
	 "%q_bshd = Reshape(%q) {shape=[2, 24, 4, 16]}\n"
	 "%q_bhsd = Transpose(%q_bshd) {perm=[0, 2, 1, 3]}\n"
	 "%k_bshd = Reshape(%k) {shape=[2, 24, 2, 16]}\n"
	 "%k_bhsd = Transpose(%k_bshd) {perm=[0, 2, 1, 3]}\n"
	 "%v_bshd = Reshape(%v) {shape=[2, 24, 2, 16]}\n"
	 "%v_bhsd = Transpose(%v_bshd) {perm=[0, 2, 1, 3]}\n"
	 "%core, %lse = Attention(%q_bhsd, %k_bhsd, %v_bhsd) {causal=1}\n"
	 "%core_bshd = Transpose(%core) {perm=[0, 2, 1, 3]}\n"
	 "%merged = Reshape(%core_bshd) {shape=[2, 24, 64]}\n"
	 "%dcore_bshd = Reshape(%dmerged) {shape=[2, 24, 4, 16]}\n"
	 "%dcore = Transpose(%dcore_bshd) {perm=[0, 2, 1, 3]}\n"
	 "%dq, %dk, %dv = AttentionGrad(%dcore, %q_bhsd, %k_bhsd, %v_bhsd, %core, %lse) "
	 "{causal=1}\n"
	 "%dq_bshd = Transpose(%dq) {perm=[0, 2, 1, 3]}\n"
	 "%dq_merged = Reshape(%dq_bshd) {shape=[2, 24, 64]}\n"
	 "%dk_bshd = Transpose(%dk) {perm=[0, 2, 1, 3]}\n"
	 "%dk_merged = Reshape(%dk_bshd) {shape=[2, 24, 32]}\n"
	 "%dv_bshd = Transpose(%dv) {perm=[0, 2, 1, 3]}\n"
	 "%dv_merged = Reshape(%dv_bshd) {shape=[2, 24, 32]}\n"
	 "%dqkv = Concat(%dq_merged, %dk_merged, %dv_merged) {axis=2}\n"
	 "output %merged, %lse, %dqkv\n", NULL, NULL, ATTENTION_BF16_GRAD_TOLERANCE},
	{.title = "GeluGrad", IN("x", "f32[5, 7, 36]") IN("dy", "f32[5, 7, 36]")
	 "%dx = GeluGrad(%dy, %x)\noutput %dx\n", "x=uniform:-6:6"},
	{.title = "GeluGrad tanh bf16", IN("x", "bf16[5, 77]") IN("dy", "bf16[5, 77]")
	 "%dx = GeluGrad(%dy, %x) {approximate=\"tanh\"}\noutput %dx\n", "x=uniform:-6:6"},
	{.title = "SwiGLUGrad packed", IN("x", "f32[5, 7, 80]") IN("dy", "f32[5, 7, 40]")
	 "%dx = SwiGLUGrad(%dy, %x)\noutput %dx\n", "x=uniform:-6:6"},
	{.title = "SwiGLUGrad gate, up bf16", IN("g", "bf16[9, 44]") IN("u", "bf16[9, 44]")
	 IN("dy", "bf16[9, 44]") "%dg, %du = SwiGLUGrad(%dy, %g, %u)\noutput %dg, %du\n"},
	{.title = "RopeGrad rotate-half, partial",
	 IN("dy", "f32[2, 3, 7, 20]") IN("c", "f32[7, 12]")
	 IN("s", "f32[7, 12]") "%dx = RopeGrad(%dy, %c, %s)\noutput %dx\n",
	 "c=uniform:-1:1 s=uniform:-1:1"},
	{.title = "RopeGrad interleaved bf16, per-batch tables", IN("dy", "bf16[2, 3, 5, 12]")
	 IN("c", "bf16[2, 1, 5, 8]") IN("s", "bf16[2, 1, 5, 8]")
	 "%dx = RopeGrad(%dy, %c, %s) {interleaved=1}\noutput %dx\n",
	 "c=uniform:-1:1 s=uniform:-1:1"},
	{.title = "EmbeddingGrad", IN("dy", "f32[3, 7, 24]") IN("ids", "i64[3, 7]")
	 "%dw = EmbeddingGrad(%dy, %ids) {vocab=50}\noutput %dw\n", "ids=int:0:9"},
	{.title = "EmbeddingGrad bf16", IN("dy", "bf16[45, 24]") IN("ids", "i32[45]")
	 "%dw = EmbeddingGrad(%dy, %ids) {vocab=23}\noutput %dw\n", "ids=int:0:22"},
	{.title = "EmbeddingGrad of a vocabulary shard", IN("dy", "f32[3, 7, 24]")
	 IN("ids", "i64[3, 7]") IN("s", "i64[1]")
	 "%dw = EmbeddingGrad(%dy, %ids, %s) {vocab=5}\noutput %dw\n", "ids=int:0:14 s=int:5:5"},
	{.title = "EmbeddingGrad of a vocabulary shard, bf16", IN("dy", "bf16[40, 16]")
	 IN("ids", "i32[40]") IN("s", "i64[1]")
	 "%dw = EmbeddingGrad(%dy, %ids, %s) {vocab=8}\noutput %dw\n", "ids=int:0:23 s=int:16:16"},
	{.title = "GatherGrad axis 1", IN("dy", "f32[5, 2, 4, 3]") IN("i", "i64[2, 4]")
	 "%dx = GatherGrad(%dy, %i) {axis=1, size=9}\noutput %dx\n", "i=int:-9:8"},
	{.title = "SliceGrad with steps", IN("dy", "f32[3, 3]")
	 "%dx = SliceGrad(%dy) {shape=[7, 9], starts=[1, 8], ends=[7, 0], axes=[0, 1], "
	 "steps=[2, -3]}\noutput %dx\n"},
	{.title = "SoftmaxGrad", IN("x", "f32[6, 37]") IN("dy", "f32[6, 37]")
	 "%y = Softmax(%x)\n%dx = SoftmaxGrad(%dy, %y)\noutput %dx\n"},
	{.title = "LogSoftmaxGrad axis 0", IN("x", "f32[6, 37]") IN("dy", "f32[6, 37]")
	 "%y = LogSoftmax(%x) {axis=0}\n%dx = LogSoftmaxGrad(%dy, %y) {axis=0}\noutput %dx\n"},
	{.title = "CrossEntropyGrad mean",
	 IN("x", "f32[2, 7, 50]") IN("t", "i64[2, 7]") IN("dl", "f32[]")
	 "%l, %lse = CrossEntropy(%x, %t)\n%dx = CrossEntropyGrad(%dl, %x, %t, %lse)\noutput %dx\n",
	 "x=uniform:-10:10 t=labels:50:-100"},
	{.title = "CrossEntropyGrad bf16, none",
	 IN("x", "bf16[9, 75]") IN("t", "i64[9]") IN("dl", "f32[9]")
	 "%l, %lse = CrossEntropy(%x, %t) {reduction=\"none\"}\n"
	 "%dx = CrossEntropyGrad(%dl, %x, %t, %lse) {reduction=\"none\"}\noutput %dx\n",
	 "t=labels:75:-100"},
	{.title = "CrossEntropyMergeGrad and CrossEntropyShardGrad",
	 IN("x", "f32[2, 7, 50]") IN("t", "i64[2, 7]") IN("s", "i64[1]") IN("dl", "f32[]")
	 "%m = ReduceMax(%x) {axes=[-1], keepdims=0}\n"
	 "%e, %g = CrossEntropyShard(%x, %t, %m, %s) {vocab=120}\n"
	 "%de, %dg = CrossEntropyMergeGrad(%dl, %e, %t)\n"
	 "%dx = CrossEntropyShardGrad(%de, %dg, %x, %t, %m, %s) {vocab=120}\noutput %de, %dg, %dx\n",
	 "x=uniform:-10:10 t=labels:120:-100 s=int:50:50"},
	{.title = "CrossEntropyMergeGrad alone, mean", IN("dl", "f32[]") IN("e", "f32[2, 13]")
	 IN("t", "i64[2, 13]")
	 "%de, %dg = CrossEntropyMergeGrad(%dl, %e, %t)\noutput %de, %dg\n",
	 "e=uniform:0.5:40 t=labels:64:-100"},
	{.title = "CrossEntropyShardGrad alone, bf16 (columns 0..74 of 150)",
	 IN("de", "f32[9]") IN("dg", "f32[9]") IN("x", "bf16[9, 75]") IN("t", "i64[9]")
	 IN("m", "f32[9]") IN("s", "i64[1]")
	 "%dx = CrossEntropyShardGrad(%de, %dg, %x, %t, %m, %s) {vocab=150}\noutput %dx\n",
	 "x=uniform:-8:8 t=labels:150:-100 m=uniform:8:10 s=int:0:0"},
	{.title = "RouterGrad", IN("x", "f32[12, 6]") IN("dp", "f32[12, 2]")
	 "%p, %i = Router(%x) {top_k=2, normalize=1}\n"
	 "%dx = RouterGrad(%dp, %x, %p, %i) {top_k=2, normalize=1}\noutput %dx\n", "x=spaced"},
	{.title = "MoEDispatchGrad", IN("ds", "f32[24, 20]") IN("e", "i64[12, 2]")
	 "%dx = MoEDispatchGrad(%ds, %e) {experts=5}\noutput %dx\n", "e=topk:5"},
	{.title = "GroupedLinearWgrad",
	 IN("dy", "f32[24, 16]") IN("x", "f32[24, 20]") IN("n", "i64[5]")
	 "%dw = GroupedLinearWgrad(%dy, %x, %n)\noutput %dw\n", "n=counts:24"},
	{.title = "MoECombineGrad",
	 IN("dz", "f32[12, 16]") IN("y", "f32[24, 16]") IN("p", "f32[12, 2]")
	 IN("e", "i64[12, 2]") "%dy, %dp = MoECombineGrad(%dz, %y, %p, %e)\noutput %dy, %dp\n",
	 "e=topk:5"},
	// Optimizer ops.
	{.title = "GlobalNorm f32, bf16",
	 IN("a", "f32[3, 40]") IN("b", "bf16[37]") IN("c", "f32[5]")
	 "%n = GlobalNorm(%a, %b, %c)\noutput %n\n"},
	{.title = "LearningRate cosine", IN("it", "i64[]")
	 "%lr = LearningRate(%it) {lr=0.001, min_lr=0.0001, warmup=5, decay_iters=40, "
	 "style=\"cosine\"}\noutput %lr\n", "it=int:1:50"},
	{.title = "GlobalNorm of 6 tensors of odd sizes, chunks of several",
	 IN("a", "f32[4099]") IN("b", "f32[3, 1371]") IN("c", "bf16[8193]") IN("d", "f32[1]")
	 IN("e", "f32[17, 5]") IN("f", "bf16[2, 3]")
	 "%n = GlobalNorm(%a, %b, %c, %d, %e, %f)\noutput %n\n"},
	// The schedule in warm-up (3, and its last 5), decaying (6, 20, 40) and after it (41, 90).
#define LR_LINEAR "{lr=0.003, min_lr=0.0003, warmup=5, decay_iters=40, style=\"linear\"}\n"
#define LR_COSINE "{lr=0.003, min_lr=0.0003, warmup=5, decay_iters=40, style=\"cosine\"}\n"
	{.title = "LearningRate constant, warm-up and after",
	 IN("i1", "i64[]") IN("i2", "i64[]") IN("i3", "i64[]") IN("i4", "i64[]")
	 "%a = LearningRate(%i1) {lr=0.003, warmup=5, decay_iters=40, style=\"constant\"}\n"
	 "%b = LearningRate(%i2) {lr=0.003, warmup=5, decay_iters=40, style=\"constant\"}\n"
	 "%c = LearningRate(%i3) {lr=0.003, warmup=5, decay_iters=40, style=\"constant\"}\n"
	 "%d = LearningRate(%i4) {lr=0.003, style=\"constant\"}\noutput %a, %b, %c, %d\n",
	 "i1=list:3 i2=list:5 i3=list:20 i4=list:7"},
	{.title = "LearningRate linear, warm-up, decay and after",
	 IN("i1", "i64[]") IN("i2", "i64[]") IN("i3", "i64[]") IN("i4", "i64[]") IN("i5", "i64[]")
	 "%a = LearningRate(%i1) " LR_LINEAR
	 "%b = LearningRate(%i2) " LR_LINEAR
	 "%c = LearningRate(%i3) " LR_LINEAR
	 "%d = LearningRate(%i4) " LR_LINEAR
	 "%e = LearningRate(%i5) " LR_LINEAR
	 "output %a, %b, %c, %d, %e\n", "i1=list:3 i2=list:6 i3=list:20 i4=list:40 i5=list:41"},
	{.title = "LearningRate cosine, warm-up, decay and after",
	 IN("i1", "i64[]") IN("i2", "i64[]") IN("i3", "i64[]") IN("i4", "i64[]") IN("i5", "i64[]")
	 "%a = LearningRate(%i1) " LR_COSINE
	 "%b = LearningRate(%i2) " LR_COSINE
	 "%c = LearningRate(%i3) " LR_COSINE
	 "%d = LearningRate(%i4) {lr=0.003, warmup=5, decay_iters=40, style=\"cosine\"}\n"
	 "%e = LearningRate(%i5) " LR_COSINE
	 "output %a, %b, %c, %d, %e\n", "i1=list:2 i2=list:6 i3=list:23 i4=list:39 i5=list:90"},
	{.title = "LearningRate at iteration 0: refused", IN("it", "i64[]")
	 "%lr = LearningRate(%it) {lr=0.003, warmup=5}\noutput %lr\n", "it=list:0",
	 "iterations count from 1"},
	// The optimizer's scalars: clipping's arithmetic and the iteration's increment, as kernels.
	{.title = "Scalar arithmetic: clipping, an i64 increment", IN("n", "f32[]") IN("it", "i64[]")
	 "%e = Constant() {value=f32[](1e-06)}\n%d = Add(%n, %e)\n"
	 "%m = Constant() {value=f32[](1)}\n%r = Div(%m, %d)\n%s = Min(%m, %r)\n"
	 "%one = Constant() {value=i64[](1)}\n%next = Add(%it, %one)\noutput %s, %next\n",
	 "n=uniform:0.1:3 it=int:0:1000"},
	{.title = "AdamW, clipped",
	 "param %p : f32[17, 30]\nstate %g : f32[17, 30]\nstate %m : f32[17, 30]\n"
	 "state %v : f32[17, 30]\n" IN("lr", "f32[]") IN("t", "i64[]") IN("clip", "f32[]")
	 "%p2, %m2, %v2 = AdamW(%p, %g, %m, %v, %lr, %t, %clip) {weight_decay=0.1}\n"
	 "output %p2, %m2, %v2\n",
	 "v=uniform:0.0001:0.5 lr=uniform:0.0001:0.001 t=int:1:5000 clip=uniform:0.05:1"},
	// A step that met a NaN or an inf is skipped (f8_infer_adamw): param, m and v go through.
#define ADAMW_SKIP_GRAPH(shape, attrs)                                                        \
	"param %p : f32" shape "\nstate %g : f32" shape "\nstate %m : f32" shape "\n"             \
	"state %v : f32" shape "\n" IN("lr", "f32[]") IN("t", "i64[]") IN("clip", "f32[]")        \
	IN("norm", "f32[]") IN("found", "f32[]")                                                 \
	"%p2, %m2, %v2 = AdamW(%p, %g, %m, %v, %lr, %t, %clip, %norm, %found)" attrs "\n"        \
	"output %p2, %m2, %v2\n"
#define ADAMW_SKIP_FILL "v=uniform:0.0001:0.5 lr=uniform:0.0001:0.001 t=int:1:5000 " \
			"clip=uniform:0.05:1 "
	{.title = "AdamW skipped: the gradient norm is inf",
	 ADAMW_SKIP_GRAPH("[17, 30]", " {weight_decay=0.1}"), ADAMW_SKIP_FILL "norm=list:inf found=list:0"},
	{.title = "AdamW skipped: the gradient norm is NaN",
	 ADAMW_SKIP_GRAPH("[300]", ""), ADAMW_SKIP_FILL "norm=list:nan found=list:0"},
	{.title = "AdamW skipped: found_inf",
	 ADAMW_SKIP_GRAPH("[17, 30]", " {weight_decay=0.1}"),
	 ADAMW_SKIP_FILL "norm=uniform:0.1:3 found=list:1"},
	{.title = "AdamW taken: a finite gradient norm, found_inf 0",
	 ADAMW_SKIP_GRAPH("[17, 30]", " {weight_decay=0.1}"),
	 ADAMW_SKIP_FILL "norm=uniform:0.1:3 found=list:0"},
#undef ADAMW_SKIP_GRAPH
#undef ADAMW_SKIP_FILL
	{.title = "AdamW bf16 parameter",
	 "param %p : bf16[77]\nstate %g : bf16[77]\nstate %m : f32[77]\n"
	 "state %v : f32[77]\n" IN("lr", "f32[]") IN("t", "i64[]")
	 "%p2, %m2, %v2 = AdamW(%p, %g, %m, %v, %lr, %t) {beta1=0.8, beta2=0.95, epsilon=1e-06}\n"
	 "output %p2, %m2, %v2\n", "v=uniform:0.0001:0.5 lr=uniform:0.0001:0.001 t=int:1:5000"},
	// FP8 ops: casts with a given scale (delayed) fuse; those that find their scales run alone.
	{.title = "Quantize e4m3, given scale", IN("x", "f32[6, 40]") "scale %s : f32[]\n"
	 "%q, %si, %amax = Quantize(%x, %s) {to=e4m3}\noutput %q, %si, %amax\n",
	 "x=uniform:-100:100 s=uniform:0.5:8"},
	{.title = "Quantize e5m2 bf16, slot of a table",
	 IN("x", "bf16[6, 40]") "scale %t : f32[3]\n"
	 "%q, %si, %amax = Quantize(%x, %t) {to=e5m2, slot=2}\noutput %q, %si, %amax\n",
	 "x=uniform:-3000:3000"},
	{.title = "Quantize e4m3, current scaling, margin 1", IN("x", "f32[9, 30]")
	 "%q, %si, %amax = Quantize(%x) {to=e4m3, margin=1}\noutput %q, %si, %amax\n"},
	{.title = "Quantize e4m3, MX 1x32", IN("x", "f32[5, 80]")
	 "%q, %si = Quantize(%x) {to=e4m3, block=[1, 32], scale_dtype=e8m0}\noutput %q, %si\n",
	 "x=uniform:-50:50"},
	{.title = "Dequantize e4m3 -> f32", IN("q", "e4m3[6, 40]") IN("si", "f32[]")
	 "%y = Dequantize(%q, %si) {to=f32}\noutput %y\n", "q=uniform:-400:400 si=uniform:0.01:2"},
	{.title = "Dequantize e5m2 -> bf16, 1x32 blocks",
	 IN("q", "e5m2[5, 70]") IN("si", "f32[5, 3]")
	 "%y = Dequantize(%q, %si) {to=bf16, block=[1, 32]}\noutput %y\n",
	 "q=uniform:-3000:3000 si=uniform:0.01:2"},
	{.title = "Amax", IN("x", "f32[7, 45]") "%a = Amax(%x)\noutput %a\n", "x=uniform:-300:300"},
	// Amax alone is a generated kernel (codegen/lower_amax.c: current scaling's amax under
	// sequence parallelism); f8_amax's NaN, infinity, zeros and empty tensor.
	{.title = "Amax of 20005 elements (chunks of 4096)", IN("x", "f32[5, 4001]")
	 "%a = Amax(%x)\noutput %a\n", "x=uniform:-300:300"},
	{.title = "Amax bf16, a NaN among them", IN("x", "bf16[3, 50]")
	 "%a = Amax(%x)\noutput %a\n", "x=list:1,-700,3,nan,2"},
	{.title = "Amax, an infinity among them", IN("x", "f32[70]")
	 "%a = Amax(%x)\noutput %a\n", "x=list:1,-inf,3,2"},
	{.title = "Amax of zeros", IN("x", "f32[4, 9]") "%a = Amax(%x)\noutput %a\n",
	 "x=list:0,-0"},
	{.title = "Amax of an empty tensor", IN("x", "f32[0, 5]") "%a = Amax(%x)\noutput %a\n"},
	{.title = "CastTranspose e4m3, slot of a table",
	 IN("x", "f32[3, 11, 40]") "scale %t : f32[4]\n"
	 "%c, %ct, %si, %sit, %amax = CastTranspose(%x, %t) {to=e4m3, slot=3}\n"
	 "output %c, %ct, %si, %sit, %amax\n", "x=uniform:-100:100"},
	{.title = "CastTranspose e5m2 bf16, current scaling", IN("x", "bf16[21, 48]")
	 "%c, %ct, %si, %sit, %amax = CastTranspose(%x) {to=e5m2}\n"
	 "output %c, %ct, %si, %sit, %amax\n"},
	{.title = "CastTranspose e4m3, rowwise", IN("x", "f32[13, 36]")
	 "%c, %ct, %si, %sit, %amax = CastTranspose(%x) {to=e4m3, block=[1, 0]}\n"
	 "output %c, %ct, %si, %sit, %amax\n"},
	{.title = "CastTranspose e4m3, 128x128 blocks", IN("x", "f32[136, 200]")
	 "%c, %ct, %si, %sit, %amax = CastTranspose(%x) {to=e4m3, block=[128, 128]}\n"
	 "output %c, %ct, %si, %sit, %amax\n"},
	// Casts fused after the op that computes their input: codes rounded from f32 values.
	{.title = "LayerNorm + CastTranspose e4m3, one norm kernel",
	 IN("x", "f32[3, 11, 72]") IN("g", "f32[72]") IN("b", "f32[72]") "scale %t : f32[2]\n"
	 "%n, %mean, %rstd = LayerNorm(%x, %g, %b) {epsilon=1e-05}\n"
	 "%c, %ct, %si, %sit, %amax = CastTranspose(%n, %t) {to=e4m3, slot=1}\n"
	 "output %n, %c, %ct, %si, %sit, %amax\n", "t=uniform:20:120"},
	{.title = "GeluGrad + CastTranspose e5m2 + dbias, one kernel",
	 IN("dy", "f32[3, 7, 56]") IN("h", "f32[3, 7, 56]") "scale %t : f32[2]\n"
	 "%dh = GeluGrad(%dy, %h)\n"
	 "%c, %ct, %si, %sit, %amax = CastTranspose(%dh, %t) {to=e5m2, slot=0}\n"
	 "%db = ReduceSum(%dh) {axes=[0, 1], keepdims=0}\n"
	 "output %c, %ct, %si, %sit, %amax, %db\n", "h=uniform:-4:4 t=uniform:100:9000"},
	// The shard pass's NanToInf of an amax before its max over ranks, in the kernel that
	// computes the amax: a NaN among the cast's input (Log of a negative) makes it +inf.
	{.title = "CastTranspose e4m3 + NanToInf of its amax, one kernel, a NaN among them",
	 IN("x", "f32[3, 11, 40]") "scale %t : f32[4]\n"
	 "%c, %ct, %si, %sit, %amax = CastTranspose(%x, %t) {to=e4m3, slot=3}\n"
	 "%inf = NanToInf(%amax)\noutput %c, %ct, %si, %sit, %inf\n", "x=list:1,-700,3,nan,2"},
	{.title = "Log + Quantize e5m2 bf16 + NanToInf of its amax, one kernel",
	 IN("x", "bf16[6, 40]") "scale %t : f32[2]\n"
	 "%l = Log(%x)\n%q, %si, %amax = Quantize(%l, %t) {to=e5m2, slot=1}\n"
	 "%inf = NanToInf(%amax)\noutput %q, %si, %inf\n", "x=uniform:-3:3"},
	{.title = "Amax + NanToInf, one kernel, a NaN among them", IN("x", "bf16[3, 50]")
	 "%a = Amax(%x)\n%inf = NanToInf(%a)\noutput %inf\n", "x=list:1,-700,3,nan,2"},
	{.title = "ScalingUpdate e4m3 max, margin 1, a non-finite amax", "scale %s : f32[4]\n"
	 "amax_history %h : f32[16, 4]\nstate %n : i64[]\n" IN("a0", "f32[]") IN("a1", "f32[]")
	 IN("a2", "f32[]") IN("a3", "f32[]")
	 "%s2, %h2, %n2 = ScalingUpdate(%s, %h, %n, %a0, %a1, %a2, %a3) {format=e4m3, "
	 "algo=\"max\", margin=1}\noutput %s2, %h2, %n2\n",
	 "n=int:0:3 a0=uniform:0.01:600 a1=uniform:0.01:600 a2=list:inf a3=uniform:0.01:600"},
	{.title = "FP8GroupedGemm fwd and wgrad, e4m3 x e4m3, per-expert scales",
	 IN("x", "f32[32, 48]") IN("dy", "f32[32, 16]") IN("w", "f32[5, 16, 48]") IN("n", "i64[5]")
	 "%a, %at, %sa, %sat, %aa = CastTranspose(%x, %n) {to=e4m3, grouped=1}\n"
	 "%g, %gt, %sg, %sgt, %ga = CastTranspose(%dy, %n) {to=e4m3, grouped=1}\n"
	 "%b, %sb = Quantize(%w) {to=e4m3, grouped=1}\n"
	 "%y = FP8GroupedGemm(%a, %b, %sa, %sb, %n) {to=f32, gemm=\"fwd\"}\n"
	 "%dw = FP8GroupedGemm(%gt, %at, %sgt, %sat, %n) {to=f32, gemm=\"wgrad\"}\n"
	 "output %y, %dw, %aa\n", "n=counts:32", NULL, FP8_GEMM_TOLERANCE},
	{.title = "ScalingUpdate e4m3 max, a grouped cast's f32[3] amax as three slots",
	 "scale %s : f32[5]\namax_history %h : f32[8, 5]\nstate %n : i64[]\n" IN("a0", "f32[]")
	 IN("ag", "f32[3]") IN("a4", "f32[]")
	 "%s2, %h2, %n2 = ScalingUpdate(%s, %h, %n, %a0, %ag, %a4) {format=e4m3, "
	 "algo=\"max\"}\noutput %s2, %h2, %n2\n",
	 "n=int:0:3 a0=uniform:0.01:600 ag=uniform:0.01:600 a4=uniform:0.01:600"},
	{.title = "ScaleFromAmax e4m3, margin 1", IN("a", "f32[7]")
	 "%s = ScaleFromAmax(%a) {format=e4m3, margin=1}\noutput %s\n", "a=uniform:0:600"},
	{.title = "ScaleFromAmax e4m3 of a scalar (the shard pass's)", IN("a", "f32[]")
	 "%s = ScaleFromAmax(%a) {format=e4m3}\noutput %s\n", "a=uniform:0:600"},
	{.title = "ScaleFromAmax e5m2: NaN, inf, 0, < 0, subnormal, max",
	 IN("a", "f32[10]") "%s = ScaleFromAmax(%a) {format=e5m2, margin=2}\noutput %s\n",
	 "a=list:nan,inf,-inf,0,-3,1e-45,1e-40,3.4e38,57344,0.5"},
	{.title = "ScalingUpdate e5m2 most_recent",
	 "scale %s : f32[3]\namax_history %h : f32[5, 3]\n"
	 "state %n : i64[]\n" IN("a0", "f32[]") IN("a1", "f32[]") IN("a2", "f32[]")
	 "%s2, %h2, %n2 = ScalingUpdate(%s, %h, %n, %a0, %a1, %a2) {format=e5m2, "
	 "algo=\"most_recent\"}\noutput %s2, %h2, %n2\n",
	 "n=int:0:3 a0=uniform:0.01:600 a1=uniform:0.01:600 a2=uniform:0.01:600"},
	{.title = "FP8Gemm e4m3 x e4m3, bias", IN("a", "e4m3[3, 7, 96]") IN("b", "e4m3[20, 96]")
	 IN("sa", "f32[]") IN("sb", "f32[]") IN("bias", "f32[20]")
	 "%y = FP8Gemm(%a, %b, %sa, %sb, %bias) {to=f32, gemm=\"fwd\"}\noutput %y\n",
	 "a=uniform:-400:400 b=uniform:-400:400 sa=uniform:0.001:0.1 sb=uniform:0.001:0.1",
	 NULL, FP8_GEMM_TOLERANCE},
	{.title = "FP8Gemm e5m2 x e4m3 -> bf16, rowwise",
	 IN("a", "e5m2[13, 200]") IN("b", "e4m3[24, 200]")
	 IN("sa", "f32[13, 1]") IN("sb", "f32[24, 1]")
	 "%y = FP8Gemm(%a, %b, %sa, %sb) {to=bf16, gemm=\"dgrad\", a_block=[1, 0], "
	 "b_block=[1, 0]}\noutput %y\n",
	 "a=uniform:-3000:3000 b=uniform:-400:400 sa=uniform:0.0001:0.01 sb=uniform:0.001:0.1",
	 NULL, FP8_GEMM_TOLERANCE},
	// Collectives: in one process a group has one rank; what needs a second one is refused.
	{.title = "AllReduce",
	 IN("x", "f32[6, 35]") "%y = AllReduce(%x) {group=\"tp\", op=\"sum\"}\n"
	 "output %y\n"},
	{.title = "AllGather, one rank", IN("x", "bf16[6, 35]")
	 "%y = AllGather(%x) {group=\"tp\", axis=1, ranks=1}\noutput %y\n"},
	{.title = "ReduceScatter, one rank", IN("x", "f32[6, 35]")
	 "%y = ReduceScatter(%x) {group=\"dp\", axis=0, ranks=1}\noutput %y\n"},
	{.title = "ReduceScatter and AllGather packed (the optimizer's buckets), one rank",
	 IN("x", "f32[6, 35]") IN("y", "f32[4]")
	 "%a, %b = ReduceScatter(%x, %y) {group=\"dp\", axis=0, ranks=1}\n"
	 "%c, %d = AllGather(%a, %b) {group=\"dp\", axis=0, ranks=1}\noutput %c, %d\n"},
	{.title = "LocalShard, one rank", IN("x", "f32[6, 35]")
	 "%y = LocalShard(%x) {group=\"dp\", axis=0, ranks=1}\noutput %y\n"},
	{.title = "LocalShard over 2 ranks in one process: refused", IN("x", "f32[6, 35]")
	 "%y = LocalShard(%x) {group=\"dp\", axis=0, ranks=2}\noutput %y\n", NULL,
	 "needs more than one rank"},
	{.title = "AllGather over 2 ranks: refused", IN("x", "f32[6, 35]")
	 "%y = AllGather(%x) {group=\"tp\", axis=1, ranks=2}\noutput %y\n", NULL,
	 "needs more than one rank"},
	{.title = "RingAttention, one rank: causal, GQA", IN("q", "f32[2, 4, 6, 8]")
	 IN("k", "f32[2, 2, 6, 8]") IN("v", "f32[2, 2, 6, 8]")
	 "%o, %lse = RingAttention(%q, %k, %v) {group=\"cp\", ranks=1, causal=1}\n"
	 "output %o, %lse\n"},
	{.title = "RingAttentionGrad, one rank", IN("q", "f32[2, 4, 6, 8]")
	 IN("k", "f32[2, 2, 6, 8]") IN("v", "f32[2, 2, 6, 8]") IN("do", "f32[2, 4, 6, 8]")
	 "%o, %lse = RingAttention(%q, %k, %v) {group=\"cp\", ranks=1, causal=1}\n"
	 "%dq, %dk, %dv = RingAttentionGrad(%do, %q, %k, %v, %o, %lse) {group=\"cp\", ranks=1, "
	 "causal=1}\noutput %dq, %dk, %dv\n"},
	// The GPU runs a ring's two causal calls and sums their dK and dV on one rank as on several
	// (runtime/cuda/ring_attention.h); 40 rows: the chunks' 20 is no multiple of cuDNN's tiles.
	{.title = "RingAttention bf16, one rank: causal, GQA", IN("q", "bf16[2, 4, 40, 16]")
	 IN("k", "bf16[2, 2, 40, 16]") IN("v", "bf16[2, 2, 40, 16]")
	 "%o, %lse = RingAttention(%q, %k, %v) {group=\"cp\", ranks=1, causal=1}\n"
	 "output %o, %lse\n", NULL, NULL, ATTENTION_BF16_TOLERANCE},
	{.title = "RingAttentionGrad bf16, one rank: causal, GQA", IN("q", "bf16[2, 4, 40, 16]")
	 IN("k", "bf16[2, 2, 40, 16]") IN("v", "bf16[2, 2, 40, 16]") IN("do", "bf16[2, 4, 40, 16]")
	 "%o, %lse = RingAttention(%q, %k, %v) {group=\"cp\", ranks=1, causal=1}\n"
	 "%dq, %dk, %dv = RingAttentionGrad(%do, %q, %k, %v, %o, %lse) {group=\"cp\", ranks=1, "
	 "causal=1}\noutput %dq, %dk, %dv\n", NULL, NULL, ATTENTION_BF16_GRAD_TOLERANCE},
	{.title = "RingAttentionGrad bf16, one rank, not causal", IN("q", "bf16[1, 2, 24, 32]")
	 IN("k", "bf16[1, 2, 24, 32]") IN("v", "bf16[1, 2, 24, 32]") IN("do", "bf16[1, 2, 24, 32]")
	 "%o, %lse = RingAttention(%q, %k, %v) {group=\"cp\", ranks=1}\n"
	 "%dq, %dk, %dv = RingAttentionGrad(%do, %q, %k, %v, %o, %lse) {group=\"cp\", ranks=1}\n"
	 "output %o, %dq, %dk, %dv\n", NULL, NULL, ATTENTION_BF16_GRAD_TOLERANCE},
	{.title = "RingAttention over 2 ranks in one process: refused", IN("q", "f32[1, 2, 4, 8]")
	 IN("k", "f32[1, 2, 4, 8]") IN("v", "f32[1, 2, 4, 8]")
	 "%o, %lse = RingAttention(%q, %k, %v) {group=\"cp\", ranks=2, causal=1}\noutput %o\n",
	 NULL, "needs more than one rank"},
	{.title = "AllToAllDispatch and AllToAllCombine, one rank", IN("x", "bf16[12, 35]")
	 IN("n", "i64[4]")
	 "%y, %l, %r = AllToAllDispatch(%x, %n) {group=\"ep\", ranks=1}\n"
	 "%z = AllToAllCombine(%y, %n, %r) {group=\"ep\", ranks=1}\noutput %y, %l, %r, %z\n",
	 "n=counts:12"},
	{.title = "AllToAll both ways, one rank: f32, 6 experts' i32 counts < rows",
	 IN("x", "f32[20, 24]") IN("n", "i32[6]")
	 "%y, %l, %r = AllToAllDispatch(%x, %n) {group=\"ep\", ranks=1}\n"
	 "%z = AllToAllCombine(%y, %n, %r) {group=\"ep\", ranks=1}\noutput %y, %l, %r, %z\n",
	 "n=counts:13"},
	{.title = "AllToAllDispatch, the rows received given, one rank",
	 IN("x", "f32[20, 24]") IN("n", "i64[6]")
	 "%y, %l, %r = AllToAllDispatch(%x, %n) {group=\"ep\", ranks=1}\n"
	 "%y2, %l2, %r2 = AllToAllDispatch(%x, %n, %r) {group=\"ep\", ranks=1}\n"
	 "output %y2, %l2, %r2\n", "n=counts:13"},
	{.title = "AllToAllDispatch, rows received from itself not its counts: refused",
	 IN("x", "f32[9, 5]") IN("n", "i64[2]") IN("g", "i64[1, 2]")
	 "%y, %l, %r = AllToAllDispatch(%x, %n, %g) {group=\"ep\", ranks=1}\noutput %y\n",
	 "n=counts:7 g=counts:8", "not its counts'"},
	{.title = "AllToAllDispatch over 2 ranks in one process: refused", IN("x", "f32[6, 35]")
	 IN("n", "i64[4]")
	 "%y, %l, %r = AllToAllDispatch(%x, %n) {group=\"ep\", ranks=2}\noutput %y\n",
	 "n=counts:6", "needs them; this group has 1"},
	{.title = "Send: refused", IN("x", "f32[6, 35]")
	 "Send(%x) {group=\"pp\", peer=1}\n%y = Neg(%x)\noutput %y\n", NULL,
	 "needs more than one rank"},
	{.title = "Recv: refused", "%y = Recv() {group=\"pp\", peer=0, dtype=bf16, shape=[6, 35]}\n"
	 "output %y\n", NULL, "needs more than one rank"},
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

/* Every op of ir/ops.def, for the coverage check. */
static const f8_op all_ops[] = {
#define X(e, ...) F8_OP_##e,
#include "ir/ops.def"
#undef X
};
static_assert(sizeof all_ops / sizeof all_ops[0] == F8_OP_COUNT, "every op once");

/* The fill of a leaf the case does not name: scales and amax histories positive, as scaling
 * tables hold; bools either way; floats spread over both signs (no zeros but by chance). */
static const char *default_fill(const f8_value *leaf) {
	if (leaf->role == F8_ROLE_SCALE || leaf->role == F8_ROLE_AMAX_HISTORY)
		return "uniform:0.25:8";
	if (leaf->type.dtype == F8_DTYPE_BOOL)
		return "bool";
	return f8_dtype_is_float(leaf->type.dtype) ? "uniform:-3:3" : "";
}

/* Parses case `c` and compiles it for inference through the whole pipeline (fuse with the
 * codegen target table, schedule); the graph, or NULL with the failure in `diag`. */
static f8_graph *compile_case(const op_case *c, f8_diag *diag) {
	char text[4096];
	int n = snprintf(text, sizeof text, "graph case {\n%s}\n", c->text);
	if (n < 0 || (size_t)n >= sizeof text) {
		f8_diag_set(diag, F8_ERR_ARGUMENT, "the case's text is longer than %zu bytes",
			    sizeof text);
		return NULL;
	}
	f8_pipeline_options options = {.target = f8_codegen_target_table_for(NULL)};
	f8_graph *graph = NULL;
	f8_status status = f8_text_parse(text, (size_t)n, c->title, &graph, diag);
	if (!status)
		status = f8_pipeline_run_with(graph, NULL, true, &options, NULL, diag);
	if (status) {
		f8_graph_destroy(graph);
		return NULL;
	}
	return graph;
}

/* The leaves' contents (graph->inputs order), made and filled once for every backend. */
static bool make_leaves(const f8_graph *graph, const op_case *c, f8_rt_tensor *leaves) {
	for (uint32_t i = 0; i < graph->n_inputs; i++) {
		const f8_value *leaf = &graph->values[graph->inputs[i]];
		int64_t dims[F8_MAX_RANK];
		for (int d = 0; d < leaf->type.shape.rank; d++)
			if (!f8_dim_evaluate(leaf->type.shape.dims[d], NULL, &dims[d])) {
				printf("  FAIL %%%s: a symbolic size (a case's are constants)\n",
				       leaf->name);
				return false;
			}
		const f8_type *type = &leaf->type;
		if (f8_rt_tensor_create(type->dtype, type->shape.rank, dims, &leaves[i], NULL))
			return false;
		char spec[64];
		test_find_spec(c->fill, leaf->name, spec, sizeof spec);
		if (!spec[0] && !default_fill(leaf)[0]) {
			printf("  FAIL %%%s (%s): an integer leaf needs a fill in the case\n",
			       leaf->name, f8_dtype_name(leaf->type.dtype));
			return false;
		}
		if (!test_fill(&leaves[i], spec, default_fill(leaf)))
			return false;
	}
	return true;
}

/* Runs `graph` on a new backend made by `entry` (backend_ops_run). */
static f8_status run_on(const backend_entry *entry, const f8_graph *graph,
			const f8_rt_tensor *leaves, f8_rt_tensor *outputs,
			f8_executor_memory *memory, f8_diag *diag) {
	f8_backend *backend = NULL;
	f8_status status = entry->create(&backend, diag);
	if (!status)
		status = backend_ops_run(backend, graph, leaves, outputs, memory, diag);
	f8_backend_destroy(backend);
	return status;
}

static unsigned seed;
static bool verbose;             // F8_TEST_VERBOSE: a line for every output, not only failures
static bool present[N_BACKENDS]; // which backends this build and machine have

/* Compares every output of a backend's run with the reference's; prints the case's line for
 * the backend, and each output against its tolerance where one fails. */
static void report(const op_case *c, const f8_graph *graph, const char *backend,
		   const f8_rt_tensor *got, const f8_rt_tensor *want, const char *kernels) {
	backend_ops_result r = backend_ops_compare(graph, c->tolerance, backend, got, want,
						   verbose);
	char ran[300] = "";
	if (kernels[0])
		snprintf(ran, sizeof ran, "[kernels: %s]", kernels);
	backend_ops_print(c->title, backend, &r, ran);
	CHECK(r.ok);
}

/* Case `index`: compiled once, its leaves drawn once, run on every backend present, each
 * compared with the reference's run; marks the ops its compiled graph holds in `covered`. */
static void run_case(uint32_t index, bool *covered) {
	const op_case *c = &cases[index];
	f8_diag diag = {0};
	f8_graph *graph = compile_case(c, &diag);
	if (!graph) {
		printf("%-52s compiling FAILED: ", c->title);
		f8_diag_print(&diag, stdout);
		CHECK(false);
		return;
	}
	for (uint32_t i = 0; i < graph->n_order; i++)
		covered[graph->nodes[graph->order[i]].op] = true;
	char kernels[256];
	backend_ops_describe_kernels(graph, kernels, sizeof kernels);
	rng_state = ((uint64_t)seed << 32) ^ index; // a stream of the case's own
	f8_rt_tensor *leaves = f8_calloc(graph->n_inputs + 1, sizeof *leaves);
	f8_rt_tensor *want = f8_calloc(graph->n_outputs + 1, sizeof *want);
	f8_rt_tensor *got = f8_calloc(graph->n_outputs + 1, sizeof *got);
	bool ready = leaves && want && got && make_leaves(graph, c, leaves);
	CHECK(ready);
	for (uint32_t b = 0; ready && b < N_BACKENDS; b++) {
		if (!present[b])
			continue;
		f8_rt_tensor *outputs = b == 0 ? want : got;
		f8_executor_memory memory = {0};
		f8_diag_clear(&diag);
		f8_status status = run_on(&backends[b], graph, leaves, outputs, &memory, &diag);
		if (c->refused) {
			bool refused = status != F8_OK && strstr(diag.message, c->refused);
			printf("%-52s %-14s %s: %s\n", c->title, backends[b].name,
			       refused ? "refused OK" : "FAIL, not refused as expected",
			       diag.message);
			CHECK(refused);
		} else if (status) {
			printf("%-52s %-14s FAIL: ", c->title, backends[b].name);
			f8_diag_print(&diag, stdout);
			CHECK(false);
			ready = b != 0; // without the reference's outputs, nothing to compare
		} else {
			if (!memory.planned)
				printf("  FAIL the slab was not planned (a case's sizes are "
				       "constants)\n");
			CHECK(memory.planned);
			if (b == 0)
				printf("%-52s %-14s the reference\n", c->title, backends[b].name);
			else
				report(c, graph, backends[b].name, got, want, kernels);
		}
		for (uint32_t o = 0; b != 0 && o < graph->n_outputs; o++)
			f8_rt_tensor_destroy(&got[o]);
	}
	for (uint32_t o = 0; want && o < graph->n_outputs; o++)
		f8_rt_tensor_destroy(&want[o]);
	for (uint32_t i = 0; leaves && i < graph->n_inputs; i++)
		f8_rt_tensor_destroy(&leaves[i]);
	f8_free(leaves);
	f8_free(want);
	f8_free(got);
	f8_graph_destroy(graph);
}

/* Fails naming each op of ir/ops.def that no case's compiled graph holds. */
static void check_coverage(const bool *covered) {
	uint32_t missing = 0;
	for (uint32_t i = 0; i < sizeof all_ops / sizeof all_ops[0]; i++)
		if (!covered[all_ops[i]])
			printf("%s %s", missing++ ? "," : "FAIL ops without a case:",
			       f8_op_name(all_ops[i]));
	if (missing)
		printf("\n  HINT: add a case for each to the table in "
		       "tests/runtime/test_backend_ops.c\n");
	else
		printf("coverage: every one of the %d ops of ir/ops.def has a case\n", F8_OP_COUNT);
	CHECK(missing == 0);
}

/* ---- Cases written for the GPU (--write-cases DIR; tests/runtime/test_backend_ops.h) ---- */

/* The ops of `graph`'s program, once each in program order. */
static json_t *ops_of(const f8_graph *graph) {
	bool seen[F8_OP_COUNT] = {0};
	json_t *ops = json_array();
	for (uint32_t i = 0; ops && i < graph->n_order; i++) {
		f8_op op = graph->nodes[graph->order[i]].op;
		if (!seen[op])
			json_array_append_new(ops, json_string(f8_op_name(op)));
		seen[op] = true;
	}
	return ops;
}

/* Why `graph` cannot run on the CUDA backend, into `why`; "" when it can. A node outside every
 * fused group that is neither a library call (the target table's runs_in_library: GEMMs,
 * attention, collectives) nor a device copy has no GPU kernel in a plan: the backend refuses
 * it rather than run anything the compiler did not make (runtime/cuda/backend.h). */
static void gpu_obstacle(const f8_graph *graph, char *why, size_t size) {
	const f8_target_table *target = f8_codegen_target_table_for(NULL);
	bool named[F8_OP_COUNT] = {0};
	size_t used = 0;
	why[0] = '\0';
	for (uint32_t i = 0; i < graph->n_order && used < size; i++) {
		f8_node_id id = graph->order[i];
		const f8_node *node = &graph->nodes[id];
		if (node->group != F8_NONE || target->runs_in_library(graph, id) ||
		    backend_ops_is_device_copy(node->op) || named[node->op])
			continue;
		named[node->op] = true;
		int n = snprintf(why + used, size - used, "%s%s (%s)",
				 used ? ", " : "no GPU lowering: ", f8_op_name(node->op),
				 target->supports_node(graph, id) ? "the fuse pass put it in no group"
								  : "codegen does not lower it");
		used += n > 0 ? (size_t)n : 0;
	}
	if (why[0] && used < size)
		snprintf(why + used, size - used, ": in no fused group, no library call and no "
			 "device copy");
}

/* DIR/FOLDER/BACKEND_OPS_CASE_FILE: the leaves and the reference's outputs, by name. */
static f8_status write_case_tensors(const char *path, const f8_graph *graph,
				    const f8_rt_tensor *leaves, const f8_rt_tensor *outputs,
				    f8_diag *diag) {
	uint32_t n = graph->n_inputs + graph->n_outputs;
	char **names = f8_calloc(n + 1, sizeof *names);
	const f8_rt_tensor **tensors = f8_calloc(n + 1, sizeof *tensors);
	f8_status status = names && tensors ? F8_OK
					     : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	for (uint32_t i = 0; !status && i < n; i++) {
		bool leaf = i < graph->n_inputs;
		f8_value_id v = leaf ? graph->inputs[i] : graph->outputs[i - graph->n_inputs];
		size_t size = strlen(graph->values[v].name) + 16;
		if (!(names[i] = f8_malloc(size))) {
			status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
			break;
		}
		snprintf(names[i], size, "%s%s", leaf ? BACKEND_OPS_LEAF : BACKEND_OPS_REFERENCE,
			 graph->values[v].name);
		tensors[i] = leaf ? &leaves[i] : &outputs[i - graph->n_inputs];
	}
	if (!status)
		status = f8_safetensors_write(path, (const char *const *)names, tensors, n, NULL,
					      NULL, 0, diag);
	for (uint32_t i = 0; names && i < n; i++)
		f8_free(names[i]);
	f8_free(names);
	f8_free(tensors);
	return status;
}

/* The manifest's entry of a case not written, and its line. */
static json_t *not_written(const op_case *c, uint32_t index, json_t *ops, const char *why) {
	printf("%-52s not for the GPU: %s\n", c->title, why);
	return json_pack("{s:I, s:s, s:o, s:s}", "index", (json_int_t)index, "title", c->title,
			 "ops", ops ? ops : json_array(), "not_written", why);
}

/*
 * Case `index` for the GPU: compiled as in run_case, its leaves drawn as there (the same seed
 * and stream), run on the CPU reference backend, its plan made for sm_90 (f8_tool_plan_make,
 * what f8c compile does) and written to DIR/<index>/ with BACKEND_OPS_CASE_FILE. The manifest's
 * entry for it, or for why it was not written; marks the ops its graph holds in `covered`.
 */
static json_t *write_case(uint32_t index, const char *dir, bool *covered) {
	const op_case *c = &cases[index];
	char why[1280]; // a diagnostic message and the words around it
	f8_diag diag = {0};
	f8_graph *graph = compile_case(c, &diag);
	if (!graph) {
		printf("%-52s compiling FAILED: ", c->title);
		f8_diag_print(&diag, stdout);
		CHECK(false);
		snprintf(why, sizeof why, "it does not compile: %s", diag.message);
		return not_written(c, index, NULL, why);
	}
	for (uint32_t i = 0; i < graph->n_order; i++)
		covered[graph->nodes[graph->order[i]].op] = true;
	json_t *ops = ops_of(graph);
	if (c->refused) {
		snprintf(why, sizeof why, "a refused case: every backend must fail its run "
			 "(\"%s\" on the CPU, which this table checks); no outputs to compare",
			 c->refused);
		f8_graph_destroy(graph);
		return not_written(c, index, ops, why);
	}
	gpu_obstacle(graph, why, sizeof why);
	if (why[0]) {
		f8_graph_destroy(graph);
		return not_written(c, index, ops, why);
	}
	char kernels[256];
	backend_ops_describe_kernels(graph, kernels, sizeof kernels);
	rng_state = ((uint64_t)seed << 32) ^ index; // the stream run_case draws from
	f8_rt_tensor *leaves = f8_calloc(graph->n_inputs + 1, sizeof *leaves);
	f8_rt_tensor *want = f8_calloc(graph->n_outputs + 1, sizeof *want);
	uint32_t n_outputs = graph->n_outputs, n_inputs = graph->n_inputs;
	bool ready = leaves && want && make_leaves(graph, c, leaves);
	CHECK(ready);
	f8_executor_memory memory = {0};
	f8_status status = ready ? run_on(&backends[0], graph, leaves, want, &memory, &diag)
				 : f8_diag_set(&diag, F8_ERR_ARGUMENT, "its leaves could not be made");
	char folder[16], path[4096];
	snprintf(folder, sizeof folder, "%03u", index);
	snprintf(path, sizeof path, "%s/%s", dir, folder);
	f8_plan *plan = NULL;
	const char *args[] = {"--case", c->title};
	if (!status) {
		status = f8_tool_plan_make(graph, false, true, "tests/runtime/test_backend_ops.c",
					   args, 2, &plan, &diag);
		graph = NULL; // the plan's, on failure too
	}
	if (!status)
		status = f8_plan_write(path, plan, &diag);
	if (!status) {
		snprintf(path, sizeof path, "%s/%s/%s", dir, folder, BACKEND_OPS_CASE_FILE);
		status = write_case_tensors(path, plan->graph, leaves, want, &diag);
	}
	json_t *entry;
	if (status) {
		printf("%-52s writing FAILED: ", c->title);
		f8_diag_print(&diag, stdout);
		snprintf(why, sizeof why, "it could not be written: %s", diag.message);
		entry = not_written(c, index, ops, why);
	} else {
		printf("%-52s written to %s/  [%u kernels%s%s]\n", c->title, folder,
		       plan->n_kernels, kernels[0] ? ": " : "", kernels);
		entry = json_pack("{s:I, s:s, s:o, s:s, s:f}", "index", (json_int_t)index,
				  "title", c->title, "ops", ops, "folder", folder, "tolerance",
				  c->tolerance);
	}
	CHECK(status == F8_OK);
	for (uint32_t o = 0; want && o < n_outputs; o++)
		f8_rt_tensor_destroy(&want[o]);
	for (uint32_t i = 0; leaves && i < n_inputs; i++)
		f8_rt_tensor_destroy(&leaves[i]);
	f8_free(leaves);
	f8_free(want);
	f8_plan_destroy(plan);
	f8_graph_destroy(graph);
	return entry;
}

/* --write-cases: every case whose title holds `only` (NULL: all) written to `dir` (made if
 * missing) or listed in its manifest, written last, so that a manifest lists whole cases. */
static int write_cases(const char *dir, const char *only) {
	if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
		printf("FAIL cannot make %s: %s\n", dir, strerror(errno));
		return 1;
	}
	bool covered[F8_OP_COUNT] = {0};
	json_t *entries = json_array();
	uint32_t written = 0, listed = 0;
	for (uint32_t i = 0; entries && i < N_CASES; i++) {
		if (only && !strstr(cases[i].title, only))
			continue;
		json_t *entry = write_case(i, dir, covered);
		written += json_object_get(entry, "folder") != NULL;
		listed++;
		CHECK(entry && json_array_append_new(entries, entry) == 0);
	}
	if (!only)
		check_coverage(covered);
	char path[4096];
	snprintf(path, sizeof path, "%s/manifest.json", dir);
	json_t *manifest = json_pack("{s:s, s:I, s:o}", "format", BACKEND_OPS_FORMAT, "seed",
				     (json_int_t)seed, "cases", entries);
	bool saved = manifest && json_dump_file(manifest, path, JSON_INDENT(1)) == 0;
	if (!saved)
		printf("FAIL cannot write %s\n", path);
	CHECK(saved);
	json_decref(manifest);
	printf("%u of %u cases written to %s for the GPU (tests/gpu/backend_ops_cuda.c); the "
	       "others listed in manifest.json with the reason\n", written, listed, dir);
	return test_finish();
}

int main(int argc, char **argv) {
	const char *fixed = getenv("F8_TEST_SEED");
	seed = fixed ? (unsigned)strtoul(fixed, NULL, 10) : (unsigned)time(NULL);
	printf("seed %u (F8_TEST_SEED=%u repeats this run)\n", seed, seed);
	verbose = getenv("F8_TEST_VERBOSE") != NULL;
	if (argc > 1 && strcmp(argv[1], "--write-cases") == 0) {
		if (argc < 3) {
			printf("usage: test_backend_ops --write-cases DIR [TITLE_PART]\n");
			return 2;
		}
		return write_cases(argv[2], argc > 3 ? argv[3] : NULL);
	}
	for (uint32_t b = 0; b < N_BACKENDS; b++) {
		f8_backend *backend = NULL;
		f8_diag diag = {0};
		f8_status status = backends[b].create(&backend, &diag);
		present[b] = status == F8_OK;
		if (status)
			printf("backend %s: not present (%s)\n", backends[b].name, diag.message);
		CHECK(status == F8_OK || (b != 0 && status == F8_ERR_UNSUPPORTED));
		f8_backend_destroy(backend);
	}
	const char *only = argc > 1 ? argv[1] : NULL;
	bool covered[F8_OP_COUNT] = {0};
	for (uint32_t i = 0; i < N_CASES; i++)
		if (!only || strstr(cases[i].title, only))
			run_case(i, covered);
	if (!only)
		check_coverage(covered);
	printf("%d cases\n", N_CASES);
	return test_finish();
}
