/*
 * The kernel IR on its own: the builder makes the kernel of kir.h's header comment, the printer
 * writes it as that comment shows, the verifier accepts it; a transpose by tiles through a
 * shared array with masked loads, stores and atomics prints and verifies, and so does a
 * table parameter with loads and stores through its addresses; every misuse the
 * builder or the verifier should refuse is refused with a message naming the kernel;
 * allocation failure at every allocation of building a kernel is reported, never a crash.
 *
 * usage: test_kir
 */
#define _POSIX_C_SOURCE 200809L // open_memstream

#include <stdbool.h> // bool
#include <stdio.h>   // printf, open_memstream
#include <stdlib.h>  // free
#include <string.h>  // strstr

#include "codegen/kir.h"        // f8_kernel, f8_kir_*
#include "ir/alloc.h"           // f8_free
#include "tests/test_support.h" // CHECK, test_finish, test_fail_allocations_after

/* The kernel's text (f8_kir_print), printed to stdout too; malloc'd, "" without a kernel. */
static char *printed(const f8_kernel *k) {
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);
	if (k && out)
		f8_kir_print(k, out);
	if (out)
		fclose(out);
	printf("%s", text ? text : "");
	return text;
}

/* kir.h's example: y = cast(x * scale), the amax of x over the whole tensor. */
static f8_status build_cast_amax(f8_kernel *k, f8_diag *diag) {
	uint32_t x, y, scale, amax, rows, cols;
	f8_status status = f8_kir_add_param(k, "x", F8_KERNEL_PARAM_IN, F8_DTYPE_F32, &x, diag);
	if (!status)
		status = f8_kir_add_param(k, "y", F8_KERNEL_PARAM_OUT, F8_DTYPE_E4M3, &y, diag);
	if (!status)
		status = f8_kir_add_param(k, "scale", F8_KERNEL_PARAM_IN, F8_DTYPE_F32, &scale, diag);
	if (!status)
		status = f8_kir_add_param(k, "amax", F8_KERNEL_PARAM_ACCUMULATE, F8_DTYPE_F32, &amax, diag);
	if (!status)
		status = f8_kir_add_param(k, "rows", F8_KERNEL_PARAM_SIZE, F8_DTYPE_I64, &rows, diag);
	if (!status)
		status = f8_kir_add_param(k, "cols", F8_KERNEL_PARAM_SIZE, F8_DTYPE_I64, &cols, diag);
	if (status)
		return status;
	f8_kir_id n_rows = f8_kir_size(k, rows), n_cols = f8_kir_size(k, cols), r, c, row_max,
		  kernel_max;
	if ((status = f8_kir_begin_grid_loop(k, n_rows, &r, diag)) ||
	    (status = f8_kir_add_accumulator(k, F8_KIR_COMBINE_MAX, F8_KIR_TYPE_F32, &kernel_max,
					     diag)))
		return status;
	f8_kir_id s = f8_kir_load(k, scale, f8_kir_const_i64(k, 0));
	if ((status = f8_kir_begin_block_loop(k, n_cols, &c, diag)) ||
	    (status = f8_kir_add_accumulator(k, F8_KIR_COMBINE_MAX, F8_KIR_TYPE_F32, &row_max,
					     diag)))
		return status;
	f8_kir_id i = f8_kir_emit(k, F8_KIR_OP_ADD, f8_kir_emit(k, F8_KIR_OP_MUL, r, n_cols,
								F8_KIR_NONE),
				  c, F8_KIR_NONE);
	f8_kir_id v = f8_kir_load(k, x, i);
	if ((status = f8_kir_store(k, y, i, f8_kir_emit(k, F8_KIR_OP_MUL, v, s, F8_KIR_NONE), diag)))
		return status;
	f8_kir_id a = f8_kir_emit(k, F8_KIR_OP_ABS, v, F8_KIR_NONE, F8_KIR_NONE);
	if ((status = f8_kir_end_loop(k, &a, 1, diag)) || (status = f8_kir_end_loop(k, &row_max, 1, diag)))
		return status;
	return f8_kir_atomic(k, F8_KIR_COMBINE_MAX, amax, f8_kir_const_i64(k, 0), kernel_max, diag);
}

