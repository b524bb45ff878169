/*
 * The groups that lower to several kernels (codegen/lower.h): a cross-entropy's segments of
 * long rows, its rows, then their mean; a cross-entropy gradient's count of labelled rows, then
 * its rows; a scaling update's amaxes gathered, then one row per slot. The kernels of a group
 * share scratch buffers (f8_lowered_group) and, for labels, an error flag the runtime reports.
 */
#include <float.h>  // FLT_MAX, FLT_TRUE_MIN
#include <math.h>   // INFINITY, ldexp
#include <stdio.h>  // snprintf
#include <string.h> // strcmp

#include "codegen/lower_internal.h" // f8_lower, f8_lower_*
#include "ir/ops.h"                 // f8_node_attr_*

/* Begins the group's kernel named GROUP_SUFFIX ("k3_rows"). */
static f8_status begin_kernel(f8_lower *lw, const f8_graph *graph, uint32_t group,
			      f8_node_id *members, const char *suffix, f8_diag *diag) {
	char name[80];
	snprintf(name, sizeof name, "%s_%s", graph->groups[group].name, suffix);
	return f8_lower_begin(lw, graph, group, members, 1, name, diag);
}

/* The rows and columns of a (rows, cols) view of `shape`: its leading dims' product, its last. */
static bool matrix_dims(const f8_shape *shape, f8_dim *rows, f8_dim *cols) {
	*rows = f8_dim_const(1);
	*cols = shape->rank ? shape->dims[shape->rank - 1] : f8_dim_const(1);
	for (int d = 0; d + 1 < shape->rank; d++)
		if (!f8_dim_mul(*rows, shape->dims[d], rows))
			return false;
	return true;
}

static f8_kir_id i64(f8_lower *lw, int64_t value) {
	return f8_kir_const_i64(lw->kernel, value);
}

/* x[row * cols + col] of buffer `param`. */
static f8_kir_id load_at(f8_lower *lw, uint32_t param, f8_kir_id row, f8_kir_id cols, f8_kir_id col) {
	return f8_kir_load(lw->kernel, param,
			   EMIT(lw, ADD, EMIT(lw, MUL, row, cols, NONE), col, NONE));
}

/* A grid loop of one iteration, for a kernel that reduces what a first one left. */
static f8_status begin_single(f8_lower *lw, f8_kir_id *var) {
	lw->kernel->n_grid_sizes = 0;
	return f8_kir_begin_grid_loop(lw->kernel, i64(lw, 1), var, lw->diag);
}

/* A block loop over `extent` with one add accumulator of `type` per entry of `results`. */
static f8_status begin_sum(f8_lower *lw, f8_kir_id extent, uint32_t n, f8_kir_type type,
			   f8_kir_id *var, f8_kir_id *results) {
	f8_status status = f8_kir_begin_block_loop(lw->kernel, extent, var, lw->diag);
	for (uint32_t i = 0; !status && i < n; i++)
		status = f8_kir_add_accumulator(lw->kernel, F8_KIR_COMBINE_ADD, type, &results[i],
						lw->diag);
	return status;
}

static const char label_error[] = "a label outside the vocabulary that is not ignore_index";

/* The group's error flag: an i64 scratch the kernels take the max of 1 + a bad row into. */
static f8_status add_error_flag(f8_lowered_group *out, f8_diag *diag) {
	out->error = label_error;
	return f8_lower_add_scratch(out, F8_DTYPE_I64, f8_dim_const(1), &out->error_scratch, diag);
}

/* Row r's label, whether it counts (not ignore_index, inside the vocabulary) and, into the
 * error flag, 1 + r when it is neither ignored nor inside. */
static f8_status label_of_row(f8_lower *lw, uint32_t labels, uint32_t error, f8_kir_id r,
			      f8_kir_id vocab, int64_t ignore, f8_kir_id *label, f8_kir_id *counts) {
	*label = f8_kir_load(lw->kernel, labels, r);
	f8_kir_id labelled = EMIT(lw, NE, *label, i64(lw, ignore), NONE);
	f8_kir_id inside = EMIT(lw, AND, EMIT(lw, LE, i64(lw, 0), *label, NONE),
				EMIT(lw, LT, *label, vocab, NONE), NONE);
	*counts = EMIT(lw, AND, labelled, inside, NONE);
	f8_kir_id bad = EMIT(lw, AND, labelled, EMIT(lw, NOT, inside, NONE, NONE), NONE);
	f8_kir_id flag = EMIT(lw, SELECT, bad, EMIT(lw, ADD, r, i64(lw, 1), NONE), i64(lw, 0));
	return f8_kir_atomic(lw->kernel, F8_KIR_COMBINE_MAX, error, i64(lw, 0), flag, lw->diag);
}

/*
 * CrossEntropy(logits, labels) -> loss, lse: a row's lse is max + log(sum of exp(x - max)), its
 * loss lse - logit[label] (0 for an ignored row). Each logit is read from memory once: the block
 * loop that takes the max of a row, or of a segment of a long row, keeps it in a shared array,
 * from which the sum of exp reads it back.
 *
 * A vocabulary that is a constant of at most SEGMENT: kernel "rows", one grid iteration a row,
 * its max and sum, then its lse and loss. A longer one is split into segments of SEGMENT
 * logits (the last one shorter): kernel "segments" first, one grid iteration per segment of a
 * row, its max m_k and sum s_k into a scratch [2, rows * segments]; then kernel "rows" combines
 * a row's segments, m = max m_k, s = sum s_k exp(m_k - m), a row a thread. A vocabulary that
 * is not a constant (no shared array fits every length): kernel "rows", the row read twice.
 * Reduction none stores the losses; mean and sum put each with whether its row counts into a
 * scratch [2, rows], which kernel "reduce" adds up in one block: the mean over the rows that
 * count (0 when none does), as the reference.
 */

