/*
 * The moe family (codegen/lower.h): the mixture-of-experts ops of ir/infer_fused.c and
 * ir/infer_backward.c, each a group of its own, agreeing with the reference kernels
 * (runtime/cpu/kernels_moe.c, kernels_grad_moe.c):
 *   Router          one grid row a token: the scores (softmax) and each expert's rank among
 *                   the token's experts, top_k and the lower index first on a tie, from
 *                   straight-line code over the experts (a constant, at most MAX_EXPERTS);
 *                   a chosen expert's index and probability stored at its rank;
 *   RouterGrad      one grid row a token: the forward's scores recomputed, the three steps
 *                   of kernels_grad_moe.c's comment, in straight-line code, its differences
 *                   from a mean summed as differences (no f32 cancellation near one-hot);
 *   MoEDispatch     one grid row a copy: its position, then its token's row copied there;
 *                   and a second kernel, one grid row an expert, counting its copies;
 *   MoECombine, MoEDispatchGrad  one grid row a token: its top_k copies' positions, then the
 *                   sum of their rows (weighted by probs for MoECombine) in the order of k;
 *   MoECombineGrad  one grid row a token: each copy's row of dy stored, and dprobs, the dot of
 *                   dout and the copy's row of y, as block-loop sums.
 *
 * The permutation. The reference sorts the copies stably by expert (f8_cpu_moe_rows): copy c
 * (token c / top_k, choice c % top_k) goes to row
 *   position(c) = #{c' : expert(c') < expert(c), or expert(c') = expert(c) and c' < c},
 * which a kernel counts with a block loop over all copies and an i64 sum: no sort, no atomics
 * and no state between kernels, the same integers on every run. It costs copies^2 compares
 * per op (16k for mixtral-tiny's 128 copies, 4 billion at 65536 copies); a counting pass and
 * a scan over the experts would make it linear, with a scratch buffer between kernels.
 * An expert index outside [0, experts) (negative only for MoECombine and MoECombineGrad,
 * which have no experts attribute) is a data error, flagged as embedding ids are (the grid
 * loop's max of 1 + the copy into the group's error scratch): the reference fails there too.
 *
 * Integers are exact: indices, counts and positions are the reference's. Floats are f32 where
 * the reference computes in double and rounds once, in a fixed order (no float atomics), so a
 * run on the GPU gives the same bits every time.
 *
 * The top-k's order. The reference ranks the experts by their double scores, the lower index
 * first on a tie. Softmax is increasing, so the kernel ranks by the logits themselves, which
 * it reads exactly: f32 scores would tie where the double ones do not. The two orders agree
 * wherever distinct logits give distinct double scores, which holds unless their exp
 * underflows (logits more than about 708 below the token's largest) or their difference from
 * the largest rounds away in double (logits below 2^-53 of it). A token with a NaN or +inf
 * logit has NaN scores in the reference (exp(inf - inf)), which picks the first top_k experts
 * in index order; so does the kernel (its softmax sum is NaN then too). Sigmoid scores are
 * not lowered: double sigmoids of distinct logits above about 24 round to the same value near
 * 1, a tie that f32 arithmetic cannot see, so a Router with score="sigmoid" stays a node the
 * CUDA backend refuses (RouterGrad, which reads the indices, lowers with either score).
 */
#include "codegen/lower_internal.h" // f8_lower, f8_lower_*

#include <stdio.h>  // snprintf
#include <string.h> // strcmp

#include "ir/ops.h" // f8_node_attr_int, f8_node_attr_string

enum {
	MAX_EXPERTS = 32, // a Router's straight-line ranks take experts^2 compares
	MAX_TOP_K = 16,   // the copies of a token, unrolled
};

static const char expert_error[] = "an expert index outside [0, experts) (below 0 for "
				   "MoECombine); the row is the copy, token * top_k + choice";

static bool is_float(f8_dtype dtype) {
	return dtype == F8_DTYPE_F32 || dtype == F8_DTYPE_BF16 || dtype == F8_DTYPE_F16;
}

static bool is_index(f8_dtype dtype) {
	return dtype == F8_DTYPE_I64 || dtype == F8_DTYPE_I32;
}

static const f8_type *type_of(const f8_graph *graph, f8_value_id value) {
	return &graph->values[value].type;
}

/* A constant dim of at least 1 and at most `most`, or 0. */
static int64_t small_dim(f8_dim dim, int64_t most) {
	if (!f8_dim_is_const(dim) || f8_dim_value(dim) < 1 || f8_dim_value(dim) > most)
		return 0;
	return f8_dim_value(dim);
}

static bool softmax_scores(const f8_node *node) {
	return strcmp(f8_node_attr_string(node, "score", "softmax"), "softmax") == 0;
}

/* Shape inference has checked the shapes (ranks 2, tokens agreeing); what the kernels need
 * besides: float data, integer indices, a constant top_k (and experts, for the router). */
