/*
 * The subcommands of the f8c command, one per file in tools/. Each takes the arguments from
 * the subcommand's name on (argv[0] is the name) and returns the process exit status.
 */
#ifndef F8_TOOLS_COMMANDS_H
#define F8_TOOLS_COMMANDS_H

#include <jansson.h>  // json_t
#include <stdbool.h> // bool

#include "runtime/train.h"     // f8_train_config
#include "tools/compile.h"     // f8_tool_compile_options
#include "tools/fp8_options.h" // f8_tool_fp8_args

int f8_tool_dump_ir(int argc, char **argv);
int f8_tool_export_onnx(int argc, char **argv);
int f8_tool_fp8(int argc, char **argv);
int f8_tool_tokenize(int argc, char **argv);
int f8_tool_infer(int argc, char **argv);
int f8_tool_train(int argc, char **argv);
int f8_tool_audit(int argc, char **argv);
int f8_tool_calibrate(int argc, char **argv);
int f8_tool_report(int argc, char **argv);

/* What `f8c audit --json --memory --all-ops` prints for argv (argv[0] the calling command's
 * name, then MODEL or a plan folder and f8c audit's options), into *document (the caller
 * json_decrefs it) instead. 0, or the exit status of an error it printed (*document NULL). */
int f8_tool_audit_document(int argc, char **argv, json_t **document);
int f8_tool_compile(int argc, char **argv);

/* f8c train's options, which f8c calibrate takes too (tools/train_command.c). */
typedef struct f8_tool_train_command {
	const char *name;        // "train": in messages and the usage
	const char *usage;       // after "f8c NAME ": "MODEL --data TOKENS.bin [OPTIONS]"
	const char *own_options; // help lines of the command's own options, or NULL
	bool needs_train_iters;  // --train-iters must be given
	bool needs_data;         // --data must be given (not for f8c compile)
	bool needs_seq_length;   // --seq-length must be given (f8c compile checks it itself)
} f8_tool_train_command;

typedef struct f8_tool_train_args f8_tool_train_args;

/*
 * Parses argv (argv[0] the command's name) with f8c train's options, its --config file and the
 * FP8 options (FP8 on only with --fp8-format), for `command`. Returns 0 with *out set (destroy
 * it), 3 after printing the help for --help, or the exit status of an error it printed.
 */
int f8_tool_train_args_parse(const f8_tool_train_command *command, int argc, char **argv,
			     f8_tool_train_args **out);

/* The run the options describe. Owned by `args`. */
f8_train_config *f8_tool_train_args_config(f8_tool_train_args *args);

/* What the options compile (the model, --dim, the optimizer, FP8: compile->fp8 set when FP8 is
 * on). Owned by `args`. */
f8_tool_compile_options *f8_tool_train_args_compile(f8_tool_train_args *args);

/* The FP8 options as given (settled, files read), on or off. Owned by `args`. */
const f8_tool_fp8_args *f8_tool_train_args_fp8(const f8_tool_train_args *args);

/* Makes the run ready: the backend the options ask for (the CPU backend, --kernels
 * generated|reference) and, for a MODEL (not a plan), its training step compiled
 * (tools/compile.h) with the options as they are now; both owned by `args`. The config's
 * failures (f8_train_check_config), the backend's, the compiler's. */
f8_status f8_tool_train_args_ready(f8_tool_train_args *args, f8_diag *diag);

/* Frees the parsed options. NULL is allowed. */
void f8_tool_train_args_destroy(f8_tool_train_args *args);

#endif
