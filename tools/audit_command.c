/*
 * f8c audit: compiles a model's training step with the FP8 options and prints, for every GEMM in
 * program order, what was decided and why (each FP8 operand's format, recipe and granularity,
 * or the high-precision dtype and its reason), then what the plan buys: the share of GEMM FLOPs
 * in FP8, the operand bytes saved, the scaling slots and the amax all-reduce payload.
 *
 * Everything printed is read back from the IR's annotations (f8_value.precision) and the
 * FP8Gemm nodes, so the audit sees exactly what the plan holds.
 */
#include <jansson.h> // json_pack, json_dumpf
#include <stdio.h>   // printf, fprintf
#include <string.h>  // strcmp, strncmp, strlen, strrchr, strstr

#include "ir/alloc.h"                  // f8_calloc, f8_malloc, f8_free
#include "ir/gemm.h"                   // f8_gemm_kind_of, f8_gemm_sizes, f8_gemm_operand_role
#include "ir/memory.h"                 // f8_memory_type_bytes
#include "ir/pipeline_chunks.h"        // f8_pipeline_chunks
#include "passes/fp8_cast.h"           // F8_FP8_TABLE_*
#include "runtime/pipeline_schedule.h" // f8_pipeline_interleaved
#include "runtime/plan.h"               // f8_plan_is_dir, f8_plan_load
#include "tools/commands.h"            // f8_tool_audit
#include "tools/compile.h"             // f8_tool_load_model, f8_tool_run_passes
#include "tools/fp8_options.h"         // f8_tool_fp8_args
#include "tools/parallel_options.h"    // f8_tool_parallel_args
#include "tools/recompute_options.h"   // f8_tool_recompute_args
#include "tools/tool_options.h"        // f8_tool_parse_int, f8_tool_parse_dim_binding

enum { MAX_DIMS = 32 };

typedef struct request {
	const char *model;
	bool json, help;
	bool memory;              // --memory: the step's device memory by part
	bool all_ops;             // --all-ops: every other op's precision decision too
	json_t **document;        // f8_tool_audit_document: the JSON document goes here, unprinted
	f8_tool_recompute_args recompute; // --recompute-*, --memory-budget
	f8_tool_parallel_args parallel;   // --world-size, --tensor-model-parallel-size ...
	int64_t micro_batch_size; // binds `batch`
	int64_t seq_length;       // binds `seq`; 0: the model's own
	int64_t vocab_multiple;   // --make-vocab-size-divisible-by; 0: the description's
	f8_dim_binding dims[MAX_DIMS];
	uint32_t n_dims;
	// What load bound besides --dim, for the heading: 0 where the model has no such size.
	int64_t bound_batch, bound_seq;
} request;

/* One operand of an FP8 GEMM, as the plan has it. */
typedef struct operand {
	const char *role;        // "x", "w", "dy"
	f8_dtype format;
	const f8_precision *precision; // the annotation of the FP8 copy it reads
	const char *table;       // the scaling table of its slot ("fp8.weights"), or NULL
	uint32_t slots;          // its slots from precision->scaling_slot on: one per expert of
				 // an FP8GroupedGemm's operand, else 1
	char granularity[24];    // "per-tensor", "rowwise", "1x128", "128x128", "1x32 MX"
	int64_t numel;
} operand;

/* One GEMM of the program. */
typedef struct row {
	const char *scope;
	const char *kind;        // "fwd", "dgrad", "wgrad", or the op's name for other GEMMs
	int64_t m, n, k;
	double flops;            // 2 m n k
	bool fp8;
	f8_dtype dtype;          // the high-precision dtype the GEMM computes in
	const char *reason;      // the decision's reason, from the output's annotation
	operand operands[2];
} row;

/* What the recompute pass decided for one reason: the nodes that make forward values again. */
typedef struct recomputed {
	const char *reason;
	uint32_t n_nodes;
	double gemm_flops;        // 2 m n k of its GEMMs
} recomputed;

/* A collective of the program, as the shard pass made it. */
typedef struct collective {
	const char *op, *group, *reduction; // "AllReduce", "dp", "sum"
	f8_phase phase;
	uint32_t calls, tensors;            // the collectives, and the tensors they move
	uint64_t bytes;                     // of one run of its phase
} collective;

typedef struct summary {
	uint32_t n_gemms, n_fp8;
	double flops, flops_fp8;
	double bytes_saved;       // operand bytes per step FP8 saves over the high-precision dtype
	int64_t slots[3];         // per table: weights, activations, gradients
	uint32_t per_tensor_amaxes; // amaxes reduced per step (per-tensor casts)
	recomputed *recomputed;   // (n_recomputed) by reason, in program order; the GEMM rows and
	uint32_t n_recomputed;    // the counts above leave recomputing nodes out
	collective *collectives;  // (n_collectives) in program order
	uint32_t n_collectives;
} summary;

static const char *const table_names[3] = {F8_FP8_TABLE_WEIGHTS, F8_FP8_TABLE_ACTIVATIONS,
					   F8_FP8_TABLE_GRADIENTS};

static void print_usage(FILE *out) {
	fprintf(out, "usage: f8c audit MODEL [--json] [--memory] [--all-ops] [--micro-batch-size N] "
		     "[--seq-length N] [--dim NAME=N]... [--make-vocab-size-divisible-by N] [--bf16] "
		     "[FP8 options] [recompute options] [parallel options]\n"
		     "  --json              one JSON document instead of the table\n"
		     "  --memory            the device memory a training step takes on one GPU, by "
		     "part\n"
		     "  --all-ops           every op that is not a GEMM and has a precision decision "
		     "(attention, norms, softmax, cross entropy, embedding, router, optimizer, "
		     "--bf16's casts): its dtype and why\n"
		     "  --micro-batch-size  binds the model's batch size (default 1)\n"
		     "  --seq-length        binds its sequence length (default: the model's own)\n"
		     "  --dim NAME=N        binds any other symbolic size\n"
		     "  --make-vocab-size-divisible-by N  pads a JSON model's vocabulary to a "
		     "multiple of N (128; 1: none)\n");
}

