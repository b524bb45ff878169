/*
 * The kernel IR: what one fused group of graph nodes computes, in a form both targets lower
 * (codegen/llvm_lower.h: NVPTX for sm_90, the host through ORC JIT).
 *
 * A kernel has parameters (buffers, i64 sizes, tables) and one body: a grid loop over rows.
 * The grid loop's body runs once per row: row-uniform instructions, stores and atomics, and
 * block loops over the row's columns. On the GPU the grid loop is spread over thread blocks
 * (grid-stride) and a block loop over the threads of one block; on the host both are plain
 * loops. Either loop may carry accumulators (add or max), combined over all its iterations: a
 * block loop's over the row (the GPU reduces them with warp shuffles and shared memory), the
 * grid loop's over the whole kernel (the GPU combines them per block, then the epilogue's
 * atomics combine blocks).
 *
 *   kernel cast_amax(in %x: f32, out %y: e4m3, in %scale: f32, acc %amax: f32, size %rows,
 *                    size %cols)
 *     for.grid %r < %rows max(%row_max -> %kernel_max) {
 *       %s = load %scale[0]
 *       for.block %c < %cols max(%a -> %row_max) {
 *         %i = add.i64 (mul.i64 %r, %cols), %c
 *         %x = load %x[%i]
 *         store %y[%i], mul %x, %s          // rounded to e4m3 on store (cvt.rn.satfinite)
 *         %a = abs %x
 *       }
 *     }
 *     atomic.max %amax[0], %kernel_max
 *
 * Iterations of a loop may run in any order or at the same time (on the GPU they do): an
 * iteration reads no element that another iteration of the same loop writes, and writes none
 * that another writes, atomics aside.
 *
 * A kernel may declare shared arrays (`shared @tile: f32[4160]`): per-block scratch of a
 * constant number of elements, no argument. On the GPU each block has its own (shared memory);
 * on the host each call has one. Only block loops load and store them, a block loop either
 * loads or stores a given array, and a load reads an element that an earlier block loop of the
 * same grid iteration stored (the barrier between block loops orders them): so a block loop
 * can hand a tile of values to the next, which reads them in another order (a transpose), or
 * keep a row for later passes over it. Stores and loads convert as a buffer's of the same
 * dtype do. Indexes must be in range; a shared array's contents at the start of a grid
 * iteration are undefined.
 *
 * Loads, stores and atomics of buffers may carry a mask (an i1): a masked-out store or atomic
 * does nothing, a masked-out load gives 0 (false for i1) without reading, and neither needs
 * its index in range. Tiles at the edge of a tensor use them.
 *
 * A buffer chosen at run time: a table parameter (`table %table0: i64`) is an i64 buffer that
 * the launcher fills before the launch (codegen/lower.h's f8_kernel_table says with what: per
 * row, constants and the addresses of buffers), read with plain loads. An i64 read from it may
 * be an address: `load.ptr.f32 bf16 %a[%i]` reads element i of the bf16 array at address %a,
 * `store.ptr bf16 %a[%i], %v` writes it, converting as a buffer of that dtype does (no masks).
 * The address must be uniform over a block loop: defined at the top level or in the grid
 * loop's body (a table's cell for the row the grid iteration works on), never in a block loop.
 * The kernel cannot tell which addresses it may write: the launcher's table does (its columns
 * of OUT addresses), and the rule of independent iterations holds for them as for buffers.
 * A multi-tensor kernel uses them (codegen/lower_optimizer.c: AdamW over every parameter).
 *
 *   kernel scale_all(table %table0: i64, size %chunks)    // a row: first chunk, numel, x, y
 *     for.grid %c < %chunks {
 *       %row = ... the row whose chunks hold %c (a binary search over column 0) ...
 *       %x = load %table0[4 %row + 2]  ...  %y = load %table0[4 %row + 3]
 *       for.block %j < %length {
 *         %e = add.i64 %offset, %j
 *         %v = load.ptr.f32 bf16 %x[%e]
 *         store.ptr f32 %y[%e], mul %v, %two
 *       }
 *     }
 *
 * Values are SSA instructions in one table per kernel, referred to by id; statements (loops,
 * stores, atomics) are in per-loop lists and say which instructions they place. An
 * instruction belongs to the scope whose statement list holds it (an "inst" statement):
 * kernel, grid loop or block loop, and it may use values of its own scope and of the scopes
 * around it. Buffers are typed by their element dtype: a load converts to the register type
 * (bf16, f16, e4m3, e5m2 and e8m0 exactly to f32; i32 and i64 to i64; bool to i1), a store
 * converts back as the reference executor's stores do (runtime/tensor.c): to e4m3 and e5m2 as
 * sm_90's cvt.rn.satfinite, f8_float_encode(dtype, v, true): nearest even, saturating, an inf
 * too, NaN stays NaN; to bf16 and f16 as cvt.rn, f8_float_encode(dtype, v, false): nearest even,
 * overflowing to inf; to e8m0 as f8_e8m0_encode(v, F8_ROUND_NEAREST_EVEN)). Arithmetic is IEEE f32 without fast-math and without contraction, so
 * that the host and the GPU compute the same thing where the order of a reduction does not
 * differ.
 *
 * Ownership: a kernel owns everything in it (one arena); f8_kir_destroy frees it at once.
 */
