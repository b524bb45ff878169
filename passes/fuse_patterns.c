/*
 * fuse-patterns: recognizes the high-level ops in the primitive subgraphs exporters write, so
 * that the FP8 passes plan for Linear, Attention and the norms rather than for MatMul and Mul.
 *
 * requires: types inferred (canonicalize).
 * provides: Embedding, Linear, LayerNorm, RMSNorm, Gelu, SwiGLU, Rope and Attention nodes in
 *           place of the subgraphs that compute them; everything unmatched stays as it was and
 *           still runs. With a report, what fused and what did not, and why.
 *
 * Each pattern is a sweep over the program looking for its root op; a match absorbs the
 * interior nodes only when nothing else reads their results (f8_rewrite_match_is_closed), and
 * the replacement takes over the root's output value, so readers and names are unchanged. The
 * sweeps run in the order of the table at the bottom: Linear before the Linear-reshape
 * sandwich it simplifies; the rest are independent.
 */
#include <math.h>   // fabs, sqrt
#include <stdio.h>  // fprintf
#include <string.h> // memcpy

#include "ir/alloc.h"            // f8_calloc, f8_free
#include "ir/text.h"             // f8_graph_describe_node
#include "passes/canonicalize.h" // f8_pass_canonicalize_run
#include "passes/fuse_patterns.h" // f8_pass_fuse_patterns_run
#include "passes/precision.h"     // f8_name_upper
#include "ir/arena.h"            // f8_arena_strdup
#include "passes/rewrite.h"      // f8_rewriter, f8_rewrite_*

static const double PI = 3.14159265358979323846;

/* Why a pattern did not fuse at a node: the pattern and its reason. */
typedef struct miss {
	const char *pattern, *why;
} miss;

/* An attention mask that its structure did not show causal, and what its value showed. */
typedef struct mask_verdict {
	f8_value_id mask;
	bool causal;
	char why[400]; // for the report
} mask_verdict;

/* A value folded into a constant (below), in the words the report prints after its '%'. */
typedef struct fold_note {
	char text[400];
} fold_note;

typedef struct fuser {
	f8_rewriter rw;
	miss (*misses)[2]; // per node: the first two patterns that tried it and failed
	uint32_t cap_misses;
	const f8_value_evaluator *evaluator; // NULL: masks are proven by their structure alone
	mask_verdict *verdicts;  // (n_verdicts) one per mask evaluated
	uint32_t n_verdicts;
	fold_note *folds;        // (n_folds) the values folded into constants, for the report
	uint32_t n_folds;
	f8_status error;         // a failure (out of memory) while deciding a mask
	f8_diag *diag;
} fuser;

/* Helpers. */

static const f8_type *type_of(const fuser *f, f8_value_id value) {
	return &f->rw.graph->values[value].type;
}

static bool near(double value, double expected) {
	return fabs(value - expected) <= 1e-5 * fabs(expected);
}

/*
 * Whether `value` is a scalar constant equal to `expected` as closely as its dtype can hold it:
 * within half a unit in the last place (bf16 holds sqrt 2 as 1.4140625), and never tighter than
 * 1e-5, since exporters print constants with a few digits.
 */
static bool scalar_near(const fuser *f, f8_value_id value, double expected) {
	double c;
	if (!f8_rewrite_scalar(&f->rw, value, &c))
		return false;
	int mantissa = f8_dtype_get_info(type_of(f, value)->dtype)->mantissa_bits;
	double tolerance = ldexp(1.0, -(mantissa + 1));
	return fabs(c - expected) <= (tolerance > 1e-5 ? tolerance : 1e-5) * fabs(expected);
}

/* Whether a node's INTS attribute `axes` is exactly the last axis of a rank-`rank` input. */
static bool is_last_axis_only(const f8_node *node, const char *name, int rank) {
	const f8_attr *axes = f8_node_attr(node, name);
	if (!axes || axes->ints.n != 1)
		return false;
	int64_t axis = axes->ints.items[0];
	return axis == -1 || axis == rank - 1;
}

static bool is_rank1_weight_of(const fuser *f, f8_value_id value, f8_dim size) {
	const f8_type *type = type_of(f, value);
	return f8_rewrite_is_weight(&f->rw, value) && type->shape.rank == 1 &&
	       f8_dim_equal(type->shape.dims[0], size);
}

static f8_dim last_dim(const fuser *f, f8_value_id value) {
	const f8_type *type = type_of(f, value);
	return type->shape.rank ? type->shape.dims[type->shape.rank - 1] : f8_dim_const(1);
}

/* Starts a fresh attempt at the same root, forgetting nodes an earlier attempt took. */
static void restart(f8_rewrite_match *m, uint32_t keep) {
	m->n_nodes = keep;
}

/* Records why `pattern` did not fuse at `root` (the root's op matched, the rest did not). */
static void note(fuser *f, f8_node_id root, const char *pattern, const char *why) {
	if (root >= f->cap_misses || !why)
		return;
	miss *slots = f->misses[root];
	int i = slots[0].why ? 1 : 0;
	if (!slots[i].why)
		slots[i] = (miss){pattern, why};
}

/* Commits a match whose replacement is one node `op`. */
/* Commits a match whose replacement is one node `op`; *fused says whether it did (the op may
 * refuse what the pattern did not check: a no-match, with the reason in m->why_not). */
static f8_status replace(fuser *f, f8_rewrite_match *m, f8_op op, const f8_value_id *inputs,
			 uint32_t n_inputs, const f8_attr *attrs, uint32_t n_attrs, bool *fused) {
	f8_value_id out;
	f8_status status = f8_rewrite_add(&f->rw, m, op, inputs, n_inputs, attrs, n_attrs, &out);
	return status ? status : f8_rewrite_commit(&f->rw, m, fused);
}

/* An outer product spelled as a matrix product of K = 1 (rotary tables: inv_freq @ positions)
 * is an elementwise Mul with broadcasting: no GEMM for the FP8 passes to consider. */
static f8_status match_outer_product(fuser *f, f8_rewrite_match *m, const f8_node *matmul,
				     bool *fused) {
	const f8_shape *a = &type_of(f, matmul->inputs[0])->shape;
	const f8_shape *b = &type_of(f, matmul->inputs[1])->shape;
	if (a->rank < 2 || b->rank < 2 || !f8_dim_equal(a->dims[a->rank - 1], f8_dim_const(1)))
		return F8_OK;
	// MatMul needs b's rows to be K = 1 too, and broadcasts batch dims as Mul does: the result
	// types agree (f8_rewrite_commit checks).
	return replace(f, m, F8_OP_MUL, matmul->inputs, 2, NULL, 0, fused);
}

/* Whether `value` is a one-element FP8 Constant holding zero (a QDQ pair's zero point). */
static bool fp8_zero(const fuser *f, f8_value_id value) {
	const f8_value *v = &f->rw.graph->values[value];
	if (v->producer == F8_NONE || !f8_dtype_is_fp8(v->type.dtype))
		return false;
	const f8_node *node = &f->rw.graph->nodes[v->producer];
	const f8_attr *attr = node->op == F8_OP_CONSTANT ? f8_node_attr(node, "value") : NULL;
	return attr && attr->tensor->n_bytes == 1 && (((const uint8_t *)attr->tensor->data)[0] & 0x7f) == 0;
}

/* A DequantizeLinear of FP8 codes at one positive scale (per tensor), its zero point absent or
 * zero: the node, taken into the match, with *scale its scale's value; else NULL. */
static const f8_node *fp8_dequantize(fuser *f, f8_rewrite_match *m, f8_value_id value,
				     double *scale) {
	const f8_node *dq = f8_rewrite_take(&f->rw, m, value, F8_OP_DEQUANTIZE_LINEAR, NULL);
	if (!dq || !f8_dtype_is_fp8(type_of(f, dq->inputs[0])->dtype) ||
	    !f8_rewrite_scalar(&f->rw, dq->inputs[1], scale) || !(*scale > 0) || isinf(*scale) ||
	    f8_node_attr_int(dq, "block_size", 0) != 0 ||
	    (dq->n_inputs > 2 && dq->inputs[2] != F8_NONE && !fp8_zero(f, dq->inputs[2])))
		return NULL;
	return dq;
}

/* The decision annotation of an FP8 value or GEMM the model quantized itself. */
static f8_status model_decision(fuser *f, f8_value_id value, f8_dtype format, const char *reason) {
	const char *copy = f8_arena_strdup(f->rw.graph->arena, reason);
	if (!copy)
		return f8_diag_set(f->diag, F8_ERR_NOMEM, "out of memory");
	f->rw.graph->values[value].precision = (f8_precision){
		.format = format, .recipe = F8_RECIPE_MODEL, .scaling_slot = F8_NONE, .reason = copy};
	return F8_OK;
}