static int usage(const char *problem) {
	fprintf(stderr, "f8c audit: %s\n", problem);
	print_usage(stderr);
	fprintf(stderr, "HINT: f8c audit --help lists the FP8 options\n");
	return 2;
}

static int fail(const f8_diag *diag) {
	f8_diag_print(diag, stderr);
	return diag->status == F8_ERR_ARGUMENT ? 2 : 1;
}

/* Parses the command line into r and fp8; 0 or the exit status of an error it printed. */
static int parse(int argc, char **argv, request *r, f8_tool_fp8_args *fp8) {
	r->micro_batch_size = 1;
	for (int i = 1; i < argc; i++) {
		f8_diag diag;
		f8_diag_clear(&diag);
		bool taken;
		if (f8_tool_fp8_parse_arg(fp8, argc, argv, &i, &taken, &diag))
			return fail(&diag);
		if (!taken && f8_tool_recompute_parse_arg(&r->recompute, argc, argv, &i, &taken,
							  &diag))
			return fail(&diag);
		if (!taken && f8_tool_parallel_parse_arg(&r->parallel, argc, argv, &i, &taken, &diag))
			return fail(&diag);
		const char *arg = argv[i];
		bool has_value = i + 1 < argc;
		if (taken)
			continue;
		if (strcmp(arg, "--help") == 0) {
			r->help = true;
		} else if (strcmp(arg, "--json") == 0) {
			r->json = true;
		} else if (strcmp(arg, "--memory") == 0) {
			r->memory = true;
		} else if (strcmp(arg, "--all-ops") == 0) {
			r->all_ops = true;
		} else if (strcmp(arg, "--micro-batch-size") == 0 || strcmp(arg, "--seq-length") == 0) {
			int64_t *field = arg[2] == 'm' ? &r->micro_batch_size : &r->seq_length;
			if (!has_value || !f8_tool_parse_int(argv[++i], 1, INT32_MAX, field))
				return usage("--micro-batch-size and --seq-length need a positive integer");
		} else if (strcmp(arg, "--make-vocab-size-divisible-by") == 0) {
			if (!has_value ||
			    !f8_tool_parse_int(argv[++i], 1, INT32_MAX, &r->vocab_multiple))
				return usage("--make-vocab-size-divisible-by needs a positive "
					     "integer");
		} else if (strcmp(arg, "--dim") == 0) {
			if (!has_value || r->n_dims == MAX_DIMS ||
			    !f8_tool_parse_dim_binding(argv[++i], &r->dims[r->n_dims++]))
				return usage("--dim needs NAME=N with N a positive integer");
		} else if (arg[0] == '-' && arg[1]) {
			fprintf(stderr, "f8c audit: unknown option '%s'\n", arg);
			return usage("see the options below");
		} else if (r->model) {
			return usage("give one model file");
		} else {
			r->model = arg;
		}
	}
	if (!r->model && !r->help)
		return usage("no model file given");
	f8_diag diag;
	f8_diag_clear(&diag);
	if (f8_tool_recompute_finish(&r->recompute, &diag))
		return fail(&diag);
	return 0;
}

static bool bound_by_user(const request *r, const char *name) {
	for (uint32_t i = 0; i < r->n_dims; i++)
		if (strcmp(r->dims[i].name, name) == 0)
			return true;
	return false;
}

static bool has_symbol(const f8_graph *graph, const char *name) {
	for (uint32_t i = 0; i < graph->n_symbols; i++)
		if (strcmp(graph->symbols[i], name) == 0)
			return true;
	return false;
}

/* Loads the model with the user's --dim, then binds batch and seq where it has them. */
static f8_status load(request *r, f8_graph **graph, f8_diag *diag) {
	f8_frontend_options options = {.dims = r->dims, .n_dims = r->n_dims,
				       .vocab_multiple = r->vocab_multiple};
	f8_status status = f8_tool_load_model(r->model, &options, graph, diag);
	if (status)
		return status;
	f8_dim_binding more[2];
	uint32_t n = 0;
	if (has_symbol(*graph, "batch") && !bound_by_user(r, "batch"))
		more[n++] = (f8_dim_binding){.name = "batch", .value = r->bound_batch =
								       r->micro_batch_size};
	if (has_symbol(*graph, "seq") && !bound_by_user(r, "seq")) {
		int64_t seq = r->seq_length ? r->seq_length : f8_tool_described_seq(r->model);
		if (!seq) {
			f8_diag_set(diag, F8_ERR_ARGUMENT, "the model's sequence length is symbolic "
				    "and %s does not declare one", r->model);
			f8_diag_hint(diag, "give it: --seq-length N (or --dim seq=N)");
			return F8_ERR_ARGUMENT;
		}
		more[n++] = (f8_dim_binding){.name = "seq", .value = r->bound_seq = seq};
	}
	return n ? f8_tool_bind_dims(*graph, more, n, diag) : F8_OK;
}

/* The scaling table an FP8 operand's scale comes from: the table its cast reads (for a weight
 * cache, the cast that remakes it each step); NULL for scales found in the cast. */
static const char *scale_table(const f8_graph *graph, f8_value_id v) {
	for (uint32_t i = 0; i < graph->n_updates && graph->values[v].producer == F8_NONE; i++)
		if (graph->updates[i].target == v)
			v = graph->updates[i].source;
	f8_node_id producer = graph->values[v].producer;
	if (producer == F8_NONE)
		return NULL;
	const f8_node *cast = &graph->nodes[producer];
	int scale_at = f8_cast_scale_input(cast);
	if ((cast->op != F8_OP_QUANTIZE && cast->op != F8_OP_CAST_TRANSPOSE) || scale_at < 0)
		return NULL;
	return graph->values[cast->inputs[scale_at]].name;
}

/* "1x128" from an FP8Gemm's a_block / b_block (absent: per tensor). */
static void granularity(const f8_node *node, const char *attr, f8_dtype scale_dtype,
			char *out, size_t size) {
	const f8_attr *block = f8_node_attr(node, attr);
	if (!block || block->ints.n != 2)
		snprintf(out, size, "per-tensor");
	else if (block->ints.items[0] == 1 && block->ints.items[1] == 0)
		snprintf(out, size, "rowwise");
	else
		snprintf(out, size, "%lldx%lld%s", (long long)block->ints.items[0],
			 (long long)block->ints.items[1], scale_dtype == F8_DTYPE_E8M0 ? " MX" : "");
}

