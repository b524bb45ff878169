/*
 * The recompute pass (passes/recompute.h): units of forward nodes whose values the backward
 * reads as copies made again just before it needs them.
 *
 * requires: canonicalize (types), training, fp8-cast; not fuse yet.
 *
 * It works in two steps: analyze (which nodes each unit holds, which of their values the
 * unit's backward reads, which nodes make those), then apply (the clones, the readers moved to
 * them, the new program). The memory budget analyzes each candidate unit alone to rank them,
 * then applies the cheapest ones to copies of the graph until the step fits.
 */
#define _POSIX_C_SOURCE 200809L // strnlen

#include "passes/recompute.h" // f8_pass_recompute_run

#include <stdlib.h> // qsort
#include <string.h> // strcmp, strlen, strncmp, strstr, strspn

#include "ir/alloc.h"       // f8_calloc, f8_malloc, f8_free
#include "ir/arena.h"       // f8_arena_strdup
#include "ir/gemm.h"        // f8_gemm_sizes
#include "ir/memory.h"      // f8_memory_estimate_of, f8_memory_type_bytes
#include "ir/pipeline_chunks.h" // f8_pipeline_chunks
#include "ir/text.h"        // f8_text_print_string, f8_text_parse
#include "passes/fuse.h"     // f8_pass_fuse_run (the budget's trials)
#include "passes/schedule.h" // f8_pass_schedule_run (the budget's trials)

#define NAME_TABLE(kind, LIST, COUNT)                                                      \
	static const char *const kind##_names[] = {LIST(NAME_OF)};                          \
	static_assert(sizeof kind##_names / sizeof kind##_names[0] == COUNT, "one name each"); \
	const char *f8_recompute_##kind##_name(f8_recompute_##kind value) {                 \
		return (unsigned)value < COUNT ? kind##_names[value] : "?";                  \
	}
#define NAME_OF(e, name) name,
NAME_TABLE(granularity, F8_RECOMPUTE_GRANULARITY_LIST, F8_RECOMPUTE_GRANULARITY_COUNT)
NAME_TABLE(method, F8_RECOMPUTE_METHOD_LIST, F8_RECOMPUTE_METHOD_COUNT)
NAME_TABLE(module, F8_RECOMPUTE_MODULE_LIST, F8_RECOMPUTE_MODULE_COUNT)
#undef NAME_OF
#undef NAME_TABLE

static bool from_name(const char *const *names, int count, const char *name, int *out) {
	for (int i = 0; i < count; i++)
		if (strcmp(names[i], name) == 0)
			return *out = i, true;
	return false;
}

bool f8_recompute_granularity_from_name(const char *name, f8_recompute_granularity *out) {
	int i;
	return from_name(granularity_names, F8_RECOMPUTE_GRANULARITY_COUNT, name, &i) &&
	       (*out = (f8_recompute_granularity)i, true);
}

bool f8_recompute_method_from_name(const char *name, f8_recompute_method *out) {
	int i; // "none" is the unset value, not a method to give
	return strcmp(name, "none") != 0 &&
	       from_name(method_names, F8_RECOMPUTE_METHOD_COUNT, name, &i) &&
	       (*out = (f8_recompute_method)i, true);
}

bool f8_recompute_module_from_name(const char *name, f8_recompute_module *out) {
	int i;
	return from_name(module_names, F8_RECOMPUTE_MODULE_FULL, name, &i) &&
	       (*out = (f8_recompute_module)i, true);
}

/* Megatron-LM's checks (megatron/core/transformer/transformer_config.py), in its words. */
f8_status f8_recompute_options_check(const f8_recompute_options *o, f8_diag *diag) {
	bool full = o->granularity == F8_RECOMPUTE_GRANULARITY_FULL;
	if (full && o->method == F8_RECOMPUTE_METHOD_NONE) {
		f8_diag_set(diag, F8_ERR_ARGUMENT, "--recompute-granularity full needs "
			    "--recompute-method uniform or block");
		f8_diag_hint(diag, "uniform: every --recompute-num-layers layers one unit; block: "
			     "the first --recompute-num-layers layers recomputed");
		return F8_ERR_ARGUMENT;
	}
	if (full && o->num_layers < 1)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "--recompute-granularity full needs "
				   "--recompute-num-layers (1 or more)");
	if (!full && (o->method != F8_RECOMPUTE_METHOD_NONE || o->num_layers)) {
		f8_diag_set(diag, F8_ERR_ARGUMENT, "--recompute-%s is for --recompute-granularity "
			    "full", o->num_layers ? "num-layers" : "method");
		f8_diag_hint(diag, "selective recompute takes --recompute-modules instead");
		return F8_ERR_ARGUMENT;
	}
	if (o->modules && o->granularity != F8_RECOMPUTE_GRANULARITY_SELECTIVE)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "--recompute-modules is for "
				   "--recompute-granularity selective");
	return F8_OK;
}

bool f8_recompute_options_any(const f8_recompute_options *o) {
	return o && (o->granularity != F8_RECOMPUTE_GRANULARITY_NONE || o->budget_bytes);
}

/* A unit: the nodes of `module` (FULL: all of them) in layers [first, last]. */
typedef struct unit {
	f8_recompute_module module;
	int first, last;
	const char *why;   // how it was chosen, for the reasons (the graph's arena)
	double flops;      // analyzed: what its clones compute
	uint64_t saved;    // analyzed: the bytes it drops less those its checkpoints add
} unit;

