/*
 * A leaf's part on this rank and its whole (runtime/placement.h): slices copied part by part,
 * one mesh axis at a time.
 */
#include "runtime/placement.h" // f8_rt_take_part, f8_rt_part_layout, f8_rt_place_piece

#include <stdio.h>  // snprintf
#include <stdlib.h> // strtoll
#include <string.h> // memcpy, strchr, strlen

#include "ir/alloc.h" // f8_malloc, f8_free
#include "ir/dtype.h" // f8_dtype_get_info
#include "ir/ops.h"   // f8_op_get_info, F8_OPF_COLLECTIVE

uint32_t f8_rt_split_axes(const f8_value *value) {
	uint32_t axes = 0;
	for (int axis = 0; axis < F8_MESH_AXIS_COUNT; axis++)
		if (value->placement[axis].kind == F8_PLACEMENT_KIND_SHARD)
			axes |= 1u << axis;
	return axes;
}

/*
 * The axis that splits a part at step `step` of the nesting: TP first (the tensor-parallel shard),
 * then the others outermost first, so that where several axes split one dimension (the
 * distributed optimizer's rows over "cp+dp" or "ep+dp") a rank's piece is the one its place in
 * that group names: the group's ranks count with the innermost axis fastest
 * (f8_dist_group_rank), as Megatron-LM's data-parallel group with context parallelism does.
 */
static int nested_axis(int step) {
	return step == 0 ? F8_MESH_AXIS_TP : F8_MESH_AXIS_COUNT - step;
}

static uint32_t ranks_of(const f8_dist *dist, int axis) {
	return dist ? f8_dist_group_size(dist, 1u << axis) : 1;
}

void f8_rt_whole_dims(const f8_value *value, const uint32_t *mesh, const int64_t *part,
		      int64_t *whole) {
	for (int d = 0; d < value->type.shape.rank; d++)
		whole[d] = part[d];
	for (int axis = 0; axis < F8_MESH_AXIS_COUNT; axis++)
		if (value->placement[axis].kind == F8_PLACEMENT_KIND_SHARD && mesh[axis] > 1)
			whole[value->placement[axis].dim] *= mesh[axis];
}

void f8_rt_copy_slice(void *whole_data, void *part_data, const int64_t *dims, int rank, int dim,
		      const int64_t *parts, int n_parts, int64_t n, int64_t r, size_t element,
		      bool to_part) {
	char *whole = whole_data, *part = part_data;
	int64_t outer = 1, size = dims[dim];
	size_t inner = element;
	for (int d = 0; d < dim; d++)
		outer *= dims[d];
	for (int d = dim + 1; d < rank; d++)
		inner *= (size_t)dims[d];
	int64_t one = size;
	if (n_parts <= 1) {
		parts = &one;
		n_parts = 1;
	}
	for (int64_t o = 0; o < outer; o++) {
		int64_t at_whole = o * size, at_part = o * (size / n);
		for (int i = 0; i < n_parts; i++) {
			int64_t chunk = parts[i] / n;
			char *w = whole + (size_t)(at_whole + r * chunk) * inner;
			char *p = part + (size_t)at_part * inner;
			if (to_part)
				memcpy(p, w, (size_t)chunk * inner);
			else
				memcpy(w, p, (size_t)chunk * inner);
			at_whole += parts[i];
			at_part += chunk;
		}
	}
}

void f8_rt_copy_balanced(void *whole_data, void *part_data, const int64_t *dims, int rank,
			 int dim, int64_t n, int64_t r, size_t element, bool to_part) {
	char *whole = whole_data, *part = part_data;
	int64_t outer = 1, size = dims[dim], chunk = size / (2 * n);
	size_t inner = element;
	for (int d = 0; d < dim; d++)
		outer *= dims[d];
	for (int d = dim + 1; d < rank; d++)
		inner *= (size_t)dims[d];
	size_t bytes = (size_t)chunk * inner;
	for (int64_t o = 0; o < outer; o++)
		for (int k = 0; k < 2; k++) {
			int64_t which = k ? 2 * n - 1 - r : r;
			char *w = whole + (size_t)(o * size + which * chunk) * inner;
			char *p = part + (size_t)(o * 2 + k) * bytes;
			if (to_part)
				memcpy(p, w, bytes);
			else
				memcpy(w, p, bytes);
		}
}

uint32_t f8_rt_ring_calls(int64_t ranks, int64_t place, int64_t rows, bool causal,
			  int64_t q_from[2], int64_t keys[2]) {
	q_from[0] = 0;
	if (!causal) {
		keys[0] = ranks * rows;
		return 1;
	}
	int64_t chunk = rows / 2;
	q_from[1] = chunk;
	keys[0] = (place + 1) * chunk;
	keys[1] = ranks == 1 ? rows : (2 * ranks - place) * chunk;
	return 2;
}

