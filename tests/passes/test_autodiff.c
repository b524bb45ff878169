/*
 * Unit tests of reverse-mode autodiff and the training pass: the rule table matches the ops
 * flagged differentiable; every rule makes well-typed gradients on a small graph of its op; the
 * gradients of a value read twice are summed under `<value>.grad`; what has no gradient is
 * refused naming the node; the training step of the model zoo's tiny models verifies and has
 * the names, phases, outputs and updates of passes/training.h; allocation failure at every
 * allocation is reported as such.
 *
 * usage: test_autodiff SOURCE_DIR
 */
#define _POSIX_C_SOURCE 200809L // open_memstream

#include <stdio.h>  // printf, snprintf, open_memstream
#include <stdlib.h> // free
#include <string.h> // strcmp, strstr, strlen

#include "frontend/frontend.h"  // f8_frontend_load
#include "ir/text.h"            // f8_text_parse
#include "ir/verify.h"          // f8_graph_verify
#include "passes/autodiff.h"    // f8_autodiff_build
#include "passes/canonicalize.h" // f8_pass_canonicalize_run
#include "passes/gradients.h"   // f8_grad_rule_get
#include "passes/pipeline.h"    // f8_pipeline_run
#include "passes/training.h"    // f8_pass_training_run
#include "tests/test_support.h" // CHECK, test_fail_allocations_after

static const char *source_dir;

/* Every op flagged differentiable has a rule, and no other op has one. */
static void test_rule_table(void) {
	for (int op = 0; op < F8_OP_COUNT; op++) {
		bool flagged = f8_op_get_info((f8_op)op)->flags & F8_OPF_DIFFERENTIABLE;
		bool has_rule = f8_grad_rule_get((f8_op)op) != NULL;
		if (flagged != has_rule)
			printf("FAIL %s: flagged %d, rule %d\n", f8_op_name((f8_op)op), flagged, has_rule);
		CHECK(flagged == has_rule);
	}
	CHECK(f8_grad_rule_get(F8_OP_COUNT) == NULL);
}

/* Parses `body` inside `graph g { ... }` and infers its types; NULL (with a message) on failure. */
static f8_graph *parse(const char *body) {
	char text[4096];
	snprintf(text, sizeof text, "graph g {\n%s\n}\n", body);
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_graph *graph = NULL;
	if (f8_text_parse(text, strlen(text), "test", &graph, &diag) ||
	    f8_pass_canonicalize_run(graph, &diag) || f8_graph_verify(graph, &diag)) {
		printf("cannot build the graph:\n%s", text);
		f8_diag_print(&diag, stdout);
		f8_graph_destroy(graph);
		return NULL;
	}
	return graph;
}

static f8_value_id find(const f8_graph *graph, const char *name) {
	return f8_graph_find_value(graph, name, strlen(name));
}

/* The float leaves of `graph` (inputs and params): what a gradient check differentiates. */
static uint32_t float_leaves(const f8_graph *graph, f8_value_id *out, uint32_t cap) {
	uint32_t n = 0;
	for (uint32_t i = 0; i < graph->n_inputs && n < cap; i++) {
		f8_dtype dtype = graph->values[graph->inputs[i]].type.dtype;
		if (dtype == F8_DTYPE_F32 || dtype == F8_DTYPE_BF16 || dtype == F8_DTYPE_F64)
			out[n++] = graph->inputs[i];
	}
	return n;
}

/*
 * One small graph per rule, its loss %loss a float scalar: autodiff with respect to every float
 * leaf must succeed, give each a gradient of its type, and leave a graph that verifies.
 */
