/*
 * The CUDA backend's all-to-all (runtime/cuda/all_to_all.c) over 1 to 4 ranks without a GPU:
 * its device memory is host memory here, its driver calls memcpy and memset, and NCCL is one
 * thread per rank whose group end matches each pair's sends and receives in the order they were
 * posted, as NCCL does (a size that differs, or a send without its receive, fails). The one GPU
 * the device tool lends runs only groups of one rank, where regrouping is the identity: this is
 * where the layouts over several ranks are held to the op's definition (ir/ops.def), computed
 * here from the counts directly: dispatch's rows grouped by local expert then source rank, the
 * rest zeros, its two counts outputs; dispatch again with those given; combine's round trip back
 * to x's rows. Then the refusals of counts that do not fit. Random counts, seeded by the case.
 */
#define _POSIX_C_SOURCE 200809L // pthread_barrier_*, rand_r

#include <pthread.h> // pthread_*
#include <stdint.h>  // intptr_t
#include <stdio.h>   // printf, snprintf
#include <stdlib.h>  // calloc, malloc, free, rand_r
#include <string.h>  // memcpy, memset, strstr

#include "ir/text.h"                 // f8_text_parse
#include "runtime/cuda/all_to_all.h" // f8_cuda_all_to_all_run, f8_cuda_all_to_all_staging
#include "runtime/cuda/driver.h"     // the driver calls it makes, defined below
#include "tests/test_support.h"      // CHECK, test_finish

enum { MAX_RANKS = 4, MAX_POSTED = 64, ROWS = 9, HIDDEN = 5, LOCAL = 2 };

/* ---- The driver and NCCL, on the host ---------------------------------------------------- */

typedef struct posted {
	uint32_t peer;
	CUdeviceptr data;
	size_t bytes;
} posted;

static uint32_t n_ranks;
static pthread_barrier_t barrier;
static _Thread_local uint32_t me;
static _Thread_local bool grouping;
static posted sends[MAX_RANKS][MAX_POSTED], receives[MAX_RANKS][MAX_POSTED];
static uint32_t n_sends[MAX_RANKS], n_receives[MAX_RANKS];
static int mock_failures[MAX_RANKS]; // each rank's thread counts its own: CHECK's tally is not shared

