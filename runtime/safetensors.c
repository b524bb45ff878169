/*
 * safetensors reading and writing. The header is parsed with jansson inside an f8_jansson
 * scope (its allocations through f8_malloc), checked whole, and copied into one block that the
 * open file owns, so that no JSON outlives f8_safetensors_open; tensors are read with pread.
 */
#define _POSIX_C_SOURCE 200809L // pread, fstat, O_CLOEXEC

#include "runtime/safetensors.h" // f8_safetensors

#include <errno.h>     // errno, EINTR
#include <fcntl.h>     // open, O_RDONLY, O_CLOEXEC
#include <stdalign.h>  // alignof
#include <stdbool.h>   // bool
#include <stdio.h>     // snprintf
#include <stdlib.h>    // qsort, bsearch
#include <string.h>    // memcpy, memcmp, memset, strcmp, strlen, strerror
#include <sys/stat.h>  // fstat, S_ISREG
#include <unistd.h>    // close, pread

#include <jansson.h> // json_loadb, json_t, json_dumpb

#include "ir/alloc.h"            // f8_malloc, f8_free
#include "ir/diag.h"             // f8_diag_set_in_file
#include "ir/json.h"             // f8_jansson_enter, f8_jansson_leave, f8_jansson_out_of_memory
#include "runtime/atomic_file.h" // f8_atomic_file_*

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian and is stored as is: a big-endian host needs swaps"
#endif

/* The dtypes f8c reads and writes, by their safetensors names. */
static const struct st_type {
	const char *name;
	f8_dtype dtype;
} st_types[] = {
	{"F64", F8_DTYPE_F64},         {"F32", F8_DTYPE_F32},         {"F16", F8_DTYPE_F16},
	{"BF16", F8_DTYPE_BF16},       {"I64", F8_DTYPE_I64},         {"I32", F8_DTYPE_I32},
	{"I8", F8_DTYPE_I8},           {"U8", F8_DTYPE_U8},           {"BOOL", F8_DTYPE_BOOL},
	{"F8_E4M3", F8_DTYPE_E4M3},    {"F8_E5M2", F8_DTYPE_E5M2},    {"F8_E8M0", F8_DTYPE_E8M0},
};
enum { ST_TYPE_COUNT = sizeof st_types / sizeof st_types[0] };

/* Types of the format that f8c has no type for: refused as unsupported, not as malformed. */
static const char *const st_foreign_types[] = {"U16", "I16", "U32", "U64", "C64", "F4",
					       "F6_E2M3", "F6_E3M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ"};

static const char metadata_key[] = "__metadata__";

struct f8_safetensors {
	int fd;
	const char *path;
	uint64_t data_start, data_size;      // the data area: after the length and the header
	size_t n_tensors, n_metadata;
	f8_safetensors_tensor *tensors;      // (n_tensors) by begin, then end, then header order
	f8_safetensors_tensor *in_header;    // (n_tensors) in the header's order, while opening
	const f8_safetensors_tensor **by_name; // (n_tensors) the tensors by name
	const char **metadata_keys;          // (n_metadata) in the file's order
	const char **metadata_values;        // (n_metadata)
	// the arrays and the strings follow in the same allocation
};

/* fail(diag, path, status, format, ...): every failure here is about the file at `path`. */
#define fail f8_diag_set_in_file

static bool type_from_name(const char *name, f8_dtype *dtype) {
	for (int i = 0; i < ST_TYPE_COUNT; i++)
		if (strcmp(name, st_types[i].name) == 0) {
			*dtype = st_types[i].dtype;
			return true;
		}
	return false;
}

static const char *type_name(f8_dtype dtype) {
	for (int i = 0; i < ST_TYPE_COUNT; i++)
		if (st_types[i].dtype == dtype)
			return st_types[i].name;
	return NULL;
}

