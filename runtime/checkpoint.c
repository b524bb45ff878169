/*
 * Checkpoints: params to weights.safetensors, optimizer and scaling state to
 * optimizer.safetensors; loads check everything before anything is written.
 */
#define _GNU_SOURCE // renameat2, RENAME_EXCHANGE; mkdir, clock_gettime

#include "runtime/checkpoint.h" // f8_checkpoint_save, f8_checkpoint_load

#include <dirent.h>   // opendir, readdir
#include <errno.h>    // errno, EEXIST, ENOENT
#include <fcntl.h>    // AT_FDCWD
#include <inttypes.h> // PRIu64, PRId64, SCNu64
#include <stdio.h>    // snprintf
#include <stdlib.h>   // strtoull, strtoll
#include <string.h>   // strcmp, strncmp, strlen, strerror
#include <sys/stat.h> // mkdir, stat
#include <time.h>     // clock_gettime
#include <unistd.h>   // rmdir, unlink

#include "ir/alloc.h"                // f8_calloc, f8_free, f8_strdup
#include "runtime/atomic_file.h"    // f8_atomic_file_*, f8_atomic_file_sync_folder
#include "runtime/placement.h"      // f8_rt_take_part, f8_rt_part_layout, f8_rt_place_piece
#include "runtime/safetensors.h"    // f8_safetensors_*
#include "runtime/scaling_tables.h" // f8_rt_scaling_tables_find
#include "runtime/tensor.h"         // f8_rt_tensor_find_nonfinite

enum { WEIGHTS, OPTIMIZER, N_FILES };
static const char *const file_names[N_FILES] = {"weights.safetensors", "optimizer.safetensors"};
static const char LATEST[] = "latest_checkpointed_iteration.txt"; // Megatron-LM's name
enum { SETTING_KEY_MAX = 96 };

/* Which file leaf `v` is saved in, or -1 for none: params to the weights; optimizer and scaling
 * state to the optimizer file; not the gradient accumulators (the leaves that the backward adds
 * to and the optimizer step zeroes), which are zero between steps, nor the FP8 weight caches,
 * which the cast phase remakes at every step. The gradients' scaling table is updated by the
 * backward too, but never zeroed: it is saved. */
static int file_of(const f8_graph *graph, f8_value_id v) {
	const f8_value *value = &graph->values[v];
	if (value->role == F8_ROLE_PARAMETER)
		return WEIGHTS;
	if (value->role != F8_ROLE_OPTIMIZER_STATE && value->role != F8_ROLE_SCALE &&
	    value->role != F8_ROLE_AMAX_HISTORY)
		return -1;
	bool backward = false, optimizer = false;
	for (uint32_t i = 0; i < graph->n_updates; i++) {
		const f8_value *source = &graph->values[graph->updates[i].source];
		if (graph->updates[i].target != v)
			continue;
		backward |= graph->nodes[source->producer].phase == F8_PHASE_BWD;
		optimizer |= graph->nodes[source->producer].phase == F8_PHASE_OPT;
	}
	return backward && optimizer ? -1 : OPTIMIZER;
}

static f8_status path_in(const char *folder, const char *name, char *path, size_t size,
			 f8_diag *diag) {
	if (snprintf(path, size, "%s/%s", folder, name) >= (int)size)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "checkpoint folder path too long: %s", folder);
	return F8_OK;
}

static f8_status make_folder(const char *path, f8_diag *diag) {
	if (mkdir(path, 0777) != 0 && errno != EEXIST)
		return f8_diag_set(diag, F8_ERR_IO, "cannot make checkpoint folder %s: %s", path,
				   strerror(errno));
	return F8_OK;
}

/* Writes the record of the newest complete save, atomically. */
static f8_status write_latest(const char *folder, int64_t iteration, f8_diag *diag) {
	char path[4096], text[32];
	f8_status status = path_in(folder, LATEST, path, sizeof path, diag);
	int len = snprintf(text, sizeof text, "%" PRId64 "\n", iteration);
	f8_atomic_file *file = NULL;
	if (!status)
		status = f8_atomic_file_open(path, &file, diag);
	if (!status && (status = f8_atomic_file_write(file, text, (size_t)len, diag)))
		f8_atomic_file_abort(file);
	else if (!status)
		status = f8_atomic_file_commit(file, diag);
	return status;
}

/* Whether leaf `v` is held by both the first and the last pipeline stage: a parameter tied
 * between them (placed tied=pp, as a GPT's embedding table) or its optimizer state
 * (<param>.exp_avg and the others), which both stages keep alike. */
static bool tied_over_pp(const f8_graph *graph, f8_value_id v) {
	const f8_value *value = &graph->values[v];
	if (value->placement[F8_MESH_AXIS_PP].kind == F8_PLACEMENT_KIND_TIED)
		return true;
	for (uint32_t i = 0; i < graph->n_inputs; i++) {
		const f8_value *param = &graph->values[graph->inputs[i]];
		size_t len = strlen(param->name);
		if (param->placement[F8_MESH_AXIS_PP].kind == F8_PLACEMENT_KIND_TIED &&
		    strncmp(value->name, param->name, len) == 0 && value->name[len] == '.')
			return true;
	}
	return false;
}

/* Whether this rank writes its part of leaf `v` into its shard: of the ranks that hold the same
 * part (those that differ only along axes that do not split it), the one at place 0 on each of
 * those axes. Pipeline stages hold leaves of their own, so every stage writes its leaves but
 * those tied between stages, which the first stage writes. A leaf every stage has (the
 * optimizer's step count) is then in several shards, alike; each stage's FP8 scaling tables
 * too, each with its slots' labels. `dist` NULL: one process, which writes everything. */
static bool writes(const f8_graph *graph, const f8_dist *dist, f8_value_id v) {
	uint32_t split = f8_rt_split_axes(&graph->values[v]);
	for (int axis = 0; dist && axis < F8_MESH_AXIS_COUNT; axis++) {
		if ((split & (1u << axis)) || f8_dist_group_rank(dist, 1u << axis) == 0)
			continue;
		if (axis == F8_MESH_AXIS_PP && !tied_over_pp(graph, v))
			continue;
		return false;
	}
	return true;
}

/* The leaves file `which` holds (with `dist`, this rank's shard: its parts of those it
 * writes), read to the host, into host[] and their names into names[]; *n of them. */
static f8_status read_file_leaves(const f8_executor *executor, const f8_dist *dist, int which,
				  const char **names, f8_rt_tensor *host, size_t *n,
				  f8_diag *diag) {
	const f8_graph *graph = f8_executor_graph(executor);
	f8_status status = F8_OK;
	*n = 0;
	for (uint32_t i = 0; !status && i < graph->n_inputs; i++) {
		f8_value_id v = graph->inputs[i];
		if (file_of(graph, v) != which || !writes(graph, dist, v))
			continue;
		names[*n] = graph->values[v].name;
		status = f8_executor_read(executor, v, &host[*n], diag);
		*n += !status;
	}
	return status;
}

