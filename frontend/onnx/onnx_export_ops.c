/*
 * One lowering per IR op into ONNX nodes of the default domain (opset 17 and later): primitives
 * as themselves, their shape, axes and size attributes turned back into the constant or computed
 * tensor inputs ONNX takes, and Embedding, Linear, LayerNorm, RMSNorm, Gelu and SwiGLU as what
 * torch.onnx writes for them, which f8c's fuse-patterns recognizes. Rope, Attention and the MoE
 * ops are in onnx_export_fused.c.
 */
#include <math.h>   // sqrt
#include <string.h> // strcmp

#include "frontend/onnx/onnx_export_internal.h" // onnx_exporter, export_*

static const double PI = 3.14159265358979323846;

typedef void (*lower_fn)(onnx_exporter *ex, const f8_node *node);

/* The value of input 0 for an activation: plain, or the dense rows of a MoE layer (the form
 * goes to *form, for the output). */
static const char *activation_input(onnx_exporter *ex, const f8_node *node, export_form *form) {
	*form = ex->forms[node->inputs[0]] == EXPORT_FORM_EXPERT_ROWS ? EXPORT_FORM_EXPERT_ROWS
								      : EXPORT_FORM_PLAIN;
	return f8_export_input_form(ex, node, 0, *form);
}

/* The IR name of output 0 of `node`, recorded as written in `form`. */
static const char *output_as(onnx_exporter *ex, const f8_node *node, export_form form) {
	const char *name = ex->graph->values[node->outputs[0]].name;
	f8_export_bind(ex, node, 0, name, form);
	return ex->status ? NULL : name;
}

/* An ONNX op of the IR op's name on the same inputs, without attributes: elementwise ops
 * (unary ones also on a MoE layer's dense rows), MatMul, Where. */
static void lower_same(onnx_exporter *ex, const f8_node *node) {
	const char *inputs[3];
	export_form form = EXPORT_FORM_PLAIN;
	if (node->n_inputs > 3 || node->n_outputs != 1) {
		f8_export_unsupported(ex, "%s with %u inputs and %u outputs", f8_op_name(node->op),
				   node->n_inputs, node->n_outputs);
		return;
	}
	bool elementwise = f8_op_get_info(node->op)->flags & F8_OPF_ELEMENTWISE;
	for (uint32_t i = 0; i < node->n_inputs; i++)
		inputs[i] = node->n_inputs == 1 && elementwise ? activation_input(ex, node, &form)
							       : f8_export_input(ex, node, i);
	f8_export_op_to(ex, f8_op_name(node->op), output_as(ex, node, form), inputs, node->n_inputs);
}

/* lower_same plus the node's INT attributes (the IR and ONNX agree on their names). */
static void lower_with_ints(onnx_exporter *ex, const f8_node *node) {
	lower_same(ex, node);
	F8cOnnx__NodeProto *onnx = f8_export_last(ex);
	for (uint32_t a = 0; a < node->n_attrs; a++) {
		const f8_attr *attr = &node->attrs[a];
		if (attr->kind == F8_ATTR_INT)
			f8_export_attr_int(ex, onnx, attr->name, attr->i);
		else if (attr->kind == F8_ATTR_INTS)
			f8_export_attr_ints(ex, onnx, attr->name, attr->ints.items, attr->ints.n);
		else if (attr->kind == F8_ATTR_FLOAT)
			f8_export_attr_float(ex, onnx, attr->name, attr->f);
		else
			f8_export_unsupported(ex, "attribute %s of kind %s", attr->name,
					   f8_attr_kind_name(attr->kind));
	}
}