/* What analyze finds, per node and value of the graph it ran on. */
typedef struct analysis {
	f8_graph *graph;
	const unit *units;
	uint32_t n_units;
	uint32_t n_values, n_nodes; // the graph's when analyzed: the arrays' extent (apply adds more)
	int n_layers;
	int *layer;             // per node: f8_scope_layer of its scope
	uint32_t *bits;         // per node: the modules it is of (1 << f8_recompute_module)
	uint32_t *unit_of;      // per node: its unit, F8_NONE
	bool *wanted;           // per value: made in a unit, read by that unit's backward
	bool *needed;           // per node: cloned
	uint32_t *first_reader; // per unit: the program position of its values' first reader
} analysis;

static void analysis_free(analysis *a) {
	f8_free(a->layer);
	f8_free(a->bits);
	f8_free(a->unit_of);
	f8_free(a->wanted);
	f8_free(a->needed);
	f8_free(a->first_reader);
}

/* "mlp", "ffn", "fc1", "experts": a component that names an MLP or what is in one. */
static bool is_mlp_component(const char *c, size_t len) {
	static const char *const names[] = {"mlp", "ffn", "feed_forward", "block_sparse_moe",
					     "moe", "experts", "act", NULL};
	for (int i = 0; names[i]; i++)
		if (strlen(names[i]) == len && strncmp(c, names[i], len) == 0)
			return true;
	return len >= 2 && strncmp(c, "fc", 2) == 0;
}

static bool has_component(const char *path, const char *name) {
	size_t len = strlen(name);
	for (const char *at = path; (at = strstr(at, name)); at += len)
		if ((at == path || at[-1] == '.' || at[-1] == '/') &&
		    (at[len] == '\0' || at[len] == '.' || at[len] == '/'))
			return true;
	return false;
}

static bool is_activation(f8_op op) {
	return op == F8_OP_GELU || op == F8_OP_SWIGLU || op == F8_OP_RELU || op == F8_OP_SIGMOID;
}

static bool is_cast(f8_op op) {
	return op == F8_OP_QUANTIZE || op == F8_OP_CAST_TRANSPOSE;
}

/* The modules node `id` (of a layer) is of: FULL always, and the one its scope or op says.
 * `moe` says whether its layer has a Router. */
static uint32_t modules_of(const f8_graph *graph, f8_node_id id, const char *path, bool moe) {
	const f8_node *node = &graph->nodes[id];
	uint32_t bits = 1u << F8_RECOMPUTE_MODULE_FULL;
	size_t len = strcspn(path, "./");
	if (node->op == F8_OP_ATTENTION || node->op == F8_OP_RING_ATTENTION ||
	    has_component(path, "core"))
		return bits | 1u << F8_RECOMPUTE_MODULE_CORE_ATTN;
	char first[64];
	snprintf(first, sizeof first, "%.*s", (int)len, path);
	if (strstr(first, "norm") || strncmp(first, "ln", 2) == 0)
		return bits | 1u << F8_RECOMPUTE_MODULE_LAYERNORM;
	if (!is_mlp_component(path, len))
		return bits;
	if (!moe)
		return bits | 1u << F8_RECOMPUTE_MODULE_MLP;
	bits |= 1u << F8_RECOMPUTE_MODULE_MOE;
	bool act = is_activation(node->op);
	if (is_cast(node->op)) { // the cast of an activation's output goes with it
		f8_node_id source = graph->values[node->inputs[0]].producer;
		act = source != F8_NONE && is_activation(graph->nodes[source].op);
	}
	return act ? bits | 1u << F8_RECOMPUTE_MODULE_MOE_ACT : bits;
}

/*
 * Whether the pass may make node `id` again: a forward node, deterministic, that talks to no
 * other rank, and not a cast that finds its scale from the data (its FP8 copies are kept:
 * recomputed, it would find the scale anew). RingAttention talks to its ring, but every rank
 * of it runs the same program, so each makes it again at the same place: context
 * parallelism's core attention is recomputed as Megatron-LM's selective recompute does.
 */
static bool clonable(const f8_graph *graph, f8_node_id id) {
	const f8_node *node = &graph->nodes[id];
	uint32_t flags = f8_op_get_info(node->op)->flags;
	if (node->op == F8_OP_RING_ATTENTION)
		flags &= ~(uint32_t)F8_OPF_COLLECTIVE;
	if (node->phase != F8_PHASE_FWD || node->op == F8_OP_DROPOUT ||
	    node->op == F8_OP_SCALING_UPDATE || (flags & (F8_OPF_COLLECTIVE | F8_OPF_SIDE_EFFECT)))
		return false;
	return !is_cast(node->op) || f8_cast_scale_input(node) >= 0;
}

static bool in_unit(const unit *u, int layer) {
	return layer >= u->first && layer <= u->last;
}

/* The unit of a value's maker when the value may be recomputed, else F8_NONE (a clone's too). */
static uint32_t unit_making(const analysis *a, f8_value_id v) {
	f8_node_id p = v == F8_NONE || v >= a->n_values ? F8_NONE : a->graph->values[v].producer;
	return p == F8_NONE || !clonable(a->graph, p) ? F8_NONE : a->unit_of[p];
}

/* What node `node` computes, for ranking: 2 m n k for a GEMM, 4 b h s_q s_kv d for attention
 * (half of it causal), an operation an element otherwise. */
