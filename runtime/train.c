/*
 * The training loop: setup (model, training graph, executor, data, checkpoint), iterations,
 * evaluation, metrics and saves. Under pipeline parallelism each stage runs its schedule's
 * order (runtime/pipeline_schedule.h), which on a backend that matches messages in posting
 * order (NCCL's) is checked first to pair up and complete (runtime/pipeline_messages.h).
 */
#define _POSIX_C_SOURCE 200809L // clock_gettime

#include "runtime/train.h" // f8_train_run

#include <math.h>   // NAN, isfinite
#include <stdio.h>  // FILE, fopen, fprintf
#include <string.h> // strcmp, strerror, strlen
#include <errno.h>  // errno
#include <time.h>   // clock_gettime

#include "ir/alloc.h"                  // f8_calloc, f8_free
#include "ir/pipeline_chunks.h"        // f8_pipeline_chunks
#include "runtime/checkpoint.h"        // f8_checkpoint_save, f8_checkpoint_load
#include "runtime/executor.h"          // f8_executor
#include "runtime/parameters.h"        // f8_rt_parameters_init
#include "runtime/pipeline_messages.h" // f8_pipeline_messages_check
#include "runtime/pipeline_schedule.h" // f8_pipeline_1f1b, f8_pipeline_interleaved
#include "runtime/scaling_tables.h"    // f8_rt_scaling_tables_find

f8_status f8_train_check_config(const f8_train_config *c, f8_diag *diag) {
	const char *problem = NULL;
	if (c->micro_batch_size < 1 || c->seq_length < 1 || c->train_iters < 1)
		problem = "--micro-batch-size, --seq-length and --train-iters must be at least 1";
	else if (c->global_batch_size % c->micro_batch_size != 0 || c->global_batch_size < 1)
		problem = "--global-batch-size must be a positive multiple of --micro-batch-size";
	else if (c->schedule.warmup_iters >
		 (c->schedule.decay_iters > 0 ? c->schedule.decay_iters : c->train_iters))
		// Past the decay's length, not the run's: a run may stop (and resume) anywhere in
		// the schedule, as Megatron-LM's, whose scheduler asserts warmup < decay steps.
		problem = "--lr-warmup-iters must not be past --lr-decay-iters (--train-iters when "
			  "no --lr-decay-iters is given)";
	else if (c->eval_interval < 0 || c->eval_iters < 0 || c->log_interval < 1 ||
		 c->save_interval < 0 || c->max_nonfinite_skips < 0)
		problem = "--eval-interval, --eval-iters, --save-interval and --max-nonfinite-skips "
			  "must not be negative, --log-interval at least 1";
	else if ((c->eval_interval > 0) != (c->eval_iters > 0))
		problem = "--eval-interval and --eval-iters go together: give both or neither";
	else if (c->save_interval > 0 && !c->save)
		problem = "--save-interval needs --save";
	else if (c->log_fp8_stats < 0)
		problem = "--log-fp8-stats must not be negative";
	else if (c->log_fp8_stats > 0 && !c->metrics)
		problem = "--log-fp8-stats writes into the metrics file: give --metrics too";
	else if (c->n_split < 2 || c->n_split > 3)
		problem = "--split needs 2 or 3 weights: train,valid[,test]";
	else if (c->eval_iters > 0 && !(c->split[1] > 0))
		problem = "evaluation needs a validation split: --split's second weight is 0";
	else if (!c->schedule.decay_style)
		problem = "the run has no learning-rate schedule (the compile driver sets it)";
	if (problem)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "%s", problem);
	return F8_OK;
}

static double seconds_since(const struct timespec *start) {
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - start->tv_sec) + 1e-9 * (double)(now.tv_nsec - start->tv_nsec);
}

/* The settings a resumed run must share with the run it continues: the learning-rate
 * schedule, which Megatron-LM checks on load the same way. */
static const char *const setting_keys[] = {"lr", "min-lr", "lr-warmup-iters", "lr-decay-iters",
					   "lr-decay-style"};
enum { N_SETTINGS = sizeof setting_keys / sizeof setting_keys[0] };

/* Everything a run holds. */
typedef struct trainer {
	const f8_train_config *config;
	const f8_graph *graph;         // the step that runs: `compiled`, or the plan's
	f8_executor *executor;
	f8_rt_tensor token_batch, label_batch; // a micro-batch on the host, written to the leaves
	// Pipeline parallelism's micro-batches in flight (run_pipeline): each context's, so that
	// its other runs are given them again; the stage's model chunks (ir/pipeline_chunks.h:
	// more than 1 under the interleaved schedule).
	f8_rt_tensor *flight_tokens, *flight_labels; // (n_flight)
	uint32_t n_flight, chunks;
	f8_stage_run *runs; // (2 micro_batches chunks) this stage's order, made at set-up
	uint8_t *chunk_of;  // (graph's nodes) each node's model chunk, under pipelining
	// An export's attention_mask and position_ids inputs, F8_NONE where the model has none,
	// and what every micro-batch gives them (a contiguous window: no padding, positions 0..)
	f8_value_id inputs_fixed[2];
	f8_rt_tensor fixed_batch[2];
	f8_rt_tensor scalar_f32, scalar_i64;   // found_inf and iteration, as they are written
	f8_value_id tokens, labels, loss, grad_norm, lr, found_inf, steps;
	bool found_inf_set;            // what %found_inf holds now
	bool has_cast;                 // the graph has phase cast (FP8 weight caches)
	f8_value_id nonfinite[3];      // the FP8 tables' non-finite counts, F8_NONE where absent
	f8_rt_scaling_table tables[F8_RT_SCALING_TABLES_MAX]; // (n_tables) for
	uint32_t n_tables;             // --log-fp8-stats
	int64_t vocab, micro_batches, iteration, consumed_tokens;
	// Data parallelism: the ranks of the data-parallel group (the mesh's EP x DP) share each
	// global batch of `global_micro_batches`, this one running `micro_batches` from `first`.
	uint32_t data_axes;
	int64_t global_micro_batches, first_micro_batch;
	bool leader;                   // rank 0: reports, writes the metrics, saves
	int64_t skipped_iters, skipped_in_a_row;
	int64_t nonfinite_seen;        // the FP8 tables' non-finite count after the last step
	f8_tokens data;
	f8_token_range ranges[3];
	f8_batch_sampler train_sampler, eval_sampler;
	FILE *metrics;
	char settings[N_SETTINGS][32]; // the schedule's settings, as a checkpoint records them
	const char *setting_values[N_SETTINGS];
	f8_train_callback callback;
	void *user;
	struct timespec start;
} trainer;

static f8_status find_value(const f8_graph *graph, const char *name, f8_value_id *out,
			    f8_diag *diag) {
	*out = f8_graph_find_value(graph, name, strlen(name));
	if (*out == F8_NONE)
		return f8_diag_set(diag, F8_ERR_INVALID, "the training graph has no %%%s", name);
	return F8_OK;
}

/* Whether `symbol` appears in a type of the graph (a size the compile driver bound stays in the
 * table, used nowhere). */
static bool symbol_used(const f8_graph *graph, uint16_t symbol) {
	for (uint32_t v = 0; v < graph->n_values; v++) {
		const f8_shape *shape = &graph->values[v].type.shape;
		for (int d = 0; d < shape->rank; d++) {
			f8_dim substituted;
			if (!f8_dim_substitute(shape->dims[d], symbol, 2, &substituted) ||
			    !f8_dim_equal(substituted, shape->dims[d]))
				return true;
		}
	}
	return false;
}

/* The inputs besides the tokens that an export may take, which f8c train feeds as Megatron-LM
 * feeds a GPT's pretraining batch (a window of the token stream: every token attended, causal
 * masking being the model's own; positions 0..seq-1 in every row, no reset at end-of-document
 * tokens, Megatron's default). */
static const char *const fixed_inputs[2] = {"attention_mask", "position_ids"};

bool f8_train_fills_input(const char *name) {
	return strcmp(name, fixed_inputs[0]) == 0 || strcmp(name, fixed_inputs[1]) == 0;
}

/* Finds the token input (the integer input that is not the labels nor one of fixed_inputs),
 * the loss and metrics, the vocabulary (the logits' last dim), and binds batch and seq through
 * the token input. */
