/*
 * The optimizer family (codegen/lower.h): every AdamW of the opt phase, and the ConstantOfShape
 * that zeroes each one's gradient accumulator, in one multi-tensor kernel of constant size, as
 * apex's and PyTorch's fused multi-tensor AdamW do.
 *
 * Each parameter is cut into chunks of CHUNK elements; the chunks of all of them are numbered
 * one after the other, and the grid loop runs over all the chunks. The kernel reaches a
 * parameter's buffers through a table (kir.h's table parameter, codegen/lower.h's
 * f8_kernel_table) that the launcher fills: one row per tensor, its columns (enum column) its
 * first chunk and element count (constants), its variant (below), its weight decay as two f32
 * bit patterns, and the addresses of its param, grad, exp_avg, exp_avg_sq, their updated
 * copies and the zeroed gradient accumulator (0 where the tensor has none). A grid iteration
 * finds its chunk's row, loads the row's addresses and runs one block loop over the chunk's
 * elements with load.ptr and store.ptr, reading each element of param, grad, m and v once and
 * writing param', m', v' and the zeroed gradient once. So the code does not grow with the
 * parameters: GPT-1.3B's 292 and gpt3-175b's are one launch of the same few hundred
 * instructions (the old form, one block loop per parameter, made 1 MB of PTX for 292 and
 * spilled 2.5 KB a thread).
 *
 * Finding the row: a binary search over the rows' first chunks, unrolled to ceil(log2(rows))
 * steps (9 for 292), each a load of one i64 that every thread of the block reads (a
 * broadcast, from L1 or L2 after the first blocks: the rows' first chunks are a few KB). A
 * map from chunk to row would cost one load, but it is an array of one entry per chunk for
 * the launcher to build and copy (GPT-1.3B: 320,000 chunks, 2.5 MB), against 9 dependent
 * loads that take at most a few us of a chunk's ~30 us of memory traffic, hidden by the SM's
 * other resident blocks; the search needs nothing but the table. Rows of no elements (zero
 * chunks) keep their place: the search finds the last row whose first chunk is at most the
 * chunk, which is the one that holds it.
 *
 * Variants: what the code of a tensor's update depends on besides its buffers: the dtypes of
 * its buffers, which outputs leave the group, the AdamW attributes other than weight_decay
 * (beta1, beta2, epsilon: compile-time constants of the arithmetic, and which lr, step,
 * grad_scale, grad_norm and found_inf it reads) and its zeroing's fill value. A step whose
 * grad_norm is not finite or whose found_inf is not 0 is skipped (f8_infer_adamw): each element
 * stores param, m and v as it loaded them, a select on one flag computed at the top level. A launch has one block loop per variant,
 * each of trip count 0 unless the row's variant is its own (a model has one or two: all its
 * parameters alike, a zeroing without an AdamW aside). A group of more than MAX_VARIANTS is cut
 * into launches of that many variants each (the tensors of the first MAX_VARIANTS to appear,
 * in member order; then the next), each with its own table. The weight decay is
 * a column, not a variant, since models mix 0 (biases, norms) and 0.1 (matrices): the row's
 * decay (1 - lr weight_decay) is computed once per grid iteration.
 *
 * The arithmetic is runtime/cpu/kernels_optim.c's, torch.optim.AdamW's single-tensor step, op
 * for op in f32, each op rounding once (the IR contracts nothing). Its scalars the reference
 * computes in double from the f32 lr, the integer step and the attributes, then rounds to
 * float: decay = 1 - lr weight_decay, minus_step_size = -lr / (1 - beta1^t),
 * bias_correction2_sqrt = sqrt(1 - beta2^t). The IR has only f32, so these are computed in
 * double-float arithmetic (a value as the unevaluated sum of two floats, about 48 bits, with
 * fma's exact products), beta^t by squaring over the step's 32 low bits; the float they round
 * to is the reference's except where the double result lies within about 2^-40 of it of a
 * midpoint between two floats (then a neighbour), which tests/codegen/test_lower_groups.c's
 * exact check over steps 1 to 3000 did not meet. The constants (1 - beta1, beta2, 1 - beta2,
 * epsilon, and the weight decay's two floats in the table) are rounded to float here, as the
 * reference rounds them.
 */
#include "codegen/lower_internal.h" // f8_lower, f8_lower_*

#include <math.h>   // fabs
#include <stdio.h>  // snprintf
#include <string.h> // memcpy

#include "ir/alloc.h" // f8_calloc, f8_malloc, f8_realloc, f8_free
#include "ir/ops.h"   // f8_node_attr_float, f8_tensor_data_scalar

enum {
	CHUNK = 4096,     // elements per grid iteration
	MAX_VARIANTS = 8, // block loops per launch (and scalar sets: one a variant at most)
	STEP_BITS = 32,   // the step's bits beta^t looks at: steps beyond 2^32 take 2^32 - 1
};