/*
 * A GEMM the model quantized itself (QDQ): MatMul(DequantizeLinear(qx, sx), DequantizeLinear(qw,
 * sw)) over FP8 codes at one scale each, qw (K, N) a weight of FP8 codes or a QuantizeLinear of
 * a weight -> FP8Gemm(qx, qw^T, sx, sw) at the model's own scales, its decision and its operands'
 * "from the model". K and N must be multiples of 16, as Hopper's FP8 GEMMs need; otherwise the
 * dequantized product stays (in the dtype the model dequantizes to), and the report says why.
 */
static f8_status match_qdq_linear(fuser *f, f8_rewrite_match *m, const f8_node *root,
				  bool *fused) {
	double sx, sw;
	f8_value_id out = root->outputs[0];
	const char *scope = root->scope ? root->scope : f->rw.graph->values[out].name;
	const f8_node *dx = fp8_dequantize(f, m, root->inputs[0], &sx);
	const f8_node *dw = dx ? fp8_dequantize(f, m, root->inputs[1], &sw) : NULL;
	if (!dw) {
		m->why_not = "not a product of FP8 codes dequantized at one scale each";
		return F8_OK;
	}
	f8_value_id qx = dx->inputs[0], qw = dw->inputs[0], sxv = dx->inputs[1], swv = dw->inputs[1];
	const f8_shape *xs = &type_of(f, qx)->shape, *ws = &type_of(f, qw)->shape;
	f8_dtype fx = type_of(f, qx)->dtype, fw = type_of(f, qw)->dtype, to = type_of(f, out)->dtype;
	if (xs->rank < 2 || ws->rank != 2 || !f8_dim_is_const(ws->dims[0]) ||
	    !f8_dim_is_const(ws->dims[1])) {
		m->why_not = "the FP8 product is not (..., K) x (K, N) with K and N known";
		return F8_OK;
	}
	int64_t k = f8_dim_value(ws->dims[0]), n = f8_dim_value(ws->dims[1]);
	if (k % 16 || n % 16) {
		m->why_not = "the FP8 product's K and N are not multiples of 16, as Hopper's FP8 GEMMs "
			     "need: it runs dequantized";
		return F8_OK;
	}
	if (fx == F8_DTYPE_E5M2 && fw == F8_DTYPE_E5M2) {
		m->why_not = "E5M2 x E5M2 has no FP8 GEMM on the hardware: it runs dequantized";
		return F8_OK;
	}
	// The weight's codes, (N, K) as the GEMM reads them: the model's quantization of the
	// transposed weight, or its stored codes transposed.
	uint32_t keep = m->n_nodes;
	const f8_node *qwl = f8_rewrite_take(&f->rw, m, qw, F8_OP_QUANTIZE_LINEAR, NULL);
	f8_value_id weight = F8_NONE, zero = F8_NONE;
	int64_t saturate = 1;
	double qscale;
	if (qwl && f8_rewrite_is_weight(&f->rw, qwl->inputs[0]) &&
	    f8_rewrite_scalar(&f->rw, qwl->inputs[1], &qscale) && qscale == sw &&
	    (qwl->n_inputs < 3 || qwl->inputs[2] == F8_NONE || fp8_zero(f, qwl->inputs[2]))) {
		weight = qwl->inputs[0];
		zero = qwl->n_inputs > 2 ? qwl->inputs[2] : F8_NONE;
		saturate = f8_node_attr_int(qwl, "saturate", 1);
	} else {
		restart(m, keep);
		if (!f8_rewrite_is_weight(&f->rw, qw)) {
			m->why_not = "the FP8 weight is neither a weight's codes nor the QuantizeLinear "
				     "of a weight";
			return F8_OK;
		}
	}
	if (!f8_rewrite_match_is_closed(&f->rw, m))
		return F8_OK;
	// Nodes are made only now: adding one may move the graph's node array.
	int64_t swap[2] = {1, 0};
	f8_attr perm = {.name = "perm", .kind = F8_ATTR_INTS, .ints = {2, swap}};
	f8_value_id transposed, codes = F8_NONE;
	f8_status status = f8_rewrite_add(&f->rw, m, F8_OP_TRANSPOSE,
					  weight != F8_NONE ? &weight : &qw, 1, &perm, 1, &transposed);
	if (!status && transposed != F8_NONE && weight != F8_NONE) {
		f8_value_id inputs[3] = {transposed, swv, zero};
		f8_attr attrs[2] = {{.name = "to", .kind = F8_ATTR_DTYPE, .dtype = fw},
				    {.name = "saturate", .kind = F8_ATTR_INT, .i = saturate}};
		status = f8_rewrite_add(&f->rw, m, F8_OP_QUANTIZE_LINEAR, inputs,
					zero != F8_NONE ? 3 : 2, attrs, 2, &codes);
	} else {
		codes = transposed;
	}
	if (status || codes == F8_NONE)
		return status;
	f8_value_id inputs[4] = {qx, codes, sxv, swv};
	f8_attr attrs[2] = {{.name = "to", .kind = F8_ATTR_DTYPE, .dtype = to},
			    {.name = "gemm", .kind = F8_ATTR_STRING, .s = "fwd"}};
	if ((status = replace(f, m, F8_OP_FP8_GEMM, inputs, 4, attrs, 2, fused)) || !*fused)
		return status;
	char reason[400], a[8], b[8];
	f8_name_upper(f8_dtype_name(fx), a, sizeof a);
	f8_name_upper(f8_dtype_name(fw), b, sizeof b);
	snprintf(reason, sizeof reason, "fwd of %s: FP8 from the model (QuantizeLinear / "
		 "DequantizeLinear): x %s at scale %g, w %s at scale %g", scope, a, sx, b, sw);
	status = model_decision(f, out, F8_DTYPE_UNDEFINED, reason);
	snprintf(reason, sizeof reason, "x of %s (fwd), %s at the model's scale %g (its "
		 "QuantizeLinear)", scope, a, sx);
	if (!status && f->rw.graph->values[qx].precision.recipe != F8_RECIPE_MODEL)
		status = model_decision(f, qx, fx, reason);
	snprintf(reason, sizeof reason, "w of %s (fwd), %s at the model's scale %g (%s)", scope, b,
		 sw, weight != F8_NONE ? "its QuantizeLinear, of the weight transposed"
				       : "its stored codes, transposed");
	return status ? status : model_decision(f, codes, fw, reason);
}

/* Embedding: Gather(weight (vocab, hidden), ids) along axis 0. */
static f8_status match_embedding(fuser *f, f8_rewrite_match *m, const f8_node *gather,
				 bool *fused) {
	f8_value_id table = gather->inputs[0], ids = gather->inputs[1];
	if (f8_node_attr_int(gather, "axis", 0) != 0 || !f8_rewrite_is_weight(&f->rw, table) ||
	    type_of(f, table)->shape.rank != 2 || !f8_dtype_is_integer(type_of(f, ids)->dtype)) {
		m->why_not = "not a lookup of rows of a (vocab, hidden) weight";
		return F8_OK;
	}
	f8_value_id inputs[2] = {ids, table};
	return replace(f, m, F8_OP_EMBEDDING, inputs, 2, NULL, 0, fused);
}

/*
 * The weight of a matrix product's right operand: a rank-2 weight used as (K, N), or the
 * Transpose of one stored (N, K). *transposed says which layout the Linear gets.
 */
static bool linear_weight(fuser *f, f8_rewrite_match *m, f8_value_id operand, bool operand_is_kn,
			  f8_value_id *weight, bool *transposed) {
	if (f8_rewrite_is_weight(&f->rw, operand) && type_of(f, operand)->shape.rank == 2) {
		*weight = operand;
		*transposed = operand_is_kn;
		return true;
	}
	const f8_node *t = f8_rewrite_take(&f->rw, m, operand, F8_OP_TRANSPOSE, NULL);
	const f8_attr *perm = t ? f8_node_attr(t, "perm") : NULL;
	bool swaps = !perm || (perm->ints.n == 2 && perm->ints.items[0] == 1 && perm->ints.items[1] == 0);
	if (t && swaps && f8_rewrite_is_weight(&f->rw, t->inputs[0]) &&
	    type_of(f, t->inputs[0])->shape.rank == 2) {
		*weight = t->inputs[0];
		*transposed = !operand_is_kn;
		return true;
	}
	m->why_not = "the right operand is not a weight (a parameter, or its transpose)";
	return false;
}

/* MatMul(x, W) or Gemm(x, W) without C, alpha and beta 1, transA 0, as x, weight, layout. */
static bool linear_product(fuser *f, f8_rewrite_match *m, const f8_node *node, f8_value_id *x,
			   f8_value_id *weight, bool *transposed) {
	bool kn = true;
	if (node->op == F8_OP_GEMM) {
		if (f8_node_attr_float(node, "alpha", 1.0) != 1.0 ||
		    f8_node_attr_int(node, "transA", 0) != 0) {
			m->why_not = "Gemm with alpha != 1 or transA";
			return false;
		}
		kn = f8_node_attr_int(node, "transB", 0) == 0;
	}
	*x = node->inputs[0];
	return linear_weight(f, m, node->inputs[1], kn, weight, transposed);
}

