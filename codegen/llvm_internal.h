/*
 * What the files of the LLVM lowering share (llvm_lower.c, llvm_convert.c, llvm_math.c): the
 * emission state and the straight-line instruction sequences for conversions and math. Not
 * for use outside codegen/llvm_*.c.
 *
 * Every sequence here is emitted at the builder's insertion point without new basic blocks
 * (selects, not branches), so that callers may place it anywhere, and is the same on both
 * targets unless it says otherwise.
 */
#ifndef F8_CODEGEN_LLVM_INTERNAL_H
#define F8_CODEGEN_LLVM_INTERNAL_H

#include <stdint.h> // uint32_t, uint64_t

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

/* A register value -> the element to store: bf16, f16, e4m3 and e5m2 bit-exact with
 * f8_float_encode(dtype, value, true); e8m0 with f8_e8m0_encode(value, F8_ROUND_DOWN); i32
 * truncates; bool is 0 or 1. NVPTX uses the cvt instructions where they are the hardware's
 * path, the host integer arithmetic. */
LLVMValueRef f8_llvm_store_convert(const f8_llvm_emit *emit, f8_dtype dtype, LLVMValueRef value);

/* exp, log, tanh or erf (`op`) of the f32 `x` (codegen/llvm_math.c). */
LLVMValueRef f8_llvm_math(const f8_llvm_emit *emit, f8_kir_op op, LLVMValueRef x);

#endif
