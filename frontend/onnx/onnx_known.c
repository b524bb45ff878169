/*
 * Values known while importing, and the folding of ONNX ops over them.
 *
 * Exporters compute shapes in the graph: Shape -> Gather -> Concat -> Reshape, Range over a
 * sequence length, masks from constants. f8c's IR takes shapes as attributes, so the importer
 * evaluates these computations as it meets them. Integer elements are dims, so a computation on
 * `seq` folds to `seq`, `seq+1` or `batch*seq` exactly; float elements are doubles rounded to
 * their dtype after each op. Whatever cannot be folded exactly (a symbolic comparison that
 * cannot be proven, a size past ONNX_MAX_KNOWN_ELEMENTS) is left to an IR node.
 */
#include <math.h>   // sqrt, pow, trunc
#include <string.h> // strcmp, memcpy

#include "frontend/onnx/onnx_internal.h" // onnx_known, onnx_node
#include "ir/arena.h"                    // f8_arena_alloc
#include "ir/fp8.h"                      // f8_float_encode, f8_float_decode

/*
 * The element count of a constant shape, or false when symbolic, negative or too large. The
 * product of the dims with zeros read as ones is bounded too: [0, 2^62, 4] holds no element but
 * its strides would overflow, and [4, 2^62] must not wrap around to a count of 0.
 */
static bool known_count(const f8_shape *shape, uint32_t *out) {
	uint64_t count = 1, extent = 1;
	for (int i = 0; i < shape->rank; i++) {
		f8_dim dim = shape->dims[i];
		if (!f8_dim_is_const(dim) || f8_dim_value(dim) < 0 ||
		    f8_dim_value(dim) > ONNX_MAX_KNOWN_ELEMENTS)
			return false;
		uint64_t value = (uint64_t)f8_dim_value(dim); // both factors <= 2^16: no overflow
		count *= value;
		extent *= value ? value : 1;
		if (extent > ONNX_MAX_KNOWN_ELEMENTS)
			return false;
	}
	*out = (uint32_t)count;
	return true;
}

onnx_known *f8_onnx_known_create(onnx_importer *im, f8_dtype dtype, const f8_shape *shape) {
	uint32_t count;
	if (!known_count(shape, &count))
		return NULL;
	// A float a known can hold and f8_onnx_known_to_tensor encode (not e8m0 scales).
	if (f8_dtype_is_float(dtype) && dtype != F8_DTYPE_F64 && dtype != F8_DTYPE_F32 &&
	    dtype != F8_DTYPE_BF16 && dtype != F8_DTYPE_F16 && !f8_dtype_is_fp8(dtype))
		return NULL;
	onnx_known *known = f8_arena_alloc(im->graph->arena, sizeof *known);
	if (!known)
		return NULL;
	*known = (onnx_known){.dtype = dtype, .shape = *shape, .count = count};
	size_t n = count ? count : 1;
	if (f8_dtype_is_float(dtype))
		known->floats = f8_arena_alloc_array(im->graph->arena, n, sizeof(double));
	else
		known->ints = f8_arena_alloc_array(im->graph->arena, n, sizeof(f8_dim));
	if (!known->floats && !known->ints)
		return NULL;
	for (uint32_t i = 0; known->floats && i < count; i++)
		known->floats[i] = 0.0;
	for (uint32_t i = 0; known->ints && i < count; i++)
		known->ints[i] = f8_dim_const(0);
	return known;
}

bool f8_onnx_known_is_concrete(const onnx_known *known) {
	for (uint32_t i = 0; known->ints && i < known->count; i++)
		if (!f8_dim_is_const(known->ints[i]))
			return false;
	return true;
}

/* A double rounded to what `dtype` holds. */
static double round_to(f8_dtype dtype, double value) {
	switch (dtype) {
	case F8_DTYPE_F64:
		return value;
	case F8_DTYPE_F32:
		return (double)(float)value;
	default:
		return f8_float_decode(dtype, f8_float_encode(dtype, (float)value, false));
	}
}

/* A Cast's rounding: as round_to, but FP8 targets saturate to their largest finite value when
 * `saturate` (ONNX's default for Cast), as cvt.rn.satfinite does. */
static double cast_to(f8_dtype dtype, double value, bool saturate) {
	if (!f8_dtype_is_fp8(dtype))
		return round_to(dtype, value);
	return f8_float_decode(dtype, f8_float_encode(dtype, (float)value, saturate));
}

/* An integer wrapped to what `dtype` holds (two's complement), as ONNX's casts do. */
static int64_t wrap_to(f8_dtype dtype, int64_t value) {
	switch (dtype) {
	case F8_DTYPE_I32:
		return (int32_t)(uint32_t)(uint64_t)value;
	case F8_DTYPE_I8:
		return (int8_t)(uint8_t)(uint64_t)value;
	case F8_DTYPE_U8:
		return (uint8_t)(uint64_t)value;
	case F8_DTYPE_BOOL:
		return value != 0;
	default:
		return value;
	}
}

