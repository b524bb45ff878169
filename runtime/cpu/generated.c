/*
 * The CPU backend's generated kernels (runtime/cpu/generated.h). A table parameter (kir.h)
 * gets storage of its own per launch, made once with the executor and filled before each
 * launch with its constants and the host addresses of the values it names.
 */
#include "runtime/cpu/generated.h" // f8_cpu_generated

#include <stdint.h> // intptr_t
#include <string.h> // memcpy

#include "codegen/host_jit.h" // f8_host_jit, f8_host_jit_create, f8_host_jit_lookup
#include "codegen/program.h"  // f8_codegen_program
#include "ir/alloc.h"         // f8_calloc, f8_free
#include "runtime/cpu/backend.h" // f8_cpu_view_data, f8_cpu_views_borrow

/* Per group: each launch's compiled function, its tables' storage and the values the group
 * writes. */
typedef struct generated_group {
	f8_host_kernel *functions; // (the group's n_launches)
	int64_t ***tables;         // (n_launches) per launch, per parameter: a table's i64s or NULL
	uint32_t n_launches;
	f8_value_id *outputs;      // (n_outputs)
	uint32_t n_outputs;
} generated_group;

struct f8_cpu_generated {
	const f8_graph *graph;
	f8_codegen_program *program;
	f8_host_jit *jit;
	generated_group *groups; // (program->n_groups)
	// One launch's arguments, sized for the kernel with the most parameters and reused by
	// every launch, so that a run allocates nothing for them: args[i] points to parameter
	// i's value, a buffer pointer in buffers[i] or a size in sizes[i].
	void **args, **buffers;
	int64_t *sizes;
};

void f8_cpu_generated_destroy(f8_cpu_generated *generated) {
	if (!generated)
		return;
	for (uint32_t g = 0; generated->groups && g < generated->program->n_groups; g++) {
		generated_group *group = &generated->groups[g];
		for (uint32_t l = 0; group->tables && l < group->n_launches; l++) {
			const f8_codegen_launch *launch = &generated->program->groups[g].launches[l];
			uint32_t n_params = generated->program->kernels[launch->kernel]->n_params;
			for (uint32_t p = 0; group->tables[l] && p < n_params; p++)
				f8_free(group->tables[l][p]);
			f8_free(group->tables[l]);
		}
		f8_free(group->tables);
		f8_free(group->functions);
		f8_free(group->outputs);
	}
	f8_free(generated->groups);
	f8_free(generated->args);
	f8_free(generated->buffers);
	f8_free(generated->sizes);
	f8_host_jit_destroy(generated->jit);
	f8_codegen_program_destroy(generated->program);
	f8_free(generated);
}

/* Adds `value` to the group's outputs once. */
static void add_output(generated_group *group, f8_value_id value) {
	for (uint32_t i = 0; i < group->n_outputs; i++)
		if (group->outputs[i] == value)
			return;
	group->outputs[group->n_outputs++] = value;
}

/* Launch `l` of `group`'s table storage, one array per table parameter; the values its OUT
 * columns name added to the group's outputs. */
static f8_status bind_tables(const f8_kernel *kernel, const f8_codegen_launch *launch,
			     generated_group *group, uint32_t l, f8_diag *diag) {
	group->tables[l] = f8_calloc(kernel->n_params + 1, sizeof *group->tables[l]);
	if (!group->tables[l])
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	for (uint32_t p = 0; p < kernel->n_params; p++) {
		const f8_kernel_table *table = launch->args[p].table;
		if (kernel->params[p].kind != F8_KERNEL_PARAM_TABLE)
			continue;
		if (!table)
			return f8_diag_set(diag, F8_ERR_INVALID, "kernel %s: table %%%s is bound to "
					   "nothing", kernel->name, kernel->params[p].name);
		size_t cells = (size_t)table->n_rows * table->n_columns;
		if (!(group->tables[l][p] = f8_calloc(cells + 1, sizeof *group->tables[l][p])))
			return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
		for (size_t i = 0; i < cells; i++)
			if (table->columns[i % table->n_columns] == F8_KERNEL_PARAM_OUT &&
			    table->cells[i].value != F8_NONE)
				add_output(group, table->cells[i].value);
	}
	return F8_OK;
}

