/*
 * The vocabulary-parallel cross-entropy (codegen/lower.h): the four ops the training pass makes
 * around the all-reduces of the rows' statistics when the logits are split over tp by
 * vocabulary (Megatron-LM's vocab_parallel_cross_entropy; runtime/cpu/kernels_nn.c and
 * kernels_grad_nn.c hold their semantics), each a kernel of the cross_entropy family of its own:
 *
 *   CrossEntropyShard(logits [rows, shard], labels, max, start) -> sum_exp, target: a grid
 *     iteration a row, sum_exp the block loop's sum of exp(logit - max) over this rank's
 *     columns (max is every rank's row maximum), target the label's logit where the shard
 *     [start, start + shard) holds the label (a masked load), else 0; a label neither
 *     ignore_index nor inside the whole vocabulary (attribute vocab) is a data error;
 *   CrossEntropyMerge(sum_exp, target, max, labels) -> loss[, lse]: one grid iteration, a block
 *     loop over the rows: lse = max + log(sum_exp), a labelled row's loss lse - target; the
 *     losses stored (reduction none), or summed with their count for the mean or the sum;
 *   CrossEntropyMergeGrad(dloss, sum_exp, labels) -> dsum_exp, dtarget: one grid iteration, the
 *     labelled rows counted by a first block loop (mean), then per row its weight w (dloss, or
 *     its row's for none, over the count for mean; 0 for an ignored row), w / sum_exp and -w;
 *   CrossEntropyShardGrad(dsum_exp, dtarget, logits, labels, max, start) -> dlogits: a grid
 *     iteration a row, dsum_exp exp(logit - max), plus dtarget at the label's column where the
 *     shard holds it.
 *
 * The statistics are f32 as the reference's outputs (which it computes in double and rounds
 * once): the sums within f32 rounding of its, the picked logits and the zeros exact. The
 * shard's sum of exponentials uses exp.term, as CrossEntropy's (lower_multi.c: on the GPU the
 * hardware's approximation, terms of a sum); the gradient's exp is exp, as CrossEntropyGrad's.
 */
#include <stdio.h>  // snprintf
#include <string.h> // strcmp

#include "codegen/lower_internal.h" // f8_lower, f8_lower_*
#include "ir/ops.h"                 // f8_node_attr_*

static const char label_error[] = "a label outside the vocabulary that is not ignore_index";

static bool is_id(f8_dtype dtype) {
	return dtype == F8_DTYPE_I64 || dtype == F8_DTYPE_I32;
}

static bool is_f32(const f8_graph *graph, f8_value_id value) {
	return value != F8_NONE && graph->values[value].type.dtype == F8_DTYPE_F32;
}

static bool is_float(const f8_graph *graph, f8_value_id value) {
	f8_dtype dtype = value == F8_NONE ? F8_DTYPE_UNDEFINED : graph->values[value].type.dtype;
	return dtype == F8_DTYPE_F32 || dtype == F8_DTYPE_BF16 || dtype == F8_DTYPE_F16;
}

static bool is_integer(const f8_graph *graph, f8_value_id value) {
	return value != F8_NONE && is_id(graph->values[value].type.dtype);
}

bool f8_lower_cross_entropy_shard_lowers(const f8_graph *graph, const f8_node *node) {
	const f8_value_id *in = node->inputs;
	switch (node->op) {
	case F8_OP_CROSS_ENTROPY_SHARD:
		return is_float(graph, in[0]) && is_integer(graph, in[1]) && is_float(graph, in[2]) &&
		       is_integer(graph, in[3]);
	case F8_OP_CROSS_ENTROPY_MERGE:
		return is_f32(graph, in[0]) && is_f32(graph, in[1]) && is_float(graph, in[2]) &&
		       is_integer(graph, in[3]);
	case F8_OP_CROSS_ENTROPY_MERGE_GRAD:
		return is_f32(graph, in[0]) && is_f32(graph, in[1]) && is_integer(graph, in[2]);
	case F8_OP_CROSS_ENTROPY_SHARD_GRAD:
		return is_f32(graph, in[0]) && is_f32(graph, in[1]) && is_float(graph, in[2]) &&
		       is_integer(graph, in[3]) && is_float(graph, in[4]) &&
		       is_integer(graph, in[5]) && is_float(graph, node->outputs[0]);
	default:
		return false;
	}
}