f8_status f8_onnx_known_to_tensor(onnx_importer *im, const onnx_known *known, f8_tensor_data *out) {
	size_t element = f8_dtype_get_info(known->dtype)->bytes;
	uint8_t *data = f8_arena_alloc(im->graph->arena, known->count ? known->count * element : 1);
	if (!data)
		return f8_diag_set(im->diag, F8_ERR_NOMEM, "out of memory");
	for (uint32_t i = 0; i < known->count; i++) {
		uint8_t *to = data + i * element;
		if (known->ints) {
			int64_t v = f8_dim_value(known->ints[i]);
			memcpy(to, &v, element); // little-endian: the low bytes
		} else if (known->dtype == F8_DTYPE_F64) {
			memcpy(to, &known->floats[i], 8);
		} else if (known->dtype == F8_DTYPE_F32) {
			float v = (float)known->floats[i];
			memcpy(to, &v, 4);
		} else {
			uint32_t bits = f8_float_encode(known->dtype, (float)known->floats[i], false);
			memcpy(to, &bits, element);
		}
	}
	*out = (f8_tensor_data){.dtype = known->dtype, .shape = known->shape,
				.n_bytes = known->count * element, .data = data};
	return F8_OK;
}

/* Row-major strides of a constant shape. */
static void strides_of(const f8_shape *shape, int64_t *strides) {
	int64_t stride = 1;
	for (int i = shape->rank - 1; i >= 0; i--) {
		strides[i] = stride;
		stride *= f8_dim_value(shape->dims[i]);
	}
}

/* The flat index in `in` (broadcast to `out`) of flat output index `o`. */
static uint32_t broadcast_index(const f8_shape *in, const f8_shape *out, uint32_t o) {
	int64_t out_strides[F8_MAX_RANK], in_strides[F8_MAX_RANK];
	strides_of(out, out_strides);
	strides_of(in, in_strides);
	int64_t index = 0, rest = o;
	int offset = out->rank - in->rank;
	for (int i = 0; i < out->rank; i++) {
		int64_t coordinate = rest / out_strides[i];
		rest %= out_strides[i];
		if (i >= offset && f8_dim_value(in->dims[i - offset]) != 1)
			index += coordinate * in_strides[i - offset];
	}
	return (uint32_t)index;
}

/* NumPy broadcasting of constant shapes; false when they do not broadcast. */
static bool broadcast_shapes(const f8_shape *a, const f8_shape *b, f8_shape *out) {
	int rank = a->rank > b->rank ? a->rank : b->rank;
	*out = (f8_shape){.rank = (uint8_t)rank};
	for (int i = 0; i < rank; i++) {
		int ia = i - (rank - a->rank), ib = i - (rank - b->rank);
		int64_t da = ia >= 0 ? f8_dim_value(a->dims[ia]) : 1;
		int64_t db = ib >= 0 ? f8_dim_value(b->dims[ib]) : 1;
		if (da != db && da != 1 && db != 1)
			return false;
		out->dims[i] = f8_dim_const(da == 1 ? db : da);
	}
	return true;
}

typedef enum fold_result { FOLDED, NOT_FOLDED, FOLD_ERROR } fold_result;

/* One integer binary op on dims; false when it cannot be done exactly. */
static bool int_binary(const char *op, f8_dim a, f8_dim b, f8_dim *out) {
	bool constant = f8_dim_is_const(a) && f8_dim_is_const(b);
	int64_t x = f8_dim_value(a), y = f8_dim_value(b), r;
	if (strcmp(op, "Add") == 0)
		return f8_dim_add(a, b, out);
	if (strcmp(op, "Sub") == 0)
		return f8_dim_sub(a, b, out);
	if (strcmp(op, "Mul") == 0)
		return f8_dim_mul(a, b, out);
	if (strcmp(op, "Div") == 0) {
		if (!constant)
			return f8_dim_div(a, b, out);
		if (y == 0 || (x == INT64_MIN && y == -1))
			return false;
		*out = f8_dim_const(x / y); // truncation, as onnxruntime divides integers
		return true;
	}
	if (strcmp(op, "Max") == 0 || strcmp(op, "Min") == 0) {
		bool max = op[1] == 'a';
		if (f8_dim_proven_le(a, b))
			*out = max ? b : a;
		else if (f8_dim_proven_le(b, a))
			*out = max ? a : b;
		else
			return false;
		return true;
	}
	// Comparisons give 0 or 1; on symbols only what can be proven.
	f8_dim a_plus_1, b_plus_1;
	bool less = f8_dim_add(a, f8_dim_const(1), &a_plus_1) && f8_dim_proven_le(a_plus_1, b);
	bool greater = f8_dim_add(b, f8_dim_const(1), &b_plus_1) && f8_dim_proven_le(b_plus_1, a);
	bool equal = f8_dim_equal(a, b);
	if (!equal && !less && !greater)
		return false;
	if (strcmp(op, "Equal") == 0)
		r = equal;
	else if (strcmp(op, "Less") == 0)
		r = less;
	else if (strcmp(op, "Greater") == 0)
		r = greater;
	else if (strcmp(op, "LessOrEqual") == 0)
		r = !greater;
	else if (strcmp(op, "GreaterOrEqual") == 0)
		r = !less;
	else if (strcmp(op, "And") == 0 && constant)
		r = x && y;
	else if (strcmp(op, "Or") == 0 && constant)
		r = x || y;
	else
		return false;
	*out = f8_dim_const(r);
	return true;
}

