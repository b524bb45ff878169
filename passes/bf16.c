/*
 * bf16: the forward in BF16 over f32 master weights (the contract is in passes/bf16.h).
 *
 * requires: types (canonicalize), high-level ops (fuse-patterns); no backward yet.
 * provides: `%<leaf>.bf16` Casts before the first readers of float parameters and inputs, a
 *           Cast where an op that takes one float dtype meets BF16 and another, every node's
 *           outputs typed again from its operands; the program with the Casts in place.
 *
 * One walk over the program: a node's leaves get their copies, its type is inferred again,
 * and only when the op refuses operands of mixed float dtypes are the others cast to BF16, so
 * that what an op accepts mixed (RoPE's f32 tables, a bool mask) stays as the model made it.
 */
#include "passes/bf16.h" // f8_pass_bf16_run

#include <assert.h> // assert
#include <stdio.h>  // fprintf, snprintf
#include <string.h> // memcpy

#include "ir/alloc.h"         // f8_malloc, f8_free
#include "ir/arena.h"         // f8_arena_strdup
#include "ir/verify.h"        // f8_node_infer_types
#include "passes/precision.h" // f8_name_upper

enum {
	NAME_MAX_BYTES = 320, // a value's name and ".bf16"
	REASON_MAX = 320,
	MAX_OUTPUTS = 8,      // the most outputs of any op (CastTranspose's 5)
};

typedef struct converter {
	f8_graph *graph;
	f8_diag *diag;
	uint32_t n_values;    // before the pass: the values the copies below are indexed by
	f8_value_id *copy;    // (n_values) per value: its BF16 Cast, F8_NONE while it has none
	f8_node_id *order;    // the new program, n_order nodes so far
	uint32_t n_order;
	bool *router_logits;  // (n_values) per value: a Router reads it as its logits
	uint32_t n_params, n_inputs, n_met, n_bf16, n_router;
} converter;

static f8_status nomem(converter *c) {
	return f8_diag_set(c->diag, F8_ERR_NOMEM, "out of memory in the bf16 pass");
}

/* The dtypes a forward computes in: what --bf16 turns into BF16 (not FP8 codes or scales). */
static bool is_wide_float(f8_dtype dtype) {
	return dtype == F8_DTYPE_F32 || dtype == F8_DTYPE_F16 || dtype == F8_DTYPE_F64 ||
	       dtype == F8_DTYPE_BF16;
}

/* Whether leaf `v` is read through a BF16 copy: a float parameter or input not BF16 already. */
static bool wants_copy(const f8_value *v) {
	return v->producer == F8_NONE && (v->role == F8_ROLE_PARAMETER || v->role == F8_ROLE_INPUT) &&
	       is_wide_float(v->type.dtype) && v->type.dtype != F8_DTYPE_BF16;
}

/*
 * The BF16 Cast of `source` (made the first time, in the program before the node being
 * converted, in `scope`, with the reason `reason`), into *out.
 */
static f8_status copy_of(converter *c, f8_value_id source, const char *scope, const char *reason,
			 f8_value_id *out) {
	f8_graph *graph = c->graph;
	if (c->copy[source] != F8_NONE) {
		*out = c->copy[source];
		return F8_OK;
	}
	char name[NAME_MAX_BYTES];
	snprintf(name, sizeof name, "%s.bf16", graph->values[source].name);
	const char *names[1] = {name};
	f8_node_id id;
	f8_status status = f8_graph_add_node(graph, F8_OP_CAST, &source, 1, 1, names, &id, c->diag);
	if (status)
		return status;
	f8_attr to = {.name = "to", .kind = F8_ATTR_DTYPE, .dtype = F8_DTYPE_BF16};
	if (f8_node_set_attrs(graph, id, &to, 1))
		return nomem(c);
	graph->nodes[id].phase = F8_PHASE_FWD;
	graph->nodes[id].scope = scope;
	f8_type type;
	if ((status = f8_node_infer_types(graph, id, &type, c->diag)))
		return status;
	f8_value *made = &graph->values[graph->nodes[id].outputs[0]];
	made->type = type;
	if (!(made->precision.reason = f8_arena_strdup(graph->arena, reason)))
		return nomem(c);
	made->precision.format = F8_DTYPE_BF16;
	c->order[c->n_order++] = id;
	*out = c->copy[source] = graph->nodes[id].outputs[0];
	return F8_OK;
}