static f8_status add_linear(fuser *f, f8_rewrite_match *m, f8_value_id x, f8_value_id weight,
			    f8_value_id bias, bool transposed, bool *fused) {
	f8_value_id inputs[3] = {x, weight, bias};
	f8_attr attr = {.name = "transpose_weight", .kind = F8_ATTR_INT, .i = 1};
	return replace(f, m, F8_OP_LINEAR, inputs, bias == F8_NONE ? 2 : 3, &attr, transposed, fused);
}

/* Linear with a bias: Add(MatMul(x, W), b), Gemm(x, W, b). */
static f8_status match_linear_bias(fuser *f, f8_rewrite_match *m, const f8_node *root,
				   bool *fused) {
	f8_value_id x, weight, bias = F8_NONE;
	bool transposed;
	if (root->op == F8_OP_GEMM) {
		if (root->n_inputs < 3 || root->inputs[2] == F8_NONE)
			return F8_OK; // no bias: the plain sweep takes it
		if (f8_node_attr_float(root, "beta", 1.0) != 1.0 ||
		    !is_rank1_weight_of(f, root->inputs[2], last_dim(f, root->outputs[0]))) {
			m->why_not = "Gemm's C is not a bias weight (N) with beta 1";
			return F8_OK;
		}
		if (!linear_product(f, m, root, &x, &weight, &transposed))
			return F8_OK;
		bias = root->inputs[2];
	} else {
		for (int swap = 0; swap < 2 && bias == F8_NONE; swap++) {
			restart(m, 1);
			f8_value_id product = root->inputs[swap], b = root->inputs[1 - swap];
			const f8_node *mm = f8_rewrite_take(&f->rw, m, product, F8_OP_MATMUL, NULL);
			if (!mm)
				mm = f8_rewrite_take(&f->rw, m, product, F8_OP_GEMM, NULL);
			if (!mm || (mm->op == F8_OP_GEMM && mm->n_inputs > 2 && mm->inputs[2] != F8_NONE))
				continue;
			if (!is_rank1_weight_of(f, b, last_dim(f, product)) ||
			    !f8_type_equal(type_of(f, product), type_of(f, root->outputs[0])))
				continue;
			if (linear_product(f, m, mm, &x, &weight, &transposed))
				bias = b;
		}
		if (bias == F8_NONE)
			return F8_OK; // an Add of two activations: no note, most Adds are residuals
	}
	if (!f8_rewrite_match_is_closed(&f->rw, m))
		return F8_OK;
	return add_linear(f, m, x, weight, bias, transposed, fused);
}

/* Linear without a bias: MatMul(x, W), Gemm(x, W). */
static f8_status match_linear(fuser *f, f8_rewrite_match *m, const f8_node *root, bool *fused) {
	f8_value_id x, weight;
	bool transposed;
	if (root->op == F8_OP_GEMM && root->n_inputs > 2 && root->inputs[2] != F8_NONE)
		return F8_OK; // has C: the bias sweep said why it did not fuse
	if (!linear_product(f, m, root, &x, &weight, &transposed) ||
	    !f8_rewrite_match_is_closed(&f->rw, m))
		return F8_OK;
	return add_linear(f, m, x, weight, F8_NONE, transposed, fused);
}

/*
 * Reshape(Linear(Reshape(x, (rows, K))), (..., N)) where rows flattens x's leading dims and the
 * outer Reshape restores them: the Linear on x itself (Linear takes any leading dims).
 */
static f8_status match_linear_sandwich(fuser *f, f8_rewrite_match *m, const f8_node *root,
				       bool *fused) {
	const f8_node *linear = f8_rewrite_take(&f->rw, m, root->inputs[0], F8_OP_LINEAR, NULL);
	const f8_node *flatten = linear ? f8_rewrite_take(&f->rw, m, linear->inputs[0],
							  F8_OP_RESHAPE, NULL) : NULL;
	if (!flatten)
		return F8_OK;
	const f8_shape *x = &type_of(f, flatten->inputs[0])->shape;
	const f8_shape *out = &type_of(f, root->outputs[0])->shape;
	const f8_shape *flat = &type_of(f, flatten->outputs[0])->shape;
	if (x->rank < 2 || flat->rank != 2 || out->rank != x->rank)
		return F8_OK;
	for (int i = 0; i + 1 < x->rank; i++)
		if (!f8_dim_equal(x->dims[i], out->dims[i]))
			return F8_OK;
	if (!f8_rewrite_match_is_closed(&f->rw, m))
		return F8_OK;
	f8_value_id inputs[3] = {flatten->inputs[0], linear->inputs[1],
				 linear->n_inputs > 2 ? linear->inputs[2] : F8_NONE};
	return replace(f, m, F8_OP_LINEAR, inputs, linear->n_inputs, linear->attrs, linear->n_attrs, fused);
}

/* sqrt(mean(x^2 or x*x over the last axis) + eps): true with eps and x when it matches. */
static bool root_mean_square(fuser *f, f8_rewrite_match *m, f8_value_id value, f8_value_id *x,
			     double *eps) {
	const f8_node *sqrt_node = f8_rewrite_take(&f->rw, m, value, F8_OP_SQRT, NULL);
	const f8_node *add = sqrt_node ? f8_rewrite_take(&f->rw, m, sqrt_node->inputs[0], F8_OP_ADD,
							 NULL) : NULL;
	for (int swap = 0; add && swap < 2; swap++) {
		const f8_node *mean = f8_rewrite_take(&f->rw, m, add->inputs[swap], F8_OP_REDUCE_MEAN,
						      NULL);
		if (!mean || !f8_rewrite_scalar(&f->rw, add->inputs[1 - swap], eps))
			continue;
		int rank = type_of(f, mean->inputs[0])->shape.rank;
		if (!is_last_axis_only(mean, "axes", rank) || !f8_node_attr_int(mean, "keepdims", 1))
			continue;
		const f8_node *pow = f8_rewrite_take(&f->rw, m, mean->inputs[0], F8_OP_POW, NULL);
		double exponent;
		if (pow && f8_rewrite_scalar(&f->rw, pow->inputs[1], &exponent) && exponent == 2.0) {
			*x = pow->inputs[0];
			return true;
		}
		const f8_node *square = f8_rewrite_take(&f->rw, m, mean->inputs[0], F8_OP_MUL, NULL);
		if (square && square->inputs[0] == square->inputs[1]) {
			*x = square->inputs[0];
			return true;
		}
	}
	m->why_not = "not sqrt(mean(x^2, last axis) + eps)";
	return false;
}

/* x / sqrt(mean(x^2) + eps), as Div(x, s) or Mul(x, Reciprocal(s)) or Mul(x, Div(1, s)). */
static bool normalized(fuser *f, f8_rewrite_match *m, f8_value_id value, f8_value_id *x,
		       double *eps) {
	uint32_t keep = m->n_nodes;
	const f8_node *div = f8_rewrite_take(&f->rw, m, value, F8_OP_DIV, NULL);
	f8_value_id inner;
	if (div && root_mean_square(f, m, div->inputs[1], &inner, eps) && inner == div->inputs[0]) {
		*x = inner;
		return true;
	}
	restart(m, keep);
	const f8_node *mul = f8_rewrite_take(&f->rw, m, value, F8_OP_MUL, NULL);
	for (int swap = 0; mul && swap < 2; swap++) {
		restart(m, keep + 1);
		f8_value_id other = mul->inputs[1 - swap], s;
		const f8_node *reciprocal = f8_rewrite_take(&f->rw, m, mul->inputs[swap],
							    F8_OP_RECIPROCAL, NULL);
		const f8_node *one_over = reciprocal ? NULL : f8_rewrite_take(&f->rw, m, mul->inputs[swap],
									      F8_OP_DIV, NULL);
		double one;
		if (reciprocal)
			s = reciprocal->inputs[0];
		else if (one_over && f8_rewrite_scalar(&f->rw, one_over->inputs[0], &one) && one == 1.0)
			s = one_over->inputs[1];
		else
			continue;
		if (root_mean_square(f, m, s, &inner, eps) && inner == other) {
			*x = inner;
			return true;
		}
	}
	return false;
}

/*
 * RMSNorm: Mul(weight, x / sqrt(mean(x^2) + eps)) over the last axis. Models in bf16 or f16
 * (Hugging Face's) compute the statistics in f32 between two Casts: Mul(weight,
 * Cast(Cast(x, f32) * rsqrt(...), bf16)), which is what RMSNorm of a bf16 x means.
 */
