/*
 * Reference kernels of the backward ops of the dense layers (ir/infer_backward.c states their
 * semantics): LinearWgrad, LayerNormGrad, RMSNormGrad, GeluGrad, SwiGLUGrad, RopeGrad,
 * EmbeddingGrad, GatherGrad, SliceGrad, SoftmaxGrad, LogSoftmaxGrad and CrossEntropyGrad.
 *
 * Each is the exact derivative of its forward kernel's arithmetic in double. Where the forward
 * saved f32 statistics for the backward (a norm's mean and rstd, the cross-entropy's
 * log-sum-exp), the kernel recomputes them in double from x instead: the forward used the
 * double values, and their f32 roundings would leave an f64 gradient check about 1e-7 off.
 * Recomputing costs one more pass over a row the kernel reads anyway.
 */
#include <math.h>   // exp, erf, tanh
#include <stdint.h> // int64_t
#include <string.h> // memcpy, memset, strcmp

#include "ir/alloc.h"                   // f8_free
#include "runtime/cpu/kernel_forward.h" // f8_cpu_norm_create, f8_cpu_layer_norm_rstd
#include "runtime/cpu/kernel_util.h"    // f8_cpu_load, f8_cpu_gemm, f8_cpu_sigmoid, f8_cpu_softmax
#include "runtime/cpu/kernels.h"        // F8_CPU_KERNEL, f8_cpu_dim, f8_cpu_fail

/* dw = the sum over the leading dims of dy^T x: one GEMM over rows = the leading dims'
 * product, through f8_cpu_gemm (cblas_sgemm on f32-decoded operands, dgemm for f64). */
F8_CPU_KERNEL(LINEAR_WGRAD) {
	const f8_rt_tensor *dy = call->inputs[0], *x = call->inputs[1];
	f8_rt_tensor *dw = &call->outputs[0];
	int rank = x->rank;
	int64_t rows = f8_cpu_dims_product(x, 0, rank - 1);
	int64_t n = dy->dims[rank - 1], k = x->dims[rank - 1];
	bool transposed = f8_node_attr_int(call->node, "transpose_weight", 0);
	f8_cpu_gemm gemm;
	// (N, K) = dy^T (N, rows) x (rows, K); transposed (K, N) = x^T dy.
	const f8_rt_tensor *a = transposed ? x : dy, *b = transposed ? dy : x;
	int64_t m = transposed ? k : n, cols = transposed ? n : k;
	f8_status status = f8_cpu_gemm_create(call, a, b, dw, m, cols, rows, &gemm, diag);
	if (status)
		return status;
	f8_cpu_gemm_run(&gemm, true, false, m, cols, rows, 0, m, 0, cols, 0, cols);
	f8_cpu_gemm_store(&gemm, dw);
	f8_cpu_gemm_destroy(&gemm);
	return F8_OK;
}

/*
 * With xhat = (x - mean) * rstd and g = dy * gamma, per row:
 *   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)); dgamma += dy * xhat; dbeta += dy.
 * The f32 mean and rstd inputs are not read (see the file comment).
 */
F8_CPU_KERNEL(LAYER_NORM_GRAD) {
	const f8_rt_tensor *dy = call->inputs[0], *x = call->inputs[1], *gamma = call->inputs[2];
	f8_rt_tensor *dx = &call->outputs[0], *dbeta = f8_cpu_output(call, 2);
	f8_cpu_norm norm;
	f8_status status = f8_cpu_norm_create(call, x, gamma, 5, &norm, diag);
	if (status || norm.cols == 0)
		return status;
	int64_t rows = norm.rows, cols = norm.cols;
	double *gamma_row = norm.scratch, *x_row = gamma_row + cols, *dy_row = x_row + cols;
	double *g = dy_row + cols, *dgamma = g + cols, *dbeta_sum = dgamma + cols;
	memset(dgamma, 0, 2 * (size_t)cols * sizeof(double));
	for (int64_t r = 0; r < rows; r++) {
		f8_cpu_load(x, r * cols, 1, cols, x_row);
		f8_cpu_load(dy, r * cols, 1, cols, dy_row);
		double mean, rstd = f8_cpu_layer_norm_rstd(&norm, x_row, &mean);
		double g_sum = 0, gx_sum = 0;
		for (int64_t i = 0; i < cols; i++) {
			x_row[i] = (x_row[i] - mean) * rstd; // now xhat
			g[i] = dy_row[i] * gamma_row[i];
			g_sum += g[i];
			gx_sum += g[i] * x_row[i];
			dgamma[i] += dy_row[i] * x_row[i];
			dbeta_sum[i] += dy_row[i];
		}
		double g_mean = g_sum / (double)cols, gx_mean = gx_sum / (double)cols;
		for (int64_t i = 0; i < cols; i++)
			g[i] = rstd * (g[i] - g_mean - x_row[i] * gx_mean);
		f8_cpu_store(dx, r * cols, 1, cols, g);
	}
	f8_cpu_store(&call->outputs[1], 0, 1, cols, dgamma);
	if (dbeta)
		f8_cpu_store(dbeta, 0, 1, cols, dbeta_sum);
	f8_free(norm.scratch);
	return F8_OK;
}

