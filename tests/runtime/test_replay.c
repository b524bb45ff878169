/*
 * The executor's side of the replay contract (runtime/backend.h, run_begin and run_end), with a
 * recording backend: a wrapper over a CPU backend that forwards every call and, as the CUDA
 * backend does with CUDA graphs, runs a key's first run as it comes, records the calls of its
 * second, and from the third on answers run_begin by making the recorded calls itself, with the
 * views as they were when it recorded them (the addresses a CUDA graph bakes in):
 *   (a) gpt-tiny's FP8 delayed-scaling step, 5 iterations of cast, 2 micro-batches of fwd|bwd
 *       and opt, each followed by an evaluation (cast, then 3 fwd, scaling frozen), gives bit
 *       for bit the same loss, gradient accumulators, parameters, moments and scaling state
 *       after every run as the same training on a plain CPU backend; every key but the first
 *       two runs of each is replayed, the executor makes no backend call in a replayed run and
 *       no run_end after one, and the views a replay finds are those it recorded;
 *   (b) the keys: cast, fwd|bwd and opt each their phase mask; the evaluation's cast and fwd
 *       the same with F8_RUN_KEY_FROZEN;
 *   (c) an executor that keeps every value, and one on a graph without slab offsets, never
 *       call run_begin; a planned executor back from keep_all replays on the views it had;
 *   (d) a backend call that fails while the run is recorded fails the run and makes the
 *       executor call run_end with issued false; the next run of the key records anew.
 * The tokens come from a seed drawn from the clock and printed; F8_TEST_SEED=N repeats a run.
 * Usage: test_replay MODEL.json
 */
#include <math.h>   // isfinite
#include <stdio.h>  // printf, snprintf
#include <stdlib.h> // getenv, strtoul
#include <string.h> // memcmp, memcpy, strlen, strstr
#include <time.h>   // time

#include "ir/alloc.h"            // f8_calloc, f8_realloc, f8_free
#include "ir/text.h"             // f8_text_parse
#include "passes/pipeline.h"     // f8_pipeline_run
#include "passes/precision.h"    // f8_fp8_options, f8_fp8_options_default
#include "runtime/cpu/backend.h" // f8_cpu_backend_create
#include "runtime/executor.h"    // f8_executor_run, f8_executor_freeze_scaling
#include "runtime/parameters.h"  // f8_rt_parameters_init
#include "tools/compile.h"       // f8_tool_compile_training
#include "tests/test_support.h"  // CHECK, test_finish

enum { MAX_KEYS = 16, MAX_BEGINS = 64 };

/* ---- The recording backend -------------------------------------------------------------- */

typedef enum call_kind { CALL_GROUP, CALL_NODE, CALL_COLLECTIVE } call_kind;

typedef struct call {
	call_kind kind;
	uint32_t id;       // the group, or the node
	f8_mesh_axis axis; // CALL_COLLECTIVE's
} call;

/* A key's runs: the calls of its second run, once it ended with every call issued. */
typedef struct recording {
	uint32_t key;
	uint32_t runs;                // begun so far
	bool complete;                // replayed from now on
	call *calls;                  // (n_calls)
	uint32_t n_calls, cap_calls;
	const f8_tensor_view *views;  // the executor's array the recorded calls were given
	f8_tensor_view *views_then;   // (n_values) its contents then, which a replay runs on
} recording;

typedef struct recorder {
	f8_backend base; // first: the executor reaches the interface through it
	f8_backend *inner;
	uint32_t n_values; // of the prepared graph
	recording recordings[MAX_KEYS];
	uint32_t n_recordings;
	recording *capturing;  // between run_begin and run_end of a key's recorded run
	bool in_replayed_run;  // from run_begin answering replayed to synchronize
	// What the checks read.
	uint32_t keys[MAX_BEGINS]; // run_begin's keys, in order (the first MAX_BEGINS)
	uint32_t begins, ends, ends_not_issued, replays;
	uint32_t calls;             // run_group, run_node and run_collective, the executor's
	uint32_t calls_in_replayed; // of those, made in a replayed run: must stay 0
	uint32_t ends_in_replayed;  // run_end after run_begin answered replayed: must stay 0
	uint32_t views_moved;       // a replay found a view other than recorded
	uint32_t pointer_moved;     // a recorded call got another views array than the first
	uint32_t wrong_end_key;     // run_end's key is not run_begin's
	uint32_t fail_begin;        // nonzero: the first run_group after that run_begin fails
} recorder;