/* The row of GEMM `node`; false (diag set) when its sizes are not all bound. */
static f8_status describe(const f8_graph *graph, f8_node_id id, row *out, f8_diag *diag) {
	const f8_node *node = &graph->nodes[id];
	const f8_value *y = &graph->values[node->outputs[0]];
	f8_gemm_kind kind;
	bool linear = f8_gemm_kind_of(node, &kind);
	*out = (row){.scope = node->scope ? node->scope : y->name,
		     .kind = linear ? f8_gemm_kind_name(kind) : f8_op_name(node->op),
		     .fp8 = node->op == F8_OP_FP8_GEMM || node->op == F8_OP_FP8_GROUPED_GEMM,
		     .dtype = y->type.dtype,
		     .reason = y->precision.reason};
	if (!f8_gemm_sizes(graph, node, &out->m, &out->n, &out->k)) {
		f8_diag_set(diag, F8_ERR_ARGUMENT, "the sizes of %s (%s) are not all known",
			    out->scope, out->kind);
		f8_diag_hint(diag, "bind the model's symbolic sizes with --dim NAME=N");
		f8_diag_set_node(diag, graph, id);
		return F8_ERR_ARGUMENT;
	}
	out->flops = 2.0 * (double)out->m * (double)out->n * (double)out->k;
	if (!out->fp8)
		return F8_OK;
	static const char *const blocks[2] = {"a_block", "b_block"};
	for (int i = 0; i < 2; i++) {
		const f8_value *v = &graph->values[node->inputs[i]];
		const f8_value *scale_inv = &graph->values[node->inputs[2 + i]];
		operand *o = &out->operands[i];
		o->role = f8_gemm_operand_role(graph, node, i);
		o->format = v->type.dtype;
		o->precision = &v->precision;
		o->table = scale_table(graph, node->inputs[i]);
		const f8_shape *scales = &scale_inv->type.shape;
		o->slots = node->op == F8_OP_FP8_GROUPED_GEMM && f8_dim_is_const(scales->dims[0])
				   ? (uint32_t)f8_dim_value(scales->dims[0]) : 1;
		if (node->op == F8_OP_FP8_GROUPED_GEMM)
			snprintf(o->granularity, sizeof o->granularity, "per-expert");
		else
			granularity(node, blocks[i], scale_inv->type.dtype, o->granularity,
				    sizeof o->granularity);
		f8_dim numel;
		o->numel = f8_shape_numel(&v->type.shape, &numel) && f8_dim_is_const(numel)
				   ? f8_dim_value(numel) : 0;
	}
	return F8_OK;
}

/* The slots of table `name` (its scale is f32[n]), 0 when the plan has none. */
static int64_t table_slots(const f8_graph *graph, const char *name) {
	char scale[64];
	snprintf(scale, sizeof scale, "%s.scale", name);
	f8_value_id id = f8_graph_find_value(graph, scale, strlen(scale));
	if (id == F8_NONE || graph->values[id].type.shape.rank != 1 ||
	    !f8_dim_is_const(graph->values[id].type.shape.dims[0]))
		return 0;
	return f8_dim_value(graph->values[id].type.shape.dims[0]);
}

/* Counts recomputing node `node` under its reason in s->recomputed. */
static f8_status count_recomputed(const f8_graph *graph, const f8_node *node, summary *s,
				  f8_diag *diag) {
	// A recomputed cast's reason adds its scale to its unit's ("...; delayed: ..."): by unit.
	size_t unit = strcspn(node->recompute, ";");
	recomputed *r = NULL;
	for (uint32_t i = 0; i < s->n_recomputed && !r; i++)
		if (strlen(s->recomputed[i].reason) == unit &&
		    strncmp(s->recomputed[i].reason, node->recompute, unit) == 0)
			r = &s->recomputed[i];
	if (!r) {
		recomputed *grown = f8_realloc(s->recomputed, (s->n_recomputed + 1) * sizeof *grown);
		if (!grown)
			return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
		s->recomputed = grown;
		r = &grown[s->n_recomputed++];
		*r = (recomputed){.reason = f8_arena_strndup(graph->arena, node->recompute, unit)};
		if (!r->reason)
			return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	}
	int64_t m, n, k;
	r->n_nodes++;
	if ((f8_op_get_info(node->op)->flags & F8_OPF_GEMM) && f8_gemm_sizes(graph, node, &m, &n, &k))
		r->gemm_flops += 2.0 * (double)m * (double)n * (double)k;
	return F8_OK;
}

