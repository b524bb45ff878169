/*
 * Building the forward graph of a checked model config straight through the graph API (no text
 * round trip: a 96-layer model builds in milliseconds). The graph has the form the ONNX
 * frontend gives after fuse-patterns, so that later passes cannot tell the two apart:
 *
 *   tokens (batch, seq) -> Embedding [+ Slice of the learned position table]
 *   per layer:  x + proj(Attention(Rope?(heads(Split(qkv(norm(x)))))))    one fused qkv Linear
 *               x + fc2(act(fc1(norm(x))))                               SwiGLU: fc1 = [gate | up]
 *            or x + Reshape(MoECombine(GroupedLinear(act(GroupedLinear(MoEDispatch(...))))))
 *   final norm -> head Linear (embed.weight when tied) -> logits (batch, seq, vocab)
 *
 * vocab is the padded vocabulary (f8_json_model_padded_vocab): Megatron-LM's dummy tokens.
 *
 * Rotary tables are computed once, in the graph, by the chain torch.onnx writes for Llama:
 * Range(seq) -> Cast -> times a constant inv_freq, broadcast -> Concat(freqs, freqs) -> Cos, Sin.
 * Names follow PyTorch modules: parameter `layers.3.attn.qkv.weight`, node scope
 * `layers.3.attn.qkv`, value `layers.3.attn.qkv`.
 */
#include "frontend/json/model_json.h" // f8_json_model_build, f8_json_model_config

#include <assert.h> // assert
#include <math.h>   // powf
#include <stdio.h>  // snprintf
#include <string.h> // memcpy

#include "ir/alloc.h"        // f8_malloc, f8_free
#include "passes/pipeline.h" // f8_pipeline_run

enum { MAX_NAME = 96 }; // the longest name is like "layers.4095.mlp.experts.fc1.weight"

typedef struct builder {
	f8_graph *graph;
	const f8_json_model_config *config;
	f8_diag *diag;
	f8_status status;       // the first failure; once set, every step does nothing
	f8_dim batch, seq;      // the symbolic sizes
	int64_t head_dim;       // hidden / heads
	int64_t vocab_rows;     // the embedding's and the head's rows: the padded vocabulary
	char prefix[32];        // "layers.3" inside layer 3, "" outside any layer
	f8_value_id cos, sin;   // rotary tables (seq, head_dim), F8_NONE without rope
} builder;

/* Array arguments with their counts: IN(x, w) is `inputs, 2`. */
#define LIST(type, ...) \
	(const type[]){__VA_ARGS__}, (uint32_t)(sizeof((const type[]){__VA_ARGS__}) / sizeof(type))
#define IN(...) LIST(f8_value_id, __VA_ARGS__)
#define ATTRS(...) LIST(f8_attr, __VA_ARGS__)
#define NO_INPUTS NULL, 0
#define NO_ATTRS NULL, 0

static f8_attr int_attr(const char *name, int64_t value) {
	return (f8_attr){.name = name, .kind = F8_ATTR_INT, .i = value};
}
static f8_attr float_attr(const char *name, double value) {
	return (f8_attr){.name = name, .kind = F8_ATTR_FLOAT, .f = value};
}
static f8_attr string_attr(const char *name, const char *value) {
	return (f8_attr){.name = name, .kind = F8_ATTR_STRING, .s = value};
}
static f8_attr dtype_attr(const char *name, f8_dtype value) {
	return (f8_attr){.name = name, .kind = F8_ATTR_DTYPE, .dtype = value};
}
static f8_attr dim_attr(const char *name, f8_dim value) {
	return (f8_attr){.name = name, .kind = F8_ATTR_DIM, .dim = value};
}
static f8_attr ints_attr(const char *name, uint32_t n, const int64_t *items) {
	return (f8_attr){.name = name, .kind = F8_ATTR_INTS, .ints = {n, (int64_t *)items}};
}
static f8_attr dims_attr(const char *name, uint32_t n, const f8_dim *items) {
	return (f8_attr){.name = name, .kind = F8_ATTR_DIMS, .dims = {n, (f8_dim *)items}};
}
static f8_attr tensor_attr(const char *name, f8_tensor_data *value) {
	return (f8_attr){.name = name, .kind = F8_ATTR_TENSOR, .tensor = value};
}

