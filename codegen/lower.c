/*
 * Fused groups -> kernel IR (codegen/lower.h).
 *
 * A group iterates over one shape, its anchor: the source of a cast or a norm (the group's
 * first member's first input) or the first member's output otherwise. Elementwise groups run
 * one grid loop over every element of the anchor (no block loop: on the GPU each thread takes
 * elements); a norm group runs one grid iteration per row (the anchor's last axis is the row)
 * with block loops for the row's sums and one for the output. The members are emitted in order
 * into the innermost loop, each reading its inputs from registers when a member made them, else
 * from memory at the element's index, broadcast against the anchor as NumPy does.
 */
#include "codegen/lower.h" // f8_codegen_lower_group, f8_kernel_arg

#include <math.h>   // INFINITY
#include <stdarg.h> // va_list
#include <stdio.h>  // snprintf, vsnprintf
#include <string.h> // strcmp

#include "codegen/lower_internal.h" // f8_lower, f8_lower_*
#include "ir/alloc.h"              // f8_malloc, f8_realloc, f8_free
#include "ir/ops.h"                // f8_node_attr_*

f8_status f8_lower_fail(f8_lower *lw, f8_node_id node, const char *format, ...) {
	char message[F8_DIAG_MESSAGE_MAX];
	va_list args;
	va_start(args, format);
	vsnprintf(message, sizeof message, format, args);
	va_end(args);
	char where[160];
	f8_graph_describe_node(lw->graph, node, where, sizeof where);
	return f8_diag_set(lw->diag, F8_ERR_UNSUPPORTED, "kernel %s: %s: %s",
			   lw->graph->groups[lw->group].name, where, message);
}

static bool is_member(const f8_lower *lw, f8_node_id node) {
	return node != F8_NONE && lw->graph->nodes[node].group == lw->group;
}

static const f8_type *type_of(const f8_lower *lw, f8_value_id value) {
	return &lw->graph->values[value].type;
}

/* The element's register of `value` when a member made it. */
static f8_kir_id reg_of(const f8_lower *lw, f8_value_id value) {
	for (uint32_t i = 0; i < lw->n_regs; i++)
		if (lw->regs[i].value == value)
			return lw->regs[i].reg;
	return F8_KIR_NONE;
}

static f8_status bind_reg(f8_lower *lw, f8_value_id value, f8_kir_id reg) {
	if (reg == F8_KIR_NONE)
		return f8_diag_set(lw->diag, F8_ERR_INVALID, "kernel %s: %s",
				   lw->graph->groups[lw->group].name,
				   f8_kir_error(lw->kernel) ? f8_kir_error(lw->kernel) : "no value");
	if (lw->n_regs == lw->regs_capacity) {
		uint32_t wanted = lw->regs_capacity ? lw->regs_capacity * 2 : 16;
		f8_lower_reg *grown = f8_realloc(lw->regs, wanted * sizeof *grown);
		if (!grown)
			return f8_diag_set(lw->diag, F8_ERR_NOMEM, "out of memory");
		lw->regs = grown;
		lw->regs_capacity = wanted;
	}
	lw->regs[lw->n_regs++] = (f8_lower_reg){value, reg};
	return F8_OK;
}

/* The parameter bound to `value`, or F8_NONE. */
static uint32_t param_of(const f8_lower *lw, f8_value_id value) {
	for (uint32_t i = 0; i < lw->kernel->n_params; i++)
		if (lw->args[i].value == value)
			return i;
	return F8_NONE;
}

/* True when `value`, made by a member, is needed outside the group: read by another node of
 * the program, a graph output, or the source of an update. */
bool f8_lower_escapes(const f8_lower *lw, f8_value_id value) {
	const f8_graph *graph = lw->graph;
	for (uint32_t i = 0; i < graph->n_outputs; i++)
		if (graph->outputs[i] == value)
			return true;
	for (uint32_t i = 0; i < graph->n_updates; i++)
		if (graph->updates[i].source == value)
			return true;
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		if (node->group == lw->group)
			continue;
		for (uint32_t j = 0; j < node->n_inputs; j++)
			if (node->inputs[j] == value)
				return true;
	}
	return false;
}

static bool is_float_dtype(f8_dtype dtype) {
	return dtype == F8_DTYPE_F32 || dtype == F8_DTYPE_BF16 || dtype == F8_DTYPE_F16;
}

/* The cast ops' scale is given per tensor: a scalar, or `slot` of a table; they saturate. */
static bool per_tensor_given_scale(const f8_graph *graph, const f8_node *node) {
	if (node->n_inputs < 2 || node->inputs[1] == F8_NONE || f8_node_attr(node, "block") ||
	    !f8_node_attr_int(node, "saturate", 1))
		return false;
	const f8_type *scale = &graph->values[node->inputs[1]].type;
	if (scale->dtype != F8_DTYPE_F32)
		return false;
	if (f8_node_attr(node, "slot"))
		return true;
	f8_dim numel;
	return f8_shape_numel(&scale->shape, &numel) && f8_dim_is_const(numel) &&
	       f8_dim_value(numel) == 1;
}

bool f8_lower_sums_leading_axes(const f8_graph *graph, const f8_node *node) {
	int rank = graph->values[node->inputs[0]].type.shape.rank;
	const f8_attr *axes = f8_node_attr(node, "axes");
	if (rank < 2 || !axes || axes->ints.n != (uint32_t)rank - 1)
		return false;
	for (uint32_t i = 0; i < axes->ints.n; i++) {
		int axis;
		if (!f8_axis_normalize(axes->ints.items[i], rank, false, &axis) || axis != (int)i)
			return false;
	}
	return true;
}

static bool elementwise_op_lowers(f8_op op) {
	switch (op) {
	case F8_OP_ADD:
	case F8_OP_SUB:
	case F8_OP_MUL:
	case F8_OP_DIV:
	case F8_OP_SQRT:
	case F8_OP_RECIPROCAL:
	case F8_OP_NEG:
	case F8_OP_ABS:
	case F8_OP_EXP:
	case F8_OP_LOG:
	case F8_OP_TANH:
	case F8_OP_ERF:
	case F8_OP_COS:
	case F8_OP_SIN:
	case F8_OP_SIGMOID:
	case F8_OP_MAX:
	case F8_OP_MIN:
	case F8_OP_RELU:
	case F8_OP_NAN_TO_INF:
	case F8_OP_IDENTITY:
	case F8_OP_WHERE:
	case F8_OP_CAST:
	case F8_OP_GELU:
	case F8_OP_GELU_GRAD:
		return true;
	default:
		return false;
	}
}

/* An op of i64 arithmetic that is exact in i64 registers as the reference's (an iteration
 * counter's increment): every input and the output i64. */
static bool integer_arithmetic(const f8_graph *graph, const f8_node *node) {
	switch (node->op) {
	case F8_OP_ADD:
	case F8_OP_SUB:
	case F8_OP_MUL:
	case F8_OP_MAX:
	case F8_OP_MIN:
	case F8_OP_IDENTITY:
		break;
	default:
		return false;
	}
	if (node->n_outputs != 1 || graph->values[node->outputs[0]].type.dtype != F8_DTYPE_I64)
		return false;
	for (uint32_t i = 0; i < node->n_inputs; i++)
		if (node->inputs[i] == F8_NONE ||
		    graph->values[node->inputs[i]].type.dtype != F8_DTYPE_I64)
			return false;
	return true;
}

