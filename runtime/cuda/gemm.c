/*
 * The GEMM nodes of a graph on cuBLASLt (runtime/cuda/gemm.h).
 *
 * Every GEMM is a row-major product Y (m, n) = op(P) (m, k) op(Q) (k, n) of two of the node's
 * operands (Linear: x and w; LinearWgrad: dy^T and x; Gemm: op(A) and op(B); MatMul: a and b;
 * FP8Gemm: a and b^T), which runtime/cuda/gemm_lt.h maps to cuBLASLt's column-major call (its
 * A is Q, its B is P). For FP8Gemm that is cuBLASLt's TN, Hopper's only FP8 layout, with A
 * scaled by b's scale_inv and B by a's.
 *
 * Bias and Gemm's C. cuBLASLt's BIAS epilogue adds a vector along its rows, our columns: a
 * Linear's bias. It is used where cuBLASLt has it for the dtypes: not for an FP8 GEMM with an
 * f32 output, whose bias cuBLASLt takes only in bf16 (cublasLt.h, BIAS_DATA_TYPE) while f8c's
 * is f32, nor where the heuristic finds no algorithm with it. There, and for a C that is
 * broadcast (ONNX Gemm's C of (N), (M, 1) or a scalar), the vector is first broadcast into D by
 * a rank-1 GEMM (D = u v^T, ones for the other factor: each element is one product with 1,
 * exact), and the GEMM then accumulates onto D (C = D; beta 1, or Gemm's beta), which rounds
 * once, as the epilogue does.
 *
 * FP8 scales (the IR's grids, ir/infer_fused.c: (ceil(rows / block), ceil(K / block)) row-major)
 * as cuBLASLt reads them on sm_90 (PyTorch's and TransformerEngine's layouts, GPU-FACTS.md 1.6):
 * a scalar (SCALAR_32F); rowwise [1, 0], one per row (OUTER_VEC_32F), the grid as it is; 1x128
 * (VEC128_32F) with the rows contiguous, scale (r, kb) at kb * rows + r, the IR grid's
 * transpose; 128x128 (BLK128x128_32F) with each row of blocks padded to a multiple of 4, scale
 * (rb, kb) at rb * roundup(blocks along K, 4) + kb. Where the layouts differ, a run first
 * rearranges the grid into scratch memory with cublasLtMatrixTransform (a library call on the
 * stream, no hand-written kernel).
 *
 * MatMul broadcasts batch dims: they are collapsed where the strides allow it; the innermost is
 * one strided-batched call (stride 0 for a broadcast operand), the others a loop of calls.
 * GroupedLinear and GroupedLinearWgrad loop over the experts: the rows per expert are data on
 * the device, so a run copies them to the host (waiting for the stream) and asks the heuristic
 * per expert, whose sizes change with every step.
 */
#include "runtime/cuda/gemm.h" // f8_cuda_gemms, f8_cuda_gemms_create, f8_cuda_gemm_run

#include <assert.h> // static_assert
#include <stdarg.h> // va_list, va_start, va_end
#include <stdio.h>  // vsnprintf
#include <stdlib.h> // getenv
#include <string.h> // memset, strcmp

#include "ir/alloc.h"               // f8_calloc, f8_free
#include "ir/dtype.h"               // f8_dtype_get_info, f8_dtype_name, f8_dtype_is_fp8
#include "ir/gemm.h"                // f8_gemm_kind_of, f8_gemm_sizes
#include "ir/ops.h"                 // F8_OP_*, f8_op_get_info, f8_node_attr_*
#include "ir/shape.h"               // f8_dim_evaluate, F8_MAX_RANK
#include "runtime/cuda/driver.h"    // f8_cuda_alloc, f8_cuda_free, f8_cuda_copy_*, f8_cuda_memset_async
#include "runtime/cuda/gemm_lt.h"   // f8_cuda_lt, f8_cuda_lt_call, f8_cuda_product
#include "runtime/cuda/libraries.h" // f8_cuda_api, f8_cuda_load

enum {
	WORKSPACE_BYTES = 32 << 20, // TransformerEngine's on Hopper (GPU-FACTS.md 1.7)
	ALIGNMENT = 256,            // of the slab, the leaves, cuMemAlloc, and cuBLASLt's default
	N_ONES = 4,                 // vectors of ones: f32, bf16, f16, f64
};

/* A value's dims with the symbols bound. */
typedef struct shape {
	int rank;
	int64_t dims[F8_MAX_RANK];
} shape;

/* How a vector is broadcast into D before the GEMM accumulates onto it (the file comment). */
typedef enum fill_kind { FILL_NONE, FILL_ROW, FILL_COLUMN, FILL_SCALAR } fill_kind;

/* How an FP8 operand is scaled (cuBLASLt's scale mode for each: plan_fp8). */
typedef enum scale_kind {
	SCALE_TENSOR,
	SCALE_ROWWISE,
	SCALE_1X128,
	SCALE_128X128,
	SCALE_KIND_COUNT
} scale_kind;

static const char *const scale_names[] = {"per tensor", "rowwise", "1x128", "128x128"};
static_assert(sizeof scale_names / sizeof scale_names[0] == SCALE_KIND_COUNT,
	      "one name per scale_kind");

/* An FP8 operand's scale_inv as cuBLASLt reads it: the IR's grid, or its rearrangement. */
typedef struct fp8_scale {
	scale_kind kind;
	bool rearranged;                 // into scratch by cublasLtMatrixTransform at each run
	bool transposed;                 // 1x128: (rows, blocks) becomes (blocks, rows)
	cublasLtMatrixLayout_t from, to; // the grid and its rearrangement, column-major views
	uint64_t scratch;                // byte offset of the rearrangement in gemms->memory
} fp8_scale;

typedef enum plan_kind { PLAN_DENSE, PLAN_GROUPED, PLAN_GROUPED_WGRAD } plan_kind;

/* One GEMM node, planned. */
typedef struct gemm_plan {
	f8_node_id node;
	plan_kind kind;
	bool fp8;
	int64_t m, n, k;            // ir/gemm.h's sizes, for messages
	uint32_t p_input, q_input;  // the inputs that are P and Q
	f8_cuda_lt_call main;
	bool skip_main;             // K = 0: Y is zero (or the broadcast bias)
	uint32_t n_runs;            // calls of `main`, each at the offsets of `runs`
	int64_t *runs;              // (3 n_runs) element offsets of P, Q and Y
	uint32_t bias_input;        // the bias, F8_NONE for none
	bool bias_epilogue;         // added by CUBLASLT_EPILOGUE_BIAS, else broadcast by `fill`
	uint32_t c_input;           // Gemm's C read as cuBLASLt's C, F8_NONE when not
	fill_kind fill;
	uint32_t fill_input;        // the broadcast vector or scalar
	f8_cuda_lt_call fills[2];
	uint32_t n_fills;
	uint64_t fill_scratch;      // FILL_SCALAR: the row of scalars, offset in gemms->memory
	fp8_scale scales[2];        // P's (a) and Q's (b)
	int64_t experts, rows;      // grouped: the experts and the rows of x
	int64_t *counts;            // (experts) grouped: the rows per expert, read each run
} gemm_plan;

struct f8_cuda_gemms {
	const f8_graph *graph;
	const int64_t *symbol_values;
	f8_cuda_lt lt;                               // handle, preference, workspace, stream
	cublasLtMatrixTransformDesc_t transforms[2]; // [0] copies, [1] transposes
	CUdeviceptr memory;                          // the ones, then the plans' scratch
	uint64_t memory_bytes, scratch_bytes;
	uint64_t ones[N_ONES];                       // byte offsets of the ones in `memory`
	int64_t ones_length;
	gemm_plan *plans;                            // (n_plans)
	uint32_t n_plans;
	uint32_t *plan_of;                           // (graph->n_nodes) plan index + 1, 0: none
};

/* Small helpers. */

static size_t dtype_bytes(f8_dtype dtype) {
	return f8_dtype_get_info(dtype)->bytes;
}

