/*
 * The precision pass (passes/precision.h): one decision per GEMM, with its reason.
 */
#include "passes/precision.h" // f8_pass_precision_run, f8_fp8_options

#include <ctype.h>  // toupper
#include <stdarg.h> // va_list
#include <stdio.h>  // fprintf, vsnprintf
#include <string.h> // strcmp, strncmp, strlen

#include "ir/alloc.h" // f8_calloc, f8_free
#include "ir/arena.h" // f8_arena_strdup
#include "ir/gemm.h"  // f8_gemm_kind_of, f8_gemm_operand_name
#include "ir/text.h"  // f8_dim_format

#define NAME_TABLE(kind, LIST, COUNT)                                                      \
	static const char *const kind##_names[] = {LIST(NAME_OF)};                          \
	static_assert(sizeof kind##_names / sizeof kind##_names[0] == COUNT, "one name each"); \
	const char *f8_##kind##_name(f8_##kind value) {                                     \
		return (unsigned)value < COUNT ? kind##_names[value] : "?";                 \
	}                                                                                   \
	bool f8_##kind##_from_name(const char *name, f8_##kind *out) {                      \
		for (int i = 0; i < COUNT; i++)                                             \
			if (strcmp(kind##_names[i], name) == 0) {                           \
				*out = (f8_##kind)i;                                        \
				return true;                                                \
			}                                                                   \
		return false;                                                               \
	}
#define NAME_OF(e, name) name,
NAME_TABLE(fp8_format, F8_FP8_FORMAT_LIST, F8_FP8_FORMAT_COUNT)
NAME_TABLE(amax_algo, F8_AMAX_ALGO_LIST, F8_AMAX_ALGO_COUNT)
#undef NAME_OF
#undef NAME_TABLE

f8_fp8_options f8_fp8_options_default(void) {
	return (f8_fp8_options){
		.format = F8_FP8_FORMAT_HYBRID,
		.recipe = F8_RECIPE_DELAYED,
		// Megatron-LM's defaults, whose option names f8c takes: a history of 1, its newest
		// amax. TransformerEngine's DelayedScaling default (1024, max) kept the scales of the
		// early steps' large amaxes while gpt2-124m's activations shrank, and trailed --bf16
		// by 3.5% at 1000 iterations where these tracked it (tools/gpu_checks.md, 2026-12-06).
		.amax_history_len = 1,
		.amax_algo = F8_AMAX_ALGO_MOST_RECENT,
		.margin = 0,
		.wgrad = true,
		.target = F8_TARGET_SM_90,
	};
}

f8_status f8_fp8_options_check(const f8_fp8_options *o, f8_diag *diag) {
	if ((unsigned)o->format >= F8_FP8_FORMAT_COUNT)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "--fp8-format must be hybrid or e4m3");
	if (o->recipe == F8_RECIPE_NONE || o->recipe == F8_RECIPE_MODEL ||
	    (unsigned)o->recipe >= F8_RECIPE_COUNT)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "--fp8-recipe must be delayed, current, "
				   "rowwise, block or mxfp8");
	if (o->amax_history_len < 1) {
		f8_diag_set(diag, F8_ERR_ARGUMENT, "--fp8-amax-history-len must be at least 1, "
			    "not %d", o->amax_history_len);
		f8_diag_hint(diag, "1 scales by the last amax only; TransformerEngine's default "
			     "is 1024");
		return F8_ERR_ARGUMENT;
	}
	if (o->margin < 0 || o->margin > 64)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "--fp8-margin must be in 0..64, not %d",
				   o->margin);
	if (o->layers_at_start_high < 0 || o->layers_at_end_high < 0)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "--num-layers-at-start-in-bf16 and "
				   "--num-layers-at-end-in-bf16 must not be negative");
	if (!(o->cv_threshold >= 0))
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "--fp8-cv-threshold must be >= 0");
	if (o->cv_threshold > 0 && !o->calibration) {
		f8_diag_set(diag, F8_ERR_ARGUMENT, "--fp8-cv-threshold needs --calibration");
		f8_diag_hint(diag, "make the statistics with f8c calibrate MODEL --data TOKENS "
			     "-o STATS.json");
		return F8_ERR_ARGUMENT;
	}
	if ((unsigned)o->target >= F8_TARGET_COUNT)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "--target must be cpu, sm_90 or sm_100");
	return F8_OK;
}

const char *f8_name_upper(const char *name, char *buffer, size_t size) {
	size_t i = 0;
	for (; name[i] && i + 1 < size; i++)
		buffer[i] = (char)toupper((unsigned char)name[i]);
	if (size)
		buffer[i] = '\0';
	return buffer;
}

bool f8_glob_match(const char *pattern, const char *text) {
	const char *star = NULL, *resume = NULL;
	while (*text) {
		if (*pattern == '?' || (*pattern && *pattern != '*' && *pattern == *text)) {
			pattern++, text++;
		} else if (*pattern == '*') {
			star = pattern++;
			resume = text;
		} else if (star) {
			pattern = star + 1;
			text = ++resume;
		} else {
			return false;
		}
	}
	while (*pattern == '*')
		pattern++;
	return *pattern == '\0';
}

enum { REASON_MAX = 384 };

