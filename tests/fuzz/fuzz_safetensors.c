/*
 * libFuzzer target for the safetensors reader (runtime/safetensors.c): the bytes are written to
 * a file in a private temporary folder, which f8_safetensors_open opens as a checkpoint's or a
 * plan's weights are opened. The reader must keep its promises:
 *
 *   - open fails with a status, a message and the file named in the diagnostic, and no file;
 *   - or the header holds: every tensor of a dtype, at most F8_MAX_RANK dims >= 0, exactly the
 *     bytes its dtype and dims say, the tensors in the order of their data covering the data
 *     area (the file after its 8 bytes and its header) exactly; each found by its name; the
 *     metadata listed, each key found;
 *   - every tensor then reads: a tensor of its dtype and dims holding the file's bytes at its
 *     offsets, or F8_ERR_NOMEM with a message and an empty tensor; a name the file lacks is
 *     F8_ERR_ARGUMENT;
 *   - after the file is cut to half its size, a tensor whose bytes are gone fails to read with
 *     F8_ERR_IO (the file shrank since it was opened), the others still read their bytes;
 *   - the tensors that read and the metadata, written again with f8_safetensors_write, open
 *     again to the same names, dtypes, dims, bytes and metadata.
 *
 * Never a crash, a leak or a sanitizer report. A broken promise aborts, so libFuzzer keeps the
 * input.
 *
 * Built by the `fuzz` preset (F8C_FUZZ=ON, clang, -fsanitize=fuzzer,address,undefined); seeds in
 * tests/fuzz/corpus_safetensors/ (tests/fuzz/make_corpus.py makes them with safetensors.numpy,
 * and takes one file of an f8c checkpoint).
 */
#define _POSIX_C_SOURCE 200809L // mkdtemp (fuzz_support.h), truncate

#include <stdint.h> // uint8_t, uint64_t
#include <stdio.h>  // fprintf, snprintf
#include <stdlib.h> // abort, atexit
#include <string.h> // memcmp, strcmp
#include <unistd.h> // truncate

#include "ir/alloc.h"            // f8_calloc, f8_free
#include "ir/dtype.h"            // f8_dtype_get_info
#include "runtime/safetensors.h" // f8_safetensors_*
#include "tests/fuzz/fuzz_support.h" // fuzz_make_folder, fuzz_write_file, fuzz_remove_folder

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char folder[256], path[400], again_path[400];

static void remove_folder(void) {
	fuzz_remove_folder(folder);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
	(void)argc, (void)argv;
	fuzz_make_folder("safetensors", folder, sizeof folder);
	snprintf(path, sizeof path, "%s/fuzz.safetensors", folder);
	snprintf(again_path, sizeof again_path, "%s/again.safetensors", folder);
	atexit(remove_folder);
	return 0;
}

static void write_or_die(const uint8_t *data, size_t size) {
	fuzz_write_file("safetensors", path, data, size);
}

static void fail(const char *what, const char *name, const f8_diag *diag) {
	fprintf(stderr, "fuzz_safetensors: %s%s%s\n", what, name ? ": " : "", name ? name : "");
	if (diag)
		f8_diag_print(diag, stderr);
	abort();
}

/* A failure must say what failed, with the status it returned, about the file at `file`. */
static void check_failure(f8_status status, const f8_diag *diag, const char *file,
			  const char *what) {
	if (diag->status != status || !diag->message[0])
		fail(what, "failed without a message of its status", diag);
	if (strcmp(diag->file, file) != 0)
		fail(what, "failed without naming the file", diag);
}

/* The bytes of `rank` dims of `dtype`, or UINT64_MAX when they do not fit in 64 bits. */
static uint64_t bytes_of(f8_dtype dtype, int rank, const int64_t *dims) {
	uint64_t n = f8_dtype_get_info(dtype)->bytes;
	for (int d = 0; d < rank; d++) {
		if (dims[d] && n > UINT64_MAX / (uint64_t)dims[d])
			return UINT64_MAX;
		n *= (uint64_t)dims[d];
	}
	return n;
}

