/*
 * Amax and ScaleFromAmax on their own (codegen/lower.h): what the shard pass puts around the
 * AllReduce {op="max"} of current scaling under sequence parallelism (passes/shard_fp8_gather.c:
 * the shard's amax, max-reduced over tp, then the scale every rank casts at), so that a plan on
 * the GPU runs them as generated kernels. Bit-exact with runtime/cpu/kernels_fp8.c's.
 *
 * Amax (the reduce family): max |x| over the whole tensor, f8_amax's semantics (NaN if any
 * NaN, else inf if any inf, 0 when empty), in two kernels:
 *   NAME_amax: x cut into chunks of CHUNK elements, a grid iteration a chunk, |x| maxed by a
 *     block loop, the chunks' maxima combined per block and then by one atomic max into an f32
 *     scratch that the group zeroes first (so an empty x leaves 0). A max is exact, so unlike
 *     a float sum the atomics' order changes nothing (codegen.deterministic allows them), and
 *     the GPU's atomic max on bit patterns puts NaN above every |x|;
 *   NAME_store: the scratch's value into the output, a NaN as f8_amax's NaN (0x7fc00000), which
 *     the max kept with whatever payload the input's NaN had; into its guard's output instead
 *     (a NanToInf the fuse pass put in the kernel, before the amax's max over ranks), a NaN
 *     as +inf.
 * Chunks rather than the rows of x, so that a 1-D or short-rowed tensor still spreads over the
 * blocks; the grid is sized by the element count over CHUNK (f8_kernel grid_divisor), symbolic
 * counts included.
 *
 * ScaleFromAmax (the scaling family, as the scale update): a grid iteration per amax (a scalar,
 * or one per expert), f8_scale_from_amax(format, amax, margin, 1) by f8_lower_scale_from_amax,
 * the arithmetic lower_casts.c's current-scaling casts use for their own scales.
 */
#include "codegen/lower_internal.h" // f8_lower, f8_lower_*

#include <float.h> // FLT_MAX, FLT_TRUE_MIN
#include <math.h>  // ldexp
#include <stdio.h> // snprintf

#include "ir/ops.h" // f8_node_attr_dtype, f8_node_attr_int

enum {
	CHUNK = 4096, // elements a grid iteration of NAME_amax maxes
	// The margins whose 2^-margin is an f32 (a subnormal from 2^-127 down to 2^-149), so that
	// (fp8_max / amax) times it is ldexpf's value, rounded once. Beyond them the product
	// would need ldexpf itself; no recipe comes near (the casts take margins >= 0 and small).
	MARGIN_MIN = -127,
	MARGIN_MAX = 149,
};

static f8_kir_id i64(f8_lower *lw, int64_t value) {
	return f8_kir_const_i64(lw->kernel, value);
}

static bool is_float(f8_dtype dtype) {
	return dtype == F8_DTYPE_F32 || dtype == F8_DTYPE_BF16 || dtype == F8_DTYPE_F16;
}

f8_kir_id f8_lower_scale_from_amax(f8_lower *lw, f8_dtype format, int margin, f8_kir_id amax) {
	double max = f8_dtype_get_info(format)->max;
	f8_kir_id fresh = EMIT(lw, MUL, EMIT(lw, DIV, f8_lower_constant(lw, max), amax, NONE),
			       f8_lower_constant(lw, ldexp(1.0, -margin)), NONE);
	fresh = EMIT(lw, SELECT, EMIT(lw, IS_FINITE, fresh, NONE, NONE), fresh,
		     f8_lower_constant(lw, FLT_MAX));
	fresh = EMIT(lw, SELECT, EMIT(lw, EQ, fresh, f8_lower_constant(lw, 0), NONE),
		     f8_lower_constant(lw, FLT_TRUE_MIN), fresh);
	f8_kir_id usable = EMIT(lw, AND, EMIT(lw, LT, f8_lower_constant(lw, 0), amax, NONE),
				EMIT(lw, IS_FINITE, amax, NONE, NONE), NONE);
	return EMIT(lw, SELECT, usable, fresh, f8_lower_constant(lw, 1));
}

