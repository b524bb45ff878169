/*
 * Atomic file writing: a temporary file next to the target, synced and renamed over it.
 */
#define _POSIX_C_SOURCE 200809L // fdopen, fileno, fsync, fchmod, O_CLOEXEC, O_DIRECTORY

#include "runtime/atomic_file.h" // f8_atomic_file

#include <dirent.h>    // opendir, readdir, dirfd, closedir
#include <errno.h>     // errno, EEXIST, EIO, EINTR
#include <fcntl.h>     // open, openat, fcntl, O_*, F_DUPFD_CLOEXEC, AT_SYMLINK_NOFOLLOW
#include <stdbool.h>   // bool
#include <stdint.h>    // uint64_t, uintptr_t
#include <stdio.h>     // FILE, fdopen, fwrite, fflush, fclose, rename
#include <string.h>    // strlen, strrchr, strncmp, strspn, memcpy, strerror
#include <sys/file.h>  // flock, LOCK_EX, LOCK_NB (4.4BSD; glibc and musl declare it always)
#include <sys/stat.h>  // stat, fstat, fstatat, fchmod, S_ISREG
#include <time.h>      // clock_gettime
#include <unistd.h>    // close, fsync, unlink, unlinkat, getpid

#include "ir/alloc.h" // f8_malloc, f8_free

struct f8_atomic_file {
	FILE *stream;    // the temporary file, open for writing; NULL once closed
	char *path;      // where the file goes
	char *temp_path; // the temporary file: PATH.tmp.XXXXXX
	char *folder;    // PATH's folder, synced after the rename
	int lock;        // a second descriptor of the temporary file, which holds its flock until
			 // the rename or the unlink (-1 where the file system has no flock)
	int error;       // errno of the first write that failed through f8_atomic_file_write, or 0
};

static f8_status io_error(f8_diag *diag, const char *path, int error, const char *what) {
	f8_diag_at(diag, path, 0, 0, NULL, 0);
	return f8_diag_set(diag, F8_ERR_IO, "cannot %s %s: %s", what, path, strerror(error));
}

/* Drops the temporary file's lock: after its rename or unlink, never before (a remover
 * could take a file that is still to be renamed). */
static void unlock(f8_atomic_file *file) {
	if (file->lock >= 0)
		close(file->lock);
	file->lock = -1;
}

/* Frees the handle's memory (the strings live in the same block). */
static void release(f8_atomic_file *file) {
	f8_free(file);
}

static const char letters[] = "abcdefghijklmnopqrstuvwxyz"
			      "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
enum { SUFFIX_LETTERS = 6 }; // the XXXXXX of PATH.tmp.XXXXXX

/*
 * Locks the new temporary file `fd` for as long as this writer lives, so that
 * remove_stale_temps of another writer leaves it alone. The lock is held by a second
 * descriptor, *lock, which stays open after the stream's fclose until the rename or the
 * unlink; -1 where the file system has no flock, whose removers cannot lock the file either.
 * 1 when a remover took the file between its creation and the lock (make another), 0 when
 * locked, -1 with errno when no descriptor was left.
 */
static int lock_temp(int fd, int *lock) {
	*lock = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (*lock < 0)
		return -1;
	int locked;
	while ((locked = flock(*lock, LOCK_EX)) != 0 && errno == EINTR)
		continue;
	struct stat info;
	bool taken = locked == 0 && fstat(fd, &info) == 0 && info.st_nlink == 0;
	if (locked != 0 || taken) {
		close(*lock);
		*lock = -1;
	}
	return taken;
}

/*
 * Makes the temporary file and locks it (lock_temp). Not mkstemp: it creates with mode 0600
 * whatever the umask, so every file written would end up readable by its owner alone, and
 * reading the umask to widen it again (umask(0) then umask(old)) races with other threads
 * creating files. open with O_EXCL and 0666 lets the kernel apply the umask; the six
 * characters come from a mix of the process id, the clock and the address of this call's
 * buffer, and a name that exists is tried again with the next ones.
 */
