/*
 * The target tables (codegen/target.h): one per chip of F8_TARGET_LIST, constant.
 */
#include "codegen/target.h" // f8_codegen_target_table

#include <assert.h> // static_assert

#include "codegen/lower.h" // f8_codegen_can_lower
#include "ir/ops.h"        // f8_op_get_info, F8_OPF_GEMM, F8_OPF_COLLECTIVE

/* The nodes a backend runs through a library, on every chip: GEMMs (cuBLASLt; OpenBLAS or the
 * FP8 emulation on the CPU), attention (cuDNN; the reference kernels) and collectives (NCCL;
 * the CPU's ranks in one process). None is a generated kernel's member. */
static bool runs_in_library(const f8_graph *graph, f8_node_id node) {
	f8_op op = graph->nodes[node].op;
	if (op == F8_OP_ATTENTION || op == F8_OP_ATTENTION_GRAD || op == F8_OP_ATTENTION_PACKED ||
	    op == F8_OP_ATTENTION_PACKED_GRAD)
		return true;
	return (f8_op_get_info(op)->flags & (F8_OPF_GEMM | F8_OPF_COLLECTIVE)) != 0;
}

// One list for the chips, their FP8 GEMM facts (passes/target.h) and codegen's answers: what
// lowers does not depend on the chip today, since every backend runs the same generated kernels.
#define F8_CODEGEN_TABLE(e, name, recipes, k, n, m)                                     \
	{.chip = F8_TARGET_##e,                                                        \
	 .fp8_gemm = F8_TARGET_GEMM_OF(recipes, k, n, m),                              \
	 .supports_node = f8_codegen_can_lower,                                        \
	 .runs_in_library = runs_in_library},
static const f8_target_table tables[] = {F8_TARGET_LIST(F8_CODEGEN_TABLE)};
#undef F8_CODEGEN_TABLE
static_assert(sizeof tables / sizeof tables[0] == F8_TARGET_COUNT, "one table each");

const f8_target_table *f8_codegen_target_table(f8_target chip) {
	return (unsigned)chip < F8_TARGET_COUNT ? &tables[chip] : NULL;
}

const f8_target_table *f8_codegen_target_table_for(const f8_fp8_options *fp8) {
	return f8_codegen_target_table(fp8 ? fp8->target : f8_fp8_options_default().target);
}
