/*
 * Attention and AttentionGrad through cuDNN's composite operation graphs
 * (runtime/cuda/attention.h), built with runtime/cuda/cudnn_graph.h node by node as
 * cudnn-frontend's CompositeSDPANode and CompositeSDPABackwardNode expand them
 * (../shared/GPU-FACTS.md 2.3): the unified SDPA descriptors cannot express causal masking
 * before cuDNN 9.21, and f8c runs on 9.14.
 *
 * Layouts: the executor's views are row-major, so Attention's q, k, v, o and their gradients
 * are BHSD (batch, heads, seq, head_dim) with unit stride in head_dim; lse is (batch, heads,
 * seq_q) f32, which is cuDNN's Stats (b, h, s_q, 1) with strides (h s_q, s_q, 1, 1). K and V
 * enter as their transposes by swapping the last two dims and strides, as the frontend maps
 * them. The graphs take any strides with a unit last one: AttentionPacked's q, k and v are
 * strided views of its one qkv (b, s, (h + 2 h_kv) d) (TransformerEngine's bs3hd; each at its
 * heads' byte offset, strides (s W, d, W, 1) over (b, h, s, d) for W = (h + 2 h_kv) d), its o
 * and dO are (b, s, h d) (bshd: strides (s h d, d, h d, 1)), and its backward writes dQ, dK and
 * dV in place into the one dqkv, as qkv lies. Only the strides and offsets written here differ.
 *
 * The IR's causal rule is bottom-right (query i attends keys j <= i + s_kv - s_q,
 * ir/infer_fused.c); for s_q == s_kv it is cuDNN's top-left causal mask, otherwise the
 * frontend's bottom-right form (the row index shifted by s_kv - s_q). A query row that attends
 * no key (causal with s_q > s_kv) gives 0 and lse -inf in the reference; cuDNN has no such
 * rows, so that shape is refused.
 *
 * Two nodes with the same shape, dtype and attributes share one plan and its workspace: the
 * nodes run one at a time on the one stream.
 */
#include "runtime/cuda/attention.h" // f8_cuda_attention_*

#include <math.h>   // sqrt, INFINITY
#include <stdarg.h> // va_list
#include <stdio.h>  // snprintf, vsnprintf
#include <string.h> // memcmp, memset, strlen, strncmp

#include "ir/alloc.h"                 // f8_calloc, f8_malloc, f8_free
#include "ir/dtype.h"                 // f8_dtype, f8_dtype_name, f8_dtype_get_info
#include "ir/ops.h"                   // f8_node_attr_int, f8_node_attr_float
#include "ir/shape.h"                 // f8_dim_evaluate
#include "runtime/cuda/cudnn_graph.h" // f8_cudnn_graph, f8_cudnn_tensor
#include "runtime/cuda/driver.h"      // f8_cuda_alloc, f8_cuda_free, f8_cuda_copy_to_device
#include "runtime/cuda/libraries.h"   // f8_cuda_api, f8_cuda_load
#include "runtime/distributed.h"      // f8_dist_group_rank
#include "runtime/placement.h"        // f8_rt_collective_axes, f8_rt_ring_calls

/* What a plan is made for; two nodes with equal keys share a plan. Zeroed before it is filled,
 * so that memcmp compares keys. */
typedef struct attention_key {
	bool backward;        // AttentionGrad
	bool packed;          // AttentionPacked(Grad): q, k, v in one qkv, o (b, s, h d)
	bool stats;           // the lse is a node output (Attention) or input (AttentionGrad), not
			      // only workspace
	f8_dtype dtype;       // q, k, v, o (and dout, dq, dk, dv)
	int64_t batch, heads, kv_heads, seq_q, seq_kv, head_dim, value_dim;
	double scale;         // the scores' factor
	bool causal;
	bool mask;            // an additive mask of q's dtype
	int64_t mask_dims[4]; // its dims, padded on the left with 1s to (batch|1, heads|1, s_q, s_kv)
	// The rows of the tensors the operands are views of (not packed): q, o and their
	// gradients lie in tensors of q_pitch rows, k and v in ones of kv_pitch; s_q and s_kv of
	// them are attended. Attention's are its s_q and s_kv; a ring's call takes some of its
	// query rows and a prefix of the gathered keys (runtime/cuda/ring_attention.h). The lse is
	// always packed, (b, h, s_q): cuDNN's backward kernels before 9.26 ignore the strides of
	// the softmax statistics on some architectures (cudnn-frontend, which refuses others).
	int64_t q_pitch, kv_pitch;
} attention_key;

/* The tensors' uids in the graphs; virtual tensors count from F8_CUDNN_FIRST_VIRTUAL. */
enum {
	UID_Q = 1,
	UID_K,               // as K^T: (b, h_kv, d, s_kv)
	UID_V,               // forward as V, backward as V^T
	UID_O,
	UID_STATS,           // lse
	UID_DO,
	UID_DQ,
	UID_DK,
	UID_DV,
	UID_BIAS,            // the additive mask
	UID_SCALE,           // by-value scalars
	UID_NEGATIVE_INFINITY,
	UID_ONE,
	UID_SEQ_Q_VALUE,
	UID_SEQ_KV_VALUE,
	UID_SOFTMAX_SUM,     // workspace tensors of the backward
	UID_DQ_ACCUM,
	UID_SEQ_LEN_Q,
	UID_SEQ_LEN_KV,
};

/* f8c's tensors in a workspace start at multiples of this, the engine's after them. */
enum { WORKSPACE_ALIGNMENT = 256 };

/* The cuDNN versions up to which the backward needs a padding mask when s_kv % 128 != 0
 * (cudnn-frontend's CompositeSDPABackwardNode::pre_validate_node_derived). */
enum { PADDING_WORKAROUND_LAST_VERSION = 91500 };

typedef struct attention_plan {
	attention_key key;
	f8_cudnn_graph graph;
	char node[F8_DIAG_NODE_MAX + 16]; // the node being planned or run, for messages
	char shape[512];
	// The by-value scalars, bound by address: they live as long as the plan.
	float scale, negative_infinity, one;
	int32_t seq_q, seq_kv;
	bool direct_dq;          // backward: dQ from its matmul (deterministic, dP workspace),
				 // else through an f32 dQ_accum in the workspace
	bool padding_workaround; // backward: the s_kv % 128 padding mask of cuDNN <= 9.15
	uint64_t seq_len_offset; // the workaround's seq_len_q tensor (seq_len_kv follows)
	uint64_t f8c_bytes;      // f8c's tensors in the workspace, before the engine's
	CUdeviceptr workspace;   // f8c_bytes + the engine's workspace; 0 when both are 0
	uint64_t workspace_bytes;
} attention_plan;

/* The cuDNN calls of a RingAttention(Grad) node: their plans, first query rows and keys. */
typedef struct ring_calls {
	uint32_t n;
	uint32_t plan[2];
	int64_t q_from[2], keys[2];
} ring_calls;

struct f8_cuda_attention {
	const f8_graph *graph;
	cudnnHandle_t handle;
	bool deterministic;
	attention_plan **plans; // (n_plans)
	uint32_t n_plans;
	uint32_t *plan_of_node; // (graph->n_nodes) the plan of each node, F8_NONE for none
	ring_calls *rings;      // (graph->n_nodes) a ring node's calls; n 0 for other nodes
	uint64_t device_bytes;
};

static uint64_t aligned(uint64_t bytes) {
	return (bytes + WORKSPACE_ALIGNMENT - 1) / WORKSPACE_ALIGNMENT * WORKSPACE_ALIGNMENT;
}