static void test_build_print_verify(void) {
	f8_kernel *k = f8_kir_create("cast_amax");
	f8_diag diag = {0};
	CHECK(k != NULL);
	if (!k)
		return;
	CHECK(build_cast_amax(k, &diag) == F8_OK);
	CHECK(f8_kir_verify(k, &diag) == F8_OK);
	char *text = printed(k);
	CHECK(strstr(text, "kernel cast_amax(in %x: f32, out %y: e4m3, in %scale: f32, acc %amax: "
			   "f32, size %rows, size %cols) {") != NULL);
	CHECK(strstr(text, "for.grid") != NULL && strstr(text, "for.block") != NULL);
	CHECK(strstr(text, "max.f32(") != NULL);
	CHECK(strstr(text, "store %y[") != NULL && strstr(text, "atomic.max %amax[") != NULL);
	free(text);
	f8_kir_destroy(k);
}

/* Each misuse, on a fresh kernel with an f32 input, an f32 output and a size. */
static void test_refusals(void) {
	f8_diag diag = {0};
	uint32_t x, y, n;
	f8_kir_id var, result;
#define FRESH()                                                                          \
	f8_kernel *k = f8_kir_create("bad");                                             \
	CHECK(f8_kir_add_param(k, "x", F8_KERNEL_PARAM_IN, F8_DTYPE_F32, &x, &diag) == 0);  \
	CHECK(f8_kir_add_param(k, "y", F8_KERNEL_PARAM_OUT, F8_DTYPE_F32, &y, &diag) == 0); \
	CHECK(f8_kir_add_param(k, "n", F8_KERNEL_PARAM_SIZE, F8_DTYPE_I64, &n, &diag) == 0)
	{ // a store to an input buffer
		FRESH();
		f8_kir_id size = f8_kir_size(k, n);
		CHECK(f8_kir_begin_grid_loop(k, size, &var, &diag) == F8_OK);
		CHECK(f8_kir_store(k, x, var, f8_kir_const_f32(k, 1), &diag) == F8_ERR_INVALID);
		CHECK(strstr(diag.message, "kernel bad") != NULL);
		f8_kir_destroy(k);
	}
	{ // an f32 added to an i64, then the loop cannot end
		FRESH();
		f8_kir_id size = f8_kir_size(k, n);
		CHECK(f8_kir_begin_grid_loop(k, size, &var, &diag) == F8_OK);
		CHECK(f8_kir_emit(k, F8_KIR_OP_ADD, var, f8_kir_const_f32(k, 1), F8_KIR_NONE) ==
		      F8_KIR_NONE);
		CHECK(f8_kir_error(k) != NULL && strstr(f8_kir_error(k), "differ in type"));
		CHECK(f8_kir_end_loop(k, NULL, 0, &diag) == F8_ERR_INVALID);
		f8_kir_destroy(k);
	}
	{ // a block loop outside a grid loop; two grid loops; a parameter after the body
		FRESH();
		f8_kir_id size = f8_kir_size(k, n);
		CHECK(f8_kir_begin_block_loop(k, size, &var, &diag) == F8_ERR_INVALID);
		CHECK(f8_kir_begin_grid_loop(k, size, &var, &diag) == F8_OK);
		CHECK(f8_kir_end_loop(k, NULL, 0, &diag) == F8_OK);
		CHECK(f8_kir_begin_grid_loop(k, size, &var, &diag) == F8_ERR_INVALID);
		uint32_t late;
		CHECK(f8_kir_add_param(k, "late", F8_KERNEL_PARAM_IN, F8_DTYPE_F32, &late, &diag) ==
		      F8_ERR_INVALID);
		f8_kir_destroy(k);
	}
	{ // a value used outside the loop that made it
		FRESH();
		f8_kir_id size = f8_kir_size(k, n);
		CHECK(f8_kir_begin_grid_loop(k, size, &var, &diag) == F8_OK);
		f8_kir_id v = f8_kir_load(k, x, var);
		CHECK(f8_kir_end_loop(k, NULL, 0, &diag) == F8_OK);
		CHECK(f8_kir_store(k, y, f8_kir_const_i64(k, 0), v, &diag) == F8_OK);
		CHECK(f8_kir_verify(k, &diag) == F8_ERR_INVALID);
		CHECK(strstr(diag.message, "not defined in its scope") != NULL);
		f8_kir_destroy(k);
	}
	{ // an accumulator whose value is never given, and no grid loop at all
		FRESH();
		f8_kir_id size = f8_kir_size(k, n);
		CHECK(f8_kir_verify(k, &diag) == F8_ERR_INVALID);
		CHECK(strstr(diag.message, "0 grid loops") != NULL);
		CHECK(f8_kir_begin_grid_loop(k, size, &var, &diag) == F8_OK);
		CHECK(f8_kir_add_accumulator(k, F8_KIR_COMBINE_ADD, F8_KIR_TYPE_F32, &result, &diag) ==
		      F8_OK);
		CHECK(f8_kir_end_loop(k, NULL, 0, &diag) == F8_ERR_INVALID);
		CHECK(f8_kir_verify(k, &diag) == F8_ERR_INVALID);
		f8_kir_destroy(k);
	}
#undef FRESH
}