static f8_status find_interface(trainer *t, int64_t *symbol_values, f8_diag *diag) {
	const f8_graph *graph = t->graph;
	// A pipeline stage before the last has no labels and no loss (the last stage's loss is
	// every rank's, summed over pp).
	bool staged = graph->mesh[F8_MESH_AXIS_PP] > 1 &&
		      f8_graph_find_value(graph, "loss", 4) == F8_NONE;
	f8_status status = F8_OK;
	t->labels = t->loss = F8_NONE;
	if (!staged)
		status = find_value(graph, "labels", &t->labels, diag);
	if (!status && !staged)
		status = find_value(graph, "loss", &t->loss, diag);
	if (!status)
		status = find_value(graph, "grad_norm", &t->grad_norm, diag);
	if (!status)
		status = find_value(graph, "lr", &t->lr, diag);
	if (!status)
		status = find_value(graph, "iteration", &t->steps, diag);
	if (!status && (status = find_value(graph, "found_inf", &t->found_inf, diag)))
		f8_diag_hint(diag, "the step was compiled by an f8c that did not skip non-finite "
			     "iterations: compile the model again");
	if (status)
		return status;
	t->tokens = F8_NONE;
	t->inputs_fixed[0] = t->inputs_fixed[1] = F8_NONE;
	for (uint32_t i = 0; i < graph->n_inputs; i++) {
		const f8_value *value = &graph->values[graph->inputs[i]];
		if (value->role != F8_ROLE_INPUT || graph->inputs[i] == t->labels ||
		    graph->inputs[i] == t->found_inf)
			continue;
		int fixed = strcmp(value->name, fixed_inputs[0]) == 0   ? 0
			    : strcmp(value->name, fixed_inputs[1]) == 0 ? 1
									: -1;
		if (fixed >= 0 && value->type.shape.rank == 2) {
			t->inputs_fixed[fixed] = graph->inputs[i];
			continue;
		}
		if (t->tokens != F8_NONE || !f8_dtype_is_integer(value->type.dtype) ||
		    value->type.shape.rank != 2) {
			f8_diag_set(diag, F8_ERR_UNSUPPORTED, "f8c train feeds one input, the tokens "
				    "(batch, seq); input %%%s is another", value->name);
			f8_diag_hint(diag, "train a language model whose inputs are its token ids (with "
			     "attention_mask and position_ids, which f8c train fills)");
			return F8_ERR_UNSUPPORTED;
		}
		t->tokens = graph->inputs[i];
	}
	if (t->tokens == F8_NONE)
		return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "the model has no token input");
	const int64_t sizes[2] = {t->config->micro_batch_size, t->config->seq_length};
	const f8_type *type = &graph->values[t->tokens].type;
	for (int d = 0; d < 2; d++) {
		f8_dim dim = type->shape.dims[d];
		uint16_t symbol;
		if (f8_dim_is_symbol(dim, &symbol))
			symbol_values[symbol] = sizes[d];
		else if (!f8_dim_is_const(dim) || f8_dim_value(dim) != sizes[d])
			return f8_diag_set(diag, F8_ERR_ARGUMENT, "the model's token input has %s %s "
					   "fixed to another size than %lld", d ? "seq" : "batch",
					   d ? "length" : "size", (long long)sizes[d]);
	}
	for (uint32_t s = 0; s < graph->n_symbols; s++) {
		if (symbol_values[s])
			continue;
		if (!symbol_used(graph, (uint16_t)s)) { // bound before compiling: in no type now
			symbol_values[s] = 1;
			continue;
		}
		f8_diag_set(diag, F8_ERR_ARGUMENT, "size %s of the model is not known",
			    graph->symbols[s]);
		f8_diag_hint(diag, "give it with --dim %s=N", graph->symbols[s]);
		return F8_ERR_ARGUMENT;
	}
	t->vocab = 0;
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		if (node->op == F8_OP_CROSS_ENTROPY) {
			const f8_type *logits = &graph->values[node->inputs[0]].type;
			f8_dim vocab = logits->shape.dims[logits->shape.rank - 1];
			t->vocab = f8_dim_is_const(vocab) ? f8_dim_value(vocab) : 0;
		} else if (node->op == F8_OP_CROSS_ENTROPY_SHARD) { // split over tp: the whole's
			const f8_attr *vocab = f8_node_attr(node, "vocab");
			t->vocab = vocab && f8_dim_is_const(vocab->dim) ? f8_dim_value(vocab->dim) : 0;
		}
	}
	// A pipeline stage before the last has no logits: the last stage checks the tokens.
	if (t->vocab < 1 && !staged)
		return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "the logits' vocabulary size is not a "
				   "constant");
	return F8_OK;
}

/* Notes what FP8 left in the compiled graph: a cast phase to run first in each step, and the
 * scaling tables' non-finite counts for the metrics. */
static void find_fp8_state(trainer *t) {
	const f8_graph *graph = t->graph;
	t->has_cast = false;
	for (uint32_t i = 0; i < graph->n_order; i++)
		t->has_cast |= graph->nodes[graph->order[i]].phase == F8_PHASE_CAST;
	// A scaling table's non-finite count is its state leaf <table>.nonfinite, of i64 (the
	// fp8-cast pass names them: fp8.weights, fp8.activations, fp8.gradients).
	uint32_t n = 0;
	for (uint32_t i = 0; i < 3; i++)
		t->nonfinite[i] = F8_NONE;
	for (uint32_t i = 0; i < graph->n_inputs && n < 3; i++) {
		const f8_value *value = &graph->values[graph->inputs[i]];
		size_t len = strlen(value->name);
		if (value->type.dtype == F8_DTYPE_I64 && len > 10 &&
		    strcmp(value->name + len - 10, ".nonfinite") == 0)
			t->nonfinite[n++] = graph->inputs[i];
	}
}

/* A JSON number with 17 significant digits, so it reads back exactly; null when it is not
 * finite (JSON has no inf or nan). */
static const char *json_number(double x, char *buffer, size_t size) {
	if (!isfinite(x))
		return "null";
	snprintf(buffer, size, "%.17g", x);
	return buffer;
}

/* The FP8 scaling tables, for --log-fp8-stats: what each slot scales, by name. */
static f8_status find_fp8_tables(trainer *t, f8_diag *diag) {
	f8_status status = f8_rt_scaling_tables_find(
		t->graph, f8_dist_group_rank(t->config->dist, 1u << F8_MESH_AXIS_EP), t->tables,
		&t->n_tables, diag);
	// Under pipeline parallelism a stage may keep no table (its layers all in BF16) while the
	// others do: the logged slots are every stage's.
	if (!status && t->config->log_fp8_stats && !t->n_tables &&
	    t->graph->mesh[F8_MESH_AXIS_PP] <= 1) {
		f8_diag_set(diag, F8_ERR_ARGUMENT, "--log-fp8-stats %lld: this step keeps no FP8 "
			    "scaling state to record", (long long)t->config->log_fp8_stats);
		f8_diag_hint(diag, "only delayed scaling keeps a table of amaxes and scales across "
			     "steps (--fp8-recipe delayed); current, rowwise, block and MX scaling make "
			     "each scale in its cast");
		return F8_ERR_ARGUMENT;
	}
	return status;
}

/* Writes a JSON string (the labels are the graph's names: quotes and backslashes escaped,
 * control characters dropped). */
static void json_string_out(FILE *out, const char *s) {
	fputc('"', out);
	for (; *s; s++)
		if (*s == '"' || *s == '\\')
			fprintf(out, "\\%c", *s);
		else if ((unsigned char)*s >= 0x20)
			fputc(*s, out);
	fputc('"', out);
}

/* Whether --log-fp8-stats writes: with a metrics file. Every rank knows it (only the leader
 * opens the file), so that under pipeline and expert parallelism all gather the ranks' slots. */
static bool logs_fp8(const trainer *t) {
	return t->config->log_fp8_stats && t->config->metrics;
}

/* This stage's table called `name`, or NULL. */
static const f8_rt_scaling_table *table_named(const trainer *t, const char *name) {
	for (uint32_t i = 0; i < t->n_tables; i++)
		if (strcmp(t->tables[i].name, name) == 0)
			return &t->tables[i];
	return NULL;
}

/* The ranks whose scaling slots differ: the pipeline stages' and the expert-parallel ranks'
 * (the group of those axes, where more than one rank spans them). */
static uint32_t slot_axes(const trainer *t) {
	const uint32_t *mesh = t->graph->mesh;
	return (mesh[F8_MESH_AXIS_EP] > 1 ? 1u << F8_MESH_AXIS_EP : 0) |
	       (mesh[F8_MESH_AXIS_PP] > 1 ? 1u << F8_MESH_AXIS_PP : 0);
}

/* Whether this rank logs slot `s` of `table`: the first expert-parallel rank all of them, the
 * others their experts' (the rest they hold alike). */
static bool logs_slot(const trainer *t, const f8_rt_scaling_table *table, uint32_t s) {
	return f8_dist_group_rank(t->config->dist, 1u << F8_MESH_AXIS_EP) == 0 ||
	       table->experts[s] >= 0;
}

/*
 * `n` numbers of this rank's and those of the other ranks whose slots differ (slot_axes: the
 * pipeline stages, the expert-parallel ranks), in group order, into *all (*n_all of them;
 * f8_free'd by the caller): every rank of the group calls it together. The counts go first (a
 * sum over the group of each rank's at its place), then the numbers (a sum of arrays in which
 * each rank fills its own part). Without PP or EP a copy.
 */