/* Adds collective node `node` to s->collectives. */
static f8_status count_collective(const f8_graph *graph, const f8_node *node, summary *s,
				  f8_diag *diag) {
	if (node->op == F8_OP_LOCAL_SHARD) // this rank's part of what it holds: no traffic
		return F8_OK;
	collective key = {.op = f8_op_name(node->op), .group = f8_node_attr_string(node, "group", "?"),
			  .reduction = f8_node_attr_string(node, "op", NULL), .phase = node->phase};
	collective *c = NULL; // the collectives of one kind, group and phase are one line
	for (uint32_t i = 0; i < s->n_collectives && !c; i++) {
		collective *seen = &s->collectives[i];
		if (strcmp(seen->op, key.op) == 0 && strcmp(seen->group, key.group) == 0 &&
		    seen->phase == key.phase &&
		    (seen->reduction == key.reduction ||
		     (seen->reduction && key.reduction && strcmp(seen->reduction, key.reduction) == 0)))
			c = seen;
	}
	if (!c) {
		collective *grown = f8_realloc(s->collectives,
					       (s->n_collectives + 1) * sizeof *grown);
		if (!grown)
			return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
		s->collectives = grown;
		c = &grown[s->n_collectives++];
		*c = key;
	}
	c->calls++;
	if (node->op == F8_OP_RING_ATTENTION || node->op == F8_OP_RING_ATTENTION_GRAD) {
		// What goes round the ring, at the tensors' dtype: the key and value blocks,
		// ranks - 1 steps; the backward two whole rounds (the first makes the log-sum-exp
		// again, the second brings each block's dk and dv back to its rank) of the blocks
		// with their dk and dv (runtime/cpu/kernels_ring_attention.c).
		bool grad = node->op == F8_OP_RING_ATTENTION_GRAD;
		uint64_t ranks = (uint64_t)f8_node_attr_int(node, "ranks", 1);
		uint64_t kv = f8_memory_type_bytes(&graph->values[node->inputs[grad ? 2 : 1]].type) +
			      f8_memory_type_bytes(&graph->values[node->inputs[grad ? 3 : 2]].type);
		c->tensors += grad ? 4 : 2;
		c->bytes += grad ? 2 * ranks * 2 * kv : (ranks - 1) * kv;
		return F8_OK;
	}
	if (node->op == F8_OP_ALL_TO_ALL_DISPATCH || node->op == F8_OP_ALL_TO_ALL_COMBINE) {
		// Expert parallelism's exchange moves the rank's token copies (what the routing
		// sends away of them is data; all of them is the bound): out, the dispatch's rows
		// and its counts; back, as many rows as the combine's output.
		bool out = node->op == F8_OP_ALL_TO_ALL_DISPATCH;
		c->tensors += 1;
		c->bytes += f8_memory_type_bytes(&graph->values[out ? node->inputs[0]
								       : node->outputs[0]].type);
		if (out && !(node->n_inputs > 2 && node->inputs[2] != F8_NONE))
			c->bytes += f8_memory_type_bytes(&graph->values[node->inputs[1]].type);
		return F8_OK;
	}
	// What a Recv brings is its output; what any other sends or reduces, its inputs.
	bool recv = node->op == F8_OP_RECV;
	const f8_value_id *values = recv ? node->outputs : node->inputs;
	uint32_t n = recv ? node->n_outputs : node->n_inputs;
	c->tensors += n;
	for (uint32_t i = 0; i < n; i++)
		c->bytes += f8_memory_type_bytes(&graph->values[values[i]].type);
	return F8_OK;
}

/* The rows of every GEMM in program order (n in *n_rows) and the summary. */
static f8_status collect(const f8_graph *graph, row **rows, uint32_t *n_rows, summary *s,
			 f8_diag *diag) {
	*rows = f8_calloc(graph->n_order ? graph->n_order : 1, sizeof **rows);
	*n_rows = 0;
	*s = (summary){0};
	if (!*rows)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		if (node->recompute) {
			f8_status status = count_recomputed(graph, node, s, diag);
			if (status)
				return status;
			continue;
		}
		if (f8_op_get_info(node->op)->flags & F8_OPF_COLLECTIVE) {
			f8_status status = count_collective(graph, node, s, diag);
			if (status)
				return status;
		}
		if ((node->op == F8_OP_QUANTIZE || node->op == F8_OP_CAST_TRANSPOSE) &&
		    !f8_node_attr(node, "block")) { // a grouped cast's, one per expert
			uint32_t at = node->op == F8_OP_QUANTIZE ? 1 : 2;
			const f8_shape *scales = at < node->n_outputs
				? &graph->values[node->outputs[at]].type.shape : NULL;
			s->per_tensor_amaxes += scales && scales->rank == 1 &&
							f8_dim_is_const(scales->dims[0])
						? (uint32_t)f8_dim_value(scales->dims[0]) : 1;
		}
		if (!(f8_op_get_info(node->op)->flags & F8_OPF_GEMM))
			continue;
		row *r = &(*rows)[(*n_rows)++];
		f8_status status = describe(graph, graph->order[i], r, diag);
		if (status)
			return status;
		s->n_gemms++;
		s->flops += r->flops;
		if (!r->fp8)
			continue;
		s->n_fp8++;
		s->flops_fp8 += r->flops;
		double wide = (double)f8_dtype_get_info(r->dtype)->bytes;
		for (int k = 0; k < 2; k++)
			s->bytes_saved += (double)r->operands[k].numel * (wide - 1);
	}
	for (int t = 0; t < 3; t++)
		s->slots[t] = table_slots(graph, table_names[t]);
	return F8_OK;
}

/* A dtype's name in capitals, as the reasons write it: "E4M3". */
static const char *upper(f8_dtype dtype, char *buffer, size_t size) {
	return f8_name_upper(f8_dtype_name(dtype), buffer, size);
}

/* The reason without the "kept <DTYPE>: " the precision pass starts it with. */
static const char *bare_reason(const char *reason) {
	if (!reason)
		return "no decision recorded";
	const char *colon = strncmp(reason, "kept ", 5) == 0 ? strstr(reason, ": ") : NULL;
	return colon ? colon + 2 : reason;
}

static void print_row(uint32_t index, const row *r, int scope_width) {
	char sizes[64], a[8];
	snprintf(sizes, sizeof sizes, "%lldx%lldx%lld", (long long)r->m, (long long)r->n,
		 (long long)r->k);
	printf("%4u  %-*s  %-5s  %-18s  ", index, scope_width, r->scope, r->kind, sizes);
	if (!r->fp8) {
		printf("%s: %s\n", upper(r->dtype, a, sizeof a), bare_reason(r->reason));
		return;
	}
	for (int i = 0; i < 2; i++) {
		const operand *o = &r->operands[i];
		printf("%s%s %s %s %s", i ? ", " : "", o->role, upper(o->format, a, sizeof a),
		       f8_recipe_name(o->precision->recipe), o->granularity);
		int table = o->table ? (int)(strlen(o->table) - 6) : 5;
		uint32_t slot = o->precision->scaling_slot;
		if (slot != F8_NONE && o->slots > 1)
			printf(" (%.*s slots %u-%u)", table, o->table ? o->table : "table", slot,
			       slot + o->slots - 1);
		else if (slot != F8_NONE)
			printf(" (%.*s slot %u)", table, o->table ? o->table : "table", slot);
	}
	printf("\n");
}

