/*
 * Unit tests of the runtime's file formats through their C API: atomic writes (a failed write,
 * a failed rename, an unwritable path: the old file stays and no temporary file is left; the
 * temporary files of killed writers removed by the next write, those of live ones kept), .npy
 * and safetensors round trips of every dtype, token files, the split and the batch sampler;
 * malformed files of every kind (each cut of a good file, bad magic, headers that lie,
 * overlapping offsets, huge headers, negative dims, unknown dtypes) refused with the right
 * status; and allocation failure at every allocation of each reader and writer, which must end
 * in F8_ERR_NOMEM with nothing written (and, in the sanitizer build, nothing leaked).
 *
 * Random contents come from a seed taken from the clock and printed; F8C_TEST_SEED=N repeats.
 *
 * usage: test_formats
 */
#define _POSIX_C_SOURCE 200809L // mkdtemp, setrlimit, chmod

#include <dirent.h>       // opendir, readdir, closedir
#include <fcntl.h>        // open, O_RDONLY
#include <signal.h>       // signal, SIGXFSZ, SIG_IGN
#include <stdint.h>       // uint8_t, uint32_t, uint64_t
#include <stdio.h>        // printf, snprintf, fopen, fwrite
#include <stdlib.h>       // getenv, strtoull, mkdtemp, malloc, free
#include <string.h>       // memcmp, memcpy, strstr, strlen, strcmp
#include <sys/file.h>     // flock, LOCK_EX, LOCK_NB
#include <sys/resource.h> // setrlimit, RLIMIT_FSIZE
#include <sys/stat.h>     // mkdir, stat, chmod
#include <time.h>         // time
#include <unistd.h>       // unlink, rmdir, close

#include "runtime/atomic_file.h" // f8_atomic_file_*
#include "runtime/npy.h"         // f8_npy_read, f8_npy_write
#include "runtime/safetensors.h" // f8_safetensors_*
#include "runtime/tokens.h"      // f8_tokens_*, f8_batch_*
#include "tests/test_support.h"  // CHECK, test_fail_allocations_after, test_read_file

static char folder[256]; // the test's own temporary folder
static uint64_t random_state;

