/*
 * Reading a JSON model description into an f8_json_model_config: jansson parses, a scan of the
 * source text (json_source.h) finds where each top-level field stands, and every field is
 * checked for its type and range, alone and against the others, with defaults by architecture
 * filled in the way Megatron-LM and Hugging Face users expect. Every error names the field and
 * its line:column.
 */
#include "frontend/json/model_json.h" // f8_json_model_config, f8_json_model_config_read

#include <assert.h>  // static_assert
#include <jansson.h> // json_loadb, json_t
#include <math.h>    // isfinite, INFINITY
#include <stdarg.h>  // va_list
#include <stdio.h>   // snprintf
#include <stdint.h>  // SIZE_MAX
#include <string.h>  // strcmp, strlen, strrchr, strchr, memchr, memcpy

#include "frontend/json/json_source.h" // f8_json_source, f8_json_source_members
#include "ir/alloc.h"                  // f8_malloc, f8_free
#include "ir/json.h"                   // f8_jansson_enter, f8_jansson_leave

/* X(ENUM, key, what it is, an example value): the fields of a description, in the order the
 * checks for missing ones run. */
#define FIELD_LIST(X)                                                                        \
	X(ARCH, "arch", "the architecture", "\"gpt\"")                                       \
	X(VOCAB, "vocab", "the size of the token vocabulary", "50257")                       \
	X(SEQ, "seq", "the longest sequence the model takes", "1024")                        \
	X(LAYERS, "layers", "the number of transformer blocks", "12")                        \
	X(HIDDEN, "hidden", "the model width", "768")                                        \
	X(HEADS, "heads", "the number of attention heads", "12")                             \
	X(EXPERTS, "experts", "the number of experts in each MoE layer", "8")                \
	X(TOP_K, "top_k", "how many experts each token goes to", "2")                        \
	X(KV_HEADS, "kv_heads", "the number of key/value heads", "8")                        \
	X(FFN, "ffn", "the MLP width", "3072")                                               \
	X(NAME, "name", "the graph's name", "\"gpt2-124m\"")                                 \
	X(NORM, "norm", "the normalization", "\"layernorm\"")                                \
	X(NORM_EPS, "norm_eps", "the normalization's epsilon", "1e-05")                      \
	X(ACT, "act", "the MLP activation", "\"gelu_tanh\"")                                 \
	X(POS, "pos", "the position encoding", "\"learned\"")                                \
	X(ROPE_THETA, "rope_theta", "the rotary base", "10000")                              \
	X(BIAS, "bias", "whether projections and norms have biases", "true")                 \
	X(TIE_EMBEDDINGS, "tie_embeddings", "whether the head reads embed.weight", "true")   \
	X(DTYPE, "dtype", "the parameters' element type", "\"f32\"")                         \
	X(VOCAB_MULTIPLE, "make_vocab_size_divisible_by",                                     \
	  "the multiple the vocabulary is padded to", "128")                                 \
	X(COMMENT, "comment", "free text for people, ignored", "\"from the paper\"")

typedef enum field {
#define FIELD_ENUM(e, key, what, example) FIELD_##e,
	FIELD_LIST(FIELD_ENUM)
#undef FIELD_ENUM
	FIELD_COUNT
} field;

static const struct {
	const char *key, *what, *example;
} fields[] = {
#define FIELD_ROW(e, key, what, example) {key, what, example},
	FIELD_LIST(FIELD_ROW)
#undef FIELD_ROW
};
static_assert(sizeof fields / sizeof fields[0] == FIELD_COUNT, "one row per field");

/* The names of each choice, from the lists in model_json.h: what read_choice accepts and
 * what f8_json_*_name gives back. */
#define NAME_TABLE(type, LIST, COUNT)                                                   \
	static const char *const type##_names[] = {LIST(NAME_ENTRY)};                   \
	static_assert(sizeof type##_names / sizeof type##_names[0] == COUNT,            \
		      #type " names must match the enum");                              \
	const char *f8_json_##type##_name(f8_json_##type value) {                       \
		return (unsigned)value < COUNT ? type##_names[value] : "?";             \
	}