/* One float binary op; comparisons give 0 or 1 (the caller makes the result bool). */
static bool float_binary(const char *op, double a, double b, double *out) {
	static const struct {
		const char *name;
		int code;
	} ops[] = {{"Add", 0}, {"Sub", 1}, {"Mul", 2}, {"Div", 3}, {"Pow", 4}, {"Max", 5},
		   {"Min", 6}, {"Equal", 7}, {"Less", 8}, {"Greater", 9}, {"LessOrEqual", 10},
		   {"GreaterOrEqual", 11}};
	for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
		if (strcmp(op, ops[i].name) != 0)
			continue;
		double results[] = {a + b, a - b, a * b, a / b, pow(a, b), a > b ? a : b, a < b ? a : b,
				    a == b, a < b, a > b, a <= b, a >= b};
		*out = results[ops[i].code];
		return true;
	}
	return false;
}

static bool is_comparison(const char *op) {
	return strcmp(op, "Equal") == 0 || strcmp(op, "Less") == 0 || strcmp(op, "Greater") == 0 ||
	       strcmp(op, "LessOrEqual") == 0 || strcmp(op, "GreaterOrEqual") == 0;
}

static fold_result fold_binary(onnx_importer *im, const char *op, const onnx_known *a,
			       const onnx_known *b, onnx_known **out) {
	f8_shape shape;
	if (a->dtype != b->dtype || !broadcast_shapes(&a->shape, &b->shape, &shape))
		return NOT_FOLDED; // the IR node will report the mismatch with its place
	bool compare = is_comparison(op);
	onnx_known *r = f8_onnx_known_create(im, compare ? F8_DTYPE_BOOL : a->dtype, &shape);
	if (!r)
		return NOT_FOLDED;
	for (uint32_t o = 0; o < r->count; o++) {
		uint32_t i = broadcast_index(&a->shape, &shape, o), j = broadcast_index(&b->shape, &shape, o);
		if (a->ints) {
			f8_dim value;
			if (!int_binary(op, a->ints[i], b->ints[j], &value))
				return NOT_FOLDED;
			r->ints[o] = f8_dim_is_const(value)
					     ? f8_dim_const(wrap_to(r->dtype, f8_dim_value(value)))
					     : value;
		} else {
			double value;
			if (!float_binary(op, a->floats[i], b->floats[j], &value))
				return NOT_FOLDED;
			if (compare)
				r->ints[o] = f8_dim_const(value != 0.0);
			else
				r->floats[o] = round_to(r->dtype, value);
		}
	}
	*out = r;
	return FOLDED;
}

static fold_result fold_unary(onnx_importer *im, const char *op, const onnx_known *x,
			      onnx_known **out) {
	onnx_known *r = f8_onnx_known_create(im, x->dtype, &x->shape);
	if (!r)
		return NOT_FOLDED;
	for (uint32_t i = 0; i < x->count; i++) {
		if (x->ints) {
			f8_dim value;
			if (strcmp(op, "Neg") == 0 && f8_dim_sub(f8_dim_const(0), x->ints[i], &value))
				r->ints[i] = value;
			else if (strcmp(op, "Not") == 0 && f8_dim_is_const(x->ints[i]))
				r->ints[i] = f8_dim_const(f8_dim_value(x->ints[i]) == 0);
			else
				return NOT_FOLDED;
		} else {
			double v = x->floats[i];
			if (strcmp(op, "Neg") == 0)
				v = -v;
			else if (strcmp(op, "Sqrt") == 0)
				v = sqrt(v);
			else if (strcmp(op, "Reciprocal") == 0)
				v = 1.0 / v;
			else
				return NOT_FOLDED;
			r->floats[i] = round_to(x->dtype, v);
		}
	}
	*out = r;
	return FOLDED;
}