/* The losses and the scaling update read integer labels and counts among their inputs. */
static bool row_family_lowers(const f8_graph *graph, const f8_node *node) {
	const f8_value *v = graph->values;
	switch (node->op) {
	case F8_OP_CROSS_ENTROPY:
		return is_float_dtype(v[node->inputs[0]].type.dtype) &&
		       v[node->inputs[1]].type.dtype == F8_DTYPE_I64 &&
		       v[node->outputs[0]].type.dtype == F8_DTYPE_F32 &&
		       (node->n_outputs < 2 || v[node->outputs[1]].type.dtype == F8_DTYPE_F32);
	case F8_OP_CROSS_ENTROPY_GRAD:
		return v[node->inputs[0]].type.dtype == F8_DTYPE_F32 &&
		       is_float_dtype(v[node->inputs[1]].type.dtype) &&
		       v[node->inputs[2]].type.dtype == F8_DTYPE_I64 &&
		       v[node->inputs[3]].type.dtype == F8_DTYPE_F32 &&
		       (v[node->outputs[0]].type.dtype == F8_DTYPE_F32 ||
			v[node->outputs[0]].type.dtype == F8_DTYPE_BF16);
	case F8_OP_SCALING_UPDATE:
		return v[node->inputs[1]].type.shape.rank == 2 &&
		       v[node->inputs[2]].type.dtype == F8_DTYPE_I64;
	default:
		return false;
	}
}

bool f8_codegen_can_lower(const f8_graph *graph, f8_node_id id) {
	const f8_node *node = &graph->nodes[id];
	// A grouped cast's groups are data (the rows per expert): the reference kernel runs it.
	if ((node->op == F8_OP_QUANTIZE || node->op == F8_OP_CAST_TRANSPOSE) &&
	    f8_node_attr_int(node, "grouped", 0))
		return false;
	if (node->op == F8_OP_CROSS_ENTROPY || node->op == F8_OP_CROSS_ENTROPY_GRAD ||
	    node->op == F8_OP_SCALING_UPDATE)
		return row_family_lowers(graph, node);
	bool lowers; // the ops of the other lowering files (codegen/lower_members.c)
	if (f8_lower_file_owns(graph, node, &lowers))
		return lowers;
	if (integer_arithmetic(graph, node))
		return true;
	if (node->op == F8_OP_RANGE) { // an integer register per element, stored as any of these
		f8_dtype out = graph->values[node->outputs[0]].type.dtype;
		return out == F8_DTYPE_F32 || out == F8_DTYPE_BF16 || out == F8_DTYPE_I64 ||
		       out == F8_DTYPE_I32;
	}
	for (uint32_t i = 0; i < node->n_inputs; i++) {
		f8_value_id input = node->inputs[i];
		if (input == F8_NONE)
			continue;
		f8_dtype dtype = graph->values[input].type.dtype;
		bool condition = node->op == F8_OP_WHERE && i == 0 && dtype == F8_DTYPE_BOOL;
		// A Cast to f32 or bf16 (below) of an integer or bool: positions for RoPE's table.
		bool integer_cast = node->op == F8_OP_CAST &&
			(dtype == F8_DTYPE_I64 || dtype == F8_DTYPE_I32 || dtype == F8_DTYPE_BOOL);
		if (!condition && !integer_cast && !is_float_dtype(dtype))
			return false;
	}
	if (elementwise_op_lowers(node->op)) {
		f8_dtype out = graph->values[node->outputs[0]].type.dtype;
		return node->n_outputs == 1 && (out == F8_DTYPE_F32 || out == F8_DTYPE_BF16);
	}
	switch (node->op) {
	case F8_OP_LAYER_NORM:
	case F8_OP_RMS_NORM: {
		int rank = graph->values[node->inputs[0]].type.shape.rank, axis;
		return rank >= 1 &&
		       f8_axis_normalize(f8_node_attr_int(node, "axis", -1), rank, false, &axis) &&
		       axis == rank - 1;
	}
	case F8_OP_QUANTIZE:
	case F8_OP_CAST_TRANSPOSE:
		return per_tensor_given_scale(graph, node);
	default:
		return false;
	}
}

static f8_status grow_args(f8_lower *lw) {
	uint32_t n = lw->kernel->n_params + 1;
	f8_kernel_arg *grown = f8_realloc(lw->args, n * sizeof *grown);
	if (!grown)
		return f8_diag_set(lw->diag, F8_ERR_NOMEM, "out of memory");
	lw->args = grown;
	return F8_OK;
}

/* Parameters are named by kind and position (in0, out1, acc0, size2), not after the values they
 * bind, so that the groups of identical layers lower to identical kernels. */
f8_status f8_lower_add_buffer(f8_lower *lw, f8_value_id value, f8_kernel_param_kind kind) {
	f8_status status = grow_args(lw);
	uint32_t index, same_kind = 0;
	for (uint32_t p = 0; p < lw->kernel->n_params; p++)
		same_kind += lw->kernel->params[p].kind == kind;
	char name[24];
	snprintf(name, sizeof name, "%s%u", f8_kernel_param_kind_name(kind), same_kind);
	const f8_value *v = &lw->graph->values[value];
	if (!status)
		status = f8_kir_add_param(lw->kernel, name, kind, v->type.dtype, &index, lw->diag);
	if (!status)
		lw->args[index] = (f8_kernel_arg){.value = value, .scratch = F8_NONE};
	return status;
}

/* The amax output of a cast member (Quantize's third, CastTranspose's fifth), or F8_NONE. */
static f8_value_id amax_output(const f8_node *node) {
	if (node->op == F8_OP_QUANTIZE)
		return node->n_outputs > 2 ? node->outputs[2] : F8_NONE;
	if (node->op == F8_OP_CAST_TRANSPOSE)
		return node->outputs[4];
	return F8_NONE;
}

static bool is_cast(const f8_node *node) {
	return node->op == F8_OP_QUANTIZE || node->op == F8_OP_CAST_TRANSPOSE;
}

/* A bias gradient `value` that leaves the group: its partial sums' scratch and OUT parameter,
 * a partial per 16 rows of a tile (`tiled`: lower_tile.c's sum loop) or else per element (a
 * norm group's, or an elementwise group's that does not tile: the ReduceSum's input itself in
 * f32, a tensor's worth of traffic, where one atomic per element was as much; such groups are
 * rare, the fuse pass's bias gradients tile), added in order by a second kernel. */
static f8_status add_partial_sum(f8_lower *lw, f8_lowered_group *out, bool tiled,
				 f8_value_id value) {
	if (lw->n_partial_sums == F8_LOWER_MAX_AMAX)
		return f8_lower_fail(lw, lw->graph->values[value].producer, "more than %d bias "
				     "gradients", F8_LOWER_MAX_AMAX);
	int rank = lw->anchor.rank;
	f8_dim rows = f8_dim_const(1), count;
	bool fits = true;
	for (int d = 0; fits && d + 1 < rank; d++)
		fits = f8_dim_mul(rows, lw->anchor.dims[d], &rows);
	lw->anchor_rows = rows;
	lw->anchor_cols = rank ? lw->anchor.dims[rank - 1] : f8_dim_const(1);
	lw->partial_rows = tiled ? F8_LOWER_TILE_SUM_ROWS : 1;
	if (!fits || !f8_lower_partials_count(rows, tiled ? F8_LOWER_TILE : 1,
					      tiled ? F8_LOWER_TILE / F8_LOWER_TILE_SUM_ROWS : 1,
					      lw->anchor_cols, &count))
		return f8_lower_fail(lw, lw->graph->values[value].producer,
				     "its partial sums' size overflows");
	f8_lower_partial_sum *sum = &lw->partial_sums[lw->n_partial_sums];
	*sum = (f8_lower_partial_sum){.value = value};
	f8_status status = f8_lower_add_scratch(out, F8_DTYPE_F32, count, &sum->scratch, lw->diag);
	if (!status)
		status = f8_lower_add_scratch_param(lw, out, sum->scratch, F8_KERNEL_PARAM_OUT,
						    &sum->param);
	if (!status)
		lw->n_partial_sums++;
	return status;
}

