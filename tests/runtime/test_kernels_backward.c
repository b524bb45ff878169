/*
 * The reference kernels of the backward ops (runtime/cpu/kernels_grad_*.c), called directly,
 * against their forward kernels: each case is a small text-IR graph holding a forward node and
 * the backward node that differentiates it. With upstream gradients dy (random inputs) the
 * loss is L = sum(dy * y) over the forward outputs y; the backward's gradient of each checked
 * leaf is compared with central differences of L in f64, element by element, normalized by the
 * gradient's largest element. Forward outputs that are f32 by contract (CrossEntropy's loss,
 * Router's probabilities) cannot be differenced at f64 precision: those cases compute the loss
 * from a small double reference of the forward instead, itself checked against the forward
 * kernel at f32 precision.
 *
 * Each case also runs its kernels on f32 (the fast path) and the backward again in f64 on the
 * same f32 values, which must agree to f32 precision, and runs each backward kernel with
 * allocations failing, which must give F8_ERR_NOMEM and leak nothing (under ASan).
 *
 * The optimizer ops are checked against hand-computed references: GlobalNorm, LearningRate at
 * every iteration of a schedule per style, AdamW against torch's single-tensor arithmetic for
 * three steps. Data errors (ids, labels, indices, counts, steps out of range) fail cleanly.
 *
 * Usage: test_kernels_backward [SEED]   (a fixed seed by default; it is printed)
 */
#include <math.h>   // fabs, fmax, sqrt, sqrtf, pow, exp, log, cos, isnan, INFINITY, NAN
#include <stdio.h>  // printf, snprintf, sscanf
#include <stdlib.h> // calloc, free, strtoull, strtoll
#include <string.h> // strcmp, strncmp, strlen, strstr, strchr, strcspn

#include "ir/text.h"              // f8_text_parse
#include "passes/canonicalize.h"  // f8_pass_canonicalize_run
#include "runtime/cpu/kernels.h"  // f8_cpu_kernel_get, f8_cpu_kernel_call
#include "tests/runtime/test_fill.h" // rng_*, test_find_spec, test_fill
#include "tests/test_support.h"   // CHECK, test_finish, test_fail_allocations_after

#define STEP 1e-6      // the finite difference step (f64: truncation ~1e-13, rounding ~1e-9)
#define TOLERANCE 1e-6 // of a gradient, relative to its largest element

/* A graph and a tensor per value, by id; kernels run on them directly. */
typedef struct runner {
	f8_graph *graph;
	f8_rt_tensor *tensors; // (graph->n_values) empty until made
} runner;

/* (Re)allocates the tensor of value `v`, zeroed, of its inferred type. */
static bool allocate(runner *r, f8_value_id v) {
	const f8_type *type = &r->graph->values[v].type;
	int64_t dims[F8_MAX_RANK];
	for (int i = 0; i < type->shape.rank; i++)
		dims[i] = f8_dim_value(type->shape.dims[i]);
	f8_rt_tensor_destroy(&r->tensors[v]);
	f8_diag diag;
	f8_status status = f8_rt_tensor_create(type->dtype, type->shape.rank, dims, &r->tensors[v],
					       &diag);
	return status == F8_OK;
}

/* Parses `body` as a graph (every "f64" read as "f32" when `narrow`), infers its types and
 * allocates its leaves. */
static bool runner_create(runner *r, const char *name, const char *body, bool narrow) {
	char text[4096];
	snprintf(text, sizeof text, "graph backward {\n%s\n}\n", body);
	for (char *p = text; narrow && (p = strstr(p, "f64")); p += 3)
		p[2] = '2', p[1] = '3';
	*r = (runner){0};
	f8_diag diag;
	f8_diag_clear(&diag);
	if (f8_text_parse(text, strlen(text), name, &r->graph, &diag) ||
	    f8_pass_canonicalize_run(r->graph, &diag)) {
		printf("FAIL %s: ", name);
		f8_diag_print(&diag, stdout);
		return false;
	}
	r->tensors = calloc(r->graph->n_values, sizeof *r->tensors);
	bool ok = r->tensors != NULL;
	for (uint32_t i = 0; ok && i < r->graph->n_inputs; i++)
		ok = allocate(r, r->graph->inputs[i]);
	return ok;
}

static void runner_destroy(runner *r) {
	for (uint32_t v = 0; r->tensors && v < r->graph->n_values; v++)
		f8_rt_tensor_destroy(&r->tensors[v]);
	free(r->tensors);
	f8_graph_destroy(r->graph);
}

static f8_rt_tensor *tensor(runner *r, const char *name) {
	f8_value_id v = f8_graph_find_value(r->graph, name, strlen(name));
	return v == F8_NONE ? NULL : &r->tensors[v];
}

/* The first node of `op` in the program, or NULL. */
static const f8_node *find_node(const runner *r, f8_op op) {
	for (uint32_t i = 0; i < r->graph->n_order; i++)
		if (r->graph->nodes[r->graph->order[i]].op == op)
			return &r->graph->nodes[r->graph->order[i]];
	return NULL;
}

static bool is_backward(f8_op op) {
	return op >= F8_OP_LINEAR_WGRAD && op <= F8_OP_MOE_COMBINE_GRAD;
}

/* Runs `node`'s kernel on fresh outputs; with fail_after >= 0 the kernel's allocations fail
 * after that many. */
static f8_status run_node(runner *r, const f8_node *node, long fail_after, f8_diag *diag) {
	const f8_rt_tensor *inputs[16];
	f8_rt_tensor outputs[4];
	for (uint32_t j = 0; j < node->n_inputs; j++)
		inputs[j] = node->inputs[j] == F8_NONE ? NULL : &r->tensors[node->inputs[j]];
	for (uint32_t j = 0; j < node->n_outputs; j++) {
		if (!allocate(r, node->outputs[j]))
			return F8_ERR_NOMEM;
		outputs[j] = r->tensors[node->outputs[j]];
	}
	int64_t no_symbols[1] = {0};
	f8_cpu_kernel_call call = {.graph = r->graph, .node = node, .symbol_values = no_symbols,
				   .inputs = inputs, .outputs = outputs};
	f8_diag_clear(diag);
	if (fail_after >= 0)
		test_fail_allocations_after(fail_after);
	f8_status status = f8_cpu_kernel_get(node->op)(&call, diag);
	test_allocations_restore();
	for (uint32_t j = 0; j < node->n_outputs; j++)
		r->tensors[node->outputs[j]] = outputs[j];
	return status;
}

