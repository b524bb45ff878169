/*
 * What the lowering files beyond lower.c and lower_multi.c share (codegen/lower_internal.h):
 * parameters looked up by the value they bind; a cast member (Quantize or CastTranspose with a
 * given per-tensor scale) fused into a kernel that computes its source: its parameters, its
 * scaled stores of both copies, its amax combined per row, per kernel and then atomically, its
 * scale_invs (lower.c has its own for the elementwise and norm groups; these serve
 * lower_norm_grad.c and lower_swiglu.c, whose kernels walk rows and columns themselves); the
 * kernel that rounds f32 sums into a bf16 output; and the dispatch of lower.c to each file's
 * family, so that a new family leaves lower.c as it is.
 */
#include "codegen/lower_internal.h" // f8_lower, f8_lower_cast

#include <stdio.h> // snprintf

#include "ir/alloc.h" // f8_realloc
#include "ir/ops.h"   // f8_node_attr_int

uint32_t f8_lower_find_param(const f8_lower *lw, f8_value_id value) {
	for (uint32_t p = 0; p < lw->kernel->n_params; p++)
		if (lw->args[p].value == value && lw->kernel->params[p].kind != F8_KIR_PARAM_SIZE)
			return p;
	return F8_NONE;
}

f8_status f8_lower_bind_input(f8_lower *lw, f8_value_id value, uint32_t *index) {
	*index = f8_lower_find_param(lw, value);
	if (*index != F8_NONE)
		return F8_OK;
	f8_status status = f8_lower_add_buffer(lw, value, F8_KIR_PARAM_IN);
	if (!status)
		*index = lw->kernel->n_params - 1;
	return status;
}

f8_status f8_lower_bind_output(f8_lower *lw, f8_value_id value, f8_kir_param_kind kind,
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
	f8_status status = f8_lower_bind_output(lw, at[0], F8_KIR_PARAM_OUT, &cast->codes);
	if (!status)
		status = f8_lower_bind_output(lw, codes_t, F8_KIR_PARAM_OUT, &cast->codes_t);
	if (!status)
		status = f8_lower_bind_output(lw, scale_inv, F8_KIR_PARAM_OUT, &cast->scale_inv);
	if (!status)
		status = f8_lower_bind_output(lw, scale_inv_t, F8_KIR_PARAM_OUT, &cast->scale_inv_t);
	if (!status)
		status = f8_lower_bind_output(lw, amax, F8_KIR_PARAM_ACCUMULATE, &cast->amax);
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
		sizes += lw->kernel->params[p].kind == F8_KIR_PARAM_SIZE;
	char name[24];
	snprintf(name, sizeof name, "size%u", sizes);
	f8_status status = f8_kir_add_param(lw->kernel, name, F8_KIR_PARAM_SIZE, F8_DTYPE_I64,
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
	status = f8_lower_add_scratch_param(&lw, out, sums, F8_KIR_PARAM_IN, &in);
	if (!status)
		status = f8_lower_add_buffer(&lw, value, F8_KIR_PARAM_OUT);
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

bool f8_lower_family_owns(const f8_graph *graph, const f8_node *node, bool *lowers) {
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
	case F8_OP_CONSTANT_OF_SHAPE:
		*lowers = f8_lower_optimizer_lowers(graph, node);
		return true;
	default:
		*lowers = false;
		return false;
	}
}

f8_status f8_lower_family_group(const f8_graph *graph, uint32_t group, f8_node_id *members,
				uint32_t n_members, f8_lowered_group *out, f8_diag *diag) {
	if (f8_lower_cast_recipe_owns(&graph->nodes[members[0]]))
		return f8_lower_cast_recipe(graph, group, members, n_members, out, diag);
	switch (graph->nodes[members[0]].op) {
	case F8_OP_LAYER_NORM_GRAD:
	case F8_OP_RMS_NORM_GRAD:
		return f8_lower_norm_grad(graph, group, members, n_members, out, diag);
	case F8_OP_SWIGLU:
	case F8_OP_SWIGLU_GRAD:
		return f8_lower_swiglu(graph, group, members, n_members, out, diag);
	case F8_OP_EMBEDDING:
	case F8_OP_EMBEDDING_GRAD:
		return f8_lower_embedding(graph, group, members, n_members, out, diag);
	case F8_OP_ADAMW:
		return f8_lower_optimizer(graph, group, members, n_members, out, diag);
	default:
		return f8_diag_set(diag, F8_ERR_INVALID, "kernel %s: no lowering file owns its "
				   "first member's op", graph->groups[group].name);
	}
}
