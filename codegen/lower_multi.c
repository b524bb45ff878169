/*
 * The groups that lower to several kernels (codegen/lower.h): a cross-entropy's rows, then
 * their mean; a cross-entropy gradient's count of labelled rows, then its rows; a scaling
 * update's amaxes gathered, then one row per slot. The kernels of a group share scratch
 * buffers (f8_lowered_group) and, for labels, an error flag the runtime reports.
 */
#include <float.h>  // FLT_MAX, FLT_TRUE_MIN
#include <math.h>   // ldexp
#include <stdio.h>  // snprintf
#include <string.h> // strcmp

#include "codegen/lower_internal.h" // f8_lower, f8_lower_*
#include "ir/ops.h"                 // f8_node_attr_*

/* A buffer parameter for `value` when it leaves the group, else F8_NONE in *index. */
static f8_status add_output(f8_lower *lw, f8_value_id value, f8_kir_param_kind kind,
			    uint32_t *index) {
	*index = F8_NONE;
	if (value == F8_NONE || !f8_lower_escapes(lw, value))
		return F8_OK;
	f8_status status = f8_lower_add_buffer(lw, value, kind);
	if (!status)
		*index = lw->kernel->n_params - 1;
	return status;
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
 * CrossEntropy(logits, labels) -> loss, lse. Kernel 1, one row per label: the row's max and
 * sum of exp in two block loops, lse = max + log(sum), the row's loss lse - logit[label] (0
 * for an ignored row); reduction none stores it, else it goes with whether the row counts to
 * a scratch [2, rows]. Kernel 2 (mean, sum) adds them up in one block: the mean over the rows
 * that count (0 when none does), as the reference.
 */
