/*
 * AllToAllDispatch and AllToAllCombine on the GPU (runtime/cuda/all_to_all.h): the reference
 * kernels' steps (runtime/cpu/kernels_all_to_all.c) with the rows on the device, their counts
 * on the host.
 */
#include "runtime/cuda/all_to_all.h" // f8_cuda_all_to_all_*

#include <stdarg.h> // va_list, va_start, va_end
#include <string.h> // memcpy

#include "ir/alloc.h"            // f8_calloc, f8_free
#include "ir/dtype.h"            // f8_dtype_get_info, F8_DTYPE_KIND_INT, F8_DTYPE_I64
#include "ir/ops.h"              // f8_op_get_info
#include "runtime/cuda/driver.h" // f8_cuda_copy_*, f8_cuda_memset_async, f8_cuda_stream_*

enum { ALIGNMENT = 256 };

/* One exchange: where it runs, its sizes, the rows' counts and the bytes to and from each
 * rank, as the reference's. */
typedef struct exchange {
	const f8_cuda_all_to_all_group *group;
	const f8_graph *graph;
	f8_node_id id;
	CUstream stream;
	int64_t experts, local;  // E; E / ranks, the experts of a rank
	int64_t *counts;         // (E) this rank's rows per expert, to be sent
	int64_t *received;       // (ranks, local) the rows each rank sends this one, per local expert
	int64_t *per_expert;     // (local) the rows this rank receives per local expert, all ranks'
	unsigned char *raw;      // (E x 8 bytes) integers as the device holds them, to be widened
	uint64_t *bytes;         // (2 ranks) bytes out to, and in from, each rank
	uint64_t row;            // a row's bytes
} exchange;

static void exchange_destroy(exchange *e) {
	f8_free(e->counts);
	f8_free(e->bytes);
}

/* A failure of `status` naming the node. */
static f8_status fail(const exchange *e, f8_status status, f8_diag *diag, const char *format,
		      ...) __attribute__((format(printf, 4, 5)));
static f8_status fail(const exchange *e, f8_status status, f8_diag *diag, const char *format,
		      ...) {
	va_list args;
	va_start(args, format);
	f8_diag_setv(diag, status, format, args);
	va_end(args);
	if (diag)
		f8_diag_set_node(diag, e->graph, e->id);
	return status;
}

/* The bytes of the (ranks x rows, hidden) tensor, dispatch's output and combine's input, rounded
 * up so that the counts after them in the staging buffer are aligned. */