/* Reads `n` bytes at `offset` of `fd`; false (errno set, 0 for end of file) when fewer come. */
static bool read_at(int fd, void *buffer, size_t n, uint64_t offset) {
	unsigned char *bytes = buffer;
	while (n) {
		ssize_t got = pread(fd, bytes, n, (off_t)offset);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			if (got == 0)
				errno = 0;
			return false;
		}
		bytes += got, n -= (size_t)got, offset += (uint64_t)got;
	}
	return true;
}

/* ---- the length and what the first bytes say ------------------------------------------- */

/* A hint naming what a file that is not safetensors looks like, from its first bytes. */
static const char *foreign_hint(const unsigned char *start, size_t n) {
	if (n >= 6 && memcmp(start, "\x93NUMPY", 6) == 0)
		return "this is a NumPy .npy file (numpy.save): convert it with "
		       "safetensors.numpy.save_file";
	if (n >= 4 && memcmp(start, "PK\x03\x04", 4) == 0)
		return "this is a zip file, like a PyTorch torch.save checkpoint: convert it with "
		       "safetensors.torch.save_file";
	if (n >= 4 && memcmp(start, "GGUF", 4) == 0)
		return "this is a GGUF file (llama.cpp): f8c reads safetensors";
	if (n >= 2 && start[0] == 0x80 && start[1] <= 5)
		return "this is a Python pickle: convert it with safetensors.torch.save_file";
	if (n >= 4 && start[0] == 0x08 && start[1] < 0x20)
		return "this may be an ONNX model: give it to f8c as a model, not as weights";
	return "safetensors files start with the 8-byte length of their JSON header; write one "
	       "with safetensors' save_file";
}

/*
 * Reads N and checks it against the file's size: a length beyond what any safetensors file
 * has means a foreign file; one that the file is too short for, with the JSON's '{' where it
 * belongs, a torn file.
 */
static f8_status read_length(int fd, uint64_t file_size, const char *path, uint64_t *header_len,
			     f8_diag *diag) {
	unsigned char start[16];
	size_t n_start = file_size < sizeof start ? (size_t)file_size : sizeof start;
	if (!read_at(fd, start, n_start, 0))
		return fail(diag, path, F8_ERR_IO, "cannot read %s: %s", path,
			    errno ? strerror(errno) : "the file became shorter while read");
	if (file_size < 8) {
		f8_diag_hint(diag, "%s", foreign_hint(start, n_start));
		return fail(diag, path, F8_ERR_PARSE, "not a safetensors file: %llu bytes, shorter "
			    "than the 8-byte length of a header", (unsigned long long)file_size);
	}
	uint64_t n = 0;
	for (int i = 7; i >= 0; i--)
		n = n << 8 | start[i];
	*header_len = n;
	bool looks_json = file_size == 8 || start[8] == '{'; // with 8 bytes, nothing says it is not
	if (!looks_json || n < 2 || n > F8_SAFETENSORS_HEADER_MAX) {
		f8_diag_hint(diag, "%s", foreign_hint(start, n_start));
		if (n > F8_SAFETENSORS_HEADER_MAX)
			return fail(diag, path, F8_ERR_PARSE, "not a safetensors file: its first "
				    "8 bytes give a header of %llu bytes, more than the %u "
				    "safetensors allows", (unsigned long long)n,
				    F8_SAFETENSORS_HEADER_MAX);
		return fail(diag, path, F8_ERR_PARSE, "not a safetensors file: %s",
			    looks_json ? "its header length is too short for a JSON object"
				       : "no JSON object '{' follows the 8-byte header length");
	}
	if (n > file_size - 8) {
		f8_diag_hint(diag, "the file was cut short (an interrupted download or copy?): "
				   "fetch or write it again");
		return fail(diag, path, F8_ERR_PARSE, "the safetensors file is torn: its header "
			    "says %llu bytes of JSON, the file holds %llu after the length",
			    (unsigned long long)n, (unsigned long long)(file_size - 8));
	}
	return F8_OK;
}

/* ---- the header ---------------------------------------------------------------------------- */

/* What the checks of one header need. */
typedef struct st_reader {
	const char *path;
	f8_diag *diag;
	f8_safetensors *file; // being filled
	char *strings;        // where the next copied string goes
} st_reader;