/* One GEMM of the program and what is decided for it. */
typedef struct gemm {
	f8_node_id node;
	bool linear;        // one of a Linear layer's GEMMs (kind is valid)
	f8_gemm_kind kind;
	const char *scope;  // never NULL: the node's scope, or its output's name
	int layer;          // the transformer layer its scope names, -1 for none
	bool router;        // of an MoE router's Linear (its logits feed a Router)
	bool gate;          // of a gate's Linear: a few outputs (N < 16) that gate through a
			    // sigmoid or softmax (Qwen2-MoE's shared_expert_gate)
	bool fp8;
	f8_recipe recipe;
	const char *rule;   // the --precision-config rule that decided it, or NULL
	char reason[REASON_MAX];
} gemm;

typedef struct planner {
	f8_graph *graph;
	const f8_fp8_options *options;
	const f8_target_table *target; // the chip's: what its FP8 GEMMs run
	f8_diag *diag;
	gemm *gemms;
	uint32_t n_gemms;
	int n_layers;          // 1 + the largest layer index of any scope
	const char *head;      // the scope of the output head, or NULL
} planner;

static void keep_high(gemm *g, const f8_graph *graph, const char *format, ...)
	__attribute__((format(printf, 3, 4)));

/* Marks g high precision with the reason "kept <DTYPE>: <format...>". */
static void keep_high(gemm *g, const f8_graph *graph, const char *format, ...) {
	const f8_node *node = &graph->nodes[g->node];
	char dtype[8];
	f8_name_upper(f8_dtype_name(graph->values[node->outputs[0]].type.dtype), dtype, sizeof dtype);
	int used = snprintf(g->reason, sizeof g->reason, "kept %s: ", dtype);
	va_list args;
	va_start(args, format);
	if (used < REASON_MAX)
		vsnprintf(g->reason + used, sizeof g->reason - (size_t)used, format, args);
	va_end(args);
	g->fp8 = false;
	g->rule = NULL;
}

/* Gathers the program's GEMMs, their kinds, scopes and layers. */
static f8_status collect(planner *p) {
	f8_graph *graph = p->graph;
	p->gemms = f8_calloc(graph->n_order ? graph->n_order : 1, sizeof *p->gemms);
	if (!p->gemms)
		return f8_diag_set(p->diag, F8_ERR_NOMEM, "out of memory");
	p->n_layers = 0;
	int first = -1; // the program's first layer
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		// An FP8Gemm the model quantized itself (fuse-patterns, QDQ) keeps its decision.
		if (node->op == F8_OP_FP8_GEMM &&
		    graph->values[node->outputs[0]].precision.recipe == F8_RECIPE_MODEL)
			continue;
		if (node->op == F8_OP_FP8_GEMM || node->op == F8_OP_QUANTIZE ||
		    node->op == F8_OP_CAST_TRANSPOSE) {
			f8_diag_set(p->diag, F8_ERR_INVALID, "the graph is already planned for FP8");
			f8_diag_set_node(p->diag, graph, graph->order[i]);
			return F8_ERR_INVALID;
		}
		if (!(f8_op_get_info(node->op)->flags & F8_OPF_GEMM))
			continue;
		gemm *g = &p->gemms[p->n_gemms++];
		g->node = graph->order[i];
		g->linear = f8_gemm_kind_of(node, &g->kind);
		g->scope = node->scope ? node->scope : graph->values[node->outputs[0]].name;
		g->layer = f8_scope_layer(g->scope, NULL);
		if (g->layer + 1 > p->n_layers)
			p->n_layers = g->layer + 1;
		if (g->layer >= 0 && (first < 0 || g->layer < first))
			first = g->layer;
	}
	// A pipeline stage holds its run of the layers, as many as every other stage's: the
	// first and last layers the policies name are the whole model's.
	int64_t stages = graph->mesh[F8_MESH_AXIS_PP];
	if (stages > 1 && first >= 0)
		p->n_layers = (int)((p->n_layers - first) * stages);
	return F8_OK;
}

/* The one input of `node` a node of the graph computes (not a leaf nor a Constant); F8_NONE
 * when it reads none or several. */
static f8_value_id computed_input(const f8_graph *graph, const f8_node *node) {
	f8_value_id found = F8_NONE;
	for (uint32_t i = 0; i < node->n_inputs; i++) {
		f8_value_id v = node->inputs[i];
		f8_node_id producer = v == F8_NONE ? F8_NONE : graph->values[v].producer;
		if (producer == F8_NONE || graph->nodes[producer].op == F8_OP_CONSTANT)
			continue;
		if (found != F8_NONE)
			return F8_NONE;
		found = v;
	}
	return found;
}

/* The output head: the forward Linear making the logits (what CrossEntropy reads, else the
 * first graph output), through what an export puts after it on one path (a Cast to f32, a
 * soft-capping's Div, Tanh and Mul). */
