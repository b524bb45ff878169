/*
 * Host kernels' object files on disk (codegen/kernel_cache.h): the key, the lock, and the
 * entries' files with their checked header.
 */
#define _GNU_SOURCE // O_CLOEXEC, mkostemp

#include "codegen/kernel_cache.h" // f8_kernel_cache_entry, F8_KERNEL_CACHE_MAX_BYTES

#include <ctype.h>    // isxdigit
#include <dirent.h>   // opendir, readdir
#include <errno.h>    // errno, EEXIST, EINTR, EWOULDBLOCK
#include <fcntl.h>    // open, O_RDWR, O_CREAT
#include <limits.h>   // PATH_MAX
#include <stdatomic.h> // atomic_llong, atomic_compare_exchange_strong
#include <stdio.h>    // snprintf, rename
#include <stdlib.h>   // qsort, mkostemp
#include <string.h>   // memcmp, memcpy, strcmp, strlen
#include <sys/file.h> // flock
#include <sys/stat.h> // mkdir, fstat, utimensat
#include <time.h>     // nanosleep, time, clock_gettime
#include <unistd.h>   // read, write, close, unlink, geteuid

#include <llvm-c/BitWriter.h> // LLVMWriteBitcodeToMemoryBuffer
#include <llvm-c/Core.h>      // LLVMGetVersion, LLVMGetBufferStart, LLVMDisposeMemoryBuffer
#include <xxhash.h>           // XXH3_128bits, XXH128_canonicalFromHash

#include "codegen/llvm_lower.h" // F8_LLVM_PIPELINE
#include "ir/alloc.h"           // f8_malloc, f8_free, f8_realloc

/* Bumped whenever something that decides the machine code enters the key another way (the
 * JIT's code model, say), or the entry's layout changes. */
static const char cache_format[] = "f8c host kernels 1";

/* An entry's file: this header, then the object file. */
typedef struct entry_header {
	char magic[8];      // "F8CKOBJ1"
	uint8_t digest[16]; // the key again
	uint64_t size;      // the object's bytes
	uint8_t hash[16];   // XXH3 128 of the object
} entry_header;

static const char entry_magic[8] = {'F', '8', 'C', 'K', 'O', 'B', 'J', '1'};

/* How long a process waits for another's compile of the same kernels before it compiles them
 * itself: a lock is held only while LLVM compiles, seconds; one held longer is stuck. */
enum { LOCK_WAIT_SECONDS = 120 };

/* Entries' temporary files older than this are a crashed writer's and are removed. */
enum { STALE_SECONDS = 3600 };

static void canonical(XXH128_hash_t hash, uint8_t out[16]) {
	XXH128_canonical_t bytes;
	XXH128_canonicalFromHash(&bytes, hash);
	memcpy(out, bytes.digest, 16);
}

/* Makes `folder` and the folders above it. */
static bool make_folders(const char *folder) {
	char path[PATH_MAX];
	size_t length = strlen(folder);
	if (!length || length >= sizeof path)
		return false;
	memcpy(path, folder, length + 1);
	for (char *at = path + 1;; at++) {
		bool last = !*at;
		if (*at != '/' && !last)
			continue;
		*at = '\0';
		// Made for its user alone, as the XDG rule has a cache: an entry is code that runs.
		if (mkdir(path, 0700) && errno != EEXIST)
			return false;
		if (last)
			break;
		*at = '/';
	}
	struct stat info;
	return !stat(folder, &info) && S_ISDIR(info.st_mode);
}

/* Whether `folder` is this user's and no one else may write into it: an entry is code this
 * process runs, so a folder others can write to is no cache (F8C_KERNEL_CACHE may name one). */
static bool private_folder(const char *folder) {
	struct stat info;
	return !stat(folder, &info) && info.st_uid == geteuid() &&
	       !(info.st_mode & (S_IWGRP | S_IWOTH));
}

/* The key of `module` for `target`, or false when its bitcode cannot be written. */
static bool module_key(LLVMModuleRef module, const char *target, uint8_t digest[16]) {
	LLVMMemoryBufferRef bitcode = LLVMWriteBitcodeToMemoryBuffer(module);
	if (!bitcode)
		return false;
	XXH3_state_t *state = XXH3_createState();
	bool made = state && XXH3_128bits_reset(state) == XXH_OK;
	unsigned version[3];
	LLVMGetVersion(&version[0], &version[1], &version[2]);
	const void *parts[] = {cache_format, version, F8_LLVM_PIPELINE, target};
	size_t sizes[] = {sizeof cache_format, sizeof version, sizeof F8_LLVM_PIPELINE,
			  strlen(target) + 1};
	for (size_t i = 0; made && i < sizeof parts / sizeof *parts; i++)
		made = XXH3_128bits_update(state, parts[i], sizes[i]) == XXH_OK;
	made = made && XXH3_128bits_update(state, LLVMGetBufferStart(bitcode),
					   LLVMGetBufferSize(bitcode)) == XXH_OK;
	if (made)
		canonical(XXH3_128bits_digest(state), digest);
	XXH3_freeState(state);
	LLVMDisposeMemoryBuffer(bitcode);
	return made;
}

