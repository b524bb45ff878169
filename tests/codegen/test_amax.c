/*
 * Amax and ScaleFromAmax as generated kernels (codegen/lower_amax.c: what the shard pass puts
 * around current scaling's AllReduce {op="max"} under sequence parallelism) against the
 * reference kernels (runtime/cpu/kernels_fp8.c), bit for bit, on the host JIT:
 *   - Amax of f32 and bf16 tensors of 0 to 20000 elements (a symbolic count, across the
 *     kernel's chunks of 4096), filled with signed normals, with a NaN (any sign and payload:
 *     the output is f8_amax's NaN), an infinity of either sign, both, zeros of both signs,
 *     subnormals alone, or random bit patterns;
 *   - ScaleFromAmax of E4M3 and E5M2 at margins 0, 1, 7, -3 and the ends of the range the
 *     lowering takes (149, -127), on amaxes that are NaN, infinities, zeros, negative,
 *     subnormal (whose scale overflows to FLT_MAX), the largest finite, and random bit patterns
 *     of every exponent; a scalar amax (the shard pass's) and a vector (one per expert);
 *   - a ScaleFromAmax at margin 150 is not lowered (2^-150 is no f32: see lower_amax.c).
 * The seed comes from the clock and is printed; F8_TEST_SEED=N repeats a run.
 *
 * usage: test_amax
 */
#define _POSIX_C_SOURCE 200809L // rand_r

#include <float.h>  // FLT_MAX, FLT_MIN, FLT_TRUE_MIN
#include <math.h>   // NAN, INFINITY, ldexp
#include <stdio.h>  // printf, snprintf
#include <stdlib.h> // rand_r, getenv, strtoul
#include <string.h> // memcpy, memcmp, strlen
#include <time.h>   // time

#include "codegen/lower.h"         // f8_codegen_can_lower
#include "ir/alloc.h"              // f8_calloc, f8_free
#include "ir/text.h"               // f8_text_parse
#include "passes/pipeline.h"       // f8_pipeline_run
#include "runtime/cpu/generated.h" // f8_cpu_generated_create, f8_cpu_generated_run_tensors
#include "runtime/cpu/kernels.h"   // f8_cpu_kernel_get, f8_cpu_kernel_call
#include "runtime/tensor.h"        // f8_rt_tensor
#include "tests/test_support.h"    // CHECK, test_finish
#include "tests/codegen/one_group.h" // test_one_group

static unsigned seed;

static uint32_t random_bits(void) {
	return ((uint32_t)rand_r(&seed) << 16) ^ (uint32_t)rand_r(&seed);
}

static double uniform(void) {
	return (rand_r(&seed) + 0.5) / ((double)RAND_MAX + 1.0);
}

static float from_bits(uint32_t bits) {
	float f;
	memcpy(&f, &bits, sizeof f);
	return f;
}

/* A graph of one node, its input filled by a caller's function, run through the generated
 * kernels and the reference kernel. */
typedef struct one_node {
	f8_graph *graph;
	f8_cpu_generated *generated;
	const f8_node *node;
	f8_rt_tensor *tensors; // (graph->n_values) the kernels' input and output
	f8_rt_tensor reference;
	int64_t symbols[1];
} one_node;

static bool one_node_create(one_node *t, const char *text, f8_kernel_family family) {
	uint32_t group;
	*t = (one_node){.graph = test_one_group("test_amax", text, family, &group)};
	if (!t->graph)
		return false;
	f8_diag diag = {0};
	f8_status status = f8_cpu_generated_create(t->graph, NULL, &t->generated, &diag);
	if (status) {
		f8_diag_print(&diag, stdout);
		CHECK(status == F8_OK);
		f8_graph_destroy(t->graph);
		return false;
	}
	t->node = &t->graph->nodes[t->graph->order[0]];
	t->tensors = f8_calloc(t->graph->n_values, sizeof *t->tensors);
	return t->tensors != NULL;
}

static void one_node_release(one_node *t) {
	for (uint32_t i = 0; t->tensors && i < t->graph->n_values; i++)
		f8_rt_tensor_destroy(&t->tensors[i]);
	f8_free(t->tensors);
	f8_rt_tensor_destroy(&t->reference);
	f8_cpu_generated_destroy(t->generated);
	f8_graph_destroy(t->graph);
}

/* The tensors of `value` for symbol value n (its dims evaluated), made afresh into *out. */
static bool make(const one_node *t, f8_value_id value, f8_rt_tensor *out) {
	const f8_type *type = &t->graph->values[value].type;
	int64_t dims[F8_MAX_RANK];
	for (int d = 0; d < type->shape.rank; d++)
		if (!f8_dim_evaluate(type->shape.dims[d], t->symbols, &dims[d]))
			return false;
	f8_rt_tensor_destroy(out);
	return f8_rt_tensor_create(type->dtype, type->shape.rank, dims, out, NULL) == F8_OK;
}

