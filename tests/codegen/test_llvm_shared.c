/*
 * Tests of the kernel IR's shared arrays and masks and of the GPU forms they lead to
 * (codegen/llvm_lower.h, llvm_loops.c), on fresh random inputs (the seed is printed;
 * F8_TEST_SEED=N repeats a run):
 *   - a transpose by 64x64 tiles through a shared array, with masked loads and stores at the
 *     tensor's edge and column sums as masked atomics: on the host JIT, for shapes that divide
 *     the tile and shapes that do not, codes bit-exact with ir/fp8.c and the sums within f32
 *     rounding; elements outside the tensor are never written (a poisoned margin stays);
 *   - rows of a scaled bf16 product with a block loop whose amax feeds the grid loop's (the GPU
 *     reduces it once per block) and a masked bf16 store: exact on the host;
 *   - their PTX: 16-byte global loads and stores where consecutive iterations touch
 *     consecutive elements, FP8 codes converted two a cvt, the shared arrays in shared memory,
 *     and the barriers: the rows kernel, one block loop with no reduction of its own, has none
 *     but the grid reduction's;
 *   - with --ptxas PTXAS, that PTX alone: ptxas -arch=sm_90 accepts it. A test of its own
 *     (codegen.llvm_shared_ptxas), since it needs the CUDA Toolkit: without a ptxas at PTXAS it
 *     says so and exits with SKIP_STATUS, which ctest counts as skipped.
 *
 * usage: test_llvm_shared [--ptxas PTXAS]
 */
#define _POSIX_C_SOURCE 200809L // mkstemp, fdopen

#include <math.h>   // fabsf, fabs, ldexpf
#include <stdio.h>  // printf, fprintf, fdopen
#include <stdlib.h> // malloc, free, getenv, strtoull, system
#include <string.h> // strstr, strlen, strcmp, memset
#include <time.h>   // time
#include <unistd.h> // access, unlink

#include "codegen/host_jit.h"         // f8_host_jit_create, f8_host_jit_lookup
#include "codegen/kir.h"              // f8_kernel, f8_kir_*
#include "codegen/nvptx.h"            // f8_nvptx_compile
#include "ir/alloc.h"                 // f8_free
#include "ir/fp8.h"                   // f8_float_encode, f8_float_decode
#include "tests/codegen/gpu_launch.h" // test_launch, test_arg_buffer, test_arg_size
#include "tests/codegen/ptxas.h" // test_ptxas_missing, test_ptxas_accepts
#include "tests/test_support.h"       // CHECK, test_finish

enum { TILE = 64, PITCH = TILE + 1 };

static uint64_t rng_state;

static uint32_t rng_below(uint32_t n) {
	rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)(rng_state >> 33) % n;
}

static float rng_normal(void) {
	float sum = 0;
	for (int i = 0; i < 12; i++)
		sum += (float)rng_below(1u << 20) / (float)(1u << 20);
	return (sum - 6.0f) * 40.0f;
}

#define E(op, a, b) f8_kir_emit(k, F8_KIR_OP_##op, (a), (b), F8_KIR_NONE)

/*
 * tiles(in x: f32, out y: e4m3, acc sums: f32, size rows, size cols): y = the codes of x,
 * transposed (y[c * rows + r] = x[r * cols + c]), through @tile by 64x64 tiles, and sums[c] the
 * sum of column c (one masked atomic per element).
 */
