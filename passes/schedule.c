/*
 * Buffer liveness -> offsets in one slab (passes/schedule.h).
 *
 * requires: types inferred, fuse.
 */
#include "passes/schedule.h" // f8_pass_schedule_run, f8_buffer_plan

#include <stdlib.h> // qsort
#include <string.h> // memmove

#include "ir/alloc.h" // f8_calloc, f8_free

enum { ALIGNMENT = 256 };
#define END_OF_STEP (UINT32_MAX - 1) // below F8_NONE, which marks "never read"

/* A value to place: its lifetime [first, last] in program positions, its aligned size. */
typedef struct interval {
	f8_value_id value;
	uint32_t first, last;
	uint64_t bytes, offset;
} interval;

/* The bytes of `v`'s buffer, aligned; false when a dim is symbolic. */
static bool aligned_size(const f8_graph *graph, f8_value_id v, uint64_t *out) {
	const f8_type *type = &graph->values[v].type;
	uint64_t n = f8_dtype_get_info(type->dtype)->bytes;
	for (int d = 0; d < type->shape.rank; d++) {
		if (!f8_dim_is_const(type->shape.dims[d]))
			return false;
		n *= (uint64_t)f8_dim_value(type->shape.dims[d]);
	}
	*out = (n + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
	return true;
}

/*
 * The lifetimes: each value made by a node gets [its position, its last read] (END_OF_STEP for
 * outputs and update sources); values that stay inside their fused kernel get none. Fills
 * `spans` (n of them, into *n) and counts those inside kernels; false when a size is
 * symbolic.
 */
static bool lifetimes(const f8_graph *graph, uint32_t *position, uint32_t *last, bool *escapes,
		      interval *spans, uint32_t *n, uint32_t *in_kernels) {
	for (uint32_t p = 0; p < graph->n_order; p++)
		position[graph->order[p]] = p;
	for (uint32_t p = 0; p < graph->n_order; p++) {
		const f8_node *node = &graph->nodes[graph->order[p]];
		for (uint32_t i = 0; i < node->n_inputs; i++) {
			f8_value_id v = node->inputs[i];
			f8_node_id producer = v == F8_NONE ? F8_NONE : graph->values[v].producer;
			if (producer == F8_NONE)
				continue;
			last[v] = p > last[v] || last[v] == F8_NONE ? p : last[v];
			escapes[v] |= graph->nodes[producer].group == F8_NONE ||
				      graph->nodes[producer].group != node->group;
		}
	}
	for (uint32_t i = 0; i < graph->n_outputs; i++)
		last[graph->outputs[i]] = END_OF_STEP, escapes[graph->outputs[i]] = true;
	// An update source is written in place of its leaf (the executor refuses a run that reads
	// a leaf after its update's source is made, so nothing reads the old contents by then):
	// the new weights, moments and gradient accumulators take no slab memory.
	bool *in_place = escapes + graph->n_values + 1;
	for (uint32_t i = 0; i < graph->n_updates; i++)
		in_place[graph->updates[i].source] = true, escapes[graph->updates[i].source] = true;
	*n = *in_kernels = 0;
	for (uint32_t p = 0; p < graph->n_order; p++) {
		const f8_node *node = &graph->nodes[graph->order[p]];
		for (uint32_t o = 0; o < node->n_outputs; o++) {
			f8_value_id v = node->outputs[o];
			bool read = last[v] != F8_NONE;
			if (node->group != F8_NONE && !escapes[v]) { // in registers, or never written
				*in_kernels += 1;
				continue;
			}
			if (in_place[v])
				continue;
			interval span = {.value = v, .first = p, .last = read ? last[v] : p};
			if (!aligned_size(graph, v, &span.bytes))
				return false;
			spans[(*n)++] = span;
		}
	}
	return true;
}

static int larger_first(const void *a, const void *b) {
	const interval *x = a, *y = b;
	if (x->bytes != y->bytes)
		return x->bytes < y->bytes ? 1 : -1;
	return x->first < y->first ? -1 : x->first > y->first;
}

/*
 * Places spans[0 .. n) (sorted larger first): each at the lowest offset free over its
 * lifetime among those placed before it. `placed` (n pointers) keeps those placed so far in
 * offset order, so that each placement is one pass over them, skipping those whose lifetimes
 * do not meet the span's, and one insertion.
 */
static void place(interval *spans, uint32_t n, interval **placed) {
	for (uint32_t i = 0; i < n; i++) {
		interval *span = &spans[i];
		uint64_t offset = 0;
		for (uint32_t j = 0; j < i; j++) {
			const interval *other = placed[j];
			if (other->first > span->last || span->first > other->last)
				continue; // never live at the same time
			if (other->offset >= offset + span->bytes)
				break; // the gap below this one holds it
			uint64_t end = other->offset + other->bytes;
			offset = end > offset ? end : offset;
		}
		span->offset = offset;
		uint32_t at = i;
		while (at > 0 && placed[at - 1]->offset > offset)
			at--;
		memmove(&placed[at + 1], &placed[at], (i - at) * sizeof *placed);
		placed[at] = span;
	}
}

f8_status f8_pass_schedule_run(f8_graph *graph, f8_buffer_plan *plan, FILE *report,
			       f8_diag *diag) {
	uint32_t n_values = graph->n_values + 1;
	uint32_t *position = f8_calloc(graph->n_nodes + 1, sizeof *position);
	uint32_t *last = f8_malloc(n_values * sizeof *last);
	bool *escapes = f8_calloc(2 * (size_t)n_values, sizeof *escapes); // then in_place
	interval *spans = f8_calloc(n_values, sizeof *spans);
	interval **placed = f8_calloc(n_values, sizeof *placed);
	f8_status status = position && last && escapes && spans && placed
				   ? F8_OK
				   : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory planning buffers");
	f8_buffer_plan result = {0};
	uint32_t n = 0;
	if (!status) {
		for (uint32_t v = 0; v < n_values; v++)
			last[v] = F8_NONE;
		for (uint32_t v = 0; v < graph->n_values; v++)
			graph->values[v].buffer_offset = -1;
		result.planned = lifetimes(graph, position, last, escapes, spans, &n,
					   &result.n_in_kernels);
	}
	if (!status && result.planned) {
		qsort(spans, n, sizeof *spans, larger_first);
		place(spans, n, placed);
		for (uint32_t i = 0; i < n; i++) {
			graph->values[spans[i].value].buffer_offset = (int64_t)spans[i].offset;
			uint64_t end = spans[i].offset + spans[i].bytes;
			result.slab_bytes = end > result.slab_bytes ? end : result.slab_bytes;
			result.total_bytes += spans[i].bytes;
		}
		result.n_values = n;
	}
	if (!status && report && result.planned)
		fprintf(report, "schedule: %u values in one slab of %llu bytes (%llu without reuse); "
			"%u values stay inside fused kernels\n", result.n_values,
			(unsigned long long)result.slab_bytes, (unsigned long long)result.total_bytes,
			result.n_in_kernels);
	else if (!status && report)
		fprintf(report, "schedule: sizes are symbolic, no buffers planned\n");
	if (!status && plan)
		*plan = result;
	f8_free(position);
	f8_free(last);
	f8_free(escapes);
	f8_free(spans);
	f8_free(placed);
	return status;
}

f8_buffer_plan f8_buffer_plan_of(const f8_graph *graph) {
	f8_buffer_plan plan = {0};
	for (uint32_t v = 0; v < graph->n_values; v++) {
		int64_t offset = graph->values[v].buffer_offset;
		uint64_t bytes;
		if (offset < 0 || !aligned_size(graph, v, &bytes))
			continue;
		plan.planned = true;
		plan.n_values++;
		plan.total_bytes += bytes;
		if ((uint64_t)offset + bytes > plan.slab_bytes)
			plan.slab_bytes = (uint64_t)offset + bytes;
	}
	return plan;
}
