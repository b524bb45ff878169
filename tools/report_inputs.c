/*
 * f8c report's inputs (tools/report.h): metrics files, checkpoint folders, calibration and
 * audit documents, read into the report's model.
 */
#define _POSIX_C_SOURCE 200809L // getline, ssize_t

#include "tools/report.h"

#include <errno.h>  // errno
#include <linux/limits.h> // PATH_MAX
#include <stdbool.h> // bool
#include <math.h>   // NAN
#include <stdlib.h> // strtoll
#include <string.h> // strcmp, strcspn, strerror, strlen, strncmp, strrchr
#include <sys/stat.h> // stat

#include "ir/alloc.h"            // f8_calloc, f8_free, f8_realloc, f8_strdup
#include "runtime/safetensors.h" // f8_safetensors_open, f8_safetensors_read
#include "tools/report_util.h"   // f8_report_ends_with, f8_report_json_number

static f8_status nomem(f8_diag *diag) {
	return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
}

static void free_table(f8_report_table *t) {
	for (uint32_t s = 0; s < t->n_slots; s++) {
		f8_free(t->labels ? t->labels[s] : NULL);
		f8_free(t->formats ? t->formats[s] : NULL);
	}
	f8_free(t->labels);
	f8_free(t->formats);
	f8_free(t->source);
	f8_free(t->name);
	f8_free(t->steps);
	f8_free(t->amax);
	f8_free(t->scale);
	f8_free(t->nonfinite);
}

void f8_report_free(f8_report *report) {
	for (uint32_t i = 0; i < report->n_runs; i++) {
		f8_free(report->runs[i].path);
		f8_free(report->runs[i].label);
		json_decref(report->runs[i].records);
	}
	for (uint32_t i = 0; i < report->n_tables; i++)
		free_table(&report->tables[i]);
	f8_free(report->runs);
	f8_free(report->tables);
	json_decref(report->audit);
	json_decref(report->calibration);
	json_decref(report->profile);
	f8_free(report->audit_source);
	f8_free(report->calibration_path);
	f8_free(report->profile_path);
	*report = (f8_report){0};
}

/* A new table at the end of report->tables, zeroed, or NULL when out of memory. */
static f8_report_table *new_table(f8_report *report) {
	f8_report_table *tables = f8_realloc(report->tables,
					     (report->n_tables + 1) * sizeof *tables);
	if (!tables)
		return NULL;
	report->tables = tables;
	tables[report->n_tables] = (f8_report_table){0};
	return &tables[report->n_tables++];
}

/* Sizes `t` for n_slots slots (labels and formats empty) and no steps. */
static f8_status size_table(f8_report_table *t, const char *source, const char *name,
			    uint32_t n_slots, f8_diag *diag) {
	t->source = f8_strdup(source);
	t->name = f8_strdup(name);
	t->labels = f8_calloc(n_slots + 1, sizeof *t->labels);
	t->formats = f8_calloc(n_slots + 1, sizeof *t->formats);
	t->n_slots = t->labels && t->formats ? n_slots : 0;
	return t->source && t->name && t->labels && t->formats ? F8_OK : nomem(diag);
}

/* Appends a step of amaxes (and scales, or NULL; and the table's count of non-finite amaxes
 * skipped so far, or -1) to `t`. A step at or before the last one (a resumed run's, written
 * after the records of the run it replaces) drops the steps from it on first. */
static f8_status add_step(f8_report_table *t, int64_t step, const double *amax,
			  const double *scale, int64_t nonfinite, f8_diag *diag) {
	while (t->n_steps && t->steps[t->n_steps - 1] >= step)
		t->n_steps--;
	uint32_t n = t->n_steps + 1;
	bool first_scale = scale && !t->scale;
	int64_t *steps = f8_realloc(t->steps, n * sizeof *steps);
	if (steps)
		t->steps = steps;
	double *a = steps ? f8_realloc(t->amax, (size_t)n * t->n_slots * sizeof *a + 1) : NULL;
	if (a)
		t->amax = a;
	double *sc = a && (scale || t->scale)
			     ? f8_realloc(t->scale, (size_t)n * t->n_slots * sizeof *sc + 1)
			     : NULL;
	if (sc)
		t->scale = sc;
	int64_t *counts = a ? f8_realloc(t->nonfinite, n * sizeof *counts) : NULL;
	if (counts)
		t->nonfinite = counts;
	if (!steps || !a || ((scale || t->scale) && !sc) || !counts)
		return nomem(diag);
	// Scales first recorded now: the steps before had none.
	for (size_t i = 0; first_scale && i < (size_t)t->n_steps * t->n_slots; i++)
		t->scale[i] = NAN;
	t->steps[t->n_steps] = step;
	t->nonfinite[t->n_steps] = nonfinite;
	for (uint32_t s = 0; s < t->n_slots; s++) {
		t->amax[(size_t)t->n_steps * t->n_slots + s] = amax[s];
		if (t->scale)
			t->scale[(size_t)t->n_steps * t->n_slots + s] = scale ? scale[s] : NAN;
	}
	t->n_steps = n;
	return F8_OK;
}

