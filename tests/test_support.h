/*
 * Helpers the C test programs share: the CHECK tally, reading a file, making allocations fail. Header-only:
 * each test is one executable of its own.
 */
#ifndef F8_TESTS_TEST_SUPPORT_H
#define F8_TESTS_TEST_SUPPORT_H

#include <stdio.h>  // fopen, fread
#include <stdlib.h> // malloc, realloc, free

#include "ir/alloc.h" // f8_allocator, f8_alloc_set

/* The tally of CHECKs: each failure prints its place and condition; test_finish prints the
 * counts and gives the exit status. */
static int test_passed, test_failed;

#define CHECK(condition)                                                               \
	do {                                                                           \
		if (condition) {                                                       \
			test_passed++;                                                 \
		} else {                                                               \
			test_failed++;                                                 \
			printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #condition);   \
		}                                                                      \
	} while (0)

static inline int test_finish(void) {
	printf("%d passed, %d failed\n", test_passed, test_failed);
	return test_failed ? 1 : 0;
}

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

/* Allocation failure: allocations left before the failing allocator refuses. */
static long test_allocations_left;

static inline void *test_failing_malloc(size_t size, void *user) {
	(void)user;
	return test_allocations_left-- > 0 ? malloc(size) : NULL;
}

static inline void *test_failing_realloc(void *ptr, size_t size, void *user) {
	(void)user;
	return test_allocations_left-- > 0 ? realloc(ptr, size) : NULL;
}

static inline void test_plain_free(void *ptr, void *user) {
	(void)user;
	free(ptr);
}

/* Installs an allocator under which the next `n` allocations succeed and every later one fails;
 * test_allocations_restore puts the default back. */
static inline void test_fail_allocations_after(long n) {
	static const f8_allocator failing = {test_failing_malloc, test_failing_realloc,
					     test_plain_free, NULL};
	test_allocations_left = n;
	f8_alloc_set(&failing);
}

static inline void test_allocations_restore(void) {
	f8_alloc_set(NULL);
}

#endif
