/*
 * The parallel options of the f8c command (tools/parallel_options.h).
 */
#include "tools/parallel_options.h" // f8_tool_parallel_args

#include <string.h> // strcmp, strlen, strncmp

#include "tools/tool_options.h" // f8_tool_parse_int, f8_tool_option_named

typedef enum option_id {
	TENSOR, PIPELINE, CONTEXT, EXPERT, VIRTUAL, SEQUENCE, DISTRIBUTED_OPTIMIZER, WORLD, STAGE,
	OPTION_COUNT
} option_id;

typedef struct option {
	const char *name;  // without the leading "--"
	const char *takes; // its value, NULL for a flag
	const char *help;
} option;

static const option table[OPTION_COUNT] = {
	[TENSOR] = {"tensor-model-parallel-size", "N", "ranks a layer's GEMMs are split over (1)"},
	[PIPELINE] = {"pipeline-model-parallel-size", "N", "pipeline stages (1)"},
	[CONTEXT] = {"context-parallel-size", "N", "ranks the sequence is split over (1)"},
	[EXPERT] = {"expert-model-parallel-size", "N",
		    "ranks the experts are split over, taken from data parallelism (1)"},
	[VIRTUAL] = {"num-layers-per-virtual-pipeline-stage", "N",
		     "layers of a virtual stage: the interleaved pipeline schedule"},
	[SEQUENCE] = {"sequence-parallel", NULL,
		      "norms, dropout and residuals split along the sequence over TP"},
	[DISTRIBUTED_OPTIMIZER] = {"use-distributed-optimizer", NULL,
				   "optimizer state sharded over data parallelism (ZeRO-1)"},
	[WORLD] = {"world-size", "N",
		   "ranks in all (f8c's: compile and audit plan for a cluster without one; a "
		   "launched run takes its launcher's); data parallelism is what is left: world / "
		   "(TP x CP x PP)"},
	[STAGE] = {"pipeline-stage", "N",
		   "the pipeline stage whose program compile, dump-ir and audit plan (f8c's; 0); a "
		   "launched run takes its rank's"},
};

#define BIT(id) (UINT32_C(1) << (id))

static option_id find(const char *name) {
	for (int id = 0; id < OPTION_COUNT; id++)
		if (f8_tool_option_named(table[id].name, name))
			return (option_id)id;
	return OPTION_COUNT;
}

bool f8_tool_parallel_is_option(const char *name) {
	return find(name) != OPTION_COUNT;
}

bool f8_tool_parallel_world_given(const f8_tool_parallel_args *args) {
	return args->given & BIT(WORLD);
}

bool f8_tool_parallel_stage_given(const f8_tool_parallel_args *args) {
	return args->given & BIT(STAGE);
}

/* The field of a sized option. */
static int64_t *size_of(f8_parallel_options *o, option_id id) {
	switch (id) {
	case TENSOR: return &o->tensor;
	case PIPELINE: return &o->pipeline;
	case CONTEXT: return &o->context;
	case EXPERT: return &o->expert;
	case VIRTUAL: return &o->virtual_stage_layers;
	case WORLD: return &o->world;
	case STAGE: return &o->stage;
	default: return NULL;
	}
}

static f8_status set(f8_tool_parallel_args *args, option_id id, const char *text, bool flag,
		     f8_diag *diag) {
	f8_parallel_options *o = &args->options;
	if (id == SEQUENCE || id == DISTRIBUTED_OPTIMIZER) {
		*(id == SEQUENCE ? &o->sequence_parallel : &o->distributed_optimizer) = flag;
		return F8_OK;
	}
	if (!f8_tool_parse_int(text, id == STAGE ? 0 : 1, 1 << 20, size_of(o, id))) {
		f8_diag_set(diag, F8_ERR_ARGUMENT, "--%s: cannot use '%s'", table[id].name, text);
		f8_diag_hint(diag, "--%s takes a %s integer", table[id].name,
			     id == STAGE ? "non-negative" : "positive");
		return F8_ERR_ARGUMENT;
	}
	return F8_OK;
}

f8_status f8_tool_parallel_parse_arg(f8_tool_parallel_args *args, int argc, char **argv, int *i,
				     bool *taken, f8_diag *diag) {
	*taken = false;
	if (strncmp(argv[*i], "--", 2) != 0)
		return F8_OK;
	option_id id = find(argv[*i] + 2);
	if (id == OPTION_COUNT)
		return F8_OK;
	*taken = true;
	if (args->on_command_line & BIT(id))
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "--%s is given twice", table[id].name);
	args->on_command_line |= BIT(id);
	args->given |= BIT(id);
	if (!table[id].takes)
		return set(args, id, NULL, true, diag);
	if (*i + 1 >= argc || strncmp(argv[*i + 1], "--", 2) == 0) {
		f8_diag_set(diag, F8_ERR_ARGUMENT, "--%s needs a value", table[id].name);
		f8_diag_hint(diag, "--%s takes %s", table[id].name, table[id].takes);
		return F8_ERR_ARGUMENT;
	}
	return set(args, id, argv[++*i], false, diag);
}

f8_status f8_tool_parallel_set_json(f8_tool_parallel_args *args, const char *name,
				    const json_t *value, const char *path, f8_diag *diag) {
	option_id id = find(name);
	if (id == OPTION_COUNT || (args->on_command_line & BIT(id)))
		return F8_OK;
	args->given |= BIT(id);
	if (!table[id].takes && json_is_boolean(value))
		return set(args, id, NULL, json_is_true(value), diag);
	if (table[id].takes && json_is_integer(value)) {
		char text[32];
		snprintf(text, sizeof text, "%lld", (long long)json_integer_value(value));
		return set(args, id, text, false, diag);
	}
	return f8_diag_set(diag, F8_ERR_ARGUMENT, "%s: key \"%s\" must be %s", path, name,
			   table[id].takes ? "an integer" : "true or false");
}

void f8_tool_parallel_print_help(FILE *out) {
	fprintf(out, "parallel options (Megatron-LM's; the ranks come from the launcher: mpirun, "
		     "torchrun or srun):\n");
	for (int id = 0; id < OPTION_COUNT; id++) {
		char head[64];
		snprintf(head, sizeof head, "--%s%s%s", table[id].name, table[id].takes ? " " : "",
			 table[id].takes ? table[id].takes : "");
		fprintf(out, "  %-44s %s\n", head, table[id].help);
	}
}
