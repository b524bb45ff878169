/*
 * What the lowering files beyond lower.c and lower_multi.c share (codegen/lower_internal.h):
 * parameters looked up by the value they bind; a cast member (Quantize or CastTranspose with a
 * given per-tensor scale) fused into a kernel that computes its source: its parameters, its
 * scaled stores of both copies, its amax combined per row, per kernel and then atomically, its
 * scale_invs (lower.c has its own for the elementwise and norm groups; these serve
 * lower_norm_grad.c and lower_swiglu.c, whose kernels walk rows and columns themselves); the
 * kernel that rounds f32 sums into a bf16 output, and the one that adds partial column sums in
 * order (every float sum across grid iterations: no float atomics); which file says whether a
 * node lowers; and the one table by kernel family (ir/graph.h F8_KERNEL_FAMILY_LIST) of how a
 * group lowers, so that a new family adds a row here and leaves lower.c as it is.
 */
#include "codegen/lower_internal.h" // f8_lower, f8_lower_cast

#include <assert.h> // assert, static_assert
#include <stdint.h> // INT64_MAX
#include <stdio.h>  // snprintf

#include "ir/alloc.h" // f8_calloc, f8_realloc
#include "ir/ops.h"   // f8_node_attr_int, f8_op_get_info, F8_OPF_ELEMENTWISE

uint32_t f8_lower_find_param(const f8_lower *lw, f8_value_id value) {
	for (uint32_t p = 0; p < lw->kernel->n_params; p++)
		if (lw->args[p].value == value && lw->kernel->params[p].kind != F8_KERNEL_PARAM_SIZE)
			return p;
	return F8_NONE;
}

uint32_t f8_lower_partial_param(const f8_lower *lw, f8_value_id value) {
	for (uint32_t s = 0; s < lw->n_partial_sums; s++)
		if (lw->partial_sums[s].value == value)
			return lw->partial_sums[s].param;
	return F8_NONE;
}

f8_status f8_lower_bind_input(f8_lower *lw, f8_value_id value, uint32_t *index) {
	*index = f8_lower_find_param(lw, value);
	if (*index != F8_NONE)
		return F8_OK;
	f8_status status = f8_lower_add_buffer(lw, value, F8_KERNEL_PARAM_IN);
	if (!status)
		*index = lw->kernel->n_params - 1;
	return status;
}

f8_status f8_lower_bind_output(f8_lower *lw, f8_value_id value, f8_kernel_param_kind kind,
			       uint32_t *index) {
	*index = F8_NONE;
	if (value == F8_NONE || !f8_lower_escapes(lw, value))
		return F8_OK;
	f8_status status = f8_lower_add_buffer(lw, value, kind);
	if (!status)
		*index = lw->kernel->n_params - 1;
	return status;
}

bool f8_lower_is_cast(const f8_node *node) {
	return node->op == F8_OP_QUANTIZE || node->op == F8_OP_CAST_TRANSPOSE;
}

bool f8_lower_is_amax_guard(const f8_lower *lw, const f8_node *node) {
	if (node->op != F8_OP_NAN_TO_INF || node->inputs[0] == F8_NONE)
		return false;
	f8_node_id producer = lw->graph->values[node->inputs[0]].producer;
	for (uint32_t m = 0; producer != F8_NONE && m < lw->n_members; m++)
		if (lw->members[m] == producer)
			return f8_node_amax(&lw->graph->nodes[producer]) == node->inputs[0];
	return false;
}

f8_node_id f8_lower_amax_guard(const f8_lower *lw, f8_value_id amax) {
	for (uint32_t m = 0; amax != F8_NONE && m < lw->n_members; m++) {
		const f8_node *node = &lw->graph->nodes[lw->members[m]];
		if (node->inputs[0] == amax && f8_lower_is_amax_guard(lw, node))
			return lw->members[m];
	}
	return F8_NONE;
}

