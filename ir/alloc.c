/*
 * The allocator hook: the C library's allocator unless a test installs another.
 */
#include "ir/alloc.h" // f8_allocator

#include <assert.h> // assert
#include <stdint.h> // SIZE_MAX
#include <stdlib.h> // malloc, realloc, free
#include <string.h> // memcpy, memset, strlen

static void *libc_malloc(size_t size, void *user) {
	(void)user;
	return malloc(size);
}

static void *libc_realloc(void *ptr, size_t size, void *user) {
	(void)user;
	return realloc(ptr, size);
}

static void libc_free(void *ptr, void *user) {
	(void)user;
	free(ptr);
}

static const f8_allocator libc_allocator = {libc_malloc, libc_realloc, libc_free, NULL};
static f8_allocator current = {libc_malloc, libc_realloc, libc_free, NULL};

void f8_alloc_set(const f8_allocator *allocator) {
	current = allocator ? *allocator : libc_allocator;
}

void *f8_malloc(size_t size) {
	return current.malloc(size ? size : 1, current.user);
}

void *f8_calloc(size_t count, size_t size) {
	if (size && count > SIZE_MAX / size)
		return NULL;
	void *ptr = f8_malloc(count * size);
	if (ptr)
		memset(ptr, 0, count * size);
	return ptr;
}

void *f8_realloc(void *ptr, size_t size) {
	return current.realloc(ptr, size ? size : 1, current.user);
}

void f8_free(void *ptr) {
	if (ptr)
		current.free(ptr, current.user);
}

char *f8_strdup(const char *text) {
	assert(text);
	size_t size = strlen(text) + 1;
	char *copy = f8_malloc(size);
	if (copy)
		memcpy(copy, text, size);
	return copy;
}
