/*
 * A GEMM node's kind, sizes and operand names (ir/gemm.h).
 */
#include "ir/gemm.h" // f8_gemm_kind, f8_gemm_kind_of, f8_gemm_sizes

#include <assert.h> // static_assert
#include <string.h> // strcmp

#include "ir/graph.h" // f8_node, F8_PHASE_BWD
#include "ir/ops.h"   // F8_OP_*, f8_node_attr_int, f8_node_attr_string
#include "ir/shape.h" // f8_type, f8_dim_is_const, f8_dim_value

static const char *const gemm_kind_names[] = {
#define F8_GEMM_KIND_NAME(e, name) name,
	F8_GEMM_KIND_LIST(F8_GEMM_KIND_NAME)
#undef F8_GEMM_KIND_NAME
};
static_assert(sizeof gemm_kind_names / sizeof gemm_kind_names[0] == F8_GEMM_KIND_COUNT,
	      "one name per f8_gemm_kind");

const char *f8_gemm_kind_name(f8_gemm_kind kind) {
	return (unsigned)kind < F8_GEMM_KIND_COUNT ? gemm_kind_names[kind] : "?";
}

bool f8_gemm_kind_from_name(const char *name, f8_gemm_kind *out) {
	for (int i = 0; i < F8_GEMM_KIND_COUNT; i++)
		if (strcmp(gemm_kind_names[i], name) == 0) {
			*out = (f8_gemm_kind)i;
			return true;
		}
	return false;
}

bool f8_gemm_kind_of(const f8_node *node, f8_gemm_kind *out) {
	switch (node->op) {
	// The layout attribute says how w is stored, not which GEMM this is; a forward one the
	// recompute pass cloned into the backward is still a fwd.
	case F8_OP_LINEAR:
	case F8_OP_GROUPED_LINEAR:
		*out = node->phase == F8_PHASE_BWD && !node->recompute ? F8_GEMM_KIND_DGRAD
								       : F8_GEMM_KIND_FWD;
		return true;
	case F8_OP_LINEAR_WGRAD:
	case F8_OP_GROUPED_LINEAR_WGRAD:
		*out = F8_GEMM_KIND_WGRAD;
		return true;
	case F8_OP_FP8_GEMM:
	case F8_OP_FP8_GROUPED_GEMM:
		return f8_gemm_kind_from_name(f8_node_attr_string(node, "gemm", ""), out);
	default:
		return false;
	}
}

/* The product of dims [from, to) of `type` into *out; false when one is not a constant. */
static bool const_product(const f8_type *type, int from, int to, int64_t *out) {
	*out = 1;
	for (int i = from; i < to; i++) {
		if (!f8_dim_is_const(type->shape.dims[i]))
			return false;
		*out *= f8_dim_value(type->shape.dims[i]);
	}
	return true;
}

bool f8_gemm_sizes(const f8_graph *graph, const f8_node *node, int64_t *m, int64_t *n,
		   int64_t *k) {
	const f8_type *a = &graph->values[node->inputs[0]].type;
	const f8_type *b = &graph->values[node->inputs[1]].type;
	const f8_type *y = &graph->values[node->outputs[0]].type;
	int ra = a->shape.rank, rb = b->shape.rank, ry = y->shape.rank;
	if (ra < 1 || rb < 1 || ry < 1)
		return false;
	if (node->op == F8_OP_FP8_GROUPED_GEMM && rb == 2) // wgrad: dy^T (N, rows), x^T (K, rows)
		return const_product(a, 0, 1, m) && const_product(b, 0, 1, n) &&
		       const_product(a, 1, 2, k);
	if (node->op == F8_OP_LINEAR_WGRAD || node->op == F8_OP_GROUPED_LINEAR_WGRAD) {
		if (f8_node_attr_int(node, "transpose_weight", 0)) // x^T dy for a (K, N) weight
			return const_product(b, rb - 1, rb, m) && const_product(a, ra - 1, ra, n) &&
			       const_product(a, 0, ra - 1, k);
		return const_product(a, ra - 1, ra, m) && const_product(b, rb - 1, rb, n) &&
		       const_product(a, 0, ra - 1, k);
	}
	return const_product(y, 0, ry - 1, m) && const_product(y, ry - 1, ry, n) &&
	       const_product(a, ra - 1, ra, k);
}

const char *f8_gemm_operand_name(f8_gemm_kind kind, int which) {
	static const char *const names[F8_GEMM_KIND_COUNT][2] = {
		[F8_GEMM_KIND_FWD] = {"x", "w"},
		[F8_GEMM_KIND_DGRAD] = {"dy", "w"},
		[F8_GEMM_KIND_WGRAD] = {"dy", "x"},
	};
	return (unsigned)kind < F8_GEMM_KIND_COUNT && (which == 0 || which == 1) ? names[kind][which]
										  : "?";
}

const char *f8_gemm_operand_role(const f8_graph *graph, const f8_node *node, int which) {
	f8_gemm_kind kind;
	if (!f8_gemm_kind_of(node, &kind))
		return which ? "b" : "a";
	if (node->op != F8_OP_FP8_GEMM || kind != F8_GEMM_KIND_WGRAD)
		return f8_gemm_operand_name(kind, which); // an FP8GroupedGemm's wgrad is dy^T x
	// dy^T x, or x^T dy for a (K, N) weight: dy's copy is cast from a value the backward made
	// (a recomputed activation is made there too, and is x).
	f8_node_id cast = graph->values[node->inputs[which]].producer;
	if (cast == F8_NONE || graph->nodes[cast].n_inputs == 0)
		return f8_gemm_operand_name(kind, which);
	f8_node_id source = graph->values[graph->nodes[cast].inputs[0]].producer;
	bool gradient = source != F8_NONE && graph->nodes[source].phase == F8_PHASE_BWD &&
			!graph->nodes[source].recompute;
	return gradient ? "dy" : "x";
}
