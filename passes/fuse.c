/*
 * The fuse pass (passes/fuse.h): the program's nodes grouped into kernels, greedily, in program
 * order.
 *
 * requires: canonicalize (types), fp8-cast (the casts), and every pass that adds nodes.
 *
 * It plans on a copy of the program (plan: seeds, families, joins and the moves they make),
 * writes each kernel's reason, and only then changes the graph (commit), so that a failure
 * leaves the graph as it was.
 */
#include "passes/fuse.h" // f8_pass_fuse_run

#include <stdarg.h> // va_list
#include <stdio.h>  // fprintf, snprintf, vsnprintf
#include <string.h> // memcpy, strlen, strncmp

#include "ir/alloc.h"         // f8_calloc, f8_malloc, f8_free
#include "ir/pipeline_chunks.h" // f8_pipeline_order_chunks
#include "ir/text.h"          // f8_type_format
#include "passes/precision.h" // f8_name_upper

/* A planned kernel: its members stand at order[start .. start + n_members) of the plan. */
typedef struct planned {
	uint32_t start, n_members;
	f8_kernel_family family;
} planned;

typedef struct fuser {
	f8_graph *graph;
	const f8_target_table *target; // what lowers; NULL: nothing does
	f8_diag *diag;
	f8_node_id *order;     // (n_order) the program as the plan rearranges it
	uint32_t *position;    // (n_nodes) where each node stands in `order`, F8_NONE: not in it
	uint32_t *group_of;    // (n_nodes) each node's planned kernel, F8_NONE: none
	uint32_t *first_use;   // (n_values + 1) value v's readers are readers[first_use[v] ..
			       // first_use[v + 1]), in program order
	f8_node_id *readers;   // the program's nodes reading each value
	bool *kept;            // (n_values) graph outputs and update sources: written anyway
	planned *kernels;      // (n_kernels) in program order; at most one per node
	uint32_t n_kernels;
} fuser;

/* The kernel being grown. */
typedef struct growing {
	uint32_t index;        // its index among the planned kernels
	f8_node_id seed;
	f8_kernel_family family;
	uint32_t start, end;   // its members stand at order[start .. end)
	f8_shape shape;        // elementwise: the shape every member makes
	bool has_reduce;       // activation_grad: its bias gradient has joined
} growing;

static f8_status nomem(fuser *f) {
	return f8_diag_set(f->diag, F8_ERR_NOMEM, "out of memory in the fuse pass");
}

/* Who reads each value, as lists by value (f->first_use, f->readers). */
static f8_status index_readers(fuser *f) {
	const f8_graph *graph = f->graph;
	uint32_t total = 0;
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		for (uint32_t j = 0; j < node->n_inputs; j++)
			if (node->inputs[j] != F8_NONE)
				f->first_use[node->inputs[j] + 1]++, total++;
	}
	for (uint32_t v = 0; v < graph->n_values; v++)
		f->first_use[v + 1] += f->first_use[v];
	if (!(f->readers = f8_malloc((total ? total : 1) * sizeof *f->readers)))
		return nomem(f);
	// Fill with first_use[v] as v's cursor; the cursors end where v + 1's list starts.
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		for (uint32_t j = 0; j < node->n_inputs; j++)
			if (node->inputs[j] != F8_NONE)
				f->readers[f->first_use[node->inputs[j]]++] = graph->order[i];
	}
	for (uint32_t v = graph->n_values; v > 0; v--)
		f->first_use[v] = f->first_use[v - 1];
	f->first_use[0] = 0;
	return F8_OK;
}

/* The plan's tables: a copy of the program, positions, no kernels yet, readers, kept values. */
static f8_status fuser_init(fuser *f) {
	const f8_graph *graph = f->graph;
	size_t n_order = graph->n_order ? graph->n_order : 1;
	size_t n_nodes = graph->n_nodes ? graph->n_nodes : 1;
	f->order = f8_malloc(n_order * sizeof *f->order);
	f->kernels = f8_malloc(n_order * sizeof *f->kernels);
	f->position = f8_malloc(n_nodes * sizeof *f->position);
	f->group_of = f8_malloc(n_nodes * sizeof *f->group_of);
	f->first_use = f8_calloc((size_t)graph->n_values + 1, sizeof *f->first_use);
	f->kept = f8_calloc(graph->n_values ? graph->n_values : 1, sizeof *f->kept);
	if (!f->order || !f->kernels || !f->position || !f->group_of || !f->first_use || !f->kept)
		return nomem(f);
	if (graph->n_order) // an empty graph's order may be NULL
		memcpy(f->order, graph->order, graph->n_order * sizeof *f->order);
	for (f8_node_id id = 0; id < graph->n_nodes; id++)
		f->position[id] = f->group_of[id] = F8_NONE;
	for (uint32_t i = 0; i < graph->n_order; i++)
		f->position[graph->order[i]] = i;
	for (uint32_t i = 0; i < graph->n_outputs; i++)
		f->kept[graph->outputs[i]] = true;
	for (uint32_t i = 0; i < graph->n_updates; i++)
		f->kept[graph->updates[i].source] = true;
	return index_readers(f);
}

static void fuser_destroy(fuser *f) {
	f8_free(f->order);
	f8_free(f->kernels);
	f8_free(f->position);
	f8_free(f->group_of);
	f8_free(f->first_use);
	f8_free(f->readers);
	f8_free(f->kept);
}

/* Whether node `id` may be in a kernel on the target: codegen lowers it, and the target does not
 * run it in a library. */
static bool lowers(const fuser *f, f8_node_id id) {
	const f8_target_table *target = f->target;
	if (!target || !target->supports_node)
		return false;
	if (target->runs_in_library && target->runs_in_library(f->graph, id))
		return false;
	return target->supports_node(f->graph, id);
}

/* Families and who may join them. */

static bool is_cast(const f8_node *node) {
	return node->op == F8_OP_QUANTIZE || node->op == F8_OP_CAST_TRANSPOSE;
}

/* Whether `node` may be a member of an elementwise kernel: flagged F8_OPF_ELEMENTWISE, not an
 * op the family leaves out, making one value that is not bool. */