static fold_result fold_cast(onnx_importer *im, const onnx_node *node, const onnx_known *x,
			     onnx_known **out) {
	const F8cOnnx__AttributeProto *to = f8_onnx_attr(node, "to");
	const F8cOnnx__AttributeProto *saturate_attr = f8_onnx_attr(node, "saturate");
	bool saturate = !saturate_attr || saturate_attr->i != 0;
	f8_dtype dtype;
	if (!to || !f8_onnx_dtype((int32_t)to->i, &dtype))
		return NOT_FOLDED; // the converter reports it
	onnx_known *r = f8_onnx_known_create(im, dtype, &x->shape);
	if (!r)
		return NOT_FOLDED;
	for (uint32_t i = 0; i < x->count; i++) {
		if (x->ints && r->ints) {
			f8_dim v = x->ints[i];
			r->ints[i] = f8_dim_is_const(v) ? f8_dim_const(wrap_to(dtype, f8_dim_value(v))) : v;
			if (!f8_dim_is_const(v) && (dtype == F8_DTYPE_BOOL || dtype == F8_DTYPE_U8 ||
						    dtype == F8_DTYPE_I8))
				return NOT_FOLDED;
		} else if (x->ints) {
			if (!f8_dim_is_const(x->ints[i]))
				return NOT_FOLDED; // a float from a symbolic size: left to --dim
			r->floats[i] = cast_to(dtype, (double)f8_dim_value(x->ints[i]), saturate);
		} else if (r->ints) {
			double v = x->floats[i];
			if (!(v > -9.2e18 && v < 9.2e18))
				return NOT_FOLDED;
			r->ints[i] = f8_dim_const(wrap_to(dtype, dtype == F8_DTYPE_BOOL ? v != 0.0
										 : (int64_t)trunc(v)));
		} else {
			r->floats[i] = cast_to(dtype, x->floats[i], saturate);
		}
	}
	*out = r;
	return FOLDED;
}

/* Copies element `from` of `x` to element `to` of `r` (same dtype). */
static void copy_element(onnx_known *r, uint32_t to, const onnx_known *x, uint32_t from) {
	if (r->ints)
		r->ints[to] = x->ints[from];
	else
		r->floats[to] = x->floats[from];
}

/* A known with x's elements and another shape (Reshape, Squeeze, Unsqueeze). */
static fold_result reshaped(onnx_importer *im, const onnx_known *x, const f8_shape *shape,
			    onnx_known **out) {
	onnx_known *r = f8_onnx_known_create(im, x->dtype, shape);
	if (!r || r->count != x->count)
		return NOT_FOLDED;
	for (uint32_t i = 0; i < x->count; i++)
		copy_element(r, i, x, i);
	*out = r;
	return FOLDED;
}

/* The constant integers of a known (axes, shapes); false when any is symbolic. */
static bool const_ints(const onnx_known *k, int64_t *values, uint32_t max, uint32_t *n) {
	if (!k || !k->ints || k->count > max)
		return false;
	for (uint32_t i = 0; i < k->count; i++) {
		if (!f8_dim_is_const(k->ints[i]))
			return false;
		values[i] = f8_dim_value(k->ints[i]);
	}
	*n = k->count;
	return true;
}

static fold_result fold_reshape(onnx_importer *im, const onnx_node *node, const onnx_known *x,
				const onnx_known *target, onnx_known **out) {
	int64_t dims[F8_MAX_RANK];
	uint32_t n;
	if (!const_ints(target, dims, F8_MAX_RANK, &n))
		return NOT_FOLDED;
	const F8cOnnx__AttributeProto *allow_zero = f8_onnx_attr(node, "allowzero");
	f8_shape shape = {.rank = (uint8_t)n};
	int infer_at = -1;
	int64_t known = 1;
	for (uint32_t i = 0; i < n; i++) {
		if (dims[i] == 0 && !(allow_zero && allow_zero->i)) {
			if (i >= x->shape.rank)
				return NOT_FOLDED;
			dims[i] = f8_dim_value(x->shape.dims[i]);
		}
		if (dims[i] == -1) {
			if (infer_at >= 0)
				return NOT_FOLDED;
			infer_at = (int)i;
			continue;
		}
		if (dims[i] < 0 || dims[i] > ONNX_MAX_KNOWN_ELEMENTS)
			return NOT_FOLDED;
		known *= dims[i]; // both factors <= 2^16: no overflow
		if (known > ONNX_MAX_KNOWN_ELEMENTS)
			return NOT_FOLDED;
	}
	if (infer_at >= 0)
		dims[infer_at] = known ? x->count / known : 0;
	for (uint32_t i = 0; i < n; i++)
		shape.dims[i] = f8_dim_const(dims[i]);
	return reshaped(im, x, &shape, out);
}

