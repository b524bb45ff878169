/*
 * The embedding and embedding_grad families (codegen/lower.h): Embedding, the rows of the table
 * gathered by token id, and EmbeddingGrad, the rows of dy scattered into dw by id with atomic
 * adds (runtime/cpu/kernels_nn.c, kernels_grad_nn.c).
 *
 * A grid iteration is one position of the ids (a row of y or dy), a block loop its hidden
 * columns: the reads and writes of a row are coalesced, the id is read once per row. An id
 * outside [0, vocab) is a data error, flagged as cross-entropy's labels are: the grid loop's
 * max of 1 + the position goes into the group's error scratch (one atomic per block, not per
 * row), and the runtime fails naming the position; the kernel reads row 0 in its place so
 * that it never reads outside the table.
 *
 * A vocabulary shard's (tensor parallelism's: passes/tensor_parallel_vocab.c) has a third
 * input, start, an i64[1] holding the first vocabulary row of this rank's table (read by the
 * kernel: it is the LocalShard of the ranks' starts). Embedding then checks the id against the
 * whole vocabulary (attribute vocab) and gives the row id - start where the shard holds it,
 * zeros elsewhere (a masked load: no read outside the table); EmbeddingGrad adds dy's row into
 * dw's row id - start where the shard holds it and leaves the other ids to their ranks (no data
 * error there, as the reference's: the forward checked the ids).
 *
 * EmbeddingGrad's dw is an ACCUMULATE buffer the launcher zeroes (rows no id names stay 0, as
 * the reference's). Its sums are f32 atomics in whatever order the threads come, where the
 * reference sums in double in the order of the positions: within f32 rounding of it, and not
 * bit-reproducible from run to run on the GPU. A dw of another dtype (bf16) is summed in an
 * f32 scratch, then rounded into dw by a second kernel.
 */
#include "codegen/lower_internal.h" // f8_lower, f8_lower_*
#include "ir/ops.h"                 // f8_node_attr

static const char id_error[] = "an id outside the embedding table's vocabulary; the row is its "
			       "position among the ids";

static bool is_float(f8_dtype dtype) {
	return dtype == F8_DTYPE_F32 || dtype == F8_DTYPE_BF16 || dtype == F8_DTYPE_F16;
}

static bool is_id(f8_dtype dtype) {
	return dtype == F8_DTYPE_I64 || dtype == F8_DTYPE_I32;
}

/* Embedding(ids, w[, start]): integer ids, a float table. EmbeddingGrad(dy, ids[, start]):
 * float dy. A start is one integer (a vocabulary shard's first row). */
bool f8_lower_embedding_lowers(const f8_graph *graph, const f8_node *node) {
	const f8_value *v = graph->values;
	bool grad = node->op == F8_OP_EMBEDDING_GRAD;
	f8_value_id ids = node->inputs[grad ? 1 : 0], rows = node->inputs[grad ? 0 : 1];
	const f8_shape *table = &v[grad ? node->outputs[0] : node->inputs[1]].type.shape;
	bool start = node->n_inputs == 3 && node->inputs[2] != F8_NONE;
	if (start && (!is_id(v[node->inputs[2]].type.dtype) ||
		      (!grad && !f8_node_attr(node, "vocab"))))
		return false;
	return (node->n_inputs == 2 || start) && is_id(v[ids].type.dtype) &&
	       is_float(v[rows].type.dtype) && is_float(v[node->outputs[0]].type.dtype) &&
	       table->rank == 2;
}

typedef struct embedding {
	f8_lower lw;
	const f8_node *node;
	bool grad;
	bool checks; // ids are checked (all but a shard's gradient)
	uint32_t ids, rows, made, error; // ids, w (or dy) in; y (or dw) out; the error flag
	uint32_t start;                  // a shard's first row (an i64[1]), else F8_NONE
	f8_kir_id positions, hidden, vocab; // vocab: the table's rows
	f8_kir_id whole;                 // the vocabulary the ids are checked against
} embedding;

/* Whether 0 <= i < n. */
static f8_kir_id below(f8_lower *lw, f8_kir_id i, f8_kir_id n) {
	f8_kir_id zero = f8_kir_const_i64(lw->kernel, 0);
	return EMIT(lw, AND, EMIT(lw, LE, zero, i, NONE), EMIT(lw, LT, i, n, NONE), NONE);
}

