/*
 * Unit tests of the IR: dim arithmetic, graphs built through the API (which can express what
 * the text parser refuses early, like a use before a definition), malformed input of every
 * kind (each prefix of every golden file), and allocation failure at every allocation.
 *
 * usage: test_ir SOURCE_DIR
 */
#define _POSIX_C_SOURCE 200809L // strdup

#include <dirent.h> // opendir, readdir
#include <stdio.h>  // printf
#include <stdlib.h> // malloc, free
#include <string.h> // strcmp, strstr

#include "codegen/target.h"  // f8_codegen_target_table_for
#include "ir/text.h"         // f8_text_parse, f8_text_print_string
#include "ir/verify.h"       // f8_graph_verify
#include "ir/alloc.h"        // f8_free, f8_strdup
#include "ir/json.h"         // f8_json_print
#include "tests/test_support.h" // CHECK, test_read_file, test_fail_allocations_after
#include "passes/pipeline.h" // f8_pipeline_run, f8_pipeline_run_with

static void test_dims(void) {
	f8_dim batch = f8_dim_symbol(0), seq = f8_dim_symbol(1), one = f8_dim_const(1);
	f8_dim product, quotient, sum, difference;
	CHECK(f8_dim_mul(seq, batch, &product) && product.n_terms == 1 &&
	      product.terms[0].n_symbols == 2 && product.terms[0].symbols[0] == 0 &&
	      product.terms[0].symbols[1] == 1); // sorted
	CHECK(f8_dim_mul(product, f8_dim_const(768), &product) &&
	      product.terms[0].coefficient == 768);
	CHECK(f8_dim_div(product, batch, &quotient) && quotient.terms[0].coefficient == 768 &&
	      quotient.terms[0].n_symbols == 1 && quotient.terms[0].symbols[0] == 1);
	CHECK(!f8_dim_div(quotient, batch, &quotient));        // seq*768 / batch: not exact
	CHECK(!f8_dim_div(f8_dim_const(10), f8_dim_const(4), &quotient));
	CHECK(f8_dim_add(seq, seq, &sum) && sum.n_terms == 1 && sum.terms[0].coefficient == 2);
	CHECK(f8_dim_add(f8_dim_const(0), seq, &sum) && f8_dim_equal(sum, seq));
	CHECK(!f8_dim_mul(f8_dim_const(INT64_MAX), f8_dim_const(2), &product)); // overflow
	f8_dim many = f8_dim_const(1);
	for (int i = 0; i < F8_DIM_MAX_SYMBOLS; i++)
		CHECK(f8_dim_mul(many, seq, &many));
	CHECK(!f8_dim_mul(many, seq, &many)); // too many symbols
	CHECK(f8_dim_mul(f8_dim_const(0), seq, &product) && f8_dim_equal(product, f8_dim_const(0)));

	// Sums: canonical whatever the order they were built in; they cancel back to monomials.
	f8_dim seq_plus_one, one_plus_seq, batch_seq_plus_batch;
	CHECK(f8_dim_add(seq, one, &seq_plus_one) && f8_dim_add(one, seq, &one_plus_seq) &&
	      f8_dim_equal(seq_plus_one, one_plus_seq) && seq_plus_one.n_terms == 2 &&
	      seq_plus_one.terms[1].n_symbols == 0); // the constant term last
	CHECK(f8_dim_sub(seq_plus_one, one, &difference) && f8_dim_equal(difference, seq));
	CHECK(f8_dim_sub(seq, seq, &difference) && f8_dim_equal(difference, f8_dim_const(0)) &&
	      f8_dim_is_const(difference) && f8_dim_value(difference) == 0);
	CHECK(f8_dim_add(seq, batch, &sum) && sum.n_terms == 2);
	CHECK(f8_dim_mul(batch, seq_plus_one, &batch_seq_plus_batch) &&
	      batch_seq_plus_batch.n_terms == 2);
	CHECK(f8_dim_div(batch_seq_plus_batch, seq_plus_one, &quotient) &&
	      f8_dim_equal(quotient, batch)); // by a sum: a monomial multiple of it
	CHECK(f8_dim_div(batch_seq_plus_batch, batch, &quotient) &&
	      f8_dim_equal(quotient, seq_plus_one));
	CHECK(!f8_dim_div(batch_seq_plus_batch, seq, &quotient)); // batch / seq is not exact
	CHECK(!f8_dim_div(seq_plus_one, f8_dim_const(2), &quotient));
	f8_dim three_terms, four_terms;
	CHECK(f8_dim_add(batch_seq_plus_batch, seq, &three_terms) && three_terms.n_terms == 3);
	CHECK(!f8_dim_add(three_terms, one, &four_terms)); // more terms than a dim holds

	// What symbols >= 1 prove.
	f8_dim seq_minus_one;
	CHECK(f8_dim_sub(seq, one, &seq_minus_one));
	CHECK(f8_dim_proven_le(seq_minus_one, seq) && f8_dim_proven_le(seq, seq_plus_one));
	CHECK(f8_dim_proven_nonnegative(seq_minus_one) && f8_dim_proven_le(one, seq));
	CHECK(!f8_dim_proven_le(seq, seq_minus_one) && !f8_dim_proven_le(seq, batch));
	CHECK(!f8_dim_proven_le(f8_dim_const(2), seq)); // seq may be 1
	CHECK(!f8_dim_proven_nonnegative(f8_dim_const(-1)));
}

