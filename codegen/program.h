/*
 * A graph's kernels: every fused group lowered (codegen/lower.h), the groups of identical
 * layers sharing one kernel. This is what a plan carries (kernels.ptx holds one entry per
 * kernel) and what the CPU backend compiles once per executor.
 */
#ifndef F8_CODEGEN_PROGRAM_H
#define F8_CODEGEN_PROGRAM_H

#include <stdint.h> // uint32_t

#include "codegen/kir.h"   // f8_kernel
#include "codegen/lower.h" // f8_kernel_arg
#include "ir/diag.h"       // f8_status, f8_diag
#include "ir/graph.h"      // f8_graph

/* One launch of a group: which kernel, with which bindings. */
typedef struct f8_codegen_launch {
	uint32_t kernel;     // index into the program's kernels
	f8_kernel_arg *args; // (that kernel's n_params) this launch's bindings
} f8_codegen_launch;

/* One group of the graph: its launches in order, its scratch buffers and its data error, as
 * codegen/lower.h's f8_lowered_group says. */
typedef struct f8_codegen_group {
	f8_codegen_launch *launches; // (n_launches)
	uint32_t n_launches;
	f8_kernel_scratch *scratch;  // (n_scratch)
	uint32_t n_scratch;
	const char *error;
	uint32_t error_scratch;
} f8_codegen_group;

typedef struct f8_codegen_program {
	f8_kernel **kernels;      // (n_kernels) distinct kernels, named <family>_<index>
	uint32_t n_kernels;
	f8_codegen_group *groups; // (n_groups) by the graph's group index
	uint32_t n_groups;
} f8_codegen_program;

/*
 * Lowers every group of `graph` (types inferred, fused). Two groups share a kernel when their
 * kernels print the same (parameters are named by position, so identical layers do). *out is
 * the caller's, freed with f8_codegen_program_destroy; NULL on failure, with the diagnostic of
 * the group that failed.
 */
f8_status f8_codegen_program_create(const f8_graph *graph, f8_codegen_program **out,
				    f8_diag *diag);

void f8_codegen_program_destroy(f8_codegen_program *program);

#endif
