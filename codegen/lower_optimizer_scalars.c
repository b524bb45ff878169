/*
 * The optimizer's scalars (codegen/lower.h): GlobalNorm, the gradients' norm that clipping
 * divides by, and LearningRate, the schedule's value at the iteration; each a family of one
 * node (global_norm, learning_rate), so that the optimizer phase runs on the device with
 * nothing read back but what the training loop reports.
 *
 * GlobalNorm(x_0, ..., x_n) = sqrt(sum of x^2 over every element of every input), for any
 * number of inputs of any sizes, in two kernels and no atomics, so that the result is the same
 * on every run:
 *   NAME_squares: the inputs cut into chunks of CHUNK elements, numbered one after the other
 *     over all of them as lower_optimizer.c numbers a parameter's; one grid iteration a chunk
 *     finds its input's row in a table (kir.h; a row per input: its first chunk, its elements,
 *     its dtype's variant, its address) by a binary search over the rows' first chunks, sums
 *     the squares of its elements in a block loop (one per dtype among the inputs, all of trip
 *     count 0 but the row's own) and stores the sum into a scratch buffer, one f32 a chunk;
 *   NAME_sum: one grid iteration, a block loop over the chunks' sums, their sum's square root.
 * The code does not grow with the inputs (a model's gradients, hundreds of them, are one
 * table). The sums are f32 where the reference sums in double and rounds once: per thread,
 * then over the block in a fixed order, then over the chunks; every term is positive, so the
 * relative error stays within a few f32 ulps times log2 of the terms, and the square root
 * halves it. A square above f32's largest finite value (|x| > 1.8e19) is infinite here, where
 * the reference's double keeps it.
 *
 * LearningRate(it): runtime/cpu/kernels_optim.c's schedule, in f32 where the reference
 * computes in double and rounds once (so within a few f32 ulps of it, not bit-exact): lr it /
 * warmup while it <= warmup; then lr (constant), or from lr to min_lr over (warmup,
 * decay_iters] by the coefficient u (linear) or (1 + cos(pi ratio)) / 2 (cosine) of ratio =
 * 1 - u, u = (decay_iters - it) / (decay_iters - warmup); min_lr after. The cosine's
 * coefficient is computed as sin^2(pi u / 2), the same value, with sin an odd polynomial on
 * [0, pi/2] (Taylor's to x^13: 7e-10 from sin, below an f32 ulp), so that it keeps its
 * relative accuracy as it goes to 0 at decay_iters, where 1 + cos would cancel; no kir
 * instruction is needed for it. The attributes are constants of the code. An iteration below 1
 * is a data error the kernel reports, as the reference fails.
 */
#include "codegen/lower_internal.h" // f8_lower, f8_lower_*

#include <stdio.h>  // snprintf
#include <string.h> // strcmp

#include "ir/ops.h" // f8_node_attr_float, f8_node_attr_int, f8_node_attr_string

enum {
	CHUNK = 4096,    // elements a grid iteration of NAME_squares sums
	MAX_DTYPES = 4,  // the float dtypes an input may have: f32, bf16, f16 (and room)
};

static f8_kir_id i64(f8_lower *lw, int64_t value) {
	return f8_kir_const_i64(lw->kernel, value);
}

static f8_kir_id f32(f8_lower *lw, double value) {
	return f8_lower_constant(lw, value);
}

static bool is_float(f8_dtype dtype) {
	return dtype == F8_DTYPE_F32 || dtype == F8_DTYPE_BF16 || dtype == F8_DTYPE_F16;
}

/* The constant element count of `value`, or -1. */
static int64_t constant_numel(const f8_graph *graph, f8_value_id value) {
	f8_dim numel;
	if (!f8_shape_numel(&graph->values[value].type.shape, &numel) || !f8_dim_is_const(numel))
		return -1;
	return f8_dim_value(numel);
}

