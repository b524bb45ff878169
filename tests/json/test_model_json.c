/*
 * Unit tests of the JSON model frontend through its C API: defaults by architecture, every
 * combination of the options building a graph that verifies and round-trips through the text
 * IR, errors that carry a place and a hint, every prefix and byte flip of a description
 * handled, and allocation failure at every allocation (jansson's included).
 *
 * usage: test_model_json SOURCE_DIR
 */
#include <stdio.h>  // printf, snprintf
#include <stdlib.h> // malloc, realloc, free
#include <string.h> // strcmp, strstr

#include "frontend/json/model_json.h" // f8_json_model_parse, f8_json_model_config_read
#include "ir/alloc.h"                 // f8_free
#include "ir/text.h"                  // f8_text_print_string, f8_text_parse
#include "ir/verify.h"                // f8_graph_verify
#include "passes/pipeline.h"          // f8_pipeline_run
#include "tests/test_support.h"       // CHECK, test_read_file, test_fail_allocations_after

static f8_status read_config(const char *text, const char *file, f8_json_model_config *config,
			     f8_diag *diag) {
	f8_diag_clear(diag);
	return f8_json_model_config_read(text, strlen(text), file, config, diag);
}

static void test_defaults(void) {
	f8_json_model_config c;
	f8_diag diag;
	CHECK(read_config("{\"arch\": \"gpt\", \"vocab\": 50257, \"seq\": 1024, \"layers\": 12, "
			  "\"hidden\": 768, \"heads\": 12}", "models/gpt2.json", &c, &diag) == F8_OK);
	CHECK(strcmp(c.name, "gpt2") == 0 && c.ffn == 3072 && c.kv_heads == 12);
	CHECK(c.norm == F8_JSON_NORM_LAYERNORM && c.act == F8_JSON_ACT_GELU_TANH);
	CHECK(c.pos == F8_JSON_POS_LEARNED && c.bias && c.tie_embeddings && c.rope_theta == 0);
	CHECK(c.dtype == F8_DTYPE_F32 && c.norm_eps == 1e-5 && c.experts == 0 && c.top_k == 0);

	// Llama 2 7B: the MLP width by Llama's rule, 2/3 of 4 * 4096 rounded up to 256: 11008.
	CHECK(read_config("{\"arch\": \"llama\", \"vocab\": 32000, \"seq\": 4096, \"layers\": 32, "
			  "\"hidden\": 4096, \"heads\": 32, \"name\": \"llama-2-7b\"}", "x/y.json", &c,
			  &diag) == F8_OK);
	CHECK(strcmp(c.name, "llama-2-7b") == 0 && c.ffn == 11008 && c.kv_heads == 32);
	CHECK(c.norm == F8_JSON_NORM_RMSNORM && c.act == F8_JSON_ACT_SWIGLU);
	CHECK(c.pos == F8_JSON_POS_ROPE && !c.bias && !c.tie_embeddings && c.rope_theta == 10000.0);

	CHECK(read_config("{\"arch\": \"moe\", \"vocab\": 32000, \"seq\": 4096, \"layers\": 2, "
			  "\"hidden\": 4096, \"heads\": 32, \"experts\": 8, \"dtype\": \"bf16\"}", NULL,
			  &c, &diag) == F8_OK);
	CHECK(c.top_k == 2 && c.experts == 8 && c.dtype == F8_DTYPE_BF16 && strcmp(c.name, "moe") == 0);
	CHECK(read_config("{\"arch\": \"moe\", \"vocab\": 8, \"seq\": 8, \"layers\": 1, \"hidden\": 8, "
			  "\"heads\": 2, \"experts\": 1}", "", &c, &diag) == F8_OK);
	CHECK(c.top_k == 1); // Mixtral's 2, but never more than there are experts
}

/* One error case: the status, the place, and a word the message must hold. */
static void check_error(const char *text, f8_status status, uint32_t line, uint32_t column,
			const char *word) {
	f8_json_model_config config;
	f8_diag diag;
	f8_status got = read_config(text, "bad.json", &config, &diag);
	bool ok = got == status && diag.line == line && diag.column == column &&
		  strcmp(diag.file, "bad.json") == 0 && strstr(diag.message, word) != NULL;
	if (!ok)
		printf("FAIL: %s\n  status %d at %u:%u: %s\n", text, got, diag.line, diag.column,
		       diag.message);
	CHECK(ok);
}