/* Parameters: what the group reads, what leaves it (and what a tiled group or a norm's
 * transposes need besides: lower_tile.c, when `tiled` or a norm), the anchor's sizes. */
static f8_status add_params(f8_lower *lw, f8_lowered_group *out, bool tiled) {
	f8_status status = F8_OK;
	for (uint32_t m = 0; !status && m < lw->n_members; m++) {
		const f8_node *node = &lw->graph->nodes[lw->members[m]];
		for (uint32_t i = 0; !status && i < node->n_inputs; i++) {
			f8_value_id input = node->inputs[i];
			if (input != F8_NONE && !is_member(lw, lw->graph->values[input].producer) &&
			    param_of(lw, input) == F8_NONE)
				status = f8_lower_add_buffer(lw, input, F8_KERNEL_PARAM_IN);
		}
	}
	for (uint32_t m = 0; !status && m < lw->n_members; m++) {
		const f8_node *node = &lw->graph->nodes[lw->members[m]];
		for (uint32_t o = 0; !status && o < node->n_outputs; o++) {
			f8_value_id output = node->outputs[o];
			if (!f8_lower_escapes(lw, output))
				continue;
			if (node->op == F8_OP_REDUCE_SUM) {
				status = add_partial_sum(lw, out, tiled, output);
				continue;
			}
			// An amax's guard's output is the amax it guards, combined with its NaN
			// as +inf (f8_lower_amax_guard).
			bool guard = f8_lower_is_amax_guard(lw, node);
			bool combined = output == amax_output(node) || guard;
			status = f8_lower_add_buffer(lw, output,
					    combined ? F8_KERNEL_PARAM_ACCUMULATE : F8_KERNEL_PARAM_OUT);
			if (!status && combined) {
				if (lw->n_amax == F8_LOWER_MAX_AMAX)
					return f8_lower_fail(lw, lw->members[m], "more than %d amaxes",
							  F8_LOWER_MAX_AMAX);
				lw->amax[lw->n_amax++] = (f8_lower_amax){
					.value = guard ? node->inputs[0] : output,
					.param = lw->kernel->n_params - 1, .nan_to_inf = guard,
					.element = NONE, .row_result = NONE, .grid_result = NONE};
			}
		}
	}
	if (!status && (tiled || lw->norm))
		status = f8_lower_tile_begin(lw, out);
	// Sizes: one per distinct dim of the anchor; then each cast's slot in its scaling table,
	// an argument of its own (not folded into the code), so that the casts of every layer
	// share one kernel.
	for (int k = 0; !status && k < lw->anchor.rank; k++) {
		uint32_t index;
		status = f8_lower_add_size(lw, lw->anchor.dims[k], &index);
	}
	for (uint32_t m = 0; !status && m < lw->n_members; m++) {
		const f8_node *node = &lw->graph->nodes[lw->members[m]];
		if (!is_cast(node))
			continue;
		uint32_t sizes = 0, index;
		for (uint32_t p = 0; p < lw->kernel->n_params; p++)
			sizes += lw->kernel->params[p].kind == F8_KERNEL_PARAM_SIZE;
		char name[24];
		snprintf(name, sizeof name, "size%u", sizes);
		status = grow_args(lw);
		if (!status)
			status = f8_kir_add_param(lw->kernel, name, F8_KERNEL_PARAM_SIZE, F8_DTYPE_I64,
						  &index, lw->diag);
		if (!status)
			lw->args[index] = (f8_kernel_arg){
				.value = F8_NONE, .scratch = F8_NONE,
				.dim = f8_dim_const(f8_node_attr_int(node, "slot", 0))};
		if (!status && lw->n_slot_params == F8_LOWER_MAX_AMAX)
			return f8_lower_fail(lw, lw->members[m], "more than %d casts", F8_LOWER_MAX_AMAX);
		if (!status)
			lw->slot_params[lw->n_slot_params++] = index;
	}
	return status;
}

/* The size parameter holding `dim`. */
uint32_t f8_lower_size_param(const f8_lower *lw, f8_dim dim) {
	for (uint32_t p = 0; p < lw->kernel->n_params; p++)
		if (lw->kernel->params[p].kind == F8_KERNEL_PARAM_SIZE && f8_dim_equal(lw->args[p].dim, dim))
			return p;
	return F8_NONE;
}

/*
 * The index into a buffer of `shape` that broadcasts to the anchor, of the current element:
 * the element itself, a scalar, a row vector (the last axis), a column (all but the last), or
 * in general the sum of the coordinates of the axes it does not broadcast times their strides.
 * F8_KIR_NONE when `shape` does not broadcast to the anchor.
 */
static f8_kir_id broadcast_index(f8_lower *lw, const f8_shape *shape) {
	const f8_shape *anchor = &lw->anchor;
	if (f8_shape_equal(shape, anchor))
		return lw->index;
	int n = anchor->rank, m = shape->rank, offset = n - m;
	if (m > n)
		return NONE;
	bool scalar = true, row_vector = m >= 1, column = m >= 1;
	for (int k = 0; k < m; k++) {
		f8_dim dim = shape->dims[k], full = anchor->dims[offset + k];
		bool one = f8_dim_is_const(dim) && f8_dim_value(dim) == 1;
		if (!one && !f8_dim_equal(dim, full))
			return NONE;
		scalar = scalar && one;
		bool last = k == m - 1;
		row_vector = row_vector && (last ? f8_dim_equal(dim, full) : one);
		column = column && (last ? one : f8_dim_equal(dim, full));
	}
	if (scalar)
		return f8_kir_const_i64(lw->kernel, 0);
	if (row_vector)
		return lw->col;
	if (column && offset == 0)
		return lw->row;
	// The element's coordinate along the last axis is its column, along a leading axis
	// (row / the product of the leading axes after it) % the axis: from the row, which the row,
	// norm and tiled forms have once per row or chunk, not from the flat index per element.
	f8_kir_id index = f8_kir_const_i64(lw->kernel, 0), stride = f8_kir_const_i64(lw->kernel, 1);
	f8_kir_id inner = f8_kir_const_i64(lw->kernel, 1);
	for (int k = n - 1; k >= 0; k--) {
		f8_kir_id extent = lw->dims[k];
		int own = k - offset;
		if (own >= 0 && f8_dim_equal(shape->dims[own], anchor->dims[k])) {
			f8_kir_id coordinate = k == n - 1 ? lw->col
				: EMIT(lw, REM, EMIT(lw, DIV, lw->row, inner, NONE), extent, NONE);
			index = EMIT(lw, ADD, index, EMIT(lw, MUL, coordinate, stride, NONE), NONE);
			stride = EMIT(lw, MUL, stride, extent, NONE);
		}
		if (k < n - 1)
			inner = EMIT(lw, MUL, inner, extent, NONE);
	}
	return index;
}