static double flops_of(const f8_graph *graph, const f8_node *node) {
	int64_t m, n, k;
	if ((f8_op_get_info(node->op)->flags & F8_OPF_GEMM) && f8_gemm_sizes(graph, node, &m, &n, &k))
		return 2.0 * (double)m * (double)n * (double)k;
	if (node->op == F8_OP_ATTENTION || node->op == F8_OP_RING_ATTENTION) {
		const f8_type *q = &graph->values[node->inputs[0]].type;
		const f8_type *kt = &graph->values[node->inputs[1]].type;
		double scores = (double)f8_memory_type_bytes(q) / (double)f8_dtype_get_info(q->dtype)->bytes;
		double seq_kv = f8_dim_is_const(kt->shape.dims[2]) ? (double)f8_dim_value(kt->shape.dims[2])
								    : 0;
		if (node->op == F8_OP_RING_ATTENTION) // the keys of every rank of the ring
			seq_kv *= (double)f8_node_attr_int(node, "ranks", 1);
		return 4.0 * scores * seq_kv / (f8_node_attr_int(node, "causal", 0) ? 2.0 : 1.0);
	}
	double elements = 0;
	for (uint32_t o = 0; o < node->n_outputs; o++) {
		const f8_type *type = &graph->values[node->outputs[o]].type;
		elements += (double)f8_memory_type_bytes(type) / (double)f8_dtype_get_info(type->dtype)->bytes;
	}
	return elements;
}

static f8_status nomem(f8_diag *diag) {
	return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory in the recompute pass");
}

/*
 * Finds, for units[0 .. n) (no two holding one node), which node is in which unit, the values
 * each unit's backward reads (wanted), the nodes that make them (needed, with what those read
 * from their unit), and each unit's first reader; each unit's flops and saved bytes into
 * `stats` when not NULL (n of them).
 */
static f8_status analyze(f8_graph *graph, const unit *units, uint32_t n, analysis *a,
			 unit *stats, f8_diag *diag) {
	*a = (analysis){.graph = graph, .units = units, .n_units = n, .n_values = graph->n_values,
			.n_nodes = graph->n_nodes};
	size_t nodes = graph->n_nodes + 1, values = graph->n_values + 1;
	a->layer = f8_malloc(nodes * sizeof *a->layer);
	a->bits = f8_calloc(nodes, sizeof *a->bits);
	a->unit_of = f8_malloc(nodes * sizeof *a->unit_of);
	a->wanted = f8_calloc(values, sizeof *a->wanted);
	a->needed = f8_calloc(nodes, sizeof *a->needed);
	a->first_reader = f8_malloc((n + 1) * sizeof *a->first_reader);
	bool *moe = f8_calloc(nodes, sizeof *moe); // per layer index (layers < nodes)
	bool *read_in_bwd = f8_calloc(values, sizeof *read_in_bwd);
	f8_node_id *work = f8_malloc(nodes * sizeof *work);
	const char **paths = f8_calloc(graph->n_order + 1, sizeof *paths); // per position
	if (!a->layer || !a->bits || !a->unit_of || !a->wanted || !a->needed || !a->first_reader ||
	    !moe || !read_in_bwd || !work || !paths) {
		f8_free(moe), f8_free(read_in_bwd), f8_free(work), f8_free(paths);
		return nomem(diag);
	}
	for (f8_node_id id = 0; id < graph->n_nodes; id++)
		a->layer[id] = -1, a->unit_of[id] = F8_NONE;
	for (uint32_t u = 0; u < n; u++)
		a->first_reader[u] = F8_NONE;
	for (uint32_t p = 0; p < graph->n_order; p++) {
		f8_node_id id = graph->order[p];
		const f8_node *node = &graph->nodes[id];
		int layer = f8_scope_layer(node->scope, &paths[p]);
		a->layer[id] = layer < (int)graph->n_nodes ? layer : -1;
		if (a->layer[id] < 0)
			continue;
		a->n_layers = a->layer[id] + 1 > a->n_layers ? a->layer[id] + 1 : a->n_layers;
		moe[a->layer[id]] |= node->op == F8_OP_ROUTER;
	}
	for (uint32_t p = 0; p < graph->n_order; p++) {
		f8_node_id id = graph->order[p];
		if (a->layer[id] < 0 || graph->nodes[id].phase != F8_PHASE_FWD)
			continue;
		a->bits[id] = modules_of(graph, id, paths[p], moe[a->layer[id]]);
		for (uint32_t u = 0; u < n && a->unit_of[id] == F8_NONE; u++)
			if (in_unit(&units[u], a->layer[id]) && (a->bits[id] & 1u << units[u].module))
				a->unit_of[id] = u;
	}
	// What each unit's backward reads of it: the values to make again.
	for (uint32_t p = 0; p < graph->n_order; p++) {
		const f8_node *node = &graph->nodes[graph->order[p]];
		if (node->phase != F8_PHASE_BWD)
			continue;
		for (uint32_t i = 0; i < node->n_inputs; i++) {
			f8_value_id v = node->inputs[i];
			uint32_t u = unit_making(a, v);
			if (v != F8_NONE)
				read_in_bwd[v] = true;
			if (u == F8_NONE || !in_unit(&units[u], a->layer[graph->order[p]]))
				continue;
			a->wanted[v] = true;
			if (a->first_reader[u] == F8_NONE)
				a->first_reader[u] = p;
		}
	}
	for (uint32_t i = 0; i < graph->n_outputs; i++) // the step's results stay as they are
		a->wanted[graph->outputs[i]] = false;
	// The nodes that make them, and what those read from their unit: a worklist.
	uint32_t top = 0;
	for (f8_value_id v = 0; v < graph->n_values; v++)
		if (a->wanted[v] && !a->needed[graph->values[v].producer])
			a->needed[work[top++] = graph->values[v].producer] = true;
	while (top) {
		const f8_node *node = &graph->nodes[work[--top]];
		uint32_t u = a->unit_of[work[top]];
		for (uint32_t i = 0; i < node->n_inputs; i++) {
			uint32_t maker_unit = unit_making(a, node->inputs[i]);
			f8_node_id maker = maker_unit == u ? graph->values[node->inputs[i]].producer : F8_NONE;
			if (maker != F8_NONE && !a->needed[maker])
				a->needed[work[top++] = maker] = true;
		}
	}
	for (uint32_t u = 0; stats && u < n; u++)
		stats[u].flops = 0, stats[u].saved = 0;
	for (uint32_t p = 0; stats && p < graph->n_order; p++) {
		f8_node_id id = graph->order[p];
		const f8_node *node = &graph->nodes[id];
		if (!a->needed[id])
			continue;
		unit *s = &stats[a->unit_of[id]];
		s->flops += flops_of(graph, node);
		for (uint32_t o = 0; o < node->n_outputs; o++)
			if (a->wanted[node->outputs[o]])
				s->saved += f8_memory_type_bytes(&graph->values[node->outputs[o]].type);
		for (uint32_t i = 0; i < node->n_inputs; i++) { // checkpoints it adds
			f8_value_id v = node->inputs[i];
			f8_node_id maker = v == F8_NONE ? F8_NONE : graph->values[v].producer;
			if (maker != F8_NONE && graph->nodes[maker].phase == F8_PHASE_FWD &&
			    !read_in_bwd[v] && !(a->needed[maker] && a->unit_of[maker] == a->unit_of[id])) {
				uint64_t bytes = f8_memory_type_bytes(&graph->values[v].type);
				s->saved = s->saved > bytes ? s->saved - bytes : 0;
				read_in_bwd[v] = true; // counted once
			}
		}
	}
	f8_free(moe);
	f8_free(read_in_bwd);
	f8_free(work);
	f8_free(paths);
	return F8_OK;
}

