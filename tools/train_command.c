/*
 * f8c train: trains a model on a token file on the CPU reference backend or a GPU (--device
 * cuda), with Megatron-LM's option names, a progress display, a JSONL metrics file and checkpoints; in FP8 with
 * --fp8-format and the other FP8 options (tools/fp8_options.h). Its command line parser is
 * f8c calibrate's too (f8_tool_train_args_parse, tools/commands.h).
 */
#define _POSIX_C_SOURCE 200809L // isatty, fileno

#include <errno.h>   // errno, EEXIST, ENOENT
#include <jansson.h> // json_load_file, json_object_foreach
#include <math.h>    // isnan
#include <stddef.h>  // offsetof
#include <stdio.h>   // fprintf
#include <string.h>  // strcmp, strncmp, strchr, strerror
#include <sys/stat.h> // mkdir, stat, S_ISDIR
#include <unistd.h>  // isatty

#include "ir/alloc.h"           // f8_calloc, f8_free
#include "runtime/atomic_file.h" // f8_atomic_file_open, f8_atomic_file_abort
#include "runtime/cpu/backend.h" // f8_cpu_backend_create
#ifdef F8C_CUDA
#include "runtime/cuda/backend.h" // f8_cuda_backend_create
#endif
#include "runtime/plan.h"       // f8_plan_is_dir, f8_plan_load
#include "runtime/train.h"      // f8_train_config, f8_train_run
#include "tools/compile.h"      // f8_tool_compile_training
#include "tools/commands.h"     // f8_tool_train, f8_tool_train_args
#include "tools/fp8_options.h"  // f8_tool_fp8_args
#include "tools/parallel_options.h"  // f8_tool_parallel_args
#include "tools/recompute_options.h" // f8_tool_recompute_args
#include "tools/tool_options.h" // f8_tool_parse_*

/* X(kind): what an option takes. */
typedef enum option_kind {
	INT, NUMBER, TEXT, DECAY, FORMAT, KERNELS, DEVICE, SPLIT, DIM, CONFIG
} option_kind;

/* Whether a plan fixes an option: those that shape the compiled graph (tools/compile_command.c
 * records them, and f8c train PLAN_DIR refuses them), or those of one run (which data, how long,
 * what to log and save, which kernels). */
typedef enum option_scope { COMPILED, RUN } option_scope;

typedef struct option {
	const char *name; // without the leading "--"
	option_kind kind;
	size_t offset;    // of the field in f8_train_config
	int64_t min;      // INT: the least value
	const char *help;
	option_scope scope;
} option;

/* An option's field: in the run's f8_train_config, or (COMPILE_FIELD set) in the compile
 * options' optimizer (tools/compile.h). */
#define COMPILE_FIELD ((size_t)1 << 30)
#define FIELD(f) offsetof(f8_train_config, f)
#define OPTIM(f) (COMPILE_FIELD | (offsetof(f8_tool_compile_options, optimizer) + \
				   offsetof(f8_training_options, f)))