static const struct rule_case {
	const char *name;
	const char *ir;
} rule_cases[] = {
	{"Add", "input %a : f32[2, 3]\ninput %b : f32[3]\n%y = Add(%a, %b)"},
	{"Sub", "input %a : f32[2, 1]\ninput %b : f32[2, 3]\n%y = Sub(%a, %b)"},
	{"Mul", "input %a : f32[4, 2, 3]\ninput %b : f32[2, 1]\n%y = Mul(%a, %b)"},
	{"Div", "input %a : f32[2, 3]\ninput %b : f32[1, 3]\n%y = Div(%a, %b)"},
	{"Pow", "input %a : f32[2, 3]\ninput %b : f32[3]\n%y = Pow(%a, %b)"},
	{"Pow by a constant", "input %a : f32[2, 3]\n%c = Constant() {value=f32[](3)}\n"
			      "%y = Pow(%a, %c)"},
	{"Pow by 2", "input %a : f32[2, 3]\n%c = Constant() {value=f32[](2)}\n%y = Pow(%a, %c)"},
	{"Sqrt", "input %a : f32[2, 3]\n%y = Sqrt(%a)"},
	{"Reciprocal", "input %a : f32[2, 3]\n%y = Reciprocal(%a)"},
	{"Neg", "input %a : f32[2, 3]\n%y = Neg(%a)"},
	{"Abs", "input %a : f32[2, 3]\n%y = Abs(%a)"},
	{"Exp", "input %a : f32[2, 3]\n%y = Exp(%a)"},
	{"Log", "input %a : f32[2, 3]\n%y = Log(%a)"},
	{"Tanh", "input %a : bf16[2, 3]\n%t = Tanh(%a)\n%y = Cast(%t) {to=f32}"},
	{"Cos", "input %a : f32[2, 3]\n%y = Cos(%a)"},
	{"Sin", "input %a : f32[2, 3]\n%y = Sin(%a)"},
	{"Erf", "input %a : f32[2, 3]\n%y = Erf(%a)"},
	{"Sigmoid", "input %a : f32[2, 3]\n%y = Sigmoid(%a)"},
	{"Max", "input %a : f32[2, 3]\ninput %b : f32[3]\n%y = Max(%a, %b)"},
	{"Min", "input %a : f32[2, 3]\ninput %b : f32[2, 3]\n%y = Min(%a, %b)"},
	{"Relu", "input %a : f32[2, 3]\n%y = Relu(%a)"},
	{"Identity", "input %a : f32[2, 3]\n%y = Identity(%a)"},
	{"Dropout", "input %a : f32[2, 3]\n%y, %mask = Dropout(%a) {ratio=0.1}"},
	{"Where", "input %c : bool[2, 3]\ninput %a : f32[3]\ninput %b : f32[2, 3]\n"
		  "%y = Where(%c, %a, %b)"},
	{"Cast", "input %a : f32[2, 3]\n%h = Cast(%a) {to=bf16}\n%y = Cast(%h) {to=f32}"},
	{"CastLike", "input %a : bf16[2, 3]\n%b = Constant() {value=f32[](0)}\n%y = CastLike(%a, %b)"},
	{"MatMul", "input %a : f32[2, 3, 4]\ninput %b : f32[4, 5]\n%y = MatMul(%a, %b)"},
	{"MatMul batch broadcast", "input %a : f32[3, 4]\ninput %b : f32[2, 4, 5]\n"
				   "%y = MatMul(%a, %b)"},
	{"MatMul vector left", "input %a : f32[4]\ninput %b : f32[2, 4, 5]\n%y = MatMul(%a, %b)"},
	{"MatMul vector right", "input %a : f32[2, 3, 4]\ninput %b : f32[4]\n%y = MatMul(%a, %b)"},
	{"MatMul vectors", "input %a : f32[4]\ninput %b : f32[4]\n%y = MatMul(%a, %b)"},
	{"Gemm", "input %a : f32[4, 3]\ninput %b : f32[5, 4]\ninput %c : f32[5]\n"
		 "%y = Gemm(%a, %b, %c) {alpha=0.5, beta=2, transA=1, transB=1}"},
	{"Gemm plain", "input %a : f32[3, 4]\ninput %b : f32[4, 5]\ninput %c : f32[3, 1]\n"
		       "%y = Gemm(%a, %b, %c)"},
	{"Gather", "input %a : f32[5, 4]\ninput %i : i64[2, 3]\n%y = Gather(%a, %i) {axis=1}"},
	{"Reshape", "input %a : f32[2, 6]\n%y = Reshape(%a) {shape=[3, 4]}"},
	{"Transpose", "input %a : f32[2, 3, 4]\n%y = Transpose(%a) {perm=[1, 2, 0]}"},
	{"Transpose reversed", "input %a : f32[2, 3, 4]\n%y = Transpose(%a)"},
	{"Unsqueeze", "input %a : f32[2, 3]\n%y = Unsqueeze(%a) {axes=[0, 3]}"},
	{"Squeeze", "input %a : f32[2, 1, 3]\n%y = Squeeze(%a) {axes=[1]}"},
	{"Concat", "input %a : f32[2, 3]\ninput %b : f32[2, 5]\n%y = Concat(%a, %b) {axis=-1}"},
	{"Split", "input %a : f32[2, 6]\n%p, %q, %r = Split(%a) {axis=1, split=[1, 2, 3]}\n"
		  "%y = Mul(%p, %r)"},
	{"Slice", "input %a : f32[6, 4]\n%y = Slice(%a) {starts=[1, 0], ends=[5, 4], axes=[0, 1], "
		  "steps=[2, 1]}"},
	{"Expand", "input %a : f32[3, 1]\n%y = Expand(%a) {shape=[2, 3, 4]}"},
	{"Trilu", "input %a : f32[4, 4]\n%y = Trilu(%a) {upper=0}"},
	{"Softmax", "input %a : f32[2, 5]\n%y = Softmax(%a) {axis=-1}"},
	{"LogSoftmax", "input %a : f32[2, 5]\n%y = LogSoftmax(%a) {axis=0}"},
	{"ReduceMean", "input %a : f32[2, 3, 4]\n%y = ReduceMean(%a) {axes=[1], keepdims=0}"},
	{"ReduceMean symbolic", "input %a : f32[n, 4]\n%y = ReduceMean(%a) {axes=[0]}"},
	{"ReduceSum", "input %a : f32[2, 3, 4]\n%y = ReduceSum(%a) {axes=[0, 2], keepdims=0}"},
	{"ReduceMax", "input %a : f32[2, 3, 4]\n%y = ReduceMax(%a) {axes=[-1]}"},
	{"CumSum", "input %a : f32[2, 5]\n%y = CumSum(%a) {axis=1, exclusive=1}"},
	{"AllReduce", "input %a : f32[2, 4]\n%y = AllReduce(%a) {group=\"tp\"}"},
	{"AllGather", "input %a : f32[2, 4]\n%y = AllGather(%a) {group=\"tp\", axis=1, ranks=2}"},
	{"ReduceScatter", "input %a : f32[2, 4]\n%y = ReduceScatter(%a) {group=\"tp\", axis=1, "
			  "ranks=2}"},
	{"Linear", "input %x : f32[2, 3, 4]\nparam %w : f32[5, 4]\nparam %b : f32[5]\n"
		   "%y = Linear(%x, %w, %b)"},
	{"Linear transposed", "input %x : f32[4]\nparam %w : f32[4, 5]\nparam %b : f32[5]\n"
			      "%y = Linear(%x, %w, %b) {transpose_weight=1}"},
	{"LayerNorm", "input %x : f32[2, 3, 8]\nparam %g : f32[8]\nparam %b : f32[8]\n"
		      "%y = LayerNorm(%x, %g, %b) {epsilon=1e-05}"},
	{"LayerNorm without beta", "input %x : f32[2, 8]\nparam %g : f32[8]\n"
				   "%y = LayerNorm(%x, %g)"},
	{"RMSNorm", "input %x : f32[2, 8]\nparam %g : f32[8]\n%y = RMSNorm(%x, %g)"},
	{"Attention", "input %q : f32[1, 4, 3, 8]\ninput %k : f32[1, 2, 5, 8]\n"
		      "input %v : f32[1, 2, 5, 6]\ninput %m : bool[3, 5]\n"
		      "%y = Attention(%q, %k, %v, %m) {scale=0.5}"},
	{"Gelu", "input %x : f32[2, 8]\n%y = Gelu(%x) {approximate=\"tanh\"}"},
	{"SwiGLU", "input %x : f32[2, 8]\n%y = SwiGLU(%x)"},
	{"SwiGLU of two", "input %g : f32[2, 8]\ninput %u : f32[2, 8]\n%y = SwiGLU(%g, %u)"},
	{"Rope", "input %x : f32[1, 2, 3, 8]\n%cos = Constant() {value=f32[3, 2](1, 1, 1, 1, 1, 1)}\n"
		 "%sin = Constant() {value=f32[3, 2](0, 0, 0, 0, 0, 0)}\n%y = Rope(%x, %cos, %sin)"},
	{"Embedding", "input %i : i64[2, 3]\nparam %w : f32[10, 4]\n%y = Embedding(%i, %w)"},
	{"CrossEntropy", "input %x : f32[2, 3, 10]\ninput %l : i64[2, 3]\n"
			 "%loss = CrossEntropy(%x, %l) {ignore_index=-1}"},
	{"MoE", "input %x : f32[6, 4]\nparam %r : f32[4, 4]\nparam %w1 : f32[4, 8, 4]\n"
		"param %w2 : f32[4, 4, 8]\n%logits = Linear(%x, %r)\n"
		"%probs, %experts = Router(%logits) {top_k=2}\n"
		"%sorted, %counts = MoEDispatch(%x, %experts) {experts=4}\n"
		"%h = GroupedLinear(%sorted, %w1, %counts)\n"
		"%y2 = GroupedLinear(%h, %w2, %counts)\n%y = MoECombine(%y2, %probs, %experts)"},
};