static void print_text(const request *q, const f8_fp8_options *o, bool bf16, const row *rows,
		       uint32_t n_rows, const summary *s) {
	int width = 5;
	for (uint32_t i = 0; i < n_rows; i++)
		width = (int)strlen(rows[i].scope) > width ? (int)strlen(rows[i].scope) : width;
	printf("f8c audit: %s", q->model);
	if (q->bound_batch)
		printf(", batch %lld", (long long)q->bound_batch);
	if (q->bound_seq)
		printf(", seq %lld", (long long)q->bound_seq);
	for (uint32_t i = 0; i < q->n_dims; i++)
		printf(", %s %lld", q->dims[i].name, (long long)q->dims[i].value);
	printf("; a training step (one micro-batch) for %s: %s, %s", f8_target_name(o->target),
	       f8_fp8_format_name(o->format), f8_recipe_name(o->recipe));
	if (o->recipe == F8_RECIPE_DELAYED)
		printf(" (history %d, %s, margin %d)", o->amax_history_len,
		       f8_amax_algo_name(o->amax_algo), o->margin);
	if (bf16)
		printf("; --bf16: BF16 activations and high-precision GEMMs, f32 master weights, "
		       "moments and main_grad");
	printf("\n");
	char padding[200];
	if (f8_tool_vocab_padding(q->model, q->vocab_multiple, padding, sizeof padding))
		printf("f8c audit: %s\n", padding);
	printf("%4s  %-*s  %-5s  %-18s  %s\n", "#", width, "scope", "gemm", "m x n x k",
	       "operands: format recipe granularity, or DTYPE: why high precision");
	for (uint32_t i = 0; i < n_rows; i++)
		print_row(i, &rows[i], width);
	printf("\nsummary:\n");
	printf("  GEMMs in FP8: %u of %u, %.1f%% of %.4g GEMM FLOPs per step\n", s->n_fp8,
	       s->n_gemms, s->flops > 0 ? 100 * s->flops_fp8 / s->flops : 0.0, s->flops);
	printf("  GEMM operand traffic saved: %.4g bytes per step (FP8 operands at 1 byte instead "
	       "of their GEMM's dtype)\n", s->bytes_saved);
	printf("  scaling slots: %s %lld, %s %lld, %s %lld\n", table_names[0],
	       (long long)s->slots[0], table_names[1], (long long)s->slots[1], table_names[2],
	       (long long)s->slots[2]);
	printf("  amax all-reduce: %u per-tensor amaxes, %u bytes per step\n",
	       s->per_tensor_amaxes, 4 * s->per_tensor_amaxes);
}

/* Whether node `node` is one of the other ops --all-ops lists: not a GEMM, not an FP8 cast (its
 * decision is its GEMM operand's), with a decision on its output. */
static bool other_op(const f8_graph *graph, const f8_node *node) {
	return !(f8_op_get_info(node->op)->flags & F8_OPF_GEMM) && node->op != F8_OP_QUANTIZE &&
	       node->op != F8_OP_CAST_TRANSPOSE && !node->recompute &&
	       graph->values[node->outputs[0]].precision.reason;
}

/* --all-ops: every other op's dtype and reason, in program order. */
static void print_ops(const f8_graph *graph) {
	int width = 5;
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		const char *scope = node->scope ? node->scope : "";
		if (other_op(graph, node) && (int)strlen(scope) > width)
			width = (int)strlen(scope);
	}
	printf("\nother ops (not GEMMs), each with its precision and why:\n");
	printf("%4s  %-*s  %-18s  %-5s  %s\n", "#", width, "scope", "op", "phase", "DTYPE: why");
	uint32_t n = 0;
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		if (!other_op(graph, node))
			continue;
		const f8_value *y = &graph->values[node->outputs[0]];
		char a[8];
		printf("%4u  %-*s  %-18s  %-5s  %s: %s\n", n++, width, node->scope ? node->scope : "",
		       f8_op_name(node->op), f8_phase_name(node->phase),
		       upper(y->type.dtype, a, sizeof a), bare_reason(y->precision.reason));
	}
}

/* --all-ops in JSON: [{index, scope, op, phase, dtype, reason}]; NULL when out of memory. */
static json_t *ops_json(const f8_graph *graph) {
	json_t *list = json_array();
	uint32_t n = 0;
	for (uint32_t i = 0; list && i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		if (!other_op(graph, node))
			continue;
		const f8_value *y = &graph->values[node->outputs[0]];
		char a[8];
		json_t *entry = json_pack("{s:I, s:s, s:s, s:s, s:s, s:s}", "index", (json_int_t)n++,
					  "scope", node->scope ? node->scope : "", "op",
					  f8_op_name(node->op), "phase", f8_phase_name(node->phase),
					  "dtype", upper(y->type.dtype, a, sizeof a), "reason",
					  bare_reason(y->precision.reason));
		if (!entry || json_array_append_new(list, entry)) {
			json_decref(list);
			list = NULL;
		}
	}
	return list;
}

/* The recompute pass's decisions: each unit's reason, its nodes and GEMM FLOPs. */
static void print_recompute(const summary *s) {
	if (!s->n_recomputed)
		return;
	uint32_t nodes = 0;
	double flops = 0;
	for (uint32_t i = 0; i < s->n_recomputed; i++)
		nodes += s->recomputed[i].n_nodes, flops += s->recomputed[i].gemm_flops;
	printf("\nrecompute: %u nodes make forward values again in the backward, %.4g GEMM FLOPs "
	       "(%.1f%% more than the step's)\n", nodes, flops,
	       s->flops > 0 ? 100 * flops / s->flops : 0.0);
	for (uint32_t i = 0; i < s->n_recomputed; i++)
		printf("  %s: %u nodes, %.4g GEMM FLOPs\n", s->recomputed[i].reason,
		       s->recomputed[i].n_nodes, s->recomputed[i].gemm_flops);
}

/* The shard pass's collectives: each kind with its group, the tensors it moves and their bytes
 * each time its phase runs (cast and opt once a step, fwd and bwd once a micro-batch), and how
 * many collectives move them where more than one. */
