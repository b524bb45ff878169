/*
 * One converter per ONNX operator of the default domain: what torch.onnx (dynamo) writes for
 * GPT-2-, Llama-, Mistral- and Qwen-style decoders, and the FP8 QuantizeLinear /
 * DequantizeLinear pair. A converter first tries to fold the node over known inputs; otherwise
 * it turns the ONNX inputs that carry shapes, axes or sizes into IR attributes (they must be
 * known) and emits the IR op. Any other operator is an error that names it and lists these.
 */
#include <stdio.h>  // snprintf
#include <string.h> // strcmp, memcpy

#include "frontend/onnx/onnx_internal.h" // onnx_importer, onnx_node, f8_onnx_emit
#include "ir/arena.h"                    // f8_arena_alloc_array
#include "ir/verify.h"                   // f8_node_infer_types

enum {
	ATTR_FLOAT = 1, // AttributeProto.AttributeType
	ATTR_INT = 2,
	ATTR_STRING = 3,
	ATTR_TENSOR = 4,
	ATTR_INTS = 7,
};

const F8cOnnx__AttributeProto *f8_onnx_attr(const onnx_node *node, const char *name) {
	for (size_t i = 0; i < node->proto->n_attribute; i++) {
		const F8cOnnx__AttributeProto *attr = node->proto->attribute[i];
		if (attr->name && strcmp(attr->name, name) == 0)
			return attr;
	}
	return NULL;
}

/* Attribute `name` of ONNX type `type`, or NULL when absent; a wrong type is an error. */
static f8_status typed_attr(onnx_importer *im, const onnx_node *node, const char *name, int type,
			    const F8cOnnx__AttributeProto **out) {
	*out = f8_onnx_attr(node, name);
	if (*out && (*out)->ref_attr_name)
		return f8_onnx_fail(im, F8_ERR_UNSUPPORTED, "attribute %s refers to a function's "
				 "attribute; f8c reads inlined graphs only", name);
	if (*out && (int)(*out)->type != type)
		return f8_onnx_fail(im, F8_ERR_INVALID, "attribute %s has type %d, expected %d", name,
				 (*out)->type, type);
	return F8_OK;
}

static f8_status attr_int(onnx_importer *im, const onnx_node *node, const char *name,
			  int64_t fallback, int64_t *out) {
	const F8cOnnx__AttributeProto *attr;
	f8_status status = typed_attr(im, node, name, ATTR_INT, &attr);
	*out = attr ? attr->i : fallback;
	return status;
}

static f8_status attr_float(onnx_importer *im, const onnx_node *node, const char *name,
			    double fallback, double *out) {
	const F8cOnnx__AttributeProto *attr;
	f8_status status = typed_attr(im, node, name, ATTR_FLOAT, &attr);
	*out = attr ? attr->f : fallback;
	return status;
}

/* The IR value of input `i`, or F8_NONE when it is absent. */
static f8_status input_value(onnx_importer *im, const onnx_node *node, uint32_t i,
			     f8_value_id *out) {
	*out = F8_NONE;
	if (i >= node->n_inputs || !node->inputs[i])
		return F8_OK;
	return f8_onnx_value_of(im, node->inputs[i], out);
}

/* The IR values of inputs [0, n). */
static f8_status input_values(onnx_importer *im, const onnx_node *node, uint32_t n,
			      f8_value_id *out) {
	for (uint32_t i = 0; i < n; i++) {
		f8_status status = input_value(im, node, i, &out[i]);
		if (status)
			return status;
	}
	return F8_OK;
}

/*
 * The elements of input `i`, which must be known, as dims (symbolic allowed), at most `max`;
 * `what` names it in the error. *n = 0 and F8_OK when the input is absent.
 */
static f8_status input_dims(onnx_importer *im, const onnx_node *node, uint32_t i,
			    const char *what, f8_dim *out, uint32_t max, uint32_t *n) {
	*n = 0;
	if (i >= node->n_inputs || !node->inputs[i])
		return F8_OK;
	const onnx_known *known = node->inputs[i]->known;
	if (known && !known->ints)
		return f8_onnx_fail(im, F8_ERR_UNSUPPORTED, "input %u (%s) must be an integer tensor, not "
				 "%s", i, what, f8_dtype_name(known->dtype));
	if (!known) {
		f8_onnx_fail(im, F8_ERR_UNSUPPORTED, "input %u (%s) must be an integer tensor computed "
			  "from constants and shapes; here it depends on data", i, what);
		f8_diag_hint(im->diag, "f8c keeps shapes static; --dim fixes symbolic sizes");
		return F8_ERR_UNSUPPORTED;
	}
	if (known->count > max)
		return f8_onnx_fail(im, F8_ERR_UNSUPPORTED, "input %u (%s) has %u elements, more than %u",
				 i, what, known->count, max);
	for (uint32_t k = 0; k < known->count; k++)
		out[k] = known->ints[k];
	*n = known->count;
	return F8_OK;
}

/* input_dims, each element a constant. */
static f8_status input_ints(onnx_importer *im, const onnx_node *node, uint32_t i,
			    const char *what, int64_t *out, uint32_t max, uint32_t *n) {
	f8_dim dims[F8_MAX_RANK];
	f8_status status = input_dims(im, node, i, what, dims, max < F8_MAX_RANK ? max : F8_MAX_RANK, n);
	for (uint32_t k = 0; !status && k < *n; k++) {
		if (!f8_dim_is_const(dims[k])) {
			f8_onnx_fail(im, F8_ERR_UNSUPPORTED, "input %u (%s) depends on a symbolic size", i,
				  what);
			f8_diag_hint(im->diag, "bind it with --dim");
			return F8_ERR_UNSUPPORTED;
		}
		out[k] = f8_dim_value(dims[k]);
	}
	return status;
}

/* Requires at least `min` inputs present in front. */
static f8_status require_inputs(onnx_importer *im, const onnx_node *node, uint32_t min) {
	for (uint32_t i = 0; i < min; i++)
		if (i >= node->n_inputs || !node->inputs[i])
			return f8_onnx_fail(im, F8_ERR_INVALID, "%s needs at least %u inputs",
					 node->proto->op_type, min);
	return F8_OK;
}

/* Emits `op` on all the node's inputs, no attributes, one output: after folding fails. */
static f8_status emit_plain(onnx_importer *im, const onnx_node *node, f8_op op) {
	f8_value_id inputs[4];
	if (node->n_inputs > 4)
		return f8_onnx_fail(im, F8_ERR_INVALID, "%s has %u inputs", node->proto->op_type,
				 node->n_inputs);
	f8_status status = input_values(im, node, node->n_inputs, inputs);
	return status ? status : f8_onnx_emit(im, node, op, inputs, node->n_inputs, NULL, 0, 1, NULL);
}

/* Folds when the inputs are known; true in *done when it did. */
static f8_status try_fold(onnx_importer *im, const onnx_node *node, bool *done) {
	onnx_known *known;
	f8_status status = f8_onnx_known_fold(im, node, &known);
	*done = !status && known;
	if (*done)
		status = f8_onnx_bind_known(im, node, 0, known);
	return status;
}

typedef struct converter converter;
typedef f8_status (*convert_fn)(onnx_importer *im, const onnx_node *node, const converter *c);
struct converter {
	const char *name;
	convert_fn convert;
	f8_op op;
	uint32_t min_inputs;
};

/* Elementwise and other attribute-free ops: fold, else the IR op of the same meaning. */
static f8_status convert_plain(onnx_importer *im, const onnx_node *node, const converter *c) {
	bool done;
	f8_status status = try_fold(im, node, &done);
	return status || done ? status : emit_plain(im, node, c->op);
}

static f8_status convert_identity(onnx_importer *im, const onnx_node *node, const converter *c) {
	(void)c;
	return f8_onnx_bind_alias(im, node, 0, node->inputs[0]);
}

