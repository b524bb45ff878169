/*
 * The check of a slab plan (ir/verify.h: f8_graph_verify_buffers). The lifetimes are derived
 * here again, by the rule passes/schedule.h states, rather than taken from the schedule pass:
 * a check that shared the planner's code would share its bugs, and ir/ depends on nothing
 * above it.
 */
#include "ir/verify.h" // f8_graph_verify_buffers, F8_SLAB_ALIGNMENT

#include <inttypes.h> // PRId64, PRIu64
#include <stdarg.h>   // va_list
#include <stdlib.h>   // qsort
#include <string.h>   // memmove

#include "ir/alloc.h" // f8_malloc, f8_free
#include "ir/text.h"  // f8_type_format

#define END_OF_STEP (UINT32_MAX - 1) // a graph output's last position; below F8_NONE: unread

/* Where a value's bytes live: in the slab, or why not there. */
typedef enum residence {
	RESIDENCE_SLAB,      // a node of the program writes it to memory: it needs an offset
	RESIDENCE_LEAF,      // an input, parameter or state: it persists across steps
	RESIDENCE_IN_PLACE,  // an update's source, written in place of its leaf
	RESIDENCE_IN_KERNEL, // made, and read if at all, only inside its fused kernel: not written
	RESIDENCE_REMOVED,   // no node of the program makes it (its node was removed or rebuilt)
} residence;

/* A buffer of the slab: its value, its lifetime [first, last] in positions of the run order. */
typedef struct buffer {
	f8_value_id value;
	uint32_t first, last;
	uint64_t offset, bytes; // bytes rounded up to F8_SLAB_ALIGNMENT
} buffer;

/* The check: the graph, what is derived of it, where problems go. */
typedef struct checker {
	const f8_graph *graph;
	f8_diag *diag;
	f8_node_id *run;    // (n_order) the nodes in the order a step runs them
	uint32_t *position; // (n_nodes) a node's position in `run`, F8_NONE when not in the program
	uint32_t *kernel_first, *kernel_last; // (n_groups) the positions of each kernel's ends
	uint32_t *last;     // (n_values) its last reader's position, END_OF_STEP, F8_NONE: unread
	bool *escapes;      // (n_values) read outside its producer's fused kernel, or an output
	residence *where;   // (n_values)
} checker;

/* Fails about value `v`, placed at the node that makes it (and its text line) when it has one. */
static f8_status value_error(const checker *c, f8_value_id v, const char *format, ...)
	__attribute__((format(printf, 3, 4)));
static f8_status value_error(const checker *c, f8_value_id v, const char *format, ...) {
	if (!c->diag)
		return F8_ERR_INVALID;
	va_list args;
	va_start(args, format);
	f8_diag_setv(c->diag, F8_ERR_INVALID, format, args);
	va_end(args);
	const f8_graph *graph = c->graph;
	f8_node_id producer = graph->values[v].producer;
	uint32_t line = 0;
	if (c->where[v] != RESIDENCE_LEAF && c->where[v] != RESIDENCE_REMOVED) {
		f8_diag_set_node(c->diag, graph, producer);
		line = graph->nodes[producer].text_line;
	}
	if (graph->text_file)
		f8_diag_at(c->diag, graph->text_file, line, line ? 1 : 0, NULL, 0);
	return F8_ERR_INVALID;
}

/* When a phase runs in a step: cast once first, fwd and bwd once per micro-batch, opt last. */
static int phase_rank(f8_phase phase) {
	return phase == F8_PHASE_CAST ? 0 : phase == F8_PHASE_OPT ? 2 : 1;
}

/* Where node `id` (in the program) starts writing: a fused kernel is one launch, so each of
 * its members writes from the kernel's first position and reads until its last. */
static uint32_t writes_from(const checker *c, f8_node_id id) {
	uint32_t group = c->graph->nodes[id].group;
	return group == F8_NONE ? c->position[id] : c->kernel_first[group];
}

static uint32_t reads_until(const checker *c, f8_node_id id) {
	uint32_t group = c->graph->nodes[id].group;
	return group == F8_NONE ? c->position[id] : c->kernel_last[group];
}

/*
 * The positions: the order a step runs the program in, phase cast, then fwd and bwd, then opt,
 * each in program order (a cast node may stand after fwd nodes that it runs before). Returns
 * the last fwd or bwd position, where the micro-batch loop ends.
 */