static f8_kernel *build_tiles(void) {
	f8_kernel *k = f8_kir_create("tiles");
	f8_diag diag = {0};
	uint32_t x, y, acc, rows, cols, tile;
	f8_kir_id t, e, f;
	f8_status status = f8_kir_add_param(k, "x", F8_KERNEL_PARAM_IN, F8_DTYPE_F32, &x, &diag);
	status = status ? status : f8_kir_add_param(k, "y", F8_KERNEL_PARAM_OUT, F8_DTYPE_E4M3, &y, &diag);
	status = status ? status
			: f8_kir_add_param(k, "sums", F8_KERNEL_PARAM_ACCUMULATE, F8_DTYPE_F32, &acc, &diag);
	status = status ? status : f8_kir_add_param(k, "rows", F8_KERNEL_PARAM_SIZE, F8_DTYPE_I64, &rows, &diag);
	status = status ? status : f8_kir_add_param(k, "cols", F8_KERNEL_PARAM_SIZE, F8_DTYPE_I64, &cols, &diag);
	status = status ? status : f8_kir_add_shared(k, "tile", F8_DTYPE_F32, TILE * PITCH, &tile, &diag);
	if (status)
		goto failed;
	f8_kir_id n_rows = f8_kir_size(k, rows), n_cols = f8_kir_size(k, cols);
	f8_kir_id side = f8_kir_const_i64(k, TILE), pitch = f8_kir_const_i64(k, PITCH);
	f8_kir_id edge = f8_kir_const_i64(k, TILE - 1), across = E(DIV, E(ADD, n_cols, edge), side);
	f8_kir_id tiles = E(MUL, E(DIV, E(ADD, n_rows, edge), side), across);
	k->grid_sizes[0] = rows, k->grid_sizes[1] = cols, k->n_grid_sizes = 2;
	k->grid_divisor = TILE * TILE;
	if ((status = f8_kir_begin_grid_loop(k, tiles, &t, &diag)))
		goto failed;
	f8_kir_id r0 = E(MUL, E(DIV, t, across), side), c0 = E(MUL, E(REM, t, across), side);
	if ((status = f8_kir_begin_block_loop(k, f8_kir_const_i64(k, TILE * TILE), &e, &diag)))
		goto failed;
	f8_kir_id i = E(DIV, e, side), j = E(REM, e, side), r = E(ADD, r0, i), c = E(ADD, c0, j);
	f8_kir_id inside = E(AND, E(LT, r, n_rows), E(LT, c, n_cols));
	f8_kir_id v = f8_kir_load_if(k, x, E(ADD, E(MUL, r, n_cols), c), inside);
	if ((status = f8_kir_store_shared(k, tile, E(ADD, E(MUL, i, pitch), j), v, &diag)) ||
	    (status = f8_kir_atomic_if(k, F8_KIR_COMBINE_ADD, acc, c, v, inside, &diag)) ||
	    (status = f8_kir_end_loop(k, NULL, 0, &diag)) ||
	    (status = f8_kir_begin_block_loop(k, f8_kir_const_i64(k, TILE * TILE), &f, &diag)))
		goto failed;
	f8_kir_id ci = E(ADD, c0, E(DIV, f, side)), rj = E(ADD, r0, E(REM, f, side));
	f8_kir_id w = f8_kir_load_shared(k, tile, E(ADD, E(MUL, E(REM, f, side), pitch), E(DIV, f, side)));
	f8_kir_id ok = E(AND, E(LT, rj, n_rows), E(LT, ci, n_cols));
	if ((status = f8_kir_store_if(k, y, E(ADD, E(MUL, ci, n_rows), rj), w, ok, &diag)) ||
	    (status = f8_kir_end_loop(k, NULL, 0, &diag)) ||
	    (status = f8_kir_end_loop(k, NULL, 0, &diag)) ||
	    (status = f8_kir_verify(k, &diag)))
		goto failed;
	return k;
failed:
	f8_diag_print(&diag, stdout);
	f8_kir_destroy(k);
	return NULL;
}

/*
 * rows(in x: bf16, in g: f32, out y: bf16, acc amax: f32, size rows, size cols): per row, a
 * block loop y = x * g[col] (stored where col is even) and the max of |x * g| combined into the
 * grid loop's max, atomically max'ed into amax.
 */
