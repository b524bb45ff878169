/*
 * A bump arena: the storage of everything a graph owns (values, nodes, names, attributes).
 * Objects are never freed one by one; destroying the arena frees them all at once.
 */
#ifndef F8_IR_ARENA_H
#define F8_IR_ARENA_H

#include <stddef.h> // size_t

typedef struct f8_arena f8_arena;

/* Creates an empty arena; NULL when out of memory. */
f8_arena *f8_arena_create(void);

/* Frees the arena and everything allocated from it. NULL is allowed. */
void f8_arena_destroy(f8_arena *arena);

/* `size` bytes aligned for any object, zeroed; NULL when out of memory. */
void *f8_arena_alloc(f8_arena *arena, size_t size);

/* `count` objects of `size` bytes, zeroed, with overflow checked; NULL when out of memory. */
void *f8_arena_alloc_array(f8_arena *arena, size_t count, size_t size);

/* A terminated copy of `len` bytes at `text`; NULL when out of memory. */
char *f8_arena_strndup(f8_arena *arena, const char *text, size_t len);

/* A copy of the terminated string `text`; NULL when out of memory. */
char *f8_arena_strdup(f8_arena *arena, const char *text);

/* "<text><suffix>" copied into the arena (a derived value's name: "%x" -> "%x.tp"); NULL when
 * out of memory. */
char *f8_arena_concat(f8_arena *arena, const char *text, const char *suffix);

/* Bytes handed out so far, for statistics and tests. */
size_t f8_arena_used(const f8_arena *arena);

#endif