/* The columns of a table row. The buffer columns, BUFFER_FIRST on, are addresses. */
typedef enum column {
	COLUMN_FIRST_CHUNK,     // the tensor's first chunk, counted from the launch's first
	COLUMN_NUMEL,           // its elements
	COLUMN_VARIANT,         // its variant's index in the launch
	COLUMN_WEIGHT_DECAY_HI, // its weight decay as the f32 bits of hi and lo, the double's
	COLUMN_WEIGHT_DECAY_LO, // float and the float of the rest
	COLUMN_PARAM,           // AdamW's inputs 0-3, its outputs 0-2, the zeroing's output
	COLUMN_GRAD,
	COLUMN_M,
	COLUMN_V,
	COLUMN_PARAM_OUT,
	COLUMN_M_OUT,
	COLUMN_V_OUT,
	COLUMN_ZERO_OUT,
	N_COLUMNS,
	BUFFER_FIRST = COLUMN_PARAM,
	N_BUFFERS = N_COLUMNS - BUFFER_FIRST,
	N_INPUTS = COLUMN_PARAM_OUT - BUFFER_FIRST, // the buffer columns read
} column;

static const char *const column_names[N_COLUMNS] = {
	"first_chunk", "numel", "variant", "weight_decay_hi", "weight_decay_lo", "param", "grad",
	"exp_avg", "exp_avg_sq", "param_out", "exp_avg_out", "exp_avg_sq_out", "grad_zeroed"};

/* What a tensor's code depends on (the header's variants). */
typedef struct variant_key {
	double beta1, beta2, epsilon;      // AdamW's (unused without one)
	f8_value_id lr, step, grad_scale;  // grad_scale F8_NONE when the AdamW has none
	f8_value_id grad_norm, found_inf;  // what skips the step; F8_NONE when absent
	f8_dtype dtypes[N_BUFFERS];        // per buffer column; F8_DTYPE_UNDEFINED: none
	double fill;                       // the zeroing's value
} variant_key;

/* One tensor of the group: a parameter's AdamW and the zeroing of its gradient, or either. */
typedef struct tensor {
	const f8_node *adamw;  // NULL: a zeroing of no member's gradient
	const f8_node *zero;   // NULL: none
	f8_value_id buffers[N_BUFFERS]; // per buffer column; F8_NONE: none
	double weight_decay;
	int64_t numel, chunks;
	int64_t first_chunk;   // in its launch
	uint32_t variant;      // its index among the group's variants, in order of first use
	variant_key key;
} tensor;

/* A double-float: the value hi + lo, |lo| at most half an ulp of hi. */
typedef struct dd {
	f8_kir_id hi, lo;
} dd;

/* A scalar set (lr, step, grad_scale, the skip's inputs and the betas) and its values at the
 * top level. */
typedef struct scalars {
	const variant_key *key;
	f8_kir_id lr, minus_step_size, bias_correction2_sqrt, grad_scale; // f32
	f8_kir_id skip; // i1: the step is skipped (NONE: it never is)
} scalars;

typedef struct optimizer {
	f8_lower lw;
	tensor *tensors;
	uint32_t *launch, n;               // (n) this launch's tensors (indexes), in order
	const variant_key *variants[MAX_VARIANTS]; // this launch's, in order of first use
	uint32_t n_variants;
	scalars sets[MAX_VARIANTS];
	uint32_t n_sets;
	uint32_t table;                    // the table parameter
} optimizer;

static bool is_float(f8_dtype dtype) {
	return dtype == F8_DTYPE_F32 || dtype == F8_DTYPE_BF16 || dtype == F8_DTYPE_F16;
}

static bool constant_numel(const f8_graph *graph, f8_value_id value, int64_t *numel) {
	f8_dim dim;
	if (!f8_shape_numel(&graph->values[value].type.shape, &dim) || !f8_dim_is_const(dim))
		return false;
	*numel = f8_dim_value(dim);
	return true;
}

/* AdamW: float param and grad, f32 moments and scalars (type inference checked those), a
 * constant shape. ConstantOfShape: a float output and a scalar value, or none (zeros). */
bool f8_lower_optimizer_lowers(const f8_graph *graph, const f8_node *node) {
	const f8_value *v = graph->values;
	int64_t numel;
	if (!constant_numel(graph, node->outputs[0], &numel))
		return false;
	if (node->op == F8_OP_CONSTANT_OF_SHAPE) {
		const f8_attr *value = f8_node_attr(node, "value");
		double scalar;
		return is_float(v[node->outputs[0]].type.dtype) &&
		       (!value || f8_tensor_data_scalar(value->tensor, &scalar));
	}
	return is_float(v[node->inputs[0]].type.dtype) && is_float(v[node->inputs[1]].type.dtype) &&
	       is_float(v[node->outputs[0]].type.dtype);
}

/* The value ConstantOfShape `node` fills with. */
static double fill_value(const f8_node *node) {
	const f8_attr *value = f8_node_attr(node, "value");
	double scalar = 0;
	if (value)
		f8_tensor_data_scalar(value->tensor, &scalar);
	return scalar;
}

static bool same_key(const variant_key *a, const variant_key *b) {
	bool same = a->beta1 == b->beta1 && a->beta2 == b->beta2 && a->epsilon == b->epsilon &&
		    a->lr == b->lr && a->step == b->step && a->grad_scale == b->grad_scale &&
		    a->grad_norm == b->grad_norm && a->found_inf == b->found_inf && a->fill == b->fill;
	for (uint32_t c = 0; same && c < N_BUFFERS; c++)
		same = a->dtypes[c] == b->dtypes[c];
	return same;
}

/* Whether two variants share their scalars (the betas, lr, step, grad_scale, the skip's). */
static bool same_scalars(const variant_key *a, const variant_key *b) {
	return a->beta1 == b->beta1 && a->beta2 == b->beta2 && a->lr == b->lr &&
	       a->step == b->step && a->grad_scale == b->grad_scale &&
	       a->grad_norm == b->grad_norm && a->found_inf == b->found_inf;
}

