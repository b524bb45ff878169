/*
 * training: turns the forward graph into one training step (the contract, with the names the
 * runtime relies on, is in passes/training.h).
 *
 * requires: types (canonicalize), high-level ops (fuse-patterns); the first output the logits.
 * provides: %labels, %loss (fwd); the gradients and their f32 accumulators (bwd); iteration + 1,
 *           the learning rate, the gradient norm and clip, AdamW, the accumulators zeroed (opt);
 *           outputs %loss, %grad_norm, %lr; updates carrying the state to the next step.
 *
 * A step is fwd|bwd once per micro-batch (each run adds its gradients into %<param>.main_grad,
 * an update carries the sum to the next run), then opt once, which reads only leaves: the
 * accumulators, the parameters, the moments and the iteration. The clip is torch's
 * clip_grad_norm_ (max_norm / (norm + 1e-6), at most 1) on the gradient averaged over the
 * micro-batches, folded with that average into AdamW's grad_scale.
 */
#include "passes/training.h" // f8_pass_training_run, f8_training_options

#include <math.h>   // isfinite
#include <stdio.h>  // fprintf, snprintf
#include <string.h> // strcmp, strlen, memcpy

#include "ir/alloc.h"        // f8_calloc, f8_malloc, f8_free
#include "ir/arena.h"        // f8_arena_strdup
#include "ir/pipeline_chunks.h" // f8_pipeline_order_chunks
#include "ir/text.h"         // f8_type_format
#include "ir/verify.h"       // f8_node_infer_types
#include "passes/autodiff.h" // f8_autodiff_build
#include "passes/canonicalize.h" // f8_pass_remove_dead_nodes
#include "passes/tensor_parallel.h" // f8_tp_vocab_start

static const char *const decay_names[] = {
#define F8_LR_DECAY_NAME(e, name) name,
	F8_LR_DECAY_LIST(F8_LR_DECAY_NAME)
#undef F8_LR_DECAY_NAME
};
static_assert(sizeof decay_names / sizeof decay_names[0] == F8_LR_DECAY_COUNT,
	      "one name per learning-rate decay style");

const char *f8_lr_decay_name(f8_lr_decay decay) {
	return (unsigned)decay < F8_LR_DECAY_COUNT ? decay_names[decay] : "?";
}

bool f8_lr_decay_from_name(const char *name, f8_lr_decay *out) {
	for (int i = 0; i < F8_LR_DECAY_COUNT; i++) {
		if (strcmp(decay_names[i], name) == 0) {
			*out = (f8_lr_decay)i;
			return true;
		}
	}
	return false;
}

f8_training_options f8_training_options_default(void) {
	return (f8_training_options){
		.lr = 3e-4,
		.min_lr = 0.0,
		.warmup_iters = 0,
		.decay_iters = 0,
		.decay_style = F8_LR_DECAY_CONSTANT,
		.beta1 = 0.9,
		.beta2 = 0.999,
		.epsilon = 1e-8,
		.weight_decay = 0.01,
		.clip_grad = 1.0,
		.micro_batches = 1,
		.ignore_index = -100,
	};
}

/* The names the runtime relies on; a model that already uses one cannot be trained as is. */
static const char *const reserved_names[] = {"labels", "loss", "grad_norm", "lr", "iteration",
					     "found_inf"};

enum { PARAM_NAME_MAX = 320 }; // a parameter's name and a suffix

/* One parameter: its gradient, the states made for it, and whether it decays. */
typedef struct parameter {
	f8_value_id value;
	f8_dtype dtype;          // before it became an f32 master weight
	f8_value_id grad;        // of the f32 master weight; F8_NONE: not trained
	f8_value_id main_grad;   // the accumulator leaf
	f8_value_id accumulated; // main_grad + grad, made in bwd
	const char *no_decay;    // why it has no weight decay, or NULL
} parameter;

typedef struct trainer {
	f8_graph *graph;
	f8_training_options options;
	f8_diag *diag;
	parameter *params; // (n_params) in declaration order
	uint32_t n_params, n_trained;
	f8_node_id *casts; // (n_casts) the master weights' Casts
	uint32_t n_casts;
	f8_value_id loss, iteration_next, lr, grad_norm, grad_scale, found_inf;
	// A pipeline stage's (passes/pipeline_parallel.h): the forward's Recv and Send nodes over
	// pp, one of each a model chunk (none: the first chunk's Recv, the last's Send); whether
	// it holds the loss (the last chunk); and what autodiff differentiates: the loss, plus for
	// each activation sent its dot with the gradient sent back.
	f8_node_id *receives, *sends;
	uint32_t n_receives, n_sends;
	bool has_loss;
	f8_value_id root;
} trainer;

static f8_status nomem(trainer *t) {
	return f8_diag_set(t->diag, F8_ERR_NOMEM, "out of memory in the training pass");
}

/* Adds a node of `op` in `phase`, with attributes in schema order, and types its outputs. */
static f8_status add_node(trainer *t, f8_op op, const f8_value_id *inputs, uint32_t n_inputs,
			  const f8_attr *attrs, uint32_t n_attrs, uint32_t n_outputs,
			  const char *const *names, f8_phase phase, const char *scope,
			  f8_value_id *outputs) {
	f8_graph *graph = t->graph;
	f8_node_id id;
	f8_status status = f8_graph_add_node(graph, op, inputs, n_inputs, n_outputs, names, &id,
					     t->diag);
	if (status)
		return status;
	if (n_attrs && f8_node_set_attrs(graph, id, attrs, n_attrs))
		return nomem(t);
	graph->nodes[id].phase = phase;
	graph->nodes[id].scope = scope;
	f8_type types[3];
	if ((status = f8_node_infer_types(graph, id, types, t->diag)))
		return status;
	for (uint32_t i = 0; i < n_outputs; i++) {
		outputs[i] = graph->nodes[id].outputs[i];
		graph->values[outputs[i]].type = types[i];
	}
	return F8_OK;
}

/* A one-output node named `name`, of the optimizer's scope (its accumulation in bwd too). */
static f8_status add_one(trainer *t, f8_op op, const f8_value_id *inputs, uint32_t n_inputs,
			 const f8_attr *attrs, uint32_t n_attrs, const char *name, f8_phase phase,
			 f8_value_id *out) {
	const char *names[1] = {name};
	return add_node(t, op, inputs, n_inputs, attrs, n_attrs, 1, names, phase, "optimizer", out);
}

/* A scalar Constant of f32 or i64. */
static f8_status add_constant(trainer *t, f8_dtype dtype, double value, const char *name,
			      f8_phase phase, f8_value_id *out) {
	uint8_t bytes[8];
	f8_tensor_data tensor = f8_tensor_data_make_scalar(dtype, value, bytes);
	f8_attr attr = {.name = "value", .kind = F8_ATTR_TENSOR, .tensor = &tensor};
	return add_one(t, F8_OP_CONSTANT, NULL, 0, &attr, 1, name, phase, out);
}

