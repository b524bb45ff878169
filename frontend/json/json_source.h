/*
 * Places in the source text of a JSON document, which jansson does not keep: the byte offsets
 * of the top-level object's keys and values, the token an error offset falls in, and the
 * line:column of an offset for diagnostics. A small tokenizer that knows JSON strings, escapes
 * and nesting; it reads, never validates (jansson has done that, or reports what it found).
 */
#ifndef F8_FRONTEND_JSON_JSON_SOURCE_H
#define F8_FRONTEND_JSON_JSON_SOURCE_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t

#include "ir/diag.h" // f8_diag

/* A JSON document's text and the file it came from (NULL when none). */
typedef struct f8_json_source {
	const char *text;
	size_t len;
	const char *file;
} f8_json_source;

/* One member of the top-level object: byte offsets of its key and its value, each from its
 * first byte to just past its last. */
typedef struct f8_json_member {
	size_t key, key_end;
	size_t value, value_end;
} f8_json_member;

/*
 * Finds the top-level object of `source`, which must be well-formed JSON: its '{' offset in
 * *object, the first `max` members in source order in `members`, and how many it has in all in
 * *n_members. Returns false (with *object at the first token) when the document is not an object.
 */
bool f8_json_source_members(const f8_json_source *source, size_t *object, f8_json_member *members,
			    size_t max, size_t *n_members);

/*
 * The member of the top-level object that holds byte `offset` (from its key through its value)
 * into *out: the field an error at `offset` is in. Works on malformed JSON as far as it makes
 * sense; false when no member holds it.
 */
bool f8_json_source_member_at(const f8_json_source *source, size_t offset, f8_json_member *out);

/*
 * The offset where the token holding the byte just before `offset` starts: jansson's error
 * position is the end of the token it stopped at. `offset` itself when that byte is blank or
 * past the end (an error at the end of the input).
 */
size_t f8_json_source_token_start(const f8_json_source *source, size_t offset);

/* Fills diag's file, line, column (1-based, in bytes) and line text for byte `offset`. */
void f8_json_source_diag_at(const f8_json_source *source, size_t offset, f8_diag *diag);

#endif