/* The current element of `value`: a member's register, else a load from its buffer. */
static f8_kir_id element(f8_lower *lw, f8_node_id user, f8_value_id value, f8_status *status) {
	f8_kir_id reg = reg_of(lw, value);
	if (reg != NONE)
		return reg;
	uint32_t param = param_of(lw, value);
	f8_kir_id index = param == F8_NONE ? NONE
					   : broadcast_index(lw, &type_of(lw, value)->shape);
	if (index == NONE) {
		*status = f8_lower_fail(lw, user, "%%%s does not broadcast to the kernel's shape",
				     lw->graph->values[value].name);
		return NONE;
	}
	reg = f8_kir_load_if(lw->kernel, param, index, lw->mask);
	f8_status bound = bind_reg(lw, value, reg);
	if (bound)
		*status = bound;
	return reg;
}

/* `v` rounded to bf16 (nearest even on the bits; NaN kept), as a Cast to bf16 stores it. */
static f8_kir_id round_bf16(f8_lower *lw, f8_kir_id v) {
	f8_kernel *k = lw->kernel;
	f8_kir_id bits = EMIT(lw, BITS, v, NONE, NONE), sixteen = f8_kir_const_i64(k, 16);
	f8_kir_id lsb = EMIT(lw, REM, EMIT(lw, SHR, bits, sixteen, NONE), f8_kir_const_i64(k, 2),
			     NONE);
	f8_kir_id biased = EMIT(lw, ADD, EMIT(lw, ADD, bits, f8_kir_const_i64(k, 0x7FFF), NONE),
				lsb, NONE);
	f8_kir_id rounded = EMIT(lw, SHL, EMIT(lw, SHR, biased, sixteen, NONE), sixteen, NONE);
	return EMIT(lw, SELECT, EMIT(lw, IS_NAN, v, NONE, NONE), v,
		    EMIT(lw, FROM_BITS, rounded, NONE, NONE));
}

/* The value stored as `dtype` reads back as: rounded for bf16, itself for f32. */
f8_kir_id f8_lower_round_to(f8_lower *lw, f8_dtype dtype, f8_kir_id v) {
	return dtype == F8_DTYPE_BF16 ? round_bf16(lw, v) : v;
}

/* An i64 or i1 register as an f32 (to_f32: nearest even). A bf16 output rounds that f32
 * again, as the reference's stores do (runtime/tensor.c: a double through float to bf16), so
 * that both round the integer twice alike (2^25 + 2^17 + 1: 2^25 + 2^17 as an f32, then 2^25,
 * where one rounding would give 2^25 + 2^18). */
static f8_kir_id integer_to_float(f8_lower *lw, f8_kir_id v) {
	return EMIT(lw, TO_F32, v, NONE, NONE);
}

/* Element lw->index of a Range: start + index * delta in i64, as the dtype of its output. */
static f8_kir_id range_element(f8_lower *lw, const f8_node *node) {
	f8_kernel *k = lw->kernel;
	f8_kir_id start = f8_kir_const_i64(k, f8_node_attr_int(node, "start", 0));
	f8_kir_id delta = f8_kir_const_i64(k, f8_node_attr_int(node, "delta", 1));
	f8_kir_id v = EMIT(lw, ADD, start, EMIT(lw, MUL, lw->index, delta, NONE), NONE);
	f8_dtype dtype = lw->graph->values[node->outputs[0]].type.dtype;
	return f8_kir_type_of_dtype(dtype) == F8_KIR_TYPE_F32 ? integer_to_float(lw, v) : v;
}

f8_kir_id f8_lower_constant(f8_lower *lw, double value) {
	return f8_kir_const_f32(lw->kernel, value);
}

f8_kir_id f8_lower_nan_to_inf(f8_lower *lw, f8_kir_id v) {
	return EMIT(lw, SELECT, EMIT(lw, IS_NAN, v, NONE, NONE), f8_lower_constant(lw, INFINITY), v);
}

/*
 * GELU's tanh form through its sigmoid: 0.5 (1 + tanh u) = 1 / (1 + e^(-2u)), u = sqrt(2 / pi)
 * (x + 0.044715 x^3), one exp and one division where tanh takes an odd polynomial, an exp and
 * a division and selects between them: on the GPU, GELU and its gradient are issue-bound
 * (tools/bench_gpu.md). It is also the more accurate f32 form where x < 0: 1 + tanh u cancels
 * there, 1 / (1 + e^(-2u)) does not. The reference (runtime/cpu/kernels_nn.c) computes the
 * tanh form in double. -2u = x (k1 + k2 x^2), k1 = -2 sqrt(2 / pi), k2 = 0.044715 k1.
 */
static const double GELU_K1 = -1.59576912160573071176, GELU_K2 = -0.07135481627260024878;

/* e^(-2u) of the tanh form. */
static f8_kir_id gelu_exp(f8_lower *lw, f8_kir_id x) {
	f8_kir_id xx = EMIT(lw, MUL, x, x, NONE);
	f8_kir_id minus_2u = EMIT(lw, MUL, x,
				  EMIT(lw, ADD, f8_lower_constant(lw, GELU_K1),
				       EMIT(lw, MUL, f8_lower_constant(lw, GELU_K2), xx, NONE), NONE),
				  NONE);
	return EMIT(lw, EXP, minus_2u, NONE, NONE);
}

/* 0.5 x (1 + erf(x / sqrt 2)), or the tanh form x / (1 + e^(-2u)). */
static f8_kir_id gelu(f8_lower *lw, f8_kir_id x, bool tanh_form) {
	if (tanh_form)
		return EMIT(lw, DIV, x, EMIT(lw, ADD, f8_lower_constant(lw, 1), gelu_exp(lw, x), NONE),
			    NONE);
	f8_kir_id inner = EMIT(lw, ERF, EMIT(lw, MUL, x, f8_lower_constant(lw, 0.70710678118654752440), NONE),
			       NONE, NONE);
	f8_kir_id half_x = EMIT(lw, MUL, f8_lower_constant(lw, 0.5), x, NONE);
	return EMIT(lw, MUL, half_x, EMIT(lw, ADD, f8_lower_constant(lw, 1), inner, NONE), NONE);
}

/*
 * gelu'(x), as runtime/cpu/kernels_grad_nn.c's gelu_derivative. The tanh form with s the
 * sigmoid above: s + x s (1 - s) 2 u'(x), 2 u' = -(k1 + 3 k2 x^2). 1 - s is e s where e =
 * e^(-2u) < 1: 1 - s there would cancel (s near 1 for x above about 2 keeps only the bits of
 * its own rounding), e s does not; elsewhere s <= 1/2 and 1 - s is exact enough, and e s would
 * be infinity times 0 where e^(-2u) overflows (x below about -10). x s first, so that s = 0
 * there makes the term 0.
 */
static f8_kir_id gelu_derivative(f8_lower *lw, f8_kir_id x, bool tanh_form) {
	f8_kir_id one = f8_lower_constant(lw, 1), half = f8_lower_constant(lw, 0.5);
	f8_kir_id xx = EMIT(lw, MUL, x, x, NONE);
	if (!tanh_form) {
		f8_kir_id cdf = EMIT(lw, MUL, half,
				     EMIT(lw, ADD, one,
					  EMIT(lw, ERF, EMIT(lw, MUL, x, f8_lower_constant(lw, 0.70710678118654752440), NONE), NONE, NONE),
					  NONE),
				     NONE);
		f8_kir_id density = EMIT(lw, EXP, EMIT(lw, MUL, f8_lower_constant(lw, -0.5), xx, NONE), NONE, NONE);
		f8_kir_id pdf = EMIT(lw, MUL, EMIT(lw, MUL, x, density, NONE),
				     f8_lower_constant(lw, 0.39894228040143267794), NONE);
		return EMIT(lw, ADD, cdf, pdf, NONE);
	}
	f8_kir_id e = gelu_exp(lw, x);
	f8_kir_id s = EMIT(lw, DIV, one, EMIT(lw, ADD, one, e, NONE), NONE);
	f8_kir_id one_minus_s = EMIT(lw, SELECT, EMIT(lw, LT, e, one, NONE), EMIT(lw, MUL, e, s, NONE),
				     EMIT(lw, SUB, one, s, NONE));
	f8_kir_id du2 = EMIT(lw, ADD, f8_lower_constant(lw, -GELU_K1),
			     EMIT(lw, MUL, f8_lower_constant(lw, -3 * GELU_K2), xx, NONE), NONE);
	f8_kir_id slope = EMIT(lw, MUL, EMIT(lw, MUL, EMIT(lw, MUL, x, s, NONE), one_minus_s, NONE),
			       du2, NONE);
	return EMIT(lw, ADD, s, slope, NONE);
}