/* Position p's row of the table (row 0 for an id outside it), into *held whether the table
 * holds it (a shard's: whether id - start is one of its rows; else true), and, into the grid
 * accumulator's value *flag, 1 + p when the id is outside the vocabulary (0 when ids are not
 * checked). */
static f8_kir_id row_of(embedding *e, f8_kir_id p, f8_kir_id start, f8_kir_id *held,
			f8_kir_id *flag) {
	f8_lower *lw = &e->lw;
	f8_kir_id zero = f8_kir_const_i64(lw->kernel, 0);
	f8_kir_id id = f8_kir_load(lw->kernel, e->ids, p);
	f8_kir_id inside = below(lw, id, e->whole);
	*flag = e->checks ? EMIT(lw, SELECT, inside, zero,
				 EMIT(lw, ADD, p, f8_kir_const_i64(lw->kernel, 1), NONE))
			  : zero;
	if (e->start == F8_NONE) {
		*held = f8_kir_const_bool(lw->kernel, true);
		return EMIT(lw, SELECT, inside, id, zero);
	}
	f8_kir_id row = EMIT(lw, SUB, id, start, NONE);
	*held = below(lw, row, e->vocab);
	return EMIT(lw, SELECT, *held, row, zero);
}

/* The grid loop over the positions: y's row gathered, or dy's row added into dw. */
static f8_status positions_loop(embedding *e) {
	f8_lower *lw = &e->lw;
	f8_kir_id p, c, worst = NONE, flag;
	f8_status status = f8_kir_begin_grid_loop(lw->kernel, e->positions, &p, lw->diag);
	if (!status && e->checks) // the worst position, for the error flag
		status = f8_kir_add_accumulator(lw->kernel, F8_KIR_COMBINE_MAX, F8_KIR_TYPE_I64, &worst,
						lw->diag);
	if (status)
		return status;
	f8_kir_id start = e->start == F8_NONE
				  ? NONE : f8_kir_load(lw->kernel, e->start, f8_kir_const_i64(lw->kernel, 0));
	f8_kir_id held, row = row_of(e, p, start, &held, &flag);
	// Without a start every id's row is held: no mask.
	f8_kir_id mask = e->start == F8_NONE ? NONE : held;
	if (!(status = f8_kir_begin_block_loop(lw->kernel, e->hidden, &c, lw->diag))) {
		f8_kir_id at_table = EMIT(lw, ADD, EMIT(lw, MUL, row, e->hidden, NONE), c, NONE);
		f8_kir_id at_position = EMIT(lw, ADD, EMIT(lw, MUL, p, e->hidden, NONE), c, NONE);
		if (!e->grad && e->made != F8_NONE) // another rank's id: a masked load's 0
			status = f8_kir_store(lw->kernel, e->made, at_position,
					      f8_kir_load_if(lw->kernel, e->rows, at_table, mask),
					      lw->diag);
		if (e->grad && e->made != F8_NONE)
			status = f8_kir_atomic_if(lw->kernel, F8_KIR_COMBINE_ADD, e->made, at_table,
						  f8_kir_load(lw->kernel, e->rows, at_position), mask,
						  lw->diag);
		if (!status)
			status = f8_kir_end_loop(lw->kernel, NULL, 0, lw->diag);
	}
	if (!status)
		status = f8_kir_end_loop(lw->kernel, &flag, e->checks ? 1 : 0, lw->diag);
	if (!status && e->checks)
		status = f8_kir_atomic(lw->kernel, F8_KIR_COMBINE_MAX, e->error,
				       f8_kir_const_i64(lw->kernel, 0), worst, lw->diag);
	return status;
}

