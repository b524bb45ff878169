/*
 * The ONNX frontend's insides, shared by its files:
 *   onnx_file.c    reading the file, protobuf-c unpacking, tensors and external data
 *   onnx_known.c   values known while importing (shape arithmetic, small constants), folded
 *   onnx_ops.c     one converter per ONNX operator
 *   onnx_import.c  the walk over the graph that ties them together
 *
 * Importing folds what exporters compute from shapes (Shape -> Gather -> Concat -> Reshape) into
 * static, possibly symbolic, attributes, so the IR holds only the tensor program. A value whose
 * contents are known at import time is a "known": small, with integer elements as dims (so
 * `seq` and `seq+1` are known values too) and float elements as doubles.
 */
#ifndef F8_FRONTEND_ONNX_INTERNAL_H
#define F8_FRONTEND_ONNX_INTERNAL_H

#include <stdbool.h> // bool
#include <stdint.h>  // int64_t, uint32_t

#include "frontend/frontend.h" // f8_dim_binding
#include "ir/graph.h"          // f8_graph, f8_value_id
#include "ir/ops.h"            // f8_op, f8_attr
#include "onnx.pb-c.h"         // F8cOnnx__* (generated from frontend/onnx/onnx.proto)

enum {
	ONNX_MAX_FILE_BYTES = INT32_MAX,    // protobuf's own limit on one message
	ONNX_MAX_NODES = 1 << 20,
	ONNX_MAX_INITIALIZERS = 1 << 20,
	ONNX_MAX_NODE_INPUTS = 4096,        // a Concat of thousands of pieces is already odd
	ONNX_MAX_KNOWN_ELEMENTS = 1 << 16,  // larger constants are not folded
	ONNX_OPSET_MIN = 13,
	ONNX_OPSET_MAX = 24,
};

/* A tensor whose contents are known at import time. */
typedef struct onnx_known {
	f8_dtype dtype;
	f8_shape shape;   // constant dims only
	uint32_t count;   // the element count
	f8_dim *ints;     // (count) integer and bool elements, possibly symbolic; NULL for floats
	double *floats;   // (count) float elements; NULL for integers
} onnx_known;

/* What an ONNX value name stands for. */
typedef struct onnx_binding {
	const char *name;   // the ONNX name (arena)
	f8_value_id value;  // its IR value; F8_NONE while it exists only as a known
	onnx_known *known;  // its contents when known at import time, else NULL
} onnx_binding;

typedef struct onnx_importer {
	f8_graph *graph;
	f8_diag *diag;
	const char *path;           // the model file, for messages and locations (arena)
	int folder_fd;              // the model's folder, the root for external data
	const char *folder;         // its path, for the initializers' references (arena)
	const f8_dim_binding *dims; // --dim bindings applied to the inputs' symbolic dims
	uint32_t n_dims;
	bool *dims_used;            // (n_dims) whether each binding named an input dim
	int64_t opset;              // the default domain's opset version
	onnx_binding *bindings;     // open-addressing table by name
	uint32_t n_bindings, cap_bindings;
} onnx_importer;

/* The node being converted: its proto and its inputs' bindings (NULL for omitted ones). */
typedef struct onnx_node {
	const F8cOnnx__NodeProto *proto;
	uint32_t index;
	onnx_binding **inputs; // (n_inputs)
	uint32_t n_inputs;
} onnx_node;

/* onnx_file.c */

/* Reads and unpacks the model file at `path`, checking its size; *out freed with
 * f8_onnx_model_free. Also opens the model's folder into im->folder_fd. */
f8_status f8_onnx_model_read(onnx_importer *im, const char *path, F8cOnnx__ModelProto **out);

/* Unpacks a model from memory (`size` bytes, checked); *out freed with f8_onnx_model_free. */
f8_status f8_onnx_model_unpack(onnx_importer *im, const uint8_t *bytes, size_t size,
			    F8cOnnx__ModelProto **out);

/* Opens `folder` (ending in '/') as the root of external data: im->folder and im->folder_fd. */
f8_status f8_onnx_open_folder(onnx_importer *im, const char *folder);
void f8_onnx_model_free(F8cOnnx__ModelProto *model);

/* The f8_dtype of ONNX data type `data_type`; false when f8c has no such dtype. */
bool f8_onnx_dtype(int32_t data_type, f8_dtype *out);
const char *f8_onnx_dtype_name(int32_t data_type);

