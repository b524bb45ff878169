/*
 * Plans on disk (runtime/plan.h): writing plan.json, kernels.ptx and weights.safetensors, and
 * loading them back with every check, against the record itself.
 */
#define _POSIX_C_SOURCE 200809L // mkdir, stat

#include "runtime/plan.h" // f8_plan, f8_plan_write, f8_plan_load

#include <errno.h>    // errno
#include <inttypes.h> // PRIx64
#include <math.h>     // isfinite
#include <stdarg.h>   // va_list
#include <stdio.h>    // snprintf
#include <stdlib.h>   // free (jansson's and the text printer's buffers), strtoll
#include <string.h>   // strcmp, strlen, strstr, strerror
#include <sys/stat.h> // mkdir, stat

#include <jansson.h> // json_t

#include "ir/alloc.h"            // f8_malloc, f8_calloc, f8_free
#include "ir/text.h"             // f8_text_print_string, f8_text_parse, f8_dim_format
#include "ir/verify.h"           // f8_graph_verify, f8_graph_verify_buffers
#include "runtime/atomic_file.h" // f8_atomic_file_*
#include "runtime/parameters.h"  // f8_rt_parameters_read_initializer

/* A parameter kind from its name in plan.json. */
static bool param_kind_from_name(const char *name, f8_kernel_param_kind *out) {
	return name && f8_kernel_param_kind_from_name(name, strlen(name), out);
}

static const char WEIGHTS[] = "weights.safetensors";
static const char PTX[] = "kernels.ptx";

#define FNV1A64_BASIS 14695981039346656037ull

/* FNV-1a, 64 bits, of `n` bytes continuing from `hash` (FNV1A64_BASIS to start): a check that a
 * file or the record is the one the plan was written with. */
static uint64_t fnv1a64(uint64_t hash, const void *bytes, size_t n) {
	const unsigned char *c = bytes;
	for (size_t i = 0; i < n; i++) {
		hash ^= c[i];
		hash *= 1099511628211ull;
	}
	return hash;
}

static void hex64(uint64_t value, char out[17]) {
	snprintf(out, 17, "%016" PRIx64, value);
}

f8_status f8_plan_create(f8_graph *graph, f8_plan **out, f8_diag *diag) {
	*out = NULL;
	f8_plan *plan = f8_calloc(1, sizeof *plan);
	if (!plan || !(plan->arena = f8_arena_create())) {
		f8_free(plan);
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	}
	plan->graph = graph;
	*out = plan;
	return F8_OK;
}

void f8_plan_destroy(f8_plan *plan) {
	if (!plan)
		return;
	f8_graph_destroy(plan->graph);
	f8_free(plan->ptx);
	f8_safetensors_close(plan->weights);
	f8_arena_destroy(plan->arena);
	f8_free(plan);
}

f8_status f8_plan_record_weight_init(f8_plan *plan, uint64_t seed, const char *model,
				     f8_diag *diag) {
	const f8_graph *graph = plan->graph;
	if (seed > INT64_MAX) // plan.json's integers are signed 64-bit
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "--weights seed: seed %llu is past 2^63 - 1",
				   (unsigned long long)seed);
	f8_plan_weight_init *record = f8_arena_alloc(plan->arena, sizeof *record);
	if (record)
		record->weights = f8_arena_alloc_array(plan->arena, graph->n_inputs + 1,
						       sizeof *record->weights);
	if (!record || !record->weights)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	record->seed = seed;
	int64_t layers = f8_weight_init_layers(graph);
	for (uint32_t i = 0; i < graph->n_inputs; i++) {
		f8_value_id v = graph->inputs[i];
		const f8_value *value = &graph->values[v];
		if (value->role != F8_ROLE_PARAMETER)
			continue;
		if (value->initializer) {
			f8_diag_set(diag, F8_ERR_ARGUMENT, "%s: --weights seed is for a model without "
				    "weights of its own, but parameter %%%s has weights in the model",
				    model ? model : "the model", value->name);
			f8_diag_hint(diag, "leave out --weights seed (or give --weights file): the "
				     "plan's weights.safetensors then holds the model's weights");
			return F8_ERR_ARGUMENT;
		}
		record->weights[record->n_weights++] = (f8_plan_made_weight){
			.value = v, .rule = f8_weight_init_rule(graph, v, layers),
			.dtype = value->type.dtype};
	}
	plan->weight_init = record;
	return F8_OK;
}

bool f8_plan_is_dir(const char *path) {
	struct stat folder, file;
	char plan[4096];
	snprintf(plan, sizeof plan, "%s/plan.json", path);
	return stat(path, &folder) == 0 && S_ISDIR(folder.st_mode) && stat(plan, &file) == 0;
}

/* ---- Writing ---------------------------------------------------------------------------- */

/* A table's contents: {"columns": [{"name", "kind"}...], "rows": ["0 4096 %w %w.grad", ...]},
 * a row as one line of text, its cells a constant (decimal) or a value's address (%value). */
static json_t *table_json(const f8_graph *graph, const f8_plan_table *table) {
	json_t *columns = json_array(), *rows = json_array();
	for (uint32_t c = 0; columns && c < table->n_columns; c++)
		json_array_append_new(columns, json_pack("{s:s, s:s}", "name", table->names[c], "kind",
							 f8_kernel_param_kind_name(table->columns[c])));
	for (uint32_t r = 0; rows && r < table->n_rows; r++) {
		char text[4096];
		size_t used = 0;
		for (uint32_t c = 0; c < table->n_columns && used < sizeof text; c++) {
			size_t i = (size_t)r * table->n_columns + c;
			if (table->values[i] == F8_NONE)
				used += (size_t)snprintf(text + used, sizeof text - used, "%s%lld",
							 c ? " " : "", (long long)table->constants[i]);
			else
				used += (size_t)snprintf(text + used, sizeof text - used, "%s%%%s",
							 c ? " " : "", graph->values[table->values[i]].name);
		}
		json_array_append_new(rows, json_string(text));
	}
	return json_pack("{s:o, s:o}", "columns", columns, "rows", rows);
}

/* A parameter's binding as text: "%value", "scratch2", or a dim ("batch*seq", "768"); a
 * table's as table_json's object. */
static json_t *arg_json(const f8_graph *graph, const f8_plan_param *param, const f8_plan_arg *arg) {
	char text[160];
	if (param->kind == F8_KERNEL_PARAM_TABLE)
		return arg->table ? table_json(graph, arg->table) : json_null();
	if (param->kind == F8_KERNEL_PARAM_SIZE)
		return json_string(f8_dim_format(graph, arg->dim, text, sizeof text));
	if (arg->scratch != F8_NONE)
		snprintf(text, sizeof text, "scratch%u", arg->scratch);
	else
		snprintf(text, sizeof text, "%%%s", graph->values[arg->value].name);
	return json_string(text);
}