/* Which values leave the group (f8_lower_escapes, for all values in one pass over the graph
 * rather than one a value: a model has thousands of parameters), f8_calloc'd; NULL when
 * memory runs out. */
static bool *escaping_values(const f8_lower *lw) {
	const f8_graph *graph = lw->graph;
	bool *escapes = f8_calloc(graph->n_values + 1, sizeof *escapes);
	if (!escapes)
		return NULL;
	for (uint32_t i = 0; i < graph->n_outputs; i++)
		escapes[graph->outputs[i]] = true;
	for (uint32_t i = 0; i < graph->n_updates; i++)
		escapes[graph->updates[i].source] = true;
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		for (uint32_t j = 0; node->group != lw->group && j < node->n_inputs; j++)
			if (node->inputs[j] != F8_NONE)
				escapes[node->inputs[j]] = true;
	}
	return escapes;
}

/* Tensor t's buffers (the outputs that leave the group: `escapes`; every input) and its
 * variant key. */
static void describe(const f8_lower *lw, const bool *escapes, tensor *t) {
	const f8_graph *graph = lw->graph;
	variant_key *key = &t->key;
	*key = (variant_key){.lr = F8_NONE, .step = F8_NONE, .grad_scale = F8_NONE,
			     .grad_norm = F8_NONE, .found_inf = F8_NONE};
	for (uint32_t c = 0; c < N_BUFFERS; c++)
		t->buffers[c] = F8_NONE;
	if (t->adamw) {
		const f8_node *node = t->adamw;
		key->beta1 = f8_node_attr_float(node, "beta1", 0.9);
		key->beta2 = f8_node_attr_float(node, "beta2", 0.999);
		key->epsilon = f8_node_attr_float(node, "epsilon", 1e-8);
		key->lr = node->inputs[4];
		key->step = node->inputs[5];
		key->grad_scale = node->n_inputs > 6 ? node->inputs[6] : F8_NONE;
		key->grad_norm = node->n_inputs > 7 ? node->inputs[7] : F8_NONE;
		key->found_inf = node->n_inputs > 8 ? node->inputs[8] : F8_NONE;
		t->weight_decay = f8_node_attr_float(node, "weight_decay", 0.0);
		for (uint32_t i = 0; i < N_INPUTS; i++)
			t->buffers[i] = node->inputs[i];
		for (uint32_t o = 0; o < 3; o++)
			if (escapes[node->outputs[o]])
				t->buffers[COLUMN_PARAM_OUT - BUFFER_FIRST + o] = node->outputs[o];
	}
	if (t->zero && escapes[t->zero->outputs[0]]) {
		t->buffers[COLUMN_ZERO_OUT - BUFFER_FIRST] = t->zero->outputs[0];
		key->fill = fill_value(t->zero);
	}
	for (uint32_t c = 0; c < N_BUFFERS; c++)
		key->dtypes[c] = t->buffers[c] == F8_NONE ? F8_DTYPE_UNDEFINED
							  : graph->values[t->buffers[c]].type.dtype;
}

/* zeroing[v]: the first member (by index) that is a ConstantOfShape whose output is the
 * source of an update of value v, F8_NONE for none; by tables of the values, not a search per
 * AdamW (gpt3-175b has a thousand). f8_malloc'd; NULL when memory runs out. */
static uint32_t *zeroing_members(const f8_lower *lw) {
	const f8_graph *graph = lw->graph;
	uint32_t *made_by = f8_malloc((graph->n_values + 1) * sizeof *made_by);
	uint32_t *zeroing = f8_malloc((graph->n_values + 1) * sizeof *zeroing);
	if (!made_by || !zeroing) {
		f8_free(made_by);
		f8_free(zeroing);
		return NULL;
	}
	for (uint32_t v = 0; v < graph->n_values; v++)
		made_by[v] = zeroing[v] = F8_NONE;
	for (uint32_t m = lw->n_members; m-- > 0;) {
		const f8_node *node = &graph->nodes[lw->members[m]];
		if (node->op == F8_OP_CONSTANT_OF_SHAPE)
			made_by[node->outputs[0]] = m;
	}
	for (uint32_t u = 0; u < graph->n_updates; u++) {
		uint32_t m = made_by[graph->updates[u].source];
		f8_value_id target = graph->updates[u].target;
		if (m != F8_NONE && (zeroing[target] == F8_NONE || m < zeroing[target]))
			zeroing[target] = m;
	}
	f8_free(made_by);
	return zeroing;
}

/* The group's tensors in member order: each AdamW with the ConstantOfShape that refills its
 * gradient (the target of the update whose source it makes), then any zeroing left over. */
