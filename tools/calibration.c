/*
 * Calibration statistics (tools/calibration.h): amax per step and the values FP8 would lose,
 * per (Linear layer, operand); the STATS.json file written and read.
 */
#include "tools/calibration.h" // f8_calibration_stats, f8_calibration_file

#include <errno.h>    // errno
#include <inttypes.h> // PRIx64
#include <jansson.h>  // json_t, json_pack, json_loadf, json_dumpf
#include <math.h>    // isfinite, isnan, sqrt, HUGE_VAL
#include <stdlib.h>  // strtoull
#include <stdarg.h>  // va_list
#include <stdio.h>   // FILE, fopen, vsnprintf
#include <string.h>  // strcmp, strlen, strerror, memmove

#include "ir/alloc.h"            // f8_malloc, f8_calloc, f8_realloc, f8_free, f8_strdup
#include "ir/fp8.h"              // f8_float_encode, f8_float_decode, f8_scale_from_amax
#include "ir/json.h"             // f8_jansson_enter, f8_jansson_leave
#include "runtime/atomic_file.h" // f8_atomic_file

#define FILE_FORMAT "f8c-calibration"
enum { FILE_VERSION = 2 }; // 2: the model's digest and Linear layers

/* One (scope, role): its amax per step, its delayed-scaling history and its value counts. */
typedef struct tracked {
	char *scope, *role;
	f8_dtype format;       // what its values would be cast to
	double *amaxes;        // (n_amaxes) the amax of each step it was observed in
	size_t n_amaxes, cap_amaxes;
	float *history;        // (settings.amax_history_len) finite amaxes, newest first
	int n_history;
	float scale;           // delayed scaling's scale for this step (once n_history > 0)
	bool observed;         // in the current step
	float step_amax;       // the largest amax observed in the current step
	uint64_t values, nonzero, underflow, saturate;
} tracked;

struct f8_calibration_stats {
	f8_calibration_settings settings;
	tracked *tracked;      // (n_tracked) in order of first observation
	size_t n_tracked, cap_tracked;
	int64_t steps;         // ended so far
};

static f8_status nomem(f8_diag *diag) {
	return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory in the calibration statistics");
}

f8_status f8_calibration_stats_create(const f8_calibration_settings *settings,
				      f8_calibration_stats **out, f8_diag *diag) {
	*out = NULL;
	if (settings->amax_history_len < 1 || settings->margin < 0 ||
	    (unsigned)settings->format >= F8_FP8_FORMAT_COUNT ||
	    (unsigned)settings->amax_algo >= F8_AMAX_ALGO_COUNT)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "calibration needs an FP8 format, an amax "
				   "algorithm, a history length >= 1 and a margin >= 0");
	f8_calibration_stats *stats = f8_calloc(1, sizeof *stats);
	if (!stats)
		return nomem(diag);
	stats->settings = *settings;
	*out = stats;
	return F8_OK;
}

static void tracked_free(tracked *t) {
	f8_free(t->scope);
	f8_free(t->role);
	f8_free(t->amaxes);
	f8_free(t->history);
}

void f8_calibration_stats_destroy(f8_calibration_stats *stats) {
	if (!stats)
		return;
	for (size_t i = 0; i < stats->n_tracked; i++)
		tracked_free(&stats->tracked[i]);
	f8_free(stats->tracked);
	f8_free(stats);
}

/* The format `role`'s values are cast to: gradients E5M2 under hybrid, the rest E4M3. */
static bool role_format(const char *role, f8_fp8_format format, f8_dtype *out) {
	if (strcmp(role, "x") == 0 || strcmp(role, "w") == 0) {
		*out = F8_DTYPE_E4M3;
		return true;
	}
	if (strcmp(role, "dy") == 0) {
		*out = format == F8_FP8_FORMAT_HYBRID ? F8_DTYPE_E5M2 : F8_DTYPE_E4M3;
		return true;
	}
	return false;
}

