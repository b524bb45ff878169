/*
 * Runs f8c's generated PTX kernels on the GPU (tests/gpu/make_kernel_cases.c made the cases)
 * and checks them against the CPU reference, or times them. A case is one fused group: its
 * launches in order, the graph values they bind, and the scratch buffers they share.
 *
 * Check: loads kernels.ptx, and for every case of manifest.json copies its inputs in, poisons
 * its outputs (every byte 0xFF: NaN in f32, bf16, e4m3 and e5m2, so that an element no thread
 * wrote cannot pass), zeroes what is only accumulated into and the scratch buffers, as the ABI
 * asks, runs the launches with their kernels' geometry, synchronizes (a fault of a kernel shows
 * there), reads the data-error flag where the group has one, copies the outputs back and
 * compares them with the reference by tests/codegen/case_compare.h's rule. A table parameter
 * (the optimizer's) is built once the case's buffers are allocated: its cells' constants and
 * the device addresses of the values they name, copied to the device (cuMemAlloc,
 * cuMemcpyHtoD). It also counts the
 * outputs bit-identical with the host JIT's (which come as a hash of their bytes:
 * make_kernel_cases.c says why). One line per case, a summary, exit status 1 on any failure.
 *
 * Bench: the device-to-device copy bandwidth (cuMemcpyDtoD of 1 GiB, bytes read and written,
 * the median of 25 after warm-up) and each case's time (events around its launches, 3 warm-up
 * runs, the median of 25) on random inputs drawn here, with the bytes the group must move at
 * least (every input read once, every output written once; scratch not counted) over that time
 * against the copy's rate.
 *
 * Links no LLVM: the IR library, the file formats, jansson and libcuda.
 *
 * usage: gpu_kernel_check CASES_DIR
 *        gpu_kernel_check --bench BENCH_DIR
 */
#include <jansson.h> // json_t, json_load_file, json_object_get
#include <math.h>    // sqrt, log, cos, fabs, NAN, INFINITY
#include <stdbool.h> // bool
#include <stdio.h>   // printf, fopen, fread, setvbuf
#include <stdlib.h>  // malloc, calloc, free, qsort, exit, strtoull
#include <string.h>  // strcmp, strlen

#include "ir/dtype.h"               // f8_dtype, f8_dtype_from_name, f8_dtype_get_info
#include "ir/shape.h"               // F8_MAX_RANK
#include "runtime/cuda/driver.h"    // f8_cuda_*
#include "runtime/safetensors.h"    // f8_safetensors_open, f8_safetensors_read
#include "runtime/tensor.h"         // f8_rt_tensor
#include "tests/codegen/case_compare.h" // f8_case_compare, f8_case_hash

enum { WARM_UP = 3, TIMED = 25 };

/* How a case uses a buffer. ACCUMULATE: written by atomics only, so zeroed, not poisoned. */
typedef enum buffer_use { USE_IN, USE_OUT, USE_ACCUMULATE, USE_SCRATCH } buffer_use;

/* A buffer of a case (a graph value, or a scratch buffer) and its device memory. */
typedef struct case_buffer {
	const char *name;    // the graph value; "scratch" for scratch buffers
	buffer_use use;
	f8_dtype dtype;
	int rank;            // values
	int64_t dims[F8_MAX_RANK];
	int64_t count;       // elements
	size_t bytes;        // count * element size
	const char *random;  // inputs: normal, scale, bool, label, id, amax, moment, rate, step
			     // or fraction (make_kernel_cases.c's policies)
	bool fp8_neighbour;  // outputs: FP8 codes may be one apart from the reference
	bool rounded_twice;  // outputs: rounded twice, two bf16 ulps apart (case_compare.h)
	bool column_sum;     // outputs: a column sum, its terms' magnitudes in NAME.magnitude
	bool jit_matches;    // outputs: the host JIT's output is within the rule
	uint64_t jit_hash;   // outputs: f8_case_hash of the host JIT's bytes
	CUdeviceptr device;  // 0 when none (no bytes)
} case_buffer;

/* One launch of a case: a kernel, its geometry, its arguments. */
typedef struct case_launch {
	const char *kernel;  // the PTX entry
	f8_launch_geometry geometry;
	int64_t rows;        // the grid loop's trip count
	uint32_t n_params;
	int64_t *sizes;      // (n_params) the size arguments
	void **args;         // (n_params) kernelParams: &buffer.device, &sizes[p] or &tables[p]
	json_t **table_json; // (n_params) a table parameter's manifest entry, else NULL
	CUdeviceptr *tables; // (n_params) a table parameter's device copy (prepare makes it)
	CUfunction function;
} case_launch;

/* One case: a fused group. Strings belong to the manifest. */
typedef struct kernel_case {
	const char *name;      // "<model>.<group>"
	const char *family;    // the fuse pass's family
	const char *members;   // the group's ops
	const char *error;     // what a nonzero error flag means, or NULL
	uint32_t error_scratch;
	case_buffer *buffers;  // (n_buffers) the values (n_values), then the scratch buffers
	uint32_t n_values, n_buffers;
	case_launch *launches; // (n_launches)
	uint32_t n_launches;
	char kernels[512];     // the launches' kernels, "a+b"
} kernel_case;

