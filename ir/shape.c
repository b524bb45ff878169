/*
 * Arithmetic on symbolic dimensions (polynomials in the symbols) and shapes.
 */
#include "ir/shape.h" // f8_dim, f8_shape

/* Orders terms canonically: more symbols first, then by symbol ids; < 0, 0 or > 0. */
static int term_order(const f8_dim_term *a, const f8_dim_term *b) {
	if (a->n_symbols != b->n_symbols)
		return a->n_symbols > b->n_symbols ? -1 : 1;
	for (int i = 0; i < a->n_symbols; i++)
		if (a->symbols[i] != b->symbols[i])
			return a->symbols[i] < b->symbols[i] ? -1 : 1;
	return 0;
}

/*
 * Accumulates terms into a canonical dim: like terms merge, zero sums vanish, the rest stay
 * sorted. It holds as many terms as a product of two dims can have before merging, so terms
 * that cancel later still count; whether the result fits a dim is decided at the end.
 */
enum { BUILDER_TERMS = F8_DIM_MAX_TERMS * F8_DIM_MAX_TERMS };

typedef struct dim_builder {
	f8_dim_term terms[BUILDER_TERMS];
	int n_terms;
	bool ok; // false once a coefficient overflowed or the scratch ran out
} dim_builder;

static void builder_add(dim_builder *b, f8_dim_term term) {
	if (!b->ok || term.coefficient == 0)
		return;
	int i = 0;
	while (i < b->n_terms && term_order(&b->terms[i], &term) < 0)
		i++;
	if (i < b->n_terms && term_order(&b->terms[i], &term) == 0) {
		if (__builtin_add_overflow(b->terms[i].coefficient, term.coefficient,
					   &b->terms[i].coefficient)) {
			b->ok = false;
		} else if (b->terms[i].coefficient == 0) {
			for (int j = i; j + 1 < b->n_terms; j++)
				b->terms[j] = b->terms[j + 1];
			b->n_terms--;
		}
		return;
	}
	if (b->n_terms == BUILDER_TERMS) {
		b->ok = false;
		return;
	}
	for (int j = b->n_terms; j > i; j--)
		b->terms[j] = b->terms[j - 1];
	b->terms[i] = term;
	b->n_terms++;
}

/* Starts a builder holding `dim`'s terms. */
static dim_builder builder_from(f8_dim dim) {
	dim_builder b = {.n_terms = dim.n_terms, .ok = true};
	for (int i = 0; i < dim.n_terms; i++)
		b.terms[i] = dim.terms[i];
	return b;
}

static bool builder_finish(const dim_builder *b, f8_dim *out) {
	if (!b->ok || b->n_terms > F8_DIM_MAX_TERMS)
		return false;
	f8_dim dim = {.n_terms = (uint8_t)b->n_terms};
	for (int i = 0; i < b->n_terms; i++)
		dim.terms[i] = b->terms[i];
	*out = dim;
	return true;
}

bool f8_dim_equal(f8_dim a, f8_dim b) {
	if (a.n_terms != b.n_terms)
		return false;
	for (int i = 0; i < a.n_terms; i++)
		if (a.terms[i].coefficient != b.terms[i].coefficient ||
		    term_order(&a.terms[i], &b.terms[i]) != 0)
			return false;
	return true;
}

static bool add_scaled(f8_dim a, f8_dim b, int64_t sign, f8_dim *out) {
	dim_builder sum = builder_from(a);
	for (int i = 0; i < b.n_terms; i++) {
		f8_dim_term term = b.terms[i];
		if (__builtin_mul_overflow(term.coefficient, sign, &term.coefficient))
			return false;
		builder_add(&sum, term);
	}
	return builder_finish(&sum, out);
}

bool f8_dim_add(f8_dim a, f8_dim b, f8_dim *out) {
	return add_scaled(a, b, 1, out);
}

bool f8_dim_sub(f8_dim a, f8_dim b, f8_dim *out) {
	return add_scaled(a, b, -1, out);
}

/* a * b of two terms: coefficients multiply, the ascending symbol lists merge. */
static bool term_mul(const f8_dim_term *a, const f8_dim_term *b, f8_dim_term *out) {
	f8_dim_term product = {0};
	if (__builtin_mul_overflow(a->coefficient, b->coefficient, &product.coefficient))
		return false;
	if (a->n_symbols + b->n_symbols > F8_DIM_MAX_SYMBOLS)
		return false;
	int i = 0, j = 0;
	while (i < a->n_symbols || j < b->n_symbols) {
		bool take_a = j == b->n_symbols || (i < a->n_symbols && a->symbols[i] <= b->symbols[j]);
		product.symbols[product.n_symbols++] = take_a ? a->symbols[i++] : b->symbols[j++];
	}
	*out = product;
	return true;
}