/* Fails with "tensor 'NAME': MESSAGE" as a malformed header. */
static f8_status tensor_error(st_reader *r, f8_status status, const char *name, const char *what,
			      const char *detail) {
	f8_diag_hint(r->diag, "each tensor reads \"NAME\": {\"dtype\": \"F32\", \"shape\": [3, 4], "
			      "\"data_offsets\": [BEGIN, END]}");
	return fail(r->diag, r->path, status, "tensor '%.200s' in the safetensors header: %s%s",
		    name, what, detail ? detail : "");
}

static char *copy_string(st_reader *r, const char *text) {
	size_t len = strlen(text) + 1;
	char *copy = memcpy(r->strings, text, len);
	r->strings += len;
	return copy;
}

/* An array of non-negative integers, at most `max` of them, into values; false otherwise. */
static bool integers(const json_t *array, int max, int64_t *values, int *n, bool *negative) {
	*negative = false;
	if (!json_is_array(array) || json_array_size(array) > (size_t)max)
		return false;
	*n = (int)json_array_size(array);
	for (int i = 0; i < *n; i++) {
		const json_t *item = json_array_get(array, (size_t)i);
		if (!json_is_integer(item))
			return false;
		values[i] = json_integer_value(item);
		if (values[i] < 0)
			*negative = true;
	}
	return true;
}

/* Checks the tensor `name` of the header and fills *t. */
static f8_status read_tensor(st_reader *r, const char *name, const json_t *entry,
			     f8_safetensors_tensor *t) {
	const json_t *dtype = json_object_get(entry, "dtype");
	const json_t *shape = json_object_get(entry, "shape");
	const json_t *offsets = json_object_get(entry, "data_offsets");
	if (!json_is_object(entry) || !dtype || !shape || !offsets || json_object_size(entry) != 3)
		return tensor_error(r, F8_ERR_PARSE, name, "expected an object of exactly dtype, "
				    "shape and data_offsets", NULL);
	if (!json_is_string(dtype))
		return tensor_error(r, F8_ERR_PARSE, name, "dtype is not a string", NULL);
	if (!type_from_name(json_string_value(dtype), &t->dtype)) {
		for (size_t i = 0; i < sizeof st_foreign_types / sizeof st_foreign_types[0]; i++)
			if (strcmp(json_string_value(dtype), st_foreign_types[i]) == 0)
				return tensor_error(r, F8_ERR_UNSUPPORTED, name, "f8c has no type "
						    "for the dtype ", st_foreign_types[i]);
		return tensor_error(r, F8_ERR_PARSE, name, "unknown dtype ",
				    json_string_value(dtype));
	}
	bool negative;
	if (json_is_array(shape) && json_array_size(shape) > F8_MAX_RANK)
		return tensor_error(r, F8_ERR_UNSUPPORTED, name, "more dims than f8c's "
				    "tensors have (8)", NULL);
	if (!integers(shape, F8_MAX_RANK, t->dims, &t->rank, &negative) || negative)
		return tensor_error(r, F8_ERR_PARSE, name, negative ? "a negative dim in shape" :
				    "shape is not an array of integers", NULL);
	int64_t range[2];
	int n_range;
	if (!integers(offsets, 2, range, &n_range, &negative) || n_range != 2 || negative ||
	    range[0] > range[1])
		return tensor_error(r, F8_ERR_PARSE, name, "data_offsets is not [BEGIN, END] with "
				    "0 <= BEGIN <= END", NULL);
	t->begin = (uint64_t)range[0], t->end = (uint64_t)range[1];
	uint64_t n_bytes = f8_dtype_get_info(t->dtype)->bytes;
	for (int i = 0; i < t->rank; i++) {
		if (t->dims[i] && n_bytes > UINT64_MAX / (uint64_t)t->dims[i])
			return tensor_error(r, F8_ERR_PARSE, name, "its shape has more elements "
					    "than a file can hold", NULL);
		n_bytes *= (uint64_t)t->dims[i];
	}
	if (n_bytes != t->end - t->begin) {
		char detail[128];
		snprintf(detail, sizeof detail, ": the shape makes %llu bytes of %s, data_offsets "
			 "%llu", (unsigned long long)n_bytes, json_string_value(dtype),
			 (unsigned long long)(t->end - t->begin));
		return tensor_error(r, F8_ERR_PARSE, name, "its size disagrees with its shape",
				    detail);
	}
	t->name = copy_string(r, name);
	return F8_OK;
}