/* Max / Min take any number of inputs; the IR ops take two. */
static f8_status convert_variadic(onnx_importer *im, const onnx_node *node, const converter *c) {
	if (node->n_inputs == 1)
		return f8_onnx_bind_alias(im, node, 0, node->inputs[0]);
	bool done;
	f8_status status = node->n_inputs == 2 ? try_fold(im, node, &done) : (done = false, F8_OK);
	if (status || done)
		return status;
	f8_value_id acc, next;
	status = input_value(im, node, 0, &acc);
	for (uint32_t i = 1; !status && i < node->n_inputs; i++) {
		f8_value_id pair[2] = {acc, F8_NONE};
		status = input_value(im, node, i, &pair[1]);
		if (!status && i + 1 < node->n_inputs) {
			// Intermediate results get fresh names; only the last is the node's output.
			status = f8_onnx_emit_step(im, node, c->op, pair, 2, NULL, 0, &next);
			if (!status)
				acc = next;
		} else if (!status) {
			status = f8_onnx_emit(im, node, c->op, pair, 2, NULL, 0, 1, NULL);
		}
	}
	return status;
}

static f8_status convert_constant(onnx_importer *im, const onnx_node *node, const converter *c) {
	(void)c;
	const F8cOnnx__AttributeProto *value = f8_onnx_attr(node, "value");
	onnx_known *known = NULL;
	if (node->proto->n_attribute != 1)
		return f8_onnx_fail(im, F8_ERR_INVALID, "Constant needs exactly one value attribute");
	const F8cOnnx__AttributeProto *attr = node->proto->attribute[0];
	const char *name = attr->name ? attr->name : "";
	if (value && value->t) {
		f8_type type = {0};
		uint64_t n_bytes;
		f8_status status = f8_onnx_tensor_check(im, value->t, &type, &n_bytes);
		if (status)
			return status;
		if (n_bytes > ONNX_MAX_KNOWN_ELEMENTS * f8_dtype_get_info(type.dtype)->bytes)
			return f8_onnx_fail(im, F8_ERR_UNSUPPORTED, "a Constant of %llu bytes; f8c folds "
					 "constants up to %d elements (put weights in initializers)",
					 (unsigned long long)n_bytes, ONNX_MAX_KNOWN_ELEMENTS);
		status = f8_onnx_tensor_known(im, value->t, &type, &known);
		return status ? status : f8_onnx_bind_known(im, node, 0, known);
	}
	bool is_int = strcmp(name, "value_int") == 0 || strcmp(name, "value_ints") == 0;
	bool is_float = strcmp(name, "value_float") == 0 || strcmp(name, "value_floats") == 0;
	bool list = strcmp(name, "value_ints") == 0 || strcmp(name, "value_floats") == 0;
	if (!is_int && !is_float)
		return f8_onnx_fail(im, F8_ERR_UNSUPPORTED, "Constant with attribute %s", name);
	size_t n = list ? (is_int ? attr->n_ints : attr->n_floats) : 1;
	f8_shape shape = {.rank = list ? 1 : 0, .dims = {f8_dim_const((int64_t)n)}};
	known = f8_onnx_known_create(im, is_int ? F8_DTYPE_I64 : F8_DTYPE_F32, &shape);
	if (!known)
		return f8_onnx_fail(im, F8_ERR_UNSUPPORTED, "a Constant list of %zu elements", n);
	for (size_t i = 0; i < n; i++) {
		if (is_int)
			known->ints[i] = f8_dim_const(list ? attr->ints[i] : attr->i);
		else
			known->floats[i] = list ? attr->floats[i] : attr->f;
	}
	return f8_onnx_bind_known(im, node, 0, known);
}

static f8_status convert_shape(onnx_importer *im, const onnx_node *node, const converter *c) {
	bool done;
	f8_status status = try_fold(im, node, &done);
	(void)c;
	if (!status && !done)
		status = f8_onnx_fail(im, F8_ERR_UNSUPPORTED, "Shape of a tensor too large to fold");
	return status;
}

static f8_status convert_cast(onnx_importer *im, const onnx_node *node, const converter *c) {
	int64_t to = -1, saturate = 1;
	f8_dtype dtype;
	bool done;
	f8_status status = attr_int(im, node, "to", -1, &to);
	if (!status)
		status = attr_int(im, node, "saturate", 1, &saturate);
	if (status)
		return status;
	if (!f8_onnx_dtype((int32_t)to, &dtype))
		return f8_onnx_fail(im, F8_ERR_UNSUPPORTED, "Cast to %s", f8_onnx_dtype_name((int32_t)to));
	if ((status = try_fold(im, node, &done)) || done)
		return status;
	f8_value_id x;
	f8_attr attrs[2] = {{.name = "to", .kind = F8_ATTR_DTYPE, .dtype = dtype},
			    {.name = "saturate", .kind = F8_ATTR_INT, .i = saturate}};
	status = input_value(im, node, 0, &x);
	// saturate only means something for FP8 targets; ONNX's default (1) is left implicit.
	uint32_t n_attrs = f8_dtype_is_fp8(dtype) && saturate == 0 ? 2 : 1;
	(void)c;
	return status ? status : f8_onnx_emit(im, node, F8_OP_CAST, &x, 1, attrs, n_attrs, 1, NULL);
}

static f8_status convert_cast_like(onnx_importer *im, const onnx_node *node, const converter *c) {
	int64_t saturate = 1;
	f8_value_id inputs[2];
	f8_status status = attr_int(im, node, "saturate", 1, &saturate);
	if (!status)
		status = input_values(im, node, 2, inputs);
	f8_attr attr = {.name = "saturate", .kind = F8_ATTR_INT, .i = saturate};
	bool fp8 = !status && f8_dtype_is_fp8(im->graph->values[inputs[1]].type.dtype);
	(void)c;
	return status ? status
		      : f8_onnx_emit(im, node, F8_OP_CAST_LIKE, inputs, 2, &attr, fp8 && !saturate, 1, NULL);
}

/* Reshape and Expand: the shape input becomes the `shape` attribute. */
static f8_status convert_reshape(onnx_importer *im, const onnx_node *node, const converter *c) {
	bool done;
	f8_status status = try_fold(im, node, &done);
	if (status || done)
		return status;
	f8_dim dims[F8_MAX_RANK];
	uint32_t n;
	int64_t allow_zero = 0;
	f8_value_id x;
	if ((status = input_dims(im, node, 1, "shape", dims, F8_MAX_RANK, &n)))
		return status;
	if (c->op == F8_OP_RESHAPE && (status = attr_int(im, node, "allowzero", 0, &allow_zero)))
		return status;
	if ((status = input_value(im, node, 0, &x)))
		return status;
	f8_attr attrs[2] = {{.name = "shape", .kind = F8_ATTR_DIMS, .dims = {n, dims}},
			    {.name = "allowzero", .kind = F8_ATTR_INT, .i = allow_zero}};
	return f8_onnx_emit(im, node, c->op, &x, 1, attrs, allow_zero ? 2 : 1, 1, NULL);
}

/*
 * Tile: x (d0, .., dn-1) repeated r_i times along each axis. An axis of size 1 or repeated once
 * is Expand's broadcast; otherwise x is read as (.., 1, d_i, ..) with a new axis before each such
 * axis, expanded to (.., r_i, d_i, ..) and reshaped to (.., r_i d_i, ..), which concatenates r_i
 * copies, as Tile does. So Tile becomes Expand, or Reshape, Expand and Reshape: ops whose
 * kernels, gradients and fusion f8c has.
 */