bool f8_lower_optimizer_scalar_lowers(const f8_graph *graph, const f8_node *node) {
	const f8_value *v = graph->values;
	if (node->n_outputs != 1 || v[node->outputs[0]].type.dtype != F8_DTYPE_F32)
		return false;
	if (node->op == F8_OP_LEARNING_RATE) {
		f8_dtype it = v[node->inputs[0]].type.dtype;
		const char *style = f8_node_attr_string(node, "style", "constant");
		return (it == F8_DTYPE_I64 || it == F8_DTYPE_I32) &&
		       (strcmp(style, "constant") == 0 || strcmp(style, "linear") == 0 ||
			strcmp(style, "cosine") == 0);
	}
	for (uint32_t i = 0; i < node->n_inputs; i++) // GlobalNorm: constant sizes, a table's rows
		if (node->inputs[i] != F8_NONE &&
		    (!is_float(v[node->inputs[i]].type.dtype) || constant_numel(graph, node->inputs[i]) < 0))
			return false;
	return true;
}

/* GlobalNorm. */

/* The columns of a row of NAME_squares's table. */
typedef enum column {
	COLUMN_FIRST_CHUNK, // the input's first chunk
	COLUMN_NUMEL,       // its elements
	COLUMN_VARIANT,     // its dtype's index among the group's dtypes
	COLUMN_ADDRESS,     // its buffer
	N_COLUMNS,
} column;

static const char *const column_names[N_COLUMNS] = {"first_chunk", "numel", "variant", "x"};
static const f8_kernel_param_kind column_kinds[N_COLUMNS] = {
	F8_KERNEL_PARAM_SIZE, F8_KERNEL_PARAM_SIZE, F8_KERNEL_PARAM_SIZE, F8_KERNEL_PARAM_IN};

/* The inputs the kernels read (those with elements) and what the table says of them. */
typedef struct norm_inputs {
	uint32_t n;        // rows
	int64_t chunks;    // over all of them
	f8_dtype dtypes[MAX_DTYPES];
	uint32_t n_dtypes;
	f8_kernel_table *table;
} norm_inputs;

static f8_status collect_inputs(const f8_graph *graph, const f8_node *node, norm_inputs *in,
				f8_diag *diag) {
	*in = (norm_inputs){0};
	uint32_t rows = 0;
	for (uint32_t i = 0; i < node->n_inputs; i++)
		rows += node->inputs[i] != F8_NONE && constant_numel(graph, node->inputs[i]) > 0;
	in->table = f8_lower_table_create(rows, N_COLUMNS, column_kinds, column_names);
	if (!in->table)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	for (uint32_t i = 0; i < node->n_inputs; i++) {
		f8_value_id x = node->inputs[i];
		int64_t numel = x == F8_NONE ? 0 : constant_numel(graph, x);
		if (numel <= 0)
			continue;
		f8_dtype dtype = graph->values[x].type.dtype;
		uint32_t variant = 0;
		while (variant < in->n_dtypes && in->dtypes[variant] != dtype)
			variant++;
		if (variant == in->n_dtypes)
			in->dtypes[in->n_dtypes++] = dtype;
		f8_kernel_table_cell *cells = &in->table->cells[(size_t)in->n * N_COLUMNS];
		cells[COLUMN_FIRST_CHUNK].constant = in->chunks;
		cells[COLUMN_NUMEL].constant = numel;
		cells[COLUMN_VARIANT].constant = variant;
		cells[COLUMN_ADDRESS].value = x;
		in->chunks += (numel + CHUNK - 1) / CHUNK;
		in->n++;
	}
	return F8_OK;
}

/* Cell `c` of row `row` of table parameter `table`. */
static f8_kir_id cell(f8_lower *lw, uint32_t table, f8_kir_id row, column c) {
	f8_kir_id at = EMIT(lw, ADD, EMIT(lw, MUL, row, i64(lw, N_COLUMNS), NONE), i64(lw, c), NONE);
	return f8_kir_load(lw->kernel, table, at);
}

/* The row of the table (n rows, n >= 1) that holds chunk `chunk`: the last whose first chunk
 * is at most it, by a binary search unrolled to ceil(log2(n)) steps, its probe kept within the
 * table (lower_optimizer.c's find_row). */
