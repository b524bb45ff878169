/*
 * Every fusion group's generated kernels against the unfused reference: the groups are lowered
 * to kernel IR (codegen/lower.h), compiled for the host by ORC JIT and run as the CPU backend
 * runs them (runtime/cpu/generated.h) on fresh random inputs; its members run one by one
 * through the CPU reference kernels on the same inputs; each output the kernel writes is
 * compared (f32 arithmetic against the reference's double: the tolerances are
 * tests/codegen/case_compare.h's), amaxes and scale_invs exactly where the values are read from
 * memory. Groups come from small text graphs
 * (each made one group by hand) and from the training steps of gpt-tiny (without FP8, with
 * delayed and with current scaling), llama-tiny (delayed, and block scaling) and mixtral-tiny
 * (the MoE ops) compiled through the whole pipeline, and all three under --bf16 (gpt-tiny
 * with delayed FP8 too). The vocabulary-parallel ops (Embedding and EmbeddingGrad of a shard,
 * CrossEntropyShard, CrossEntropyMerge and their gradients) from text graphs, each several
 * times with fresh starts, and their data errors. AdamW
 * is also checked bit for bit over many steps. The shard pass's NanToInf of an amax, in the kernel
 * that computes the amax, with and without a NaN in the inputs.
 *
 * usage: test_lower_groups SOURCE_DIR
 */
#define _POSIX_C_SOURCE 200809L // rand_r

#include <math.h>   // fabs, isnan, nextafterf
#include <stdarg.h> // va_list (adamw_many_text)
#include <stdio.h>  // printf, snprintf
#include <stdlib.h> // getenv, rand_r
#include <string.h> // strcmp, strlen, strstr
#include <time.h>   // time

#include "frontend/frontend.h"   // f8_frontend_load
#include "ir/alloc.h"            // f8_malloc, f8_realloc, f8_free
#include "ir/fp8.h"              // f8_float_decode
#include "ir/text.h"             // f8_text_parse
#include "codegen/lower.h"       // f8_codegen_lower_group, f8_lowered_group
#include "codegen/nvptx.h"       // f8_nvptx_compile
#include "codegen/target.h"      // f8_codegen_target_table_for
#include "passes/pipeline.h"     // f8_pipeline_run_with
#include "passes/precision.h"    // f8_fp8_options_default
#include "runtime/cpu/generated.h" // f8_cpu_generated_create, f8_cpu_generated_run
#include "runtime/cpu/kernels.h"   // f8_cpu_kernel_get, f8_cpu_kernel_call
#include "runtime/tensor.h"      // f8_rt_tensor
#include "tests/codegen/case_compare.h" // f8_case_compare
#include "tests/test_support.h"  // CHECK, test_finish
#include "tests/codegen/one_group.h" // test_one_group

static unsigned seed;

static double uniform(void) {
	return (rand_r(&seed) + 0.5) / ((double)RAND_MAX + 1.0);
}

static double normal(void) {
	return sqrt(-2.0 * log(uniform())) * cos(6.283185307179586 * uniform());
}

/* The tensors of one check: one per value of the graph, NULL where none was made. */
typedef struct values {
	f8_rt_tensor **tensor; // (graph->n_values)
	uint32_t n;
} values;

static f8_rt_tensor *make_tensor(const f8_graph *graph, f8_value_id id,
				 const int64_t *symbol_values) {
	const f8_type *type = &graph->values[id].type;
	int64_t dims[F8_MAX_RANK];
	for (int d = 0; d < type->shape.rank; d++)
		if (!f8_dim_evaluate(type->shape.dims[d], symbol_values, &dims[d]))
			return NULL;
	f8_rt_tensor *tensor = f8_calloc(1, sizeof *tensor);
	if (tensor && f8_rt_tensor_create(type->dtype, type->shape.rank, dims, tensor, NULL)) {
		f8_free(tensor);
		return NULL;
	}
	return tensor;
}

static void free_values(values *v) {
	for (uint32_t i = 0; i < v->n; i++)
		if (v->tensor[i]) {
			f8_rt_tensor_destroy(v->tensor[i]);
			f8_free(v->tensor[i]);
		}
	f8_free(v->tensor);
}

/* What input `j` of `node` holds, for fill_random. */
typedef enum input_kind {
	INPUT_PLAIN,     // normal with a spread
	INPUT_AMAX,      // a ScalingUpdate's amax
	INPUT_ID,        // an Embedding's or EmbeddingGrad's ids: in [0, the table's rows)
	INPUT_LABEL,     // a cross-entropy's labels: in [0, the vocabulary), or ignore_index
	INPUT_MOMENT,    // AdamW's v: a mean of squares
	INPUT_LR,        // AdamW's learning rate
	INPUT_STEP,      // AdamW's step, from 1
	INPUT_GRAD_SCALE, // AdamW's clipping factor, in (0, 1]
	INPUT_EXPERT,    // a MoE op's expert indices: in [0, the experts)
	INPUT_START,     // a vocabulary shard's first row: in [0, the rows no shard may start past]
	INPUT_SUM_EXP    // the vocabulary-parallel loss's sums of exponentials: positive
} input_kind;

static input_kind kind_of(const f8_node *node, uint32_t j) {
	switch (node->op) {
	case F8_OP_SCALING_UPDATE: return j >= 3 ? INPUT_AMAX : INPUT_PLAIN;
	case F8_OP_EMBEDDING: return j == 0 ? INPUT_ID : j == 2 ? INPUT_START : INPUT_PLAIN;
	case F8_OP_EMBEDDING_GRAD: return j == 1 ? INPUT_ID : j == 2 ? INPUT_START : INPUT_PLAIN;
	case F8_OP_CROSS_ENTROPY: return j == 1 ? INPUT_LABEL : INPUT_PLAIN;
	case F8_OP_CROSS_ENTROPY_GRAD: return j == 2 ? INPUT_LABEL : INPUT_PLAIN;
	case F8_OP_CROSS_ENTROPY_SHARD: return j == 1 ? INPUT_LABEL : j == 3 ? INPUT_START
								: INPUT_PLAIN;
	case F8_OP_CROSS_ENTROPY_MERGE: return j == 3 ? INPUT_LABEL : j == 0 ? INPUT_SUM_EXP
								: INPUT_PLAIN;
	case F8_OP_CROSS_ENTROPY_MERGE_GRAD: return j == 2 ? INPUT_LABEL : j == 1 ? INPUT_SUM_EXP
									: INPUT_PLAIN;
	case F8_OP_CROSS_ENTROPY_SHARD_GRAD: return j == 3 ? INPUT_LABEL : j == 5 ? INPUT_START
								     : INPUT_PLAIN;
	case F8_OP_LEARNING_RATE: return INPUT_STEP; // iterations count from 1
	case F8_OP_MOE_DISPATCH:
	case F8_OP_MOE_DISPATCH_GRAD: return j == 1 ? INPUT_EXPERT : INPUT_PLAIN;
	case F8_OP_MOE_COMBINE: return j == 2 ? INPUT_EXPERT : INPUT_PLAIN;
	case F8_OP_MOE_COMBINE_GRAD:
	case F8_OP_ROUTER_GRAD: return j == 3 ? INPUT_EXPERT : INPUT_PLAIN;
	case F8_OP_ADAMW: {
		static const input_kind adamw[7] = {INPUT_PLAIN, INPUT_PLAIN, INPUT_PLAIN, INPUT_MOMENT,
						    INPUT_LR, INPUT_STEP, INPUT_GRAD_SCALE};
		return j < 7 ? adamw[j] : INPUT_PLAIN;
	}
	default: return INPUT_PLAIN;
	}
}

/* Random contents for an input: scales and amax histories positive (0.25 to 8, as scaling
 * tables hold), the amaxes a ScalingUpdate reads positive with now and then a NaN, an infinity
 * or a 0, ids and expert indices below `rows`, a cross-entropy's labels below `rows` (its
 * vocabulary, so that a
 * label falls in any segment of a long row) with now and then ignore_index (-100), other
 * integers below 50 or -100,
 * bools either way, AdamW's scalars as a training step has them (a step up to about 5000, where
 * the bias corrections still matter), the rest normal with a spread, so that casts both
 * saturate and underflow. */
static bool plant_nan; // fill_random puts a NaN in each plain float input (guarded amaxes)

static void fill_random(const f8_graph *graph, f8_value_id id, input_kind kind, int64_t rows,
			f8_rt_tensor *tensor) {
	f8_role role = graph->values[id].role;
	int64_t n = f8_rt_tensor_numel(tensor);
	double spread = 1.0 + 40.0 * uniform();
	for (int64_t i = 0; i < n; i++) {
		double x, u = uniform();
		if (role == F8_ROLE_SCALE || role == F8_ROLE_AMAX_HISTORY)
			x = 0.25 + 7.75 * uniform();
		else if (kind == INPUT_ID || kind == INPUT_EXPERT)
			x = (double)(int64_t)(rows * u);
		else if (kind == INPUT_START) // now and then the first or the last shard
			x = u < 0.2 ? 0 : u < 0.4 ? (double)rows : (double)(int64_t)((rows + 1) * uniform());
		else if (kind == INPUT_SUM_EXP) // a row's sum of exp(x - max): 1 term or more
			x = 0.05 + 60 * uniform();
		else if (kind == INPUT_LABEL)
			x = u < 0.1 ? -100 : (double)(int64_t)(rows * uniform());
		else if (kind == INPUT_STEP)
			x = 1 + (double)(int64_t)(5000 * u * u * u);
		else if (kind == INPUT_LR)
			x = 1e-4 + 1e-3 * u;
		else if (kind == INPUT_GRAD_SCALE)
			x = 0.05 + 0.95 * u;
		else if (kind == INPUT_MOMENT)
			x = fabs(u * (normal() * spread) * (normal() * spread));
		else if (tensor->dtype == F8_DTYPE_BOOL)
			x = u < 0.5;
		else if (tensor->dtype == F8_DTYPE_I64)
			x = u < 0.1 ? -100 : (double)(int)(50 * uniform());
		else if (kind == INPUT_AMAX)
			x = u < 0.1 ? NAN : u < 0.15 ? INFINITY : u < 0.2 ? 0 : fabs(normal() * spread);
		else
			x = normal() * spread;
		f8_rt_tensor_set(tensor, i, x);
	}
	bool plain = kind == INPUT_PLAIN && role != F8_ROLE_SCALE && role != F8_ROLE_AMAX_HISTORY &&
		     f8_dtype_is_float(tensor->dtype);
	if (plant_nan && plain && n > 0)
		f8_rt_tensor_set(tensor, (int64_t)(uniform() * n), NAN);
}

/* The experts a MoE op's indices choose from: a RouterGrad's logits' columns, the experts
 * attribute, else (MoECombine has none) those of the Router that made the indices, else 4. */
static int64_t experts_of(const f8_graph *graph, const f8_node *node, f8_value_id indices) {
	if (node->op == F8_OP_ROUTER_GRAD)
		return f8_dim_value(graph->values[node->inputs[1]].type.shape.dims[1]);
	if (f8_node_attr_int(node, "experts", 0) > 0)
		return f8_node_attr_int(node, "experts", 0);
	f8_node_id router = graph->values[indices].producer;
	if (router != F8_NONE && graph->nodes[router].op == F8_OP_ROUTER)
		return f8_dim_value(graph->values[graph->nodes[router].inputs[0]].type.shape.dims[1]);
	return 4;
}

