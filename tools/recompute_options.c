/*
 * The recompute options of the f8c command (tools/recompute_options.h).
 */
#include "tools/recompute_options.h" // f8_tool_recompute_args

#include <math.h>   // isfinite
#include <string.h> // strcmp, strchr, strlen, strncmp

#include "tools/tool_options.h" // f8_tool_parse_int, f8_tool_parse_double, f8_tool_option_named

typedef enum option_id { GRANULARITY, METHOD, NUM_LAYERS, MODULES, BUDGET, OPTION_COUNT } option_id;

typedef struct option {
	const char *name;  // without the leading "--"
	const char *takes; // what its value is
	const char *help;
} option;

static const option table[OPTION_COUNT] = {
	[GRANULARITY] = {"recompute-granularity", "full|selective",
			 "drop forward values and make them again in the backward: whole layers "
			 "(full) or parts of each (selective; default: none)"},
	[METHOD] = {"recompute-method", "uniform|block",
		    "full: every --recompute-num-layers layers one unit whose input is kept "
		    "(uniform), or the first --recompute-num-layers layers each (block)"},
	[NUM_LAYERS] = {"recompute-num-layers", "N", "full: the layers of a unit, or recomputed"},
	[MODULES] = {"recompute-modules", "MODULE...",
		     "selective: any of core_attn layernorm mlp moe moe_act (default core_attn, "
		     "as Megatron-LM's)"},
	[BUDGET] = {"memory-budget", "GiB",
		    "the most device memory a step may take on one GPU: recompute the cheapest "
		    "parts (FLOPs per byte saved) until the plan fits, after what the options above "
		    "ask (f8c's own; f8c audit --memory shows the plan's)"},
};

#define BIT(id) (UINT32_C(1) << (id))

static option_id find(const char *name) {
	for (int id = 0; id < OPTION_COUNT; id++)
		if (f8_tool_option_named(table[id].name, name))
			return (option_id)id;
	return OPTION_COUNT;
}

bool f8_tool_recompute_is_option(const char *name) {
	return find(name) != OPTION_COUNT;
}

static f8_status bad_value(option_id id, const char *value, f8_diag *diag) {
	f8_diag_set(diag, F8_ERR_ARGUMENT, "--%s: cannot use '%s'", table[id].name, value);
	f8_diag_hint(diag, "--%s takes %s", table[id].name, table[id].takes);
	return F8_ERR_ARGUMENT;
}

/* Adds the module names of `text` (one, or several separated by commas). */
static f8_status add_modules(f8_recompute_options *o, const char *text, f8_diag *diag) {
	for (const char *at = text;;) {
		size_t len = strcspn(at, ",");
		char name[32];
		f8_recompute_module module;
		if (len == 0 || len >= sizeof name)
			return bad_value(MODULES, text, diag);
		memcpy(name, at, len);
		name[len] = '\0';
		if (!f8_recompute_module_from_name(name, &module)) {
			f8_diag_set(diag, F8_ERR_ARGUMENT, "--recompute-modules: there is no module "
				    "'%s'", name);
			f8_diag_hint(diag, "the modules: core_attn layernorm mlp moe moe_act (Megatron-"
				     "LM's mla_up_proj and shared_experts: f8c's models have none)");
			return F8_ERR_ARGUMENT;
		}
		o->modules |= 1u << module;
		if (!at[len])
			return F8_OK;
		at += len + 1;
	}
}

/* Sets option `id` from `text`. */
static f8_status set(f8_tool_recompute_args *args, option_id id, const char *text, f8_diag *diag) {
	f8_recompute_options *o = &args->options;
	int64_t integer;
	double gib;
	switch (id) {
	case GRANULARITY:
		if (strcmp(text, "none") == 0 ||
		    !f8_recompute_granularity_from_name(text, &o->granularity))
			return bad_value(id, text, diag);
		return F8_OK;
	case METHOD:
		return f8_recompute_method_from_name(text, &o->method) ? F8_OK
									: bad_value(id, text, diag);
	case NUM_LAYERS:
		if (!f8_tool_parse_int(text, 1, INT32_MAX, &integer))
			return bad_value(id, text, diag);
		o->num_layers = integer;
		return F8_OK;
	case MODULES:
		return add_modules(o, text, diag);
	case BUDGET:
		if (!f8_tool_parse_double(text, &gib) || !isfinite(gib) || gib <= 0 || gib > 1e9)
			return bad_value(id, text, diag);
		o->budget_bytes = (uint64_t)(gib * 1073741824.0);
		return F8_OK;
	case OPTION_COUNT:
		break;
	}
	return f8_diag_set(diag, F8_ERR_ARGUMENT, "not a recompute option");
}