static int create_temp(char *temp_path, size_t suffix_at, int *lock) {
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	uint64_t state = (uint64_t)getpid() << 32 ^ (uint64_t)now.tv_nsec ^
			 (uint64_t)now.tv_sec << 20 ^ (uint64_t)(uintptr_t)temp_path;
	for (int attempt = 0; attempt < 100; attempt++) {
		// splitmix64: one step per attempt, six letters from its bits
		uint64_t z = (state += 0x9e3779b97f4a7c15u);
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
		z ^= z >> 31;
		for (int i = 0; i < SUFFIX_LETTERS; i++, z /= 62)
			temp_path[suffix_at + (size_t)i] = letters[z % 62];
		int fd = open(temp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
		if (fd < 0 && errno != EEXIST)
			return -1;
		int locked = fd < 0 ? 1 : lock_temp(fd, lock);
		if (locked == 0)
			return fd;
		if (locked < 0) {
			int error = errno;
			close(fd);
			unlink(temp_path);
			errno = error;
			return -1;
		}
		if (fd >= 0)
			close(fd);
	}
	errno = EEXIST;
	return -1;
}

/* Whether `name` is `base` followed by ".tmp." and six of the letters create_temp uses. */
static bool is_temp_of(const char *name, const char *base, size_t base_len) {
	if (strncmp(name, base, base_len) != 0 || strncmp(name + base_len, ".tmp.", 5) != 0)
		return false;
	const char *suffix = name + base_len + 5;
	return strlen(suffix) == SUFFIX_LETTERS && strspn(suffix, letters) == SUFFIX_LETTERS;
}

/*
 * Removes the temporary files of PATH that writers killed before commit or abort left behind
 * (SIGKILL, the OOM killer, a machine that went down): each would otherwise stay forever, as
 * large as the file it was to become, and a job preempted again and again fills its disk. A
 * temporary file whose lock this process can take has no live writer (the kernel drops a
 * dead process's locks); one that cannot be opened or locked is left alone. Best effort:
 * failures here are not the write's. Only PATH's own names go, never another file's.
 */
static void remove_stale_temps(const char *folder, const char *path) {
	const char *slash = strrchr(path, '/');
	const char *base = slash ? slash + 1 : path;
	size_t base_len = strlen(base);
	DIR *dir = opendir(folder);
	if (!dir)
		return;
	int dir_fd = dirfd(dir);
	for (struct dirent *entry; (entry = readdir(dir));) {
		struct stat named, info;
		if (!is_temp_of(entry->d_name, base, base_len) ||
		    fstatat(dir_fd, entry->d_name, &named, AT_SYMLINK_NOFOLLOW) != 0 ||
		    !S_ISREG(named.st_mode))
			continue;
		// For writing where it may be: NFS makes flock a POSIX write lock, which needs it.
		int flags = O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
		int fd = openat(dir_fd, entry->d_name, O_WRONLY | flags);
		if (fd < 0)
			fd = openat(dir_fd, entry->d_name, O_RDONLY | flags);
		if (fd < 0)
			continue;
		// The name must still be the file locked: not one made since under the same name.
		if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &info) == 0 &&
		    fstatat(dir_fd, entry->d_name, &named, AT_SYMLINK_NOFOLLOW) == 0 &&
		    named.st_ino == info.st_ino && named.st_dev == info.st_dev)
			(void)unlinkat(dir_fd, entry->d_name, 0);
		close(fd); // drops the lock: a writer waiting in lock_temp sees the file unlinked
	}
	closedir(dir);
}

