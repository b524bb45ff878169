/*
 * The TCP store's server (runtime/tcp_store.h): one thread of rank 0's process, one poll loop
 * over the listening sockets and every connection, so that a get that waits holds nothing but
 * its connection's state. A connection carries one request at a time (its client waits for
 * each reply); the keys are few (the ranks' agreements and counters, a round's worth at a
 * time), so they live in one array searched in order.
 *
 * Every socket is non-blocking, so that one client that stops reading (its process stopped,
 * its host gone) holds nothing but its own reply: the others are served meanwhile, and past
 * the timeout that client is dropped, as a rank that left the run.
 */
#define _POSIX_C_SOURCE 200809L // getaddrinfo

#include "runtime/tcp_store_wire.h" // f8_tcp_store_server, the wire format

#include <errno.h>      // errno, EINTR, EAGAIN
#include <fcntl.h>      // fcntl, O_NONBLOCK
#include <netdb.h>      // getaddrinfo
#include <netinet/in.h> // IPPROTO_IPV6, IPV6_V6ONLY
#include <poll.h>       // poll
#include <pthread.h>    // pthread_create, pthread_join
#include <stdatomic.h>  // atomic_load, atomic_store
#include <stdio.h>      // snprintf
#include <string.h>     // strerror, strncmp
#include <sys/socket.h> // socket, bind, listen, accept, recv, send
#include <unistd.h>     // close, pipe, write

#include "ir/alloc.h"         // f8_calloc, f8_malloc, f8_realloc, f8_free
#include "runtime/tcp_store.h" // F8_TCP_STORE_KEY_MAX, F8_TCP_STORE_VALUE_MAX

enum {
	LISTENERS_MAX = 2, // IPv6 and IPv4, where the host has both
	// Bytes read from one connection in one turn of the loop: a client that sends without a
	// pause (a large set, or bytes after its refusal, without end) must not hold the others.
	RECEIVE_TURN = 1 << 20,
};

/* One client's connection: the request being read, the get that waits, the reply being sent. */
typedef struct connection {
	int fd;
	int64_t rank; // said in its hello; -1 before
	bool said_bye, closing; // closing: refused, closed once its reply is sent
	uint8_t header_bytes[F8_TCP_STORE_HEADER];
	size_t header_got, body_got; // bytes of the header, then of key and value, read so far
	f8_tcp_store_header header;
	uint8_t *body; // key_bytes + value_bytes + 1 (the key's terminating zero at key_bytes)
	bool waiting;  // a get for body's key
	double deadline; // when the get's wait ends (monotonic seconds); < 0: never
	uint8_t *out;
	size_t out_bytes, out_sent;
	// Since when a message is half-way (monotonic seconds), held to the server's timeout: the
	// reply being sent since it was queued; the request being read since its first bytes
	// (< 0: none under way).
	double out_since, in_since;
	char request[160]; // the last request read whole, for messages: `get of "KEY"`
} connection;

typedef struct entry {
	char *key;
	uint8_t *value;
	size_t bytes;
} entry;

struct f8_tcp_store_server {
	int listeners[LISTENERS_MAX], n_listeners;
	int wake[2]; // a pipe: stop's word to the thread
	pthread_t thread;
	int64_t world;
	int64_t departed; // the first rank that left without goodbye; -1: none
	char departed_why[512]; // how it left, sent with every answer that names it
	connection *connections;
	size_t n_connections, cap_connections;
	entry *entries;
	size_t n_entries, cap_entries;
	_Atomic double drain_until; // set by stop: the moment to stop at the latest; 0: serving
	_Atomic double timeout;     // seconds a message may stay half-way; 0: no limit
};

static entry *find(f8_tcp_store_server *server, const char *key) {
	for (size_t i = 0; i < server->n_entries; i++)
		if (strcmp(server->entries[i].key, key) == 0)
			return &server->entries[i];
	return NULL;
}

/* Queues a reply on `c`, after what is still unsent of the one before, and sends what the
 * socket takes now. False when out of memory (the connection is then closed). */