static void test_rule_case(const struct rule_case *c) {
	char body[2048];
	// The loss: the sum of %y, unless the case makes %loss itself.
	snprintf(body, sizeof body, "%s\n%s", c->ir,
		 strstr(c->ir, "%loss") ? "output %loss" : "%loss = ReduceSum(%y) {keepdims=0}\n"
							  "output %loss");
	f8_graph *graph = parse(body);
	CHECK(graph != NULL);
	if (!graph)
		return;
	f8_value_id wrt[8], grads[8];
	uint32_t n = float_leaves(graph, wrt, 8);
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_status status = f8_autodiff_build(graph, find(graph, "loss"), F8_NONE, wrt, n,
					     F8_PHASE_BWD, grads, &diag);
	for (uint32_t i = 0; !status && i < n; i++)
		if (grads[i] != F8_NONE)
			CHECK(f8_graph_add_output(graph, grads[i]) == F8_OK);
	if (!status)
		status = f8_graph_verify(graph, &diag);
	if (status) {
		printf("FAIL rule case %s:\n", c->name);
		f8_diag_print(&diag, stdout);
	}
	CHECK(status == F8_OK);
	for (uint32_t i = 0; !status && i < n; i++) {
		if (grads[i] == F8_NONE) {
			printf("FAIL rule case %s: no gradient for %%%s\n", c->name,
			       graph->values[wrt[i]].name);
			CHECK(grads[i] != F8_NONE);
			continue;
		}
		CHECK(f8_type_equal(&graph->values[grads[i]].type, &graph->values[wrt[i]].type));
		CHECK(graph->values[grads[i]].role == F8_ROLE_GRADIENT);
		CHECK(graph->nodes[graph->values[grads[i]].producer].phase == F8_PHASE_BWD);
	}
	f8_graph_destroy(graph);
}