/* A graph built through the API where a node reads a value defined after it. */
static void test_use_before_definition(void) {
	f8_graph *graph;
	f8_diag diag;
	f8_diag_clear(&diag);
	CHECK(f8_graph_create("g", &graph) == F8_OK);
	f8_type type = {.dtype = F8_DTYPE_F32, .shape = {.rank = 1, .dims = {f8_dim_const(4)}}};
	f8_value_id x;
	f8_node_id first, second;
	CHECK(f8_graph_add_input(graph, "x", F8_ROLE_INPUT, &type, &x, &diag) == F8_OK);
	CHECK(f8_graph_add_node(graph, F8_OP_NEG, &x, 1, 1, NULL, &first, &diag) == F8_OK);
	f8_value_id y = graph->nodes[first].outputs[0];
	CHECK(f8_graph_add_node(graph, F8_OP_EXP, &y, 1, 1, NULL, &second, &diag) == F8_OK);
	CHECK(f8_pipeline_run(graph, "canonicalize", true, &diag) != F8_OK ||
	      graph->n_order == 0); // nothing is an output: everything is dead
	CHECK(f8_graph_add_output(graph, graph->nodes[second].outputs[0]) == F8_OK);
	// Types, then swap the two nodes: Exp now reads Neg's result before Neg runs.
	graph->values[y].type = type;
	graph->values[graph->nodes[second].outputs[0]].type = type;
	f8_node_id swapped[2] = {second, first};
	CHECK(f8_graph_set_order(graph, swapped, 2) == F8_OK);
	CHECK(f8_graph_verify(graph, &diag) == F8_ERR_INVALID);
	CHECK(strstr(diag.message, "used before it is defined") != NULL);
	CHECK(strstr(diag.node, "Exp") != NULL);
	// A node listed twice.
	f8_node_id twice[3] = {first, second, second};
	CHECK(f8_graph_set_order(graph, twice, 3) == F8_OK);
	CHECK(f8_graph_verify(graph, &diag) == F8_ERR_INVALID && strstr(diag.message, "twice"));
	// A node removed from the program whose value is still read.
	f8_node_id only_second[1] = {second};
	CHECK(f8_graph_set_order(graph, only_second, 1) == F8_OK);
	CHECK(f8_graph_verify(graph, &diag) == F8_ERR_INVALID &&
	      strstr(diag.message, "not defined in the program"));
	// An attribute of the wrong kind, set through the API.
	CHECK(f8_graph_set_order(graph, (f8_node_id[]){first, second}, 2) == F8_OK);
	CHECK(f8_graph_verify(graph, &diag) == F8_OK);
	f8_attr wrong = {.name = "axis", .kind = F8_ATTR_FLOAT, .f = 1.0};
	CHECK(f8_node_set_attrs(graph, first, &wrong, 1) == F8_OK);
	CHECK(f8_graph_verify(graph, &diag) == F8_ERR_INVALID && strstr(diag.message, "no attribute"));
	f8_graph_destroy(graph);
}

/* Parses and, when that works, runs the whole inference pipeline on it with the codegen target
 * table, as f8c compiles (without a table fuse groups nothing), and prints it: what a user's
 * file goes through. The fused kernels it made into *n_kernels when not NULL. */
static f8_status exercise(const char *text, size_t len, uint32_t *n_kernels) {
	f8_graph *graph;
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_status status = f8_text_parse(text, len, "input", &graph, &diag);
	if (status) {
		// A failed parse leaves a message and, for syntax errors, a position.
		if (!diag.message[0] || (status == F8_ERR_PARSE && !diag.line))
			return F8_ERR_ARGUMENT;
		return status;
	}
	const f8_pipeline_options options = {.target = f8_codegen_target_table_for(NULL)};
	status = f8_pipeline_run_with(graph, NULL, true, &options, NULL, &diag);
	if (n_kernels)
		*n_kernels = graph->n_groups;
	char *printed = NULL;
	size_t printed_len;
	if (!status)
		status = f8_text_print_string(graph, &printed, &printed_len);
	if (!status) { // and the JSON form, whose allocations go through the hook too
		FILE *sink = fopen("/dev/null", "w");
		status = sink ? f8_json_print(graph, sink, &diag) : F8_ERR_IO;
		if (sink)
			fclose(sink);
	}
	f8_free(printed);
	f8_graph_destroy(graph);
	return status;
}