static uint32_t order_run(checker *c) {
	const f8_graph *graph = c->graph;
	uint32_t n = 0, loop_end = 0;
	for (f8_node_id id = 0; id < graph->n_nodes; id++)
		c->position[id] = F8_NONE;
	for (int rank = 0; rank < 3; rank++) {
		for (uint32_t p = 0; p < graph->n_order; p++) {
			f8_node_id id = graph->order[p];
			if (phase_rank(graph->nodes[id].phase) != rank)
				continue;
			if (rank == 1)
				loop_end = n;
			c->position[id] = n;
			c->run[n++] = id;
		}
	}
	return loop_end;
}

/*
 * The lifetimes, as the schedule pass finds them, in positions of the run order: a value read
 * by a node lives to where the node reads (its position, or its kernel's last), or to the last
 * fwd or bwd position when it is made in phase cast and read in fwd or bwd (cast runs once a
 * step, fwd and bwd once per micro-batch: the last micro-batch reads it there too); a graph
 * output lives to the end of the step. Then each value's residence.
 */
static void derive(checker *c) {
	const f8_graph *graph = c->graph;
	uint32_t loop_end = order_run(c);
	for (uint32_t g = 0; g < graph->n_groups; g++)
		c->kernel_first[g] = F8_NONE;
	for (uint32_t p = 0; p < graph->n_order; p++) {
		uint32_t group = graph->nodes[c->run[p]].group;
		if (group == F8_NONE)
			continue;
		if (c->kernel_first[group] == F8_NONE)
			c->kernel_first[group] = p;
		c->kernel_last[group] = p;
	}
	for (f8_value_id v = 0; v < graph->n_values; v++)
		c->last[v] = F8_NONE, c->escapes[v] = false;
	for (uint32_t p = 0; p < graph->n_order; p++) {
		const f8_node *node = &graph->nodes[c->run[p]];
		for (uint32_t i = 0; i < node->n_inputs; i++) {
			f8_value_id v = node->inputs[i];
			if (v == F8_NONE || graph->values[v].producer == F8_NONE)
				continue;
			const f8_node *producer = &graph->nodes[graph->values[v].producer];
			bool reread = producer->phase == F8_PHASE_CAST &&
				      phase_rank(node->phase) == 1;
			uint32_t until = reread ? loop_end : reads_until(c, c->run[p]);
			if (c->last[v] == F8_NONE || until > c->last[v])
				c->last[v] = until;
			c->escapes[v] |= producer->group == F8_NONE ||
					 producer->group != node->group;
		}
	}
	for (uint32_t i = 0; i < graph->n_outputs; i++) {
		c->last[graph->outputs[i]] = END_OF_STEP;
		c->escapes[graph->outputs[i]] = true;
	}
	for (f8_value_id v = 0; v < graph->n_values; v++) {
		const f8_value *value = &graph->values[v];
		f8_node_id producer = value->producer;
		// A value whose node is in the program may still not be made by it: a pass that
		// rebuilds a node (autodiff, adding outputs) leaves the values it replaced behind.
		const f8_node *node = producer == F8_NONE ? NULL : &graph->nodes[producer];
		bool made = node && c->position[producer] != F8_NONE &&
			    value->output_index < node->n_outputs &&
			    node->outputs[value->output_index] == v;
		if (!node)
			c->where[v] = RESIDENCE_LEAF;
		else if (!made)
			c->where[v] = RESIDENCE_REMOVED;
		else if (graph->nodes[producer].group != F8_NONE && !c->escapes[v])
			c->where[v] = RESIDENCE_IN_KERNEL;
		else
			c->where[v] = RESIDENCE_SLAB;
	}
	// After the kernels: a source read only inside its kernel still reaches memory, its leaf's.
	for (uint32_t i = 0; i < graph->n_updates; i++)
		if (c->where[graph->updates[i].source] != RESIDENCE_REMOVED)
			c->where[graph->updates[i].source] = RESIDENCE_IN_PLACE;
}

/* The bytes of `v`'s buffer, rounded up to F8_SLAB_ALIGNMENT (UINT64_MAX when that overflows);
 * false when a dim is symbolic. */