/*
 * A transpose by tiles of 4x4, the shapes the tiled lowering makes: a shared array, masked
 * loads and stores at the tensor's edge, a block loop storing the tile and one loading it.
 */
static f8_status build_transpose(f8_kernel *k, f8_diag *diag) {
	uint32_t x, y, acc, rows, cols, tile;
	f8_status status = f8_kir_add_param(k, "x", F8_KERNEL_PARAM_IN, F8_DTYPE_E4M3, &x, diag);
	if (!status)
		status = f8_kir_add_param(k, "y", F8_KERNEL_PARAM_OUT, F8_DTYPE_E4M3, &y, diag);
	if (!status)
		status = f8_kir_add_param(k, "sums", F8_KERNEL_PARAM_ACCUMULATE, F8_DTYPE_F32, &acc, diag);
	if (!status)
		status = f8_kir_add_param(k, "rows", F8_KERNEL_PARAM_SIZE, F8_DTYPE_I64, &rows, diag);
	if (!status)
		status = f8_kir_add_param(k, "cols", F8_KERNEL_PARAM_SIZE, F8_DTYPE_I64, &cols, diag);
	if (!status)
		status = f8_kir_add_shared(k, "tile", F8_DTYPE_F32, 20, &tile, diag);
	if (status)
		return status;
#define E(op, a, b) f8_kir_emit(k, F8_KIR_OP_##op, (a), (b), F8_KIR_NONE)
	f8_kir_id n_rows = f8_kir_size(k, rows), n_cols = f8_kir_size(k, cols), four = f8_kir_const_i64(k, 4);
	f8_kir_id across = E(DIV, E(ADD, n_cols, f8_kir_const_i64(k, 3)), four), t, e, f;
	f8_kir_id tiles = E(MUL, E(DIV, E(ADD, n_rows, f8_kir_const_i64(k, 3)), four), across);
	if ((status = f8_kir_begin_grid_loop(k, tiles, &t, diag)))
		return status;
	f8_kir_id r0 = E(MUL, E(DIV, t, across), four), c0 = E(MUL, E(REM, t, across), four);
	if ((status = f8_kir_begin_block_loop(k, f8_kir_const_i64(k, 16), &e, diag)))
		return status;
	f8_kir_id r = E(ADD, r0, E(DIV, e, four)), c = E(ADD, c0, E(REM, e, four));
	f8_kir_id inside = E(AND, E(LT, r, n_rows), E(LT, c, n_cols));
	f8_kir_id v = f8_kir_load_if(k, x, E(ADD, E(MUL, r, n_cols), c), inside);
	if ((status = f8_kir_store_shared(k, tile, E(ADD, E(MUL, E(DIV, e, four), f8_kir_const_i64(k, 5)),
						       E(REM, e, four)), v, diag)) ||
	    (status = f8_kir_atomic_if(k, F8_KIR_COMBINE_ADD, acc, c, v, inside, diag)) ||
	    (status = f8_kir_end_loop(k, NULL, 0, diag)) ||
	    (status = f8_kir_begin_block_loop(k, f8_kir_const_i64(k, 16), &f, diag)))
		return status;
	f8_kir_id c2 = E(ADD, c0, E(DIV, f, four)), r2 = E(ADD, r0, E(REM, f, four));
	f8_kir_id w = f8_kir_load_shared(k, tile, E(ADD, E(MUL, E(REM, f, four), f8_kir_const_i64(k, 5)),
						    E(DIV, f, four)));
	f8_kir_id ok = E(AND, E(LT, r2, n_rows), E(LT, c2, n_cols));
	if ((status = f8_kir_store_if(k, y, E(ADD, E(MUL, c2, n_rows), r2), w, ok, diag)) ||
	    (status = f8_kir_end_loop(k, NULL, 0, diag)))
		return status;
#undef E
	return f8_kir_end_loop(k, NULL, 0, diag);
}

