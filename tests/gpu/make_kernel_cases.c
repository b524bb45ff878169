/*
 * Makes the kernel cases that tests/gpu/gpu_kernel_check.c runs on a GPU: f8c's generated
 * kernels, compiled to one PTX module, with inputs and the expected outputs, so that the GPU
 * machine needs neither LLVM nor the CPU backend.
 *
 * Check mode: gpt-tiny (batch 2, seq 24) is compiled through the whole pipeline without FP8 and
 * with the default FP8 options, mixtral-tiny (batch 2, seq 24) without FP8 for its MoE ops'
 * groups only (codegen/lower_moe.c), gpt-odd (written here: one layer of hidden 272, FFN
 * 1088, vocab 97, batch 2, seq 40) with FP8, whose 80 rows and 272 columns end tiles of 64 part-way and
 * whose logits' rows (97) are unaligned for any vector access, and a few groups of text IR
 * (odd_groups) at shapes FP8 GEMMs would refuse: rows and columns that leave every 16-byte
 * access unaligned, rows of at least 256 for the row kernels of broadcasting groups, and an
 * optimizer of three odd-sized parameters (f32 and bf16; the models' own optimizer groups are
 * too large for a check run: see optimizer() below), whose launch builds a table, a norm whose
 * codes are transposed as 4-byte words, and a cross-entropy of bf16 rows of 20000 logits that
 * runs by segments (gpt-tiny's vocabulary is shorter than a segment), Rope and RopeGrad at
 * partial rotary with tables per batch, and the cos and sin of angles in the thousands (a
 * Range times random frequencies: the reduction by pi/2 that the GPU must do to the host's
 * bits). Each group
 * that brings a kernel not seen before is one case, its launches in order (most groups have one
 * kernel; a cross-entropy has a second that reduces the rows, a norm with a CastTranspose one
 * that transposes the codes). Inputs are
 * drawn by tests/codegen/test_lower_groups.c's policy; the reference outputs come from the
 * group's members run one by one through the CPU reference kernels, the host JIT's from the CPU
 * backend's generated kernels (runtime/cpu/generated.h), which are held to the reference here
 * too, by the same rule, and the verdict written down. The kernels of the two models are named
 * <model>_<kernel> ("gpt_tiny_fp8_norm_0") so that one module holds both.
 *
 * Bench mode: gpt-1.3b (batch 8, seq 2048: the largest activation a group touches, 8x2048x8192
 * f32, is 512 MiB) with the default FP8 recipe; one case for each group that brings a kernel
 * not seen before, shapes only. Its inputs are hundreds of megabytes, more than a GPU run can
 * carry, so the GPU program draws them.
 *
 * Writes OUT_DIR/kernels.ptx, OUT_DIR/manifest.json and (check mode) OUT_DIR/cases.safetensors:
 * tensors "<model>.<group>.<value>" for the inputs and "<model>.<group>.<value>.reference" for
 * the outputs, named by the graph value a kernel parameter is bound to (the launches of one
 * group share them). The host JIT's outputs travel as a hash of their bytes in the manifest, not
 * as tensors: with them the cases would be 44 MB, and with the working tree more than the 64
 * MiB a GPU run can carry; the hash is enough to tell the GPU's outputs bit-identical or not.
 * manifest.json: {"format": "f8c kernel cases 2", "mode", "seed", "ptx", "data", "cases": [
 *   {"name": "<model>.<group>", "model", "group", "family", "members",
 *    "values": [{"name", "use": in|out|acc, "dtype", "dims", "count",
 *                in: "random": normal|scale|bool|label|id|expert|amax|moment|rate|step|
 *                    fraction;
 *                out and acc: "fp8_neighbour" (codes may be one apart), "rounded_twice"
 *                             (two bf16 ulps apart: case_compare.h), "column_sum" (within
 *                             its terms' magnitudes, tensor "...<value>.magnitude"),
 *                             "jit_matches_reference", "jit_hash" (f8_case_hash, 16 hex digits)}],
 *    "scratch": [{"dtype", "count"}], zeroed before the first launch,
 *    "error": what a nonzero scratch[error_scratch] (i64) means, or null, "error_scratch",
 *    "launches": [{"kernel", "geometry": {"threads_per_block", "rows_per_block",
 *                  "max_blocks", "shared_bytes"}, "grid_sizes": [param index, ...], "rows",
 *                  "params": [{"name", "kind": in|out|acc|size|table,
 *                              then "value" or "scratch" (an index) or "size" (the value)
 *                              or "table": {"columns": [in|out|size, ...], "rows": [[cell,
 *                              ...], ...]}: an in or out column's cell the index of a value
 *                              (its device address goes there) or null (0), a size
 *                              column's the constant}]}]}]}
 * An "acc" value is written only by atomics: zeroed before the first launch, not poisoned.
 *
 * Exit status 1 when the host JIT is outside the rule (the cases are written all the same), so
 * that the check mode doubles as a test of the tool and of the lowering on the host.
 *
 * usage: make_kernel_cases SOURCE_DIR OUT_DIR [--bench] [--seed N]
 */
#define _POSIX_C_SOURCE 200809L // rand_r

#include <jansson.h> // json_t, json_pack, json_dump_file
#include <math.h>    // sqrt, log, cos, exp, fabs, fmax, INFINITY, NAN
#include <stdio.h>   // printf, snprintf, fopen
#include <stdlib.h>  // rand_r, strtoul, exit
#include <string.h>  // strcmp, strlen
#include <time.h>    // time

#include "codegen/llvm_lower.h"     // f8_launch_geometry
#include "codegen/nvptx.h"          // f8_nvptx_compile
#include "codegen/program.h"        // f8_codegen_program_create, f8_codegen_group
#include "codegen/target.h"         // f8_codegen_target_table_for
#include "frontend/frontend.h"      // f8_frontend_load
#include "ir/alloc.h"               // f8_calloc, f8_realloc, f8_free
#include "ir/arena.h"               // f8_arena_strdup
#include "ir/text.h"                // f8_text_parse
#include "passes/pipeline.h"        // f8_pipeline_run, f8_pipeline_run_with
#include "passes/precision.h"       // f8_fp8_options_default
#include "passes/training.h"        // f8_training_options_default
#include "runtime/cpu/generated.h"  // f8_cpu_generated_create, f8_cpu_generated_run
#include "runtime/cpu/kernels.h"    // f8_cpu_kernel_get, f8_cpu_kernel_call
#include "runtime/safetensors.h"    // f8_safetensors_write
#include "runtime/tensor.h"         // f8_rt_tensor
#include "tests/codegen/case_compare.h" // f8_case_compare, f8_case_hash

static unsigned seed;

static double uniform(void) {
	return (rand_r(&seed) + 0.5) / ((double)RAND_MAX + 1.0);
}

static double normal(void) {
	return sqrt(-2.0 * log(uniform())) * cos(6.283185307179586 * uniform());
}

/* A compiled model: its graph, its program, and (check mode) the CPU backend's JIT of it. */
typedef struct model {
	const char *label;   // "gpt-tiny-fp8": the first part of case and tensor names
	const char *prefix;  // "gpt_tiny_fp8": kernel names start with it, "" for none
	bool text;           // a group of text IR, small: its optimizer's group is a case too
	bool moe_only;       // only its moe groups are cases (the rest are gpt-tiny's kinds, and
			     // their data would crowd what a GPU run carries)
	f8_graph *graph;
	f8_codegen_program *program;
	f8_cpu_generated *generated; // NULL in bench mode
} model;

