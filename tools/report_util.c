/*
 * Small helpers that f8c report's files share (tools/report_util.h).
 */
#include "tools/report_util.h"

#include <math.h>   // NAN
#include <string.h> // strcmp, strlen

bool f8_report_ends_with(const char *s, const char *suffix) {
	size_t n = strlen(s), m = strlen(suffix);
	return n >= m && strcmp(s + n - m, suffix) == 0;
}

double f8_report_json_number(const json_t *value) {
	return json_is_number(value) ? json_number_value(value) : NAN;
}