static json_t *kernels_json(const f8_plan *plan) {
	json_t *kernels = json_array();
	for (uint32_t k = 0; kernels && k < plan->n_kernels; k++) {
		const f8_plan_kernel *kernel = &plan->kernels[k];
		const f8_launch_geometry *g = &kernel->geometry;
		json_t *params = json_array(), *grid = json_array();
		for (uint32_t p = 0; params && p < kernel->n_params; p++)
			json_array_append_new(params, json_pack("{s:s, s:s, s:s}", "name",
				kernel->params[p].name, "kind",
				f8_kernel_param_kind_name(kernel->params[p].kind), "dtype",
				f8_dtype_name(kernel->params[p].dtype)));
		for (uint32_t i = 0; grid && i < kernel->n_grid_sizes; i++)
			json_array_append_new(grid, json_integer(kernel->grid_sizes[i]));
		json_array_append_new(kernels, json_pack(
			"{s:s, s:o, s:i, s:i, s:i, s:i, s:o}", "name", kernel->name, "params", params,
			"threads_per_block", (json_int_t)g->threads_per_block, "rows_per_block",
			(json_int_t)g->rows_per_block, "max_blocks", (json_int_t)g->max_blocks,
			"shared_bytes", (json_int_t)g->shared_bytes, "grid_sizes", grid));
	}
	return kernels;
}

static json_t *groups_json(const f8_plan *plan) {
	const f8_graph *graph = plan->graph;
	json_t *groups = json_array();
	for (uint32_t g = 0; groups && g < plan->n_groups; g++) {
		const f8_plan_group *group = &plan->groups[g];
		json_t *launches = json_array(), *scratch = json_array();
		for (uint32_t l = 0; launches && l < group->n_launches; l++) {
			const f8_plan_kernel *kernel = &plan->kernels[group->launches[l].kernel];
			json_t *args = json_array();
			for (uint32_t p = 0; args && p < kernel->n_params; p++)
				json_array_append_new(args, arg_json(graph, &kernel->params[p],
								     &group->launches[l].args[p]));
			json_array_append_new(launches, json_pack("{s:s, s:o}", "kernel", kernel->name,
								   "args", args));
		}
		for (uint32_t s = 0; scratch && s < group->n_scratch; s++) {
			char count[160];
			json_array_append_new(scratch, json_pack("{s:s, s:s}", "dtype",
				f8_dtype_name(group->scratch[s].dtype), "count",
				f8_dim_format(graph, group->scratch[s].count, count, sizeof count)));
		}
		const f8_kernel_group *named = &graph->groups[g];
		json_t *entry = json_pack("{s:s, s:s, s:s, s:o, s:o}", "name", named->name, "family",
					  f8_kernel_family_name(named->family), "reason",
					  named->reason, "launches", launches, "scratch", scratch);
		if (entry && group->error)
			json_object_set_new(entry, "error", json_pack("{s:s, s:i}", "message",
				group->error, "scratch", (json_int_t)group->error_scratch));
		json_array_append_new(groups, entry);
	}
	return groups;
}

f8_status f8_plan_scratch_layout(const f8_plan *plan, const int64_t *symbol_values, uint64_t **at,
				 uint64_t *shared, uint64_t *bytes, f8_diag *diag) {
	uint64_t most = 0, errors = 0;
	for (int pass = 0; pass < 2; pass++) { // the shared region's size, then the offsets
		errors = 0;
		for (uint32_t g = 0; g < plan->n_groups; g++) {
			const f8_plan_group *group = &plan->groups[g];
			uint64_t used = 0;
			for (uint32_t s = 0; s < group->n_scratch; s++) {
				int64_t count;
				bool known = symbol_values
						     ? f8_dim_evaluate(group->scratch[s].count, symbol_values,
								       &count)
						     : f8_dim_is_const(group->scratch[s].count) &&
							       (count = f8_dim_value(group->scratch[s].count), true);
				if (!known || count < 0)
					return f8_diag_set(diag, F8_ERR_ARGUMENT, "group %u: a scratch "
							   "buffer's size does not evaluate", g);
				uint64_t size = f8_memory_aligned(
					(uint64_t)count * f8_dtype_get_info(group->scratch[s].dtype)->bytes);
				bool error = group->error && group->error_scratch == s + 1;
				if (pass && at && at[g])
					at[g][s] = error ? most + errors : used;
				*(error ? &errors : &used) += size;
			}
			most = used > most ? used : most;
			if (pass && shared)
				shared[g] = used;
		}
	}
	*bytes = most + errors;
	return F8_OK;
}

f8_memory_estimate f8_plan_memory(const f8_plan *plan) {
	f8_memory_estimate estimate = f8_memory_estimate_of(plan->graph);
	uint64_t scratch = 0;
	if (!f8_plan_scratch_layout(plan, NULL, NULL, NULL, &scratch, NULL))
		f8_memory_estimate_add(&estimate, F8_MEMORY_WORKSPACES, scratch);
	return estimate;
}

/* plan.json's "memory": the estimate by part, derived from the plan (nothing reads it back). */
static json_t *memory_json(const f8_plan *plan) {
	f8_memory_estimate estimate = f8_plan_memory(plan);
	json_t *parts = json_object();
	for (int part = 0; parts && part < F8_MEMORY_PART_COUNT; part++)
		json_object_set_new(parts, f8_memory_part_name((f8_memory_part)part),
				    json_integer((json_int_t)estimate.part[part]));
	return json_pack("{s:b, s:o, s:I, s:I, s:I, s:s}", "planned", estimate.planned, "bytes",
			 parts, "saved_activations", (json_int_t)estimate.saved_activations,
			 "recomputed_activations", (json_int_t)estimate.recomputed_activations,
			 "total", (json_int_t)estimate.total, "note", "per GPU, a training step: "
			 "leaves and slab exact, cuBLASLt's workspace and f8c's tensors in cuDNN's "
			 "by the CUDA backend's rules, the CUDA runtime as measured on an H200 "
			 "(ir/memory.h); f8c audit --memory prints it");
}