/* The leaves node `id` reads through their copies, each made at its first reader. */
static f8_status copy_leaves(converter *c, f8_node_id id) {
	f8_graph *graph = c->graph;
	char reason[REASON_MAX] = "";
	for (uint32_t i = 0; i < graph->nodes[id].n_inputs; i++) {
		f8_value_id v = graph->nodes[id].inputs[i];
		if (v == F8_NONE || v >= c->n_values || !wants_copy(&graph->values[v]))
			continue;
		const char *name = graph->values[v].name;
		bool param = graph->values[v].role == F8_ROLE_PARAMETER;
		if (param && c->copy[v] == F8_NONE) {
			// f16 and f64 become f32 master weights here, as the training pass would make
			// them; the runtime converts their initializers as it loads them.
			graph->values[v].type.dtype = F8_DTYPE_F32;
			snprintf(reason, sizeof reason, "kept BF16: --bf16: the forward's copy of the "
				 "f32 master weight %s", name);
			c->n_params++;
		} else if (c->copy[v] == F8_NONE) {
			snprintf(reason, sizeof reason, "kept BF16: --bf16: the forward computes in "
				 "BF16 from input %s on", name);
			c->n_inputs++;
		}
		f8_value_id copy;
		f8_status status = copy_of(c, v, graph->nodes[id].scope, reason, &copy);
		if (status)
			return status;
		graph->nodes[id].inputs[i] = copy;
	}
	return F8_OK;
}

/*
 * A GEMM that computes a Router's logits stays f32 (its f32 master weight read as it is, its
 * BF16 inputs through Casts to f32): in BF16 the logits' 8 bits decide the top-k choice of
 * every token whose best experts' logits are close, and a rounding difference then sends the
 * token to another expert (Megatron-LM's --moe-router-dtype fp32, DeepSeek-V3's gating in high
 * precision; the GEMM is tokens x hidden x experts, a small share of the layer). Whether node
 * `id` is such a GEMM: a Linear or MatMul whose output is read as logits.
 */
static bool computes_router_logits(const converter *c, f8_node_id id) {
	const f8_node *node = &c->graph->nodes[id];
	return (node->op == F8_OP_LINEAR || node->op == F8_OP_MATMUL) && node->n_outputs == 1 &&
	       node->outputs[0] < c->n_values && c->router_logits[node->outputs[0]];
}

/* Node `id` (computes_router_logits) reads its BF16 operands through Casts to f32, made here,
 * and its float leaves as they are (f32 master weights; f16 and f64 ones become f32). */
