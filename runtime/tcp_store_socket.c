/*
 * The TCP store's sockets (runtime/tcp_store_wire.h): the clock both sides hold their waits to,
 * the options of every connected socket, and the client's connect, send and receive, each held
 * to a deadline. The client's socket is
 * non-blocking, so that no send waits past its deadline for a server that stopped reading (its
 * host gone, its process stopped): every wait is a poll. Private to the store.
 */
#define _POSIX_C_SOURCE 200809L // clock_gettime, getaddrinfo, nanosleep

#include "runtime/tcp_store_wire.h" // f8_tcp_store_now, f8_tcp_store_dial

#include <errno.h>       // errno, EINTR, EINPROGRESS, EAGAIN
#include <fcntl.h>       // fcntl, O_NONBLOCK
#include <netdb.h>       // getaddrinfo
#include <netinet/in.h>  // IPPROTO_TCP
#include <netinet/tcp.h> // TCP_NODELAY, TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT
#include <poll.h>        // poll
#include <stdio.h>       // snprintf
#include <string.h>      // strerror
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

int f8_tcp_store_dial(const char *host, uint16_t port, double deadline, char *why,
		      size_t size) {
	char service[8];
	snprintf(service, sizeof service, "%u", port);
	double pause = 0.01;
	for (;;) {
		struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
		struct addrinfo *addresses = NULL;
		int found = getaddrinfo(host, service, &hints, &addresses);
		if (found)
			snprintf(why, size, "%s", gai_strerror(found));
		for (struct addrinfo *a = found ? NULL : addresses; a; a = a->ai_next) {
			int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
			if (fd < 0)
				continue;
			// Non-blocking while it connects: an unreachable host is held to the deadline.
			fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
			int done = connect(fd, a->ai_addr, a->ai_addrlen);
			if (done && errno == EINPROGRESS) {
				double left = deadline < 0 ? 10 : deadline - f8_tcp_store_now();
				struct pollfd p = {.fd = fd, .events = POLLOUT};
				int error = ETIMEDOUT;
				socklen_t length = sizeof error;
				if (left > 0 && poll(&p, 1, f8_tcp_store_poll_ms(left)) == 1)
					getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
				done = error ? -1 : 0;
				errno = error;
			}
			// It stays non-blocking: every send and receive has a deadline.
			if (!done && f8_tcp_store_socket_tune(fd)) {
				freeaddrinfo(addresses);
				return fd;
			}
			snprintf(why, size, "%s", strerror(errno));
			close(fd);
		}
		if (addresses)
			freeaddrinfo(addresses);
		double left = deadline < 0 ? pause : deadline - f8_tcp_store_now();
		if (left <= 0)
			return -1;
		double seconds = pause < left ? pause : left; // under a second: tv_nsec's range
		struct timespec sleep = {0, (long)(1e9 * seconds)};
		nanosleep(&sleep, NULL);
		pause = pause < 0.25 ? 2 * pause : 0.5;
	}
}