f8_status f8_lower_cast_members(f8_lower *lw, uint32_t first, f8_node_id *casts, uint32_t *n,
				const char *what) {
	*n = 0;
	for (uint32_t m = first; m < lw->n_members; m++) {
		const f8_node *node = &lw->graph->nodes[lw->members[m]];
		if (f8_lower_is_amax_guard(lw, node))
			continue;
		if (!f8_lower_is_cast(node) || *n == F8_LOWER_MAX_AMAX)
			return f8_lower_fail(lw, lw->members[m], "a %s kernel holds %s (at most %d), "
					     "and their amaxes' guards", f8_kernel_family_name(
						     lw->graph->groups[lw->group].family),
					     what, F8_LOWER_MAX_AMAX);
		casts[(*n)++] = lw->members[m];
	}
	return F8_OK;
}

f8_status f8_lower_cast_inputs(f8_lower *lw, f8_lower_cast *cast, const f8_node *node) {
	*cast = (f8_lower_cast){.node = node, .codes = F8_NONE, .codes_t = F8_NONE,
				.scale_inv = F8_NONE, .scale_inv_t = F8_NONE, .amax = F8_NONE,
				.scale_value = NONE, .row_amax = NONE, .grid_amax = NONE,
				.element_amax = NONE};
	return f8_lower_bind_input(lw, node->inputs[1], &cast->scale);
}

/* Quantize: codes, scale_inv, amax; CastTranspose: codes, codes_t, scale_inv, scale_inv_t,
 * amax. */
f8_status f8_lower_cast_outputs(f8_lower *lw, f8_lower_cast *cast) {
	const f8_node *node = cast->node;
	bool transpose = node->op == F8_OP_CAST_TRANSPOSE;
	f8_value_id at[5] = {F8_NONE, F8_NONE, F8_NONE, F8_NONE, F8_NONE};
	for (uint32_t o = 0; o < node->n_outputs && o < 5; o++)
		at[o] = node->outputs[o];
	f8_value_id codes_t = transpose ? at[1] : F8_NONE, scale_inv = transpose ? at[2] : at[1];
	f8_value_id scale_inv_t = transpose ? at[3] : F8_NONE, amax = transpose ? at[4] : at[2];
	f8_status status = f8_lower_bind_output(lw, at[0], F8_KERNEL_PARAM_OUT, &cast->codes);
	if (!status)
		status = f8_lower_bind_output(lw, codes_t, F8_KERNEL_PARAM_OUT, &cast->codes_t);
	if (!status)
		status = f8_lower_bind_output(lw, scale_inv, F8_KERNEL_PARAM_OUT, &cast->scale_inv);
	if (!status)
		status = f8_lower_bind_output(lw, scale_inv_t, F8_KERNEL_PARAM_OUT, &cast->scale_inv_t);
	if (!status)
		status = f8_lower_bind_output(lw, amax, F8_KERNEL_PARAM_ACCUMULATE, &cast->amax);
	f8_node_id guard = f8_lower_amax_guard(lw, amax);
	if (!status && guard != F8_NONE && cast->amax != F8_NONE) // one accumulator per cast
		return f8_lower_fail(lw, guard, "the amax it guards is read outside the kernel too");
	if (!status && guard != F8_NONE) {
		status = f8_lower_bind_output(lw, lw->graph->nodes[guard].outputs[0],
					      F8_KERNEL_PARAM_ACCUMULATE, &cast->amax);
		cast->amax_nan_to_inf = true;
	}
	return status;
}

/* The cast's slot is a size argument of its own, not a constant of the code (as lower.c's
 * casts), so that the kernels of every layer print the same and are shared. */
f8_status f8_lower_cast_slot(f8_lower *lw, f8_lower_cast *cast) {
	uint32_t n = lw->kernel->n_params + 1, sizes = 0;
	f8_kernel_arg *grown = f8_realloc(lw->args, n * sizeof *grown);
	if (!grown)
		return f8_diag_set(lw->diag, F8_ERR_NOMEM, "out of memory");
	lw->args = grown;
	for (uint32_t p = 0; p < lw->kernel->n_params; p++)
		sizes += lw->kernel->params[p].kind == F8_KERNEL_PARAM_SIZE;
	char name[24];
	snprintf(name, sizeof name, "size%u", sizes);
	f8_status status = f8_kir_add_param(lw->kernel, name, F8_KERNEL_PARAM_SIZE, F8_DTYPE_I64,
					    &cast->slot, lw->diag);
	if (!status)
		lw->args[cast->slot] = (f8_kernel_arg){
			.value = F8_NONE, .scratch = F8_NONE,
			.dim = f8_dim_const(f8_node_attr_int(cast->node, "slot", 0))};
	return status;
}