static f8_status keep_router_f32(converter *c, f8_node_id id, FILE *report) {
	f8_graph *graph = c->graph;
	char reason[REASON_MAX], name[NAME_MAX_BYTES];
	for (uint32_t i = 0; i < graph->nodes[id].n_inputs; i++) {
		f8_value_id v = graph->nodes[id].inputs[i];
		if (v == F8_NONE)
			continue;
		f8_value *value = &graph->values[v];
		if (wants_copy(value) && value->role == F8_ROLE_PARAMETER)
			value->type.dtype = F8_DTYPE_F32;
		if (value->type.dtype != F8_DTYPE_BF16)
			continue;
		snprintf(name, sizeof name, "%s.f32", value->name);
		const char *names[1] = {name};
		f8_node_id cast;
		f8_status status = f8_graph_add_node(graph, F8_OP_CAST, &v, 1, 1, names, &cast,
						     c->diag);
		if (status)
			return status;
		f8_attr to = {.name = "to", .kind = F8_ATTR_DTYPE, .dtype = F8_DTYPE_F32};
		if (f8_node_set_attrs(graph, cast, &to, 1))
			return nomem(c);
		const f8_node *reader = &graph->nodes[id];
		graph->nodes[cast].phase = F8_PHASE_FWD;
		graph->nodes[cast].scope = reader->scope;
		f8_type type;
		if ((status = f8_node_infer_types(graph, cast, &type, c->diag)))
			return status;
		f8_value *made = &graph->values[graph->nodes[cast].outputs[0]];
		made->type = type;
		snprintf(reason, sizeof reason, "kept F32: --bf16: the router's logits%s%s in f32, "
			 "whose top-k choice BF16 rounding flips (Megatron-LM's --moe-router-dtype "
			 "fp32)", reader->scope ? " of " : "", reader->scope ? reader->scope : "");
		if (!(made->precision.reason = f8_arena_strdup(graph->arena, reason)))
			return nomem(c);
		made->precision.format = F8_DTYPE_F32;
		c->order[c->n_order++] = cast;
		graph->nodes[id].inputs[i] = graph->nodes[cast].outputs[0];
		if (report)
			fprintf(report, "  %%%s to F32 for the router's logits (%s)\n", value->name,
				reader->scope ? reader->scope : f8_op_name(reader->op));
	}
	c->n_router++;
	return F8_OK;
}

/* Whether node `id` reads BF16 and also a float of another dtype it could compute in. */
static bool reads_mixed(const converter *c, f8_node_id id) {
	const f8_graph *graph = c->graph;
	const f8_node *node = &graph->nodes[id];
	bool bf16 = false, other = false;
	for (uint32_t i = 0; i < node->n_inputs; i++) {
		if (node->inputs[i] == F8_NONE)
			continue;
		f8_dtype dtype = graph->values[node->inputs[i]].type.dtype;
		bf16 |= dtype == F8_DTYPE_BF16;
		other |= is_wide_float(dtype) && dtype != F8_DTYPE_BF16;
	}
	return bf16 && other;
}

/* Node `id` refused mixed float operands: its operands of other float dtypes than BF16 are
 * read through Casts to BF16. */
static f8_status meet_bf16(converter *c, f8_node_id id, FILE *report) {
	f8_graph *graph = c->graph;
	char reason[REASON_MAX];
	for (uint32_t i = 0; i < graph->nodes[id].n_inputs; i++) {
		f8_value_id v = graph->nodes[id].inputs[i];
		if (v == F8_NONE || v >= c->n_values)
			continue;
		f8_dtype dtype = graph->values[v].type.dtype;
		if (!is_wide_float(dtype) || dtype == F8_DTYPE_BF16)
			continue;
		const f8_node *node = &graph->nodes[id];
		char upper[8];
		const char *name = f8_dtype_name(dtype);
		f8_name_upper(name, upper, sizeof upper);
		snprintf(reason, sizeof reason, "kept BF16: --bf16: %s%s%s takes one float dtype and "
			 "reads BF16, so this %s value of the model is cast to it",
			 f8_op_name(node->op), node->scope ? " " : "", node->scope ? node->scope : "",
			 upper);
		bool made = c->copy[v] == F8_NONE;
		f8_value_id copy;
		f8_status status = copy_of(c, v, node->scope, reason, &copy);
		if (status)
			return status;
		graph->nodes[id].inputs[i] = copy;
		if (made) {
			c->n_met++;
			if (report)
				fprintf(report, "  %%%s (%s) to BF16 for %s: it takes one float "
					"dtype\n", graph->values[v].name, name,
					f8_op_name(graph->nodes[id].op));
		}
	}
	return F8_OK;
}

/* Infers node `id`'s outputs again from its operands, casting them to BF16 where it refuses a
 * mix; counts the outputs that became BF16. */
