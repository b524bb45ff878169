/*
 * Every fusion group's generated kernels against the unfused reference: the groups are lowered
 * to kernel IR (codegen/lower.h), compiled for the host by ORC JIT and run as the CPU backend
 * runs them (runtime/cpu/generated.h) on fresh random inputs; its members run one by one through the CPU reference kernels on the same
 * inputs; each output the kernel writes is compared (f32 arithmetic against the reference's
 * double: the tolerances are at compare()), amaxes and scale_invs exactly where the values are
 * read from memory. Groups come from small text graphs
 * (each made one group by hand) and from gpt-tiny's training step compiled through the whole
 * pipeline, with and without FP8.
 *
 * usage: test_lower_groups SOURCE_DIR
 */
#define _POSIX_C_SOURCE 200809L // rand_r

#include <math.h>   // fabs, isnan, nextafterf
#include <stdio.h>  // printf, snprintf
#include <stdlib.h> // rand_r
#include <string.h> // strlen, strstr
#include <time.h>   // time

#include "frontend/frontend.h"   // f8_frontend_load
#include "ir/alloc.h"            // f8_free
#include "ir/fp8.h"              // f8_float_decode
#include "ir/text.h"             // f8_text_parse
#include "passes/pipeline.h"     // f8_pipeline_run_with
#include "passes/precision.h"    // f8_fp8_options_default
#include "runtime/cpu/generated.h" // f8_cpu_generated_create, f8_cpu_generated_run
#include "runtime/cpu/kernels.h"   // f8_cpu_kernel_get, f8_cpu_kernel_call
#include "runtime/tensor.h"      // f8_rt_tensor
#include "tests/test_support.h"  // CHECK, test_finish

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

/* Random contents for an input: scales and amax histories positive (0.25 to 8, as scaling
 * tables hold), the amaxes a ScalingUpdate reads (`amax`) positive with now and then a NaN, an
 * infinity or a 0, integers labels below 50 with now and then ignore_index (-100), bools either
 * way, the rest normal with a spread, so that casts both saturate and underflow. */
