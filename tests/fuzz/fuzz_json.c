/*
 * libFuzzer target for the JSON model descriptions (frontend/json/): arbitrary bytes go to
 * f8_json_model_parse as a user's file would. A description that builds must keep the
 * frontend's promises: the graph verifies, fuse-patterns runs on it without error, and its text
 * form round-trips (print, parse, print gives the same text). A broken promise aborts, so
 * libFuzzer keeps the input.
 *
 * Built by the `fuzz` preset (F8C_FUZZ=ON, clang, -fsanitize=fuzzer,address,undefined); seeds in
 * tests/fuzz/corpus_json/ (the model zoo).
 */
#include <stdint.h> // uint8_t
#include <stdio.h>  // fprintf
#include <stdlib.h> // abort
#include <string.h> // memcmp

#include "frontend/json/model_json.h" // f8_json_model_parse
#include "ir/alloc.h"                 // f8_free
#include "ir/text.h"                  // f8_text_parse, f8_text_print_string
#include "ir/verify.h"                // f8_graph_verify
#include "passes/pipeline.h"          // f8_pipeline_run

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const f8_diag *diag) {
	fprintf(stderr, "fuzz_json: %s\n", what);
	if (diag)
		f8_diag_print(diag, stderr);
	abort();
}

enum { MAX_NODES = 4000 }; // about 180 GPT layers

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_graph *graph = NULL;
	if (f8_json_model_parse((const char *)data, size, "fuzz.json", 0, &graph, &diag) != F8_OK)
		return 0;
	// A description of thousands of layers is valid, and its graph takes time in proportion
	// (712 layers: 0.1 s in a release build, 1.6 s here, over 10 s with the machine's other
	// fuzzers): what follows is checked on graphs a fuzzing iteration can afford; the zoo's
	// tests build the large ones.
	if (graph->n_nodes > MAX_NODES) {
		f8_graph_destroy(graph);
		return 0;
	}
	if (f8_graph_verify(graph, &diag) != F8_OK)
		fail("a description that built does not verify", &diag);
	if (f8_pipeline_run(graph, "fuse-patterns", true, &diag) != F8_OK)
		fail("fuse-patterns failed on a built description", &diag);
	char *first = NULL, *second = NULL;
	size_t first_len = 0, second_len = 0;
	f8_graph *again = NULL;
	if (f8_text_print_string(graph, &first, &first_len) != F8_OK)
		fail("printing failed", NULL);
	if (f8_text_parse(first, first_len, "printed.f8ir", &again, &diag) != F8_OK)
		fail("the printed graph does not parse back", &diag);
	if (f8_text_print_string(again, &second, &second_len) != F8_OK)
		fail("printing the parsed graph failed", NULL);
	if (first_len != second_len || memcmp(first, second, first_len) != 0)
		fail("print, parse, print changes the text", NULL);
	f8_free(first);
	f8_free(second);
	f8_graph_destroy(again);
	f8_graph_destroy(graph);
	return 0;
}