static f8_status match_rms_norm(fuser *f, f8_rewrite_match *m, const f8_node *root, bool *fused) {
	for (int swap = 0; swap < 2; swap++) {
		restart(m, 1);
		f8_value_id weight = root->inputs[swap], normal = root->inputs[1 - swap], x;
		double eps;
		if (!is_rank1_weight_of(f, weight, last_dim(f, root->outputs[0])))
			continue;
		const f8_node *narrow = f8_rewrite_take(&f->rw, m, normal, F8_OP_CAST, NULL);
		if (narrow)
			normal = narrow->inputs[0];
		if (!normalized(f, m, normal, &x, &eps))
			continue;
		const f8_node *widen = narrow ? f8_rewrite_take(&f->rw, m, x, F8_OP_CAST, NULL) : NULL;
		if (widen)
			x = widen->inputs[0];
		if (!!narrow != !!widen || type_of(f, x)->dtype != type_of(f, root->outputs[0])->dtype) {
			m->why_not = "the statistics are not computed between a widening and a narrowing "
				     "Cast back to the input's type";
			continue;
		}
		if (!f8_rewrite_match_is_closed(&f->rw, m))
			return F8_OK;
		f8_value_id inputs[2] = {x, weight};
		f8_attr attrs[2] = {{.name = "axis", .kind = F8_ATTR_INT, .i = -1},
				    {.name = "epsilon", .kind = F8_ATTR_FLOAT, .f = eps}};
		return replace(f, m, F8_OP_RMS_NORM, inputs, 2, attrs, 2, fused);
	}
	return F8_OK;
}

/* LayerNorm decomposed: d = x - mean(x); Add(Mul(d / sqrt(mean(d^2) + eps), gamma), beta). */
static f8_status match_layer_norm(fuser *f, f8_rewrite_match *m, const f8_node *root,
				  bool *fused) {
	for (int swap = 0; swap < 2; swap++) {
		restart(m, 1);
		f8_value_id beta = root->inputs[1 - swap], d, gamma = F8_NONE;
		double eps;
		const f8_node *scaled = f8_rewrite_take(&f->rw, m, root->inputs[swap], F8_OP_MUL, NULL);
		if (!scaled || !is_rank1_weight_of(f, beta, last_dim(f, root->outputs[0])))
			continue;
		uint32_t keep = m->n_nodes;
		for (int g = 0; g < 2 && gamma == F8_NONE; g++) {
			restart(m, keep);
			if (is_rank1_weight_of(f, scaled->inputs[g], last_dim(f, root->outputs[0])) &&
			    normalized(f, m, scaled->inputs[1 - g], &d, &eps))
				gamma = scaled->inputs[g];
		}
		const f8_node *sub = gamma != F8_NONE ? f8_rewrite_take(&f->rw, m, d, F8_OP_SUB, NULL)
						      : NULL;
		const f8_node *mean = sub ? f8_rewrite_take(&f->rw, m, sub->inputs[1], F8_OP_REDUCE_MEAN,
							    NULL) : NULL;
		if (!mean || mean->inputs[0] != sub->inputs[0] || !f8_node_attr_int(mean, "keepdims", 1) ||
		    !is_last_axis_only(mean, "axes", type_of(f, sub->inputs[0])->shape.rank))
			continue;
		if (!f8_rewrite_match_is_closed(&f->rw, m))
			return F8_OK;
		f8_value_id inputs[3] = {sub->inputs[0], gamma, beta};
		f8_attr attrs[2] = {{.name = "axis", .kind = F8_ATTR_INT, .i = -1},
				    {.name = "epsilon", .kind = F8_ATTR_FLOAT, .f = eps}};
		return replace(f, m, F8_OP_LAYER_NORM, inputs, 3, attrs, 2, fused);
	}
	return F8_OK;
}

/*
 * The 1 + erf(x / sqrt 2) or 1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)) factor of a GELU at
 * `value`: its x and whether it is the tanh form.
 */
static bool gelu_factor(fuser *f, f8_rewrite_match *m, f8_value_id value, f8_value_id *x,
			bool *tanh_form) {
	const f8_node *add = f8_rewrite_take(&f->rw, m, value, F8_OP_ADD, NULL);
	for (int swap = 0; add && swap < 2; swap++) {
		double one;
		if (!f8_rewrite_scalar(&f->rw, add->inputs[1 - swap], &one) || one != 1.0)
			continue;
		const f8_node *erf = f8_rewrite_take(&f->rw, m, add->inputs[swap], F8_OP_ERF, NULL);
		if (erf) {
			const f8_node *div = f8_rewrite_take(&f->rw, m, erf->inputs[0], F8_OP_DIV, NULL);
			if (div && scalar_near(f, div->inputs[1], sqrt(2.0))) {
				*x = div->inputs[0], *tanh_form = false;
				return true;
			}
			const f8_node *mul = f8_rewrite_take(&f->rw, m, erf->inputs[0], F8_OP_MUL, NULL);
			for (int s = 0; mul && s < 2; s++) {
				if (scalar_near(f, mul->inputs[s], sqrt(0.5))) {
					*x = mul->inputs[1 - s], *tanh_form = false;
					return true;
				}
			}
			return false;
		}
		const f8_node *tanh = f8_rewrite_take(&f->rw, m, add->inputs[swap], F8_OP_TANH, NULL);
		const f8_node *outer = tanh ? f8_rewrite_take(&f->rw, m, tanh->inputs[0], F8_OP_MUL, NULL)
					    : NULL;
		for (int s = 0; outer && s < 2; s++) {
			if (!scalar_near(f, outer->inputs[s], sqrt(2.0 / PI)))
				continue;
			const f8_node *sum = f8_rewrite_take(&f->rw, m, outer->inputs[1 - s], F8_OP_ADD, NULL);
			for (int t = 0; sum && t < 2; t++) {
				const f8_node *cubic = f8_rewrite_take(&f->rw, m, sum->inputs[1 - t], F8_OP_MUL,
								       NULL);
				for (int u = 0; cubic && u < 2; u++) {
					const f8_node *pow = f8_rewrite_take(&f->rw, m, cubic->inputs[u],
									     F8_OP_POW, NULL);
					double exponent;
					if (pow && scalar_near(f, cubic->inputs[1 - u], 0.044715) &&
					    pow->inputs[0] == sum->inputs[t] &&
					    f8_rewrite_scalar(&f->rw, pow->inputs[1], &exponent) &&
					    exponent == 3.0) {
						*x = sum->inputs[t], *tanh_form = true;
						return true;
					}
				}
			}
		}
	}
	return false;
}

/* The product under `value` (through Mul nodes it takes), stopping at x and e: counts how often
 * each occurs and multiplies the scalar constants into *coefficient; false on anything else. */
static bool product_of(fuser *f, f8_rewrite_match *m, f8_value_id value, f8_value_id x,
		       f8_value_id e, int *n_x, int *n_e, double *coefficient, int depth) {
	double c;
	if (value == x)
		return ++*n_x, true;
	if (value == e)
		return ++*n_e, true;
	if (f8_rewrite_scalar(&f->rw, value, &c))
		return *coefficient *= c, true;
	const f8_node *mul = depth < 4 ? f8_rewrite_take(&f->rw, m, value, F8_OP_MUL, NULL) : NULL;
	return mul && product_of(f, m, mul->inputs[0], x, e, n_x, n_e, coefficient, depth + 1) &&
	       product_of(f, m, mul->inputs[1], x, e, n_x, n_e, coefficient, depth + 1);
}

/* Gelu: 0.5 * x * (1 + erf(x / sqrt 2)) or its tanh approximation, in any order of products. */
static f8_status match_gelu(fuser *f, f8_rewrite_match *m, const f8_node *root, bool *fused) {
	// The erf/tanh factor is an operand of the root or of a Mul under it.
	f8_value_id candidates[6] = {root->inputs[0], root->inputs[1]};
	uint32_t n = 2;
	for (int i = 0; i < 2; i++) {
		const f8_node *mul = f8_rewrite_peek(&f->rw, root->inputs[i], F8_OP_MUL);
		if (mul)
			candidates[n++] = mul->inputs[0], candidates[n++] = mul->inputs[1];
	}
	for (uint32_t i = 0; i < n; i++) {
		restart(m, 1);
		f8_value_id x;
		bool tanh_form;
		if (!gelu_factor(f, m, candidates[i], &x, &tanh_form))
			continue;
		int n_x = 0, n_e = 0;
		double coefficient = 1.0;
		if (!product_of(f, m, root->inputs[0], x, candidates[i], &n_x, &n_e, &coefficient, 0) ||
		    !product_of(f, m, root->inputs[1], x, candidates[i], &n_x, &n_e, &coefficient, 0) ||
		    n_x != 1 || n_e != 1 || !near(coefficient, 0.5))
			continue;
		if (!f8_rewrite_match_is_closed(&f->rw, m))
			return F8_OK;
		f8_attr attr = {.name = "approximate", .kind = F8_ATTR_STRING, .s = "tanh"};
		return replace(f, m, F8_OP_GELU, &x, 1, &attr, tanh_form, fused);
	}
	return F8_OK;
}

