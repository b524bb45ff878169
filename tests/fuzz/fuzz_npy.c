/*
 * libFuzzer target for the .npy reader (runtime/npy.c): the bytes are written to a file in a
 * private temporary folder, which f8_npy_read reads as `f8c infer` reads its input arrays and
 * calibration reads its data. The reader must keep its promises:
 *
 *   - it fails with a status, a message and the file named in the diagnostic, and an empty
 *     tensor;
 *   - or it gives an owned tensor whose bytes are what its dtype and dims say (at most
 *     F8_MAX_RANK dims >= 0), and are the file's last bytes: the data ends the file exactly;
 *   - a tensor that read, written with f8_npy_write and read again, is the same tensor (dtype,
 *     dims, bytes), and the file written is one that numpy.save would write: a header that
 *     ends at a multiple of 64 bytes.
 *
 * Never a crash, a leak or a sanitizer report. A broken promise aborts, so libFuzzer keeps the
 * input.
 *
 * Built by the `fuzz` preset (F8C_FUZZ=ON, clang, -fsanitize=fuzzer,address,undefined); seeds in
 * tests/fuzz/corpus_npy/ (tests/fuzz/make_corpus.py makes them with numpy.save).
 */
#define _POSIX_C_SOURCE 200809L // mkdtemp (fuzz_support.h), stat

#include <stdint.h>   // uint8_t, uint64_t
#include <stdio.h>    // fprintf, snprintf
#include <stdlib.h>   // abort, atexit
#include <string.h>   // memcmp, strcmp
#include <sys/stat.h> // stat

#include "ir/dtype.h"    // f8_dtype_get_info
#include "runtime/npy.h" // f8_npy_read, f8_npy_write
#include "tests/fuzz/fuzz_support.h" // fuzz_make_folder, fuzz_write_file, fuzz_remove_folder

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char folder[256], path[400], again_path[400];

static void remove_folder(void) {
	fuzz_remove_folder(folder);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
	(void)argc, (void)argv;
	fuzz_make_folder("npy", folder, sizeof folder);
	snprintf(path, sizeof path, "%s/fuzz.npy", folder);
	snprintf(again_path, sizeof again_path, "%s/again.npy", folder);
	atexit(remove_folder);
	return 0;
}

static void write_or_die(const uint8_t *data, size_t size) {
	fuzz_write_file("npy", path, data, size);
}

static void fail(const char *what, const f8_diag *diag) {
	fprintf(stderr, "fuzz_npy: %s\n", what);
	if (diag)
		f8_diag_print(diag, stderr);
	abort();
}

/* The bytes of the tensor's dtype and dims, or UINT64_MAX when they do not fit in 64 bits. */
static uint64_t bytes_of(const f8_rt_tensor *tensor) {
	uint64_t n = f8_dtype_get_info(tensor->dtype)->bytes;
	for (int d = 0; d < tensor->rank; d++) {
		if (tensor->dims[d] && n > UINT64_MAX / (uint64_t)tensor->dims[d])
			return UINT64_MAX;
		n *= (uint64_t)tensor->dims[d];
	}
	return n;
}

/* Writes `tensor` to again_path, reads it back and holds the two to each other. */
static void check_rewrite(const f8_rt_tensor *tensor) {
	f8_diag diag;
	f8_diag_clear(&diag);
	if (f8_npy_write(again_path, tensor, &diag) != F8_OK)
		fail("a tensor that read does not write", &diag);
	struct stat info;
	if (stat(again_path, &info) != 0 || (uint64_t)info.st_size < tensor->n_bytes ||
	    ((uint64_t)info.st_size - tensor->n_bytes) % 64 != 0)
		fail("the file written does not start its data at a multiple of 64 bytes", NULL);
	f8_rt_tensor back;
	if (f8_npy_read(again_path, &back, &diag) != F8_OK)
		fail("the file written does not read", &diag);
	if (!f8_rt_tensor_same_type(&back, tensor) || back.n_bytes != tensor->n_bytes ||
	    (back.n_bytes && memcmp(back.data, tensor->data, back.n_bytes) != 0))
		fail("written and read again, the tensor changed", NULL);
	f8_rt_tensor_destroy(&back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
	write_or_die(data, size);
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_rt_tensor tensor;
	f8_status status = f8_npy_read(path, &tensor, &diag);
	if (status != F8_OK) {
		if (diag.status != status || !diag.message[0])
			fail("a read failed without a message of its status", &diag);
		if (strcmp(diag.file, path) != 0)
			fail("a read failed without naming the file", &diag);
		if (tensor.data || tensor.n_bytes || tensor.rank)
			fail("a read that failed left a tensor", NULL);
		return 0;
	}
	if (!tensor.owned || !f8_rt_tensor_valid(&tensor) || tensor.n_bytes != bytes_of(&tensor))
		fail("a tensor read is not of the bytes its dtype and dims say", NULL);
	if (tensor.n_bytes > size ||
	    (tensor.n_bytes && memcmp(tensor.data, data + size - tensor.n_bytes, tensor.n_bytes)))
		fail("a tensor read does not hold the file's last bytes", NULL);
	check_rewrite(&tensor);
	f8_rt_tensor_destroy(&tensor);
	return 0;
}
