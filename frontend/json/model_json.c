/*
 * The JSON model frontend's entry points: read a file, read its description into a config
 * (model_config.c), build the graph (model_build.c).
 */
#include "frontend/json/model_json.h" // f8_json_model_parse, f8_json_model_load

#include <errno.h>  // errno
#include <stdio.h>  // fopen, fread
#include <string.h> // strerror

#include "ir/alloc.h" // f8_malloc, f8_realloc, f8_free

f8_status f8_json_model_parse(const char *text, size_t len, const char *filename,
			      int64_t vocab_multiple, f8_graph **out, f8_diag *diag) {
	*out = NULL;
	f8_json_model_config config;
	f8_status status = f8_json_model_config_read(text, len, filename, &config, diag);
	if (status)
		return status;
	if (vocab_multiple > 0)
		config.vocab_multiple = vocab_multiple;
	return f8_json_model_build(&config, out, diag);
}

/*
 * Reads the file at `path` into *text (f8_malloc'd, *len bytes plus a terminator), refusing one
 * over F8_JSON_MODEL_MAX_BYTES before reading it all. Reads in pieces rather than trusting the
 * size the file claims, so pipes work too.
 */
static f8_status read_file(const char *path, char **text, size_t *len, f8_diag *diag) {
	*text = NULL;
	*len = 0;
	FILE *file = fopen(path, "rb");
	if (!file) {
		f8_diag_at(diag, path, 0, 0, NULL, 0);
		return f8_diag_set(diag, F8_ERR_IO, "cannot open: %s", strerror(errno));
	}
	enum { CHUNK = 16384 };
	f8_status status = F8_OK;
	char *buffer = NULL;
	size_t used = 0;
	for (;;) {
		char *grown = f8_realloc(buffer, used + CHUNK + 1);
		if (!grown) {
			status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory reading %s", path);
			break;
		}
		buffer = grown;
		size_t got = fread(buffer + used, 1, CHUNK, file);
		used += got;
		if (got < CHUNK || used > F8_JSON_MODEL_MAX_BYTES)
			break;
	}
	if (!status && ferror(file))
		status = f8_diag_set(diag, F8_ERR_IO, "cannot read: %s", strerror(errno));
	if (!status && used > F8_JSON_MODEL_MAX_BYTES) {
		f8_diag_hint(diag, "a model description is a few hundred bytes of JSON");
		status = f8_diag_set(diag, F8_ERR_INVALID, "the file is more than the %d bytes "
				     "f8c reads as a model description", F8_JSON_MODEL_MAX_BYTES);
	}
	fclose(file);
	if (status) {
		f8_diag_at(diag, path, 0, 0, NULL, 0);
		f8_free(buffer);
		return status;
	}
	buffer[used] = '\0';
	*text = buffer;
	*len = used;
	return F8_OK;
}

f8_status f8_json_model_load(const char *path, int64_t vocab_multiple, f8_graph **out,
			     f8_diag *diag) {
	*out = NULL;
	char *text;
	size_t len;
	f8_status status = read_file(path, &text, &len, diag);
	if (status)
		return status;
	status = f8_json_model_parse(text, len, path, vocab_multiple, out, diag);
	f8_free(text);
	return status;
}
