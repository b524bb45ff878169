/*
 * The start of an MPI test's ranks (the C tests of tests/distributed/): the launch from the environment
 * (mpirun's variables, or one process), the group of every rank along one mesh axis, and one
 * random seed for all of them, rank 0's latest clock over the ranks, printed by rank 0 so that a
 * failure can be run again. Header-only, like tests/test_support.h: each test is one executable.
 */
#ifndef F8_TESTS_DISTRIBUTED_TEST_RANKS_H
#define F8_TESTS_DISTRIBUTED_TEST_RANKS_H

#include <stdio.h> // printf
#include <time.h>  // time

#include "runtime/distributed.h" // f8_dist_*
#include "tests/test_support.h"  // CHECK

/* The ranks along `axis` (the world): their f8_dist, or NULL after printing why; the launch
 * into *launch and the seed into *seed. */
static inline f8_dist *test_ranks_start(f8_mesh_axis axis, f8_dist_launch *launch,
					int64_t *seed) {
	f8_diag diag = {0};
	f8_dist *dist = NULL;
	uint32_t mesh[F8_MESH_AXIS_COUNT] = {0};
	f8_status status = f8_dist_launch_from_environment(launch, &diag);
	if (!status) {
		mesh[axis] = (uint32_t)launch->world;
		status = f8_dist_create(launch, mesh, &dist, &diag);
	}
	if (status) {
		f8_diag_print(&diag, stdout);
		return NULL;
	}
	*seed = (int64_t)time(NULL);
	CHECK(f8_dist_all_reduce(dist, 1u << axis, seed, 1, F8_DTYPE_I64, F8_REDUCTION_MAX,
				 &diag) == F8_OK);
	if (launch->rank == 0)
		printf("seed %lld, %lld ranks\n", (long long)*seed, (long long)launch->world);
	return dist;
}

#endif