static void test_errors(void) {
	check_error("{\"arch\": \"gpt\",\n \"vocab\": true}", F8_ERR_INVALID, 2, 11, "\"vocab\"");
	check_error("{\"arch\": \"gpt\",\n  \"heads\": 12,\n  \"hiden\": 1}", F8_ERR_INVALID, 3, 3,
		    "\"hiden\"");
	check_error("  {\"arch\": \"gpt\"}", F8_ERR_INVALID, 1, 3, "\"vocab\"");
	check_error("{\"arch\": \"gpt\", \"vocab\": 1, \"vocab\": 2}", F8_ERR_PARSE, 1, 29,
		    "\"vocab\"");
	check_error("{\"arch\": \"gpt\", \"vocab\": -3}", F8_ERR_INVALID, 1, 26, "\"vocab\"");
	check_error("{\"arch\": \"llama\", \"vocab\": 3, \"seq\": 3, \"layers\": 1, \"hidden\": 8, "
		    "\"heads\": 3}", F8_ERR_INVALID, 1, 76, "\"heads\"");
	check_error("{\"arch\": \"gpt\", \"vocab\": 2", F8_ERR_PARSE, 1, 27, "end of file");
	check_error("\n\n  nope", F8_ERR_PARSE, 3, 3, "malformed JSON");
	check_error("", F8_ERR_PARSE, 1, 1, "empty");
	check_error("{\"arch\": \"gpt\", \"name\": \"a\\u0001b\"}", F8_ERR_INVALID, 1, 25, "\"name\"");
	check_error("{\"arch\": \"gpt\", \"norm_eps\": 1.5}", F8_ERR_INVALID, 1, 29, "\"norm_eps\"");
	check_error("{\"arch\": \"gpt\", \"dtype\": \"f16\"}", F8_ERR_INVALID, 1, 26, "\"dtype\"");
	// The first error in the file is the one reported, whatever the order of the checks.
	check_error("{\"arch\": \"gpt\", \"bias\": 1, \"vocab\": \"x\"}", F8_ERR_INVALID, 1, 25,
		    "\"bias\"");

	f8_json_model_config config;
	f8_diag diag;
	f8_graph *graph = (f8_graph *)&config; // must come back NULL
	f8_diag_clear(&diag);
	CHECK(f8_json_model_parse("{}", 2, "empty.json", 0, &graph, &diag) == F8_ERR_INVALID);
	CHECK(graph == NULL && diag.hint[0] && strstr(diag.message, "\"arch\""));
	size_t huge = (size_t)F8_JSON_MODEL_MAX_BYTES + 1;
	char *big = malloc(huge);
	CHECK(big != NULL);
	if (big) {
		memset(big, ' ', huge);
		CHECK(f8_json_model_config_read(big, huge, "big.json", &config, &diag) == F8_ERR_INVALID);
		free(big);
	}
	CHECK(f8_json_model_load("/no/such/model.json", 0, &graph, &diag) == F8_ERR_IO && !graph);
}

/* Builds `text` and checks the graph: it verifies, and print -> parse -> print gives the same
 * text. */
static bool builds_and_round_trips(const char *text) {
	f8_graph *graph, *again = NULL;
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_status status = f8_json_model_parse(text, strlen(text), "combination.json", 0, &graph,
					       &diag);
	if (status) {
		printf("FAIL: %s\n  %s (%s)\n", text, diag.message, diag.node);
		return false;
	}
	char *first = NULL, *second = NULL;
	size_t first_len = 0, second_len = 0;
	bool ok = f8_graph_verify(graph, &diag) == F8_OK &&
		  f8_text_print_string(graph, &first, &first_len) == F8_OK &&
		  f8_text_parse(first, first_len, "printed", &again, &diag) == F8_OK &&
		  f8_pipeline_run(again, "canonicalize", true, &diag) == F8_OK &&
		  f8_text_print_string(again, &second, &second_len) == F8_OK &&
		  first_len == second_len && memcmp(first, second, first_len) == 0;
	if (!ok)
		printf("FAIL: %s does not verify or round-trip: %s\n", text, diag.message);
	f8_free(first);
	f8_free(second);
	f8_graph_destroy(again);
	f8_graph_destroy(graph);
	return ok;
}