bool f8_lower_moe_lowers(const f8_graph *graph, const f8_node *node) {
	for (uint32_t i = 0; i < node->n_inputs; i++)
		if (node->inputs[i] == F8_NONE)
			return false;
	switch (node->op) {
	case F8_OP_ROUTER: {
		const f8_type *logits = type_of(graph, node->inputs[0]);
		return softmax_scores(node) && is_float(logits->dtype) &&
		       small_dim(logits->shape.dims[1], MAX_EXPERTS) &&
		       small_dim(type_of(graph, node->outputs[0])->shape.dims[1], MAX_EXPERTS);
	}
	case F8_OP_ROUTER_GRAD: {
		const f8_type *logits = type_of(graph, node->inputs[1]);
		return is_float(logits->dtype) && is_float(type_of(graph, node->inputs[0])->dtype) &&
		       is_index(type_of(graph, node->inputs[3])->dtype) &&
		       small_dim(logits->shape.dims[1], MAX_EXPERTS) &&
		       small_dim(type_of(graph, node->inputs[3])->shape.dims[1], MAX_TOP_K);
	}
	case F8_OP_MOE_DISPATCH:
	case F8_OP_MOE_DISPATCH_GRAD:
		return is_float(type_of(graph, node->inputs[0])->dtype) &&
		       is_index(type_of(graph, node->inputs[1])->dtype) &&
		       small_dim(type_of(graph, node->inputs[1])->shape.dims[1], MAX_TOP_K);
	case F8_OP_MOE_COMBINE:
	case F8_OP_MOE_COMBINE_GRAD: {
		uint32_t first = node->op == F8_OP_MOE_COMBINE_GRAD;
		for (uint32_t i = 0; i < first + 2; i++)
			if (!is_float(type_of(graph, node->inputs[i])->dtype))
				return false;
		f8_value_id indices = node->inputs[first + 2];
		return is_float(type_of(graph, node->inputs[first + 1])->dtype) &&
		       is_index(type_of(graph, indices)->dtype) &&
		       small_dim(type_of(graph, indices)->shape.dims[1], MAX_TOP_K);
	}
	default:
		return false;
	}
}

/* One kernel of a moe group while it is built. */
typedef struct moe {
	f8_lower lw;
	const f8_node *node;
	uint32_t indices, error;   // the expert indices (IN), the error scratch (ACCUMULATE)
	uint32_t copies_size;      // the size parameter of tokens * top_k, or F8_NONE
	int64_t bound;             // the experts bound (0: none)
	f8_kir_id copies, experts; // in the body: tokens * top_k, the bound
} moe;

static f8_kir_id i64(moe *m, int64_t value) {
	return f8_kir_const_i64(m->lw.kernel, value);
}

static f8_kir_id f32(moe *m, double value) {
	return f8_lower_constant(&m->lw, value);
}

/* `dim` in the body: a constant, or the value of its size parameter (added before). */
static f8_kir_id dim_value(moe *m, f8_dim dim) {
	if (f8_dim_is_const(dim))
		return i64(m, f8_dim_value(dim));
	return f8_kir_size(m->lw.kernel, f8_lower_size_param(&m->lw, dim));
}

/* Starts kernel `name` of the group; fails (the kernel freed) unless the group is its op
 * alone: the fuse pass admits nothing to a moe kernel. */
static f8_status begin(moe *m, const f8_graph *graph, uint32_t group, f8_node_id *members,
		       uint32_t n_members, const char *name, f8_lowered_group *out, f8_diag *diag) {
	m->node = &graph->nodes[members[0]];
	m->indices = m->error = m->copies_size = F8_NONE;
	m->bound = 0;
	f8_status status = f8_lower_begin(&m->lw, graph, group, members, n_members, name, diag);
	if (!status && n_members != 1)
		return f8_lower_end(&m->lw, f8_lower_fail(&m->lw, members[1], "a moe kernel holds "
							  "its %s alone", f8_op_name(m->node->op)),
				    out);
	return status;
}

/* The expert indices (input `input`), tokens * top_k as a size, the group's error scratch and
 * the experts bound `experts` (0: none), once the kernel's other inputs are bound; their
 * values in the body come with begin_grid. */
static f8_status bind_indices(moe *m, f8_lowered_group *out, uint32_t input, int64_t experts) {
	f8_lower *lw = &m->lw;
	const f8_shape *shape = &type_of(lw->graph, m->node->inputs[input])->shape;
	f8_dim copies;
	if (!f8_dim_mul(shape->dims[0], shape->dims[1], &copies))
		return f8_lower_fail(lw, lw->members[0], "tokens * top_k overflows");
	f8_status status = f8_lower_bind_input(lw, m->node->inputs[input], &m->indices);
	if (!status)
		status = f8_lower_add_scratch_param(lw, out, out->error_scratch,
						    F8_KERNEL_PARAM_ACCUMULATE, &m->error);
	if (!status)
		status = f8_lower_add_size(lw, copies, &m->copies_size);
	if (!status)
		status = f8_lower_add_symbolic_sizes(lw, shape);
	m->bound = experts;
	return status;
}

