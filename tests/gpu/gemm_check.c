/*
 * The GEMMs on the GPU through cuBLASLt (runtime/cuda/gemm.h), checked against the CPU
 * reference kernels (runtime/cpu/kernels_nn.c, kernels_grad_nn.c, kernels_moe.c,
 * kernels_grad_moe.c, kernels_fp8_gemm.c), as the backend test table does for every op
 * (tests/runtime/test_backend_ops.c): each case is a small text-IR graph whose last GEMM node
 * is checked, on fresh random inputs (never zeros but by chance). The nodes before it (the
 * FP8 casts: Quantize, CastTranspose) run on the CPU reference only and make the GEMM's FP8
 * operands and scale_invs from random f32, so both sides read the same codes.
 *
 * Each output element is held to a bound from the magnitude of its terms: M = the same GEMM
 * of |operands| (and |alpha|, |beta|), computed by the same reference kernel, so M is sum |a||b|
 * times the scales, plus |bias| or |beta c| (tolerance_of says why each bound). Outputs are
 * poisoned (0xFF bytes: NaN) before the run, so that an element cuBLASLt did not write cannot
 * pass (test_compare's rules: a NaN where the reference has a number fails). Each case prints
 * the worst error over its bound and the NMSE against the NMSE that the bounds allow. A
 * refused case checks that planning fails with F8_ERR_UNSUPPORTED and a message that says why.
 *
 * As a ctest without a GPU (f8_cuda_open or the cuBLASLt load answers F8_ERR_UNSUPPORTED) it
 * prints why and exits 77, which ctest counts as skipped. The seed comes from the clock and is
 * printed; F8_TEST_SEED=N repeats a run. An argument runs only the cases whose title holds it.
 *
 * usage: gemm_check [TITLE_PART]
 */
#include <math.h>   // fabs, ldexp, sqrt
#include <stdio.h>  // printf
#include <stdlib.h> // getenv, strtoul
#include <string.h> // strcmp, strstr
#include <time.h>   // time

#include "ir/alloc.h"                   // f8_calloc, f8_free
#include "ir/dtype.h"                   // f8_dtype_name, f8_dtype_is_float
#include "ir/gemm.h"                    // f8_gemm_sizes
#include "ir/ops.h"                     // F8_OP_*, F8_OPF_GEMM, f8_op_get_info
#include "runtime/cuda/driver.h"        // f8_cuda_open, f8_cuda_stream_*, f8_cuda_memset_async
#include "runtime/cuda/gemm.h"          // f8_cuda_gemms_create, f8_cuda_gemm_run
#include "runtime/cuda/libraries.h"     // f8_cuda_load
#include "tests/gpu/check_graph.h"      // check_graph_parse, check_reference_run, ...
#include "tests/runtime/test_compare.h" // test_compare
#include "tests/runtime/test_fill.h"    // rng_state, test_fill, test_find_spec
#include "tests/test_support.h"         // CHECK, test_finish

/*
 * One case: a graph's body, its leaves' fills ("name=spec", tests/runtime/test_fill.h; a float
 * leaf not named is "signed", |x| in [0.3, 1.5], a scale "uniform:40:120", which puts signed
 * values near E4M3's range without saturating), its symbols ("name=value"), and for a case that
 * must be refused the text the refusal must hold.
 */
typedef struct gemm_case {
	const char *title;
	const char *text;
	const char *fill;
	const char *symbols;
	const char *refused;
} gemm_case;

#define IN(name, type) "input %" name " : " type "\n"
#define SCALE(name) "scale %" name " : f32[]\n"
#define E5M2_SCALE "uniform:2000:20000" // signed gradients up to 30000 of E5M2's 57344
// Rows, columns and 128 x 128 tiles of magnitudes of their own, each within 2^+-3 (so up to
// 2^+-9 apart): a rowwise or block scale applied to another row or block fails the bound.
#define GRADED "x=graded:3 w=graded:3 dy=graded:3"