/* "<name>.recompute" in the graph's arena. */
static const char *clone_name(f8_graph *graph, const char *name) {
	size_t len = strlen(name);
	char *copy = f8_arena_alloc(graph->arena, len + sizeof ".recompute");
	if (copy) {
		memcpy(copy, name, len);
		memcpy(copy + len, ".recompute", sizeof ".recompute");
	}
	return copy;
}

/* The reason of a clone of node `id` of unit `u`: the unit's, and for a cast the scale. */
static const char *clone_reason(const analysis *a, f8_node_id id, const unit *u) {
	f8_graph *graph = a->graph;
	const f8_node *node = &graph->nodes[id];
	char reason[512];
	int used = snprintf(reason, sizeof reason, "%s", u->why ? u->why : "a budget's trial");
	if (is_cast(node->op) && used > 0 && (size_t)used < sizeof reason) {
		const char *table = graph->values[node->inputs[1]].name;
		size_t stem = strlen(table);
		if (stem > 6 && strcmp(table + stem - 6, ".scale") == 0)
			stem -= 6;
		if (f8_node_attr(node, "slot"))
			snprintf(reason + used, sizeof reason - (size_t)used, "; delayed: the forward's "
				 "scale (slot %lld of %.*s), its amax not recorded again",
				 (long long)f8_node_attr_int(node, "slot", 0), (int)stem, table);
		else
			snprintf(reason + used, sizeof reason - (size_t)used, "; the forward's given "
				 "scale %%%s, its amax not recorded again", table);
	}
	return f8_arena_strdup(graph->arena, reason);
}

/* Adds the clone of node `id` reading `inputs`, in phase bwd, its outputs typed and annotated
 * as the originals; their ids into clone_of. */
static f8_status add_clone(const analysis *a, f8_node_id id, const f8_value_id *inputs,
			   f8_value_id *clone_of, f8_node_id *out, f8_diag *diag) {
	f8_graph *graph = a->graph;
	uint32_t n_outputs = graph->nodes[id].n_outputs;
	const char *names[16];
	if (n_outputs > 16)
		return f8_diag_set(diag, F8_ERR_INVALID, "recompute: a node with %u outputs",
				   n_outputs);
	for (uint32_t o = 0; o < n_outputs; o++)
		if (!(names[o] = clone_name(graph, graph->values[graph->nodes[id].outputs[o]].name)))
			return nomem(diag);
	const char *reason = clone_reason(a, id, &a->units[a->unit_of[id]]);
	f8_status status = f8_graph_add_node(graph, graph->nodes[id].op, inputs,
					     graph->nodes[id].n_inputs, n_outputs, names, out, diag);
	if (status)
		return status;
	const f8_node *original = &graph->nodes[id]; // after the tables may have grown
	f8_node *clone = &graph->nodes[*out];
	if (!reason || (original->n_attrs &&
			f8_node_set_attrs(graph, *out, original->attrs, original->n_attrs)))
		return nomem(diag);
	clone->scope = original->scope;
	clone->name = original->name;
	clone->location = original->location;
	clone->phase = F8_PHASE_BWD;
	clone->recompute = reason;
	for (uint32_t o = 0; o < n_outputs; o++) {
		const f8_value *from = &graph->values[original->outputs[o]];
		f8_value *to = &graph->values[clone->outputs[o]];
		to->type = from->type;
		to->role = from->role;
		to->precision = from->precision;
		clone_of[original->outputs[o]] = clone->outputs[o];
	}
	return F8_OK;
}

/* Whether leaf `v` is state an update writes (a delayed scaling table's scale). */
static bool updated_leaf(const f8_graph *graph, f8_value_id v) {
	if (graph->values[v].producer != F8_NONE)
		return false;
	for (uint32_t i = 0; i < graph->n_updates; i++)
		if (graph->updates[i].target == v)
			return true;
	return false;
}

