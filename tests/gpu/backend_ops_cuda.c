/*
 * The backend test table (tests/runtime/test_backend_ops.c) on the CUDA backend, on the GPU
 * machine, which has no LLVM: the table's cases were compiled into plans for sm_90 by a full
 * build (test_backend_ops --write-cases DIR), each with its leaves and the CPU reference
 * backend's outputs (the layout: tests/runtime/test_backend_ops.h). Each case's plan is loaded
 * and run through the executor core on a CUDA backend, and every output compared with the
 * stored reference by the table's own rule (backend_ops_compare: NMSE against a bound per
 * dtype, or the case's).
 *
 * One line per case: its title, the backend, the worst output's NMSE and bound, the verdict,
 * and what ran it (the plan's generated kernels, cuBLASLt and cuDNN calls, device copies); a
 * case the manifest lists as not written says why. A case whose library call the device's
 * libraries refuse (F8_ERR_UNSUPPORTED at prepare: a shape cuBLASLt or cuDNN has no engine
 * for) is reported as refused by the device, with the libraries' words, and counted apart: it
 * says what the GPU cannot run, not that it computed wrongly. Then (without a title filter) a
 * coverage line: every op of ir/ops.def either ran (in a case that ran to the comparison) or is
 * listed with the first reason it did not; and a summary.
 *
 * Exit status: 0 when every case that ran passed (and one did); 1 otherwise; 77, saying it needs
 * a GPU, when f8_cuda_backend_create answers F8_ERR_UNSUPPORTED (no GPU or driver, or one older
 * than sm_90), which ctest counts as skipped. With --backend cpu-reference the same cases run
 * on the CPU reference backend instead, and must reproduce the stored outputs: CI's check,
 * without a GPU, that the writer's plans load and its leaves and references belong together.
 * F8_TEST_VERBOSE=1 prints every output's comparison, not only those that fail.
 * F8C_OPS_GRAPHS=1 runs each case three times with CUDA graphs on, the leaves written before
 * each run: the first runs as issued, the second is captured, the third replays the graph, and
 * the third's outputs are compared (under F8C_NCCL=1 the collectives' fork to the
 * communication stream and their joins are then captured and replayed too).
 *
 * usage: backend_ops_cuda [--backend cuda|cpu-reference] DIR [TITLE_PART]
 */
#include <jansson.h> // json_load_file, json_object_get
#include <stdio.h>   // printf, snprintf
#include <stdlib.h>  // getenv
#include <string.h>  // strcmp, strstr, strlen

#include "ir/alloc.h"                       // f8_calloc, f8_free
#include "ir/ops.h"                         // f8_op_from_name, f8_op_name, F8_OPF_*
#include "runtime/cpu/backend.h"            // f8_cpu_backend_create
#include "runtime/cuda/backend.h"           // f8_cuda_backend_create
#include "runtime/plan.h"                   // f8_plan_load, f8_plan_destroy
#include "runtime/safetensors.h"            // f8_safetensors_open, _read, _close
#include "tests/runtime/test_backend_ops.h" // backend_ops_run, _compare, _print, ...

/* What became of each op of ir/ops.def: it ran in a case that reached the comparison, or the
 * first reason it did not. */
static bool op_ran[F8_OP_COUNT];
static char op_why[F8_OP_COUNT][256];

/* Marks the ops a case's manifest entry names (JSON strings) as ran, or gives them `why`
 * where they have no reason yet. */
static void note_ops(const json_t *ops, bool ran, const char *title, const char *why) {
	size_t i;
	const json_t *name;
	json_array_foreach(ops, i, name) {
		f8_op op;
		const char *text = json_string_value(name);
		if (!text || !f8_op_from_name(text, strlen(text), &op))
			continue;
		op_ran[op] |= ran;
		if (!ran && !op_why[op][0])
			snprintf(op_why[op], sizeof op_why[op], "%s: %s", title, why);
	}
}

