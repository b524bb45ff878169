/*
 * NumPy .npy reading and writing: a strict parser of the header dict, and a writer that
 * produces what numpy.save produces.
 */
#define _POSIX_C_SOURCE 200809L // fileno, fstat

#include "runtime/npy.h" // f8_npy_read, f8_npy_write

#include <errno.h>    // errno
#include <stdbool.h>  // bool
#include <stdint.h>   // int64_t, uint32_t, uint64_t, INT64_MAX, SIZE_MAX
#include <stdio.h>    // FILE, fopen, fread, fclose, snprintf
#include <string.h>   // memcmp, memcpy, strerror, strlen
#include <sys/stat.h> // fstat, S_ISREG

#include "ir/alloc.h"            // f8_malloc, f8_free
#include "ir/diag.h"             // f8_diag_set_in_file
#include "ir/dtype.h"            // f8_dtype, f8_dtype_get_info, f8_dtype_name
#include "runtime/atomic_file.h" // f8_atomic_file_*

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the .npy reader and writer store little-endian data as is: a big-endian host needs swaps"
#endif

static const unsigned char npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

enum {
	NPY_ALIGN = 64,           // numpy pads the header so that the data starts at a multiple
	NPY_GROWTH_DIGITS = 21,   // numpy's spare room after the header for a longer first dim
	NPY_PREFIX_V1 = 10,       // magic, version, 2-byte header length
	NPY_PREFIX_V2 = 12,       // magic, version, 4-byte header length
};

/* The descrs read and written, without their byte-order character. */
static const struct npy_type {
	const char *code;
	f8_dtype dtype;
} npy_types[] = {
	{"f8", F8_DTYPE_F64}, {"f4", F8_DTYPE_F32}, {"f2", F8_DTYPE_F16}, {"i8", F8_DTYPE_I64},
	{"i4", F8_DTYPE_I32}, {"i1", F8_DTYPE_I8},  {"u1", F8_DTYPE_U8},  {"b1", F8_DTYPE_BOOL},
};
enum { NPY_TYPE_COUNT = sizeof npy_types / sizeof npy_types[0] };

/* fail(diag, path, status, format, ...): every failure here is about the file at `path`. */
#define fail f8_diag_set_in_file

/* ---- reading ---------------------------------------------------------------------------- */

/* The header as it is parsed: the text, where the parser stands, what it has found. */
typedef struct npy_header {
	const char *text;
	size_t len, at;
	const char *path;
	f8_diag *diag;
	bool has_descr, has_fortran_order, has_shape;
	f8_dtype dtype;
	int rank;
	int64_t dims[F8_MAX_RANK];
} npy_header;

/* A malformed header: says what was expected where, and shows the header (its first 200
 * bytes). */
static f8_status header_error(npy_header *h, const char *expected) {
	int shown = h->len > 200 ? 200 : (int)h->len;
	while (shown > 0 && (h->text[shown - 1] == ' ' || h->text[shown - 1] == '\n'))
		shown--;
	f8_diag_hint(h->diag, "the file is damaged or was not written by numpy.save; a header "
			      "reads {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }");
	return fail(h->diag, h->path, F8_ERR_PARSE, "malformed .npy header: expected %s at byte "
		    "%zu of the header \"%.*s\"", expected, h->at, shown, h->text);
}

static void skip_space(npy_header *h) {
	while (h->at < h->len && (h->text[h->at] == ' ' || h->text[h->at] == '\t' ||
				  h->text[h->at] == '\n' || h->text[h->at] == '\r'))
		h->at++;
}

/* Consumes `c` (after any space); false when the next character is another. */
static bool accept(npy_header *h, char c) {
	skip_space(h);
	if (h->at < h->len && h->text[h->at] == c) {
		h->at++;
		return true;
	}
	return false;
}