void f8_lower_cast_load_scale(f8_lower *lw, f8_lower_cast *cast) {
	cast->scale_value = f8_kir_load(lw->kernel, cast->scale, f8_kir_size(lw->kernel, cast->slot));
}

f8_status f8_lower_cast_add_accumulator(f8_lower *lw, f8_lower_cast *cast, bool row) {
	if (cast->amax == F8_NONE)
		return F8_OK;
	return f8_kir_add_accumulator(lw->kernel, F8_KIR_COMBINE_MAX, F8_KIR_TYPE_F32,
				      row ? &cast->row_amax : &cast->grid_amax, lw->diag);
}

f8_status f8_lower_cast_store(f8_lower *lw, f8_lower_cast *cast, f8_kir_id x, f8_kir_id index,
			      f8_kir_id index_t) {
	f8_kir_id scaled = EMIT(lw, MUL, x, cast->scale_value, NONE);
	f8_status status = F8_OK;
	if (cast->codes != F8_NONE)
		status = f8_kir_store(lw->kernel, cast->codes, index, scaled, lw->diag);
	if (!status && cast->codes_t != F8_NONE)
		status = f8_kir_store(lw->kernel, cast->codes_t, index_t, scaled, lw->diag);
	if (cast->amax != F8_NONE) {
		f8_kir_id magnitude = EMIT(lw, ABS, x, NONE, NONE);
		if (cast->amax_nan_to_inf)
			magnitude = f8_lower_nan_to_inf(lw, magnitude);
		cast->element_amax = cast->element_amax == NONE
			? magnitude : EMIT(lw, MAX, cast->element_amax, magnitude, NONE);
	}
	return status;
}

f8_status f8_lower_cast_epilogue(f8_lower *lw, f8_lower_cast *cast) {
	f8_kir_id zero = f8_kir_const_i64(lw->kernel, 0);
	f8_status status = F8_OK;
	if (cast->amax != F8_NONE)
		status = f8_kir_atomic(lw->kernel, F8_KIR_COMBINE_MAX, cast->amax, zero,
				       cast->grid_amax, lw->diag);
	f8_kir_id inverse = EMIT(lw, DIV, f8_lower_constant(lw, 1), cast->scale_value, NONE);
	if (!status && cast->scale_inv != F8_NONE)
		status = f8_kir_store(lw->kernel, cast->scale_inv, zero, inverse, lw->diag);
	if (!status && cast->scale_inv_t != F8_NONE)
		status = f8_kir_store(lw->kernel, cast->scale_inv_t, zero, inverse, lw->diag);
	return status;
}

f8_status f8_lower_round_sums(const f8_graph *graph, uint32_t group, f8_node_id *members,
			      uint32_t sums, f8_value_id value, f8_dim count, f8_lowered_group *out,
			      f8_diag *diag) {
	char name[80];
	snprintf(name, sizeof name, "%s_round%u", graph->groups[group].name, out->n_launches);
	f8_lower lw;
	f8_status status = f8_lower_begin(&lw, graph, group, members, 1, name, diag);
	if (status)
		return status;
	uint32_t in, to, p_count;
	status = f8_lower_add_scratch_param(&lw, out, sums, F8_KERNEL_PARAM_IN, &in);
	if (!status)
		status = f8_lower_add_buffer(&lw, value, F8_KERNEL_PARAM_OUT);
	to = lw.kernel->n_params - 1;
	if (!status)
		status = f8_lower_add_size(&lw, count, &p_count);
	f8_kir_id i;
	if (!status) {
		lw.kernel->grid_sizes[0] = p_count;
		lw.kernel->n_grid_sizes = 1;
		status = f8_kir_begin_grid_loop(lw.kernel, f8_kir_size(lw.kernel, p_count), &i, diag);
	}
	if (!status)
		status = f8_kir_store(lw.kernel, to, i, f8_kir_load(lw.kernel, in, i), diag);
	if (!status)
		status = f8_kir_end_loop(lw.kernel, NULL, 0, diag);
	return f8_lower_end(&lw, status, out);
}