/* The tensors to write: names and tensors, both owned here. */
typedef struct tensor_list {
	char **names;
	f8_rt_tensor **tensors;
	size_t n, capacity;
} tensor_list;

/* The graph values one case binds, in order of first binding, and how the group uses each. */
typedef struct case_values {
	f8_value_id *ids;  // (n)
	const char **use;  // (n) "in", "out" or "acc"
	uint32_t n;
} case_values;

static void fail(const char *what, const f8_diag *diag) {
	fprintf(stderr, "make_kernel_cases: %s: ", what);
	f8_diag_print(diag, stderr);
	exit(1);
}

static void *checked(void *pointer) {
	if (!pointer) {
		fprintf(stderr, "make_kernel_cases: out of memory\n");
		exit(1);
	}
	return pointer;
}

/* Adds `tensor` (taken over) as "<a>.<b>.<c><suffix>". */
static void list_add(tensor_list *list, const char *a, const char *b, const char *c,
		     const char *suffix, f8_rt_tensor *tensor) {
	if (list->n == list->capacity) {
		list->capacity = list->capacity ? 2 * list->capacity : 64;
		list->names = checked(f8_realloc(list->names, list->capacity * sizeof *list->names));
		list->tensors = checked(f8_realloc(list->tensors,
						   list->capacity * sizeof *list->tensors));
	}
	size_t length = strlen(a) + strlen(b) + strlen(c) + strlen(suffix) + 3;
	char *name = checked(f8_malloc(length));
	snprintf(name, length, "%s.%s.%s%s", a, b, c, suffix);
	list->names[list->n] = name;
	list->tensors[list->n++] = tensor;
}

static void list_free(tensor_list *list) {
	for (size_t i = 0; i < list->n; i++) {
		f8_free(list->names[i]);
		f8_rt_tensor_destroy(list->tensors[i]);
		f8_free(list->tensors[i]);
	}
	f8_free(list->names);
	f8_free(list->tensors);
}

/* The concrete dims of value `id` into dims (its rank returned); -1 when one does not
 * evaluate. */
static int value_dims(const f8_graph *graph, f8_value_id id, const int64_t *symbols,
		      int64_t *dims) {
	const f8_type *type = &graph->values[id].type;
	for (int d = 0; d < type->shape.rank; d++)
		if (!f8_dim_evaluate(type->shape.dims[d], symbols, &dims[d]))
			return -1;
	return type->shape.rank;
}

/* A new zeroed tensor of value `id`'s type, or NULL. */
static f8_rt_tensor *make_tensor(const f8_graph *graph, f8_value_id id, const int64_t *symbols) {
	int64_t dims[F8_MAX_RANK];
	int rank = value_dims(graph, id, symbols, dims);
	if (rank < 0)
		return NULL;
	f8_rt_tensor *tensor = checked(f8_calloc(1, sizeof *tensor));
	if (f8_rt_tensor_create(graph->values[id].type.dtype, rank, dims, tensor, NULL)) {
		f8_free(tensor);
		return NULL;
	}
	return tensor;
}

/* True when a member of `group` is a ScalingUpdate that reads `id` as one of its amaxes
 * (inputs 3 on). */
static bool read_as_amax(const f8_graph *graph, uint32_t group, f8_value_id id) {
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		for (uint32_t j = 3; node->group == group && node->op == F8_OP_SCALING_UPDATE &&
				     j < node->n_inputs; j++)
			if (node->inputs[j] == id)
				return true;
	}
	return false;
}

/* True when a member of `group` reads `id` as an Embedding's or EmbeddingGrad's ids. */
static bool read_as_ids(const f8_graph *graph, uint32_t group, f8_value_id id) {
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		if (node->group == group &&
		    ((node->op == F8_OP_EMBEDDING && node->inputs[0] == id) ||
		     (node->op == F8_OP_EMBEDDING_GRAD && node->inputs[1] == id)))
			return true;
	}
	return false;
}

/* The vocabulary of the member cross-entropy of `group` that reads `id` as its labels (its
 * logits' last dim, where that is a constant), else 50. */
static int64_t label_limit(const f8_graph *graph, uint32_t group, f8_value_id id) {
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		bool forward = node->op == F8_OP_CROSS_ENTROPY;
		if (node->group != group || (!forward && node->op != F8_OP_CROSS_ENTROPY_GRAD) ||
		    node->inputs[forward ? 1 : 2] != id)
			continue;
		const f8_shape *logits = &graph->values[node->inputs[forward ? 0 : 1]].type.shape;
		f8_dim vocab = logits->dims[logits->rank - 1];
		if (f8_dim_is_const(vocab))
			return f8_dim_value(vocab);
	}
	return 50;
}

/* The experts that a member MoE op of `group` reading `id` as its expert indices chooses from
 * (a RouterGrad's logits' columns, the experts attribute, else those of the Router that made
 * the indices, else 4), or 0 when none reads it so. */
static int64_t expert_limit(const f8_graph *graph, uint32_t group, f8_value_id id) {
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		int at = node->op == F8_OP_MOE_DISPATCH || node->op == F8_OP_MOE_DISPATCH_GRAD ? 1
			 : node->op == F8_OP_MOE_COMBINE ? 2
			 : node->op == F8_OP_MOE_COMBINE_GRAD || node->op == F8_OP_ROUTER_GRAD ? 3 : -1;
		if (node->group != group || at < 0 || node->inputs[at] != id)
			continue;
		if (node->op == F8_OP_ROUTER_GRAD)
			return f8_dim_value(graph->values[node->inputs[1]].type.shape.dims[1]);
		if (f8_node_attr_int(node, "experts", 0) > 0)
			return f8_node_attr_int(node, "experts", 0);
		f8_node_id router = graph->values[id].producer;
		if (router != F8_NONE && graph->nodes[router].op == F8_OP_ROUTER)
			return f8_dim_value(
				graph->values[graph->nodes[router].inputs[0]].type.shape.dims[1]);
		return 4;
	}
	return 0;
}

/* The input position at which a member AdamW of `group` reads `id`, or -1. */
static int adamw_input(const f8_graph *graph, uint32_t group, f8_value_id id) {
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		for (uint32_t j = 0; node->group == group && node->op == F8_OP_ADAMW &&
				     j < node->n_inputs; j++)
			if (node->inputs[j] == id)
				return (int)j;
	}
	return -1;
}

/* Whether a member LearningRate of `group` reads `id` (its iteration). */
static bool read_as_iteration(const f8_graph *graph, uint32_t group, f8_value_id id) {
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		if (node->group == group && node->op == F8_OP_LEARNING_RATE && node->inputs[0] == id)
			return true;
	}
	return false;
}

