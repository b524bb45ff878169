/*
 * The fp8-cast pass (passes/fp8_cast.h): the casts, the scaling tables and the FP8Gemms that
 * carry out the precision pass's decisions.
 *
 * It works in three steps: plan (which source tensors need which FP8 copies, for which GEMMs),
 * emit (the cast nodes, the weight caches, the tables and their ScalingUpdates, the GEMMs
 * rewritten in place), order (the new nodes placed in the program).
 */
#include "passes/fp8_cast.h" // f8_pass_fp8_cast_run

#include <string.h> // strlen, memcpy

#include "ir/alloc.h"         // f8_calloc, f8_free
#include "ir/arena.h"         // f8_arena_alloc_array, f8_arena_strdup
#include "ir/gemm.h"          // f8_gemm_kind_of, f8_gemm_kind_name, f8_gemm_operand_name
#include "ir/verify.h"        // f8_node_infer_types
#include "passes/canonicalize.h" // f8_pass_remove_dead_nodes

enum { GROUP_WEIGHTS, GROUP_ACTIVATIONS, GROUP_GRADIENTS, N_GROUPS };
static const char *const group_tables[N_GROUPS] = {
	F8_FP8_TABLE_WEIGHTS, F8_FP8_TABLE_ACTIVATIONS, F8_FP8_TABLE_GRADIENTS};
static const f8_phase group_phases[N_GROUPS] = {F8_PHASE_CAST, F8_PHASE_FWD, F8_PHASE_BWD};

/* One FP8 copy to make: of `source`, in `format`, under `recipe`, for the GEMMs that read it. */
typedef struct cast {
	f8_value_id source;
	int group;
	f8_dtype format;
	f8_recipe recipe;
	bool grouped;             // scaled per expert, for an MoE's grouped GEMMs: the groups
	f8_value_id counts;       // are an (experts, N, K) weight's slices (counts F8_NONE), or
	int64_t groups;           // the rows per expert of a (rows, K) activation (counts)
	bool plain, transposed;   // which copies the GEMMs need
	const char *role;         // "x", "w", "dy": for the reason
	const char *first_scope;  // the scope of the first GEMM reading it
	uint32_t n_other_scopes;  // readers in other scopes
	char kinds[32];           // "fwd, wgrad"
	uint32_t slot;            // its (first) slot in the group's table (delayed), else F8_NONE
	const char *name;         // what its values are named after: the source, and the recipe
				  // or format when the source has several copies
	// Made by emit: the node and the values the GEMMs read.
	f8_node_id node;
	f8_value_id codes, codes_t, scale_inv, scale_inv_t, amax;
} cast;

typedef struct caster {
	f8_graph *graph;
	const f8_fp8_options *options;
	f8_diag *diag;
	bool training;            // the graph has a backward: weights are cached per step
	cast *casts;
	uint32_t n_casts, cap_casts;
	uint32_t n_slots[N_GROUPS];
	f8_node_id updates[N_GROUPS]; // each group's ScalingUpdate, or F8_NONE
	f8_node_id *after;        // per node: the first new node to place after it (a chain)
	f8_node_id *next;         // per node: the next new node in its chain
	uint32_t cap_nodes;
	uint32_t n_original;      // the program's length before the pass (adding a node appends
				  // it to the program; reorder places it instead)
	f8_node_id *head;         // new nodes that go first in the program, n_head of them
	uint32_t n_head, cap_head;
} caster;

static f8_status nomem(caster *c) {
	return f8_diag_set(c->diag, F8_ERR_NOMEM, "out of memory in the fp8-cast pass");
}

/* The parameter a weight operand is cast from: the parameter itself, or the f32 master weight
 * behind a Cast to the model's dtype (the FP8 copy is made from the master, once); F8_NONE when
 * the operand is computed. */
static f8_value_id weight_source(const f8_graph *graph, f8_value_id w) {
	const f8_value *value = &graph->values[w];
	if (value->producer == F8_NONE)
		return value->role == F8_ROLE_PARAMETER || value->role == F8_ROLE_BUFFER ? w : F8_NONE;
	const f8_node *node = &graph->nodes[value->producer];
	if (node->op == F8_OP_CAST && graph->values[node->inputs[0]].producer == F8_NONE &&
	    graph->values[node->inputs[0]].role == F8_ROLE_PARAMETER)
		return node->inputs[0];
	return F8_NONE;
}

