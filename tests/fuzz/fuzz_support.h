/*
 * What the fuzz targets of file readers share: a private temporary folder, made once and
 * removed at exit, and writing an input's bytes into a file there. Any failure of these is the
 * machine's, not the reader's: it aborts, naming the target and the path. Header-only.
 * Needs _POSIX_C_SOURCE 200809L (mkdtemp) before the first include.
 */
#ifndef F8_TESTS_FUZZ_SUPPORT_H
#define F8_TESTS_FUZZ_SUPPORT_H

#include <dirent.h> // opendir, readdir, closedir
#include <fcntl.h>  // open, O_*
#include <stdio.h>  // fprintf, snprintf
#include <stdlib.h> // abort, getenv, mkdtemp
#include <string.h> // strcmp
#include <unistd.h> // write, close, unlink, rmdir

/* Makes TMPDIR/f8c-fuzz-TARGET-XXXXXX (TMPDIR or /tmp) into `folder`. */
static inline void fuzz_make_folder(const char *target, char *folder, size_t size) {
	const char *tmp = getenv("TMPDIR");
	snprintf(folder, size, "%s/f8c-fuzz-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", target);
	if (!mkdtemp(folder)) {
		fprintf(stderr, "fuzz_%s: cannot make a folder in %s\n", target, folder);
		abort();
	}
}

/* Removes the files of `folder`, then the folder (for atexit, through a target's own
 * function of no arguments). */
static inline void fuzz_remove_folder(const char *folder) {
	DIR *dir = opendir(folder);
	char path[4200];
	for (struct dirent *entry; dir && (entry = readdir(dir));)
		if (strcmp(entry->d_name, ".") != 0 && strcmp(entry->d_name, "..") != 0 &&
		    snprintf(path, sizeof path, "%s/%s", folder, entry->d_name) < (int)sizeof path)
			unlink(path);
	if (dir)
		closedir(dir);
	rmdir(folder);
}

/* Writes `size` bytes of `data` as the file `path`, replacing what it held. */
static inline void fuzz_write_file(const char *target, const char *path, const void *data,
				   size_t size) {
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	size_t done = 0;
	while (fd >= 0 && done < size) {
		ssize_t wrote = write(fd, (const char *)data + done, size - done);
		if (wrote <= 0)
			break;
		done += (size_t)wrote;
	}
	if (fd < 0 || done < size || close(fd) != 0) {
		fprintf(stderr, "fuzz_%s: cannot write %s\n", target, path);
		abort();
	}
}

#endif