bool f8_lower_partials_count(f8_dim rows, int64_t group_rows, int64_t group_partials,
			     f8_dim cols, f8_dim *count) {
	f8_dim partials;
	if (f8_dim_is_const(rows)) {
		int64_t r = f8_dim_value(rows), groups = r > 0 ? (r - 1) / group_rows + 1 : 0;
		if (groups > INT64_MAX / group_partials)
			return false;
		partials = f8_dim_const(groups * group_partials);
	} else if (!f8_dim_add(rows, f8_dim_const(group_partials - 1), &partials)) {
		return false; // ceil(r / g) p <= r + p - 1 for r >= 1 and p <= g: a bound, not exact
	}
	return f8_dim_mul(partials, cols, count);
}

f8_status f8_lower_sum_partials(const f8_graph *graph, uint32_t group, f8_node_id *members,
				const uint32_t *partials, const f8_value_id *values, uint32_t n,
				f8_dim rows, int64_t rows_per_partial, f8_dim cols,
				f8_lowered_group *out, f8_diag *diag) {
	assert(n >= 1 && n <= F8_LOWER_MAX_AMAX && rows_per_partial >= 1);
	char name[80];
	snprintf(name, sizeof name, "%s_sum%u", graph->groups[group].name, out->n_launches);
	f8_lower lw;
	f8_status status = f8_lower_begin(&lw, graph, group, members, 1, name, diag);
	if (status)
		return status;
	uint32_t in[F8_LOWER_MAX_AMAX], to[F8_LOWER_MAX_AMAX], p_rows, p_cols;
	for (uint32_t i = 0; !status && i < n; i++)
		status = f8_lower_add_scratch_param(&lw, out, partials[i], F8_KERNEL_PARAM_IN, &in[i]);
	for (uint32_t i = 0; !status && i < n; i++) {
		to[i] = F8_NONE;
		if (values[i] != F8_NONE &&
		    !(status = f8_lower_add_buffer(&lw, values[i], F8_KERNEL_PARAM_OUT)))
			to[i] = lw.kernel->n_params - 1;
	}
	if (!status)
		status = f8_lower_add_size(&lw, rows, &p_rows);
	if (!status)
		status = f8_lower_add_size(&lw, cols, &p_cols);
	if (status)
		return f8_lower_end(&lw, status, out);
	lw.kernel->grid_sizes[0] = p_cols;
	lw.kernel->n_grid_sizes = 1;
	f8_kernel *k = lw.kernel;
	f8_kir_id width = f8_kir_size(k, p_cols), per = f8_kir_const_i64(k, rows_per_partial);
	f8_kir_id count = EMIT(&lw, DIV, EMIT(&lw, ADD, f8_kir_size(k, p_rows),
					      f8_kir_const_i64(k, rows_per_partial - 1), NONE),
			       per, NONE);
	f8_kir_id c, j, sums[F8_LOWER_MAX_AMAX], terms[F8_LOWER_MAX_AMAX];
	status = f8_kir_begin_grid_loop(k, width, &c, diag);
	if (!status)
		status = f8_kir_begin_block_loop(k, count, &j, diag);
	for (uint32_t i = 0; !status && i < n; i++)
		status = f8_kir_add_accumulator(k, F8_KIR_COMBINE_ADD, F8_KIR_TYPE_F32, &sums[i], diag);
	if (status)
		return f8_lower_end(&lw, status, out);
	f8_kir_id at = EMIT(&lw, ADD, EMIT(&lw, MUL, j, width, NONE), c, NONE);
	for (uint32_t i = 0; i < n; i++)
		terms[i] = f8_kir_load(k, in[i], at);
	status = f8_kir_end_loop(k, terms, n, diag);
	for (uint32_t i = 0; !status && i < n; i++)
		if (to[i] != F8_NONE)
			status = f8_kir_store(k, to[i], c, sums[i], diag);
	if (!status)
		status = f8_kir_end_loop(k, NULL, 0, diag);
	return f8_lower_end(&lw, status, out);
}