static void die(const char *what, const f8_diag *diag) {
	fprintf(stderr, "gpu_kernel_check: %s: ", what);
	f8_diag_print(diag, stderr);
	exit(1);
}

static void *checked(void *pointer) {
	if (!pointer) {
		fprintf(stderr, "gpu_kernel_check: out of memory\n");
		exit(1);
	}
	return pointer;
}

static void manifest_error(const char *where, const char *what, const char *detail) {
	fprintf(stderr, "gpu_kernel_check: manifest: %s: %s %s\n", where, what, detail);
	exit(1);
}

static char *read_file(const char *path) {
	FILE *file = fopen(path, "rb");
	char *text = NULL;
	long size = file && fseek(file, 0, SEEK_END) == 0 ? ftell(file) : -1;
	if (size >= 0 && fseek(file, 0, SEEK_SET) == 0 && (text = malloc((size_t)size + 1))) {
		if (fread(text, 1, (size_t)size, file) == (size_t)size) {
			text[size] = '\0';
		} else {
			free(text);
			text = NULL;
		}
	}
	if (file)
		fclose(file);
	if (!text) {
		fprintf(stderr, "gpu_kernel_check: cannot read %s\n", path);
		exit(1);
	}
	return text;
}

/* The string member `key` of `object`; exits naming `where` when it is missing. */
static const char *get_string(json_t *object, const char *key, const char *where) {
	const char *text = json_string_value(json_object_get(object, key));
	if (!text)
		manifest_error(where, "has no string", key);
	return text;
}

static int64_t get_integer(json_t *object, const char *key, const char *where) {
	json_t *member = json_object_get(object, key);
	if (!json_is_integer(member))
		manifest_error(where, "has no integer", key);
	return json_integer_value(member);
}

static f8_dtype get_dtype(json_t *object, const char *where) {
	const char *name = get_string(object, "dtype", where);
	f8_dtype dtype;
	if (!f8_dtype_from_name(name, strlen(name), &dtype))
		manifest_error(where, "has an unknown dtype", name);
	return dtype;
}

/* Value `entry` of a case into *buffer. */
static void parse_value(json_t *entry, const char *where, case_buffer *buffer) {
	buffer->name = get_string(entry, "name", where);
	const char *use = get_string(entry, "use", where);
	if (strcmp(use, "in") == 0)
		buffer->use = USE_IN;
	else if (strcmp(use, "out") == 0)
		buffer->use = USE_OUT;
	else if (strcmp(use, "acc") == 0)
		buffer->use = USE_ACCUMULATE;
	else
		manifest_error(where, "has an unknown use", use);
	buffer->dtype = get_dtype(entry, where);
	buffer->count = get_integer(entry, "count", where);
	json_t *dims = json_object_get(entry, "dims");
	buffer->rank = (int)json_array_size(dims);
	if (buffer->rank > F8_MAX_RANK)
		manifest_error(where, "has a value of too high a rank:", buffer->name);
	for (int d = 0; d < buffer->rank; d++)
		buffer->dims[d] = json_integer_value(json_array_get(dims, (size_t)d));
	if (buffer->use == USE_IN)
		buffer->random = get_string(entry, "random", where);
	buffer->fp8_neighbour = json_is_true(json_object_get(entry, "fp8_neighbour"));
	buffer->rounded_twice = json_is_true(json_object_get(entry, "rounded_twice"));
	buffer->column_sum = json_is_true(json_object_get(entry, "column_sum"));
	buffer->jit_matches = json_is_true(json_object_get(entry, "jit_matches_reference"));
	const char *hash = json_string_value(json_object_get(entry, "jit_hash"));
	buffer->jit_hash = hash ? strtoull(hash, NULL, 16) : 0;
}