/* The expert of copy `copy`, and into *flag 1 + the copy where it is outside the bound. */
static f8_kir_id expert_of(moe *m, f8_kir_id copy, bool bounded, f8_kir_id *flag) {
	f8_lower *lw = &m->lw;
	f8_kir_id expert = f8_kir_load(lw->kernel, m->indices, copy);
	f8_kir_id bad = EMIT(lw, LT, expert, i64(m, 0), NONE);
	if (bounded)
		bad = EMIT(lw, OR, bad, EMIT(lw, LE, m->experts, expert, NONE), NONE);
	f8_kir_id mark = EMIT(lw, SELECT, bad, EMIT(lw, ADD, copy, i64(m, 1), NONE), i64(m, 0));
	*flag = *flag == NONE ? mark : EMIT(lw, MAX, *flag, mark, NONE);
	return expert;
}

/*
 * In the open grid iteration: the positions of the `n` copies `copy` (of experts `expert`),
 * each counted over all copies by one block loop (the header's position(c)).
 */
static f8_status positions(moe *m, uint32_t n, const f8_kir_id *copy, const f8_kir_id *expert,
			   f8_kir_id *position) {
	f8_lower *lw = &m->lw;
	f8_kir_id other, values[MAX_TOP_K] = {0};
	f8_status status = f8_kir_begin_block_loop(lw->kernel, m->copies, &other, lw->diag);
	for (uint32_t k = 0; !status && k < n; k++)
		status = f8_kir_add_accumulator(lw->kernel, F8_KIR_COMBINE_ADD, F8_KIR_TYPE_I64,
						&position[k], lw->diag);
	if (status)
		return status;
	f8_kir_id theirs = f8_kir_load(lw->kernel, m->indices, other);
	for (uint32_t k = 0; k < n; k++) {
		f8_kir_id same = EMIT(lw, EQ, theirs, expert[k], NONE);
		f8_kir_id before = EMIT(lw, OR, EMIT(lw, LT, theirs, expert[k], NONE),
					EMIT(lw, AND, same, EMIT(lw, LT, other, copy[k], NONE), NONE),
					NONE);
		values[k] = EMIT(lw, SELECT, before, i64(m, 1), i64(m, 0));
	}
	if (f8_kir_error(lw->kernel))
		return f8_lower_fail(lw, lw->members[0], "%s", f8_kir_error(lw->kernel));
	return f8_kir_end_loop(lw->kernel, values, n, lw->diag);
}

/* Opens the grid loop over size parameter `size` with the error flag's max, once every
 * parameter is added (the body's first instructions are the indices' sizes). */
static f8_status begin_grid(moe *m, uint32_t size, f8_kir_id *var, f8_kir_id *worst) {
	f8_lower *lw = &m->lw;
	if (m->copies_size != F8_NONE)
		m->copies = f8_kir_size(lw->kernel, m->copies_size);
	m->experts = i64(m, m->bound);
	lw->kernel->grid_sizes[0] = size;
	lw->kernel->n_grid_sizes = 1;
	f8_status status = f8_kir_begin_grid_loop(lw->kernel, f8_kir_size(lw->kernel, size), var,
						  lw->diag);
	if (!status && m->error != F8_NONE)
		status = f8_kir_add_accumulator(lw->kernel, F8_KIR_COMBINE_MAX, F8_KIR_TYPE_I64,
						worst, lw->diag);
	return status;
}

/* Closes the grid loop (its flag `flag`) and combines the worst flag into the error scratch. */
static f8_status end_grid(moe *m, f8_status status, f8_kir_id flag, f8_kir_id worst) {
	f8_lower *lw = &m->lw;
	if (!status && f8_kir_error(lw->kernel))
		status = f8_lower_fail(lw, lw->members[0], "%s", f8_kir_error(lw->kernel));
	if (status)
		return status;
	if (m->error == F8_NONE)
		return f8_kir_end_loop(lw->kernel, NULL, 0, lw->diag);
	status = f8_kir_end_loop(lw->kernel, &flag, 1, lw->diag);
	if (!status)
		status = f8_kir_atomic(lw->kernel, F8_KIR_COMBINE_MAX, m->error, i64(m, 0), worst,
				       lw->diag);
	return status;
}

/* The softmax (or sigmoid) scores of the `experts` logits `logit` into score[]; their
 * softmax sum (NaN where the reference's scores are all NaN) into *sum, when asked. */
static void scores(moe *m, bool sigmoid, int64_t experts, const f8_kir_id *logit,
		   f8_kir_id *score, f8_kir_id *sum) {
	f8_lower *lw = &m->lw;
	if (sigmoid) {
		for (int64_t e = 0; e < experts; e++)
			score[e] = EMIT(lw, DIV, f32(m, 1), EMIT(lw, ADD, f32(m, 1),
				EMIT(lw, EXP, EMIT(lw, NEG, logit[e], NONE, NONE), NONE, NONE), NONE),
				NONE);
		return;
	}
	f8_kir_id top = logit[0], total = NONE;
	for (int64_t e = 1; e < experts; e++)
		top = EMIT(lw, MAX, top, logit[e], NONE);
	for (int64_t e = 0; e < experts; e++) {
		score[e] = EMIT(lw, EXP, EMIT(lw, SUB, logit[e], top, NONE), NONE, NONE);
		total = e ? EMIT(lw, ADD, total, score[e], NONE) : score[e];
	}
	for (int64_t e = 0; e < experts; e++)
		score[e] = EMIT(lw, DIV, score[e], total, NONE);
	if (sum)
		*sum = total;
}