static f8_status gather_slots(trainer *t, const double *mine, int64_t n, double **all,
			       int64_t *n_all, f8_diag *diag) {
	uint32_t axes = slot_axes(t);
	int64_t stages = f8_dist_group_size(t->config->dist, axes);
	int64_t stage = f8_dist_group_rank(t->config->dist, axes);
	int64_t *counts = f8_calloc((size_t)stages, sizeof *counts);
	*all = NULL, *n_all = 0;
	if (!counts)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	counts[stage] = n;
	f8_status status = stages > 1 ? f8_dist_all_reduce(t->config->dist, axes, counts,
							   (size_t)stages, F8_DTYPE_I64,
							   F8_REDUCTION_SUM, diag)
				      : F8_OK;
	int64_t before = 0;
	for (int64_t s = 0; !status && s < stages; s++) {
		before += s < stage ? counts[s] : 0;
		*n_all += counts[s];
	}
	if (!status && !(*all = f8_calloc((size_t)*n_all + 1, sizeof **all)))
		status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	for (int64_t i = 0; !status && i < n; i++)
		(*all)[before + i] = mine[i];
	if (!status && stages > 1)
		status = f8_dist_all_reduce(t->config->dist, axes, *all, (size_t)*n_all,
					    F8_DTYPE_F64, F8_REDUCTION_SUM, diag);
	f8_free(counts);
	if (status) {
		f8_free(*all);
		*all = NULL;
	}
	return status;
}

/* --log-fp8-stats: the line naming the slots, once a run (before its first step): under
 * pipeline and expert parallelism every stage's and every expert's, gathered (each table's
 * slots of stage 0, then 1...; within a stage, those of expert-parallel rank 0, then the other
 * ranks' experts'). */
static f8_status write_fp8_slots(trainer *t, f8_diag *diag) {
	if (!logs_fp8(t))
		return F8_OK;
	double *labels[F8_RT_SCALING_TABLES_MAX] = {0}, *formats[F8_RT_SCALING_TABLES_MAX] = {0};
	int64_t n_labels[F8_RT_SCALING_TABLES_MAX] = {0}, n_formats[F8_RT_SCALING_TABLES_MAX] = {0};
	f8_status status = F8_OK;
	for (int k = 0; !status && k < F8_RT_SCALING_TABLES_MAX; k++) {
		const f8_rt_scaling_table *table = table_named(t, f8_rt_scaling_table_names[k]);
		uint32_t slots = table ? table->n_slots : 0, logged = 0;
		size_t chars = 0;
		for (uint32_t s = 0; s < slots; s++)
			chars += logs_slot(t, table, s) ? strlen(table->labels[s]) + 1 : 0;
		// Each label and a newline, as numbers; each slot's format.
		double *text = f8_calloc(chars + 1, sizeof *text);
		double *kinds = f8_calloc(slots + 1, sizeof *kinds);
		size_t at = 0;
		for (uint32_t s = 0; text && kinds && s < slots; s++) {
			if (!logs_slot(t, table, s))
				continue;
			for (const char *c = table->labels[s]; *c; c++)
				text[at++] = (unsigned char)*c;
			text[at++] = '\n';
			kinds[logged++] = table->formats[s];
		}
		status = text && kinds ? gather_slots(t, text, (int64_t)chars, &labels[k],
						       &n_labels[k], diag)
				       : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
		if (!status)
			status = gather_slots(t, kinds, logged, &formats[k], &n_formats[k], diag);
		f8_free(text);
		f8_free(kinds);
	}
	if (!status && t->metrics && t->leader) {
		fprintf(t->metrics, "{\"step\": %lld, \"fp8_slots\": {", (long long)t->iteration);
		for (int k = 0, first = 1; k < F8_RT_SCALING_TABLES_MAX; k++) {
			if (!n_formats[k])
				continue;
			fprintf(t->metrics, "%s\"%s\": [", first ? "" : ", ",
				f8_rt_scaling_table_names[k]);
			first = 0;
			char label[256];
			size_t used = 0;
			for (int64_t i = 0, s = 0; i < n_labels[k]; i++) {
				char c = (char)labels[k][i];
				if (c != '\n') {
					if (used + 1 < sizeof label)
						label[used++] = c;
					continue;
				}
				label[used] = '\0', used = 0;
				fputs(s++ ? ", " : "", t->metrics);
				json_string_out(t->metrics, label);
			}
			fputc(']', t->metrics);
		}
		fputs("}, \"fp8_formats\": {", t->metrics);
		for (int k = 0, first = 1; k < F8_RT_SCALING_TABLES_MAX; k++) {
			if (!n_formats[k])
				continue;
			fprintf(t->metrics, "%s\"%s\": [", first ? "" : ", ",
				f8_rt_scaling_table_names[k]);
			first = 0;
			for (int64_t s = 0; s < n_formats[k]; s++) {
				f8_dtype format = (f8_dtype)formats[k][s];
				fprintf(t->metrics, "%s\"%s\"", s ? ", " : "",
					format == F8_DTYPE_E4M3 ? "E4M3"
					: format == F8_DTYPE_E5M2 ? "E5M2" : "");
			}
			fputc(']', t->metrics);
		}
		fputs("}}\n", t->metrics);
		fflush(t->metrics);
	}
	for (int k = 0; k < F8_RT_SCALING_TABLES_MAX; k++) {
		f8_free(labels[k]);
		f8_free(formats[k]);
	}
	return status;
}

/* One table's newest amaxes (row 0 of its history) and scales, slot by slot as pairs, of the
 * slots this rank logs (logs_slot), into pairs[] (2 x *n), and its count of skipped amaxes into
 * *skipped. */
static f8_status read_fp8_table(trainer *t, const f8_rt_scaling_table *table, double *pairs,
				uint32_t *n, double *skipped, f8_diag *diag) {
	f8_rt_tensor scale = {0}, history = {0};
	f8_status status = f8_executor_read(t->executor, table->scale, &scale, diag);
	if (!status)
		status = f8_executor_read(t->executor, table->history, &history, diag);
	*n = 0;
	for (uint32_t s = 0; !status && s < table->n_slots; s++) {
		if (!logs_slot(t, table, s))
			continue;
		pairs[2 * *n] = f8_rt_tensor_get(&history, s);
		pairs[2 * (*n)++ + 1] = f8_rt_tensor_get(&scale, s);
	}
	*skipped = !status && table->nonfinite != F8_NONE
		? f8_executor_read_scalar(t->executor, table->nonfinite) : 0;
	f8_rt_tensor_destroy(&scale);
	f8_rt_tensor_destroy(&history);
	return status;
}

/* --log-fp8-stats: every slot's newest amax (row 0 of its history) and its scale after the
 * iteration, one read of each table (no host sync per slot); under pipeline and expert
 * parallelism every stage's and expert's, gathered as write_fp8_slots names them, the tables'
 * counts of skipped amaxes summed (over the stages; of expert-parallel rank 0). */
static f8_status write_fp8_stats(trainer *t, f8_diag *diag) {
	if (!logs_fp8(t))
		return F8_OK;
	double *all[F8_RT_SCALING_TABLES_MAX] = {0}, *counts[F8_RT_SCALING_TABLES_MAX] = {0};
	int64_t n_all[F8_RT_SCALING_TABLES_MAX] = {0}, n_counts[F8_RT_SCALING_TABLES_MAX] = {0};
	f8_status status = F8_OK;
	for (int k = 0; !status && k < F8_RT_SCALING_TABLES_MAX; k++) {
		const f8_rt_scaling_table *table = table_named(t, f8_rt_scaling_table_names[k]);
		uint32_t slots = table ? table->n_slots : 0, logged = 0;
		double *pairs = f8_calloc(2 * (size_t)slots + 1, sizeof *pairs), skipped = 0;
		status = pairs ? F8_OK : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
		if (!status && table)
			status = read_fp8_table(t, table, pairs, &logged, &skipped, diag);
		if (!status)
			status = gather_slots(t, pairs, 2 * (int64_t)logged, &all[k], &n_all[k],
					       diag);
		// The count of one rank of ep: each counts the slots all of them hold too.
		bool counts_skipped = table && f8_dist_group_rank(t->config->dist,
								  1u << F8_MESH_AXIS_EP) == 0;
		if (!status)
			status = gather_slots(t, &skipped, counts_skipped ? 1 : 0, &counts[k],
					       &n_counts[k], diag);
		f8_free(pairs);
	}
	if (!status && t->metrics && t->leader) {
		char a[32];
		fprintf(t->metrics, "{\"step\": %lld, \"fp8_stats\": {", (long long)t->iteration);
		for (int k = 0, first = 1; k < F8_RT_SCALING_TABLES_MAX; k++) {
			if (!n_counts[k])
				continue;
			fprintf(t->metrics, "%s\"%s\": {\"amax\": [", first ? "" : ", ",
				f8_rt_scaling_table_names[k]);
			first = 0;
			for (int64_t s = 0; s < n_all[k] / 2; s++)
				fprintf(t->metrics, "%s%s", s ? ", " : "",
					json_number(all[k][2 * s], a, sizeof a));
			fputs("], \"scale\": [", t->metrics);
			for (int64_t s = 0; s < n_all[k] / 2; s++)
				fprintf(t->metrics, "%s%s", s ? ", " : "",
					json_number(all[k][2 * s + 1], a, sizeof a));
			double skipped = 0;
			for (int64_t i = 0; i < n_counts[k]; i++)
				skipped += counts[k][i];
			fprintf(t->metrics, "], \"nonfinite\": %lld}", (long long)skipped);
		}
		fputs("}}\n", t->metrics);
		fflush(t->metrics);
	}
	for (int k = 0; k < F8_RT_SCALING_TABLES_MAX; k++) {
		f8_free(all[k]);
		f8_free(counts[k]);
	}
	return status;
}