/*
 * The forward is y = round_x(x * rstd) * gamma, rstd = 1/sqrt(mean(x^2) + epsilon). With
 * n = x * rstd and dn = dy * gamma, per row: dx = rstd * (dn - n * mean(dn * n)), the rounding
 * passed straight through; dgamma += dy * round_x(n), the exact derivative in gamma.
 */
F8_CPU_KERNEL(RMS_NORM_GRAD) {
	const f8_rt_tensor *dy = call->inputs[0], *x = call->inputs[1], *gamma = call->inputs[2];
	f8_cpu_norm norm;
	f8_status status = f8_cpu_norm_create(call, x, gamma, 4, &norm, diag);
	if (status || norm.cols == 0)
		return status;
	int64_t cols = norm.cols;
	double *gamma_row = norm.scratch, *x_row = gamma_row + cols, *dy_row = x_row + cols;
	double *dn = dy_row + cols, *dgamma = dn + cols;
	memset(dgamma, 0, (size_t)cols * sizeof(double));
	for (int64_t r = 0; r < norm.rows; r++) {
		f8_cpu_load(x, r * cols, 1, cols, x_row);
		f8_cpu_load(dy, r * cols, 1, cols, dy_row);
		double rstd = f8_cpu_rms_norm_rstd(&norm, x_row), dot = 0;
		for (int64_t i = 0; i < cols; i++) {
			x_row[i] *= rstd; // now the normalized x
			dn[i] = dy_row[i] * gamma_row[i];
			dot += dn[i] * x_row[i];
			dgamma[i] += dy_row[i] * f8_cpu_round(x->dtype, x_row[i]);
		}
		double dot_mean = dot / (double)cols;
		for (int64_t i = 0; i < cols; i++)
			dn[i] = rstd * (dn[i] - x_row[i] * dot_mean);
		f8_cpu_store(&call->outputs[0], r * cols, 1, cols, dn);
	}
	f8_cpu_store(&call->outputs[1], 0, 1, cols, dgamma);
	f8_free(norm.scratch);
	return F8_OK;
}

/* gelu'(x) of the erf form 0.5 x (1 + erf(x / sqrt 2)) or of the tanh form
 * 0.5 x (1 + tanh(u)), u = sqrt(2 / pi) (x + 0.044715 x^3). (C11's math.h has no M_PI.) */
static double gelu_derivative(double x, bool tanh_form) {
	const double sqrt_half = 0.70710678118654752440, inv_sqrt_2pi = 0.39894228040143267794;
	const double sqrt_2_over_pi = 0.79788456080286535588, cubic = 0.044715;
	if (!tanh_form)
		return 0.5 * (1.0 + erf(x * sqrt_half)) + x * exp(-0.5 * x * x) * inv_sqrt_2pi;
	double t = tanh(sqrt_2_over_pi * (x + cubic * x * x * x));
	double du_dx = sqrt_2_over_pi * (1.0 + 3.0 * cubic * x * x);
	return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du_dx;
}