static json_t *estimates_json(const f8_plan_estimates *e) {
	return json_pack("{s:i, s:o, s:o, s:s}", "kernel_launches", (json_int_t)e->kernel_launches,
			 "gemm_flops", e->gemm_flops >= 0 ? json_real(e->gemm_flops) : json_null(),
			 "kernel_bytes", e->kernel_bytes >= 0 ? json_real(e->kernel_bytes)
							       : json_null(),
			 "note", "per micro-batch, every phase once; GEMM FLOPs are 2 m n k of the "
			 "graph's GEMMs (attention's are cuDNN's, not counted); bytes are what the "
			 "generated kernels read and write");
}

/* Writes `n` bytes of `text` to `path` atomically. */
static f8_status write_file(const char *path, const char *text, size_t n, f8_diag *diag) {
	f8_atomic_file *file;
	f8_status status = f8_atomic_file_open(path, &file, diag);
	if (!status)
		status = f8_atomic_file_write(file, text, n, diag);
	if (!status)
		return f8_atomic_file_commit(file, diag);
	if (file)
		f8_atomic_file_abort(file);
	return status;
}

/* The whole file at `path` into *out (f8_malloc'd, terminated), its size into *len. */
static f8_status read_bytes(const char *path, char **out, size_t *len, f8_diag *diag) {
	*out = NULL;
	FILE *file = fopen(path, "rb");
	if (!file)
		return f8_diag_set_in_file(diag, path, F8_ERR_IO, "cannot read: %s", strerror(errno));
	long size = fseek(file, 0, SEEK_END) == 0 ? ftell(file) : -1;
	char *text = size >= 0 && fseek(file, 0, SEEK_SET) == 0 ? f8_malloc((size_t)size + 1) : NULL;
	bool ok = text && fread(text, 1, (size_t)size, file) == (size_t)size;
	fclose(file);
	if (!ok) {
		f8_free(text);
		return f8_diag_set_in_file(diag, path, text ? F8_ERR_IO : F8_ERR_NOMEM,
					   text ? "cannot read it whole" : "out of memory");
	}
	text[size] = '\0';
	*out = text;
	*len = (size_t)size;
	return F8_OK;
}

/* weights.safetensors: every leaf with an initializer, converted to the leaf's dtype. */
static f8_status write_weights(const char *path, const f8_graph *graph, f8_diag *diag) {
	uint32_t n = 0;
	const char **names = f8_calloc(graph->n_inputs + 1, sizeof *names);
	f8_rt_tensor *tensors = f8_calloc(graph->n_inputs + 1, sizeof *tensors);
	const f8_rt_tensor **pointers = f8_calloc(graph->n_inputs + 1, sizeof *pointers);
	f8_status status = names && tensors && pointers
				   ? F8_OK : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	for (uint32_t i = 0; !status && i < graph->n_inputs; i++) {
		const f8_value *value = &graph->values[graph->inputs[i]];
		if (!value->initializer)
			continue;
		status = f8_rt_parameters_read_initializer(value, graph->mesh, &tensors[n], diag);
		names[n] = value->name;
		pointers[n] = &tensors[n];
		n += !status;
	}
	if (!status)
		status = f8_safetensors_write(path, names, pointers, n, NULL, NULL, 0, diag);
	for (uint32_t i = 0; tensors && i < n; i++)
		f8_rt_tensor_destroy(&tensors[i]);
	f8_free(names);
	f8_free(tensors);
	f8_free(pointers);
	return status;
}

/* plan.json's "weight_init" (runtime/plan.h): the rule, its version, the seed, and each made
 * parameter's rule and dtype, by name. */
static json_t *weight_init_json(const f8_plan *plan) {
	const f8_plan_weight_init *record = plan->weight_init;
	json_t *weights = json_array();
	for (uint32_t w = 0; weights && w < record->n_weights; w++) {
		const f8_plan_made_weight *made = &record->weights[w];
		json_t *entry = json_pack("{s:s, s:s, s:s}", "name",
					  plan->graph->values[made->value].name, "init",
					  f8_weight_init_kind_name(made->rule.kind), "dtype",
					  f8_dtype_name(made->dtype));
		// A real prints with 17 digits, so the std reads back as the same double.
		if (entry && made->rule.kind == F8_WEIGHT_INIT_NORMAL)
			json_object_set_new(entry, "std", json_real(made->rule.std));
		json_array_append_new(weights, entry);
	}
	return json_pack("{s:s, s:i, s:I, s:o, s:s}", "rule", F8_WEIGHT_INIT_RULE_NAME,
			 "rule_version", (json_int_t)F8_WEIGHT_INIT_RULE_VERSION, "seed",
			 (json_int_t)record->seed, "weights", weights, "note",
			 "each parameter is made where the plan runs, by f8_weight_init_fill "
			 "(ir/weight_init.h) from the seed and its name, rounded to its dtype; "
			 "the run's --seed orders the data only");
}

/* The size and checksum of the file at `path`, read in chunks (weights may be gigabytes). */
static f8_status checksum_file(const char *path, size_t *len, char checksum[17], f8_diag *diag) {
	FILE *file = fopen(path, "rb");
	if (!file)
		return f8_diag_set_in_file(diag, path, F8_ERR_IO, "cannot read: %s", strerror(errno));
	enum { CHUNK = 1 << 20 };
	char *chunk = f8_malloc(CHUNK);
	uint64_t hash = FNV1A64_BASIS;
	size_t n;
	*len = 0;
	while (chunk && (n = fread(chunk, 1, CHUNK, file)) > 0) {
		hash = fnv1a64(hash, chunk, n);
		*len += n;
	}
	bool no_memory = !chunk, failed = no_memory || ferror(file);
	fclose(file);
	f8_free(chunk);
	if (failed)
		return f8_diag_set_in_file(diag, path, no_memory ? F8_ERR_NOMEM : F8_ERR_IO,
					   no_memory ? "out of memory" : "cannot read it whole");
	hex64(hash, checksum);
	return F8_OK;
}

/* {"file", "bytes", "fnv1a64"} of the file at `path`. */
static f8_status file_record(const char *path, const char *name, json_t **out, f8_diag *diag) {
	size_t len;
	char checksum[17];
	f8_status status = checksum_file(path, &len, checksum, diag);
	if (status)
		return status;
	*out = json_pack("{s:s, s:I, s:s}", "file", name, "bytes", (json_int_t)len, "fnv1a64",
			 checksum);
	return *out ? F8_OK : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
}

/* The digest of `document` without its "digest" key: FNV-1a 64 of its compact dump with the
 * keys sorted, which a load of the written file reproduces exactly. */
static bool digest_of(json_t *document, char out[17]) {
	json_t *copy = json_copy(document);
	if (!copy)
		return false;
	json_object_del(copy, "digest");
	char *text = json_dumps(copy, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII);
	json_decref(copy);
	if (!text)
		return false;
	hex64(fnv1a64(FNV1A64_BASIS, text, strlen(text)), out);
	free(text);
	return true;
}

