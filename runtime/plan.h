/*
 * Plans on disk (DESIGN.md, "plan"): the executable f8c compile writes and every other command
 * runs, without the model it came from and without the compiler. A plan is a folder:
 *
 *   plan.json            the whole decision record: the format and its version, the f8c that
 *                        wrote it, the model and the compile options it was compiled from (as
 *                        given, in order), the graph after every pass in the text IR (every
 *                        precision, recipe, scaling slot, kernel and slab decision with its
 *                        reason; `f8c dump-ir PLAN --format json` gives its JSON form), the
 *                        kernels (name, parameters, launch geometry), each fused group's
 *                        launches with their bindings and scratch, the slab, the estimates per
 *                        micro-batch, the files below with their sizes and checksums, and a
 *                        digest over all of it
 *   kernels.ptx          the generated kernels for sm_90
 *   weights.safetensors  the initial contents of every leaf that has some in the model: an
 *                        ONNX model's weights, the scaling tables' first scales. Parameters a
 *                        description leaves to f8c are made where the plan runs, by the rule of
 *                        ir/weight_init.h, the same bits as the exporter writes (a 175B plan
 *                        does not carry 700 GB of random numbers): from the run's seed, or,
 *                        for a plan compiled with --weights seed, from the record below.
 *
 * --weights seed adds "weight_init" to plan.json, under the digest like everything else: the
 * rule's name and version, the seed, and for each made-up parameter its rule (kind, std) and
 * dtype, so that the plan, not the run, fixes its initial weights.
 *
 * Loading checks the record, never recompiles it: the format and the writer's version; the
 * digest (an edit of any kind, of the graph, the options, a launch's geometry or a binding, is
 * refused with a hint to compile again); the graph parses and verifies, its slab plan holds;
 * every kernel has an entry in kernels.ptx, every binding names a value of the graph, a scratch
 * of its group or a parameter of the right kind; the files' sizes and checksums; a weight_init
 * record of this f8c's rule and version, naming each parameter the weights file lacks once, in
 * its dtype.
 */
#ifndef F8_RUNTIME_PLAN_H
#define F8_RUNTIME_PLAN_H

#include <stdbool.h> // bool
#include <stdint.h>  // uint32_t, uint64_t, int64_t

#include "ir/diag.h"             // f8_status, f8_diag
#include "ir/graph.h"            // f8_graph, f8_value_id
#include "ir/launch.h"           // f8_launch_geometry, f8_kernel_param_kind
#include "ir/memory.h"           // f8_memory_estimate
#include "ir/shape.h"            // f8_dim
#include "ir/weight_init.h"       // f8_weight_init
#include "runtime/safetensors.h" // f8_safetensors

#define F8_PLAN_FORMAT "f8c-plan"
#define F8_PLAN_FORMAT_VERSION 2

typedef struct f8_plan_param {
	const char *name;
	f8_kernel_param_kind kind;
	f8_dtype dtype; // buffers: the element dtype; sizes: i64
} f8_plan_param;

/* A kernel of kernels.ptx. */
typedef struct f8_plan_kernel {
	const char *name;          // its .entry
	f8_plan_param *params;     // (n_params)
	uint32_t n_params;
	f8_launch_geometry geometry;
	uint32_t *grid_sizes;      // (n_grid_sizes) the size parameters whose product is the rows
	uint32_t n_grid_sizes;
} f8_plan_kernel;

/* A table argument: n_rows rows of n_columns cells, each a constant or a value's address. */
typedef struct f8_plan_table {
	uint32_t n_rows, n_columns;
	f8_kernel_param_kind *columns; // (n_columns)
	const char **names;          // (n_columns)
	f8_value_id *values;         // (n_rows * n_columns) F8_NONE: the cell is constants[i]
	int64_t *constants;          // (n_rows * n_columns)
} f8_plan_table;

/* What one parameter of a launch is bound to. */
typedef struct f8_plan_arg {
	f8_value_id value;     // a buffer bound to a value, else F8_NONE
	uint32_t scratch;      // a buffer bound to a scratch of the group, else F8_NONE
	f8_dim dim;            // a size
	f8_plan_table *table;  // a table, else NULL
} f8_plan_arg;

typedef struct f8_plan_launch {
	uint32_t kernel;    // index into the plan's kernels
	f8_plan_arg *args;  // (that kernel's n_params)
} f8_plan_launch;

typedef struct f8_plan_scratch {
	f8_dtype dtype;
	f8_dim count;  // elements
} f8_plan_scratch;

/* A fused group of the graph (by the graph's group index): its launches in order. */
typedef struct f8_plan_group {
	f8_plan_launch *launches;  // (n_launches)
	uint32_t n_launches;
	f8_plan_scratch *scratch;  // (n_scratch) zeroed before the group's first launch
	uint32_t n_scratch;
	const char *error;         // the data error its kernels report, or NULL
	uint32_t error_scratch;    // the scratch holding it (row + 1, 0: none)
} f8_plan_group;