/* Takes the lock on `path`, waiting up to LOCK_WAIT_SECONDS; -1 when none is taken. */
static int take_lock(const char *path) {
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	for (int tries = 0; tries < LOCK_WAIT_SECONDS * 20; tries++) {
		if (!flock(fd, LOCK_EX | LOCK_NB))
			return fd;
		if (errno != EWOULDBLOCK && errno != EINTR)
			break;
		nanosleep(&(struct timespec){.tv_nsec = 50 * 1000 * 1000}, NULL);
	}
	close(fd);
	return -1;
}

static bool entry_path(const f8_kernel_cache_entry *entry, const char *suffix, char *path,
		       size_t size) {
	int length = snprintf(path, size, "%s/%s%s", entry->folder, entry->key, suffix);
	return length > 0 && (size_t)length < size;
}

bool f8_kernel_cache_open(const char *folder, LLVMModuleRef module, const char *target,
			  f8_kernel_cache_entry *entry) {
	*entry = (f8_kernel_cache_entry){.folder = folder, .lock = -1};
	if (!folder || !*folder || !make_folders(folder) || !private_folder(folder) ||
	    !module_key(module, target, entry->digest))
		return false;
	for (int i = 0; i < 16; i++)
		snprintf(entry->key + 2 * i, 3, "%02x", entry->digest[i]);
	char path[PATH_MAX];
	if (!entry_path(entry, ".lock", path, sizeof path))
		return false;
	entry->lock = take_lock(path); // without it, two processes may compile the same kernels
	return true;
}

/* Reads the whole of `fd` into a new allocation (its size in *size); NULL on failure. */
static uint8_t *read_all(int fd, size_t *size) {
	struct stat info;
	if (fstat(fd, &info) || info.st_size < (off_t)sizeof(entry_header))
		return NULL;
	uint8_t *bytes = f8_malloc((size_t)info.st_size);
	size_t done = 0;
	while (bytes && done < (size_t)info.st_size) {
		ssize_t got = read(fd, bytes + done, (size_t)info.st_size - done);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			f8_free(bytes);
			return NULL;
		}
		done += (size_t)got;
	}
	*size = done;
	return bytes;
}

LLVMMemoryBufferRef f8_kernel_cache_load(const f8_kernel_cache_entry *entry) {
	char path[PATH_MAX];
	if (!entry_path(entry, ".o", path, sizeof path))
		return NULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	size_t size = 0;
	uint8_t *bytes = read_all(fd, &size);
	close(fd);
	if (!bytes)
		return NULL;
	entry_header header;
	memcpy(&header, bytes, sizeof header);
	const uint8_t *object = bytes + sizeof header;
	uint8_t hash[16];
	bool good = !memcmp(header.magic, entry_magic, sizeof entry_magic) &&
		    !memcmp(header.digest, entry->digest, sizeof header.digest) &&
		    header.size == size - sizeof header;
	if (good) {
		canonical(XXH3_128bits(object, header.size), hash);
		good = !memcmp(hash, header.hash, sizeof hash);
	}
	LLVMMemoryBufferRef buffer =
		good ? LLVMCreateMemoryBufferWithMemoryRangeCopy((const char *)object, header.size,
								 entry->key)
		     : NULL;
	f8_free(bytes);
	if (buffer) // the least recently used go first when the folder is trimmed
		utimensat(AT_FDCWD, path, NULL, 0);
	return buffer;
}

static bool write_all(int fd, const void *data, size_t size) {
	const uint8_t *at = data;
	while (size) {
		ssize_t wrote = write(fd, at, size);
		if (wrote < 0 && errno == EINTR)
			continue;
		if (wrote <= 0)
			return false;
		at += wrote;
		size -= (size_t)wrote;
	}
	return true;
}

/* A file of the folder, for trimming. */
typedef struct cached_file {
	char name[NAME_MAX + 1];
	struct timespec used;
	uint64_t size;
} cached_file;

static int older_first(const void *a, const void *b) {
	const struct timespec *x = &((const cached_file *)a)->used;
	const struct timespec *y = &((const cached_file *)b)->used;
	if (x->tv_sec != y->tv_sec)
		return x->tv_sec < y->tv_sec ? -1 : 1;
	return (x->tv_nsec > y->tv_nsec) - (x->tv_nsec < y->tv_nsec);
}