static bool is_elementwise(const f8_graph *graph, const f8_node *node) {
	switch (node->op) {
	case F8_OP_DROPOUT:    // draws random numbers
	case F8_OP_IS_NAN:     // bool outputs: left out in v1
	case F8_OP_EQUAL:
	case F8_OP_LESS:
	case F8_OP_GREATER:
	case F8_OP_LESS_OR_EQUAL:
	case F8_OP_GREATER_OR_EQUAL:
	case F8_OP_NOT:
	case F8_OP_AND:
	case F8_OP_OR:
	case F8_OP_CAST_LIKE:
	case F8_OP_GELU:       // activations of their own family
	case F8_OP_GELU_GRAD:
		return false;
	default:
		return (f8_op_get_info(node->op)->flags & F8_OPF_ELEMENTWISE) &&
		       node->n_outputs == 1 &&
		       graph->values[node->outputs[0]].type.dtype != F8_DTYPE_BOOL;
	}
}

/* The family of the kernel `node` starts, in *out; false when it starts none. */
static bool seed_family(const f8_graph *graph, const f8_node *node, f8_kernel_family *out) {
	switch (node->op) {
	case F8_OP_LAYER_NORM:
	case F8_OP_RMS_NORM: *out = F8_KERNEL_FAMILY_NORM; return true;
	case F8_OP_LAYER_NORM_GRAD:
	case F8_OP_RMS_NORM_GRAD: *out = F8_KERNEL_FAMILY_NORM_GRAD; return true;
	case F8_OP_GELU:
	case F8_OP_SWIGLU: *out = F8_KERNEL_FAMILY_ACTIVATION; return true;
	case F8_OP_GELU_GRAD:
	case F8_OP_SWIGLU_GRAD: *out = F8_KERNEL_FAMILY_ACTIVATION_GRAD; return true;
	case F8_OP_QUANTIZE:
	case F8_OP_CAST_TRANSPOSE: *out = F8_KERNEL_FAMILY_CAST; return true;
	case F8_OP_CROSS_ENTROPY:
	case F8_OP_CROSS_ENTROPY_GRAD:
	case F8_OP_CROSS_ENTROPY_SHARD: // the vocabulary-parallel loss's halves, around the
	case F8_OP_CROSS_ENTROPY_MERGE: // all-reduces of the rows' statistics over tp
	case F8_OP_CROSS_ENTROPY_MERGE_GRAD:
	case F8_OP_CROSS_ENTROPY_SHARD_GRAD: *out = F8_KERNEL_FAMILY_CROSS_ENTROPY; return true;
	case F8_OP_SCALING_UPDATE: // a delayed table's update, or current scaling's scales from
	case F8_OP_SCALE_FROM_AMAX: // amaxes reduced over ranks (passes/shard_fp8_gather.c)
		*out = F8_KERNEL_FAMILY_SCALING;
		return true;
	case F8_OP_EMBEDDING: *out = F8_KERNEL_FAMILY_EMBEDDING; return true;
	case F8_OP_EMBEDDING_GRAD: *out = F8_KERNEL_FAMILY_EMBEDDING_GRAD; return true;
	case F8_OP_ADAMW: *out = F8_KERNEL_FAMILY_OPTIMIZER; return true;
	case F8_OP_RESHAPE:
	case F8_OP_TRANSPOSE:
	case F8_OP_UNSQUEEZE:
	case F8_OP_SQUEEZE:
	case F8_OP_EXPAND:
	case F8_OP_CONCAT:
	case F8_OP_SPLIT:
	case F8_OP_SLICE:
	case F8_OP_SLICE_GRAD:
	case F8_OP_TRILU: *out = F8_KERNEL_FAMILY_LAYOUT; return true;
	case F8_OP_REDUCE_SUM: // one no activation_grad kernel took as its bias gradient
	case F8_OP_REDUCE_MEAN:
	case F8_OP_REDUCE_MAX:
	case F8_OP_AMAX: *out = F8_KERNEL_FAMILY_REDUCE; return true; // a whole tensor's, alone
	case F8_OP_CONSTANT: // a ConstantOfShape no optimizer kernel took as a zeroing
	case F8_OP_CONSTANT_OF_SHAPE: *out = F8_KERNEL_FAMILY_FILL; return true;
	case F8_OP_GLOBAL_NORM: *out = F8_KERNEL_FAMILY_GLOBAL_NORM; return true;
	case F8_OP_LEARNING_RATE: *out = F8_KERNEL_FAMILY_LEARNING_RATE; return true;
	case F8_OP_ROPE:
	case F8_OP_ROPE_GRAD: *out = F8_KERNEL_FAMILY_ROPE; return true;
	case F8_OP_SOFTMAX:
	case F8_OP_SOFTMAX_GRAD: *out = F8_KERNEL_FAMILY_SOFTMAX; return true;
	case F8_OP_ROUTER: // GroupedLinear, between them, runs in a library
	case F8_OP_ROUTER_GRAD:
	case F8_OP_MOE_DISPATCH:
	case F8_OP_MOE_DISPATCH_GRAD:
	case F8_OP_MOE_COMBINE:
	case F8_OP_MOE_COMBINE_GRAD: *out = F8_KERNEL_FAMILY_MOE; return true;
	case F8_OP_RANGE: // each element from its index: the first of an elementwise chain
		*out = F8_KERNEL_FAMILY_ELEMENTWISE;
		return true;
	default:
		// Scalars too: on a GPU the optimizer's arithmetic (clipping) runs on the device.
		*out = F8_KERNEL_FAMILY_ELEMENTWISE;
		return is_elementwise(graph, node);
	}
}

/* Whether ReduceSum `node` sums every axis but the last, named in order (keepdims or not):
 * what codegen sums by tiles (codegen/lower_reduce.c). */
static bool sums_leading_axes(const f8_graph *graph, const f8_node *node) {
	int rank = graph->values[node->inputs[0]].type.shape.rank;
	const f8_attr *axes = f8_node_attr(node, "axes");
	if (rank < 2 || !axes || axes->ints.n != (uint32_t)(rank - 1))
		return false;
	for (int i = 0; i < rank - 1; i++) {
		int axis;
		if (!f8_axis_normalize(axes->ints.items[i], rank, false, &axis) || axis != i)
			return false;
	}
	return true;
}

/* Whether ReduceSum `node` sums its input over all leading axes into a vector (keepdims 0): the
 * bias gradient of a Linear layer. */
static bool is_bias_gradient(const f8_graph *graph, const f8_node *node) {
	return sums_leading_axes(graph, node) && f8_node_attr_int(node, "keepdims", 1) == 0;
}

static bool has_shape(const f8_graph *graph, f8_value_id v, const f8_shape *shape) {
	return f8_shape_equal(&graph->values[v].type.shape, shape);
}

