/*
 * The parallel options of the f8c command, one table shared by train, compile, audit and
 * dump-ir: Megatron-LM's --tensor-model-parallel-size, --pipeline-model-parallel-size,
 * --context-parallel-size, --expert-model-parallel-size,
 * --num-layers-per-virtual-pipeline-stage, --sequence-parallel and --use-distributed-optimizer,
 * and f8c's --world-size (compile and audit plan for a cluster without launching one), from the
 * command line or a --config file into f8_parallel_options (passes/shard.h).
 */
#ifndef F8_TOOLS_PARALLEL_OPTIONS_H
#define F8_TOOLS_PARALLEL_OPTIONS_H

#include <jansson.h> // json_t
#include <stdbool.h> // bool
#include <stdint.h>  // uint32_t
#include <stdio.h>   // FILE

#include "ir/diag.h"      // f8_status, f8_diag
#include "passes/shard.h" // f8_parallel_options

typedef struct f8_tool_parallel_args {
	f8_parallel_options options;
	uint32_t on_command_line; // bit i: the table's option i came on the command line
	uint32_t given;           // bit i: on the command line or in a --config file
} f8_tool_parallel_args;

/* True when `name` (without the leading "--"; dashes or underscores) is a parallel option. */
bool f8_tool_parallel_is_option(const char *name);

/* Takes argv[*i] when it is a parallel option, with its value where it has one, moving *i to
 * the last argument used; *taken says whether it was one. F8_ERR_ARGUMENT naming the option
 * for a value that does not parse, a missing value, or an option given twice. */
f8_status f8_tool_parallel_parse_arg(f8_tool_parallel_args *args, int argc, char **argv, int *i,
				     bool *taken, f8_diag *diag);

/* Sets option `name` from a --config file's value (a number, or true/false for the flags),
 * unless the command line gave it. F8_ERR_ARGUMENT naming `path` and the key otherwise. */
f8_status f8_tool_parallel_set_json(f8_tool_parallel_args *args, const char *name,
				    const json_t *value, const char *path, f8_diag *diag);

/* Whether --world-size was given. */
bool f8_tool_parallel_world_given(const f8_tool_parallel_args *args);

/* Whether --pipeline-stage was given. */
bool f8_tool_parallel_stage_given(const f8_tool_parallel_args *args);

/* Writes the options' help to `out`. */
void f8_tool_parallel_print_help(FILE *out);

#endif