/* How an input is drawn (test_lower_groups.c's policy): AdamW's exp_avg_sq positive
 * ("moment"), its learning rate in (0, 0.01) ("rate"), its step and a LearningRate's iteration
 * from 1 to 3000 ("step": the reference refuses an iteration below 1), its
 * clipping factor in (0, 1] ("fraction"); scales and amax histories positive,
 * 0.25 to 8, as scaling tables hold; the amaxes a ScalingUpdate reads positive with now and
 * then a NaN, an infinity or a 0; an embedding's ids below 50 (every model here has more rows);
 * a MoE op's expert indices below its experts (expert_limit: "expert");
 * labels below `limit` (a cross-entropy's vocabulary: label_limit) with now and then
 * ignore_index (-100); booleans either way; the rest
 * normal with a spread of 1 to 41, so that casts both saturate and underflow. */
static const char *random_policy(const f8_graph *graph, uint32_t group, f8_value_id id) {
	const f8_value *value = &graph->values[id];
	static const char *const adamw[7] = {NULL, NULL, NULL, "moment", "rate", "step", "fraction"};
	int j = adamw_input(graph, group, id);
	if (j >= 0 && j < 7 && adamw[j])
		return adamw[j];
	if (value->role == F8_ROLE_SCALE || value->role == F8_ROLE_AMAX_HISTORY)
		return "scale";
	if (value->type.dtype == F8_DTYPE_BOOL)
		return "bool";
	if (value->type.dtype == F8_DTYPE_I64 && read_as_iteration(graph, group, id))
		return "step";
	if (expert_limit(graph, group, id) > 0)
		return "expert";
	if (value->type.dtype == F8_DTYPE_I64)
		return read_as_ids(graph, group, id) ? "id" : "label";
	if (read_as_amax(graph, group, id))
		return "amax";
	return "normal";
}

static void fill_random(const char *policy, int64_t limit, f8_rt_tensor *tensor) {
	int64_t n = f8_rt_tensor_numel(tensor);
	double spread = 1.0 + 40.0 * uniform();
	for (int64_t i = 0; i < n; i++) {
		double x, u = uniform();
		if (strcmp(policy, "scale") == 0)
			x = 0.25 + 7.75 * uniform();
		else if (strcmp(policy, "bool") == 0)
			x = u < 0.5;
		else if (strcmp(policy, "label") == 0)
			x = u < 0.1 ? -100 : (double)(int64_t)((double)limit * uniform());
		else if (strcmp(policy, "id") == 0)
			x = (double)(int)(50 * uniform());
		else if (strcmp(policy, "expert") == 0)
			x = (double)(int64_t)((double)limit * u);
		else if (strcmp(policy, "amax") == 0)
			x = u < 0.1 ? NAN : u < 0.15 ? INFINITY : u < 0.2 ? 0 : fabs(normal() * spread);
		else if (strcmp(policy, "moment") == 0)
			x = fabs(normal() * spread);
		else if (strcmp(policy, "rate") == 0)
			x = 0.01 * u;
		else if (strcmp(policy, "step") == 0)
			x = 1 + (double)(int)(3000 * u);
		else if (strcmp(policy, "fraction") == 0)
			x = u;
		else
			x = normal() * spread;
		f8_rt_tensor_set(tensor, i, x);
	}
}

/* A CrossEntropyGrad reads the lse its forward made from the same logits: random inputs keep
 * that contract, lse[r] = log(sum(exp(logits[r, :]))). */
static void make_lse_consistent(const f8_rt_tensor *logits, f8_rt_tensor *lse) {
	int64_t rows = f8_rt_tensor_numel(lse), vocab = logits->dims[logits->rank - 1];
	for (int64_t r = 0; r < rows; r++) {
		double top = -INFINITY, sum = 0;
		for (int64_t c = 0; c < vocab; c++)
			top = fmax(top, f8_rt_tensor_get(logits, r * vocab + c));
		for (int64_t c = 0; c < vocab; c++)
			sum += exp(f8_rt_tensor_get(logits, r * vocab + c) - top);
		f8_rt_tensor_set(lse, r, top + log(sum));
	}
}

/* A RouterGrad reads the indices its forward chose from the same logits (test_lower_groups.c
 * says why): each token's top_k experts by logit, the lower index first on a tie. */
static void make_indices_consistent(const f8_rt_tensor *logits, f8_rt_tensor *indices) {
	int64_t experts = logits->dims[1], top_k = indices->dims[1];
	for (int64_t t = 0; t < indices->dims[0]; t++)
		for (int64_t e = 0; e < experts; e++) {
			double mine = f8_rt_tensor_get(logits, t * experts + e);
			int64_t rank = 0;
			for (int64_t other = 0; other < experts; other++) {
				double theirs = f8_rt_tensor_get(logits, t * experts + other);
				rank += theirs > mine || (theirs == mine && other < e);
			}
			if (rank < top_k)
				f8_rt_tensor_set(indices, t * top_k + rank, (double)e);
		}
}

/* Draws every value the members of `group` read from outside it into inputs[] (by value id),
 * as test_lower_groups.c's check_group does. */
static void draw_inputs(const f8_graph *graph, uint32_t group, const int64_t *symbols,
			f8_rt_tensor **inputs) {
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		for (uint32_t j = 0; node->group == group && j < node->n_inputs; j++) {
			f8_value_id input = node->inputs[j];
			f8_node_id producer = input == F8_NONE ? F8_NONE : graph->values[input].producer;
			if (input == F8_NONE || inputs[input] ||
			    (producer != F8_NONE && graph->nodes[producer].group == group))
				continue;
			inputs[input] = checked(make_tensor(graph, input, symbols));
			const char *policy = random_policy(graph, group, input);
			fill_random(policy, strcmp(policy, "expert") == 0
					    ? expert_limit(graph, group, input)
					    : label_limit(graph, group, input), inputs[input]);
		}
	}
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		if (node->group == group && node->op == F8_OP_CROSS_ENTROPY_GRAD)
			make_lse_consistent(inputs[node->inputs[1]], inputs[node->inputs[3]]);
		if (node->group == group && node->op == F8_OP_ROUTER_GRAD)
			make_indices_consistent(inputs[node->inputs[1]], inputs[node->inputs[3]]);
	}
}

/* Runs the members of `group` through the reference kernels; their outputs into tensors[]
 * (by value id; the inputs already there). */
static f8_status run_reference(const f8_graph *graph, uint32_t group, const int64_t *symbols,
			       f8_rt_tensor **tensors, f8_diag *diag) {
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		if (node->group != group)
			continue;
		const f8_rt_tensor *inputs[256] = {0}; // a ScalingUpdate reads an amax per slot
		f8_rt_tensor outputs[8];
		if (node->n_inputs > 256 || node->n_outputs > 8)
			return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "a member with %u inputs and "
				"%u outputs", node->n_inputs, node->n_outputs);
		for (uint32_t j = 0; j < node->n_inputs; j++)
			inputs[j] = node->inputs[j] == F8_NONE ? NULL : tensors[node->inputs[j]];
		for (uint32_t o = 0; o < node->n_outputs; o++) {
			f8_rt_tensor *made = make_tensor(graph, node->outputs[o], symbols);
			if (!made)
				return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
			tensors[node->outputs[o]] = made;
			outputs[o] = *made;
		}
		f8_cpu_kernel_call call = {.graph = graph, .node = node, .symbol_values = symbols,
					   .inputs = inputs, .outputs = outputs};
		f8_status status = f8_cpu_kernel_get(node->op)(&call, diag);
		if (status)
			return status;
	}
	return F8_OK;
}