static f8_kir_id find_row(f8_lower *lw, uint32_t table, uint32_t n, f8_kir_id chunk) {
	f8_kir_id found = i64(lw, 0), last = i64(lw, (int64_t)n - 1);
	uint32_t step = 1;
	while (step < n)
		step *= 2;
	for (step /= 2; step >= 1; step /= 2) {
		f8_kir_id probe = EMIT(lw, MIN, EMIT(lw, ADD, found, i64(lw, step), NONE), last, NONE);
		f8_kir_id inside = EMIT(lw, LE, cell(lw, table, probe, COLUMN_FIRST_CHUNK), chunk, NONE);
		found = EMIT(lw, SELECT, inside, probe, found);
	}
	return found;
}

/* NAME_squares: a chunk's sum of squares into partials[chunk]. It takes in->table: its launch
 * holds it once made, and it is freed here on a failure. */
static f8_status squares_kernel(const f8_graph *graph, uint32_t group, f8_node_id *members,
				norm_inputs *in, uint32_t partials, f8_lowered_group *out,
				f8_diag *diag) {
	f8_kernel_table *table = in->table;
	in->table = NULL;
	char name[80];
	snprintf(name, sizeof name, "%s_squares", graph->groups[group].name);
	f8_lower lw;
	f8_status status = f8_lower_begin(&lw, graph, group, members, 1, name, diag);
	if (status) {
		f8_kernel_table_destroy(table);
		return status;
	}
	uint32_t p_table, sums, p_chunks;
	status = f8_lower_add_table_param(&lw, table, &p_table);
	if (!status)
		status = f8_lower_add_scratch_param(&lw, out, partials, F8_KERNEL_PARAM_OUT, &sums);
	if (!status)
		status = f8_lower_add_size(&lw, f8_dim_const(in->chunks), &p_chunks);
	f8_kir_id chunk, j, results[MAX_DTYPES];
	if (!status) {
		lw.kernel->grid_sizes[0] = p_chunks;
		lw.kernel->n_grid_sizes = 1;
		status = f8_kir_begin_grid_loop(lw.kernel, f8_kir_size(lw.kernel, p_chunks), &chunk, diag);
	}
	f8_kir_id row = NONE, offset = NONE, length = NONE, address = NONE, variant = NONE;
	if (!status) {
		row = find_row(&lw, p_table, in->n, chunk);
		f8_kir_id local = EMIT(&lw, SUB, chunk, cell(&lw, p_table, row, COLUMN_FIRST_CHUNK), NONE);
		offset = EMIT(&lw, MUL, local, i64(&lw, CHUNK), NONE);
		length = EMIT(&lw, MIN, i64(&lw, CHUNK),
			      EMIT(&lw, SUB, cell(&lw, p_table, row, COLUMN_NUMEL), offset, NONE), NONE);
		address = cell(&lw, p_table, row, COLUMN_ADDRESS);
		if (in->n_dtypes > 1)
			variant = cell(&lw, p_table, row, COLUMN_VARIANT);
	}
	for (uint32_t v = 0; !status && v < in->n_dtypes; v++) {
		f8_kir_id extent = length;
		if (variant != NONE)
			extent = EMIT(&lw, SELECT, EMIT(&lw, EQ, variant, i64(&lw, v), NONE), length,
				      i64(&lw, 0));
		status = f8_kir_begin_block_loop(lw.kernel, extent, &j, diag);
		if (!status)
			status = f8_kir_add_accumulator(lw.kernel, F8_KIR_COMBINE_ADD, F8_KIR_TYPE_F32,
							&results[v], diag);
		if (status)
			break;
		f8_kir_id x = f8_kir_load_ptr(lw.kernel, in->dtypes[v], address,
					      EMIT(&lw, ADD, offset, j, NONE));
		f8_kir_id square = EMIT(&lw, MUL, x, x, NONE);
		status = f8_kir_end_loop(lw.kernel, &square, 1, diag);
	}
	f8_kir_id sum = status ? NONE : results[0];
	for (uint32_t v = 1; !status && v < in->n_dtypes; v++) // the other variants' are 0
		sum = EMIT(&lw, ADD, sum, results[v], NONE);
	if (!status)
		status = f8_kir_store(lw.kernel, sums, chunk, sum, diag);
	if (!status)
		status = f8_kir_end_loop(lw.kernel, NULL, 0, diag);
	status = f8_lower_end(&lw, status, out);
	if (status) // f8_lower_end freed the bindings, not their table
		f8_kernel_table_destroy(table);
	return status;
}