// (batch, seq, heads, head_dim) <-> (batch, heads, seq, head_dim)
static const int64_t heads_perm[] = {0, 2, 1, 3};

static f8_status out_of_memory(builder *b) {
	return b->status = f8_diag_set(b->diag, F8_ERR_NOMEM, "out of memory building the graph "
				       "of %s", b->config->name);
}

/* `local` inside the current layer: "layers.3.attn.qkv" for "attn.qkv" (`local` alone outside
 * a layer, the layer's own name for ""). */
static void qualify(const builder *b, const char *local, char *out, size_t size) {
	const char *dot = b->prefix[0] && local[0] ? "." : "";
	snprintf(out, size, "%s%s%s", b->prefix, dot, local);
}

/* The scope string for `local` (see qualify), in the graph's arena; NULL after a failure. */
static const char *scope(builder *b, const char *local) {
	if (b->status)
		return NULL;
	char name[MAX_NAME];
	qualify(b, local, name, sizeof name);
	const char *copy = f8_arena_strdup(b->graph->arena, name);
	if (!copy)
		out_of_memory(b);
	return copy;
}

/* A parameter `owner`.`leaf` (owner a scope string) of the config's dtype and shape `dims`. */
static f8_value_id param(builder *b, const char *owner, const char *leaf, uint8_t rank,
			 const int64_t *dims) {
	if (b->status)
		return F8_NONE;
	char name[MAX_NAME];
	snprintf(name, sizeof name, "%s.%s", owner, leaf);
	f8_type type = {.dtype = b->config->dtype, .shape = {.rank = rank}};
	for (int i = 0; i < rank; i++)
		type.shape.dims[i] = f8_dim_const(dims[i]);
	f8_value_id id;
	b->status = f8_graph_add_input(b->graph, name, F8_ROLE_PARAMETER, &type, &id, b->diag);
	return b->status ? F8_NONE : id;
}

/*
 * Adds `op` in `scope` reading `inputs`, with attributes `attrs` (in schema order) and
 * n_outputs (at most 3) outputs named by qualify(`names`[i]), whose ids go to `outputs`.
 */
static void add_node(builder *b, f8_op op, const char *scope, const f8_value_id *inputs,
		     uint32_t n_inputs, const f8_attr *attrs, uint32_t n_attrs,
		     const char *const *names, uint32_t n_outputs, f8_value_id *outputs) {
	assert(n_outputs <= 3);
	for (uint32_t i = 0; i < n_outputs; i++)
		outputs[i] = F8_NONE;
	if (b->status)
		return;
	char full[3][MAX_NAME];
	const char *full_names[3];
	for (uint32_t i = 0; i < n_outputs; i++) {
		qualify(b, names[i], full[i], sizeof full[i]);
		full_names[i] = full[i];
	}
	f8_node_id id;
	b->status = f8_graph_add_node(b->graph, op, inputs, n_inputs, n_outputs, full_names, &id,
				      b->diag);
	if (!b->status && n_attrs && f8_node_set_attrs(b->graph, id, attrs, n_attrs))
		out_of_memory(b);
	if (b->status)
		return;
	f8_node *node = f8_graph_node(b->graph, id);
	node->scope = scope;
	memcpy(outputs, node->outputs, n_outputs * sizeof *outputs);
}

/* add_node for the usual single output, named qualify(`name`); returns its id. */
static f8_value_id node(builder *b, f8_op op, const char *scope, const char *name,
			const f8_value_id *inputs, uint32_t n_inputs, const f8_attr *attrs,
			uint32_t n_attrs) {
	f8_value_id output;
	add_node(b, op, scope, inputs, n_inputs, attrs, n_attrs, &name, 1, &output);
	return output;
}

/* `x` normalized by the config's norm, with parameters `local`.weight (and .bias). */
static f8_value_id norm(builder *b, const char *local, f8_value_id x) {
	const f8_json_model_config *config = b->config;
	const char *at = scope(b, local);
	bool layer_norm = config->norm == F8_JSON_NORM_LAYERNORM, beta = layer_norm && config->bias;
	f8_value_id gamma = param(b, at, "weight", 1, &config->hidden);
	f8_value_id bias = beta ? param(b, at, "bias", 1, &config->hidden) : F8_NONE;
	return node(b, layer_norm ? F8_OP_LAYER_NORM : F8_OP_RMS_NORM, at, local,
		    (const f8_value_id[]){x, gamma, bias}, beta ? 3 : 2,
		    ATTRS(float_attr("epsilon", config->norm_eps)));
}