/* True when some member computes the value a cast member reads, so that its FP8 codes may
 * be one apart from the reference's (test_lower_groups.c's rule). */
static bool casts_computed_values(const f8_graph *graph, uint32_t group) {
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		if (node->group != group ||
		    (node->op != F8_OP_QUANTIZE && node->op != F8_OP_CAST_TRANSPOSE))
			continue;
		f8_node_id producer = graph->values[node->inputs[0]].producer;
		if (producer != F8_NONE && graph->nodes[producer].group == group)
			return true;
	}
	return false;
}

/* "LayerNorm, CastTranspose": the ops of the group's members in program order, each once with
 * its count where it is more than one ("AdamW x292, ConstantOfShape x292"). */
static json_t *members_text(const f8_graph *graph, uint32_t group) {
	enum { MAX_OPS = 32 };
	f8_op ops[MAX_OPS];
	uint32_t counts[MAX_OPS], n = 0;
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		if (node->group != group)
			continue;
		uint32_t k = 0;
		while (k < n && ops[k] != node->op)
			k++;
		if (k == n) {
			if (n == MAX_OPS)
				continue;
			ops[n] = node->op;
			counts[n++] = 0;
		}
		counts[k]++;
	}
	char text[512] = "";
	size_t used = 0;
	for (uint32_t k = 0; k < n && used < sizeof text; k++) {
		const char *name = f8_op_name(ops[k]), *comma = used ? ", " : "";
		used += (size_t)(counts[k] > 1
				 ? snprintf(text + used, sizeof text - used, "%s%s x%u", comma, name,
					    counts[k])
				 : snprintf(text + used, sizeof text - used, "%s%s", comma, name));
	}
	return json_string(text);
}

/* Adds value `id` to `v` (once), bound by a parameter or a table column of `kind`. */
static void bind_value(case_values *v, f8_value_id id, f8_kernel_param_kind kind) {
	uint32_t i = 0;
	while (i < v->n && v->ids[i] != id)
		i++;
	if (i == v->n) {
		v->ids[v->n] = id;
		v->use[v->n++] = "in";
	}
	if (kind == F8_KERNEL_PARAM_OUT)
		v->use[i] = "out";
	else if (kind == F8_KERNEL_PARAM_ACCUMULATE && strcmp(v->use[i], "out") != 0)
		v->use[i] = "acc";
}

/* The values the launches of group `g` bind, by their parameters or in their tables' cells,
 * each "out" when a launch writes it (OUT), "acc" when launches only combine into it
 * (ACCUMULATE), else "in". */
static case_values bound_values(const f8_codegen_program *program, uint32_t g, uint32_t n_values) {
	const f8_codegen_group *group = &program->groups[g];
	case_values v = {.ids = checked(f8_calloc(n_values + 1, sizeof *v.ids)),
			 .use = checked(f8_calloc(n_values + 1, sizeof *v.use))};
	for (uint32_t l = 0; l < group->n_launches; l++) {
		const f8_kernel *kernel = program->kernels[group->launches[l].kernel];
		for (uint32_t p = 0; p < kernel->n_params; p++) {
			const f8_kernel_arg *arg = &group->launches[l].args[p];
			f8_kernel_param_kind kind = kernel->params[p].kind;
			const f8_kernel_table *table = arg->table;
			for (size_t c = 0; table && c < (size_t)table->n_rows * table->n_columns; c++)
				if (table->cells[c].value != F8_NONE)
					bind_value(&v, table->cells[c].value,
						   table->columns[c % table->n_columns]);
			if (kind != F8_KERNEL_PARAM_SIZE && arg->value != F8_NONE)
				bind_value(&v, arg->value, kind);
		}
	}
	return v;
}

/* A table's manifest entry: {"columns": [kind...], "rows": [[cell...]...]}, a cell of an in
 * or out column the index of its value in `v` or null (no buffer: the address 0), of a size
 * column the constant. */
static json_t *table_json(const f8_kernel_table *table, const case_values *v) {
	json_t *columns = json_array(), *rows = json_array();
	for (uint32_t c = 0; c < table->n_columns; c++)
		json_array_append_new(columns, json_string(f8_kernel_param_kind_name(table->columns[c])));
	for (uint32_t r = 0; r < table->n_rows; r++) {
		json_t *row = json_array();
		for (uint32_t c = 0; c < table->n_columns; c++) {
			const f8_kernel_table_cell *cell = &table->cells[(size_t)r * table->n_columns + c];
			uint32_t i = 0;
			while (cell->value != F8_NONE && v->ids[i] != cell->value)
				i++;
			json_array_append_new(row, cell->value != F8_NONE ? json_integer(i)
					      : table->columns[c] == F8_KERNEL_PARAM_SIZE
						      ? json_integer(cell->constant)
						      : json_null());
		}
		json_array_append_new(rows, row);
	}
	return json_pack("{s:o, s:o}", "columns", columns, "rows", rows);
}

static json_t *geometry_json(const f8_launch_geometry *geometry) {
	return json_pack("{s:I, s:I, s:I, s:I}", "threads_per_block",
			 (json_int_t)geometry->threads_per_block, "rows_per_block",
			 (json_int_t)geometry->rows_per_block, "max_blocks",
			 (json_int_t)geometry->max_blocks, "shared_bytes",
			 (json_int_t)geometry->shared_bytes);
}

/* The manifest's "launches" of group `g` (kernel k's geometry at geometry[k]); its values are
 * referred to by their index in `v`. */
static json_t *launches_json(const f8_codegen_program *program, uint32_t g, const case_values *v,
			     const f8_launch_geometry *geometry, const char *case_name) {
	const int64_t symbols[64] = {0}; // the models' dims are bound: no symbol is left
	const f8_codegen_group *group = &program->groups[g];
	json_t *launches = json_array();
	for (uint32_t l = 0; l < group->n_launches; l++) {
		const f8_codegen_launch *launch = &group->launches[l];
		const f8_kernel *kernel = program->kernels[launch->kernel];
		json_t *params = json_array(), *grid_sizes = json_array();
		int64_t rows = 1;
		for (uint32_t p = 0; p < kernel->n_params; p++) {
			const f8_kir_param *param = &kernel->params[p];
			const f8_kernel_arg *arg = &launch->args[p];
			json_t *entry = json_pack("{s:s, s:s}", "name", param->name, "kind",
						  f8_kernel_param_kind_name(param->kind));
			int64_t size = 0;
			if (param->kind == F8_KERNEL_PARAM_SIZE) {
				if (!f8_dim_evaluate(arg->dim, symbols, &size)) {
					fprintf(stderr, "make_kernel_cases: %s: size %s does not "
						"evaluate\n", case_name, param->name);
					exit(1);
				}
				json_object_set_new(entry, "size", json_integer(size));
			} else if (param->kind == F8_KERNEL_PARAM_TABLE) {
				json_object_set_new(entry, "table", table_json(arg->table, v));
			} else if (arg->value != F8_NONE) {
				uint32_t i = 0;
				while (v->ids[i] != arg->value)
					i++;
				json_object_set_new(entry, "value", json_integer(i));
			} else {
				json_object_set_new(entry, "scratch", json_integer(arg->scratch));
			}
			json_array_append_new(params, entry);
			for (uint32_t s = 0; s < kernel->n_grid_sizes; s++)
				if (kernel->grid_sizes[s] == p)
					rows *= size;
		}
		for (uint32_t s = 0; s < kernel->n_grid_sizes; s++)
			json_array_append_new(grid_sizes, json_integer(kernel->grid_sizes[s]));
		json_array_append_new(launches, json_pack("{s:s, s:o, s:o, s:I, s:o}", "kernel",
							  kernel->name, "geometry",
							  geometry_json(&geometry[launch->kernel]),
							  "grid_sizes", grid_sizes, "rows",
							  (json_int_t)rows, "params", params));
	}
	return launches;
}

