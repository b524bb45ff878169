/*
 * What the codegen tests share for a graph they write as text: parsed, canonicalized, and all
 * its nodes made one fusion group. Header-only: each test is one executable of its own, and
 * includes tests/test_support.h (CHECK) first.
 */
#ifndef F8_TESTS_CODEGEN_ONE_GROUP_H
#define F8_TESTS_CODEGEN_ONE_GROUP_H

#include <stdint.h> // uint32_t
#include <string.h> // strlen

#include "ir/graph.h"        // f8_graph, f8_graph_add_group, f8_kernel_family
#include "ir/text.h"         // f8_text_parse
#include "passes/pipeline.h" // f8_pipeline_run

/* Parses `text` (named `title` in messages), canonicalizes it and makes all its nodes group k0
 * of `family` (*group); the graph, or NULL with the failure printed and counted. */
static inline f8_graph *test_one_group(const char *title, const char *text,
				       f8_kernel_family family, uint32_t *group) {
	f8_graph *graph = NULL;
	f8_diag diag = {0};
	f8_status status = f8_text_parse(text, strlen(text), title, &graph, &diag);
	if (!status)
		status = f8_pipeline_run(graph, "canonicalize", true, &diag);
	if (!status)
		status = f8_graph_add_group(graph, "k0", family, "the whole graph", group, &diag);
	if (status) {
		f8_diag_print(&diag, stdout);
		CHECK(status == F8_OK);
		f8_graph_destroy(graph);
		return NULL;
	}
	for (uint32_t i = 0; i < graph->n_order; i++)
		graph->nodes[graph->order[i]].group = *group;
	return graph;
}

#endif