/* The cast of (source, format, recipe, grouped), made when new. */
static f8_status find_cast(caster *c, f8_value_id source, int group, f8_dtype format,
			   f8_recipe recipe, bool grouped, cast **out) {
	for (uint32_t i = 0; i < c->n_casts; i++) {
		cast *k = &c->casts[i];
		if (k->source == source && k->format == format && k->recipe == recipe &&
		    k->grouped == grouped) {
			*out = k;
			return F8_OK;
		}
	}
	if (c->n_casts == c->cap_casts) {
		uint32_t cap = c->cap_casts ? 2 * c->cap_casts : 64;
		cast *grown = f8_realloc(c->casts, cap * sizeof *grown);
		if (!grown)
			return nomem(c);
		c->casts = grown;
		c->cap_casts = cap;
	}
	cast *k = &c->casts[c->n_casts++];
	*k = (cast){.source = source, .group = group, .format = format, .recipe = recipe,
		    .grouped = grouped, .counts = F8_NONE, .groups = 1, .slot = F8_NONE,
		    .node = F8_NONE, .codes = F8_NONE, .codes_t = F8_NONE};
	*out = k;
	return F8_OK;
}

static bool is_grouped(const f8_node *node) {
	return node->op == F8_OP_GROUPED_LINEAR || node->op == F8_OP_GROUPED_LINEAR_WGRAD;
}

/* Notes that GEMM `node` (of `kind`) reads the copy of `source` (transposed or not); a grouped
 * GEMM's copies are scaled per expert: a weight's slices, or an activation's rows by the GEMM's
 * counts. */
static f8_status need(caster *c, const f8_node *node, f8_gemm_kind kind, f8_value_id source,
		      int group, f8_dtype format, f8_recipe recipe, bool transposed,
		      const char *role) {
	cast *k = NULL;
	bool grouped = is_grouped(node);
	f8_status status = find_cast(c, source, group, format, recipe, grouped, &k);
	if (status)
		return status;
	if (grouped) {
		const f8_shape *shape = &c->graph->values[source].type.shape;
		const f8_shape *counts = &c->graph->values[node->inputs[2]].type.shape;
		k->counts = shape->rank == 3 ? F8_NONE : node->inputs[2];
		f8_dim groups = shape->rank == 3 ? shape->dims[0] : counts->dims[0];
		if (!f8_dim_is_const(groups))
			return f8_diag_set(c->diag, F8_ERR_INVALID, "fp8-cast: the experts of %s are "
					   "not a constant number", node->scope ? node->scope : "?");
		k->groups = f8_dim_value(groups);
	}
	k->role = role;
	if (transposed)
		k->transposed = true;
	else
		k->plain = true;
	const char *scope = node->scope ? node->scope : c->graph->values[node->outputs[0]].name;
	if (!k->first_scope)
		k->first_scope = scope;
	else if (strcmp(scope, k->first_scope) != 0) // q, k and v reading one norm
		k->n_other_scopes++;
	const char *name = f8_gemm_kind_name(kind);
	if (!strstr(k->kinds, name)) {
		size_t used = strlen(k->kinds);
		snprintf(k->kinds + used, sizeof k->kinds - used, "%s%s", used ? ", " : "", name);
	}
	return F8_OK;
}

/* The operands' FP8 formats under the options: gradients E5M2 under HYBRID. */
static f8_dtype format_of(const caster *c, bool gradient) {
	return gradient && c->options->format == F8_FP8_FORMAT_HYBRID ? F8_DTYPE_E5M2
								       : F8_DTYPE_E4M3;
}

/* The group of a non-weight operand: made in the backward, a gradient; else an activation. */
static int group_of(const f8_graph *graph, f8_value_id v) {
	const f8_value *value = &graph->values[v];
	if (value->producer != F8_NONE && graph->nodes[value->producer].phase == F8_PHASE_BWD)
		return GROUP_GRADIENTS;
	return GROUP_ACTIVATIONS;
}

/* Step 1: the copies every FP8 GEMM needs. */
static f8_status plan(caster *c) {
	f8_graph *graph = c->graph;
	for (uint32_t i = 0; i < graph->n_order; i++) {
		f8_node *node = &graph->nodes[graph->order[i]];
		f8_gemm_kind kind;
		const f8_precision *decision = &graph->values[node->outputs[0]].precision;
		if (!f8_gemm_kind_of(node, &kind) || !f8_dtype_is_fp8(decision->format))
			continue;
		f8_recipe recipe = decision->recipe;
		f8_value_id a = node->inputs[0], b = node->inputs[1];
		f8_status status;
		if (kind == F8_GEMM_KIND_WGRAD) { // dy^T and x^T
			status = need(c, node, kind, a, group_of(graph, a), format_of(c, true),
				      recipe, true, f8_gemm_operand_name(kind, 0));
			if (!status)
				status = need(c, node, kind, b, group_of(graph, b), format_of(c, false),
					      recipe, true, f8_gemm_operand_name(kind, 1));
		} else { // x or dy as it is; w as (N, K): its transposed copy when stored (K, N)
			bool dgrad = kind == F8_GEMM_KIND_DGRAD;
			status = need(c, node, kind, a, group_of(graph, a), format_of(c, dgrad),
				      recipe, false, f8_gemm_operand_name(kind, 0));
			f8_value_id w = weight_source(graph, b);
			if (!status)
				status = need(c, node, kind, w != F8_NONE ? w : b,
					      w != F8_NONE ? GROUP_WEIGHTS : group_of(graph, b),
					      format_of(c, false), recipe,
					      f8_node_attr_int(node, "transpose_weight", 0) != 0,
					      f8_gemm_operand_name(kind, 1));
		}
		if (status)
			return status;
	}
	return F8_OK;
}

