/*
 * The norm_grad family (codegen/lower.h): LayerNormGrad or RMSNormGrad over the last axis, with
 * the casts of dx (the E5M2 copy an FP8 dgrad GEMM reads), in one kernel.
 *
 * Each grid iteration takes a chunk of CHUNK_ROWS rows: block loops over the columns find each
 * row's statistics, and a last one writes dx (and its casts) and stores the chunk's share of
 * dgamma and dbeta, per column, into row `chunk` of an f32 scratch of partials [chunks, cols]
 * (coalesced, each element once). A second kernel adds each column's partials in chunk order
 * and stores dgamma and dbeta (rounded once to their dtype, a bf16 gamma's too): the sums'
 * order is fixed by the shapes, so they are the same bits on every run on the GPU, which f32
 * atomic adds in the blocks' order were not (a --deterministic resume saw AdamW's exp_avg of
 * the norms' weights differ in the last bits). The partials cost rows / CHUNK_ROWS x cols f32
 * written and read again per output, as many accesses as the atomics had, and one launch
 * (lower_internal.h f8_lower_sum_partials). The chunk's rows past the last are the last row
 * again, computed and stored twice with the same values; their share of the sums is masked
 * to 0.
 *
 * Like the reference kernels (runtime/cpu/kernels_grad_nn.c), the statistics are recomputed
 * from x; the forward's f32 mean and rstd inputs are not read (the block loops read x again
 * anyway, and the kernel then needs nothing but dy, x and gamma to agree with the reference).
 * In f32 where the reference computes in double: LayerNorm's mean, then (x - mean)^2, g and
 * g (x - mean) summed in one loop; RMSNorm's x^2 and dy gamma x in one loop.
 */
#include "codegen/lower_internal.h" // f8_lower, f8_lower_cast, f8_lower_*

#include "ir/ops.h" // f8_node_attr_float

/* Rows per grid iteration: a column's sums combine once per chunk, and each thread's loads of
 * the chunk's rows are in flight together. 8 held 255 registers (one block an SM, ncu
 * 2026-12-07: no latency hidden); 4 hold 128, two blocks an SM, for twice the partials
 * (rows / 4 x cols f32, written and read again); 2 hold 80 and three blocks, for twice that
 * again. Measured on an H200 (2026-12-07 18:52, tools/bench_gpu.md), GPT-1.3B's 49 LayerNorm
 * gradients a step: 20.8 ms at 8, 17.9 ms at 4, 23.8 ms at 2. (Before the partials, with f32
 * atomics, 2 had run at half of 8's rate: all rows' atomics onto the same columns.) What would
 * cut the partials is a column's sums kept per block across its grid iterations, which the
 * kernel IR cannot say yet (a shared array's contents do not outlive a grid iteration). */
enum { CHUNK_ROWS = 4 };

typedef struct norm_grad {
	f8_lower lw;
	const f8_node *node;
	bool layer;                            // LayerNormGrad, else RMSNormGrad
	f8_dtype x_dtype, dx_dtype;
	f8_lower_cast casts[F8_LOWER_MAX_AMAX];
	f8_node_id cast_members[F8_LOWER_MAX_AMAX]; // the casts' nodes (their guards passed over)
	uint32_t n_casts;
	uint32_t dy, x, gamma;                 // IN
	uint32_t dx, dgamma, dbeta;            // OUT; dgamma's, dbeta's partials (OUT); F8_NONE
					       // if unread
	uint32_t partials[2];                  // dgamma's, dbeta's scratch [chunks, cols], or F8_NONE
	f8_kir_id rows, cols, n, epsilon;
	f8_kir_id chunk;                       // the grid iteration's chunk
	f8_kir_id row[CHUNK_ROWS];             // the chunk's rows, the last row past the end
	f8_kir_id valid[CHUNK_ROWS];           // whether the chunk's row j is a row
	f8_kir_id mean[CHUNK_ROWS], rstd[CHUNK_ROWS];
	f8_kir_id g_mean[CHUNK_ROWS];          // LayerNorm: mean(dy gamma)
	f8_kir_id dot_mean[CHUNK_ROWS];        // mean(g xhat) (LayerNorm), mean(dn n) (RMSNorm)
} norm_grad;

static bool is_f32_or_bf16(f8_dtype dtype) {
	return dtype == F8_DTYPE_F32 || dtype == F8_DTYPE_BF16;
}

