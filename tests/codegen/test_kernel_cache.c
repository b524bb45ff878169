/*
 * The host kernels' cache (codegen/kernel_cache.h) through the host JIT and the CPU backend's
 * generated kernels, in a fresh folder under $TMPDIR (or /tmp):
 *   - a first JIT compiles and stores one entry (the folders above it made); a second of the
 *     same kernels links it (f8_host_jit_cached), and another kernel is another entry;
 *   - kernels from the cache compute what kernels compiled afresh compute, bit for bit
 *     (GeluGrad of random f32 inputs through f8_cpu_generated_run_tensors);
 *   - an entry with a flipped byte, cut short, or another key's is a miss, compiled again and
 *     rewritten, and the next JIT links it; a folder that is a file leaves the JIT uncached;
 *   - a process that finds another holding the entry's lock waits, then links what the other
 *     stored instead of compiling;
 *   - trimming removes the least recently used entries, with their locks, until the folder is
 *     under three quarters of its limit, and dead writers' temporary files, and nothing that is
 *     not the cache's; a folder that others may write into is not used.
 *   - f8_nvptx_compile through the same cache: an entry per kernel, the same PTX and launch
 *     geometry as without a cache, a second compile takes the entries as they are (their files
 *     not written again), a damaged one is compiled and rewritten;
 * The seed comes from the clock and is printed; F8_TEST_SEED=N repeats a run.
 *
 * usage: test_kernel_cache
 */
#define _GNU_SOURCE // mkdtemp, rand_r

#include <dirent.h>   // opendir, readdir
#include <fcntl.h>    // open, O_RDWR
#include <stdio.h>    // printf, snprintf, fopen
#include <stdlib.h>   // mkdtemp, getenv, rand_r, strtoul
#include <string.h>   // memcmp, strlen, strcmp
#include <sys/file.h> // flock
#include <sys/stat.h> // stat, utimensat
#include <sys/wait.h> // waitpid
#include <time.h>     // time, nanosleep
#include <unistd.h>   // fork, unlink, rmdir

#include "codegen/host_jit.h"      // f8_host_jit_create, f8_host_jit_cached
#include "codegen/kernel_cache.h"  // f8_kernel_cache_trim
#include "codegen/nvptx.h"         // f8_nvptx_compile
#include "codegen/program.h"       // f8_codegen_program_create
#include "ir/alloc.h"              // f8_free
#include "runtime/cpu/generated.h" // f8_cpu_generated_create, f8_cpu_generated_run_tensors
#include "runtime/tensor.h"        // f8_rt_tensor
#include "tests/test_support.h"    // CHECK, test_finish
#include "tests/codegen/one_group.h" // test_one_group

static unsigned seed;

static const char gelu_grad[] = "graph g {\n  input %x : f32[n]\n  input %dy : f32[n]\n"
				"  %dx = GeluGrad(%dy, %x)\n  output %dx\n}\n";
static const char tanh_bf16[] = "graph t {\n  input %x : bf16[n]\n  %y = Tanh(%x)\n"
				"  output %y\n}\n";

/* The kernels of `text` made one group of `family`; the program, or NULL (counted as a
 * failure). */
static f8_codegen_program *program_of(const char *text, f8_kernel_family family,
				       f8_graph **graph) {
	uint32_t group;
	*graph = test_one_group("test_kernel_cache", text, family, &group);
	if (!*graph)
		return NULL;
	f8_codegen_program *program = NULL;
	f8_diag diag = {0};
	f8_status status = f8_codegen_program_create(*graph, &program, &diag);
	if (status)
		f8_diag_print(&diag, stdout);
	CHECK(status == F8_OK);
	return program;
}

/* A JIT of `program`'s kernels through `folder`: 1 when linked from the cache, 0 when
 * compiled, -1 when it failed. */
static int jit_of(const f8_codegen_program *program, const char *folder) {
	f8_host_jit *jit = NULL;
	f8_diag diag = {0};
	f8_status status = f8_host_jit_create((const f8_kernel *const *)program->kernels,
					      program->n_kernels, folder, &jit, &diag);
	if (status) {
		f8_diag_print(&diag, stdout);
		return -1;
	}
	bool found = true;
	for (uint32_t k = 0; k < program->n_kernels; k++)
		found = found && f8_host_jit_lookup(jit, program->kernels[k]->name);
	CHECK(found);
	int cached = f8_host_jit_cached(jit);
	f8_host_jit_destroy(jit);
	return cached;
}

