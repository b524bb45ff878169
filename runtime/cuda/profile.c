/*
 * f8c's own timing of a GPU step (runtime/cuda/profile.h): events around each launch, folded
 * into totals per category when a run ends.
 */
#define _POSIX_C_SOURCE 200809L // clock_gettime

#include "runtime/cuda/profile.h" // f8_cuda_profile

#include <ctype.h>  // isdigit
#include <stdio.h>  // fprintf, snprintf, fputs, fputc
#include <string.h> // strcmp, strncmp, memset
#include <time.h>   // clock_gettime

#include "ir/alloc.h"            // f8_calloc, f8_realloc, f8_free
#include "ir/graph.h"            // F8_PHASE_OPT
#include "runtime/atomic_file.h" // f8_atomic_file_*
#include "runtime/executor.h"    // F8_PHASE_BIT

enum {
	MAX_CATEGORIES = 64,
};

typedef struct category_total {
	const char *name;
	double milliseconds; // in the counted steps
	uint64_t launches;
} category_total;

/* What one item (a node, a group) took in the counted steps. */
typedef struct item_total {
	const char *name; // NULL: never launched
	uint32_t category;
	double milliseconds;
	uint64_t launches;
} item_total;

/* One timed launch of the run in progress: its events, category and item. */
typedef struct timed {
	CUevent start, stop;
	uint32_t category;
	uint32_t item;
} timed;

struct f8_cuda_profile {
	category_total categories[MAX_CATEGORIES];
	uint32_t n_categories;
	item_total *items;        // (n_items) by the caller's item number
	uint32_t n_items;
	timed *launches;          // the run's, then reused: the events are made once
	uint32_t n_launches, cap_launches, n_events_made;
	bool open;                // a start without its stop yet
	bool counting;            // the warm-up step is over
	uint32_t key;             // the run's
	uint64_t steps;           // optimizer runs counted
	double counted_from;      // host seconds at the warm-up's end
	double counted_to;        // host seconds at the last counted step's end
	uint64_t device_peak;     // the most device memory in use at a run's end
	uint64_t device_total;
};