/* SwiGLU: Mul(silu(g), u) with silu(g) = Mul(g, Sigmoid(g)). */
static f8_status match_swiglu(fuser *f, f8_rewrite_match *m, const f8_node *root, bool *fused) {
	for (int swap = 0; swap < 2; swap++) {
		restart(m, 1);
		const f8_node *silu = f8_rewrite_take(&f->rw, m, root->inputs[swap], F8_OP_MUL, NULL);
		for (int s = 0; silu && s < 2; s++) {
			const f8_node *sigmoid = f8_rewrite_take(&f->rw, m, silu->inputs[s], F8_OP_SIGMOID,
								 NULL);
			f8_value_id gate = silu->inputs[1 - s], up = root->inputs[1 - swap];
			if (!sigmoid || sigmoid->inputs[0] != gate ||
			    !f8_type_equal(type_of(f, gate), type_of(f, up)))
				continue;
			if (!f8_rewrite_match_is_closed(&f->rw, m))
				return F8_OK;
			f8_value_id inputs[2] = {gate, up};
			return replace(f, m, F8_OP_SWIGLU, inputs, 2, NULL, 0, fused);
		}
	}
	return F8_OK;
}

/* Slice(x) on the last axis from `start` to `end` (INT64_MAX-like ends mean "to the end"). */
static bool last_axis_slice(fuser *f, const f8_node *slice, f8_value_id x, int64_t start,
			    int64_t end) {
	const f8_attr *starts = f8_node_attr(slice, "starts"), *ends = f8_node_attr(slice, "ends");
	const f8_attr *axes = f8_node_attr(slice, "axes"), *steps = f8_node_attr(slice, "steps");
	int rank = type_of(f, x)->shape.rank;
	if (slice->inputs[0] != x || starts->dims.n != 1 || (axes && !is_last_axis_only(slice, "axes", rank)) ||
	    (!axes && rank != 1) || (steps && (steps->ints.n != 1 || steps->ints.items[0] != 1)))
		return false;
	f8_dim b = starts->dims.items[0], e = ends->dims.items[0];
	if (!f8_dim_is_const(b) || !f8_dim_is_const(e) || f8_dim_value(b) != start)
		return false;
	return f8_dim_value(e) == end || (end == INT64_MAX && f8_dim_value(e) >= INT32_MAX);
}

/* rotate_half(x) = Concat(-x[..., h:], x[..., :h]) on the last axis, h half of x's last dim. */
static bool rotate_half(fuser *f, f8_rewrite_match *m, f8_value_id value, f8_value_id x) {
	const f8_node *concat = f8_rewrite_take(&f->rw, m, value, F8_OP_CONCAT, NULL);
	f8_dim d = last_dim(f, x);
	int rank = type_of(f, x)->shape.rank;
	if (!concat || concat->n_inputs != 2 || !f8_dim_is_const(d) || f8_dim_value(d) % 2)
		return false;
	int64_t axis = f8_node_attr_int(concat, "axis", 0), h = f8_dim_value(d) / 2;
	if (axis != -1 && axis != rank - 1)
		return false;
	const f8_node *neg = f8_rewrite_take(&f->rw, m, concat->inputs[0], F8_OP_NEG, NULL);
	const f8_node *upper = neg ? f8_rewrite_take(&f->rw, m, neg->inputs[0], F8_OP_SLICE, NULL)
				   : NULL;
	const f8_node *lower = f8_rewrite_take(&f->rw, m, concat->inputs[1], F8_OP_SLICE, NULL);
	return upper && lower && last_axis_slice(f, upper, x, h, INT64_MAX) &&
	       last_axis_slice(f, lower, x, 0, h);
}

/* The weights a rotary table is computed from are not trained: they become buffers. */
static void mark_table_weights(fuser *f, f8_value_id table) {
	f8_value_id stack[64];
	uint32_t n = 0;
	stack[n++] = table;
	for (uint32_t visited = 0; n && visited < 256; visited++) {
		f8_value *value = &f->rw.graph->values[stack[--n]];
		if (value->producer == F8_NONE) {
			if (value->role == F8_ROLE_PARAMETER)
				value->role = F8_ROLE_BUFFER;
			continue;
		}
		const f8_node *node = &f->rw.graph->nodes[value->producer];
		for (uint32_t i = 0; i < node->n_inputs && n < 64; i++)
			if (node->inputs[i] != F8_NONE)
				stack[n++] = node->inputs[i];
	}
}

/* Rope: Add(Mul(x, cos), Mul(rotate_half(x), sin)), products and sum in either order. */
static f8_status match_rope(fuser *f, f8_rewrite_match *m, const f8_node *root, bool *fused) {
	for (int swap = 0; swap < 4; swap++) {
		restart(m, 1);
		const f8_node *direct = f8_rewrite_take(&f->rw, m, root->inputs[swap & 1], F8_OP_MUL, NULL);
		const f8_node *rotated = f8_rewrite_take(&f->rw, m, root->inputs[1 - (swap & 1)],
							 F8_OP_MUL, NULL);
		if (!direct || !rotated)
			continue;
		int d = swap >> 1; // which operand of the direct product is x
		f8_value_id x = direct->inputs[d], cos = direct->inputs[1 - d];
		for (int r = 0; r < 2; r++) {
			uint32_t keep = m->n_nodes;
			f8_value_id sin = rotated->inputs[1 - r];
			if (!rotate_half(f, m, rotated->inputs[r], x)) {
				restart(m, keep);
				continue;
			}
			if (!f8_type_equal(type_of(f, cos), type_of(f, sin)) ||
			    !f8_rewrite_match_is_closed(&f->rw, m))
				return F8_OK;
			f8_value_id inputs[3] = {x, cos, sin};
			f8_status status = replace(f, m, F8_OP_ROPE, inputs, 3, NULL, 0, fused);
			if (!status && *fused) {
				mark_table_weights(f, cos);
				mark_table_weights(f, sin);
			}
			return status;
		}
	}
	m->why_not = "not x * cos + rotate_half(x) * sin";
	return F8_OK;
}

/* Strips Mul/Div by scalar constants off `value`, multiplying them into *scale. */
static f8_value_id unscale(fuser *f, f8_rewrite_match *m, f8_value_id value, double *scale) {
	for (int depth = 0; depth < 4; depth++) {
		double c;
		const f8_node *mul = f8_rewrite_peek(&f->rw, value, F8_OP_MUL);
		const f8_node *div = f8_rewrite_peek(&f->rw, value, F8_OP_DIV);
		if (mul && f8_rewrite_scalar(&f->rw, mul->inputs[1], &c)) {
			f8_rewrite_take(&f->rw, m, value, F8_OP_MUL, NULL);
			*scale *= c, value = mul->inputs[0];
		} else if (mul && f8_rewrite_scalar(&f->rw, mul->inputs[0], &c)) {
			f8_rewrite_take(&f->rw, m, value, F8_OP_MUL, NULL);
			*scale *= c, value = mul->inputs[1];
		} else if (div && f8_rewrite_scalar(&f->rw, div->inputs[1], &c) && c != 0.0) {
			f8_rewrite_take(&f->rw, m, value, F8_OP_DIV, NULL);
			*scale /= c, value = div->inputs[0];
		} else {
			break;
		}
	}
	return value;
}

/*
 * k from k^T (batch, heads, d, seq): seen through a Transpose or the Reshape-Transpose-Reshape
 * of a batched transpose when the match can take them, into *k with *perm NULL; otherwise *k is
 * the value to transpose by *perm (a new Transpose, made only once the match is certain).
 */