/* A leaf of role state (optimizer state) named `name`, of `type`. */
static f8_status add_state(trainer *t, const char *name, const f8_type *type, f8_value_id *out) {
	return f8_graph_add_input(t->graph, name, F8_ROLE_OPTIMIZER_STATE, type, out, t->diag);
}

/* "<param>.<suffix>" into `buffer`. */
static const char *param_name(const trainer *t, const parameter *p, const char *suffix,
			      char *buffer) {
	snprintf(buffer, PARAM_NAME_MAX, "%s.%s", t->graph->values[p->value].name, suffix);
	return buffer;
}

/* Checks the hyperparameters. */
f8_status f8_training_options_check(const f8_training_options *o, f8_diag *diag) {
	const char *problem = NULL;
	if (!(isfinite(o->lr) && o->lr >= 0))
		problem = "lr (--lr) must be a finite number >= 0";
	else if (!(o->min_lr >= 0 && o->min_lr <= o->lr))
		problem = "min_lr (--min-lr) must be in [0, lr]";
	else if (o->warmup_iters < 0 || o->decay_iters < 0)
		problem = "warmup_iters and decay_iters (--lr-warmup-iters, --lr-decay-iters) must be "
			  ">= 0";
	else if ((unsigned)o->decay_style >= F8_LR_DECAY_COUNT)
		problem = "decay_style (--lr-decay-style) must be constant, linear or cosine";
	else if (o->decay_style != F8_LR_DECAY_CONSTANT && o->decay_iters <= o->warmup_iters)
		problem = "a decaying learning rate needs decay_iters (--lr-decay-iters) above "
			  "warmup_iters (--lr-warmup-iters)";
	else if (!(o->beta1 >= 0 && o->beta1 < 1 && o->beta2 >= 0 && o->beta2 < 1))
		problem = "beta1 and beta2 (--adam-beta1, --adam-beta2) must be in [0, 1)";
	else if (!(o->epsilon > 0))
		problem = "epsilon (--adam-eps) must be > 0";
	else if (!(o->weight_decay >= 0))
		problem = "weight_decay (--weight-decay) must be >= 0";
	else if (!(o->clip_grad >= 0))
		problem = "clip_grad (--clip-grad) must be >= 0 (0: no clipping)";
	else if (o->micro_batches < 1)
		problem = "micro_batches must be >= 1";
	if (!problem)
		return F8_OK;
	f8_diag_set(diag, F8_ERR_ARGUMENT, "training option %s", problem);
	f8_diag_hint(diag, "f8c train --help lists the options; the defaults are Megatron-LM's");
	return F8_ERR_ARGUMENT;
}

/* Checks that the first output is float logits (..., vocab) and that the runtime's names are
 * free; collects the parameters. */
static f8_status check_graph(trainer *t) {
	f8_graph *graph = t->graph;
	const f8_value *logits = graph->n_outputs ? &graph->values[graph->outputs[0]] : NULL;
	f8_dtype dtype = logits ? logits->type.dtype : F8_DTYPE_UNDEFINED;
	if (logits && dtype == F8_DTYPE_UNDEFINED) {
		f8_diag_set(t->diag, F8_ERR_INVALID, "the training pass needs the graph's types, and "
			    "%%%s has none yet", logits->name);
		f8_diag_hint(t->diag, "run canonicalize (and fuse-patterns) before training");
		return F8_ERR_INVALID;
	}
	if (!logits || logits->type.shape.rank < 1 ||
	    !(dtype == F8_DTYPE_F32 || dtype == F8_DTYPE_BF16 || dtype == F8_DTYPE_F16 ||
	      dtype == F8_DTYPE_F64)) {
		char s[160];
		if (logits)
			f8_diag_set(t->diag, F8_ERR_INVALID, "the training pass reads the graph's first "
				    "output as the logits (..., vocab), a float tensor; %%%s is %s",
				    logits->name, f8_type_format(graph, &logits->type, s, sizeof s));
		else
			f8_diag_set(t->diag, F8_ERR_INVALID, "the training pass reads the graph's first "
				    "output as the logits (..., vocab), and the graph has no output");
		f8_diag_hint(t->diag, "make the model's first output its logits: the head's output, "
			     "before any softmax");
		return F8_ERR_INVALID;
	}
	for (size_t i = 0; i < sizeof reserved_names / sizeof reserved_names[0]; i++) {
		if (f8_graph_find_value(graph, reserved_names[i], strlen(reserved_names[i])) == F8_NONE)
			continue;
		f8_diag_set(t->diag, F8_ERR_INVALID, "the model already has a value named %%%s, "
			    "which the training pass makes", reserved_names[i]);
		f8_diag_hint(t->diag, "rename it in the model (the runtime finds %%labels, %%loss, "
			     "%%grad_norm, %%lr and %%iteration by name)");
		return F8_ERR_INVALID;
	}
	if (!(t->params = f8_calloc(graph->n_inputs ? graph->n_inputs : 1, sizeof *t->params)))
		return nomem(t);
	for (uint32_t i = 0; i < graph->n_inputs; i++) {
		const f8_value *value = &graph->values[graph->inputs[i]];
		if (value->role == F8_ROLE_PARAMETER)
			t->params[t->n_params++] = (parameter){.value = graph->inputs[i],
							       .dtype = value->type.dtype,
							       .grad = F8_NONE};
	}
	return F8_OK;
}

/* The parameter whose value is `value`, or NULL. */
static parameter *find_param(trainer *t, f8_value_id value) {
	for (uint32_t k = 0; k < t->n_params; k++)
		if (t->params[k].value == value)
			return &t->params[k];
	return NULL;
}

/* The parameter `value` is, or is read through: a Cast of it (--bf16's BF16 copy, made by the
 * bf16 pass before this one); NULL for anything else. */
static parameter *param_behind(trainer *t, f8_value_id value) {
	if (value == F8_NONE)
		return NULL;
	f8_node_id producer = t->graph->values[value].producer;
	if (producer != F8_NONE && t->graph->nodes[producer].op == F8_OP_CAST)
		value = t->graph->nodes[producer].inputs[0];
	return find_param(t, value);
}

/* Whether `node` picks whole rows of its rank-2 input 0: a Slice along axis 0 only (a learned
 * position table cut to the sequence) or a Gather along axis 0 (an unfused lookup). */
static bool looks_up_rows(const f8_graph *graph, const f8_node *node) {
	if (graph->values[node->inputs[0]].type.shape.rank != 2)
		return false;
	if (node->op == F8_OP_GATHER)
		return f8_node_attr_int(node, "axis", 0) == 0;
	if (node->op != F8_OP_SLICE)
		return false;
	const f8_attr *axes = f8_node_attr(node, "axes");
	uint32_t n = f8_node_attr(node, "starts")->dims.n;
	for (uint32_t i = 0; i < n; i++) {
		int64_t axis = axes ? axes->ints.items[i] : (int64_t)i;
		if (axis != 0 && axis != -2)
			return false;
	}
	return true;
}