/* Whether ConstantOfShape `node` makes the next value of a gradient accumulator (the target
 * of the update its output is the source of) that a member of kernel k reads. */
static bool refills_member_input(const fuser *f, const growing *k, const f8_node *node) {
	const f8_graph *graph = f->graph;
	for (uint32_t u = 0; u < graph->n_updates; u++) {
		if (graph->updates[u].source != node->outputs[0])
			continue;
		f8_value_id target = graph->updates[u].target;
		for (uint32_t r = f->first_use[target]; r < f->first_use[target + 1]; r++)
			if (f->group_of[f->readers[r]] == k->index)
				return true;
	}
	return false;
}

/* Whether `node` is a NanToInf of an amax that the kernel of index `kernel` computes, the one
 * reader of the amax: the shard pass's, before the amax's max over ranks. Codegen makes each
 * |x| +inf where NaN as the kernel maxes them (the same value), so that it costs no launch; it
 * does for a cast at a given scale (codegen/lower.c, lower_norm_grad.c, lower_swiglu.c) and for
 * an Amax alone, whose store kernel makes its NaN +inf (lower_amax.c). */
static bool guards_amax(const fuser *f, uint32_t kernel, const f8_node *node) {
	const f8_graph *graph = f->graph;
	if (node->op != F8_OP_NAN_TO_INF || node->n_inputs != 1)
		return false;
	f8_value_id amax = node->inputs[0];
	f8_node_id producer = amax == F8_NONE ? F8_NONE : graph->values[amax].producer;
	if (producer == F8_NONE || f->group_of[producer] != kernel)
		return false;
	const f8_node *maker = &graph->nodes[producer];
	bool given = is_cast(maker) && maker->n_inputs > 1 && maker->inputs[1] != F8_NONE;
	return (given || maker->op == F8_OP_AMAX) && f8_node_amax(maker) == amax && !f->kept[amax] &&
	       f->first_use[amax + 1] - f->first_use[amax] == 1;
}

/* Whether kernel k's family admits `node`, which reads one of k's values (an optimizer kernel:
 * any node of its phase, see grow_optimizer). */
static bool admits(const fuser *f, const growing *k, const f8_node *node) {
	const f8_graph *graph = f->graph;
	f8_value_id first = graph->nodes[k->seed].outputs[0];
	// A cast that finds its scales from the data (current, rowwise, block, MX) needs them
	// before its first code: it is a kernel of its own (codegen/lower_casts.c).
	if (is_cast(node) && (node->n_inputs < 2 || node->inputs[1] == F8_NONE))
		return false;
	if (guards_amax(f, k->index, node))
		return true;
	switch (k->family) {
	case F8_KERNEL_FAMILY_NORM:
	case F8_KERNEL_FAMILY_NORM_GRAD: // the casts of dx
	case F8_KERNEL_FAMILY_ACTIVATION:
		return is_cast(node) && node->inputs[0] == first;
	case F8_KERNEL_FAMILY_ACTIVATION_GRAD: {
		const f8_node *seed = &graph->nodes[k->seed];
		bool second = seed->n_outputs > 1 && node->inputs[0] == seed->outputs[1];
		if (is_cast(node)) // SwiGLUGrad's two-input form: dgate's and dup's
			return node->inputs[0] == first || second;
		// The bias gradient: f32 partial sums per tile, added in order by a second kernel
		// that rounds once to the output's dtype (codegen/lower_tile.c), f32 or, under
		// --bf16, BF16; a lone reduce kernel would read the gradient again, by columns.
		return node->op == F8_OP_REDUCE_SUM && seed->op == F8_OP_GELU_GRAD && !k->has_reduce &&
		       node->inputs[0] == first && is_bias_gradient(graph, node);
	}
	case F8_KERNEL_FAMILY_ELEMENTWISE: {
		if (!is_cast(node)) // is_elementwise first: a Send makes no output
			return is_elementwise(graph, node) &&
			       has_shape(graph, node->outputs[0], &k->shape);
		f8_node_id producer = graph->values[node->inputs[0]].producer;
		return producer != F8_NONE && f->group_of[producer] == k->index &&
		       has_shape(graph, node->inputs[0], &k->shape);
	}
	case F8_KERNEL_FAMILY_OPTIMIZER:
		return node->op == F8_OP_ADAMW ||
		       (node->op == F8_OP_CONSTANT_OF_SHAPE && refills_member_input(f, k, node));
	case F8_KERNEL_FAMILY_CAST: {
		// The bias gradient of the tensor a CastTranspose with a given scale reads (a
		// gradient cast to E5M2 for its GEMMs): summed from the same tiles, where a reduce
		// kernel of its own would read it again by columns (TransformerEngine's
		// cast-transpose-dbias). A cast that finds its scale from the data is not tiled.
		const f8_node *seed = &graph->nodes[k->seed];
		return seed->op == F8_OP_CAST_TRANSPOSE && seed->n_inputs > 1 &&
		       seed->inputs[1] != F8_NONE && node->op == F8_OP_REDUCE_SUM &&
		       !k->has_reduce && node->inputs[0] == seed->inputs[0] &&
		       is_bias_gradient(graph, node);
	}
	default: // the other families hold one node
		return false;
	}
}

/* Whether node `id`, which reads one of kernel k's values, may join it: its family admits it,
 * it is of the kernel's phase, and its other inputs are made before the kernel. */
static bool may_join(const fuser *f, const growing *k, f8_node_id id) {
	const f8_graph *graph = f->graph;
	const f8_node *node = &graph->nodes[id];
	if (node->phase != graph->nodes[k->seed].phase || !admits(f, k, node) ||
	    !lowers(f, id))
		return false;
	for (uint32_t i = 0; i < node->n_inputs; i++) {
		f8_node_id producer = node->inputs[i] == F8_NONE
					      ? F8_NONE : graph->values[node->inputs[i]].producer;
		if (producer != F8_NONE && f->group_of[producer] != k->index &&
		    (f->position[producer] == F8_NONE || f->position[producer] >= k->start))
			return false;
	}
	return true;
}

/* Of value v's readers, the one in no kernel that stands first in the program, before
 * *best_position, and may join kernel k, into *best and *best_position. */