static json_t *strings_json(const char *const *strings, uint32_t n) {
	json_t *array = json_array();
	for (uint32_t i = 0; array && i < n; i++)
		json_array_append_new(array, json_string(strings[i]));
	return array;
}

f8_status f8_plan_write(const char *dir, const f8_plan *plan, f8_diag *diag) {
	if (mkdir(dir, 0777) != 0 && errno != EEXIST)
		return f8_diag_set_in_file(diag, dir, F8_ERR_IO, "cannot make the plan folder: %s",
					   strerror(errno));
	char weights[4096], ptx[4096], record[4096];
	snprintf(weights, sizeof weights, "%s/%s", dir, WEIGHTS);
	snprintf(ptx, sizeof ptx, "%s/%s", dir, PTX);
	snprintf(record, sizeof record, "%s/plan.json", dir);
	json_t *weights_record = NULL, *ptx_record = NULL, *document = NULL;
	const char *text = plan->ptx ? plan->ptx : "";
	f8_status status = write_weights(weights, plan->graph, diag);
	if (!status)
		status = file_record(weights, WEIGHTS, &weights_record, diag);
	if (!status)
		status = write_file(ptx, text, strlen(text), diag);
	if (!status)
		status = file_record(ptx, PTX, &ptx_record, diag);
	char *graph_text = NULL;
	size_t graph_len = 0;
	if (!status && f8_text_print_string(plan->graph, &graph_text, &graph_len))
		status = f8_diag_set(diag, F8_ERR_NOMEM, "cannot print the graph: out of memory");
	if (!status)
		document = json_pack(
			"{s:s, s:i, s:s, s:s, s:o, s:b, s:s, s:o, s:o, s:o, s:o, s:{s:b, s:I, s:s}, "
			"s:O, s:O}", "format", F8_PLAN_FORMAT, "format_version", F8_PLAN_FORMAT_VERSION,
			"f8c_version", plan->f8c_version, "model", plan->model ? plan->model : "",
			"compile_args", strings_json(plan->compile_args, plan->n_compile_args),
			"training", plan->training, "graph", graph_text, "kernels", kernels_json(plan),
			"groups", groups_json(plan), "estimates", estimates_json(&plan->estimates),
			"memory", memory_json(plan),
			"buffers", "planned", plan->slab_bytes > 0, "slab_bytes",
			(json_int_t)plan->slab_bytes, "note", "each value's offset in the slab is in "
			"the graph (offset=); leaves and the values written in place of them are not "
			"in the slab", "kernels_ptx", ptx_record, "weights", weights_record);
	f8_free(graph_text);
	if (!status && document && plan->weight_init &&
	    json_object_set_new(document, "weight_init", weight_init_json(plan)))
		status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory writing the plan");
	char digest[17];
	if (!status && (!document || !digest_of(document, digest) ||
			json_object_set_new(document, "digest", json_string(digest))))
		status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory writing the plan");
	char *json_text = status ? NULL : json_dumps(document, JSON_INDENT(1) | JSON_ENSURE_ASCII);
	if (!status && !json_text)
		status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory writing the plan");
	if (!status)
		status = write_file(record, json_text, strlen(json_text), diag);
	free(json_text);
	json_decref(document);
	json_decref(weights_record);
	json_decref(ptx_record);
	return status;
}

/* ---- Loading ---------------------------------------------------------------------------- */

/* A consistency check that failed: what, and the mend. */
static f8_status inconsistent(f8_diag *diag, const char *dir, const char *format, ...)
	__attribute__((format(printf, 3, 4)));
static f8_status inconsistent(f8_diag *diag, const char *dir, const char *format, ...) {
	char message[F8_DIAG_MESSAGE_MAX];
	va_list args;
	va_start(args, format);
	vsnprintf(message, sizeof message, format, args);
	va_end(args);
	f8_diag_set(diag, F8_ERR_INVALID, "%s/plan.json: %s", dir, message);
	f8_diag_hint(diag, "the plan was edited or damaged after f8c compile wrote it: compile the "
		     "model again (f8c compile MODEL ... -o %s)", dir);
	return F8_ERR_INVALID;
}

/* plan.json's header: format, version, the f8c that wrote it. */
static f8_status check_header(const char *dir, json_t *document, const char *f8c_version,
			      f8_diag *diag) {
	const char *format = json_string_value(json_object_get(document, "format"));
	json_t *version = json_object_get(document, "format_version");
	const char *writer = json_string_value(json_object_get(document, "f8c_version"));
	char path[4096];
	snprintf(path, sizeof path, "%s/plan.json", dir);
	if (!format || strcmp(format, F8_PLAN_FORMAT) != 0) {
		f8_diag_set_in_file(diag, path, F8_ERR_PARSE, "not an f8c plan (no \"format\": \"%s\")",
				    F8_PLAN_FORMAT);
		f8_diag_hint(diag, "f8c compile MODEL -o DIR writes a plan");
		return F8_ERR_PARSE;
	}
	if (json_integer_value(version) != F8_PLAN_FORMAT_VERSION || !writer ||
	    strcmp(writer, f8c_version) != 0) {
		f8_diag_set_in_file(diag, path, F8_ERR_INVALID, "a plan of format version %lld written "
				    "by f8c %s; this is f8c %s, which reads version %d",
				    (long long)json_integer_value(version), writer ? writer : "?",
				    f8c_version, F8_PLAN_FORMAT_VERSION);
		f8_diag_hint(diag, "compile the model again with this f8c (f8c compile MODEL ... -o %s)",
			     dir);
		return F8_ERR_INVALID;
	}
	return F8_OK;
}

static const char *keep(f8_plan *plan, const char *text) {
	return text ? f8_arena_strdup(plan->arena, text) : NULL;
}

/* The model, the compile arguments and the mode into *plan. */
static f8_status read_origin(const char *dir, json_t *document, f8_plan *plan, f8_diag *diag) {
	const char *model = json_string_value(json_object_get(document, "model"));
	json_t *args = json_object_get(document, "compile_args");
	if (!model || !json_is_array(args) || !json_is_boolean(json_object_get(document, "training")))
		return inconsistent(diag, dir, "it lacks the model, the compile arguments or the mode");
	plan->training = json_is_true(json_object_get(document, "training"));
	plan->model = keep(plan, model);
	plan->f8c_version = keep(plan, json_string_value(json_object_get(document, "f8c_version")));
	plan->compile_args = f8_arena_alloc_array(plan->arena, json_array_size(args) + 1,
						  sizeof *plan->compile_args);
	if (!plan->model || !plan->f8c_version || !plan->compile_args)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < json_array_size(args); i++) {
		const char *arg = json_string_value(json_array_get(args, i));
		if (!arg)
			return inconsistent(diag, dir, "compile argument %zu is not a string", i);
		if (!(plan->compile_args[plan->n_compile_args++] = keep(plan, arg)))
			return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	}
	return F8_OK;
}

