/*
 * Which collectives queued on the communication stream the main stream must wait for
 * (runtime/cuda/backend.c says why collectives run on a stream of their own). Pure bookkeeping
 * over device address ranges, as integers: no CUDA call, so that it is tested on any host
 * (tests/gpu/overlap_check.c).
 *
 * A pending collective is the ranges it reads, the ranges it writes and a slot (the backend's
 * index of its "done" event). Before the main stream queues an access (what a launch, a library
 * call or a copy reads and writes), it must wait for every pending collective that writes a
 * range the access reads or writes, or reads a range the access writes. The collectives run in
 * the order they were added (one stream), so waiting for the latest of those is waiting for all
 * of them and for every collective added before it: f8_cuda_overlap_take drops them all and
 * names that one slot. Ranges are compared by address, not by value: the planner reuses memory.
 */
#ifndef F8_RUNTIME_CUDA_OVERLAP_H
#define F8_RUNTIME_CUDA_OVERLAP_H

#include <stdbool.h> // bool
#include <stdint.h>  // uint32_t, uint64_t

#include "ir/diag.h" // f8_status, f8_diag

/* Bytes [at, at + bytes) of device memory; one of no bytes overlaps nothing. */
typedef struct f8_cuda_range {
	uint64_t at;
	uint64_t bytes;
} f8_cuda_range;

/* What one piece of work reads and writes: growing arrays, kept between uses. */
typedef struct f8_cuda_access {
	f8_cuda_range *reads, *writes;
	uint32_t n_reads, n_writes;
	uint32_t reads_capacity, writes_capacity;
} f8_cuda_access;

/* A pending collective: its reads then its writes in the table's ranges, from ranges_at. */
typedef struct f8_cuda_pending {
	uint32_t ranges_at, n_reads, n_writes;
	uint32_t slot;
} f8_cuda_pending;

/* The pending collectives, oldest first, and their ranges one after another. */
typedef struct f8_cuda_overlap {
	f8_cuda_pending *entries;
	uint32_t n_entries, entries_capacity;
	f8_cuda_range *ranges;
	uint32_t n_ranges, ranges_capacity;
} f8_cuda_overlap;

bool f8_cuda_ranges_overlap(f8_cuda_range a, f8_cuda_range b);

/* Adds [at, at + bytes) to what `access` reads (or writes, with `write`); a range of no bytes
 * is left out. F8_ERR_NOMEM. */
f8_status f8_cuda_access_add(f8_cuda_access *access, bool write, uint64_t at, uint64_t bytes,
			     f8_diag *diag);

/* Empties `access`, keeping its arrays. */
void f8_cuda_access_clear(f8_cuda_access *access);

void f8_cuda_access_free(f8_cuda_access *access);

/* The smallest slot no pending collective holds: where the next one's event goes. */
uint32_t f8_cuda_overlap_free_slot(const f8_cuda_overlap *overlap);

/* Adds a collective, newest, that reads and writes what `access` says, its event in `slot`
 * (f8_cuda_overlap_free_slot's). F8_ERR_NOMEM, the table as it was. */
f8_status f8_cuda_overlap_add(f8_cuda_overlap *overlap, const f8_cuda_access *access,
			      uint32_t slot, f8_diag *diag);

/* Whether the main stream must wait before `access`: then *slot is the latest pending
 * collective it conflicts with, and it and every older one leave the table. */
bool f8_cuda_overlap_take(f8_cuda_overlap *overlap, const f8_cuda_access *access,
			  uint32_t *slot);

/* Whether any collective is pending: then *slot is the newest, and the table is emptied (a
 * join point: the main stream waits for every one). */
bool f8_cuda_overlap_take_all(f8_cuda_overlap *overlap, uint32_t *slot);

void f8_cuda_overlap_free(f8_cuda_overlap *overlap);

#endif