/* The entry of (scope, role), made when new. */
static f8_status find_tracked(f8_calibration_stats *stats, const char *scope, const char *role,
			      f8_dtype format, tracked **out, f8_diag *diag) {
	for (size_t i = 0; i < stats->n_tracked; i++) {
		tracked *t = &stats->tracked[i];
		if (strcmp(t->scope, scope) == 0 && strcmp(t->role, role) == 0) {
			*out = t;
			return F8_OK;
		}
	}
	if (stats->n_tracked == stats->cap_tracked) {
		size_t cap = stats->cap_tracked ? 2 * stats->cap_tracked : 32;
		tracked *grown = f8_realloc(stats->tracked, cap * sizeof *grown);
		if (!grown)
			return nomem(diag);
		stats->tracked = grown;
		stats->cap_tracked = cap;
	}
	tracked *t = &stats->tracked[stats->n_tracked];
	*t = (tracked){.format = format, .scale = 1.0f,
		       .history = f8_calloc((size_t)stats->settings.amax_history_len, sizeof(float)),
		       .scope = f8_strdup(scope), .role = f8_strdup(role)};
	if (!t->history || !t->scope || !t->role) {
		tracked_free(t);
		return nomem(diag);
	}
	stats->n_tracked++;
	*out = t;
	return F8_OK;
}

/* Counts the values of x (n, as float) at `scale`: nonzero ones that round to zero, and ones
 * that round beyond the format's largest finite value (ir/fp8.h's overflow: what a saturating
 * cast clamps), infinities included. NaN counts for nothing. */
static void count_values(tracked *t, const float *x, size_t n, float scale) {
	for (size_t i = 0; i < n; i++) {
		if (x[i] != x[i])
			continue;
		t->values++;
		if (x[i] == 0)
			continue;
		t->nonzero++;
		float cast = f8_float_decode(t->format, f8_float_encode(t->format, x[i] * scale, false));
		if (!isfinite(cast))
			t->saturate++;
		else if (cast == 0)
			t->underflow++;
	}
}

f8_status f8_calibration_stats_observe(f8_calibration_stats *stats, const char *scope,
				       const char *role, const f8_rt_tensor *values,
				       f8_diag *diag) {
	f8_dtype format;
	if (!role_format(role, stats->settings.format, &format))
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "calibration role '%s' is not x, w or dy",
				   role);
	if (!f8_dtype_is_float(values->dtype))
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "calibration of %s (%s) needs floats, not "
				   "%s", scope, role, f8_dtype_name(values->dtype));
	tracked *t = NULL;
	f8_status status = find_tracked(stats, scope, role, format, &t, diag);
	if (status)
		return status;
	size_t n = (size_t)f8_rt_tensor_numel(values);
	float *widened = NULL;
	const float *x = values->data;
	if (values->dtype != F8_DTYPE_F32) { // exact for every narrower float f8c stores
		if (!(widened = f8_malloc((n ? n : 1) * sizeof *widened)))
			return nomem(diag);
		for (size_t i = 0; i < n; i++)
			widened[i] = (float)f8_rt_tensor_get(values, (int64_t)i);
		x = widened;
	}
	float amax = f8_amax(x, n);
	// The scale the cast would use now: delayed scaling's from the history, or with no
	// history yet (the first step) the tensor's own amax.
	float scale = t->n_history ? t->scale
				   : f8_scale_from_amax(t->format, amax, stats->settings.margin, 1.0f);
	count_values(t, x, n, scale);
	f8_free(widened);
	// The step's amax is the largest seen in it; a NaN, once seen, stays.
	if (!t->observed || (!isnan(t->step_amax) && (isnan(amax) || amax > t->step_amax)))
		t->step_amax = amax;
	t->observed = true;
	return F8_OK;
}

/* Rolls a finite amax into t's history and derives the next step's scale, as ScalingUpdate does
 * (ir/infer_fused.c). */
static void roll_history(tracked *t, const f8_calibration_settings *settings) {
	int len = settings->amax_history_len;
	if (isfinite(t->step_amax)) {
		memmove(t->history + 1, t->history, (size_t)(len - 1) * sizeof *t->history);
		t->history[0] = t->step_amax;
		if (t->n_history < len)
			t->n_history++;
	}
	if (!t->n_history)
		return;
	float amax = t->history[0];
	if (settings->amax_algo == F8_AMAX_ALGO_MAX)
		for (int i = 1; i < t->n_history; i++)
			amax = t->history[i] > amax ? t->history[i] : amax;
	t->scale = f8_scale_from_amax(t->format, amax, settings->margin, t->scale);
}