enum { LAYOUT_KEY = 256 }; // "layout.NAME"

/* A shard's metadata of its parts: "layout.NAME" -> the part's layout (f8_rt_part_layout) for
 * each leaf a mesh axis splits, appended to keys/values at *n; `text` holds them (n_names items
 * of LAYOUT_KEY + F8_RT_LAYOUT_MAX bytes). */
static f8_status add_layouts(const f8_graph *graph, const f8_dist *dist, const char *const *names,
			     size_t n_names, char *text, const char **keys, const char **values,
			     size_t *n, f8_diag *diag) {
	for (size_t i = 0; i < n_names; i++) {
		f8_value_id v = f8_graph_find_value(graph, names[i], strlen(names[i]));
		char *key = text + i * (LAYOUT_KEY + F8_RT_LAYOUT_MAX), *layout = key + LAYOUT_KEY;
		if (!f8_rt_split_axes(&graph->values[v]))
			continue;
		if (snprintf(key, LAYOUT_KEY, "layout.%s", names[i]) >= LAYOUT_KEY ||
		    !f8_rt_part_layout(&graph->values[v], dist, layout, F8_RT_LAYOUT_MAX))
			return f8_diag_set(diag, F8_ERR_ARGUMENT, "the layout of %%%s is too long for "
					   "a checkpoint's metadata", names[i]);
		if (!layout[0]) // split by an axis of one rank: whole
			continue;
		keys[*n] = key;
		values[(*n)++] = layout;
	}
	return F8_OK;
}

/* Each scaling table among a file's leaves (names[], n of them) with its slots' labels, a line
 * each, as metadata "slots.<table>" (runtime/scaling_tables.h): the labels, not the slots'
 * numbers, match a slot across layouts. keys[] and texts[] (F8_RT_SCALING_TABLES_MAX each,
 * f8_free'd by the caller) hold the strings, appended to all_keys/all_values at *n_keys. */
static f8_status add_slot_labels(const f8_graph *graph, const char *const *names, size_t n,
				 char **keys, char **texts, const char **all_keys,
				 const char **all_values, size_t *n_keys, f8_diag *diag) {
	f8_rt_scaling_table tables[F8_RT_SCALING_TABLES_MAX];
	uint32_t n_tables = 0;
	f8_status status = f8_rt_scaling_tables_find(graph, tables, &n_tables, diag);
	for (uint32_t t = 0; !status && t < n_tables; t++) {
		const f8_rt_scaling_table *table = &tables[t];
		bool held = false;
		for (size_t i = 0; i < n && !held; i++)
			held = strcmp(names[i], graph->values[table->scale].name) == 0;
		if (!held)
			continue;
		size_t length = 1;
		for (uint32_t s = 0; s < table->n_slots; s++)
			length += strlen(table->labels[s]) + 1;
		keys[t] = f8_calloc(sizeof table->name + 8, 1);
		texts[t] = f8_calloc(length, 1);
		if (!keys[t] || !texts[t]) {
			status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
			break;
		}
		snprintf(keys[t], sizeof table->name + 8, "slots.%.*s", (int)sizeof table->name - 1,
			 table->name);
		char *at = texts[t];
		for (uint32_t s = 0; s < table->n_slots; s++)
			at += sprintf(at, "%s%s", s ? "\n" : "", table->labels[s]);
		all_keys[*n_keys] = keys[t];
		all_values[(*n_keys)++] = texts[t];
	}
	f8_rt_scaling_tables_free(tables, n_tables);
	return status;
}

/* Writes the leaves of `which` into `path` with the metadata keys/values, each read from the
 * executor's backend into host memory first; with `dist`, this rank's shard: the parts it
 * writes, each with its layout. */
static f8_status write_file(const char *path, int which, const f8_executor *executor,
			    const f8_dist *dist, const char *const *keys, const char *const *values,
			    size_t n_metadata, f8_diag *diag) {
	const f8_graph *graph = f8_executor_graph(executor);
	size_t room = graph->n_inputs + n_metadata + F8_RT_SCALING_TABLES_MAX + 1;
	char *slot_keys[F8_RT_SCALING_TABLES_MAX] = {0}, *slot_texts[F8_RT_SCALING_TABLES_MAX] = {0};
	const char **names = f8_calloc(graph->n_inputs + 1, sizeof *names);
	f8_rt_tensor *host = f8_calloc(graph->n_inputs + 1, sizeof *host);
	const f8_rt_tensor **tensors = f8_calloc(graph->n_inputs + 1, sizeof *tensors);
	const char **all_keys = f8_calloc(room, sizeof *all_keys);
	const char **all_values = f8_calloc(room, sizeof *all_values);
	char *layouts = dist ? f8_calloc(graph->n_inputs + 1, LAYOUT_KEY + F8_RT_LAYOUT_MAX) : NULL;
	f8_status status = names && host && tensors && all_keys && all_values && (!dist || layouts)
				   ? F8_OK : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	size_t n = 0, n_keys = n_metadata;
	if (!status) {
		memcpy(all_keys, keys, n_metadata * sizeof *keys);
		memcpy(all_values, values, n_metadata * sizeof *values);
		status = read_file_leaves(executor, dist, which, names, host, &n, diag);
	}
	if (!status && dist)
		status = add_layouts(graph, dist, names, n, layouts, all_keys, all_values, &n_keys,
				     diag);
	if (!status && which == OPTIMIZER)
		status = add_slot_labels(graph, names, n, slot_keys, slot_texts, all_keys, all_values,
					 &n_keys, diag);

	for (size_t i = 0; !status && i < n; i++) {
		tensors[i] = &host[i];
		// A checkpoint never holds a NaN or an inf: a run resumed from it could not train.
		int64_t at = f8_rt_tensor_find_nonfinite(&host[i]);
		if (at >= 0) {
			status = f8_diag_set(diag, F8_ERR_INVALID, "not saved: %%%s holds %g at element "
					     "%lld; a checkpoint never holds a non-finite value",
					     names[i], f8_rt_tensor_get(&host[i], at), (long long)at);
			f8_diag_hint(diag, "the folder's latest checkpoint is still the one saved "
				     "before it");
		}
	}
	if (!status)
		status = f8_safetensors_write(path, names, tensors, n, all_keys, all_values, n_keys,
					      diag);
	for (size_t i = 0; host && i < n; i++)
		f8_rt_tensor_destroy(&host[i]);
	f8_free(names);
	f8_free(host);
	f8_free(tensors);
	f8_free(all_keys);
	f8_free(all_values);
	f8_free(layouts);
	for (int t = 0; t < F8_RT_SCALING_TABLES_MAX; t++) {
		f8_free(slot_keys[t]);
		f8_free(slot_texts[t]);
	}
	return status;
}