/* Cast: the IR's dtype as ONNX's TensorProto.DataType. */
static void lower_cast(onnx_exporter *ex, const f8_node *node) {
	f8_dtype to = f8_node_attr_dtype(node, "to", F8_DTYPE_UNDEFINED);
	int32_t data_type = f8_export_data_type(to);
	if (!data_type) {
		f8_export_unsupported(ex, "Cast to %s, which ONNX has no type for", f8_dtype_name(to));
		return;
	}
	f8_export_op_to(ex, "Cast", f8_export_output(ex, node, 0), IN(f8_export_input(ex, node, 0)));
	f8_export_attr_int(ex, f8_export_last(ex), "to", data_type);
	int64_t saturate = f8_node_attr_int(node, "saturate", 1);
	if (!saturate && f8_dtype_is_fp8(to)) // opset 19 on; ONNX's default (1) is left implicit
		f8_export_attr_int(ex, f8_export_last(ex), "saturate", saturate);
}

/* Constant: a Constant node, not an initializer, so that f8c reads it back as a Constant (a
 * float initializer of more than one element would come back as a weight). */
static void lower_constant(onnx_exporter *ex, const f8_node *node) {
	const f8_tensor_data *value = f8_node_attr(node, "value")->tensor;
	if (!f8_export_data_type(value->dtype)) {
		f8_export_unsupported(ex, "a constant of dtype %s", f8_dtype_name(value->dtype));
		return;
	}
	f8_export_op_to(ex, "Constant", f8_export_output(ex, node, 0), NULL, 0);
	f8_export_attr_tensor(ex, f8_export_last(ex), "value",
			   f8_export_tensor(ex, NULL, value->dtype, &value->shape, value->data,
					 value->n_bytes));
}

/* ConstantOfShape: the shape as an input, computed where symbolic. */
static void lower_constant_of_shape(onnx_exporter *ex, const f8_node *node) {
	const f8_attr *shape = f8_node_attr(node, "shape"), *value = f8_node_attr(node, "value");
	f8_export_op_to(ex, "ConstantOfShape", f8_export_output(ex, node, 0),
		     IN(f8_export_shape(ex, shape->dims.items, shape->dims.n)));
	const f8_tensor_data *fill = value ? value->tensor : NULL;
	if (fill)
		f8_export_attr_tensor(ex, f8_export_last(ex), "value",
				   f8_export_tensor(ex, NULL, fill->dtype, &fill->shape, fill->data,
						 fill->n_bytes));
}

/*
 * Reshape: the target shape with 0 ("copy the input's dim") where it keeps the input's dim at the
 * same place and -1 for a single symbolic dim left, both exact; what is still symbolic is computed.
 */
static void lower_reshape(onnx_exporter *ex, const f8_node *node) {
	const f8_attr *shape = f8_node_attr(node, "shape");
	const f8_shape *x = &f8_export_input_type(ex, node, 0)->shape;
	bool allow_zero = f8_node_attr_int(node, "allowzero", 0);
	f8_dim dims[F8_MAX_RANK];
	int symbolic = -1, n_symbolic = 0;
	bool has_minus_one = false;
	for (uint32_t i = 0; i < shape->dims.n && i < F8_MAX_RANK; i++) {
		dims[i] = shape->dims.items[i];
		has_minus_one |= f8_dim_equal(dims[i], f8_dim_const(-1));
		if (!allow_zero && i < x->rank && !f8_dim_is_const(dims[i]) &&
		    f8_dim_equal(dims[i], x->dims[i]))
			dims[i] = f8_dim_const(0);
		else if (!f8_dim_is_const(dims[i]))
			symbolic = (int)i, n_symbolic++;
	}
	if (n_symbolic == 1 && !has_minus_one)
		dims[symbolic] = f8_dim_const(-1);
	f8_export_op_to(ex, "Reshape", f8_export_output(ex, node, 0),
		     IN(f8_export_input(ex, node, 0), f8_export_shape(ex, dims, shape->dims.n)));
	if (allow_zero)
		f8_export_attr_int(ex, f8_export_last(ex), "allowzero", 1);
}

