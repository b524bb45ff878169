/*
 * An initializer's bytes (ir/graph.h): from the model file's memory when inline, else from its
 * external data file. The one reader both the frontend (which looks at a few weights) and the
 * runtime (which loads them all) use; converting the bytes to another dtype is the caller's.
 */
#define _POSIX_C_SOURCE 200809L // fseeko, off_t

#include "ir/graph.h" // f8_initializer

#include <assert.h>    // assert
#include <errno.h>     // errno
#include <stdio.h>     // fopen, fread, fseeko
#include <string.h>    // memcpy, strerror
#include <sys/types.h> // off_t

f8_status f8_initializer_read(const f8_initializer *init, uint64_t n_bytes, void *out,
			      const char *name, f8_diag *diag) {
	assert(init && n_bytes <= init->n_bytes && (out || !n_bytes));
	if (!init->path) {
		if (n_bytes)
			memcpy(out, init->data, n_bytes);
		return F8_OK;
	}
	FILE *file = fopen(init->path, "rb");
	if (!file)
		return f8_diag_set(diag, F8_ERR_IO, "cannot open %s for the weights of %%%s: %s",
				   init->path, name, strerror(errno));
	bool ok = fseeko(file, (off_t)init->offset, SEEK_SET) == 0 &&
		  fread(out, 1, n_bytes, file) == n_bytes;
	fclose(file);
	if (!ok) {
		f8_diag_set(diag, F8_ERR_IO, "%s ends before the %llu bytes of %%%s at offset %llu",
			    init->path, (unsigned long long)n_bytes, name,
			    (unsigned long long)init->offset);
		f8_diag_hint(diag, "the weights file changed since the model was loaded; export it "
			     "again");
		return F8_ERR_IO;
	}
	return F8_OK;
}