#define NAME_ENTRY(e, name) name,
NAME_TABLE(arch, F8_JSON_ARCH_LIST, F8_JSON_ARCH_COUNT)
NAME_TABLE(norm, F8_JSON_NORM_LIST, F8_JSON_NORM_COUNT)
NAME_TABLE(act, F8_JSON_ACT_LIST, F8_JSON_ACT_COUNT)
NAME_TABLE(pos, F8_JSON_POS_LIST, F8_JSON_POS_COUNT)
#undef NAME_ENTRY
#undef NAME_TABLE
// The parameter dtypes a description may ask for: FP32 master weights, or BF16.
static const char *const dtype_names[] = {"f32", "bf16"};
static const f8_dtype dtypes[] = {F8_DTYPE_F32, F8_DTYPE_BF16};
#define COUNT_OF(array) (int)(sizeof array / sizeof array[0])

typedef struct reader {
	f8_json_source source;
	json_t *root;
	size_t object;                 // offset of the top-level '{'
	json_t *values[FIELD_COUNT];   // the given fields, NULL where not given
	size_t key_at[FIELD_COUNT];    // offsets of their keys
	size_t value_at[FIELD_COUNT];  // and of their values
	f8_diag *diag;
	f8_jansson_scope jansson;      // jansson's allocations go through f8_malloc meanwhile
} reader;

/* Fails with `status` at byte `offset`; `hint` (may be NULL) replaces any earlier hint. */
static f8_status fail_at(reader *r, size_t offset, f8_status status, const char *hint,
			 const char *format, ...) __attribute__((format(printf, 5, 6)));
static f8_status fail_at(reader *r, size_t offset, f8_status status, const char *hint,
			 const char *format, ...) {
	va_list args;
	va_start(args, format);
	f8_diag_setv(r->diag, status, format, args);
	va_end(args);
	f8_json_source_diag_at(&r->source, offset, r->diag);
	if (r->diag)
		snprintf(r->diag->hint, sizeof r->diag->hint, "%s", hint ? hint : "");
	return status;
}

/* Where to point for field `f`: its value when given, else the object it is missing from. */
static size_t place_of(const reader *r, field f) {
	return r->values[f] ? r->value_at[f] : r->object;
}

static bool given(const reader *r, field f) {
	return r->values[f] != NULL;
}

/* "a string", "an integer", ...: what a JSON value is, for messages. */
static const char *kind_of(const json_t *value) {
	switch (json_typeof(value)) {
	case JSON_OBJECT:
		return "an object";
	case JSON_ARRAY:
		return "an array";
	case JSON_STRING:
		return "a string";
	case JSON_INTEGER:
		return "an integer";
	case JSON_REAL:
		return "a real number";
	case JSON_TRUE:
		return "true";
	case JSON_FALSE:
		return "false";
	default:
		return "null";
	}
}

/* The wrong-type error for field `f`, which should be `expected`. */
static f8_status fail_type(reader *r, field f, const char *expected) {
	char hint[160];
	snprintf(hint, sizeof hint, "\"%s\" is %s: write it like \"%s\": %s", fields[f].key,
		 fields[f].what, fields[f].key, fields[f].example);
	return fail_at(r, place_of(r, f), F8_ERR_INVALID, hint, "\"%s\" must be %s, not %s",
		       fields[f].key, expected, kind_of(r->values[f]));
}

static f8_status fail_missing(reader *r, field f) {
	char hint[160];
	snprintf(hint, sizeof hint, "add \"%s\": %s (%s)", fields[f].key, fields[f].example,
		 fields[f].what);
	return fail_at(r, r->object, F8_ERR_INVALID, hint, "missing field \"%s\"", fields[f].key);
}