/* Runs the forward nodes, the backward ones, or both, in program order. */
static f8_status run(runner *r, bool forward, bool backward) {
	f8_diag diag;
	for (uint32_t i = 0; i < r->graph->n_order; i++) {
		const f8_node *node = &r->graph->nodes[r->graph->order[i]];
		if (is_backward(node->op) ? !backward : !forward)
			continue;
		f8_status status = run_node(r, node, -1, &diag);
		if (status) {
			f8_diag_print(&diag, stdout);
			return status;
		}
	}
	return F8_OK;
}

static void fill_leaves(runner *r, const char *fills) {
	char spec[64];
	for (uint32_t i = 0; i < r->graph->n_inputs; i++) {
		f8_value_id v = r->graph->inputs[i];
		test_find_spec(fills, r->graph->values[v].name, spec, sizeof spec);
		CHECK(test_fill(&r->tensors[v], spec, "uniform:-1:1"));
	}
}

/* Fills out (the forward output's shape) with the output a double reference computes. */
typedef void (*reference_fn)(runner *r, double *out);

typedef struct backward_case {
	const char *name;
	const char *ir;        // forward and backward nodes; the backward outputs are outputs
	const char *fills;     // leaf fills, "name=spec ..." (test_fill)
	const char *upstream;  // "y=dy ...": the loss is the sum of dy * y over these pairs
	const char *checks;    // "x=dx ...": gradient dx (a backward output) of leaf x
	reference_fn reference; // for the one upstream pair whose y is f32 by contract, or NULL
	double f32_tolerance;  // f32 path against f64 on the same values; 0 means 1e-6
} backward_case;

/* Pair i of a "a=b ..." list into a and b; false past the last. */
static bool pair_at(const char *list, int i, char *a, char *b) {
	const char *p = list;
	for (int k = 0; k < i && p; k++)
		p = strchr(p, ' ') ? strchr(p, ' ') + 1 : NULL;
	return p && sscanf(p, "%31[^=]=%31[^ ]", a, b) == 2;
}

/* L = sum over the upstream pairs of sum(dy * y), y from the reference when the case has one. */
static double loss(runner *r, const backward_case *c) {
	char y_name[32], dy_name[32];
	double sum = 0;
	for (int i = 0; pair_at(c->upstream, i, y_name, dy_name); i++) {
		const f8_rt_tensor *y = tensor(r, y_name), *dy = tensor(r, dy_name);
		int64_t n = f8_rt_tensor_numel(y);
		double *values = calloc((size_t)n + 1, sizeof(double));
		if (c->reference)
			c->reference(r, values);
		for (int64_t j = 0; j < n; j++)
			sum += f8_rt_tensor_get(dy, j) *
			       (c->reference ? values[j] : f8_rt_tensor_get(y, j));
		free(values);
	}
	return sum;
}

/* max |a - b| / max |b| over two tensors of one shape (max |a - b| when b is all zero). */
static double normalized_error(const f8_rt_tensor *a, const f8_rt_tensor *b) {
	double error = 0, scale = 0;
	for (int64_t i = 0; i < f8_rt_tensor_numel(b); i++) {
		error = fmax(error, fabs(f8_rt_tensor_get(a, i) - f8_rt_tensor_get(b, i)));
		scale = fmax(scale, fabs(f8_rt_tensor_get(b, i)));
	}
	return scale > 0 ? error / scale : error;
}

/* The backward's gradient `gradient` of leaf `leaf` against central differences of the loss. */
static void check_gradient(runner *r, const backward_case *c, const char *leaf,
			   const char *gradient) {
	f8_rt_tensor *x = tensor(r, leaf);
	const f8_rt_tensor *analytic = tensor(r, gradient);
	if (!x || !analytic || !f8_rt_tensor_same_type(x, analytic)) {
		printf("FAIL %s: no leaf %s or gradient %s of its type\n", c->name, leaf, gradient);
		CHECK(false);
		return;
	}
	int64_t n = f8_rt_tensor_numel(x);
	f8_rt_tensor numeric;
	f8_diag diag;
	f8_rt_tensor_create(F8_DTYPE_F64, x->rank, x->dims, &numeric, &diag);
	bool ok = true;
	for (int64_t i = 0; ok && i < n; i++) {
		double value = f8_rt_tensor_get(x, i), plus, minus;
		f8_rt_tensor_set(x, i, value + STEP);
		ok = run(r, true, false) == F8_OK;
		plus = loss(r, c);
		f8_rt_tensor_set(x, i, value - STEP);
		ok &= run(r, true, false) == F8_OK;
		minus = loss(r, c);
		f8_rt_tensor_set(x, i, value);
		// The steps actually taken: value + STEP is rounded; dividing by it is exact.
		f8_rt_tensor_set(&numeric, i, (plus - minus) / ((value + STEP) - (value - STEP)));
	}
	ok &= run(r, true, false) == F8_OK;
	double error = normalized_error(analytic, &numeric), scale = 0;
	for (int64_t i = 0; i < n; i++)
		scale = fmax(scale, fabs(f8_rt_tensor_get(&numeric, i)));
	printf("%s %-56s d%s: error %.1e\n", error < TOLERANCE ? "ok  " : "FAIL", c->name, leaf,
	       error);
	CHECK(ok && error < TOLERANCE);
	CHECK(scale > 0); // a gradient that is all zero would check little
	f8_rt_tensor_destroy(&numeric);
}

/* The forward kernel's f32-by-contract output against the case's double reference. */
static void check_reference(runner *r, const backward_case *c) {
	char y_name[32], dy_name[32];
	if (!c->reference || !pair_at(c->upstream, 0, y_name, dy_name))
		return;
	const f8_rt_tensor *y = tensor(r, y_name);
	f8_rt_tensor expected;
	f8_diag diag;
	f8_rt_tensor_create(F8_DTYPE_F64, y->rank, y->dims, &expected, &diag);
	c->reference(r, expected.data);
	double error = normalized_error(y, &expected);
	printf("%s %-56s reference of %s: error %.1e\n", error < 1e-6 ? "ok  " : "FAIL", c->name,
	       y_name, error);
	CHECK(error < 1e-6);
	f8_rt_tensor_destroy(&expected);
}

/*
 * The f32 path: the case on f32, then the backward again in f64 on the same values (every
 * tensor a backward node reads copied over), to f32 precision. Then each backward kernel with
 * allocations failing after 0, 1, ... of them: F8_OK or F8_ERR_NOMEM, never a crash or a leak.
 */
