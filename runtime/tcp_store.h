/*
 * A small key-value store over TCP, where the ranks of a run that no MPI launched meet
 * (DESIGN.md, "Distributed"): torchrun's and srun's ranks find each other at MASTER_ADDR:
 * MASTER_PORT, as PyTorch's c10d TCPStore has them do. Rank 0 serves it, from a thread of its
 * own process; every rank, rank 0 too, is a client with one connection.
 *
 * Keys are text, values bytes. A get waits until some rank has set its key; an add keeps a
 * counter. Every wait is held to the store's timeout and then fails naming what it waited for,
 * a request's send and its reply's receive too (a peer that stopped reading holds no rank for
 * ever); a rank whose connection closes without saying goodbye (it died), or that holds a
 * message half-way past the timeout (the server drops it), fails every wait of the others at
 * once, naming it and how it left. The server refuses what does not parse (a stray client, a
 * port scanner) by closing that connection, and goes on serving the ranks.
 *
 * The wire format, little-endian: a request is a 24-byte header (the magic "f8s1", the
 * operation, three zero bytes, the key's length (u32), the value's length (u32), a number
 * (i64: a rank, a wait in milliseconds or an addend)), then the key, then the value. A reply
 * is a 24-byte header (the magic, the answer, three zero bytes, the value's length, four zero
 * bytes, a number), then the value (a refusal's: its reason, as text; a departure's: how the
 * rank left, as text).
 */
#ifndef F8_RUNTIME_TCP_STORE_H
#define F8_RUNTIME_TCP_STORE_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // int64_t, uint16_t

#include "ir/diag.h" // f8_status, f8_diag

typedef struct f8_tcp_store f8_tcp_store;

enum {
	F8_TCP_STORE_KEY_MAX = 1024,         // bytes of a key
	F8_TCP_STORE_VALUE_MAX = 1 << 30,    // bytes of a value
};

/* Where the store is and who this client is. */
typedef struct f8_tcp_store_options {
	const char *host;   // MASTER_ADDR: a name or an address (IPv4 or IPv6)
	uint16_t port;      // MASTER_PORT
	int64_t rank;       // this client's rank, 0 .. world - 1
	int64_t world;      // how many ranks join
	bool serve;         // this process runs the server (rank 0), on every address's `port`
	double timeout;     // seconds: for connecting, and for every wait; 0: no limit
} f8_tcp_store_options;

/*
 * Joins the store: with `serve`, starts the server first; then connects (to each address
 * `host` resolves to in turn, each given its share of the time left, retried until the
 * timeout: rank 0's server may start after the others) and says which rank this is.
 * F8_ERR_IO when the port cannot be served (the message names it), the store cannot be reached
 * within the timeout (the message names the addresses tried and how each failed), or the
 * server refuses the rank (another connection holds it, or the world sizes differ);
 * F8_ERR_NOMEM. *out is the caller's (f8_tcp_store_destroy).
 */
f8_status f8_tcp_store_create(const f8_tcp_store_options *options, f8_tcp_store **out,
			      f8_diag *diag);

/*
 * Says goodbye and closes the connection. Where this process serves, the server then waits
 * for every other rank that joined to close its connection (their last requests answered), or
 * for the timeout (a minute where there is none), before it stops. NULL is allowed.
 */
void f8_tcp_store_destroy(f8_tcp_store *store);

/* Marks this rank's run as failed: f8_tcp_store_destroy then leaves without the goodbye (and
 * rank 0 stops serving at once), so that the other ranks' waits fail now, naming this rank,
 * instead of at their timeout. */
void f8_tcp_store_fail(f8_tcp_store *store);

/* The limit of every wait from now on, in seconds (0: none). */
void f8_tcp_store_set_timeout(f8_tcp_store *store, double seconds);

/* "HOST:PORT", for messages. */
const char *f8_tcp_store_address(const f8_tcp_store *store);

/*
 * The operations. Each fails with F8_ERR_IO when the store cannot be reached or answers
 * something that does not parse (the connection is then closed, and every later operation
 * fails at once), or when it refuses the request (the message says why; the server closes
 * the connection then too: a refusal is a client's mistake, not a state to go on from).
 *
 * set: `bytes` bytes at `value` under `key`, replacing what was there; it wakes the gets that
 * wait for `key`.
 * get: the value of `key` into *value (f8_malloc'd, the caller's; *bytes long), waiting until
 * some rank has set it. F8_ERR_IO naming the key when the timeout passes, or when a rank left
 * the run without goodbye (the message names it): *departed is then that rank (else -1;
 * `departed` may be NULL).
 * check: whether `key` is there now, without waiting.
 * add: the counter under `key` (8 bytes, little-endian; absent: 0) plus `amount`, stored and
 * into *out. F8_ERR_IO when the key holds a value of another size.
 * delete_prefix: removes every key that starts with `prefix`; *out (may be NULL) counts them.
 */
f8_status f8_tcp_store_set(f8_tcp_store *store, const char *key, const void *value,
			   size_t bytes, f8_diag *diag);
f8_status f8_tcp_store_get(f8_tcp_store *store, const char *key, void **value, size_t *bytes,
			   int64_t *departed, f8_diag *diag);
f8_status f8_tcp_store_check(f8_tcp_store *store, const char *key, bool *exists,
			     f8_diag *diag);
f8_status f8_tcp_store_add(f8_tcp_store *store, const char *key, int64_t amount, int64_t *out,
			   f8_diag *diag);
f8_status f8_tcp_store_delete_prefix(f8_tcp_store *store, const char *prefix, int64_t *out,
				     f8_diag *diag);

#endif
