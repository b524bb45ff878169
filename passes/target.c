/*
 * The chips' names and their tables without codegen (passes/target.h).
 */
#include "passes/target.h" // f8_target_table, f8_target_table_default

#include <assert.h> // static_assert
#include <string.h> // strcmp

#define F8_TARGET_NAME(e, name, recipes, k, n, m) name,
static const char *const target_names[] = {F8_TARGET_LIST(F8_TARGET_NAME)};
#undef F8_TARGET_NAME
static_assert(sizeof target_names / sizeof target_names[0] == F8_TARGET_COUNT, "one name each");

const char *f8_target_name(f8_target target) {
	return (unsigned)target < F8_TARGET_COUNT ? target_names[target] : "?";
}

bool f8_target_from_name(const char *name, f8_target *out) {
	for (int i = 0; i < F8_TARGET_COUNT; i++)
		if (strcmp(target_names[i], name) == 0) {
			*out = (f8_target)i;
			return true;
		}
	return false;
}

// The chip facts only: what lowers and what runs in a library is codegen's and the backends'
// to say (codegen/target.c).
#define F8_TARGET_DEFAULT(e, name, recipes, k, n, m) \
	{.chip = F8_TARGET_##e, .fp8_gemm = F8_TARGET_GEMM_OF(recipes, k, n, m)},
static const f8_target_table default_tables[] = {F8_TARGET_LIST(F8_TARGET_DEFAULT)};
#undef F8_TARGET_DEFAULT
static_assert(sizeof default_tables / sizeof default_tables[0] == F8_TARGET_COUNT,
	      "one table each");

const f8_target_table *f8_target_table_default(f8_target chip) {
	return (unsigned)chip < F8_TARGET_COUNT ? &default_tables[chip] : NULL;
}