static fold_result fold_unsqueeze(onnx_importer *im, const onnx_known *x, const onnx_known *axes,
				  bool squeeze, onnx_known **out) {
	int64_t list[F8_MAX_RANK];
	uint32_t n = 0;
	if (axes && !const_ints(axes, list, F8_MAX_RANK, &n))
		return NOT_FOLDED;
	f8_shape shape = {0};
	if (squeeze) {
		bool drop[F8_MAX_RANK] = {false};
		for (uint32_t i = 0; i < n; i++) {
			int axis;
			if (!f8_axis_normalize(list[i], x->shape.rank, false, &axis))
				return NOT_FOLDED;
			drop[axis] = true;
		}
		for (int i = 0; i < x->shape.rank; i++) {
			bool one = f8_dim_value(x->shape.dims[i]) == 1;
			if (!(axes ? drop[i] : one))
				shape.dims[shape.rank++] = x->shape.dims[i];
		}
	} else {
		int rank = x->shape.rank + (int)n;
		bool insert[F8_MAX_RANK] = {false};
		if (rank > F8_MAX_RANK)
			return NOT_FOLDED;
		for (uint32_t i = 0; i < n; i++) {
			int axis;
			if (!f8_axis_normalize(list[i], rank, false, &axis) || insert[axis])
				return NOT_FOLDED;
			insert[axis] = true;
		}
		for (int i = 0, from = 0; i < rank; i++)
			shape.dims[shape.rank++] = insert[i] ? f8_dim_const(1) : x->shape.dims[from++];
	}
	return reshaped(im, x, &shape, out);
}

static fold_result fold_concat(onnx_importer *im, const onnx_node *node, onnx_known **out) {
	const F8cOnnx__AttributeProto *axis_attr = f8_onnx_attr(node, "axis");
	const onnx_known *first = node->inputs[0]->known;
	int axis;
	if (!axis_attr || !f8_axis_normalize(axis_attr->i, first->shape.rank, false, &axis))
		return NOT_FOLDED;
	f8_shape shape = first->shape;
	int64_t total = 0;
	for (uint32_t i = 0; i < node->n_inputs; i++) {
		const onnx_known *k = node->inputs[i] ? node->inputs[i]->known : NULL;
		if (!k || k->dtype != first->dtype || k->shape.rank != first->shape.rank)
			return NOT_FOLDED;
		// Every dim but the axis must agree, or the copy below runs past the result; the IR
		// node reports the mismatch with its place.
		for (int d = 0; d < first->shape.rank; d++)
			if (d != axis && f8_dim_value(k->shape.dims[d]) != f8_dim_value(first->shape.dims[d]))
				return NOT_FOLDED;
		total += f8_dim_value(k->shape.dims[axis]);
	}
	shape.dims[axis] = f8_dim_const(total);
	onnx_known *r = f8_onnx_known_create(im, first->dtype, &shape);
	if (!r)
		return NOT_FOLDED;
	// Row-major: the output is blocks of `outer` rows, each the inputs' slices side by side.
	int64_t outer = 1;
	for (int i = 0; i < axis; i++)
		outer *= f8_dim_value(shape.dims[i]);
	uint32_t o = 0;
	for (int64_t row = 0; row < outer; row++) {
		for (uint32_t i = 0; i < node->n_inputs; i++) {
			const onnx_known *k = node->inputs[i]->known;
			uint32_t block = outer ? k->count / (uint32_t)outer : 0;
			for (uint32_t e = 0; e < block; e++)
				copy_element(r, o++, k, (uint32_t)row * block + e);
		}
	}
	*out = r;
	return FOLDED;
}

static fold_result fold_gather(onnx_importer *im, const onnx_node *node, const onnx_known *data,
			       const onnx_known *indices, onnx_known **out) {
	const F8cOnnx__AttributeProto *axis_attr = f8_onnx_attr(node, "axis");
	int axis;
	if (!f8_axis_normalize(axis_attr ? axis_attr->i : 0, data->shape.rank, false, &axis) ||
	    !indices->ints || !f8_onnx_known_is_concrete(indices) ||
	    data->shape.rank - 1 + indices->shape.rank > F8_MAX_RANK)
		return NOT_FOLDED;
	f8_shape shape = {0};
	for (int i = 0; i < axis; i++)
		shape.dims[shape.rank++] = data->shape.dims[i];
	for (int i = 0; i < indices->shape.rank; i++)
		shape.dims[shape.rank++] = indices->shape.dims[i];
	for (int i = axis + 1; i < data->shape.rank; i++)
		shape.dims[shape.rank++] = data->shape.dims[i];
	onnx_known *r = f8_onnx_known_create(im, data->dtype, &shape);
	if (!r)
		return NOT_FOLDED;
	int64_t size = f8_dim_value(data->shape.dims[axis]), inner = 1, outer = 1;
	for (int i = axis + 1; i < data->shape.rank; i++)
		inner *= f8_dim_value(data->shape.dims[i]);
	for (int i = 0; i < axis; i++)
		outer *= f8_dim_value(data->shape.dims[i]);
	uint32_t o = 0;
	for (int64_t row = 0; row < outer; row++) {
		for (uint32_t j = 0; j < indices->count; j++) {
			int64_t index = f8_dim_value(indices->ints[j]);
			if (index < 0)
				index += size;
			if (index < 0 || index >= size)
				return FOLD_ERROR;
			for (int64_t e = 0; e < inner; e++)
				copy_element(r, o++, data, (uint32_t)((row * size + index) * inner + e));
		}
	}
	*out = r;
	return FOLDED;
}