static const option options[] = {
	{"data", TEXT, FIELD(data), 0, "token file (llm.c format, or raw with --data-format)", RUN},
	{"data-format", FORMAT, FIELD(data_format), 0, "auto, llmc, uint16 or uint32", RUN},
	{"split", SPLIT, FIELD(split), 0, "train,valid[,test] weights (969,30,1)", RUN},
	{"micro-batch-size", INT, FIELD(micro_batch_size), 1, "sequences per micro-batch", COMPILED},
	{"global-batch-size", INT, FIELD(global_batch_size), 1, "sequences per iteration", COMPILED},
	{"seq-length", INT, FIELD(seq_length), 1, "tokens per sequence", COMPILED},
	{"train-iters", INT, FIELD(train_iters), 1, "the iteration to stop after", RUN},
	{"lr", NUMBER, OPTIM(lr), 0, "peak learning rate", COMPILED},
	{"min-lr", NUMBER, OPTIM(min_lr), 0, "learning rate at the end of decay", COMPILED},
	{"lr-warmup-iters", INT, OPTIM(warmup_iters), 0, "linear warm-up iterations", COMPILED},
	{"lr-decay-iters", INT, OPTIM(decay_iters), 0, "decay until (default: --train-iters)", COMPILED},
	{"lr-decay-style", DECAY, OPTIM(decay_style), 0, "constant, linear or cosine", COMPILED},
	{"clip-grad", NUMBER, OPTIM(clip_grad), 0, "largest global gradient norm (0: none)", COMPILED},
	{"weight-decay", NUMBER, OPTIM(weight_decay), 0, "AdamW's decoupled weight decay", COMPILED},
	{"adam-beta1", NUMBER, OPTIM(beta1), 0, "", COMPILED},
	{"adam-beta2", NUMBER, OPTIM(beta2), 0, "", COMPILED},
	{"adam-eps", NUMBER, OPTIM(epsilon), 0, "", COMPILED},
	{"seed", INT, FIELD(seed), 0, "weights and data order", RUN},
	{"eval-interval", INT, FIELD(eval_interval), 0, "evaluate every N iterations", RUN},
	{"eval-iters", INT, FIELD(eval_iters), 0, "batches per evaluation", RUN},
	{"log-interval", INT, FIELD(log_interval), 1, "report every N iterations", RUN},
	{"max-nonfinite-skips", INT, FIELD(max_nonfinite_skips), 0,
	 "iterations in a row skipped for a NaN or inf loss, gradient norm or FP8 amax before the "
	 "run stops (10; 0: the first stops it, as Megatron-LM's --check-for-nan-in-loss-and-grad)",
	 RUN},
	{"distributed-timeout-minutes", NUMBER, FIELD(distributed_timeout_minutes), 0,
	 "a collective that waits longer for the other ranks (one died or hangs) stops the run, "
	 "naming the call and the group (10; 0: never)", RUN},
	{"check-weight-hash-across-dp-replicas-interval", INT, FIELD(check_replicas_interval), 0,
	 "every N iterations, hold the data-parallel replicas' parameters, optimizer and FP8 "
	 "state to the same bits (0: never)", RUN},
	{"save", TEXT, FIELD(save), 0, "checkpoint folder", RUN},
	{"save-interval", INT, FIELD(save_interval), 0, "save every N iterations", RUN},
	{"load", TEXT, FIELD(load), 0, "resume from this checkpoint folder", RUN},
	{"metrics", TEXT, FIELD(metrics), 0, "JSONL metrics file", RUN},
	{"log-fp8-stats", INT, FIELD(log_fp8_stats), 0,
	 "every N iterations, each FP8 scaling slot's newest amax and its scale into the metrics "
	 "file (delayed scaling; f8c report draws them)", RUN},
	{"kernels", KERNELS, 0, 0,
	 "generated (the fused groups' kernels, default) or reference (node by node)", RUN},
	{"device", DEVICE, 0, 0, "cpu (the reference backend, default) or cuda (GPU 0)", RUN},
	{"dim", DIM, 0, 0, "NAME=N: a size the model needs besides batch and seq", COMPILED},
	{"make-vocab-size-divisible-by", INT,
	 COMPILE_FIELD | offsetof(f8_tool_compile_options, vocab_multiple), 1,
	 "pad a JSON model's vocabulary to a multiple of N (128; 1: none)", COMPILED},
	{"config", CONFIG, 0, 0, "a JSON file with any of these options as keys", COMPILED},
};

enum { MAX_DIMS = 32 };

struct f8_tool_train_args {
	const f8_tool_train_command *command;
	f8_train_config config;
	f8_tool_compile_options compile; // what shapes the graph: the model, --dim, --lr ..., FP8
	f8_dim_binding dims[MAX_DIMS];
	bool given[sizeof options / sizeof options[0]]; // on the command line
	f8_tool_fp8_args fp8;
	f8_tool_recompute_args recompute; // --recompute-*, --memory-budget
	f8_tool_parallel_args parallel;   // --tensor-model-parallel-size ..., --world-size
	f8_dist_launch launch;   // where the launcher put this process
	f8_dist *dist;           // the run's ranks, made by f8_tool_train_args_ready
	json_t *config_document; // --config's, whose strings the config points into
	f8_cpu_kernels kernels;  // --kernels
	bool cuda;               // --device cuda
	bool deterministic;      // --deterministic
	bool no_cuda_graph;      // --no-cuda-graph
	const char *profile;     // --profile FILE: the GPU step's time breakdown, or NULL
	bool verbose;            // --verbose: the memory the run used, at its end
	f8_backend *backend;     // made by f8_tool_train_args_ready
	f8_graph *compiled;      // MODEL's step, compiled by f8_tool_train_args_ready
	f8_plan *plan;           // MODEL was a plan folder: its graph, and the options it fixes
};

typedef struct f8_tool_train_args request;

/* Prints the usage with `problem` (NULL: none) to stderr; returns the usage exit status. */
static int usage(const request *r, const char *problem) {
	const f8_tool_train_command *c = r->command;
	if (problem)
		fprintf(stderr, "f8c %s: %s\n", c->name, problem);
	fprintf(stderr, "usage: f8c %s %s\n", c->name, c->usage);
	if (c->own_options)
		fputs(c->own_options, stderr);
	for (size_t i = 0; i < sizeof options / sizeof options[0]; i++)
		fprintf(stderr, "  --%-18s %s\n", options[i].name, options[i].help);
	fprintf(stderr, "  --%-18s %s\n", "verbose", "at the end, the memory the run used (the "
		"plan's slab, the leaves) and the backend's peak");
	fprintf(stderr, "  --%-18s %s\n", "deterministic", "on the GPU, deterministic kernels "
		"only (cuDNN's deterministic attention backward): a resumed run is bit-exact");
	fprintf(stderr, "  --%-18s %s\n", "no-cuda-graph", "on the GPU, every launch as it comes "
		"(by default each kind of run is captured once into a CUDA graph and replayed)");
	fprintf(stderr, "  --%-18s %s\n", "profile FILE", "on the GPU, time every launch and "
		"write where a step's time goes (GEMMs, attention, kernel families, idle) as JSON");
	f8_tool_fp8_print_help(stderr, false);
	f8_tool_recompute_print_help(stderr);
	f8_tool_parallel_print_help(stderr);
	fprintf(stderr, "HINT: the options are Megatron-LM's; 'f8c tokenize TEXT -o TOKENS.bin' "
			"makes a token file from any text\n");
	return 2;
}

