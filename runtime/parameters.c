/*
 * Initial parameters: initializer bytes converted to the leaf's dtype, or Megatron-LM's
 * initialization made up from a seed; and the initial values the passes give other leaves
 * (state with an initializer).
 */
#define _POSIX_C_SOURCE 200809L // fseeko, off_t

#include "runtime/parameters.h" // f8_rt_parameters_init

#include <errno.h>  // errno
#include <stdio.h>  // fopen, fread, fseeko
#include <string.h> // memcpy, strerror
#include <sys/types.h> // off_t

#include "ir/weight_init.h"          // f8_weight_init_rule, f8_weight_init_fill
#include "ir/alloc.h"                  // f8_malloc, f8_free

/* Reads the bytes of `init` into `buffer` (init->n_bytes). */
static f8_status read_initializer(const f8_initializer *init, const char *name, void *buffer,
				  f8_diag *diag) {
	if (!init->path) {
		memcpy(buffer, init->data, init->n_bytes);
		return F8_OK;
	}
	FILE *file = fopen(init->path, "rb");
	if (!file)
		return f8_diag_set(diag, F8_ERR_IO, "cannot open %s for the weights of %%%s: %s",
				   init->path, name, strerror(errno));
	bool ok = fseeko(file, (off_t)init->offset, SEEK_SET) == 0 &&
		  fread(buffer, 1, init->n_bytes, file) == init->n_bytes;
	fclose(file);
	if (!ok) {
		f8_diag_set(diag, F8_ERR_IO, "%s ends before the %llu bytes of %%%s at offset %llu",
			    init->path, (unsigned long long)init->n_bytes, name,
			    (unsigned long long)init->offset);
		f8_diag_hint(diag, "the weights file changed since the model was loaded; export it "
			     "again");
		return F8_ERR_IO;
	}
	return F8_OK;
}

/* Fills `tensor` from `init`, converting from the initializer's dtype to the tensor's. */
static f8_status fill_from_initializer(f8_rt_tensor *tensor, const f8_initializer *init,
				       const char *name, f8_diag *diag) {
	int64_t numel = f8_rt_tensor_numel(tensor);
	size_t element = f8_dtype_get_info(init->dtype)->bytes;
	if (init->dtype == F8_DTYPE_UNDEFINED || (uint64_t)numel * element != init->n_bytes)
		return f8_diag_set(diag, F8_ERR_INVALID, "the weights of %%%s (%llu bytes of %s) do "
				   "not fit its %lld elements", name,
				   (unsigned long long)init->n_bytes, f8_dtype_name(init->dtype),
				   (long long)numel);
	if (init->dtype == tensor->dtype)
		return read_initializer(init, name, tensor->data, diag);
	void *bytes = f8_malloc(init->n_bytes ? init->n_bytes : 1);
	if (!bytes)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory reading %%%s", name);
	f8_status status = read_initializer(init, name, bytes, diag);
	if (!status) {
		f8_rt_tensor source = {.dtype = init->dtype, .rank = 1, .dims = {numel},
				       .data = bytes, .n_bytes = init->n_bytes};
		f8_rt_tensor_convert(tensor, &source);
	}
	f8_free(bytes);
	return status;
}

/* Fills `tensor`, the parameter `value` of `graph`, with Megatron-LM's initialization. */
static void fill_made_up(f8_rt_tensor *tensor, const f8_graph *graph, f8_value_id value,
			 int64_t layers, uint64_t seed) {
	enum { CHUNK = 4096 };
	float values[CHUNK];
	f8_weight_init rule = f8_weight_init_rule(graph, value, layers);
	int64_t numel = f8_rt_tensor_numel(tensor);
	const char *name = graph->values[value].name;
	for (int64_t first = 0; first < numel; first += CHUNK) {
		int64_t count = numel - first < CHUNK ? numel - first : CHUNK;
		f8_weight_init_fill(&rule, seed, name, (uint64_t)first, (uint64_t)count, values);
		if (tensor->dtype == F8_DTYPE_F32)
			memcpy((float *)tensor->data + first, values, (size_t)count * sizeof(float));
		else
			for (int64_t i = 0; i < count; i++)
				f8_rt_tensor_set(tensor, first + i, values[i]);
	}
}