f8_kernel_table *f8_lower_table_create(uint32_t n_rows, uint32_t n_columns,
				       const f8_kernel_param_kind *columns, const char *const *names) {
	f8_kernel_table *table = f8_calloc(1, sizeof *table);
	if (!table)
		return NULL;
	*table = (f8_kernel_table){.n_rows = n_rows, .n_columns = n_columns, .names = names};
	table->columns = f8_calloc(n_columns, sizeof *table->columns);
	table->cells = f8_calloc((size_t)n_rows * n_columns + 1, sizeof *table->cells);
	if (!table->columns || !table->cells) {
		f8_kernel_table_destroy(table);
		return NULL;
	}
	for (uint32_t c = 0; c < n_columns; c++)
		table->columns[c] = columns[c];
	for (size_t i = 0; i < (size_t)n_rows * n_columns; i++)
		table->cells[i] = (f8_kernel_table_cell){.value = F8_NONE};
	return table;
}

f8_status f8_lower_add_table_param(f8_lower *lw, f8_kernel_table *table, uint32_t *index) {
	f8_kernel_arg *grown = f8_realloc(lw->args, (lw->kernel->n_params + 1) * sizeof *grown);
	if (!grown)
		return f8_diag_set(lw->diag, F8_ERR_NOMEM, "out of memory");
	lw->args = grown;
	uint32_t tables = 0;
	for (uint32_t p = 0; p < lw->kernel->n_params; p++)
		tables += lw->kernel->params[p].kind == F8_KERNEL_PARAM_TABLE;
	char name[24];
	snprintf(name, sizeof name, "table%u", tables);
	f8_status status = f8_kir_add_param(lw->kernel, name, F8_KERNEL_PARAM_TABLE, F8_DTYPE_I64,
					    index, lw->diag);
	if (!status)
		lw->args[*index] = (f8_kernel_arg){.value = F8_NONE, .scratch = F8_NONE,
						   .table = table};
	return status;
}

/* The element moves of lower_layout.c, and the reductions of lower_reduce.c. */
static bool is_layout_op(f8_op op) {
	switch (op) {
	case F8_OP_RESHAPE:
	case F8_OP_TRANSPOSE:
	case F8_OP_UNSQUEEZE:
	case F8_OP_SQUEEZE:
	case F8_OP_EXPAND:
	case F8_OP_CONCAT:
	case F8_OP_SPLIT:
	case F8_OP_SLICE:
	case F8_OP_SLICE_GRAD:
	case F8_OP_TRILU:
		return true;
	default:
		return false;
	}
}

static bool is_reduce_op(f8_op op) {
	return op == F8_OP_REDUCE_SUM || op == F8_OP_REDUCE_MEAN || op == F8_OP_REDUCE_MAX;
}

/* The mixture-of-experts ops of lower_moe.c (GroupedLinear runs in a library). */
static bool is_moe_op(f8_op op) {
	switch (op) {
	case F8_OP_ROUTER:
	case F8_OP_ROUTER_GRAD:
	case F8_OP_MOE_DISPATCH:
	case F8_OP_MOE_DISPATCH_GRAD:
	case F8_OP_MOE_COMBINE:
	case F8_OP_MOE_COMBINE_GRAD:
		return true;
	default:
		return false;
	}
}

