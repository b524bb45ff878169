/*
 * The TCP store's client (runtime/tcp_store.h): one connection, one request at a time, its
 * send and its reply each awaited with poll under the store's timeout. The server is tcp_store_server.c; the
 * sockets' connect, send and receive are tcp_store_socket.c.
 */
#include "runtime/tcp_store.h" // f8_tcp_store

#include <stdio.h>  // snprintf
#include <string.h> // strlen, strchr
#include <unistd.h> // close

#include "ir/alloc.h"               // f8_calloc, f8_malloc, f8_free
#include "runtime/tcp_store_wire.h" // the wire format, the server

enum {
	ADDRESS_MAX = 300,
	// Seconds a get's reply may come after the wait the server holds it to (the network's
	// part): past them the server is taken for gone.
	REPLY_GRACE = 10,
};

struct f8_tcp_store {
	int fd;             // -1 once the connection failed: every operation fails at once
	char address[ADDRESS_MAX]; // "HOST:PORT"
	int64_t rank;
	double timeout;     // seconds; 0: none
	f8_tcp_store_server *server; // rank 0's
	char broken[320];   // why the connection was given up, for the operations after
	bool failed;        // this rank's run failed: it leaves without a goodbye
};

/* Gives the connection up: `why` is every later operation's failure. */
static f8_status give_up(f8_tcp_store *store, f8_diag *diag, const char *why) {
	if (store->fd >= 0)
		close(store->fd);
	store->fd = -1;
	snprintf(store->broken, sizeof store->broken, "%s", why);
	return f8_diag_set(diag, F8_ERR_IO, "rank %lld: the store at %s: %s", (long long)store->rank,
			   store->address, why);
}

/*
 * One request and its reply: the reply's header into *answer, its value (if any) into *value
 * (f8_malloc'd, the caller's; NULL `value`: dropped). `wait` is how long the server may hold
 * the request (seconds, < 0: no limit); the reply is awaited that long plus REPLY_GRACE.
 */
static f8_status request(f8_tcp_store *store, f8_tcp_store_op op, const char *key,
			 const void *data, size_t bytes, int64_t number, double wait,
			 f8_tcp_store_header *answer, void **value, f8_diag *diag) {
	if (value)
		*value = NULL;
	if (store->fd < 0)
		return f8_diag_set(diag, F8_ERR_IO, "rank %lld: the store at %s: %s",
				   (long long)store->rank, store->address, store->broken);
	size_t key_bytes = key ? strlen(key) : 0;
	if (key_bytes > F8_TCP_STORE_KEY_MAX || bytes > F8_TCP_STORE_VALUE_MAX)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "a store key of %zu bytes or a value of %zu: "
				   "past the store's limits (%d, %d)", key_bytes, bytes,
				   F8_TCP_STORE_KEY_MAX, F8_TCP_STORE_VALUE_MAX);
	uint8_t header[F8_TCP_STORE_HEADER];
	f8_tcp_store_header_write(header, &(f8_tcp_store_header){
						  .kind = (uint8_t)op, .key_bytes = (uint32_t)key_bytes,
						  .value_bytes = (uint32_t)bytes, .number = number});
	// The request, then its reply, each held to the timeout: a server that stopped reading
	// (rank 0 stopped, its host gone) must not hold a send for ever.
	char doing[200], why[320];
	if (key && bytes)
		snprintf(doing, sizeof doing, "its %s of \"%.120s%s\" (%zu bytes)",
			 f8_tcp_store_op_name(op), key, key_bytes > 120 ? "..." : "", bytes);
	else if (key)
		snprintf(doing, sizeof doing, "its %s of \"%.120s%s\"", f8_tcp_store_op_name(op), key,
			 key_bytes > 120 ? "..." : "");
	else
		snprintf(doing, sizeof doing, "its %s", f8_tcp_store_op_name(op));
	double send_deadline = store->timeout > 0 ? f8_tcp_store_now() + store->timeout : -1;
	int sent = f8_tcp_store_send_before(store->fd, header, sizeof header, send_deadline);
	if (!sent)
		sent = f8_tcp_store_send_before(store->fd, key, key_bytes, send_deadline);
	if (!sent)
		sent = f8_tcp_store_send_before(store->fd, data, bytes, send_deadline);
	if (sent) {
		if (sent > 0)
			snprintf(why, sizeof why, "%s could not be sent in %.4g s (rank 0, which serves "
				 "the store, hangs or stopped reading?)", doing, store->timeout);
		else
			snprintf(why, sizeof why, "the connection closed while sending %s (rank 0, "
				 "which serves the store, exited?)", doing);
		return give_up(store, diag, why);
	}
	double deadline = wait < 0 ? -1 : f8_tcp_store_now() + wait + REPLY_GRACE;
	int got = f8_tcp_store_receive_before(store->fd, header, sizeof header, deadline);
	if (!got && !f8_tcp_store_header_read(header, answer))
		return give_up(store, diag, "its reply does not parse");
	if (!got && answer->value_bytes > F8_TCP_STORE_VALUE_MAX)
		return give_up(store, diag, "its reply's value is past the store's limit");
	uint8_t *bytes_in = NULL;
	if (!got && answer->value_bytes) {
		if (!(bytes_in = f8_malloc(answer->value_bytes)))
			return give_up(store, diag, "out of memory for its reply");
		got = f8_tcp_store_receive_before(store->fd, bytes_in, answer->value_bytes,
						  deadline);
	}
	if (got) {
		f8_free(bytes_in);
		if (got > 0)
			snprintf(why, sizeof why, "no reply to %s in %.4g s (rank 0, which serves the "
				 "store, hangs?)", doing, wait + REPLY_GRACE);
		else
			snprintf(why, sizeof why, "the connection closed awaiting the reply to %s "
				 "(rank 0, which serves the store, exited?)", doing);
		return give_up(store, diag, why);
	}
	if (answer->kind == F8_TCP_STORE_ANSWER_REFUSED) {
		snprintf(why, sizeof why, "%s refused: %.*s", doing, (int)(answer->value_bytes < 120
								  ? answer->value_bytes : 120),
			 bytes_in ? (const char *)bytes_in : "");
		f8_free(bytes_in);
		return give_up(store, diag, why);
	}
	if (answer->kind >= F8_TCP_STORE_ANSWER_COUNT) {
		f8_free(bytes_in);
		return give_up(store, diag, "its reply does not parse");
	}
	if (value)
		*value = bytes_in;
	else
		f8_free(bytes_in);
	return F8_OK;
}

