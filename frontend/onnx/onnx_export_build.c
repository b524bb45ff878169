/*
 * Building the ONNX protobuf for the writer: unique names, nodes and their attributes, constant
 * initializers and shape tensors, each shared between equal uses. Every object lives in the
 * exporter's arena; growing arrays are copied into it (the copies are few and small).
 */
#include <stdarg.h> // va_list
#include <stdio.h>  // snprintf
#include <string.h> // memcmp, memcpy, strcmp, strlen

#include "frontend/onnx/onnx_export_internal.h" // onnx_exporter, export_*
#include "frontend/onnx/onnx_internal.h"        // f8_onnx_dtype
#include "ir/fp8.h"                             // f8_float_encode
#include "ir/text.h"                            // f8_dim_format

enum { NAME_MAX_BYTES = 256 };

f8_status f8_export_fail(onnx_exporter *ex, f8_status status, const char *format, ...) {
	if (ex->status)
		return ex->status;
	va_list args;
	va_start(args, format);
	f8_diag_setv(ex->diag, status, format, args);
	va_end(args);
	return ex->status = status;
}

void f8_export_unsupported(onnx_exporter *ex, const char *format, ...) {
	if (ex->status)
		return;
	va_list args;
	va_start(args, format);
	ex->status = f8_diag_setv(ex->diag, F8_ERR_UNSUPPORTED, format, args);
	va_end(args);
	if (ex->node)
		f8_diag_set_node(ex->diag, ex->graph, (f8_node_id)(ex->node - ex->graph->nodes));
}

/* Fails with F8_ERR_NOMEM. */
static void out_of_memory(onnx_exporter *ex) {
	f8_export_fail(ex, F8_ERR_NOMEM, "out of memory writing the ONNX model");
}

void *f8_export_alloc(onnx_exporter *ex, size_t count, size_t size) {
	if (ex->status)
		return NULL;
	void *memory = f8_arena_alloc_array(ex->arena, count ? count : 1, size);
	if (!memory)
		out_of_memory(ex);
	return memory;
}

char *f8_export_strdup(onnx_exporter *ex, const char *text) {
	if (ex->status)
		return NULL;
	char *copy = f8_arena_strdup(ex->arena, text);
	if (!copy)
		out_of_memory(ex);
	return copy;
}

/* Makes room for one more pointer in *array (*n used of *cap): copies it doubled when full. */
static bool reserve_one(onnx_exporter *ex, void ***array, size_t n, size_t *cap) {
	if (n < *cap)
		return true;
	size_t grown = *cap ? *cap * 2 : 64;
	void **copy = f8_export_alloc(ex, grown, sizeof *copy);
	if (!copy)
		return false;
	if (n)
		memcpy(copy, *array, n * sizeof *copy);
	*array = copy;
	*cap = grown;
	return true;
}

/* Names: an open-addressing set of every name in use. */

static uint32_t name_hash(const char *name) {
	uint32_t hash = 2166136261u; // FNV-1a
	for (const char *c = name; *c; c++)
		hash = (hash ^ (uint8_t)*c) * 16777619u;
	return hash;
}

/* Whether `name` is in use. */
static bool name_taken(const onnx_exporter *ex, const char *name) {
	for (uint32_t i = name_hash(name) & (ex->cap_taken - 1); ex->cap_taken && ex->taken[i];
	     i = (i + 1) & (ex->cap_taken - 1))
		if (strcmp(ex->taken[i], name) == 0)
			return true;
	return false;
}

void f8_export_reserve(onnx_exporter *ex, const char *name) {
	if (ex->status)
		return;
	if ((ex->n_taken + 1) * 2 > ex->cap_taken) {
		uint32_t cap = ex->cap_taken ? ex->cap_taken * 2 : 1024;
		const char **table = f8_export_alloc(ex, cap, sizeof *table);
		if (!table)
			return;
		for (uint32_t i = 0; i < ex->cap_taken; i++) {
			if (!ex->taken[i])
				continue;
			uint32_t j = name_hash(ex->taken[i]) & (cap - 1);
			while (table[j])
				j = (j + 1) & (cap - 1);
			table[j] = ex->taken[i];
		}
		ex->taken = table;
		ex->cap_taken = cap;
	}
	uint32_t i = name_hash(name) & (ex->cap_taken - 1);
	while (ex->taken[i])
		i = (i + 1) & (ex->cap_taken - 1);
	ex->taken[i] = name;
	ex->n_taken++;
}