/* What Hugging Face and Megatron-LM configs call the fields, for the hint when one turns up. */
static const struct {
	const char *alias;
	field f;
} aliases[] = {
	{"model_type", FIELD_ARCH},            {"vocab_size", FIELD_VOCAB},
	{"padded_vocab_size", FIELD_VOCAB},    {"n_positions", FIELD_SEQ},
	{"n_ctx", FIELD_SEQ},                  {"max_position_embeddings", FIELD_SEQ},
	{"seq_length", FIELD_SEQ},             {"max_seq_len", FIELD_SEQ},
	{"n_layer", FIELD_LAYERS},             {"n_layers", FIELD_LAYERS},
	{"num_layers", FIELD_LAYERS},          {"num_hidden_layers", FIELD_LAYERS},
	{"n_embd", FIELD_HIDDEN},              {"hidden_size", FIELD_HIDDEN},
	{"d_model", FIELD_HIDDEN},             {"dim", FIELD_HIDDEN},
	{"n_head", FIELD_HEADS},               {"n_heads", FIELD_HEADS},
	{"num_attention_heads", FIELD_HEADS},  {"num_key_value_heads", FIELD_KV_HEADS},
	{"n_kv_heads", FIELD_KV_HEADS},        {"num_query_groups", FIELD_KV_HEADS},
	{"intermediate_size", FIELD_FFN},      {"ffn_hidden_size", FIELD_FFN},
	{"n_inner", FIELD_FFN},                {"num_local_experts", FIELD_EXPERTS},
	{"num_experts", FIELD_EXPERTS},        {"num_experts_per_tok", FIELD_TOP_K},
	{"moe_router_topk", FIELD_TOP_K},      {"rms_norm_eps", FIELD_NORM_EPS},
	{"layer_norm_epsilon", FIELD_NORM_EPS}, {"layernorm_epsilon", FIELD_NORM_EPS},
	{"hidden_act", FIELD_ACT},             {"activation_function", FIELD_ACT},
	{"tie_word_embeddings", FIELD_TIE_EMBEDDINGS}, {"torch_dtype", FIELD_DTYPE},
	{"params_dtype", FIELD_DTYPE},
};

/* The edit distance between `a` and `b`, both at most 32 bytes (more counts as far apart). */
static size_t edit_distance(const char *a, const char *b) {
	size_t la = strlen(a), lb = strlen(b), row[33];
	if (la > 32 || lb > 32)
		return SIZE_MAX;
	for (size_t j = 0; j <= lb; j++)
		row[j] = j;
	for (size_t i = 1; i <= la; i++) {
		size_t diagonal = row[0];
		row[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t above = row[j], best = diagonal + (a[i - 1] != b[j - 1]);
			if (above + 1 < best)
				best = above + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			diagonal = above;
			row[j] = best;
		}
	}
	return row[lb];
}

static f8_status fail_unknown(reader *r, const char *key, size_t at) {
	char hint[F8_DIAG_MESSAGE_MAX];
	for (int i = 0; i < COUNT_OF(aliases); i++) {
		if (strcmp(key, aliases[i].alias) == 0) {
			field f = aliases[i].f;
			snprintf(hint, sizeof hint, "f8c calls it \"%s\" (%s): \"%s\": %s",
				 fields[f].key, fields[f].what, fields[f].key, fields[f].example);
			return fail_at(r, at, F8_ERR_INVALID, hint, "unknown field \"%s\"", key);
		}
	}
	int f = 0;
	while (f < FIELD_COUNT && !(strlen(key) >= 3 && edit_distance(key, fields[f].key) <= 2))
		f++;
	if (f < FIELD_COUNT) {
		snprintf(hint, sizeof hint, "did you mean \"%s\"?", fields[f].key);
	} else { // no near miss: list the fields
		size_t used = (size_t)snprintf(hint, sizeof hint, "the fields are");
		for (f = 0; f < FIELD_COUNT; f++) {
			int n = snprintf(hint + used, sizeof hint - used, "%s %s", f ? "," : "",
					 fields[f].key);
			if (n < 0 || used + (size_t)n >= sizeof hint)
				break;
			used += (size_t)n;
		}
	}
	return fail_at(r, at, F8_ERR_INVALID, hint, "unknown field \"%.60s\"", key);
}

/* Matches the top-level keys, in source order, to the fields; records values and places.
 * jansson keeps an object's keys in the order they were read, so its i-th key is the i-th key
 * of the scan. Duplicates were refused by jansson, so among any FIELD_COUNT + 1 keys one is
 * unknown: no more need scanning. */