/* Expand: ONNX's broadcast is two-way, so a target dim equal to the input's is written as 1. */
static void lower_expand(onnx_exporter *ex, const f8_node *node) {
	const f8_attr *shape = f8_node_attr(node, "shape");
	const f8_shape *x = &f8_export_input_type(ex, node, 0)->shape;
	f8_dim dims[F8_MAX_RANK];
	uint32_t n = shape->dims.n < F8_MAX_RANK ? shape->dims.n : F8_MAX_RANK;
	for (uint32_t i = 0; i < n; i++) {
		int from = (int)i - (int)n + x->rank; // the input dim aligned with target dim i
		dims[i] = shape->dims.items[i];
		if (from >= 0 && f8_dim_equal(dims[i], x->dims[from]))
			dims[i] = f8_dim_const(1);
	}
	f8_export_op_to(ex, "Expand", f8_export_output(ex, node, 0),
		     IN(f8_export_input(ex, node, 0), f8_export_shape(ex, dims, n)));
}

/* Squeeze and Unsqueeze: the axes as an input. */
static void lower_squeeze(onnx_exporter *ex, const f8_node *node) {
	const f8_attr *axes = f8_node_attr(node, "axes");
	const char *x = f8_export_input(ex, node, 0);
	const char *inputs[2] = {x, axes ? f8_export_ints(ex, axes->ints.items, axes->ints.n) : NULL};
	f8_export_op_to(ex, f8_op_name(node->op), f8_export_output(ex, node, 0), inputs, axes ? 2 : 1);
}

/* Split: the sizes as an input (computed where symbolic), or equal parts. */
static void lower_split(onnx_exporter *ex, const f8_node *node) {
	const f8_attr *split = f8_node_attr(node, "split");
	const char *outputs[F8_MAX_RANK * 8];
	if (node->n_outputs > sizeof outputs / sizeof outputs[0]) {
		f8_export_unsupported(ex, "Split into %u parts", node->n_outputs);
		return;
	}
	for (uint32_t i = 0; i < node->n_outputs; i++)
		outputs[i] = f8_export_output(ex, node, i);
	const char *x = f8_export_input(ex, node, 0);
	const char *sizes = split ? f8_export_shape(ex, split->dims.items, split->dims.n) : NULL;
	const char *inputs[2] = {x, sizes};
	if (ex->status)
		return;
	F8cOnnx__NodeProto *onnx = f8_export_node(ex, "Split", inputs, split ? 2 : 1, outputs,
					       node->n_outputs);
	f8_export_attr_int(ex, onnx, "axis", f8_node_attr_int(node, "axis", 0));
	if (!split && ex->opset >= 18) // equal parts: from opset 18 ONNX wants their number
		f8_export_attr_int(ex, onnx, "num_outputs", node->n_outputs);
}

/* Slice: starts and ends as inputs (computed where symbolic), axes and steps as constants. */
static void lower_slice(onnx_exporter *ex, const f8_node *node) {
	const f8_attr *starts = f8_node_attr(node, "starts"), *ends = f8_node_attr(node, "ends");
	const f8_attr *axes = f8_node_attr(node, "axes"), *steps = f8_node_attr(node, "steps");
	const char *inputs[5] = {f8_export_input(ex, node, 0),
				 f8_export_shape(ex, starts->dims.items, starts->dims.n),
				 f8_export_shape(ex, ends->dims.items, ends->dims.n), NULL, NULL};
	uint32_t n = 3;
	if (axes || steps) {
		int64_t all[F8_MAX_RANK];
		for (uint32_t i = 0; i < starts->dims.n && i < F8_MAX_RANK; i++)
			all[i] = (int64_t)i;
		inputs[n++] = axes ? f8_export_ints(ex, axes->ints.items, axes->ints.n)
				   : f8_export_ints(ex, all, starts->dims.n);
	}
	if (steps)
		inputs[n++] = f8_export_ints(ex, steps->ints.items, steps->ints.n);
	f8_export_op_to(ex, "Slice", f8_export_output(ex, node, 0), inputs, n);
}

