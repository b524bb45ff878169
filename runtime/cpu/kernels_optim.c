/*
 * Reference kernels of the optimizer ops (ir/infer_backward.c): GlobalNorm (for gradient
 * clipping), LearningRate (the schedule) and AdamW.
 *
 * AdamW is torch.optim.AdamW's single-tensor step (torch/optim/adamw.py, _single_tensor_adamw)
 * operation for operation: its scalars are Python floats (double) and its tensor ops float32,
 * each op rounding once, so that a run can be compared with PyTorch's bit for bit. Every op is
 * a statement of its own: C allows a compiler to fuse a * b + c into an FMA only within one
 * expression, and torch's scalar CPU kernels do not fuse.
 */
#include <math.h>   // sqrt, sqrtf, pow, fabs, fabsf, cos, isfinite
#include <stdint.h> // int64_t
#include <string.h> // strcmp

#include "runtime/cpu/kernel_util.h" // f8_cpu_load, f8_cpu_store, f8_cpu_get, f8_cpu_set
#include "runtime/cpu/kernels.h"     // F8_CPU_KERNEL, f8_cpu_fail

/* sqrt of the sum of the squares of every element of every input, accumulated in double,
 * rounded once to the f32 result. */
F8_CPU_KERNEL(GLOBAL_NORM) {
	double sum = 0, chunk[F8_CPU_CHUNK];
	(void)diag; // nothing here can fail
	for (uint32_t i = 0; i < call->node->n_inputs; i++) {
		const f8_rt_tensor *x = call->inputs[i];
		int64_t n = x ? f8_rt_tensor_numel(x) : 0;
		for (int64_t offset = 0; offset < n; offset += F8_CPU_CHUNK) {
			int64_t count = n - offset < F8_CPU_CHUNK ? n - offset : F8_CPU_CHUNK;
			f8_cpu_load(x, offset, 1, count, chunk);
			for (int64_t j = 0; j < count; j++)
				sum += chunk[j] * chunk[j];
		}
	}
	f8_cpu_set(&call->outputs[0], 0, sqrt(sum));
	return F8_OK;
}

/*
 * The schedule at iteration `it` (1-based), in double: lr * it / warmup while it <= warmup;
 * then constant stays lr (whatever decay_iters is: it is not required for constant, and
 * min_lr defaults to 0); linear and cosine go from lr to min_lr over (warmup, decay_iters] by
 * the coefficient 1 - ratio or (1 + cos(pi ratio)) / 2, ratio = (it - warmup) /
 * (decay_iters - warmup); min_lr past decay_iters. An iteration below 1 fails.
 */
F8_CPU_KERNEL(LEARNING_RATE) {
	const double pi = 3.14159265358979323846; // C11's math.h has no M_PI
	const f8_node *node = call->node;
	double it = f8_cpu_get(call->inputs[0], 0);
	double lr = f8_node_attr_float(node, "lr", 0);
	double min_lr = f8_node_attr_float(node, "min_lr", 0);
	double warmup = (double)f8_node_attr_int(node, "warmup", 0);
	double decay = (double)f8_node_attr_int(node, "decay_iters", 0);
	const char *style = f8_node_attr_string(node, "style", "constant");
	if (!(it >= 1))
		return f8_cpu_fail(call, diag, "the iteration is %.0f; iterations count from 1",
				   it);
	double value;
	if (it <= warmup) {
		value = lr * it / warmup;
	} else if (strcmp(style, "constant") == 0) {
		value = lr;
	} else if (it > decay) {
		value = min_lr;
	} else {
		double ratio = (it - warmup) / (decay - warmup);
		double coefficient = strcmp(style, "linear") == 0 ? 1.0 - ratio
								   : 0.5 * (1.0 + cos(pi * ratio));
		value = min_lr + (lr - min_lr) * coefficient;
	}
	f8_cpu_set(&call->outputs[0], 0, value);
	return F8_OK;
}

/* The scalars of one AdamW step, as torch's tensor ops take them: decay = 1 - lr *
 * weight_decay, lerp_weight = 1 - beta1, addcmul_value = 1 - beta2, minus_step_size =
 * -lr / (1 - beta1^t), bias_correction2_sqrt = sqrt(1 - beta2^t), ... */
typedef struct adamw_scalars_f64 {
	double decay, lerp_weight, beta2, addcmul_value, bias_correction2_sqrt, epsilon;
	double minus_step_size, grad_scale;
} adamw_scalars_f64;