/*
 * A run's --log-fp8-stats lines: {"fp8_slots": {TABLE: [labels]}, "fp8_formats": ...} names a
 * table's slots; each {"step": N, "fp8_stats": {TABLE: {"amax": [...], "scale": [...]}}} adds
 * a step. A resumed run names its slots again: the same table goes on. `line` for messages.
 */
static f8_status add_stats_line(f8_report *report, const f8_report_run *run, json_t *record,
				uint32_t first_table, const char *where, FILE *warnings,
				f8_diag *diag) {
	json_t *slots = json_object_get(record, "fp8_slots");
	json_t *stats = json_object_get(record, "fp8_stats");
	const char *name;
	json_t *value;
	if (json_is_object(slots)) {
		json_t *formats = json_object_get(record, "fp8_formats");
		json_object_foreach(slots, name, value) {
			uint32_t i = first_table;
			while (i < report->n_tables && strcmp(report->tables[i].name, name) != 0)
				i++;
			if (i < report->n_tables || !json_is_array(value))
				continue; // named before (a resumed run)
			f8_report_table *t = new_table(report);
			uint32_t n = (uint32_t)json_array_size(value);
			if (!t || size_table(t, run->label, name, n, diag))
				return t ? diag->status : nomem(diag);
			json_t *format = json_object_get(formats, name);
			for (uint32_t s = 0; s < n; s++) {
				const char *label = json_string_value(json_array_get(value, s));
				const char *f = json_string_value(json_array_get(format, s));
				char fallback[32];
				snprintf(fallback, sizeof fallback, "slot %u", s);
				t->labels[s] = f8_strdup(label ? label : fallback);
				t->formats[s] = f && *f ? f8_strdup(f) : NULL;
				if (!t->labels[s])
					return nomem(diag);
			}
		}
	}
	if (!json_is_object(stats))
		return F8_OK;
	json_int_t step = json_integer_value(json_object_get(record, "step"));
	json_object_foreach(stats, name, value) {
		uint32_t i = first_table;
		while (i < report->n_tables && strcmp(report->tables[i].name, name) != 0)
			i++;
		f8_report_table *t = i < report->n_tables ? &report->tables[i] : NULL;
		json_t *amax = json_object_get(value, "amax"), *scale = json_object_get(value, "scale");
		if (!t || json_array_size(amax) != t->n_slots ||
		    (scale && json_array_size(scale) != t->n_slots)) {
			fprintf(warnings, "%s: %s's stats %s: skipped\n", where, name,
				t ? "do not have one value per slot" : "come before a line naming its "
								       "slots");
			continue;
		}
		double *a = f8_calloc(2 * (size_t)t->n_slots + 1, sizeof *a);
		if (!a)
			return nomem(diag);
		for (uint32_t s = 0; s < t->n_slots; s++) {
			a[s] = f8_report_json_number(json_array_get(amax, s));
			a[t->n_slots + s] = f8_report_json_number(json_array_get(scale, s));
		}
		json_t *count = json_object_get(value, "nonfinite");
		f8_status status = add_step(t, step, a, scale ? a + t->n_slots : NULL,
					    json_is_integer(count) ? json_integer_value(count) : -1,
					    diag);
		f8_free(a);
		if (status)
			return status;
	}
	return F8_OK;
}

/* A resumed run appends to the metrics file from its checkpoint's iteration on: a record of
 * a kind (a training step, an evaluation) at or before the last of its kind replaces the
 * records of that kind from its step on, as the resumed run replaced those iterations. */
