/*
 * SwiGLU and SwiGLUGrad (codegen/lower.h), Llama's MLP activation, each with the casts of what
 * it makes, in one kernel: the activation family's SwiGLU + the casts of y (the E4M3 copy fc2's
 * FP8 GEMM reads), the activation_grad family's SwiGLUGrad + the casts of dx (the E5M2 copy
 * fc1's dgrad and wgrad read).
 *
 * Both forms of runtime/cpu/kernels_nn.c and kernels_grad_nn.c: packed, x = [gate | up] along
 * the last axis (each row 2n wide), or two inputs gate and up; SwiGLUGrad's dx is packed the
 * same way, or two outputs dgate and dup. A grid iteration is a row (no 64-bit division of a
 * flat index), a block loop its n columns: each thread reads gate and up at the same column
 * and writes what it makes there, the packed halves at c and n + c. A cast of a packed dx
 * writes its transposed copy's rows c and n + c.
 *
 * In f32 where the reference computes in double: sigmoid(g) as 1 / (1 + exp(-g)) for g >= 0
 * and e / (1 + e), e = exp(g), below (the reference's two forms, so that a very negative gate
 * gives a tiny product, not 0), y = (g sigmoid(g)) u, dg = dy u sigmoid(g) (1 + g (1 -
 * sigmoid(g))), du = dy g sigmoid(g).
 */
#include "codegen/lower_internal.h" // f8_lower, f8_lower_cast, f8_lower_*

typedef struct swiglu {
	f8_lower lw;
	const f8_node *node;
	bool grad, packed;
	f8_lower_cast casts[F8_LOWER_MAX_AMAX];
	uint32_t cast_of[F8_LOWER_MAX_AMAX]; // the output of the node each cast reads
	f8_node_id cast_members[F8_LOWER_MAX_AMAX]; // the casts' nodes (their guards passed over)
	uint32_t n_casts;
	uint32_t dy, x, up;                  // IN: dy (grad only), x, up (F8_NONE when packed)
	uint32_t made[2];                    // OUT: y, or dx / dgate and dup; F8_NONE if unread
	f8_dtype made_dtype[2];
	f8_kir_id rows, n, r;                // the rows of y (or dy), its width, the row
} swiglu;

static bool is_float(f8_dtype dtype) {
	return dtype == F8_DTYPE_F32 || dtype == F8_DTYPE_BF16 || dtype == F8_DTYPE_F16;
}

/* Float inputs; outputs stored as f32 or bf16 (the dtypes whose stored value the registers
 * know, for the casts that read them). */
bool f8_lower_swiglu_lowers(const f8_graph *graph, const f8_node *node) {
	const f8_value *v = graph->values;
	for (uint32_t i = 0; i < node->n_inputs; i++)
		if (node->inputs[i] != F8_NONE && !is_float(v[node->inputs[i]].type.dtype))
			return false;
	for (uint32_t o = 0; o < node->n_outputs; o++) {
		f8_dtype dtype = v[node->outputs[o]].type.dtype;
		if (dtype != F8_DTYPE_F32 && dtype != F8_DTYPE_BF16)
			return false;
	}
	return v[node->inputs[node->op == F8_OP_SWIGLU_GRAD]].type.shape.rank >= 1;
}

/* The node's output that cast `node` reads. */
static uint32_t output_read(const f8_node *seed, const f8_node *node) {
	for (uint32_t o = 0; o < seed->n_outputs; o++)
		if (seed->outputs[o] == node->inputs[0])
			return o;
	return F8_NONE;
}

/* Parameters: dy, x, up and the casts' scales in; what the node makes and the casts' outputs;
 * the sizes rows and n. */
