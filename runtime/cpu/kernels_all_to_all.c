/*
 * The reference kernels of AllToAllDispatch and AllToAllCombine (ir/ops.def): expert
 * parallelism's exchange of the tokens' rows with the other ranks of the group (call->ring's
 * all-to-all; one rank without it, which keeps its rows). Rank j holds experts [j E / ranks,
 * (j + 1) E / ranks), so a rank's rows for rank j's experts are one run of its MoEDispatch rows,
 * sent as they lie; what arrives is regrouped by local expert, in the order of the ranks it came
 * from, as Megatron-LM's dispatcher sorts the chunks after its all-to-all. Combine undoes each
 * step in reverse. Integers only decide where rows go: the rows' bits are moved, never changed.
 */
#include <stdint.h> // INT32_MAX
#include <string.h> // memcpy, memset

#include "ir/alloc.h"                // f8_free
#include "runtime/cpu/kernel_util.h" // f8_cpu_get, f8_cpu_set, f8_cpu_alloc, f8_cpu_fail
#include "runtime/cpu/kernels.h"     // F8_CPU_KERNEL, f8_cpu_ring

/* One exchange: the sizes, the rows' counts and the places they go. */
typedef struct exchange {
	f8_cpu_ring ring;
	int64_t experts, local;  // E; E / ranks, the experts of a rank
	int64_t *counts;         // (E) this rank's rows per expert, to be sent
	int64_t *received;       // (ranks, local) the rows each rank sends this one, per local expert
	size_t *bytes;           // (2 ranks) bytes out to, and in from, each rank
	size_t row;              // a row's bytes
} exchange;

static void exchange_destroy(exchange *e) {
	f8_free(e->counts);
	f8_free(e->bytes);
}

/* Refuses counts that are negative or add up to more than `rows`. */
static f8_status check_counts(const f8_cpu_kernel_call *call, const int64_t *counts, int64_t n,
			      int64_t rows, const char *what, f8_diag *diag) {
	int64_t total = 0;
	for (int64_t i = 0; i < n; i++) {
		if (counts[i] < 0 || counts[i] > rows - total)
			return f8_cpu_fail(call, diag, "%s (entry %lld: %lld after %lld) do not fit "
					   "the %lld rows", what, (long long)i, (long long)counts[i],
					   (long long)total, (long long)rows);
		total += counts[i];
	}
	return F8_OK;
}

/*
 * Reads the counts (input 1) and the rows received per rank (input 2 when given, else through
 * the ring: each rank sends rank j its counts of j's experts), and checks them against the
 * `sent_rows` this rank has and the `received_rows` it can hold.
 */