/*
 * Under the interleaved pipeline schedule a table's copy would be taken in the first chunk's
 * forward while the later chunks' forwards read the table after other micro-batches' updates:
 * one copy a chunk is not built, so recomputing delayed casts there is refused.
 */
static f8_status refuse_interleaved(const f8_graph *graph, f8_diag *diag) {
	uint8_t *chunk = f8_malloc(graph->n_nodes + 1);
	uint32_t chunks = 1;
	f8_status status = chunk ? f8_pipeline_chunks(graph, chunk, &chunks, diag)
				 : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory in recompute");
	f8_free(chunk);
	if (status || chunks <= 1)
		return status;
	f8_diag_set(diag, F8_ERR_UNSUPPORTED, "recompute: a delayed-scaling cast recomputed under "
		    "the interleaved pipeline schedule (%u model chunks a stage) would read scales "
		    "that other micro-batches' forwards have moved: f8c keeps one copy of the "
		    "forward's scales a stage, not one a chunk, so far", chunks);
	f8_diag_hint(diag, "recompute under 1F1B (leave out --num-layers-per-virtual-pipeline-"
		     "stage), or with --fp8-recipe current");
	return F8_ERR_UNSUPPORTED;
}

/*
 * Recomputed delayed casts read the scales the forward's casts read: a copy of each scaling
 * table they read, `<table>.forward`, made in the forward (an Identity, phase fwd) and kept
 * for the backward. The table itself has moved on by then: its ScalingUpdate ends the
 * forward, and under pipeline parallelism's 1F1B later micro-batches' forwards run before
 * this one's backward. Each clone's scale input is pointed at the copy; the copies' nodes into
 * copies[] (*n_copies), each placed before the first node of the program that reads its table.
 */
static f8_status read_forward_scales(analysis *a, const f8_node_id *clones, uint32_t n_clones,
				     f8_value_id *copy_of, f8_node_id *copies, uint32_t *n_copies,
				     f8_diag *diag) {
	f8_graph *graph = a->graph;
	f8_status status = F8_OK;
	for (uint32_t c = 0; !status && c < n_clones; c++) {
		int k = is_cast(graph->nodes[clones[c]].op) ? f8_cast_scale_input(&graph->nodes[clones[c]])
							   : -1;
		f8_value_id table = k >= 0 ? graph->nodes[clones[c]].inputs[k] : F8_NONE;
		if (table == F8_NONE || table >= a->n_values || !updated_leaf(graph, table))
			continue;
		if (copy_of[table] == F8_NONE && *n_copies == 8)
			return f8_diag_set(diag, F8_ERR_INVALID, "recompute: more than 8 scaling tables");
		if (*n_copies == 0 && copy_of[table] == F8_NONE &&
		    (status = refuse_interleaved(graph, diag)))
			break;
		if (copy_of[table] == F8_NONE) {
			const char *name = f8_arena_concat(graph->arena, graph->values[table].name,
							   ".forward");
			f8_node_id id;
			if (!name)
				return nomem(diag);
			status = f8_graph_add_node(graph, F8_OP_IDENTITY, &table, 1, 1, &name, &id,
						   diag);
			if (status)
				break;
			f8_node *node = &graph->nodes[id];
			node->phase = F8_PHASE_FWD;
			node->scope = "recompute";
			graph->values[node->outputs[0]].type = graph->values[table].type;
			copy_of[table] = node->outputs[0];
			copies[(*n_copies)++] = id;
		}
		graph->nodes[clones[c]].inputs[k] = copy_of[table];
	}
	return status;
}

/* Applies analyzed units: the clones, the backward's reads moved to them, the new program,
 * the dropped values annotated. One line per unit to `report`. */
