/*
 * The TCP store's sockets (runtime/tcp_store_wire.h): the clock both sides hold their waits to,
 * the options of every connected socket, and the client's connect, send and receive, each held
 * to a deadline. The client's socket is non-blocking, so that no send waits past its deadline
 * for a server that stopped reading (its host gone, its process stopped): every wait is a
 * poll. Private to the store.
 */
#define _POSIX_C_SOURCE 200809L // clock_gettime, getaddrinfo, nanosleep, pthread_condattr_setclock

#include "runtime/tcp_store_wire.h" // f8_tcp_store_now, f8_tcp_store_dial

#include <errno.h>       // errno, EINTR, EINPROGRESS, EAGAIN
#include <fcntl.h>       // fcntl, O_NONBLOCK
#include <netdb.h>       // getaddrinfo
#include <netinet/in.h>  // IPPROTO_TCP
#include <netinet/tcp.h> // TCP_NODELAY, TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT
#include <poll.h>        // poll
#include <pthread.h>     // pthread_create, pthread_cond_timedwait
#include <stdio.h>       // snprintf
#include <stdlib.h>      // calloc, free
#include <string.h>      // strerror, strlen, memcpy
#include <sys/socket.h>  // socket, connect, send, recv
#include <time.h>        // clock_gettime, nanosleep
#include <unistd.h>      // close

double f8_tcp_store_now(void) {
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

/*
 * Keepalive's timing where the system lets a socket choose it (Linux; the others keep their
 * own, often two hours of quiet before the first probe). A peer whose host vanished (power,
 * a kernel panic, a cut network: no FIN, no RST) leaves a quiet connection looking alive;
 * probing after a minute of quiet, every 10 s, and giving up after 6 unanswered, notices it
 * in about two minutes: the server then drops that rank, and the others' waits fail naming
 * it, and a client whose server's host vanished fails even with no timeout. A network that
 * drops a minute of packets (a switch's failover) leaves a healthy run alone, and a probe a
 * minute per quiet connection costs nothing. (Data unacknowledged is not probed: the sends'
 * deadlines bound that.)
 */
enum { KEEPALIVE_IDLE = 60, KEEPALIVE_INTERVAL = 10, KEEPALIVE_COUNT = 6 };

bool f8_tcp_store_socket_tune(int fd) {
	int yes = 1; // each request and reply at once: the other side waits for it
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &yes, sizeof yes);
#if defined(TCP_KEEPIDLE) && defined(TCP_KEEPINTVL) && defined(TCP_KEEPCNT)
	int idle = KEEPALIVE_IDLE, interval = KEEPALIVE_INTERVAL, count = KEEPALIVE_COUNT;
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
#endif
	int flags = fcntl(fd, F_GETFL);
	return flags >= 0 && !fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

/* Waits until `fd` is ready for `events` or `deadline` passes (< 0: none). 0: ready; 1: the
 * time passed; -1: poll failed. */
static int wait_for(int fd, short events, double deadline) {
	for (;;) {
		double left = deadline < 0 ? -1 : deadline - f8_tcp_store_now();
		if (deadline >= 0 && left <= 0)
			return 1;
		struct pollfd p = {.fd = fd, .events = events};
		int ready = poll(&p, 1, left < 0 ? -1 : f8_tcp_store_poll_ms(left));
		if (ready > 0)
			return 0; // POLLHUP and POLLERR too: the send or recv after says what
		if (ready < 0 && errno != EINTR)
			return -1;
	}
}

int f8_tcp_store_send_before(int fd, const void *data, size_t bytes, double deadline) {
	const uint8_t *at = data;
	while (bytes) {
		// Poll first only when the socket's buffer is full: most sends go at once.
		ssize_t sent = send(fd, at, bytes, MSG_NOSIGNAL);
		if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
			int waited = wait_for(fd, POLLOUT, deadline);
			if (waited)
				return waited;
			continue;
		}
		if (sent <= 0)
			return -1;
		at += sent, bytes -= (size_t)sent;
	}
	return 0;
}

int f8_tcp_store_receive_before(int fd, void *data, size_t bytes, double deadline) {
	uint8_t *at = data;
	while (bytes) {
		int waited = wait_for(fd, POLLIN, deadline);
		if (waited)
			return waited;
		ssize_t got = recv(fd, at, bytes, 0);
		if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			continue; // woken for nothing: the deadline is checked again
		if (got <= 0)
			return -1;
		at += got, bytes -= (size_t)got;
	}
	return 0;
}

