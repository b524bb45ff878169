/*
 * The optimizer family (codegen/lower.h): every AdamW of the opt phase, and the ConstantOfShape
 * that zeroes each one's gradient accumulator, in one multi-tensor kernel (or a few, see
 * below), as apex's and PyTorch's fused multi-tensor AdamW do.
 *
 * The kernel IR has no way to pick a buffer by a runtime value, so one kernel covering many
 * tensors cannot index a table of pointers. It does not need to: each parameter is cut into
 * chunks of CHUNK elements, the chunks of all of them are numbered one after the other (the
 * offsets are constants: parameter shapes are), and the grid loop runs over all the chunks.
 * Its body holds one block loop per parameter, whose trip count is the chunk's length when the
 * chunk is that parameter's and 0 otherwise; so each grid iteration updates one chunk of one
 * parameter, reading each element of param, grad, m and v once and writing param', m', v' and
 * the zeroed gradient once. The price is a test and an empty loop (and the block's barrier on
 * the GPU) per parameter per chunk, small against a chunk's 4096 elements. A kernel's
 * arguments are limited (CUDA's 4 KiB of kernel parameters, 8 bytes each): a group with more
 * parameters than one kernel takes is cut into launches of at most that many, in order.
 * (A kernel IR load from a buffer chosen by an index, or a pointer table the launcher fills,
 * would allow one launch for any number of parameters.)
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
 * epsilon) are rounded to float here, as the reference rounds them.
 */
#include "codegen/lower_internal.h" // f8_lower, f8_lower_*

#include <math.h>   // fabs
#include <stdio.h>  // snprintf
#include <string.h> // memcmp

#include "ir/alloc.h" // f8_calloc, f8_free
#include "ir/ops.h"   // f8_node_attr_float, f8_tensor_data_scalar

enum {
	CHUNK = 4096,          // elements per grid iteration
	MAX_ARGUMENTS = 480,   // a launch's parameters: 4 KiB of 8-byte arguments, with room
	MAX_SETS = 16,         // distinct scalar sets (attributes, lr, step, grad_scale) per launch
	STEP_BITS = 32,        // the step's bits beta^t looks at: steps beyond 2^32 take 2^32 - 1
};

/* What AdamW's scalars depend on: two nodes with the same share them. */
typedef struct scalar_key {
	double beta1, beta2, epsilon, weight_decay;
	f8_value_id lr, step, grad_scale; // grad_scale F8_NONE when the node has none
} scalar_key;

/* One tensor of the group: a parameter's AdamW and the zeroing of its gradient, or either. */
typedef struct tensor {
	const f8_node *adamw;  // NULL: a zeroing of no member's gradient
	const f8_node *zero;   // NULL: none
	int64_t numel, first_chunk, chunks;
	scalar_key key;
} tensor;

/* A double-float: the value hi + lo, |lo| at most half an ulp of hi. */
typedef struct dd {
	f8_kir_id hi, lo;
} dd;

/* A scalar set's values at the top level of a launch. */
typedef struct scalars {
	scalar_key key;
	f8_kir_id decay, minus_step_size, bias_correction2_sqrt, grad_scale; // f32
} scalars;

