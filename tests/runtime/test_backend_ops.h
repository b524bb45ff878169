/*
 * What the backend test table (tests/runtime/test_backend_ops.c) shares with the program that
 * runs its cases on a GPU (tests/gpu/backend_ops_cuda.c), so that both hold a backend to the
 * CPU reference by one rule: the tolerance per dtype, the comparison of a run's outputs with
 * the reference's and the lines that report it, a run through the executor core, what runs a
 * compiled graph's nodes, and the layout of the written cases. Header-only, like
 * tests/runtime/test_compare.h: the GPU program is built without LLVM, so nothing here may
 * need codegen or the passes.
 *
 * Written cases (test_backend_ops --write-cases DIR, where LLVM is; the GPU machine has none):
 *   DIR/manifest.json   {"format": BACKEND_OPS_FORMAT, "seed", "cases": [{"index", "title",
 *                        "ops": [the ops of its compiled graph, in program order, once each],
 *                        then either "folder" (written; "tolerance": the case's bound for
 *                        every output, 0: each output's dtype's, backend_ops_tolerance) or
 *                        "not_written" (why it cannot run on the GPU)}, ...]}
 *   DIR/<folder>/       the case's plan for sm_90 (runtime/plan.h: plan.json, kernels.ptx,
 *                        weights.safetensors) and BACKEND_OPS_CASE_FILE: the leaves as
 *                        "leaf.<name>" (the fill the CPU table draws for that case and seed),
 *                        the CPU reference backend's outputs as "reference.<name>"
 */
#ifndef F8_TESTS_RUNTIME_TEST_BACKEND_OPS_H
#define F8_TESTS_RUNTIME_TEST_BACKEND_OPS_H

#include <math.h>    // ldexp, INFINITY
#include <stdbool.h> // bool
#include <stdio.h>   // printf, snprintf

#include "ir/dtype.h"                   // f8_dtype_get_info, f8_dtype_name
#include "ir/graph.h"                   // f8_graph, f8_kernel_family_name
#include "ir/ops.h"                     // f8_op
#include "runtime/executor.h"           // f8_executor_create, _write, _run, _read
#include "tests/runtime/test_compare.h" // test_compare, test_comparison

#define BACKEND_OPS_FORMAT "f8c backend op cases 1"
#define BACKEND_OPS_CASE_FILE "case.safetensors"
#define BACKEND_OPS_LEAF "leaf."           // + the leaf's name: its contents
#define BACKEND_OPS_REFERENCE "reference." // + the output's name: the CPU reference's

/*
 * The NMSE an output of `dtype` and `numel` elements may reach against the reference. Both
 * CPU backends run the library nodes (GEMMs, attention) and the ops codegen does not lower
 * through the same reference kernels: there they agree exactly. Where a generated kernel
 * runs, it computes in f32 with its own exp, tanh and erf (codegen/llvm_math.c, a few ulps)
 * while the reference computes in double and rounds once, so an f32 output differs by a few
 * f32 ulps: NMSE about (4 * 2^-24)^2 = 1e-13 (5e-14 the most seen over 120 seeds, a LayerNorm).
 * A wrong kernel (a wrong constant, a dropped term, an off-by-one in a row) gives 1e-8 or
 * more, a relative error of 1e-4.
 * A bf16, f16 or FP8 output is rounded from such values: where one lands near a midpoint the
 * rounding may go the other way, moving the element by a whole ulp of its format, up to 2^-m
 * of it for m mantissa bits (2^-7 bf16, 2^-3 e4m3, 2^-2 e5m2). The bound allows one element in
 * a thousand, or four elements of a small output, to move so: far below what a kernel rounding
 * the wrong way (truncation moves half of them: NMSE about ulp^2 / 4) or with a wrong scale
 * reaches (the most seen: one element of a bf16 RMSNormGrad's dx of 1512, 1.4e-8). Integers,
 * bools and e8m0 scales (powers of two found from an amax) must be equal.
 * The GPU's generated kernels are the same kernels (the same codegen, for NVPTX), and its f32
 * GEMMs sum in f32 without TF32 (tools/gpu_checks.md: f32 NMSE about 1e-14), so the same bounds
 * hold there; where a library rounds on its own (FP8 tensor cores, cuDNN's P in the I/O dtype)
 * the case carries its bound.
 */
static inline double backend_ops_tolerance(f8_dtype dtype, int64_t numel) {
	switch (dtype) {
	case F8_DTYPE_F64: return 1e-20;
	case F8_DTYPE_F32: return 1e-10;
	case F8_DTYPE_BF16:
	case F8_DTYPE_F16:
	case F8_DTYPE_E4M3:
	case F8_DTYPE_E5M2: {
		double ulp = ldexp(1.0, -f8_dtype_get_info(dtype)->mantissa_bits);
		double moved = numel > 4000 ? 1e-3 : 4.0 / (double)(numel ? numel : 1);
		return moved * ulp * ulp;
	}
	default: return 0;
	}
}

/* Reshape, Squeeze, Unsqueeze and Identity outside a fused group: the bytes as they are, which
 * the CUDA backend runs as a device copy (runtime/cuda/backend.c, run_node), the one kind of
 * node besides groups and library calls that it runs. */
static inline bool backend_ops_is_device_copy(f8_op op) {
	return op == F8_OP_RESHAPE || op == F8_OP_SQUEEZE || op == F8_OP_UNSQUEEZE ||
	       op == F8_OP_IDENTITY;
}