/* What reading slot `input` of `node` makes of a parameter that has no weight decay
 * (Megatron-LM's rule: no decay for biases and norms; here embeddings too, as training.h says),
 * or NULL. */
static const char *no_decay_role(const f8_graph *graph, const f8_node *node, uint32_t input) {
	f8_op op = node->op;
	if ((op == F8_OP_LAYER_NORM || op == F8_OP_RMS_NORM) && input == 1)
		return "the scale of";
	if (op == F8_OP_LAYER_NORM && input == 2)
		return "the shift of";
	if (op == F8_OP_LINEAR && input == 2)
		return "the bias of";
	if (op == F8_OP_EMBEDDING && input == 1)
		return "the table of";
	if (input == 0 && looks_up_rows(graph, node))
		return "an embedding table (rows looked up) by";
	return NULL;
}

/* Decides, before the master weights' Casts change the readers, which parameters decay; a
 * parameter read through a BF16 copy (--bf16) is judged by what reads the copy. */
static f8_status classify_weight_decay(trainer *t) {
	f8_graph *graph = t->graph;
	char why[PARAM_NAME_MAX + 64];
	for (uint32_t p = 0; p < graph->n_order; p++) {
		const f8_node *node = &graph->nodes[graph->order[p]];
		for (uint32_t i = 0; i < node->n_inputs; i++) {
			parameter *param = param_behind(t, node->inputs[i]);
			const char *role = param ? no_decay_role(graph, node, i) : NULL;
			if (!role || param->no_decay)
				continue;
			snprintf(why, sizeof why, "read as %s %s%s%s", role, f8_op_name(node->op),
				 node->scope ? " " : "", node->scope ? node->scope : "");
			if (!(param->no_decay = f8_arena_strdup(graph->arena, why)))
				return nomem(t);
		}
	}
	for (uint32_t k = 0; k < t->n_params; k++)
		if (!t->params[k].no_decay && graph->values[t->params[k].value].type.shape.rank == 1)
			t->params[k].no_decay = "of rank 1";
	return F8_OK;
}

/* Makes parameter `p` (not f32) an f32 master weight: what read it reads a Cast to its dtype. */
static f8_status make_master_weight(trainer *t, parameter *p, FILE *report) {
	f8_graph *graph = t->graph;
	f8_status status;
	// Its initializer keeps its own dtype: the runtime widens the data as it loads it.
	graph->values[p->value].type.dtype = F8_DTYPE_F32;
	char name[PARAM_NAME_MAX];
	snprintf(name, sizeof name, "%s.%s", graph->values[p->value].name, f8_dtype_name(p->dtype));
	const char *names[1] = {name};
	f8_attr to = {.name = "to", .kind = F8_ATTR_DTYPE, .dtype = p->dtype};
	f8_value_id cast = F8_NONE;
	uint32_t n_order = graph->n_order;
	const char *scope = NULL; // the first reader's: the Cast belongs to the layer that reads it
	for (uint32_t q = 0; q < n_order && !scope; q++) {
		const f8_node *node = &graph->nodes[graph->order[q]];
		for (uint32_t i = 0; i < node->n_inputs && !scope; i++)
			if (node->inputs[i] == p->value)
				scope = node->scope ? node->scope : "";
	}
	if ((status = add_node(t, F8_OP_CAST, &p->value, 1, &to, 1, 1, names, F8_PHASE_FWD,
			       scope && *scope ? scope : NULL, &cast)))
		return status;
	t->casts[t->n_casts++] = graph->values[cast].producer;
	for (uint32_t q = 0; q < n_order; q++) {
		f8_node *node = &graph->nodes[graph->order[q]];
		for (uint32_t i = 0; i < node->n_inputs; i++)
			if (node->inputs[i] == p->value)
				node->inputs[i] = cast;
	}
	for (uint32_t i = 0; i < graph->n_outputs; i++)
		if (graph->outputs[i] == p->value)
			graph->outputs[i] = cast;
	if (report)
		fprintf(report, "  master weight %%%s: f32, was %s; %%%s feeds what read it\n",
			graph->values[p->value].name, f8_dtype_name(p->dtype), name);
	return F8_OK;
}

/*
 * Master weights for every float parameter that is not f32. Each Cast goes just before the
 * first node that reads it: the backward walks the program in reverse, so the Cast's gradient
 * (back to f32) comes right after the weight's last gradient contribution, not at the end.
 */
static f8_status make_master_weights(trainer *t, FILE *report) {
	f8_graph *graph = t->graph;
	if (!(t->casts = f8_calloc(t->n_params ? t->n_params : 1, sizeof *t->casts)))
		return nomem(t);
	for (uint32_t k = 0; k < t->n_params; k++) {
		f8_dtype dtype = t->params[k].dtype;
		if (dtype == F8_DTYPE_F32 || !f8_dtype_is_float(dtype))
			continue;
		f8_status status = make_master_weight(t, &t->params[k], report);
		if (status)
			return status;
	}
	if (!t->n_casts)
		return F8_OK;
	f8_node_id *order = f8_malloc(graph->n_order * sizeof *order);
	bool *placed = f8_calloc(t->n_casts, sizeof *placed);
	if (!order || !placed) {
		f8_free(order), f8_free(placed);
		return nomem(t);
	}
	uint32_t n = 0, n_old = graph->n_order - t->n_casts; // the Casts were appended last
	for (uint32_t p = 0; p < n_old; p++) {
		const f8_node *node = &graph->nodes[graph->order[p]];
		for (uint32_t c = 0; c < t->n_casts; c++) {
			f8_value_id cast = graph->nodes[t->casts[c]].outputs[0];
			for (uint32_t i = 0; i < node->n_inputs && !placed[c]; i++) {
				if (node->inputs[i] == cast) {
					order[n++] = t->casts[c];
					placed[c] = true;
				}
			}
		}
		order[n++] = graph->order[p];
	}
	for (uint32_t c = 0; c < t->n_casts; c++) // read by nothing but a graph output
		if (!placed[c])
			order[n++] = t->casts[c];
	f8_status status = f8_graph_set_order(graph, order, n);
	f8_free(order), f8_free(placed);
	return status ? nomem(t) : F8_OK;
}

/*
 * The loss of logits split by vocabulary over tp (the tensor-parallel pass's split head), as
 * Megatron-LM's vocab_parallel_cross_entropy: each row's maximum over the ranks (AllReduce max
 * of the shards' maxima), each shard's sum of exp(logit - max) and the label's logit where the
 * shard holds it (CrossEntropyShard), both summed over tp, and the loss from the sums
 * (CrossEntropyMerge). The maxima take no gradient; the backward is each shard's own.
 * `attrs`: CrossEntropy's (ignore_index, reduction); the loss named `name` into *loss.
 */