static void test_shared_and_masks(void) {
	f8_kernel *k = f8_kir_create("transpose");
	f8_diag diag = {0};
	CHECK(k && build_transpose(k, &diag) == F8_OK);
	CHECK(k && f8_kir_verify(k, &diag) == F8_OK);
	char *text = printed(k);
	CHECK(strstr(text, "  shared @tile: f32[20]\n") != NULL);
	CHECK(strstr(text, "= load.f32 %x[%") && strstr(text, "] if %"));
	CHECK(strstr(text, "store @tile[%") != NULL && strstr(text, "= load.f32 @tile[%") != NULL);
	CHECK(strstr(text, "atomic.add %sums[%") != NULL && strstr(text, "store %y[%") != NULL);
	free(text);
	f8_kir_destroy(k);
}

/* The shared arrays' and masks' misuses. */
static void test_shared_refusals(void) {
	f8_diag diag = {0};
	uint32_t x, y, n, tile, other;
	f8_kir_id var, inner;
#define FRESH()                                                                          \
	f8_kernel *k = f8_kir_create("bad");                                             \
	CHECK(f8_kir_add_param(k, "x", F8_KERNEL_PARAM_IN, F8_DTYPE_F32, &x, &diag) == 0);  \
	CHECK(f8_kir_add_param(k, "y", F8_KERNEL_PARAM_OUT, F8_DTYPE_F32, &y, &diag) == 0); \
	CHECK(f8_kir_add_param(k, "n", F8_KERNEL_PARAM_SIZE, F8_DTYPE_I64, &n, &diag) == 0); \
	CHECK(f8_kir_add_shared(k, "tile", F8_DTYPE_F32, 64, &tile, &diag) == 0)
	{ // too large together, twice the same name, no elements
		FRESH();
		CHECK(f8_kir_add_shared(k, "big", F8_DTYPE_F32, F8_KIR_SHARED_BYTES_MAX / 4, &other,
					&diag) == F8_ERR_INVALID);
		CHECK(strstr(diag.message, "more than") != NULL);
		CHECK(f8_kir_add_shared(k, "tile", F8_DTYPE_BF16, 4, &other, &diag) == F8_ERR_INVALID);
		CHECK(f8_kir_add_shared(k, "none", F8_DTYPE_F32, 0, &other, &diag) == F8_ERR_INVALID);
		f8_kir_destroy(k);
	}
	{ // a shared store in the grid loop's body; a mask that is not an i1
		FRESH();
		CHECK(f8_kir_begin_grid_loop(k, f8_kir_size(k, n), &var, &diag) == F8_OK);
		CHECK(f8_kir_store_shared(k, tile, var, f8_kir_const_f32(k, 1), &diag) ==
		      F8_ERR_INVALID);
		CHECK(f8_kir_store_if(k, y, var, f8_kir_const_f32(k, 1), var, &diag) == F8_ERR_INVALID);
		CHECK(strstr(diag.message, "not an i1") != NULL);
		CHECK(f8_kir_load_if(k, x, var, var) == F8_KIR_NONE);
		f8_kir_destroy(k);
	}
	{ // a shared load outside a block loop
		FRESH();
		CHECK(f8_kir_begin_grid_loop(k, f8_kir_size(k, n), &var, &diag) == F8_OK);
		f8_kir_id v = f8_kir_load_shared(k, tile, var);
		CHECK(f8_kir_store(k, y, var, v, &diag) == F8_OK);
		CHECK(f8_kir_end_loop(k, NULL, 0, &diag) == F8_OK);
		CHECK(f8_kir_verify(k, &diag) == F8_ERR_INVALID);
		CHECK(strstr(diag.message, "outside a block loop") != NULL);
		f8_kir_destroy(k);
	}
	{ // one block loop both storing and loading the array
		FRESH();
		CHECK(f8_kir_begin_grid_loop(k, f8_kir_size(k, n), &var, &diag) == F8_OK);
		CHECK(f8_kir_begin_block_loop(k, f8_kir_const_i64(k, 64), &inner, &diag) == F8_OK);
		CHECK(f8_kir_store_shared(k, tile, inner, f8_kir_const_f32(k, 1), &diag) == F8_OK);
		f8_kir_id v = f8_kir_load_shared(k, tile, inner);
		CHECK(f8_kir_store(k, y, inner, v, &diag) == F8_OK);
		CHECK(f8_kir_end_loop(k, NULL, 0, &diag) == F8_OK);
		CHECK(f8_kir_end_loop(k, NULL, 0, &diag) == F8_OK);
		CHECK(f8_kir_verify(k, &diag) == F8_ERR_INVALID);
		CHECK(strstr(diag.message, "both loads and stores @tile") != NULL);
		f8_kir_destroy(k);
	}
#undef FRESH
}