typedef struct optimizer {
	f8_lower lw;
	tensor *tensors;
	uint32_t first, n; // this launch's tensors[first .. first + n)
	scalars sets[MAX_SETS];
	uint32_t n_sets;
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

static scalar_key key_of(const f8_node *node) {
	scalar_key key = {0};
	key.beta1 = f8_node_attr_float(node, "beta1", 0.9);
	key.beta2 = f8_node_attr_float(node, "beta2", 0.999);
	key.epsilon = f8_node_attr_float(node, "epsilon", 1e-8);
	key.weight_decay = f8_node_attr_float(node, "weight_decay", 0.0);
	key.lr = node->inputs[4];
	key.step = node->inputs[5];
	key.grad_scale = node->n_inputs > 6 ? node->inputs[6] : F8_NONE;
	return key;
}

/* The group's tensors in member order: each AdamW with the ConstantOfShape that refills its
 * gradient (the target of the update whose source it makes), then any zeroing left over. */
static f8_status collect(const f8_graph *graph, const f8_node_id *members, uint32_t n_members,
			 tensor **out, uint32_t *n, f8_diag *diag) {
	tensor *t = f8_calloc(n_members + 1, sizeof *t);
	bool *taken = f8_calloc(n_members + 1, sizeof *taken);
	if (!t || !taken) {
		f8_free(t);
		f8_free(taken);
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	}
	*n = 0;
	for (uint32_t m = 0; m < n_members; m++) {
		const f8_node *node = &graph->nodes[members[m]];
		if (node->op != F8_OP_ADAMW)
			continue;
		tensor *entry = &t[(*n)++];
		*entry = (tensor){.adamw = node, .key = key_of(node)};
		for (uint32_t z = 0; z < n_members && !entry->zero; z++) {
			const f8_node *zero = &graph->nodes[members[z]];
			for (uint32_t u = 0; !taken[z] && zero->op == F8_OP_CONSTANT_OF_SHAPE &&
					     u < graph->n_updates; u++)
				if (graph->updates[u].source == zero->outputs[0] &&
				    graph->updates[u].target == node->inputs[1]) {
					entry->zero = zero;
					taken[z] = true;
				}
		}
	}
	for (uint32_t m = 0; m < n_members; m++)
		if (!taken[m] && graph->nodes[members[m]].op == F8_OP_CONSTANT_OF_SHAPE)
			t[(*n)++] = (tensor){.zero = &graph->nodes[members[m]]};
	f8_free(taken);
	for (uint32_t i = 0; i < *n; i++)
		constant_numel(graph, (t[i].adamw ? t[i].adamw : t[i].zero)->outputs[0], &t[i].numel);
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

/* 1 - lr weight_decay to float. */
static f8_kir_id decay_of(f8_lower *lw, f8_kir_id lr, double weight_decay) {
	if (weight_decay == 0)
		return f32(lw, 1);
	dd wd = dd_constant(lw, weight_decay), p = two_prod(lw, lr, wd.hi);
	f8_kir_id e = EMIT(lw, ADD, p.lo, EMIT(lw, MUL, lr, wd.lo, NONE), NONE);
	dd s = two_sum(lw, f32(lw, 1), EMIT(lw, NEG, p.hi, NONE, NONE));
	return to_float(lw, quick_two_sum(lw, s.hi, EMIT(lw, SUB, s.lo, e, NONE)));
}

/* A scalar set's values, at the top level. */
static void compute_scalars(optimizer *o, scalars *s) {
	f8_lower *lw = &o->lw;
	f8_kir_id zero = f8_kir_const_i64(lw->kernel, 0);
	f8_kir_id lr = f8_kir_load(lw->kernel, f8_lower_find_param(lw, s->key.lr), zero);
	f8_kir_id step = f8_kir_load(lw->kernel, f8_lower_find_param(lw, s->key.step), zero);
	s->decay = decay_of(lw, lr, s->key.weight_decay);
	s->minus_step_size = minus_quotient(lw, lr, one_minus(lw, power(lw, s->key.beta1, step)));
	s->bias_correction2_sqrt = square_root(lw, one_minus(lw, power(lw, s->key.beta2, step)));
	s->grad_scale = s->key.grad_scale == F8_NONE
		? NONE : f8_kir_load(lw->kernel, f8_lower_find_param(lw, s->key.grad_scale), zero);
}

/* The set of scalars `key` names in this launch. */
static const scalars *set_of(const optimizer *o, const scalar_key *key) {
	for (uint32_t i = 0; i < o->n_sets; i++)
		if (memcmp(&o->sets[i].key, key, sizeof *key) == 0)
			return &o->sets[i];
	return NULL;
}

/* torch.lerp(m, g, w) in float (kernels_optim.c's lerp_f32): the branch is the constant w's. */
static f8_kir_id lerp(f8_lower *lw, f8_kir_id m, f8_kir_id g, float w) {
	f8_kir_id difference = EMIT(lw, SUB, g, m, NONE);
	if (fabs(w) < 0.5)
		return EMIT(lw, ADD, m, EMIT(lw, MUL, f32(lw, w), difference, NONE), NONE);
	return EMIT(lw, SUB, g, EMIT(lw, MUL, difference, f32(lw, 1.0f - w), NONE), NONE);
}

/* The parameters of tensor t's buffers (F8_NONE where a value is not bound). */
typedef struct buffers {
	uint32_t param, grad, m, v, param_out, m_out, v_out, zero_out;
} buffers;

static buffers buffers_of(const f8_lower *lw, const tensor *t) {
	buffers b = {F8_NONE, F8_NONE, F8_NONE, F8_NONE, F8_NONE, F8_NONE, F8_NONE, F8_NONE};
	if (t->adamw) {
		b.param = f8_lower_find_param(lw, t->adamw->inputs[0]);
		b.grad = f8_lower_find_param(lw, t->adamw->inputs[1]);
		b.m = f8_lower_find_param(lw, t->adamw->inputs[2]);
		b.v = f8_lower_find_param(lw, t->adamw->inputs[3]);
		b.param_out = f8_lower_find_param(lw, t->adamw->outputs[0]);
		b.m_out = f8_lower_find_param(lw, t->adamw->outputs[1]);
		b.v_out = f8_lower_find_param(lw, t->adamw->outputs[2]);
	}
	if (t->zero)
		b.zero_out = f8_lower_find_param(lw, t->zero->outputs[0]);
	return b;
}

static f8_status store(f8_lower *lw, uint32_t param, f8_kir_id e, f8_kir_id value) {
	return param == F8_NONE ? F8_OK : f8_kir_store(lw->kernel, param, e, value, lw->diag);
}

/* Element e of tensor t: one step of _single_tensor_adamw in f32 (kernels_optim.c's adamw_f32,
 * op for op), and its gradient's zeroing. */
static f8_status update_element(optimizer *o, const tensor *t, f8_kir_id e) {
	f8_lower *lw = &o->lw;
	buffers b = buffers_of(lw, t);
	f8_status status = F8_OK;
	if (t->zero)
		status = store(lw, b.zero_out, e, f32(lw, fill_value(t->zero)));
	if (!t->adamw || status)
		return status;
	const scalars *s = set_of(o, &t->key);
	const scalar_key *key = &s->key;
	f8_kir_id grad = f8_kir_load(lw->kernel, b.grad, e);
	if (s->grad_scale != NONE)
		grad = EMIT(lw, MUL, grad, s->grad_scale, NONE);
	f8_kir_id p = EMIT(lw, MUL, f8_kir_load(lw->kernel, b.param, e), s->decay, NONE);
	f8_kir_id m = lerp(lw, f8_kir_load(lw->kernel, b.m, e), grad, (float)(1.0 - key->beta1));
	f8_kir_id square = EMIT(lw, MUL, EMIT(lw, MUL, f32(lw, (float)(1.0 - key->beta2)), grad, NONE),
				grad, NONE);
	f8_kir_id v = EMIT(lw, MUL, f8_kir_load(lw->kernel, b.v, e), f32(lw, (float)key->beta2), NONE);
	v = EMIT(lw, ADD, v, square, NONE);
	f8_kir_id denom = EMIT(lw, DIV, EMIT(lw, SQRT, v, NONE, NONE), s->bias_correction2_sqrt, NONE);
	denom = EMIT(lw, ADD, denom, f32(lw, (float)key->epsilon), NONE);
	f8_kir_id update = EMIT(lw, DIV, EMIT(lw, MUL, s->minus_step_size, m, NONE), denom, NONE);
	status = store(lw, b.param_out, e, EMIT(lw, ADD, p, update, NONE));
	if (!status)
		status = store(lw, b.m_out, e, m);
	return status ? status : store(lw, b.v_out, e, v);
}

/* The grid loop over the launch's chunks: per tensor, a block loop over its part of the chunk
 * (none unless the chunk is one of its own). */
static f8_status chunks_loop(optimizer *o, f8_kir_id chunks) {
	f8_lower *lw = &o->lw;
	f8_kernel *k = lw->kernel;
	f8_kir_id chunk, j;
	f8_status status = f8_kir_begin_grid_loop(k, chunks, &chunk, lw->diag);
	int64_t base = o->tensors[o->first].first_chunk;
	for (uint32_t i = o->first; !status && i < o->first + o->n; i++) {
		const tensor *t = &o->tensors[i];
		f8_kir_id local = EMIT(lw, SUB, chunk, f8_kir_const_i64(k, t->first_chunk - base), NONE);
		f8_kir_id mine = EMIT(lw, AND, EMIT(lw, LE, f8_kir_const_i64(k, 0), local, NONE),
				      EMIT(lw, LT, local, f8_kir_const_i64(k, t->chunks), NONE), NONE);
		f8_kir_id offset = EMIT(lw, MUL, local, f8_kir_const_i64(k, CHUNK), NONE);
		f8_kir_id length = EMIT(lw, MIN, f8_kir_const_i64(k, CHUNK),
					EMIT(lw, SUB, f8_kir_const_i64(k, t->numel), offset, NONE), NONE);
		f8_kir_id extent = EMIT(lw, SELECT, mine, length, f8_kir_const_i64(k, 0));
		if ((status = f8_kir_begin_block_loop(k, extent, &j, lw->diag)))
			break;
		status = update_element(o, t, EMIT(lw, ADD, offset, j, NONE));
		if (!status)
			status = f8_kir_end_loop(k, NULL, 0, lw->diag);
	}
	return status ? status : f8_kir_end_loop(k, NULL, 0, lw->diag);
}

/* Binds tensor t's inputs (and its scalar set's, new ones into o->sets), or, `outputs`, its
 * outputs. */
static f8_status bind_tensor(optimizer *o, const tensor *t, bool outputs) {
	f8_lower *lw = &o->lw;
	uint32_t index;
	f8_status status = F8_OK;
	if (outputs) {
		for (uint32_t i = 0; t->adamw && !status && i < 3; i++)
			status = f8_lower_bind_output(lw, t->adamw->outputs[i], F8_KIR_PARAM_OUT, &index);
		if (!status && t->zero)
			status = f8_lower_bind_output(lw, t->zero->outputs[0], F8_KIR_PARAM_OUT, &index);
		return status;
	}
	if (!t->adamw)
		return F8_OK;
	for (uint32_t i = 0; !status && i < 4; i++)
		status = f8_lower_bind_input(lw, t->adamw->inputs[i], &index);
	if (!status && !set_of(o, &t->key)) {
		o->sets[o->n_sets++].key = t->key;
		status = f8_lower_bind_input(lw, t->key.lr, &index);
		if (!status)
			status = f8_lower_bind_input(lw, t->key.step, &index);
		if (!status && t->key.grad_scale != F8_NONE)
			status = f8_lower_bind_input(lw, t->key.grad_scale, &index);
	}
	return status;
}

/* One launch over tensors[first .. first + n), named `name`. */
static f8_status lower_launch(optimizer *o, const char *name, f8_lowered_group *out) {
	f8_lower *lw = &o->lw;
	int64_t chunks = 0;
	for (uint32_t i = o->first; i < o->first + o->n; i++)
		chunks += o->tensors[i].chunks;
	f8_status status = f8_lower_begin(lw, lw->graph, lw->group, lw->members, lw->n_members, name,
					  lw->diag);
	if (status)
		return status;
	o->n_sets = 0;
	for (uint32_t i = o->first; !status && i < o->first + o->n; i++)
		status = bind_tensor(o, &o->tensors[i], false);
	for (uint32_t i = o->first; !status && i < o->first + o->n; i++)
		status = bind_tensor(o, &o->tensors[i], true);
	uint32_t p_chunks;
	if (!status)
		status = f8_lower_add_size(lw, f8_dim_const(chunks), &p_chunks);
	if (!status) {
		lw->kernel->grid_sizes[0] = p_chunks;
		lw->kernel->n_grid_sizes = 1;
		for (uint32_t s = 0; s < o->n_sets; s++)
			compute_scalars(o, &o->sets[s]);
		status = chunks_loop(o, f8_kir_size(lw->kernel, p_chunks));
	}
	return f8_lower_end(lw, status, out);
}

/* How many of tensors[first ..] one launch takes: as many as fit its arguments and scalar
 * sets (at least one). */
static uint32_t launch_size(const tensor *tensors, uint32_t first, uint32_t n) {
	uint32_t arguments = 1, taken = 0, n_sets = 0; // the chunk count's size
	scalar_key keys[MAX_SETS];
	for (uint32_t i = first; i < n; i++, taken++) {
		const tensor *t = &tensors[i];
		uint32_t more = (t->adamw ? 7 : 0) + (t->zero ? 1 : 0);
		bool new_set = false;
		if (t->adamw) {
			new_set = true;
			for (uint32_t s = 0; s < n_sets; s++)
				new_set &= memcmp(&keys[s], &t->key, sizeof t->key) != 0;
			more += new_set ? 3 : 0;
		}
		if (taken && (arguments + more > MAX_ARGUMENTS || (new_set && n_sets == MAX_SETS)))
			break;
		if (new_set)
			keys[n_sets++] = t->key;
		arguments += more;
	}
	return taken;
}

f8_status f8_lower_optimizer(const f8_graph *graph, uint32_t group, f8_node_id *members,
			     uint32_t n_members, f8_lowered_group *out, f8_diag *diag) {
	optimizer o = {.lw = {.graph = graph, .group = group, .diag = diag, .members = members,
			      .n_members = n_members}};
	uint32_t n = 0;
	f8_status status = collect(graph, members, n_members, &o.tensors, &n, diag);
	if (status)
		return status;
	int64_t chunk = 0;
	for (uint32_t i = 0; i < n; i++) {
		o.tensors[i].first_chunk = chunk;
		o.tensors[i].chunks = (o.tensors[i].numel + CHUNK - 1) / CHUNK;
		chunk += o.tensors[i].chunks;
	}
	for (uint32_t first = 0, part = 0; !status && first < n; first += o.n, part++) {
		o.first = first;
		o.n = launch_size(o.tensors, first, n);
		char name[80];
		if (first == 0 && o.n == n)
			snprintf(name, sizeof name, "%s", graph->groups[group].name);
		else
			snprintf(name, sizeof name, "%s_%u", graph->groups[group].name, part);
		status = lower_launch(&o, name, out);
	}
	f8_free(o.tensors);
	return status;
}