/* Makes the input (for symbol value n) and lets fill() write it; true when made. */
static bool one_node_input(one_node *t, int64_t n, f8_rt_tensor **x) {
	t->symbols[0] = n;
	f8_value_id in = t->node->inputs[0], out = t->node->outputs[0];
	bool made = make(t, in, &t->tensors[in]) && make(t, out, &t->tensors[out]) &&
		    make(t, out, &t->reference);
	CHECK(made);
	*x = &t->tensors[in];
	return made;
}

/* Runs both and compares the output's bytes; prints the first difference, with `what`. */
static bool one_node_check(one_node *t, const char *what) {
	f8_diag diag = {0};
	f8_value_id out = t->node->outputs[0];
	f8_status status = f8_cpu_generated_run_tensors(t->generated, 0, t->tensors, t->symbols,
							&diag);
	const f8_rt_tensor *inputs[1] = {&t->tensors[t->node->inputs[0]]};
	f8_cpu_kernel_call call = {.graph = t->graph, .node = t->node, .symbol_values = t->symbols,
				   .inputs = inputs, .outputs = &t->reference};
	if (!status)
		status = f8_cpu_kernel_get(t->node->op)(&call, &diag);
	if (status) {
		f8_diag_print(&diag, stdout);
		CHECK(status == F8_OK);
		return false;
	}
	const float *want = t->reference.data, *got = t->tensors[out].data;
	int64_t count = f8_rt_tensor_numel(&t->reference);
	for (int64_t i = 0; i < count; i++) {
		uint32_t a, b;
		memcpy(&a, &want[i], sizeof a);
		memcpy(&b, &got[i], sizeof b);
		if (a != b) {
			printf("  %s: element %lld of %lld: reference %.9g (0x%08x), kernel %.9g "
			       "(0x%08x)", what, (long long)i, (long long)count, (double)want[i], a,
			       (double)got[i], b);
			if (t->node->op == F8_OP_SCALE_FROM_AMAX) // the amax it came from
				printf(", amax %.9g",
				       (double)((const float *)t->tensors[t->node->inputs[0]].data)[i]);
			printf("\n");
			return false;
		}
	}
	return true;
}

/* Amax. */

typedef enum amax_fill {
	FILL_NORMAL,   // signed values of a random spread
	FILL_NAN,      // and a NaN of any sign and payload
	FILL_INFINITY, // and an infinity of either sign
	FILL_BOTH,     // and both
	FILL_ZEROS,    // zeros of either sign
	FILL_TINY,     // subnormals of either sign
	FILL_BITS,     // random bit patterns (NaNs among them)
	N_FILLS
} amax_fill;

static const char *const fill_names[N_FILLS] = {"normal", "a NaN", "an infinity",
						"a NaN and an infinity", "zeros", "subnormals",
						"random bits"};

static void fill_amax(f8_rt_tensor *x, amax_fill fill) {
	int64_t n = f8_rt_tensor_numel(x);
	double spread = ldexp(1.0, (int)(uniform() * 40) - 20);
	bool f32 = x->dtype == F8_DTYPE_F32;
	for (int64_t i = 0; i < n; i++) {
		double v = (uniform() - 0.5) * spread;
		if (fill == FILL_ZEROS)
			v = uniform() < 0.5 ? 0.0 : -0.0;
		else if (fill == FILL_TINY)
			v = (uniform() - 0.5) * FLT_MIN;
		if (fill == FILL_BITS && f32)
			((float *)x->data)[i] = from_bits(random_bits());
		else
			f8_rt_tensor_set(x, i, v);
	}
	if (n == 0)
		return;
	if (fill == FILL_INFINITY || fill == FILL_BOTH)
		f8_rt_tensor_set(x, (int64_t)(uniform() * n), uniform() < 0.5 ? INFINITY : -INFINITY);
	if (fill == FILL_NAN || fill == FILL_BOTH) {
		int64_t at = (int64_t)(uniform() * n);
		uint32_t bits = 0x7f800000u | (random_bits() & 0x807fffffu) | 1u; // a NaN
		if (f32)
			((float *)x->data)[at] = from_bits(bits);
		else
			f8_rt_tensor_set(x, at, from_bits(bits));
	}
}