f8_status f8_tool_recompute_parse_arg(f8_tool_recompute_args *args, int argc, char **argv,
				      int *i, bool *taken, f8_diag *diag) {
	*taken = false;
	if (strncmp(argv[*i], "--", 2) != 0)
		return F8_OK;
	option_id id = find(argv[*i] + 2);
	if (id == OPTION_COUNT)
		return F8_OK;
	*taken = true;
	if (args->on_command_line & BIT(id))
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "--%s is given twice", table[id].name);
	if (*i + 1 >= argc || strncmp(argv[*i + 1], "--", 2) == 0) {
		f8_diag_set(diag, F8_ERR_ARGUMENT, "--%s needs a value", table[id].name);
		f8_diag_hint(diag, "--%s takes %s", table[id].name, table[id].takes);
		return F8_ERR_ARGUMENT;
	}
	args->on_command_line |= BIT(id);
	args->given |= BIT(id);
	f8_status status = set(args, id, argv[++*i], diag);
	// Megatron-LM's --recompute-modules takes the names that follow it (nargs '*').
	while (!status && id == MODULES && *i + 1 < argc && strncmp(argv[*i + 1], "--", 2) != 0 &&
	       f8_recompute_module_from_name(argv[*i + 1], &(f8_recompute_module){0}))
		status = set(args, id, argv[++*i], diag);
	return status;
}

f8_status f8_tool_recompute_set_json(f8_tool_recompute_args *args, const char *name,
				     const json_t *value, const char *path, f8_diag *diag) {
	option_id id = find(name);
	if (id == OPTION_COUNT || (args->on_command_line & BIT(id)))
		return F8_OK; // not ours, or the command line's
	args->given |= BIT(id);
	char text[64];
	if (json_is_string(value))
		return set(args, id, json_string_value(value), diag);
	if (json_is_integer(value) && id != GRANULARITY && id != METHOD && id != MODULES) {
		snprintf(text, sizeof text, "%lld", (long long)json_integer_value(value));
		return set(args, id, text, diag);
	}
	if (json_is_real(value) && id == BUDGET) {
		snprintf(text, sizeof text, "%.17g", json_real_value(value));
		return set(args, id, text, diag);
	}
	if (json_is_array(value) && id == MODULES) {
		size_t index;
		const json_t *item;
		json_array_foreach(value, index, item) {
			if (!json_is_string(item))
				break;
			f8_status status = set(args, id, json_string_value(item), diag);
			if (status)
				return status;
		}
		if (index == json_array_size(value))
			return F8_OK;
	}
	f8_diag_set(diag, F8_ERR_ARGUMENT, "%s: key \"%s\" must be %s", path, name,
		    id == MODULES ? "a string or an array of strings"
				  : id == GRANULARITY || id == METHOD ? "a string" : "a number");
	f8_diag_hint(diag, "--%s takes %s", table[id].name, table[id].takes);
	return F8_ERR_ARGUMENT;
}

f8_status f8_tool_recompute_finish(const f8_tool_recompute_args *args, f8_diag *diag) {
	return f8_recompute_options_check(&args->options, diag);
}

void f8_tool_recompute_print_help(FILE *out) {
	fprintf(out, "recompute options (Megatron-LM's):\n");
	for (int id = 0; id < OPTION_COUNT; id++) {
		char head[64];
		snprintf(head, sizeof head, "--%s %s", table[id].name, table[id].takes);
		fprintf(out, "  %-38s %s\n", head, table[id].help);
	}
}