static void check_f32_path(const backward_case *c, uint64_t seed) {
	runner narrow, wide;
	if (!runner_create(&narrow, c->name, c->ir, true) ||
	    !runner_create(&wide, c->name, c->ir, false)) {
		CHECK(false);
		return;
	}
	rng_state = seed;
	fill_leaves(&narrow, c->fills);
	CHECK(run(&narrow, true, true) == F8_OK);
	const f8_graph *graph = wide.graph;
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		for (uint32_t j = 0; is_backward(node->op) && j < node->n_inputs; j++) {
			f8_value_id v = node->inputs[j];
			if (v == F8_NONE || !allocate(&wide, v))
				continue;
			for (int64_t e = 0; e < f8_rt_tensor_numel(&wide.tensors[v]); e++)
				f8_rt_tensor_set(&wide.tensors[v], e,
						 f8_rt_tensor_get(&narrow.tensors[v], e));
		}
	}
	CHECK(run(&wide, false, true) == F8_OK);
	double tolerance = c->f32_tolerance ? c->f32_tolerance : 1e-6, worst = 0;
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		for (uint32_t j = 0; is_backward(node->op) && j < node->n_outputs; j++)
			worst = fmax(worst, normalized_error(&narrow.tensors[node->outputs[j]],
							     &wide.tensors[node->outputs[j]]));
		for (long fail = 0; is_backward(node->op) && fail < 8; fail++) {
			f8_diag diag;
			f8_status status = run_node(&wide, node, fail, &diag);
			CHECK(status == F8_OK || status == F8_ERR_NOMEM);
		}
	}
	printf("%s %-56s f32 path: error %.1e\n", worst < tolerance ? "ok  " : "FAIL", c->name,
	       worst);
	CHECK(worst < tolerance);
	runner_destroy(&narrow);
	runner_destroy(&wide);
}

static void run_case(const backward_case *c, uint64_t seed) {
	runner r;
	if (!runner_create(&r, c->name, c->ir, false)) {
		CHECK(false);
		return;
	}
	rng_state = seed;
	fill_leaves(&r, c->fills);
	if (run(&r, true, true) == F8_OK) {
		check_reference(&r, c);
		char leaf[32], gradient[32];
		for (int i = 0; pair_at(c->checks, i, leaf, gradient); i++)
			check_gradient(&r, c, leaf, gradient);
	} else {
		printf("FAIL %s: the kernels failed\n", c->name);
		CHECK(false);
	}
	runner_destroy(&r);
	check_f32_path(c, seed);
}

/* References of f32-by-contract forward outputs, in double. */

/* CrossEntropy's loss (scalar or per row) from %x (logits) and %t (labels). */
static void cross_entropy_reference(runner *r, double *out) {
	const f8_node *node = find_node(r, F8_OP_CROSS_ENTROPY);
	int64_t ignore = f8_node_attr_int(node, "ignore_index", -100);
	const char *reduction = f8_node_attr_string(node, "reduction", "mean");
	const f8_rt_tensor *x = tensor(r, "x"), *t = tensor(r, "t");
	int64_t vocab = x->dims[x->rank - 1], rows = f8_rt_tensor_numel(t), counted = 0;
	double total = 0;
	for (int64_t row = 0; row < rows; row++) {
		int64_t label = (int64_t)f8_rt_tensor_get(t, row);
		double max = -INFINITY, sum = 0, value = 0;
		for (int64_t j = 0; j < vocab; j++)
			max = fmax(max, f8_rt_tensor_get(x, row * vocab + j));
		for (int64_t j = 0; j < vocab; j++)
			sum += exp(f8_rt_tensor_get(x, row * vocab + j) - max);
		if (label != ignore) {
			value = max + log(sum) - f8_rt_tensor_get(x, row * vocab + label);
			total += value, counted++;
		}
		if (strcmp(reduction, "none") == 0)
			out[row] = value;
	}
	if (strcmp(reduction, "none") != 0)
		out[0] = strcmp(reduction, "sum") == 0 ? total : counted ? total / counted : 0;
}

/* Router's probabilities from %x (logits) at the experts %i the Router picked. */
static void router_reference(runner *r, double *out) {
	const f8_node *node = find_node(r, F8_OP_ROUTER);
	bool sigmoid = strcmp(f8_node_attr_string(node, "score", "softmax"), "sigmoid") == 0;
	bool normalize = f8_node_attr_int(node, "normalize", 0);
	const f8_rt_tensor *x = tensor(r, "x"), *picked = tensor(r, "i");
	int64_t tokens = x->dims[0], experts = x->dims[1], k = picked->dims[1];
	for (int64_t t = 0; t < tokens; t++) {
		double sum = 0, chosen = 0, score[64];
		for (int64_t e = 0; e < experts; e++) {
			score[e] = f8_rt_tensor_get(x, t * experts + e);
			score[e] = sigmoid ? 1 / (1 + exp(-score[e])) : exp(score[e]);
			sum += score[e];
		}
		for (int64_t j = 0; j < k; j++) {
			double s = score[(int64_t)f8_rt_tensor_get(picked, t * k + j)];
			out[t * k + j] = sigmoid ? s : s / sum;
			chosen += out[t * k + j];
		}
		for (int64_t j = 0; normalize && j < k; j++)
			out[t * k + j] /= chosen;
	}
}

#define LEAF(name, type) "input %" name " : " type "\n"