/* Prints a diagnostic about the options; returns the exit status it calls for. */
static int options_error(const f8_diag *diag) {
	f8_diag_print(diag, stderr);
	return diag->status == F8_ERR_ARGUMENT ? 2 : 1;
}

static const option *find_option(const char *name) {
	for (size_t i = 0; i < sizeof options / sizeof options[0]; i++)
		if (strcmp(options[i].name, name) == 0)
			return &options[i];
	return NULL;
}

/* Parses "969,30,1": 2 or 3 non-negative numbers, all of the text; false otherwise. */
static bool parse_split(const char *text, double *weights, int *n_weights) {
	int n = 0;
	for (const char *c = text;; n++) {
		char number[64];
		size_t len = strcspn(c, ",");
		if (n == 3 || len == 0 || len >= sizeof number)
			return false;
		memcpy(number, c, len);
		number[len] = '\0';
		if (!f8_tool_parse_double(number, &weights[n]) || weights[n] < 0)
			return false;
		if (!c[len])
			break;
		c += len + 1;
	}
	*n_weights = n + 1;
	return *n_weights >= 2;
}

/* Sets option `o` from `text`; false (with a message on stderr) when it does not parse. */
static bool set_option(request *r, const option *o, const char *text, char *mutable_text) {
	char *field = o->offset & COMPILE_FIELD
			      ? (char *)&r->compile + (o->offset & ~COMPILE_FIELD)
			      : (char *)&r->config + o->offset;
	int64_t integer;
	switch (o->kind) {
	case INT:
		if (!f8_tool_parse_int(text, o->min, INT64_MAX, &integer))
			break;
		if (o->offset == FIELD(seed))
			*(uint64_t *)field = (uint64_t)integer;
		else
			*(int64_t *)field = integer;
		return true;
	case NUMBER:
		if (!f8_tool_parse_double(text, (double *)field) || *(double *)field < 0)
			break;
		return true;
	case TEXT:
		*(const char **)field = text;
		return true;
	case DECAY:
		if (!f8_lr_decay_from_name(text, (f8_lr_decay *)field))
			break;
		return true;
	case FORMAT:
		if (!f8_token_format_from_name(text, (f8_token_format *)field))
			break;
		return true;
	case KERNELS: // not the run's but its backend's: f8_tool_train_args_backend
		if (strcmp(text, "generated") != 0 && strcmp(text, "reference") != 0)
			break;
		r->kernels = strcmp(text, "reference") == 0 ? F8_CPU_KERNELS_REFERENCE
							    : F8_CPU_KERNELS_GENERATED;
		return true;
	case DEVICE: // the backend's, like --kernels
		if (strcmp(text, "cpu") != 0 && strcmp(text, "cuda") != 0)
			break;
		r->cuda = strcmp(text, "cuda") == 0;
		return true;
	case SPLIT:
		if (parse_split(text, r->config.split, &r->config.n_split))
			return true;
		break;
	case DIM:
		if (!mutable_text || r->compile.n_dims == MAX_DIMS ||
		    !f8_tool_parse_dim_binding(mutable_text, &r->dims[r->compile.n_dims]))
			break;
		r->compile.n_dims++;
		return true;
	case CONFIG:
		break;
	}
	fprintf(stderr, "f8c %s: --%s: cannot use '%s'\n", r->command->name, o->name, text);
	return false;
}

/* Reads --config FILE: each key an option name (with '-' or '_'), each value a number or a
 * string; options given on the command line win. Returns 0 or an exit status. */