/* dx = dy * gelu'(x), with the forward's approximation. */
F8_CPU_KERNEL(GELU_GRAD) {
	const f8_rt_tensor *dy = call->inputs[0], *x = call->inputs[1];
	const char *approximate = f8_node_attr_string(call->node, "approximate", "none");
	bool tanh_form = strcmp(approximate, "tanh") == 0;
	(void)diag; // nothing here can fail
	int64_t n = f8_rt_tensor_numel(x);
	double a[F8_CPU_CHUNK], b[F8_CPU_CHUNK];
	for (int64_t offset = 0; offset < n; offset += F8_CPU_CHUNK) {
		int64_t count = n - offset < F8_CPU_CHUNK ? n - offset : F8_CPU_CHUNK;
		f8_cpu_load(dy, offset, 1, count, a);
		f8_cpu_load(x, offset, 1, count, b);
		for (int64_t i = 0; i < count; i++)
			a[i] *= gelu_derivative(b[i], tanh_form);
		f8_cpu_store(&call->outputs[0], offset, 1, count, a);
	}
	return F8_OK;
}

/* y = silu(g) * u, silu(g) = g * sigmoid(g): dg = dy * u * silu'(g), du = dy * silu(g), with
 * silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g))). On the packed form [gate | up] each row of
 * dx is [dg | du]; on two inputs dgate and dup are the two outputs. */
F8_CPU_KERNEL(SWIGLU_GRAD) {
	const f8_rt_tensor *dy = call->inputs[0], *x = call->inputs[1];
	const f8_rt_tensor *up = f8_cpu_input(call, 2);
	int64_t n = dy->dims[dy->rank - 1];
	int64_t rows = f8_cpu_dims_product(dy, 0, dy->rank - 1);
	// Packed: gate at 2n r, up at 2n r + n; else gate and up both at n r, in their tensors.
	int64_t stride = up ? n : 2 * n, up_shift = up ? 0 : n;
	const f8_rt_tensor *up_source = up ? up : x;
	f8_rt_tensor *dgate = &call->outputs[0], *dup = up ? &call->outputs[1] : dgate;
	double *scratch;
	f8_status status = f8_cpu_alloc(3 * n, sizeof(double), (void **)&scratch, diag);
	if (status || n == 0)
		return status;
	double *gate = scratch, *value = gate + n, *grad = value + n;
	for (int64_t r = 0; r < rows; r++) {
		f8_cpu_load(dy, r * n, 1, n, grad);
		f8_cpu_load(x, r * stride, 1, n, gate);
		f8_cpu_load(up_source, r * stride + up_shift, 1, n, value);
		for (int64_t i = 0; i < n; i++) {
			double g = gate[i], u = value[i], sigmoid = f8_cpu_sigmoid(g);
			gate[i] = grad[i] * u * sigmoid * (1.0 + g * (1.0 - sigmoid));
			value[i] = grad[i] * g * sigmoid;
		}
		f8_cpu_store(dgate, r * stride, 1, n, gate);
		f8_cpu_store(dup, r * stride + up_shift, 1, n, value);
	}
	f8_free(scratch);
	return F8_OK;
}

/*
 * The forward is out = x * cos + rot(x) * sin over the first rotary_dim dims (the rest pass
 * through), rot(x)[a] = sign(a) x[partner(a)]: rotate-half pairs a with a +- rotary_dim / 2
 * (sign -1 in the first half), interleaved pairs 2i with 2i + 1 (sign -1 at 2i). Being linear,
 * its gradient is the transpose: dx = dy * cos, plus sign(a) dy[a] sin[a] into dx[partner(a)].
 */