/* The f32 arithmetic of an elementwise member on its inputs' elements `in`. */
static f8_kir_id elementwise(f8_lower *lw, const f8_node *node, const f8_kir_id *in) {
	bool tanh_form = strcmp(f8_node_attr_string(node, "approximate", "none"), "tanh") == 0;
	switch (node->op) {
	case F8_OP_ADD: return EMIT(lw, ADD, in[0], in[1], NONE);
	case F8_OP_SUB: return EMIT(lw, SUB, in[0], in[1], NONE);
	case F8_OP_MUL: return EMIT(lw, MUL, in[0], in[1], NONE);
	case F8_OP_DIV: return EMIT(lw, DIV, in[0], in[1], NONE);
	case F8_OP_MAX: return EMIT(lw, MAX, in[0], in[1], NONE);
	case F8_OP_MIN: return EMIT(lw, MIN, in[0], in[1], NONE);
	case F8_OP_SQRT: return EMIT(lw, SQRT, in[0], NONE, NONE);
	case F8_OP_RECIPROCAL: return EMIT(lw, DIV, f8_lower_constant(lw, 1), in[0], NONE);
	case F8_OP_NEG: return EMIT(lw, NEG, in[0], NONE, NONE);
	case F8_OP_ABS: return EMIT(lw, ABS, in[0], NONE, NONE);
	case F8_OP_EXP: return EMIT(lw, EXP, in[0], NONE, NONE);
	case F8_OP_LOG: return EMIT(lw, LOG, in[0], NONE, NONE);
	case F8_OP_TANH: return EMIT(lw, TANH, in[0], NONE, NONE);
	case F8_OP_ERF: return EMIT(lw, ERF, in[0], NONE, NONE);
	case F8_OP_COS: return EMIT(lw, COS, in[0], NONE, NONE);
	case F8_OP_SIN: return EMIT(lw, SIN, in[0], NONE, NONE);
	case F8_OP_RANGE: return range_element(lw, node);
	case F8_OP_SIGMOID: {
		f8_kir_id e = EMIT(lw, EXP, EMIT(lw, NEG, in[0], NONE, NONE), NONE, NONE);
		return EMIT(lw, DIV, f8_lower_constant(lw, 1), EMIT(lw, ADD, f8_lower_constant(lw, 1), e, NONE), NONE);
	}
	case F8_OP_RELU: { // x > 0 or NaN ? x : 0, as the reference
		f8_kir_id keep = EMIT(lw, OR, EMIT(lw, LT, f8_lower_constant(lw, 0), in[0], NONE),
				      EMIT(lw, IS_NAN, in[0], NONE, NONE), NONE);
		return EMIT(lw, SELECT, keep, in[0], f8_lower_constant(lw, 0));
	}
	case F8_OP_NAN_TO_INF: return f8_lower_nan_to_inf(lw, in[0]);
	case F8_OP_IDENTITY: return in[0];
	case F8_OP_CAST: // of a float: f32 already; of an integer or bool: converted
		if (in[0] != NONE && lw->kernel->insts[in[0]].type != F8_KIR_TYPE_F32)
			return integer_to_float(lw, in[0]);
		return in[0];
	case F8_OP_WHERE: return EMIT(lw, SELECT, in[0], in[1], in[2]);
	case F8_OP_GELU: return gelu(lw, in[0], tanh_form);
	case F8_OP_GELU_GRAD: return EMIT(lw, MUL, in[0], gelu_derivative(lw, in[1], tanh_form), NONE);
	default: return NONE;
	}
}

/* Stores `reg` as `value` at `index` when the value leaves the group (under the element's
 * mask). */
static f8_status store_if_escaping(f8_lower *lw, f8_value_id value, f8_kir_id index, f8_kir_id reg) {
	uint32_t param = param_of(lw, value);
	if (param == F8_NONE)
		return F8_OK;
	return f8_kir_store_if(lw->kernel, param, index, reg, lw->mask, lw->diag);
}

/* A cast member: codes (and the transposed copy: lower_tile.c's where it tiles) at the given
 * scale, and the amax of x (0 for an element outside the tensor). */
static f8_status emit_cast(f8_lower *lw, f8_node_id id, const f8_node *node, f8_kir_id x) {
	f8_kir_id scale = lw->scales[lw->next_scale++];
	f8_kir_id scaled = EMIT(lw, MUL, x, scale, NONE);
	f8_status status = store_if_escaping(lw, node->outputs[0], lw->index, scaled);
	if (!status && node->op == F8_OP_CAST_TRANSPOSE && lw->tile) {
		status = f8_lower_tile_cast(lw, node, x, scale);
	} else if (!status && node->op == F8_OP_CAST_TRANSPOSE) {
		f8_kir_id transposed = EMIT(lw, ADD, EMIT(lw, MUL, lw->col, lw->rows, NONE), lw->row, NONE);
		status = store_if_escaping(lw, node->outputs[1], transposed, scaled);
	}
	for (uint32_t a = 0; a < lw->n_amax; a++) {
		if (lw->amax[a].value != amax_output(node))
			continue;
		f8_kir_id magnitude = EMIT(lw, ABS, x, NONE, NONE);
		if (lw->amax[a].nan_to_inf)
			magnitude = f8_lower_nan_to_inf(lw, magnitude);
		lw->amax[a].element = lw->mask == NONE
			? magnitude : EMIT(lw, SELECT, lw->mask, magnitude, f8_lower_constant(lw, 0));
	}
	(void)id;
	return status;
}

/* One member at the current element: its outputs into registers, stored where they leave. */
f8_status f8_lower_emit_member(f8_lower *lw, f8_node_id id) {
	const f8_node *node = &lw->graph->nodes[id];
	if (f8_lower_is_amax_guard(lw, node)) // its amax's, emit_cast's, made NaN as +inf
		return F8_OK;
	f8_status status = F8_OK;
	f8_kir_id in[3] = {NONE, NONE, NONE};
	for (uint32_t i = 0; i < node->n_inputs && i < 3; i++) {
		if (is_cast(node) && i == 1)
			break; // the scale, loaded once at the top
		if (node->inputs[i] != F8_NONE)
			in[i] = element(lw, id, node->inputs[i], &status);
	}
	if (status)
		return status;
	if (is_cast(node))
		return emit_cast(lw, id, node, in[0]);
	if (node->op == F8_OP_REDUCE_SUM && lw->tile)
		return f8_lower_tile_sum(lw, node, in[0]);
	if (node->op == F8_OP_REDUCE_SUM) { // a partial per element (add_partial_sum)
		uint32_t param = f8_lower_partial_param(lw, node->outputs[0]);
		return param == F8_NONE ? F8_OK
					: f8_kir_store_if(lw->kernel, param, lw->index, in[0], lw->mask,
							  lw->diag);
	}
	f8_value_id output = node->outputs[0];
	if (!f8_shape_equal(&type_of(lw, output)->shape, &lw->anchor))
		return f8_lower_fail(lw, id, "its output's shape is not the kernel's");
	f8_kir_id reg = f8_lower_round_to(lw, type_of(lw, output)->dtype, elementwise(lw, node, in));
	status = bind_reg(lw, output, reg);
	if (!status)
		status = store_if_escaping(lw, output, lw->index, reg);
	return status;
}