static f8_status convert_tile(onnx_importer *im, const onnx_node *node, const converter *c) {
	(void)c;
	int64_t repeats[F8_MAX_RANK];
	uint32_t n;
	f8_value_id x;
	f8_status status = input_value(im, node, 0, &x);
	if (!status)
		status = input_ints(im, node, 1, "repeats", repeats, F8_MAX_RANK, &n);
	if (status)
		return status;
	const f8_shape shape = im->graph->values[x].type.shape;
	if ((int)n != shape.rank)
		return f8_onnx_fail(im, F8_ERR_INVALID, "Tile has %u repeats for an input of rank %d",
				 n, shape.rank);
	f8_dim split[F8_MAX_RANK], spread[F8_MAX_RANK], tiled[F8_MAX_RANK];
	bool broadcast[F8_MAX_RANK];
	int rank = shape.rank; // of the spread copy: one more per axis that is not a broadcast
	for (int i = 0; i < shape.rank; i++) {
		f8_dim d = shape.dims[i];
		if (repeats[i] < 0)
			return f8_onnx_fail(im, F8_ERR_INVALID, "Tile repeats axis %d %lld times", i,
					 (long long)repeats[i]);
		if (!f8_dim_mul(d, f8_dim_const(repeats[i]), &tiled[i]))
			return f8_onnx_fail(im, F8_ERR_UNSUPPORTED, "Tile's axis %d is too large", i);
		broadcast[i] = repeats[i] == 1 || (f8_dim_is_const(d) && f8_dim_value(d) == 1);
		rank += !broadcast[i];
	}
	if (rank > F8_MAX_RANK)
		return f8_onnx_fail(im, F8_ERR_UNSUPPORTED, "Tile repeats %d axes of a rank-%d input: "
				 "spreading them takes rank %d, over f8c's limit of %d",
				 rank - shape.rank, shape.rank, rank, F8_MAX_RANK);
	rank = 0;
	for (int i = 0; i < shape.rank; i++) {
		if (!broadcast[i])
			split[rank] = f8_dim_const(1), spread[rank++] = f8_dim_const(repeats[i]);
		split[rank] = shape.dims[i], spread[rank++] = broadcast[i] ? tiled[i] : shape.dims[i];
	}
	f8_attr expand = {.name = "shape", .kind = F8_ATTR_DIMS, .dims = {(uint32_t)rank, spread}};
	if (rank == shape.rank) // every axis broadcasts
		return f8_onnx_emit(im, node, F8_OP_EXPAND, &x, 1, &expand, 1, 1, NULL);
	f8_attr reshape = {.name = "shape", .kind = F8_ATTR_DIMS, .dims = {(uint32_t)rank, split}};
	f8_value_id grouped, copies;
	if ((status = f8_onnx_emit_step(im, node, F8_OP_RESHAPE, &x, 1, &reshape, 1, &grouped)) ||
	    (status = f8_onnx_emit_step(im, node, F8_OP_EXPAND, &grouped, 1, &expand, 1, &copies)))
		return status;
	f8_attr joined = {.name = "shape", .kind = F8_ATTR_DIMS,
			  .dims = {(uint32_t)shape.rank, tiled}};
	return f8_onnx_emit(im, node, F8_OP_RESHAPE, &copies, 1, &joined, 1, 1, NULL);
}

/* The full-width table Rope reads from a RotaryEmbedding cache of half width (B, seq, half):
 * each angle twice, as the halves (c, c) or, interleaved, as pairs (c0, c0, c1, c1, ..); then
 * a heads axis, (B, 1, seq, 2 half), that broadcasts against x (batch, heads, seq, head). */
static f8_status rope_table(onnx_importer *im, const onnx_node *node, f8_value_id half_table,
			    bool interleaved, f8_value_id *out) {
	f8_shape shape = im->graph->values[half_table].type.shape;
	f8_dim full;
	if (shape.rank != 3 || !f8_dim_mul(shape.dims[2], f8_dim_const(2), &full))
		return f8_onnx_fail(im, F8_ERR_INVALID, "RotaryEmbedding's cos and sin caches must be "
				 "(batch, seq, rotary_dim / 2), or (positions, rotary_dim / 2) with "
				 "position_ids");
	f8_value_id table;
	f8_status status;
	if (!interleaved) {
		f8_value_id halves[2] = {half_table, half_table};
		f8_attr axis = {.name = "axis", .kind = F8_ATTR_INT, .i = -1};
		status = f8_onnx_emit_step(im, node, F8_OP_CONCAT, halves, 2, &axis, 1, &table);
	} else {
		int64_t last = 3;
		f8_attr axes = {.name = "axes", .kind = F8_ATTR_INTS, .ints = {1, &last}};
		f8_dim pairs[4] = {shape.dims[0], shape.dims[1], shape.dims[2], f8_dim_const(2)};
		f8_dim rows[3] = {shape.dims[0], shape.dims[1], full};
		f8_attr expand = {.name = "shape", .kind = F8_ATTR_DIMS, .dims = {4, pairs}};
		f8_attr reshape = {.name = "shape", .kind = F8_ATTR_DIMS, .dims = {3, rows}};
		f8_value_id column, paired;
		status = f8_onnx_emit_step(im, node, F8_OP_UNSQUEEZE, &half_table, 1, &axes, 1, &column);
		if (!status)
			status = f8_onnx_emit_step(im, node, F8_OP_EXPAND, &column, 1, &expand, 1, &paired);
		if (!status)
			status = f8_onnx_emit_step(im, node, F8_OP_RESHAPE, &paired, 1, &reshape, 1, &table);
	}
	int64_t heads_axis = 1;
	f8_attr axes = {.name = "axes", .kind = F8_ATTR_INTS, .ints = {1, &heads_axis}};
	return status ? status
		      : f8_onnx_emit_step(im, node, F8_OP_UNSQUEEZE, &table, 1, &axes, 1, out);
}

/*
 * RotaryEmbedding (opset 23): x (batch, heads, seq, head) or (batch, seq, hidden) with
 * num_heads, cos and sin caches of half the rotary width, per (batch, seq) or per position
 * gathered by position_ids. f8c's Rope reads full-width tables and x with seq second to last, so
 * the caches are gathered and widened (rope_table) and a 3-D x is split into heads and back.
 */