static f8_status exchange_init(const f8_cpu_kernel_call *call, int64_t sent_rows,
			       int64_t received_rows, exchange *e, f8_diag *diag) {
	int64_t ranks = f8_node_attr_int(call->node, "ranks", 1);
	const f8_rt_tensor *counts = call->inputs[1];
	const f8_rt_tensor *given = call->node->n_inputs > 2 ? call->inputs[2] : NULL;
	*e = (exchange){.ring = call->ring ? *call->ring : (f8_cpu_ring){.ranks = 1, .place = 0},
			.experts = counts->dims[0], .local = counts->dims[0] / ranks,
			.row = (size_t)call->inputs[0]->dims[1] *
			       f8_dtype_get_info(call->inputs[0]->dtype)->bytes};
	if (ranks != e->ring.ranks) {
		f8_status status = f8_cpu_fail_unsupported(call, diag, "an exchange over %lld ranks "
							   "needs them; this group has %lld",
							   (long long)ranks,
							   (long long)e->ring.ranks);
		f8_diag_hint(diag, "run it under mpirun with the expert-parallel ranks");
		return status;
	}
	// What could arrive at most, the same on every rank: refused here, before any exchange,
	// so that no rank waits in one the others left (MPI counts bytes in an int).
	if (received_rows * (int64_t)e->row > INT32_MAX)
		return f8_cpu_fail_unsupported(call, diag, "an exchange of up to %lld rows of %zu "
					       "bytes: MPI counts its bytes in an int",
					       (long long)received_rows, e->row);
	f8_status status = f8_cpu_alloc(2 * e->experts, sizeof(int64_t), (void **)&e->counts,
					diag);
	if (!status)
		status = f8_cpu_alloc(2 * ranks, sizeof(size_t), (void **)&e->bytes, diag);
	if (status) {
		exchange_destroy(e);
		return status;
	}
	e->received = e->counts + e->experts;
	for (int64_t i = 0; i < e->experts; i++) {
		e->counts[i] = (int64_t)f8_cpu_get(counts, i);
		if (given)
			e->received[i] = (int64_t)f8_cpu_get(given, i);
	}
	status = check_counts(call, e->counts, e->experts, sent_rows, "the counts", diag);
	if (!status && !given) {
		for (int64_t r = 0; r < ranks; r++)
			e->bytes[r] = e->bytes[ranks + r] = (size_t)e->local * sizeof(int64_t);
		status = e->ring.ranks == 1
				 ? F8_OK
				 : e->ring.all_to_all(e->ring.context, e->counts, e->bytes, e->received,
						      e->bytes + ranks, diag);
		if (!status && e->ring.ranks == 1)
			memcpy(e->received, e->counts, (size_t)e->experts * sizeof(int64_t));
	}
	if (!status)
		status = check_counts(call, e->received, e->experts, received_rows,
				      "the rows received", diag);
	// What this rank sends itself is known on both sides: rows received from it that are not
	// its counts (a recv_counts that is not the forward's) would not meet in one exchange, and
	// on one rank the copy of what it sends would overrun what it receives.
	int64_t place = e->ring.place;
	for (int64_t l = 0; !status && l < e->local; l++) {
		int64_t from_self = e->received[place * e->local + l];
		int64_t sent_self = e->counts[place * e->local + l];
		if (from_self != sent_self)
			status = f8_cpu_fail(call, diag, "the rows received from this rank (place "
					     "%lld) for its local expert %lld are %lld, not its "
					     "counts' %lld", (long long)place, (long long)l,
					     (long long)from_self, (long long)sent_self);
	}
	if (status)
		exchange_destroy(e);
	return status;
}

/* The rows to and from each rank into e->bytes: this rank's counts of rank r's experts out, the
 * rows rank r sends this one in. */
static void exchange_sizes(exchange *e) {
	for (int64_t r = 0; r < e->ring.ranks; r++) {
		int64_t out = 0, in = 0;
		for (int64_t l = 0; l < e->local; l++) {
			out += e->counts[r * e->local + l];
			in += e->received[r * e->local + l];
		}
		e->bytes[r] = (size_t)out * e->row;
		e->bytes[e->ring.ranks + r] = (size_t)in * e->row;
	}
}

/* Moves every run of rows rank r sent for local expert l between its place as the runs arrive
 * (by rank, then expert) and its place in the rows grouped by expert (then rank): from the
 * arrived layout at `from` into the grouped one at `to`, or back when not `to_grouped`. */
static void regroup(const exchange *e, const char *from, char *to, bool to_grouped) {
	size_t at_arrived = 0;
	for (int64_t r = 0; r < e->ring.ranks; r++) {
		for (int64_t l = 0; l < e->local; l++) {
			size_t at_grouped = 0; // the rows of experts before l, and of ranks before r
			for (int64_t k = 0; k < e->local * e->ring.ranks; k++) {
				int64_t kr = k % e->ring.ranks, kl = k / e->ring.ranks;
				if (kl < l || (kl == l && kr < r))
					at_grouped += (size_t)e->received[kr * e->local + kl];
			}
			at_grouped *= e->row;
			size_t bytes = (size_t)e->received[r * e->local + l] * e->row;
			if (bytes)
				memcpy(to + (to_grouped ? at_grouped : at_arrived),
				       from + (to_grouped ? at_arrived : at_grouped), bytes);
			at_arrived += bytes;
		}
	}
}