static void print_collectives(const f8_graph *graph, const summary *s) {
	if (f8_graph_mesh_ranks(graph) <= 1)
		return;
	printf("\nmesh (ranks along each axis):");
	for (int axis = 0; axis < F8_MESH_AXIS_COUNT; axis++)
		printf(" %s=%u", f8_mesh_axis_name((f8_mesh_axis)axis),
		       f8_graph_mesh_size(graph, (f8_mesh_axis)axis));
	printf("; %llu ranks\ncollectives of each rank:\n",
	       (unsigned long long)f8_graph_mesh_ranks(graph));
	for (uint32_t i = 0; i < s->n_collectives; i++) {
		const collective *c = &s->collectives[i];
		bool per_step = c->phase == F8_PHASE_CAST || c->phase == F8_PHASE_OPT;
		printf("  %s%s%s over %s in %s: %u tensor%s, %llu bytes a %s", c->op,
		       c->reduction ? " " : "", c->reduction ? c->reduction : "", c->group,
		       f8_phase_name(c->phase), c->tensors, c->tensors == 1 ? "" : "s",
		       (unsigned long long)c->bytes, per_step ? "step" : "micro-batch");
		if (c->calls > 1)
			printf(" (%u collectives)", c->calls);
		putchar('\n');
	}
}

static json_t *collectives_json(const f8_graph *graph, const summary *s) {
	json_t *mesh = json_object(), *list = json_array();
	for (int axis = 0; mesh && axis < F8_MESH_AXIS_COUNT; axis++)
		json_object_set_new(mesh, f8_mesh_axis_name((f8_mesh_axis)axis),
				    json_integer(f8_graph_mesh_size(graph, (f8_mesh_axis)axis)));
	for (uint32_t i = 0; list && i < s->n_collectives; i++) {
		const collective *c = &s->collectives[i];
		json_array_append_new(list, json_pack("{s:s, s:s, s:s?, s:s, s:I, s:I, s:I}", "op",
						      c->op, "group", c->group, "reduction",
						      c->reduction, "phase", f8_phase_name(c->phase),
						      "calls", (json_int_t)c->calls, "tensors",
						      (json_int_t)c->tensors, "bytes",
						      (json_int_t)c->bytes));
	}
	return json_pack("{s:o, s:o}", "mesh", mesh, "collectives", list);
}

static double gib(uint64_t bytes) {
	return (double)bytes / 1073741824.0;
}

/*
 * Under pipeline parallelism's 1F1B stage s of PP holds the activations of PP - s micro-batches
 * at once (runtime/pipeline_schedule.h), each in a slab of its own: the activations part and
 * the stored and recomputed bytes of one micro-batch's step times that (a step of fewer
 * micro-batches holds fewer). Under the interleaved schedule (`chunks` model chunks a stage)
 * as many as its order holds at once in a long step (4 PP V micro-batches). The count; 1
 * without PP.
 */
static int64_t in_flight(const f8_parallel_options *parallel, uint32_t chunks,
			 f8_memory_estimate *e) {
	if (parallel->pipeline <= 1)
		return 1;
	int64_t n = parallel->pipeline - parallel->stage;
	if (chunks > 1) {
		int64_t m = 4 * parallel->pipeline * chunks;
		f8_stage_run *runs = f8_calloc((size_t)(2 * m * chunks), sizeof *runs);
		uint32_t contexts = 0;
		if (runs)
			f8_pipeline_interleaved(parallel->pipeline, parallel->stage, chunks, m, runs,
						&contexts);
		f8_free(runs);
		n = contexts ? contexts : n;
	}
	f8_memory_estimate_add(e, F8_MEMORY_ACTIVATIONS,
			       (uint64_t)(n - 1) * e->part[F8_MEMORY_ACTIVATIONS]);
	e->saved_activations *= (uint64_t)n;
	e->recomputed_activations *= (uint64_t)n;
	return n;
}

/* The memory table of --memory: one rank's, on a mesh of `ranks`, with `micro_batches` in
 * flight. */
static void print_memory(const f8_memory_estimate *e, uint64_t ranks, int64_t micro_batches,
			 uint32_t chunks) {
	if (ranks > 1)
		printf("\nmemory on each rank's GPU (%llu ranks), a training step:\n",
		       (unsigned long long)ranks);
	else
		printf("\nmemory on one GPU, a training step:\n");
	for (int part = 0; part < F8_MEMORY_PART_COUNT; part++)
		printf("  %-18s %9.3f GiB  %s\n", f8_memory_part_name((f8_memory_part)part),
		       gib(e->part[part]), f8_memory_part_what((f8_memory_part)part));
	printf("  %-18s %9.3f GiB\n", "total", gib(e->total));
	if (!e->planned)
		printf("  (no slab: the model's sizes are not all bound)\n");
	printf("  of the activations: %.3f GiB stored by the forward for the backward; %.3f GiB "
	       "dropped and made again by recompute\n", gib(e->saved_activations),
	       gib(e->recomputed_activations));
	if (micro_batches > 1 && chunks > 1)
		printf("  the activations of %lld micro-batches in flight under the interleaved "
		       "schedule (%u model chunks a stage), each in a slab of its own (a step of fewer "
		       "micro-batches holds fewer)\n", (long long)micro_batches, chunks);
	else if (micro_batches > 1)
		printf("  the activations of %lld micro-batches in flight under 1F1B, each in a slab "
		       "of its own (a step of fewer micro-batches holds fewer)\n",
		       (long long)micro_batches);
}

static json_t *memory_json(const f8_memory_estimate *e, int64_t micro_batches) {
	json_t *parts = json_object();
	for (int part = 0; parts && part < F8_MEMORY_PART_COUNT; part++)
		json_object_set_new(parts, f8_memory_part_name((f8_memory_part)part),
				    json_integer((json_int_t)e->part[part]));
	return json_pack("{s:b, s:o, s:I, s:I, s:I, s:I}", "planned", e->planned, "bytes", parts,
			 "saved_activations", (json_int_t)e->saved_activations,
			 "recomputed_activations", (json_int_t)e->recomputed_activations, "total",
			 (json_int_t)e->total, "micro_batches_in_flight", (json_int_t)micro_batches);
}