/* The block attribute of a copy under `recipe` (NULL: per tensor), into items[2]. */
static bool block_of(f8_recipe recipe, int group, int64_t *items) {
	switch (recipe) {
	case F8_RECIPE_ROWWISE: items[0] = 1, items[1] = 0; return true;
	case F8_RECIPE_BLOCK:
		items[0] = group == GROUP_WEIGHTS ? 128 : 1, items[1] = 128;
		return true;
	case F8_RECIPE_MXFP8: items[0] = 1, items[1] = 32; return true;
	default: return false;
	}
}

/* Adds a node of `op` in `phase` with `scope`, attributes in schema order, typed. */
static f8_status add_node(caster *c, f8_op op, const f8_value_id *inputs, uint32_t n_inputs,
			  const f8_attr *attrs, uint32_t n_attrs, uint32_t n_outputs,
			  const char *const *names, f8_phase phase, const char *scope,
			  f8_node_id *out) {
	f8_graph *graph = c->graph;
	f8_status status = f8_graph_add_node(graph, op, inputs, n_inputs, n_outputs, names, out,
					     c->diag);
	if (status)
		return status;
	if (n_attrs && f8_node_set_attrs(graph, *out, attrs, n_attrs))
		return nomem(c);
	graph->nodes[*out].phase = phase;
	graph->nodes[*out].scope = scope;
	f8_type types[5];
	if ((status = f8_node_infer_types(graph, *out, types, c->diag)))
		return status;
	for (uint32_t i = 0; i < n_outputs; i++)
		graph->values[graph->nodes[*out].outputs[i]].type = types[i];
	return F8_OK;
}

/* "<prefix><suffix>" in the graph's arena. */
static const char *name_with(caster *c, const char *prefix, const char *suffix) {
	size_t a = strlen(prefix), b = strlen(suffix);
	char *name = f8_arena_alloc(c->graph->arena, a + b + 1);
	if (name) {
		memcpy(name, prefix, a);
		memcpy(name + a, suffix, b + 1);
	}
	return name;
}

/* Places new node `id` after node `anchor` (F8_NONE: at the head of the program). */
static f8_status place(caster *c, f8_node_id id, f8_node_id anchor) {
	if (anchor == F8_NONE) {
		if (c->n_head == c->cap_head) {
			uint32_t cap = c->cap_head ? 2 * c->cap_head : 64;
			f8_node_id *grown = f8_realloc(c->head, cap * sizeof *grown);
			if (!grown)
				return nomem(c);
			c->head = grown;
			c->cap_head = cap;
		}
		c->head[c->n_head++] = id;
		return F8_OK;
	}
	f8_node_id *link = &c->after[anchor];
	while (*link != F8_NONE)
		link = &c->next[*link];
	*link = id;
	return F8_OK;
}

/* Sets the decision annotation of a cast output. */
static f8_status annotate(caster *c, const cast *k, f8_value_id v) {
	char reason[320], format[8], upper[8];
	f8_name_upper(f8_dtype_name(k->format), format, sizeof format);
	f8_name_upper(f8_fp8_format_name(c->options->format), upper, sizeof upper);
	int used = snprintf(reason, sizeof reason, "%s of %s", k->role, k->first_scope);
	if (k->n_other_scopes)
		used += snprintf(reason + used, sizeof reason - (size_t)used, " and %u more",
				 k->n_other_scopes);
	used += snprintf(reason + used, sizeof reason - (size_t)used, " (%s), %s -> %s, %s",
			 k->kinds, upper, format, f8_recipe_name(k->recipe));
	if (k->slot != F8_NONE && k->grouped)
		snprintf(reason + used, sizeof reason - (size_t)used, ": slots %u-%u of %s, one per "
			 "expert", k->slot, k->slot + (uint32_t)k->groups - 1, group_tables[k->group]);
	else if (k->slot != F8_NONE)
		snprintf(reason + used, sizeof reason - (size_t)used, ": slot %u of %s", k->slot,
			 group_tables[k->group]);
	else if (k->grouped)
		snprintf(reason + used, sizeof reason - (size_t)used, ", one scale per expert");
	const char *copy = f8_arena_strdup(c->graph->arena, reason);
	if (!copy)
		return nomem(c);
	c->graph->values[v].precision = (f8_precision){.format = k->format, .recipe = k->recipe,
						       .scaling_slot = k->slot, .reason = copy};
	return F8_OK;
}

