/*
 * f8c's JSON model descriptions: a short description of a GPT, Llama or MoE architecture
 * ({"arch": "gpt", "layers": 12, "hidden": 768, ...}) built directly into the IR with high-level
 * ops and scope names like `layers.3.attn.qkv`.
 *
 * Loading is two steps, each usable alone: reading the description into an f8_json_model_config
 * (every field checked, defaults filled in by architecture, errors at the field's line:column),
 * and building the forward graph of a config. frontend/README.md lists the fields and defaults.
 */
#ifndef F8_FRONTEND_JSON_MODEL_JSON_H
#define F8_FRONTEND_JSON_MODEL_JSON_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // int64_t

#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/dtype.h" // f8_dtype
#include "ir/graph.h" // f8_graph

/* X(ENUM, JSON name): the architectures a description may name in "arch". */
#define F8_JSON_ARCH_LIST(X) \
	X(GPT, "gpt")        \
	X(LLAMA, "llama")    \
	X(MOE, "moe")

typedef enum f8_json_arch {
#define F8_JSON_ARCH_ENUM(e, name) F8_JSON_ARCH_##e,
	F8_JSON_ARCH_LIST(F8_JSON_ARCH_ENUM)
#undef F8_JSON_ARCH_ENUM
	F8_JSON_ARCH_COUNT
} f8_json_arch;

/* X(ENUM, JSON name): the normalizations of "norm". */
#define F8_JSON_NORM_LIST(X)           \
	X(LAYERNORM, "layernorm")      \
	X(RMSNORM, "rmsnorm")

typedef enum f8_json_norm {
#define F8_JSON_NORM_ENUM(e, name) F8_JSON_NORM_##e,
	F8_JSON_NORM_LIST(F8_JSON_NORM_ENUM)
#undef F8_JSON_NORM_ENUM
	F8_JSON_NORM_COUNT
} f8_json_norm;

/* X(ENUM, JSON name): the MLP activations of "act"; SWIGLU doubles the first projection. */
#define F8_JSON_ACT_LIST(X)            \
	X(GELU, "gelu")                \
	X(GELU_TANH, "gelu_tanh")      \
	X(SWIGLU, "swiglu")

typedef enum f8_json_act {
#define F8_JSON_ACT_ENUM(e, name) F8_JSON_ACT_##e,
	F8_JSON_ACT_LIST(F8_JSON_ACT_ENUM)
#undef F8_JSON_ACT_ENUM
	F8_JSON_ACT_COUNT
} f8_json_act;

/* X(ENUM, JSON name): the position encodings of "pos". */
#define F8_JSON_POS_LIST(X)        \
	X(LEARNED, "learned")      \
	X(ROPE, "rope")

typedef enum f8_json_pos {
#define F8_JSON_POS_ENUM(e, name) F8_JSON_POS_##e,
	F8_JSON_POS_LIST(F8_JSON_POS_ENUM)
#undef F8_JSON_POS_ENUM
	F8_JSON_POS_COUNT
} f8_json_pos;

const char *f8_json_arch_name(f8_json_arch arch);
const char *f8_json_norm_name(f8_json_norm norm);
const char *f8_json_act_name(f8_json_act act);
const char *f8_json_pos_name(f8_json_pos pos);

enum {
	F8_JSON_MODEL_NAME_MAX = 128,       // bytes of "name", terminator included
	F8_JSON_MODEL_MAX_BYTES = 1 << 20,  // a description is a few hundred bytes; refuse more
	F8_JSON_MODEL_MAX_SIZE = 1 << 20,   // the largest vocab, seq, hidden, heads, ffn, experts
	F8_JSON_MODEL_MAX_LAYERS = 4096,
};

/* A model description with every default filled in and every constraint checked. */
typedef struct f8_json_model_config {
	char name[F8_JSON_MODEL_NAME_MAX]; // the graph's name
	f8_json_arch arch;
	int64_t vocab;          // token vocabulary
	int64_t seq;            // the longest sequence (rows of the learned position table)
	int64_t layers;
	int64_t hidden;         // model width
	int64_t heads;          // query heads; hidden / heads is the head dimension
	int64_t kv_heads;       // key/value heads (grouped-query attention), divides heads
	int64_t ffn;            // MLP width (per expert for moe)
	int64_t experts, top_k; // moe only; 0 otherwise
	f8_json_norm norm;
	double norm_eps;
	f8_json_act act;
	f8_json_pos pos;
	double rope_theta;      // rope only; 0 otherwise
	bool bias;              // biases on the attention and MLP projections (and LayerNorm)
	bool tie_embeddings;    // the output head reads embed.weight
	f8_dtype dtype;         // the parameters' element type: f32 or bf16
	// Megatron-LM's make_vocab_size_divisible_by (default 128): the embedding and the head
	// have vocab rounded up to a multiple of this many rows (f8_json_model_padded_vocab), so
	// that the head's GEMMs, whose rows are vocabulary-long, get aligned rows and fast
	// kernels. The rows past vocab are dummy tokens no id names (Megatron-LM's "padded vocab
	// with N dummy tokens"); their logits count in the softmax, as in Megatron-LM. 1: none.
	int64_t vocab_multiple;
} f8_json_model_config;

enum { F8_JSON_VOCAB_MULTIPLE_DEFAULT = 128 }; // Megatron-LM's --make-vocab-size-divisible-by

/* The embedding's and the head's rows: vocab rounded up to a multiple of vocab_multiple. */
int64_t f8_json_model_padded_vocab(const f8_json_model_config *config);

/*
 * Reads the JSON description `text` (`len` bytes; `filename` names it in diagnostics and, when
 * the description has no "name", gives the graph's name) into *config. Fails with F8_ERR_PARSE
 * for malformed JSON, F8_ERR_INVALID for a field that is unknown, missing, of the wrong type or
 * out of range, F8_ERR_NOMEM when out of memory; `diag` then names the file, line and column of
 * the offending field (of the object, for a missing one), the field, and a hint.
 */
f8_status f8_json_model_config_read(const char *text, size_t len, const char *filename,
				    f8_json_model_config *config, f8_diag *diag);

/*
 * Builds the forward graph (inference form) of `config`, which f8_json_model_config_read has
 * checked: input %tokens : i64[batch, seq], output %logits : [batch, seq, vocab], parameters
 * and node scopes named like PyTorch modules (layers.3.attn.qkv.weight), types inferred and
 * verified. On success *out owns the graph; on failure *out is NULL (F8_ERR_NOMEM, or an
 * F8_ERR_INVALID that is a bug in the builder).
 */
f8_status f8_json_model_build(const f8_json_model_config *config, f8_graph **out,
			      f8_diag *diag);

/*
 * Builds the forward graph described by the JSON `text` (`len` bytes; `filename` names it in
 * diagnostics), its vocabulary padded to a multiple of `vocab_multiple` (0: what the
 * description says, by default 128; a command line's --make-vocab-size-divisible-by). On
 * success *out owns the graph, types inferred; on failure *out is NULL and `diag` names the
 * JSON line:column and the field at fault.
 */
f8_status f8_json_model_parse(const char *text, size_t len, const char *filename,
			      int64_t vocab_multiple, f8_graph **out, f8_diag *diag);

/* f8_json_model_parse on the contents of the file at `path` (at most F8_JSON_MODEL_MAX_BYTES). */
f8_status f8_json_model_load(const char *path, int64_t vocab_multiple, f8_graph **out,
			     f8_diag *diag);

#endif
