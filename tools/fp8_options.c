/*
 * The FP8 options of the f8c command (tools/fp8_options.h): the table, the parsing from the
 * command line and from --config, the help, and the --precision-config file. --bf16 is in the
 * table too, so that every command that takes the FP8 options takes it, though it needs no
 * --fp8-format.
 */
#include "tools/fp8_options.h" // f8_tool_fp8_args

#include <errno.h>  // errno
#include <limits.h> // INT_MIN, INT_MAX
#include <stdarg.h> // va_list
#include <stdio.h>  // FILE, fopen, fprintf, snprintf, vsnprintf
#include <string.h> // strcmp, strncmp, strchr, strlen, strerror

#include "ir/alloc.h"           // f8_realloc, f8_free
#include "ir/ops.h"             // f8_op_get_info, F8_OPF_GEMM
#include "tools/tool_options.h" // f8_tool_parse_int, f8_tool_parse_double, f8_tool_option_named

/* The options, in the order the help lists them. */
typedef enum option_id {
	BF16,
	FORMAT,
	RECIPE,
	HISTORY_LEN,
	AMAX_ALGO,
	MARGIN,
	WGRAD,
	NO_WGRAD,
	FIRST_LAST,
	AT_START,
	AT_END,
	HEAD,
	EXCLUDE,
	PRECISION_CONFIG,
	CALIBRATION,
	CV_THRESHOLD,
	TARGET,
	ALLOW_FALLBACK,
	OPTION_COUNT
} option_id;

typedef struct option {
	const char *name;  // without the leading "--"
	const char *takes; // what its value is ("hybrid|e4m3"); NULL for a flag
	const char *help;  // what it does, its default, and where that differs from Megatron-LM's
} option;

static const option table[OPTION_COUNT] = {
	[BF16] = {"bf16", NULL,
		  "mixed precision as Megatron-LM's --bf16: activations and the GEMMs not in FP8 in "
		  "BF16 (f32 accumulation), f32 master weights, AdamW moments and gradient "
		  "accumulators (main_grad); FP8 GEMMs, with --fp8-format, then write BF16. Not an "
		  "FP8 option: it needs no --fp8-format (default: the model's own dtypes)"},
	[FORMAT] = {"fp8-format", "hybrid|e4m3",
		    "hybrid: E4M3 forward, E5M2 gradients; e4m3: E4M3 everywhere. Pure E5M2 is "
		    "refused: the hardware has no E5M2 x E5M2 GEMM"},
	[RECIPE] = {"fp8-recipe", "delayed|current|rowwise|block|mxfp8",
		    "how scales are found (default delayed, as Megatron-LM's). current is Megatron's "
		    "tensorwise; block is its blockwise (1x128 activations and gradients, 128x128 "
		    "weights); both Megatron names are taken too; mxfp8 needs --target sm_100"},
	[HISTORY_LEN] = {"fp8-amax-history-len", "N",
			 "delayed scaling's amax window (default 1, Megatron-LM's; "
			 "TransformerEngine's DelayedScaling default is 1024)"},
	[AMAX_ALGO] = {"fp8-amax-compute-algo", "max|most_recent",
		       "the history's max or its newest entry (default most_recent, Megatron-LM's; "
		       "TransformerEngine's is max)"},
	[MARGIN] = {"fp8-margin", "N", "scale = fp8_max / amax / 2^N (default 0, as Megatron-LM)"},
	[WGRAD] = {"fp8-wgrad", NULL, "the weight-gradient GEMMs in FP8 (the default)"},
	[NO_WGRAD] = {"no-fp8-wgrad", NULL, "the weight-gradient GEMMs in high precision"},
	[FIRST_LAST] = {"first-last-layers-bf16", NULL,
			"keep the first and last transformer layers in high precision: 1 and 1 "
			"unless the next two options say otherwise (Megatron-LM's meaning)"},
	[AT_START] = {"num-layers-at-start-in-bf16", "N",
		      "layers kept at the start (default 0; 1 with --first-last-layers-bf16; unlike "
		      "Megatron-LM, it counts without that flag too)"},
	[AT_END] = {"num-layers-at-end-in-bf16", "N",
		    "layers kept at the end (the same defaults)"},
	[HEAD] = {"fp8-head", NULL,
		  "put the output head in FP8. By default it stays in high precision, as the "
		  "embeddings do (TransformerEngine recipes keep both out of FP8: the logits are "
		  "the most sensitive GEMM)"},
	[EXCLUDE] = {"fp8-exclude", "GLOB",
		     "keep the GEMMs whose scope matches in high precision (* and ?; repeatable; "
		     "a pattern matching nothing is an error)"},
	[PRECISION_CONFIG] = {"precision-config", "FILE.json",
			      "per-scope rules, applied after everything else but the target's "
			      "limits (format below)"},
	[CALIBRATION] = {"calibration", "STATS.json",
			 "statistics from f8c calibrate; with --fp8-cv-threshold"},
	[CV_THRESHOLD] = {"fp8-cv-threshold", "X",
			  "keep a layer in high precision when the coefficient of variation of an "
			  "operand's amax over the calibration steps is above X"},
	[TARGET] = {"target", "cpu|sm_90|sm_100",
		    "the chip the plan is for (default sm_90, Hopper: its shape rules and recipes; "
		    "Megatron-LM has no such option, it runs on what it finds)"},
	[ALLOW_FALLBACK] = {"allow-fallback", NULL,
			    "a GEMM the target cannot run in FP8 goes high precision, recorded with "
			    "the reason, instead of being an error"},
};