/* Router: a token's scores, each expert's rank, the chosen ones stored at their ranks. */
static f8_status lower_router(const f8_graph *graph, uint32_t group, f8_node_id *members,
			      uint32_t n_members, f8_lowered_group *out, f8_diag *diag) {
	moe m;
	f8_status status = begin(&m, graph, group, members, n_members, graph->groups[group].name,
				 out, diag);
	if (status)
		return status;
	f8_lower *lw = &m.lw;
	const f8_node *node = m.node;
	const f8_shape *shape = &type_of(graph, node->inputs[0])->shape;
	int64_t experts = f8_dim_value(shape->dims[1]);
	int64_t top_k = f8_dim_value(type_of(graph, node->outputs[0])->shape.dims[1]);
	bool normalize = f8_node_attr_int(node, "normalize", 0) != 0;
	uint32_t logits = F8_NONE, probs = F8_NONE, indices = F8_NONE, tokens = F8_NONE;
	status = f8_lower_bind_input(lw, node->inputs[0], &logits);
	if (!status)
		status = f8_lower_bind_output(lw, node->outputs[0], F8_KERNEL_PARAM_OUT, &probs);
	if (!status)
		status = f8_lower_bind_output(lw, node->outputs[1], F8_KERNEL_PARAM_OUT, &indices);
	if (!status)
		status = f8_lower_add_size(lw, shape->dims[0], &tokens);
	f8_kir_id t, worst = NONE;
	if (!status)
		status = begin_grid(&m, tokens, &t, &worst);
	if (status)
		return f8_lower_end(lw, status, out);
	f8_kir_id logit[MAX_EXPERTS] = {0}, score[MAX_EXPERTS] = {0};
	f8_kir_id rank[MAX_EXPERTS] = {0}, chosen[MAX_EXPERTS] = {0};
	f8_kir_id base = EMIT(lw, MUL, t, i64(&m, experts), NONE), sum;
	for (int64_t e = 0; e < experts; e++)
		logit[e] = f8_kir_load(lw->kernel, logits, EMIT(lw, ADD, base, i64(&m, e), NONE));
	scores(&m, false, experts, logit, score, &sum);
	// NaN scores all tie: the reference then takes the experts in index order.
	f8_kir_id tied = EMIT(lw, IS_NAN, sum, NONE, NONE), total = NONE;
	for (int64_t e = 0; e < experts; e++) {
		rank[e] = i64(&m, 0);
		for (int64_t other = 0; other < experts; other++) {
			if (other == e)
				continue;
			// `other` stands before e: a larger logit, or an equal one of a lower index.
			f8_kir_id beats = other < e
				? EMIT(lw, OR, tied, EMIT(lw, LE, logit[e], logit[other], NONE), NONE)
				: EMIT(lw, AND, EMIT(lw, NOT, tied, NONE, NONE),
				       EMIT(lw, LT, logit[e], logit[other], NONE), NONE);
			rank[e] = EMIT(lw, ADD, rank[e],
				       EMIT(lw, SELECT, beats, i64(&m, 1), i64(&m, 0)), NONE);
		}
		chosen[e] = EMIT(lw, LT, rank[e], i64(&m, top_k), NONE);
		f8_kir_id part = EMIT(lw, SELECT, chosen[e], score[e], f32(&m, 0));
		total = e ? EMIT(lw, ADD, total, part, NONE) : part;
	}
	f8_kir_id row = EMIT(lw, MUL, t, i64(&m, top_k), NONE);
	for (int64_t e = 0; !status && e < experts; e++) {
		f8_kir_id at = EMIT(lw, ADD, row, rank[e], NONE);
		f8_kir_id p = normalize ? EMIT(lw, DIV, score[e], total, NONE) : score[e];
		if (f8_kir_error(lw->kernel))
			break;
		if (probs != F8_NONE)
			status = f8_kir_store_if(lw->kernel, probs, at, p, chosen[e], diag);
		if (!status && indices != F8_NONE)
			status = f8_kir_store_if(lw->kernel, indices, at, i64(&m, e), chosen[e], diag);
	}
	return f8_lower_end(lw, end_grid(&m, status, NONE, worst), out);
}

