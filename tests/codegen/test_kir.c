/*
 * The kernel IR on its own: the builder makes the kernel of kir.h's header comment, the printer
 * writes it as that comment shows, the verifier accepts it; every misuse the builder or the
 * verifier should refuse is refused with a message naming the kernel; allocation failure at
 * every allocation of building a kernel is reported, never a crash.
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

/* kir.h's example: y = cast(x * scale), the amax of x over the whole tensor. */
static f8_status build_cast_amax(f8_kernel *k, f8_diag *diag) {
	uint32_t x, y, scale, amax, rows, cols;
	f8_status status = f8_kir_add_param(k, "x", F8_KIR_PARAM_IN, F8_DTYPE_F32, &x, diag);
	if (!status)
		status = f8_kir_add_param(k, "y", F8_KIR_PARAM_OUT, F8_DTYPE_E4M3, &y, diag);
	if (!status)
		status = f8_kir_add_param(k, "scale", F8_KIR_PARAM_IN, F8_DTYPE_F32, &scale, diag);
	if (!status)
		status = f8_kir_add_param(k, "amax", F8_KIR_PARAM_ACCUMULATE, F8_DTYPE_F32, &amax, diag);
	if (!status)
		status = f8_kir_add_param(k, "rows", F8_KIR_PARAM_SIZE, F8_DTYPE_I64, &rows, diag);
	if (!status)
		status = f8_kir_add_param(k, "cols", F8_KIR_PARAM_SIZE, F8_DTYPE_I64, &cols, diag);
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
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);
	f8_kir_print(k, out);
	fclose(out);
	printf("%s", text);
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
	CHECK(f8_kir_add_param(k, "x", F8_KIR_PARAM_IN, F8_DTYPE_F32, &x, &diag) == 0);  \
	CHECK(f8_kir_add_param(k, "y", F8_KIR_PARAM_OUT, F8_DTYPE_F32, &y, &diag) == 0); \
	CHECK(f8_kir_add_param(k, "n", F8_KIR_PARAM_SIZE, F8_DTYPE_I64, &n, &diag) == 0)
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
		CHECK(f8_kir_add_param(k, "late", F8_KIR_PARAM_IN, F8_DTYPE_F32, &late, &diag) ==
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
	test_allocation_failure();
	return test_finish();
}