static f8_status convert_rotary_embedding(onnx_importer *im, const onnx_node *node,
					  const converter *c) {
	(void)c;
	int64_t interleaved, rotary_dim, num_heads;
	f8_value_id inputs[4];
	uint32_t n = node->n_inputs > 4 ? 4 : node->n_inputs;
	f8_status status = attr_int(im, node, "interleaved", 0, &interleaved);
	if (!status)
		status = attr_int(im, node, "rotary_embedding_dim", 0, &rotary_dim);
	if (!status)
		status = attr_int(im, node, "num_heads", 0, &num_heads);
	if (!status)
		status = input_values(im, node, n, inputs);
	if (status)
		return status;
	f8_value_id tables[2] = {inputs[1], inputs[2]};
	if (n > 3 && inputs[3] != F8_NONE) // per position: the rows of the batch's positions
		for (int t = 0; t < 2 && !status; t++) {
			f8_value_id gather[2] = {tables[t], inputs[3]};
			f8_attr axis = {.name = "axis", .kind = F8_ATTR_INT, .i = 0};
			status = f8_onnx_emit_step(im, node, F8_OP_GATHER, gather, 2, &axis, 1,
						   &tables[t]);
		}
	for (int t = 0; t < 2 && !status; t++)
		status = rope_table(im, node, tables[t], interleaved != 0, &tables[t]);
	if (status)
		return status;
	f8_shape x_shape = im->graph->values[inputs[0]].type.shape;
	f8_shape table_shape = im->graph->values[tables[0]].type.shape;
	// Without rotary_embedding_dim the whole head rotates: the caches are half a head wide.
	f8_dim head_dim = x_shape.rank == 4 ? x_shape.dims[3] : f8_dim_const(0);
	if (x_shape.rank == 3 && num_heads > 0)
		f8_dim_div(x_shape.dims[2], f8_dim_const(num_heads), &head_dim);
	bool widths = rotary_dim ? f8_dim_is_const(table_shape.dims[3]) &&
					   f8_dim_value(table_shape.dims[3]) == rotary_dim
				 : f8_dim_equal(table_shape.dims[3], head_dim);
	if (!widths)
		return f8_onnx_fail(im, F8_ERR_INVALID, "RotaryEmbedding's caches are not half %s wide",
				 rotary_dim ? "rotary_embedding_dim" : "the head (rotary_embedding_dim "
				 "is 0: the whole head rotates)");
	f8_attr rope_attr = {.name = "interleaved", .kind = F8_ATTR_INT, .i = interleaved != 0};
	f8_value_id rope_inputs[3] = {inputs[0], tables[0], tables[1]};
	if (x_shape.rank == 4)
		return f8_onnx_emit(im, node, F8_OP_ROPE, rope_inputs, 3, &rope_attr, 1, 1, NULL);
	f8_dim head;
	if (x_shape.rank != 3 || num_heads < 1 ||
	    !f8_dim_div(x_shape.dims[2], f8_dim_const(num_heads), &head))
		return f8_onnx_fail(im, F8_ERR_INVALID, "RotaryEmbedding's x must be (batch, heads, "
				 "seq, head), or (batch, seq, hidden) with num_heads dividing hidden");
	// (batch, seq, hidden) -> (batch, heads, seq, head), rotated, and back.
	f8_dim split[4] = {x_shape.dims[0], x_shape.dims[1], f8_dim_const(num_heads), head};
	int64_t swap[4] = {0, 2, 1, 3};
	f8_attr reshape = {.name = "shape", .kind = F8_ATTR_DIMS, .dims = {4, split}};
	f8_attr perm = {.name = "perm", .kind = F8_ATTR_INTS, .ints = {4, swap}};
	f8_attr joined = {.name = "shape", .kind = F8_ATTR_DIMS, .dims = {3, x_shape.dims}};
	f8_value_id heads, by_head, rotated, back;
	if ((status = f8_onnx_emit_step(im, node, F8_OP_RESHAPE, &inputs[0], 1, &reshape, 1, &heads)) ||
	    (status = f8_onnx_emit_step(im, node, F8_OP_TRANSPOSE, &heads, 1, &perm, 1, &by_head)))
		return status;
	rope_inputs[0] = by_head;
	if ((status = f8_onnx_emit_step(im, node, F8_OP_ROPE, rope_inputs, 3, &rope_attr, 1,
					&rotated)) ||
	    (status = f8_onnx_emit_step(im, node, F8_OP_TRANSPOSE, &rotated, 1, &perm, 1, &back)))
		return status;
	return f8_onnx_emit(im, node, F8_OP_RESHAPE, &back, 1, &joined, 1, 1, NULL);
}

/*
 * GatherElements(data, indices, axis): y[i] = data[i with its axis coordinate replaced by
 * indices[i]]. f8c reads it as GatherND over the full coordinates of every element of
 * `indices`: along `axis` the indices themselves, along each other axis its position (a Range
 * shaped to broadcast and expanded), stacked on a last axis of the data's rank.
 */
static f8_status convert_gather_elements(onnx_importer *im, const onnx_node *node,
					 const converter *c) {
	int64_t axis;
	f8_value_id inputs[2];
	f8_status status = attr_int(im, node, "axis", 0, &axis);
	if (!status)
		status = input_values(im, node, 2, inputs);
	if (status)
		return status;
	const f8_type data = im->graph->values[inputs[0]].type;
	f8_type indices = im->graph->values[inputs[1]].type; // a copy: attributes point into it
	int rank = indices.shape.rank;
	if (rank != data.shape.rank || rank < 1 || rank >= F8_MAX_RANK)
		return f8_onnx_fail(im, F8_ERR_INVALID, "GatherElements' data and indices must have "
				 "one rank, below %d (they have %d and %d)", F8_MAX_RANK,
				 data.shape.rank, rank);
	if (axis < -rank || axis >= rank)
		return f8_onnx_fail(im, F8_ERR_INVALID, "GatherElements' axis %lld is outside rank %d",
				 (long long)axis, rank);
	if (axis < 0)
		axis += rank;
	if (!f8_dtype_is_integer(indices.dtype))
		return f8_onnx_fail(im, F8_ERR_INVALID, "GatherElements' indices must be integers");
	f8_value_id coords[F8_MAX_RANK];
	int64_t last = rank;
	f8_attr unsqueeze = {.name = "axes", .kind = F8_ATTR_INTS, .ints = {1, &last}};
	for (int k = 0; k < rank && !status; k++) {
		f8_value_id along = inputs[1];
		if (indices.dtype != F8_DTYPE_I64 || k != axis) {
			f8_attr cast = {.name = "to", .kind = F8_ATTR_DTYPE, .dtype = F8_DTYPE_I64};
			if (k == axis) {
				status = f8_onnx_emit_step(im, node, F8_OP_CAST, &along, 1, &cast, 1,
							   &along);
			} else { // position k of each element: Range(0, d_k) as (1, .., d_k, .., 1)
				f8_attr range[2] = {
					{.name = "limit", .kind = F8_ATTR_DIM, .dim = indices.shape.dims[k]},
					{.name = "dtype", .kind = F8_ATTR_DTYPE, .dtype = F8_DTYPE_I64}};
				f8_dim column[F8_MAX_RANK];
				for (int d = 0; d < rank; d++)
					column[d] = d == k ? indices.shape.dims[k] : f8_dim_const(1);
				f8_attr shape = {.name = "shape", .kind = F8_ATTR_DIMS,
						 .dims = {(uint32_t)rank, column}};
				f8_attr full = {.name = "shape", .kind = F8_ATTR_DIMS,
						.dims = {(uint32_t)rank, indices.shape.dims}};
				f8_value_id positions, shaped;
				status = f8_onnx_emit_step(im, node, F8_OP_RANGE, NULL, 0, range, 2,
							   &positions);
				if (!status)
					status = f8_onnx_emit_step(im, node, F8_OP_RESHAPE, &positions, 1,
								   &shape, 1, &shaped);
				if (!status)
					status = f8_onnx_emit_step(im, node, F8_OP_EXPAND, &shaped, 1,
								   &full, 1, &along);
			}
		}
		if (!status)
			status = f8_onnx_emit_step(im, node, F8_OP_UNSQUEEZE, &along, 1, &unsqueeze, 1,
						   &coords[k]);
	}
	f8_attr concat = {.name = "axis", .kind = F8_ATTR_INT, .i = -1};
	f8_value_id stacked;
	if (!status)
		status = f8_onnx_emit_step(im, node, F8_OP_CONCAT, coords, (uint32_t)rank, &concat, 1,
					   &stacked);
	if (status)
		return status;
	f8_value_id gather[2] = {inputs[0], stacked};
	(void)c;
	return f8_onnx_emit(im, node, F8_OP_GATHER_ND, gather, 2, NULL, 0, 1, NULL);
}

/* Clip(x, min, max), either bound optional: Max with min, then Min with max. */
static f8_status convert_clip(onnx_importer *im, const onnx_node *node, const converter *c) {
	(void)c;
	f8_value_id inputs[3] = {F8_NONE, F8_NONE, F8_NONE};
	uint32_t n = node->n_inputs > 3 ? 3 : node->n_inputs;
	f8_status status = input_values(im, node, n, inputs);
	if (status)
		return status;
	if (inputs[1] == F8_NONE && inputs[2] == F8_NONE)
		return f8_onnx_bind_alias(im, node, 0, node->inputs[0]);
	f8_value_id x = inputs[0];
	if (inputs[1] != F8_NONE) {
		f8_value_id pair[2] = {x, inputs[1]};
		if (inputs[2] == F8_NONE)
			return f8_onnx_emit(im, node, F8_OP_MAX, pair, 2, NULL, 0, 1, NULL);
		if ((status = f8_onnx_emit_step(im, node, F8_OP_MAX, pair, 2, NULL, 0, &x)))
			return status;
	}
	f8_value_id pair[2] = {x, inputs[2]};
	return f8_onnx_emit(im, node, F8_OP_MIN, pair, 2, NULL, 0, 1, NULL);
}