static uint64_t random_next(void) {
	uint64_t z = (random_state += 0x9e3779b97f4a7c15u);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

static void random_bytes(void *data, size_t n) {
	for (size_t i = 0; i < n; i++)
		((uint8_t *)data)[i] = (uint8_t)random_next();
}

/* FOLDER/name in a static buffer of its own per call site's `out`. */
static const char *path_of(char *out, const char *name) {
	snprintf(out, 512, "%s/%s", folder, name);
	return out;
}

static void write_bytes(const char *path, const void *data, size_t n) {
	FILE *file = fopen(path, "wb");
	CHECK(file && fwrite(data, 1, n, file) == n);
	if (file)
		fclose(file);
}

/* The number of entries in the folder; with `temporary`, only names holding ".tmp.". */
static int count_files(bool temporary) {
	DIR *dir = opendir(folder);
	int count = 0;
	for (struct dirent *entry; dir && (entry = readdir(dir));)
		if (strcmp(entry->d_name, ".") && strcmp(entry->d_name, "..") &&
		    (!temporary || strstr(entry->d_name, ".tmp.")))
			count++;
	if (dir)
		closedir(dir);
	return count;
}

/* Removes every file of the folder (it holds no subfolders when this runs). */
static void empty_folder(void) {
	DIR *dir = opendir(folder);
	char path[512];
	for (struct dirent *entry; dir && (entry = readdir(dir));)
		if (strcmp(entry->d_name, ".") && strcmp(entry->d_name, ".."))
			unlink(path_of(path, entry->d_name));
	if (dir)
		closedir(dir);
}

static bool file_is(const char *path, const void *data, size_t n) {
	size_t len = 0;
	char *text = test_read_file(path, &len);
	bool same = text && len == n && memcmp(text, data, n) == 0;
	free(text);
	return same;
}

/* ---- atomic files ------------------------------------------------------------------------ */

/*
 * The temporary files that writers killed with SIGKILL leave: the next write of the same path
 * removes those whose writer is dead (no flock held), and only those: not one a live writer
 * holds locked, not another file's, not a name that only looks like one.
 */
static void test_stale_temps(const char *path) {
	char stale[600], live[600], other[600], odd[600];
	snprintf(stale, sizeof stale, "%s.tmp.Ab3xY9", path);
	snprintf(live, sizeof live, "%s.tmp.Qw7eR2", path);
	snprintf(other, sizeof other, "%s/other.bin.tmp.Ab3xY9", folder);
	snprintf(odd, sizeof odd, "%s.tmp.Ab3xY9.keep", path);
	write_bytes(stale, "torn", 4);
	write_bytes(live, "live", 4);
	write_bytes(other, "other", 5);
	write_bytes(odd, "odd", 3);
	// A live writer: an open file of its own, whose flock conflicts as another process's.
	int held = open(live, O_RDONLY);
	CHECK(held >= 0 && flock(held, LOCK_EX | LOCK_NB) == 0);
	f8_diag diag;
	f8_atomic_file *file;
	CHECK(f8_atomic_file_open(path, &file, &diag) == F8_OK);
	CHECK(f8_atomic_file_write(file, "third", 5, &diag) == F8_OK);
	CHECK(f8_atomic_file_commit(file, &diag) == F8_OK && file_is(path, "third", 5));
	struct stat info;
	CHECK(stat(stale, &info) != 0 && stat(live, &info) == 0 && stat(other, &info) == 0 &&
	      stat(odd, &info) == 0);
	// Once its writer is gone (the lock dropped), the next write takes that one too.
	close(held);
	CHECK(f8_atomic_file_open(path, &file, &diag) == F8_OK);
	f8_atomic_file_abort(file);
	CHECK(stat(live, &info) != 0 && stat(other, &info) == 0 && file_is(path, "third", 5));
	unlink(other);
	unlink(odd);
	CHECK(count_files(true) == 0);
}

static void test_atomic_file(void) {
	char path[512], other[512];
	path_of(path, "atomic.bin");
	f8_diag diag;
	f8_atomic_file *file;
	CHECK(f8_atomic_file_open(path, &file, &diag) == F8_OK);
	fputs("first", f8_atomic_file_stream(file));
	CHECK(count_files(false) == 1 && count_files(true) == 1);
	CHECK(f8_atomic_file_commit(file, &diag) == F8_OK);
	CHECK(file_is(path, "first", 5) && count_files(true) == 0);

	// A replaced file keeps its permissions; an abandoned write leaves the old file.
	chmod(path, 0640);
	CHECK(f8_atomic_file_open(path, &file, &diag) == F8_OK);
	CHECK(f8_atomic_file_write(file, "second", 6, &diag) == F8_OK);
	CHECK(f8_atomic_file_commit(file, &diag) == F8_OK);
	struct stat info;
	CHECK(stat(path, &info) == 0 && (info.st_mode & 0777) == 0640);
	CHECK(f8_atomic_file_open(path, &file, &diag) == F8_OK);
	fputs("never", f8_atomic_file_stream(file));
	f8_atomic_file_abort(file);
	CHECK(file_is(path, "second", 6) && count_files(true) == 0);

	// A folder that is a file: nothing can be made there; the path and strerror are named.
	path_of(other, "atomic.bin/inside");
	f8_diag_clear(&diag);
	CHECK(f8_atomic_file_open(other, &file, &diag) == F8_ERR_IO && !file);
	CHECK(strstr(diag.message, other) && strstr(diag.message, "Not a directory"));
	CHECK(strcmp(diag.file, other) == 0);
	// The path of a folder is refused before anything is written.
	CHECK(f8_atomic_file_open(folder, &file, &diag) == F8_ERR_ARGUMENT);

	// A write that fails half way (the file size limit), through the stream and through
	// f8_atomic_file_write (which keeps errno's reason): the old file stays, no temporary.
	struct rlimit saved, limit;
	getrlimit(RLIMIT_FSIZE, &saved);
	limit = saved;
	limit.rlim_cur = 4096;
	signal(SIGXFSZ, SIG_IGN);
	static char big[1 << 16];
	for (int through_write = 0; through_write < 2; through_write++) {
		CHECK(f8_atomic_file_open(path, &file, &diag) == F8_OK);
		CHECK(setrlimit(RLIMIT_FSIZE, &limit) == 0);
		if (through_write)
			CHECK(f8_atomic_file_write(file, big, sizeof big, &diag) == F8_ERR_IO);
		else
			fwrite(big, 1, sizeof big, f8_atomic_file_stream(file));
		CHECK(f8_atomic_file_commit(file, &diag) == F8_ERR_IO);
		setrlimit(RLIMIT_FSIZE, &saved);
		CHECK(strstr(diag.message, path) != NULL);
		CHECK(!through_write || strstr(diag.message, "File too large"));
		CHECK(file_is(path, "second", 6) && count_files(true) == 0);
	}

	// A rename that fails (PATH became a folder meanwhile): the temporary file is removed.
	path_of(other, "atomic.dir");
	CHECK(f8_atomic_file_open(other, &file, &diag) == F8_OK);
	mkdir(other, 0755);
	char inside[600];
	snprintf(inside, sizeof inside, "%s/x", other);
	write_bytes(inside, "x", 1);
	CHECK(f8_atomic_file_write(file, "data", 4, &diag) == F8_OK);
	CHECK(f8_atomic_file_commit(file, &diag) == F8_ERR_IO && count_files(true) == 0);
	unlink(inside);
	rmdir(other);

	// Out of memory for the handle.
	test_fail_allocations_after(0);
	CHECK(f8_atomic_file_open(path, &file, &diag) == F8_ERR_NOMEM && !file);
	test_allocations_restore();
	CHECK(count_files(true) == 0);
	test_stale_temps(path);
	empty_folder();
}

/* ---- .npy ---------------------------------------------------------------------------------- */

/* The dtypes of both formats, and shapes from rank 0 to F8_MAX_RANK, zero-size included. */
static const f8_dtype npy_dtypes[] = {F8_DTYPE_F64, F8_DTYPE_F32, F8_DTYPE_F16, F8_DTYPE_I64,
				      F8_DTYPE_I32, F8_DTYPE_I8,  F8_DTYPE_U8,  F8_DTYPE_BOOL};
static const struct test_shape {
	int rank;
	int64_t dims[F8_MAX_RANK];
} shapes[] = {{0, {0}},    {1, {7}},          {1, {0}},
	      {2, {3, 5}}, {3, {2, 0, 4}},    {8, {1, 2, 1, 3, 1, 2, 1, 2}},
	      {2, {1000000000, 0}}};

/* A tensor of `dtype` and shape `shape` with random contents (0 or 1 for bool). */
static void random_tensor(f8_dtype dtype, const struct test_shape *shape, f8_rt_tensor *out) {
	f8_diag diag;
	CHECK(f8_rt_tensor_create(dtype, shape->rank, shape->dims, out, &diag) == F8_OK);
	random_bytes(out->data, out->n_bytes);
	if (dtype == F8_DTYPE_BOOL)
		for (size_t i = 0; i < out->n_bytes; i++)
			((uint8_t *)out->data)[i] &= 1;
}

static bool same_tensor(const f8_rt_tensor *a, const f8_rt_tensor *b) {
	return f8_rt_tensor_same_type(a, b) && a->n_bytes == b->n_bytes &&
	       (a->n_bytes == 0 || memcmp(a->data, b->data, a->n_bytes) == 0);
}

static void test_npy_round_trips(void) {
	char path[512];
	path_of(path, "t.npy");
	for (size_t d = 0; d < sizeof npy_dtypes / sizeof npy_dtypes[0]; d++)
		for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
			f8_rt_tensor tensor, back;
			f8_diag diag;
			random_tensor(npy_dtypes[d], &shapes[s], &tensor);
			CHECK(f8_npy_write(path, &tensor, &diag) == F8_OK);
			CHECK(f8_npy_read(path, &back, &diag) == F8_OK);
			CHECK(same_tensor(&tensor, &back));
			size_t len = 0;
			char *bytes = test_read_file(path, &len);
			size_t header = 0;
			if (bytes)
				header = (uint8_t)bytes[8] | (size_t)(uint8_t)bytes[9] << 8;
			CHECK(bytes && bytes[6] == 1 && (10 + header) % 64 == 0 &&
			      bytes[9 + header] == '\n' && len == 10 + header + tensor.n_bytes);
			free(bytes);
			f8_rt_tensor_destroy(&tensor);
			f8_rt_tensor_destroy(&back);
		}
	// Types .npy has no descr for: refused, nothing written.
	const f8_dtype refused[] = {F8_DTYPE_BF16, F8_DTYPE_E4M3, F8_DTYPE_E5M2, F8_DTYPE_E8M0};
	unlink(path);
	for (int i = 0; i < 4; i++) {
		f8_rt_tensor tensor;
		f8_diag diag;
		f8_diag_clear(&diag);
		random_tensor(refused[i], &shapes[1], &tensor);
		CHECK(f8_npy_write(path, &tensor, &diag) == F8_ERR_UNSUPPORTED);
		CHECK(strstr(diag.hint, "f32") != NULL && count_files(false) == 0);
		f8_rt_tensor_destroy(&tensor);
	}
	// A tensor whose bytes disagree with its dims.
	f8_rt_tensor tensor, lying;
	f8_diag diag;
	random_tensor(F8_DTYPE_F32, &shapes[3], &tensor);
	lying = tensor;
	lying.dims[0] = 4;
	CHECK(f8_npy_write(path, &lying, &diag) == F8_ERR_ARGUMENT && count_files(false) == 0);
	f8_rt_tensor_destroy(&tensor);
}

