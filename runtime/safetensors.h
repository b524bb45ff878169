/*
 * Hugging Face safetensors files: many named tensors and a string-to-string metadata map, the
 * format of model weights on the Hub and of f8c's checkpoints.
 *
 * A file is N (8 bytes, little-endian), N bytes of a JSON object, then the data area:
 *   {"__metadata__": {"key": "value", ...},
 *    "NAME": {"dtype": "F32", "shape": [3, 4], "data_offsets": [BEGIN, END]}, ...}
 * where BEGIN and END are byte offsets into the data area, which the tensors cover exactly,
 * each row-major and little-endian. The reference implementation pads the JSON with spaces to
 * a multiple of 8 bytes and allows at most 100 MB of it.
 *
 * Dtypes: F64 F32 F16 BF16 I64 I32 I8 U8 BOOL F8_E4M3 F8_E5M2 F8_E8M0, which are f8c's f64 f32
 * f16 bf16 i64 i32 i8 u8 bool e4m3 e5m2 e8m0. Others (U16, I16, U32, U64, C64, F4, ...) are
 * refused: f8c has no type for them.
 *
 * Reading opens the file, checks the whole header at once (so that a file that opened is a
 * valid file, whatever tensors are read later) and reads tensors on demand.
 */
#ifndef F8_RUNTIME_SAFETENSORS_H
#define F8_RUNTIME_SAFETENSORS_H

#include <stddef.h> // size_t
#include <stdint.h> // int64_t, uint64_t

#include "ir/diag.h"        // f8_status, f8_diag
#include "ir/dtype.h"       // f8_dtype
#include "ir/shape.h"       // F8_MAX_RANK
#include "runtime/tensor.h" // f8_rt_tensor

#define F8_SAFETENSORS_HEADER_MAX 100000000u // bytes of JSON, as the reference implementation

/* An open safetensors file; incomplete on purpose. */
typedef struct f8_safetensors f8_safetensors;

/* What the header says of one tensor. */
typedef struct f8_safetensors_tensor {
	const char *name;          // owned by the file
	f8_dtype dtype;
	int rank;
	int64_t dims[F8_MAX_RANK]; // (rank)
	uint64_t begin, end;       // its bytes in the data area: [begin, end)
} f8_safetensors_tensor;

/*
 * Opens the safetensors file at `path` and reads and checks its header: N at most the file's
 * size less 8 and at most F8_SAFETENSORS_HEADER_MAX; the header a UTF-8 JSON object, without
 * duplicate keys; "__metadata__" an object of strings; every other key a tensor with exactly
 * dtype (known), shape (at most F8_MAX_RANK non-negative integers) and data_offsets
 * ([begin, end], begin <= end), with count * element size == end - begin; the tensors together
 * cover the data area exactly, without overlap. A file shorter than its header says (torn) and
 * a file that is not safetensors at all are told apart in the message, which names the file
 * (so does the diagnostic's file), with a hint.
 * On success *out is the file, to be closed with f8_safetensors_close; on failure it is NULL.
 * Errors: F8_ERR_IO, F8_ERR_PARSE (malformed, torn or foreign), F8_ERR_UNSUPPORTED (a dtype
 * f8c has no type for, a rank above F8_MAX_RANK), F8_ERR_NOMEM.
 */
f8_status f8_safetensors_open(const char *path, f8_safetensors **out, f8_diag *diag);

/* Closes the file and frees everything it owns, the names and metadata included. NULL is
 * allowed. */
void f8_safetensors_close(f8_safetensors *file);

/* The number of tensors. */
size_t f8_safetensors_count(const f8_safetensors *file);

/* Tensor i (< count), in the order of their data in the file (tensors of no bytes at one
 * offset in the header's order); NULL when i is out of range. */
const f8_safetensors_tensor *f8_safetensors_get(const f8_safetensors *file, size_t i);

/* The name of tensor i (< count), as f8_safetensors_get(file, i)->name; NULL out of range. */
const char *f8_safetensors_name(const f8_safetensors *file, size_t i);

/* The tensor called `name`, or NULL when there is none. O(log count). */
const f8_safetensors_tensor *f8_safetensors_find(const f8_safetensors *file, const char *name);

/*
 * Reads the tensor called `name` into *out, a new owned tensor (f8_rt_tensor_destroy frees it).
 * F8_ERR_ARGUMENT when there is no such tensor (the hint names some there are), F8_ERR_IO
 * (also when the file shrank since it was opened), F8_ERR_NOMEM. On error *out is empty.
 */
f8_status f8_safetensors_read(const f8_safetensors *file, const char *name, f8_rt_tensor *out,
			      f8_diag *diag);

/* The metadata value of `key`, or NULL when the file has none; owned by the file. */
const char *f8_safetensors_metadata(const f8_safetensors *file, const char *key);

/* The number of metadata entries, and entry i's key (< that number), in the file's order. */
size_t f8_safetensors_metadata_count(const f8_safetensors *file);
const char *f8_safetensors_metadata_key(const f8_safetensors *file, size_t i);

/*
 * Writes `n` tensors called `names` to `path` as a safetensors file, atomically
 * (runtime/atomic_file.h), with the `n_metadata` pairs metadata_keys[i] -> metadata_values[i]
 * as "__metadata__" (left out when n_metadata is 0). The data is in the given order; the JSON
 * is padded with spaces to a multiple of 8 bytes, as the reference implementation does.
 * F8_ERR_ARGUMENT for names or keys that repeat, are not UTF-8 or are "__metadata__", and for
 * a tensor whose n_bytes disagrees with its dims; F8_ERR_UNSUPPORTED for a dtype safetensors
 * has none for; F8_ERR_IO; F8_ERR_NOMEM. Nothing is owned: the arguments are read only.
 */
f8_status f8_safetensors_write(const char *path, const char *const *names,
			       const f8_rt_tensor *const *tensors, size_t n,
			       const char *const *metadata_keys, const char *const *metadata_values,
			       size_t n_metadata, f8_diag *diag);

#endif