#define BIT(id) (UINT32_C(1) << (id))
static_assert(OPTION_COUNT <= 32, "the given-masks are 32 bits");

f8_status f8_tool_fp8_init(f8_tool_fp8_args *fp8, const char *command, bool on_by_default,
			   f8_diag *diag) {
	*fp8 = (f8_tool_fp8_args){.options = f8_fp8_options_default(), .command = command,
			     .on_by_default = on_by_default, .arena = f8_arena_create()};
	if (!fp8->arena)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	return F8_OK;
}

void f8_tool_fp8_destroy(f8_tool_fp8_args *fp8) {
	f8_calibration_file_destroy(fp8->calibration);
	f8_free(fp8->exclude);
	f8_arena_destroy(fp8->arena);
	*fp8 = (f8_tool_fp8_args){0};
}

/* The option called `name`, dashes or underscores, or OPTION_COUNT. */
static option_id find(const char *name) {
	for (int id = 0; id < OPTION_COUNT; id++)
		if (f8_tool_option_named(table[id].name, name))
			return (option_id)id;
	return OPTION_COUNT;
}

bool f8_tool_fp8_is_option(const char *name) {
	return find(name) != OPTION_COUNT;
}

static f8_status bad_value(option_id id, const char *text, f8_diag *diag) {
	f8_diag_set(diag, F8_ERR_ARGUMENT, "--%s: cannot use '%s'", table[id].name, text);
	f8_diag_hint(diag, "--%s takes %s", table[id].name, table[id].takes);
	return F8_ERR_ARGUMENT;
}

static f8_status add_exclude(f8_tool_fp8_args *fp8, const char *pattern, f8_diag *diag) {
	if (fp8->options.n_exclude == fp8->cap_exclude) {
		size_t cap = fp8->cap_exclude ? 2 * fp8->cap_exclude : 8;
		const char **grown = f8_realloc(fp8->exclude, cap * sizeof *grown);
		if (!grown)
			return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
		fp8->exclude = grown;
		fp8->cap_exclude = cap;
	}
	const char *copy = f8_arena_strdup(fp8->arena, pattern);
	if (!copy)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	fp8->exclude[fp8->options.n_exclude++] = copy;
	fp8->options.exclude = fp8->exclude;
	return F8_OK;
}

/* Parses all of `text` as an int into *out; false otherwise. */
static bool parse_int(const char *text, int *out) {
	int64_t value;
	if (!f8_tool_parse_int(text, INT_MIN, INT_MAX, &value))
		return false;
	*out = (int)value;
	return true;
}