static f8_kernel *build_rows(void) {
	f8_kernel *k = f8_kir_create("rows");
	f8_diag diag = {0};
	uint32_t x, g, y, amax, rows, cols;
	f8_kir_id r, c, row_max, grid_max;
	f8_status status = f8_kir_add_param(k, "x", F8_KERNEL_PARAM_IN, F8_DTYPE_BF16, &x, &diag);
	status = status ? status : f8_kir_add_param(k, "g", F8_KERNEL_PARAM_IN, F8_DTYPE_F32, &g, &diag);
	status = status ? status : f8_kir_add_param(k, "y", F8_KERNEL_PARAM_OUT, F8_DTYPE_BF16, &y, &diag);
	status = status ? status
			: f8_kir_add_param(k, "amax", F8_KERNEL_PARAM_ACCUMULATE, F8_DTYPE_F32, &amax, &diag);
	status = status ? status : f8_kir_add_param(k, "rows", F8_KERNEL_PARAM_SIZE, F8_DTYPE_I64, &rows, &diag);
	status = status ? status : f8_kir_add_param(k, "cols", F8_KERNEL_PARAM_SIZE, F8_DTYPE_I64, &cols, &diag);
	if (status)
		goto failed;
	f8_kir_id n_rows = f8_kir_size(k, rows), n_cols = f8_kir_size(k, cols);
	k->grid_sizes[0] = rows, k->n_grid_sizes = 1;
	if ((status = f8_kir_begin_grid_loop(k, n_rows, &r, &diag)) ||
	    (status = f8_kir_add_accumulator(k, F8_KIR_COMBINE_MAX, F8_KIR_TYPE_F32, &grid_max, &diag)) ||
	    (status = f8_kir_begin_block_loop(k, n_cols, &c, &diag)) ||
	    (status = f8_kir_add_accumulator(k, F8_KIR_COMBINE_MAX, F8_KIR_TYPE_F32, &row_max, &diag)))
		goto failed;
	f8_kir_id at = E(ADD, E(MUL, r, n_cols), c);
	f8_kir_id v = E(MUL, f8_kir_load(k, x, at), f8_kir_load(k, g, c));
	f8_kir_id even = E(EQ, E(REM, c, f8_kir_const_i64(k, 2)), f8_kir_const_i64(k, 0));
	f8_kir_id a = f8_kir_emit(k, F8_KIR_OP_ABS, v, F8_KIR_NONE, F8_KIR_NONE);
	if ((status = f8_kir_store_if(k, y, at, v, even, &diag)) ||
	    (status = f8_kir_end_loop(k, &a, 1, &diag)) ||
	    (status = f8_kir_end_loop(k, &row_max, 1, &diag)) ||
	    (status = f8_kir_atomic(k, F8_KIR_COMBINE_MAX, amax, f8_kir_const_i64(k, 0), grid_max,
				    &diag)) ||
	    (status = f8_kir_verify(k, &diag)))
		goto failed;
	return k;
failed:
	f8_diag_print(&diag, stdout);
	f8_kir_destroy(k);
	return NULL;
}

#undef E

static f8_host_jit *jit;

static void check_tiles(int64_t rows, int64_t cols) {
	size_t n = (size_t)(rows * cols), margin = 64;
	float *x = malloc(n * sizeof *x), *sums = calloc((size_t)cols + margin, sizeof *sums);
	uint8_t *y = malloc(n + margin);
	memset(y, 0xAB, n + margin);
	for (size_t i = 0; i < n; i++)
		x[i] = rng_normal();
	test_launch l = {0};
	test_arg_buffer(&l, x, n, F8_DTYPE_F32);
	test_arg_buffer(&l, y, n, F8_DTYPE_E4M3);
	test_arg_buffer(&l, sums, (size_t)cols, F8_DTYPE_F32);
	test_arg_size(&l, rows);
	test_arg_size(&l, cols);
	f8_host_kernel kernel = f8_host_jit_lookup(jit, "tiles");
	CHECK(kernel != NULL);
	if (kernel)
		kernel(l.args);
	size_t wrong = 0, off = 0;
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < cols; c++) {
			uint32_t want = f8_float_encode(F8_DTYPE_E4M3, x[r * cols + c], true);
			if (y[c * rows + r] != want && wrong++ < 3)
				printf("  tiles %lldx%lld: (%lld, %lld): got 0x%02x, want 0x%02x\n",
				       (long long)rows, (long long)cols, (long long)r, (long long)c,
				       y[c * rows + r], want);
		}
	for (size_t i = n; i < n + margin; i++)
		wrong += y[i] != 0xAB;
	for (int64_t c = 0; c < cols; c++) {
		double want = 0, magnitude = 0;
		for (int64_t r = 0; r < rows; r++) {
			want += x[r * cols + c];
			magnitude += fabs(x[r * cols + c]);
		}
		off += fabs(sums[c] - want) > (double)rows * 0x1p-23 * magnitude;
	}
	for (size_t i = (size_t)cols; i < (size_t)cols + margin; i++)
		off += sums[i] != 0;
	CHECK(wrong == 0);
	CHECK(off == 0);
	free(x);
	free(sums);
	free(y);
}