/* Checks "__metadata__" and copies it. */
static f8_status read_metadata(st_reader *r, const json_t *metadata) {
	f8_safetensors *file = r->file;
	if (json_is_null(metadata)) // the reference implementation reads null as no metadata
		return F8_OK;
	if (!json_is_object(metadata)) {
		f8_diag_hint(r->diag, "__metadata__ reads {\"key\": \"value\", ...}");
		return fail(r->diag, r->path, F8_ERR_PARSE, "the safetensors header's __metadata__ "
			    "is not an object");
	}
	const char *key;
	const json_t *value;
	json_object_foreach((json_t *)metadata, key, value) {
		if (!json_is_string(value)) {
			f8_diag_hint(r->diag, "metadata values are strings: write numbers as text");
			return fail(r->diag, r->path, F8_ERR_PARSE, "the safetensors metadata "
				    "'%.200s' is not a string", key);
		}
		file->metadata_keys[file->n_metadata] = copy_string(r, key);
		file->metadata_values[file->n_metadata++] =
			copy_string(r, json_string_value(value));
	}
	return F8_OK;
}

/* Orders pointers into one array of tensors by their data, ties (tensors of no bytes at one
 * offset) by their place in the array: a stable order, which qsort is not by itself. */
static int compare_by_offset(const void *a, const void *b) {
	const f8_safetensors_tensor *x = *(const f8_safetensors_tensor *const *)a;
	const f8_safetensors_tensor *y = *(const f8_safetensors_tensor *const *)b;
	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	return x < y ? -1 : x > y;
}

static int compare_by_name(const void *a, const void *b) {
	const f8_safetensors_tensor *const *x = a, *const *y = b;
	return strcmp((*x)->name, (*y)->name);
}

/* Fills file->tensors with file->in_header's tensors in the order of their data. */
static void sort_by_offset(f8_safetensors *file) {
	for (size_t i = 0; i < file->n_tensors; i++)
		file->by_name[i] = &file->in_header[i]; // by_name is free until the end
	qsort(file->by_name, file->n_tensors, sizeof file->by_name[0], compare_by_offset);
	for (size_t i = 0; i < file->n_tensors; i++)
		file->tensors[i] = *file->by_name[i];
	file->in_header = NULL;
}

/* Checks that the tensors, sorted by offset, cover the data area exactly. */
static f8_status check_coverage(st_reader *r) {
	const f8_safetensors *file = r->file;
	uint64_t covered = 0;
	for (size_t i = 0; i < file->n_tensors; i++) {
		const f8_safetensors_tensor *t = &file->tensors[i];
		if (t->begin < covered)
			return fail(r->diag, r->path, F8_ERR_PARSE, "the safetensors header is "
				    "invalid: tensors '%.200s' and '%.200s' overlap in the data "
				    "area", file->tensors[i - 1].name, t->name);
		if (t->begin > covered)
			return fail(r->diag, r->path, F8_ERR_PARSE, "the safetensors header is "
				    "invalid: bytes %llu to %llu of the data area belong to no "
				    "tensor", (unsigned long long)covered,
				    (unsigned long long)t->begin);
		covered = t->end;
	}
	if (covered > file->data_size) {
		f8_diag_hint(r->diag, "the file was cut short (an interrupted download or copy?): "
				      "fetch or write it again");
		return fail(r->diag, r->path, F8_ERR_PARSE, "the safetensors file is torn: its "
			    "tensors need %llu bytes of data, the file holds %llu",
			    (unsigned long long)covered, (unsigned long long)file->data_size);
	}
	if (covered < file->data_size)
		return fail(r->diag, r->path, F8_ERR_PARSE, "the safetensors file holds %llu bytes "
			    "of data after its header, its tensors cover %llu",
			    (unsigned long long)file->data_size, (unsigned long long)covered);
	return F8_OK;
}

