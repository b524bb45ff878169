/*
 * A leaf's part on this rank and the whole it is a part of, by the leaf's placements on the
 * mesh (ir/graph.h, f8_placement): what making parameters, saving and loading checkpoints need,
 * so that a checkpoint saved under one layout loads under another.
 *
 * The axes that split a leaf split it in turn: TP first, then the others outermost first (PP,
 * DP, EP, CP), each splitting the part the one before left (the distributed optimizer's DP
 * splits a rank's TP rows along dim 0; over "cp+dp" DP and then CP split the same rows, so
 * that a rank's piece is the one its place in the group names, the innermost axis fastest). A
 * dimension split part by part (a fused QKV weight) gives each rank its slice of every part.
 */
#ifndef F8_RUNTIME_PLACEMENT_H
#define F8_RUNTIME_PLACEMENT_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // int64_t, uint64_t

#include "ir/diag.h"               // f8_status, f8_diag
#include "ir/graph.h"              // f8_value
#include "runtime/backend.h"       // f8_tensor_view
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

/*
 * As f8_rt_copy_slice for context parallelism's balanced parts (one part of the whole
 * dimension): rank `r` of `n` holds chunks r and 2n - 1 - r of the 2n along `dim`, in that
 * order.
 */
void f8_rt_copy_balanced(void *whole, void *part, const int64_t *dims, int rank, int dim,
			 int64_t n, int64_t r, size_t element, bool to_part);

/*
 * Rank `r`'s part of `n` along `dim` (of a whole of `dims`, rank `rank`, `element`-byte
 * elements; the balanced parts of f8_rt_copy_balanced when `balanced`, else
 * f8_rt_copy_slice's of one part) as runs of bytes that a 2-D copy (cuMemcpy2D) moves: run k
 * is `rows` rows of `width` bytes, row i at whole + whole_at + i whole_pitch and at part +
 * part_at + i part_pitch. Answers the runs' count, 1 or 2 (balanced), into runs[0..].
 */
typedef struct f8_rt_part_run {
	uint64_t whole_at, whole_pitch, part_at, part_pitch, width, rows;
} f8_rt_part_run;

int f8_rt_part_runs(const int64_t *dims, int rank, int dim, int64_t n, int64_t r, size_t element,
		    bool balanced, f8_rt_part_run runs[2]);

/*
 * Context parallelism's attention as calls over the whole sequence (runtime/cuda/
 * ring_attention.h): rank `place` of `ranks` holds `rows` query rows (chunks place and
 * 2 ranks - 1 - place of rows / 2 each) and attends the whole sequence's ranks x rows keys,
 * gathered in order. Into q_from[i] and keys[i] (room for 2), call i's first query row (its
 * rows run to the next call's first, or to the last) and how many of the sequence's first keys
 * it attends, each call bottom-right causal when `causal` (query row t of a call of s_q rows
 * attends keys j <= t + keys - s_q), which is then each row's place in the sequence: chunk
 * place attends the first (place + 1) rows / 2 keys, chunk 2 ranks - 1 - place the first
 * (2 ranks - place) rows / 2. One call of every row and key when not causal. Answers the
 * calls' count; on one rank (odd rows too) the same two calls, the first half's rows and the
 * rest. `rows` must be even over several ranks.
 */
uint32_t f8_rt_ring_calls(int64_t ranks, int64_t place, int64_t rows, bool causal,
			  int64_t q_from[2], int64_t keys[2]);

/* Whether an AllGather or ReduceScatter of several inputs goes over the ranks as one packed
 * collective (each rank's parts of the tensors one after another): along axis 0, not balanced,
 * every input of one dtype (`views`: the executor's). Both backends pack alike. */
bool f8_rt_collective_packs(const f8_node *node, const f8_tensor_view *views);

/* Whether `node` is a collective, and over which group (its `group` attribute's axes, bits 1 <<
 * f8_mesh_axis) into *axes. */
bool f8_rt_collective_axes(const f8_node *node, uint32_t *axes);

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

/*
 * A part's layout, as a checkpoint shard records it beside the part (so that a run of another
 * layout can put it in its place): one item per mesh axis that splits the leaf, in mesh order,
 * joined by ';':
 *
 *     AXIS:DIM:RANKS:RANK              e.g. tp:1:2:0, or with parts  tp:0:2:1:128,64,64
 *
 * the axis's name, the dimension it splits (of the part the axes before it left), the group's
 * size, this rank's place in it, and the dimension's parts (whole sizes) when it is split part
 * by part. "" for a leaf no axis splits.
 */
enum { F8_RT_LAYOUT_MAX = 512 };

/* This rank's part of `value` described so into `out` (F8_RT_LAYOUT_MAX bytes); false when it
 * does not fit. `dist` NULL: "". */
bool f8_rt_part_layout(const f8_value *value, const f8_dist *dist, char *out, size_t size);

/*
 * Copies `piece`, a part described by `layout`, into its place in `whole` (a tensor of the
 * whole's dims and the piece's dtype). F8_ERR_INVALID when the layout does not parse or the
 * piece's dims are not the part's it describes; *elements (when not NULL) is increased by the
 * elements placed, so that a caller can check that the pieces cover the whole.
 */
f8_status f8_rt_place_piece(const char *layout, const f8_rt_tensor *piece, f8_rt_tensor *whole,
			    int64_t *elements, f8_diag *diag);

#endif