static void consider_readers(const fuser *f, const growing *k, f8_value_id v, f8_node_id *best,
			     uint32_t *best_position) {
	for (uint32_t u = f->first_use[v]; u < f->first_use[v + 1]; u++) {
		f8_node_id reader = f->readers[u];
		if (f->group_of[reader] != F8_NONE || f->position[reader] >= *best_position ||
		    !may_join(f, k, reader))
			continue;
		*best = reader;
		*best_position = f->position[reader];
	}
}

/* The plan. */

/* Moves node `id` up to program position `to`; the nodes from `to` to where it stood move down
 * one. */
static void move_to(fuser *f, f8_node_id id, uint32_t to) {
	for (uint32_t p = f->position[id]; p > to; p--) {
		f->order[p] = f->order[p - 1];
		f->position[f->order[p]] = p;
	}
	f->order[to] = id;
	f->position[id] = to;
}

/* Grows kernel k until nothing more may join. Of the candidates, the one standing first in the
 * program joins first, so that members keep the order they had. */
static void grow(fuser *f, growing *k) {
	const f8_graph *graph = f->graph;
	for (;;) {
		f8_node_id best = F8_NONE;
		uint32_t best_position = F8_NONE;
		for (uint32_t p = k->start; p < k->end; p++) {
			const f8_node *member = &graph->nodes[f->order[p]];
			for (uint32_t o = 0; o < member->n_outputs; o++)
				consider_readers(f, k, member->outputs[o], &best, &best_position);
		}
		// A cast kernel also takes a reader of what it casts (its bias gradient).
		if (k->family == F8_KERNEL_FAMILY_CAST)
			consider_readers(f, k, graph->nodes[k->seed].inputs[0], &best, &best_position);
		if (best == F8_NONE)
			return;
		move_to(f, best, k->end);
		f->group_of[best] = k->index;
		k->has_reduce |= graph->nodes[best].op == F8_OP_REDUCE_SUM;
		k->end++;
	}
}

/* An optimizer kernel takes every AdamW of its phase that may join (codegen lowers it and
 * its inputs are made before the kernel: the updates of different parameters are independent,
 * none reads what another makes) and the ConstantOfShape that zeroes each one's gradient
 * accumulator for the next step. Scanned in program order from the kernel on, each moves up to
 * the kernel's end as grow's joins do; an AdamW stands before its zeroing, so it has joined by
 * the time the zeroing is looked at. */
static void grow_optimizer(fuser *f, growing *k) {
	for (uint32_t p = k->end; p < f->graph->n_order; p++) {
		f8_node_id id = f->order[p];
		if (f->group_of[id] != F8_NONE || !may_join(f, k, id))
			continue;
		move_to(f, id, k->end);
		f->group_of[id] = k->index;
		k->end++;
	}
}

/* Seeds and grows the kernels, in program order. */
static void plan(fuser *f) {
	const f8_graph *graph = f->graph;
	for (uint32_t p = 0; p < graph->n_order; p++) {
		f8_node_id id = f->order[p];
		const f8_node *node = &graph->nodes[id];
		f8_kernel_family family;
		if (f->group_of[id] != F8_NONE || !seed_family(graph, node, &family) ||
		    !lowers(f, id))
			continue;
		growing k = {.index = f->n_kernels, .seed = id, .family = family, .start = p,
			     .end = p + 1};
		if (family == F8_KERNEL_FAMILY_ELEMENTWISE)
			k.shape = graph->values[node->outputs[0]].type.shape;
		f->group_of[id] = k.index;
		if (family == F8_KERNEL_FAMILY_OPTIMIZER)
			grow_optimizer(f, &k);
		else
			grow(f, &k);
		f->kernels[f->n_kernels++] = (planned){.start = p, .n_members = k.end - p,
						       .family = family};
		p = k.end - 1;
	}
}

/* Reasons. */

enum { REASON_MAX = 512 };

/* A reason as it is written. */
typedef struct phrase {
	char text[REASON_MAX];
	size_t used;
} phrase;

static void say(phrase *out, const char *format, ...) __attribute__((format(printf, 2, 3)));
static void say(phrase *out, const char *format, ...) {
	if (out->used >= sizeof out->text)
		return;
	va_list args;
	va_start(args, format);
	int n = vsnprintf(out->text + out->used, sizeof out->text - out->used, format, args);
	va_end(args);
	out->used += n > 0 ? (size_t)n : 0;
}

static const char *scope_of(const f8_graph *graph, const f8_node *node) {
	return node->scope ? node->scope : graph->values[node->outputs[0]].name;
}

/* "E4M3 cast" or "E4M3 cast and transpose": what cast `node` makes. */
static void say_cast(phrase *out, const f8_node *node) {
	char format[8];
	f8_name_upper(f8_dtype_name(f8_node_attr_dtype(node, "to", F8_DTYPE_UNDEFINED)), format,
		      sizeof format);
	say(out, "%s cast%s", format, node->op == F8_OP_CAST_TRANSPOSE ? " and transpose" : "");
}

static const f8_node *member(const fuser *f, const planned *k, uint32_t i) {
	return &f->graph->nodes[f->order[k->start + i]];
}

/* Whether member `node` of k is a NanToInf of an amax another member computes (guards_amax). */
static bool is_guard(const fuser *f, const planned *k, const f8_node *node) {
	f8_node_id producer = node->op == F8_OP_NAN_TO_INF && node->inputs[0] != F8_NONE
				      ? f->graph->values[node->inputs[0]].producer : F8_NONE;
	return producer != F8_NONE && f->group_of[producer] == (uint32_t)(k - f->kernels);
}

/* " (a NaN as +inf)" where a member of k guards an amax, else "". */
static const char *guard_note(const fuser *f, const planned *k) {
	for (uint32_t i = 0; i < k->n_members; i++)
		if (is_guard(f, k, member(f, k, i)))
			return " (a NaN as +inf)";
	return "";
}

/* " with the E4M3 cast and transpose of <of> and its amax" for the casts among k's members
 * after the first (with a slot: the amax recorded for delayed scaling); false, having said
 * nothing, when there are none. */
static bool say_casts(phrase *out, const fuser *f, const planned *k, const char *of) {
	uint32_t n = 0;
	bool amax = false;
	const f8_node *first = NULL;
	for (uint32_t i = 1; i < k->n_members; i++) {
		const f8_node *node = member(f, k, i);
		if (!is_cast(node))
			continue;
		first = first ? first : node;
		amax |= f8_node_attr(node, "slot") != NULL;
		n++;
	}
	if (n == 1) {
		say(out, " with the ");
		say_cast(out, first);
		say(out, " of %s%s%s", of, amax ? " and its amax" : "", amax ? guard_note(f, k) : "");
	} else if (n > 1) {
		say(out, " with %u casts of %s (", n, of);
		for (uint32_t i = 1, said = 0; i < k->n_members; i++)
			if (is_cast(member(f, k, i))) {
				say(out, "%s", said++ ? ", " : "");
				say_cast(out, member(f, k, i));
			}
		say(out, ")%s%s", amax ? " and their amaxes" : "", amax ? guard_note(f, k) : "");
	}
	return n > 0;
}

