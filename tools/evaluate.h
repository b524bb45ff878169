/*
 * The compile driver's value evaluator (passes/fuse_patterns.h, f8_value_evaluator): a value
 * of a graph computed from its constants and bound sizes, node by node through the CPU
 * reference kernels (runtime/cpu/kernels.h), for a pass that must know it to decide (an
 * attention mask proven causal by its value).
 *
 * The value's cone may read no parameter, buffer or state, and no input but, when compiling a
 * training step, those f8c train fills itself (attention_mask all ones, position_ids
 * 0..seq-1: runtime/train.h), which the verdict then names; every size in it must be bound,
 * and its tensors at most F8_TOOL_EVALUATE_MAX_BYTES together.
 */
#ifndef F8_TOOLS_EVALUATE_H
#define F8_TOOLS_EVALUATE_H

#include <stdbool.h> // bool

#include "passes/fuse_patterns.h" // f8_value_evaluator

#define F8_TOOL_EVALUATE_MAX_BYTES (4ull << 30)

typedef struct f8_tool_evaluator {
	f8_value_evaluator base;  // first: the passes see this
	bool fill_training_inputs; // feed the inputs f8c train fills (a training step)
} f8_tool_evaluator;

/* An evaluator for a training step (`training`) or an inference graph. */
f8_tool_evaluator f8_tool_evaluator_make(bool training);

#endif