static void untranspose(fuser *f, f8_rewrite_match *m, f8_value_id kt, f8_value_id *k,
			int64_t perm_out[4], const int64_t **perm) {
	static const int64_t swap_last[4] = {0, 1, 3, 2};
	uint32_t keep = m->n_nodes;
	const f8_node *t = f8_rewrite_take(&f->rw, m, kt, F8_OP_TRANSPOSE, NULL);
	const f8_attr *attr = t ? f8_node_attr(t, "perm") : NULL;
	if (attr && attr->ints.n == 4) {
		// k = Transpose(t's input, t's perm then swap_last)
		for (int i = 0; i < 4; i++)
			perm_out[i] = attr->ints.items[swap_last[i]];
		bool identity = perm_out[0] == 0 && perm_out[1] == 1 && perm_out[2] == 2 && perm_out[3] == 3;
		*k = t->inputs[0];
		*perm = identity ? NULL : perm_out;
		return;
	}
	restart(m, keep);
	const f8_node *unflatten = f8_rewrite_take(&f->rw, m, kt, F8_OP_RESHAPE, NULL);
	const f8_node *batched = unflatten ? f8_rewrite_take(&f->rw, m, unflatten->inputs[0],
							     F8_OP_TRANSPOSE, NULL) : NULL;
	const f8_node *flatten = batched ? f8_rewrite_take(&f->rw, m, batched->inputs[0],
							   F8_OP_RESHAPE, NULL) : NULL;
	if (flatten) {
		const f8_shape *x = &type_of(f, flatten->inputs[0])->shape;
		const f8_shape *out = &type_of(f, kt)->shape;
		const f8_attr *bperm = f8_node_attr(batched, "perm");
		bool swaps = bperm && bperm->ints.n == 3 && bperm->ints.items[0] == 0 &&
			     bperm->ints.items[1] == 2 && bperm->ints.items[2] == 1;
		if (swaps && x->rank == 4 && out->rank == 4 && f8_dim_equal(x->dims[0], out->dims[0]) &&
		    f8_dim_equal(x->dims[1], out->dims[1]) && f8_dim_equal(x->dims[2], out->dims[3]) &&
		    f8_dim_equal(x->dims[3], out->dims[2])) {
			*k = flatten->inputs[0];
			*perm = NULL;
			return;
		}
	}
	restart(m, keep);
	memcpy(perm_out, swap_last, sizeof swap_last);
	*k = kt;
	*perm = perm_out;
}

/* Grouped-query heads repeated for the product: Reshape(Expand(Unsqueeze(kv, 2))) -> kv. */
static f8_value_id ungroup(fuser *f, f8_rewrite_match *m, f8_value_id value) {
	uint32_t keep = m->n_nodes;
	const f8_node *reshape = f8_rewrite_take(&f->rw, m, value, F8_OP_RESHAPE, NULL);
	const f8_node *expand = reshape ? f8_rewrite_take(&f->rw, m, reshape->inputs[0],
							  F8_OP_EXPAND, NULL) : NULL;
	const f8_node *unsqueeze = expand ? f8_rewrite_take(&f->rw, m, expand->inputs[0],
							    F8_OP_UNSQUEEZE, NULL) : NULL;
	const f8_attr *axes = unsqueeze ? f8_node_attr(unsqueeze, "axes") : NULL;
	if (axes && axes->ints.n == 1 && axes->ints.items[0] == 2) {
		const f8_shape *kv = &type_of(f, unsqueeze->inputs[0])->shape;
		const f8_shape *full = &type_of(f, value)->shape;
		const f8_shape *grouped = &type_of(f, expand->outputs[0])->shape;
		f8_dim heads;
		if (kv->rank == 4 && full->rank == 4 && grouped->rank == 5 &&
		    f8_dim_mul(grouped->dims[1], grouped->dims[2], &heads) &&
		    f8_dim_equal(heads, full->dims[1]) && f8_dim_equal(kv->dims[2], full->dims[2]) &&
		    f8_dim_equal(kv->dims[3], full->dims[3]))
			return unsqueeze->inputs[0];
	}
	restart(m, keep);
	return value;
}

/* Whether an additive mask is the causal one: Where(tril(ones) == 0, -big, 0) or
 * Where(tril(ones) != 0 as bool, 0, -big), square (seq, seq). */
static bool is_causal_mask(fuser *f, f8_value_id mask) {
	const f8_node *where = f8_rewrite_peek(&f->rw, mask, F8_OP_WHERE);
	double a, b, zero;
	if (!where || !f8_rewrite_scalar(&f->rw, where->inputs[1], &a) ||
	    !f8_rewrite_scalar(&f->rw, where->inputs[2], &b))
		return false;
	f8_value_id condition = where->inputs[0];
	bool masked_when_true = a <= -1e30 && b == 0.0, kept_when_true = a == 0.0 && b <= -1e30;
	const f8_node *equal = f8_rewrite_peek(&f->rw, condition, F8_OP_EQUAL);
	if (equal && f8_rewrite_scalar(&f->rw, equal->inputs[1], &zero) && zero == 0.0 &&
	    masked_when_true)
		condition = equal->inputs[0];
	else if (!kept_when_true)
		return false;
	const f8_node *cast = f8_rewrite_peek(&f->rw, condition, F8_OP_CAST);
	const f8_node *trilu = f8_rewrite_peek(&f->rw, cast ? cast->inputs[0] : condition, F8_OP_TRILU);
	if (!trilu || f8_node_attr_int(trilu, "upper", 1) != 0 || f8_node_attr_int(trilu, "k", 0) != 0)
		return false;
	const f8_node *expand = f8_rewrite_peek(&f->rw, trilu->inputs[0], F8_OP_EXPAND);
	double one;
	const f8_shape *shape = &type_of(f, mask)->shape;
	return expand && f8_rewrite_scalar(&f->rw, expand->inputs[0], &one) && one == 1.0 &&
	       shape->rank == 2 && f8_dim_equal(shape->dims[0], shape->dims[1]);
}

/* The window w when the mask (n elements of rows of s) keeps exactly the w latest positions
 * up to each row's own (j <= i and i - j < w), else 0. */
static int64_t sliding_window(const double *v, int64_t n, int64_t s, double lowest) {
	int64_t window = 0;
	for (int64_t j = 0; j < s; j++) // the last row keeps its window
		window += v[s * s - s + j] == 0;
	if (window < 1 || window >= s)
		return 0;
	for (int64_t e = 0; e < n; e++) {
		int64_t i = e / s % s, j = e % s;
		bool masked = isinf(v[e]) ? v[e] < 0 : v[e] <= lowest / 2;
		if (j <= i && i - j < window ? v[e] != 0 : !masked)
			return 0;
	}
	return window;
}

/*
 * Whether the values of a mask of shape (..., s, s) are the causal mask: every element on and
 * below the diagonal 0, every one above it -inf or at most half the dtype's lowest finite value
 * (transformers writes torch.finfo(dtype).min), in every leading index (batch, head). Says
 * where it is not in `why`.
 */
static bool causal_values(const double *v, const f8_type *type, char *why, size_t size) {
	const f8_shape *shape = &type->shape;
	int64_t n = 1;
	for (int d = 0; d < shape->rank; d++)
		n *= f8_dim_value(shape->dims[d]);
	int64_t s = shape->rank >= 2 ? f8_dim_value(shape->dims[shape->rank - 1]) : 0;
	if (shape->rank < 2 || f8_dim_value(shape->dims[shape->rank - 2]) != s || s < 1) {
		snprintf(why, size, "it is not square in its last two axes");
		return false;
	}
	if (!f8_dtype_is_float(type->dtype)) {
		snprintf(why, size, "it is %s, not an additive float mask", f8_dtype_name(type->dtype));
		return false;
	}
	double lowest = -f8_dtype_get_info(type->dtype)->max;
	for (int64_t e = 0; e < n; e++) {
		int64_t i = e / s % s, j = e % s;
		bool masked = isinf(v[e]) ? v[e] < 0 : v[e] <= lowest / 2;
		if (j <= i ? v[e] != 0 : !masked) {
			int64_t window = sliding_window(v, n, s, lowest);
			if (window)
				snprintf(why, size, "it is a causal sliding window of %lld tokens, which the "
					 "Attention op has no attribute for", (long long)window);
			else
				snprintf(why, size, "its element at row %lld, column %lld (of %lld x %lld) is "
					 "%g, where the causal mask has %s", (long long)i, (long long)j,
					 (long long)s, (long long)s, v[e], j <= i ? "0" : "the dtype's lowest");
			return false;
		}
	}
	return true;
}

/* Whether `mask`, which its structure did not show causal, is causal by its value: asks the
 * evaluator once per mask value and keeps the verdict for the report. */
static bool evaluated_causal(fuser *f, f8_value_id mask) {
	if (!f->evaluator || f->error)
		return false;
	for (uint32_t i = 0; i < f->n_verdicts; i++)
		if (f->verdicts[i].mask == mask)
			return f->verdicts[i].causal;
	mask_verdict *grown = f8_realloc(f->verdicts, (f->n_verdicts + 1) * sizeof *grown);
	if (!grown) {
		f->error = f8_diag_set(f->diag, F8_ERR_NOMEM, "out of memory");
		return false;
	}
	f->verdicts = grown;
	mask_verdict *verdict = &f->verdicts[f->n_verdicts++];
	*verdict = (mask_verdict){.mask = mask};
	const f8_graph *graph = f->rw.graph;
	double *values = NULL;
	const char *assumed = "";
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_status status = f->evaluator->evaluate(f->evaluator, graph, mask, &values, &assumed,
						  &diag);
	char why[200] = "";
	if (status == F8_ERR_NOMEM) {
		f->error = f8_diag_set(f->diag, F8_ERR_NOMEM, "out of memory");
	} else if (status) {
		snprintf(verdict->why, sizeof verdict->why, "stays an input: its value is not known "
			 "when compiling (%.300s)", diag.message);
	} else if (!(verdict->causal = causal_values(values, type_of(f, mask), why, sizeof why))) {
		snprintf(verdict->why, sizeof verdict->why, "stays an input: it is not causal: %s",
			 why);
	} else {
		const f8_shape *shape = &type_of(f, mask)->shape;
		int n = snprintf(verdict->why, sizeof verdict->why, "is causal, evaluated at its sizes (");
		for (int d = 0; d < shape->rank && n < (int)sizeof verdict->why; d++)
			n += snprintf(verdict->why + n, sizeof verdict->why - (size_t)n, "%s%lld",
				      d ? ", " : "", (long long)f8_dim_value(shape->dims[d]));
		if (n < (int)sizeof verdict->why)
			snprintf(verdict->why + n, sizeof verdict->why - (size_t)n, ")%s%s", *assumed ? ", with " : "", assumed);
	}
	f8_free(values);
	return verdict->causal;
}