static f8_status bind_fields(reader *r) {
	f8_json_member members[FIELD_COUNT + 1];
	size_t n_members;
	if (!json_is_object(r->root) ||
	    !f8_json_source_members(&r->source, &r->object, members, FIELD_COUNT + 1, &n_members))
		return fail_at(r, r->object, F8_ERR_INVALID,
			       "write one object: {\"arch\": \"gpt\", \"vocab\": 50257, ...}",
			       "a model description is a JSON object, not %s", kind_of(r->root));
	if (n_members != json_object_size(r->root))
		return fail_at(r, r->object, F8_ERR_INVALID, NULL, "cannot place the object's fields "
			       "(%zu found in the text, %zu parsed)", n_members,
			       json_object_size(r->root));
	size_t i = 0;
	const char *key;
	json_t *value;
	json_object_foreach(r->root, key, value) {
		int f = 0;
		while (f < FIELD_COUNT && strcmp(key, fields[f].key) != 0)
			f++;
		if (f == FIELD_COUNT)
			return fail_unknown(r, key, members[i].key);
		r->values[f] = value;
		r->key_at[f] = members[i].key;
		r->value_at[f] = members[i].value;
		i++;
	}
	return F8_OK;
}

/* A size field: a positive integer of at most `max`, into *out when given. */
static f8_status read_size(reader *r, field f, int64_t max, int64_t *out) {
	json_t *value = r->values[f];
	if (!value)
		return F8_OK;
	if (!json_is_integer(value))
		return fail_type(r, f, "a positive integer");
	json_int_t n = json_integer_value(value);
	if (n < 1) {
		char hint[160];
		snprintf(hint, sizeof hint, "\"%s\" is %s: at least 1", fields[f].key, fields[f].what);
		return fail_at(r, place_of(r, f), F8_ERR_INVALID, hint, "\"%s\" is %lld; it must be "
			       "positive", fields[f].key, (long long)n);
	}
	if (n > max)
		return fail_at(r, place_of(r, f), F8_ERR_INVALID, NULL, "\"%s\" is %lld, more than "
			       "f8c takes (at most %lld)", fields[f].key, (long long)n, (long long)max);
	*out = n;
	return F8_OK;
}

/* A string field with one of `count` values `names`: its index into *out when given. */
static f8_status read_choice(reader *r, field f, const char *const *names, int count, int *out) {
	json_t *value = r->values[f];
	if (!value)
		return F8_OK;
	char hint[160];
	size_t used = (size_t)snprintf(hint, sizeof hint, "\"%s\" is %s, one of", fields[f].key,
				       fields[f].what);
	for (int i = 0; i < count && used < sizeof hint; i++)
		used += (size_t)snprintf(hint + used, sizeof hint - used, "%s \"%s\"", i ? "," : "",
					 names[i]);
	if (!json_is_string(value))
		return fail_at(r, place_of(r, f), F8_ERR_INVALID, hint, "\"%s\" must be a string, not "
			       "%s", fields[f].key, kind_of(value));
	for (int i = 0; i < count; i++) {
		if (strcmp(json_string_value(value), names[i]) == 0) {
			*out = i;
			return F8_OK;
		}
	}
	return fail_at(r, place_of(r, f), F8_ERR_INVALID, hint, "\"%s\" is \"%.60s\", which f8c "
		       "does not know", fields[f].key, json_string_value(value));
}

/* A number field in (low, high), into *out when given. */
static f8_status read_real(reader *r, field f, double low, double high, double *out) {
	json_t *value = r->values[f];
	if (!value)
		return F8_OK;
	if (!json_is_number(value))
		return fail_type(r, f, "a number");
	double x = json_number_value(value);
	if (!(x > low && x < high && isfinite(x))) {
		char hint[160];
		snprintf(hint, sizeof hint, "\"%s\" is %s, like \"%s\": %s", fields[f].key,
			 fields[f].what, fields[f].key, fields[f].example);
		if (isfinite(high))
			return fail_at(r, place_of(r, f), F8_ERR_INVALID, hint, "\"%s\" is %g; it must "
				       "be more than %g and less than %g", fields[f].key, x, low, high);
		return fail_at(r, place_of(r, f), F8_ERR_INVALID, hint, "\"%s\" is %g; it must be "
			       "more than %g", fields[f].key, x, low);
	}
	*out = x;
	return F8_OK;
}