static recorder *recorder_of(f8_backend *backend) {
	return (recorder *)backend;
}

static void drop_recordings(recorder *r) {
	for (uint32_t i = 0; i < r->n_recordings; i++) {
		f8_free(r->recordings[i].calls);
		f8_free(r->recordings[i].views_then);
	}
	memset(r->recordings, 0, sizeof r->recordings);
	r->n_recordings = 0;
	r->capturing = NULL;
}

/* A prepare starts another executor: its views are others (the CUDA backend drops its graphs
 * in prepare for the same reason). */
static f8_status rec_prepare(f8_backend *backend, const f8_graph *graph,
			     const int64_t *symbol_values, f8_diag *diag) {
	recorder *r = recorder_of(backend);
	drop_recordings(r);
	r->n_values = graph->n_values;
	return r->inner->interface->prepare(r->inner, graph, symbol_values, diag);
}

static void mirror_bytes(recorder *r) {
	r->base.allocated_bytes = r->inner->allocated_bytes;
	r->base.peak_bytes = r->inner->peak_bytes;
}

static f8_status rec_buffer_create(f8_backend *backend, uint64_t n_bytes, f8_buffer **out,
				   f8_diag *diag) {
	recorder *r = recorder_of(backend);
	f8_status status = r->inner->interface->buffer_create(r->inner, n_bytes, out, diag);
	mirror_bytes(r);
	return status;
}

static void rec_buffer_destroy(f8_backend *backend, f8_buffer *buffer) {
	recorder *r = recorder_of(backend);
	r->inner->interface->buffer_destroy(r->inner, buffer);
	mirror_bytes(r);
}

static f8_status rec_upload(f8_backend *backend, const f8_tensor_view *to, const void *from,
			    f8_diag *diag) {
	recorder *r = recorder_of(backend);
	return r->inner->interface->upload(r->inner, to, from, diag);
}

static f8_status rec_download(f8_backend *backend, const f8_tensor_view *from, void *to,
			      f8_diag *diag) {
	recorder *r = recorder_of(backend);
	return r->inner->interface->download(r->inner, from, to, diag);
}

static f8_status rec_zero(f8_backend *backend, const f8_tensor_view *view, f8_diag *diag) {
	recorder *r = recorder_of(backend);
	return r->inner->interface->zero(r->inner, view, diag);
}

/* Notes a call the executor makes (into the recording while one is made), and fails the
 * injected one. */
static f8_status note_call(recorder *r, call c, const f8_tensor_view *views, f8_diag *diag) {
	r->calls++;
	r->calls_in_replayed += r->in_replayed_run;
	if (r->fail_begin && r->begins == r->fail_begin && c.kind == CALL_GROUP) {
		r->fail_begin = 0;
		return f8_diag_set(diag, F8_ERR_INVALID, "injected failure of group %u", c.id);
	}
	recording *rec = r->capturing;
	if (!rec)
		return F8_OK;
	if (!rec->views) {
		rec->views = views;
		if (!rec->views_then)
			rec->views_then = f8_calloc(r->n_values ? r->n_values : 1, sizeof *views);
		if (!rec->views_then)
			return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
		memcpy(rec->views_then, views, r->n_values * sizeof *views);
	}
	r->pointer_moved += views != rec->views;
	if (rec->n_calls == rec->cap_calls) {
		uint32_t cap = rec->cap_calls ? 2 * rec->cap_calls : 64;
		call *grown = f8_realloc(rec->calls, cap * sizeof *grown);
		if (!grown)
			return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
		rec->calls = grown;
		rec->cap_calls = cap;
	}
	rec->calls[rec->n_calls++] = c;
	return F8_OK;
}