bool f8_lower_norm_grad_lowers(const f8_graph *graph, const f8_node *node) {
	const f8_value *v = graph->values;
	const f8_shape *x = &v[node->inputs[1]].type.shape;
	int axis;
	if (x->rank < 1 || !f8_axis_normalize(f8_node_attr_int(node, "axis", -1), x->rank, false,
					      &axis) || axis != x->rank - 1)
		return false;
	for (uint32_t i = 0; i < 3; i++)
		if (!is_f32_or_bf16(v[node->inputs[i]].type.dtype))
			return false;
	// dx is rounded to bf16 in registers where its casts read it.
	return is_f32_or_bf16(v[node->outputs[0]].type.dtype);
}

/* Parameters: dy, x, gamma and the casts' scales in; dx, dgamma, dbeta and the casts' outputs;
 * the sizes rows and cols. */
static f8_status bind(norm_grad *ng, const f8_lowered_group *out, const f8_dim *rows,
		      const f8_dim *cols, uint32_t *p_rows, uint32_t *p_cols) {
	f8_lower *lw = &ng->lw;
	const f8_node *node = ng->node;
	f8_status status = f8_lower_bind_input(lw, node->inputs[0], &ng->dy);
	if (!status)
		status = f8_lower_bind_input(lw, node->inputs[1], &ng->x);
	if (!status)
		status = f8_lower_bind_input(lw, node->inputs[2], &ng->gamma);
	for (uint32_t c = 0; !status && c < ng->n_casts; c++)
		status = f8_lower_cast_inputs(lw, &ng->casts[c], &lw->graph->nodes[ng->cast_members[c]]);
	if (!status)
		status = f8_lower_bind_output(lw, node->outputs[0], F8_KERNEL_PARAM_OUT, &ng->dx);
	uint32_t *sums[2] = {&ng->dgamma, &ng->dbeta};
	for (uint32_t i = 0; !status && i < 2; i++) {
		*sums[i] = F8_NONE;
		if (ng->partials[i] != F8_NONE)
			status = f8_lower_add_scratch_param(lw, out, ng->partials[i],
							    F8_KERNEL_PARAM_OUT, sums[i]);
	}
	for (uint32_t c = 0; !status && c < ng->n_casts; c++)
		status = f8_lower_cast_outputs(lw, &ng->casts[c]);
	if (!status)
		status = f8_lower_add_size(lw, *rows, p_rows);
	if (!status)
		status = f8_lower_add_size(lw, *cols, p_cols);
	for (uint32_t c = 0; !status && c < ng->n_casts; c++)
		status = f8_lower_cast_slot(lw, &ng->casts[c]);
	return status;
}

static f8_kir_id at(norm_grad *ng, uint32_t param, f8_kir_id row, f8_kir_id col) {
	f8_lower *lw = &ng->lw;
	return f8_kir_load(lw->kernel, param,
			   EMIT(lw, ADD, EMIT(lw, MUL, row, ng->cols, NONE), col, NONE));
}

/* The chunk's rows: chunk * CHUNK_ROWS + j, the last row where that is past it. */
static void chunk_rows(norm_grad *ng, f8_kir_id chunk) {
	f8_lower *lw = &ng->lw;
	f8_kir_id first = EMIT(lw, MUL, chunk, f8_kir_const_i64(lw->kernel, CHUNK_ROWS), NONE);
	f8_kir_id last = EMIT(lw, SUB, ng->rows, f8_kir_const_i64(lw->kernel, 1), NONE);
	for (int j = 0; j < CHUNK_ROWS; j++) {
		f8_kir_id r = EMIT(lw, ADD, first, f8_kir_const_i64(lw->kernel, j), NONE);
		ng->valid[j] = EMIT(lw, LT, r, ng->rows, NONE);
		ng->row[j] = EMIT(lw, MIN, r, last, NONE);
	}
}

/* A block loop over the columns with `per_row` add accumulators per row of the chunk (their
 * results into sums[j * per_row + i]); `body` gives row j's values at column c. */
typedef void (*sum_body)(norm_grad *ng, int j, f8_kir_id c, f8_kir_id *values);

static f8_status row_sums(norm_grad *ng, uint32_t per_row, sum_body body, f8_kir_id *sums) {
	f8_lower *lw = &ng->lw;
	f8_kir_id c, values[4 * CHUNK_ROWS];
	f8_status status = f8_kir_begin_block_loop(lw->kernel, ng->cols, &c, lw->diag);
	for (uint32_t i = 0; !status && i < per_row * CHUNK_ROWS; i++)
		status = f8_kir_add_accumulator(lw->kernel, F8_KIR_COMBINE_ADD, F8_KIR_TYPE_F32,
						&sums[i], lw->diag);
	if (status)
		return status;
	for (int j = 0; j < CHUNK_ROWS; j++)
		body(ng, j, c, &values[j * per_row]);
	return f8_kir_end_loop(lw->kernel, values, per_row * CHUNK_ROWS, lw->diag);
}

