/*
 * The precision pass (passes/precision.h): one decision per GEMM, with its reason.
 */
#include "passes/precision.h" // f8_pass_precision_run, f8_fp8_options

#include <string.h> // strcmp

#define NAME_TABLE(kind, LIST, COUNT)                                                      \
	static const char *const kind##_names[] = {LIST(NAME_OF)};                          \
	static_assert(sizeof kind##_names / sizeof kind##_names[0] == COUNT, "one name each"); \
	const char *f8_##kind##_name(f8_##kind value) {                                     \
		return (unsigned)value < COUNT ? kind##_names[value] : "?";                 \
	}                                                                                   \
	bool f8_##kind##_from_name(const char *name, f8_##kind *out) {                      \
		for (int i = 0; i < COUNT; i++)                                             \
			if (strcmp(kind##_names[i], name) == 0) {                           \
				*out = (f8_##kind)i;                                        \
				return true;                                                \
			}                                                                   \
		return false;                                                               \
	}
#define NAME_OF(e, name) name,
NAME_TABLE(fp8_format, F8_FP8_FORMAT_LIST, F8_FP8_FORMAT_COUNT)
NAME_TABLE(target, F8_TARGET_LIST, F8_TARGET_COUNT)
NAME_TABLE(amax_algo, F8_AMAX_ALGO_LIST, F8_AMAX_ALGO_COUNT)
NAME_TABLE(gemm_kind, F8_GEMM_KIND_LIST, F8_GEMM_KIND_COUNT)
#undef NAME_OF
#undef NAME_TABLE

f8_fp8_options f8_fp8_options_default(void) {
	return (f8_fp8_options){
		.format = F8_FP8_FORMAT_HYBRID,
		.recipe = F8_RECIPE_DELAYED,
		.amax_history_len = 1024,
		.amax_algo = F8_AMAX_ALGO_MAX,
		.margin = 0,
		.wgrad = true,
		.target = F8_TARGET_SM_90,
	};
}

f8_status f8_fp8_options_check(const f8_fp8_options *o, f8_diag *diag) {
	if ((unsigned)o->format >= F8_FP8_FORMAT_COUNT)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "--fp8-format must be hybrid or e4m3");
	if (o->recipe == F8_RECIPE_NONE || (unsigned)o->recipe >= F8_RECIPE_COUNT)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "--fp8-recipe must be delayed, current, "
				   "rowwise, block or mxfp8");
	if (o->amax_history_len < 1) {
		f8_diag_set(diag, F8_ERR_ARGUMENT, "--fp8-amax-history-len must be at least 1, "
			    "not %d", o->amax_history_len);
		f8_diag_hint(diag, "1 scales by the last amax only; TransformerEngine's default "
			     "is 1024");
		return F8_ERR_ARGUMENT;
	}
	if (o->margin < 0 || o->margin > 64)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "--fp8-margin must be in 0..64, not %d",
				   o->margin);
	if (o->layers_at_start_high < 0 || o->layers_at_end_high < 0)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "--num-layers-at-start-in-bf16 and "
				   "--num-layers-at-end-in-bf16 must not be negative");
	if (!(o->cv_threshold >= 0))
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "--fp8-cv-threshold must be >= 0");
	if (o->cv_threshold > 0 && !o->calibration) {
		f8_diag_set(diag, F8_ERR_ARGUMENT, "--fp8-cv-threshold needs --calibration");
		f8_diag_hint(diag, "make the statistics with f8c calibrate MODEL --data TOKENS "
			     "-o STATS.json");
		return F8_ERR_ARGUMENT;
	}
	if ((unsigned)o->target >= F8_TARGET_COUNT)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "--target must be cpu, sm_90 or sm_100");
	return F8_OK;
}

bool f8_glob_match(const char *pattern, const char *text) {
	const char *star = NULL, *resume = NULL;
	while (*text) {
		if (*pattern == '?' || (*pattern && *pattern != '*' && *pattern == *text)) {
			pattern++, text++;
		} else if (*pattern == '*') {
			star = pattern++;
			resume = text;
		} else if (star) {
			pattern = star + 1;
			text = ++resume;
		} else {
			return false;
		}
	}
	while (*pattern == '*')
		pattern++;
	return *pattern == '\0';
}

bool f8_gemm_kind_of(const f8_node *node, f8_gemm_kind *out) {
	switch (node->op) {
	case F8_OP_LINEAR:
		*out = f8_node_attr_int(node, "transpose_weight", 0) ? F8_GEMM_KIND_DGRAD
								     : F8_GEMM_KIND_FWD;
		return true;
	case F8_OP_LINEAR_WGRAD:
		*out = F8_GEMM_KIND_WGRAD;
		return true;
	case F8_OP_FP8_GEMM:
		return f8_gemm_kind_from_name(f8_node_attr_string(node, "gemm", ""), out);
	default:
		return false;
	}
}

f8_status f8_pass_precision_run(f8_graph *graph, const f8_fp8_options *options, FILE *report,
				f8_diag *diag) {
	(void)graph, (void)report;
	return f8_fp8_options_check(options, diag);
}