enum {
	SEGMENT = 6144,    // logits one grid iteration keeps: 24 KB of f32, so that 8 blocks of
			   // 256 threads still fit an SM's 228 KB of shared memory
	ACCESS_BYTES = 16, // the GPU's widest access, the boundary a block loop over logits starts at
	GROUP = 4,         // f32 in one such access: kept logits the sum of exp takes an iteration
			   // (a power of two: they are added pairwise)
};

/* What the kernels of one CrossEntropy share while they are built. */
typedef struct cross_entropy {
	const f8_graph *graph;
	uint32_t group;
	f8_node_id *members;
	const f8_node *node;
	f8_diag *diag;
	bool none, mean;
	int64_t ignore;
	f8_dim rows, vocab;
	int64_t segments; // a row's segments; 1: the row is not split
	int64_t kept;     // the shared array's elements (a segment or a row, its lead and padding);
			  // 0: none
	uint32_t losses;  // scratch [2, rows] (mean, sum), else F8_NONE
	uint32_t partials; // scratch [2, rows * segments] (m_k, then s_k) of split rows, else F8_NONE
} cross_entropy;

/*
 * In a grid iteration: the max and the sum of exp(x - max) of the `length` logits from flat
 * index `start`, in two block loops. The first starts at the 16-byte boundary at or before
 * `start`, so that its loads are whole 16-byte accesses on the GPU wherever a row starts; what
 * it loads goes to shared array `kept`, -inf in the `lead` elements before `start` and up to
 * the next multiple of GROUP after the last, so that the second loop takes GROUP elements an
 * iteration (one 16-byte shared access, one loop step for four exps) with no mask: exp(-inf -
 * max) adds 0. Without a shared array (`kept` F8_NONE) the second loop reads memory again. The
 * exps are kir.h's exp.term, the GPU's ex2.approx: exp's own sequence (llvm_math.c, about 25
 * instructions) made the kernel issue-bound on the H200 (46.6% of copy bandwidth, 2026-12-03).
 */
static f8_status segment_sums(f8_lower *lw, uint32_t logits, uint32_t kept, f8_kir_id start,
			      f8_kir_id length, f8_kir_id *max, f8_kir_id *sum) {
	f8_kernel *k = lw->kernel;
	int64_t align = ACCESS_BYTES / (int64_t)f8_dtype_get_info(k->params[logits].dtype)->bytes;
	f8_kir_id lead = EMIT(lw, REM, start, i64(lw, align), NONE);
	f8_kir_id base = EMIT(lw, SUB, start, lead, NONE), end = EMIT(lw, ADD, lead, length, NONE);
	f8_kir_id groups = NONE, padded = end, c;
	if (kept != F8_NONE) {
		groups = EMIT(lw, DIV, EMIT(lw, ADD, end, i64(lw, GROUP - 1), NONE), i64(lw, GROUP), NONE);
		padded = EMIT(lw, MUL, groups, i64(lw, GROUP), NONE);
	}
	f8_kir_id minus_inf = f8_lower_constant(lw, -INFINITY);
	f8_status status = f8_kir_begin_block_loop(k, padded, &c, lw->diag);
	if (!status)
		status = f8_kir_add_accumulator(k, F8_KIR_COMBINE_MAX, F8_KIR_TYPE_F32, max, lw->diag);
	if (status)
		return status;
	f8_kir_id inside = EMIT(lw, LE, lead, c, NONE);
	if (kept != F8_NONE)
		inside = EMIT(lw, AND, inside, EMIT(lw, LT, c, end, NONE), NONE);
	f8_kir_id x = EMIT(lw, SELECT, inside,
			   f8_kir_load_if(k, logits, EMIT(lw, ADD, base, c, NONE), inside), minus_inf);
	if (kept != F8_NONE)
		status = f8_kir_store_shared(k, kept, c, x, lw->diag);
	if (!status)
		status = f8_kir_end_loop(k, &x, 1, lw->diag);
	if (!status)
		status = begin_sum(lw, kept != F8_NONE ? groups : length, 1, F8_KIR_TYPE_F32, &c, sum);
	if (status)
		return status;
	f8_kir_id e[GROUP];
	for (int j = 0; j < (kept != F8_NONE ? GROUP : 1); j++) {
		x = kept != F8_NONE
			? f8_kir_load_shared(k, kept, EMIT(lw, ADD, EMIT(lw, MUL, c, i64(lw, GROUP), NONE),
							    i64(lw, j), NONE))
			: f8_kir_load(k, logits, EMIT(lw, ADD, start, c, NONE));
		e[j] = EMIT(lw, EXP_TERM, EMIT(lw, SUB, x, *max, NONE), NONE, NONE);
	}
	for (int n = kept != F8_NONE ? GROUP : 1; n > 1; n /= 2) // pairwise: independent adds
		for (int j = 0; j < n / 2; j++)
			e[j] = EMIT(lw, ADD, e[2 * j], e[2 * j + 1], NONE);
	return f8_kir_end_loop(k, &e[0], 1, lw->diag);
}