/* Launch `entry` of case `c` into *launch: its arguments bound to c's buffers. */
static void parse_launch(json_t *entry, kernel_case *c, case_launch *launch) {
	launch->kernel = get_string(entry, "kernel", c->name);
	json_t *geometry = json_object_get(entry, "geometry");
	launch->geometry = (f8_launch_geometry){
		.threads_per_block = (uint32_t)get_integer(geometry, "threads_per_block", c->name),
		.rows_per_block = (uint32_t)get_integer(geometry, "rows_per_block", c->name),
		.max_blocks = (uint32_t)get_integer(geometry, "max_blocks", c->name),
		.shared_bytes = (uint32_t)get_integer(geometry, "shared_bytes", c->name)};
	json_t *params = json_object_get(entry, "params");
	launch->n_params = (uint32_t)json_array_size(params);
	launch->sizes = checked(calloc(launch->n_params + 1, sizeof *launch->sizes));
	launch->args = checked(calloc(launch->n_params + 1, sizeof *launch->args));
	launch->table_json = checked(calloc(launch->n_params + 1, sizeof *launch->table_json));
	launch->tables = checked(calloc(launch->n_params + 1, sizeof *launch->tables));
	for (uint32_t p = 0; p < launch->n_params; p++) {
		json_t *param = json_array_get(params, p);
		json_t *value = json_object_get(param, "value"), *scratch = json_object_get(param,
											 "scratch");
		json_int_t index = -1;
		if (json_is_integer(value))
			index = json_integer_value(value);
		else if (json_is_integer(scratch))
			index = c->n_values + json_integer_value(scratch);
		if (json_is_object(json_object_get(param, "table"))) {
			launch->table_json[p] = json_object_get(param, "table");
			launch->args[p] = &launch->tables[p];
		} else if (json_is_integer(json_object_get(param, "size"))) {
			launch->sizes[p] = get_integer(param, "size", c->name);
			launch->args[p] = &launch->sizes[p];
		} else if (index >= 0 && index < (json_int_t)c->n_buffers) {
			launch->args[p] = &c->buffers[index].device;
		} else {
			manifest_error(c->name, "binds a parameter to no buffer:", launch->kernel);
		}
	}
	json_t *grid_sizes = json_object_get(entry, "grid_sizes");
	launch->rows = 1;
	for (size_t i = 0; i < json_array_size(grid_sizes); i++) {
		json_int_t p = json_integer_value(json_array_get(grid_sizes, i));
		if (p < 0 || p >= (json_int_t)launch->n_params ||
		    launch->args[p] != &launch->sizes[p])
			manifest_error(c->name, "names a grid size that is no size:", launch->kernel);
		launch->rows *= launch->sizes[p];
	}
	if (launch->rows != get_integer(entry, "rows", c->name))
		manifest_error(c->name, "has rows that disagree with the grid sizes of",
			       launch->kernel);
}

/* Reads case `entry` of the manifest into *c. */
static void parse_case(json_t *entry, kernel_case *c) {
	c->name = get_string(entry, "name", "a case");
	c->family = get_string(entry, "family", c->name);
	c->members = get_string(entry, "members", c->name);
	c->error = json_string_value(json_object_get(entry, "error"));
	c->error_scratch = (uint32_t)get_integer(entry, "error_scratch", c->name);
	json_t *values = json_object_get(entry, "values"), *scratch = json_object_get(entry,
										      "scratch");
	c->n_values = (uint32_t)json_array_size(values);
	c->n_buffers = c->n_values + (uint32_t)json_array_size(scratch);
	c->buffers = checked(calloc(c->n_buffers + 1, sizeof *c->buffers));
	for (uint32_t i = 0; i < c->n_values; i++)
		parse_value(json_array_get(values, i), c->name, &c->buffers[i]);
	for (uint32_t i = c->n_values; i < c->n_buffers; i++) {
		json_t *buffer = json_array_get(scratch, i - c->n_values);
		c->buffers[i] = (case_buffer){.name = "scratch", .use = USE_SCRATCH,
					      .dtype = get_dtype(buffer, c->name),
					      .count = get_integer(buffer, "count", c->name)};
	}
	for (uint32_t i = 0; i < c->n_buffers; i++)
		c->buffers[i].bytes = (size_t)c->buffers[i].count *
				      f8_dtype_get_info(c->buffers[i].dtype)->bytes;
	if (c->error && c->error_scratch >= c->n_buffers - c->n_values)
		manifest_error(c->name, "has an error flag in no scratch buffer", "");
	json_t *launches = json_object_get(entry, "launches");
	c->n_launches = (uint32_t)json_array_size(launches);
	c->launches = checked(calloc(c->n_launches + 1, sizeof *c->launches));
	size_t used = 0;
	for (uint32_t l = 0; l < c->n_launches; l++) {
		parse_launch(json_array_get(launches, l), c, &c->launches[l]);
		if (used < sizeof c->kernels)
			used += (size_t)snprintf(c->kernels + used, sizeof c->kernels - used, "%s%s",
						 l ? "+" : "", c->launches[l].kernel);
	}
}

static void free_case(kernel_case *c) {
	f8_diag diag = {0};
	for (uint32_t i = 0; i < c->n_buffers; i++)
		if (f8_cuda_free(c->buffers[i].device, &diag))
			die(c->name, &diag);
	for (uint32_t l = 0; l < c->n_launches; l++) {
		for (uint32_t p = 0; p < c->launches[l].n_params; p++)
			if (f8_cuda_free(c->launches[l].tables[p], &diag))
				die(c->name, &diag);
		free(c->launches[l].sizes);
		free(c->launches[l].args);
		free(c->launches[l].table_json);
		free(c->launches[l].tables);
	}
	free(c->launches);
	free(c->buffers);
}

/*
 * The device copy of a table parameter (make_kernel_cases.c's manifest says its form): each
 * row's i64s, a size column's cell its constant, an in or out column's the device address of
 * the case's value it names (0 for null). The buffers are allocated before.
 */