static uint64_t round_up(uint64_t n, uint64_t to) {
	return (n + to - 1) / to * to;
}

/* The largest power of two up to ALIGNMENT that divides `bytes`. */
static uint32_t alignment_of(uint64_t bytes) {
	uint32_t alignment = ALIGNMENT;
	while (alignment > 1 && bytes % alignment)
		alignment /= 2;
	return alignment;
}

/* The slot of `dtype` among the vectors of ones, -1 when it has none. */
static int ones_slot(f8_dtype dtype) {
	switch (dtype) {
	case F8_DTYPE_F32: return 0;
	case F8_DTYPE_BF16: return 1;
	case F8_DTYPE_F16: return 2;
	case F8_DTYPE_F64: return 3;
	default: return -1;
	}
}

/* Fails `plan`'s node: the message, then its sizes and dtypes; the diagnostic names the node. */
static f8_status plan_fail(const f8_cuda_gemms *gemms, const gemm_plan *plan, f8_status status,
			   f8_diag *diag, const char *format, ...) __attribute__((format(printf, 5, 6)));
static f8_status plan_fail(const f8_cuda_gemms *gemms, const gemm_plan *plan, f8_status status,
			   f8_diag *diag, const char *format, ...) {
	const f8_graph *graph = gemms->graph;
	const f8_node *node = &graph->nodes[plan->node];
	char what[F8_DIAG_MESSAGE_MAX];
	va_list args;
	va_start(args, format);
	vsnprintf(what, sizeof what, format, args);
	va_end(args);
	f8_diag_set(diag, status, "%s (%s: m=%lld n=%lld k=%lld, %s x %s -> %s)", what,
		    f8_op_name(node->op), (long long)plan->m, (long long)plan->n,
		    (long long)plan->k, f8_dtype_name(graph->values[node->inputs[0]].type.dtype),
		    f8_dtype_name(graph->values[node->inputs[1]].type.dtype),
		    f8_dtype_name(graph->values[node->outputs[0]].type.dtype));
	f8_diag_set_node(diag, graph, plan->node);
	return status;
}

/* A failure of a call made for `plan` (its message in `diag`), with the node and its sizes. */
static f8_status plan_failed(const f8_cuda_gemms *gemms, const gemm_plan *plan, f8_status status,
			     f8_diag *diag) {
	if (!status || !diag || diag->node[0]) // no failure, or one that names the node already
		return status;
	char message[F8_DIAG_MESSAGE_MAX];
	snprintf(message, sizeof message, "%s", diag->message);
	return plan_fail(gemms, plan, status, diag, "%s", message);
}

/* The dims of value `id` with the symbols bound; false when one does not evaluate. */
static bool value_shape(const f8_cuda_gemms *gemms, f8_value_id id, shape *out) {
	const f8_type *type = &gemms->graph->values[id].type;
	out->rank = type->shape.rank;
	for (int d = 0; d < out->rank; d++)
		if (!f8_dim_evaluate(type->shape.dims[d], gemms->symbol_values, &out->dims[d]) ||
		    out->dims[d] < 0)
			return false;
	return true;
}

static int64_t dims_product(const shape *s, int from, int to) {
	int64_t n = 1;
	for (int d = from; d < to; d++)
		n *= s->dims[d];
	return n;
}

/* ir/gemm.h's (m, n, k) of the node, with the symbols bound where f8_gemm_sizes has none. */
static void message_sizes(const f8_cuda_gemms *gemms, gemm_plan *plan) {
	const f8_graph *graph = gemms->graph;
	const f8_node *node = &graph->nodes[plan->node];
	if (f8_gemm_sizes(graph, node, &plan->m, &plan->n, &plan->k))
		return;
	shape a = {0}, b = {0}, y = {0};
	value_shape(gemms, node->inputs[0], &a);
	value_shape(gemms, node->inputs[1], &b);
	value_shape(gemms, node->outputs[0], &y);
	bool wgrad = node->op == F8_OP_LINEAR_WGRAD || node->op == F8_OP_GROUPED_LINEAR_WGRAD;
	if (wgrad && f8_node_attr_int(node, "transpose_weight", 0)) { // x^T dy: (K, N)
		shape dy = a;
		a = b, b = dy;
	}
	plan->m = wgrad ? a.dims[a.rank - 1] : dims_product(&y, 0, y.rank - 1);
	plan->n = wgrad ? b.dims[b.rank - 1] : y.dims[y.rank - 1];
	plan->k = wgrad ? dims_product(&a, 0, a.rank - 1) : a.dims[a.rank - 1];
}

/* As call_choose, with "no algorithm" a failure of `plan` naming what was asked. */
static f8_status call_choose_or_fail(f8_cuda_gemms *gemms, const gemm_plan *plan, f8_cuda_lt_call *call,
				     const uint32_t alignments[4], const char *what, f8_diag *diag) {
	bool found;
	char why[64] = "";
	f8_status status = f8_cuda_lt_call_choose(&gemms->lt, call, alignments, &found, why,
						  sizeof why, diag);
	if (status || found)
		return plan_failed(gemms, plan, status, diag);
	const f8_cuda_product *p = &call->shape;
	status = plan_fail(gemms, plan, F8_ERR_UNSUPPORTED, diag,
			   "cuBLASLt's heuristic has no algorithm for %s (cuBLASLt m=%lld n=%lld "
			   "k=%lld, batch %d, alignments %u/%u/%u bytes: %s)", what,
			   (long long)p->n, (long long)p->m, (long long)p->k, (int)p->batch,
			   alignments[0], alignments[1], alignments[3], why);
	f8_diag_hint(diag, "run with CUBLASLT_LOG_LEVEL=5 to see cuBLASLt's reason; the compiler "
			   "should have padded a shape cuBLASLt refuses");
	return status;
}

/* Bias, C and the broadcast fills. */

/* Byte offset of `bytes` of scratch for a plan in gemms->memory (after the ones, placed later). */
static uint64_t scratch_take(f8_cuda_gemms *gemms, uint64_t bytes) {
	uint64_t at = gemms->scratch_bytes;
	gemms->scratch_bytes += round_up(bytes ? bytes : 1, ALIGNMENT);
	return at;
}

/* Plans the rank-1 GEMMs of plan->fill into Y (m, n), row pitch n, of `dtype`. */
static f8_status plan_fill(f8_cuda_gemms *gemms, gemm_plan *plan, f8_dtype dtype, int64_t m,
			   int64_t n, f8_diag *diag) {
	static const uint32_t aligned[4] = {ALIGNMENT, ALIGNMENT, ALIGNMENT, ALIGNMENT};
	if (ones_slot(dtype) < 0)
		return plan_fail(gemms, plan, F8_ERR_UNSUPPORTED, diag,
				 "a broadcast of %s has no cuBLASLt GEMM", f8_dtype_name(dtype));
	// Y (m, n) = P (m, 1) Q (1, n); a scalar first becomes a row: (1, n) = c (1, 1) ones (1, n).
	f8_cuda_product row = {.p_dtype = dtype, .q_dtype = dtype, .y_dtype = dtype, .m = m,
			       .n = n, .k = 1, .ld_p = 1, .ld_q = n, .ld_y = n, .batch = 1};
	f8_cuda_product scalar_row = row;
	scalar_row.m = 1;
	plan->n_fills = 0;
	f8_status status = F8_OK;
	if (plan->fill == FILL_SCALAR) {
		plan->fill_scratch = scratch_take(gemms, (uint64_t)n * dtype_bytes(dtype));
		status = f8_cuda_lt_call_create(&scalar_row, &plan->fills[plan->n_fills++], diag);
	}
	if (!status)
		status = f8_cuda_lt_call_create(&row, &plan->fills[plan->n_fills++], diag);
	for (uint32_t i = 0; !status && i < plan->n_fills; i++)
		status = call_choose_or_fail(gemms, plan, &plan->fills[i], aligned,
					     "the broadcast of the bias or C", diag);
	if (gemms->ones_length < (m > n ? m : n))
		gemms->ones_length = m > n ? m : n;
	return plan_failed(gemms, plan, status, diag);
}