/* `x` (..., k) times `local`.weight (n, k) as PyTorch stores it, plus `local`.bias (n). */
static f8_value_id linear(builder *b, const char *local, f8_value_id x, int64_t n, int64_t k,
			  bool has_bias) {
	const char *at = scope(b, local);
	f8_value_id weight = param(b, at, "weight", 2, (const int64_t[]){n, k});
	f8_value_id bias = has_bias ? param(b, at, "bias", 1, &n) : F8_NONE;
	return node(b, F8_OP_LINEAR, at, local, (const f8_value_id[]){x, weight, bias},
		    has_bias ? 3 : 2, NO_ATTRS);
}

/* The config's MLP activation of `x`; SwiGLU halves the last dim ([gate | up] -> silu(gate)*up). */
static f8_value_id activation(builder *b, const char *at, const char *name, f8_value_id x) {
	switch (b->config->act) {
	case F8_JSON_ACT_GELU:
		return node(b, F8_OP_GELU, at, name, IN(x), NO_ATTRS);
	case F8_JSON_ACT_GELU_TANH:
		return node(b, F8_OP_GELU, at, name, IN(x), ATTRS(string_attr("approximate", "tanh")));
	default:
		return node(b, F8_OP_SWIGLU, at, name, IN(x), NO_ATTRS);
	}
}

/* x (batch, seq, n_heads * head_dim) -> (batch, n_heads, seq, head_dim), as Attention takes it;
 * the values are named `name`_bshd and `name`_bhsd. */
static f8_value_id split_heads(builder *b, const char *at, const char *name, f8_value_id x,
			       int64_t n_heads) {
	char bshd[MAX_NAME], bhsd[MAX_NAME];
	snprintf(bshd, sizeof bshd, "%s_bshd", name);
	snprintf(bhsd, sizeof bhsd, "%s_bhsd", name);
	const f8_dim shape[] = {b->batch, b->seq, f8_dim_const(n_heads), f8_dim_const(b->head_dim)};
	f8_value_id four_d = node(b, F8_OP_RESHAPE, at, bshd, IN(x),
				  ATTRS(dims_attr("shape", 4, shape)));
	return node(b, F8_OP_TRANSPOSE, at, bhsd, IN(four_d), ATTRS(ints_attr("perm", 4, heads_perm)));
}

/* inv_freq[i] = 1 / theta^(2i / head_dim), in f32 arithmetic as torch computes it. */
static void fill_inverse_frequencies(const builder *b, float *inv_freq, int64_t half) {
	for (int64_t i = 0; i < half; i++) {
		float exponent = (float)(2 * i) / (float)b->head_dim;
		inv_freq[i] = 1.0f / powf((float)b->config->rope_theta, exponent);
	}
}

/* The rotary tables cos and sin (seq, head_dim), once for all layers, into b->cos and b->sin:
 * angles = positions (seq, 1) times inv_freq (1, head_dim/2), broadcast, twice over. An
 * elementwise product, not a matrix product of K = 1: nothing here is a GEMM to plan for. */