static json_t *recompute_json(const summary *s) {
	json_t *units = json_array();
	for (uint32_t i = 0; units && i < s->n_recomputed; i++)
		json_array_append_new(units, json_pack("{s:s, s:I, s:f}", "reason",
						       s->recomputed[i].reason, "nodes",
						       (json_int_t)s->recomputed[i].n_nodes,
						       "gemm_flops", s->recomputed[i].gemm_flops));
	return units;
}

/* The JSON of one row; NULL when out of memory. */
static json_t *row_json(uint32_t index, const row *r) {
	char a[8];
	json_t *object = json_pack("{s:I, s:s, s:s, s:I, s:I, s:I, s:f, s:b, s:s, s:s?}", "index",
				   (json_int_t)index, "scope", r->scope, "gemm", r->kind, "m",
				   (json_int_t)r->m, "n", (json_int_t)r->n, "k", (json_int_t)r->k,
				   "flops", r->flops, "fp8", r->fp8, "dtype",
				   upper(r->dtype, a, sizeof a), "reason", r->reason);
	if (!object || !r->fp8)
		return object;
	json_t *operands = json_array();
	for (int i = 0; i < 2 && operands; i++) {
		const operand *o = &r->operands[i];
		json_t *slot = o->precision->scaling_slot == F8_NONE
				       ? json_null()
				       : json_integer(o->precision->scaling_slot);
		json_t *entry = json_pack("{s:s, s:s, s:s, s:s, s:s?, s:o, s:I, s:I, s:s?}", "role",
					  o->role, "format", upper(o->format, a, sizeof a), "recipe",
					  f8_recipe_name(o->precision->recipe), "granularity",
					  o->granularity, "scale_table", o->table, "slot", slot,
					  "slots", (json_int_t)(o->precision->scaling_slot == F8_NONE
								? 0 : o->slots),
					  "numel", (json_int_t)o->numel,
					  "reason", o->precision->reason);
		if (!entry || json_array_append_new(operands, entry)) {
			json_decref(operands);
			operands = NULL;
		}
	}
	if (!operands || json_object_set_new(object, "operands", operands)) {
		json_decref(object);
		return NULL;
	}
	return object;
}

/* The whole audit as one document; NULL when out of memory. */
static json_t *audit_json(const request *q, const f8_fp8_options *o, bool bf16, const row *rows,
			  uint32_t n_rows, const summary *s) {
	json_t *gemms = json_array();
	json_t *root = json_pack(
		"{s:s, s:s, s:b, s:s, s:s, s:i, s:s, s:i, s:o, s:{s:I, s:I, s:f, s:f, s:f, s:f, "
		"s:{s:I, s:I, s:I}, s:I, s:I}}",
		"model", q->model, "target", f8_target_name(o->target), "bf16", bf16, "fp8_format",
		f8_fp8_format_name(o->format), "fp8_recipe", f8_recipe_name(o->recipe),
		"amax_history_len", o->amax_history_len, "amax_compute_algo",
		f8_amax_algo_name(o->amax_algo), "margin", o->margin, "gemms", gemms, "summary",
		"gemms", (json_int_t)s->n_gemms, "fp8_gemms", (json_int_t)s->n_fp8, "flops",
		s->flops, "fp8_flops", s->flops_fp8, "fp8_flop_share",
		s->flops > 0 ? s->flops_fp8 / s->flops : 0.0, "operand_bytes_saved", s->bytes_saved,
		"scaling_slots", table_names[0], (json_int_t)s->slots[0], table_names[1],
		(json_int_t)s->slots[1], table_names[2], (json_int_t)s->slots[2],
		"per_tensor_amaxes", (json_int_t)s->per_tensor_amaxes, "amax_allreduce_bytes",
		(json_int_t)(4 * s->per_tensor_amaxes));
	char padding[200];
	bool padded = f8_tool_vocab_padding(q->model, q->vocab_multiple, padding, sizeof padding);
	if (root && json_object_set_new(root, "vocab_padding",
					padded ? json_string(padding) : json_null())) {
		json_decref(root);
		root = NULL;
	}
	for (uint32_t i = 0; root && i < n_rows; i++) {
		json_t *entry = row_json(i, &rows[i]);
		if (!entry || json_array_append_new(gemms, entry)) {
			json_decref(root);
			root = NULL;
		}
	}
	return root;
}

/*
 * MODEL is a plan folder: its graph, and the FP8 options and sizes it was compiled with (from
 * its compile arguments, into `fp8` and the request's heading fields) in place of the command
 * line's, which must give none. 0, or the exit status of an error it printed.
 */
static int use_plan(request *q, f8_tool_fp8_args *fp8, f8_plan **plan) {
	f8_diag diag;
	f8_diag_clear(&diag);
	if (fp8->given || q->recompute.given || q->parallel.given || q->n_dims || q->seq_length ||
	    q->vocab_multiple ||
	    q->micro_batch_size != 1) {
		fprintf(stderr, "f8c audit: %s is a plan: its sizes, FP8 and recompute options are "
			"compiled in\nHINT: drop them, or audit the model instead\n", q->model);
		return 2;
	}
	if (f8_plan_load(q->model, F8C_VERSION, plan, &diag))
		return fail(&diag);
	char **args = (char **)(*plan)->compile_args; // the plan's own copies
	int n = (int)(*plan)->n_compile_args;
	for (int i = 0; i < n; i++) {
		bool taken;
		if (f8_tool_fp8_parse_arg(fp8, n, args, &i, &taken, &diag) ||
		    (!taken && f8_tool_recompute_parse_arg(&q->recompute, n, args, &i, &taken, &diag)) ||
		    (!taken && f8_tool_parallel_parse_arg(&q->parallel, n, args, &i, &taken, &diag)))
			return fail(&diag);
		if (taken || strcmp(args[i], "--inference") == 0)
			continue;
		if (i + 1 < n && strcmp(args[i], "--micro-batch-size") == 0)
			f8_tool_parse_int(args[i + 1], 1, INT64_MAX, &q->bound_batch);
		else if (i + 1 < n && strcmp(args[i], "--seq-length") == 0)
			f8_tool_parse_int(args[i + 1], 1, INT64_MAX, &q->bound_seq);
		i++; // every other compile option takes a value
	}
	return 0;
}

