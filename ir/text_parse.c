/*
 * The text parser: reads the form ir/text_print.c writes (and hand-written variations of it:
 * any spacing, comments, outputs without types) into a graph.
 *
 *   file     := 'graph' (BARE | STRING) '{' item* '}'
 *   item     := LEAF_ROLE VALUE ':' type annots?            LEAF_ROLE: input param buffer state scale
 *                                                          amax_history
 *             | 'output' VALUE (',' VALUE)*
 *             | 'update' VALUE '<-' VALUE                 a leaf takes a value at the step's end
 *             | 'kernel' KERNEL ':' FAMILY STRING?        a fused kernel, before its members
 *             | 'mesh' MESH_AXIS '=' INT (',' MESH_AXIS '=' INT)*    ranks along the mesh's axes
 *             | (out (',' out)* '=')? OP '(' operands? ')' attrs? meta*
 *   out      := VALUE (':' type)? annots?
 *   type     := DTYPE '[' (dim (',' dim)*)? ']'
 *   dim      := '-'? term (('+' | '-') term)*       `seq+1`, `2*seq-1`, `batch*seq`, `-seq+4`
 *   term     := (INT | SYMBOL) ('*' (INT | SYMBOL))*
 *   annots   := '<' annot (',' annot)* '>'
 *   annot    := 'role' '=' ROLE | 'format' '=' DTYPE | 'recipe' '=' RECIPE | 'slot' '=' INT
 *             | 'reason' '=' STRING | 'offset' '=' INT | 'recompute'
 *             | 'shard' '=' split (',' split)*         split: MESH_AXIS ':' INT (the dim split)
 *             | 'partial' '=' pending (',' pending)*   pending: MESH_AXIS ':' ('sum' | 'max')
 *                                                      MESH_AXIS: tp cp ep dp pp (ir/graph.h)
 *   operands := (VALUE | '_') (',' (VALUE | '_'))*          '_' is an omitted optional input
 *   attrs    := '{' (NAME '=' attr_value (',' NAME '=' attr_value)*)? '}'
 *   meta     := 'scope' '=' STRING | 'phase' '=' PHASE | 'name' '=' STRING
 *             | 'recompute' '=' STRING                   why a bwd node recomputes a fwd one
 *             | 'loc' '=' STRING (':' INT ':' INT | '[' INT ']')
 *             | 'kernel' '=' KERNEL                      a kernel declared above
 *   VALUE    := '%' (BARE | STRING)                        BARE: [A-Za-z0-9_.]+
 *   KERNEL   := [A-Za-z_][A-Za-z0-9_]*                     FAMILY: cast, norm, ... (ir/graph.h)
 *
 * A value names each mesh axis at most once in its `shard` and `partial` annotations (it is
 * replicated over the axes it does not name). In `<shard=tp:0,dp:1, partial=cp:sum>`, a ','
 * before a word and ':' continues a list of axes, and any other ',' ends it: no annotation key
 * is followed by ':'.
 *
 * An attribute value is read by the kind its op's schema gives it: INT, FLOAT (also inf, nan),
 * STRING, [INT, ...], [FLOAT, ...], DTYPE, dim, [dim, ...], or a tensor `type(elements)`.
 * `#` starts a comment that runs to the end of the line. The tokens are read by ir/text_lex.c.
 *
 * The input comes from users: every size is checked before anything is allocated from it, and
 * every error names file:line:column with the line's text.
 */
#include <assert.h> // assert
#include <errno.h>  // errno
#include <math.h>   // INFINITY, NAN
#include <stdio.h>  // FILE, fopen, fread, snprintf
#include <string.h> // memchr, memcmp, memcpy, strcmp, strerror, strlen

#include "ir/alloc.h"         // f8_realloc, f8_free
#include "ir/arena.h"         // f8_arena_alloc, f8_arena_alloc_array, f8_arena_strdup
#include "ir/text.h"          // f8_text_parse, f8_text_parse_file
#include "ir/text_internal.h" // parser, token, the lexer (f8_text_next, f8_text_fail_at, ...)

enum {
	MAX_TENSOR_ELEMENTS = 1 << 20, // Constant tensors in the text IR are small by nature
	MAX_LIST = 1 << 16,            // attribute lists, operands, outputs
	MAX_FILE_BYTES = 1 << 30,
};

/* Types and dims. */

/* term := (INT | SYMBOL) ('*' (INT | SYMBOL))*, times `sign`. */
static f8_status parse_dim_term(parser *p, int64_t sign, f8_dim *out) {
	f8_dim term = f8_dim_const(sign);
	token first = p->tok;
	for (;;) {
		f8_dim factor;
		if (p->tok.kind == TOKEN_INT) {
			factor = f8_dim_const(p->tok.i);
		} else if (p->tok.kind == TOKEN_IDENT) {
			uint16_t symbol;
			f8_status status = f8_graph_intern_symbol(p->graph, p->tok.text, p->tok.len, &symbol);
			if (status == F8_ERR_NOMEM)
				return f8_diag_set(p->diag, F8_ERR_NOMEM, "out of memory");
			if (status)
				return f8_text_fail_at(p, &p->tok, "more than %d symbols",
						    UINT16_MAX + 1);
			factor = f8_dim_symbol(symbol);
		} else {
			return f8_text_fail_expected(p, "a dimension (a number or a symbol like seq)");
		}
		if (!f8_dim_mul(term, factor, &term))
			return f8_text_fail_at(p, &first,
					    "dimension overflows or has more than %d symbols in a "
					    "product", F8_DIM_MAX_SYMBOLS);
		f8_status status = f8_text_next(p);
		if (status)
			return status;
		if (!text_at_punct(p, '*'))
			break;
		if ((status = f8_text_next(p)))
			return status;
	}
	*out = term;
	return F8_OK;
}

/* dim := '-'? term (('+' | '-') term | NEGATIVE_INT_TERM)*: `seq+1`, `2*seq-1` (the lexer
 * reads `-1` as one number), `batch*seq-seq`, `-seq+64`. */