/* Range: start, limit and delta as scalars of the output's dtype; a symbolic limit computed. */
static void lower_range(onnx_exporter *ex, const f8_node *node) {
	f8_dtype dtype = f8_node_attr_dtype(node, "dtype", F8_DTYPE_I64);
	f8_dim limit = f8_node_attr(node, "limit")->dim;
	const char *start = f8_export_scalar(ex, dtype, (double)f8_node_attr_int(node, "start", 0));
	const char *delta = f8_export_scalar(ex, dtype, (double)f8_node_attr_int(node, "delta", 1));
	const char *end = f8_dim_is_const(limit)
				  ? f8_export_scalar(ex, dtype, (double)f8_dim_value(limit))
				  : f8_export_size(ex, limit);
	if (!f8_dim_is_const(limit) && dtype != F8_DTYPE_I64) {
		end = f8_export_op(ex, "Cast", "limit", IN(end));
		f8_export_attr_int(ex, f8_export_last(ex), "to", f8_export_data_type(dtype));
	}
	f8_export_op_to(ex, "Range", f8_export_output(ex, node, 0), IN(start, end, delta));
}

/* ReduceMean, ReduceSum, ReduceMax of `x` over `axes` (n; 0: all) into `output`: the axes as an
 * input where the opset takes them so (ReduceSum from 13, the others from 18). */
static const char *reduce(onnx_exporter *ex, const char *op_type, const char *output,
			  const char *x, const int64_t *axes, uint32_t n, bool keepdims) {
	bool as_input = strcmp(op_type, "ReduceSum") == 0 || ex->opset >= 18;
	const char *inputs[2] = {x, n && as_input ? f8_export_ints(ex, axes, n) : NULL};
	f8_export_op_to(ex, op_type, output, inputs, n && as_input ? 2 : 1);
	F8cOnnx__NodeProto *onnx = f8_export_last(ex);
	if (n && !as_input)
		f8_export_attr_ints(ex, onnx, "axes", axes, n);
	f8_export_attr_int(ex, onnx, "keepdims", keepdims);
	return ex->status ? NULL : output;
}

/* ReduceMean, ReduceSum, ReduceMax: see reduce(). */
static void lower_reduce(onnx_exporter *ex, const f8_node *node) {
	const f8_attr *axes = f8_node_attr(node, "axes");
	reduce(ex, f8_op_name(node->op), f8_export_output(ex, node, 0), f8_export_input(ex, node, 0),
	       axes ? axes->ints.items : NULL, axes ? axes->ints.n : 0,
	       f8_node_attr_int(node, "keepdims", 1));
}

/* Trilu: k as an input when it is not 0. */
static void lower_trilu(onnx_exporter *ex, const f8_node *node) {
	int64_t k = f8_node_attr_int(node, "k", 0);
	const char *diagonal = k ? f8_export_scalar(ex, F8_DTYPE_I64, (double)k) : NULL;
	const char *inputs[2] = {f8_export_input(ex, node, 0), diagonal};
	f8_export_op_to(ex, "Trilu", f8_export_output(ex, node, 0), inputs, k ? 2 : 1);
	f8_export_attr_int(ex, f8_export_last(ex), "upper", f8_node_attr_int(node, "upper", 1));
}

/* CumSum: the axis as a scalar input. */
static void lower_cum_sum(onnx_exporter *ex, const f8_node *node) {
	int64_t axis_value = f8_node_attr_int(node, "axis", 0);
	const char *axis = f8_export_scalar(ex, F8_DTYPE_I64, (double)axis_value);
	f8_export_op_to(ex, "CumSum", f8_export_output(ex, node, 0), IN(f8_export_input(ex, node, 0), axis));
	f8_export_attr_int(ex, f8_export_last(ex), "exclusive", f8_node_attr_int(node, "exclusive", 0));
	f8_export_attr_int(ex, f8_export_last(ex), "reverse", f8_node_attr_int(node, "reverse", 0));
}

/* Dropout in a forward (inference) graph is the identity. */
static void lower_dropout(onnx_exporter *ex, const f8_node *node) {
	if (node->n_outputs > 1) {
		f8_export_unsupported(ex, "Dropout's mask");
		return;
	}
	f8_export_op_to(ex, "Identity", f8_export_output(ex, node, 0), IN(f8_export_input(ex, node, 0)));
}

/* High-level ops. */

