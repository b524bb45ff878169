/*
 * A device buffer that grows to the largest size asked of it and keeps what it outgrew until it
 * is freed: a CUDA graph captured before the growth may still read the old one (the NCCL
 * collectives' staging, ring attention's gathered keys). Device memory through
 * runtime/cuda/driver.h's f8_cuda_alloc and f8_cuda_free.
 */
#ifndef F8_RUNTIME_CUDA_KEPT_BUFFER_H
#define F8_RUNTIME_CUDA_KEPT_BUFFER_H

#include <stdint.h> // uint32_t, uint64_t

#include <cuda.h> // CUdeviceptr

#include "ir/diag.h" // f8_status, f8_diag

/* Zeroed: no buffer yet. */
typedef struct f8_cuda_kept_buffer {
	CUdeviceptr at;        // the buffer now; 0 before the first use
	uint64_t bytes;        // its size
	CUdeviceptr *outgrown; // the ones it replaced
	uint32_t n_outgrown;
	uint64_t allocated; // the bytes of all of them
} f8_cuda_kept_buffer;

/* The buffer, of at least `bytes`, into *out; F8_ERR_NOMEM, or the driver's failure. */
f8_status f8_cuda_kept_buffer_get(f8_cuda_kept_buffer *buffer, uint64_t bytes, CUdeviceptr *out,
				  f8_diag *diag);

/* Frees the buffer and what it outgrew; zeroes it. */
void f8_cuda_kept_buffer_free(f8_cuda_kept_buffer *buffer);

#endif
