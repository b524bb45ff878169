/*
 * A growing device buffer that keeps what it outgrew (runtime/cuda/kept_buffer.h).
 */
#include "runtime/cuda/kept_buffer.h"

#include <string.h> // memset

#include "ir/alloc.h"            // f8_realloc, f8_free
#include "runtime/cuda/driver.h" // f8_cuda_alloc, f8_cuda_free

f8_status f8_cuda_kept_buffer_get(f8_cuda_kept_buffer *buffer, uint64_t bytes, CUdeviceptr *out,
				  f8_diag *diag) {
	if (bytes > buffer->bytes) {
		if (buffer->at) {
			CUdeviceptr *outgrown = f8_realloc(buffer->outgrown, (buffer->n_outgrown + 1) *
									     sizeof *outgrown);
			if (!outgrown)
				return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
			buffer->outgrown = outgrown;
		}
		CUdeviceptr made;
		f8_status status = f8_cuda_alloc(bytes, &made, diag);
		if (status)
			return status;
		if (buffer->at)
			buffer->outgrown[buffer->n_outgrown++] = buffer->at;
		buffer->at = made;
		buffer->bytes = bytes;
		buffer->allocated += bytes;
	}
	*out = buffer->at;
	return F8_OK;
}

void f8_cuda_kept_buffer_free(f8_cuda_kept_buffer *buffer) {
	(void)f8_cuda_free(buffer->at, NULL);
	for (uint32_t i = 0; i < buffer->n_outgrown; i++)
		(void)f8_cuda_free(buffer->outgrown[i], NULL);
	f8_free(buffer->outgrown);
	memset(buffer, 0, sizeof *buffer);
}
