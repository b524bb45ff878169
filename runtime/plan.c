/*
 * Plans on disk (runtime/plan.h): writing plan.json and kernels.ptx, and loading them back with
 * every check.
 */
#define _POSIX_C_SOURCE 200809L // mkdir, stat

#include "runtime/plan.h" // f8_plan, f8_plan_write, f8_plan_load

#include <errno.h>    // errno
#include <inttypes.h> // PRIx64
#include <stdarg.h>   // va_list
#include <stdio.h>    // snprintf
#include <stdlib.h>   // free (jansson's and the text printer's buffers)
#include <string.h>   // strcmp, strlen, strstr, strerror
#include <sys/stat.h> // mkdir, stat

#include <jansson.h> // json_t

#include "frontend/frontend.h"  // f8_frontend_load
#include "ir/alloc.h"           // f8_malloc, f8_calloc, f8_free
#include "ir/text.h"            // f8_text_print_string, f8_text_parse, f8_dim_format
#include "ir/verify.h"          // f8_graph_verify, f8_graph_verify_buffers
#include "passes/precision.h"   // f8_gemm_sizes
#include "passes/schedule.h"    // f8_buffer_plan_of
#include "runtime/atomic_file.h" // f8_atomic_file_*

/* FNV-1a, 64 bits: a check that kernels.ptx is the file the plan was written with. */
static uint64_t fnv1a64(const char *text, size_t n) {
	uint64_t hash = 14695981039346656037ull;
	for (size_t i = 0; i < n; i++) {
		hash ^= (unsigned char)text[i];
		hash *= 1099511628211ull;
	}
	return hash;
}

static void checksum_text(const char *text, char out[17]) {
	snprintf(out, 17, "%016" PRIx64, fnv1a64(text, strlen(text)));
}

/* The product of a shape's dims when they are all constant, else -1. */
static double numel_of(const f8_type *type) {
	double n = 1;
	for (int d = 0; d < type->shape.rank; d++) {
		if (!f8_dim_is_const(type->shape.dims[d]))
			return -1;
		n *= (double)f8_dim_value(type->shape.dims[d]);
	}
	return n;
}

/* 2 m n k of a GEMM node (f8_gemm_sizes, as the audit counts it); 0 for other ops, -1 when a
 * size is symbolic. */
static double gemm_flops(const f8_graph *graph, const f8_node *node) {
	int64_t m, n, k;
	if (!(f8_op_get_info(node->op)->flags & F8_OPF_GEMM))
		return 0;
	return f8_gemm_sizes(graph, node, &m, &n, &k) ? 2.0 * (double)m * (double)n * (double)k : -1;
}

/* The estimates per micro-batch (and per step's cast and opt phases, once): GEMM FLOPs, the
 * bytes the generated kernels read and write (each buffer once per launch), the launches. */
static json_t *estimates_json(const f8_graph *graph, const f8_codegen_program *program) {
	double flops = 0, bytes = 0;
	bool known = true;
	for (uint32_t i = 0; i < graph->n_order; i++) {
		double f = gemm_flops(graph, &graph->nodes[graph->order[i]]);
		known = known && f >= 0;
		flops += f > 0 ? f : 0;
	}
	uint32_t launches = 0;
	for (uint32_t g = 0; g < program->n_groups; g++) {
		const f8_codegen_group *group = &program->groups[g];
		launches += group->n_launches;
		for (uint32_t l = 0; l < group->n_launches; l++) {
			const f8_kernel *kernel = program->kernels[group->launches[l].kernel];
			for (uint32_t p = 0; p < kernel->n_params; p++) {
				const f8_kernel_arg *arg = &group->launches[l].args[p];
				const f8_kernel_table *table = arg->table;
				size_t cells = table ? (size_t)table->n_rows * table->n_columns : 1;
				for (size_t c = 0; c < cells; c++) { // a table: the values it names
					f8_value_id v = table ? table->cells[c].value : arg->value;
					if (kernel->params[p].kind == F8_KIR_PARAM_SIZE || v == F8_NONE)
						continue;
					double n = numel_of(&graph->values[v].type);
					known = known && n >= 0;
					bytes += n > 0 ? n * (double)f8_dtype_get_info(
								 graph->values[v].type.dtype)->bytes
						       : 0;
				}
			}
		}
	}
	json_t *estimates = json_pack("{s:i, s:s}", "kernel_launches", (json_int_t)launches,
				      "note", "per micro-batch, every phase once; GEMM FLOPs are 2 m n k "
				      "of the graph's GEMMs (attention's are cuDNN's, not counted); "
				      "bytes are what the generated kernels read and write");
	if (estimates && known) {
		json_object_set_new(estimates, "gemm_flops", json_real(flops));
		json_object_set_new(estimates, "kernel_bytes", json_real(bytes));
	} else if (estimates) {
		json_object_set_new(estimates, "gemm_flops", json_null());
		json_object_set_new(estimates, "kernel_bytes", json_null());
	}
	return estimates;
}