/* Embedding: Gather(weight, ids) along axis 0. */
static void lower_embedding(onnx_exporter *ex, const f8_node *node) {
	const char *ids = f8_export_input(ex, node, 0), *table = f8_export_input(ex, node, 1);
	f8_export_op_to(ex, "Gather", f8_export_output(ex, node, 0), IN(table, ids));
	f8_export_attr_int(ex, f8_export_last(ex), "axis", 0);
}

/* Linear: Gemm(x, w, b, transB) where x is a matrix; else MatMul(x, Transpose(w)) [+ b]. */
static void lower_linear(onnx_exporter *ex, const f8_node *node) {
	const char *x = f8_export_input(ex, node, 0), *w = f8_export_input(ex, node, 1);
	const char *bias = f8_export_input(ex, node, 2), *out = f8_export_output(ex, node, 0);
	bool stored_kn = f8_node_attr_int(node, "transpose_weight", 0);
	if (f8_export_input_type(ex, node, 0)->shape.rank == 2) {
		f8_export_op_to(ex, "Gemm", out, (const char *[]){x, w, bias}, bias ? 3 : 2);
		if (!stored_kn)
			f8_export_attr_int(ex, f8_export_last(ex), "transB", 1);
		return;
	}
	if (!stored_kn) {
		w = f8_export_op(ex, "Transpose", "weight_t", IN(w));
		f8_export_attr_ints(ex, f8_export_last(ex), "perm", INTS(1, 0));
	}
	const char *product = f8_export_op_to(ex, "MatMul", bias ? f8_export_name(ex, "matmul") : out,
					   IN(x, w));
	if (bias)
		f8_export_op_to(ex, "Add", out, IN(product, bias));
}

/* LayerNorm: LayerNormalization (opset 17), whose optional Mean and InvStdDev outputs are the
 * IR's statistics outputs. */
static void lower_layer_norm(onnx_exporter *ex, const f8_node *node) {
	const char *inputs[3], *outputs[3];
	for (uint32_t i = 0; i < node->n_inputs && i < 3; i++)
		inputs[i] = f8_export_input(ex, node, i);
	for (uint32_t i = 0; i < node->n_outputs && i < 3; i++)
		outputs[i] = f8_export_output(ex, node, i);
	if (ex->status)
		return;
	F8cOnnx__NodeProto *onnx = f8_export_node(ex, "LayerNormalization", inputs, node->n_inputs,
					       outputs, node->n_outputs);
	f8_export_attr_int(ex, onnx, "axis", f8_node_attr_int(node, "axis", -1));
	f8_export_attr_float(ex, onnx, "epsilon", f8_node_attr_float(node, "epsilon", 1e-5));
}

/* RMSNorm as Llama's modeling code writes it: weight * (x * 1 / sqrt(mean(x^2) + eps)). */
static void lower_rms_norm(onnx_exporter *ex, const f8_node *node) {
	if (node->n_outputs > 1) {
		f8_export_unsupported(ex, "RMSNorm's 1/rms output");
		return;
	}
	const f8_type *type = f8_export_input_type(ex, node, 0);
	int rank = type->shape.rank, axis;
	if (!f8_axis_normalize(f8_node_attr_int(node, "axis", -1), rank, false, &axis)) {
		f8_export_unsupported(ex, "RMSNorm over axis %lld of rank %d",
					  (long long)f8_node_attr_int(node, "axis", -1), rank);
		return;
	}
	int64_t axes[F8_MAX_RANK];
	uint32_t n = 0;
	for (int a = axis; a < rank; a++)
		axes[n++] = a == rank - 1 ? -1 : a;
	const char *x = f8_export_input(ex, node, 0), *weight = f8_export_input(ex, node, 1);
	const char *two = f8_export_scalar(ex, type->dtype, 2.0);
	const char *eps = f8_export_scalar(ex, type->dtype, f8_node_attr_float(node, "epsilon", 1e-5));
	const char *squared = f8_export_op(ex, "Pow", "squared", IN(x, two));
	const char *mean = reduce(ex, "ReduceMean", f8_export_name(ex, "mean"), squared, axes, n,
				  true);
	const char *mean_eps = f8_export_op(ex, "Add", "mean_eps", IN(mean, eps));
	const char *rms = f8_export_op(ex, "Sqrt", "rms", IN(mean_eps));
	const char *inverse = f8_export_op(ex, "Reciprocal", "rms_inverse", IN(rms));
	const char *normed = f8_export_op(ex, "Mul", "normed", IN(x, inverse));
	f8_export_op_to(ex, "Mul", f8_export_output(ex, node, 0), IN(weight, normed));
}