static f8_status add_vocab_parallel_loss(trainer *t, f8_value_id logits, f8_value_id labels,
					 const f8_attr *attrs, const char *name, f8_value_id *loss) {
	f8_graph *graph = t->graph;
	int rank = graph->values[logits].type.shape.rank;
	int64_t ranks = graph->mesh[F8_MESH_AXIS_TP];
	f8_dim shard = graph->values[logits].type.shape.dims[rank - 1];
	if (!f8_dim_is_const(shard))
		return f8_diag_set(t->diag, F8_ERR_INVALID, "vocabulary-parallel loss: the logits' "
				   "vocabulary shard is not a constant");
	int64_t vocab = f8_dim_value(shard) * ranks, last = -1;
	f8_attr over = {.name = "group", .kind = F8_ATTR_STRING, .s = "tp"};
	f8_attr max_attrs[2] = {{.name = "axes", .kind = F8_ATTR_INTS, .ints = {.items = &last,
										  .n = 1}},
				{.name = "keepdims", .kind = F8_ATTR_INT, .i = 0}};
	f8_value_id row_max = F8_NONE, max = F8_NONE, start = F8_NONE, sums[2], reduced[2];
	const char *names[2] = {"loss.logits_max", NULL};
	f8_status status = add_node(t, F8_OP_REDUCE_MAX, &logits, 1, max_attrs, 2, 1, names,
				    F8_PHASE_FWD, "loss", &row_max);
	if (!status && graph->values[row_max].type.dtype != F8_DTYPE_F32) {
		f8_attr to = {.name = "to", .kind = F8_ATTR_DTYPE, .dtype = F8_DTYPE_F32};
		names[0] = "loss.logits_max_f32";
		f8_value_id narrow = row_max;
		status = add_node(t, F8_OP_CAST, &narrow, 1, &to, 1, 1, names, F8_PHASE_FWD, "loss",
				  &row_max);
	}
	f8_attr max_over[2] = {over, {.name = "op", .kind = F8_ATTR_STRING, .s = "max"}};
	names[0] = "loss.max";
	if (!status)
		status = add_node(t, F8_OP_ALL_REDUCE, &row_max, 1, max_over, 2, 1, names,
				  F8_PHASE_FWD, "loss", &max);
	f8_node_id range, shard_start;
	if (!status)
		status = f8_tp_vocab_start(graph, ranks, vocab, "loss", &range, &shard_start, t->diag);
	if (!status) {
		graph->nodes[range].phase = graph->nodes[shard_start].phase = F8_PHASE_FWD;
		start = graph->nodes[shard_start].outputs[0];
	}
	f8_attr shard_attrs[2] = {attrs[0], {.name = "vocab", .kind = F8_ATTR_DIM,
					     .dim = f8_dim_const(vocab)}};
	f8_value_id shard_inputs[4] = {logits, labels, max, start};
	names[0] = "loss.sum_exp.partial", names[1] = "loss.target.partial";
	if (!status)
		status = add_node(t, F8_OP_CROSS_ENTROPY_SHARD, shard_inputs, 4, shard_attrs, 2, 2,
				  names, F8_PHASE_FWD, "loss", sums);
	f8_attr sum_over[2] = {over, {.name = "op", .kind = F8_ATTR_STRING, .s = "sum"}};
	names[0] = "loss.sum_exp", names[1] = "loss.target";
	if (!status)
		status = add_node(t, F8_OP_ALL_REDUCE, sums, 2, sum_over, 2, 2, names, F8_PHASE_FWD,
				  "loss", reduced);
	f8_value_id merge_inputs[4] = {reduced[0], reduced[1], max, labels};
	names[0] = name;
	if (!status)
		status = add_node(t, F8_OP_CROSS_ENTROPY_MERGE, merge_inputs, 4, attrs, 2, 1, names,
				  F8_PHASE_FWD, "loss", loss);
	return status;
}

/*
 * The loss of logits split along the sequence over cp (the context-parallel pass's), as
 * Megatron-LM's loss under context parallelism: `partial`, the sum of this rank's token losses,
 * and the count of its labels that count, both summed over cp; %loss is the sum over the count
 * (at least 1: no label counts, the loss is 0, as CrossEntropy's mean). Every rank's loss is
 * the whole sequence's; its gradient reaches each rank's tokens through the sum (AllReduce's
 * gradient is the identity).
 */
static f8_status add_context_parallel_mean(trainer *t, f8_value_id partial, f8_value_id labels) {
	f8_value_id ignore = 0, equal = 0, counted = 0, as_float = 0, count = 0, one = 0, at_least = 0;
	f8_value_id sums[2], reduced[2] = {0, 0};
	f8_status status = add_constant(t, F8_DTYPE_I64, (double)t->options.ignore_index,
					"loss.ignore_index", F8_PHASE_FWD, &ignore);
	const char *names[2] = {"loss.ignored", NULL};
	f8_value_id pair[2] = {labels, ignore};
	if (!status)
		status = add_node(t, F8_OP_EQUAL, pair, 2, NULL, 0, 1, names, F8_PHASE_FWD, "loss",
				  &equal);
	names[0] = "loss.counted";
	if (!status)
		status = add_node(t, F8_OP_NOT, &equal, 1, NULL, 0, 1, names, F8_PHASE_FWD, "loss",
				  &counted);
	f8_attr to = {.name = "to", .kind = F8_ATTR_DTYPE, .dtype = F8_DTYPE_F32};
	names[0] = "loss.counted_f32";
	if (!status)
		status = add_node(t, F8_OP_CAST, &counted, 1, &to, 1, 1, names, F8_PHASE_FWD, "loss",
				  &as_float);
	f8_attr keep = {.name = "keepdims", .kind = F8_ATTR_INT, .i = 0};
	names[0] = "loss.tokens.partial";
	if (!status)
		status = add_node(t, F8_OP_REDUCE_SUM, &as_float, 1, &keep, 1, 1, names,
				  F8_PHASE_FWD, "loss", &count);
	f8_attr over[2] = {{.name = "group", .kind = F8_ATTR_STRING, .s = "cp"},
			   {.name = "op", .kind = F8_ATTR_STRING, .s = "sum"}};
	sums[0] = partial, sums[1] = count;
	names[0] = "loss.sum", names[1] = "loss.tokens";
	if (!status)
		status = add_node(t, F8_OP_ALL_REDUCE, sums, 2, over, 2, 2, names, F8_PHASE_FWD,
				  "loss", reduced);
	if (!status)
		status = add_constant(t, F8_DTYPE_F32, 1.0, "loss.one", F8_PHASE_FWD, &one);
	pair[0] = reduced[1], pair[1] = one;
	names[0] = "loss.tokens_at_least_one";
	if (!status)
		status = add_node(t, F8_OP_MAX, pair, 2, NULL, 0, 1, names, F8_PHASE_FWD, "loss",
				  &at_least);
	pair[0] = reduced[0], pair[1] = at_least;
	names[0] = "loss";
	if (!status)
		status = add_node(t, F8_OP_DIV, pair, 2, NULL, 0, 1, names, F8_PHASE_FWD, "loss",
				  &t->loss);
	if (!status) // the constants' scope is the loss's, not the optimizer's
		t->graph->nodes[t->graph->values[ignore].producer].scope =
			t->graph->nodes[t->graph->values[one].producer].scope = "loss";
	return status;
}

