/*
 * f8_dist's collectives over the TCP store (runtime/distributed.h, a store launch): a group's
 * exchange of small host buffers through its first place. Private to runtime/distributed.c.
 *
 * Each place sets its part under "NAME/ROUND/PLACE"; place 0 gets them in place order,
 * combines them (gathered side by side, or reduced element by element: the same bits on every
 * place, whatever the order of arrival) and sets "NAME/ROUND/all", which the others get. The
 * keys of round R - 1 go when place 0 holds every part of round R: each place set its part of R
 * after it had read the result of R - 1, so nobody reads them any more. On a failed wait, the
 * parts present say who had arrived.
 */
#ifndef F8_RUNTIME_DISTRIBUTED_STORE_H
#define F8_RUNTIME_DISTRIBUTED_STORE_H

#include <stddef.h> // size_t
#include <stdint.h> // uint32_t, uint64_t, int64_t

#include "ir/diag.h"           // f8_status, f8_diag
#include "ir/dtype.h"          // f8_dtype
#include "ir/graph.h"          // f8_reduction
#include "runtime/tcp_store.h" // f8_tcp_store

/* One group, as this rank sees it, and the round of its exchange now. */
typedef struct f8_dist_store_group {
	f8_tcp_store *store;
	const char *name;     // the group's axes and index ("tp+dp.3"): its keys' first part
	const char *axes;     // the group's axes ("tp+dp"), for messages
	uint64_t round;       // 1, 2, ...: the group's exchanges, counted alike on each place
	uint32_t size, place; // ranks in the group; this rank's place
	const int64_t *ranks; // (size): the world's rank at each place
} f8_dist_store_group;

/* How place 0 combines the parts. */
typedef enum f8_dist_store_combine {
	F8_DIST_STORE_GATHER, // side by side, in place order: size * bytes
	F8_DIST_STORE_REDUCE, // element by element (dtype f32, f64 or i64; sum or max): bytes
} f8_dist_store_combine;

/*
 * This place's `bytes` at `mine` exchanged with the group's other places, the combination into
 * `out` (gather: size * bytes; reduce: bytes; `out` may be `mine` for a reduce). `what` names
 * the call for messages ("an all-reduce"). F8_ERR_IO when a wait fails (the message names the
 * ranks that had not arrived, or the one that left), F8_ERR_INVALID when the places' sizes
 * differ, F8_ERR_NOMEM.
 */
f8_status f8_dist_store_exchange(const f8_dist_store_group *group, const char *what,
				 const void *mine, size_t bytes, f8_dist_store_combine combine,
				 f8_dtype dtype, f8_reduction reduction, void *out, f8_diag *diag);

#endif