static size_t align_up(size_t n, size_t alignment) {
	return (n + alignment - 1) / alignment * alignment;
}

/* Allocates the file and its arrays and strings in one block, sized for `root`. */
static f8_safetensors *allocate_file(const json_t *root, const json_t *metadata,
				     size_t path_len) {
	size_t n_metadata = json_is_object(metadata) ? json_object_size(metadata) : 0;
	size_t n_tensors = json_object_size(root) - (metadata != NULL);
	size_t n_chars = path_len + 1;
	const char *key;
	const json_t *value;
	json_object_foreach((json_t *)root, key, value)
		n_chars += strlen(key) + 1;
	if (n_metadata)
		json_object_foreach((json_t *)metadata, key, value) {
			n_chars += strlen(key) + 1;
			if (json_is_string(value))
				n_chars += strlen(json_string_value(value)) + 1;
		}
	size_t at_tensors = align_up(sizeof(f8_safetensors), alignof(f8_safetensors_tensor));
	// the tensors twice: in the header's order, then sorted by offset
	size_t at_by_name = align_up(at_tensors + 2 * n_tensors * sizeof(f8_safetensors_tensor),
				     alignof(f8_safetensors_tensor *));
	size_t at_metadata = align_up(at_by_name + n_tensors * sizeof(f8_safetensors_tensor *),
				      alignof(char *));
	size_t at_strings = at_metadata + 2 * n_metadata * sizeof(char *);
	char *block = f8_malloc(at_strings + n_chars);
	if (!block)
		return NULL;
	f8_safetensors *file = (f8_safetensors *)block;
	*file = (f8_safetensors){.fd = -1};
	file->tensors = (f8_safetensors_tensor *)(block + at_tensors);
	file->in_header = file->tensors + n_tensors;
	file->by_name = (const f8_safetensors_tensor **)(block + at_by_name);
	file->metadata_keys = (const char **)(block + at_metadata);
	file->metadata_values = file->metadata_keys + n_metadata;
	return file;
}

/* Parses `text` (`len` bytes) with jansson, inside the caller's jansson scope. */
static f8_status parse_json(const char *text, size_t len, const char *path, json_t **root,
			    f8_diag *diag) {
	json_error_t error;
	*root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &error);
	if (f8_jansson_out_of_memory() || (!*root && json_error_code(&error) ==
						    json_error_out_of_memory)) {
		json_decref(*root);
		*root = NULL;
		return fail(diag, path, F8_ERR_NOMEM, "out of memory reading the safetensors "
			    "header");
	}
	if (*root)
		return F8_OK;
	if (json_error_code(&error) == json_error_duplicate_key) {
		f8_diag_hint(diag, "each tensor name and metadata key appears once in a "
				   "safetensors file");
		return fail(diag, path, F8_ERR_PARSE, "the safetensors header names a tensor "
			    "twice: %s", error.text);
	}
	f8_diag_hint(diag, "the header is damaged, or the file is not safetensors");
	return fail(diag, path, F8_ERR_PARSE, "the safetensors header is not valid JSON: %s "
		    "(byte %d of the header)", error.text, error.position);
}