/* A Python string literal in single or double quotes, without escapes: *start, *len. */
static f8_status parse_string(npy_header *h, const char **start, size_t *len) {
	skip_space(h);
	char quote = h->at < h->len ? h->text[h->at] : 0;
	if (quote != '\'' && quote != '"')
		return header_error(h, "a quoted string");
	size_t begin = ++h->at;
	while (h->at < h->len && h->text[h->at] != quote) {
		if (h->text[h->at] == '\\' || h->text[h->at] == '\n')
			return header_error(h, "a string without escapes");
		h->at++;
	}
	if (h->at == h->len)
		return header_error(h, "the string's closing quote");
	*start = h->text + begin;
	*len = h->at++ - begin;
	return F8_OK;
}

/* Whether the `len` bytes at `text` are `word`. */
static bool is_word(const char *text, size_t len, const char *word) {
	return strlen(word) == len && memcmp(text, word, len) == 0;
}

/* The descr: a string naming one of npy_types with a little-endian or no-order mark. */
static f8_status parse_descr(npy_header *h) {
	skip_space(h);
	if (h->at < h->len && h->text[h->at] == '[') {
		f8_diag_hint(h->diag, "save each field as an array of its own");
		return fail(h->diag, h->path, F8_ERR_UNSUPPORTED, "the array has a structured "
			    "dtype (a list of fields); f8c reads plain numeric arrays");
	}
	const char *descr;
	size_t len;
	f8_status status = parse_string(h, &descr, &len);
	if (status)
		return status;
	char order = len ? descr[0] : 0;
	bool has_order = order == '<' || order == '>' || order == '|' || order == '=';
	const char *code = has_order ? descr + 1 : descr;
	size_t code_len = has_order ? len - 1 : len;
	for (int i = 0; has_order && i < NPY_TYPE_COUNT; i++) {
		if (!is_word(code, code_len, npy_types[i].code))
			continue;
		// Byte order means nothing for one byte; numpy itself reads '>i1' as int8.
		if (order == '>' && f8_dtype_get_info(npy_types[i].dtype)->bytes > 1) {
			f8_diag_hint(h->diag, "convert it with numpy first: "
					      "a.astype(a.dtype.newbyteorder('<'))");
			return fail(h->diag, h->path, F8_ERR_UNSUPPORTED, "the array is big-endian "
				    "('%.*s'); f8c reads little-endian data", (int)len, descr);
		}
		h->dtype = npy_types[i].dtype;
		return F8_OK;
	}
	if (code_len && code[0] == 'V') {
		f8_diag_hint(h->diag, "bf16 and FP8 arrays (ml_dtypes) are saved as opaque 'V' "
				      "bytes that do not say their type: save "
				      "a.astype(np.float32)");
		return fail(h->diag, h->path, F8_ERR_UNSUPPORTED, "the array's dtype '%.*s' is "
			    "opaque bytes", (int)len, descr);
	}
	if (code_len && code[0] == 'O') {
		f8_diag_hint(h->diag, "save a numeric array (an object array needs pickle, which "
				      "f8c never runs)");
		return fail(h->diag, h->path, F8_ERR_UNSUPPORTED, "the array holds Python objects "
			    "('%.*s')", (int)len, descr);
	}
	f8_diag_hint(h->diag, "f8c reads '<f8', '<f4', '<f2', '<i8', '<i4', '|i1', '|u1' and "
			      "'|b1' arrays: convert with a.astype(np.float32) or similar");
	return fail(h->diag, h->path, F8_ERR_UNSUPPORTED, "the array's dtype '%.*s' has no f8c "
		    "type", (int)len, descr);
}

static f8_status parse_fortran_order(npy_header *h) {
	skip_space(h);
	const char *word = h->text + h->at;
	size_t left = h->len - h->at;
	if (left >= 5 && memcmp(word, "False", 5) == 0) {
		h->at += 5;
		return F8_OK;
	}
	if (left >= 4 && memcmp(word, "True", 4) == 0) {
		f8_diag_hint(h->diag, "save np.ascontiguousarray(a) instead");
		return fail(h->diag, h->path, F8_ERR_UNSUPPORTED, "the array is stored in Fortran "
			    "(column-major) order; f8c reads row-major arrays");
	}
	return header_error(h, "True or False");
}

