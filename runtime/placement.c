/*
 * A leaf's part on this rank and its whole (runtime/placement.h): slices copied part by part,
 * one mesh axis at a time.
 */
#include "runtime/placement.h" // f8_rt_take_part, f8_rt_gather_whole

#include <string.h> // memcpy

#include "ir/dtype.h" // f8_dtype_get_info

uint32_t f8_rt_split_axes(const f8_value *value) {
	uint32_t axes = 0;
	for (int axis = 0; axis < F8_MESH_AXIS_COUNT; axis++)
		if (value->placement[axis].kind == F8_PLACEMENT_KIND_SHARD)
			axes |= 1u << axis;
	return axes;
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
	for (int axis = 0; axis < F8_MESH_AXIS_COUNT; axis++) {
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

f8_status f8_rt_gather_whole(const f8_value *value, f8_dist *dist, const f8_rt_tensor *part,
			     f8_rt_tensor *whole, f8_diag *diag) {
	f8_rt_tensor from = *part, made = {0};
	bool split = false;
	size_t element = f8_dtype_get_info(part->dtype)->bytes;
	f8_status status = F8_OK;
	for (int axis = F8_MESH_AXIS_COUNT - 1; !status && axis >= 0; axis--) {
		const f8_placement *placement = &value->placement[axis];
		int64_t n = ranks_of(dist, axis);
		if (placement->kind != F8_PLACEMENT_KIND_SHARD || n == 1)
			continue;
		int64_t dims[F8_MAX_RANK];
		memcpy(dims, from.dims, sizeof dims);
		dims[placement->dim] *= n;
		f8_rt_tensor next, blocks;
		if ((status = f8_rt_tensor_create(part->dtype, part->rank, dims, &next, diag)))
			break;
		if ((status = f8_rt_tensor_create(part->dtype, part->rank, dims, &blocks, diag))) {
			f8_rt_tensor_destroy(&next);
			break;
		}
		status = f8_dist_all_gather(dist, 1u << axis, from.data, blocks.data, from.n_bytes,
					    diag);
		for (int64_t r = 0; !status && from.n_bytes && r < n; r++)
			f8_rt_copy_slice(next.data, (char *)blocks.data + (size_t)r * from.n_bytes, dims,
					 part->rank, placement->dim, placement->parts,
					 placement->n_parts, n, r, element, false);
		f8_rt_tensor_destroy(&blocks);
		f8_rt_tensor_destroy(&made);
		made = from = next;
		split = true;
	}
	if (status) {
		f8_rt_tensor_destroy(&made);
		return status;
	}
	if (split) {
		*whole = made;
		return F8_OK;
	}
	return copy_whole(part, whole, diag);
}
