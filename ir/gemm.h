/*
 * What a GEMM node is: which of a Linear layer's three GEMMs (fwd, dgrad, wgrad), its m, n and
 * k, and the names of its operands. Queries on the graph only, decided by nothing: the
 * precision and fp8-cast passes, the audit and the plan's estimates (runtime/) all ask them, and
 * the runtime must not include passes/ (DESIGN.md, "Compile and run are two programs' worth of
 * code"), so they live here rather than beside the precision pass.
 */
#ifndef F8_IR_GEMM_H
#define F8_IR_GEMM_H

#include <stdbool.h> // bool
#include <stdint.h>  // int64_t

#include "ir/graph.h" // f8_graph, f8_node

/* X(ENUM, name): the three GEMMs of a Linear layer. */
#define F8_GEMM_KIND_LIST(X) \
	X(FWD, "fwd")        \
	X(DGRAD, "dgrad")    \
	X(WGRAD, "wgrad")

typedef enum f8_gemm_kind {
#define F8_GEMM_KIND_ENUM(e, name) F8_GEMM_KIND_##e,
	F8_GEMM_KIND_LIST(F8_GEMM_KIND_ENUM)
#undef F8_GEMM_KIND_ENUM
	F8_GEMM_KIND_COUNT
} f8_gemm_kind;

/* The name of `kind` ("wgrad"), or "?" when it is out of range. */
const char *f8_gemm_kind_name(f8_gemm_kind kind);

/* Looks up a kind by its name (NUL-terminated); true and *out set when found. */
bool f8_gemm_kind_from_name(const char *name, f8_gemm_kind *out);

/* The kind of GEMM node `node` is (a Linear or GroupedLinear of the backward phase is a dgrad,
 * unless the recompute pass cloned it there, and any other a fwd; LinearWgrad and
 * GroupedLinearWgrad; FP8Gemm's and FP8GroupedGemm's gemm attribute); false for nodes that
 * are not one of a Linear layer's GEMMs (a grouped one's GEMMs are its experts'). A Linear's
 * transpose_weight says how its w is stored ((K, N) as ONNX MatMul and GPT-2's Conv1D keep a
 * forward weight, or a dgrad reads a (N, K) one), not its kind. */
bool f8_gemm_kind_of(const f8_node *node, f8_gemm_kind *out);

/* The (m, n, k) of GEMM node `node` (an op with F8_OPF_GEMM): its output (m, n) = a (m, k) b^T,
 * batch dims folded into m; a weight gradient's dW (m, n) = dy^T x, dy (rows, m) and x (rows,
 * n), or x^T dy stored (K, N), contracts over the rows (k). False when a size is not a constant. What the audit and the
 * plan's estimates count as 2 m n k FLOPs. */
bool f8_gemm_sizes(const f8_graph *graph, const f8_node *node, int64_t *m, int64_t *n,
		   int64_t *k);

/* The name of operand `which` (0: a, 1: b) of a GEMM of `kind` as reasons and the audit write
 * it: fwd x and w, dgrad dy and w, wgrad dy and x; "?" for anything else. */
const char *f8_gemm_operand_name(f8_gemm_kind kind, int which);

/* The name of operand `which` of GEMM node `node` in `graph`, as the audit writes it: that of
 * its kind, but for an FP8Gemm wgrad, whose operands are x^T and dy^T when the weight is stored
 * (K, N), the one its copy was cast from; "a" or "b" for a node that is not a Linear's GEMM. */
const char *f8_gemm_operand_role(const f8_graph *graph, const f8_node *node, int which);

#endif
