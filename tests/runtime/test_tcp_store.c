/*
 * The TCP store (runtime/tcp_store.h) and f8_dist over it (runtime/distributed.h), as torchrun
 * starts a run: processes forked with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1 and
 * MASTER_PORT (a free port), without MPI.
 *
 * - The launch from the environment: which launches meet at the store, and the refusals naming
 *   MASTER_ADDR or MASTER_PORT.
 * - Three ranks (rank 0 joining last, so that the others' connections are retried): set, get
 *   that waits, add, the barrier, all-reduces, an all-gather, agreements, the broadcast, the
 *   CPU backend's collectives refused; a get that times out, naming its key; requests that do
 *   not parse, a second rank 1 and a hello of another world refused, the store serving on; a
 *   barrier that one rank skips, failing at the timeout naming it; that rank's exit without
 *   goodbye failing the others' next barrier at once (long before the timeout), naming it.
 * - A rank whose rank 0 never starts, and ranks 0 and 1 of three without rank 2: their start
 *   fails at the timeout, saying where it tried or naming rank 2.
 * - Four ranks on a 2 x 2 mesh (TP, DP): all-reduces over each group at once, each group's
 *   own.
 * - Peers that stop reading, with a value larger than the sockets' buffers on its way: a rank
 *   that does not read its get's reply is dropped by the server at the timeout, the server
 *   serving rank 0 meanwhile, and rank 0's wait names it and why; a client whose server stops
 *   reading fails its set at the timeout, naming it. A client that stops half-way through a
 *   request's header is dropped at the timeout too.
 * - A request sent while the last reply, larger than the sockets' buffers, is still going
 *   out: refused after that reply, which arrives whole.
 * - Keepalive and TCP_NODELAY on both ends of a connection: the client's and the server's.
 * - The connect over a list of addresses (as a name with several resolves to): a first address
 *   that swallows SYNs (a listener whose backlog is full) or refuses leaves the working one its
 *   turn before the deadline; a list that all fails names each address and how it failed.
 */
#define _POSIX_C_SOURCE 200809L // setenv, kill, nanosleep

#include <fcntl.h>      // fcntl, O_NONBLOCK
#include <netdb.h>      // addrinfo
#include <netinet/in.h> // sockaddr_in, htons, IPPROTO_TCP
#include <netinet/tcp.h> // TCP_NODELAY, TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT
#include <poll.h>       // poll
#include <pthread.h>    // pthread_create, pthread_join
#include <signal.h>     // kill, SIGKILL
#include <stdio.h>      // printf, snprintf
#include <stdlib.h>     // setenv, unsetenv, exit
#include <string.h>     // strstr, memcmp, memset
#include <sys/resource.h> // getrlimit, setrlimit, RLIMIT_NOFILE
#include <sys/socket.h> // socket, bind, connect, shutdown
#include <sys/wait.h>   // waitpid
#include <time.h>       // clock_gettime, nanosleep
#include <unistd.h>     // fork, _exit, close

#include "runtime/cpu/backend.h"    // f8_cpu_backend_create_distributed
#include "runtime/distributed.h"    // f8_dist_*
#include "runtime/tcp_store.h"      // f8_tcp_store_*
#include "runtime/tcp_store_wire.h" // the wire format, for requests made by hand
#include "tests/test_support.h"     // CHECK

enum {
	RANKS = 3,
	SECONDS_MAX = 60,
	SMALL_BUFFER = 4096, // a stalled socket's receive buffer: the big value fills it at once
};

/* Bytes of a value larger than the sockets' buffers can hold between them: 16 MiB, or four
 * times the most a sending socket's buffer grows to (net.ipv4.tcp_wmem's third field; 4 MiB by
 * default, more where a machine is tuned for bandwidth), so that a stalled reply stays stalled.
 * Set by main before the tests. */
static size_t BIG = 16 << 20;

static void size_big(void) {
	FILE *f = fopen("/proc/sys/net/ipv4/tcp_wmem", "r");
	unsigned long low, initial, most;
	if (f && fscanf(f, "%lu %lu %lu", &low, &initial, &most) == 3 && 4 * (size_t)most > BIG)
		BIG = 4 * (size_t)most;
	if (f)
		fclose(f);
	printf("a value larger than the sockets' buffers: %zu bytes\n", BIG);
}