static f8_status collect(const f8_lower *lw, tensor **out, uint32_t *n) {
	const f8_graph *graph = lw->graph;
	uint32_t n_members = lw->n_members;
	tensor *t = f8_calloc(n_members + 1, sizeof *t);
	bool *taken = f8_calloc(n_members + 1, sizeof *taken), *escapes = escaping_values(lw);
	uint32_t *zeroing = zeroing_members(lw), *first_of = f8_calloc(n_members + 1, sizeof *first_of);
	if (!t || !taken || !escapes || !zeroing || !first_of) {
		f8_free(t);
		f8_free(taken);
		f8_free(escapes);
		f8_free(zeroing);
		f8_free(first_of);
		return f8_diag_set(lw->diag, F8_ERR_NOMEM, "out of memory");
	}
	*n = 0;
	for (uint32_t m = 0; m < n_members; m++) {
		const f8_node *node = &graph->nodes[lw->members[m]];
		if (node->op != F8_OP_ADAMW)
			continue;
		tensor *entry = &t[(*n)++];
		*entry = (tensor){.adamw = node};
		uint32_t z = zeroing[node->inputs[1]];
		if (z != F8_NONE && !taken[z]) {
			entry->zero = &graph->nodes[lw->members[z]];
			taken[z] = true;
		}
	}
	for (uint32_t m = 0; m < n_members; m++)
		if (!taken[m] && graph->nodes[lw->members[m]].op == F8_OP_CONSTANT_OF_SHAPE)
			t[(*n)++] = (tensor){.zero = &graph->nodes[lw->members[m]]};
	f8_free(zeroing);
	f8_free(taken);
	uint32_t variants = 0; // first_of[v]: variant v's first tensor
	for (uint32_t i = 0; i < *n; i++) {
		constant_numel(graph, (t[i].adamw ? t[i].adamw : t[i].zero)->outputs[0], &t[i].numel);
		describe(lw, escapes, &t[i]);
		t[i].chunks = (t[i].numel + CHUNK - 1) / CHUNK;
		t[i].variant = variants;
		for (uint32_t v = 0; v < variants && t[i].variant == variants; v++)
			if (same_key(&t[first_of[v]].key, &t[i].key))
				t[i].variant = v;
		if (t[i].variant == variants)
			first_of[variants++] = i;
	}
	f8_free(first_of);
	f8_free(escapes);
	*out = t;
	return F8_OK;
}

/* Double-float arithmetic (Dekker, Knuth; Hida, Li and Bailey's QD library's forms). */

static f8_kir_id f32(f8_lower *lw, double value) {
	return f8_lower_constant(lw, value);
}

/* a + b exactly, as s + e (Knuth's two-sum). */
static dd two_sum(f8_lower *lw, f8_kir_id a, f8_kir_id b) {
	f8_kir_id s = EMIT(lw, ADD, a, b, NONE), bb = EMIT(lw, SUB, s, a, NONE);
	f8_kir_id e = EMIT(lw, ADD, EMIT(lw, SUB, a, EMIT(lw, SUB, s, bb, NONE), NONE),
			   EMIT(lw, SUB, b, bb, NONE), NONE);
	return (dd){s, e};
}

/* a + b exactly, for |a| >= |b| (or a == 0). */
static dd quick_two_sum(f8_lower *lw, f8_kir_id a, f8_kir_id b) {
	f8_kir_id s = EMIT(lw, ADD, a, b, NONE);
	return (dd){s, EMIT(lw, SUB, b, EMIT(lw, SUB, s, a, NONE), NONE)};
}

/* a b exactly, as p + e, the error by fma. */
static dd two_prod(f8_lower *lw, f8_kir_id a, f8_kir_id b) {
	f8_kir_id p = EMIT(lw, MUL, a, b, NONE);
	return (dd){p, EMIT(lw, FMA, a, b, EMIT(lw, NEG, p, NONE, NONE))};
}

static dd dd_mul(f8_lower *lw, dd x, dd y) {
	dd p = two_prod(lw, x.hi, y.hi);
	f8_kir_id cross = EMIT(lw, ADD, EMIT(lw, MUL, x.hi, y.lo, NONE), EMIT(lw, MUL, x.lo, y.hi, NONE),
			       NONE);
	return quick_two_sum(lw, p.hi, EMIT(lw, ADD, p.lo, cross, NONE));
}

/* A double constant as a double-float: its float, and the float of what is left. */
static dd dd_constant(f8_lower *lw, double value) {
	float hi = (float)value;
	return (dd){f32(lw, hi), f32(lw, (float)(value - (double)hi))};
}

/* 1 - x. */
static dd one_minus(f8_lower *lw, dd x) {
	dd s = two_sum(lw, f32(lw, 1), EMIT(lw, NEG, x.hi, NONE, NONE));
	return quick_two_sum(lw, s.hi, EMIT(lw, SUB, s.lo, x.lo, NONE));
}

/* The float nearest hi + lo. */
static f8_kir_id to_float(f8_lower *lw, dd x) {
	return EMIT(lw, ADD, x.hi, x.lo, NONE);
}

/* beta^step by squaring over the step's low STEP_BITS bits (a step of 2^STEP_BITS or more as
 * 2^STEP_BITS - 1, where beta^step is 0 to double precision for any beta AdamW takes). */
static dd power(f8_lower *lw, double beta, f8_kir_id step) {
	f8_kernel *k = lw->kernel;
	f8_kir_id most = f8_kir_const_i64(k, ((int64_t)1 << STEP_BITS) - 1);
	f8_kir_id t = EMIT(lw, MIN, step, most, NONE);
	dd result = {f32(lw, 1), f32(lw, 0)}, base = dd_constant(lw, beta);
	for (int bit = 0; bit < STEP_BITS; bit++) {
		f8_kir_id set = EMIT(lw, EQ, EMIT(lw, REM, EMIT(lw, SHR, t, f8_kir_const_i64(k, bit), NONE),
						  f8_kir_const_i64(k, 2), NONE),
				     f8_kir_const_i64(k, 1), NONE);
		dd product = dd_mul(lw, result, base);
		result = (dd){EMIT(lw, SELECT, set, product.hi, result.hi),
			      EMIT(lw, SELECT, set, product.lo, result.lo)};
		if (bit + 1 < STEP_BITS)
			base = dd_mul(lw, base, base);
	}
	return result;
}

