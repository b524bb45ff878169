/*
 * f8c tokenize: turns a text file into training tokens, one token per byte (0..255), written
 * in llm.c's format (runtime/tokens.h), so that a small model can be trained on any text with
 * no tokenizer at all (a vocabulary of 256).
 *   f8c tokenize TEXT -o TOKENS.bin
 * Exit status: 0 written, 1 the text could not be read or the tokens written, 2 the command
 * line is wrong.
 */
#define _POSIX_C_SOURCE 200809L // fileno, fstat

#include <errno.h>    // errno
#include <stdbool.h>  // bool
#include <stdint.h>   // uint32_t, INT32_MAX
#include <stdio.h>    // fprintf, printf, fopen, fread
#include <string.h>   // strcmp, strerror
#include <sys/stat.h> // fstat, stat, S_ISREG

#include "ir/alloc.h"       // f8_malloc, f8_free
#include "ir/diag.h"        // f8_diag, f8_diag_print
#include "runtime/tokens.h" // f8_tokens_write_llmc
#include "tools/commands.h" // f8_tool_tokenize

static int usage(const char *problem) {
	fprintf(stderr, "f8c tokenize: %s\n"
			"usage: f8c tokenize TEXT -o TOKENS.bin\n"
			"HINT: each byte of TEXT becomes one token (0..255), written in llm.c's "
			"format; train on it with a vocabulary of 256\n",
		problem);
	return 2;
}

/* Fails with a message about `path` on stderr; the exit status for it, 1. */
static int input_error(const char *path, const char *problem, const char *hint) {
	fprintf(stderr, "%s: error: %s\nHINT: %s\n", path, problem, hint);
	return 1;
}

/* Fails with "cannot read PATH: strerror". */
static int read_error(const char *path, const char *reason) {
	fprintf(stderr, "%s: error: cannot read %s: %s\nHINT: give the path of a text file that "
			"can be read\n", path, path, reason);
	return 1;
}

/* True when `a` and `b` name the same existing file. */
static bool same_file(const char *a, const char *b) {
	struct stat sa, sb;
	return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
	       sa.st_ino == sb.st_ino;
}

/*
 * Reads all of `file` (`path`, `size` bytes) as tokens into *tokens (f8_malloc'd): each byte
 * widened to a token. Returns 0 or the exit status of the error it printed.
 */
static int read_tokens(FILE *file, const char *path, size_t size, uint32_t **tokens) {
	unsigned char chunk[1 << 16];
	*tokens = f8_malloc(size * sizeof **tokens);
	if (!*tokens)
		return input_error(path, "out of memory for its tokens", "tokenize a smaller file");
	for (size_t done = 0; done < size;) {
		size_t want = size - done < sizeof chunk ? size - done : sizeof chunk;
		if (fread(chunk, 1, want, file) != want) {
			f8_free(*tokens);
			*tokens = NULL;
			const char *why = ferror(file) ? strerror(errno)
						       : "the file became shorter while read";
			return read_error(path, why);
		}
		for (size_t i = 0; i < want; i++)
			(*tokens)[done + i] = chunk[i];
		done += want;
	}
	return 0;
}

/* Tokenizes `input` into `output`. */
static int tokenize(const char *input, const char *output) {
	FILE *file = fopen(input, "rb");
	if (!file)
		return read_error(input, strerror(errno));
	struct stat info;
	int exit_status = 0;
	uint32_t *tokens = NULL;
	size_t n = 0;
	if (fstat(fileno(file), &info) != 0 || !S_ISREG(info.st_mode))
		exit_status = input_error(input, "not a regular file",
					  "give the path of a text file");
	else if (info.st_size == 0)
		exit_status = input_error(input, "the file is empty: there is nothing to tokenize",
					  "give a file with some text in it");
	else if ((uint64_t)info.st_size > INT32_MAX)
		exit_status = input_error(input, "more than 2^31 - 1 bytes, the most tokens an "
					  "llm.c file holds", "split the text into several files");
	else
		exit_status = read_tokens(file, input, n = (size_t)info.st_size, &tokens);
	fclose(file);
	if (exit_status)
		return exit_status;
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_status status = f8_tokens_write_llmc(output, tokens, n, &diag);
	f8_free(tokens);
	if (status) {
		f8_diag_print(&diag, stderr);
		return 1;
	}
	printf("wrote %zu tokens (bytes of %s) to %s\n", n, input, output);
	return 0;
}

int f8_tool_tokenize(int argc, char **argv) {
	const char *input = NULL, *output = NULL;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--output") == 0) {
			if (++i == argc)
				return usage("-o needs the token file to write");
			output = argv[i];
		} else if (argv[i][0] == '-' && argv[i][1]) {
			fprintf(stderr, "f8c tokenize: unknown option '%s'\n", argv[i]);
			return usage("see the usage below");
		} else if (input) {
			return usage("give one text file");
		} else {
			input = argv[i];
		}
	}
	if (!input)
		return usage("no text file given");
	if (!output)
		return usage("no output file given (-o TOKENS.bin)");
	if (strcmp(input, output) == 0 || same_file(input, output)) {
		fprintf(stderr, "f8c tokenize: -o %s would overwrite the text\n"
				"HINT: give -o a new file name, like TOKENS.bin\n", output);
		return 2;
	}
	return tokenize(input, output);
}