static uint64_t rows_area(const f8_node *node, const f8_tensor_view *views) {
	const f8_tensor_view *rows = &views[node->op == F8_OP_ALL_TO_ALL_DISPATCH ? node->outputs[0]
										   : node->inputs[0]];
	return (rows->n_bytes + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
}

uint64_t f8_cuda_all_to_all_staging(const f8_node *node, const f8_tensor_view *views) {
	return rows_area(node, views) + (uint64_t)views[node->inputs[1]].dims[0] * sizeof(int64_t);
}

/* Waits for the stream: over NCCL watching the communicators (a peer that died fails it rather
 * than hanging), as the collectives' own waits do. */
static f8_status wait_stream(const exchange *e, f8_diag *diag) {
	if (!e->group->nccl)
		return f8_cuda_stream_synchronize(e->stream, diag);
	return f8_nccl_synchronize(e->group->nccl, e->stream,
				   f8_op_get_info(e->graph->nodes[e->id].op)->name, diag);
}

/* E integers of `dtype` at `from` (the stream waited for) into out[], widened to int64 (the
 * host is little-endian, as the GPUs f8c targets sit in). */
static f8_status read_integers(const exchange *e, CUdeviceptr from, f8_dtype dtype, int64_t *out,
			       f8_diag *diag) {
	size_t bytes = f8_dtype_get_info(dtype)->bytes;
	bool is_signed = f8_dtype_get_info(dtype)->kind == F8_DTYPE_KIND_INT;
	if (bytes > sizeof(int64_t))
		return fail(e, F8_ERR_INVALID, diag, "counts of %s: not an integer of 8 bytes or "
			    "fewer", f8_dtype_name(dtype));
	f8_status status = e->experts ? f8_cuda_copy_to_host(e->raw, from,
							     (size_t)e->experts * bytes, diag)
				      : F8_OK;
	for (int64_t i = 0; !status && i < e->experts; i++) {
		uint64_t value = 0;
		for (size_t b = 0; b < bytes; b++)
			value |= (uint64_t)e->raw[(size_t)i * bytes + b] << (8 * b);
		if (is_signed && bytes < 8 && (value >> (8 * bytes - 1)) & 1)
			value |= ~0ull << (8 * bytes);
		out[i] = (int64_t)value; // an unsigned one past INT64_MAX: negative, refused
	}
	return status;
}

/* Refuses counts that are negative or add up to more than `rows`, as the reference does. */
static f8_status check_counts(const exchange *e, const int64_t *counts, int64_t n, int64_t rows,
			      const char *what, f8_diag *diag) {
	int64_t total = 0;
	for (int64_t i = 0; i < n; i++) {
		if (counts[i] < 0 || counts[i] > rows - total)
			return fail(e, F8_ERR_INVALID, diag, "%s (entry %lld: %lld after %lld) do not "
				    "fit the %lld rows", what, (long long)i, (long long)counts[i],
				    (long long)total, (long long)rows);
		total += counts[i];
	}
	return F8_OK;
}

/*
 * The rows each rank sends this one, per local expert, over NCCL: each rank sends rank j its
 * counts (at `counts`, of `dtype`) of j's experts, and receives rank r's counts of its own
 * experts at `into` + r's place, which is then read to the host.
 */
static f8_status exchange_counts(exchange *e, CUdeviceptr counts, f8_dtype dtype,
				 CUdeviceptr into, f8_diag *diag) {
	const f8_cuda_all_to_all_group *g = e->group;
	uint64_t bytes = (uint64_t)e->local * f8_dtype_get_info(dtype)->bytes; // to each rank
	f8_status status = f8_nccl_group_start(g->nccl, diag);
	for (uint32_t r = 0; !status && bytes && r < g->ranks; r++) {
		status = f8_nccl_send(g->nccl, g->axes, r, counts + r * bytes, bytes, e->stream,
				      diag);
		if (!status)
			status = f8_nccl_recv(g->nccl, g->axes, r, into + r * bytes, bytes, e->stream,
					      diag);
	}
	f8_status ended = f8_nccl_group_end(g->nccl, status ? NULL : diag);
	status = status ? status : ended;
	if (!status)
		status = wait_stream(e, diag);
	if (!status)
		status = read_integers(e, into, dtype, e->received, diag);
	return status;
}

/* The rows to and from each rank into e->bytes: this rank's counts of rank r's experts out, the
 * rows rank r sends this one in; and the rows per local expert. */
static void exchange_sizes(exchange *e) {
	uint32_t ranks = e->group->ranks;
	for (int64_t l = 0; l < e->local; l++)
		e->per_expert[l] = 0;
	for (uint32_t r = 0; r < ranks; r++) {
		int64_t out = 0, in = 0;
		for (int64_t l = 0; l < e->local; l++) {
			out += e->counts[r * e->local + l];
			in += e->received[r * e->local + l];
			e->per_expert[l] += e->received[r * e->local + l];
		}
		e->bytes[r] = (uint64_t)out * e->row;
		e->bytes[ranks + r] = (uint64_t)in * e->row;
	}
}

/*
 * Reads the counts (input 1) and the rows received per rank (input 2 when given, else over
 * NCCL; on one rank without NCCL, the counts themselves), waiting for the stream first, checks
 * them against the `sent_rows` this rank has and the `received_rows` it can hold, and sizes the
 * exchange.
 */
static f8_status exchange_init(exchange *e, const f8_node *node, const f8_tensor_view *views,
			       const CUdeviceptr *inputs, int64_t sent_rows, int64_t received_rows,
			       f8_diag *diag) {
	const f8_cuda_all_to_all_group *g = e->group;
	const f8_tensor_view *rows = &views[node->inputs[0]], *counts = &views[node->inputs[1]];
	bool given = node->n_inputs > 2 && node->inputs[2] != F8_NONE;
	int64_t ranks = f8_node_attr_int(node, "ranks", 1);
	if (ranks != (int64_t)g->ranks) {
		f8_status status = fail(e, F8_ERR_UNSUPPORTED, diag, "an exchange over %lld ranks "
					"needs them; this group has %u", (long long)ranks, g->ranks);
		f8_diag_hint(diag, "run it with the plan's expert-parallel ranks");
		return status;
	}
	if (rows->rank != 2 || counts->rank != 1 || counts->dims[0] % ranks)
		return fail(e, F8_ERR_INVALID, diag, "rows of rank 2 and E counts, E a multiple of "
			    "the %lld ranks, expected", (long long)ranks);
	e->experts = counts->dims[0];
	e->local = e->experts / ranks;
	e->row = (uint64_t)rows->dims[1] * f8_dtype_get_info(rows->dtype)->bytes;
	// counts, received, the raw integers (8 bytes each at most), per_expert
	e->counts = f8_calloc((size_t)(3 * e->experts + e->local) + 1, sizeof(int64_t));
	e->bytes = f8_calloc(2 * (size_t)g->ranks, sizeof *e->bytes);
	if (!e->counts || !e->bytes) {
		exchange_destroy(e);
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	}
	e->received = e->counts + e->experts;
	e->raw = (unsigned char *)(e->counts + 2 * e->experts);
	e->per_expert = e->counts + 3 * e->experts;
	f8_status status = wait_stream(e, diag); // the counts are made on the stream
	if (!status)
		status = read_integers(e, inputs[1], counts->dtype, e->counts, diag);
	if (!status) // before the exchange, as the reference checks them
		status = check_counts(e, e->counts, e->experts, sent_rows, "the counts", diag);
	if (!status && given)
		status = read_integers(e, inputs[2], views[node->inputs[2]].dtype, e->received,
				       diag);
	else if (!status && g->nccl)
		status = exchange_counts(e, inputs[1], counts->dtype,
					 g->staging + rows_area(node, views), diag);
	else if (!status) // one rank: it receives what it sends
		memcpy(e->received, e->counts, (size_t)e->experts * sizeof(int64_t));
	if (!status)
		status = check_counts(e, e->received, e->experts, received_rows,
				      "the rows received", diag);
	// What this rank sends itself is known on both sides: rows received from it that are not
	// its counts (a recv_counts that is not the forward's) would not meet in one exchange.
	for (int64_t l = 0; !status && l < e->local; l++) {
		int64_t from_self = e->received[g->place * e->local + l];
		int64_t sent_self = e->counts[g->place * e->local + l];
		if (from_self != sent_self)
			status = fail(e, F8_ERR_INVALID, diag, "the rows received from this rank "
				      "(place %u) for its local expert %lld are %lld, not its counts' "
				      "%lld", g->place, (long long)l, (long long)from_self,
				      (long long)sent_self);
	}
	if (status) {
		exchange_destroy(e);
		return status;
	}
	exchange_sizes(e);
	return F8_OK;
}

/* Where the rows rank r sent for local expert l lie among the rows grouped by local expert,
 * then rank: after every row of the experts before l, and of l's from the ranks before r. */
static uint64_t grouped_at(const exchange *e, int64_t r, int64_t l) {
	int64_t rows = 0;
	for (int64_t k = 0; k < l; k++)
		rows += e->per_expert[k];
	for (int64_t k = 0; k < r; k++)
		rows += e->received[k * e->local + l];
	return (uint64_t)rows * e->row;
}

/* Moves every run of rows rank r sent for local expert l between its place as the runs arrive
 * (by rank, then expert) and its place grouped by expert (then rank): from the arrived layout
 * at `from` into the grouped one at `to`, or back when not `to_grouped`. */
static f8_status regroup(const exchange *e, CUdeviceptr from, CUdeviceptr to, bool to_grouped,
			 f8_diag *diag) {
	uint64_t at_arrived = 0;
	f8_status status = F8_OK;
	for (int64_t r = 0; r < (int64_t)e->group->ranks; r++) {
		for (int64_t l = 0; !status && l < e->local; l++) {
			uint64_t at_grouped = grouped_at(e, r, l);
			uint64_t bytes = (uint64_t)e->received[r * e->local + l] * e->row;
			if (bytes)
				status = f8_cuda_copy_device_async(
					to + (to_grouped ? at_grouped : at_arrived),
					from + (to_grouped ? at_arrived : at_grouped), bytes, e->stream,
					diag);
			at_arrived += bytes;
		}
	}
	return status;
}

/*
 * The rows' exchange: from `out`, e->bytes[r] to each rank r in turn; into `in`, e->bytes[ranks
 * + r] from each, as one NCCL group (every pair's sends and receives progress together, none
 * waiting for another's). Without NCCL, one rank: its one run copied.
 */
static f8_status exchange_rows(const exchange *e, CUdeviceptr out, CUdeviceptr in,
			       f8_diag *diag) {
	const f8_cuda_all_to_all_group *g = e->group;
	if (!g->nccl)
		return e->bytes[0] ? f8_cuda_copy_device_async(in, out, e->bytes[0], e->stream, diag)
				   : F8_OK;
	f8_status status = f8_nccl_group_start(g->nccl, diag);
	uint64_t at_out = 0, at_in = 0;
	for (uint32_t r = 0; !status && r < g->ranks; r++) {
		// A pair skips an empty message on both sides alike: each knows its size.
		if (e->bytes[r])
			status = f8_nccl_send(g->nccl, g->axes, r, out + at_out, e->bytes[r], e->stream,
					      diag);
		if (!status && e->bytes[g->ranks + r])
			status = f8_nccl_recv(g->nccl, g->axes, r, in + at_in, e->bytes[g->ranks + r],
					      e->stream, diag);
		at_out += e->bytes[r];
		at_in += e->bytes[g->ranks + r];
	}
	f8_status ended = f8_nccl_group_end(g->nccl, status ? NULL : diag);
	return status ? status : ended;
}

static uint64_t total_of(const uint64_t *bytes, uint32_t n) {
	uint64_t total = 0;
	for (uint32_t i = 0; i < n; i++)
		total += bytes[i];
	return total;
}

/* Dispatch's outputs 1 and 2, the rows per local expert and per rank and local expert, from the
 * host. The host arrays are e's, freed when the node returns: the copies are waited for here,
 * before the rows' exchange is queued, so that the wait is for them alone. */
static f8_status write_counts(const exchange *e, const f8_node *node,
			      const f8_tensor_view *views, const CUdeviceptr *outputs,
			      f8_diag *diag) {
	const int64_t *values[] = {e->per_expert, e->received};
	f8_status status = F8_OK;
	bool wrote = false;
	for (uint32_t i = 1; !status && i < node->n_outputs && i < 3; i++) {
		const f8_tensor_view *out = &views[node->outputs[i]];
		int64_t n = i == 1 ? e->local : e->experts;
		if (out->dtype != F8_DTYPE_I64 || out->n_bytes != (uint64_t)n * sizeof(int64_t))
			return fail(e, F8_ERR_INVALID, diag, "output %u is %s of %llu bytes, not "
				    "i64[%lld]", i, f8_dtype_name(out->dtype),
				    (unsigned long long)out->n_bytes, (long long)n);
		if (out->n_bytes)
			status = f8_cuda_copy_to_device_async(outputs[i], values[i - 1], out->n_bytes,
							      e->stream, diag);
		wrote |= out->n_bytes != 0;
	}
	if (!status && wrote)
		status = wait_stream(e, diag);
	return status;
}

/* AllToAllDispatch: x's rows of rank r's experts to rank r; what arrives regrouped by local
 * expert, the buffer's other rows zeros; the rows per local expert and per rank and expert. */
static f8_status dispatch(exchange *e, const f8_node *node, const f8_tensor_view *views,
			  const CUdeviceptr *inputs, const CUdeviceptr *outputs, f8_diag *diag) {
	const f8_cuda_all_to_all_group *g = e->group;
	const f8_tensor_view *y = &views[node->outputs[0]];
	uint64_t arriving = total_of(e->bytes + g->ranks, g->ranks);
	// Over NCCL the rows arrive in staging and are regrouped into y; one rank without NCCL
	// lands them in y at once, its regrouping being the identity (one rank before each
	// expert's rows, none after).
	CUdeviceptr landing = g->nccl ? g->staging : outputs[0];
	f8_status status = write_counts(e, node, views, outputs, diag);
	if (!status)
		status = exchange_rows(e, inputs[0], landing, diag);
	if (!status && g->nccl)
		status = regroup(e, landing, outputs[0], true, diag);
	if (!status && y->n_bytes > arriving)
		status = f8_cuda_memset_async(outputs[0] + arriving, 0, y->n_bytes - arriving,
					      e->stream, diag);
	return status;
}

/* AllToAllCombine: each run of y's rows back to the rank it came from, into the place of the
 * copies it was sent from; the output's rows after the counts' total zeros. */
static f8_status combine(exchange *e, const f8_node *node, const f8_tensor_view *views,
			 const CUdeviceptr *inputs, const CUdeviceptr *outputs, f8_diag *diag) {
	const f8_cuda_all_to_all_group *g = e->group;
	const f8_tensor_view *out = &views[node->outputs[0]];
	// Backwards: what arrived at this rank goes out, what this rank sent comes in.
	for (uint32_t r = 0; r < g->ranks; r++) {
		uint64_t sent = e->bytes[r];
		e->bytes[r] = e->bytes[g->ranks + r];
		e->bytes[g->ranks + r] = sent;
	}
	uint64_t coming = total_of(e->bytes + g->ranks, g->ranks);
	CUdeviceptr leaving = g->nccl ? g->staging : inputs[0]; // as dispatch's landing
	f8_status status = g->nccl ? regroup(e, inputs[0], leaving, false, diag) : F8_OK;
	if (!status)
		status = exchange_rows(e, leaving, outputs[0], diag);
	if (!status && out->n_bytes > coming)
		status = f8_cuda_memset_async(outputs[0] + coming, 0, out->n_bytes - coming,
					      e->stream, diag);
	return status;
}

f8_status f8_cuda_all_to_all_run(const f8_cuda_all_to_all_group *group, const f8_graph *graph,
				 f8_node_id id, const f8_tensor_view *views,
				 const CUdeviceptr *inputs, const CUdeviceptr *outputs,
				 CUstream stream, f8_diag *diag) {
	const f8_node *node = &graph->nodes[id];
	exchange e = {.group = group, .graph = graph, .id = id, .stream = stream};
	for (uint32_t i = 0; i < node->n_inputs; i++)
		if (node->inputs[i] != F8_NONE && views[node->inputs[i]].n_bytes && !inputs[i])
			return fail(&e, F8_ERR_INVALID, diag, "input %u is not stored", i);
	for (uint32_t i = 0; i < node->n_outputs; i++)
		if (views[node->outputs[i]].n_bytes && !outputs[i])
			return fail(&e, F8_ERR_INVALID, diag, "output %u is not stored", i);
	bool dispatching = node->op == F8_OP_ALL_TO_ALL_DISPATCH;
	// This rank's rows (dispatch's x, combine's output) bound what it sends; the ranks x rows
	// of dispatch's output and combine's y bound what it receives.
	int64_t in_rows = views[node->inputs[0]].dims[0], out_rows = views[node->outputs[0]].dims[0];
	f8_status status = dispatching
				   ? exchange_init(&e, node, views, inputs, in_rows, out_rows, diag)
				   : exchange_init(&e, node, views, inputs, out_rows, in_rows, diag);
	if (status)
		return status;
	status = dispatching ? dispatch(&e, node, views, inputs, outputs, diag)
			     : combine(&e, node, views, inputs, outputs, diag);
	exchange_destroy(&e);
	if (status && diag && !diag->node[0])
		f8_diag_set_node(diag, graph, id);
	return status;
}