/* Whether value v never reaches memory once k is one kernel: members read it, nothing else does,
 * and it is no graph output or update source. */
static bool stays_inside(const fuser *f, const planned *k, f8_value_id v) {
	uint32_t index = (uint32_t)(k - f->kernels);
	if (f->kept[v] || f->first_use[v] == f->first_use[v + 1])
		return false;
	for (uint32_t u = f->first_use[v]; u < f->first_use[v + 1]; u++)
		if (f->group_of[f->readers[u]] != index)
			return false;
	return true;
}

/* ": one read of x and y[, no f32 copy of the output]": what a norm or activation kernel saves. */
static void say_saving(phrase *out, const fuser *f, const planned *k) {
	const f8_graph *graph = f->graph;
	const f8_node *seed = member(f, k, 0);
	uint32_t n_read = k->family == F8_KERNEL_FAMILY_NORM ? 1 : seed->n_inputs;
	say(out, ": one read of ");
	for (uint32_t i = 0, said = 0; i < n_read; i++) {
		f8_value_id input = seed->inputs[i];
		if (input != F8_NONE)
			say(out, "%s%s", said++ ? " and " : "", graph->values[input].name);
	}
	const f8_value *output = &graph->values[seed->outputs[0]];
	if (stays_inside(f, k, seed->outputs[0]))
		say(out, ", no %s copy of the output", f8_dtype_name(output->type.dtype));
}

/* A norm, activation or activation_grad kernel: the op, its casts, the bias gradient. */
static void say_pointwise(phrase *out, const fuser *f, const planned *k) {
	const f8_node *seed = member(f, k, 0);
	say(out, "%s of %s", f8_op_name(seed->op), scope_of(f->graph, seed));
	bool has_casts = say_casts(out, f, k, "its output");
	for (uint32_t i = 1; i < k->n_members; i++)
		if (member(f, k, i)->op == F8_OP_REDUCE_SUM)
			say(out, "%s the bias gradient of %s", has_casts ? ", and" : " with",
			    scope_of(f->graph, member(f, k, i)));
	say_saving(out, f, k);
}

/* "LayerNormGrad of layers.0.norm with the E5M2 cast and transpose of dx and its amax: dx,
 * dgamma and dbeta in one kernel over dy and x, no f32 copy of dx". */
static void say_norm_grad(phrase *out, const fuser *f, const planned *k) {
	const f8_graph *graph = f->graph;
	const f8_node *seed = member(f, k, 0);
	say(out, "%s of %s", f8_op_name(seed->op), scope_of(graph, seed));
	say_casts(out, f, k, "dx");
	bool dbeta = seed->n_outputs > 2 && seed->outputs[2] != F8_NONE;
	say(out, ": dx%s in one kernel over dy and x", dbeta ? ", dgamma and dbeta" : " and dgamma");
	if (stays_inside(f, k, seed->outputs[0]))
		say(out, ", no %s copy of dx",
		    f8_dtype_name(graph->values[seed->outputs[0]].type.dtype));
}

/* "Embedding of embed: the rows of embed.weight f32[256, 128] gathered by token id, ..." or
 * "EmbeddingGrad of embed: the rows of dy added into dw f32[256, 128] by id, ...". */
static void say_embedding(phrase *out, const fuser *f, const planned *k) {
	const f8_graph *graph = f->graph;
	const f8_node *seed = member(f, k, 0);
	bool grad = seed->op == F8_OP_EMBEDDING_GRAD;
	const f8_value *table = &graph->values[grad ? seed->outputs[0] : seed->inputs[1]];
	char type[160];
	f8_type_format(graph, &table->type, type, sizeof type);
	say(out, "%s of %s: ", f8_op_name(seed->op), scope_of(graph, seed));
	bool shard = seed->n_inputs > 2 && seed->inputs[2] != F8_NONE;
	if (grad)
		say(out, "the rows of dy added into %s %s by id with atomics", table->name, type);
	else
		say(out, "the rows of %s %s gathered by token id", table->name, type);
	if (shard) // a vocabulary shard (passes/tensor_parallel_vocab.c)
		say(out, ", this rank's rows from %s, %s", graph->values[seed->inputs[2]].name,
		    grad ? "other ids left to their ranks"
			 : "zeros for other ids, an id outside the vocabulary flagged as a data error");
	else
		say(out, ", an id outside the table flagged as a data error");
}

/* The vocabulary-parallel loss's kernels (codegen/lower_cross_entropy_shard.c): "CrossEntropyShard
 * of loss: this rank's sums of exp(logit - max) and label logits from one read of the logits
 * bf16[2, 32, 128] (columns from loss.vocab_start)", and the others'. */
static void say_vocabulary_loss(phrase *out, const fuser *f, const planned *k) {
	const f8_graph *graph = f->graph;
	const f8_node *seed = member(f, k, 0);
	char type[160];
	say(out, "%s of %s: ", f8_op_name(seed->op), scope_of(graph, seed));
	switch (seed->op) {
	case F8_OP_CROSS_ENTROPY_SHARD:
	case F8_OP_CROSS_ENTROPY_SHARD_GRAD: {
		bool grad = seed->op == F8_OP_CROSS_ENTROPY_SHARD_GRAD;
		const f8_value *logits = &graph->values[seed->inputs[grad ? 2 : 0]];
		say(out, "%s the logits %s (this rank's columns, from %s)",
		    grad ? "dsum_exp exp(logit - max), dtarget added at the label's column, over"
			 : "the rows' sums of exp(logit - max) and label logits from one read of",
		    f8_type_format(graph, &logits->type, type, sizeof type),
		    graph->values[seed->inputs[grad ? 5 : 3]].name);
		return;
	}
	case F8_OP_CROSS_ENTROPY_MERGE:
		say(out, "the loss (%s) from the rows' all-reduced sums, label logits and maxima, "
		    "in f32, in one block", f8_node_attr_string(seed, "reduction", "mean"));
		return;
	default:
		say(out, "the gradients of the rows' sums and label logits, in f32, in one block");
		return;
	}
}