/*
 * Finishes plan->main: the bias by the BIAS epilogue where `epilogue` allows it and the
 * heuristic finds an algorithm with it, else by a fill; then the algorithm for `alignments`
 * and the fills.
 */
static f8_status plan_terms(f8_cuda_gemms *gemms, gemm_plan *plan, bool epilogue,
			    const uint32_t alignments[4], f8_diag *diag) {
	f8_cuda_lt_call *call = &plan->main;
	const f8_cuda_product *p = &call->shape;
	f8_status status = F8_OK;
	if (plan->bias_input != F8_NONE && epilogue && !plan->skip_main) {
		uint32_t mode = CUBLASLT_EPILOGUE_BIAS;
		status = f8_cuda_lt_desc_set(call->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &mode,
					     sizeof mode, diag);
		if (!status) // the heuristic reads the pointer's alignment: an aligned stand-in
			status = f8_cuda_lt_desc_set_pointer(call->desc,
							     CUBLASLT_MATMUL_DESC_BIAS_POINTER,
							     gemms->lt.workspace, diag);
		bool found = false;
		char why[64];
		if (!status)
			status = f8_cuda_lt_call_choose(&gemms->lt, call, alignments, &found, why,
							sizeof why, diag);
		if (status || found) {
			plan->bias_epilogue = found;
			return plan_failed(gemms, plan, status, diag);
		}
		mode = CUBLASLT_EPILOGUE_DEFAULT;
		status = f8_cuda_lt_desc_set(call->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &mode,
					     sizeof mode, diag);
	}
	if (!status && plan->bias_input != F8_NONE) {
		plan->fill = FILL_ROW;
		plan->fill_input = plan->bias_input;
		call->beta = 1.0;
	}
	if (!status && !plan->skip_main)
		status = call_choose_or_fail(gemms, plan, call, alignments, "the GEMM", diag);
	if (!status && plan->fill != FILL_NONE)
		status = plan_fill(gemms, plan, p->y_dtype, p->m, p->n, diag);
	return plan_failed(gemms, plan, status, diag);
}

/* The dense ops: Linear, LinearWgrad, Gemm, MatMul. */

static f8_status require_dtypes(const f8_cuda_gemms *gemms, const gemm_plan *plan,
				const f8_cuda_product *p, f8_diag *diag) {
	f8_dtype dtypes[3] = {p->p_dtype, p->q_dtype, p->y_dtype};
	for (int i = 0; i < 3; i++)
		if (ones_slot(dtypes[i]) < 0 || dtypes[i] != p->y_dtype)
			return plan_fail(gemms, plan, F8_ERR_UNSUPPORTED, diag,
					 "cuBLASLt runs f32, bf16, f16 and f64 GEMMs of one dtype "
					 "here (FP8 through FP8Gemm)");
	return F8_OK;
}

/* A product of one call at offset 0, its pointers at the slab's alignment. */
static f8_status plan_single(f8_cuda_gemms *gemms, gemm_plan *plan, const f8_cuda_product *p,
			     bool epilogue, f8_diag *diag) {
	static const uint32_t aligned[4] = {ALIGNMENT, ALIGNMENT, ALIGNMENT, ALIGNMENT};
	plan->n_runs = 1;
	plan->runs = f8_calloc(3, sizeof *plan->runs);
	if (!plan->runs)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory planning a GEMM");
	plan->skip_main = p->k == 0;
	f8_status status = require_dtypes(gemms, plan, p, diag);
	if (!status)
		status = plan_failed(gemms, plan, f8_cuda_lt_call_create(p, &plan->main, diag), diag);
	if (!status)
		status = plan_terms(gemms, plan, epilogue, aligned, diag);
	return status;
}

static f8_status plan_linear(f8_cuda_gemms *gemms, gemm_plan *plan, const f8_node *node,
			     const shape *x, const shape *y, f8_diag *diag) {
	const f8_graph *graph = gemms->graph;
	bool transposed = f8_node_attr_int(node, "transpose_weight", 0);
	f8_dtype dtype = graph->values[node->outputs[0]].type.dtype;
	int64_t k = x->dims[x->rank - 1], n = y->dims[y->rank - 1];
	// y = x w^T for w (N, K); y = x w for w (K, N).
	f8_cuda_product p = {.p_dtype = dtype, .q_dtype = dtype, .y_dtype = dtype,
		     .m = dims_product(x, 0, x->rank - 1), .n = n, .k = k, .trans_q = !transposed,
		     .ld_p = k, .ld_q = transposed ? n : k, .ld_y = n, .batch = 1};
	plan->p_input = 0;
	plan->q_input = 1;
	if (node->n_inputs > 2 && node->inputs[2] != F8_NONE)
		plan->bias_input = 2;
	return plan_single(gemms, plan, &p, true, diag);
}

static f8_status plan_linear_wgrad(f8_cuda_gemms *gemms, gemm_plan *plan, const f8_node *node,
				   const shape *dy, const shape *x, f8_diag *diag) {
	f8_dtype dtype = gemms->graph->values[node->outputs[0]].type.dtype;
	bool transposed = f8_node_attr_int(node, "transpose_weight", 0);
	int64_t rows = dims_product(x, 0, x->rank - 1);
	int64_t n_dy = dy->dims[dy->rank - 1], k_x = x->dims[x->rank - 1];
	// dw (N, K) = dy^T x; transposed (K, N) = x^T dy: P is stored (rows, m), Q (rows, n).
	int64_t m = transposed ? k_x : n_dy, n = transposed ? n_dy : k_x;
	f8_cuda_product p = {.p_dtype = dtype, .q_dtype = dtype, .y_dtype = dtype, .m = m, .n = n,
		     .k = rows, .trans_p = true, .ld_p = m, .ld_q = n, .ld_y = n, .batch = 1};
	plan->p_input = transposed ? 1 : 0;
	plan->q_input = transposed ? 0 : 1;
	return plan_single(gemms, plan, &p, false, diag);
}

/* ONNX Gemm: y = alpha op(A) op(B) + beta C, C read as cuBLASLt's C when it is the whole
 * (M, N), else broadcast into D first. */
static f8_status plan_gemm(f8_cuda_gemms *gemms, gemm_plan *plan, const f8_node *node,
			   const shape *a, const shape *b, const shape *y, f8_diag *diag) {
	f8_dtype dtype = gemms->graph->values[node->outputs[0]].type.dtype;
	bool trans_a = f8_node_attr_int(node, "transA", 0);
	bool trans_b = f8_node_attr_int(node, "transB", 0);
	int64_t m = y->dims[0], n = y->dims[1];
	f8_cuda_product p = {.p_dtype = dtype, .q_dtype = dtype, .y_dtype = dtype, .m = m, .n = n,
		     .k = a->dims[trans_a ? 0 : 1], .trans_p = trans_a, .trans_q = trans_b,
		     .ld_p = a->dims[1], .ld_q = b->dims[1], .ld_y = n, .batch = 1};
	plan->p_input = 0;
	plan->q_input = 1;
	bool has_c = node->n_inputs > 2 && node->inputs[2] != F8_NONE;
	shape c = {0};
	if (has_c && !value_shape(gemms, node->inputs[2], &c))
		return plan_fail(gemms, plan, F8_ERR_ARGUMENT, diag,
				 "C has a size that does not evaluate");
	int64_t c_numel = dims_product(&c, 0, c.rank);
	if (has_c && c_numel == m * n)
		plan->c_input = 2;
	else if (has_c && c_numel == n && c.rank >= 1 && c.dims[c.rank - 1] == n)
		plan->fill = FILL_ROW;
	else if (has_c && c.rank == 2 && c.dims[0] == m && c.dims[1] == 1)
		plan->fill = FILL_COLUMN;
	else if (has_c)
		plan->fill = FILL_SCALAR;
	plan->fill_input = plan->fill != FILL_NONE ? 2 : F8_NONE;
	if (has_c && p.k == 0 && f8_node_attr_float(node, "beta", 1.0) != 1.0)
		return plan_fail(gemms, plan, F8_ERR_UNSUPPORTED, diag,
				 "a Gemm with K = 0 and a C scaled by beta has no cuBLASLt GEMM");
	f8_status status = plan_single(gemms, plan, &p, false, diag);
	plan->main.alpha = f8_node_attr_float(node, "alpha", 1.0);
	plan->main.beta = has_c ? f8_node_attr_float(node, "beta", 1.0) : 0.0;
	return status;
}

