/*
 * The CUDA backend's table of pending collectives (runtime/cuda/overlap.h) against a brute
 * force, on the host: random collectives and random accesses over a small address space (so
 * that ranges often touch, meet at an edge or nest), each take held to the latest conflicting
 * collective found by checking every byte, and the table left holding exactly the newer ones.
 * Then the slots: never one a pending collective holds. Seeded, so a failure repeats.
 */
#include <string.h> // memcmp

#include "runtime/cuda/overlap.h" // f8_cuda_overlap_*, f8_cuda_access_*
#include "tests/test_support.h"   // CHECK, test_finish

enum { SPACE = 96, MAX_RANGES = 4, ROUNDS = 4000 };

static uint64_t state = 0x9e3779b97f4a7c15u;

static uint32_t next(uint32_t below) {
	state ^= state << 13;
	state ^= state >> 7;
	state ^= state << 17;
	return (uint32_t)(state % below);
}

/* Bytes of the address space a set of ranges covers, one flag each. */
typedef struct bytes_of {
	bool read[SPACE], written[SPACE];
} bytes_of;

static void cover(bool *bytes, const f8_cuda_range *ranges, uint32_t n) {
	for (uint32_t i = 0; i < n; i++)
		for (uint64_t b = ranges[i].at; b < ranges[i].at + ranges[i].bytes; b++)
			bytes[b] = true;
}

static bytes_of bytes_of_access(const f8_cuda_access *access) {
	bytes_of out = {0};
	cover(out.read, access->reads, access->n_reads);
	cover(out.written, access->writes, access->n_writes);
	return out;
}

static bool conflict(const bytes_of *pending, const bytes_of *access) {
	for (int b = 0; b < SPACE; b++)
		if ((pending->written[b] && (access->read[b] || access->written[b])) ||
		    (pending->read[b] && access->written[b]))
			return true;
	return false;
}

/* A random access of up to MAX_RANGES reads and writes, some of no bytes. */
static void random_access(f8_cuda_access *access) {
	f8_cuda_access_clear(access);
	for (int write = 0; write < 2; write++)
		for (uint32_t n = next(MAX_RANGES + 1); n > 0; n--) {
			uint64_t at = next(SPACE), bytes = next(12);
			if (at + bytes > SPACE)
				bytes = SPACE - at;
			CHECK(!f8_cuda_access_add(access, write, at, bytes, NULL));
		}
}

/* The model: the pending collectives' bytes and slots, oldest first. */
typedef struct model_entry {
	bytes_of bytes;
	uint32_t slot;
} model_entry;

static void check_random(void) {
	f8_cuda_overlap overlap = {0};
	f8_cuda_access access = {0};
	static model_entry model[ROUNDS];
	uint32_t n_model = 0, waits = 0;
	for (int round = 0; round < ROUNDS; round++) {
		random_access(&access);
		if (next(3)) { // a collective, two times in three, so that the table grows
			uint32_t slot = f8_cuda_overlap_free_slot(&overlap);
			for (uint32_t i = 0; i < n_model; i++)
				CHECK(model[i].slot != slot);
			CHECK(!f8_cuda_overlap_add(&overlap, &access, slot, NULL));
			model[n_model++] = (model_entry){.bytes = bytes_of_access(&access),
							 .slot = slot};
			continue;
		}
		if (next(40) == 0) { // now and then a join point
			uint32_t slot = 0;
			CHECK(f8_cuda_overlap_take_all(&overlap, &slot) == (n_model > 0));
			if (n_model)
				CHECK(slot == model[n_model - 1].slot);
			n_model = 0;
			CHECK(overlap.n_entries == 0);
			continue;
		}
		bytes_of touched = bytes_of_access(&access);
		int latest = -1;
		for (uint32_t i = 0; i < n_model; i++)
			if (conflict(&model[i].bytes, &touched))
				latest = (int)i;
		uint32_t slot = 0;
		bool wait = f8_cuda_overlap_take(&overlap, &access, &slot);
		CHECK(wait == (latest >= 0));
		if (latest >= 0) {
			waits++;
			CHECK(slot == model[latest].slot);
			for (uint32_t i = (uint32_t)latest + 1; i < n_model; i++)
				model[i - (uint32_t)latest - 1] = model[i];
			n_model -= (uint32_t)latest + 1;
		}
		// The table holds the model's collectives with their ranges as they were added.
		CHECK(overlap.n_entries == n_model);
		for (uint32_t i = 0; i < n_model && i < overlap.n_entries; i++) {
			const f8_cuda_pending *entry = &overlap.entries[i];
			bytes_of held = {0};
			cover(held.read, overlap.ranges + entry->ranges_at, entry->n_reads);
			cover(held.written, overlap.ranges + entry->ranges_at + entry->n_reads,
			      entry->n_writes);
			CHECK(entry->slot == model[i].slot);
			CHECK(memcmp(&held, &model[i].bytes, sizeof held) == 0);
		}
	}
	CHECK(waits > ROUNDS / 20); // the rounds did exercise the waits
	f8_cuda_overlap_free(&overlap);
	f8_cuda_access_free(&access);
}

/* Edges: ranges that meet do not overlap, one of no bytes overlaps nothing, two reads of the
 * same bytes do not conflict, a write after a read does. */
static void check_edges(void) {
	CHECK(!f8_cuda_ranges_overlap((f8_cuda_range){0, 8}, (f8_cuda_range){8, 8}));
	CHECK(f8_cuda_ranges_overlap((f8_cuda_range){0, 9}, (f8_cuda_range){8, 8}));
	CHECK(!f8_cuda_ranges_overlap((f8_cuda_range){4, 0}, (f8_cuda_range){0, 8}));
	CHECK(f8_cuda_ranges_overlap((f8_cuda_range){2, 1}, (f8_cuda_range){0, 8}));
	f8_cuda_overlap overlap = {0};
	f8_cuda_access collective = {0}, access = {0};
	CHECK(!f8_cuda_access_add(&collective, false, 1000, 100, NULL));
	CHECK(!f8_cuda_access_add(&collective, true, 2000, 50, NULL));
	CHECK(!f8_cuda_overlap_add(&overlap, &collective, 0, NULL));
	CHECK(f8_cuda_overlap_free_slot(&overlap) == 1);
	uint32_t slot = 7;
	CHECK(!f8_cuda_access_add(&access, false, 1050, 10, NULL)); // reads what it reads
	CHECK(!f8_cuda_overlap_take(&overlap, &access, &slot) && slot == 7);
	CHECK(!f8_cuda_access_add(&access, true, 2050, 10, NULL)); // writes just past its output
	CHECK(!f8_cuda_overlap_take(&overlap, &access, &slot));
	CHECK(!f8_cuda_access_add(&access, true, 1099, 1, NULL)); // overwrites its input's end
	CHECK(f8_cuda_overlap_take(&overlap, &access, &slot) && slot == 0);
	CHECK(overlap.n_entries == 0 && overlap.n_ranges == 0);
	CHECK(f8_cuda_overlap_free_slot(&overlap) == 0);
	CHECK(!f8_cuda_overlap_take_all(&overlap, &slot));
	f8_cuda_overlap_free(&overlap);
	f8_cuda_access_free(&collective);
	f8_cuda_access_free(&access);
}

int main(void) {
	check_edges();
	check_random();
	return test_finish();
}