#ifndef F8_CODEGEN_KIR_H
#define F8_CODEGEN_KIR_H

#include <stdbool.h> // bool
#include <stdint.h>  // uint32_t, int64_t
#include <stdio.h>   // FILE

#include "ir/launch.h" // f8_kernel_param_kind
#include "ir/arena.h" // f8_arena
#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/dtype.h" // f8_dtype

typedef uint32_t f8_kir_id; // an instruction (a value) of a kernel
#define F8_KIR_NONE UINT32_MAX

/* The register types of values. */
#define F8_KIR_TYPE_LIST(X) \
	X(BOOL, "i1")       \
	X(I64, "i64")       \
	X(F32, "f32")

typedef enum f8_kir_type {
#define F8_KIR_TYPE_ENUM(e, name) F8_KIR_TYPE_##e,
	F8_KIR_TYPE_LIST(F8_KIR_TYPE_ENUM)
#undef F8_KIR_TYPE_ENUM
	F8_KIR_TYPE_COUNT
} f8_kir_type;

/*
 * X(ENUM, text name, operands, result type rule): the instructions.
 *   operands: how many of a, b, c it reads
 *   rule: SAME (the type of a, which all operands share), BOOL, I64, F32, or TYPED (inst.type,
 *         for constants, parameters, loop variables, loads and accumulator results)
 * Float ops are on f32, integer ops on i64, logical ops on i1 (and, or, not, select's
 * condition). Division and remainder of integers are signed and truncate; a divisor of 0 is
 * the builder's error, not the kernel's behaviour. max and min propagate NaN (IEEE maximum,
 * minimum), so that an amax of a tensor holding a NaN is NaN.
 * exp.term is exp of a value that is only a term of a sum (a softmax's denominator): on the
 * GPU the hardware's approximation (ex2.approx.ftz of x log2 e, within about 2 ulps where the
 * result is normal, 0 where it would be subnormal), on the host exp's own sequence; the
 * targets' sums differ by that as they already do by the order of the sum. exp keeps the
 * same bits on both (codegen/llvm_math.c), as do cos and sin (radians, any f32 argument: the
 * reduction by pi/2 is exact enough for all of them, not only for small ones).
 */