static f8_status parse_dim(parser *p, f8_dim *out) {
	token first = p->tok;
	f8_dim dim;
	int64_t first_sign = 1;
	f8_status status = F8_OK;
	if (text_at_punct(p, '-')) { // `-seq+64`: the printer writes a negative first term so
		first_sign = -1;
		status = f8_text_next(p);
	}
	if (!status)
		status = parse_dim_term(p, first_sign, &dim);
	while (!status) {
		int64_t sign = 1;
		if (text_at_punct(p, '+') || text_at_punct(p, '-')) {
			sign = text_at_punct(p, '-') ? -1 : 1;
			status = f8_text_next(p);
		} else if (!(p->tok.kind == TOKEN_INT && p->tok.text[0] == '-')) {
			break;
		}
		f8_dim term;
		if (!status)
			status = parse_dim_term(p, sign, &term);
		if (!status && !f8_dim_add(dim, term, &dim))
			return f8_text_fail_at(p, &first,
					    "dimension overflows or has more than %d terms",
					    F8_DIM_MAX_TERMS);
	}
	if (!status)
		*out = dim;
	return status;
}

/* '[' dim (',' dim)* ']' into `dims` (up to `max`), count in *n. */
static f8_status parse_dim_list(parser *p, f8_dim *dims, uint32_t max, uint32_t *n) {
	f8_status status = f8_text_expect_punct(p, '[');
	*n = 0;
	while (!status && !text_at_punct(p, ']')) {
		if (*n && (status = f8_text_expect_punct(p, ',')))
			return status;
		if (*n == max)
			return f8_text_fail_at(p, &p->tok, "more than %u dimensions", max);
		status = parse_dim(p, &dims[(*n)++]);
	}
	return status ? status : f8_text_next(p);
}

static f8_status parse_dtype(parser *p, f8_dtype *out) {
	if (p->tok.kind != TOKEN_IDENT || !f8_dtype_from_name(p->tok.text, p->tok.len, out))
		return f8_text_fail_expected(p, "a dtype (f32, bf16, e4m3, i64, ...)");
	return f8_text_next(p);
}

static f8_status parse_type(parser *p, f8_type *out) {
	f8_status status = parse_dtype(p, &out->dtype);
	uint32_t rank = 0;
	if (!status)
		status = parse_dim_list(p, out->shape.dims, F8_MAX_RANK, &rank);
	out->shape.rank = (uint8_t)rank;
	return status;
}

/* The tensor dimension of a `shard=` item, the current token, into *dim. The verifier checks
 * it against the value's rank; here it must only fit a rank. */
static f8_status parse_split_dim(parser *p, uint8_t *dim) {
	if (p->tok.kind == TOKEN_INT && p->tok.i >= 0 && p->tok.i < F8_MAX_RANK) {
		*dim = (uint8_t)p->tok.i;
		return f8_text_next(p);
	}
	char what[64];
	snprintf(what, sizeof what, "the split tensor dimension (an integer, 0 to %d)",
		 F8_MAX_RANK - 1);
	f8_status status = f8_text_fail_expected(p, what);
	if (text_at_ident(p, "partial")) // the form before placements, `shard=tp:partial`
		f8_diag_hint(p->diag, "a value that awaits a reduction over an axis is written "
			     "partial=AXIS:REDUCTION (partial=tp:sum)");
	return status;
}

/* The parts of a dimension split part by part, `[128 64 64]` (at least two, each above 0),
 * from the '[' into placement->parts (in the graph's arena). */
static f8_status parse_parts(parser *p, f8_placement *placement) {
	int64_t parts[F8_MAX_PLACEMENT_PARTS];
	uint32_t n = 0;
	f8_status status = f8_text_next(p);
	while (!status && !text_at_punct(p, ']')) {
		if (n == F8_MAX_PLACEMENT_PARTS)
			return f8_text_fail_at(p, &p->tok, "more than %d parts", F8_MAX_PLACEMENT_PARTS);
		if (p->tok.kind != TOKEN_INT || p->tok.i <= 0)
			return f8_text_fail_expected(p, "a part's size (an integer above 0)");
		parts[n++] = p->tok.i;
		status = f8_text_next(p);
	}
	if (status)
		return status;
	if (n < 2)
		return f8_text_fail_at(p, &p->tok, "a dimension split part by part has at least two "
				      "parts");
	int64_t *stored = f8_arena_alloc_array(p->graph->arena, n, sizeof *stored);
	if (!stored)
		return f8_diag_set(p->diag, F8_ERR_NOMEM, "out of memory");
	memcpy(stored, parts, n * sizeof *stored);
	placement->parts = stored;
	placement->n_parts = (uint8_t)n;
	return f8_text_next(p);
}

/* The items of a `shard=` or `partial=` annotation (`kind`), from the token after the '=':
 * AXIS ':' (INT parts? | REDUCTION), separated by ','. An axis placed already, by this annotation or
 * another, is an error: a value has one placement per axis. */
static f8_status parse_placements(parser *p, f8_value *value, f8_placement_kind kind) {
	for (;;) {
		token at = p->tok;
		f8_mesh_axis axis;
		if (at.kind != TOKEN_IDENT || !f8_mesh_axis_from_name(at.text, at.len, &axis))
			return f8_text_fail_expected(p, "a mesh axis (tp, cp, ep, dp, pp)");
		f8_placement *placement = &value->placement[axis];
		if (placement->kind != F8_PLACEMENT_KIND_REPLICATED) {
			char before[16];
			if (placement->kind == F8_PLACEMENT_KIND_SHARD)
				snprintf(before, sizeof before, "%u", (unsigned)placement->dim);
			else
				snprintf(before, sizeof before, "%s",
					 f8_reduction_name(placement->reduction));
			return f8_text_fail_at(p, &at, "mesh axis %s is given twice in this value (it "
					    "is %s=%s:%s already): a value has one placement per axis",
					    f8_mesh_axis_name(axis),
					    f8_placement_kind_name(placement->kind),
					    f8_mesh_axis_name(axis), before);
		}
		f8_status status = f8_text_next(p);
		if (!status)
			status = f8_text_expect_punct(p, ':');
		if (!status && kind == F8_PLACEMENT_KIND_SHARD) {
			status = parse_split_dim(p, &placement->dim);
			if (!status && text_at_punct(p, '['))
				status = parse_parts(p, placement);
		} else if (!status) {
			if (p->tok.kind != TOKEN_IDENT ||
			    !f8_reduction_from_name(p->tok.text, p->tok.len, &placement->reduction))
				return f8_text_fail_expected(p, "a reduction (sum, max)");
			status = f8_text_next(p);
		}
		if (status)
			return status;
		placement->kind = kind;
		if (!text_at_punct(p, ',') || !f8_text_word_then_punct_ahead(p, ':'))
			return F8_OK;
		if ((status = f8_text_next(p)))
			return status;
	}
}