/* An unsigned 32-bit field of `object` into *out; false when it is missing or out of range. */
static bool get_u32(json_t *object, const char *key, uint32_t *out) {
	json_t *value = json_object_get(object, key);
	if (!json_is_integer(value) || json_integer_value(value) < 0 ||
	    json_integer_value(value) > UINT32_MAX)
		return false;
	*out = (uint32_t)json_integer_value(value);
	return true;
}

/* The kernels: names, parameters, geometry, grid sizes. */
static f8_status read_kernels(const char *dir, json_t *document, f8_plan *plan, f8_diag *diag) {
	json_t *kernels = json_object_get(document, "kernels");
	if (!json_is_array(kernels))
		return inconsistent(diag, dir, "it has no kernels list");
	plan->n_kernels = (uint32_t)json_array_size(kernels);
	plan->kernels = f8_arena_alloc_array(plan->arena, plan->n_kernels + 1, sizeof *plan->kernels);
	if (!plan->kernels)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	for (uint32_t k = 0; k < plan->n_kernels; k++) {
		json_t *entry = json_array_get(kernels, k), *params = json_object_get(entry, "params");
		json_t *grid = json_object_get(entry, "grid_sizes");
		f8_plan_kernel *kernel = &plan->kernels[k];
		f8_launch_geometry *g = &kernel->geometry;
		kernel->name = keep(plan, json_string_value(json_object_get(entry, "name")));
		kernel->n_params = (uint32_t)json_array_size(params);
		kernel->n_grid_sizes = (uint32_t)json_array_size(grid);
		kernel->params = f8_arena_alloc_array(plan->arena, kernel->n_params + 1,
						      sizeof *kernel->params);
		kernel->grid_sizes = f8_arena_alloc_array(plan->arena, kernel->n_grid_sizes + 1,
							  sizeof *kernel->grid_sizes);
		if (!kernel->name || !json_is_array(params) || !json_is_array(grid) ||
		    !get_u32(entry, "threads_per_block", &g->threads_per_block) ||
		    !get_u32(entry, "rows_per_block", &g->rows_per_block) ||
		    !get_u32(entry, "max_blocks", &g->max_blocks) ||
		    !get_u32(entry, "shared_bytes", &g->shared_bytes))
			return inconsistent(diag, dir, "kernel %u lacks its name, parameters or launch "
					    "geometry", k);
		if (!kernel->params || !kernel->grid_sizes)
			return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
		if (!g->threads_per_block || !g->rows_per_block)
			return inconsistent(diag, dir, "kernel %s launches %u threads, %u rows a block",
					    kernel->name, g->threads_per_block, g->rows_per_block);
		for (uint32_t p = 0; p < kernel->n_params; p++) {
			json_t *param = json_array_get(params, p);
			f8_plan_param *to = &kernel->params[p];
			const char *dtype = json_string_value(json_object_get(param, "dtype"));
			to->name = keep(plan, json_string_value(json_object_get(param, "name")));
			if (!to->name || !dtype ||
			    !f8_dtype_from_name(dtype, strlen(dtype), &to->dtype) ||
			    !param_kind_from_name(json_string_value(json_object_get(param, "kind")),
						  &to->kind))
				return inconsistent(diag, dir, "parameter %u of kernel %s has no name, "
						    "kind or dtype f8c knows", p, kernel->name);
		}
		for (uint32_t i = 0; i < kernel->n_grid_sizes; i++) {
			json_t *index = json_array_get(grid, i);
			json_int_t at = json_integer_value(index);
			if (!json_is_integer(index) || at < 0 || at >= kernel->n_params ||
			    kernel->params[at].kind != F8_KERNEL_PARAM_SIZE)
				return inconsistent(diag, dir, "kernel %s's grid size %u is no size "
						    "parameter", kernel->name, i);
			kernel->grid_sizes[i] = (uint32_t)at;
		}
		for (uint32_t j = 0; j < k; j++)
			if (strcmp(plan->kernels[j].name, kernel->name) == 0)
				return inconsistent(diag, dir, "kernel %s is listed twice", kernel->name);
	}
	return F8_OK;
}

/* The value "%name" names, into *out; false when it is not "%" and a value of the graph. */
static bool value_named(const f8_graph *graph, const char *text, f8_value_id *out) {
	if (!text || text[0] != '%')
		return false;
	*out = f8_graph_find_value(graph, text + 1, strlen(text + 1));
	return *out != F8_NONE;
}

/* The next cell of a table row's text at *row into `cell` (size bytes), *row moved past it and
 * the space after it; false when there is no cell there or it does not fit. */
static bool take_cell(const char **row, char *cell, size_t size) {
	size_t len = strcspn(*row, " ");
	if (!len || len >= size)
		return false;
	memcpy(cell, *row, len);
	cell[len] = '\0';
	*row += len + ((*row)[len] == ' ');
	return true;
}