/* Top level: the anchor's dims, rows and cols, and each cast's scale and 1 / scale. */
static f8_status emit_top(f8_lower *lw) {
	f8_kernel *k = lw->kernel;
	for (int d = 0; d < lw->anchor.rank; d++)
		lw->dims[d] = f8_kir_size(k, f8_lower_size_param(lw, lw->anchor.dims[d]));
	int rank = lw->anchor.rank;
	lw->cols = rank ? lw->dims[rank - 1] : f8_kir_const_i64(k, 1);
	lw->rows = f8_kir_const_i64(k, 1);
	for (int d = 0; d + 1 < rank; d++)
		lw->rows = EMIT(lw, MUL, lw->rows, lw->dims[d], NONE);
	for (uint32_t m = 0; m < lw->n_members; m++) {
		const f8_node *node = &lw->graph->nodes[lw->members[m]];
		if (!is_cast(node))
			continue;
		if (lw->n_scales == F8_LOWER_MAX_AMAX)
			return f8_lower_fail(lw, lw->members[m], "more than %d casts", F8_LOWER_MAX_AMAX);
		f8_kir_id slot = f8_kir_size(k, lw->slot_params[lw->n_scales]);
		lw->scales[lw->n_scales++] = f8_kir_load(k, param_of(lw, node->inputs[1]), slot);
	}
	return f8_kir_error(k) ? f8_lower_fail(lw, lw->members[0], "%s", f8_kir_error(k)) : F8_OK;
}

/* After the grid loop: the amaxes combined across blocks, the casts' scale_invs. */
static f8_status emit_epilogue(f8_lower *lw) {
	f8_status status = F8_OK;
	for (uint32_t a = 0; !status && a < lw->n_amax; a++)
		status = f8_kir_atomic(lw->kernel, F8_KIR_COMBINE_MAX, lw->amax[a].param,
				       f8_kir_const_i64(lw->kernel, 0), lw->amax[a].grid_result,
				       lw->diag);
	uint32_t cast = 0;
	for (uint32_t m = 0; !status && m < lw->n_members; m++) {
		const f8_node *node = &lw->graph->nodes[lw->members[m]];
		if (!is_cast(node))
			continue;
		f8_kir_id inverse = EMIT(lw, DIV, f8_lower_constant(lw, 1), lw->scales[cast++], NONE);
		f8_kir_id zero = f8_kir_const_i64(lw->kernel, 0);
		// Quantize: codes, scale_inv, amax; CastTranspose: codes, codes_t, scale_inv,
		// scale_inv_t, amax.
		bool transpose = node->op == F8_OP_CAST_TRANSPOSE;
		uint32_t scale_invs[2] = {transpose ? 2 : 1, transpose ? 3 : F8_NONE};
		for (int s = 0; !status && s < 2; s++)
			if (scale_invs[s] != F8_NONE && scale_invs[s] < node->n_outputs)
				status = store_if_escaping(lw, node->outputs[scale_invs[s]], zero, inverse);
	}
	return status;
}

/* Opens the grid loop over `extent` with one max accumulator per amax. */
f8_status f8_lower_begin_grid(f8_lower *lw, f8_kir_id extent, f8_kir_id *var) {
	f8_status status = f8_kir_begin_grid_loop(lw->kernel, extent, var, lw->diag);
	for (uint32_t a = 0; !status && a < lw->n_amax; a++)
		status = f8_kir_add_accumulator(lw->kernel, F8_KIR_COMBINE_MAX, F8_KIR_TYPE_F32,
						&lw->amax[a].grid_result, lw->diag);
	return status;
}

f8_status f8_lower_row_accumulators(f8_lower *lw) {
	f8_status status = F8_OK;
	for (uint32_t a = 0; !status && a < lw->n_amax; a++)
		status = f8_kir_add_accumulator(lw->kernel, F8_KIR_COMBINE_MAX, F8_KIR_TYPE_F32,
						&lw->amax[a].row_result, lw->diag);
	return status;
}

f8_status f8_lower_begin_columns(f8_lower *lw, f8_kir_id extent) {
	f8_kir_id var;
	f8_status status = f8_kir_begin_block_loop(lw->kernel, extent, &var, lw->diag);
	if (!status)
		status = f8_lower_row_accumulators(lw);
	if (status)
		return status;
	lw->col = var;
	lw->index = EMIT(lw, ADD, EMIT(lw, MUL, lw->row, lw->cols, NONE), var, NONE);
	return F8_OK;
}

f8_status f8_lower_end_loop(f8_lower *lw, bool row, f8_status status) {
	if (status)
		return status;
	f8_kir_id values[F8_LOWER_MAX_AMAX]; // 0 for a cast that saw no element: none once every
	for (uint32_t a = 0; a < lw->n_amax; a++) // member was emitted
		values[a] = row ? lw->amax[a].row_result : lw->amax[a].element;
	return f8_kir_end_loop(lw->kernel, values, lw->n_amax, lw->diag);
}

void f8_lower_record_grid_sizes(f8_lower *lw, bool with_last) {
	int n = lw->anchor.rank - (with_last ? 0 : 1);
	lw->kernel->n_grid_sizes = 0;
	for (int d = 0; d < n; d++)
		lw->kernel->grid_sizes[lw->kernel->n_grid_sizes++] = f8_lower_size_param(lw, lw->anchor.dims[d]);
}

/* Elementwise groups: one grid iteration per element of the anchor, or per row where the
 * row form fits (lower_tile.c). */
static f8_status lower_elementwise(f8_lower *lw) {
	if (f8_lower_rows_fit(lw))
		return f8_lower_rows(lw);
	f8_lower_record_grid_sizes(lw, true);
	f8_kir_id extent = EMIT(lw, MUL, lw->rows, lw->cols, NONE), var;
	f8_status status = f8_lower_begin_grid(lw, extent, &var);
	if (status)
		return status;
	lw->index = var;
	lw->row = EMIT(lw, DIV, var, lw->cols, NONE);
	lw->col = EMIT(lw, REM, var, lw->cols, NONE);
	for (uint32_t m = 0; !status && m < lw->n_members; m++)
		status = f8_lower_emit_member(lw, lw->members[m]);
	return f8_lower_end_loop(lw, false, status);
}

/* The norm's input at column `col` of the row: from memory (kept in shared array `kept` when
 * that is not F8_NONE and this is the `first` pass over the row), or from `kept`. */
static f8_kir_id row_element(f8_lower *lw, uint32_t x_param, uint32_t kept, bool first,
			     f8_kir_id col, f8_status *status) {
	if (kept != F8_NONE && !first)
		return f8_kir_load_shared(lw->kernel, kept, col);
	f8_kir_id at = EMIT(lw, ADD, EMIT(lw, MUL, lw->row, lw->cols, NONE), col, NONE);
	f8_kir_id v = f8_kir_load(lw->kernel, x_param, at);
	if (kept != F8_NONE)
		*status = f8_kir_store_shared(lw->kernel, kept, col, v, lw->diag);
	return v;
}