/* The same cast to float, as a float32 tensor op casts a Python float it is given. */
typedef struct adamw_scalars_f32 {
	float decay, lerp_weight, beta2, addcmul_value, bias_correction2_sqrt, epsilon;
	float minus_step_size, grad_scale;
} adamw_scalars_f32;

typedef struct adamw_scalars {
	adamw_scalars_f64 wide;
	adamw_scalars_f32 narrow;
	bool has_grad_scale;
} adamw_scalars;

static f8_status adamw_scalars_of(const f8_cpu_kernel_call *call, adamw_scalars *s,
				  f8_diag *diag) {
	const f8_node *node = call->node;
	double beta1 = f8_node_attr_float(node, "beta1", 0.9);
	double beta2 = f8_node_attr_float(node, "beta2", 0.999);
	double epsilon = f8_node_attr_float(node, "epsilon", 1e-8);
	double weight_decay = f8_node_attr_float(node, "weight_decay", 0.0);
	double lr = f8_cpu_get(call->inputs[4], 0), step = f8_cpu_get(call->inputs[5], 0);
	const f8_rt_tensor *grad_scale = f8_cpu_input(call, 6);
	if (!(step >= 1))
		return f8_cpu_fail(call, diag, "the step is %.0f; AdamW's steps count from 1",
				   step);
	double bias_correction1 = 1.0 - pow(beta1, step);
	double bias_correction2 = 1.0 - pow(beta2, step);
	double step_size = lr / bias_correction1;
	adamw_scalars_f64 w = {
		.decay = 1.0 - lr * weight_decay, .lerp_weight = 1.0 - beta1, .beta2 = beta2,
		.addcmul_value = 1.0 - beta2, .bias_correction2_sqrt = sqrt(bias_correction2),
		.epsilon = epsilon, .minus_step_size = -step_size,
		.grad_scale = grad_scale ? f8_cpu_get(grad_scale, 0) : 1.0,
	};
	*s = (adamw_scalars){
		.wide = w, .has_grad_scale = grad_scale != NULL,
		.narrow = {(float)w.decay, (float)w.lerp_weight, (float)w.beta2,
			   (float)w.addcmul_value, (float)w.bias_correction2_sqrt, (float)w.epsilon,
			   (float)w.minus_step_size, (float)w.grad_scale},
	};
	return F8_OK;
}

/* torch.lerp's arithmetic (ATen/native/Lerp.h), in float. (Its AVX2 kernel fuses the
 * multiply-add of the small-weight case, so PyTorch's vectorized loop may differ from this
 * scalar form, and from itself on its tail, by an ulp.) */
static float lerp_f32(float self, float end, float weight) {
	float difference = end - self;
	if (fabsf(weight) < 0.5f) {
		float step = weight * difference;
		return self + step;
	}
	float step = difference * (1.0f - weight);
	return end - step;
}

/* One element of _single_tensor_adamw in float32: param.mul_(decay);
 * exp_avg.lerp_(grad, 1 - beta1); exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2);
 * denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps);
 * param.addcdiv_(exp_avg, denom, value=-step_size). */
static void adamw_f32(const adamw_scalars *scalars, float *param, float grad, float *m,
		      float *v) {
	const adamw_scalars_f32 *s = &scalars->narrow;
	if (scalars->has_grad_scale)
		grad = grad * s->grad_scale;
	float p = *param * s->decay;
	*m = lerp_f32(*m, grad, s->lerp_weight);
	float square = s->addcmul_value * grad; // addcmul: self + (value * t1) * t2
	square = square * grad;
	*v = *v * s->beta2;
	*v = *v + square;
	float denom = sqrtf(*v) / s->bias_correction2_sqrt;
	denom = denom + s->epsilon;
	float update = s->minus_step_size * *m; // addcdiv: self + (value * t1) / t2
	update = update / denom;
	*param = p + update;
}

/* The same in double, as torch computes an f64 parameter (m and v stay f32 here). */
static void adamw_f64(const adamw_scalars *scalars, double *param, double grad, double *m,
		      double *v) {
	const adamw_scalars_f64 *s = &scalars->wide;
	if (scalars->has_grad_scale)
		grad = grad * s->grad_scale;
	double p = *param * s->decay, difference = grad - *m, step;
	if (fabs(s->lerp_weight) < 0.5) {
		step = s->lerp_weight * difference;
		*m = *m + step;
	} else {
		step = difference * (1.0 - s->lerp_weight);
		*m = grad - step;
	}
	double square = s->addcmul_value * grad;
	square = square * grad;
	*v = *v * s->beta2;
	*v = *v + square;
	double denom = sqrt(*v) / s->bias_correction2_sqrt;
	denom = denom + s->epsilon;
	double update = s->minus_step_size * *m;
	update = update / denom;
	*param = p + update;
}