static void find_head(planner *p) {
	const f8_graph *graph = p->graph;
	f8_value_id logits = graph->n_outputs ? graph->outputs[0] : F8_NONE;
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		if ((node->op == F8_OP_CROSS_ENTROPY || node->op == F8_OP_CROSS_ENTROPY_SHARD) &&
		    node->phase == F8_PHASE_FWD) {
			logits = node->inputs[0];
			break;
		}
	}
	p->head = NULL;
	for (int steps = 0; logits != F8_NONE && !p->head && steps < 8; steps++) {
		for (uint32_t i = 0; i < p->n_gemms; i++) {
			const f8_node *node = &graph->nodes[p->gemms[i].node];
			if (node->outputs[0] == logits && p->gemms[i].linear &&
			    p->gemms[i].kind == F8_GEMM_KIND_FWD)
				p->head = p->gemms[i].scope;
		}
		f8_node_id producer = graph->values[logits].producer;
		if (p->head || producer == F8_NONE || f8_op_get_info(graph->nodes[producer].op)->flags &
							       F8_OPF_GEMM)
			break;
		logits = computed_input(graph, &graph->nodes[producer]);
	}
}

/* Whether `value` reaches a TopK through at most `depth` of the ops an exported router puts
 * between its logits and its choice (softmax or sigmoid gates, casts, reshapes). */
static bool feeds_top_k(const f8_graph *graph, f8_value_id value, int depth) {
	for (uint32_t j = 0; j < graph->n_order; j++) {
		const f8_node *node = &graph->nodes[graph->order[j]];
		bool reads = false;
		for (uint32_t i = 0; i < node->n_inputs && !reads; i++)
			reads = node->inputs[i] == value;
		if (!reads)
			continue;
		if (node->op == F8_OP_TOP_K)
			return true;
		bool through = node->op == F8_OP_SOFTMAX || node->op == F8_OP_SIGMOID ||
			       node->op == F8_OP_CAST || node->op == F8_OP_RESHAPE;
		if (through && depth > 0 && feeds_top_k(graph, node->outputs[0], depth - 1))
			return true;
	}
	return false;
}

/* Whether `value` is read by a Sigmoid or Softmax, directly or through a Reshape or Cast. */
static bool feeds_gate(const f8_graph *graph, f8_value_id value, int depth) {
	for (uint32_t j = 0; j < graph->n_order; j++) {
		const f8_node *node = &graph->nodes[graph->order[j]];
		if (node->n_inputs < 1 || node->inputs[0] != value)
			continue;
		if (node->op == F8_OP_SIGMOID || node->op == F8_OP_SOFTMAX)
			return true;
		if ((node->op == F8_OP_RESHAPE || node->op == F8_OP_CAST) && depth > 0 &&
		    feeds_gate(graph, node->outputs[0], depth - 1))
			return true;
	}
	return false;
}

/* The GEMMs of MoE routers' Linear layers: those of the scope of a forward Linear whose output
 * a Router reads, or, in an exported graph, a TopK (through the gate's softmax); and those of
 * gates, Linears of fewer than 16 outputs whose output is a sigmoid or softmax weight. */
static void find_routers(planner *p) {
	const f8_graph *graph = p->graph;
	for (uint32_t i = 0; i < p->n_gemms; i++) {
		const gemm *g = &p->gemms[i];
		if (!g->linear || g->kind != F8_GEMM_KIND_FWD)
			continue;
		f8_value_id logits = graph->nodes[g->node].outputs[0];
		bool read_by_router = false;
		for (uint32_t j = 0; j < graph->n_order && !read_by_router; j++) {
			const f8_node *node = &graph->nodes[graph->order[j]];
			read_by_router = node->op == F8_OP_ROUTER && node->inputs[0] == logits;
		}
		read_by_router = read_by_router || feeds_top_k(graph, logits, 3);
		const f8_shape *out = &graph->values[logits].type.shape;
		f8_dim n = out->rank ? out->dims[out->rank - 1] : f8_dim_const(1);
		bool gate = !read_by_router && f8_dim_is_const(n) && f8_dim_value(n) < 16 &&
			    feeds_gate(graph, logits, 2);
		for (uint32_t k = 0; (read_by_router || gate) && k < p->n_gemms; k++)
			if (strcmp(p->gemms[k].scope, g->scope) == 0) {
				p->gemms[k].router |= read_by_router;
				p->gemms[k].gate |= gate;
			}
	}
}

/* The FP8 format of operand `which` (0: a, 1: b) of a GEMM of `kind` under `format`. */
static f8_dtype operand_format(f8_gemm_kind kind, int which, f8_fp8_format format) {
	bool gradient = which == 0 && kind != F8_GEMM_KIND_FWD;
	return gradient && format == F8_FP8_FORMAT_HYBRID ? F8_DTYPE_E5M2 : F8_DTYPE_E4M3;
}

static bool is_grouped(const f8_node *node) {
	return node->op == F8_OP_GROUPED_LINEAR || node->op == F8_OP_GROUPED_LINEAR_WGRAD;
}

/* The problem with an MoE's grouped GEMM in FP8 under g's recipe, in `problem`; false when
 * there is none. Its operands are scaled per expert, as TransformerEngine's GroupedLinear keeps
 * one FP8 scaling state per expert GEMM: per-tensor recipes (delayed, current) only, as the
 * blocks of the others would straddle the experts' rows; and the experts' weights stored
 * (experts, N, K), as f8c's MoE layers keep them. */