static double now_seconds(void) {
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

static void sleep_seconds(double seconds) {
	struct timespec pause = {(time_t)seconds, (long)(1e9 * (seconds - (double)(time_t)seconds))};
	nanosleep(&pause, NULL);
}

/* The launchers' variables, unset. */
static void clear_launch(void) {
	static const char *const names[] = {
		"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "RANK",
		"WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
		"MASTER_ADDR", "MASTER_PORT", "PMIX_RANK", "PMI_RANK", "TORCHELASTIC_USE_AGENT_STORE",
		"F8C_STORE_PORT"};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		unsetenv(names[i]);
}

static void set_number(const char *name, long long value) {
	char text[24];
	snprintf(text, sizeof text, "%lld", value);
	setenv(name, text, 1);
}

/* torchrun's variables for `rank` of `world`, the store at 127.0.0.1:`port`. */
static void set_torchrun(int64_t rank, int64_t world, int port) {
	clear_launch();
	set_number("RANK", rank);
	set_number("WORLD_SIZE", world);
	set_number("LOCAL_RANK", rank);
	setenv("MASTER_ADDR", "127.0.0.1", 1);
	set_number("MASTER_PORT", port);
}

/* A port nothing listens on now (the kernel's pick, given back). */
static int free_port(void) {
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in address = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
	socklen_t length = sizeof address;
	int port = -1;
	if (fd >= 0 && !bind(fd, (struct sockaddr *)&address, sizeof address) &&
	    !getsockname(fd, (struct sockaddr *)&address, &length))
		port = ntohs(address.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

static void test_launch(void) {
	f8_dist_launch launch;
	f8_diag diag = {0};
	set_torchrun(1, 2, 29500);
	CHECK(f8_dist_launch_from_environment(&launch, &diag) == F8_OK);
	CHECK(launch.store && strcmp(launch.launcher, "torchrun") == 0);
	CHECK(launch.store_port == 29500 && strcmp(launch.store_host, "127.0.0.1") == 0);
	CHECK(launch.timeout == F8_DIST_TIMEOUT_DEFAULT);
	// Real torchrun: its agent serves PyTorch's store at MASTER_PORT, so f8c's takes the next,
	// or F8C_STORE_PORT.
	setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
	CHECK(f8_dist_launch_from_environment(&launch, &diag) == F8_OK && launch.store_port == 29501);
	setenv("F8C_STORE_PORT", "31000", 1);
	CHECK(f8_dist_launch_from_environment(&launch, &diag) == F8_OK && launch.store_port == 31000);
	unsetenv("F8C_STORE_PORT");
	set_number("MASTER_PORT", 65535);
	CHECK(f8_dist_launch_from_environment(&launch, &diag) == F8_ERR_ARGUMENT &&
	      strstr(diag.message, "65535") != NULL);
	unsetenv("TORCHELASTIC_USE_AGENT_STORE");
	set_number("MASTER_PORT", 29500);
	unsetenv("MASTER_ADDR");
	CHECK(f8_dist_launch_from_environment(&launch, &diag) == F8_ERR_ARGUMENT);
	CHECK(strstr(diag.message, "no MASTER_ADDR") != NULL);
	setenv("MASTER_ADDR", "localhost", 1);
	unsetenv("MASTER_PORT");
	CHECK(f8_dist_launch_from_environment(&launch, &diag) == F8_ERR_ARGUMENT);
	CHECK(strstr(diag.message, "no MASTER_PORT") != NULL);
	setenv("MASTER_PORT", "70000", 1);
	CHECK(f8_dist_launch_from_environment(&launch, &diag) == F8_ERR_ARGUMENT);
	CHECK(strstr(diag.message, "MASTER_PORT") != NULL);
	// One rank needs no store.
	set_torchrun(0, 1, 29500);
	unsetenv("MASTER_ADDR");
	CHECK(f8_dist_launch_from_environment(&launch, &diag) == F8_OK && !launch.store);
	// mpirun's variables come first: MPI's path, as before.
	set_torchrun(1, 2, 29500);
	set_number("OMPI_COMM_WORLD_RANK", 1);
	set_number("OMPI_COMM_WORLD_SIZE", 2);
	CHECK(f8_dist_launch_from_environment(&launch, &diag) == F8_OK);
	CHECK(!launch.store && strcmp(launch.launcher, "mpirun") == 0);
	// srun: the store with MASTER_ADDR and MASTER_PORT and no MPI launch; else MPI.
	clear_launch();
	set_number("SLURM_PROCID", 1);
	set_number("SLURM_NTASKS", 2);
	CHECK(f8_dist_launch_from_environment(&launch, &diag) == F8_OK && !launch.store);
	setenv("MASTER_ADDR", "node1", 1);
	set_number("MASTER_PORT", 6000);
	CHECK(f8_dist_launch_from_environment(&launch, &diag) == F8_OK && launch.store);
	CHECK(strcmp(launch.launcher, "srun") == 0 && launch.store_port == 6000);
	set_number("PMIX_RANK", 1);
	CHECK(f8_dist_launch_from_environment(&launch, &diag) == F8_OK && !launch.store);
	clear_launch();
	set_number("SLURM_PROCID", 1);
	set_number("SLURM_NTASKS", 2);
	set_number("MASTER_PORT", 6000);
	CHECK(f8_dist_launch_from_environment(&launch, &diag) == F8_ERR_ARGUMENT);
	CHECK(strstr(diag.message, "no MASTER_ADDR") != NULL);
	clear_launch();
}

/* Sends `bytes` to the store at 127.0.0.1:`port` as a client of its own, and reads the reply:
 * its answer (or -1 when none came) and its text into `text`; whether the server closed the
 * connection after it into *closed. Less than a header: sent, and the connection closed;
 * `hang_up`: this side of it closed after the bytes. */
static int raw_request(int port, const void *bytes, size_t n, bool hang_up, char *text,
		       size_t size, bool *closed) {
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				      .sin_addr.s_addr = htonl(0x7f000001)};
	uint8_t reply[F8_TCP_STORE_HEADER + 256];
	size_t got = 0;
	*closed = false;
	text[0] = 0;
	if (fd < 0 || connect(fd, (struct sockaddr *)&address, sizeof address) ||
	    send(fd, bytes, n, MSG_NOSIGNAL) != (ssize_t)n || n < F8_TCP_STORE_HEADER ||
	    (hang_up && shutdown(fd, SHUT_WR))) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	for (;;) { // until the server closes, or 2 s pass
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, 2000) != 1)
			break;
		ssize_t more = recv(fd, reply + got, sizeof reply - got, 0);
		if (more <= 0) {
			*closed = more == 0;
			break;
		}
		got += (size_t)more;
	}
	close(fd);
	f8_tcp_store_header header;
	if (got < F8_TCP_STORE_HEADER || !f8_tcp_store_header_read(reply, &header))
		return -1;
	size_t length = got - F8_TCP_STORE_HEADER < size - 1 ? got - F8_TCP_STORE_HEADER : size - 1;
	memcpy(text, reply + F8_TCP_STORE_HEADER, length);
	text[length] = 0;
	return header.kind;
}

/* A request's bytes made by hand: the header, then the key, then the value. */
static size_t make_request(uint8_t *out, f8_tcp_store_op op, const char *key, const void *value,
			   uint32_t value_bytes, int64_t number) {
	uint32_t key_bytes = (uint32_t)strlen(key);
	f8_tcp_store_header_write(out, &(f8_tcp_store_header){.kind = (uint8_t)op,
							      .key_bytes = key_bytes,
							      .value_bytes = value_bytes,
							      .number = number});
	memcpy(out + F8_TCP_STORE_HEADER, key, key_bytes);
	memcpy(out + F8_TCP_STORE_HEADER + key_bytes, value, value_bytes);
	return F8_TCP_STORE_HEADER + key_bytes + value_bytes;
}