/*
 * Attention: MatMul(Softmax(scale * MatMul(q, k^T) [+ mask]), v), the scale as Mul/Div by
 * constants on the scores or on q and k^T, grouped-query k and v repeated by Expand.
 */
static f8_status match_attention(fuser *f, f8_rewrite_match *m, const f8_node *root,
				 bool *fused) {
	f8_value_id probabilities = root->inputs[0];
	const f8_node *guard = f8_rewrite_peek(&f->rw, probabilities, F8_OP_WHERE);
	double zero;
	if (guard && f8_rewrite_scalar(&f->rw, guard->inputs[1], &zero) && zero == 0.0) {
		// Where(IsNaN(p), 0, p): scaled_dot_product_attention's guard for rows that attend to
		// nothing; Attention gives 0 for such rows too.
		const f8_node *is_nan = f8_rewrite_peek(&f->rw, guard->inputs[0], F8_OP_IS_NAN);
		if (is_nan && is_nan->inputs[0] == guard->inputs[2]) {
			f8_rewrite_take(&f->rw, m, probabilities, F8_OP_WHERE, NULL);
			f8_rewrite_take(&f->rw, m, guard->inputs[0], F8_OP_IS_NAN, NULL);
			probabilities = guard->inputs[2];
		}
	}
	const f8_node *softmax = f8_rewrite_take(&f->rw, m, probabilities, F8_OP_SOFTMAX,
						 "the left operand is not a softmax");
	if (!softmax)
		return F8_OK;
	int rank = type_of(f, softmax->outputs[0])->shape.rank;
	int64_t axis = f8_node_attr_int(softmax, "axis", -1);
	if (rank != 4 || (axis != -1 && axis != 3)) {
		m->why_not = "the softmax is not over the last axis of (batch, heads, seq, seq)";
		return F8_OK;
	}
	f8_value_id scores = softmax->inputs[0], mask = F8_NONE;
	double scale = 1.0;
	const f8_node *product = NULL;
	uint32_t keep = m->n_nodes;
	const f8_node *add = f8_rewrite_take(&f->rw, m, scores, F8_OP_ADD, NULL);
	for (int swap = 0; add && swap < 2 && !product; swap++) {
		restart(m, keep + 1);
		scale = 1.0;
		f8_value_id inner = unscale(f, m, add->inputs[swap], &scale);
		if ((product = f8_rewrite_take(&f->rw, m, inner, F8_OP_MATMUL, NULL)))
			mask = add->inputs[1 - swap];
	}
	if (!product) {
		restart(m, keep);
		scale = 1.0;
		product = f8_rewrite_take(&f->rw, m, unscale(f, m, scores, &scale), F8_OP_MATMUL,
					  "the scores are not a product q k^T, scaled");
	}
	if (!product)
		return F8_OK;
	f8_value_id q = unscale(f, m, product->inputs[0], &scale), k;
	f8_value_id kt = unscale(f, m, product->inputs[1], &scale), v = root->inputs[1];
	if (type_of(f, q)->shape.rank != 4 || type_of(f, kt)->shape.rank != 4) {
		m->why_not = "q and k^T are not (batch, heads, seq, d) and (batch, heads, d, seq)";
		return F8_OK;
	}
	int64_t perm_buffer[4];
	const int64_t *perm;
	untranspose(f, m, kt, &k, perm_buffer, &perm);
	if (!perm) // k is (batch, heads, seq, d) already: its heads may be repeated kv heads
		k = ungroup(f, m, k);
	v = ungroup(f, m, v);
	bool causal = mask != F8_NONE && (is_causal_mask(f, mask) || evaluated_causal(f, mask));
	if (!f8_rewrite_match_is_closed(&f->rw, m))
		return F8_OK;
	// Nodes are made only now: adding one may move the graph's node array.
	if (perm) {
		f8_attr attr = {.name = "perm", .kind = F8_ATTR_INTS, .ints = {4, (int64_t *)perm}};
		f8_value_id transposed;
		f8_status status = f8_rewrite_add(&f->rw, m, F8_OP_TRANSPOSE, &k, 1, &attr, 1,
						  &transposed);
		if (status || transposed == F8_NONE)
			return status;
		k = transposed;
	}
	f8_value_id inputs[4] = {q, k, v, mask};
	f8_attr attrs[2] = {{.name = "causal", .kind = F8_ATTR_INT, .i = causal},
			    {.name = "scale", .kind = F8_ATTR_FLOAT, .f = scale}};
	return replace(f, m, F8_OP_ATTENTION, inputs, mask != F8_NONE && !causal ? 4 : 3, attrs, 2,
		       fused);
}

/* The patterns, in the order their sweeps run. */
typedef f8_status (*match_fn)(fuser *f, f8_rewrite_match *m, const f8_node *root, bool *fused);
static const struct pattern {
	const char *name;
	f8_op root_a, root_b; // the ops a root may have (root_b F8_OP_COUNT: one only)
	match_fn match;
} patterns[] = {
	{"outer product", F8_OP_MATMUL, F8_OP_COUNT, match_outer_product},
	{"FP8 GEMM (QDQ)", F8_OP_MATMUL, F8_OP_COUNT, match_qdq_linear},
	{"Embedding", F8_OP_GATHER, F8_OP_COUNT, match_embedding},
	{"Linear (bias)", F8_OP_ADD, F8_OP_GEMM, match_linear_bias},
	{"Linear", F8_OP_MATMUL, F8_OP_GEMM, match_linear},
	{"Linear (reshapes)", F8_OP_RESHAPE, F8_OP_COUNT, match_linear_sandwich},
	{"LayerNorm", F8_OP_ADD, F8_OP_COUNT, match_layer_norm},
	{"RMSNorm", F8_OP_MUL, F8_OP_COUNT, match_rms_norm},
	{"Gelu", F8_OP_MUL, F8_OP_COUNT, match_gelu},
	{"SwiGLU", F8_OP_MUL, F8_OP_COUNT, match_swiglu},
	{"Rope", F8_OP_ADD, F8_OP_COUNT, match_rope},
	{"Attention", F8_OP_MATMUL, F8_OP_COUNT, match_attention},
};
enum { N_PATTERNS = sizeof patterns / sizeof patterns[0] };

static f8_status sweep(fuser *f, const struct pattern *pattern, uint32_t *count) {
	f8_rewriter *rw = &f->rw;
	for (uint32_t p = 0; p < rw->graph->n_order; p++) {
		f8_node_id id = rw->graph->order[p];
		if (rw->removed[id])
			continue;
		const f8_node *node = &rw->graph->nodes[id];
		if (node->op != pattern->root_a && node->op != pattern->root_b)
			continue;
		f8_rewrite_match m;
		f8_rewrite_match_begin(&m, id);
		bool fused = false;
		f8_status status = pattern->match(f, &m, node, &fused);
		if (status)
			return status;
		if (fused)
			(*count)++;
		else
			note(f, id, pattern->name, m.why_not);
	}
	return F8_OK;
}

/* Folding: an integer or boolean value a float computation reads (positions a table is indexed
 * by, a mask's condition) that depends only on the compiled sizes and, in a training step, on
 * the inputs f8c train fills, becomes a Constant of what the evaluator computes, so that its
 * arithmetic (a CumSum of attention_mask, say) is not run every step and needs no kernel. */
enum { FOLD_MAX_ELEMENTS = 1 << 16 };

/* For each value of the graph (n_values of them), whether some node of the program computes a
 * float value from it: one walk over the program, rather than one per value folded. The answers
 * hold while folding runs: a fold replaces an integer value's producer by a Constant (no inputs)
 * that takes over the same value, and the program's order is rewritten only when the rewriter
 * finishes. f8_malloc'd; NULL when out of memory. */