/* The vocabulary of a vocabulary shard's op (attribute vocab: an Embedding's or a
 * CrossEntropyShard's whole vocabulary; an EmbeddingGrad's is its table's rows, and its ids
 * range over three times them), its shard's rows into *shard; 0 for another op. */
static int64_t shard_vocabulary(const f8_graph *graph, const f8_node *node,
				const int64_t *symbols, int64_t *shard) {
	f8_value_id table = F8_NONE;
	switch (node->op) {
	case F8_OP_EMBEDDING: table = node->n_inputs > 2 ? node->inputs[1] : F8_NONE; break;
	case F8_OP_EMBEDDING_GRAD: table = node->n_inputs > 2 ? node->outputs[0] : F8_NONE; break;
	case F8_OP_CROSS_ENTROPY_SHARD: table = node->inputs[0]; break;
	case F8_OP_CROSS_ENTROPY_SHARD_GRAD: table = node->inputs[2]; break;
	default: break;
	}
	if (table == F8_NONE)
		return 0;
	const f8_shape *shape = &graph->values[table].type.shape;
	bool logits = node->op != F8_OP_EMBEDDING && node->op != F8_OP_EMBEDDING_GRAD;
	*shard = 0;
	f8_dim_evaluate(shape->dims[logits ? shape->rank - 1 : 0], symbols, shard);
	const f8_attr *vocab = f8_node_attr(node, "vocab");
	int64_t whole = *shard;
	if (node->op == F8_OP_EMBEDDING_GRAD)
		whole = 3 * *shard;
	else if (vocab)
		f8_dim_evaluate(vocab->dim, symbols, &whole);
	return whole;
}

/* The rows of the table an Embedding or EmbeddingGrad node reads or makes; a cross-entropy's
 * vocabulary (the logits' last dim); a vocabulary shard's op's whole vocabulary. */
static int64_t table_rows(const f8_graph *graph, const f8_node *node, const int64_t *symbols) {
	int64_t shard, whole = shard_vocabulary(graph, node, symbols, &shard);
	if (whole)
		return whole;
	bool labels = node->op == F8_OP_CROSS_ENTROPY || node->op == F8_OP_CROSS_ENTROPY_GRAD ||
		      node->op == F8_OP_CROSS_ENTROPY_MERGE ||
		      node->op == F8_OP_CROSS_ENTROPY_MERGE_GRAD;
	if (node->op == F8_OP_CROSS_ENTROPY_MERGE || node->op == F8_OP_CROSS_ENTROPY_MERGE_GRAD)
		return 1000; // the labels only count or not: any vocabulary
	f8_value_id table = node->op == F8_OP_EMBEDDING ? node->inputs[1]
			    : labels ? node->inputs[node->op == F8_OP_CROSS_ENTROPY ? 0 : 1]
				     : node->outputs[0];
	const f8_shape *shape = &graph->values[table].type.shape;
	int64_t rows = 0;
	f8_dim_evaluate(shape->dims[labels ? shape->rank - 1 : 0], symbols, &rows);
	return rows;
}