/* One batch dim of a MatMul after collapsing: its size and each operand's stride (P, Q, Y). */
typedef struct batch_dim {
	int64_t size;
	int64_t strides[3];
} batch_dim;

/* MatMul's batch dims, broadcast (stride 0) where an operand has 1, collapsed where one stride
 * continues the next, size-1 dims dropped; the count into *n. */
static void matmul_batch(const shape *a, const shape *b, const shape *y, int64_t m, int64_t n,
			 int64_t k, batch_dim *out, int *n_out) {
	int a_batch = a->rank > 2 ? a->rank - 2 : 0, b_batch = b->rank > 2 ? b->rank - 2 : 0;
	int y_batch = y->rank - (a->rank > 1) - (b->rank > 1);
	batch_dim dims[F8_MAX_RANK];
	int64_t pitch[3] = {m * k, k * n, m * n};
	for (int i = y_batch - 1; i >= 0; i--) {
		int ia = i - (y_batch - a_batch), ib = i - (y_batch - b_batch);
		int64_t sizes[3] = {ia >= 0 ? a->dims[ia] : 1, ib >= 0 ? b->dims[ib] : 1, y->dims[i]};
		dims[i].size = y->dims[i];
		for (int x = 0; x < 3; x++) {
			dims[i].strides[x] = sizes[x] == 1 ? 0 : pitch[x];
			pitch[x] *= sizes[x];
		}
	}
	int count = 0;
	for (int i = 0; i < y_batch; i++) {
		if (dims[i].size == 1)
			continue;
		batch_dim *outer = count ? &out[count - 1] : NULL;
		bool merges = outer != NULL;
		for (int x = 0; merges && x < 3; x++)
			merges = outer->strides[x] == dims[i].strides[x] * dims[i].size;
		if (merges) {
			outer->size *= dims[i].size;
			for (int x = 0; x < 3; x++)
				outer->strides[x] = dims[i].strides[x];
		} else {
			out[count++] = dims[i];
		}
	}
	*n_out = count;
}

static f8_status plan_matmul(f8_cuda_gemms *gemms, gemm_plan *plan, const f8_node *node,
			     const shape *a, const shape *b, const shape *y, f8_diag *diag) {
	f8_dtype dtype = gemms->graph->values[node->outputs[0]].type.dtype;
	// A vector operand is a (1, K) or (K, 1) matrix whose unit dim the result drops.
	int64_t k = a->dims[a->rank - 1], m = a->rank > 1 ? a->dims[a->rank - 2] : 1;
	int64_t n = b->rank > 1 ? b->dims[b->rank - 1] : 1;
	batch_dim dims[F8_MAX_RANK];
	int n_dims;
	matmul_batch(a, b, y, m, n, k, dims, &n_dims);
	f8_cuda_product p = {.p_dtype = dtype, .q_dtype = dtype, .y_dtype = dtype, .m = m, .n = n,
			     .k = k, .ld_p = k, .ld_q = n, .ld_y = n, .batch = 1};
	if (n_dims > 0) { // the innermost batch dim: one strided-batched call
		batch_dim *inner = &dims[--n_dims];
		bool folds = inner->strides[1] == 0 && inner->strides[0] == m * k &&
			     inner->strides[2] == m * n;
		if (folds) {
			p.m *= inner->size; // x @ W: the batch folds into m, one GEMM
		} else if (inner->size > INT32_MAX) {
			return plan_fail(gemms, plan, F8_ERR_UNSUPPORTED, diag,
					 "a batch of %lld is more than cuBLASLt counts",
					 (long long)inner->size);
		} else {
			p.batch = (int32_t)inner->size;
			p.stride_p = inner->strides[0];
			p.stride_q = inner->strides[1];
			p.stride_y = inner->strides[2];
		}
	}
	int64_t runs = 1;
	for (int i = 0; i < n_dims; i++)
		runs *= dims[i].size;
	plan->p_input = 0;
	plan->q_input = 1;
	plan->skip_main = k == 0;
	plan->n_runs = dims_product(y, 0, y->rank) ? (uint32_t)runs : 0;
	plan->runs = f8_calloc(3 * (size_t)runs, sizeof *plan->runs);
	if (!plan->runs)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory planning a MatMul");
	// Each run's offsets: its index in mixed radix over the outer dims. The pointers'
	// alignment is what every run's offsets and the batch strides leave of the slab's.
	size_t bytes = dtype_bytes(dtype);
	uint32_t alignments[4] = {ALIGNMENT, ALIGNMENT, ALIGNMENT, ALIGNMENT};
	int64_t strides_of[3] = {p.stride_p, p.stride_q, p.stride_y};
	for (int64_t r = 0; r < runs; r++) {
		int64_t rest = r;
		for (int i = n_dims - 1; i >= 0; i--) {
			int64_t at = rest % dims[i].size;
			rest /= dims[i].size;
			for (int x = 0; x < 3; x++)
				plan->runs[3 * r + x] += at * dims[i].strides[x];
		}
	}
	for (int64_t r = 0; r < runs; r++)
		for (int x = 0; x < 3; x++) {
			uint64_t offsets[2] = {(uint64_t)plan->runs[3 * r + x] * bytes,
					       (uint64_t)strides_of[x] * bytes};
			int slot = x == 0 ? 1 : x == 1 ? 0 : 3; // P is cuBLASLt's B, Q its A
			for (int o = 0; o < 2; o++)
				if (alignment_of(offsets[o]) < alignments[slot])
					alignments[slot] = alignment_of(offsets[o]);
		}
	alignments[2] = alignments[3];
	f8_status status = require_dtypes(gemms, plan, &p, diag);
	if (!status)
		status = plan_failed(gemms, plan, f8_cuda_lt_call_create(&p, &plan->main, diag), diag);
	if (!status)
		status = plan_terms(gemms, plan, false, alignments, diag);
	return status;
}

/* FP8Gemm. */

/* The scale kind of an operand under its block attribute, for (rows, k); false for a block
 * with no cuBLASLt scale mode on sm_90. */
static bool scale_kind_of(const f8_node *node, const char *attribute, int64_t k,
			  scale_kind *out) {
	const f8_attr *block = f8_node_attr(node, attribute);
	if (!block) {
		*out = SCALE_TENSOR;
		return true;
	}
	int64_t rows = block->ints.items[0], cols = block->ints.items[1];
	if (rows == 0 && cols == 0)
		*out = SCALE_TENSOR;
	else if (rows == 1 && cols == 128)
		*out = SCALE_1X128;
	else if (rows == 128 && cols == 128)
		*out = SCALE_128X128;
	else if (rows == 1 && (cols == 0 || cols >= k))
		*out = SCALE_ROWWISE;
	else
		return false;
	return true;
}

/* How operand `which` (0: a, 1: b) of (rows, k) gives cuBLASLt its scales: the grid where its
 * layout is cuBLASLt's, else a rearrangement into scratch (the file comment). */
