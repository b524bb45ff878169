/*
 * Helpers shared by the type and shape functions (ir/infer_*.c); not part of the IR's API.
 */
#ifndef F8_IR_INFER_INTERNAL_H
#define F8_IR_INFER_INTERNAL_H

#include "ir/graph.h" // f8_graph, f8_node, f8_value
#include "ir/infer.h" // the f8_infer_* prototypes
#include "ir/text.h"  // f8_type_format, f8_dim_format

/* The type of input `i` of `node`, or NULL when it is omitted (an optional input). */
static inline const f8_type *infer_input(const f8_graph *graph, const f8_node *node, uint32_t i) {
	if (i >= node->n_inputs || node->inputs[i] == F8_NONE)
		return NULL;
	return &graph->values[node->inputs[i]].type;
}

/* Fails with a type error: `return f8_infer_fail(diag, "...", ...);`. */
f8_status f8_infer_fail(f8_diag *diag, const char *format, ...) __attribute__((format(printf, 2, 3)));

/* Checks that `type` has a float dtype (`what` names the operand in the message). */
f8_status f8_infer_require_float(const f8_type *type, const char *what, f8_diag *diag);

/* Checks that `type` has an integer dtype. */
f8_status f8_infer_require_integer(const f8_type *type, const char *what, f8_diag *diag);
/* The first row of a rank's shard of a vocabulary split across ranks: one integer, [1]. */
f8_status f8_infer_require_vocab_start(const f8_type *start, f8_diag *diag);

/* Checks that `a` and `b` have the same dtype. */
f8_status f8_infer_require_same_dtype(const f8_type *a, const char *a_what, const f8_type *b,
				   const char *b_what, f8_diag *diag);

/* The dtype of every input, which must all agree, into *out (the inputs must be present). */
f8_status f8_infer_common_dtype(const f8_graph *graph, const f8_node *node, f8_dtype *out,
			     f8_diag *diag);

/* NumPy broadcasting of `a` and `b` into *out. */
f8_status f8_infer_broadcast_shapes(const f8_graph *graph, const f8_shape *a, const f8_shape *b,
			  f8_shape *out, f8_diag *diag);

/* Normalizes attribute axis `axis` for `rank`, failing with a message naming `what`. */
f8_status f8_infer_axis(int64_t axis, int rank, bool allow_end, const char *what, int *out,
		     f8_diag *diag);

/* Checks that the int attribute `name` of `node`, when present, is 0 or 1. */
f8_status f8_infer_require_flag(const f8_node *node, const char *name, f8_diag *diag);

/* Checks that the string attribute `name`, when present, is one of `choices` (NULL-terminated). */
f8_status f8_infer_require_choice(const f8_node *node, const char *name, const char *const *choices,
			       f8_diag *diag);

/* A scalar f32 type: amax, loss. */
static inline f8_type infer_scalar(f8_dtype dtype) {
	return (f8_type){.dtype = dtype};
}

#endif