/* Runs the group's members through the reference kernels; their outputs into `v`. */
static f8_status run_reference(const f8_graph *graph, uint32_t group, const int64_t *symbols,
			       values *v, f8_diag *diag) {
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		if (node->group != group)
			continue;
		const f8_rt_tensor *inputs[256] = {0}; // a ScalingUpdate reads an amax per slot
		f8_rt_tensor outputs[8];
		if (node->n_inputs > 256 || node->n_outputs > 8)
			return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "a node too wide for the test");
		for (uint32_t j = 0; j < node->n_inputs; j++)
			inputs[j] = node->inputs[j] == F8_NONE ? NULL : v->tensor[node->inputs[j]];
		for (uint32_t o = 0; o < node->n_outputs; o++) {
			f8_rt_tensor *made = make_tensor(graph, node->outputs[o], symbols);
			if (!made)
				return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
			v->tensor[node->outputs[o]] = made;
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

/* The relative bound on the amax output `value` of a cast whose input the group computed
 * (!exact_fp8): that input may round to its dtype one ulp the other way (the FP8 codes' rule
 * allows the neighbouring code for it), and so may its largest magnitude: one ulp of bf16
 * (2^-7) or f16 (2^-10). 0 for any other value. */
static double computed_amax_bound(const f8_graph *graph, f8_value_id value, bool exact_fp8) {
	f8_node_id producer = graph->values[value].producer;
	if (exact_fp8 || producer == F8_NONE)
		return 0;
	const f8_node *node = &graph->nodes[producer];
	bool cast = node->op == F8_OP_QUANTIZE || node->op == F8_OP_CAST_TRANSPOSE;
	if (!cast || node->n_outputs < 3 || node->outputs[node->n_outputs - 1] != value)
		return 0;
	f8_dtype x = graph->values[node->inputs[0]].type.dtype;
	return x == F8_DTYPE_BF16 ? 0x1p-7 : x == F8_DTYPE_F16 ? 0x1p-10 : 0;
}

/* Compares the kernel's buffer for `value` with the reference's (in `v`) by the rule of
 * tests/codegen/case_compare.h (FP8 codes one apart only where `exact_fp8` is false; a column
 * sum within its terms' magnitudes, from the inputs in `v`); prints the first mismatch. */
static void compare(const f8_graph *graph, f8_value_id value, const values *v, const void *got,
		    bool exact_fp8, const char *kernel) {
	case_comparison result;
	f8_rt_tensor magnitude = {0};
	bool column_sum = case_is_column_sum(graph, value);
	if (column_sum) {
		f8_diag diag = {0};
		f8_status status = f8_case_column_magnitude(
			graph, value, (const f8_rt_tensor *const *)v->tensor, &magnitude, &diag);
		if (status)
			f8_diag_print(&diag, stdout);
		CHECK(status == F8_OK);
	}
	const f8_rt_tensor *reference = v->tensor[value];
	f8_case_compare(reference, got, !exact_fp8, case_rounded_twice(graph, value),
			column_sum ? &magnitude : NULL, &result);
	f8_rt_tensor_destroy(&magnitude);
	double bound = computed_amax_bound(graph, value, exact_fp8);
	if (result.bad && bound > 0 && reference->dtype == F8_DTYPE_F32) { // f32 amaxes: each within one ulp of the cast's input dtype
		result.bad = 0;
		for (int64_t i = 0; i < result.count; i++) {
			float want = ((const float *)reference->data)[i], have = ((const float *)got)[i];
			result.bad += !(want == have || (isnan(want) && isnan(have)) ||
					fabs((double)have - want) <= bound * fabs((double)want));
		}
	}
	if (result.bad)
		printf("  %s: %%%s: %lld of %lld elements differ; first at %lld: reference %.9g, "
		       "kernel %.9g\n",
		       kernel, graph->values[value].name, (long long)result.bad,
		       (long long)result.count, (long long)result.first, result.want, result.got);
	CHECK(result.bad == 0);
}

/* True when some member computes the value a cast member reads (so it may differ by an ulp). */
static bool casts_computed_values(const f8_graph *graph, uint32_t group) {
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		if (node->group != group || (node->op != F8_OP_QUANTIZE && node->op != F8_OP_CAST_TRANSPOSE))
			continue;
		f8_node_id producer = graph->values[node->inputs[0]].producer;
		if (producer != F8_NONE && graph->nodes[producer].group == group)
			return true;
	}
	return false;
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

/* A CrossEntropyShard or CrossEntropyShardGrad reads every rank's row maximum (all-reduced):
 * random inputs keep that contract, at or above this shard's row maximum (by up to 4, as
 * another rank's logits would put it). */
static void make_max_consistent(const f8_rt_tensor *logits, f8_rt_tensor *max) {
	int64_t rows = f8_rt_tensor_numel(max), shard = logits->dims[logits->rank - 1];
	for (int64_t r = 0; r < rows; r++) {
		double top = -INFINITY;
		for (int64_t c = 0; c < shard; c++)
			top = fmax(top, f8_rt_tensor_get(logits, r * shard + c));
		f8_rt_tensor_set(max, r, top + (uniform() < 0.5 ? 0 : 4 * uniform()));
	}
}

/* A RouterGrad reads the indices its forward chose from the same logits: random inputs keep
 * that contract, each token's top_k experts by logit (the lower index first on a tie), as a
 * softmax Router picks them; random indices would make the chosen scores' sum a few tiny
 * scores, which no Router picks, and the gradient through the normalization ill-conditioned
 * (0 / 0 where the f32 scores underflow). */
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

/* Runs group `group` through its generated kernels (`generated`) and through the reference
 * kernels on the same fresh inputs, and compares every value the generated kernels write. */
static void check_group(const f8_graph *graph, f8_cpu_generated *generated, uint32_t group,
			const int64_t *symbols) {
	const char *name = graph->groups[group].name;
	f8_diag diag = {0};
	values v = {.tensor = f8_calloc(graph->n_values, sizeof *v.tensor), .n = graph->n_values};
	f8_rt_tensor *tensors = f8_calloc(graph->n_values, sizeof *tensors); // the kernels'
	CHECK(v.tensor && tensors);
	f8_status status = F8_OK;
	for (uint32_t i = 0; !status && i < graph->n_order; i++) { // inputs from outside
		const f8_node *node = &graph->nodes[graph->order[i]];
		for (uint32_t j = 0; node->group == group && j < node->n_inputs; j++) {
			f8_value_id input = node->inputs[j];
			f8_node_id producer = input == F8_NONE ? F8_NONE : graph->values[input].producer;
			if (input == F8_NONE || v.tensor[input] ||
			    (producer != F8_NONE && graph->nodes[producer].group == group))
				continue;
			v.tensor[input] = make_tensor(graph, input, symbols);
			if (!v.tensor[input]) {
				status = F8_ERR_NOMEM;
				break;
			}
			input_kind kind = kind_of(node, j);
			int64_t shard, rows = kind == INPUT_ID || kind == INPUT_LABEL
					       ? table_rows(graph, node, symbols)
					       : kind == INPUT_EXPERT ? experts_of(graph, node, input) : 0;
			if (kind == INPUT_START) // the last start a shard of its rows may have
				rows = shard_vocabulary(graph, node, symbols, &shard) - shard;
			fill_random(graph, input, kind, rows, v.tensor[input]);
			tensors[input] = *v.tensor[input]; // shares the data; v owns it
			tensors[input].owned = false;
		}
	}
	for (uint32_t i = 0; !status && i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		if (node->group == group && node->op == F8_OP_CROSS_ENTROPY_GRAD)
			make_lse_consistent(v.tensor[node->inputs[1]], v.tensor[node->inputs[3]]);
		if (node->group == group && (node->op == F8_OP_CROSS_ENTROPY_SHARD ||
					     node->op == F8_OP_CROSS_ENTROPY_SHARD_GRAD)) {
			bool grad = node->op == F8_OP_CROSS_ENTROPY_SHARD_GRAD;
			make_max_consistent(v.tensor[node->inputs[grad ? 2 : 0]],
					    v.tensor[node->inputs[grad ? 4 : 2]]);
		}
		if (node->group == group && node->op == F8_OP_ROUTER_GRAD)
			make_indices_consistent(v.tensor[node->inputs[1]], v.tensor[node->inputs[3]]);
	}
	uint32_t n_outputs;
	const f8_value_id *outputs = f8_cpu_generated_outputs(generated, group, &n_outputs);
	for (uint32_t o = 0; !status && o < n_outputs; o++) {
		f8_rt_tensor *made = make_tensor(graph, outputs[o], symbols);
		if (made) {
			tensors[outputs[o]] = *made;
			f8_free(made);
		} else {
			status = F8_ERR_NOMEM;
		}
	}
	if (!status)
		status = f8_cpu_generated_run_tensors(generated, group, tensors, symbols, &diag);
	if (!status)
		status = run_reference(graph, group, symbols, &v, &diag);
	if (status) {
		printf("  %s: ", name);
		f8_diag_print(&diag, stdout);
		CHECK(status == F8_OK);
	} else {
		bool exact = !casts_computed_values(graph, group);
		for (uint32_t o = 0; o < n_outputs; o++)
			compare(graph, outputs[o], &v, tensors[outputs[o]].data, exact, name);
	}
	for (uint32_t o = 0; o < n_outputs; o++)
		f8_rt_tensor_destroy(&tensors[outputs[o]]);
	f8_free(tensors);
	free_values(&v);
}

/* The kernel cache the test presets name (F8C_KERNEL_CACHE), so the sanitizer build links what
 * the default build compiled; none when unset or "off". */
static const char *kernel_cache(void) {
	const char *folder = getenv("F8C_KERNEL_CACHE");
	return folder && *folder && strcmp(folder, "off") ? folder : NULL;
}

/* Every group of `graph`, through one f8_cpu_generated for all of them. */
static void check_groups(const f8_graph *graph, const int64_t *symbols) {
	f8_cpu_generated *generated = NULL;
	f8_diag diag = {0};
	f8_status status = f8_cpu_generated_create(graph, kernel_cache(), &generated, &diag);
	if (status) {
		f8_diag_print(&diag, stdout);
		CHECK(status == F8_OK);
		return;
	}
	for (uint32_t g = 0; g < graph->n_groups; g++)
		check_group(graph, generated, g, symbols);
	f8_cpu_generated_destroy(generated);
}

/* A text graph made one group: all its nodes, in order. */
static void check_text_group(const char *title, const char *text, f8_kernel_family family) {
	printf("%s\n", title);
	uint32_t group;
	f8_graph *graph = test_one_group(title, text, family, &group);
	if (!graph)
		return;
	int64_t symbols[4] = {3, 40, 7, 5};
	check_groups(graph, symbols);
	f8_graph_destroy(graph);
}

/*
 * Lowers the whole of `text` as one group of `family` and checks the form the title names was
 * taken: at least `launches` launches, one of a kernel whose name ends in `suffix` (NULL: any),
 * whose first parameter is of `dtype` (F8_DTYPE_UNDEFINED: any). The value checks of
 * check_text_group pass with either form, so they cannot say which one ran.
 */
static void check_form(const char *title, const char *text, f8_kernel_family family,
		       uint32_t launches, const char *suffix, f8_dtype dtype) {
	printf("%s\n", title);
	uint32_t group;
	f8_graph *graph = test_one_group(title, text, family, &group);
	if (!graph)
		return;
	f8_diag diag = {0};
	f8_lowered_group lowered = {0};
	f8_status status = f8_codegen_lower_group(graph, group, &lowered, &diag);
	if (status)
		f8_diag_print(&diag, stdout);
	CHECK(status == F8_OK);
	bool found = false;
	for (uint32_t l = 0; l < lowered.n_launches; l++) {
		const f8_kernel *k = lowered.launches[l].kernel;
		size_t n = strlen(k->name), m = suffix ? strlen(suffix) : 0;
		found |= (!suffix || (n >= m && strcmp(k->name + n - m, suffix) == 0)) &&
			 (dtype == F8_DTYPE_UNDEFINED || (k->n_params && k->params[0].dtype == dtype));
	}
	printf("  %u launches\n", lowered.n_launches);
	CHECK(lowered.n_launches >= launches && found);
	f8_lowered_group_release(&lowered);
	f8_graph_destroy(graph);
}

static const char chain[] =
	"graph chain {\n"
	"  input %x : f32[b, s, 96]\n"
	"  input %bias : f32[96]\n"
	"  input %gate : f32[b, s, 1]\n"
	"  input %shift : f32[]\n"
	"  input %other : f32[s, 96]\n"
	"  %h = Add(%x, %bias)\n"
	"  %a = Gelu(%h) {approximate=\"tanh\"}\n"
	"  %e = Gelu(%h)\n"
	"  %g = Mul(%a, %gate)\n"
	"  %t = Tanh(%g)\n"
	"  %y = Add(%t, %shift)\n"
	"  %z = Sub(%y, %other)\n"
	"  %w = Sigmoid(%z)\n"
	"  %v = Relu(%w)\n"
	"  %m = Max(%v, %e)\n"
	"  %q = Div(%m, %x)\n"
	"  %c = Cast(%q) {to=bf16}\n"
	"  output %a, %c\n"
	"}\n";

static const char layer_norm_cast[] =
	"graph layer_norm_cast {\n"
	"  input %x : f32[b, s, 200]\n"
	"  input %gamma : f32[200]\n"
	"  input %beta : f32[200]\n"
	"  scale %table : f32[3]\n"
	"  %n, %mean, %rstd = LayerNorm(%x, %gamma, %beta) {epsilon=1e-05}\n"
	"  %n8, %n8t, %si, %sit, %amax = CastTranspose(%n, %table) {to=e4m3, slot=2}\n"
	"  output %n8, %n8t, %si, %sit, %amax, %mean, %rstd\n"
	"}\n";

/* Constant dims that are multiples of 4, not of 64 (132 x 200): the transposing kernel moves
 * the codes as 4-byte words, its tiles ending part-way in both directions. */
static const char layer_norm_cast_words[] =
	"graph layer_norm_cast_words {\n"
	"  input %x : f32[3, 44, 200]\n"
	"  input %gamma : f32[200]\n"
	"  input %beta : f32[200]\n"
	"  scale %table : f32[3]\n"
	"  %n, %mean, %rstd = LayerNorm(%x, %gamma, %beta) {epsilon=1e-05}\n"
	"  %n8, %n8t, %si, %sit, %amax = CastTranspose(%n, %table) {to=e4m3, slot=2}\n"
	"  output %n8, %n8t, %si, %sit, %amax, %mean, %rstd\n"
	"}\n";

/* The same by words with RMSNorm (bf16) and E5M2, only the transposed codes leaving the group:
 * the norm kernel leaves the codes in a scratch buffer. */
static const char rms_norm_cast_words[] =
	"graph rms_norm_cast_words {\n"
	"  input %x : bf16[68, 136]\n"
	"  input %gamma : bf16[136]\n"
	"  scale %table : f32[2]\n"
	"  %n, %rstd = RMSNorm(%x, %gamma) {epsilon=1e-06}\n"
	"  %n8, %n8t, %si, %sit, %amax = CastTranspose(%n, %table) {to=e5m2, slot=1}\n"
	"  output %n8t, %sit, %amax\n"
	"}\n";

static const char rms_norm_quantize[] =
	"graph rms_norm_quantize {\n"
	"  input %x : bf16[s, 72]\n"
	"  input %gamma : bf16[72]\n"
	"  scale %scale : f32[]\n"
	"  %n, %rstd = RMSNorm(%x, %gamma) {epsilon=1e-06}\n"
	"  %n8, %si, %amax = Quantize(%n, %scale) {to=e5m2}\n"
	"  output %n, %n8, %si, %amax, %rstd\n"
	"}\n";

static const char gelu_grad_cast[] =
	"graph gelu_grad_cast {\n"
	"  input %dy : f32[b, s, 64]\n"
	"  input %h : f32[b, s, 64]\n"
	"  scale %table : f32[2]\n"
	"  %dh = GeluGrad(%dy, %h)\n"
	"  %dh8, %dh8t, %si, %sit, %amax = CastTranspose(%dh, %table) {to=e5m2, slot=1}\n"
	"  %dbias = ReduceSum(%dh) {axes=[0, 1], keepdims=0}\n"
	"  output %dh8, %dh8t, %si, %sit, %amax, %dbias\n"
	"}\n";

/* Rows of 320 (a constant of at least 256): the row form, a block loop a row, and the
 * positions' general broadcast; bf16 input and output: 16-byte accesses on the GPU. */
static const char broadcast_rows[] =
	"graph broadcast_rows {\n"
	"  input %x : bf16[b, s, 320]\n"
	"  input %pos : bf16[s, 320]\n"
	"  input %gate : bf16[b, s, 1]\n"
	"  %a = Add(%x, %pos)\n"
	"  %y = Mul(%a, %gate)\n"
	"  output %y\n"
	"}\n";

static const char cast_only[] =
	"graph cast_only {\n"
	"  input %x : f32[s, 48]\n"
	"  scale %table : f32[4]\n"
	"  %x8, %x8t, %si, %sit, %amax = CastTranspose(%x, %table) {to=e4m3, slot=3}\n"
	"  output %x8, %x8t, %si, %sit, %amax\n"
	"}\n";

static const char cross_entropy[] =
	"graph cross_entropy {\n"
	"  input %logits : f32[s, 50]\n"
	"  input %labels : i64[s]\n"
	"  %loss, %lse = CrossEntropy(%logits, %labels) {ignore_index=-100, reduction=\"mean\"}\n"
	"  output %loss, %lse\n"
	"}\n";

/* Vocabularies longer than a segment of codegen/lower_multi.c (6144 logits, kept in shared
 * memory): 20000 is three whole segments and a short one, each row's segments combined by a
 * second kernel; f32 rows of 20000 are 16-byte aligned, bf16 ones alternate. */
static const char cross_entropy_segments[] =
	"graph cross_entropy_segments {\n"
	"  input %logits : f32[s, 20000]\n"
	"  input %labels : i64[s]\n"
	"  %loss, %lse = CrossEntropy(%logits, %labels) {ignore_index=-100, reduction=\"mean\"}\n"
	"  output %loss, %lse\n"
	"}\n";

static const char cross_entropy_segments_bf16[] =
	"graph cross_entropy_segments_bf16 {\n"
	"  input %logits : bf16[b, s, 20004]\n"
	"  input %labels : i64[b, s]\n"
	"  %loss, %lse = CrossEntropy(%logits, %labels) {ignore_index=-100, reduction=\"none\"}\n"
	"  output %loss, %lse\n"
	"}\n";

/* A vocabulary that is no constant (80 here, the labels below it): no shared array fits every
 * length, the row is read twice. */
static const char cross_entropy_symbolic[] =
	"graph cross_entropy_symbolic {\n"
	"  input %logits : f32[b, 2*s]\n"
	"  input %labels : i64[b]\n"
	"  %loss = CrossEntropy(%logits, %labels) {ignore_index=-100, reduction=\"sum\"}\n"
	"  output %loss\n"
	"}\n";

static const char cross_entropy_grad[] =
	"graph cross_entropy_grad {\n"
	"  input %dloss : f32[]\n"
	"  input %logits : bf16[b, s, 50]\n"
	"  input %labels : i64[b, s]\n"
	"  input %lse : f32[b, s]\n"
	"  %dlogits = CrossEntropyGrad(%dloss, %logits, %labels, %lse) {ignore_index=-100, "
	"reduction=\"mean\"}\n"
	"  output %dlogits\n"
	"}\n";

static const char scaling_update[] =
	"graph scaling_update {\n"
	"  scale %scale : f32[4]\n"
	"  amax_history %history : f32[16, 4]\n"
	"  state %nonfinite : i64[]\n"
	"  input %a0 : f32[]\n"
	"  input %a1 : f32[]\n"
	"  input %a2 : f32[]\n"
	"  input %a3 : f32[]\n"
	"  %s, %h, %n = ScalingUpdate(%scale, %history, %nonfinite, %a0, %a1, %a2, %a3) "
	"{format=e5m2, algo=\"max\", margin=1}\n"
	"  output %s, %h, %n\n"
	"}\n";

/* 120 rows: 15 chunks of the norm_grad kernel's 8 rows. */
static const char layer_norm_grad_cast[] =
	"graph layer_norm_grad_cast {\n"
	"  input %dy : f32[b, s, 96]\n"
	"  input %x : f32[b, s, 96]\n"
	"  input %gamma : f32[96]\n"
	"  input %mean : f32[b, s, 1]\n"
	"  input %rstd : f32[b, s, 1]\n"
	"  scale %table : f32[2]\n"
	"  %dx, %dgamma, %dbeta = LayerNormGrad(%dy, %x, %gamma, %mean, %rstd) {epsilon=1e-05}\n"
	"  %dx8, %dx8t, %si, %sit, %amax = CastTranspose(%dx, %table) {to=e5m2, slot=1}\n"
	"  output %dx8, %dx8t, %si, %sit, %amax, %dgamma, %dbeta\n"
	"}\n";

/* 21 rows: the last chunk is partial. bf16 dgamma is summed in f32, then rounded. */
static const char rms_norm_grad_bf16[] =
	"graph rms_norm_grad_bf16 {\n"
	"  input %dy : bf16[b, 7, 72]\n"
	"  input %x : bf16[b, 7, 72]\n"
	"  input %gamma : bf16[72]\n"
	"  input %rstd : f32[b, 7, 1]\n"
	"  scale %scale : f32[]\n"
	"  %dx, %dgamma = RMSNormGrad(%dy, %x, %gamma, %rstd) {epsilon=1e-06}\n"
	"  %dx8, %si, %amax = Quantize(%dx, %scale) {to=e5m2}\n"
	"  output %dx, %dx8, %si, %amax, %dgamma\n"
	"}\n";

/* Llama's MLP: the packed [gate | up] SwiGLU with the E4M3 cast of its output ... */
static const char swiglu_packed_cast[] =
	"graph swiglu_packed_cast {\n"
	"  input %x : f32[b, s, 160]\n"
	"  scale %table : f32[2]\n"
	"  %y = SwiGLU(%x)\n"
	"  %y8, %y8t, %si, %sit, %amax = CastTranspose(%y, %table) {to=e4m3, slot=0}\n"
	"  output %y8, %y8t, %si, %sit, %amax\n"
	"}\n";

/* ... the two-input form, bf16 ... */
static const char swiglu_two_bf16[] =
	"graph swiglu_two_bf16 {\n"
	"  input %gate : bf16[s, 48]\n"
	"  input %up : bf16[s, 48]\n"
	"  scale %scale : f32[]\n"
	"  %y = SwiGLU(%gate, %up)\n"
	"  %y8, %si, %amax = Quantize(%y, %scale) {to=e4m3}\n"
	"  output %y, %y8, %si, %amax\n"
	"}\n";

/* ... and their gradients with the E5M2 cast of dx: packed, and two outputs each cast. */
static const char swiglu_grad_packed_cast[] =
	"graph swiglu_grad_packed_cast {\n"
	"  input %dy : f32[b, s, 80]\n"
	"  input %x : f32[b, s, 160]\n"
	"  scale %table : f32[3]\n"
	"  %dx = SwiGLUGrad(%dy, %x)\n"
	"  %dx8, %dx8t, %si, %sit, %amax = CastTranspose(%dx, %table) {to=e5m2, slot=2}\n"
	"  output %dx, %dx8, %dx8t, %si, %sit, %amax\n"
	"}\n";

static const char swiglu_grad_two_cast[] =
	"graph swiglu_grad_two_cast {\n"
	"  input %dy : bf16[s, 48]\n"
	"  input %gate : bf16[s, 48]\n"
	"  input %up : bf16[s, 48]\n"
	"  scale %table : f32[2]\n"
	"  %dgate, %dup = SwiGLUGrad(%dy, %gate, %up)\n"
	"  %g8, %g8t, %gsi, %gsit, %gamax = CastTranspose(%dgate, %table) {to=e5m2, slot=0}\n"
	"  %u8, %usi, %uamax = Quantize(%dup, %table) {to=e5m2, slot=1}\n"
	"  output %dgate, %g8, %g8t, %gsi, %gsit, %gamax, %u8, %usi, %uamax\n"
	"}\n";

/* 120 positions (each id about 2.4 times over 50 rows). */
static const char embedding[] =
	"graph embedding {\n"
	"  input %ids : i64[b, s]\n"
	"  param %table : bf16[50, 24]\n"
	"  %y = Embedding(%ids, %table)\n"
	"  output %y\n"
	"}\n";

static const char embedding_grad[] =
	"graph embedding_grad {\n"
	"  input %dy : f32[s, 24]\n"
	"  input %ids : i64[s]\n"
	"  %dw = EmbeddingGrad(%dy, %ids) {vocab=50}\n"
	"  output %dw\n"
	"}\n";

static const char embedding_grad_bf16[] =
	"graph embedding_grad_bf16 {\n"
	"  input %dy : bf16[b, s, 24]\n"
	"  input %ids : i32[b, s]\n"
	"  %dw = EmbeddingGrad(%dy, %ids) {vocab=50}\n"
	"  output %dw\n"
	"}\n";

/* The vocabulary-parallel ops (codegen/lower_embedding.c, lower_cross_entropy_shard.c), each
 * a group of its own: a shard of the rows (a table's, the logits' columns) from a start that
 * is data, the ids and labels over the whole vocabulary, so that most fall on other ranks'
 * shards (zeros, nothing added, a target of 0) and a start of 0 or at the last shard comes
 * now and then. */
static const char embedding_shard[] =
	"graph embedding_shard {\n"
	"  input %ids : i64[b, s]\n"
	"  param %table : bf16[25, 24]\n"
	"  input %start : i64[1]\n"
	"  %y = Embedding(%ids, %table, %start) {vocab=60}\n"
	"  output %y\n"
	"}\n";

static const char embedding_shard_f32[] =
	"graph embedding_shard_f32 {\n"
	"  input %ids : i32[s]\n"
	"  param %table : f32[16, 40]\n"
	"  input %start : i64[1]\n"
	"  %y = Embedding(%ids, %table, %start) {vocab=48}\n"
	"  output %y\n"
	"}\n";

static const char embedding_grad_shard[] =
	"graph embedding_grad_shard {\n"
	"  input %dy : f32[b, s, 24]\n"
	"  input %ids : i64[b, s]\n"
	"  input %start : i64[1]\n"
	"  %dw = EmbeddingGrad(%dy, %ids, %start) {vocab=10}\n"
	"  output %dw\n"
	"}\n";

static const char embedding_grad_shard_bf16[] =
	"graph embedding_grad_shard_bf16 {\n"
	"  input %dy : bf16[s, 32]\n"
	"  input %ids : i32[s]\n"
	"  input %start : i64[1]\n"
	"  %dw = EmbeddingGrad(%dy, %ids, %start) {vocab=12}\n"
	"  output %dw\n"
	"}\n";

static const char cross_entropy_shard[] =
	"graph cross_entropy_shard {\n"
	"  input %logits : f32[b, s, 50]\n"
	"  input %labels : i64[b, s]\n"
	"  input %max : f32[b, s]\n"
	"  input %start : i64[1]\n"
	"  %sums, %target = CrossEntropyShard(%logits, %labels, %max, %start) {ignore_index=-100, "
	"vocab=120}\n"
	"  output %sums, %target\n"
	"}\n";

/* bf16 logits and maxima, a long shard (a block loop of several steps a thread). */
static const char cross_entropy_shard_bf16[] =
	"graph cross_entropy_shard_bf16 {\n"
	"  input %logits : bf16[s, 1500]\n"
	"  input %labels : i32[s]\n"
	"  input %max : bf16[s]\n"
	"  input %start : i64[1]\n"
	"  %sums, %target = CrossEntropyShard(%logits, %labels, %max, %start) {vocab=4000}\n"
	"  output %sums, %target\n"
	"}\n";

static const char cross_entropy_merge[] =
	"graph cross_entropy_merge {\n"
	"  input %sums : f32[b, s]\n"
	"  input %target : f32[b, s]\n"
	"  input %max : f32[b, s]\n"
	"  input %labels : i64[b, s]\n"
	"  %loss, %lse = CrossEntropyMerge(%sums, %target, %max, %labels) {ignore_index=-100, "
	"reduction=\"mean\"}\n"
	"  output %loss, %lse\n"
	"}\n";

static const char cross_entropy_merge_none[] =
	"graph cross_entropy_merge_none {\n"
	"  input %sums : f32[s]\n"
	"  input %target : f32[s]\n"
	"  input %max : bf16[s]\n"
	"  input %labels : i64[s]\n"
	"  %loss = CrossEntropyMerge(%sums, %target, %max, %labels) {reduction=\"none\"}\n"
	"  output %loss\n"
	"}\n";

static const char cross_entropy_merge_sum[] =
	"graph cross_entropy_merge_sum {\n"
	"  input %sums : f32[s]\n"
	"  input %target : f32[s]\n"
	"  input %max : f32[s]\n"
	"  input %labels : i32[s]\n"
	"  %loss, %lse = CrossEntropyMerge(%sums, %target, %max, %labels) {reduction=\"sum\"}\n"
	"  output %loss, %lse\n"
	"}\n";

static const char cross_entropy_merge_grad[] =
	"graph cross_entropy_merge_grad {\n"
	"  input %dloss : f32[]\n"
	"  input %sums : f32[b, s]\n"
	"  input %labels : i64[b, s]\n"
	"  %dsums, %dtarget = CrossEntropyMergeGrad(%dloss, %sums, %labels) {ignore_index=-100, "
	"reduction=\"mean\"}\n"
	"  output %dsums, %dtarget\n"
	"}\n";

static const char cross_entropy_merge_grad_none[] =
	"graph cross_entropy_merge_grad_none {\n"
	"  input %dloss : f32[s]\n"
	"  input %sums : f32[s]\n"
	"  input %labels : i64[s]\n"
	"  %dsums, %dtarget = CrossEntropyMergeGrad(%dloss, %sums, %labels) {reduction=\"none\"}\n"
	"  output %dsums, %dtarget\n"
	"}\n";

static const char cross_entropy_shard_grad[] =
	"graph cross_entropy_shard_grad {\n"
	"  input %dsums : f32[b, s]\n"
	"  input %dtarget : f32[b, s]\n"
	"  input %logits : bf16[b, s, 50]\n"
	"  input %labels : i64[b, s]\n"
	"  input %max : f32[b, s]\n"
	"  input %start : i64[1]\n"
	"  %dlogits = CrossEntropyShardGrad(%dsums, %dtarget, %logits, %labels, %max, %start) "
	"{ignore_index=-100, vocab=120}\n"
	"  output %dlogits\n"
	"}\n";

static const char cross_entropy_shard_grad_f32[] =
	"graph cross_entropy_shard_grad_f32 {\n"
	"  input %dsums : f32[s]\n"
	"  input %dtarget : f32[s]\n"
	"  input %logits : f32[s, 700]\n"
	"  input %labels : i32[s]\n"
	"  input %max : f32[s]\n"
	"  input %start : i64[1]\n"
	"  %dlogits = CrossEntropyShardGrad(%dsums, %dtarget, %logits, %labels, %max, %start) "
	"{vocab=1400}\n"
	"  output %dlogits\n"
	"}\n";

/* The data errors' graphs: labels and ids count up from 0 there, and 77 is outside. */
static const char cross_entropy_shard_small[] =
	"graph cross_entropy_shard_small {\n"
	"  input %logits : f32[s, 10]\n"
	"  input %labels : i64[s]\n"
	"  input %max : f32[s]\n"
	"  input %start : i64[1]\n"
	"  %sums, %target = CrossEntropyShard(%logits, %labels, %max, %start) {vocab=20}\n"
	"  output %sums, %target\n"
	"}\n";

/* Three parameters of two shapes and two dtypes, two weight decays, one without the clipping
 * factor, and the zeroing of two gradients: one optimizer kernel. */
static const char adamw_multi[] =
	"graph adamw_multi {\n"
	"  param %w : f32[40, 40]\n"
	"  param %b : bf16[40]\n"
	"  param %e : f32[5000]\n"
	"  state %w.grad : f32[40, 40]\n"
	"  state %b.grad : bf16[40]\n"
	"  state %e.grad : f32[5000]\n"
	"  state %w.m : f32[40, 40]\n"
	"  state %w.v : f32[40, 40]\n"
	"  state %b.m : f32[40]\n"
	"  state %b.v : f32[40]\n"
	"  state %e.m : f32[5000]\n"
	"  state %e.v : f32[5000]\n"
	"  input %lr : f32[]\n"
	"  input %step : i64[]\n"
	"  input %clip : f32[]\n"
	"  %w2, %wm2, %wv2 = AdamW(%w, %w.grad, %w.m, %w.v, %lr, %step, %clip) {beta1=0.9, "
	"beta2=0.999, epsilon=1e-08, weight_decay=0.1}\n"
	"  %w.zero = ConstantOfShape() {shape=[40, 40], value=f32[](0)}\n"
	"  %b2, %bm2, %bv2 = AdamW(%b, %b.grad, %b.m, %b.v, %lr, %step, %clip) {weight_decay=0}\n"
	"  %e2, %em2, %ev2 = AdamW(%e, %e.grad, %e.m, %e.v, %lr, %step) {beta1=0.8, beta2=0.95, "
	"epsilon=1e-06, weight_decay=0.01}\n"
	"  %e.zero = ConstantOfShape() {shape=[5000], value=f32[](0)}\n"
	"  output %w2, %wm2, %wv2, %b2, %bm2, %bv2, %e2, %em2, %ev2\n"
	"  update %w.grad <- %w.zero\n"
	"  update %e.grad <- %e.zero\n"
	"}\n";

/* Casts that find their scales (codegen/lower_casts.c): current (per tensor), rowwise, 1x128,
 * 128x128 and MX 1x32, each both copies where it is a CastTranspose. */
static const char cast_current[] =
	"graph cast_current {\n"
	"  input %x : f32[b, s, 48]\n"
	"  %x8, %x8t, %si, %sit, %amax = CastTranspose(%x) {to=e4m3}\n"
	"  output %x8, %x8t, %si, %sit, %amax\n"
	"}\n";

static const char quantize_current_bf16[] =
	"graph quantize_current_bf16 {\n"
	"  input %x : bf16[s, 72]\n"
	"  %x8, %si, %amax = Quantize(%x) {to=e5m2, margin=2}\n"
	"  output %x8, %si, %amax\n"
	"}\n";

static const char cast_rowwise[] =
	"graph cast_rowwise {\n"
	"  input %x : f32[b, s, 48]\n"
	"  %x8, %x8t, %si, %sit, %amax = CastTranspose(%x) {to=e4m3, block=[1, 0]}\n"
	"  output %x8, %x8t, %si, %sit, %amax\n"
	"}\n";

static const char cast_1x128[] =
	"graph cast_1x128 {\n"
	"  input %x : bf16[2, 128, 384]\n"
	"  %x8, %x8t, %si, %sit, %amax = CastTranspose(%x) {to=e5m2, block=[1, 128]}\n"
	"  output %x8, %x8t, %si, %sit, %amax\n"
	"}\n";

static const char cast_128x128[] =
	"graph cast_128x128 {\n"
	"  input %w : f32[384, 256]\n"
	"  %w8, %w8t, %si, %sit, %amax = CastTranspose(%w) {to=e4m3, block=[128, 128]}\n"
	"  output %w8, %w8t, %si, %sit, %amax\n"
	"}\n";

static const char cast_mx[] =
	"graph cast_mx {\n"
	"  input %x : f32[64, 96]\n"
	"  %x8, %x8t, %si, %sit, %amax = CastTranspose(%x) {to=e4m3, block=[1, 32], "
	"scale_dtype=e8m0}\n"
	"  output %x8, %x8t, %si, %sit, %amax\n"
	"}\n";

static const char quantize_mx_e5m2[] =
	"graph quantize_mx_e5m2 {\n"
	"  input %x : bf16[s, 80]\n"
	"  %x8, %si = Quantize(%x) {to=e5m2, block=[1, 32], scale_dtype=e8m0}\n"
	"  output %x8, %si\n"
	"}\n";

/* The mixture-of-experts ops (codegen/lower_moe.c), each a group of its own: tokens `s` (40)
 * and positions by counting, so symbolic sizes; bf16 logits tie often (8-bit mantissas), and
 * the ties must break as the reference's do; the indices of the permutations (random in
 * [0, 4)) repeat within a token, which they take as the reference does, RouterGrad's are its
 * forward's (make_indices_consistent). */
static const char moe_router[] =
	"graph moe_router {\n"
	"  input %logits : f32[s, 8]\n"
	"  %probs, %experts = Router(%logits) {top_k=2, normalize=1}\n"
	"  output %probs, %experts\n"
	"}\n";

static const char moe_router_ties[] =
	"graph moe_router_ties {\n"
	"  input %logits : bf16[s, 6]\n"
	"  %probs, %experts = Router(%logits) {top_k=3}\n"
	"  output %probs, %experts\n"
	"}\n";

static const char moe_router_grad[] =
	"graph moe_router_grad {\n"
	"  input %dprobs : f32[s, 2]\n"
	"  input %logits : bf16[s, 4]\n"
	"  input %probs : f32[s, 2]\n"
	"  input %experts : i64[s, 2]\n"
	"  %dlogits = RouterGrad(%dprobs, %logits, %probs, %experts) {top_k=2, normalize=1}\n"
	"  output %dlogits\n"
	"}\n";

static const char moe_router_grad_sigmoid[] =
	"graph moe_router_grad_sigmoid {\n"
	"  input %dprobs : f32[s, 3]\n"
	"  input %logits : f32[s, 4]\n"
	"  input %probs : f32[s, 3]\n"
	"  input %experts : i32[s, 3]\n"
	"  %dlogits = RouterGrad(%dprobs, %logits, %probs, %experts) {top_k=3, score=\"sigmoid\"}\n"
	"  output %dlogits\n"
	"}\n";

static const char moe_dispatch[] =
	"graph moe_dispatch {\n"
	"  input %x : bf16[s, 24]\n"
	"  input %experts : i64[s, 2]\n"
	"  %rows, %counts = MoEDispatch(%x, %experts) {experts=4}\n"
	"  output %rows, %counts\n"
	"}\n";

static const char moe_dispatch_grad[] =
	"graph moe_dispatch_grad {\n"
	"  input %dy : f32[2*s, 24]\n"
	"  input %experts : i64[s, 2]\n"
	"  %dx = MoEDispatchGrad(%dy, %experts) {experts=4}\n"
	"  output %dx\n"
	"}\n";

static const char moe_combine[] =
	"graph moe_combine {\n"
	"  input %y : bf16[2*s, 24]\n"
	"  input %probs : f32[s, 2]\n"
	"  input %experts : i64[s, 2]\n"
	"  %out = MoECombine(%y, %probs, %experts)\n"
	"  output %out\n"
	"}\n";

static const char moe_combine_grad[] =
	"graph moe_combine_grad {\n"
	"  input %dout : f32[s, 24]\n"
	"  input %y : f32[2*s, 24]\n"
	"  input %probs : f32[s, 2]\n"
	"  input %experts : i64[s, 2]\n"
	"  %dy, %dprobs = MoECombineGrad(%dout, %y, %probs, %experts)\n"
	"  output %dy, %dprobs\n"
	"}\n";

/* A label outside the vocabulary, an id outside the embedding table: the generated kernels
 * flag it and the run fails naming the row (position 4 of integer input `name`, 77), as the
 * reference kernel fails. */
static void check_data_error(const char *title, const char *text, f8_kernel_family family,
			     const char *name, const char *message) {
	printf("%s\n", title);
	f8_graph *graph = NULL;
	f8_diag diag = {0};
	uint32_t group = 0;
	f8_cpu_generated *generated = NULL;
	f8_status status = f8_text_parse(text, strlen(text), title, &graph, &diag);
	if (!status)
		status = f8_pipeline_run(graph, "canonicalize", true, &diag);
	if (!status)
		status = f8_graph_add_group(graph, "k0", family, "", &group, &diag);
	for (uint32_t i = 0; !status && i < graph->n_order; i++)
		graph->nodes[graph->order[i]].group = group;
	if (!status)
		status = f8_cpu_generated_create(graph, kernel_cache(), &generated, &diag);
	CHECK(status == F8_OK);
	int64_t symbols[4] = {6, 1, 1, 1}; // 6 rows or positions
	f8_rt_tensor *tensors = f8_calloc(graph ? graph->n_values : 1, sizeof *tensors);
	for (uint32_t v = 0; !status && v < graph->n_values; v++) {
		f8_rt_tensor *made = make_tensor(graph, v, symbols);
		CHECK(made != NULL);
		if (!made)
			break;
		tensors[v] = *made;
		f8_free(made);
		for (int64_t i = 0; i < f8_rt_tensor_numel(&tensors[v]); i++)
			f8_rt_tensor_set(&tensors[v], i, tensors[v].dtype == F8_DTYPE_I64 ? i : normal());
	}
	if (!status) {
		f8_rt_tensor_set(&tensors[f8_graph_find_value(graph, name, strlen(name))], 4, 77);
		status = f8_cpu_generated_run_tensors(generated, group, tensors, symbols, &diag);
		printf("  %s\n", diag.message);
		CHECK(status == F8_ERR_ARGUMENT);
		CHECK(strstr(diag.message, message) && strstr(diag.message, "row 4"));
	}
	for (uint32_t v = 0; graph && tensors && v < graph->n_values; v++)
		f8_rt_tensor_destroy(&tensors[v]);
	f8_free(tensors);
	f8_cpu_generated_destroy(generated);
	f8_graph_destroy(graph);
}

/*
 * AdamW's generated kernel against the reference bit for bit, at every step from 1 to 3000
 * and three learning rates: its scalars (the bias corrections, the decay) are computed in
 * double-float arithmetic and must round to the floats the reference's double arithmetic
 * rounds to (codegen/lower_optimizer.c), and the update's f32 arithmetic is the reference's op
 * for op.
 */
static void adamw_exact(const char *title, const char *text, int64_t steps) {
	printf("%s\n", title);
	uint32_t group;
	f8_graph *graph = test_one_group(title, text, F8_KERNEL_FAMILY_OPTIMIZER, &group);
	if (!graph)
		return;
	f8_diag diag = {0};
	f8_cpu_generated *generated = NULL;
	f8_status status = f8_cpu_generated_create(graph, kernel_cache(), &generated, &diag);
	CHECK(status == F8_OK);
	if (status) {
		f8_diag_print(&diag, stdout);
		f8_graph_destroy(graph);
		return;
	}
	int64_t symbols[1] = {0};
	values v = {.tensor = f8_calloc(graph->n_values, sizeof *v.tensor), .n = graph->n_values};
	f8_rt_tensor *tensors = f8_calloc(graph->n_values, sizeof *tensors);
	for (uint32_t i = 0; i < graph->n_values; i++) { // the inputs once, the outputs' storage
		f8_rt_tensor *made = make_tensor(graph, i, symbols);
		CHECK(made != NULL);
		tensors[i] = *made;
		f8_free(made);
		if (graph->values[i].producer != F8_NONE)
			continue;
		input_kind kind = strstr(graph->values[i].name, ".v") ? INPUT_MOMENT
				  : strcmp(graph->values[i].name, "clip") == 0 ? INPUT_GRAD_SCALE
									  : INPUT_PLAIN;
		fill_random(graph, i, kind, 0, &tensors[i]);
		v.tensor[i] = &tensors[i];
	}
	const double rates[3] = {3e-4, 1e-3, 6e-3};
	f8_value_id lr = f8_graph_find_value(graph, "lr", 2), step = f8_graph_find_value(graph, "step", 4);
	int64_t differ = 0, compared = 0;
	for (int64_t t = 1; t <= steps; t++) {
		f8_rt_tensor_set(&tensors[lr], 0, rates[t % 3]);
		f8_rt_tensor_set(&tensors[step], 0, (double)t);
		values reference = {.tensor = f8_calloc(graph->n_values, sizeof *v.tensor),
				    .n = graph->n_values};
		for (uint32_t i = 0; i < graph->n_values; i++)
			if (graph->values[i].producer == F8_NONE) // borrowed, not freed below
				reference.tensor[i] = v.tensor[i];
		status = f8_cpu_generated_run_tensors(generated, group, tensors, symbols, &diag);
		if (!status)
			status = run_reference(graph, group, symbols, &reference, &diag);
		for (uint32_t i = 0; !status && i < graph->n_values; i++) {
			if (graph->values[i].producer == F8_NONE || !reference.tensor[i])
				continue;
			compared++;
			differ += memcmp(tensors[i].data, reference.tensor[i]->data,
					 reference.tensor[i]->n_bytes) != 0;
		}
		for (uint32_t i = 0; i < graph->n_values; i++)
			if (graph->values[i].producer == F8_NONE)
				reference.tensor[i] = NULL;
		free_values(&reference);
		if (status)
			break;
	}
	if (status)
		f8_diag_print(&diag, stdout);
	printf("  %lld of %lld outputs differ\n", (long long)differ, (long long)compared);
	CHECK(status == F8_OK && differ == 0);
	for (uint32_t i = 0; i < graph->n_values; i++)
		f8_rt_tensor_destroy(&tensors[i]);
	f8_free(tensors);
	f8_free(v.tensor);
	f8_cpu_generated_destroy(generated);
	f8_graph_destroy(graph);
}

/*
 * The multi-tensor AdamW's PTX stores each zeroed gradient last: in every basic block, no
 * global load and no other store follows the store of a zero, so that ptxas schedules it after
 * the stores of param', m' and v', which wait for every load. Stored straight
 * after the loads, while the gradient's own load was in flight, the store made the kernel 4.6x
 * slower on an H100 (7.29 against 1.57 ms for gpt2-124m; tools/bench_gpu.md, "The optimizer's
 * gradient zeroing"), with the same results: only this test can see it on a machine without a
 * GPU.
 */
static void check_adamw_zeroing_last(void) {
	printf("AdamW's PTX: each gradient zeroed last, after param', m' and v'\n");
	uint32_t group;
	f8_graph *graph = test_one_group("adamw_multi", adamw_multi, F8_KERNEL_FAMILY_OPTIMIZER, &group);
	if (!graph)
		return;
	f8_diag diag = {0};
	f8_lowered_group lowered = {0};
	f8_status status = f8_codegen_lower_group(graph, group, &lowered, &diag);
	uint32_t zero_stores = 0, late = 0; // loads and other stores after a zero's, in its block
	for (uint32_t l = 0; !status && l < lowered.n_launches; l++) {
		const f8_kernel *kernel = lowered.launches[l].kernel;
		char *ptx = NULL;
		f8_launch_geometry geometry;
		if ((status = f8_nvptx_compile(&kernel, 1, NULL, &ptx, &geometry, &diag)))
			break;
		bool zeroed = false;  // a zero stored earlier in this basic block
		char zeros[8][24];    // the registers LLVM keeps zeros in (`mov.b32 %r4, 0;`)
		int n_zeros = 0;
		for (char *line = strtok(ptx, "\n"); line; line = strtok(NULL, "\n")) {
			char reg[16];
			if (sscanf(line, " mov.b32 %15[^,], 0;", reg) == 1 && n_zeros < 8)
				snprintf(zeros[n_zeros++], sizeof zeros[0], ", %s;", reg);
			if (strncmp(line, "$L__BB", 6) == 0)
				zeroed = false;
			bool store = strstr(line, "st.global") != NULL;
			bool of_zero = store && (strstr(line, ", 0f00000000;") || strstr(line, ", 0;"));
			for (int z = 0; store && z < n_zeros; z++)
				of_zero |= strstr(line, zeros[z]) != NULL;
			late += zeroed && (strstr(line, "ld.global") || (store && !of_zero));
			if (of_zero) {
				zero_stores++;
				zeroed = true;
			}
		}
		f8_free(ptx);
	}
	if (status)
		f8_diag_print(&diag, stdout);
	printf("  %u stores of a zero, %u loads or other stores after one in its block\n",
	       zero_stores, late);
	CHECK(status == F8_OK && zero_stores >= 1 && late == 0);
	f8_lowered_group_release(&lowered);
	f8_graph_destroy(graph);
}

static void check_adamw_exact(void) {
	adamw_exact("AdamW bit for bit at steps 1 to 3000", adamw_multi, 3000);
}

/* Appends printf-style text to the growing *text (its length *used, capacity *capacity). */
static void append(char **text, size_t *used, size_t *capacity, const char *format, ...)
	__attribute__((format(printf, 4, 5)));
static void append(char **text, size_t *used, size_t *capacity, const char *format, ...) {
	for (;;) {
		va_list args;
		va_start(args, format);
		int n = vsnprintf(*text + *used, *capacity - *used, format, args);
		va_end(args);
		if (n >= 0 && (size_t)n < *capacity - *used) {
			*used += (size_t)n;
			return;
		}
		*capacity = 2 * *capacity + (size_t)(n > 0 ? n : 0);
		*text = f8_realloc(*text, *capacity);
		CHECK(*text != NULL);
	}
}

/*
 * An optimizer of `n` parameters of odd sizes (1 to 9000 elements: one chunk of the kernel's
 * 4096 and several, and the last one partial), f32 and bf16, weight decays 0, 0.1 and 0.01
 * (a table column), some without the clipping factor, some with other betas and epsilon, some
 * without a zeroing, and a zeroing of no parameter's gradient: more kinds of tensor than one
 * launch takes (codegen/lower_optimizer.c's variants), so it is cut into several, each with
 * its table. The text, f8_malloc'd.
 */
static char *adamw_many_text(uint32_t n) {
	size_t used = 0, capacity = 4096;
	char *text = f8_malloc(capacity);
	CHECK(text != NULL);
	text[0] = '\0';
	append(&text, &used, &capacity, "graph adamw_many {\n  input %%lr : f32[]\n"
	       "  input %%step : i64[]\n  input %%clip : f32[]\n  state %%orphan : f32[77]\n");
	for (uint32_t i = 0; i < n; i++) {
		uint32_t numel = 1 + (i * 7919u) % 9000u;
		const char *dtype = i % 5 == 1 ? "bf16" : "f32";
		append(&text, &used, &capacity, "  param %%p%u : %s[%u]\n  state %%p%u.grad : %s[%u]\n"
		       "  state %%p%u.m : f32[%u]\n  state %%p%u.v : f32[%u]\n", i, dtype, numel, i,
		       dtype, numel, i, numel, i, numel);
	}
	for (uint32_t i = 0; i < n; i++) {
		uint32_t numel = 1 + (i * 7919u) % 9000u;
		const char *dtype = i % 5 == 1 ? "bf16" : "f32";
		const char *decay = i % 3 == 0 ? "0" : i % 3 == 1 ? "0.1" : "0.01";
		const char *betas = i % 50 == 7 ? "beta1=0.8, beta2=0.95, epsilon=1e-06, " : "";
		append(&text, &used, &capacity, "  %%p%u.n, %%p%u.mn, %%p%u.vn = AdamW(%%p%u, %%p%u.grad, "
		       "%%p%u.m, %%p%u.v, %%lr, %%step%s) {%sweight_decay=%s}\n", i, i, i, i, i, i, i,
		       i % 7 == 3 ? "" : ", %clip", betas, decay);
		if (i % 4 != 3)
			append(&text, &used, &capacity, "  %%p%u.zero = ConstantOfShape() {shape=[%u], "
			       "value=%s[](0)}\n", i, numel, dtype);
	}
	append(&text, &used, &capacity, "  %%orphan.zero = ConstantOfShape() {shape=[77], "
	       "value=f32[](0.5)}\n  output");
	for (uint32_t i = 0; i < n; i++)
		append(&text, &used, &capacity, "%s %%p%u.n, %%p%u.mn, %%p%u.vn", i ? "," : "", i, i, i);
	append(&text, &used, &capacity, "\n  update %%orphan <- %%orphan.zero\n");
	for (uint32_t i = 0; i < n; i++)
		if (i % 4 != 3)
			append(&text, &used, &capacity, "  update %%p%u.grad <- %%p%u.zero\n", i, i);
	append(&text, &used, &capacity, "}\n");
	return text;
}

/* 300 parameters (adamw_many_text): within the rule of f8_case_compare, then bit for bit at steps
 * 1 to 40. */
static void check_adamw_many(void) {
	char *text = adamw_many_text(300);
	check_text_group("AdamW of 300 parameters + zeroing: launches of tables", text,
			 F8_KERNEL_FAMILY_OPTIMIZER);
	adamw_exact("AdamW of 300 parameters bit for bit at steps 1 to 40", text, 40);
	check_form("AdamW of 300 parameters: more variants than a launch takes", text,
		   F8_KERNEL_FAMILY_OPTIMIZER, 2, NULL, F8_DTYPE_UNDEFINED);
	f8_free(text);
}

/* A model's training step through the whole pipeline (batch x seq tokens), with --bf16 when
 * `bf16`: every group it fused. */
static void check_model_with(const char *source_dir, const char *model, int64_t batch,
			     int64_t seq, const f8_fp8_options *fp8, bool bf16) {
	printf("%s %s%s%s%s\n", model, fp8 ? "FP8 (HYBRID, " : "without FP8",
	       fp8 ? f8_recipe_name(fp8->recipe) : "", fp8 ? ")" : "", bf16 ? ", --bf16" : "");
	char path[512];
	snprintf(path, sizeof path, "%s/models/%s.json", source_dir, model);
	const f8_dim_binding dims[] = {{"batch", batch}, {"seq", seq}};
	f8_frontend_options options = {.dims = dims, .n_dims = 2, .seed = 1};
	f8_training_options training = f8_training_options_default();
	f8_pipeline_options compile_options = {.training = &training, .fp8 = fp8, .bf16 = bf16,
					       .target = f8_codegen_target_table_for(fp8)};
	f8_graph *graph = NULL;
	f8_diag diag = {0};
	f8_status status = f8_frontend_load(path, &options, &graph, &diag);
	if (!status)
		status = f8_pipeline_run_with(graph, NULL, true, &compile_options, NULL, &diag);
	if (status) {
		f8_diag_print(&diag, stdout);
		CHECK(status == F8_OK);
		f8_graph_destroy(graph);
		return;
	}
	CHECK(graph->n_groups > 0);
	int64_t symbols[8] = {0};
	check_groups(graph, symbols);
	printf("  %u groups checked\n", graph->n_groups);
	f8_graph_destroy(graph);
}

static void check_model(const char *source_dir, const char *model, int64_t batch, int64_t seq,
			const f8_fp8_options *fp8) {
	check_model_with(source_dir, model, batch, seq, fp8, false);
}

/* ---- f32 attention in primitives (passes/attention_unfused.c): the softmax family and the
 * causal bias's Trilu (layout), each against its reference kernel. ---- */

/* Rows of symbolic count (b * h * s), 40 keys: a block loop shorter than a block. */
static const char softmax_rows[] =
	"graph softmax_rows {\n"
	"  input %x : f32[b, 4, s, 40]\n"
	"  %y = Softmax(%x) {axis=-1}\n"
	"  output %y\n"
	"}\n";

/* BF16 rows of 300: several columns a thread, one rounding at the store. */
static const char softmax_bf16[] =
	"graph softmax_bf16 {\n"
	"  input %x : bf16[s, 300]\n"
	"  %y = Softmax(%x)\n"
	"  output %y\n"
	"}\n";

static const char softmax_grad[] =
	"graph softmax_grad {\n"
	"  input %dy : f32[b, 2, s, 33]\n"
	"  input %y : f32[b, 2, s, 33]\n"
	"  %dx = SoftmaxGrad(%dy, %y) {axis=-1}\n"
	"  output %dx\n"
	"}\n";

/* The causal bias of 7 queries over 9 keys (k = skv - sq + 1), and a lower triangle of a
 * batch of symbolic matrices. */
static const char trilu_upper[] =
	"graph trilu_upper {\n"
	"  input %x : f32[7, 9]\n"
	"  %y = Trilu(%x) {upper=1, k=3}\n"
	"  output %y\n"
	"}\n";

static const char trilu_lower[] =
	"graph trilu_lower {\n"
	"  input %x : f32[b, s, 5]\n"
	"  %y = Trilu(%x) {upper=0, k=-1}\n"
	"  output %y\n"
	"}\n";

/* The vocabulary-parallel ops against their reference kernels, each four times (fresh starts:
 * the first shard, the last, one between), and their data errors. */
static void check_vocabulary_parallel(void) {
	static const struct {
		const char *title, *text;
		f8_kernel_family family;
	} groups[] = {
		{"Embedding of a vocabulary shard (bf16 table)", embedding_shard,
		 F8_KERNEL_FAMILY_EMBEDDING},
		{"Embedding of a vocabulary shard (f32 table, i32 ids)", embedding_shard_f32,
		 F8_KERNEL_FAMILY_EMBEDDING},
		{"EmbeddingGrad of a vocabulary shard (f32 dw, atomics)", embedding_grad_shard,
		 F8_KERNEL_FAMILY_EMBEDDING_GRAD},
		{"EmbeddingGrad of a vocabulary shard (bf16 dw: f32 sums, then rounded)",
		 embedding_grad_shard_bf16, F8_KERNEL_FAMILY_EMBEDDING_GRAD},
		{"CrossEntropyShard (columns of 120)", cross_entropy_shard,
		 F8_KERNEL_FAMILY_CROSS_ENTROPY},
		{"CrossEntropyShard (bf16, shards of 1500 of 4000)", cross_entropy_shard_bf16,
		 F8_KERNEL_FAMILY_CROSS_ENTROPY},
		{"CrossEntropyMerge (mean)", cross_entropy_merge, F8_KERNEL_FAMILY_CROSS_ENTROPY},
		{"CrossEntropyMerge (none, bf16 maxima)", cross_entropy_merge_none,
		 F8_KERNEL_FAMILY_CROSS_ENTROPY},
		{"CrossEntropyMerge (sum, i32 labels)", cross_entropy_merge_sum,
		 F8_KERNEL_FAMILY_CROSS_ENTROPY},
		{"CrossEntropyMergeGrad (mean)", cross_entropy_merge_grad,
		 F8_KERNEL_FAMILY_CROSS_ENTROPY},
		{"CrossEntropyMergeGrad (none)", cross_entropy_merge_grad_none,
		 F8_KERNEL_FAMILY_CROSS_ENTROPY},
		{"CrossEntropyShardGrad (bf16 logits)", cross_entropy_shard_grad,
		 F8_KERNEL_FAMILY_CROSS_ENTROPY},
		{"CrossEntropyShardGrad (f32, shards of 700)", cross_entropy_shard_grad_f32,
		 F8_KERNEL_FAMILY_CROSS_ENTROPY},
	};
	for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++)
		for (int run = 0; run < 4; run++)
			check_text_group(groups[i].title, groups[i].text, groups[i].family);
	check_data_error("Embedding of a vocabulary shard with an id outside the vocabulary",
			 embedding_shard, F8_KERNEL_FAMILY_EMBEDDING, "ids",
			 "outside the embedding table");
	check_data_error("CrossEntropyShard with a label outside the vocabulary",
			 cross_entropy_shard_small, F8_KERNEL_FAMILY_CROSS_ENTROPY, "labels",
			 "outside the vocabulary");
}

