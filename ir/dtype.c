/*
 * The dtype table, generated from F8_DTYPE_LIST, and lookups by name.
 */
#include "ir/dtype.h" // f8_dtype, f8_dtype_info

#include <string.h> // strlen, memcmp

static const f8_dtype_info dtype_infos[] = {
#define F8_DTYPE_INFO(e, name, bytes, kind, ebits, mbits, bias, inf, nan, max) \
	{name, bytes, F8_DTYPE_KIND_##kind, ebits, mbits, bias, inf, nan, max},
	F8_DTYPE_LIST(F8_DTYPE_INFO)
#undef F8_DTYPE_INFO
};
static_assert(sizeof dtype_infos / sizeof dtype_infos[0] == F8_DTYPE_COUNT,
	      "dtype_infos must have one row per f8_dtype");

const f8_dtype_info *f8_dtype_get_info(f8_dtype dtype) {
	assert((unsigned)dtype < F8_DTYPE_COUNT);
	return &dtype_infos[dtype];
}

const char *f8_dtype_name(f8_dtype dtype) {
	return (unsigned)dtype < F8_DTYPE_COUNT ? dtype_infos[dtype].name : "?";
}

bool f8_dtype_from_name(const char *name, size_t len, f8_dtype *out) {
	for (int i = F8_DTYPE_UNDEFINED + 1; i < F8_DTYPE_COUNT; i++) {
		const char *candidate = dtype_infos[i].name;
		if (strlen(candidate) == len && memcmp(candidate, name, len) == 0) {
			*out = (f8_dtype)i;
			return true;
		}
	}
	return false;
}