f8_status f8_calibration_stats_end_step(f8_calibration_stats *stats, f8_diag *diag) {
	for (size_t i = 0; i < stats->n_tracked; i++) {
		tracked *t = &stats->tracked[i];
		if (!t->observed)
			continue;
		if (t->n_amaxes == t->cap_amaxes) {
			size_t cap = t->cap_amaxes ? 2 * t->cap_amaxes : 16;
			double *grown = f8_realloc(t->amaxes, cap * sizeof *grown);
			if (!grown)
				return nomem(diag);
			t->amaxes = grown;
			t->cap_amaxes = cap;
		}
		t->amaxes[t->n_amaxes++] = t->step_amax;
		roll_history(t, &stats->settings);
		t->observed = false;
	}
	stats->steps++;
	return F8_OK;
}

/* The statistics of one entry's step amaxes (the finite ones). */
static void summarize_amaxes(const tracked *t, f8_calibration_entry *e) {
	double sum = 0, squares = 0, previous = 0;
	size_t n = 0;
	e->max_step_ratio = 1;
	for (size_t i = 0; i < t->n_amaxes; i++) {
		double a = t->amaxes[i];
		if (!isfinite(a))
			continue;
		sum += a, n++;
		// A step from or to 0 has no ratio: the scale then stays as it was.
		if (previous > 0 && a > 0) {
			double ratio = a > previous ? a / previous : previous / a;
			e->max_step_ratio = ratio > e->max_step_ratio ? ratio : e->max_step_ratio;
		}
		previous = a;
	}
	e->amax_mean = n ? sum / (double)n : 0;
	for (size_t i = 0; i < t->n_amaxes; i++)
		if (isfinite(t->amaxes[i]))
			squares += (t->amaxes[i] - e->amax_mean) * (t->amaxes[i] - e->amax_mean);
	e->amax_std = n ? sqrt(squares / (double)n) : 0;
	e->amax_cv = e->amax_mean > 0 ? e->amax_std / e->amax_mean : 0;
	e->underflow = t->nonzero ? (double)t->underflow / (double)t->nonzero : 0;
	e->saturate = t->values ? (double)t->saturate / (double)t->values : 0;
	e->steps = (int64_t)t->n_amaxes;
}

/* An empty file whose arena holds n entries. */
static f8_status file_create(size_t n, f8_calibration_file **out, f8_diag *diag) {
	f8_calibration_file *file = f8_calloc(1, sizeof *file);
	if (file && !(file->arena = f8_arena_create())) {
		f8_free(file);
		file = NULL;
	}
	if (file && !(file->entries = f8_arena_alloc_array(file->arena, n ? n : 1,
							    sizeof *file->entries))) {
		f8_calibration_file_destroy(file);
		file = NULL;
	}
	if (!file)
		return nomem(diag);
	file->calibration = (f8_calibration){.entries = file->entries, .n_entries = n};
	*out = file;
	return F8_OK;
}

f8_status f8_calibration_stats_summarize(const f8_calibration_stats *stats, const char *model,
					 f8_calibration_file **out, f8_diag *diag) {
	*out = NULL;
	if (stats->steps < 1)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "no calibration step has ended");
	f8_calibration_file *file;
	f8_status status = file_create(stats->n_tracked, &file, diag);
	if (status)
		return status;
	file->steps = stats->steps;
	file->settings = stats->settings;
	file->model = file->calibration.model = f8_arena_strdup(file->arena, model ? model : "");
	bool copied = file->model != NULL;
	for (size_t i = 0; i < stats->n_tracked; i++) {
		const tracked *t = &stats->tracked[i];
		f8_calibration_entry *e = &file->entries[i];
		summarize_amaxes(t, e);
		e->scope = f8_arena_strdup(file->arena, t->scope);
		e->role = f8_arena_strdup(file->arena, t->role);
		copied &= e->scope && e->role;
	}
	if (!copied) {
		f8_calibration_file_destroy(file);
		return nomem(diag);
	}
	*out = file;
	return F8_OK;
}

void f8_calibration_file_destroy(f8_calibration_file *file) {
	if (!file)
		return;
	f8_arena_destroy(file->arena);
	f8_free(file);
}

/* A JSON number, or null where it is not finite (JSON has no inf or nan). */
static json_t *json_number_or_null(double x) {
	return isfinite(x) ? json_real(x) : json_null();
}

