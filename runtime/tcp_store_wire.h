/*
 * The TCP store's wire format (runtime/tcp_store.h), shared by its client (tcp_store.c) and its
 * server (tcp_store_server.c); the server's start and stop; the sockets' helpers
 * (tcp_store_socket.c). Private to the store.
 */
#ifndef F8_RUNTIME_TCP_STORE_WIRE_H
#define F8_RUNTIME_TCP_STORE_WIRE_H

#include <assert.h>  // static_assert
#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // uint8_t, uint16_t, uint32_t, int64_t
#include <string.h>  // memcmp, memcpy

#include "ir/diag.h" // f8_status, f8_diag

enum { F8_TCP_STORE_HEADER = 24 }; // bytes of a request's or a reply's header

/* What a request asks. */
typedef enum f8_tcp_store_op {
	F8_TCP_STORE_OP_HELLO = 1,     // number: the rank; value: the world size (8 bytes)
	F8_TCP_STORE_OP_SET,           // key, value
	F8_TCP_STORE_OP_GET,           // key; number: the wait in milliseconds, -1: no limit
	F8_TCP_STORE_OP_CHECK,         // key
	F8_TCP_STORE_OP_ADD,           // key; number: the amount
	F8_TCP_STORE_OP_DELETE_PREFIX, // key: the prefix
	F8_TCP_STORE_OP_BYE,           // the rank leaves on purpose
	F8_TCP_STORE_OP_COUNT
} f8_tcp_store_op;

/* An operation's name, for messages ("set"). */
static inline const char *f8_tcp_store_op_name(unsigned op) {
	static const char *const names[] = {"an unknown operation", "hello", "set", "get",
					    "check", "add", "delete_prefix", "bye"};
	static_assert(sizeof names / sizeof names[0] == F8_TCP_STORE_OP_COUNT, "one name an op");
	return op < F8_TCP_STORE_OP_COUNT ? names[op] : names[0];
}

/* What a reply answers. */
typedef enum f8_tcp_store_answer {
	F8_TCP_STORE_ANSWER_OK,       // value: a get's; number: an add's or a delete's count
	F8_TCP_STORE_ANSWER_MISSING,  // no such key (a check), or the wait's time passed (a get)
	F8_TCP_STORE_ANSWER_DEPARTED, // number: a rank that left without goodbye; value: how, text
	F8_TCP_STORE_ANSWER_REFUSED,  // value: why, as text; the server closes the connection
	F8_TCP_STORE_ANSWER_COUNT
} f8_tcp_store_answer;

/* A request's or a reply's header: `kind` is the operation or the answer. */
typedef struct f8_tcp_store_header {
	uint8_t kind;
	uint32_t key_bytes; // 0 in a reply
	uint32_t value_bytes;
	int64_t number;
} f8_tcp_store_header;

static const uint8_t f8_tcp_store_magic[4] = {'f', '8', 's', '1'};

static inline void f8_tcp_store_put_u64(uint8_t *out, uint64_t value) {
	for (int i = 0; i < 8; i++)
		out[i] = (uint8_t)(value >> 8 * i);
}

static inline uint64_t f8_tcp_store_take_u64(const uint8_t *in) {
	uint64_t value = 0;
	for (int i = 0; i < 8; i++)
		value |= (uint64_t)in[i] << 8 * i;
	return value;
}

static inline void f8_tcp_store_header_write(uint8_t out[F8_TCP_STORE_HEADER],
					     const f8_tcp_store_header *header) {
	memset(out, 0, F8_TCP_STORE_HEADER);
	memcpy(out, f8_tcp_store_magic, 4);
	out[4] = header->kind;
	for (int i = 0; i < 4; i++) {
		out[8 + i] = (uint8_t)(header->key_bytes >> 8 * i);
		out[12 + i] = (uint8_t)(header->value_bytes >> 8 * i);
	}
	f8_tcp_store_put_u64(out + 16, (uint64_t)header->number);
}

/* False when the bytes are not a header (the magic, or the zero bytes, differ). */
static inline bool f8_tcp_store_header_read(const uint8_t in[F8_TCP_STORE_HEADER],
					    f8_tcp_store_header *header) {
	if (memcmp(in, f8_tcp_store_magic, 4) != 0 || in[5] || in[6] || in[7])
		return false;
	header->kind = in[4];
	header->key_bytes = header->value_bytes = 0;
	for (int i = 0; i < 4; i++) {
		header->key_bytes |= (uint32_t)in[8 + i] << 8 * i;
		header->value_bytes |= (uint32_t)in[12 + i] << 8 * i;
	}
	header->number = (int64_t)f8_tcp_store_take_u64(in + 16);
	return true;
}

/* `seconds` (>= 0) as poll's milliseconds, rounded up, at most a day (a longer wait polls
 * again). */
static inline int f8_tcp_store_poll_ms(double seconds) {
	return seconds > 86400 ? 86400000 : (int)(1e3 * seconds) + 1;
}

/* The monotonic clock, in seconds: every deadline of the store's is on it. */
double f8_tcp_store_now(void);

/* Sets a connected socket's options, on both sides: TCP_NODELAY, keepalive (a peer whose host
 * vanished is noticed) and O_NONBLOCK. False when it cannot be made non-blocking. */
bool f8_tcp_store_socket_tune(int fd);

/* `bytes` from `data` to the non-blocking socket `fd` before `deadline` (f8_tcp_store_now's
 * seconds; < 0: none). 0: sent; 1: the time passed; -1: the connection closed or failed. */
int f8_tcp_store_send_before(int fd, const void *data, size_t bytes, double deadline);

/* `bytes` from the non-blocking socket `fd` into `data` before `deadline` (< 0: none). 0:
 * read; 1: the time passed; -1: the connection closed or failed. */
int f8_tcp_store_receive_before(int fd, void *data, size_t bytes, double deadline);

struct addrinfo; // netdb.h's

/*
 * Connects to `host`:`port` before `deadline` (< 0: none): rounds over every address the name
 * resolves to, each address given its share of the time left (5 s at most), until one
 * answers or the deadline passes (the server starts when rank 0 comes). The socket (tuned,
 * non-blocking), or -1 with *why (`size` bytes): the addresses of the last round, each with
 * how it failed. `addresses`, when not NULL, is tried instead of what `host` resolves to
 * (the tests' list of addresses that fail in chosen ways; not freed).
 */
int f8_tcp_store_dial(const char *host, uint16_t port, double deadline,
		      const struct addrinfo *addresses, char *why, size_t size);

typedef struct f8_tcp_store_server f8_tcp_store_server;

/* Serves the store on every address's `port`, from a thread of its own, for `world` ranks.
 * `timeout` (seconds, 0: none) bounds how long a connection may hold a message half-way (a
 * reply it does not read, a request it does not finish): past it the connection is dropped,
 * and a rank's counts as that rank leaving the run. F8_ERR_IO naming the port when it cannot
 * listen there (in use); F8_ERR_NOMEM. */
f8_status f8_tcp_store_server_start(uint16_t port, int64_t world, double timeout,
				    f8_tcp_store_server **out, f8_diag *diag);

/* The server's `timeout` from now on (seconds, 0: none). */
void f8_tcp_store_server_set_timeout(f8_tcp_store_server *server, double timeout);

/* Stops serving once every rank that joined has closed its connection, or after
 * `drain_seconds`; then frees everything. NULL is allowed. */
void f8_tcp_store_server_stop(f8_tcp_store_server *server, double drain_seconds);

#endif