static void rope_tables(builder *b) {
	if (b->status)
		return;
	int64_t half = b->head_dim / 2;
	float *inv_freq = f8_malloc((size_t)half * sizeof *inv_freq);
	if (!inv_freq) {
		out_of_memory(b);
		return;
	}
	fill_inverse_frequencies(b, inv_freq, half);
	f8_tensor_data table = {.dtype = F8_DTYPE_F32,
				.shape = {.rank = 2, .dims = {f8_dim_const(1), f8_dim_const(half)}},
				.n_bytes = (size_t)half * sizeof *inv_freq,
				.data = inv_freq};
	const char *at = scope(b, "rope");
	f8_value_id positions = node(b, F8_OP_RANGE, at, "rope.positions", NO_INPUTS,
				     ATTRS(dim_attr("limit", b->seq)));
	f8_value_id real = node(b, F8_OP_CAST, at, "rope.positions_f32", IN(positions),
				ATTRS(dtype_attr("to", F8_DTYPE_F32)));
	f8_value_id column = node(b, F8_OP_UNSQUEEZE, at, "rope.positions_column", IN(real),
				  ATTRS(ints_attr("axes", 1, (const int64_t[]){1})));
	f8_value_id frequencies = node(b, F8_OP_CONSTANT, at, "rope.inv_freq", NO_INPUTS,
				       ATTRS(tensor_attr("value", &table)));
	f8_free(inv_freq); // the node holds a copy
	f8_value_id freqs = node(b, F8_OP_MUL, at, "rope.freqs", IN(column, frequencies), NO_ATTRS);
	f8_value_id angles = node(b, F8_OP_CONCAT, at, "rope.angles", IN(freqs, freqs),
				  ATTRS(int_attr("axis", -1)));
	bool cast = b->config->dtype != F8_DTYPE_F32;
	b->cos = node(b, F8_OP_COS, at, cast ? "rope.cos_f32" : "rope.cos", IN(angles), NO_ATTRS);
	b->sin = node(b, F8_OP_SIN, at, cast ? "rope.sin_f32" : "rope.sin", IN(angles), NO_ATTRS);
	if (cast) { // to the activations' dtype, as Hugging Face's rotary embedding does
		f8_attr to = dtype_attr("to", b->config->dtype);
		b->cos = node(b, F8_OP_CAST, at, "rope.cos", IN(b->cos), &to, 1);
		b->sin = node(b, F8_OP_CAST, at, "rope.sin", IN(b->sin), &to, 1);
	}
}

/* The attention half of a layer: x + proj(attention(norm(x))). */
static f8_value_id attention_block(builder *b, f8_value_id x) {
	const f8_json_model_config *config = b->config;
	int64_t q_width = config->heads * b->head_dim, kv_width = config->kv_heads * b->head_dim;
	f8_value_id h = norm(b, "attn_norm", x);
	f8_value_id qkv = linear(b, "attn.qkv", h, q_width + 2 * kv_width, config->hidden,
				 config->bias);
	const char *at = scope(b, "attn");
	const f8_dim widths[] = {f8_dim_const(q_width), f8_dim_const(kv_width), f8_dim_const(kv_width)};
	f8_value_id parts[3];
	add_node(b, F8_OP_SPLIT, at, IN(qkv), ATTRS(int_attr("axis", 2), dims_attr("split", 3, widths)),
		 (const char *const[]){"attn.q", "attn.k", "attn.v"}, 3, parts);
	f8_value_id q = split_heads(b, at, "attn.q", parts[0], config->heads);
	f8_value_id k = split_heads(b, at, "attn.k", parts[1], config->kv_heads);
	f8_value_id v = split_heads(b, at, "attn.v", parts[2], config->kv_heads);
	if (config->pos == F8_JSON_POS_ROPE) {
		const char *rope = scope(b, "attn.rope");
		q = node(b, F8_OP_ROPE, rope, "attn.q_rope", IN(q, b->cos, b->sin), NO_ATTRS);
		k = node(b, F8_OP_ROPE, rope, "attn.k_rope", IN(k, b->cos, b->sin), NO_ATTRS);
	}
	f8_value_id a = node(b, F8_OP_ATTENTION, scope(b, "attn.core"), "attn.core", IN(q, k, v),
			     ATTRS(int_attr("causal", 1)));
	f8_value_id t = node(b, F8_OP_TRANSPOSE, at, "attn.core_bshd", IN(a),
			     ATTRS(ints_attr("perm", 4, heads_perm)));
	const f8_dim merged_shape[] = {b->batch, b->seq, f8_dim_const(q_width)};
	f8_value_id merged = node(b, F8_OP_RESHAPE, at, "attn.merged", IN(t),
				  ATTRS(dims_attr("shape", 3, merged_shape)));
	f8_value_id o = linear(b, "attn.proj", merged, config->hidden, q_width, config->bias);
	return node(b, F8_OP_ADD, scope(b, ""), "attn_residual", IN(x, o), NO_ATTRS);
}