/* Empties the folder `path` of its files and removes it; one that is not there is fine. */
static void remove_folder(const char *path) {
	DIR *dir = opendir(path);
	if (!dir)
		return;
	char file[4200];
	for (struct dirent *entry; (entry = readdir(dir));) {
		if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0)
			continue;
		if (snprintf(file, sizeof file, "%s/%s", path, entry->d_name) < (int)sizeof file)
			unlink(file);
	}
	closedir(dir);
	rmdir(path);
}

/* Puts the complete `staging` folder in place of `target`. An existing target (a save of an
 * iteration the folder already has: a rerun over an old folder, perhaps the one the latest
 * record names) is swapped for it in one step (renameat2's RENAME_EXCHANGE), so that a reader
 * sees the old checkpoint or the new one, whatever happens; the old one then goes. Where the
 * file system cannot exchange, the old one is moved aside first, and a crash between the two
 * renames leaves it there as TARGET.old. */
static f8_status install(const char *staging, const char *target, const char *folder,
			 f8_diag *diag) {
	struct stat info;
	int moved = stat(target, &info) != 0
		? rename(staging, target)
		: renameat2(AT_FDCWD, staging, AT_FDCWD, target, RENAME_EXCHANGE);
	if (moved != 0 && (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP)) {
		char aside[4200];
		snprintf(aside, sizeof aside, "%s.old", target);
		remove_folder(aside);
		moved = rename(target, aside) != 0 ? -1 : rename(staging, target);
		if (moved == 0)
			remove_folder(aside);
	}
	if (moved != 0)
		return f8_diag_set(diag, F8_ERR_IO, "cannot move the checkpoint %s into place as %s: %s",
				   staging, target, strerror(errno));
	remove_folder(staging); // the old checkpoint's files, after an exchange
	f8_atomic_file_sync_folder(folder);
	return F8_OK;
}

/* The staging folder and the final one of iteration `iteration` of `folder`. */
static f8_status iteration_paths(const char *folder, int64_t iteration, char *target,
				 size_t target_size, char *staging, size_t staging_size,
				 f8_diag *diag) {
	char name[48];
	snprintf(name, sizeof name, "iter_%07" PRId64, iteration);
	f8_status status = path_in(folder, name, target, target_size, diag);
	if (!status && snprintf(staging, staging_size, "%s.saving", target) >= (int)staging_size)
		status = f8_diag_set(diag, F8_ERR_ARGUMENT, "checkpoint folder path too long: %s",
				     folder);
	return status;
}

/* The record every file of a save carries, into keys/values (*n of them); `text` holds the
 * numbers (RECORD_TEXT bytes). A shard's says it is version 2 and of how many shards. */
enum { RECORD_FIXED = 9, MAX_SETTINGS = 32, RECORD_MAX = RECORD_FIXED + 1 + MAX_SETTINGS };
enum { NUMBER = 48, RECORD_TEXT = 7 * NUMBER + MAX_SETTINGS * SETTING_KEY_MAX };
static f8_status make_record(const f8_checkpoint_info *info, f8_dist *dist, char *text,
			     const char **keys, const char **values, size_t *n, f8_diag *diag) {
	if (info->n_settings > MAX_SETTINGS)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "too many settings for a checkpoint");
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	// The save's id, the same in every rank's shard: the latest clock of the ranks.
	int64_t id = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
	f8_status status = dist ? f8_dist_all_reduce(dist, (1u << F8_MESH_AXIS_COUNT) - 1, &id, 1,
						     F8_DTYPE_I64, F8_REDUCTION_MAX, diag)
				: F8_OK;
	if (status)
		return status;
	char *iteration = text, *sampler = text + NUMBER, *seed = text + 2 * NUMBER;
	char *tokens = text + 3 * NUMBER, *save_id = text + 4 * NUMBER;
	char *skipped = text + 5 * NUMBER, *shards = text + 6 * NUMBER;
	char *setting_keys = text + 7 * NUMBER;
	snprintf(iteration, NUMBER, "%" PRId64, info->iteration);
	snprintf(sampler, NUMBER, "%" PRIu64, info->sampler_state);
	snprintf(seed, NUMBER, "%" PRIu64, info->seed);
	snprintf(tokens, NUMBER, "%" PRId64, info->consumed_tokens);
	snprintf(skipped, NUMBER, "%" PRId64, info->skipped_iters);
	snprintf(save_id, NUMBER, "%lld.%09lld", (long long)(id / 1000000000),
		 (long long)(id % 1000000000));
	const char *fixed_keys[RECORD_FIXED] = {"format", "version", "iteration", "save_id",
						"sampler_state", "seed", "consumed_tokens",
						"skipped_iters", "model"};
	const char *fixed_values[RECORD_FIXED] = {"f8c-checkpoint", dist ? "2" : "1", iteration,
						  save_id, sampler, seed, tokens, skipped,
						  info->model ? info->model : ""};
	memcpy(keys, fixed_keys, sizeof fixed_keys);
	memcpy(values, fixed_values, sizeof fixed_values);
	*n = RECORD_FIXED;
	if (dist) {
		snprintf(shards, NUMBER, "%" PRId64, f8_dist_world(dist));
		keys[*n] = "shards", values[(*n)++] = shards;
	}
	for (uint32_t i = 0; i < info->n_settings; i++) {
		char *key = setting_keys + (size_t)i * SETTING_KEY_MAX;
		snprintf(key, SETTING_KEY_MAX, "setting.%s", info->setting_keys[i]);
		keys[*n] = key;
		values[(*n)++] = info->setting_values[i];
	}
	return F8_OK;
}

/* The name of file `which` of a save: one process's, or this rank's shard (`dist`). */
static void file_name(int which, const f8_dist *dist, char *out, size_t size) {
	static const char *const stems[N_FILES] = {"weights", "optimizer"};
	if (!dist)
		snprintf(out, size, "%s", file_names[which]);
	else
		snprintf(out, size, "%s-%05" PRId64 "-of-%05" PRId64 ".safetensors", stems[which],
			 f8_dist_rank(dist), f8_dist_world(dist));
}

/* Every rank's status made one: a rank's own failure stands; where this rank went well but
 * another failed, the most negative status code of the ranks (F8_ERR_* are negative), with a
 * message that says it was another rank's. `dist` NULL: `status`. */
static f8_status agree(f8_dist *dist, f8_status status, const char *what, f8_diag *diag) {
	if (!dist)
		return status;
	int64_t worst = -(int64_t)status; // the max of the negated codes: the most negative code
	f8_diag local = {0};
	f8_status reduced = f8_dist_all_reduce(dist, (1u << F8_MESH_AXIS_COUNT) - 1, &worst, 1,
					       F8_DTYPE_I64, F8_REDUCTION_MAX, &local);
	if (reduced)
		return status ? status : f8_diag_set(diag, reduced, "%s", local.message);
	if (status || !worst)
		return status;
	return f8_diag_set(diag, (f8_status)-worst, "another rank could not %s (its message says "
			   "why)", what);
}