/* Squeeze and Unsqueeze: axes from the second input. */
static f8_status convert_squeeze(onnx_importer *im, const onnx_node *node, const converter *c) {
	bool done;
	f8_status status = try_fold(im, node, &done);
	if (status || done)
		return status;
	int64_t axes[F8_MAX_RANK];
	uint32_t n;
	f8_value_id x;
	if ((status = input_ints(im, node, 1, "axes", axes, F8_MAX_RANK, &n)) ||
	    (status = input_value(im, node, 0, &x)))
		return status;
	bool has_axes = node->n_inputs > 1 && node->inputs[1];
	f8_attr attr = {.name = "axes", .kind = F8_ATTR_INTS, .ints = {n, axes}};
	return f8_onnx_emit(im, node, c->op, &x, 1, &attr, has_axes, 1, NULL);
}

static f8_status convert_concat(onnx_importer *im, const onnx_node *node, const converter *c) {
	int64_t axis;
	bool done;
	f8_status status = attr_int(im, node, "axis", INT64_MIN, &axis);
	if (!status && axis == INT64_MIN)
		status = f8_onnx_fail(im, F8_ERR_INVALID, "Concat needs attribute axis");
	if (!status)
		status = try_fold(im, node, &done);
	if (status || done)
		return status;
	f8_value_id *inputs = f8_arena_alloc_array(im->graph->arena, node->n_inputs, sizeof *inputs);
	if (!inputs)
		return f8_diag_set(im->diag, F8_ERR_NOMEM, "out of memory");
	if ((status = input_values(im, node, node->n_inputs, inputs)))
		return status;
	f8_attr attr = {.name = "axis", .kind = F8_ATTR_INT, .i = axis};
	(void)c;
	return f8_onnx_emit(im, node, F8_OP_CONCAT, inputs, node->n_inputs, &attr, 1, 1, NULL);
}

static f8_status convert_split(onnx_importer *im, const onnx_node *node, const converter *c) {
	int64_t axis;
	f8_dim split[64];
	uint32_t n;
	f8_value_id x;
	f8_status status = attr_int(im, node, "axis", 0, &axis);
	if (!status)
		status = input_dims(im, node, 1, "split", split, 64, &n);
	if (!status)
		status = input_value(im, node, 0, &x);
	if (status)
		return status;
	if (node->proto->n_output > 64)
		return f8_onnx_fail(im, F8_ERR_UNSUPPORTED, "Split into %zu parts", node->proto->n_output);
	f8_attr attrs[2] = {{.name = "axis", .kind = F8_ATTR_INT, .i = axis},
			    {.name = "split", .kind = F8_ATTR_DIMS, .dims = {n, split}}};
	(void)c;
	return f8_onnx_emit(im, node, F8_OP_SPLIT, &x, 1, attrs, n ? 2 : 1,
			 (uint32_t)node->proto->n_output, NULL);
}

static f8_status convert_slice(onnx_importer *im, const onnx_node *node, const converter *c) {
	bool done;
	f8_status status = try_fold(im, node, &done);
	if (status || done)
		return status;
	f8_dim starts[F8_MAX_RANK], ends[F8_MAX_RANK];
	int64_t axes[F8_MAX_RANK], steps[F8_MAX_RANK];
	uint32_t n_starts, n_ends, n_axes, n_steps;
	f8_value_id x;
	if ((status = input_dims(im, node, 1, "starts", starts, F8_MAX_RANK, &n_starts)) ||
	    (status = input_dims(im, node, 2, "ends", ends, F8_MAX_RANK, &n_ends)) ||
	    (status = input_ints(im, node, 3, "axes", axes, F8_MAX_RANK, &n_axes)) ||
	    (status = input_ints(im, node, 4, "steps", steps, F8_MAX_RANK, &n_steps)) ||
	    (status = input_value(im, node, 0, &x)))
		return status;
	// Ends past the end (INT64_MAX from exporters) stay as written: the IR clamps them.
	f8_attr attrs[4] = {{.name = "starts", .kind = F8_ATTR_DIMS, .dims = {n_starts, starts}},
			    {.name = "ends", .kind = F8_ATTR_DIMS, .dims = {n_ends, ends}},
			    {.name = "axes", .kind = F8_ATTR_INTS, .ints = {n_axes, axes}},
			    {.name = "steps", .kind = F8_ATTR_INTS, .ints = {n_steps, steps}}};
	uint32_t n_attrs = 2;
	if (n_axes)
		attrs[n_attrs++] = attrs[2];
	if (n_steps)
		attrs[n_attrs++] = attrs[3];
	(void)c;
	return f8_onnx_emit(im, node, F8_OP_SLICE, &x, 1, attrs, n_attrs, 1, NULL);
}

/* Ops with one optional INT attribute of the same name in ONNX and the IR. */
static f8_status convert_axis_op(onnx_importer *im, const onnx_node *node, const converter *c,
				 const char *name, int64_t fallback) {
	bool done;
	int64_t value;
	f8_value_id inputs[2];
	f8_status status = attr_int(im, node, name, fallback, &value);
	if (!status && c->op != F8_OP_SOFTMAX && c->op != F8_OP_LOG_SOFTMAX)
		status = try_fold(im, node, &done);
	else
		done = false;
	if (status || done)
		return status;
	uint32_t n = node->n_inputs > 2 ? 2 : node->n_inputs;
	if ((status = input_values(im, node, n, inputs)))
		return status;
	f8_attr attr = {.name = name, .kind = F8_ATTR_INT, .i = value};
	return f8_onnx_emit(im, node, c->op, inputs, n, &attr, value != fallback, 1, NULL);
}

static f8_status convert_gather(onnx_importer *im, const onnx_node *node, const converter *c) {
	return convert_axis_op(im, node, c, "axis", 0);
}

static f8_status convert_softmax(onnx_importer *im, const onnx_node *node, const converter *c) {
	return convert_axis_op(im, node, c, "axis", -1);
}

/* GatherND. Indices of depth 1 without batch dims (i (.., 1): data[i[.., 0]], whole rows, as
 * Falcon's export picks its fused k and v heads) are Gather's along axis 0, an op with a
 * gradient: the last axis of the indices is squeezed and Gather reads the rest. */
static f8_status convert_gather_nd(onnx_importer *im, const onnx_node *node, const converter *c) {
	int64_t batch_dims;
	f8_value_id inputs[2];
	f8_status status = attr_int(im, node, "batch_dims", 0, &batch_dims);
	if (!status)
		status = input_values(im, node, 2, inputs);
	if (status)
		return status;
	const f8_shape *indices = &im->graph->values[inputs[1]].type.shape;
	const f8_dim depth = indices->rank ? indices->dims[indices->rank - 1] : f8_dim_const(0);
	if (batch_dims != 0 || indices->rank < 2 || !f8_dim_equal(depth, f8_dim_const(1)))
		return convert_axis_op(im, node, c, "batch_dims", 0);
	int64_t last = indices->rank - 1;
	f8_attr axes = {.name = "axes", .kind = F8_ATTR_INTS, .ints = {1, &last}};
	f8_value_id rows;
	if ((status = f8_onnx_emit_step(im, node, F8_OP_SQUEEZE, &inputs[1], 1, &axes, 1, &rows)))
		return status;
	f8_value_id gather[2] = {inputs[0], rows};
	return f8_onnx_emit(im, node, F8_OP_GATHER, gather, 2, NULL, 0, 1, NULL);
}

