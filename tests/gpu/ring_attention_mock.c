/*
 * The CUDA backend's RingAttention and RingAttentionGrad (runtime/cuda/ring_attention.c) over 1 to
 * 4 ranks without a GPU, as gpu.all_to_all_mock holds the all-to-all: device memory is host
 * memory, the driver's copies and fills are loops, NCCL's ranks are threads whose gather and
 * reduce-scatter of the sequence (f8_cuda_collectives_sequence) place and take the balanced
 * parts with f8_rt_copy_balanced, cuBLASLt's transform is C = alpha A + beta B, and each cuDNN
 * call is a host attention over the call's rows and key prefix (f8_rt_ring_calls plans them, as
 * attention.c does). What is held is the file's own arithmetic: the gathered K and V, each
 * call's rows, addresses and packed lse, the two calls' dK and dV summed, copied and
 * zero-filled, and the gradients reduce-scattered, against plain attention over the whole
 * sequence in double, for o, lse, dQ, dK and dV, with and without causal masking, GQA, a V
 * narrower than Q and K, one rank's odd rows and a RingAttention without an lse. The one GPU the
 * device tool lends runs only one rank; cuDNN's numerics and attention.c's plans are
 * attention_check's, bf16 and NCCL's sums the GPU's. New memory is filled with 0xff bytes (NaN
 * as f32), so a byte the file reads before anything wrote it shows, and guards around each block
 * catch writes past its ends. `ring_attention_mock SEED` repeats a run.
 */
#define _POSIX_C_SOURCE 200809L // pthread_barrier_*, rand_r

#include <math.h>      // exp, log, sqrt, fabs, INFINITY
#include <pthread.h>   // pthread_*
#include <stdatomic.h> // atomic_int
#include <stdint.h>    // intptr_t
#include <stdio.h>     // printf, snprintf
#include <stdlib.h>    // calloc, malloc, free, rand_r
#include <string.h>    // memcpy, memset, memcmp, strstr

#include "ir/text.h"                     // f8_text_parse
#include "runtime/cuda/driver.h"         // the driver calls it makes, defined below
#include "runtime/cuda/gemm_lt.h"        // f8_cuda_lt_check, f8_cuda_lt_layout_create
#include "runtime/cuda/libraries.h"      // f8_cuda_api_table, f8_cuda_load
#include "runtime/cuda/ring_attention.h" // f8_cuda_ring_attention_*
#include "runtime/placement.h"           // f8_rt_copy_balanced, f8_rt_ring_calls
#include "tests/test_support.h"          // CHECK, test_finish

enum { MAX_RANKS = 4, BATCH = 2, HEADS = 4, KV_HEADS = 2, DIM = 8, GUARD = 64 };
#define CP_AXES (1u << F8_MESH_AXIS_CP)

static uint32_t n_ranks;
static pthread_barrier_t barrier;
static _Thread_local uint32_t me;
static int mock_failures[MAX_RANKS]; // each rank's thread counts its own: CHECK's tally is not shared
static atomic_int live_blocks, live_layouts, live_handles; // each back to 0 after a case