static bool is_ring(f8_op op) {
	return op == F8_OP_RING_ATTENTION || op == F8_OP_RING_ATTENTION_GRAD;
}

static bool is_attention(f8_op op) {
	return op == F8_OP_ATTENTION || op == F8_OP_ATTENTION_GRAD || op == F8_OP_ATTENTION_PACKED ||
	       op == F8_OP_ATTENTION_PACKED_GRAD || is_ring(op);
}

/* Fails node `id` as unsupported. Messages of this file name the node in their text, as the
 * cuDNN layer's do (runtime/cuda/cudnn_graph.h), and leave diag->node empty so that it is not
 * printed twice; only the driver's failures, which name no node, get diag->node. */
static f8_status refuse(const f8_graph *graph, f8_node_id id, f8_diag *diag, const char *format,
			...) __attribute__((format(printf, 4, 5)));
static f8_status refuse(const f8_graph *graph, f8_node_id id, f8_diag *diag, const char *format,
			...) {
	char node[F8_DIAG_NODE_MAX], what[F8_DIAG_MESSAGE_MAX / 2];
	va_list args;
	va_start(args, format);
	vsnprintf(what, sizeof what, format, args);
	va_end(args);
	f8_graph_describe_node(graph, id, node, sizeof node);
	return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "%s: cuDNN attention: %s", node, what);
}

static const f8_type *input_type(const f8_graph *graph, const f8_node *node, uint32_t i) {
	if (i >= node->n_inputs || node->inputs[i] == F8_NONE)
		return NULL;
	return &graph->values[node->inputs[i]].type;
}

/* The concrete dims of `type` (rank 4 or less, padded on the left with 1s to 4). */
static bool dims_of(const f8_type *type, const int64_t *symbol_values, int64_t *dims) {
	int rank = type->shape.rank;
	for (int d = 0; d < 4; d++)
		dims[d] = 1;
	if (rank > 4)
		return false;
	for (int d = 0; d < rank; d++)
		if (!f8_dim_evaluate(type->shape.dims[d], symbol_values, &dims[4 - rank + d]))
			return false;
	return true;
}

/* The node's inputs and outputs in the graphs: where each operand is bound. */
typedef struct operand_slots {
	uint32_t q, k, v, o, d_o, stats, mask;   // inputs
	uint32_t dq, dk, dv;                     // outputs of the backward (o, stats: forward's)
} operand_slots;

static operand_slots slots_of(const attention_key *key) {
	if (key->packed)
		return key->backward ? (operand_slots){.d_o = 0, .q = 1, .k = 1, .v = 1, .o = 2,
						       .stats = 3, .mask = 4}
				     : (operand_slots){.q = 0, .k = 0, .v = 0, .mask = 1, .o = 0,
						       .stats = 1};
	return key->backward ? (operand_slots){.d_o = 0, .q = 1, .k = 2, .v = 3, .o = 4, .stats = 5,
					       .mask = 6, .dq = 0, .dk = 1, .dv = 2}
			     : (operand_slots){.q = 0, .k = 1, .v = 2, .mask = 3, .o = 0, .stats = 1};
}

/* The sizes of an Attention(Grad) node from its q, k and v (BHSD) into the key. */
static f8_status separate_sizes(const f8_graph *graph, const int64_t *symbol_values,
				f8_node_id id, attention_key *key, f8_diag *diag) {
	const f8_node *node = &graph->nodes[id];
	uint32_t first = key->backward ? 1 : 0; // q's input
	const f8_type *q = input_type(graph, node, first), *k = input_type(graph, node, first + 1);
	const f8_type *v = input_type(graph, node, first + 2);
	int64_t qd[4], kd[4], vd[4];
	if (!q || !k || !v || q->shape.rank != 4 || k->shape.rank != 4 || v->shape.rank != 4)
		return refuse(graph, id, diag, "q, k and v must be rank-4 tensors");
	if (!dims_of(q, symbol_values, qd) || !dims_of(k, symbol_values, kd) ||
	    !dims_of(v, symbol_values, vd))
		return refuse(graph, id, diag, "a size of q, k or v has no value");
	if (k->dtype != q->dtype || v->dtype != q->dtype)
		return refuse(graph, id, diag, "q, k and v must have one dtype");
	key->dtype = q->dtype;
	key->batch = qd[0];
	key->heads = qd[1];
	key->kv_heads = kd[1];
	key->seq_q = qd[2];
	key->seq_kv = kd[2];
	key->head_dim = qd[3];
	key->value_dim = vd[3];
	key->q_pitch = key->seq_q;
	key->kv_pitch = key->seq_kv;
	return F8_OK;
}

/* The sizes of an AttentionPacked(Grad) node from its qkv (b, s, (h + 2 h_kv) d) and its heads
 * attributes into the key. */
static f8_status packed_sizes(const f8_graph *graph, const int64_t *symbol_values,
			      f8_node_id id, attention_key *key, f8_diag *diag) {
	const f8_node *node = &graph->nodes[id];
	const f8_type *qkv = input_type(graph, node, key->backward ? 1 : 0);
	int64_t dims[4];
	if (!qkv || qkv->shape.rank != 3)
		return refuse(graph, id, diag, "qkv must be a rank-3 tensor");
	if (!dims_of(qkv, symbol_values, dims))
		return refuse(graph, id, diag, "a size of qkv has no value");
	int64_t heads = f8_node_attr_int(node, "heads", 0);
	int64_t kv_heads = f8_node_attr_int(node, "kv_heads", heads);
	if (heads < 1 || kv_heads < 1 || dims[3] % (heads + 2 * kv_heads) != 0)
		return refuse(graph, id, diag, "qkv's width %lld is not heads %lld + 2 kv_heads %lld "
					       "heads of one head dim", (long long)dims[3],
			      (long long)heads, (long long)kv_heads);
	key->dtype = qkv->dtype;
	key->batch = dims[1];
	key->heads = heads;
	key->kv_heads = kv_heads;
	key->seq_q = key->seq_kv = key->q_pitch = key->kv_pitch = dims[2];
	key->head_dim = key->value_dim = dims[3] / (heads + 2 * kv_heads);
	return F8_OK;
}

/* The key of node `id`, checked against what the composite graphs and cuDNN 9.14's engines
 * take on sm_90 (GPU-FACTS.md 2.2); F8_ERR_UNSUPPORTED naming the node for the rest. */