/* The entries (.o files) in `folder`; the last one's path in `path`. */
static int entries(const char *folder, char *path, size_t size) {
	DIR *directory = opendir(folder);
	int n = 0;
	for (struct dirent *item; directory && (item = readdir(directory));) {
		size_t length = strlen(item->d_name);
		if (length > 2 && !strcmp(item->d_name + length - 2, ".o")) {
			n++;
			if (path)
				snprintf(path, size, "%s/%s", folder, item->d_name);
		}
	}
	if (directory)
		closedir(directory);
	return n;
}

/* An entry of `folder` other than the one at `path`, into `other`; false when none. */
static bool entry_other_than(const char *folder, const char *path, char *other, size_t size) {
	DIR *directory = opendir(folder);
	bool found = false;
	for (struct dirent *item; directory && !found && (item = readdir(directory));) {
		size_t length = strlen(item->d_name);
		if (length > 2 && !strcmp(item->d_name + length - 2, ".o") &&
		    strcmp(path + strlen(path) - length, item->d_name)) {
			snprintf(other, size, "%s/%s", folder, item->d_name);
			found = true;
		}
	}
	if (directory)
		closedir(directory);
	return found;
}

static bool file_exists(const char *path) {
	struct stat info;
	return !stat(path, &info);
}

static bool write_file(const char *path, const void *data, size_t size) {
	FILE *file = fopen(path, "wb");
	bool written = file && fwrite(data, 1, size, file) == size;
	return file && !fclose(file) && written;
}

/* GeluGrad of random inputs through generated kernels compiled without a cache and through the
 * cache (stored, then linked): the same bits. */
static void check_same_results(const char *folder) {
	printf("kernels from the cache compute what fresh ones do\n");
	uint32_t group;
	f8_graph *graph = test_one_group("gelu_grad", gelu_grad, F8_KERNEL_FAMILY_ACTIVATION_GRAD,
					 &group);
	if (!graph)
		return;
	int64_t n = 4099, symbols[1] = {n};
	f8_rt_tensor *tensors = f8_calloc(graph->n_values, sizeof *tensors), outputs[3] = {0};
	const f8_node *node = &graph->nodes[graph->order[0]];
	for (uint32_t i = 0; tensors && i < 3; i++) {
		f8_value_id value = i < 2 ? node->inputs[i] : node->outputs[0];
		CHECK(f8_rt_tensor_create(F8_DTYPE_F32, 1, &n, &tensors[value], NULL) == F8_OK);
	}
	for (int64_t i = 0; tensors && i < n; i++) {
		((float *)tensors[node->inputs[0]].data)[i] = (float)(rand_r(&seed) % 20001 - 10000) / 1500;
		((float *)tensors[node->inputs[1]].data)[i] = (float)(rand_r(&seed) % 2001 - 1000) / 700;
	}
	const char *folders[3] = {NULL, folder, folder}; // none, stored, linked
	for (int run = 0; tensors && run < 3; run++) {
		f8_cpu_generated *generated = NULL;
		f8_diag diag = {0};
		f8_status status = f8_cpu_generated_create(graph, folders[run], &generated, &diag);
		if (!status)
			status = f8_cpu_generated_run_tensors(generated, group, tensors, symbols, &diag);
		if (status)
			f8_diag_print(&diag, stdout);
		CHECK(status == F8_OK);
		const f8_rt_tensor *out = &tensors[node->outputs[0]];
		CHECK(f8_rt_tensor_create(F8_DTYPE_F32, 1, &n, &outputs[run], NULL) == F8_OK);
		if (!status && outputs[run].data)
			memcpy(outputs[run].data, out->data, out->n_bytes);
		f8_cpu_generated_destroy(generated);
	}
	CHECK(entries(folder, NULL, 0) == 1);
	bool same = outputs[0].data && outputs[1].data && outputs[2].data &&
		    !memcmp(outputs[0].data, outputs[1].data, outputs[0].n_bytes) &&
		    !memcmp(outputs[0].data, outputs[2].data, outputs[0].n_bytes);
	CHECK(same);
	for (int i = 0; i < 3; i++)
		f8_rt_tensor_destroy(&outputs[i]);
	for (uint32_t i = 0; tensors && i < graph->n_values; i++)
		f8_rt_tensor_destroy(&tensors[i]);
	f8_free(tensors);
	f8_graph_destroy(graph);
}

