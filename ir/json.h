/*
 * The JSON form of a graph, for tools that would rather not parse the text IR (plan viewers,
 * scripts). It carries everything the text form does; dims are numbers when constant and
 * strings ("batch*seq") when symbolic.
 */
#ifndef F8_IR_JSON_H
#define F8_IR_JSON_H

#include <stdio.h> // FILE

#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/graph.h" // f8_graph

/* Writes `graph` as one indented JSON document to `out`. */
f8_status f8_json_print(const f8_graph *graph, FILE *out, f8_diag *diag);

#endif