/* One dim: a non-negative decimal integer (Python 2's numpy wrote a trailing L). */
static f8_status parse_dim(npy_header *h, int64_t *dim) {
	skip_space(h);
	if (h->at < h->len && h->text[h->at] == '-')
		return fail(h->diag, h->path, F8_ERR_PARSE, "the .npy header gives a negative dim "
			    "in its shape");
	if (h->at == h->len || h->text[h->at] < '0' || h->text[h->at] > '9')
		return header_error(h, "a dim (a non-negative integer)");
	int64_t value = 0;
	while (h->at < h->len && h->text[h->at] >= '0' && h->text[h->at] <= '9') {
		int digit = h->text[h->at++] - '0';
		if (value > (INT64_MAX - digit) / 10)
			return fail(h->diag, h->path, F8_ERR_PARSE, "a dim in the .npy header is "
				    "too large");
		value = value * 10 + digit;
	}
	if (h->at < h->len && h->text[h->at] == 'L')
		h->at++;
	*dim = value;
	return F8_OK;
}

/* The shape: a tuple of dims, "()", "(5,)", "(3, 4)" or "(3, 4,)". */
static f8_status parse_shape(npy_header *h) {
	if (!accept(h, '('))
		return header_error(h, "a shape tuple");
	h->rank = 0;
	bool comma = false;
	while (!accept(h, ')')) {
		if (h->rank == F8_MAX_RANK)
			return fail(h->diag, h->path, F8_ERR_UNSUPPORTED, "the array has more than "
				    "%d dims, the most f8c's tensors have", F8_MAX_RANK);
		f8_status status = parse_dim(h, &h->dims[h->rank++]);
		if (status)
			return status;
		comma = accept(h, ',');
		skip_space(h);
		if (!comma && !(h->at < h->len && h->text[h->at] == ')'))
			return header_error(h, "',' or ')' in the shape");
	}
	if (h->rank == 1 && !comma) // (5) is the number 5 in Python, not a tuple
		return header_error(h, "a tuple: (5,) for one dim");
	return F8_OK;
}

/* One "'key': value" of the dict; each of the three keys once. */
static f8_status parse_entry(npy_header *h) {
	const char *key;
	size_t len;
	size_t key_at = h->at;
	f8_status status = parse_string(h, &key, &len);
	if (status)
		return status;
	bool *seen = is_word(key, len, "descr")           ? &h->has_descr
		     : is_word(key, len, "fortran_order") ? &h->has_fortran_order
		     : is_word(key, len, "shape")         ? &h->has_shape
							  : NULL;
	if (!seen || *seen) {
		h->at = key_at;
		return header_error(h, seen ? "each key once" : "the key descr, fortran_order or "
				    "shape");
	}
	*seen = true;
	if (!accept(h, ':'))
		return header_error(h, "':'");
	return seen == &h->has_descr ? parse_descr(h)
	       : seen == &h->has_shape ? parse_shape(h)
				       : parse_fortran_order(h);
}

/* The whole header: a dict of the three keys, then only spaces (and numpy's final newline). */
static f8_status parse_header(npy_header *h) {
	if (!accept(h, '{'))
		return header_error(h, "'{'");
	while (!accept(h, '}')) {
		f8_status status = parse_entry(h);
		if (status)
			return status;
		if (!accept(h, ',')) {
			skip_space(h);
			if (!(h->at < h->len && h->text[h->at] == '}'))
				return header_error(h, "',' or '}'");
		}
	}
	skip_space(h);
	if (h->at != h->len)
		return header_error(h, "the end of the header after '}'");
	if (!h->has_descr || !h->has_fortran_order || !h->has_shape)
		return header_error(h, !h->has_descr ? "the key descr"
				    : !h->has_shape ? "the key shape"
						    : "the key fortran_order");
	return F8_OK;
}