/* Sets option `id` (not a flag) from `text`. */
static f8_status set_value(f8_tool_fp8_args *fp8, option_id id, const char *text, f8_diag *diag) {
	f8_fp8_options *o = &fp8->options;
	bool ok = true;
	switch (id) {
	case FORMAT:
		if (strcmp(text, "e5m2") == 0) {
			f8_diag_set(diag, F8_ERR_ARGUMENT, "--fp8-format e5m2: the hardware has no "
				    "E5M2 x E5M2 GEMM, so pure E5M2 cannot run any of a layer's "
				    "GEMMs");
			f8_diag_hint(diag, "use --fp8-format hybrid: E4M3 for activations and "
				     "weights, E5M2 for gradients (TransformerEngine's HYBRID)");
			return F8_ERR_ARGUMENT;
		}
		ok = f8_fp8_format_from_name(text, &o->format);
		break;
	case RECIPE: // Megatron-LM's names for two of them, as its users write them
		if (strcmp(text, "tensorwise") == 0)
			o->recipe = F8_RECIPE_CURRENT;
		else if (strcmp(text, "blockwise") == 0)
			o->recipe = F8_RECIPE_BLOCK;
		else
			ok = f8_recipe_from_name(text, strlen(text), &o->recipe) &&
			     o->recipe != F8_RECIPE_NONE && o->recipe != F8_RECIPE_MODEL;
		break;
	case AMAX_ALGO: ok = f8_amax_algo_from_name(text, &o->amax_algo); break;
	case TARGET: ok = f8_target_from_name(text, &o->target); break;
	// The integers' ranges are f8_fp8_options_check's, whose messages say what to do.
	case HISTORY_LEN: ok = parse_int(text, &o->amax_history_len); break;
	case MARGIN: ok = parse_int(text, &o->margin); break;
	case AT_START: ok = parse_int(text, &o->layers_at_start_high); break;
	case AT_END: ok = parse_int(text, &o->layers_at_end_high); break;
	case CV_THRESHOLD: ok = f8_tool_parse_double(text, &o->cv_threshold); break;
	case EXCLUDE: return add_exclude(fp8, text, diag);
	case PRECISION_CONFIG: fp8->precision_config = f8_arena_strdup(fp8->arena, text); break;
	case CALIBRATION: fp8->calibration_path = f8_arena_strdup(fp8->arena, text); break;
	default: ok = false; break;
	}
	if ((id == PRECISION_CONFIG && !fp8->precision_config) ||
	    (id == CALIBRATION && !fp8->calibration_path))
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	return ok ? F8_OK : bad_value(id, text, diag);
}

/* Sets flag `id` on or off. */
static void set_flag(f8_tool_fp8_args *fp8, option_id id, bool on) {
	switch (id) {
	case WGRAD: fp8->options.wgrad = on; break;
	case NO_WGRAD: fp8->options.wgrad = !on; break;
	case HEAD: fp8->options.head_fp8 = on; break;
	case ALLOW_FALLBACK: fp8->options.allow_fallback = on; break;
	case BF16: fp8->bf16 = on; break;
	default: break; // FIRST_LAST: settled in finish, from `given`
	}
}

f8_status f8_tool_fp8_parse_arg(f8_tool_fp8_args *fp8, int argc, char **argv, int *i, bool *taken,
				f8_diag *diag) {
	const char *arg = argv[*i];
	*taken = false;
	if (strncmp(arg, "--", 2) != 0)
		return F8_OK;
	option_id id = find(arg + 2);
	if (id == OPTION_COUNT || strchr(arg, '_'))
		return F8_OK;
	*taken = true;
	uint32_t pair = id == WGRAD || id == NO_WGRAD ? BIT(WGRAD) | BIT(NO_WGRAD) : BIT(id);
	if (id != EXCLUDE && (fp8->on_command_line & pair)) {
		f8_diag_set(diag, F8_ERR_ARGUMENT, "%s is given twice%s", arg,
			    pair != BIT(id) ? " (with its opposite)" : "");
		f8_diag_hint(diag, "give each option once; only --fp8-exclude repeats");
		return F8_ERR_ARGUMENT;
	}
	fp8->on_command_line |= BIT(id);
	fp8->given |= BIT(id);
	if (!table[id].takes) {
		set_flag(fp8, id, true);
		return F8_OK;
	}
	if (*i + 1 == argc) {
		f8_diag_set(diag, F8_ERR_ARGUMENT, "%s needs a value", arg);
		f8_diag_hint(diag, "%s takes %s", arg, table[id].takes);
		return F8_ERR_ARGUMENT;
	}
	return set_value(fp8, id, argv[++*i], diag);
}