/* A weight read twice: its gradient is the Add of the two contributions, named %w.grad. */
static void test_summed_gradients(void) {
	f8_graph *graph = parse("input %x : f32[4, 8]\nparam %w : f32[8, 8]\n"
				"%a = Linear(%x, %w)\n%b = Linear(%a, %w)\n"
				"%loss = ReduceSum(%b) {keepdims=0}\noutput %loss");
	if (!graph)
		return;
	f8_value_id w = find(graph, "w"), grad = F8_NONE;
	f8_diag diag;
	f8_diag_clear(&diag);
	CHECK(f8_autodiff_build(graph, find(graph, "loss"), F8_NONE, &w, 1, F8_PHASE_BWD, &grad,
				&diag) == F8_OK);
	CHECK(grad != F8_NONE && strcmp(graph->values[grad].name, "w.grad") == 0);
	const f8_node *sum = grad != F8_NONE ? &graph->nodes[graph->values[grad].producer] : NULL;
	CHECK(sum && sum->op == F8_OP_ADD && sum->n_inputs == 2);
	for (uint32_t i = 0; sum && i < 2; i++) {
		const f8_value *part = &graph->values[sum->inputs[i]];
		CHECK(graph->nodes[part->producer].op == F8_OP_LINEAR_WGRAD);
		CHECK(strncmp(part->name, "w.grad.", 7) == 0);
	}
	CHECK(f8_graph_verify(graph, &diag) == F8_OK);
	f8_graph_destroy(graph);
}