/*
 * kir.h's table example: rows of (x, y) addresses; per row, y[j] = 2 x[j] for j < 8, x bf16 and
 * y f32, through load.ptr and store.ptr.
 */
static f8_status build_scale_all(f8_kernel *k, f8_diag *diag) {
	uint32_t table, rows;
	f8_status status = f8_kir_add_param(k, "table0", F8_KERNEL_PARAM_TABLE, F8_DTYPE_I64, &table,
					    diag);
	if (!status)
		status = f8_kir_add_param(k, "rows", F8_KERNEL_PARAM_SIZE, F8_DTYPE_I64, &rows, diag);
	f8_kir_id r, j;
	if (status || (status = f8_kir_begin_grid_loop(k, f8_kir_size(k, rows), &r, diag)))
		return status;
	f8_kir_id two = f8_kir_const_i64(k, 2), at = f8_kir_emit(k, F8_KIR_OP_MUL, r, two, F8_KIR_NONE);
	f8_kir_id x = f8_kir_load(k, table, at);
	f8_kir_id y = f8_kir_load(k, table, f8_kir_emit(k, F8_KIR_OP_ADD, at, f8_kir_const_i64(k, 1),
							F8_KIR_NONE));
	if ((status = f8_kir_begin_block_loop(k, f8_kir_const_i64(k, 8), &j, diag)))
		return status;
	f8_kir_id v = f8_kir_load_ptr(k, F8_DTYPE_BF16, x, j);
	f8_kir_id twice = f8_kir_emit(k, F8_KIR_OP_MUL, v, f8_kir_const_f32(k, 2), F8_KIR_NONE);
	if ((status = f8_kir_store_ptr(k, F8_DTYPE_F32, y, j, twice, diag)) ||
	    (status = f8_kir_end_loop(k, NULL, 0, diag)))
		return status;
	return f8_kir_end_loop(k, NULL, 0, diag);
}