f8_status f8_tool_fp8_set_json(f8_tool_fp8_args *fp8, const char *name, const json_t *value,
			       const char *path, f8_diag *diag) {
	option_id id = find(name);
	if (id == OPTION_COUNT)
		return f8_diag_set_in_file(diag, path, F8_ERR_ARGUMENT, "\"%s\" is not an FP8 option",
					   name);
	uint32_t pair = id == WGRAD || id == NO_WGRAD ? BIT(WGRAD) | BIT(NO_WGRAD) : BIT(id);
	if (fp8->on_command_line & pair) // the command line wins
		return F8_OK;
	fp8->given |= BIT(id);
	const char *expected = NULL;
	if (!table[id].takes) {
		if (json_is_boolean(value))
			set_flag(fp8, id, json_is_true(value));
		else
			expected = "true or false";
		if (id == FIRST_LAST && json_is_false(value))
			fp8->given &= ~BIT(id);
	} else if (id == EXCLUDE && json_is_array(value)) {
		for (size_t k = 0; k < json_array_size(value) && !expected; k++) {
			const json_t *item = json_array_get(value, k);
			f8_status status;
			if (!json_is_string(item))
				expected = "a pattern or an array of patterns";
			else if ((status = add_exclude(fp8, json_string_value(item), diag)))
				return status;
		}
	} else {
		char text[64];
		if (json_is_string(value))
			return set_value(fp8, id, json_string_value(value), diag);
		if (json_is_integer(value))
			snprintf(text, sizeof text, "%lld", (long long)json_integer_value(value));
		else if (json_is_real(value))
			snprintf(text, sizeof text, "%.17g", json_real_value(value));
		else
			expected = "a number or a string";
		if (!expected)
			return set_value(fp8, id, text, diag);
	}
	if (expected)
		return f8_diag_set_in_file(diag, path, F8_ERR_ARGUMENT, "key \"%s\" must be %s", name,
					   expected);
	return F8_OK;
}

/* The names of the FP8 options in `mask`, "--a, --b", into buffer. */
static const char *names_of(uint32_t mask, char *buffer, size_t size) {
	size_t used = 0;
	buffer[0] = '\0';
	for (int id = 0; id < OPTION_COUNT; id++)
		if (mask & BIT(id) && used < size)
			used += (size_t)snprintf(buffer + used, size - used, "%s--%s",
						 used ? ", " : "", table[id].name);
	return buffer;
}

/* Whether FP8 is on, and the options that need it when it is not (all but --bf16). */
static f8_status settle_enabled(f8_tool_fp8_args *fp8, f8_diag *diag) {
	fp8->enabled = fp8->on_by_default || (fp8->given & BIT(FORMAT));
	uint32_t others = fp8->given & ~BIT(FORMAT) & ~BIT(BF16);
	if (fp8->enabled || !others)
		return F8_OK;
	char names[512];
	f8_diag_set(diag, F8_ERR_ARGUMENT, "%s without --fp8-format: f8c %s uses FP8 only when "
		    "--fp8-format is given (Megatron-LM's rule)", names_of(others, names, sizeof names),
		    fp8->command);
	f8_diag_hint(diag, "add --fp8-format hybrid (E4M3 forward, E5M2 gradients) to train in "
		     "FP8, or drop %s", names);
	return F8_ERR_ARGUMENT;
}