/*
 * A save writes its files into FOLDER/iter_N.saving, then installs the folder as FOLDER/iter_N,
 * then moves the latest record to it: at every moment the latest record names a complete
 * checkpoint. With several ranks each writes its shard there; rank 0 makes the staging folder
 * before and installs it once every rank's shard is complete (the ranks agree on each step's
 * outcome). A killed save's staging folder is removed by the next save of its iteration (a
 * resumed run saves it again).
 */
f8_status f8_checkpoint_save(const char *folder, const f8_executor *executor,
			     const f8_checkpoint_info *info, f8_diag *diag) {
	f8_dist *dist = info->dist && f8_dist_world(info->dist) > 1 ? info->dist : NULL;
	bool first = !dist || f8_dist_rank(dist) == 0;
	char target[4096], staging[4200], text[RECORD_TEXT];
	const char *keys[RECORD_MAX], *values[RECORD_MAX];
	size_t n_record = 0;
	f8_status status = iteration_paths(folder, info->iteration, target, sizeof target, staging,
					   sizeof staging, diag);
	if (!status && first) {
		status = make_folder(folder, diag);
		if (!status) {
			remove_folder(staging); // a killed save's
			status = make_folder(staging, diag);
		}
	}
	if ((status = agree(dist, status, "make the checkpoint's staging folder; nothing of this save is kept", diag)))
		return status;
	status = make_record(info, dist, text, keys, values, &n_record, diag);
	for (int file = WEIGHTS; !status && file < N_FILES; file++) {
		char name[96], path[4400];
		file_name(file, dist, name, sizeof name);
		status = path_in(staging, name, path, sizeof path, diag);
		if (!status)
			status = write_file(path, file, executor, dist, keys, values, n_record, diag);
	}
	status = agree(dist, status, "write its shard of the checkpoint; nothing of this save is kept", diag);
	if (!status && first)
		status = install(staging, target, folder, diag);
	if (!status && first)
		status = write_latest(folder, info->iteration, diag);
	else if (status && first)
		remove_folder(staging); // a failed save leaves the folder as it was
	return agree(dist, status, "install the checkpoint; nothing of this save is kept", diag);
}

/* Checks a file's record; the first file's iteration and save id go to *iteration, *save_id,
 * and the second's must match them. */
static f8_status check_record(const f8_safetensors *file, const char *path, const char **save_id,
			      f8_diag *diag) {
	const char *format = f8_safetensors_metadata(file, "format");
	const char *version = f8_safetensors_metadata(file, "version");
	const char *id = f8_safetensors_metadata(file, "save_id");
	if (!format || strcmp(format, "f8c-checkpoint") != 0) {
		f8_diag_set(diag, F8_ERR_INVALID, "%s is not an f8c checkpoint (no \"format\": "
			    "\"f8c-checkpoint\" in its metadata)", path);
		f8_diag_hint(diag, "give --load the folder that f8c train --save wrote");
		return F8_ERR_INVALID;
	}
	if (!version || (strcmp(version, "1") != 0 && strcmp(version, "2") != 0))
		return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "%s is checkpoint version %s; this f8c "
				   "reads versions 1 (one file) and 2 (a shard per rank)", path,
				   version ? version : "(none)");
	if (!id || !f8_safetensors_metadata(file, "iteration") ||
	    !f8_safetensors_metadata(file, "sampler_state"))
		return f8_diag_set(diag, F8_ERR_INVALID, "%s lacks its iteration, save id or sampler "
				   "state", path);
	if (*save_id && strcmp(*save_id, id) != 0) {
		f8_diag_set(diag, F8_ERR_INVALID, "%s was written by another save than the "
			    "checkpoint's first file", path);
		f8_diag_hint(diag, "the save was interrupted between its files: load an earlier "
			     "checkpoint");
		return F8_ERR_INVALID;
	}
	*save_id = id;
	return F8_OK;
}

/* The lines of `text` (a copy, into *copy, f8_free'd by the caller) into lines[] (at most
 * `max`); the count, or -1 when out of memory or there are more. */
static int64_t split_lines(const char *text, char **copy, char **lines, int64_t max) {
	if (!(*copy = f8_strdup(text)))
		return -1;
	int64_t n = 0;
	for (char *line = *copy;; line++) {
		if (n == max)
			return -1;
		lines[n++] = line;
		if (!(line = strchr(line, '\n')))
			return n;
		*line = '\0';
	}
}

/* The copies of `table` in files[] (n of them: a shard each stage wrote, or one file), their
 * slots matched to this step's by label (their metadata's "slots.<table>"): each of this step's
 * slots takes the scale and the amax history of the stored slot of its label, and the step's
 * count of skipped amaxes is the copies' sum (a stage's share of it is placed after, under
 * pipeline parallelism). Staged into staged[] and marked done[]; a table stored without labels
 * (by an f8c before them) is left to the other leaves' path, by slot number. */
