/*
 * The precision pass and the FP8 options it shares with the fp8-cast pass.
 *
 * requires: canonicalize (types), fuse-patterns (Linear), training (the backward GEMMs).
 *
 * For each GEMM of the program, and for a Linear layer's three GEMMs separately (fwd: Linear;
 * dgrad: a Linear of the backward phase; wgrad: LinearWgrad), it decides FP8 or high precision
 * and writes the decision on the GEMM's output value (f8_precision):
 *   FP8:  format E4M3 for fwd, the gradient's format for dgrad and wgrad (E5M2 under HYBRID),
 *         the recipe, and a reason: "fwd of layers.0.mlp.fc1: FP8, HYBRID -> x E4M3, w E4M3, delayed"
 *   high precision: format = the GEMM's own output dtype (f32 or bf16), recipe NONE, and the
 *         reason: "kept F32: first 1 layer(s) in high precision by policy".
 * Nothing is decided anywhere else: the fp8-cast pass rewrites exactly the GEMMs marked FP8, and
 * `f8c audit` prints these annotations. The ops around the GEMMs that stay in high precision
 * (attention and its backward, the norms, softmax, cross entropy, the embedding, an MoE router,
 * the gradients' global norm and AdamW) get their decision too: their output's dtype and why
 * ("kept BF16: statistics in f32 or wider; norms stay out of FP8 ..."), unless an earlier pass
 * wrote one (attention-unfused, bf16); `f8c audit --all-ops` lists them.
 *
 * The policy, in the order it is applied (a later rule wins over an earlier one):
 *   1. the recipe and format of the options; wgrad by --fp8-wgrad;
 *   2. GEMMs f8c has no FP8 form for (MatMul and Gemm between activations, GroupedLinear):
 *      high precision, the reason says so;
 *   3. the output head (the Linear producing the first graph output, the logits), anything
 *      reading the embedding table, and an MoE router's Linear (what a Router reads: its top-k
 *      choice flips with rounding, so DeepSeek-V3 and Megatron-LM keep the gating in high
 *      precision): high precision unless the precision config says otherwise;
 *   4. --first-last-layers-bf16: the first N and last M transformer layers ("layers.<i>." scopes);
 *   5. --fp8-exclude GLOB patterns on scope names;
 *   6. calibration: a layer whose GEMM operands' amax has a coefficient of variation above the
 *      threshold;
 *   7. --precision-config rules, in file order;
 *   8. the target, as its table says (passes/target.h, f8_target_gemm): recipes the chip's
 *      FP8 GEMMs lack (MXFP8 on sm_90), their shape rules (Hopper's: K and N multiples of 16,
 *      M of 8). These are errors naming the GEMM unless allow_fallback, which records a
 *      high-precision decision with the reason.
 */
#ifndef F8_PASSES_PRECISION_H
#define F8_PASSES_PRECISION_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdio.h>   // FILE

#include "ir/diag.h"       // f8_status, f8_diag
#include "ir/graph.h"      // f8_graph, f8_recipe
#include "passes/target.h" // f8_target, f8_target_table
// f8_gemm_kind (the rules' kinds), and the GEMM queries that lived here until they moved to
// ir/ (f8_gemm_kind_of, f8_gemm_sizes, f8_gemm_operand_name): included for the files that
// still find them through this header (runtime/plan.c's f8_gemm_sizes), until they include
// ir/gemm.h themselves.
#include "ir/gemm.h"

/* X(ENUM, name): FP8 formats of a training run (TransformerEngine's Format). HYBRID: E4M3 for
 * activations and weights, E5M2 for gradients. Pure E5M2 is not offered: the hardware has no
 * E5M2 x E5M2 GEMM. */
#define F8_FP8_FORMAT_LIST(X) \
	X(HYBRID, "hybrid")   \
	X(E4M3, "e4m3")

typedef enum f8_fp8_format {
#define F8_FP8_FORMAT_ENUM(e, name) F8_FP8_FORMAT_##e,
	F8_FP8_FORMAT_LIST(F8_FP8_FORMAT_ENUM)
#undef F8_FP8_FORMAT_ENUM
	F8_FP8_FORMAT_COUNT
} f8_fp8_format;

/* X(ENUM, name): how delayed scaling reads its amax history (--fp8-amax-compute-algo). */
#define F8_AMAX_ALGO_LIST(X)            \
	X(MAX, "max")                   \
	X(MOST_RECENT, "most_recent")

typedef enum f8_amax_algo {
#define F8_AMAX_ALGO_ENUM(e, name) F8_AMAX_ALGO_##e,
	F8_AMAX_ALGO_LIST(F8_AMAX_ALGO_ENUM)
#undef F8_AMAX_ALGO_ENUM
	F8_AMAX_ALGO_COUNT
} f8_amax_algo;

const char *f8_fp8_format_name(f8_fp8_format format);
const char *f8_amax_algo_name(f8_amax_algo algo);
bool f8_fp8_format_from_name(const char *name, f8_fp8_format *out);
bool f8_amax_algo_from_name(const char *name, f8_amax_algo *out);