static f8_kir_id i64(f8_lower *lw, int64_t value) {
	return f8_kir_const_i64(lw->kernel, value);
}

/* x[row * cols + col] of buffer `param`, under `mask` (F8_KIR_NONE: none). */
static f8_kir_id load_at(f8_lower *lw, uint32_t param, f8_kir_id row, f8_kir_id cols,
			 f8_kir_id col, f8_kir_id mask) {
	return f8_kir_load_if(lw->kernel, param,
			      EMIT(lw, ADD, EMIT(lw, MUL, row, cols, NONE), col, NONE), mask);
}

/* The (rows, cols) of a (rows, cols) view of `shape`: its leading dims' product, its last. */
static bool matrix_dims(const f8_shape *shape, f8_dim *rows, f8_dim *cols) {
	*rows = f8_dim_const(1);
	*cols = shape->rank ? shape->dims[shape->rank - 1] : f8_dim_const(1);
	for (int d = 0; d + 1 < shape->rank; d++)
		if (!f8_dim_mul(*rows, shape->dims[d], rows))
			return false;
	return true;
}

/* Row r's label's column in this rank's shard (label - start) and whether the shard holds it
 * (a labelled row, 0 <= column < shard). */
static f8_kir_id shard_column(f8_lower *lw, f8_kir_id label, f8_kir_id start, f8_kir_id shard,
			      int64_t ignore, f8_kir_id *held) {
	f8_kir_id at = EMIT(lw, SUB, label, start, NONE);
	f8_kir_id inside = EMIT(lw, AND, EMIT(lw, LE, i64(lw, 0), at, NONE),
				EMIT(lw, LT, at, shard, NONE), NONE);
	*held = EMIT(lw, AND, EMIT(lw, NE, label, i64(lw, ignore), NONE), inside, NONE);
	return at;
}

/* The kernel of a lone node: group `group`'s name. */
static f8_status begin(f8_lower *lw, const f8_graph *graph, uint32_t group, f8_node_id *members,
		       f8_diag *diag) {
	return f8_lower_begin(lw, graph, group, members, 1, graph->groups[group].name, diag);
}

/* A grid loop of one iteration, for a kernel whose block loops take every row. */
static f8_status begin_single(f8_lower *lw, f8_kir_id *var) {
	lw->kernel->n_grid_sizes = 0;
	return f8_kir_begin_grid_loop(lw->kernel, i64(lw, 1), var, lw->diag);
}