static bool *values_read_by_float(const f8_graph *graph) {
	bool *read = f8_calloc(graph->n_values ? graph->n_values : 1, sizeof *read);
	for (uint32_t p = 0; read && p < graph->n_order; p++) {
		const f8_node *node = &graph->nodes[graph->order[p]];
		bool makes_float = false;
		for (uint32_t o = 0; o < node->n_outputs && !makes_float; o++)
			makes_float = f8_dtype_is_float(graph->values[node->outputs[o]].type.dtype);
		for (uint32_t i = 0; makes_float && i < node->n_inputs; i++)
			if (node->inputs[i] != F8_NONE)
				read[node->inputs[i]] = true;
	}
	return read;
}

/* Folds the value node `id` makes when it is foldable (`float_read`: values_read_by_float of the
 * graph folding started with); the verdict for the report. */
static f8_status fold_value(fuser *f, f8_rewriter *rw, const bool *float_read, f8_node_id id) {
	f8_graph *graph = rw->graph;
	const f8_node *node = &graph->nodes[id];
	if (node->op == F8_OP_CONSTANT || node->n_outputs != 1)
		return F8_OK;
	f8_value_id value = node->outputs[0];
	const f8_type *type = &graph->values[value].type;
	f8_dtype dtype = type->dtype;
	int64_t n = 1;
	for (int d = 0; d < type->shape.rank && n <= FOLD_MAX_ELEMENTS; d++)
		n = f8_dim_is_const(type->shape.dims[d]) ? n * f8_dim_value(type->shape.dims[d])
							  : FOLD_MAX_ELEMENTS + 1;
	if ((dtype != F8_DTYPE_I64 && dtype != F8_DTYPE_I32 && dtype != F8_DTYPE_BOOL) ||
	    n > FOLD_MAX_ELEMENTS || !float_read[value])
		return F8_OK;
	double *values = NULL;
	const char *assumed = "";
	f8_diag quiet;
	f8_diag_clear(&quiet);
	f8_status status = f->evaluator->evaluate(f->evaluator, graph, value, &values, &assumed,
						  &quiet);
	if (status)
		return status == F8_ERR_NOMEM ? f8_diag_set(f->diag, status, "out of memory") : F8_OK;
	size_t size = f8_dtype_get_info(dtype)->bytes;
	uint8_t *bytes = f8_calloc((size_t)n * size + 1, 1);
	for (int64_t i = 0; bytes && i < n; i++) {
		int64_t v = (int64_t)values[i];
		if (dtype == F8_DTYPE_I64)
			memcpy(bytes + i * 8, &v, 8);
		else if (dtype == F8_DTYPE_I32)
			memcpy(bytes + i * 4, &(int32_t){(int32_t)v}, 4);
		else
			bytes[i] = v != 0;
	}
	f8_free(values);
	if (!bytes)
		return f8_diag_set(f->diag, F8_ERR_NOMEM, "out of memory");
	f8_tensor_data data = {.dtype = dtype, .shape = type->shape, .n_bytes = (size_t)n * size,
			       .data = bytes};
	f8_attr attr = {.name = "value", .kind = F8_ATTR_TENSOR, .tensor = &data};
	char name[200];
	snprintf(name, sizeof name, "%s", graph->values[value].name);
	f8_rewrite_match m;
	f8_rewrite_match_begin(&m, id);
	bool folded = false;
	f8_value_id out;
	status = f8_rewrite_add(rw, &m, F8_OP_CONSTANT, NULL, 0, &attr, 1, &out);
	if (!status && out != F8_NONE)
		status = f8_rewrite_commit(rw, &m, &folded);
	f8_free(bytes);
	fold_note *grown = status || !folded ? NULL
			   : f8_realloc(f->folds, (f->n_folds + 1) * sizeof *grown);
	if (grown) {
		f->folds = grown;
		fold_note *fold = &f->folds[f->n_folds++];
		snprintf(fold->text, sizeof fold->text, "%s (%s, %lld elements) is folded into a "
			 "constant: it depends only on the compiled sizes%s%s", name,
			 f8_dtype_name(dtype), (long long)n, *assumed ? " and " : "", assumed);
	}
	return status;
}

/* Folds what can be (above), then drops what only the folded values read. */
static f8_status fold_constants(fuser *f, f8_graph *graph) {
	if (!f->evaluator)
		return F8_OK;
	f8_rewriter rw;
	f8_status status = f8_rewriter_create(&rw, graph, f->diag);
	if (status)
		return status;
	uint32_t n = graph->n_order;
	f8_node_id *order = f8_malloc((n ? n : 1) * sizeof *order);
	bool *float_read = values_read_by_float(graph);
	if (!order || !float_read)
		status = f8_diag_set(f->diag, F8_ERR_NOMEM, "out of memory");
	else if (n) // an empty graph has no order array
		memcpy(order, graph->order, n * sizeof *order);
	// From the last node back: a value the folds make dead is not evaluated for nothing.
	for (uint32_t p = n; !status && p-- > 0;)
		if (!rw.removed[order[p]])
			status = fold_value(f, &rw, float_read, order[p]);
	f8_free(float_read);
	f8_free(order);
	if (!status)
		status = f8_rewriter_finish(&rw);
	f8_rewriter_destroy(&rw);
	return status ? status : f8_pass_canonicalize_run(graph, f->diag);
}

/* The float ops whose survival the report explains: each is what some pattern looks for. */
static bool reported(const f8_graph *graph, const f8_node *node) {
	static const f8_op ops[] = {F8_OP_MATMUL, F8_OP_GEMM, F8_OP_SOFTMAX, F8_OP_ERF, F8_OP_TANH,
				    F8_OP_SIGMOID, F8_OP_GATHER, F8_OP_REDUCE_MEAN, F8_OP_NEG};
	if (!node->n_outputs || !f8_dtype_is_float(graph->values[node->outputs[0]].type.dtype))
		return false;
	for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
		if (node->op == ops[i])
			return true;
	return false;
}

static void report(const fuser *f, const uint32_t *counts, FILE *out) {
	const f8_graph *graph = f->rw.graph;
	fprintf(out, "fuse-patterns:");
	for (int i = 0; i < N_PATTERNS; i++)
		fprintf(out, "%s %u %s", i ? "," : "", counts[i], patterns[i].name);
	fprintf(out, "\n");
	uint32_t left = 0;
	for (uint32_t p = 0; p < graph->n_order; p++) {
		f8_node_id id = graph->order[p];
		if (!reported(graph, &graph->nodes[id]))
			continue;
		char what[F8_DIAG_NODE_MAX];
		fprintf(out, "  not fused: %s: ", f8_graph_describe_node(graph, id, what, sizeof what));
		const miss *slots = id < f->cap_misses ? f->misses[id] : NULL;
		if (!slots || !slots[0].why)
			fprintf(out, "no pattern starts at a %s", f8_op_name(graph->nodes[id].op));
		for (int i = 0; slots && i < 2 && slots[i].why; i++)
			fprintf(out, "%snot %s: %s", i ? "; " : "", slots[i].pattern, slots[i].why);
		fprintf(out, "\n");
		left++;
	}
	fprintf(out, "  %u primitive node%s left where patterns look\n", left, left == 1 ? "" : "s");
	for (uint32_t i = 0; i < f->n_verdicts; i++)
		fprintf(out, "  attention mask %%%s %s\n", graph->values[f->verdicts[i].mask].name,
			f->verdicts[i].why);
	for (uint32_t i = 0; i < f->n_folds; i++)
		fprintf(out, "  %%%s\n", f->folds[i].text);
}

f8_status f8_pass_fuse_patterns_run(f8_graph *graph, const f8_value_evaluator *evaluator,
				    FILE *report_to, f8_diag *diag) {
	fuser f = {.evaluator = evaluator, .diag = diag};
	uint32_t counts[N_PATTERNS] = {0};
	f8_status status = f8_rewriter_create(&f.rw, graph, diag);
	if (status)
		return status;
	f.cap_misses = graph->n_nodes;
	if (!(f.misses = f8_calloc(f.cap_misses ? f.cap_misses : 1, sizeof *f.misses)))
		status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	// A Rope the model already wrote (ONNX RotaryEmbedding) has untrained tables too.
	for (uint32_t i = 0; !status && i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		if (node->op == F8_OP_ROPE) {
			mark_table_weights(&f, node->inputs[1]);
			mark_table_weights(&f, node->inputs[2]);
		}
	}
	for (int i = 0; !status && i < N_PATTERNS; i++)
		status = sweep(&f, &patterns[i], &counts[i]);
	if (!status)
		status = f.error;
	if (!status)
		status = f8_rewriter_finish(&f.rw);
	// The absorbed nodes are out of the program; what only they read is dead now.
	if (!status)
		status = f8_pass_canonicalize_run(graph, diag);
	if (!status)
		status = fold_constants(&f, graph);
	if (!status && report_to)
		report(&f, counts, report_to);
	f8_free(f.misses);
	f8_free(f.verdicts);
	f8_free(f.folds);
	f8_rewriter_destroy(&f.rw);
	return status;
}