F8_CPU_KERNEL(ROPE_GRAD) {
	const f8_rt_tensor *dy = call->inputs[0], *cos = call->inputs[1], *sin = call->inputs[2];
	bool interleaved = f8_node_attr_int(call->node, "interleaved", 0);
	int rank = dy->rank, table_rank = cos->rank;
	int64_t head_dim = dy->dims[rank - 1], rotary = cos->dims[table_rank - 1];
	int64_t rows = f8_cpu_dims_product(dy, 0, rank - 1), half = rotary / 2;
	// The table row of an x row: its (seq and leading) indices where the table is not 1.
	int64_t table_strides[F8_MAX_RANK] = {0}, stride = rotary;
	for (int i = table_rank - 2; i >= 0; i--) {
		table_strides[i] = cos->dims[i] == 1 ? 0 : stride;
		stride *= cos->dims[i];
	}
	double *scratch;
	f8_status status = f8_cpu_alloc(2 * head_dim + 2 * rotary, sizeof(double),
					(void **)&scratch, diag);
	if (status || head_dim == 0)
		return status;
	double *grad = scratch, *out = grad + head_dim, *c = out + head_dim, *s = c + rotary;
	for (int64_t r = 0; r < rows; r++) {
		int64_t table = 0, rest = r;
		for (int i = rank - 2; i >= 0; i--) {
			int table_dim = i - (rank - table_rank);
			if (table_dim >= 0)
				table += (rest % dy->dims[i]) * table_strides[table_dim];
			rest /= dy->dims[i];
		}
		f8_cpu_load(dy, r * head_dim, 1, head_dim, grad);
		f8_cpu_load(cos, table, 1, rotary, c);
		f8_cpu_load(sin, table, 1, rotary, s);
		memcpy(out, grad, (size_t)head_dim * sizeof(double));
		for (int64_t a = 0; a < rotary; a++)
			out[a] = grad[a] * c[a];
		for (int64_t a = 0; a < rotary; a++) {
			bool first = interleaved ? a % 2 == 0 : a < half;
			int64_t shift = interleaved ? 1 : half;
			int64_t partner = first ? a + shift : a - shift;
			out[partner] += (first ? -1.0 : 1.0) * grad[a] * s[a];
		}
		f8_cpu_store(&call->outputs[0], r * head_dim, 1, head_dim, out);
	}
	f8_free(scratch);
	return F8_OK;
}

/*
 * The positions of n indices grouped by index, stably (a counting sort): the positions whose
 * index is v are order[start[v] .. start[v + 1]). `index` (n) holds values in [0, size);
 * *start (size + 1, then order's n) is one allocation for f8_free.
 */
static f8_status group_by_index(const int64_t *index, int64_t n, int64_t size, int64_t **start,
				int64_t **order, f8_diag *diag) {
	f8_status status = f8_cpu_alloc(size + 1 + n, sizeof(int64_t), (void **)start, diag);
	if (status)
		return status;
	*order = *start + size + 1;
	memset(*start, 0, (size_t)(size + 1) * sizeof(int64_t));
	for (int64_t i = 0; i < n; i++)
		(*start)[index[i] + 1]++;
	for (int64_t v = 0; v < size; v++)
		(*start)[v + 1] += (*start)[v];
	for (int64_t i = 0; i < n; i++)
		(*order)[(*start)[index[i]]++] = i;
	for (int64_t v = size; v > 0; v--) // each start moved to its run's end: shift back
		(*start)[v] = (*start)[v - 1];
	(*start)[0] = 0;
	return F8_OK;
}

/*
 * The indices of `tensor` (n) into *out (an allocation for f8_free), negative ones counting
 * from `size` when `negative_wrap`; one outside [0, size) fails naming `what`.
 */
static f8_status read_indices(const f8_cpu_kernel_call *call, const f8_rt_tensor *tensor,
			      int64_t size, bool negative_wrap, const char *what, int64_t **out,
			      f8_diag *diag) {
	int64_t n = f8_rt_tensor_numel(tensor);
	f8_status status = f8_cpu_alloc(n, sizeof(int64_t), (void **)out, diag);
	for (int64_t i = 0; !status && i < n; i++) {
		int64_t v = (int64_t)f8_cpu_get(tensor, i);
		if (negative_wrap && v < 0)
			v += size;
		if (v < 0 || v >= size) {
			status = f8_cpu_fail(call, diag, "%s %lld at position %lld is outside "
					     "[0, %lld)", what, (long long)f8_cpu_get(tensor, i),
					     (long long)i, (long long)size);
			f8_free(*out);
			*out = NULL;
		} else {
			(*out)[i] = v;
		}
	}
	return status;
}

/*
 * out[o, v, :] = the sum of in[o, j, :] over the positions j whose index is v, for o < outer,
 * v < size, over rows of `inner` elements; rows of out no index names stay as they are (zero).
 * The sums run in double, in the order of j, and are rounded once.
 */