#define F8_KIR_OP_LIST(X)                        \
	X(CONST, "const", 0, TYPED)              \
	X(SIZE, "size", 0, TYPED)                \
	X(LOOP_VAR, "loop_var", 0, TYPED)        \
	X(RESULT, "result", 0, TYPED)            \
	X(LOAD, "load", 1, TYPED)                \
	X(LOAD_SHARED, "load.shared", 1, TYPED)  \
	X(LOAD_PTR, "load.ptr", 2, TYPED)        \
	X(ADD, "add", 2, SAME)                   \
	X(SUB, "sub", 2, SAME)                   \
	X(MUL, "mul", 2, SAME)                   \
	X(DIV, "div", 2, SAME)                   \
	X(REM, "rem", 2, SAME)                   \
	X(MAX, "max", 2, SAME)                   \
	X(MIN, "min", 2, SAME)                   \
	X(FMA, "fma", 3, SAME)                   \
	X(NEG, "neg", 1, SAME)                   \
	X(ABS, "abs", 1, SAME)                   \
	X(SQRT, "sqrt", 1, SAME)                 \
	X(EXP, "exp", 1, SAME)                   \
	X(LOG, "log", 1, SAME)                   \
	X(TANH, "tanh", 1, SAME)                 \
	X(ERF, "erf", 1, SAME)                   \
	X(COS, "cos", 1, SAME)                   \
	X(SIN, "sin", 1, SAME)                   \
	X(EXP_TERM, "exp.term", 1, SAME)         \
	X(FLOOR, "floor", 1, SAME)               \
	X(LT, "lt", 2, BOOL)                     \
	X(LE, "le", 2, BOOL)                     \
	X(EQ, "eq", 2, BOOL)                     \
	X(NE, "ne", 2, BOOL)                     \
	X(IS_NAN, "is_nan", 1, BOOL)             \
	X(IS_FINITE, "is_finite", 1, BOOL)       \
	X(AND, "and", 2, SAME)                   \
	X(OR, "or", 2, SAME)                     \
	X(NOT, "not", 1, SAME)                   \
	X(SELECT, "select", 3, TYPED)            \
	X(TO_F32, "to_f32", 1, F32)              \
	X(TO_I64, "to_i64", 1, I64)              \
	X(BITS, "bits", 1, I64)                  \
	X(FROM_BITS, "from_bits", 1, F32)        \
	X(SHL, "shl", 2, SAME)                   \
	X(SHR, "shr", 2, SAME)

typedef enum f8_kir_op {
#define F8_KIR_OP_ENUM(e, name, operands, rule) F8_KIR_OP_##e,
	F8_KIR_OP_LIST(F8_KIR_OP_ENUM)
#undef F8_KIR_OP_ENUM
	F8_KIR_OP_COUNT
} f8_kir_op;

/*
 * One instruction. Which fields an op uses:
 *   CONST     type, f (F32; also the value of a BOOL: 0 or 1) or i (I64)
 *   SIZE      param: the index of a size parameter; type I64
 *   LOOP_VAR  loop: the statement index of its loop (the row or column index); type I64
 *   RESULT    loop, accumulator: an accumulator's value after its loop; type its type
 *   LOAD      param: the buffer; a: the element index (i64); b: its mask (an i1) or
 *             F8_KIR_NONE; type from the buffer's dtype
 *   LOAD_SHARED  param: the shared array; a: the element index (i64); type from its dtype
 *   LOAD_PTR  a: the address (i64, uniform over block loops: see the header), b: the element
 *             index (i64); dtype: the elements' at that address; type from the dtype
 *   others    a, b, c: operands
 * TO_F32 converts i64 (exactly where it can, else nearest even) or i1; TO_I64 truncates an f32
 * toward zero (saturating; NaN gives 0) or widens an i1. BITS gives the f32's bit pattern
 * (zero-extended to i64); FROM_BITS takes the low 32 bits of an i64 as an f32. SHR is logical.
 */
typedef struct f8_kir_inst {
	f8_kir_op op;
	f8_kir_type type;
	f8_kir_id a, b, c;
	uint32_t param;       // SIZE, LOAD (a parameter), LOAD_SHARED (a shared array)
	uint32_t loop;        // LOOP_VAR, RESULT: statement index of the loop
	uint32_t accumulator; // RESULT: which accumulator of that loop
	double f;             // CONST of F32 or BOOL
	int64_t i;            // CONST of I64
	f8_dtype dtype;       // LOAD_PTR: the element dtype at the address
} f8_kir_inst;

typedef struct f8_kir_param {
	const char *name;       // unique in the kernel, without the '%'
	f8_kernel_param_kind kind;
	f8_dtype dtype;         // buffers: the element dtype; sizes: F8_DTYPE_I64
} f8_kir_param;

/* A shared array: per-block scratch (see the header comment). */
typedef struct f8_kir_shared {
	const char *name; // unique among the kernel's shared arrays, without the '@'
	f8_dtype dtype;   // its elements, converted on load and store as a buffer's
	uint32_t count;   // elements, a constant
} f8_kir_shared;