/* Writes a .npy file of version `major` with the header `dict` and `data` bytes of zeros. */
static void npy_file(const char *path, int major, const char *dict, size_t data) {
	static uint8_t bytes[4096];
	size_t prefix = major == 1 ? 10 : 12, len = strlen(dict);
	size_t header = len + 1 + (64 - (prefix + len + 1) % 64) % 64;
	memcpy(bytes, "\x93NUMPY", 6);
	bytes[6] = (uint8_t)major, bytes[7] = 0;
	for (size_t i = 0; i < prefix - 8; i++)
		bytes[8 + i] = (uint8_t)(header >> (8 * i));
	memset(bytes + prefix, ' ', header);
	memcpy(bytes + prefix, dict, len);
	bytes[prefix + header - 1] = '\n';
	memset(bytes + prefix + header, 0, data);
	write_bytes(path, bytes, prefix + header + data);
}

/* Reads `path` expecting `status`; on failure, also that the diagnostic names the file. */
static void expect_npy(const char *path, f8_status status, const char *words) {
	f8_rt_tensor tensor;
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_status got = f8_npy_read(path, &tensor, &diag);
	CHECK(got == status);
	if (got != status)
		printf("  got %d (%s), expected %d\n", got, diag.message, status);
	if (status) {
		CHECK(strcmp(diag.file, path) == 0 && !tensor.data);
		CHECK(!words || strstr(diag.message, words));
		if (words && !strstr(diag.message, words))
			printf("  message: %s\n", diag.message);
	}
	f8_rt_tensor_destroy(&tensor);
}

static void test_npy_malformed(void) {
	char path[512];
	path_of(path, "m.npy");
	static const struct {
		int major;
		const char *dict;
		size_t data;
		f8_status status;
		const char *words;
	} cases[] = {
		{1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", 48, F8_OK, NULL},
		{2, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", 48, F8_OK, NULL},
		{3, "{\"shape\": (3, 4,), \"descr\": \"=f4\", \"fortran_order\": False}", 48, F8_OK,
		 NULL},
		{1, "{'descr': '|u1', 'fortran_order': False, 'shape': (5L,), }", 5, F8_OK, NULL},
		{1, "{'descr': '>i1', 'fortran_order': False, 'shape': (), }", 1, F8_OK, NULL},
		{1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", 47, F8_ERR_PARSE,
		 "torn"},
		{1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", 49, F8_ERR_PARSE,
		 "longer"},
		{1, "{'descr': '>f4', 'fortran_order': False, 'shape': (3,), }", 12,
		 F8_ERR_UNSUPPORTED, "big-endian"},
		{1, "{'descr': '<f4', 'fortran_order': True, 'shape': (3,), }", 12,
		 F8_ERR_UNSUPPORTED, "Fortran"},
		{1, "{'descr': '|O', 'fortran_order': False, 'shape': (3,), }", 24,
		 F8_ERR_UNSUPPORTED, "objects"},
		{1, "{'descr': '<V2', 'fortran_order': False, 'shape': (3,), }", 6,
		 F8_ERR_UNSUPPORTED, "opaque"},
		{1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,), }", 12,
		 F8_ERR_UNSUPPORTED, "structured"},
		{1, "{'descr': '<u2', 'fortran_order': False, 'shape': (3,), }", 6,
		 F8_ERR_UNSUPPORTED, "no f8c type"},
		{1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-3,), }", 0, F8_ERR_PARSE,
		 "negative"},
		{1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", 4,
		 F8_ERR_UNSUPPORTED, "more than 8"},
		{1, "{'descr': '<f4', 'fortran_order': False, }", 4, F8_ERR_PARSE, "shape"},
		{1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (), }", 4,
		 F8_ERR_PARSE, "once"},
		{1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), 'x': 1}", 4,
		 F8_ERR_PARSE, "key"},
		{1, "{'descr': '<f4', 'fortran_order': False, 'shape': (5), }", 20, F8_ERR_PARSE,
		 "tuple"},
		{1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, "
		    "4294967296), }", 0, F8_ERR_PARSE, "more elements"},
		{1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }",
		 0, F8_ERR_PARSE, "too large"},
		{1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), } x", 4, F8_ERR_PARSE,
		 "end of the header"},
		{1, "{'descr' '<f4', 'fortran_order': False, 'shape': (), }", 4, F8_ERR_PARSE,
		 "expected ':'"},
		{1, "[1, 2]", 0, F8_ERR_PARSE, "'{'"},
		{1, "{'descr': '<f4', 'fortran_order': None, 'shape': (), }", 4, F8_ERR_PARSE,
		 "True or False"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		npy_file(path, cases[i].major, cases[i].dict, cases[i].data);
		expect_npy(path, cases[i].status, cases[i].words);
	}
	// Every cut of a good file is refused as malformed, never read.
	npy_file(path, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", 48);
	size_t len = 0;
	char *whole = test_read_file(path, &len);
	for (size_t cut = 0; whole && cut < len; cut++) {
		write_bytes(path, whole, cut);
		expect_npy(path, F8_ERR_PARSE, NULL);
	}
	// Bad magic, an unknown version, a header longer than the file, a huge header.
	whole[1] = 'X';
	write_bytes(path, whole, len);
	expect_npy(path, F8_ERR_PARSE, "not a .npy file");
	whole[1] = 'N', whole[6] = 4;
	write_bytes(path, whole, len);
	expect_npy(path, F8_ERR_UNSUPPORTED, "version");
	whole[6] = 1, whole[8] = (char)0xff, whole[9] = 0x7f;
	write_bytes(path, whole, len);
	expect_npy(path, F8_ERR_PARSE, "torn");
	free(whole);
	static const uint8_t huge[16] = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0,
					 0xff, 0xff, 0xff, 0xff};
	write_bytes(path, huge, sizeof huge);
	expect_npy(path, F8_ERR_PARSE, "more than");
	expect_npy(folder, F8_ERR_IO, "not a regular file");
	unlink(path);
	expect_npy(path, F8_ERR_IO, "No such file");
}