/* Aborts unless the open header says what safetensors.h promises of a file that opened. */
static void check_header(const f8_safetensors *file, uint64_t data_start, uint64_t size) {
	size_t n = f8_safetensors_count(file);
	uint64_t covered = 0;
	for (size_t i = 0; i < n; i++) {
		const f8_safetensors_tensor *t = f8_safetensors_get(file, i);
		if (!t || !t->name || f8_safetensors_name(file, i) != t->name)
			fail("a tensor without its name", NULL, NULL);
		if (t->rank < 0 || t->rank > F8_MAX_RANK || (int)t->dtype < 0 ||
		    t->dtype >= F8_DTYPE_COUNT)
			fail("a tensor of no dtype or rank", t->name, NULL);
		for (int d = 0; d < t->rank; d++)
			if (t->dims[d] < 0)
				fail("a tensor with a negative dim", t->name, NULL);
		if (t->begin != covered || t->end < t->begin ||
		    t->end - t->begin != bytes_of(t->dtype, t->rank, t->dims))
			fail("a tensor's offsets are not its bytes, next in the data area", t->name,
			     NULL);
		covered = t->end;
		const f8_safetensors_tensor *found = f8_safetensors_find(file, t->name);
		if (!found || strcmp(found->name, t->name) != 0)
			fail("a listed tensor is not found by its name", t->name, NULL);
	}
	if (data_start + covered != size)
		fail("the tensors do not cover the data area", NULL, NULL);
	if (f8_safetensors_get(file, n) || f8_safetensors_name(file, n))
		fail("a tensor past the count", NULL, NULL);
	size_t n_metadata = f8_safetensors_metadata_count(file);
	for (size_t i = 0; i < n_metadata; i++) {
		const char *key = f8_safetensors_metadata_key(file, i);
		if (!key || !f8_safetensors_metadata(file, key))
			fail("a listed metadata key is not found", key, NULL);
	}
	if (f8_safetensors_metadata_key(file, n_metadata))
		fail("a metadata key past the count", NULL, NULL);
}

/* Reads tensor `t` and holds the result to the file's bytes: `data`, of which the first
 * `present` bytes are still in the file. Returns whether it read; *out is the tensor then. */
static bool read_tensor(const f8_safetensors *file, const f8_safetensors_tensor *t,
			const uint8_t *data, uint64_t data_start, uint64_t present,
			f8_rt_tensor *out) {
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_status status = f8_safetensors_read(file, t->name, out, &diag);
	bool whole = t->end == t->begin || data_start + t->end <= present;
	if (status != F8_OK) {
		check_failure(status, &diag, path, "f8_safetensors_read");
		if (out->data || out->n_bytes || out->rank)
			fail("a failed read left a tensor", t->name, NULL);
		if (status != F8_ERR_NOMEM && (whole || status != F8_ERR_IO))
			fail("a tensor whose bytes are in the file did not read", t->name, &diag);
		return false;
	}
	if (!whole)
		fail("a tensor read bytes the file no longer has", t->name, NULL);
	bool same = out->dtype == t->dtype && out->rank == t->rank && out->owned &&
		    out->n_bytes == t->end - t->begin && f8_rt_tensor_valid(out) &&
		    memcmp(out->dims, t->dims, (size_t)t->rank * sizeof t->dims[0]) == 0;
	if (!same || (out->n_bytes && memcmp(out->data, data + data_start + t->begin,
					     out->n_bytes) != 0))
		fail("a tensor read is not of its dtype and dims, or not the file's bytes", t->name,
		     NULL);
	return true;
}

