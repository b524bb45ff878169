/*
 * The compile driver (tools/compile.h): model -> every pass -> codegen -> plan.
 */
#include "tools/compile.h" // f8_tool_compile_training, f8_tool_plan_make

#include <stdio.h>  // FILE, fopen, snprintf
#include <string.h> // strrchr, strcmp

#include "codegen/nvptx.h"     // f8_nvptx_compile
#include "codegen/program.h"   // f8_codegen_program_create
#include "codegen/target.h"    // f8_codegen_target_table_for
#include "tools/evaluate.h"    // f8_tool_evaluator_make
#include "tools/tool_options.h" // f8_tool_kernel_cache
#include "frontend/frontend.h" // f8_frontend_load, f8_frontend_bind_dims
#include "frontend/json/model_json.h" // f8_json_model_config_read, f8_json_model_padded_vocab
#include "ir/alloc.h"          // f8_calloc, f8_free
#include "ir/arena.h"          // f8_arena_alloc_array, f8_arena_strdup
#include "passes/pipeline.h"   // f8_pipeline_run_with
#include "passes/precision.h"  // f8_gemm_sizes
#include "passes/schedule.h"   // f8_buffer_plan_of

bool f8_tool_can_compile(void) {
	return true;
}

f8_status f8_tool_load_model(const char *path, const f8_frontend_options *options,
			     f8_graph **out, f8_diag *diag) {
	return f8_frontend_load(path, options, out, diag);
}

f8_status f8_tool_bind_dims(f8_graph *graph, const f8_dim_binding *dims, uint32_t n_dims,
			    f8_diag *diag) {
	return f8_frontend_bind_dims(graph, dims, n_dims, diag);
}

/* The JSON model description at `path` into *config; false for another kind of model or a
 * file that does not read. */
static bool read_description(const char *path, f8_json_model_config *config) {
	const char *dot = strrchr(path, '.');
	FILE *file = dot && strcmp(dot, ".json") == 0 ? fopen(path, "rb") : NULL;
	if (!file)
		return false;
	char *text = f8_malloc(F8_JSON_MODEL_MAX_BYTES + 1);
	size_t len = text ? fread(text, 1, F8_JSON_MODEL_MAX_BYTES + 1, file) : 0;
	fclose(file);
	bool read = text && len <= F8_JSON_MODEL_MAX_BYTES &&
		    !f8_json_model_config_read(text, len, path, config, NULL);
	f8_free(text);
	return read;
}

int64_t f8_tool_described_seq(const char *path) {
	f8_json_model_config config;
	return read_description(path, &config) ? config.seq : 0;
}

bool f8_tool_vocab_padding(const char *path, int64_t vocab_multiple, char *line, size_t size) {
	f8_json_model_config config;
	if (!read_description(path, &config))
		return false;
	if (vocab_multiple > 0)
		config.vocab_multiple = vocab_multiple;
	int64_t padded = f8_json_model_padded_vocab(&config);
	if (padded == config.vocab)
		return false;
	snprintf(line, size, "padded vocab (size: %lld) with %lld dummy tokens (new size: %lld), "
		 "--make-vocab-size-divisible-by %lld: the head's GEMMs get aligned rows",
		 (long long)config.vocab, (long long)(padded - config.vocab), (long long)padded,
		 (long long)config.vocab_multiple);
	return true;
}

f8_status f8_tool_run_passes(f8_graph *graph, const char *after, bool verify,
			     const f8_pipeline_options *options, FILE *report, f8_diag *diag) {
	f8_pipeline_options with_target = *options;
	if (!with_target.target)
		with_target.target = f8_codegen_target_table_for(options->fp8);
	f8_tool_evaluator evaluator = f8_tool_evaluator_make(options->training != NULL);
	if (!with_target.evaluator)
		with_target.evaluator = &evaluator.base;
	return f8_pipeline_run_with(graph, after, verify, &with_target, report, diag);
}

/*
 * Binds the token input's symbolic dims (the one integer (batch, seq) input besides those the
 * training loop fills; the labels come with training) to the micro-batch size and the sequence length, so that the schedule pass
 * plans the step's memory, block-scaled casts see a token count that divides into their blocks
 * and the precision pass applies the target's shape rules to concrete GEMM sizes. A dim that is
 * a constant or a product stays, for the training loop to check.
 */