/* Annotations: '<' annot (',' annot)* '>'. */
static f8_status parse_annotation(parser *p, f8_value *value, bool is_leaf) {
	token key = p->tok;
	f8_status status;
	if (key.kind != TOKEN_IDENT)
		return f8_text_fail_expected(p, "an annotation (role, format, recipe, slot, reason, "
					     "shard, partial, tied, offset, recompute)");
	if ((status = f8_text_next(p)))
		return status;
	if (key.len == 9 && memcmp(key.text, "recompute", 9) == 0) {
		value->recompute = true;
		return F8_OK;
	}
	if ((status = f8_text_expect_punct(p, '=')))
		return status;
	token arg = p->tok;
#define KEY(word) (key.len == strlen(word) && memcmp(key.text, word, key.len) == 0)
	if (KEY("role")) {
		if (is_leaf)
			return f8_text_fail_at(p, &key, "a leaf's role is the word that declares it");
		if (arg.kind != TOKEN_IDENT || !f8_role_from_name(arg.text, arg.len, &value->role) ||
		    f8_role_is_leaf(value->role))
			return f8_text_fail_expected(p, "a role of a node's output (act, grad)");
		return f8_text_next(p);
	}
	if (KEY("format"))
		return parse_dtype(p, &value->precision.format);
	if (KEY("recipe")) {
		if (arg.kind != TOKEN_IDENT || !f8_recipe_from_name(arg.text, arg.len, &value->precision.recipe))
			return f8_text_fail_expected(p, "a recipe (delayed, current, rowwise, block, mxfp8)");
		return f8_text_next(p);
	}
	if (KEY("slot") || KEY("offset")) {
		if (arg.kind != TOKEN_INT || arg.i < 0 || (KEY("slot") && arg.i >= F8_NONE))
			return f8_text_fail_expected(p, "a non-negative integer");
		if (KEY("slot"))
			value->precision.scaling_slot = (uint32_t)arg.i;
		else
			value->buffer_offset = arg.i;
		return f8_text_next(p);
	}
	if (KEY("reason"))
		return f8_text_take_string(p, &value->precision.reason);
	if (KEY("shard"))
		return parse_placements(p, value, F8_PLACEMENT_KIND_SHARD);
	if (KEY("partial"))
		return parse_placements(p, value, F8_PLACEMENT_KIND_PARTIAL);
	if (KEY("tied")) { // one axis, nothing after it
		f8_mesh_axis axis;
		if (arg.kind != TOKEN_IDENT || !f8_mesh_axis_from_name(arg.text, arg.len, &axis))
			return f8_text_fail_expected(p, "a mesh axis (tp, cp, ep, dp, pp)");
		if (value->placement[axis].kind != F8_PLACEMENT_KIND_REPLICATED)
			return f8_text_fail_at(p, &arg, "mesh axis %s is given twice in this value: a "
					       "value has one placement per axis",
					       f8_mesh_axis_name(axis));
		value->placement[axis].kind = F8_PLACEMENT_KIND_TIED;
		return f8_text_next(p);
	}
#undef KEY
	return f8_text_fail_at(p, &key, "unknown annotation '%.*s'", (int)key.len, key.text);
}

/* Attribute values. */

static f8_status parse_number(parser *p, bool want_int, int64_t *i, double *f) {
	if (!want_int && text_at_punct(p, '-')) { // `-inf`, `-nan`: a minus, then the word
		f8_status status = f8_text_next(p);
		if (status)
			return status;
		if (!text_at_ident(p, "inf") && !text_at_ident(p, "nan"))
			return f8_text_fail_expected(p, "inf or nan after '-'");
		*f = p->tok.text[0] == 'i' ? -(double)INFINITY : -(double)NAN;
		return f8_text_next(p);
	}
	if (p->tok.kind == TOKEN_INT) {
		*i = p->tok.i;
		*f = p->tok.f;
	} else if (!want_int && p->tok.kind == TOKEN_FLOAT) {
		*f = p->tok.f;
	} else if (!want_int && (text_at_ident(p, "inf") || text_at_ident(p, "nan"))) {
		*f = p->tok.text[0] == 'i' ? (double)INFINITY : (double)NAN;
	} else {
		return f8_text_fail_expected(p, want_int ? "an integer" : "a number");
	}
	return f8_text_next(p);
}