/* Step 2a: the table leaves of each group with delayed slots: scale (ones), history, count. */
static f8_status add_tables(caster *c, f8_value_id tables[N_GROUPS][3]) {
	f8_graph *graph = c->graph;
	for (int g = 0; g < N_GROUPS; g++) {
		uint32_t n = c->n_slots[g];
		if (!n)
			continue;
		const f8_type types[3] = {
			{.dtype = F8_DTYPE_F32, .shape = {.rank = 1, .dims = {f8_dim_const(n)}}},
			{.dtype = F8_DTYPE_F32,
			 .shape = {.rank = 2, .dims = {f8_dim_const(c->options->amax_history_len),
						       f8_dim_const(n)}}},
			{.dtype = F8_DTYPE_I64}};
		static const char *const suffixes[3] = {".scale", ".amax_history", ".nonfinite"};
		static const f8_role roles[3] = {F8_ROLE_SCALE, F8_ROLE_AMAX_HISTORY,
						 F8_ROLE_OPTIMIZER_STATE};
		for (int t = 0; t < 3; t++) {
			const char *name = name_with(c, group_tables[g], suffixes[t]);
			if (!name)
				return nomem(c);
			f8_status status = f8_graph_add_input(graph, name, roles[t], &types[t],
							      &tables[g][t], c->diag);
			if (status)
				return status;
		}
		// The scales start at 1, as TransformerEngine's do.
		float *ones = f8_arena_alloc_array(graph->arena, n, sizeof(float));
		f8_initializer *init = f8_arena_alloc(graph->arena, sizeof *init);
		if (!ones || !init)
			return nomem(c);
		for (uint32_t i = 0; i < n; i++)
			ones[i] = 1.0f;
		*init = (f8_initializer){.dtype = F8_DTYPE_F32, .n_bytes = n * sizeof(float),
					 .data = ones};
		graph->values[tables[g][0]].initializer = init;
	}
	return F8_OK;
}

/* Step 2b: the cast node of `k`, after the source's producer (weights: at the head, in phase
 * cast). */