static json_t *scratch_json(const f8_codegen_group *group, const char *case_name) {
	const int64_t symbols[64] = {0};
	json_t *scratch = json_array();
	for (uint32_t i = 0; i < group->n_scratch; i++) {
		int64_t count;
		if (!f8_dim_evaluate(group->scratch[i].count, symbols, &count)) {
			fprintf(stderr, "make_kernel_cases: %s: a scratch size does not evaluate\n",
				case_name);
			exit(1);
		}
		json_array_append_new(scratch, json_pack("{s:s, s:I}", "dtype",
							 f8_dtype_name(group->scratch[i].dtype),
							 "count", (json_int_t)count));
	}
	return scratch;
}

/*
 * Check mode's data of case `case_name` (group `g` of `m`): draws its inputs, runs the host
 * JIT (the CPU backend's generated kernels) and the reference, adds the inputs the launches
 * bind and the reference's outputs to `list`, and writes the JIT's verdict and hash into each
 * output's manifest entry (values[i]). *jit_ok turns false when a JIT output is outside the
 * rule.
 */
static void run_case(const model *m, uint32_t g, const case_values *v, json_t *values,
		     const char *case_name, tensor_list *list, bool *jit_ok) {
	const f8_graph *graph = m->graph;
	const int64_t symbols[64] = {0};
	const char *group_name = graph->groups[g].name;
	f8_rt_tensor **reference = checked(f8_calloc(graph->n_values, sizeof *reference));
	f8_rt_tensor *jit = checked(f8_calloc(graph->n_values, sizeof *jit)); // views, and outputs
	draw_inputs(graph, g, symbols, reference);
	for (uint32_t id = 0; id < graph->n_values; id++)
		if (reference[id]) {
			jit[id] = *reference[id];
			jit[id].owned = false;
		}
	for (uint32_t i = 0; i < v->n; i++)
		if (strcmp(v->use[i], "in") != 0) {
			f8_rt_tensor *made = checked(make_tensor(graph, v->ids[i], symbols));
			jit[v->ids[i]] = *made;
			f8_free(made);
		} else if (!reference[v->ids[i]]) {
			fprintf(stderr, "make_kernel_cases: %s: %%%s is bound but neither read from "
				"outside the group nor written\n", case_name,
				graph->values[v->ids[i]].name);
			exit(1);
		}
	f8_diag diag = {0};
	if (f8_cpu_generated_run_tensors(m->generated, g, jit, symbols, &diag))
		fail(case_name, &diag);
	if (run_reference(graph, g, symbols, reference, &diag))
		fail(case_name, &diag);
	bool neighbour = casts_computed_values(graph, g);
	// The column sums' magnitudes (case_compare.h), from the inputs before they move to `list`.
	f8_rt_tensor **magnitude = checked(f8_calloc(v->n ? v->n : 1, sizeof *magnitude));
	for (uint32_t i = 0; i < v->n; i++)
		if (strcmp(v->use[i], "in") != 0 && case_is_column_sum(graph, v->ids[i])) {
			magnitude[i] = checked(f8_calloc(1, sizeof *magnitude[i]));
			if (f8_case_column_magnitude(graph, v->ids[i],
						     (const f8_rt_tensor *const *)reference,
						     magnitude[i], &diag))
				fail(case_name, &diag);
		}
	for (uint32_t i = 0; i < v->n; i++) {
		f8_value_id id = v->ids[i];
		const char *name = graph->values[id].name;
		json_t *entry = json_array_get(values, i);
		if (strcmp(v->use[i], "in") == 0) {
			list_add(list, m->label, group_name, name, "", reference[id]);
			reference[id] = NULL;
			continue;
		}
		case_comparison result;
		f8_case_compare(reference[id], jit[id].data, neighbour, case_rounded_twice(graph, id),
				magnitude[i], &result);
		char hash[32];
		snprintf(hash, sizeof hash, "%016llx",
			 (unsigned long long)f8_case_hash(jit[id].data, jit[id].n_bytes));
		json_object_set_new(entry, "jit_matches_reference", json_boolean(result.bad == 0));
		json_object_set_new(entry, "jit_hash", json_string(hash));
		if (result.bad) {
			*jit_ok = false;
			printf("  %s: JIT %%%s: %lld of %lld elements differ; first at %lld: reference "
			       "%.9g, JIT %.9g\n", case_name, name, (long long)result.bad,
			       (long long)result.count, (long long)result.first, result.want,
			       result.got);
		}
		list_add(list, m->label, group_name, name, ".reference", reference[id]);
		reference[id] = NULL;
		if (magnitude[i]) // the list owns it from here
			list_add(list, m->label, group_name, name, ".magnitude", magnitude[i]);
		f8_rt_tensor_destroy(&jit[id]);
	}
	f8_free(magnitude);
	for (uint32_t id = 0; id < graph->n_values; id++) // unbound inputs, members' inner values
		if (reference[id]) {
			f8_rt_tensor_destroy(reference[id]);
			f8_free(reference[id]);
		}
	f8_free(reference);
	f8_free(jit);
}

/* The manifest entry of group `g` of `m` (kernel k's geometry at geometry[k]); in check mode
 * (`list` not NULL) with its data, as run_case says. */