/* Whether `name` is one of the cache's own files: a key (32 hex digits), then ".o" (an entry),
 * ".lock" or "." and mkostemp's six characters (a writer's temporary file). Nothing else in the
 * folder is touched: F8C_KERNEL_CACHE may name a folder that holds other files. */
static bool cache_file(const char *name) {
	for (int i = 0; i < 32; i++)
		if (!isxdigit((unsigned char)name[i]))
			return false;
	const char *suffix = name + 32;
	return !strcmp(suffix, ".o") || !strcmp(suffix, ".lock") ||
	       (suffix[0] == '.' && strlen(suffix) == 7);
}

static bool ends_with(const char *name, const char *suffix) {
	size_t n = strlen(name), s = strlen(suffix);
	return n >= s && !strcmp(name + n - s, suffix);
}

/* Removes `name` of `folder`, and with an entry its lock file. */
static void remove_file(const char *folder, const char *name) {
	char path[PATH_MAX];
	if (snprintf(path, sizeof path, "%s/%s", folder, name) >= (int)sizeof path)
		return;
	unlink(path);
	size_t length = strlen(path);
	if (ends_with(path, ".o") && length + 3 < sizeof path) {
		memcpy(path + length - 2, ".lock", sizeof ".lock");
		unlink(path);
	}
}

void f8_kernel_cache_trim(const char *folder, uint64_t max_bytes) {
	DIR *directory = opendir(folder);
	if (!directory)
		return;
	cached_file *files = NULL;
	size_t n = 0, capacity = 0;
	uint64_t total = 0;
	time_t now = time(NULL);
	for (struct dirent *item; (item = readdir(directory));) {
		struct stat info;
		if (!cache_file(item->d_name) ||
		    fstatat(dirfd(directory), item->d_name, &info, AT_SYMLINK_NOFOLLOW) ||
		    !S_ISREG(info.st_mode))
			continue;
		bool entry = ends_with(item->d_name, ".o");
		if (!entry && !ends_with(item->d_name, ".lock")) {
			if (now - info.st_mtime > STALE_SECONDS)
				remove_file(folder, item->d_name);
			continue;
		}
		total += (uint64_t)info.st_size;
		if (!entry)
			continue;
		if (n == capacity) {
			capacity = capacity ? 2 * capacity : 64;
			cached_file *grown = f8_realloc(files, capacity * sizeof *files);
			if (!grown)
				break;
			files = grown;
		}
		files[n] = (cached_file){.used = info.st_mtim, .size = (uint64_t)info.st_size};
		snprintf(files[n++].name, sizeof files->name, "%s", item->d_name);
	}
	closedir(directory);
	if (total > max_bytes && files) {
		qsort(files, n, sizeof *files, older_first);
		for (size_t i = 0; i < n && total > max_bytes / 4 * 3; i++) {
			remove_file(folder, files[i].name);
			total -= files[i].size;
		}
	}
	f8_free(files);
}

/* The seconds (CLOCK_MONOTONIC) of this process's last trim after a store; 0: none yet. */
static atomic_llong last_trim;
enum { TRIM_INTERVAL_SECONDS = 60 };

void f8_kernel_cache_store(const f8_kernel_cache_entry *entry, const void *object, size_t size) {
	char path[PATH_MAX], temporary[PATH_MAX];
	if (!entry_path(entry, ".o", path, sizeof path) ||
	    !entry_path(entry, ".XXXXXX", temporary, sizeof temporary))
		return;
	int fd = mkostemp(temporary, O_CLOEXEC);
	if (fd < 0)
		return;
	entry_header header = {.size = size};
	memcpy(header.magic, entry_magic, sizeof entry_magic);
	memcpy(header.digest, entry->digest, sizeof header.digest);
	canonical(XXH3_128bits(object, size), header.hash);
	bool written = write_all(fd, &header, sizeof header) && write_all(fd, object, size) &&
		       fchmod(fd, 0644) == 0;
	if (close(fd) || !written || rename(temporary, path)) {
		unlink(temporary);
		return;
	}
	// A trim reads every file's size: once a minute in a process, not once a store (f8c
	// compile stores a kernel's PTX at a time, 51 for GPT-1.3B, from several threads).
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	long long last = atomic_load(&last_trim);
	if ((last == 0 || now.tv_sec - last >= TRIM_INTERVAL_SECONDS) &&
	    atomic_compare_exchange_strong(&last_trim, &last, (long long)now.tv_sec))
		f8_kernel_cache_trim(entry->folder, F8_KERNEL_CACHE_MAX_BYTES);
}

void f8_kernel_cache_close(f8_kernel_cache_entry *entry) {
	if (entry->lock < 0)
		return;
	flock(entry->lock, LOCK_UN);
	close(entry->lock);
	entry->lock = -1;
}