/* In kernel "rows": row r's max and sum from its `segments` segments' (m_k at
 * partials[r * segments + k], s_k rows * segments elements further): m = max m_k, then
 * s = sum s_k exp(m_k - m). Unrolled (the count is a constant): the kernel then has no block
 * loop and runs a row a thread, all of a row's loads in flight at once. */
static void combine_segments(f8_lower *lw, uint32_t partials, f8_kir_id rows, f8_kir_id r,
			     int64_t segments, f8_kir_id *max, f8_kir_id *sum) {
	f8_kernel *k = lw->kernel;
	f8_kir_id n = i64(lw, segments), first = EMIT(lw, MUL, r, n, NONE);
	f8_kir_id sums = EMIT(lw, ADD, EMIT(lw, MUL, rows, n, NONE), first, NONE);
	*max = f8_lower_constant(lw, -INFINITY);
	for (int64_t s = 0; s < segments; s++)
		*max = EMIT(lw, MAX, *max, f8_kir_load(k, partials, EMIT(lw, ADD, first, i64(lw, s), NONE)),
			    NONE);
	*sum = f8_lower_constant(lw, 0);
	for (int64_t s = 0; s < segments; s++) {
		f8_kir_id m = f8_kir_load(k, partials, EMIT(lw, ADD, first, i64(lw, s), NONE));
		f8_kir_id scaled = EMIT(lw, EXP, EMIT(lw, SUB, m, *max, NONE), NONE, NONE);
		f8_kir_id part = f8_kir_load(k, partials, EMIT(lw, ADD, sums, i64(lw, s), NONE));
		*sum = EMIT(lw, ADD, *sum, EMIT(lw, MUL, part, scaled, NONE), NONE);
	}
}

/*
 * Kernel "segments" of a split row: one grid iteration per segment, p = r * segments + k, its
 * max and sum (segment_sums) into partials[p] and partials[rows * segments + p]. A segment of
 * -inf alone sums to 0 there, so that it adds nothing to a row whose max is finite (a row of
 * -inf alone still comes out NaN, 0 * exp(-inf - -inf), as the reference's).
 */
static f8_status segments_kernel(const cross_entropy *ce, f8_lowered_group *out) {
	f8_lower lw;
	f8_status status = begin_kernel(&lw, ce->graph, ce->group, ce->members, "segments", ce->diag);
	if (status)
		return status;
	uint32_t logits = 0, partials, p_rows, p_vocab, kept;
	status = f8_lower_add_buffer(&lw, ce->node->inputs[0], F8_KERNEL_PARAM_IN);
	if (!status)
		status = f8_lower_add_scratch_param(&lw, out, ce->partials, F8_KERNEL_PARAM_OUT, &partials);
	if (!status)
		status = f8_lower_add_size(&lw, ce->rows, &p_rows);
	if (!status)
		status = f8_lower_add_size(&lw, ce->vocab, &p_vocab);
	if (!status)
		status = f8_kir_add_shared(lw.kernel, "segment", F8_DTYPE_F32, (uint32_t)ce->kept, &kept,
					   ce->diag);
	if (status)
		return f8_lower_end(&lw, status, out);
	// The launcher sizes the grid as if by rows * vocab / SEGMENT iterations.
	lw.kernel->grid_sizes[0] = p_rows;
	lw.kernel->grid_sizes[1] = p_vocab;
	lw.kernel->n_grid_sizes = 2;
	lw.kernel->grid_divisor = SEGMENT;
	f8_kir_id rows = f8_kir_size(lw.kernel, p_rows), vocab = f8_kir_size(lw.kernel, p_vocab);
	f8_kir_id n = i64(&lw, ce->segments), pairs = EMIT(&lw, MUL, rows, n, NONE), p, max, sum;
	status = f8_kir_begin_grid_loop(lw.kernel, pairs, &p, ce->diag);
	if (status)
		return f8_lower_end(&lw, status, out);
	f8_kir_id r = EMIT(&lw, DIV, p, n, NONE);
	f8_kir_id first = EMIT(&lw, MUL, EMIT(&lw, REM, p, n, NONE), i64(&lw, SEGMENT), NONE);
	f8_kir_id start = EMIT(&lw, ADD, EMIT(&lw, MUL, r, vocab, NONE), first, NONE);
	f8_kir_id length = EMIT(&lw, MIN, i64(&lw, SEGMENT), EMIT(&lw, SUB, vocab, first, NONE), NONE);
	status = segment_sums(&lw, logits, kept, start, length, &max, &sum);
	if (!status) {
		f8_kir_id only_inf = EMIT(&lw, EQ, max, f8_lower_constant(&lw, -INFINITY), NONE);
		sum = EMIT(&lw, SELECT, only_inf, f8_lower_constant(&lw, 0), sum);
		status = f8_kir_store(lw.kernel, partials, p, max, ce->diag);
	}
	if (!status)
		status = f8_kir_store(lw.kernel, partials, EMIT(&lw, ADD, pairs, p, NONE), sum, ce->diag);
	if (!status)
		status = f8_kir_end_loop(lw.kernel, NULL, 0, ce->diag);
	return f8_lower_end(&lw, status, out);
}

/*
 * Kernel "rows": one grid iteration a row: its label checked, its max and sum from the row
 * itself (segment_sums) or from its segments' (combine_segments), its lse stored where it leaves
 * the group, its loss stored (reduction none) or put with whether the row counts into the
 * losses' scratch.
 */
