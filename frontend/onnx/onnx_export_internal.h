/*
 * The ONNX writer's insides, shared by its files:
 *   onnx_export.c        the model: header, graph inputs and outputs, weights, the walk
 *   onnx_export_file.c   writing the model and its data so that no half-written file is left
 *   onnx_export_build.c  building the protobuf: names, nodes, attributes, constants, shapes
 *   onnx_export_ops.c    one lowering per IR op: primitives, Embedding, Linear, norms, Gelu, SwiGLU
 *   onnx_export_fused.c  Rope, Attention and the dense form of mixture-of-experts layers
 *   onnx_export_init.c   the weights f8c makes up
 *
 * The IR's shape attributes become ONNX's constant-tensor inputs; symbolic sizes in them are
 * computed in the graph from the Shape of the graph input that has them (the importer folds
 * those computations back into the same symbolic sizes). Builders are sticky: after the first
 * failure (ex->status) every one of them does nothing and returns NULL, so a lowering reads as
 * the list of ONNX nodes it writes and checks the status once.
 */
#ifndef F8_FRONTEND_ONNX_ONNX_EXPORT_INTERNAL_H
#define F8_FRONTEND_ONNX_ONNX_EXPORT_INTERNAL_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // int64_t, uint32_t, uint64_t

#include "frontend/onnx/onnx_export.h" // f8_onnx_export_options
#include "ir/arena.h"                  // f8_arena
#include "ir/graph.h"                  // f8_graph, f8_node, f8_value_id
#include "onnx.pb-c.h"                 // F8cOnnx__* (generated from frontend/onnx/onnx.proto)

/* How an IR value stands in the ONNX graph. The MoE ops have no standard ONNX form of their
 * own: their values are written in a dense form (onnx_export_fused.c). */
typedef enum export_form {
	EXPORT_FORM_PLAIN,       // the value itself
	EXPORT_FORM_EXPERT_ROWS, // rows sorted by expert (tokens * top_k, n) written dense:
				 // (experts or 1, tokens, n), every expert on every token
	EXPORT_FORM_GATES,       // a Router's probabilities (tokens, top_k) written as the gates
				 // (tokens, experts): the top-k probabilities (renormalized), or 0
	EXPORT_FORM_ROUTE,       // a Router's expert ids or MoEDispatch's counts: folded into the
				 // gates, not written
} export_form;

/* What a cached tensor is; equal keys share one tensor. */
typedef enum export_cache_kind {
	EXPORT_CACHE_CONSTANT, // a constant initializer: dtype, shape, bytes
	EXPORT_CACHE_SHAPE,    // sizes as a 1-D int64 tensor: the dims in `shape`
	EXPORT_CACHE_SIZE,     // one size as an int64 scalar: shape.dims[0]
	EXPORT_CACHE_MASK,     // the additive causal mask of dtype and (seq_q, seq_kv) in `shape`
} export_cache_kind;

typedef struct export_cached {
	export_cache_kind kind;
	f8_dtype dtype;
	f8_shape shape;
	const void *data; // (n_bytes) a constant's bytes (arena), else NULL
	size_t n_bytes;
	const char *name; // the ONNX value
} export_cached;

typedef struct onnx_exporter {
	const f8_graph *graph;
	f8_diag *diag;
	f8_status status;       // the first failure
	f8_arena *arena;        // every protobuf object, array and string of the model
	int64_t opset;
	F8cOnnx__GraphProto *proto;
	size_t cap_nodes, cap_initializers;
	const char **names;     // (graph->n_values) the ONNX name of each IR value, once written
	export_form *forms;     // (graph->n_values)
	const f8_node *node;    // the IR node being lowered: it names helpers, gives scopes
	bool shared;            // writing helpers shared by many nodes: no node's name or scope
	const char **taken;     // (cap_taken) the names in use, open addressing
	uint32_t n_taken, cap_taken;
	const char **symbol_sizes; // (graph->n_symbols) each symbol's size as a 1-D tensor, or NULL
	export_cached *cache;   // (n_cached)
	uint32_t n_cached, cap_cached;
	bool has_moe;           // a MoE layer was written densely (said in the doc string)
} onnx_exporter;

/* Array arguments with their counts: IN(a, b) is `names, 2`. */
#define EXPORT_LIST(type, ...) \
	(type[]){__VA_ARGS__}, (uint32_t)(sizeof((type[]){__VA_ARGS__}) / sizeof(type))