/* "AdamW of 52 parameters (210,432 elements) with the zeroing of their 52 gradient
 * accumulators: one multi-tensor kernel, each element read and written once". */
static void say_optimizer(phrase *out, const fuser *f, const planned *k) {
	uint32_t n_adamw = 0, n_zero = 0;
	int64_t elements = 0;
	for (uint32_t i = 0; i < k->n_members; i++) {
		const f8_node *node = member(f, k, i);
		if (node->op != F8_OP_ADAMW) {
			n_zero++;
			continue;
		}
		n_adamw++;
		f8_dim numel;
		if (elements >= 0 && f8_shape_numel(&f->graph->values[node->inputs[0]].type.shape,
						    &numel) && f8_dim_is_const(numel))
			elements += f8_dim_value(numel);
		else
			elements = -1;
	}
	say(out, "AdamW of %u parameter%s", n_adamw, n_adamw == 1 ? "" : "s");
	if (elements >= 0)
		say(out, " (%lld elements)", (long long)elements);
	if (n_zero)
		say(out, " with the zeroing of %s %u gradient accumulator%s", n_zero == 1 ? "its" : "their",
		    n_zero, n_zero == 1 ? "" : "s");
	say(out, ": one multi-tensor kernel, each element read and written once");
}

/* "3 elementwise ops (Add, Mul, Add) with ... in one pass over f32[batch*seq, 768]". */
static void say_elementwise(phrase *out, const fuser *f, const planned *k) {
	uint32_t n_ops = 0;
	for (uint32_t i = 0; i < k->n_members; i++)
		n_ops += !is_cast(member(f, k, i)) && !is_guard(f, k, member(f, k, i));
	if (n_ops == 1)
		say(out, "one elementwise op (");
	else
		say(out, "%u elementwise ops (", n_ops);
	for (uint32_t i = 0, said = 0; i < k->n_members; i++) {
		if (is_cast(member(f, k, i)) || is_guard(f, k, member(f, k, i)))
			continue;
		if (said == 8) {
			say(out, ", ...");
			break;
		}
		say(out, "%s%s", said++ ? ", " : "", f8_op_name(member(f, k, i)->op));
	}
	say(out, ")");
	say_casts(out, f, k, "the result");
	char type[160];
	const f8_value *made = &f->graph->values[member(f, k, 0)->outputs[0]];
	say(out, " in one pass over %s", f8_type_format(f->graph, &made->type, type, sizeof type));
	uint32_t inside = 0;
	for (uint32_t i = 0; i < k->n_members; i++)
		for (uint32_t o = 0; o < member(f, k, i)->n_outputs; o++)
			inside += stays_inside(f, k, member(f, k, i)->outputs[o]);
	if (inside)
		say(out, ", %u intermediate value%s never written", inside, inside == 1 ? "" : "s");
}

/* "E5M2 cast and transpose of y.grad (made by Linear, outside any kernel): both copies and the
 * amax in one read". */
static void say_lone_cast(phrase *out, const fuser *f, const planned *k) {
	const f8_graph *graph = f->graph;
	const f8_node *cast = member(f, k, 0);
	const f8_value *source = &graph->values[cast->inputs[0]];
	say_cast(out, cast);
	if (source->producer == F8_NONE)
		say(out, " of the %s %s", f8_role_name(source->role), source->name);
	else if (f->group_of[source->producer] != F8_NONE)
		say(out, " of %s (made in kernel k%u)", source->name,
		    f->group_of[source->producer]);
	else
		say(out, " of %s (made by %s, outside any kernel)", source->name,
		    f8_op_name(graph->nodes[source->producer].op));
	bool transposed = cast->op == F8_OP_CAST_TRANSPOSE;
	const char *copies = transposed ? "both copies" : "the FP8 copy";
	if (cast->n_inputs > 1 && cast->inputs[1] != F8_NONE) {
		bool bias = k->n_members > 1 && member(f, k, 1)->op == F8_OP_REDUCE_SUM;
		bool amax = f8_node_attr(cast, "slot") != NULL;
		say(out, ": %s%s%s", copies, amax ? (bias ? ", the amax" : " and the amax") : "",
		    amax ? guard_note(f, k) : "");
		if (bias)
			say(out, " and the bias gradient of %s", scope_of(graph, member(f, k, 1)));
		say(out, " in one read");
		return;
	}
	// The scales come from the data: codegen/lower_casts.c's kernels.
	const f8_attr *block = f8_node_attr(cast, "block");
	if (!block || block->ints.n != 2)
		say(out, ": the tensor's amax, then %s at the scale it gives", copies);
	else if (block->ints.items[0] == 1 && block->ints.items[1] == 0)
		say(out, ": %s with a scale per row (and per column of x^T's copy)", copies);
	else
		say(out, ": %s with a scale per %lldx%lld block%s", copies,
		    (long long)block->ints.items[0], (long long)block->ints.items[1],
		    f8_node_attr_dtype(cast, "scale_dtype", F8_DTYPE_F32) == F8_DTYPE_E8M0
			    ? " (MX, E8M0)" : "");
}

/* "Transpose of layers.0.attn: q_bshd f32[8, 128, 4, 32] into q_bhsd f32[8, 4, 128, 32] on the
 * device, each element read and written once"; Split and Concat name their parts' count. */
static void say_layout(phrase *out, const fuser *f, const planned *k) {
	const f8_graph *graph = f->graph;
	const f8_node *node = member(f, k, 0);
	const f8_value *from = &graph->values[node->inputs[0]];
	const f8_value *to = &graph->values[node->outputs[0]];
	char in[160], made[160];
	f8_type_format(graph, &from->type, in, sizeof in);
	f8_type_format(graph, &to->type, made, sizeof made);
	say(out, "%s of %s: ", f8_op_name(node->op), scope_of(graph, node));
	if (node->op == F8_OP_SPLIT)
		say(out, "%s %s into %u parts in one pass", from->name, in, node->n_outputs);
	else if (node->op == F8_OP_CONCAT)
		say(out, "%u inputs into %s %s in one pass", node->n_inputs, to->name, made);
	else
		say(out, "%s %s into %s %s", from->name, in, to->name, made);
	say(out, " on the device, each element read and written once");
}