/* The data-parallel ranks' shares of each global batch: the mesh's EP x DP group, of which
 * this rank runs its contiguous part of the global micro-batches. */
static f8_status share_batches(trainer *t, f8_diag *diag) {
	const f8_train_config *c = t->config;
	if (f8_graph_mesh_ranks(t->graph) != (uint64_t)f8_dist_world(c->dist))
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "the step is compiled for %llu ranks, but "
				   "the run has %lld", (unsigned long long)f8_graph_mesh_ranks(t->graph),
				   (long long)f8_dist_world(c->dist));
	t->data_axes = 1u << F8_MESH_AXIS_EP | 1u << F8_MESH_AXIS_DP;
	int64_t ranks = f8_dist_group_size(c->dist, t->data_axes);
	if (t->global_micro_batches % ranks)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "--global-batch-size %lld is not a multiple "
				   "of --micro-batch-size %lld x the data-parallel size %lld",
				   (long long)c->global_batch_size, (long long)c->micro_batch_size,
				   (long long)ranks);
	t->micro_batches = t->global_micro_batches / ranks;
	t->first_micro_batch = t->micro_batches * f8_dist_group_rank(c->dist, t->data_axes);
	t->leader = f8_dist_rank(c->dist) == 0;
	return F8_OK;
}

/* The host tensor of fixed input `which` (0: attention_mask, 1: position_ids), when the
 * model has it: of the tokens' (batch, seq), all ones, or each row's positions. */
static f8_status fill_fixed_input(trainer *t, int which, const f8_tensor_view *tokens,
				  f8_diag *diag) {
	if (t->inputs_fixed[which] == F8_NONE)
		return F8_OK;
	const f8_tensor_view *view = f8_executor_view(t->executor, t->inputs_fixed[which]);
	if (view->rank != 2 || view->dims[0] != tokens->dims[0] || view->dims[1] != tokens->dims[1])
		return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "input %%%s is not of the tokens' "
				   "(batch, seq) = (%lld, %lld)", fixed_inputs[which],
				   (long long)tokens->dims[0], (long long)tokens->dims[1]);
	if (which == 1 && !f8_dtype_is_integer(view->dtype))
		return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "input %%position_ids is %s, not an "
				   "integer type", f8_dtype_name(view->dtype));
	f8_rt_tensor *batch = &t->fixed_batch[which];
	f8_status status = f8_rt_tensor_create(view->dtype, view->rank, view->dims, batch, diag);
	return status ? status : f8_train_fill_input(fixed_inputs[which], batch, diag);
}

f8_status f8_train_fill_input(const char *name, f8_rt_tensor *tensor, f8_diag *diag) {
	bool positions = strcmp(name, fixed_inputs[1]) == 0;
	if (!f8_train_fills_input(name) || tensor->rank != 2 ||
	    (positions && !f8_dtype_is_integer(tensor->dtype)))
		return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "f8c train fills no input %%%s of rank "
				   "%d and %s", name, tensor->rank, f8_dtype_name(tensor->dtype));
	for (int64_t i = 0; i < f8_rt_tensor_numel(tensor); i++)
		f8_rt_tensor_set(tensor, i, positions ? (double)(i % tensor->dims[1]) : 1.0);
	return F8_OK;
}

static bool pipelined(const trainer *t);
static f8_status check_ordered_messages(const trainer *t, f8_diag *diag);

/* Before the model is made: whether the pipeline's schedule takes this step's micro-batches,
 * and whether this backend runs it (its messages in posting order), so that a layout that
 * cannot run is refused before the parameters take the device's memory. */
static f8_status check_pipeline_layout(trainer *t, f8_diag *diag) {
	t->chunks = 1;
	if (!pipelined(t))
		return F8_OK;
	t->chunk_of = f8_malloc(t->graph->n_nodes + 1); // set_up_pipeline's too
	f8_status status = t->chunk_of ? f8_pipeline_chunks(t->graph, t->chunk_of, &t->chunks, diag)
				       : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	int64_t stages = t->graph->mesh[F8_MESH_AXIS_PP], m = t->micro_batches;
	if (!status && t->chunks > 1 && m % stages) {
		f8_diag_set(diag, F8_ERR_ARGUMENT, "the interleaved schedule runs the micro-batches in "
			    "groups of the %lld pipeline stages, and a step has %lld a data-parallel "
			    "rank", (long long)stages, (long long)m);
		f8_diag_hint(diag, "make --global-batch-size / (--micro-batch-size x the data-parallel "
			     "size) a multiple of --pipeline-model-parallel-size");
		return F8_ERR_ARGUMENT;
	}
	return status ? status : check_ordered_messages(t, diag);
}

/* Takes the compiled training step, makes the executor and its parameters. */
static f8_status set_up_model(trainer *t, f8_diag *diag) {
	const f8_train_config *c = t->config;
	const f8_train_schedule *schedule = &c->schedule;
	t->global_micro_batches = c->global_batch_size / c->micro_batch_size; // checked: a multiple
	t->micro_batches = t->global_micro_batches;
	snprintf(t->settings[0], sizeof t->settings[0], "%.17g", schedule->lr);
	snprintf(t->settings[1], sizeof t->settings[1], "%.17g", schedule->min_lr);
	snprintf(t->settings[2], sizeof t->settings[2], "%lld", (long long)schedule->warmup_iters);
	snprintf(t->settings[3], sizeof t->settings[3], "%lld", (long long)schedule->decay_iters);
	snprintf(t->settings[4], sizeof t->settings[4], "%s", schedule->decay_style);
	for (int i = 0; i < N_SETTINGS; i++)
		t->setting_values[i] = t->settings[i];
	f8_status status = c->graph ? F8_OK
				    : f8_diag_set(diag, F8_ERR_ARGUMENT, "no compiled training step "
						  "to run");
	t->graph = c->graph;
	if (!status)
		find_fp8_state(t);
	if (!status)
		status = find_fp8_tables(t, diag);
	if (!status)
		status = share_batches(t, diag);
	if (!status)
		status = check_pipeline_layout(t, diag);
	int64_t *symbol_values = NULL;
	if (!status && !(symbol_values = f8_calloc(t->graph->n_symbols + 1, sizeof(int64_t))))
		status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	if (!status)
		status = find_interface(t, symbol_values, diag);
	if (!status)
		status = f8_executor_create(t->graph, symbol_values, c->backend, &t->executor, diag);
	if (!status && c->observe)
		f8_executor_keep_all(t->executor, true);
	f8_free(symbol_values);
	if (!status)
		status = f8_rt_parameters_init(t->executor, c->dist, c->seed, c->weights,
						c->weight_init, diag);
	const f8_tensor_view *tokens = status ? NULL : f8_executor_view(t->executor, t->tokens);
	// A pipeline stage without labels still draws them (into a batch of the tokens' shape),
	// so that every stage's sampler stays alike.
	const f8_tensor_view *labels = status ? NULL
				       : f8_executor_view(t->executor, t->labels != F8_NONE
									? t->labels : t->tokens);
	if (!status && (tokens->dtype != F8_DTYPE_I64 || labels->dtype != F8_DTYPE_I64))
		status = f8_diag_set(diag, F8_ERR_UNSUPPORTED, "the token input and labels must be "
				     "i64");
	if (!status)
		status = f8_rt_tensor_create(tokens->dtype, tokens->rank, tokens->dims,
					     &t->token_batch, diag);
	if (!status)
		status = f8_rt_tensor_create(labels->dtype, labels->rank, labels->dims,
					     &t->label_batch, diag);
	for (int i = 0; !status && i < 2; i++)
		status = fill_fixed_input(t, i, tokens, diag);
	if (!status)
		status = f8_rt_tensor_create(F8_DTYPE_F32, 0, NULL, &t->scalar_f32, diag);
	if (!status)
		status = f8_rt_tensor_create(F8_DTYPE_I64, 0, NULL, &t->scalar_i64, diag);
	return status;
}

/* Loads the tokens, checks them against the vocabulary, splits them, starts the samplers. */
static f8_status set_up_data(trainer *t, f8_diag *diag) {
	const f8_train_config *c = t->config;
	f8_status status = f8_tokens_load(c->data, c->data_format, &t->data, diag);
	if (!status && t->vocab > 0) // 0: a pipeline stage without the logits
		status = f8_tokens_check_vocab(&t->data, (uint32_t)t->vocab, diag);
	if (!status)
		status = f8_tokens_split(t->data.n, c->split, c->n_split, t->ranges, diag);
	if (status)
		return status;
	f8_batch_sampler_init(&t->train_sampler, &t->data, c->seed);
	f8_batch_sampler_init_eval(&t->eval_sampler, &t->data);
	return F8_OK;
}