static f8_status emit_cast(caster *c, cast *k, f8_value_id tables[N_GROUPS][3]) {
	f8_graph *graph = c->graph;
	// Copied out: adding nodes moves the value table.
	f8_node_id producer = graph->values[k->source].producer;
	bool cached = k->group == GROUP_WEIGHTS && c->training;
	f8_phase phase = cached ? F8_PHASE_CAST
		       : producer != F8_NONE ? graph->nodes[producer].phase : F8_PHASE_FWD;
	f8_attr attrs[7];
	uint32_t n_attrs = 0;
	int64_t block[2];
	attrs[n_attrs++] = (f8_attr){.name = "to", .kind = F8_ATTR_DTYPE, .dtype = k->format};
	if (block_of(k->recipe, k->group, block)) {
		int64_t *items = f8_arena_alloc_array(graph->arena, 2, sizeof *items);
		if (!items)
			return nomem(c);
		memcpy(items, block, sizeof block);
		attrs[n_attrs++] = (f8_attr){.name = "block", .kind = F8_ATTR_INTS,
					     .ints = {.n = 2, .items = items}};
		if (k->recipe == F8_RECIPE_MXFP8)
			attrs[n_attrs++] = (f8_attr){.name = "scale_dtype", .kind = F8_ATTR_DTYPE,
						     .dtype = F8_DTYPE_E8M0};
	}
	if (c->options->margin && k->recipe != F8_RECIPE_MXFP8)
		attrs[n_attrs++] = (f8_attr){.name = "margin", .kind = F8_ATTR_INT,
					     .i = c->options->margin};
	f8_value_id inputs[3] = {k->source, F8_NONE, F8_NONE};
	uint32_t n_inputs = 1;
	if (k->slot != F8_NONE) {
		inputs[n_inputs++] = tables[k->group][0];
		attrs[n_attrs++] = (f8_attr){.name = "slot", .kind = F8_ATTR_INT, .i = k->slot};
	}
	if (k->grouped) {
		attrs[n_attrs++] = (f8_attr){.name = "grouped", .kind = F8_ATTR_INT, .i = 1};
		if (k->counts != F8_NONE)
			inputs[n_inputs++] = k->counts;
	}
	// Names: <source>.fp8, .fp8_t, .fp8_scale_inv, .fp8_scale_inv_t, .amax; a weight's
	// outputs get a suffix, since its cache leaves take the plain names.
	static const char *const suffixes[5] = {".fp8", ".fp8_t", ".fp8_scale_inv",
						".fp8_scale_inv_t", ".amax"};
	const char *names[5];
	for (int i = 0; i < 5; i++) {
		names[i] = name_with(c, k->name, suffixes[i]);
		if (names[i] && cached && i < 4)
			names[i] = name_with(c, names[i], ".next");
		if (!names[i])
			return nomem(c);
	}
	f8_status status;
	if (k->transposed) {
		status = add_node(c, F8_OP_CAST_TRANSPOSE, inputs, n_inputs, attrs, n_attrs, 5, names,
				  phase, NULL, &k->node);
	} else {
		const char *quantize_names[3] = {names[0], names[2], names[4]};
		status = add_node(c, F8_OP_QUANTIZE, inputs, n_inputs, attrs, n_attrs,
				  k->slot != F8_NONE ? 3 : 2, quantize_names, phase, NULL, &k->node);
	}
	if (status)
		return status;
	f8_node *node = &graph->nodes[k->node];
	node->scope = producer != F8_NONE ? graph->nodes[producer].scope : k->first_scope;
	k->codes = node->outputs[0];
	k->codes_t = k->transposed ? node->outputs[1] : F8_NONE;
	k->scale_inv = node->outputs[k->transposed ? 2 : 1];
	k->scale_inv_t = k->transposed ? node->outputs[3] : F8_NONE;
	k->amax = k->slot == F8_NONE ? F8_NONE : node->outputs[k->transposed ? 4 : 2];
	if ((status = annotate(c, k, k->codes)) ||
	    (k->codes_t != F8_NONE && (status = annotate(c, k, k->codes_t))))
		return status;
	return place(c, k->node, cached || producer == F8_NONE ? F8_NONE : producer);
}

/* Step 2c: a weight's copies become cache leaves, remade by phase cast at every step. The copies
 * of an MoE's experts' weights (E, N, K), split over ep by the expert-parallel pass, are this
 * rank's experts' as the weight is: placed so too (their scales are one per expert). */
static f8_status cache_weight(caster *c, cast *k) {
	f8_graph *graph = c->graph;
	f8_value_id weight = k->source;
	f8_node_id producer = graph->values[weight].producer;
	if (producer != F8_NONE && graph->nodes[producer].op == F8_OP_CAST) // --bf16's copy
		weight = graph->nodes[producer].inputs[0];
	f8_placement experts = graph->values[weight].placement[F8_MESH_AXIS_EP];
	f8_value_id *made[4] = {&k->codes, &k->codes_t, &k->scale_inv, &k->scale_inv_t};
	static const char *const suffixes[4] = {".fp8", ".fp8_t", ".fp8_scale_inv",
						".fp8_scale_inv_t"};
	for (int i = 0; i < 4; i++) {
		bool needed = i % 2 == 0 ? k->plain : k->transposed;
		if (!needed)
			continue;
		f8_value_id leaf;
		const char *name = name_with(c, k->name, suffixes[i]);
		if (!name)
			return nomem(c);
		f8_type type = graph->values[*made[i]].type;
		f8_status status = f8_graph_add_input(graph, name, F8_ROLE_WEIGHT_CACHE, &type, &leaf,
						      c->diag);
		if (!status && f8_graph_add_update(graph, leaf, *made[i]))
			status = nomem(c);
		if (status)
			return status;
		graph->values[leaf].precision = graph->values[*made[i]].precision;
		if (experts.kind == F8_PLACEMENT_KIND_SHARD && k->grouped)
			graph->values[leaf].placement[F8_MESH_AXIS_EP] = experts;
		*made[i] = leaf;
	}
	return F8_OK;
}

/* The last node of phase `phase` in the program, or F8_NONE. */
static f8_node_id last_of_phase(const f8_graph *graph, uint32_t n_order, f8_phase phase) {
	for (uint32_t i = n_order; i-- > 0;)
		if (graph->nodes[graph->order[i]].phase == phase)
			return graph->order[i];
	return F8_NONE;
}

