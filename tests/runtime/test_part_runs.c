/*
 * f8_rt_part_runs (runtime/placement.h), the strided runs a GPU's 2-D copies move between a
 * whole tensor and one rank's part, against the host copies it stands for (f8_rt_copy_slice of
 * one part, f8_rt_copy_balanced) on fresh random bytes: for ranks 1 to 4, every rank, every
 * dimension of tensors of rank 1 to 4, both directions. And f8_rt_ring_calls, the GPU's
 * context-parallel attention calls: for ranks 1 to 5, every rank, causal or not, every query
 * row attends through its call's bottom-right causal mask exactly the keys the CPU's ring
 * kernel lets it (runtime/cpu/kernels_ring_attention.c: a key's place in the sequence at most
 * the row's).
 */
#include <stdint.h> // int64_t, uint8_t
#include <stdlib.h> // rand, srand
#include <string.h> // memcmp, memcpy, memset
#include <time.h>   // time

#include "runtime/placement.h" // f8_rt_part_runs, f8_rt_copy_slice, f8_rt_copy_balanced
#include "tests/test_support.h" // CHECK, test_finish

enum { MAX_BYTES = 1 << 16 };

static uint8_t whole[MAX_BYTES], part[MAX_BYTES], expected[MAX_BYTES], moved[MAX_BYTES];

/* What the 2-D copies of `runs` do, on the host. */
static void apply(const f8_rt_part_run *runs, int count, uint8_t *w, uint8_t *p, bool to_part) {
	for (int k = 0; k < count; k++)
		for (uint64_t i = 0; i < runs[k].rows; i++) {
			uint8_t *a = w + runs[k].whole_at + i * runs[k].whole_pitch;
			uint8_t *b = p + runs[k].part_at + i * runs[k].part_pitch;
			if (to_part)
				memcpy(b, a, runs[k].width);
			else
				memcpy(a, b, runs[k].width);
		}
}

static void fill(uint8_t *bytes, size_t n) {
	for (size_t i = 0; i < n; i++)
		bytes[i] = (uint8_t)rand();
}

/* Row i's place in the sequence, of the `rows` that rank `place` of `ranks` holds (the CPU ring
 * kernel's rule: chunks place and 2 ranks - 1 - place). */
static int64_t position(int64_t i, int64_t rows, int64_t place, int64_t ranks) {
	int64_t chunk = rows / 2;
	return i < chunk ? place * chunk + i : (2 * ranks - 1 - place) * chunk + (i - chunk);
}

static void check_ring_calls(void) {
	int checked = 0;
	for (int64_t ranks = 1; ranks <= 5; ranks++)
		for (int64_t rows = 1; rows <= 12; rows++)
			for (int64_t place = 0; place < ranks; place++)
				for (int causal = 0; causal < 2; causal++) {
					if (ranks > 1 && rows % 2)
						continue;
					int64_t q_from[2], keys[2];
					uint32_t n = f8_rt_ring_calls(ranks, place, rows, causal, q_from,
								      keys);
					CHECK(n == (causal ? 2u : 1u) && q_from[0] == 0);
					for (uint32_t c = 0; c < n; c++) {
						int64_t end = c + 1 < n ? q_from[c + 1] : rows;
						CHECK(q_from[c] <= end && keys[c] <= ranks * rows);
						// cuDNN's bottom-right causal mask needs s_q <= s_kv.
						CHECK(!causal || end - q_from[c] <= keys[c] ||
						      end == q_from[c]);
						for (int64_t i = q_from[c]; i < end; i++)
							for (int64_t j = 0; j < ranks * rows; j++) {
								int64_t t = i - q_from[c];
								bool gpu = j < keys[c] &&
									   (!causal ||
									    j <= t + keys[c] - (end - q_from[c]));
								bool cpu = !causal ||
									   j <= position(i, rows, place, ranks);
								CHECK(gpu == cpu);
								checked++;
							}
					}
				}
	printf("ring calls: %d (row, key) pairs as the CPU ring's\n", checked);
}

int main(void) {
	check_ring_calls();
	unsigned seed = (unsigned)time(NULL);
	srand(seed);
	printf("seed %u\n", seed);
	for (int rank = 1; rank <= 4; rank++)
		for (int64_t n = 1; n <= 4; n++)
			for (int balanced = 0; balanced < 2; balanced++)
				for (int dim = 0; dim < rank; dim++) {
					int64_t dims[4];
					size_t element = (size_t)(1 + rand() % 4), bytes = element;
					for (int d = 0; d < rank; d++) {
						dims[d] = d == dim ? (balanced ? 2 * n : n) * (1 + rand() % 3)
								   : 1 + rand() % 5;
						bytes *= (size_t)dims[d];
					}
					for (int64_t r = 0; r < n; r++) {
						f8_rt_part_run runs[2];
						int count = f8_rt_part_runs(dims, rank, dim, n, r, element,
									    balanced, runs);
						CHECK(count == (balanced ? 2 : 1));
						size_t part_bytes = bytes / (size_t)n;
						fill(whole, bytes);
						memset(expected, 0, part_bytes);
						memset(part, 0, part_bytes);
						if (balanced)
							f8_rt_copy_balanced(whole, expected, dims, rank, dim, n,
									    r, element, true);
						else
							f8_rt_copy_slice(whole, expected, dims, rank, dim, NULL,
									 0, n, r, element, true);
						apply(runs, count, whole, part, true);
						CHECK(memcmp(part, expected, part_bytes) == 0);
						// And back: the part into a whole of other bytes.
						fill(part, part_bytes);
						memcpy(moved, whole, bytes);
						apply(runs, count, moved, part, false);
						if (balanced)
							f8_rt_copy_balanced(whole, part, dims, rank, dim, n, r,
									    element, false);
						else
							f8_rt_copy_slice(whole, part, dims, rank, dim, NULL, 0,
									 n, r, element, false);
						CHECK(memcmp(moved, whole, bytes) == 0);
					}
				}
	return test_finish();
}