bool f8_lower_amax_lowers(const f8_graph *graph, const f8_node *node) {
	if (node->op == F8_OP_AMAX)
		return node->n_inputs == 1 && node->n_outputs == 1 &&
		       is_float(graph->values[node->inputs[0]].type.dtype) &&
		       graph->values[node->outputs[0]].type.dtype == F8_DTYPE_F32;
	int64_t margin = f8_node_attr_int(node, "margin", 0);
	f8_dtype format = f8_node_attr_dtype(node, "format", F8_DTYPE_UNDEFINED);
	return node->op == F8_OP_SCALE_FROM_AMAX && node->n_outputs == 1 &&
	       (format == F8_DTYPE_E4M3 || format == F8_DTYPE_E5M2) && margin >= MARGIN_MIN &&
	       margin <= MARGIN_MAX && graph->values[node->inputs[0]].type.dtype == F8_DTYPE_F32;
}

/* A builder of group `group`'s kernel named after it with `suffix`. */
static f8_status begin(f8_lower *lw, const f8_graph *graph, uint32_t group, f8_node_id *members,
		       uint32_t n_members, const char *suffix, f8_diag *diag) {
	char name[80];
	snprintf(name, sizeof name, "%s%s", graph->groups[group].name, suffix);
	return f8_lower_begin(lw, graph, group, members, n_members, name, diag);
}

/* NAME_amax: max |x| over the chunks, into scratch `found` by an atomic max. */
static f8_status amax_kernel(const f8_graph *graph, uint32_t group, f8_node_id *members,
			     f8_dim numel, uint32_t found, f8_lowered_group *out, f8_diag *diag) {
	const f8_node *node = &graph->nodes[members[0]];
	f8_lower lw;
	f8_status status = begin(&lw, graph, group, members, 1, "_amax", diag);
	if (status)
		return status;
	uint32_t x, into, p_numel;
	status = f8_lower_bind_input(&lw, node->inputs[0], &x);
	if (!status)
		status = f8_lower_add_scratch_param(&lw, out, found, F8_KERNEL_PARAM_ACCUMULATE, &into);
	if (!status)
		status = f8_lower_add_size(&lw, numel, &p_numel);
	if (status)
		return f8_lower_end(&lw, status, out);
	lw.kernel->grid_sizes[0] = p_numel; // the launcher's grid: numel / CHUNK iterations
	lw.kernel->n_grid_sizes = 1;
	lw.kernel->grid_divisor = CHUNK;
	f8_kir_id n = f8_kir_size(lw.kernel, p_numel), chunk, j, chunk_max, grid_max;
	f8_kir_id chunks = EMIT(&lw, DIV, EMIT(&lw, ADD, n, i64(&lw, CHUNK - 1), NONE),
				i64(&lw, CHUNK), NONE);
	status = f8_kir_begin_grid_loop(lw.kernel, chunks, &chunk, diag);
	if (!status)
		status = f8_kir_add_accumulator(lw.kernel, F8_KIR_COMBINE_MAX, F8_KIR_TYPE_F32,
						&grid_max, diag);
	if (status)
		return f8_lower_end(&lw, status, out);
	f8_kir_id first = EMIT(&lw, MUL, chunk, i64(&lw, CHUNK), NONE);
	f8_kir_id length = EMIT(&lw, MIN, i64(&lw, CHUNK), EMIT(&lw, SUB, n, first, NONE), NONE);
	status = f8_kir_begin_block_loop(lw.kernel, length, &j, diag);
	if (!status)
		status = f8_kir_add_accumulator(lw.kernel, F8_KIR_COMBINE_MAX, F8_KIR_TYPE_F32,
						&chunk_max, diag);
	if (status)
		return f8_lower_end(&lw, status, out);
	f8_kir_id magnitude = EMIT(&lw, ABS, f8_kir_load(lw.kernel, x, EMIT(&lw, ADD, first, j, NONE)),
				   NONE, NONE);
	status = f8_kir_end_loop(lw.kernel, &magnitude, 1, diag);
	if (!status)
		status = f8_kir_end_loop(lw.kernel, &chunk_max, 1, diag);
	if (!status)
		status = f8_kir_atomic(lw.kernel, F8_KIR_COMBINE_MAX, into, i64(&lw, 0), grid_max, diag);
	return f8_lower_end(&lw, status, out);
}

/* NAME_store: scratch `found` into the Amax's output, its NaN made f8_amax's, and into its
 * guard's output (a member NanToInf: f8_lower_amax_guard), its NaN made +inf. */
