/*
 * The one allocator hook for host memory. All library allocations go through f8_malloc and
 * friends, so that tests can make the n-th allocation fail and check that every caller
 * reports F8_ERR_NOMEM cleanly and leaks nothing.
 */
#ifndef F8_IR_ALLOC_H
#define F8_IR_ALLOC_H

#include <stddef.h> // size_t

typedef struct f8_allocator {
	void *(*malloc)(size_t size, void *user);
	void *(*realloc)(void *ptr, size_t size, void *user);
	void (*free)(void *ptr, void *user);
	void *user;
} f8_allocator;

/* Installs `allocator` (copied) for all later allocations; NULL restores the C library's. */
void f8_alloc_set(const f8_allocator *allocator);

/* Like malloc/calloc/realloc/free, through the installed allocator. calloc checks n * size. */
void *f8_malloc(size_t size);
void *f8_calloc(size_t count, size_t size);
void *f8_realloc(void *ptr, size_t size);
void f8_free(void *ptr);

/* A copy of the NUL-terminated `text` on the heap, through the installed allocator: the
 * caller owns it and frees it with f8_free. NULL when out of memory. */
char *f8_strdup(const char *text);

#endif
