/*
 * ptxas for the codegen tests' --ptxas parts (tests of their own, which ctest reports as
 * skipped, SKIP_STATUS, where there is no ptxas). Its includer defines _POSIX_C_SOURCE
 * 200809L first, for mkstemp and fdopen.
 */
#ifndef F8_TESTS_CODEGEN_PTXAS_H
#define F8_TESTS_CODEGEN_PTXAS_H

#include <stdbool.h> // bool
#include <stdio.h>   // printf, fdopen, snprintf
#include <stdlib.h>  // mkstemp, system
#include <unistd.h>  // access, unlink

enum { SKIP_STATUS = 77 }; // ctest's SKIP_RETURN_CODE for these tests (tests/codegen/CMakeLists.txt)

/* True (after saying why, with a hint) when there is no executable ptxas at `ptxas`. */
static inline bool test_ptxas_missing(const char *ptxas) {
	if (access(ptxas, X_OK) == 0)
		return false;
	printf("SKIP: ptxas -arch=sm_90 needs the CUDA Toolkit's ptxas (none at \"%s\")\n", ptxas);
	printf("HINT: install the CUDA Toolkit, or point CMake at its ptxas (-DF8C_PTXAS=PATH)\n");
	return true;
}

/* True when `ptxas -arch=sm_90` accepts the PTX module `ptx` (written to a temporary file). */
static inline bool test_ptxas_accepts(const char *ptxas, const char *ptx) {
	char path[] = "/tmp/f8c_test_ptx_XXXXXX";
	int fd = mkstemp(path);
	FILE *file = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (!file)
		return false;
	fputs(ptx, file);
	fclose(file);
	char command[1024];
	snprintf(command, sizeof command, "'%s' -arch=sm_90 '%s' -o /dev/null", ptxas, path);
	int status = system(command);
	unlink(path);
	printf("ptxas -arch=sm_90: %s\n", status == 0 ? "ok" : "FAILED");
	return status == 0;
}

#endif
