/*
 * The JSON form of a graph, for tools that would rather not parse the text IR (plan viewers,
 * scripts). It carries everything the text form does; dims are numbers when constant and
 * strings ("batch*seq") when symbolic. A fused graph adds "kernels" (name, family, reason of
 * each) and a "kernel" name on each member node.
 */
#ifndef F8_IR_JSON_H
#define F8_IR_JSON_H

#include <stdbool.h> // bool
#include <stdio.h>   // FILE

#include <jansson.h> // json_malloc_t, json_free_t

#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/graph.h" // f8_graph

/* Writes `graph` as one indented JSON document to `out`. */
f8_status f8_json_print(const f8_graph *graph, FILE *out, f8_diag *diag);

/*
 * Routes jansson's allocations through f8_malloc / f8_free between enter and leave, so that
 * allocation-failure tests reach them and a failed allocation is seen (jansson reports most as
 * something else, or drops the value: json_array_append_new of NULL). Everything jansson makes
 * inside must be freed inside. jansson's allocator is one global: not for concurrent use.
 */
typedef struct f8_jansson_scope {
	json_malloc_t saved_malloc; // what was installed before, put back by leave
	json_free_t saved_free;
} f8_jansson_scope;

void f8_jansson_enter(f8_jansson_scope *scope);

/* Whether an allocation failed since the last f8_jansson_enter. */
bool f8_jansson_out_of_memory(void);

/* Puts the previous allocator back; true when an allocation failed inside the scope. */
bool f8_jansson_leave(f8_jansson_scope *scope);

#endif