static void test_npy_allocation_failure(void) {
	char path[512], other[512];
	path_of(path, "a.npy");
	path_of(other, "b.npy");
	f8_rt_tensor tensor, back;
	f8_diag diag;
	random_tensor(F8_DTYPE_I32, &shapes[3], &tensor);
	CHECK(f8_npy_write(path, &tensor, &diag) == F8_OK);
	for (long n = 0;; n++) {
		test_fail_allocations_after(n);
		f8_status read = f8_npy_read(path, &back, &diag);
		test_allocations_restore();
		if (read == F8_OK) {
			CHECK(same_tensor(&tensor, &back));
			f8_rt_tensor_destroy(&back);
			break;
		}
		CHECK(read == F8_ERR_NOMEM && !back.data);
	}
	for (long n = 0;; n++) {
		test_fail_allocations_after(n);
		f8_status write = f8_npy_write(other, &tensor, &diag);
		test_allocations_restore();
		if (write == F8_OK)
			break;
		CHECK(write == F8_ERR_NOMEM && count_files(false) == 1);
	}
	f8_rt_tensor_destroy(&tensor);
	empty_folder();
}

/* ---- safetensors -------------------------------------------------------------------------- */

static void test_safetensors_round_trip(void) {
	static const f8_dtype dtypes[] = {F8_DTYPE_F64,  F8_DTYPE_F32,  F8_DTYPE_F16,
					  F8_DTYPE_BF16, F8_DTYPE_I64,  F8_DTYPE_I32,
					  F8_DTYPE_I8,   F8_DTYPE_U8,   F8_DTYPE_BOOL,
					  F8_DTYPE_E4M3, F8_DTYPE_E5M2, F8_DTYPE_E8M0};
	enum { N_DTYPES = sizeof dtypes / sizeof dtypes[0], N = N_DTYPES + 3 };
	f8_rt_tensor tensors[N];
	const f8_rt_tensor *pointers[N];
	char name_text[N][32];
	const char *names[N];
	for (int i = 0; i < N; i++) {
		f8_dtype dtype = i < N_DTYPES ? dtypes[i] : F8_DTYPE_F32;
		// after the dtypes: a scalar, a zero-size tensor, a name beyond ASCII
		const struct test_shape *shape = i == N_DTYPES ? &shapes[0]
						 : i == N_DTYPES + 1 ? &shapes[4]
								     : &shapes[(size_t)i % 4 + 1];
		random_tensor(dtype, shape, &tensors[i]);
		pointers[i] = &tensors[i];
		snprintf(name_text[i], sizeof name_text[i], i == N - 1 ? "größe.%d" : "layer.%d",
			 N - i);
		names[i] = name_text[i];
	}
	const char *keys[] = {"format", "note"}, *values[] = {"pt", "ünïcode \"quoted\"\n"};
	char path[512];
	path_of(path, "t.safetensors");
	f8_diag diag;
	CHECK(f8_safetensors_write(path, names, pointers, N, keys, values, 2, &diag) == F8_OK);
	size_t len = 0;
	char *bytes = test_read_file(path, &len);
	uint64_t header = 0;
	for (int i = 7; bytes && i >= 0; i--)
		header = header << 8 | (uint8_t)bytes[i];
	CHECK(bytes && header % 8 == 0 && bytes[8] == '{' && 8 + header <= len);
	free(bytes);

	f8_safetensors *file;
	CHECK(f8_safetensors_open(path, &file, &diag) == F8_OK);
	if (!file)
		return;
	CHECK(f8_safetensors_count(file) == N);
	for (int i = 0; i < N; i++) {
		CHECK(strcmp(f8_safetensors_name(file, (size_t)i), names[i]) == 0); // data order
		const f8_safetensors_tensor *t = f8_safetensors_find(file, names[i]);
		CHECK(t && t->dtype == tensors[i].dtype && t->rank == tensors[i].rank);
		f8_rt_tensor back;
		CHECK(f8_safetensors_read(file, names[i], &back, &diag) == F8_OK);
		CHECK(same_tensor(&tensors[i], &back));
		f8_rt_tensor_destroy(&back);
	}
	CHECK(!f8_safetensors_find(file, "layer.0") && !f8_safetensors_find(file, ""));
	f8_rt_tensor none;
	CHECK(f8_safetensors_read(file, "missing", &none, &diag) == F8_ERR_ARGUMENT && !none.data);
	CHECK(strcmp(f8_safetensors_metadata(file, "note"), values[1]) == 0);
	CHECK(!f8_safetensors_metadata(file, "nothing"));
	CHECK(f8_safetensors_metadata_count(file) == 2);
	CHECK(strcmp(f8_safetensors_metadata_key(file, 0), "format") == 0);
	f8_safetensors_close(file);

	// An empty file: no tensors, no metadata.
	CHECK(f8_safetensors_write(path, NULL, NULL, 0, NULL, NULL, 0, &diag) == F8_OK);
	CHECK(file_is(path, "\x08\0\0\0\0\0\0\0{}      ", 16));
	CHECK(f8_safetensors_open(path, &file, &diag) == F8_OK && f8_safetensors_count(file) == 0);
	f8_safetensors_close(file);

	// What the writer refuses, leaving the old file.
	const char *twice[] = {"a", "a"}, *reserved[] = {"__metadata__"}, *bad_utf8[] = {"\xff"};
	const char *key_twice[] = {"k", "k"};
	CHECK(f8_safetensors_write(path, twice, pointers, 2, NULL, NULL, 0, &diag) ==
	      F8_ERR_ARGUMENT);
	CHECK(f8_safetensors_write(path, reserved, pointers, 1, NULL, NULL, 0, &diag) ==
	      F8_ERR_ARGUMENT);
	CHECK(f8_safetensors_write(path, bad_utf8, pointers, 1, NULL, NULL, 0, &diag) ==
	      F8_ERR_ARGUMENT);
	CHECK(f8_safetensors_write(path, names, pointers, 1, key_twice, key_twice, 2, &diag) ==
	      F8_ERR_ARGUMENT);
	f8_rt_tensor lying = tensors[1];
	lying.n_bytes++;
	const f8_rt_tensor *lying_pointer = &lying;
	CHECK(f8_safetensors_write(path, names, &lying_pointer, 1, NULL, NULL, 0, &diag) ==
	      F8_ERR_ARGUMENT);
	CHECK(file_is(path, "\x08\0\0\0\0\0\0\0{}      ", 16) && count_files(false) == 1);
	for (int i = 0; i < N; i++)
		f8_rt_tensor_destroy(&tensors[i]);
	empty_folder();
}