static f8_status bind(swiglu *s, f8_dim rows, f8_dim n, uint32_t *p_rows, uint32_t *p_n) {
	f8_lower *lw = &s->lw;
	const f8_node *node = s->node;
	uint32_t first = s->grad ? 1 : 0;
	f8_value_id up = first + 1 < node->n_inputs ? node->inputs[first + 1] : F8_NONE;
	f8_status status = F8_OK;
	s->dy = s->up = F8_NONE;
	if (s->grad)
		status = f8_lower_bind_input(lw, node->inputs[0], &s->dy);
	if (!status)
		status = f8_lower_bind_input(lw, node->inputs[first], &s->x);
	if (!status && up != F8_NONE)
		status = f8_lower_bind_input(lw, up, &s->up);
	for (uint32_t c = 0; !status && c < s->n_casts; c++)
		status = f8_lower_cast_inputs(lw, &s->casts[c], &lw->graph->nodes[s->cast_members[c]]);
	s->made[1] = F8_NONE;
	for (uint32_t o = 0; !status && o < node->n_outputs; o++) {
		s->made_dtype[o] = lw->graph->values[node->outputs[o]].type.dtype;
		status = f8_lower_bind_output(lw, node->outputs[o], F8_KERNEL_PARAM_OUT, &s->made[o]);
	}
	for (uint32_t c = 0; !status && c < s->n_casts; c++)
		status = f8_lower_cast_outputs(lw, &s->casts[c]);
	if (!status)
		status = f8_lower_add_size(lw, rows, p_rows);
	if (!status)
		status = f8_lower_add_size(lw, n, p_n);
	for (uint32_t c = 0; !status && c < s->n_casts; c++)
		status = f8_lower_cast_slot(lw, &s->casts[c]);
	return status;
}

static f8_kir_id i64(swiglu *s, int64_t value) {
	return f8_kir_const_i64(s->lw.kernel, value);
}

/* sigmoid(g) in the reference's two forms. */
static f8_kir_id sigmoid(f8_lower *lw, f8_kir_id g) {
	f8_kir_id one = f8_lower_constant(lw, 1);
	f8_kir_id above = EMIT(lw, DIV, one, EMIT(lw, ADD, one, EMIT(lw, EXP, EMIT(lw, NEG, g, NONE, NONE),
								     NONE, NONE), NONE), NONE);
	f8_kir_id e = EMIT(lw, EXP, g, NONE, NONE);
	f8_kir_id below = EMIT(lw, DIV, e, EMIT(lw, ADD, one, e, NONE), NONE);
	return EMIT(lw, SELECT, EMIT(lw, LE, f8_lower_constant(lw, 0), g, NONE), above, below);
}

/* Stores `value` (made output `o`, at column `c` of its row: `at` its flat index) and feeds the
 * casts of that output; `column_t` is its column in the transposed copy. */
static f8_status emit_made(swiglu *s, uint32_t o, f8_kir_id value, f8_kir_id at,
			   f8_kir_id column_t) {
	f8_lower *lw = &s->lw;
	f8_status status = F8_OK;
	if (s->made[o] != F8_NONE)
		status = f8_kir_store(lw->kernel, s->made[o], at, value, lw->diag);
	f8_kir_id at_t = EMIT(lw, ADD, EMIT(lw, MUL, column_t, s->rows, NONE), s->r, NONE);
	for (uint32_t k = 0; !status && k < s->n_casts; k++)
		if (s->cast_of[k] == o)
			status = f8_lower_cast_store(lw, &s->casts[k], value, at, at_t);
	return status;
}

/* Column c of row r: the node's arithmetic, its outputs stored and cast. */
static f8_status emit_column(swiglu *s, f8_kir_id c) {
	f8_lower *lw = &s->lw;
	f8_kir_id width = s->packed ? EMIT(lw, MUL, s->n, i64(s, 2), NONE) : s->n;
	f8_kir_id row_start = EMIT(lw, MUL, s->r, width, NONE);
	f8_kir_id gate_at = EMIT(lw, ADD, row_start, c, NONE);
	f8_kir_id up_at = s->packed ? EMIT(lw, ADD, gate_at, s->n, NONE) : gate_at;
	f8_kir_id g = f8_kir_load(lw->kernel, s->x, gate_at);
	f8_kir_id u = f8_kir_load(lw->kernel, s->packed ? s->x : s->up, up_at);
	f8_kir_id sig = sigmoid(lw, g), silu = EMIT(lw, MUL, g, sig, NONE);
	f8_kir_id at = EMIT(lw, ADD, EMIT(lw, MUL, s->r, s->n, NONE), c, NONE);
	if (!s->grad)
		return emit_made(s, 0, f8_lower_round_to(lw, s->made_dtype[0],
							 EMIT(lw, MUL, silu, u, NONE)), at, c);
	f8_kir_id dy = f8_kir_load(lw->kernel, s->dy, at), one = f8_lower_constant(lw, 1);
	f8_kir_id slope = EMIT(lw, ADD, one, EMIT(lw, MUL, g, EMIT(lw, SUB, one, sig, NONE), NONE),
			       NONE);
	f8_kir_id dg = EMIT(lw, MUL, EMIT(lw, MUL, EMIT(lw, MUL, dy, u, NONE), sig, NONE), slope, NONE);
	f8_kir_id du = EMIT(lw, MUL, dy, silu, NONE);
	dg = f8_lower_round_to(lw, s->made_dtype[0], dg);
	if (s->packed) {
		du = f8_lower_round_to(lw, s->made_dtype[0], du);
		f8_status status = emit_made(s, 0, dg, gate_at, c);
		return status ? status : emit_made(s, 0, du, up_at, EMIT(lw, ADD, c, s->n, NONE));
	}
	du = f8_lower_round_to(lw, s->made_dtype[1], du);
	f8_status status = emit_made(s, 0, dg, at, c);
	return status ? status : emit_made(s, 1, du, at, c);
}

