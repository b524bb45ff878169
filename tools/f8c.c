/*
 * The f8c command: dispatches to the subcommands, one file each in tools/ (NAME_command.c).
 *
 * Exit status: 0 on success, 1 when the input is wrong (the message says where), 2 when the
 * command line is wrong.
 */
#include <stdio.h>  // printf, fprintf
#include <string.h> // strcmp

#include "tools/commands.h" // f8_tool_*

#ifndef F8C_VERSION
#define F8C_VERSION "unknown"
#endif

typedef struct command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *usage;
	const char *summary;
} command;

static int run_help(int argc, char **argv);
static int run_version(int argc, char **argv);

static const command commands[] = {
	{"help", run_help, "help", "this text"},
	{"version", run_version, "version", "the version of f8c and of the IR text form"},
	{"dump-ir", f8_tool_dump_ir,
	 "dump-ir MODEL [--dim NAME=N]... [--after PASS] [--format text|json] [--verify] [--report] "
	 "[--bf16] [FP8 options]",
	 "read a model (ONNX, a JSON description from models/, or the text IR), run the pipeline "
	 "through PASS, print the IR; through precision or fp8-cast, FP8 planned with the FP8 "
	 "options (their defaults when none)"},
	{"export-onnx", f8_tool_export_onnx, "export-onnx MODEL.json -o MODEL.onnx [--seed N] [--opset N]",
	 "write a model description as ONNX (weights made up from the seed, in MODEL.onnx.data)"},
	{"infer", f8_tool_infer,
	 "infer MODEL --input NAME=FILE.npy... [--dim NAME=N]... --output-dir DIR [--seed N]",
	 "run the model's forward pass on the CPU reference backend; each output to DIR/NAME.npy"},
	{"train", f8_tool_train,
	 "train MODEL --data TOKENS.bin [--micro-batch-size N] [--global-batch-size N] "
	 "[--seq-length N] [--train-iters N] [--lr X] ... (f8c train --help lists them)",
	 "train on the CPU reference backend or a GPU (--device cuda), Megatron-LM's option names; "
	 "metrics and checkpoints; in FP8 with --fp8-format, in BF16 over f32 master weights with "
	 "--bf16"},
	{"audit", f8_tool_audit,
	 "audit MODEL [--json] [--memory] [--all-ops] [--micro-batch-size N] [--seq-length N] [--dim NAME=N]... "
	 "[--bf16] [FP8 options] (f8c audit --help lists them)",
	 "compile the training step in FP8 and list every GEMM with its precision, recipe and "
	 "reason, then the FLOPs in FP8, bytes saved, scaling slots and amax all-reduce payload"},
	{"calibrate", f8_tool_calibrate,
	 "calibrate MODEL --data TOKENS.bin --steps N -o STATS.json [train options]",
	 "train N steps in high precision and record each Linear operand's amax statistics, for "
	 "--calibration STATS.json --fp8-cv-threshold X"},
	{"report", f8_tool_report,
	 "report [RUN.jsonl | CHECKPOINT | PLAN | STATS.json | PROFILE.json]... [MODEL [audit "
	 "options]] -o REPORT.html",
	 "one HTML file of pictures: runs' loss curves side by side, which GEMMs run in FP8 and "
	 "why, the FP8 scaling state over steps, the memory, a GPU step's time"},
	{"compile", f8_tool_compile,
	 "compile MODEL -o PLAN_DIR [--micro-batch-size N] [--seq-length N] [train options] "
	 "[--bf16] [FP8 options]",
	 "compile the training step through every pass and codegen into a plan: plan.json (every "
	 "decision with its reason, the kernels and their launches, estimates) and kernels.ptx"},
	{"fp8", f8_tool_fp8, "fp8 table FORMAT | fp8 quantize FORMAT [--no-saturate] [--scale S] [--round nearest|down|up]",
	 "FP8 numerics: every code of a format; quantize float32 from stdin to codes on stdout"},
	{"tokenize", f8_tool_tokenize, "tokenize TEXT -o TOKENS.bin",
	 "one token per byte of a text file (0..255), written in llm.c's token file format"},
};

static int run_help(int argc, char **argv) {
	(void)argc, (void)argv;
	printf("f8c: a graph compiler and executor for FP8 training of transformers\n\n"
	       "usage: f8c COMMAND [ARGS]\n\n");
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		printf("  f8c %s\n      %s\n", commands[i].usage, commands[i].summary);
	printf("\nA model's errors name the place: FILE:LINE:COLUMN with the line and a caret for JSON\n"
	       "and the text IR, the node's index, name and op for ONNX.\n");
	return 0;
}

static int run_version(int argc, char **argv) {
	(void)argc, (void)argv;
	printf("f8c %s (IR text form 1)\n", F8C_VERSION);
	return 0;
}

int main(int argc, char **argv) {
	if (argc < 2) {
		run_help(0, NULL);
		return 2;
	}
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		if (strcmp(argv[1], commands[i].name) == 0)
			return commands[i].run(argc - 1, argv + 1);
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)
		return run_help(0, NULL);
	if (strcmp(argv[1], "--version") == 0)
		return run_version(0, NULL);
	fprintf(stderr, "f8c: unknown command '%s'\nHINT: run 'f8c help' for the commands\n", argv[1]);
	return 2;
}