/* `wanted`, or `wanted`_2, _3, ... when taken; reserved and copied to the arena. */
static const char *unique_name(onnx_exporter *ex, const char *wanted) {
	char name[NAME_MAX_BYTES];
	snprintf(name, sizeof name, "%s", wanted);
	for (uint32_t n = 2; name_taken(ex, name); n++)
		snprintf(name, sizeof name, "%.*s_%u", NAME_MAX_BYTES - 12, wanted, n);
	char *copy = f8_export_strdup(ex, name);
	if (copy)
		f8_export_reserve(ex, copy);
	return copy;
}

const char *f8_export_name(onnx_exporter *ex, const char *what) {
	char name[NAME_MAX_BYTES];
	bool own = ex->node && !ex->shared;
	const char *base = own ? ex->graph->values[ex->node->outputs[0]].name : "f8c";
	snprintf(name, sizeof name, "%s/%s", base, what);
	return unique_name(ex, name);
}

/* Nodes and attributes. */

F8cOnnx__StringStringEntryProto *f8_export_entry(onnx_exporter *ex, const char *key,
					       const char *value) {
	F8cOnnx__StringStringEntryProto *e = f8_export_alloc(ex, 1, sizeof *e);
	if (!e)
		return NULL;
	*e = (F8cOnnx__StringStringEntryProto)F8C_ONNX__STRING_STRING_ENTRY_PROTO__INIT;
	e->key = f8_export_strdup(ex, key);
	e->value = f8_export_strdup(ex, value);
	return ex->status ? NULL : e;
}

/* The node's place in the model, as torch.onnx writes it ("['<module path>', '<op>']"): f8c's
 * importer gives the node that scope. */
static void add_scope(onnx_exporter *ex, F8cOnnx__NodeProto *proto) {
	const char *scope = ex->node && !ex->shared ? ex->node->scope : NULL;
	if (!scope || strchr(scope, '\''))
		return;
	char list[NAME_MAX_BYTES + 64];
	snprintf(list, sizeof list, "['%s', '%s']", scope, proto->op_type);
	F8cOnnx__StringStringEntryProto **props = f8_export_alloc(ex, 1, sizeof *props);
	if (props && (props[0] = f8_export_entry(ex, "pkg.torch.onnx.name_scopes", list))) {
		proto->metadata_props = props;
		proto->n_metadata_props = 1;
	}
}

F8cOnnx__NodeProto *f8_export_node(onnx_exporter *ex, const char *op_type,
				const char *const *inputs, uint32_t n_inputs,
				const char *const *outputs, uint32_t n_outputs) {
	F8cOnnx__GraphProto *graph = ex->proto;
	for (uint32_t i = 0; i < n_outputs; i++)
		if (!outputs[i])
			return NULL; // a failure made the name: ex->status is set
	F8cOnnx__NodeProto *node = f8_export_alloc(ex, 1, sizeof *node);
	char **in = f8_export_alloc(ex, n_inputs, sizeof *in);
	char **out = f8_export_alloc(ex, n_outputs, sizeof *out);
	if (!node || !in || !out ||
	    !reserve_one(ex, (void ***)&graph->node, graph->n_node, &ex->cap_nodes))
		return NULL;
	*node = (F8cOnnx__NodeProto)F8C_ONNX__NODE_PROTO__INIT;
	for (uint32_t i = 0; i < n_inputs; i++)
		in[i] = (char *)(inputs[i] ? inputs[i] : "");
	for (uint32_t i = 0; i < n_outputs; i++)
		out[i] = (char *)outputs[i];
	node->input = in, node->n_input = n_inputs;
	node->output = out, node->n_output = n_outputs;
	node->op_type = (char *)op_type;
	node->name = (char *)outputs[0];
	add_scope(ex, node);
	graph->node[graph->n_node++] = node;
	return ex->status ? NULL : node;
}

