/*
 * The target table: what the chip a plan is compiled for can run, as the passes ask it.
 *
 * What a pass may fuse, or must leave to a library call, depends on what codegen can lower and
 * on the backend; codegen fills the table (codegen/target.h, f8_codegen_target_table) and the
 * compile driver hands it to the passes through the pipeline options (passes/pipeline.h), so
 * that no pass includes codegen/ (DESIGN.md, "Compile and run are two programs' worth of code").
 * What the chip's FP8 GEMMs run is a fact of the chip, not of codegen: F8_TARGET_LIST declares
 * it once, and f8_target_table_default gives it without codegen's answers, so that FP8 planning
 * alone (f8c audit, the precision tests) needs no code generator.
 */
#ifndef F8_PASSES_TARGET_H
#define F8_PASSES_TARGET_H

#include <stdbool.h> // bool
#include <stdint.h>  // int64_t

#include "ir/graph.h" // f8_graph, f8_node_id, f8_recipe

/* A mask of recipes: bit 1u << r for recipe r. */
#define F8_RECIPE_BIT(r) (1u << (r))
/* Every FP8 recipe (not NONE). */
#define F8_TARGET_RECIPES_ALL                                                                \
	(F8_RECIPE_BIT(F8_RECIPE_DELAYED) | F8_RECIPE_BIT(F8_RECIPE_CURRENT) |               \
	 F8_RECIPE_BIT(F8_RECIPE_ROWWISE) | F8_RECIPE_BIT(F8_RECIPE_BLOCK) |                 \
	 F8_RECIPE_BIT(F8_RECIPE_MXFP8))
/* Hopper's cuBLASLt: per-tensor, row and block scales, no MX (E8M0 block scales are sm_100's). */
#define F8_TARGET_RECIPES_SM_90 (F8_TARGET_RECIPES_ALL & ~F8_RECIPE_BIT(F8_RECIPE_MXFP8))

/*
 * X(ENUM, name, recipes, k, n, m): what a plan is compiled for, and what its FP8 GEMMs run:
 * the recipes they run natively (a mask of F8_RECIPE_BIT) and the multiples the GEMM's K, N
 * and M must be (1: any size). cpu runs every recipe (emulated exactly) and has no shape rules;
 * sm_90 (Hopper) and sm_100 (Blackwell) have cuBLASLt's: K and N multiples of 16, M of 8.
 */
#define F8_TARGET_LIST(X)                                         \
	X(CPU, "cpu", F8_TARGET_RECIPES_ALL, 1, 1, 1)             \
	X(SM_90, "sm_90", F8_TARGET_RECIPES_SM_90, 16, 16, 8)     \
	X(SM_100, "sm_100", F8_TARGET_RECIPES_ALL, 16, 16, 8)

typedef enum f8_target {
#define F8_TARGET_ENUM(e, name, recipes, k, n, m) F8_TARGET_##e,
	F8_TARGET_LIST(F8_TARGET_ENUM)
#undef F8_TARGET_ENUM
	F8_TARGET_COUNT
} f8_target;

const char *f8_target_name(f8_target target);
bool f8_target_from_name(const char *name, f8_target *out);

/* What the chip's FP8 GEMMs support: what the precision pass checks each FP8 GEMM against. */
typedef struct f8_target_gemm {
	unsigned recipes;   // mask of F8_RECIPE_BIT: the recipes its FP8 GEMMs run natively
	int64_t k_multiple; // the contraction K must be a multiple of this (1: any)
	int64_t n_multiple; // the output's columns N likewise
	int64_t m_multiple; // the output's rows M likewise
} f8_target_gemm;

/* The f8_target_gemm of an F8_TARGET_LIST entry, for tables built from the list. */
#define F8_TARGET_GEMM_OF(recipe_mask, k, n, m) \
	{.recipes = (recipe_mask), .k_multiple = (k), .n_multiple = (n), .m_multiple = (m)}

/* What the passes may ask of a target. The tables are static and constant: whoever hands one
 * in keeps no state in it, and the passes never free it. */
typedef struct f8_target_table {
	f8_target chip;          // the chip a plan is compiled for (--target)
	f8_target_gemm fp8_gemm; // what its FP8 GEMMs run (F8_TARGET_LIST's entry)
	// True when codegen can lower node `node` of `graph` (types inferred) into a generated
	// kernel: the fuse pass seeds and grows kernels only with such nodes. NULL: nothing is
	// lowered (a table without codegen): fuse groups nothing.
	bool (*supports_node)(const f8_graph *graph, f8_node_id node);
	// True when node `node` runs as a library call on this target (GEMMs through cuBLASLt,
	// attention through cuDNN, collectives through NCCL; on cpu the reference kernels): the
	// fuse pass never puts it in a kernel, whatever supports_node says. NULL: none does.
	bool (*runs_in_library)(const f8_graph *graph, f8_node_id node);
} f8_target_table;

/* `chip`'s table without codegen: its F8_TARGET_LIST facts, supports_node and
 * runs_in_library NULL. Static; NULL when `chip` is not an f8_target. */
const f8_target_table *f8_target_table_default(f8_target chip);

#endif