static f8_status drop_replaced(f8_report_run *run, const json_t *record, f8_diag *diag) {
	static const char *const kinds[] = {"loss", "eval_loss", "lr", "grad_norm"};
	json_int_t step = json_integer_value(json_object_get(record, "step"));
	(void)diag;
	for (size_t i = json_array_size(run->records); i-- > 0;) {
		json_t *old = json_array_get(run->records, i);
		if (json_integer_value(json_object_get(old, "step")) < step)
			continue;
		bool same_kind = false;
		for (size_t k = 0; k < sizeof kinds / sizeof kinds[0] && !same_kind; k++)
			same_kind = json_object_get(old, kinds[k]) && json_object_get(record, kinds[k]);
		if (same_kind)
			json_array_remove(run->records, i);
	}
	return F8_OK;
}

f8_status f8_report_add_metrics(f8_report *report, const char *path, FILE *warnings,
				f8_diag *diag) {
	FILE *in = fopen(path, "r");
	if (!in)
		return f8_diag_set(diag, F8_ERR_IO, "cannot open the metrics file %s: %s", path,
				   strerror(errno));
	f8_report_run *runs = f8_realloc(report->runs, (report->n_runs + 1) * sizeof *runs);
	if (!runs) {
		fclose(in);
		return nomem(diag);
	}
	report->runs = runs;
	f8_report_run *run = &runs[report->n_runs++];
	*run = (f8_report_run){.path = f8_strdup(path), .records = json_array()};
	const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	size_t len = strlen(base);
	if (len > 6 && strcmp(base + len - 6, ".jsonl") == 0)
		len -= 6;
	run->label = f8_malloc(len + 1);
	if (run->label)
		snprintf(run->label, len + 1, "%s", base);
	f8_status status = run->path && run->label && run->records ? F8_OK : nomem(diag);
	uint32_t first_table = report->n_tables;
	char *line = NULL;
	size_t capacity = 0;
	ssize_t n;
	for (unsigned long number = 1; !status && (n = getline(&line, &capacity, in)) >= 0;
	     number++) {
		char where[PATH_MAX + 32];
		snprintf(where, sizeof where, "%s:%lu", path, number);
		if (n == 0 || strspn(line, " \t\r\n") == (size_t)n)
			continue;
		json_error_t error;
		json_t *record = json_loadb(line, (size_t)n, 0, &error);
		if (!json_is_object(record)) {
			fprintf(warnings, "%s: %s: skipped\n", where,
				record ? "not a JSON object"
				       : line[n - 1] != '\n' ? "cut off (no end of line)" : error.text);
			json_decref(record);
			run->skipped++;
			continue;
		}
		if (!json_is_integer(json_object_get(record, "step"))) {
			fprintf(warnings, "%s: no integer \"step\": skipped\n", where);
			json_decref(record);
			run->skipped++;
			continue;
		}
		status = add_stats_line(report, run, record, first_table, where, warnings, diag);
		if (!status)
			status = drop_replaced(run, record, diag);
		if (status)
			json_decref(record);
		else if (json_array_append_new(run->records, record))
			status = nomem(diag);
	}
	if (!status && ferror(in))
		status = f8_diag_set(diag, F8_ERR_IO, "cannot read the metrics file %s", path);
	if (!status && json_array_size(run->records) == 0)
		status = f8_diag_set(diag, F8_ERR_PARSE, "the metrics file %s has no line to draw%s",
				     path, run->skipped ? " (every line was skipped)" : "");
	free(line);
	fclose(in);
	return status;
}