/* The shard pass's NanToInf on an amax before its max over ranks, fused into the kernel that
 * computes the amax (passes/fuse.c guards_amax, codegen f8_lower_amax_guard): of a cast alone,
 * of a norm's, of an elementwise chain's, of a GeluGrad's (tiled, with the bias gradient), of
 * the norm_grad and SwiGLU kernels' and of an Amax alone; and NanToInf as an elementwise op of
 * its own. */
static const char guarded_cast[] =
	"graph guarded_cast {\n"
	"  input %x : f32[s, 48]\n"
	"  scale %table : f32[4]\n"
	"  %x8, %x8t, %si, %sit, %amax = CastTranspose(%x, %table) {to=e4m3, slot=3}\n"
	"  %inf = NanToInf(%amax)\n"
	"  output %x8, %x8t, %si, %sit, %inf\n"
	"}\n";

static const char guarded_norm[] =
	"graph guarded_norm {\n"
	"  input %x : bf16[b, s, 72]\n"
	"  input %gamma : bf16[72]\n"
	"  scale %table : f32[2]\n"
	"  %n, %rstd = RMSNorm(%x, %gamma) {epsilon=1e-06}\n"
	"  %n8, %si, %amax = Quantize(%n, %table) {to=e4m3, slot=1}\n"
	"  %inf = NanToInf(%amax)\n"
	"  output %n8, %si, %inf, %rstd\n"
	"}\n";