static f8_status rows_kernel(const cross_entropy *ce, f8_lowered_group *out) {
	const f8_node *node = ce->node;
	f8_lower lw;
	f8_status status = begin_kernel(&lw, ce->graph, ce->group, ce->members, "rows", ce->diag);
	if (status)
		return status;
	uint32_t logits = 0, labels = 1, partials = F8_NONE, lse, loss = F8_NONE, losses = F8_NONE;
	uint32_t error, p_rows, p_vocab, kept = F8_NONE;
	f8_value_id lse_value = node->n_outputs > 1 ? node->outputs[1] : F8_NONE;
	status = f8_lower_add_buffer(&lw, node->inputs[0], F8_KERNEL_PARAM_IN);
	if (!status)
		status = f8_lower_add_buffer(&lw, node->inputs[1], F8_KERNEL_PARAM_IN);
	if (!status && ce->partials != F8_NONE)
		status = f8_lower_add_scratch_param(&lw, out, ce->partials, F8_KERNEL_PARAM_IN, &partials);
	if (!status)
		status = f8_lower_bind_output(&lw, lse_value, F8_KERNEL_PARAM_OUT, &lse);
	if (!status && ce->none)
		status = f8_lower_bind_output(&lw, node->outputs[0], F8_KERNEL_PARAM_OUT, &loss);
	if (!status && !ce->none)
		status = f8_lower_add_scratch_param(&lw, out, ce->losses, F8_KERNEL_PARAM_OUT, &losses);
	if (!status)
		status = f8_lower_add_scratch_param(&lw, out, out->error_scratch,
						    F8_KERNEL_PARAM_ACCUMULATE, &error);
	if (!status)
		status = f8_lower_add_size(&lw, ce->rows, &p_rows);
	if (!status)
		status = f8_lower_add_size(&lw, ce->vocab, &p_vocab);
	if (!status && partials == F8_NONE && ce->kept)
		status = f8_kir_add_shared(lw.kernel, "row", F8_DTYPE_F32, (uint32_t)ce->kept, &kept,
					   ce->diag);
	if (status)
		return f8_lower_end(&lw, status, out);
	lw.kernel->grid_sizes[0] = p_rows;
	lw.kernel->n_grid_sizes = 1;
	f8_kir_id rows = f8_kir_size(lw.kernel, p_rows), vocab = f8_kir_size(lw.kernel, p_vocab);
	f8_kir_id r, label, counts, max, sum;
	status = f8_kir_begin_grid_loop(lw.kernel, rows, &r, ce->diag);
	if (!status)
		status = label_of_row(&lw, labels, error, r, vocab, ce->ignore, &label, &counts);
	if (status)
		return f8_lower_end(&lw, status, out);
	// The label's logit first, so that the row's other loads overlap its latency.
	f8_kir_id pick = EMIT(&lw, SELECT, counts, label, i64(&lw, 0));
	f8_kir_id picked = load_at(&lw, logits, r, vocab, pick);
	if (partials == F8_NONE)
		status = segment_sums(&lw, logits, kept, EMIT(&lw, MUL, r, vocab, NONE), vocab, &max,
				      &sum);
	else
		combine_segments(&lw, partials, rows, r, ce->segments, &max, &sum);
	if (!status) {
		f8_kir_id lse_v = EMIT(&lw, ADD, max, EMIT(&lw, LOG, sum, NONE, NONE), NONE);
		if (lse != F8_NONE)
			status = f8_kir_store(lw.kernel, lse, r, lse_v, ce->diag);
		f8_kir_id value = EMIT(&lw, SELECT, counts, EMIT(&lw, SUB, lse_v, picked, NONE),
				       f8_lower_constant(&lw, 0));
		if (!status && loss != F8_NONE)
			status = f8_kir_store(lw.kernel, loss, r, value, ce->diag);
		if (!status && losses != F8_NONE)
			status = f8_kir_store(lw.kernel, losses, r, value, ce->diag);
		if (!status && losses != F8_NONE)
			status = f8_kir_store(lw.kernel, losses, EMIT(&lw, ADD, rows, r, NONE),
					      EMIT(&lw, TO_F32, counts, NONE, NONE), ce->diag);
	}
	if (!status)
		status = f8_kir_end_loop(lw.kernel, NULL, 0, ce->diag);
	return f8_lower_end(&lw, status, out);
}