/* -(lr / bc) to float: a quotient and one correction from the exact remainder. */
static f8_kir_id minus_quotient(f8_lower *lw, f8_kir_id lr, dd bc) {
	f8_kir_id q = EMIT(lw, DIV, lr, bc.hi, NONE);
	dd p = two_prod(lw, q, bc.hi);
	f8_kir_id r = EMIT(lw, SUB, EMIT(lw, SUB, EMIT(lw, SUB, lr, p.hi, NONE), p.lo, NONE),
			   EMIT(lw, MUL, q, bc.lo, NONE), NONE);
	f8_kir_id correction = EMIT(lw, DIV, r, bc.hi, NONE);
	return EMIT(lw, NEG, EMIT(lw, ADD, q, correction, NONE), NONE, NONE);
}

/* sqrt(x) to float: a root and one Newton correction from the exact residual; 0 for 0. */
static f8_kir_id square_root(f8_lower *lw, dd x) {
	f8_kir_id s = EMIT(lw, SQRT, x.hi, NONE, NONE);
	dd p = two_prod(lw, s, s);
	f8_kir_id r = EMIT(lw, ADD, EMIT(lw, SUB, EMIT(lw, SUB, x.hi, p.hi, NONE), p.lo, NONE), x.lo,
			   NONE);
	f8_kir_id correction = EMIT(lw, DIV, r, EMIT(lw, ADD, s, s, NONE), NONE);
	f8_kir_id root = EMIT(lw, ADD, s, correction, NONE);
	return EMIT(lw, SELECT, EMIT(lw, EQ, x.hi, f32(lw, 0), NONE), f32(lw, 0), root);
}

/* torch.lerp(m, g, w) in float (kernels_optim.c's lerp_f32): the branch is the constant w's. */
static f8_kir_id lerp(f8_lower *lw, f8_kir_id m, f8_kir_id g, float w) {
	f8_kir_id difference = EMIT(lw, SUB, g, m, NONE);
	if (fabs(w) < 0.5)
		return EMIT(lw, ADD, m, EMIT(lw, MUL, f32(lw, w), difference, NONE), NONE);
	return EMIT(lw, SUB, g, EMIT(lw, MUL, difference, f32(lw, 1.0f - w), NONE), NONE);
}

/* 1 - lr weight_decay to float, the weight decay a double-float (the row's two floats). */
static f8_kir_id decay_of(f8_lower *lw, f8_kir_id lr, dd weight_decay) {
	dd p = two_prod(lw, lr, weight_decay.hi);
	f8_kir_id e = EMIT(lw, ADD, p.lo, EMIT(lw, MUL, lr, weight_decay.lo, NONE), NONE);
	dd s = two_sum(lw, f32(lw, 1), EMIT(lw, NEG, p.hi, NONE, NONE));
	return to_float(lw, quick_two_sum(lw, s.hi, EMIT(lw, SUB, s.lo, e, NONE)));
}

/* A scalar set's values, at the top level. */
static void compute_scalars(optimizer *o, scalars *s) {
	f8_lower *lw = &o->lw;
	const variant_key *key = s->key;
	f8_kir_id zero = f8_kir_const_i64(lw->kernel, 0);
	s->lr = f8_kir_load(lw->kernel, f8_lower_find_param(lw, key->lr), zero);
	f8_kir_id step = f8_kir_load(lw->kernel, f8_lower_find_param(lw, key->step), zero);
	s->minus_step_size = minus_quotient(lw, s->lr, one_minus(lw, power(lw, key->beta1, step)));
	s->bias_correction2_sqrt = square_root(lw, one_minus(lw, power(lw, key->beta2, step)));
	s->grad_scale = key->grad_scale == F8_NONE
		? NONE : f8_kir_load(lw->kernel, f8_lower_find_param(lw, key->grad_scale), zero);
	// The skip (f8_infer_adamw's comment): a gradient norm that is not finite, a found_inf
	// that is not 0.
	s->skip = NONE;
	if (key->grad_norm != F8_NONE) {
		f8_kir_id norm = f8_kir_load(lw->kernel, f8_lower_find_param(lw, key->grad_norm), zero);
		s->skip = EMIT(lw, NOT, EMIT(lw, IS_FINITE, norm, NONE, NONE), NONE, NONE);
	}
	if (key->found_inf != F8_NONE) {
		f8_kir_id found = f8_kir_load(lw->kernel, f8_lower_find_param(lw, key->found_inf), zero);
		f8_kir_id nonzero = EMIT(lw, NE, found, f32(lw, 0), NONE);
		s->skip = s->skip == NONE ? nonzero : EMIT(lw, OR, s->skip, nonzero, NONE);
	}
}

/* The scalar set of variant `key` in this launch. */
static const scalars *set_of(const optimizer *o, const variant_key *key) {
	for (uint32_t i = 0; i < o->n_sets; i++)
		if (same_scalars(o->sets[i].key, key))
			return &o->sets[i];
	return NULL;
}

/* The row's columns, loaded in the grid loop's body (NONE where no variant reads it). */
typedef struct row {
	f8_kir_id offset, length;          // the chunk's first element and its length
	f8_kir_id variant;                 // the row's variant (NONE: the launch has one)
	f8_kir_id weight_decay[2];         // the f32 hi and lo
	f8_kir_id addresses[N_BUFFERS];
} row;