static f8_status read_bool(reader *r, field f, bool *out) {
	json_t *value = r->values[f];
	if (!value)
		return F8_OK;
	if (!json_is_boolean(value))
		return fail_type(r, f, "true or false");
	*out = json_is_true(value);
	return F8_OK;
}

/* The graph's name without a "name" field: the file's name less its directory and a ".json"
 * extension (or the architecture's name). */
static void default_name(const char *filename, f8_json_model_config *config) {
	const char *base = filename && filename[0] ? filename : "";
	if (strrchr(base, '/'))
		base = strrchr(base, '/') + 1;
	size_t len = strlen(base);
	if (len > 5 && strcmp(base + len - 5, ".json") == 0)
		len -= 5;
	if (len == 0) {
		base = f8_json_arch_name(config->arch);
		len = strlen(base);
	}
	snprintf(config->name, sizeof config->name, "%.*s", (int)len, base);
}

/* "name": printable text that fits. */
static f8_status read_name(reader *r, f8_json_model_config *config) {
	json_t *value = r->values[FIELD_NAME];
	if (!json_is_string(value))
		return fail_type(r, FIELD_NAME, "a string");
	const char *name = json_string_value(value);
	size_t len = strlen(name);
	bool printable = len > 0 && len < sizeof config->name;
	for (size_t i = 0; printable && i < len; i++)
		printable = (unsigned char)name[i] >= 0x20 && name[i] != 0x7f;
	if (!printable)
		return fail_at(r, place_of(r, FIELD_NAME), F8_ERR_INVALID, NULL, "\"name\" must be 1 "
			       "to %d printable characters", F8_JSON_MODEL_NAME_MAX - 1);
	memcpy(config->name, name, len + 1);
	return F8_OK;
}

/* The defaults of `arch`. Sizes stay 0: they are required, or derived from others later. */
static void set_arch_defaults(f8_json_arch arch, f8_json_model_config *config) {
	bool gpt = arch == F8_JSON_ARCH_GPT;
	config->arch = arch;
	config->norm = gpt ? F8_JSON_NORM_LAYERNORM : F8_JSON_NORM_RMSNORM;
	config->norm_eps = 1e-5;
	config->act = gpt ? F8_JSON_ACT_GELU_TANH : F8_JSON_ACT_SWIGLU;
	config->pos = gpt ? F8_JSON_POS_LEARNED : F8_JSON_POS_ROPE;
	config->bias = gpt;
	config->tie_embeddings = gpt;
	config->dtype = F8_DTYPE_F32;
	config->vocab_multiple = F8_JSON_VOCAB_MULTIPLE_DEFAULT;
}

/* Reads given field `f` (not arch) over the defaults in *config. */
static f8_status read_field(reader *r, field f, f8_json_model_config *config) {
	int choice;
	f8_status status;
	switch (f) {
	case FIELD_VOCAB:
		return read_size(r, f, F8_JSON_MODEL_MAX_SIZE, &config->vocab);
	case FIELD_SEQ:
		return read_size(r, f, F8_JSON_MODEL_MAX_SIZE, &config->seq);
	case FIELD_VOCAB_MULTIPLE:
		return read_size(r, f, F8_JSON_MODEL_MAX_SIZE, &config->vocab_multiple);
	case FIELD_LAYERS:
		return read_size(r, f, F8_JSON_MODEL_MAX_LAYERS, &config->layers);
	case FIELD_HIDDEN:
		return read_size(r, f, F8_JSON_MODEL_MAX_SIZE, &config->hidden);
	case FIELD_HEADS:
		return read_size(r, f, F8_JSON_MODEL_MAX_SIZE, &config->heads);
	case FIELD_EXPERTS:
		return read_size(r, f, F8_JSON_MODEL_MAX_SIZE, &config->experts);
	case FIELD_TOP_K:
		return read_size(r, f, F8_JSON_MODEL_MAX_SIZE, &config->top_k);
	case FIELD_KV_HEADS:
		return read_size(r, f, F8_JSON_MODEL_MAX_SIZE, &config->kv_heads);
	case FIELD_FFN:
		return read_size(r, f, F8_JSON_MODEL_MAX_SIZE, &config->ffn);
	case FIELD_NORM:
		if (!(status = read_choice(r, f, norm_names, COUNT_OF(norm_names), &choice)))
			config->norm = (f8_json_norm)choice;
		return status;
	case FIELD_ACT:
		if (!(status = read_choice(r, f, act_names, COUNT_OF(act_names), &choice)))
			config->act = (f8_json_act)choice;
		return status;
	case FIELD_POS:
		if (!(status = read_choice(r, f, pos_names, COUNT_OF(pos_names), &choice)))
			config->pos = (f8_json_pos)choice;
		return status;
	case FIELD_DTYPE:
		if (!(status = read_choice(r, f, dtype_names, COUNT_OF(dtype_names), &choice)))
			config->dtype = dtypes[choice];
		return status;
	case FIELD_NORM_EPS:
		return read_real(r, f, 0.0, 1.0, &config->norm_eps);
	case FIELD_ROPE_THETA:
		return read_real(r, f, 1.0, INFINITY, &config->rope_theta);
	case FIELD_BIAS:
		return read_bool(r, f, &config->bias);
	case FIELD_TIE_EMBEDDINGS:
		return read_bool(r, f, &config->tie_embeddings);
	case FIELD_NAME:
		return read_name(r, config);
	case FIELD_COMMENT:
		return json_is_string(r->values[f]) ? F8_OK : fail_type(r, f, "a string");
	default:
		return F8_OK; // arch is read first, on its own: the defaults depend on it
	}
}