static double now_seconds(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

f8_status f8_cuda_profile_create(f8_cuda_profile **out, f8_diag *diag) {
	if (!(*out = f8_calloc(1, sizeof **out)))
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	return F8_OK;
}

void f8_cuda_profile_destroy(f8_cuda_profile *profile) {
	if (!profile)
		return;
	for (uint32_t i = 0; i < profile->n_events_made; i++) {
		f8_cuda_event_destroy(profile->launches[i].start);
		f8_cuda_event_destroy(profile->launches[i].stop);
	}
	f8_free(profile->launches);
	f8_free(profile->items);
	f8_free(profile);
}

static uint32_t category_index(f8_cuda_profile *profile, const char *name) {
	for (uint32_t i = 0; i < profile->n_categories; i++)
		if (strcmp(profile->categories[i].name, name) == 0)
			return i;
	if (profile->n_categories == MAX_CATEGORIES)
		return MAX_CATEGORIES - 1; // the last one takes the rest; there are far fewer
	profile->categories[profile->n_categories].name = name;
	return profile->n_categories++;
}

f8_status f8_cuda_profile_start(f8_cuda_profile *profile, CUstream stream, const char *category,
				uint32_t item, const char *name, f8_diag *diag) {
	if (item >= profile->n_items) {
		uint32_t n = item + 1 > 2 * profile->n_items ? item + 1 : 2 * profile->n_items;
		item_total *grown = f8_realloc(profile->items, n * sizeof *grown);
		if (!grown)
			return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory timing the step");
		memset(grown + profile->n_items, 0, (n - profile->n_items) * sizeof *grown);
		profile->items = grown;
		profile->n_items = n;
	}
	if (profile->n_launches == profile->cap_launches) {
		uint32_t cap = profile->cap_launches ? 2 * profile->cap_launches : 1024;
		timed *grown = f8_realloc(profile->launches, cap * sizeof *grown);
		if (!grown)
			return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory timing the step");
		profile->launches = grown;
		profile->cap_launches = cap;
	}
	timed *t = &profile->launches[profile->n_launches];
	f8_status status = F8_OK;
	if (profile->n_launches == profile->n_events_made) {
		t->start = t->stop = NULL;
		status = f8_cuda_event_create(&t->start, diag);
		if (!status)
			status = f8_cuda_event_create(&t->stop, diag);
		if (status) {
			f8_cuda_event_destroy(t->start);
			f8_cuda_event_destroy(t->stop);
			return status;
		}
		profile->n_events_made++;
	}
	t->category = category_index(profile, category);
	t->item = item;
	profile->items[item].name = name ? name : category;
	profile->items[item].category = t->category;
	status = f8_cuda_event_record(t->start, stream, diag);
	profile->open = !status;
	return status;
}

f8_status f8_cuda_profile_stop(f8_cuda_profile *profile, CUstream stream, f8_diag *diag) {
	if (!profile->open)
		return F8_OK;
	profile->open = false;
	f8_status status = f8_cuda_event_record(profile->launches[profile->n_launches].stop, stream,
						diag);
	if (!status)
		profile->n_launches++;
	return status;
}

void f8_cuda_profile_run_begin(f8_cuda_profile *profile, uint32_t key) {
	profile->key = key;
	profile->n_launches = 0;
	profile->open = false;
}

f8_status f8_cuda_profile_run_end(f8_cuda_profile *profile, f8_diag *diag) {
	f8_status status = F8_OK;
	for (uint32_t i = 0; !status && profile->counting && i < profile->n_launches; i++) {
		float ms = 0;
		status = f8_cuda_event_elapsed(profile->launches[i].start, profile->launches[i].stop,
					       &ms, diag);
		category_total *c = &profile->categories[profile->launches[i].category];
		c->milliseconds += ms;
		c->launches++;
		item_total *item = &profile->items[profile->launches[i].item];
		item->milliseconds += ms;
		item->launches++;
	}
	profile->n_launches = 0;
	size_t free_bytes = 0, total = 0;
	if (!status)
		status = f8_cuda_memory_info(&free_bytes, &total, diag);
	if (!status && total - free_bytes > profile->device_peak)
		profile->device_peak = total - free_bytes;
	profile->device_total = total;
	if (!status && (profile->key & F8_PHASE_BIT(F8_PHASE_OPT))) { // a step ends here
		double t = now_seconds();
		if (profile->counting)
			profile->steps++;
		else
			profile->counted_from = t;
		profile->counting = true;
		profile->counted_to = t;
	}
	return status;
}

/* Whether items a and b are alike: one category, and names equal but for the layer numbers
 * ("layers.3.mlp.fc1" and "layers.17.mlp.fc1"). */
static bool alike(const item_total *a, const item_total *b) {
	if (a->category != b->category)
		return false;
	const char *x = a->name, *y = b->name;
	while (*x && *y) {
		bool at_layer = strncmp(x, "layers.", 7) == 0 && strncmp(y, "layers.", 7) == 0;
		if (at_layer && isdigit((unsigned char)x[7]) && isdigit((unsigned char)y[7])) {
			for (x += 7; isdigit((unsigned char)*x); x++) {
			}
			for (y += 7; isdigit((unsigned char)*y); y++) {
			}
			continue;
		}
		if (*x++ != *y++)
			return false;
	}
	return *x == *y;
}

/* Writes `name` with each layer number as '*' (inside a JSON string: the names are the
 * graph's value names, which hold no quote or backslash). */
static void write_alike_name(FILE *out, const char *name) {
	for (const char *c = name; *c;) {
		if (strncmp(c, "layers.", 7) == 0 && isdigit((unsigned char)c[7])) {
			fputs("layers.*", out);
			for (c += 7; isdigit((unsigned char)*c); c++) {
			}
			continue;
		}
		if (*c != '"' && *c != '\\' && (unsigned char)*c >= 0x20)
			fputc(*c, out);
		c++;
	}
}

/* Every item that was launched, layers alike summed: their totals into `top` (room for
 * n_items), the largest first, each with how many items it sums in *counts; the count. */
static uint32_t top_items(const f8_cuda_profile *profile, item_total *top, uint32_t *counts) {
	uint32_t n_top = 0;
	item_total merged = {0};
	bool *taken = f8_calloc(profile->n_items ? profile->n_items : 1, sizeof *taken);
	if (!taken)
		return 0;
	for (uint32_t i = 0; i < profile->n_items; i++) {
		if (taken[i] || !profile->items[i].name || !profile->items[i].launches)
			continue;
		merged = profile->items[i];
		uint32_t count = 1;
		for (uint32_t j = i + 1; j < profile->n_items; j++)
			if (!taken[j] && profile->items[j].name && profile->items[j].launches &&
			    alike(&profile->items[i], &profile->items[j])) {
				taken[j] = true;
				merged.milliseconds += profile->items[j].milliseconds;
				merged.launches += profile->items[j].launches;
				count++;
			}
		uint32_t at = n_top++;
		for (; at > 0 && top[at - 1].milliseconds < merged.milliseconds; at--) {
			top[at] = top[at - 1];
			counts[at] = counts[at - 1];
		}
		top[at] = merged;
		counts[at] = count;
	}
	f8_free(taken);
	return n_top;
}

f8_status f8_cuda_profile_write(const f8_cuda_profile *profile, const char *path,
				uint64_t f8c_peak_bytes, char *summary, size_t size, f8_diag *diag) {
	double steps = profile->steps ? (double)profile->steps : 1;
	double wall = (profile->counted_to - profile->counted_from) * 1e3 / steps, busy = 0;
	for (uint32_t i = 0; i < profile->n_categories; i++)
		busy += profile->categories[i].milliseconds / steps;
	// The largest categories first, in the summary and the file.
	uint32_t order[MAX_CATEGORIES];
	for (uint32_t i = 0; i < profile->n_categories; i++) {
		uint32_t j = i;
		for (; j > 0 && profile->categories[order[j - 1]].milliseconds <
				profile->categories[i].milliseconds; j--)
			order[j] = order[j - 1];
		order[j] = i;
	}
	size_t room = profile->n_items ? profile->n_items : 1;
	item_total *top = f8_calloc(room, sizeof *top);
	uint32_t *counts = f8_calloc(room, sizeof *counts);
	f8_atomic_file *file = NULL;
	f8_status status = top && counts ? f8_atomic_file_open(path, &file, diag)
					 : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	if (status) {
		f8_free(top);
		f8_free(counts);
		return status;
	}
	FILE *out = f8_atomic_file_stream(file);
	fprintf(out, "{\n  \"steps\": %llu,\n  \"wall_ms_per_step\": %.4f,\n"
		     "  \"busy_ms_per_step\": %.4f,\n  \"idle_ms_per_step\": %.4f,\n"
		     "  \"device_peak_bytes\": %llu,\n  \"device_total_bytes\": %llu,\n"
		     "  \"f8c_peak_bytes\": %llu,\n  \"categories\": [",
		(unsigned long long)profile->steps, wall, busy, wall > busy ? wall - busy : 0.0,
		(unsigned long long)profile->device_peak, (unsigned long long)profile->device_total,
		(unsigned long long)f8c_peak_bytes);
	int used = snprintf(summary, size, "%llu steps, %.3f ms a step:",
			    (unsigned long long)profile->steps, wall);
	for (uint32_t i = 0; i < profile->n_categories; i++) {
		const category_total *c = &profile->categories[order[i]];
		double ms = c->milliseconds / steps;
		fprintf(out, "%s\n    {\"name\": \"%s\", \"ms_per_step\": %.4f, "
			     "\"launches_per_step\": %.1f, \"share\": %.4f}",
			i ? "," : "", c->name, ms, c->launches / steps, wall > 0 ? ms / wall : 0.0);
		if (i < 4 && used >= 0 && (size_t)used < size)
			used += snprintf(summary + used, size - (size_t)used, " %s %.0f%%,", c->name,
					 wall > 0 ? 100 * ms / wall : 0.0);
	}
	if (used >= 0 && (size_t)used < size)
		snprintf(summary + used, size - (size_t)used, " idle %.0f%%",
			 wall > busy ? 100 * (wall - busy) / wall : 0.0);
	uint32_t n_top = top_items(profile, top, counts);
	fprintf(out, "\n  ],\n  \"top\": [");
	for (uint32_t i = 0; i < n_top; i++) {
		double ms = top[i].milliseconds / steps;
		fprintf(out, "%s\n    {\"category\": \"%s\", \"name\": \"", i ? "," : "",
			profile->categories[top[i].category].name);
		write_alike_name(out, top[i].name);
		fprintf(out, "\", \"items\": %u, \"ms_per_step\": %.4f, "
			     "\"launches_per_step\": %.1f, \"share\": %.4f}", counts[i], ms,
			top[i].launches / steps,
			wall > 0 ? ms / wall : 0.0);
	}
	fprintf(out, "\n  ]\n}\n");
	f8_free(top);
	f8_free(counts);
	return f8_atomic_file_commit(file, diag);
}