#define EXPECT(condition)                                                                  \
	do {                                                                               \
		if (!(condition) && mock_failures[me]++ < 5)                               \
			printf("FAIL %s:%d (rank %u): %s\n", __FILE__, __LINE__, me, #condition); \
	} while (0)

/* ---- The driver, on the host ------------------------------------------------------------- */

/* A block: its size, GUARD bytes of 0xa5 before and after, the bytes between 0xff. */
f8_status f8_cuda_alloc(size_t bytes, CUdeviceptr *pointer, f8_diag *diag) {
	(void)diag;
	unsigned char *block = malloc(GUARD + bytes + GUARD);
	memset(block, 0xa5, GUARD + bytes + GUARD);
	memcpy(block, &bytes, sizeof bytes);
	memset(block + GUARD, 0xff, bytes);
	*pointer = (CUdeviceptr)(block + GUARD);
	live_blocks++;
	return F8_OK;
}

f8_status f8_cuda_free(CUdeviceptr pointer, f8_diag *diag) {
	(void)diag;
	if (!pointer)
		return F8_OK;
	unsigned char *block = (unsigned char *)pointer - GUARD;
	size_t bytes;
	memcpy(&bytes, block, sizeof bytes);
	bool intact = true;
	for (size_t i = 0; i < GUARD; i++)
		intact &= (i < sizeof bytes || block[i] == 0xa5) && block[GUARD + bytes + i] == 0xa5;
	EXPECT(intact); // nothing written just before or past the block
	free(block);
	live_blocks--;
	return F8_OK;
}

f8_status f8_cuda_memset_2d_async(CUdeviceptr pointer, size_t pitch, uint8_t value, size_t width,
				  size_t height, CUstream stream, f8_diag *diag) {
	(void)stream, (void)diag;
	EXPECT(width <= pitch);
	for (size_t i = 0; i < height; i++)
		memset((void *)(pointer + i * pitch), value, width);
	return F8_OK;
}

f8_status f8_cuda_copy_2d_async(CUdeviceptr to, size_t to_pitch, CUdeviceptr from,
				size_t from_pitch, size_t width, size_t height, CUstream stream,
				f8_diag *diag) {
	(void)stream, (void)diag;
	EXPECT(width <= to_pitch && width <= from_pitch);
	size_t to_end = (height - 1) * to_pitch + width, from_end = (height - 1) * from_pitch + width;
	EXPECT(!height || to + to_end <= from || from + from_end <= to); // the driver's: no overlap
	for (size_t i = 0; i < height; i++)
		memcpy((void *)(to + i * to_pitch), (const void *)(from + i * from_pitch), width);
	return F8_OK;
}

/* ---- cuBLASLt: handles, layouts and the transform ---------------------------------------- */

f8_status f8_cuda_load(unsigned libraries, f8_diag *diag) {
	(void)diag;
	EXPECT(libraries == F8_CUDA_LIBRARY_CUBLASLT);
	return F8_OK;
}

f8_status f8_cuda_lt_check(cublasStatus_t result, const char *call, f8_diag *diag) {
	return result == CUBLAS_STATUS_SUCCESS
		       ? F8_OK
		       : f8_diag_set(diag, F8_ERR_IO, "%s failed (%d)", call, (int)result);
}

enum { LAYOUT_DTYPE, LAYOUT_ROWS, LAYOUT_COLS, LAYOUT_LD }; // cublasLtMatrixLayoutOpaque_t.data

/* A column-major layout as what its fields hold; cuBLASLt's own descriptor type, so no cast. */
f8_status f8_cuda_lt_layout_create(cublasLtMatrixLayout_t *out, f8_dtype dtype, int64_t rows,
				   int64_t cols, int64_t ld, int32_t batch, int64_t stride,
				   f8_diag *diag) {
	(void)diag;
	EXPECT(rows > 0 && cols > 0 && rows <= ld && batch == 1 && stride == 0);
	*out = malloc(sizeof **out);
	**out = (cublasLtMatrixLayoutOpaque_t){
		.data = {[LAYOUT_DTYPE] = (uint64_t)dtype, [LAYOUT_ROWS] = (uint64_t)rows,
			 [LAYOUT_COLS] = (uint64_t)cols, [LAYOUT_LD] = (uint64_t)ld}};
	live_layouts++;
	return F8_OK;
}

static cublasStatus_t mock_layout_destroy(cublasLtMatrixLayout_t layout) {
	free(layout);
	live_layouts--;
	return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t mock_create(cublasLtHandle_t *handle) {
	*handle = (cublasLtHandle_t)&live_handles; // an address only
	live_handles++;
	return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t mock_destroy(cublasLtHandle_t handle) {
	EXPECT(handle);
	live_handles--;
	return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t mock_transform_desc_create(cublasLtMatrixTransformDesc_t *desc,
						 cudaDataType scale_type) {
	*desc = calloc(1, sizeof **desc);
	(*desc)->data[0] = (uint64_t)scale_type;
	live_handles++;
	return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t mock_transform_desc_destroy(cublasLtMatrixTransformDesc_t desc) {
	free(desc);
	live_handles--;
	return CUBLAS_STATUS_SUCCESS;
}

/* C = alpha A + beta B elementwise, f32 data and scalars, one layout for all three (no
 * transposes: the descriptor's defaults). */
static cublasStatus_t mock_transform(cublasLtHandle_t handle, cublasLtMatrixTransformDesc_t desc,
				     const void *alpha, const void *a, cublasLtMatrixLayout_t a_layout,
				     const void *beta, const void *b, cublasLtMatrixLayout_t b_layout,
				     void *c, cublasLtMatrixLayout_t c_layout, cudaStream_t stream) {
	(void)stream;
	EXPECT(handle && desc && desc->data[0] == CUDA_R_32F && a && b && c);
	EXPECT(!memcmp(a_layout, b_layout, sizeof *a_layout));
	EXPECT(!memcmp(a_layout, c_layout, sizeof *a_layout));
	EXPECT(a_layout->data[LAYOUT_DTYPE] == F8_DTYPE_F32);
	float scale_a = *(const float *)alpha, scale_b = *(const float *)beta;
	uint64_t rows = a_layout->data[LAYOUT_ROWS], ld = a_layout->data[LAYOUT_LD];
	for (uint64_t j = 0; j < a_layout->data[LAYOUT_COLS]; j++)
		for (uint64_t i = 0; i < rows; i++)
			((float *)c)[j * ld + i] = scale_a * ((const float *)a)[j * ld + i] +
						   scale_b * ((const float *)b)[j * ld + i];
	return CUBLAS_STATUS_SUCCESS;
}

f8_cuda_api_table f8_cuda_api = {
	.cublasLtCreate = mock_create,
	.cublasLtDestroy = mock_destroy,
	.cublasLtMatrixTransformDescCreate = mock_transform_desc_create,
	.cublasLtMatrixTransformDescDestroy = mock_transform_desc_destroy,
	.cublasLtMatrixTransform = mock_transform,
	.cublasLtMatrixLayoutDestroy = mock_layout_destroy,
};

/* ---- NCCL's sequence collectives: one thread per rank ------------------------------------ */

struct f8_cuda_collectives {
	int unused; // an address only: present means the group runs over "NCCL"
};

static CUdeviceptr published[MAX_RANKS]; // each rank's part (gather) or whole (reduce-scatter)

bool f8_cuda_collectives_run_over(const f8_cuda_collectives *collectives, uint32_t axes) {
	EXPECT(axes == CP_AXES);
	return collectives != NULL;
}

/* The gather places every rank's part in the whole; the reduce-scatter sums the ranks' wholes
 * (in rank order, on every rank alike) and takes this rank's part. The second wait keeps every
 * rank's buffer as it is until all have read it. */
f8_status f8_cuda_collectives_sequence(f8_cuda_collectives *collectives, uint32_t axes,
				       bool gather, const f8_tensor_view *part, CUdeviceptr part_at,
				       CUdeviceptr whole_at, CUstream stream, f8_diag *diag) {
	(void)stream, (void)diag;
	EXPECT(collectives && axes == CP_AXES && part->rank == 4 && part->dtype == F8_DTYPE_F32);
	EXPECT(part->dims[2] % 2 == 0 && part->n_bytes == (uint64_t)(part->dims[0] * part->dims[1] *
								    part->dims[2] * part->dims[3]) * 4);
	int64_t dims[4] = {part->dims[0], part->dims[1], part->dims[2] * n_ranks, part->dims[3]};
	published[me] = gather ? part_at : whole_at;
	pthread_barrier_wait(&barrier);
	if (gather) {
		for (uint32_t p = 0; p < n_ranks; p++)
			f8_rt_copy_balanced((void *)whole_at, (void *)published[p], dims, 4, 2, n_ranks,
					    p, 4, false);
	} else {
		size_t count = part->n_bytes / 4 * n_ranks;
		float *sum = calloc(count, sizeof *sum);
		for (uint32_t p = 0; p < n_ranks; p++)
			for (size_t i = 0; i < count; i++)
				sum[i] += ((const float *)published[p])[i];
		f8_rt_copy_balanced(sum, (void *)part_at, dims, 4, 2, n_ranks, me, 4, true);
		free(sum);
	}
	pthread_barrier_wait(&barrier);
	return F8_OK;
}

/* ---- cuDNN's calls: attention over a call's rows and key prefix, on the host ------------- */

/* One call: s_q query rows within (batch, heads, q_pitch, dim) tensors, the first s_kv keys of
 * (batch, kv_heads, kv_pitch, dim) ones; lse packed (batch, heads, s_q). */
typedef struct call_shape {
	int64_t batch, heads, kv_heads, dim, value_dim, q_pitch, kv_pitch, s_q, s_kv;
	bool causal; // bottom-right: row t attends keys j <= t + s_kv - s_q
	double scale;
} call_shape;

/* Row t's scaled scores against the keys it attends (the first of its slab's, `keys`) into
 * score[0..n), answering n. */
static int64_t scores(const call_shape *s, const float *row, const float *keys, int64_t t,
		      double *score) {
	int64_t n = s->causal ? t + s->s_kv - s->s_q + 1 : s->s_kv;
	EXPECT(n >= 1 && n <= s->s_kv);
	for (int64_t j = 0; j < n; j++) {
		double dot = 0;
		for (int64_t i = 0; i < s->dim; i++)
			dot += (double)row[i] * keys[j * s->dim + i];
		score[j] = s->scale * dot;
	}
	return n;
}

/* A row's output from its n scores and its slab's values; its lse where it has one. */
static void forward_row(const call_shape *s, const double *score, int64_t n, const float *v,
			float *o, float *lse) {
	double max = -INFINITY, sum = 0;
	for (int64_t j = 0; j < n; j++)
		max = fmax(max, score[j]);
	for (int64_t j = 0; j < n; j++)
		sum += exp(score[j] - max);
	if (lse) // a forward without an lse output: cuDNN's workspace
		*lse = (float)(max + log(sum));
	for (int64_t i = 0; i < s->value_dim; i++) {
		double out = 0;
		for (int64_t j = 0; j < n; j++)
			out += exp(score[j] - max) / sum * v[j * s->value_dim + i];
		o[i] = (float)out;
	}
}

/* A row's dq (g its dO, out its o), and its terms of its slab's dK and dV (double, s_kv rows):
 * p = exp(score - lse), D = dO.o, dV += p dO, dS = p (dO.v - D), dQ += scale dS k,
 * dK += scale dS q. */
static void backward_row(const call_shape *s, const double *score, int64_t n, const float *g,
			 const float *out, const float *q, const float *k, const float *v,
			 double lse, float *dq, double *dk, double *dv) {
	double d = 0, dq_row[DIM] = {0};
	for (int64_t i = 0; i < s->value_dim; i++)
		d += (double)g[i] * out[i];
	for (int64_t j = 0; j < n; j++) {
		double p = exp(score[j] - lse), dp = 0;
		for (int64_t i = 0; i < s->value_dim; i++) {
			dp += (double)g[i] * v[j * s->value_dim + i];
			dv[j * s->value_dim + i] += p * g[i];
		}
		for (int64_t i = 0; i < s->dim; i++) {
			dq_row[i] += s->scale * p * (dp - d) * k[j * s->dim + i];
			dk[j * s->dim + i] += s->scale * p * (dp - d) * q[i];
		}
	}
	for (int64_t i = 0; i < s->dim; i++)
		dq[i] = (float)dq_row[i];
}

/* The forward (d_o NULL) or the backward of one call. A backward writes dK and dV over the
 * first s_kv rows of each slab (cuDNN's tensors of the call), not past them. */
static void attend(const call_shape *s, const float *d_o, const float *q, const float *k,
		   const float *v, float *o, float *lse, float *dq, float *dk, float *dv) {
	EXPECT(s->dim <= DIM);
	int64_t slabs = s->batch * s->kv_heads, group = s->heads / s->kv_heads; // GQA's
	int64_t k_slab = s->kv_pitch * s->dim, v_slab = s->kv_pitch * s->value_dim;
	int64_t dk_slab = s->s_kv * s->dim, dv_slab = s->s_kv * s->value_dim;
	double *score = malloc((size_t)s->s_kv * sizeof *score);
	double *dk_sum = calloc((size_t)(slabs * dk_slab), sizeof *dk_sum);
	double *dv_sum = calloc((size_t)(slabs * dv_slab), sizeof *dv_sum);
	for (int64_t b = 0; b < s->batch; b++)
		for (int64_t h = 0; h < s->heads; h++)
			for (int64_t t = 0; t < s->s_q; t++) {
				int64_t row = (b * s->heads + h) * s->q_pitch + t;
				int64_t slab = b * s->kv_heads + h / group;
				int64_t n = scores(s, q + row * s->dim, k + slab * k_slab, t, score);
				float *lse_at = lse ? lse + (b * s->heads + h) * s->s_q + t : NULL;
				if (!d_o)
					forward_row(s, score, n, v + slab * v_slab,
						    o + row * s->value_dim, lse_at);
				else
					backward_row(s, score, n, d_o + row * s->value_dim,
						     o + row * s->value_dim, q + row * s->dim,
						     k + slab * k_slab, v + slab * v_slab, *lse_at,
						     dq + row * s->dim, dk_sum + slab * dk_slab,
						     dv_sum + slab * dv_slab);
			}
	for (int64_t slab = 0; d_o && slab < slabs; slab++) { // a slab's first s_kv rows
		for (int64_t i = 0; i < dk_slab; i++)
			dk[slab * k_slab + i] = (float)dk_sum[slab * dk_slab + i];
		for (int64_t i = 0; i < dv_slab; i++)
			dv[slab * v_slab + i] = (float)dv_sum[slab * dv_slab + i];
	}
	free(score), free(dk_sum), free(dv_sum);
}

struct f8_cuda_attention {
	const f8_graph *graph;
	const f8_tensor_view *views;
	uint32_t place;
	int64_t kv_pitch; // the rows of the K and V the calls read: gathered (R x rows) or the rank's
};

/* The node's calls as attention.c plans them: f8_rt_ring_calls at this rank's place. */
static uint32_t plan_of(const f8_cuda_attention *attention, const f8_node *node, int64_t *q_from,
			int64_t *keys) {
	uint32_t q = node->op == F8_OP_RING_ATTENTION_GRAD;
	return f8_rt_ring_calls(f8_node_attr_int(node, "ranks", 1), attention->place,
				attention->views[node->inputs[q]].dims[2],
				f8_node_attr_int(node, "causal", 0) != 0, q_from, keys);
}

uint32_t f8_cuda_attention_ring_calls(const f8_cuda_attention *attention, f8_node_id node,
				      int64_t *q_from, int64_t *keys) {
	return plan_of(attention, &attention->graph->nodes[node], q_from, keys);
}

f8_status f8_cuda_attention_run_ring_call(f8_cuda_attention *attention, f8_node_id id,
					  uint32_t call, const CUdeviceptr *in,
					  const CUdeviceptr *out, f8_diag *diag) {
	const f8_node *node = &attention->graph->nodes[id];
	bool backward = node->op == F8_OP_RING_ATTENTION_GRAD;
	const f8_tensor_view *q = &attention->views[node->inputs[backward]];
	const f8_tensor_view *k = &attention->views[node->inputs[backward + 1]];
	const f8_tensor_view *v = &attention->views[node->inputs[backward + 2]];
	int64_t q_from[2], keys[2];
	uint32_t calls = plan_of(attention, node, q_from, keys);
	EXPECT(call < calls);
	if (call >= calls)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "node %u has no ring call %u", id, call);
	int64_t rows = q->dims[2];
	call_shape s = {.batch = q->dims[0], .heads = q->dims[1], .kv_heads = k->dims[1],
			.dim = q->dims[3], .value_dim = v->dims[3], .q_pitch = rows,
			.kv_pitch = attention->kv_pitch,
			.s_q = (call + 1 < calls ? q_from[call + 1] : rows) - q_from[call],
			.s_kv = keys[call], .causal = f8_node_attr_int(node, "causal", 0) != 0,
			.scale = f8_node_attr_float(node, "scale", 1.0 / sqrt((double)q->dims[3]))};
	EXPECT(s.s_kv >= s.s_q && s.s_kv <= s.kv_pitch);
	EXPECT(backward || !out[1] == (node->n_outputs == 1));
#define AT(x) ((float *)(x))
	if (!backward)
		attend(&s, NULL, AT(in[0]), AT(in[1]), AT(in[2]), AT(out[0]), AT(out[1]), NULL, NULL,
		       NULL);
	else
		attend(&s, AT(in[0]), AT(in[1]), AT(in[2]), AT(in[3]), AT(in[4]), AT(in[5]),
		       AT(out[0]), AT(out[1]), AT(out[2]));
#undef AT
	return F8_OK;
}

/* ---- The cases --------------------------------------------------------------------------- */

// The tensors of a case, whole and parts: O2 is the o of a RingAttention without an lse.
enum { Q, K, V, DO, O, LSE, DQ, DK, DV, O2, N_TENSORS };
static const char *const names[N_TENSORS] = {"q", "k", "v", "do", "o", "lse", "dq", "dk", "dv",
					     "o (no lse)"};
static f8_graph *graph;
static float *whole[N_TENSORS], *want[N_TENSORS]; // (the whole sequence): the ranks', the reference
static int64_t dims[N_TENSORS][4];                  // a rank's part of each
static bool over_nccl;                              // the group over "NCCL", else none

/* Tensor t between its whole and this rank's part at `at` (balanced; a rank alone holds the
 * whole, odd rows too, which are no two chunks). */
static void move_part(int t, CUdeviceptr at, uint64_t bytes, bool to_part) {
	int64_t whole_dims[4] = {dims[t][0], dims[t][1], dims[t][2] * n_ranks, dims[t][3]};
	if (n_ranks == 1)
		memcpy(to_part ? (void *)at : whole[t], to_part ? whole[t] : (void *)at, bytes);
	else
		f8_rt_copy_balanced(whole[t], (void *)at, whole_dims, t == LSE ? 3 : 4, 2, n_ranks, me,
				    4, to_part);
}

/* One rank: its parts of q, k, v and dO, the two nodes, its parts of the results into the
 * wholes (each rank writes its own rows). */
static void *run_rank(void *place) {
	me = (uint32_t)(intptr_t)place;
	const f8_node *forward = &graph->nodes[0], *backward = &graph->nodes[1];
	f8_value_id ids[N_TENSORS] = {forward->inputs[0], forward->inputs[1], forward->inputs[2],
				      backward->inputs[0], forward->outputs[0], forward->outputs[1],
				      backward->outputs[0], backward->outputs[1], backward->outputs[2],
				      graph->nodes[2].outputs[0]};
	f8_tensor_view *views = calloc(graph->n_values, sizeof *views);
	CUdeviceptr at[N_TENSORS];
	for (int t = 0; t < N_TENSORS; t++) {
		f8_tensor_view *view = &views[ids[t]];
		*view = (f8_tensor_view){.dtype = F8_DTYPE_F32, .rank = t == LSE ? 3 : 4};
		memcpy(view->dims, dims[t], sizeof dims[t]);
		view->n_bytes = 4;
		for (int d = 0; d < view->rank; d++)
			view->n_bytes *= (uint64_t)dims[t][d];
		f8_cuda_alloc(view->n_bytes, &at[t], NULL);
		if (t <= DO)
			move_part(t, at[t], view->n_bytes, true);
	}
	bool over = over_nccl && dims[Q][2] % 2 == 0;
	f8_cuda_attention attention = {.graph = graph, .views = views, .place = me,
				       .kv_pitch = over ? n_ranks * dims[K][2] : dims[K][2]};
	static f8_cuda_collectives communicator;
	f8_cuda_ring_attention *rings = NULL;
	f8_diag diag = {0};
	EXPECT(f8_cuda_ring_attention_create(graph, &attention, over_nccl ? &communicator : NULL,
					     NULL, &rings, &diag) == F8_OK);
	CUdeviceptr in[6] = {at[Q], at[K], at[V]}, out[3] = {at[O], at[LSE]};
	EXPECT(f8_cuda_ring_attention_run(rings, 0, CP_AXES, views, in, out, &diag) == F8_OK);
	CUdeviceptr grad_in[6] = {at[DO], at[Q], at[K], at[V], at[O], at[LSE]};
	CUdeviceptr grad_out[3] = {at[DQ], at[DK], at[DV]};
	EXPECT(f8_cuda_ring_attention_run(rings, 1, CP_AXES, views, grad_in, grad_out, &diag) ==
	       F8_OK);
	CUdeviceptr alone[2] = {at[O2], 0};
	EXPECT(f8_cuda_ring_attention_run(rings, 2, CP_AXES, views, in, alone, &diag) == F8_OK);
	if (mock_failures[me])
		printf("rank %u: %s\n", me, diag.message);
	f8_cuda_ring_attention_destroy(rings);
	for (int t = 0; t < N_TENSORS; t++) {
		if (t >= O)
			move_part(t, at[t], views[ids[t]].n_bytes, false);
		f8_cuda_free(at[t], NULL);
	}
	free(views);
	return NULL;
}

/* The largest difference from the reference against its largest magnitude (NaN fails). */
static bool close_to_reference(int t, int64_t count, const char *what) {
	double largest = 0, worst = 0;
	for (int64_t i = 0; i < count; i++) {
		double error = fabs((double)whole[t][i] - want[t][i]);
		largest = fmax(largest, fabs((double)want[t][i]));
		worst = error > worst || error != error ? error : worst;
	}
	bool close = worst <= 1e-4 * fmax(largest, 1e-30);
	if (!close)
		printf("  %s: %s off by %g of %g\n", what, names[t], worst, largest);
	return close;
}

/* RingAttention then RingAttentionGrad over `ranks` threads of `rows` rows each, against
 * attention over the whole sequence. */
static void run_case(uint32_t ranks, int64_t rows, bool causal, bool nccl, int64_t value_dim,
		     unsigned seed) {
	char what[128];
	snprintf(what, sizeof what, "%u ranks, %lld rows, causal %d, nccl %d, value dim %lld, seed %u",
		 ranks, (long long)rows, causal, nccl, (long long)value_dim, seed);
	n_ranks = ranks, over_nccl = nccl;
	int64_t heads[N_TENSORS] = {HEADS, KV_HEADS, KV_HEADS, HEADS, HEADS, HEADS, HEADS,
				    KV_HEADS, KV_HEADS, HEADS};
	int64_t widths[N_TENSORS] = {DIM, DIM, value_dim, value_dim, value_dim, 1, DIM, DIM,
				     value_dim, value_dim};
	int64_t counts[N_TENSORS], sequence = ranks * rows;
	for (int t = 0; t < N_TENSORS; t++) {
		memcpy(dims[t], (int64_t[4]){BATCH, heads[t], rows, widths[t]}, sizeof dims[t]);
		counts[t] = BATCH * heads[t] * sequence * widths[t];
		whole[t] = malloc((size_t)counts[t] * sizeof(float));
		want[t] = malloc((size_t)counts[t] * sizeof(float));
		double range = t == Q ? 2.0 : 1.0; // q's wider: a sharper softmax
		for (int64_t i = 0; t <= DO && i < counts[t]; i++)
			whole[t][i] = (float)(range * (2.0 * rand_r(&seed) / RAND_MAX - 1.0));
	}
	char text[1024];
	snprintf(text, sizeof text,
		 "graph t {\ninput %%q : f32[%d, %d, %lld, %d]\ninput %%k : f32[%d, %d, %lld, %d]\n"
		 "input %%v : f32[%d, %d, %lld, %lld]\ninput %%do : f32[%d, %d, %lld, %lld]\n"
		 "%%o, %%lse = RingAttention(%%q, %%k, %%v) {group=\"cp\", ranks=%u, causal=%d}\n"
		 "%%dq, %%dk, %%dv = RingAttentionGrad(%%do, %%q, %%k, %%v, %%o, %%lse) "
		 "{group=\"cp\", ranks=%u, causal=%d}\n"
		 "%%o2 = RingAttention(%%q, %%k, %%v) {group=\"cp\", ranks=%u, causal=%d}\n"
		 "output %%dq, %%dk, %%dv, %%o2\n}\n",
		 BATCH, HEADS, (long long)rows, DIM, BATCH, KV_HEADS, (long long)rows, DIM, BATCH,
		 KV_HEADS, (long long)rows, (long long)value_dim, BATCH, HEADS, (long long)rows,
		 (long long)value_dim, ranks, causal, ranks, causal, ranks, causal);
	f8_diag diag = {0};
	int failed_before = test_failed;
	CHECK(f8_text_parse(text, strlen(text), "case", &graph, &diag) == F8_OK);
	if (graph) {
		call_shape s = {.batch = BATCH, .heads = HEADS, .kv_heads = KV_HEADS, .dim = DIM,
				.value_dim = value_dim, .q_pitch = sequence, .kv_pitch = sequence,
				.s_q = sequence, .s_kv = sequence, .causal = causal,
				.scale = 1.0 / sqrt((double)DIM)};
		attend(&s, NULL, whole[Q], whole[K], whole[V], want[O], want[LSE], NULL, NULL, NULL);
		attend(&s, whole[DO], whole[Q], whole[K], whole[V], want[O], want[LSE], want[DQ],
		       want[DK], want[DV]);
		memcpy(want[O2], want[O], (size_t)counts[O] * sizeof(float));
		pthread_barrier_init(&barrier, NULL, ranks);
		pthread_t threads[MAX_RANKS];
		for (uint32_t r = 0; r < ranks; r++)
			pthread_create(&threads[r], NULL, run_rank, (void *)(intptr_t)r);
		for (uint32_t r = 0; r < ranks; r++)
			pthread_join(threads[r], NULL);
		pthread_barrier_destroy(&barrier);
		bool close = true;
		for (int t = O; t < N_TENSORS; t++)
			close &= close_to_reference(t, counts[t], what);
		CHECK(close);
		for (uint32_t r = 0; r < ranks; r++) {
			CHECK(mock_failures[r] == 0);
			mock_failures[r] = 0;
		}
		CHECK(live_blocks == 0 && live_layouts == 0 && live_handles == 0);
		if (test_failed > failed_before)
			printf("  in: %s\n", what);
	}
	for (int t = 0; t < N_TENSORS; t++)
		free(whole[t]), free(want[t]);
	f8_graph_destroy(graph);
	graph = NULL;
}

/* A ring of 2 ranks on a group of one, without NCCL, or over it with views of odd rows (which
 * one rank alone holds; shape inference refuses them in the text, a symbolic length at run
 * time only): refused by ring_attention.c itself, before any call. */
static void refusals(void) {
	const char *text = "graph t {\ninput %q : f32[1, 2, 4, 8]\ninput %k : f32[1, 2, 4, 8]\n"
			   "input %v : f32[1, 2, 4, 8]\n%o, %lse = RingAttention(%q, %k, %v) "
			   "{group=\"cp\", ranks=2, causal=1}\noutput %o\n}\n";
	for (int nccl = 0; nccl < 2; nccl++) {
		int64_t rows = nccl ? 3 : 4;
		f8_diag diag = {0};
		CHECK(f8_text_parse(text, strlen(text), "refusals", &graph, &diag) == F8_OK);
		if (!graph)
			return;
		f8_tensor_view *views = calloc(graph->n_values, sizeof *views);
		for (uint32_t v = 0; v < graph->n_values; v++)
			views[v] = (f8_tensor_view){.dtype = F8_DTYPE_F32, .rank = 4,
						    .dims = {1, 2, rows, 8}, .n_bytes = 64 * rows};
		f8_cuda_attention attention = {.graph = graph, .views = views};
		static f8_cuda_collectives communicator;
		f8_cuda_ring_attention *rings = NULL;
		CHECK(f8_cuda_ring_attention_create(graph, &attention, nccl ? &communicator : NULL,
						    NULL, &rings, &diag) == F8_OK);
		CUdeviceptr in[3] = {0}, out[2] = {0};
		diag = (f8_diag){0};
		CHECK(f8_cuda_ring_attention_run(rings, 0, CP_AXES, views, in, out, &diag) ==
		      F8_ERR_UNSUPPORTED);
		CHECK(strstr(diag.message, "a ring of 2 ranks needs more than one rank"));
		f8_cuda_ring_attention_destroy(rings);
		CHECK(live_blocks == 0 && live_layouts == 0 && live_handles == 0);
		free(views);
		f8_graph_destroy(graph);
		graph = NULL;
	}
}

int main(int argc, char **argv) {
	unsigned seed = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 20261207u;
	printf("seed %u (ring_attention_mock SEED repeats a run)\n", seed);
	const int64_t chunks[] = {1, 3, 4};
	for (int causal = 0; causal < 2; causal++) {
		for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++)
			for (uint32_t ranks = 1; ranks <= MAX_RANKS; ranks++)
				for (int nccl = ranks > 1; nccl < 2; nccl++)
					run_case(ranks, 2 * chunks[c], causal, nccl, DIM, seed++);
		for (int nccl = 0; nccl < 2; nccl++) { // one rank's odd rows: never over NCCL
			run_case(1, 7, causal, nccl, DIM, seed++);
			run_case(1, 1, causal, nccl, DIM, seed++); // a first call of no rows
		}
		run_case(3, 6, causal, true, DIM / 2, seed++); // V narrower than Q and K
	}
	refusals();
	return test_finish();
}