/* AdamW's step of element e (update_element's) from its loaded inputs `in`: param', m' and v'
 * stored where the variant writes them, or param, m and v as loaded where the step is skipped
 * (a select on the skip flag, a register computed once at the top level). */
static f8_status store_update(optimizer *o, const variant_key *key, const f8_kir_id *in,
			      f8_kir_id decay, const row *r, f8_kir_id e) {
	f8_lower *lw = &o->lw;
	f8_kernel *k = lw->kernel;
	const f8_dtype *dtypes = key->dtypes;
	f8_status status = F8_OK;
	const scalars *s = set_of(o, key);
	f8_kir_id grad = in[COLUMN_GRAD - BUFFER_FIRST];
	if (s->grad_scale != NONE)
		grad = EMIT(lw, MUL, grad, s->grad_scale, NONE);
	f8_kir_id p = EMIT(lw, MUL, in[COLUMN_PARAM - BUFFER_FIRST], decay, NONE);
	f8_kir_id m = lerp(lw, in[COLUMN_M - BUFFER_FIRST], grad, (float)(1.0 - key->beta1));
	f8_kir_id square = EMIT(lw, MUL, EMIT(lw, MUL, f32(lw, (float)(1.0 - key->beta2)), grad, NONE),
				grad, NONE);
	f8_kir_id v = EMIT(lw, MUL, in[COLUMN_V - BUFFER_FIRST], f32(lw, (float)key->beta2), NONE);
	v = EMIT(lw, ADD, v, square, NONE);
	f8_kir_id denom = EMIT(lw, DIV, EMIT(lw, SQRT, v, NONE, NONE), s->bias_correction2_sqrt, NONE);
	denom = EMIT(lw, ADD, denom, f32(lw, (float)key->epsilon), NONE);
	f8_kir_id update = EMIT(lw, DIV, EMIT(lw, MUL, s->minus_step_size, m, NONE), denom, NONE);
	f8_kir_id out[3] = {EMIT(lw, ADD, p, update, NONE), m, v};
	for (uint32_t i = 0; s->skip != NONE && i < 3; i++) // a skipped step keeps param, m, v
		out[i] = EMIT(lw, SELECT, s->skip, in[i == 0 ? 0 : i + 1], out[i]);
	for (uint32_t i = 0; !status && i < 3; i++) {
		uint32_t c = COLUMN_PARAM_OUT - BUFFER_FIRST + i;
		if (dtypes[c] != F8_DTYPE_UNDEFINED)
			status = f8_kir_store_ptr(k, dtypes[c], r->addresses[c], e, out[i], lw->diag);
	}
	return status;
}

/* Element e of tensor variant `key`: one step of _single_tensor_adamw in f32 (kernels_optim.c's
 * adamw_f32, op for op) with the row's `decay`, and its gradient's zeroing. */
static f8_status update_element(optimizer *o, const variant_key *key, const row *r,
				f8_kir_id decay, f8_kir_id e) {
	f8_lower *lw = &o->lw;
	f8_kernel *k = lw->kernel;
	const f8_dtype *dtypes = key->dtypes;
	f8_status status = F8_OK;
	bool adamw = dtypes[0] != F8_DTYPE_UNDEFINED;
	f8_kir_id in[N_INPUTS];
	for (uint32_t i = 0; adamw && i < N_INPUTS; i++)
		in[i] = f8_kir_load_ptr(k, dtypes[i], r->addresses[i], e);
	if (adamw)
		status = store_update(o, key, in, decay, r, e);
	// The zeroing last, after the stores of param', m' and v', which wait for every load (and
	// which ptxas keeps before it: stores through table addresses may alias). In a slab
	// (passes/schedule.c writes an update's source in place of its leaf) the zeroed gradient is
	// the gradient's own storage, and a store of a constant emitted right after the loads is
	// issued by ptxas at once (its address and value are ready), to the address whose load is
	// still in flight. On an H100 that made gpt2-124m's AdamW 7.29 ms at 16% of the DRAM's
	// bandwidth; with the store here, 1.57 ms at 75% (tools/bench_gpu.md, "The optimizer's
	// gradient zeroing").
	uint32_t zero = COLUMN_ZERO_OUT - BUFFER_FIRST;
	if (!status && dtypes[zero] != F8_DTYPE_UNDEFINED)
		status = f8_kir_store_ptr(k, dtypes[zero], r->addresses[zero], e,
					  f32(lw, key->fill), lw->diag);
	return status;
}

/* Cell `c` of row `r` of the table. */
static f8_kir_id cell(optimizer *o, f8_kir_id r, column c) {
	f8_kernel *k = o->lw.kernel;
	f8_kir_id at = EMIT(&o->lw, ADD, EMIT(&o->lw, MUL, r, f8_kir_const_i64(k, N_COLUMNS), NONE),
			    f8_kir_const_i64(k, c), NONE);
	return f8_kir_load(k, o->table, at);
}

/* The row of the launch's table (n rows) that holds chunk `chunk`: the last whose first chunk
 * is at most it, by a binary search unrolled to ceil(log2(n)) steps. The probe is kept within
 * the table: a step past its end probes the last row, which is then the answer or not. */