/*
 * %labels and %loss = CrossEntropy(logits, labels), mean over the labels that count. Logits
 * split by vocabulary over tp take the vocabulary-parallel cross-entropy; logits split along the
 * sequence over cp read the labels' LocalShard (the labels are fed whole, as the tokens), and
 * the mean is taken over the ranks' tokens together.
 */
static f8_status add_loss(trainer *t) {
	f8_graph *graph = t->graph;
	f8_value_id logits = graph->outputs[0], labels = F8_NONE;
	f8_type type = {.dtype = F8_DTYPE_I64, .shape = graph->values[logits].type.shape};
	type.shape.rank--;
	// Copied: adding values below may move the value table.
	f8_placement sequence = graph->values[logits].placement[F8_MESH_AXIS_CP];
	bool context = sequence.kind == F8_PLACEMENT_KIND_SHARD;
	int64_t cp = graph->mesh[F8_MESH_AXIS_CP];
	if (context && (sequence.dim != 1 || type.shape.rank != 2 ||
			!f8_dim_mul(type.shape.dims[1], f8_dim_const(cp), &type.shape.dims[1])))
		return f8_diag_set(t->diag, F8_ERR_INVALID, "context-parallel loss: the logits are "
				   "not split along the sequence of (batch, seq, vocab)");
	f8_status status = f8_graph_add_input(graph, "labels", F8_ROLE_INPUT, &type, &labels, t->diag);
	if (status)
		return status;
	if (context) {
		f8_attr attrs[4] = {{.name = "group", .kind = F8_ATTR_STRING, .s = "cp"},
				    {.name = "axis", .kind = F8_ATTR_INT, .i = 1},
				    {.name = "ranks", .kind = F8_ATTR_INT, .i = cp},
				    {.name = "balanced", .kind = F8_ATTR_INT, .i = 1}};
		const char *names[1] = {"labels.cp"};
		f8_value_id whole = labels;
		status = add_node(t, F8_OP_LOCAL_SHARD, &whole, 1, attrs, 4, 1, names, F8_PHASE_FWD,
				  "loss", &labels);
		if (status)
			return status;
		graph->values[labels].placement[F8_MESH_AXIS_CP] = sequence;
	}
	f8_value_id inputs[2] = {logits, labels}, partial = F8_NONE;
	f8_attr attrs[2] = {{.name = "ignore_index", .kind = F8_ATTR_INT, .i = t->options.ignore_index},
			    {.name = "reduction", .kind = F8_ATTR_STRING,
			     .s = context ? "sum" : "mean"}};
	const char *name = context ? "loss.partial" : "loss";
	f8_value_id *out = context ? &partial : &t->loss;
	f8_placement split = graph->values[logits].placement[F8_MESH_AXIS_TP];
	if (split.kind == F8_PLACEMENT_KIND_SHARD &&
	    split.dim == graph->values[logits].type.shape.rank - 1)
		status = add_vocab_parallel_loss(t, logits, labels, attrs, name, out);
	else
		status = add_node(t, F8_OP_CROSS_ENTROPY, inputs, 2, attrs, 2, 1, &name,
				  F8_PHASE_FWD, "loss", out);
	return !status && context ? add_context_parallel_mean(t, partial, labels) : status;
}

/* The forward's Recv and Send over pp (the pipeline-parallel pass's) into t, and whether the
 * stage holds the loss: it outputs what it sends when it does not. */
static f8_status find_stage_ends(trainer *t) {
	const f8_graph *graph = t->graph;
	t->receives = f8_calloc(graph->n_order + 1, sizeof *t->receives);
	t->sends = f8_calloc(graph->n_order + 1, sizeof *t->sends);
	if (!t->receives || !t->sends)
		return nomem(t);
	bool sends_output = false;
	for (uint32_t p = 0; p < graph->n_order; p++) {
		const f8_node *node = &graph->nodes[graph->order[p]];
		const char *group = f8_node_attr_string(node, "group", "");
		if (strcmp(group, "pp") != 0 || (node->op != F8_OP_RECV && node->op != F8_OP_SEND))
			continue;
		if (node->op == F8_OP_RECV)
			t->receives[t->n_receives++] = graph->order[p];
		else
			t->sends[t->n_sends++] = graph->order[p];
		sends_output |= node->op == F8_OP_SEND && graph->n_outputs &&
				node->inputs[0] == graph->outputs[0];
	}
	t->has_loss = !sends_output;
	return F8_OK;
}

/* The attributes of the backward's message against forward Send or Recv `id` (its gradient,
 * the other way): the same group and peer, and its tag + 1 when it has one (the pipeline pass
 * tags chunk boundaries 2 g, their gradients 2 g + 1). Their count; Recv's dtype and shape are
 * the caller's. */
static uint32_t reverse_attrs(const trainer *t, f8_node_id id, f8_attr *attrs) {
	const f8_node *node = &t->graph->nodes[id];
	attrs[0] = (f8_attr){.name = "group", .kind = F8_ATTR_STRING, .s = "pp"};
	attrs[1] = (f8_attr){.name = "peer", .kind = F8_ATTR_INT,
			     .i = f8_node_attr_int(node, "peer", 0)};
	const f8_attr *tag = f8_node_attr(node, "tag");
	if (!tag)
		return 2;
	attrs[2] = (f8_attr){.name = "tag", .kind = F8_ATTR_INT, .i = tag->i + 1};
	return 3;
}

/*
 * A pipeline stage's chunks that send have no loss: their backward starts from the gradient of
 * what they sent, which the chunk after sends back (Recv in bwd). What autodiff derives from
 * is the loss (the last chunk's, when the stage holds it) plus, for each activation sent,
 * sum(sent * received gradient), whose gradient with respect to the sent activation is that
 * gradient (the sum's value is never read: it leaves the program as dead code).
 */