/* Stores element `index` of a tensor literal from the current token. */
static f8_status parse_tensor_element(parser *p, f8_tensor_data *tensor, size_t index) {
	const f8_dtype_info *info = f8_dtype_get_info(tensor->dtype);
	unsigned char *element = (unsigned char *)tensor->data + index * info->bytes;
	int64_t i = 0;
	double f = 0;
	bool want_int = tensor->dtype != F8_DTYPE_F32 && tensor->dtype != F8_DTYPE_F64;
	token at = p->tok;
	f8_status status = parse_number(p, want_int, &i, &f);
	if (status)
		return status;
	if (tensor->dtype == F8_DTYPE_F64) {
		memcpy(element, &f, sizeof f);
	} else if (tensor->dtype == F8_DTYPE_F32) {
		float v = (float)f;
		memcpy(element, &v, sizeof v);
	} else if (f8_dtype_is_float(tensor->dtype)) {
		// Small floats are written as their bit patterns (see ir/text_print.c).
		if (i < 0 || (uint64_t)i >> (8 * info->bytes))
			return f8_text_fail_at(p, &at, "0x%llx is not a %s bit pattern",
					    (unsigned long long)i, info->name);
		memcpy(element, &(uint16_t){(uint16_t)i}, info->bytes);
	} else {
		double min = info->kind == F8_DTYPE_KIND_INT ? -info->max - 1 : 0;
		if ((double)i < min || (double)i > info->max)
			return f8_text_fail_at(p, &at, "%lld does not fit in %s", (long long)i,
					    info->name);
		if (info->bytes == 8)
			memcpy(element, &i, 8);
		else if (info->bytes == 4)
			memcpy(element, &(int32_t){(int32_t)i}, 4);
		else
			*element = (unsigned char)i;
	}
	return F8_OK;
}

static f8_status parse_tensor(parser *p, f8_attr *attr) {
	f8_tensor_data *tensor = f8_arena_alloc(p->graph->arena, sizeof *tensor);
	if (!tensor)
		return f8_diag_set(p->diag, F8_ERR_NOMEM, "out of memory");
	token start = p->tok;
	f8_type type;
	f8_status status = parse_type(p, &type);
	if (status)
		return status;
	f8_dim numel;
	if (!f8_shape_numel(&type.shape, &numel) || !f8_dim_is_const(numel))
		return f8_text_fail_at(p, &start, "a tensor literal needs a constant shape");
	for (int i = 0; i < type.shape.rank; i++)
		if (f8_dim_value(type.shape.dims[i]) < 0)
			return f8_text_fail_at(p, &start,
					    "a tensor literal cannot have a negative size");
	if (f8_dim_value(numel) > MAX_TENSOR_ELEMENTS)
		return f8_text_fail_at(p, &start, "tensor literal of %lld elements is larger than %d",
				    (long long)f8_dim_value(numel), MAX_TENSOR_ELEMENTS);
	if (type.dtype == F8_DTYPE_UNDEFINED)
		return f8_text_fail_at(p, &start, "a tensor literal needs a dtype");
	size_t count = (size_t)f8_dim_value(numel), bytes = f8_dtype_get_info(type.dtype)->bytes;
	*tensor = (f8_tensor_data){.dtype = type.dtype, .shape = type.shape, .n_bytes = count * bytes};
	if (!(tensor->data = f8_arena_alloc(p->graph->arena, tensor->n_bytes)))
		return f8_diag_set(p->diag, F8_ERR_NOMEM, "out of memory");
	if ((status = f8_text_expect_punct(p, '(')))
		return status;
	for (size_t i = 0; i < count; i++) {
		if (i && (status = f8_text_expect_punct(p, ',')))
			return status;
		if ((status = parse_tensor_element(p, tensor, i)))
			return status;
	}
	if (!text_at_punct(p, ')'))
		return f8_text_fail_at(p, &p->tok, "expected ')' after the %zu elements of %.*s",
				    count, (int)start.len, start.text);
	attr->tensor = tensor;
	return f8_text_next(p);
}

/* '[' item (',' item)* ']' of INTS, FLOATS or DIMS into arena storage. */
static f8_status parse_list(parser *p, f8_attr *attr) {
	f8_status status = f8_text_expect_punct(p, '[');
	uint32_t n = 0, cap = 0;
	void *items = NULL;
	size_t size = attr->kind == F8_ATTR_INTS ? sizeof(int64_t)
		      : attr->kind == F8_ATTR_FLOATS ? sizeof(double) : sizeof(f8_dim);
	while (!status && !text_at_punct(p, ']')) {
		if (n && (status = f8_text_expect_punct(p, ',')))
			break;
		if (n == MAX_LIST) {
			status = f8_text_fail_at(p, &p->tok, "list longer than %d", MAX_LIST);
			break;
		}
		if (n == cap) {
			cap = cap ? cap * 2 : 8;
			void *grown = f8_realloc(items, cap * size);
			if (!grown) {
				status = f8_diag_set(p->diag, F8_ERR_NOMEM, "out of memory");
				break;
			}
			items = grown;
		}
		int64_t i = 0;
		double f = 0;
		if (attr->kind == F8_ATTR_DIMS) {
			status = parse_dim(p, &((f8_dim *)items)[n]);
		} else {
			status = parse_number(p, attr->kind == F8_ATTR_INTS, &i, &f);
			if (attr->kind == F8_ATTR_INTS)
				((int64_t *)items)[n] = i;
			else
				((double *)items)[n] = f;
		}
		n++;
	}
	void *stored = NULL;
	if (!status && n) {
		stored = f8_arena_alloc_array(p->graph->arena, n, size);
		if (stored)
			memcpy(stored, items, n * size);
		else
			status = f8_diag_set(p->diag, F8_ERR_NOMEM, "out of memory");
	}
	f8_free(items);
	if (status)
		return status;
	if (attr->kind == F8_ATTR_INTS)
		attr->ints.n = n, attr->ints.items = stored;
	else if (attr->kind == F8_ATTR_FLOATS)
		attr->floats.n = n, attr->floats.items = stored;
	else
		attr->dims.n = n, attr->dims.items = stored;
	return f8_text_next(p);
}

static f8_status parse_attr_value(parser *p, f8_attr *attr) {
	switch (attr->kind) {
	case F8_ATTR_INT: { // i and f share storage: read into locals
		double ignored;
		return parse_number(p, true, &attr->i, &ignored);
	}
	case F8_ATTR_FLOAT: {
		int64_t ignored;
		return parse_number(p, false, &ignored, &attr->f);
	}
	case F8_ATTR_STRING:
		return f8_text_take_string(p, &attr->s);
	case F8_ATTR_DTYPE:
		return parse_dtype(p, &attr->dtype);
	case F8_ATTR_DIM:
		return parse_dim(p, &attr->dim);
	case F8_ATTR_TENSOR:
		return parse_tensor(p, attr);
	default:
		return parse_list(p, attr);
	}
}