static f8_status bind_token_dims(f8_graph *graph, const f8_train_config *c, f8_diag *diag) {
	const f8_value *tokens = NULL;
	for (uint32_t i = 0; i < graph->n_inputs; i++) {
		const f8_value *value = &graph->values[graph->inputs[i]];
		if (value->role != F8_ROLE_INPUT || !f8_dtype_is_integer(value->type.dtype) ||
		    value->type.shape.rank != 2 || f8_train_fills_input(value->name))
			continue;
		if (tokens) // not a language model's one input: the training loop says so
			return F8_OK;
		tokens = value;
	}
	if (!tokens)
		return F8_OK;
	const int64_t sizes[2] = {c->micro_batch_size, c->seq_length};
	f8_dim_binding bindings[2];
	uint32_t n = 0;
	for (int d = 0; d < 2; d++) {
		uint16_t symbol;
		if (f8_dim_is_symbol(tokens->type.shape.dims[d], &symbol))
			bindings[n++] = (f8_dim_binding){.name = graph->symbols[symbol],
							 .value = sizes[d]};
	}
	return n ? f8_frontend_bind_dims(graph, bindings, n, diag) : F8_OK;
}

/* compile->model loaded with the --dim sizes and `seed`, for a training step of `run` (its batch
 * and sequence sizes bound first) with `training`, or (both NULL) the forward graph, through
 * every pass. */
static f8_status compile_model(const f8_tool_compile_options *compile, uint64_t seed,
			       const f8_train_config *run, const f8_training_options *training,
			       f8_graph **out, f8_diag *diag) {
	*out = NULL;
	// In the description's words, rather than as the shape error the graph would give.
	char what[48];
	if (run) {
		snprintf(what, sizeof what, "--seq-length %lld", (long long)run->seq_length);
		f8_status checked = f8_tool_check_seq(compile->model, run->seq_length, what, diag);
		if (checked)
			return checked;
	}
	f8_frontend_options options = {.dims = compile->dims, .n_dims = compile->n_dims,
				       .seed = seed, .vocab_multiple = compile->vocab_multiple};
	f8_pipeline_options passes = {.training = training, .fp8 = compile->fp8,
				      .bf16 = compile->bf16, .target = compile->target,
				      .recompute = training ? compile->recompute : NULL,
				      .parallel = training ? compile->parallel : NULL};
	f8_graph *graph = NULL;
	f8_status status = f8_frontend_load(compile->model, &options, &graph, diag);
	if (!status && run)
		status = bind_token_dims(graph, run, diag);
	if (!status)
		status = f8_tool_run_passes(graph, NULL, true, &passes, NULL, diag);
	if (status) {
		f8_graph_destroy(graph);
		return status;
	}
	*out = graph;
	return F8_OK;
}

f8_status f8_tool_compile_training(const f8_tool_compile_options *compile,
				   const f8_train_config *run, f8_graph **out, f8_diag *diag) {
	*out = NULL;
	f8_training_options optimizer = f8_tool_optimizer(compile, run);
	f8_status status = f8_training_options_check(&optimizer, diag);
	return status ? status : compile_model(compile, run->seed, run, &optimizer, out, diag);
}

f8_status f8_tool_compile_inference(const f8_tool_compile_options *compile, uint64_t seed,
				    f8_graph **out, f8_diag *diag) {
	return compile_model(compile, seed, NULL, NULL, out, diag);
}

/* The product of a shape's dims when they are all constant, else -1. */
static double numel_of(const f8_type *type) {
	double n = 1;
	for (int d = 0; d < type->shape.rank; d++) {
		if (!f8_dim_is_const(type->shape.dims[d]))
			return -1;
		n *= (double)f8_dim_value(type->shape.dims[d]);
	}
	return n;
}

/* The estimates per micro-batch (and per step's cast and opt phases, once): GEMM FLOPs (2 m n k,
 * as the audit counts them), the bytes the generated kernels read and write (each buffer once
 * per launch), the launches. */