/* The most bytes a kernel's shared arrays take together: under the GPU's 48 KB of static
 * shared memory a block may have, with room for the block reductions' scratch. */
enum { F8_KIR_SHARED_BYTES_MAX = 40960 };

/* X(ENUM, text name): how accumulators and atomics combine. */
#define F8_KIR_COMBINE_LIST(X) \
	X(ADD, "add")          \
	X(MAX, "max")

typedef enum f8_kir_combine {
#define F8_KIR_COMBINE_ENUM(e, name) F8_KIR_COMBINE_##e,
	F8_KIR_COMBINE_LIST(F8_KIR_COMBINE_ENUM)
#undef F8_KIR_COMBINE_ENUM
	F8_KIR_COMBINE_COUNT
} f8_kir_combine;

/*
 * An accumulator of a loop: starts at the combine's identity (0 for add, -inf for a max of
 * f32, INT64_MIN for a max of i64), and takes `value` (an instruction of the loop's scope,
 * filled in when the loop's body is finished) once per iteration. A max of f32 propagates NaN.
 * Its result after the loop is a RESULT instruction of the scope around the loop.
 */
typedef struct f8_kir_accumulator {
	f8_kir_combine combine;
	f8_kir_type type;   // F32 or I64
	f8_kir_id value;    // the per-iteration value
	f8_kir_id result;   // the RESULT instruction
} f8_kir_accumulator;

/* X(ENUM, text name): the statements. */
#define F8_KIR_STMT_LIST(X)        \
	X(INST, "inst")            \
	X(GRID_LOOP, "for.grid")   \
	X(BLOCK_LOOP, "for.block") \
	X(STORE, "store")          \
	X(ATOMIC, "atomic")        \
	X(STORE_SHARED, "store.shared") \
	X(STORE_PTR, "store.ptr")

typedef enum f8_kir_stmt_kind {
#define F8_KIR_STMT_ENUM(e, name) F8_KIR_STMT_##e,
	F8_KIR_STMT_LIST(F8_KIR_STMT_ENUM)
#undef F8_KIR_STMT_ENUM
	F8_KIR_STMT_COUNT
} f8_kir_stmt_kind;

/*
 * One statement. Statements live in one table per kernel; a scope is a list of statement
 * indexes (the kernel's top level, or a loop's body).
 *   INST        inst: the instruction computed here
 *   GRID_LOOP   var, extent (an i64 instruction of the kernel's scope), body, accumulators;
 *               only at the kernel's top level, at most one
 *   BLOCK_LOOP  var, extent (of the grid loop's scope), body, accumulators; only in a grid
 *               loop's body
 *   STORE       param (an OUT buffer), index (i64), value: buffer[index] = value, converted;
 *               mask: an i1, or F8_KIR_NONE (ATOMIC's too)
 *   STORE_SHARED  param (a shared array), index, value: only in a block loop's body
 *   STORE_PTR   address (an i64 uniform over block loops, as LOAD_PTR's), dtype, index, value:
 *               element index of the dtype array at address = value, converted; no mask
 *   ATOMIC      param (an ACCUMULATE buffer), index, value, combine: buffer[index] combined
 *               with value, atomically across threads and blocks. A max of f32 compares bit
 *               patterns as unsigned integers (atomicrmw umax): that orders the values >= +0
 *               and puts NaN above them all, which is what an amax needs, so the values must
 *               be +0 or above, or NaN (an |x| is); -inf, the max accumulator's identity,
 *               leaves the buffer as it is. Atomics are on f32 and i64 buffers only.
 * On the GPU, a store or an atomic in a grid loop's body outside a block loop runs once per
 * row (by one thread); block loops in one grid iteration are separated by a barrier, so a
 * block loop may read what an earlier one of the same row stored.
 */