/* Reads `n` bytes from `file` into `buffer`; F8_ERR_IO when fewer come. */
static f8_status read_exactly(FILE *file, void *buffer, size_t n, const char *path,
			      f8_diag *diag) {
	if (n == 0 || fread(buffer, 1, n, file) == n)
		return F8_OK;
	return fail(diag, path, F8_ERR_IO, "cannot read %s: %s", path,
		    ferror(file) ? strerror(errno) : "the file became shorter while read");
}

/* The bytes of data the header describes into *n_bytes; an error when they overflow. */
static f8_status data_size(const npy_header *h, size_t *n_bytes) {
	size_t n = f8_dtype_get_info(h->dtype)->bytes;
	for (int i = 0; i < h->rank; i++) {
		if (h->dims[i] && n > SIZE_MAX / (uint64_t)h->dims[i])
			return fail(h->diag, h->path, F8_ERR_PARSE, "the .npy header's shape has "
				    "more elements than memory can hold");
		n *= (size_t)h->dims[i];
	}
	*n_bytes = n;
	return F8_OK;
}

/* Reads the magic, the version and the header length; *data_start is where the header ends. */
static f8_status read_prefix(FILE *file, uint64_t file_size, const char *path, uint32_t *header_len,
			     uint64_t *header_start, f8_diag *diag) {
	unsigned char prefix[NPY_PREFIX_V2];
	if (file_size < (uint64_t)NPY_PREFIX_V1) {
		f8_diag_hint(diag, "numpy.save writes .npy files");
		return fail(diag, path, F8_ERR_PARSE, "not a .npy file: %llu bytes, shorter than "
			    "any .npy header", (unsigned long long)file_size);
	}
	f8_status status = read_exactly(file, prefix, NPY_PREFIX_V1, path, diag);
	if (status)
		return status;
	if (memcmp(prefix, npy_magic, sizeof npy_magic) != 0) {
		if (memcmp(prefix, "PK\x03\x04", 4) == 0)
			f8_diag_hint(diag, "this is a zip file, like numpy.savez's .npz: unzip it "
					   "and give one of its .npy files");
		else
			f8_diag_hint(diag, "numpy.save writes .npy files");
		return fail(diag, path, F8_ERR_PARSE, "not a .npy file: it does not start with "
			    "\\x93NUMPY");
	}
	int major = prefix[6], minor = prefix[7];
	if (major < 1 || major > 3 || minor != 0) {
		f8_diag_hint(diag, "f8c reads .npy versions 1.0, 2.0 and 3.0; save it with "
				   "numpy.save");
		return fail(diag, path, F8_ERR_UNSUPPORTED, "unknown .npy version %d.%d", major,
			    minor);
	}
	if (major == 1) {
		*header_len = (uint32_t)prefix[8] | (uint32_t)prefix[9] << 8;
		*header_start = NPY_PREFIX_V1;
	} else {
		if (file_size < (uint64_t)NPY_PREFIX_V2)
			return fail(diag, path, F8_ERR_PARSE, "the .npy file is torn: it ends "
				    "inside its header");
		if ((status = read_exactly(file, prefix + NPY_PREFIX_V1, 2, path, diag)))
			return status;
		*header_len = (uint32_t)prefix[8] | (uint32_t)prefix[9] << 8 |
			      (uint32_t)prefix[10] << 16 | (uint32_t)prefix[11] << 24;
		*header_start = NPY_PREFIX_V2;
	}
	if (*header_len > F8_NPY_HEADER_MAX)
		return fail(diag, path, F8_ERR_PARSE, "the .npy header says it is %lu bytes, more "
			    "than the %d f8c reads", (unsigned long)*header_len, F8_NPY_HEADER_MAX);
	if (*header_start + *header_len > file_size) {
		f8_diag_hint(diag, "the file was cut short (an interrupted copy or write?): write "
				   "it again");
		return fail(diag, path, F8_ERR_PARSE, "the .npy file is torn: its header says it "
			    "is %lu bytes, but the file ends %llu bytes after the header's start",
			    (unsigned long)*header_len,
			    (unsigned long long)(file_size - *header_start));
	}
	return F8_OK;
}