static f8_status key_of(const f8_graph *graph, const int64_t *symbol_values, f8_node_id id,
			attention_key *key, f8_diag *diag) {
	const f8_node *node = &graph->nodes[id];
	memset(key, 0, sizeof *key);
	// Field by field after the memset, so that the padding stays zero for memcmp.
	key->backward = node->op == F8_OP_ATTENTION_GRAD || node->op == F8_OP_ATTENTION_PACKED_GRAD ||
			node->op == F8_OP_RING_ATTENTION_GRAD;
	key->packed = node->op == F8_OP_ATTENTION_PACKED || node->op == F8_OP_ATTENTION_PACKED_GRAD;
	f8_status status = key->packed ? packed_sizes(graph, symbol_values, id, key, diag)
				       : separate_sizes(graph, symbol_values, id, key, diag);
	if (status)
		return status;
	operand_slots slots = slots_of(key);
	const f8_type *mask = input_type(graph, node, slots.mask);
	key->stats = key->backward || node->n_outputs > 1;
	key->causal = f8_node_attr_int(node, "causal", 0) != 0;
	key->scale = f8_node_attr_float(node, "scale", 1.0 / sqrt((double)key->head_dim));
	if (key->dtype != F8_DTYPE_BF16 && key->dtype != F8_DTYPE_F16 && key->dtype != F8_DTYPE_F32)
		return refuse(graph, id, diag, "q, k and v are %s; cuDNN's attention takes bf16 or "
					       "f16 (and f32 where it has an engine)",
			      f8_dtype_name(key->dtype));
	if (key->kv_heads <= 0 || key->heads % key->kv_heads != 0)
		return refuse(graph, id, diag, "k's heads must divide q's");
	if (key->head_dim % 8 || key->value_dim % 8 || key->head_dim > 256 || key->value_dim > 256)
		return refuse(graph, id, diag, "head dims %lld and %lld: cuDNN's engines on sm_90 "
					       "need multiples of 8, at most 256",
			      (long long)key->head_dim, (long long)key->value_dim);
	if (key->causal && key->seq_q > key->seq_kv)
		return refuse(graph, id, diag, "causal with s_q %lld > s_kv %lld: the first query "
					       "rows attend no key, which cuDNN's bottom-right causal "
					       "mask does not allow",
			      (long long)key->seq_q, (long long)key->seq_kv);
	if (mask) {
		if (mask->dtype != key->dtype)
			return refuse(graph, id, diag, "a %s mask: cuDNN takes an additive mask of "
						       "q's dtype (a bool mask is a Where to 0 or -inf "
						       "before it)", f8_dtype_name(mask->dtype));
		if (!dims_of(mask, symbol_values, key->mask_dims))
			return refuse(graph, id, diag, "the mask has a size with no value");
		const int64_t *m = key->mask_dims;
		if ((m[0] != 1 && m[0] != key->batch) || (m[1] != 1 && m[1] != key->heads) ||
		    m[2] != key->seq_q || m[3] != key->seq_kv)
			return refuse(graph, id, diag, "the mask must be (batch or 1, heads or 1, "
						       "s_q, s_kv)");
		key->mask = true;
	}
	if (key->backward) {
		const f8_type *dout = input_type(graph, node, slots.d_o);
		const f8_type *lse = input_type(graph, node, slots.stats);
		const f8_type *out = input_type(graph, node, slots.o);
		if (!dout || dout->dtype != key->dtype || !out || out->dtype != key->dtype)
			return refuse(graph, id, diag, "dout and out must have q's dtype");
		if (!lse || lse->dtype != F8_DTYPE_F32)
			return refuse(graph, id, diag, "lse must be f32, as the forward writes it");
	}
	return F8_OK;
}

/* Where an operand lies in its node tensor: strides over (b, h, s, d) in elements, and the
 * byte offset of its first head. */
typedef struct operand_layout {
	int64_t strides[4];
	uint64_t offset;
} operand_layout;

/* What building one graph needs at hand. */
typedef struct build {
	f8_cudnn_graph *g;
	attention_plan *plan;
	const attention_key *k;
	cudnnDataType_t io;
	operand_slots slots;
	operand_layout q, k_layout, v, o; // dQ, dK, dV and dO lie as Q, K, V and O
	int64_t score_dims[4], score_strides[4]; // (b, h_q, s_q, s_kv), row-major
	int64_t row_dims[4], row_strides[4];     // (b, h_q, s_q, 1): the per-row statistics
} build;

static void row_major(const int64_t *dims, int64_t *strides) {
	int64_t stride = 1;
	for (int d = 3; d >= 0; d--) {
		strides[d] = stride;
		stride *= dims[d];
	}
}

/* A virtual tensor of the scores' shape, of `type`. */
static f8_cudnn_tensor scores(build *b, cudnnDataType_t type) {
	return f8_cudnn_virtual(b->g, type, b->score_dims, b->score_strides);
}

/* A virtual FLOAT per-row statistic. */
static f8_cudnn_tensor row_statistic(build *b) {
	return f8_cudnn_virtual(b->g, CUDNN_DATA_FLOAT, b->row_dims, b->row_strides);
}

/* The layouts of the key's operands into b: BHSD tensors of their own, or the packed ones. */
static void layouts(build *b) {
	const attention_key *k = b->k;
	if (!k->packed) {
		const int64_t q[4] = {k->batch, k->heads, k->q_pitch, k->head_dim};
		const int64_t kd[4] = {k->batch, k->kv_heads, k->kv_pitch, k->head_dim};
		const int64_t v[4] = {k->batch, k->kv_heads, k->kv_pitch, k->value_dim};
		const int64_t o[4] = {k->batch, k->heads, k->q_pitch, k->value_dim};
		row_major(q, b->q.strides);
		row_major(kd, b->k_layout.strides);
		row_major(v, b->v.strides);
		row_major(o, b->o.strides);
		return;
	}
	// qkv (b, s, (h + 2 h_kv) d): at each token q's heads, then k's, then v's.
	int64_t d = k->head_dim, width = (k->heads + 2 * k->kv_heads) * d;
	uint64_t element = f8_dtype_get_info(k->dtype)->bytes;
	const operand_layout packed = {.strides = {k->seq_q * width, d, width, 1}};
	b->q = b->k_layout = b->v = packed;
	b->k_layout.offset = (uint64_t)(k->heads * d) * element;
	b->v.offset = (uint64_t)((k->heads + k->kv_heads) * d) * element;
	b->o = (operand_layout){.strides = {k->seq_q * k->heads * d, d, k->heads * d, 1}};
}

/* A non-virtual (b, heads, seq, dim) tensor bound to a node input or output, laid out as
 * `layout` says. */
static f8_cudnn_tensor operand(build *b, int64_t uid, cudnnDataType_t type, int64_t heads,
			       int64_t seq, int64_t dim, const operand_layout *layout,
			       f8_cudnn_binding_kind kind, uint32_t index) {
	const int64_t dims[4] = {b->k->batch, heads, seq, dim};
	f8_cudnn_bind(b->g, uid, kind, index, layout->offset);
	return f8_cudnn_tensor_make(b->g, uid, type, dims, layout->strides, false);
}

/* An input seen transposed in its last two dims (K^T, V^T), as the frontend maps them. */
static f8_cudnn_tensor transposed_operand(build *b, int64_t uid, int64_t heads, int64_t seq,
					  int64_t dim, const operand_layout *layout,
					  uint32_t index) {
	const int64_t dims[4] = {b->k->batch, heads, dim, seq};
	const int64_t *l = layout->strides;
	const int64_t strides[4] = {l[0], l[1], l[3], l[2]};
	f8_cudnn_bind(b->g, uid, F8_CUDNN_BIND_INPUT, index, layout->offset);
	return f8_cudnn_tensor_make(b->g, uid, b->io, dims, strides, false);
}

/* The stats (lse): FLOAT (b, h_q, s_q, 1), a node's input or output `index`, or at `offset` of
 * the workspace. */
static f8_cudnn_tensor stats_operand(build *b, f8_cudnn_binding_kind kind, uint32_t index,
				     uint64_t offset) {
	f8_cudnn_bind(b->g, UID_STATS, kind, index, offset);
	return f8_cudnn_tensor_make(b->g, UID_STATS, CUDNN_DATA_FLOAT, b->row_dims, b->row_strides,
				    false);
}

/* The additive mask, input `index`: broadcast over the dims where it has 1. */
static f8_cudnn_tensor bias_operand(build *b, uint32_t index) {
	int64_t strides[4];
	row_major(b->k->mask_dims, strides);
	f8_cudnn_bind(b->g, UID_BIAS, F8_CUDNN_BIND_INPUT, index, 0);
	return f8_cudnn_tensor_make(b->g, UID_BIAS, b->io, b->k->mask_dims, strides, false);
}

