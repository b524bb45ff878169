/*
 * Calibration statistics: how the amax of each GEMM operand of each Linear layer moves from step
 * to step of a high-precision run, and what share of its values FP8 would lose at delayed
 * scaling's scale; the STATS.json file `f8c calibrate` writes and `--calibration` reads back.
 *
 * The file (version 2):
 *   {"format": "f8c-calibration", "version": 2, "model": "models/gpt-tiny.json",
 *    "model_digest": "5f0c8e21a4b73d90", "linear_layers": 17, "steps": 20,
 *    "fp8_format": "hybrid", "amax_history_len": 1024, "amax_compute_algo": "max", "margin": 0,
 *    "tensors": [{"scope": "layers.0.mlp.fc1", "role": "x", "amax_mean": 3.1, "amax_std": 0.2,
 *                 "amax_cv": 0.064, "max_step_ratio": 1.3, "underflow": 0.0001,
 *                 "saturate": 0.0, "steps": 20}, ...]}
 * Roles: "x" (the input), "w" (the weight), "dy" (the output gradient). amax_std is the
 * population standard deviation over the steps, amax_cv = amax_std / amax_mean (0 when the mean
 * is 0), max_step_ratio the largest amax(s) / amax(s-1) or its inverse (1 with fewer than two
 * nonzero steps). underflow is the share of nonzero values that round to zero and saturate the
 * share of values beyond the format's largest when cast at the scale delayed scaling would use:
 * from the amax history of the previous steps (window amax_history_len, algo max or
 * most_recent, the margin), the first step at its own amax. The format is E4M3 for x and w, and
 * for dy E5M2 under hybrid (E4M3 under e4m3). model_digest (16 hex digits) and linear_layers
 * bind the statistics to the model they were taken of (passes/precision.h,
 * f8_calibration_digest): --calibration with another model is an error naming both.
 */
#ifndef F8_TOOLS_CALIBRATION_H
#define F8_TOOLS_CALIBRATION_H

#include <stddef.h> // size_t
#include <stdint.h> // int64_t

#include "ir/arena.h"         // f8_arena
#include "ir/diag.h"          // f8_status, f8_diag
#include "passes/precision.h" // f8_calibration, f8_fp8_format, f8_amax_algo
#include "runtime/tensor.h"   // f8_rt_tensor

/* How the statistics are taken: the FP8 run they stand for. */
typedef struct f8_calibration_settings {
	f8_fp8_format format;
	int amax_history_len; // >= 1
	f8_amax_algo amax_algo;
	int margin;           // >= 0
} f8_calibration_settings;

/* The running statistics of a calibration; incomplete on purpose. */
typedef struct f8_calibration_stats f8_calibration_stats;

/* Starts empty statistics under `settings` (copied). F8_ERR_ARGUMENT for a history length below
 * 1 or a negative margin; F8_ERR_NOMEM. */
f8_status f8_calibration_stats_create(const f8_calibration_settings *settings,
				      f8_calibration_stats **out, f8_diag *diag);

/* Frees the statistics. NULL is allowed. */
void f8_calibration_stats_destroy(f8_calibration_stats *stats);

/*
 * Observes `values` (any float dtype) as operand `role` ("x", "w" or "dy"; copied, as is
 * `scope`) of the Linear layer `scope` in the current step. Observed several times in one step
 * (micro-batches), the step's amax is the largest, and every value counts towards underflow and
 * saturation. F8_ERR_ARGUMENT for an unknown role or a tensor that is not of floats;
 * F8_ERR_NOMEM.
 */
f8_status f8_calibration_stats_observe(f8_calibration_stats *stats, const char *scope,
				       const char *role, const f8_rt_tensor *values,
				       f8_diag *diag);

/* Ends the current step: its amaxes go into the histories (a non-finite one is skipped, as
 * delayed scaling skips it). F8_ERR_NOMEM. */
f8_status f8_calibration_stats_end_step(f8_calibration_stats *stats, f8_diag *diag);

/* What a STATS.json holds, or what statistics sum up to: the entries in the order their
 * (scope, role) was first observed. Owned by `arena`, which f8_calibration_file_destroy frees. */
typedef struct f8_calibration_file {
	f8_calibration calibration;   // entries, n_entries, source (the path read, or NULL)
	f8_calibration_entry *entries; // the same array, writable
	const char *model;
	int64_t steps;
	f8_calibration_settings settings;
	f8_arena *arena;
} f8_calibration_file;

/* Sums up `stats` over the steps ended so far into *out (the caller destroys it), with `model`
 * (copied) for the file; the caller sets file->calibration's digest and layers (the model's
 * f8_calibration_digest). F8_ERR_ARGUMENT when no step has ended; F8_ERR_NOMEM. */
f8_status f8_calibration_stats_summarize(const f8_calibration_stats *stats, const char *model,
					 f8_calibration_file **out, f8_diag *diag);

/* Writes `file` to `path` as above, atomically (runtime/atomic_file.h); numbers with 17
 * significant digits, so that they read back exactly. F8_ERR_IO, F8_ERR_NOMEM. */
f8_status f8_calibration_write(const char *path, const f8_calibration_file *file,
			       f8_diag *diag);

/*
 * Reads the STATS.json at `path` into *out (the caller destroys it; calibration.source is
 * `path`, copied). F8_ERR_IO; F8_ERR_PARSE with line:column for malformed JSON; F8_ERR_INVALID
 * naming the file, the entry and the key for another format or version, a missing or mistyped
 * key, a negative statistic, an unknown role, or a (scope, role) listed twice.
 */
f8_status f8_calibration_read(const char *path, f8_calibration_file **out, f8_diag *diag);

/* Frees a file's contents and the file. NULL is allowed. */
void f8_calibration_file_destroy(f8_calibration_file *file);

#endif