/* A loss that does not depend on a value gives it no gradient; integers pass none back. */
static void test_no_gradient(void) {
	f8_graph *graph = parse("input %x : f32[4]\ninput %z : f32[4]\n%i = Cast(%x) {to=i64}\n"
				"%f = Cast(%i) {to=f32}\n%y = Mul(%f, %z)\n"
				"%loss = ReduceSum(%y) {keepdims=0}\noutput %loss");
	if (!graph)
		return;
	f8_value_id wrt[2] = {find(graph, "x"), find(graph, "z")}, grads[2];
	f8_diag diag;
	f8_diag_clear(&diag);
	CHECK(f8_autodiff_build(graph, find(graph, "loss"), F8_NONE, wrt, 2, F8_PHASE_BWD, grads,
				&diag) == F8_OK);
	CHECK(grads[0] == F8_NONE && grads[1] != F8_NONE);
	f8_graph_destroy(graph);
}

/* Runs autodiff of %loss with respect to %w on `body`; returns its status, diag filled. */
static f8_status differentiate(const char *body, f8_diag *diag) {
	f8_graph *graph = parse(body);
	if (!graph)
		return F8_ERR_INVALID;
	f8_value_id w = find(graph, "w"), grad;
	f8_diag_clear(diag);
	f8_status status = f8_autodiff_build(graph, find(graph, "loss"), F8_NONE, &w, 1,
					     F8_PHASE_BWD, &grad, diag);
	f8_graph_destroy(graph);
	return status;
}

static void test_refusals(void) {
	f8_diag diag;
	// An op without a rule on the path, named.
	CHECK(differentiate("input %i : i64[2, 1]\nparam %w : f32[4, 3]\n%r = GatherND(%w, %i)\n"
			    "%loss = ReduceSum(%r) {keepdims=0}\noutput %loss",
			    &diag) == F8_ERR_UNSUPPORTED);
	CHECK(strstr(diag.node, "GatherND") && strstr(diag.message, "no gradient rule"));
	// Rope's tables are buffers: a parameter behind them is refused.
	CHECK(differentiate("input %x : f32[1, 1, 2, 4]\nparam %w : f32[2, 4]\n"
			    "%s = Sin(%w)\n%y = Rope(%x, %w, %s)\n"
			    "%loss = ReduceSum(%y) {keepdims=0}\noutput %loss",
			    &diag) == F8_ERR_UNSUPPORTED);
	CHECK(strstr(diag.node, "Rope") && strstr(diag.message, "cos"));
	// A wrt value the loss depends on must be float.
	CHECK(differentiate("input %w : i64[4]\n%f = Cast(%w) {to=f32}\n"
			    "%loss = ReduceSum(%f) {keepdims=0}\noutput %loss",
			    &diag) == F8_ERR_UNSUPPORTED);
	// The loss must be float.
	CHECK(differentiate("input %w : f32[4]\n%loss = Cast(%w) {to=i64}\noutput %loss", &diag) ==
	      F8_ERR_ARGUMENT);
}

/* An explicit seed, and a loss that is not a scalar (the gradient of the sum of its elements). */
static void test_seed(void) {
	f8_graph *graph = parse("input %w : f32[3]\ninput %s : f32[]\n%loss = Mul(%w, %w)\n"
				"output %loss");
	if (!graph)
		return;
	f8_value_id w = find(graph, "w"), grad;
	f8_diag diag;
	f8_diag_clear(&diag);
	CHECK(f8_autodiff_build(graph, find(graph, "loss"), find(graph, "s"), &w, 1, F8_PHASE_BWD,
				&grad, &diag) == F8_OK);
	CHECK(grad != F8_NONE && f8_graph_verify(graph, &diag) == F8_OK);
	f8_graph_destroy(graph);
}