/* RouterGrad: the scores again, then kernels_grad_moe.c's three steps back, per token. */
static f8_status lower_router_grad(const f8_graph *graph, uint32_t group, f8_node_id *members,
				   uint32_t n_members, f8_lowered_group *out, f8_diag *diag) {
	moe m;
	f8_status status = begin(&m, graph, group, members, n_members, graph->groups[group].name,
				 out, diag);
	if (status)
		return status;
	f8_lower *lw = &m.lw;
	const f8_node *node = m.node;
	const f8_shape *shape = &type_of(graph, node->inputs[1])->shape;
	int64_t experts = f8_dim_value(shape->dims[1]);
	int64_t top_k = f8_dim_value(type_of(graph, node->inputs[3])->shape.dims[1]);
	bool normalize = f8_node_attr_int(node, "normalize", 0) != 0;
	uint32_t dprobs = F8_NONE, logits = F8_NONE, dlogits = F8_NONE, tokens = F8_NONE;
	status = f8_lower_bind_input(lw, node->inputs[0], &dprobs);
	if (!status)
		status = f8_lower_bind_input(lw, node->inputs[1], &logits);
	if (!status)
		status = f8_lower_add_buffer(lw, node->outputs[0], F8_KERNEL_PARAM_OUT);
	if (!status) {
		dlogits = lw->kernel->n_params - 1;
		status = bind_indices(&m, out, 3, experts);
	}
	if (!status)
		status = f8_lower_add_size(lw, shape->dims[0], &tokens);
	f8_kir_id t, worst = NONE, flag = NONE;
	if (!status)
		status = begin_grid(&m, tokens, &t, &worst);
	if (status)
		return f8_lower_end(lw, status, out);
	f8_kir_id logit[MAX_EXPERTS] = {0}, score[MAX_EXPERTS] = {0}, dscore[MAX_EXPERTS] = {0};
	f8_kir_id expert[MAX_TOP_K] = {0}, dchosen[MAX_TOP_K] = {0}, picked[MAX_TOP_K] = {0};
	f8_kir_id base = EMIT(lw, MUL, t, i64(&m, experts), NONE);
	for (int64_t e = 0; e < experts; e++)
		logit[e] = f8_kir_load(lw->kernel, logits, EMIT(lw, ADD, base, i64(&m, e), NONE));
	bool sigmoid = !softmax_scores(node);
	scores(&m, sigmoid, experts, logit, score, NULL);
	f8_kir_id row = EMIT(lw, MUL, t, i64(&m, top_k), NONE);
	f8_kir_id chosen_sum = f32(&m, 0), zero = f32(&m, 0);
	for (int64_t k = 0; k < top_k; k++) {
		f8_kir_id copy = EMIT(lw, ADD, row, i64(&m, k), NONE);
		expert[k] = expert_of(&m, copy, true, &flag);
		dchosen[k] = f8_kir_load(lw->kernel, dprobs, copy);
		picked[k] = zero; // the chosen expert's score, selected from the registers
		for (int64_t e = 0; e < experts; e++)
			picked[k] = EMIT(lw, SELECT, EMIT(lw, EQ, expert[k], i64(&m, e), NONE),
					 score[e], picked[k]);
		chosen_sum = EMIT(lw, ADD, chosen_sum, picked[k], NONE);
	}
	for (int64_t e = 0; e < experts; e++)
		dscore[e] = zero;
	for (int64_t k = 0; k < top_k; k++) {
		f8_kir_id dc = dchosen[k];
		// dc - sum_j dc_j c_j / S (the reference's) as sum_j (dc - dc_j) c_j / S, equal
		// exactly: it does not cancel where one chosen score dwarfs the other.
		if (normalize) {
			f8_kir_id spread = zero;
			for (int64_t j = 0; j < top_k; j++)
				spread = EMIT(lw, ADD, spread, EMIT(lw, MUL, EMIT(lw, SUB, dc, dchosen[j],
					NONE), picked[j], NONE), NONE);
			dc = EMIT(lw, DIV, EMIT(lw, DIV, spread, chosen_sum, NONE), chosen_sum, NONE);
		}
		for (int64_t e = 0; e < experts; e++) // += dc where the copy chose e, in k's order
			dscore[e] = EMIT(lw, ADD, dscore[e], EMIT(lw, SELECT, EMIT(lw, EQ, expert[k],
				i64(&m, e), NONE), dc, zero), NONE);
	}
	// Softmax: ds_e - sum(ds s) as sum_e' (ds_e - ds_e') s_e' (the scores sum to 1), whose
	// terms are each exact to an f32 rounding: near a one-hot token the first form cancels
	// (1 - s_top in f32) where the reference's double does not. Sigmoid: 1 - s as sigmoid(-x).
	for (int64_t e = 0; !status && e < experts; e++) {
		f8_kir_id d;
		if (sigmoid) {
			f8_kir_id rest = EMIT(lw, DIV, f32(&m, 1), EMIT(lw, ADD, f32(&m, 1),
					      EMIT(lw, EXP, logit[e], NONE, NONE), NONE), NONE);
			d = EMIT(lw, MUL, EMIT(lw, MUL, dscore[e], score[e], NONE), rest, NONE);
		} else {
			f8_kir_id inner = zero;
			for (int64_t other = 0; other < experts; other++)
				if (other != e)
					inner = EMIT(lw, ADD, inner, EMIT(lw, MUL, EMIT(lw, SUB, dscore[e],
						dscore[other], NONE), score[other], NONE), NONE);
			d = EMIT(lw, MUL, score[e], inner, NONE);
		}
		if (f8_kir_error(lw->kernel))
			break;
		status = f8_kir_store(lw->kernel, dlogits, EMIT(lw, ADD, base, i64(&m, e), NONE), d,
				      diag);
	}
	return f8_lower_end(lw, end_grid(&m, status, flag, worst), out);
}

