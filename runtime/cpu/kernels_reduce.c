/*
 * Reference kernels of the reductions: ReduceSum, ReduceMean, ReduceMax over attribute axes
 * (all axes when absent; keepdims only changes the output's shape, which the executor already
 * made), and Softmax and LogSoftmax along one axis, stable (the row's max subtracted first).
 * Sums accumulate in double.
 */
#include <math.h>   // exp, log, isnan, INFINITY, NAN
#include <stdint.h> // int64_t

#include "ir/alloc.h"                // f8_free
#include "runtime/cpu/kernel_util.h" // f8_cpu_load, f8_cpu_store, f8_cpu_broadcast
#include "runtime/cpu/kernels.h"     // F8_CPU_KERNEL

/*
 * Reduces x into per-output accumulators: x is walked in runs, and each element adds to (or
 * maxes into) the accumulator that x's index with the reduced axes set to 0 maps to (a view
 * of the output with unit dims on the reduced axes, broadcast back over x).
 */
static f8_status reduce(const f8_cpu_kernel_call *call, f8_op op, f8_diag *diag) {
	const f8_rt_tensor *x = call->inputs[0];
	f8_rt_tensor *out = &call->outputs[0];
	const f8_attr *axes = f8_node_attr(call->node, "axes");
	f8_rt_tensor kept = {.dtype = out->dtype, .rank = x->rank};
	for (int d = 0; d < x->rank; d++)
		kept.dims[d] = axes ? x->dims[d] : 1;
	for (uint32_t i = 0; axes && i < axes->ints.n; i++)
		kept.dims[f8_cpu_axis(axes->ints.items[i], x->rank)] = 1;
	int64_t n_out = f8_rt_tensor_numel(out), n_in = f8_rt_tensor_numel(x);
	double *acc;
	f8_status status = f8_cpu_alloc(n_out, sizeof(double), (void **)&acc, diag);
	if (status)
		return status;
	for (int64_t i = 0; i < n_out; i++)
		acc[i] = op == F8_OP_REDUCE_MAX ? -INFINITY : 0.0;
	const f8_rt_tensor *views[1] = {&kept};
	f8_cpu_broadcast plan;
	f8_cpu_broadcast_init(&plan, x, views, 1);
	int64_t stride = plan.inner_strides[0];
	double v[F8_CPU_CHUNK];
	for (int64_t run = 0; run < plan.runs; run++) {
		int64_t offset;
		f8_cpu_broadcast_offsets(&plan, run, &offset);
		for (int64_t j0 = 0; j0 < plan.inner; j0 += F8_CPU_CHUNK) {
			int64_t n = f8_cpu_chunk(plan.inner - j0);
			double *a = acc + offset + j0 * stride;
			f8_cpu_load(x, run * plan.inner + j0, 1, n, v);
			if (op == F8_OP_REDUCE_MAX)
				for (int64_t j = 0; j < n; j++) {
					double *slot = &a[j * stride]; // NaN, once there, stays
					if (!isnan(*slot) && (isnan(v[j]) || v[j] > *slot))
						*slot = v[j];
				}
			else
				for (int64_t j = 0; j < n; j++)
					a[j * stride] += v[j];
		}
	}
	if (op == F8_OP_REDUCE_MEAN) {
		double count = n_out ? (double)n_in / (double)n_out : 0.0;
		for (int64_t i = 0; i < n_out; i++)
			acc[i] /= count;
	}
	f8_cpu_store(out, 0, 1, n_out, acc);
	f8_free(acc);
	return F8_OK;
}

F8_CPU_KERNEL(REDUCE_SUM) {
	return reduce(call, F8_OP_REDUCE_SUM, diag);
}

F8_CPU_KERNEL(REDUCE_MEAN) {
	return reduce(call, F8_OP_REDUCE_MEAN, diag);
}

F8_CPU_KERNEL(REDUCE_MAX) {
	return reduce(call, F8_OP_REDUCE_MAX, diag);
}

/* Softmax (exp(x - max) / sum) or, with `log`, LogSoftmax (x - max - log(sum)) along `axis`. */
static f8_status softmax(const f8_cpu_kernel_call *call, bool log_form, f8_diag *diag) {
	const f8_rt_tensor *x = call->inputs[0];
	f8_rt_tensor *y = &call->outputs[0];
	int axis = f8_cpu_axis(f8_node_attr_int(call->node, "axis", -1), x->rank);
	int64_t outer = f8_cpu_dims_product(x, 0, axis), n = x->dims[axis];
	int64_t inner = f8_cpu_dims_product(x, axis + 1, x->rank);
	double *line;
	f8_status status = f8_cpu_alloc(n, sizeof(double), (void **)&line, diag);
	if (status)
		return status;
	for (int64_t o = 0; o < outer; o++)
		for (int64_t i = 0; i < inner; i++) {
			int64_t start = o * n * inner + i;
			f8_cpu_load(x, start, inner, n, line);
			double max = -INFINITY, sum = 0.0;
			for (int64_t j = 0; j < n; j++)
				if (!isnan(max) && (isnan(line[j]) || line[j] > max))
					max = line[j];
			for (int64_t j = 0; j < n; j++)
				sum += exp(line[j] - max);
			if (log_form) {
				double log_sum = log(sum);
				for (int64_t j = 0; j < n; j++)
					line[j] = (line[j] - max) - log_sum;
			} else {
				for (int64_t j = 0; j < n; j++)
					line[j] = exp(line[j] - max) / sum;
			}
			f8_cpu_store(y, start, inner, n, line);
		}
	f8_free(line);
	return F8_OK;
}

F8_CPU_KERNEL(SOFTMAX) {
	return softmax(call, false, diag);
}

F8_CPU_KERNEL(LOG_SOFTMAX) {
	return softmax(call, true, diag);
}