static f8_status apply(analysis *a, FILE *report, f8_diag *diag) {
	f8_graph *graph = a->graph;
	uint32_t n_order = graph->n_order, n_nodes = graph->n_nodes;
	f8_value_id *clone_of = f8_malloc((a->n_values + 1) * sizeof *clone_of);
	f8_node_id *clones = f8_malloc((n_nodes + 1) * sizeof *clones);
	f8_node_id *order = f8_malloc((n_order + n_nodes + 8 + 1) * sizeof *order);
	f8_value_id *inputs = NULL;
	uint32_t n_clones = 0, *first_clone = f8_calloc(a->n_units + 1, sizeof *first_clone);
	f8_status status = clone_of && clones && order && first_clone ? F8_OK : nomem(diag);
	for (f8_value_id v = 0; !status && v < a->n_values; v++)
		clone_of[v] = F8_NONE;
	// The clones, unit by unit in the forward's order, each reading its unit's clones.
	for (uint32_t u = 0; !status && u < a->n_units; u++) {
		first_clone[u] = n_clones;
		for (uint32_t p = 0; !status && p < n_order; p++) {
			f8_node_id id = graph->order[p];
			if (!a->needed[id] || a->unit_of[id] != u)
				continue;
			const f8_node *node = &graph->nodes[id];
			f8_value_id *grown = f8_realloc(inputs, (node->n_inputs + 1) * sizeof *inputs);
			if (!grown) {
				status = nomem(diag);
				break;
			}
			inputs = grown;
			for (uint32_t i = 0; i < node->n_inputs; i++) {
				f8_value_id v = node->inputs[i];
				inputs[i] = unit_making(a, v) == u && clone_of[v] != F8_NONE ? clone_of[v] : v;
			}
			status = add_clone(a, id, inputs, clone_of, &clones[n_clones], diag);
			n_clones += !status;
		}
	}
	first_clone[a->n_units] = n_clones;
	f8_value_id *copy_of = status ? NULL : f8_malloc((a->n_values + 1) * sizeof *copy_of);
	f8_node_id copies[8];
	uint32_t n_copies = 0;
	if (!status && !copy_of)
		status = nomem(diag);
	for (f8_value_id v = 0; !status && v < a->n_values; v++)
		copy_of[v] = F8_NONE;
	if (!status)
		status = read_forward_scales(a, clones, n_clones, copy_of, copies, &n_copies, diag);
	// The backward of each unit's layers reads the clones; the originals are dropped.
	for (uint32_t p = 0; !status && p < n_order; p++) {
		f8_node *node = &graph->nodes[graph->order[p]];
		if (node->phase != F8_PHASE_BWD)
			continue;
		for (uint32_t i = 0; i < node->n_inputs; i++) {
			f8_value_id v = node->inputs[i];
			uint32_t u = unit_making(a, v);
			if (u != F8_NONE && a->wanted[v] && in_unit(&a->units[u], a->layer[graph->order[p]]))
				node->inputs[i] = clone_of[v];
		}
	}
	for (f8_value_id v = 0; !status && v < a->n_values; v++)
		graph->values[v].recompute |= a->wanted[v];
	// The program: each unit's clones just before the first node that reads them; each copy of
	// a table's scales before the first node that reads the table.
	uint32_t n = 0;
	bool placed[8] = {false};
	for (uint32_t p = 0; !status && p < n_order; p++) {
		for (uint32_t u = 0; u < a->n_units; u++)
			if (a->first_reader[u] == p)
				for (uint32_t c = first_clone[u]; c < first_clone[u + 1]; c++)
					order[n++] = clones[c];
		const f8_node *node = &graph->nodes[graph->order[p]];
		for (uint32_t c = 0; c < n_copies; c++)
			for (uint32_t i = 0; !placed[c] && i < node->n_inputs; i++)
				if (node->inputs[i] == graph->nodes[copies[c]].inputs[0])
					order[n++] = copies[c], placed[c] = true;
		order[n++] = graph->order[p];
	}
	if (!status)
		status = f8_graph_set_order(graph, order, n);
	for (uint32_t u = 0; !status && report && u < a->n_units; u++) {
		uint32_t dropped = 0;
		for (f8_value_id v = 0; v < a->n_values; v++)
			dropped += a->wanted[v] && unit_making(a, v) == u;
		fprintf(report, "recompute: %s: %u nodes made again, %u values dropped\n",
			a->units[u].why, first_clone[u + 1] - first_clone[u], dropped);
	}
	f8_free(clone_of);
	f8_free(copy_of);
	f8_free(clones);
	f8_free(order);
	f8_free(inputs);
	f8_free(first_clone);
	return status;
}

/* Analyzes and applies units[0 .. n) to `graph`. */
static f8_status recompute(f8_graph *graph, const unit *units, uint32_t n, FILE *report,
			   f8_diag *diag) {
	analysis a;
	f8_status status = analyze(graph, units, n, &a, NULL, diag);
	if (!status)
		status = apply(&a, report, diag);
	analysis_free(&a);
	return status;
}

/* One more than the graph's last transformer layer (by the forward nodes' scopes), and its
 * first into *lo: a pipeline stage's program holds layers lo .. n - 1. */
static int count_layers(const f8_graph *graph, int *lo) {
	int n = 0;
	*lo = -1;
	for (uint32_t p = 0; p < graph->n_order; p++) {
		int layer = f8_scope_layer(graph->nodes[graph->order[p]].scope, NULL);
		n = layer + 1 > n ? layer + 1 : n;
		*lo = layer >= 0 && (*lo < 0 || layer < *lo) ? layer : *lo;
	}
	*lo = *lo < 0 ? 0 : *lo;
	return n;
}

/* The units Megatron-LM's options ask for, into *units (n into *n; freed by the caller), of
 * layers lo .. n_layers - 1: a pipeline stage's, whose first --recompute-num-layers are its
 * own first ones, as Megatron-LM counts them per stage. */