/* The document of `file`, NULL when out of memory. */
static json_t *file_document(const f8_calibration_file *file) {
	const f8_calibration_settings *s = &file->settings;
	json_t *tensors = json_array();
	char digest[24];
	snprintf(digest, sizeof digest, "%016" PRIx64, file->calibration.digest);
	json_t *root = json_pack("{s:s, s:i, s:s, s:s, s:I, s:I, s:s, s:i, s:s, s:i, s:o}", "format",
				 FILE_FORMAT, "version", FILE_VERSION, "model",
				 file->model ? file->model : "", "model_digest", digest,
				 "linear_layers", (json_int_t)file->calibration.layers,
				 "steps", (json_int_t)file->steps,
				 "fp8_format", f8_fp8_format_name(s->format), "amax_history_len",
				 s->amax_history_len, "amax_compute_algo",
				 f8_amax_algo_name(s->amax_algo), "margin", s->margin, "tensors",
				 tensors);
	if (!root)
		return NULL;
	for (size_t i = 0; i < file->calibration.n_entries; i++) {
		const f8_calibration_entry *e = &file->calibration.entries[i];
		json_t *entry = json_pack(
			"{s:s, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:I}", "scope", e->scope, "role",
			e->role, "amax_mean", json_number_or_null(e->amax_mean), "amax_std",
			json_number_or_null(e->amax_std), "amax_cv", json_number_or_null(e->amax_cv),
			"max_step_ratio", json_number_or_null(e->max_step_ratio), "underflow",
			json_number_or_null(e->underflow), "saturate",
			json_number_or_null(e->saturate), "steps", (json_int_t)e->steps);
		if (!entry || json_array_append_new(tensors, entry)) {
			json_decref(root);
			return NULL;
		}
	}
	return root;
}

/* Writes `document` to `path` atomically. */
static f8_status write_document(const char *path, const json_t *document, f8_diag *diag) {
	f8_atomic_file *out;
	f8_status status = f8_atomic_file_open(path, &out, diag);
	if (status)
		return status;
	FILE *stream = f8_atomic_file_stream(out);
	if (json_dumpf(document, stream, JSON_INDENT(2) | JSON_REAL_PRECISION(17)) != 0 ||
	    fputc('\n', stream) == EOF) {
		f8_atomic_file_abort(out);
		return f8_diag_set_in_file(diag, path, F8_ERR_IO, "cannot write the statistics");
	}
	return f8_atomic_file_commit(out, diag);
}

f8_status f8_calibration_write(const char *path, const f8_calibration_file *file,
			       f8_diag *diag) {
	// jansson's allocations through f8_malloc, so that a failed one is seen (ir/json.h).
	f8_jansson_scope scope;
	f8_jansson_enter(&scope);
	json_t *document = file_document(file);
	f8_status status = document && !f8_jansson_out_of_memory()
				   ? write_document(path, document, diag)
				   : nomem(diag);
	json_decref(document);
	if (f8_jansson_leave(&scope) && !status)
		status = nomem(diag);
	return status;
}

/* Loads the JSON document at `path` (inside an f8_jansson scope); F8_ERR_IO when it cannot be
 * read, F8_ERR_PARSE at the line:column jansson stopped at. */
static f8_status load_document(const char *path, json_t **out, f8_diag *diag) {
	FILE *file = fopen(path, "rb");
	if (!file)
		return f8_diag_set_in_file(diag, path, F8_ERR_IO, "cannot open: %s", strerror(errno));
	json_error_t error;
	*out = json_loadf(file, JSON_REJECT_DUPLICATES, &error);
	fclose(file);
	if (*out)
		return F8_OK;
	if (f8_jansson_out_of_memory() || json_error_code(&error) == json_error_out_of_memory)
		return nomem(diag);
	f8_diag_at(diag, path, error.line > 0 ? (uint32_t)error.line : 0,
		   error.column > 0 ? (uint32_t)error.column : 1, NULL, 0);
	return f8_diag_set(diag, F8_ERR_PARSE, "malformed JSON: %s", error.text);
}

/* What reading a file needs at hand: the path for messages, the diagnostic, the result. */
typedef struct reader {
	const char *path;
	f8_diag *diag;
	f8_calibration_file *file;
} reader;

static f8_status invalid(reader *r, const char *format, ...) __attribute__((format(printf, 2, 3)));