/* Slice of a known: per-axis start and step, ONNX's clamping. */
static fold_result fold_slice(onnx_importer *im, const onnx_node *node, onnx_known **out) {
	const onnx_known *x = node->inputs[0]->known;
	int64_t starts[F8_MAX_RANK], ends[F8_MAX_RANK], axes[F8_MAX_RANK], steps[F8_MAX_RANK];
	uint32_t n, n_ends, n_axes = 0, n_steps = 0;
	const onnx_known *axes_k = node->n_inputs > 3 && node->inputs[3] ? node->inputs[3]->known : NULL;
	const onnx_known *steps_k = node->n_inputs > 4 && node->inputs[4] ? node->inputs[4]->known : NULL;
	if (!const_ints(node->inputs[1]->known, starts, F8_MAX_RANK, &n) ||
	    !const_ints(node->inputs[2]->known, ends, F8_MAX_RANK, &n_ends) || n_ends != n ||
	    (axes_k && (!const_ints(axes_k, axes, F8_MAX_RANK, &n_axes) || n_axes != n)) ||
	    (steps_k && (!const_ints(steps_k, steps, F8_MAX_RANK, &n_steps) || n_steps != n)))
		return NOT_FOLDED;
	int64_t first[F8_MAX_RANK] = {0}, step[F8_MAX_RANK], length[F8_MAX_RANK];
	f8_shape shape = x->shape;
	for (int i = 0; i < x->shape.rank; i++) {
		step[i] = 1;
		length[i] = f8_dim_value(x->shape.dims[i]);
	}
	for (uint32_t i = 0; i < n; i++) {
		int axis;
		int64_t s = steps_k ? steps[i] : 1;
		if (!f8_axis_normalize(axes_k ? axes[i] : (int64_t)i, x->shape.rank, false, &axis) || s == 0)
			return NOT_FOLDED;
		int64_t size = f8_dim_value(x->shape.dims[axis]), b = starts[i], e = ends[i];
		// |s| in unsigned arithmetic: s may be INT64_MIN or INT64_MAX (exporters write both).
		uint64_t magnitude = s < 0 ? 0 - (uint64_t)s : (uint64_t)s;
		b = b < 0 ? b + size : b;
		e = e < 0 ? e + size : e;
		if (s > 0) {
			b = b < 0 ? 0 : b > size ? size : b;
			e = e < 0 ? 0 : e > size ? size : e;
			length[axis] = e > b ? (int64_t)(1 + (uint64_t)(e - b - 1) / magnitude) : 0;
		} else {
			b = b < 0 ? 0 : b > size - 1 ? size - 1 : b;
			e = e < -1 ? -1 : e > size - 1 ? size - 1 : e;
			length[axis] = b > e ? (int64_t)(1 + (uint64_t)(b - e - 1) / magnitude) : 0;
		}
		first[axis] = b;
		step[axis] = s;
		shape.dims[axis] = f8_dim_const(length[axis]);
	}
	onnx_known *r = f8_onnx_known_create(im, x->dtype, &shape);
	if (!r)
		return NOT_FOLDED;
	int64_t in_strides[F8_MAX_RANK], out_strides[F8_MAX_RANK];
	strides_of(&x->shape, in_strides);
	strides_of(&shape, out_strides);
	for (uint32_t o = 0; o < r->count; o++) {
		int64_t rest = o, index = 0;
		for (int i = 0; i < shape.rank; i++) {
			int64_t coordinate = rest / out_strides[i];
			rest %= out_strides[i];
			index += (first[i] + coordinate * step[i]) * in_strides[i];
		}
		copy_element(r, o, x, (uint32_t)index);
	}
	*out = r;
	return FOLDED;
}

static fold_result fold_expand(onnx_importer *im, const onnx_known *x, const onnx_known *target,
			       onnx_known **out) {
	int64_t dims[F8_MAX_RANK];
	uint32_t n;
	if (!const_ints(target, dims, F8_MAX_RANK, &n))
		return NOT_FOLDED;
	f8_shape requested = {.rank = (uint8_t)n}, shape;
	for (uint32_t i = 0; i < n; i++)
		requested.dims[i] = f8_dim_const(dims[i]);
	if (!broadcast_shapes(&x->shape, &requested, &shape))
		return NOT_FOLDED;
	onnx_known *r = f8_onnx_known_create(im, x->dtype, &shape);
	if (!r)
		return NOT_FOLDED;
	for (uint32_t o = 0; o < r->count; o++)
		copy_element(r, o, x, broadcast_index(&x->shape, &shape, o));
	*out = r;
	return FOLDED;
}