static int read_config(request *r, const char *path) {
	json_error_t error;
	json_t **document = &r->config_document;
	*document = json_load_file(path, JSON_REJECT_DUPLICATES, &error);
	if (!*document) {
		fprintf(stderr, "%s:%d:%d: error: %s\n", path, error.line, error.column, error.text);
		return 1;
	}
	if (!json_is_object(*document)) {
		fprintf(stderr, "%s: error: the configuration must be a JSON object\n", path);
		return 1;
	}
	const char *key;
	json_t *value;
	json_object_foreach(*document, key, value) {
		char name[64];
		snprintf(name, sizeof name, "%s", key);
		for (char *c = name; *c; c++)
			*c = *c == '_' ? '-' : *c;
		if (f8_tool_fp8_is_option(name) || f8_tool_recompute_is_option(name) ||
		    f8_tool_parallel_is_option(name)) {
			f8_diag diag;
			f8_diag_clear(&diag);
			f8_status status =
				f8_tool_fp8_is_option(name)
					? f8_tool_fp8_set_json(&r->fp8, name, value, path, &diag)
				: f8_tool_recompute_is_option(name)
					? f8_tool_recompute_set_json(&r->recompute, name, value, path,
								     &diag)
					: f8_tool_parallel_set_json(&r->parallel, name, value, path,
								    &diag);
			if (status)
				return options_error(&diag);
			continue;
		}
		const option *o = find_option(name);
		if (!o || o->kind == CONFIG || o->kind == DIM) {
			fprintf(stderr, "%s: error: unknown key \"%s\"\nHINT: the keys are f8c train's "
					"options without the dashes\n", path, key);
			return 1;
		}
		if (r->given[o - options])
			continue;
		char text[64];
		const char *as_text = text;
		if (json_is_integer(value))
			snprintf(text, sizeof text, "%lld", (long long)json_integer_value(value));
		else if (json_is_real(value))
			snprintf(text, sizeof text, "%.17g", json_real_value(value));
		else if (json_is_string(value))
			as_text = json_string_value(value);
		else {
			fprintf(stderr, "%s: error: key \"%s\" must be a number or a string\n", path,
				key);
			return 1;
		}
		if (!set_option(r, o, as_text, NULL))
			return 1;
	}
	return 0;
}

static void defaults(request *r) {
	// The generated kernels where this build has them (with LLVM), else the reference ones.
	r->kernels = f8_cpu_backend_has_generated() ? F8_CPU_KERNELS_GENERATED
						    : F8_CPU_KERNELS_REFERENCE;
	r->config = (f8_train_config){
		.data_format = F8_TOKEN_FORMAT_AUTO, .split = {969, 30, 1}, .n_split = 3,
		.micro_batch_size = 8, .global_batch_size = 0, .seq_length = 0, .seed = 1234,
		.log_interval = 10, .max_nonfinite_skips = 10, .distributed_timeout_minutes = 10};
	r->compile = (f8_tool_compile_options){.optimizer = f8_training_options_default(),
					       .dims = r->dims};
}

/* Takes argv[*i] when it is an FP8 or a recompute option; 0, or the exit status of its error. */
static int parse_shared(request *r, int argc, char **argv, int *i, bool *taken) {
	f8_diag diag;
	f8_diag_clear(&diag);
	if (f8_tool_fp8_parse_arg(&r->fp8, argc, argv, i, taken, &diag))
		return options_error(&diag);
	if (!*taken && f8_tool_recompute_parse_arg(&r->recompute, argc, argv, i, taken, &diag))
		return options_error(&diag);
	if (!*taken && f8_tool_parallel_parse_arg(&r->parallel, argc, argv, i, taken, &diag))
		return options_error(&diag);
	return 0;
}

/* Parses argv[from ..) into r, the model and --config's path into *config_path; 0, 3 for
 * --help, or the exit status of an error. */
static int parse_args(int argc, char **argv, int from, request *r, const char **config_path) {
	for (int i = from; i < argc; i++) {
		if (strncmp(argv[i], "--", 2) != 0) {
			if (r->config.model)
				return usage(r, "give one model file");
			r->config.model = r->compile.model = argv[i];
			continue;
		}
		if (strcmp(argv[i], "--help") == 0)
			return usage(r, NULL), 3;
		if (strcmp(argv[i], "--verbose") == 0) {
			r->verbose = true;
			continue;
		}
		if (strcmp(argv[i], "--deterministic") == 0) {
			r->deterministic = true;
			continue;
		}
		if (strcmp(argv[i], "--no-cuda-graph") == 0) {
			r->no_cuda_graph = true;
			continue;
		}
		if (strcmp(argv[i], "--profile") == 0) {
			if (i + 1 == argc)
				return fprintf(stderr, "f8c %s: --profile needs a file\n",
					       r->command->name), 2;
			r->profile = argv[++i];
			continue;
		}
		bool taken;
		int code = parse_shared(r, argc, argv, &i, &taken);
		if (code)
			return code;
		if (taken)
			continue;
		const option *o = find_option(argv[i] + 2);
		if (!o) {
			fprintf(stderr, "f8c %s: unknown option '%s'\n", r->command->name, argv[i]);
			return usage(r, "see the options below");
		}
		if (i + 1 == argc)
			return fprintf(stderr, "f8c %s: %s needs a value\n", r->command->name, argv[i]), 2;
		if (r->given[o - options] && o->kind != DIM)
			return fprintf(stderr, "f8c %s: %s is given twice\n", r->command->name, argv[i]),
			       2;
		r->given[o - options] = true;
		if (o->kind == CONFIG)
			*config_path = argv[++i];
		else if (!set_option(r, o, argv[i + 1], argv[i + 1]))
			return 2;
		else
			i++;
	}
	return 0;
}