static f8_status scatter_add(const f8_rt_tensor *in, const int64_t *index, int64_t n,
			     int64_t outer, int64_t size, int64_t inner, f8_rt_tensor *out,
			     f8_diag *diag) {
	int64_t *start, *order;
	double *sum;
	f8_status status = group_by_index(index, n, size, &start, &order, diag);
	if (status)
		return status;
	// One spare element, so that the scratch exists even for empty rows.
	if ((status = f8_cpu_alloc(2 * inner + 1, sizeof(double), (void **)&sum, diag))) {
		f8_free(start);
		return status;
	}
	double *row = sum + inner;
	for (int64_t o = 0; o < outer; o++) {
		for (int64_t v = 0; v < size; v++) {
			if (start[v] == start[v + 1])
				continue;
			memset(sum, 0, (size_t)inner * sizeof(double));
			for (int64_t p = start[v]; p < start[v + 1]; p++) {
				f8_cpu_load(in, (o * n + order[p]) * inner, 1, inner, row);
				for (int64_t i = 0; i < inner; i++)
					sum[i] += row[i];
			}
			f8_cpu_store(out, (o * size + v) * inner, 1, inner, sum);
		}
	}
	f8_free(sum);
	f8_free(start);
	return F8_OK;
}

/* dw row r = the sum of the rows of dy whose id is r; an id outside the vocabulary fails. */
F8_CPU_KERNEL(EMBEDDING_GRAD) {
	const f8_rt_tensor *dy = call->inputs[0], *ids = call->inputs[1];
	f8_rt_tensor *dw = &call->outputs[0];
	int64_t *index, n = f8_rt_tensor_numel(ids), kept = 0;
	if (call->node->n_inputs > 2) { // a vocabulary shard: this rank's ids, from its start
		int64_t start = (int64_t)f8_cpu_get(call->inputs[2], 0);
		f8_status status = f8_cpu_alloc(n + 1, sizeof(int64_t), (void **)&index, diag);
		if (status)
			return status;
		// dy's rows of this shard's ids first, in order; scatter_add reads `kept` of them
		f8_rt_tensor rows = {0};
		int64_t dims[2] = {n, dw->dims[1]};
		if ((status = f8_rt_tensor_create(dy->dtype, 2, dims, &rows, diag))) {
			f8_free(index);
			return status;
		}
		size_t row_bytes = (size_t)dw->dims[1] * f8_dtype_get_info(dy->dtype)->bytes;
		for (int64_t i = 0; i < n; i++) {
			int64_t at = (int64_t)f8_cpu_get(ids, i) - start;
			if (at < 0 || at >= dw->dims[0])
				continue;
			memcpy((char *)rows.data + (size_t)kept * row_bytes,
			       (const char *)dy->data + (size_t)i * row_bytes, row_bytes);
			index[kept++] = at;
		}
		status = scatter_add(&rows, index, kept, 1, dw->dims[0], dw->dims[1], dw, diag);
		f8_rt_tensor_destroy(&rows);
		f8_free(index);
		return status;
	}
	f8_status status = read_indices(call, ids, dw->dims[0], false, "id", &index, diag);
	if (status) {
		f8_diag_hint(diag, "the vocabulary has %lld rows: check the tokenizer's vocabulary "
			     "size against the model's", (long long)dw->dims[0]);
		return status;
	}
	status = scatter_add(dy, index, n, 1, dw->dims[0], dw->dims[1], dw, diag);
	f8_free(index);
	return status;
}

/* Zeros, then dy's slices added at the gathered positions along `axis` (negative indices
 * count from the end, as Gather's). */
F8_CPU_KERNEL(GATHER_GRAD) {
	const f8_rt_tensor *dy = call->inputs[0], *indices = call->inputs[1];
	f8_rt_tensor *dx = &call->outputs[0];
	int axis = f8_cpu_axis(f8_node_attr_int(call->node, "axis", 0), dx->rank);
	int64_t size = dx->dims[axis], *index;
	f8_status status = read_indices(call, indices, size, true, "index", &index, diag);
	if (status)
		return status;
	status = scatter_add(dy, index, f8_rt_tensor_numel(indices),
			     f8_cpu_dims_product(dx, 0, axis), size,
			     f8_cpu_dims_product(dx, axis + 1, dx->rank), dx, diag);
	f8_free(index);
	return status;
}