/* Checks a tensor's dims, dtype and data against each other and, for external data, the file
 * (inside the folder, regular, not a link, long enough). Fills the type and *n_bytes. */
f8_status f8_onnx_tensor_check(onnx_importer *im, const F8cOnnx__TensorProto *tensor,
			    f8_type *type, uint64_t *n_bytes);

/* The initializer reference of a checked tensor (inline data copied into the arena). */
f8_status f8_onnx_tensor_initializer(onnx_importer *im, const F8cOnnx__TensorProto *tensor,
				  uint64_t n_bytes, const f8_initializer **out);

/* Reads a checked, small tensor's elements into a known (arena). */
f8_status f8_onnx_tensor_known(onnx_importer *im, const F8cOnnx__TensorProto *tensor,
			    const f8_type *type, onnx_known **out);

/* onnx_known.c */

/* A new known of `dtype` and constant `shape`, elements zeroed; NULL when out of memory,
 * larger than ONNX_MAX_KNOWN_ELEMENTS or of a float dtype it does not hold (e8m0): the caller
 * then does not fold. */
onnx_known *f8_onnx_known_create(onnx_importer *im, f8_dtype dtype, const f8_shape *shape);

/* True when every element is a constant (no symbols): it can become a tensor literal. */
bool f8_onnx_known_is_concrete(const onnx_known *known);

/* Writes the known as a tensor literal (for a Constant node). */
f8_status f8_onnx_known_to_tensor(onnx_importer *im, const onnx_known *known, f8_tensor_data *out);

/*
 * Folds ONNX op `op_type` over known inputs into *out. F8_OK with *out NULL means "not folded"
 * (the op, a symbolic element or the size stops it): the caller emits an IR node instead.
 */
f8_status f8_onnx_known_fold(onnx_importer *im, const onnx_node *node, onnx_known **out);

/* onnx_import.c */

/* The IR value of `binding`, making a Constant node for a known one on first use. */
f8_status f8_onnx_value_of(onnx_importer *im, onnx_binding *binding, f8_value_id *out);

/*
 * Adds IR node `op` for the ONNX node: reads `inputs` (n_inputs, F8_NONE for omitted), sets
 * `attrs`, names its outputs after the node's first `n_outputs` outputs, records the node's
 * name and place, infers its types and binds the outputs. *out gets the node's id (may be NULL).
 */
f8_status f8_onnx_emit(onnx_importer *im, const onnx_node *node, f8_op op, const f8_value_id *inputs,
		    uint32_t n_inputs, const f8_attr *attrs, uint32_t n_attrs, uint32_t n_outputs,
		    f8_node_id *out);

/* Adds an IR node of the ONNX node's lowering before its last (one of several an operator
 * becomes, as Tile): as f8_onnx_emit, with one output of a fresh name, bound to no ONNX name;
 * *out gets that output. */
f8_status f8_onnx_emit_step(onnx_importer *im, const onnx_node *node, f8_op op,
			    const f8_value_id *inputs, uint32_t n_inputs, const f8_attr *attrs,
			    uint32_t n_attrs, f8_value_id *out);

/* Binds ONNX output `index` of the node to a known, or to an existing binding (Identity). */
f8_status f8_onnx_bind_known(onnx_importer *im, const onnx_node *node, uint32_t index,
			  onnx_known *known);
f8_status f8_onnx_bind_alias(onnx_importer *im, const onnx_node *node, uint32_t index,
			  const onnx_binding *target);

/* Sets an error about the current node: F8_ERR_UNSUPPORTED or F8_ERR_INVALID with a message. */
f8_status f8_onnx_fail(onnx_importer *im, f8_status status, const char *format, ...)
	__attribute__((format(printf, 3, 4)));

/* onnx_ops.c */

/* Converts one node (all its inputs bound) into IR nodes or known values. */
f8_status f8_onnx_convert_node(onnx_importer *im, const onnx_node *node);

/* Writes the supported operators, comma-separated, into `buffer`. */
void f8_onnx_supported_ops(char *buffer, size_t size);

/* Finds attribute `name` of the node, or NULL. */
const F8cOnnx__AttributeProto *f8_onnx_attr(const onnx_node *node, const char *name);

#endif
