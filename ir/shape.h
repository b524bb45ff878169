/*
 * Dimensions and shapes, with symbolic sizes.
 *
 * A dimension is a small polynomial in the graph's symbols with integer coefficients: `768`,
 * `seq`, `batch*seq`, `3*heads`, and the off-by-ones that exporters write (`seq+1` for a
 * position table shifted by one, `seq-1` for the labels of a shifted sequence). Dims are kept in
 * a canonical form (terms merged and sorted, no zero coefficients), so two dims are equal exactly
 * when their forms are, and shapes compare without a solver. Symbols stand for sizes, so they are
 * at least 1; that is what f8_dim_proven_le reasons with. Symbols are interned per graph
 * (f8_graph_intern_symbol); a term holds their ids, sorted.
 */
#ifndef F8_IR_SHAPE_H
#define F8_IR_SHAPE_H

#include <stdbool.h> // bool
#include <stdint.h>  // int64_t, uint8_t, uint16_t

#include "ir/dtype.h" // f8_dtype

enum {
	F8_MAX_RANK = 8,         // the most dimensions a tensor may have
	F8_DIM_MAX_TERMS = 3,    // the most terms in one dimension's sum
	F8_DIM_MAX_SYMBOLS = 4,  // the most symbols in one term's product
};

/* coefficient * product of symbols; a term without symbols is the constant term. */
typedef struct f8_dim_term {
	int64_t coefficient;                   // never 0 in a canonical dim
	uint8_t n_symbols;
	uint16_t symbols[F8_DIM_MAX_SYMBOLS];  // symbol ids, ascending (repeats allowed: seq*seq)
} f8_dim_term;

/* The sum of its terms, in canonical order: more symbols first, then by symbol ids, the
 * constant term last. No terms at all is the dimension 0. */
typedef struct f8_dim {
	uint8_t n_terms;
	f8_dim_term terms[F8_DIM_MAX_TERMS];
} f8_dim;

typedef struct f8_shape {
	uint8_t rank;
	f8_dim dims[F8_MAX_RANK];
} f8_shape;

/* The type of a value: element type and shape. dtype UNDEFINED means "not inferred yet". */
typedef struct f8_type {
	f8_dtype dtype;
	f8_shape shape;
} f8_type;

static inline f8_dim f8_dim_const(int64_t value) {
	return value ? (f8_dim){.n_terms = 1, .terms = {{.coefficient = value}}} : (f8_dim){0};
}

static inline f8_dim f8_dim_symbol(uint16_t symbol) {
	return (f8_dim){.n_terms = 1,
			.terms = {{.coefficient = 1, .n_symbols = 1, .symbols = {symbol}}}};
}

static inline bool f8_dim_is_const(f8_dim dim) {
	return dim.n_terms == 0 || (dim.n_terms == 1 && dim.terms[0].n_symbols == 0);
}

/* The value of a constant dim (f8_dim_is_const). */
static inline int64_t f8_dim_value(f8_dim dim) {
	return dim.n_terms ? dim.terms[0].coefficient : 0;
}

bool f8_dim_equal(f8_dim a, f8_dim b);

/*
 * Arithmetic into *out. Each returns false, leaving *out alone, when the result does not fit
 * the form (a coefficient overflows, more than F8_DIM_MAX_TERMS terms or F8_DIM_MAX_SYMBOLS
 * symbols in a term) or, for f8_dim_div, when b does not divide a exactly.
 */
bool f8_dim_add(f8_dim a, f8_dim b, f8_dim *out);
bool f8_dim_sub(f8_dim a, f8_dim b, f8_dim *out);
bool f8_dim_mul(f8_dim a, f8_dim b, f8_dim *out);
bool f8_dim_div(f8_dim a, f8_dim b, f8_dim *out);

/*
 * True when a <= b holds for every value of the symbols (each at least 1): every term of b - a
 * that has symbols has a coefficient >= 0, and the coefficients sum to >= 0. False means "not
 * proven", not "greater".
 */
bool f8_dim_proven_le(f8_dim a, f8_dim b);

/* dim with `symbol` replaced by `value` into *out; false when a coefficient overflows. */
bool f8_dim_substitute(f8_dim dim, uint16_t symbol, int64_t value, f8_dim *out);

/* True when dim is one symbol alone (`seq`, not `2*seq` or `seq+1`), its id in *symbol. */
static inline bool f8_dim_is_symbol(f8_dim dim, uint16_t *symbol) {
	if (dim.n_terms != 1 || dim.terms[0].n_symbols != 1 || dim.terms[0].coefficient != 1)
		return false;
	*symbol = dim.terms[0].symbols[0];
	return true;
}

/* The value of dim with symbol s worth symbol_values[s], into *out; false when it overflows. */
bool f8_dim_evaluate(f8_dim dim, const int64_t *symbol_values, int64_t *out);

/* True when dim >= 0 for every value of the symbols: a size it is safe to allocate by. */
static inline bool f8_dim_proven_nonnegative(f8_dim dim) {
	return f8_dim_proven_le((f8_dim){0}, dim);
}

/* The product of all dims of `shape` (the element count) into *out; false on overflow. */
bool f8_shape_numel(const f8_shape *shape, f8_dim *out);

bool f8_shape_equal(const f8_shape *a, const f8_shape *b);

static inline bool f8_type_equal(const f8_type *a, const f8_type *b) {
	return a->dtype == b->dtype && f8_shape_equal(&a->shape, &b->shape);
}

/*
 * Normalizes a possibly negative axis against `rank` (ONNX convention: -1 is the last).
 * Returns false when it is out of range. `allow_end` accepts `rank` itself (for Unsqueeze-like
 * insert positions).
 */
bool f8_axis_normalize(int64_t axis, int rank, bool allow_end, int *out);

/*
 * x[start:end:step] along an axis of `size`, by ONNX's Slice rules: a negative bound counts
 * from the end, then both clamp, to [0, size] for a positive step and to [0, size - 1] (start)
 * and [-1, size - 1] (end) for a negative one. *start and *end are clamped in place; returns
 * the number of elements. `step` is not 0. Shape inference, the reference kernel and the
 * executor's check of sizes bound at run time all count a Slice by it.
 */
int64_t f8_slice_clamp(int64_t size, int64_t *start, int64_t *end, int64_t step);

/* One `--dim name=N`: the symbolic size `name` is N in this run. */
typedef struct f8_dim_binding {
	const char *name;
	int64_t value;
} f8_dim_binding;

#endif