/* Kernel "reduce" (mean, sum): the losses' sum, or their mean over the rows that count. */
static f8_status reduce_kernel(const cross_entropy *ce, f8_lowered_group *out) {
	f8_lower lw;
	f8_status status = begin_kernel(&lw, ce->graph, ce->group, ce->members, "reduce", ce->diag);
	if (status)
		return status;
	uint32_t rows_in, loss_out, p_rows;
	status = f8_lower_add_scratch_param(&lw, out, ce->losses, F8_KERNEL_PARAM_IN, &rows_in);
	if (!status)
		status = f8_lower_bind_output(&lw, ce->node->outputs[0], F8_KERNEL_PARAM_OUT, &loss_out);
	if (!status)
		status = f8_lower_add_size(&lw, ce->rows, &p_rows);
	f8_kir_id sums[2], rows = NONE, r, c;
	if (!status) {
		rows = f8_kir_size(lw.kernel, p_rows);
		status = begin_single(&lw, &r);
	}
	if (!status && !(status = begin_sum(&lw, rows, 2, F8_KIR_TYPE_F32, &c, sums))) {
		f8_kir_id values[2] = {f8_kir_load(lw.kernel, rows_in, c),
				       f8_kir_load(lw.kernel, rows_in, EMIT(&lw, ADD, rows, c, NONE))};
		status = f8_kir_end_loop(lw.kernel, values, 2, ce->diag);
	}
	if (!status && loss_out != F8_NONE) {
		f8_kir_id result = sums[0];
		if (ce->mean)
			result = EMIT(&lw, SELECT, EMIT(&lw, LT, f8_lower_constant(&lw, 0), sums[1], NONE),
				      EMIT(&lw, DIV, sums[0], sums[1], NONE), f8_lower_constant(&lw, 0));
		status = f8_kir_store(lw.kernel, loss_out, i64(&lw, 0), result, ce->diag);
	}
	if (!status)
		status = f8_kir_end_loop(lw.kernel, NULL, 0, ce->diag);
	return f8_lower_end(&lw, status, out);
}

f8_status f8_lower_cross_entropy(const f8_graph *graph, uint32_t group, f8_node_id *members,
				     f8_lowered_group *out, f8_diag *diag) {
	const f8_node *node = &graph->nodes[members[0]];
	const char *reduction = f8_node_attr_string(node, "reduction", "mean");
	cross_entropy ce = {.graph = graph, .group = group, .members = members, .node = node,
			    .diag = diag, .none = strcmp(reduction, "none") == 0,
			    .mean = strcmp(reduction, "mean") == 0,
			    .ignore = f8_node_attr_int(node, "ignore_index", -100), .segments = 1,
			    .losses = F8_NONE, .partials = F8_NONE};
	const f8_type *logits = &graph->values[node->inputs[0]].type;
	int64_t align = ACCESS_BYTES / (int64_t)f8_dtype_get_info(logits->dtype)->bytes;
	f8_dim both, split;
	bool fits = matrix_dims(&logits->shape, &ce.rows, &ce.vocab) &&
		    f8_dim_mul(ce.rows, f8_dim_const(2), &both);
	if (fits && f8_dim_is_const(ce.vocab)) {
		int64_t vocab = f8_dim_value(ce.vocab);
		ce.segments = vocab > SEGMENT ? (vocab + SEGMENT - 1) / SEGMENT : 1;
		int64_t longest = (vocab > SEGMENT ? SEGMENT : vocab) + align - 1;
		ce.kept = (longest + GROUP - 1) / GROUP * GROUP;
	}
	if (!fits || !f8_dim_mul(ce.rows, f8_dim_const(2 * ce.segments), &split))
		return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "kernel %s: the logits' size overflows",
				   graph->groups[group].name);
	f8_status status = add_error_flag(out, diag);
	if (!status && !ce.none)
		status = f8_lower_add_scratch(out, F8_DTYPE_F32, both, &ce.losses, diag);
	if (!status && ce.segments > 1)
		status = f8_lower_add_scratch(out, F8_DTYPE_F32, split, &ce.partials, diag);
	if (!status && ce.segments > 1)
		status = segments_kernel(&ce, out);
	if (!status)
		status = rows_kernel(&ce, out);
	if (!status && !ce.none)
		status = reduce_kernel(&ce, out);
	return status;
}

/*
 * CrossEntropyGrad(dloss, logits, labels, lse) -> dlogits. Kernel 1 (mean only) counts the
 * rows that count into a scratch; kernel 2, one row per label: dlogits = (exp(logit - lse) -
 * onehot(label)) * the row's factor: dloss (its row's for reduction none) over the count for
 * mean, 0 for an ignored row. The softmax comes from the forward's lse, as fused cross-entropy
 * kernels do, where the reference recomputes it in double.
 */