static f8_status plan_fp8_scale(f8_cuda_gemms *gemms, gemm_plan *plan, int which, int64_t rows,
				int64_t k, f8_diag *diag) {
	fp8_scale *scale = &plan->scales[which];
	int64_t k_blocks = (k + 127) / 128, row_blocks = (rows + 127) / 128;
	int64_t padded = (int64_t)round_up((uint64_t)k_blocks, 4);
	if (scale->kind == SCALE_1X128 && k_blocks > 1 && rows > 1) {
		// (rows, blocks) row-major is (blocks x rows) column-major; cuBLASLt reads its
		// transpose, (rows x blocks) with the rows contiguous.
		scale->rearranged = scale->transposed = true;
		scale->scratch = scratch_take(gemms, (uint64_t)(rows * k_blocks) * sizeof(float));
		f8_status status = f8_cuda_lt_layout_create(&scale->from, F8_DTYPE_F32, k_blocks,
							    rows, k_blocks, 1, 0, diag);
		if (!status)
			status = f8_cuda_lt_layout_create(&scale->to, F8_DTYPE_F32, rows, k_blocks,
							  rows, 1, 0, diag);
		return plan_failed(gemms, plan, status, diag);
	}
	if (scale->kind == SCALE_128X128 && row_blocks > 1 && k_blocks % 4) {
		// Each row of blocks padded to a multiple of 4 scales: the same (blocks x row
		// blocks) column-major matrix with a longer leading dimension.
		scale->rearranged = true;
		scale->scratch = scratch_take(gemms, (uint64_t)(padded * row_blocks) * sizeof(float));
		f8_status status = f8_cuda_lt_layout_create(&scale->from, F8_DTYPE_F32, k_blocks,
							    row_blocks, k_blocks, 1, 0, diag);
		if (!status)
			status = f8_cuda_lt_layout_create(&scale->to, F8_DTYPE_F32, k_blocks,
							  row_blocks, padded, 1, 0, diag);
		return plan_failed(gemms, plan, status, diag);
	}
	return F8_OK;
}

/* The rules of cuBLASLt's FP8 GEMMs on sm_90 that the plan's shapes must meet
 * (GPU-FACTS.md 1.2, 1.6): both operands K-major with K % 16 (lda and ldb), scale kinds that
 * pair, f32 scale_invs, and for block scales TransformerEngine's m % 8 and n % 8. */
static f8_status check_fp8(const f8_cuda_gemms *gemms, const gemm_plan *plan, const f8_node *node,
			   int64_t m, int64_t n, int64_t k, f8_diag *diag) {
	const f8_graph *graph = gemms->graph;
	const scale_kind a = plan->scales[0].kind, b = plan->scales[1].kind;
	f8_status status = F8_OK;
	if (k % 16)
		status = plan_fail(gemms, plan, F8_ERR_UNSUPPORTED, diag,
				   "FP8 GEMMs on sm_90 need K, the leading dimension of both K-major "
				   "operands, to be a multiple of 16; it is %lld", (long long)k);
	for (uint32_t i = 2; !status && i < 4; i++)
		if (graph->values[node->inputs[i]].type.dtype != F8_DTYPE_F32)
			status = plan_fail(gemms, plan, F8_ERR_UNSUPPORTED, diag,
					   "the scale_inv of %s is %s: MX scales (e8m0) need sm_100",
					   i == 2 ? "a" : "b",
					   f8_dtype_name(graph->values[node->inputs[i]].type.dtype));
	bool blocks = a >= SCALE_1X128 && b >= SCALE_1X128;
	if (!status && !(a == b && a <= SCALE_ROWWISE) && !(blocks && !(a == SCALE_128X128 &&
								       b == SCALE_128X128)))
		status = plan_fail(gemms, plan, F8_ERR_UNSUPPORTED, diag,
				   "a is scaled %s and b %s; cuBLASLt on sm_90 pairs per tensor with "
				   "per tensor, rowwise with rowwise, and 1x128 with 1x128 or 128x128",
				   scale_names[a], scale_names[b]);
	if (!status && blocks && (n % 8 || (a == SCALE_1X128 && m % 8)))
		status = plan_fail(gemms, plan, F8_ERR_UNSUPPORTED, diag,
				   "block-scaled FP8 GEMMs need n %% 8 == 0, and m %% 8 == 0 when a "
				   "has 1x128 scales");
	if (status)
		f8_diag_hint(diag, "the compiler pads FP8 GEMM operands it plans (fp8-cast) or "
				   "keeps the GEMM in high precision; recompile the plan");
	return status;
}

static f8_status plan_fp8(f8_cuda_gemms *gemms, gemm_plan *plan, const f8_node *node,
			  const shape *a, f8_diag *diag) {
	static const uint32_t aligned[4] = {ALIGNMENT, ALIGNMENT, ALIGNMENT, ALIGNMENT};
	static const int32_t modes[SCALE_KIND_COUNT] = {
		[SCALE_TENSOR] = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F,
		[SCALE_ROWWISE] = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F,
		[SCALE_1X128] = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F,
		[SCALE_128X128] = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F};
	const f8_graph *graph = gemms->graph;
	f8_dtype to = graph->values[node->outputs[0]].type.dtype;
	int64_t k = a->dims[a->rank - 1], m = dims_product(a, 0, a->rank - 1);
	shape b;
	value_shape(gemms, node->inputs[1], &b);
	int64_t n = b.dims[0];
	plan->fp8 = true;
	plan->p_input = 0;
	plan->q_input = 1;
	if (node->n_inputs > 4 && node->inputs[4] != F8_NONE)
		plan->bias_input = 4;
	if (!scale_kind_of(node, "a_block", k, &plan->scales[0].kind) ||
	    !scale_kind_of(node, "b_block", k, &plan->scales[1].kind))
		return plan_fail(gemms, plan, F8_ERR_UNSUPPORTED, diag,
				 "its scale blocks have no cuBLASLt scale mode on sm_90 (per tensor, "
				 "rowwise [1, 0], 1x128 and 128x128 only)");
	f8_status status = check_fp8(gemms, plan, node, m, n, k, diag);
	if (status)
		return status;
	// y (m, n) = a (m, K) b (n, K)^T: TN on cuBLASLt's terms.
	f8_cuda_product p = {.p_dtype = graph->values[node->inputs[0]].type.dtype,
		     .q_dtype = graph->values[node->inputs[1]].type.dtype, .y_dtype = to, .m = m,
		     .n = n, .k = k, .trans_q = true, .ld_p = k, .ld_q = k, .ld_y = n, .batch = 1};
	plan->n_runs = 1;
	plan->runs = f8_calloc(3, sizeof *plan->runs);
	if (!plan->runs)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory planning an FP8Gemm");
	plan->skip_main = k == 0;
	status = plan_failed(gemms, plan, f8_cuda_lt_call_create(&p, &plan->main, diag), diag);
	// Fast accumulation for the forward GEMM of the per-tensor and rowwise recipes, split
	// accumulation for dgrad and wgrad (TransformerEngine's defaults) and for block scales,
	// which cuBLASLt and PyTorch run only so (GPU-FACTS.md 1.4).
	f8_gemm_kind kind = F8_GEMM_KIND_FWD;
	f8_gemm_kind_of(node, &kind);
	int8_t fast = kind == F8_GEMM_KIND_FWD && plan->scales[0].kind <= SCALE_ROWWISE;
	// F8C_CUDA_FAST_ACCUM=0: split accumulation everywhere, to tell its share of a difference.
	const char *fast_accum = getenv("F8C_CUDA_FAST_ACCUM");
	if (fast_accum && strcmp(fast_accum, "0") == 0)
		fast = 0;
	cublasLtMatmulDesc_t desc = plan->main.desc;
	if (!status)
		status = f8_cuda_lt_desc_set(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast,
					     sizeof fast, diag);
	// cuBLASLt's A is b, its B is a; the scale pointers are set by each run.
	static const cublasLtMatmulDescAttributes_t mode_of[2] = {
		CUBLASLT_MATMUL_DESC_A_SCALE_MODE, CUBLASLT_MATMUL_DESC_B_SCALE_MODE};
	static const cublasLtMatmulDescAttributes_t pointer_of[2] = {
		CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER};
	for (int i = 0; !status && i < 2; i++) { // i: cuBLASLt's A, B
		const int32_t *mode = &modes[plan->scales[1 - i].kind];
		status = f8_cuda_lt_desc_set(desc, mode_of[i], mode, sizeof *mode, diag);
		if (!status)
			status = f8_cuda_lt_desc_set_pointer(desc, pointer_of[i], gemms->lt.workspace,
							     diag);
	}
	if (!status)
		status = plan_fp8_scale(gemms, plan, 0, m, k, diag);
	if (!status)
		status = plan_fp8_scale(gemms, plan, 1, n, k, diag);
	if (status)
		return plan_failed(gemms, plan, status, diag);
	// cuBLASLt takes the bias of an FP8 GEMM in D's dtype for bf16 and f16 outputs; for an
	// f32 output only in bf16, so an f32 bias is broadcast into D first.
	return plan_terms(gemms, plan, to != F8_DTYPE_F32, aligned, diag);
}

