/*
 * libFuzzer target for the ONNX loader: arbitrary bytes are loaded as a model whose folder is a
 * private temporary one, as `f8c dump-ir` loads a file (f8_onnx_import_memory, which skips only
 * the file read, then canonicalize). A model that loads must keep the loader's promises: it verifies, its text form
 * round-trips (print, parse, print gives the same text), and it loads again with its symbolic
 * sizes bound (`--dim`), so the folding of shape arithmetic over constants runs too. A broken
 * promise aborts, so libFuzzer keeps the input.
 *
 * The folder holds what a model's external data may name: model.onnx.data (512 KiB, as the
 * exporter fixtures in the corpus expect), weights/params.bin, a symbolic link and a file of two
 * names (linked.bin, hard.bin), so the refusals are reached as well as the reads.
 *
 * Built by the `fuzz` preset (F8C_FUZZ=ON, clang, -fsanitize=fuzzer,address,undefined); seeds in
 * tests/fuzz/corpus_onnx/ (tests/fuzz/make_corpus.py makes them).
 */
#define _POSIX_C_SOURCE 200809L // mkdtemp, symlink, link

#include <fcntl.h>    // open, O_*
#include <stdint.h>   // uint8_t, uint32_t
#include <stdio.h>    // fprintf, snprintf
#include <stdlib.h>   // abort, atexit, getenv, mkdtemp
#include <string.h>   // memcmp
#include <sys/stat.h> // mkdir
#include <unistd.h>   // write, close, unlink, rmdir, symlink, link

#include "frontend/frontend.h" // f8_dim_binding
#include "frontend/onnx/onnx_import.h" // f8_onnx_import_memory
#include "passes/pipeline.h"   // f8_pipeline_run
#include "ir/alloc.h"          // f8_free
#include "ir/text.h"           // f8_text_print_string, f8_text_parse
#include "ir/verify.h"         // f8_graph_verify

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { DATA_BYTES = 512 * 1024, MAX_BINDINGS = 8 };

static char folder[256];

/* The files the folder holds besides model.onnx, relative to it, in creation order. */
static const char *const extras[] = {"model.onnx.data", "weights/params.bin", "weights/link.bin",
				     "linked.bin", "hard.bin", "weights"};

static void remove_folder(void) {
	char path[400];
	for (int i = (int)(sizeof extras / sizeof extras[0]) - 1; i >= 0; i--) {
		snprintf(path, sizeof path, "%s/%s", folder, extras[i]);
		if (unlink(path) != 0)
			rmdir(path);
	}
	rmdir(folder);
}

static void write_or_die(const char *path, const uint8_t *data, size_t size) {
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	size_t done = 0;
	while (fd >= 0 && done < size) {
		ssize_t wrote = write(fd, data + done, size - done);
		if (wrote <= 0)
			break;
		done += (size_t)wrote;
	}
	if (fd < 0 || done < size || close(fd) != 0) {
		fprintf(stderr, "fuzz_onnx: cannot write %s\n", path);
		abort();
	}
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
	(void)argc, (void)argv;
	const char *tmp = getenv("TMPDIR");
	snprintf(folder, sizeof folder, "%s/f8c-fuzz-onnx-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(folder)) {
		fprintf(stderr, "fuzz_onnx: cannot make a folder in %s\n", folder);
		abort();
	}
	atexit(remove_folder);
	// Data that is not all zeros, so folded integer constants read from it are not all alike.
	static uint8_t data[DATA_BYTES];
	uint32_t state = 12345;
	for (size_t i = 0; i < sizeof data; i++) {
		state = state * 1103515245u + 12345u;
		data[i] = i < sizeof data / 2 ? 0 : (uint8_t)(state >> 24);
	}
	char path[400], target[400];
	snprintf(path, sizeof path, "%s/weights", folder);
	mkdir(path, 0700);
	snprintf(path, sizeof path, "%s/model.onnx.data", folder);
	write_or_die(path, data, sizeof data);
	snprintf(path, sizeof path, "%s/weights/params.bin", folder);
	write_or_die(path, data + sizeof data / 2, 4096);
	snprintf(target, sizeof target, "%s/model.onnx.data", folder);
	snprintf(path, sizeof path, "%s/weights/link.bin", folder);
	if (symlink(target, path) != 0)
		fprintf(stderr, "fuzz_onnx: no symbolic link %s\n", path);
	snprintf(path, sizeof path, "%s/linked.bin", folder); // two names, one file: both refused
	write_or_die(path, data + sizeof data / 2, 4096);
	snprintf(target, sizeof target, "%s/linked.bin", folder);
	snprintf(path, sizeof path, "%s/hard.bin", folder);
	if (link(target, path) != 0)
		fprintf(stderr, "fuzz_onnx: no hard link %s\n", path);
	return 0;
}