/* MoEDispatch's first kernel: one grid row a copy, its token's row copied to its position. */
static f8_status dispatch_rows(moe *m, f8_lowered_group *out, int64_t experts) {
	f8_lower *lw = &m->lw;
	const f8_graph *graph = lw->graph;
	const f8_node *node = m->node;
	const f8_shape *x_shape = &type_of(graph, node->inputs[0])->shape;
	const f8_shape *i_shape = &type_of(graph, node->inputs[1])->shape;
	uint32_t x = F8_NONE, rows = F8_NONE, hidden = F8_NONE;
	f8_status status = f8_lower_bind_input(lw, node->inputs[0], &x);
	if (!status)
		status = f8_lower_bind_output(lw, node->outputs[0], F8_KERNEL_PARAM_OUT, &rows);
	if (!status)
		status = bind_indices(m, out, 1, experts);
	if (!status)
		status = f8_lower_add_size(lw, x_shape->dims[1], &hidden);
	f8_kir_id c, worst = NONE, flag = NONE, position, j;
	if (!status)
		status = begin_grid(m, m->copies_size, &c, &worst);
	if (status)
		return status;
	f8_kir_id expert = expert_of(m, c, true, &flag);
	status = positions(m, 1, &c, &expert, &position);
	f8_kir_id width = f8_kir_size(lw->kernel, hidden);
	f8_kir_id token = EMIT(lw, DIV, c, dim_value(m, i_shape->dims[1]), NONE);
	if (!status && rows != F8_NONE &&
	    !(status = f8_kir_begin_block_loop(lw->kernel, width, &j, lw->diag))) {
		f8_kir_id from = EMIT(lw, ADD, EMIT(lw, MUL, token, width, NONE), j, NONE);
		f8_kir_id to = EMIT(lw, ADD, EMIT(lw, MUL, position, width, NONE), j, NONE);
		status = f8_kir_store(lw->kernel, rows, to, f8_kir_load(lw->kernel, x, from),
				      lw->diag);
		if (!status)
			status = f8_kir_end_loop(lw->kernel, NULL, 0, lw->diag);
	}
	return end_grid(m, status, flag, worst);
}

/* MoEDispatch's second kernel: one grid row an expert, its copies counted (the first kernel
 * flags the indices). */
static f8_status dispatch_counts(moe *m, f8_lowered_group *out, int64_t experts) {
	f8_lower *lw = &m->lw;
	uint32_t counts = F8_NONE, size = F8_NONE;
	f8_status status = f8_lower_add_buffer(lw, m->node->outputs[1], F8_KERNEL_PARAM_OUT);
	if (!status) {
		counts = lw->kernel->n_params - 1;
		status = bind_indices(m, out, 1, experts);
	}
	if (!status)
		status = f8_lower_add_size(lw, f8_dim_const(experts), &size);
	m->error = F8_NONE;
	f8_kir_id e, c, count, worst = NONE;
	if (!status)
		status = begin_grid(m, size, &e, &worst);
	if (!status)
		status = f8_kir_begin_block_loop(lw->kernel, m->copies, &c, lw->diag);
	if (!status)
		status = f8_kir_add_accumulator(lw->kernel, F8_KIR_COMBINE_ADD, F8_KIR_TYPE_I64,
						&count, lw->diag);
	if (status)
		return status;
	f8_kir_id same = EMIT(lw, EQ, f8_kir_load(lw->kernel, m->indices, c), e, NONE);
	f8_kir_id one = EMIT(lw, SELECT, same, i64(m, 1), i64(m, 0));
	if (f8_kir_error(lw->kernel))
		return f8_lower_fail(lw, lw->members[0], "%s", f8_kir_error(lw->kernel));
	status = f8_kir_end_loop(lw->kernel, &one, 1, lw->diag);
	if (!status)
		status = f8_kir_store(lw->kernel, counts, e, count, lw->diag);
	return end_grid(m, status, NONE, worst);
}

/* MoEDispatch: the rows, then (where they leave the group) the counts, a kernel each. */
static f8_status lower_dispatch(const f8_graph *graph, uint32_t group, f8_node_id *members,
				uint32_t n_members, f8_lowered_group *out, f8_diag *diag) {
	const f8_node *node = &graph->nodes[members[0]];
	int64_t experts = f8_node_attr_int(node, "experts", 0);
	const char *name = graph->groups[group].name;
	char kernel[96];
	moe m;
	snprintf(kernel, sizeof kernel, "%s_rows", name);
	f8_status status = begin(&m, graph, group, members, n_members, kernel, out, diag);
	if (status)
		return status;
	bool counted = f8_lower_escapes(&m.lw, node->outputs[1]);
	if ((status = f8_lower_end(&m.lw, dispatch_rows(&m, out, experts), out)) || !counted)
		return status;
	snprintf(kernel, sizeof kernel, "%s_counts", name);
	if ((status = begin(&m, graph, group, members, n_members, kernel, out, diag)))
		return status;
	return f8_lower_end(&m.lw, dispatch_counts(&m, out, experts), out);
}