f8_status f8_lower_cross_entropy_grad(const f8_graph *graph, uint32_t group,
					  f8_node_id *members, f8_lowered_group *out,
					  f8_diag *diag) {
	const f8_node *node = &graph->nodes[members[0]];
	const char *reduction = f8_node_attr_string(node, "reduction", "mean");
	bool none = strcmp(reduction, "none") == 0, mean = strcmp(reduction, "mean") == 0;
	int64_t ignore = f8_node_attr_int(node, "ignore_index", -100);
	f8_dim rows_dim, vocab_dim;
	if (!matrix_dims(&graph->values[node->inputs[1]].type.shape, &rows_dim, &vocab_dim))
		return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "kernel %s: the logits' size overflows",
				   graph->groups[group].name);
	uint32_t count = F8_NONE, error, p_rows, p_vocab, labels_param;
	f8_status status = add_error_flag(out, diag);
	if (!status && mean)
		status = f8_lower_add_scratch(out, F8_DTYPE_F32, f8_dim_const(1), &count, diag);
	f8_lower lw;
	f8_kir_id r, c, rows, vocab, label, counts, sum;
	if (!status && mean) { // kernel 1: the count of rows that count
		uint32_t count_out;
		if ((status = begin_kernel(&lw, graph, group, members, "count", diag)))
			return status;
		status = f8_lower_add_buffer(&lw, node->inputs[2], F8_KERNEL_PARAM_IN);
		labels_param = 0;
		if (!status)
			status = f8_lower_add_scratch_param(&lw, out, count, F8_KERNEL_PARAM_OUT, &count_out);
		if (!status)
			status = f8_lower_add_scratch_param(&lw, out, out->error_scratch,
						   F8_KERNEL_PARAM_ACCUMULATE, &error);
		if (!status)
			status = f8_lower_add_size(&lw, rows_dim, &p_rows);
		if (!status)
			status = f8_lower_add_size(&lw, vocab_dim, &p_vocab);
		if (!status) {
			rows = f8_kir_size(lw.kernel, p_rows);
			vocab = f8_kir_size(lw.kernel, p_vocab);
			status = begin_single(&lw, &r);
		}
		if (!status && !(status = begin_sum(&lw, rows, 1, F8_KIR_TYPE_F32, &c, &sum)) &&
		    !(status = label_of_row(&lw, labels_param, error, c, vocab, ignore, &label,
					    &counts))) {
			f8_kir_id one = EMIT(&lw, TO_F32, counts, NONE, NONE);
			status = f8_kir_end_loop(lw.kernel, &one, 1, diag);
		}
		if (!status)
			status = f8_kir_store(lw.kernel, count_out, i64(&lw, 0), sum, diag);
		if (!status)
			status = f8_kir_end_loop(lw.kernel, NULL, 0, diag);
		if ((status = f8_lower_end(&lw, status, out)))
			return status;
	}
	if (status)
		return status;
	if ((status = begin_kernel(&lw, graph, group, members, "rows", diag)))
		return status;
	// Parameters: dloss, logits, labels, lse in, dlogits out, the count, the flag, sizes.
	uint32_t dloss = 0, logits = 1, lse = 3, dlogits, count_in = F8_NONE;
	labels_param = 2;
	for (uint32_t i = 0; !status && i < 4; i++)
		status = f8_lower_add_buffer(&lw, node->inputs[i], F8_KERNEL_PARAM_IN);
	if (!status)
		status = f8_lower_bind_output(&lw, node->outputs[0], F8_KERNEL_PARAM_OUT, &dlogits);
	if (!status && mean)
		status = f8_lower_add_scratch_param(&lw, out, count, F8_KERNEL_PARAM_IN, &count_in);
	if (!status)
		status = f8_lower_add_scratch_param(&lw, out, out->error_scratch, F8_KERNEL_PARAM_ACCUMULATE,
					   &error);
	if (!status)
		status = f8_lower_add_size(&lw, rows_dim, &p_rows);
	if (!status)
		status = f8_lower_add_size(&lw, vocab_dim, &p_vocab);
	if (!status && dlogits == F8_NONE)
		status = f8_lower_fail(&lw, members[0], "its gradient is read by nothing");
	f8_kir_id factor = NONE;
	if (!status) {
		lw.kernel->grid_sizes[0] = p_rows;
		lw.kernel->n_grid_sizes = 1;
		rows = f8_kir_size(lw.kernel, p_rows);
		vocab = f8_kir_size(lw.kernel, p_vocab);
		if (!none)
			factor = f8_kir_load(lw.kernel, dloss, i64(&lw, 0));
		if (mean) {
			f8_kir_id n = f8_kir_load(lw.kernel, count_in, i64(&lw, 0));
			factor = EMIT(&lw, DIV, factor, EMIT(&lw, MAX, n, f8_lower_constant(&lw, 1), NONE), NONE);
		}
		status = f8_kir_begin_grid_loop(lw.kernel, rows, &r, diag);
	}
	if (!status)
		status = label_of_row(&lw, labels_param, error, r, vocab, ignore, &label, &counts);
	if (!status) {
		f8_kir_id row_factor = none ? f8_kir_load(lw.kernel, dloss, r) : factor;
		row_factor = EMIT(&lw, SELECT, counts, row_factor, f8_lower_constant(&lw, 0));
		f8_kir_id row_lse = f8_kir_load(lw.kernel, lse, r);
		if (!(status = f8_kir_begin_block_loop(lw.kernel, vocab, &c, diag))) {
			f8_kir_id p = EMIT(&lw, EXP, EMIT(&lw, SUB, load_at(&lw, logits, r, vocab, c),
							  row_lse, NONE), NONE, NONE);
			f8_kir_id onehot = EMIT(&lw, SELECT, EMIT(&lw, EQ, c, label, NONE),
						f8_lower_constant(&lw, 1), f8_lower_constant(&lw, 0));
			f8_kir_id g = EMIT(&lw, MUL, EMIT(&lw, SUB, p, onehot, NONE), row_factor, NONE);
			g = f8_lower_round_to(&lw, graph->values[node->outputs[0]].type.dtype, g);
			f8_kir_id at = EMIT(&lw, ADD, EMIT(&lw, MUL, r, vocab, NONE), c, NONE);
			status = f8_kir_store(lw.kernel, dlogits, at, g, diag);
			if (!status)
				status = f8_kir_end_loop(lw.kernel, NULL, 0, diag);
		}
	}
	if (!status)
		status = f8_kir_end_loop(lw.kernel, NULL, 0, diag);
	return f8_lower_end(&lw, status, out);
}

