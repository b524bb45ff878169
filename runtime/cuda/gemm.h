/*
 * The GEMMs of a plan on the GPU, through cuBLASLt: every node with F8_OPF_GEMM (Linear,
 * LinearWgrad, MatMul, Gemm, FP8Gemm, GroupedLinear, GroupedLinearWgrad) computes what its
 * reference kernel in runtime/cpu/ computes, on device memory.
 *
 * Planned once: f8_cuda_gemms_create makes, for each GEMM node of the graph, its matmul
 * descriptor, matrix layouts and one heuristic result (the algorithm), and keeps them; a run
 * only sets pointers and calls cublasLtMatmul on the stream, so runs can be captured in a CUDA
 * graph, but for GroupedLinear and GroupedLinearWgrad: their rows per expert are data on the
 * device, so their runs copy the counts to the host, wait for the stream and ask the heuristic
 * per expert (those two cannot be captured). The workspace (32 MiB, 256-byte aligned, as
 * TransformerEngine's on Hopper) is made here and shared by the nodes, which run one at a time
 * on the one stream, with a little more device memory: vectors of ones and scratch for the FP8
 * scale grids that cuBLASLt reads in another layout (runtime/cuda/gemm.c).
 *
 * Numerics: f32 in CUBLAS_COMPUTE_32F (no TF32: the CPU reference is f32), bf16 and f16 with
 * f32 compute, f64 in f64. A Linear's bias by cuBLASLt's BIAS epilogue where it has one for the
 * dtypes, else (an FP8 GEMM with f32 output, whose bias cuBLASLt takes only in bf16) broadcast
 * into the output first and accumulated onto (beta 1), as a Gemm's broadcast C is.
 *
 * FP8 (FP8Gemm): TN with the FP8 transposed copies the plan made, A/B scale pointers =
 * scale_inv, fast accumulation for fprop and split accumulation for dgrad and wgrad (the
 * per-tensor recipes' TransformerEngine defaults) and for block scales, E4M3 x E5M2 for
 * gradients; the rowwise and block recipes through cuBLASLt's scale modes (OUTER_VEC_32F;
 * VEC128_32F with BLK128x128_32F weights). A shape that breaks cuBLASLt's FP8 rules on sm_90 (K
 * a multiple of 16; scale kinds that pair; n % 8, and m % 8 for 1x128-scaled a, with block
 * scales) is F8_ERR_UNSUPPORTED naming the node, its m n k and dtypes: the compiler pads, the
 * runtime never falls back. A GEMM whose heuristic gives no algorithm is an error that names
 * the node, its shape and its dtypes.
 */
#ifndef F8_RUNTIME_CUDA_GEMM_H
#define F8_RUNTIME_CUDA_GEMM_H

#include <stdbool.h> // bool
#include <stdint.h>  // int64_t, uint64_t

#include <cuda.h> // CUdeviceptr, CUstream

#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/graph.h" // f8_graph, f8_node_id

typedef struct f8_cuda_gemms f8_cuda_gemms;

/*
 * Plans every GEMM node of `graph` (verified; its symbols bound to `symbol_values`, which must
 * outlive the plan) to run on `stream` in the current context. Opens cuBLASLt
 * (runtime/cuda/libraries.h) when it is not open. Device pointers a run gets are assumed
 * 256-byte aligned (the slab's and the leaves' alignment); a run checks it. *out is the
 * caller's (f8_cuda_gemms_destroy). F8_ERR_UNSUPPORTED naming the node for a GEMM cuBLASLt
 * cannot run as planned; F8_ERR_NOMEM.
 */
f8_status f8_cuda_gemms_create(const f8_graph *graph, const int64_t *symbol_values,
			       CUstream stream, f8_cuda_gemms **out, f8_diag *diag);

/* Device bytes the plan holds (the workspace). */
uint64_t f8_cuda_gemms_device_bytes(const f8_cuda_gemms *gemms);

/*
 * Queues GEMM node `node` on the stream: inputs[i] is the device address of the node's input
 * i (0 for an absent optional input), outputs[i] of its output i. Grouped counts may add up
 * to fewer than the rows: the rows after them are padding, not read, and a GroupedLinear's
 * output rows there are zeros. F8_ERR_ARGUMENT for a node that is not a planned GEMM or a
 * misaligned pointer; F8_ERR_INVALID (naming the node) for grouped counts that do not fit the
 * rows (a negative one, or more than the rows), as the reference kernel; a cuBLASLt failure
 * names the node.
 */
f8_status f8_cuda_gemm_run(f8_cuda_gemms *gemms, f8_node_id node, const CUdeviceptr *inputs,
			   const CUdeviceptr *outputs, f8_diag *diag);

/* Frees the plan and its workspace; NULL is allowed. */
void f8_cuda_gemms_destroy(f8_cuda_gemms *gemms);

#endif
