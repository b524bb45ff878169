/*
 * A leaf's part on this rank and the whole it is a part of, by the leaf's placements on the
 * mesh (ir/graph.h, f8_placement): what making parameters, saving and loading checkpoints need,
 * so that a checkpoint holds every tensor whole whatever the layout that saved it.
 *
 * The axes that split a leaf split it in mesh order: TP first, and each later axis splits the
 * part the one before left (the distributed optimizer's DP splits a rank's rows along dim 0). A
 * dimension split part by part (a fused QKV weight) gives each rank its slice of every part.
 */
#ifndef F8_RUNTIME_PLACEMENT_H
#define F8_RUNTIME_PLACEMENT_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t

#include "ir/diag.h"               // f8_status, f8_diag
#include "ir/graph.h"              // f8_value
#include "runtime/distributed.h"   // f8_dist
#include "runtime/tensor.h"        // f8_rt_tensor

/*
 * Copies between a tensor `whole` (dims, rank; of `element`-byte elements) and the slice of rank
 * `r` of `n` along `dim`, part by part (`parts`, n_parts of them, whole sizes; n_parts <= 1: the
 * dimension as one part): into `part` when `to_part`, else from it into its place in `whole`.
 */
void f8_rt_copy_slice(void *whole, void *part, const int64_t *dims, int rank, int dim,
		      const int64_t *parts, int n_parts, int64_t n, int64_t r, size_t element,
		      bool to_part);

/* The mesh axes over which `value` is split (bits 1 << f8_mesh_axis; 0: whole on each rank). */
uint32_t f8_rt_split_axes(const f8_value *value);

/* The whole tensor's dims (value's rank) from those of this rank's part, `part`, on a mesh of
 * `mesh` sizes (the graph's; an axis of size 0 or 1 splits nothing). */
void f8_rt_whole_dims(const f8_value *value, const uint32_t *mesh, const int64_t *part,
		      int64_t *whole);

/* This rank's part of `whole` (a leaf's whole tensor) into *part (created). `dist` NULL: the
 * part is the whole, copied. */
f8_status f8_rt_take_part(const f8_value *value, const f8_dist *dist, const f8_rt_tensor *whole,
			  f8_rt_tensor *part, f8_diag *diag);

/* The whole of a leaf into *whole (created), from every rank's `part`: a collective over each
 * axis that splits it (every rank of those groups must call it, for the same leaf). */
f8_status f8_rt_gather_whole(const f8_value *value, f8_dist *dist, const f8_rt_tensor *part,
			     f8_rt_tensor *whole, f8_diag *diag);

#endif