/* F8_ERR_INVALID in the file, with a hint on where such files come from. */
static f8_status invalid(reader *r, const char *format, ...) {
	char message[F8_DIAG_MESSAGE_MAX];
	va_list args;
	va_start(args, format);
	vsnprintf(message, sizeof message, format, args);
	va_end(args);
	f8_diag_set_in_file(r->diag, r->path, F8_ERR_INVALID, "%s", message);
	f8_diag_hint(r->diag, "a calibration file is what f8c calibrate MODEL --data TOKENS.bin "
		     "--steps N -o STATS.json writes");
	return F8_ERR_INVALID;
}

/* A non-negative number (at most `most`) at `key` of `object` into *out. */
static bool read_number(const json_t *object, const char *key, double most, double *out) {
	const json_t *value = json_object_get(object, key);
	if (!json_is_number(value))
		return false;
	*out = json_number_value(value);
	return *out >= 0 && *out <= most;
}

static const char *const entry_keys[] = {"scope", "role", "amax_mean", "amax_std", "amax_cv",
					 "max_step_ratio", "underflow", "saturate", "steps", NULL};

/* Entry i of the "tensors" array. */
static f8_status read_entry(reader *r, const json_t *object, size_t i) {
	if (!json_is_object(object))
		return invalid(r, "tensor %zu is not an object", i + 1);
	const char *key;
	const json_t *value;
	json_object_foreach((json_t *)object, key, value) {
		bool known = false;
		for (int k = 0; entry_keys[k]; k++)
			known |= strcmp(key, entry_keys[k]) == 0;
		if (!known)
			return invalid(r, "tensor %zu: unknown key \"%s\"", i + 1, key);
	}
	f8_calibration_entry *e = &r->file->entries[i];
	const char *scope = json_string_value(json_object_get(object, "scope"));
	const char *role = json_string_value(json_object_get(object, "role"));
	f8_dtype format;
	if (!scope || !*scope)
		return invalid(r, "tensor %zu: \"scope\" must be a layer's scope name", i + 1);
	if (!role || !role_format(role, F8_FP8_FORMAT_HYBRID, &format))
		return invalid(r, "tensor %zu (%s): \"role\" must be \"x\", \"w\" or \"dy\"", i + 1,
			       scope);
	struct { const char *key; double most; double *out; } numbers[] = {
		{"amax_mean", HUGE_VAL, &e->amax_mean}, {"amax_std", HUGE_VAL, &e->amax_std},
		{"amax_cv", HUGE_VAL, &e->amax_cv}, {"max_step_ratio", HUGE_VAL, &e->max_step_ratio},
		{"underflow", 1, &e->underflow}, {"saturate", 1, &e->saturate}};
	for (size_t k = 0; k < sizeof numbers / sizeof numbers[0]; k++)
		if (!read_number(object, numbers[k].key, numbers[k].most, numbers[k].out))
			return invalid(r, "tensor %zu (%s %s): \"%s\" must be a number in 0..%s",
				       i + 1, scope, role, numbers[k].key,
				       numbers[k].most == 1 ? "1" : "inf");
	const json_t *steps = json_object_get(object, "steps");
	if (!json_is_integer(steps) || json_integer_value(steps) < 0)
		return invalid(r, "tensor %zu (%s %s): \"steps\" must be an integer >= 0", i + 1,
			       scope, role);
	e->steps = json_integer_value(steps);
	for (size_t j = 0; j < i; j++)
		if (strcmp(r->file->entries[j].scope, scope) == 0 &&
		    strcmp(r->file->entries[j].role, role) == 0)
			return invalid(r, "tensors %zu and %zu are both %s %s", j + 1, i + 1, scope,
				       role);
	e->scope = f8_arena_strdup(r->file->arena, scope);
	e->role = f8_arena_strdup(r->file->arena, role);
	return e->scope && e->role ? F8_OK : nomem(r->diag);
}

static const char *const file_keys[] = {"format", "version", "model", "model_digest",
					"linear_layers", "steps", "fp8_format", "amax_history_len",
					"amax_compute_algo", "margin", "tensors", NULL};