/* GroupedLinear and GroupedLinearWgrad: their layouts, whose columns each expert sets. */
static f8_status plan_grouped(f8_cuda_gemms *gemms, gemm_plan *plan, const f8_node *node,
			      f8_diag *diag) {
	const f8_graph *graph = gemms->graph;
	f8_dtype dtype = graph->values[node->outputs[0]].type.dtype;
	f8_dtype counts = graph->values[node->inputs[2]].type.dtype;
	bool transposed = f8_node_attr_int(node, "transpose_weight", 0);
	shape in0, in1, y;
	value_shape(gemms, node->inputs[0], &in0);
	value_shape(gemms, node->inputs[1], &in1);
	value_shape(gemms, node->outputs[0], &y);
	f8_cuda_product p = {.p_dtype = dtype, .q_dtype = dtype, .y_dtype = dtype, .batch = 1};
	plan->rows = in0.dims[0];
	if (node->op == F8_OP_GROUPED_LINEAR) {
		// y rows of expert e = x rows (m_e, K) w[e]^T, or x rows w[e] for (K, N) weights.
		plan->kind = PLAN_GROUPED;
		plan->experts = in1.dims[0];
		p.n = y.dims[1];
		p.k = in0.dims[1];
		p.m = plan->rows > 0 ? plan->rows : 1; // per expert at each run
		p.trans_q = !transposed;
		p.ld_p = p.k;
		p.ld_q = transposed ? p.n : p.k;
		p.ld_y = p.n;
		plan->p_input = 0;
		plan->q_input = 1;
	} else {
		// dw[e] = dy_e^T x_e (N, K), or x_e^T dy_e (K, N): P (count, m), Q (count, n).
		plan->kind = PLAN_GROUPED_WGRAD;
		plan->experts = y.dims[0];
		p.m = y.dims[1];
		p.n = y.dims[2];
		p.k = plan->rows > 0 ? plan->rows : 1; // per expert at each run
		p.trans_p = true;
		p.ld_p = p.m;
		p.ld_q = p.n;
		p.ld_y = p.n;
		plan->p_input = transposed ? 1 : 0;
		plan->q_input = transposed ? 0 : 1;
	}
	if (f8_dtype_get_info(counts)->kind != F8_DTYPE_KIND_INT &&
	    f8_dtype_get_info(counts)->kind != F8_DTYPE_KIND_UINT)
		return plan_fail(gemms, plan, F8_ERR_UNSUPPORTED, diag, "the counts are not integers");
	plan->counts = f8_calloc((size_t)plan->experts + 1, sizeof(int64_t));
	if (!plan->counts)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory planning a grouped GEMM");
	f8_status status = require_dtypes(gemms, plan, &p, diag);
	if (!status)
		status = plan_failed(gemms, plan, f8_cuda_lt_call_create(&p, &plan->main, diag), diag);
	return status;
}

/* Plans GEMM node `id` into `plan`. */
static f8_status plan_node(f8_cuda_gemms *gemms, f8_node_id id, gemm_plan *plan, f8_diag *diag) {
	const f8_node *node = &gemms->graph->nodes[id];
	memset(plan, 0, sizeof *plan);
	plan->node = id;
	plan->bias_input = plan->c_input = plan->fill_input = F8_NONE;
	message_sizes(gemms, plan);
	shape in0, in1, y;
	if (!value_shape(gemms, node->inputs[0], &in0) || !value_shape(gemms, node->inputs[1], &in1) ||
	    !value_shape(gemms, node->outputs[0], &y))
		return plan_fail(gemms, plan, F8_ERR_ARGUMENT, diag,
				 "a size of its operands does not evaluate with the symbols bound");
	switch (node->op) {
	case F8_OP_LINEAR: return plan_linear(gemms, plan, node, &in0, &y, diag);
	case F8_OP_LINEAR_WGRAD: return plan_linear_wgrad(gemms, plan, node, &in0, &in1, diag);
	case F8_OP_MATMUL: return plan_matmul(gemms, plan, node, &in0, &in1, &y, diag);
	case F8_OP_GEMM: return plan_gemm(gemms, plan, node, &in0, &in1, &y, diag);
	case F8_OP_FP8_GEMM: return plan_fp8(gemms, plan, node, &in0, diag);
	case F8_OP_GROUPED_LINEAR:
	case F8_OP_GROUPED_LINEAR_WGRAD: return plan_grouped(gemms, plan, node, diag);
	case F8_OP_FP8_GROUPED_GEMM: {
		f8_status status = plan_fail(gemms, plan, F8_ERR_UNSUPPORTED, diag,
					     "the CUDA backend has no FP8 grouped GEMM yet: an MoE's "
					     "experts in FP8 (scaled per expert) run on the CPU "
					     "backend");
		f8_diag_hint(diag, "keep the experts in BF16 on the GPU: --fp8-exclude '*experts*'");
		return status;
	}
	default:
		return plan_fail(gemms, plan, F8_ERR_UNSUPPORTED, diag,
				 "the CUDA backend has no cuBLASLt plan for %s", f8_op_name(node->op));
	}
}

/* The plans' memory: the vectors of ones, then the scratch; the ones uploaded, the scratch
 * zeroed (the padding of rearranged scales is never written again). */
static f8_status make_memory(f8_cuda_gemms *gemms, f8_diag *diag) {
	static const f8_dtype dtypes[N_ONES] = {F8_DTYPE_F32, F8_DTYPE_BF16, F8_DTYPE_F16,
						F8_DTYPE_F64};
	static const uint16_t one_bf16 = 0x3F80, one_f16 = 0x3C00;
	int64_t length = gemms->ones_length;
	uint64_t at = 0;
	for (int i = 0; i < N_ONES; i++) {
		gemms->ones[i] = at;
		at += round_up((uint64_t)length * dtype_bytes(dtypes[i]), ALIGNMENT);
	}
	uint64_t scratch_at = at;
	gemms->memory_bytes = at + gemms->scratch_bytes;
	for (uint32_t p = 0; p < gemms->n_plans; p++) { // scratch offsets become offsets in memory
		gemm_plan *plan = &gemms->plans[p];
		plan->fill_scratch += scratch_at;
		for (int i = 0; i < 2; i++)
			plan->scales[i].scratch += scratch_at;
	}
	if (gemms->memory_bytes == 0)
		return F8_OK;
	f8_status status = f8_cuda_alloc(gemms->memory_bytes, &gemms->memory, diag);
	if (!status && gemms->scratch_bytes)
		status = f8_cuda_memset_async(gemms->memory + scratch_at, 0, gemms->scratch_bytes,
					      gemms->lt.stream, diag);
	if (status || length == 0)
		return status;
	void *host = f8_calloc((size_t)length, sizeof(double));
	if (!host)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory making vectors of ones");
	for (int i = 0; !status && i < N_ONES; i++) {
		for (int64_t j = 0; j < length; j++)
			switch (dtypes[i]) {
			case F8_DTYPE_F32: ((float *)host)[j] = 1.0f; break;
			case F8_DTYPE_BF16: ((uint16_t *)host)[j] = one_bf16; break;
			case F8_DTYPE_F16: ((uint16_t *)host)[j] = one_f16; break;
			default: ((double *)host)[j] = 1.0; break;
			}
		status = f8_cuda_copy_to_device(gemms->memory + gemms->ones[i], host,
						(size_t)length * dtype_bytes(dtypes[i]), diag);
	}
	f8_free(host);
	return status;
}