/*
 * One address's share of a round of connects is at most ATTEMPT_MAX seconds. A SYN lost on a
 * live path is sent again after 1 s and after 3 s more (Linux's first retransmission timeout,
 * doubled), so 5 s lets a live address answer through two lost SYNs, while an address that
 * swallows SYNs (a firewall that drops them, a host gone, an interface of rank 0's host that
 * this host cannot route to) costs the addresses after it at most 5 s a round.
 */
enum { ATTEMPT_MAX = 5, ADDRESS_TEXT = 64 };

/* One non-blocking connect to `address`, for at most `seconds`: the socket (tuned), or -1
 * with *error an errno, or -1 where no answer came in time. */
static int connect_one(const struct addrinfo *address, double seconds, int *error) {
	*error = 0;
	int fd = socket(address->ai_family, address->ai_socktype, address->ai_protocol);
	int flags = fd < 0 ? -1 : fcntl(fd, F_GETFL);
	int done = -1;
	if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK))
		*error = errno;
	else if ((done = connect(fd, address->ai_addr, address->ai_addrlen)) && errno != EINPROGRESS)
		*error = errno; // refused, unreachable: at once
	else if (done) { // under way
		int waited = wait_for(fd, POLLOUT, f8_tcp_store_now() + seconds);
		socklen_t length = sizeof *error;
		if (waited)
			*error = waited > 0 ? -1 : errno;
		else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, error, &length))
			*error = errno;
	}
	if (!*error && !f8_tcp_store_socket_tune(fd))
		*error = errno;
	if (*error && fd >= 0)
		close(fd);
	return *error ? -1 : fd;
}

/* What a lookup asks for: the addresses of every family that take a stream connection. */
static const struct addrinfo stream_hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};

/* A lookup that may outlive its caller: its name and answer, shared with its thread. */
typedef struct lookup {
	pthread_mutex_t lock;
	pthread_cond_t answered;
	bool done;      // the thread has answered
	bool abandoned; // the caller has stopped waiting: the thread frees it
	int result;
	struct addrinfo *answer;
	char service[8];
	char name[];
} lookup;

static void lookup_free(lookup *l) {
	pthread_cond_destroy(&l->answered);
	pthread_mutex_destroy(&l->lock);
	free(l);
}

static void *look_up(void *argument) {
	lookup *l = argument;
	struct addrinfo *answer = NULL;
	int result = getaddrinfo(l->name, l->service, &stream_hints, &answer);
	pthread_mutex_lock(&l->lock);
	bool abandoned = l->abandoned;
	l->result = result, l->answer = answer, l->done = true;
	pthread_cond_signal(&l->answered);
	pthread_mutex_unlock(&l->lock);
	if (abandoned) {
		if (answer)
			freeaddrinfo(answer);
		lookup_free(l);
	}
	return NULL;
}

/*
 * `host`'s addresses for `service` (getaddrinfo's answer, *timed_out false), found before
 * `deadline` (< 0: none). getaddrinfo waits for the resolver as long as resolv.conf's attempts
 * and timeouts say (tens of seconds for a name server that does not answer), past the deadline
 * a rank's start is held to: it runs on a thread of its own, waited for until the deadline; one
 * still running then is left to finish and free what it has (*timed_out true). Not glibc's
 * getaddrinfo_a: its threads are a pool that a fork copies without them, so a child's lookups
 * would wait for ever.
 */
