/*
 * What the files of the LLVM lowering share (llvm_lower.c, llvm_loops.c, llvm_convert.c,
 * llvm_math.c): the emission state and the straight-line instruction sequences for conversions
 * and math; the state of one kernel's lowering and the entry points its two files call in each
 * other. Not for use outside codegen/llvm_*.c.
 *
 * Every sequence of f8_llvm_emit here is emitted at the builder's insertion point without new
 * basic blocks (selects, not branches), so that callers may place it anywhere, and is the same
 * on both targets unless it says otherwise.
 */
#ifndef F8_CODEGEN_LLVM_INTERNAL_H
#define F8_CODEGEN_LLVM_INTERNAL_H

#include <stdbool.h> // bool
#include <stdint.h>  // uint32_t, uint64_t

#include <llvm-c/Core.h> // LLVMContextRef, LLVMBuilderRef, LLVMValueRef, LLVMTypeRef

#include "codegen/kir.h"        // f8_kir_op
#include "codegen/llvm_lower.h" // f8_llvm_target
#include "ir/dtype.h"           // f8_dtype

typedef struct f8_llvm_emit {
	LLVMContextRef context;
	LLVMModuleRef module;
	LLVMBuilderRef builder;
	f8_llvm_target target;
	LLVMTypeRef i1, i8, i16, i32, i64, f32, ptr; // ptr: a buffer pointer of the target
} f8_llvm_emit;

/* Fills the types of `emit` for its context and target. */
void f8_llvm_emit_types(f8_llvm_emit *emit);

LLVMValueRef f8_llvm_f32(const f8_llvm_emit *emit, float value);
LLVMValueRef f8_llvm_i32(const f8_llvm_emit *emit, uint32_t value);
LLVMValueRef f8_llvm_i64(const f8_llvm_emit *emit, uint64_t value);

/* A call of the intrinsic `name` ("llvm.fma"), overloaded on `types` (n_types, none for the
 * NVVM ones), with `args`. */
LLVMValueRef f8_llvm_intrinsic(const f8_llvm_emit *emit, const char *name, LLVMTypeRef *types,
			       unsigned n_types, LLVMValueRef *args, unsigned n_args);

/* Shorthands for the f32 operations the sequences use. */
LLVMValueRef f8_llvm_fma(const f8_llvm_emit *emit, LLVMValueRef a, LLVMValueRef b,
			 LLVMValueRef c);
LLVMValueRef f8_llvm_fabs(const f8_llvm_emit *emit, LLVMValueRef x);
LLVMValueRef f8_llvm_bits(const f8_llvm_emit *emit, LLVMValueRef x);      // f32 -> i32
LLVMValueRef f8_llvm_from_bits(const f8_llvm_emit *emit, LLVMValueRef x); // i32 -> f32

/* The storage type of one element of a `dtype` buffer (i8, i16, i32, i64 or float), or NULL
 * for a dtype no buffer may have. */
LLVMTypeRef f8_llvm_storage_type(const f8_llvm_emit *emit, f8_dtype dtype);

/* A loaded element (of the storage type) -> its register value (kir.h: f32, i64 or i1),
 * bit-exact with ir/fp8.h's f8_float_decode (NaNs come out as sign | 0x7FC00000). */
LLVMValueRef f8_llvm_load_convert(const f8_llvm_emit *emit, f8_dtype dtype, LLVMValueRef stored);

/* A register value -> the element to store: e4m3 and e5m2 bit-exact with
 * f8_float_encode(dtype, value, true), bf16 and f16 with f8_float_encode(dtype, value, false);
 * e8m0 with f8_e8m0_encode(value, F8_ROUND_NEAREST_EVEN); i32 truncates; bool is 0 or 1. NVPTX
 * uses the cvt instructions where they are the hardware's path, the host integer arithmetic. */
LLVMValueRef f8_llvm_store_convert(const f8_llvm_emit *emit, f8_dtype dtype, LLVMValueRef value);

/* NVPTX: two f32 -> e4m3 or e5m2 codes in one cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32: an i16
 * holding `low`'s code in its low byte and `high`'s in its high byte, as two consecutive
 * elements lie in memory. Each code is f8_llvm_store_convert's. */
LLVMValueRef f8_llvm_store_convert_pair(const f8_llvm_emit *emit, f8_dtype dtype,
					LLVMValueRef low, LLVMValueRef high);

/* exp, log, tanh, erf, cos or sin (`op`) of the f32 `x` (codegen/llvm_math.c). */
LLVMValueRef f8_llvm_math(const f8_llvm_emit *emit, f8_kir_op op, LLVMValueRef x);

