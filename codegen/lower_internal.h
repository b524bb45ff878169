/*
 * What the lowering's files share (codegen/lower.c: the single-kernel families; lower_multi.c:
 * the groups that lower to several kernels): the builder of one kernel of a group and its
 * helpers. Not for use outside codegen/.
 */
#ifndef F8_CODEGEN_LOWER_INTERNAL_H
#define F8_CODEGEN_LOWER_INTERNAL_H

#include <stdbool.h> // bool
#include <stdint.h>  // uint32_t

#include "codegen/kir.h"   // f8_kernel, f8_kir_id
#include "codegen/lower.h" // f8_kernel_arg, f8_lowered_group
#include "ir/graph.h"      // f8_graph, f8_node_id, f8_value_id

/* A member's output made in a register of the current loop. */
typedef struct f8_lower_reg {
	f8_value_id value;
	f8_kir_id reg;
} f8_lower_reg;

/* An amax a cast records: combined per row (norm groups), per kernel, then atomically. */
typedef struct f8_lower_amax {
	f8_value_id value;
	uint32_t param;
	f8_kir_id element;     // this element's |x|, set while the member is emitted
	f8_kir_id row_result;  // norm groups: the block loop's result
	f8_kir_id grid_result; // the grid loop's result
} f8_lower_amax;

enum { F8_LOWER_MAX_AMAX = 16 }; // the most casts with an amax in one kernel

typedef struct f8_lower {
	const f8_graph *graph;
	uint32_t group;
	f8_kernel *kernel;
	f8_diag *diag;
	f8_node_id *members; // (n_members) in program order
	uint32_t n_members;
	f8_kernel_arg *args; // (kernel->n_params) the parameters' bindings
	bool norm;           // a norm group: rows with block loops
	f8_shape anchor;
	f8_kir_id dims[F8_MAX_RANK]; // the anchor's dims
	f8_kir_id rows, cols;        // product of the leading dims, the last dim
	f8_kir_id index, row, col;   // the current element
	f8_lower_reg *regs;
	uint32_t n_regs, regs_capacity;
	f8_lower_amax amax[F8_LOWER_MAX_AMAX];
	uint32_t n_amax;
	f8_kir_id scales[F8_LOWER_MAX_AMAX]; // per cast member, in member order: its scale (top level)
	uint32_t slot_params[F8_LOWER_MAX_AMAX]; // per cast member: the size parameter of its slot
	uint32_t n_slot_params;
	uint32_t n_scales, next_scale;
} f8_lower;


/* Emits an instruction, or records that the builder failed (f8_kir_error says why). */
#define EMIT(lw, op, a, b, c) f8_kir_emit((lw)->kernel, F8_KIR_OP_##op, (a), (b), (c))
#define NONE F8_KIR_NONE


/* Fails the lowering of `node` with F8_ERR_UNSUPPORTED, naming the kernel and the node. */
f8_status f8_lower_fail(f8_lower *lw, f8_node_id node, const char *format, ...)
	__attribute__((format(printf, 3, 4)));

/* True when `value`, made by a member, is read outside the group, is a graph output or the
 * source of an update. */
bool f8_lower_escapes(const f8_lower *lw, f8_value_id value);

/* Parameters: a buffer bound to `value`; a size for `dim` (one per distinct dim; its index in
 * *index); the size parameter holding `dim`, or F8_NONE. Parameters are named by kind and
 * position (in0, out1, acc0, size2), so that identical layers lower to identical kernels. */
f8_status f8_lower_add_buffer(f8_lower *lw, f8_value_id value, f8_kir_param_kind kind);
f8_status f8_lower_add_size(f8_lower *lw, f8_dim dim, uint32_t *index);
uint32_t f8_lower_size_param(const f8_lower *lw, f8_dim dim);
/* A buffer parameter bound to scratch buffer `scratch` of *out; its index into *index. */
f8_status f8_lower_add_scratch_param(f8_lower *lw, const f8_lowered_group *out, uint32_t scratch,
				     f8_kir_param_kind kind, uint32_t *index);

/* An f32 constant; `v` as a value stored as `dtype` reads back (rounded for bf16). */
f8_kir_id f8_lower_constant(f8_lower *lw, double value);
f8_kir_id f8_lower_round_to(f8_lower *lw, f8_dtype dtype, f8_kir_id v);

/* Starts one kernel of group `group` named `name` (members shared, not owned); ends it: on
 * success (status F8_OK and a kernel that verifies) it becomes the next launch of *out, else
 * it is freed and the status returned. */
f8_status f8_lower_begin(f8_lower *lw, const f8_graph *graph, uint32_t group,
			 f8_node_id *members, uint32_t n_members, const char *name, f8_diag *diag);
f8_status f8_lower_end(f8_lower *lw, f8_status status, f8_lowered_group *out);

/* Adds a scratch buffer of `count` elements of `dtype` to *out; its index into *index. */
f8_status f8_lower_add_scratch(f8_lowered_group *out, f8_dtype dtype, f8_dim count,
			       uint32_t *index, f8_diag *diag);

/* The groups of codegen/lower_multi.c, each its first member's op. */
f8_status f8_lower_cross_entropy(const f8_graph *graph, uint32_t group, f8_node_id *members,
				 f8_lowered_group *out, f8_diag *diag);
f8_status f8_lower_cross_entropy_grad(const f8_graph *graph, uint32_t group,
				      f8_node_id *members, f8_lowered_group *out, f8_diag *diag);
f8_status f8_lower_scaling_update(const f8_graph *graph, uint32_t group, f8_node_id *members,
				  f8_lowered_group *out, f8_diag *diag);

#endif