static const char guarded_chain[] =
	"graph guarded_chain {\n"
	"  input %x : f32[b, s, 40]\n"
	"  input %bias : f32[40]\n"
	"  scale %table : f32[2]\n"
	"  %h = Add(%x, %bias)\n"
	"  %a = Sigmoid(%h)\n"
	"  %a8, %si, %amax = Quantize(%a, %table) {to=e4m3, slot=0}\n"
	"  %h8, %hsi, %hamax = Quantize(%h, %table) {to=e4m3, slot=1}\n"
	"  %inf = NanToInf(%amax)\n"
	"  %hinf = NanToInf(%hamax)\n"
	"  output %a8, %si, %inf, %h8, %hsi, %hinf\n"
	"}\n";

static const char guarded_gelu_grad[] =
	"graph guarded_gelu_grad {\n"
	"  input %dy : f32[b, s, 64]\n"
	"  input %h : f32[b, s, 64]\n"
	"  scale %table : f32[2]\n"
	"  %dh = GeluGrad(%dy, %h)\n"
	"  %dh8, %dh8t, %si, %sit, %amax = CastTranspose(%dh, %table) {to=e5m2, slot=1}\n"
	"  %dbias = ReduceSum(%dh) {axes=[0, 1], keepdims=0}\n"
	"  %inf = NanToInf(%amax)\n"
	"  output %dh8, %dh8t, %si, %sit, %inf, %dbias\n"
	"}\n";