/* Whether the value `name` is a leaf of `role`, `dtype` and `shape`. */
static bool is_leaf(const f8_graph *graph, const char *name, f8_role role, f8_dtype dtype,
		    const f8_shape *shape) {
	f8_value_id id = find(graph, name);
	if (id == F8_NONE)
		return false;
	const f8_value *value = &graph->values[id];
	return value->producer == F8_NONE && value->role == role && value->type.dtype == dtype &&
	       f8_shape_equal(&value->type.shape, shape);
}

/* The update of `target` whose source is made in `phase` by `op` (output `index`), if any. */
static bool has_update(const f8_graph *graph, f8_value_id target, f8_phase phase, f8_op op,
		       uint32_t index) {
	for (uint32_t i = 0; i < graph->n_updates; i++) {
		const f8_value *source = &graph->values[graph->updates[i].source];
		if (graph->updates[i].target != target || source->producer == F8_NONE)
			continue;
		const f8_node *node = &graph->nodes[source->producer];
		if (node->phase == phase && node->op == op && source->output_index == index)
			return true;
	}
	return false;
}

/* A node reads leaves and values made in its own phase, or, in bwd, in fwd: what one executor
 * run of fwd|bwd, then one of opt, can give it. */
static bool phases_are_runnable(const f8_graph *graph) {
	for (uint32_t p = 0; p < graph->n_order; p++) {
		const f8_node *node = &graph->nodes[graph->order[p]];
		for (uint32_t i = 0; i < node->n_inputs; i++) {
			if (node->inputs[i] == F8_NONE)
				continue;
			f8_node_id producer = graph->values[node->inputs[i]].producer;
			if (producer == F8_NONE)
				continue;
			f8_phase made = graph->nodes[producer].phase;
			bool ok = made == node->phase || (node->phase == F8_PHASE_BWD && made == F8_PHASE_FWD);
			if (!ok) {
				char what[F8_DIAG_NODE_MAX];
				printf("FAIL %s reads %%%s, made in phase %s\n",
				       f8_graph_describe_node(graph, graph->order[p], what, sizeof what),
				       graph->values[node->inputs[i]].name, f8_phase_name(made));
				return false;
			}
		}
	}
	return true;
}

/* The training graph has what passes/training.h promises the runtime; n_trained parameters
 * have states and updates. */