/* The kernels the fuse pass made, for the report: "elementwise" or "norm+cast"; "" for none. */
static inline void backend_ops_describe_kernels(const f8_graph *graph, char *out, size_t size) {
	size_t used = 0;
	out[0] = '\0';
	for (uint32_t g = 0; g < graph->n_groups && used < size; g++) {
		int n = snprintf(out + used, size - used, "%s%s", g ? "+" : "",
				 f8_kernel_family_name(graph->groups[g].family));
		used += n > 0 ? (size_t)n : 0;
	}
}

/* Runs `graph` on `backend` (borrowed) through the executor core `runs` times, `leaves`
 * (graph->inputs order) written before each (a case may update them in place): the last run's
 * outputs into outputs[0 .. n_outputs) (made here, the caller destroys them) and what the
 * executor's memory came to into *memory. More than one run lets a backend replay what it
 * recorded (the CUDA backend's graphs: run as issued, captured, replayed). */
static inline f8_status backend_ops_run_times(f8_backend *backend, const f8_graph *graph,
					      const f8_rt_tensor *leaves, f8_rt_tensor *outputs,
					      f8_executor_memory *memory, int runs,
					      f8_diag *diag) {
	f8_executor *executor = NULL;
	f8_status status = f8_executor_create(graph, NULL, backend, &executor, diag);
	if (!status)
		*memory = f8_executor_memory_of(executor);
	for (int run = 0; !status && run < runs; run++) {
		for (uint32_t i = 0; !status && i < graph->n_inputs; i++)
			status = f8_executor_write(executor, graph->inputs[i], &leaves[i], diag);
		if (!status)
			status = f8_executor_run(executor, F8_PHASES_ALL, diag);
	}
	for (uint32_t o = 0; !status && o < graph->n_outputs; o++)
		status = f8_executor_read(executor, graph->outputs[o], &outputs[o], diag);
	f8_executor_destroy(executor);
	return status;
}

/* One run (backend_ops_run_times). */
static inline f8_status backend_ops_run(f8_backend *backend, const f8_graph *graph,
					const f8_rt_tensor *leaves, f8_rt_tensor *outputs,
					f8_executor_memory *memory, f8_diag *diag) {
	return backend_ops_run_times(backend, graph, leaves, outputs, memory, 1, diag);
}

/* How a backend's run of a case compared with the reference's: every output within its bound,
 * and the output nearest its bound (its NMSE and bound; bound 0: exact). */
typedef struct backend_ops_result {
	bool ok;
	double worst, worst_tolerance;
} backend_ops_result;

/* Compares every output of a run (got) with the reference's (want), each against
 * `case_tolerance` or, when that is 0, its dtype's (backend_ops_tolerance); prints each output
 * that fails (with `verbose`, every output) with the element that differs most. */
static inline backend_ops_result backend_ops_compare(const f8_graph *graph, double case_tolerance,
						     const char *backend, const f8_rt_tensor *got,
						     const f8_rt_tensor *want, bool verbose) {
	backend_ops_result result = {.ok = true};
	double worst_ratio = -1;
	for (uint32_t o = 0; o < graph->n_outputs; o++) {
		f8_dtype dtype = want[o].dtype;
		int64_t numel = f8_rt_tensor_numel(&want[o]);
		double tolerance = case_tolerance ? case_tolerance
						  : backend_ops_tolerance(dtype, numel);
		bool same_type = f8_rt_tensor_same_type(&got[o], &want[o]);
		test_comparison r = same_type ? test_compare(&got[o], &want[o], tolerance == 0)
					      : (test_comparison){.nmse = INFINITY, .bad = 1};
		bool passed = r.bad == 0 && r.nmse <= tolerance;
		double ratio = tolerance ? r.nmse / tolerance : r.nmse > 0 ? INFINITY : 0;
		if (ratio > worst_ratio) {
			result.worst = r.nmse;
			result.worst_tolerance = tolerance;
			worst_ratio = ratio;
		}
		const char *name = graph->values[graph->outputs[o]].name;
		if (!same_type) {
			printf("  %%%s: %s has another dtype or shape than the reference's\n", name,
			       backend);
		} else if (!passed || verbose) {
			printf("  %%%s (%s): NMSE %.3g, tolerance %.0e%s; %lld of %lld elements "
			       "differ", name, f8_dtype_name(dtype), r.nmse, tolerance,
			       tolerance ? "" : " (exact)", (long long)r.differ,
			       (long long)numel);
			if (r.differ)
				printf(", %s at %lld: reference %.9g, %s %.9g",
				       r.bad ? "against the rules" : "the most", (long long)r.at,
				       r.want, backend, r.got);
			printf("\n");
		}
		result.ok &= passed;
	}
	return result;
}

/* The case's line: title, backend, the worst output's NMSE against its bound, the verdict,
 * and what ran it (`ran`: "[kernels: elementwise]"; "" for nothing to say). */
static inline void backend_ops_print(const char *title, const char *backend,
				     const backend_ops_result *r, const char *ran) {
	char bound[32] = "exact";
	if (r->worst_tolerance)
		snprintf(bound, sizeof bound, "%.0e", r->worst_tolerance);
	printf("%-52s %-14s NMSE %-9.3g (tolerance %s) %s%s%s\n", title, backend, r->worst, bound,
	       r->ok ? "OK" : "FAIL", ran[0] ? "  " : "", ran);
}

#endif