/* One written case, loaded: its plan, the leaves (graph->inputs order) and the reference's
 * outputs (graph->outputs order). */
typedef struct loaded_case {
	f8_plan *plan;
	f8_rt_tensor *leaves; // (plan->graph->n_inputs)
	f8_rt_tensor *want;   // (plan->graph->n_outputs)
} loaded_case;

static void loaded_case_destroy(loaded_case *c) {
	const f8_graph *graph = c->plan ? c->plan->graph : NULL;
	for (uint32_t i = 0; graph && c->leaves && i < graph->n_inputs; i++)
		f8_rt_tensor_destroy(&c->leaves[i]);
	for (uint32_t o = 0; graph && c->want && o < graph->n_outputs; o++)
		f8_rt_tensor_destroy(&c->want[o]);
	f8_free(c->leaves);
	f8_free(c->want);
	f8_plan_destroy(c->plan);
	*c = (loaded_case){0};
}

/* Reads the tensor `prefix` + value `v`'s name of `file` into *out. */
static f8_status read_named(const f8_safetensors *file, const char *prefix, const f8_graph *graph,
			    f8_value_id v, f8_rt_tensor *out, f8_diag *diag) {
	char name[512];
	snprintf(name, sizeof name, "%s%s", prefix, graph->values[v].name);
	return f8_safetensors_read(file, name, out, diag);
}

/* Loads the case in DIR/FOLDER: its plan (checked as every plan is) and its tensors. */
static f8_status load_case(const char *dir, const char *folder, loaded_case *out, f8_diag *diag) {
	*out = (loaded_case){0};
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", dir, folder);
	f8_status status = f8_plan_load(path, F8C_VERSION, &out->plan, diag);
	if (status)
		return status;
	const f8_graph *graph = out->plan->graph;
	out->leaves = f8_calloc(graph->n_inputs + 1, sizeof *out->leaves);
	out->want = f8_calloc(graph->n_outputs + 1, sizeof *out->want);
	if (!out->leaves || !out->want)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	f8_safetensors *file = NULL;
	snprintf(path, sizeof path, "%s/%s/%s", dir, folder, BACKEND_OPS_CASE_FILE);
	status = f8_safetensors_open(path, &file, diag);
	for (uint32_t i = 0; !status && i < graph->n_inputs; i++)
		status = read_named(file, BACKEND_OPS_LEAF, graph, graph->inputs[i], &out->leaves[i],
				    diag);
	for (uint32_t o = 0; !status && o < graph->n_outputs; o++)
		status = read_named(file, BACKEND_OPS_REFERENCE, graph, graph->outputs[o],
				    &out->want[o], diag);
	f8_safetensors_close(file);
	return status;
}

/* What runs `graph` on the backend, for the case's line: the fused groups' kernel families,
 * then the nodes outside them by what runs them (the CUDA backend's run_node: cuBLASLt for
 * GEMMs, cuDNN for attention, a device copy for the rest it runs). */
static void describe(const f8_graph *graph, bool cuda, char *out, size_t size) {
	char kernels[256];
	backend_ops_describe_kernels(graph, kernels, sizeof kernels);
	size_t used = 0;
	out[0] = '\0';
	if (kernels[0]) {
		int n = snprintf(out, size, "[%s: %s]", cuda ? "kernels" : "groups", kernels);
		used = n > 0 ? (size_t)n : 0;
	}
	for (uint32_t i = 0; i < graph->n_order && used < size; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		if (node->group != F8_NONE)
			continue;
		unsigned flags = f8_op_get_info(node->op)->flags;
		const char *by = "no GPU kernel";
		if (flags & F8_OPF_GEMM)
			by = cuda ? "cuBLASLt" : "library";
		else if (node->op == F8_OP_ATTENTION || node->op == F8_OP_ATTENTION_GRAD ||
			 node->op == F8_OP_ATTENTION_PACKED || node->op == F8_OP_ATTENTION_PACKED_GRAD)
			by = cuda ? "cuDNN" : "library";
		else if ((flags & F8_OPF_COLLECTIVE) || backend_ops_is_device_copy(node->op))
			by = "copy";
		int n = snprintf(out + used, size - used, "%s[%s: %s]", used ? " " : "", by,
			     f8_op_name(node->op));
		used += n > 0 ? (size_t)n : 0;
	}
}

