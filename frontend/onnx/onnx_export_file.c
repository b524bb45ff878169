/*
 * Writing the ONNX writer's two files so that a failure leaves neither behind half-written: the
 * weights and the packed model go to temporary files in the output's folder, are synced, and are
 * renamed into place (the data first), then the folder is synced. On any failure, an interrupt
 * included, the temporary files are removed, and so is a data file renamed before its model.
 */
#define _POSIX_C_SOURCE 200809L // fsync, getpid, open flags, statvfs

#include <errno.h>       // errno
#include <fcntl.h>       // open, O_*
#include <stdarg.h>      // va_list
#include <stdio.h>       // vsnprintf, rename
#include <string.h>      // memcpy, strerror, strrchr
#include <sys/stat.h>    // stat, S_ISDIR, S_ISREG
#include <sys/statvfs.h> // statvfs
#include <unistd.h>      // close, fsync, getpid, unlink, write

#include "frontend/onnx/onnx_export_internal.h" // export_paths, export_weight
#include "ir/alloc.h"                           // f8_malloc, f8_free
#include "ir/fp8.h"                             // f8_float_encode

enum { CHUNK_ELEMENTS = 1 << 16 }; // weights are made and written this many elements at a time

/* Formats a path into `out` (EXPORT_PATH_MAX bytes); false when it does not fit. */
static bool format_path(char *out, const char *format, ...) {
	va_list args;
	va_start(args, format);
	int n = vsnprintf(out, EXPORT_PATH_MAX, format, args);
	va_end(args);
	return n >= 0 && n < EXPORT_PATH_MAX;
}

f8_status f8_export_make_paths(const char *path, export_paths *paths, f8_diag *diag) {
	const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
	int folder_len = slash ? (slash == path ? 1 : (int)(slash - path)) : 1;
	long pid = (long)getpid();
	if (!*base || !format_path(paths->folder, "%.*s", folder_len, slash ? path : ".") ||
	    !format_path(paths->model, "%s", path) || !format_path(paths->data, "%s.data", path) ||
	    !format_path(paths->model_temp, "%s/.%s.tmp-%ld", paths->folder, base, pid) ||
	    !format_path(paths->data_temp, "%s/.%s.data.tmp-%ld", paths->folder, base, pid))
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "'%s' is not a file name to write the "
				   "model to", path);
	paths->data_location = paths->data + (base - path);
	struct stat info;
	if (stat(paths->folder, &info) != 0 || !S_ISDIR(info.st_mode)) {
		f8_diag_set(diag, F8_ERR_ARGUMENT, "cannot write %s: the folder %s does not exist",
			    path, paths->folder);
		f8_diag_hint(diag, "create the folder first, or write the model into an existing "
				   "one");
		return F8_ERR_ARGUMENT;
	}
	// Replacing is for files only: found out now, not after the weights are written.
	const char *targets[2] = {paths->model, paths->data};
	for (int i = 0; i < 2; i++)
		if (stat(targets[i], &info) == 0 && !S_ISREG(info.st_mode))
			return f8_diag_set(diag, F8_ERR_ARGUMENT, "cannot write %s: it exists and "
					   "is not a regular file", targets[i]);
	return F8_OK;
}

/* Fails with F8_ERR_IO: "cannot `what` `path`: " and errno's text. */
static f8_status io_error(f8_diag *diag, const char *what, const char *path) {
	f8_diag_set(diag, F8_ERR_IO, "cannot %s %s: %s", what, path, strerror(errno));
	return F8_ERR_IO;
}

/* Writes all `n` bytes at `data` to `fd`. */
static bool write_all(int fd, const void *data, size_t n) {
	const uint8_t *bytes = data;
	while (n) {
		ssize_t done = write(fd, bytes, n);
		if (done < 0 && errno == EINTR)
			continue; // a signal: the caller looks at `interrupted` between chunks
		if (done <= 0)
			return false;
		bytes += done, n -= (size_t)done;
	}
	return true;
}

/* One weight's elements [first, first + n) made and stored in its dtype (f32, bf16 or f16),
 * into `bytes`; f8c's tensor data is little-endian, as its hosts are. */
static void make_chunk(const f8_weight_init *rule, uint64_t seed, const f8_value *value,
		       uint64_t first, uint64_t n, float *values, uint8_t *bytes) {
	f8_weight_init_fill(rule, seed, value->name, first, n, values);
	if (value->type.dtype == F8_DTYPE_F32) {
		memcpy(bytes, values, (size_t)n * sizeof *values);
		return;
	}
	for (uint64_t i = 0; i < n; i++) {
		uint16_t bits = (uint16_t)f8_float_encode(value->type.dtype, values[i], false);
		memcpy(bytes + 2 * i, &bits, 2);
	}
}

/* The scratch of write_weights: one chunk as floats and as stored bytes. */
typedef struct export_scratch {
	float *values;  // (CHUNK_ELEMENTS)
	uint8_t *bytes; // (CHUNK_ELEMENTS * 4)
} export_scratch;

/* Writes the weights at their offsets, chunk by chunk; zeros pad the gaps. False (errno EINTR
 * when it was that) when a write fails or the options' `interrupted` is set. */