/* Every combination of architecture, norm, activation, positions, biases, tying and dtype. */
static void test_combinations(void) {
	static const char *const archs[] = {"gpt", "llama", "moe"};
	static const char *const norms[] = {"layernorm", "rmsnorm"};
	static const char *const acts[] = {"gelu", "gelu_tanh", "swiglu"};
	static const char *const poss[] = {"learned", "rope"};
	static const char *const dtypes[] = {"f32", "bf16"}, *const bools[] = {"false", "true"};
	int built = 0;
	for (int i = 0; i < 3 * 2 * 3 * 2 * 2 * 2 * 2; i++) {
		int arch = i % 3, norm = i / 3 % 2, act = i / 6 % 3, pos = i / 18 % 2, bias = i / 36 % 2;
		int tie = i / 72 % 2, dtype = i / 144 % 2;
		if (arch == 2 && bias) // refused: GroupedLinear has no bias
			continue;
		char text[512];
		snprintf(text, sizeof text, "{\"arch\": \"%s\", \"vocab\": 64, \"seq\": 16, \"layers\": 2, "
			 "\"hidden\": 32, \"heads\": 4, \"kv_heads\": 2, \"ffn\": 48, \"norm\": \"%s\", "
			 "\"act\": \"%s\", \"pos\": \"%s\", \"bias\": %s, \"tie_embeddings\": %s, "
			 "\"dtype\": \"%s\"%s}", archs[arch], norms[norm], acts[act], poss[pos], bools[bias],
			 bools[tie], dtypes[dtype], arch == 2 ? ", \"experts\": 4, \"top_k\": 2" : "");
		built += builds_and_round_trips(text);
	}
	CHECK(built == 288 - 48);
}

/* Parses `len` bytes of `text`; false when it fails without a message and a line. */
static bool answers(const char *text, size_t len) {
	f8_graph *graph;
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_status status = f8_json_model_parse(text, len, "variant.json", 0, &graph, &diag);
	f8_graph_destroy(graph);
	return !status || (diag.message[0] && diag.line >= 1);
}

/* Every prefix of a description and each with one byte changed: an answer, never a crash, and
 * every error with a message and a line. */
static void test_malformed(const char *source_dir) {
	char path[4096];
	snprintf(path, sizeof path, "%s/models/llama-tiny.json", source_dir);
	size_t len;
	char *text = test_read_file(path, &len);
	CHECK(text != NULL);
	if (!text)
		return;
	static const char flips[] = {'{', '}', '"', ',', ':', '[', '9', '-', 'x', '\\', '\0', '\n'};
	bool all_answered = true;
	for (size_t cut = 0; cut <= len; cut++)
		all_answered &= answers(text, cut);
	for (size_t at = 0; at < len; at++) {
		char saved = text[at];
		text[at] = flips[at % sizeof flips];
		all_answered &= answers(text, len);
		text[at] = saved;
	}
	CHECK(all_answered);
	free(text);
}

/* Loads `path` with the n-th allocation failing, for every n: each run ends in F8_ERR_NOMEM or
 * success, never another error, a crash or a leak (LeakSanitizer watches in the sanitizer
 * build). */
static void check_allocation_failure(const char *path) {
	bool all_clean = true;
	long n;
	for (n = 0; n < 100000; n++) {
		f8_graph *graph;
		f8_diag diag;
		f8_diag_clear(&diag);
		test_fail_allocations_after(n);
		f8_status status = f8_json_model_load(path, 0, &graph, &diag);
		test_allocations_restore();
		f8_graph_destroy(graph);
		if (status == F8_OK)
			break;
		if (status != F8_ERR_NOMEM || !diag.message[0]) {
			printf("FAIL: %s with allocation %ld failing: status %d (%s)\n", path, n, status,
			       diag.message);
			all_clean = false;
		}
	}
	CHECK(all_clean);
	CHECK(n > 10 && n < 100000); // it did allocate, and it did finish
	printf("allocation failure: checked every one of the %ld allocations loading %s\n", n, path);
}

int main(int argc, char **argv) {
	if (argc != 2) {
		fprintf(stderr, "usage: test_model_json SOURCE_DIR\n");
		return 2;
	}
	test_defaults();
	test_errors();
	test_combinations();
	test_malformed(argv[1]);
	static const char *const models[] = {"gpt-tiny", "llama-tiny", "mixtral-8x7b"};
	for (int i = 0; i < 3; i++) {
		char path[4096];
		snprintf(path, sizeof path, "%s/models/%s.json", argv[1], models[i]);
		check_allocation_failure(path);
	}
	return test_finish();
}
