/*
 * That every floating-point sum a generated kernel makes has an order fixed by the shapes: no
 * kernel of the training steps of gpt-tiny, llama-tiny and mixtral-tiny (f32 and --bf16, FP8
 * delayed scaling) adds floats with an atomic. A structural test, on the kernel IR
 * (codegen/program.h): on a GPU an atomic add's order is the blocks' schedule, so two runs of
 * one step can differ in the last bits (a --deterministic resume did: LayerNormGrad's dgamma
 * into AdamW's exp_avg). A block loop's or a grid loop's accumulator is no such sum: the GPU
 * combines it in a fixed order over a grid that the shapes size (codegen/llvm_lower.h,
 * ir/launch.h). Max atomics (amaxes) and i64 add atomics (counts) give the same result in any
 * order and are allowed.
 *
 * Known exceptions, printed, not failed: EmbeddingGrad's scatter-add by token id
 * (codegen/lower_embedding.c), whose deterministic form (a counting sort of the positions by
 * id) is not written yet.
 *
 * usage: test_deterministic SOURCE_DIR
 */
#include <stdio.h>  // printf, snprintf
#include <string.h> // strcmp

#include "codegen/program.h"     // f8_codegen_program
#include "codegen/target.h"      // f8_codegen_target_table_for
#include "frontend/frontend.h"   // f8_frontend_load
#include "passes/pipeline.h"     // f8_pipeline_run_with
#include "passes/precision.h"    // f8_fp8_options_default
#include "tests/test_support.h"  // CHECK, test_finish

/* The float add atomics of `kernel`: each printed with the kernel's and its group's names;
 * their count. */
static uint32_t float_add_atomics(const f8_kernel *kernel, const char *group) {
	uint32_t found = 0;
	for (uint32_t s = 0; s < kernel->n_stmts; s++) {
		const f8_kir_stmt *stmt = &kernel->stmts[s];
		if (stmt->kind != F8_KIR_STMT_ATOMIC || stmt->combine != F8_KIR_COMBINE_ADD ||
		    f8_kir_type_of_dtype(kernel->params[stmt->param].dtype) != F8_KIR_TYPE_F32)
			continue;
		printf("  kernel %s (group %s): atomic.add of f32 into %%%s\n", kernel->name, group,
		       kernel->params[stmt->param].name);
		found++;
	}
	return found;
}

static void check_model(const char *source_dir, const char *model, const f8_fp8_options *fp8,
			bool bf16) {
	printf("%s %s%s\n", model, fp8 ? "FP8 (delayed)" : "without FP8", bf16 ? ", --bf16" : "");
	char path[512];
	snprintf(path, sizeof path, "%s/models/%s.json", source_dir, model);
	const f8_dim_binding dims[] = {{"batch", 2}, {"seq", 24}};
	f8_frontend_options options = {.dims = dims, .n_dims = 2, .seed = 1};
	f8_training_options training = f8_training_options_default();
	f8_pipeline_options compile_options = {.training = &training, .fp8 = fp8, .bf16 = bf16,
					       .target = f8_codegen_target_table_for(fp8)};
	f8_graph *graph = NULL;
	f8_codegen_program *program = NULL;
	f8_diag diag = {0};
	f8_status status = f8_frontend_load(path, &options, &graph, &diag);
	if (!status)
		status = f8_pipeline_run_with(graph, NULL, true, &compile_options, NULL, &diag);
	if (!status)
		status = f8_codegen_program_create(graph, &program, &diag);
	if (status) {
		f8_diag_print(&diag, stdout);
		CHECK(status == F8_OK);
		f8_graph_destroy(graph);
		return;
	}
	// Each distinct kernel once, under the first group that launches it.
	bool *seen = calloc(program->n_kernels + 1, sizeof *seen);
	CHECK(seen != NULL);
	uint32_t launches = 0;
	for (uint32_t g = 0; seen && g < program->n_groups; g++) {
		const f8_codegen_group *group = &program->groups[g];
		bool known = graph->groups[g].family == F8_KERNEL_FAMILY_EMBEDDING_GRAD;
		for (uint32_t l = 0; l < group->n_launches; l++, launches++) {
			uint32_t k = group->launches[l].kernel;
			if (seen[k])
				continue;
			seen[k] = true;
			if (known) {
				if (float_add_atomics(program->kernels[k], graph->groups[g].name))
					printf("    (known: EmbeddingGrad's scatter-add by id)\n");
				continue;
			}
			uint32_t found = float_add_atomics(program->kernels[k], graph->groups[g].name);
			CHECK(found == 0);
		}
	}
	printf("  %u kernels of %u launches checked\n", program->n_kernels, launches);
	free(seen);
	f8_codegen_program_destroy(program);
	f8_graph_destroy(graph);
}

int main(int argc, char **argv) {
	if (argc != 2) {
		fprintf(stderr, "usage: test_deterministic SOURCE_DIR\n");
		return 2;
	}
	const char *models[] = {"gpt-tiny", "llama-tiny", "mixtral-tiny"};
	f8_fp8_options fp8 = f8_fp8_options_default();
	fp8.recipe = F8_RECIPE_DELAYED;
	fp8.allow_fallback = true; // mixtral-tiny's router (N=4) stays high precision
	for (int m = 0; m < 3; m++) {
		check_model(argv[1], models[m], NULL, false);
		check_model(argv[1], models[m], NULL, true);
		check_model(argv[1], models[m], &fp8, false);
		check_model(argv[1], models[m], &fp8, true);
	}
	return test_finish();
}