typedef struct f8_kir_stmt {
	f8_kir_stmt_kind kind;
	f8_kir_id inst;                   // INST
	f8_kir_id var, extent;            // loops: the LOOP_VAR instruction and the trip count
	uint32_t *body;                   // loops: (n_body) statement indexes
	uint32_t n_body, body_capacity;
	f8_kir_accumulator *accumulators; // loops: (n_accumulators)
	uint32_t n_accumulators;
	uint32_t param;                   // STORE, ATOMIC: a parameter; STORE_SHARED: an array
	f8_kir_id index, value;           // STORE, ATOMIC, STORE_SHARED
	f8_kir_id mask;                   // STORE, ATOMIC: an i1 or F8_KIR_NONE
	f8_kir_combine combine;           // ATOMIC
	f8_kir_id address;                // STORE_PTR: the address (i64)
	f8_dtype dtype;                   // STORE_PTR: the elements' dtype at the address
} f8_kir_stmt;

typedef struct f8_kernel {
	f8_arena *arena;
	const char *name;       // a C identifier, unique in a plan
	f8_kir_param *params;   // (n_params) in argument order
	uint32_t n_params, params_capacity;
	f8_kir_shared *shared;  // (n_shared) the shared arrays
	uint32_t n_shared;
	f8_kir_inst *insts;     // (n_insts)
	uint32_t n_insts, insts_capacity;
	f8_kir_stmt *stmts;     // (n_stmts)
	uint32_t n_stmts, stmts_capacity;
	uint32_t *top;          // (n_top) the kernel's top-level statement list
	uint32_t n_top, top_capacity;
	// The grid loop's trip count as the product of these size parameters (indexes), so that
	// a launcher can size the grid from the arguments without evaluating the kernel; set by
	// whoever builds the kernel (n_grid_sizes 0: the trip count is 1).
	uint32_t grid_sizes[8];
	uint32_t n_grid_sizes;
	// How many units of that product one grid iteration covers (0 or 1: one), for a grid
	// loop whose trip count is not a product of sizes: a loop over 64x64 tiles names the
	// tensor's dims and 4096, and the launcher sizes its grid as if by tiles.
	uint32_t grid_divisor;
	// On the GPU, how many blocks of F8_LLVM_GPU_THREADS an SM should hold at least (NVPTX's
	// minctasm: ptxas caps the registers to fit them); 0: ptxas's choice.
	uint32_t min_blocks_per_sm;
	// The builder's state: the insertion point (the innermost open loop's statement index,
	// F8_KIR_NONE at the top level) and the first failure of an id-returning builder.
	uint32_t current;
	char error[256];
} f8_kernel;

const char *f8_kir_type_name(f8_kir_type type);
const char *f8_kir_op_name(f8_kir_op op);
const char *f8_kir_combine_name(f8_kir_combine combine);

/* The register type a buffer of `dtype` loads to and stores from: F32 for the float dtypes,
 * I64 for the integer dtypes, BOOL for bool; F8_KIR_TYPE_COUNT for a dtype no buffer may
 * have (f64, undefined). */
f8_kir_type f8_kir_type_of_dtype(f8_dtype dtype);

/* A new empty kernel named `name` (copied), or NULL when memory runs out. */
f8_kernel *f8_kir_create(const char *name);
void f8_kir_destroy(f8_kernel *kernel);

/*
 * The builder. Parameters are added first (f8_kir_add_param returns its index). Instructions
 * and statements go to the insertion point: f8_kir_begin_grid_loop / f8_kir_begin_block_loop
 * open a loop (its LOOP_VAR into *var), f8_kir_add_accumulator gives the open loop an
 * accumulator (its RESULT, usable after the loop ends, into *result), f8_kir_end_loop closes
 * the innermost loop after `values` (n_values, one per accumulator in order) are set. The
 * builder functions return F8_KIR_NONE (ids) or a status with the diagnostic on misuse (a
 * type mismatch, a store to an IN buffer, a grid loop inside a loop) and when memory runs out;
 * once one has failed, the kernel is not to be lowered. Builders check what they can at once
 * and f8_kir_verify checks the rest.
 */
f8_status f8_kir_add_param(f8_kernel *kernel, const char *name, f8_kernel_param_kind kind,
			   f8_dtype dtype, uint32_t *index, f8_diag *diag);