/* Step 2d: each table's ScalingUpdate, at the end of its phase, and its updates. */
static f8_status emit_updates(caster *c, f8_value_id tables[N_GROUPS][3]) {
	f8_graph *graph = c->graph;
	for (int g = 0; g < N_GROUPS; g++) {
		uint32_t n = c->n_slots[g];
		c->updates[g] = F8_NONE;
		if (!n)
			continue;
		f8_value_id *inputs = f8_calloc(n + 3, sizeof *inputs);
		if (!inputs)
			return nomem(c);
		memcpy(inputs, tables[g], 3 * sizeof *inputs);
		// The amaxes in slot order (emit numbered the slots in cast order): a grouped cast's
		// f32[experts] takes that many slots.
		uint32_t n_amax = 0;
		for (uint32_t i = 0; i < c->n_casts; i++)
			if (c->casts[i].group == g && c->casts[i].slot != F8_NONE)
				inputs[3 + n_amax++] = c->casts[i].amax;
		f8_attr attrs[3] = {
			{.name = "format", .kind = F8_ATTR_DTYPE,
			 .dtype = format_of(c, g == GROUP_GRADIENTS)},
			{.name = "algo", .kind = F8_ATTR_STRING,
			 .s = f8_amax_algo_name(c->options->amax_algo)},
			{.name = "margin", .kind = F8_ATTR_INT, .i = c->options->margin}};
		const char *names[3] = {name_with(c, graph->values[tables[g][0]].name, ".next"),
					name_with(c, graph->values[tables[g][1]].name, ".next"),
					name_with(c, graph->values[tables[g][2]].name, ".next")};
		f8_phase phase = c->training ? group_phases[g] : F8_PHASE_FWD;
		f8_status status = names[0] && names[1] && names[2] ? F8_OK : nomem(c);
		if (!status)
			status = add_node(c, F8_OP_SCALING_UPDATE, inputs, n_amax + 3, attrs, 3, 3, names,
					  phase, "fp8", &c->updates[g]);
		f8_free(inputs);
		for (int t = 0; !status && t < 3; t++)
			if (f8_graph_add_update(graph, tables[g][t],
						graph->nodes[c->updates[g]].outputs[t]))
				status = nomem(c);
		if (status)
			return status;
	}
	return F8_OK;
}

/* Step 2e, for an MoE's grouped GEMM: an FP8GroupedGemm on the copies scaled per expert.
 * fwd reads x and w (experts, N, K); dgrad dy and w's transposed copy (experts, K, N); wgrad
 * the transposed copies of dy and x, each expert's rows their columns. */
static f8_status rewrite_grouped(caster *c, f8_node_id id, f8_gemm_kind kind, const cast *ka,
				 const cast *kb) {
	f8_graph *graph = c->graph;
	f8_node *node = &graph->nodes[id];
	bool wgrad = kind == F8_GEMM_KIND_WGRAD;
	// w's per-expert transpose where the GEMM reads the stored weight the other way round.
	bool transposed = wgrad || f8_node_attr_int(node, "transpose_weight", 0) != 0;
	f8_value_id *inputs = f8_arena_alloc_array(graph->arena, 5, sizeof *inputs);
	if (!inputs)
		return nomem(c);
	inputs[0] = wgrad ? ka->codes_t : ka->codes;
	inputs[1] = transposed ? kb->codes_t : kb->codes;
	inputs[2] = wgrad ? ka->scale_inv_t : ka->scale_inv;
	inputs[3] = transposed ? kb->scale_inv_t : kb->scale_inv;
	inputs[4] = node->inputs[2];
	f8_attr attrs[2] = {
		{.name = "to", .kind = F8_ATTR_DTYPE, .dtype = graph->values[node->outputs[0]].type.dtype},
		{.name = "gemm", .kind = F8_ATTR_STRING, .s = f8_gemm_kind_name(kind)}};
	node->op = F8_OP_FP8_GROUPED_GEMM;
	node->inputs = inputs;
	node->n_inputs = 5;
	if (f8_node_set_attrs(graph, id, attrs, 2))
		return nomem(c);
	f8_type type;
	return f8_node_infer_types(graph, id, &type, c->diag);
}

