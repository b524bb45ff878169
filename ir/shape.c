/*
 * Arithmetic on symbolic dimensions (monomials) and shapes.
 */
#include "ir/shape.h" // f8_dim, f8_shape

static bool factor_mul(int64_t a, int64_t b, int64_t *out) {
	return !__builtin_mul_overflow(a, b, out);
}

static bool same_symbols(f8_dim a, f8_dim b) {
	if (a.n_symbols != b.n_symbols)
		return false;
	for (int i = 0; i < a.n_symbols; i++)
		if (a.symbols[i] != b.symbols[i])
			return false;
	return true;
}

bool f8_dim_equal(f8_dim a, f8_dim b) {
	return a.factor == b.factor && same_symbols(a, b);
}

bool f8_dim_mul(f8_dim a, f8_dim b, f8_dim *out) {
	f8_dim product = {0};
	if (!factor_mul(a.factor, b.factor, &product.factor))
		return false;
	if (product.factor == 0) { // 0 * seq is 0 whatever seq is
		*out = product;
		return true;
	}
	if (a.n_symbols + b.n_symbols > F8_DIM_MAX_SYMBOLS)
		return false;
	// Merge the two ascending lists.
	int i = 0, j = 0;
	while (i < a.n_symbols || j < b.n_symbols) {
		bool take_a = j == b.n_symbols || (i < a.n_symbols && a.symbols[i] <= b.symbols[j]);
		product.symbols[product.n_symbols++] = take_a ? a.symbols[i++] : b.symbols[j++];
	}
	*out = product;
	return true;
}

bool f8_dim_div(f8_dim a, f8_dim b, f8_dim *out) {
	if (b.factor == 0 || a.factor % b.factor != 0)
		return false;
	f8_dim quotient = {.factor = a.factor / b.factor};
	// Remove each symbol of b from a once; every one must be there.
	int j = 0;
	for (int i = 0; i < a.n_symbols; i++) {
		if (j < b.n_symbols && a.symbols[i] == b.symbols[j])
			j++;
		else
			quotient.symbols[quotient.n_symbols++] = a.symbols[i];
	}
	if (j != b.n_symbols)
		return false;
	*out = quotient;
	return true;
}

bool f8_dim_add(f8_dim a, f8_dim b, f8_dim *out) {
	if (a.factor == 0) {
		*out = b;
		return true;
	}
	if (b.factor == 0) {
		*out = a;
		return true;
	}
	f8_dim sum = a;
	if (!same_symbols(a, b) || __builtin_add_overflow(a.factor, b.factor, &sum.factor))
		return false;
	*out = sum;
	return true;
}

bool f8_shape_numel(const f8_shape *shape, f8_dim *out) {
	f8_dim numel = f8_dim_const(1);
	for (int i = 0; i < shape->rank; i++)
		if (!f8_dim_mul(numel, shape->dims[i], &numel))
			return false;
	*out = numel;
	return true;
}

bool f8_shape_equal(const f8_shape *a, const f8_shape *b) {
	if (a->rank != b->rank)
		return false;
	for (int i = 0; i < a->rank; i++)
		if (!f8_dim_equal(a->dims[i], b->dims[i]))
			return false;
	return true;
}

bool f8_axis_normalize(int64_t axis, int rank, bool allow_end, int *out) {
	int64_t limit = allow_end ? rank + 1 : rank;
	if (axis < 0)
		axis += limit;
	if (axis < 0 || axis >= limit)
		return false;
	*out = (int)axis;
	return true;
}