/* Checks the parsed header and builds *out from it. */
static f8_status read_header(const json_t *root, const char *path, uint64_t data_start,
			     uint64_t data_size, f8_safetensors **out, f8_diag *diag) {
	if (!json_is_object(root))
		return fail(diag, path, F8_ERR_PARSE, "not a safetensors file: the header is not a "
			    "JSON object");
	const json_t *metadata = json_object_get(root, metadata_key);
	size_t path_len = strlen(path);
	f8_safetensors *file = allocate_file(root, metadata, path_len);
	if (!file)
		return fail(diag, path, F8_ERR_NOMEM, "out of memory reading the safetensors "
			    "header");
	size_t n_metadata = json_is_object(metadata) ? json_object_size(metadata) : 0;
	st_reader r = {.path = path, .diag = diag, .file = file,
		       .strings = (char *)(file->metadata_values + n_metadata)};
	file->path = copy_string(&r, path);
	file->data_start = data_start, file->data_size = data_size;
	f8_status status = metadata ? read_metadata(&r, metadata) : F8_OK;
	const char *key;
	const json_t *value;
	json_object_foreach((json_t *)root, key, value) {
		if (status)
			break;
		if (value != metadata)
			status = read_tensor(&r, key, value, &file->in_header[file->n_tensors++]);
	}
	if (!status) {
		sort_by_offset(file);
		status = check_coverage(&r);
	}
	if (status) {
		f8_free(file);
		return status;
	}
	for (size_t i = 0; i < file->n_tensors; i++)
		file->by_name[i] = &file->tensors[i];
	qsort(file->by_name, file->n_tensors, sizeof file->by_name[0], compare_by_name);
	*out = file;
	return F8_OK;
}

/* Reads, parses and checks the header of the open `fd`. */
static f8_status open_fd(int fd, uint64_t file_size, const char *path, f8_safetensors **out,
			 f8_diag *diag) {
	uint64_t header_len = 0;
	f8_status status = read_length(fd, file_size, path, &header_len, diag);
	if (status)
		return status;
	char *text = f8_malloc((size_t)header_len);
	if (!text)
		return fail(diag, path, F8_ERR_NOMEM, "out of memory for the safetensors header "
			    "(%llu bytes)", (unsigned long long)header_len);
	if (!read_at(fd, text, (size_t)header_len, 8)) {
		status = fail(diag, path, F8_ERR_IO, "cannot read %s: %s", path,
			      errno ? strerror(errno) : "the file became shorter while read");
		f8_free(text);
		return status;
	}
	f8_jansson_scope scope;
	f8_jansson_enter(&scope);
	json_t *root;
	status = parse_json(text, (size_t)header_len, path, &root, diag);
	f8_free(text);
	if (!status)
		status = read_header(root, path, 8 + header_len, file_size - 8 - header_len, out,
				     diag);
	json_decref(root);
	f8_jansson_leave(&scope);
	return status;
}

f8_status f8_safetensors_open(const char *path, f8_safetensors **out, f8_diag *diag) {
	*out = NULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return fail(diag, path, F8_ERR_IO, "cannot open %s: %s", path, strerror(errno));
	struct stat info;
	f8_status status;
	if (fstat(fd, &info) != 0)
		status = fail(diag, path, F8_ERR_IO, "cannot read %s: %s", path, strerror(errno));
	else if (!S_ISREG(info.st_mode))
		status = fail(diag, path, F8_ERR_IO, "cannot read %s: not a regular file", path);
	else
		status = open_fd(fd, (uint64_t)info.st_size, path, out, diag);
	if (status) {
		close(fd);
		return status;
	}
	(*out)->fd = fd;
	return F8_OK;
}

void f8_safetensors_close(f8_safetensors *file) {
	if (!file)
		return;
	if (file->fd >= 0)
		close(file->fd);
	f8_free(file);
}

/* ---- lookups ------------------------------------------------------------------------------- */

size_t f8_safetensors_count(const f8_safetensors *file) {
	return file->n_tensors;
}

const f8_safetensors_tensor *f8_safetensors_get(const f8_safetensors *file, size_t i) {
	return i < file->n_tensors ? &file->tensors[i] : NULL;
}

const char *f8_safetensors_name(const f8_safetensors *file, size_t i) {
	return i < file->n_tensors ? file->tensors[i].name : NULL;
}

const f8_safetensors_tensor *f8_safetensors_find(const f8_safetensors *file, const char *name) {
	size_t low = 0, high = file->n_tensors;
	while (low < high) {
		size_t middle = low + (high - low) / 2;
		const f8_safetensors_tensor *t = file->by_name[middle];
		int order = strcmp(name, t->name);
		if (order == 0)
			return t;
		if (order < 0)
			high = middle;
		else
			low = middle + 1;
	}
	return NULL;
}