static void notify(trainer *t, f8_train_progress *progress) {
	if (progress->event == F8_TRAIN_EVENT_START || progress->event == F8_TRAIN_EVENT_END) {
		progress->memory = f8_executor_memory_of(t->executor);
		progress->peak_bytes = f8_executor_backend(t->executor)->peak_bytes;
	}
	progress->iteration = t->iteration;
	progress->train_iters = t->config->train_iters;
	progress->elapsed_seconds = seconds_since(&t->start);
	if (t->callback && t->leader)
		t->callback(progress, t->user);
}

static double scalar(const trainer *t, f8_value_id value) {
	return f8_executor_read_scalar(t->executor, value);
}

/* Draws the next micro-batch of `sampler` (from `range`) into host tensors `tokens` and
 * `labels`. */
static f8_status draw(trainer *t, f8_batch_sampler *sampler, f8_token_range range,
		      f8_rt_tensor *tokens, f8_rt_tensor *labels, f8_diag *diag) {
	return f8_batch_sample(sampler, range, (size_t)t->config->micro_batch_size,
			       (size_t)t->config->seq_length, tokens->data, labels->data, diag);
}

/* Writes a micro-batch into the token and label leaves, and the fixed inputs. */
static f8_status give(trainer *t, const f8_rt_tensor *tokens, const f8_rt_tensor *labels,
		      f8_diag *diag) {
	f8_status status = f8_executor_write(t->executor, t->tokens, tokens, diag);
	if (!status && t->labels != F8_NONE)
		status = f8_executor_write(t->executor, t->labels, labels, diag);
	for (int i = 0; !status && i < 2; i++)
		if (t->inputs_fixed[i] != F8_NONE)
			status = f8_executor_write(t->executor, t->inputs_fixed[i],
						   &t->fixed_batch[i], diag);
	return status;
}

/* One batch from `sampler` over `range` into the token input and the labels. */
static f8_status feed(trainer *t, f8_batch_sampler *sampler, f8_token_range range,
		      f8_diag *diag) {
	f8_status status = draw(t, sampler, range, &t->token_batch, &t->label_batch, diag);
	return status ? status : give(t, &t->token_batch, &t->label_batch, diag);
}

/* The sum of the FP8 tables' non-finite amax counts, or -1 when there are no tables; under
 * pipeline and expert parallelism every stage's and expert-parallel rank's tables' (each stage
 * has its own, and an expert's amaxes are reduced over its own ranks only), a stage without
 * tables adding none, so that every rank takes the same skip decision. */
static f8_status nonfinite_amaxes(const trainer *t, int64_t *out, f8_diag *diag) {
	int64_t sum = -1;
	for (int i = 0; i < 3; i++) {
		if (t->nonfinite[i] == F8_NONE)
			continue;
		sum = (sum < 0 ? 0 : sum) + (int64_t)scalar(t, t->nonfinite[i]);
	}
	*out = sum;
	uint32_t axes = slot_axes(t);
	if (!axes)
		return F8_OK;
	int64_t counts[2] = {sum < 0 ? 0 : sum, sum < 0 ? 0 : 1}; // the count; tables anywhere
	f8_status status = f8_dist_all_reduce(t->config->dist, axes, counts, 2, F8_DTYPE_I64,
					      F8_REDUCTION_SUM, diag);
	*out = counts[1] ? counts[0] : -1;
	return status;
}

/* Writes %found_inf (1 or 0) when it holds the other. */
static f8_status set_found_inf(trainer *t, bool found, f8_diag *diag) {
	if (found == t->found_inf_set)
		return F8_OK;
	f8_rt_tensor_set(&t->scalar_f32, 0, found ? 1.0 : 0.0);
	f8_status status = f8_executor_write(t->executor, t->found_inf, &t->scalar_f32, diag);
	if (!status)
		t->found_inf_set = found;
	return status;
}

/* Draws `n` micro-batches that other data-parallel ranks run (into the scratch batch). */
static f8_status draw_past(trainer *t, int64_t n, f8_diag *diag) {
	f8_status status = F8_OK;
	for (int64_t i = 0; !status && i < n; i++)
		status = draw(t, &t->train_sampler, t->ranges[0], &t->token_batch, &t->label_batch,
			      diag);
	return status;
}

/* This rank's micro-batches run each forward and backward in turn: every rank draws every
 * micro-batch of the global batch, so that the samplers stay alike and the ranks' shares
 * together are the single-device step's batch; each runs its own. The sum of their losses
 * into *sum. */
static f8_status run_in_turn(trainer *t, double *sum, f8_diag *diag) {
	for (int64_t g = 0; g < t->global_micro_batches; g++) {
		int64_t m = g - t->first_micro_batch;
		bool own = m >= 0 && m < t->micro_batches;
		f8_status status = own ? feed(t, &t->train_sampler, t->ranges[0], diag)
				       : draw_past(t, 1, diag);
		if (!status && own)
			status = f8_executor_run(t->executor, F8_PHASE_BIT(F8_PHASE_FWD) |
						 F8_PHASE_BIT(F8_PHASE_BWD), diag);
		if (!status && own && t->config->observe)
			status = t->config->observe(t->graph, t->executor, t->iteration + 1, m,
						    t->config->observe_user, diag);
		if (status)
			return status;
		*sum += own && t->loss != F8_NONE ? scalar(t, t->loss) : 0;
	}
	return F8_OK;
}

/* The host batches of the `n` micro-batches in flight, made at set-up (the run frees them). */
static f8_status make_flight(trainer *t, uint32_t n, f8_diag *diag) {
	t->flight_tokens = f8_calloc(n, sizeof *t->flight_tokens);
	t->flight_labels = f8_calloc(n, sizeof *t->flight_labels);
	if (!t->flight_tokens || !t->flight_labels)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	f8_status status = F8_OK;
	for (; !status && t->n_flight < n; t->n_flight++) {
		uint32_t c = t->n_flight;
		status = f8_rt_tensor_create(F8_DTYPE_I64, t->token_batch.rank, t->token_batch.dims,
					     &t->flight_tokens[c], diag);
		if (!status)
			status = f8_rt_tensor_create(F8_DTYPE_I64, t->label_batch.rank,
						     t->label_batch.dims, &t->flight_labels[c], diag);
	}
	return status;
}

/* Micro-batch run `run`'s forward of its chunk (runtime/pipeline_schedule.h) on its context,
 * keeping what its later runs read; at its first chunk the micro-batch is drawn (they are
 * drawn in order), and the loss, made by the last chunk's of the last stage, added to *sum. */
static f8_status forward(trainer *t, const f8_stage_run *run, double *sum, f8_diag *diag) {
	uint32_t c = run->context;
	f8_status status = run->chunk == 0 ? draw(t, &t->train_sampler, t->ranges[0],
						  &t->flight_tokens[c], &t->flight_labels[c], diag)
					   : F8_OK;
	f8_executor_use_context(t->executor, c);
	if (!status)
		status = give(t, &t->flight_tokens[c], &t->flight_labels[c], diag);
	uint32_t flags = F8_RUN_KEEP | (run->chunk > 0 ? F8_RUN_CONTINUE : 0) |
			 (t->chunks > 1 ? F8_RUN_CHUNK(run->chunk) : 0);
	if (!status)
		status = f8_executor_run(t->executor, F8_PHASE_BIT(F8_PHASE_FWD) | flags, diag);
	if (!status && t->loss != F8_NONE && run->chunk + 1 == t->chunks)
		*sum += scalar(t, t->loss);
	return status;
}

/* Micro-batch run `run`'s backward of its chunk on its context, which its forwards' (and the
 * later chunks' backwards') runs kept. */
static f8_status backward(trainer *t, const f8_stage_run *run, f8_diag *diag) {
	f8_executor_use_context(t->executor, run->context);
	f8_status status = give(t, &t->flight_tokens[run->context], &t->flight_labels[run->context],
				diag);
	uint32_t flags = F8_RUN_CONTINUE | (run->chunk > 0 ? F8_RUN_KEEP : 0) |
			 (t->chunks > 1 ? F8_RUN_CHUNK(run->chunk) : 0);
	if (!status)
		status = f8_executor_run(t->executor, F8_PHASE_BIT(F8_PHASE_BWD) | flags, diag);
	if (!status && t->config->observe)
		status = t->config->observe(t->graph, t->executor, t->iteration + 1, run->micro_batch,
					    t->config->observe_user, diag);
	return status;
}

/* This stage's order of runs: the interleaved schedule's with several model chunks, else
 * 1F1B's (runtime/pipeline_schedule.h); *contexts the executor contexts they use. */
static f8_status pipeline_order(const trainer *t, f8_stage_run *runs, uint32_t *contexts,
				f8_diag *diag) {
	int64_t stages = t->graph->mesh[F8_MESH_AXIS_PP], m = t->micro_batches;
	int64_t stage = f8_dist_group_rank(t->config->dist, 1u << F8_MESH_AXIS_PP);
	if (t->chunks <= 1) {
		f8_pipeline_1f1b(stages, stage, m, runs);
		*contexts = f8_pipeline_1f1b_contexts(stages, stage, m);
		return F8_OK;
	}
	f8_pipeline_interleaved(stages, stage, t->chunks, m, runs, contexts); // m: checked
	if (*contexts > F8_EXECUTOR_CONTEXTS_MAX)
		return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "the interleaved schedule would hold "
				   "more than %d micro-batches in flight on stage %lld",
				   F8_EXECUTOR_CONTEXTS_MAX, (long long)stage);
	return F8_OK;
}