int f8_rt_part_runs(const int64_t *dims, int rank, int dim, int64_t n, int64_t r, size_t element,
		    bool balanced, f8_rt_part_run runs[2]) {
	uint64_t outer = 1, inner = element;
	for (int d = 0; d < dim; d++)
		outer *= (uint64_t)dims[d];
	for (int d = dim + 1; d < rank; d++)
		inner *= (uint64_t)dims[d];
	uint64_t size = (uint64_t)dims[dim], pitch = size * inner;
	uint64_t chunk = size / (uint64_t)(balanced ? 2 * n : n) * inner; // bytes of one chunk's row
	int count = balanced ? 2 : 1;
	for (int k = 0; k < count; k++) {
		int64_t which = k ? 2 * n - 1 - r : r;
		runs[k] = (f8_rt_part_run){.whole_at = (uint64_t)which * chunk, .whole_pitch = pitch,
					   .part_at = (uint64_t)k * chunk,
					   .part_pitch = (uint64_t)count * chunk, .width = chunk,
					   .rows = outer};
	}
	return count;
}

bool f8_rt_collective_axes(const f8_node *node, uint32_t *axes) {
	if (!(f8_op_get_info(node->op)->flags & F8_OPF_COLLECTIVE))
		return false;
	const char *group = f8_node_attr_string(node, "group", NULL);
	return group && f8_mesh_group_from_name(group, strlen(group), axes);
}

bool f8_rt_collective_packs(const f8_node *node, const f8_tensor_view *views) {
	bool one = node->n_inputs > 1 && f8_node_attr_int(node, "axis", 0) == 0 &&
		   !f8_node_attr_int(node, "balanced", 0) && node->op != F8_OP_LOCAL_SHARD;
	for (uint32_t i = 1; one && i < node->n_inputs; i++)
		one = views[node->inputs[i]].dtype == views[node->inputs[0]].dtype;
	return one;
}

/* A copy of `from` into *to (created): a leaf no axis splits is its own part and whole. */
static f8_status copy_whole(const f8_rt_tensor *from, f8_rt_tensor *to, f8_diag *diag) {
	f8_status status = f8_rt_tensor_create(from->dtype, from->rank, from->dims, to, diag);
	if (!status && to->n_bytes)
		memcpy(to->data, from->data, to->n_bytes);
	return status;
}

f8_status f8_rt_take_part(const f8_value *value, const f8_dist *dist, const f8_rt_tensor *whole,
			  f8_rt_tensor *part, f8_diag *diag) {
	f8_rt_tensor from = *whole, made = {0};
	bool split = false;
	size_t element = f8_dtype_get_info(whole->dtype)->bytes;
	for (int step = 0; step < F8_MESH_AXIS_COUNT; step++) {
		int axis = nested_axis(step);
		const f8_placement *placement = &value->placement[axis];
		int64_t n = ranks_of(dist, axis);
		if (placement->kind != F8_PLACEMENT_KIND_SHARD || n == 1)
			continue;
		int64_t dims[F8_MAX_RANK];
		memcpy(dims, from.dims, sizeof dims);
		dims[placement->dim] /= n;
		f8_rt_tensor next;
		f8_status status = f8_rt_tensor_create(whole->dtype, whole->rank, dims, &next, diag);
		if (status) {
			f8_rt_tensor_destroy(&made);
			return status;
		}
		if (next.n_bytes)
			f8_rt_copy_slice(from.data, next.data, from.dims, from.rank, placement->dim,
					 placement->parts, placement->n_parts, n,
					 f8_dist_group_rank(dist, 1u << axis), element, true);
		f8_rt_tensor_destroy(&made);
		made = from = next;
		split = true;
	}
	if (split) {
		*part = made;
		return F8_OK;
	}
	return copy_whole(whole, part, diag);
}

bool f8_rt_part_layout(const f8_value *value, const f8_dist *dist, char *out, size_t size) {
	size_t at = 0;
	out[0] = '\0';
	for (int step = 0; step < F8_MESH_AXIS_COUNT; step++) {
		int axis = nested_axis(step);
		const f8_placement *placement = &value->placement[axis];
		int64_t n = ranks_of(dist, axis);
		if (placement->kind != F8_PLACEMENT_KIND_SHARD || n == 1)
			continue;
		int len = snprintf(out + at, size - at, "%s%s:%d:%lld:%u", at ? ";" : "",
				   f8_mesh_axis_name((f8_mesh_axis)axis), placement->dim, (long long)n,
				   f8_dist_group_rank(dist, 1u << axis));
		for (int i = 0; len >= 0 && placement->n_parts > 1 && i < placement->n_parts; i++) {
			at += (size_t)len;
			if (at >= size)
				return false;
			len = snprintf(out + at, size - at, "%s%lld", i ? "," : ":",
				       (long long)placement->parts[i]);
		}
		if (len < 0 || (at += (size_t)len) >= size)
			return false;
	}
	return true;
}

/* One item of a part's layout (f8_rt_part_layout), parsed. */
typedef struct layout_item {
	int dim;
	int64_t n, r;
	int64_t parts[F8_MAX_RANK * 8];
	int n_parts;
} layout_item;