/* A table argument from table_json's form. */
static f8_status read_table(const char *dir, json_t *object, const char *where, f8_plan *plan,
			    f8_plan_table **out, f8_diag *diag) {
	json_t *columns = json_object_get(object, "columns"), *rows = json_object_get(object, "rows");
	if (!json_is_array(columns) || !json_is_array(rows))
		return inconsistent(diag, dir, "%s: a table without columns or rows", where);
	// Every row a string (a table of no columns reads none of them below, only whether they
	// are empty), and a row of n cells at least 2n - 1 characters ("0 1 2"): held before the
	// cells are allocated, so that they grow with the size of plan.json, not with its columns
	// times its rows (4,000 columns and 40,000 empty rows, 325 KB of plan.json, asked for 2 GB).
	size_t n_columns = json_array_size(columns), n_rows = json_array_size(rows);
	for (size_t r = 0; r < n_rows; r++) {
		json_t *row = json_array_get(rows, r);
		if (!json_is_string(row) || (n_columns && json_string_length(row) < 2 * n_columns - 1))
			return inconsistent(diag, dir, "%s: table row %zu is not %zu cells", where, r,
					    n_columns);
	}
	f8_plan_table *table = f8_arena_alloc(plan->arena, sizeof *table);
	size_t cells = n_columns * n_rows;
	if (!table)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	table->n_columns = (uint32_t)n_columns;
	table->n_rows = (uint32_t)n_rows;
	table->columns = f8_arena_alloc_array(plan->arena, table->n_columns + 1,
					      sizeof *table->columns);
	table->names = f8_arena_alloc_array(plan->arena, table->n_columns + 1, sizeof *table->names);
	table->values = f8_arena_alloc_array(plan->arena, cells + 1, sizeof *table->values);
	table->constants = f8_arena_alloc_array(plan->arena, cells + 1, sizeof *table->constants);
	if (!table->columns || !table->names || !table->values || !table->constants)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	for (uint32_t c = 0; c < table->n_columns; c++) {
		json_t *column = json_array_get(columns, c);
		table->names[c] = keep(plan, json_string_value(json_object_get(column, "name")));
		if (!table->names[c] ||
		    !param_kind_from_name(json_string_value(json_object_get(column, "kind")),
					  &table->columns[c]))
			return inconsistent(diag, dir, "%s: table column %u has no name or kind",
					    where, c);
	}
	for (uint32_t r = 0; r < table->n_rows; r++) {
		const char *row = json_string_value(json_array_get(rows, r));
		for (uint32_t c = 0; c < table->n_columns; c++) {
			size_t i = (size_t)r * table->n_columns + c;
			char cell[512], *end;
			if (!row || !take_cell(&row, cell, sizeof cell))
				return inconsistent(diag, dir, "%s: table row %u is not %u cells", where,
						    r, table->n_columns);
			table->values[i] = F8_NONE;
			if (cell[0] == '%' && !value_named(plan->graph, cell, &table->values[i]))
				return inconsistent(diag, dir, "%s: table row %u names %s, which is no "
						    "value of the graph", where, r, cell);
			if (cell[0] != '%' && (table->constants[i] = strtoll(cell, &end, 10), *end))
				return inconsistent(diag, dir, "%s: table row %u has cell %s, neither "
						    "a number nor a value", where, r, cell);
		}
		if (*row)
			return inconsistent(diag, dir, "%s: table row %u is not %u cells", where, r,
					    table->n_columns);
	}
	*out = table;
	return F8_OK;
}

/* Argument `p` of a launch of `kernel` in group `name`. */
static f8_status read_arg(const char *dir, json_t *json, const f8_plan_kernel *kernel,
			  uint32_t p, const f8_plan_group *group, const char *name, f8_plan *plan,
			  f8_plan_arg *arg, f8_diag *diag) {
	const f8_plan_param *param = &kernel->params[p];
	char where[256];
	snprintf(where, sizeof where, "group %s, kernel %s, parameter %s", name, kernel->name,
		 param->name);
	*arg = (f8_plan_arg){.value = F8_NONE, .scratch = F8_NONE};
	if (param->kind == F8_KERNEL_PARAM_TABLE)
		return read_table(dir, json, where, plan, &arg->table, diag);
	const char *text = json_string_value(json);
	if (!text)
		return inconsistent(diag, dir, "%s: no binding", where);
	if (param->kind == F8_KERNEL_PARAM_SIZE) {
		if (f8_text_parse_dim(plan->graph, text, &arg->dim, diag))
			return inconsistent(diag, dir, "%s: %s", where, diag->message);
		return F8_OK;
	}
	char *end;
	if (strncmp(text, "scratch", 7) == 0) {
		unsigned long index = strtoul(text + 7, &end, 10);
		if (*end || end == text + 7 || index >= group->n_scratch)
			return inconsistent(diag, dir, "%s: %s is no scratch of the group", where, text);
		arg->scratch = (uint32_t)index;
		return F8_OK;
	}
	// The parameter's dtype may differ from the value's: a kernel moves FP8 codes as i32 words.
	if (!value_named(plan->graph, text, &arg->value))
		return inconsistent(diag, dir, "%s: %s is no value of the graph", where, text);
	return F8_OK;
}

/* The groups: one per group of the graph, by name, each launch of a listed kernel. */
static f8_status read_groups(const char *dir, json_t *document, f8_plan *plan, f8_diag *diag) {
	json_t *groups = json_object_get(document, "groups");
	const f8_graph *graph = plan->graph;
	if (!json_is_array(groups) || json_array_size(groups) != graph->n_groups)
		return inconsistent(diag, dir, "it lists %zu groups; its graph has %u",
				    json_array_size(groups), graph->n_groups);
	plan->n_groups = graph->n_groups;
	plan->groups = f8_arena_alloc_array(plan->arena, plan->n_groups + 1, sizeof *plan->groups);
	if (!plan->groups)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	for (uint32_t g = 0; g < plan->n_groups; g++) {
		json_t *entry = json_array_get(groups, g);
		json_t *launches = json_object_get(entry, "launches");
		json_t *scratch = json_object_get(entry, "scratch");
		const char *name = json_string_value(json_object_get(entry, "name"));
		f8_plan_group *group = &plan->groups[g];
		if (!name || strcmp(name, graph->groups[g].name) != 0 || !json_is_array(launches) ||
		    !json_is_array(scratch))
			return inconsistent(diag, dir, "group %u is not the graph's %s with launches "
					    "and scratch", g, graph->groups[g].name);
		group->n_launches = (uint32_t)json_array_size(launches);
		group->n_scratch = (uint32_t)json_array_size(scratch);
		group->launches = f8_arena_alloc_array(plan->arena, group->n_launches + 1,
						       sizeof *group->launches);
		group->scratch = f8_arena_alloc_array(plan->arena, group->n_scratch + 1,
						      sizeof *group->scratch);
		if (!group->launches || !group->scratch)
			return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
		for (uint32_t s = 0; s < group->n_scratch; s++) {
			json_t *one = json_array_get(scratch, s);
			const char *dtype = json_string_value(json_object_get(one, "dtype"));
			const char *count = json_string_value(json_object_get(one, "count"));
			if (!dtype || !count ||
			    !f8_dtype_from_name(dtype, strlen(dtype), &group->scratch[s].dtype) ||
			    f8_text_parse_dim(plan->graph, count, &group->scratch[s].count, diag))
				return inconsistent(diag, dir, "group %s: scratch %u is no dtype and "
						    "count", name, s);
		}
		json_t *error = json_object_get(entry, "error");
		group->error = keep(plan, json_string_value(json_object_get(error, "message")));
		if (error && (!group->error || !get_u32(error, "scratch", &group->error_scratch) ||
			      group->error_scratch >= group->n_scratch))
			return inconsistent(diag, dir, "group %s: its data error has no message or "
					    "scratch", name);
		for (uint32_t l = 0; l < group->n_launches; l++) {
			json_t *launch = json_array_get(launches, l), *args = json_object_get(launch, "args");
			const char *kernel = json_string_value(json_object_get(launch, "kernel"));
			uint32_t k = 0;
			while (kernel && k < plan->n_kernels && strcmp(plan->kernels[k].name, kernel))
				k++;
			if (!kernel || k == plan->n_kernels || !json_is_array(args) ||
			    json_array_size(args) != plan->kernels[k].n_params)
				return inconsistent(diag, dir, "group %s: launch %u is not of a listed "
						    "kernel with its parameters", name, l);
			f8_plan_launch *to = &group->launches[l];
			to->kernel = k;
			to->args = f8_arena_alloc_array(plan->arena, plan->kernels[k].n_params + 1,
							sizeof *to->args);
			if (!to->args)
				return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
			for (uint32_t p = 0; p < plan->kernels[k].n_params; p++) {
				f8_status status = read_arg(dir, json_array_get(args, p), &plan->kernels[k],
							    p, group, name, plan, &to->args[p], diag);
				if (status)
					return status;
			}
		}
	}
	return F8_OK;
}