/* CrossEntropyShard: a grid iteration a row, its label checked and picked, its exps summed. */
static f8_status lower_shard(const f8_graph *graph, uint32_t group, f8_node_id *members,
			     f8_lowered_group *out, f8_diag *diag) {
	const f8_node *node = &graph->nodes[members[0]];
	int64_t ignore = f8_node_attr_int(node, "ignore_index", -100);
	const f8_attr *whole = f8_node_attr(node, "vocab");
	f8_dim rows_dim, shard_dim;
	if (!matrix_dims(&graph->values[node->inputs[0]].type.shape, &rows_dim, &shard_dim))
		return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "kernel %s: the logits' size overflows",
				   graph->groups[group].name);
	out->error = label_error;
	f8_status status = f8_lower_add_scratch(out, F8_DTYPE_I64, f8_dim_const(1),
						&out->error_scratch, diag);
	f8_lower lw;
	if (status || (status = begin(&lw, graph, group, members, diag)))
		return status;
	uint32_t logits, labels, max, start, sums, target, error, p_rows, p_shard, p_vocab;
	status = f8_lower_bind_input(&lw, node->inputs[0], &logits);
	if (!status)
		status = f8_lower_bind_input(&lw, node->inputs[1], &labels);
	if (!status)
		status = f8_lower_bind_input(&lw, node->inputs[2], &max);
	if (!status)
		status = f8_lower_bind_input(&lw, node->inputs[3], &start);
	if (!status)
		status = f8_lower_bind_output(&lw, node->outputs[0], F8_KERNEL_PARAM_OUT, &sums);
	if (!status)
		status = f8_lower_bind_output(&lw, node->outputs[1], F8_KERNEL_PARAM_OUT, &target);
	if (!status)
		status = f8_lower_add_scratch_param(&lw, out, out->error_scratch,
						    F8_KERNEL_PARAM_ACCUMULATE, &error);
	if (!status)
		status = f8_lower_add_size(&lw, rows_dim, &p_rows);
	if (!status)
		status = f8_lower_add_size(&lw, shard_dim, &p_shard);
	if (!status) // the labels are checked against the whole vocabulary, else the shard's
		status = f8_lower_add_size(&lw, whole ? whole->dim : shard_dim, &p_vocab);
	if (status)
		return f8_lower_end(&lw, status, out);
	lw.kernel->grid_sizes[0] = p_rows;
	lw.kernel->n_grid_sizes = 1;
	f8_kir_id rows = f8_kir_size(lw.kernel, p_rows), shard = f8_kir_size(lw.kernel, p_shard);
	f8_kir_id vocab = f8_kir_size(lw.kernel, p_vocab), first = i64(&lw, 0);
	f8_kir_id shard_start = f8_kir_load(lw.kernel, start, first), r, c, worst, sum;
	status = f8_kir_begin_grid_loop(lw.kernel, rows, &r, diag);
	if (!status)
		status = f8_kir_add_accumulator(lw.kernel, F8_KIR_COMBINE_MAX, F8_KIR_TYPE_I64, &worst,
						diag);
	if (status)
		return f8_lower_end(&lw, status, out);
	f8_kir_id label = f8_kir_load(lw.kernel, labels, r), held;
	f8_kir_id labelled = EMIT(&lw, NE, label, i64(&lw, ignore), NONE);
	f8_kir_id inside = EMIT(&lw, AND, EMIT(&lw, LE, first, label, NONE),
				EMIT(&lw, LT, label, vocab, NONE), NONE);
	f8_kir_id bad = EMIT(&lw, AND, labelled, EMIT(&lw, NOT, inside, NONE, NONE), NONE);
	f8_kir_id flag = EMIT(&lw, SELECT, bad, EMIT(&lw, ADD, r, i64(&lw, 1), NONE), first);
	f8_kir_id at = shard_column(&lw, label, shard_start, shard, ignore, &held);
	// The picked logit first, so that the row's loads overlap its latency; 0 where another
	// rank holds the label (a masked load reads nothing).
	f8_kir_id picked = load_at(&lw, logits, r, shard, at, held);
	f8_kir_id m = f8_kir_load(lw.kernel, max, r);
	status = f8_kir_begin_block_loop(lw.kernel, shard, &c, diag);
	if (!status)
		status = f8_kir_add_accumulator(lw.kernel, F8_KIR_COMBINE_ADD, F8_KIR_TYPE_F32, &sum,
						diag);
	if (!status) {
		f8_kir_id x = load_at(&lw, logits, r, shard, c, NONE);
		f8_kir_id term = EMIT(&lw, EXP_TERM, EMIT(&lw, SUB, x, m, NONE), NONE, NONE);
		status = f8_kir_end_loop(lw.kernel, &term, 1, diag);
	}
	if (!status && sums != F8_NONE)
		status = f8_kir_store(lw.kernel, sums, r, sum, diag);
	if (!status && target != F8_NONE)
		status = f8_kir_store(lw.kernel, target, r, picked, diag);
	if (!status)
		status = f8_kir_end_loop(lw.kernel, &flag, 1, diag);
	if (!status)
		status = f8_kir_atomic(lw.kernel, F8_KIR_COMBINE_MAX, error, first, worst, diag);
	return f8_lower_end(&lw, status, out);
}