static const backward_case cases[] = {
	{"LinearWgrad", LEAF("x", "f64[2, 3, 4]") LEAF("w", "f64[5, 4]") LEAF("dy", "f64[2, 3, 5]")
	 "%y = Linear(%x, %w)\n%dw = LinearWgrad(%dy, %x)\noutput %y, %dw",
	 "", "y=dy", "w=dw", NULL, 1e-5},
	{"LinearWgrad transpose_weight, x rank 1",
	 LEAF("x", "f64[4]") LEAF("w", "f64[4, 3]") LEAF("dy", "f64[3]")
	 "%y = Linear(%x, %w) {transpose_weight=1}\n"
	 "%dw = LinearWgrad(%dy, %x) {transpose_weight=1}\noutput %y, %dw",
	 "", "y=dy", "w=dw", NULL, 1e-5},
	{"LayerNormGrad with beta", LEAF("x", "f64[2, 3, 8]") LEAF("g", "f64[8]")
	 LEAF("b", "f64[8]") LEAF("dy", "f64[2, 3, 8]")
	 "%y, %mean, %rstd = LayerNorm(%x, %g, %b) {epsilon=1e-05}\n"
	 "%dx, %dg, %db = LayerNormGrad(%dy, %x, %g, %mean, %rstd) {epsilon=1e-05}\n"
	 "output %y, %dx, %dg, %db",
	 "x=uniform:-2:3", "y=dy", "x=dx g=dg b=db", NULL, 0},
	{"LayerNormGrad axis -2, no beta", LEAF("x", "f64[2, 3, 4]") LEAF("g", "f64[3, 4]")
	 LEAF("dy", "f64[2, 3, 4]")
	 "%y, %mean, %rstd = LayerNorm(%x, %g) {axis=-2, epsilon=0.1}\n"
	 "%dx, %dg = LayerNormGrad(%dy, %x, %g, %mean, %rstd) {axis=-2, epsilon=0.1}\n"
	 "output %y, %dx, %dg",
	 "", "y=dy", "x=dx g=dg", NULL, 0},
	{"RMSNormGrad", LEAF("x", "f64[3, 8]") LEAF("g", "f64[8]") LEAF("dy", "f64[3, 8]")
	 "%y, %rstd = RMSNorm(%x, %g) {epsilon=1e-06}\n"
	 "%dx, %dg = RMSNormGrad(%dy, %x, %g, %rstd) {epsilon=1e-06}\noutput %y, %dx, %dg",
	 "", "y=dy", "x=dx g=dg", NULL, 0},
	{"RMSNormGrad axis 1", LEAF("x", "f64[2, 2, 3]") LEAF("g", "f64[2, 3]")
	 LEAF("dy", "f64[2, 2, 3]")
	 "%y, %rstd = RMSNorm(%x, %g) {axis=1}\n"
	 "%dx, %dg = RMSNormGrad(%dy, %x, %g, %rstd) {axis=1}\noutput %y, %dx, %dg",
	 "", "y=dy", "x=dx g=dg", NULL, 0},
	{"AttentionGrad", LEAF("q", "f64[1, 2, 3, 4]") LEAF("k", "f64[1, 2, 5, 4]")
	 LEAF("v", "f64[1, 2, 5, 3]") LEAF("do", "f64[1, 2, 3, 3]")
	 "%o, %lse = Attention(%q, %k, %v)\n"
	 "%dq, %dk, %dv = AttentionGrad(%do, %q, %k, %v, %o, %lse)\noutput %o, %dq, %dk, %dv",
	 "", "o=do", "q=dq k=dk v=dv", NULL, 0},
	{"AttentionGrad causal GQA, scale, seq_q < seq_kv", LEAF("q", "f64[2, 4, 3, 2]")
	 LEAF("k", "f64[2, 2, 5, 2]") LEAF("v", "f64[2, 2, 5, 3]") LEAF("do", "f64[2, 4, 3, 3]")
	 "%o, %lse = Attention(%q, %k, %v) {causal=1, scale=0.7}\n"
	 "%dq, %dk, %dv = AttentionGrad(%do, %q, %k, %v, %o, %lse) {causal=1, scale=0.7}\n"
	 "output %o, %dq, %dk, %dv",
	 "q=uniform:-2:2", "o=do", "q=dq k=dk v=dv", NULL, 0},
	{"AttentionGrad causal, seq_q > seq_kv (rows attend nothing)", LEAF("q", "f64[1, 1, 4, 2]")
	 LEAF("k", "f64[1, 1, 2, 2]") LEAF("v", "f64[1, 1, 2, 2]") LEAF("do", "f64[1, 1, 4, 2]")
	 "%o, %lse = Attention(%q, %k, %v) {causal=1}\n"
	 "%dq, %dk, %dv = AttentionGrad(%do, %q, %k, %v, %o, %lse) {causal=1}\n"
	 "output %o, %dq, %dk, %dv",
	 "", "o=do", "q=dq k=dk v=dv", NULL, 0},
	{"AttentionGrad bool mask, a row masked out", LEAF("q", "f64[1, 2, 3, 3]")
	 LEAF("k", "f64[1, 2, 4, 3]") LEAF("v", "f64[1, 2, 4, 2]") LEAF("m", "bool[1, 1, 3, 4]")
	 LEAF("do", "f64[1, 2, 3, 2]")
	 "%o, %lse = Attention(%q, %k, %v, %m)\n"
	 "%dq, %dk, %dv = AttentionGrad(%do, %q, %k, %v, %o, %lse, %m)\noutput %o, %dq, %dk, %dv",
	 "m=boolrow:0.7", "o=do", "q=dq k=dk v=dv", NULL, 0},
	{"AttentionGrad additive mask broadcast, GQA", LEAF("q", "f64[2, 2, 3, 2]")
	 LEAF("k", "f64[2, 1, 3, 2]") LEAF("v", "f64[2, 1, 3, 2]") LEAF("m", "f64[3, 3]")
	 LEAF("do", "f64[2, 2, 3, 2]")
	 "%o, %lse = Attention(%q, %k, %v, %m)\n"
	 "%dq, %dk, %dv = AttentionGrad(%do, %q, %k, %v, %o, %lse, %m)\noutput %o, %dq, %dk, %dv",
	 "m=uniform:-2:0", "o=do", "q=dq k=dk v=dv", NULL, 0},
	{"GeluGrad erf", LEAF("x", "f64[3, 5]") LEAF("dy", "f64[3, 5]")
	 "%y = Gelu(%x)\n%dx = GeluGrad(%dy, %x)\noutput %y, %dx",
	 "x=uniform:-3:3", "y=dy", "x=dx", NULL, 0},
	{"GeluGrad tanh", LEAF("x", "f64[3, 5]") LEAF("dy", "f64[3, 5]")
	 "%y = Gelu(%x) {approximate=\"tanh\"}\n"
	 "%dx = GeluGrad(%dy, %x) {approximate=\"tanh\"}\noutput %y, %dx",
	 "x=uniform:-3:3", "y=dy", "x=dx", NULL, 0},
	{"SwiGLUGrad packed", LEAF("x", "f64[2, 3, 8]") LEAF("dy", "f64[2, 3, 4]")
	 "%y = SwiGLU(%x)\n%dx = SwiGLUGrad(%dy, %x)\noutput %y, %dx",
	 "x=uniform:-3:3", "y=dy", "x=dx", NULL, 0},
	{"SwiGLUGrad gate and up", LEAF("g", "f64[3, 4]") LEAF("u", "f64[3, 4]")
	 LEAF("dy", "f64[3, 4]")
	 "%y = SwiGLU(%g, %u)\n%dg, %du = SwiGLUGrad(%dy, %g, %u)\noutput %y, %dg, %du",
	 "g=uniform:-3:3", "y=dy", "g=dg u=du", NULL, 0},
	{"RopeGrad rotate-half, partial", LEAF("x", "f64[1, 2, 3, 6]") LEAF("c", "f64[3, 4]")
	 LEAF("s", "f64[3, 4]") LEAF("dy", "f64[1, 2, 3, 6]")
	 "%y = Rope(%x, %c, %s)\n%dx = RopeGrad(%dy, %c, %s)\noutput %y, %dx",
	 "", "y=dy", "x=dx", NULL, 0},
	{"RopeGrad interleaved, per-batch tables", LEAF("x", "f64[2, 2, 3, 4]")
	 LEAF("c", "f64[2, 1, 3, 4]") LEAF("s", "f64[2, 1, 3, 4]") LEAF("dy", "f64[2, 2, 3, 4]")
	 "%y = Rope(%x, %c, %s) {interleaved=1}\n"
	 "%dx = RopeGrad(%dy, %c, %s) {interleaved=1}\noutput %y, %dx",
	 "", "y=dy", "x=dx", NULL, 0},
	{"RopeGrad interleaved, partial", LEAF("x", "f64[1, 1, 3, 6]") LEAF("c", "f64[1, 1, 3, 4]")
	 LEAF("s", "f64[1, 1, 3, 4]") LEAF("dy", "f64[1, 1, 3, 6]")
	 "%y = Rope(%x, %c, %s) {interleaved=1}\n"
	 "%dx = RopeGrad(%dy, %c, %s) {interleaved=1}\noutput %y, %dx",
	 "", "y=dy", "x=dx", NULL, 0},
	{"EmbeddingGrad repeated ids, unused rows", LEAF("w", "f64[6, 3]") LEAF("ids", "i64[2, 5]")
	 LEAF("dy", "f64[2, 5, 3]")
	 "%y = Embedding(%ids, %w)\n%dw = EmbeddingGrad(%dy, %ids) {vocab=6}\noutput %y, %dw",
	 "ids=int:0:3", "y=dy", "w=dw", NULL, 0},
	{"GatherGrad axis 1, negative and repeated indices", LEAF("x", "f64[3, 5, 2]")
	 LEAF("i", "i64[2, 3]") LEAF("dy", "f64[3, 2, 3, 2]")
	 "%y = Gather(%x, %i) {axis=1}\n%dx = GatherGrad(%dy, %i) {axis=1, size=5}\n"
	 "output %y, %dx",
	 "i=int:-5:4", "y=dy", "x=dx", NULL, 0},
	{"GatherGrad axis 0, scalar index", LEAF("x", "f64[3, 5, 2]") LEAF("i", "i64[]")
	 LEAF("dy", "f64[5, 2]")
	 "%y = Gather(%x, %i)\n%dx = GatherGrad(%dy, %i) {size=3}\noutput %y, %dx",
	 "i=int:-3:2", "y=dy", "x=dx", NULL, 0},
	{"SliceGrad steps", LEAF("x", "f64[5, 6, 2]") LEAF("dy", "f64[2, 3, 2]")
	 "%y = Slice(%x) {starts=[1, 5], ends=[5, 0], axes=[0, 1], steps=[2, -2]}\n"
	 "%dx = SliceGrad(%dy) {shape=[5, 6, 2], starts=[1, 5], ends=[5, 0], axes=[0, 1], "
	 "steps=[2, -2]}\noutput %y, %dx",
	 "", "y=dy", "x=dx", NULL, 0},
	{"SliceGrad negative start, end past the end", LEAF("x", "f64[3, 5]")
	 LEAF("dy", "f64[3, 3]")
	 "%y = Slice(%x) {starts=[-3], ends=[100], axes=[1]}\n"
	 "%dx = SliceGrad(%dy) {shape=[3, 5], starts=[-3], ends=[100], axes=[1]}\noutput %y, %dx",
	 "", "y=dy", "x=dx", NULL, 0},
	{"SoftmaxGrad axis 1", LEAF("x", "f64[2, 3, 4]") LEAF("dy", "f64[2, 3, 4]")
	 "%y = Softmax(%x) {axis=1}\n%dx = SoftmaxGrad(%dy, %y) {axis=1}\noutput %y, %dx",
	 "x=uniform:-3:3", "y=dy", "x=dx", NULL, 0},
	{"SoftmaxGrad last axis", LEAF("x", "f64[3, 5]") LEAF("dy", "f64[3, 5]")
	 "%y = Softmax(%x)\n%dx = SoftmaxGrad(%dy, %y)\noutput %y, %dx",
	 "x=uniform:-3:3", "y=dy", "x=dx", NULL, 0},
	{"LogSoftmaxGrad axis 0", LEAF("x", "f64[3, 4]") LEAF("dy", "f64[3, 4]")
	 "%y = LogSoftmax(%x) {axis=0}\n%dx = LogSoftmaxGrad(%dy, %y) {axis=0}\noutput %y, %dx",
	 "x=uniform:-3:3", "y=dy", "x=dx", NULL, 0},
	{"LogSoftmaxGrad last axis", LEAF("x", "f64[2, 2, 5]") LEAF("dy", "f64[2, 2, 5]")
	 "%y = LogSoftmax(%x)\n%dx = LogSoftmaxGrad(%dy, %y)\noutput %y, %dx",
	 "x=uniform:-3:3", "y=dy", "x=dx", NULL, 0},
	{"CrossEntropyGrad mean, ignored labels", LEAF("x", "f64[2, 3, 5]") LEAF("t", "i64[2, 3]")
	 LEAF("dl", "f32[]")
	 "%l, %lse = CrossEntropy(%x, %t)\n%dx = CrossEntropyGrad(%dl, %x, %t, %lse)\n"
	 "output %l, %dx",
	 "x=uniform:-3:3 t=labels:5:-100", "l=dl", "x=dx", cross_entropy_reference, 0},
	{"CrossEntropyGrad sum, ignore_index 2", LEAF("x", "f64[4, 5]") LEAF("t", "i64[4]")
	 LEAF("dl", "f32[]")
	 "%l, %lse = CrossEntropy(%x, %t) {ignore_index=2, reduction=\"sum\"}\n"
	 "%dx = CrossEntropyGrad(%dl, %x, %t, %lse) {ignore_index=2, reduction=\"sum\"}\n"
	 "output %l, %dx",
	 "t=labels:5:2", "l=dl", "x=dx", cross_entropy_reference, 0},
	{"CrossEntropyGrad none", LEAF("x", "f64[2, 3, 4]") LEAF("t", "i64[2, 3]")
	 LEAF("dl", "f32[2, 3]")
	 "%l, %lse = CrossEntropy(%x, %t) {reduction=\"none\"}\n"
	 "%dx = CrossEntropyGrad(%dl, %x, %t, %lse) {reduction=\"none\"}\noutput %l, %dx",
	 "t=labels:4:-100", "l=dl", "x=dx", cross_entropy_reference, 0},
	{"RouterGrad softmax", LEAF("x", "f64[4, 5]") LEAF("dp", "f32[4, 2]")
	 "%p, %i = Router(%x) {top_k=2}\n%dx = RouterGrad(%dp, %x, %p, %i) {top_k=2}\n"
	 "output %p, %dx",
	 "x=spaced", "p=dp", "x=dx", router_reference, 0},
	{"RouterGrad softmax normalized", LEAF("x", "f64[3, 4]") LEAF("dp", "f32[3, 2]")
	 "%p, %i = Router(%x) {top_k=2, normalize=1}\n"
	 "%dx = RouterGrad(%dp, %x, %p, %i) {top_k=2, normalize=1}\noutput %p, %dx",
	 "x=spaced", "p=dp", "x=dx", router_reference, 0},
	{"RouterGrad sigmoid normalized", LEAF("x", "f64[4, 5]") LEAF("dp", "f32[4, 3]")
	 "%p, %i = Router(%x) {top_k=3, score=\"sigmoid\", normalize=1}\n"
	 "%dx = RouterGrad(%dp, %x, %p, %i) {top_k=3, score=\"sigmoid\", normalize=1}\n"
	 "output %p, %dx",
	 "x=spaced", "p=dp", "x=dx", router_reference, 0},
	{"MoEDispatchGrad", LEAF("x", "f64[4, 3]") LEAF("e", "i64[4, 2]") LEAF("ds", "f64[8, 3]")
	 "%s, %n = MoEDispatch(%x, %e) {experts=3}\n"
	 "%dx = MoEDispatchGrad(%ds, %e) {experts=3}\noutput %s, %dx",
	 "e=topk:3", "s=ds", "x=dx", NULL, 0},
	{"GroupedLinearWgrad, an expert without rows", LEAF("x", "f64[6, 3]")
	 LEAF("w", "f64[3, 2, 3]") LEAF("n", "i64[3]") LEAF("dy", "f64[6, 2]")
	 "%y = GroupedLinear(%x, %w, %n)\n%dw = GroupedLinearWgrad(%dy, %x, %n)\noutput %y, %dw",
	 "n=list:2,0,4", "y=dy", "w=dw", NULL, 1e-5},
	{"GroupedLinearWgrad transpose_weight", LEAF("x", "f64[5, 2]") LEAF("w", "f64[2, 2, 3]")
	 LEAF("n", "i64[2]") LEAF("dy", "f64[5, 3]")
	 "%y = GroupedLinear(%x, %w, %n) {transpose_weight=1}\n"
	 "%dw = GroupedLinearWgrad(%dy, %x, %n) {transpose_weight=1}\noutput %y, %dw",
	 "n=list:3,2", "y=dy", "w=dw", NULL, 1e-5},
	// Counts adding up to 5 of x's 7 rows: rows 5 and 6 (random, non-zero) are padding, whose
	// output rows the forward zeros, so that a weight gradient reading them would be wrong.
	{"GroupedLinearWgrad, padding rows after the counts", LEAF("x", "f64[7, 3]")
	 LEAF("w", "f64[3, 2, 3]") LEAF("n", "i64[3]") LEAF("dy", "f64[7, 2]")
	 "%y = GroupedLinear(%x, %w, %n)\n%dw = GroupedLinearWgrad(%dy, %x, %n)\noutput %y, %dw",
	 "n=list:2,0,3 x=uniform:1:2", "y=dy", "w=dw", NULL, 1e-5},
	{"GroupedLinearWgrad transpose_weight, padding rows", LEAF("x", "f64[6, 2]")
	 LEAF("w", "f64[2, 2, 3]") LEAF("n", "i64[2]") LEAF("dy", "f64[6, 3]")
	 "%y = GroupedLinear(%x, %w, %n) {transpose_weight=1}\n"
	 "%dw = GroupedLinearWgrad(%dy, %x, %n) {transpose_weight=1}\noutput %y, %dw",
	 "n=list:1,3 x=uniform:1:2", "y=dy", "w=dw", NULL, 1e-5},
	{"MoECombineGrad", LEAF("y", "f64[6, 2]") LEAF("p", "f64[3, 2]") LEAF("e", "i64[3, 2]")
	 LEAF("dz", "f64[3, 2]")
	 "%z = MoECombine(%y, %p, %e)\n%dy, %dp = MoECombineGrad(%dz, %y, %p, %e)\n"
	 "output %z, %dy, %dp",
	 "e=topk:4", "z=dz", "y=dy p=dp", NULL, 0},
};

