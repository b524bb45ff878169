/*
 * Ops and their attributes: the enum and info table generated from ir/ops.def, the typed
 * attribute values nodes carry, and the schema each op declares for them.
 */
#ifndef F8_IR_OPS_H
#define F8_IR_OPS_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // int64_t, uint8_t, uint32_t

#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/dtype.h" // f8_dtype
#include "ir/shape.h" // f8_type, f8_shape, f8_dim

struct f8_graph;
struct f8_node;

#define F8_VARIADIC UINT8_MAX // arity bound: any number

typedef enum f8_op {
#define X(e, ...) F8_OP_##e,
#include "ir/ops.def"
#undef X
	F8_OP_COUNT
} f8_op;

enum f8_op_flags {
	F8_OPF_ELEMENTWISE = 1u << 0,    // output element i depends on input elements i only
	F8_OPF_REDUCTION = 1u << 1,      // reduces over axes
	F8_OPF_GEMM = 1u << 2,           // a matrix product: a candidate for FP8
	F8_OPF_HIGH_LEVEL = 1u << 3,     // made by fuse-patterns from primitive subgraphs
	F8_OPF_FP8 = 1u << 4,            // an FP8 cast or scaling op
	F8_OPF_COLLECTIVE = 1u << 5,     // communicates between ranks
	F8_OPF_SIDE_EFFECT = 1u << 6,    // must run even when no value it produces is read
	F8_OPF_DIFFERENTIABLE = 1u << 7, // has a gradient rule (passes/ provides it)
};

/* X(ENUM, text name): the kinds of attribute values. */
#define F8_ATTR_KIND_LIST(X) \
	X(INT, "int")        \
	X(FLOAT, "float")    \
	X(STRING, "string")  \
	X(INTS, "ints")      \
	X(FLOATS, "floats")  \
	X(DTYPE, "dtype")    \
	X(DIM, "dim")        \
	X(DIMS, "dims")      \
	X(TENSOR, "tensor")

typedef enum f8_attr_kind {
#define F8_ATTR_KIND_ENUM(e, name) F8_ATTR_##e,
	F8_ATTR_KIND_LIST(F8_ATTR_KIND_ENUM)
#undef F8_ATTR_KIND_ENUM
	F8_ATTR_KIND_COUNT
} f8_attr_kind;

const char *f8_attr_kind_name(f8_attr_kind kind);

/* A small constant tensor (Constant's value): concrete shape, little-endian data. */
typedef struct f8_tensor_data {
	f8_dtype dtype;
	f8_shape shape;  // constant dims only
	size_t n_bytes;  // element count * dtype size
	void *data;      // (n_bytes) owned by the graph's arena
} f8_tensor_data;

/* The value of a one-element tensor of a float or integer dtype (f64, f32, bf16, f16, i64,
 * i32) into *out; false for another dtype or size, or for NULL. */
bool f8_tensor_data_scalar(const f8_tensor_data *tensor, double *out);

/* A one-element tensor (shape []) of `dtype` (one of those above) holding `value`, rounded to
 * nearest even for bf16/f16 and truncated for integers; its data is `bytes` (8 of them), which
 * must outlive it. */
f8_tensor_data f8_tensor_data_make_scalar(f8_dtype dtype, double value, uint8_t *bytes);

/* One attribute of a node. Payloads (strings, lists, tensors) live in the graph's arena. */
typedef struct f8_attr {
	const char *name; // the name from the op's schema (static storage)
	f8_attr_kind kind;
	union {
		int64_t i;
		double f;
		const char *s;
		f8_dtype dtype;
		f8_dim dim;
		struct {
			uint32_t n;
			int64_t *items;
		} ints;
		struct {
			uint32_t n;
			double *items;
		} floats;
		struct {
			uint32_t n;
			f8_dim *items;
		} dims;
		f8_tensor_data *tensor;
	};
} f8_attr;

/* One entry of an op's attribute schema. */
typedef struct f8_attr_spec {
	const char *name;
	f8_attr_kind kind;
	bool required;
} f8_attr_spec;

/*
 * A type and shape function: from the types of the node's inputs (in the graph) and its
 * attributes, computes the types of its n_outputs outputs into `outputs`. On a type error it
 * returns F8_ERR_INVALID with the message in `diag` (the caller adds which node).
 */
typedef f8_status (*f8_infer_fn)(const struct f8_graph *graph, const struct f8_node *node,
				 f8_type *outputs, f8_diag *diag);

typedef struct f8_op_info {
	const char *name;
	uint8_t min_inputs, max_inputs;
	uint8_t min_outputs, max_outputs;
	const f8_attr_spec *attrs; // (n_attrs) the schema
	uint32_t n_attrs;
	f8_infer_fn infer;
	uint32_t flags; // enum f8_op_flags
} f8_op_info;

/* The info row of `op`; `op` must be < F8_OP_COUNT. */
const f8_op_info *f8_op_get_info(f8_op op);

static inline const char *f8_op_name(f8_op op) {
	return f8_op_get_info(op)->name;
}

/* Looks up an op by name (`len` bytes); true and *out set when found. */
bool f8_op_from_name(const char *name, size_t len, f8_op *out);

/* The schema entry of attribute `name` (`len` bytes) of `op`, or NULL if it has none such. */
const f8_attr_spec *f8_op_find_attr_spec(f8_op op, const char *name, size_t len);

/*
 * Attribute lookups on a node. f8_node_attr returns NULL when the attribute is absent; the
 * typed getters return `fallback` when it is absent (the verifier has checked kinds).
 */
const f8_attr *f8_node_attr(const struct f8_node *node, const char *name);
int64_t f8_node_attr_int(const struct f8_node *node, const char *name, int64_t fallback);
double f8_node_attr_float(const struct f8_node *node, const char *name, double fallback);
const char *f8_node_attr_string(const struct f8_node *node, const char *name,
				const char *fallback);
f8_dtype f8_node_attr_dtype(const struct f8_node *node, const char *name, f8_dtype fallback);

/* The amax a node makes: a cast's (Quantize's third output, CastTranspose's fifth) or an
 * Amax's; F8_NONE for other ops, and for a cast without that output. */
uint32_t f8_node_amax(const struct f8_node *node);

/*
 * The inputs of a Quantize or CastTranspose node (ir/infer_fused.c), by position: the scale
 * input (a scaling table with `slot`, else a given scale or grid), or -1 when the cast finds
 * its scale from the data; and the rows per group of a grouped cast of a (rows, cols) input,
 * or -1. A grouped cast takes its scales from a table or finds them: (x [, table], [counts]).
 */
int f8_cast_scale_input(const struct f8_node *node);
int f8_cast_counts_input(const struct f8_node *node);

#endif