/* CrossEntropyMerge: one grid iteration, a block loop over the rows. */
static f8_status lower_merge(const f8_graph *graph, uint32_t group, f8_node_id *members,
			     f8_lowered_group *out, f8_diag *diag) {
	const f8_node *node = &graph->nodes[members[0]];
	int64_t ignore = f8_node_attr_int(node, "ignore_index", -100);
	const char *reduction = f8_node_attr_string(node, "reduction", "mean");
	bool none = strcmp(reduction, "none") == 0, mean = strcmp(reduction, "mean") == 0;
	f8_dim rows_dim;
	if (!f8_shape_numel(&graph->values[node->inputs[3]].type.shape, &rows_dim))
		return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "kernel %s: the labels' count overflows",
				   graph->groups[group].name);
	f8_lower lw;
	f8_status status = begin(&lw, graph, group, members, diag);
	if (status)
		return status;
	uint32_t sums, targets, maxima, labels, loss, lse = F8_NONE, p_rows;
	status = f8_lower_bind_input(&lw, node->inputs[0], &sums);
	if (!status)
		status = f8_lower_bind_input(&lw, node->inputs[1], &targets);
	if (!status)
		status = f8_lower_bind_input(&lw, node->inputs[2], &maxima);
	if (!status)
		status = f8_lower_bind_input(&lw, node->inputs[3], &labels);
	if (!status)
		status = f8_lower_bind_output(&lw, node->outputs[0], F8_KERNEL_PARAM_OUT, &loss);
	if (!status && node->n_outputs > 1)
		status = f8_lower_bind_output(&lw, node->outputs[1], F8_KERNEL_PARAM_OUT, &lse);
	if (!status)
		status = f8_lower_add_size(&lw, rows_dim, &p_rows);
	f8_kir_id g, r, totals[2], zero = NONE;
	if (!status)
		status = begin_single(&lw, &g); // g, always 0, unused
	if (!status) {
		zero = f8_lower_constant(&lw, 0); // in the grid loop: the block loop's and after it
		status = f8_kir_begin_block_loop(lw.kernel, f8_kir_size(lw.kernel, p_rows), &r, diag);
	}
	for (int i = 0; !status && i < 2; i++)
		status = f8_kir_add_accumulator(lw.kernel, F8_KIR_COMBINE_ADD, F8_KIR_TYPE_F32,
						&totals[i], diag);
	if (status)
		return f8_lower_end(&lw, status, out);
	f8_kir_id row_lse = EMIT(&lw, ADD, f8_kir_load(lw.kernel, maxima, r),
				 EMIT(&lw, LOG, f8_kir_load(lw.kernel, sums, r), NONE, NONE), NONE);
	f8_kir_id labelled = EMIT(&lw, NE, f8_kir_load(lw.kernel, labels, r), i64(&lw, ignore), NONE);
	f8_kir_id value = EMIT(&lw, SELECT, labelled,
			       EMIT(&lw, SUB, row_lse, f8_kir_load(lw.kernel, targets, r), NONE), zero);
	if (lse != F8_NONE)
		status = f8_kir_store(lw.kernel, lse, r, row_lse, diag);
	if (!status && none && loss != F8_NONE)
		status = f8_kir_store(lw.kernel, loss, r, value, diag);
	f8_kir_id terms[2] = {value, EMIT(&lw, TO_F32, labelled, NONE, NONE)};
	if (!status)
		status = f8_kir_end_loop(lw.kernel, terms, 2, diag);
	if (!status && !none && loss != F8_NONE) {
		f8_kir_id result = totals[0];
		if (mean) // over the rows that count; 0 when none does
			result = EMIT(&lw, SELECT, EMIT(&lw, LT, zero, totals[1], NONE),
				      EMIT(&lw, DIV, totals[0], totals[1], NONE), zero);
		status = f8_kir_store(lw.kernel, loss, i64(&lw, 0), result, diag);
	}
	if (!status)
		status = f8_kir_end_loop(lw.kernel, NULL, 0, diag);
	return f8_lower_end(&lw, status, out);
}