/* ---- one kernel's lowering (llvm_lower.c: instructions, stores, the kernel; llvm_loops.c:
 * loops, their vector form, block reductions) ---- */

enum {
	F8_LLVM_GPU_THREADS = 256,                      // threads per block
	F8_LLVM_GPU_WARPS = F8_LLVM_GPU_THREADS / 32,  // the reductions' shared slots per value
};

/* Where a statement is: it decides which threads of a block run a store or an atomic. */
typedef enum f8_llvm_scope {
	F8_LLVM_SCOPE_TOP,
	F8_LLVM_SCOPE_GRID,
	F8_LLVM_SCOPE_BLOCK
} f8_llvm_scope;

typedef struct f8_llvm_lowering {
	f8_llvm_emit emit;
	const f8_kernel *kernel;
	f8_diag *diag;
	f8_status status;        // the first failure
	LLVMValueRef function;   // the kernel proper (NVPTX: the entry; host: NAME.body)
	LLVMValueRef *args;      // (n_params) its parameters
	LLVMValueRef *values;    // (n_insts) the lowered instructions, NULL until lowered
	bool *from_grid;         // (n_insts) computed from a result of the grid loop
	// (n_insts) NVPTX: a block loop's RESULT whose only use is as the value of a grid
	// accumulator of the same combine: each thread keeps its own share across rows and the
	// grid loop's block reduction combines them once, instead of one reduction per row.
	bool *deferred;
	bool *grid_reduced;      // (grid accumulators) NVPTX: reduced over the block at the end
	uint32_t grid_loop;      // its statement index
	bool row_per_thread;     // NVPTX: the grid loop holds no block loop
	uint32_t loops;          // the block loops in the grid loop's body
	bool barriers;           // NVPTX: block loops begin with a barrier (llvm_lower.c: when)
	LLVMValueRef thread;     // NVPTX: threadIdx.x, blockIdx.x, gridDim.x as i64
	LLVMValueRef block, blocks;
	LLVMValueRef scratch;    // NVPTX: [scratch_slots x i64] in shared memory, or NULL
	LLVMTypeRef scratch_type;
	uint32_t scratch_slots;
	LLVMValueRef *shared;    // (n_shared) the arrays: NVPTX shared globals, host allocas
	LLVMTypeRef *shared_types; // (n_shared) [count x storage]
} f8_llvm_lowering;

/* Records the lowering's first failure (the diagnostic names the kernel and the target) and
 * returns its status; later failures keep the first. */
f8_status f8_llvm_fail(f8_llvm_lowering *l, f8_status status, const char *format, ...)
	__attribute__((format(printf, 3, 4)));

/* The value of instruction `id`, lowered before; NULL (and the failure) when it was not. */
LLVMValueRef f8_llvm_operand(f8_llvm_lowering *l, f8_kir_id id);

LLVMBasicBlockRef f8_llvm_append_block(f8_llvm_lowering *l, const char *name);
/* Opens `if (condition) {`; f8_llvm_end_guard closes it. Nothing flows out of the guarded
 * block but what the caller joins with phis. */
LLVMBasicBlockRef f8_llvm_begin_guard(f8_llvm_lowering *l, LLVMValueRef condition);
void f8_llvm_end_guard(f8_llvm_lowering *l, LLVMBasicBlockRef merge);

/* A pointer to element `index` of buffer parameter `param`. */
LLVMValueRef f8_llvm_element_pointer(f8_llvm_lowering *l, uint32_t param, LLVMValueRef index);

/* Buffer `param`'s element `index` as stored (its storage type), read only where `mask` (an
 * i1, or NULL: always) holds, 0 elsewhere; and a stored element as its register value, 0 of
 * the register type where `mask` (or NULL) is false. */
LLVMValueRef f8_llvm_load_stored(f8_llvm_lowering *l, uint32_t param, LLVMValueRef index,
				 LLVMValueRef mask);
LLVMValueRef f8_llvm_load_value(f8_llvm_lowering *l, uint32_t param, LLVMValueRef stored,
				LLVMValueRef mask);

/* One instruction, one statement of `where` (a loop: f8_llvm_lower_loop_statement), a scope. */
f8_status f8_llvm_lower_inst(f8_llvm_lowering *l, f8_kir_id id);
f8_status f8_llvm_lower_statement(f8_llvm_lowering *l, uint32_t index, f8_llvm_scope where);
f8_status f8_llvm_lower_scope(f8_llvm_lowering *l, const uint32_t *list, uint32_t n,
			      f8_llvm_scope where);

/* A grid or block loop statement, its accumulators' results set (llvm_loops.c). */
f8_status f8_llvm_lower_loop_statement(f8_llvm_lowering *l, uint32_t index);

#endif