/*
 * A table's contents: {"columns": [{"name", "kind"}...], "rows": ["0 4096 %w %w.grad", ...]},
 * a row as one line of text, its cells a constant (decimal) or a value's address (%value).
 */
static json_t *table_json(const f8_graph *graph, const f8_kernel_table *table) {
	json_t *columns = json_array(), *rows = json_array();
	for (uint32_t c = 0; columns && c < table->n_columns; c++)
		json_array_append_new(columns, json_pack("{s:s, s:s}", "name", table->names[c],
							 "kind", f8_kir_param_kind_name(table->columns[c])));
	for (uint32_t r = 0; rows && r < table->n_rows; r++) {
		char text[4096];
		size_t used = 0;
		for (uint32_t c = 0; c < table->n_columns && used < sizeof text; c++) {
			const f8_kernel_table_cell *cell = &table->cells[(size_t)r * table->n_columns + c];
			if (cell->value == F8_NONE)
				used += (size_t)snprintf(text + used, sizeof text - used, "%s%lld",
							 c ? " " : "", (long long)cell->constant);
			else
				used += (size_t)snprintf(text + used, sizeof text - used, "%s%%%s",
							 c ? " " : "", graph->values[cell->value].name);
		}
		json_array_append_new(rows, json_string(text));
	}
	return json_pack("{s:o, s:o}", "columns", columns, "rows", rows);
}

/* A kernel parameter's binding as text: "%value", "scratch2", or a dim ("batch*seq", "768");
 * a table's as table_json's object. */
static json_t *arg_json(const f8_graph *graph, const f8_kernel *kernel, uint32_t p,
			const f8_kernel_arg *arg) {
	char text[160];
	if (kernel->params[p].kind == F8_KIR_PARAM_TABLE)
		return arg->table ? table_json(graph, arg->table) : json_null();
	if (kernel->params[p].kind == F8_KIR_PARAM_SIZE)
		return json_string(f8_dim_format(graph, arg->dim, text, sizeof text));
	if (arg->scratch != F8_NONE)
		snprintf(text, sizeof text, "scratch%u", arg->scratch);
	else
		snprintf(text, sizeof text, "%%%s", graph->values[arg->value].name);
	return json_string(text);
}