/* Reads every given field in the order they stand in the file, so the first error is first. */
static f8_status read_fields_in_order(reader *r, f8_json_model_config *config) {
	size_t done = 0; // the offset of the last key read
	for (;;) {
		int next = -1;
		for (int f = 0; f < FIELD_COUNT; f++)
			if (given(r, f) && r->key_at[f] > done && (next < 0 || r->key_at[f] < r->key_at[next]))
				next = f;
		if (next < 0)
			return F8_OK;
		f8_status status = read_field(r, (field)next, config);
		if (status)
			return status;
		done = r->key_at[next];
	}
}

/* Fields that only one architecture or position encoding has, and what must be there. */
static f8_status check_presence(reader *r, const f8_json_model_config *config) {
	static const field required[] = {FIELD_VOCAB, FIELD_SEQ, FIELD_LAYERS, FIELD_HIDDEN,
					 FIELD_HEADS};
	for (int i = 0; i < COUNT_OF(required); i++)
		if (!given(r, required[i]))
			return fail_missing(r, required[i]);
	bool moe = config->arch == F8_JSON_ARCH_MOE;
	if (moe && !given(r, FIELD_EXPERTS))
		return fail_missing(r, FIELD_EXPERTS);
	static const field moe_only[] = {FIELD_EXPERTS, FIELD_TOP_K};
	char hint[160];
	for (int i = 0; !moe && i < COUNT_OF(moe_only); i++) {
		field f = moe_only[i];
		if (!given(r, f))
			continue;
		snprintf(hint, sizeof hint, "a mixture of experts is \"arch\": \"moe\"; otherwise "
			 "leave \"%s\" out", fields[f].key);
		return fail_at(r, r->key_at[f], F8_ERR_INVALID, hint, "\"%s\" is for arch "
				       "\"moe\", and this model is \"%s\"", fields[f].key,
				       f8_json_arch_name(config->arch));
	}
	if (given(r, FIELD_ROPE_THETA) && config->pos != F8_JSON_POS_ROPE)
		return fail_at(r, r->key_at[FIELD_ROPE_THETA], F8_ERR_INVALID, "set \"pos\": \"rope\" "
			       "or leave \"rope_theta\" out", "\"rope_theta\" is for rotary positions, "
			       "and \"pos\" is \"%s\"", f8_json_pos_name(config->pos));
	if (moe && config->bias)
		return fail_at(r, place_of(r, FIELD_BIAS), F8_ERR_INVALID, "leave \"bias\" out for "
			       "arch \"moe\"", "\"bias\": true is not supported for arch \"moe\": the "
			       "experts' grouped GEMMs (GroupedLinear) have no bias");
	return F8_OK;
}

/* Llama's MLP width: 2/3 of 4 * hidden (SwiGLU has three matrices, not two), rounded up to a
 * multiple of 256. */