/* '{' NAME '=' value (',' ...)* '}' for node `id`, stored in schema order. */
static f8_status parse_attrs(parser *p, f8_node_id id) {
	f8_op op = p->graph->nodes[id].op;
	const f8_op_info *info = f8_op_get_info(op);
	f8_attr by_schema[64] = {{0}}; // every schema is far shorter; checked below
	bool present[64] = {false};
	assert(info->n_attrs <= 64);
	f8_status status = f8_text_next(p); // past '{'
	for (bool first = true; !status && !text_at_punct(p, '}'); first = false) {
		if (!first && (status = f8_text_expect_punct(p, ',')))
			return status;
		token name = p->tok;
		if (name.kind != TOKEN_IDENT)
			return f8_text_fail_expected(p, "an attribute name");
		const f8_attr_spec *spec = f8_op_find_attr_spec(op, name.text, name.len);
		if (!spec) {
			f8_text_fail_at(p, &name, "%s has no attribute '%.*s'", info->name, (int)name.len, name.text);
			char hint[F8_DIAG_MESSAGE_MAX] = "";
			size_t used = 0;
			for (uint32_t i = 0; i < info->n_attrs && used < sizeof hint; i++)
				used += (size_t)snprintf(hint + used, sizeof hint - used, "%s%s (%s)",
							 i ? ", " : "", info->attrs[i].name,
							 f8_attr_kind_name(info->attrs[i].kind));
			f8_diag_hint(p->diag, info->n_attrs ? "%s takes %s" : "%s takes no attributes%s",
				     info->name, hint);
			return F8_ERR_PARSE;
		}
		size_t slot = (size_t)(spec - info->attrs);
		if (present[slot])
			return f8_text_fail_at(p, &name, "attribute '%s' given twice", spec->name);
		if ((status = f8_text_next(p)) || (status = f8_text_expect_punct(p, '=')))
			return status;
		by_schema[slot] = (f8_attr){.name = spec->name, .kind = spec->kind};
		present[slot] = true;
		status = parse_attr_value(p, &by_schema[slot]);
	}
	if (status)
		return status;
	f8_attr attrs[64];
	uint32_t n = 0;
	for (uint32_t i = 0; i < info->n_attrs; i++)
		if (present[i])
			attrs[n++] = by_schema[i];
	// The payloads are in the arena already; set_attrs copies them once more, which keeps
	// one way of attaching attributes for every producer of graphs.
	if (f8_node_set_attrs(p->graph, id, attrs, n))
		return f8_diag_set(p->diag, F8_ERR_NOMEM, "out of memory");
	return f8_text_next(p); // past '}'
}

/* Whether the IDENT token `tok` is a C identifier (the lexer's words may hold dots). */
static bool is_kernel_name(const token *tok) {
	return tok->kind == TOKEN_IDENT && memchr(tok->text, '.', tok->len) == NULL;
}

/* The KERNEL of `kernel=KERNEL`: a kernel declared above, which `node` joins. */
static f8_status parse_kernel_use(parser *p, f8_node *node) {
	if (!is_kernel_name(&p->tok))
		return f8_text_fail_expected(p, "a kernel name (k0)");
	uint32_t group = f8_graph_find_group(p->graph, p->tok.text, p->tok.len);
	if (group == F8_NONE) {
		f8_text_fail_at(p, &p->tok, "kernel %.*s is not declared before this node",
			     (int)p->tok.len, p->tok.text);
		f8_diag_hint(p->diag, "a line `kernel %.*s : FAMILY \"reason\"` declares it; it "
			     "stands before the kernel's first member", (int)p->tok.len,
			     p->tok.text);
		return F8_ERR_PARSE;
	}
	node->group = group;
	return f8_text_next(p);
}

/* The families, "cast, norm, ...", for messages. */
static const char *family_list(char *buffer, size_t size) {
	size_t used = 0;
	buffer[0] = '\0';
	for (int i = 0; i < F8_KERNEL_FAMILY_COUNT && used < size; i++)
		used += (size_t)snprintf(buffer + used, size - used, "%s%s", i ? ", " : "",
					 f8_kernel_family_name((f8_kernel_family)i));
	return buffer;
}

/* 'kernel' KERNEL ':' FAMILY STRING?: declares a fused kernel (the reason may be left out). */
static f8_status parse_kernel(parser *p) {
	f8_status status = f8_text_next(p);
	if (status)
		return status;
	token name = p->tok;
	if (!is_kernel_name(&name))
		return f8_text_fail_expected(p, "a kernel name (a C identifier: k0)");
	if (f8_graph_find_group(p->graph, name.text, name.len) != F8_NONE)
		return f8_text_fail_at(p, &name, "kernel %.*s is declared twice", (int)name.len,
				    name.text);
	if ((status = f8_text_next(p)) || (status = f8_text_expect_punct(p, ':')))
		return status;
	f8_kernel_family family;
	if (p->tok.kind != TOKEN_IDENT ||
	    !f8_kernel_family_from_name(p->tok.text, p->tok.len, &family)) {
		char families[256], what[300];
		snprintf(what, sizeof what, "a kernel family (%s)",
			 family_list(families, sizeof families));
		return f8_text_fail_expected(p, what);
	}
	const char *reason = "";
	if ((status = f8_text_next(p)) ||
	    (p->tok.kind == TOKEN_STRING && (status = f8_text_take_string(p, &reason))))
		return status;
	const char *copy = f8_arena_strndup(p->graph->arena, name.text, name.len);
	uint32_t index;
	if (!copy)
		return f8_diag_set(p->diag, F8_ERR_NOMEM, "out of memory");
	return f8_graph_add_group(p->graph, copy, family, reason, &index, p->diag);
}