static void check_training_contract(const f8_graph *graph, uint32_t n_trained) {
	CHECK(phases_are_runnable(graph));
	static const char *const outputs[3] = {"loss", "grad_norm", "lr"};
	static const f8_phase phases[3] = {F8_PHASE_FWD, F8_PHASE_OPT, F8_PHASE_OPT};
	CHECK(graph->n_outputs == 3);
	for (uint32_t i = 0; i < 3 && i < graph->n_outputs; i++) {
		const f8_value *value = &graph->values[graph->outputs[i]];
		CHECK(strcmp(value->name, outputs[i]) == 0);
		CHECK(value->type.dtype == F8_DTYPE_F32 && value->type.shape.rank == 0);
		CHECK(value->producer != F8_NONE && graph->nodes[value->producer].phase == phases[i]);
	}
	f8_value_id loss = find(graph, "loss");
	const f8_node *ce = &graph->nodes[graph->values[loss].producer];
	CHECK(ce->op == F8_OP_CROSS_ENTROPY);
	f8_shape rows = graph->values[ce->inputs[0]].type.shape;
	rows.rank--;
	CHECK(ce->inputs[1] == find(graph, "labels"));
	CHECK(is_leaf(graph, "labels", F8_ROLE_INPUT, F8_DTYPE_I64, &rows));
	f8_shape scalar = {0};
	CHECK(is_leaf(graph, "iteration", F8_ROLE_OPTIMIZER_STATE, F8_DTYPE_I64, &scalar));
	CHECK(has_update(graph, find(graph, "iteration"), F8_PHASE_OPT, F8_OP_ADD, 0));
	uint32_t trained = 0;
	char name[300];
	for (uint32_t i = 0; i < graph->n_inputs; i++) {
		const f8_value *param = &graph->values[graph->inputs[i]];
		snprintf(name, sizeof name, "%s.main_grad", param->name);
		if (param->role != F8_ROLE_PARAMETER || find(graph, name) == F8_NONE)
			continue; // not trained
		trained++;
		CHECK(param->type.dtype == F8_DTYPE_F32); // master weights
		const f8_shape *shape = &param->type.shape;
		static const char *const states[3] = {"main_grad", "exp_avg", "exp_avg_sq"};
		for (int s = 0; s < 3; s++) {
			snprintf(name, sizeof name, "%s.%s", param->name, states[s]);
			CHECK(is_leaf(graph, name, F8_ROLE_OPTIMIZER_STATE, F8_DTYPE_F32, shape));
			CHECK(has_update(graph, find(graph, name), F8_PHASE_OPT,
					 s ? F8_OP_ADAMW : F8_OP_CONSTANT_OF_SHAPE, (uint32_t)s));
		}
		snprintf(name, sizeof name, "%s.main_grad", param->name);
		CHECK(has_update(graph, find(graph, name), F8_PHASE_BWD, F8_OP_ADD, 0));
		CHECK(has_update(graph, graph->inputs[i], F8_PHASE_OPT, F8_OP_ADAMW, 0));
	}
	CHECK(trained == n_trained);
	CHECK(graph->n_updates == 5 * n_trained + 1);
}

/* The training step of a model of the zoo: through canonicalize and fuse-patterns, then the
 * training pass; it verifies and keeps the contract. */
static void test_model(const char *file) {
	char path[1024];
	snprintf(path, sizeof path, "%s/models/%s", source_dir, file);
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_graph *graph = NULL;
	f8_status status = f8_frontend_load(path, NULL, &graph, &diag);
	if (!status)
		status = f8_pipeline_run(graph, "fuse-patterns", true, &diag);
	uint32_t n_params = 0;
	for (uint32_t i = 0; !status && i < graph->n_inputs; i++)
		n_params += graph->values[graph->inputs[i]].role == F8_ROLE_PARAMETER;
	char *report = NULL;
	size_t report_len = 0;
	FILE *stream = open_memstream(&report, &report_len);
	if (!status)
		status = f8_pass_training_run(graph, NULL, stream, &diag);
	fclose(stream);
	if (!status)
		status = f8_graph_verify(graph, &diag);
	if (status) {
		printf("FAIL %s:\n", file);
		f8_diag_print(&diag, stdout);
	}
	CHECK(status == F8_OK);
	if (!status) {
		check_training_contract(graph, n_params);
		char trained[64];
		snprintf(trained, sizeof trained, "%u of %u parameters trained", n_params, n_params);
		CHECK(strstr(report, trained) != NULL);
	}
	free(report);
	f8_graph_destroy(graph);
}

static const char *const mlp =
	"input %x : f32[batch, 16]\nparam %norm.weight : bf16[16]\nparam %fc.weight : f32[32, 16]\n"
	"param %fc.bias : f32[32]\nparam %unused : f32[4]\n"
	"%xb = Cast(%x) {to=bf16}\n%h = RMSNorm(%xb, %norm.weight)\n%hf = Cast(%h) {to=f32}\n"
	"%logits = Linear(%hf, %fc.weight, %fc.bias)\noutput %logits";

/* Options: micro-batches average the norm and scale the gradient; no clipping leaves a
 * constant scale; bad options are refused; the decay names round-trip. */