#define EXPECT(condition)                                                                  \
	do {                                                                               \
		if (!(condition) && mock_failures[me]++ < 5)                               \
			printf("FAIL %s:%d (rank %u): %s\n", __FILE__, __LINE__, me, #condition); \
	} while (0)

f8_status f8_cuda_copy_to_host(void *to, CUdeviceptr from, size_t bytes, f8_diag *diag) {
	(void)diag;
	EXPECT(!grouping);
	memcpy(to, (const void *)from, bytes);
	return F8_OK;
}

f8_status f8_cuda_copy_device_async(CUdeviceptr to, CUdeviceptr from, size_t bytes,
				    CUstream stream, f8_diag *diag) {
	(void)stream, (void)diag;
	EXPECT(to + bytes <= from || from + bytes <= to); // the driver's contract: no overlap
	memcpy((void *)to, (const void *)from, bytes);
	return F8_OK;
}

f8_status f8_cuda_copy_to_device_async(CUdeviceptr to, const void *from, size_t bytes,
				       CUstream stream, f8_diag *diag) {
	(void)stream, (void)diag;
	memcpy((void *)to, from, bytes);
	return F8_OK;
}

f8_status f8_cuda_memset_async(CUdeviceptr pointer, uint8_t value, size_t bytes, CUstream stream,
			       f8_diag *diag) {
	(void)stream, (void)diag;
	memset((void *)pointer, value, bytes);
	return F8_OK;
}

f8_status f8_cuda_stream_synchronize(CUstream stream, f8_diag *diag) {
	(void)stream, (void)diag;
	EXPECT(!grouping);
	return F8_OK;
}

f8_status f8_nccl_synchronize(f8_nccl *nccl, CUstream stream, const char *what, f8_diag *diag) {
	(void)nccl, (void)stream, (void)what, (void)diag;
	EXPECT(!grouping);
	return F8_OK;
}

f8_status f8_nccl_group_start(f8_nccl *nccl, f8_diag *diag) {
	(void)nccl, (void)diag;
	EXPECT(!grouping);
	grouping = true;
	n_sends[me] = n_receives[me] = 0;
	return F8_OK;
}

static f8_status post(posted *list, uint32_t *n, uint32_t peer, CUdeviceptr data, size_t bytes) {
	EXPECT(grouping && bytes && peer < n_ranks && *n < MAX_POSTED);
	if (*n < MAX_POSTED)
		list[(*n)++] = (posted){.peer = peer, .data = data, .bytes = bytes};
	return F8_OK;
}

f8_status f8_nccl_send(f8_nccl *nccl, uint32_t axes, uint32_t peer, CUdeviceptr data,
		       size_t bytes, CUstream stream, f8_diag *diag) {
	(void)nccl, (void)axes, (void)stream, (void)diag;
	return post(sends[me], &n_sends[me], peer, data, bytes);
}

f8_status f8_nccl_recv(f8_nccl *nccl, uint32_t axes, uint32_t peer, CUdeviceptr data,
		       size_t bytes, CUstream stream, f8_diag *diag) {
	(void)nccl, (void)axes, (void)stream, (void)diag;
	return post(receives[me], &n_receives[me], peer, data, bytes);
}

/* Every rank's group posted (the first wait), this rank takes each receive from the matching
 * send of its peer, the k-th receive from p the k-th send of p to it; the second wait keeps the
 * senders' buffers as they are until every rank has taken its rows. */
f8_status f8_nccl_group_end(f8_nccl *nccl, f8_diag *diag) {
	(void)nccl, (void)diag;
	EXPECT(grouping);
	grouping = false;
	pthread_barrier_wait(&barrier);
	for (uint32_t p = 0; p < n_ranks; p++) {
		uint32_t taken = 0, sent = 0;
		for (uint32_t j = 0; j < n_sends[p]; j++) {
			if (sends[p][j].peer != me)
				continue;
			sent++;
			uint32_t k = 0, i = 0;
			for (; i < n_receives[me]; i++)
				if (receives[me][i].peer == p && k++ == taken)
					break;
			EXPECT(i < n_receives[me] && receives[me][i].bytes == sends[p][j].bytes);
			if (i < n_receives[me] && receives[me][i].bytes == sends[p][j].bytes)
				memcpy((void *)receives[me][i].data, (const void *)sends[p][j].data,
				       sends[p][j].bytes);
			taken++;
		}
		uint32_t received = 0;
		for (uint32_t i = 0; i < n_receives[me]; i++)
			received += receives[me][i].peer == p;
		EXPECT(received == sent);
	}
	pthread_barrier_wait(&barrier);
	return F8_OK;
}

/* ---- The cases --------------------------------------------------------------------------- */

static f8_graph *graph;
static int64_t counts[MAX_RANKS][MAX_RANKS * LOCAL]; // (rank, E) each rank's rows per expert
static bool counts_i32;                              // the counts as i32, else i64
static bool over_nccl;                               // else one rank without NCCL

static f8_node_id node_of(f8_op op, uint32_t n_inputs) {
	for (uint32_t i = 0; i < graph->n_nodes; i++)
		if (graph->nodes[i].op == op && graph->nodes[i].n_inputs == n_inputs)
			return i;
	return F8_NONE;
}

static void set_view(f8_tensor_view *view, f8_dtype dtype, int64_t rows, int64_t columns) {
	*view = (f8_tensor_view){.dtype = dtype, .rank = columns ? 2 : 1, .dims = {rows, columns}};
	view->n_bytes = (uint64_t)(rows * (columns ? columns : 1)) * f8_dtype_get_info(dtype)->bytes;
}

/* One rank: dispatch, dispatch with the rows received given, combine; each output against the
 * layout the op defines. */
static void *run_rank(void *place) {
	me = (uint32_t)(intptr_t)place;
	uint32_t ranks = n_ranks, experts = ranks * LOCAL;
	float x[ROWS * HIDDEN], y[MAX_RANKS * ROWS * HIDDEN], y2[MAX_RANKS * ROWS * HIDDEN];
	float z[ROWS * HIDDEN];
	int64_t per_expert[2][LOCAL], received[2][MAX_RANKS * LOCAL], wide[MAX_RANKS * LOCAL];
	int32_t narrow[MAX_RANKS * LOCAL];
	for (int i = 0; i < ROWS * HIDDEN; i++)
		x[i] = (float)(me * 1000 + i);
	for (uint32_t e = 0; e < experts; e++)
		wide[e] = counts[me][e], narrow[e] = (int32_t)counts[me][e];
	memset(y, 0xab, sizeof y), memset(y2, 0xab, sizeof y2), memset(z, 0xab, sizeof z);
	f8_node_id d = node_of(F8_OP_ALL_TO_ALL_DISPATCH, 2);
	f8_node_id given = node_of(F8_OP_ALL_TO_ALL_DISPATCH, 3);
	f8_node_id c = node_of(F8_OP_ALL_TO_ALL_COMBINE, 3);
	const f8_node *nd = &graph->nodes[d], *ng = &graph->nodes[given], *nc = &graph->nodes[c];
	f8_tensor_view *views = calloc(graph->n_values, sizeof *views);
	set_view(&views[nd->inputs[0]], F8_DTYPE_F32, ROWS, HIDDEN);
	set_view(&views[nd->inputs[1]], counts_i32 ? F8_DTYPE_I32 : F8_DTYPE_I64, experts, 0);
	for (int k = 0; k < 2; k++) {
		const f8_node *n = k ? ng : nd;
		set_view(&views[n->outputs[0]], F8_DTYPE_F32, ranks * ROWS, HIDDEN);
		set_view(&views[n->outputs[1]], F8_DTYPE_I64, LOCAL, 0);
		set_view(&views[n->outputs[2]], F8_DTYPE_I64, ranks, LOCAL);
	}
	set_view(&views[nc->outputs[0]], F8_DTYPE_F32, ROWS, HIDDEN);
	uint64_t staging_bytes = f8_cuda_all_to_all_staging(nd, views);
	unsigned char *staging = malloc(staging_bytes + 1);
	memset(staging, 0xcd, staging_bytes + 1);
	static int communicator; // an address only: the mock's NCCL calls do not read it
	f8_cuda_all_to_all_group group = {
		.nccl = over_nccl ? (f8_nccl *)&communicator : NULL, .axes = 1, .ranks = ranks,
		.place = me, .staging = over_nccl ? (CUdeviceptr)staging : 0};
	f8_diag diag = {0};
	CUdeviceptr counts_at = counts_i32 ? (CUdeviceptr)narrow : (CUdeviceptr)wide;
	CUdeviceptr in[3] = {(CUdeviceptr)x, counts_at, 0};
	CUdeviceptr out[3] = {(CUdeviceptr)y, (CUdeviceptr)per_expert[0], (CUdeviceptr)received[0]};
	EXPECT(f8_cuda_all_to_all_run(&group, graph, d, views, in, out, 0, &diag) == F8_OK);
	in[2] = (CUdeviceptr)received[0];
	out[0] = (CUdeviceptr)y2, out[1] = (CUdeviceptr)per_expert[1];
	out[2] = (CUdeviceptr)received[1];
	EXPECT(f8_cuda_all_to_all_run(&group, graph, given, views, in, out, 0, &diag) == F8_OK);
	in[0] = (CUdeviceptr)y, out[0] = (CUdeviceptr)z;
	EXPECT(f8_cuda_all_to_all_run(&group, graph, c, views, in, out, 0, &diag) == F8_OK);
	if (mock_failures[me])
		printf("rank %u: %s\n", me, diag.message);
	// What arrived: for each local expert, each rank's rows of it in rank order, each run
	// where that rank's rows of the expert lie in its x (after its rows of the experts before).
	int64_t row = 0;
	for (uint32_t l = 0; l < LOCAL; l++) {
		uint32_t e = me * LOCAL + l;
		int64_t total = 0;
		for (uint32_t r = 0; r < ranks; r++) {
			int64_t first = 0;
			for (uint32_t k = 0; k < e; k++)
				first += counts[r][k];
			for (int64_t i = 0; i < counts[r][e]; i++, row++)
				for (int h = 0; h < HIDDEN; h++) {
					float want = (float)(r * 1000 + (first + i) * HIDDEN + h);
					EXPECT(y[row * HIDDEN + h] == want);
					EXPECT(y2[row * HIDDEN + h] == want);
				}
			EXPECT(received[0][r * LOCAL + l] == counts[r][e]);
			EXPECT(received[1][r * LOCAL + l] == counts[r][e]);
			total += counts[r][e];
		}
		EXPECT(per_expert[0][l] == total && per_expert[1][l] == total);
	}
	for (int64_t i = row * HIDDEN; i < ranks * ROWS * HIDDEN; i++)
		EXPECT(y[i] == 0 && y2[i] == 0);
	int64_t mine = 0; // combine: x's rows back, the rest zeros
	for (uint32_t e = 0; e < experts; e++)
		mine += counts[me][e];
	for (int64_t i = 0; i < ROWS * HIDDEN; i++)
		EXPECT(z[i] == (i < mine * HIDDEN ? x[i] : 0.0f));
	free(staging);
	free(views);
	return NULL;
}

/* The three nodes over `ranks` ranks on counts of `seed`, every rank a thread. */
static void run_case(uint32_t ranks, bool i32, bool nccl, unsigned seed) {
	n_ranks = ranks, counts_i32 = i32, over_nccl = nccl;
	for (uint32_t r = 0; r < ranks; r++) { // each rank's counts add up to at most its rows
		int left = (int)(rand_r(&seed) % (ROWS + 1));
		for (uint32_t e = 0; e < ranks * LOCAL; e++) {
			int count = e + 1 == ranks * LOCAL ? left : (int)(rand_r(&seed) % (left + 1));
			counts[r][e] = count;
			left -= count;
		}
	}
	char text[1024];
	snprintf(text, sizeof text,
		 "graph t {\ninput %%x : f32[%d, %d]\ninput %%n : %s[%u]\n"
		 "%%y, %%l, %%r = AllToAllDispatch(%%x, %%n) {group=\"ep\", ranks=%u}\n"
		 "%%y2, %%l2, %%r2 = AllToAllDispatch(%%x, %%n, %%r) {group=\"ep\", ranks=%u}\n"
		 "%%z = AllToAllCombine(%%y, %%n, %%r) {group=\"ep\", ranks=%u}\noutput %%z, %%y2\n}\n",
		 ROWS, HIDDEN, i32 ? "i32" : "i64", ranks * LOCAL, ranks, ranks, ranks);
	f8_diag diag = {0};
	CHECK(f8_text_parse(text, strlen(text), "case", &graph, &diag) == F8_OK);
	if (!graph)
		return;
	pthread_barrier_init(&barrier, NULL, ranks);
	pthread_t threads[MAX_RANKS];
	for (uint32_t r = 0; r < ranks; r++)
		pthread_create(&threads[r], NULL, run_rank, (void *)(intptr_t)r);
	for (uint32_t r = 0; r < ranks; r++)
		pthread_join(threads[r], NULL);
	pthread_barrier_destroy(&barrier);
	for (uint32_t r = 0; r < ranks; r++) {
		CHECK(mock_failures[r] == 0);
		mock_failures[r] = 0;
	}
	f8_graph_destroy(graph);
	graph = NULL;
}

/* One rank without NCCL: counts that do not fit x's rows, and rows received from itself that
 * are not its counts, refused naming the node; the same two that agree, run. */
static void refusals(void) {
	const char *text = "graph t {\ninput %x : f32[9, 5]\ninput %n : i64[2]\n"
			   "input %g : i64[1, 2]\n%y, %l, %r = AllToAllDispatch(%x, %n, %g) "
			   "{group=\"ep\", ranks=1}\noutput %y\n}\n";
	f8_diag diag = {0};
	CHECK(f8_text_parse(text, strlen(text), "refusals", &graph, &diag) == F8_OK);
	if (!graph)
		return;
	f8_tensor_view *views = calloc(graph->n_values, sizeof *views);
	const f8_node *node = &graph->nodes[0];
	set_view(&views[node->inputs[0]], F8_DTYPE_F32, 9, 5);
	set_view(&views[node->inputs[1]], F8_DTYPE_I64, 2, 0);
	set_view(&views[node->inputs[2]], F8_DTYPE_I64, 1, 2);
	set_view(&views[node->outputs[0]], F8_DTYPE_F32, 9, 5);
	set_view(&views[node->outputs[1]], F8_DTYPE_I64, 2, 0);
	set_view(&views[node->outputs[2]], F8_DTYPE_I64, 1, 2);
	float x[45] = {0}, y[45];
	int64_t n[2], g[2], per_expert[2], received[2];
	CUdeviceptr in[3] = {(CUdeviceptr)x, (CUdeviceptr)n, (CUdeviceptr)g};
	CUdeviceptr out[3] = {(CUdeviceptr)y, (CUdeviceptr)per_expert, (CUdeviceptr)received};
	f8_cuda_all_to_all_group alone = {.ranks = 1};
	const struct {
		int64_t n[2], g[2];
		const char *says; // NULL: it runs
	} cases[] = {
		{{5, 5}, {5, 5}, "the counts (entry 1: 5 after 5) do not fit the 9 rows"},
		{{-1, 2}, {-1, 2}, "the counts (entry 0: -1 after 0) do not fit the 9 rows"},
		{{3, 4}, {3, 5}, "from this rank (place 0) for its local expert 1 are 5, not its "
				 "counts' 4"},
		{{3, 4}, {3, 4}, NULL},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		memcpy(n, cases[i].n, sizeof n), memcpy(g, cases[i].g, sizeof g);
		diag = (f8_diag){0};
		f8_status status = f8_cuda_all_to_all_run(&alone, graph, 0, views, in, out, 0, &diag);
		CHECK(cases[i].says ? status == F8_ERR_INVALID : status == F8_OK);
		CHECK(!cases[i].says || (strstr(diag.message, cases[i].says) &&
					 strstr(diag.node, "AllToAllDispatch")));
		if (cases[i].says && !strstr(diag.message, cases[i].says))
			printf("  said: %s\n", diag.message);
	}
	free(views);
	f8_graph_destroy(graph);
	graph = NULL;
}

int main(void) {
	for (unsigned seed = 1; seed <= 50; seed++) {
		run_case(1, seed & 1, false, seed); // backend.c's group of one rank
		for (uint32_t ranks = 1; ranks <= MAX_RANKS; ranks++)
			run_case(ranks, seed & 1, true, seed);
	}
	refusals();
	return test_finish();
}