#define N_CASES (sizeof cases / sizeof cases[0])

/* The optimizer ops. */

/* GlobalNorm over f32, bf16 and f64 inputs: sqrt of the sum of all squares, in double. */
static void test_global_norm(void) {
	runner r;
	const char *ir = LEAF("a", "f32[3, 4]") LEAF("b", "bf16[5]") LEAF("c", "f64[2, 2]")
		"%n = GlobalNorm(%a, %b, %c)\noutput %n";
	if (!runner_create(&r, "GlobalNorm", ir, false)) {
		CHECK(false);
		return;
	}
	fill_leaves(&r, "a=uniform:-3:3 b=uniform:-3:3 c=uniform:-3:3");
	CHECK(run(&r, true, true) == F8_OK);
	double sum = 0;
	const char *names[] = {"a", "b", "c"};
	for (int i = 0; i < 3; i++) {
		const f8_rt_tensor *x = tensor(&r, names[i]);
		for (int64_t j = 0; j < f8_rt_tensor_numel(x); j++)
			sum += f8_rt_tensor_get(x, j) * f8_rt_tensor_get(x, j);
	}
	double got = f8_rt_tensor_get(tensor(&r, "n"), 0), expected = (float)sqrt(sum);
	printf("%s GlobalNorm %.9g, expected %.9g\n", got == expected ? "ok  " : "FAIL", got,
	       expected);
	CHECK(got == expected);
	runner_destroy(&r);
}