/* The calibration file and its threshold, which go together. */
static f8_status settle_calibration(f8_tool_fp8_args *fp8, f8_diag *diag) {
	bool threshold = fp8->given & BIT(CV_THRESHOLD);
	if (!fp8->calibration_path && !threshold)
		return F8_OK;
	if (!fp8->calibration_path) {
		f8_diag_set(diag, F8_ERR_ARGUMENT, "--fp8-cv-threshold needs --calibration "
			    "STATS.json");
		f8_diag_hint(diag, "make the statistics with f8c calibrate MODEL --data TOKENS.bin "
			     "--steps N -o STATS.json");
		return F8_ERR_ARGUMENT;
	}
	f8_status status = f8_calibration_read(fp8->calibration_path, &fp8->calibration, diag);
	if (status)
		return status;
	fp8->options.calibration = &fp8->calibration->calibration;
	if (threshold)
		return F8_OK;
	double least = 0, most = 0;
	for (size_t i = 0; i < fp8->calibration->calibration.n_entries; i++) {
		double cv = fp8->calibration->calibration.entries[i].amax_cv;
		least = i == 0 || cv < least ? cv : least;
		most = i == 0 || cv > most ? cv : most;
	}
	f8_diag_set(diag, F8_ERR_ARGUMENT, "--calibration needs --fp8-cv-threshold X: the "
		    "coefficient of variation of the amax above which a layer stays in high "
		    "precision");
	f8_diag_hint(diag, "the amax_cv of %s runs from %.3g to %.3g", fp8->calibration_path,
		     least, most);
	return F8_ERR_ARGUMENT;
}

f8_status f8_tool_fp8_finish(f8_tool_fp8_args *fp8, f8_diag *diag) {
	f8_status status = settle_enabled(fp8, diag);
	if (status)
		return status;
	f8_fp8_options *o = &fp8->options;
	if (fp8->given & BIT(FIRST_LAST)) {
		if (!(fp8->given & BIT(AT_START)))
			o->layers_at_start_high = 1;
		if (!(fp8->given & BIT(AT_END)))
			o->layers_at_end_high = 1;
	}
	if (fp8->precision_config) {
		f8_precision_rule *rules;
		status = f8_tool_precision_config_read(fp8->precision_config, fp8->arena, &rules,
						       &o->n_rules, diag);
		if (status)
			return status;
		o->rules = rules;
	}
	if ((status = settle_calibration(fp8, diag)))
		return status;
	return f8_fp8_options_check(o, diag);
}

const f8_fp8_options *f8_tool_fp8_options(const f8_tool_fp8_args *fp8) {
	return fp8->enabled ? &fp8->options : NULL;
}

bool f8_tool_fp8_given(const f8_tool_fp8_args *fp8) {
	return (fp8->given & ~BIT(BF16)) != 0;
}

void f8_tool_fp8_print_help(FILE *out, bool on_by_default) {
	for (int id = 0; id < OPTION_COUNT; id++) {
		if (id == BF16)
			fprintf(out, "Mixed precision:\n");
		else if (id == FORMAT)
			fprintf(out, "FP8 options (%s):\n", on_by_default
				? "FP8 is on here by default: hybrid, delayed scaling, target sm_90"
				: "FP8 is on only when --fp8-format is given, as in Megatron-LM; the "
				  "others need it");
		char head[64];
		snprintf(head, sizeof head, "--%s%s%s", table[id].name, table[id].takes ? " " : "",
			 table[id].takes ? table[id].takes : "");
		fprintf(out, "  %s\n      %s\n", head, table[id].help);
	}
	fprintf(out,
		"--precision-config FILE.json: rules in file order, a later one winning over an "
		"earlier one\nand over the options above:\n"
		"  {\"rules\": [{\"scope\": \"layers.0.*\", \"gemms\": [\"wgrad\"], \"fp8\": false,\n"
		"              \"reason\": \"wgrad of the first layer diverges in FP8\"},\n"
		"             {\"scope\": \"head\", \"fp8\": true, \"recipe\": \"current\"}]}\n"
		"  scope   a glob on GEMM scopes (f8c audit MODEL lists them); required\n"
		"  gemms   any of fwd, dgrad, wgrad (default: all three)\n"
		"  fp8     true or false; required\n"
		"  recipe  with \"fp8\": true, delayed|current|rowwise|block|mxfp8 (default: "
		"--fp8-recipe)\n"
		"  reason  text for the decision's reason (optional)\n");
}