/* CrossEntropyMergeGrad: one grid iteration: the labelled rows counted (mean), then the rows. */
static f8_status lower_merge_grad(const f8_graph *graph, uint32_t group, f8_node_id *members,
				  f8_lowered_group *out, f8_diag *diag) {
	const f8_node *node = &graph->nodes[members[0]];
	int64_t ignore = f8_node_attr_int(node, "ignore_index", -100);
	const char *reduction = f8_node_attr_string(node, "reduction", "mean");
	bool none = strcmp(reduction, "none") == 0, mean = strcmp(reduction, "mean") == 0;
	f8_dim rows_dim;
	if (!f8_shape_numel(&graph->values[node->inputs[2]].type.shape, &rows_dim))
		return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "kernel %s: the labels' count overflows",
				   graph->groups[group].name);
	// The reference fails on a negative label that is not ignore_index (the forward has
	// checked the rest against the vocabulary): flagged here too.
	out->error = label_error;
	f8_status status = f8_lower_add_scratch(out, F8_DTYPE_I64, f8_dim_const(1),
						&out->error_scratch, diag);
	f8_lower lw;
	if (status || (status = begin(&lw, graph, group, members, diag)))
		return status;
	uint32_t dloss, sums, labels, dsums, dtargets, error, p_rows;
	status = f8_lower_bind_input(&lw, node->inputs[0], &dloss);
	if (!status)
		status = f8_lower_bind_input(&lw, node->inputs[1], &sums);
	if (!status)
		status = f8_lower_bind_input(&lw, node->inputs[2], &labels);
	if (!status)
		status = f8_lower_bind_output(&lw, node->outputs[0], F8_KERNEL_PARAM_OUT, &dsums);
	if (!status)
		status = f8_lower_bind_output(&lw, node->outputs[1], F8_KERNEL_PARAM_OUT, &dtargets);
	if (!status)
		status = f8_lower_add_scratch_param(&lw, out, out->error_scratch,
						    F8_KERNEL_PARAM_ACCUMULATE, &error);
	if (!status)
		status = f8_lower_add_size(&lw, rows_dim, &p_rows);
	f8_kir_id g, r, counted = NONE, rows = NONE;
	if (!status) {
		rows = f8_kir_size(lw.kernel, p_rows);
		status = begin_single(&lw, &g); // g, always 0, unused
	}
	if (!status && mean) {
		if (!(status = f8_kir_begin_block_loop(lw.kernel, rows, &r, diag)))
			status = f8_kir_add_accumulator(lw.kernel, F8_KIR_COMBINE_ADD, F8_KIR_TYPE_F32,
							&counted, diag);
		if (!status) {
			f8_kir_id label = f8_kir_load(lw.kernel, labels, r);
			f8_kir_id one = EMIT(&lw, TO_F32, EMIT(&lw, NE, label, i64(&lw, ignore), NONE),
					     NONE, NONE);
			status = f8_kir_end_loop(lw.kernel, &one, 1, diag);
		}
	}
	if (!status)
		status = f8_kir_begin_block_loop(lw.kernel, rows, &r, diag);
	if (status)
		return f8_lower_end(&lw, status, out);
	f8_kir_id zero = f8_lower_constant(&lw, 0), label = f8_kir_load(lw.kernel, labels, r);
	f8_kir_id labelled = EMIT(&lw, NE, label, i64(&lw, ignore), NONE);
	f8_kir_id bad = EMIT(&lw, AND, labelled, EMIT(&lw, LT, label, i64(&lw, 0), NONE), NONE);
	f8_kir_id factor = f8_kir_load(lw.kernel, dloss, none ? r : i64(&lw, 0));
	if (mean) // over the counted rows, or 1 when none counts
		factor = EMIT(&lw, DIV, factor, EMIT(&lw, MAX, counted, f8_lower_constant(&lw, 1), NONE),
			      NONE);
	f8_kir_id weight = EMIT(&lw, SELECT, labelled, factor, zero);
	if (dsums != F8_NONE)
		status = f8_kir_store(lw.kernel, dsums, r,
				      EMIT(&lw, DIV, weight, f8_kir_load(lw.kernel, sums, r), NONE), diag);
	if (!status && dtargets != F8_NONE)
		status = f8_kir_store(lw.kernel, dtargets, r, EMIT(&lw, NEG, weight, NONE, NONE), diag);
	if (!status) // only a bad row's thread: an atomic per bad row, none otherwise
		status = f8_kir_atomic_if(lw.kernel, F8_KIR_COMBINE_MAX, error, i64(&lw, 0),
					  EMIT(&lw, ADD, r, i64(&lw, 1), NONE), bad, diag);
	if (!status)
		status = f8_kir_end_loop(lw.kernel, NULL, 0, diag);
	if (!status)
		status = f8_kir_end_loop(lw.kernel, NULL, 0, diag);
	return f8_lower_end(&lw, status, out);
}