static f8_status rec_run_group(f8_backend *backend, uint32_t group, const f8_tensor_view *views,
			       f8_diag *diag) {
	recorder *r = recorder_of(backend);
	f8_status status = note_call(r, (call){.kind = CALL_GROUP, .id = group}, views, diag);
	return status ? status : r->inner->interface->run_group(r->inner, group, views, diag);
}

static f8_status rec_run_node(f8_backend *backend, f8_node_id node, const f8_tensor_view *views,
			      f8_diag *diag) {
	recorder *r = recorder_of(backend);
	f8_status status = note_call(r, (call){.kind = CALL_NODE, .id = node}, views, diag);
	return status ? status : r->inner->interface->run_node(r->inner, node, views, diag);
}

static f8_status rec_run_collective(f8_backend *backend, f8_node_id node, f8_mesh_axis axis,
				    const f8_tensor_view *views, f8_diag *diag) {
	recorder *r = recorder_of(backend);
	call c = {.kind = CALL_COLLECTIVE, .id = node, .axis = axis};
	f8_status status = note_call(r, c, views, diag);
	return status ? status
		      : r->inner->interface->run_collective(r->inner, node, axis, views, diag);
}

/* Field by field: the padding of a view is no part of it. */
static bool same_view(const f8_tensor_view *a, const f8_tensor_view *b) {
	if (a->buffer != b->buffer || a->offset != b->offset || a->n_bytes != b->n_bytes ||
	    a->dtype != b->dtype || a->rank != b->rank)
		return false;
	for (int i = 0; i < a->rank; i++)
		if (a->dims[i] != b->dims[i])
			return false;
	return true;
}

/* The recorded calls, on the views as they were recorded: what a CUDA graph launch does. */
static f8_status replay(recorder *r, const recording *rec, f8_diag *diag) {
	for (uint32_t v = 0; rec->views && v < r->n_values; v++)
		r->views_moved += !same_view(&rec->views[v], &rec->views_then[v]);
	const f8_backend_interface *inner = r->inner->interface;
	f8_status status = F8_OK;
	for (uint32_t i = 0; !status && i < rec->n_calls; i++) {
		call c = rec->calls[i];
		if (c.kind == CALL_GROUP)
			status = inner->run_group(r->inner, c.id, rec->views_then, diag);
		else if (c.kind == CALL_NODE)
			status = inner->run_node(r->inner, c.id, rec->views_then, diag);
		else
			status = inner->run_collective(r->inner, c.id, c.axis, rec->views_then, diag);
	}
	return status;
}

static f8_status rec_run_begin(f8_backend *backend, uint32_t key, bool *replayed,
			       f8_diag *diag) {
	recorder *r = recorder_of(backend);
	*replayed = false;
	if (r->begins < MAX_BEGINS)
		r->keys[r->begins] = key;
	r->begins++;
	recording *rec = NULL;
	for (uint32_t i = 0; i < r->n_recordings && !rec; i++)
		if (r->recordings[i].key == key)
			rec = &r->recordings[i];
	if (!rec && r->n_recordings == MAX_KEYS)
		return F8_OK; // more kinds of run than a step has: run as they come
	if (!rec) {
		rec = &r->recordings[r->n_recordings++];
		rec->key = key;
	}
	rec->runs++;
	if (rec->complete) {
		f8_status status = replay(r, rec, diag);
		*replayed = !status;
		r->in_replayed_run = *replayed;
		r->replays += *replayed;
		return status;
	}
	if (rec->runs >= 2) { // the first runs as it comes, as the CUDA backend's does
		rec->n_calls = 0;
		rec->views = NULL;
		r->capturing = rec;
	}
	return F8_OK;
}

static f8_status rec_run_end(f8_backend *backend, uint32_t key, bool issued, f8_diag *diag) {
	(void)diag;
	recorder *r = recorder_of(backend);
	r->ends++;
	r->ends_in_replayed += r->in_replayed_run;
	r->ends_not_issued += !issued;
	recording *rec = r->capturing;
	r->capturing = NULL;
	if (rec) {
		r->wrong_end_key += rec->key != key;
		rec->complete = issued; // a run with a failed call is dropped
	}
	return F8_OK;
}