static const char guarded_norm_grad[] =
	"graph guarded_norm_grad {\n"
	"  input %dy : f32[b, s, 96]\n"
	"  input %x : f32[b, s, 96]\n"
	"  input %gamma : f32[96]\n"
	"  input %mean : f32[b, s, 1]\n"
	"  input %rstd : f32[b, s, 1]\n"
	"  scale %table : f32[2]\n"
	"  %dx, %dgamma, %dbeta = LayerNormGrad(%dy, %x, %gamma, %mean, %rstd) {epsilon=1e-05}\n"
	"  %dx8, %dx8t, %si, %sit, %amax = CastTranspose(%dx, %table) {to=e5m2, slot=1}\n"
	"  %inf = NanToInf(%amax)\n"
	"  output %dx8, %dx8t, %si, %sit, %inf, %dgamma, %dbeta\n"
	"}\n";

static const char guarded_swiglu[] =
	"graph guarded_swiglu {\n"
	"  input %x : f32[b, s, 160]\n"
	"  scale %table : f32[2]\n"
	"  %y = SwiGLU(%x)\n"
	"  %y8, %y8t, %si, %sit, %amax = CastTranspose(%y, %table) {to=e4m3, slot=0}\n"
	"  %inf = NanToInf(%amax)\n"
	"  output %y8, %y8t, %si, %sit, %inf\n"
	"}\n";

