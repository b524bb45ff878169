/*
 * NumPy .npy files: one array each, the format numpy.save writes and numpy.load reads, for
 * tensors that go to and come from Python (reference activations, calibration data, dumps).
 *
 * A file is the magic "\x93NUMPY", a version (1.0, 2.0 or 3.0), the length of the header, the
 * header (a Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), })
 * padded with spaces and a newline so that the data starts at a multiple of 64 bytes, then the
 * data, row-major.
 *
 * Element types, by descr: '<f8' f64, '<f4' f32, '<f2' f16, '<i8' i64, '<i4' i32, '|i1' i8,
 * '|u1' u8, '|b1' bool ('<', '|' and '=' are all taken as little-endian: numpy writes '|' for
 * one-byte types and '<' for the rest; '=' means the machine's order, which is little-endian
 * wherever f8c runs). BF16, E4M3, E5M2 and E8M0 have no descr of their own (ml_dtypes writes
 * them as '<V2' or '|V1', opaque bytes that do not say which type they were), so they are not
 * written, and 'V' descrs are not read: widen such a tensor to f32 first.
 */
#ifndef F8_RUNTIME_NPY_H
#define F8_RUNTIME_NPY_H

#include "ir/diag.h"        // f8_status, f8_diag
#include "runtime/tensor.h" // f8_rt_tensor

enum {
	F8_NPY_HEADER_MAX = 1 << 20, // the longest header read: a rank-8 header is ~150 bytes
};

/*
 * Reads the .npy file at `path` into *out, a new owned tensor (free it with
 * f8_rt_tensor_destroy). Everything is checked before the data is trusted: the magic and
 * version, the header length against the file's size, the header dict (exactly the keys
 * descr, fortran_order and shape; a shape tuple of at most F8_MAX_RANK non-negative ints; an
 * element count that does not overflow), and a data length of exactly count * element size.
 * Errors, with the diagnostic's file set to `path`: F8_ERR_IO (cannot open or read),
 * F8_ERR_PARSE (not a .npy file, a malformed header, a torn or overlong file),
 * F8_ERR_UNSUPPORTED (big-endian, fortran_order True, a dtype f8c has no type for),
 * F8_ERR_NOMEM. On error *out is left empty.
 */
f8_status f8_npy_read(const char *path, f8_rt_tensor *out, f8_diag *diag);

/*
 * Writes `tensor` to `path` as a .npy file, atomically (runtime/atomic_file.h), byte for byte
 * as numpy.save writes the same array: version 1.0, or 2.0 when the header needs more than
 * 65535 bytes. F8_ERR_UNSUPPORTED for bf16, e4m3, e5m2 and e8m0 (the hint says to widen to
 * f32); F8_ERR_ARGUMENT for a tensor whose n_bytes disagrees with its dims; F8_ERR_IO;
 * F8_ERR_NOMEM.
 */
f8_status f8_npy_write(const char *path, const f8_rt_tensor *tensor, f8_diag *diag);

#endif