/* Each group's functions and outputs, from the program and the compiled kernels. */
static f8_status bind_groups(f8_cpu_generated *generated, f8_diag *diag) {
	const f8_codegen_program *program = generated->program;
	generated->groups = f8_calloc(program->n_groups + 1, sizeof *generated->groups);
	if (!generated->groups)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	for (uint32_t g = 0; g < program->n_groups; g++) {
		const f8_codegen_group *lowered = &program->groups[g];
		generated_group *group = &generated->groups[g];
		size_t bound = 0; // at most one output per parameter or table cell
		for (uint32_t l = 0; l < lowered->n_launches; l++) {
			const f8_kernel *kernel = program->kernels[lowered->launches[l].kernel];
			bound += kernel->n_params;
			for (uint32_t p = 0; p < kernel->n_params; p++) {
				const f8_kernel_table *table = lowered->launches[l].args[p].table;
				bound += table ? (size_t)table->n_rows * table->n_columns : 0;
			}
		}
		group->n_launches = lowered->n_launches;
		group->functions = f8_calloc(lowered->n_launches + 1, sizeof *group->functions);
		group->tables = f8_calloc(lowered->n_launches + 1, sizeof *group->tables);
		group->outputs = f8_calloc(bound + 1, sizeof *group->outputs);
		if (!group->functions || !group->tables || !group->outputs)
			return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
		for (uint32_t l = 0; l < lowered->n_launches; l++) {
			const f8_kernel *kernel = program->kernels[lowered->launches[l].kernel];
			group->functions[l] = f8_host_jit_lookup(generated->jit, kernel->name);
			if (!group->functions[l])
				return f8_diag_set(diag, F8_ERR_INVALID, "kernel %s was compiled but "
						   "cannot be found", kernel->name);
			for (uint32_t p = 0; p < kernel->n_params; p++) {
				f8_kernel_param_kind kind = kernel->params[p].kind;
				f8_value_id value = lowered->launches[l].args[p].value;
				if ((kind == F8_KERNEL_PARAM_OUT || kind == F8_KERNEL_PARAM_ACCUMULATE) &&
				    value != F8_NONE)
					add_output(group, value);
			}
			f8_status status = bind_tables(kernel, &lowered->launches[l], group, l, diag);
			if (status)
				return status;
		}
	}
	return F8_OK;
}

f8_status f8_cpu_generated_create(const f8_graph *graph, const char *cache_folder,
				  f8_cpu_generated **out, f8_diag *diag) {
	*out = NULL;
	f8_cpu_generated *generated = f8_calloc(1, sizeof *generated);
	if (!generated)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	generated->graph = graph;
	f8_status status = f8_codegen_program_create(graph, &generated->program, diag);
	if (!status)
		status = f8_host_jit_create((const f8_kernel *const *)generated->program->kernels,
					    generated->program->n_kernels, cache_folder,
					    &generated->jit, diag);
	if (!status)
		status = bind_groups(generated, diag);
	uint32_t most = 1;
	for (uint32_t k = 0; !status && k < generated->program->n_kernels; k++)
		if (generated->program->kernels[k]->n_params > most)
			most = generated->program->kernels[k]->n_params;
	if (!status && (!(generated->args = f8_calloc(most, sizeof *generated->args)) ||
			!(generated->buffers = f8_calloc(most, sizeof *generated->buffers)) ||
			!(generated->sizes = f8_calloc(most, sizeof *generated->sizes))))
		status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	if (status) {
		f8_cpu_generated_destroy(generated);
		return status;
	}
	*out = generated;
	return F8_OK;
}

const f8_value_id *f8_cpu_generated_outputs(const f8_cpu_generated *generated, uint32_t group,
					    uint32_t *n) {
	*n = generated->groups[group].n_outputs;
	return generated->groups[group].outputs;
}

/* The group's scratch buffers, zeroed, into scratch[i] (f8_calloc'd; the caller frees). */
static f8_status make_scratch(const f8_codegen_group *group, const int64_t *symbol_values,
			      void **scratch, f8_diag *diag) {
	for (uint32_t i = 0; i < group->n_scratch; i++) {
		int64_t count;
		if (!f8_dim_evaluate(group->scratch[i].count, symbol_values, &count) || count < 0)
			return f8_diag_set(diag, F8_ERR_ARGUMENT, "a scratch buffer's size overflows");
		size_t bytes = (size_t)count * f8_dtype_get_info(group->scratch[i].dtype)->bytes;
		scratch[i] = f8_calloc(bytes + 1, 1);
		if (!scratch[i])
			return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	}
	return F8_OK;
}

/* The storage of value `value` for kernel `kernel`; NULL (and the diagnostic) when a value of
 * elements has none. */
static void *storage_of(const f8_cpu_generated *generated, const f8_kernel *kernel,
			const f8_tensor_view *views, f8_value_id value, f8_diag *diag) {
	void *data = f8_cpu_view_data(&views[value]);
	if (!data && views[value].n_bytes != 0)
		f8_diag_set(diag, F8_ERR_INVALID, "kernel %s: %%%s has no memory (the slab plan "
			    "keeps it inside a kernel)", kernel->name,
			    generated->graph->values[value].name);
	return data;
}

