/*
 * How a generated kernel is launched: one geometry for codegen (which chooses it), plan.json
 * (which records it) and the GPU runtime (which launches by it), so the three cannot drift.
 *
 * A launch has exactly threads_per_block threads (x) per block and
 *     grid = min(ceil(rows / rows_per_block), max_blocks) blocks (x), at least 1,
 * where rows is the product of the size arguments that the kernel's grid sizes name (1 when
 * it names none): the grid loop's trip count, or for a kernel with a grid divisor the units
 * that rows_per_block counts (a tiled kernel: elements, 4096 a tile and block). Any grid size
 * is correct (the loops are grid-stride); this one fills the GPU without idle blocks. A kernel
 * declares its shared memory statically (shared_bytes: the reductions' scratch and the shared
 * arrays, for information): launches ask for no dynamic shared memory. On the host target a
 * kernel runs as 1 thread, 1 row per block, 1 block, 0 bytes.
 */
#ifndef F8_IR_LAUNCH_H
#define F8_IR_LAUNCH_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // uint32_t, int64_t

/* X(ENUM, text name): how a kernel uses a parameter, in codegen's kernel IR, in plan.json and
 * for a backend's launcher alike.
 * IN: read only. OUT: written (and possibly read after it was written, by the same thread).
 * ACCUMULATE: the launcher zeroes it before the launch, the kernel combines into it with
 * atomics only. SIZE: an i64 argument, the value of a dimension. TABLE: an i64 buffer the
 * launcher fills before the launch (constants and buffer addresses, codegen/lower.h), read
 * only. */
#define F8_KERNEL_PARAM_LIST(X) \
	X(IN, "in")             \
	X(OUT, "out")           \
	X(ACCUMULATE, "acc")    \
	X(SIZE, "size")         \
	X(TABLE, "table")

typedef enum f8_kernel_param_kind {
#define F8_KERNEL_PARAM_ENUM(e, name) F8_KERNEL_PARAM_##e,
	F8_KERNEL_PARAM_LIST(F8_KERNEL_PARAM_ENUM)
#undef F8_KERNEL_PARAM_ENUM
	F8_KERNEL_PARAM_COUNT
} f8_kernel_param_kind;

const char *f8_kernel_param_kind_name(f8_kernel_param_kind kind);
bool f8_kernel_param_kind_from_name(const char *name, size_t len, f8_kernel_param_kind *out);

typedef struct f8_launch_geometry {
	uint32_t threads_per_block; // 256
	uint32_t rows_per_block;    // 1 with block loops in the grid loop, else threads_per_block;
				    // times the kernel's grid divisor
	uint32_t max_blocks;        // 132 SMs x 8 (H200)
	uint32_t shared_bytes;      // static shared memory: reductions' scratch, shared arrays
} f8_launch_geometry;

/* The blocks of a launch over `rows` rows, by the rule above (1 for rows <= 0 or a geometry
 * without rows per block). */
static inline uint32_t f8_launch_grid_blocks(const f8_launch_geometry *geometry, int64_t rows) {
	if (rows <= 0 || geometry->rows_per_block == 0)
		return 1;
	int64_t blocks = (rows - 1) / geometry->rows_per_block + 1;
	if (geometry->max_blocks && blocks > geometry->max_blocks)
		blocks = geometry->max_blocks;
	return (uint32_t)blocks;
}

#endif
