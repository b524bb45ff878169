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
#include "runtime/executor.h"      // f8_executor

/*
 * Fills every param and buffer leaf of the executor's graph, and every other leaf that has an
 * initializer (the FP8 scale tables start at 1): from its initializer, converted exactly (or
 * rounded to nearest even) to the leaf's dtype, else (params) from `seed`. A buffer without
 * an initializer is an error (nothing says what it holds); so is a file that changed since the
 * import (shorter than the initializer says).
 */
f8_status f8_rt_parameters_init(f8_executor *executor, uint64_t seed, f8_diag *diag);

#endif