f8_status f8_cuda_gemms_create(const f8_graph *graph, const int64_t *symbol_values,
			       CUstream stream, f8_cuda_gemms **out, f8_diag *diag) {
	*out = NULL;
	if (graph->n_symbols && !symbol_values)
		return f8_diag_set(diag, F8_ERR_ARGUMENT,
				   "the graph has symbols but no values for them");
	f8_status status = f8_cuda_load(F8_CUDA_LIBRARY_CUBLASLT, diag);
	if (status)
		return status;
	f8_cuda_gemms *gemms = f8_calloc(1, sizeof *gemms);
	if (!gemms)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory planning the GEMMs");
	gemms->graph = graph;
	gemms->symbol_values = symbol_values;
	gemms->plan_of = f8_calloc(graph->n_nodes + 1, sizeof *gemms->plan_of);
	gemms->plans = f8_calloc(graph->n_order + 1, sizeof *gemms->plans);
	if (!gemms->plan_of || !gemms->plans) {
		f8_cuda_gemms_destroy(gemms);
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory planning the GEMMs");
	}
	status = f8_cuda_lt_open(&gemms->lt, stream, WORKSPACE_BYTES, diag);
	for (int i = 0; !status && i < 2; i++) {
		int32_t op = i ? CUBLAS_OP_T : CUBLAS_OP_N;
		status = f8_cuda_lt_check(f8_cuda_api.cublasLtMatrixTransformDescCreate(
						  &gemms->transforms[i], CUDA_R_32F),
					  "cublasLtMatrixTransformDescCreate", diag);
		if (!status)
			status = f8_cuda_lt_check(f8_cuda_api.cublasLtMatrixTransformDescSetAttribute(
							  gemms->transforms[i],
							  CUBLASLT_MATRIX_TRANSFORM_DESC_TRANSA, &op,
							  sizeof op),
						  "cublasLtMatrixTransformDescSetAttribute(TRANSA)", diag);
	}
	for (uint32_t i = 0; !status && i < graph->n_order; i++) {
		f8_node_id id = graph->order[i];
		if (!(f8_op_get_info(graph->nodes[id].op)->flags & F8_OPF_GEMM) || gemms->plan_of[id])
			continue;
		status = plan_node(gemms, id, &gemms->plans[gemms->n_plans++], diag);
		gemms->plan_of[id] = gemms->n_plans;
	}
	if (!status)
		status = make_memory(gemms, diag);
	if (status) {
		f8_cuda_gemms_destroy(gemms);
		return status;
	}
	*out = gemms;
	return F8_OK;
}

uint64_t f8_cuda_gemms_device_bytes(const f8_cuda_gemms *gemms) {
	return WORKSPACE_BYTES + gemms->memory_bytes;
}

/* Runs. */

/* The broadcast fills of `plan` into y. */
static f8_status run_fills(f8_cuda_gemms *gemms, const gemm_plan *plan, const CUdeviceptr *inputs,
			   CUdeviceptr y, f8_diag *diag) {
	const f8_cuda_product *p = &plan->main.shape;
	CUdeviceptr ones = gemms->memory + gemms->ones[ones_slot(p->y_dtype)];
	CUdeviceptr vector = inputs[plan->fill_input];
	f8_status status = F8_OK;
	if (plan->fill == FILL_SCALAR) { // a row of the scalar, then that row everywhere
		vector = gemms->memory + plan->fill_scratch;
		status = f8_cuda_lt_call_run(&gemms->lt, &plan->fills[0], inputs[plan->fill_input],
					     ones, vector, vector, diag);
	}
	const f8_cuda_lt_call *broadcast = &plan->fills[plan->n_fills - 1];
	if (!status && plan->fill == FILL_COLUMN)
		status = f8_cuda_lt_call_run(&gemms->lt, broadcast, vector, ones, y, y, diag);
	else if (!status)
		status = f8_cuda_lt_call_run(&gemms->lt, broadcast, ones, vector, y, y, diag);
	return status;
}

/* The FP8 scale pointers of `plan`'s call, rearranging the grids that need it first. */
static f8_status run_fp8_scales(f8_cuda_gemms *gemms, const gemm_plan *plan,
				const CUdeviceptr *inputs, f8_diag *diag) {
	const float one = 1.0f, zero = 0.0f;
	for (int i = 0; i < 2; i++) {
		const fp8_scale *scale = &plan->scales[i];
		CUdeviceptr pointer = inputs[2 + i];
		if (scale->rearranged) {
			CUdeviceptr to = gemms->memory + scale->scratch;
			f8_status status = f8_cuda_lt_check(
				f8_cuda_api.cublasLtMatrixTransform(
					gemms->lt.handle, gemms->transforms[scale->transposed], &one,
					(const void *)(uintptr_t)pointer, scale->from, &zero, NULL, NULL,
					(void *)(uintptr_t)to, scale->to, gemms->lt.stream),
				"cublasLtMatrixTransform", diag);
			if (status)
				return status;
			pointer = to;
		}
		// a (i = 0) is cuBLASLt's B, b its A.
		f8_status status = f8_cuda_lt_desc_set_pointer(plan->main.desc,
						    i ? CUBLASLT_MATMUL_DESC_A_SCALE_POINTER
						      : CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
						    pointer, diag);
		if (status)
			return status;
	}
	return F8_OK;
}

static f8_status run_dense(f8_cuda_gemms *gemms, gemm_plan *plan, const CUdeviceptr *inputs,
			   CUdeviceptr y, f8_diag *diag) {
	const f8_cuda_product *p = &plan->main.shape;
	size_t y_size = (size_t)(p->m * p->n) * dtype_bytes(p->y_dtype);
	f8_status status = F8_OK;
	if (plan->skip_main && plan->c_input != F8_NONE) // K = 0: y = C (beta is 1, planning held)
		return f8_cuda_copy_device_async(y, inputs[plan->c_input], y_size, gemms->lt.stream,
						 diag);
	if (plan->skip_main && plan->fill == FILL_NONE)
		return f8_cuda_memset_async(y, 0, y_size, gemms->lt.stream, diag);
	if (plan->fill != FILL_NONE)
		status = run_fills(gemms, plan, inputs, y, diag);
	if (status || plan->skip_main)
		return status;
	if (plan->fp8)
		status = run_fp8_scales(gemms, plan, inputs, diag);
	if (!status && plan->bias_epilogue)
		status = f8_cuda_lt_desc_set_pointer(plan->main.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
					  inputs[plan->bias_input], diag);
	size_t p_bytes = dtype_bytes(p->p_dtype), q_bytes = dtype_bytes(p->q_dtype);
	size_t y_bytes = dtype_bytes(p->y_dtype);
	for (uint32_t r = 0; !status && r < plan->n_runs; r++) {
		const int64_t *at = &plan->runs[3 * r];
		CUdeviceptr yr = y + (uint64_t)at[2] * y_bytes;
		CUdeviceptr c = plan->c_input != F8_NONE ? inputs[plan->c_input] : yr;
		CUdeviceptr p_at = inputs[plan->p_input] + (uint64_t)at[0] * p_bytes;
		CUdeviceptr q_at = inputs[plan->q_input] + (uint64_t)at[1] * q_bytes;
		status = f8_cuda_lt_call_run(&gemms->lt, &plan->main, p_at, q_at, c, yr, diag);
	}
	return status;
}

/* The rows per expert, from the device (the stream waits), checked as the reference checks
 * them (runtime/cpu/kernel_forward.c, f8_cpu_moe_check_counts): none negative, adding up to at
 * most the rows, their sum into *total; the rows after it are padding. */