static const char guarded_amax[] =
	"graph guarded_amax {\n"
	"  input %x : bf16[b, s, 40]\n"
	"  %amax = Amax(%x)\n"
	"  %inf = NanToInf(%amax)\n"
	"  output %inf\n"
	"}\n";

static const char nan_to_inf_alone[] =
	"graph nan_to_inf_alone {\n"
	"  input %x : bf16[s, 48]\n"
	"  %y = NanToInf(%x)\n"
	"  output %y\n"
	"}\n";

/* Each group with normal inputs (the guards change nothing) and with a NaN planted in each
 * plain input (the guards' outputs +inf, as the reference's NanToInf makes the amax's NaN). */
static void check_guarded_amaxes(void) {
	static const struct {
		const char *title, *text;
		f8_kernel_family family;
	} groups[] = {
		{"CastTranspose + NanToInf of its amax", guarded_cast, F8_KERNEL_FAMILY_CAST},
		{"RMSNorm (bf16) + Quantize + NanToInf of its amax", guarded_norm,
		 F8_KERNEL_FAMILY_NORM},
		{"Add, Sigmoid + two Quantizes + NanToInf of their amaxes", guarded_chain,
		 F8_KERNEL_FAMILY_ELEMENTWISE},
		{"GeluGrad + CastTranspose + dbias + NanToInf of its amax", guarded_gelu_grad,
		 F8_KERNEL_FAMILY_ACTIVATION_GRAD},
		{"LayerNormGrad + CastTranspose of dx + NanToInf of its amax", guarded_norm_grad,
		 F8_KERNEL_FAMILY_NORM_GRAD},
		{"SwiGLU (packed) + CastTranspose + NanToInf of its amax", guarded_swiglu,
		 F8_KERNEL_FAMILY_ACTIVATION},
		{"Amax (bf16) + NanToInf", guarded_amax, F8_KERNEL_FAMILY_REDUCE},
		{"NanToInf alone (bf16)", nan_to_inf_alone, F8_KERNEL_FAMILY_ELEMENTWISE},
	};
	for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++)
		for (int run = 0; run < 4; run++) {
			plant_nan = run % 2 == 1;
			if (plant_nan)
				printf("(a NaN in each input) ");
			check_text_group(groups[i].title, groups[i].text, groups[i].family);
		}
	plant_nan = false;
}

