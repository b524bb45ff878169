/*
 * The pending collectives and the waits they call for (runtime/cuda/overlap.h).
 */
#include "runtime/cuda/overlap.h" // f8_cuda_overlap_*

#include <string.h> // memmove, memset

#include "ir/alloc.h" // f8_realloc, f8_free

bool f8_cuda_ranges_overlap(f8_cuda_range a, f8_cuda_range b) {
	return a.bytes && b.bytes && a.at < b.at + b.bytes && b.at < a.at + a.bytes;
}

/* Makes room for `count` more items of `size` bytes in *items (of *n, room for *capacity). */
static f8_status reserve(void **items, uint32_t n, uint32_t *capacity, uint32_t count,
			 size_t size, f8_diag *diag) {
	if (n + count <= *capacity)
		return F8_OK;
	uint32_t wanted = *capacity ? *capacity * 2 : 16;
	while (wanted < n + count)
		wanted *= 2;
	void *grown = f8_realloc(*items, wanted * size);
	if (!grown)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	*items = grown;
	*capacity = wanted;
	return F8_OK;
}

f8_status f8_cuda_access_add(f8_cuda_access *access, bool write, uint64_t at, uint64_t bytes,
			     f8_diag *diag) {
	if (!bytes)
		return F8_OK;
	f8_cuda_range **ranges = write ? &access->writes : &access->reads;
	uint32_t *n = write ? &access->n_writes : &access->n_reads;
	uint32_t *capacity = write ? &access->writes_capacity : &access->reads_capacity;
	f8_status status = reserve((void **)ranges, *n, capacity, 1, sizeof **ranges, diag);
	if (!status)
		(*ranges)[(*n)++] = (f8_cuda_range){.at = at, .bytes = bytes};
	return status;
}

void f8_cuda_access_clear(f8_cuda_access *access) {
	access->n_reads = access->n_writes = 0;
}

void f8_cuda_access_free(f8_cuda_access *access) {
	f8_free(access->reads);
	f8_free(access->writes);
	memset(access, 0, sizeof *access);
}

uint32_t f8_cuda_overlap_free_slot(const f8_cuda_overlap *overlap) {
	// Quadratic in the pending collectives, which are a run's few buckets and messages.
	for (uint32_t slot = 0;; slot++) {
		bool held = false;
		for (uint32_t i = 0; !held && i < overlap->n_entries; i++)
			held = overlap->entries[i].slot == slot;
		if (!held)
			return slot;
	}
}

f8_status f8_cuda_overlap_add(f8_cuda_overlap *overlap, const f8_cuda_access *access,
			      uint32_t slot, f8_diag *diag) {
	uint32_t n = access->n_reads + access->n_writes;
	f8_status status = reserve((void **)&overlap->ranges, overlap->n_ranges,
				   &overlap->ranges_capacity, n, sizeof *overlap->ranges, diag);
	if (!status)
		status = reserve((void **)&overlap->entries, overlap->n_entries,
				 &overlap->entries_capacity, 1, sizeof *overlap->entries, diag);
	if (status)
		return status;
	f8_cuda_range *at = overlap->ranges + overlap->n_ranges;
	for (uint32_t i = 0; i < access->n_reads; i++)
		at[i] = access->reads[i];
	for (uint32_t i = 0; i < access->n_writes; i++)
		at[access->n_reads + i] = access->writes[i];
	overlap->entries[overlap->n_entries++] = (f8_cuda_pending){
		.ranges_at = overlap->n_ranges, .n_reads = access->n_reads,
		.n_writes = access->n_writes, .slot = slot};
	overlap->n_ranges += n;
	return F8_OK;
}

static bool any_overlap(const f8_cuda_range *a, uint32_t n_a, const f8_cuda_range *b,
			uint32_t n_b) {
	for (uint32_t i = 0; i < n_a; i++)
		for (uint32_t j = 0; j < n_b; j++)
			if (f8_cuda_ranges_overlap(a[i], b[j]))
				return true;
	return false;
}

/* Whether the main stream's `access` conflicts with pending collective `entry`: it writes what
 * the access touches, or reads what the access writes. Two reads do not conflict. */
static bool conflicts(const f8_cuda_overlap *overlap, const f8_cuda_pending *entry,
		      const f8_cuda_access *access) {
	const f8_cuda_range *reads = overlap->ranges + entry->ranges_at;
	const f8_cuda_range *writes = reads + entry->n_reads;
	return any_overlap(writes, entry->n_writes, access->reads, access->n_reads) ||
	       any_overlap(writes, entry->n_writes, access->writes, access->n_writes) ||
	       any_overlap(reads, entry->n_reads, access->writes, access->n_writes);
}

/* Drops the entries before `kept`, the ranges of the others moved to the front. */
static void drop_oldest(f8_cuda_overlap *overlap, uint32_t kept) {
	uint32_t first_range = kept < overlap->n_entries ? overlap->entries[kept].ranges_at
							 : overlap->n_ranges;
	uint32_t n_entries = overlap->n_entries - kept, n_ranges = overlap->n_ranges - first_range;
	if (n_entries) {
		memmove(overlap->entries, overlap->entries + kept,
			n_entries * sizeof *overlap->entries);
		memmove(overlap->ranges, overlap->ranges + first_range,
			n_ranges * sizeof *overlap->ranges);
	}
	for (uint32_t i = 0; i < n_entries; i++)
		overlap->entries[i].ranges_at -= first_range;
	overlap->n_entries = n_entries;
	overlap->n_ranges = n_ranges;
}

bool f8_cuda_overlap_take(f8_cuda_overlap *overlap, const f8_cuda_access *access,
			  uint32_t *slot) {
	for (uint32_t i = overlap->n_entries; i-- > 0;) {
		if (!conflicts(overlap, &overlap->entries[i], access))
			continue;
		*slot = overlap->entries[i].slot;
		drop_oldest(overlap, i + 1);
		return true;
	}
	return false;
}

bool f8_cuda_overlap_take_all(f8_cuda_overlap *overlap, uint32_t *slot) {
	if (!overlap->n_entries)
		return false;
	*slot = overlap->entries[overlap->n_entries - 1].slot;
	overlap->n_entries = overlap->n_ranges = 0;
	return true;
}

void f8_cuda_overlap_free(f8_cuda_overlap *overlap) {
	f8_free(overlap->entries);
	f8_free(overlap->ranges);
	memset(overlap, 0, sizeof *overlap);
}