static fold_result fold_where(onnx_importer *im, const onnx_node *node, onnx_known **out) {
	const onnx_known *c = node->inputs[0]->known, *a = node->inputs[1]->known;
	const onnx_known *b = node->inputs[2]->known;
	f8_shape ab, shape;
	if (!c->ints || !f8_onnx_known_is_concrete(c) || a->dtype != b->dtype ||
	    !broadcast_shapes(&a->shape, &b->shape, &ab) || !broadcast_shapes(&c->shape, &ab, &shape))
		return NOT_FOLDED;
	onnx_known *r = f8_onnx_known_create(im, a->dtype, &shape);
	if (!r)
		return NOT_FOLDED;
	for (uint32_t o = 0; o < r->count; o++) {
		bool pick_a = f8_dim_value(c->ints[broadcast_index(&c->shape, &shape, o)]) != 0;
		const onnx_known *from = pick_a ? a : b;
		copy_element(r, o, from, broadcast_index(&from->shape, &shape, o));
	}
	*out = r;
	return FOLDED;
}

static fold_result fold_range(onnx_importer *im, const onnx_node *node, onnx_known **out) {
	const onnx_known *start = node->inputs[0]->known, *limit = node->inputs[1]->known;
	const onnx_known *delta = node->inputs[2]->known;
	if (start->count != 1 || limit->count != 1 || delta->count != 1 ||
	    start->dtype != limit->dtype || start->dtype != delta->dtype)
		return NOT_FOLDED; // mixed types: the IR node reports it
	double s = 0, l, d = 0, n;
	int64_t first = 0, step = 0;
	if (start->ints) {
		if (!f8_onnx_known_is_concrete(start) || !f8_onnx_known_is_concrete(limit) ||
		    !f8_onnx_known_is_concrete(delta))
			return NOT_FOLDED; // a Range to `seq` stays a Range node
		// Integers exactly: through doubles, 2^60 + 5 - 2^60 would be 0 and the elements
		// near 2^63 would not convert back.
		int64_t span;
		first = f8_dim_value(start->ints[0]), step = f8_dim_value(delta->ints[0]);
		if (step == 0 || __builtin_sub_overflow(f8_dim_value(limit->ints[0]), first, &span) ||
		    (span == INT64_MIN && step == -1))
			return NOT_FOLDED;
		int64_t quotient = span / step; // ceil: up when the exact quotient is positive
		quotient += span % step != 0 && (span < 0) == (step < 0);
		n = quotient > 0 ? (double)quotient : 0.0; // ONNX: max(ceil(span / delta), 0)
	} else {
		s = start->floats[0], l = limit->floats[0], d = delta->floats[0];
		n = d != 0.0 ? ceil((l - s) / d) : -1.0;
	}
	if (!(n >= 0.0 && n <= ONNX_MAX_KNOWN_ELEMENTS))
		return NOT_FOLDED;
	f8_shape shape = {.rank = 1, .dims = {f8_dim_const((int64_t)n)}};
	onnx_known *r = f8_onnx_known_create(im, start->dtype, &shape);
	if (!r)
		return NOT_FOLDED;
	for (uint32_t i = 0; i < r->count; i++) {
		if (r->ints) // between start and limit: no overflow
			r->ints[i] = f8_dim_const(first + (int64_t)i * step);
		else
			r->floats[i] = round_to(r->dtype, s + i * d);
	}
	*out = r;
	return FOLDED;
}

/* Shape: the dims of any bound input, known or not (its type is known either way). */
static fold_result fold_shape(onnx_importer *im, const onnx_node *node, onnx_known **out) {
	const onnx_binding *input = node->inputs[0];
	const f8_shape *x = input->known ? &input->known->shape
					 : &im->graph->values[input->value].type.shape;
	const F8cOnnx__AttributeProto *start_attr = f8_onnx_attr(node, "start");
	const F8cOnnx__AttributeProto *end_attr = f8_onnx_attr(node, "end");
	int64_t rank = x->rank, start = start_attr ? start_attr->i : 0, end = end_attr ? end_attr->i : rank;
	start = start < 0 ? start + rank : start;
	end = end < 0 ? end + rank : end;
	start = start < 0 ? 0 : start > rank ? rank : start;
	end = end < 0 ? 0 : end > rank ? rank : end;
	int64_t n = end > start ? end - start : 0;
	f8_shape shape = {.rank = 1, .dims = {f8_dim_const(n)}};
	onnx_known *r = f8_onnx_known_create(im, F8_DTYPE_I64, &shape);
	if (!r)
		return FOLD_ERROR;
	for (int64_t i = 0; i < n; i++)
		r->ints[i] = x->dims[start + i];
	*out = r;
	return FOLDED;
}