/* The schedule written out: warm-up, then the style's decay to min_lr, min_lr past it. */
static double schedule(const char *style, int64_t it, int64_t warmup, int64_t decay_iters) {
	const double lr = 1e-3, min_lr = 1e-4, pi = 3.14159265358979323846;
	if (it <= warmup)
		return lr * (double)it / (double)warmup;
	if (strcmp(style, "constant") == 0)
		return lr;
	if (it > decay_iters)
		return min_lr;
	double ratio = (double)(it - warmup) / (double)(decay_iters - warmup);
	if (strcmp(style, "linear") == 0)
		return min_lr + (lr - min_lr) * (1.0 - ratio);
	return min_lr + (lr - min_lr) * 0.5 * (1.0 + cos(pi * ratio));
}

/* The learning rate at iteration `it`; NaN when the kernel fails. */
static double rate_at(runner *r, int64_t it) {
	f8_diag diag;
	f8_rt_tensor_set(tensor(r, "it"), 0, (double)it);
	if (run_node(r, find_node(r, F8_OP_LEARNING_RATE), -1, &diag))
		return NAN;
	return f8_rt_tensor_get(tensor(r, "lr"), 0);
}

/* Every iteration of a schedule of `style`, and with warmup 4 and decay_iters 12 its
 * endpoints by their values: warm-up's ends, the decay's midpoint and end, past the end. */