static bool grouped_problem(const f8_graph *graph, const gemm *g, char *problem, size_t size) {
	const f8_node *node = &graph->nodes[g->node];
	if (!is_grouped(node))
		return false;
	if (g->recipe != F8_RECIPE_DELAYED && g->recipe != F8_RECIPE_CURRENT) {
		snprintf(problem, size, "an MoE's grouped GEMM is scaled per expert, under the "
			 "per-tensor recipes (delayed, current); the %s recipe's blocks would "
			 "straddle the experts' rows", f8_recipe_name(g->recipe));
		return true;
	}
	// A dgrad reads the weight the other way round from how it is stored (autodiff flips the
	// flag): the stored layout is (experts, K, N) where a fwd or wgrad says transpose_weight.
	bool flag = f8_node_attr_int(node, "transpose_weight", 0) != 0;
	if (g->kind == F8_GEMM_KIND_DGRAD ? !flag : flag) {
		snprintf(problem, size, "an MoE's grouped GEMM in FP8 needs the experts' weights "
			 "stored (experts, N, K); these are (experts, K, N)");
		return true;
	}
	return false;
}

/* Rules 1-3: the run's recipe; GEMMs without an FP8 form; the head; --no-fp8-wgrad. */
static void apply_defaults(planner *p) {
	const f8_fp8_options *o = p->options;
	for (uint32_t i = 0; i < p->n_gemms; i++) {
		gemm *g = &p->gemms[i];
		const f8_node *node = &p->graph->nodes[g->node];
		g->fp8 = true;
		g->recipe = o->recipe;
		char problem[200];
		if (!g->linear)
			keep_high(g, p->graph, "%s: f8c plans FP8 for Linear layers only (a product "
				  "of two activations)", f8_op_get_info(node->op)->name);
		else if (grouped_problem(p->graph, g, problem, sizeof problem))
			keep_high(g, p->graph, "%s", problem);
		else if (p->head && strcmp(g->scope, p->head) == 0 && !o->head_fp8)
			keep_high(g, p->graph, "the output head stays in high precision by default, "
				  "as in TransformerEngine recipes (--fp8-head puts it in FP8)");
		else if (g->router)
			keep_high(g, p->graph, "an MoE router's gating stays in high precision by "
				  "default, as DeepSeek-V3 and Megatron-LM keep it: its top-k choice "
				  "flips with rounding (a --precision-config rule puts it in FP8)");
		else if (g->gate)
			keep_high(g, p->graph, "a gate (a few outputs, weights through a sigmoid or "
				  "softmax) stays in high precision by default, as Megatron-LM's "
				  "shared-expert gate is a plain Linear: its N is below the 16 an FP8 "
				  "GEMM needs (a --precision-config rule puts it in FP8)");
		else if (g->kind == F8_GEMM_KIND_WGRAD && !o->wgrad)
			keep_high(g, p->graph, "wgrad in high precision by --no-fp8-wgrad");
	}
}

/* Rules 4-5: the first and last layers, --fp8-exclude. */
static f8_status apply_policy(planner *p) {
	const f8_fp8_options *o = p->options;
	for (uint32_t i = 0; i < p->n_gemms; i++) {
		gemm *g = &p->gemms[i];
		if (!g->fp8 || g->layer < 0)
			continue;
		if (g->layer < o->layers_at_start_high)
			keep_high(g, p->graph, "the first %d layer(s) in high precision by policy "
				  "(--num-layers-at-start-in-bf16 %d)", o->layers_at_start_high,
				  o->layers_at_start_high);
		else if (g->layer >= p->n_layers - o->layers_at_end_high)
			keep_high(g, p->graph, "the last %d layer(s) in high precision by policy "
				  "(--num-layers-at-end-in-bf16 %d)", o->layers_at_end_high,
				  o->layers_at_end_high);
	}
	for (size_t e = 0; e < o->n_exclude; e++) {
		bool matched = false;
		for (uint32_t i = 0; i < p->n_gemms; i++) {
			gemm *g = &p->gemms[i];
			if (!f8_glob_match(o->exclude[e], g->scope))
				continue;
			matched = true;
			if (g->fp8)
				keep_high(g, p->graph, "excluded by --fp8-exclude '%s'", o->exclude[e]);
		}
		if (!matched) {
			f8_diag_set(p->diag, F8_ERR_ARGUMENT, "--fp8-exclude '%s' matches no GEMM's "
				    "scope", o->exclude[e]);
			f8_diag_hint(p->diag, "scopes look like '%s'; f8c audit MODEL lists them all",
				     p->n_gemms ? p->gemms[p->n_gemms / 2].scope : "layers.0.mlp.fc1");
			return F8_ERR_ARGUMENT;
		}
	}
	return F8_OK;
}

static uint64_t fnv1a(uint64_t hash, const void *bytes, size_t n) {
	for (size_t i = 0; i < n; i++)
		hash = (hash ^ ((const unsigned char *)bytes)[i]) * UINT64_C(0x100000001b3);
	return hash;
}

uint64_t f8_calibration_digest(const f8_graph *graph, uint32_t *layers) {
	uint64_t hash = UINT64_C(0xcbf29ce484222325);
	*layers = 0;
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		f8_gemm_kind kind;
		if (node->op != F8_OP_LINEAR || !f8_gemm_kind_of(node, &kind) ||
		    kind != F8_GEMM_KIND_FWD)
			continue;
		const char *scope = node->scope ? node->scope : "";
		const f8_shape *w = &graph->values[node->inputs[1]].type.shape;
		hash = fnv1a(hash, scope, strlen(scope) + 1);
		for (int d = 0; d < w->rank; d++) {
			int64_t size = f8_dim_is_const(w->dims[d]) ? f8_dim_value(w->dims[d]) : -1;
			hash = fnv1a(hash, &size, sizeof size);
		}
		*layers += 1;
	}
	return hash;
}