static f8_status convert_range(onnx_importer *im, const onnx_node *node, const converter *c) {
	bool done;
	f8_status status = try_fold(im, node, &done);
	if (status || done)
		return status;
	f8_dim start, limit, delta;
	uint32_t n_start, n_limit, n_delta;
	if ((status = input_dims(im, node, 0, "start", &start, 1, &n_start)) ||
	    (status = input_dims(im, node, 1, "limit", &limit, 1, &n_limit)) ||
	    (status = input_dims(im, node, 2, "delta", &delta, 1, &n_delta)))
		return status;
	if (n_start != 1 || n_limit != 1 || n_delta != 1)
		return f8_onnx_fail(im, F8_ERR_INVALID, "Range's start, limit and delta must be scalars");
	if (!f8_dim_is_const(start) || !f8_dim_is_const(delta))
		return f8_onnx_fail(im, F8_ERR_UNSUPPORTED, "Range with a symbolic start or delta");
	f8_attr attrs[4] = {
		{.name = "start", .kind = F8_ATTR_INT, .i = f8_dim_value(start)},
		{.name = "limit", .kind = F8_ATTR_DIM, .dim = limit},
		{.name = "delta", .kind = F8_ATTR_INT, .i = f8_dim_value(delta)},
		{.name = "dtype", .kind = F8_ATTR_DTYPE, .dtype = node->inputs[0]->known->dtype},
	};
	(void)c;
	return f8_onnx_emit(im, node, F8_OP_RANGE, NULL, 0, attrs, 4, 1, NULL);
}

static f8_status convert_constant_of_shape(onnx_importer *im, const onnx_node *node,
					   const converter *c) {
	bool done;
	f8_status status = try_fold(im, node, &done);
	if (status || done)
		return status;
	f8_dim dims[F8_MAX_RANK];
	uint32_t n;
	const F8cOnnx__AttributeProto *value;
	onnx_known *fill = NULL;
	f8_tensor_data tensor;
	if ((status = input_dims(im, node, 0, "shape", dims, F8_MAX_RANK, &n)) ||
	    (status = typed_attr(im, node, "value", ATTR_TENSOR, &value)))
		return status;
	if (value && value->t) {
		f8_type type = {0};
		uint64_t n_bytes;
		if ((status = f8_onnx_tensor_check(im, value->t, &type, &n_bytes)))
			return status;
		if (n_bytes != f8_dtype_get_info(type.dtype)->bytes)
			return f8_onnx_fail(im, F8_ERR_INVALID, "ConstantOfShape's value must hold one "
					 "element, not %llu bytes of %s", (unsigned long long)n_bytes,
					 f8_dtype_name(type.dtype));
		if ((status = f8_onnx_tensor_known(im, value->t, &type, &fill)) ||
		    (status = f8_onnx_known_to_tensor(im, fill, &tensor)))
			return status;
	}
	f8_attr attrs[2] = {{.name = "shape", .kind = F8_ATTR_DIMS, .dims = {n, dims}},
			    {.name = "value", .kind = F8_ATTR_TENSOR, .tensor = &tensor}};
	(void)c;
	return f8_onnx_emit(im, node, F8_OP_CONSTANT_OF_SHAPE, NULL, 0, attrs, fill ? 2 : 1, 1, NULL);
}

static f8_status convert_trilu(onnx_importer *im, const onnx_node *node, const converter *c) {
	int64_t upper = 1, k = 0;
	uint32_t n;
	f8_value_id x;
	f8_status status = attr_int(im, node, "upper", 1, &upper);
	if (!status)
		status = input_ints(im, node, 1, "k", &k, 1, &n);
	if (!status)
		status = input_value(im, node, 0, &x);
	f8_attr attrs[2] = {{.name = "upper", .kind = F8_ATTR_INT, .i = upper},
			    {.name = "k", .kind = F8_ATTR_INT, .i = k}};
	(void)c;
	return status ? status : f8_onnx_emit(im, node, F8_OP_TRILU, &x, 1, attrs, 2, 1, NULL);
}

/* ReduceMean / ReduceSum / ReduceMax: axes from an attribute (older opsets) or the input. */
static f8_status convert_reduce(onnx_importer *im, const onnx_node *node, const converter *c) {
	int64_t keepdims = 1, noop = 0, axes[F8_MAX_RANK];
	uint32_t n = 0;
	const F8cOnnx__AttributeProto *axes_attr;
	f8_value_id x;
	f8_status status = attr_int(im, node, "keepdims", 1, &keepdims);
	if (!status)
		status = attr_int(im, node, "noop_with_empty_axes", 0, &noop);
	if (!status)
		status = typed_attr(im, node, "axes", ATTR_INTS, &axes_attr);
	if (!status && axes_attr) {
		n = axes_attr->n_ints > F8_MAX_RANK ? F8_MAX_RANK + 1 : (uint32_t)axes_attr->n_ints;
		for (uint32_t i = 0; i < n && i < F8_MAX_RANK; i++)
			axes[i] = axes_attr->ints[i];
		if (n > F8_MAX_RANK)
			status = f8_onnx_fail(im, F8_ERR_INVALID, "too many axes");
	} else if (!status) {
		status = input_ints(im, node, 1, "axes", axes, F8_MAX_RANK, &n);
	}
	if (status)
		return status;
	if (n == 0 && noop)
		return f8_onnx_bind_alias(im, node, 0, node->inputs[0]);
	if ((status = input_value(im, node, 0, &x)))
		return status;
	f8_attr attrs[2] = {{.name = "axes", .kind = F8_ATTR_INTS, .ints = {n, axes}},
			    {.name = "keepdims", .kind = F8_ATTR_INT, .i = keepdims}};
	f8_attr *first = n ? attrs : attrs + 1;
	uint32_t n_attrs = (n ? 1 : 0) + (keepdims != 1);
	return f8_onnx_emit(im, node, c->op, &x, 1, first, n_attrs, 1, NULL);
}

static f8_status convert_cum_sum(onnx_importer *im, const onnx_node *node, const converter *c) {
	int64_t axis = 0, exclusive = 0, reverse = 0;
	uint32_t n;
	f8_value_id x;
	f8_status status = attr_int(im, node, "exclusive", 0, &exclusive);
	if (!status)
		status = attr_int(im, node, "reverse", 0, &reverse);
	if (!status)
		status = input_ints(im, node, 1, "axis", &axis, 1, &n);
	if (!status && n != 1)
		status = f8_onnx_fail(im, F8_ERR_INVALID, "CumSum needs one axis");
	if (!status)
		status = input_value(im, node, 0, &x);
	f8_attr attrs[3] = {{.name = "axis", .kind = F8_ATTR_INT, .i = axis},
			    {.name = "exclusive", .kind = F8_ATTR_INT, .i = exclusive},
			    {.name = "reverse", .kind = F8_ATTR_INT, .i = reverse}};
	(void)c;
	return status ? status : f8_onnx_emit(im, node, F8_OP_CUM_SUM, &x, 1, attrs, 3, 1, NULL);
}

/* TopK(X, K): K a constant (a router's top-k), read into the op's attribute. */
static f8_status convert_top_k(onnx_importer *im, const onnx_node *node, const converter *c) {
	int64_t axis = -1, largest = 1, sorted = 1, k = 0;
	uint32_t n;
	f8_value_id x;
	f8_status status = attr_int(im, node, "axis", -1, &axis);
	if (!status)
		status = attr_int(im, node, "largest", 1, &largest);
	if (!status)
		status = attr_int(im, node, "sorted", 1, &sorted);
	if (!status)
		status = input_ints(im, node, 1, "K", &k, 1, &n);
	if (!status && n != 1)
		status = f8_onnx_fail(im, F8_ERR_INVALID, "TopK's K has %u elements, not one", n);
	if (!status)
		status = input_value(im, node, 0, &x);
	f8_attr attrs[4] = {{.name = "k", .kind = F8_ATTR_INT, .i = k},
			    {.name = "axis", .kind = F8_ATTR_INT, .i = axis},
			    {.name = "largest", .kind = F8_ATTR_INT, .i = largest},
			    {.name = "sorted", .kind = F8_ATTR_INT, .i = sorted}};
	(void)c;
	return status ? status : f8_onnx_emit(im, node, F8_OP_TOP_K, &x, 1, attrs, 4, 2, NULL);
}

