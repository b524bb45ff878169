/*
 * Buffer liveness -> offsets in one slab (passes/schedule.h).
 *
 * requires: types inferred, fuse.
 */
#define _POSIX_C_SOURCE 200809L // strnlen

#include "passes/schedule.h" // f8_pass_schedule_run, f8_buffer_plan

#include <stdlib.h> // qsort
#include <string.h> // memmove, memcpy, strnlen

#include "ir/alloc.h"  // f8_calloc, f8_free
#include "ir/verify.h" // f8_graph_verify_buffers, F8_SLAB_ALIGNMENT

#define END_OF_STEP (UINT32_MAX - 1) // below F8_NONE, which marks "never read"

/* A value to place: its lifetime [first, last] in positions of the run order, its aligned size. */
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
	*out = (n + F8_SLAB_ALIGNMENT - 1) / F8_SLAB_ALIGNMENT * F8_SLAB_ALIGNMENT;
	return true;
}

/* When a phase runs in a step: cast once first, fwd and bwd once per micro-batch, opt last. */
static int phase_rank(f8_phase phase) {
	return phase == F8_PHASE_CAST ? 0 : phase == F8_PHASE_OPT ? 2 : 1;
}

/*
 * The order a step runs the program's nodes in, into `run` (n_order ids): phase cast, then fwd
 * and bwd, then opt, each in program order; the lifetimes are in its positions. Returns the
 * last fwd or bwd position, where the micro-batch loop ends. The program order alone would not
 * do: fp8-cast puts a weight's cast (phase cast) at the head beside an input's (fwd), so a
 * cast node may stand after fwd nodes that it runs before.
 */
static uint32_t run_order(const f8_graph *graph, f8_node_id *run) {
	uint32_t n = 0, loop_end = 0;
	for (int rank = 0; rank < 3; rank++) {
		for (uint32_t p = 0; p < graph->n_order; p++) {
			if (phase_rank(graph->nodes[graph->order[p]].phase) != rank)
				continue;
			loop_end = rank == 1 ? n : loop_end;
			run[n++] = graph->order[p];
		}
	}
	return loop_end;
}

/*
 * The lifetimes, in the positions of `run` (run_order; loop_end its last fwd or bwd
 * position): each value made by a node gets [its position, its last read] (END_OF_STEP for
 * outputs); a fused kernel's members count as standing at each of the kernel's positions (one
 * launch reads and writes for all of them at once); a value made in phase cast and read in fwd
 * or bwd lives to loop_end, since the micro-batches after the first read it again. Values that
 * stay inside their fused kernel, and update sources, get none. Fills `spans` (n of them, into
 * *n) and counts those inside kernels; false when a size is symbolic. `kernel_span` (2 per
 * kernel) is room for each kernel's first and last positions.
 */