const char *f8_export_op_to(onnx_exporter *ex, const char *op_type, const char *output,
			 const char *const *inputs, uint32_t n_inputs) {
	for (uint32_t i = 0; i < n_inputs; i++) {
		if (!inputs[i]) { // a builder before this one failed: it set ex->status
			if (!ex->status)
				f8_export_fail(ex, F8_ERR_INVALID, "internal error: %s lacks input %u",
					    op_type, i);
			return NULL;
		}
	}
	return f8_export_node(ex, op_type, inputs, n_inputs, &output, 1) ? output : NULL;
}

const char *f8_export_op(onnx_exporter *ex, const char *op_type, const char *what,
		      const char *const *inputs, uint32_t n_inputs) {
	if (ex->status)
		return NULL;
	return f8_export_op_to(ex, op_type, f8_export_name(ex, what), inputs, n_inputs);
}

F8cOnnx__NodeProto *f8_export_last(onnx_exporter *ex) {
	return ex->status || !ex->proto->n_node ? NULL : ex->proto->node[ex->proto->n_node - 1];
}

/* A new attribute `name` of `type` on `node`; NULL when `node` is NULL or out of memory. */
static F8cOnnx__AttributeProto *add_attr(onnx_exporter *ex, F8cOnnx__NodeProto *node,
					 const char *name,
					 F8cOnnx__AttributeProto__AttributeType type) {
	if (!node || ex->status)
		return NULL;
	F8cOnnx__AttributeProto *attr = f8_export_alloc(ex, 1, sizeof *attr);
	F8cOnnx__AttributeProto **list = f8_export_alloc(ex, node->n_attribute + 1, sizeof *list);
	if (!attr || !list)
		return NULL;
	*attr = (F8cOnnx__AttributeProto)F8C_ONNX__ATTRIBUTE_PROTO__INIT;
	attr->name = (char *)name;
	attr->has_type = true;
	attr->type = type;
	if (node->n_attribute)
		memcpy(list, node->attribute, node->n_attribute * sizeof *list);
	list[node->n_attribute++] = attr;
	node->attribute = list;
	return attr;
}