/* NAME_sum: the chunks' sums added in one block, the square root stored. */
static f8_status sum_kernel(const f8_graph *graph, uint32_t group, f8_node_id *members,
			    const norm_inputs *in, uint32_t partials, f8_lowered_group *out,
			    f8_diag *diag) {
	const f8_node *node = &graph->nodes[members[0]];
	char name[80];
	snprintf(name, sizeof name, "%s_sum", graph->groups[group].name);
	f8_lower lw;
	f8_status status = f8_lower_begin(&lw, graph, group, members, 1, name, diag);
	if (status)
		return status;
	uint32_t sums, norm, p_chunks;
	status = f8_lower_add_scratch_param(&lw, out, partials, F8_KERNEL_PARAM_IN, &sums);
	if (!status)
		status = f8_lower_bind_output(&lw, node->outputs[0], F8_KERNEL_PARAM_OUT, &norm);
	if (!status)
		status = f8_lower_add_size(&lw, f8_dim_const(in->chunks), &p_chunks);
	f8_kir_id r, c, sum;
	if (!status) {
		lw.kernel->n_grid_sizes = 0;
		status = f8_kir_begin_grid_loop(lw.kernel, i64(&lw, 1), &r, diag);
	}
	if (!status)
		status = f8_kir_begin_block_loop(lw.kernel, f8_kir_size(lw.kernel, p_chunks), &c, diag);
	if (!status)
		status = f8_kir_add_accumulator(lw.kernel, F8_KIR_COMBINE_ADD, F8_KIR_TYPE_F32, &sum,
						diag);
	if (!status) {
		f8_kir_id partial = f8_kir_load(lw.kernel, sums, c);
		status = f8_kir_end_loop(lw.kernel, &partial, 1, diag);
	}
	if (!status && norm != F8_NONE)
		status = f8_kir_store(lw.kernel, norm, i64(&lw, 0), EMIT(&lw, SQRT, sum, NONE, NONE),
				      diag);
	if (!status)
		status = f8_kir_end_loop(lw.kernel, NULL, 0, diag);
	return f8_lower_end(&lw, status, out);
}

f8_status f8_lower_global_norm(const f8_graph *graph, uint32_t group, f8_node_id *members,
			       uint32_t n_members, f8_lowered_group *out, f8_diag *diag) {
	(void)n_members; // a lone node
	norm_inputs in;
	uint32_t partials;
	f8_status status = collect_inputs(graph, &graph->nodes[members[0]], &in, diag);
	if (!status) // one f32 a chunk (at least one, so that a norm of nothing has a buffer)
		status = f8_lower_add_scratch(out, F8_DTYPE_F32,
					      f8_dim_const(in.chunks ? in.chunks : 1), &partials, diag);
	if (!status && in.n) // without elements, the sum of no chunks: 0
		status = squares_kernel(graph, group, members, &in, partials, out, diag);
	f8_kernel_table_destroy(in.table); // NULL where squares_kernel took it
	if (!status)
		status = sum_kernel(graph, group, members, &in, partials, out, diag);
	return status;
}

/* LearningRate. */

static const char iteration_error[] = "an iteration below 1 (iterations count from 1)";

/* sin(x) for x in [0, pi/2]: x + x^3 (-1/3! + x^2 (1/5! - ...)), Taylor's to x^13 by Horner. */
static f8_kir_id sine(f8_lower *lw, f8_kir_id x) {
	static const double coefficients[] = {-1.0 / 6, 1.0 / 120, -1.0 / 5040, 1.0 / 362880,
					      -1.0 / 39916800, 1.0 / 6227020800.0};
	enum { N = sizeof coefficients / sizeof coefficients[0] };
	f8_kir_id xx = EMIT(lw, MUL, x, x, NONE), p = f32(lw, coefficients[N - 1]);
	for (int k = N - 2; k >= 0; k--)
		p = EMIT(lw, ADD, f32(lw, coefficients[k]), EMIT(lw, MUL, xx, p, NONE), NONE);
	return EMIT(lw, ADD, x, EMIT(lw, MUL, EMIT(lw, MUL, x, xx, NONE), p, NONE), NONE);
}

