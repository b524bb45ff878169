/*
 * Copies files through f8c's readers and writers, for tests/runtime/test_formats.py to hold
 * them against numpy, the safetensors package and llm.c's token files:
 *   format_tool npy IN OUT                  f8_npy_read, then f8_npy_write
 *   format_tool safetensors IN OUT          every tensor and the metadata, in the file's order
 *   format_tool tokens FORMAT IN OUT        f8_tokens_load (auto|llmc|uint16|uint32), then
 *                                           f8_tokens_write_llmc
 *   format_tool split N W1 W2 [W3]          f8_tokens_split: one "BEGIN END" line per range
 * Exit status: 0 done, 1 f8c refused the input (its diagnostic on stderr), 2 wrong usage.
 */
#include <stdio.h>  // printf, fprintf
#include <stdlib.h> // strtod, strtoull
#include <string.h> // strcmp

#include "ir/alloc.h"            // f8_calloc, f8_free
#include "runtime/npy.h"         // f8_npy_read, f8_npy_write
#include "runtime/safetensors.h" // f8_safetensors_*
#include "runtime/tokens.h"      // f8_tokens_load, f8_tokens_write_llmc, f8_tokens_split

static f8_status copy_npy(const char *in, const char *out, f8_diag *diag) {
	f8_rt_tensor tensor;
	f8_status status = f8_npy_read(in, &tensor, diag);
	if (!status)
		status = f8_npy_write(out, &tensor, diag);
	f8_rt_tensor_destroy(&tensor);
	return status;
}

/* Reads every tensor of the open `file` and writes them all with its metadata to `out`. */
static f8_status copy_tensors(const f8_safetensors *file, const char *out, f8_diag *diag) {
	size_t n = f8_safetensors_count(file), n_metadata = f8_safetensors_metadata_count(file);
	f8_rt_tensor *tensors = f8_calloc(n + 1, sizeof *tensors);
	const f8_rt_tensor **pointers = f8_calloc(n + 1, sizeof *pointers);
	const char **names = f8_calloc(n + 1, sizeof *names);
	const char **keys = f8_calloc(n_metadata + 1, sizeof *keys);
	const char **values = f8_calloc(n_metadata + 1, sizeof *values);
	f8_status status = tensors && pointers && names && keys && values
				   ? F8_OK
				   : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	for (size_t i = 0; !status && i < n; i++) {
		names[i] = f8_safetensors_name(file, i);
		pointers[i] = &tensors[i];
		status = f8_safetensors_read(file, names[i], &tensors[i], diag);
	}
	for (size_t i = 0; !status && i < n_metadata; i++) {
		keys[i] = f8_safetensors_metadata_key(file, i);
		values[i] = f8_safetensors_metadata(file, keys[i]);
	}
	if (!status)
		status = f8_safetensors_write(out, names, pointers, n, keys, values, n_metadata,
					      diag);
	for (size_t i = 0; tensors && i < n; i++)
		f8_rt_tensor_destroy(&tensors[i]);
	f8_free(tensors);
	f8_free(pointers);
	f8_free(names);
	f8_free(keys);
	f8_free(values);
	return status;
}

static f8_status copy_safetensors(const char *in, const char *out, f8_diag *diag) {
	f8_safetensors *file;
	f8_status status = f8_safetensors_open(in, &file, diag);
	if (status)
		return status;
	status = copy_tensors(file, out, diag);
	f8_safetensors_close(file);
	return status;
}

static f8_status copy_tokens(const char *format_name, const char *in, const char *out,
			     f8_diag *diag) {
	f8_token_format format;
	if (!f8_token_format_from_name(format_name, &format))
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "unknown token format %s", format_name);
	f8_tokens tokens;
	f8_status status = f8_tokens_load(in, format, &tokens, diag);
	if (!status)
		status = f8_tokens_write_llmc(out, tokens.tokens, tokens.n, diag);
	f8_tokens_destroy(&tokens);
	return status;
}

static f8_status split(int argc, char **argv, f8_diag *diag) {
	size_t n = (size_t)strtoull(argv[2], NULL, 10);
	double weights[3];
	int n_weights = argc - 3;
	for (int i = 0; i < n_weights; i++)
		weights[i] = strtod(argv[3 + i], NULL);
	f8_token_range ranges[3];
	f8_status status = f8_tokens_split(n, weights, n_weights, ranges, diag);
	for (int i = 0; !status && i < n_weights; i++)
		printf("%zu %zu\n", ranges[i].begin, ranges[i].end);
	return status;
}

int main(int argc, char **argv) {
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_status status;
	if (argc == 4 && strcmp(argv[1], "npy") == 0)
		status = copy_npy(argv[2], argv[3], &diag);
	else if (argc == 4 && strcmp(argv[1], "safetensors") == 0)
		status = copy_safetensors(argv[2], argv[3], &diag);
	else if (argc == 5 && strcmp(argv[1], "tokens") == 0)
		status = copy_tokens(argv[2], argv[3], argv[4], &diag);
	else if ((argc == 5 || argc == 6) && strcmp(argv[1], "split") == 0)
		status = split(argc, argv, &diag);
	else {
		fprintf(stderr, "usage: format_tool npy|safetensors IN OUT | "
				"tokens FORMAT IN OUT | split N W1 W2 [W3]\n");
		return 2;
	}
	if (status) {
		f8_diag_print(&diag, stderr);
		return 1;
	}
	return 0;
}