static f8_kir_id find_row(optimizer *o, f8_kir_id chunk) {
	f8_lower *lw = &o->lw;
	f8_kernel *k = lw->kernel;
	f8_kir_id found = f8_kir_const_i64(k, 0), last = f8_kir_const_i64(k, (int64_t)o->n - 1);
	uint32_t step = 1;
	while (step < o->n)
		step *= 2;
	for (step /= 2; step >= 1; step /= 2) {
		f8_kir_id probe = EMIT(lw, MIN, EMIT(lw, ADD, found, f8_kir_const_i64(k, step), NONE),
				       last, NONE);
		f8_kir_id inside = EMIT(lw, LE, cell(o, probe, COLUMN_FIRST_CHUNK), chunk, NONE);
		found = EMIT(lw, SELECT, inside, probe, found);
	}
	return found;
}

/* The grid loop over the launch's chunks: the chunk's row and its columns, then a block loop
 * per variant over the chunk's elements (none but the row's variant's runs any). */
static f8_status chunks_loop(optimizer *o, f8_kir_id chunks) {
	f8_lower *lw = &o->lw;
	f8_kernel *k = lw->kernel;
	f8_kir_id chunk, j;
	f8_status status = f8_kir_begin_grid_loop(k, chunks, &chunk, lw->diag);
	if (status)
		return status;
	f8_kir_id found = find_row(o, chunk);
	row r = {.variant = NONE, .weight_decay = {NONE, NONE}};
	f8_kir_id local = EMIT(lw, SUB, chunk, cell(o, found, COLUMN_FIRST_CHUNK), NONE);
	r.offset = EMIT(lw, MUL, local, f8_kir_const_i64(k, CHUNK), NONE);
	r.length = EMIT(lw, MIN, f8_kir_const_i64(k, CHUNK),
			EMIT(lw, SUB, cell(o, found, COLUMN_NUMEL), r.offset, NONE), NONE);
	if (o->n_variants > 1)
		r.variant = cell(o, found, COLUMN_VARIANT);
	if (o->n_sets)
		for (uint32_t i = 0; i < 2; i++)
			r.weight_decay[i] = EMIT(lw, FROM_BITS, cell(o, found, COLUMN_WEIGHT_DECAY_HI + i),
						 NONE, NONE);
	for (uint32_t c = 0; c < N_BUFFERS; c++) {
		bool used = false;
		for (uint32_t v = 0; v < o->n_variants; v++)
			used |= o->variants[v]->dtypes[c] != F8_DTYPE_UNDEFINED;
		r.addresses[c] = used ? cell(o, found, BUFFER_FIRST + c) : NONE;
	}
	for (uint32_t v = 0; !status && v < o->n_variants; v++) {
		const variant_key *key = o->variants[v];
		f8_kir_id decay = NONE;
		if (key->dtypes[0] != F8_DTYPE_UNDEFINED)
			decay = decay_of(lw, set_of(o, key)->lr, (dd){r.weight_decay[0], r.weight_decay[1]});
		f8_kir_id extent = r.length;
		if (o->n_variants > 1) {
			f8_kir_id mine = EMIT(lw, EQ, r.variant, f8_kir_const_i64(k, v), NONE);
			extent = EMIT(lw, SELECT, mine, r.length, f8_kir_const_i64(k, 0));
		}
		if ((status = f8_kir_begin_block_loop(k, extent, &j, lw->diag)))
			break;
		status = update_element(o, key, &r, decay, EMIT(lw, ADD, r.offset, j, NONE));
		if (!status)
			status = f8_kir_end_loop(k, NULL, 0, lw->diag);
	}
	return status ? status : f8_kir_end_loop(k, NULL, 0, lw->diag);
}

/* The index of variant `key` in this launch, or F8_NONE. */
static uint32_t variant_of(const optimizer *o, const variant_key *key) {
	for (uint32_t v = 0; v < o->n_variants; v++)
		if (same_key(o->variants[v], key))
			return v;
	return F8_NONE;
}

/* The float bits of `value` as a table cell. */
static int64_t float_bits(float value) {
	uint32_t bits;
	memcpy(&bits, &value, sizeof bits);
	return bits;
}

/* The launch's table, a row per tensor (the header's columns), into *out (the caller's). */
static f8_status make_table(optimizer *o, f8_kernel_table **out) {
	f8_kernel_table *table = f8_calloc(1, sizeof *table);
	if (table) {
		*table = (f8_kernel_table){.n_rows = o->n, .n_columns = N_COLUMNS,
					   .names = column_names};
		table->columns = f8_calloc(N_COLUMNS, sizeof *table->columns);
		table->cells = f8_calloc((size_t)o->n * N_COLUMNS + 1, sizeof *table->cells);
	}
	if (!table || !table->columns || !table->cells) {
		if (table) {
			f8_free(table->columns);
			f8_free(table->cells);
		}
		f8_free(table);
		return f8_diag_set(o->lw.diag, F8_ERR_NOMEM, "out of memory");
	}
	for (uint32_t c = 0; c < N_COLUMNS; c++)
		table->columns[c] = c < BUFFER_FIRST ? F8_KERNEL_PARAM_SIZE
				    : c < COLUMN_PARAM_OUT ? F8_KERNEL_PARAM_IN : F8_KERNEL_PARAM_OUT;
	for (uint32_t i = 0; i < o->n; i++) {
		const tensor *t = &o->tensors[o->launch[i]];
		f8_kernel_table_cell *cells = &table->cells[(size_t)i * N_COLUMNS];
		float decay_hi = (float)t->weight_decay;
		const int64_t constants[BUFFER_FIRST] = {
			t->first_chunk, t->numel, variant_of(o, &t->key), float_bits(decay_hi),
			float_bits((float)(t->weight_decay - (double)decay_hi))};
		for (uint32_t c = 0; c < N_COLUMNS; c++)
			cells[c] = c < BUFFER_FIRST
				? (f8_kernel_table_cell){.value = F8_NONE, .constant = constants[c]}
				: (f8_kernel_table_cell){.value = t->buffers[c - BUFFER_FIRST]};
	}
	*out = table;
	return F8_OK;
}