static f8_status parse_meta(parser *p, f8_node *node) {
	token key = p->tok;
	f8_status status = f8_text_next(p);
	if (!status)
		status = f8_text_expect_punct(p, '=');
	if (status)
		return status;
#define KEY(word) (key.len == strlen(word) && memcmp(key.text, word, key.len) == 0)
	if (KEY("scope"))
		return f8_text_take_string(p, &node->scope);
	if (KEY("name"))
		return f8_text_take_string(p, &node->name);
	if (KEY("recompute"))
		return f8_text_take_string(p, &node->recompute);
	if (KEY("phase")) {
		if (p->tok.kind != TOKEN_IDENT || !f8_phase_from_name(p->tok.text, p->tok.len, &node->phase))
			return f8_text_fail_expected(p, "a phase (fwd, bwd, opt)");
		return f8_text_next(p);
	}
	if (KEY("loc")) {
		if ((status = f8_text_take_string(p, &node->location.file)))
			return status;
		if (text_at_punct(p, '[')) {
			if ((status = f8_text_next(p)))
				return status;
			if (p->tok.kind != TOKEN_INT || p->tok.i < 0 || p->tok.i >= F8_NONE)
				return f8_text_fail_expected(p, "a node index");
			node->location.index = (uint32_t)p->tok.i;
			if ((status = f8_text_next(p)))
				return status;
			return f8_text_expect_punct(p, ']');
		}
		uint32_t *fields[2] = {&node->location.line, &node->location.column};
		for (int i = 0; i < 2; i++) {
			if ((status = f8_text_expect_punct(p, ':')))
				return status;
			if (p->tok.kind != TOKEN_INT || p->tok.i < 1 || p->tok.i >= F8_NONE)
				return f8_text_fail_expected(p, i ? "a column number"
							       : "a line number");
			*fields[i] = (uint32_t)p->tok.i;
			if ((status = f8_text_next(p)))
				return status;
		}
		return F8_OK;
	}
	if (KEY("kernel"))
		return parse_kernel_use(p, node);
#undef KEY
	return f8_text_fail_at(p, &key, "unknown node field '%.*s' (scope, phase, recompute, name, "
			    "loc, kernel)", (int)key.len, key.text);
}

/* Appends to the scratch id list. */
static f8_status push_id(parser *p, f8_value_id id) {
	if (p->n_ids == MAX_LIST)
		return f8_text_fail_at(p, &p->tok, "more than %d operands or outputs", MAX_LIST);
	if (p->n_ids == p->cap_ids) {
		uint32_t cap = p->cap_ids ? p->cap_ids * 2 : 16;
		f8_value_id *grown = f8_realloc(p->ids, cap * sizeof *grown);
		if (!grown)
			return f8_diag_set(p->diag, F8_ERR_NOMEM, "out of memory");
		p->ids = grown;
		p->cap_ids = cap;
	}
	p->ids[p->n_ids++] = id;
	return F8_OK;
}

/* A use of a value: it must be defined above. */
static f8_status parse_use(parser *p, f8_value_id *out) {
	if (text_at_ident(p, "_")) { // an omitted optional input
		*out = F8_NONE;
		return f8_text_next(p);
	}
	if (p->tok.kind != TOKEN_VALUE)
		return f8_text_fail_expected(p, "a value (%name) or _");
	const char *name;
	f8_status status = f8_text_value_name(p, &p->tok, &name);
	if (status)
		return status;
	*out = f8_graph_find_value(p->graph, name, strlen(name));
	if (*out == F8_NONE)
		return f8_text_fail_at(p, &p->tok, "value %%%s is not defined before this use", name);
	return f8_text_next(p);
}

/* One output of a node as written, kept until the node (and so the value) exists. */
typedef struct output_def {
	token at;
	const char *name;
	f8_value scratch; // type and annotations as parsed
} output_def;

static f8_status parse_output_def(parser *p, output_def *def, bool is_leaf) {
	*def = (output_def){.at = p->tok,
			    .scratch = {.role = F8_ROLE_ACTIVATION,
					.precision = {.scaling_slot = F8_NONE},
					.buffer_offset = -1}};
	f8_status status = f8_text_value_name(p, &p->tok, &def->name);
	if (!status)
		status = f8_text_next(p);
	if (!status && text_at_punct(p, ':') && !(status = f8_text_next(p)))
		status = parse_type(p, &def->scratch.type);
	if (!status && text_at_punct(p, '<')) {
		status = f8_text_next(p);
		for (bool first = true; !status && !text_at_punct(p, '>'); first = false) {
			if (!first && (status = f8_text_expect_punct(p, ',')))
				break;
			status = parse_annotation(p, &def->scratch, is_leaf);
		}
		if (!status)
			status = f8_text_next(p);
	}
	return status;
}

/* Copies what was parsed for an output onto the value the node created. */
static void apply_output_def(f8_value *value, const output_def *def) {
	value->type = def->scratch.type;
	value->role = def->scratch.role;
	value->precision = def->scratch.precision;
	memcpy(value->placement, def->scratch.placement, sizeof value->placement);
	value->buffer_offset = def->scratch.buffer_offset;
	value->recompute = def->scratch.recompute;
}

/* The op name and operands of a node; the op in *op, the operands in p->ids. */
static f8_status parse_call(parser *p, bool has_outputs, f8_op *op) {
	token at = p->tok;
	if (at.kind != TOKEN_IDENT)
		return f8_text_fail_expected(p, has_outputs ? "an op name" : "a declaration, a node or '}'");
	if (!f8_op_from_name(at.text, at.len, op)) {
		f8_text_fail_at(p, &at, "unknown op '%.*s'", (int)at.len, at.text);
		f8_diag_hint(p->diag, "ops are spelled as in ONNX where ONNX has them (MatMul, Add, "
				      "LayerNorm, Quantize); ir/ops.def lists them all");
		return F8_ERR_PARSE;
	}
	f8_status status = f8_text_next(p);
	if (!status)
		status = f8_text_expect_punct(p, '(');
	p->n_ids = 0;
	while (!status && !text_at_punct(p, ')')) {
		f8_value_id id;
		if (p->n_ids && (status = f8_text_expect_punct(p, ',')))
			break;
		if (!(status = parse_use(p, &id)))
			status = push_id(p, id);
	}
	return status ? status : f8_text_next(p);
}