static bool buffer_bytes(const f8_graph *graph, f8_value_id v, uint64_t *out) {
	const f8_type *type = &graph->values[v].type;
	uint64_t n = f8_dtype_get_info(type->dtype)->bytes;
	bool overflow = false;
	for (int d = 0; d < type->shape.rank; d++) {
		if (!f8_dim_is_const(type->shape.dims[d]))
			return false;
		uint64_t dim = (uint64_t)f8_dim_value(type->shape.dims[d]);
		overflow |= __builtin_mul_overflow(n, dim, &n);
	}
	overflow |= n > UINT64_MAX - (F8_SLAB_ALIGNMENT - 1);
	*out = overflow ? UINT64_MAX
			: (n + F8_SLAB_ALIGNMENT - 1) / F8_SLAB_ALIGNMENT * F8_SLAB_ALIGNMENT;
	return true;
}

static uint64_t end_of(const buffer *b) {
	return b->bytes > UINT64_MAX - b->offset ? UINT64_MAX : b->offset + b->bytes;
}

/* An offset where none belongs: `v` has one though the schedule gives it no buffer. */
static f8_status check_no_offset(const checker *c, f8_value_id v) {
	const f8_graph *graph = c->graph;
	const f8_value *value = &graph->values[v];
	int64_t offset = value->buffer_offset;
	f8_value_id target = F8_NONE;
	switch (c->where[v]) {
	case RESIDENCE_SLAB:
		return F8_OK;
	case RESIDENCE_LEAF:
		value_error(c, v, "%%%s is a leaf (%s) but has offset=%" PRId64 ": leaves persist "
			    "across steps, outside the slab, so they have no offset", value->name,
			    f8_role_name(value->role), offset);
		break;
	case RESIDENCE_IN_PLACE:
		for (uint32_t i = 0; i < graph->n_updates && target == F8_NONE; i++)
			if (graph->updates[i].source == v)
				target = graph->updates[i].target;
		value_error(c, v, "%%%s has offset=%" PRId64 " but is the source of `update %%%s "
			    "<- %%%s`: it is written in place of its leaf, so it has no offset",
			    value->name, offset, graph->values[target].name, value->name);
		break;
	case RESIDENCE_IN_KERNEL:
		value_error(c, v, "%%%s has offset=%" PRId64 " but is made in fused kernel %s and "
			    "read only inside it: it never reaches memory, so it has no offset",
			    value->name, offset,
			    graph->groups[graph->nodes[value->producer].group].name);
		break;
	case RESIDENCE_REMOVED:
		value_error(c, v, "%%%s has offset=%" PRId64 " but no node of the program makes "
			    "it", value->name, offset);
		break;
	}
	f8_diag_hint(c->diag, "offsets are the schedule pass's: f8c dump-ir MODEL --after "
		     "schedule prints the graph with them");
	return F8_ERR_INVALID;
}

/*
 * A value that needs a buffer, in a planned graph (`planned` has an offset): it has an aligned
 * offset, a bound size, and ends inside a slab of `slab_bytes` (0: no bound). Its buffer into
 * *out.
 */
