/*
 * libFuzzer target for the plan loader (runtime/plan.c): the bytes become a plan folder, a
 * private temporary one, which f8_plan_load loads as `f8c train PLAN` and `f8c infer PLAN` do.
 * The loader must keep its promises: it returns F8_OK with a plan whose records hold together
 * (a graph, one record per fused group, every launch of a listed kernel, every binding a value
 * of the graph or a scratch of its group, kernels.ptx and weights.safetensors read), or an error
 * status with a message and no plan; never a crash, a leak or a sanitizer report, and
 * f8_plan_destroy frees what it loaded. A broken promise aborts, so libFuzzer keeps the input.
 *
 * The input is one mode byte, then the files of the folder, split at NUL bytes (JSON and PTX
 * text hold none; the weights, last, may):
 *
 *   MODE plan.json NUL kernels.ptx NUL weights.safetensors
 *
 * A file whose NUL is missing is left out of the folder, so the loader's refusals of a missing
 * file are reached too. MODE's lowest bit set means mend: plan.json, when it parses as a JSON
 * object, gets its records of the two other files (bytes, fnv1a64) and its digest recomputed,
 * as f8c compile writes them, before it is written. Nearly every mutation of a plan breaks its
 * digest, and the loader stops there; mended, a mutated graph, kernel table, launch or binding
 * reaches the checks behind it (the graph's parse and verifier, the slab plan, the parameters,
 * the bindings, the weights against the graph's leaves). Unmended, the bytes are loaded as they
 * are (the JSON parser, the header, the digest check).
 *
 * Built by the `fuzz` preset (F8C_FUZZ=ON, clang, -fsanitize=fuzzer,address,undefined); seeds in
 * tests/fuzz/corpus_plan/ (tests/fuzz/make_corpus.py makes them from `f8c compile`'s plans).
 */
#define _POSIX_C_SOURCE 200809L // mkdtemp (fuzz_support.h)

#include <errno.h>  // errno, ENOENT
#include <inttypes.h> // PRIx64
#include <stdint.h> // uint8_t, uint64_t
#include <stdio.h>  // fprintf, snprintf
#include <stdlib.h> // abort, atexit, free
#include <string.h> // memchr, strlen
#include <unistd.h> // unlink

#include <jansson.h> // json_loadb, json_dumps: the mend

#include "ir/verify.h"    // f8_graph_verify
#include "runtime/plan.h" // f8_plan_load, f8_plan_destroy
#include "tests/fuzz/fuzz_support.h" // fuzz_make_folder, fuzz_write_file, fuzz_remove_folder

#ifndef F8C_VERSION // the version the loader holds plan.json's "f8c_version" to (CMakeLists.txt)
#error "F8C_VERSION must be defined: the seeds' plans were written by that f8c"
#endif

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The folder's files, in the input's order. */
enum { PLAN_JSON, KERNELS_PTX, WEIGHTS, N_FILES };
static const char *const names[N_FILES] = {"plan.json", "kernels.ptx", "weights.safetensors"};

static char folder[256];

static void remove_folder(void) {
	fuzz_remove_folder(folder);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
	(void)argc, (void)argv;
	fuzz_make_folder("plan", folder, sizeof folder);
	atexit(remove_folder);
	return 0;
}

/* Writes file `i` of the folder, `size` bytes of `data`; removes it when data is NULL. */
static void put_file(int i, const void *data, size_t size) {
	char path[400];
	snprintf(path, sizeof path, "%s/%s", folder, names[i]);
	if (!data) {
		if (unlink(path) != 0 && errno != ENOENT) {
			fprintf(stderr, "fuzz_plan: cannot remove %s\n", path);
			abort();
		}
		return;
	}
	fuzz_write_file("plan", path, data, size);
}

/* FNV-1a, 64 bits, as runtime/plan.c checksums the files and digests the record (the library
 * keeps its own static: the loader is what is under test, not a source of the answers). */
static uint64_t fnv1a64(const void *bytes, size_t n) {
	const unsigned char *c = bytes;
	uint64_t hash = 14695981039346656037ull;
	for (size_t i = 0; i < n; i++) {
		hash ^= c[i];
		hash *= 1099511628211ull;
	}
	return hash;
}

static json_t *hex64(uint64_t value) {
	char text[17];
	snprintf(text, sizeof text, "%016" PRIx64, value);
	return json_string(text);
}

/* The record `key` of `document` ({"file", "bytes", "fnv1a64"}), when it is an object, made to
 * say `file`'s size and checksum; a present file only (an absent one has no true record). */
static void mend_record(json_t *document, const char *key, const uint8_t *file, size_t size) {
	json_t *record = json_object_get(document, key);
	if (!json_is_object(record) || !file)
		return;
	json_object_set_new(record, "bytes", json_integer((json_int_t)size));
	json_object_set_new(record, "fnv1a64", hex64(fnv1a64(file, size)));
}

/*
 * plan.json's bytes as f8c compile would have written them around what they say: the file
 * records and the digest (FNV-1a 64 of the compact, key-sorted, ASCII dump without "digest")
 * recomputed. Returns a dump to free(), or NULL when the bytes are no JSON object (they are then
 * written as they are).
 */
