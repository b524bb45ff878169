/*
 * The text form of the IR: a printer and a parser that round-trip exactly (print, parse,
 * print gives the same text), and the formatting of dims and types for messages.
 *
 *   graph NAME {
 *     input %tokens : i64[batch, seq]
 *     param %w : f32[768, 768]
 *     %y : f32[batch, seq, 768] = Linear(%x, %w) scope="layers.0.fc1"
 *     %a : f32[2, 4], %b : f32[2, 4] = Split(%c) {axis=0}
 *     output %y
 *   }
 *
 * Leaves are declared with their role (input, param, state, scale, amax_history). A node's
 * outputs carry their type (left out before shape inference), then annotations in <...>
 * (role, format, recipe, slot, reason, shard, offset, recompute) when set. After the operands
 * come attributes in {...} and then the node's scope, phase (when not fwd), source name,
 * location and fused kernel. A fused kernel is declared by a line before its first member:
 *
 *     kernel k0 : norm "LayerNorm of layers.0.norm with ..."
 *     %n : f32[batch, seq, 768] = LayerNorm(%x, %g, %b) scope="layers.0.norm" kernel=k0
 *
 * `#` starts a comment. The grammar is at the top of ir/text_parse.c.
 */
#ifndef F8_IR_TEXT_H
#define F8_IR_TEXT_H

#include <stddef.h> // size_t
#include <stdio.h>  // FILE

#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/graph.h" // f8_graph
#include "ir/shape.h" // f8_dim, f8_type

/* Formats `dim` ("batch*seq", "3*heads", "768") into `buffer`; returns `buffer`. */
const char *f8_dim_format(const f8_graph *graph, f8_dim dim, char *buffer, size_t size);

/* Formats `type` ("f32[batch, seq, 768]", "?" when undefined) into `buffer`; returns `buffer`. */
const char *f8_type_format(const f8_graph *graph, const f8_type *type, char *buffer, size_t size);

/* Prints `graph` in the text form to `out`. Returns F8_ERR_IO when writing fails, F8_ERR_NOMEM
 * when memory runs out. */
f8_status f8_text_print(const f8_graph *graph, FILE *out);

/*
 * Prints `graph` into a new string (*out, `*len` bytes plus a terminator), which the caller
 * frees with f8_free.
 */
f8_status f8_text_print_string(const f8_graph *graph, char **out, size_t *len);

/*
 * Parses the text form, `len` bytes at `text` (`file` names it in messages), into a new graph
 * (*out; the caller destroys it). On a syntax or reference error returns F8_ERR_PARSE with the
 * file, line, column and line text in `diag`, and *out NULL. Types are checked by the verifier,
 * not here.
 */
f8_status f8_text_parse(const char *text, size_t len, const char *file, f8_graph **out,
			f8_diag *diag);

/* Parses `text` as one dimension of the text IR ("batch*seq", "768", "seq+1") over `graph`'s
 * symbols into *out. F8_ERR_PARSE for anything else, or a symbol the graph does not have. */
f8_status f8_text_parse_dim(f8_graph *graph, const char *text, f8_dim *out, f8_diag *diag);

/* Reads `path` and parses it as above; F8_ERR_IO when it cannot be read. */
f8_status f8_text_parse_file(const char *path, f8_graph **out, f8_diag *diag);

#endif