/* Step 2e: GEMM `id` becomes an FP8Gemm on the copies. */
static f8_status rewrite_gemm(caster *c, f8_node_id id, f8_gemm_kind kind) {
	f8_graph *graph = c->graph;
	f8_node *node = &graph->nodes[id];
	f8_value_id a = node->inputs[0], b = node->inputs[1];
	f8_value_id bias = kind == F8_GEMM_KIND_FWD && node->n_inputs > 2 ? node->inputs[2] : F8_NONE;
	const f8_precision *decision = &graph->values[node->outputs[0]].precision;
	// The TN GEMM's b is (N, K): w's transposed copy when the Linear stores it (K, N).
	bool transposed = f8_node_attr_int(node, "transpose_weight", 0) != 0;
	f8_value_id b_source = kind == F8_GEMM_KIND_WGRAD ? b : weight_source(graph, b);
	if (b_source == F8_NONE)
		b_source = b;
	const cast *ka = NULL, *kb = NULL;
	bool grouped = is_grouped(node);
	for (uint32_t i = 0; i < c->n_casts; i++) {
		const cast *k = &c->casts[i];
		if (k->recipe != decision->recipe || k->grouped != grouped)
			continue;
		if (k->source == a && k->format == format_of(c, kind != F8_GEMM_KIND_FWD))
			ka = k;
		if (k->source == b_source && k->format == format_of(c, false))
			kb = k;
	}
	if (!ka || !kb)
		return f8_diag_set(c->diag, F8_ERR_INVALID, "fp8-cast: no cast planned for a GEMM "
				   "operand (a bug)");
	bool wgrad = kind == F8_GEMM_KIND_WGRAD;
	if (grouped)
		return rewrite_grouped(c, id, kind, ka, kb);
	if (wgrad && transposed) { // a (K, N) weight's gradient is x^T dy: x^T is a, dy^T is b
		const cast *swap = ka;
		ka = kb, kb = swap;
	}
	f8_value_id inputs[5] = {
		wgrad ? ka->codes_t : ka->codes, wgrad || transposed ? kb->codes_t : kb->codes,
		wgrad ? ka->scale_inv_t : ka->scale_inv,
		wgrad || transposed ? kb->scale_inv_t : kb->scale_inv, bias};
	uint32_t n_inputs = bias != F8_NONE ? 5 : 4;
	f8_value_id *copy = f8_arena_alloc_array(graph->arena, n_inputs, sizeof *copy);
	if (!copy)
		return nomem(c);
	memcpy(copy, inputs, n_inputs * sizeof *copy);
	f8_attr attrs[4];
	uint32_t n_attrs = 0;
	int64_t blocks[2][2];
	attrs[n_attrs++] = (f8_attr){.name = "to", .kind = F8_ATTR_DTYPE,
				     .dtype = graph->values[node->outputs[0]].type.dtype};
	attrs[n_attrs++] = (f8_attr){.name = "gemm", .kind = F8_ATTR_STRING,
				     .s = f8_gemm_kind_name(kind)};
	const cast *operands[2] = {ka, kb};
	static const char *const block_names[2] = {"a_block", "b_block"};
	for (int i = 0; i < 2; i++) {
		if (!block_of(operands[i]->recipe, operands[i]->group, blocks[i]))
			continue;
		int64_t *items = f8_arena_alloc_array(graph->arena, 2, sizeof *items);
		if (!items)
			return nomem(c);
		memcpy(items, blocks[i], sizeof blocks[i]);
		attrs[n_attrs++] = (f8_attr){.name = block_names[i], .kind = F8_ATTR_INTS,
					     .ints = {.n = 2, .items = items}};
	}
	node->op = F8_OP_FP8_GEMM;
	node->inputs = copy;
	node->n_inputs = n_inputs;
	if (f8_node_set_attrs(graph, id, attrs, n_attrs))
		return nomem(c);
	f8_type type;
	return f8_node_infer_types(graph, id, &type, c->diag);
}

/* Step 3: the program with the new nodes placed. */
static f8_status reorder(caster *c) {
	f8_graph *graph = c->graph;
	uint32_t capacity = graph->n_nodes + 1;
	f8_node_id *order = f8_calloc(capacity, sizeof *order);
	if (!order)
		return nomem(c);
	uint32_t n = 0;
	for (uint32_t i = 0; i < c->n_head; i++)
		order[n++] = c->head[i];
	for (uint32_t i = 0; i < c->n_original; i++) {
		f8_node_id id = graph->order[i];
		order[n++] = id;
		for (f8_node_id next = c->after[id]; next != F8_NONE; next = c->next[next])
			order[n++] = next;
	}
	f8_status status = f8_graph_set_order(graph, order, n) ? nomem(c) : F8_OK;
	f8_free(order);
	return status;
}

/* Where each table's ScalingUpdate goes: after the last node of its phase (the weights' after
 * the last cast at the head). */
static f8_status place_updates(caster *c) {
	for (int g = 0; g < N_GROUPS; g++) {
		if (c->updates[g] == F8_NONE)
			continue;
		f8_phase phase = c->graph->nodes[c->updates[g]].phase;
		f8_node_id anchor = phase == F8_PHASE_CAST ? F8_NONE : last_of_phase(c->graph, c->n_original, phase);
		f8_status status = place(c, c->updates[g], anchor);
		if (status)
			return status;
	}
	return F8_OK;
}