static void fill_random(const f8_graph *graph, f8_value_id id, bool amax, f8_rt_tensor *tensor) {
	f8_role role = graph->values[id].role;
	int64_t n = f8_rt_tensor_numel(tensor);
	double spread = 1.0 + 40.0 * uniform();
	for (int64_t i = 0; i < n; i++) {
		double x, u = uniform();
		if (role == F8_ROLE_SCALE || role == F8_ROLE_AMAX_HISTORY)
			x = 0.25 + 7.75 * uniform();
		else if (tensor->dtype == F8_DTYPE_BOOL)
			x = u < 0.5;
		else if (tensor->dtype == F8_DTYPE_I64)
			x = u < 0.1 ? -100 : (double)(int)(50 * uniform());
		else if (amax)
			x = u < 0.1 ? NAN : u < 0.15 ? INFINITY : u < 0.2 ? 0 : fabs(normal() * spread);
		else
			x = normal() * spread;
		f8_rt_tensor_set(tensor, i, x);
	}
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

/* How far apart two FP8 codes of `dtype` are in value order (0 equal, 1 neighbours). */
static int code_distance(f8_dtype dtype, uint8_t a, uint8_t b) {
	if (a == b)
		return 0;
	float x = f8_float_decode(dtype, a), y = f8_float_decode(dtype, b);
	if (isnan(x) || isnan(y))
		return 99;
	int between = 0; // codes strictly between x and y
	float low = x < y ? x : y, high = x < y ? y : x;
	for (uint32_t c = 0; c < 256; c++) {
		float z = f8_float_decode(dtype, c);
		between += z > low && z < high;
	}
	return between + 1;
}

/*
 * Compares the kernel's buffer for `value` with the reference's; prints the first mismatch.
 * The tolerances are relative to each element and to the tensor's largest magnitude, since an
 * f32 result that cancels (a LayerNorm output near -beta, a sum of terms of both signs) carries
 * the absolute error of its terms: f32 within 2e-5 of the element plus 1e-5 of the largest,
 * bf16 within one bf16 ulp plus that; FP8 codes equal (a cast of a value read from memory is
 * exact) or, where a member computed the value cast, one code apart or within 1e-5 of the
 * largest decoded value (noise around zero crosses subnormal codes).
 */
static void compare(const f8_graph *graph, f8_value_id value, const f8_rt_tensor *reference,
		    const void *got, bool exact_fp8, const char *kernel) {
	f8_dtype dtype = reference->dtype;
	f8_rt_tensor view = *reference;
	view.data = (void *)got;
	int64_t n = f8_rt_tensor_numel(reference), bad = 0, first = -1;
	double largest = 0;
	for (int64_t i = 0; i < n; i++) {
		double x = fabs(f8_rt_tensor_get(reference, i));
		if (isfinite(x) && x > largest)
			largest = x;
	}
	bool codes = f8_dtype_is_fp8(dtype) && dtype != F8_DTYPE_E8M0;
	for (int64_t i = 0; i < n; i++) {
		double want = f8_rt_tensor_get(reference, i), have = f8_rt_tensor_get(&view, i);
		double error = fabs(want - have);
		bool ok = (isnan(want) && isnan(have)) || want == have;
		if (!ok && codes && !exact_fp8) {
			uint8_t a = ((const uint8_t *)reference->data)[i], b = ((const uint8_t *)got)[i];
			ok = code_distance(dtype, a, b) <= 1 || error <= 1e-5 * largest;
		} else if (!ok && !codes) {
			double relative = dtype == F8_DTYPE_BF16 ? 1.0 / 128 : 2e-5;
			ok = error <= relative * fabs(want) + 1e-5 * largest;
		}
		if (!ok && bad++ == 0)
			first = i;
	}
	if (bad)
		printf("  %s: %%%s: %lld of %lld elements differ; first at %lld: reference %.9g, "
		       "kernel %.9g (largest %.3g)\n",
		       kernel, graph->values[value].name, (long long)bad, (long long)n,
		       (long long)first, f8_rt_tensor_get(reference, first),
		       f8_rt_tensor_get(&view, first), largest);
	CHECK(bad == 0);
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

/* Runs group `group` through its generated kernels (`generated`) and through the reference
 * kernels on the same fresh inputs, and compares every value the generated kernels write. */
static void check_group(const f8_graph *graph, const f8_cpu_generated *generated, uint32_t group,
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
			fill_random(graph, input, node->op == F8_OP_SCALING_UPDATE && j >= 3,
				    v.tensor[input]);
			tensors[input] = *v.tensor[input]; // shares the data; v owns it
			tensors[input].owned = false;
		}
	}
	for (uint32_t i = 0; !status && i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		if (node->group == group && node->op == F8_OP_CROSS_ENTROPY_GRAD)
			make_lse_consistent(v.tensor[node->inputs[1]], v.tensor[node->inputs[3]]);
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
		status = f8_cpu_generated_run(generated, group, tensors, symbols, &diag);
	if (!status)
		status = run_reference(graph, group, symbols, &v, &diag);
	if (status) {
		printf("  %s: ", name);
		f8_diag_print(&diag, stdout);
		CHECK(status == F8_OK);
	} else {
		bool exact = !casts_computed_values(graph, group);
		for (uint32_t o = 0; o < n_outputs; o++)
			compare(graph, outputs[o], v.tensor[outputs[o]], tensors[outputs[o]].data,
				exact, name);
	}
	for (uint32_t o = 0; o < n_outputs; o++)
		f8_rt_tensor_destroy(&tensors[outputs[o]]);
	f8_free(tensors);
	free_values(&v);
}

/* Every group of `graph`, through one f8_cpu_generated for all of them. */
static void check_groups(const f8_graph *graph, const int64_t *symbols) {
	f8_cpu_generated *generated = NULL;
	f8_diag diag = {0};
	f8_status status = f8_cpu_generated_create(graph, &generated, &diag);
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
	f8_graph *graph = NULL;
	f8_diag diag = {0};
	f8_status status = f8_text_parse(text, strlen(text), title, &graph, &diag);
	if (!status)
		status = f8_pipeline_run(graph, "canonicalize", true, &diag);
	uint32_t group = 0;
	if (!status)
		status = f8_graph_add_group(graph, "k0", family, "the whole graph", &group, &diag);
	if (status) {
		f8_diag_print(&diag, stdout);
		CHECK(status == F8_OK);
		f8_graph_destroy(graph);
		return;
	}
	for (uint32_t i = 0; i < graph->n_order; i++)
		graph->nodes[graph->order[i]].group = group;
	int64_t symbols[4] = {3, 40, 7, 5};
	check_groups(graph, symbols);
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

/* A label outside the vocabulary: the generated kernels flag it and the run fails naming the
 * row, as the reference kernel fails. */
static void check_label_error(void) {
	printf("CrossEntropy with a label outside the vocabulary\n");
	f8_graph *graph = NULL;
	f8_diag diag = {0};
	uint32_t group = 0;
	f8_cpu_generated *generated = NULL;
	f8_status status = f8_text_parse(cross_entropy, strlen(cross_entropy), "ce", &graph, &diag);
	if (!status)
		status = f8_pipeline_run(graph, "canonicalize", true, &diag);
	if (!status)
		status = f8_graph_add_group(graph, "k0", F8_KERNEL_FAMILY_CROSS_ENTROPY, "", &group,
					    &diag);
	for (uint32_t i = 0; !status && i < graph->n_order; i++)
		graph->nodes[graph->order[i]].group = group;
	if (!status)
		status = f8_cpu_generated_create(graph, &generated, &diag);
	CHECK(status == F8_OK);
	int64_t symbols[1] = {6};
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
		f8_rt_tensor_set(&tensors[f8_graph_find_value(graph, "labels", 6)], 4, 77);
		status = f8_cpu_generated_run(generated, group, tensors, symbols, &diag);
		printf("  %s\n", diag.message);
		CHECK(status == F8_ERR_ARGUMENT);
		CHECK(strstr(diag.message, "outside the vocabulary") && strstr(diag.message, "row 4"));
	}
	for (uint32_t v = 0; graph && tensors && v < graph->n_values; v++)
		f8_rt_tensor_destroy(&tensors[v]);
	f8_free(tensors);
	f8_cpu_generated_destroy(generated);
	f8_graph_destroy(graph);
}

/* gpt-tiny's training step through the whole pipeline: every group it fused. */
static void check_model(const char *source_dir, const f8_fp8_options *fp8) {
	printf("gpt-tiny %s\n", fp8 ? "FP8 (HYBRID, delayed)" : "without FP8");
	char path[512];
	snprintf(path, sizeof path, "%s/models/gpt-tiny.json", source_dir);
	const f8_dim_binding dims[] = {{"batch", 2}, {"seq", 24}};
	f8_frontend_options options = {.dims = dims, .n_dims = 2, .seed = 1};
	f8_training_options training = f8_training_options_default();
	f8_pipeline_options compile_options = {.training = &training, .fp8 = fp8};
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

int main(int argc, char **argv) {
	if (argc != 2) {
		fprintf(stderr, "usage: test_lower_groups SOURCE_DIR\n");
		return 2;
	}
	seed = (unsigned)time(NULL);
	printf("seed %u\n", seed);
	check_text_group("elementwise chain, broadcast", chain, F8_KERNEL_FAMILY_ELEMENTWISE);
	check_text_group("LayerNorm + CastTranspose", layer_norm_cast, F8_KERNEL_FAMILY_NORM);
	check_text_group("RMSNorm (bf16) + Quantize", rms_norm_quantize, F8_KERNEL_FAMILY_NORM);
	check_text_group("GeluGrad + CastTranspose + dbias", gelu_grad_cast,
			 F8_KERNEL_FAMILY_ACTIVATION_GRAD);
	check_text_group("CastTranspose alone", cast_only, F8_KERNEL_FAMILY_CAST);
	check_text_group("CrossEntropy (mean)", cross_entropy, F8_KERNEL_FAMILY_CROSS_ENTROPY);
	check_text_group("CrossEntropyGrad (bf16 logits)", cross_entropy_grad,
			 F8_KERNEL_FAMILY_CROSS_ENTROPY);
	check_text_group("ScalingUpdate (4 slots, margin 1)", scaling_update,
			 F8_KERNEL_FAMILY_SCALING);
	check_label_error();
	check_model(argv[1], NULL);
	f8_fp8_options fp8 = f8_fp8_options_default();
	check_model(argv[1], &fp8);
	return test_finish();
}