/*
 * Besides params and buffers, any leaf with an initializer gets it: the passes give state an
 * initial value that is not zero that way (fp8-cast's inline ones for the scale tables); an FP8
 * scale table without one (a graph read back from the text IR, a plan's) starts at 1 as
 * DESIGN.md says; other leaves without one stay as the executor made them, zero. Each leaf is
 * made on the host and written to the executor's backend.
 */
f8_status f8_rt_parameters_read_initializer(const f8_value *value, f8_rt_tensor *out,
					    f8_diag *diag) {
	*out = (f8_rt_tensor){0};
	int64_t dims[F8_MAX_RANK];
	for (int d = 0; d < value->type.shape.rank; d++) {
		if (!f8_dim_is_const(value->type.shape.dims[d]))
			return f8_diag_set(diag, F8_ERR_INVALID, "%%%s has weights but a symbolic "
					   "size", value->name);
		dims[d] = f8_dim_value(value->type.shape.dims[d]);
	}
	f8_status status = f8_rt_tensor_create(value->type.dtype, value->type.shape.rank, dims, out,
					       diag);
	if (!status)
		status = fill_from_initializer(out, value->initializer, value->name, diag);
	if (status)
		f8_rt_tensor_destroy(out);
	return status;
}

/* Leaf `value`'s tensor in `weights` (a plan's), checked against the leaf's type, into *out;
 * false (*out empty) when the file has none of that name. */
static f8_status read_weight(const f8_safetensors *weights, const f8_value *value,
			     const f8_tensor_view *view, bool *found, f8_rt_tensor *out,
			     f8_diag *diag) {
	*found = weights && f8_safetensors_find(weights, value->name);
	if (!*found)
		return F8_OK;
	f8_status status = f8_safetensors_read(weights, value->name, out, diag);
	bool same = !status && out->dtype == view->dtype && out->rank == view->rank;
	for (int d = 0; same && d < view->rank; d++)
		same = out->dims[d] == view->dims[d];
	if (!status && !same) {
		f8_rt_tensor_destroy(out);
		status = f8_diag_set(diag, F8_ERR_INVALID, "the plan's weights of %%%s are not of "
				     "its dtype and shape", value->name);
	}
	return status;
}

f8_status f8_rt_parameters_init(f8_executor *executor, uint64_t seed,
				const f8_safetensors *weights, f8_diag *diag) {
	const f8_graph *graph = f8_executor_graph(executor);
	int64_t layers = f8_weight_init_layers(graph);
	for (uint32_t i = 0; i < graph->n_inputs; i++) {
		f8_value_id v = graph->inputs[i];
		const f8_value *value = &graph->values[v];
		const f8_tensor_view *view = f8_executor_view(executor, v);
		f8_rt_tensor tensor = {0};
		bool found;
		f8_status status = read_weight(weights, value, view, &found, &tensor, diag);
		if (!status && found) {
			status = f8_executor_write(executor, v, &tensor, diag);
			f8_rt_tensor_destroy(&tensor);
			if (status)
				return status;
			continue;
		}
		if (status)
			return status;
		if (!value->initializer && value->role != F8_ROLE_PARAMETER &&
		    value->role != F8_ROLE_SCALE && value->role != F8_ROLE_BUFFER)
			continue; // stays zero
		if (value->role == F8_ROLE_BUFFER && !value->initializer)
			return f8_diag_set(diag, F8_ERR_INVALID, "buffer %%%s has no initial contents",
					   value->name);
		status = f8_rt_tensor_create(view->dtype, view->rank, view->dims, &tensor, diag);
		if (!status && value->initializer)
			status = fill_from_initializer(&tensor, value->initializer, value->name, diag);
		else if (!status && value->role == F8_ROLE_PARAMETER)
			fill_made_up(&tensor, graph, v, layers, seed);
		else if (!status) // FP8 scales start at 1 (DESIGN.md)
			for (int64_t e = 0; e < f8_rt_tensor_numel(&tensor); e++)
				f8_rt_tensor_set(&tensor, e, 1.0);
		if (!status)
			status = f8_executor_write(executor, v, &tensor, diag);
		f8_rt_tensor_destroy(&tensor);
		if (status)
			return status;
	}
	return F8_OK;
}