/* The grid loop over the rows, a block loop over the columns; the amaxes per row, then per
 * kernel. */
static f8_status rows_loop(swiglu *s) {
	f8_lower *lw = &s->lw;
	f8_kir_id c, values[F8_LOWER_MAX_AMAX];
	f8_status status = f8_kir_begin_grid_loop(lw->kernel, s->rows, &s->r, lw->diag);
	for (uint32_t k = 0; !status && k < s->n_casts; k++)
		status = f8_lower_cast_add_accumulator(lw, &s->casts[k], false);
	if (!status)
		status = f8_kir_begin_block_loop(lw->kernel, s->n, &c, lw->diag);
	for (uint32_t k = 0; !status && k < s->n_casts; k++) {
		status = f8_lower_cast_add_accumulator(lw, &s->casts[k], true);
		s->casts[k].element_amax = NONE;
	}
	if (!status)
		status = emit_column(s, c);
	for (int loop = 0; !status && loop < 2; loop++) {
		uint32_t n = 0;
		for (uint32_t k = 0; k < s->n_casts; k++)
			if (s->casts[k].amax != F8_NONE)
				values[n++] = loop ? s->casts[k].row_amax : s->casts[k].element_amax;
		status = f8_kir_end_loop(lw->kernel, values, n, lw->diag);
	}
	return status;
}

f8_status f8_lower_swiglu(const f8_graph *graph, uint32_t group, f8_node_id *members,
			  uint32_t n_members, f8_lowered_group *out, f8_diag *diag) {
	swiglu s = {.node = &graph->nodes[members[0]]};
	s.grad = s.node->op == F8_OP_SWIGLU_GRAD;
	s.packed = s.node->n_inputs < (s.grad ? 3u : 2u) || s.node->inputs[s.grad ? 2 : 1] == F8_NONE;
	f8_lower *lw = &s.lw;
	f8_status status = f8_lower_begin(lw, graph, group, members, n_members,
					  graph->groups[group].name, diag);
	if (status)
		return status;
	status = f8_lower_cast_members(lw, 1, s.cast_members, &s.n_casts,
				       "the op and its casts of what it makes");
	for (uint32_t c = 0; !status && c < s.n_casts; c++) {
		s.cast_of[c] = output_read(s.node, &graph->nodes[s.cast_members[c]]);
		if (s.cast_of[c] == F8_NONE)
			status = f8_lower_fail(lw, s.cast_members[c], "a %s kernel's casts read what "
					       "it makes", f8_op_name(s.node->op));
	}
	// The rows and width of y (SwiGLU's output, SwiGLUGrad's dy).
	const f8_shape *y = &graph->values[s.grad ? s.node->inputs[0] : s.node->outputs[0]].type.shape;
	f8_dim rows = f8_dim_const(1);
	for (int d = 0; !status && d + 1 < y->rank; d++)
		if (!f8_dim_mul(rows, y->dims[d], &rows))
			status = f8_lower_fail(lw, members[0], "its row count overflows");
	uint32_t p_rows, p_n;
	if (!status)
		status = bind(&s, rows, y->dims[y->rank - 1], &p_rows, &p_n);
	if (!status) {
		lw->kernel->grid_sizes[0] = p_rows;
		lw->kernel->n_grid_sizes = 1;
		s.rows = f8_kir_size(lw->kernel, p_rows);
		s.n = f8_kir_size(lw->kernel, p_n);
		for (uint32_t k = 0; k < s.n_casts; k++)
			f8_lower_cast_load_scale(lw, &s.casts[k]);
		status = rows_loop(&s);
	}
	for (uint32_t k = 0; !status && k < s.n_casts; k++)
		status = f8_lower_cast_epilogue(lw, &s.casts[k]);
	return f8_lower_end(lw, status, out);
}