/* The ring's all-to-all, or on one rank the one run copied. */
static f8_status all_to_all(const exchange *e, const void *out, void *in, f8_diag *diag) {
	int64_t n = e->ring.ranks;
	if (n > 1)
		return e->ring.all_to_all(e->ring.context, out, e->bytes, in, e->bytes + n, diag);
	if (e->bytes[0])
		memmove(in, out, e->bytes[0]);
	return F8_OK;
}

static size_t total_of(const size_t *bytes, int64_t n) {
	size_t total = 0;
	for (int64_t i = 0; i < n; i++)
		total += bytes[i];
	return total;
}

/* AllToAllDispatch: x's rows of rank r's experts to rank r; what arrives regrouped by local
 * expert, the buffer's other rows zeros; the rows per local expert and per rank and expert. */
F8_CPU_KERNEL(ALL_TO_ALL_DISPATCH) {
	const f8_rt_tensor *x = call->inputs[0];
	f8_rt_tensor *y = &call->outputs[0];
	exchange e;
	f8_status status = exchange_init(call, x->dims[0], y->dims[0], &e, diag);
	if (status)
		return status;
	exchange_sizes(&e);
	size_t arriving = total_of(e.bytes + e.ring.ranks, e.ring.ranks);
	char *arrived = NULL;
	status = f8_cpu_alloc((int64_t)arriving + 1, 1, (void **)&arrived, diag);
	if (!status)
		status = all_to_all(&e, x->data, arrived, diag);
	if (!status) {
		regroup(&e, arrived, y->data, true);
		memset((char *)y->data + arriving, 0, y->n_bytes - arriving);
		for (int64_t l = 0; call->node->n_outputs > 1 && l < e.local; l++) {
			int64_t sum = 0;
			for (int64_t r = 0; r < e.ring.ranks; r++)
				sum += e.received[r * e.local + l];
			f8_cpu_set(&call->outputs[1], l, (double)sum);
		}
		for (int64_t i = 0; call->node->n_outputs > 2 && i < e.experts; i++)
			f8_cpu_set(&call->outputs[2], i, (double)e.received[i]);
	}
	f8_free(arrived);
	exchange_destroy(&e);
	return status;
}

/* AllToAllCombine: each run of y's rows back to the rank it came from, into the place of the
 * copies it was sent from; the output's rows after the counts' total zeros. */
F8_CPU_KERNEL(ALL_TO_ALL_COMBINE) {
	const f8_rt_tensor *y = call->inputs[0];
	f8_rt_tensor *out = &call->outputs[0];
	exchange e;
	f8_status status = exchange_init(call, out->dims[0], y->dims[0], &e, diag);
	if (status)
		return status;
	exchange_sizes(&e);
	// Backwards: what arrived at this rank goes out, what this rank sent comes in.
	for (int64_t r = 0; r < e.ring.ranks; r++) {
		size_t sent = e.bytes[r];
		e.bytes[r] = e.bytes[e.ring.ranks + r];
		e.bytes[e.ring.ranks + r] = sent;
	}
	size_t leaving = total_of(e.bytes, e.ring.ranks);
	size_t coming = total_of(e.bytes + e.ring.ranks, e.ring.ranks);
	char *staged = NULL;
	status = f8_cpu_alloc((int64_t)leaving + 1, 1, (void **)&staged, diag);
	if (!status) {
		regroup(&e, y->data, staged, false);
		status = all_to_all(&e, staged, out->data, diag);
	}
	if (!status)
		memset((char *)out->data + coming, 0, out->n_bytes - coming);
	f8_free(staged);
	exchange_destroy(&e);
	return status;
}