static json_t *make_case(const model *m, uint32_t g, const f8_launch_geometry *geometry,
			 tensor_list *list, bool *jit_ok) {
	const f8_graph *graph = m->graph;
	const f8_codegen_group *group = &m->program->groups[g];
	const int64_t symbols[64] = {0};
	char case_name[256];
	snprintf(case_name, sizeof case_name, "%s.%s", m->label, graph->groups[g].name);
	case_values v = bound_values(m->program, g, graph->n_values);
	bool neighbour = casts_computed_values(graph, g);
	json_t *values = json_array();
	for (uint32_t i = 0; i < v.n; i++) {
		f8_value_id id = v.ids[i];
		f8_dtype dtype = graph->values[id].type.dtype;
		int64_t dims[F8_MAX_RANK], count = 1;
		int rank = value_dims(graph, id, symbols, dims);
		json_t *dims_json = json_array();
		for (int d = 0; d < rank; d++) {
			json_array_append_new(dims_json, json_integer(dims[d]));
			count *= dims[d];
		}
		json_t *entry = json_pack("{s:s, s:s, s:s, s:o, s:I}", "name",
					  graph->values[id].name, "use", v.use[i], "dtype",
					  f8_dtype_name(dtype), "dims", dims_json, "count",
					  (json_int_t)count);
		if (strcmp(v.use[i], "in") == 0)
			json_object_set_new(entry, "random",
					    json_string(random_policy(graph, g, id)));
		else if (f8_dtype_is_fp8(dtype) && dtype != F8_DTYPE_E8M0)
			json_object_set_new(entry, "fp8_neighbour", json_boolean(neighbour));
		else if (case_rounded_twice(graph, id))
			json_object_set_new(entry, "rounded_twice", json_true());
		if (strcmp(v.use[i], "in") != 0 && case_is_column_sum(graph, id))
			json_object_set_new(entry, "column_sum", json_true()); // with NAME.magnitude
		json_array_append_new(values, entry);
	}
	if (list)
		run_case(m, g, &v, values, case_name, list, jit_ok);
	json_t *entry = json_pack("{s:s, s:s, s:s, s:s, s:o, s:o, s:o, s:s?, s:I, s:o}", "name",
				  case_name, "model", m->label, "group", graph->groups[g].name,
				  "family", f8_kernel_family_name(graph->groups[g].family),
				  "members", members_text(graph, g), "values", values, "scratch",
				  scratch_json(group, case_name), "error", group->error,
				  "error_scratch",
				  (json_int_t)(group->error ? group->error_scratch : 0), "launches",
				  launches_json(m->program, g, &v, geometry, case_name));
	f8_free(v.ids);
	f8_free(v.use);
	return entry;
}

/* Groups of text IR at odd shapes (the header says why), each made one group of its family. */
static const struct odd_group {
	const char *label, *prefix;
	f8_kernel_family family;
	const char *text;
} odd_groups[] = {
	{"odd-cast", "odd_cast", F8_KERNEL_FAMILY_CAST,
	 "graph odd_cast {\n"
	 "  input %x : f32[37, 70]\n"
	 "  scale %table : f32[4]\n"
	 "  %x8, %x8t, %si, %sit, %amax = CastTranspose(%x, %table) {to=e4m3, slot=3}\n"
	 "  output %x8, %x8t, %si, %sit, %amax\n"
	 "}\n"},
	{"odd-gelu-grad", "odd_gelu_grad", F8_KERNEL_FAMILY_ACTIVATION_GRAD,
	 "graph odd_gelu_grad {\n"
	 "  input %dy : f32[3, 37, 200]\n"
	 "  input %h : f32[3, 37, 200]\n"
	 "  scale %table : f32[2]\n"
	 "  %dh = GeluGrad(%dy, %h) {approximate=\"tanh\"}\n"
	 "  %dh8, %dh8t, %si, %sit, %amax = CastTranspose(%dh, %table) {to=e5m2, slot=1}\n"
	 "  %dbias = ReduceSum(%dh) {axes=[0, 1], keepdims=0}\n"
	 "  output %dh8, %dh8t, %si, %sit, %amax, %dbias\n"
	 "}\n"},
	{"odd-norm", "odd_norm", F8_KERNEL_FAMILY_NORM,
	 "graph odd_norm {\n"
	 "  input %x : bf16[2, 37, 264]\n"
	 "  input %gamma : bf16[264]\n"
	 "  input %beta : bf16[264]\n"
	 "  scale %table : f32[3]\n"
	 "  %n, %mean, %rstd = LayerNorm(%x, %gamma, %beta) {epsilon=1e-05}\n"
	 "  %n8, %n8t, %si, %sit, %amax = CastTranspose(%n, %table) {to=e4m3, slot=2}\n"
	 "  output %n, %n8, %n8t, %si, %sit, %amax, %mean, %rstd\n"
	 "}\n"},
	{"odd-broadcast", "odd_broadcast", F8_KERNEL_FAMILY_ELEMENTWISE,
	 "graph odd_broadcast {\n"
	 "  input %x : f32[3, 37, 301]\n"
	 "  input %pos : f32[37, 301]\n"
	 "  input %bias : f32[301]\n"
	 "  %a = Add(%x, %pos)\n"
	 "  %y = Add(%a, %bias)\n"
	 "  %c = Cast(%y) {to=bf16}\n"
	 "  output %c\n"
	 "}\n"},
	{"odd-adamw", "odd_adamw", F8_KERNEL_FAMILY_OPTIMIZER,
	 "graph odd_adamw {\n"
	 "  param %w : f32[37, 70]\n"
	 "  param %b : bf16[301]\n"
	 "  param %e : f32[5000]\n"
	 "  state %w.grad : f32[37, 70]\n"
	 "  state %b.grad : bf16[301]\n"
	 "  state %e.grad : f32[5000]\n"
	 "  state %w.m : f32[37, 70]\n"
	 "  state %w.v : f32[37, 70]\n"
	 "  state %b.m : f32[301]\n"
	 "  state %b.v : f32[301]\n"
	 "  state %e.m : f32[5000]\n"
	 "  state %e.v : f32[5000]\n"
	 "  input %lr : f32[]\n"
	 "  input %step : i64[]\n"
	 "  input %clip : f32[]\n"
	 "  %w2, %wm2, %wv2 = AdamW(%w, %w.grad, %w.m, %w.v, %lr, %step, %clip) "
	 "{weight_decay=0.1}\n"
	 "  %w.zero = ConstantOfShape() {shape=[37, 70], value=f32[](0)}\n"
	 "  %b2, %bm2, %bv2 = AdamW(%b, %b.grad, %b.m, %b.v, %lr, %step, %clip) "
	 "{weight_decay=0}\n"
	 "  %b.zero = ConstantOfShape() {shape=[301], value=bf16[](0)}\n"
	 "  %e2, %em2, %ev2 = AdamW(%e, %e.grad, %e.m, %e.v, %lr, %step, %clip) "
	 "{weight_decay=0.01}\n"
	 "  %e.zero = ConstantOfShape() {shape=[5000], value=f32[](0)}\n"
	 "  output %w2, %wm2, %wv2, %b2, %bm2, %bv2, %e2, %em2, %ev2\n"
	 "  update %w.grad <- %w.zero\n"
	 "  update %b.grad <- %b.zero\n"
	 "  update %e.grad <- %e.zero\n"
	 "}\n"},
	{"odd-norm-words", "odd_norm_words", F8_KERNEL_FAMILY_NORM, // codes transposed as words
	 "graph odd_norm_words {\n"
	 "  input %x : f32[3, 44, 200]\n"
	 "  input %gamma : f32[200]\n"
	 "  input %beta : f32[200]\n"
	 "  scale %table : f32[3]\n"
	 "  %n, %mean, %rstd = LayerNorm(%x, %gamma, %beta) {epsilon=1e-05}\n"
	 "  %n8, %n8t, %si, %sit, %amax = CastTranspose(%n, %table) {to=e4m3, slot=2}\n"
	 "  output %n8, %n8t, %si, %sit, %amax, %mean, %rstd\n"
	 "}\n"},
	{"odd-cross-entropy", "odd_cross_entropy", F8_KERNEL_FAMILY_CROSS_ENTROPY, // segments
	 "graph odd_cross_entropy {\n"
	 "  input %logits : bf16[37, 20000]\n"
	 "  input %labels : i64[37]\n"
	 "  %loss, %lse = CrossEntropy(%logits, %labels) {ignore_index=-100, reduction=\"none\"}\n"
	 "  output %loss, %lse\n"
	 "}\n"},
	{"odd-gelu", "odd_gelu", F8_KERNEL_FAMILY_ACTIVATION,
	 "graph odd_gelu {\n"
	 "  input %h : bf16[45, 130]\n"
	 "  scale %table : f32[2]\n"
	 "  %a = Gelu(%h) {approximate=\"tanh\"}\n"
	 "  %a8, %a8t, %si, %sit, %amax = CastTranspose(%a, %table) {to=e4m3, slot=0}\n"
	 "  output %a, %a8, %a8t, %si, %sit, %amax\n"
	 "}\n"},
	{"odd-rope", "odd_rope", F8_KERNEL_FAMILY_ROPE, // partial, interleaved, tables per batch
	 "graph odd_rope {\n"
	 "  input %x : bf16[2, 3, 37, 40]\n"
	 "  input %cos : f32[2, 1, 37, 24]\n"
	 "  input %sin : f32[2, 1, 37, 24]\n"
	 "  %y = Rope(%x, %cos, %sin) {interleaved=1}\n"
	 "  output %y\n"
	 "}\n"},
	{"odd-rope-grad", "odd_rope_grad", F8_KERNEL_FAMILY_ROPE,
	 "graph odd_rope_grad {\n"
	 "  input %dy : f32[3, 5, 37, 40]\n"
	 "  input %cos : f32[37, 40]\n"
	 "  input %sin : f32[37, 40]\n"
	 "  %dx = RopeGrad(%dy, %cos, %sin)\n"
	 "  output %dx\n"
	 "}\n"},
	{"odd-rope-angles", "odd_rope_angles", F8_KERNEL_FAMILY_ELEMENTWISE, // cos, sin of 10^4
	 "graph odd_rope_angles {\n"
	 "  input %frequency : f32[4099]\n"
	 "  %position = Range() {limit=4099, dtype=f32}\n"
	 "  %angle = Mul(%position, %frequency)\n"
	 "  %cos = Cos(%angle)\n"
	 "  %sin = Sin(%angle)\n"
	 "  output %cos, %sin\n"
	 "}\n"},
};
enum { N_ODD_GROUPS = sizeof odd_groups / sizeof *odd_groups };