/* "ReduceSum of layers.0.mlp.fc2: x f32[8, 128, 128] into b.grad f32[128], by 64 x 64 tiles
 * ..., in a fixed order (no atomics: the same result on every run)"; other reductions "one
 * output element a grid row"; an Amax "by chunks, their maxima combined by an atomic max". */
static void say_reduce(phrase *out, const fuser *f, const planned *k) {
	const f8_graph *graph = f->graph;
	const f8_node *node = member(f, k, 0);
	const f8_value *from = &graph->values[node->inputs[0]];
	const f8_value *to = &graph->values[node->outputs[0]];
	char in[160], made[160];
	if (node->op == F8_OP_AMAX) {
		say(out, "Amax of %s: max |x| of %s %s into %s %s by chunks of elements, their "
		    "maxima combined by an atomic max (exact in any order), then stored%s",
		    scope_of(graph, node), from->name, f8_type_format(graph, &from->type, in, sizeof in),
		    to->name, f8_type_format(graph, &to->type, made, sizeof made),
		    k->n_members > 1 ? ", a NaN as +inf" : "");
		return;
	}
	say(out, "%s of %s: %s %s into %s %s, %s, in a fixed order (no atomics: the same result on "
	    "every run)", f8_op_name(node->op), scope_of(graph, node), from->name,
	    f8_type_format(graph, &from->type, in, sizeof in), to->name,
	    f8_type_format(graph, &to->type, made, sizeof made),
	    node->op == F8_OP_REDUCE_SUM && sums_leading_axes(graph, node)
		    ? "by 64 x 64 tiles read along rows, an f32 partial per 16 rows of a column "
		      "added in row order by a second kernel"
		    : "one output element a grid row");
}

/* "MoEDispatch of layers.0.mlp.dispatch: each copy's position in expert order counted over
 * the expert indices (no sort, no atomics), the rows moved there, and the counts". */
static void say_moe(phrase *out, const fuser *f, const planned *k) {
	const f8_node *seed = member(f, k, 0);
	say(out, "%s of %s: ", f8_op_name(seed->op), scope_of(f->graph, seed));
	switch (seed->op) {
	case F8_OP_ROUTER:
		say(out, "per token the scores and the top-%lld experts by rank, in one pass",
		    (long long)f8_node_attr_int(seed, "top_k", 0));
		return;
	case F8_OP_ROUTER_GRAD:
		say(out, "per token the scores again and the logits' gradient, in one pass");
		return;
	default:
		say(out, "each copy's position in expert order counted over the expert indices (no "
		    "sort, no atomics: the same result on every run), %s",
		    seed->op == F8_OP_MOE_DISPATCH ? "the rows moved there, and the counts"
		    : seed->op == F8_OP_MOE_COMBINE_GRAD ? "each copy's gradient and dprobs"
		    : "each token's copies summed");
		return;
	}
}

/* The reason of kernel k. */
static void say_reason(phrase *out, const fuser *f, const planned *k) {
	const f8_graph *graph = f->graph;
	const f8_node *seed = member(f, k, 0);
	char type[160];
	switch (k->family) {
	case F8_KERNEL_FAMILY_ELEMENTWISE: say_elementwise(out, f, k); return;
	case F8_KERNEL_FAMILY_CAST: say_lone_cast(out, f, k); return;
	case F8_KERNEL_FAMILY_CROSS_ENTROPY: {
		if (seed->op != F8_OP_CROSS_ENTROPY && seed->op != F8_OP_CROSS_ENTROPY_GRAD) {
			say_vocabulary_loss(out, f, k);
			return;
		}
		bool grad = seed->op == F8_OP_CROSS_ENTROPY_GRAD;
		const f8_value *logits = &graph->values[seed->inputs[grad ? 1 : 0]];
		say(out, "%s of %s: %s from one read of the logits %s", f8_op_name(seed->op),
		    scope_of(graph, seed),
		    grad ? "the logits' gradient" : "the loss and its log-sum-exp",
		    f8_type_format(graph, &logits->type, type, sizeof type));
		return;
	}
	case F8_KERNEL_FAMILY_SCALING: {
		if (seed->op == F8_OP_SCALE_FROM_AMAX) {
			const f8_value *amax = &graph->values[seed->inputs[0]];
			char format[8];
			f8_name_upper(f8_dtype_name(f8_node_attr_dtype(seed, "format",
								       F8_DTYPE_UNDEFINED)),
				      format, sizeof format);
			say(out, "ScaleFromAmax of %s: the %s scale%s of %s %s on the device",
			    scope_of(graph, seed), format,
			    amax->type.shape.rank ? "s" : "", amax->name,
			    f8_type_format(graph, &amax->type, type, sizeof type));
			return;
		}
		const char *table = graph->values[seed->inputs[0]].name;
		size_t len = strlen(table);
		if (len > 6 && strncmp(table + len - 6, ".scale", 6) == 0)
			len -= 6;
		const f8_shape *scales = &graph->values[seed->inputs[0]].type.shape;
		int64_t slots = scales->rank == 1 && f8_dim_is_const(scales->dims[0])
					? f8_dim_value(scales->dims[0]) : seed->n_inputs - 3;
		say(out, "%s of %.*s: the amax history and scale of %lld slot%s in one kernel",
		    f8_op_name(seed->op), (int)len, table, (long long)slots, slots == 1 ? "" : "s");
		return;
	}
	case F8_KERNEL_FAMILY_NORM_GRAD: say_norm_grad(out, f, k); return;
	case F8_KERNEL_FAMILY_OPTIMIZER: say_optimizer(out, f, k); return;
	case F8_KERNEL_FAMILY_EMBEDDING:
	case F8_KERNEL_FAMILY_EMBEDDING_GRAD: say_embedding(out, f, k); return;
	case F8_KERNEL_FAMILY_LAYOUT: say_layout(out, f, k); return;
	case F8_KERNEL_FAMILY_REDUCE: say_reduce(out, f, k); return;
	case F8_KERNEL_FAMILY_FILL: {
		const f8_value *made = &graph->values[seed->outputs[0]];
		say(out, "%s of %s: %s %s filled on the device", f8_op_name(seed->op),
		    scope_of(graph, seed), made->name, f8_type_format(graph, &made->type, type, sizeof type));
		return;
	}
	case F8_KERNEL_FAMILY_GLOBAL_NORM:
		say(out, "GlobalNorm of %s over %u tensors: sums of squares by chunks of all of them "
		    "in one multi-tensor kernel, then their sum and square root in one block (no "
		    "atomics: the same norm on every run)", scope_of(graph, seed), seed->n_inputs);
		return;
	case F8_KERNEL_FAMILY_LEARNING_RATE:
		say(out, "LearningRate of %s (%s): the schedule at the iteration on the device, in f32",
		    scope_of(graph, seed), f8_node_attr_string(seed, "style", "constant"));
		return;
	case F8_KERNEL_FAMILY_ROPE: {
		const f8_value *x = &graph->values[seed->inputs[0]];
		say(out, "%s of %s: %s %s rotated%s by %s and %s (%s pairs), in one pass",
		    f8_op_name(seed->op), scope_of(graph, seed), x->name,
		    f8_type_format(graph, &x->type, type, sizeof type),
		    seed->op == F8_OP_ROPE_GRAD ? " back" : "", graph->values[seed->inputs[1]].name,
		    graph->values[seed->inputs[2]].name,
		    f8_node_attr_int(seed, "interleaved", 0) ? "interleaved" : "rotate-half");
		return;
	}
	case F8_KERNEL_FAMILY_SOFTMAX: {
		const f8_value *x = &graph->values[seed->inputs[0]];
		say(out, "%s of %s: %s %s by rows over the last axis, one block a row, the row's "
		    "%s combined over the block", f8_op_name(seed->op), scope_of(graph, seed), x->name,
		    f8_type_format(graph, &x->type, type, sizeof type),
		    seed->op == F8_OP_SOFTMAX_GRAD ? "sum of dy y" : "max and sum of exponentials");
		return;
	}
	case F8_KERNEL_FAMILY_MOE: say_moe(out, f, k); return;
	default: say_pointwise(out, f, k); return;
	}
}