static f8_status stage_table(f8_safetensors *const *files, int64_t n, const char *where,
			     const f8_executor *executor, const f8_rt_scaling_table *table,
			     f8_rt_tensor *staged, bool *done, f8_diag *diag) {
	const f8_graph *graph = f8_executor_graph(executor);
	const char *scale_name = graph->values[table->scale].name;
	const char *history_name = graph->values[table->history].name;
	const char *nonfinite_name =
		table->nonfinite != F8_NONE ? graph->values[table->nonfinite].name : NULL;
	char key[sizeof table->name + 8];
	snprintf(key, sizeof key, "slots.%.*s", (int)sizeof table->name - 1, table->name);
	int64_t copies = 0, labelled = 0;
	for (int64_t f = 0; f < n; f++) {
		copies += f8_safetensors_find(files[f], scale_name) != NULL;
		labelled += f8_safetensors_find(files[f], scale_name) &&
			    f8_safetensors_metadata(files[f], key);
	}
	if (!labelled)
		return F8_OK;
	if (labelled != copies)
		return f8_diag_set(diag, F8_ERR_INVALID, "%s: %lld copies of '%s' and %lld with the "
				   "labels of their slots", where, (long long)copies, scale_name,
				   (long long)labelled);
	const f8_tensor_view *view = f8_executor_view(executor, table->history);
	int64_t rows = view->dims[0], slots = table->n_slots, nonfinite = 0;
	int64_t dims[2] = {slots, 0}, history_dims[2] = {rows, slots};
	f8_rt_tensor scale = {0}, history = {0}, count = {0};
	bool *found = f8_calloc((size_t)slots + 1, sizeof *found);
	f8_status status = found ? F8_OK : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	if (!status)
		status = f8_rt_tensor_create(F8_DTYPE_F32, 1, dims, &scale, diag);
	if (!status)
		status = f8_rt_tensor_create(F8_DTYPE_F32, 2, history_dims, &history, diag);
	if (!status && nonfinite_name)
		status = f8_rt_tensor_create(F8_DTYPE_I64, 0, dims, &count, diag);
	for (int64_t f = 0; !status && f < n; f++) {
		if (!f8_safetensors_find(files[f], scale_name))
			continue;
		f8_rt_tensor stored_scale = {0}, stored_history = {0}, stored_count = {0};
		char *copy = NULL, **labels = NULL;
		status = f8_safetensors_read(files[f], scale_name, &stored_scale, diag);
		if (!status)
			status = f8_safetensors_read(files[f], history_name, &stored_history, diag);
		if (!status && nonfinite_name)
			status = f8_safetensors_read(files[f], nonfinite_name, &stored_count, diag);
		int64_t width = stored_scale.dims[0], lines = 0;
		if (!status && (stored_scale.dtype != F8_DTYPE_F32 || stored_scale.rank != 1 ||
				stored_history.dtype != F8_DTYPE_F32 || stored_history.rank != 2 ||
				stored_history.dims[1] != width ||
				(nonfinite_name && (stored_count.dtype != F8_DTYPE_I64 ||
						    stored_count.rank != 0))))
			status = f8_diag_set(diag, F8_ERR_INVALID, "%s: the FP8 scaling table %s is "
					     "not an f32 scale, an f32 amax history of as many slots "
					     "and an i64 count", where, table->name);
		if (!status && stored_history.dims[0] != rows) {
			f8_diag_set(diag, F8_ERR_INVALID, "%s: '%s' keeps %lld amaxes per slot; this run "
				    "keeps %lld", where, history_name,
				    (long long)stored_history.dims[0], (long long)rows);
			f8_diag_hint(diag, "resume with the --fp8-amax-history-len the checkpoint was "
				     "saved with");
			status = F8_ERR_INVALID;
		}
		if (!status && !(labels = f8_calloc((size_t)width + 1, sizeof *labels)))
			status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
		if (!status && (lines = split_lines(f8_safetensors_metadata(files[f], key), &copy,
						     labels, width)) != width)
			status = f8_diag_set(diag, F8_ERR_INVALID, "%s: '%s' has %lld slots, but %lld "
					     "labels", where, scale_name, (long long)width,
					     (long long)lines);
		const float *from = stored_scale.data, *from_history = stored_history.data;
		float *to = scale.data, *to_history = history.data;
		// A label stored twice (in one copy, or in two stages' copies) names no one slot.
		for (int64_t s = 0; !status && s < slots; s++) {
			for (int64_t j = 0; !status && j < width; j++) {
				if (strcmp(labels[j], table->labels[s]) != 0)
					continue;
				if (found[s]) {
					status = f8_diag_set(diag, F8_ERR_INVALID, "%s: two slots of %s are "
							     "labelled '%s'", where, table->name,
							     table->labels[s]);
					break;
				}
				to[s] = from[j];
				for (int64_t r = 0; r < rows; r++)
					to_history[r * slots + s] = from_history[r * width + j];
				found[s] = true;
			}
		}
		if (!status && nonfinite_name)
			nonfinite += *(const int64_t *)stored_count.data;
		f8_free(labels);
		f8_free(copy);
		f8_rt_tensor_destroy(&stored_scale);
		f8_rt_tensor_destroy(&stored_history);
		f8_rt_tensor_destroy(&stored_count);
	}
	for (int64_t s = 0; !status && s < slots; s++) {
		if (found[s])
			continue;
		f8_diag_set(diag, F8_ERR_INVALID, "%s holds no FP8 scaling state for slot %lld of %s "
			    "(%s)", where, (long long)s, table->name, table->labels[s]);
		f8_diag_hint(diag, "the checkpoint is of another model or another FP8 setup");
		status = F8_ERR_INVALID;
	}
	f8_free(found);
	if (status) {
		f8_rt_tensor_destroy(&scale);
		f8_rt_tensor_destroy(&history);
		f8_rt_tensor_destroy(&count);
		return status;
	}
	staged[table->scale] = scale, done[table->scale] = true;
	staged[table->history] = history, done[table->history] = true;
	if (nonfinite_name) {
		*(int64_t *)count.data = nonfinite;
		staged[table->nonfinite] = count, done[table->nonfinite] = true;
	}
	return F8_OK;
}

/* Every scaling table of the step staged from files[] (stage_table). */
static f8_status stage_tables(f8_safetensors *const *files, int64_t n, const char *where,
			      const f8_executor *executor, f8_rt_tensor *staged, bool *done,
			      f8_diag *diag) {
	f8_rt_scaling_table tables[F8_RT_SCALING_TABLES_MAX];
	uint32_t n_tables = 0;
	f8_status status = f8_rt_scaling_tables_find(f8_executor_graph(executor), tables,
						     &n_tables, diag);
	for (uint32_t t = 0; !status && t < n_tables; t++)
		status = stage_table(files, n, where, executor, &tables[t], staged, done, diag);
	f8_rt_scaling_tables_free(tables, n_tables);
	return status;
}

/* Reads every leaf file `which` holds into staged[v] (but those done[] already); checks names,
 * dtypes and shapes. A leaf the ranks hold parts of is stored whole: this rank's rows are
 * staged. */
static f8_status stage_file(const f8_safetensors *file, const char *path, int which,
			    const f8_executor *executor, f8_dist *dist, f8_rt_tensor *staged,
			    const bool *done, f8_diag *diag) {
	const f8_graph *graph = f8_executor_graph(executor);
	size_t expected = 0;
	for (uint32_t i = 0; i < graph->n_inputs; i++) {
		f8_value_id v = graph->inputs[i];
		const f8_value *value = &graph->values[v];
		if (file_of(graph, v) != which)
			continue;
		expected++;
		if (done[v]) // a scaling table, staged by its slots' labels
			continue;
		const f8_tensor_view *leaf = f8_executor_view(executor, v);
		if (!f8_safetensors_find(file, value->name)) {
			f8_diag_set(diag, F8_ERR_INVALID, "%s has no tensor '%s'", path, value->name);
			f8_diag_hint(diag, "the checkpoint is of another model or another training "
				     "setup");
			return F8_ERR_INVALID;
		}
		f8_status status = f8_safetensors_read(file, value->name, &staged[v], diag);
		if (status)
			return status;
		int64_t dims[F8_MAX_RANK];
		f8_rt_whole_dims(value, graph->mesh, leaf->dims, dims);
		bool same = staged[v].dtype == leaf->dtype && staged[v].rank == leaf->rank;
		for (int d = 0; same && d < leaf->rank; d++)
			same = staged[v].dims[d] == dims[d];
		if (!same)
			return f8_diag_set(diag, F8_ERR_INVALID, "%s: tensor '%s' has another dtype or "
					   "shape than the model's %s", path, value->name,
					   f8_dtype_name(leaf->dtype));
		if (dist && f8_rt_split_axes(value) && f8_dist_world(dist) > 1) {
			f8_rt_tensor part;
			if ((status = f8_rt_take_part(value, dist, &staged[v], &part, diag)))
				return status;
			f8_rt_tensor_destroy(&staged[v]);
			staged[v] = part;
		}
	}
	// A pipeline stage holds some of the leaves: the stages check the rest together.
	if (graph->mesh[F8_MESH_AXIS_PP] <= 1 && f8_safetensors_count(file) != expected)
		return f8_diag_set(diag, F8_ERR_INVALID, "%s holds %zu tensors; the model has %zu "
				   "there", path, f8_safetensors_count(file), expected);
	return F8_OK;
}