typedef struct tally {
	uint32_t passed, failed, refused, not_written;
} tally;

/* Runs written case `entry` (a manifest entry with a folder) on a new backend: the case's line
 * and its count. Returns 77 when the CUDA backend answers that there is no GPU, else 0. */
static int run_case(const char *dir, const json_t *entry, bool cuda, bool verbose, tally *t) {
	const char *title = json_string_value(json_object_get(entry, "title"));
	const char *folder = json_string_value(json_object_get(entry, "folder"));
	const json_t *ops = json_object_get(entry, "ops");
	double tolerance = json_number_value(json_object_get(entry, "tolerance"));
	const char *name = cuda ? "cuda" : "cpu-reference";
	f8_diag diag = {0};
	loaded_case c;
	f8_status status = load_case(dir, folder, &c, &diag);
	if (status) {
		printf("%-52s %-14s FAIL: the case does not load: ", title, name);
		f8_diag_print(&diag, stdout);
		note_ops(ops, false, title, "its written case does not load");
		t->failed++;
		loaded_case_destroy(&c);
		return 0;
	}
	const f8_graph *graph = c.plan->graph;
	f8_backend *backend = NULL;
	bool replayed = cuda && getenv("F8C_OPS_GRAPHS") && strcmp(getenv("F8C_OPS_GRAPHS"), "0");
	status = cuda ? f8_cuda_backend_create(c.plan, &(f8_cuda_options){.cuda_graphs = replayed},
					       &backend, &diag)
		      : f8_cpu_backend_create(F8_CPU_KERNELS_REFERENCE, &backend, &diag);
	if (status == F8_ERR_UNSUPPORTED && cuda) {
		printf("backend_ops_cuda: needs a GPU: %s\n", diag.message);
		loaded_case_destroy(&c);
		return 77;
	}
	f8_rt_tensor *got = f8_calloc(graph->n_outputs + 1, sizeof *got);
	f8_executor_memory memory = {0};
	if (!status && !got)
		status = f8_diag_set(&diag, F8_ERR_NOMEM, "out of memory");
	if (!status)
		status = backend_ops_run_times(backend, graph, c.leaves, got, &memory,
					       replayed ? 3 : 1, &diag);
	char ran[512];
	describe(graph, cuda, ran, sizeof ran);
	if (status == F8_ERR_UNSUPPORTED && cuda) {
		printf("%-52s %-14s refused by the device: ", title, name);
		f8_diag_print(&diag, stdout);
		printf("  %s\n", ran);
		char why[320];
		snprintf(why, sizeof why, "refused by the device: %.280s", diag.message);
		note_ops(ops, false, title, why);
		t->refused++;
	} else if (status) {
		printf("%-52s %-14s FAIL: ", title, name);
		f8_diag_print(&diag, stdout);
		note_ops(ops, false, title, "its run failed");
		t->failed++;
	} else {
		backend_ops_result r = backend_ops_compare(graph, tolerance, name, got, c.want,
							   verbose);
		if (!memory.planned) {
			printf("  FAIL the slab was not planned (the plan's sizes are constants)\n");
			r.ok = false;
		}
		backend_ops_print(title, name, &r, ran);
		note_ops(ops, true, title, NULL);
		if (r.ok)
			t->passed++;
		else
			t->failed++;
	}
	for (uint32_t o = 0; got && o < graph->n_outputs; o++)
		f8_rt_tensor_destroy(&got[o]);
	f8_free(got);
	f8_backend_destroy(backend);
	loaded_case_destroy(&c);
	return 0;
}

