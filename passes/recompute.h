/*
 * The recompute pass: which forward values a training step drops after the forward and makes
 * again in the backward, with Megatron-LM's options and a memory budget.
 *
 * requires: canonicalize (types), training (the backward), fp8-cast (the casts and scaling
 * tables it must keep right); before fuse, which groups the recomputing nodes like the rest.
 *
 * A unit is a set of forward nodes of one or more transformer layers ("layers.<i>." scopes,
 * f8_scope_layer): Megatron-LM's --recompute-granularity full makes each unit whole layers
 * (--recompute-method uniform: --recompute-num-layers consecutive layers a unit; block: the
 * first --recompute-num-layers layers, each a unit); selective makes one unit per layer and
 * module of --recompute-modules:
 *   core_attn   the attention (an Attention node, or an unfused attention's "*.core" scope):
 *               its output and log-sum-exp (its probabilities, unfused) are made again
 *   layernorm   the norms ("*norm*", "ln*" scopes) and the casts of their outputs
 *   mlp         a dense layer's MLP ("mlp", "ffn", "feed_forward", "fc*", "*_proj" below
 *               the layer, but not attention's projections)
 *   moe         an MoE layer's MLP (one with a Router): the router, dispatch, experts, combine
 *   moe_act     an MoE layer's expert activation (its SwiGLU or GELU and their casts)
 * A unit's values that backward nodes of its own layers read are dropped: those readers read
 * copies that nodes of phase bwd make (each node a clone of the forward node, with the reason
 * in `recompute`), placed just before the first of them in the program, in the forward's
 * order, so that the schedule pass's slab holds them only from there to their last reader.
 * What a unit reads from outside (its checkpoints: the layer input, a leaf, a value a node
 * outside the unit makes) stays as it is, and so do values that later layers' backward reads
 * (a layer's output): the unit recomputes for its own backward only. Dropped values carry the
 * `recompute` annotation.
 *
 * FP8, by construction: a recomputed cast under delayed scaling reads the scale its original
 * read (the same slot of `<table>.forward`, an Identity copy of the table's scales made in the
 * forward, before the table's ScalingUpdate, which ends the forward, and kept for the
 * backward: neither that update nor, under pipeline parallelism's 1F1B, other micro-batches'
 * forwards in between change it) and its amax output is read by nothing: the amax history records each forward value once, as without recompute. A cast
 * that finds its scale from the data (current, rowwise, block, MX) is never recomputed: its
 * FP8 copies stay from the forward (checkpoints of the unit), since recomputing them would
 * find the scale anew. Dropout (random) and collectives are kept the same way.
 *
 * The memory budget (f8_recompute_options.budget_bytes): after the units asked for, the pass
 * adds units from the candidates (each layer's core_attn, layernorm, mlp or moe, and whole
 * layers), the fewest recompute FLOPs per byte saved first, until the step's memory
 * (ir/memory.h, f8_memory_estimate of the plan fuse and schedule make) fits: it tries each
 * count of candidates on a copy of the graph. The report and every reason say what was chosen
 * and why; a budget that even every candidate misses is F8_ERR_ARGUMENT with the smallest
 * plan's size.
 */
#ifndef F8_PASSES_RECOMPUTE_H
#define F8_PASSES_RECOMPUTE_H

#include <stdbool.h> // bool
#include <stdint.h>  // uint32_t, int64_t, uint64_t
#include <stdio.h>   // FILE

#include "ir/diag.h"       // f8_status, f8_diag
#include "ir/graph.h"      // f8_graph
#include "passes/target.h" // f8_target_table

/* X(ENUM, name): --recompute-granularity. NONE recomputes nothing (but a budget may). */
#define F8_RECOMPUTE_GRANULARITY_LIST(X) \
	X(NONE, "none")                  \
	X(FULL, "full")                  \
	X(SELECTIVE, "selective")