#define IN(...) EXPORT_LIST(const char *, __VA_ARGS__)
#define INTS(...) EXPORT_LIST(const int64_t, __VA_ARGS__)

/* onnx_export_build.c */

/* Sets the first failure (printf-style) and returns it; later failures are ignored. */
f8_status f8_export_fail(onnx_exporter *ex, f8_status status, const char *format, ...)
	__attribute__((format(printf, 3, 4)));

/* Fails with F8_ERR_UNSUPPORTED about the node being lowered, naming it. */
void f8_export_unsupported(onnx_exporter *ex, const char *format, ...)
	__attribute__((format(printf, 2, 3)));

/* `count` zeroed objects of `size` bytes from the arena; NULL (and the failure set) when out of
 * memory or after a failure. */
void *f8_export_alloc(onnx_exporter *ex, size_t count, size_t size);

/* A copy of `text` in the arena. */
char *f8_export_strdup(onnx_exporter *ex, const char *text);

/* A StringStringEntryProto `key`: `value`, both copied. */
F8cOnnx__StringStringEntryProto *f8_export_entry(onnx_exporter *ex, const char *key,
					       const char *value);

/* Reserves `name` (an IR value's): no helper gets it. */
void f8_export_reserve(onnx_exporter *ex, const char *name);

/* A fresh name for a helper value of the node being lowered: "<its first output>/<what>". */
const char *f8_export_name(onnx_exporter *ex, const char *what);

/*
 * Appends an ONNX node `op_type` reading `inputs` (n_inputs; NULL for an omitted optional
 * input) and writing `outputs` (n_outputs names). It is named after its first output and carries
 * the IR node's scope (as torch.onnx records it, which f8c's importer reads back). Returns the
 * node, to add attributes to; NULL after a failure.
 */
F8cOnnx__NodeProto *f8_export_node(onnx_exporter *ex, const char *op_type, const char *const *inputs,
				uint32_t n_inputs, const char *const *outputs, uint32_t n_outputs);

/* f8_export_node with one output called `output`; returns `output` (NULL after a failure). */
const char *f8_export_op_to(onnx_exporter *ex, const char *op_type, const char *output,
			 const char *const *inputs, uint32_t n_inputs);

/* f8_export_op_to with a fresh output name f8_export_name(`what`). */
const char *f8_export_op(onnx_exporter *ex, const char *op_type, const char *what,
		      const char *const *inputs, uint32_t n_inputs);

/* Helpers shared by several IR nodes (a causal mask): f8_export_enter_shared marks what follows
 * as shared (no node's scope) and returns the mark for the caller to restore into ex->shared;
 * f8_export_shared_op is f8_export_op_to with the output called `wanted` (or a numbered variant). */
bool f8_export_enter_shared(onnx_exporter *ex);
const char *f8_export_shared_op(onnx_exporter *ex, const char *op_type, const char *wanted,
			     const char *const *inputs, uint32_t n_inputs);

/* The last node appended (to add attributes to), or NULL after a failure. */
F8cOnnx__NodeProto *f8_export_last(onnx_exporter *ex);

/* Attributes of `node` (NULL: nothing happens). */
void f8_export_attr_int(onnx_exporter *ex, F8cOnnx__NodeProto *node, const char *name, int64_t value);
void f8_export_attr_float(onnx_exporter *ex, F8cOnnx__NodeProto *node, const char *name, double value);
void f8_export_attr_string(onnx_exporter *ex, F8cOnnx__NodeProto *node, const char *name,
			const char *value);
void f8_export_attr_ints(onnx_exporter *ex, F8cOnnx__NodeProto *node, const char *name,
		      const int64_t *items, uint32_t n);
void f8_export_attr_tensor(onnx_exporter *ex, F8cOnnx__NodeProto *node, const char *name,
			F8cOnnx__TensorProto *tensor);

/* The ONNX TensorProto.DataType of `dtype`; 0 when ONNX has none. */
int32_t f8_export_data_type(f8_dtype dtype);

/* A TensorProto of `dtype` and the constant `shape`, holding `n_bytes` at `data` inline (`data`
 * NULL: no contents, for the caller to point at external data). */
F8cOnnx__TensorProto *f8_export_tensor(onnx_exporter *ex, const char *name, f8_dtype dtype,
				    const f8_shape *shape, const void *data, size_t n_bytes);

/* The name of the cached tensor equal to `key`, or NULL; f8_export_cache_add records one. */
const char *f8_export_cache_find(const onnx_exporter *ex, const export_cached *key);
void f8_export_cache_add(onnx_exporter *ex, const export_cached *key, const char *name);