static f8_plan_estimates estimates_of(const f8_graph *graph, const f8_codegen_program *program) {
	f8_plan_estimates e = {0};
	bool known = true;
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		int64_t m, n, k;
		if (!(f8_op_get_info(node->op)->flags & F8_OPF_GEMM))
			continue;
		if (f8_gemm_sizes(graph, node, &m, &n, &k))
			e.gemm_flops += 2.0 * (double)m * (double)n * (double)k;
		else
			known = false;
	}
	if (!known)
		e.gemm_flops = -1;
	known = true;
	for (uint32_t g = 0; g < program->n_groups; g++) {
		const f8_codegen_group *group = &program->groups[g];
		e.kernel_launches += group->n_launches;
		for (uint32_t l = 0; l < group->n_launches; l++) {
			const f8_kernel *kernel = program->kernels[group->launches[l].kernel];
			for (uint32_t p = 0; p < kernel->n_params; p++) {
				const f8_kernel_arg *arg = &group->launches[l].args[p];
				const f8_kernel_table *table = arg->table;
				size_t cells = table ? (size_t)table->n_rows * table->n_columns : 1;
				for (size_t c = 0; c < cells; c++) { // a table: the values it names
					f8_value_id v = table ? table->cells[c].value : arg->value;
					if (kernel->params[p].kind == F8_KERNEL_PARAM_SIZE || v == F8_NONE)
						continue;
					double n = numel_of(&graph->values[v].type);
					known = known && n >= 0;
					e.kernel_bytes += n > 0 ? n * (double)f8_dtype_get_info(
									 graph->values[v].type.dtype)->bytes
							      : 0;
				}
			}
		}
	}
	if (!known)
		e.kernel_bytes = -1;
	return e;
}

/* The plan's copy of a table argument, in its arena. */
static f8_plan_table *copy_table(f8_arena *arena, const f8_kernel_table *from) {
	f8_plan_table *table = f8_arena_alloc(arena, sizeof *table);
	size_t cells = (size_t)from->n_rows * from->n_columns;
	if (!table)
		return NULL;
	table->n_rows = from->n_rows;
	table->n_columns = from->n_columns;
	table->columns = f8_arena_alloc_array(arena, from->n_columns + 1, sizeof *table->columns);
	table->names = f8_arena_alloc_array(arena, from->n_columns + 1, sizeof *table->names);
	table->values = f8_arena_alloc_array(arena, cells + 1, sizeof *table->values);
	table->constants = f8_arena_alloc_array(arena, cells + 1, sizeof *table->constants);
	if (!table->columns || !table->names || !table->values || !table->constants)
		return NULL;
	for (uint32_t c = 0; c < from->n_columns; c++) {
		table->columns[c] = from->columns[c];
		if (!(table->names[c] = f8_arena_strdup(arena, from->names[c])))
			return NULL;
	}
	for (size_t i = 0; i < cells; i++) {
		table->values[i] = from->cells[i].value;
		table->constants[i] = from->cells[i].constant;
	}
	return table;
}

/* The plan's kernels, from the program and their geometry. */
static bool copy_kernels(f8_plan *plan, const f8_codegen_program *program,
			 const f8_launch_geometry *geometry) {
	f8_arena *arena = plan->arena;
	plan->n_kernels = program->n_kernels;
	plan->kernels = f8_arena_alloc_array(arena, program->n_kernels + 1, sizeof *plan->kernels);
	for (uint32_t k = 0; plan->kernels && k < program->n_kernels; k++) {
		const f8_kernel *kernel = program->kernels[k];
		f8_plan_kernel *to = &plan->kernels[k];
		to->name = f8_arena_strdup(arena, kernel->name);
		to->geometry = geometry[k];
		to->n_params = kernel->n_params;
		to->n_grid_sizes = kernel->n_grid_sizes;
		to->params = f8_arena_alloc_array(arena, kernel->n_params + 1, sizeof *to->params);
		to->grid_sizes = f8_arena_alloc_array(arena, kernel->n_grid_sizes + 1,
						      sizeof *to->grid_sizes);
		if (!to->name || !to->params || !to->grid_sizes)
			return false;
		for (uint32_t p = 0; p < kernel->n_params; p++) {
			to->params[p] = (f8_plan_param){.kind = kernel->params[p].kind,
							.dtype = kernel->params[p].dtype};
			if (!(to->params[p].name = f8_arena_strdup(arena, kernel->params[p].name)))
				return false;
		}
		for (uint32_t i = 0; i < kernel->n_grid_sizes; i++)
			to->grid_sizes[i] = kernel->grid_sizes[i];
	}
	return plan->kernels != NULL;
}