static int resolve(const char *host, const char *service, double deadline,
		   struct addrinfo **out, bool *timed_out) {
	*timed_out = false;
	*out = NULL;
	if (deadline < 0)
		return getaddrinfo(host, service, &stream_hints, out);
	size_t length = strlen(host) + 1;
	lookup *l = calloc(1, sizeof *l + length);
	if (!l)
		return EAI_MEMORY;
	memcpy(l->name, host, length);
	snprintf(l->service, sizeof l->service, "%s", service);
	pthread_condattr_t clock;
	pthread_condattr_init(&clock);
	pthread_condattr_setclock(&clock, CLOCK_MONOTONIC); // f8_tcp_store_now's
	pthread_mutex_init(&l->lock, NULL);
	pthread_cond_init(&l->answered, &clock);
	pthread_condattr_destroy(&clock);
	pthread_attr_t detached;
	pthread_attr_init(&detached);
	pthread_attr_setdetachstate(&detached, PTHREAD_CREATE_DETACHED);
	pthread_t thread;
	int started = pthread_create(&thread, &detached, look_up, l);
	pthread_attr_destroy(&detached);
	if (started) { // no thread to spare: the lookup waits here, as getaddrinfo does
		lookup_free(l);
		return getaddrinfo(host, service, &stream_hints, out);
	}
	double seconds = deadline > 0 ? deadline : 0;
	time_t whole = (time_t)seconds;
	struct timespec until = {whole, (long)(1e9 * (seconds - (double)whole))};
	pthread_mutex_lock(&l->lock);
	while (!l->done && pthread_cond_timedwait(&l->answered, &l->lock, &until) != ETIMEDOUT)
		;
	bool done = l->done;
	l->abandoned = !done;
	pthread_mutex_unlock(&l->lock);
	if (!done) {
		*timed_out = true;
		return EAI_AGAIN;
	}
	*out = l->answer;
	int result = l->result;
	lookup_free(l);
	return result;
}

/* `address` as numbers ("10.0.0.1", "fe80::1"), for messages. */
static void address_text(const struct addrinfo *address, char *out, size_t size) {
	if (getnameinfo(address->ai_addr, address->ai_addrlen, out, (socklen_t)size, NULL, 0,
			NI_NUMERICHOST))
		snprintf(out, size, "(an address of family %d)", address->ai_family);
}

int f8_tcp_store_dial(const char *host, uint16_t port, double deadline,
		      const struct addrinfo *given, char *why, size_t size) {
	char service[8];
	snprintf(service, sizeof service, "%u", port);
	snprintf(why, size, "no address tried");
	double pause = 0.01;
	bool tried = false; // a round has tried an address
	for (unsigned round = 1;; round++) {
		// Resolved again each round: the name may point elsewhere once rank 0's host is up.
		struct addrinfo *resolved = NULL;
		bool timed_out = false;
		int found = given ? 0 : resolve(host, service, deadline, &resolved, &timed_out);
		const struct addrinfo *addresses = given ? given : resolved;
		// A lookup cut off by the deadline leaves the last round's attempts, where there
		// were some, as the reason: they say more.
		if (found && !(timed_out && tried))
			snprintf(why, size, "cannot resolve \"%s\": %s", host,
				 timed_out ? "the resolver did not answer in time"
					   : gai_strerror(found));
		size_t untried = 0;
		for (const struct addrinfo *a = addresses; a; a = a->ai_next)
			untried++;
		// Each address gets its share of what is left, so that one that swallows SYNs leaves
		// the others their turn; the round's attempts, should all fail, become *why.
		size_t written = 0;
		for (const struct addrinfo *a = addresses; a; a = a->ai_next, untried--) {
			double left = deadline < 0 ? ATTEMPT_MAX : deadline - f8_tcp_store_now();
			if (left <= 0)
				break;
			double share = deadline < 0 ? left : left / (double)untried; // none: each 5 s
			share = share < ATTEMPT_MAX ? share : ATTEMPT_MAX;
			int error = 0;
			int fd = connect_one(a, share, &error);
			tried = true;
			if (fd >= 0) {
				if (resolved)
					freeaddrinfo(resolved);
				return fd;
			}
			char text[ADDRESS_TEXT], failure[64];
			address_text(a, text, sizeof text);
			if (error < 0)
				snprintf(failure, sizeof failure, "no answer in %.2g s", share);
			else
				snprintf(failure, sizeof failure, "%s", strerror(error));
			if (written < size)
				written += (size_t)snprintf(why + written, size - written, "%s%s (%s)",
							    written ? ", " : "tried ", text, failure);
		}
		if (written && written < size && round > 1)
			snprintf(why + written, size - written, ", the last of %u rounds", round);
		if (resolved)
			freeaddrinfo(resolved);
		double left = deadline < 0 ? pause : deadline - f8_tcp_store_now();
		if (left <= 0)
			return -1;
		double seconds = pause < left ? pause : left; // under a second: tv_nsec's range
		struct timespec sleep = {0, (long)(1e9 * seconds)};
		nanosleep(&sleep, NULL);
		pause = pause < 0.25 ? 2 * pause : 0.5;
	}
}
