/*
 * The reference kernels of FP8Gemm and FP8GroupedGemm (ir/infer_fused.c), the GEMMs that
 * cuBLASLt runs on Hopper's FP8 tensor cores (one per expert for the grouped one):
 * y = (a * a_scale_inv) (b * b_scale_inv)^T + bias, both operands K-major FP8 codes, each
 * scale_inv a scalar or one per block of its operand (a_block / b_block; rowwise is a block of
 * [1, 0] or [1, K]; e8m0 grids are MX).
 *
 * Every product is of exactly decoded values. Accumulation precision, which the GPU's result is
 * compared against with a tolerance:
 *   - per-row path, when each operand's scale is constant along K (per tensor, rowwise, any grid
 *     of one column): the codes decode exactly to float32, each product of two FP8 values is
 *     exact in float32 (at most 8 significant bits, and far from float32's range limits), and
 *     cblas_sgemm sums the K products in float32, as a tensor core's float32 accumulator does
 *     (OpenBLAS's order, not the GPU's). The scales then multiply the sum in double:
 *     y = acc * (sa_row * sb_col) + bias, rounded once to `to`.
 *   - block path (1x128, 128x128, MX, any grid with several blocks along K): each element is
 *     dequantized exactly into double (an FP8 value times a float32 or power-of-two scale_inv
 *     needs at most 28 significant bits), cblas_dgemm sums in double, the bias is added in
 *     double, and the sum is rounded once to `to`.
 * So the per-row path differs from the exact sum by float32 accumulation (about K * 2^-24 of
 * sum |a*b|), the block path by double's. Hopper's FP8 tensor cores accumulate with far fewer
 * bits: on an H200, cuBLASLt's result is 2^-11.2 of sum |a*b| off the exact sum at K = 256
 * (tests/runtime/test_fp8_gemm_h200.py), so a GPU result is held to this kernel with a
 * tolerance of that order, not float32's.
 */
#include <stdint.h> // int64_t, uint8_t
#include <string.h> // memcpy, memset, strcmp

#include "ir/alloc.h"                // f8_free
#include "ir/fp8.h"                  // f8_float_decode
#include "runtime/cpu/kernel_forward.h" // f8_cpu_moe_check_counts
#include "runtime/cpu/kernel_util.h" // f8_cpu_gemm, f8_cpu_alloc, f8_cpu_load, f8_cpu_store
#include "runtime/cpu/kernels.h"     // F8_CPU_KERNEL

/* One operand: its codes as a (rows, K) matrix and where each element's scale_inv is. */
typedef struct gemm_operand {
	const uint8_t *codes;      // (rows, k)
	f8_dtype format;
	int64_t rows, k;
	int64_t block_rows, block_cols; // the blocks in elements (a scalar: the whole matrix)
	int64_t grid_cols;              // blocks along K
	double *scales;                 // (grid rows, grid_cols) decoded scale_invs, to free
} gemm_operand;

/* Reads an operand: its codes, and its scale_inv under `block` (NULL: one scale), decoded
 * (e8m0 by f8_float_decode: 0xFF is NaN). */
static f8_status operand_init(const f8_rt_tensor *codes, const f8_rt_tensor *scale_inv,
			      const f8_attr *block, int64_t rows, int64_t k, gemm_operand *op,
			      f8_diag *diag) {
	*op = (gemm_operand){.codes = codes->data, .format = codes->dtype, .rows = rows, .k = k,
			     .block_rows = rows > 0 ? rows : 1, .block_cols = k > 0 ? k : 1,
			     .grid_cols = scale_inv->rank == 2 ? scale_inv->dims[1] : 1};
	if (block) { // a block size of 0 spans the whole axis
		if (block->ints.items[0] > 0)
			op->block_rows = block->ints.items[0];
		if (block->ints.items[1] > 0)
			op->block_cols = block->ints.items[1];
	}
	int64_t n = f8_rt_tensor_numel(scale_inv);
	f8_status status = f8_cpu_alloc(n, sizeof(double), (void **)&op->scales, diag);
	if (!status)
		f8_cpu_load(scale_inv, 0, 1, n, op->scales);
	return status;
}

static double scale_at(const gemm_operand *op, int64_t row, int64_t k) {
	return op->scales[(row / op->block_rows) * op->grid_cols + k / op->block_cols];
}

/* The 256 values of the operand's format. */
static void decode_table(f8_dtype format, float table[256]) {
	for (uint32_t code = 0; code < 256; code++)
		table[code] = f8_float_decode(format, code);
}

/* The per-row path's operand: the codes decoded to float32, unscaled. */
static f8_status decode(const gemm_operand *op, float **out, f8_diag *diag) {
	float table[256];
	decode_table(op->format, table);
	int64_t n = op->rows * op->k;
	f8_status status = f8_cpu_alloc(n, sizeof(float), (void **)out, diag);
	for (int64_t i = 0; !status && i < n; i++)
		(*out)[i] = table[op->codes[i]];
	return status;
}

