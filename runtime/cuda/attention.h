/*
 * Attention on the GPU through cuDNN's backend API (C, no C++ frontend): Attention (causal or
 * not, with the log-sum-exp statistics the backward needs) and AttentionGrad compute what their
 * reference kernels in runtime/cpu/ compute, on device memory, BF16 (or F16) in and out with
 * FP32 compute and f32 lse (natural log, (batch, heads, seq_q)); GQA and MQA without expanding
 * K and V; an additive mask of q's dtype shaped (batch or 1, heads or 1, s_q, s_kv). Attention's
 * tensors are BHSD as the executor's row-major views give them; AttentionPacked and its
 * gradient (the attention-layout pass's) read q, k and v as strided views of one packed qkv
 * (b, s, (h + 2 h_kv) d), o and dO as (b, s, h d), and write dq, dk, dv in place into one dqkv
 * (TransformerEngine's bs3hd and bshd): the graphs take any strides with a unit last one.
 *
 * On cuDNN 9.14 (the oldest f8c supports) causal training attention is the composite
 * operation graph: matmul, scale, a causal mask from generated indices, softmax by reductions,
 * matmul; and its backward likewise (../shared/GPU-FACTS.md, section 2; runtime/cuda/attention.c
 * lists the nodes). Graphs and execution plans are built once per node at create (nodes of one
 * shape and attributes share a plan), outside any CUDA graph capture; a run builds the variant
 * pack and executes on the stream.
 *
 * Refused at create with F8_ERR_UNSUPPORTED, naming the node: head dims that are not multiples
 * of 8 or above 256; causal with s_q > s_kv (query rows that attend no key, which the reference
 * answers with 0 and lse -inf); bool masks and masks of other shapes; and f32 q, k, v where cuDNN
 * has no engine: on cuDNN 9.14 and sm_90 the f32 forward runs (in full f32), the f32 backward has
 * none ("Data type for Q tensor should be half / bf16"), and the message says that f32
 * attention needs --bf16 on the GPU.
 *
 * `deterministic` chooses engines without cuDNN's NONDETERMINISTIC numerical note and builds the
 * backward without the atomically accumulated dQ_accum (on Hopper: the dP-workspace backward,
 * whose workspace grows with s_q s_kv), so that a GPU run can be bit-exact across resume.
 */
#ifndef F8_RUNTIME_CUDA_ATTENTION_H
#define F8_RUNTIME_CUDA_ATTENTION_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // int64_t, uint64_t

#include <cuda.h> // CUdeviceptr, CUstream

#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/graph.h" // f8_graph, f8_node_id

#include "runtime/distributed.h" // f8_dist

typedef struct f8_cuda_attention f8_cuda_attention;

/*
 * Plans every Attention and AttentionGrad node of `graph` (verified; symbols bound to
 * `symbol_values`, which must outlive the plan) to run on `stream` in the current context, and
 * the calls of every RingAttention and RingAttentionGrad node for this rank's place in its
 * group of `dist` (NULL: one rank; runtime/cuda/ring_attention.h runs them). Opens cuDNN
 * (runtime/cuda/libraries.h) when it is not open. *out is the caller's
 * (f8_cuda_attention_destroy). F8_ERR_UNSUPPORTED for a node cuDNN cannot run (the message
 * names the node, its shape and dtypes and the cuDNN version); F8_ERR_NOMEM.
 */
f8_status f8_cuda_attention_create(const f8_graph *graph, const int64_t *symbol_values,
				   CUstream stream, bool deterministic, const f8_dist *dist,
				   f8_cuda_attention **out, f8_diag *diag);

/* Device bytes the plans hold (their workspaces). */
uint64_t f8_cuda_attention_device_bytes(const f8_cuda_attention *attention);

/*
 * Queues node `node` (Attention or AttentionGrad) on the stream: inputs[i] is the device
 * address of the node's input i (0 for an absent optional input), outputs[i] of its output i.
 * F8_ERR_ARGUMENT for a node that was not planned.
 */
f8_status f8_cuda_attention_run(f8_cuda_attention *attention, f8_node_id node,
				const CUdeviceptr *inputs, const CUdeviceptr *outputs,
				f8_diag *diag);

/*
 * A ring node's cuDNN calls (runtime/cuda/ring_attention.h): how many (0 for another node; 1
 * without causal masking, else 2), and for call i (room for 2) q_from[i], the first of the
 * node's query rows it takes (up to the next call's, or the last), and keys[i], how many of
 * the sequence's first keys they attend. A call reads q, o and dO, and writes o and dQ, as the
 * node's tensors from row q_from[i] on; its lse is its rows' alone, packed (b, h, rows of the
 * call); K and V are the whole sequence gathered in order, (b, h_kv, ranks x rows, d), and a
 * backward writes dK and dV of that shape, only their first keys[i] rows.
 */
uint32_t f8_cuda_attention_ring_calls(const f8_cuda_attention *attention, f8_node_id node,
				      int64_t *q_from, int64_t *keys);

/* Queues call `call` of a ring node on the stream, `inputs` and `outputs` the addresses of its
 * views in the node's order. F8_ERR_ARGUMENT for a call that was not planned. */
f8_status f8_cuda_attention_run_ring_call(f8_cuda_attention *attention, f8_node_id node,
					  uint32_t call, const CUdeviceptr *inputs,
					  const CUdeviceptr *outputs, f8_diag *diag);

/*
 * What the plan of node `node` chose, for --verbose and the device checks, into `out`: the
 * shape, cuDNN's engine (its global index, which of heuristics mode A's configs, how many),
 * the workspace, and for AttentionGrad how dQ is accumulated; "no cuDNN plan" for a node that
 * has none.
 */
void f8_cuda_attention_describe(const f8_cuda_attention *attention, f8_node_id node, char *out,
				size_t size);

/* Frees the plans and workspaces; NULL is allowed. */
void f8_cuda_attention_destroy(f8_cuda_attention *attention);

#endif