/* Gelu: 0.5 * x * (1 + erf(x / sqrt 2)), or GPT-2's
 * 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))). */
static void lower_gelu(onnx_exporter *ex, const f8_node *node) {
	export_form form;
	const char *x = activation_input(ex, node, &form);
	f8_dtype dtype = f8_export_input_type(ex, node, 0)->dtype;
	const char *factor;
	if (strcmp(f8_node_attr_string(node, "approximate", "none"), "tanh") == 0) {
		const char *three = f8_export_scalar(ex, dtype, 3.0);
		const char *c = f8_export_scalar(ex, dtype, 0.044715);
		const char *cube = f8_export_op(ex, "Pow", "cube", IN(x, three));
		const char *inner = f8_export_op(ex, "Add", "inner",
					      IN(x, f8_export_op(ex, "Mul", "cubic", IN(cube, c))));
		const char *k = f8_export_scalar(ex, dtype, sqrt(2.0 / PI));
		factor = f8_export_op(ex, "Tanh", "tanh",
				   IN(f8_export_op(ex, "Mul", "scaled", IN(inner, k))));
	} else {
		const char *root_two = f8_export_scalar(ex, dtype, sqrt(2.0));
		factor = f8_export_op(ex, "Erf", "erf",
				   IN(f8_export_op(ex, "Div", "scaled", IN(x, root_two))));
	}
	const char *one = f8_export_scalar(ex, dtype, 1.0), *half = f8_export_scalar(ex, dtype, 0.5);
	const char *one_plus = f8_export_op(ex, "Add", "one_plus", IN(factor, one));
	const char *half_x = f8_export_op(ex, "Mul", "half_x", IN(x, half));
	f8_export_op_to(ex, "Mul", output_as(ex, node, form), IN(half_x, one_plus));
}

/* SwiGLU: silu(gate) * up, silu(g) = g * sigmoid(g); one input [gate | up] is Split first. */
static void lower_swiglu(onnx_exporter *ex, const f8_node *node) {
	export_form form;
	const char *gate = activation_input(ex, node, &form), *up;
	if (node->n_inputs > 1) {
		up = f8_export_input_form(ex, node, 1, form);
	} else {
		const f8_shape *shape = &f8_export_input_type(ex, node, 0)->shape;
		f8_dim width = shape->dims[shape->rank - 1];
		if (!f8_dim_is_const(width)) {
			f8_export_unsupported(ex, "SwiGLU of a symbolic width");
			return;
		}
		const char *halves[2] = {f8_export_name(ex, "gate"), f8_export_name(ex, "up")};
		int64_t half = f8_dim_value(width) / 2;
		const char *sizes = f8_export_ints(ex, INTS(half, half));
		if (ex->status)
			return;
		F8cOnnx__NodeProto *split = f8_export_node(ex, "Split", IN(gate, sizes), halves, 2);
		f8_export_attr_int(ex, split, "axis", -1);
		gate = halves[0], up = halves[1];
	}
	const char *sigmoid = f8_export_op(ex, "Sigmoid", "sigmoid", IN(gate));
	const char *silu = f8_export_op(ex, "Mul", "silu", IN(gate, sigmoid));
	f8_export_op_to(ex, "Mul", output_as(ex, node, form), IN(silu, up));
}