/* The header of the document: everything but the tensors. */
static f8_status read_header(reader *r, const json_t *root) {
	const char *key;
	const json_t *value;
	json_object_foreach((json_t *)root, key, value) {
		bool known = false;
		for (int k = 0; file_keys[k]; k++)
			known |= strcmp(key, file_keys[k]) == 0;
		if (!known)
			return invalid(r, "unknown key \"%s\"", key);
	}
	const char *format = json_string_value(json_object_get(root, "format"));
	if (!format || strcmp(format, FILE_FORMAT) != 0)
		return invalid(r, "\"format\" must be \"" FILE_FORMAT "\"");
	if (json_integer_value(json_object_get(root, "version")) != FILE_VERSION)
		return invalid(r, "f8c reads version %d of the calibration file (an older one does not "
			       "say which model's layers it holds: calibrate again)", FILE_VERSION);
	const char *digest = json_string_value(json_object_get(root, "model_digest"));
	const json_t *layers = json_object_get(root, "linear_layers");
	char *end = NULL;
	uint64_t bound = digest ? strtoull(digest, &end, 16) : 0;
	if (!digest || strlen(digest) != 16 || *end || !json_is_integer(layers) ||
	    json_integer_value(layers) < 0 || json_integer_value(layers) > UINT32_MAX)
		return invalid(r, "\"model_digest\" must be 16 hexadecimal digits and "
			       "\"linear_layers\" a count");
	r->file->calibration.digest = bound;
	r->file->calibration.layers = (uint32_t)json_integer_value(layers);
	f8_calibration_settings *s = &r->file->settings;
	const char *fp8_format = json_string_value(json_object_get(root, "fp8_format"));
	const char *algo = json_string_value(json_object_get(root, "amax_compute_algo"));
	const json_t *steps = json_object_get(root, "steps");
	const json_t *len = json_object_get(root, "amax_history_len");
	const json_t *margin = json_object_get(root, "margin");
	const char *model = json_string_value(json_object_get(root, "model"));
	if (!fp8_format || !f8_fp8_format_from_name(fp8_format, &s->format))
		return invalid(r, "\"fp8_format\" must be \"hybrid\" or \"e4m3\"");
	if (!algo || !f8_amax_algo_from_name(algo, &s->amax_algo))
		return invalid(r, "\"amax_compute_algo\" must be \"max\" or \"most_recent\"");
	if (!json_is_integer(steps) || json_integer_value(steps) < 1 || !json_is_integer(len) ||
	    json_integer_value(len) < 1 || json_integer_value(len) > INT32_MAX ||
	    !json_is_integer(margin) || json_integer_value(margin) < 0 ||
	    json_integer_value(margin) > 64)
		return invalid(r, "\"steps\" and \"amax_history_len\" must be integers >= 1, "
			       "\"margin\" an integer in 0..64");
	if (!model)
		return invalid(r, "\"model\" must be a string");
	r->file->steps = json_integer_value(steps);
	s->amax_history_len = (int)json_integer_value(len);
	s->margin = (int)json_integer_value(margin);
	r->file->model = r->file->calibration.model = f8_arena_strdup(r->file->arena, model);
	return r->file->model ? F8_OK : nomem(r->diag);
}

f8_status f8_calibration_read(const char *path, f8_calibration_file **out, f8_diag *diag) {
	*out = NULL;
	json_t *root;
	f8_jansson_scope scope;
	f8_jansson_enter(&scope);
	f8_status status = load_document(path, &root, diag);
	if (status) {
		f8_jansson_leave(&scope);
		return status;
	}
	reader r = {.path = path, .diag = diag};
	const json_t *tensors = json_object_get(root, "tensors");
	if (!json_is_object(root) || !json_is_array(tensors))
		status = invalid(&r, "a calibration file is an object with a \"tensors\" array");
	if (!status)
		status = file_create(json_array_size(tensors), &r.file, diag);
	if (!status)
		status = read_header(&r, root);
	for (size_t i = 0; !status && i < json_array_size(tensors); i++)
		status = read_entry(&r, json_array_get(tensors, i), i);
	if (!status && !(r.file->calibration.source = f8_arena_strdup(r.file->arena, path)))
		status = nomem(diag);
	json_decref(root);
	if (f8_jansson_leave(&scope) && !status)
		status = nomem(diag);
	if (status) {
		f8_calibration_file_destroy(r.file);
		return status;
	}
	*out = r.file;
	return F8_OK;
}