static bool reply(connection *c, f8_tcp_store_answer answer, int64_t number, const void *value,
		  size_t bytes) {
	// A reply still going out (a refusal of a request sent before it was read comes after
	// it) keeps its place: dropping its rest would splice the next header into its value.
	size_t unsent = c->out_bytes - c->out_sent;
	uint8_t *out = f8_malloc(unsent + F8_TCP_STORE_HEADER + bytes);
	if (!out)
		return false;
	if (unsent)
		memcpy(out, c->out + c->out_sent, unsent);
	f8_tcp_store_header_write(out + unsent, &(f8_tcp_store_header){
							.kind = (uint8_t)answer,
							.value_bytes = (uint32_t)bytes,
							.number = number});
	if (bytes)
		memcpy(out + unsent + F8_TCP_STORE_HEADER, value, bytes);
	f8_free(c->out);
	c->out = out, c->out_bytes = unsent + F8_TCP_STORE_HEADER + bytes, c->out_sent = 0;
	if (!unsent) // else the stall counts from the reply under way
		c->out_since = f8_tcp_store_now();
	ssize_t sent = send(c->fd, c->out, c->out_bytes, MSG_NOSIGNAL);
	c->out_sent = sent > 0 ? (size_t)sent : 0;
	return true;
}

/* Refuses what `c` sent, saying why, and closes it once that is sent; false. */
static bool refuse(connection *c, const char *why) {
	c->closing = true;
	if (!reply(c, F8_TCP_STORE_ANSWER_REFUSED, 0, why, strlen(why)))
		c->out_bytes = c->out_sent = 0;
	return false;
}

/* Answers the gets that wait for `key`. */
static void wake_waiters(f8_tcp_store_server *server, const entry *e) {
	for (size_t i = 0; i < server->n_connections; i++) {
		connection *c = &server->connections[i];
		if (c->waiting && strcmp((char *)c->body, e->key) == 0) {
			c->waiting = false;
			if (!reply(c, F8_TCP_STORE_ANSWER_OK, 0, e->value, e->bytes))
				c->closing = true;
			f8_free(c->body);
			c->body = NULL;
		}
	}
}

/* Stores `bytes` at `value` (copied) under `key`; NULL when out of memory. */
static entry *store(f8_tcp_store_server *server, const char *key, const void *value,
		    size_t bytes) {
	entry *e = find(server, key);
	uint8_t *copy = f8_malloc(bytes ? bytes : 1);
	if (!copy)
		return NULL;
	if (bytes)
		memcpy(copy, value, bytes);
	if (!e) {
		if (server->n_entries == server->cap_entries) {
			size_t cap = server->cap_entries ? 2 * server->cap_entries : 64;
			entry *grown = f8_realloc(server->entries, cap * sizeof *grown);
			if (!grown) {
				f8_free(copy);
				return NULL;
			}
			server->entries = grown, server->cap_entries = cap;
		}
		char *name = f8_strdup(key);
		if (!name) {
			f8_free(copy);
			return NULL;
		}
		e = &server->entries[server->n_entries++];
		*e = (entry){.key = name};
	}
	f8_free(e->value);
	e->value = copy, e->bytes = bytes;
	return e;
}

/* The hello: which rank `c` is. False when refused. */
static bool hello(f8_tcp_store_server *server, connection *c, const uint8_t *value) {
	int64_t rank = c->header.number;
	int64_t world = c->header.value_bytes == 8 ? (int64_t)f8_tcp_store_take_u64(value) : -1;
	char why[160];
	if (c->rank >= 0)
		return refuse(c, "a second hello on one connection");
	if (world != server->world) {
		snprintf(why, sizeof why, "a rank of a world of %lld joined a store of %lld ranks",
			 (long long)world, (long long)server->world);
		return refuse(c, why);
	}
	if (rank < 0 || rank >= world) {
		snprintf(why, sizeof why, "rank %lld is outside the world of %lld", (long long)rank,
			 (long long)world);
		return refuse(c, why);
	}
	for (size_t i = 0; i < server->n_connections; i++)
		if (server->connections[i].rank == rank) {
			snprintf(why, sizeof why, "rank %lld joined twice (two processes were given "
				 "the same RANK)", (long long)rank);
			return refuse(c, why);
		}
	c->rank = rank;
	if (!reply(c, F8_TCP_STORE_ANSWER_OK, 0, NULL, 0))
		c->closing = true;
	return true;
}