/*
 * On a backend that matches messages in posting order (NCCL: no tags, each send posted with
 * the stage's next receive; backend.h's ordered_messages), whether every stage's order of
 * runs makes pairs of messages that meet and groups that complete (runtime/pipeline_messages.h).
 * Every rank decides alike: the layout is the same numbers everywhere. A refusal's hint names
 * the layouts near this one that pass.
 */
static f8_status check_ordered_messages(const trainer *t, f8_diag *diag) {
	const f8_backend *backend = t->config->backend;
	if (!backend || !backend->interface->ordered_messages)
		return F8_OK;
	int64_t stages = t->graph->mesh[F8_MESH_AXIS_PP], m = t->micro_batches;
	f8_status status = f8_pipeline_messages_check(stages, t->chunks, m, diag);
	if (status != F8_ERR_UNSUPPORTED)
		return status;
	// The same check on the alternatives: one step of PP micro-batches (the interleaved
	// schedule's warm-up is then every forward) and 1F1B over this step's.
	bool whole_warmup = t->chunks > 1 && m != stages &&
			    f8_pipeline_messages_check(stages, t->chunks, stages, NULL) == F8_OK;
	bool one_chunk = t->chunks > 1 && f8_pipeline_messages_check(stages, 1, m, NULL) == F8_OK;
	char batch[96] = "";
	if (whole_warmup)
		snprintf(batch, sizeof batch, "--global-batch-size %lld (PP micro-batches a "
			 "data-parallel rank), ", (long long)(t->config->global_batch_size / m * stages));
	f8_diag_hint(diag, "the %s backend matches a pair's messages in the order they are posted "
		     "(NCCL has no tags), each send in one group with the stage's next receive. What "
		     "runs: %s%sor this layout on the CPU backend "
		     "(--device cpu), whose MPI matches by tag", f8_backend_name(backend), batch,
		     one_chunk ? "the 1F1B schedule (without --num-layers-per-virtual-pipeline-stage), "
			       : "");
	return status;
}

/*
 * Pipeline parallelism's schedule (runtime/pipeline_schedule.h: 1F1B, or interleaved over the
 * stage's model chunks): this stage's forwards and backwards in its order, each micro-batch on
 * an executor context of its own while in flight. The micro-batches are drawn in order, as
 * run_in_turn draws them, and each run is given its micro-batch's tokens and labels again (the
 * embedding's gradient reads the tokens). The accumulated gradients come out as run_in_turn's:
 * each parameter's backwards add in micro-batch order. So do the scaling tables under 1F1B
 * (the forwards update the activations' table in micro-batch order, the backwards the
 * gradients'); under the interleaved schedule a stage's table takes a micro-batch's amaxes
 * after its last chunk's forward (and first chunk's backward), so the first chunks of the
 * micro-batches in flight cast with scales that have not yet seen the ones just before them.
 */
static f8_status run_pipeline(trainer *t, double *sum, f8_diag *diag) {
	f8_status status = draw_past(t, t->first_micro_batch, diag);
	for (int64_t r = 0; !status && r < 2 * t->micro_batches * t->chunks; r++)
		status = t->runs[r].backward ? backward(t, &t->runs[r], diag)
					     : forward(t, &t->runs[r], sum, diag);
	if (!status)
		status = draw_past(t, t->global_micro_batches - t->first_micro_batch -
					      t->micro_batches, diag);
	f8_executor_use_context(t->executor, 0);
	return status;
}

/* Whether the steps run the pipeline's schedule: under pipeline parallelism, but for an
 * observer, which sees each micro-batch's forward and backward in one run (every value kept),
 * so its stages take them in turn, one micro-batch in flight. */
static bool pipelined(const trainer *t) {
	return t->graph->mesh[F8_MESH_AXIS_PP] > 1 && !t->config->observe;
}

/* Before the first step, for the pipeline's schedule: the stage's model chunks (as
 * check_pipeline_layout found them), the executor's contexts of the micro-batches in flight and
 * their host batches. */
static f8_status set_up_pipeline(trainer *t, f8_diag *diag) {
	if (!pipelined(t))
		return F8_OK;
	uint32_t contexts = 1;
	f8_status status = F8_OK; // the chunks: check_pipeline_layout's
	if (t->chunks > 1)
		status = f8_executor_set_chunks(t->executor, t->chunk_of, t->chunks, diag);
	if (!status && !(t->runs = f8_calloc((size_t)(2 * t->micro_batches * t->chunks),
					     sizeof *t->runs)))
		status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	if (!status)
		status = pipeline_order(t, t->runs, &contexts, diag); // checked: check_pipeline_layout
	if (!status)
		status = f8_executor_set_contexts(t->executor, contexts, diag);
	if (!status)
		status = make_flight(t, contexts, diag);
	return status;
}

/* What the backend holds back issued (the CUDA backend's pipeline sends, backend.h's flush). */
static f8_status flush_sends(trainer *t, f8_diag *diag) {
	f8_backend *backend = t->config->backend;
	return backend && backend->interface->flush ? backend->interface->flush(backend, diag)
						    : F8_OK;
}

/* The messages sent so far on their way, as the ranks' next agreement needs: what the backend
 * holds back issued, MPI's sends completed. */
static f8_status complete_sends(trainer *t, f8_diag *diag) {
	f8_status status = flush_sends(t, diag);
	return status ? status : f8_dist_complete_sends(t->config->dist, diag);
}

/* One iteration: the FP8 weight casts (once per step: every micro-batch reads the same
 * weights), the micro-batches' forward and backward, then the optimizer; the mean loss and the
 * gradient norm into *loss and *grad_norm. *skipped_for says
 * what was not finite when the step was skipped (NULL: it was taken): a micro-batch's loss or
 * an FP8 amax, found here before opt (which %found_inf then skips), or the gradient norm, which
 * opt finds itself. */
static f8_status step(trainer *t, double *loss, double *grad_norm, const char **skipped_for,
		      f8_diag *diag) {
	double sum = 0;
	if (t->has_cast) {
		f8_status status = f8_executor_run(t->executor, F8_PHASE_BIT(F8_PHASE_CAST), diag);
		if (status)
			return status;
	}
	uint32_t pipeline = t->graph->mesh[F8_MESH_AXIS_PP] > 1 ? 1u << F8_MESH_AXIS_PP : 0;
	f8_status reduced = pipelined(t) ? run_pipeline(t, &sum, diag) : run_in_turn(t, &sum, diag);
	if (!reduced) // the activations sent, and their gradients, received before the optimizer
		reduced = complete_sends(t, diag);
	// The mean over the global batch: the ranks' sums added (a NaN anywhere is everyone's),
	// the last pipeline stage's to every stage.
	if (!reduced)
		reduced = f8_dist_all_reduce(t->config->dist, t->data_axes | pipeline, &sum, 1,
					     F8_DTYPE_F64, F8_REDUCTION_SUM, diag);
	if (reduced)
		return reduced;
	*loss = sum / (double)t->global_micro_batches;
	t->consumed_tokens += t->config->global_batch_size * t->config->seq_length;
	int64_t nonfinite;
	if ((reduced = nonfinite_amaxes(t, &nonfinite, diag)))
		return reduced;
	*skipped_for = !isfinite(*loss) ? "loss" : nonfinite > t->nonfinite_seen ? "fp8 amax" : NULL;
	t->nonfinite_seen = nonfinite;
	f8_status status = set_found_inf(t, *skipped_for != NULL, diag);
	if (!status)
		status = f8_executor_run(t->executor, F8_PHASE_BIT(F8_PHASE_OPT), diag);
	if (!status) // the tied embedding's gradient, sent between the first and the last stage
		status = complete_sends(t, diag);
	if (status)
		return status;
	*grad_norm = scalar(t, t->grad_norm);
	if (!*skipped_for && !isfinite(*grad_norm))
		*skipped_for = "gradient norm";
	if (!*skipped_for)
		return F8_OK;
	// AdamW kept the weights and moments; the optimizer's step count goes back to the steps
	// taken, so that the learning rate and the bias correction do not move either.
	f8_rt_tensor_set(&t->scalar_i64, 0, (double)(t->iteration - t->skipped_iters));
	return f8_executor_write(t->executor, t->steps, &t->scalar_i64, diag);
}

/* The mean loss over eval_iters fixed batches of the validation range. FP8 scaling is frozen
 * meanwhile (an evaluation must not move the scales or record its amaxes, and a resumed run
 * must not depend on when it evaluated); the cast phase runs first, so that the weight caches
 * are those of the current weights. */
