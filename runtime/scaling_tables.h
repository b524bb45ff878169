/*
 * Delayed scaling's tables as a step holds them (passes/fp8_cast.h makes them): for each of
 * fp8.weights, fp8.activations and fp8.gradients, the leaves <name>.scale f32[n],
 * <name>.amax_history f32[len, n] and <name>.nonfinite i64[], and what each of the n slots
 * scales, in words that name the tensor and not the slot's number: "w of layers.0.attn.qkv",
 * "dy of layers.1.mlp.experts.fc1 [expert 2]".
 *
 * The labels are the slots' names across layouts. A slot's number is its cast's place in one
 * program, which differs between a model's programs (each pipeline stage numbers its own
 * slots from 0; the backward numbers the gradients' from the last layer): a checkpoint keys
 * each slot's scale and history by its label (runtime/checkpoint.h), and --log-fp8-stats names
 * the slots by them.
 */
#ifndef F8_RUNTIME_SCALING_TABLES_H
#define F8_RUNTIME_SCALING_TABLES_H

#include <stdint.h> // uint32_t

#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/graph.h" // f8_graph, f8_value_id, f8_dtype

enum { F8_RT_SCALING_TABLES_MAX = 3 };

typedef struct f8_rt_scaling_table {
	char name[32];              // "fp8.weights"
	f8_value_id scale, history; // <name>.scale f32[n], <name>.amax_history f32[len, n]
	f8_value_id nonfinite;      // <name>.nonfinite i64[]: the amaxes skipped, or F8_NONE
	char **labels;              // (n_slots) what each slot scales, each once in the table
	f8_dtype *formats;          // (n_slots) the FP8 format its casts give
	uint32_t n_slots;
} f8_rt_scaling_table;

/*
 * The graph's scaling tables, in input order, into tables[] (*n of them, at most
 * F8_RT_SCALING_TABLES_MAX). Each slot's label is its cast's reason up to the GEMMs it feeds
 * ("w of layers.0.attn.qkv"); a grouped cast's slots (one per expert) add " [expert E]"; a
 * label the table has already takes " #2", " #3"... in slot order; a slot that no cast reads
 * is "slot N". Free with f8_rt_scaling_tables_free, on failure too.
 */
f8_status f8_rt_scaling_tables_find(const f8_graph *graph, f8_rt_scaling_table *tables,
				    uint32_t *n, f8_diag *diag);

void f8_rt_scaling_tables_free(f8_rt_scaling_table *tables, uint32_t n);

#endif