/* What does not parse, and hellos that do not fit, refused; the store serves on. */
static void test_refusals(int port) {
	char text[256];
	bool closed;
	const char garbage[] = "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
	CHECK(raw_request(port, garbage, sizeof garbage - 1, false, text, sizeof text, &closed) ==
	      F8_TCP_STORE_ANSWER_REFUSED);
	CHECK(strstr(text, "f8s1") != NULL && closed);
	uint8_t request[F8_TCP_STORE_HEADER + 64];
	// A set before the hello.
	size_t n = make_request(request, F8_TCP_STORE_OP_SET, "key", "v", 1, 0);
	CHECK(raw_request(port, request, n, false, text, sizeof text, &closed) ==
	      F8_TCP_STORE_ANSWER_REFUSED);
	CHECK(strstr(text, "before the hello") != NULL && closed);
	// A value past the limit: refused from the header, before anything is allocated.
	n = make_request(request, F8_TCP_STORE_OP_SET, "key", "", 0, 0);
	request[12] = request[13] = request[14] = request[15] = 0xff;
	CHECK(raw_request(port, request, n, false, text, sizeof text, &closed) ==
	      F8_TCP_STORE_ANSWER_REFUSED);
	CHECK(strstr(text, "limits") != NULL && closed);
	// An operation that does not exist.
	n = make_request(request, (f8_tcp_store_op)99, "", "", 0, 0);
	CHECK(raw_request(port, request, n, false, text, sizeof text, &closed) ==
	      F8_TCP_STORE_ANSWER_REFUSED);
	CHECK(strstr(text, "unknown operation") != NULL);
	// A second rank 1, and a rank of another world.
	uint8_t world[8];
	f8_tcp_store_put_u64(world, RANKS);
	n = make_request(request, F8_TCP_STORE_OP_HELLO, "", world, 8, 1);
	CHECK(raw_request(port, request, n, false, text, sizeof text, &closed) ==
	      F8_TCP_STORE_ANSWER_REFUSED);
	CHECK(strstr(text, "rank 1 joined twice") != NULL);
	f8_tcp_store_put_u64(world, 7);
	n = make_request(request, F8_TCP_STORE_OP_HELLO, "", world, 8, 5);
	CHECK(raw_request(port, request, n, false, text, sizeof text, &closed) ==
	      F8_TCP_STORE_ANSWER_REFUSED);
	CHECK(strstr(text, "world of 7") != NULL);
	// Half a header, then gone.
	CHECK(raw_request(port, "f8s1", 4, false, text, sizeof text, &closed) == -1);
	// Random requests: the magic, then random bytes (an operation, lengths up to 64 and what
	// follows, cut anywhere). Each is refused or left unfinished, and the client hangs up.
	uint64_t state = (uint64_t)time(NULL);
	printf("random requests' seed %llu\n", (unsigned long long)state);
	for (int i = 0; i < 200; i++) {
		uint8_t random_bytes[96];
		for (size_t b = 0; b < sizeof random_bytes; b++) {
			state = state * 6364136223846793005u + 1442695040888963407u;
			random_bytes[b] = (uint8_t)(state >> 56);
		}
		memcpy(random_bytes, f8_tcp_store_magic, 4);
		random_bytes[4] %= F8_TCP_STORE_OP_COUNT + 2;
		if (i % 2) // well-formed zero bytes and lengths that fit, half of the time
			random_bytes[5] = random_bytes[6] = random_bytes[7] = 0,
			random_bytes[8] %= 64, random_bytes[12] %= 64,
			memset(random_bytes + 9, 0, 3), memset(random_bytes + 13, 0, 3);
		size_t n_random = F8_TCP_STORE_HEADER + random_bytes[20] % 72;
		raw_request(port, random_bytes, n_random, true, text, sizeof text, &closed);
	}
}

/* Whether a failed exchange's message names rank 2 as missing: alone, or after rank 1 where
 * the machine held rank 1 back past the timeout too. */
static bool missing_two(const char *message) {
	return strstr(message, "the ranks that had not arrived: 2") ||
	       strstr(message, "the ranks that had not arrived: 1, 2");
}