/* Carries out the request `c` has read whole. False when refused. */
static bool serve(f8_tcp_store_server *server, connection *c) {
	const char *key = (const char *)c->body;
	const uint8_t *value = c->body + c->header.key_bytes + 1;
	f8_tcp_store_header *h = &c->header;
	if (h->kind != F8_TCP_STORE_OP_HELLO && c->rank < 0)
		return refuse(c, "a request before the hello");
	if (h->kind != F8_TCP_STORE_OP_SET && h->kind != F8_TCP_STORE_OP_HELLO && h->value_bytes)
		return refuse(c, "a value where the operation takes none");
	entry *e = NULL;
	bool ok = true;
	switch (h->kind) {
	case F8_TCP_STORE_OP_HELLO:
		return hello(server, c, value);
	case F8_TCP_STORE_OP_SET:
		if (!(e = store(server, key, value, h->value_bytes)))
			return refuse(c, "the store is out of memory");
		ok = reply(c, F8_TCP_STORE_ANSWER_OK, 0, NULL, 0);
		wake_waiters(server, e);
		break;
	case F8_TCP_STORE_OP_GET:
		if ((e = find(server, key)))
			ok = reply(c, F8_TCP_STORE_ANSWER_OK, 0, e->value, e->bytes);
		else if (server->departed >= 0)
			ok = reply(c, F8_TCP_STORE_ANSWER_DEPARTED, server->departed,
				   server->departed_why, strlen(server->departed_why));
		else if (h->number == 0)
			ok = reply(c, F8_TCP_STORE_ANSWER_MISSING, 0, NULL, 0);
		else
			c->waiting = true,
			c->deadline = h->number < 0 ? -1 : f8_tcp_store_now() + 1e-3 * (double)h->number;
		break;
	case F8_TCP_STORE_OP_CHECK:
		ok = reply(c, find(server, key) ? F8_TCP_STORE_ANSWER_OK : F8_TCP_STORE_ANSWER_MISSING,
			   0, NULL, 0);
		break;
	case F8_TCP_STORE_OP_ADD: {
		e = find(server, key);
		if (e && e->bytes != 8)
			return refuse(c, "an add to a key that holds no counter");
		uint8_t sum[8];
		// In uint64_t: numbers from the wire may overflow, which is no undefined behaviour
		// there (the counter wraps as two's complement).
		uint64_t total = (e ? f8_tcp_store_take_u64(e->value) : 0) + (uint64_t)h->number;
		f8_tcp_store_put_u64(sum, total);
		if (!(e = store(server, key, sum, sizeof sum)))
			return refuse(c, "the store is out of memory");
		ok = reply(c, F8_TCP_STORE_ANSWER_OK, (int64_t)total, NULL, 0);
		wake_waiters(server, e);
		break;
	}
	case F8_TCP_STORE_OP_DELETE_PREFIX: {
		if (!h->key_bytes) // it would delete every group's rounds and the broadcasts
			return refuse(c, "a delete of every key");
		size_t kept = 0, length = h->key_bytes;
		for (size_t i = 0; i < server->n_entries; i++) {
			entry *at = &server->entries[i];
			if (strncmp(at->key, key, length) == 0) {
				f8_free(at->key);
				f8_free(at->value);
			} else {
				server->entries[kept++] = *at;
			}
		}
		int64_t deleted = (int64_t)(server->n_entries - kept);
		server->n_entries = kept;
		ok = reply(c, F8_TCP_STORE_ANSWER_OK, deleted, NULL, 0);
		break;
	}
	case F8_TCP_STORE_OP_BYE:
		c->said_bye = true;
		ok = reply(c, F8_TCP_STORE_ANSWER_OK, 0, NULL, 0);
		break;
	default:
		return refuse(c, "an unknown operation");
	}
	if (!ok)
		c->closing = true;
	return true;
}

