/*
 * The type and shape functions named in ir/ops.def, one per shape rule (several ops share
 * one), declared from the table itself so that a missing function is a link error.
 */
#ifndef F8_IR_INFER_H
#define F8_IR_INFER_H

#include "ir/ops.h" // f8_infer_fn's parameter types

#define X(e, name, min_in, max_in, min_out, max_out, attrs, infer, flags)                    \
	f8_status f8_infer_##infer(const struct f8_graph *graph, const struct f8_node *node,   \
				   f8_type *outputs, f8_diag *diag);
#include "ir/ops.def"
#undef X

#endif