/* A sharded save's files of kind `which` in `folder` (STEM-00000-of-NNNNN.safetensors and the
 * others of the NNNNN), opened into *files (*n of them, f8_free'd by the caller after closing
 * each), each record checked against *save_id. */
static f8_status open_shards(const char *folder, int which, f8_safetensors ***files, int64_t *n,
			     const char **save_id, f8_diag *diag) {
	static const char *const stems[N_FILES] = {"weights", "optimizer"};
	char prefix[64], path[4400];
	snprintf(prefix, sizeof prefix, "%s-00000-of-", stems[which]);
	*files = NULL;
	*n = 0;
	DIR *dir = opendir(folder);
	if (!dir)
		return f8_diag_set(diag, F8_ERR_IO, "cannot read the checkpoint folder %s: %s", folder,
				   strerror(errno));
	for (struct dirent *entry; (entry = readdir(dir));) {
		long long count;
		char tail[32];
		if (strncmp(entry->d_name, prefix, strlen(prefix)) == 0 &&
		    sscanf(entry->d_name + strlen(prefix), "%5lld%31s", &count, tail) == 2 &&
		    strcmp(tail, ".safetensors") == 0 && count > 0)
			*n = count;
	}
	closedir(dir);
	if (!*n) {
		f8_diag_set(diag, F8_ERR_INVALID, "%s holds neither %s nor the shards of a save by "
			    "several ranks (%s...)", folder, file_names[which], prefix);
		f8_diag_hint(diag, "give --load the folder that f8c train --save wrote");
		return F8_ERR_INVALID;
	}
	*files = f8_calloc((size_t)*n + 1, sizeof **files);
	if (!*files)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	f8_status status = F8_OK;
	for (int64_t i = 0; !status && i < *n; i++) {
		snprintf(path, sizeof path, "%s/%s-%05lld-of-%05lld.safetensors", folder, stems[which],
			 (long long)i, (long long)*n);
		status = f8_safetensors_open(path, &(*files)[i], diag);
		if (!status)
			status = check_record((*files)[i], path, save_id, diag);
	}
	return status;
}

/*
 * Reads the leaves of kind `which` from a sharded save's files (n), but those done[] already:
 * each leaf's whole made of the pieces the shards hold, each put in its place by its layout
 * (placed whole where it has none; a whole that several pipeline stages wrote must be alike in
 * each), then this rank's part of it staged. Every piece must fit, together they must cover
 * the whole (as many elements as it has, each part fitting its place: overlapping parts that
 * left a hole of the same size are not told apart, which only hand-made shards could be), and
 * every stored name must be a leaf of the model (under pipeline parallelism, of some stage's:
 * check_stages).
 */
static f8_status stage_shards(f8_safetensors *const *files, int64_t n, const char *folder,
			      int which, const f8_executor *executor, f8_dist *dist,
			      f8_rt_tensor *staged, const bool *done, f8_diag *diag) {
	const f8_graph *graph = f8_executor_graph(executor);
	f8_status status = F8_OK;
	for (int64_t f = 0; !status && f < n; f++) {
		for (size_t t = 0; t < f8_safetensors_count(files[f]); t++) {
			const char *name = f8_safetensors_name(files[f], t);
			f8_value_id v = f8_graph_find_value(graph, name, strlen(name));
			// A pipeline stage holds some of the leaves: the stages check the rest together.
			if ((v != F8_NONE && file_of(graph, v) == which) ||
			    graph->mesh[F8_MESH_AXIS_PP] > 1)
				continue;
			f8_diag_set(diag, F8_ERR_INVALID, "%s: shard %lld of the %s holds '%s', which "
				    "the model has no such leaf for", folder, (long long)f,
				    file_names[which], name);
			f8_diag_hint(diag, "the checkpoint is of another model or another training "
				     "setup");
			return F8_ERR_INVALID;
		}
	}
	for (uint32_t i = 0; !status && i < graph->n_inputs; i++) {
		f8_value_id v = graph->inputs[i];
		const f8_value *value = &graph->values[v];
		if (file_of(graph, v) != which || done[v])
			continue;
		const f8_tensor_view *leaf = f8_executor_view(executor, v);
		int64_t dims[F8_MAX_RANK], placed = 0;
		f8_rt_whole_dims(value, graph->mesh, leaf->dims, dims);
		f8_rt_tensor whole = {0};
		status = f8_rt_tensor_create(leaf->dtype, leaf->rank, dims, &whole, diag);
		for (int64_t f = 0; !status && f < n; f++) {
			if (!f8_safetensors_find(files[f], value->name))
				continue;
			char key[LAYOUT_KEY];
			snprintf(key, sizeof key, "layout.%s", value->name);
			const char *layout = f8_safetensors_metadata(files[f], key);
			f8_rt_tensor piece = {0};
			f8_diag local = {0};
			status = f8_safetensors_read(files[f], value->name, &piece, diag);
			bool whole_again = !layout && placed && placed == f8_rt_tensor_numel(&whole);
			if (!status && whole_again) { // several pipeline stages' copies: alike
				if (!f8_rt_tensor_same_type(&piece, &whole) ||
				    memcmp(piece.data, whole.data, whole.n_bytes) != 0)
					status = f8_diag_set(diag, F8_ERR_INVALID, "%s: shard %lld holds "
							     "another '%s' than the shard before it",
							     folder, (long long)f, value->name);
			} else if (!status && (status = f8_rt_place_piece(layout ? layout : "", &piece, &whole,
								   &placed, &local)))
				f8_diag_set(diag, status, "%s: shard %lld's '%s' does not fit the "
					    "model's %s: %s", folder, (long long)f, value->name,
					    f8_dtype_name(leaf->dtype), local.message);
			f8_rt_tensor_destroy(&piece);
		}
		if (!status && placed != f8_rt_tensor_numel(&whole))
			status = f8_diag_set(diag, F8_ERR_INVALID, "%s: the shards hold %lld elements "
					     "of '%s', whose whole has %lld", folder, (long long)placed,
					     value->name, (long long)f8_rt_tensor_numel(&whole));
		if (!status)
			status = f8_rt_take_part(value, dist, &whole, &staged[v], diag);
		f8_rt_tensor_destroy(&whole);
	}
	return status;
}

