/*
 * What the tensor-parallel pass's files share (passes/tensor_parallel.c, the regions and
 * sequence parallelism; passes/tensor_parallel_vocab.c, vocabulary parallelism).
 */
#ifndef F8_PASSES_TENSOR_PARALLEL_INTERNAL_H
#define F8_PASSES_TENSOR_PARALLEL_INTERNAL_H

#include <stdint.h> // int64_t, uint32_t
#include <stdio.h>  // FILE

#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/graph.h" // f8_graph

/* Adds a node of `op` reading `inputs` (n) with `attrs`, in `scope`, its one output `name` (NULL:
 * out of memory, said so), appended to the program. */
f8_status f8_tp_add_node(f8_graph *graph, f8_op op, const f8_value_id *inputs, uint32_t n,
			 const f8_attr *attrs, uint32_t n_attrs, const char *scope, const char *name,
			 f8_node_id *out, f8_diag *diag);

/* Every node's output types inferred again, in program order. */
f8_status f8_tp_infer_all(f8_graph *graph, f8_diag *diag);

/*
 * Vocabulary parallelism (passes/tensor_parallel_vocab.c says what): after the regions are
 * split, before sequence parallelism. The tables it split into *n_tables; its decisions to
 * `report` when not NULL.
 */
f8_status f8_tp_split_vocabulary(f8_graph *graph, int64_t ranks, FILE *report,
				 uint32_t *n_tables, f8_diag *diag);

#endif