/*
 * MODEL is a plan folder: loads it (every check of runtime/plan.h), refuses the options it
 * fixes when the command line gives them, and takes them from the plan. 0 or an exit status.
 */
static int use_plan(request *r, const char *config_path) {
	f8_diag diag;
	f8_diag_clear(&diag);
	const char *folder = r->config.model;
	if (f8_plan_load(folder, F8C_VERSION, &r->plan, &diag))
		return options_error(&diag);
	if (!r->plan->training)
		return fprintf(stderr, "f8c %s: %s is an inference plan\nHINT: compile the training "
			       "step: f8c compile MODEL -o DIR\n", r->command->name, folder), 2;
	for (size_t i = 0; i < sizeof options / sizeof options[0]; i++)
		if (r->given[i] && options[i].scope == COMPILED)
			return fprintf(stderr, "f8c %s: --%s is compiled into the plan %s\nHINT: compile "
				       "the model again with it (f8c compile %s ... -o DIR)\n",
				       r->command->name, options[i].name, folder, r->plan->model), 2;
	if (r->fp8.given || r->recompute.given || r->parallel.given || config_path)
		return fprintf(stderr, "f8c %s: %s compiled into the plan %s\nHINT: compile the "
			       "model again with them\n", r->command->name,
			       config_path	    ? "--config's options are"
			       : r->recompute.given ? "the recompute options are"
			       : r->parallel.given  ? "the parallel options are"
						    : "the FP8 options and --bf16 are", folder),
		       2;
	const char *none = NULL;
	// The plan's own copies of its arguments, which the parser may split in place (--dim).
	int code = parse_args((int)r->plan->n_compile_args, (char **)r->plan->compile_args, 0, r,
			      &none);
	r->config.graph = r->plan->graph;
	r->config.weights = r->plan->weights;
	r->config.weight_init = r->plan->weight_init; // the plan's seed, not --seed, makes them
	return code;
}

/* Parses the command line into r; 0, 3 for --help, or the exit status of an error. */
static int parse(int argc, char **argv, request *r) {
	const char *config_path = NULL;
	defaults(r);
	int code = parse_args(argc, argv, 1, r, &config_path);
	if (code)
		return code;
	if (!r->config.model)
		return usage(r, "no model file given");
	if (f8_plan_is_dir(r->config.model) && (code = use_plan(r, config_path)))
		return code;
	if (config_path && (code = read_config(r, config_path)))
		return code;
	if (!r->config.data && r->command->needs_data)
		return usage(r, "no --data given");
	if (!r->config.global_batch_size)
		r->config.global_batch_size = r->config.micro_batch_size;
	if (!r->config.train_iters && r->command->needs_train_iters)
		return usage(r, "no --train-iters given");
	if (!r->config.seq_length && r->command->needs_seq_length)
		return usage(r, "no --seq-length given");
	f8_diag diag;
	f8_diag_clear(&diag);
	if (f8_tool_fp8_finish(&r->fp8, &diag))
		return options_error(&diag);
	if (f8_tool_recompute_finish(&r->recompute, &diag) ||
	    f8_dist_launch_from_environment(&r->launch, &diag))
		return options_error(&diag);
	f8_parallel_options *parallel = &r->parallel.options;
	if (f8_tool_parallel_world_given(&r->parallel) && r->launch.world > 1 &&
	    parallel->world != r->launch.world)
		return fprintf(stderr, "f8c %s: --world-size %lld, but %s started %lld ranks\n",
			       r->command->name, (long long)parallel->world, r->launch.launcher,
			       (long long)r->launch.world), 2;
	if (!f8_tool_parallel_world_given(&r->parallel))
		parallel->world = r->launch.world;
	uint32_t mesh[F8_MESH_AXIS_COUNT], at[F8_MESH_AXIS_COUNT];
	if (r->plan && parallel->pipeline > 1) // one stage's program, which every rank would run
		return fprintf(stderr, "f8c %s: a plan is one pipeline stage's program, and under "
			       "--pipeline-model-parallel-size every stage runs its own\nHINT: train "
			       "the model: each rank compiles its stage's step\n", r->command->name),
		       2;
	if (r->launch.world > 1) { // the launcher's rank runs its pipeline stage's program
		if (f8_parallel_mesh(parallel, mesh, &diag))
			return options_error(&diag);
		f8_mesh_coordinates(mesh, (uint64_t)r->launch.rank, at);
		parallel->stage = at[F8_MESH_AXIS_PP];
	}
	parallel->micro_batch = r->config.micro_batch_size;
	parallel->global_batch = r->config.global_batch_size;
	r->compile.fp8 = f8_tool_fp8_options(&r->fp8);
	r->compile.bf16 = r->fp8.bf16;
	r->compile.recompute = &r->recompute.options;
	r->compile.parallel = parallel;
	f8_training_options optimizer = f8_tool_optimizer(&r->compile, &r->config);
	r->config.schedule = f8_tool_schedule(&optimizer);
	return 0;
}