static int64_t llama_ffn(int64_t hidden) {
	int64_t ffn = 8 * hidden / 3;
	return (ffn + 255) / 256 * 256;
}

static void derive_defaults(const reader *r, f8_json_model_config *config) {
	if (!given(r, FIELD_KV_HEADS))
		config->kv_heads = config->heads;
	if (!given(r, FIELD_FFN))
		config->ffn = config->arch == F8_JSON_ARCH_GPT ? 4 * config->hidden
							       : llama_ffn(config->hidden);
	if (config->arch == F8_JSON_ARCH_MOE && !given(r, FIELD_TOP_K))
		config->top_k = config->experts < 2 ? config->experts : 2; // Mixtral's
	if (config->pos == F8_JSON_POS_ROPE && !given(r, FIELD_ROPE_THETA))
		config->rope_theta = 10000.0;
}

/* The divisors of `n` nearest `near` from below and above, into *below and *above (0: none). */
static void nearest_divisors(int64_t n, int64_t near, int64_t *below, int64_t *above) {
	*below = *above = 0;
	for (int64_t d = near; d >= 1 && !*below; d--)
		if (n % d == 0)
			*below = d;
	for (int64_t d = near; d <= n && !*above; d++)
		if (n % d == 0)
			*above = d;
}

/* The constraints between fields: head dimensions, grouped-query heads, experts. */
static f8_status check_shapes(reader *r, const f8_json_model_config *config) {
	char hint[200];
	if (config->hidden % config->heads) {
		int64_t below, above;
		nearest_divisors(config->hidden, config->heads, &below, &above);
		int used = snprintf(hint, sizeof hint, "each head gets hidden / heads dimensions; the "
				    "head counts nearest %lld that divide %lld: %lld",
				    (long long)config->heads, (long long)config->hidden, (long long)below);
		if (above && used > 0 && (size_t)used < sizeof hint)
			snprintf(hint + used, sizeof hint - (size_t)used, " and %lld", (long long)above);
		return fail_at(r, place_of(r, FIELD_HEADS), F8_ERR_INVALID, hint, "\"heads\" (%lld) "
			       "does not divide \"hidden\" (%lld)", (long long)config->heads,
			       (long long)config->hidden);
	}
	if (config->heads % config->kv_heads)
		return fail_at(r, place_of(r, FIELD_KV_HEADS), F8_ERR_INVALID, "grouped-query "
			       "attention shares each key/value head among heads / kv_heads query "
			       "heads", "\"kv_heads\" (%lld) does not divide \"heads\" (%lld)",
			       (long long)config->kv_heads, (long long)config->heads);
	int64_t head_dim = config->hidden / config->heads;
	if (config->pos == F8_JSON_POS_ROPE && head_dim % 2)
		return fail_at(r, place_of(r, FIELD_HEADS), F8_ERR_INVALID, "rotary positions rotate "
			       "pairs of dimensions: choose heads so that hidden / heads is even",
			       "the head dimension, \"hidden\" / \"heads\" = %lld / %lld = %lld, is odd, "
			       "and \"pos\" is \"rope\"", (long long)config->hidden,
			       (long long)config->heads, (long long)head_dim);
	if (config->top_k > config->experts)
		return fail_at(r, place_of(r, given(r, FIELD_TOP_K) ? FIELD_TOP_K : FIELD_EXPERTS),
			       F8_ERR_INVALID, "each token goes to top_k of the experts",
			       "\"top_k\" (%lld) is more than \"experts\" (%lld)",
			       (long long)config->top_k, (long long)config->experts);
	return F8_OK;
}

/* Reads the parsed document in r->root into *config. */
static f8_status read_document(reader *r, f8_json_model_config *config) {
	f8_status status = bind_fields(r);
	int arch = 0;
	if (!status && !given(r, FIELD_ARCH))
		status = fail_missing(r, FIELD_ARCH);
	if (!status)
		status = read_choice(r, FIELD_ARCH, arch_names, COUNT_OF(arch_names), &arch);
	if (status)
		return status;
	set_arch_defaults((f8_json_arch)arch, config);
	default_name(r->source.file, config);
	if (!(status = read_fields_in_order(r, config)) && !(status = check_presence(r, config))) {
		derive_defaults(r, config);
		status = check_shapes(r, config);
	}
	return status;
}

