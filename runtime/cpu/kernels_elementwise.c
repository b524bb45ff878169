/*
 * Reference kernels of the elementwise ops: unary math, binary arithmetic with NumPy
 * broadcasting, comparisons and logic (bool results), Where, Cast and CastLike (FP8 with or
 * without saturation), and the inference forms of Dropout and Identity. Values go through
 * double (kernel_util.h): loaded, computed, rounded once to the output's dtype.
 */
#include <math.h>   // sqrt, exp, log, tanh, cos, sin, erf, pow, fabs, isnan, NAN, INFINITY
#include <stdint.h> // int64_t, uint8_t, uint32_t
#include <string.h> // memcpy, memset

#include "ir/fp8.h"                  // f8_float_encode
#include "runtime/cpu/kernel_util.h" // f8_cpu_load, f8_cpu_store, f8_cpu_broadcast
#include "runtime/cpu/kernels.h"     // F8_CPU_KERNEL

/* Unary ops. */

static double sigmoid(double x) {
	if (x >= 0) // the two forms keep exp's argument non-positive
		return 1.0 / (1.0 + exp(-x));
	double e = exp(x);
	return e / (1.0 + e);
}

/* v[j] = op(v[j]), j < n; the switch stays outside the loops. */
static void unary_apply(f8_op op, double *v, int64_t n) {
	switch (op) {
#define UNARY(e, expression)                    \
	case F8_OP_##e:                         \
		for (int64_t j = 0; j < n; j++) { \
			double x = v[j];        \
			v[j] = (expression);    \
		}                               \
		return;
	UNARY(SQRT, sqrt(x))
	UNARY(RECIPROCAL, 1.0 / x)
	UNARY(NEG, -x)
	UNARY(ABS, fabs(x))
	UNARY(EXP, exp(x))
	UNARY(LOG, log(x))
	UNARY(TANH, tanh(x))
	UNARY(COS, cos(x))
	UNARY(SIN, sin(x))
	UNARY(ERF, erf(x))
	UNARY(SIGMOID, sigmoid(x))
	UNARY(RELU, x > 0.0 || isnan(x) ? x : 0.0)
	UNARY(IS_NAN, isnan(x) ? 1.0 : 0.0)
	UNARY(NAN_TO_INF, isnan(x) ? (double)INFINITY : x)
	UNARY(NOT, x == 0.0 ? 1.0 : 0.0)
#undef UNARY
	default:
		return;
	}
}

static f8_status unary(const f8_cpu_kernel_call *call, f8_op op) {
	const f8_rt_tensor *x = call->inputs[0];
	f8_rt_tensor *y = &call->outputs[0];
	int64_t total = f8_rt_tensor_numel(x);
	double v[F8_CPU_CHUNK];
	for (int64_t i0 = 0; i0 < total; i0 += F8_CPU_CHUNK) {
		int64_t n = f8_cpu_chunk(total - i0);
		f8_cpu_load(x, i0, 1, n, v);
		unary_apply(op, v, n);
		f8_cpu_store(y, i0, 1, n, v);
	}
	return F8_OK;
}