/* A block loop over the row (`extent` columns) summing `square ? (x - shift)^2 : x` (shift
 * NONE: none), x as row_element gives it. */
static f8_status row_sum(f8_lower *lw, f8_kir_id extent, uint32_t x_param, uint32_t kept,
			 bool first, f8_kir_id shift, bool square, f8_kir_id *sum) {
	f8_kir_id var;
	f8_status status = f8_kir_begin_block_loop(lw->kernel, extent, &var, lw->diag);
	if (!status)
		status = f8_kir_add_accumulator(lw->kernel, F8_KIR_COMBINE_ADD, F8_KIR_TYPE_F32, sum,
						lw->diag);
	if (status)
		return status;
	f8_kir_id v = row_element(lw, x_param, kept, first, var, &status);
	if (status)
		return status;
	if (shift != NONE)
		v = EMIT(lw, SUB, v, shift, NONE);
	if (square)
		v = EMIT(lw, MUL, v, v, NONE);
	return f8_kir_end_loop(lw->kernel, &v, 1, lw->diag);
}

/*
 * Norm groups: per row, the statistics (LayerNorm: mean, then the mean square of x - mean;
 * RMSNorm: the mean square), then one block loop for the output and the other members. Where
 * the row is kept in shared memory its length is a constant of the kernel already, and the
 * block loops run to that constant, so that the GPU's vector form may give each thread its
 * chunks of the row at once (codegen/llvm_loops.c).
 */
static f8_status lower_norm(f8_lower *lw) {
	f8_node_id norm_id = lw->members[0];
	const f8_node *norm = &lw->graph->nodes[norm_id];
	bool layer = norm->op == F8_OP_LAYER_NORM;
	uint32_t x = param_of(lw, norm->inputs[0]), kept = F8_NONE;
	f8_kir_id var;
	f8_lower_record_grid_sizes(lw, false);
	f8_status status = F8_OK;
	// The row read once, into a shared array, where its length is a constant that fits.
	f8_dim last = lw->anchor.dims[lw->anchor.rank - 1];
	if (f8_dim_is_const(last) && f8_dim_value(last) * 4 <= F8_KIR_SHARED_BYTES_MAX / 2)
		status = f8_kir_add_shared(lw->kernel, "row", F8_DTYPE_F32,
					   (uint32_t)f8_dim_value(last), &kept, lw->diag);
	if (!status)
		status = f8_lower_begin_grid(lw, lw->rows, &var);
	if (status)
		return status;
	lw->row = var;
	f8_kir_id extent = kept == F8_NONE ? lw->cols
					   : f8_kir_const_i64(lw->kernel, f8_dim_value(last));
	f8_kir_id n = EMIT(lw, TO_F32, lw->cols, NONE, NONE), mean = NONE, squares;
	if (layer) {
		f8_kir_id sum;
		if ((status = row_sum(lw, extent, x, kept, true, NONE, false, &sum)))
			return status;
		mean = EMIT(lw, DIV, sum, n, NONE);
	}
	if ((status = row_sum(lw, extent, x, kept, !layer, mean, true, &squares)))
		return status;
	f8_kir_id variance = EMIT(lw, DIV, squares, n, NONE);
	f8_kir_id epsilon = f8_lower_constant(lw, f8_node_attr_float(norm, "epsilon", 1e-5));
	f8_kir_id rstd = EMIT(lw, DIV, f8_lower_constant(lw, 1),
			      EMIT(lw, SQRT, EMIT(lw, ADD, variance, epsilon, NONE), NONE, NONE), NONE);
	uint32_t rstd_output = layer ? 2 : 1;
	if (layer && norm->n_outputs > 1)
		status = store_if_escaping(lw, norm->outputs[1], lw->row, mean);
	if (!status && norm->n_outputs > rstd_output)
		status = store_if_escaping(lw, norm->outputs[rstd_output], lw->row, rstd);
	if (!status)
		status = f8_lower_begin_columns(lw, extent);
	if (status)
		return status;
	if (kept != F8_NONE)
		status = bind_reg(lw, norm->inputs[0], f8_kir_load_shared(lw->kernel, kept, lw->col));
	f8_kir_id xv = status ? NONE : element(lw, norm_id, norm->inputs[0], &status);
	f8_kir_id gamma = status ? NONE : element(lw, norm_id, norm->inputs[1], &status);
	if (status)
		return status;
	f8_dtype x_dtype = type_of(lw, norm->inputs[0])->dtype;
	f8_kir_id y;
	if (layer) {
		y = EMIT(lw, MUL, EMIT(lw, MUL, EMIT(lw, SUB, xv, mean, NONE), rstd, NONE), gamma, NONE);
		if (norm->n_inputs > 2 && norm->inputs[2] != F8_NONE)
			y = EMIT(lw, ADD, y, element(lw, norm_id, norm->inputs[2], &status), NONE);
	} else { // Hugging Face rounds x * rstd to x's dtype before the weight multiplies
		y = EMIT(lw, MUL, f8_lower_round_to(lw, x_dtype, EMIT(lw, MUL, xv, rstd, NONE)), gamma, NONE);
	}
	f8_value_id output = norm->outputs[0];
	y = f8_lower_round_to(lw, type_of(lw, output)->dtype, y);
	if (!status)
		status = bind_reg(lw, output, y);
	if (!status)
		status = store_if_escaping(lw, output, lw->index, y);
	for (uint32_t m = 1; !status && m < lw->n_members; m++)
		status = f8_lower_emit_member(lw, lw->members[m]);
	return f8_lower_end_loop(lw, true, f8_lower_end_loop(lw, false, status));
}

/* A size parameter for `dim` (one per distinct dim); its index. */
f8_status f8_lower_add_size(f8_lower *lw, f8_dim dim, uint32_t *index) {
	*index = f8_lower_size_param(lw, dim);
	if (*index != F8_NONE)
		return F8_OK;
	uint32_t sizes = 0;
	for (uint32_t p = 0; p < lw->kernel->n_params; p++)
		sizes += lw->kernel->params[p].kind == F8_KERNEL_PARAM_SIZE;
	char name[24];
	snprintf(name, sizeof name, "size%u", sizes);
	f8_status status = grow_args(lw);
	if (!status)
		status = f8_kir_add_param(lw->kernel, name, F8_KERNEL_PARAM_SIZE, F8_DTYPE_I64, index,
					  lw->diag);
	if (!status)
		lw->args[*index] = (f8_kernel_arg){.value = F8_NONE, .scratch = F8_NONE, .dim = dim};
	return status;
}

f8_status f8_lower_add_symbolic_sizes(f8_lower *lw, const f8_shape *shape) {
	f8_status status = F8_OK;
	for (int d = 0; !status && d < shape->rank; d++)
		if (!f8_dim_is_const(shape->dims[d])) {
			uint32_t index;
			status = f8_lower_add_size(lw, shape->dims[d], &index);
		}
	return status;
}

/* A parameter bound to scratch buffer `scratch` of `out`; its index. */
f8_status f8_lower_add_scratch_param(f8_lower *lw, const f8_lowered_group *out, uint32_t scratch,
				   f8_kernel_param_kind kind, uint32_t *index) {
	uint32_t same_kind = 0;
	for (uint32_t p = 0; p < lw->kernel->n_params; p++)
		same_kind += lw->kernel->params[p].kind == kind;
	char name[24];
	snprintf(name, sizeof name, "%s%u", f8_kernel_param_kind_name(kind), same_kind);
	f8_status status = grow_args(lw);
	if (!status)
		status = f8_kir_add_param(lw->kernel, name, kind, out->scratch[scratch].dtype, index,
					  lw->diag);
	if (!status)
		lw->args[*index] = (f8_kernel_arg){.value = F8_NONE, .scratch = scratch};
	return status;
}