bool f8_dim_mul(f8_dim a, f8_dim b, f8_dim *out) {
	dim_builder product = {.ok = true};
	for (int i = 0; i < a.n_terms; i++) {
		for (int j = 0; j < b.n_terms; j++) {
			f8_dim_term term;
			if (!term_mul(&a.terms[i], &b.terms[j], &term))
				return false;
			builder_add(&product, term);
		}
	}
	return builder_finish(&product, out);
}

/* a / b of two terms when b divides a: the coefficient divides and b's symbols are all in a. */
static bool term_div(const f8_dim_term *a, const f8_dim_term *b, f8_dim_term *out) {
	if (b->coefficient == 0 || (a->coefficient == INT64_MIN && b->coefficient == -1) ||
	    a->coefficient % b->coefficient != 0)
		return false; // INT64_MIN / -1 does not fit (and traps)
	f8_dim_term quotient = {.coefficient = a->coefficient / b->coefficient};
	int j = 0;
	for (int i = 0; i < a->n_symbols; i++) {
		if (j < b->n_symbols && a->symbols[i] == b->symbols[j])
			j++;
		else
			quotient.symbols[quotient.n_symbols++] = a->symbols[i];
	}
	if (j != b->n_symbols)
		return false;
	*out = quotient;
	return true;
}

bool f8_dim_div(f8_dim a, f8_dim b, f8_dim *out) {
	if (b.n_terms == 0)
		return false;
	if (b.n_terms == 1) {
		// Division by a monomial: every term of a must be divisible by it.
		dim_builder quotient = {.ok = true};
		for (int i = 0; i < a.n_terms; i++) {
			f8_dim_term term;
			if (!term_div(&a.terms[i], &b.terms[0], &term))
				return false;
			builder_add(&quotient, term);
		}
		return builder_finish(&quotient, out);
	}
	// A sum as divisor: only a monomial multiple of it, found by dividing the leading terms
	// (both canonical, so their leading terms correspond) and checking the product.
	f8_dim_term lead;
	f8_dim candidate, check;
	if (a.n_terms == 0 || !term_div(&a.terms[0], &b.terms[0], &lead))
		return false;
	candidate = (f8_dim){.n_terms = 1, .terms = {lead}};
	if (!f8_dim_mul(candidate, b, &check) || !f8_dim_equal(check, a))
		return false;
	*out = candidate;
	return true;
}

bool f8_dim_proven_le(f8_dim a, f8_dim b) {
	f8_dim difference;
	if (!f8_dim_sub(b, a, &difference))
		return false;
	int64_t total = 0;
	for (int i = 0; i < difference.n_terms; i++) {
		const f8_dim_term *term = &difference.terms[i];
		if (term->n_symbols > 0 && term->coefficient < 0)
			return false;
		if (__builtin_add_overflow(total, term->coefficient, &total))
			return false;
	}
	return total >= 0;
}

bool f8_dim_evaluate(f8_dim dim, const int64_t *symbol_values, int64_t *out) {
	int64_t value = 0;
	for (uint8_t t = 0; t < dim.n_terms; t++) {
		int64_t term = dim.terms[t].coefficient;
		for (uint8_t s = 0; s < dim.terms[t].n_symbols; s++)
			if (__builtin_mul_overflow(term, symbol_values[dim.terms[t].symbols[s]], &term))
				return false;
		if (__builtin_add_overflow(value, term, &value))
			return false;
	}
	*out = value;
	return true;
}

bool f8_dim_substitute(f8_dim dim, uint16_t symbol, int64_t value, f8_dim *out) {
	dim_builder result = {.ok = true};
	for (int t = 0; t < dim.n_terms; t++) {
		f8_dim_term term = dim.terms[t], kept = {.coefficient = term.coefficient};
		for (int i = 0; i < term.n_symbols; i++) {
			if (term.symbols[i] != symbol)
				kept.symbols[kept.n_symbols++] = term.symbols[i];
			else if (__builtin_mul_overflow(kept.coefficient, value, &kept.coefficient))
				return false;
		}
		builder_add(&result, kept);
	}
	return builder_finish(&result, out);
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

/* `value`, negative from the end of `size`, clamped into [low, high]. */
static int64_t clamp_bound(int64_t value, int64_t size, int64_t low, int64_t high) {
	if (value < 0)
		value += size;
	return value < low ? low : value > high ? high : value;
}

int64_t f8_slice_clamp(int64_t size, int64_t *start, int64_t *end, int64_t step) {
	if (step > 0) {
		*start = clamp_bound(*start, size, 0, size);
		*end = clamp_bound(*end, size, 0, size);
		return *end > *start ? (*end - *start + step - 1) / step : 0;
	}
	*start = clamp_bound(*start, size, 0, size - 1);
	*end = clamp_bound(*end, size, -1, size - 1);
	return *start > *end ? (*start - *end - step - 1) / -step : 0;
}