static void check_amax(const char *dtype) {
	char text[256];
	snprintf(text, sizeof text, "graph amax {\n  input %%x : %s[n]\n  %%a = Amax(%%x)\n"
		 "  output %%a\n}\n", dtype);
	printf("Amax of %s[n], n from 0 to 20000, bit for bit\n", dtype);
	one_node t;
	if (!one_node_create(&t, text, F8_KERNEL_FAMILY_REDUCE))
		return;
	static const int64_t sizes[] = {0, 1, 2, 7, 255, 4095, 4096, 4097, 3 * 4096 + 5, 20000};
	int runs = 0, differ = 0;
	for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
		for (int fill = 0; fill < N_FILLS; fill++)
			for (int round = 0; round < 4; round++) {
				f8_rt_tensor *x;
				if (!one_node_input(&t, sizes[s], &x))
					break;
				fill_amax(x, (amax_fill)fill);
				char what[96];
				snprintf(what, sizeof what, "n %lld, %s", (long long)sizes[s],
					 fill_names[fill]);
				runs++;
				differ += !one_node_check(&t, what);
			}
	printf("  %d of %d runs differ\n", differ, runs);
	CHECK(runs > 0 && differ == 0);
	one_node_release(&t);
}

/* ScaleFromAmax. */

static void fill_amaxes(f8_rt_tensor *a) {
	static const float special[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, -1.0f,
					FLT_TRUE_MIN, 1e-40f, FLT_MIN, FLT_MAX, 448.0f, 57344.0f,
					1.0f, 3.0f, 1e-30f, 1e30f};
	enum { N_SPECIAL = sizeof special / sizeof special[0] };
	float *x = a->data;
	int64_t n = f8_rt_tensor_numel(a);
	for (int64_t i = 0; i < n; i++) {
		double u = uniform();
		if (i < N_SPECIAL && n > N_SPECIAL)
			x[i] = special[i];
		else if (n <= N_SPECIAL && u < 0.3)
			x[i] = special[(size_t)(uniform() * N_SPECIAL)];
		else if (u < 0.5) // positive, of any exponent, subnormals included
			x[i] = from_bits(random_bits() & 0x7fffffffu);
		else if (u < 0.6)
			x[i] = from_bits(random_bits());
		else // amaxes as tensors have them
			x[i] = (float)ldexp(0.5 + uniform(), (int)(uniform() * 60) - 30);
	}
}

static void check_scale(const char *format, int margin, const char *shape, int rounds) {
	char text[256];
	snprintf(text, sizeof text, "graph scale {\n  input %%a : f32%s\n  %%s = ScaleFromAmax(%%a) "
		 "{format=%s, margin=%d}\n  output %%s\n}\n", shape, format, margin);
	printf("ScaleFromAmax %s, margin %d, f32%s, bit for bit\n", format, margin, shape);
	one_node t;
	if (!one_node_create(&t, text, F8_KERNEL_FAMILY_SCALING))
		return;
	int runs = 0, differ = 0;
	for (int round = 0; round < rounds; round++) {
		f8_rt_tensor *a;
		if (!one_node_input(&t, 4096, &a))
			break;
		fill_amaxes(a);
		runs++;
		differ += !one_node_check(&t, "amaxes");
	}
	printf("  %d of %d runs differ\n", differ, runs);
	CHECK(runs > 0 && differ == 0);
	one_node_release(&t);
}

/* A margin whose 2^-margin is no f32 is left to the reference kernel, said by can_lower. */
static void check_margin_refused(void) {
	printf("ScaleFromAmax at margin 150 and -128: not lowered; at 149 and -127: lowered\n");
	static const struct {
		int margin;
		bool lowers;
	} cases[] = {{150, false}, {-128, false}, {149, true}, {-127, true}};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		char text[256];
		snprintf(text, sizeof text, "graph scale {\n  input %%a : f32[]\n  %%s = "
			 "ScaleFromAmax(%%a) {format=e4m3, margin=%d}\n  output %%s\n}\n",
			 cases[c].margin);
		f8_graph *graph = NULL;
		f8_diag diag = {0};
		f8_status status = f8_text_parse(text, strlen(text), "margin", &graph, &diag);
		if (!status)
			status = f8_pipeline_run(graph, "canonicalize", true, &diag);
		if (status)
			f8_diag_print(&diag, stdout);
		CHECK(status == F8_OK);
		if (!status)
			CHECK(f8_codegen_can_lower(graph, graph->order[0]) == cases[c].lowers);
		f8_graph_destroy(graph);
	}
}

int main(void) {
	const char *fixed = getenv("F8_TEST_SEED");
	seed = fixed ? (unsigned)strtoul(fixed, NULL, 10) : (unsigned)time(NULL);
	printf("seed %u (F8_TEST_SEED=%u repeats this run)\n", seed, seed);
	check_amax("f32");
	check_amax("bf16");
	check_scale("e4m3", 0, "[]", 200);     // the shard pass's: one scalar amax
	check_scale("e4m3", 0, "[n]", 20);
	check_scale("e5m2", 0, "[n]", 20);
	check_scale("e4m3", 1, "[n]", 10);
	check_scale("e5m2", 7, "[n]", 10);
	check_scale("e4m3", -3, "[n]", 10);
	check_scale("e4m3", 149, "[n]", 10);
	check_scale("e5m2", 149, "[n]", 10);
	check_scale("e4m3", -127, "[n]", 10);
	check_margin_refused();
	return test_finish();
}