/*
 * MoECombine (`weighted`) and MoEDispatchGrad: one grid row a token, out[t] the sum over its
 * copies k of probs[t, k] y[position(t, k)] (MoECombine) or of dy[position(t, k)], in k's
 * order, from 0 as the reference's sums start.
 */
static f8_status lower_gather(const f8_graph *graph, uint32_t group, f8_node_id *members,
			      uint32_t n_members, f8_lowered_group *out, f8_diag *diag) {
	moe m;
	f8_status status = begin(&m, graph, group, members, n_members, graph->groups[group].name,
				 out, diag);
	if (status)
		return status;
	f8_lower *lw = &m.lw;
	const f8_node *node = m.node;
	bool weighted = node->op == F8_OP_MOE_COMBINE;
	uint32_t at_indices = weighted ? 2 : 1;
	const f8_shape *i_shape = &type_of(graph, node->inputs[at_indices])->shape;
	const f8_shape *y_shape = &type_of(graph, node->inputs[0])->shape;
	int64_t top_k = f8_dim_value(i_shape->dims[1]);
	int64_t experts = weighted ? 0 : f8_node_attr_int(node, "experts", 0);
	uint32_t y = F8_NONE, probs = F8_NONE, made = F8_NONE, tokens = F8_NONE, hidden = F8_NONE;
	status = f8_lower_bind_input(lw, node->inputs[0], &y);
	if (!status && weighted)
		status = f8_lower_bind_input(lw, node->inputs[1], &probs);
	if (!status)
		status = f8_lower_add_buffer(lw, node->outputs[0], F8_KERNEL_PARAM_OUT);
	if (!status) {
		made = lw->kernel->n_params - 1;
		status = bind_indices(&m, out, at_indices, experts);
	}
	if (!status)
		status = f8_lower_add_size(lw, i_shape->dims[0], &tokens);
	if (!status)
		status = f8_lower_add_size(lw, y_shape->dims[1], &hidden);
	f8_kir_id t, j, worst = NONE, flag = NONE;
	if (!status)
		status = begin_grid(&m, tokens, &t, &worst);
	if (status)
		return f8_lower_end(lw, status, out);
	f8_kir_id copy[MAX_TOP_K] = {0}, expert[MAX_TOP_K] = {0};
	f8_kir_id position[MAX_TOP_K] = {0}, p[MAX_TOP_K] = {0};
	f8_kir_id row = EMIT(lw, MUL, t, i64(&m, top_k), NONE);
	for (int64_t k = 0; k < top_k; k++) {
		copy[k] = EMIT(lw, ADD, row, i64(&m, k), NONE);
		expert[k] = expert_of(&m, copy[k], experts > 0, &flag);
		p[k] = weighted ? f8_kir_load(lw->kernel, probs, copy[k]) : NONE;
	}
	status = positions(&m, (uint32_t)top_k, copy, expert, position);
	f8_kir_id width = f8_kir_size(lw->kernel, hidden);
	if (!status && !(status = f8_kir_begin_block_loop(lw->kernel, width, &j, diag))) {
		f8_kir_id sum = f32(&m, 0);
		for (int64_t k = 0; k < top_k; k++) {
			f8_kir_id at = EMIT(lw, ADD, EMIT(lw, MUL, position[k], width, NONE), j, NONE);
			f8_kir_id v = f8_kir_load(lw->kernel, y, at);
			sum = EMIT(lw, ADD, sum, weighted ? EMIT(lw, MUL, p[k], v, NONE) : v, NONE);
		}
		status = f8_kir_store(lw->kernel, made,
				      EMIT(lw, ADD, EMIT(lw, MUL, t, width, NONE), j, NONE), sum, diag);
		if (!status)
			status = f8_kir_end_loop(lw->kernel, NULL, 0, diag);
	}
	return f8_lower_end(lw, end_grid(&m, status, flag, worst), out);
}

/* MoECombineGrad: one grid row a token; per copy k, dy[position(t, k)] = probs[t, k] dout[t]
 * and dprobs[t, k] = dout[t] . y[position(t, k)], a block loop's sum. */