/* TopKGrad: dx zero but at each index TopK took along `axis`, where its dy goes (TopK's places
 * in a line are distinct; indices that repeat add up). */
F8_CPU_KERNEL(TOP_K_GRAD) {
	const f8_rt_tensor *dy = call->inputs[0], *indices = call->inputs[1];
	f8_rt_tensor *dx = &call->outputs[0];
	int axis = f8_cpu_axis(f8_node_attr_int(call->node, "axis", -1), dx->rank);
	int64_t outer = f8_cpu_dims_product(dx, 0, axis), n = dx->dims[axis];
	int64_t inner = f8_cpu_dims_product(dx, axis + 1, dx->rank), k = dy->dims[axis];
	double *line, *places, *out;
	f8_status status = f8_cpu_alloc(3 * (n + k) + 1, sizeof *line, (void **)&line, diag);
	if (status)
		return status;
	places = line + k, out = places + k;
	for (int64_t o = 0; !status && o < outer; o++)
		for (int64_t i = 0; !status && i < inner; i++) {
			f8_cpu_load(dy, o * k * inner + i, inner, k, line);
			f8_cpu_load(indices, o * k * inner + i, inner, k, places);
			for (int64_t j = 0; j < n; j++)
				out[j] = 0.0;
			for (int64_t j = 0; !status && j < k; j++) {
				int64_t at = (int64_t)places[j];
				if (at < 0 || at >= n)
					status = f8_cpu_fail(call, diag, "index %lld is outside the %lld "
							     "elements along axis %d", (long long)at,
							     (long long)n, axis);
				else
					out[at] += line[j];
			}
			f8_cpu_store(dx, o * n * inner + i, inner, n, out);
		}
	f8_free(line);
	return status;
}

/* The first index and step along each dim of x that Slice's attributes take (step 1 and
 * index 0 where no axis is named), with ONNX's clamping, as Slice's shape function. */
static void slice_origin(const f8_cpu_kernel_call *call, const f8_rt_tensor *x, int64_t *first,
			 int64_t *steps) {
	const f8_attr *starts = f8_node_attr(call->node, "starts");
	const f8_attr *axes = f8_node_attr(call->node, "axes");
	const f8_attr *step_list = f8_node_attr(call->node, "steps");
	for (int d = 0; d < x->rank; d++)
		first[d] = 0, steps[d] = 1;
	for (uint32_t i = 0; i < starts->dims.n; i++) {
		int axis = f8_cpu_axis(axes ? axes->ints.items[i] : (int64_t)i, x->rank);
		int64_t size = x->dims[axis], step = step_list ? step_list->ints.items[i] : 1;
		int64_t start = f8_cpu_dim(call, starts->dims.items[i]);
		if (start < 0)
			start += size;
		int64_t high = step > 0 ? size : size - 1;
		first[axis] = start < 0 ? 0 : start > high ? high : start;
		steps[axis] = step;
	}
}

/* dx = zeros of `shape` with dy copied to where Slice took it from (element bytes copied: a
 * copy, not arithmetic, is exact in every dtype). */
F8_CPU_KERNEL(SLICE_GRAD) {
	const f8_rt_tensor *dy = call->inputs[0];
	f8_rt_tensor *dx = &call->outputs[0];
	int rank = dx->rank;
	int64_t first[F8_MAX_RANK], steps[F8_MAX_RANK], strides[F8_MAX_RANK], stride = 1;
	(void)diag; // nothing here can fail
	slice_origin(call, dx, first, steps);
	for (int d = rank - 1; d >= 0; d--) {
		strides[d] = stride;
		stride *= dx->dims[d];
	}
	size_t size = f8_dtype_get_info(dx->dtype)->bytes;
	int64_t n = f8_rt_tensor_numel(dy);
	const unsigned char *from = dy->data;
	unsigned char *to = dx->data;
	for (int64_t i = 0; i < n; i++) {
		int64_t rest = i, offset = 0;
		for (int d = rank - 1; d >= 0; d--) {
			offset += (first[d] + rest % dy->dims[d] * steps[d]) * strides[d];
			rest /= dy->dims[d];
		}
		memcpy(to + (size_t)offset * size, from + (size_t)i * size, size);
	}
	return F8_OK;
}