/* What the estimates say, per micro-batch (every phase once). */
typedef struct f8_plan_estimates {
	uint32_t kernel_launches;
	double gemm_flops;   // 2 m n k of the graph's GEMMs; < 0 when a size is symbolic
	double kernel_bytes; // what the generated kernels read and write; < 0 when unknown
} f8_plan_estimates;

/* A parameter a --weights seed plan makes: by its rule, from the record's seed, in its dtype. */
typedef struct f8_plan_made_weight {
	f8_value_id value;   // a parameter leaf of the plan's graph
	f8_weight_init rule;
	f8_dtype dtype;      // the leaf's: the rule's floats are converted to it
} f8_plan_made_weight;

/* plan.json's "weight_init": how the parameters without weights in the model are made. */
typedef struct f8_plan_weight_init {
	uint64_t seed;
	f8_plan_made_weight *weights; // (n_weights) in the graph's order of leaves
	uint32_t n_weights;
} f8_plan_weight_init;

/* A plan, loaded or made by the compile driver; everything owned by it (its arena). */
typedef struct f8_plan {
	f8_graph *graph;            // after every pass, verified
	const char *f8c_version;    // the writer's
	const char *model;          // what it was compiled from, for people (never opened)
	const char **compile_args;  // (n_compile_args)
	uint32_t n_compile_args;
	bool training;              // a training step (else the forward graph)
	f8_plan_kernel *kernels;    // (n_kernels)
	uint32_t n_kernels;
	f8_plan_group *groups;      // (n_groups == graph->n_groups)
	uint32_t n_groups;
	uint64_t slab_bytes;        // the schedule pass's slab (0: unplanned)
	f8_plan_estimates estimates;
	char *ptx;                  // kernels.ptx's text
	f8_safetensors *weights;    // weights.safetensors, open (loaded plans; NULL when made)
	f8_plan_weight_init *weight_init; // --weights seed's record; NULL: the run's seed
	f8_arena *arena;
} f8_plan;

/* An empty plan owning `graph` (NULL allowed) whose records the caller fills from the arena
 * (the compile driver, tools/). F8_ERR_NOMEM. */
f8_status f8_plan_create(f8_graph *graph, f8_plan **out, f8_diag *diag);

/*
 * Writes plan `plan` as folder `dir` (made if missing): weights.safetensors from the initial
 * contents of the graph's leaves that have an initializer (read from the model's files now),
 * kernels.ptx, then plan.json (with plan->weight_init's record when there is one), each
 * written atomically, so that a plan.json that exists belongs to a whole plan. F8_ERR_IO naming the file that could not be written or read;
 * F8_ERR_NOMEM.
 */
f8_status f8_plan_write(const char *dir, const f8_plan *plan, f8_diag *diag);

/*
 * Makes `plan` a --weights seed plan: fills plan->weight_init (from its arena) with `seed` and,
 * for every parameter leaf of its graph, the rule ir/weight_init.h gives it and its dtype, for
 * f8_plan_write to record instead of leaving the weights to the run's seed. `model` names the
 * model in messages. A parameter with weights in the model (an ONNX initializer) is refused,
 * F8_ERR_ARGUMENT naming it: such a plan carries the model's weights, not a seed's. F8_ERR_NOMEM.
 */
f8_status f8_plan_record_weight_init(f8_plan *plan, uint64_t seed, const char *model,
				     f8_diag *diag);

/* True when `path` is a folder with a plan.json in it. */
bool f8_plan_is_dir(const char *path);

/*
 * Loads the plan in folder `dir` and checks it as the header says, for f8c version
 * `f8c_version`. *out is the caller's (f8_plan_destroy); NULL on failure: F8_ERR_IO (a file
 * that cannot be read), F8_ERR_PARSE (plan.json is not JSON of the plan's form), F8_ERR_INVALID
 * (a version, the digest or a consistency check fails; the message names what, the hint how
 * to mend it).
 */
f8_status f8_plan_load(const char *dir, const char *f8c_version, f8_plan **out, f8_diag *diag);

void f8_plan_destroy(f8_plan *plan);

/*
 * Where the groups' scratch lies in the one allocation a run of `plan` makes for it: groups run
 * one after another and zero their scratch first, so all share one region, as large as the
 * most any group needs; a group's data-error flag (error_scratch), read after the run, has a
 * place of its own after it. at[g] (the caller's, plan->groups[g].n_scratch entries; NULL:
 * not wanted) gets group g's offsets, shared[g] (NULL: not wanted) the bytes of its part of the
 * shared region (from offset 0); *bytes the allocation's size. Sizes from `symbol_values`
 * (NULL: the counts must be constant); each buffer aligned to F8_SLAB_ALIGNMENT.
 * F8_ERR_ARGUMENT when a count does not evaluate.
 */
f8_status f8_plan_scratch_layout(const f8_plan *plan, const int64_t *symbol_values, uint64_t **at,
				 uint64_t *shared, uint64_t *bytes, f8_diag *diag);

/* The device memory a training step of `plan` takes on one GPU (ir/memory.h), with its groups'
 * scratch (f8_plan_scratch_layout) among the workspaces. What
 * plan.json's "memory" section says. */
f8_memory_estimate f8_plan_memory(const f8_plan *plan);

#endif