static f8_cudnn_tensor pointwise2(build *b, cudnnPointwiseMode_t mode, f8_cudnn_tensor x,
				  f8_cudnn_tensor y_input, f8_cudnn_tensor out) {
	return f8_cudnn_pointwise(b->g, mode, CUDNN_DATA_FLOAT, -1, x, y_input, NULL, out);
}

/*
 * The causal mask on scores s (composite DiagonalBandMask, node/diagonal_band_mask.h): row and
 * column indices, for s_q != s_kv the row shifted by s_kv - s_q (the frontend's bottom-right
 * alignment, from the seq_len tensors where the graph has them, else by-value), kept where
 * row >= column, -inf elsewhere.
 */
static f8_cudnn_tensor causal_mask(build *b, f8_cudnn_tensor s, f8_cudnn_tensor negative_infinity,
				   f8_cudnn_tensor seq_len_q, f8_cudnn_tensor seq_len_kv) {
	f8_cudnn_graph *g = b->g;
	f8_cudnn_tensor row = f8_cudnn_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, 2,
						 s, NULL, NULL, scores(b, CUDNN_DATA_INT32));
	f8_cudnn_tensor column = f8_cudnn_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT,
						    3, s, NULL, NULL, scores(b, CUDNN_DATA_INT32));
	if (b->k->seq_q != b->k->seq_kv) {
		if (!seq_len_kv)
			seq_len_kv = f8_cudnn_scalar(g, UID_SEQ_KV_VALUE, CUDNN_DATA_INT32,
						     &b->plan->seq_kv);
		if (!seq_len_q)
			seq_len_q = f8_cudnn_scalar(g, UID_SEQ_Q_VALUE, CUDNN_DATA_INT32,
						    &b->plan->seq_q);
		row = f8_cudnn_pointwise(g, CUDNN_POINTWISE_ADD, CUDNN_DATA_INT32, 3, row, seq_len_kv,
					 NULL, scores(b, CUDNN_DATA_INT32));
		row = f8_cudnn_pointwise(g, CUDNN_POINTWISE_SUB, CUDNN_DATA_INT32, 3, row, seq_len_q,
					 NULL, scores(b, CUDNN_DATA_INT32));
	}
	f8_cudnn_tensor keep = f8_cudnn_pointwise(g, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, -1,
						  row, column, NULL, scores(b, CUDNN_DATA_BOOLEAN));
	return f8_cudnn_pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, -1, s,
				  negative_infinity, keep, scores(b, CUDNN_DATA_FLOAT));
}

/* The padding mask of the backward's s_kv % 128 workaround (attn_score_modifiers.h
 * padding_mask): -inf outside row < seq_len_q and column < seq_len_kv. */
static f8_cudnn_tensor padding_mask(build *b, f8_cudnn_tensor s,
				    f8_cudnn_tensor negative_infinity, f8_cudnn_tensor seq_len_q,
				    f8_cudnn_tensor seq_len_kv) {
	f8_cudnn_graph *g = b->g;
	f8_cudnn_tensor row = f8_cudnn_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, 2,
						 s, NULL, NULL, scores(b, CUDNN_DATA_INT32));
	f8_cudnn_tensor column = f8_cudnn_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32,
						    3, s, NULL, NULL, scores(b, CUDNN_DATA_INT32));
	f8_cudnn_tensor row_in = f8_cudnn_pointwise(g, CUDNN_POINTWISE_CMP_LT, CUDNN_DATA_BOOLEAN,
						    -1, row, seq_len_q, NULL,
						    scores(b, CUDNN_DATA_BOOLEAN));
	f8_cudnn_tensor column_in = f8_cudnn_pointwise(g, CUDNN_POINTWISE_CMP_LT,
						       CUDNN_DATA_BOOLEAN, -1, column, seq_len_kv,
						       NULL, scores(b, CUDNN_DATA_BOOLEAN));
	f8_cudnn_tensor keep = f8_cudnn_pointwise(g, CUDNN_POINTWISE_LOGICAL_AND, CUDNN_DATA_BOOLEAN,
						  -1, row_in, column_in, NULL,
						  scores(b, CUDNN_DATA_BOOLEAN));
	return f8_cudnn_pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, -1, s,
				  negative_infinity, keep, scores(b, CUDNN_DATA_FLOAT));
}

/*
 * Attention: inputs q, k, v[, mask], outputs o[, lse].
 *   S = (Q K^T) scale [+ mask] [causal mask]
 *   M = max_j S; E = exp(S - M); Z = sum_j E; lse = M + log Z; P = E / Z (in q's dtype)
 *   O = P V
 * lse goes to the workspace when the node has no lse output.
 */
static void forward_graph(build *b) {
	const attention_key *k = b->k;
	f8_cudnn_graph *g = b->g;
	f8_cudnn_tensor q = operand(b, UID_Q, b->io, k->heads, k->seq_q, k->head_dim, &b->q,
				    F8_CUDNN_BIND_INPUT, b->slots.q);
	f8_cudnn_tensor kt = transposed_operand(b, UID_K, k->kv_heads, k->seq_kv, k->head_dim,
						&b->k_layout, b->slots.k);
	f8_cudnn_tensor v = operand(b, UID_V, b->io, k->kv_heads, k->seq_kv, k->value_dim, &b->v,
				    F8_CUDNN_BIND_INPUT, b->slots.v);
	f8_cudnn_tensor o = operand(b, UID_O, b->io, k->heads, k->seq_q, k->value_dim, &b->o,
				    F8_CUDNN_BIND_OUTPUT, 0);
	f8_cudnn_tensor scale = f8_cudnn_scalar(g, UID_SCALE, CUDNN_DATA_FLOAT, &b->plan->scale);

	f8_cudnn_tensor s = scores(b, CUDNN_DATA_FLOAT);
	f8_cudnn_matmul(g, q, kt, s, NULL, NULL, NULL);
	s = pointwise2(b, CUDNN_POINTWISE_MUL, s, scale, scores(b, CUDNN_DATA_FLOAT));
	if (k->mask)
		s = pointwise2(b, CUDNN_POINTWISE_ADD, s, bias_operand(b, b->slots.mask),
			       scores(b, CUDNN_DATA_FLOAT));
	if (k->causal) {
		f8_cudnn_tensor negative_infinity = f8_cudnn_scalar(
			g, UID_NEGATIVE_INFINITY, CUDNN_DATA_FLOAT, &b->plan->negative_infinity);
		s = causal_mask(b, s, negative_infinity, NULL, NULL);
	}
	// Softmax (CompositeSoftmaxNode, node/softmax.h).
	f8_cudnn_tensor max = row_statistic(b);
	f8_cudnn_reduction(g, CUDNN_REDUCE_TENSOR_MAX, s, max);
	f8_cudnn_tensor shifted = pointwise2(b, CUDNN_POINTWISE_SUB, s, max,
					     scores(b, CUDNN_DATA_FLOAT));
	f8_cudnn_tensor exps = pointwise2(b, CUDNN_POINTWISE_EXP, shifted, NULL,
					  scores(b, CUDNN_DATA_FLOAT));
	f8_cudnn_tensor sum = row_statistic(b);
	f8_cudnn_reduction(g, CUDNN_REDUCE_TENSOR_ADD, exps, sum);
	// The stats always: cuDNN 9.14 has no engine for the graph without them (its matcher
	// takes the softmax without Stats for a misconfigured dropout), so without an lse output
	// they go to the workspace.
	f8_cudnn_tensor log_sum = pointwise2(b, CUDNN_POINTWISE_LOG, sum, NULL, row_statistic(b));
	if (!k->stats)
		b->plan->f8c_bytes = aligned((uint64_t)(k->batch * k->heads * k->seq_q) * 4);
	pointwise2(b, CUDNN_POINTWISE_ADD, max, log_sum,
		   k->stats ? stats_operand(b, F8_CUDNN_BIND_OUTPUT, b->slots.stats, 0)
			    : stats_operand(b, F8_CUDNN_BIND_WORKSPACE, 0, 0));
	// P in the I/O type: "Requirement by cudnn backend to take in bmm2 aType as i/o type".
	f8_cudnn_tensor p = pointwise2(b, CUDNN_POINTWISE_DIV, exps, sum, scores(b, b->io));
	f8_cudnn_matmul(g, p, v, o, NULL, NULL, NULL);
}