/* Every prefix of every golden file, and each with one byte flipped: no crash, no leak, and
 * every error comes with a message (ASan and UBSan watch the rest in the sanitizer build). */
static void test_malformed_inputs(const char *source_dir) {
	char dir_path[4096];
	snprintf(dir_path, sizeof dir_path, "%s/tests/ir", source_dir);
	DIR *dir = opendir(dir_path);
	CHECK(dir != NULL);
	if (!dir)
		return;
	int files = 0;
	for (struct dirent *entry; (entry = readdir(dir));) {
		size_t name_len = strlen(entry->d_name);
		if (name_len < 4 || strcmp(entry->d_name + name_len - 4, ".f8t") != 0)
			continue;
		char path[8192];
		snprintf(path, sizeof path, "%s/%s", dir_path, entry->d_name);
		size_t len;
		char *text = test_read_file(path, &len);
		CHECK(text != NULL);
		if (!text)
			continue;
		files++;
		char *expect = strstr(text, "\n# expect");
		size_t input_len = expect ? (size_t)(expect - text) + 1 : len;
		bool all_reported = true;
		for (size_t cut = 0; cut < input_len; cut++)
			all_reported &= exercise(text, cut, NULL) != F8_ERR_ARGUMENT;
		static const char flips[] = {'{', '}', '%', '"', ',', '=', '[', '9', 'x', '\0', '\n'};
		for (size_t at = 0; at < input_len; at += 7) {
			char saved = text[at];
			text[at] = flips[at % sizeof flips];
			all_reported &= exercise(text, input_len, NULL) != F8_ERR_ARGUMENT;
			text[at] = saved;
		}
		if (!all_reported)
			printf("FAIL: an error without a message or position for a variant of %s\n", path);
		CHECK(all_reported);
		free(text);
	}
	closedir(dir);
	CHECK(files >= 10);
}

/* Parse, run the pipeline and print (text and JSON) with the n-th allocation failing, for every n: each run
 * ends in F8_ERR_NOMEM or success, never a crash or leak. */
static void test_allocation_failure(const char *source_dir) {
	char path[4096];
	snprintf(path, sizeof path, "%s/models/gpt2-block.f8ir", source_dir);
	size_t len;
	char *text = test_read_file(path, &len);
	CHECK(text != NULL);
	if (!text)
		return;
	bool all_clean = true;
	long n;
	uint32_t n_kernels = 0;
	for (n = 0; n < 100000; n++) {
		test_fail_allocations_after(n);
		f8_status status = exercise(text, len, &n_kernels);
		test_allocations_restore();
		if (status == F8_OK)
			break;
		if (status != F8_ERR_NOMEM) {
			printf("FAIL: with allocation %ld failing: status %d, not out of memory\n", n,
			       status);
			all_clean = false;
		}
	}
	CHECK(all_clean);
	CHECK(n > 10 && n < 100000); // it did allocate, and it did finish
	CHECK(n_kernels > 0);        // fuse grouped, so its allocations failed in turn too
	printf("allocation failure: checked every one of the %ld allocations (%u fused kernels)\n",
	       n, n_kernels);
	free(text);
}

/* f8_strdup: an equal copy in memory of its own, freed with f8_free; NULL when the allocation
 * fails. */
static void test_strdup(void) {
	const char *text = "w of layers.0.attn.qkv";
	char *copy = f8_strdup(text);
	CHECK(copy != NULL && copy != text && strcmp(copy, text) == 0);
	f8_free(copy);
	char *empty = f8_strdup("");
	CHECK(empty != NULL && empty[0] == '\0');
	f8_free(empty);
	test_fail_allocations_after(0);
	CHECK(f8_strdup(text) == NULL);
	test_allocations_restore();
}

int main(int argc, char **argv) {
	if (argc != 2) {
		fprintf(stderr, "usage: test_ir SOURCE_DIR\n");
		return 2;
	}
	test_dims();
	test_use_before_definition();
	test_strdup();
	test_malformed_inputs(argv[1]);
	test_allocation_failure(argv[1]);
	return test_finish();
}