/* Parses the header of the open `file` (positioned after the prefix) into *h. */
static f8_status read_header(FILE *file, uint32_t header_len, npy_header *h) {
	char *text = f8_malloc(header_len + 1u);
	if (!text)
		return fail(h->diag, h->path, F8_ERR_NOMEM, "out of memory for a .npy header");
	f8_status status = read_exactly(file, text, header_len, h->path, h->diag);
	if (!status) {
		text[header_len] = '\0';
		h->text = text, h->len = header_len;
		status = parse_header(h);
		h->text = NULL;
	}
	f8_free(text);
	return status;
}

/* Reads the open `file`, `file_size` bytes long, into *out. */
static f8_status read_file(FILE *file, uint64_t file_size, const char *path, f8_rt_tensor *out,
			   f8_diag *diag) {
	uint32_t header_len = 0;
	uint64_t header_start = 0;
	f8_status status = read_prefix(file, file_size, path, &header_len, &header_start, diag);
	npy_header h = {.path = path, .diag = diag};
	if (status || (status = read_header(file, header_len, &h)))
		return status;
	size_t n_bytes = 0;
	if ((status = data_size(&h, &n_bytes)))
		return status;
	uint64_t data_len = file_size - header_start - header_len;
	if (data_len != n_bytes) {
		if (data_len < n_bytes)
			f8_diag_hint(diag, "the file was cut short (an interrupted copy or "
					   "write?): write it again");
		return fail(diag, path, F8_ERR_PARSE, "the .npy file is %s: its header describes "
			    "%zu bytes of %s data, the file holds %llu after the header",
			    data_len < n_bytes ? "torn" : "longer than its array", n_bytes,
			    f8_dtype_name(h.dtype), (unsigned long long)data_len);
	}
	if ((status = f8_rt_tensor_create(h.dtype, h.rank, h.dims, out, diag))) {
		f8_diag_at(diag, path, 0, 0, NULL, 0);
		return status;
	}
	if ((status = read_exactly(file, out->data, n_bytes, path, diag)))
		f8_rt_tensor_destroy(out);
	return status;
}

f8_status f8_npy_read(const char *path, f8_rt_tensor *out, f8_diag *diag) {
	*out = (f8_rt_tensor){0};
	FILE *file = fopen(path, "rb");
	if (!file)
		return fail(diag, path, F8_ERR_IO, "cannot open %s: %s", path, strerror(errno));
	struct stat info;
	f8_status status;
	if (fstat(fileno(file), &info) != 0)
		status = fail(diag, path, F8_ERR_IO, "cannot read %s: %s", path, strerror(errno));
	else if (!S_ISREG(info.st_mode))
		status = fail(diag, path, F8_ERR_IO, "cannot read %s: not a regular file", path);
	else
		status = read_file(file, (uint64_t)info.st_size, path, out, diag);
	fclose(file);
	return status;
}

/* ---- writing ---------------------------------------------------------------------------- */

/* The descr numpy writes for `dtype`, or NULL when there is none. */
static const char *descr_of(f8_dtype dtype) {
	static const char *const descrs[NPY_TYPE_COUNT] = {"<f8", "<f4", "<f2", "<i8",
							   "<i4", "|i1", "|u1", "|b1"};
	for (int i = 0; i < NPY_TYPE_COUNT; i++)
		if (npy_types[i].dtype == dtype)
			return descrs[i];
	return NULL;
}