int f8_report_is_checkpoint(const char *folder) {
	char path[PATH_MAX];
	struct stat st;
	snprintf(path, sizeof path, "%s/latest_checkpointed_iteration.txt", folder);
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* A checkpoint's latest iteration, from its record. */
static f8_status latest_iteration(const char *folder, long long *iteration, f8_diag *diag) {
	char path[PATH_MAX], text[32] = "";
	snprintf(path, sizeof path, "%s/latest_checkpointed_iteration.txt", folder);
	FILE *in = fopen(path, "r");
	if (!in)
		return f8_diag_set(diag, F8_ERR_IO, "cannot open %s: %s", path, strerror(errno));
	size_t n = fread(text, 1, sizeof text - 1, in);
	fclose(in);
	text[n] = '\0';
	char *end;
	*iteration = strtoll(text, &end, 10);
	if (end == text || *iteration < 0 || strspn(end, " \r\n") != strlen(end))
		return f8_diag_set(diag, F8_ERR_PARSE, "%s does not hold an iteration", path);
	return F8_OK;
}

enum { MAX_HISTORY = 1 << 16, MAX_SLOTS = 1 << 16 };

/* One table <name>.amax_history f32[len, n] of the checkpoint (row 0 the newest): its updates,
 * oldest first, numbered 1.. (an update is a phase's ScalingUpdate: one an iteration for the
 * weights, one a micro-batch for activations and gradients; a slot whose amax was not finite
 * skips its update). Its scales are not drawn: the checkpoint holds only
 * the newest. The slots are labelled as the checkpoint labels them. */
static f8_status add_history(f8_report *report, const f8_safetensors *file, const char *source,
			     const char *name, f8_diag *diag) {
	char history[128];
	snprintf(history, sizeof history, "%s.amax_history", name);
	f8_rt_tensor h = {0};
	f8_status status = f8_safetensors_read(file, history, &h, diag);
	const f8_safetensors_tensor *info = f8_safetensors_find(file, history);
	if (!status && (info->rank != 2 || info->dims[0] < 1 || info->dims[1] < 1 ||
			info->dims[0] > MAX_HISTORY || info->dims[1] > MAX_SLOTS))
		status = f8_diag_set(diag, F8_ERR_PARSE, "%s: %s is not an amax history [len, "
				     "slots] of at most %d rows and %d slots", source, history,
				     MAX_HISTORY, MAX_SLOTS);
	f8_report_table *t = status ? NULL : new_table(report);
	if (!status && !t)
		status = nomem(diag);
	if (!status)
		status = size_table(t, source, name, (uint32_t)info->dims[1], diag);
	// The rows written: the oldest ones of a short run are still the zeros a table starts
	// with.
	long long rows = status ? 0 : info->dims[0];
	for (bool written = false; !status && rows > 0 && !written; rows -= !written)
		for (uint32_t s = 0; s < t->n_slots && !written; s++)
			written = f8_rt_tensor_get(&h, (int64_t)(rows - 1) * t->n_slots + s) != 0;
	double *row = status ? NULL : f8_calloc(t->n_slots + 1, sizeof *row);
	if (!status && !row)
		status = nomem(diag);
	// What each slot scales, where the checkpoint says it ("slots.<table>", a label a line:
	// runtime/scaling_tables.h); else its number.
	char key[160];
	snprintf(key, sizeof key, "slots.%s", name);
	const char *labels = f8_safetensors_metadata(file, key);
	uint32_t lines = 1;
	for (const char *c = labels; c && *c; c++)
		lines += *c == '\n';
	if (status || lines != t->n_slots)
		labels = NULL;
	for (uint32_t s = 0; !status && s < t->n_slots; s++) {
		char label[192];
		size_t length = labels ? strcspn(labels, "\n") : 0;
		if (labels)
			snprintf(label, sizeof label, "%.*s", (int)length, labels);
		else
			snprintf(label, sizeof label, "slot %u", s);
		if (!(t->labels[s] = f8_strdup(label)))
			status = nomem(diag);
		labels = labels ? labels + length + 1 : NULL;
	}
	if (!status)
		t->updates = true;
	for (long long r = rows - 1; !status && r >= 0; r--) {
		for (uint32_t s = 0; s < t->n_slots; s++)
			row[s] = f8_rt_tensor_get(&h, (int64_t)r * t->n_slots + s);
		status = add_step(t, rows - r, row, NULL, -1, diag);
	}
	f8_free(row);
	f8_rt_tensor_destroy(&h);
	return status;
}

f8_status f8_report_add_checkpoint(f8_report *report, const char *folder, FILE *warnings,
				   f8_diag *diag) {
	long long iteration = 0;
	f8_status status = latest_iteration(folder, &iteration, diag);
	if (status)
		return status;
	char path[PATH_MAX + 32], source[PATH_MAX];
	snprintf(source, sizeof source, "%s/iter_%07lld", folder, iteration);
	snprintf(path, sizeof path, "%s/optimizer.safetensors", source);
	f8_safetensors *file = NULL;
	if ((status = f8_safetensors_open(path, &file, diag)))
		return status;
	uint32_t added = 0;
	for (size_t i = 0; !status && i < f8_safetensors_count(file); i++) {
		const char *name = f8_safetensors_name(file, i);
		size_t len = strlen(name);
		if (len <= 13 || len >= 100 || strcmp(name + len - 13, ".amax_history") != 0)
			continue;
		char table[100];
		snprintf(table, sizeof table, "%.*s", (int)(len - 13), name);
		status = add_history(report, file, source, table, diag);
		added++;
	}
	if (!status && !added)
		fprintf(warnings, "%s: no FP8 scaling tables (a run without FP8, or with a recipe "
			"that keeps no state): nothing to draw from it\n", path);
	f8_safetensors_close(file);
	return status;
}

f8_status f8_report_add_document(f8_report *report, const char *source, json_t *document,
				 f8_diag *diag) {
	const char *format = json_string_value(json_object_get(document, "format"));
	json_t **slot;
	char **name;
	if (format && strcmp(format, "f8c-calibration") == 0 &&
	    json_is_array(json_object_get(document, "tensors"))) {
		slot = &report->calibration;
		name = &report->calibration_path;
	} else if (json_is_array(json_object_get(document, "gemms")) &&
		   json_is_object(json_object_get(document, "summary"))) {
		slot = &report->audit;
		name = &report->audit_source;
	} else if (json_is_array(json_object_get(document, "categories")) &&
		   json_is_number(json_object_get(document, "wall_ms_per_step"))) {
		slot = &report->profile;
		name = &report->profile_path;
	} else {
		f8_diag_set(diag, F8_ERR_PARSE, "%s is not a calibration (f8c calibrate's "
			    "STATS.json), an audit (f8c audit --json) or a profile (f8c train "
			    "--profile)", source);
		f8_diag_hint(diag, "a model description goes last among the inputs, with its "
			     "options after it");
		return F8_ERR_PARSE;
	}
	if (*slot)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "%s: the report takes one %s, and %s is "
				   "one already", source, slot == &report->audit ? "audit (a model, "
				   "plan or audit document)" : slot == &report->profile ? "profile"
				   : "calibration", *name);
	char *copied = f8_strdup(source);
	if (!copied)
		return nomem(diag);
	*slot = json_incref(document);
	*name = copied;
	return F8_OK;
}