/* The block path's operand: each code times its block's scale_inv, exactly, in double. */
static f8_status dequantize(const gemm_operand *op, double **out, f8_diag *diag) {
	float table[256];
	decode_table(op->format, table);
	f8_status status = f8_cpu_alloc(op->rows * op->k, sizeof(double), (void **)out, diag);
	for (int64_t r = 0; !status && r < op->rows; r++)
		for (int64_t c = 0; c < op->k; c++)
			(*out)[r * op->k + c] = (double)table[op->codes[r * op->k + c]] *
						scale_at(op, r, c);
	return status;
}

/* y = the GEMM's sums, times the row and column scales on the per-row path, plus the bias,
 * rounded once to y's dtype. */
static void store_result(const f8_cpu_gemm *gemm, bool per_row, const gemm_operand *a,
			 const gemm_operand *b, const f8_rt_tensor *bias, f8_rt_tensor *y) {
	int64_t m = a->rows, n = b->rows;
	double column_scale[F8_CPU_CHUNK], bias_values[F8_CPU_CHUNK], values[F8_CPU_CHUNK];
	for (int64_t c0 = 0; c0 < n; c0 += F8_CPU_CHUNK) {
		int64_t width = f8_cpu_chunk(n - c0);
		for (int64_t j = 0; j < width; j++) {
			column_scale[j] = per_row ? scale_at(b, c0 + j, 0) : 1.0;
			bias_values[j] = 0.0;
		}
		if (bias)
			f8_cpu_load(bias, c0, 1, width, bias_values);
		for (int64_t r = 0; r < m; r++) {
			double row_scale = per_row ? scale_at(a, r, 0) : 1.0;
			for (int64_t j = 0; j < width; j++)
				values[j] = f8_cpu_gemm_result(gemm, r * n + c0 + j) *
						    (row_scale * column_scale[j]) +
					    bias_values[j];
			f8_cpu_store(y, r * n + c0, 1, width, values);
		}
	}
}

/* y (m, n) = a (m, K) b (n, K)^T under their scale_invs and blocks, plus the bias: the per-row
 * or the block path of the file comment. */
static f8_status fp8_gemm(const f8_cpu_kernel_call *call, const f8_rt_tensor *a,
			  const f8_rt_tensor *b, const f8_rt_tensor *scale_inv[2],
			  const f8_attr *blocks[2], const f8_rt_tensor *bias, f8_rt_tensor *y,
			  int64_t m, int64_t n, int64_t k, f8_diag *diag) {
	gemm_operand ops[2] = {{0}, {0}};
	void *decoded[2] = {NULL, NULL};
	f8_cpu_gemm gemm = {0};
	f8_status status = operand_init(a, scale_inv[0], blocks[0], m, k, &ops[0], diag);
	if (!status)
		status = operand_init(b, scale_inv[1], blocks[1], n, k, &ops[1], diag);
	bool per_row = ops[0].grid_cols == 1 && ops[1].grid_cols == 1;
	for (int i = 0; !status && i < 2; i++)
		status = per_row ? decode(&ops[i], (float **)&decoded[i], diag)
				 : dequantize(&ops[i], (double **)&decoded[i], diag);
	f8_rt_tensor views[2];
	for (int i = 0; i < 2; i++) {
		size_t size = per_row ? sizeof(float) : sizeof(double);
		views[i] = (f8_rt_tensor){.dtype = per_row ? F8_DTYPE_F32 : F8_DTYPE_F64, .rank = 2,
					  .dims = {ops[i].rows, k}, .data = decoded[i],
					  .n_bytes = (size_t)(ops[i].rows * k) * size};
	}
	if (!status)
		status = f8_cpu_gemm_create(call, &views[0], &views[1], y, m, n, k, &gemm, diag);
	if (!status) {
		f8_cpu_gemm_run(&gemm, false, true, m, n, k, 0, k, 0, k, 0, n);
		store_result(&gemm, per_row, &ops[0], &ops[1], bias, y);
	}
	f8_cpu_gemm_destroy(&gemm);
	for (int i = 0; i < 2; i++) {
		f8_free(decoded[i]);
		f8_free(ops[i].scales);
	}
	return status;
}

/* FP8Gemm(a (..., K), b (N, K), a_scale_inv, b_scale_inv [, bias (N)]) -> y (..., N) of `to`. */
F8_CPU_KERNEL(FP8_GEMM) {
	const f8_rt_tensor *a = call->inputs[0], *b = call->inputs[1];
	const f8_rt_tensor *scale_inv[2] = {call->inputs[2], call->inputs[3]};
	const f8_attr *blocks[2] = {f8_node_attr(call->node, "a_block"),
				    f8_node_attr(call->node, "b_block")};
	int64_t k = a->dims[a->rank - 1], n = b->dims[0];
	int64_t m = f8_cpu_dims_product(a, 0, a->rank - 1);
	return fp8_gemm(call, a, b, scale_inv, blocks, f8_cpu_input(call, 4), &call->outputs[0], m,
			n, k, diag);
}

