/*
 * The subcommands of the f8c command, one per file in tools/. Each takes the arguments from
 * the subcommand's name on (argv[0] is the name) and returns the process exit status.
 */
#ifndef F8_TOOLS_COMMANDS_H
#define F8_TOOLS_COMMANDS_H

int f8_tool_dump_ir(int argc, char **argv);
int f8_tool_export_onnx(int argc, char **argv);
int f8_tool_fp8(int argc, char **argv);
int f8_tool_tokenize(int argc, char **argv);
int f8_tool_infer(int argc, char **argv);
int f8_tool_train(int argc, char **argv);

#endif