/* LayerNorm's first loop: x. */
static void layer_sum_x(norm_grad *ng, int j, f8_kir_id c, f8_kir_id *values) {
	values[0] = at(ng, ng->x, ng->row[j], c);
}

/* LayerNorm's second loop: (x - mean)^2, g = dy gamma, g (x - mean). */
static void layer_sums(norm_grad *ng, int j, f8_kir_id c, f8_kir_id *values) {
	f8_lower *lw = &ng->lw;
	f8_kir_id centred = EMIT(lw, SUB, at(ng, ng->x, ng->row[j], c), ng->mean[j], NONE);
	f8_kir_id g = EMIT(lw, MUL, at(ng, ng->dy, ng->row[j], c),
			   f8_kir_load(lw->kernel, ng->gamma, c), NONE);
	values[0] = EMIT(lw, MUL, centred, centred, NONE);
	values[1] = g;
	values[2] = EMIT(lw, MUL, g, centred, NONE);
}

/* RMSNorm's loop: x^2, dy gamma x. */
static void rms_sums(norm_grad *ng, int j, f8_kir_id c, f8_kir_id *values) {
	f8_lower *lw = &ng->lw;
	f8_kir_id x = at(ng, ng->x, ng->row[j], c);
	f8_kir_id dn = EMIT(lw, MUL, at(ng, ng->dy, ng->row[j], c),
			    f8_kir_load(lw->kernel, ng->gamma, c), NONE);
	values[0] = EMIT(lw, MUL, x, x, NONE);
	values[1] = EMIT(lw, MUL, dn, x, NONE);
}

/* 1 / sqrt(squares / n + epsilon), as the forward. */
static f8_kir_id rstd_of(norm_grad *ng, f8_kir_id squares) {
	f8_lower *lw = &ng->lw;
	f8_kir_id variance = EMIT(lw, DIV, squares, ng->n, NONE);
	return EMIT(lw, DIV, f8_lower_constant(lw, 1),
		    EMIT(lw, SQRT, EMIT(lw, ADD, variance, ng->epsilon, NONE), NONE, NONE), NONE);
}

/* Each row's statistics, in the grid loop's scope. */
static f8_status statistics(norm_grad *ng) {
	f8_lower *lw = &ng->lw;
	f8_kir_id sums[3 * CHUNK_ROWS];
	f8_status status;
	if (!ng->layer) {
		if ((status = row_sums(ng, 2, rms_sums, sums)))
			return status;
		for (int j = 0; j < CHUNK_ROWS; j++) {
			ng->rstd[j] = rstd_of(ng, sums[2 * j]);
			ng->dot_mean[j] = EMIT(lw, DIV, EMIT(lw, MUL, sums[2 * j + 1], ng->rstd[j], NONE),
					       ng->n, NONE);
		}
		return F8_OK;
	}
	if ((status = row_sums(ng, 1, layer_sum_x, sums)))
		return status;
	for (int j = 0; j < CHUNK_ROWS; j++)
		ng->mean[j] = EMIT(lw, DIV, sums[j], ng->n, NONE);
	if ((status = row_sums(ng, 3, layer_sums, sums)))
		return status;
	for (int j = 0; j < CHUNK_ROWS; j++) {
		ng->rstd[j] = rstd_of(ng, sums[3 * j]);
		ng->g_mean[j] = EMIT(lw, DIV, sums[3 * j + 1], ng->n, NONE);
		// mean(g xhat) = rstd sum(g (x - mean)) / n
		ng->dot_mean[j] = EMIT(lw, DIV, EMIT(lw, MUL, sums[3 * j + 2], ng->rstd[j], NONE),
				       ng->n, NONE);
	}
	return F8_OK;
}