/* The transposed scores' view of P or dS (b, h_q, s_kv, s_q), in the I/O type. */
static f8_cudnn_tensor transposed_scores(build *b) {
	const attention_key *k = b->k;
	const int64_t dims[4] = {k->batch, k->heads, k->seq_kv, k->seq_q};
	const int64_t strides[4] = {k->heads * k->seq_q * k->seq_kv, k->seq_q * k->seq_kv, 1,
				    k->seq_kv};
	return f8_cudnn_virtual(b->g, b->io, dims, strides);
}

/* out = a b for dK or dV: directly with as many heads as q, else at q's heads (virtual, in the
 * I/O type) and summed over each group of query heads into the kv heads. */
static void grouped_gradient(build *b, f8_cudnn_tensor a, f8_cudnn_tensor operand_b,
			     f8_cudnn_tensor out, int64_t dim, f8_cudnn_tensor m_override,
			     f8_cudnn_tensor k_override) {
	const attention_key *k = b->k;
	if (k->heads == k->kv_heads) {
		f8_cudnn_matmul(b->g, a, operand_b, out, m_override, NULL, k_override);
		return;
	}
	const int64_t dims[4] = {k->batch, k->heads, k->seq_kv, dim};
	int64_t strides[4];
	row_major(dims, strides);
	f8_cudnn_tensor full = f8_cudnn_virtual(b->g, b->io, dims, strides);
	f8_cudnn_matmul(b->g, a, operand_b, full, m_override, NULL, k_override);
	f8_cudnn_reduction(b->g, CUDNN_REDUCE_TENSOR_ADD, full, out);
}

/*
 * AttentionGrad: inputs dout, q, k, v, out, lse[, mask], outputs dq, dk, dv.
 *   D = rowsum(dO * O)                          (softmax_sum, f32 in the workspace)
 *   P = exp((Q K^T) scale [+ mask] - lse)       [padding mask] [causal mask]
 *   dV = P^T dO;  dS = P (dO V^T - D) scale;  dK = dS^T Q;  dQ = dS K
 * dK and dV summed over the query heads of a group for GQA; dQ through an f32 dQ_accum in the
 * workspace unless `direct_dq` (the deterministic dP-workspace path).
 */