/* One rank of three: everything but the four-rank groups. */
static void run_rank(int64_t rank, int port) {
	set_torchrun(rank, RANKS, port);
	f8_dist_launch launch;
	f8_diag diag = {0};
	f8_dist *dist = NULL;
	CHECK(f8_dist_launch_from_environment(&launch, &diag) == F8_OK && launch.store);
	launch.timeout = 20;
	if (rank == 0) // the others' connections are retried until the server starts
		sleep_seconds(0.3);
	uint32_t mesh[F8_MESH_AXIS_COUNT] = {[F8_MESH_AXIS_DP] = RANKS};
	f8_status status = f8_dist_create(&launch, mesh, &dist, &diag);
	CHECK(status == F8_OK);
	if (status) {
		f8_diag_print(&diag, stdout);
		return;
	}
	f8_tcp_store *store = f8_dist_store(dist);
	CHECK(store != NULL);
	const uint32_t world = F8_DIST_GROUPS - 1, dp = 1u << F8_MESH_AXIS_DP;

	// Set, and gets that wait for the others' sets.
	char key[32], mine[32];
	snprintf(key, sizeof key, "value/%lld", (long long)rank);
	snprintf(mine, sizeof mine, "rank %lld", (long long)rank);
	CHECK(f8_tcp_store_set(store, key, mine, strlen(mine), &diag) == F8_OK);
	for (int64_t r = 0; r < RANKS; r++) {
		char expected[32];
		void *value = NULL;
		size_t bytes = 0;
		snprintf(key, sizeof key, "value/%lld", (long long)r);
		snprintf(expected, sizeof expected, "rank %lld", (long long)r);
		CHECK(f8_tcp_store_get(store, key, &value, &bytes, NULL, &diag) == F8_OK);
		CHECK(bytes == strlen(expected) && value && !memcmp(value, expected, bytes));
		f8_free(value);
	}
	bool exists = false;
	CHECK(f8_tcp_store_check(store, "value/0", &exists, &diag) == F8_OK && exists);
	CHECK(f8_tcp_store_check(store, "nothing", &exists, &diag) == F8_OK && !exists);

	// Add, read back after the barrier.
	int64_t total = 0;
	CHECK(f8_tcp_store_add(store, "counter", rank + 1, &total, &diag) == F8_OK);
	CHECK(total >= rank + 1 && total <= 6);
	CHECK(f8_dist_barrier(dist, &diag) == F8_OK);
	CHECK(f8_tcp_store_add(store, "counter", 0, &total, &diag) == F8_OK && total == 6);

	// All-reduces (f64 and f32 sums, i64 max), an all-gather, the broadcast.
	double sums[2] = {(double)rank, 0.25};
	CHECK(f8_dist_all_reduce(dist, dp, sums, 2, F8_DTYPE_F64, F8_REDUCTION_SUM, &diag) == F8_OK);
	CHECK(sums[0] == 3.0 && sums[1] == 0.75);
	float single = 0.5f * (float)rank;
	CHECK(f8_dist_all_reduce(dist, world, &single, 1, F8_DTYPE_F32, F8_REDUCTION_SUM, &diag) ==
	      F8_OK);
	CHECK(single == 1.5f);
	int64_t biggest[2] = {7 * rank, -rank};
	CHECK(f8_dist_all_reduce(dist, world, biggest, 2, F8_DTYPE_I64, F8_REDUCTION_MAX, &diag) ==
	      F8_OK);
	CHECK(biggest[0] == 14 && biggest[1] == 0);
	CHECK(f8_dist_all_reduce(dist, world, &single, 1, F8_DTYPE_BF16, F8_REDUCTION_SUM, &diag) ==
	      F8_ERR_UNSUPPORTED);
	int32_t pair[2] = {(int32_t)rank, (int32_t)(100 + rank)}, all[2 * RANKS] = {0};
	CHECK(f8_dist_all_gather(dist, dp, pair, all, sizeof pair, &diag) == F8_OK);
	for (int r = 0; r < RANKS; r++)
		CHECK(all[2 * r] == r && all[2 * r + 1] == 100 + r);
	uint8_t id[128];
	for (int i = 0; i < 128; i++)
		id[i] = (uint8_t)(rank == 0 ? i * 3 : 0);
	CHECK(f8_dist_broadcast(dist, id, sizeof id, "an id", &diag) == F8_OK);
	CHECK(id[0] == 0 && id[1] == 3 && id[127] == (uint8_t)(127 * 3));

	// Agreements: one rank's failure is everyone's.
	f8_status agreed = f8_dist_agree(dist, world, rank == 2 ? F8_ERR_IO : F8_OK, "read its data",
					 &diag);
	CHECK(agreed == F8_ERR_IO);
	if (rank != 2)
		CHECK(strstr(diag.message, "another rank could not read its data") != NULL);
	CHECK(f8_dist_agree(dist, world, F8_OK, "go on", &diag) == F8_OK);

	// The CPU backend's collectives are MPI's.
	CHECK(f8_dist_send(dist, dp, (uint32_t)(rank + 1) % RANKS, 0, mine, 1, &diag) ==
	      F8_ERR_UNSUPPORTED);
	CHECK(strstr(diag.message, "need MPI") != NULL && strstr(diag.hint, "mpirun") != NULL);
	CHECK(f8_dist_ring_shift(dist, dp, mine, key, 1, &diag) == F8_ERR_UNSUPPORTED);
	f8_backend *backend = NULL;
	CHECK(f8_cpu_backend_create_distributed(F8_CPU_KERNELS_REFERENCE, dist, &backend, &diag) ==
	      F8_ERR_UNSUPPORTED);
	CHECK(!backend && strstr(diag.message, "need MPI") != NULL);

	// A get that times out, naming its key.
	CHECK(f8_dist_set_timeout(dist, 0.5, &diag) == F8_OK);
	double start = now_seconds();
	void *value = NULL;
	size_t bytes = 0;
	CHECK(f8_tcp_store_get(store, "never/set", &value, &bytes, NULL, &diag) == F8_ERR_IO);
	double waited = now_seconds() - start;
	CHECK(waited >= 0.45 && waited < 5);
	CHECK(strstr(diag.message, "\"never/set\"") != NULL &&
	      strstr(diag.message, "which no rank set") != NULL);
	CHECK(f8_dist_set_timeout(dist, 20, &diag) == F8_OK);
	CHECK(f8_dist_barrier(dist, &diag) == F8_OK); // the connection serves on

	// Requests that do not parse, and hellos that do not fit; the store serves on.
	if (rank == 0)
		test_refusals(port);
	CHECK(f8_dist_barrier(dist, &diag) == F8_OK);
	// (Longer than the get's: ranks 0 and 1 must both arrive within it on a loaded machine.)
	CHECK(f8_dist_set_timeout(dist, 1.5, &diag) == F8_OK);

	// Rank 2 skips a barrier: the others' fails at the timeout, naming it.
	if (rank != 2) {
		start = now_seconds();
		CHECK(f8_dist_barrier(dist, &diag) == F8_ERR_IO);
		waited = now_seconds() - start;
		CHECK(waited >= 1.4 && waited < 8);
		CHECK(strstr(diag.message, "a barrier over group dp (3 ranks) failed") != NULL);
		CHECK(missing_two(diag.message));
		if (!missing_two(diag.message))
			printf("rank %lld: %s\n", (long long)rank, diag.message);
		snprintf(key, sizeof key, "failed/%lld", (long long)rank);
		CHECK(f8_tcp_store_set(store, key, "", 0, &diag) == F8_OK);
	} else {
		// Then it dies, without goodbye, once the others' barrier has failed.
		CHECK(f8_dist_set_timeout(dist, 20, &diag) == F8_OK);
		for (int r = 0; r < 2; r++) {
			snprintf(key, sizeof key, "failed/%d", r);
			CHECK(f8_tcp_store_get(store, key, &value, &bytes, NULL, &diag) == F8_OK);
			f8_free(value);
		}
		int code = test_finish();
		fflush(stdout);
		_exit(code);
	}
	// The others' next barrier fails as soon as it is gone, naming it.
	CHECK(f8_dist_set_timeout(dist, 20, &diag) == F8_OK);
	start = now_seconds();
	CHECK(f8_dist_barrier(dist, &diag) == F8_ERR_IO);
	CHECK(now_seconds() - start < 10);
	CHECK(strstr(diag.message, "rank 2 left the run") != NULL);
	if (!strstr(diag.message, "rank 2 left the run"))
		printf("rank %lld: %s\n", (long long)rank, diag.message);
	start = now_seconds();
	f8_dist_destroy(dist); // rank 0's server waits for rank 1's goodbye, not for the timeout
	CHECK(now_seconds() - start < 10);
}

