/*
 * A graph's kernels, lowered and shared between identical groups (codegen/program.h).
 */
#define _POSIX_C_SOURCE 200809L // open_memstream

#include "codegen/program.h" // f8_codegen_program

#include <stdio.h>  // open_memstream, snprintf
#include <stdlib.h> // free (open_memstream's buffer)
#include <string.h> // strcmp, strchr

#include "ir/alloc.h" // f8_calloc, f8_realloc, f8_free
#include "ir/arena.h" // f8_arena_strdup

/* The kernel's text without its name (the part after "kernel NAME"), malloc'd; NULL when
 * memory runs out. Two kernels compute the same thing when these are equal. */
static char *body_text(const f8_kernel *kernel) {
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);
	if (!out)
		return NULL;
	f8_kir_print(kernel, out);
	if (fclose(out) != 0) {
		free(text);
		return NULL;
	}
	return text;
}

static bool same_body(const char *a, const char *b) {
	const char *pa = a ? strchr(a, '(') : NULL, *pb = b ? strchr(b, '(') : NULL;
	return pa && pb && strcmp(pa, pb) == 0;
}

void f8_codegen_program_destroy(f8_codegen_program *program) {
	if (!program)
		return;
	// The bindings before the kernels, which say how many a launch has.
	for (uint32_t i = 0; program->groups && i < program->n_groups; i++) {
		for (uint32_t l = 0; l < program->groups[i].n_launches; l++) {
			const f8_codegen_launch *launch = &program->groups[i].launches[l];
			f8_kernel_args_free_tables(launch->args,
						   program->kernels[launch->kernel]->n_params);
			f8_free(launch->args);
		}
		f8_free(program->groups[i].launches);
		f8_free(program->groups[i].scratch);
	}
	for (uint32_t i = 0; i < program->n_kernels; i++)
		f8_kir_destroy(program->kernels[i]);
	f8_free(program->kernels);
	f8_free(program->groups);
	f8_free(program);
}

/* Adds `kernel` (taken over) as a new distinct kernel named after `family`. */
static f8_status add_kernel(f8_codegen_program *program, f8_kernel *kernel,
			    f8_kernel_family family, uint32_t *index, f8_diag *diag) {
	f8_kernel **grown = f8_realloc(program->kernels, (program->n_kernels + 1) * sizeof *grown);
	if (!grown) {
		f8_kir_destroy(kernel);
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	}
	program->kernels = grown;
	char name[64];
	uint32_t same_family = 0;
	for (uint32_t i = 0; i < program->n_kernels; i++)
		same_family += strncmp(program->kernels[i]->name, f8_kernel_family_name(family),
				       strlen(f8_kernel_family_name(family))) == 0 &&
			       program->kernels[i]->name[strlen(f8_kernel_family_name(family))] == '_';
	snprintf(name, sizeof name, "%s_%u", f8_kernel_family_name(family), same_family);
	const char *copy = f8_arena_strdup(kernel->arena, name);
	if (!copy) {
		f8_kir_destroy(kernel);
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	}
	kernel->name = copy;
	*index = program->n_kernels;
	program->kernels[program->n_kernels++] = kernel;
	return F8_OK;
}

/* The kernel of `launch` as one of the program's: an identical one found (the launch's is
 * destroyed) or it added; its index into *index. `texts` holds each kernel's printed form. */
static f8_status share_kernel(f8_codegen_program *program, char **texts, f8_kernel *kernel,
			      f8_kernel_family family, uint32_t *index, f8_diag *diag) {
	char *text = body_text(kernel);
	if (!text) {
		f8_kir_destroy(kernel);
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	}
	for (uint32_t k = 0; k < program->n_kernels; k++)
		if (same_body(texts[k], text)) {
			free(text);
			f8_kir_destroy(kernel);
			*index = k;
			return F8_OK;
		}
	f8_status status = add_kernel(program, kernel, family, index, diag);
	if (status)
		free(text);
	else
		texts[*index] = text;
	return status;
}

/* Moves lowered group `lowered` into program group `g`, sharing its kernels. */
static f8_status take_group(f8_codegen_program *program, char **texts, f8_kernel_family family,
			    f8_lowered_group *lowered, uint32_t g, f8_diag *diag) {
	f8_codegen_group *group = &program->groups[g];
	group->launches = f8_calloc(lowered->n_launches + 1, sizeof *group->launches);
	if (!group->launches)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	group->scratch = lowered->scratch;
	group->n_scratch = lowered->n_scratch;
	group->error = lowered->error;
	group->error_scratch = lowered->error_scratch;
	lowered->scratch = NULL;
	lowered->n_scratch = 0;
	f8_status status = F8_OK;
	for (uint32_t l = 0; l < lowered->n_launches; l++) {
		f8_kernel_launch *launch = &lowered->launches[l];
		uint32_t n_params = launch->kernel->n_params;
		if (!status)
			status = share_kernel(program, texts, launch->kernel, family,
					      &group->launches[l].kernel, diag);
		else
			f8_kir_destroy(launch->kernel);
		launch->kernel = NULL;
		if (!status) {
			group->launches[l].args = launch->args;
			group->n_launches = l + 1;
		} else {
			f8_kernel_args_free_tables(launch->args, n_params);
			f8_free(launch->args);
		}
		launch->args = NULL;
	}
	return status;
}

f8_status f8_codegen_program_create(const f8_graph *graph, f8_codegen_program **out,
				    f8_diag *diag) {
	*out = NULL;
	f8_codegen_program *program = f8_calloc(1, sizeof *program);
	// Each distinct kernel's printed form; a group has at most a few launches.
	uint32_t most = 4 * graph->n_groups + 1;
	char **texts = f8_calloc(most, sizeof *texts);
	if (!program || !texts ||
	    !(program->groups = f8_calloc(graph->n_groups + 1, sizeof *program->groups))) {
		f8_free(texts);
		f8_codegen_program_destroy(program);
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	}
	f8_status status = F8_OK;
	for (uint32_t g = 0; !status && g < graph->n_groups; g++) {
		f8_lowered_group lowered;
		status = f8_codegen_lower_group(graph, g, &lowered, diag);
		if (!status && program->n_kernels + lowered.n_launches >= most)
			status = f8_diag_set(diag, F8_ERR_INVALID, "kernel %s: too many launches",
					     graph->groups[g].name);
		program->n_groups = g + 1;
		if (!status)
			status = take_group(program, texts, graph->groups[g].family, &lowered, g, diag);
		f8_lowered_group_release(&lowered);
	}
	for (uint32_t k = 0; k < program->n_kernels; k++)
		free(texts[k]);
	f8_free(texts);
	if (status) {
		f8_codegen_program_destroy(program);
		return status;
	}
	*out = program;
	return F8_OK;
}