/* AdamW over elements [offset, offset + count) of any float dtypes, through doubles (which
 * hold every non-f64 value exactly as the float torch works in). */
static void adamw_chunk(const f8_cpu_kernel_call *call, const adamw_scalars *s, int64_t offset,
			int64_t count) {
	double param[F8_CPU_CHUNK], grad[F8_CPU_CHUNK], m[F8_CPU_CHUNK], v[F8_CPU_CHUNK];
	const f8_rt_tensor *const *in = call->inputs;
	f8_cpu_load(in[0], offset, 1, count, param);
	f8_cpu_load(in[1], offset, 1, count, grad);
	f8_cpu_load(in[2], offset, 1, count, m);
	f8_cpu_load(in[3], offset, 1, count, v);
	bool wide = in[0]->dtype == F8_DTYPE_F64;
	for (int64_t i = 0; i < count; i++) {
		if (wide) {
			adamw_f64(s, &param[i], grad[i], &m[i], &v[i]);
			continue;
		}
		float p = (float)param[i], m32 = (float)m[i], v32 = (float)v[i];
		adamw_f32(s, &p, (float)grad[i], &m32, &v32);
		param[i] = p, m[i] = m32, v[i] = v32;
	}
	f8_cpu_store(&call->outputs[0], offset, 1, count, param);
	f8_cpu_store(&call->outputs[1], offset, 1, count, m);
	f8_cpu_store(&call->outputs[2], offset, 1, count, v);
}

/* Whether the step is skipped (f8_infer_adamw's comment): a grad_norm that is not finite or
 * a found_inf that is not 0. */
static bool adamw_skips(const f8_cpu_kernel_call *call) {
	const f8_rt_tensor *grad_norm = f8_cpu_input(call, 7), *found_inf = f8_cpu_input(call, 8);
	return (grad_norm && !isfinite(f8_cpu_get(grad_norm, 0))) ||
	       (found_inf && f8_cpu_get(found_inf, 0) != 0);
}

/* A skipped step: param, m and v go through as they are. */
static void adamw_keep(const f8_cpu_kernel_call *call, int64_t n) {
	double chunk[F8_CPU_CHUNK];
	for (int o = 0; o < 3; o++) {
		for (int64_t offset = 0; offset < n; offset += F8_CPU_CHUNK) {
			int64_t count = n - offset < F8_CPU_CHUNK ? n - offset : F8_CPU_CHUNK;
			f8_cpu_load(call->inputs[o == 0 ? 0 : o + 1], offset, 1, count, chunk);
			f8_cpu_store(&call->outputs[o], offset, 1, count, chunk);
		}
	}
}

/* param', m', v' of one AdamW step (f8_infer_adamw's comment); f32 parameters and gradients
 * straight from memory, other dtypes through adamw_chunk. */
F8_CPU_KERNEL(ADAMW) {
	const f8_rt_tensor *param = call->inputs[0], *grad = call->inputs[1];
	adamw_scalars s;
	f8_status status = adamw_scalars_of(call, &s, diag);
	if (status)
		return status;
	int64_t n = f8_rt_tensor_numel(param);
	if (adamw_skips(call)) {
		adamw_keep(call, n);
		return F8_OK;
	}
	if (param->dtype == F8_DTYPE_F32 && grad->dtype == F8_DTYPE_F32 && n > 0) {
		const float *g = grad->data, *m_in = call->inputs[2]->data;
		const float *v_in = call->inputs[3]->data, *p_in = param->data;
		float *p = call->outputs[0].data, *m = call->outputs[1].data;
		float *v = call->outputs[2].data;
		for (int64_t i = 0; i < n; i++) {
			p[i] = p_in[i], m[i] = m_in[i], v[i] = v_in[i];
			adamw_f32(&s, &p[i], g[i], &m[i], &v[i]);
		}
		return F8_OK;
	}
	for (int64_t offset = 0; offset < n; offset += F8_CPU_CHUNK) {
		int64_t count = n - offset < F8_CPU_CHUNK ? n - offset : F8_CPU_CHUNK;
		adamw_chunk(call, &s, offset, count);
	}
	return F8_OK;
}