static void check_schedule(const char *style, int64_t warmup, int64_t decay) {
	char ir[512];
	snprintf(ir, sizeof ir, "%s%%lr = LearningRate(%%it) {lr=0.001, min_lr=0.0001, "
		 "warmup=%lld, decay_iters=%lld, style=\"%s\"}\noutput %%lr",
		 LEAF("it", "i64[]"), (long long)warmup, (long long)decay, style);
	runner r;
	if (!runner_create(&r, "LearningRate", ir, false)) {
		CHECK(false);
		return;
	}
	bool all = true, constant = strcmp(style, "constant") == 0;
	for (int64_t it = 1; it <= decay + 4; it++)
		all &= rate_at(&r, it) == (float)schedule(style, it, warmup, decay);
	printf("%s LearningRate %-8s warmup %lld, decay_iters %lld: every iteration\n",
	       all ? "ok  " : "FAIL", style, (long long)warmup, (long long)decay);
	CHECK(all);
	if (warmup == 4 && decay == 12) {
		CHECK(rate_at(&r, 1) == (float)0.00025 && rate_at(&r, 4) == (float)0.001);
		CHECK(fabs(rate_at(&r, 8) - (constant ? 1e-3 : 5.5e-4)) < 1e-10);
		CHECK(rate_at(&r, 12) == (float)(constant ? 0.001 : 0.0001));
		CHECK(rate_at(&r, 100) == (float)(constant ? 0.001 : 0.0001));
	}
	CHECK(isnan(rate_at(&r, 0))); // iterations count from 1
	runner_destroy(&r);
}

static void test_learning_rate(void) {
	const char *styles[] = {"constant", "linear", "cosine"};
	for (int s = 0; s < 3; s++) {
		check_schedule(styles[s], 4, 12);
		check_schedule(styles[s], 0, 10);
	}
}

/* torch's _single_tensor_adamw on one f32 element, written out as adamw.py reads (lerp's
 * small-weight branch: 1 - beta1 < 0.5), each tensor op a float32 statement, each scalar a
 * double cast to float where the op takes it. */
static void torch_adamw(float *param, float grad, float *m, float *v, double lr, int64_t step,
			double weight_decay, const float *grad_scale) {
	const double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
	if (grad_scale)
		grad = grad * *grad_scale;
	*param = *param * (float)(1 - lr * weight_decay); // param.mul_(1 - lr * weight_decay)
	float difference = grad - *m;                     // exp_avg.lerp_(grad, 1 - beta1)
	float moved = (float)(1 - beta1) * difference;
	*m = *m + moved;
	*v = *v * (float)beta2; // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
	float square = (float)(1 - beta2) * grad;
	square = square * grad;
	*v = *v + square;
	double bias_correction1 = 1 - pow(beta1, (double)step);
	double bias_correction2 = 1 - pow(beta2, (double)step);
	double step_size = lr / bias_correction1;
	double bias_correction2_sqrt = sqrt(bias_correction2);
	float denom = sqrtf(*v) / (float)bias_correction2_sqrt; // (exp_avg_sq.sqrt() / bc2_sqrt)
	denom = denom + (float)eps;                             // .add_(eps)
	float update = (float)-step_size * *m; // param.addcdiv_(exp_avg, denom, value=-step_size)
	update = update / denom;
	*param = *param + update;
}

/* Textbook AdamW in double (m and v kept in f32 between steps, as the op stores them). */
static void double_adamw(double *param, double grad, float *m, float *v, double lr, int64_t step,
			 double weight_decay, double grad_scale) {
	const double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
	grad *= grad_scale;
	*param *= 1 - lr * weight_decay;
	double m2 = *m + (1 - beta1) * (grad - *m), v2 = beta2 * *v + (1 - beta2) * grad * grad;
	*param -= lr / (1 - pow(beta1, (double)step)) * m2 /
		  (sqrt(v2) / sqrt(1 - pow(beta2, (double)step)) + eps);
	*m = (float)m2, *v = (float)v2;
}

/*
 * Three AdamW steps of a parameter of `param_type` with gradients of `grad_type` (and a
 * grad_scale when `scaled`) against torch_adamw, bit for bit (f32 parameters), or against
 * double_adamw (f64 parameters). m and v start at zero, as torch's state does.
 */
static void test_adamw(const char *param_type, const char *grad_type, bool scaled) {
	char ir[1024];
	snprintf(ir, sizeof ir, "input %%p : %s[9]\ninput %%g : %s[9]\n%s%s%s%s%s"
		 "%%p2, %%m2, %%v2 = AdamW(%%p, %%g, %%m, %%v, %%lr, %%t%s) {weight_decay=0.1}\n"
		 "output %%p2, %%m2, %%v2", param_type, grad_type, LEAF("m", "f32[9]"),
		 LEAF("v", "f32[9]"), LEAF("lr", "f32[]"), LEAF("t", "i64[]"),
		 scaled ? LEAF("s", "f32[]") : "", scaled ? ", %s" : "");
	runner r;
	if (!runner_create(&r, "AdamW", ir, false)) {
		CHECK(false);
		return;
	}
	bool wide = strcmp(param_type, "f64") == 0, exact = true;
	double worst = 0, rates[3] = {1e-3, 8e-4, 6e-4};
	float scale = 0.5f, p32[9], m[9] = {0}, v[9] = {0};
	double p64[9];
	CHECK(test_fill(tensor(&r, "p"), "", "uniform:-1:1"));
	for (int i = 0; i < 9; i++)
		p32[i] = (float)(p64[i] = f8_rt_tensor_get(tensor(&r, "p"), i));
	if (scaled)
		f8_rt_tensor_set(tensor(&r, "s"), 0, scale);
	for (int64_t step = 1; step <= 3; step++) {
		f8_rt_tensor_set(tensor(&r, "lr"), 0, rates[step - 1]);
		f8_rt_tensor_set(tensor(&r, "t"), 0, (double)step);
		CHECK(test_fill(tensor(&r, "g"), "uniform:-2:2", ""));
		CHECK(run(&r, true, true) == F8_OK);
		double lr = f8_rt_tensor_get(tensor(&r, "lr"), 0);
		for (int i = 0; i < 9; i++) {
			double g = f8_rt_tensor_get(tensor(&r, "g"), i);
			if (wide) {
				double_adamw(&p64[i], g, &m[i], &v[i], lr, step, 0.1,
					     scaled ? scale : 1);
				double got = f8_rt_tensor_get(tensor(&r, "p2"), i);
				worst = fmax(worst, fabs(got - p64[i]) / fabs(p64[i]));
			} else {
				torch_adamw(&p32[i], (float)g, &m[i], &v[i], lr, step, 0.1,
					    scaled ? &scale : NULL);
				exact &= f8_rt_tensor_get(tensor(&r, "p2"), i) == p32[i];
			}
			exact &= f8_rt_tensor_get(tensor(&r, "m2"), i) == m[i];
			exact &= f8_rt_tensor_get(tensor(&r, "v2"), i) == v[i];
			// Step 1 from zero moments moves by lr * sign(g) past the decay (to the
			// f32 rounding of a parameter near 1: 1e-3 lr).
			double moved = f8_rt_tensor_get(tensor(&r, "p2"), i) -
				       f8_rt_tensor_get(tensor(&r, "p"), i) * (1 - lr * 0.1);
			if (step == 1)
				CHECK(fabs(fabs(moved) - lr) < 1e-3 * lr && (moved < 0) == (g > 0));
		}
		const char *names[3][2] = {{"p", "p2"}, {"m", "m2"}, {"v", "v2"}};
		for (int k = 0; k < 3; k++) // the next step starts from this one's results
			for (int i = 0; i < 9; i++)
				f8_rt_tensor_set(tensor(&r, names[k][0]), i,
						 f8_rt_tensor_get(tensor(&r, names[k][1]), i));
	}
	bool ok = exact && worst < 1e-12;
	printf("%s AdamW param %s, grad %s%s: three steps against %s\n", ok ? "ok  " : "FAIL",
	       param_type, grad_type, scaled ? ", grad_scale" : "",
	       wide ? "double AdamW" : "torch's float32 arithmetic, bit for bit");
	CHECK(ok);
	runner_destroy(&r);
}