/* The schedule at iteration `it` (i64, at least 1), as the header says. */
static f8_kir_id schedule(f8_lower *lw, const f8_node *node, f8_kir_id it) {
	const double pi = 3.14159265358979323846;
	double lr = f8_node_attr_float(node, "lr", 0);
	double min_lr = f8_node_attr_float(node, "min_lr", 0);
	int64_t warmup = f8_node_attr_int(node, "warmup", 0);
	int64_t decay = f8_node_attr_int(node, "decay_iters", 0);
	const char *style = f8_node_attr_string(node, "style", "constant");
	f8_kir_id value = f32(lw, lr);
	if (strcmp(style, "constant") != 0) { // type inference held decay_iters > warmup
		f8_kir_id left = EMIT(lw, TO_F32, EMIT(lw, SUB, i64(lw, decay), it, NONE), NONE, NONE);
		f8_kir_id u = EMIT(lw, DIV, left, f32(lw, (double)(decay - warmup)), NONE);
		f8_kir_id coefficient = u;
		if (strcmp(style, "cosine") == 0) {
			f8_kir_id s = sine(lw, EMIT(lw, MUL, u, f32(lw, pi / 2), NONE));
			coefficient = EMIT(lw, MUL, s, s, NONE);
		}
		f8_kir_id decayed = EMIT(lw, ADD, f32(lw, min_lr),
					 EMIT(lw, MUL, f32(lw, lr - min_lr), coefficient, NONE), NONE);
		f8_kir_id after = EMIT(lw, LT, i64(lw, decay), it, NONE);
		value = EMIT(lw, SELECT, after, f32(lw, min_lr), decayed);
	}
	if (warmup > 0) {
		f8_kir_id warm = EMIT(lw, DIV, EMIT(lw, MUL, f32(lw, lr), EMIT(lw, TO_F32, it, NONE, NONE), NONE),
				      f32(lw, (double)warmup), NONE);
		value = EMIT(lw, SELECT, EMIT(lw, LE, it, i64(lw, warmup), NONE), warm, value);
	}
	return value;
}

f8_status f8_lower_learning_rate(const f8_graph *graph, uint32_t group, f8_node_id *members,
				 uint32_t n_members, f8_lowered_group *out, f8_diag *diag) {
	(void)n_members; // a lone node
	const f8_node *node = &graph->nodes[members[0]];
	out->error = iteration_error;
	f8_status status = f8_lower_add_scratch(out, F8_DTYPE_I64, f8_dim_const(1),
						&out->error_scratch, diag);
	f8_lower lw;
	if (!status)
		status = f8_lower_begin(&lw, graph, group, members, 1, graph->groups[group].name, diag);
	if (status)
		return status;
	uint32_t iteration, lr, error;
	status = f8_lower_bind_input(&lw, node->inputs[0], &iteration);
	if (!status)
		status = f8_lower_bind_output(&lw, node->outputs[0], F8_KERNEL_PARAM_OUT, &lr);
	if (!status)
		status = f8_lower_add_scratch_param(&lw, out, out->error_scratch,
						    F8_KERNEL_PARAM_ACCUMULATE, &error);
	f8_kir_id r;
	if (!status) {
		lw.kernel->n_grid_sizes = 0;
		status = f8_kir_begin_grid_loop(lw.kernel, i64(&lw, 1), &r, diag);
	}
	if (status)
		return f8_lower_end(&lw, status, out);
	f8_kir_id zero = i64(&lw, 0), it = f8_kir_load(lw.kernel, iteration, zero);
	f8_kir_id bad = EMIT(&lw, SELECT, EMIT(&lw, LT, it, i64(&lw, 1), NONE), i64(&lw, 1), zero);
	status = f8_kir_atomic(lw.kernel, F8_KIR_COMBINE_MAX, error, zero, bad, diag);
	if (!status && lr != F8_NONE)
		status = f8_kir_store(lw.kernel, lr, zero, schedule(&lw, node, it), diag);
	if (!status)
		status = f8_kir_end_loop(lw.kernel, NULL, 0, diag);
	return f8_lower_end(&lw, status, out);
}
