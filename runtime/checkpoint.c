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
#include <string.h>   // strcmp, strlen, strerror
#include <sys/stat.h> // mkdir, stat
#include <time.h>     // clock_gettime
#include <unistd.h>   // rmdir, unlink

#include "ir/alloc.h"            // f8_calloc, f8_free
#include "runtime/atomic_file.h" // f8_atomic_file_*, f8_atomic_file_sync_folder
#include "runtime/placement.h"   // f8_rt_gather_whole, f8_rt_take_part
#include "runtime/safetensors.h" // f8_safetensors_*
#include "runtime/tensor.h"      // f8_rt_tensor_find_nonfinite

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

/* The ranks of `dist` that hold parts of leaf `v` (1: it is whole on every rank). */
static uint32_t part_ranks(const f8_graph *graph, f8_dist *dist, f8_value_id v) {
	uint32_t axes = f8_rt_split_axes(&graph->values[v]);
	return axes && dist ? f8_dist_group_size(dist, axes) : 1;
}

/*
 * The saved leaves the ranks hold parts of, each gathered whole over its group into whole[v].
 * Every rank calls it first thing in a save and gathers the same leaves in the same order,
 * whatever fails on it: a rank that left a gather out would keep the others waiting in it
 * (until --distributed-timeout-minutes), so a rank whose own part cannot be read gathers zeros
 * in its place and reports the failure. Only a host allocation that fails leaves a gather out.
 */
static f8_status gather_parts(const f8_executor *executor, f8_dist *dist, f8_rt_tensor *whole,
			      f8_diag *diag) {
	const f8_graph *graph = f8_executor_graph(executor);
	f8_status status = F8_OK;
	for (uint32_t i = 0; i < graph->n_inputs; i++) {
		f8_value_id v = graph->inputs[i];
		uint32_t ranks = part_ranks(graph, dist, v);
		if (file_of(graph, v) < 0 || ranks == 1)
			continue;
		const f8_tensor_view *leaf = f8_executor_view(executor, v);
		f8_rt_tensor part = {0};
		f8_diag local = {0};
		f8_status read = f8_executor_read(executor, v, &part, &local);
		if (read) { // take part with zeros, and say why this rank's part is missing
			status = status ? status : f8_diag_set(diag, read, "%s", local.message);
			read = f8_rt_tensor_create(leaf->dtype, leaf->rank, leaf->dims, &part, &local);
		}
		f8_status gathered = read ? read : f8_rt_gather_whole(&graph->values[v], dist, &part,
								       &whole[v], &local);
		status = status ? status
		       : gathered ? f8_diag_set(diag, gathered, "%s", local.message) : F8_OK;
		f8_rt_tensor_destroy(&part);
	}
	return status;
}

/* The leaves file `which` holds, read to the host whole (gathered already where the ranks hold
 * parts: whole[v], moved here), into host[] and their names into names[]; *n of them. */
static f8_status read_file_leaves(const f8_executor *executor, f8_rt_tensor *whole, int which,
				  const char **names, f8_rt_tensor *host, size_t *n,
				  f8_diag *diag) {
	const f8_graph *graph = f8_executor_graph(executor);
	f8_status status = F8_OK;
	*n = 0;
	for (uint32_t i = 0; !status && i < graph->n_inputs; i++) {
		f8_value_id v = graph->inputs[i];
		if (file_of(graph, v) != which)
			continue;
		names[*n] = graph->values[v].name;
		if (whole[v].data || whole[v].n_bytes) {
			host[*n] = whole[v];
			whole[v] = (f8_rt_tensor){0};
		} else {
			status = f8_executor_read(executor, v, &host[*n], diag);
		}
		*n += !status;
	}
	return status;
}

/* Writes the leaves of `which` into `path` with the metadata keys/values, each read from the
 * executor's backend into host memory first (or gathered whole already: whole[]). */