static f8_status add_stage_seeds(trainer *t) {
	f8_graph *graph = t->graph;
	const char *scope = "pipeline"; // as the forward's Send and Recv: no layer's
	f8_status status = F8_OK;
	t->root = t->has_loss ? t->loss : F8_NONE;
	for (uint32_t k = 0; !status && k < t->n_sends; k++) {
		f8_value_id sent = graph->nodes[t->sends[k]].inputs[0];
		const f8_type *type = &graph->values[sent].type;
		f8_dim dims[F8_MAX_RANK];
		memcpy(dims, type->shape.dims, sizeof dims);
		f8_attr attrs[5];
		uint32_t n_attrs = reverse_attrs(t, t->sends[k], attrs);
		if (n_attrs == 3)
			attrs[4] = attrs[2];
		attrs[2] = (f8_attr){.name = "dtype", .kind = F8_ATTR_DTYPE, .dtype = type->dtype};
		attrs[3] = (f8_attr){.name = "shape", .kind = F8_ATTR_DIMS,
				     .dims = {.n = type->shape.rank, .items = dims}};
		const char *names[1] = {f8_arena_concat(graph->arena, graph->values[sent].name,
							".grad_recv")};
		f8_value_id gradient = F8_NONE, product = F8_NONE, dot = F8_NONE;
		if (!names[0])
			return nomem(t);
		status = add_node(t, F8_OP_RECV, NULL, 0, attrs, n_attrs + 2, 1, names, F8_PHASE_BWD,
				  scope, &gradient);
		f8_value_id pair[2] = {sent, gradient};
		names[0] = f8_arena_concat(graph->arena, graph->values[sent].name, ".product");
		if (!status && !names[0])
			return nomem(t);
		if (!status)
			status = add_node(t, F8_OP_MUL, pair, 2, NULL, 0, 1, names, F8_PHASE_BWD, scope,
					  &product);
		f8_attr keep = {.name = "keepdims", .kind = F8_ATTR_INT, .i = 0};
		names[0] = f8_arena_concat(graph->arena, graph->values[sent].name, ".dot");
		if (!status && !names[0])
			return nomem(t);
		if (!status)
			status = add_node(t, F8_OP_REDUCE_SUM, &product, 1, &keep, 1, 1, names,
					  F8_PHASE_BWD, scope, &dot);
		// A BF16 activation's dot, added to an f32 loss, in f32.
		f8_dtype root_type = t->root == F8_NONE ? F8_DTYPE_UNDEFINED
							: graph->values[t->root].type.dtype;
		if (!status && root_type != F8_DTYPE_UNDEFINED &&
		    graph->values[dot].type.dtype != root_type) {
			f8_attr to = {.name = "to", .kind = F8_ATTR_DTYPE, .dtype = root_type};
			names[0] = f8_arena_concat(graph->arena, graph->values[sent].name, ".dot_f32");
			status = names[0] ? add_node(t, F8_OP_CAST, &dot, 1, &to, 1, 1, names,
						     F8_PHASE_BWD, scope, &dot)
					  : nomem(t);
		}
		f8_value_id terms[2] = {t->root, dot};
		names[0] = f8_arena_concat(graph->arena, graph->values[sent].name, ".seed");
		if (!status && !names[0])
			return nomem(t);
		if (!status && t->root != F8_NONE)
			status = add_node(t, F8_OP_ADD, terms, 2, NULL, 0, 1, names, F8_PHASE_BWD, scope,
					  &t->root);
		else if (!status)
			t->root = dot;
	}
	return status;
}

/* A pipeline stage's chunks after the pipeline's first send the gradient of what they received
 * back (Send in bwd). */
static f8_status send_gradient(trainer *t, f8_node_id recv, f8_value_id gradient) {
	if (gradient == F8_NONE)
		return f8_diag_set(t->diag, F8_ERR_INVALID, "pipeline stage: the loss does not "
				   "depend on the activation %%%s it receives",
				   t->graph->values[t->graph->nodes[recv].outputs[0]].name);
	f8_attr attrs[3];
	uint32_t n_attrs = reverse_attrs(t, recv, attrs);
	return add_node(t, F8_OP_SEND, &gradient, 1, attrs, n_attrs, 0, NULL, F8_PHASE_BWD,
			"pipeline", NULL);
}

/* The gradients of every parameter; those the loss does not depend on are not trained. A
 * pipeline stage's received activation's too, sent back. */
static f8_status differentiate(trainer *t, FILE *report) {
	f8_value_id *wrt = f8_malloc((t->n_params + t->n_receives + 1) * sizeof *wrt);
	f8_value_id *grads = f8_malloc((t->n_params + t->n_receives + 1) * sizeof *grads);
	if (!wrt || !grads) {
		f8_free(wrt), f8_free(grads);
		return nomem(t);
	}
	f8_status status = F8_OK;
	uint32_t n = 0;
	for (uint32_t k = 0; k < t->n_params; k++)
		if (f8_dtype_is_float(t->params[k].dtype))
			wrt[n++] = t->params[k].value;
	uint32_t first_received = n;
	for (uint32_t k = 0; k < t->n_receives; k++)
		wrt[n++] = t->graph->nodes[t->receives[k]].outputs[0];
	if (!status)
		status = f8_autodiff_build(t->graph, t->root, F8_NONE, wrt, n, F8_PHASE_BWD, grads,
					   t->diag);
	for (uint32_t k = 0; !status && k < t->n_receives; k++)
		status = send_gradient(t, t->receives[k], grads[first_received + k]);
	for (uint32_t k = 0, i = 0; !status && k < t->n_params; k++) {
		parameter *p = &t->params[k];
		if (f8_dtype_is_float(p->dtype))
			p->grad = grads[i++];
		if (p->grad != F8_NONE)
			t->n_trained++;
		else if (report)
			fprintf(report, "  not trained: %%%s: %s\n", t->graph->values[p->value].name,
				f8_dtype_is_float(p->dtype) ? "the loss does not depend on it"
							    : "it is not a float tensor");
	}
	f8_free(wrt);
	f8_free(grads);
	if (!status && !t->n_trained) {
		f8_diag_set(t->diag, F8_ERR_INVALID, "the loss depends on no parameter: there is "
			    "nothing to train");
		f8_diag_hint(t->diag, "the model's weights must be declared as param leaves");
		return F8_ERR_INVALID;
	}
	return status;
}

/*
 * Moves the nodes from program position `first_new` on (just appended, in dependency order)
 * each to just after the last node it reads from: a gradient is added into its accumulator as
 * soon as it is complete, so that it need not stay alive until the end of the backward.
 */
static f8_status settle(trainer *t, uint32_t first_new) {
	f8_graph *graph = t->graph;
	uint32_t n = graph->n_order;
	uint32_t *position = f8_malloc(graph->n_nodes * sizeof *position);
	f8_node_id *anchor = f8_malloc((n - first_new + 1) * sizeof *anchor);
	f8_node_id *order = f8_malloc(n * sizeof *order);
	if (!position || !anchor || !order) {
		f8_free(position), f8_free(anchor), f8_free(order);
		return nomem(t);
	}
	for (uint32_t p = 0; p < n; p++)
		position[graph->order[p]] = p;
	// A new node's anchor: the old node it must follow (through the new nodes it reads).
	for (uint32_t q = first_new; q < n; q++) {
		const f8_node *node = &graph->nodes[graph->order[q]];
		anchor[q - first_new] = F8_NONE;
		uint32_t last = 0;
		for (uint32_t i = 0; i < node->n_inputs; i++) {
			f8_node_id producer = graph->values[node->inputs[i]].producer;
			if (producer == F8_NONE)
				continue;
			f8_node_id old = position[producer] >= first_new
						 ? anchor[position[producer] - first_new] : producer;
			if (old != F8_NONE && (anchor[q - first_new] == F8_NONE || position[old] >= last)) {
				anchor[q - first_new] = old;
				last = position[old];
			}
		}
	}
	uint32_t m = 0;
	for (uint32_t q = first_new; q < n; q++) // nodes that read only leaves go first
		if (anchor[q - first_new] == F8_NONE)
			order[m++] = graph->order[q];
	for (uint32_t p = 0; p < first_new; p++) {
		order[m++] = graph->order[p];
		for (uint32_t q = first_new; q < n; q++)
			if (anchor[q - first_new] == graph->order[p])
				order[m++] = graph->order[q];
	}
	f8_status status = f8_graph_set_order(graph, order, m);
	f8_free(position), f8_free(anchor), f8_free(order);
	return status ? nomem(t) : F8_OK;
}