/* Commit and report. */

/* Adds the planned kernels to the graph, then sets the members and the program; on failure the
 * graph keeps no kernel. */
static f8_status commit(fuser *f) {
	f8_graph *graph = f->graph;
	for (uint32_t i = 0; i < f->n_kernels; i++) {
		phrase reason = {.used = 0};
		say_reason(&reason, f, &f->kernels[i]);
		char name[16];
		snprintf(name, sizeof name, "k%u", i);
		uint32_t index;
		f8_status status = f8_graph_add_group(graph, name, f->kernels[i].family,
						      reason.text, &index, f->diag);
		if (status) {
			graph->n_groups = 0;
			return status;
		}
	}
	if (graph->n_order)
		memcpy(graph->order, f->order, graph->n_order * sizeof *graph->order);
	for (f8_node_id id = 0; id < graph->n_nodes; id++)
		graph->nodes[id].group = f->group_of[id];
	return F8_OK;
}

/* "fuse: k0 norm: LayerNorm (layers.0.norm), CastTranspose (layers.0.norm)" for each kernel. */
static void report_kernels(const fuser *f, FILE *report) {
	const f8_graph *graph = f->graph;
	for (uint32_t i = 0; i < f->n_kernels; i++) {
		const planned *k = &f->kernels[i];
		fprintf(report, "fuse: %s %s:", graph->groups[i].name,
			f8_kernel_family_name(k->family));
		for (uint32_t m = 0; m < k->n_members; m++)
			fprintf(report, "%s %s (%s)", m ? "," : "", f8_op_name(member(f, k, m)->op),
				scope_of(graph, member(f, k, m)));
		fputc('\n', report);
	}
}

/* The summary: kernels per family, nodes fused, the nodes left outside by op (most first). */
static void report_summary(const fuser *f, FILE *report) {
	const f8_graph *graph = f->graph;
	uint32_t per_family[F8_KERNEL_FAMILY_COUNT] = {0}, per_op[F8_OP_COUNT] = {0}, fused = 0;
	for (uint32_t i = 0; i < f->n_kernels; i++) {
		per_family[f->kernels[i].family]++;
		fused += f->kernels[i].n_members;
	}
	for (uint32_t i = 0; i < graph->n_order; i++)
		if (f->group_of[graph->order[i]] == F8_NONE)
			per_op[graph->nodes[graph->order[i]].op]++;
	fprintf(report, "fuse: %u kernel%s", f->n_kernels, f->n_kernels == 1 ? "" : "s");
	for (int family = 0, said = 0; family < F8_KERNEL_FAMILY_COUNT; family++)
		if (per_family[family])
			fprintf(report, "%s%u %s", said++ ? ", " : " (", per_family[family],
				f8_kernel_family_name((f8_kernel_family)family));
	fprintf(report, "%s; %u of %u nodes fused\n", f->n_kernels ? ")" : "", fused,
		graph->n_order);
	if (fused == graph->n_order)
		return;
	fprintf(report, "fuse: left outside kernels:");
	for (int said = 0;; said++) {
		int most = -1;
		for (int op = 0; op < F8_OP_COUNT; op++)
			if (per_op[op] && (most < 0 || per_op[op] > per_op[most]))
				most = op;
		if (most < 0)
			break;
		fprintf(report, "%s %u %s", said ? "," : "", per_op[most], f8_op_name((f8_op)most));
		per_op[most] = 0;
	}
	fputc('\n', report);
}

f8_status f8_pass_fuse_run(f8_graph *graph, const f8_target_table *target, FILE *report,
			   f8_diag *diag) {
	if (graph->n_groups) {
		f8_diag_set(diag, F8_ERR_INVALID, "the graph is fused already: it has %u "
			    "kernel(s), the first %s", graph->n_groups, graph->groups[0].name);
		f8_diag_hint(diag, "fuse runs once, after the passes that add nodes; compile "
			     "from the model, or from IR dumped before fuse (f8c dump-ir --after "
			     "fp8-cast)");
		return F8_ERR_INVALID;
	}
	// Under the interleaved pipeline schedule, the passes since training may have placed nodes
	// between other chunks' (a cast where its producer is): each chunk's together again, so
	// that no kernel holds two chunks' nodes.
	f8_status status = f8_pipeline_order_chunks(graph, diag);
	fuser f = {.graph = graph, .target = target, .diag = diag};
	if (!status)
		status = fuser_init(&f);
	if (!status) {
		plan(&f);
		status = commit(&f);
	}
	if (!status && report && (!target || !target->supports_node))
		fprintf(report, "fuse: nothing fused: no target table says what codegen lowers "
			"(the compile driver passes codegen/target.h's)\n");
	if (!status && report) {
		report_kernels(&f, report);
		report_summary(&f, report);
	}
	fuser_destroy(&f);
	return status;
}