bool f8_lower_file_owns(const f8_graph *graph, const f8_node *node, bool *lowers) {
	if (f8_lower_cast_recipe_owns(node)) { // the casts with a given scale are lower.c's
		*lowers = f8_lower_cast_recipe_lowers(graph, node);
		return true;
	}
	switch (node->op) {
	case F8_OP_LAYER_NORM_GRAD:
	case F8_OP_RMS_NORM_GRAD:
		*lowers = f8_lower_norm_grad_lowers(graph, node);
		return true;
	case F8_OP_SWIGLU:
	case F8_OP_SWIGLU_GRAD:
		*lowers = f8_lower_swiglu_lowers(graph, node);
		return true;
	case F8_OP_EMBEDDING:
	case F8_OP_EMBEDDING_GRAD:
		*lowers = f8_lower_embedding_lowers(graph, node);
		return true;
	case F8_OP_ADAMW:
		*lowers = f8_lower_optimizer_lowers(graph, node);
		return true;
	case F8_OP_CONSTANT_OF_SHAPE: // a zeroing the optimizer takes, or a fill of its own
		*lowers = f8_lower_optimizer_lowers(graph, node) || f8_lower_fill_lowers(graph, node);
		return true;
	case F8_OP_CONSTANT:
		*lowers = f8_lower_fill_lowers(graph, node);
		return true;
	case F8_OP_GLOBAL_NORM:
	case F8_OP_LEARNING_RATE:
		*lowers = f8_lower_optimizer_scalar_lowers(graph, node);
		return true;
	case F8_OP_ROPE:
	case F8_OP_ROPE_GRAD:
		*lowers = f8_lower_rope_lowers(graph, node);
		return true;
	case F8_OP_AMAX:
	case F8_OP_SCALE_FROM_AMAX:
		*lowers = f8_lower_amax_lowers(graph, node);
		return true;
	case F8_OP_CROSS_ENTROPY_SHARD:
	case F8_OP_CROSS_ENTROPY_MERGE:
	case F8_OP_CROSS_ENTROPY_MERGE_GRAD:
	case F8_OP_CROSS_ENTROPY_SHARD_GRAD:
		*lowers = f8_lower_cross_entropy_shard_lowers(graph, node);
		return true;
	case F8_OP_SOFTMAX:
	case F8_OP_SOFTMAX_GRAD:
		*lowers = f8_lower_softmax_lowers(graph, node);
		return true;
	default:
		if (is_layout_op(node->op)) {
			*lowers = f8_lower_layout_lowers(graph, node);
			return true;
		}
		if (is_reduce_op(node->op)) { // a bias gradient in an activation_grad kernel is lower.c's
			*lowers = f8_lower_reduce_lowers(graph, node);
			return true;
		}
		if (is_moe_op(node->op)) {
			*lowers = f8_lower_moe_lowers(graph, node);
			return true;
		}
		*lowers = false;
		return false;
	}
}

/* The families whose kernels start with either of two ops that different files lower. */

static f8_status lower_cast(const f8_graph *graph, uint32_t group, f8_node_id *members,
			    uint32_t n_members, f8_lowered_group *out, f8_diag *diag) {
	if (f8_lower_cast_recipe_owns(&graph->nodes[members[0]])) // it finds its scales
		return f8_lower_cast_recipe(graph, group, members, n_members, out, diag);
	return f8_lower_fused(graph, group, members, n_members, out, diag); // a given scale
}

/* Gelu and GeluGrad are lower.c's elementwise ops, SwiGLU and SwiGLUGrad lower_swiglu.c's. */
static f8_status lower_activation(const f8_graph *graph, uint32_t group, f8_node_id *members,
				  uint32_t n_members, f8_lowered_group *out, f8_diag *diag) {
	f8_op first = graph->nodes[members[0]].op;
	if (first == F8_OP_SWIGLU || first == F8_OP_SWIGLU_GRAD)
		return f8_lower_swiglu(graph, group, members, n_members, out, diag);
	return f8_lower_fused(graph, group, members, n_members, out, diag);
}

/* The cross_entropy family: CrossEntropy and its gradient (lower_multi.c), or the four ops of
 * the vocabulary-parallel loss (lower_cross_entropy_shard.c). */
static bool starts_cross_entropy(f8_op op) {
	switch (op) {
	case F8_OP_CROSS_ENTROPY:
	case F8_OP_CROSS_ENTROPY_GRAD:
	case F8_OP_CROSS_ENTROPY_SHARD:
	case F8_OP_CROSS_ENTROPY_MERGE:
	case F8_OP_CROSS_ENTROPY_MERGE_GRAD:
	case F8_OP_CROSS_ENTROPY_SHARD_GRAD:
		return true;
	default:
		return false;
	}
}

static f8_status lower_cross_entropy(const f8_graph *graph, uint32_t group, f8_node_id *members,
				     uint32_t n_members, f8_lowered_group *out, f8_diag *diag) {
	f8_op op = graph->nodes[members[0]].op; // the loss and its gradients are lone nodes
	if (op == F8_OP_CROSS_ENTROPY_GRAD)
		return f8_lower_cross_entropy_grad(graph, group, members, out, diag);
	if (op == F8_OP_CROSS_ENTROPY)
		return f8_lower_cross_entropy(graph, group, members, out, diag);
	return f8_lower_cross_entropy_shard(graph, group, members, n_members, out, diag);
}