int f8_tool_train_args_parse(const f8_tool_train_command *command, int argc, char **argv,
			     f8_tool_train_args **out) {
	*out = NULL;
	request *r = f8_calloc(1, sizeof *r);
	f8_diag diag;
	f8_diag_clear(&diag);
	if (!r || f8_tool_fp8_init(&r->fp8, command->name, false, &diag)) {
		f8_free(r);
		return fprintf(stderr, "f8c %s: out of memory\n", command->name), 1;
	}
	r->command = command;
	int code = parse(argc, argv, r);
	if (code) {
		f8_tool_train_args_destroy(r);
		return code;
	}
	*out = r;
	return 0;
}

f8_train_config *f8_tool_train_args_config(f8_tool_train_args *args) {
	return &args->config;
}

f8_tool_compile_options *f8_tool_train_args_compile(f8_tool_train_args *args) {
	return &args->compile;
}

const f8_tool_fp8_args *f8_tool_train_args_fp8(const f8_tool_train_args *args) {
	return &args->fp8;
}

/* The CPU backend of this rank, keeping its compiled kernels in the user's cache folder
 * (f8_tool_kernel_cache). */
static f8_status cpu_backend(f8_tool_train_args *args, f8_diag *diag) {
	f8_status status = f8_cpu_backend_create_distributed(args->kernels, args->dist,
							     &args->backend, diag);
	char folder[4096];
	if (!status)
		status = f8_cpu_backend_cache_kernels(
			args->backend, f8_tool_kernel_cache(folder, sizeof folder), diag);
	return status;
}

/* The CUDA backend for the run's plan: the plan folder's, or MODEL's step compiled into a
 * plan here (its kernels as PTX: the GPU runs a plan, never a graph alone). */
static f8_status cuda_backend(f8_tool_train_args *args, f8_diag *diag) {
#ifdef F8C_CUDA
	f8_status status = F8_OK;
	if (!args->plan) {
		// Never written: a record of its arguments would be for a plan folder.
		status = f8_tool_plan_make(args->compiled, true, true, args->compile.model, NULL, 0,
					   &args->plan, diag);
		args->compiled = NULL; // the plan's now, on failure too
		if (status)
			return status;
		args->config.graph = args->plan->graph;
	}
	// One GPU per process, by its local rank; several processes' collectives through NCCL.
	f8_cuda_options cuda = {.deterministic = args->deterministic,
				.cuda_graphs = !args->no_cuda_graph, .profile = args->profile != NULL,
				.dist = args->dist, .device = (int)args->launch.local_rank};
	return f8_cuda_backend_create(args->plan, &cuda, &args->backend, diag);
#else
	(void)args;
	f8_status status = f8_diag_set(diag, F8_ERR_UNSUPPORTED, "this f8c was built without the "
				       "CUDA Toolkit: it has no CUDA backend");
	f8_diag_hint(diag, "build f8c where the CUDA Toolkit's headers are (tools/install-deps.sh)");
	return status;
#endif
}

f8_status f8_tool_train_args_ready(f8_tool_train_args *args, f8_diag *diag) {
	f8_status status = F8_OK;
	// Before compiling anything: every rank of such a run would only stop at its first
	// collective (runtime/distributed.h).
	if (args->launch.store && !args->cuda) {
		f8_diag_set(diag, F8_ERR_UNSUPPORTED, "%s started %lld ranks without MPI, and the CPU "
			    "backend's collectives need MPI", args->launch.launcher,
			    (long long)args->launch.world);
		f8_diag_hint(diag, "launch with mpirun or srun --mpi, or use --device cuda");
		return F8_ERR_UNSUPPORTED;
	}
	// The schedule as the options are now (f8c calibrate changes some after parsing).
	f8_training_options optimizer = f8_tool_optimizer(&args->compile, &args->config);
	args->config.schedule = f8_tool_schedule(&optimizer);
	if (!args->config.graph && !(status = f8_train_check_config(&args->config, diag))) {
		status = f8_tool_compile_training(&args->compile, &args->config, &args->compiled,
						  diag);
		if (!status)
			f8_tool_fp8_warn_none(&args->fp8, args->compiled, args->command->name,
					      stderr);
		char padding[200];
		if (!status && f8_tool_vocab_padding(args->compile.model,
						     args->compile.vocab_multiple, padding,
						     sizeof padding))
			fprintf(stderr, "f8c %s: %s\n", args->command->name, padding);
	}
	if (!status && !args->config.graph)
		args->config.graph = args->compiled;
	// The ranks of the step's mesh, from the launcher; their joining held to the run's timeout.
	args->launch.timeout = args->config.distributed_timeout_minutes * 60;
	if (!status && !args->dist)
		status = f8_dist_create(&args->launch, args->config.graph->mesh, &args->dist, diag);
	if (!status && !args->backend)
		status = args->cuda ? cuda_backend(args, diag) : cpu_backend(args, diag);
	args->config.backend = args->backend;
	args->config.dist = args->dist;
	return status;
}