static f8_status lower_combine_grad(const f8_graph *graph, uint32_t group, f8_node_id *members,
				    uint32_t n_members, f8_lowered_group *out, f8_diag *diag) {
	moe m;
	f8_status status = begin(&m, graph, group, members, n_members, graph->groups[group].name,
				 out, diag);
	if (status)
		return status;
	f8_lower *lw = &m.lw;
	const f8_node *node = m.node;
	const f8_shape *i_shape = &type_of(graph, node->inputs[3])->shape;
	const f8_shape *y_shape = &type_of(graph, node->inputs[1])->shape;
	int64_t top_k = f8_dim_value(i_shape->dims[1]);
	uint32_t dout = F8_NONE, y = F8_NONE, probs = F8_NONE, dy = F8_NONE, dprobs = F8_NONE;
	uint32_t tokens = F8_NONE, hidden = F8_NONE;
	status = f8_lower_bind_input(lw, node->inputs[0], &dout);
	if (!status)
		status = f8_lower_bind_input(lw, node->inputs[1], &y);
	if (!status)
		status = f8_lower_bind_input(lw, node->inputs[2], &probs);
	if (!status)
		status = f8_lower_bind_output(lw, node->outputs[0], F8_KERNEL_PARAM_OUT, &dy);
	if (!status)
		status = f8_lower_bind_output(lw, node->outputs[1], F8_KERNEL_PARAM_OUT, &dprobs);
	if (!status)
		status = bind_indices(&m, out, 3, 0);
	if (!status)
		status = f8_lower_add_size(lw, i_shape->dims[0], &tokens);
	if (!status)
		status = f8_lower_add_size(lw, y_shape->dims[1], &hidden);
	f8_kir_id t, j, worst = NONE, flag = NONE;
	if (!status)
		status = begin_grid(&m, tokens, &t, &worst);
	if (status)
		return f8_lower_end(lw, status, out);
	f8_kir_id copy[MAX_TOP_K] = {0}, expert[MAX_TOP_K] = {0};
	f8_kir_id position[MAX_TOP_K] = {0}, p[MAX_TOP_K] = {0};
	f8_kir_id dot[MAX_TOP_K] = {0}, terms[MAX_TOP_K] = {0};
	f8_kir_id row = EMIT(lw, MUL, t, i64(&m, top_k), NONE);
	for (int64_t k = 0; k < top_k; k++) {
		copy[k] = EMIT(lw, ADD, row, i64(&m, k), NONE);
		expert[k] = expert_of(&m, copy[k], false, &flag);
		p[k] = f8_kir_load(lw->kernel, probs, copy[k]);
	}
	status = positions(&m, (uint32_t)top_k, copy, expert, position);
	f8_kir_id width = f8_kir_size(lw->kernel, hidden);
	if (!status)
		status = f8_kir_begin_block_loop(lw->kernel, width, &j, diag);
	for (int64_t k = 0; !status && k < top_k; k++)
		status = f8_kir_add_accumulator(lw->kernel, F8_KIR_COMBINE_ADD, F8_KIR_TYPE_F32,
						&dot[k], diag);
	if (status)
		return f8_lower_end(lw, status, out);
	f8_kir_id g = f8_kir_load(lw->kernel, dout,
				  EMIT(lw, ADD, EMIT(lw, MUL, t, width, NONE), j, NONE));
	for (int64_t k = 0; !status && k < top_k; k++) {
		f8_kir_id at = EMIT(lw, ADD, EMIT(lw, MUL, position[k], width, NONE), j, NONE);
		terms[k] = EMIT(lw, MUL, g, f8_kir_load(lw->kernel, y, at), NONE);
		if (dy != F8_NONE)
			status = f8_kir_store(lw->kernel, dy, at, EMIT(lw, MUL, p[k], g, NONE), diag);
	}
	if (!status && f8_kir_error(lw->kernel))
		status = f8_lower_fail(lw, members[0], "%s", f8_kir_error(lw->kernel));
	if (!status)
		status = f8_kir_end_loop(lw->kernel, terms, (uint32_t)top_k, diag);
	for (int64_t k = 0; !status && dprobs != F8_NONE && k < top_k; k++)
		status = f8_kir_store(lw->kernel, dprobs, copy[k], dot[k], diag);
	return f8_lower_end(lw, end_grid(&m, status, flag, worst), out);
}

f8_status f8_lower_moe(const f8_graph *graph, uint32_t group, f8_node_id *members,
		       uint32_t n_members, f8_lowered_group *out, f8_diag *diag) {
	const f8_node *node = &graph->nodes[members[0]];
	// Every moe kernel but the router's reads expert indices, which may be out of range.
	if (node->op != F8_OP_ROUTER) {
		out->error = expert_error;
		f8_status status = f8_lower_add_scratch(out, F8_DTYPE_I64, f8_dim_const(1),
							&out->error_scratch, diag);
		if (status)
			return status;
	}
	switch (node->op) {
	case F8_OP_ROUTER: return lower_router(graph, group, members, n_members, out, diag);
	case F8_OP_ROUTER_GRAD:
		return lower_router_grad(graph, group, members, n_members, out, diag);
	case F8_OP_MOE_DISPATCH: return lower_dispatch(graph, group, members, n_members, out, diag);
	case F8_OP_MOE_COMBINE_GRAD:
		return lower_combine_grad(graph, group, members, n_members, out, diag);
	default: // MoECombine, MoEDispatchGrad
		return lower_gather(graph, group, members, n_members, out, diag);
	}
}