static const lower_fn lowerings[F8_OP_COUNT] = {
	[F8_OP_ADD] = lower_same, [F8_OP_SUB] = lower_same, [F8_OP_MUL] = lower_same,
	[F8_OP_DIV] = lower_same, [F8_OP_POW] = lower_same, [F8_OP_SQRT] = lower_same,
	[F8_OP_RECIPROCAL] = lower_same, [F8_OP_NEG] = lower_same, [F8_OP_ABS] = lower_same,
	[F8_OP_EXP] = lower_same, [F8_OP_LOG] = lower_same, [F8_OP_TANH] = lower_same,
	[F8_OP_COS] = lower_same, [F8_OP_SIN] = lower_same, [F8_OP_ERF] = lower_same,
	[F8_OP_SIGMOID] = lower_same, [F8_OP_MAX] = lower_same, [F8_OP_MIN] = lower_same,
	[F8_OP_RELU] = lower_same, [F8_OP_IDENTITY] = lower_same, [F8_OP_IS_NAN] = lower_same,
	[F8_OP_EQUAL] = lower_same, [F8_OP_LESS] = lower_same, [F8_OP_GREATER] = lower_same,
	[F8_OP_LESS_OR_EQUAL] = lower_same, [F8_OP_GREATER_OR_EQUAL] = lower_same,
	[F8_OP_NOT] = lower_same, [F8_OP_AND] = lower_same, [F8_OP_OR] = lower_same,
	[F8_OP_WHERE] = lower_same, [F8_OP_MATMUL] = lower_same,
	[F8_OP_GEMM] = lower_with_ints, [F8_OP_GATHER] = lower_with_ints,
	[F8_OP_GATHER_ND] = lower_with_ints, [F8_OP_TRANSPOSE] = lower_with_ints,
	[F8_OP_CONCAT] = lower_with_ints, [F8_OP_SHAPE] = lower_with_ints,
	[F8_OP_SOFTMAX] = lower_with_ints, [F8_OP_LOG_SOFTMAX] = lower_with_ints,
	[F8_OP_CAST] = lower_cast, [F8_OP_DROPOUT] = lower_dropout,
	[F8_OP_RESHAPE] = lower_reshape, [F8_OP_EXPAND] = lower_expand,
	[F8_OP_UNSQUEEZE] = lower_squeeze, [F8_OP_SQUEEZE] = lower_squeeze,
	[F8_OP_SPLIT] = lower_split, [F8_OP_SLICE] = lower_slice, [F8_OP_RANGE] = lower_range,
	[F8_OP_CONSTANT] = lower_constant, [F8_OP_CONSTANT_OF_SHAPE] = lower_constant_of_shape,
	[F8_OP_TRILU] = lower_trilu, [F8_OP_CUM_SUM] = lower_cum_sum,
	[F8_OP_REDUCE_MEAN] = lower_reduce, [F8_OP_REDUCE_SUM] = lower_reduce,
	[F8_OP_REDUCE_MAX] = lower_reduce,
	[F8_OP_EMBEDDING] = lower_embedding, [F8_OP_LINEAR] = lower_linear,
	[F8_OP_LAYER_NORM] = lower_layer_norm, [F8_OP_RMS_NORM] = lower_rms_norm,
	[F8_OP_GELU] = lower_gelu, [F8_OP_SWIGLU] = lower_swiglu,
	[F8_OP_ROPE] = f8_export_lower_rope, [F8_OP_ATTENTION] = f8_export_lower_attention,
	[F8_OP_ROUTER] = f8_export_lower_router, [F8_OP_MOE_DISPATCH] = f8_export_lower_moe_dispatch,
	[F8_OP_GROUPED_LINEAR] = f8_export_lower_grouped_linear,
	[F8_OP_MOE_COMBINE] = f8_export_lower_moe_combine,
};

void f8_export_lower_node(onnx_exporter *ex, const f8_node *node) {
	lower_fn lower = lowerings[node->op];
	if (!lower) {
		f8_export_unsupported(ex, "f8c has no ONNX form for %s", f8_op_name(node->op));
		f8_diag_hint(ex->diag, "export-onnx writes forward graphs of high-level and "
				       "primitive ops; FP8, collective and training ops have no "
				       "standard ONNX form");
		return;
	}
	lower(ex, node);
}