/* The calibration against the model: made from another (its digest) is F8_ERR_ARGUMENT naming
 * both, and the first Linear layer of this model the statistics lack. */
static f8_status check_calibration_model(planner *p, const f8_calibration *c) {
	uint32_t layers;
	if (f8_calibration_digest(p->graph, &layers) == c->digest)
		return F8_OK;
	const char *lacking = NULL;
	for (uint32_t i = 0; i < p->n_gemms && !lacking; i++) {
		if (!p->gemms[i].linear) // statistics are of Linear layers
			continue;
		bool found = false;
		for (size_t e = 0; e < c->n_entries && !found; e++)
			found = strcmp(c->entries[e].scope, p->gemms[i].scope) == 0;
		lacking = found ? NULL : p->gemms[i].scope;
	}
	f8_diag_set(p->diag, F8_ERR_ARGUMENT, "%s holds the statistics of %s (%u Linear layers), "
		    "not of this model (%u Linear layers%s%s%s)", c->source ? c->source : "--calibration",
		    c->model && *c->model ? c->model : "another model", c->layers, layers,
		    lacking ? "; it has none of " : ", of other scopes or shapes",
		    lacking ? lacking : "", lacking ? "" : "");
	f8_diag_hint(p->diag, "calibrate this model: f8c calibrate MODEL --data TOKENS -o "
		     "STATS.json (statistics are bound to the layers they were taken of)");
	return F8_ERR_ARGUMENT;
}

/* Rule 6: calibration. A Linear layer whose operands' amax varied more than the threshold
 * (the largest coefficient of variation among its roles) stays high precision. */
static f8_status apply_calibration(planner *p) {
	const f8_calibration *c = p->options->calibration;
	if (!c)
		return F8_OK;
	f8_status status = check_calibration_model(p, c);
	if (status)
		return status;
	for (size_t e = 0; e < c->n_entries; e++) {
		const f8_calibration_entry *entry = &c->entries[e];
		bool matched = false;
		for (uint32_t i = 0; i < p->n_gemms; i++)
			matched |= strcmp(p->gemms[i].scope, entry->scope) == 0;
		if (!matched) {
			f8_diag_set(p->diag, F8_ERR_ARGUMENT, "%s: the statistics of '%s' match no "
				    "GEMM of this model", c->source ? c->source : "--calibration",
				    entry->scope);
			f8_diag_hint(p->diag, "calibrate the same model: f8c calibrate MODEL --data "
				     "TOKENS -o STATS.json");
			return F8_ERR_ARGUMENT;
		}
	}
	for (uint32_t i = 0; i < p->n_gemms; i++) {
		gemm *g = &p->gemms[i];
		const f8_calibration_entry *worst = NULL;
		for (size_t e = 0; e < c->n_entries; e++)
			if (strcmp(c->entries[e].scope, g->scope) == 0 &&
			    (!worst || c->entries[e].amax_cv > worst->amax_cv))
				worst = &c->entries[e];
		if (!g->fp8 || !worst || !(worst->amax_cv > p->options->cv_threshold))
			continue;
		keep_high(g, p->graph, "calibration (%s): the amax of %s varies with CV %.3g > "
			  "--fp8-cv-threshold %g (mean %.3g, std %.3g, largest step ratio %.3g, "
			  "%.3g%% underflow, %.3g%% saturate, over %lld steps)",
			  c->source ? c->source : "--calibration", worst->role, worst->amax_cv,
			  p->options->cv_threshold, worst->amax_mean, worst->amax_std,
			  worst->max_step_ratio, 100 * worst->underflow, 100 * worst->saturate,
			  (long long)worst->steps);
	}
	return F8_OK;
}

/* Rule 7: --precision-config, in file order. */
static f8_status apply_rules(planner *p) {
	const f8_fp8_options *o = p->options;
	for (size_t r = 0; r < o->n_rules; r++) {
		const f8_precision_rule *rule = &o->rules[r];
		const char *where = rule->where ? rule->where : "--precision-config";
		bool matched = false;
		for (uint32_t i = 0; i < p->n_gemms; i++) {
			gemm *g = &p->gemms[i];
			if (!f8_glob_match(rule->scope, g->scope) ||
			    (rule->kinds && !(g->linear && (rule->kinds >> g->kind & 1))))
				continue;
			matched = true;
			if (!rule->fp8) {
				keep_high(g, p->graph, "%s%s%s", where, rule->reason ? ": " : "",
					  rule->reason ? rule->reason : "");
			} else if (!g->linear) {
				f8_diag_set(p->diag, F8_ERR_UNSUPPORTED, "%s puts %s in FP8, but f8c "
					    "has no FP8 form for it", where, g->scope);
				f8_diag_set_node(p->diag, p->graph, g->node);
				return F8_ERR_UNSUPPORTED;
			} else {
				g->fp8 = true;
				g->recipe = rule->recipe != F8_RECIPE_NONE ? rule->recipe : o->recipe;
				g->rule = where;
			}
		}
		if (!matched) {
			f8_diag_set(p->diag, F8_ERR_ARGUMENT, "%s: scope '%s' matches no GEMM", where,
				    rule->scope);
			f8_diag_hint(p->diag, "f8c audit MODEL lists the GEMMs with their scopes");
			return F8_ERR_ARGUMENT;
		}
	}
	return F8_OK;
}