/* Every op of ir/ops.def, for the coverage line. */
static const f8_op all_ops[] = {
#define X(e, ...) F8_OP_##e,
#include "ir/ops.def"
#undef X
};
static_assert(sizeof all_ops / sizeof all_ops[0] == F8_OP_COUNT, "every op once");

/* The coverage line: how many ops ran, then each that did not with its reason. */
static void print_coverage(const char *backend) {
	uint32_t ran = 0;
	for (uint32_t i = 0; i < F8_OP_COUNT; i++)
		ran += op_ran[all_ops[i]];
	printf("coverage: %u of the %d ops of ir/ops.def ran on %s%s\n", ran, F8_OP_COUNT, backend,
	       ran < F8_OP_COUNT ? "; the others did not:" : "");
	for (uint32_t i = 0; i < F8_OP_COUNT; i++) {
		f8_op op = all_ops[i];
		if (!op_ran[op])
			printf("  %-20s %s\n", f8_op_name(op),
			       op_why[op][0] ? op_why[op] : "in no case run (a title filter?)");
	}
}

int main(int argc, char **argv) {
	bool cuda = true;
	int a = 1;
	if (a + 1 < argc && strcmp(argv[a], "--backend") == 0) {
		cuda = strcmp(argv[a + 1], "cuda") == 0;
		if (!cuda && strcmp(argv[a + 1], "cpu-reference") != 0)
			a = argc; // an unknown backend: the usage
		a += 2;
	}
	if (a >= argc) {
		printf("usage: backend_ops_cuda [--backend cuda|cpu-reference] DIR [TITLE_PART]\n");
		return 2;
	}
	const char *dir = argv[a], *only = a + 1 < argc ? argv[a + 1] : NULL;
	bool verbose = getenv("F8_TEST_VERBOSE") != NULL;
	char path[4096];
	snprintf(path, sizeof path, "%s/manifest.json", dir);
	json_error_t error;
	json_t *manifest = json_load_file(path, 0, &error);
	const char *format = json_string_value(json_object_get(manifest, "format"));
	const json_t *cases = json_object_get(manifest, "cases");
	if (!manifest || !format || strcmp(format, BACKEND_OPS_FORMAT) != 0 ||
	    !json_is_array(cases)) {
		printf("FAIL %s: %s\n  HINT: write the cases with a full build: test_backend_ops "
		       "--write-cases %s\n", path, manifest ? "not a manifest of backend op cases "
		       "(\"" BACKEND_OPS_FORMAT "\")" : error.text, dir);
		json_decref(manifest);
		return 1;
	}
	printf("cases of %s, seed %lld (F8_TEST_SEED=%lld test_backend_ops repeats the CPU table's "
	       "run of them)\n", dir, (long long)json_integer_value(json_object_get(manifest, "seed")),
	       (long long)json_integer_value(json_object_get(manifest, "seed")));
	tally t = {0};
	size_t i;
	const json_t *entry;
	json_array_foreach(cases, i, entry) {
		const char *title = json_string_value(json_object_get(entry, "title"));
		const char *why = json_string_value(json_object_get(entry, "not_written"));
		if (!title || (only && !strstr(title, only)))
			continue;
		if (why) {
			printf("%-52s not run: %s\n", title, why);
			note_ops(json_object_get(entry, "ops"), false, title, why);
			t.not_written++;
		} else if (run_case(dir, entry, cuda, verbose, &t) == 77) {
			json_decref(manifest);
			return 77;
		}
	}
	json_decref(manifest);
	const char *backend = cuda ? "the CUDA backend" : "the CPU reference backend";
	if (!only) // a title filter leaves most ops out on purpose
		print_coverage(backend);
	printf("%u passed, %u FAILED, %u refused by the device's libraries, %u not written for the "
	       "GPU (their reasons above)\n", t.passed, t.failed, t.refused, t.not_written);
	return t.failed == 0 && t.passed > 0 ? 0 : 1;
}