/* One rank of four on a TP 2 x DP 2 mesh: each group's all-reduce its own. */
static void run_group_rank(int64_t rank, int port) {
	set_torchrun(rank, 4, port);
	f8_dist_launch launch;
	f8_diag diag = {0};
	f8_dist *dist = NULL;
	CHECK(f8_dist_launch_from_environment(&launch, &diag) == F8_OK);
	launch.timeout = 20;
	uint32_t mesh[F8_MESH_AXIS_COUNT] = {[F8_MESH_AXIS_TP] = 2, [F8_MESH_AXIS_DP] = 2};
	if (f8_dist_create(&launch, mesh, &dist, &diag)) {
		CHECK(!"f8_dist_create");
		f8_diag_print(&diag, stdout);
		return;
	}
	const uint32_t tp = 1u << F8_MESH_AXIS_TP, dp = 1u << F8_MESH_AXIS_DP;
	for (int round = 0; round < 3; round++) { // the rounds' keys come and go
		int64_t over_tp = rank, over_dp = rank, over_both = rank;
		CHECK(f8_dist_all_reduce(dist, tp, &over_tp, 1, F8_DTYPE_I64, F8_REDUCTION_SUM,
					 &diag) == F8_OK);
		CHECK(f8_dist_all_reduce(dist, dp, &over_dp, 1, F8_DTYPE_I64, F8_REDUCTION_SUM,
					 &diag) == F8_OK);
		CHECK(f8_dist_all_reduce(dist, tp | dp, &over_both, 1, F8_DTYPE_I64,
					 F8_REDUCTION_SUM, &diag) == F8_OK);
		// TP pairs {0, 1} and {2, 3}; DP pairs {0, 2} and {1, 3}.
		CHECK(over_tp == (rank < 2 ? 1 : 5));
		CHECK(over_dp == (rank % 2 ? 4 : 2));
		CHECK(over_both == 6);
	}
	f8_dist_destroy(dist);
}

/* Ranks 0 and 1 of three, rank 2 never started: their start fails at the timeout, naming it. */
static void run_join_rank(int64_t rank, int port) {
	set_torchrun(rank, RANKS, port);
	f8_dist_launch launch;
	f8_diag diag = {0};
	f8_dist *dist = NULL;
	CHECK(f8_dist_launch_from_environment(&launch, &diag) == F8_OK);
	// 3 s: on a loaded machine rank 1 may reach the store a second after rank 0 began to wait.
	launch.timeout = 3;
	uint32_t mesh[F8_MESH_AXIS_COUNT] = {[F8_MESH_AXIS_DP] = RANKS};
	CHECK(f8_dist_create(&launch, mesh, &dist, &diag) == F8_ERR_IO && !dist);
	// Rank 0 names rank 2; rank 1 may instead find rank 0's store closed when rank 0 gave up
	// first.
	CHECK(rank != 0 || missing_two(diag.message));
}

/* Forks `ranks` processes running `body`; true when every one exits 0 in time. */
static bool run_ranks(int ranks, void (*body)(int64_t, int)) {
	int port = free_port();
	CHECK(port > 0);
	pid_t children[8];
	fflush(stdout);
	for (int r = 0; r < ranks; r++) {
		children[r] = fork();
		if (children[r] == 0) {
			test_passed = test_failed = 0; // the rank's own tally
			body(r, port);
			exit(test_finish()); // with the sanitizers' leak check
		}
	}
	bool passed = true;
	double deadline = now_seconds() + SECONDS_MAX;
	for (int r = 0; r < ranks; r++) {
		int status = 0;
		while (waitpid(children[r], &status, WNOHANG) == 0 && now_seconds() < deadline)
			sleep_seconds(0.02);
		if (now_seconds() >= deadline) {
			printf("rank %d did not finish in %d s\n", r, SECONDS_MAX);
			kill(children[r], SIGKILL);
			waitpid(children[r], &status, 0);
			passed = false;
			continue;
		}
		if (!WIFEXITED(status) || WEXITSTATUS(status)) {
			printf("rank %d failed (status %d)\n", r, status);
			passed = false;
		}
	}
	return passed;
}

/* A rank whose rank 0 never comes: it stops at the timeout, saying where it tried. */
static void test_no_server(void) {
	int port = free_port();
	set_torchrun(1, 2, port);
	f8_dist_launch launch;
	f8_diag diag = {0};
	f8_dist *dist = NULL;
	CHECK(f8_dist_launch_from_environment(&launch, &diag) == F8_OK);
	launch.timeout = 0.5;
	uint32_t mesh[F8_MESH_AXIS_COUNT] = {[F8_MESH_AXIS_DP] = 2};
	double start = now_seconds();
	CHECK(f8_dist_create(&launch, mesh, &dist, &diag) == F8_ERR_IO && !dist);
	CHECK(now_seconds() - start < 5);
	char where[64];
	snprintf(where, sizeof where, "cannot reach the store at 127.0.0.1:%d", port);
	CHECK(strstr(diag.message, where) != NULL);
	CHECK(strstr(diag.message, "tried 127.0.0.1 (Connection refused)") != NULL);
	printf("%s\n", diag.message);
	clear_launch();
}

/* A socket listening on 127.0.0.1, the kernel's port into *port; `receive_buffer` (0: the
 * default) is inherited by the connections it accepts. */