f8_status f8_atomic_file_open(const char *path, f8_atomic_file **out, f8_diag *diag) {
	*out = NULL;
	struct stat existing;
	bool replaces = stat(path, &existing) == 0;
	if (replaces && !S_ISREG(existing.st_mode)) {
		f8_diag_at(diag, path, 0, 0, NULL, 0);
		f8_diag_hint(diag, "give the path of a file to write, not of a folder or device");
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "cannot write %s: it exists and is not a "
				   "regular file", path);
	}
	static const char suffix[] = ".tmp.XXXXXX";
	const char *slash = strrchr(path, '/');
	size_t path_len = strlen(path);
	size_t folder_len = slash ? (slash == path ? 1 : (size_t)(slash - path)) : 1;
	if (path_len == 0 || (slash && slash[1] == '\0')) {
		f8_diag_at(diag, path, 0, 0, NULL, 0);
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "'%s' is not a file name to write", path);
	}
	size_t size = sizeof(f8_atomic_file) + path_len + 1 + path_len + sizeof suffix +
		      folder_len + 1;
	f8_atomic_file *file = f8_malloc(size);
	if (!file) {
		f8_diag_at(diag, path, 0, 0, NULL, 0);
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory to write %s", path);
	}
	file->stream = NULL;
	file->lock = -1;
	file->error = 0;
	file->path = (char *)(file + 1);
	file->temp_path = file->path + path_len + 1;
	file->folder = file->temp_path + path_len + sizeof suffix;
	memcpy(file->path, path, path_len + 1);
	memcpy(file->temp_path, path, path_len);
	memcpy(file->temp_path + path_len, suffix, sizeof suffix);
	memcpy(file->folder, slash ? path : ".", folder_len);
	file->folder[folder_len] = '\0';

	remove_stale_temps(file->folder, path);
	int fd = create_temp(file->temp_path, path_len + sizeof suffix - 7, &file->lock);
	if (fd < 0) {
		int error = errno;
		f8_diag_hint(diag, "check that the folder %s exists and can be written",
			     file->folder);
		f8_status status = io_error(diag, path, error, "create a temporary file to write");
		release(file);
		return status;
	}
	// A replaced file keeps its permissions (a checkpoint someone made private stays so).
	if (replaces)
		(void)fchmod(fd, existing.st_mode & 07777);
	file->stream = fdopen(fd, "wb");
	if (!file->stream) {
		int error = errno;
		close(fd);
		unlink(file->temp_path);
		unlock(file);
		f8_status status = io_error(diag, path, error, "open a stream to write");
		release(file);
		return status;
	}
	*out = file;
	return F8_OK;
}

FILE *f8_atomic_file_stream(f8_atomic_file *file) {
	return file->stream;
}

f8_status f8_atomic_file_write(f8_atomic_file *file, const void *data, size_t n, f8_diag *diag) {
	if (n == 0 || fwrite(data, 1, n, file->stream) == n)
		return F8_OK;
	if (!file->error)
		file->error = errno ? errno : EIO;
	return io_error(diag, file->path, file->error, "write");
}

void f8_atomic_file_sync_folder(const char *folder) {
	int fd = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return;
	(void)fsync(fd);
	close(fd);
}

f8_status f8_atomic_file_commit(f8_atomic_file *file, f8_diag *diag) {
	errno = 0;
	bool failed = fflush(file->stream) != 0 || ferror(file->stream);
	int error = errno ? errno : file->error; // a failed write's error is what fflush says
	if (!failed && fsync(fileno(file->stream)) != 0)
		failed = true, error = errno;
	int closed = fclose(file->stream);
	file->stream = NULL;
	if (!failed && closed != 0)
		failed = true, error = errno;
	if (!failed && rename(file->temp_path, file->path) != 0)
		failed = true, error = errno;
	if (failed) {
		unlink(file->temp_path);
		unlock(file);
		f8_status status = io_error(diag, file->path, error ? error : EIO, "write");
		release(file);
		return status;
	}
	unlock(file);
	f8_atomic_file_sync_folder(file->folder);
	release(file);
	return F8_OK;
}

void f8_atomic_file_abort(f8_atomic_file *file) {
	if (!file)
		return;
	if (file->stream)
		fclose(file->stream);
	unlink(file->temp_path);
	unlock(file);
	release(file);
}
