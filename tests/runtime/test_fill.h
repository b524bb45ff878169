/*
 * Random test inputs the runtime's C tests share: a seeded generator (splitmix64, the same
 * sequence everywhere for a seed) and fills of a tensor by a short spec, so that each test case
 * says in one string what its leaves hold. Header-only, like tests/test_support.h: each test is
 * one executable of its own.
 */
#ifndef F8_TESTS_RUNTIME_TEST_FILL_H
#define F8_TESTS_RUNTIME_TEST_FILL_H

#include <stdbool.h> // bool
#include <math.h>    // ldexp
#include <stdint.h>  // uint64_t, int64_t
#include <stdio.h>   // snprintf, sscanf
#include <stdlib.h>  // strtod, strtoll, malloc, free
#include <string.h>  // strlen, strncmp, strcmp, strcspn, strchr

#include "runtime/tensor.h" // f8_rt_tensor, f8_rt_tensor_get, f8_rt_tensor_set

static uint64_t rng_state; // the seed; set it before filling

static inline uint64_t rng_next(void) {
	uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static inline double rng_uniform(double low, double high) {
	return low + (high - low) * (double)(rng_next() >> 11) * 0x1.0p-53;
}

static inline int64_t rng_int(int64_t low, int64_t high) {
	return low + (int64_t)(rng_next() % (uint64_t)(high - low + 1));
}

/* The value of `name` in a space-separated "name=value" list, into `out`; "" if absent. */
static inline void test_find_spec(const char *list, const char *name, char *out, size_t size) {
	size_t len = strlen(name);
	out[0] = '\0';
	for (const char *p = list; p && *p; p = strchr(p, ' ') ? strchr(p, ' ') + 1 : NULL) {
		size_t n = strcspn(p, " ");
		if (n > len && strncmp(p, name, len) == 0 && p[len] == '=') {
			snprintf(out, size, "%.*s", (int)(n - len - 1), p + len + 1);
			return;
		}
	}
}

/* Each row (last dim) gets distinct experts in [0, experts), as a Router's top-k does. */
static inline void test_fill_topk(f8_rt_tensor *t, int64_t experts) {
	int64_t k = t->dims[t->rank - 1], rows = f8_rt_tensor_numel(t) / k;
	for (int64_t r = 0; r < rows; r++) {
		for (int64_t j = 0; j < k; j++) {
			int64_t e;
			bool taken;
			do {
				e = rng_int(0, experts - 1);
				taken = false;
				for (int64_t i = 0; i < j; i++)
					taken |= (int64_t)f8_rt_tensor_get(t, r * k + i) == e;
			} while (taken);
			f8_rt_tensor_set(t, r * k + j, (double)e);
		}
	}
}

/* Values spread over [-1.5, 1.5] in random order, no two within 2.4 / n: no near-ties for a
 * top-k under small perturbations. */
static inline void test_fill_spaced(f8_rt_tensor *t) {
	int64_t n = f8_rt_tensor_numel(t);
	for (int64_t i = 0; i < n; i++) {
		double slot = (double)i + rng_uniform(0.4, 0.6);
		f8_rt_tensor_set(t, i, -1.5 + 3.0 * slot / (double)n);
	}
	for (int64_t i = n - 1; i > 0; i--) {
		int64_t j = rng_int(0, i);
		double swap = f8_rt_tensor_get(t, i);
		f8_rt_tensor_set(t, i, f8_rt_tensor_get(t, j));
		f8_rt_tensor_set(t, j, swap);
	}
}

/*
 * Signed values (|x| in [0.3, 1.5]) times 2^(r + c + b), integers in [-E, E] drawn per row (r),
 * per column (c) and per 128 x 128 tile (b) of the last two dims: rows, columns, 1 x 128 and
 * 128 x 128 blocks each have amaxes of their own, so a per-row or per-block scale read for
 * another row or block cannot pass as it could on inputs of one magnitude.
 */
static inline bool test_fill_graded(f8_rt_tensor *t, int64_t e) {
	int64_t cols = t->rank ? t->dims[t->rank - 1] : 1;
	int64_t rows = t->rank > 1 ? t->dims[t->rank - 2] : 1;
	int64_t n = f8_rt_tensor_numel(t), tiles_across = (cols + 127) / 128;
	int64_t tiles = ((rows + 127) / 128) * tiles_across, count = rows + cols + tiles;
	int64_t *exponent = malloc((size_t)count * sizeof *exponent);
	if (!exponent) {
		printf("FAIL out of memory filling a graded tensor\n");
		return false;
	}
	for (int64_t i = 0; i < count; i++)
		exponent[i] = rng_int(-e, e);
	for (int64_t i = 0; i < n; i++) {
		int64_t r = (i / cols) % rows, c = i % cols;
		int64_t tile = (r / 128) * tiles_across + c / 128;
		int64_t power = exponent[r] + exponent[rows + c] + exponent[rows + cols + tile];
		double x = (rng_next() & 1 ? 1 : -1) * rng_uniform(0.3, 1.5);
		f8_rt_tensor_set(t, i, ldexp(x, (int)power));
	}
	free(exponent);
	return true;
}

/*
 * Fills `t` by `spec`: uniform:A:B, positive (uniform [0.5, 2]), signed (|x| in [0.3, 1.5],
 * either sign: away from zero and from kinks), int:A:B, labels:V:IGNORE (in [0, V), a quarter
 * IGNORE, never the first), counts:R (non-negative, summing to R), list:A,B,... (the values),
 * topk:E (distinct experts per row), graded:E (test_fill_graded), spaced, bool[:P] (true with probability P, 0.5 by
 * default), boolrow:P (the same with the first row all false); "" means `fallback`, another
 * spec. False for a spec it does not know.
 */
static inline bool test_fill(f8_rt_tensor *t, const char *spec, const char *fallback) {
	int64_t n = f8_rt_tensor_numel(t), row = t->rank ? t->dims[t->rank - 1] : 1;
	double a = 0, b = 0;
	if (spec[0] == '\0')
		spec = fallback;
	if (strncmp(spec, "topk:", 5) == 0) {
		test_fill_topk(t, strtoll(spec + 5, NULL, 10));
	} else if (strncmp(spec, "graded:", 7) == 0) {
		return test_fill_graded(t, strtoll(spec + 7, NULL, 10));
	} else if (strcmp(spec, "spaced") == 0) {
		test_fill_spaced(t);
	} else if (strncmp(spec, "list:", 5) == 0) {
		const char *p = spec + 5;
		for (int64_t i = 0; i < n; i++, p = strchr(p, ',') ? strchr(p, ',') + 1 : p)
			f8_rt_tensor_set(t, i, strtod(p, NULL));
	} else if (strncmp(spec, "counts:", 7) == 0) {
		int64_t left = strtoll(spec + 7, NULL, 10);
		for (int64_t i = 0; i < n; i++) {
			int64_t c = i == n - 1 ? left : rng_int(0, left);
			f8_rt_tensor_set(t, i, (double)c);
			left -= c;
		}
	} else if (sscanf(spec, "labels:%lf:%lf", &a, &b) == 2) {
		for (int64_t i = 0; i < n; i++)
			f8_rt_tensor_set(t, i, i > 0 && rng_next() % 4 == 0
						       ? b : (double)rng_int(0, (int64_t)a - 1));
	} else if (sscanf(spec, "int:%lf:%lf", &a, &b) == 2) {
		for (int64_t i = 0; i < n; i++)
			f8_rt_tensor_set(t, i, (double)rng_int((int64_t)a, (int64_t)b));
	} else if (strncmp(spec, "bool", 4) == 0) {
		bool first_row_false = strncmp(spec, "boolrow", 7) == 0;
		const char *colon = strchr(spec, ':');
		double p = colon ? strtod(colon + 1, NULL) : 0.5;
		for (int64_t i = 0; i < n; i++)
			f8_rt_tensor_set(t, i, !(first_row_false && i < row) && rng_uniform(0, 1) < p);
	} else if (strcmp(spec, "signed") == 0) {
		for (int64_t i = 0; i < n; i++)
			f8_rt_tensor_set(t, i, (rng_next() & 1 ? 1 : -1) * rng_uniform(0.3, 1.5));
	} else if (strcmp(spec, "positive") == 0 || sscanf(spec, "uniform:%lf:%lf", &a, &b) == 2) {
		if (strcmp(spec, "positive") == 0)
			a = 0.5, b = 2.0;
		for (int64_t i = 0; i < n; i++)
			f8_rt_tensor_set(t, i, rng_uniform(a, b));
	} else {
		printf("FAIL unknown fill \"%s\"\n", spec);
		return false;
	}
	return true;
}

#endif
