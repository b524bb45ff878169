/*
 * Places in a JSON document's text: a tokenizer just good enough to step over strings (with
 * their escapes), numbers, literals and nesting, so that a field's line:column can be named.
 */
#include "frontend/json/json_source.h" // f8_json_source, f8_json_member

#include <stdint.h> // uint32_t

typedef enum token_kind {
	TOKEN_END,
	TOKEN_STRING, // from the opening quote through the closing one (or the end of the input)
	TOKEN_PUNCT,  // one of { } [ ] : ,
	TOKEN_WORD,   // anything else up to a blank or punctuation: numbers, literals, garbage
} token_kind;

typedef struct token {
	token_kind kind;
	size_t start, end; // byte offsets, end exclusive
} token;

static bool is_blank(char c) {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static bool is_punct(char c) {
	return c == '{' || c == '}' || c == '[' || c == ']' || c == ':' || c == ',';
}

/* The token at or after *pos; *pos moves past it. Always makes progress until the end. */
static token next_token(const f8_json_source *source, size_t *pos) {
	const char *text = source->text;
	size_t i = *pos, len = source->len;
	while (i < len && is_blank(text[i]))
		i++;
	token tok = {.kind = TOKEN_END, .start = i};
	if (i < len && text[i] == '"') {
		tok.kind = TOKEN_STRING;
		for (i++; i < len && text[i] != '"'; i++)
			if (text[i] == '\\' && i + 1 < len)
				i++; // the escaped character, which may be a quote
		if (i < len)
			i++; // the closing quote
	} else if (i < len && is_punct(text[i])) {
		tok.kind = TOKEN_PUNCT;
		i++;
	} else if (i < len) {
		tok.kind = TOKEN_WORD;
		while (i < len && !is_blank(text[i]) && !is_punct(text[i]) && text[i] != '"')
			i++;
	}
	tok.end = i;
	*pos = i;
	return tok;
}

static bool is_punct_token(const f8_json_source *source, token tok, char c) {
	return tok.kind == TOKEN_PUNCT && source->text[tok.start] == c;
}

/* Steps over one value (a scalar, or an object or array with all it holds) from *pos, which ends
 * just past it; returns the offset where the value starts. */
static size_t skip_value(const f8_json_source *source, size_t *pos) {
	token tok = next_token(source, pos);
	size_t start = tok.start, depth = 0;
	for (;;) {
		if (is_punct_token(source, tok, '{') || is_punct_token(source, tok, '['))
			depth++;
		else if ((is_punct_token(source, tok, '}') || is_punct_token(source, tok, ']')) && depth)
			depth--;
		if (depth == 0 || tok.kind == TOKEN_END)
			return start;
		tok = next_token(source, pos);
	}
}

/* The member of the top-level object from *pos (just past '{' or a ','), into *member; false
 * at the object's end (or where the text stops making sense). Tolerates malformed JSON. */
static bool next_member(const f8_json_source *source, size_t *pos, f8_json_member *member) {
	token key = next_token(source, pos);
	if (key.kind != TOKEN_STRING)
		return false;
	next_token(source, pos); // ':'
	*member = (f8_json_member){.key = key.start, .key_end = key.end};
	member->value = skip_value(source, pos);
	member->value_end = *pos;
	return true;
}

/* Steps over the top-level '{' from *pos; false when the document does not start with one,
 * leaving the first token's offset in *object. */
static bool enter_object(const f8_json_source *source, size_t *pos, size_t *object) {
	token tok = next_token(source, pos);
	*object = tok.start;
	return is_punct_token(source, tok, '{');
}

bool f8_json_source_members(const f8_json_source *source, size_t *object, f8_json_member *members,
			    size_t max, size_t *n_members) {
	size_t pos = 0;
	f8_json_member member;
	*n_members = 0;
	if (!enter_object(source, &pos, object))
		return false;
	while (next_member(source, &pos, &member)) {
		if (*n_members < max)
			members[*n_members] = member;
		++*n_members;
		if (!is_punct_token(source, next_token(source, &pos), ','))
			break;
	}
	return true;
}

bool f8_json_source_member_at(const f8_json_source *source, size_t offset, f8_json_member *out) {
	size_t pos = 0, object;
	f8_json_member member;
	if (!enter_object(source, &pos, &object))
		return false;
	while (next_member(source, &pos, &member) && member.key <= offset) {
		if (offset < member.value_end) {
			*out = member;
			return true;
		}
		if (!is_punct_token(source, next_token(source, &pos), ','))
			break;
	}
	return false;
}

size_t f8_json_source_token_start(const f8_json_source *source, size_t offset) {
	if (offset == 0 || offset > source->len)
		return offset > source->len ? source->len : 0;
	size_t target = offset - 1, pos = 0;
	for (;;) {
		token tok = next_token(source, &pos);
		if (tok.kind == TOKEN_END || tok.start > target)
			return offset; // the byte is blank
		if (target < tok.end)
			return tok.start;
	}
}

void f8_json_source_diag_at(const f8_json_source *source, size_t offset, f8_diag *diag) {
	const char *text = source->text;
	if (offset > source->len)
		offset = source->len;
	uint32_t line = 1;
	size_t line_start = 0;
	for (size_t i = 0; i < offset; i++) {
		if (text[i] == '\n') {
			line++;
			line_start = i + 1;
		}
	}
	size_t line_end = line_start;
	while (line_end < source->len && text[line_end] != '\n' && text[line_end] != '\r')
		line_end++;
	f8_diag_at(diag, source->file, line, (uint32_t)(offset - line_start) + 1, text + line_start,
		   line_end - line_start);
}