/* Aborts when the loaded `graph` fails the verifier or its text form does not round-trip. */
static void check_promises(const f8_graph *graph, const char *when) {
	f8_diag diag;
	f8_diag_clear(&diag);
	if (f8_graph_verify(graph, &diag) != F8_OK) {
		fprintf(stderr, "fuzz_onnx: a model that loaded %s does not verify\n", when);
		f8_diag_print(&diag, stderr);
		abort();
	}
	char *first = NULL, *second = NULL;
	size_t first_len = 0, second_len = 0;
	f8_graph *again = NULL;
	if (f8_text_print_string(graph, &first, &first_len) != F8_OK)
		abort();
	if (f8_text_parse(first, first_len, "printed.f8ir", &again, &diag) != F8_OK) {
		fprintf(stderr, "fuzz_onnx: the printed graph (%s) does not parse back\n", when);
		f8_diag_print(&diag, stderr);
		fprintf(stderr, "--- printed:\n%s", first);
		abort();
	}
	if (f8_text_print_string(again, &second, &second_len) != F8_OK)
		abort();
	if (first_len != second_len || memcmp(first, second, first_len) != 0) {
		fprintf(stderr, "fuzz_onnx: print, parse, print (%s) changes the text\n--- first:\n%s"
				"--- second:\n%s", when, first, second);
		abort();
	}
	f8_free(first);
	f8_free(second);
	f8_graph_destroy(again);
}

/* Loads the bytes as f8_frontend_load loads a file: import, then canonicalize. */
static f8_status load(const uint8_t *data, size_t size, const f8_dim_binding *dims,
		      uint32_t n_dims, f8_graph **graph) {
	char root[300];
	snprintf(root, sizeof root, "%s/", folder);
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_status status = f8_onnx_import_memory(data, size, "model.onnx", root, dims, n_dims, graph,
						 &diag);
	if (!status && (status = f8_pipeline_run(*graph, "canonicalize", false, &diag))) {
		f8_graph_destroy(*graph);
		*graph = NULL;
	}
	return status;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
	f8_graph *graph = NULL;
	if (load(data, size, NULL, 0, &graph) != F8_OK)
		return 0;
	check_promises(graph, "as it is");

	// Again with every symbolic size bound to a small value of its own (2, 3, ...).
	f8_dim_binding dims[MAX_BINDINGS];
	char names[MAX_BINDINGS][64];
	uint32_t n_dims = 0;
	for (uint32_t i = 0; i < graph->n_symbols && n_dims < MAX_BINDINGS; i++) {
		snprintf(names[n_dims], sizeof names[n_dims], "%s", graph->symbols[i]);
		dims[n_dims] = (f8_dim_binding){.name = names[n_dims], .value = 2 + (int64_t)n_dims};
		n_dims++;
	}
	f8_graph_destroy(graph);
	if (!n_dims)
		return 0;
	if (load(data, size, dims, n_dims, &graph) == F8_OK) {
		check_promises(graph, "with --dim");
		f8_graph_destroy(graph);
	}
	return 0;
}