/* Stores, links, and misses on damaged entries. */
static void check_entries(const char *folder) {
	printf("an entry stored, linked, and missed when damaged\n");
	f8_graph *graph = NULL, *other_graph = NULL;
	f8_codegen_program *program = program_of(gelu_grad, F8_KERNEL_FAMILY_ACTIVATION_GRAD, &graph);
	f8_codegen_program *other = program_of(tanh_bf16, F8_KERNEL_FAMILY_ELEMENTWISE, &other_graph);
	char path[4096], other_path[4096];
	if (program && other) {
		CHECK(jit_of(program, folder) == 0);
		CHECK(entries(folder, path, sizeof path) == 1);
		CHECK(jit_of(program, folder) == 1);
		CHECK(jit_of(other, folder) == 0); // another kernel, another key
		CHECK(entries(folder, NULL, 0) == 2);
		CHECK(jit_of(other, folder) == 1);
		CHECK(jit_of(program, NULL) == 0); // no folder, no cache
		size_t size = 0;
		char *bytes = test_read_file(path, &size);
		CHECK(bytes && size > 100);
		// A flipped byte of the object, then the header cut short: misses, rewritten.
		for (int damage = 0; bytes && damage < 2; damage++) {
			char *copy = malloc(size);
			memcpy(copy, bytes, size);
			size_t at = 48 + (size_t)rand_r(&seed) % (size - 48);
			copy[at] ^= (char)(1 + rand_r(&seed) % 255);
			CHECK(write_file(path, copy, damage ? 20 : size));
			free(copy);
			CHECK(jit_of(program, folder) == 0);
			size_t rewritten_size = 0;
			char *rewritten = test_read_file(path, &rewritten_size);
			CHECK(rewritten && rewritten_size == size && !memcmp(rewritten, bytes, size));
			free(rewritten);
			CHECK(jit_of(program, folder) == 1);
		}
		// Another key's entry under this key's name: its header's key differs.
		CHECK(entry_other_than(folder, path, other_path, sizeof other_path));
		size_t other_size = 0;
		char *other_bytes = test_read_file(other_path, &other_size);
		CHECK(other_bytes != NULL);
		if (other_bytes) {
			CHECK(write_file(path, other_bytes, other_size));
			CHECK(jit_of(program, folder) == 0);
			CHECK(jit_of(program, folder) == 1);
		}
		free(other_bytes);
		free(bytes);
		// A folder others may write into is no cache: its entries could be anyone's code.
		CHECK(!chmod(folder, 0775));
		CHECK(jit_of(program, folder) == 0);
		CHECK(!chmod(folder, 0700));
		CHECK(jit_of(program, folder) == 1);
		// A folder that cannot be made: the kernels compile as without a cache.
		char blocked[4200];
		snprintf(blocked, sizeof blocked, "%s/a-file", folder);
		CHECK(write_file(blocked, "x", 1));
		snprintf(blocked, sizeof blocked, "%s/a-file/kernels", folder);
		CHECK(jit_of(program, blocked) == 0);
		CHECK(jit_of(program, blocked) == 0);
	}
	f8_codegen_program_destroy(program);
	f8_codegen_program_destroy(other);
	f8_graph_destroy(graph);
	f8_graph_destroy(other_graph);
}

/* The PTX of `program`'s kernels through `folder` (NULL: none), its geometry into `geometry`
 * (the caller's, one per kernel); NULL when the compile failed. */
static char *ptx_of(const f8_codegen_program *program, const char *folder,
		    f8_launch_geometry *geometry) {
	char *ptx = NULL;
	f8_diag diag = {0};
	if (f8_nvptx_compile((const f8_kernel *const *)program->kernels, program->n_kernels, folder,
			     &ptx, geometry, &diag)) {
		f8_diag_print(&diag, stdout);
		return NULL;
	}
	return ptx;
}

