/*
 * The text IR's lexer: tokens (words, %values, numbers, strings, punctuation), the character
 * classes, skipping spaces and `#` comments, decoding strings, and the file:line:column errors
 * that point into the input. The grammar it serves is at the top of ir/text_parse.c.
 */
#include <errno.h>  // errno, ERANGE
#include <stdarg.h> // va_list
#include <stdio.h>  // snprintf
#include <stdlib.h> // strtoll, strtod, strtol
#include <string.h> // memcpy, strchr

#include "ir/arena.h"         // f8_arena_alloc, f8_arena_strndup
#include "ir/text_internal.h" // parser, token, the text_* prototypes

enum {
	MAX_NUMBER_TEXT = 64,
};

/* Fails at `at` with a message and the caret display; returns F8_ERR_PARSE. */
f8_status f8_text_fail_at(parser *p, const token *at, const char *format, ...) {
	va_list args;
	va_start(args, format);
	f8_diag_setv(p->diag, F8_ERR_PARSE, format, args);
	va_end(args);
	// Find the line of `at` for the caret display.
	const char *line_start = at->text;
	while (line_start > p->text && line_start[-1] != '\n')
		line_start--;
	const char *line_end = line_start;
	while (line_end < p->end && *line_end != '\n' && *line_end != '\r')
		line_end++;
	f8_diag_at(p->diag, p->file, at->line, at->column, line_start, (size_t)(line_end - line_start));
	return F8_ERR_PARSE;
}

/* How a token reads in "expected X, found Y". */
static const char *describe(const token *tok, char *buffer, size_t size) {
	switch (tok->kind) {
	case TOKEN_END:
		return "the end of the input";
	case TOKEN_PUNCT:
		snprintf(buffer, size, "'%c'", tok->text[0]);
		return buffer;
	case TOKEN_VALUE:
		snprintf(buffer, size, "%%%.*s", (int)(tok->len > 40 ? 40 : tok->len), tok->text);
		return buffer;
	default:
		snprintf(buffer, size, "'%.*s'", (int)(tok->len > 40 ? 40 : tok->len), tok->text);
		return buffer;
	}
}

/* "expected `what`, found <the current token>". */
f8_status f8_text_fail_expected(parser *p, const char *what) {
	char found[64];
	return f8_text_fail_at(p, &p->tok, "expected %s, found %s", what,
			    describe(&p->tok, found, sizeof found));
}

/* Characters and tokens. */

