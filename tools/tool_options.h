/*
 * Command-line pieces the subcommands share: parsing `--dim NAME=N` and numbers.
 */
#ifndef F8_TOOLS_TOOL_OPTIONS_H
#define F8_TOOLS_TOOL_OPTIONS_H

#include <stdbool.h> // bool
#include <stdint.h>  // int64_t

#include "frontend/frontend.h" // f8_dim_binding

/* Parses `NAME=N` (N a positive integer) into *out, cutting `text` at the '='; false when
 * malformed. */
bool f8_tool_parse_dim_binding(char *text, f8_dim_binding *out);

/* Parses all of `text` as an integer in [min, max]; false otherwise. */
bool f8_tool_parse_int(const char *text, int64_t min, int64_t max, int64_t *out);

/* Parses all of `text` as a finite number; false otherwise. */
bool f8_tool_parse_double(const char *text, double *out);

/* Whether `name` (without "--", dashes or underscores, as --config keys come) names option
 * `option` (its dashed name). */
bool f8_tool_option_named(const char *option, const char *name);

#endif