typedef enum f8_recompute_granularity {
#define F8_RECOMPUTE_GRANULARITY_ENUM(e, name) F8_RECOMPUTE_GRANULARITY_##e,
	F8_RECOMPUTE_GRANULARITY_LIST(F8_RECOMPUTE_GRANULARITY_ENUM)
#undef F8_RECOMPUTE_GRANULARITY_ENUM
	F8_RECOMPUTE_GRANULARITY_COUNT
} f8_recompute_granularity;

/* X(ENUM, name): --recompute-method, for full granularity. NONE: not given. */
#define F8_RECOMPUTE_METHOD_LIST(X) \
	X(NONE, "none")             \
	X(UNIFORM, "uniform")       \
	X(BLOCK, "block")

typedef enum f8_recompute_method {
#define F8_RECOMPUTE_METHOD_ENUM(e, name) F8_RECOMPUTE_METHOD_##e,
	F8_RECOMPUTE_METHOD_LIST(F8_RECOMPUTE_METHOD_ENUM)
#undef F8_RECOMPUTE_METHOD_ENUM
	F8_RECOMPUTE_METHOD_COUNT
} f8_recompute_method;

/* X(ENUM, name): --recompute-modules, for selective granularity (bits of `modules`). FULL is
 * no module of Megatron-LM's: the whole layer, a candidate of the budget. */
#define F8_RECOMPUTE_MODULE_LIST(X)  \
	X(CORE_ATTN, "core_attn")    \
	X(LAYERNORM, "layernorm")    \
	X(MLP, "mlp")                \
	X(MOE, "moe")                \
	X(MOE_ACT, "moe_act")        \
	X(FULL, "full")

typedef enum f8_recompute_module {
#define F8_RECOMPUTE_MODULE_ENUM(e, name) F8_RECOMPUTE_MODULE_##e,
	F8_RECOMPUTE_MODULE_LIST(F8_RECOMPUTE_MODULE_ENUM)
#undef F8_RECOMPUTE_MODULE_ENUM
	F8_RECOMPUTE_MODULE_COUNT
} f8_recompute_module;

const char *f8_recompute_granularity_name(f8_recompute_granularity granularity);
const char *f8_recompute_method_name(f8_recompute_method method);
const char *f8_recompute_module_name(f8_recompute_module module);
bool f8_recompute_granularity_from_name(const char *name, f8_recompute_granularity *out);
bool f8_recompute_method_from_name(const char *name, f8_recompute_method *out);
/* A module of --recompute-modules (FULL is not one). */
bool f8_recompute_module_from_name(const char *name, f8_recompute_module *out);

/* Megatron-LM's recompute options, and f8c's memory budget. A zeroed struct recomputes
 * nothing. */
typedef struct f8_recompute_options {
	f8_recompute_granularity granularity;
	f8_recompute_method method;   // full only: uniform or block
	int64_t num_layers;           // full only: layers a unit (uniform), layers recomputed (block)
	uint32_t modules;             // selective only: bits 1 << f8_recompute_module; 0: core_attn
	uint64_t budget_bytes;        // --memory-budget: the step's device memory at most; 0: none
} f8_recompute_options;

/* The options Megatron-LM takes together (full needs a method and a layer count, selective
 * takes neither, modules only with selective), F8_ERR_ARGUMENT naming the option otherwise. */
f8_status f8_recompute_options_check(const f8_recompute_options *options, f8_diag *diag);

/* Whether `options` asks for any recompute (a granularity or a budget). */
bool f8_recompute_options_any(const f8_recompute_options *options);

/*
 * Runs the pass over `graph` as above (nothing when !f8_recompute_options_any(options)).
 * `target` is what fuse groups for (the budget's trials run fuse and schedule on copies).
 * Writes one line per unit and the budget's choice to `report` when not NULL. Errors:
 * F8_ERR_ARGUMENT for options the model cannot take (more layers than it has, a module it
 * lacks, a budget nothing meets), F8_ERR_INVALID for a graph that is fused already or has no
 * backward, F8_ERR_NOMEM.
 */
f8_status f8_pass_recompute_run(f8_graph *graph, const f8_recompute_options *options,
				const f8_target_table *target, FILE *report, f8_diag *diag);

#endif