/* One --precision-config rule: the GEMMs whose scope matches `scope` (a glob: * and ?), of the
 * kinds in `kinds` (a mask of 1 << f8_gemm_kind; 0 means all three), get `fp8` and, when FP8,
 * `recipe` (NONE: the run's recipe). `reason` (may be NULL) goes into the decision's reason. */
typedef struct f8_precision_rule {
	const char *scope;
	unsigned kinds;
	bool fp8;
	f8_recipe recipe;
	const char *reason;
	const char *where; // "config.json: rule 3", for messages
} f8_precision_rule;

/* The amax statistics of one GEMM operand over a calibration run (f8c calibrate). */
typedef struct f8_calibration_entry {
	const char *scope;    // the Linear layer's scope: "layers.3.mlp.fc1"
	const char *role;     // "x" (the input), "w" (the weight) or "dy" (the output gradient)
	double amax_mean, amax_std, amax_cv; // cv = std / mean (0 when mean is 0)
	double max_step_ratio; // the largest amax(step) / amax(step - 1), or its inverse, >= 1
	double underflow;      // share of nonzero values that round to 0 in FP8 at the delayed scale
	double saturate;       // share of values beyond the FP8 maximum at the delayed scale
	int64_t steps;
} f8_calibration_entry;

typedef struct f8_calibration {
	const f8_calibration_entry *entries;
	size_t n_entries;
	const char *source; // the file it was read from, for reasons
	const char *model;  // the model it was made from, for messages
	uint64_t digest;    // that model's f8_calibration_digest: statistics are for it alone
	uint32_t layers;    // its Linear layers
} f8_calibration;

/* What calibration statistics are bound to: FNV-1a over each forward Linear layer of `graph`,
 * in program order, its scope and its weight's shape (not the batch or the sequence, which a
 * run may change); their count into *layers. */
uint64_t f8_calibration_digest(const f8_graph *graph, uint32_t *layers);

/* The FP8 options: TransformerEngine's and Megatron-LM's names in the comments. */
typedef struct f8_fp8_options {
	f8_fp8_format format;      // --fp8-format hybrid|e4m3
	f8_recipe recipe;          // --fp8-recipe delayed|current|rowwise|block|mxfp8
	int amax_history_len;      // --fp8-amax-history-len: delayed scaling's window, >= 1
	f8_amax_algo amax_algo;    // --fp8-amax-compute-algo max|most_recent
	int margin;                // --fp8-margin: scale = fp8_max / amax / 2^margin
	bool wgrad;                // --fp8-wgrad / --no-fp8-wgrad
	int layers_at_start_high;  // --num-layers-at-start-in-bf16 (set by --first-last-layers-bf16)
	int layers_at_end_high;    // --num-layers-at-end-in-bf16
	bool head_fp8;             // the output head in FP8 (default false: high precision)
	const char *const *exclude; // --fp8-exclude GLOB, n_exclude of them: scopes kept high precision
	size_t n_exclude;
	const f8_precision_rule *rules; // --precision-config FILE.json, n_rules of them
	size_t n_rules;
	const f8_calibration *calibration; // --calibration STATS.json, or NULL
	double cv_threshold;       // --fp8-cv-threshold: keep layers whose amax cv is above it
	f8_target target;          // --target cpu|sm_90|sm_100
	bool allow_fallback;       // --allow-fallback: what the target cannot run goes high precision
} f8_fp8_options;

/* The defaults (DESIGN.md): hybrid, delayed, history 1024, max, margin 0, FP8 wgrad, no layers
 * kept at the ends (Megatron's --first-last-layers-bf16 keeps 1 and 1 when given), head in high
 * precision, cv threshold 0 (unused without calibration), target sm_90, no fallback. */
f8_fp8_options f8_fp8_options_default(void);

/* Checks the options alone (a history length of 0, a negative margin, pure E5M2 cannot be
 * asked for by construction): F8_ERR_ARGUMENT naming the option as f8c spells it, with a hint. */
f8_status f8_fp8_options_check(const f8_fp8_options *options, f8_diag *diag);

/* `name` in capitals (E4M3, HYBRID, F32, as reasons write them) into `buffer`; returns it. */
const char *f8_name_upper(const char *name, char *buffer, size_t size);

/* Glob match of `text` against `pattern` (* any run, ? any one character). */
bool f8_glob_match(const char *pattern, const char *text);

/*
 * Runs the precision pass with `options`, on the chip `target` describes (its fp8_gemm; NULL:
 * f8_target_table_default(options->target), the chip facts without codegen). `options` NULL
 * plans no FP8 under --bf16 (the pipeline runs the pass without FP8 only then, passes/bf16.h):
 * every GEMM is recorded in high precision, in its dtype, with the reason "kept BF16: --bf16
 * without --fp8-format: ...", and `target` is not read. Writes every
 * decision, one line per GEMM, to `report` when not NULL. Fails with F8_ERR_UNSUPPORTED naming
 * the GEMM when the target cannot run it and fallback is not allowed, and with F8_ERR_ARGUMENT
 * when an exclude pattern, a config rule or a calibration entry matches nothing in the graph (a
 * typo would otherwise be silent), or when `target` is for another chip than options->target.
 */
f8_status f8_pass_precision_run(f8_graph *graph, const f8_fp8_options *options,
				const f8_target_table *target, FILE *report, f8_diag *diag);

#endif
