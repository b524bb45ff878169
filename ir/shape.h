/*
 * Dimensions and shapes, with symbolic sizes.
 *
 * A dimension is a monomial: an integer factor times a product of symbols (`768`, `seq`,
 * `batch*seq`, `3*heads`). Monomials are closed under the products and exact quotients that
 * Reshape, MatMul, Split and friends need, and two of them are equal exactly when their factors
 * and symbol multisets are, so shapes compare without a solver. Symbols are interned per graph
 * (f8_graph_intern_symbol); a dimension holds their ids, sorted.
 */
#ifndef F8_IR_SHAPE_H
#define F8_IR_SHAPE_H

#include <stdbool.h> // bool
#include <stdint.h>  // int64_t, uint8_t, uint16_t

#include "ir/dtype.h" // f8_dtype

enum {
	F8_MAX_RANK = 8,         // the most dimensions a tensor may have
	F8_DIM_MAX_SYMBOLS = 4,  // the most symbols in one dimension's product
};

typedef struct f8_dim {
	int64_t factor;                        // the constant factor; the whole size without symbols
	uint8_t n_symbols;
	uint16_t symbols[F8_DIM_MAX_SYMBOLS];  // symbol ids, ascending (repeats allowed: seq*seq)
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
	return (f8_dim){.factor = value};
}

static inline f8_dim f8_dim_symbol(uint16_t symbol) {
	return (f8_dim){.factor = 1, .n_symbols = 1, .symbols = {symbol}};
}

static inline bool f8_dim_is_const(f8_dim dim) {
	return dim.n_symbols == 0;
}

bool f8_dim_equal(f8_dim a, f8_dim b);

/* a * b into *out; false when the factor overflows or the product has too many symbols. */
bool f8_dim_mul(f8_dim a, f8_dim b, f8_dim *out);

/* a / b into *out when b divides a exactly (factor and symbols); false otherwise. */
bool f8_dim_div(f8_dim a, f8_dim b, f8_dim *out);

/* a + b into *out when both have the same symbols (so 2*seq + seq = 3*seq); false otherwise. */
bool f8_dim_add(f8_dim a, f8_dim b, f8_dim *out);

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

#endif