/* Names each copy after its source; a source with several copies (different recipes or formats
 * by a precision config) gets them told apart. */
static f8_status name_casts(caster *c) {
	for (uint32_t i = 0; i < c->n_casts; i++) {
		cast *k = &c->casts[i];
		k->name = c->graph->values[k->source].name;
		for (uint32_t j = 0; j < i; j++) {
			if (c->casts[j].source != k->source)
				continue;
			char suffix[32];
			snprintf(suffix, sizeof suffix, ".%s_%s", f8_recipe_name(k->recipe),
				 f8_dtype_name(k->format));
			if (!(k->name = name_with(c, k->name, suffix)))
				return nomem(c);
			break;
		}
	}
	return F8_OK;
}

/* Step 2: casts, caches, tables, updates and the rewritten GEMMs. */
static f8_status emit(caster *c) {
	f8_graph *graph = c->graph;
	f8_value_id tables[N_GROUPS][3];
	for (uint32_t i = 0; i < c->n_casts; i++) // slots, in order of first use
		if (c->casts[i].recipe == F8_RECIPE_DELAYED) {
			c->casts[i].slot = c->n_slots[c->casts[i].group];
			c->n_slots[c->casts[i].group] += (uint32_t)c->casts[i].groups;
		}
	f8_status status = name_casts(c);
	if (status)
		return status;
	status = add_tables(c, tables);
	for (uint32_t i = 0; !status && i < c->n_casts; i++) {
		status = emit_cast(c, &c->casts[i], tables);
		if (!status && c->casts[i].group == GROUP_WEIGHTS && c->training)
			status = cache_weight(c, &c->casts[i]);
		if (status == F8_ERR_INVALID && c->diag) {
			f8_diag_hint(c->diag, "blocks along the token count need it to be a multiple of "
				     "the block: bind the sizes (--dim batch=N --dim seq=N, or f8c "
				     "train's --micro-batch-size and --seq-length)");
		}
	}
	if (!status)
		status = emit_updates(c, tables);
	for (uint32_t i = 0; !status && i < c->n_original; i++) {
		f8_node_id id = graph->order[i];
		f8_gemm_kind kind;
		if (f8_gemm_kind_of(&graph->nodes[id], &kind) &&
		    f8_dtype_is_fp8(graph->values[graph->nodes[id].outputs[0]].precision.format))
			status = rewrite_gemm(c, id, kind);
	}
	if (!status)
		status = place_updates(c);
	return status;
}

static bool has_backward(const f8_graph *graph) {
	for (uint32_t i = 0; i < graph->n_order; i++)
		if (graph->nodes[graph->order[i]].phase == F8_PHASE_BWD)
			return true;
	return false;
}

f8_status f8_pass_fp8_cast_run(f8_graph *graph, const f8_fp8_options *options, FILE *report,
			       f8_diag *diag) {
	caster c = {.graph = graph, .options = options, .diag = diag,
		    .training = has_backward(graph), .n_original = graph->n_order};
	f8_status status = plan(&c);
	if (!status && c.n_casts) {
		// New nodes: at most a cast per planned copy and three ScalingUpdates.
		c.cap_nodes = graph->n_nodes + c.n_casts + N_GROUPS + 1;
		c.after = f8_malloc(c.cap_nodes * sizeof *c.after);
		c.next = f8_malloc(c.cap_nodes * sizeof *c.next);
		if (!c.after || !c.next)
			status = nomem(&c);
		for (uint32_t i = 0; !status && i < c.cap_nodes; i++)
			c.after[i] = c.next[i] = F8_NONE;
		if (!status)
			status = emit(&c);
		if (!status)
			status = reorder(&c);
		// A Cast of a master weight that only FP8 GEMMs read is dead now: they read the
		// FP8 copy made from the master.
		if (!status)
			status = f8_pass_remove_dead_nodes(graph, diag);
	}
	if (!status && report) {
		uint32_t transposed = 0;
		for (uint32_t i = 0; i < c.n_casts; i++)
			transposed += c.casts[i].transposed;
		fprintf(report, "fp8-cast: %u casts (%u with a transposed copy); delayed slots: "
			"%u weights, %u activations, %u gradients\n", c.n_casts, transposed,
			c.n_slots[GROUP_WEIGHTS], c.n_slots[GROUP_ACTIVATIONS],
			c.n_slots[GROUP_GRADIENTS]);
	}
	f8_free(c.casts);
	f8_free(c.after);
	f8_free(c.next);
	f8_free(c.head);
	return status;
}