/* The scaling family: the delayed recipe's update of a table (lower_multi.c), or current
 * scaling's scales from amaxes reduced across ranks (lower_amax.c). */
static f8_status lower_scaling(const f8_graph *graph, uint32_t group, f8_node_id *members,
			       uint32_t n_members, f8_lowered_group *out, f8_diag *diag) {
	if (graph->nodes[members[0]].op == F8_OP_SCALE_FROM_AMAX)
		return f8_lower_scale_from_amax_group(graph, group, members, n_members, out, diag);
	return f8_lower_scaling_update(graph, group, members, out, diag); // a lone node
}

/* The reduce family: the ReduceSum, ReduceMean and ReduceMax of lower_reduce.c, or a whole
 * tensor's Amax (lower_amax.c). */
static bool starts_reduce(f8_op op) {
	return is_reduce_op(op) || op == F8_OP_AMAX;
}

static f8_status lower_reduction(const f8_graph *graph, uint32_t group, f8_node_id *members,
				 uint32_t n_members, f8_lowered_group *out, f8_diag *diag) {
	if (graph->nodes[members[0]].op == F8_OP_AMAX)
		return f8_lower_amax_group(graph, group, members, n_members, out, diag);
	return f8_lower_reduce(graph, group, members, n_members, out, diag);
}

/* How a kernel family lowers: the function, and the ops a kernel of it starts with (the fuse
 * pass's seeds, passes/fuse.c seed_family), which that function reads its first member as. */
typedef struct family_lowering {
	f8_status (*lower)(const f8_graph *graph, uint32_t group, f8_node_id *members,
			   uint32_t n_members, f8_lowered_group *out, f8_diag *diag);
	f8_op starts[2]; // the same op twice where one starts it
	bool elementwise; // instead: any elementwise op that starts no other family's kernels
	bool (*starts_op)(f8_op op); // instead: the ops this names (a family of more than two)
} family_lowering;

/* One row per family, named after its enum: the table below is generated from
 * F8_KERNEL_FAMILY_LIST (ir/graph.h), so that a family added there without a row here is a
 * build error, not a kernel nothing lowers. */
#define CAST_ROW {.lower = lower_cast, .starts = {F8_OP_QUANTIZE, F8_OP_CAST_TRANSPOSE}}
#define NORM_ROW {.lower = f8_lower_fused, .starts = {F8_OP_LAYER_NORM, F8_OP_RMS_NORM}}
#define NORM_GRAD_ROW \
	{.lower = f8_lower_norm_grad, .starts = {F8_OP_LAYER_NORM_GRAD, F8_OP_RMS_NORM_GRAD}}
#define ACTIVATION_ROW {.lower = lower_activation, .starts = {F8_OP_GELU, F8_OP_SWIGLU}}
#define ACTIVATION_GRAD_ROW \
	{.lower = lower_activation, .starts = {F8_OP_GELU_GRAD, F8_OP_SWIGLU_GRAD}}
#define ELEMENTWISE_ROW \
	{.lower = f8_lower_fused, .starts = {F8_OP_COUNT, F8_OP_COUNT}, .elementwise = true}
#define CROSS_ENTROPY_ROW \
	{.lower = lower_cross_entropy, .starts = {F8_OP_COUNT, F8_OP_COUNT}, \
	 .starts_op = starts_cross_entropy}
#define OPTIMIZER_ROW {.lower = f8_lower_optimizer, .starts = {F8_OP_ADAMW, F8_OP_ADAMW}}
#define EMBEDDING_ROW {.lower = f8_lower_embedding, .starts = {F8_OP_EMBEDDING, F8_OP_EMBEDDING}}
#define EMBEDDING_GRAD_ROW \
	{.lower = f8_lower_embedding, .starts = {F8_OP_EMBEDDING_GRAD, F8_OP_EMBEDDING_GRAD}}
#define SCALING_ROW \
	{.lower = lower_scaling, .starts = {F8_OP_SCALING_UPDATE, F8_OP_SCALE_FROM_AMAX}}
#define LAYOUT_ROW \
	{.lower = f8_lower_layout, .starts = {F8_OP_COUNT, F8_OP_COUNT}, .starts_op = is_layout_op}