static f8_status make_table(const kernel_case *c, json_t *table, CUdeviceptr *device,
			    f8_diag *diag) {
	json_t *columns = json_object_get(table, "columns"), *rows = json_object_get(table, "rows");
	size_t n_columns = json_array_size(columns), n_rows = json_array_size(rows);
	int64_t *cells = checked(calloc(n_rows * n_columns + 1, sizeof *cells));
	for (size_t r = 0; r < n_rows; r++) {
		json_t *row = json_array_get(rows, r);
		if (json_array_size(row) != n_columns)
			manifest_error(c->name, "has a table row of another width", "");
		for (size_t k = 0; k < n_columns; k++) {
			json_t *cell = json_array_get(row, k);
			const char *kind = json_string_value(json_array_get(columns, k));
			bool address = kind && strcmp(kind, "size") != 0;
			json_int_t i = json_integer_value(cell);
			if (!json_is_null(cell) && (!json_is_integer(cell) ||
						    (address && (i < 0 || i >= (json_int_t)c->n_values))))
				manifest_error(c->name, "has a table cell that names no value", "");
			cells[r * n_columns + k] = json_is_null(cell) ? 0
				: address ? (int64_t)c->buffers[i].device : (int64_t)i;
		}
	}
	size_t bytes = n_rows * n_columns * sizeof *cells;
	f8_status status = bytes ? f8_cuda_alloc(bytes, device, diag) : F8_OK;
	if (!status && bytes)
		status = f8_cuda_copy_to_device(*device, cells, bytes, diag);
	free(cells);
	return status;
}

/* Finds every launch's function and allocates every buffer of the case, then the tables. */
static f8_status prepare(CUmodule module, kernel_case *c, f8_diag *diag) {
	f8_status status = F8_OK;
	for (uint32_t l = 0; !status && l < c->n_launches; l++)
		status = f8_cuda_module_function(module, c->launches[l].kernel,
						 &c->launches[l].function, diag);
	for (uint32_t i = 0; !status && i < c->n_buffers; i++)
		if (c->buffers[i].bytes)
			status = f8_cuda_alloc(c->buffers[i].bytes, &c->buffers[i].device, diag);
	for (uint32_t l = 0; !status && l < c->n_launches; l++)
		for (uint32_t p = 0; !status && p < c->launches[l].n_params; p++)
			if (c->launches[l].table_json[p])
				status = make_table(c, c->launches[l].table_json[p],
						    &c->launches[l].tables[p], diag);
	return status;
}

/* Outputs poisoned (0xFF bytes); what is only accumulated into and scratch zeroed; inputs
 * left alone. In stream order. */
static f8_status reset_outputs(kernel_case *c, bool poison, f8_diag *diag) {
	f8_status status = F8_OK;
	for (uint32_t i = 0; !status && i < c->n_buffers; i++) {
		const case_buffer *buffer = &c->buffers[i];
		if (buffer->use == USE_IN || !buffer->bytes || (buffer->use == USE_OUT && !poison))
			continue;
		status = f8_cuda_memset_async(buffer->device, buffer->use == USE_OUT ? 0xFF : 0,
					      buffer->bytes, 0, diag);
	}
	return status;
}

/* Queues the case's launches in order. */
static f8_status launch_all(const kernel_case *c, f8_diag *diag) {
	f8_status status = F8_OK;
	for (uint32_t l = 0; !status && l < c->n_launches; l++) {
		const case_launch *launch = &c->launches[l];
		status = f8_cuda_launch(launch->function, launch->kernel, &launch->geometry,
					launch->rows, launch->args, 0, diag);
	}
	return status;
}

/* The grid of each launch, "48x256" or "48x256+1x256". */
static void grid_text(const kernel_case *c, char *text, size_t capacity) {
	size_t used = 0;
	text[0] = '\0';
	for (uint32_t l = 0; l < c->n_launches && used < capacity; l++)
		used += (size_t)snprintf(text + used, capacity - used, "%s%ux%u", l ? "+" : "",
					 f8_launch_grid_blocks(&c->launches[l].geometry,
							     c->launches[l].rows),
					 c->launches[l].geometry.threads_per_block);
}

/* ---- check ---- */

typedef struct check_tally {
	int cases, failed;
	int outputs, identical_with_jit;
} check_tally;

/* The tensor "<case>.<value><suffix>" of the cases file, checked against the manifest. */
static void read_tensor(const f8_safetensors *file, const kernel_case *c,
			const case_buffer *buffer, const char *suffix, f8_rt_tensor *out) {
	char name[512];
	snprintf(name, sizeof name, "%s.%s%s", c->name, buffer->name, suffix);
	f8_diag diag = {0};
	if (f8_safetensors_read(file, name, out, &diag))
		die(name, &diag);
	if (out->dtype != buffer->dtype || f8_rt_tensor_numel(out) != buffer->count) {
		fprintf(stderr, "gpu_kernel_check: %s: dtype or size disagrees with the manifest\n",
			name);
		exit(1);
	}
}

