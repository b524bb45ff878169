/*
 * libFuzzer target for the text IR parser (ir/text_parse.c): arbitrary bytes, not terminated, go
 * to f8_text_parse as a user's file would; a graph that parses goes through the verifier (which
 * may refuse it, but must not crash) and must then round-trip as DESIGN.md promises: printing it,
 * parsing the print and printing again gives the same text. A broken round trip aborts, so
 * libFuzzer keeps the input.
 *
 * Built by the `fuzz` preset (F8C_FUZZ=ON, clang, -fsanitize=fuzzer,address,undefined); seeds in
 * tests/fuzz/corpus_text/.
 */
#include <stdint.h> // uint8_t
#include <stdio.h>  // fprintf
#include <stdlib.h> // abort
#include <string.h> // memcmp

#include "ir/alloc.h"  // f8_free
#include "ir/text.h"   // f8_text_parse, f8_text_print_string
#include "ir/verify.h" // f8_graph_verify

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Prints `graph` or aborts: printing a graph the parser built cannot fail but for memory. */
static char *print_or_abort(const f8_graph *graph, size_t *len) {
	char *text = NULL;
	if (f8_text_print_string(graph, &text, len) != F8_OK) {
		fprintf(stderr, "fuzz_text: printing a parsed graph failed\n");
		abort();
	}
	return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_graph *graph = NULL;
	if (f8_text_parse((const char *)data, size, "fuzz.f8ir", &graph, &diag) != F8_OK)
		return 0;
	f8_diag_clear(&diag);
	(void)f8_graph_verify(graph, &diag); // a parsed graph may be ill-typed: only no crash

	size_t first_len = 0, second_len = 0;
	char *first = print_or_abort(graph, &first_len);
	f8_graph *again = NULL;
	f8_diag_clear(&diag);
	if (f8_text_parse(first, first_len, "printed.f8ir", &again, &diag) != F8_OK) {
		fprintf(stderr, "fuzz_text: the printed graph does not parse back\n");
		f8_diag_print(&diag, stderr);
		fprintf(stderr, "--- printed:\n%s", first);
		abort();
	}
	char *second = print_or_abort(again, &second_len);
	if (first_len != second_len || memcmp(first, second, first_len) != 0) {
		fprintf(stderr, "fuzz_text: print, parse, print changes the text\n--- first:\n%s"
				"--- second:\n%s", first, second);
		abort();
	}
	f8_free(first);
	f8_free(second);
	f8_graph_destroy(again);
	f8_graph_destroy(graph);
	return 0;
}