/* The dense MLP half of a layer: x + fc2(act(fc1(norm(x)))). */
static f8_value_id mlp_block(builder *b, f8_value_id x) {
	const f8_json_model_config *config = b->config;
	int64_t fc1_width = config->act == F8_JSON_ACT_SWIGLU ? 2 * config->ffn : config->ffn;
	f8_value_id h = norm(b, "mlp_norm", x);
	f8_value_id fc1 = linear(b, "mlp.fc1", h, fc1_width, config->hidden, config->bias);
	f8_value_id act = activation(b, scope(b, "mlp"), "mlp.act", fc1);
	f8_value_id fc2 = linear(b, "mlp.fc2", act, config->hidden, config->ffn, config->bias);
	return node(b, F8_OP_ADD, scope(b, ""), "mlp_residual", IN(x, fc2), NO_ATTRS);
}

/* One expert projection: GroupedLinear of the rows sorted by expert with `local`.weight
 * (experts, n, k). */
static f8_value_id expert_linear(builder *b, const char *local, f8_value_id rows,
				 f8_value_id counts, int64_t n, int64_t k) {
	const char *at = scope(b, local);
	f8_value_id weight = param(b, at, "weight", 3, (const int64_t[]){b->config->experts, n, k});
	return node(b, F8_OP_GROUPED_LINEAR, at, local, IN(rows, weight, counts), NO_ATTRS);
}

/* The mixture-of-experts half of a layer (Mixtral): tokens flattened to (batch*seq, hidden),
 * routed to top_k experts, run through each expert's MLP, combined, and shaped back. */
static f8_value_id moe_block(builder *b, f8_value_id x) {
	const f8_json_model_config *config = b->config;
	int64_t fc1_width = config->act == F8_JSON_ACT_SWIGLU ? 2 * config->ffn : config->ffn;
	f8_value_id h = norm(b, "mlp_norm", x);
	const char *at = scope(b, "mlp");
	const f8_dim flat_shape[] = {f8_dim_const(-1), f8_dim_const(config->hidden)};
	f8_value_id tokens = node(b, F8_OP_RESHAPE, at, "mlp.tokens", IN(h),
				  ATTRS(dims_attr("shape", 2, flat_shape)));
	f8_value_id logits = linear(b, "mlp.router", tokens, config->experts, config->hidden, false);
	f8_value_id route[2], sorted[2]; // (probs, expert ids); (rows, counts)
	add_node(b, F8_OP_ROUTER, scope(b, "mlp.router"), IN(logits),
		 ATTRS(int_attr("top_k", config->top_k), int_attr("normalize", 1)),
		 (const char *const[]){"mlp.router.probs", "mlp.router.experts"}, 2, route);
	add_node(b, F8_OP_MOE_DISPATCH, scope(b, "mlp.dispatch"), IN(tokens, route[1]),
		 ATTRS(int_attr("experts", config->experts)),
		 (const char *const[]){"mlp.dispatch.rows", "mlp.dispatch.counts"}, 2, sorted);
	f8_value_id fc1 = expert_linear(b, "mlp.experts.fc1", sorted[0], sorted[1], fc1_width,
					config->hidden);
	f8_value_id act = activation(b, scope(b, "mlp.experts"), "mlp.experts.act", fc1);
	f8_value_id fc2 = expert_linear(b, "mlp.experts.fc2", act, sorted[1], config->hidden,
					config->ffn);
	f8_value_id combined = node(b, F8_OP_MOE_COMBINE, scope(b, "mlp.combine"), "mlp.combine",
				    IN(fc2, route[0], route[1]), NO_ATTRS);
	const f8_dim shape[] = {b->batch, b->seq, f8_dim_const(config->hidden)};
	f8_value_id y = node(b, F8_OP_RESHAPE, at, "mlp.out", IN(combined),
			     ATTRS(dims_attr("shape", 3, shape)));
	return node(b, F8_OP_ADD, scope(b, ""), "mlp_residual", IN(x, y), NO_ATTRS);
}