f8_status f8_safetensors_read(const f8_safetensors *file, const char *name, f8_rt_tensor *out,
			      f8_diag *diag) {
	*out = (f8_rt_tensor){0};
	const f8_safetensors_tensor *t = f8_safetensors_find(file, name);
	if (!t) {
		if (file->n_tensors)
			f8_diag_hint(diag, "the file has %zu tensors, like '%.200s'",
				     file->n_tensors, file->tensors[0].name);
		else
			f8_diag_hint(diag, "the file has no tensors");
		return fail(diag, file->path, F8_ERR_ARGUMENT, "no tensor '%.200s' in %s", name,
			    file->path);
	}
	f8_status status = f8_rt_tensor_create(t->dtype, t->rank, t->dims, out, diag);
	if (status) {
		f8_diag_at(diag, file->path, 0, 0, NULL, 0);
		return status;
	}
	if (!read_at(file->fd, out->data, out->n_bytes, file->data_start + t->begin)) {
		const char *why = errno ? strerror(errno) : "the file became shorter since it "
							    "was opened";
		status = fail(diag, file->path, F8_ERR_IO, "cannot read tensor '%.200s' of %s: %s",
			      name, file->path, why);
		f8_rt_tensor_destroy(out);
	}
	return status;
}

const char *f8_safetensors_metadata(const f8_safetensors *file, const char *key) {
	for (size_t i = 0; i < file->n_metadata; i++)
		if (strcmp(file->metadata_keys[i], key) == 0)
			return file->metadata_values[i];
	return NULL;
}

size_t f8_safetensors_metadata_count(const f8_safetensors *file) {
	return file->n_metadata;
}

const char *f8_safetensors_metadata_key(const f8_safetensors *file, size_t i) {
	return i < file->n_metadata ? file->metadata_keys[i] : NULL;
}

/* ---- writing ------------------------------------------------------------------------------- */

/* Checks tensor i: a type safetensors has, dims and bytes that agree. */
static f8_status check_tensor(const char *path, const char *name, const f8_rt_tensor *tensor,
			      f8_diag *diag) {
	if (!f8_rt_tensor_valid(tensor))
		return fail(diag, path, F8_ERR_ARGUMENT, "cannot write tensor '%.200s': its dtype, "
			    "dims and size disagree", name);
	if (!type_name(tensor->dtype))
		return fail(diag, path, F8_ERR_UNSUPPORTED, "cannot write tensor '%.200s': "
			    "safetensors has no dtype for %s", name, f8_dtype_name(tensor->dtype));
	return F8_OK;
}

/* Adds `value` under `key` to `object`, refusing a key it has; steals `value`. */
static f8_status add_member(json_t *object, const char *key, json_t *value, const char *what,
			    const char *path, f8_diag *diag) {
	if (!key || strcmp(key, metadata_key) == 0 || json_object_get(object, key)) {
		json_decref(value);
		if (!key)
			return fail(diag, path, F8_ERR_ARGUMENT, "cannot write %s: a %s is NULL",
				    path, what);
		return fail(diag, path, F8_ERR_ARGUMENT, "cannot write %s: the %s '%.200s' %s",
			    path, what, key, strcmp(key, metadata_key) == 0 ? "is reserved" :
			    "appears twice");
	}
	if (!value || json_object_set_new(object, key, value) != 0) {
		if (f8_jansson_out_of_memory())
			return fail(diag, path, F8_ERR_NOMEM, "out of memory writing %s", path);
		return fail(diag, path, F8_ERR_ARGUMENT, "cannot write %s: the %s '%.200s' or its "
			    "value is not UTF-8 (or is NULL)", path, what, key);
	}
	return F8_OK;
}