/* Row j's dx at column c (rounded to dx's dtype) and its dgamma and dbeta terms. */
static f8_kir_id dx_of(norm_grad *ng, int j, f8_kir_id c, f8_kir_id gamma, f8_kir_id *dgamma,
		       f8_kir_id *dbeta) {
	f8_lower *lw = &ng->lw;
	f8_kir_id x = at(ng, ng->x, ng->row[j], c), dy = at(ng, ng->dy, ng->row[j], c);
	f8_kir_id g = EMIT(lw, MUL, dy, gamma, NONE), dx;
	if (ng->layer) {
		f8_kir_id xhat = EMIT(lw, MUL, EMIT(lw, SUB, x, ng->mean[j], NONE), ng->rstd[j], NONE);
		dx = EMIT(lw, SUB, EMIT(lw, SUB, g, ng->g_mean[j], NONE),
			  EMIT(lw, MUL, xhat, ng->dot_mean[j], NONE), NONE);
		*dgamma = EMIT(lw, MUL, dy, xhat, NONE);
	} else { // the forward rounds x rstd to x's dtype before gamma multiplies
		f8_kir_id normalized = EMIT(lw, MUL, x, ng->rstd[j], NONE);
		dx = EMIT(lw, SUB, g, EMIT(lw, MUL, normalized, ng->dot_mean[j], NONE), NONE);
		*dgamma = EMIT(lw, MUL, dy, f8_lower_round_to(lw, ng->x_dtype, normalized), NONE);
	}
	*dbeta = dy;
	return f8_lower_round_to(lw, ng->dx_dtype, EMIT(lw, MUL, ng->rstd[j], dx, NONE));
}

/* The last loop: dx of each row stored and cast, the chunk's dgamma and dbeta stored as its
 * partials. */
static f8_status output_loop(norm_grad *ng) {
	f8_lower *lw = &ng->lw;
	f8_kir_id c, zero = f8_lower_constant(lw, 0);
	f8_status status = f8_kir_begin_block_loop(lw->kernel, ng->cols, &c, lw->diag);
	for (uint32_t k = 0; !status && k < ng->n_casts; k++)
		status = f8_lower_cast_add_accumulator(lw, &ng->casts[k], true);
	if (status)
		return status;
	for (uint32_t k = 0; k < ng->n_casts; k++)
		ng->casts[k].element_amax = NONE;
	f8_kir_id gamma = f8_kir_load(lw->kernel, ng->gamma, c), dgamma = zero, dbeta = zero;
	for (int j = 0; !status && j < CHUNK_ROWS; j++) {
		f8_kir_id dgamma_term, dbeta_term;
		f8_kir_id dx = dx_of(ng, j, c, gamma, &dgamma_term, &dbeta_term);
		f8_kir_id index = EMIT(lw, ADD, EMIT(lw, MUL, ng->row[j], ng->cols, NONE), c, NONE);
		f8_kir_id index_t = EMIT(lw, ADD, EMIT(lw, MUL, c, ng->rows, NONE), ng->row[j], NONE);
		if (ng->dx != F8_NONE)
			status = f8_kir_store(lw->kernel, ng->dx, index, dx, lw->diag);
		for (uint32_t k = 0; !status && k < ng->n_casts; k++)
			status = f8_lower_cast_store(lw, &ng->casts[k], dx, index, index_t);
		dgamma = EMIT(lw, ADD, dgamma, EMIT(lw, SELECT, ng->valid[j], dgamma_term, zero), NONE);
		dbeta = EMIT(lw, ADD, dbeta, EMIT(lw, SELECT, ng->valid[j], dbeta_term, zero), NONE);
	}
	f8_kir_id partial = EMIT(lw, ADD, EMIT(lw, MUL, ng->chunk, ng->cols, NONE), c, NONE);
	if (!status && ng->dgamma != F8_NONE)
		status = f8_kir_store(lw->kernel, ng->dgamma, partial, dgamma, lw->diag);
	if (!status && ng->dbeta != F8_NONE)
		status = f8_kir_store(lw->kernel, ng->dbeta, partial, dbeta, lw->diag);
	f8_kir_id values[F8_LOWER_MAX_AMAX];
	uint32_t n = 0;
	for (uint32_t k = 0; k < ng->n_casts; k++)
		if (ng->casts[k].amax != F8_NONE)
			values[n++] = ng->casts[k].element_amax;
	return status ? status : f8_kir_end_loop(lw->kernel, values, n, lw->diag);
}