/* The number of outputs up to the last one named (optional outputs may be left empty). */
static uint32_t named_outputs(const onnx_node *node) {
	uint32_t n = 0;
	for (size_t i = 0; i < node->proto->n_output; i++)
		if (node->proto->output[i] && *node->proto->output[i])
			n = (uint32_t)i + 1;
	return n;
}

/* LayerNormalization (x, scale, bias) and RMSNormalization (x, scale; opset 23): normalized
 * over the axes from `axis` on, statistics in f32. */
static f8_status convert_layer_norm(onnx_importer *im, const onnx_node *node, const converter *c) {
	int64_t axis = -1, stash_type = 1;
	double epsilon = 1e-5;
	f8_value_id inputs[3];
	f8_status status = attr_int(im, node, "axis", -1, &axis);
	if (!status)
		status = attr_float(im, node, "epsilon", 1e-5, &epsilon);
	if (!status)
		status = attr_int(im, node, "stash_type", 1, &stash_type);
	if (!status && stash_type != 1)
		status = f8_onnx_fail(im, F8_ERR_UNSUPPORTED, "%s with stash_type %lld; f8c computes "
				   "norms' statistics in f32 (stash_type 1)", c->name,
				   (long long)stash_type);
	uint32_t most = c->op == F8_OP_RMS_NORM ? 2 : 3;
	uint32_t n = node->n_inputs > most ? most : node->n_inputs;
	if (!status)
		status = input_values(im, node, n, inputs);
	// The attribute is float in ONNX; the double holds the float's value exactly.
	f8_attr attrs[2] = {{.name = "axis", .kind = F8_ATTR_INT, .i = axis},
			    {.name = "epsilon", .kind = F8_ATTR_FLOAT, .f = epsilon}};
	uint32_t outputs = c->op == F8_OP_RMS_NORM ? 1 : named_outputs(node);
	return status ? status
		      : f8_onnx_emit(im, node, c->op, inputs, n, attrs, 2, outputs ? outputs : 1,
				  NULL);
}

static f8_status convert_gemm(onnx_importer *im, const onnx_node *node, const converter *c) {
	double alpha = 1.0, beta = 1.0;
	int64_t trans_a = 0, trans_b = 0;
	f8_value_id inputs[3];
	uint32_t n = node->n_inputs > 3 ? 3 : node->n_inputs;
	f8_status status = attr_float(im, node, "alpha", 1.0, &alpha);
	if (!status)
		status = attr_float(im, node, "beta", 1.0, &beta);
	if (!status)
		status = attr_int(im, node, "transA", 0, &trans_a);
	if (!status)
		status = attr_int(im, node, "transB", 0, &trans_b);
	if (!status)
		status = input_values(im, node, n, inputs);
	f8_attr attrs[4] = {{.name = "alpha", .kind = F8_ATTR_FLOAT, .f = alpha},
			    {.name = "beta", .kind = F8_ATTR_FLOAT, .f = beta},
			    {.name = "transA", .kind = F8_ATTR_INT, .i = trans_a},
			    {.name = "transB", .kind = F8_ATTR_INT, .i = trans_b}};
	f8_attr kept[4];
	uint32_t n_attrs = 0;
	bool defaults[4] = {alpha == 1.0, beta == 1.0, trans_a == 0, trans_b == 0};
	for (int i = 0; i < 4; i++)
		if (!defaults[i])
			kept[n_attrs++] = attrs[i];
	(void)c;
	return status ? status : f8_onnx_emit(im, node, F8_OP_GEMM, inputs, n, kept, n_attrs, 1, NULL);
}

static f8_status convert_gelu(onnx_importer *im, const onnx_node *node, const converter *c) {
	const F8cOnnx__AttributeProto *approximate;
	f8_value_id x;
	f8_status status = typed_attr(im, node, "approximate", ATTR_STRING, &approximate);
	if (!status)
		status = input_value(im, node, 0, &x);
	if (status)
		return status;
	char text[16] = "none";
	if (approximate) {
		if (approximate->s.len >= sizeof text)
			return f8_onnx_fail(im, F8_ERR_INVALID, "Gelu's approximate is not none or tanh");
		if (approximate->s.len) // an empty string has no pointer; memcpy must not see NULL
			memcpy(text, approximate->s.data, approximate->s.len);
		text[approximate->s.len] = '\0';
	}
	f8_attr attr = {.name = "approximate", .kind = F8_ATTR_STRING, .s = text};
	(void)c;
	return f8_onnx_emit(im, node, F8_OP_GELU, &x, 1, &attr, strcmp(text, "none") != 0, 1, NULL);
}

/* Dropout in an inference graph is the identity (ONNX: training_mode false by default). */
static f8_status convert_dropout(onnx_importer *im, const onnx_node *node, const converter *c) {
	int64_t training = 0;
	uint32_t n;
	f8_status status = input_ints(im, node, 2, "training_mode", &training, 1, &n);
	(void)c;
	if (status)
		return status;
	if (training)
		return f8_onnx_fail(im, F8_ERR_UNSUPPORTED, "Dropout in training mode: f8c imports the "
				 "inference graph and adds dropout when it builds training");
	if (named_outputs(node) > 1)
		return f8_onnx_fail(im, F8_ERR_UNSUPPORTED, "Dropout's mask output is read");
	return f8_onnx_bind_alias(im, node, 0, node->inputs[0]);
}

static f8_status convert_quantize_linear(onnx_importer *im, const onnx_node *node,
					 const converter *c) {
	int64_t axis = 1, saturate = 1, block_size = 0, output_dtype = 0;
	f8_value_id inputs[3];
	uint32_t n = node->n_inputs > 3 ? 3 : node->n_inputs;
	f8_status status = attr_int(im, node, "axis", 1, &axis);
	if (!status)
		status = attr_int(im, node, "saturate", 1, &saturate);
	if (!status)
		status = attr_int(im, node, "block_size", 0, &block_size);
	if (!status)
		status = attr_int(im, node, "output_dtype", 0, &output_dtype);
	if (!status)
		status = input_values(im, node, n, inputs);
	if (status)
		return status;
	// The output type: the zero point's, else output_dtype, else ONNX's default uint8.
	f8_dtype to = F8_DTYPE_U8;
	if (n == 3 && inputs[2] != F8_NONE)
		to = im->graph->values[inputs[2]].type.dtype;
	else if (output_dtype && !f8_onnx_dtype((int32_t)output_dtype, &to))
		return f8_onnx_fail(im, F8_ERR_UNSUPPORTED, "QuantizeLinear to %s",
				 f8_onnx_dtype_name((int32_t)output_dtype));
	f8_attr attrs[4] = {{.name = "to", .kind = F8_ATTR_DTYPE, .dtype = to},
			    {.name = "axis", .kind = F8_ATTR_INT, .i = axis},
			    {.name = "saturate", .kind = F8_ATTR_INT, .i = saturate},
			    {.name = "block_size", .kind = F8_ATTR_INT, .i = block_size}};
	(void)c;
	return f8_onnx_emit(im, node, F8_OP_QUANTIZE_LINEAR, inputs, n, attrs, block_size ? 4 : 3, 1,
			 NULL);
}

static f8_status convert_dequantize_linear(onnx_importer *im, const onnx_node *node,
					   const converter *c) {
	int64_t axis = 1, block_size = 0;
	f8_value_id inputs[3];
	uint32_t n = node->n_inputs > 3 ? 3 : node->n_inputs;
	f8_status status = attr_int(im, node, "axis", 1, &axis);
	if (!status)
		status = attr_int(im, node, "block_size", 0, &block_size);
	if (!status)
		status = input_values(im, node, n, inputs);
	f8_attr attrs[2] = {{.name = "axis", .kind = F8_ATTR_INT, .i = axis},
			    {.name = "block_size", .kind = F8_ATTR_INT, .i = block_size}};
	(void)c;
	return status ? status
		      : f8_onnx_emit(im, node, F8_OP_DEQUANTIZE_LINEAR, inputs, n, attrs,
				  block_size ? 2 : 1, 1, NULL);
}

