/*
 * The FP8 options of the f8c command, one table shared by train, calibrate, audit and dump-ir:
 * parsed from the command line or from a --config JSON file into f8_fp8_options
 * (passes/precision.h), with the files they name (--precision-config, --calibration) read.
 *
 * Whether FP8 is on: in train and calibrate only when --fp8-format is given (Megatron-LM's
 * rule), and any other FP8 option without it is an error; in audit and dump-ir it is on by
 * default, since showing the FP8 plan is what they are for.
 *
 * The table holds --bf16 too (Megatron-LM's mixed precision, passes/bf16.h), which is no FP8
 * option: it goes with FP8 or without, and lands in f8_tool_fp8_args.bf16, not in the FP8
 * options, for the compile options' f8_pipeline_options.bf16.
 */
#ifndef F8_TOOLS_FP8_OPTIONS_H
#define F8_TOOLS_FP8_OPTIONS_H

#include <jansson.h> // json_t
#include <stdbool.h> // bool
#include <stdint.h>  // uint32_t
#include <stdio.h>   // FILE

#include "ir/arena.h"           // f8_arena
#include "ir/diag.h"            // f8_status, f8_diag
#include "ir/graph.h"           // f8_graph
#include "passes/precision.h"   // f8_fp8_options, f8_precision_rule
#include "tools/calibration.h" // f8_calibration_file

/* The FP8 options of one command line. Fill with f8_tool_fp8_parse_arg and
 * f8_tool_fp8_set_json, then f8_tool_fp8_finish; read f8_tool_fp8_options. */
typedef struct f8_tool_fp8_args {
	f8_fp8_options options;   // what the options say; complete after f8_tool_fp8_finish
	const char *command;      // "train", for messages
	bool on_by_default;       // audit, dump-ir
	bool enabled;             // after finish: FP8 is planned
	bool bf16;                // --bf16: the forward in BF16 over f32 master weights
	// What the table's options were given by: bit i for the table's option i.
	uint32_t on_command_line; // the command line (a --config file does not override these)
	uint32_t given;           // the command line or a --config file
	const char *precision_config; // --precision-config FILE.json, read by finish
	const char *calibration_path; // --calibration STATS.json, read by finish
	f8_calibration_file *calibration; // what finish read from it
	f8_arena *arena;          // copies of the patterns and the rules' texts
	const char **exclude;     // (n_exclude) --fp8-exclude patterns, in the arena
	size_t cap_exclude;
} f8_tool_fp8_args;

/* Starts `fp8` for `command` ("train", "calibrate", "audit", "dump-ir"): the defaults of
 * passes/precision.h, FP8 on by default when `on_by_default`. F8_ERR_NOMEM. */
f8_status f8_tool_fp8_init(f8_tool_fp8_args *fp8, const char *command, bool on_by_default,
			   f8_diag *diag);

/* Frees what `fp8` holds. */
void f8_tool_fp8_destroy(f8_tool_fp8_args *fp8);

/* True when `name` (without the leading "--") is one of the FP8 options. */
bool f8_tool_fp8_is_option(const char *name);

/*
 * Takes argv[*i] when it is an FP8 option, with its value argv[*i + 1] where it has one, and
 * moves *i to the last argument it used; *taken says whether it was one. F8_ERR_ARGUMENT (the
 * message names the option, the hint what it takes) for a value that does not parse, a missing
 * value, an option given twice (--fp8-exclude may repeat), or --fp8-format e5m2.
 */
f8_status f8_tool_fp8_parse_arg(f8_tool_fp8_args *fp8, int argc, char **argv, int *i, bool *taken,
				f8_diag *diag);

/*
 * Sets FP8 option `name` (dashes or underscores; without "--") from a --config file's value:
 * a string or number for the options with a value, true or false for the flags, a string or
 * an array of strings for fp8-exclude. An option given on the command line wins and the file's
 * value is skipped. F8_ERR_ARGUMENT naming `path` and the key for a value of the wrong kind.
 */
f8_status f8_tool_fp8_set_json(f8_tool_fp8_args *fp8, const char *name, const json_t *value,
			       const char *path, f8_diag *diag);

/*
 * Settles the options once everything is parsed: whether FP8 is on (an FP8 option without
 * --fp8-format in train and calibrate is an error saying so), --first-last-layers-bf16's 1 and 1
 * where --num-layers-at-*-in-bf16 were not given, the --precision-config and --calibration
 * files read, and f8_fp8_options_check. Errors: F8_ERR_ARGUMENT for options that do not go
 * together; the files' errors (F8_ERR_IO, F8_ERR_PARSE, F8_ERR_INVALID) naming the file and the
 * rule or entry.
 */
f8_status f8_tool_fp8_finish(f8_tool_fp8_args *fp8, f8_diag *diag);

/* The options to compile with after finish, or NULL when FP8 is off. */
const f8_fp8_options *f8_tool_fp8_options(const f8_tool_fp8_args *fp8);

/* True when an FP8 option was given (on the command line or in --config), --bf16 aside. */
bool f8_tool_fp8_given(const f8_tool_fp8_args *fp8);

/* Writes the FP8 options' help to `out`: each option, what it takes, its default, and where
 * that differs from Megatron-LM's, and why. */
void f8_tool_fp8_print_help(FILE *out, bool on_by_default);

/*
 * When FP8 was asked for (fp8->enabled) and `graph`, compiled, runs none of its GEMMs in FP8
 * (--allow-fallback let every one fall back: mxfp8 on sm_90, say), a warning on `out` naming
 * the count and how to see each GEMM's reason, so that a run in BF16 never passes for an FP8
 * run; `command` names the subcommand. True when it warned.
 */
bool f8_tool_fp8_warn_none(const f8_tool_fp8_args *fp8, const f8_graph *graph,
			   const char *command, FILE *out);

/*
 * Reads a --precision-config file (the format is in f8_tool_fp8_print_help and the README):
 * {"rules": [{"scope": GLOB, "gemms": ["fwd", "dgrad", "wgrad"], "fp8": BOOL,
 *             "recipe": NAME, "reason": TEXT}]}
 * into *rules (n of them in *n_rules), their texts in `arena`; each rule's `where` is
 * "PATH: rule N" (1-based). F8_ERR_IO, F8_ERR_PARSE (with line:column), F8_ERR_INVALID naming
 * the file, the rule and the key for an unknown key, a missing scope or fp8, or a bad value.
 */
f8_status f8_tool_precision_config_read(const char *path, f8_arena *arena,
					f8_precision_rule **rules, size_t *n_rules, f8_diag *diag);

#endif