/* F8_ERR_INVALID about rule `rule` (1-based; 0: the file) of `path`, with the format as hint. */
static f8_status bad_rule(const char *path, size_t rule, f8_diag *diag, const char *format, ...)
	__attribute__((format(printf, 4, 5)));
static f8_status bad_rule(const char *path, size_t rule, f8_diag *diag, const char *format, ...) {
	char message[F8_DIAG_MESSAGE_MAX];
	va_list args;
	va_start(args, format);
	vsnprintf(message, sizeof message, format, args);
	va_end(args);
	if (rule)
		f8_diag_set_in_file(diag, path, F8_ERR_INVALID, "rule %zu: %s", rule, message);
	else
		f8_diag_set_in_file(diag, path, F8_ERR_INVALID, "%s", message);
	f8_diag_hint(diag, "a precision config is {\"rules\": [{\"scope\": GLOB, \"fp8\": true|false, "
		     "\"gemms\": [\"fwd\", \"dgrad\", \"wgrad\"], \"recipe\": NAME, \"reason\": "
		     "TEXT}]}; gemms, recipe and reason are optional (f8c audit --help)");
	return F8_ERR_INVALID;
}

/* The GEMM kinds of a rule's "gemms" array into *kinds (a mask); 0 when it is malformed. */
static size_t read_kinds(const json_t *gemms, unsigned *kinds) {
	*kinds = 0;
	if (!json_is_array(gemms) || json_array_size(gemms) == 0)
		return 0;
	for (size_t k = 0; k < json_array_size(gemms); k++) {
		const char *name = json_string_value(json_array_get(gemms, k));
		f8_gemm_kind kind;
		if (!name || !f8_gemm_kind_from_name(name, &kind) || (*kinds >> kind & 1))
			return 0;
		*kinds |= 1u << kind;
	}
	return json_array_size(gemms);
}

/* Rule n (1-based) from `object` into *rule, its texts in `arena`. */
static f8_status read_rule(const char *path, size_t n, const json_t *object, f8_arena *arena,
			   f8_precision_rule *rule, f8_diag *diag) {
	static const char *const keys[] = {"scope", "gemms", "fp8", "recipe", "reason", NULL};
	if (!json_is_object(object))
		return bad_rule(path, n, diag, "a rule is an object");
	const char *key;
	const json_t *value;
	json_object_foreach((json_t *)object, key, value) {
		bool known = false;
		for (int k = 0; keys[k]; k++)
			known |= strcmp(key, keys[k]) == 0;
		if (!known)
			return bad_rule(path, n, diag, "unknown key \"%s\"", key);
	}
	const char *scope = json_string_value(json_object_get(object, "scope"));
	const json_t *fp8 = json_object_get(object, "fp8");
	const json_t *gemms = json_object_get(object, "gemms");
	const json_t *recipe = json_object_get(object, "recipe");
	const json_t *reason = json_object_get(object, "reason");
	*rule = (f8_precision_rule){.recipe = F8_RECIPE_NONE};
	if (!scope || !*scope)
		return bad_rule(path, n, diag, "\"scope\" must be a glob on scope names, like "
				"\"layers.0.*\"");
	if (!json_is_boolean(fp8))
		return bad_rule(path, n, diag, "\"fp8\" must be true or false");
	rule->fp8 = json_is_true(fp8);
	if (gemms && !read_kinds(gemms, &rule->kinds))
		return bad_rule(path, n, diag, "\"gemms\" must be a list of fwd, dgrad and wgrad, "
				"each at most once");
	const char *recipe_name = json_string_value(recipe);
	if (recipe && (!recipe_name || !f8_recipe_from_name(recipe_name, strlen(recipe_name),
							    &rule->recipe) ||
		       rule->recipe == F8_RECIPE_NONE || rule->recipe == F8_RECIPE_MODEL))
		return bad_rule(path, n, diag, "\"recipe\" must be delayed, current, rowwise, block "
				"or mxfp8");
	if (recipe && !rule->fp8)
		return bad_rule(path, n, diag, "\"recipe\" goes with \"fp8\": true");
	if (reason && !json_is_string(reason))
		return bad_rule(path, n, diag, "\"reason\" must be a string");
	char where[F8_DIAG_FILE_MAX + 32];
	snprintf(where, sizeof where, "%s: rule %zu", path, n);
	rule->scope = f8_arena_strdup(arena, scope);
	rule->where = f8_arena_strdup(arena, where);
	rule->reason = reason ? f8_arena_strdup(arena, json_string_value(reason)) : NULL;
	if (!rule->scope || !rule->where || (reason && !rule->reason))
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	return F8_OK;
}