/* The inode of `path`'s file: an entry written again (under another name, renamed into place)
 * has another. 0 when there is none. */
static ino_t inode_of(const char *path) {
	struct stat info;
	return stat(path, &info) ? 0 : info.st_ino;
}

/* The PTX of two kernels stored, taken from the cache unchanged, and a damaged entry missed. */
static void check_ptx(const char *folder) {
	printf("PTX stored, taken from the cache, and missed when damaged\n");
	f8_graph *graph = NULL;
	f8_codegen_program *program = program_of(gelu_grad, F8_KERNEL_FAMILY_ACTIVATION_GRAD, &graph);
	char *fresh = NULL, *stored = NULL, *taken = NULL, *again = NULL, path[4096];
	f8_launch_geometry geometry[4][8];
	if (program && program->n_kernels <= 8 && (fresh = ptx_of(program, NULL, geometry[0]))) {
		uint32_t n = program->n_kernels;
		stored = ptx_of(program, folder, geometry[1]);
		CHECK(entries(folder, path, sizeof path) == (int)n);
		ino_t before = inode_of(path);
		taken = ptx_of(program, folder, geometry[2]);
		CHECK(before != 0 && inode_of(path) == before); // taken, not written again
		// A flipped byte past the header: a miss, compiled, the entry written again.
		size_t size = 0;
		char *bytes = test_read_file(path, &size);
		CHECK(bytes && size > 100);
		if (bytes) {
			bytes[48 + (size_t)rand_r(&seed) % (size - 48)] ^= 0x20;
			CHECK(write_file(path, bytes, size));
			before = inode_of(path);
		}
		free(bytes);
		again = ptx_of(program, folder, geometry[3]);
		CHECK(inode_of(path) != before);
		for (int run = 1; run < 4; run++) {
			char *text = run == 1 ? stored : run == 2 ? taken : again;
			CHECK(text && !strcmp(text, fresh));
			CHECK(!memcmp(geometry[run], geometry[0], n * sizeof geometry[0][0]));
		}
	}
	CHECK(program && fresh);
	f8_free(fresh);
	f8_free(stored);
	f8_free(taken);
	f8_free(again);
	f8_codegen_program_destroy(program);
	f8_graph_destroy(graph);
}

/* One process holds an entry's lock with the entry gone; another JIT of the same kernels waits
 * for it, and links the entry the holder puts back instead of compiling. */
static void check_lock(const char *folder) {
	printf("a process waits for another's compile of the same kernels\n");
	f8_graph *graph = NULL;
	f8_codegen_program *program = program_of(gelu_grad, F8_KERNEL_FAMILY_ACTIVATION_GRAD, &graph);
	char path[4096], lock[4200];
	if (program && jit_of(program, folder) >= 0 && entries(folder, path, sizeof path) == 1) {
		size_t size = 0;
		char *bytes = test_read_file(path, &size);
		snprintf(lock, sizeof lock, "%.*s.lock", (int)(strlen(path) - 2), path);
		int fd = open(lock, O_RDWR);
		CHECK(fd >= 0 && !flock(fd, LOCK_EX));
		CHECK(!unlink(path));
		fflush(stdout);
		pid_t child = fork();
		if (child == 0)
			_exit(jit_of(program, folder) == 1 ? 0 : 1);
		nanosleep(&(struct timespec){.tv_nsec = 600 * 1000 * 1000}, NULL);
		int status = 0;
		CHECK(waitpid(child, &status, WNOHANG) == 0); // still waiting for the lock
		CHECK(bytes && write_file(path, bytes, size));
		flock(fd, LOCK_UN);
		close(fd);
		CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) &&
		      WEXITSTATUS(status) == 0);
		free(bytes);
	} else {
		CHECK(!"the lock's entry was made");
	}
	f8_codegen_program_destroy(program);
	f8_graph_destroy(graph);
}