/* The group's members in program order, into *members (f8_malloc'd), their count *n. */
static f8_status collect_members(const f8_graph *graph, uint32_t group, f8_node_id **members,
				 uint32_t *n, f8_diag *diag) {
	*n = 0;
	*members = f8_malloc((graph->n_order + 1) * sizeof **members);
	if (!*members)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	for (uint32_t i = 0; i < graph->n_order; i++)
		if (graph->nodes[graph->order[i]].group == group)
			(*members)[(*n)++] = graph->order[i];
	if (!*n)
		return f8_diag_set(diag, F8_ERR_INVALID, "kernel %s has no members",
				   graph->groups[group].name);
	return F8_OK;
}

/* A fresh builder for one kernel of the group, named `name`. */
f8_status f8_lower_begin(f8_lower *lw, const f8_graph *graph, uint32_t group,
			     f8_node_id *members, uint32_t n_members, const char *name,
			     f8_diag *diag) {
	*lw = (f8_lower){.graph = graph, .group = group, .diag = diag, .members = members,
		      .n_members = n_members, .mask = F8_KIR_NONE};
	lw->kernel = f8_kir_create(name);
	return lw->kernel ? F8_OK : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
}

/* Ends a builder: on success its kernel and bindings become launch `out->n_launches`. */
f8_status f8_lower_end(f8_lower *lw, f8_status status, f8_lowered_group *out) {
	if (!status && f8_kir_error(lw->kernel))
		status = f8_lower_fail(lw, lw->members[0], "%s", f8_kir_error(lw->kernel));
	if (!status)
		status = f8_kir_verify(lw->kernel, lw->diag);
	f8_kernel_launch *grown = status ? NULL
		: f8_realloc(out->launches, (out->n_launches + 1) * sizeof *grown);
	if (!status && !grown)
		status = f8_diag_set(lw->diag, F8_ERR_NOMEM, "out of memory");
	f8_free(lw->regs);
	if (status) {
		f8_kir_destroy(lw->kernel);
		f8_free(lw->args);
		return status;
	}
	out->launches = grown;
	out->launches[out->n_launches++] = (f8_kernel_launch){lw->kernel, lw->args};
	return F8_OK;
}

f8_status f8_lower_fused(const f8_graph *graph, uint32_t group, f8_node_id *members,
			 uint32_t n_members, f8_lowered_group *out, f8_diag *diag) {
	f8_lower lw;
	f8_status status = f8_lower_begin(&lw, graph, group, members, n_members,
				       graph->groups[group].name, diag);
	if (status)
		return status;
	const f8_node *first = &graph->nodes[members[0]];
	for (uint32_t m = 0; m < n_members; m++) // other reductions are lower_reduce.c's kernels
		if (graph->nodes[members[m]].op == F8_OP_REDUCE_SUM &&
		    !f8_lower_sums_leading_axes(graph, &graph->nodes[members[m]]))
			return f8_lower_end(&lw, f8_lower_fail(&lw, members[m], "a ReduceSum in a fused "
							       "kernel sums all leading axes"), out);
	lw.norm = first->op == F8_OP_LAYER_NORM || first->op == F8_OP_RMS_NORM;
	bool source_shape = lw.norm || is_cast(first) || first->op == F8_OP_REDUCE_SUM;
	lw.anchor = type_of(&lw, source_shape ? first->inputs[0] : first->outputs[0])->shape;
	bool tiled = f8_lower_tile_fits(&lw);
	status = add_params(&lw, out, tiled);
	if (!status)
		status = emit_top(&lw);
	if (!status)
		status = lw.norm ? lower_norm(&lw) : tiled ? f8_lower_tiled(&lw) : lower_elementwise(&lw);
	if (!status)
		status = emit_epilogue(&lw);
	status = f8_lower_end(&lw, status, out);
	if (!status) // a norm's CastTransposes: their codes transposed by kernels of their own
		status = f8_lower_tile_transposes(&lw, out);
	f8_lower_tile_release(&lw);
	uint32_t partials[F8_LOWER_MAX_AMAX];
	f8_value_id values[F8_LOWER_MAX_AMAX];
	for (uint32_t s = 0; s < lw.n_partial_sums; s++) {
		partials[s] = lw.partial_sums[s].scratch;
		values[s] = lw.partial_sums[s].value;
	}
	if (!status && lw.n_partial_sums) // the bias gradients from their partials, in order
		status = f8_lower_sum_partials(graph, group, members, partials, values,
					       lw.n_partial_sums, lw.anchor_rows, lw.partial_rows,
					       lw.anchor_cols, out, diag);
	return status;
}

void f8_kernel_table_destroy(f8_kernel_table *table) {
	if (table) {
		f8_free(table->columns);
		f8_free(table->cells);
	}
	f8_free(table);
}

void f8_kernel_args_free_tables(f8_kernel_arg *args, uint32_t n_params) {
	for (uint32_t p = 0; args && p < n_params; p++) {
		f8_kernel_table_destroy(args[p].table);
		args[p].table = NULL;
	}
}

void f8_lowered_group_release(f8_lowered_group *group) {
	for (uint32_t i = 0; i < group->n_launches; i++) {
		if (group->launches[i].kernel)
			f8_kernel_args_free_tables(group->launches[i].args,
						   group->launches[i].kernel->n_params);
		f8_kir_destroy(group->launches[i].kernel);
		f8_free(group->launches[i].args);
	}
	f8_free(group->launches);
	f8_free(group->scratch);
	*group = (f8_lowered_group){0};
}

/* Adds a scratch buffer of `count` elements of `dtype` to the group; its index into *index. */
f8_status f8_lower_add_scratch(f8_lowered_group *out, f8_dtype dtype, f8_dim count,
			     uint32_t *index, f8_diag *diag) {
	f8_kernel_scratch *grown = f8_realloc(out->scratch, (out->n_scratch + 1) * sizeof *grown);
	if (!grown)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	out->scratch = grown;
	out->scratch[out->n_scratch] = (f8_kernel_scratch){.dtype = dtype, .count = count};
	*index = out->n_scratch++;
	return F8_OK;
}

f8_status f8_codegen_lower_group(const f8_graph *graph, uint32_t group, f8_lowered_group *out,
				 f8_diag *diag) {
	*out = (f8_lowered_group){.error_scratch = F8_NONE};
	if (group >= graph->n_groups)
		return f8_diag_set(diag, F8_ERR_INVALID, "no kernel group %u", group);
	f8_node_id *members;
	uint32_t n_members;
	f8_status status = collect_members(graph, group, &members, &n_members, diag);
	for (uint32_t m = 0; !status && m < n_members; m++)
		if (!f8_codegen_can_lower(graph, members[m])) {
			char where[160];
			f8_graph_describe_node(graph, members[m], where, sizeof where);
			status = f8_diag_set(diag, F8_ERR_UNSUPPORTED, "kernel %s: %s: codegen cannot "
					     "lower this node yet", graph->groups[group].name, where);
		}
	if (!status) // by the group's family (codegen/lower_members.c)
		status = f8_lower_family_group(graph, group, members, n_members, out, diag);
	f8_free(members);
	if (status)
		f8_lowered_group_release(out);
	return status;
}
