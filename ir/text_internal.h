/*
 * What the text IR's lexer (ir/text_lex.c) and grammar (ir/text_parse.c) share: the parser's
 * state, the token, and the lexer's entry points. Not part of the IR's API.
 */
#ifndef F8_IR_TEXT_INTERNAL_H
#define F8_IR_TEXT_INTERNAL_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // int64_t, uint32_t
#include <string.h>  // strlen, memcmp

#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/graph.h" // f8_graph, f8_value_id

typedef enum token_kind {
	TOKEN_END,
	TOKEN_IDENT,  // keyword, op, dtype, symbol: [A-Za-z_][A-Za-z0-9_.]*
	TOKEN_VALUE,  // %name; text/len cover the name (without '%', quotes kept if quoted)
	TOKEN_INT,
	TOKEN_FLOAT,
	TOKEN_STRING, // text/len cover the quotes too
	TOKEN_PUNCT,  // one character
} token_kind;

typedef struct token {
	token_kind kind;
	const char *text;
	size_t len;
	uint32_t line, column;
	int64_t i;
	double f;
} token;

typedef struct parser {
	const char *file;
	const char *text, *end, *pos;
	const char *line_start;
	uint32_t line;
	token tok; // the current token
	f8_graph *graph;
	f8_diag *diag;
	f8_value_id *ids; // scratch list: operands or outputs (the grammar's)
	uint32_t n_ids, cap_ids;
} parser;

/*
 * Fails at `at` (a token of the input) with a message: sets `p->diag` to F8_ERR_PARSE with the
 * file, line, column and the line's text. Returns F8_ERR_PARSE.
 */
f8_status f8_text_fail_at(parser *p, const token *at, const char *format, ...)
	__attribute__((format(printf, 3, 4)));

/* Fails at the current token with "expected `what`, found <the token>". */
f8_status f8_text_fail_expected(parser *p, const char *what);

/*
 * Reads the next token into p->tok, skipping spaces and comments; at the end of the input it is
 * TOKEN_END. A malformed token fails with F8_ERR_PARSE.
 */
f8_status f8_text_next(parser *p);

/*
 * Whether the input after the current token begins with a word and then the punctuation `c`
 * (` dp:` after the ',' of `shard=tp:0,dp:1`), skipping spaces and comments as f8_text_next
 * does; nothing is read. The grammar's one place that looks two tokens ahead.
 */
bool f8_text_word_then_punct_ahead(const parser *p, char c);

/* Checks that the current token is the punctuation `c` and advances past it. */
f8_status f8_text_expect_punct(parser *p, char c);

/* Takes the current token, which must be a string, decoded into the graph's arena; advances. */
f8_status f8_text_take_string(parser *p, const char **out);

/* The name of the VALUE token `tok` (decoded if quoted), in the graph's arena. */
f8_status f8_text_value_name(parser *p, const token *tok, const char **out);

/*
 * Reads the graph's name after the word `graph` (the current token) into the graph's arena and
 * leaves the token after it unread: call f8_text_next next. The name is bare, as the printer writes
 * names, or a string.
 */
f8_status f8_text_take_graph_name(parser *p, const char **out);

/* Whether the current token is the punctuation `c`. */
static inline bool text_at_punct(const parser *p, char c) {
	return p->tok.kind == TOKEN_PUNCT && p->tok.text[0] == c;
}

/* Whether the current token is the word `word`. */
static inline bool text_at_ident(const parser *p, const char *word) {
	return p->tok.kind == TOKEN_IDENT && p->tok.len == strlen(word) &&
	       memcmp(p->tok.text, word, p->tok.len) == 0;
}

#endif