/* Adds `tensor` to the graph's initializers. */
void f8_export_add_initializer(onnx_exporter *ex, F8cOnnx__TensorProto *tensor);

/* A constant initializer (shared between equal ones) of `dtype` and `shape` holding `data`. */
const char *f8_export_constant(onnx_exporter *ex, f8_dtype dtype, const f8_shape *shape,
			    const void *data, size_t n_bytes);

/* Constants: a 1-D int64 tensor of the n `items`; a scalar of `dtype` (float, integer, bool). */
const char *f8_export_ints(onnx_exporter *ex, const int64_t *items, uint32_t n);
const char *f8_export_scalar(onnx_exporter *ex, f8_dtype dtype, double value);

/*
 * The sizes `dims` (n of them) as a 1-D int64 tensor, each symbolic size computed from the Shape
 * of a graph input that has it (shared between equal lists); a constant when none is symbolic.
 */
const char *f8_export_shape(onnx_exporter *ex, const f8_dim *dims, uint32_t n);

/* One size as an int64 scalar (for Range). */
const char *f8_export_size(onnx_exporter *ex, f8_dim dim);

/* The ONNX name of input `i` of `node`, which must be written in the plain form; NULL when the
 * input is omitted (or after a failure). */
const char *f8_export_input(onnx_exporter *ex, const f8_node *node, uint32_t i);

/* The IR name of output `i` of `node`, recorded as written (in the plain form). */
const char *f8_export_output(onnx_exporter *ex, const f8_node *node, uint32_t i);

/* Records output `i` of `node` as written under the ONNX name `name` in `form`. */
void f8_export_bind(onnx_exporter *ex, const f8_node *node, uint32_t i, const char *name,
		 export_form form);

/* The ONNX name of input `i` of `node`, which must be written in `form` (a dense MoE value). */
const char *f8_export_input_form(onnx_exporter *ex, const f8_node *node, uint32_t i, export_form form);

/* The type of input `i` of `node`. */
const f8_type *f8_export_input_type(const onnx_exporter *ex, const f8_node *node, uint32_t i);

/* onnx_export_file.c */

enum { EXPORT_PATH_MAX = 4096 };

/* The model's file, its data's, and their temporary names in the same folder. */
typedef struct export_paths {
	char model[EXPORT_PATH_MAX], data[EXPORT_PATH_MAX];
	char model_temp[EXPORT_PATH_MAX], data_temp[EXPORT_PATH_MAX];
	char folder[EXPORT_PATH_MAX];
	const char *data_location; // the data file's bare name (in `data`), as the model says it
} export_paths;

/* A weight: its value and where its bytes go in the data file. */
typedef struct export_weight {
	f8_value_id value;
	uint64_t offset, n_bytes;
} export_weight;

/* The paths for the model `path`; F8_ERR_ARGUMENT when it is not a file name in an existing
 * folder, or names something other than a file (as does its data's path). */
f8_status f8_export_make_paths(const char *path, export_paths *paths, f8_diag *diag);

/*
 * Writes the packed model (`size` bytes at `packed`) and the n_weights `weights` of `graph`,
 * made from options->seed, into a data file of `data_size` bytes, through temporary files renamed
 * into place. On failure nothing is left: F8_ERR_IO (the folder lacks room, a write failed, or
 * options->interrupted was set) or F8_ERR_NOMEM, with `diag` filled.
 */
f8_status f8_export_write_files(const f8_graph *graph, const uint8_t *packed, size_t size,
			     const export_paths *paths, const export_weight *weights,
			     uint32_t n_weights, uint64_t data_size,
			     const f8_onnx_export_options *options, f8_diag *diag);

/* onnx_export_ops.c */

/* Writes the ONNX nodes of IR node `node` (ex->node). */
void f8_export_lower_node(onnx_exporter *ex, const f8_node *node);

/* onnx_export_fused.c */

void f8_export_lower_rope(onnx_exporter *ex, const f8_node *node);
void f8_export_lower_attention(onnx_exporter *ex, const f8_node *node);
void f8_export_lower_router(onnx_exporter *ex, const f8_node *node);
void f8_export_lower_moe_dispatch(onnx_exporter *ex, const f8_node *node);
void f8_export_lower_grouped_linear(onnx_exporter *ex, const f8_node *node);
void f8_export_lower_moe_combine(onnx_exporter *ex, const f8_node *node);

#endif