static f8_status asked_units(f8_graph *graph, const f8_recompute_options *o, int lo,
			     int n_layers, unit **units, uint32_t *n, f8_diag *diag) {
	*units = f8_calloc((size_t)n_layers * F8_RECOMPUTE_MODULE_COUNT + 1, sizeof **units);
	*n = 0;
	if (!*units)
		return nomem(diag);
	char why[256];
	if (o->granularity == F8_RECOMPUTE_GRANULARITY_FULL) {
		if (o->num_layers > n_layers - lo) {
			f8_diag_set(diag, F8_ERR_ARGUMENT, "--recompute-num-layers %lld is more than "
				    "the %d layers %s has", (long long)o->num_layers, n_layers - lo,
				    graph->mesh[F8_MESH_AXIS_PP] > 1 ? "a pipeline stage" : "the model");
			return F8_ERR_ARGUMENT;
		}
		bool uniform = o->method == F8_RECOMPUTE_METHOD_UNIFORM;
		int step = uniform ? (int)o->num_layers : 1;
		int end = uniform ? n_layers : lo + (int)o->num_layers;
		for (int first = lo; first < end; first += step) {
			int last = first + step - 1 < n_layers ? first + step - 1 : n_layers - 1;
			if (uniform && last > first)
				snprintf(why, sizeof why, "full recompute, uniform: layers %d-%d one unit "
					 "(--recompute-num-layers %lld)", first, last,
					 (long long)o->num_layers);
			else if (uniform)
				snprintf(why, sizeof why, "full recompute, uniform: layer %d one unit "
					 "(--recompute-num-layers 1)", first);
			else
				snprintf(why, sizeof why, "full recompute, block: layer %d, one of the "
					 "first %lld (--recompute-num-layers)", first,
					 (long long)o->num_layers);
			(*units)[(*n)++] = (unit){.module = F8_RECOMPUTE_MODULE_FULL, .first = first,
						  .last = last,
						  .why = f8_arena_strdup(graph->arena, why)};
		}
	} else if (o->granularity == F8_RECOMPUTE_GRANULARITY_SELECTIVE) {
		uint32_t modules = o->modules ? o->modules : 1u << F8_RECOMPUTE_MODULE_CORE_ATTN;
		for (int m = 0; m < F8_RECOMPUTE_MODULE_FULL; m++) {
			if (!(modules & 1u << m))
				continue;
			// moe_act within a recomputed moe: the moe unit makes it already.
			if (m == F8_RECOMPUTE_MODULE_MOE_ACT && (modules & 1u << F8_RECOMPUTE_MODULE_MOE))
				continue;
			for (int layer = lo; layer < n_layers; layer++) {
				snprintf(why, sizeof why, "selective recompute of layers.%d's %s "
					 "(--recompute-modules)", layer, module_names[m]);
				(*units)[(*n)++] = (unit){.module = (f8_recompute_module)m, .first = layer,
							  .last = layer,
							  .why = f8_arena_strdup(graph->arena, why)};
			}
		}
	}
	for (uint32_t u = 0; u < *n; u++)
		if (!(*units)[u].why)
			return nomem(diag);
	return F8_OK;
}

/* F8_ERR_ARGUMENT when a module asked for holds no node in any layer (moe on a dense model). */
static f8_status check_modules(f8_graph *graph, const unit *units, uint32_t n, f8_diag *diag) {
	analysis a;
	f8_status status = analyze(graph, units, n, &a, NULL, diag);
	for (int m = 0; !status && m < F8_RECOMPUTE_MODULE_FULL; m++) {
		bool asked = false, found = false;
		for (uint32_t u = 0; u < n; u++)
			asked |= units[u].module == (f8_recompute_module)m;
		for (f8_node_id id = 0; asked && id < graph->n_nodes; id++)
			found |= a.unit_of[id] != F8_NONE && units[a.unit_of[id]].module == (f8_recompute_module)m;
		if (asked && !found) {
			f8_diag_set(diag, F8_ERR_ARGUMENT, "--recompute-modules %s: the model has no "
				    "%s in any layer", module_names[m], module_names[m]);
			f8_diag_hint(diag, "core_attn, layernorm and mlp for dense layers; moe and "
				     "moe_act for MoE layers (those with a Router)");
			status = F8_ERR_ARGUMENT;
		}
	}
	analysis_free(&a);
	return status;
}

/* The budget's trial: a copy of `graph` with units[0 .. n) applied, fused and scheduled; its
 * memory into *bytes. */
static f8_status trial(const f8_graph *graph, const unit *units, uint32_t n,
		       const f8_target_table *target, uint64_t *bytes, f8_diag *diag) {
	char *text = NULL;
	size_t len = 0;
	f8_graph *copy = NULL;
	f8_status status = f8_text_print_string(graph, &text, &len);
	if (!status)
		status = f8_text_parse(text, len, "recompute trial", &copy, diag);
	f8_free(text);
	if (!status)
		status = recompute(copy, units, n, NULL, diag);
	if (!status)
		status = f8_pass_fuse_run(copy, target, NULL, diag);
	if (!status)
		status = f8_pass_schedule_run(copy, NULL, NULL, diag);
	if (!status)
		*bytes = f8_memory_estimate_of(copy).total;
	f8_graph_destroy(copy);
	return status;
}

static int cheapest_first(const void *x, const void *y) {
	const unit *a = x, *b = y;
	double ra = a->flops / (double)a->saved, rb = b->flops / (double)b->saved;
	if (ra != rb)
		return ra < rb ? -1 : 1;
	if (a->first != b->first)
		return a->first < b->first ? -1 : 1;
	return (int)a->module - (int)b->module;
}

/* The units for the first k candidates, into all (*n_all): the asked ones, then each
 * candidate whose layer no unit holds already (a whole layer supersedes its modules). */
static void units_for(const unit *asked, uint32_t n_asked, const unit *candidates, uint32_t k,
		      unit *all, uint32_t *n_all) {
	uint32_t n = 0;
	for (uint32_t i = 0; i < n_asked; i++)
		all[n++] = asked[i];
	for (uint32_t c = 0; c < k; c++) {
		const unit *candidate = &candidates[c];
		bool covered = false;
		for (uint32_t j = 0; j < n && !covered; j++)
			covered = in_unit(&all[j], candidate->first) &&
				  (all[j].module == F8_RECOMPUTE_MODULE_FULL ||
				   all[j].module == candidate->module);
		if (covered)
			continue;
		for (uint32_t j = 0; candidate->module == F8_RECOMPUTE_MODULE_FULL && j < n;)
			if (in_unit(&all[j], candidate->first))
				all[j] = all[--n];
			else
				j++;
		all[n++] = *candidate;
	}
	*n_all = n;
}

/* Each candidate unit alone (each layer's modules, and the whole layer) with what it saves,
 * cheapest first: into *out (*n), freed by the caller. */