/* What a GEMM of `recipe` is called where a chip has none: "sm_90 has no MX GEMM". */
static const char *recipe_gemm_name(f8_recipe recipe) {
	switch (recipe) {
	case F8_RECIPE_MXFP8: return "MX";
	case F8_RECIPE_BLOCK: return "block-scaled FP8";
	case F8_RECIPE_ROWWISE: return "row-scaled FP8";
	default: return "per-tensor FP8";
	}
}

/* The recipe problem of g on the target, in `problem`: which GPUs would run it (the cpu
 * emulates every recipe, which is no advice for a GPU plan). */
static void recipe_problem(const planner *p, const gemm *g, char *problem, size_t size) {
	char chips[64] = "";
	size_t used = 0;
	for (int i = 0; i < F8_TARGET_COUNT && used < sizeof chips; i++) {
		f8_target chip = (f8_target)i;
		unsigned runs = f8_target_table_default(chip)->fp8_gemm.recipes;
		if (chip != F8_TARGET_CPU && (runs & F8_RECIPE_BIT(g->recipe)))
			used += (size_t)snprintf(chips + used, sizeof chips - used, "%s%s",
						 used ? " or " : "", f8_target_name(chip));
	}
	snprintf(problem, size, "the %s recipe needs %s; %s has no %s GEMM",
		 f8_recipe_name(g->recipe), used ? chips : "a chip f8c knows",
		 f8_target_name(p->target->chip), recipe_gemm_name(g->recipe));
}

/* The problem with running g in FP8 on the target, in `problem`; false when there is none.
 * The target's FP8 GEMMs run some recipes and want K, N and M multiples of their own (Hopper's
 * and Blackwell's: the contraction and N of 16, M of 8); a size that is symbolic and not
 * provably a multiple passes here and is checked again when the sizes are bound (f8c train
 * binds them before planning). */
static bool target_problem(const planner *p, const gemm *g, char *problem, size_t size) {
	const f8_graph *graph = p->graph;
	const f8_target_gemm *rules = &p->target->fp8_gemm;
	if (!(rules->recipes & F8_RECIPE_BIT(g->recipe))) {
		recipe_problem(p, g, problem, size);
		return true;
	}
	const f8_node *node = &graph->nodes[g->node];
	if (is_grouped(node)) // its M, or a wgrad's K, is each expert's rows: data
		return grouped_problem(graph, g, problem, size);
	const f8_type *a = &graph->values[node->inputs[0]].type;
	const f8_type *b = &graph->values[node->inputs[1]].type;
	f8_dim a_last = a->shape.dims[a->shape.rank - 1], b0 = b->shape.dims[0], b1 = b->shape.dims[1];
	f8_dim rows = f8_dim_const(1);
	for (int i = 0; i + 1 < a->shape.rank; i++)
		f8_dim_mul(rows, a->shape.dims[i], &rows);
	// (M, N, K) of the TN GEMM fp8-cast makes: fwd and dgrad a (M, K) times w stored (N, K),
	// or (K, N) with transpose_weight; wgrad dy^T x gives (N, K, M), and x^T dy (K, N, M)
	// for a weight stored (K, N).
	bool transposed = f8_node_attr_int(node, "transpose_weight", 0) != 0;
	f8_dim m, n, k;
	if (g->kind != F8_GEMM_KIND_WGRAD)
		m = rows, n = transposed ? b1 : b0, k = transposed ? b0 : b1;
	else if (!transposed)
		m = a_last, n = b->shape.dims[b->shape.rank - 1], k = rows;
	else
		m = b->shape.dims[b->shape.rank - 1], n = a_last, k = rows;
	const struct { const char *name; f8_dim dim; int64_t multiple; } sizes[] = {
		{"K", k, rules->k_multiple}, {"N", n, rules->n_multiple}, {"M", m, rules->m_multiple}};
	for (int i = 0; i < 3; i++) {
		f8_dim quotient;
		if (sizes[i].multiple <= 1 || !f8_dim_is_const(sizes[i].dim) ||
		    f8_dim_div(sizes[i].dim, f8_dim_const(sizes[i].multiple), &quotient))
			continue;
		char text[64], rule[64];
		if (rules->k_multiple == rules->n_multiple)
			snprintf(rule, sizeof rule, "K and N multiples of %lld, M of %lld",
				 (long long)rules->k_multiple, (long long)rules->m_multiple);
		else
			snprintf(rule, sizeof rule, "K multiples of %lld, N of %lld, M of %lld",
				 (long long)rules->k_multiple, (long long)rules->n_multiple,
				 (long long)rules->m_multiple);
		snprintf(problem, size, "%s=%s is not a multiple of %lld (FP8 GEMMs on %s need %s)",
			 sizes[i].name, f8_dim_format(graph, sizes[i].dim, text, sizeof text),
			 (long long)sizes[i].multiple, f8_target_name(p->target->chip), rule);
		return true;
	}
	return false;
}