static f8_status evaluate(trainer *t, double *loss, f8_diag *diag) {
	f8_batch_sampler_rewind(&t->eval_sampler);
	f8_executor_freeze_scaling(t->executor, true);
	f8_status status = t->has_cast ? f8_executor_run(t->executor, F8_PHASE_BIT(F8_PHASE_CAST),
							 diag)
				       : F8_OK;
	double sum = 0;
	for (int64_t i = 0; !status && i < t->config->eval_iters; i++) {
		status = feed(t, &t->eval_sampler, t->ranges[1], diag);
		if (!status)
			status = f8_executor_run(t->executor, F8_PHASE_BIT(F8_PHASE_FWD), diag);
		// Each micro-batch's sends on their way: the first stage receives nothing here, so
		// the CUDA backend would hold them all to the end (a buffer each) and the next stage
		// would start only then (runtime.pipeline_messages holds this order deadlock-free).
		if (!status && pipelined(t))
			status = flush_sends(t, diag);
		if (!status && t->loss != F8_NONE)
			sum += scalar(t, t->loss);
	}
	f8_executor_freeze_scaling(t->executor, false);
	if (!status)
		status = complete_sends(t, diag);
	if (!status && t->graph->mesh[F8_MESH_AXIS_PP] > 1) // the last stage's, to every stage
		status = f8_dist_all_reduce(t->config->dist, 1u << F8_MESH_AXIS_PP, &sum, 1,
					    F8_DTYPE_F64, F8_REDUCTION_SUM, diag);
	*loss = sum / (double)t->config->eval_iters;
	return status;
}

static f8_status save(trainer *t, f8_diag *diag) {
	f8_checkpoint_info info = {.iteration = t->iteration, .skipped_iters = t->skipped_iters,
				   .sampler_state = t->train_sampler.state,
				   .seed = t->config->seed, .consumed_tokens = t->consumed_tokens,
				   .model = t->config->model, .setting_keys = setting_keys,
				   .setting_values = t->setting_values, .n_settings = N_SETTINGS,
				   .dist = t->config->dist};
	// Every rank writes its shard; the ranks agree on each step of the save, so that every
	// rank returns the same outcome and none goes on before the checkpoint is whole.
	f8_status status = f8_checkpoint_save(t->config->save, t->executor, &info, diag);
	if (!status)
		notify(t, &(f8_train_progress){.event = F8_TRAIN_EVENT_SAVE, .path = t->config->save});
	return status;
}

/* Writes one JSON line. */
static void write_metrics(trainer *t, const char *kind, const f8_train_progress *p) {
	if (!t->metrics || !t->leader)
		return;
	char a[32], b[32], c[32], d[32], fp8[48] = "";
	if (p->fp8_nonfinite_amax >= 0)
		snprintf(fp8, sizeof fp8, ", \"fp8_nonfinite_amax\": %lld",
			 (long long)p->fp8_nonfinite_amax);
	if (strcmp(kind, "eval") == 0)
		fprintf(t->metrics, "{\"step\": %lld, \"eval_loss\": %s, \"elapsed_s\": %.3f}\n",
			(long long)t->iteration, json_number(p->eval_loss, a, sizeof a),
			p->elapsed_seconds);
	else if (strcmp(kind, "skip") == 0)
		fprintf(t->metrics, "{\"step\": %lld, \"skipped\": true, \"skipped_for\": \"%s\", "
			"\"loss\": %s, \"grad_norm\": %s, \"skipped_iters\": %lld%s, "
			"\"elapsed_s\": %.3f}\n", (long long)t->iteration, p->skipped_for,
			json_number(p->loss, a, sizeof a), json_number(p->grad_norm, c, sizeof c),
			(long long)p->skipped_iters, fp8, p->elapsed_seconds);
	else
		fprintf(t->metrics, "{\"step\": %lld, \"loss\": %s, \"lr\": %s, "
			"\"grad_norm\": %s, \"tokens_per_s\": %s, \"skipped_iters\": %lld%s, "
			"\"elapsed_s\": %.3f}\n",
			(long long)t->iteration, json_number(p->loss, a, sizeof a),
			json_number(p->lr, b, sizeof b), json_number(p->grad_norm, c, sizeof c),
			json_number(p->tokens_per_second, d, sizeof d), (long long)p->skipped_iters,
			fp8, p->elapsed_seconds);
	fflush(t->metrics);
}

/* FNV-1a over `n` bytes, from `hash`. */
static uint64_t fnv1a(uint64_t hash, const unsigned char *bytes, size_t n) {
	for (size_t i = 0; i < n; i++)
		hash = (hash ^ bytes[i]) * UINT64_C(0x100000001b3);
	return hash;
}

/* Whether `value` is split along one of `axes` (the distributed optimizer's moments). */
static bool sharded_over(const f8_value *value, uint32_t axes) {
	for (int axis = 0; axis < F8_MESH_AXIS_COUNT; axis++)
		if ((axes & 1u << axis) && value->placement[axis].kind == F8_PLACEMENT_KIND_SHARD)
			return true;
	return false;
}

/* The hash of leaf `v` (read to `host`) as the ranks of a group that holds other experts
 * compare it: a scaling table's scales and amax histories without its experts' slots (another
 * rank's slots scale other experts), its count of skipped amaxes not at all (it counts every
 * slot's); *compared false for the count. */
static uint64_t hash_apart_from_experts(const trainer *t, f8_value_id v, const f8_rt_tensor *host,
					bool *compared) {
	uint64_t hash = UINT64_C(0xcbf29ce484222325);
	*compared = true;
	for (uint32_t i = 0; i < t->n_tables; i++) {
		const f8_rt_scaling_table *table = &t->tables[i];
		*compared &= v != table->nonfinite;
		if (v != table->scale && v != table->history)
			continue;
		size_t slots = table->n_slots;
		size_t rows = slots ? host->n_bytes / (slots * sizeof(float)) : 0;
		for (size_t r = 0; r < rows; r++)
			for (size_t s = 0; s < slots; s++)
				if (table->experts[s] < 0)
					hash = fnv1a(hash, (const unsigned char *)host->data +
							   (r * slots + s) * sizeof(float),
						     sizeof(float));
		return hash;
	}
	return fnv1a(hash, host->data, host->n_bytes);
}

/*
 * Megatron-LM's --check-weight-hash-across-dp-replicas-interval: every state leaf (parameters,
 * optimizer state, FP8 scales and histories, weight caches; not what a rank holds a part of)
 * hashed on each rank, the hashes gathered over the group of `axes` and held to rank 0's of it.
 * Over TP (`what` "tensor-parallel ranks'") the weight caches are left out too: the FP8 copy of
 * a split weight is the rank's own part. There it is TransformerEngine's check that every rank
 * holds the same scales of each logical tensor (delayed scaling's tables, reduced over TP).
 * F8_ERR_INVALID naming the first leaf and rank that differ.
 */
static f8_status check_replicas_over(trainer *t, uint32_t axes, const char *what,
				     f8_diag *diag) {
	const f8_graph *graph = t->graph;
	uint32_t ranks = f8_dist_group_size(t->config->dist, axes);
	bool tensor = axes == 1u << F8_MESH_AXIS_TP;
	bool experts_apart = (axes & 1u << F8_MESH_AXIS_EP) && graph->mesh[F8_MESH_AXIS_EP] > 1;
	uint64_t *mine = f8_calloc(graph->n_inputs + 1, sizeof *mine);
	uint64_t *all = f8_calloc(((size_t)graph->n_inputs + 1) * ranks, sizeof *all);
	f8_status status = mine && all ? F8_OK : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	for (uint32_t i = 0; !status && i < graph->n_inputs; i++) {
		const f8_value *leaf = &graph->values[graph->inputs[i]];
		if (leaf->role == F8_ROLE_INPUT || sharded_over(leaf, axes) ||
		    (tensor && leaf->role == F8_ROLE_WEIGHT_CACHE))
			continue; // the step's inputs; each rank's own part
		f8_rt_tensor host = {0};
		bool compared = true;
		status = f8_executor_read(t->executor, graph->inputs[i], &host, diag);
		if (!status)
			mine[i] = experts_apart ? hash_apart_from_experts(t, graph->inputs[i], &host,
									  &compared)
						: fnv1a(UINT64_C(0xcbf29ce484222325), host.data,
							host.n_bytes);
		mine[i] = compared ? mine[i] : 0;
		f8_rt_tensor_destroy(&host);
	}
	size_t bytes = ((size_t)graph->n_inputs + 1) * sizeof *mine;
	if (!status)
		status = f8_dist_all_gather(t->config->dist, axes, mine, all, bytes, diag);
	for (uint32_t r = 1; !status && r < ranks; r++)
		for (uint32_t i = 0; !status && i < graph->n_inputs; i++)
			if (all[(size_t)r * (graph->n_inputs + 1) + i] != all[i]) {
				f8_diag_set(diag, F8_ERR_INVALID, "iteration %lld: the %s replicas "
					    "differ: %%%s on rank %u of the group is not rank 0's",
					    (long long)t->iteration, what,
					    graph->values[graph->inputs[i]].name, r);
				f8_diag_hint(diag, "the replicas must take the same steps: a collective "
					     "over the wrong group, or a rank that read other data "
					     "where it should not have");
				status = F8_ERR_INVALID;
			}
	f8_free(mine);
	f8_free(all);
	return status;
}

/* The replicas checked over data parallelism (expert parallelism's ranks hold other experts:
 * first over the ranks of the same experts, all that they hold, then over ep too, what is not
 * an expert's), then over CP (whose ranks hold the same state and run other tokens), then over
 * TP (what its ranks hold whole). */