/* Reads what `c` has sent, and serves each request it completes. 0: it goes on; -1: the
 * client closed the connection; else the errno its socket failed with. */
static int receive(f8_tcp_store_server *server, connection *c) {
	size_t turn = RECEIVE_TURN; // the rest waits for the loop's next turn (poll says it's there)
	for (;;) {
		// Where the next bytes go: the header, the key, or the value after the key's zero.
		f8_tcp_store_header *h = &c->header;
		uint8_t *into = c->header_bytes + c->header_got, discard[4096];
		size_t want = F8_TCP_STORE_HEADER - c->header_got;
		if (c->closing) { // refused: what else it sends is read and dropped
			into = discard, want = sizeof discard;
		} else if (c->header_got == F8_TCP_STORE_HEADER && c->body_got < h->key_bytes) {
			into = c->body + c->body_got, want = h->key_bytes - c->body_got;
		} else if (c->header_got == F8_TCP_STORE_HEADER) {
			into = c->body + c->body_got + 1;
			want = (size_t)h->key_bytes + h->value_bytes - c->body_got;
		}
		if (want && !turn)
			return 0;
		ssize_t got = want ? recv(c->fd, into, want < turn ? want : turn, 0) : 0;
		if (want && got == 0)
			return -1;
		if (want && got < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : errno;
		turn -= (size_t)got;
		if (c->closing)
			continue;
		if (c->waiting || c->out_sent < c->out_bytes) {
			// The client's next request before the last one's reply: not this protocol.
			refuse(c, "a request while the last one is unanswered");
			continue;
		}
		if (c->header_got < F8_TCP_STORE_HEADER) {
			if (!c->header_got)
				c->in_since = f8_tcp_store_now();
			c->header_got += (size_t)got;
			if (c->header_got < F8_TCP_STORE_HEADER)
				continue;
			if (!f8_tcp_store_header_read(c->header_bytes, h)) {
				refuse(c, "not a request of f8c's store (its first bytes are not "
				       "\"f8s1\")");
				continue;
			}
			if (!h->kind || h->kind >= F8_TCP_STORE_OP_COUNT) {
				refuse(c, "an unknown operation");
				continue;
			}
			if (h->key_bytes > F8_TCP_STORE_KEY_MAX ||
			    h->value_bytes > F8_TCP_STORE_VALUE_MAX) {
				refuse(c, "a key or a value past the store's limits");
				continue;
			}
			f8_free(c->body);
			c->body = f8_calloc((size_t)h->key_bytes + 1 + h->value_bytes, 1);
			c->body_got = 0;
			if (!c->body) {
				refuse(c, "the store is out of memory");
				continue;
			}
		} else {
			c->body_got += (size_t)got;
		}
		if (c->body_got < (size_t)h->key_bytes + h->value_bytes)
			continue;
		c->header_got = 0;
		c->in_since = -1;
		if (memchr(c->body, 0, h->key_bytes)) {
			refuse(c, "a key with a zero byte");
			continue;
		}
		if (h->key_bytes)
			snprintf(c->request, sizeof c->request, "%s of \"%.100s%s\"",
				 f8_tcp_store_op_name(h->kind), (const char *)c->body,
				 h->key_bytes > 100 ? "..." : "");
		else
			snprintf(c->request, sizeof c->request, "%s", f8_tcp_store_op_name(h->kind));
		serve(server, c);
		if (!c->waiting) {
			f8_free(c->body);
			c->body = NULL;
		}
	}
}

/* Closes `c` (index i) and forgets it; a rank that left without goodbye fails every wait,
 * told `why` (how it left). */
static void drop(f8_tcp_store_server *server, size_t i, const char *why) {
	connection *c = &server->connections[i];
	int64_t rank = c->said_bye ? -1 : c->rank;
	close(c->fd);
	f8_free(c->body);
	f8_free(c->out);
	server->connections[i] = server->connections[--server->n_connections];
	if (rank < 0 || server->departed >= 0)
		return;
	server->departed = rank;
	snprintf(server->departed_why, sizeof server->departed_why, "%s", why);
	for (size_t j = 0; j < server->n_connections; j++) {
		connection *other = &server->connections[j];
		if (other->waiting) {
			other->waiting = false;
			f8_free(other->body);
			other->body = NULL;
			if (!reply(other, F8_TCP_STORE_ANSWER_DEPARTED, rank, server->departed_why,
				   strlen(server->departed_why)))
				other->closing = true;
		}
	}
}

/*
 * Whether `c` has held a message half-way past `timeout` (seconds, > 0) at `now`: a reply it
 * does not read, or a request it does not finish. Its client hangs or its host is gone, and
 * a slow network is no excuse: the clients' own sends and receives are held to the same
 * timeout. How, into `why`.
 */
static bool stalled(const connection *c, double now, double timeout, char *why, size_t size) {
	if (c->out_sent < c->out_bytes && now - c->out_since > timeout) {
		snprintf(why, size, "the store dropped its connection: %zu of the %zu bytes of the "
			 "reply to its %s were still unread after %.4g s (it hangs, or its host is "
			 "gone)", c->out_bytes - c->out_sent, c->out_bytes,
			 c->closing ? "refused request" : c->request, timeout);
		return true;
	}
	if (c->in_since >= 0 && !c->closing && now - c->in_since > timeout) {
		const f8_tcp_store_header *h = &c->header;
		if (c->header_got < F8_TCP_STORE_HEADER)
			snprintf(why, size, "the store dropped its connection: %zu of the %d bytes of "
				 "a request's header came in %.4g s, and no more (it hangs, or its host "
				 "is gone)", c->header_got, F8_TCP_STORE_HEADER, timeout);
		else
			snprintf(why, size, "the store dropped its connection: %zu of the %u bytes of "
				 "its %s came in %.4g s, and no more (it hangs, or its host is gone)",
				 c->body_got, h->key_bytes + h->value_bytes,
				 f8_tcp_store_op_name(h->kind), timeout);
		return true;
	}
	return false;
}

static void accept_one(f8_tcp_store_server *server, int listener) {
	int fd = accept(listener, NULL, NULL);
	if (fd < 0)
		return;
	if (server->n_connections == server->cap_connections) {
		size_t cap = server->cap_connections ? 2 * server->cap_connections : 16;
		connection *grown = f8_realloc(server->connections, cap * sizeof *grown);
		if (!grown) {
			close(fd);
			return;
		}
		server->connections = grown, server->cap_connections = cap;
	}
	if (!f8_tcp_store_socket_tune(fd)) { // a blocking socket would stall every client
		close(fd);
		return;
	}
	server->connections[server->n_connections++] = (connection){.fd = fd, .rank = -1,
								    .in_since = -1};
}

/* Whether every rank that joined has gone (stop's drain is over). */
static bool drained(const f8_tcp_store_server *server) {
	for (size_t i = 0; i < server->n_connections; i++)
		if (server->connections[i].rank >= 0)
			return false;
	return true;
}

static void *run(void *argument) {
	f8_tcp_store_server *server = argument;
	struct pollfd *polls = NULL;
	size_t cap_polls = 0;
	for (;;) {
		double now = f8_tcp_store_now();
		double drain_until = atomic_load(&server->drain_until);
		if (drain_until && (drained(server) || now >= drain_until))
			break;
		size_t n = (size_t)server->n_listeners + 1 + server->n_connections;
		if (n > cap_polls) {
			struct pollfd *grown = f8_realloc(polls, 2 * n * sizeof *grown);
			if (!grown) { // no room to poll every connection: wait and try again
				poll(NULL, 0, 10);
				continue;
			}
			polls = grown, cap_polls = 2 * n;
		}
		double soonest = drain_until ? drain_until : -1;
		double timeout = atomic_load(&server->timeout);
		size_t at = 0;
		for (int l = 0; l < server->n_listeners; l++)
			polls[at++] = (struct pollfd){.fd = server->listeners[l], .events = POLLIN};
		polls[at++] = (struct pollfd){.fd = server->wake[0], .events = POLLIN};
		for (size_t i = 0; i < server->n_connections; i++) {
			connection *c = &server->connections[i];
			polls[at++] = (struct pollfd){.fd = c->fd, .events = (short)(
				POLLIN | (c->out_sent < c->out_bytes ? POLLOUT : 0))};
			if (c->waiting && c->deadline >= 0 && (soonest < 0 || c->deadline < soonest))
				soonest = c->deadline;
			// Woken when a half-way message outstays the timeout, to drop its connection.
			double since = c->out_sent < c->out_bytes ? c->out_since : c->in_since;
			if (timeout > 0 && since >= 0 && (soonest < 0 || since + timeout < soonest))
				soonest = since + timeout;
		}
		int wait_ms = soonest < 0 ? -1 : soonest <= now ? 0 : f8_tcp_store_poll_ms(soonest - now);
		if (poll(polls, (nfds_t)n, wait_ms) < 0 && errno != EINTR) {
			// The store cannot serve any more: every rank is told at once, by its
			// connection's end, rather than by its request's timeout.
			for (size_t i = 0; i < server->n_connections; i++)
				shutdown(server->connections[i].fd, SHUT_RDWR);
			for (int l = 0; l < server->n_listeners; l++)
				shutdown(server->listeners[l], SHUT_RDWR);
			break;
		}
		now = f8_tcp_store_now();
		char word[16];
		if (polls[server->n_listeners].revents & POLLIN)
			(void)!read(server->wake[0], word, sizeof word);
		// The connections, from the last: a dropped one takes the last one's place.
		size_t first = (size_t)server->n_listeners + 1, known = server->n_connections;
		for (size_t i = known; i-- > 0;) {
			connection *c = &server->connections[i];
			short events = polls[first + i].revents;
			int error = 0; // -1: the client closed; else its socket's errno
			if (events & (POLLIN | POLLHUP | POLLERR))
				error = receive(server, c);
			if (!error && c->out_sent < c->out_bytes) {
				ssize_t sent = send(c->fd, c->out + c->out_sent, c->out_bytes - c->out_sent,
						    MSG_NOSIGNAL);
				if (sent > 0)
					c->out_sent += (size_t)sent;
				else if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
					 errno != EINTR)
					error = errno;
			}
			if (!error && c->waiting && c->deadline >= 0 && now >= c->deadline) {
				c->waiting = false;
				f8_free(c->body);
				c->body = NULL;
				if (!reply(c, F8_TCP_STORE_ANSWER_MISSING, 0, NULL, 0))
					error = ENOMEM;
			}
			char why[512];
			if (error < 0)
				snprintf(why, sizeof why, "its connection closed without goodbye: it died "
					 "or was stopped");
			else if (error)
				snprintf(why, sizeof why, "its connection failed (%s): it died, or its "
					 "host is gone", strerror(error));
			if (error || (timeout > 0 && stalled(c, now, timeout, why, sizeof why)))
				drop(server, i, why);
			else if (c->closing && c->out_sent >= c->out_bytes)
				drop(server, i, "the store refused its request and closed its connection");
		}
		for (int l = 0; l < server->n_listeners; l++)
			if (polls[l].revents & POLLIN)
				accept_one(server, server->listeners[l]);
	}
	f8_free(polls);
	return NULL;
}