/* The header's JSON, in the caller's jansson scope: metadata first, then the tensors. */
static f8_status build_header(const char *path, const char *const *names,
			      const f8_rt_tensor *const *tensors, size_t n,
			      const char *const *metadata_keys, const char *const *metadata_values,
			      size_t n_metadata, json_t *root, f8_diag *diag) {
	f8_status status = F8_OK;
	if (n_metadata) {
		json_t *metadata = json_object();
		for (size_t i = 0; metadata && !status && i < n_metadata; i++) {
			const char *value = metadata_values[i];
			status = add_member(metadata, metadata_keys[i],
					    value ? json_string(value) : NULL, "metadata key", path,
					    diag);
		}
		if (!metadata || status) {
			json_decref(metadata);
			return status ? status : fail(diag, path, F8_ERR_NOMEM, "out of memory");
		}
		if (json_object_set_new(root, metadata_key, metadata) != 0)
			return fail(diag, path, F8_ERR_NOMEM, "out of memory writing %s", path);
	}
	uint64_t offset = 0;
	for (size_t i = 0; !status && i < n; i++) {
		const char *name = names[i] ? names[i] : "(NULL)";
		if ((status = check_tensor(path, name, tensors[i], diag)))
			break;
		json_t *shape = json_array();
		for (int d = 0; shape && d < tensors[i]->rank; d++)
			json_array_append_new(shape, json_integer(tensors[i]->dims[d]));
		uint64_t end = offset + tensors[i]->n_bytes;
		json_t *entry = json_pack("{s:s, s:o, s:[I, I]}", "dtype",
					  type_name(tensors[i]->dtype), "shape", shape,
					  "data_offsets", (json_int_t)offset, (json_int_t)end);
		status = add_member(root, names[i], entry, "tensor name", path, diag);
		offset = end;
	}
	if (!status && f8_jansson_out_of_memory()) // a dim dropped by a failed append
		status = fail(diag, path, F8_ERR_NOMEM, "out of memory writing %s", path);
	return status;
}

/* Writes the length, the padded header and the data. */
static f8_status write_file(const char *path, const char *header, size_t header_len,
			    const f8_rt_tensor *const *tensors, size_t n, f8_diag *diag) {
	f8_atomic_file *file;
	f8_status status = f8_atomic_file_open(path, &file, diag);
	if (status)
		return status;
	unsigned char length[8];
	for (int i = 0; i < 8; i++)
		length[i] = (unsigned char)((uint64_t)header_len >> (8 * i));
	status = f8_atomic_file_write(file, length, sizeof length, diag);
	if (!status)
		status = f8_atomic_file_write(file, header, header_len, diag);
	for (size_t i = 0; !status && i < n; i++)
		status = f8_atomic_file_write(file, tensors[i]->data, tensors[i]->n_bytes, diag);
	if (status) {
		f8_atomic_file_abort(file);
		return status;
	}
	return f8_atomic_file_commit(file, diag);
}

f8_status f8_safetensors_write(const char *path, const char *const *names,
			       const f8_rt_tensor *const *tensors, size_t n,
			       const char *const *metadata_keys, const char *const *metadata_values,
			       size_t n_metadata, f8_diag *diag) {
	f8_jansson_scope scope;
	f8_jansson_enter(&scope);
	json_t *root = json_object();
	f8_status status = root ? build_header(path, names, tensors, n, metadata_keys,
					       metadata_values, n_metadata, root, diag)
				: fail(diag, path, F8_ERR_NOMEM, "out of memory writing %s", path);
	char *header = NULL;
	size_t len = 0, padded = 0;
	if (!status) {
		// Compact, like the reference implementation; padded with spaces to 8 bytes.
		size_t flags = JSON_COMPACT | JSON_PRESERVE_ORDER;
		len = json_dumpb(root, NULL, 0, flags);
		padded = (len + 7) / 8 * 8;
		header = len ? f8_malloc(padded) : NULL;
		if (!header || json_dumpb(root, header, len, flags) != len ||
		    f8_jansson_out_of_memory())
			status = fail(diag, path, F8_ERR_NOMEM, "out of memory writing %s", path);
		else
			memset(header + len, ' ', padded - len);
	}
	json_decref(root);
	f8_jansson_leave(&scope);
	if (!status)
		status = write_file(path, header, padded, tensors, n, diag);
	f8_free(header);
	return status;
}