/* The lanes of a softmax along `axis`: lane (o, i) of `length` elements starts at
 * o * length * inner + i and strides by inner. */
static void softmax_extent(const f8_cpu_kernel_call *call, const f8_rt_tensor *x,
			   int64_t *outer, int64_t *length, int64_t *inner) {
	int axis = f8_cpu_axis(f8_node_attr_int(call->node, "axis", -1), x->rank);
	*outer = f8_cpu_dims_product(x, 0, axis);
	*length = x->dims[axis];
	*inner = f8_cpu_dims_product(x, axis + 1, x->rank);
}

/* SoftmaxGrad: dx = y (dy - sum(dy y)); LogSoftmaxGrad: dx = dy - exp(y) sum(dy). */
static f8_status softmax_grad(const f8_cpu_kernel_call *call, bool log, f8_diag *diag) {
	const f8_rt_tensor *dy = call->inputs[0], *y = call->inputs[1];
	int64_t outer, length, inner;
	softmax_extent(call, y, &outer, &length, &inner);
	double *scratch;
	f8_status status = f8_cpu_alloc(2 * length + 1, sizeof(double), (void **)&scratch, diag);
	if (status)
		return status;
	double *grad = scratch, *value = grad + length;
	for (int64_t lane = 0; lane < outer * inner; lane++) {
		int64_t offset = lane / inner * length * inner + lane % inner;
		f8_cpu_load(dy, offset, inner, length, grad);
		f8_cpu_load(y, offset, inner, length, value);
		double sum = 0;
		for (int64_t j = 0; j < length; j++)
			sum += log ? grad[j] : grad[j] * value[j];
		for (int64_t j = 0; j < length; j++)
			grad[j] = log ? grad[j] - exp(value[j]) * sum : value[j] * (grad[j] - sum);
		f8_cpu_store(&call->outputs[0], offset, inner, length, grad);
	}
	f8_free(scratch);
	return F8_OK;
}

F8_CPU_KERNEL(SOFTMAX_GRAD) {
	return softmax_grad(call, false, diag);
}

F8_CPU_KERNEL(LOG_SOFTMAX_GRAD) {
	return softmax_grad(call, true, diag);
}

/*
 * The factor each row's (softmax - onehot) is multiplied by, into scale (rows): dloss (or its
 * row's, for reduction none), over the count of counted labels for mean; 0 for an ignored row.
 * A label outside the vocabulary (and not ignore_index) fails.
 */
static f8_status cross_entropy_scales(const f8_cpu_kernel_call *call, const f8_rt_tensor *dloss,
				      const f8_rt_tensor *labels, int64_t vocab, double *scale,
				      f8_diag *diag) {
	int64_t ignore = f8_node_attr_int(call->node, "ignore_index", -100);
	const char *reduction = f8_node_attr_string(call->node, "reduction", "mean");
	int64_t rows = f8_rt_tensor_numel(labels), counted = 0;
	for (int64_t r = 0; r < rows; r++) {
		int64_t label = (int64_t)f8_cpu_get(labels, r);
		if (label == ignore)
			continue;
		if (label < 0 || label >= vocab) {
			f8_status status = f8_cpu_fail(call, diag, "label %lld of row %lld is "
						       "outside the vocabulary [0, %lld)",
						       (long long)label, (long long)r,
						       (long long)vocab);
			f8_diag_hint(diag, "labels to leave out of the loss must equal "
				     "ignore_index (%lld)", (long long)ignore);
			return status;
		}
		counted++;
	}
	bool none = strcmp(reduction, "none") == 0, mean = strcmp(reduction, "mean") == 0;
	double all = none ? 0 : f8_cpu_get(dloss, 0) / (mean && counted ? (double)counted : 1.0);
	for (int64_t r = 0; r < rows; r++) {
		bool ignored = (int64_t)f8_cpu_get(labels, r) == ignore;
		scale[r] = ignored ? 0 : none ? f8_cpu_get(dloss, r) : all;
	}
	return F8_OK;
}

