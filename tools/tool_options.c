/*
 * Command-line pieces the subcommands share.
 */
#include "tools/tool_options.h" // f8_tool_parse_*

#include <errno.h>  // errno
#include <math.h>   // isfinite
#include <stdio.h>  // snprintf
#include <stdlib.h> // strtoll, strtod, getenv
#include <string.h> // strchr, strcmp

bool f8_tool_parse_dim_binding(char *text, f8_dim_binding *out) {
	char *equals = strchr(text, '=');
	int64_t value;
	if (!equals || equals == text || !f8_tool_parse_int(equals + 1, 1, INT64_MAX, &value))
		return false;
	*equals = '\0';
	*out = (f8_dim_binding){.name = text, .value = value};
	return true;
}

bool f8_tool_parse_int(const char *text, int64_t min, int64_t max, int64_t *out) {
	char *end;
	errno = 0;
	long long value = strtoll(text, &end, 10);
	if (errno || end == text || *end || value < min || value > max)
		return false;
	*out = value;
	return true;
}

bool f8_tool_parse_double(const char *text, double *out) {
	char *end;
	errno = 0;
	double value = strtod(text, &end);
	if (errno || end == text || *end || !isfinite(value))
		return false;
	*out = value;
	return true;
}

bool f8_tool_option_named(const char *option, const char *name) {
	while (*option && (*option == *name || (*option == '-' && *name == '_')))
		option++, name++;
	return !*option && !*name;
}

const char *f8_tool_kernel_cache(char *buffer, size_t size) {
	const char *named = getenv("F8C_KERNEL_CACHE"), *base = getenv("XDG_CACHE_HOME");
	int length;
	if (named && !strcmp(named, "off"))
		return NULL;
	if (named && *named)
		length = snprintf(buffer, size, "%s", named);
	else if (base && *base == '/') // the XDG rule: a relative one is ignored
		length = snprintf(buffer, size, "%s/f8c/kernels", base);
	else if ((base = getenv("HOME")) && *base)
		length = snprintf(buffer, size, "%s/.cache/f8c/kernels", base);
	else
		return NULL;
	return length > 0 && (size_t)length < size ? buffer : NULL;
}