static int listen_local(int backlog, int receive_buffer, int *port) {
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in address = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
	socklen_t length = sizeof address;
	if (fd >= 0 && receive_buffer)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
	if (fd < 0 || bind(fd, (struct sockaddr *)&address, sizeof address) ||
	    listen(fd, backlog) || getsockname(fd, (struct sockaddr *)&address, &length)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	*port = ntohs(address.sin_port);
	return fd;
}

/*
 * Rank 1 of two, made by hand with a small receive buffer, asks for a value larger than the
 * sockets' buffers and never reads the reply. The server serves rank 0 meanwhile, then drops
 * rank 1 at the timeout: rank 0's wait fails as soon as that, naming rank 1 and the reply it
 * left unread (not at its own timeout as a key nobody set).
 */
static void test_stalled_client(void) {
	int port = free_port();
	f8_tcp_store_options options = {.host = "127.0.0.1", .port = (uint16_t)port, .rank = 0,
					.world = 2, .serve = true, .timeout = 1};
	f8_tcp_store *store = NULL;
	f8_diag diag = {0};
	CHECK(f8_tcp_store_create(&options, &store, &diag) == F8_OK);
	uint8_t *big = calloc(BIG, 1);
	CHECK(store && big && f8_tcp_store_set(store, "big", big, BIG, &diag) == F8_OK);
	struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				      .sin_addr.s_addr = htonl(0x7f000001)};
	// A client that sends half a header and no more is dropped at the timeout too.
	int half = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(!connect(half, (struct sockaddr *)&address, sizeof address));
	CHECK(send(half, "f8s1", 4, MSG_NOSIGNAL) == 4);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	int small = SMALL_BUFFER;
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
	CHECK(!connect(fd, (struct sockaddr *)&address, sizeof address));
	uint8_t request[F8_TCP_STORE_HEADER + 16], world[8];
	f8_tcp_store_put_u64(world, 2);
	size_t n = make_request(request, F8_TCP_STORE_OP_HELLO, "", world, 8, 1);
	CHECK(send(fd, request, n, MSG_NOSIGNAL) == (ssize_t)n);
	n = make_request(request, F8_TCP_STORE_OP_GET, "big", "", 0, 0);
	double stalled = now_seconds();
	CHECK(send(fd, request, n, MSG_NOSIGNAL) == (ssize_t)n);
	// Rank 0 is served while rank 1's reply waits.
	int64_t total = 0;
	for (int i = 0; i < 5; i++)
		CHECK(f8_tcp_store_add(store, "counter", 1, &total, &diag) == F8_OK && total == i + 1);
	// Before the timeout, so before rank 1 is dropped: a server that waited on rank 1's reply
	// until it dropped it would answer them only then, and pass everything below.
	double adds = now_seconds() - stalled;
	printf("rank 0's adds beside the stalled reply: %.3f s\n", adds);
	CHECK(adds < 0.9);
	// Rank 0's wait ends half a second after rank 1's is dropped: not a race of two deadlines.
	double later = stalled + 0.5 - now_seconds();
	if (later > 0)
		sleep_seconds(later);
	void *value = NULL;
	size_t bytes = 0;
	int64_t departed = -1;
	CHECK(f8_tcp_store_get(store, "never/set", &value, &bytes, &departed, &diag) == F8_ERR_IO);
	double waited = now_seconds() - stalled;
	printf("rank 1 dropped after %.3f s: %s\n", waited, diag.message);
	CHECK(departed == 1 && waited >= 0.9 && waited < 6);
	CHECK(strstr(diag.message, "rank 1 left the run") != NULL);
	CHECK(strstr(diag.message, "reply to its get of \"big\" were still unread after 1 s") !=
	      NULL);
	struct pollfd p = {.fd = half, .events = POLLIN};
	char byte;
	CHECK(poll(&p, 1, 5000) == 1 && recv(half, &byte, 1, 0) == 0);
	close(half);
	close(fd);
	free(big);
	f8_tcp_store_destroy(store);
}

/*
 * A client that sends its next request while the reply to the last one, larger than the
 * sockets' buffers, is still going out: the server refuses it, but only after that reply, which
 * arrives whole (a refusal queued over its rest would splice its header into the value).
 */
static void test_request_during_reply(void) {
	int port = free_port();
	f8_tcp_store_options options = {.host = "127.0.0.1", .port = (uint16_t)port, .rank = 0,
					.world = 2, .serve = true, .timeout = 10};
	f8_tcp_store *store = NULL;
	f8_diag diag = {0};
	CHECK(f8_tcp_store_create(&options, &store, &diag) == F8_OK);
	uint8_t *big = malloc(BIG), *got = malloc(F8_TCP_STORE_HEADER + BIG + 4096);
	CHECK(big && got);
	if (!store || !big || !got) {
		free(big), free(got);
		f8_tcp_store_destroy(store);
		return;
	}
	memset(big, 0xab, BIG);
	CHECK(f8_tcp_store_set(store, "big", big, BIG, &diag) == F8_OK);
	struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				      .sin_addr.s_addr = htonl(0x7f000001)};
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	int small = SMALL_BUFFER;
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
	CHECK(!connect(fd, (struct sockaddr *)&address, sizeof address));
	uint8_t request[2 * (F8_TCP_STORE_HEADER + 16)], world[8];
	f8_tcp_store_put_u64(world, 2);
	size_t n = make_request(request, F8_TCP_STORE_OP_HELLO, "", world, 8, 1);
	CHECK(send(fd, request, n, MSG_NOSIGNAL) == (ssize_t)n);
	CHECK(recv(fd, got, F8_TCP_STORE_HEADER, MSG_WAITALL) == F8_TCP_STORE_HEADER);
	// The get and a check behind it in one send: the server reads the check while the get's
	// reply fills the sockets.
	n = make_request(request, F8_TCP_STORE_OP_GET, "big", "", 0, 0);
	n += make_request(request + n, F8_TCP_STORE_OP_CHECK, "big", "", 0, 0);
	CHECK(send(fd, request, n, MSG_NOSIGNAL) == (ssize_t)n);
	size_t total = 0, room = F8_TCP_STORE_HEADER + BIG + 4096;
	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		ssize_t more = poll(&p, 1, 5000) == 1 ? recv(fd, got + total, room - total, 0) : -1;
		if (more <= 0)
			break;
		total += (size_t)more;
	}
	f8_tcp_store_header header = {0};
	CHECK(total >= F8_TCP_STORE_HEADER && f8_tcp_store_header_read(got, &header) &&
	      header.kind == F8_TCP_STORE_ANSWER_OK && header.value_bytes == BIG);
	bool whole = total >= 2 * F8_TCP_STORE_HEADER + BIG &&
		     memcmp(got + F8_TCP_STORE_HEADER, big, BIG) == 0;
	printf("the get's reply with a request behind it: %zu bytes, %s\n", total,
	       whole ? "whole" : "cut");
	CHECK(whole);
	CHECK(whole && f8_tcp_store_header_read(got + F8_TCP_STORE_HEADER + BIG, &header) &&
	      header.kind == F8_TCP_STORE_ANSWER_REFUSED);
	close(fd);
	free(big);
	free(got);
	f8_tcp_store_destroy(store);
}