#define UNARY_KERNEL(e)                    \
	F8_CPU_KERNEL(e) {                 \
		(void)diag;                \
		return unary(call, F8_OP_##e); \
	}
UNARY_KERNEL(SQRT)
UNARY_KERNEL(RECIPROCAL)
UNARY_KERNEL(NEG)
UNARY_KERNEL(ABS)
UNARY_KERNEL(EXP)
UNARY_KERNEL(LOG)
UNARY_KERNEL(TANH)
UNARY_KERNEL(COS)
UNARY_KERNEL(SIN)
UNARY_KERNEL(ERF)
UNARY_KERNEL(SIGMOID)
UNARY_KERNEL(RELU)
UNARY_KERNEL(IS_NAN)
UNARY_KERNEL(NAN_TO_INF)
UNARY_KERNEL(NOT)
#undef UNARY_KERNEL

/* Identity: the same bytes. */
F8_CPU_KERNEL(IDENTITY) {
	(void)diag;
	if (call->outputs[0].n_bytes)
		memcpy(call->outputs[0].data, call->inputs[0]->data, call->outputs[0].n_bytes);
	return F8_OK;
}

/* Dropout in its inference form (what a reference run of a training step uses too: f8c's
 * training plans do not drop): the input unchanged, and the optional mask all true. */
F8_CPU_KERNEL(DROPOUT) {
	f8_status status = f8_cpu_kernel_IDENTITY(call, diag);
	f8_rt_tensor *mask = f8_cpu_output(call, 1);
	if (mask && mask->n_bytes)
		memset(mask->data, 1, mask->n_bytes);
	return status;
}

/* Binary ops, broadcast. */

/* Max and Min propagate NaN, as NumPy's maximum and minimum (and ONNX's Max, Min) do. */
static double maximum(double a, double b) {
	return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
}

static double minimum(double a, double b) {
	return isnan(a) || isnan(b) ? NAN : a < b ? a : b;
}

/* a[j] = op(a[j], b[j]), j < n. Integer division truncates toward zero, as the store does. */
static void binary_apply(f8_op op, double *a, const double *b, int64_t n) {
	switch (op) {
#define BINARY(e, expression)                          \
	case F8_OP_##e:                                \
		for (int64_t j = 0; j < n; j++) {      \
			double x = a[j], y = b[j];     \
			a[j] = (expression);           \
		}                                      \
		return;
	BINARY(ADD, x + y)
	BINARY(SUB, x - y)
	BINARY(MUL, x * y)
	BINARY(DIV, x / y)
	BINARY(POW, pow(x, y))
	BINARY(MAX, maximum(x, y))
	BINARY(MIN, minimum(x, y))
	BINARY(EQUAL, x == y)
	BINARY(LESS, x < y)
	BINARY(GREATER, x > y)
	BINARY(LESS_OR_EQUAL, x <= y)
	BINARY(GREATER_OR_EQUAL, x >= y)
	BINARY(AND, x != 0.0 && y != 0.0)
	BINARY(OR, x != 0.0 || y != 0.0)
#undef BINARY
	default:
		return;
	}
}

static f8_status binary(const f8_cpu_kernel_call *call, f8_op op) {
	f8_rt_tensor *y = &call->outputs[0];
	f8_cpu_broadcast plan;
	f8_cpu_broadcast_init(&plan, y, call->inputs, 2);
	int64_t sa = plan.inner_strides[0], sb = plan.inner_strides[1];
	double a[F8_CPU_CHUNK], b[F8_CPU_CHUNK];
	for (int64_t run = 0; run < plan.runs; run++) {
		int64_t offsets[2];
		f8_cpu_broadcast_offsets(&plan, run, offsets);
		for (int64_t j0 = 0; j0 < plan.inner; j0 += F8_CPU_CHUNK) {
			int64_t n = f8_cpu_chunk(plan.inner - j0);
			f8_cpu_load(call->inputs[0], offsets[0] + j0 * sa, sa, n, a);
			f8_cpu_load(call->inputs[1], offsets[1] + j0 * sb, sb, n, b);
			binary_apply(op, a, b, n);
			f8_cpu_store(y, run * plan.inner + j0, 1, n, a);
		}
	}
	return F8_OK;
}

#define BINARY_KERNEL(e)                    \
	F8_CPU_KERNEL(e) {                  \
		(void)diag;                 \
		return binary(call, F8_OP_##e); \
	}
BINARY_KERNEL(ADD)
BINARY_KERNEL(SUB)
BINARY_KERNEL(MUL)
BINARY_KERNEL(DIV)
BINARY_KERNEL(POW)
BINARY_KERNEL(MAX)
BINARY_KERNEL(MIN)
BINARY_KERNEL(EQUAL)
BINARY_KERNEL(LESS)
BINARY_KERNEL(GREATER)
BINARY_KERNEL(LESS_OR_EQUAL)
BINARY_KERNEL(GREATER_OR_EQUAL)
BINARY_KERNEL(AND)
BINARY_KERNEL(OR)
#undef BINARY_KERNEL

/* Where: x where the condition is true, else y, all three broadcast; a byte copy, so that no
 * value goes through double (an i64 beyond 2^53 stays exact). */
F8_CPU_KERNEL(WHERE) {
	(void)diag;
	const f8_rt_tensor *cond = call->inputs[0], *x = call->inputs[1], *y = call->inputs[2];
	f8_rt_tensor *out = &call->outputs[0];
	size_t size = f8_dtype_get_info(out->dtype)->bytes;
	f8_cpu_broadcast plan;
	f8_cpu_broadcast_init(&plan, out, call->inputs, 3);
	const uint8_t *c = cond->data;
	const char *xd = x->data, *yd = y->data;
	char *od = out->data;
	for (int64_t run = 0; run < plan.runs; run++) {
		int64_t offsets[3];
		f8_cpu_broadcast_offsets(&plan, run, offsets);
		for (int64_t j = 0; j < plan.inner; j++) {
			int64_t ic = offsets[0] + j * plan.inner_strides[0];
			int64_t ix = offsets[1] + j * plan.inner_strides[1];
			int64_t iy = offsets[2] + j * plan.inner_strides[2];
			const char *from = c[ic] ? xd + (size_t)ix * size : yd + (size_t)iy * size;
			memcpy(od + (size_t)(run * plan.inner + j) * size, from, size);
		}
	}
	return F8_OK;
}

/* Casts. */

/*
 * x converted to y's dtype: through double, rounded by the store (FP8 saturating); with
 * saturate=0 an FP8 target takes the non-saturating conversion of ir/fp8.h instead (overflow
 * to NaN for E4M3, inf for E5M2), as ONNX's Cast with saturate=0 does.
 */
static f8_status cast(const f8_cpu_kernel_call *call) {
	const f8_rt_tensor *x = call->inputs[0];
	f8_rt_tensor *y = &call->outputs[0];
	bool saturate = f8_node_attr_int(call->node, "saturate", 1);
	if (x->dtype == y->dtype) {
		if (y->n_bytes)
			memcpy(y->data, x->data, y->n_bytes);
		return F8_OK;
	}
	int64_t total = f8_rt_tensor_numel(x);
	double v[F8_CPU_CHUNK];
	for (int64_t i0 = 0; i0 < total; i0 += F8_CPU_CHUNK) {
		int64_t n = f8_cpu_chunk(total - i0);
		f8_cpu_load(x, i0, 1, n, v);
		if (f8_dtype_is_fp8(y->dtype) && !saturate)
			for (int64_t j = 0; j < n; j++)
				((uint8_t *)y->data)[i0 + j] =
					(uint8_t)f8_float_encode(y->dtype, (float)v[j], false);
		else
			f8_cpu_store(y, i0, 1, n, v);
	}
	return F8_OK;
}

F8_CPU_KERNEL(CAST) {
	(void)diag;
	return cast(call);
}

/* CastLike: a Cast to the second input's dtype (its values are not read). */
F8_CPU_KERNEL(CAST_LIKE) {
	(void)diag;
	return cast(call);
}