f8_status f8_tool_precision_config_read(const char *path, f8_arena *arena,
					f8_precision_rule **rules, size_t *n_rules, f8_diag *diag) {
	*rules = NULL;
	*n_rules = 0;
	FILE *file = fopen(path, "rb");
	if (!file)
		return f8_diag_set_in_file(diag, path, F8_ERR_IO, "cannot open: %s", strerror(errno));
	json_error_t error;
	json_t *root = json_loadf(file, JSON_REJECT_DUPLICATES, &error);
	fclose(file);
	if (!root) {
		f8_diag_at(diag, path, error.line > 0 ? (uint32_t)error.line : 0,
			   error.column > 0 ? (uint32_t)error.column : 1, NULL, 0);
		f8_diag_set(diag, F8_ERR_PARSE, "malformed JSON: %s", error.text);
		f8_diag_hint(diag, "a precision config is JSON: {\"rules\": [{\"scope\": "
			     "\"layers.0.*\", \"fp8\": false}]} (f8c audit --help)");
		return F8_ERR_PARSE;
	}
	const json_t *list = json_object_get(root, "rules");
	f8_status status = F8_OK;
	const char *key;
	json_t *value;
	if (!json_is_object(root) || !json_is_array(list))
		status = bad_rule(path, 0, diag, "a precision config is an object with a \"rules\" "
				  "array");
	if (!status) {
		json_object_foreach(root, key, value) {
			if (strcmp(key, "rules") == 0 || strcmp(key, "comment") == 0)
				continue;
			status = bad_rule(path, 0, diag, "unknown key \"%s\" (the file has \"rules\" "
					  "and, if you like, a \"comment\")", key);
			break;
		}
	}
	size_t n = status ? 0 : json_array_size(list);
	f8_precision_rule *read = n ? f8_arena_alloc_array(arena, n, sizeof *read) : NULL;
	if (n && !read)
		status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	for (size_t i = 0; !status && i < n; i++)
		status = read_rule(path, i + 1, json_array_get(list, i), arena, &read[i], diag);
	json_decref(root);
	if (status)
		return status;
	*rules = read;
	*n_rules = n;
	return F8_OK;
}

bool f8_tool_fp8_warn_none(const f8_tool_fp8_args *fp8, const f8_graph *graph,
			   const char *command, FILE *out) {
	if (!fp8->enabled || !graph)
		return false;
	uint32_t gemms = 0, in_fp8 = 0;
	for (uint32_t p = 0; p < graph->n_order; p++) {
		const f8_node *node = &graph->nodes[graph->order[p]];
		if (!(f8_op_get_info(node->op)->flags & F8_OPF_GEMM))
			continue;
		gemms++;
		in_fp8 += node->op == F8_OP_FP8_GEMM || node->op == F8_OP_FP8_GROUPED_GEMM;
	}
	if (in_fp8 || !gemms)
		return false;
	fprintf(out, "f8c %s: warning: FP8 was asked for (--fp8-format %s, --fp8-recipe %s), but 0 "
		     "of %u GEMMs run in FP8%s\nHINT: 'f8c audit' with the same options gives each "
		     "GEMM's reason\n", command, f8_fp8_format_name(fp8->options.format),
		f8_recipe_name(fp8->options.recipe), gemms,
		fp8->options.allow_fallback ? ": --allow-fallback kept every one in high precision"
					    : "");
	return true;
}