f8_kir_id f8_kir_const_f32(f8_kernel *kernel, double value);
f8_kir_id f8_kir_const_i64(f8_kernel *kernel, int64_t value);
f8_kir_id f8_kir_const_bool(f8_kernel *kernel, bool value);
f8_kir_id f8_kir_size(f8_kernel *kernel, uint32_t param);
f8_kir_id f8_kir_load(f8_kernel *kernel, uint32_t param, f8_kir_id index);
/* A load under `mask` (an i1; F8_KIR_NONE: none): 0 where the mask is false. */
f8_kir_id f8_kir_load_if(f8_kernel *kernel, uint32_t param, f8_kir_id index, f8_kir_id mask);
/* Declares a shared array of `count` elements of `dtype` (any dtype a buffer may have; the
 * kernel's arrays within F8_KIR_SHARED_BYTES_MAX together); its index into *index. */
f8_status f8_kir_add_shared(f8_kernel *kernel, const char *name, f8_dtype dtype, uint32_t count,
			    uint32_t *index, f8_diag *diag);
f8_kir_id f8_kir_load_shared(f8_kernel *kernel, uint32_t shared, f8_kir_id index);
/* Element `index` of the `dtype` array at `address` (an i64; any dtype a buffer may have), as
 * its register value; and a store of `value` (of that register type) there. The address must
 * not be defined in a block loop (f8_kir_verify checks). */
f8_kir_id f8_kir_load_ptr(f8_kernel *kernel, f8_dtype dtype, f8_kir_id address, f8_kir_id index);
f8_status f8_kir_store_ptr(f8_kernel *kernel, f8_dtype dtype, f8_kir_id address, f8_kir_id index,
			   f8_kir_id value, f8_diag *diag);
/* Any instruction of the table with its operands (F8_KIR_NONE for unused ones); the result
 * type follows the op's rule (SELECT: the type of b). F8_KIR_NONE on a type error, with the
 * message in the kernel's last error (f8_kir_error). */
f8_kir_id f8_kir_emit(f8_kernel *kernel, f8_kir_op op, f8_kir_id a, f8_kir_id b, f8_kir_id c);
f8_status f8_kir_begin_grid_loop(f8_kernel *kernel, f8_kir_id extent, f8_kir_id *var,
				 f8_diag *diag);
f8_status f8_kir_begin_block_loop(f8_kernel *kernel, f8_kir_id extent, f8_kir_id *var,
				  f8_diag *diag);
f8_status f8_kir_add_accumulator(f8_kernel *kernel, f8_kir_combine combine, f8_kir_type type,
				 f8_kir_id *result, f8_diag *diag);
f8_status f8_kir_end_loop(f8_kernel *kernel, const f8_kir_id *values, uint32_t n_values,
			  f8_diag *diag);
f8_status f8_kir_store(f8_kernel *kernel, uint32_t param, f8_kir_id index, f8_kir_id value,
		       f8_diag *diag);
f8_status f8_kir_atomic(f8_kernel *kernel, f8_kir_combine combine, uint32_t param,
			f8_kir_id index, f8_kir_id value, f8_diag *diag);
/* A store or an atomic under `mask` (an i1; F8_KIR_NONE: none): nothing where it is false. */
f8_status f8_kir_store_if(f8_kernel *kernel, uint32_t param, f8_kir_id index, f8_kir_id value,
			  f8_kir_id mask, f8_diag *diag);
f8_status f8_kir_atomic_if(f8_kernel *kernel, f8_kir_combine combine, uint32_t param,
			   f8_kir_id index, f8_kir_id value, f8_kir_id mask, f8_diag *diag);
f8_status f8_kir_store_shared(f8_kernel *kernel, uint32_t shared, f8_kir_id index,
			      f8_kir_id value, f8_diag *diag);

/* The message of the builder's first failure that returned an id (F8_KIR_NONE), or NULL when
 * none has failed. */
const char *f8_kir_error(const f8_kernel *kernel);

/* Checks the kernel's structure: one grid loop at the top level, block loops only inside it,
 * every value used in its scope or one around it and defined before its use, types, parameter
 * kinds, accumulators complete, masks i1, shared arrays used only in block loops and not both
 * loaded and stored by one, addresses not defined in a block loop. F8_ERR_INVALID with the
 * kernel's name and the first problem. */
f8_status f8_kir_verify(const f8_kernel *kernel, f8_diag *diag);

/* Prints the kernel in its text form (the header comment shows one). */
void f8_kir_print(const f8_kernel *kernel, FILE *out);

#endif