static f8_status read_counts(f8_cuda_gemms *gemms, gemm_plan *plan, CUdeviceptr counts,
			     int64_t *total, f8_diag *diag) {
	const f8_graph *graph = gemms->graph;
	f8_dtype dtype = graph->values[graph->nodes[plan->node].inputs[2]].type.dtype;
	size_t bytes = dtype_bytes(dtype);
	unsigned char *raw = (unsigned char *)plan->counts;
	*total = 0;
	f8_status status = f8_cuda_copy_to_host_async(raw, counts, (size_t)plan->experts * bytes,
						      gemms->lt.stream, diag);
	if (!status)
		status = f8_cuda_stream_synchronize(gemms->lt.stream, diag);
	if (status)
		return status;
	bool is_signed = f8_dtype_get_info(dtype)->kind == F8_DTYPE_KIND_INT;
	for (int64_t e = plan->experts - 1; e >= 0; e--) { // in place, widest last
		uint64_t value = 0;
		for (size_t b = 0; b < bytes; b++)
			value |= (uint64_t)raw[(size_t)e * bytes + b] << (8 * b);
		if (is_signed && bytes < 8 && (value >> (8 * bytes - 1)) & 1)
			value |= ~0ull << (8 * bytes);
		plan->counts[e] = (int64_t)value;
	}
	for (int64_t e = 0; e < plan->experts; e++) {
		if (plan->counts[e] < 0 || plan->counts[e] > plan->rows - *total) {
			f8_diag_set(diag, F8_ERR_INVALID, "the counts (expert %lld has %lld rows after "
				    "%lld) do not fit the %lld rows of x", (long long)e,
				    (long long)plan->counts[e], (long long)*total, (long long)plan->rows);
			f8_diag_set_node(diag, graph, plan->node);
			return F8_ERR_INVALID;
		}
		*total += plan->counts[e];
	}
	return F8_OK;
}

/* One cuBLASLt call per expert with rows (an expert without any: skipped, or for the weight
 * gradient zeros), the heuristic asked for its sizes and pointers. The rows after the counted
 * ones are padding: the weight gradient does not read them, GroupedLinear writes zeros there. */
static f8_status run_grouped(f8_cuda_gemms *gemms, gemm_plan *plan, const CUdeviceptr *inputs,
			     CUdeviceptr y, f8_diag *diag) {
	f8_cuda_lt_call *call = &plan->main;
	const f8_cuda_product *p = &call->shape;
	int64_t total;
	f8_status status = read_counts(gemms, plan, inputs[2], &total, diag);
	size_t bytes = dtype_bytes(p->y_dtype);
	bool wgrad = plan->kind == PLAN_GROUPED_WGRAD;
	if (!status && !wgrad && p->k == 0) // y = x w^T with K = 0: zeros
		return f8_cuda_memset_async(y, 0, (size_t)(plan->rows * p->n) * bytes, gemms->lt.stream,
					    diag);
	for (int64_t e = 0, first = 0; !status && e < plan->experts; first += plan->counts[e++]) {
		int64_t count = plan->counts[e];
		CUdeviceptr pe, qe, ye;
		if (wgrad) {
			ye = y + (uint64_t)(e * p->m * p->n) * bytes;
			pe = inputs[plan->p_input] + (uint64_t)(first * p->ld_p) * bytes;
			qe = inputs[plan->q_input] + (uint64_t)(first * p->ld_q) * bytes;
		} else {
			ye = y + (uint64_t)(first * p->n) * bytes;
			pe = inputs[plan->p_input] + (uint64_t)(first * p->k) * bytes;
			qe = inputs[plan->q_input] + (uint64_t)(e * p->n * p->k) * bytes;
		}
		if (count == 0) {
			if (wgrad && p->m * p->n != 0)
				status = f8_cuda_memset_async(ye, 0, (size_t)(p->m * p->n) * bytes,
							      gemms->lt.stream, diag);
			continue;
		}
		if (p->m * p->n == 0)
			continue;
		// GroupedLinear: B (P's rows) and D have the expert's columns; the weight
		// gradient: A and B, the rows it contracts over.
		status = f8_cuda_lt_layout_set_cols(call->b, count, diag);
		if (!status)
			status = f8_cuda_lt_layout_set_cols(wgrad ? call->a : call->c, count, diag);
		if (!status && !wgrad)
			status = f8_cuda_lt_layout_set_cols(call->d, count, diag);
		uint32_t alignments[4] = {alignment_of(qe), alignment_of(pe), alignment_of(ye),
					  alignment_of(ye)};
		if (!status)
			status = call_choose_or_fail(gemms, plan, call, alignments, "an expert's GEMM",
						     diag);
		if (!status)
			status = f8_cuda_lt_call_run(&gemms->lt, call, pe, qe, ye, ye, diag);
	}
	if (!status && !wgrad && plan->rows > total && p->n > 0)
		status = f8_cuda_memset_async(y + (uint64_t)(total * p->n) * bytes, 0,
					      (size_t)((plan->rows - total) * p->n) * bytes,
					      gemms->lt.stream, diag);
	return status;
}

f8_status f8_cuda_gemm_run(f8_cuda_gemms *gemms, f8_node_id node, const CUdeviceptr *inputs,
			   const CUdeviceptr *outputs, f8_diag *diag) {
	if (node >= gemms->graph->n_nodes || !gemms->plan_of[node]) {
		f8_diag_set(diag, F8_ERR_ARGUMENT, "node %u is not a planned GEMM", (unsigned)node);
		if (node < gemms->graph->n_nodes)
			f8_diag_set_node(diag, gemms->graph, node);
		return F8_ERR_ARGUMENT;
	}
	gemm_plan *plan = &gemms->plans[gemms->plan_of[node] - 1];
	const f8_node *ir = &gemms->graph->nodes[node];
	if (plan->m * plan->n == 0 && plan->kind == PLAN_DENSE)
		return F8_OK; // nothing to write; the pointers of empty values may be 0
	for (uint32_t i = 0; i <= ir->n_inputs; i++) {
		CUdeviceptr pointer = i < ir->n_inputs ? inputs[i] : outputs[0];
		bool present = i == ir->n_inputs || ir->inputs[i] != F8_NONE;
		if (present && pointer % ALIGNMENT)
			return plan_fail(gemms, plan, F8_ERR_ARGUMENT, diag,
					 "the %s %u at 0x%llx is not %d-byte aligned",
					 i < ir->n_inputs ? "input" : "output",
					 i < ir->n_inputs ? i : 0, (unsigned long long)pointer, ALIGNMENT);
	}
	f8_status status = plan->kind == PLAN_DENSE
				   ? run_dense(gemms, plan, inputs, outputs[0], diag)
				   : run_grouped(gemms, plan, inputs, outputs[0], diag);
	if (status && diag && !diag->node[0])
		return plan_failed(gemms, plan, status, diag);
	return status;
}

void f8_cuda_gemms_destroy(f8_cuda_gemms *gemms) {
	if (!gemms)
		return;
	for (uint32_t p = 0; gemms->plans && p < gemms->n_plans; p++) {
		gemm_plan *plan = &gemms->plans[p];
		f8_cuda_lt_call_destroy(&plan->main);
		for (uint32_t i = 0; i < 2; i++) {
			f8_cuda_lt_call_destroy(&plan->fills[i]);
			if (plan->scales[i].from)
				f8_cuda_api.cublasLtMatrixLayoutDestroy(plan->scales[i].from);
			if (plan->scales[i].to)
				f8_cuda_api.cublasLtMatrixLayoutDestroy(plan->scales[i].to);
		}
		f8_free(plan->runs);
		f8_free(plan->counts);
	}
	for (int i = 0; i < 2; i++)
		if (gemms->transforms[i])
			f8_cuda_api.cublasLtMatrixTransformDescDestroy(gemms->transforms[i]);
	f8_cuda_lt_close(&gemms->lt);
	f8_cuda_free(gemms->memory, NULL);
	f8_free(gemms->plans);
	f8_free(gemms->plan_of);
	f8_free(gemms);
}