/* bwd: %<param>.main_grad.next = %<param>.main_grad + the gradient, carried by an update. */
static f8_status accumulate_gradients(trainer *t) {
	f8_graph *graph = t->graph;
	uint32_t first_new = graph->n_order;
	char name[PARAM_NAME_MAX];
	for (uint32_t k = 0; k < t->n_params; k++) {
		parameter *p = &t->params[k];
		if (p->grad == F8_NONE)
			continue;
		f8_type type = {.dtype = F8_DTYPE_F32, .shape = graph->values[p->value].type.shape};
		f8_status status = add_state(t, param_name(t, p, "main_grad", name), &type,
					     &p->main_grad);
		f8_value_id g = p->grad;
		if (!status && graph->values[g].type.dtype != F8_DTYPE_F32) {
			f8_attr to = {.name = "to", .kind = F8_ATTR_DTYPE, .dtype = F8_DTYPE_F32};
			status = add_one(t, F8_OP_CAST, &p->grad, 1, &to, 1,
					 param_name(t, p, "grad.f32", name), F8_PHASE_BWD, &g);
		}
		f8_value_id inputs[2] = {p->main_grad, g};
		if (!status)
			status = add_one(t, F8_OP_ADD, inputs, 2, NULL, 0,
					 param_name(t, p, "main_grad.next", name), F8_PHASE_BWD,
					 &p->accumulated);
		if (status)
			return status;
		graph->values[p->accumulated].role = F8_ROLE_GRADIENT;
		if (g != p->grad)
			graph->values[g].role = F8_ROLE_GRADIENT;
		if (f8_graph_add_update(graph, p->main_grad, p->accumulated))
			return nomem(t);
	}
	return settle(t, first_new);
}

/* opt: %iteration + 1 and the learning rate it gives. */
static f8_status add_schedule(trainer *t) {
	const f8_training_options *o = &t->options;
	f8_type scalar = {.dtype = F8_DTYPE_I64};
	f8_value_id iteration = F8_NONE, one = F8_NONE;
	f8_status status = f8_graph_add_input(t->graph, "iteration", F8_ROLE_OPTIMIZER_STATE, &scalar,
					      &iteration, t->diag);
	if (!status)
		status = add_constant(t, F8_DTYPE_I64, 1, "iteration.increment", F8_PHASE_OPT, &one);
	f8_value_id inputs[2] = {iteration, one};
	if (!status)
		status = add_one(t, F8_OP_ADD, inputs, 2, NULL, 0, "iteration.next", F8_PHASE_OPT,
				 &t->iteration_next);
	if (!status && f8_graph_add_update(t->graph, iteration, t->iteration_next))
		status = nomem(t);
	f8_attr attrs[5];
	uint32_t n = 0;
	attrs[n++] = (f8_attr){.name = "lr", .kind = F8_ATTR_FLOAT, .f = o->lr};
	if (o->min_lr != 0)
		attrs[n++] = (f8_attr){.name = "min_lr", .kind = F8_ATTR_FLOAT, .f = o->min_lr};
	if (o->warmup_iters)
		attrs[n++] = (f8_attr){.name = "warmup", .kind = F8_ATTR_INT, .i = o->warmup_iters};
	if (o->decay_iters)
		attrs[n++] = (f8_attr){.name = "decay_iters", .kind = F8_ATTR_INT, .i = o->decay_iters};
	attrs[n++] = (f8_attr){.name = "style", .kind = F8_ATTR_STRING,
			       .s = f8_lr_decay_name(o->decay_style)};
	if (!status)
		status = add_one(t, F8_OP_LEARNING_RATE, &t->iteration_next, 1, attrs, n, "lr",
				 F8_PHASE_OPT, &t->lr);
	return status;
}

/* opt: %grad_norm, the norm of the gradient averaged over the micro-batches: the norm of the
 * accumulators times 1 / micro_batches. */
static f8_status add_grad_norm(trainer *t) {
	f8_value_id *main_grads = f8_malloc(t->n_trained * sizeof *main_grads);
	if (!main_grads)
		return nomem(t);
	uint32_t n = 0;
	for (uint32_t k = 0; k < t->n_params; k++)
		if (t->params[k].grad != F8_NONE)
			main_grads[n++] = t->params[k].main_grad;
	bool average = t->options.micro_batches > 1;
	f8_value_id sum = F8_NONE, inverse = F8_NONE;
	f8_status status = add_one(t, F8_OP_GLOBAL_NORM, main_grads, n, NULL, 0,
				   average ? "grad_norm.sum" : "grad_norm", F8_PHASE_OPT, &sum);
	f8_free(main_grads);
	t->grad_norm = sum;
	if (status || !average)
		return status;
	status = add_constant(t, F8_DTYPE_F32, 1.0 / (double)t->options.micro_batches,
			      "grad_norm.inverse_micro_batches", F8_PHASE_OPT, &inverse);
	f8_value_id inputs[2] = {sum, inverse};
	return status ? status : add_one(t, F8_OP_MUL, inputs, 2, NULL, 0, "grad_norm", F8_PHASE_OPT,
					 &t->grad_norm);
}

/* opt: grad_scale, which AdamW multiplies the accumulated gradient by: the clip coefficient
 * min(1, clip / (grad_norm + 1e-6)) / micro_batches, or 1 / micro_batches without clipping. */
static f8_status add_grad_scale(trainer *t) {
	const f8_training_options *o = &t->options;
	bool average = o->micro_batches > 1;
	if (!(o->clip_grad > 0))
		return add_constant(t, F8_DTYPE_F32, 1.0 / (double)o->micro_batches, "grad_scale",
				    F8_PHASE_OPT, &t->grad_scale);
	f8_value_id epsilon = F8_NONE, denominator = F8_NONE, max_norm = F8_NONE, ratio = F8_NONE;
	f8_value_id one = F8_NONE, coefficient = F8_NONE, count = F8_NONE;
	f8_status status = add_constant(t, F8_DTYPE_F32, 1e-6, "clip.epsilon", F8_PHASE_OPT,
					&epsilon);
	f8_value_id plus[2] = {t->grad_norm, epsilon};
	if (!status)
		status = add_one(t, F8_OP_ADD, plus, 2, NULL, 0, "clip.denominator", F8_PHASE_OPT,
				 &denominator);
	if (!status)
		status = add_constant(t, F8_DTYPE_F32, o->clip_grad, "clip.max_norm", F8_PHASE_OPT,
				      &max_norm);
	f8_value_id quotient[2] = {max_norm, denominator};
	if (!status)
		status = add_one(t, F8_OP_DIV, quotient, 2, NULL, 0, "clip.ratio", F8_PHASE_OPT, &ratio);
	if (!status)
		status = add_constant(t, F8_DTYPE_F32, 1.0, "clip.one", F8_PHASE_OPT, &one);
	f8_value_id least[2] = {one, ratio};
	if (!status)
		status = add_one(t, F8_OP_MIN, least, 2, NULL, 0,
				 average ? "clip.coefficient" : "grad_scale", F8_PHASE_OPT, &coefficient);
	t->grad_scale = coefficient;
	if (status || !average)
		return status;
	status = add_constant(t, F8_DTYPE_F32, (double)o->micro_batches, "micro_batches",
			      F8_PHASE_OPT, &count);
	f8_value_id averaged[2] = {coefficient, count};
	return status ? status : add_one(t, F8_OP_DIV, averaged, 2, NULL, 0, "grad_scale",
					 F8_PHASE_OPT, &t->grad_scale);
}