f8_status f8_lower_cross_entropy(const f8_graph *graph, uint32_t group, f8_node_id *members,
				     f8_lowered_group *out, f8_diag *diag) {
	const f8_node *node = &graph->nodes[members[0]];
	const char *reduction = f8_node_attr_string(node, "reduction", "mean");
	bool none = strcmp(reduction, "none") == 0, mean = strcmp(reduction, "mean") == 0;
	int64_t ignore = f8_node_attr_int(node, "ignore_index", -100);
	f8_dim rows_dim, vocab_dim, two = f8_dim_const(2), both;
	if (!matrix_dims(&graph->values[node->inputs[0]].type.shape, &rows_dim, &vocab_dim) ||
	    !f8_dim_mul(rows_dim, two, &both))
		return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "kernel %s: the logits' size overflows",
				   graph->groups[group].name);
	uint32_t losses = F8_NONE;
	f8_status status = add_error_flag(out, diag);
	if (!status && !none)
		status = f8_lower_add_scratch(out, F8_DTYPE_F32, both, &losses, diag);
	char name[80];
	snprintf(name, sizeof name, "%s_rows", graph->groups[group].name);
	f8_lower lw;
	if (status || (status = f8_lower_begin(&lw, graph, group, members, 1, name, diag)))
		return status;
	uint32_t logits, labels, lse, loss = F8_NONE, rows_out = F8_NONE, error, p_rows, p_vocab;
	f8_value_id lse_value = node->n_outputs > 1 ? node->outputs[1] : F8_NONE;
	if (!(status = f8_lower_add_buffer(&lw, node->inputs[0], F8_KIR_PARAM_IN)))
		logits = 0, labels = 1, status = f8_lower_add_buffer(&lw, node->inputs[1], F8_KIR_PARAM_IN);
	if (!status)
		status = add_output(&lw, lse_value, F8_KIR_PARAM_OUT, &lse);
	if (!status && none)
		status = add_output(&lw, node->outputs[0], F8_KIR_PARAM_OUT, &loss);
	if (!status && !none)
		status = f8_lower_add_scratch_param(&lw, out, losses, F8_KIR_PARAM_OUT, &rows_out);
	if (!status)
		status = f8_lower_add_scratch_param(&lw, out, out->error_scratch, F8_KIR_PARAM_ACCUMULATE, &error);
	if (!status)
		status = f8_lower_add_size(&lw, rows_dim, &p_rows);
	if (!status)
		status = f8_lower_add_size(&lw, vocab_dim, &p_vocab);
	f8_kir_id rows = NONE, vocab = NONE, r = NONE, c, row_max, row_sum, label, counts;
	if (!status) {
		lw.kernel->grid_sizes[0] = p_rows;
		lw.kernel->n_grid_sizes = 1;
		rows = f8_kir_size(lw.kernel, p_rows);
		vocab = f8_kir_size(lw.kernel, p_vocab);
		status = f8_kir_begin_grid_loop(lw.kernel, rows, &r, diag);
	}
	if (!status)
		status = label_of_row(&lw, labels, error, r, vocab, ignore, &label, &counts);
	if (!status && !(status = f8_kir_begin_block_loop(lw.kernel, vocab, &c, diag)) &&
	    !(status = f8_kir_add_accumulator(lw.kernel, F8_KIR_COMBINE_MAX, F8_KIR_TYPE_F32,
					      &row_max, diag))) {
		f8_kir_id x = load_at(&lw, logits, r, vocab, c);
		status = f8_kir_end_loop(lw.kernel, &x, 1, diag);
	}
	if (!status && !(status = begin_sum(&lw, vocab, 1, F8_KIR_TYPE_F32, &c, &row_sum))) {
		f8_kir_id x = load_at(&lw, logits, r, vocab, c);
		f8_kir_id e = EMIT(&lw, EXP, EMIT(&lw, SUB, x, row_max, NONE), NONE, NONE);
		status = f8_kir_end_loop(lw.kernel, &e, 1, diag);
	}
	if (!status) {
		f8_kir_id lse_v = EMIT(&lw, ADD, row_max, EMIT(&lw, LOG, row_sum, NONE, NONE), NONE);
		if (lse != F8_NONE)
			status = f8_kir_store(lw.kernel, lse, r, lse_v, diag);
		f8_kir_id pick = EMIT(&lw, SELECT, counts, label, i64(&lw, 0));
		f8_kir_id value = EMIT(&lw, SELECT, counts,
				       EMIT(&lw, SUB, lse_v, load_at(&lw, logits, r, vocab, pick), NONE),
				       f8_lower_constant(&lw, 0));
		if (!status && loss != F8_NONE)
			status = f8_kir_store(lw.kernel, loss, r, value, diag);
		if (!status && rows_out != F8_NONE)
			status = f8_kir_store(lw.kernel, rows_out, r, value, diag);
		if (!status && rows_out != F8_NONE)
			status = f8_kir_store(lw.kernel, rows_out, EMIT(&lw, ADD, rows, r, NONE),
					      EMIT(&lw, TO_F32, counts, NONE, NONE), diag);
	}
	if (!status)
		status = f8_kir_end_loop(lw.kernel, NULL, 0, diag);
	if ((status = f8_lower_end(&lw, status, out)) || none)
		return status;
	// Kernel 2: the losses' sum, or their mean over the rows that count.
	snprintf(name, sizeof name, "%s_reduce", graph->groups[group].name);
	if ((status = f8_lower_begin(&lw, graph, group, members, 1, name, diag)))
		return status;
	uint32_t rows_in, loss_out;
	status = f8_lower_add_scratch_param(&lw, out, losses, F8_KIR_PARAM_IN, &rows_in);
	if (!status)
		status = add_output(&lw, node->outputs[0], F8_KIR_PARAM_OUT, &loss_out);
	if (!status)
		status = f8_lower_add_size(&lw, rows_dim, &p_rows);
	f8_kir_id sums[2];
	if (!status) {
		rows = f8_kir_size(lw.kernel, p_rows);
		status = begin_single(&lw, &r);
	}
	if (!status && !(status = begin_sum(&lw, rows, 2, F8_KIR_TYPE_F32, &c, sums))) {
		f8_kir_id values[2] = {f8_kir_load(lw.kernel, rows_in, c),
				       f8_kir_load(lw.kernel, rows_in, EMIT(&lw, ADD, rows, c, NONE))};
		status = f8_kir_end_loop(lw.kernel, values, 2, diag);
	}
	if (!status && loss_out != F8_NONE) {
		f8_kir_id result = sums[0];
		if (mean)
			result = EMIT(&lw, SELECT, EMIT(&lw, LT, f8_lower_constant(&lw, 0), sums[1], NONE),
				      EMIT(&lw, DIV, sums[0], sums[1], NONE), f8_lower_constant(&lw, 0));
		status = f8_kir_store(lw.kernel, loss_out, i64(&lw, 0), result, diag);
	}
	if (!status)
		status = f8_kir_end_loop(lw.kernel, NULL, 0, diag);
	return f8_lower_end(&lw, status, out);
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
	char name[80];
	f8_lower lw;
	f8_kir_id r, c, rows, vocab, label, counts, sum;
	if (!status && mean) { // kernel 1: the count of rows that count
		snprintf(name, sizeof name, "%s_count", graph->groups[group].name);
		uint32_t count_out;
		if ((status = f8_lower_begin(&lw, graph, group, members, 1, name, diag)))
			return status;
		status = f8_lower_add_buffer(&lw, node->inputs[2], F8_KIR_PARAM_IN);
		labels_param = 0;
		if (!status)
			status = f8_lower_add_scratch_param(&lw, out, count, F8_KIR_PARAM_OUT, &count_out);
		if (!status)
			status = f8_lower_add_scratch_param(&lw, out, out->error_scratch,
						   F8_KIR_PARAM_ACCUMULATE, &error);
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
	snprintf(name, sizeof name, "%s_rows", graph->groups[group].name);
	if ((status = f8_lower_begin(&lw, graph, group, members, 1, name, diag)))
		return status;
	// Parameters: dloss, logits, labels, lse in, dlogits out, the count, the flag, sizes.
	uint32_t dloss = 0, logits = 1, lse = 3, dlogits, count_in = F8_NONE;
	labels_param = 2;
	for (uint32_t i = 0; !status && i < 4; i++)
		status = f8_lower_add_buffer(&lw, node->inputs[i], F8_KIR_PARAM_IN);
	if (!status)
		status = add_output(&lw, node->outputs[0], F8_KIR_PARAM_OUT, &dlogits);
	if (!status && mean)
		status = f8_lower_add_scratch_param(&lw, out, count, F8_KIR_PARAM_IN, &count_in);
	if (!status)
		status = f8_lower_add_scratch_param(&lw, out, out->error_scratch, F8_KIR_PARAM_ACCUMULATE,
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
 * its own scalar) into a scratch [n]; kernel 2 takes one row per slot: a block loop over the
 * history rolls column i down one row with amax_i on top (a non-finite amax_i keeps the column
 * and counts), and takes the column's max; the scale follows f8_scale_from_amax.
 */
f8_status f8_lower_scaling_update(const f8_graph *graph, uint32_t group, f8_node_id *members,
				      f8_lowered_group *out, f8_diag *diag) {
	const f8_node *node = &graph->nodes[members[0]];
	const f8_shape *history_shape = &graph->values[node->inputs[1]].type.shape;
	f8_dim slots_dim = history_shape->dims[1], length_dim = history_shape->dims[0];
	uint32_t n_amax = node->n_inputs - 3, amaxes;
	f8_status status = f8_lower_add_scratch(out, F8_DTYPE_F32, slots_dim, &amaxes, diag);
	char name[80];
	snprintf(name, sizeof name, "%s_gather", graph->groups[group].name);
	f8_lower lw;
	if (status || (status = f8_lower_begin(&lw, graph, group, members, 1, name, diag)))
		return status;
	uint32_t gathered, p_slots, p_length;
	for (uint32_t i = 0; !status && i < n_amax; i++)
		status = f8_lower_add_buffer(&lw, node->inputs[3 + i], F8_KIR_PARAM_IN);
	if (!status)
		status = f8_lower_add_scratch_param(&lw, out, amaxes, F8_KIR_PARAM_OUT, &gathered);
	f8_kir_id r, c;
	if (!status)
		status = begin_single(&lw, &r);
	for (uint32_t i = 0; !status && i < n_amax; i++)
		status = f8_kir_store(lw.kernel, gathered, i64(&lw, i),
				      f8_kir_load(lw.kernel, i, i64(&lw, 0)), diag);
	if (!status)
		status = f8_kir_end_loop(lw.kernel, NULL, 0, diag);
	if ((status = f8_lower_end(&lw, status, out)))
		return status;
	snprintf(name, sizeof name, "%s_update", graph->groups[group].name);
	if ((status = f8_lower_begin(&lw, graph, group, members, 1, name, diag)))
		return status;
	// Parameters: scale, history, nonfinite, the gathered amaxes in; their next values out.
	uint32_t scale = 0, history = 1, nonfinite = 2, amax_in, scale_out, history_out, count_out;
	for (uint32_t i = 0; !status && i < 3; i++)
		status = f8_lower_add_buffer(&lw, node->inputs[i], F8_KIR_PARAM_IN);
	if (!status)
		status = f8_lower_add_scratch_param(&lw, out, amaxes, F8_KIR_PARAM_IN, &amax_in);
	if (!status)
		status = add_output(&lw, node->outputs[0], F8_KIR_PARAM_OUT, &scale_out);
	if (!status)
		status = add_output(&lw, node->outputs[1], F8_KIR_PARAM_OUT, &history_out);
	if (!status)
		status = add_output(&lw, node->outputs[2], F8_KIR_PARAM_ACCUMULATE, &count_out);
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

