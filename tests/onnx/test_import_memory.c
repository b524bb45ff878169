/*
 * f8_onnx_import_memory: a model given as bytes imports to the same graph as its file, reads
 * its external data from the folder it is given, and refuses external data when given none.
 *
 * usage: test_import_memory SOURCE_DIR
 */
#include <stdio.h>  // printf, snprintf
#include <stdlib.h> // free
#include <string.h> // strcmp, strstr

#include "frontend/onnx/onnx_import.h" // f8_onnx_import, f8_onnx_import_memory
#include "ir/alloc.h"                  // f8_free
#include "ir/text.h"                   // f8_text_print_string
#include "tests/test_support.h"        // CHECK, test_read_file

/* The graph's text form (f8_malloc'd), or NULL. */
static char *text_of(const f8_graph *graph) {
	char *text = NULL;
	size_t len;
	return graph && f8_text_print_string(graph, &text, &len) == F8_OK ? text : NULL;
}

int main(int argc, char **argv) {
	if (argc != 2) {
		printf("usage: test_import_memory SOURCE_DIR\n");
		return 2;
	}
	char folder[4096], path[4200];
	snprintf(folder, sizeof folder, "%s/tests/data/onnx/llama-tiny/", argv[1]);
	snprintf(path, sizeof path, "%smodel.onnx", folder);
	size_t size = 0;
	char *bytes = test_read_file(path, &size);
	CHECK(bytes != NULL);

	f8_graph *from_file = NULL, *from_memory = NULL, *no_folder = NULL;
	f8_diag diag;
	f8_diag_clear(&diag);
	CHECK(f8_onnx_import(path, NULL, 0, &from_file, &diag) == F8_OK);
	f8_diag_clear(&diag);
	CHECK(f8_onnx_import_memory(bytes, size, path, folder, NULL, 0, &from_memory, &diag) == F8_OK);
	char *a = text_of(from_file), *b = text_of(from_memory);
	CHECK(a && b && strcmp(a, b) == 0);

	// The fixture keeps its weights in external data: without a folder that is an error.
	f8_diag_clear(&diag);
	CHECK(f8_onnx_import_memory(bytes, size, "in-memory.onnx", NULL, NULL, 0, &no_folder,
				    &diag) != F8_OK);
	CHECK(no_folder == NULL && strstr(diag.message, "no folder") != NULL);

	// Bytes that are no model: an error naming the given name, not a crash.
	f8_diag_clear(&diag);
	CHECK(f8_onnx_import_memory("\x08\x07garbage", 9, "junk.onnx", NULL, NULL, 0, &no_folder,
				    &diag) != F8_OK);
	CHECK(strstr(diag.message, "junk.onnx") != NULL);

	f8_free(a);
	f8_free(b);
	f8_graph_destroy(from_file);
	f8_graph_destroy(from_memory);
	free(bytes);
	return test_finish();
}