/* bf16 of `v` as the stores round: nearest even, overflow to inf. */
static uint16_t to_bf16(float v) {
	return (uint16_t)f8_float_encode(F8_DTYPE_BF16, v, false);
}

static void check_rows(int64_t rows, int64_t cols) {
	size_t n = (size_t)(rows * cols);
	uint16_t *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
	float *g = malloc((size_t)cols * sizeof *g), amax = 0, want_amax = 0;
	for (size_t i = 0; i < n; i++)
		x[i] = to_bf16(rng_normal());
	for (int64_t c = 0; c < cols; c++)
		g[c] = rng_normal() / 40.0f;
	memset(y, 0xFF, n * sizeof *y);
	test_launch l = {0};
	test_arg_buffer(&l, x, n, F8_DTYPE_BF16);
	test_arg_buffer(&l, g, (size_t)cols, F8_DTYPE_F32);
	test_arg_buffer(&l, y, n, F8_DTYPE_BF16);
	test_arg_buffer(&l, &amax, 1, F8_DTYPE_F32);
	test_arg_size(&l, rows);
	test_arg_size(&l, cols);
	f8_host_kernel kernel = f8_host_jit_lookup(jit, "rows");
	CHECK(kernel != NULL);
	if (kernel)
		kernel(l.args);
	size_t wrong = 0;
	for (size_t i = 0; i < n; i++) {
		int64_t c = (int64_t)i % cols;
		float v = f8_float_decode(F8_DTYPE_BF16, x[i]) * g[c];
		want_amax = fabsf(v) > want_amax ? fabsf(v) : want_amax;
		wrong += y[i] != (c % 2 == 0 ? to_bf16(v) : 0xFFFF);
	}
	CHECK(wrong == 0);
	CHECK(amax == want_amax);
	free(x);
	free(y);
	free(g);
}

/* The text of entry `name` of `ptx`, up to the next entry (a pointer into `ptx`), and its
 * length into *length. */
static const char *entry_of(const char *ptx, const char *name, size_t *length) {
	char header[128];
	snprintf(header, sizeof header, ".entry %s(", name);
	const char *start = strstr(ptx, header);
	const char *end = start ? strstr(start + 1, ".entry ") : NULL;
	*length = start ? (end ? (size_t)(end - start) : strlen(start)) : 0;
	return start;
}

/* How many times `instruction` occurs in entry `name`. */
static int count_in(const char *ptx, const char *name, const char *instruction) {
	size_t length;
	const char *text = entry_of(ptx, name, &length);
	int count = 0;
	for (const char *at = text; at && (at = strstr(at, instruction)) && at < text + length; at++)
		count++;
	return count;
}