/* Binds the parameters; a dw of another dtype than f32 into scratch *sums (else F8_NONE). */
static f8_status bind(embedding *e, f8_lowered_group *out, f8_dim positions, f8_dim hidden,
		      f8_dim vocab, uint32_t *sizes, uint32_t *sums) {
	f8_lower *lw = &e->lw;
	const f8_node *node = e->node;
	f8_value_id made = node->outputs[0];
	f8_dim count;
	*sums = F8_NONE;
	f8_status status = f8_lower_bind_input(lw, node->inputs[e->grad ? 1 : 0], &e->ids);
	if (!status)
		status = f8_lower_bind_input(lw, node->inputs[e->grad ? 0 : 1], &e->rows);
	if (!status && e->grad && f8_lower_escapes(lw, made) &&
	    lw->graph->values[made].type.dtype != F8_DTYPE_F32) {
		if (!f8_dim_mul(vocab, hidden, &count))
			return f8_lower_fail(lw, lw->members[0], "dw's size overflows");
		status = f8_lower_add_scratch(out, F8_DTYPE_F32, count, sums, lw->diag);
		if (!status)
			status = f8_lower_add_scratch_param(lw, out, *sums, F8_KERNEL_PARAM_ACCUMULATE,
							    &e->made);
	} else if (!status) {
		status = f8_lower_bind_output(lw, made, e->grad ? F8_KERNEL_PARAM_ACCUMULATE
							: F8_KERNEL_PARAM_OUT, &e->made);
	}
	if (!status && node->n_inputs > 2)
		status = f8_lower_bind_input(lw, node->inputs[2], &e->start);
	if (!status && e->checks)
		status = f8_lower_add_scratch_param(lw, out, out->error_scratch,
						    F8_KERNEL_PARAM_ACCUMULATE, &e->error);
	// The vocabulary the ids are checked against: a shard's whole one, else the table's.
	const f8_attr *whole = e->grad ? NULL : f8_node_attr(node, "vocab");
	const f8_dim dims[4] = {positions, hidden, vocab,
				node->n_inputs > 2 && whole ? whole->dim : vocab};
	for (int i = 0; !status && i < 4; i++)
		status = f8_lower_add_size(lw, dims[i], &sizes[i]);
	return status;
}

f8_status f8_lower_embedding(const f8_graph *graph, uint32_t group, f8_node_id *members,
			     uint32_t n_members, f8_lowered_group *out, f8_diag *diag) {
	embedding e = {.node = &graph->nodes[members[0]], .start = F8_NONE, .error = F8_NONE};
	e.grad = e.node->op == F8_OP_EMBEDDING_GRAD;
	e.checks = !e.grad || e.node->n_inputs < 3;
	f8_lower *lw = &e.lw;
	const f8_shape *ids = &graph->values[e.node->inputs[e.grad ? 1 : 0]].type.shape;
	const f8_shape *table = &graph->values[e.grad ? e.node->outputs[0] : e.node->inputs[1]].type.shape;
	f8_dim positions = f8_dim_const(1);
	f8_status status = F8_OK;
	if (e.checks) {
		out->error = id_error;
		status = f8_lower_add_scratch(out, F8_DTYPE_I64, f8_dim_const(1),
					      &out->error_scratch, diag);
	}
	if (!status)
		status = f8_lower_begin(lw, graph, group, members, n_members,
					graph->groups[group].name, diag);
	if (status)
		return status;
	if (n_members != 1)
		status = f8_lower_fail(lw, members[1], "an %s kernel holds the op alone",
				       f8_op_name(e.node->op));
	for (int d = 0; !status && d < ids->rank; d++)
		if (!f8_dim_mul(positions, ids->dims[d], &positions))
			status = f8_lower_fail(lw, members[0], "the ids' count overflows");
	uint32_t sizes[4], sums = F8_NONE;
	if (!status)
		status = bind(&e, out, positions, table->dims[1], table->dims[0], sizes, &sums);
	if (!status) {
		lw->kernel->grid_sizes[0] = sizes[0];
		lw->kernel->n_grid_sizes = 1;
		e.positions = f8_kir_size(lw->kernel, sizes[0]);
		e.hidden = f8_kir_size(lw->kernel, sizes[1]);
		e.vocab = f8_kir_size(lw->kernel, sizes[2]);
		e.whole = f8_kir_size(lw->kernel, sizes[3]);
		status = positions_loop(&e);
	}
	if ((status = f8_lower_end(lw, status, out)) || sums == F8_NONE)
		return status;
	f8_dim count;
	f8_dim_mul(table->dims[0], table->dims[1], &count); // checked in bind
	return f8_lower_round_sums(graph, group, members, sums, e.node->outputs[0], count, out,
				   diag);
}