static f8_status check_replicas(trainer *t, f8_diag *diag) {
	uint32_t experts = t->data_axes & ~(1u << F8_MESH_AXIS_EP);
	f8_status status = t->graph->mesh[F8_MESH_AXIS_EP] > 1 && t->graph->mesh[F8_MESH_AXIS_DP] > 1
				   ? check_replicas_over(t, experts, "expert data-parallel", diag)
				   : F8_OK;
	if (!status)
		status = check_replicas_over(t, t->data_axes, "data-parallel", diag);
	if (!status && t->graph->mesh[F8_MESH_AXIS_CP] > 1)
		status = check_replicas_over(t, 1u << F8_MESH_AXIS_CP, "context-parallel", diag);
	if (!status && t->graph->mesh[F8_MESH_AXIS_TP] > 1)
		status = check_replicas_over(t, 1u << F8_MESH_AXIS_TP, "tensor-parallel ranks'",
					     diag);
	return status;
}

static f8_status loop(trainer *t, f8_diag *diag) {
	const f8_train_config *c = t->config;
	double first_loss = NAN, last_loss = NAN, best_eval = NAN;
	struct timespec interval;
	clock_gettime(CLOCK_MONOTONIC, &interval);
	int64_t interval_iterations = 0;
	f8_status counted = nonfinite_amaxes(t, &t->nonfinite_seen, diag);
	if (counted)
		return counted;
	while (t->iteration < c->train_iters) {
		double loss, grad_norm = NAN;
		const char *skipped_for = NULL;
		f8_status status = step(t, &loss, &grad_norm, &skipped_for, diag);
		if (status)
			return status;
		t->iteration++, interval_iterations++;
		if (skipped_for) {
			t->skipped_iters++, t->skipped_in_a_row++;
			f8_train_progress p = {
				.event = F8_TRAIN_EVENT_SKIP, .loss = loss, .grad_norm = grad_norm,
				.skipped_for = skipped_for, .skipped_iters = t->skipped_iters,
				.fp8_nonfinite_amax = t->nonfinite_seen};
			notify(t, &p);
			write_metrics(t, "skip", &p);
			if (t->skipped_in_a_row > c->max_nonfinite_skips) {
				f8_diag_set(diag, F8_ERR_INVALID, "iteration %lld: the %s is not finite, "
					    "%lld iteration%s in a row (--max-nonfinite-skips %lld): "
					    "stopping", (long long)t->iteration, skipped_for,
					    (long long)t->skipped_in_a_row,
					    t->skipped_in_a_row == 1 ? "" : "s",
					    (long long)c->max_nonfinite_skips);
				f8_diag_hint(diag, "the skipped iterations changed no weight, and no "
					     "checkpoint holds a non-finite value; lower --lr or "
					     "--clip-grad, or look at the data of these iterations");
				return F8_ERR_INVALID;
			}
		} else {
			t->skipped_in_a_row = 0;
			if (isnan(first_loss))
				first_loss = loss;
			last_loss = loss;
		}
		if (!skipped_for &&
		    (t->iteration % c->log_interval == 0 || t->iteration == c->train_iters)) {
			double seconds = seconds_since(&interval);
			f8_train_progress p = {
				.event = F8_TRAIN_EVENT_STEP, .loss = loss, .lr = scalar(t, t->lr),
				.grad_norm = grad_norm,
				.tokens_per_second = (double)(interval_iterations * c->global_batch_size *
							      c->seq_length) / seconds,
				.skipped_iters = t->skipped_iters,
				.fp8_nonfinite_amax = t->nonfinite_seen};
			notify(t, &p);
			write_metrics(t, "train", &p);
			clock_gettime(CLOCK_MONOTONIC, &interval);
			interval_iterations = 0;
		}
		if (c->eval_interval && (t->iteration % c->eval_interval == 0 ||
					 t->iteration == c->train_iters)) {
			f8_train_progress p = {.event = F8_TRAIN_EVENT_EVAL};
			if ((status = evaluate(t, &p.eval_loss, diag)))
				return status;
			if (isnan(best_eval) || p.eval_loss < best_eval)
				best_eval = p.eval_loss;
			notify(t, &p);
			write_metrics(t, "eval", &p);
		}
		if (c->log_fp8_stats && t->iteration % c->log_fp8_stats == 0 &&
		    (status = write_fp8_stats(t, diag)))
			return status;
		if (c->check_replicas_interval && t->iteration % c->check_replicas_interval == 0 &&
		    (status = check_replicas(t, diag)))
			return status;
		if (c->save && ((c->save_interval && t->iteration % c->save_interval == 0) ||
				t->iteration == c->train_iters) &&
		    (status = save(t, diag)))
			return status;
	}
	notify(t, &(f8_train_progress){.event = F8_TRAIN_EVENT_END, .first_loss = first_loss,
				       .last_loss = last_loss, .best_eval = best_eval,
				       .skipped_iters = t->skipped_iters});
	return F8_OK;
}

static int64_t count_parameters(const trainer *t) {
	int64_t n = 0;
	for (uint32_t i = 0; i < t->graph->n_inputs; i++)
		if (t->graph->values[t->graph->inputs[i]].role == F8_ROLE_PARAMETER)
			n += (int64_t)(f8_executor_view(t->executor, t->graph->inputs[i])->n_bytes /
				       f8_dtype_get_info(t->graph->values[t->graph->inputs[i]].type.dtype)->bytes);
	return n;
}

f8_status f8_train_run(const f8_train_config *config, f8_train_callback callback, void *user,
		       f8_diag *diag) {
	trainer t = {.config = config, .callback = callback, .user = user};
	clock_gettime(CLOCK_MONOTONIC, &t.start);
	f8_status status = f8_train_check_config(config, diag);
	if (!status)
		status = f8_dist_set_timeout(config->dist, config->distributed_timeout_minutes * 60,
					     diag);
	if (!status)
		status = set_up_model(&t, diag);
	if (!status)
		status = set_up_data(&t, diag);
	if (!status)
		status = set_up_pipeline(&t, diag);
	// One outcome for every rank: a rank that could not set up (a stage short of memory for
	// its micro-batches in flight, a data file it cannot read) stops the others here, rather
	// than leaving them waiting for it in the first step's collectives.
	if (config->dist && f8_dist_world(config->dist) > 1)
		status = f8_dist_agree(config->dist, (1u << F8_MESH_AXIS_COUNT) - 1, status,
				       "set up the run", diag);
	if (!status && config->load) {
		f8_checkpoint_info info = {.setting_keys = setting_keys,
					   .setting_values = t.setting_values,
					   .n_settings = N_SETTINGS, .dist = config->dist};
		status = f8_checkpoint_load(config->load, t.executor, &info, diag);
		f8_value_id iteration = f8_graph_find_value(t.graph, "iteration", 9);
		double counted = iteration == F8_NONE ? NAN : scalar(&t, iteration);
		if (!status && counted != (double)(info.iteration - info.skipped_iters))
			status = f8_diag_set(diag, F8_ERR_INVALID, "the checkpoint in %s says iteration "
					     "%lld with %lld skipped, but its optimizer state counts "
					     "%.0f steps taken", config->load,
					     (long long)info.iteration, (long long)info.skipped_iters,
					     counted);
		if (!status) {
			t.iteration = info.iteration;
			t.skipped_iters = info.skipped_iters;
			t.consumed_tokens = info.consumed_tokens;
			t.train_sampler.state = info.sampler_state;
		}
	}
	if (!status && config->metrics && t.leader &&
	    !(t.metrics = fopen(config->metrics, config->load ? "a" : "w")))
		status = f8_diag_set(diag, F8_ERR_IO, "cannot open the metrics file %s: %s",
				     config->metrics, strerror(errno));
	if (!status) {
		notify(&t, &(f8_train_progress){.event = F8_TRAIN_EVENT_START,
						.parameters = count_parameters(&t)});
		status = write_fp8_slots(&t, diag);
		if (!status)
			status = loop(&t, diag);
	}
	if (t.metrics && fclose(t.metrics) != 0 && !status)
		status = f8_diag_set(diag, F8_ERR_IO, "cannot write the metrics file %s",
				     config->metrics);
	f8_rt_scaling_tables_free(t.tables, t.n_tables);
	f8_tokens_destroy(&t.data);
	f8_executor_destroy(t.executor);
	f8_rt_tensor_destroy(&t.token_batch);
	f8_rt_tensor_destroy(&t.label_batch);
	for (uint32_t c = 0; c < t.n_flight; c++) {
		f8_rt_tensor_destroy(&t.flight_tokens[c]);
		f8_rt_tensor_destroy(&t.flight_labels[c]);
	}
	f8_free(t.flight_tokens);
	f8_free(t.runs);
	f8_free(t.chunk_of);
	f8_free(t.flight_labels);
	f8_rt_tensor_destroy(&t.fixed_batch[0]);
	f8_rt_tensor_destroy(&t.fixed_batch[1]);
	f8_rt_tensor_destroy(&t.scalar_f32);
	f8_rt_tensor_destroy(&t.scalar_i64);
	return status;
}