/* CrossEntropyShardGrad: dlogits = dsum_exp * exp(logit - max) + dtarget at the label's logit
 * where this rank's shard [start, start + shard) holds it. */
F8_CPU_KERNEL(CROSS_ENTROPY_SHARD_GRAD) {
	const f8_rt_tensor *dsum = call->inputs[0], *dtarget = call->inputs[1];
	const f8_rt_tensor *logits = call->inputs[2], *labels = call->inputs[3];
	const f8_rt_tensor *max = call->inputs[4];
	int64_t shard = logits->dims[logits->rank - 1], rows = f8_rt_tensor_numel(labels);
	int64_t ignore = f8_node_attr_int(call->node, "ignore_index", -100);
	int64_t start = (int64_t)f8_cpu_get(call->inputs[5], 0);
	double *row;
	f8_status status = f8_cpu_alloc(shard + 1, sizeof(double), (void **)&row, diag);
	for (int64_t r = 0; !status && r < rows; r++) {
		double ds = f8_cpu_get(dsum, r), m = f8_cpu_get(max, r);
		int64_t label = (int64_t)f8_cpu_get(labels, r), at = label - start;
		f8_cpu_load(logits, r * shard, 1, shard, row);
		for (int64_t j = 0; j < shard; j++)
			row[j] = ds * exp(row[j] - m);
		if (label != ignore && at >= 0 && at < shard)
			row[at] += f8_cpu_get(dtarget, r);
		f8_cpu_store(&call->outputs[0], r * shard, 1, shard, row);
	}
	f8_free(row);
	return status;
}

/* CrossEntropyMergeGrad: per row w / sum_exp and -w, w the row's weight in the loss
 * (cross_entropy_scales, which takes the vocabulary as unbounded here: the labels were
 * checked by CrossEntropyShard). */
F8_CPU_KERNEL(CROSS_ENTROPY_MERGE_GRAD) {
	const f8_rt_tensor *dloss = call->inputs[0], *sum_exp = call->inputs[1];
	const f8_rt_tensor *labels = call->inputs[2];
	int64_t rows = f8_rt_tensor_numel(labels);
	double *scale;
	f8_status status = f8_cpu_alloc(rows + 1, sizeof(double), (void **)&scale, diag);
	if (!status)
		status = cross_entropy_scales(call, dloss, labels, INT64_MAX, scale, diag);
	for (int64_t r = 0; !status && r < rows; r++) {
		f8_cpu_set(&call->outputs[0], r, scale[r] / f8_cpu_get(sum_exp, r));
		f8_cpu_set(&call->outputs[1], r, -scale[r]);
	}
	f8_free(scale);
	return status;
}

/* dlogits = (softmax(logits) - onehot(label)) * the row's scale (cross_entropy_scales); the
 * softmax recomputed in double from the row's own max and sum, not from the f32 lse input. */
F8_CPU_KERNEL(CROSS_ENTROPY_GRAD) {
	const f8_rt_tensor *dloss = call->inputs[0], *logits = call->inputs[1];
	const f8_rt_tensor *labels = call->inputs[2];
	int64_t vocab = logits->dims[logits->rank - 1], rows = f8_rt_tensor_numel(labels);
	double *scratch;
	f8_status status = f8_cpu_alloc(rows + vocab + 1, sizeof(double), (void **)&scratch, diag);
	if (status)
		return status;
	double *scale = scratch, *row = scale + rows;
	if ((status = cross_entropy_scales(call, dloss, labels, vocab, scale, diag)))
		goto done;
	int64_t ignore = f8_node_attr_int(call->node, "ignore_index", -100);
	for (int64_t r = 0; r < rows; r++) {
		int64_t label = (int64_t)f8_cpu_get(labels, r);
		if (label == ignore)
			continue;
		f8_cpu_load(logits, r * vocab, 1, vocab, row);
		f8_cpu_softmax(row, vocab);
		row[label] -= 1.0;
		for (int64_t j = 0; j < vocab; j++)
			row[j] *= scale[r];
		f8_cpu_store(&call->outputs[0], r * vocab, 1, vocab, row);
	}
done:
	f8_free(scratch);
	return status;
}