/* The symbols batch and seq, and the input %tokens : i64[batch, seq]; its id into *tokens. */
static void declare_tokens(builder *b, f8_value_id *tokens) {
	uint16_t batch, seq;
	if (f8_graph_intern_symbol(b->graph, "batch", 5, &batch) ||
	    f8_graph_intern_symbol(b->graph, "seq", 3, &seq)) {
		out_of_memory(b);
		return;
	}
	b->batch = f8_dim_symbol(batch);
	b->seq = f8_dim_symbol(seq);
	f8_type type = {.dtype = F8_DTYPE_I64, .shape = {.rank = 2, .dims = {b->batch, b->seq}}};
	b->status = f8_graph_add_input(b->graph, "tokens", F8_ROLE_INPUT, &type, tokens, b->diag);
}

/* Token embeddings, plus learned positions: the table (seq_max, hidden) sliced to seq rows.
 * embed.weight's id goes to *embed_weight for a tied head. */
static f8_value_id embeddings(builder *b, f8_value_id tokens, f8_value_id *embed_weight) {
	const f8_json_model_config *config = b->config;
	const char *at = scope(b, "embed");
	*embed_weight = param(b, at, "weight", 2, (const int64_t[]){b->vocab_rows, config->hidden});
	f8_value_id x = node(b, F8_OP_EMBEDDING, at, "embed", IN(tokens, *embed_weight), NO_ATTRS);
	if (config->pos != F8_JSON_POS_LEARNED)
		return x;
	const char *pos_at = scope(b, "pos_embed");
	f8_value_id table = param(b, pos_at, "weight", 2,
				  (const int64_t[]){config->seq, config->hidden});
	const f8_dim starts[] = {f8_dim_const(0)};
	f8_value_id positions = node(b, F8_OP_SLICE, pos_at, "pos_embed", IN(table),
				     ATTRS(dims_attr("starts", 1, starts), dims_attr("ends", 1, &b->seq)));
	return node(b, F8_OP_ADD, at, "embed_sum", IN(x, positions), NO_ATTRS);
}

/* The final norm and the output head: logits (batch, seq, vocab). */
static f8_value_id head(builder *b, f8_value_id x, f8_value_id embed_weight) {
	const f8_json_model_config *config = b->config;
	f8_value_id h = norm(b, "final_norm", x);
	const char *at = scope(b, "head");
	const int64_t dims[] = {b->vocab_rows, config->hidden};
	f8_value_id weight = config->tie_embeddings ? embed_weight
						    : param(b, at, "weight", 2, dims);
	return node(b, F8_OP_LINEAR, at, "logits", IN(h, weight), NO_ATTRS);
}

/* Adds every node of the model to b->graph. */
static void build_layers(builder *b) {
	const f8_json_model_config *config = b->config;
	f8_value_id tokens = F8_NONE, embed_weight;
	declare_tokens(b, &tokens);
	f8_value_id x = embeddings(b, tokens, &embed_weight);
	if (config->pos == F8_JSON_POS_ROPE)
		rope_tables(b);
	for (int64_t layer = 0; layer < config->layers && !b->status; layer++) {
		snprintf(b->prefix, sizeof b->prefix, "layers.%lld", (long long)layer);
		x = attention_block(b, x);
		x = config->arch == F8_JSON_ARCH_MOE ? moe_block(b, x) : mlp_block(b, x);
	}
	b->prefix[0] = '\0';
	f8_value_id logits = head(b, x, embed_weight);
	if (!b->status && f8_graph_add_output(b->graph, logits))
		out_of_memory(b);
}

f8_status f8_json_model_build(const f8_json_model_config *config, f8_graph **out,
			      f8_diag *diag) {
	assert(config->heads > 0 && config->hidden % config->heads == 0);
	*out = NULL;
	builder b = {.config = config, .diag = diag, .head_dim = config->hidden / config->heads,
		     .vocab_rows = f8_json_model_padded_vocab(config),
		     .cos = F8_NONE, .sin = F8_NONE};
	if (f8_graph_create(config->name, &b.graph))
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory creating the graph");
	build_layers(&b);
	if (!b.status) {
		b.status = f8_pipeline_run(b.graph, "canonicalize", true, diag);
		if (b.status == F8_ERR_INVALID) // the config was checked: the builder is wrong
			f8_diag_hint(diag, "this is a bug in f8c's JSON frontend; please report it "
					   "with the model description");
	}
	if (b.status) {
		f8_graph_destroy(b.graph);
		return b.status;
	}
	*out = b.graph;
	return F8_OK;
}