static char *mend(const uint8_t *json, size_t json_len, const uint8_t *ptx, size_t ptx_len,
		  const uint8_t *weights, size_t weights_len) {
	json_t *document = json_loadb((const char *)json, json_len, 0, NULL);
	if (!json_is_object(document)) {
		json_decref(document);
		return NULL;
	}
	mend_record(document, "kernels_ptx", ptx, ptx_len);
	mend_record(document, "weights", weights, weights_len);
	json_object_del(document, "digest");
	char *digested = json_dumps(document, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII);
	if (digested)
		json_object_set_new(document, "digest", hex64(fnv1a64(digested, strlen(digested))));
	free(digested);
	char *text = json_dumps(document, JSON_INDENT(1) | JSON_ENSURE_ASCII);
	json_decref(document);
	return text;
}

static void fail(const char *what, const f8_diag *diag) {
	fprintf(stderr, "fuzz_plan: %s\n", what);
	if (diag)
		f8_diag_print(diag, stderr);
	abort();
}

/* Aborts unless the records of a plan that loaded hold together as runtime/plan.h says. */
static void check_plan(const f8_plan *plan) {
	const f8_graph *graph = plan->graph;
	if (!graph || !plan->ptx || !plan->weights || !plan->arena)
		fail("a loaded plan lacks its graph, kernels.ptx or weights", NULL);
	f8_diag diag;
	f8_diag_clear(&diag);
	if (f8_graph_verify(graph, &diag) != F8_OK)
		fail("a loaded plan's graph does not verify", &diag);
	if (plan->n_groups != graph->n_groups)
		fail("a loaded plan has not one record per fused group", NULL);
	for (uint32_t g = 0; g < plan->n_groups; g++) {
		const f8_plan_group *group = &plan->groups[g];
		if (group->error && group->error_scratch >= group->n_scratch)
			fail("a group's data error names no scratch of it", NULL);
		for (uint32_t l = 0; l < group->n_launches; l++) {
			const f8_plan_launch *launch = &group->launches[l];
			if (launch->kernel >= plan->n_kernels)
				fail("a launch of a kernel that is not listed", NULL);
			const f8_plan_kernel *kernel = &plan->kernels[launch->kernel];
			for (uint32_t p = 0; p < kernel->n_params; p++) {
				const f8_plan_arg *arg = &launch->args[p];
				f8_kernel_param_kind kind = kernel->params[p].kind;
				if (kind == F8_KERNEL_PARAM_TABLE) {
					const f8_plan_table *table = arg->table;
					if (!table)
						fail("a table parameter without its table", NULL);
					for (size_t c = 0; c < (size_t)table->n_rows * table->n_columns;
					     c++)
						if (table->values[c] != F8_NONE &&
						    table->values[c] >= graph->n_values)
							fail("a table cell names no value", NULL);
				} else if (kind != F8_KERNEL_PARAM_SIZE &&
					   (arg->scratch != F8_NONE ? arg->scratch >= group->n_scratch
								    : arg->value >= graph->n_values))
					fail("a buffer bound to neither a value nor a scratch", NULL);
			}
		}
	}
	for (uint32_t k = 0; k < plan->n_kernels; k++)
		for (uint32_t i = 0; i < plan->kernels[k].n_grid_sizes; i++)
			if (plan->kernels[k].grid_sizes[i] >= plan->kernels[k].n_params)
				fail("a kernel's grid size is not one of its parameters", NULL);
	for (uint32_t w = 0; plan->weight_init && w < plan->weight_init->n_weights; w++)
		if (plan->weight_init->weights[w].value >= graph->n_values)
			fail("weight_init names no value", NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
	if (size == 0)
		return 0;
	bool mended = data[0] & 1;
	const uint8_t *file[N_FILES] = {NULL, NULL, NULL}, *at = data + 1, *end = data + size;
	size_t len[N_FILES] = {0, 0, 0};
	for (int i = 0; i < N_FILES && at; i++) {
		const uint8_t *nul = i < N_FILES - 1 ? memchr(at, 0, (size_t)(end - at)) : NULL;
		file[i] = at;
		len[i] = (size_t)((nul ? nul : end) - at);
		at = nul ? nul + 1 : i < N_FILES - 1 ? NULL : end;
	}
	char *json = mended ? mend(file[PLAN_JSON], len[PLAN_JSON], file[KERNELS_PTX],
				   len[KERNELS_PTX], file[WEIGHTS], len[WEIGHTS])
			    : NULL;
	put_file(PLAN_JSON, json ? json : (const char *)file[PLAN_JSON],
		 json ? strlen(json) : len[PLAN_JSON]);
	put_file(KERNELS_PTX, file[KERNELS_PTX], len[KERNELS_PTX]);
	put_file(WEIGHTS, file[WEIGHTS], len[WEIGHTS]);
	free(json);

	f8_diag diag;
	f8_diag_clear(&diag);
	static f8_plan not_loaded; // *out before the load: a failed load must set it to NULL
	f8_plan *plan = &not_loaded;
	f8_status status = f8_plan_load(folder, F8C_VERSION, &plan, &diag);
	if (status != F8_OK) {
		if (plan)
			fail("a load that failed left a plan", NULL);
		if (diag.status != status || !diag.message[0])
			fail("a load failed without a message of its status", &diag);
		return 0;
	}
	if (!plan)
		fail("a load that succeeded gave no plan", NULL);
	check_plan(plan);
	f8_plan_destroy(plan);
	return 0;
}
