/*
 * Initial parameters: initializer bytes converted to the leaf's dtype, or Megatron-LM's
 * initialization made up from a seed; and the initial values the passes give other leaves
 * (state with an initializer).
 */
#define _POSIX_C_SOURCE 200809L // sysconf

#include "runtime/parameters.h" // f8_rt_parameters_init

#include <pthread.h> // pthread_create, pthread_join
#include <unistd.h>  // sysconf

#include "ir/weight_init.h"          // f8_weight_init_rule, f8_weight_init_fill
#include "ir/alloc.h"                  // f8_malloc, f8_free
#include "ir/graph.h"                  // f8_initializer_read
#include "runtime/placement.h"         // f8_rt_whole_dims, f8_rt_take_part

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
		return f8_initializer_read(init, init->n_bytes, tensor->data, name, diag);
	void *bytes = f8_malloc(init->n_bytes ? init->n_bytes : 1);
	if (!bytes)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory reading %%%s", name);
	f8_status status = f8_initializer_read(init, init->n_bytes, bytes, name, diag);
	if (!status) {
		f8_rt_tensor source = {.dtype = init->dtype, .rank = 1, .dims = {numel},
				       .data = bytes, .n_bytes = init->n_bytes};
		f8_rt_tensor_convert(tensor, &source);
	}
	f8_free(bytes);
	return status;
}

/* Elements [first, first + count) of a parameter made up by `rule` from `seed`. */
typedef struct made_range {
	f8_rt_tensor *tensor;
	const f8_weight_init *rule;
	uint64_t seed;
	const char *name;
	int64_t first, count;
} made_range;

/* Fills range->tensor's range: f32 straight into the tensor, other dtypes through a chunk of
 * floats converted as f8_rt_tensor_convert converts (what a plan's weights file would hold). */
static void fill_range(const made_range *range) {
	enum { CHUNK = 4096 };
	float values[CHUNK];
	f8_rt_tensor *tensor = range->tensor;
	size_t element = f8_dtype_get_info(tensor->dtype)->bytes;
	for (int64_t first = range->first; first < range->first + range->count; first += CHUNK) {
		int64_t left = range->first + range->count - first;
		int64_t count = left < CHUNK ? left : CHUNK;
		if (tensor->dtype == F8_DTYPE_F32) {
			f8_weight_init_fill(range->rule, range->seed, range->name, (uint64_t)first,
					    (uint64_t)count, (float *)tensor->data + first);
			continue;
		}
		f8_weight_init_fill(range->rule, range->seed, range->name, (uint64_t)first,
				    (uint64_t)count, values);
		f8_rt_tensor from = {.dtype = F8_DTYPE_F32, .rank = 1, .dims = {count},
				     .data = values, .n_bytes = (size_t)count * sizeof(float)};
		f8_rt_tensor to = {.dtype = tensor->dtype, .rank = 1, .dims = {count},
				   .data = (unsigned char *)tensor->data + (size_t)first * element,
				   .n_bytes = (size_t)count * element};
		f8_rt_tensor_convert(&to, &from);
	}
}

static void *fill_range_thread(void *range) {
	fill_range(range);
	return NULL;
}

/*
 * Fills `tensor` (named `name`) by `rule` from `seed`. The generator is counter-based, so the
 * tensor is cut into one range per processor and the bits do not depend on the cut: a 1.3B
 * model's 5 GB of parameters are made in seconds where the plan runs, not shipped with it.
 * Small tensors, and any range whose thread cannot start, are filled on this thread.
 */
static void fill_made_up(f8_rt_tensor *tensor, const f8_weight_init *rule, uint64_t seed,
			 const char *name) {
	enum { MAX_THREADS = 64, PER_THREAD = 1 << 18 };
	int64_t numel = f8_rt_tensor_numel(tensor);
	long online = sysconf(_SC_NPROCESSORS_ONLN);
	int64_t n = online < 1 ? 1 : online > MAX_THREADS ? MAX_THREADS : online;
	if (n > numel / PER_THREAD)
		n = numel / PER_THREAD > 0 ? numel / PER_THREAD : 1;
	made_range ranges[MAX_THREADS];
	pthread_t threads[MAX_THREADS];
	bool started[MAX_THREADS] = {false};
	for (int64_t t = 0; t < n; t++) {
		int64_t first = numel * t / n;
		ranges[t] = (made_range){.tensor = tensor, .rule = rule, .seed = seed, .name = name,
					 .first = first, .count = numel * (t + 1) / n - first};
		started[t] = t > 0 && pthread_create(&threads[t], NULL, fill_range_thread,
						     &ranges[t]) == 0;
	}
	for (int64_t t = 0; t < n; t++)
		if (!started[t])
			fill_range(&ranges[t]);
	for (int64_t t = 1; t < n; t++)
		if (started[t])
			pthread_join(threads[t], NULL);
}

/* The rule parameter `v` is made by: `made`'s for it (*rule, *seed), or without a record the
 * one the graph gives it, from the run's seed. */
static f8_status made_rule(const f8_graph *graph, f8_value_id v, int64_t layers,
			   const f8_plan_weight_init *made, const f8_tensor_view *view,
			   f8_weight_init *rule, uint64_t *seed, f8_diag *diag) {
	const f8_value *value = &graph->values[v];
	if (!made) {
		*rule = f8_weight_init_rule(graph, v, layers);
		return F8_OK;
	}
	for (uint32_t w = 0; w < made->n_weights; w++) {
		if (made->weights[w].value != v)
			continue;
		if (made->weights[w].dtype != view->dtype)
			return f8_diag_set(diag, F8_ERR_INVALID, "the plan makes %%%s as %s, but it "
					   "is %s", value->name, f8_dtype_name(made->weights[w].dtype),
					   f8_dtype_name(view->dtype));
		*rule = made->weights[w].rule;
		*seed = made->seed;
		return F8_OK;
	}
	return f8_diag_set(diag, F8_ERR_INVALID, "parameter %%%s has no weights: neither the "
			   "plan's weights file nor its weight_init record has it", value->name);
}

