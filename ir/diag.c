/*
 * Status names and the diagnostic: filling it without allocating, printing it for a person.
 */
#include "ir/diag.h" // f8_diag, f8_status

#include <assert.h> // static_assert
#include <string.h> // memset, memcpy

static const struct {
	f8_status status;
	const char *name;
} status_names[] = {
#define F8_STATUS_NAME(e, code, text) {F8_##e, text},
	F8_STATUS_LIST(F8_STATUS_NAME)
#undef F8_STATUS_NAME
};
static_assert(sizeof status_names / sizeof status_names[0] == F8_STATUS_COUNT,
	      "F8_STATUS_COUNT must match F8_STATUS_LIST");

const char *f8_status_name(f8_status status) {
	for (size_t i = 0; i < F8_STATUS_COUNT; i++)
		if (status_names[i].status == status)
			return status_names[i].name;
	return "unknown status";
}

void f8_diag_clear(f8_diag *diag) {
	memset(diag, 0, sizeof *diag);
}

f8_status f8_diag_setv(f8_diag *diag, f8_status status, const char *format, va_list args) {
	if (diag) {
		diag->status = status;
		vsnprintf(diag->message, sizeof diag->message, format, args);
	}
	return status;
}

f8_status f8_diag_set(f8_diag *diag, f8_status status, const char *format, ...) {
	va_list args;
	va_start(args, format);
	f8_diag_setv(diag, status, format, args);
	va_end(args);
	return status;
}

f8_status f8_diag_set_in_file(f8_diag *diag, const char *path, f8_status status,
			      const char *format, ...) {
	va_list args;
	va_start(args, format);
	f8_diag_setv(diag, status, format, args);
	va_end(args);
	f8_diag_at(diag, path, 0, 0, NULL, 0);
	return status;
}

void f8_diag_hint(f8_diag *diag, const char *format, ...) {
	if (!diag)
		return;
	va_list args;
	va_start(args, format);
	vsnprintf(diag->hint, sizeof diag->hint, format, args);
	va_end(args);
}

void f8_diag_at(f8_diag *diag, const char *file, uint32_t line, uint32_t column,
		const char *line_text, size_t line_len) {
	if (!diag)
		return;
	if (file)
		snprintf(diag->file, sizeof diag->file, "%s", file);
	diag->line = line;
	diag->column = column;
	diag->source_line[0] = '\0';
	if (line_text) {
		if (line_len >= sizeof diag->source_line)
			line_len = sizeof diag->source_line - 1;
		memcpy(diag->source_line, line_text, line_len);
		diag->source_line[line_len] = '\0';
	}
}

void f8_diag_print(const f8_diag *diag, FILE *out) {
	if (diag->file[0])
		fprintf(out, "%s:", diag->file);
	if (diag->line)
		fprintf(out, "%u:%u:", diag->line, diag->column);
	fprintf(out, "%serror: ", diag->file[0] || diag->line ? " " : "");
	if (diag->node[0])
		fprintf(out, "%s: ", diag->node);
	fprintf(out, "%s\n", diag->message[0] ? diag->message : f8_status_name(diag->status));
	if (diag->source_line[0] && diag->line) {
		fprintf(out, "  %s\n  ", diag->source_line);
		// Tabs in the line stay tabs under the caret so that it lines up in any terminal.
		for (uint32_t i = 1; i < diag->column && diag->source_line[i - 1]; i++)
			fputc(diag->source_line[i - 1] == '\t' ? '\t' : ' ', out);
		fputs("^\n", out);
	}
	if (diag->hint[0])
		fprintf(out, "HINT: %s\n", diag->hint);
}