void f8_tool_train_args_destroy(f8_tool_train_args *args) {
	if (!args)
		return;
	f8_tool_fp8_destroy(&args->fp8);
	json_decref(args->config_document);
	f8_backend_destroy(args->backend);
	f8_graph_destroy(args->compiled);
	f8_plan_destroy(args->plan);
	f8_dist_destroy(args->dist); // after the backend, whose collectives it served
	f8_free(args);
}

/* The console: a bar redrawn in place on a terminal, plain lines otherwise. */
/* What the console shows. */
typedef struct console {
	bool terminal; // a bar redrawn in place
	bool verbose;  // --verbose
	bool cuda;     // --device cuda
} console;

/* The memory line of --verbose: the executor's buffers against the backend's peak. */
static void show_memory(const f8_train_progress *p, bool cuda) {
	const f8_executor_memory *m = &p->memory;
	uint64_t sum = m->slab_bytes + m->leaf_bytes + m->other_bytes;
	if (m->planned && m->contexts > 1) // pipeline parallelism's micro-batches in flight
		fprintf(stderr, "memory: the plan's %u slabs (micro-batches in flight) %llu B + "
			"leaves %llu B", m->contexts, (unsigned long long)m->slab_bytes,
			(unsigned long long)m->leaf_bytes);
	else
		fprintf(stderr, "memory: %s %llu B + leaves %llu B",
			m->planned ? "the plan's slab" : "no slab plan, values",
			(unsigned long long)(m->planned ? m->slab_bytes
							: p->peak_bytes - m->leaf_bytes -
								  m->other_bytes),
			(unsigned long long)m->leaf_bytes);
	if (m->other_bytes)
		fprintf(stderr, " + frozen scaling state %llu B", (unsigned long long)m->other_bytes);
	fprintf(stderr, " = %llu B; the backend's peak %llu B%s\n",
		(unsigned long long)(m->planned ? sum : p->peak_bytes),
		(unsigned long long)p->peak_bytes,
		!m->planned || p->peak_bytes <= sum ? ""
		: cuda ? " (more: the CUDA backend's own, cuBLASLt's 32 MiB workspace and the "
			 "GEMMs' and cuDNN's scratch)"
		       : " (more: the reference kernels' fused groups keep their inner values in "
			 "buffers of their own)");
}

static void show(const f8_train_progress *p, void *user) {
	const console *c = user;
	bool terminal = c->terminal;
	switch (p->event) {
	case F8_TRAIN_EVENT_START:
		fprintf(stderr, "f8c train: %lld parameters, from iteration %lld to %lld\n",
			(long long)p->parameters, (long long)p->iteration, (long long)p->train_iters);
		break;
	case F8_TRAIN_EVENT_STEP:
		if (terminal) {
			enum { WIDTH = 30 };
			int filled = (int)(WIDTH * p->iteration / p->train_iters);
			fprintf(stderr, "\r[%.*s%*s] %lld/%lld loss %.4f lr %.3g norm %.3f %.0f tok/s  ",
				filled, "##############################", WIDTH - filled, "",
				(long long)p->iteration, (long long)p->train_iters, p->loss, p->lr,
				p->grad_norm, p->tokens_per_second);
		} else {
			fprintf(stderr, "iteration %lld/%lld: loss %.4f, lr %.4g, grad norm %.4f, "
				"%.0f tokens/s, %.1f s\n", (long long)p->iteration,
				(long long)p->train_iters, p->loss, p->lr, p->grad_norm,
				p->tokens_per_second, p->elapsed_seconds);
		}
		break;
	case F8_TRAIN_EVENT_EVAL:
		fprintf(stderr, "%siteration %lld: eval loss %.4f\n", terminal ? "\n" : "",
			(long long)p->iteration, p->eval_loss);
		break;
	case F8_TRAIN_EVENT_SAVE:
		if (!terminal)
			fprintf(stderr, "iteration %lld: saved %s\n", (long long)p->iteration, p->path);
		break;
	case F8_TRAIN_EVENT_SKIP: // always, on a line of its own: a user must see every one
		fprintf(stderr, "%siteration %lld: skipped, the %s is not finite (loss %g, grad norm "
			"%g); the weights are unchanged, %lld skipped so far\n", terminal ? "\n" : "",
			(long long)p->iteration, p->skipped_for, p->loss, p->grad_norm,
			(long long)p->skipped_iters);
		break;
	case F8_TRAIN_EVENT_END:
		if (isnan(p->first_loss)) {
			fprintf(stderr, "done: already at iteration %lld of %lld\n",
				(long long)p->iteration, (long long)p->train_iters);
			break;
		}
		fprintf(stderr, "%sdone: iteration %lld after %.1f s; loss %.4f -> %.4f over this "
			"run", terminal ? "\n" : "", (long long)p->iteration, p->elapsed_seconds,
			p->first_loss, p->last_loss);
		if (!isnan(p->best_eval))
			fprintf(stderr, ", best eval loss %.4f", p->best_eval);
		if (p->skipped_iters)
			fprintf(stderr, "; %lld iteration%s skipped for a non-finite value",
				(long long)p->skipped_iters, p->skipped_iters == 1 ? "" : "s");
		fprintf(stderr, "\n");
		if (c->verbose)
			show_memory(p, c->cuda);
		break;
	case F8_TRAIN_EVENT_COUNT:
		break;
	}
}