static void backward_graph(build *b) {
	const attention_key *k = b->k;
	attention_plan *plan = b->plan;
	f8_cudnn_graph *g = b->g;
	const operand_slots *slot = &b->slots;
	f8_cudnn_tensor d_o = operand(b, UID_DO, b->io, k->heads, k->seq_q, k->value_dim, &b->o,
				      F8_CUDNN_BIND_INPUT, slot->d_o);
	f8_cudnn_tensor q = operand(b, UID_Q, b->io, k->heads, k->seq_q, k->head_dim, &b->q,
				    F8_CUDNN_BIND_INPUT, slot->q);
	f8_cudnn_tensor kt = transposed_operand(b, UID_K, k->kv_heads, k->seq_kv, k->head_dim,
						&b->k_layout, slot->k);
	f8_cudnn_tensor vt = transposed_operand(b, UID_V, k->kv_heads, k->seq_kv, k->value_dim,
						&b->v, slot->v);
	f8_cudnn_tensor o = operand(b, UID_O, b->io, k->heads, k->seq_q, k->value_dim, &b->o,
				    F8_CUDNN_BIND_INPUT, slot->o);
	f8_cudnn_tensor stats = stats_operand(b, F8_CUDNN_BIND_INPUT, slot->stats, 0);
	f8_cudnn_tensor dq = operand(b, UID_DQ, b->io, k->heads, k->seq_q, k->head_dim, &b->q,
				     F8_CUDNN_BIND_OUTPUT, slot->dq);
	f8_cudnn_tensor dk = operand(b, UID_DK, b->io, k->kv_heads, k->seq_kv, k->head_dim,
				     &b->k_layout, F8_CUDNN_BIND_OUTPUT, slot->dk);
	f8_cudnn_tensor dv = operand(b, UID_DV, b->io, k->kv_heads, k->seq_kv, k->value_dim, &b->v,
				     F8_CUDNN_BIND_OUTPUT, slot->dv);
	f8_cudnn_tensor scale = f8_cudnn_scalar(g, UID_SCALE, CUDNN_DATA_FLOAT, &plan->scale);
	f8_cudnn_tensor one = f8_cudnn_scalar(g, UID_ONE, CUDNN_DATA_FLOAT, &plan->one);
	f8_cudnn_tensor negative_infinity = NULL;
	if (k->causal || plan->padding_workaround)
		negative_infinity = f8_cudnn_scalar(g, UID_NEGATIVE_INFINITY, CUDNN_DATA_FLOAT,
						    &plan->negative_infinity);

	// f8c's workspace tensors, in the frontend's order: dQ_accum, softmax_sum, seq lens.
	uint64_t offset = 0, dq_accum_offset = 0;
	if (!plan->direct_dq) {
		dq_accum_offset = offset;
		offset += aligned((uint64_t)(k->batch * k->heads * k->seq_q * k->head_dim) * 4);
	}
	uint64_t softmax_sum_offset = offset;
	offset += aligned((uint64_t)(k->batch * k->heads * k->seq_q) * 4);
	f8_cudnn_tensor seq_len_q = NULL, seq_len_kv = NULL;
	if (plan->padding_workaround) {
		const int64_t dims[4] = {k->batch, 1, 1, 1}, strides[4] = {1, 1, 1, 1};
		plan->seq_len_offset = offset;
		f8_cudnn_bind(g, UID_SEQ_LEN_Q, F8_CUDNN_BIND_WORKSPACE, 0, offset);
		seq_len_q = f8_cudnn_tensor_make(g, UID_SEQ_LEN_Q, CUDNN_DATA_INT32, dims, strides,
						 false);
		offset += aligned((uint64_t)k->batch * 4);
		f8_cudnn_bind(g, UID_SEQ_LEN_KV, F8_CUDNN_BIND_WORKSPACE, 0, offset);
		seq_len_kv = f8_cudnn_tensor_make(g, UID_SEQ_LEN_KV, CUDNN_DATA_INT32, dims, strides,
						  false);
		offset += aligned((uint64_t)k->batch * 4);
	}
	plan->f8c_bytes = offset;

	// softmax_sum = rowsum(dO * O) * 1 (the frontend's virtual product has these strides).
	const int64_t product_dims[4] = {k->batch, k->heads, k->seq_q, k->value_dim};
	const int64_t product_strides[4] = {k->heads * k->seq_q * k->value_dim,
					    k->seq_q * k->value_dim, k->heads * k->value_dim, 1};
	f8_cudnn_tensor product = pointwise2(
		b, CUDNN_POINTWISE_MUL, d_o, o,
		f8_cudnn_virtual(g, CUDNN_DATA_FLOAT, product_dims, product_strides));
	f8_cudnn_tensor row_sum = row_statistic(b);
	f8_cudnn_reduction(g, CUDNN_REDUCE_TENSOR_ADD, product, row_sum);
	f8_cudnn_bind(g, UID_SOFTMAX_SUM, F8_CUDNN_BIND_WORKSPACE, 0, softmax_sum_offset);
	f8_cudnn_tensor softmax_sum = f8_cudnn_tensor_make(g, UID_SOFTMAX_SUM, CUDNN_DATA_FLOAT,
							   b->row_dims, b->row_strides, false);
	pointwise2(b, CUDNN_POINTWISE_MUL, row_sum, one, softmax_sum);

	// P from the stats.
	f8_cudnn_tensor s = scores(b, CUDNN_DATA_FLOAT);
	f8_cudnn_matmul(g, q, kt, s, seq_len_q, seq_len_kv, NULL);
	s = pointwise2(b, CUDNN_POINTWISE_MUL, s, scale, scores(b, CUDNN_DATA_FLOAT));
	if (k->mask)
		s = pointwise2(b, CUDNN_POINTWISE_ADD, s, bias_operand(b, slot->mask),
			       scores(b, CUDNN_DATA_FLOAT));
	s = pointwise2(b, CUDNN_POINTWISE_SUB, s, stats, scores(b, CUDNN_DATA_FLOAT));
	if (plan->padding_workaround)
		s = padding_mask(b, s, negative_infinity, seq_len_q, seq_len_kv);
	if (k->causal)
		s = causal_mask(b, s, negative_infinity, seq_len_q, seq_len_kv);
	f8_cudnn_tensor p = pointwise2(b, CUDNN_POINTWISE_EXP, s, NULL, scores(b, CUDNN_DATA_FLOAT));

	// dV = P^T dO.
	f8_cudnn_tensor pt = transposed_scores(b);
	f8_cudnn_reshape(g, p, pt);
	grouped_gradient(b, pt, d_o, dv, k->value_dim, seq_len_kv, seq_len_q);

	// dS = P (dO V^T - softmax_sum) scale.
	f8_cudnn_tensor dp = scores(b, CUDNN_DATA_FLOAT);
	f8_cudnn_matmul(g, d_o, vt, dp, seq_len_q, seq_len_kv, NULL);
	f8_cudnn_tensor ds = pointwise2(b, CUDNN_POINTWISE_SUB, dp, softmax_sum,
					scores(b, CUDNN_DATA_FLOAT));
	ds = pointwise2(b, CUDNN_POINTWISE_MUL, ds, p, scores(b, CUDNN_DATA_FLOAT));
	ds = pointwise2(b, CUDNN_POINTWISE_MUL, ds, scale, scores(b, CUDNN_DATA_FLOAT));

	// dK = dS^T Q.
	f8_cudnn_tensor dst = transposed_scores(b);
	f8_cudnn_reshape(g, ds, dst);
	grouped_gradient(b, dst, q, dk, k->head_dim, seq_len_kv, seq_len_q);

	// dQ = dS K, K seen again untransposed (a virtual FLOAT, as the frontend leaves it).
	const int64_t k_dims[4] = {k->batch, k->kv_heads, k->seq_kv, k->head_dim};
	int64_t k_strides[4];
	row_major(k_dims, k_strides);
	f8_cudnn_tensor keys = f8_cudnn_virtual(g, CUDNN_DATA_FLOAT, k_dims, k_strides);
	f8_cudnn_reshape(g, kt, keys);
	// Straight into dQ only where it is a tensor of its own: a strided view (packed, or a
	// ring's rows of a longer one) takes the staged path below.
	if (plan->direct_dq && !k->packed && k->q_pitch == k->seq_q) {
		f8_cudnn_matmul(g, ds, keys, dq, seq_len_q, NULL, seq_len_kv);
		return;
	}
	if (plan->direct_dq) {
		// UNTESTED ON A GPU (2026-12-07): deterministic mode wrote wrong, unrepeatable dqkv
		// when the matmul wrote dQ straight into the packed buffer's strided view (a ring's
		// dQ rows are one too). Here the
		// matmul writes each element once into a contiguous virtual tensor, and a pointwise
		// identity puts it in place. Run attention_check's packed deterministic case and
		// gpu_compare.py's gpt-tiny bf16 step before relying on it.
		const int64_t q_dims[4] = {k->batch, k->heads, k->seq_q, k->head_dim};
		int64_t q_strides[4];
		row_major(q_dims, q_strides);
		f8_cudnn_tensor staged = f8_cudnn_virtual(g, CUDNN_DATA_FLOAT, q_dims, q_strides);
		f8_cudnn_matmul(g, ds, keys, staged, seq_len_q, NULL, seq_len_kv);
		f8_cudnn_pointwise(g, CUDNN_POINTWISE_IDENTITY, CUDNN_DATA_FLOAT, -1, staged, NULL,
				   NULL, dq);
		return;
	}
	const int64_t q_dims[4] = {k->batch, k->heads, k->seq_q, k->head_dim};
	int64_t q_strides[4];
	row_major(q_dims, q_strides);
	f8_cudnn_bind(g, UID_DQ_ACCUM, F8_CUDNN_BIND_WORKSPACE, 0, dq_accum_offset);
	f8_cudnn_tensor accumulator = f8_cudnn_tensor_make(g, UID_DQ_ACCUM, CUDNN_DATA_FLOAT, q_dims,
							   q_strides, false);
	f8_cudnn_matmul(g, ds, keys, accumulator, seq_len_q, NULL, seq_len_kv);
	f8_cudnn_pointwise(g, CUDNN_POINTWISE_IDENTITY, CUDNN_DATA_FLOAT, -1, accumulator, NULL, NULL,
			   dq);
}

static cudnnDataType_t cudnn_type(f8_dtype dtype) {
	switch (dtype) {
	case F8_DTYPE_BF16: return CUDNN_DATA_BFLOAT16;
	case F8_DTYPE_F16: return CUDNN_DATA_HALF;
	default: return CUDNN_DATA_FLOAT;
	}
}

static void describe_shape(const attention_key *k, char *out, size_t size) {
	char mask[64] = "", pitch[80] = "";
	if (k->q_pitch != k->seq_q || k->kv_pitch != k->seq_kv)
		snprintf(pitch, sizeof pitch, " (of q rows %lld, kv rows %lld)",
			 (long long)k->q_pitch, (long long)k->kv_pitch);
	if (k->mask)
		snprintf(mask, sizeof mask, " mask (%lld, %lld, %lld, %lld)",
			 (long long)k->mask_dims[0], (long long)k->mask_dims[1],
			 (long long)k->mask_dims[2], (long long)k->mask_dims[3]);
	snprintf(out, size,
		 "%s%s b=%lld h_q=%lld h_kv=%lld s_q=%lld s_kv=%lld%s d=%lld d_v=%lld %s%s scale=%g%s",
		 k->backward ? "backward" : "forward",
		 k->packed ? " packed (qkv bs3hd, o bshd)" : "", (long long)k->batch, (long long)k->heads,
		 (long long)k->kv_heads, (long long)k->seq_q, (long long)k->seq_kv, pitch,
		 (long long)k->head_dim, (long long)k->value_dim, f8_dtype_name(k->dtype),
		 k->causal ? " causal" : "", k->scale, mask);
}

