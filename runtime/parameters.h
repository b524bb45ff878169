/*
 * The initial contents of a graph's parameters and buffers: the weights of the model file they
 * were imported from (ONNX initializers, inline or in external data), or, for a model
 * description without weights, made up from a seed as Megatron-LM initializes them
 * (ir/weight_init.h).
 */
#ifndef F8_RUNTIME_PARAMETERS_H
#define F8_RUNTIME_PARAMETERS_H

#include <stdint.h> // uint64_t

#include "ir/diag.h"               // f8_status, f8_diag
#include "ir/graph.h"              // f8_graph
#include "runtime/distributed.h"   // f8_dist
#include "runtime/executor.h"      // f8_executor
#include "runtime/plan.h"          // f8_plan_weight_init
#include "runtime/safetensors.h"   // f8_safetensors
#include "runtime/tensor.h"        // f8_rt_tensor

/*
 * Fills every param and buffer leaf of the executor's graph (each rank of `dist` its part of a
 * leaf the ranks split, made whole first; `dist` NULL: one rank), and every other leaf that has
 * initial contents (the FP8 scale tables start at 1): from `weights` (a plan's
 * weights.safetensors; may be NULL) where it has the leaf by name, else from its initializer,
 * converted exactly (or rounded to nearest even) to the leaf's dtype, else (params) by the
 * rule of ir/weight_init.h: the one `made` (a --weights seed plan's record; may be NULL)
 * gives it, from made's seed, or without a record the rule the graph gives it, from `seed`;
 * the floats rounded to nearest even to the leaf's dtype either way, in parallel over the
 * machine's processors. A buffer with none of these is an error (nothing says what it holds);
 * so is a parameter `made` lacks, or of another dtype there, a model file that changed since
 * the import (shorter than the initializer says), and a tensor of `weights` of another dtype
 * or shape than its leaf.
 */
f8_status f8_rt_parameters_init(f8_executor *executor, const f8_dist *dist, uint64_t seed,
				const f8_safetensors *weights, const f8_plan_weight_init *made,
				f8_diag *diag);

/* The initial contents of leaf `value` (with an initializer and constant dims) as a host
 * tensor of its dtype, which the call makes (*out; the caller destroys it): what a plan's
 * weights.safetensors holds, whole where the ranks of `mesh` (the graph's) split the leaf.
 * F8_ERR_INVALID, F8_ERR_IO, F8_ERR_NOMEM. */
f8_status f8_rt_parameters_read_initializer(const f8_value *value, const uint32_t *mesh,
					    f8_rt_tensor *out, f8_diag *diag);

#endif