/* The grid loop over the chunks, with the casts' amaxes combined over it. */
static f8_status chunks_loop(norm_grad *ng) {
	f8_lower *lw = &ng->lw;
	f8_kir_id step = f8_kir_const_i64(lw->kernel, CHUNK_ROWS);
	f8_kir_id chunks = EMIT(lw, DIV, EMIT(lw, ADD, ng->rows,
					      f8_kir_const_i64(lw->kernel, CHUNK_ROWS - 1), NONE),
				step, NONE);
	f8_kir_id chunk;
	f8_status status = f8_kir_begin_grid_loop(lw->kernel, chunks, &chunk, lw->diag);
	for (uint32_t k = 0; !status && k < ng->n_casts; k++)
		status = f8_lower_cast_add_accumulator(lw, &ng->casts[k], false);
	if (status)
		return status;
	ng->chunk = chunk;
	chunk_rows(ng, chunk);
	status = statistics(ng);
	if (!status)
		status = output_loop(ng);
	f8_kir_id values[F8_LOWER_MAX_AMAX];
	uint32_t n = 0;
	for (uint32_t k = 0; k < ng->n_casts; k++)
		if (ng->casts[k].amax != F8_NONE)
			values[n++] = ng->casts[k].row_amax;
	return status ? status : f8_kir_end_loop(lw->kernel, values, n, lw->diag);
}

/* dgamma or dbeta (`which` 0, 1) where it leaves the group, else F8_NONE. */
static f8_value_id summed(const f8_lower *lw, const f8_node *node, uint32_t which) {
	f8_value_id value = 1 + which < node->n_outputs ? node->outputs[1 + which] : F8_NONE;
	return value != F8_NONE && f8_lower_escapes(lw, value) ? value : F8_NONE;
}

f8_status f8_lower_norm_grad(const f8_graph *graph, uint32_t group, f8_node_id *members,
			     uint32_t n_members, f8_lowered_group *out, f8_diag *diag) {
	norm_grad ng = {.node = &graph->nodes[members[0]], .partials = {F8_NONE, F8_NONE}};
	ng.layer = ng.node->op == F8_OP_LAYER_NORM_GRAD;
	ng.x_dtype = graph->values[ng.node->inputs[1]].type.dtype;
	ng.dx_dtype = graph->values[ng.node->outputs[0]].type.dtype;
	f8_lower *lw = &ng.lw;
	f8_status status = f8_lower_begin(lw, graph, group, members, n_members,
					  graph->groups[group].name, diag);
	if (status)
		return status;
	status = f8_lower_cast_members(lw, 1, ng.cast_members, &ng.n_casts,
				       "the norm's gradient and its casts of dx");
	const f8_shape *x = &graph->values[ng.node->inputs[1]].type.shape;
	f8_dim rows = f8_dim_const(1), cols = x->dims[x->rank - 1];
	for (int d = 0; !status && d + 1 < x->rank; d++)
		if (!f8_dim_mul(rows, x->dims[d], &rows))
			status = f8_lower_fail(lw, members[0], "its row count overflows");
	f8_dim count;
	if (!status && !f8_lower_partials_count(rows, CHUNK_ROWS, 1, cols, &count))
		status = f8_lower_fail(lw, members[0], "its partial sums' size overflows");
	f8_value_id values[2] = {summed(lw, ng.node, 0), summed(lw, ng.node, 1)};
	for (uint32_t i = 0; !status && i < 2; i++)
		if (values[i] != F8_NONE)
			status = f8_lower_add_scratch(out, F8_DTYPE_F32, count, &ng.partials[i], diag);
	uint32_t p_rows, p_cols;
	if (!status)
		status = bind(&ng, out, &rows, &cols, &p_rows, &p_cols);
	if (!status) {
		lw->kernel->grid_sizes[0] = p_rows; // an upper bound: the chunks are fewer
		lw->kernel->n_grid_sizes = 1;
		ng.rows = f8_kir_size(lw->kernel, p_rows);
		ng.cols = f8_kir_size(lw->kernel, p_cols);
		ng.n = EMIT(lw, TO_F32, ng.cols, NONE, NONE);
		ng.epsilon = f8_lower_constant(lw, f8_node_attr_float(ng.node, "epsilon", 1e-5));
		for (uint32_t k = 0; k < ng.n_casts; k++)
			f8_lower_cast_load_scale(lw, &ng.casts[k]);
		status = chunks_loop(&ng);
	}
	for (uint32_t k = 0; !status && k < ng.n_casts; k++)
		status = f8_lower_cast_epilogue(lw, &ng.casts[k]);
	if ((status = f8_lower_end(lw, status, out)))
		return status;
	// dgamma and dbeta from their partials, in one kernel.
	uint32_t partials[2], n = 0;
	f8_value_id to[2];
	for (uint32_t i = 0; i < 2; i++)
		if (ng.partials[i] != F8_NONE) {
			partials[n] = ng.partials[i];
			to[n++] = values[i];
		}
	return n ? f8_lower_sum_partials(graph, group, members, partials, to, n, rows, CHUNK_ROWS,
					 cols, out, diag)
		 : F8_OK;
}