/* Fills `cells` with `table`'s constants and the addresses of the values it names; zeroes
 * the values of its ACCUMULATE columns (the launcher's part, codegen/kir.h). */
static f8_status fill_table(const f8_cpu_generated *generated, const f8_kernel *kernel,
			    const f8_kernel_table *table, const f8_tensor_view *views,
			    int64_t *cells, f8_diag *diag) {
	size_t n = (size_t)table->n_rows * table->n_columns;
	for (size_t i = 0; i < n; i++) {
		const f8_kernel_table_cell *cell = &table->cells[i];
		if (cell->value == F8_NONE) {
			cells[i] = cell->constant;
			continue;
		}
		void *data = storage_of(generated, kernel, views, cell->value, diag);
		if (!data && views[cell->value].n_bytes != 0)
			return F8_ERR_INVALID;
		if (data && table->columns[i % table->n_columns] == F8_KERNEL_PARAM_ACCUMULATE)
			memset(data, 0, views[cell->value].n_bytes);
		cells[i] = (int64_t)(intptr_t)data;
	}
	return F8_OK;
}

/* Runs launch `l` of group `group` with its arguments pointed at their storage. */
static f8_status run_launch(f8_cpu_generated *generated, uint32_t group, uint32_t l,
			    const f8_tensor_view *views, void **scratch,
			    const int64_t *symbol_values, f8_diag *diag) {
	const f8_codegen_program *program = generated->program;
	const f8_codegen_launch *launch = &program->groups[group].launches[l];
	const f8_kernel *kernel = program->kernels[launch->kernel];
	void **args = generated->args, **buffers = generated->buffers;
	int64_t *sizes = generated->sizes;
	for (uint32_t p = 0; p < kernel->n_params; p++) {
		const f8_kernel_arg *arg = &launch->args[p];
		if (kernel->params[p].kind == F8_KERNEL_PARAM_SIZE) {
			if (!f8_dim_evaluate(arg->dim, symbol_values, &sizes[p]))
				return f8_diag_set(diag, F8_ERR_ARGUMENT, "kernel %s: size %u overflows",
						   kernel->name, p);
			args[p] = &sizes[p];
			continue;
		}
		if (kernel->params[p].kind == F8_KERNEL_PARAM_TABLE) {
			int64_t *cells = generated->groups[group].tables[l][p];
			f8_status status = fill_table(generated, kernel, arg->table, views, cells,
						      diag);
			if (status)
				return status;
			buffers[p] = cells;
		} else if (arg->scratch != F8_NONE) {
			buffers[p] = scratch[arg->scratch];
		} else {
			buffers[p] = storage_of(generated, kernel, views, arg->value, diag);
			if (!buffers[p] && views[arg->value].n_bytes != 0)
				return F8_ERR_INVALID;
			if (buffers[p] && kernel->params[p].kind == F8_KERNEL_PARAM_ACCUMULATE)
				memset(buffers[p], 0, views[arg->value].n_bytes);
		}
		args[p] = &buffers[p];
	}
	generated->groups[group].functions[l](args);
	return F8_OK;
}

f8_status f8_cpu_generated_run(f8_cpu_generated *generated, uint32_t group,
			       const f8_tensor_view *views, const int64_t *symbol_values,
			       f8_diag *diag) {
	const f8_codegen_group *lowered = &generated->program->groups[group];
	void **scratch = f8_calloc(lowered->n_scratch + 1, sizeof *scratch);
	f8_status status = scratch ? make_scratch(lowered, symbol_values, scratch, diag)
				   : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	for (uint32_t l = 0; !status && l < lowered->n_launches; l++)
		status = run_launch(generated, group, l, views, scratch, symbol_values, diag);
	if (!status && lowered->error) {
		int64_t flag;
		memcpy(&flag, scratch[lowered->error_scratch], sizeof flag);
		if (flag)
			status = f8_diag_set(diag, F8_ERR_ARGUMENT, "%s (row %lld)", lowered->error,
					     (long long)(flag - 1));
	}
	for (uint32_t i = 0; scratch && i < lowered->n_scratch; i++)
		f8_free(scratch[i]);
	f8_free(scratch);
	return status;
}

f8_status f8_cpu_generated_run_tensors(f8_cpu_generated *generated, uint32_t group,
				       const f8_rt_tensor *tensors, const int64_t *symbol_values,
				       f8_diag *diag) {
	uint32_t n = generated->graph->n_values;
	f8_tensor_view *views = f8_calloc(n + 1, sizeof *views);
	f8_status status = views ? f8_cpu_views_borrow(tensors, n, views, diag)
				 : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	if (!status)
		status = f8_cpu_generated_run(generated, group, views, symbol_values, diag);
	if (views)
		f8_cpu_views_release(views, n);
	f8_free(views);
	return status;
}