/* A wait's seconds: 0 (none) where not positive, NaN too; at most a year, so that its
 * milliseconds fit poll's int64_t arithmetic (--distributed-timeout-minutes takes any finite
 * number, and 1e12 minutes is no limit in effect). */
static double bounded(double seconds) {
	return seconds > 0 ? (seconds < 3.2e7 ? seconds : 3.2e7) : 0;
}

f8_status f8_tcp_store_create(const f8_tcp_store_options *options, f8_tcp_store **out,
			      f8_diag *diag) {
	*out = NULL;
	f8_tcp_store *store = f8_calloc(1, sizeof *store);
	if (!store)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	store->fd = -1;
	store->rank = options->rank;
	store->timeout = bounded(options->timeout);
	bool colon = strchr(options->host, ':') != NULL; // IPv6: [HOST]:PORT
	snprintf(store->address, sizeof store->address, colon ? "[%s]:%u" : "%s:%u", options->host,
		 options->port);
	f8_status status = options->serve ? f8_tcp_store_server_start(options->port,
								      options->world,
								      store->timeout,
								      &store->server, diag)
					  : F8_OK;
	if (status) {
		f8_free(store);
		return status;
	}
	char why[600] = "";
	double deadline = store->timeout > 0 ? f8_tcp_store_now() + store->timeout : -1;
	store->fd = f8_tcp_store_dial(options->host, options->port, deadline, NULL, why,
				      sizeof why);
	if (store->fd < 0) {
		status = f8_diag_set(diag, F8_ERR_IO, "rank %lld cannot reach the store at %s in "
				     "%.4g s: %s", (long long)options->rank, store->address,
				     store->timeout, why);
		f8_diag_hint(diag, "rank 0 serves it: check that rank 0 started, and that MASTER_ADDR "
			     "and MASTER_PORT name rank 0's host and a port this host can reach");
	}
	uint8_t world[8];
	f8_tcp_store_put_u64(world, (uint64_t)options->world);
	f8_tcp_store_header answer;
	if (!status)
		status = request(store, F8_TCP_STORE_OP_HELLO, NULL, world, sizeof world,
				 options->rank, store->timeout > 0 ? store->timeout : -1, &answer,
				 NULL, diag);
	if (status) {
		f8_tcp_store_destroy(store);
		return status;
	}
	snprintf(store->broken, sizeof store->broken, "closed");
	*out = store;
	return F8_OK;
}