/*
 * Under pipeline parallelism, what a stage cannot check alone, with the others (every rank
 * calls it, in step): that each stored tensor (of the files[WEIGHTS] and files[OPTIMIZER]
 * sets, n[] files each) is a leaf of some stage's program; and each scaling table's count of
 * skipped amaxes, staged whole by each stage that has the table, kept by the first of them
 * alone, so that the stages' counts still add up to it (the trainer adds them over pp).
 */
static f8_status check_stages(f8_safetensors *const *const *files, const int64_t *n,
			      const char *where, const f8_executor *executor, f8_dist *dist,
			      f8_rt_tensor *staged, f8_diag *diag) {
	const f8_graph *graph = f8_executor_graph(executor);
	f8_rt_scaling_table tables[F8_RT_SCALING_TABLES_MAX];
	uint32_t n_tables = 0;
	size_t total = 0, at = 0;
	for (int which = 0; which < N_FILES; which++)
		for (int64_t f = 0; f < n[which]; f++)
			total += f8_safetensors_count(files[which][f]);
	// Per stored tensor: whether a stage has it as a leaf of its file; the stages that have
	// it as a table's count, as the negated stage (the max is the first), else INT64_MIN.
	int64_t *claims = f8_calloc(2 * total + 1, sizeof *claims);
	int64_t stage = f8_dist_group_rank(dist, 1u << F8_MESH_AXIS_PP);
	f8_status status = claims ? f8_rt_scaling_tables_find(graph, tables, &n_tables, diag)
				  : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	// Every stage makes the all-reduce below, or none does (a stage that ran out of memory).
	int64_t failed = status != F8_OK;
	f8_status reduced = f8_dist_all_reduce(dist, 1u << F8_MESH_AXIS_PP, &failed, 1,
					       F8_DTYPE_I64, F8_REDUCTION_MAX, diag);
	if (!status && (reduced || failed))
		status = reduced ? reduced : f8_diag_set(diag, F8_ERR_NOMEM, "another pipeline stage "
							 "ran out of memory loading the checkpoint");
	for (int which = 0; !status && which < N_FILES; which++) {
		for (int64_t f = 0; f < n[which]; f++) {
			for (size_t t = 0; t < f8_safetensors_count(files[which][f]); t++, at++) {
				const char *name = f8_safetensors_name(files[which][f], t);
				f8_value_id v = f8_graph_find_value(graph, name, strlen(name));
				bool count = false;
				for (uint32_t i = 0; v != F8_NONE && i < n_tables; i++)
					count |= tables[i].nonfinite == v;
				claims[at] = v != F8_NONE && file_of(graph, v) == which;
				claims[total + at] = count ? -stage : INT64_MIN;
			}
		}
	}
	if (!status)
		status = f8_dist_all_reduce(dist, 1u << F8_MESH_AXIS_PP, claims, 2 * total,
					    F8_DTYPE_I64, F8_REDUCTION_MAX, diag);
	at = 0;
	for (int which = 0; !status && which < N_FILES; which++) {
		for (int64_t f = 0; !status && f < n[which]; f++) {
			for (size_t t = 0; !status && t < f8_safetensors_count(files[which][f]);
			     t++, at++) {
				const char *name = f8_safetensors_name(files[which][f], t);
				f8_value_id v = f8_graph_find_value(graph, name, strlen(name));
				if (claims[total + at] != INT64_MIN && claims[total + at] != -stage &&
				    v != F8_NONE && staged[v].data)
					*(int64_t *)staged[v].data = 0; // a stage before kept the count
				if (claims[at])
					continue;
				f8_diag_set(diag, F8_ERR_INVALID, "%s: the %s hold '%s', which no pipeline "
					    "stage of the model has a leaf for", where,
					    file_names[which], name);
				f8_diag_hint(diag, "the checkpoint is of another model or another "
					     "training setup");
				status = F8_ERR_INVALID;
			}
		}
	}
	f8_rt_scaling_tables_free(tables, n_tables);
	f8_free(claims);
	return status;
}

static bool parse_u64(const char *text, uint64_t *out) {
	char *end;
	errno = 0;
	unsigned long long value = strtoull(text, &end, 10);
	if (errno || end == text || *end || text[0] == '-')
		return false;
	*out = value;
	return true;
}

/* `folder` has no latest_checkpointed_iteration.txt: it is one checkpoint's folder (into
 * `out`) when it holds the weights; otherwise no save completed there, which is said as that,
 * not as a missing weights file (a run killed before its first save leaves such a folder). */
static f8_status no_latest(const char *folder, char *out, size_t size, f8_diag *diag) {
	char weights[4096];
	struct stat info;
	f8_status status = path_in(folder, file_names[WEIGHTS], weights, sizeof weights, diag);
	if (status)
		return status;
	if (stat(folder, &info) != 0) { // ENOENT on FOLDER/LATEST: FOLDER is a folder or missing
		f8_diag_hint(diag, "give --load the folder that f8c train --save wrote");
		return f8_diag_set(diag, F8_ERR_IO, "cannot load a checkpoint from %s: %s", folder,
				   strerror(errno));
	}
	if (stat(weights, &info) != 0 && errno == ENOENT) {
		f8_diag_hint(diag, "a run stopped before its first save completed leaves none: start "
			     "without --load");
		return f8_diag_set(diag, F8_ERR_IO, "no checkpoint in %s: it has no %s (which a save "
				   "writes last) and no %s", folder, LATEST, file_names[WEIGHTS]);
	}
	snprintf(out, size, "%s", folder);
	return F8_OK;
}

/* The folder of the latest save in `folder` into `out`: FOLDER/iter_N by
 * latest_checkpointed_iteration.txt, or `folder` itself when it has no such file. */
static f8_status resolve_latest(const char *folder, char *out, size_t size, f8_diag *diag) {
	char path[4096], text[32] = "";
	f8_status status = path_in(folder, LATEST, path, sizeof path, diag);
	if (status)
		return status;
	FILE *file = fopen(path, "r");
	if (!file && errno == ENOENT)
		return no_latest(folder, out, size, diag);
	if (!file)
		return f8_diag_set(diag, F8_ERR_IO, "cannot read %s: %s", path, strerror(errno));
	bool read = fgets(text, sizeof text, file) != NULL;
	fclose(file);
	uint64_t iteration;
	size_t len = strlen(text);
	if (len && text[len - 1] == '\n')
		text[--len] = '\0';
	if (!read || !parse_u64(text, &iteration) || iteration > INT64_MAX) {
		f8_diag_set(diag, F8_ERR_INVALID, "%s does not hold an iteration number", path);
		f8_diag_hint(diag, "write the iteration of a complete save in it, or load an iter_* "
			     "folder directly");
		return F8_ERR_INVALID;
	}
	char name[48];
	snprintf(name, sizeof name, "iter_%07" PRIu64, iteration);
	return path_in(folder, name, out, size, diag);
}

