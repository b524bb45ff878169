/*
 * Small helpers that f8c report's files share (tools/report_command.c, report_inputs.c,
 * report_html.c): kept here once rather than copied into each.
 */
#ifndef F8_TOOLS_REPORT_UTIL_H
#define F8_TOOLS_REPORT_UTIL_H

#include <jansson.h> // json_t
#include <stdbool.h> // bool

/* Whether `s` ends with `suffix` (both NUL-terminated; an empty suffix always matches). */
bool f8_report_ends_with(const char *s, const char *suffix);

/* `value` as a double when it is a JSON number; NAN for NULL, null (a number that was not
 * finite when written) or anything else. */
double f8_report_json_number(const json_t *value);

#endif