/* A file of `size` bytes named `name` in `folder`, last used `age` seconds ago. */
static void aged_file(const char *folder, const char *name, size_t size, long age) {
	char path[4200];
	snprintf(path, sizeof path, "%s/%s", folder, name);
	char *bytes = calloc(1, size + 1);
	CHECK(write_file(path, bytes, size));
	free(bytes);
	struct timespec times[2] = {{.tv_sec = time(NULL) - age}, {.tv_sec = time(NULL) - age}};
	CHECK(!utimensat(AT_FDCWD, path, times, 0));
}

static bool exists_in(const char *folder, const char *name) {
	char path[4200];
	snprintf(path, sizeof path, "%s/%s", folder, name);
	return file_exists(path);
}

/* The name of fake entry `i` with `suffix`: a key of 32 hex digits, as the cache names its own. */
static const char *fake(int i, const char *suffix) {
	static char name[64];
	snprintf(name, sizeof name, "%032x%s", 0xabc00 + i, suffix);
	return name;
}

static void check_trim(const char *folder) {
	printf("trimming: the least recently used first, to three quarters, the cache's files only\n");
	// Ten entries of 1000 bytes, 0 the oldest; a limit of 8000: the folder holds 10000 (and
	// empty locks), so the four oldest go (6000 <= 6000 left).
	for (int i = 0; i < 10; i++) {
		aged_file(folder, fake(i, ".o"), 1000, 1000 - 10 * i);
		aged_file(folder, fake(i, ".lock"), 0, 1000 - 10 * i);
	}
	aged_file(folder, fake(3, ".Xdead1"), 10, 7200); // a writer that died two hours ago
	aged_file(folder, fake(9, ".Xbusy1"), 10, 5);    // one writing now
	aged_file(folder, "notes.txt", 100000, 7200);     // the user's, in a folder they named
	aged_file(folder, "old.o", 100000, 7200);
	f8_kernel_cache_trim(folder, 8000);
	for (int i = 0; i < 10; i++) {
		CHECK(exists_in(folder, fake(i, ".o")) == (i >= 4));
		CHECK(exists_in(folder, fake(i, ".lock")) == (i >= 4));
	}
	CHECK(!exists_in(folder, fake(3, ".Xdead1")));
	CHECK(exists_in(folder, fake(9, ".Xbusy1")));
	CHECK(exists_in(folder, "notes.txt") && exists_in(folder, "old.o"));
	f8_kernel_cache_trim(folder, 8000); // under the limit: nothing goes
	CHECK(exists_in(folder, fake(4, ".o")));
}

/* Removes `folder` and what is in it, one level down. */
static void remove_folder(const char *folder) {
	DIR *directory = opendir(folder);
	for (struct dirent *item; directory && (item = readdir(directory));) {
		if (!strcmp(item->d_name, ".") || !strcmp(item->d_name, ".."))
			continue;
		char path[4200];
		snprintf(path, sizeof path, "%s/%s", folder, item->d_name);
		if (unlink(path))
			remove_folder(path);
	}
	if (directory)
		closedir(directory);
	rmdir(folder);
}

int main(void) {
	const char *given = getenv("F8_TEST_SEED");
	seed = given ? (unsigned)strtoul(given, NULL, 10) : (unsigned)time(NULL);
	printf("seed %u (F8_TEST_SEED=%u repeats it)\n", seed, seed);
	const char *tmp = getenv("TMPDIR");
	char root[1024], folder[2048], trim_folder[2048];
	snprintf(root, sizeof root, "%s/f8c-kernel-cache-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(root)) {
		printf("FAIL: no temporary folder\n");
		return 1;
	}
	snprintf(folder, sizeof folder, "%s/made/below", root); // made by the cache
	check_same_results(folder);
	remove_folder(root);
	snprintf(root, sizeof root, "%s/f8c-kernel-cache-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (mkdtemp(root)) {
		snprintf(folder, sizeof folder, "%s/entries", root);
		check_entries(folder);
		snprintf(folder, sizeof folder, "%s/lock", root);
		check_lock(folder);
		snprintf(folder, sizeof folder, "%s/ptx", root);
		check_ptx(folder);
		snprintf(trim_folder, sizeof trim_folder, "%s/trim", root);
		CHECK(!mkdir(trim_folder, 0755));
		check_trim(trim_folder);
		remove_folder(root);
	}
	return test_finish();
}