/* Compares output `buffer` (its bytes in `got`) with the reference and the JIT; false when it
 * is outside the rule (printed, with whether the host JIT is outside it too). */
static bool check_output(const f8_safetensors *file, const kernel_case *c,
			 const case_buffer *buffer, const void *got, check_tally *tally) {
	f8_rt_tensor reference, magnitude = {0};
	read_tensor(file, c, buffer, ".reference", &reference);
	if (buffer->column_sum) { // f32, one per element: not of the buffer's dtype
		char name[512];
		snprintf(name, sizeof name, "%s.%s.magnitude", c->name, buffer->name);
		f8_diag diag = {0};
		if (f8_safetensors_read(file, name, &magnitude, &diag))
			die(name, &diag);
		if (f8_rt_tensor_numel(&magnitude) != buffer->count) {
			fprintf(stderr, "gpu_kernel_check: %s: size disagrees with the manifest\n",
				name);
			exit(1);
		}
	}
	case_comparison result;
	f8_case_compare(&reference, got, buffer->fp8_neighbour, buffer->rounded_twice,
			buffer->column_sum ? &magnitude : NULL, &result);
	f8_rt_tensor_destroy(&magnitude);
	bool identical = f8_case_hash(got, buffer->bytes) == buffer->jit_hash;
	tally->outputs++;
	tally->identical_with_jit += identical;
	if (result.bad)
		printf("     %%%s (%s): %lld of %lld elements differ; first at %lld: reference "
		       "%.9g, GPU %.9g; the host JIT %s, and the GPU's bytes %s the JIT's\n",
		       buffer->name, f8_dtype_name(buffer->dtype), (long long)result.bad,
		       (long long)result.count, (long long)result.first, result.want, result.got,
		       buffer->jit_matches ? "passes" : "fails too", identical ? "are" : "are not");
	f8_rt_tensor_destroy(&reference);
	return result.bad == 0;
}

/* The group's data-error flag (0: none), read after the launches. */
static int64_t error_flag(const kernel_case *c, f8_diag *diag) {
	int64_t flag = 0;
	const case_buffer *buffer = &c->buffers[c->n_values + c->error_scratch];
	if (c->error && buffer->bytes >= sizeof flag &&
	    f8_cuda_copy_to_host(&flag, buffer->device, sizeof flag, diag))
		die(c->name, diag);
	return flag;
}

/* Runs case `c` once and checks it. A CUDA failure (the context may be lost) ends the run. */
static void check_case(CUmodule module, const f8_safetensors *file, kernel_case *c,
		       check_tally *tally) {
	f8_diag diag = {0};
	if (prepare(module, c, &diag) || reset_outputs(c, true, &diag))
		die(c->name, &diag);
	for (uint32_t i = 0; i < c->n_values; i++) {
		case_buffer *buffer = &c->buffers[i];
		if (buffer->use != USE_IN || buffer->bytes == 0)
			continue;
		f8_rt_tensor input;
		read_tensor(file, c, buffer, "", &input);
		if (f8_cuda_copy_to_device(buffer->device, input.data, buffer->bytes, &diag))
			die(c->name, &diag);
		f8_rt_tensor_destroy(&input);
	}
	if (launch_all(c, &diag) || f8_cuda_synchronize(&diag)) {
		printf("FAIL %-18s %s: ", c->name, c->kernels);
		f8_diag_print(&diag, stdout);
		printf("the context is lost after a kernel fault: no further case can run\n");
		exit(1);
	}
	int64_t flag = error_flag(c, &diag);
	bool ok = flag == 0;
	if (flag)
		printf("     data error flagged: %s (row %lld); the host JIT flagged none\n", c->error,
		       (long long)(flag - 1));
	int outputs = 0, identical = tally->identical_with_jit;
	for (uint32_t i = 0; i < c->n_values; i++) {
		case_buffer *buffer = &c->buffers[i];
		if (buffer->use == USE_IN)
			continue;
		void *got = checked(malloc(buffer->bytes + 1));
		if (buffer->bytes && f8_cuda_copy_to_host(got, buffer->device, buffer->bytes, &diag))
			die(c->name, &diag);
		ok &= check_output(file, c, buffer, got, tally);
		outputs++;
		free(got);
	}
	tally->cases++;
	tally->failed += !ok;
	char grid[128];
	grid_text(c, grid, sizeof grid);
	printf("%s %-18s %-30s %-15s grid %s: %d outputs %s, %d bit-identical with the JIT  "
	       "[%s]\n",
	       ok ? "ok  " : "FAIL", c->name, c->kernels, c->family, grid, outputs,
	       ok ? "within tolerance" : "OUTSIDE tolerance", tally->identical_with_jit - identical,
	       c->members);
}

