/*
 * Writing a file atomically: readers of PATH see the old file or the whole new one, never a part,
 * also when the writer fails, is killed or the machine loses power half way.
 *
 * The bytes go to a temporary file in PATH's folder ("PATH.tmp.XXXXXX", so that the rename
 * below stays inside one file system), which commit flushes, syncs, renames over PATH and
 * makes durable by syncing the folder. On any failure the temporary file is removed and PATH
 * is left as it was. Checkpoints, data files and every other file the runtime writes go
 * through here.
 *
 * A writer that is killed (SIGKILL, the OOM killer, a preempted job) cannot remove its
 * temporary file. Each writer holds an flock on its own while it lives, so the next open of
 * the same PATH, by any process, removes the PATH.tmp.XXXXXX whose lock it can take: the
 * kernel drops a dead process's locks. Readers of PATH never look at them.
 */
#ifndef F8_RUNTIME_ATOMIC_FILE_H
#define F8_RUNTIME_ATOMIC_FILE_H

#include <stddef.h> // size_t
#include <stdio.h>  // FILE

#include "ir/diag.h" // f8_status, f8_diag

/* A file being written; incomplete on purpose: only these functions look inside. */
typedef struct f8_atomic_file f8_atomic_file;

/*
 * Starts writing `path`: removes the temporary files of `path` that dead writers left,
 * creates its own next to it and returns the handle in *out (NULL on failure). A file that
 * PATH replaces lends the new one its permissions; a new file gets 0666 less the umask, as
 * fopen would give it.
 * F8_ERR_ARGUMENT when `path` names a folder or another thing that is not a regular file;
 * F8_ERR_IO when the temporary file cannot be made (the message names the folder and
 * strerror); F8_ERR_NOMEM. The diagnostic's file is `path`.
 */
f8_status f8_atomic_file_open(const char *path, f8_atomic_file **out, f8_diag *diag);

/*
 * The stream to write the contents through (binary, fully buffered). Write errors need not be
 * checked one by one: the stream remembers them (ferror) and commit reports them. Do not
 * fclose it: commit and abort do.
 */
FILE *f8_atomic_file_stream(f8_atomic_file *file);

/*
 * Writes `n` bytes at `data` through the stream; F8_ERR_IO with strerror when the stream
 * refuses them. A convenience for writers that want to stop at the first failure.
 */
f8_status f8_atomic_file_write(f8_atomic_file *file, const void *data, size_t n, f8_diag *diag);

/*
 * Finishes: flush, fsync, close, rename over PATH, fsync of the folder. Frees `file` whatever
 * happens. On failure (a write that failed earlier included) the temporary file is removed,
 * PATH is as it was, and the error is F8_ERR_IO naming PATH and strerror.
 */
f8_status f8_atomic_file_commit(f8_atomic_file *file, f8_diag *diag);

/* Gives up: closes and removes the temporary file, frees `file`; PATH is as it was. NULL is
 * allowed. */
void f8_atomic_file_abort(f8_atomic_file *file);

/* Syncs `folder` so that a rename in it survives a crash (commit does it for PATH's folder;
 * a writer that renames folders calls it itself). Best effort: the rename is done, and some
 * file systems refuse fsync on a folder (EINVAL). */
void f8_atomic_file_sync_folder(const char *folder);

#endif
