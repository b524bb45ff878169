/*
 * Command-line pieces the subcommands share: parsing `--dim NAME=N` and numbers, and where the
 * compiled host kernels are kept.
 */
#ifndef F8_TOOLS_TOOL_OPTIONS_H
#define F8_TOOLS_TOOL_OPTIONS_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
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

/*
 * The folder where the CPU backend keeps its compiled kernels between runs
 * (codegen/kernel_cache.h), written into `buffer` (`size` bytes): F8C_KERNEL_CACHE's, or
 * $XDG_CACHE_HOME/f8c/kernels, or $HOME/.cache/f8c/kernels. NULL when F8C_KERNEL_CACHE is
 * "off", or no folder is named or fits.
 */
const char *f8_tool_kernel_cache(char *buffer, size_t size);

#endif