/* Rule 8: what the target cannot run is an error, or with --allow-fallback a recorded
 * high-precision decision. */
static f8_status apply_target(planner *p) {
	for (uint32_t i = 0; i < p->n_gemms; i++) {
		gemm *g = &p->gemms[i];
		char problem[200];
		if (!g->fp8 || !target_problem(p, g, problem, sizeof problem))
			continue;
		if (p->options->allow_fallback) {
			keep_high(g, p->graph, "fallback by --allow-fallback: %s", problem);
			continue;
		}
		f8_diag_set(p->diag, F8_ERR_UNSUPPORTED, "%s of %s cannot run in FP8: %s",
			    f8_gemm_kind_name(g->kind), g->scope, problem);
		f8_diag_hint(p->diag, "pass --allow-fallback to keep such GEMMs in high precision "
			     "(recorded in the plan), or exclude them with --fp8-exclude '%s'%s",
			     g->scope, g->recipe == F8_RECIPE_MXFP8 ? ", or use --fp8-recipe block (or --target sm_100 for Blackwell)" : "");
		f8_diag_set_node(p->diag, p->graph, g->node);
		return F8_ERR_UNSUPPORTED;
	}
	return F8_OK;
}

/* Writes the decisions on the GEMMs' outputs and to the report. */
static f8_status annotate(planner *p, FILE *report) {
	f8_graph *graph = p->graph;
	const f8_fp8_options *o = p->options;
	uint32_t n_fp8 = 0;
	for (uint32_t i = 0; i < p->n_gemms; i++) {
		gemm *g = &p->gemms[i];
		const f8_node *node = &graph->nodes[g->node];
		f8_value *out = &graph->values[node->outputs[0]];
		if (g->fp8) {
			n_fp8++;
			char format[8], a[8], b[8];
			snprintf(g->reason, sizeof g->reason, "%s of %s: FP8, %s -> %s %s, %s %s, %s%s%s",
				 f8_gemm_kind_name(g->kind), g->scope,
				 f8_name_upper(f8_fp8_format_name(o->format), format, sizeof format),
				 f8_gemm_operand_name(g->kind, 0),
				 f8_name_upper(f8_dtype_name(operand_format(g->kind, 0, o->format)), a,
					       sizeof a),
				 f8_gemm_operand_name(g->kind, 1),
				 f8_name_upper(f8_dtype_name(operand_format(g->kind, 1, o->format)), b,
					       sizeof b),
				 f8_recipe_name(g->recipe), g->rule ? ", by " : "",
				 g->rule ? g->rule : "");
		}
		char *reason = f8_arena_strdup(graph->arena, g->reason);
		if (!reason)
			return f8_diag_set(p->diag, F8_ERR_NOMEM, "out of memory");
		out->precision = (f8_precision){
			.format = g->fp8 ? operand_format(g->kind, 0, o->format) : out->type.dtype,
			.recipe = g->fp8 ? g->recipe : F8_RECIPE_NONE,
			.scaling_slot = F8_NONE,
			.reason = reason,
		};
		if (report)
			fprintf(report, "precision: %s\n", reason);
	}
	if (report)
		fprintf(report, "precision: %u of %u GEMMs in FP8\n", n_fp8, p->n_gemms);
	return F8_OK;
}

/* The target table the pass reads: `target`, which must be for the chip the options name, or
 * the chip facts alone. */
static f8_status find_target(planner *p, const f8_target_table *target) {
	p->target = target ? target : f8_target_table_default(p->options->target);
	if (p->target->chip == p->options->target)
		return F8_OK;
	f8_diag_set(p->diag, F8_ERR_ARGUMENT, "the target table is for %s, but --target is %s",
		    f8_target_name(p->target->chip), f8_target_name(p->options->target));
	f8_diag_hint(p->diag, "pass the table of the FP8 options' target "
		     "(codegen/target.h: f8_codegen_target_table_for)");
	return F8_ERR_ARGUMENT;
}

/* Without FP8 (--bf16 alone): every GEMM in its own dtype, which the bf16 pass made BF16
 * where the model does not compute in another on purpose. */
static f8_status record_high(planner *p, FILE *report) {
	f8_graph *graph = p->graph;
	for (uint32_t i = 0; i < p->n_gemms; i++) {
		gemm *g = &p->gemms[i];
		f8_value *out = &graph->values[graph->nodes[g->node].outputs[0]];
		char dtype[8];
		f8_name_upper(f8_dtype_name(out->type.dtype), dtype, sizeof dtype);
		keep_high(g, graph, "--bf16 without --fp8-format: %s operands and output, f32 "
			  "accumulation (Megatron-LM's mixed precision)%s", dtype,
			  out->type.dtype == F8_DTYPE_BF16 ? "" : "; the model computes it in this "
			  "dtype itself");
		char *reason = f8_arena_strdup(graph->arena, g->reason);
		if (!reason)
			return f8_diag_set(p->diag, F8_ERR_NOMEM, "out of memory");
		out->precision = (f8_precision){.format = out->type.dtype, .recipe = F8_RECIPE_NONE,
						.scaling_slot = F8_NONE, .reason = reason};
		if (report)
			fprintf(report, "precision: %s\n", reason);
	}
	if (report)
		fprintf(report, "precision: 0 of %u GEMMs in FP8 (no --fp8-format)\n", p->n_gemms);
	return F8_OK;
}