static bool is_ident_start(char c) {
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_bare_char(char c) {
	return is_ident_start(c) || (c >= '0' && c <= '9') || c == '.';
}

static bool is_digit(char c) {
	return c >= '0' && c <= '9';
}

static void skip_space_and_comments(parser *p) {
	while (p->pos < p->end) {
		char c = *p->pos;
		if (c == '\n') {
			p->line++;
			p->line_start = ++p->pos;
		} else if (c == ' ' || c == '\t' || c == '\r') {
			p->pos++;
		} else if (c == '#') {
			while (p->pos < p->end && *p->pos != '\n')
				p->pos++;
		} else {
			break;
		}
	}
}

/* Scans a quoted string starting at p->pos (on the opening quote). */
static f8_status scan_string(parser *p, token *tok) {
	const char *c = p->pos + 1;
	while (c < p->end && *c != '"' && *c != '\n') {
		if (*c == '\\' && c + 1 < p->end && c[1] != '\n')
			c++;
		c++;
	}
	if (c >= p->end || *c != '"') {
		tok->text = p->pos;
		tok->len = 1;
		return f8_text_fail_at(p, tok, "unterminated string");
	}
	tok->kind = TOKEN_STRING;
	tok->len = (size_t)(c + 1 - p->pos);
	return F8_OK;
}

/* Scans a number: -?(0x hex | digits[.digits][e[+-]digits]). (inf and nan are words, read by
 * parse_number in ir/text_parse.c.) */
static f8_status scan_number(parser *p, token *tok) {
	const char *c = p->pos;
	if (*c == '-')
		c++;
	bool is_float = false;
	if (c + 1 < p->end && c[0] == '0' && (c[1] == 'x' || c[1] == 'X')) {
		c += 2;
		while (c < p->end && ((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f') ||
				      (*c >= 'A' && *c <= 'F')))
			c++;
	} else {
		while (c < p->end && is_digit(*c))
			c++;
		if (c < p->end && *c == '.') {
			is_float = true;
			for (c++; c < p->end && is_digit(*c); c++) {}
		}
		if (c < p->end && (*c == 'e' || *c == 'E')) {
			is_float = true;
			c++;
			if (c < p->end && (*c == '+' || *c == '-'))
				c++;
			while (c < p->end && is_digit(*c))
				c++;
		}
	}
	tok->len = (size_t)(c - p->pos);
	if (c < p->end && is_bare_char(*c)) // "12ab": a number glued to a name
		return f8_text_fail_at(p, tok, "malformed number");
	char text[MAX_NUMBER_TEXT];
	if (tok->len >= sizeof text)
		return f8_text_fail_at(p, tok, "number too long");
	memcpy(text, p->pos, tok->len);
	text[tok->len] = '\0';
	char *stop;
	errno = 0;
	if (is_float) {
		tok->kind = TOKEN_FLOAT;
		tok->f = strtod(text, &stop);
	} else {
		tok->kind = TOKEN_INT;
		tok->i = strtoll(text, &stop, 0);
		// `-0` read as a float keeps its sign (the printer writes -0.0f so).
		tok->f = text[0] == '-' && tok->i == 0 ? -0.0 : (double)tok->i;
	}
	if (stop != text + tok->len || tok->len == 0 || (tok->len == 1 && text[0] == '-'))
		return f8_text_fail_at(p, tok, "malformed number");
	if (errno == ERANGE && !is_float)
		return f8_text_fail_at(p, tok, "integer out of range");
	return F8_OK;
}

/* Reads the next token into p->tok (see ir/text_internal.h). */
f8_status f8_text_next(parser *p) {
	skip_space_and_comments(p);
	token *tok = &p->tok;
	*tok = (token){.text = p->pos, .len = 1, .line = p->line,
		       .column = (uint32_t)(p->pos - p->line_start) + 1};
	if (p->pos >= p->end) {
		// Place the end just after the last non-blank character, so that "expected X, found
		// the end of the input" points at the line that stopped short, not at a blank one.
		tok->kind = TOKEN_END;
		tok->len = 0;
		const char *last = p->end;
		uint32_t line = p->line;
		while (last > p->text && (last[-1] == ' ' || last[-1] == '\t' || last[-1] == '\r' ||
					  last[-1] == '\n'))
			line -= *--last == '\n';
		const char *line_start = last;
		while (line_start > p->text && line_start[-1] != '\n')
			line_start--;
		tok->text = last;
		tok->line = line;
		tok->column = (uint32_t)(last - line_start) + 1;
		return F8_OK;
	}
	char c = *p->pos;
	f8_status status = F8_OK;
	if (c == '"') {
		status = scan_string(p, tok);
	} else if (is_digit(c) || (c == '-' && p->pos + 1 < p->end && is_digit(p->pos[1]))) {
		// A minus before a word is punctuation: `seq-n` and `-seq` are dims, and parse_number
		// reads `-inf` and `-nan` as the two tokens they then are.
		status = scan_number(p, tok);
	} else if (is_ident_start(c)) {
		const char *e = p->pos;
		while (e < p->end && is_bare_char(*e))
			e++;
		tok->kind = TOKEN_IDENT;
		tok->len = (size_t)(e - p->pos);
	} else if (c == '%') {
		const char *start = p->pos + 1;
		if (start < p->end && *start == '"') {
			p->pos = start;
			status = scan_string(p, tok);
			tok->text = start; // the name's token covers its quotes
		} else {
			const char *e = start;
			while (e < p->end && is_bare_char(*e))
				e++;
			if (e == start)
				return f8_text_fail_at(p, tok, "expected a value name after '%%'");
			tok->text = start;
			tok->len = (size_t)(e - start);
		}
		if (status)
			return status;
		tok->kind = TOKEN_VALUE;
		p->pos = tok->text + tok->len;
		return F8_OK;
	} else if (c != '\0' && strchr("{}()[]<>,:=*+-", c)) {
		tok->kind = TOKEN_PUNCT;
	} else {
		return f8_text_fail_at(p, tok, (c >= 0x20 && c < 0x7f) ? "unexpected character '%c'"
								   : "unexpected byte 0x%02x",
				    (unsigned char)c);
	}
	if (!status)
		p->pos = tok->text + tok->len;
	return status;
}

/* A word and then `c` after the current token, read on a copy of the parser (see
 * ir/text_internal.h). */
bool f8_text_word_then_punct_ahead(const parser *p, char c) {
	parser ahead = *p;
	skip_space_and_comments(&ahead);
	if (ahead.pos >= ahead.end || !is_ident_start(*ahead.pos))
		return false;
	while (ahead.pos < ahead.end && is_bare_char(*ahead.pos))
		ahead.pos++;
	skip_space_and_comments(&ahead);
	return ahead.pos < ahead.end && *ahead.pos == c;
}

/* The current token must be `c`; advances past it. */
f8_status f8_text_expect_punct(parser *p, char c) {
	if (!text_at_punct(p, c)) {
		char what[8] = {'\'', c, '\'', '\0'};
		return f8_text_fail_expected(p, what);
	}
	return f8_text_next(p);
}

/* Strings. */

/* Decodes the string token `tok` (quotes included) into the graph's arena. */
static f8_status decode_string(parser *p, const token *tok, const char **out, size_t *out_len) {
	char *text = f8_arena_alloc(p->graph->arena, tok->len);
	if (!text)
		return f8_diag_set(p->diag, F8_ERR_NOMEM, "out of memory");
	size_t n = 0;
	for (size_t i = 1; i + 1 < tok->len; i++) {
		char c = tok->text[i];
		if (c != '\\') {
			text[n++] = c;
			continue;
		}
		c = tok->text[++i];
		if (c == 'n') {
			text[n++] = '\n';
		} else if (c == 't') {
			text[n++] = '\t';
		} else if (c == '"' || c == '\\') {
			text[n++] = c;
		} else if (c == 'x' && i + 2 < tok->len - 1) { // two hex digits before the closing quote
			char hex[3] = {tok->text[i + 1], tok->text[i + 2], '\0'};
			char *stop;
			long value = strtol(hex, &stop, 16);
			if (stop != hex + 2 || value == 0)
				return f8_text_fail_at(p, tok, "bad escape \\x%s in string", hex);
			text[n++] = (char)value;
			i += 2;
		} else {
			return f8_text_fail_at(p, tok, "unknown escape '\\%c' in string", c);
		}
	}
	text[n] = '\0';
	*out = text;
	if (out_len)
		*out_len = n;
	return F8_OK;
}

/* Takes a string token into the arena and advances. */
f8_status f8_text_take_string(parser *p, const char **out) {
	if (p->tok.kind != TOKEN_STRING)
		return f8_text_fail_expected(p, "a string");
	f8_status status = decode_string(p, &p->tok, out, NULL);
	return status ? status : f8_text_next(p);
}

/* The name of a VALUE token (decoded if quoted), in the arena. */
f8_status f8_text_value_name(parser *p, const token *tok, const char **out) {
	if (tok->text[0] == '"')
		return decode_string(p, tok, out, NULL);
	*out = f8_arena_strndup(p->graph->arena, tok->text, tok->len);
	return *out ? F8_OK : f8_diag_set(p->diag, F8_ERR_NOMEM, "out of memory");
}

/* The graph's name: bare or a string (see ir/text_internal.h). */
f8_status f8_text_take_graph_name(parser *p, const char **out) {
	// The name is bare as the printer writes names ([A-Za-z0-9_.]+, so `0` and `1.5x` too,
	// which the lexer would take for numbers) or a string: a bare one is read before the lexer.
	skip_space_and_comments(p);
	const char *name = NULL;
	if (p->pos < p->end && is_bare_char(*p->pos)) {
		const char *end = p->pos;
		while (end < p->end && is_bare_char(*end))
			end++;
		name = f8_arena_strndup(p->graph->arena, p->pos, (size_t)(end - p->pos));
		p->pos = end;
	} else {
		f8_status status = f8_text_next(p);
		if (status)
			return status;
		if (p->tok.kind != TOKEN_STRING)
			return f8_text_fail_expected(p, "the graph's name");
		if ((status = decode_string(p, &p->tok, &name, NULL)))
			return status;
	}
	if (!name)
		return f8_diag_set(p->diag, F8_ERR_NOMEM, "out of memory");
	*out = name;
	return F8_OK;
}