/* The table parameter, bound to `table` (which the binding owns once the launch is made). */
static f8_status add_table_param(optimizer *o, f8_kernel_table *table) {
	f8_lower *lw = &o->lw;
	f8_kernel_arg *grown = f8_realloc(lw->args, (lw->kernel->n_params + 1) * sizeof *grown);
	if (!grown)
		return f8_diag_set(lw->diag, F8_ERR_NOMEM, "out of memory");
	lw->args = grown;
	f8_status status = f8_kir_add_param(lw->kernel, "table0", F8_KERNEL_PARAM_TABLE, F8_DTYPE_I64,
					    &o->table, lw->diag);
	if (!status)
		lw->args[o->table] = (f8_kernel_arg){.value = F8_NONE, .scratch = F8_NONE,
						     .table = table};
	return status;
}

/* One launch over tensors[first .. first + n), named `name`: the scalar sets' inputs, the
 * table, the chunk count; the scalars at the top level, then the chunks. */
static f8_status lower_launch(optimizer *o, const char *name, f8_lowered_group *out) {
	f8_lower *lw = &o->lw;
	int64_t chunks = 0;
	o->n_variants = o->n_sets = 0;
	for (uint32_t i = 0; i < o->n; i++) {
		tensor *t = &o->tensors[o->launch[i]];
		t->first_chunk = chunks;
		chunks += t->chunks;
		if (variant_of(o, &t->key) == F8_NONE)
			o->variants[o->n_variants++] = &t->key;
		if (t->adamw && !set_of(o, &t->key))
			o->sets[o->n_sets++] = (scalars){.key = &t->key};
	}
	f8_status status = f8_lower_begin(lw, lw->graph, lw->group, lw->members, lw->n_members, name,
					  lw->diag);
	if (status)
		return status;
	uint32_t index, p_chunks;
	f8_kernel_table *table = NULL;
	for (uint32_t s = 0; !status && s < o->n_sets; s++) {
		const variant_key *key = o->sets[s].key;
		status = f8_lower_bind_input(lw, key->lr, &index);
		if (!status)
			status = f8_lower_bind_input(lw, key->step, &index);
		if (!status && key->grad_scale != F8_NONE)
			status = f8_lower_bind_input(lw, key->grad_scale, &index);
		if (!status && key->grad_norm != F8_NONE)
			status = f8_lower_bind_input(lw, key->grad_norm, &index);
		if (!status && key->found_inf != F8_NONE)
			status = f8_lower_bind_input(lw, key->found_inf, &index);
	}
	if (!status)
		status = make_table(o, &table);
	if (!status)
		status = add_table_param(o, table);
	if (!status)
		status = f8_lower_add_size(lw, f8_dim_const(chunks), &p_chunks);
	if (!status) {
		lw->kernel->grid_sizes[0] = p_chunks;
		lw->kernel->n_grid_sizes = 1;
		for (uint32_t s = 0; s < o->n_sets; s++)
			compute_scalars(o, &o->sets[s]);
		status = chunks_loop(o, f8_kir_size(lw->kernel, p_chunks));
	}
	status = f8_lower_end(lw, status, out);
	if (status) // f8_lower_end freed the bindings, not their table
		f8_kernel_table_destroy(table);
	return status;
}

f8_status f8_lower_optimizer(const f8_graph *graph, uint32_t group, f8_node_id *members,
			     uint32_t n_members, f8_lowered_group *out, f8_diag *diag) {
	optimizer o = {.lw = {.graph = graph, .group = group, .diag = diag, .members = members,
			      .n_members = n_members}};
	uint32_t n = 0;
	f8_status status = collect(&o.lw, &o.tensors, &n);
	if (status)
		return status;
	o.launch = f8_calloc(n + 1, sizeof *o.launch);
	if (!o.launch)
		status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	// Launch k: the tensors of the group's variants k MAX_VARIANTS on (their first uses'
	// order), so that the launches are as few as the variants allow.
	uint32_t variants = 0;
	for (uint32_t i = 0; i < n; i++)
		variants = o.tensors[i].variant + 1 > variants ? o.tensors[i].variant + 1 : variants;
	uint32_t launches = (variants + MAX_VARIANTS - 1) / MAX_VARIANTS;
	for (uint32_t k = 0; !status && k < launches; k++) {
		o.n = 0;
		for (uint32_t i = 0; i < n; i++)
			if (o.tensors[i].variant / MAX_VARIANTS == k)
				o.launch[o.n++] = i;
		char name[80];
		if (launches == 1)
			snprintf(name, sizeof name, "%s", graph->groups[group].name);
		else
			snprintf(name, sizeof name, "%s_%u", graph->groups[group].name, k);
		status = lower_launch(&o, name, out);
	}
	f8_free(o.launch);
	f8_free(o.tensors);
	return status;
}