/* The store's side of a connection made by hand: it answers the hello, then reads no more. */
typedef struct deaf_server {
	int listener, fd;
} deaf_server;

static void *serve_deaf(void *argument) {
	deaf_server *server = argument;
	struct pollfd p = {.fd = server->listener, .events = POLLIN};
	if (poll(&p, 1, 10000) != 1 || (server->fd = accept(server->listener, NULL, NULL)) < 0)
		return NULL;
	uint8_t hello[F8_TCP_STORE_HEADER + 8], reply[F8_TCP_STORE_HEADER];
	size_t got = 0;
	while (got < sizeof hello) {
		p = (struct pollfd){.fd = server->fd, .events = POLLIN};
		ssize_t more = poll(&p, 1, 10000) == 1 ? recv(server->fd, hello + got,
							     sizeof hello - got, 0) : -1;
		if (more <= 0)
			return NULL;
		got += (size_t)more;
	}
	f8_tcp_store_header_write(reply, &(f8_tcp_store_header){.kind = F8_TCP_STORE_ANSWER_OK});
	send(server->fd, reply, sizeof reply, MSG_NOSIGNAL);
	return NULL;
}

/* A server that answers the hello and then stops reading: the client's set of a value larger
 * than the sockets' buffers fails at the timeout, naming the set, its key and the store. */
static void test_stalled_server(void) {
	deaf_server server = {.fd = -1};
	int port = 0;
	server.listener = listen_local(1, SMALL_BUFFER, &port);
	CHECK(server.listener >= 0);
	pthread_t thread;
	CHECK(!pthread_create(&thread, NULL, serve_deaf, &server));
	f8_tcp_store_options options = {.host = "127.0.0.1", .port = (uint16_t)port, .rank = 1,
					.world = 2, .timeout = 1};
	f8_tcp_store *store = NULL;
	f8_diag diag = {0};
	CHECK(f8_tcp_store_create(&options, &store, &diag) == F8_OK);
	pthread_join(thread, NULL);
	uint8_t *big = calloc(BIG, 1);
	double start = now_seconds();
	CHECK(store && big && f8_tcp_store_set(store, "big", big, BIG, &diag) == F8_ERR_IO);
	double waited = now_seconds() - start;
	printf("the set to a deaf server failed after %.3f s: %s\n", waited, diag.message);
	CHECK(waited >= 0.9 && waited < 6);
	char where[80];
	snprintf(where, sizeof where, "the store at 127.0.0.1:%d: its set of \"big\"", port);
	CHECK(strstr(diag.message, where) != NULL);
	CHECK(strstr(diag.message, "could not be sent in 1 s") != NULL);
	free(big);
	f8_tcp_store_destroy(store);
	if (server.fd >= 0)
		close(server.fd);
	close(server.listener);
}

/* Whether the option `name` at `level` of socket `fd` is `value`. */
static bool option_is(int fd, int level, int name, int value) {
	int got = -1;
	socklen_t length = sizeof got;
	return !getsockopt(fd, level, name, &got, &length) && got == value;
}

/* Both ends of rank 0's connection to its own server, found among this process's sockets by
 * their ports: keepalive (with its timing, where the system has it), TCP_NODELAY. */
static void test_keepalive(void) {
	int port = free_port();
	f8_tcp_store_options options = {.host = "127.0.0.1", .port = (uint16_t)port, .rank = 0,
					.world = 1, .serve = true, .timeout = 5};
	f8_tcp_store *store = NULL;
	f8_diag diag = {0};
	CHECK(f8_tcp_store_create(&options, &store, &diag) == F8_OK);
	int accepted = 0, connected = 0;
	for (int fd = 0; fd < 1024; fd++) {
		struct sockaddr_in local, peer;
		socklen_t local_length = sizeof local, peer_length = sizeof peer;
		// Listening sockets have no peer, and the IPv6 listener's address is longer.
		if (getsockname(fd, (struct sockaddr *)&local, &local_length) ||
		    local_length != sizeof local || local.sin_family != AF_INET ||
		    getpeername(fd, (struct sockaddr *)&peer, &peer_length))
			continue;
		bool served = ntohs(local.sin_port) == port, client = ntohs(peer.sin_port) == port;
		if (!served && !client)
			continue;
		accepted += served, connected += client;
		CHECK(option_is(fd, SOL_SOCKET, SO_KEEPALIVE, 1));
		CHECK(option_is(fd, IPPROTO_TCP, TCP_NODELAY, 1));
#if defined(TCP_KEEPIDLE) && defined(TCP_KEEPINTVL) && defined(TCP_KEEPCNT)
		CHECK(option_is(fd, IPPROTO_TCP, TCP_KEEPIDLE, 60));
		CHECK(option_is(fd, IPPROTO_TCP, TCP_KEEPINTVL, 10));
		CHECK(option_is(fd, IPPROTO_TCP, TCP_KEEPCNT, 6));
#endif
	}
	CHECK(accepted == 1 && connected == 1);
	f8_tcp_store_destroy(store);
}

