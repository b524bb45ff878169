/*
 * The bump arena: a list of chunks, each at least 64 KiB, the newest first.
 */
#include "ir/arena.h" // f8_arena

#include <stdalign.h> // alignof, max_align_t
#include <stdint.h>   // SIZE_MAX
#include <string.h>   // memset, memcpy, strlen

#include "ir/alloc.h" // f8_malloc, f8_free

enum { CHUNK_MIN = 64 * 1024 };

typedef struct chunk {
	struct chunk *next;
	size_t size, used;
	alignas(max_align_t) unsigned char data[];
} chunk;

struct f8_arena {
	chunk *head;
	size_t total_used;
};

f8_arena *f8_arena_create(void) {
	f8_arena *arena = f8_malloc(sizeof *arena);
	if (arena) {
		arena->head = NULL;
		arena->total_used = 0;
	}
	return arena;
}

void f8_arena_destroy(f8_arena *arena) {
	if (!arena)
		return;
	for (chunk *c = arena->head, *next; c; c = next) {
		next = c->next;
		f8_free(c);
	}
	f8_free(arena);
}

void *f8_arena_alloc(f8_arena *arena, size_t size) {
	const size_t align = alignof(max_align_t);
	if (size > SIZE_MAX - align - sizeof(chunk))
		return NULL;
	size = (size + align - 1) & ~(align - 1);
	chunk *c = arena->head;
	if (!c || c->size - c->used < size) {
		size_t chunk_size = size > CHUNK_MIN ? size : CHUNK_MIN;
		c = f8_malloc(sizeof(chunk) + chunk_size);
		if (!c)
			return NULL;
		c->size = chunk_size;
		c->used = 0;
		c->next = arena->head;
		arena->head = c;
	}
	void *ptr = c->data + c->used;
	c->used += size;
	arena->total_used += size;
	memset(ptr, 0, size);
	return ptr;
}

void *f8_arena_alloc_array(f8_arena *arena, size_t count, size_t size) {
	if (size && count > SIZE_MAX / size)
		return NULL;
	return f8_arena_alloc(arena, count * size);
}

char *f8_arena_strndup(f8_arena *arena, const char *text, size_t len) {
	if (len == SIZE_MAX)
		return NULL;
	char *copy = f8_arena_alloc(arena, len + 1);
	if (copy) {
		memcpy(copy, text, len);
		copy[len] = '\0';
	}
	return copy;
}

char *f8_arena_strdup(f8_arena *arena, const char *text) {
	return f8_arena_strndup(arena, text, strlen(text));
}

char *f8_arena_concat(f8_arena *arena, const char *text, const char *suffix) {
	size_t a = strlen(text), b = strlen(suffix);
	char *joined = f8_arena_alloc(arena, a + b + 1);
	if (joined) {
		memcpy(joined, text, a);
		memcpy(joined + a, suffix, b + 1);
	}
	return joined;
}

size_t f8_arena_used(const f8_arena *arena) {
	return arena->total_used;
}