/*
 * Besides params and buffers, any leaf with an initializer gets it: the passes give state an
 * initial value that is not zero that way (fp8-cast's inline ones for the scale tables); an FP8
 * scale table without one (a graph read back from the text IR, a plan's) starts at 1 as
 * DESIGN.md says; other leaves without one stay as the executor made them, zero. Each leaf is
 * made on the host and written to the executor's backend.
 */
f8_status f8_rt_parameters_read_initializer(const f8_value *value, const uint32_t *mesh,
					    f8_rt_tensor *out, f8_diag *diag) {
	*out = (f8_rt_tensor){0};
	int64_t part[F8_MAX_RANK], dims[F8_MAX_RANK];
	for (int d = 0; d < value->type.shape.rank; d++) {
		if (!f8_dim_is_const(value->type.shape.dims[d]))
			return f8_diag_set(diag, F8_ERR_INVALID, "%%%s has weights but a symbolic "
					   "size", value->name);
		part[d] = f8_dim_value(value->type.shape.dims[d]);
	}
	f8_rt_whole_dims(value, mesh, part, dims);
	f8_status status = f8_rt_tensor_create(value->type.dtype, value->type.shape.rank, dims, out,
					       diag);
	if (!status)
		status = fill_from_initializer(out, value->initializer, value->name, diag);
	if (status)
		f8_rt_tensor_destroy(out);
	return status;
}

/* Leaf `value`'s tensor in `weights` (a plan's), checked against the leaf's dtype and whole
 * dims (`dims`), into *out; false (*out empty) when the file has none of that name. */
static f8_status read_weight(const f8_safetensors *weights, const f8_value *value,
			     const f8_tensor_view *view, const int64_t *dims, bool *found,
			     f8_rt_tensor *out, f8_diag *diag) {
	*found = weights && f8_safetensors_find(weights, value->name);
	if (!*found)
		return F8_OK;
	f8_status status = f8_safetensors_read(weights, value->name, out, diag);
	bool same = !status && out->dtype == view->dtype && out->rank == view->rank;
	for (int d = 0; same && d < view->rank; d++)
		same = out->dims[d] == dims[d];
	if (!status && !same) {
		f8_rt_tensor_destroy(out);
		status = f8_diag_set(diag, F8_ERR_INVALID, "the plan's weights of %%%s are not of "
				     "its dtype and shape", value->name);
	}
	return status;
}

/* Writes `whole` (leaf v's whole tensor, destroyed) to the executor: this rank's part of it
 * where the ranks of `dist` split the leaf. */
static f8_status write_part(f8_executor *executor, const f8_dist *dist, f8_value_id v,
			    f8_rt_tensor *whole, f8_diag *diag) {
	const f8_value *value = &f8_executor_graph(executor)->values[v];
	f8_rt_tensor part = {0};
	f8_status status = f8_rt_split_axes(value)
				   ? f8_rt_take_part(value, dist, whole, &part, diag) : F8_OK;
	if (!status)
		status = f8_executor_write(executor, v, part.data || part.n_bytes ? &part : whole,
					   diag);
	f8_rt_tensor_destroy(&part);
	f8_rt_tensor_destroy(whole);
	return status;
}

f8_status f8_rt_parameters_init(f8_executor *executor, const f8_dist *dist, uint64_t seed,
				const f8_safetensors *weights, const f8_plan_weight_init *made,
				f8_diag *diag) {
	const f8_graph *graph = f8_executor_graph(executor);
	int64_t layers = f8_weight_init_layers(graph);
	for (uint32_t i = 0; i < graph->n_inputs; i++) {
		f8_value_id v = graph->inputs[i];
		const f8_value *value = &graph->values[v];
		const f8_tensor_view *view = f8_executor_view(executor, v);
		int64_t dims[F8_MAX_RANK]; // the whole leaf's: the ranks make it, then take parts
		f8_rt_whole_dims(value, graph->mesh, view->dims, dims);
		f8_rt_tensor tensor = {0};
		bool found;
		f8_status status = read_weight(weights, value, view, dims, &found, &tensor, diag);
		if (!status && found) {
			if ((status = write_part(executor, dist, v, &tensor, diag)))
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
		f8_weight_init rule;
		uint64_t rule_seed = seed;
		if (!value->initializer && value->role == F8_ROLE_PARAMETER)
			status = made_rule(graph, v, layers, made, view, &rule, &rule_seed, diag);
		if (!status)
			status = f8_rt_tensor_create(view->dtype, view->rank, dims, &tensor, diag);
		if (!status && value->initializer)
			status = fill_from_initializer(&tensor, value->initializer, value->name, diag);
		else if (!status && value->role == F8_ROLE_PARAMETER)
			fill_made_up(&tensor, &rule, rule_seed, value->name);
		else if (!status) // FP8 scales start at 1 (DESIGN.md)
			for (int64_t e = 0; e < f8_rt_tensor_numel(&tensor); e++)
				f8_rt_tensor_set(&tensor, e, 1.0);
		if (!status)
			status = write_part(executor, dist, v, &tensor, diag);
		f8_rt_tensor_destroy(&tensor);
		if (status)
			return status;
	}
	return F8_OK;
}
