/*
 * Status codes and the diagnostic that library code fills instead of printing or exiting.
 *
 * Every fallible library function returns an f8_status and, on failure, fills the caller's
 * f8_diag with a message, the place in the input (file, line, column, or the node), the text
 * of the offending line when there is one, and a hint. Only tools/ turns a diagnostic into
 * output and an exit code (f8_diag_print).
 */
#ifndef F8_IR_DIAG_H
#define F8_IR_DIAG_H

#include <stdarg.h> // va_list
#include <stdint.h> // uint32_t
#include <stdio.h>  // FILE

#define F8_STATUS_LIST(X)                                                   \
	X(OK, 0, "ok")                                                      \
	X(ERR_NOMEM, -1, "out of memory")                                   \
	X(ERR_IO, -2, "input/output error")                                 \
	X(ERR_PARSE, -3, "syntax error")                                    \
	X(ERR_INVALID, -4, "invalid graph")                                 \
	X(ERR_UNSUPPORTED, -5, "unsupported")                               \
	X(ERR_ARGUMENT, -6, "invalid argument")

typedef enum f8_status {
#define F8_STATUS_ENUM(e, code, text) F8_##e = code,
	F8_STATUS_LIST(F8_STATUS_ENUM)
#undef F8_STATUS_ENUM
	F8_STATUS_COUNT = 7 // number of codes; checked against the list in diag.c
} f8_status;

/* A short description of a status ("syntax error"). */
const char *f8_status_name(f8_status status);

enum {
	F8_DIAG_MESSAGE_MAX = 1024, // a hint may list every supported ONNX operator
	F8_DIAG_LINE_MAX = 256,
	F8_DIAG_FILE_MAX = 256,
	F8_DIAG_NODE_MAX = 160,
};

/*
 * A diagnostic. Fixed-size buffers on purpose: filling one must not allocate, because the
 * error being reported may be that allocation failed. Texts are truncated, never overflowed.
 */
typedef struct f8_diag {
	f8_status status;
	char file[F8_DIAG_FILE_MAX];       // input file, "" when not from a file
	uint32_t line, column;             // 1-based; 0 when the error has no text position
	char node[F8_DIAG_NODE_MAX];       // the node the error is about ("node 3 (%h = MatMul)"), or ""
	char message[F8_DIAG_MESSAGE_MAX]; // what is wrong
	char source_line[F8_DIAG_LINE_MAX];// the text of `line`, for the caret display, or ""
	char hint[F8_DIAG_MESSAGE_MAX];    // what to do about it, or ""
} f8_diag;

/* Clears `diag` to "no error". */
void f8_diag_clear(f8_diag *diag);

/*
 * Sets status and message (printf-style) and returns `status`, so that failing reads as
 * `return f8_diag_set(diag, F8_ERR_PARSE, "expected %s", what);`. The place fields are left as
 * they are; `diag` may be NULL, in which case only the status is returned.
 */
f8_status f8_diag_set(f8_diag *diag, f8_status status, const char *format, ...)
	__attribute__((format(printf, 3, 4)));
f8_status f8_diag_setv(f8_diag *diag, f8_status status, const char *format, va_list args);

/*
 * As f8_diag_set, and sets the place to the file at `path` as a whole (no line, column or source
 * line: f8_diag_at(diag, path, 0, 0, NULL, 0)), for a reader's or writer's failure about a
 * file: `return f8_diag_set_in_file(diag, path, F8_ERR_IO, "cannot read %s", path);`. `diag`
 * may be NULL; `path` is copied (truncated to F8_DIAG_FILE_MAX).
 */
f8_status f8_diag_set_in_file(f8_diag *diag, const char *path, f8_status status,
			      const char *format, ...) __attribute__((format(printf, 4, 5)));

/* Sets the hint (printf-style). `diag` may be NULL. */
void f8_diag_hint(f8_diag *diag, const char *format, ...) __attribute__((format(printf, 2, 3)));

/*
 * Sets the text position: file name, 1-based line and column, and the line's text (`line_text`,
 * `line_len` bytes, not terminated). Any of file/line_text may be NULL.
 */
void f8_diag_at(f8_diag *diag, const char *file, uint32_t line, uint32_t column,
		const char *line_text, size_t line_len);

/*
 * Writes the diagnostic for a person:
 *   FILE:LINE:COL: error: MESSAGE
 *     the source line
 *     ^
 *   HINT: what to do
 * with the parts that are empty left out ("error: in node 3 (...): MESSAGE" for graph errors).
 */
void f8_diag_print(const f8_diag *diag, FILE *out);

#endif