/*
 * Writes a safetensors file: the length `n` (the JSON's own when 0), `json` with its single
 * quotes made double (so that the cases below read as JSON without escapes), `data` zero bytes.
 */
static void st_file(const char *path, uint64_t n, const char *json, size_t data) {
	static uint8_t bytes[4096];
	size_t len = strlen(json);
	if (!n)
		n = len;
	for (int i = 0; i < 8; i++)
		bytes[i] = (uint8_t)(n >> (8 * i));
	for (size_t i = 0; i < len; i++)
		bytes[8 + i] = json[i] == '\'' ? '"' : (uint8_t)json[i];
	memset(bytes + 8 + len, 0, data);
	write_bytes(path, bytes, 8 + len + data);
}

static void expect_st(const char *path, f8_status status, const char *words) {
	f8_safetensors *file = NULL;
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_status got = f8_safetensors_open(path, &file, &diag);
	CHECK(got == status);
	if (got != status)
		printf("  got %d (%s), expected %d\n", got, diag.message, status);
	if (status) {
		CHECK(!file && strcmp(diag.file, path) == 0);
		CHECK(!words || strstr(diag.message, words));
		if (words && !strstr(diag.message, words))
			printf("  message: %s\n", diag.message);
	}
	f8_safetensors_close(file);
}