static f8_status rec_synchronize(f8_backend *backend, f8_diag *diag) {
	recorder *r = recorder_of(backend);
	r->in_replayed_run = false;
	return r->inner->interface->synchronize(r->inner, diag);
}

static void rec_destroy(f8_backend *backend) {
	recorder *r = recorder_of(backend);
	drop_recordings(r);
	f8_backend_destroy(r->inner);
	f8_free(r);
}

static const f8_backend_interface recorder_interface = {
	.name = "recording-cpu",
	.prepare = rec_prepare,
	.buffer_create = rec_buffer_create,
	.buffer_destroy = rec_buffer_destroy,
	.upload = rec_upload,
	.download = rec_download,
	.zero = rec_zero,
	.run_group = rec_run_group,
	.run_node = rec_run_node,
	.run_collective = rec_run_collective,
	.run_begin = rec_run_begin,
	.run_end = rec_run_end,
	.synchronize = rec_synchronize,
	.destroy = rec_destroy,
};

/* The CPU backends of this test: generated kernels for the groups, as f8c train runs them. */
static f8_backend *cpu_backend(void) {
	f8_backend *backend = NULL;
	f8_diag diag;
	f8_diag_clear(&diag);
	if (f8_cpu_backend_create(F8_CPU_KERNELS_GENERATED, &backend, &diag))
		f8_diag_print(&diag, stdout);
	return backend;
}

static recorder *recorder_create(void) {
	recorder *r = f8_calloc(1, sizeof *r);
	if (r && !(r->inner = cpu_backend())) {
		f8_free(r);
		r = NULL;
	}
	if (r)
		r->base.interface = &recorder_interface;
	return r;
}

static const recording *recording_for(const recorder *r, uint32_t key) {
	for (uint32_t i = 0; i < r->n_recordings; i++)
		if (r->recordings[i].key == key)
			return &r->recordings[i];
	return NULL;
}

/* ---- A training step's executor, and its data --------------------------------------------- */

static const uint32_t CAST = F8_PHASE_BIT(F8_PHASE_CAST), FWD = F8_PHASE_BIT(F8_PHASE_FWD),
		      FWD_BWD = F8_PHASE_BIT(F8_PHASE_FWD) | F8_PHASE_BIT(F8_PHASE_BWD),
		      OPT = F8_PHASE_BIT(F8_PHASE_OPT);

enum { MICRO_BATCH = 2, SEQ = 16, VOCAB = 256, ITERATIONS = 5, MICRO_BATCHES = 2,
       EVAL_BATCHES = 3, RUNS_PER_ITERATION = 1 + MICRO_BATCHES + 1 + 1 + EVAL_BATCHES };

static unsigned seed;

/* gpt-tiny's training step with FP8 delayed scaling, compiled as f8c train compiles it. */
static f8_graph *compile_step(const char *model) {
	f8_fp8_options fp8 = f8_fp8_options_default();
	fp8.recipe = F8_RECIPE_DELAYED;
	fp8.amax_history_len = 4;
	fp8.target = F8_TARGET_CPU;
	f8_train_config run = {.model = model, .micro_batch_size = MICRO_BATCH,
			       .global_batch_size = MICRO_BATCH * MICRO_BATCHES,
			       .seq_length = SEQ, .train_iters = ITERATIONS, .seed = 7};
	f8_tool_compile_options compile = {.model = model, .fp8 = &fp8,
					   .optimizer = f8_training_options_default()};
	compile.optimizer.lr = 3e-3;
	f8_graph *step = NULL;
	f8_diag diag;
	f8_diag_clear(&diag);
	if (f8_tool_compile_training(&compile, &run, &step, &diag))
		f8_diag_print(&diag, stdout);
	return step;
}

static f8_value_id value_named(const f8_graph *graph, const char *name) {
	return f8_graph_find_value(graph, name, strlen(name));
}

/* The token input: the integer input that is not the labels (as runtime/train.c finds it). */
static f8_value_id token_input(const f8_graph *graph) {
	for (uint32_t i = 0; i < graph->n_inputs; i++) {
		const f8_value *value = &graph->values[graph->inputs[i]];
		if (value->role == F8_ROLE_INPUT && f8_dtype_is_integer(value->type.dtype) &&
		    graph->inputs[i] != value_named(graph, "labels"))
			return graph->inputs[i];
	}
	return F8_NONE;
}