/* Renames the kernels of `m` PREFIX_NAME, so that one module holds every model's. */
static void name_kernels(model *m) {
	for (uint32_t k = 0; m->prefix[0] && k < m->program->n_kernels; k++) {
		f8_kernel *kernel = m->program->kernels[k];
		char name[256];
		snprintf(name, sizeof name, "%s_%s", m->prefix, kernel->name);
		kernel->name = checked(f8_arena_strdup(kernel->arena, name));
	}
	printf("%s: %u groups, %u distinct kernels\n", m->label, m->graph->n_groups,
	       m->program->n_kernels);
}

/* Loads `path` with the given dims, compiles it for training (with `fp8`, or none) through
 * the whole pipeline and makes its program, the kernels renamed PREFIX_NAME; in check mode
 * also the CPU backend's generated kernels. */
static void compile_model(model *m, const char *path, const f8_dim_binding *dims, uint32_t n_dims,
			  const f8_fp8_options *fp8, bool check) {
	f8_frontend_options options = {.dims = dims, .n_dims = n_dims, .seed = 1};
	f8_training_options training = f8_training_options_default();
	f8_pipeline_options compile_options = {.training = &training, .fp8 = fp8,
					       .target = f8_codegen_target_table_for(fp8)};
	f8_diag diag = {0};
	if (f8_frontend_load(path, &options, &m->graph, &diag) ||
	    f8_pipeline_run_with(m->graph, NULL, true, &compile_options, NULL, &diag) ||
	    f8_codegen_program_create(m->graph, &m->program, &diag) ||
	    (check && f8_cpu_generated_create(m->graph, NULL, &m->generated, &diag)))
		fail(m->label, &diag);
	name_kernels(m);
}

/* Parses odd group `odd` (text IR), makes all its nodes one group and compiles it as check
 * mode's models are (its kernels renamed PREFIX_NAME). */
static void compile_text(model *m, const struct odd_group *odd) {
	*m = (model){.label = odd->label, .prefix = odd->prefix, .text = true};
	f8_diag diag = {0};
	uint32_t group;
	if (f8_text_parse(odd->text, strlen(odd->text), odd->label, &m->graph, &diag) ||
	    f8_pipeline_run(m->graph, "canonicalize", true, &diag) ||
	    f8_graph_add_group(m->graph, "k0", odd->family, "the whole graph", &group, &diag))
		fail(m->label, &diag);
	for (uint32_t i = 0; i < m->graph->n_order; i++)
		m->graph->nodes[m->graph->order[i]].group = group;
	if (f8_codegen_program_create(m->graph, &m->program, &diag) ||
	    f8_cpu_generated_create(m->graph, NULL, &m->generated, &diag))
		fail(m->label, &diag);
	name_kernels(m);
}

static void write_text(const char *path, const char *text) {
	FILE *file = fopen(path, "wb");
	if (!file || fputs(text, file) == EOF || fclose(file) != 0) {
		fprintf(stderr, "make_kernel_cases: cannot write %s\n", path);
		exit(1);
	}
}

/* Compiles every model's kernels into one PTX module (OUT_DIR/kernels.ptx); the geometry of
 * each into *geometry, by the concatenated kernel index. */
static void compile_ptx(const model *models, int n_models, const char *out_dir,
			f8_launch_geometry **geometry) {
	uint32_t n = 0;
	for (int i = 0; i < n_models; i++)
		n += models[i].program->n_kernels;
	const f8_kernel **kernels = checked(f8_calloc(n + 1, sizeof *kernels));
	*geometry = checked(f8_calloc(n + 1, sizeof **geometry));
	n = 0;
	for (int i = 0; i < n_models; i++)
		for (uint32_t k = 0; k < models[i].program->n_kernels; k++)
			kernels[n++] = models[i].program->kernels[k];
	char *ptx = NULL;
	f8_diag diag = {0};
	if (f8_nvptx_compile(kernels, n, NULL, &ptx, *geometry, &diag))
		fail("PTX", &diag);
	char path[1024];
	snprintf(path, sizeof path, "%s/kernels.ptx", out_dir);
	write_text(path, ptx);
	printf("%s: %u kernels, %zu bytes of PTX\n", path, n, strlen(ptx));
	f8_free(ptx);
	f8_free(kernels);
}

/* gpt-odd: shapes that end tiles part-way and leave rows unaligned (the header says which). */
static const char odd_model[] =
	"{\"comment\": \"make_kernel_cases's odd shapes\", \"arch\": \"gpt\", \"vocab\": 97, "
	"\"seq\": 40, \"layers\": 1, \"hidden\": 272, \"heads\": 4, \"ffn\": 1088}\n";

/* Check mode leaves out the models' optimizer groups: their inputs and references are every
 * parameter and moment of the model four times over (27 MB for gpt-tiny), more than a GPU run
 * carries with the rest. The text group odd-adamw checks the optimizer's kernel instead. */
static bool optimizer(const f8_graph *graph, uint32_t g) {
	return graph->groups[g].family == F8_KERNEL_FAMILY_OPTIMIZER;
}