/* A (rows, cols) matrix of `dtype` at `data`. */
static f8_rt_tensor view(f8_dtype dtype, void *data, int64_t rows, int64_t cols) {
	size_t size = f8_dtype_get_info(dtype)->bytes;
	return (f8_rt_tensor){.dtype = dtype, .rank = 2, .dims = {rows, cols}, .data = data,
			      .n_bytes = (size_t)(rows * cols) * size};
}

/* Entry e of an f32[E] as a scalar. */
static f8_rt_tensor entry(const f8_rt_tensor *vector, int64_t e) {
	return (f8_rt_tensor){.dtype = F8_DTYPE_F32, .rank = 0,
			      .data = (float *)vector->data + e, .n_bytes = sizeof(float)};
}

/* Columns [first, first + count) of the row-major (rows, cols) bytes `in`, contiguous in out. */
static void copy_columns(const uint8_t *in, int64_t rows, int64_t cols, int64_t first,
			 int64_t count, uint8_t *out) {
	for (int64_t r = 0; r < rows && count; r++)
		memcpy(out + r * count, in + r * cols + first, (size_t)count);
}

/*
 * FP8GroupedGemm(a, b, a_scale_inv [E], b_scale_inv [E], counts [E]) (ir/infer_fused.c): per
 * expert, the FP8Gemm of its rows at its two scales, through the same fp8_gemm as FP8Gemm, so
 * an expert's result has the bits of that FP8Gemm on its rows. A wgrad's operands are the
 * transposed copies (N, rows) and (K, rows): an expert's columns are copied out first. The
 * counts add up to at most the rows; the rows after them are padding (f8_cpu_moe_check_counts):
 * a wgrad reads only the counted columns, a fwd or dgrad writes zeros in the padding's rows.
 */
F8_CPU_KERNEL(FP8_GROUPED_GEMM) {
	const f8_rt_tensor *a = call->inputs[0], *b = call->inputs[1], *counts = call->inputs[4];
	f8_rt_tensor *y = &call->outputs[0];
	bool wgrad = strcmp(f8_node_attr_string(call->node, "gemm", ""), "wgrad") == 0;
	int64_t experts = counts->dims[0], rows = wgrad ? a->dims[1] : a->dims[0], largest, total;
	f8_status status = f8_cpu_moe_check_counts(call, counts, rows, &largest, &total, diag);
	const f8_attr *blocks[2] = {NULL, NULL};
	size_t y_size = f8_dtype_get_info(y->dtype)->bytes;
	uint8_t *columns = NULL;
	int64_t n = wgrad ? a->dims[0] : b->dims[1], k = wgrad ? b->dims[0] : b->dims[2];
	if (!status && wgrad)
		status = f8_cpu_alloc((n + k) * (largest ? largest : 1), 1, (void **)&columns, diag);
	for (int64_t e = 0, first = 0; !status && e < experts; e++) {
		int64_t count = (int64_t)f8_cpu_get(counts, e);
		f8_rt_tensor scales[2] = {entry(call->inputs[2], e), entry(call->inputs[3], e)};
		const f8_rt_tensor *scale_inv[2] = {&scales[0], &scales[1]};
		f8_rt_tensor pa, pb, out;
		if (wgrad) { // y[e] (N, K) = dy_e^T x_e: the experts' columns, K = count
			copy_columns(a->data, n, rows, first, count, columns);
			copy_columns(b->data, k, rows, first, count, columns + n * count);
			pa = view(a->dtype, columns, n, count);
			pb = view(b->dtype, columns + n * count, k, count);
			out = view(y->dtype, (uint8_t *)y->data + (size_t)(e * n * k) * y_size, n, k);
			status = fp8_gemm(call, &pa, &pb, scale_inv, blocks, NULL, &out, n, k, count,
					  diag);
		} else if (count) { // y's rows of expert e = a's rows times b[e]^T
			pa = view(a->dtype, (uint8_t *)a->data + first * k, count, k);
			pb = view(b->dtype, (uint8_t *)b->data + e * n * k, n, k);
			out = view(y->dtype, (uint8_t *)y->data + (size_t)(first * n) * y_size, count,
				   n);
			status = fp8_gemm(call, &pa, &pb, scale_inv, blocks, NULL, &out, count, n, k,
					  diag);
		}
		first += count;
	}
	if (!status && !wgrad && rows > total && n > 0) // all-zero bits: +0 in every float dtype
		memset((uint8_t *)y->data + (size_t)(total * n) * y_size, 0,
		       (size_t)((rows - total) * n) * y_size);
	f8_free(columns);
	return status;
}