/* A kernel given data out of its range: `leaf`[element] set to `value` after the fills. */
typedef struct failure_case {
	const char *name;
	const char *ir; // one node, reading leaves only
	const char *fills;
	const char *leaf;
	int64_t element;
	double value;
} failure_case;

static const failure_case failures[] = {
	{"EmbeddingGrad id past the vocabulary", LEAF("dy", "f32[2, 3]") LEAF("ids", "i64[2]")
	 "%dw = EmbeddingGrad(%dy, %ids) {vocab=4}\noutput %dw", "ids=int:0:3", "ids", 1, 4},
	{"EmbeddingGrad negative id", LEAF("dy", "f32[2, 3]") LEAF("ids", "i64[2]")
	 "%dw = EmbeddingGrad(%dy, %ids) {vocab=4}\noutput %dw", "ids=int:0:3", "ids", 0, -1},
	{"GatherGrad index past the end", LEAF("dy", "f32[2, 3]") LEAF("i", "i64[2]")
	 "%dx = GatherGrad(%dy, %i) {size=3}\noutput %dx", "i=int:0:2", "i", 0, 3},
	{"GatherGrad index before the start", LEAF("dy", "f32[2, 3]") LEAF("i", "i64[2]")
	 "%dx = GatherGrad(%dy, %i) {size=3}\noutput %dx", "i=int:0:2", "i", 1, -4},
	{"CrossEntropyGrad label past the vocabulary", LEAF("dl", "f32[]") LEAF("x", "f32[2, 4]")
	 LEAF("t", "i64[2]") LEAF("lse", "f32[2]")
	 "%dx = CrossEntropyGrad(%dl, %x, %t, %lse)\noutput %dx", "t=int:0:3", "t", 1, 4},
	{"RouterGrad expert past the experts", LEAF("dp", "f32[2, 2]") LEAF("x", "f32[2, 3]")
	 LEAF("p", "f32[2, 2]") LEAF("i", "i64[2, 2]")
	 "%dx = RouterGrad(%dp, %x, %p, %i) {top_k=2}\noutput %dx", "i=topk:3", "i", 3, 3},
	{"MoEDispatchGrad expert past the experts", LEAF("ds", "f32[4, 2]") LEAF("e", "i64[2, 2]")
	 "%dx = MoEDispatchGrad(%ds, %e) {experts=3}\noutput %dx", "e=topk:3", "e", 0, 3},
	{"MoECombineGrad negative expert", LEAF("dz", "f32[2, 2]") LEAF("y", "f32[4, 2]")
	 LEAF("p", "f32[2, 2]") LEAF("e", "i64[2, 2]")
	 "%dy, %dp = MoECombineGrad(%dz, %y, %p, %e)\noutput %dy, %dp", "e=topk:3", "e", 2, -1},
	{"GroupedLinearWgrad counts past the rows", LEAF("dy", "f32[4, 2]") LEAF("x", "f32[4, 3]")
	 LEAF("n", "i64[2]") "%dw = GroupedLinearWgrad(%dy, %x, %n)\noutput %dw", "n=list:1,3",
	 "n", 1, 4},
	{"GroupedLinearWgrad negative count", LEAF("dy", "f32[4, 2]") LEAF("x", "f32[4, 3]")
	 LEAF("n", "i64[2]") "%dw = GroupedLinearWgrad(%dy, %x, %n)\noutput %dw", "n=list:1,3",
	 "n", 0, -1},
	{"AdamW step 0", LEAF("p", "f32[3]") LEAF("g", "f32[3]") LEAF("m", "f32[3]")
	 LEAF("v", "f32[3]") LEAF("lr", "f32[]") LEAF("t", "i64[]")
	 "%p2, %m2, %v2 = AdamW(%p, %g, %m, %v, %lr, %t)\noutput %p2, %m2, %v2", "", "t", 0, 0},
};

#define N_FAILURES (sizeof failures / sizeof failures[0])

/* Each failure case fails with F8_ERR_INVALID, a message and the node named. */
static void test_failures(void) {
	for (size_t i = 0; i < N_FAILURES; i++) {
		const failure_case *c = &failures[i];
		runner r;
		if (!runner_create(&r, c->name, c->ir, false)) {
			CHECK(false);
			continue;
		}
		fill_leaves(&r, c->fills);
		f8_rt_tensor_set(tensor(&r, c->leaf), c->element, c->value);
		f8_diag diag;
		const f8_node *node = &r.graph->nodes[r.graph->order[0]];
		bool ok = run_node(&r, node, -1, &diag) == F8_ERR_INVALID && diag.message[0] &&
			  diag.node[0];
		printf("%s %-56s %s\n", ok ? "ok  " : "FAIL", c->name, diag.message);
		CHECK(ok);
		runner_destroy(&r);
	}
}

int main(int argc, char **argv) {
	uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 0) : 20250601;
	printf("seed %llu (rerun with: test_kernels_backward %llu)\n", (unsigned long long)seed,
	       (unsigned long long)seed);
	for (size_t i = 0; i < N_CASES; i++)
		run_case(&cases[i], seed + i);
	rng_state = seed;
	test_global_norm();
	test_learning_rate();
	test_adamw("f32", "f32", false);
	test_adamw("f32", "bf16", true);
	test_adamw("f64", "f64", true);
	test_failures();
	return test_finish();
}