/* Why an op that is not a GEMM stays in high precision; NULL for the ops that get no decision
 * (elementwise math, shapes, and what later passes make). */
static const char *op_reason(f8_op op) {
	switch (op) {
	case F8_OP_ATTENTION:
		return "softmax statistics in f32; not FP8: f8c plans no FP8 attention on any "
		       "target (TransformerEngine runs attention in FP8 only under fp8_dpa, off by "
		       "default), so Q, K and V stay in this dtype";
	case F8_OP_ATTENTION_GRAD:
		return "the attention backward, f32 accumulation; not FP8, as its forward";
	case F8_OP_LAYER_NORM:
	case F8_OP_RMS_NORM:
		return "statistics in f32 or wider; norms stay out of FP8, as in TransformerEngine "
		       "and Megatron-LM (an FP8 GEMM reading the output casts it)";
	case F8_OP_LAYER_NORM_GRAD:
	case F8_OP_RMS_NORM_GRAD:
		return "the norm's backward, its reductions in f32 or wider";
	case F8_OP_SOFTMAX:
	case F8_OP_LOG_SOFTMAX:
		return "max-subtracted exponentials summed in f32 or wider";
	case F8_OP_SOFTMAX_GRAD:
	case F8_OP_LOG_SOFTMAX_GRAD:
		return "the softmax's backward, its reductions in f32 or wider";
	case F8_OP_CROSS_ENTROPY:
		return "log-sum-exp over the vocabulary in f32 or wider: the loss stays high "
		       "precision, as Megatron-LM computes it";
	case F8_OP_CROSS_ENTROPY_GRAD:
		return "softmax minus the one-hot target, from the forward's f32 log-sum-exp";
	case F8_OP_CROSS_ENTROPY_SHARD:
	case F8_OP_CROSS_ENTROPY_MERGE:
		return "the vocabulary-parallel cross-entropy's exponentials summed and its loss "
		       "made in f32, as Megatron-LM's vocab_parallel_cross_entropy";
	case F8_OP_CROSS_ENTROPY_SHARD_GRAD:
	case F8_OP_CROSS_ENTROPY_MERGE_GRAD:
		return "the vocabulary-parallel cross-entropy's backward, from the f32 row sums";
	case F8_OP_EMBEDDING:
		return "a row lookup, no product to put in FP8: the table stays in this dtype "
		       "(TransformerEngine's FP8 covers Linear layers)";
	case F8_OP_EMBEDDING_GRAD:
		return "the looked-up rows' gradients summed per token id";
	case F8_OP_ROUTER:
		return "the gating's softmax and top-k: the choice flips with rounding, so it stays "
		       "high precision (DeepSeek-V3, Megatron-LM)";
	case F8_OP_GLOBAL_NORM:
		return "the gradients' global norm (clipping, the non-finite check) in f32";
	case F8_OP_ADAMW:
		return "AdamW on f32 master weights and moments, as Megatron-LM's mixed precision "
		       "keeps its main parameters and optimizer state";
	default:
		return NULL;
	}
}

/* The decision of every other op the plan accounts for (op_reason): its output's dtype and
 * the reason, where no earlier pass (attention-unfused, bf16) wrote one. */
static f8_status annotate_ops(f8_graph *graph, FILE *report, f8_diag *diag) {
	uint32_t n = 0;
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		const char *why = op_reason(node->op);
		f8_value *out = &graph->values[node->outputs[0]];
		if (!why || out->precision.reason)
			continue;
		char dtype[8], reason[REASON_MAX];
		snprintf(reason, sizeof reason, "kept %s: %s",
			 f8_name_upper(f8_dtype_name(out->type.dtype), dtype, sizeof dtype), why);
		char *kept = f8_arena_strdup(graph->arena, reason);
		if (!kept)
			return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
		out->precision = (f8_precision){.format = out->type.dtype, .recipe = F8_RECIPE_NONE,
						.scaling_slot = F8_NONE, .reason = kept};
		n++;
	}
	if (report)
		fprintf(report, "precision: %u other ops in high precision, each with its reason\n", n);
	return F8_OK;
}

f8_status f8_pass_precision_run(f8_graph *graph, const f8_fp8_options *options,
				const f8_target_table *target, FILE *report, f8_diag *diag) {
	planner p = {.graph = graph, .options = options, .diag = diag};
	if (!options) {
		f8_status status = collect(&p);
		if (!status)
			status = record_high(&p, report);
		if (!status)
			status = annotate_ops(graph, report, diag);
		f8_free(p.gemms);
		return status;
	}
	f8_status status = f8_fp8_options_check(options, diag);
	if (!status)
		status = find_target(&p, target);
	if (!status)
		status = collect(&p);
	if (!status) {
		find_head(&p);
		find_routers(&p);
		apply_defaults(&p);
		status = apply_policy(&p);
	}
	if (!status)
		status = apply_calibration(&p);
	if (!status)
		status = apply_rules(&p);
	if (!status)
		status = apply_target(&p);
	if (!status)
		status = annotate(&p, report);
	if (!status)
		status = annotate_ops(graph, report, diag);
	f8_free(p.gemms);
	return status;
}