/* The plan's groups: each group's launches, bindings, scratch and data error. */
static bool copy_groups(f8_plan *plan, const f8_codegen_program *program) {
	f8_arena *arena = plan->arena;
	plan->n_groups = program->n_groups;
	plan->groups = f8_arena_alloc_array(arena, program->n_groups + 1, sizeof *plan->groups);
	for (uint32_t g = 0; plan->groups && g < program->n_groups; g++) {
		const f8_codegen_group *from = &program->groups[g];
		f8_plan_group *to = &plan->groups[g];
		to->n_launches = from->n_launches;
		to->n_scratch = from->n_scratch;
		to->error_scratch = from->error_scratch;
		to->error = from->error ? f8_arena_strdup(arena, from->error) : NULL;
		to->launches = f8_arena_alloc_array(arena, from->n_launches + 1, sizeof *to->launches);
		to->scratch = f8_arena_alloc_array(arena, from->n_scratch + 1, sizeof *to->scratch);
		if (!to->launches || !to->scratch || (from->error && !to->error))
			return false;
		for (uint32_t s = 0; s < from->n_scratch; s++)
			to->scratch[s] = (f8_plan_scratch){.dtype = from->scratch[s].dtype,
							   .count = from->scratch[s].count};
		for (uint32_t l = 0; l < from->n_launches; l++) {
			const f8_kernel *kernel = program->kernels[from->launches[l].kernel];
			f8_plan_launch *launch = &to->launches[l];
			launch->kernel = from->launches[l].kernel;
			launch->args = f8_arena_alloc_array(arena, kernel->n_params + 1,
							    sizeof *launch->args);
			if (!launch->args)
				return false;
			for (uint32_t p = 0; p < kernel->n_params; p++) {
				const f8_kernel_arg *arg = &from->launches[l].args[p];
				launch->args[p] = (f8_plan_arg){.value = arg->value,
								.scratch = arg->scratch, .dim = arg->dim};
				if (arg->table && !(launch->args[p].table = copy_table(arena, arg->table)))
					return false;
			}
		}
	}
	return plan->groups != NULL;
}

f8_status f8_tool_plan_make(f8_graph *graph, bool training, bool ptx, const char *model,
			    const char *const *args, uint32_t n_args, f8_plan **out, f8_diag *diag) {
	*out = NULL;
	f8_plan *plan = NULL;
	f8_codegen_program *program = NULL;
	f8_launch_geometry *geometry = NULL;
	f8_status status = f8_plan_create(graph, &plan, diag);
	if (status) {
		f8_graph_destroy(graph);
		return status;
	}
	status = f8_codegen_program_create(graph, &program, diag);
	if (!status && !(geometry = f8_calloc(program->n_kernels + 1, sizeof *geometry)))
		status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	char cache[4096];
	if (!status && ptx)
		status = f8_nvptx_compile((const f8_kernel *const *)program->kernels,
					  program->n_kernels, f8_tool_kernel_cache(cache, sizeof cache),
					  &plan->ptx, geometry, diag);
	if (!status) {
		plan->training = training;
		plan->f8c_version = F8C_VERSION;
		plan->model = f8_arena_strdup(plan->arena, model ? model : "");
		plan->compile_args = f8_arena_alloc_array(plan->arena, n_args + 1,
							  sizeof *plan->compile_args);
		for (uint32_t i = 0; plan->compile_args && i < n_args; i++)
			if ((plan->compile_args[i] = f8_arena_strdup(plan->arena, args[i])))
				plan->n_compile_args++;
		plan->slab_bytes = f8_buffer_plan_of(graph).slab_bytes;
		plan->estimates = estimates_of(graph, program);
		if (!plan->model || plan->n_compile_args != n_args ||
		    !copy_kernels(plan, program, geometry) || !copy_groups(plan, program))
			status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	}
	f8_free(geometry);
	f8_codegen_program_destroy(program);
	if (status) {
		f8_plan_destroy(plan);
		return status;
	}
	*out = plan;
	return F8_OK;
}