/*
 * The server's thread failing (its poll refused: more descriptors than the process may have, by
 * a limit lowered under it): the store's clients are told at once, by their connections' end,
 * not at their requests' timeout (30 s here; 5 s allowed). In a process of its own
 * (run_apart): the limit.
 */
static void test_server_failure(void) {
	int port = free_port();
	f8_tcp_store_options options = {.host = "127.0.0.1", .port = (uint16_t)port, .rank = 0,
					.world = 1, .serve = true, .timeout = 30};
	f8_tcp_store *store = NULL;
	f8_diag diag = {0};
	CHECK(f8_tcp_store_create(&options, &store, &diag) == F8_OK);
	int64_t total = 0;
	CHECK(store && f8_tcp_store_add(store, "counter", 1, &total, &diag) == F8_OK && total == 1);
	// Fewer than the listeners, the wake pipe and the connection the server polls: its next
	// poll fails (EINVAL).
	struct rlimit limit;
	CHECK(!getrlimit(RLIMIT_NOFILE, &limit));
	struct rlimit low = {.rlim_cur = 2, .rlim_max = limit.rlim_max};
	CHECK(!setrlimit(RLIMIT_NOFILE, &low));
	// Requests until one fails: those the server takes before its next poll (it reads what
	// came while it answered) are answered; the first after fails at once.
	double start = now_seconds(), waited = 0;
	f8_status status = F8_OK;
	int answered = 0;
	while (!status && waited < 5) {
		status = f8_tcp_store_add(store, "counter", 1, &total, &diag);
		answered += !status;
		waited = now_seconds() - start;
	}
	CHECK(!setrlimit(RLIMIT_NOFILE, &limit));
	printf("the server's thread failed: %d requests answered, then %s after %.3f s: %s\n",
	       answered, status ? "refused" : "none refused", waited, status ? diag.message : "");
	CHECK(status == F8_ERR_IO && waited < 5);
	f8_tcp_store_destroy(store);
}

/* 127.0.0.1:`port`, as getaddrinfo gives an address: into *entry, *address its storage. */
static void local_entry(int port, struct sockaddr_in *address, struct addrinfo *entry,
			struct addrinfo *next) {
	*address = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
					.sin_addr.s_addr = htonl(0x7f000001)};
	*entry = (struct addrinfo){.ai_family = AF_INET, .ai_socktype = SOCK_STREAM,
				   .ai_addrlen = sizeof *address,
				   .ai_addr = (struct sockaddr *)address, .ai_next = next};
}

/* The connect over addresses that fail in chosen ways, through f8_tcp_store_dial's own list. */
static void test_connect_list(void) {
	// A listener whose backlog (0: one connection) is full swallows the SYNs after: fill it
	// until a connect hangs.
	int good_port = 0, hole_port = 0, fillers[8], n_fillers = 0;
	int good = listen_local(8, 0, &good_port), hole = listen_local(0, 0, &hole_port);
	CHECK(good >= 0 && hole >= 0);
	struct sockaddr_in good_address, hole_address, refused_address;
	struct addrinfo good_entry, hole_entry, refused_entry;
	local_entry(good_port, &good_address, &good_entry, NULL);
	local_entry(hole_port, &hole_address, &hole_entry, &good_entry);
	bool swallows = false;
	while (!swallows && n_fillers < 8) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
		fillers[n_fillers++] = fd;
		struct pollfd p = {.fd = fd, .events = POLLOUT};
		swallows = connect(fd, (struct sockaddr *)&hole_address, sizeof hole_address) &&
			   poll(&p, 1, 200) == 0;
	}
	if (!swallows)
		printf("a full backlog does not swallow SYNs here: the first address refuses\n");
	char why[600];
	double start = now_seconds();
	int fd = f8_tcp_store_dial("hole-then-good", 0, start + 1, &hole_entry, why, sizeof why);
	double took = now_seconds() - start;
	printf("past an address that swallows SYNs in %.3f s\n", took);
	CHECK(fd >= 0 && took < 1);
	if (fd >= 0)
		close(fd);
	// A refusal, then the working address: at once.
	local_entry(free_port(), &refused_address, &refused_entry, &good_entry);
	start = now_seconds();
	fd = f8_tcp_store_dial("refused-then-good", 0, start + 1, &refused_entry, why, sizeof why);
	CHECK(fd >= 0 && now_seconds() - start < 1);
	if (fd >= 0)
		close(fd);
	// Nothing answers: the deadline, the addresses and how each failed.
	refused_entry.ai_next = &hole_entry, hole_entry.ai_next = NULL;
	start = now_seconds();
	fd = f8_tcp_store_dial("none", 0, start + 0.6, &refused_entry, why, sizeof why);
	took = now_seconds() - start;
	printf("no address answered in %.3f s: %s\n", took, why);
	CHECK(fd < 0 && took >= 0.55 && took < 3);
	CHECK(strstr(why, "tried 127.0.0.1 (Connection refused), 127.0.0.1 (") != NULL);
	CHECK(!swallows || strstr(why, "(no answer in ") != NULL);
	for (int i = 0; i < n_fillers; i++)
		close(fillers[i]);
	close(hole);
	close(good);
}

/* Runs `body` in a process of its own, beside what this one does next (the tests that wait
 * for a timeout overlap): its pid, for finish_apart. */
static pid_t run_apart(void (*body)(void)) {
	fflush(stdout);
	pid_t child = fork();
	if (child == 0) {
		test_passed = test_failed = 0;
		body();
		exit(test_finish());
	}
	return child;
}

/* Whether the process of run_apart exited 0. */
static bool finish_apart(pid_t child) {
	int status = 0;
	return child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) &&
	       WEXITSTATUS(status) == 0;
}

int main(void) {
	size_big();
	test_launch();
	test_keepalive();
	pid_t stalled_server = run_apart(test_stalled_server);
	CHECK(finish_apart(run_apart(test_server_failure)));
	test_stalled_client();
	test_connect_list();
	test_request_during_reply();
	CHECK(finish_apart(stalled_server));
	test_no_server();
	CHECK(run_ranks(2, run_join_rank));
	CHECK(run_ranks(RANKS, run_rank));
	CHECK(run_ranks(4, run_group_rank));
	return test_finish();
}