static const gemm_case cases[] = {
	// Dense GEMMs, f32 (CUBLAS_COMPUTE_32F, no TF32) and bf16.
	{.title = "Linear f32", .text = IN("x", "f32[3, 32, 96]") IN("w", "f32[80, 96]")
	 "%y = Linear(%x, %w)\noutput %y\n"},
	{.title = "Linear f32, bias",
	 .text = IN("x", "f32[96, 160]") IN("w", "f32[72, 160]") IN("b", "f32[72]")
	 "%y = Linear(%x, %w, %b)\noutput %y\n"},
	{.title = "Linear f32, odd sizes, bias",
	 .text = IN("x", "f32[7, 13]") IN("w", "f32[11, 13]")
	 IN("b", "f32[11]") "%y = Linear(%x, %w, %b)\noutput %y\n"},
	{.title = "Linear bf16, bias", .text = IN("x", "bf16[4, 24, 128]") IN("w", "bf16[64, 128]")
	 IN("b", "bf16[64]") "%y = Linear(%x, %w, %b)\noutput %y\n"},
	{.title = "Linear bf16, transpose_weight",
	 .text = IN("x", "bf16[50, 72]") IN("w", "bf16[72, 40]")
	 "%y = Linear(%x, %w) {transpose_weight=1}\noutput %y\n"},
	{.title = "LinearWgrad f32", .text = IN("dy", "f32[3, 40, 48]") IN("x", "f32[3, 40, 64]")
	 "%dw = LinearWgrad(%dy, %x)\noutput %dw\n"},
	{.title = "LinearWgrad bf16, transpose_weight",
	 .text = IN("dy", "bf16[96, 32]") IN("x", "bf16[96, 80]")
	 "%dw = LinearWgrad(%dy, %x) {transpose_weight=1}\noutput %dw\n"},
	{.title = "MatMul f32, batched",
	 .text = IN("a", "f32[2, 3, 17, 24]") IN("b", "f32[2, 3, 24, 19]")
	 "%y = MatMul(%a, %b)\noutput %y\n"},
	{.title = "MatMul bf16, batch broadcast both ways", .text = IN("a", "bf16[4, 1, 16, 32]")
	 IN("b", "bf16[3, 32, 8]") "%y = MatMul(%a, %b)\noutput %y\n"},
	{.title = "MatMul f32, x @ W", .text = IN("a", "f32[3, 7, 20]") IN("b", "f32[20, 11]")
	 "%y = MatMul(%a, %b)\noutput %y\n"},
	{.title = "MatMul f32, symbolic batch",
	 .text = IN("a", "f32[batch, 8, 16]") IN("b", "f32[batch, 16, 12]")
	 "%y = MatMul(%a, %b)\noutput %y\n", .symbols = "batch=5"},
	{.title = "MatMul f32, vector times batch",
	 .text = IN("a", "f32[24]") IN("b", "f32[2, 24, 10]")
	 "%y = MatMul(%a, %b)\noutput %y\n"},
	{.title = "Gemm f32, alpha, beta, transA, transB, C (N)", .text = IN("a", "f32[30, 9]")
	 IN("b", "f32[14, 30]") IN("c", "f32[14]")
	 "%y = Gemm(%a, %b, %c) {alpha=0.7, beta=-1.3, transA=1, transB=1}\noutput %y\n"},
	{.title = "Gemm f32, C (M, 1)",
	 .text = IN("a", "f32[9, 30]") IN("b", "f32[30, 14]") IN("c", "f32[9, 1]")
	 "%y = Gemm(%a, %b, %c) {beta=0.5}\noutput %y\n"},
	{.title = "Gemm bf16, scalar C",
	 .text = IN("a", "bf16[16, 32]") IN("b", "bf16[32, 24]") IN("c", "bf16[]")
	 "%y = Gemm(%a, %b, %c) {alpha=1.5, beta=2}\noutput %y\n"},
	{.title = "Gemm f32, C (M, N)",
	 .text = IN("a", "f32[12, 20]") IN("b", "f32[20, 10]") IN("c", "f32[12, 10]")
	 "%y = Gemm(%a, %b, %c) {beta=-0.75}\noutput %y\n"},
	// MoE experts: one cuBLASLt call per expert; counts of 0 happen.
	{.title = "GroupedLinear f32",
	 .text = IN("x", "f32[96, 64]") IN("w", "f32[5, 48, 64]") IN("n", "i64[5]")
	 "%y = GroupedLinear(%x, %w, %n)\noutput %y\n", .fill = "n=counts:96"},
	{.title = "GroupedLinear bf16, transpose_weight",
	 .text = IN("x", "bf16[64, 32]") IN("w", "bf16[4, 32, 40]")
	 IN("n", "i64[4]") "%y = GroupedLinear(%x, %w, %n) {transpose_weight=1}\noutput %y\n",
	 .fill = "n=counts:64"},
	{.title = "GroupedLinearWgrad f32",
	 .text = IN("dy", "f32[96, 48]") IN("x", "f32[96, 64]") IN("n", "i64[5]")
	 "%dw = GroupedLinearWgrad(%dy, %x, %n)\noutput %dw\n", .fill = "n=counts:96"},
	{.title = "GroupedLinearWgrad bf16, transpose_weight", .text = IN("dy", "bf16[64, 40]")
	 IN("x", "bf16[64, 32]") IN("n", "i32[4]")
	 "%dw = GroupedLinearWgrad(%dy, %x, %n) {transpose_weight=1}\noutput %dw\n",
	 .fill = "n=counts:64"},
	// FP8, delayed scaling: per-tensor scales given (Quantize and CastTranspose with a scale).
	{.title = "FP8Gemm fwd delayed e4m3 x e4m3 -> bf16",
	 .text = IN("x", "f32[96, 160]") IN("w", "f32[80, 160]") SCALE("sx") SCALE("sw")
	 "%xq, %xs, %xa = Quantize(%x, %sx) {to=e4m3}\n"
	 "%wq, %ws, %wa = Quantize(%w, %sw) {to=e4m3}\n"
	 "%y = FP8Gemm(%xq, %wq, %xs, %ws) {to=bf16, gemm=\"fwd\"}\noutput %y\n"},
	{.title = "FP8Gemm fwd delayed -> f32, f32 bias",
	 .text = IN("x", "f32[96, 160]") IN("w", "f32[80, 160]") IN("b", "f32[80]")
	 SCALE("sx") SCALE("sw")
	 "%xq, %xs, %xa = Quantize(%x, %sx) {to=e4m3}\n"
	 "%wq, %ws, %wa = Quantize(%w, %sw) {to=e4m3}\n"
	 "%y = FP8Gemm(%xq, %wq, %xs, %ws, %b) {to=f32, gemm=\"fwd\"}\noutput %y\n"},
	{.title = "FP8Gemm dgrad delayed e5m2 x e4m3 (w^T) -> bf16",
	 .text = IN("dy", "f32[96, 80]") IN("w", "f32[80, 160]") SCALE("sd") SCALE("sw")
	 "%dq, %ds, %da = Quantize(%dy, %sd) {to=e5m2}\n"
	 "%wc, %wt, %ws, %wts, %wa = CastTranspose(%w, %sw) {to=e4m3}\n"
	 "%dx = FP8Gemm(%dq, %wt, %ds, %wts) {to=bf16, gemm=\"dgrad\"}\noutput %dx\n",
	 .fill = "sd=" E5M2_SCALE},
	{.title = "FP8Gemm wgrad delayed e5m2 (dy^T) x e4m3 (x^T) -> f32",
	 .text = IN("dy", "f32[96, 80]") IN("x", "f32[96, 160]") SCALE("sd") SCALE("sx")
	 "%dc, %dt, %ds, %dts, %da = CastTranspose(%dy, %sd) {to=e5m2}\n"
	 "%xc, %xt, %xs, %xts, %xa = CastTranspose(%x, %sx) {to=e4m3}\n"
	 "%dw = FP8Gemm(%dt, %xt, %dts, %xts) {to=f32, gemm=\"wgrad\"}\noutput %dw\n",
	 .fill = "sd=" E5M2_SCALE},
	// FP8, rowwise: one scale per row of each operand (OUTER_VEC_32F).
	{.title = "FP8Gemm fwd rowwise e4m3 -> bf16, bf16 bias",
	 .text = IN("x", "f32[96, 160]") IN("w", "f32[80, 160]") IN("b", "bf16[80]")
	 "%xq, %xs = Quantize(%x) {to=e4m3, block=[1, 0]}\n"
	 "%wq, %ws = Quantize(%w) {to=e4m3, block=[1, 0]}\n"
	 "%y = FP8Gemm(%xq, %wq, %xs, %ws, %b) {to=bf16, gemm=\"fwd\", a_block=[1, 0], "
	 "b_block=[1, 0]}\noutput %y\n",
	 .fill = GRADED},
	{.title = "FP8Gemm dgrad rowwise e5m2 x e4m3 (w^T) -> bf16",
	 .text = IN("dy", "f32[96, 80]") IN("w", "f32[80, 160]")
	 "%dq, %ds = Quantize(%dy) {to=e5m2, block=[1, 0]}\n"
	 "%wc, %wt, %ws, %wts, %wa = CastTranspose(%w) {to=e4m3, block=[1, 0]}\n"
	 "%dx = FP8Gemm(%dq, %wt, %ds, %wts) {to=bf16, gemm=\"dgrad\", a_block=[1, 0], "
	 "b_block=[1, 0]}\noutput %dx\n",
	 .fill = GRADED},
	{.title = "FP8Gemm wgrad rowwise e5m2 (dy^T) x e4m3 (x^T) -> bf16, K 1024",
	 .text = IN("dy", "f32[1024, 512]") IN("x", "f32[1024, 128]")
	 "%dc, %dt, %ds, %dts, %da = CastTranspose(%dy) {to=e5m2, block=[1, 0]}\n"
	 "%xc, %xt, %xs, %xts, %xa = CastTranspose(%x) {to=e4m3, block=[1, 0]}\n"
	 "%dw = FP8Gemm(%dt, %xt, %dts, %xts) {to=bf16, gemm=\"wgrad\", a_block=[1, 0], "
	 "b_block=[1, 0]}\noutput %dw\n",
	 .fill = GRADED},
	// FP8, blocks: 1x128 activations and gradients, 128x128 weights (VEC128_32F and
	// BLK128x128_32F); K of 384 and 256 (3 and 2 blocks: the 128x128 grids need padding),
	// the 1x128 grids a transpose.
	{.title = "FP8Gemm fwd block 1x128 x 128x128 -> bf16, bf16 bias",
	 .text = IN("x", "f32[256, 384]") IN("w", "f32[256, 384]") IN("b", "bf16[256]")
	 "%xq, %xs = Quantize(%x) {to=e4m3, block=[1, 128]}\n"
	 "%wq, %ws = Quantize(%w) {to=e4m3, block=[128, 128]}\n"
	 "%y = FP8Gemm(%xq, %wq, %xs, %ws, %b) {to=bf16, gemm=\"fwd\", a_block=[1, 128], "
	 "b_block=[128, 128]}\noutput %y\n",
	 .fill = GRADED},
	{.title = "FP8Gemm fwd block 1x128 x 128x128 -> f32, f32 bias",
	 .text = IN("x", "f32[128, 256]") IN("w", "f32[384, 256]") IN("b", "f32[384]")
	 "%xq, %xs = Quantize(%x) {to=e4m3, block=[1, 128]}\n"
	 "%wq, %ws = Quantize(%w) {to=e4m3, block=[128, 128]}\n"
	 "%y = FP8Gemm(%xq, %wq, %xs, %ws, %b) {to=f32, gemm=\"fwd\", a_block=[1, 128], "
	 "b_block=[128, 128]}\noutput %y\n",
	 .fill = GRADED},
	{.title = "FP8Gemm dgrad block 1x128 x 128x128 (w^T) -> bf16",
	 .text = IN("dy", "f32[256, 256]") IN("w", "f32[256, 384]")
	 "%dq, %ds = Quantize(%dy) {to=e4m3, block=[1, 128]}\n"
	 "%wc, %wt, %ws, %wts, %wa = CastTranspose(%w) {to=e4m3, block=[128, 128]}\n"
	 "%dx = FP8Gemm(%dq, %wt, %ds, %wts) {to=bf16, gemm=\"dgrad\", a_block=[1, 128], "
	 "b_block=[128, 128]}\noutput %dx\n",
	 .fill = GRADED},
	{.title = "FP8Gemm wgrad block 1x128 (dy^T) x 1x128 (x^T) -> f32",
	 .text = IN("dy", "f32[256, 256]") IN("x", "f32[256, 384]")
	 "%dc, %dt, %ds, %dts, %da = CastTranspose(%dy) {to=e4m3, block=[1, 128]}\n"
	 "%xc, %xt, %xs, %xts, %xa = CastTranspose(%x) {to=e4m3, block=[1, 128]}\n"
	 "%dw = FP8Gemm(%dt, %xt, %dts, %xts) {to=f32, gemm=\"wgrad\", a_block=[1, 128], "
	 "b_block=[1, 128]}\noutput %dw\n",
	 .fill = GRADED},
	// What cuBLASLt cannot run on sm_90 is refused, naming why.
	{.title = "FP8Gemm K = 100: refused",
	 .text = IN("a", "e4m3[32, 100]") IN("b", "e4m3[48, 100]")
	 IN("sa", "f32[]") IN("sb", "f32[]")
	 "%y = FP8Gemm(%a, %b, %sa, %sb) {to=bf16, gemm=\"fwd\"}\noutput %y\n",
	 .fill = "sa=positive sb=positive", .refused = "multiple of 16"},
	{.title = "FP8Gemm 128x128 x 128x128: refused",
	 .text = IN("a", "e4m3[128, 128]") IN("b", "e4m3[128, 128]")
	 IN("sa", "f32[1, 1]") IN("sb", "f32[1, 1]")
	 "%y = FP8Gemm(%a, %b, %sa, %sb) {to=bf16, gemm=\"fwd\", a_block=[128, 128], "
	 "b_block=[128, 128]}\noutput %y\n",
	 .fill = "sa=positive sb=positive", .refused = "pairs"},
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

/*
 * The bound of one output element, |GPU - reference| <= accumulation * M + rounding * |y|,
 * for M the element's magnitude (the file comment) and K the GEMM's depth:
 *   - f32 (CUBLAS_COMPUTE_32F, IEEE f32 FMA): both sides sum K products in f32 in different
 *     orders. Rounding errors of a sum are independent-ish and add as a random walk: each
 *     side is within lambda sqrt(K) u M, u = 2^-24, lambda a few, except with a probability
 *     below e^-(lambda^2 / 2) (Higham and Mary's probabilistic bound); the two sides together
 *     4 sqrt(K) u M. (Against M = sum |a||b| this is loose by another sqrt(K) for random signs.
 *     TF32, with u = 2^-11, would be 8000 times over it.)
 *   - bf16 and f16 operands (tensor cores, f32 accumulation): products are exact in f32, the
 *     sums f32, but tensor cores may truncate rather than round their adds, so errors can add
 *     up in one direction: the deterministic K u M. Both sides then round to the output's
 *     dtype, up to half an ulp each: one ulp, 2^-7 |y| (bf16) or 2^-10 |y| (f16).
 *   - FP8 (FP8Gemm): Hopper's FP8 tensor cores accumulate in about 14 bits (DeepSeek-V3,
 *     3.3.2), so fast accumulation is within about 2^-9 of sum |a||b| per output (measured
 *     2^-11.2 on an H200 at K = 256, tests/runtime/test_fp8_gemm_h200.py); the split
 *     accumulation of dgrad, wgrad and the block recipes promotes partial sums to f32 and does
 *     better. The reference's own error is f32's or double's: nothing at this scale. Then
 *     the output rounding as above.
 * M computed in a bf16 or f16 output is rounded itself: it is taken one ulp larger.
 */
typedef struct element_bound {
	double accumulation; // times M
	double rounding;     // times max(|reference|, |GPU|)
	double m_rounding;   // M's own relative rounding
} element_bound;

static element_bound tolerance_of(const f8_node *node, f8_dtype output, int64_t k) {
	element_bound bound = {0};
	double u = ldexp(1.0, -24);
	if (node->op == F8_OP_FP8_GEMM)
		bound.accumulation = ldexp(1.0, -9);
	else if (output == F8_DTYPE_F32)
		bound.accumulation = 4.0 * sqrt((double)(k > 0 ? k : 1)) * u;
	else
		bound.accumulation = (double)(k > 0 ? k : 1) * u;
	bound.rounding = output == F8_DTYPE_BF16  ? ldexp(1.0, -7)
			 : output == F8_DTYPE_F16 ? ldexp(1.0, -10)
						  : 2.0 * u;
	bound.m_rounding = output == F8_DTYPE_F32 ? 0.0 : bound.rounding;
	return bound;
}

static unsigned seed;

/* The GEMM of the case: the last node of the program with F8_OPF_GEMM. */
static f8_node_id find_gemm(const f8_graph *graph) {
	f8_node_id found = F8_NONE;
	for (uint32_t i = 0; i < graph->n_order; i++)
		if (f8_op_get_info(graph->nodes[graph->order[i]].op)->flags & F8_OPF_GEMM)
			found = graph->order[i];
	return found;
}

/* The GEMM's depth K (ir/gemm.h's k), from the concrete operands. */
static int64_t depth_of(const f8_graph *graph, const f8_node *node, const f8_rt_tensor *tensors) {
	int64_t m, n, k;
	if (f8_gemm_sizes(graph, node, &m, &n, &k))
		return k;
	const f8_rt_tensor *a = &tensors[node->inputs[0]];
	if (node->op == F8_OP_LINEAR_WGRAD || node->op == F8_OP_GROUPED_LINEAR_WGRAD)
		return f8_rt_tensor_numel(a) / a->dims[a->rank - 1];
	return a->dims[a->rank - 1];
}

/* The magnitude M of every output element: the GEMM node's reference kernel on |inputs| (FP8
 * codes too: |code| is a code) and, for Gemm, |alpha| and |beta|, into *out. */
static f8_status magnitude(f8_graph *graph, const int64_t *symbols, f8_node_id id,
			   const f8_rt_tensor *tensors, f8_rt_tensor *out, f8_diag *diag) {
	f8_node *node = &graph->nodes[id];
	f8_rt_tensor *views = f8_calloc(graph->n_values + 1, sizeof *views);
	if (!views)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	for (uint32_t v = 0; v < graph->n_values; v++) {
		views[v] = tensors[v];
		views[v].owned = false;
	}
	f8_status status = F8_OK;
	for (uint32_t i = 0; !status && i < node->n_inputs; i++) {
		f8_value_id input = node->inputs[i];
		if (input == F8_NONE || !f8_dtype_is_float(views[input].dtype) || views[input].owned)
			continue;
		f8_rt_tensor copy;
		status = f8_rt_tensor_create(views[input].dtype, views[input].rank, views[input].dims,
					     &copy, diag);
		for (int64_t j = 0; !status && j < f8_rt_tensor_numel(&copy); j++)
			f8_rt_tensor_set(&copy, j, fabs(f8_rt_tensor_get(&tensors[input], j)));
		if (!status)
			views[input] = copy;
	}
	double saved[4] = {0}; // Gemm's float attributes (alpha, beta), made |.| for the run
	uint32_t n_attrs = node->op == F8_OP_GEMM && node->n_attrs <= 4 ? node->n_attrs : 0;
	for (uint32_t a = 0; a < n_attrs; a++)
		if (node->attrs[a].kind == F8_ATTR_FLOAT) {
			saved[a] = node->attrs[a].f;
			node->attrs[a].f = fabs(node->attrs[a].f);
		}
	if (!status)
		status = check_reference_run(graph, symbols, id, views, diag);
	for (uint32_t a = 0; a < n_attrs; a++)
		if (node->attrs[a].kind == F8_ATTR_FLOAT)
			node->attrs[a].f = saved[a];
	*out = views[node->outputs[0]];
	views[node->outputs[0]] = (f8_rt_tensor){0};
	check_tensors_destroy(graph, views); // the copies only: the views own nothing
	return status;
}

/* Holds `got` to `want` element by element within `bound` of `m`; prints the case's line. */
static bool compare_output(const char *title, const f8_rt_tensor *got, const f8_rt_tensor *want,
			   const f8_rt_tensor *m, element_bound bound) {
	test_comparison r = test_compare(got, want, false);
	double worst = 0, allowed = 0, energy = 0;
	int64_t worst_at = -1, over = 0, n = f8_rt_tensor_numel(want);
	for (int64_t i = 0; i < n; i++) {
		double g = f8_rt_tensor_get(got, i), w = f8_rt_tensor_get(want, i);
		double magnitude = f8_rt_tensor_get(m, i) * (1.0 + bound.m_rounding);
		double limit = bound.accumulation * magnitude +
			       bound.rounding * (fabs(w) > fabs(g) ? fabs(w) : fabs(g)) + 1e-300;
		allowed += limit * limit;
		energy += w * w;
		double ratio = fabs(g - w) / limit;
		if (!(ratio <= 1.0))
			over++;
		if (!(ratio <= worst)) {
			worst = ratio;
			worst_at = i;
		}
	}
	double nmse_bound = energy > 0 ? allowed / energy : 0;
	bool ok = r.bad == 0 && over == 0;
	printf("%-56s %-5s error/bound %-9.3g NMSE %-9.3g (bound %.2g) %s\n", title,
	       f8_dtype_name(want->dtype), worst, r.nmse, nmse_bound, ok ? "OK" : "FAIL");
	if (!ok && worst_at >= 0)
		printf("  %lld of %lld elements over their bound (%lld against the rules); worst at "
		       "%lld: reference %.9g, GPU %.9g, magnitude %.6g\n", (long long)over,
		       (long long)n, (long long)r.bad, (long long)worst_at,
		       f8_rt_tensor_get(want, worst_at), f8_rt_tensor_get(got, worst_at),
		       f8_rt_tensor_get(m, worst_at));
	return ok;
}

/* Plans and runs the case's GEMM on the GPU, its output into *got (made here). */
static f8_status gpu_run(const f8_graph *graph, const int64_t *symbols, f8_node_id id,
			 const f8_rt_tensor *tensors, CUstream stream, f8_rt_tensor *got,
			 f8_diag *diag) {
	const f8_node *node = &graph->nodes[id];
	f8_cuda_gemms *gemms = NULL;
	check_device_values values = {0};
	f8_status status = f8_cuda_gemms_create(graph, symbols, stream, &gemms, diag);
	if (!status)
		status = check_device_values_create(graph, tensors, &values, diag);
	CUdeviceptr inputs[8] = {0}, outputs[1] = {0};
	for (uint32_t i = 0; !status && i < node->n_inputs; i++)
		inputs[i] = node->inputs[i] == F8_NONE ? 0 : values.pointers[node->inputs[i]];
	f8_value_id y = node->outputs[0];
	if (!status) {
		outputs[0] = values.pointers[y];
		status = f8_cuda_memset_async(outputs[0], 0xFF, tensors[y].n_bytes, stream, diag);
	}
	if (!status)
		status = f8_cuda_gemm_run(gemms, id, inputs, outputs, diag);
	if (!status)
		status = f8_cuda_stream_synchronize(stream, diag);
	if (!status)
		status = f8_rt_tensor_create(tensors[y].dtype, tensors[y].rank, tensors[y].dims, got,
					     diag);
	if (!status)
		status = f8_cuda_copy_to_host(got->data, outputs[0], got->n_bytes, diag);
	check_device_values_destroy(&values);
	f8_cuda_gemms_destroy(gemms);
	return status;
}

/* The fill of a leaf the case does not name. */
static const char *default_fill(const f8_value *leaf) {
	if (leaf->role == F8_ROLE_SCALE)
		return "uniform:40:120";
	return f8_dtype_is_float(leaf->type.dtype) ? "signed" : "";
}

static void run_case(uint32_t index, CUstream stream) {
	const gemm_case *c = &cases[index];
	f8_diag diag = {0};
	f8_graph *graph = check_graph_parse(c->title, c->text, &diag);
	int64_t symbols[8] = {0};
	if (!graph || graph->n_symbols > 8 || !check_graph_symbols(graph, c->symbols, symbols)) {
		printf("%-56s FAIL building the graph: ", c->title);
		f8_diag_print(&diag, stdout);
		CHECK(false);
		f8_graph_destroy(graph);
		return;
	}
	f8_node_id id = find_gemm(graph);
	f8_rt_tensor *tensors = f8_calloc(graph->n_values + 1, sizeof *tensors);
	bool ready = tensors && id != F8_NONE;
	rng_state = ((uint64_t)seed << 32) ^ index; // a stream of the case's own
	for (uint32_t i = 0; ready && i < graph->n_inputs; i++) {
		const f8_value *leaf = &graph->values[graph->inputs[i]];
		char spec[64];
		test_find_spec(c->fill, leaf->name, spec, sizeof spec);
		f8_rt_tensor *tensor = &tensors[graph->inputs[i]];
		ready = check_tensor_make(graph, symbols, graph->inputs[i], tensor) &&
			test_fill(tensor, spec, default_fill(leaf));
	}
	f8_status status = ready ? F8_OK : f8_diag_set(&diag, F8_ERR_ARGUMENT, "the leaves");
	for (uint32_t i = 0; !status && !c->refused && i < graph->n_order; i++)
		status = check_reference_run(graph, symbols, graph->order[i], tensors, &diag);
	f8_rt_tensor got = {0}, m = {0};
	if (!status)
		status = gpu_run(graph, symbols, id, tensors, stream, &got, &diag);
	if (c->refused) {
		bool refused = status == F8_ERR_UNSUPPORTED && strstr(diag.message, c->refused);
		printf("%-56s %s: ", c->title, refused ? "refused, as it must be" : "FAIL");
		if (status)
			f8_diag_print(&diag, stdout);
		else
			printf("it ran\n");
		CHECK(refused);
	} else {
		if (!status)
			status = magnitude(graph, symbols, id, tensors, &m, &diag);
		if (status) {
			printf("%-56s FAIL: ", c->title);
			f8_diag_print(&diag, stdout);
			CHECK(false);
		} else {
			const f8_node *node = &graph->nodes[id];
			f8_value_id y = node->outputs[0];
			element_bound bound = tolerance_of(node, tensors[y].dtype,
							   depth_of(graph, node, tensors));
			CHECK(compare_output(c->title, &got, &tensors[y], &m, bound));
		}
	}
	f8_rt_tensor_destroy(&got);
	f8_rt_tensor_destroy(&m);
	check_tensors_destroy(graph, tensors);
	f8_graph_destroy(graph);
}

int main(int argc, char **argv) {
	const char *only = argc > 1 ? argv[1] : NULL;
	const char *fixed = getenv("F8_TEST_SEED");
	seed = fixed ? (unsigned)strtoul(fixed, NULL, 10) : (unsigned)time(NULL);
	f8_diag diag = {0};
	f8_cuda_device device;
	f8_status status = f8_cuda_open(&device, &diag);
	if (!status)
		status = f8_cuda_load(F8_CUDA_LIBRARY_CUBLASLT, &diag);
	if (status == F8_ERR_UNSUPPORTED) {
		printf("gemm_check: skipped, it needs a GPU with the CUDA driver and cuBLASLt: ");
		f8_diag_print(&diag, stdout);
		return 77;
	}
	CUstream stream = NULL;
	if (!status)
		status = f8_cuda_stream_create(&stream, &diag);
	if (status) {
		printf("gemm_check: ");
		f8_diag_print(&diag, stdout);
		f8_cuda_close(&device);
		return 1;
	}
	int version = (int)f8_cuda_api.cublasLtGetVersion();
	printf("gemm_check: %s (sm_%d%d), cuBLASLt %d, seed %u (F8_TEST_SEED=%u repeats it)\n",
	       device.name, device.compute_major, device.compute_minor, version, seed, seed);
	for (uint32_t i = 0; i < N_CASES; i++)
		if (!only || strstr(cases[i].title, only))
			run_case(i, stream);
	f8_cuda_stream_destroy(stream);
	f8_cuda_close(&device);
	return test_finish();
}