static f8_status retype(converter *c, f8_node_id id, FILE *report) {
	f8_graph *graph = c->graph;
	f8_type types[MAX_OUTPUTS];
	f8_diag first;
	f8_diag_clear(&first);
	assert(graph->nodes[id].n_outputs <= MAX_OUTPUTS);
	f8_status status = f8_node_infer_types(graph, id, types, &first);
	if (status && reads_mixed(c, id)) {
		if ((status = meet_bf16(c, id, report)))
			return status;
		status = f8_node_infer_types(graph, id, types, c->diag);
	} else if (status && c->diag) {
		*c->diag = first;
	}
	if (status) {
		f8_diag_hint(c->diag, "--bf16 computes the forward in BF16, and this op refuses its "
			     "operands in BF16");
		return status;
	}
	const f8_node *node = &graph->nodes[id];
	for (uint32_t i = 0; i < node->n_outputs; i++) {
		f8_value *out = &graph->values[node->outputs[i]];
		if (out->type.dtype != F8_DTYPE_BF16 && types[i].dtype == F8_DTYPE_BF16)
			c->n_bf16++;
		out->type = types[i];
	}
	return F8_OK;
}

/* F8_ERR_INVALID when the graph has a backward: --bf16 retypes the forward it comes from. */
static f8_status check_forward(const converter *c) {
	const f8_graph *graph = c->graph;
	for (uint32_t i = 0; i < graph->n_order; i++) {
		f8_phase phase = graph->nodes[graph->order[i]].phase;
		if (phase == F8_PHASE_FWD)
			continue;
		f8_diag_set(c->diag, F8_ERR_INVALID, "the bf16 pass makes the forward BF16, and this "
			    "graph has a %s phase already", f8_phase_name(phase));
		f8_diag_hint(c->diag, "run bf16 before training, which derives the backward from the "
			     "BF16 forward (the pipeline's order)");
		f8_diag_set_node(c->diag, graph, graph->order[i]);
		return F8_ERR_INVALID;
	}
	return F8_OK;
}

f8_status f8_pass_bf16_run(f8_graph *graph, FILE *report, f8_diag *diag) {
	converter c = {.graph = graph, .diag = diag, .n_values = graph->n_values};
	f8_status status = check_forward(&c);
	if (status)
		return status;
	uint32_t n_old = graph->n_order;
	f8_node_id *old = f8_malloc((n_old ? n_old : 1) * sizeof *old);
	c.copy = f8_malloc((c.n_values ? c.n_values : 1) * sizeof *c.copy);
	// The program grows by a Cast per value at most.
	c.order = f8_malloc(((size_t)n_old + c.n_values + 1) * sizeof *c.order);
	if (!old || !c.copy || !c.order)
		status = nomem(&c);
	for (uint32_t v = 0; !status && v < c.n_values; v++)
		c.copy[v] = F8_NONE;
	if (!status && n_old) // an empty graph's order may be NULL
		memcpy(old, graph->order, n_old * sizeof *old);
	c.router_logits = f8_calloc(c.n_values ? c.n_values : 1, sizeof *c.router_logits);
	if (!c.router_logits)
		status = nomem(&c);
	for (uint32_t p = 0; !status && p < n_old; p++) {
		const f8_node *node = &graph->nodes[old[p]];
		if (node->op == F8_OP_ROUTER && node->inputs[0] < c.n_values)
			c.router_logits[node->inputs[0]] = true;
	}
	for (uint32_t p = 0; !status && p < n_old; p++) {
		status = computes_router_logits(&c, old[p]) ? keep_router_f32(&c, old[p], report)
							    : copy_leaves(&c, old[p]);
		if (!status)
			status = retype(&c, old[p], report);
		if (!status)
			c.order[c.n_order++] = old[p];
	}
	if (!status && f8_graph_set_order(graph, c.order, c.n_order))
		status = nomem(&c);
	if (!status && report)
		fprintf(report, "bf16: %u parameter(s) read through BF16 copies (f32 master weights), "
			"%u input(s) cast, %u cast(s) where an op met BF16; %u value(s) BF16 now; "
			"%u router GEMM(s) kept f32\n",
			c.n_params, c.n_inputs, c.n_met, c.n_bf16, c.n_router);
	f8_free(old);
	f8_free(c.copy);
	f8_free(c.order);
	f8_free(c.router_logits);
	return status;
}