/* A socket listening on `address`, or -1 (errno says why). */
static int listen_on(const struct addrinfo *address) {
	int fd = socket(address->ai_family, address->ai_socktype, address->ai_protocol);
	if (fd < 0)
		return -1;
	int yes = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
	if (address->ai_family == AF_INET6) // its own socket beside IPv4's
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &yes, sizeof yes);
	if (bind(fd, address->ai_addr, address->ai_addrlen) || listen(fd, 1024) ||
	    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)) {
		int error = errno;
		close(fd);
		errno = error;
		return -1;
	}
	return fd;
}

f8_status f8_tcp_store_server_start(uint16_t port, int64_t world, double timeout,
				    f8_tcp_store_server **out, f8_diag *diag) {
	*out = NULL;
	f8_tcp_store_server *server = f8_calloc(1, sizeof *server);
	if (!server)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	*server = (f8_tcp_store_server){.world = world, .departed = -1, .wake = {-1, -1}};
	atomic_store(&server->timeout, timeout > 0 ? timeout : 0);
	char service[8];
	snprintf(service, sizeof service, "%u", port);
	struct addrinfo hints = {.ai_flags = AI_PASSIVE, .ai_family = AF_UNSPEC,
				 .ai_socktype = SOCK_STREAM};
	struct addrinfo *addresses = NULL;
	int found = getaddrinfo(NULL, service, &hints, &addresses);
	int error = 0, taken_error = 0; // taken: a port another process holds on one family
	for (struct addrinfo *a = found ? NULL : addresses; a; a = a->ai_next) {
		if (server->n_listeners == LISTENERS_MAX)
			break;
		int fd = listen_on(a);
		if (fd >= 0) {
			server->listeners[server->n_listeners++] = fd;
			continue;
		}
		// A family this host lacks is no matter; a port another process holds on one
		// family is: clients dialling that family would reach the other process.
		error = errno;
		if (error != EAFNOSUPPORT && error != EADDRNOTAVAIL && error != EPROTONOSUPPORT)
			taken_error = error;
	}
	if (addresses)
		freeaddrinfo(addresses);
	f8_status status = F8_OK;
	if (!server->n_listeners || taken_error) {
		status = f8_diag_set(diag, F8_ERR_IO, "rank 0 cannot serve the store on port %u: %s",
				     port, found	  ? gai_strerror(found)
					   : taken_error ? strerror(taken_error)
							 : strerror(error));
		f8_diag_hint(diag, "choose a free MASTER_PORT on rank 0's host");
	} else if (pipe(server->wake) ||
		   // A full pipe has woken the thread already: a write to it need not wait.
		   fcntl(server->wake[1], F_SETFL, fcntl(server->wake[1], F_GETFL) | O_NONBLOCK) ||
		   pthread_create(&server->thread, NULL, run, server)) {
		status = f8_diag_set(diag, F8_ERR_NOMEM, "cannot start the store's thread");
	}
	if (status) {
		for (int l = 0; l < server->n_listeners; l++)
			close(server->listeners[l]);
		for (int i = 0; i < 2; i++)
			if (server->wake[i] >= 0)
				close(server->wake[i]);
		f8_free(server);
		return status;
	}
	*out = server;
	return F8_OK;
}

void f8_tcp_store_server_set_timeout(f8_tcp_store_server *server, double timeout) {
	// Read at each turn of the thread's loop; the pipe wakes a poll that waits without one.
	atomic_store(&server->timeout, timeout > 0 ? timeout : 0);
	(void)!write(server->wake[1], "t", 1);
}

void f8_tcp_store_server_stop(f8_tcp_store_server *server, double drain_seconds) {
	if (!server)
		return;
	// The thread reads drain_until at each turn of its loop; the pipe wakes it to see it.
	atomic_store(&server->drain_until, f8_tcp_store_now() + drain_seconds);
	(void)!write(server->wake[1], "s", 1);
	pthread_join(server->thread, NULL);
	for (size_t i = 0; i < server->n_connections; i++) {
		close(server->connections[i].fd);
		f8_free(server->connections[i].body);
		f8_free(server->connections[i].out);
	}
	for (size_t i = 0; i < server->n_entries; i++) {
		f8_free(server->entries[i].key);
		f8_free(server->entries[i].value);
	}
	for (int l = 0; l < server->n_listeners; l++)
		close(server->listeners[l]);
	close(server->wake[0]);
	close(server->wake[1]);
	f8_free(server->connections);
	f8_free(server->entries);
	f8_free(server);
}