/* ---- bench ---- */

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static uint64_t next_random(void) { // splitmix64
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static double uniform(void) {
	return ((next_random() >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* One element of `dtype` drawn by `policy` (test_lower_groups.c's policy; the normal spread
 * fixed at 4, so that FP8 casts saturate at times), stored into `to`. */
static void draw(f8_dtype dtype, const char *policy, void *to) {
	double x, u = uniform();
	if (strcmp(policy, "scale") == 0)
		x = 0.25 + 7.75 * uniform();
	else if (strcmp(policy, "bool") == 0 || dtype == F8_DTYPE_BOOL)
		x = u < 0.5;
	else if (strcmp(policy, "label") == 0)
		x = u < 0.1 ? -100 : (double)(int)(50 * uniform());
	else if (strcmp(policy, "id") == 0)
		x = (double)(int)(50 * uniform());
	else if (strcmp(policy, "expert") == 0) // below 4: every MoE model here has as many
		x = (double)(int)(4 * uniform());
	else if (strcmp(policy, "amax") == 0)
		x = u < 0.1 ? NAN : u < 0.15 ? INFINITY : u < 0.2 ? 0 : 4.0 * uniform();
	else if (strcmp(policy, "moment") == 0)
		x = 4.0 * uniform();
	else if (strcmp(policy, "rate") == 0)
		x = 0.01 * u;
	else if (strcmp(policy, "step") == 0)
		x = 1 + (double)(int)(3000 * u);
	else if (strcmp(policy, "fraction") == 0)
		x = u;
	else
		x = 4.0 * sqrt(-2.0 * log(uniform())) * cos(6.283185307179586 * uniform());
	f8_rt_tensor one = {.dtype = dtype, .rank = 0, .data = to,
			    .n_bytes = f8_dtype_get_info(dtype)->bytes};
	f8_rt_tensor_set(&one, 0, x);
}

/* Random pools on the device, one per (dtype, policy), that inputs are tiled from: drawing
 * hundreds of megabytes on the host for every case would cost more than the run. A pool holds
 * up to POOL_ELEMENTS (64 MB of f32, beyond the 60 MB L2), fewer when no input needs more. */
enum { POOL_ELEMENTS = 1 << 24, MAX_POOLS = 24 };
typedef struct pool {
	f8_dtype dtype;
	const char *policy;
	CUdeviceptr device;
	size_t elements, bytes;
} pool;
static pool pools[MAX_POOLS];
static int n_pools;

/* The pool of (dtype, policy) holding at least min(count, POOL_ELEMENTS) elements, drawn and
 * uploaded now if no pool of that kind is large enough. */
static const pool *get_pool(f8_dtype dtype, const char *policy, int64_t count, f8_diag *diag) {
	size_t want = count < POOL_ELEMENTS ? (size_t)count : POOL_ELEMENTS;
	pool *made = NULL;
	for (int i = 0; i < n_pools && !made; i++)
		if (pools[i].dtype == dtype && strcmp(pools[i].policy, policy) == 0)
			made = &pools[i];
	if (made && made->elements >= want)
		return made;
	if (made) { // too small: drawn again, larger
		if (f8_cuda_free(made->device, diag))
			return NULL;
	} else if (n_pools == MAX_POOLS) {
		f8_diag_set(diag, F8_ERR_UNSUPPORTED, "more than %d random pools", MAX_POOLS);
		return NULL;
	} else {
		made = &pools[n_pools++];
	}
	size_t element = f8_dtype_get_info(dtype)->bytes;
	*made = (pool){.dtype = dtype, .policy = policy, .elements = want,
		       .bytes = want * element};
	unsigned char *host = checked(malloc(made->bytes + 1));
	for (size_t i = 0; i < want; i++)
		draw(dtype, policy, host + i * element);
	f8_status status = f8_cuda_alloc(made->bytes, &made->device, diag);
	if (!status)
		status = f8_cuda_copy_to_device(made->device, host, made->bytes, diag);
	free(host);
	return status ? NULL : made;
}

static f8_status fill_random(const case_buffer *buffer, f8_diag *diag) {
	const pool *source = get_pool(buffer->dtype, buffer->random, buffer->count, diag);
	if (!source)
		return diag->status;
	for (size_t at = 0; at < buffer->bytes; at += source->bytes) {
		size_t chunk = buffer->bytes - at < source->bytes ? buffer->bytes - at : source->bytes;
		f8_status status = f8_cuda_copy_device_async(buffer->device + at, source->device,
							     chunk, 0, diag);
		if (status)
			return status;
	}
	return F8_OK;
}

static int compare_floats(const void *a, const void *b) {
	float x = *(const float *)a, y = *(const float *)b;
	return (x > y) - (x < y);
}

static float median(float *values, int n) {
	qsort(values, (size_t)n, sizeof *values, compare_floats);
	return n % 2 ? values[n / 2] : 0.5f * (values[n / 2 - 1] + values[n / 2]);
}

/* The device-to-device copy's rate in GB/s (bytes read plus written), the median of TIMED
 * copies of 1 GiB after WARM_UP. */
static double copy_bandwidth(f8_diag *diag) {
	const size_t bytes = (size_t)1 << 30;
	CUdeviceptr to = 0;
	CUevent start = NULL, end = NULL;
	case_buffer from = {.dtype = F8_DTYPE_F32, .random = "normal", .bytes = bytes,
			    .count = (int64_t)(bytes / 4)};
	float times[TIMED];
	f8_status status = f8_cuda_alloc(bytes, &from.device, diag);
	if (!status)
		status = f8_cuda_alloc(bytes, &to, diag);
	if (!status)
		status = fill_random(&from, diag);
	if (!status)
		status = f8_cuda_event_create(&start, diag);
	if (!status)
		status = f8_cuda_event_create(&end, diag);
	for (int i = 0; !status && i < WARM_UP + TIMED; i++) {
		status = f8_cuda_event_record(start, 0, diag);
		if (!status)
			status = f8_cuda_copy_device_async(to, from.device, bytes, 0, diag);
		if (!status)
			status = f8_cuda_event_record(end, 0, diag);
		if (!status && i >= WARM_UP)
			status = f8_cuda_event_elapsed(start, end, &times[i - WARM_UP], diag);
	}
	if (!status)
		status = f8_cuda_synchronize(diag);
	if (!status)
		status = f8_cuda_free(from.device, diag);
	if (!status)
		status = f8_cuda_free(to, diag);
	if (status)
		die("copy bandwidth", diag);
	f8_cuda_event_destroy(start);
	f8_cuda_event_destroy(end);
	float ms = median(times, TIMED);
	double rate = 2.0 * (double)bytes / 1e9 / (ms / 1e3);
	printf("device-to-device copy: 1 GiB in %.3f ms (median of %d): %.0f GB/s counting bytes "
	       "read and written\n", ms, TIMED, rate);
	return rate;
}

/* Times case `c`: the median of TIMED runs of its launches after WARM_UP, what is accumulated
 * into and the scratch zeroed before each (outside the timed region). In milliseconds. */
static float time_case(kernel_case *c, f8_diag *diag) {
	CUevent start = NULL, end = NULL;
	float times[TIMED];
	f8_status status = f8_cuda_event_create(&start, diag);
	if (!status)
		status = f8_cuda_event_create(&end, diag);
	for (int i = 0; !status && i < WARM_UP + TIMED; i++) {
		status = reset_outputs(c, false, diag);
		if (!status)
			status = f8_cuda_event_record(start, 0, diag);
		if (!status)
			status = launch_all(c, diag);
		if (!status)
			status = f8_cuda_event_record(end, 0, diag);
		if (!status && i == WARM_UP - 1)
			status = f8_cuda_synchronize(diag); // a fault shows before the timing
		if (!status && i >= WARM_UP)
			status = f8_cuda_event_elapsed(start, end, &times[i - WARM_UP], diag);
	}
	if (!status)
		status = f8_cuda_synchronize(diag);
	if (status)
		die(c->name, diag);
	f8_cuda_event_destroy(start);
	f8_cuda_event_destroy(end);
	return median(times, TIMED);
}

/* The shape column: the dims of the case's largest value, "8x2048x8192". */
static void shape_text(const kernel_case *c, char *text, size_t capacity) {
	const case_buffer *largest = NULL;
	for (uint32_t i = 0; i < c->n_values; i++)
		if (!largest || c->buffers[i].count > largest->count)
			largest = &c->buffers[i];
	size_t used = 0;
	text[0] = '\0';
	for (int d = 0; largest && d < largest->rank && used < capacity; d++)
		used += (size_t)snprintf(text + used, capacity - used, "%s%lld", d ? "x" : "",
					 (long long)largest->dims[d]);
}

/* One timed case, for the summary. */
typedef struct bench_row {
	const char *family, *members; // the manifest's
	char shape[128];
	double bytes;
	float ms;
} bench_row;

static bench_row bench_case(CUmodule module, kernel_case *c, double copy_rate) {
	f8_diag diag = {0};
	if (prepare(module, c, &diag))
		die(c->name, &diag);
	bench_row row = {.family = c->family, .members = c->members};
	for (uint32_t i = 0; i < c->n_values; i++) {
		const case_buffer *buffer = &c->buffers[i];
		row.bytes += (double)buffer->bytes;
		if (buffer->use == USE_IN && buffer->bytes && fill_random(buffer, &diag))
			die(c->name, &diag);
	}
	row.ms = time_case(c, &diag);
	double rate = row.bytes / 1e9 / (row.ms / 1e3);
	char grid[128];
	shape_text(c, row.shape, sizeof row.shape);
	grid_text(c, grid, sizeof grid);
	printf("| %-24s | %-15s | %-34s | %-13s | %8.1f | %8.1f | %6.0f | %5.1f%% | %s |\n",
	       c->kernels, c->family, c->members, row.shape, row.bytes / 1e6, row.ms * 1e3, rate,
	       100.0 * rate / copy_rate, grid);
	return row;
}

static bool same_kind(const bench_row *a, const bench_row *b) {
	return strcmp(a->family, b->family) == 0 && strcmp(a->members, b->members) == 0 &&
	       strcmp(a->shape, b->shape) == 0 && a->bytes == b->bytes;
}

/*
 * The table of cases that differ only in constants (the layers' scaling-table slots make most
 * kernels distinct): one line per family, members and shape, with how many cases and the
 * median of their times; then all of them together, each run once.
 */
static void print_summary(bench_row *rows, size_t n, double copy_rate) {
	printf("\nsummary (cases alike but for constants; time: the median over them):\n"
	       "| family | members | shape (largest) | cases | MB moved | time (us) | GB/s | "
	       "%% of copy |\n| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |\n");
	bool *done = checked(calloc(n + 1, sizeof *done));
	float *times = checked(calloc(n + 1, sizeof *times));
	double total_bytes = 0, total_ms = 0;
	for (size_t i = 0; i < n; i++) {
		total_bytes += rows[i].bytes;
		total_ms += rows[i].ms;
		if (done[i])
			continue;
		int count = 0;
		for (size_t j = i; j < n; j++)
			if (!done[j] && same_kind(&rows[i], &rows[j])) {
				done[j] = true;
				times[count++] = rows[j].ms;
			}
		float ms = median(times, count);
		double rate = rows[i].bytes / 1e9 / (ms / 1e3);
		printf("| %s | %s | %s | %d | %.1f | %.1f | %.0f | %.1f%% |\n", rows[i].family,
		       rows[i].members, rows[i].shape, count, rows[i].bytes / 1e6, ms * 1e3, rate,
		       100.0 * rate / copy_rate);
	}
	double rate = total_bytes / 1e9 / (total_ms / 1e3);
	printf("| all | | | %zu | %.1f | %.1f | %.0f | %.1f%% |\n", n, total_bytes / 1e6,
	       total_ms * 1e3, rate, 100.0 * rate / copy_rate);
	free(done);
	free(times);
}

int main(int argc, char **argv) {
	bool bench = argc == 3 && strcmp(argv[1], "--bench") == 0;
	if (argc != 2 && !bench) {
		fprintf(stderr, "usage: gpu_kernel_check CASES_DIR\n"
				"       gpu_kernel_check --bench BENCH_DIR\n");
		return 2;
	}
	const char *dir = argv[argc - 1];
	setvbuf(stdout, NULL, _IOLBF, 0); // each line out at once: a run cut short keeps them
	char path[1024];
	f8_diag diag = {0};
	f8_cuda_device device;
	if (f8_cuda_open(&device, &diag))
		die("CUDA", &diag);
	printf("device: %s, sm_%d%d, %d SMs, %.1f GiB, driver %d.%d\n", device.name,
	       device.compute_major, device.compute_minor, device.multiprocessors,
	       (double)device.total_memory / (1u << 30), device.driver_version / 1000,
	       device.driver_version % 1000 / 10);
	snprintf(path, sizeof path, "%s/kernels.ptx", dir);
	char *ptx = read_file(path);
	CUmodule module;
	if (f8_cuda_module_load(ptx, &module, &diag))
		die(path, &diag);
	free(ptx);
	snprintf(path, sizeof path, "%s/manifest.json", dir);
	json_error_t error;
	json_t *manifest = json_load_file(path, 0, &error);
	if (!manifest) {
		fprintf(stderr, "gpu_kernel_check: %s:%d: %s\n", path, error.line, error.text);
		return 1;
	}
	json_t *cases = json_object_get(manifest, "cases");
	f8_safetensors *file = NULL;
	if (!bench) {
		snprintf(path, sizeof path, "%s/%s", dir, get_string(manifest, "data", "manifest"));
		if (f8_safetensors_open(path, &file, &diag))
			die(path, &diag);
	}
	check_tally tally = {0};
	double copy_rate = 0;
	size_t n_cases = json_array_size(cases);
	bench_row *rows = checked(calloc(n_cases + 1, sizeof *rows));
	if (bench) {
		copy_rate = copy_bandwidth(&diag);
		printf("\n| kernels | family | members | shape (largest) | MB moved | time (us) | "
		       "GB/s | %% of copy | grid x block |\n| --- | --- | --- | --- | ---: | ---: | "
		       "---: | ---: | ---: |\n");
	}
	for (size_t i = 0; i < n_cases; i++) {
		kernel_case c = {0};
		parse_case(json_array_get(cases, i), &c);
		if (bench)
			rows[i] = bench_case(module, &c, copy_rate);
		else
			check_case(module, file, &c, &tally);
		free_case(&c);
	}
	int status = 0;
	if (bench) {
		print_summary(rows, n_cases, copy_rate);
	} else {
		printf("%d cases: %d passed, %d failed; %d of %d outputs bit-identical with the host "
		       "JIT's\n",
		       tally.cases, tally.cases - tally.failed, tally.failed, tally.identical_with_jit,
		       tally.outputs);
		status = tally.failed ? 1 : 0;
	}
	for (int i = 0; i < n_pools; i++)
		f8_cuda_free(pools[i].device, &diag);
	free(rows);
	f8_safetensors_close(file);
	json_decref(manifest);
	f8_cuda_module_unload(module);
	f8_cuda_close(&device);
	return status;
}