static f8_status rank_candidates(f8_graph *graph, int n_layers, unit **out, uint32_t *n,
				 f8_diag *diag) {
	unit *candidates = f8_calloc((size_t)n_layers * F8_RECOMPUTE_MODULE_COUNT + 1,
				     sizeof *candidates);
	*out = candidates, *n = 0;
	if (!candidates)
		return nomem(diag);
	for (int layer = 0; layer < n_layers; layer++)
		for (int m = 0; m < F8_RECOMPUTE_MODULE_COUNT; m++) {
			if (m == F8_RECOMPUTE_MODULE_MOE_ACT)
				continue; // inside moe's unit
			unit u = {.module = (f8_recompute_module)m, .first = layer, .last = layer};
			analysis a;
			f8_status status = analyze(graph, &u, 1, &a, &u, diag);
			analysis_free(&a);
			if (status)
				return status;
			if (u.saved > 0)
				candidates[(*n)++] = u;
		}
	qsort(candidates, *n, sizeof *candidates, cheapest_first);
	return F8_OK;
}

/*
 * The budget: the units `asked` (n_asked), then the fewest candidates, cheapest first, with
 * which the step fits in o->budget_bytes (a binary search over their count, each count tried
 * on a copy of the graph), applied to `graph`. F8_ERR_ARGUMENT with the smallest plan's size
 * when even every candidate does not fit.
 */
static f8_status budget_units(f8_graph *graph, const f8_recompute_options *o,
			      const f8_target_table *target, int n_layers, const unit *asked,
			      uint32_t n_asked, FILE *report, f8_diag *diag) {
	unit *candidates = NULL;
	uint32_t n_candidates = 0, n_all = 0;
	f8_status status = rank_candidates(graph, n_layers, &candidates, &n_candidates, diag);
	unit *all = status ? NULL : f8_calloc(n_asked + n_candidates + 1, sizeof *all);
	if (!status && !all)
		status = nomem(diag);
	// fits(k) for k = 0, then k = all of them, then halving [low, high): fits(high) holds.
	uint32_t low = 1, high = n_candidates;
	uint64_t bytes = 0;
	for (int tried = 0; !status; tried++) {
		uint32_t k = tried == 0 ? 0 : tried == 1 ? n_candidates : low + (high - low) / 2;
		units_for(asked, n_asked, candidates, k, all, &n_all);
		if ((status = trial(graph, all, n_all, target, &bytes, diag)))
			break;
		if (report)
			fprintf(report, "recompute: --memory-budget %.2f GiB: %u of %u candidates: "
				"%.2f GiB\n", (double)o->budget_bytes / 1073741824.0, k, n_candidates,
				(double)bytes / 1073741824.0);
		bool fits = bytes <= o->budget_bytes;
		if (tried == 0 && fits) {
			high = 0;
			break;
		}
		if (tried == 1 && !fits) {
			f8_diag_set(diag, F8_ERR_ARGUMENT, "--memory-budget %.2f GiB is less than the "
				    "smallest plan recompute can make: %.2f GiB",
				    (double)o->budget_bytes / 1073741824.0, (double)bytes / 1073741824.0);
			f8_diag_hint(diag, "a smaller --micro-batch-size or --seq-length, FP8, or more "
				     "GPUs (parallelism)");
			status = F8_ERR_ARGUMENT;
			break;
		}
		if (tried >= 2)
			*(fits ? &high : &low) = fits ? k : k + 1;
		if (tried >= 1 && low >= high)
			break;
	}
	if (!status) {
		units_for(asked, n_asked, candidates, high, all, &n_all);
		char why[256];
		for (uint32_t i = n_asked; !status && i < n_all; i++) {
			snprintf(why, sizeof why, "--memory-budget %.1f GiB: layers.%d's %s, %.3g FLOP "
				 "a byte saved (the cheapest first)",
				 (double)o->budget_bytes / 1073741824.0, all[i].first,
				 module_names[all[i].module], all[i].flops / (double)all[i].saved);
			if (!(all[i].why = f8_arena_strdup(graph->arena, why)))
				status = nomem(diag);
		}
	}
	if (!status)
		status = recompute(graph, all, n_all, report, diag);
	f8_free(candidates);
	f8_free(all);
	return status;
}

f8_status f8_pass_recompute_run(f8_graph *graph, const f8_recompute_options *options,
				const f8_target_table *target, FILE *report, f8_diag *diag) {
	if (!f8_recompute_options_any(options))
		return F8_OK;
	f8_status status = f8_recompute_options_check(options, diag);
	if (status)
		return status;
	bool backward = false;
	for (uint32_t p = 0; p < graph->n_order; p++) {
		if (graph->nodes[graph->order[p]].group != F8_NONE)
			return f8_diag_set(diag, F8_ERR_INVALID, "recompute: the graph is fused "
					   "already: the pass runs before fuse");
		backward |= graph->nodes[graph->order[p]].phase == F8_PHASE_BWD;
	}
	if (!backward)
		return f8_diag_set(diag, F8_ERR_INVALID, "recompute: the graph has no backward "
				   "(recompute is for training)");
	int lo, n_layers = count_layers(graph, &lo);
	if (n_layers == 0) {
		f8_diag_set(diag, F8_ERR_ARGUMENT, "recompute: the model has no transformer layers "
			    "(scopes \"layers.<i>.\") to recompute");
		return F8_ERR_ARGUMENT;
	}
	unit *units = NULL;
	uint32_t n = 0;
	status = asked_units(graph, options, lo, n_layers, &units, &n, diag);
	if (!status && n)
		status = check_modules(graph, units, n, diag);
	if (!status && options->budget_bytes)
		status = budget_units(graph, options, target, n_layers, units, n, report, diag);
	else if (!status)
		status = recompute(graph, units, n, report, diag);
	f8_free(units);
	return status;
}