static bool write_weights(const f8_graph *graph, int fd, const export_weight *weights,
			  uint32_t n_weights, const f8_onnx_export_options *options,
			  const export_scratch *scratch) {
	static const uint8_t zeros[F8_ONNX_EXPORT_ALIGN];
	int64_t layers = f8_weight_init_layers(graph);
	uint64_t at = 0;
	for (uint32_t w = 0; w < n_weights; w++) {
		const f8_value *value = &graph->values[weights[w].value];
		size_t width = f8_dtype_get_info(value->type.dtype)->bytes;
		uint64_t count = weights[w].n_bytes / width;
		f8_weight_init rule = f8_weight_init_rule(graph, weights[w].value, layers);
		if (!write_all(fd, zeros, (size_t)(weights[w].offset - at)))
			return false;
		for (uint64_t first = 0; first < count; first += CHUNK_ELEMENTS) {
			uint64_t n = count - first;
			n = n < CHUNK_ELEMENTS ? n : CHUNK_ELEMENTS;
			if (options->interrupted && *options->interrupted) {
				errno = EINTR;
				return false;
			}
			make_chunk(&rule, options->seed, value, first, n, scratch->values,
				   scratch->bytes);
			if (!write_all(fd, scratch->bytes, (size_t)n * width))
				return false;
		}
		at = weights[w].offset + weights[w].n_bytes;
	}
	return true;
}

/* What exists while writing, for the clean-up. */
typedef struct export_files {
	int fd;                     // the temporary file being written, or -1
	bool data_made, model_made; // temporary files that exist
	bool data_placed;           // the data file renamed into place, its model not yet
} export_files;

/* After a failure: closes what is open and removes every file written. */
static void discard(const export_paths *paths, export_files *files) {
	if (files->fd >= 0)
		close(files->fd);
	if (files->data_made)
		unlink(paths->data_temp);
	if (files->model_made)
		unlink(paths->model_temp);
	if (files->data_placed)
		unlink(paths->data);
}

/* Creates `path`, which must not exist, for writing (permissions as the umask allows). */
static f8_status create_temp(f8_diag *diag, const export_paths *paths, const char *path,
			     export_files *files, bool *made) {
	files->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
	if (files->fd < 0)
		return io_error(diag, "create a file in", paths->folder);
	*made = true;
	return F8_OK;
}

/* Syncs and closes the temporary file written as `path`; `ok` says whether writing went well. */
static f8_status finish_temp(f8_diag *diag, const char *path, export_files *files, bool ok,
			     const f8_onnx_export_options *options) {
	if (!ok && errno == EINTR && options->interrupted && *options->interrupted)
		return f8_diag_set(diag, F8_ERR_IO, "interrupted while writing %s; removed it",
				   path);
	if (!ok || fsync(files->fd) != 0)
		return io_error(diag, "write", path);
	int closed = close(files->fd);
	files->fd = -1;
	return closed ? io_error(diag, "write", path) : F8_OK;
}

/* Renames the written temporary files into place, the data first, and syncs the folder. */
static f8_status place_files(f8_diag *diag, const export_paths *paths, export_files *files) {
	if (rename(paths->data_temp, paths->data) != 0)
		return io_error(diag, "write", paths->data);
	files->data_made = false, files->data_placed = true;
	if (rename(paths->model_temp, paths->model) != 0)
		return io_error(diag, "write", paths->model);
	files->model_made = false, files->data_placed = false;
	int folder = open(paths->folder, O_RDONLY | O_CLOEXEC);
	if (folder >= 0) { // the renames last through a crash once the folder is synced
		fsync(folder);
		close(folder);
	}
	return F8_OK;
}

/* Fails early when the folder lacks the room for the weights (they may be hundreds of GB). */
static f8_status check_room(f8_diag *diag, const export_paths *paths, uint64_t data_size) {
	struct statvfs folder;
	if (statvfs(paths->folder, &folder) != 0)
		return F8_OK; // no answer: the writes will tell
	uint64_t room = (uint64_t)folder.f_bavail * folder.f_frsize;
	if (room >= data_size)
		return F8_OK;
	f8_diag_set(diag, F8_ERR_IO, "cannot write %s: its %.1f GB of weights do not fit the "
		    "%.1f GB free in %s", paths->data, (double)data_size / 1e9, (double)room / 1e9,
		    paths->folder);
	f8_diag_hint(diag, "write the model to a folder with more room");
	return F8_ERR_IO;
}

f8_status f8_export_write_files(const f8_graph *graph, const uint8_t *packed, size_t size,
			     const export_paths *paths, const export_weight *weights,
			     uint32_t n_weights, uint64_t data_size,
			     const f8_onnx_export_options *options, f8_diag *diag) {
	export_scratch scratch = {f8_malloc(CHUNK_ELEMENTS * sizeof(float)),
				  f8_malloc(CHUNK_ELEMENTS * sizeof(float))};
	export_files files = {.fd = -1};
	f8_status status = check_room(diag, paths, data_size);
	if (!status && (!scratch.values || !scratch.bytes))
		status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory writing the ONNX model");
	if (!status)
		status = create_temp(diag, paths, paths->data_temp, &files, &files.data_made);
	if (!status) {
		bool ok = write_weights(graph, files.fd, weights, n_weights, options, &scratch);
		status = finish_temp(diag, paths->data_temp, &files, ok, options);
	}
	if (!status)
		status = create_temp(diag, paths, paths->model_temp, &files, &files.model_made);
	if (!status) {
		bool ok = write_all(files.fd, packed, size);
		status = finish_temp(diag, paths->model_temp, &files, ok, options);
	}
	if (!status)
		status = place_files(diag, paths, &files);
	if (status)
		discard(paths, &files);
	f8_free(scratch.values);
	f8_free(scratch.bytes);
	return status;
}