/* Checks that `tensor` is one that can be written: its dims and bytes agree. */
static f8_status check_tensor(const char *path, const f8_rt_tensor *tensor, f8_diag *diag) {
	if (!f8_rt_tensor_valid(tensor))
		return fail(diag, path, F8_ERR_ARGUMENT, "cannot write %s: the tensor's dtype, dims "
			    "and size disagree", path);
	return F8_OK;
}

/*
 * Makes the whole header as numpy's _write_array_header does: the dict with its keys sorted,
 * spare room for a longer first dim, spaces up to the alignment and a newline, after the
 * magic, the version and the length. Returns its length in `out` (`size` bytes, enough for any
 * rank), or 0 when it does not fit.
 */
static size_t make_header(const f8_rt_tensor *tensor, const char *descr, char *out,
			  size_t size) {
	char dict[512], shape[8 * 24 + 4];
	size_t at = 0;
	shape[at++] = '(';
	for (int i = 0; i < tensor->rank; i++)
		at += (size_t)snprintf(shape + at, sizeof shape - at, "%s%lld", i ? ", " : "",
				       (long long)tensor->dims[i]);
	at += (size_t)snprintf(shape + at, sizeof shape - at, "%s)", tensor->rank == 1 ? "," : "");
	int dict_len = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, "
				"'shape': %s, }", descr, shape);
	if (tensor->rank > 0) {
		char first[24];
		int digits = snprintf(first, sizeof first, "%lld", (long long)tensor->dims[0]);
		for (int i = digits; i < NPY_GROWTH_DIGITS; i++)
			dict[dict_len++] = ' ';
	}
	size_t text_len = (size_t)dict_len + 1; // with the newline
	size_t prefix = NPY_PREFIX_V1, pad = NPY_ALIGN - (prefix + text_len) % NPY_ALIGN;
	if (text_len + pad > 65535) { // version 1.0's 2-byte length cannot say it: 2.0
		prefix = NPY_PREFIX_V2;
		pad = NPY_ALIGN - (prefix + text_len) % NPY_ALIGN;
	}
	size_t header_len = text_len + pad, total = prefix + header_len;
	if (total > size)
		return 0;
	memcpy(out, npy_magic, sizeof npy_magic);
	out[6] = prefix == NPY_PREFIX_V1 ? 1 : 2;
	out[7] = 0;
	for (size_t i = 0; i < prefix - 8; i++)
		out[8 + i] = (char)(header_len >> (8 * i) & 0xff);
	memcpy(out + prefix, dict, (size_t)dict_len);
	memset(out + prefix + dict_len, ' ', pad);
	out[total - 1] = '\n';
	return total;
}

f8_status f8_npy_write(const char *path, const f8_rt_tensor *tensor, f8_diag *diag) {
	f8_status status = check_tensor(path, tensor, diag);
	if (status)
		return status;
	const char *descr = descr_of(tensor->dtype);
	if (!descr) {
		f8_diag_hint(diag, "widen the tensor to f32 first: numpy has no standard type for "
				   "%s (ml_dtypes' arrays are saved as opaque bytes)",
			     f8_dtype_name(tensor->dtype));
		return fail(diag, path, F8_ERR_UNSUPPORTED, "cannot write a %s tensor to %s: .npy "
			    "has no descr for %s", f8_dtype_name(tensor->dtype), path,
			    f8_dtype_name(tensor->dtype));
	}
	char header[1024];
	size_t header_len = make_header(tensor, descr, header, sizeof header);
	if (!header_len) // cannot happen with F8_MAX_RANK dims: the buffer holds any rank
		return fail(diag, path, F8_ERR_ARGUMENT, "cannot write %s: header too long", path);
	f8_atomic_file *file;
	if ((status = f8_atomic_file_open(path, &file, diag)))
		return status;
	if ((status = f8_atomic_file_write(file, header, header_len, diag)) ||
	    (status = f8_atomic_file_write(file, tensor->data, tensor->n_bytes, diag))) {
		f8_atomic_file_abort(file);
		return status;
	}
	return f8_atomic_file_commit(file, diag);
}