static void check_softmax_family(void) {
	check_text_group("Softmax over 40 keys, symbolic rows", softmax_rows,
			 F8_KERNEL_FAMILY_SOFTMAX);
	check_text_group("Softmax (bf16) over rows of 300", softmax_bf16, F8_KERNEL_FAMILY_SOFTMAX);
	check_text_group("SoftmaxGrad over 33 keys", softmax_grad, F8_KERNEL_FAMILY_SOFTMAX);
	check_text_group("Trilu, the upper triangle from k=3 (a causal bias)", trilu_upper,
			 F8_KERNEL_FAMILY_LAYOUT);
	check_text_group("Trilu, the lower triangle to k=-1, symbolic batch", trilu_lower,
			 F8_KERNEL_FAMILY_LAYOUT);
}

int main(int argc, char **argv) {
	if (argc != 2) {
		fprintf(stderr, "usage: test_lower_groups SOURCE_DIR\n");
		return 2;
	}
	const char *fixed = getenv("F8_TEST_SEED");
	seed = fixed ? (unsigned)strtoul(fixed, NULL, 10) : (unsigned)time(NULL);
	printf("seed %u (F8_TEST_SEED=%u repeats this run)\n", seed, seed);
	check_text_group("elementwise chain, broadcast", chain, F8_KERNEL_FAMILY_ELEMENTWISE);
	check_guarded_amaxes();
	check_text_group("LayerNorm + CastTranspose", layer_norm_cast, F8_KERNEL_FAMILY_NORM);
	check_text_group("LayerNorm + CastTranspose, codes transposed as words",
			 layer_norm_cast_words, F8_KERNEL_FAMILY_NORM);
	check_text_group("RMSNorm (bf16) + CastTranspose E5M2 through scratch, as words",
			 rms_norm_cast_words, F8_KERNEL_FAMILY_NORM);
	check_form("LayerNorm + CastTranspose: a transposing kernel of i32 words",
		   layer_norm_cast_words, F8_KERNEL_FAMILY_NORM, 2, NULL, F8_DTYPE_I32);
	check_form("RMSNorm + CastTranspose: a transposing kernel of i32 words", rms_norm_cast_words,
		   F8_KERNEL_FAMILY_NORM, 2, NULL, F8_DTYPE_I32);
	check_text_group("RMSNorm (bf16) + Quantize", rms_norm_quantize, F8_KERNEL_FAMILY_NORM);
	check_text_group("GeluGrad + CastTranspose + dbias", gelu_grad_cast,
			 F8_KERNEL_FAMILY_ACTIVATION_GRAD);
	check_text_group("elementwise rows of 320, broadcast (bf16)", broadcast_rows,
			 F8_KERNEL_FAMILY_ELEMENTWISE);
	check_text_group("CastTranspose alone", cast_only, F8_KERNEL_FAMILY_CAST);
	check_text_group("CrossEntropy (mean)", cross_entropy, F8_KERNEL_FAMILY_CROSS_ENTROPY);
	check_text_group("CrossEntropy, vocabulary of 20000 in segments (mean)",
			 cross_entropy_segments, F8_KERNEL_FAMILY_CROSS_ENTROPY);
	check_text_group("CrossEntropy, vocabulary of 20004 in segments (bf16, none)",
			 cross_entropy_segments_bf16, F8_KERNEL_FAMILY_CROSS_ENTROPY);
	check_form("CrossEntropy of 20000: a segments kernel", cross_entropy_segments,
		   F8_KERNEL_FAMILY_CROSS_ENTROPY, 3, "_segments", F8_DTYPE_UNDEFINED);
	check_form("CrossEntropy of 20004 (none): a segments kernel", cross_entropy_segments_bf16,
		   F8_KERNEL_FAMILY_CROSS_ENTROPY, 2, "_segments", F8_DTYPE_UNDEFINED);
	check_text_group("CrossEntropy, symbolic vocabulary (sum)", cross_entropy_symbolic,
			 F8_KERNEL_FAMILY_CROSS_ENTROPY);
	check_text_group("CrossEntropyGrad (bf16 logits)", cross_entropy_grad,
			 F8_KERNEL_FAMILY_CROSS_ENTROPY);
	check_text_group("ScalingUpdate (4 slots, margin 1)", scaling_update,
			 F8_KERNEL_FAMILY_SCALING);
	check_text_group("LayerNormGrad + CastTranspose of dx", layer_norm_grad_cast,
			 F8_KERNEL_FAMILY_NORM_GRAD);
	check_text_group("RMSNormGrad (bf16) + Quantize of dx", rms_norm_grad_bf16,
			 F8_KERNEL_FAMILY_NORM_GRAD);
	check_text_group("SwiGLU (packed) + CastTranspose", swiglu_packed_cast,
			 F8_KERNEL_FAMILY_ACTIVATION);
	check_text_group("SwiGLU (gate, up; bf16) + Quantize", swiglu_two_bf16,
			 F8_KERNEL_FAMILY_ACTIVATION);
	check_text_group("SwiGLUGrad (packed) + CastTranspose of dx", swiglu_grad_packed_cast,
			 F8_KERNEL_FAMILY_ACTIVATION_GRAD);
	check_text_group("SwiGLUGrad (two outputs, bf16) + casts of both",
			 swiglu_grad_two_cast, F8_KERNEL_FAMILY_ACTIVATION_GRAD);
	check_text_group("Embedding (bf16 table)", embedding, F8_KERNEL_FAMILY_EMBEDDING);
	check_text_group("EmbeddingGrad (f32 dw, atomics)", embedding_grad,
			 F8_KERNEL_FAMILY_EMBEDDING_GRAD);
	check_text_group("EmbeddingGrad (bf16 dw: f32 sums, then rounded)", embedding_grad_bf16,
			 F8_KERNEL_FAMILY_EMBEDDING_GRAD);
	check_vocabulary_parallel();
	check_text_group("CastTranspose, current scaling", cast_current, F8_KERNEL_FAMILY_CAST);
	check_text_group("Quantize, current scaling (bf16, margin 2)", quantize_current_bf16,
			 F8_KERNEL_FAMILY_CAST);
	check_text_group("CastTranspose, rowwise", cast_rowwise, F8_KERNEL_FAMILY_CAST);
	check_text_group("CastTranspose, 1x128 blocks (bf16)", cast_1x128, F8_KERNEL_FAMILY_CAST);
	check_text_group("CastTranspose, 128x128 blocks", cast_128x128, F8_KERNEL_FAMILY_CAST);
	check_text_group("CastTranspose, MX 1x32 (e8m0 scales)", cast_mx, F8_KERNEL_FAMILY_CAST);
	check_text_group("Quantize, MX 1x32 E5M2 (bf16, a partial block)", quantize_mx_e5m2,
			 F8_KERNEL_FAMILY_CAST);
	check_text_group("AdamW of 3 parameters + zeroing: one multi-tensor kernel", adamw_multi,
			 F8_KERNEL_FAMILY_OPTIMIZER);
	check_text_group("Router (softmax, top-2 of 8, normalized)", moe_router,
			 F8_KERNEL_FAMILY_MOE);
	check_text_group("Router (bf16 logits: ties, top-3 of 6)", moe_router_ties,
			 F8_KERNEL_FAMILY_MOE);
	check_text_group("RouterGrad (bf16 logits, normalized)", moe_router_grad,
			 F8_KERNEL_FAMILY_MOE);
	check_text_group("RouterGrad (sigmoid, i32 indices)", moe_router_grad_sigmoid,
			 F8_KERNEL_FAMILY_MOE);
	check_text_group("MoEDispatch (bf16 rows, counts)", moe_dispatch, F8_KERNEL_FAMILY_MOE);
	check_text_group("MoEDispatchGrad", moe_dispatch_grad, F8_KERNEL_FAMILY_MOE);
	check_text_group("MoECombine (bf16 rows)", moe_combine, F8_KERNEL_FAMILY_MOE);
	check_text_group("MoECombineGrad", moe_combine_grad, F8_KERNEL_FAMILY_MOE);
	check_adamw_exact();
	check_adamw_zeroing_last();
	check_adamw_many();
	check_data_error("CrossEntropy with a label outside the vocabulary", cross_entropy,
			 F8_KERNEL_FAMILY_CROSS_ENTROPY, "labels", "outside the vocabulary");
	check_data_error("Embedding with an id outside the table", embedding,
			 F8_KERNEL_FAMILY_EMBEDDING, "ids", "outside the embedding table");
	check_data_error("EmbeddingGrad with an id outside the table", embedding_grad,
			 F8_KERNEL_FAMILY_EMBEDDING_GRAD, "ids", "outside the embedding table");
	check_softmax_family();
	// Without FP8 for sm_90: f32 attention in MatMuls, Softmax and Trilu (attention-unfused).
	check_model(argv[1], "gpt-tiny", 2, 24, NULL);
	f8_fp8_options fp8 = f8_fp8_options_default();
	check_model(argv[1], "gpt-tiny", 2, 24, &fp8);
	check_model(argv[1], "llama-tiny", 2, 24, &fp8); // SwiGLU, RMSNormGrad
	fp8.recipe = F8_RECIPE_CURRENT;
	check_model(argv[1], "gpt-tiny", 2, 24, &fp8);
	fp8.recipe = F8_RECIPE_BLOCK; // 1x128 blocks along the tokens: 128 of them
	check_model(argv[1], "llama-tiny", 2, 64, &fp8);
	// --bf16: BF16 norms, activations, residuals, cross-entropy and their gradients.
	check_model_with(argv[1], "gpt-tiny", 2, 24, NULL, true);
	check_model_with(argv[1], "llama-tiny", 2, 24, NULL, true);
	check_model(argv[1], "mixtral-tiny", 2, 24, NULL); // Router, MoEDispatch, MoECombine
	check_model_with(argv[1], "mixtral-tiny", 2, 24, NULL, true);
	fp8.recipe = F8_RECIPE_DELAYED;
	check_model_with(argv[1], "gpt-tiny", 2, 24, &fp8, true);
	return test_finish();
}