/* CrossEntropyShardGrad: a grid iteration a row, a block loop over its columns. */
static f8_status lower_shard_grad(const f8_graph *graph, uint32_t group, f8_node_id *members,
				  f8_lowered_group *out, f8_diag *diag) {
	const f8_node *node = &graph->nodes[members[0]];
	int64_t ignore = f8_node_attr_int(node, "ignore_index", -100);
	f8_dim rows_dim, shard_dim;
	if (!matrix_dims(&graph->values[node->inputs[2]].type.shape, &rows_dim, &shard_dim))
		return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "kernel %s: the logits' size overflows",
				   graph->groups[group].name);
	f8_lower lw;
	f8_status status = begin(&lw, graph, group, members, diag);
	if (status)
		return status;
	uint32_t in[6], dlogits, p_rows, p_shard;
	for (uint32_t i = 0; !status && i < 6; i++)
		status = f8_lower_bind_input(&lw, node->inputs[i], &in[i]);
	if (!status)
		status = f8_lower_bind_output(&lw, node->outputs[0], F8_KERNEL_PARAM_OUT, &dlogits);
	if (!status)
		status = f8_lower_add_size(&lw, rows_dim, &p_rows);
	if (!status)
		status = f8_lower_add_size(&lw, shard_dim, &p_shard);
	if (!status && dlogits == F8_NONE)
		status = f8_lower_fail(&lw, members[0], "its gradient is read by nothing");
	if (status)
		return f8_lower_end(&lw, status, out);
	enum { DSUM, DTARGET, LOGITS, LABELS, MAX, START };
	lw.kernel->grid_sizes[0] = p_rows;
	lw.kernel->n_grid_sizes = 1;
	f8_kir_id rows = f8_kir_size(lw.kernel, p_rows), shard = f8_kir_size(lw.kernel, p_shard);
	f8_kir_id shard_start = f8_kir_load(lw.kernel, in[START], i64(&lw, 0)), r, c, held;
	status = f8_kir_begin_grid_loop(lw.kernel, rows, &r, diag);
	if (status)
		return f8_lower_end(&lw, status, out);
	f8_kir_id at = shard_column(&lw, f8_kir_load(lw.kernel, in[LABELS], r), shard_start, shard,
				    ignore, &held);
	f8_kir_id dsum = f8_kir_load(lw.kernel, in[DSUM], r), m = f8_kir_load(lw.kernel, in[MAX], r);
	f8_kir_id dtarget = f8_kir_load(lw.kernel, in[DTARGET], r);
	if (!(status = f8_kir_begin_block_loop(lw.kernel, shard, &c, diag))) {
		f8_kir_id x = load_at(&lw, in[LOGITS], r, shard, c, NONE);
		f8_kir_id g = EMIT(&lw, MUL, dsum, EMIT(&lw, EXP, EMIT(&lw, SUB, x, m, NONE), NONE, NONE),
				   NONE);
		// dtarget added at the label's column only: elsewhere g as it is (a -0 stays -0).
		f8_kir_id target = EMIT(&lw, AND, held, EMIT(&lw, EQ, c, at, NONE), NONE);
		g = EMIT(&lw, SELECT, target, EMIT(&lw, ADD, g, dtarget, NONE), g);
		status = f8_kir_store(lw.kernel, dlogits,
				      EMIT(&lw, ADD, EMIT(&lw, MUL, r, shard, NONE), c, NONE), g, diag);
		if (!status)
			status = f8_kir_end_loop(lw.kernel, NULL, 0, diag);
	}
	if (!status)
		status = f8_kir_end_loop(lw.kernel, NULL, 0, diag);
	return f8_lower_end(&lw, status, out);
}

f8_status f8_lower_cross_entropy_shard(const f8_graph *graph, uint32_t group, f8_node_id *members,
				       uint32_t n_members, f8_lowered_group *out, f8_diag *diag) {
	(void)n_members; // a lone node
	switch (graph->nodes[members[0]].op) {
	case F8_OP_CROSS_ENTROPY_SHARD: return lower_shard(graph, group, members, out, diag);
	case F8_OP_CROSS_ENTROPY_MERGE: return lower_merge(graph, group, members, out, diag);
	case F8_OP_CROSS_ENTROPY_MERGE_GRAD: return lower_merge_grad(graph, group, members, out, diag);
	default: return lower_shard_grad(graph, group, members, out, diag);
	}
}