/* A file the record lists ({"file", "bytes", "fnv1a64"}): present, of its size and checksum;
 * its bytes into *out (f8_free) when `out` is not NULL (else it is only checksummed). */
static f8_status check_file(const char *dir, json_t *record, const char *expected, char **out,
			    f8_diag *diag) {
	const char *name = json_string_value(json_object_get(record, "file"));
	const char *want = json_string_value(json_object_get(record, "fnv1a64"));
	json_int_t want_bytes = json_integer_value(json_object_get(record, "bytes"));
	if (!name || strcmp(name, expected) != 0 || !want)
		return inconsistent(diag, dir, "it does not record %s", expected);
	char path[4096], have[17];
	size_t len = 0;
	snprintf(path, sizeof path, "%s/%s", dir, expected);
	char *bytes = NULL;
	f8_status status = out ? read_bytes(path, &bytes, &len, diag)
			       : checksum_file(path, &len, have, diag);
	if (status)
		return status;
	if (out)
		hex64(fnv1a64(FNV1A64_BASIS, bytes, len), have);
	if ((json_int_t)len != want_bytes || strcmp(want, have) != 0) {
		f8_free(bytes);
		return inconsistent(diag, dir, "%s is not the file the plan was written with (%zu "
				    "bytes, checksum %s; plan.json says %lld bytes, %s)", expected, len,
				    have, (long long)want_bytes, want);
	}
	if (out)
		*out = bytes;
	return F8_OK;
}

/* kernels.ptx: the recorded file, with an entry for every kernel. */
static f8_status check_ptx(const char *dir, json_t *document, f8_plan *plan, f8_diag *diag) {
	f8_status status = check_file(dir, json_object_get(document, "kernels_ptx"), PTX,
				      &plan->ptx, diag);
	for (uint32_t k = 0; !status && k < plan->n_kernels; k++) {
		char entry[256];
		snprintf(entry, sizeof entry, ".entry %s(", plan->kernels[k].name);
		if (!strstr(plan->ptx, entry))
			status = inconsistent(diag, dir, "kernels.ptx has no entry for kernel %s",
					      plan->kernels[k].name);
	}
	return status;
}

/* weights.safetensors: the recorded file; each tensor a leaf of the graph, of its dtype and
 * shape. */
static f8_status check_weights(const char *dir, json_t *document, f8_plan *plan, f8_diag *diag) {
	f8_status status = check_file(dir, json_object_get(document, "weights"), WEIGHTS, NULL, diag);
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", dir, WEIGHTS);
	if (!status)
		status = f8_safetensors_open(path, &plan->weights, diag);
	const f8_graph *graph = plan->graph;
	for (size_t i = 0; !status && i < f8_safetensors_count(plan->weights); i++) {
		const char *name = f8_safetensors_name(plan->weights, i);
		const f8_safetensors_tensor *tensor = f8_safetensors_get(plan->weights, i);
		f8_value_id v = f8_graph_find_value(graph, name, strlen(name));
		bool same = v != F8_NONE && graph->values[v].producer == F8_NONE &&
			    graph->values[v].type.dtype == tensor->dtype &&
			    graph->values[v].type.shape.rank == tensor->rank;
		for (int d = 0; same && d < tensor->rank; d++)
			same = f8_dim_is_const(graph->values[v].type.shape.dims[d]) &&
			       f8_dim_value(graph->values[v].type.shape.dims[d]) == tensor->dims[d];
		if (!same)
			status = inconsistent(diag, dir, "%s holds '%s', which is no leaf of the graph "
					      "of that dtype and shape", WEIGHTS, name);
	}
	return status;
}

/* One entry of weight_init's weights into *made: a parameter leaf of the graph, not listed
 * before (seen, by value), nor in weights.safetensors, of a known kind, its std for normal,
 * and the leaf's dtype. */
static f8_status read_made_weight(const char *dir, json_t *entry, uint32_t index,
				  const f8_plan *plan, bool *seen, f8_plan_made_weight *made,
				  f8_diag *diag) {
	const f8_graph *graph = plan->graph;
	const char *name = json_string_value(json_object_get(entry, "name"));
	const char *init = json_string_value(json_object_get(entry, "init"));
	const char *dtype = json_string_value(json_object_get(entry, "dtype"));
	json_t *std = json_object_get(entry, "std");
	f8_value_id v = name ? f8_graph_find_value(graph, name, strlen(name)) : F8_NONE;
	if (v == F8_NONE || graph->values[v].producer != F8_NONE ||
	    graph->values[v].role != F8_ROLE_PARAMETER)
		return inconsistent(diag, dir, "weight_init: weight %u names %s, which is no "
				    "parameter of the graph", index, name ? name : "nothing");
	if (seen[v] || f8_safetensors_find(plan->weights, name))
		return inconsistent(diag, dir, "weight_init: parameter %s is listed twice%s", name,
				    seen[v] ? "" : " (it is in weights.safetensors too)");
	seen[v] = true;
	made->value = v;
	if (!init || !f8_weight_init_kind_from_name(init, &made->rule.kind))
		return inconsistent(diag, dir, "weight_init: parameter %s has init %s, which is no "
				    "kind of the rule", name, init ? init : "missing");
	bool normal = made->rule.kind == F8_WEIGHT_INIT_NORMAL;
	made->rule.std = normal ? json_number_value(std) : 0;
	if (normal ? !json_is_number(std) || !isfinite(made->rule.std) || made->rule.std <= 0
		   : std != NULL)
		return inconsistent(diag, dir, "weight_init: parameter %s %s", name,
				    normal ? "has no positive, finite std"
					   : "has a std, which only init normal takes");
	if (!dtype || !f8_dtype_from_name(dtype, strlen(dtype), &made->dtype) ||
	    made->dtype != graph->values[v].type.dtype)
		return inconsistent(diag, dir, "weight_init: parameter %s is %s in the record, %s in "
				    "the graph", name, dtype ? dtype : "of no dtype",
				    f8_dtype_name(graph->values[v].type.dtype));
	return F8_OK;
}