static bool lifetimes(const f8_graph *graph, const f8_node_id *run, uint32_t loop_end,
		      uint32_t *kernel_span, uint32_t *last, bool *escapes, interval *spans,
		      uint32_t *n, uint32_t *in_kernels) {
	for (uint32_t g = 0; g < graph->n_groups; g++)
		kernel_span[2 * g] = F8_NONE;
	for (uint32_t p = 0; p < graph->n_order; p++) {
		const f8_node *node = &graph->nodes[run[p]];
		if (node->group != F8_NONE && kernel_span[2 * node->group] == F8_NONE)
			kernel_span[2 * node->group] = p;
		if (node->group != F8_NONE)
			kernel_span[2 * node->group + 1] = p;
	}
	for (uint32_t p = 0; p < graph->n_order; p++) {
		const f8_node *node = &graph->nodes[run[p]];
		uint32_t reads_until = node->group == F8_NONE ? p
							      : kernel_span[2 * node->group + 1];
		for (uint32_t i = 0; i < node->n_inputs; i++) {
			f8_value_id v = node->inputs[i];
			f8_node_id producer = v == F8_NONE ? F8_NONE : graph->values[v].producer;
			if (producer == F8_NONE)
				continue;
			bool reread = graph->nodes[producer].phase == F8_PHASE_CAST &&
				      phase_rank(node->phase) == 1;
			uint32_t until = reread ? loop_end : reads_until;
			last[v] = until > last[v] || last[v] == F8_NONE ? until : last[v];
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
		const f8_node *node = &graph->nodes[run[p]];
		uint32_t writes_from = node->group == F8_NONE ? p : kernel_span[2 * node->group];
		for (uint32_t o = 0; o < node->n_outputs; o++) {
			f8_value_id v = node->outputs[o];
			// last < writes_from only in a program no step can run (a cast node reading
			// what fwd makes): such a value is taken as unread.
			bool read = last[v] != F8_NONE && last[v] > writes_from;
			if (node->group != F8_NONE && !escapes[v]) { // in registers, or never written
				*in_kernels += 1;
				continue;
			}
			if (in_place[v])
				continue;
			interval span = {.value = v, .first = writes_from,
					 .last = read ? last[v] : writes_from};
			if (!aligned_size(graph, v, &span.bytes))
				return false;
			spans[(*n)++] = span;
		}
	}
	return true;
}

/* Larger first, then earlier; the value id last, so that the order (and so the plan) does not
 * depend on how the C library's qsort orders equal elements. */
static int larger_first(const void *a, const void *b) {
	const interval *x = a, *y = b;
	if (x->bytes != y->bytes)
		return x->bytes < y->bytes ? 1 : -1;
	if (x->first != y->first)
		return x->first < y->first ? -1 : 1;
	return x->value < y->value ? -1 : x->value > y->value;
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

/* The plan made, held to the verifier's check of it (ir/verify.h), which derives the lifetimes
 * on its own: a failure is a bug of this pass, said as one, before the check's message. */
static f8_status self_check(const f8_graph *graph, uint64_t slab_bytes, f8_diag *diag) {
	f8_status status = f8_graph_verify_buffers(graph, slab_bytes, diag);
	if (status != F8_ERR_INVALID || !diag)
		return status;
	char original[F8_DIAG_MESSAGE_MAX];
	memcpy(original, diag->message, sizeof original);
	int prefix = snprintf(diag->message, sizeof diag->message, "internal error in pass "
			      "schedule: the slab plan it made fails its check: ");
	if (prefix > 0 && (size_t)prefix < sizeof diag->message) {
		size_t len = strnlen(original, sizeof diag->message - (size_t)prefix - 1);
		memcpy(diag->message + prefix, original, len);
		diag->message[prefix + len] = '\0';
	}
	f8_diag_hint(diag, "this is a bug in f8c, not in the model: please report it with the "
		     "model and the options");
	return status;
}

f8_status f8_pass_schedule_run(f8_graph *graph, f8_buffer_plan *plan, FILE *report,
			       f8_diag *diag) {
	uint32_t n_values = graph->n_values + 1;
	f8_node_id *run = f8_calloc(graph->n_order + 1, sizeof *run);
	uint32_t *kernel_span = f8_calloc(2 * ((size_t)graph->n_groups + 1), sizeof *kernel_span);
	uint32_t *last = f8_malloc(n_values * sizeof *last);
	bool *escapes = f8_calloc(2 * (size_t)n_values, sizeof *escapes); // then in_place
	interval *spans = f8_calloc(n_values, sizeof *spans);
	interval **placed = f8_calloc(n_values, sizeof *placed);
	f8_status status = run && kernel_span && last && escapes && spans && placed
				   ? F8_OK
				   : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory planning buffers");
	f8_buffer_plan result = {0};
	uint32_t n = 0;
	if (!status) {
		for (uint32_t v = 0; v < n_values; v++)
			last[v] = F8_NONE;
		for (uint32_t v = 0; v < graph->n_values; v++)
			graph->values[v].buffer_offset = -1;
		uint32_t loop_end = run_order(graph, run);
		result.planned = lifetimes(graph, run, loop_end, kernel_span, last, escapes, spans,
					   &n, &result.n_in_kernels);
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
	if (!status)
		status = self_check(graph, result.slab_bytes, diag);
	if (!status && report && result.planned)
		fprintf(report, "schedule: %u values in one slab of %llu bytes (%llu without reuse); "
			"%u values stay inside fused kernels\n", result.n_values,
			(unsigned long long)result.slab_bytes, (unsigned long long)result.total_bytes,
			result.n_in_kernels);
	else if (!status && report)
		fprintf(report, "schedule: sizes are symbolic, no buffers planned\n");
	if (!status && plan)
		*plan = result;
	f8_free(run);
	f8_free(kernel_span);
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