/* A table parameter and accesses through its addresses: printed, verified; their misuses. */
static void test_tables(void) {
	f8_kernel *k = f8_kir_create("scale_all");
	f8_diag diag = {0};
	CHECK(k && build_scale_all(k, &diag) == F8_OK);
	CHECK(k && f8_kir_verify(k, &diag) == F8_OK);
	char *text = printed(k);
	CHECK(strstr(text, "kernel scale_all(table %table0: i64, size %rows)") != NULL);
	CHECK(strstr(text, "= load.i64 %table0[%") != NULL);
	CHECK(strstr(text, "= load.ptr.f32 bf16 %") != NULL);
	CHECK(strstr(text, "store.ptr f32 %") != NULL);
	free(text);
	f8_kir_destroy(k);

	uint32_t table, n, bad;
	f8_kir_id var, inner;
	k = f8_kir_create("bad");
	CHECK(f8_kir_add_param(k, "t", F8_KERNEL_PARAM_TABLE, F8_DTYPE_F32, &bad, &diag) ==
	      F8_ERR_INVALID);
	CHECK(f8_kir_add_param(k, "t", F8_KERNEL_PARAM_TABLE, F8_DTYPE_I64, &table, &diag) == F8_OK);
	CHECK(f8_kir_add_param(k, "n", F8_KERNEL_PARAM_SIZE, F8_DTYPE_I64, &n, &diag) == F8_OK);
	CHECK(f8_kir_begin_grid_loop(k, f8_kir_size(k, n), &var, &diag) == F8_OK);
	f8_kir_id address = f8_kir_load(k, table, var);
	CHECK(f8_kir_store(k, table, var, address, &diag) == F8_ERR_INVALID); // read only
	CHECK(f8_kir_store_ptr(k, F8_DTYPE_F32, address, var, var, &diag) == F8_ERR_INVALID);
	CHECK(strstr(diag.message, "another type") != NULL);
	CHECK(f8_kir_load_ptr(k, F8_DTYPE_F64, address, var) == F8_KIR_NONE);
	CHECK(strstr(f8_kir_error(k), "no buffer holds") != NULL);
	f8_kir_destroy(k);
	{ // an address computed in the block loop
		k = f8_kir_create("bad");
		CHECK(f8_kir_add_param(k, "t", F8_KERNEL_PARAM_TABLE, F8_DTYPE_I64, &table, &diag) == 0);
		CHECK(f8_kir_add_param(k, "n", F8_KERNEL_PARAM_SIZE, F8_DTYPE_I64, &n, &diag) == 0);
		CHECK(f8_kir_begin_grid_loop(k, f8_kir_size(k, n), &var, &diag) == F8_OK);
		CHECK(f8_kir_begin_block_loop(k, f8_kir_const_i64(k, 4), &inner, &diag) == F8_OK);
		f8_kir_id moving = f8_kir_load(k, table, inner);
		f8_kir_id v = f8_kir_load_ptr(k, F8_DTYPE_F32, moving, inner);
		CHECK(f8_kir_store_ptr(k, F8_DTYPE_F32, moving, inner, v, &diag) == F8_OK);
		CHECK(f8_kir_end_loop(k, NULL, 0, &diag) == F8_OK);
		CHECK(f8_kir_end_loop(k, NULL, 0, &diag) == F8_OK);
		CHECK(f8_kir_verify(k, &diag) == F8_ERR_INVALID);
		CHECK(strstr(diag.message, "made in a block loop") != NULL);
		f8_kir_destroy(k);
	}
	{ // the block loop's variable as an address
		k = f8_kir_create("bad");
		CHECK(f8_kir_add_param(k, "n", F8_KERNEL_PARAM_SIZE, F8_DTYPE_I64, &n, &diag) == 0);
		CHECK(f8_kir_begin_grid_loop(k, f8_kir_size(k, n), &var, &diag) == F8_OK);
		CHECK(f8_kir_begin_block_loop(k, f8_kir_const_i64(k, 4), &inner, &diag) == F8_OK);
		CHECK(f8_kir_store_ptr(k, F8_DTYPE_BF16, inner, var, f8_kir_const_f32(k, 1), &diag) ==
		      F8_OK);
		CHECK(f8_kir_end_loop(k, NULL, 0, &diag) == F8_OK);
		CHECK(f8_kir_end_loop(k, NULL, 0, &diag) == F8_OK);
		CHECK(f8_kir_verify(k, &diag) == F8_ERR_INVALID);
		CHECK(strstr(diag.message, "made in a block loop") != NULL);
		f8_kir_destroy(k);
	}
}

static void test_allocation_failure(void) {
	for (long after = 0;; after++) {
		test_fail_allocations_after(after);
		f8_diag diag = {0};
		f8_kernel *k = f8_kir_create("cast_amax");
		f8_status status = k ? build_cast_amax(k, &diag) : F8_ERR_NOMEM;
		if (!status)
			status = f8_kir_verify(k, &diag);
		test_allocations_restore();
		bool reported = status == F8_ERR_NOMEM || (k && f8_kir_error(k));
		f8_kir_destroy(k);
		if (status == F8_OK)
			break;
		CHECK(reported);
	}
}

int main(void) {
	test_build_print_verify();
	test_refusals();
	test_shared_and_masks();
	test_shared_refusals();
	test_tables();
	test_allocation_failure();
	return test_finish();
}