static json_t *kernels_json(const f8_plan_source *source) {
	const f8_codegen_program *program = source->program;
	json_t *kernels = json_array();
	for (uint32_t k = 0; kernels && k < program->n_kernels; k++) {
		const f8_kernel *kernel = program->kernels[k];
		const f8_llvm_geometry *g = &source->geometry[k];
		json_t *params = json_array(), *grid = json_array();
		for (uint32_t p = 0; params && p < kernel->n_params; p++)
			json_array_append_new(params, json_pack("{s:s, s:s, s:s}", "name",
				kernel->params[p].name, "kind", f8_kir_param_kind_name(kernel->params[p].kind),
				"dtype", f8_dtype_name(kernel->params[p].dtype)));
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

static json_t *groups_json(const f8_plan_source *source) {
	const f8_graph *graph = source->graph;
	const f8_codegen_program *program = source->program;
	json_t *groups = json_array();
	for (uint32_t g = 0; groups && g < program->n_groups; g++) {
		const f8_codegen_group *group = &program->groups[g];
		json_t *launches = json_array(), *scratch = json_array();
		for (uint32_t l = 0; launches && l < group->n_launches; l++) {
			const f8_kernel *kernel = program->kernels[group->launches[l].kernel];
			json_t *args = json_array();
			for (uint32_t p = 0; args && p < kernel->n_params; p++)
				json_array_append_new(args, arg_json(graph, kernel, p,
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
		json_array_append_new(groups, json_pack(
			"{s:s, s:s, s:s, s:o, s:o}", "name", named->name, "family",
			f8_kernel_family_name(named->family), "reason", named->reason, "launches",
			launches, "scratch", scratch));
	}
	return groups;
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

static json_t *strings_json(const char *const *strings, uint32_t n) {
	json_t *array = json_array();
	for (uint32_t i = 0; array && i < n; i++)
		json_array_append_new(array, json_string(strings[i]));
	return array;
}

f8_status f8_plan_write(const char *dir, const f8_plan_source *source, f8_diag *diag) {
	if (mkdir(dir, 0777) != 0 && errno != EEXIST)
		return f8_diag_set_in_file(diag, dir, F8_ERR_IO, "cannot make the plan folder: %s",
					   strerror(errno));
	char *graph_text = NULL;
	size_t graph_len = 0;
	f8_status status = f8_text_print_string(source->graph, &graph_text, &graph_len);
	if (status) {
		f8_free(graph_text);
		return f8_diag_set(diag, status, "cannot print the graph: out of memory");
	}
	char checksum[17];
	checksum_text(source->ptx, checksum);
	f8_buffer_plan buffers = f8_buffer_plan_of(source->graph);
	json_t *document = json_pack(
		"{s:s, s:i, s:s, s:s, s:o, s:b, s:s, s:o, s:o, s:o, s:{s:b, s:I, s:I, s:I, s:s}, "
		"s:{s:s, s:I, s:s}}", "format",
		F8_PLAN_FORMAT, "format_version", F8_PLAN_FORMAT_VERSION, "f8c_version",
		source->f8c_version, "model", source->model, "compile_args",
		strings_json(source->compile_args, source->n_compile_args), "training",
		source->training, "graph", graph_text, "kernels", kernels_json(source), "groups",
		groups_json(source), "estimates", estimates_json(source->graph, source->program),
		"buffers", "planned", buffers.planned, "slab_bytes", (json_int_t)buffers.slab_bytes,
		"bytes_without_reuse", (json_int_t)buffers.total_bytes, "values",
		(json_int_t)buffers.n_values, "note", "each value's offset in the slab is in the "
		"graph (offset=); leaves and the values written in place of them are not in the slab",
		"kernels_ptx", "file", "kernels.ptx", "bytes", (json_int_t)strlen(source->ptx),
		"fnv1a64", checksum);
	f8_free(graph_text);
	char *json_text = document ? json_dumps(document, JSON_INDENT(1)) : NULL;
	json_decref(document);
	if (!json_text)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory writing the plan");
	char path[4096];
	snprintf(path, sizeof path, "%s/kernels.ptx", dir);
	status = write_file(path, source->ptx, strlen(source->ptx), diag);
	snprintf(path, sizeof path, "%s/plan.json", dir);
	if (!status)
		status = write_file(path, json_text, strlen(json_text), diag);
	free(json_text);
	return status;
}

bool f8_plan_is_dir(const char *path) {
	struct stat folder, file;
	char plan[4096];
	snprintf(plan, sizeof plan, "%s/plan.json", path);
	return stat(path, &folder) == 0 && S_ISDIR(folder.st_mode) && stat(plan, &file) == 0;
}

void f8_plan_destroy(f8_plan *plan) {
	if (!plan)
		return;
	f8_graph_destroy(plan->graph);
	f8_graph_destroy(plan->source);
	f8_free(plan->model);
	for (uint32_t i = 0; i < plan->n_compile_args; i++)
		f8_free(plan->compile_args[i]);
	f8_free(plan->compile_args);
	f8_free(plan->ptx);
	f8_free(plan);
}

static char *copy_text(const char *text) {
	size_t n = strlen(text) + 1;
	char *copy = f8_malloc(n);
	if (copy)
		memcpy(copy, text, n);
	return copy;
}

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

/* The whole file at `path` into *out (f8_malloc'd, terminated). */
static f8_status read_text(const char *path, char **out, size_t *len, f8_diag *diag) {
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

/* The kernels and groups plan.json lists against what the graph lowers to now. */
static f8_status check_kernels(const char *dir, const f8_graph *graph, json_t *document,
			       f8_diag *diag) {
	f8_codegen_program *program;
	f8_status status = f8_codegen_program_create(graph, &program, diag);
	if (status)
		return inconsistent(diag, dir, "its graph's kernels do not lower: %s", diag->message);
	json_t *kernels = json_object_get(document, "kernels");
	json_t *groups = json_object_get(document, "groups");
	if (json_array_size(kernels) != program->n_kernels || json_array_size(groups) != program->n_groups)
		status = inconsistent(diag, dir, "it lists %zu kernels in %zu groups; its graph lowers "
				      "to %u kernels in %u groups", json_array_size(kernels),
				      json_array_size(groups), program->n_kernels, program->n_groups);
	for (uint32_t k = 0; !status && k < program->n_kernels; k++) {
		const f8_kernel *kernel = program->kernels[k];
		json_t *listed = json_array_get(kernels, k), *params = json_object_get(listed, "params");
		const char *name = json_string_value(json_object_get(listed, "name"));
		bool same = name && strcmp(name, kernel->name) == 0 &&
			    json_array_size(params) == kernel->n_params;
		for (uint32_t p = 0; same && p < kernel->n_params; p++) {
			json_t *param = json_array_get(params, p);
			const char *kind = json_string_value(json_object_get(param, "kind"));
			const char *dtype = json_string_value(json_object_get(param, "dtype"));
			same = kind && dtype &&
			       strcmp(kind, f8_kir_param_kind_name(kernel->params[p].kind)) == 0 &&
			       strcmp(dtype, f8_dtype_name(kernel->params[p].dtype)) == 0;
		}
		if (!same)
			status = inconsistent(diag, dir, "kernel %u is listed as %s; its graph lowers "
					      "it to %s with other parameters", k, name ? name : "?",
					      kernel->name);
	}
	for (uint32_t g = 0; !status && g < program->n_groups; g++) {
		json_t *launches = json_object_get(json_array_get(groups, g), "launches");
		const f8_codegen_group *group = &program->groups[g];
		bool same = json_array_size(launches) == group->n_launches;
		for (uint32_t l = 0; same && l < group->n_launches; l++) {
			const f8_kernel *kernel = program->kernels[group->launches[l].kernel];
			json_t *launch = json_array_get(launches, l), *args = json_object_get(launch, "args");
			const char *name = json_string_value(json_object_get(launch, "kernel"));
			same = name && strcmp(name, kernel->name) == 0 &&
			       json_array_size(args) == kernel->n_params;
			for (uint32_t p = 0; same && p < kernel->n_params; p++) {
				json_t *want = arg_json(graph, kernel, p, &group->launches[l].args[p]);
				same = want && json_equal(want, json_array_get(args, p));
				json_decref(want);
			}
		}
		if (!same)
			status = inconsistent(diag, dir, "the launches of kernel %s are not what its "
					      "graph lowers to", graph->groups[g].name);
	}
	f8_codegen_program_destroy(program);
	return status;
}

/* kernels.ptx against plan.json: its size, its checksum, an entry per listed kernel. */
static f8_status check_ptx(const char *dir, json_t *document, f8_plan *plan, f8_diag *diag) {
	char path[4096];
	snprintf(path, sizeof path, "%s/kernels.ptx", dir);
	size_t len = 0;
	f8_status status = read_text(path, &plan->ptx, &len, diag);
	if (status)
		return status;
	json_t *record = json_object_get(document, "kernels_ptx");
	const char *want = json_string_value(json_object_get(record, "fnv1a64"));
	char have[17];
	checksum_text(plan->ptx, have);
	if ((json_int_t)len != json_integer_value(json_object_get(record, "bytes")) || !want ||
	    strcmp(want, have) != 0)
		return inconsistent(diag, dir, "kernels.ptx is not the file the plan was written with "
				    "(%zu bytes, checksum %s; plan.json says %lld bytes, %s)", len,
				    have, (long long)json_integer_value(json_object_get(record, "bytes")),
				    want ? want : "none");
	json_t *kernels = json_object_get(document, "kernels");
	for (size_t k = 0; k < json_array_size(kernels); k++) {
		const char *name = json_string_value(json_object_get(json_array_get(kernels, k), "name"));
		char entry[256];
		snprintf(entry, sizeof entry, ".entry %s(", name ? name : "");
		if (!name || !strstr(plan->ptx, entry))
			return inconsistent(diag, dir, "kernels.ptx has no entry for kernel %s",
					    name ? name : "?");
	}
	return F8_OK;
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

/* The model, the compile arguments and the mode into *plan. */
static f8_status read_origin(const char *dir, json_t *document, f8_plan *plan, f8_diag *diag) {
	const char *model = json_string_value(json_object_get(document, "model"));
	json_t *args = json_object_get(document, "compile_args");
	if (!model || !json_is_array(args) || !json_is_boolean(json_object_get(document, "training")))
		return inconsistent(diag, dir, "it lacks the model, the compile arguments or the mode");
	plan->training = json_is_true(json_object_get(document, "training"));
	plan->model = copy_text(model);
	plan->compile_args = f8_calloc(json_array_size(args) + 1, sizeof *plan->compile_args);
	if (!plan->model || !plan->compile_args)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < json_array_size(args); i++) {
		const char *arg = json_string_value(json_array_get(args, i));
		if (!arg)
			return inconsistent(diag, dir, "compile argument %zu is not a string", i);
		if (!(plan->compile_args[plan->n_compile_args++] = copy_text(arg)))
			return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	}
	return F8_OK;
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
	f8_plan *plan = f8_calloc(1, sizeof *plan);
	f8_status status = plan ? check_header(dir, document, f8c_version, diag)
				: f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
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
	if (!status && f8_graph_verify_buffers(plan->graph, slab > 0 ? (uint64_t)slab : 0, diag))
		status = inconsistent(diag, dir, "its slab plan does not hold: %s", diag->message);
	if (!status)
		status = check_kernels(dir, plan->graph, document, diag);
	if (!status)
		status = check_ptx(dir, document, plan, diag);
	json_decref(document);
	if (status) {
		f8_plan_destroy(plan);
		return status;
	}
	*out = plan;
	return F8_OK;
}

f8_status f8_plan_attach_weights(f8_plan *plan, f8_diag *diag) {
	f8_frontend_options options = {0};
	f8_status status = f8_frontend_load(plan->model, &options, &plan->source, diag);
	if (status) {
		f8_diag_hint(diag, "the plan takes its initial weights from its model, %s: put it "
			     "back there, or compile the model again", plan->model);
		return status;
	}
	const f8_graph *source = plan->source;
	for (uint32_t i = 0; i < plan->graph->n_inputs; i++) {
		f8_value *value = &plan->graph->values[plan->graph->inputs[i]];
		f8_value_id same = f8_graph_find_value(source, value->name, strlen(value->name));
		if (same != F8_NONE && source->values[same].initializer)
			value->initializer = source->values[same].initializer;
	}
	return F8_OK;
}
