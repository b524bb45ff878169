/*
 * The target tables codegen fills for the passes (passes/target.h): what it lowers into
 * generated kernels (f8_codegen_can_lower), what runs as a library call, and the chip's FP8
 * GEMM facts. The compile driver (tools/, runtime/train.c, the tests) hands one to the pipeline
 * options, so that the passes ask codegen without including it.
 */
#ifndef F8_CODEGEN_TARGET_H
#define F8_CODEGEN_TARGET_H

#include "passes/precision.h" // f8_fp8_options
#include "passes/target.h"    // f8_target, f8_target_table

/* The table of `chip`: static and constant, never freed; NULL when `chip` is not an f8_target.
 * supports_node is f8_codegen_can_lower on every chip (the CPU backend runs the same generated
 * kernels as the GPUs, compiled by ORC JIT); runs_in_library is true for GEMMs, Attention and
 * AttentionGrad, and collectives. */
const f8_target_table *f8_codegen_target_table(f8_target chip);

/* The table a compilation with FP8 options `fp8` asks for: its --target, or, when no FP8 is
 * planned (NULL), the default target of f8_fp8_options_default (sm_90). */
const f8_target_table *f8_codegen_target_table_for(const f8_fp8_options *fp8);

#endif