static f8_status convert_transpose(onnx_importer *im, const onnx_node *node, const converter *c) {
	(void)c;
	const F8cOnnx__AttributeProto *perm;
	f8_value_id x;
	int64_t items[F8_MAX_RANK];
	f8_status status = typed_attr(im, node, "perm", ATTR_INTS, &perm);
	if (!status && perm && perm->n_ints > F8_MAX_RANK)
		status = f8_onnx_fail(im, F8_ERR_INVALID, "perm has %zu entries", perm->n_ints);
	if (!status)
		status = input_value(im, node, 0, &x);
	if (status)
		return status;
	uint32_t n = perm ? (uint32_t)perm->n_ints : 0;
	for (uint32_t i = 0; i < n; i++)
		items[i] = perm->ints[i];
	f8_attr attr = {.name = "perm", .kind = F8_ATTR_INTS, .ints = {n, items}};
	return f8_onnx_emit(im, node, F8_OP_TRANSPOSE, &x, 1, &attr, perm != NULL, 1, NULL);
}

/* The supported operators, by ONNX name. */
static const converter converters[] = {
	{"Abs", convert_plain, F8_OP_ABS, 1},
	{"Add", convert_plain, F8_OP_ADD, 2},
	{"And", convert_plain, F8_OP_AND, 2},
	{"Cast", convert_cast, F8_OP_CAST, 1},
	{"CastLike", convert_cast_like, F8_OP_CAST_LIKE, 2},
	{"Clip", convert_clip, F8_OP_MIN, 1},
	{"Concat", convert_concat, F8_OP_CONCAT, 1},
	{"Constant", convert_constant, F8_OP_CONSTANT, 0},
	{"ConstantOfShape", convert_constant_of_shape, F8_OP_CONSTANT_OF_SHAPE, 1},
	{"Cos", convert_plain, F8_OP_COS, 1},
	{"CumSum", convert_cum_sum, F8_OP_CUM_SUM, 2},
	{"DequantizeLinear", convert_dequantize_linear, F8_OP_DEQUANTIZE_LINEAR, 2},
	{"Div", convert_plain, F8_OP_DIV, 2},
	{"Dropout", convert_dropout, F8_OP_DROPOUT, 1},
	{"Equal", convert_plain, F8_OP_EQUAL, 2},
	{"Erf", convert_plain, F8_OP_ERF, 1},
	{"Exp", convert_plain, F8_OP_EXP, 1},
	{"Expand", convert_reshape, F8_OP_EXPAND, 2},
	{"Gather", convert_gather, F8_OP_GATHER, 2},
	{"GatherElements", convert_gather_elements, F8_OP_GATHER_ND, 2},
	{"GatherND", convert_gather_nd, F8_OP_GATHER_ND, 2},
	{"Gelu", convert_gelu, F8_OP_GELU, 1},
	{"Gemm", convert_gemm, F8_OP_GEMM, 2},
	{"Greater", convert_plain, F8_OP_GREATER, 2},
	{"GreaterOrEqual", convert_plain, F8_OP_GREATER_OR_EQUAL, 2},
	{"Identity", convert_identity, F8_OP_IDENTITY, 1},
	{"IsNaN", convert_plain, F8_OP_IS_NAN, 1},
	{"LayerNormalization", convert_layer_norm, F8_OP_LAYER_NORM, 2},
	{"Less", convert_plain, F8_OP_LESS, 2},
	{"LessOrEqual", convert_plain, F8_OP_LESS_OR_EQUAL, 2},
	{"Log", convert_plain, F8_OP_LOG, 1},
	{"LogSoftmax", convert_softmax, F8_OP_LOG_SOFTMAX, 1},
	{"MatMul", convert_plain, F8_OP_MATMUL, 2},
	{"Max", convert_variadic, F8_OP_MAX, 1},
	{"Min", convert_variadic, F8_OP_MIN, 1},
	{"Mul", convert_plain, F8_OP_MUL, 2},
	{"Neg", convert_plain, F8_OP_NEG, 1},
	{"Not", convert_plain, F8_OP_NOT, 1},
	{"Or", convert_plain, F8_OP_OR, 2},
	{"Pow", convert_plain, F8_OP_POW, 2},
	{"QuantizeLinear", convert_quantize_linear, F8_OP_QUANTIZE_LINEAR, 2},
	{"Range", convert_range, F8_OP_RANGE, 3},
	{"Reciprocal", convert_plain, F8_OP_RECIPROCAL, 1},
	{"ReduceMax", convert_reduce, F8_OP_REDUCE_MAX, 1},
	{"ReduceMean", convert_reduce, F8_OP_REDUCE_MEAN, 1},
	{"ReduceSum", convert_reduce, F8_OP_REDUCE_SUM, 1},
	{"RMSNormalization", convert_layer_norm, F8_OP_RMS_NORM, 2},
	{"Relu", convert_plain, F8_OP_RELU, 1},
	{"Reshape", convert_reshape, F8_OP_RESHAPE, 2},
	{"RotaryEmbedding", convert_rotary_embedding, F8_OP_ROPE, 3},
	{"Shape", convert_shape, F8_OP_SHAPE, 1},
	{"Sigmoid", convert_plain, F8_OP_SIGMOID, 1},
	{"Sin", convert_plain, F8_OP_SIN, 1},
	{"Slice", convert_slice, F8_OP_SLICE, 3},
	{"Softmax", convert_softmax, F8_OP_SOFTMAX, 1},
	{"Split", convert_split, F8_OP_SPLIT, 1},
	{"Sqrt", convert_plain, F8_OP_SQRT, 1},
	{"Squeeze", convert_squeeze, F8_OP_SQUEEZE, 1},
	{"Sub", convert_plain, F8_OP_SUB, 2},
	{"Tanh", convert_plain, F8_OP_TANH, 1},
	{"Tile", convert_tile, F8_OP_EXPAND, 2},
	{"TopK", convert_top_k, F8_OP_TOP_K, 2},
	{"Transpose", convert_transpose, F8_OP_TRANSPOSE, 1},
	{"Trilu", convert_trilu, F8_OP_TRILU, 1},
	{"Unsqueeze", convert_squeeze, F8_OP_UNSQUEEZE, 2},
	{"Where", convert_plain, F8_OP_WHERE, 3},
};

void f8_onnx_supported_ops(char *buffer, size_t size) {
	size_t used = 0;
	buffer[0] = '\0';
	for (size_t i = 0; i < sizeof converters / sizeof converters[0] && used < size; i++)
		used += (size_t)snprintf(buffer + used, size - used, "%s%s", i ? ", " : "",
					 converters[i].name);
}

f8_status f8_onnx_convert_node(onnx_importer *im, const onnx_node *node) {
	const F8cOnnx__NodeProto *proto = node->proto;
	const char *domain = proto->domain ? proto->domain : "";
	const converter *c = NULL;
	if (*domain == '\0' || strcmp(domain, "ai.onnx") == 0)
		for (size_t i = 0; i < sizeof converters / sizeof converters[0] && !c; i++)
			if (strcmp(converters[i].name, proto->op_type) == 0)
				c = &converters[i];
	if (!c) {
		char supported[1024];
		f8_onnx_supported_ops(supported, sizeof supported);
		f8_onnx_fail(im, F8_ERR_UNSUPPORTED, "f8c does not support operator %s%s%s", domain,
			  *domain ? "." : "", proto->op_type);
		f8_diag_hint(im->diag, "supported (default domain, opsets %d-%d): %s", ONNX_OPSET_MIN,
			     ONNX_OPSET_MAX, supported);
		return F8_ERR_UNSUPPORTED;
	}
	f8_status status = require_inputs(im, node, c->min_inputs);
	if (!status && proto->n_output < 1)
		status = f8_onnx_fail(im, F8_ERR_INVALID, "%s has no outputs", proto->op_type);
	if (status)
		return status;
	return c->convert(im, node, c);
}