/* Loads, compiles and audits; the exit status. With --memory a model's plan is made, its
 * kernels lowered but not compiled to PTX (their scratch is part of the memory). */
static int audit(request *q, const f8_fp8_options *fp8, bool bf16, f8_plan *plan) {
	f8_diag diag;
	f8_diag_clear(&diag);
	f8_graph *graph = plan ? plan->graph : NULL;
	f8_training_options hyperparameters = f8_training_options_default();
	f8_parallel_options parallel = q->parallel.options;
	parallel.micro_batch = q->micro_batch_size; // one micro-batch a rank: the global batch
	parallel.global_batch = 0;
	f8_pipeline_options compile = {.training = &hyperparameters, .fp8 = fp8, .bf16 = bf16,
				       .recompute = &q->recompute.options, .parallel = &parallel};
	f8_plan *made = NULL;
	f8_status status = plan ? F8_OK : load(q, &graph, &diag);
	if (!status && !plan)
		status = f8_tool_run_passes(graph, NULL, true, &compile, NULL, &diag);
	if (!status && !plan && q->memory) {
		status = f8_tool_plan_make(graph, true, false, q->model, NULL, 0, &made, &diag);
		graph = NULL; // the plan's, made or not
		plan = made;
		if (!status)
			graph = plan->graph;
	}
	row *rows = NULL;
	uint32_t n_rows = 0;
	summary s = {0};
	if (!status)
		status = collect(graph, &rows, &n_rows, &s, &diag);
	f8_memory_estimate memory = {0};
	int64_t micro_batches = 1;
	uint32_t chunks = 1;
	if (!status && q->memory) {
		uint8_t *chunk_of = f8_malloc(graph->n_nodes + 1);
		status = chunk_of ? f8_pipeline_chunks(graph, chunk_of, &chunks, &diag)
				  : f8_diag_set(&diag, F8_ERR_NOMEM, "out of memory");
		f8_free(chunk_of);
		memory = f8_plan_memory(plan);
		micro_batches = in_flight(&q->parallel.options, chunks, &memory);
	}
	if (!status && q->json) {
		json_t *document = audit_json(q, fp8, bf16, rows, n_rows, &s);
		if (document && (json_object_set_new(document, "recompute", recompute_json(&s)) ||
				 json_object_set_new(document, "distributed",
						     collectives_json(graph, &s)) ||
				 (q->memory &&
				  json_object_set_new(document, "memory",
						      memory_json(&memory, micro_batches))) ||
				 (q->all_ops &&
				  json_object_set_new(document, "ops", ops_json(graph))))) {
			json_decref(document);
			document = NULL;
		}
		if (document && q->document) {
			*q->document = document;
			document = NULL;
		} else if (!document || json_dumpf(document, stdout, JSON_INDENT(2) |
						   JSON_REAL_PRECISION(17)) ||
			   fputc('\n', stdout) == EOF) {
			status = f8_diag_set(&diag, document ? F8_ERR_IO : F8_ERR_NOMEM,
					     "cannot write the audit");
		}
		json_decref(document);
	} else if (!status) {
		print_text(q, fp8, bf16, rows, n_rows, &s);
		if (q->all_ops)
			print_ops(graph);
		print_collectives(graph, &s);
		print_recompute(&s);
		if (q->memory)
			print_memory(&memory, f8_graph_mesh_ranks(graph), micro_batches, chunks);
	}
	f8_free(rows);
	f8_free(s.recomputed);
	f8_free(s.collectives);
	if (made)
		f8_plan_destroy(made); // the graph with it
	else if (!plan) // a plan's graph is its plan's
		f8_graph_destroy(graph);
	return status ? fail(&diag) : 0;
}

/* f8c audit, with its JSON document handed to *document when that is not NULL (and its
 * sections forced on) rather than printed. */
static int run_audit(int argc, char **argv, json_t **document) {
	request r = {0};
	f8_tool_fp8_args fp8;
	f8_diag diag;
	f8_diag_clear(&diag);
	if (f8_tool_fp8_init(&fp8, "audit", true, &diag))
		return fail(&diag);
	int code = parse(argc, argv, &r, &fp8);
	if (document) {
		r.json = r.memory = r.all_ops = true;
		r.document = document;
	}
	if (!code && r.help) {
		print_usage(stdout);
		f8_tool_fp8_print_help(stdout, true);
		f8_tool_recompute_print_help(stdout);
		f8_tool_parallel_print_help(stdout);
	} else if (!code) {
		f8_plan *plan = NULL;
		if (f8_plan_is_dir(r.model))
			code = use_plan(&r, &fp8, &plan);
		if (!code && f8_tool_fp8_finish(&fp8, &diag))
			code = fail(&diag);
		// Under pipeline parallelism a model's audit is every stage's, one after another
		// (each stage runs a program of its own), unless --pipeline-stage names one; a
		// plan, and the JSON document, are one stage's.
		int64_t stages = r.parallel.options.pipeline;
		bool each = !plan && !r.json && stages > 1 &&
			    !f8_tool_parallel_stage_given(&r.parallel);
		for (int64_t stage = 0; !code && stage < (each ? stages : 1); stage++) {
			if (each) {
				r.parallel.options.stage = stage;
				printf("%spipeline stage %lld of %lld:\n", stage ? "\n" : "",
				       (long long)stage, (long long)stages);
			}
			code = audit(&r, f8_tool_fp8_options(&fp8), fp8.bf16, plan);
		}
		f8_plan_destroy(plan);
	}
	f8_tool_fp8_destroy(&fp8);
	return code;
}

int f8_tool_audit(int argc, char **argv) {
	return run_audit(argc, argv, NULL);
}

int f8_tool_audit_document(int argc, char **argv, json_t **document) {
	*document = NULL;
	int code = run_audit(argc, argv, document);
	if (code && *document) {
		json_decref(*document);
		*document = NULL;
	}
	return code;
}