/* jansson's error as a diagnostic at the token where it stopped. */
static f8_status fail_syntax(reader *r, const json_error_t *error) {
	enum json_error_code code = json_error_code(error);
	const f8_json_source *source = &r->source;
	size_t end = error->position > 0 ? (size_t)error->position : 0;
	size_t at = f8_json_source_token_start(source, end);
	if (code == json_error_premature_end_of_input) {
		// Point just past the last thing there is, not at an empty last line.
		for (at = source->len; at > 0 && strchr(" \t\r\n", source->text[at - 1]); at--)
			continue;
		if (at == 0)
			return fail_at(r, 0, F8_ERR_PARSE, "a model description is one JSON object: "
				       "{\"arch\": \"gpt\", \"vocab\": 50257, ...}", "the description "
				       "is empty");
		return fail_at(r, at, F8_ERR_PARSE, "the description ends early: is the file cut "
			       "short?", "malformed JSON: %s", error->text);
	}
	f8_json_member member;
	bool in_member = f8_json_source_member_at(source, at, &member);
	int key_len = in_member ? (int)(member.key_end - member.key) : 0;
	const char *key = in_member ? source->text + member.key : "";
	if (key_len > 64)
		key_len = 64;
	if (code == json_error_duplicate_key && in_member && member.key == at)
		return fail_at(r, at, F8_ERR_PARSE, "give each field once", "the key %.*s appears "
			       "twice", key_len, key);
	const char *hint = at == 0 ? "a model description is one JSON object: {\"arch\": \"gpt\", "
				     "\"vocab\": 50257, ...}" : NULL;
	return fail_at(r, at, F8_ERR_PARSE, hint, "malformed JSON%s%.*s: %s", in_member ? " in " : "",
		       key_len, key, error->text);
}

/* Parses r->source with jansson into r->root, its allocations through f8_malloc so that
 * allocation-failure tests reach them. Whatever allocator was installed before is put back;
 * r->root must be released with release_document. */
static f8_status parse_document(reader *r, json_error_t *error) {
	f8_jansson_enter(&r->jansson);
	r->root = json_loadb(r->source.text, r->source.len, JSON_REJECT_DUPLICATES, error);
	if (f8_jansson_out_of_memory() || (!r->root && json_error_code(error) == json_error_out_of_memory))
		return f8_diag_set(r->diag, F8_ERR_NOMEM, "out of memory reading the JSON");
	return r->root ? F8_OK : fail_syntax(r, error);
}

/* Frees r->root with the allocator that made it, then puts back the one from before. */
static void release_document(reader *r) {
	json_decref(r->root);
	r->root = NULL;
	f8_jansson_leave(&r->jansson);
}

f8_status f8_json_model_config_read(const char *text, size_t len, const char *filename,
				    f8_json_model_config *config, f8_diag *diag) {
	memset(config, 0, sizeof *config);
	reader r = {.source = {.text = text ? text : "", .len = text ? len : 0, .file = filename},
		    .diag = diag};
	if (len > F8_JSON_MODEL_MAX_BYTES) {
		f8_diag_at(diag, filename, 0, 0, NULL, 0);
		f8_diag_hint(diag, "a model description is a few hundred bytes of JSON");
		return f8_diag_set(diag, F8_ERR_INVALID, "the description is %zu bytes, more than the "
				   "%d f8c reads", len, F8_JSON_MODEL_MAX_BYTES);
	}
	const char *nul = memchr(r.source.text, '\0', r.source.len);
	if (nul) // jansson would take it for the end of the input
		return fail_at(&r, (size_t)(nul - r.source.text), F8_ERR_PARSE, "a model description is "
			       "a text file of JSON", "the description holds a NUL byte");
	json_error_t error;
	f8_status status = parse_document(&r, &error);
	if (!status)
		status = read_document(&r, config);
	release_document(&r);
	return status;
}

int64_t f8_json_model_padded_vocab(const f8_json_model_config *config) {
	int64_t multiple = config->vocab_multiple > 0 ? config->vocab_multiple : 1;
	return (config->vocab + multiple - 1) / multiple * multiple;
}