static f8_status check_buffer(const checker *c, f8_value_id v, f8_value_id planned,
			      uint64_t slab_bytes, buffer *out) {
	const f8_graph *graph = c->graph;
	const f8_value *value = &graph->values[v];
	const char *name = value->name, *planned_name = graph->values[planned].name;
	int64_t offset = value->buffer_offset;
	int64_t planned_offset = graph->values[planned].buffer_offset;
	uint64_t bytes;
	if (!buffer_bytes(graph, v, &bytes)) {
		char type[160];
		value_error(c, v, "%%%s is of %s, a symbolic size, but the graph is planned (%%%s "
			    "has offset=%" PRId64 "): the schedule pass plans buffers only when "
			    "every size is bound", name,
			    f8_type_format(graph, &value->type, type, sizeof type), planned_name,
			    planned_offset);
		f8_diag_hint(c->diag, "bind the sizes before schedule (f8c dump-ir --dim NAME=N), "
			     "or drop the offsets");
		return F8_ERR_INVALID;
	}
	if (offset < 0) {
		value_error(c, v, "%%%s has no offset, but the graph is planned (%%%s has "
			    "offset=%" PRId64 ") and %%%s is written to memory: it needs a buffer "
			    "in the slab",
			    name, planned_name, planned_offset, name);
		f8_diag_hint(c->diag, "values read outside their node's fused kernel, and graph "
			     "outputs, are written to memory; leaves and updates' sources are not");
		return F8_ERR_INVALID;
	}
	if (offset % F8_SLAB_ALIGNMENT)
		return value_error(c, v, "%%%s has offset=%" PRId64 ", not a multiple of %d: slab "
				   "buffers are aligned to %d bytes", name, offset,
				   F8_SLAB_ALIGNMENT, F8_SLAB_ALIGNMENT);
	uint32_t first = writes_from(c, value->producer);
	bool read = c->last[v] != F8_NONE && c->last[v] > first; // (not below first: see the pass)
	*out = (buffer){.value = v, .first = first, .last = read ? c->last[v] : first,
			.offset = (uint64_t)offset, .bytes = bytes};
	if (slab_bytes && end_of(out) > slab_bytes)
		return value_error(c, v, "%%%s (offset=%" PRId64 ", %" PRIu64 " bytes) ends at "
				   "byte %" PRIu64 ", past the slab's %" PRIu64 " bytes", name,
				   offset, bytes, end_of(out), slab_bytes);
	return F8_OK;
}

/* "position 3 (node 5 (%y = Neg))", "position 3 (this node)" when it is `here`, or "the end
 * of the step", into `text`. */
static const char *position_text(const checker *c, uint32_t p, uint32_t here, char *text,
				 size_t size) {
	char node[F8_DIAG_NODE_MAX];
	if (p == END_OF_STEP)
		snprintf(text, size, "the end of the step");
	else if (p == here)
		snprintf(text, size, "position %u (this node)", p);
	else
		snprintf(text, size, "position %u (%s)", p,
			 f8_graph_describe_node(c->graph, c->run[p], node, sizeof node));
	return text;
}

/* "positions 3 to 7", "position 3", "positions 3 to the end of the step". */
static const char *lifetime_text(const buffer *b, char *text, size_t size) {
	if (b->first == b->last)
		snprintf(text, size, "position %u", b->first);
	else if (b->last == END_OF_STEP)
		snprintf(text, size, "positions %u to the end of the step", b->first);
	else
		snprintf(text, size, "positions %u to %u", b->first, b->last);
	return text;
}

/* Fails about `a` and `b`, which meet in the slab: `a` is alive where `b` is born. */
static f8_status overlap_error(const checker *c, const buffer *a, const buffer *b) {
	const f8_graph *graph = c->graph;
	uint32_t from = b->first, to = a->last < b->last ? a->last : b->last;
	uint32_t here = c->position[graph->values[b->value].producer]; // the node the error names
	uint64_t low = a->offset > b->offset ? a->offset : b->offset;
	uint64_t high = end_of(a) < end_of(b) ? end_of(a) : end_of(b);
	char life_a[64], life_b[64];
	char from_text[F8_DIAG_NODE_MAX + 32], to_text[F8_DIAG_NODE_MAX + 32];
	lifetime_text(a, life_a, sizeof life_a);
	lifetime_text(b, life_b, sizeof life_b);
	position_text(c, from, here, from_text, sizeof from_text);
	position_text(c, to, here, to_text, sizeof to_text);
	value_error(c, b->value, "%%%s (offset=%" PRIu64 ", %" PRIu64 " bytes, alive at %s) "
		    "and %%%s (offset=%" PRIu64 ", %" PRIu64 " bytes, alive at %s) overlap in the "
		    "slab, at bytes %" PRIu64 " to %" PRIu64 ", while both are alive: %s%s%s%s",
		    graph->values[a->value].name, a->offset, a->bytes, life_a,
		    graph->values[b->value].name, b->offset, b->bytes, life_b, low, high,
		    from == to ? "at " : "from ", from_text, from == to ? "" : " to ",
		    from == to ? "" : to_text);
	f8_diag_hint(c->diag, "values alive at the same time need disjoint bytes of the slab; the "
		     "schedule pass places them so (f8c dump-ir MODEL --after schedule)");
	return F8_ERR_INVALID;
}