/* --profile's file, and its summary on the console. */
static f8_status write_profile(const f8_tool_train_args *args, f8_diag *diag) {
#ifdef F8C_CUDA
	char summary[512];
	f8_status status = f8_cuda_backend_profile_write(args->backend, args->profile, summary,
							 sizeof summary, diag);
	if (!status)
		fprintf(stderr, "profile: %s (%s)\n", summary, args->profile);
	return status;
#else
	(void)args;
	return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "this f8c has no CUDA backend to profile");
#endif
}

/*
 * Refuses a --save that cannot hold checkpoints before anything runs: a path that is a file,
 * a folder that cannot be made, one that cannot be written. The first save would find out
 * only after --save-interval iterations (without one, after the whole run), and the work
 * would be lost. Makes the folder, as the first save would, and starts the write of the file
 * a save writes last, then abandons it: the file system itself answers, with root's bypass of
 * permission bits, read-only mounts and ACLs taken into account.
 */
static f8_status check_save_folder(const char *folder, f8_diag *diag) {
	struct stat info;
	if (mkdir(folder, 0777) != 0 && errno != EEXIST) {
		int error = errno;
		f8_diag_hint(diag, error == ENOENT ? "make its parent folder first" :
			     "give --save a folder that this user can write");
		return f8_diag_set(diag, F8_ERR_IO, "cannot make the checkpoint folder %s (--save): "
				   "%s", folder, strerror(error));
	}
	if (stat(folder, &info) != 0 || !S_ISDIR(info.st_mode)) {
		f8_diag_hint(diag, "give --save a folder; it is made when missing");
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "--save %s: it exists and is not a folder",
				   folder);
	}
	char probe[4096];
	if (snprintf(probe, sizeof probe, "%s/latest_checkpointed_iteration.txt", folder) >=
	    (int)sizeof probe)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "--save %s: the path is too long", folder);
	f8_atomic_file *file;
	f8_status status = f8_atomic_file_open(probe, &file, diag);
	f8_atomic_file_abort(file);
	return status;
}

int f8_tool_train(int argc, char **argv) {
	static const f8_tool_train_command train = {
		.name = "train", .usage = "MODEL --data TOKENS.bin [OPTIONS]",
		.needs_train_iters = true, .needs_data = true, .needs_seq_length = true};
	f8_tool_train_args *args;
	int code = f8_tool_train_args_parse(&train, argc, argv, &args);
	if (code)
		return code == 3 ? 0 : code; // 3: --help, which is not an error
	f8_diag diag;
	f8_diag_clear(&diag);
	console screen = {.terminal = isatty(fileno(stderr)), .verbose = args->verbose,
			  .cuda = args->cuda};
	f8_status status = args->config.save ? check_save_folder(args->config.save, &diag) : F8_OK;
	if (!status)
		status = f8_tool_train_args_ready(args, &diag);
	if (!status && args->profile && !args->cuda)
		status = f8_diag_set(&diag, F8_ERR_ARGUMENT, "--profile times a GPU's launches: "
				     "give --device cuda");
	if (!status)
		status = f8_train_run(&args->config, show, &screen, &diag);
	if (!status && args->profile)
		status = write_profile(args, &diag);
#ifdef F8C_CUDA
	if (!status && args->verbose && args->cuda) {
		const char *why = f8_cuda_backend_replays(args->backend);
		fprintf(stderr, "cuda graphs: %s%s\n", why ? "off, " : "each kind of run replayed",
			why ? why : "");
	}
#endif
	if (status) {
		if (screen.terminal)
			fputc('\n', stderr);
		if (args->launch.world > 1) // whose message it is, among the ranks'
			fprintf(stderr, "f8c train: rank %lld of %lld:\n", (long long)args->launch.rank,
				(long long)args->launch.world);
		f8_diag_print(&diag, stderr);
		code = status == F8_ERR_ARGUMENT ? 2 : 1;
		f8_dist_fail(args->dist); // the other ranks stop now, not at their timeout
	}
	f8_tool_train_args_destroy(args);
	return code;
}