static void check_ptx(const f8_kernel *const *kernels, uint32_t n) {
	f8_launch_geometry geometry[2];
	char *ptx = NULL;
	f8_diag diag = {0};
	f8_status status = f8_nvptx_compile(kernels, n, NULL, &ptx, geometry, &diag);
	if (status)
		f8_diag_print(&diag, stdout);
	CHECK(status == F8_OK && ptx != NULL);
	if (!ptx)
		return;
	FILE *copy = getenv("F8_TEST_PTX_OUT") ? fopen(getenv("F8_TEST_PTX_OUT"), "w") : NULL;
	if (copy) { // to read, or to run on a GPU elsewhere
		fputs(ptx, copy);
		fclose(copy);
	}
	// x: a thread's 4 chunks of 4 floats of a tile, loaded together (llvm_loops.c's chunks at
	// once; the loop of one chunk at a time after it runs no iteration, which LLVM may see)
	CHECK(count_in(ptx, "tiles", "ld.global.v4.u32") >= 4);
	CHECK(count_in(ptx, "tiles", "st.global.v4.b32") == 1);      // y, 16 codes a thread
	CHECK(count_in(ptx, "tiles", "cvt.rn.satfinite.e4m3x2.f32") >= 8);
	CHECK(count_in(ptx, "tiles", "st.shared.f32") > 0 && count_in(ptx, "tiles", "ld.shared.f32") > 0);
	CHECK(count_in(ptx, "tiles", "bar.sync") == 2);               // before each block loop
	CHECK(geometry[0].rows_per_block == TILE * TILE);
	CHECK(geometry[0].shared_bytes == TILE * PITCH * 4);
	// 4 iterations a chunk, for g's 16 bytes: x's 4 bf16 in 8; one chunk at a time (a row's
	// extent is no constant)
	CHECK(count_in(ptx, "rows", "ld.global.v4.u32") == 1 &&
	      count_in(ptx, "rows", "ld.global.v2.u32") == 1);
	CHECK(count_in(ptx, "rows", "bar.sync") == 1);                // the grid reduction's only
	CHECK(geometry[1].rows_per_block == 1);
	f8_free(ptx);
}

/*
 * --ptxas PTXAS: `ptxas -arch=sm_90` accepts the PTX of both kernels. Without an executable at
 * PTXAS it says why and returns SKIP_STATUS before building anything; the PTX's instructions
 * are checked by the usual run (check_ptx), which needs no ptxas.
 */
static int check_ptxas(const char *ptxas) {
	if (test_ptxas_missing(ptxas))
		return SKIP_STATUS;
	const f8_kernel *kernels[2] = {build_tiles(), build_rows()};
	CHECK(kernels[0] && kernels[1]);
	f8_launch_geometry geometry[2];
	char *ptx = NULL;
	f8_diag diag = {0};
	f8_status status = kernels[0] && kernels[1]
				   ? f8_nvptx_compile(kernels, 2, NULL, &ptx, geometry, &diag) : F8_OK;
	if (status)
		f8_diag_print(&diag, stdout);
	CHECK(status == F8_OK);
	if (ptx)
		CHECK(test_ptxas_accepts(ptxas, ptx));
	f8_free(ptx);
	f8_kir_destroy((f8_kernel *)kernels[0]);
	f8_kir_destroy((f8_kernel *)kernels[1]);
	return test_finish();
}

int main(int argc, char **argv) {
	if (argc == 3 && strcmp(argv[1], "--ptxas") == 0)
		return check_ptxas(argv[2]);
	if (argc != 1) {
		fprintf(stderr, "usage: test_llvm_shared [--ptxas PTXAS]\n");
		return 2;
	}
	const char *seed = getenv("F8_TEST_SEED");
	rng_state = seed ? strtoull(seed, NULL, 10) : (uint64_t)time(NULL);
	printf("seed %llu (F8_TEST_SEED=%llu repeats this run)\n", (unsigned long long)rng_state,
	       (unsigned long long)rng_state);
	const f8_kernel *kernels[2] = {build_tiles(), build_rows()};
	CHECK(kernels[0] && kernels[1]);
	if (!kernels[0] || !kernels[1])
		return test_finish();
	f8_diag diag = {0};
	if (f8_host_jit_create(kernels, 2, NULL, &jit, &diag)) {
		f8_diag_print(&diag, stdout);
		CHECK(false);
		return test_finish();
	}
	const int64_t shapes[][2] = {{128, 64}, {37, 70}, {1, 5}, {130, 129}, {64, 200}};
	for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
		check_tiles(shapes[s][0], shapes[s][1]);
		check_rows(shapes[s][0], shapes[s][1]);
	}
	check_ptx(kernels, 2);
	f8_host_jit_destroy(jit);
	f8_kir_destroy((f8_kernel *)kernels[0]);
	f8_kir_destroy((f8_kernel *)kernels[1]);
	return test_finish();
}
