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
	for (uint32_t i = 0; i < program->n_kernels; i++)
		f8_kir_destroy(program->kernels[i]);
	for (uint32_t i = 0; i < program->n_groups; i++)
		f8_free(program->groups[i].args);
	f8_free(program->kernels);
	f8_free(program->groups);
	f8_free(program);
}

/* Adds `kernel` (taken over) as a new distinct kernel named after `family`. */
static f8_status add_kernel(f8_codegen_program *program, f8_kernel *kernel,
			    f8_kernel_family family, uint32_t *index, f8_diag *diag) {
	f8_kernel **grown = f8_realloc(program->kernels, (program->n_kernels + 1) * sizeof *grown);
	char name[64];
	uint32_t same_family = 0;
	for (uint32_t i = 0; i < program->n_kernels; i++)
		same_family += strncmp(program->kernels[i]->name, f8_kernel_family_name(family),
				       strlen(f8_kernel_family_name(family))) == 0 &&
			       program->kernels[i]->name[strlen(f8_kernel_family_name(family))] == '_';
	snprintf(name, sizeof name, "%s_%u", f8_kernel_family_name(family), same_family);
	const char *copy = f8_arena_strdup(kernel->arena, name);
	if (!grown || !copy) {
		if (grown)
			program->kernels = grown;
		f8_kir_destroy(kernel);
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	}
	program->kernels = grown;
	kernel->name = copy;
	*index = program->n_kernels;
	program->kernels[program->n_kernels++] = kernel;
	return F8_OK;
}

f8_status f8_codegen_program_create(const f8_graph *graph, f8_codegen_program **out,
				    f8_diag *diag) {
	*out = NULL;
	f8_codegen_program *program = f8_calloc(1, sizeof *program);
	char **texts = f8_calloc(graph->n_groups + 1, sizeof *texts); // per distinct kernel
	if (!program || !texts ||
	    !(program->groups = f8_calloc(graph->n_groups + 1, sizeof *program->groups))) {
		f8_free(texts);
		f8_codegen_program_destroy(program);
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	}
	f8_status status = F8_OK;
	for (uint32_t g = 0; !status && g < graph->n_groups; g++) {
		f8_kernel *kernel;
		status = f8_codegen_lower_group(graph, g, &kernel, &program->groups[g].args, diag);
		if (status)
			break;
		program->n_groups = g + 1;
		char *text = body_text(kernel);
		if (!text) {
			f8_kir_destroy(kernel);
			status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
			break;
		}
		uint32_t found = F8_NONE;
		for (uint32_t k = 0; k < program->n_kernels && found == F8_NONE; k++)
			if (same_body(texts[k], text))
				found = k;
		if (found != F8_NONE) {
			free(text);
			f8_kir_destroy(kernel);
			program->groups[g].kernel = found;
			continue;
		}
		status = add_kernel(program, kernel, graph->groups[g].family,
				    &program->groups[g].kernel, diag);
		if (status)
			free(text);
		else
			texts[program->n_kernels - 1] = text;
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