/* A slot's label from an audit operand's reason, as f8c train's --log-fp8-stats writes it:
 * the reason up to the GEMMs it feeds ("w of layers.0.attn.qkv"). */
static char *operand_label(const char *reason) {
	size_t n = strcspn(reason, "(,");
	while (n > 0 && reason[n - 1] == ' ')
		n--;
	char *label = f8_malloc(n + 1);
	if (label)
		snprintf(label, n + 1, "%s", reason);
	return label;
}

f8_status f8_report_label_slots(f8_report *report, f8_diag *diag) {
	json_t *gemms = report->audit ? json_object_get(report->audit, "gemms") : NULL;
	for (size_t g = 0; g < json_array_size(gemms); g++) {
		json_t *operands = json_object_get(json_array_get(gemms, g), "operands");
		for (size_t o = 0; o < json_array_size(operands); o++) {
			json_t *operand = json_array_get(operands, o);
			const char *table = json_string_value(json_object_get(operand, "scale_table"));
			const char *reason = json_string_value(json_object_get(operand, "reason"));
			const char *format = json_string_value(json_object_get(operand, "format"));
			json_t *slot = json_object_get(operand, "slot");
			if (!table || !reason || !json_is_integer(slot) ||
			    !f8_report_ends_with(table, ".scale"))
				continue;
			for (uint32_t i = 0; i < report->n_tables; i++) {
				f8_report_table *t = &report->tables[i];
				json_int_t s = json_integer_value(slot);
				if (strlen(t->name) + 6 != strlen(table) ||
				    strncmp(t->name, table, strlen(t->name)) != 0 || s < 0 ||
				    s >= t->n_slots || strncmp(t->labels[s], "slot ", 5) != 0)
					continue;
				char *label = operand_label(reason);
				char *copied = format && !t->formats[s] ? f8_strdup(format) : NULL;
				if (!label || (format && !t->formats[s] && !copied)) {
					f8_free(label);
					return nomem(diag);
				}
				f8_free(t->labels[s]);
				t->labels[s] = label;
				if (copied)
					t->formats[s] = copied;
			}
		}
	}
	return F8_OK;
}