/* Parses the item at *text (up to ';' or the end) into *item, moving *text past it. */
static bool parse_item(const char **text, layout_item *item) {
	const char *s = *text;
	const char *colon = strchr(s, ':');
	f8_mesh_axis axis;
	if (!colon || !f8_mesh_axis_from_name(s, (size_t)(colon - s), &axis))
		return false;
	char *end;
	long long v[3];
	s = colon + 1;
	for (int i = 0; i < 3; i++) {
		v[i] = strtoll(s, &end, 10);
		if (end == s || (*end != ':' && i < 2) || v[i] < 0)
			return false;
		s = *end == ':' ? end + 1 : end;
	}
	if (v[0] >= F8_MAX_RANK || v[1] < 1 || v[2] >= v[1])
		return false;
	*item = (layout_item){.dim = (int)v[0], .n = v[1], .r = v[2]};
	if (end[0] == ':') { // the parts
		for (s = end + 1; item->n_parts < (int)(sizeof item->parts / sizeof item->parts[0]);) {
			long long part = strtoll(s, &end, 10);
			if (end == s || part < 1 || part % item->n)
				return false;
			item->parts[item->n_parts++] = part;
			s = end;
			if (*s != ',')
				break;
			s++;
		}
		end = (char *)s;
	}
	if (*end != ';' && *end != '\0')
		return false;
	*text = *end == ';' ? end + 1 : end;
	return true;
}

/* Copies the piece's elements to their places in `whole`: the element at piece index
 * (i0, ..., ik) goes to (index[0][i0], ..., index[k][ik]). */
static void scatter(const f8_rt_tensor *piece, f8_rt_tensor *whole, int64_t *const *index,
		    size_t element) {
	int rank = piece->rank;
	int64_t count = 1, at[F8_MAX_RANK] = {0};
	for (int d = 0; d < rank; d++)
		count *= piece->dims[d];
	for (int64_t e = 0; e < count; e++) {
		int64_t offset = 0;
		for (int d = 0; d < rank; d++)
			offset = offset * whole->dims[d] + index[d][at[d]];
		memcpy((char *)whole->data + (size_t)offset * element,
		       (const char *)piece->data + (size_t)e * element, element);
		for (int d = rank - 1; d >= 0 && ++at[d] == piece->dims[d]; d--)
			at[d] = 0;
	}
}

f8_status f8_rt_place_piece(const char *layout, const f8_rt_tensor *piece, f8_rt_tensor *whole,
			    int64_t *elements, f8_diag *diag) {
	// Each dimension's whole indices, narrowed by each item as copy_slice narrows the data.
	int64_t *index[F8_MAX_RANK] = {0}, sizes[F8_MAX_RANK];
	f8_status status = F8_OK;
	int rank = whole->rank;
	if (piece->rank != rank || piece->dtype != whole->dtype)
		status = f8_diag_set(diag, F8_ERR_INVALID, "a part's rank or dtype is not its "
				     "whole's");
	for (int d = 0; !status && d < rank; d++) {
		sizes[d] = whole->dims[d];
		index[d] = f8_malloc((size_t)(sizes[d] + 1) * sizeof *index[d]);
		if (!index[d])
			status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory placing a part");
		for (int64_t i = 0; !status && i < sizes[d]; i++)
			index[d][i] = i;
	}
	for (const char *text = layout; !status && *text;) {
		layout_item item;
		if (!parse_item(&text, &item) || item.dim >= rank || sizes[item.dim] % item.n) {
			status = f8_diag_set(diag, F8_ERR_INVALID, "a part's layout '%s' does not "
					     "parse, or does not fit the whole", layout);
			break;
		}
		int64_t total = 0;
		for (int i = 0; i < item.n_parts; i++)
			total += item.parts[i];
		if (item.n_parts > 1 && total != sizes[item.dim]) {
			status = f8_diag_set(diag, F8_ERR_INVALID, "a part's layout '%s': its parts do "
					     "not add up to the dimension", layout);
			break;
		}
		int64_t narrowed = sizes[item.dim] / item.n;
		int64_t *next = f8_malloc((size_t)(narrowed + 1) * sizeof *next);
		if (!next) {
			status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory placing a part");
			break;
		}
		f8_rt_copy_slice(index[item.dim], next, &sizes[item.dim], 1, 0, item.parts,
				 item.n_parts, item.n, item.r, sizeof(int64_t), true);
		f8_free(index[item.dim]);
		index[item.dim] = next;
		sizes[item.dim] = narrowed;
	}
	for (int d = 0; !status && d < rank; d++)
		if (piece->dims[d] != sizes[d])
			status = f8_diag_set(diag, F8_ERR_INVALID, "a part of layout '%s' has dim %d of "
					     "%lld, not %lld", layout, d, (long long)piece->dims[d],
					     (long long)sizes[d]);
	if (!status && piece->n_bytes)
		scatter(piece, whole, index, f8_dtype_get_info(piece->dtype)->bytes);
	if (!status && elements)
		*elements += f8_rt_tensor_numel(piece);
	for (int d = 0; d < rank; d++)
		f8_free(index[d]);
	return status;
}