/* Whether the word `kernel` here is a node's `kernel=` field, not the declaration of the next
 * kernel (`kernel k1 : ...` on the next line): an '=' follows it. */
static bool at_kernel_field(const parser *p) {
	if (!text_at_ident(p, "kernel"))
		return false;
	const char *c = p->pos;
	while (c < p->end && (*c == ' ' || *c == '\t' || *c == '\r' || *c == '\n'))
		c++;
	return c < p->end && *c == '=';
}

/* One node: outputs (if any), op and operands, attributes, fields. */
static f8_status parse_node(parser *p) {
	token first = p->tok;
	output_def *outputs = NULL;
	uint32_t n_outputs = 0, cap_outputs = 0;
	f8_status status = F8_OK;
	while (!status && p->tok.kind == TOKEN_VALUE) {
		if (n_outputs == cap_outputs) {
			cap_outputs = cap_outputs ? cap_outputs * 2 : 4;
			if (cap_outputs > MAX_LIST) {
				status = f8_text_fail_at(p, &p->tok, "more than %d outputs", MAX_LIST);
				break;
			}
			output_def *grown = f8_realloc(outputs, cap_outputs * sizeof *grown);
			if (!grown) {
				status = f8_diag_set(p->diag, F8_ERR_NOMEM, "out of memory");
				break;
			}
			outputs = grown;
		}
		status = parse_output_def(p, &outputs[n_outputs++], false);
		if (!status && !text_at_punct(p, ','))
			break;
		if (!status && (status = f8_text_next(p)) == F8_OK && p->tok.kind != TOKEN_VALUE)
			status = f8_text_fail_expected(p, "another output (%name)");
	}
	if (!status && n_outputs)
		status = f8_text_expect_punct(p, '=');
	f8_op op = 0;
	if (!status)
		status = parse_call(p, n_outputs > 0, &op);
	const char **names = NULL;
	f8_node_id id = F8_NONE;
	if (!status && n_outputs &&
	    !(names = f8_arena_alloc_array(p->graph->arena, n_outputs, sizeof *names)))
		status = f8_diag_set(p->diag, F8_ERR_NOMEM, "out of memory");
	for (uint32_t i = 0; !status && i < n_outputs; i++) {
		names[i] = outputs[i].name;
		for (uint32_t j = 0; j < i; j++)
			if (strcmp(names[j], names[i]) == 0)
				status = f8_text_fail_at(p, &outputs[i].at, "value %%%s is defined twice", names[i]);
		if (!status && f8_graph_find_value(p->graph, names[i], strlen(names[i])) != F8_NONE)
			status = f8_text_fail_at(p, &outputs[i].at, "value %%%s is defined twice", names[i]);
	}
	if (!status)
		status = f8_graph_add_node(p->graph, op, p->ids, p->n_ids, n_outputs, names, &id, p->diag);
	for (uint32_t i = 0; !status && i < n_outputs; i++)
		apply_output_def(&p->graph->values[p->graph->nodes[id].outputs[i]], &outputs[i]);
	f8_free(outputs);
	if (status)
		return status;
	p->graph->nodes[id].text_line = first.line;
	if (text_at_punct(p, '{') && (status = parse_attrs(p, id)))
		return status;
	while (!status && (text_at_ident(p, "scope") || text_at_ident(p, "phase") ||
			   text_at_ident(p, "recompute") || text_at_ident(p, "name") ||
			   text_at_ident(p, "loc") ||
			   at_kernel_field(p)))
		status = parse_meta(p, &p->graph->nodes[id]);
	return status;
}

/* A leaf declaration: ROLE %name : type annotations? */
static f8_status parse_leaf(parser *p, f8_role role) {
	f8_status status = f8_text_next(p);
	if (status)
		return status;
	if (p->tok.kind != TOKEN_VALUE)
		return f8_text_fail_expected(p, "a value name (%name)");
	output_def def;
	token at = p->tok;
	if ((status = parse_output_def(p, &def, true)))
		return status;
	if (def.scratch.type.dtype == F8_DTYPE_UNDEFINED)
		return f8_text_fail_at(p, &at, "input %%%s needs a type (: f32[...])", def.name);
	if (f8_graph_find_value(p->graph, def.name, strlen(def.name)) != F8_NONE)
		return f8_text_fail_at(p, &at, "value %%%s is defined twice", def.name);
	f8_value_id id;
	if ((status = f8_graph_add_input(p->graph, def.name, role, &def.scratch.type, &id, p->diag)))
		return status;
	def.scratch.role = role;
	apply_output_def(&p->graph->values[id], &def);
	return F8_OK;
}

static f8_status parse_outputs(parser *p) {
	f8_status status = f8_text_next(p);
	for (bool first = true; !status; first = false) {
		if (!first && !text_at_punct(p, ','))
			break;
		if (!first && (status = f8_text_next(p)))
			break;
		f8_value_id id;
		token at = p->tok;
		if ((status = parse_use(p, &id)))
			break;
		if (id == F8_NONE)
			return f8_text_fail_at(p, &at, "a graph output cannot be omitted");
		if (f8_graph_add_output(p->graph, id))
			return f8_diag_set(p->diag, F8_ERR_NOMEM, "out of memory");
	}
	return status;
}

static f8_status parse_update(parser *p) {
	f8_value_id target, source;
	token at = p->tok;
	f8_status status = f8_text_next(p);
	if (!status)
		status = parse_use(p, &target);
	if (!status && !text_at_punct(p, '<'))
		status = f8_text_fail_expected(p, "'<-' after the updated leaf");
	if (!status && !(status = f8_text_next(p)) && !text_at_punct(p, '-'))
		status = f8_text_fail_expected(p, "'<-' after the updated leaf");
	if (!status && !(status = f8_text_next(p)))
		status = parse_use(p, &source);
	if (status)
		return status;
	if (target == F8_NONE || source == F8_NONE)
		return f8_text_fail_at(p, &at, "an update needs a leaf and a value, neither omitted");
	if (f8_graph_add_update(p->graph, target, source))
		return f8_diag_set(p->diag, F8_ERR_NOMEM, "out of memory");
	return F8_OK;
}

