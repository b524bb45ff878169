/*
 * The recompute options of the f8c command, one table shared by train, compile, calibrate,
 * audit and dump-ir: Megatron-LM's --recompute-granularity, --recompute-method,
 * --recompute-num-layers and --recompute-modules, and f8c's --memory-budget, from the command
 * line or a --config file into f8_recompute_options (passes/recompute.h).
 */
#ifndef F8_TOOLS_RECOMPUTE_OPTIONS_H
#define F8_TOOLS_RECOMPUTE_OPTIONS_H

#include <jansson.h> // json_t
#include <stdbool.h> // bool
#include <stdint.h>  // uint32_t
#include <stdio.h>   // FILE

#include "ir/diag.h"          // f8_status, f8_diag
#include "passes/recompute.h" // f8_recompute_options

typedef struct f8_tool_recompute_args {
	f8_recompute_options options;
	uint32_t on_command_line; // bit i: the table's option i came on the command line
	uint32_t given;           // bit i: on the command line or in a --config file
} f8_tool_recompute_args;

/* True when `name` (without the leading "--"; dashes or underscores) is a recompute option. */
bool f8_tool_recompute_is_option(const char *name);

/*
 * Takes argv[*i] when it is a recompute option, with its value(s) (--recompute-modules takes
 * the names that follow it, as Megatron-LM's, or one comma-separated word), moving *i to the
 * last argument used; *taken says whether it was one. F8_ERR_ARGUMENT naming the option for a
 * value that does not parse, a missing value, or an option given twice.
 */
f8_status f8_tool_recompute_parse_arg(f8_tool_recompute_args *args, int argc, char **argv,
				      int *i, bool *taken, f8_diag *diag);

/* Sets option `name` from a --config file's value (a string or number; the modules also as an
 * array of strings), unless the command line gave it. F8_ERR_ARGUMENT naming `path` and the
 * key for a value of the wrong kind. */
f8_status f8_tool_recompute_set_json(f8_tool_recompute_args *args, const char *name,
				     const json_t *value, const char *path, f8_diag *diag);

/* Checks the options go together (f8_recompute_options_check). */
f8_status f8_tool_recompute_finish(const f8_tool_recompute_args *args, f8_diag *diag);

/* Writes the options' help to `out`. */
void f8_tool_recompute_print_help(FILE *out);

#endif
