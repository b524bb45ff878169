/*
 * Plans on disk (DESIGN.md, "plan"): a folder with plan.json, the whole decision record, and
 * kernels.ptx, the generated kernels for sm_90.
 *
 * plan.json holds: the format and its version, the f8c version that wrote it, the model and
 * the compile options it was compiled from (the command line's, in order), the graph after all
 * passes in the text IR (the source of truth: every precision, recipe, scaling slot and kernel
 * decision with its reason; `f8c dump-ir PLAN --format json` gives its JSON form), the kernels (name, family,
 * parameters, launch geometry) and each fused group's launches with their bindings (a table
 * parameter's: its columns and its rows, each cell a constant or %value, the value whose
 * address the launcher writes there), the
 * buffer plan (the slab's size; each value's offset is in the graph), the estimates per
 * micro-batch (GEMM FLOPs, the bytes the generated kernels move, launches), and
 * kernels.ptx's size and FNV-1a 64 checksum.
 *
 * Loading refuses, with an error that says what and how to mend it: another format or format
 * version, a plan from another f8c version, a graph that does not parse or verify, kernels that
 * are not what the graph lowers to today, and a kernels.ptx that is missing, of another size or
 * checksum, or without an entry the plan lists.
 */
#ifndef F8_RUNTIME_PLAN_H
#define F8_RUNTIME_PLAN_H

#include <stdbool.h> // bool
#include <stdint.h>  // uint32_t

#include "codegen/llvm_lower.h" // f8_llvm_geometry
#include "codegen/program.h"    // f8_codegen_program
#include "ir/diag.h"            // f8_status, f8_diag
#include "ir/graph.h"           // f8_graph

#define F8_PLAN_FORMAT "f8c-plan"
#define F8_PLAN_FORMAT_VERSION 1

/* What a plan is written from. */
typedef struct f8_plan_source {
	const char *f8c_version;          // the writing f8c's version
	const char *model;                // the model file, as given
	const char *const *compile_args;  // (n_compile_args) the compile options, as given
	uint32_t n_compile_args;
	bool training;                    // a training step (else the forward graph)
	const f8_graph *graph;            // after every pass
	const f8_codegen_program *program; // its kernels
	const f8_llvm_geometry *geometry; // (program->n_kernels) their launch geometry
	const char *ptx;                  // kernels.ptx's text
} f8_plan_source;

/*
 * Writes the plan folder `dir` (made if missing): kernels.ptx, then plan.json, each written
 * atomically, so that a plan.json that exists belongs to a whole kernels.ptx. F8_ERR_IO naming
 * the file that could not be written; F8_ERR_NOMEM.
 */
f8_status f8_plan_write(const char *dir, const f8_plan_source *source, f8_diag *diag);

/* A loaded plan; everything owned by it. */
typedef struct f8_plan {
	f8_graph *graph;       // parsed and verified
	char *model;           // the model it was compiled from
	char **compile_args;   // (n_compile_args)
	uint32_t n_compile_args;
	bool training;
	char *ptx;             // kernels.ptx's text
	f8_graph *source;      // the model loaded again for its weights (f8_plan_attach_weights)
} f8_plan;

/* True when `path` is a folder with a plan.json in it. */
bool f8_plan_is_dir(const char *path);

/*
 * Loads the plan in folder `dir`, written by f8c version `f8c_version`, and checks it as the
 * header says. *out is the caller's (f8_plan_destroy); NULL on failure: F8_ERR_IO (a file that
 * cannot be read), F8_ERR_PARSE (plan.json is not JSON of the plan's form), F8_ERR_INVALID (a
 * version or a consistency check fails; the message names what, the hint how to mend it).
 */
f8_status f8_plan_load(const char *dir, const char *f8c_version, f8_plan **out, f8_diag *diag);

/*
 * The text IR does not carry a model's weights: loads the plan's model again and gives each
 * leaf of the plan's graph the initializer of the model's value of its name (an ONNX model's
 * weights; a JSON description has none: its parameters are made up from the seed). F8_ERR_IO
 * (with a hint) when the model is not where the plan says.
 */
f8_status f8_plan_attach_weights(f8_plan *plan, f8_diag *diag);

void f8_plan_destroy(f8_plan *plan);

#endif