/* mesh tp=2, dp=4: the sizes of the axes named (the others keep 1), once a graph. */
static f8_status parse_mesh(parser *p) {
	token at = p->tok;
	for (int axis = 0; axis < F8_MESH_AXIS_COUNT; axis++)
		if (p->graph->mesh[axis])
			return f8_text_fail_at(p, &at, "the graph's mesh is given twice");
	f8_status status = f8_text_next(p);
	do {
		if (!status && text_at_punct(p, ','))
			status = f8_text_next(p);
		f8_mesh_axis axis;
		if (!status && (p->tok.kind != TOKEN_IDENT ||
				!f8_mesh_axis_from_name(p->tok.text, p->tok.len, &axis)))
			status = f8_text_fail_expected(p, "a mesh axis (tp, cp, ep, dp, pp)");
		if (!status && p->graph->mesh[axis])
			status = f8_text_fail_at(p, &p->tok, "mesh axis %s is given twice",
						 f8_mesh_axis_name(axis));
		if (!status && !(status = f8_text_next(p)))
			status = f8_text_expect_punct(p, '=');
		if (!status && (p->tok.kind != TOKEN_INT || p->tok.i < 1 || p->tok.i > 1 << 20))
			status = f8_text_fail_expected(p, "the axis's ranks (1 to 1048576)");
		if (!status) {
			p->graph->mesh[axis] = (uint32_t)p->tok.i;
			status = f8_text_next(p);
		}
	} while (!status && text_at_punct(p, ','));
	return status;
}

static f8_status parse_graph(parser *p) {
	f8_status status = f8_text_next(p);
	if (status)
		return status;
	if (!text_at_ident(p, "graph"))
		return f8_text_fail_expected(p, "'graph'");
	const char *name;
	if ((status = f8_text_take_graph_name(p, &name)))
		return status;
	p->graph->name = name;
	if ((status = f8_text_next(p)) || (status = f8_text_expect_punct(p, '{')))
		return status;
	while (!status && !text_at_punct(p, '}')) {
		f8_role role;
		if (p->tok.kind == TOKEN_IDENT && f8_role_from_name(p->tok.text, p->tok.len, &role) &&
		    f8_role_is_leaf(role))
			status = parse_leaf(p, role);
		else if (text_at_ident(p, "output"))
			status = parse_outputs(p);
		else if (text_at_ident(p, "update"))
			status = parse_update(p);
		else if (text_at_ident(p, "kernel"))
			status = parse_kernel(p);
		else if (text_at_ident(p, "mesh"))
			status = parse_mesh(p);
		else if (p->tok.kind == TOKEN_END)
			status = f8_text_fail_expected(p, "'}' to close the graph");
		else
			status = parse_node(p);
	}
	if (!status && !(status = f8_text_next(p)) && p->tok.kind != TOKEN_END)
		status = f8_text_fail_expected(p, "the end of the input after the graph");
	return status;
}

f8_status f8_text_parse(const char *text, size_t len, const char *file, f8_graph **out,
			f8_diag *diag) {
	*out = NULL;
	parser p = {.file = file, .text = text, .end = text + len, .pos = text, .line_start = text,
		    .line = 1, .diag = diag};
	if (f8_graph_create("", &p.graph))
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	if (file && !(p.graph->text_file = f8_arena_strdup(p.graph->arena, file))) {
		f8_graph_destroy(p.graph);
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	}
	f8_status status = parse_graph(&p);
	f8_free(p.ids);
	if (status) {
		f8_graph_destroy(p.graph);
		return status;
	}
	*out = p.graph;
	return F8_OK;
}

f8_status f8_text_parse_dim(f8_graph *graph, const char *text, f8_dim *out, f8_diag *diag) {
	parser p = {.file = NULL, .text = text, .end = text + strlen(text), .pos = text,
		    .line_start = text, .line = 1, .graph = graph, .diag = diag};
	uint32_t symbols = graph->n_symbols;
	f8_status status = f8_text_next(&p);
	if (!status)
		status = parse_dim(&p, out);
	if (!status && p.tok.kind != TOKEN_END)
		status = f8_text_fail_expected(&p, "the end of the dimension");
	if (!status && graph->n_symbols != symbols) {
		graph->n_symbols = symbols; // interned by the parse, used nowhere
		status = f8_diag_set(diag, F8_ERR_PARSE, "dimension '%s' names a size the graph "
				     "does not have", text);
	}
	return status;
}

f8_status f8_text_parse_file(const char *path, f8_graph **out, f8_diag *diag) {
	*out = NULL;
	FILE *file = fopen(path, "rb");
	if (!file) {
		f8_diag_at(diag, path, 0, 0, NULL, 0);
		return f8_diag_set(diag, F8_ERR_IO, "cannot open: %s", strerror(errno));
	}
	char *text = NULL;
	size_t len = 0, cap = 0;
	f8_status status = F8_OK;
	for (;;) {
		if (len == cap) {
			cap = cap ? cap * 2 : 1 << 16;
			char *grown = cap <= MAX_FILE_BYTES ? f8_realloc(text, cap) : NULL;
			if (!grown) {
				status = cap > MAX_FILE_BYTES
						 ? f8_diag_set(diag, F8_ERR_ARGUMENT, "file larger than %d bytes",
							       MAX_FILE_BYTES)
						 : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory reading it");
				break;
			}
			text = grown;
		}
		size_t got = fread(text + len, 1, cap - len, file);
		len += got;
		if (got == 0) {
			if (ferror(file))
				status = f8_diag_set(diag, F8_ERR_IO, "read error");
			break;
		}
	}
	fclose(file);
	if (!status)
		status = f8_text_parse(text, len, path, out, diag);
	else
		f8_diag_at(diag, path, 0, 0, NULL, 0);
	f8_free(text);
	return status;
}