/* opt: AdamW for each trained parameter, its accumulator zeroed; updates for all of them. Each
 * AdamW also reads %grad_norm and %found_inf, which skip the step (f8_infer_adamw): the runtime
 * writes found_inf when a micro-batch's loss or an FP8 amax was not finite. */
static f8_status add_adamw(trainer *t, FILE *report) {
	f8_graph *graph = t->graph;
	const f8_training_options *o = &t->options;
	char name[PARAM_NAME_MAX], moment[PARAM_NAME_MAX], square[PARAM_NAME_MAX];
	f8_type scalar = {.dtype = F8_DTYPE_F32, .shape = {.rank = 0}};
	f8_status added = f8_graph_add_input(graph, "found_inf", F8_ROLE_INPUT, &scalar,
					     &t->found_inf, t->diag);
	if (added)
		return added;
	for (uint32_t k = 0; k < t->n_params; k++) {
		parameter *p = &t->params[k];
		if (p->grad == F8_NONE)
			continue;
		f8_type type = graph->values[p->main_grad].type;
		f8_value_id m = F8_NONE, v = F8_NONE, outputs[3] = {F8_NONE, F8_NONE, F8_NONE};
		f8_value_id zero = F8_NONE;
		f8_status status = add_state(t, param_name(t, p, "exp_avg", name), &type, &m);
		if (!status)
			status = add_state(t, param_name(t, p, "exp_avg_sq", name), &type, &v);
		f8_value_id inputs[9] = {p->value, p->main_grad, m, v, t->lr, t->iteration_next,
					 t->grad_scale, t->grad_norm, t->found_inf};
		double decay = p->no_decay ? 0.0 : o->weight_decay;
		f8_attr attrs[4] = {{.name = "beta1", .kind = F8_ATTR_FLOAT, .f = o->beta1},
				    {.name = "beta2", .kind = F8_ATTR_FLOAT, .f = o->beta2},
				    {.name = "epsilon", .kind = F8_ATTR_FLOAT, .f = o->epsilon},
				    {.name = "weight_decay", .kind = F8_ATTR_FLOAT, .f = decay}};
		const char *names[3] = {param_name(t, p, "next", name),
					param_name(t, p, "exp_avg.next", moment),
					param_name(t, p, "exp_avg_sq.next", square)};
		if (!status)
			status = add_node(t, F8_OP_ADAMW, inputs, 9, attrs, 4, 3, names, F8_PHASE_OPT,
					  "optimizer", outputs);
		uint8_t bytes[4] = {0};
		f8_tensor_data zero_value = {.dtype = F8_DTYPE_F32, .n_bytes = 4, .data = bytes};
		f8_attr fill[2] = {{.name = "shape", .kind = F8_ATTR_DIMS,
				    .dims = {.n = type.shape.rank, .items = type.shape.dims}},
				   {.name = "value", .kind = F8_ATTR_TENSOR, .tensor = &zero_value}};
		if (!status)
			status = add_one(t, F8_OP_CONSTANT_OF_SHAPE, NULL, 0, fill, 2,
					 param_name(t, p, "main_grad.zero", name), F8_PHASE_OPT, &zero);
		if (status)
			return status;
		if (f8_graph_add_update(graph, p->value, outputs[0]) ||
		    f8_graph_add_update(graph, m, outputs[1]) ||
		    f8_graph_add_update(graph, v, outputs[2]) ||
		    f8_graph_add_update(graph, p->main_grad, zero))
			return nomem(t);
		if (report && p->no_decay)
			fprintf(report, "  no weight decay: %%%s: %s\n", graph->values[p->value].name,
				p->no_decay);
	}
	return F8_OK;
}

/* The outputs become %loss, %grad_norm and %lr. */
/* %loss (the last pipeline stage's, or the only one's), %grad_norm and %lr. */
static f8_status set_outputs(trainer *t) {
	t->graph->n_outputs = 0;
	if ((t->has_loss && f8_graph_add_output(t->graph, t->loss)) ||
	    f8_graph_add_output(t->graph, t->grad_norm) || f8_graph_add_output(t->graph, t->lr))
		return nomem(t);
	return F8_OK;
}

f8_status f8_pass_training_run(f8_graph *graph, const f8_training_options *options, FILE *report,
			       f8_diag *diag) {
	trainer t = {.graph = graph, .diag = diag,
		     .options = options ? *options : f8_training_options_default()};
	f8_status status = f8_training_options_check(&t.options, diag);
	if (!status)
		status = check_graph(&t);
	if (!status)
		status = find_stage_ends(&t);
	if (!status && report)
		fprintf(report, "training: %s %%%s, AdamW, %lld micro-batch%s, clip %g\n",
			!t.has_loss ? "a pipeline stage's backward from the gradient sent back "
					    "for" : "CrossEntropy loss over",
			graph->values[graph->outputs[0]].name,
			(long long)t.options.micro_batches, t.options.micro_batches == 1 ? "" : "es",
			t.options.clip_grad);
	if (!status)
		status = classify_weight_decay(&t);
	if (!status)
		status = make_master_weights(&t, report);
	if (!status)
		status = t.has_loss ? add_loss(&t) : F8_OK;
	if (!status)
		status = add_stage_seeds(&t);
	if (!status)
		status = differentiate(&t, report);
	if (!status)
		status = accumulate_gradients(&t);
	if (!status)
		status = add_schedule(&t);
	if (!status)
		status = add_grad_norm(&t);
	if (!status)
		status = add_grad_scale(&t);
	if (!status)
		status = add_adamw(&t, report);
	if (!status)
		status = set_outputs(&t);
	if (!status)
		status = f8_pass_remove_dead_nodes(graph, diag);
	// Under the interleaved schedule, each chunk's nodes together (autodiff emits the
	// backwards' seeds together): the fuse pass then groups no two chunks' nodes.
	if (!status && (t.n_sends || t.n_receives))
		status = f8_pipeline_order_chunks(graph, diag);
	if (!status && report)
		fprintf(report, "  %u of %u parameters trained\n", t.n_trained, t.n_params);
	f8_free(t.params);
	f8_free(t.casts);
	f8_free(t.receives);
	f8_free(t.sends);
	return status;
}