static f8_status write_file(const char *path, int which, const f8_executor *executor,
			    f8_rt_tensor *whole, const char *const *keys, const char *const *values,
			    size_t n_metadata, f8_diag *diag) {
	const f8_graph *graph = f8_executor_graph(executor);
	const char **names = f8_calloc(graph->n_inputs + 1, sizeof *names);
	f8_rt_tensor *host = f8_calloc(graph->n_inputs + 1, sizeof *host);
	const f8_rt_tensor **tensors = f8_calloc(graph->n_inputs + 1, sizeof *tensors);
	f8_status status = names && host && tensors
				   ? F8_OK : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	size_t n = 0;
	if (!status)
		status = read_file_leaves(executor, whole, which, names, host, &n, diag);
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
		status = f8_safetensors_write(path, names, tensors, n, keys, values, n_metadata, diag);
	for (size_t i = 0; host && i < n; i++)
		f8_rt_tensor_destroy(&host[i]);
	f8_free(names);
	f8_free(host);
	f8_free(tensors);
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

/* Rank 0's part of a save, the leaves the ranks hold parts of gathered into whole[]. */
static f8_status save_gathered(const char *folder, const f8_executor *executor,
			       const f8_checkpoint_info *info, f8_rt_tensor *whole,
			       f8_diag *diag) {
	char iteration_folder[4096], staging[4200], iteration[32], sampler[32], seed[32];
	char tokens[32], save_id[48], skipped[32];
	snprintf(iteration, sizeof iteration, "%07" PRId64, info->iteration);
	char folder_name[48];
	snprintf(folder_name, sizeof folder_name, "iter_%s", iteration);
	f8_status status = make_folder(folder, diag);
	if (!status)
		status = path_in(folder, folder_name, iteration_folder, sizeof iteration_folder, diag);
	if (!status && snprintf(staging, sizeof staging, "%s.saving", iteration_folder) >=
			       (int)sizeof staging)
		status = f8_diag_set(diag, F8_ERR_ARGUMENT, "checkpoint folder path too long: %s",
				     folder);
	if (!status) {
		remove_folder(staging); // a killed save's
		status = make_folder(staging, diag);
	}
	if (status)
		return status;
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	snprintf(iteration, sizeof iteration, "%" PRId64, info->iteration);
	snprintf(sampler, sizeof sampler, "%" PRIu64, info->sampler_state);
	snprintf(seed, sizeof seed, "%" PRIu64, info->seed);
	snprintf(tokens, sizeof tokens, "%" PRId64, info->consumed_tokens);
	snprintf(skipped, sizeof skipped, "%" PRId64, info->skipped_iters);
	snprintf(save_id, sizeof save_id, "%lld.%09ld", (long long)now.tv_sec, now.tv_nsec);
	enum { FIXED = 9, MAX_SETTINGS = 32 };
	const char *keys[FIXED + MAX_SETTINGS] = {"format", "version", "iteration", "save_id",
						  "sampler_state", "seed", "consumed_tokens",
						  "skipped_iters", "model"};
	const char *values[FIXED + MAX_SETTINGS] = {"f8c-checkpoint", "1", iteration, save_id,
						    sampler, seed, tokens, skipped,
						    info->model ? info->model : ""};
	char setting_keys[MAX_SETTINGS][SETTING_KEY_MAX];
	if (info->n_settings > MAX_SETTINGS)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "too many settings for a checkpoint");
	for (uint32_t i = 0; i < info->n_settings; i++) {
		snprintf(setting_keys[i], SETTING_KEY_MAX, "setting.%s", info->setting_keys[i]);
		keys[FIXED + i] = setting_keys[i];
		values[FIXED + i] = info->setting_values[i];
	}
	for (int file = WEIGHTS; !status && file < N_FILES; file++) {
		char path[4400];
		status = path_in(staging, file_names[file], path, sizeof path, diag);
		if (!status)
			status = write_file(path, file, executor, whole, keys, values,
					    FIXED + info->n_settings, diag);
	}
	if (!status)
		status = install(staging, iteration_folder, folder, diag);
	if (status) {
		remove_folder(staging); // a failed save leaves the folder as it was
		return status;
	}
	return write_latest(folder, info->iteration, diag);
}