/* plan.json's "weight_init", when it has one (--weights seed): this f8c's rule and version, a
 * seed, and every parameter that weights.safetensors lacks, each once. */
static f8_status read_weight_init(const char *dir, json_t *document, f8_plan *plan,
				  f8_diag *diag) {
	json_t *record = json_object_get(document, "weight_init");
	if (!record)
		return F8_OK;
	const char *rule = json_string_value(json_object_get(record, "rule"));
	json_t *version = json_object_get(record, "rule_version");
	json_t *seed = json_object_get(record, "seed"), *weights = json_object_get(record, "weights");
	if (!rule || strcmp(rule, F8_WEIGHT_INIT_RULE_NAME) != 0 || !json_is_integer(version) ||
	    json_integer_value(version) != F8_WEIGHT_INIT_RULE_VERSION)
		return inconsistent(diag, dir, "weight_init: its weights are made by rule %s version "
				    "%lld; this f8c makes them by %s version %d", rule ? rule : "?",
				    (long long)json_integer_value(version), F8_WEIGHT_INIT_RULE_NAME,
				    F8_WEIGHT_INIT_RULE_VERSION);
	if (!json_is_integer(seed) || json_integer_value(seed) < 0 || !json_is_array(weights))
		return inconsistent(diag, dir, "weight_init: it lacks a seed (an integer, 0 or more) "
				    "or the list of weights");
	const f8_graph *graph = plan->graph;
	f8_plan_weight_init *made = f8_arena_alloc(plan->arena, sizeof *made);
	bool *seen = f8_calloc(graph->n_values + 1, sizeof *seen);
	if (made)
		made->weights = f8_arena_alloc_array(plan->arena, json_array_size(weights) + 1,
						     sizeof *made->weights);
	f8_status status = made && made->weights && seen
				   ? F8_OK : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	if (!status)
		made->seed = (uint64_t)json_integer_value(seed);
	for (size_t w = 0; !status && w < json_array_size(weights); w++)
		status = read_made_weight(dir, json_array_get(weights, w), (uint32_t)w, plan, seen,
					  &made->weights[made->n_weights++], diag);
	for (uint32_t i = 0; !status && i < graph->n_inputs; i++) {
		const f8_value *value = &graph->values[graph->inputs[i]];
		if (value->role == F8_ROLE_PARAMETER && !seen[graph->inputs[i]] &&
		    !f8_safetensors_find(plan->weights, value->name))
			status = inconsistent(diag, dir, "weight_init: parameter %s has neither "
					      "weights in %s nor a rule in the record", value->name,
					      WEIGHTS);
	}
	f8_free(seen);
	if (!status)
		plan->weight_init = made;
	return status;
}

f8_status f8_plan_load(const char *dir, const char *f8c_version, f8_plan **out, f8_diag *diag) {
	*out = NULL;
	char path[4096];
	snprintf(path, sizeof path, "%s/plan.json", dir);
	json_error_t error;
	json_t *document = json_load_file(path, 0, &error);
	if (!document) {
		f8_status status = f8_diag_set_in_file(diag, path, F8_ERR_PARSE, "%s", error.text);
		f8_diag_at(diag, path, (uint32_t)(error.line > 0 ? error.line : 0),
			   (uint32_t)(error.column > 0 ? error.column : 0), NULL, 0);
		return status;
	}
	f8_plan *plan = NULL;
	f8_status status = f8_plan_create(NULL, &plan, diag);
	if (!status)
		status = check_header(dir, document, f8c_version, diag);
	char digest[17];
	const char *recorded = json_string_value(json_object_get(document, "digest"));
	if (!status && !digest_of(document, digest))
		status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	if (!status && (!recorded || strcmp(recorded, digest) != 0))
		status = inconsistent(diag, dir, "its digest is %s, but what it records digests to "
				      "%s: it was changed since it was written", recorded ? recorded
				      : "missing", digest);
	if (!status)
		status = read_origin(dir, document, plan, diag);
	const char *graph_text = json_string_value(json_object_get(document, "graph"));
	if (!status && !graph_text)
		status = inconsistent(diag, dir, "it has no graph");
	if (!status && f8_text_parse(graph_text, strlen(graph_text), path, &plan->graph, diag))
		status = inconsistent(diag, dir, "its graph does not parse: %s", diag->message);
	if (!status && f8_graph_verify(plan->graph, diag))
		status = inconsistent(diag, dir, "its graph does not verify: %s", diag->message);
	json_int_t slab = json_integer_value(json_object_get(json_object_get(document, "buffers"),
							     "slab_bytes"));
	plan->slab_bytes = slab > 0 ? (uint64_t)slab : 0;
	if (!status && f8_graph_verify_buffers(plan->graph, plan->slab_bytes, diag))
		status = inconsistent(diag, dir, "its slab plan does not hold: %s", diag->message);
	json_t *estimates = json_object_get(document, "estimates");
	plan->estimates = (f8_plan_estimates){
		.gemm_flops = json_is_number(json_object_get(estimates, "gemm_flops"))
			? json_number_value(json_object_get(estimates, "gemm_flops")) : -1,
		.kernel_bytes = json_is_number(json_object_get(estimates, "kernel_bytes"))
			? json_number_value(json_object_get(estimates, "kernel_bytes")) : -1};
	get_u32(estimates, "kernel_launches", &plan->estimates.kernel_launches);
	if (!status)
		status = read_kernels(dir, document, plan, diag);
	if (!status)
		status = read_groups(dir, document, plan, diag);
	if (!status)
		status = check_ptx(dir, document, plan, diag);
	if (!status)
		status = check_weights(dir, document, plan, diag);
	if (!status)
		status = read_weight_init(dir, document, plan, diag);
	json_decref(document);
	if (status) {
		f8_plan_destroy(plan);
		return status;
	}
	*out = plan;
	return F8_OK;
}