/* When an f32 graph has no engine: the message says so and what to do, keeping cuDNN's. */
static f8_status explain_f32(attention_plan *plan, f8_diag *diag) {
	if (!diag)
		return F8_ERR_UNSUPPORTED;
	char cudnn_text[F8_DIAG_MESSAGE_MAX];
	const char *text = diag->message;
	size_t named = strlen(plan->node);
	if (strncmp(text, plan->node, named) == 0 && strncmp(text + named, ": ", 2) == 0)
		text += named + 2; // the node is named once, in front
	snprintf(cudnn_text, sizeof cudnn_text, "%s", text);
	f8_diag_set(diag, F8_ERR_UNSUPPORTED,
		    "%s: f32 attention needs --bf16 on the GPU: cuDNN %s has no engine for its "
		    "composite graph with f32 q, k and v (%s)",
		    plan->node, f8_cudnn_version_text(), cudnn_text);
	f8_diag_hint(diag, "compile the plan with --bf16 (attention in bf16 with f32 statistics, "
			   "as TransformerEngine runs it)");
	return F8_ERR_UNSUPPORTED;
}

static void plan_destroy(attention_plan *plan) {
	if (!plan)
		return;
	f8_cudnn_graph_destroy(&plan->graph);
	f8_cuda_free(plan->workspace, NULL);
	f8_free(plan);
}

/* The plan of `key` for node `id`: its graph built, its engine chosen, its workspace made
 * (with the workaround's sequence lengths written once: nothing else writes them). */
static f8_status plan_create(f8_cuda_attention *attention, f8_node_id id,
			     const attention_key *key, attention_plan **out, f8_diag *diag) {
	attention_plan *plan = f8_calloc(1, sizeof *plan);
	*out = NULL;
	if (!plan)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory planning attention");
	plan->key = *key;
	plan->scale = (float)key->scale;
	plan->negative_infinity = -INFINITY; // the frontend's value from cuDNN 9.10 on
	plan->one = 1.0f;
	plan->seq_q = (int32_t)key->seq_q;
	plan->seq_kv = (int32_t)key->seq_kv;
	plan->direct_dq = key->backward && attention->deterministic;
	plan->padding_workaround = key->backward && key->seq_kv % 128 != 0 &&
				   f8_cuda_api.cudnnGetVersion() <= PADDING_WORKAROUND_LAST_VERSION;
	f8_graph_describe_node(attention->graph, id, plan->node, sizeof plan->node);
	describe_shape(key, plan->shape, sizeof plan->shape);
	f8_cudnn_graph_init(&plan->graph, attention->handle, plan->node, plan->shape, diag);

	build b = {.g = &plan->graph, .plan = plan, .k = key, .io = cudnn_type(key->dtype),
		   .score_dims = {key->batch, key->heads, key->seq_q, key->seq_kv},
		   .row_dims = {key->batch, key->heads, key->seq_q, 1}};
	row_major(b.score_dims, b.score_strides);
	row_major(b.row_dims, b.row_strides);
	b.slots = slots_of(key);
	layouts(&b);
	if (key->backward)
		backward_graph(&b);
	else
		forward_graph(&b);
	f8_status status = plan->graph.status;
	if (!status)
		status = f8_cudnn_graph_plan(&plan->graph, attention->deterministic);
	if (status == F8_ERR_UNSUPPORTED && key->dtype == F8_DTYPE_F32)
		status = explain_f32(plan, diag);
	if (!status) {
		plan->workspace_bytes = plan->f8c_bytes + plan->graph.engine_workspace;
		if (plan->workspace_bytes)
			status = f8_cuda_alloc(plan->workspace_bytes, &plan->workspace, diag);
	}
	if (!status && plan->padding_workaround) {
		int32_t *lengths = f8_malloc((size_t)key->batch * 2 * sizeof *lengths);
		if (!lengths)
			status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory planning attention");
		for (int64_t i = 0; lengths && i < key->batch; i++) {
			lengths[i] = plan->seq_q;
			lengths[key->batch + i] = plan->seq_kv;
		}
		// seq_len_kv's tensor starts at the next aligned offset after seq_len_q's.
		uint64_t kv_offset = plan->seq_len_offset + aligned((uint64_t)key->batch * 4);
		if (!status)
			status = f8_cuda_copy_to_device(plan->workspace + plan->seq_len_offset,
							lengths, (size_t)key->batch * 4, diag);
		if (!status)
			status = f8_cuda_copy_to_device(plan->workspace + kv_offset,
							lengths + key->batch, (size_t)key->batch * 4,
							diag);
		f8_free(lengths);
	}
	if (status) {
		if (diag && status != plan->graph.status) // the driver's, which names no node
			f8_diag_set_node(diag, attention->graph, id);
		plan_destroy(plan);
		return status;
	}
	*out = plan;
	return F8_OK;
}

/* The cuDNN calls of ring node `id` (key `key` its own shape) at place `place` of its group of
 * `group` ranks (f8_rt_ring_calls: each call's first query row, and the prefix of the gathered
 * sequence its rows attend), refusing the shapes a ring does not take: every rank of the group
 * alike. */
static f8_status ring_calls_of(const f8_graph *graph, f8_node_id id, const attention_key *key,
			       uint32_t place, uint32_t group, ring_calls *calls, f8_diag *diag) {
	int64_t ranks = f8_node_attr_int(&graph->nodes[id], "ranks", 1);
	int64_t rows = key->seq_q;
	if (key->seq_kv != rows)
		return refuse(graph, id, diag, "q holds %lld rows and k %lld: a ring's ranks hold "
					       "the same rows of the sequence in both",
			      (long long)rows, (long long)key->seq_kv);
	if (ranks > 1 && rows % 2)
		return refuse(graph, id, diag, "%lld rows over %lld ranks: each rank holds two "
					       "chunks of the sequence, of one size",
			      (long long)rows, (long long)ranks);
	if (group != ranks) // the buffers and the calls' keys are sized by the plan's ranks
		return refuse(graph, id, diag, "a ring of %lld ranks %s; its group has %u",
			      (long long)ranks, group == 1 ? "needs more than one rank" : "needs them",
			      group);
	*calls = (ring_calls){0};
	calls->n = f8_rt_ring_calls(ranks, place, rows, key->causal, calls->q_from, calls->keys);
	return F8_OK;
}

/* The plan of `key` (found among the plans made, or made for node `id`) into *index. */
static f8_status plan_of_key(f8_cuda_attention *attention, f8_node_id id, const attention_key *key,
			     uint32_t *index, f8_diag *diag) {
	for (uint32_t p = 0; p < attention->n_plans; p++)
		if (memcmp(&attention->plans[p]->key, key, sizeof *key) == 0) {
			*index = p;
			return F8_OK;
		}
	attention_plan **plans = f8_realloc(attention->plans,
					    (attention->n_plans + 1) * sizeof *plans);
	if (!plans)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory planning attention");
	attention->plans = plans;
	attention_plan *plan;
	f8_status status = plan_create(attention, id, key, &plan, diag);
	if (status)
		return status;
	*index = attention->n_plans;
	attention->plans[attention->n_plans++] = plan;
	attention->device_bytes += plan->workspace_bytes;
	return F8_OK;
}

/* The plans of ring node `id`: a call's key is the node's with its query rows and the keys'
 * prefix, over the node's q rows and the gathered sequence's (ranks x its rows). */