static int born_first(const void *x, const void *y) {
	const buffer *a = x, *b = y;
	if (a->first != b->first)
		return a->first < b->first ? -1 : 1;
	if (a->offset != b->offset)
		return a->offset < b->offset ? -1 : 1;
	return a->value < b->value ? -1 : a->value > b->value;
}

/*
 * No two of buffers[0 .. n) alive at one position meet in the slab. A sweep over the program:
 * `alive` (n slots) holds the buffers alive at the current position in offset order; while
 * they are disjoint, a new one can only meet its two neighbours in that order.
 */
static f8_status check_overlaps(const checker *c, buffer *buffers, uint32_t n,
				const buffer **alive) {
	qsort(buffers, n, sizeof *buffers, born_first);
	uint32_t n_alive = 0;
	for (uint32_t i = 0; i < n; i++) {
		const buffer *b = &buffers[i];
		if (b->bytes == 0)
			continue; // holds no byte, so meets nothing
		uint32_t kept = 0;
		for (uint32_t j = 0; j < n_alive; j++)
			if (alive[j]->last >= b->first)
				alive[kept++] = alive[j];
		n_alive = kept;
		uint32_t low = 0, high = n_alive; // to the first alive at an offset >= b's
		while (low < high) {
			uint32_t mid = low + (high - low) / 2;
			if (alive[mid]->offset < b->offset)
				low = mid + 1;
			else
				high = mid;
		}
		if (low > 0 && end_of(alive[low - 1]) > b->offset)
			return overlap_error(c, alive[low - 1], b);
		if (low < n_alive && alive[low]->offset < end_of(b))
			return overlap_error(c, alive[low], b);
		memmove(&alive[low + 1], &alive[low], (n_alive - low) * sizeof *alive);
		alive[low] = b;
		n_alive++;
	}
	return F8_OK;
}

f8_status f8_graph_verify_buffers(const f8_graph *graph, uint64_t slab_bytes, f8_diag *diag) {
	size_t n_nodes = graph->n_nodes ? graph->n_nodes : 1;
	size_t n_values = graph->n_values ? graph->n_values : 1;
	size_t n_groups = graph->n_groups ? graph->n_groups : 1;
	checker c = {.graph = graph, .diag = diag,
		     .run = f8_malloc((graph->n_order ? graph->n_order : 1) * sizeof *c.run),
		     .position = f8_malloc(n_nodes * sizeof *c.position),
		     .kernel_first = f8_malloc(n_groups * sizeof *c.kernel_first),
		     .kernel_last = f8_malloc(n_groups * sizeof *c.kernel_last),
		     .last = f8_malloc(n_values * sizeof *c.last),
		     .escapes = f8_malloc(n_values * sizeof *c.escapes),
		     .where = f8_malloc(n_values * sizeof *c.where)};
	buffer *buffers = f8_malloc(n_values * sizeof *buffers);
	const buffer **alive = f8_malloc(n_values * sizeof *alive);
	f8_status status = F8_OK;
	if (!c.run || !c.position || !c.kernel_first || !c.kernel_last || !c.last || !c.escapes ||
	    !c.where || !buffers || !alive) {
		status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory checking the slab plan");
		goto done;
	}
	derive(&c);
	f8_value_id planned = F8_NONE; // the first value with an offset
	for (f8_value_id v = 0; v < graph->n_values && planned == F8_NONE; v++)
		if (graph->values[v].buffer_offset >= 0)
			planned = v;
	if (planned == F8_NONE)
		goto done; // not planned: there is no plan to hold to its lifetimes
	// Offsets where none belongs first: they say more than the missing ones they may stand for.
	for (f8_value_id v = 0; !status && v < graph->n_values; v++)
		if (graph->values[v].buffer_offset >= 0)
			status = check_no_offset(&c, v);
	uint32_t n = 0;
	for (f8_value_id v = 0; !status && v < graph->n_values; v++)
		if (c.where[v] == RESIDENCE_SLAB)
			status = check_buffer(&c, v, planned, slab_bytes, &buffers[n++]);
	if (!status)
		status = check_overlaps(&c, buffers, n, alive);
done:
	f8_free(c.run);
	f8_free(c.position);
	f8_free(c.kernel_first);
	f8_free(c.kernel_last);
	f8_free(c.last);
	f8_free(c.escapes);
	f8_free(c.where);
	f8_free(buffers);
	f8_free(alive);
	return status;
}