#define REDUCE_ROW \
	{.lower = lower_reduction, .starts = {F8_OP_COUNT, F8_OP_COUNT}, .starts_op = starts_reduce}
#define FILL_ROW {.lower = f8_lower_fill, .starts = {F8_OP_CONSTANT, F8_OP_CONSTANT_OF_SHAPE}}
#define GLOBAL_NORM_ROW \
	{.lower = f8_lower_global_norm, .starts = {F8_OP_GLOBAL_NORM, F8_OP_GLOBAL_NORM}}
#define LEARNING_RATE_ROW \
	{.lower = f8_lower_learning_rate, .starts = {F8_OP_LEARNING_RATE, F8_OP_LEARNING_RATE}}
#define ROPE_ROW {.lower = f8_lower_rope, .starts = {F8_OP_ROPE, F8_OP_ROPE_GRAD}}
#define SOFTMAX_ROW {.lower = f8_lower_softmax, .starts = {F8_OP_SOFTMAX, F8_OP_SOFTMAX_GRAD}}
#define MOE_ROW \
	{.lower = f8_lower_moe, .starts = {F8_OP_COUNT, F8_OP_COUNT}, .starts_op = is_moe_op}

static const family_lowering families[] = {
#define FAMILY_ROW(e, name) [F8_KERNEL_FAMILY_##e] = e##_ROW,
	F8_KERNEL_FAMILY_LIST(FAMILY_ROW)
#undef FAMILY_ROW
};
static_assert(sizeof families / sizeof families[0] == F8_KERNEL_FAMILY_COUNT,
	      "one lowering per kernel family");

static bool starts(const family_lowering *row, f8_op op) {
	if (row->starts_op)
		return row->starts_op(op);
	return row->starts[0] == op || row->starts[1] == op;
}

/* Whether a kernel of family `family` may start with `op`. */
static bool family_starts(f8_kernel_family family, f8_op op) {
	if (!families[family].elementwise)
		return starts(&families[family], op);
	for (int f = 0; f < F8_KERNEL_FAMILY_COUNT; f++)
		if (starts(&families[f], op))
			return false;
	// A Range, each element from its index, starts the chain that reads it (a Cast).
	return (f8_op_get_info(op)->flags & F8_OPF_ELEMENTWISE) != 0 || op == F8_OP_RANGE;
}

f8_status f8_lower_family_group(const f8_graph *graph, uint32_t group, f8_node_id *members,
				uint32_t n_members, f8_lowered_group *out, f8_diag *diag) {
	f8_kernel_family family = graph->groups[group].family;
	assert((unsigned)family < F8_KERNEL_FAMILY_COUNT);
	if (!family_starts(family, graph->nodes[members[0]].op)) {
		// The text IR may declare any family; each lowering reads its first member as one
		// of the ops its family starts with.
		char where[160];
		f8_graph_describe_node(graph, members[0], where, sizeof where);
		f8_diag_set(diag, F8_ERR_INVALID, "kernel %s (%s) starts with %s, which starts no "
			    "%s kernel", graph->groups[group].name, f8_kernel_family_name(family),
			    where, f8_kernel_family_name(family));
		f8_diag_hint(diag, "the fuse pass starts each kernel with the node that decides "
			     "its family (passes/fuse.c); declare the family of the kernel's "
			     "first member");
		return F8_ERR_INVALID;
	}
	f8_status status = families[family].lower(graph, group, members, n_members, out, diag);
	// A GELU (or SwiGLU) gradient with its E5M2 cast-transpose and bias partials takes 111
	// registers, two blocks an SM, and ncu found it issue-bound at a quarter of the warps; at
	// three blocks ptxas fits it in 80 with no spills (GPT-1.3B's plan). Measured on an H100
	// (2026-12-07 22:52 UTC, tools/bench_gpu.md): GPT-1.3B's 24 GELU gradients a step 20.9 ->
	// 17.9 ms. LayerNormGrad's would spill at 80 (644 bytes), so it keeps ptxas's choice.
	for (uint32_t i = 0; !status && family == F8_KERNEL_FAMILY_ACTIVATION_GRAD &&
			     i < out->n_launches; i++)
		out->launches[i].kernel->min_blocks_per_sm = 3;
	return status;
}