/* True when group `g` launches a kernel that no earlier group launches: the cases are these
 * groups, one for each kernel. */
static bool brings_new_kernel(const f8_codegen_program *program, uint32_t g, bool *seen) {
	bool fresh = false;
	for (uint32_t l = 0; l < program->groups[g].n_launches; l++) {
		uint32_t k = program->groups[g].launches[l].kernel;
		fresh |= !seen[k];
		seen[k] = true;
	}
	return fresh;
}

/* Bench mode: true when group `g` runs its first kernel on a shape (its first input's dims)
 * that no earlier group ran it on (`seen`: the signatures so far, n of them), so that the
 * weight casts of every matrix shape are timed, each with the kernel they share. */
static bool brings_new_shape(const model *m, uint32_t g, char (*seen)[96], uint32_t *n) {
	const f8_codegen_group *group = &m->program->groups[g];
	const int64_t symbols[64] = {0};
	char signature[96];
	int used = snprintf(signature, sizeof signature, "%u:", group->launches[0].kernel);
	for (uint32_t i = 0; i < m->graph->n_order; i++) {
		const f8_node *node = &m->graph->nodes[m->graph->order[i]];
		if (node->group != g || !node->n_inputs || node->inputs[0] == F8_NONE)
			continue;
		int64_t dims[F8_MAX_RANK];
		int rank = value_dims(m->graph, node->inputs[0], symbols, dims);
		for (int d = 0; d < rank && used < (int)sizeof signature - 24; d++)
			used += snprintf(signature + used, sizeof signature - (size_t)used, "%lldx",
					 (long long)dims[d]);
		break;
	}
	for (uint32_t i = 0; i < *n; i++)
		if (strcmp(seen[i], signature) == 0)
			return false;
	snprintf(seen[(*n)++], sizeof *seen, "%s", signature);
	return true;
}

int main(int argc, char **argv) {
	const char *source_dir = NULL, *out_dir = NULL;
	bool bench = false, usage = false;
	seed = (unsigned)time(NULL);
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--bench") == 0)
			bench = true;
		else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
			seed = (unsigned)strtoul(argv[++i], NULL, 10);
		else if (!source_dir)
			source_dir = argv[i];
		else if (!out_dir)
			out_dir = argv[i];
		else
			usage = true;
	}
	if (usage || !source_dir || !out_dir) {
		fprintf(stderr, "usage: make_kernel_cases SOURCE_DIR OUT_DIR [--bench] [--seed N]\n");
		return 2;
	}
	printf("seed %u\n", seed);
	char path[1024];
	f8_fp8_options fp8 = f8_fp8_options_default();
	model models[4 + N_ODD_GROUPS] = {{0}};
	int n_models;
	if (bench) {
		const f8_dim_binding dims[] = {{"batch", 8}, {"seq", 2048}};
		models[0] = (model){.label = "gpt-1.3b-fp8", .prefix = ""};
		snprintf(path, sizeof path, "%s/models/gpt-1.3b.json", source_dir);
		compile_model(&models[0], path, dims, 2, &fp8, false);
		n_models = 1;
	} else {
		const f8_dim_binding dims[] = {{"batch", 2}, {"seq", 24}};
		models[0] = (model){.label = "gpt-tiny", .prefix = "gpt_tiny"};
		models[1] = (model){.label = "gpt-tiny-fp8", .prefix = "gpt_tiny_fp8"};
		snprintf(path, sizeof path, "%s/models/gpt-tiny.json", source_dir);
		compile_model(&models[0], path, dims, 2, NULL, true);
		compile_model(&models[1], path, dims, 2, &fp8, true);
		const f8_dim_binding odd_dims[] = {{"batch", 2}, {"seq", 40}};
		models[2] = (model){.label = "gpt-odd-fp8", .prefix = "gpt_odd_fp8"};
		snprintf(path, sizeof path, "%s/gpt-odd.json", out_dir);
		write_text(path, odd_model);
		compile_model(&models[2], path, odd_dims, 2, &fp8, true);
		models[3] = (model){.label = "mixtral-tiny", .prefix = "mixtral_tiny",
				    .moe_only = true};
		snprintf(path, sizeof path, "%s/models/mixtral-tiny.json", source_dir);
		compile_model(&models[3], path, dims, 2, NULL, true);
		n_models = 4;
		for (int i = 0; i < N_ODD_GROUPS; i++)
			compile_text(&models[n_models++], &odd_groups[i]);
	}
	f8_launch_geometry *geometry = NULL;
	compile_ptx(models, n_models, out_dir, &geometry);

	json_t *cases = json_array();
	tensor_list list = {0};
	bool jit_ok = true;
	uint32_t kernel_base = 0;
	for (int i = 0; i < n_models; i++) {
		const f8_codegen_program *program = models[i].program;
		bool *seen = checked(f8_calloc(program->n_kernels + 1, sizeof *seen));
		char (*shapes)[96] = checked(f8_calloc(program->n_groups + 1, sizeof *shapes));
		uint32_t n_shapes = 0;
		for (uint32_t g = 0; g < program->n_groups; g++) {
			bool fresh = brings_new_kernel(program, g, seen);
			fresh |= bench && brings_new_shape(&models[i], g, shapes, &n_shapes);
			if (models[i].moe_only &&
			    models[i].graph->groups[g].family != F8_KERNEL_FAMILY_MOE)
				continue;
			if (fresh && (bench || models[i].text || !optimizer(models[i].graph, g)))
				json_array_append_new(cases, make_case(&models[i], g,
								       geometry + kernel_base,
								       bench ? NULL : &list, &jit_ok));
		}
		kernel_base += program->n_kernels;
		f8_free(seen);
		f8_free(shapes);
	}
	json_t *manifest = json_pack("{s:s, s:s, s:I, s:s, s:s?, s:o}", "format",
				     "f8c kernel cases 2", "mode", bench ? "bench" : "check",
				     "seed", (json_int_t)seed, "ptx", "kernels.ptx", "data",
				     bench ? NULL : "cases.safetensors", "cases", cases);
	snprintf(path, sizeof path, "%s/manifest.json", out_dir);
	if (!manifest || json_dump_file(manifest, path, JSON_INDENT(1) | JSON_PRESERVE_ORDER)) {
		fprintf(stderr, "make_kernel_cases: cannot write %s\n", path);
		return 1;
	}
	printf("%s: %zu cases\n", path, json_array_size(cases));
	if (!bench) {
		snprintf(path, sizeof path, "%s/cases.safetensors", out_dir);
		f8_diag diag = {0};
		if (f8_safetensors_write(path, (const char *const *)list.names,
					 (const f8_rt_tensor *const *)list.tensors, list.n, NULL, NULL,
					 0, &diag))
			fail(path, &diag);
		printf("%s: %zu tensors\n", path, list.n);
		printf("the host JIT %s\n", jit_ok ? "matches the reference"
						   : "does NOT match the reference (see above)");
	}
	json_decref(manifest);
	list_free(&list);
	f8_free(geometry);
	for (int i = 0; i < n_models; i++) {
		f8_cpu_generated_destroy(models[i].generated);
		f8_codegen_program_destroy(models[i].program);
		f8_graph_destroy(models[i].graph);
	}
	return jit_ok ? 0 : 1;
}