/* How long a request the server answers at once may take (seconds; -1: no limit). */
static double limit(const f8_tcp_store *store) {
	return store->timeout > 0 ? store->timeout : -1;
}

void f8_tcp_store_destroy(f8_tcp_store *store) {
	if (!store)
		return;
	f8_tcp_store_header answer;
	// Goodbye: leaving now is not a failure the others should stop for. A failed rank leaves
	// without it, and a failed rank 0 serves no longer, so that the others' waits end now.
	if (store->fd >= 0 && !store->failed)
		request(store, F8_TCP_STORE_OP_BYE, NULL, NULL, 0, 0, limit(store), &answer, NULL,
			NULL);
	if (store->fd >= 0)
		close(store->fd);
	f8_tcp_store_server_stop(store->server, store->failed ? 0
					       : store->timeout > 0 ? store->timeout : 60);
	f8_free(store);
}

void f8_tcp_store_fail(f8_tcp_store *store) {
	if (store)
		store->failed = true;
}

void f8_tcp_store_set_timeout(f8_tcp_store *store, double seconds) {
	store->timeout = bounded(seconds);
	if (store->server)
		f8_tcp_store_server_set_timeout(store->server, store->timeout);
}

const char *f8_tcp_store_address(const f8_tcp_store *store) {
	return store->address;
}

f8_status f8_tcp_store_set(f8_tcp_store *store, const char *key, const void *value,
			   size_t bytes, f8_diag *diag) {
	f8_tcp_store_header answer;
	return request(store, F8_TCP_STORE_OP_SET, key, value, bytes, 0, limit(store), &answer,
		       NULL, diag);
}

f8_status f8_tcp_store_get(f8_tcp_store *store, const char *key, void **value, size_t *bytes,
			   int64_t *departed, f8_diag *diag) {
	*value = NULL, *bytes = 0;
	if (departed)
		*departed = -1;
	f8_tcp_store_header answer;
	int64_t wait_ms = store->timeout > 0 ? (int64_t)(1e3 * store->timeout) : -1;
	f8_status status = request(store, F8_TCP_STORE_OP_GET, key, NULL, 0, wait_ms,
				   limit(store), &answer, value, diag);
	if (status)
		return status;
	if (answer.kind == F8_TCP_STORE_ANSWER_MISSING)
		return f8_diag_set(diag, F8_ERR_IO, "rank %lld waited %.4g s for the store's key \"%s\" "
				   "at %s, which no rank set", (long long)store->rank,
				   store->timeout, key, store->address);
	if (answer.kind == F8_TCP_STORE_ANSWER_DEPARTED) {
		if (departed)
			*departed = answer.number;
		// The server says how the rank left: its connection closed, or the server dropped
		// it for holding a message half-way past the timeout.
		status = f8_diag_set(diag, F8_ERR_IO, "rank %lld waited for the store's key \"%s\" at "
				     "%s, but rank %lld left the run (%.*s)", (long long)store->rank,
				     key, store->address, (long long)answer.number,
				     *value ? (int)(answer.value_bytes < 400 ? answer.value_bytes : 400)
					    : 0, *value ? (const char *)*value : "");
		f8_free(*value);
		*value = NULL;
		return status;
	}
	if (!*value && !(*value = f8_malloc(1)))
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	*bytes = answer.value_bytes;
	return F8_OK;
}

f8_status f8_tcp_store_check(f8_tcp_store *store, const char *key, bool *exists,
			     f8_diag *diag) {
	f8_tcp_store_header answer;
	f8_status status = request(store, F8_TCP_STORE_OP_CHECK, key, NULL, 0, 0, limit(store),
				   &answer, NULL, diag);
	*exists = !status && answer.kind == F8_TCP_STORE_ANSWER_OK;
	return status;
}

f8_status f8_tcp_store_add(f8_tcp_store *store, const char *key, int64_t amount, int64_t *out,
			   f8_diag *diag) {
	f8_tcp_store_header answer = {0};
	f8_status status = request(store, F8_TCP_STORE_OP_ADD, key, NULL, 0, amount, limit(store),
				   &answer, NULL, diag);
	*out = answer.number;
	return status;
}

f8_status f8_tcp_store_delete_prefix(f8_tcp_store *store, const char *prefix, int64_t *out,
				     f8_diag *diag) {
	f8_tcp_store_header answer = {0};
	f8_status status = request(store, F8_TCP_STORE_OP_DELETE_PREFIX, prefix, NULL, 0, 0,
				   limit(store), &answer, NULL, diag);
	if (out)
		*out = answer.number;
	return status;
}