/*
 * ScalingUpdate(scale [n], amax_history [len, n], nonfinite, amax_0 .. amax_n-1) -> their next
 * values (runtime/cpu/kernels_fp8.c has the semantics). Kernel 1 gathers the n amaxes (each
 * input a scalar, or a grouped cast's f32[k]) into a scratch [n] and keeps the non-finite count; kernel 2 copies the
 * history into a scratch; kernel 3 takes one row per slot: a block loop over the saved history
 * rolls column i down one row with amax_i on top (a non-finite amax_i keeps the column and
 * counts), and takes the column's max; the scale follows f8_scale_from_amax. The next values are
 * the state's own storage in a slab plan (passes/schedule.h: an update is written in place), so
 * kernel 3 reads the history and the count from the copies: rolling in place would read rows
 * its other threads have already moved, and the count's storage is zeroed before the launch
 * (it is an ACCUMULATE argument).
 */
f8_status f8_lower_scaling_update(const f8_graph *graph, uint32_t group, f8_node_id *members,
				      f8_lowered_group *out, f8_diag *diag) {
	const f8_node *node = &graph->nodes[members[0]];
	const f8_shape *history_shape = &graph->values[node->inputs[1]].type.shape;
	f8_dim slots_dim = history_shape->dims[1], length_dim = history_shape->dims[0];
	uint32_t n_amax = node->n_inputs - 3, amaxes, saved_history, saved_count;
	f8_dim cells;
	if (!f8_dim_mul(slots_dim, length_dim, &cells))
		return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "the amax history's size overflows");
	f8_status status = f8_lower_add_scratch(out, F8_DTYPE_F32, slots_dim, &amaxes, diag);
	if (!status)
		status = f8_lower_add_scratch(out, F8_DTYPE_F32, cells, &saved_history, diag);
	if (!status)
		status = f8_lower_add_scratch(out, F8_DTYPE_I64, f8_dim_const(1), &saved_count, diag);
	f8_lower lw;
	if (status || (status = begin_kernel(&lw, graph, group, members, "gather", diag)))
		return status;
	uint32_t gathered, count_copy, p_slots, p_length;
	for (uint32_t i = 0; !status && i < n_amax; i++)
		status = f8_lower_add_buffer(&lw, node->inputs[3 + i], F8_KERNEL_PARAM_IN);
	uint32_t nonfinite = n_amax;
	if (!status)
		status = f8_lower_add_buffer(&lw, node->inputs[2], F8_KERNEL_PARAM_IN);
	if (!status)
		status = f8_lower_add_scratch_param(&lw, out, amaxes, F8_KERNEL_PARAM_OUT, &gathered);
	if (!status)
		status = f8_lower_add_scratch_param(&lw, out, saved_count, F8_KERNEL_PARAM_OUT,
						    &count_copy);
	f8_kir_id r, c;
	if (!status)
		status = begin_single(&lw, &r);
	// An amax input is one slot, or k in a row (a grouped cast's f32[k]).
	for (uint32_t i = 0, slot = 0; !status && i < n_amax; i++) {
		const f8_shape *shape = &graph->values[node->inputs[3 + i]].type.shape;
		int64_t k = shape->rank == 1 ? f8_dim_value(shape->dims[0]) : 1;
		for (int64_t j = 0; !status && j < k; j++, slot++)
			status = f8_kir_store(lw.kernel, gathered, i64(&lw, slot),
					      f8_kir_load(lw.kernel, i, i64(&lw, j)), diag);
	}
	if (!status)
		status = f8_kir_store(lw.kernel, count_copy, i64(&lw, 0),
				      f8_kir_load(lw.kernel, nonfinite, i64(&lw, 0)), diag);
	if (!status)
		status = f8_kir_end_loop(lw.kernel, NULL, 0, diag);
	if ((status = f8_lower_end(&lw, status, out)))
		return status;
	if ((status = begin_kernel(&lw, graph, group, members, "save", diag)))
		return status;
	// The history, column by column as kernel 3 reads it, into its scratch copy.
	uint32_t history_in = 0, history_copy;
	status = f8_lower_add_buffer(&lw, node->inputs[1], F8_KERNEL_PARAM_IN);
	if (!status)
		status = f8_lower_add_scratch_param(&lw, out, saved_history, F8_KERNEL_PARAM_OUT,
						    &history_copy);
	if (!status)
		status = f8_lower_add_size(&lw, slots_dim, &p_slots);
	if (!status)
		status = f8_lower_add_size(&lw, length_dim, &p_length);
	if (!status) {
		lw.kernel->grid_sizes[0] = p_slots;
		lw.kernel->n_grid_sizes = 1;
		f8_kir_id slots = f8_kir_size(lw.kernel, p_slots);
		f8_kir_id length = f8_kir_size(lw.kernel, p_length);
		status = f8_kir_begin_grid_loop(lw.kernel, slots, &r, diag);
		if (!status)
			status = f8_kir_begin_block_loop(lw.kernel, length, &c, diag);
		if (!status) {
			f8_kir_id at = EMIT(&lw, ADD, EMIT(&lw, MUL, c, slots, NONE), r, NONE);
			status = f8_kir_store(lw.kernel, history_copy, at,
					      f8_kir_load(lw.kernel, history_in, at), diag);
		}
		if (!status)
			status = f8_kir_end_loop(lw.kernel, NULL, 0, diag);
		if (!status)
			status = f8_kir_end_loop(lw.kernel, NULL, 0, diag);
	}
	if ((status = f8_lower_end(&lw, status, out)))
		return status;
	if ((status = begin_kernel(&lw, graph, group, members, "update", diag)))
		return status;
	// Parameters: scale, the saved history and count, the gathered amaxes in; the next values
	// out.
	uint32_t scale = 0, history, amax_in, scale_out, history_out, count_out;
	status = f8_lower_add_buffer(&lw, node->inputs[0], F8_KERNEL_PARAM_IN);
	if (!status)
		status = f8_lower_add_scratch_param(&lw, out, saved_history, F8_KERNEL_PARAM_IN,
						    &history);
	if (!status)
		status = f8_lower_add_scratch_param(&lw, out, saved_count, F8_KERNEL_PARAM_IN,
						    &nonfinite);
	if (!status)
		status = f8_lower_add_scratch_param(&lw, out, amaxes, F8_KERNEL_PARAM_IN, &amax_in);
	if (!status)
		status = f8_lower_bind_output(&lw, node->outputs[0], F8_KERNEL_PARAM_OUT, &scale_out);
	if (!status)
		status = f8_lower_bind_output(&lw, node->outputs[1], F8_KERNEL_PARAM_OUT, &history_out);
	if (!status)
		status = f8_lower_bind_output(&lw, node->outputs[2], F8_KERNEL_PARAM_ACCUMULATE, &count_out);
	if (!status)
		status = f8_lower_add_size(&lw, slots_dim, &p_slots);
	if (!status)
		status = f8_lower_add_size(&lw, length_dim, &p_length);
	if (status)
		return f8_lower_end(&lw, status, out);
	lw.kernel->grid_sizes[0] = p_slots;
	lw.kernel->n_grid_sizes = 1;
	f8_kir_id slots = f8_kir_size(lw.kernel, p_slots), length = f8_kir_size(lw.kernel, p_length);
	f8_kir_id column_max, zero = i64(&lw, 0);
	status = f8_kir_begin_grid_loop(lw.kernel, slots, &r, diag);
	f8_kir_id amax = NONE, finite = NONE;
	if (!status) {
		amax = f8_kir_load(lw.kernel, amax_in, r);
		finite = EMIT(&lw, IS_FINITE, amax, NONE, NONE);
		if (!(status = f8_kir_begin_block_loop(lw.kernel, length, &c, diag)))
			status = f8_kir_add_accumulator(lw.kernel, F8_KIR_COMBINE_MAX, F8_KIR_TYPE_F32,
							&column_max, diag);
	}
	if (!status) {
		f8_kir_id top = EMIT(&lw, EQ, c, zero, NONE);
		f8_kir_id above = EMIT(&lw, SELECT, top, zero, EMIT(&lw, SUB, c, i64(&lw, 1), NONE));
		f8_kir_id rolled = EMIT(&lw, SELECT, top, amax, load_at(&lw, history, above, slots, r));
		f8_kir_id kept = load_at(&lw, history, c, slots, r);
		f8_kir_id v = EMIT(&lw, SELECT, finite, rolled, kept);
		if (history_out != F8_NONE)
			status = f8_kir_store(lw.kernel, history_out,
					      EMIT(&lw, ADD, EMIT(&lw, MUL, c, slots, NONE), r, NONE), v,
					      diag);
		if (!status)
			status = f8_kir_end_loop(lw.kernel, &v, 1, diag);
	}
	if (!status && scale_out != F8_NONE) {
		bool most_recent = strcmp(f8_node_attr_string(node, "algo", "max"), "most_recent") == 0;
		f8_dtype format = f8_node_attr_dtype(node, "format", F8_DTYPE_E4M3);
		int margin = (int)f8_node_attr_int(node, "margin", 0);
		f8_kir_id used = most_recent ? amax : column_max;
		f8_kir_id previous = f8_kir_load(lw.kernel, scale, r);
		f8_kir_id fresh = EMIT(&lw, MUL, EMIT(&lw, DIV, f8_lower_constant(&lw, f8_dtype_get_info(format)->max),
						      used, NONE),
				       f8_lower_constant(&lw, ldexp(1.0, -margin)), NONE);
		fresh = EMIT(&lw, SELECT, EMIT(&lw, IS_FINITE, fresh, NONE, NONE), fresh,
			     f8_lower_constant(&lw, FLT_MAX));
		fresh = EMIT(&lw, SELECT, EMIT(&lw, EQ, fresh, f8_lower_constant(&lw, 0), NONE),
			     f8_lower_constant(&lw, FLT_TRUE_MIN), fresh);
		// f8_scale_from_amax keeps the scale for an amax that is not > 0 or is infinite.
		f8_kir_id usable = EMIT(&lw, AND, EMIT(&lw, LT, f8_lower_constant(&lw, 0), used, NONE),
					EMIT(&lw, IS_FINITE, used, NONE, NONE), NONE);
		f8_kir_id next = EMIT(&lw, SELECT, EMIT(&lw, AND, finite, usable, NONE), fresh, previous);
		status = f8_kir_store(lw.kernel, scale_out, r, next, diag);
	}
	if (!status && count_out != F8_NONE) { // slot 0 carries the count so far
		f8_kir_id skipped = EMIT(&lw, SELECT, finite, zero, i64(&lw, 1));
		f8_kir_id before = EMIT(&lw, SELECT, EMIT(&lw, EQ, r, zero, NONE),
					f8_kir_load(lw.kernel, nonfinite, zero), zero);
		status = f8_kir_atomic(lw.kernel, F8_KIR_COMBINE_ADD, count_out, zero,
				       EMIT(&lw, ADD, skipped, before, NONE), diag);
	}
	if (!status)
		status = f8_kir_end_loop(lw.kernel, NULL, 0, diag);
	return f8_lower_end(&lw, status, out);
}