static f8_status store_kernel(const f8_graph *graph, uint32_t group, f8_node_id *members,
			      uint32_t n_members, uint32_t found, f8_lowered_group *out,
			      f8_diag *diag) {
	const f8_node *node = &graph->nodes[members[0]];
	f8_lower lw;
	f8_status status = begin(&lw, graph, group, members, n_members, "_store", diag);
	if (status)
		return status;
	f8_node_id guard = f8_lower_amax_guard(&lw, node->outputs[0]);
	uint32_t from, to, guarded = F8_NONE;
	status = f8_lower_add_scratch_param(&lw, out, found, F8_KERNEL_PARAM_IN, &from);
	if (!status)
		status = f8_lower_bind_output(&lw, node->outputs[0], F8_KERNEL_PARAM_OUT, &to);
	if (!status && guard != F8_NONE)
		status = f8_lower_bind_output(&lw, graph->nodes[guard].outputs[0],
					      F8_KERNEL_PARAM_OUT, &guarded);
	f8_kir_id r;
	if (!status) {
		lw.kernel->n_grid_sizes = 0;
		status = f8_kir_begin_grid_loop(lw.kernel, i64(&lw, 1), &r, diag);
	}
	f8_kir_id zero = i64(&lw, 0), amax = status ? NONE : f8_kir_load(lw.kernel, from, zero);
	if (!status && to != F8_NONE) {
		f8_kir_id nan = EMIT(&lw, FROM_BITS, i64(&lw, 0x7fc00000), NONE, NONE);
		status = f8_kir_store(lw.kernel, to, zero,
				      EMIT(&lw, SELECT, EMIT(&lw, IS_NAN, amax, NONE, NONE), nan, amax),
				      diag);
	}
	if (!status && guarded != F8_NONE)
		status = f8_kir_store(lw.kernel, guarded, zero, f8_lower_nan_to_inf(&lw, amax), diag);
	if (!status)
		status = f8_kir_end_loop(lw.kernel, NULL, 0, diag);
	return f8_lower_end(&lw, status, out);
}

f8_status f8_lower_amax_group(const f8_graph *graph, uint32_t group, f8_node_id *members,
			      uint32_t n_members, f8_lowered_group *out, f8_diag *diag) {
	// The Amax, and its guard where the fuse pass put one in (f8_lower_amax_guard).
	const f8_node *node = &graph->nodes[members[0]];
	f8_dim numel;
	if (!f8_shape_numel(&graph->values[node->inputs[0]].type.shape, &numel)) {
		char where[160];
		f8_graph_describe_node(graph, members[0], where, sizeof where);
		return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "kernel %s: %s: its element count "
				   "overflows", graph->groups[group].name, where);
	}
	uint32_t found;
	f8_status status = f8_lower_add_scratch(out, F8_DTYPE_F32, f8_dim_const(1), &found, diag);
	if (!status)
		status = amax_kernel(graph, group, members, numel, found, out, diag);
	if (!status)
		status = store_kernel(graph, group, members, n_members, found, out, diag);
	return status;
}

f8_status f8_lower_scale_from_amax_group(const f8_graph *graph, uint32_t group,
					 f8_node_id *members, uint32_t n_members,
					 f8_lowered_group *out, f8_diag *diag) {
	(void)n_members; // a lone node
	const f8_node *node = &graph->nodes[members[0]];
	f8_lower lw;
	f8_status status = f8_lower_begin(&lw, graph, group, members, 1, graph->groups[group].name,
					  diag);
	if (status)
		return status;
	f8_dim numel;
	uint32_t amaxes, scales, p_numel;
	if (!f8_shape_numel(&graph->values[node->inputs[0]].type.shape, &numel))
		status = f8_lower_fail(&lw, members[0], "its element count overflows");
	if (!status)
		status = f8_lower_bind_input(&lw, node->inputs[0], &amaxes);
	if (!status)
		status = f8_lower_bind_output(&lw, node->outputs[0], F8_KERNEL_PARAM_OUT, &scales);
	if (!status)
		status = f8_lower_add_size(&lw, numel, &p_numel);
	f8_kir_id i;
	if (!status) {
		lw.kernel->grid_sizes[0] = p_numel;
		lw.kernel->n_grid_sizes = 1;
		status = f8_kir_begin_grid_loop(lw.kernel, f8_kir_size(lw.kernel, p_numel), &i, diag);
	}
	if (!status && scales != F8_NONE) {
		f8_dtype format = f8_node_attr_dtype(node, "format", F8_DTYPE_E4M3);
		int margin = (int)f8_node_attr_int(node, "margin", 0);
		f8_kir_id scale = f8_lower_scale_from_amax(&lw, format, margin,
							   f8_kir_load(lw.kernel, amaxes, i));
		status = f8_kir_store(lw.kernel, scales, i, scale, diag);
	}
	if (!status)
		status = f8_kir_end_loop(lw.kernel, NULL, 0, diag);
	return f8_lower_end(&lw, status, out);
}