static f8_status plan_ring(f8_cuda_attention *attention, f8_node_id id, const attention_key *key,
			   uint32_t place, uint32_t group, f8_diag *diag) {
	ring_calls *calls = &attention->rings[id];
	f8_status status = ring_calls_of(attention->graph, id, key, place, group, calls, diag);
	int64_t ranks = f8_node_attr_int(&attention->graph->nodes[id], "ranks", 1);
	for (uint32_t i = 0; !status && i < calls->n; i++) {
		attention_key part;
		memcpy(&part, key, sizeof part); // its padding too: plans are found by memcmp
		part.seq_q = (i + 1 < calls->n ? calls->q_from[i + 1] : key->seq_q) - calls->q_from[i];
		part.seq_kv = calls->keys[i];
		part.kv_pitch = ranks * key->seq_kv;
		if (part.seq_q == 0) { // one rank, one row: its first chunk has none
			calls->plan[i] = F8_NONE;
			continue;
		}
		status = plan_of_key(attention, id, &part, &calls->plan[i], diag);
	}
	return status;
}

f8_status f8_cuda_attention_create(const f8_graph *graph, const int64_t *symbol_values,
				   CUstream stream, bool deterministic, const f8_dist *dist,
				   f8_cuda_attention **out, f8_diag *diag) {
	*out = NULL;
	f8_status status = f8_cuda_load(F8_CUDA_LIBRARY_CUDNN, diag);
	if (status)
		return status;
	f8_cuda_attention *attention = f8_calloc(1, sizeof *attention);
	if (!attention)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory planning attention");
	attention->graph = graph;
	attention->deterministic = deterministic;
	attention->plan_of_node = f8_malloc((graph->n_nodes + 1) * sizeof *attention->plan_of_node);
	attention->rings = f8_calloc(graph->n_nodes + 1, sizeof *attention->rings);
	if (!attention->plan_of_node || !attention->rings) {
		f8_cuda_attention_destroy(attention);
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory planning attention");
	}
	for (uint32_t i = 0; i < graph->n_nodes; i++)
		attention->plan_of_node[i] = F8_NONE;

	bool any = false;
	for (uint32_t i = 0; i < graph->n_order; i++)
		any |= is_attention(graph->nodes[graph->order[i]].op);
	if (any) { // a handle only where a graph needs one: cudnnCreate loads its kernels
		f8_cudnn_graph context;
		f8_cudnn_graph_init(&context, NULL, "cuDNN attention", "no shape yet", diag);
		f8_cudnn_graph_check(&context, f8_cuda_api.cudnnCreate(&attention->handle),
				     "cudnnCreate");
		if (!context.status)
			f8_cudnn_graph_check(&context,
					     f8_cuda_api.cudnnSetStream(attention->handle, stream),
					     "cudnnSetStream");
		status = context.status;
	}
	for (uint32_t i = 0; !status && i < graph->n_order; i++) {
		f8_node_id id = graph->order[i];
		if (!is_attention(graph->nodes[id].op))
			continue;
		attention_key key;
		if ((status = key_of(graph, symbol_values, id, &key, diag)))
			break;
		uint32_t axes = 0;
		if (is_ring(graph->nodes[id].op))
			status = f8_rt_collective_axes(&graph->nodes[id], &axes)
					 ? plan_ring(attention, id, &key,
						     f8_dist_group_rank(dist, axes),
						     f8_dist_group_size(dist, axes), diag)
					 : refuse(graph, id, diag, "a ring with no group");
		else
			status = plan_of_key(attention, id, &key, &attention->plan_of_node[id], diag);
	}
	if (status) {
		f8_cuda_attention_destroy(attention);
		return status;
	}
	*out = attention;
	return F8_OK;
}

uint64_t f8_cuda_attention_device_bytes(const f8_cuda_attention *attention) {
	return attention ? attention->device_bytes : 0;
}

static attention_plan *plan_of(const f8_cuda_attention *attention, f8_node_id node) {
	if (!attention || node >= attention->graph->n_nodes ||
	    attention->plan_of_node[node] == F8_NONE)
		return NULL;
	return attention->plans[attention->plan_of_node[node]];
}

uint32_t f8_cuda_attention_ring_calls(const f8_cuda_attention *attention, f8_node_id node,
				      int64_t *q_from, int64_t *keys) {
	if (!attention || node >= attention->graph->n_nodes)
		return 0;
	const ring_calls *calls = &attention->rings[node];
	for (uint32_t i = 0; i < calls->n; i++) {
		q_from[i] = calls->q_from[i];
		keys[i] = calls->keys[i];
	}
	return calls->n;
}

/* Runs `plan` for node `node` (named in its messages). */
static f8_status run_plan(f8_cuda_attention *attention, attention_plan *plan, f8_node_id node,
			  const CUdeviceptr *inputs, const CUdeviceptr *outputs, f8_diag *diag) {
	f8_graph_describe_node(attention->graph, node, plan->node, sizeof plan->node);
	return f8_cudnn_graph_execute(&plan->graph, inputs, outputs, plan->workspace,
				      plan->f8c_bytes, diag);
}

f8_status f8_cuda_attention_run_ring_call(f8_cuda_attention *attention, f8_node_id node,
					  uint32_t call, const CUdeviceptr *inputs,
					  const CUdeviceptr *outputs, f8_diag *diag) {
	if (!attention || node >= attention->graph->n_nodes || call >= attention->rings[node].n)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "node %u has no ring call %u planned",
				   node, call);
	uint32_t plan = attention->rings[node].plan[call];
	if (plan == F8_NONE) // no query rows
		return F8_OK;
	return run_plan(attention, attention->plans[plan], node, inputs, outputs, diag);
}

f8_status f8_cuda_attention_run(f8_cuda_attention *attention, f8_node_id node,
				const CUdeviceptr *inputs, const CUdeviceptr *outputs,
				f8_diag *diag) {
	attention_plan *plan = plan_of(attention, node);
	if (!plan)
		return f8_diag_set(diag, F8_ERR_ARGUMENT,
				   "node %u is no attention node the cuDNN plans were made for", node);
	return run_plan(attention, plan, node, inputs, outputs, diag); // named: a plan is shared
}

void f8_cuda_attention_describe(const f8_cuda_attention *attention, f8_node_id node, char *out,
				size_t size) {
	const attention_plan *plan = plan_of(attention, node);
	const ring_calls *calls = attention && node < attention->graph->n_nodes
					  ? &attention->rings[node] : NULL;
	for (uint32_t i = 0; !plan && calls && i < calls->n; i++) // a ring's: its first call's
		if (calls->plan[i] != F8_NONE)
			plan = attention->plans[calls->plan[i]];
	if (!plan) {
		snprintf(out, size, "no cuDNN plan");
		return;
	}
	char engine[200];
	f8_cudnn_graph_describe(&plan->graph, engine, sizeof engine);
	snprintf(out, size, "%s: %s, f8c's workspace tensors %llu bytes%s%s", plan->shape, engine,
		 (unsigned long long)plan->f8c_bytes,
		 !plan->key.backward ? "" : plan->direct_dq ? ", dQ direct (deterministic)"
							    : ", dQ through an f32 dQ_accum",
		 plan->padding_workaround ? ", padding mask for s_kv % 128 != 0 (cuDNN <= 9.15)"
					  : "");
}

void f8_cuda_attention_destroy(f8_cuda_attention *attention) {
	if (!attention)
		return;
	for (uint32_t p = 0; p < attention->n_plans; p++)
		plan_destroy(attention->plans[p]);
	if (attention->handle)
		f8_cuda_api.cudnnDestroy(attention->handle);
	f8_free(attention->plans);
	f8_free(attention->plan_of_node);
	f8_free(attention->rings);
	f8_free(attention);
}
