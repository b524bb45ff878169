/*
 * f8_dist's collectives over the TCP store (runtime/distributed_store.h).
 */
#include "runtime/distributed_store.h" // f8_dist_store_exchange

#include <inttypes.h> // PRIu64
#include <stdio.h>    // snprintf
#include <string.h>   // memcpy

#include "ir/alloc.h" // f8_malloc, f8_free

enum { PREFIX_MAX = 96, KEY_MAX = PREFIX_MAX + 16 }; // a prefix: name, round; a key: the place after

/* Folds `part` (bytes of dtype) into `into` element by element. */
static void reduce_into(void *into, const void *part, size_t bytes, f8_dtype dtype,
			f8_reduction reduction) {
	bool max = reduction == F8_REDUCTION_MAX;
	if (dtype == F8_DTYPE_F32) {
		float *a = into, b;
		for (size_t i = 0; i < bytes / sizeof b; i++) {
			memcpy(&b, (const char *)part + i * sizeof b, sizeof b);
			a[i] = max ? (b > a[i] || b != b ? b : a[i]) : a[i] + b;
		}
	} else if (dtype == F8_DTYPE_F64) {
		double *a = into, b;
		for (size_t i = 0; i < bytes / sizeof b; i++) {
			memcpy(&b, (const char *)part + i * sizeof b, sizeof b);
			a[i] = max ? (b > a[i] || b != b ? b : a[i]) : a[i] + b;
		}
	} else {
		int64_t *a = into, b;
		for (size_t i = 0; i < bytes / sizeof b; i++) {
			memcpy(&b, (const char *)part + i * sizeof b, sizeof b);
			a[i] = max ? (b > a[i] ? b : a[i]) : (int64_t)((uint64_t)a[i] + (uint64_t)b);
		}
	}
}

/* A failed wait of the exchange under `prefix`, said with who had not arrived there. */
static f8_status failed_wait(const f8_dist_store_group *group, const char *what,
			     const char *prefix, f8_status status, const f8_diag *local,
			     f8_diag *diag) {
	char missing[256] = "", key[KEY_MAX];
	size_t at = 0;
	bool known = true;
	for (uint32_t p = 0; known && p < group->size && at < sizeof missing - 24; p++) {
		bool arrived = false;
		snprintf(key, sizeof key, "%s%u", prefix, p);
		known = !f8_tcp_store_check(group->store, key, &arrived, NULL);
		if (known && !arrived)
			at += (size_t)snprintf(missing + at, sizeof missing - at, "%s%lld",
					       at ? ", " : "", (long long)group->ranks[p]);
	}
	char after[300] = "";
	if (known && at)
		snprintf(after, sizeof after, "; the ranks that had not arrived: %s", missing);
	else if (known)
		snprintf(after, sizeof after, "; every rank had arrived, but rank %lld, which "
			 "combines the group's parts, did not hand them back", (long long)group->ranks[0]);
	f8_diag_set(diag, status, "%s over group %s (%u ranks) failed: %s%s", what, group->axes,
		    group->size, local->message, after);
	f8_diag_hint(diag, "a rank that died or hangs, or ranks that make different collectives "
		     "(--distributed-timeout-minutes holds each wait)");
	return status;
}

f8_status f8_dist_store_exchange(const f8_dist_store_group *group, const char *what,
				 const void *mine, size_t bytes, f8_dist_store_combine combine,
				 f8_dtype dtype, f8_reduction reduction, void *out, f8_diag *diag) {
	char prefix[PREFIX_MAX], key[KEY_MAX];
	snprintf(prefix, sizeof prefix, "%s/%" PRIu64 "/", group->name, group->round);
	snprintf(key, sizeof key, "%s%u", prefix, group->place);
	size_t out_bytes = combine == F8_DIST_STORE_GATHER ? group->size * bytes : bytes;
	f8_diag local = {0};
	f8_status status = f8_tcp_store_set(group->store, key, mine, bytes, diag);
	if (status)
		return status;
	if (group->place) { // the combination, from place 0
		snprintf(key, sizeof key, "%sall", prefix);
		void *result;
		size_t got;
		status = f8_tcp_store_get(group->store, key, &result, &got, NULL, &local);
		if (status)
			return failed_wait(group, what, prefix, status, &local, diag);
		if (got != out_bytes)
			status = f8_diag_set(diag, F8_ERR_INVALID, "%s over group %s: rank %lld handed "
					     "back %zu bytes where this rank expected %zu (the ranks "
					     "made different calls)", what, group->axes,
					     (long long)group->ranks[0], got, out_bytes);
		else
			memcpy(out, result, out_bytes);
		f8_free(result);
		return status;
	}
	// Place 0: its own part first, then each other place's in place order.
	if (out != mine)
		memcpy(out, mine, bytes);
	for (uint32_t p = 1; !status && p < group->size; p++) {
		snprintf(key, sizeof key, "%s%u", prefix, p);
		void *part;
		size_t got;
		status = f8_tcp_store_get(group->store, key, &part, &got, NULL, &local);
		if (status)
			return failed_wait(group, what, prefix, status, &local, diag);
		if (got != bytes)
			status = f8_diag_set(diag, F8_ERR_INVALID, "%s over group %s: rank %lld sent %zu "
					     "bytes, rank %lld %zu (the ranks made different calls)",
					     what, group->axes, (long long)group->ranks[p], got,
					     (long long)group->ranks[0], bytes);
		else if (combine == F8_DIST_STORE_GATHER)
			memcpy((char *)out + p * bytes, part, bytes);
		else
			reduce_into(out, part, bytes, dtype, reduction);
		f8_free(part);
	}
	// A failure here leaves the others waiting for the result: they fail at the timeout, or
	// sooner when this rank stops (its connection closes).
	if (status)
		return status;
	snprintf(key, sizeof key, "%sall", prefix);
	status = f8_tcp_store_set(group->store, key, out, out_bytes, diag);
	if (!status && group->round > 1) {
		snprintf(prefix, sizeof prefix, "%s/%" PRIu64 "/", group->name, group->round - 1);
		status = f8_tcp_store_delete_prefix(group->store, prefix, NULL, diag);
	}
	return status;
}