/* Writes the tensors that read, and the metadata, to again_path, and holds what opens to them. */
static void check_rewrite(const f8_safetensors *file, const f8_rt_tensor *tensors,
			  const bool *read) {
	size_t n = f8_safetensors_count(file), n_metadata = f8_safetensors_metadata_count(file);
	size_t kept = 0;
	const char **names = f8_calloc(n + 1, sizeof *names);
	const f8_rt_tensor **pointers = f8_calloc(n + 1, sizeof *pointers);
	const char **keys = f8_calloc(n_metadata + 1, sizeof *keys);
	const char **values = f8_calloc(n_metadata + 1, sizeof *values);
	if (!names || !pointers || !keys || !values)
		fail("out of memory", NULL, NULL);
	for (size_t i = 0; i < n; i++)
		if (read[i]) {
			names[kept] = f8_safetensors_name(file, i);
			pointers[kept++] = &tensors[i];
		}
	for (size_t i = 0; i < n_metadata; i++) {
		keys[i] = f8_safetensors_metadata_key(file, i);
		values[i] = f8_safetensors_metadata(file, keys[i]);
	}
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_safetensors *again = NULL;
	f8_status status = f8_safetensors_write(again_path, names, pointers, kept, keys, values,
						n_metadata, &diag);
	if (status == F8_OK)
		status = f8_safetensors_open(again_path, &again, &diag);
	if (status != F8_OK)
		fail("the tensors that read do not write and open again", NULL, &diag);
	if (f8_safetensors_count(again) != kept ||
	    f8_safetensors_metadata_count(again) != n_metadata)
		fail("written again, the file lists other tensors or metadata", NULL, NULL);
	for (size_t i = 0; i < n_metadata; i++) {
		const char *value = f8_safetensors_metadata(again, keys[i]);
		if (!value || strcmp(value, values[i]) != 0)
			fail("written again, a metadata value changed", keys[i], NULL);
	}
	for (size_t i = 0; i < kept; i++) {
		f8_rt_tensor back;
		if (f8_safetensors_read(again, names[i], &back, &diag) != F8_OK)
			fail("written again, a tensor does not read", names[i], &diag);
		if (!f8_rt_tensor_same_type(&back, pointers[i]) ||
		    back.n_bytes != pointers[i]->n_bytes ||
		    (back.n_bytes && memcmp(back.data, pointers[i]->data, back.n_bytes) != 0))
			fail("written again, a tensor changed", names[i], NULL);
		f8_rt_tensor_destroy(&back);
	}
	f8_safetensors_close(again);
	f8_free(names);
	f8_free(pointers);
	f8_free(keys);
	f8_free(values);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
	write_or_die(data, size);
	f8_diag diag;
	f8_diag_clear(&diag);
	static int not_opened; // *out before the open: a failed open must set it to NULL
	f8_safetensors *file = (f8_safetensors *)&not_opened;
	f8_status status = f8_safetensors_open(path, &file, &diag);
	if (status != F8_OK) {
		check_failure(status, &diag, path, "f8_safetensors_open");
		if (file)
			fail("an open that failed left a file", NULL, NULL);
		return 0;
	}
	uint64_t header_len = 0;
	for (int i = 7; i >= 0; i--)
		header_len = header_len << 8 | data[i];
	uint64_t data_start = 8 + header_len;
	check_header(file, data_start, size);

	size_t n = f8_safetensors_count(file);
	f8_rt_tensor *tensors = f8_calloc(n + 1, sizeof *tensors);
	bool *read = f8_calloc(n + 1, sizeof *read);
	if (!tensors || !read)
		fail("out of memory", NULL, NULL);
	for (size_t i = 0; i < n; i++)
		read[i] = read_tensor(file, f8_safetensors_get(file, i), data, data_start, size,
				      &tensors[i]);
	const char *absent_name = "\x01 not a tensor of the file";
	f8_rt_tensor absent;
	f8_diag_clear(&diag);
	if (!f8_safetensors_find(file, absent_name) &&
	    (f8_safetensors_read(file, absent_name, &absent, &diag) != F8_ERR_ARGUMENT ||
	     absent.data))
		fail("reading a tensor the file lacks is not F8_ERR_ARGUMENT", NULL, &diag);
	check_rewrite(file, tensors, read);

	// The file shrinks under the open handle: what is gone no longer reads, the rest does.
	if (truncate(path, (off_t)(size / 2)) != 0)
		fail("cannot cut the file", path, NULL);
	for (size_t i = 0; i < n; i++) {
		f8_rt_tensor again;
		if (read_tensor(file, f8_safetensors_get(file, i), data, data_start, size / 2,
				&again))
			f8_rt_tensor_destroy(&again);
		f8_rt_tensor_destroy(&tensors[i]);
	}
	f8_free(tensors);
	f8_free(read);
	f8_safetensors_close(file);
	return 0;
}
