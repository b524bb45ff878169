/*
 * Token files for the C tests that train: a few byte-words in a random order (an LCG from a
 * seed, so the same file every run), which gpt-tiny learns in a few steps, written in llm.c's
 * format by the runtime's own writer. Header-only.
 */
#ifndef F8_TESTS_RUNTIME_TEST_TOKENS_H
#define F8_TESTS_RUNTIME_TEST_TOKENS_H

#include <stdbool.h> // bool
#include <stdint.h>  // uint32_t, uint64_t

#include "ir/alloc.h"       // f8_malloc, f8_free
#include "runtime/tokens.h" // f8_tokens_write_llmc

/* Writes `n` tokens of `words` (n_words of them) picked by the LCG from `seed` to `path`. */
static inline bool test_write_word_tokens(const char *path, const char *const *words,
					  uint32_t n_words, size_t n, uint64_t seed) {
	uint32_t *tokens = f8_malloc(n * sizeof *tokens);
	if (!tokens)
		return false;
	size_t at = 0;
	while (at < n) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		for (const char *c = words[(seed >> 33) % n_words]; *c && at < n; c++)
			tokens[at++] = (unsigned char)*c;
	}
	f8_diag diag;
	f8_diag_clear(&diag);
	bool ok = f8_tokens_write_llmc(path, tokens, n, &diag) == F8_OK;
	if (!ok)
		f8_diag_print(&diag, stdout);
	f8_free(tokens);
	return ok;
}

#endif