/* A save writes both files into FOLDER/iter_N.saving, then installs the folder as
 * FOLDER/iter_N, then moves the latest record to it: at every moment the latest record names a
 * complete checkpoint. A killed save's staging folder is removed by the next save of its
 * iteration (a resumed run saves it again). */
f8_status f8_checkpoint_save(const char *folder, const f8_executor *executor,
			     const f8_checkpoint_info *info, f8_diag *diag) {
	const f8_graph *graph = f8_executor_graph(executor);
	f8_rt_tensor *whole = f8_calloc(graph->n_values + 1, sizeof *whole);
	if (!whole)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	// Every rank gathers first; then rank 0 writes alone.
	f8_status status = gather_parts(executor, info->dist, whole, diag);
	if (!status && (!info->dist || f8_dist_rank(info->dist) == 0))
		status = save_gathered(folder, executor, info, whole, diag);
	for (uint32_t v = 0; v < graph->n_values; v++)
		f8_rt_tensor_destroy(&whole[v]);
	f8_free(whole);
	return status;
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
	if (!version || strcmp(version, "1") != 0)
		return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "%s is checkpoint version %s; this f8c "
				   "reads version 1", path, version ? version : "(none)");
	if (!id || !f8_safetensors_metadata(file, "iteration") ||
	    !f8_safetensors_metadata(file, "sampler_state"))
		return f8_diag_set(diag, F8_ERR_INVALID, "%s lacks its iteration, save id or sampler "
				   "state", path);
	if (*save_id && strcmp(*save_id, id) != 0) {
		f8_diag_set(diag, F8_ERR_INVALID, "%s was written by another save than %s",
			    path, file_names[WEIGHTS]);
		f8_diag_hint(diag, "the save was interrupted between its two files: load an earlier "
			     "checkpoint");
		return F8_ERR_INVALID;
	}
	*save_id = id;
	return F8_OK;
}

/* Reads every leaf file `which` holds into staged[v]; checks names, dtypes and shapes. A leaf
 * the ranks hold parts of is stored whole: this rank's rows are staged. */
static f8_status stage_file(const f8_safetensors *file, const char *path, int which,
			    const f8_executor *executor, f8_dist *dist, f8_rt_tensor *staged,
			    f8_diag *diag) {
	const f8_graph *graph = f8_executor_graph(executor);
	size_t expected = 0;
	for (uint32_t i = 0; i < graph->n_inputs; i++) {
		f8_value_id v = graph->inputs[i];
		const f8_value *value = &graph->values[v];
		if (file_of(graph, v) != which)
			continue;
		expected++;
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
		if (part_ranks(graph, dist, v) > 1) {
			f8_rt_tensor part;
			if ((status = f8_rt_take_part(value, dist, &staged[v], &part, diag)))
				return status;
			f8_rt_tensor_destroy(&staged[v]);
			staged[v] = part;
		}
	}
	if (f8_safetensors_count(file) != expected)
		return f8_diag_set(diag, F8_ERR_INVALID, "%s holds %zu tensors; the model has %zu "
				   "there", path, f8_safetensors_count(file), expected);
	return F8_OK;
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
	f8_safetensors *files[N_FILES] = {0};
	const char *save_id = NULL;
	char paths[N_FILES][4096], latest[4096];
	f8_status status = staged ? F8_OK : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	if (!status)
		status = resolve_latest(folder, latest, sizeof latest, diag);
	for (int file = WEIGHTS; !status && file < N_FILES; file++) {
		status = path_in(latest, file_names[file], paths[file], sizeof paths[file], diag);
		if (!status)
			status = f8_safetensors_open(paths[file], &files[file], diag);
		if (!status)
			status = check_record(files[file], paths[file], &save_id, diag);
		if (!status)
			status = stage_file(files[file], paths[file], file, executor, info->dist,
					    staged, diag);
	}
	uint64_t iteration = 0, sampler = 0, seed = 0, tokens = 0, skipped = 0;
	if (!status) {
		const f8_safetensors *record = files[OPTIMIZER];
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
	for (int file = 0; file < N_FILES; file++)
		f8_safetensors_close(files[file]);
	return status;
}