/* Checks the stored settings against the run's (info's). */
static f8_status check_settings(const f8_safetensors *record, const char *path,
				const f8_checkpoint_info *info, f8_diag *diag) {
	for (uint32_t i = 0; i < info->n_settings; i++) {
		char key[SETTING_KEY_MAX];
		snprintf(key, sizeof key, "setting.%s", info->setting_keys[i]);
		const char *stored = f8_safetensors_metadata(record, key);
		if (stored && strcmp(stored, info->setting_values[i]) != 0) {
			f8_diag_set(diag, F8_ERR_ARGUMENT, "the checkpoint %s was trained with --%s %s; "
				    "this run has %s", path, info->setting_keys[i], stored,
				    info->setting_values[i]);
			f8_diag_hint(diag, "give --%s %s to continue that run's schedule (Megatron-LM "
				     "refuses the same mismatch)", info->setting_keys[i], stored);
			return F8_ERR_ARGUMENT;
		}
	}
	return F8_OK;
}

f8_status f8_checkpoint_load(const char *folder, f8_executor *executor,
			     f8_checkpoint_info *info, f8_diag *diag) {
	const f8_graph *graph = f8_executor_graph(executor);
	f8_rt_tensor *staged = f8_calloc(graph->n_values + 1, sizeof *staged);
	bool *done = f8_calloc(graph->n_values + 1, sizeof *done); // the scaling tables staged
	f8_safetensors *files[N_FILES] = {0};
	const char *save_id = NULL;
	char paths[N_FILES][4096], latest[4096];
	f8_status status = staged && done ? F8_OK
					  : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	if (!status)
		status = resolve_latest(folder, latest, sizeof latest, diag);
	struct stat one_file;
	bool sharded = !status && !path_in(latest, file_names[WEIGHTS], paths[WEIGHTS],
					   sizeof paths[WEIGHTS], diag) &&
		       stat(paths[WEIGHTS], &one_file) != 0 && errno == ENOENT;
	f8_safetensors **shards[N_FILES] = {0};
	int64_t n_shards[N_FILES] = {0};
	for (int file = WEIGHTS; !status && sharded && file < N_FILES; file++) {
		status = open_shards(latest, file, &shards[file], &n_shards[file], &save_id, diag);
		if (!status && file == OPTIMIZER)
			status = stage_tables(shards[file], n_shards[file], latest, executor, staged,
					      done, diag);
		if (!status)
			status = stage_shards(shards[file], n_shards[file], latest, file, executor,
					      info->dist, staged, done, diag);
		snprintf(paths[file], sizeof paths[file], "%s", latest);
	}
	for (int file = WEIGHTS; !status && !sharded && file < N_FILES; file++) {
		status = path_in(latest, file_names[file], paths[file], sizeof paths[file], diag);
		if (!status)
			status = f8_safetensors_open(paths[file], &files[file], diag);
		if (!status)
			status = check_record(files[file], paths[file], &save_id, diag);
		if (!status && file == OPTIMIZER)
			status = stage_tables(&files[file], 1, paths[file], executor, staged, done,
					      diag);
		if (!status)
			status = stage_file(files[file], paths[file], file, executor, info->dist,
					    staged, done, diag);
	}
	uint64_t iteration = 0, sampler = 0, seed = 0, tokens = 0, skipped = 0;
	if (!status) {
		const f8_safetensors *record = sharded ? shards[OPTIMIZER][0] : files[OPTIMIZER];
		const char *seed_text = f8_safetensors_metadata(record, "seed");
		const char *tokens_text = f8_safetensors_metadata(record, "consumed_tokens");
		// Absent from the checkpoints of an f8c that did not skip iterations: none skipped.
		const char *skipped_text = f8_safetensors_metadata(record, "skipped_iters");
		if (!parse_u64(f8_safetensors_metadata(record, "iteration"), &iteration) ||
		    !parse_u64(f8_safetensors_metadata(record, "sampler_state"), &sampler) ||
		    (seed_text && !parse_u64(seed_text, &seed)) ||
		    (tokens_text && !parse_u64(tokens_text, &tokens)) ||
		    (skipped_text && !parse_u64(skipped_text, &skipped)) || iteration > INT64_MAX ||
		    skipped > iteration)
			status = f8_diag_set(diag, F8_ERR_INVALID, "%s: the iteration, sampler state, "
					     "seed, token count or skipped count in the metadata is "
					     "not a number (or more were skipped than done)",
					     paths[OPTIMIZER]);
		if (!status)
			status = check_settings(record, paths[OPTIMIZER], info, diag);
	}
	// Every rank reads its own part: one that cannot stops the others too, before any rank
	// writes a leaf (rather than leaving them waiting in the first step's collectives).
	f8_dist *several = info->dist && f8_dist_world(info->dist) > 1 ? info->dist : NULL;
	status = agree(several, status, "load its part of the checkpoint", diag);
	if (!status && graph->mesh[F8_MESH_AXIS_PP] > 1) {
		f8_safetensors *const *sets[N_FILES] = {shards[WEIGHTS], shards[OPTIMIZER]};
		int64_t counts[N_FILES] = {n_shards[WEIGHTS], n_shards[OPTIMIZER]};
		for (int file = 0; !sharded && file < N_FILES; file++)
			sets[file] = &files[file], counts[file] = 1;
		status = agree(several, check_stages(sets, counts, latest, executor, info->dist,
						     staged, diag),
			       "load its part of the checkpoint", diag);
	}
	if (!status) { // everything checked: now write the leaves
		for (uint32_t i = 0; !status && i < graph->n_inputs; i++) {
			f8_value_id v = graph->inputs[i];
			if (file_of(graph, v) >= 0)
				status = f8_executor_write(executor, v, &staged[v], diag);
		}
	}
	if (!status) {
		info->iteration = (int64_t)iteration;
		info->sampler_state = sampler;
		info->seed = seed;
		info->consumed_tokens = (int64_t)tokens;
		info->skipped_iters = (int64_t)skipped;
	}
	for (uint32_t v = 0; staged && v < graph->n_values; v++)
		f8_rt_tensor_destroy(&staged[v]);
	f8_free(staged);
	f8_free(done);
	for (int file = 0; file < N_FILES; file++) {
		f8_safetensors_close(files[file]);
		for (int64_t i = 0; shards[file] && i < n_shards[file]; i++)
			f8_safetensors_close(shards[file][i]);
		f8_free(shards[file]);
	}
	return status;
}
