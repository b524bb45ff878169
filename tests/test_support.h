/*
 * Helpers the C test programs share. Header-only: each test is one executable of its own.
 */
#ifndef F8_TESTS_TEST_SUPPORT_H
#define F8_TESTS_TEST_SUPPORT_H

#include <stdio.h>  // fopen, fread
#include <stdlib.h> // malloc, free

/* The whole file at `path`, terminated, in malloc'd memory (length in *len); NULL on failure. */
static inline char *test_read_file(const char *path, size_t *len) {
	FILE *file = fopen(path, "rb");
	if (!file)
		return NULL;
	char *text = NULL;
	long size = fseek(file, 0, SEEK_END) == 0 ? ftell(file) : -1;
	if (size >= 0 && fseek(file, 0, SEEK_SET) == 0 && (text = malloc((size_t)size + 1))) {
		if (fread(text, 1, (size_t)size, file) == (size_t)size) {
			text[size] = '\0';
			*len = (size_t)size;
		} else {
			free(text);
			text = NULL;
		}
	}
	fclose(file);
	return text;
}

#endif