static fold_result fold_constant_of_shape(onnx_importer *im, const onnx_node *node,
					  onnx_known **out) {
	int64_t dims[F8_MAX_RANK];
	uint32_t n;
	if (!const_ints(node->inputs[0]->known, dims, F8_MAX_RANK, &n))
		return NOT_FOLDED;
	f8_shape shape = {.rank = (uint8_t)n};
	for (uint32_t i = 0; i < n; i++) {
		if (dims[i] < 0)
			return NOT_FOLDED;
		shape.dims[i] = f8_dim_const(dims[i]);
	}
	const F8cOnnx__AttributeProto *value = f8_onnx_attr(node, "value");
	f8_type type = {.dtype = F8_DTYPE_F32};
	onnx_known *fill = NULL;
	uint64_t n_bytes;
	if (value && value->t) {
		// A value that is not one element is left to the converter, which says so.
		if (f8_onnx_tensor_check(im, value->t, &type, &n_bytes) ||
		    n_bytes != f8_dtype_get_info(type.dtype)->bytes)
			return NOT_FOLDED;
		if (f8_onnx_tensor_known(im, value->t, &type, &fill))
			return FOLD_ERROR;
	}
	onnx_known *r = f8_onnx_known_create(im, type.dtype, &shape);
	if (!r)
		return NOT_FOLDED;
	for (uint32_t i = 0; fill && i < r->count; i++)
		copy_element(r, i, fill, 0);
	*out = r;
	return FOLDED;
}

/* Whether every present input is known (what most folds need). */
static bool all_known(const onnx_node *node) {
	for (uint32_t i = 0; i < node->n_inputs; i++)
		if (node->inputs[i] && !node->inputs[i]->known)
			return false;
	return node->n_inputs > 0;
}

static const onnx_known *known_input(const onnx_node *node, uint32_t i) {
	return i < node->n_inputs && node->inputs[i] ? node->inputs[i]->known : NULL;
}

static fold_result fold(onnx_importer *im, const onnx_node *node, onnx_known **out) {
	const char *op = node->proto->op_type;
	if (strcmp(op, "Shape") == 0)
		return node->n_inputs == 1 && node->inputs[0] ? fold_shape(im, node, out) : NOT_FOLDED;
	if (!all_known(node))
		return NOT_FOLDED;
	const onnx_known *a = known_input(node, 0), *b = known_input(node, 1);
	if (node->n_inputs == 2 && b && (float_binary(op, 0, 0, &(double){0}) ||
					 strcmp(op, "And") == 0 || strcmp(op, "Or") == 0))
		return fold_binary(im, op, a, b, out);
	if (node->n_inputs == 1 && (strcmp(op, "Neg") == 0 || strcmp(op, "Not") == 0 ||
				    strcmp(op, "Sqrt") == 0 || strcmp(op, "Reciprocal") == 0))
		return fold_unary(im, op, a, out);
	if (strcmp(op, "Cast") == 0)
		return fold_cast(im, node, a, out);
	if (strcmp(op, "Reshape") == 0 && b)
		return fold_reshape(im, node, a, b, out);
	if (strcmp(op, "Unsqueeze") == 0 && b)
		return fold_unsqueeze(im, a, b, false, out);
	if (strcmp(op, "Squeeze") == 0)
		return fold_unsqueeze(im, a, b, true, out);
	if (strcmp(op, "Concat") == 0)
		return fold_concat(im, node, out);
	if (strcmp(op, "Gather") == 0 && b)
		return fold_gather(im, node, a, b, out);
	if (strcmp(op, "Slice") == 0 && node->n_inputs >= 3)
		return fold_slice(im, node, out);
	if (strcmp(op, "Expand") == 0 && b)
		return fold_expand(im, a, b, out);
	if (strcmp(op, "Where") == 0 && node->n_inputs == 3)
		return fold_where(im, node, out);
	if (strcmp(op, "Range") == 0 && node->n_inputs == 3)
		return fold_range(im, node, out);
	if (strcmp(op, "ConstantOfShape") == 0)
		return fold_constant_of_shape(im, node, out);
	return NOT_FOLDED;
}

f8_status f8_onnx_known_fold(onnx_importer *im, const onnx_node *node, onnx_known **out) {
	*out = NULL;
	fold_result result = fold(im, node, out);
	if (result == FOLD_ERROR) {
		*out = NULL;
		if (im->diag->status)
			return im->diag->status;
		return f8_onnx_fail(im, F8_ERR_INVALID, "%s: an index is out of range",
				 node->proto->op_type);
	}
	if (result == NOT_FOLDED)
		*out = NULL;
	return F8_OK;
}