void f8_export_attr_int(onnx_exporter *ex, F8cOnnx__NodeProto *node, const char *name,
		     int64_t value) {
	F8cOnnx__AttributeProto *attr = add_attr(ex, node, name,
						 F8C_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
	if (attr)
		attr->has_i = true, attr->i = value;
}

void f8_export_attr_float(onnx_exporter *ex, F8cOnnx__NodeProto *node, const char *name,
		       double value) {
	F8cOnnx__AttributeProto *attr = add_attr(ex, node, name,
						 F8C_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
	if (attr)
		attr->has_f = true, attr->f = (float)value;
}

void f8_export_attr_string(onnx_exporter *ex, F8cOnnx__NodeProto *node, const char *name,
			const char *value) {
	F8cOnnx__AttributeProto *attr = add_attr(ex, node, name,
						 F8C_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
	if (attr)
		attr->has_s = true, attr->s = (ProtobufCBinaryData){strlen(value),
								    (uint8_t *)value};
}

void f8_export_attr_ints(onnx_exporter *ex, F8cOnnx__NodeProto *node, const char *name,
		      const int64_t *items, uint32_t n) {
	F8cOnnx__AttributeProto *attr = add_attr(ex, node, name,
						 F8C_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
	int64_t *copy = attr ? f8_export_alloc(ex, n, sizeof *copy) : NULL;
	if (!copy)
		return;
	memcpy(copy, items, n * sizeof *copy);
	attr->ints = copy, attr->n_ints = n;
}

void f8_export_attr_tensor(onnx_exporter *ex, F8cOnnx__NodeProto *node, const char *name,
			F8cOnnx__TensorProto *tensor) {
	F8cOnnx__AttributeProto *attr = add_attr(ex, node, name,
						 F8C_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
	if (attr)
		attr->t = tensor;
}

/* Tensors and constants. */

int32_t f8_export_data_type(f8_dtype dtype) {
	f8_dtype found;
	for (int32_t number = 1; number < 64; number++)
		if (f8_onnx_dtype(number, &found) && found == dtype)
			return number;
	return 0;
}

F8cOnnx__TensorProto *f8_export_tensor(onnx_exporter *ex, const char *name, f8_dtype dtype,
				    const f8_shape *shape, const void *data, size_t n_bytes) {
	F8cOnnx__TensorProto *tensor = f8_export_alloc(ex, 1, sizeof *tensor);
	int64_t *dims = f8_export_alloc(ex, shape->rank, sizeof *dims);
	uint8_t *bytes = f8_export_alloc(ex, n_bytes, 1);
	if (!tensor || !dims || !bytes)
		return NULL;
	*tensor = (F8cOnnx__TensorProto)F8C_ONNX__TENSOR_PROTO__INIT;
	for (int i = 0; i < shape->rank; i++)
		dims[i] = f8_dim_value(shape->dims[i]);
	if (n_bytes)
		memcpy(bytes, data, n_bytes);
	tensor->name = (char *)name;
	tensor->dims = dims, tensor->n_dims = shape->rank;
	tensor->has_data_type = true, tensor->data_type = f8_export_data_type(dtype);
	tensor->has_raw_data = data != NULL;
	tensor->raw_data = (ProtobufCBinaryData){n_bytes, bytes};
	return tensor;
}

void f8_export_add_initializer(onnx_exporter *ex, F8cOnnx__TensorProto *tensor) {
	F8cOnnx__GraphProto *graph = ex->proto;
	if (tensor && reserve_one(ex, (void ***)&graph->initializer, graph->n_initializer,
				  &ex->cap_initializers))
		graph->initializer[graph->n_initializer++] = tensor;
}

const char *f8_export_cache_find(const onnx_exporter *ex, const export_cached *key) {
	for (uint32_t i = 0; i < ex->n_cached; i++) {
		const export_cached *c = &ex->cache[i];
		if (c->kind == key->kind && c->dtype == key->dtype && c->n_bytes == key->n_bytes &&
		    f8_shape_equal(&c->shape, &key->shape) &&
		    (!c->n_bytes || memcmp(c->data, key->data, c->n_bytes) == 0))
			return c->name;
	}
	return NULL;
}

void f8_export_cache_add(onnx_exporter *ex, const export_cached *key, const char *name) {
	if (!name || ex->status)
		return;
	if (ex->n_cached == ex->cap_cached) {
		uint32_t cap = ex->cap_cached ? ex->cap_cached * 2 : 64;
		export_cached *grown = f8_export_alloc(ex, cap, sizeof *grown);
		if (!grown)
			return;
		if (ex->n_cached)
			memcpy(grown, ex->cache, ex->n_cached * sizeof *grown);
		ex->cache = grown, ex->cap_cached = cap;
	}
	ex->cache[ex->n_cached++] = *key;
	ex->cache[ex->n_cached - 1].name = name;
}

/* "const/i64[4, 32]" or "const/f32/0.5": a readable name for a small constant, into `out`. */
static void constant_name(f8_dtype dtype, const f8_shape *shape, const void *data, char *out,
			  size_t size) {
	size_t used = (size_t)snprintf(out, size, "const/%s", f8_dtype_name(dtype));
	f8_dim numel;
	bool small = f8_shape_numel(shape, &numel) && f8_dim_value(numel) <= 8;
	if (!small || (dtype != F8_DTYPE_I64 && dtype != F8_DTYPE_F32 && dtype != F8_DTYPE_BOOL))
		return;
	for (int64_t i = 0; i < f8_dim_value(numel) && used < size; i++) {
		const char *separator = i == 0 ? (shape->rank ? "[" : "/") : ", ";
		if (dtype == F8_DTYPE_I64)
			used += (size_t)snprintf(out + used, size - used, "%s%lld", separator,
						 (long long)((const int64_t *)data)[i]);
		else if (dtype == F8_DTYPE_F32)
			used += (size_t)snprintf(out + used, size - used, "%s%.9g", separator,
						 (double)((const float *)data)[i]);
		else
			used += (size_t)snprintf(out + used, size - used, "%s%d", separator,
						 ((const uint8_t *)data)[i]);
	}
	if (shape->rank && used < size)
		snprintf(out + used, size - used, "]");
}

const char *f8_export_constant(onnx_exporter *ex, f8_dtype dtype, const f8_shape *shape,
			    const void *data, size_t n_bytes) {
	export_cached key = {.kind = EXPORT_CACHE_CONSTANT, .dtype = dtype, .shape = *shape,
			     .data = data, .n_bytes = n_bytes};
	const char *name = f8_export_cache_find(ex, &key);
	if (name || ex->status)
		return name;
	char wanted[NAME_MAX_BYTES];
	constant_name(dtype, shape, data, wanted, sizeof wanted);
	name = unique_name(ex, wanted);
	F8cOnnx__TensorProto *tensor = f8_export_tensor(ex, name, dtype, shape, data, n_bytes);
	f8_export_add_initializer(ex, tensor);
	key.data = tensor ? tensor->raw_data.data : NULL;
	f8_export_cache_add(ex, &key, name);
	return ex->status ? NULL : name;
}

const char *f8_export_ints(onnx_exporter *ex, const int64_t *items, uint32_t n) {
	f8_shape shape = {.rank = 1, .dims = {f8_dim_const(n)}};
	return f8_export_constant(ex, F8_DTYPE_I64, &shape, items, n * sizeof *items);
}

const char *f8_export_scalar(onnx_exporter *ex, f8_dtype dtype, double value) {
	// Little-endian bytes of the value in `dtype`, as every f8c tensor is stored.
	// Integer dtypes take integral values in range (sizes, axes, counts).
	uint8_t bytes[8] = {0};
	if (dtype == F8_DTYPE_F64) {
		memcpy(bytes, &value, sizeof value);
	} else if (dtype == F8_DTYPE_F32) {
		float f32 = (float)value;
		memcpy(bytes, &f32, sizeof f32);
	} else if (dtype == F8_DTYPE_I64) {
		int64_t i64 = (int64_t)value;
		memcpy(bytes, &i64, sizeof i64);
	} else if (dtype == F8_DTYPE_I32) {
		int32_t i32 = (int32_t)value;
		memcpy(bytes, &i32, sizeof i32);
	} else if (dtype == F8_DTYPE_BOOL) {
		bytes[0] = value != 0.0;
	} else if (dtype == F8_DTYPE_BF16 || dtype == F8_DTYPE_F16) {
		uint16_t bits = (uint16_t)f8_float_encode(dtype, (float)value, true);
		memcpy(bytes, &bits, sizeof bits);
	} else {
		f8_export_unsupported(ex, "a constant of dtype %s", f8_dtype_name(dtype));
		return NULL;
	}
	f8_shape scalar = {0};
	return f8_export_constant(ex, dtype, &scalar, bytes, f8_dtype_get_info(dtype)->bytes);
}

/* Shapes. Helpers shared by several IR nodes carry no node's scope. */

bool f8_export_enter_shared(onnx_exporter *ex) {
	bool was = ex->shared;
	ex->shared = true;
	return was;
}

const char *f8_export_shared_op(onnx_exporter *ex, const char *op_type, const char *wanted,
			     const char *const *inputs, uint32_t n_inputs) {
	if (ex->status)
		return NULL;
	return f8_export_op_to(ex, op_type, unique_name(ex, wanted), inputs, n_inputs);
}

/* The 1-D tensor [the size `symbol`]: Shape, sliced to one dim, of the first graph input that
 * has the symbol as a dim. */
static const char *symbol_size(onnx_exporter *ex, uint16_t symbol) {
	if (ex->status || ex->symbol_sizes[symbol])
		return ex->symbol_sizes[symbol];
	const f8_graph *graph = ex->graph;
	for (uint32_t i = 0; i < graph->n_inputs; i++) {
		const f8_value *input = &graph->values[graph->inputs[i]];
		int rank = input->role == F8_ROLE_INPUT ? input->type.shape.rank : 0;
		for (int axis = 0; axis < rank; axis++) {
			if (!f8_dim_equal(input->type.shape.dims[axis], f8_dim_symbol(symbol)))
				continue;
			char wanted[NAME_MAX_BYTES];
			snprintf(wanted, sizeof wanted, "size/%s", graph->symbols[symbol]);
			bool shared = f8_export_enter_shared(ex);
			const char *size = f8_export_shared_op(ex, "Shape", wanted, IN(input->name));
			f8_export_attr_int(ex, f8_export_last(ex), "start", axis);
			f8_export_attr_int(ex, f8_export_last(ex), "end", axis + 1);
			ex->shared = shared;
			return ex->symbol_sizes[symbol] = size;
		}
	}
	f8_export_unsupported(ex, "the size '%s' is no dimension of a graph input: ONNX cannot "
			   "compute it", graph->symbols[symbol]);
	return NULL;
}

/* coefficient * the product of the term's sizes, as a 1-D tensor of one element. */
static const char *term_tensor(onnx_exporter *ex, const f8_dim_term *term,
			       const char *wanted) {
	const char *product = NULL;
	for (int s = 0; s < term->n_symbols; s++) {
		const char *factor = symbol_size(ex, term->symbols[s]);
		if (product)
			factor = f8_export_shared_op(ex, "Mul", wanted, IN(product, factor));
		product = factor;
	}
	if (product && term->coefficient == 1)
		return product;
	const char *coefficient = f8_export_ints(ex, INTS(term->coefficient));
	if (!product)
		return coefficient;
	return f8_export_shared_op(ex, "Mul", wanted, IN(product, coefficient));
}

/* The 1-D tensor [dim]: a constant, or the sum of its terms. */
static const char *size_tensor(onnx_exporter *ex, f8_dim dim) {
	if (f8_dim_is_const(dim))
		return f8_export_ints(ex, INTS(f8_dim_value(dim)));
	export_cached key = {.kind = EXPORT_CACHE_SHAPE, .shape = {.rank = 1, .dims = {dim}}};
	const char *sum = f8_export_cache_find(ex, &key);
	if (sum || ex->status)
		return sum;
	char text[NAME_MAX_BYTES - 16], wanted[NAME_MAX_BYTES];
	f8_dim_format(ex->graph, dim, text, sizeof text);
	snprintf(wanted, sizeof wanted, "size/%s", text);
	bool shared = f8_export_enter_shared(ex);
	for (int t = 0; t < dim.n_terms; t++) {
		const char *term = term_tensor(ex, &dim.terms[t], wanted);
		sum = t == 0 ? term : f8_export_shared_op(ex, "Add", wanted, IN(sum, term));
	}
	ex->shared = shared;
	f8_export_cache_add(ex, &key, sum);
	return ex->status ? NULL : sum;
}

const char *f8_export_shape(onnx_exporter *ex, const f8_dim *dims, uint32_t n) {
	int64_t values[F8_MAX_RANK];
	uint32_t n_constant = 0;
	for (uint32_t i = 0; i < n && i < F8_MAX_RANK; i++)
		if (f8_dim_is_const(dims[i]))
			values[n_constant++] = f8_dim_value(dims[i]);
	if (n > F8_MAX_RANK) {
		f8_export_unsupported(ex, "a shape of rank %u", n);
		return NULL;
	}
	if (n_constant == n)
		return f8_export_ints(ex, values, n);
	if (n == 1)
		return size_tensor(ex, dims[0]);
	export_cached key = {.kind = EXPORT_CACHE_SHAPE, .shape = {.rank = (uint8_t)n}};
	memcpy(key.shape.dims, dims, n * sizeof *dims);
	const char *name = f8_export_cache_find(ex, &key);
	if (name || ex->status)
		return name;
	// Pieces: each symbolic size alone, each run of constants as one constant.
	const char *pieces[F8_MAX_RANK];
	uint32_t n_pieces = 0;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t run = 0;
		while (i + run < n && f8_dim_is_const(dims[i + run]))
			values[run] = f8_dim_value(dims[i + run]), run++;
		pieces[n_pieces++] = run ? f8_export_ints(ex, values, run) : size_tensor(ex, dims[i]);
		i += run ? run - 1 : 0;
	}
	char text[NAME_MAX_BYTES - 16], wanted[NAME_MAX_BYTES];
	f8_type type = {.dtype = F8_DTYPE_I64, .shape = key.shape};
	f8_type_format(ex->graph, &type, text, sizeof text);
	snprintf(wanted, sizeof wanted, "shape/%s", strchr(text, '[') ? strchr(text, '[') : text);
	bool shared = f8_export_enter_shared(ex);
	name = f8_export_shared_op(ex, "Concat", wanted, pieces, n_pieces);
	f8_export_attr_int(ex, f8_export_last(ex), "axis", 0);
	ex->shared = shared;
	f8_export_cache_add(ex, &key, name);
	return ex->status ? NULL : name;
}

const char *f8_export_size(onnx_exporter *ex, f8_dim dim) {
	if (f8_dim_is_const(dim))
		return f8_export_scalar(ex, F8_DTYPE_I64, (double)f8_dim_value(dim));
	export_cached key = {.kind = EXPORT_CACHE_SIZE, .shape = {.rank = 1, .dims = {dim}}};
	const char *name = f8_export_cache_find(ex, &key);
	if (name || ex->status)
		return name;
	const char *tensor = size_tensor(ex, dim);
	char text[NAME_MAX_BYTES - 16], wanted[NAME_MAX_BYTES];
	f8_dim_format(ex->graph, dim, text, sizeof text);
	snprintf(wanted, sizeof wanted, "size/%s/scalar", text);
	bool shared = f8_export_enter_shared(ex);
	name = f8_export_shared_op(ex, "Squeeze", wanted, IN(tensor, f8_export_ints(ex, INTS(0))));
	ex->shared = shared;
	f8_export_cache_add(ex, &key, name);
	return ex->status ? NULL : name;
}

/* The IR graph's values. */

const f8_type *f8_export_input_type(const onnx_exporter *ex, const f8_node *node, uint32_t i) {
	return &ex->graph->values[node->inputs[i]].type;
}

/* Fails unless input `i` of `node` is written in `form`. */
static bool require_form(onnx_exporter *ex, const f8_node *node, uint32_t i, export_form form) {
	f8_value_id value = node->inputs[i];
	if (ex->forms[value] == form)
		return true;
	const char *name = ex->graph->values[value].name;
	if (form == EXPORT_FORM_PLAIN)
		f8_export_unsupported(ex, "input %u (%%%s) is a value of a mixture-of-experts layer, "
				   "which is written densely: only the MoE ops and activations may "
				   "read it", i, name);
	else
		f8_export_unsupported(ex, "input %u (%%%s) does not come from the mixture-of-"
				   "experts ops (Router, MoEDispatch, GroupedLinear) that f8c "
				   "writes densely", i, name);
	return false;
}

const char *f8_export_input_form(onnx_exporter *ex, const f8_node *node, uint32_t i,
			      export_form form) {
	if (ex->status || i >= node->n_inputs || node->inputs[i] == F8_NONE)
		return NULL;
	f8_value_id value = node->inputs[i];
	if (!require_form(ex, node, i, form))
		return NULL;
	if (form != EXPORT_FORM_ROUTE && !ex->names[value])
		f8_export_fail(ex, F8_ERR_INVALID, "input %u (%%%s) is read before it is written", i,
			    ex->graph->values[value].name);
	return form == EXPORT_FORM_ROUTE ? "" : ex->names[value];
}

const char *f8_export_input(onnx_exporter *ex, const f8_node *node, uint32_t i) {
	return f8_export_input_form(ex, node, i, EXPORT_FORM_PLAIN);
}

void f8_export_bind(onnx_exporter *ex, const f8_node *node, uint32_t i, const char *name,
		 export_form form) {
	if (ex->status)
		return;
	ex->forms[node->outputs[i]] = form;
	ex->names[node->outputs[i]] = name;
}

const char *f8_export_output(onnx_exporter *ex, const f8_node *node, uint32_t i) {
	const char *name = ex->graph->values[node->outputs[i]].name;
	f8_export_bind(ex, node, i, name, EXPORT_FORM_PLAIN);
	return ex->status ? NULL : name;
}