static void test_safetensors_malformed(void) {
	char path[512];
	path_of(path, "m.safetensors");
	static const struct {
		const char *json;
		size_t data;
		f8_status status;
		const char *words;
	} cases[] = {
		{"{'a':{'dtype':'F32','shape':[2],'data_offsets':[0,8]}}", 8, F8_OK, NULL},
		{"{'a':{'dtype':'F32','shape':[2],'data_offsets':[0,8]}}   ", 8, F8_OK,
		 NULL},
		{"{'z':{'dtype':'U8','shape':[0],'data_offsets':[8,8]},"
		 "'a':{'dtype':'F32','shape':[2],'data_offsets':[0,8]}}", 8, F8_OK, NULL},
		{"{'a':{'dtype':'F32','shape':[2],'data_offsets':[0,8]}}", 7, F8_ERR_PARSE,
		 "torn"},
		{"{'a':{'dtype':'F32','shape':[2],'data_offsets':[0,8]}}", 9, F8_ERR_PARSE,
		 "cover"},
		{"{'a':{'dtype':'F32','shape':[2],'data_offsets':[0,8]},"
		 "'b':{'dtype':'F32','shape':[2],'data_offsets':[4,12]}}", 12, F8_ERR_PARSE,
		 "overlap"},
		{"{'a':{'dtype':'F32','shape':[2],'data_offsets':[4,12]}}", 12, F8_ERR_PARSE,
		 "no tensor"},
		{"{'a':{'dtype':'F32','shape':[2],'data_offsets':[0,8]},"
		 "'a':{'dtype':'F32','shape':[2],'data_offsets':[8,16]}}", 16, F8_ERR_PARSE,
		 "twice"},
		{"{'a':{'dtype':'F32','shape':[-2],'data_offsets':[0,8]}}", 8, F8_ERR_PARSE,
		 "negative"},
		{"{'a':{'dtype':'F7','shape':[2],'data_offsets':[0,8]}}", 8, F8_ERR_PARSE,
		 "unknown dtype F7"},
		{"{'a':{'dtype':'U16','shape':[2],'data_offsets':[0,4]}}", 4,
		 F8_ERR_UNSUPPORTED, "U16"},
		{"{'a':{'dtype':'F32','shape':[3],'data_offsets':[0,8]}}", 8, F8_ERR_PARSE,
		 "disagrees"},
		{"{'a':{'dtype':'F32','shape':[1,1,1,1,1,1,1,1,2],'data_offsets':[0,8]}}", 8,
		 F8_ERR_UNSUPPORTED, "dims"},
		{"{'a':{'dtype':'F32','shape':[2],'data_offsets':[8,0]}}", 8, F8_ERR_PARSE,
		 "BEGIN <= END"},
		{"{'a':{'dtype':'F32','shape':[2],'data_offsets':[0,8],'x':1}}", 8,
		 F8_ERR_PARSE, "exactly"},
		{"{'a':{'dtype':'F32','shape':[2.0],'data_offsets':[0,8]}}", 8, F8_ERR_PARSE,
		 "integers"},
		{"{'a':{'dtype':'F32','shape':[4294967296,4294967296],'data_offsets':[0,8]}}",
		 8, F8_ERR_PARSE, "more elements"},
		{"{'__metadata__':{'k':1}}", 0, F8_ERR_PARSE, "not a string"},
		{"{'__metadata__':[]}", 0, F8_ERR_PARSE, "not an object"},
		{"{'__metadata__':null}", 0, F8_OK, NULL},
		{"{'a':{'dtype':'F32','shape':[2],'data_offsets':[0,8]}", 8, F8_ERR_PARSE,
		 "not valid JSON"},
		{"{'\xff':{'dtype':'U8','shape':[1],'data_offsets':[0,1]}}", 1, F8_ERR_PARSE,
		 "not valid JSON"},
		{"[1, 2, 3]", 0, F8_ERR_PARSE, "not a safetensors file"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		st_file(path, 0, cases[i].json, cases[i].data);
		expect_st(path, cases[i].status, cases[i].words);
	}
	// Tensors in the order of their data; those of no bytes at one offset as in the header.
	st_file(path, 0, "{'c':{'dtype':'U8','shape':[1],'data_offsets':[0,1]},"
		"'b':{'dtype':'U8','shape':[0],'data_offsets':[0,0]},"
		"'a':{'dtype':'I8','shape':[0,2],'data_offsets':[0,0]}}", 1);
	f8_safetensors *ordered;
	f8_diag order_diag;
	CHECK(f8_safetensors_open(path, &ordered, &order_diag) == F8_OK);
	CHECK(ordered && strcmp(f8_safetensors_name(ordered, 0), "b") == 0 &&
	      strcmp(f8_safetensors_name(ordered, 1), "a") == 0 &&
	      strcmp(f8_safetensors_name(ordered, 2), "c") == 0 &&
	      !f8_safetensors_name(ordered, 3) && !f8_safetensors_get(ordered, 3));
	f8_safetensors_close(ordered);
	// Every cut of a good file; a cut inside the data or the JSON is "torn".
	const char *good = "{'__metadata__':{'k':'v'},"
			   "'a':{'dtype':'BF16','shape':[2,2],'data_offsets':[0,8]}}";
	st_file(path, 0, good, 8);
	size_t len = 0;
	char *whole = test_read_file(path, &len);
	for (size_t cut = 0; whole && cut < len; cut++) {
		write_bytes(path, whole, cut);
		expect_st(path, F8_ERR_PARSE, cut >= 8 ? "torn" : "not a safetensors file");
	}
	free(whole);
	// Foreign files and lengths no safetensors file has.
	st_file(path, F8_SAFETENSORS_HEADER_MAX + 1ull, "{}", 0);
	expect_st(path, F8_ERR_PARSE, "more than");
	st_file(path, 1ull << 62, "{}", 0);
	expect_st(path, F8_ERR_PARSE, "not a safetensors file");
	npy_file(path, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", 48);
	f8_diag diag;
	f8_safetensors *file;
	CHECK(f8_safetensors_open(path, &file, &diag) == F8_ERR_PARSE &&
	      strstr(diag.hint, "NumPy") != NULL);
	expect_st(folder, F8_ERR_IO, "not a regular file");
	unlink(path);
	expect_st(path, F8_ERR_IO, "No such file");
}

static void test_safetensors_allocation_failure(void) {
	char path[512], other[512];
	path_of(path, "a.safetensors");
	path_of(other, "b.safetensors");
	f8_rt_tensor tensors[3];
	const f8_rt_tensor *pointers[3] = {&tensors[0], &tensors[1], &tensors[2]};
	const char *names[] = {"w", "b", "scale"}, *keys[] = {"k"}, *values[] = {"v"};
	random_tensor(F8_DTYPE_BF16, &shapes[3], &tensors[0]);
	random_tensor(F8_DTYPE_F32, &shapes[1], &tensors[1]);
	random_tensor(F8_DTYPE_E4M3, &shapes[5], &tensors[2]);
	f8_diag diag;
	CHECK(f8_safetensors_write(path, names, pointers, 3, keys, values, 1, &diag) == F8_OK);
	for (long n = 0;; n++) {
		f8_safetensors *file;
		test_fail_allocations_after(n);
		f8_status status = f8_safetensors_open(path, &file, &diag);
		f8_rt_tensor back = {0};
		if (!status) {
			status = f8_safetensors_read(file, "w", &back, &diag);
			f8_safetensors_close(file);
		}
		test_allocations_restore();
		if (status == F8_OK) {
			CHECK(same_tensor(&tensors[0], &back));
			f8_rt_tensor_destroy(&back);
			break;
		}
		CHECK(status == F8_ERR_NOMEM && !back.data);
		if (status != F8_ERR_NOMEM)
			printf("  allocation %ld: %s\n", n, diag.message);
	}
	for (long n = 0;; n++) {
		test_fail_allocations_after(n);
		f8_status status = f8_safetensors_write(other, names, pointers, 3, keys, values, 1,
							&diag);
		test_allocations_restore();
		if (status == F8_OK)
			break;
		CHECK(status == F8_ERR_NOMEM && count_files(false) == 1);
		if (status != F8_ERR_NOMEM)
			printf("  allocation %ld: %s\n", n, diag.message);
	}
	size_t len_a = 0, len_b = 0;
	char *a = test_read_file(path, &len_a), *b = test_read_file(other, &len_b);
	CHECK(a && b && len_a == len_b && memcmp(a, b, len_a) == 0);
	free(a);
	free(b);
	for (int i = 0; i < 3; i++)
		f8_rt_tensor_destroy(&tensors[i]);
	empty_folder();
}

/* ---- tokens -------------------------------------------------------------------------------- */

/* Writes an llm.c header (magic, version, count) and `n` tokens of `size` bytes. */
static void llmc_file(const char *path, int32_t magic, int32_t version, int32_t count,
		      const uint32_t *tokens, size_t n, int size) {
	static uint8_t bytes[1024 + 4 * 4096];
	memset(bytes, 0, 1024);
	int32_t header[3] = {magic, version, count};
	for (int i = 0; i < 12; i++)
		bytes[i] = (uint8_t)((uint32_t)header[i / 4] >> (8 * (i % 4)));
	for (size_t i = 0; i < n * (size_t)size; i++)
		bytes[1024 + i] = (uint8_t)(tokens[i / (size_t)size] >> (8 * (i % (size_t)size)));
	write_bytes(path, bytes, 1024 + n * (size_t)size);
}

static void expect_tokens(const char *path, f8_token_format format, f8_status status,
			  const char *words) {
	f8_tokens tokens;
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_status got = f8_tokens_load(path, format, &tokens, &diag);
	CHECK(got == status);
	if (got != status)
		printf("  got %d (%s), expected %d\n", got, diag.message, status);
	if (status) {
		CHECK(!tokens.tokens && strcmp(diag.file, path) == 0);
		CHECK(!words || strstr(diag.message, words) || strstr(diag.hint, words));
		if (words && !strstr(diag.message, words) && !strstr(diag.hint, words))
			printf("  message: %s / %s\n", diag.message, diag.hint);
	}
	f8_tokens_destroy(&tokens);
}

static void test_token_files(void) {
	enum { N = 3000 };
	static uint32_t tokens[N];
	for (int i = 0; i < N; i++)
		tokens[i] = (uint32_t)(random_next() % 65536);
	char path[512];
	path_of(path, "t.bin");
	f8_diag diag;
	CHECK(f8_tokens_write_llmc(path, tokens, N, &diag) == F8_OK);
	size_t len = 0;
	uint8_t *bytes = (uint8_t *)test_read_file(path, &len);
	CHECK(bytes && len == 1024 + 2 * N && bytes[0] == 0x88 && bytes[1] == 0xd8 &&
	      bytes[2] == 0x34 && bytes[3] == 0x01 && bytes[4] == 1 &&
	      bytes[8] == (N & 0xff) && bytes[9] == N >> 8 && bytes[12] == 0 && bytes[1023] == 0);
	free(bytes);
	for (int format = F8_TOKEN_FORMAT_AUTO; format <= F8_TOKEN_FORMAT_LLMC; format++) {
		f8_tokens back;
		CHECK(f8_tokens_load(path, (f8_token_format)format, &back, &diag) == F8_OK);
		CHECK(back.n == N && memcmp(back.tokens, tokens, sizeof tokens) == 0);
		f8_tokens_destroy(&back);
	}
	// Raw files, and llm.c's uint32 (Llama 3) files.
	const struct {
		f8_token_format format;
		int size;
		int32_t magic;
	} raw[] = {{F8_TOKEN_FORMAT_UINT16, 2, 0},
		   {F8_TOKEN_FORMAT_UINT32, 4, 0},
		   {F8_TOKEN_FORMAT_AUTO, 4, F8_TOKENS_LLMC_MAGIC_UINT32}};
	for (int r = 0; r < 3; r++) {
		for (int i = 0; i < N; i++)
			tokens[i] = (uint32_t)(random_next() >> (r ? 32 : 48));
		if (raw[r].magic) {
			llmc_file(path, raw[r].magic, F8_TOKENS_LLMC_VERSION_UINT32, N, tokens, N,
				  4);
		} else {
			static uint8_t data[4 * N];
			for (size_t i = 0; i < (size_t)N * (size_t)raw[r].size; i++)
				data[i] = (uint8_t)(tokens[i / (size_t)raw[r].size] >>
						    (8 * (i % (size_t)raw[r].size)));
			write_bytes(path, data, (size_t)N * (size_t)raw[r].size);
		}
		f8_tokens back;
		CHECK(f8_tokens_load(path, raw[r].format, &back, &diag) == F8_OK);
		CHECK(back.n == N && memcmp(back.tokens, tokens, sizeof tokens) == 0);
		f8_tokens_destroy(&back);
		if (!raw[r].magic) // a raw file has nothing to know its format by
			expect_tokens(path, F8_TOKEN_FORMAT_AUTO, F8_ERR_PARSE,
				      "--data-format uint16|uint32");
	}
	// Malformed files.
	llmc_file(path, F8_TOKENS_LLMC_MAGIC, 1, 10, tokens, 9, 2);
	expect_tokens(path, F8_TOKEN_FORMAT_AUTO, F8_ERR_PARSE, "torn");
	llmc_file(path, F8_TOKENS_LLMC_MAGIC, 1, 10, tokens, 11, 2);
	expect_tokens(path, F8_TOKEN_FORMAT_LLMC, F8_ERR_PARSE, "header says 10 tokens");
	llmc_file(path, F8_TOKENS_LLMC_MAGIC, 2, 10, tokens, 10, 2);
	expect_tokens(path, F8_TOKEN_FORMAT_AUTO, F8_ERR_UNSUPPORTED, "version 2");
	llmc_file(path, F8_TOKENS_LLMC_MAGIC, 1, -1, tokens, 0, 2);
	expect_tokens(path, F8_TOKEN_FORMAT_AUTO, F8_ERR_PARSE, "negative");
	llmc_file(path, 12345, 1, 10, tokens, 10, 2);
	expect_tokens(path, F8_TOKEN_FORMAT_LLMC, F8_ERR_PARSE, "not an llm.c token file");
	write_bytes(path, "\x88\xd8\x34\x01", 4); // the magic alone
	expect_tokens(path, F8_TOKEN_FORMAT_AUTO, F8_ERR_PARSE, "torn");
	write_bytes(path, "abc", 3);
	expect_tokens(path, F8_TOKEN_FORMAT_UINT16, F8_ERR_PARSE, "multiple of 2");
	expect_tokens(path, F8_TOKEN_FORMAT_UINT32, F8_ERR_PARSE, "multiple of 4");
	expect_tokens(path, F8_TOKEN_FORMAT_AUTO, F8_ERR_PARSE, "--data-format");
	write_bytes(path, "", 0);
	expect_tokens(path, F8_TOKEN_FORMAT_UINT16, F8_OK, NULL);
	unlink(path);
	expect_tokens(path, F8_TOKEN_FORMAT_AUTO, F8_ERR_IO, "No such file");

	// The writer refuses tokens beyond 16 bits, naming the first, and writes nothing.
	uint32_t wide[4] = {1, 2, 65536, 70000};
	f8_diag_clear(&diag);
	CHECK(f8_tokens_write_llmc(path, wide, 4, &diag) == F8_ERR_ARGUMENT);
	CHECK(strstr(diag.message, "65536 at position 2") && count_files(false) == 0);
	// The vocabulary check names the first token out of range.
	f8_tokens held = {wide, 4};
	CHECK(f8_tokens_check_vocab(&held, 70001, &diag) == F8_OK);
	CHECK(f8_tokens_check_vocab(&held, 50257, &diag) == F8_ERR_INVALID);
	CHECK(strstr(diag.message, "65536 at position 2") && strstr(diag.message, "50257"));
	// Allocation failure while loading and writing.
	for (int i = 0; i < N; i++)
		tokens[i] &= 0xffff;
	CHECK(f8_tokens_write_llmc(path, tokens, N, &diag) == F8_OK);
	for (long n = 0;; n++) {
		f8_tokens back;
		test_fail_allocations_after(n);
		f8_status status = f8_tokens_load(path, F8_TOKEN_FORMAT_AUTO, &back, &diag);
		test_allocations_restore();
		f8_tokens_destroy(&back);
		if (status == F8_OK)
			break;
		CHECK(status == F8_ERR_NOMEM);
	}
	char other[512];
	path_of(other, "u.bin");
	for (long n = 0;; n++) {
		test_fail_allocations_after(n);
		f8_status status = f8_tokens_write_llmc(other, tokens, N, &diag);
		test_allocations_restore();
		if (status == F8_OK)
			break;
		CHECK(status == F8_ERR_NOMEM && count_files(false) == 1);
	}
	empty_folder();
}

static bool same_ranges(const f8_token_range *got, const size_t *ends, int n) {
	size_t begin = 0;
	for (int i = 0; i < n; i++) {
		if (got[i].begin != begin || got[i].end != ends[i])
			return false;
		begin = ends[i];
	}
	return true;
}

static void test_split(void) {
	f8_token_range ranges[3];
	f8_diag diag;
	CHECK(f8_tokens_split(1000, (const double[]){969, 30, 1}, 3, ranges, &diag) == F8_OK);
	CHECK(same_ranges(ranges, (const size_t[]){969, 999, 1000}, 3));
	CHECK(f8_tokens_split(10, (const double[]){0.9, 0.1}, 2, ranges, &diag) == F8_OK);
	CHECK(same_ranges(ranges, (const size_t[]){9, 10}, 2));
	// Rounding half to even, then every end moved so that the last is n (Megatron's).
	CHECK(f8_tokens_split(5, (const double[]){0.1, 0.45, 0.45}, 3, ranges, &diag) == F8_OK);
	CHECK(same_ranges(ranges, (const size_t[]){1, 3, 5}, 3));
	// Where Megatron's arithmetic would give a negative range: empty.
	CHECK(f8_tokens_split(3, (const double[]){0, 1, 1}, 3, ranges, &diag) == F8_OK);
	CHECK(same_ranges(ranges, (const size_t[]){0, 1, 3}, 3));
	CHECK(f8_tokens_split(0, (const double[]){1, 1}, 2, ranges, &diag) == F8_OK);
	CHECK(same_ranges(ranges, (const size_t[]){0, 0}, 2));
	CHECK(f8_tokens_split(9, (const double[]){1, -1}, 2, ranges, &diag) == F8_ERR_ARGUMENT);
	CHECK(f8_tokens_split(9, (const double[]){0, 0}, 2, ranges, &diag) == F8_ERR_ARGUMENT);
	CHECK(f8_tokens_split(9, (const double[]){1}, 1, ranges, &diag) == F8_ERR_ARGUMENT);
}

/* Checks that each row of a batch is a window of `tokens` inside `range`, labels one on. */
static bool windows_ok(const f8_tokens *tokens, f8_token_range range, const int64_t *inputs,
		       const int64_t *labels, size_t batch, size_t seq) {
	for (size_t row = 0; row < batch; row++) {
		bool found = false;
		for (size_t o = range.begin; !found && o + seq < range.end; o++) {
			found = true;
			for (size_t j = 0; found && j < seq; j++)
				found = inputs[row * seq + j] == tokens->tokens[o + j] &&
					labels[row * seq + j] == tokens->tokens[o + j + 1];
		}
		if (!found)
			return false;
	}
	return true;
}

static void test_sampler(void) {
	enum { N = 500, BATCH = 4, SEQ = 16, STEPS = 5 };
	static uint32_t data[N];
	for (int i = 0; i < N; i++)
		data[i] = (uint32_t)i; // every window is told apart by its first token
	f8_tokens tokens = {data, N};
	f8_token_range range = {100, 300};
	static int64_t inputs[STEPS][BATCH * SEQ], labels[STEPS][BATCH * SEQ];
	int64_t again_inputs[BATCH * SEQ], again_labels[BATCH * SEQ];
	f8_batch_sampler sampler, resumed, eval;
	f8_diag diag;
	f8_batch_sampler_init(&sampler, &tokens, 1234);
	uint64_t saved = 0;
	bool starts_seen[N] = {0};
	for (int step = 0; step < STEPS; step++) {
		if (step == 2)
			saved = sampler.state;
		CHECK(f8_batch_sample(&sampler, range, BATCH, SEQ, inputs[step], labels[step],
				      &diag) == F8_OK);
		CHECK(windows_ok(&tokens, range, inputs[step], labels[step], BATCH, SEQ));
		for (int row = 0; row < BATCH; row++)
			starts_seen[(size_t)inputs[step][row * SEQ]] = true;
	}
	int distinct = 0;
	for (int i = 0; i < N; i++)
		distinct += starts_seen[i];
	CHECK(distinct > BATCH * STEPS / 2); // random starts, not one window over and over
	// Resuming from a saved state continues bit for bit.
	f8_batch_sampler_init(&resumed, &tokens, 1234);
	resumed.state = saved;
	for (int step = 2; step < STEPS; step++) {
		CHECK(f8_batch_sample(&resumed, range, BATCH, SEQ, again_inputs, again_labels,
				      &diag) == F8_OK);
		CHECK(memcmp(again_inputs, inputs[step], sizeof again_inputs) == 0 &&
		      memcmp(again_labels, labels[step], sizeof again_labels) == 0);
	}
	CHECK(resumed.state == sampler.state);
	// The eval sampler gives the same batches after each rewind, and leaves training alone.
	f8_batch_sampler_init_eval(&eval, &tokens);
	uint64_t training_state = sampler.state;
	CHECK(f8_batch_sample(&eval, range, BATCH, SEQ, inputs[0], labels[0], &diag) == F8_OK);
	f8_batch_sampler_rewind(&eval);
	CHECK(f8_batch_sample(&eval, range, BATCH, SEQ, again_inputs, again_labels, &diag) ==
	      F8_OK);
	CHECK(memcmp(again_inputs, inputs[0], sizeof again_inputs) == 0);
	CHECK(sampler.state == training_state && eval.seed == F8_EVAL_SAMPLER_SEED);
	// A range of exactly seq + 1 tokens has one window; one token less is an error.
	f8_token_range tight = {10, 10 + SEQ + 1};
	CHECK(f8_batch_sample(&sampler, tight, BATCH, SEQ, inputs[0], labels[0], &diag) == F8_OK);
	CHECK(inputs[0][0] == 10 && inputs[0][SEQ] == 10 && labels[0][SEQ - 1] == 10 + SEQ);
	tight.end--;
	f8_diag_clear(&diag);
	CHECK(f8_batch_sample(&sampler, tight, BATCH, SEQ, inputs[0], labels[0], &diag) ==
	      F8_ERR_ARGUMENT);
	CHECK(strstr(diag.message, "holds 16 tokens") && strstr(diag.message, "at least 17"));
	f8_token_range outside = {400, 600};
	CHECK(f8_batch_sample(&sampler, outside, BATCH, SEQ, inputs[0], labels[0], &diag) ==
	      F8_ERR_ARGUMENT);
	CHECK(f8_batch_sample(&sampler, range, 0, SEQ, inputs[0], labels[0], &diag) ==
	      F8_ERR_ARGUMENT);
}

int main(void) {
	const char *seed_text = getenv("F8C_TEST_SEED");
	random_state = seed_text ? strtoull(seed_text, NULL, 10) : (uint64_t)time(NULL);
	printf("seed %llu (F8C_TEST_SEED=%llu repeats this run)\n",
	       (unsigned long long)random_state, (unsigned long long)random_state);
	snprintf(folder, sizeof folder, "/tmp/f8c-formats-XXXXXX");
	if (!mkdtemp(folder)) {
		printf("FAIL cannot make a temporary folder\n");
		return 1;
	}
	test_atomic_file();
	test_npy_round_trips();
	test_npy_malformed();
	test_npy_allocation_failure();
	test_safetensors_round_trip();
	test_safetensors_malformed();
	test_safetensors_allocation_failure();
	test_token_files();
	test_split();
	test_sampler();
	empty_folder();
	CHECK(rmdir(folder) == 0);
	return test_finish();
}