/* An executor of `graph` on `backend`, its parameters from seed 7. The compile driver bound
 * batch and seq; a symbol left in the table is in no type, and takes 1 (runtime/train.c). */
static f8_executor *start(const f8_graph *graph, f8_backend *backend) {
	int64_t sizes[64];
	for (uint32_t s = 0; s < graph->n_symbols && s < 64; s++)
		sizes[s] = 1;
	f8_executor *executor = NULL;
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_status status = graph->n_symbols <= 64
				   ? f8_executor_create(graph, sizes, backend, &executor, &diag)
				   : f8_diag_set(&diag, F8_ERR_ARGUMENT, "too many symbols");
	if (!status)
		status = f8_rt_parameters_init(executor, NULL, 7, NULL, NULL, &diag);
	if (status) {
		f8_diag_print(&diag, stdout);
		f8_executor_destroy(executor);
		return NULL;
	}
	return executor;
}

static uint64_t mix(uint64_t x) { // splitmix64's finalizer
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* Batch `batch` of random tokens and labels into the executors (n of them). */
static void feed(f8_executor **executors, int n, uint64_t batch) {
	const f8_graph *graph = f8_executor_graph(executors[0]);
	f8_value_id ids[2] = {token_input(graph), value_named(graph, "labels")};
	for (int which = 0; which < 2; which++) {
		f8_rt_tensor host;
		int64_t dims[2] = {MICRO_BATCH, SEQ};
		CHECK(f8_rt_tensor_create(F8_DTYPE_I64, 2, dims, &host, NULL) == F8_OK);
		for (int64_t i = 0; i < MICRO_BATCH * SEQ; i++)
			((int64_t *)host.data)[i] =
				(int64_t)(mix(mix(seed) ^ mix(batch * 2 + which) ^ (uint64_t)i) % VOCAB);
		for (int e = 0; e < n; e++)
			CHECK(f8_executor_write(executors[e], ids[which], &host, NULL) == F8_OK);
		f8_rt_tensor_destroy(&host);
	}
}

/* Whether value v reads the same from both executors, bit for bit, or from neither. */
static bool same_value(const f8_executor *a, const f8_executor *b, f8_value_id v) {
	bool has = f8_executor_has(a, v);
	if (has != f8_executor_has(b, v))
		return false;
	if (!has)
		return true;
	f8_rt_tensor x, y;
	bool same = !f8_executor_read(a, v, &x, NULL) && !f8_executor_read(b, v, &y, NULL) &&
		    f8_rt_tensor_same_type(&x, &y) && x.n_bytes == y.n_bytes &&
		    (!x.n_bytes || memcmp(x.data, y.data, x.n_bytes) == 0);
	f8_rt_tensor_destroy(&x);
	f8_rt_tensor_destroy(&y);
	return same;
}

/* Every leaf (parameters, gradient accumulators, moments, scaling state, weight caches) and
 * every output the same on both; the first few that differ named. */
static void check_same(const f8_executor *plain, const f8_executor *replaying, const char *after) {
	const f8_graph *graph = f8_executor_graph(plain);
	uint32_t differing = 0;
	for (uint32_t pass = 0; pass < 2; pass++) {
		const f8_value_id *ids = pass ? graph->outputs : graph->inputs;
		uint32_t n = pass ? graph->n_outputs : graph->n_inputs;
		for (uint32_t i = 0; i < n; i++) {
			if (same_value(plain, replaying, ids[i]))
				continue;
			if (differing++ < 4)
				printf("  after %s: %%%s differs\n", after, graph->values[ids[i]].name);
		}
	}
	CHECK(differing == 0);
}

/* One run of both executors, which must both succeed. */
static void run_both(f8_executor *plain, f8_executor *replaying, uint32_t phases,
		     const char *what) {
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_status a = f8_executor_run(plain, phases, &diag);
	if (a)
		f8_diag_print(&diag, stdout);
	f8_status b = f8_executor_run(replaying, phases, &diag);
	if (b)
		f8_diag_print(&diag, stdout);
	CHECK(a == F8_OK && b == F8_OK);
	check_same(plain, replaying, what);
}

/* The first leaf of `role`, read (its bytes into *out, which the caller destroys). */
static bool read_leaf_of(const f8_executor *executor, f8_role role, f8_rt_tensor *out) {
	const f8_graph *graph = f8_executor_graph(executor);
	*out = (f8_rt_tensor){0};
	for (uint32_t i = 0; i < graph->n_inputs; i++)
		if (graph->values[graph->inputs[i]].role == role)
			return f8_executor_read(executor, graph->inputs[i], out, NULL) == F8_OK;
	return false;
}

/* Whether two reads of a leaf hold other bytes. */
static bool changed(const f8_rt_tensor *before, const f8_rt_tensor *after) {
	return before->n_bytes == after->n_bytes && after->n_bytes &&
	       memcmp(before->data, after->data, after->n_bytes) != 0;
}

/* ---- The checks ------------------------------------------------------------------------------ */

/* (a) and (b): the training, in lockstep with a plain CPU backend's. */
static void test_training_replayed(const f8_graph *step, recorder *r, f8_executor **kept) {
	f8_backend *plain_backend = cpu_backend();
	f8_executor *plain = plain_backend ? start(step, plain_backend) : NULL;
	f8_executor *replaying = start(step, &r->base);
	CHECK(plain && replaying);
	if (!plain || !replaying) {
		f8_executor_destroy(plain);
		f8_executor_destroy(replaying);
		f8_backend_destroy(plain_backend);
		return;
	}
	f8_rt_tensor history_before, history_after, weight_before, weight_after;
	CHECK(read_leaf_of(replaying, F8_ROLE_AMAX_HISTORY, &history_before));
	CHECK(read_leaf_of(replaying, F8_ROLE_PARAMETER, &weight_before));
	f8_executor *both[2] = {plain, replaying};
	double first_loss = 0, last_loss = 0;
	for (int iteration = 1; iteration <= ITERATIONS; iteration++) {
		char what[64];
		snprintf(what, sizeof what, "iteration %d cast", iteration);
		run_both(plain, replaying, CAST, what);
		for (int m = 0; m < MICRO_BATCHES; m++) {
			feed(both, 2, (uint64_t)(iteration * MICRO_BATCHES + m));
			snprintf(what, sizeof what, "iteration %d fwd|bwd %d", iteration, m);
			run_both(plain, replaying, FWD_BWD, what); // the accumulators compared here
			double loss = f8_executor_read_scalar(replaying, value_named(step, "loss"));
			first_loss = iteration == 1 && m == 0 ? loss : first_loss;
			last_loss = loss;
		}
		snprintf(what, sizeof what, "iteration %d opt", iteration);
		run_both(plain, replaying, OPT, what);
		// An evaluation: its own keys, and it must leave the scaling state on both alone.
		f8_executor_freeze_scaling(plain, true);
		f8_executor_freeze_scaling(replaying, true);
		snprintf(what, sizeof what, "iteration %d evaluation", iteration);
		run_both(plain, replaying, CAST, what);
		for (int i = 0; i < EVAL_BATCHES; i++) {
			feed(both, 2, 1000000u + (uint64_t)i);
			run_both(plain, replaying, FWD, what);
		}
		f8_executor_freeze_scaling(plain, false);
		f8_executor_freeze_scaling(replaying, false);
		check_same(plain, replaying, what);
	}
	printf("(a) loss %.9g at the first micro-batch, %.9g at the last; %u runs, %u replayed\n",
	       first_loss, last_loss, r->begins, r->replays);
	// The weights and the scaling state moved (on random tokens the loss need not fall): the
	// comparisons above are not of state that nothing touched.
	CHECK(isfinite(first_loss) && isfinite(last_loss) && first_loss != last_loss);
	CHECK(read_leaf_of(replaying, F8_ROLE_AMAX_HISTORY, &history_after));
	CHECK(read_leaf_of(replaying, F8_ROLE_PARAMETER, &weight_after));
	CHECK(changed(&history_before, &history_after) && changed(&weight_before, &weight_after));
	f8_rt_tensor_destroy(&history_before);
	f8_rt_tensor_destroy(&history_after);
	f8_rt_tensor_destroy(&weight_before);
	f8_rt_tensor_destroy(&weight_after);

	// Every run was bracketed, and every run of a key after its second replayed.
	CHECK(r->begins == ITERATIONS * RUNS_PER_ITERATION);
	CHECK(r->replays == (ITERATIONS - 2) * 3 /* cast, opt, the evaluation's cast */ +
				    (ITERATIONS * MICRO_BATCHES - 2) + (ITERATIONS * EVAL_BATCHES - 2));
	CHECK(r->ends + r->replays == r->begins && r->ends_not_issued == 0);
	CHECK(r->calls_in_replayed == 0 && r->ends_in_replayed == 0);
	CHECK(r->views_moved == 0 && r->pointer_moved == 0 && r->wrong_end_key == 0);
	const recording *fwd_bwd = recording_for(r, FWD_BWD);
	CHECK(fwd_bwd && fwd_bwd->complete && fwd_bwd->n_calls > 0 &&
	      fwd_bwd->runs == ITERATIONS * MICRO_BATCHES);

	// (b) The first iteration's keys: each phase mask, and the evaluation's frozen.
	const uint32_t expected[] = {CAST, FWD_BWD, FWD_BWD, OPT, CAST | F8_RUN_KEY_FROZEN,
				     FWD | F8_RUN_KEY_FROZEN, FWD | F8_RUN_KEY_FROZEN,
				     FWD | F8_RUN_KEY_FROZEN};
	_Static_assert(sizeof expected / sizeof expected[0] == RUNS_PER_ITERATION,
		       "the keys of one iteration's runs");
	for (uint32_t i = 0; i < sizeof expected / sizeof expected[0]; i++) {
		if (r->keys[i] != expected[i])
			printf("  run %u: key %#x, expected %#x\n", i, r->keys[i], expected[i]);
		CHECK(r->keys[i] == expected[i]);
	}
	CHECK(r->n_recordings == 5);
	printf("(b) keys: cast %#x, fwd|bwd %#x, opt %#x, evaluation %#x and %#x\n", r->keys[0],
	       r->keys[1], r->keys[3], r->keys[4], r->keys[5]);
	f8_executor_destroy(plain);
	f8_backend_destroy(plain_backend);
	*kept = replaying;
}

/* (c) with keep_all: no bracket; back to the slab plan, a replay on unchanged views. */
static void test_keep_all_unbracketed(const f8_graph *step, recorder *r, f8_executor *executor) {
	uint32_t begins = r->begins, calls = r->calls, replays = r->replays;
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_executor_keep_all(executor, true);
	CHECK(f8_executor_run(executor, CAST, &diag) == F8_OK);
	feed(&executor, 1, 7);
	CHECK(f8_executor_run(executor, FWD_BWD, &diag) == F8_OK);
	CHECK(r->begins == begins && r->calls > calls);
	// keep_all keeps the inner values: one the slab plan never stores is readable now.
	bool kept_inner = false;
	for (uint32_t v = 0; v < step->n_values && !kept_inner; v++)
		kept_inner = step->values[v].producer != F8_NONE && step->values[v].buffer_offset < 0 &&
			     f8_executor_has(executor, v);
	CHECK(kept_inner);
	f8_executor_keep_all(executor, false);
	CHECK(f8_executor_run(executor, CAST, &diag) == F8_OK);
	CHECK(r->begins == begins + 1 && r->replays == replays + 1 && r->views_moved == 0);
	printf("(c) keep_all: %u calls, no run_begin; then cast replayed on the views recorded\n",
	       r->calls - calls);
}

/* (c) a graph the schedule pass never planned: no slab, no bracket. */
static void test_unplanned_unbracketed(recorder *r) {
	const char *text = "graph g {\n"
			   "  input %x : f32[4]\n"
			   "  param %w : f32[4]\n"
			   "  %y = Mul(%x, %w)\n"
			   "  %loss = ReduceSum(%y) {keepdims=0}\n"
			   "  %w_next = Sub(%w, %y) phase=opt\n"
			   "  output %loss\n"
			   "  update %w <- %w_next\n"
			   "}\n";
	f8_graph *graph = NULL;
	f8_diag diag;
	f8_diag_clear(&diag);
	if (f8_text_parse(text, strlen(text), "test", &graph, &diag) ||
	    f8_pipeline_run(graph, "canonicalize", true, &diag))
		f8_diag_print(&diag, stdout);
	f8_executor *executor = NULL;
	CHECK(graph && f8_executor_create(graph, NULL, &r->base, &executor, &diag) == F8_OK);
	if (!executor) {
		f8_graph_destroy(graph);
		return;
	}
	CHECK(!f8_executor_memory_of(executor).planned);
	uint32_t begins = r->begins, calls = r->calls;
	for (int i = 0; i < 3; i++)
		CHECK(f8_executor_run(executor, F8_PHASES_ALL, &diag) == F8_OK);
	CHECK(r->begins == begins && r->calls >= calls + 3 * 3);
	f8_executor_destroy(executor);
	f8_graph_destroy(graph);
}

/* (d) a failed call while a key's run is recorded. */
static void test_failure_while_recording(const f8_graph *step, recorder *r) {
	f8_executor *executor = start(step, &r->base);
	CHECK(executor != NULL);
	if (!executor)
		return;
	f8_diag diag;
	f8_diag_clear(&diag);
	feed(&executor, 1, 11);
	CHECK(f8_executor_run(executor, FWD, &diag) == F8_OK); // runs as it comes
	uint32_t ends = r->ends, not_issued = r->ends_not_issued;
	r->fail_begin = r->begins + 1; // the recorded one
	f8_status status = f8_executor_run(executor, FWD, &diag);
	printf("(d) the recorded run failed: %s\n", diag.message);
	CHECK(status == F8_ERR_INVALID && strstr(diag.message, "injected failure"));
	CHECK(r->fail_begin == 0); // the failure was injected, in this run
	CHECK(r->ends == ends + 1 && r->ends_not_issued == not_issued + 1);
	const recording *fwd = recording_for(r, FWD);
	CHECK(fwd && !fwd->complete && r->capturing == NULL);
	CHECK(!f8_executor_has(executor, value_named(step, "loss")));
	// The failing group comes before any update source of the fwd run is made, so the
	// executor holds its state intact (no F8_ERR_INVALID from here on): the next run of the
	// key records anew, since the backend dropped the failed recording, and the one after
	// replays.
	f8_diag_clear(&diag);
	status = f8_executor_run(executor, FWD, &diag);
	if (status)
		f8_diag_print(&diag, stdout);
	CHECK(status == F8_OK && fwd->complete && r->ends_not_issued == not_issued + 1);
	uint32_t replays = r->replays;
	CHECK(f8_executor_run(executor, FWD, &diag) == F8_OK && r->replays == replays + 1);
	CHECK(f8_executor_read_scalar(executor, value_named(step, "loss")) > 0);
	CHECK(r->calls_in_replayed == 0 && r->ends_in_replayed == 0 && r->views_moved == 0);
	f8_executor_destroy(executor);
}

int main(int argc, char **argv) {
	if (argc != 2) {
		printf("usage: test_replay MODEL.json\n");
		return 2;
	}
	const char *fixed = getenv("F8_TEST_SEED");
	seed = fixed ? (unsigned)strtoul(fixed, NULL, 10) : (unsigned)time(NULL);
	printf("seed %u (F8_TEST_SEED=%u repeats this run)\n", seed, seed);
	f8_graph *step = compile_step(argv[1]);
	recorder *r = recorder_create();
	CHECK(step && r);
	if (!step || !r) {
		f8_graph_destroy(step);
		if (r)
			rec_destroy(&r->base);
		return test_finish();
	}
	f8_executor *trained = NULL;
	test_training_replayed(step, r, &trained);
	if (trained)
		test_keep_all_unbracketed(step, r, trained);
	f8_executor_destroy(trained);
	test_unplanned_unbracketed(r);
	test_failure_while_recording(step, r);
	f8_backend_destroy(&r->base);
	f8_graph_destroy(step);
	return test_finish();
}