static void test_options(void) {
	f8_graph *graph = parse(mlp);
	if (!graph)
		return;
	f8_training_options options = f8_training_options_default();
	options.micro_batches = 4;
	options.clip_grad = 0;
	options.decay_style = F8_LR_DECAY_COSINE;
	options.warmup_iters = 10;
	options.decay_iters = 100;
	char *report = NULL;
	size_t report_len = 0;
	FILE *stream = open_memstream(&report, &report_len);
	f8_diag diag;
	f8_diag_clear(&diag);
	CHECK(f8_pass_training_run(graph, &options, stream, &diag) == F8_OK);
	fclose(stream);
	CHECK(f8_graph_verify(graph, &diag) == F8_OK);
	const f8_value *norm = &graph->values[find(graph, "grad_norm")];
	CHECK(graph->nodes[norm->producer].op == F8_OP_MUL);
	const f8_value *scale = &graph->values[find(graph, "grad_scale")];
	CHECK(graph->nodes[scale->producer].op == F8_OP_CONSTANT);
	CHECK(strstr(report, "not trained: %unused") && strstr(report, "master weight %norm.weight"));
	CHECK(strstr(report, "no weight decay: %fc.bias"));
	CHECK(find(graph, "unused.main_grad") == F8_NONE);
	check_training_contract(graph, 3);
	free(report);
	f8_graph_destroy(graph);

	// Clipping with micro-batches: min(1, clip / (norm + 1e-6)) / micro_batches.
	graph = parse(mlp);
	options = f8_training_options_default();
	options.micro_batches = 2;
	CHECK(graph && f8_pass_training_run(graph, &options, NULL, &diag) == F8_OK);
	if (graph) {
		const f8_node *divide = &graph->nodes[graph->values[find(graph, "grad_scale")].producer];
		CHECK(divide->op == F8_OP_DIV);
		CHECK(graph->nodes[graph->values[divide->inputs[0]].producer].op == F8_OP_MIN);
		CHECK(f8_graph_verify(graph, &diag) == F8_OK);
	}
	f8_graph_destroy(graph);

	graph = parse(mlp);
	options = f8_training_options_default();
	options.decay_style = F8_LR_DECAY_LINEAR; // decay_iters 0: nothing to decay over
	CHECK(graph && f8_pass_training_run(graph, &options, NULL, &diag) == F8_ERR_ARGUMENT);
	f8_graph_destroy(graph);

	for (int d = 0; d < F8_LR_DECAY_COUNT; d++) {
		f8_lr_decay back;
		CHECK(f8_lr_decay_from_name(f8_lr_decay_name((f8_lr_decay)d), &back) && (int)back == d);
	}
	f8_lr_decay none;
	CHECK(!f8_lr_decay_from_name("exponential", &none));
	f8_training_options defaults = f8_training_options_default();
	CHECK(defaults.lr == 3e-4 && defaults.beta2 == 0.999 && defaults.clip_grad == 1.0 &&
	      defaults.micro_batches == 1 && defaults.ignore_index == -100 &&
	      defaults.decay_style == F8_LR_DECAY_CONSTANT);
}

/* Allocation failure at every allocation of the training pass: F8_ERR_NOMEM, nothing leaked
 * (the sanitizer build checks), and success once enough allocations succeed. */
static void test_allocation_failure(void) {
	bool succeeded = false;
	for (long n = 0; n < 100000 && !succeeded; n++) {
		f8_graph *graph = parse(mlp);
		if (!graph)
			return;
		f8_diag diag;
		f8_diag_clear(&diag);
		test_fail_allocations_after(n);
		f8_status status = f8_pass_training_run(graph, NULL, NULL, &diag);
		test_allocations_restore();
		if (status != F8_OK && status != F8_ERR_NOMEM)
			printf("FAIL allocation %ld: %s\n", n, diag.message);
		CHECK(status == F8_OK || status == F8_ERR_NOMEM);
		succeeded = status == F8_OK;
		f8_graph_destroy(graph);
	}
	CHECK(succeeded);
}

int main(int argc, char **argv) {
	source_dir = argc > 1 ? argv[1] : ".";
	test_rule_table();
	for (size_t i = 0; i < sizeof rule_cases / sizeof rule_cases[0]; i++)
		test_rule_case(&rule_cases[i]);
	test_summed_gradients();
	test_no_gradient();
	test_refusals();
	test_seed();
	test_options();
	test_model("gpt-tiny.json");
	test_model("llama-tiny.json");
	test_model("mixtral-tiny.json");
	test_allocation_failure();
	return test_finish();
}
