/*
 * Kernel IR -> LLVM IR (codegen/llvm_lower.h): the functions and their ABI, the shared arrays,
 * each instruction, stores and atomics, and what the kernel's shape decides for the GPU (which
 * block reductions can wait for the grid's, which barriers a block loop needs). The loops, their
 * vector form and the block reductions are in llvm_loops.c, element conversions in
 * llvm_convert.c, exp/log/tanh/erf in llvm_math.c.
 *
 * The statements are lowered in order, scope by scope; `values[id]` holds each instruction's
 * LLVM value once its statement (or, for loop variables and results, its loop) has been
 * lowered.
 *
 * A table parameter is a buffer of i64s like any other (a pointer argument). load.ptr and
 * store.ptr turn their i64 address into a pointer of the buffers' address space (global on
 * NVPTX) and access it as a buffer's element; llvm_loops.c's vector form does not know them
 * (only `load` and `store` are its linear accesses), so a loop of them stays scalar, one
 * element a thread: consecutive threads still touch consecutive elements, so the GPU
 * coalesces them.
 */
#include "codegen/llvm_lower.h" // f8_llvm_lower, f8_llvm_optimize, f8_launch_geometry

#include <stdarg.h>  // va_list
#include <stdbool.h> // bool
#include <stdio.h>   // vsnprintf, snprintf
#include <string.h>  // strlen

#include <llvm-c/Analysis.h>               // LLVMVerifyModule
#include <llvm-c/Transforms/PassBuilder.h> // LLVMRunPasses

#include "codegen/llvm_internal.h" // f8_llvm_emit, f8_llvm_load_convert, f8_llvm_math
#include "ir/alloc.h"              // f8_calloc, f8_malloc, f8_free

enum {
	GPU_MAX_BLOCKS = 132 * 8,      // the H200's SMs, 8 resident blocks of 256 threads each
	PTX_KERNEL_CALLING_CONV = 71,  // LLVM's CallingConv::PTX_Kernel
	SHARED_ADDRESS_SPACE = 3,      // NVPTX's shared memory
};

static const char *const target_names[] = {
#define F8_LLVM_TARGET_NAME(e, name) name,
	F8_LLVM_TARGET_LIST(F8_LLVM_TARGET_NAME)
#undef F8_LLVM_TARGET_NAME
};
_Static_assert(sizeof target_names / sizeof *target_names == F8_LLVM_TARGET_COUNT,
	       "one name per target");

const char *f8_llvm_target_name(f8_llvm_target target) {
	return target < F8_LLVM_TARGET_COUNT ? target_names[target] : "?";
}

typedef f8_llvm_lowering lowering;
typedef f8_llvm_scope scope;

f8_status f8_llvm_fail(lowering *l, f8_status status, const char *format, ...) {
	if (l->status)
		return l->status;
	char message[F8_DIAG_MESSAGE_MAX];
	va_list args;
	va_start(args, format);
	vsnprintf(message, sizeof message, format, args);
	va_end(args);
	l->status = f8_diag_set(l->diag, status, "kernel %s (%s): %s", l->kernel->name,
				f8_llvm_target_name(l->emit.target), message);
	return l->status;
}

LLVMBasicBlockRef f8_llvm_append_block(lowering *l, const char *name) {
	return LLVMAppendBasicBlockInContext(l->emit.context, l->function, name);
}

LLVMValueRef f8_llvm_operand(lowering *l, f8_kir_id id) {
	if (id < l->kernel->n_insts && l->values[id])
		return l->values[id];
	f8_llvm_fail(l, F8_ERR_INVALID, "%%%u is used before it is computed", id);
	return NULL;
}

/* ---- instructions ---- */

static LLVMTypeRef register_type(const lowering *l, f8_kir_type type) {
	return type == F8_KIR_TYPE_F32 ? l->emit.f32 : type == F8_KIR_TYPE_I64 ? l->emit.i64
									     : l->emit.i1;
}

static LLVMValueRef call1(lowering *l, const char *name, LLVMTypeRef type, LLVMValueRef a) {
	return f8_llvm_intrinsic(&l->emit, name, &type, 1, &a, 1);
}

static LLVMValueRef call2(lowering *l, const char *name, LLVMTypeRef type, LLVMValueRef a,
			  LLVMValueRef b) {
	LLVMValueRef args[2] = {a, b};
	return f8_llvm_intrinsic(&l->emit, name, &type, 1, args, 2);
}

/* A shift of i64 by `amount`; amounts of 64 and above (unsigned) give 0 on both targets, where
 * LLVM leaves them undefined and the hardware differs. */
static LLVMValueRef shift(lowering *l, bool left, LLVMValueRef value, LLVMValueRef amount) {
	LLVMBuilderRef b = l->emit.builder;
	LLVMValueRef shifted = left ? LLVMBuildShl(b, value, amount, "")
				    : LLVMBuildLShr(b, value, amount, "");
	LLVMValueRef in_range = LLVMBuildICmp(b, LLVMIntULT, amount, f8_llvm_i64(&l->emit, 64), "");
	return LLVMBuildSelect(b, in_range, shifted, f8_llvm_i64(&l->emit, 0), "");
}

static LLVMValueRef compare(lowering *l, f8_kir_op op, bool real, LLVMValueRef a, LLVMValueRef b) {
	LLVMBuilderRef builder = l->emit.builder;
	if (real) {
		// Ordered, so false with a NaN, except "not equal", which a NaN is to everything.
		LLVMRealPredicate p = op == F8_KIR_OP_LT ? LLVMRealOLT
				      : op == F8_KIR_OP_LE ? LLVMRealOLE
				      : op == F8_KIR_OP_EQ ? LLVMRealOEQ
							   : LLVMRealUNE;
		return LLVMBuildFCmp(builder, p, a, b, "");
	}
	LLVMIntPredicate p = op == F8_KIR_OP_LT ? LLVMIntSLT
			     : op == F8_KIR_OP_LE ? LLVMIntSLE
			     : op == F8_KIR_OP_EQ ? LLVMIntEQ
						  : LLVMIntNE;
	return LLVMBuildICmp(builder, p, a, b, "");
}

/* An instruction with operands; `real`: its operands are f32. */
static LLVMValueRef compute(lowering *l, const f8_kir_inst *inst, bool real, LLVMValueRef a,
			    LLVMValueRef b, LLVMValueRef c) {
	f8_llvm_emit *e = &l->emit;
	LLVMBuilderRef builder = e->builder;
	LLVMTypeRef type = real ? e->f32 : e->i64;
	switch (inst->op) {
	case F8_KIR_OP_ADD:
		return real ? LLVMBuildFAdd(builder, a, b, "") : LLVMBuildAdd(builder, a, b, "");
	case F8_KIR_OP_SUB:
		return real ? LLVMBuildFSub(builder, a, b, "") : LLVMBuildSub(builder, a, b, "");
	case F8_KIR_OP_MUL:
		return real ? LLVMBuildFMul(builder, a, b, "") : LLVMBuildMul(builder, a, b, "");
	case F8_KIR_OP_DIV:
		return real ? LLVMBuildFDiv(builder, a, b, "") : LLVMBuildSDiv(builder, a, b, "");
	case F8_KIR_OP_REM:
		return LLVMBuildSRem(builder, a, b, "");
	case F8_KIR_OP_MAX:
		return call2(l, real ? "llvm.maximum" : "llvm.smax", type, a, b);
	case F8_KIR_OP_MIN:
		return call2(l, real ? "llvm.minimum" : "llvm.smin", type, a, b);
	case F8_KIR_OP_FMA:
		return f8_llvm_fma(e, a, b, c);
	case F8_KIR_OP_NEG:
		return real ? LLVMBuildFNeg(builder, a, "") : LLVMBuildNeg(builder, a, "");
	case F8_KIR_OP_ABS:
		return real ? f8_llvm_fabs(e, a)
			    : call2(l, "llvm.abs", type, a, LLVMConstInt(e->i1, 0, false));
	case F8_KIR_OP_SQRT:
		return call1(l, "llvm.sqrt", type, a);
	case F8_KIR_OP_FLOOR:
		return call1(l, "llvm.floor", type, a);
	case F8_KIR_OP_EXP:
	case F8_KIR_OP_LOG:
	case F8_KIR_OP_TANH:
	case F8_KIR_OP_ERF:
	case F8_KIR_OP_COS:
	case F8_KIR_OP_SIN:
		return f8_llvm_math(e, inst->op, a);
	case F8_KIR_OP_EXP_TERM: // kir.h: the hardware's approximation on the GPU
		if (e->target != F8_LLVM_TARGET_NVPTX)
			return f8_llvm_math(e, F8_KIR_OP_EXP, a);
		return f8_llvm_intrinsic(e, "llvm.nvvm.ex2.approx.ftz.f", NULL, 0,
					 (LLVMValueRef[]){LLVMBuildFMul(builder, a,
									f8_llvm_f32(e, 0x1.715476p+0f), "")},
					 1);
	case F8_KIR_OP_LT:
	case F8_KIR_OP_LE:
	case F8_KIR_OP_EQ:
	case F8_KIR_OP_NE:
		return compare(l, inst->op, real, a, b);
	case F8_KIR_OP_IS_NAN:
		return LLVMBuildFCmp(builder, LLVMRealUNO, a, a, "");
	case F8_KIR_OP_IS_FINITE:
		return LLVMBuildFCmp(builder, LLVMRealOLT, f8_llvm_fabs(e, a),
				     f8_llvm_f32(e, __builtin_inff()), "");
	case F8_KIR_OP_AND:
		return LLVMBuildAnd(builder, a, b, "");
	case F8_KIR_OP_OR:
		return LLVMBuildOr(builder, a, b, "");
	case F8_KIR_OP_NOT:
		return LLVMBuildNot(builder, a, "");
	case F8_KIR_OP_SELECT:
		return LLVMBuildSelect(builder, a, b, c, "");
	case F8_KIR_OP_SHL:
	case F8_KIR_OP_SHR:
		return shift(l, inst->op == F8_KIR_OP_SHL, a, b);
	default:
		break;
	}
	f8_llvm_fail(l, F8_ERR_UNSUPPORTED, "no lowering of %s", f8_kir_op_name(inst->op));
	return NULL;
}

/* The conversions and bit moves, whose operand type differs from their result's. */
static LLVMValueRef convert(lowering *l, const f8_kir_inst *inst, f8_kir_type from,
			    LLVMValueRef a) {
	f8_llvm_emit *e = &l->emit;
	LLVMBuilderRef builder = e->builder;
	switch (inst->op) {
	case F8_KIR_OP_TO_F32:
		if (from == F8_KIR_TYPE_F32)
			return a;
		return from == F8_KIR_TYPE_BOOL ? LLVMBuildUIToFP(builder, a, e->f32, "")
						: LLVMBuildSIToFP(builder, a, e->f32, "");
	case F8_KIR_OP_TO_I64: {
		if (from == F8_KIR_TYPE_I64)
			return a;
		if (from == F8_KIR_TYPE_BOOL)
			return LLVMBuildZExt(builder, a, e->i64, "");
		LLVMTypeRef types[2] = {e->i64, e->f32}; // saturating, NaN -> 0
		return f8_llvm_intrinsic(e, "llvm.fptosi.sat", types, 2, &a, 1);
	}
	case F8_KIR_OP_BITS:
		return LLVMBuildZExt(builder, f8_llvm_bits(e, a), e->i64, "");
	case F8_KIR_OP_FROM_BITS:
		return f8_llvm_from_bits(e, LLVMBuildTrunc(builder, a, e->i32, ""));
	default:
		return NULL;
	}
}

LLVMValueRef f8_llvm_element_pointer(lowering *l, uint32_t param, LLVMValueRef index) {
	f8_dtype dtype = l->kernel->params[param].dtype;
	return LLVMBuildInBoundsGEP2(l->emit.builder, f8_llvm_storage_type(&l->emit, dtype),
				     l->args[param], &index, 1, "");
}

/* A pointer to element `index` of the `dtype` array at `address` (an i64: kir.h's load.ptr
 * and store.ptr), in the buffers' address space. */
static LLVMValueRef address_pointer(lowering *l, f8_dtype dtype, LLVMValueRef address,
				    LLVMValueRef index) {
	LLVMBuilderRef b = l->emit.builder;
	LLVMValueRef base = LLVMBuildIntToPtr(b, address, l->emit.ptr, "");
	return LLVMBuildInBoundsGEP2(b, f8_llvm_storage_type(&l->emit, dtype), base, &index, 1, "");
}

/* A pointer to element `index` of shared array `array`. */
static LLVMValueRef shared_pointer(lowering *l, uint32_t array, LLVMValueRef index) {
	LLVMValueRef indexes[2] = {f8_llvm_i64(&l->emit, 0), index};
	return LLVMBuildInBoundsGEP2(l->emit.builder, l->shared_types[array], l->shared[array],
				     indexes, 2, "");
}

LLVMValueRef f8_llvm_load_stored(lowering *l, uint32_t param, LLVMValueRef index,
				 LLVMValueRef mask) {
	LLVMBuilderRef b = l->emit.builder;
	LLVMTypeRef storage = f8_llvm_storage_type(&l->emit, l->kernel->params[param].dtype);
	if (!mask)
		return LLVMBuildLoad2(b, storage, f8_llvm_element_pointer(l, param, index), "");
	// A branch, not a select: a masked-out index need not be in range.
	LLVMBasicBlockRef before = LLVMGetInsertBlock(b);
	LLVMBasicBlockRef merge = f8_llvm_begin_guard(l, mask);
	LLVMValueRef loaded = LLVMBuildLoad2(b, storage, f8_llvm_element_pointer(l, param, index), "");
	LLVMBasicBlockRef then = LLVMGetInsertBlock(b);
	f8_llvm_end_guard(l, merge);
	LLVMValueRef stored = LLVMBuildPhi(b, storage, "");
	LLVMValueRef incoming[2] = {LLVMConstNull(storage), loaded};
	LLVMBasicBlockRef from[2] = {before, then};
	LLVMAddIncoming(stored, incoming, from, 2);
	return stored;
}

LLVMValueRef f8_llvm_load_value(lowering *l, uint32_t param, LLVMValueRef stored,
				LLVMValueRef mask) {
	f8_dtype dtype = l->kernel->params[param].dtype;
	LLVMValueRef value = f8_llvm_load_convert(&l->emit, dtype, stored);
	if (!mask)
		return value;
	LLVMValueRef zero = LLVMConstNull(register_type(l, f8_kir_type_of_dtype(dtype)));
	return LLVMBuildSelect(l->emit.builder, mask, value, zero, "");
}

f8_status f8_llvm_lower_inst(lowering *l, f8_kir_id id) {
	const f8_kir_inst *inst = &l->kernel->insts[id];
	f8_llvm_emit *e = &l->emit;
	LLVMValueRef value = NULL;
	switch (inst->op) {
	case F8_KIR_OP_CONST:
		value = inst->type == F8_KIR_TYPE_F32	? f8_llvm_f32(e, (float)inst->f)
			: inst->type == F8_KIR_TYPE_I64 ? f8_llvm_i64(e, (uint64_t)inst->i)
							: LLVMConstInt(e->i1, inst->f != 0, false);
		break;
	case F8_KIR_OP_SIZE:
		value = l->args[inst->param];
		break;
	case F8_KIR_OP_LOAD: {
		LLVMValueRef index = f8_llvm_operand(l, inst->a);
		LLVMValueRef mask = inst->b == F8_KIR_NONE ? NULL : f8_llvm_operand(l, inst->b);
		if (!index || (inst->b != F8_KIR_NONE && !mask))
			return l->status;
		value = f8_llvm_load_value(l, inst->param,
					   f8_llvm_load_stored(l, inst->param, index, mask), mask);
		break;
	}
	case F8_KIR_OP_LOAD_SHARED: {
		LLVMValueRef index = f8_llvm_operand(l, inst->a);
		if (!index)
			return l->status;
		f8_dtype dtype = l->kernel->shared[inst->param].dtype;
		LLVMValueRef stored = LLVMBuildLoad2(e->builder, f8_llvm_storage_type(e, dtype),
						     shared_pointer(l, inst->param, index), "");
		value = f8_llvm_load_convert(e, dtype, stored);
		break;
	}
	case F8_KIR_OP_LOAD_PTR: {
		LLVMValueRef address = f8_llvm_operand(l, inst->a), index = f8_llvm_operand(l, inst->b);
		if (!address || !index)
			return l->status;
		LLVMValueRef stored = LLVMBuildLoad2(e->builder, f8_llvm_storage_type(e, inst->dtype),
						     address_pointer(l, inst->dtype, address, index), "");
		value = f8_llvm_load_convert(e, inst->dtype, stored);
		break;
	}
	case F8_KIR_OP_LOOP_VAR:
	case F8_KIR_OP_RESULT:
		return f8_llvm_fail(l, F8_ERR_INVALID, "%%%u = %s is placed as a statement", id,
			    f8_kir_op_name(inst->op));
	default: {
		const f8_kir_id ids[3] = {inst->a, inst->b, inst->c};
		LLVMValueRef operands[3] = {NULL, NULL, NULL};
		for (int i = 0; i < 3 && ids[i] != F8_KIR_NONE; i++)
			if (!(operands[i] = f8_llvm_operand(l, ids[i])))
				return l->status;
		// SELECT's first operand is its condition; its values decide the type.
		f8_kir_id typed = inst->op == F8_KIR_OP_SELECT ? inst->b : inst->a;
		f8_kir_type from = l->kernel->insts[typed].type;
		value = convert(l, inst, from, operands[0]);
		if (!value)
			value = compute(l, inst, from == F8_KIR_TYPE_F32, operands[0], operands[1],
					operands[2]);
		if (!value)
			return l->status;
	}
	}
	l->values[id] = value;
	return F8_OK;
}

/* ---- statements ---- */

LLVMBasicBlockRef f8_llvm_begin_guard(lowering *l, LLVMValueRef condition) {
	LLVMBasicBlockRef then = f8_llvm_append_block(l, "then"), merge = f8_llvm_append_block(l, "merge");
	LLVMBuildCondBr(l->emit.builder, condition, then, merge);
	LLVMPositionBuilderAtEnd(l->emit.builder, then);
	return merge;
}

void f8_llvm_end_guard(lowering *l, LLVMBasicBlockRef merge) {
	LLVMBuildBr(l->emit.builder, merge);
	LLVMPositionBuilderAtEnd(l->emit.builder, merge);
}

/*
 * The threads of a block that run a store or an atomic at `where` (NVPTX; NULL: all). One per
 * row where all threads run the row; the epilogue's atomics of grid results on one thread of
 * every block; other top-level writes once per kernel.
 */
static LLVMValueRef writers(lowering *l, scope where, f8_kir_id value) {
	f8_llvm_emit *e = &l->emit;
	LLVMBuilderRef b = e->builder;
	if (e->target != F8_LLVM_TARGET_NVPTX || where == F8_LLVM_SCOPE_BLOCK ||
	    (where == F8_LLVM_SCOPE_GRID && l->row_per_thread))
		return NULL;
	LLVMValueRef first = l->thread;
	if (where == F8_LLVM_SCOPE_TOP && !l->from_grid[value])
		first = LLVMBuildOr(b, l->thread, l->block, "");
	return LLVMBuildICmp(b, LLVMIntEQ, first, f8_llvm_i64(e, 0), "");
}

/* The writers' condition and the statement's mask (NULL, or an i1), combined (NULL: none). */
static LLVMValueRef write_condition(lowering *l, const f8_kir_stmt *stmt, scope where) {
	LLVMValueRef condition = writers(l, where, stmt->value);
	if (stmt->mask == F8_KIR_NONE)
		return condition;
	LLVMValueRef mask = f8_llvm_operand(l, stmt->mask);
	return condition ? LLVMBuildAnd(l->emit.builder, condition, mask, "") : mask;
}

/* A store to a buffer or, store.ptr, through an address. */
static f8_status lower_store(lowering *l, const f8_kir_stmt *stmt, scope where) {
	bool through = stmt->kind == F8_KIR_STMT_STORE_PTR;
	LLVMValueRef index = f8_llvm_operand(l, stmt->index), value = f8_llvm_operand(l, stmt->value);
	LLVMValueRef address = through ? f8_llvm_operand(l, stmt->address) : NULL;
	if (!index || !value || (through && !address))
		return l->status;
	LLVMValueRef condition = write_condition(l, stmt, where);
	if (l->status)
		return l->status;
	LLVMBasicBlockRef merge = condition ? f8_llvm_begin_guard(l, condition) : NULL;
	f8_dtype dtype = through ? stmt->dtype : l->kernel->params[stmt->param].dtype;
	LLVMBuildStore(l->emit.builder, f8_llvm_store_convert(&l->emit, dtype, value),
		       through ? address_pointer(l, dtype, address, index)
			       : f8_llvm_element_pointer(l, stmt->param, index));
	if (merge)
		f8_llvm_end_guard(l, merge);
	return F8_OK;
}

/* A store to a shared array, by every thread that runs it (block loops only: kir.h). */
static f8_status lower_store_shared(lowering *l, const f8_kir_stmt *stmt) {
	LLVMValueRef index = f8_llvm_operand(l, stmt->index), value = f8_llvm_operand(l, stmt->value);
	if (!index || !value)
		return l->status;
	f8_dtype dtype = l->kernel->shared[stmt->param].dtype;
	LLVMBuildStore(l->emit.builder, f8_llvm_store_convert(&l->emit, dtype, value),
		       shared_pointer(l, stmt->param, index));
	return F8_OK;
}

/*
 * An atomic: atomicrmw on NVPTX (relaxed: the kernel's end orders it), a plain
 * read-modify-write on the host. A max of f32 is an unsigned max of the bit patterns (kir.h);
 * one of -inf is skipped, since its bits would order above every non-negative value.
 */
static f8_status lower_atomic(lowering *l, const f8_kir_stmt *stmt, scope where) {
	f8_llvm_emit *e = &l->emit;
	LLVMBuilderRef b = e->builder;
	LLVMValueRef index = f8_llvm_operand(l, stmt->index), value = f8_llvm_operand(l, stmt->value);
	if (!index || !value)
		return l->status;
	bool real = l->kernel->params[stmt->param].dtype == F8_DTYPE_F32;
	bool max = stmt->combine == F8_KIR_COMBINE_MAX;
	LLVMValueRef condition = write_condition(l, stmt, where);
	if (l->status)
		return l->status;
	if (real && max) {
		value = f8_llvm_bits(e, value);
		LLVMValueRef useful =
			LLVMBuildICmp(b, LLVMIntNE, value, f8_llvm_i32(e, 0xFF800000u), "");
		condition = condition ? LLVMBuildAnd(b, condition, useful, "") : useful;
	}
	LLVMBasicBlockRef merge = condition ? f8_llvm_begin_guard(l, condition) : NULL;
	LLVMValueRef pointer = f8_llvm_element_pointer(l, stmt->param, index);
	if (e->target == F8_LLVM_TARGET_NVPTX) {
		LLVMAtomicRMWBinOp op = real ? LLVMAtomicRMWBinOpFAdd : LLVMAtomicRMWBinOpAdd;
		if (max)
			op = real ? LLVMAtomicRMWBinOpUMax : LLVMAtomicRMWBinOpMax;
		LLVMBuildAtomicRMW(b, op, pointer, value, LLVMAtomicOrderingMonotonic, false);
	} else {
		LLVMValueRef old = LLVMBuildLoad2(b, LLVMTypeOf(value), pointer, "");
		LLVMValueRef combined;
		if (max)
			combined = call2(l, real ? "llvm.umax" : "llvm.smax", LLVMTypeOf(value),
					 old, value);
		else if (real)
			combined = LLVMBuildFAdd(b, old, value, "");
		else
			combined = LLVMBuildAdd(b, old, value, "");
		LLVMBuildStore(b, combined, pointer);
	}
	if (merge)
		f8_llvm_end_guard(l, merge);
	return F8_OK;
}

f8_status f8_llvm_lower_statement(lowering *l, uint32_t index, scope where) {
	const f8_kir_stmt *stmt = &l->kernel->stmts[index];
	switch (stmt->kind) {
	case F8_KIR_STMT_INST:
		return f8_llvm_lower_inst(l, stmt->inst);
	case F8_KIR_STMT_GRID_LOOP:
	case F8_KIR_STMT_BLOCK_LOOP:
		return f8_llvm_lower_loop_statement(l, index);
	case F8_KIR_STMT_STORE:
	case F8_KIR_STMT_STORE_PTR:
		return lower_store(l, stmt, where);
	case F8_KIR_STMT_ATOMIC:
		return lower_atomic(l, stmt, where);
	case F8_KIR_STMT_STORE_SHARED:
		return lower_store_shared(l, stmt);
	default:
		return f8_llvm_fail(l, F8_ERR_INVALID, "a statement of no kind");
	}
}

f8_status f8_llvm_lower_scope(lowering *l, const uint32_t *list, uint32_t n, scope where) {
	f8_status status = F8_OK;
	for (uint32_t i = 0; !status && i < n; i++)
		status = f8_llvm_lower_statement(l, list[i], where);
	return status;
}

/* ---- the kernel ---- */

/* from_grid[id]: instruction id uses a grid loop's result, directly or through its operands.
 * Repeated until nothing changes, so that the table's order does not matter. */
static void mark_from_grid(lowering *l) {
	const f8_kernel *k = l->kernel;
	for (bool changed = true; changed;) {
		changed = false;
		for (f8_kir_id id = 0; id < k->n_insts; id++) {
			const f8_kir_inst *inst = &k->insts[id];
			bool from = inst->op == F8_KIR_OP_RESULT && inst->loop == l->grid_loop;
			const f8_kir_id operands[3] = {inst->a, inst->b, inst->c};
			for (int i = 0; i < 3; i++)
				from |= operands[i] < k->n_insts && l->from_grid[operands[i]];
			if (from && !l->from_grid[id])
				changed = l->from_grid[id] = true;
		}
	}
}

/* A top-level write's per-block meaning (llvm_lower.h): refused when it has none. */
static f8_status check_top_write(lowering *l, uint32_t index) {
	const f8_kernel *k = l->kernel;
	const f8_kir_stmt *stmt = &k->stmts[index];
	const char *name = stmt->kind == F8_KIR_STMT_STORE_PTR ? "an address"
							       : k->params[stmt->param].name;
	if (stmt->kind == F8_KIR_STMT_STORE_PTR && l->from_grid[stmt->address])
		return f8_llvm_fail(l, F8_ERR_UNSUPPORTED, "statement %u stores through an address "
				    "computed from the grid loop's results", index);
	if (l->from_grid[stmt->index])
		return f8_llvm_fail(l, F8_ERR_UNSUPPORTED, "statement %u writes %%%s at an index computed "
			    "from the grid loop's results", index, name);
	if (!l->from_grid[stmt->value])
		return F8_OK;
	const f8_kir_inst *value = &k->insts[stmt->value];
	const f8_kir_stmt *grid = &k->stmts[l->grid_loop];
	if (stmt->kind == F8_KIR_STMT_ATOMIC && value->op == F8_KIR_OP_RESULT &&
	    grid->accumulators[value->accumulator].combine == stmt->combine)
		return F8_OK;
	f8_llvm_fail(l, F8_ERR_UNSUPPORTED, "statement %u %s %%%s a value computed from the grid loop's "
	     "results, which the GPU has only per block", index,
	     stmt->kind == F8_KIR_STMT_ATOMIC ? "combines into" : "stores to", name);
	f8_diag_hint(l->diag, "combine the grid loop's result itself into an acc buffer with an "
		     "atomic of its accumulator's kind, and compute from it in a later kernel");
	return l->status;
}

/* What the targets cannot run, refused before anything is emitted. */
static f8_status check_supported(lowering *l) {
	const f8_kernel *k = l->kernel;
	for (uint32_t i = 0; i < k->n_stmts; i++) {
		const f8_kir_stmt *stmt = &k->stmts[i];
		if (stmt->kind != F8_KIR_STMT_ATOMIC)
			continue;
		f8_dtype dtype = k->params[stmt->param].dtype;
		if (dtype != F8_DTYPE_F32 && dtype != F8_DTYPE_I64) {
			f8_llvm_fail(l, F8_ERR_UNSUPPORTED, "statement %u is an atomic on %%%s of dtype %s",
			     i, k->params[stmt->param].name, f8_dtype_name(dtype));
			f8_diag_hint(l->diag, "accumulate into an f32 or i64 buffer");
			return l->status;
		}
	}
	for (uint32_t i = 0; i < k->n_top; i++) {
		f8_kir_stmt_kind kind = k->stmts[k->top[i]].kind;
		if (kind == F8_KIR_STMT_STORE || kind == F8_KIR_STMT_ATOMIC ||
		    kind == F8_KIR_STMT_STORE_PTR) {
			f8_status status = check_top_write(l, k->top[i]);
			if (status)
				return status;
		}
	}
	return F8_OK;
}

/* Whether instruction `id` is used anywhere but as the value of the grid loop's accumulator
 * `except`. */
static bool used_elsewhere(const f8_kernel *k, f8_kir_id id, uint32_t grid, uint32_t except) {
	for (f8_kir_id i = 0; i < k->n_insts; i++)
		if (k->insts[i].a == id || k->insts[i].b == id || k->insts[i].c == id)
			return true;
	for (uint32_t s = 0; s < k->n_stmts; s++) {
		const f8_kir_stmt *stmt = &k->stmts[s];
		if (stmt->index == id || stmt->value == id || stmt->mask == id ||
		    stmt->extent == id || stmt->address == id)
			return true;
		for (uint32_t a = 0; a < stmt->n_accumulators; a++)
			if (stmt->accumulators[a].value == id && !(s == grid && a == except))
				return true;
	}
	return false;
}

/* NVPTX, a grid loop of block loops: marks each block-loop result whose only use is as a grid
 * accumulator's value of the same combine (deferred), and that grid accumulator (reduced at
 * the grid loop's end); the most accumulators one block reduction then combines. */
static uint32_t defer_reductions(lowering *l) {
	const f8_kernel *k = l->kernel;
	const f8_kir_stmt *grid = &k->stmts[l->grid_loop];
	uint32_t reduced = 0, grid_reduced = 0;
	for (uint32_t i = 0; i < grid->n_body; i++) {
		const f8_kir_stmt *loop = &k->stmts[grid->body[i]];
		if (loop->kind != F8_KIR_STMT_BLOCK_LOOP)
			continue;
		uint32_t kept = 0;
		for (uint32_t a = 0; a < loop->n_accumulators; a++) {
			const f8_kir_accumulator *acc = &loop->accumulators[a];
			for (uint32_t g = 0; g < grid->n_accumulators && !l->deferred[acc->result]; g++) {
				const f8_kir_accumulator *total = &grid->accumulators[g];
				if (total->value == acc->result && total->combine == acc->combine &&
				    total->type == acc->type && !l->grid_reduced[g] &&
				    !used_elsewhere(k, acc->result, l->grid_loop, g)) {
					l->deferred[acc->result] = true;
					l->grid_reduced[g] = true;
					grid_reduced++;
				}
			}
			kept += !l->deferred[acc->result];
		}
		reduced = kept > reduced ? kept : reduced;
	}
	return grid_reduced > reduced ? grid_reduced : reduced;
}

/*
 * NVPTX, a grid loop of block loops: whether a block loop must begin with a barrier. It orders
 * what an earlier block loop or the row's stores wrote (global or shared) before this loop's
 * reads, and frees the reductions' scratch and the shared arrays for reuse by the next row. A
 * grid loop whose body is one block loop without reductions of its own, with no shared arrays
 * and no row stores, needs none of that: its rows share nothing.
 */
static bool needs_barriers(const lowering *l) {
	const f8_kernel *k = l->kernel;
	const f8_kir_stmt *grid = &k->stmts[l->grid_loop];
	uint32_t loops = 0;
	bool alone = k->n_shared == 0;
	for (uint32_t i = 0; i < grid->n_body; i++) {
		const f8_kir_stmt *stmt = &k->stmts[grid->body[i]];
		loops += stmt->kind == F8_KIR_STMT_BLOCK_LOOP;
		alone &= stmt->kind != F8_KIR_STMT_STORE && stmt->kind != F8_KIR_STMT_ATOMIC &&
			 stmt->kind != F8_KIR_STMT_STORE_PTR;
		for (uint32_t a = 0; stmt->kind == F8_KIR_STMT_BLOCK_LOOP && a < stmt->n_accumulators;
		     a++)
			alone &= l->deferred[stmt->accumulators[a].result];
	}
	return !(alone && loops == 1);
}

/* The grid loop, whether it holds block loops, the reductions that wait for the grid's, the
 * barriers and the reductions' scratch size. */
static void analyse(lowering *l) {
	const f8_kernel *k = l->kernel;
	bool gpu = l->emit.target == F8_LLVM_TARGET_NVPTX;
	for (uint32_t i = 0; i < k->n_top; i++)
		if (k->stmts[k->top[i]].kind == F8_KIR_STMT_GRID_LOOP)
			l->grid_loop = k->top[i];
	const f8_kir_stmt *grid = &k->stmts[l->grid_loop];
	l->row_per_thread = true;
	for (uint32_t i = 0; i < grid->n_body; i++)
		l->loops += k->stmts[grid->body[i]].kind == F8_KIR_STMT_BLOCK_LOOP;
	l->row_per_thread = l->loops == 0;
	// the most accumulators one block reduction combines
	uint32_t reduced = l->row_per_thread ? grid->n_accumulators : gpu ? defer_reductions(l) : 0;
	l->barriers = gpu && !l->row_per_thread && needs_barriers(l);
	l->scratch_slots = gpu ? reduced * F8_LLVM_GPU_WARPS : 0;
	mark_from_grid(l);
}

static void annotate(lowering *l, const char *key, uint32_t value) {
	f8_llvm_emit *e = &l->emit;
	LLVMMetadataRef operands[3] = {LLVMValueAsMetadata(l->function),
				       LLVMMDStringInContext2(e->context, key, strlen(key)),
				       LLVMValueAsMetadata(f8_llvm_i32(e, value))};
	LLVMMetadataRef node = LLVMMDNodeInContext2(e->context, operands, 3);
	LLVMAddNamedMetadataOperand(e->module, "nvvm.annotations",
				    LLVMMetadataAsValue(e->context, node));
}

/* "NAME<suffix>" in memory of f8_malloc, or NULL when it runs out. */
static char *suffixed(const char *name, const char *suffix) {
	size_t length = strlen(name) + strlen(suffix) + 1;
	char *text = f8_malloc(length);
	if (text)
		snprintf(text, length, "%s%s", name, suffix);
	return text;
}

static void add_nounwind(lowering *l, LLVMValueRef function) {
	unsigned kind = LLVMGetEnumAttributeKindForName("nounwind", strlen("nounwind"));
	LLVMAddAttributeAtIndex(function, LLVMAttributeFunctionIndex,
				LLVMCreateEnumAttribute(l->emit.context, kind, 0));
}

/*
 * The host's NAME(void **args): loads each parameter through args[i] (a pointer to a buffer
 * pointer or to an int64_t) and calls NAME.body with them.
 */
static void build_host_wrapper(lowering *l, LLVMTypeRef body_type, LLVMTypeRef *params) {
	f8_llvm_emit *e = &l->emit;
	LLVMBuilderRef b = e->builder;
	LLVMTypeRef type = LLVMFunctionType(LLVMVoidTypeInContext(e->context), &e->ptr, 1, false);
	LLVMValueRef wrapper = LLVMAddFunction(e->module, l->kernel->name, type);
	add_nounwind(l, wrapper);
	LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(e->context, wrapper, "entry"));
	uint32_t n = l->kernel->n_params;
	LLVMValueRef *values = l->args; // borrowed until the body's parameters replace them
	for (uint32_t i = 0; i < n; i++) {
		LLVMValueRef index = f8_llvm_i64(e, i);
		LLVMValueRef slot =
			LLVMBuildInBoundsGEP2(b, e->ptr, LLVMGetParam(wrapper, 0), &index, 1, "");
		values[i] = LLVMBuildLoad2(b, params[i], LLVMBuildLoad2(b, e->ptr, slot, ""), "");
	}
	LLVMBuildCall2(b, body_type, l->function, values, n, "");
	LLVMBuildRetVoid(b);
}

/* Declares the kernel's functions and fills l->function and l->args. */
static f8_status declare_kernel(lowering *l) {
	f8_llvm_emit *e = &l->emit;
	const f8_kernel *k = l->kernel;
	if (LLVMGetNamedFunction(e->module, k->name))
		return f8_llvm_fail(l, F8_ERR_INVALID, "a second kernel of this name in one module");
	LLVMTypeRef *params = f8_calloc(k->n_params + 1, sizeof *params);
	if (!params)
		return f8_llvm_fail(l, F8_ERR_NOMEM, "out of memory");
	for (uint32_t i = 0; i < k->n_params; i++)
		params[i] = k->params[i].kind == F8_KERNEL_PARAM_SIZE ? e->i64 : e->ptr;
	LLVMTypeRef type = LLVMFunctionType(LLVMVoidTypeInContext(e->context), params, k->n_params,
					    false);
	if (e->target == F8_LLVM_TARGET_NVPTX) {
		l->function = LLVMAddFunction(e->module, k->name, type);
		LLVMSetFunctionCallConv(l->function, PTX_KERNEL_CALLING_CONV);
		annotate(l, "kernel", 1);
		annotate(l, "maxntidx", F8_LLVM_GPU_THREADS); // what the reductions assume; lets ptxas plan
		if (k->min_blocks_per_sm)
			annotate(l, "minctasm", k->min_blocks_per_sm);
	} else {
		char *name = suffixed(k->name, ".body");
		if (!name) {
			f8_free(params);
			return f8_llvm_fail(l, F8_ERR_NOMEM, "out of memory");
		}
		l->function = LLVMAddFunction(e->module, name, type);
		f8_free(name);
		LLVMSetLinkage(l->function, LLVMInternalLinkage);
		build_host_wrapper(l, type, params);
	}
	f8_free(params);
	add_nounwind(l, l->function);
	for (uint32_t i = 0; i < k->n_params; i++)
		l->args[i] = LLVMGetParam(l->function, i);
	return F8_OK;
}

static LLVMValueRef special_register(lowering *l, const char *name) {
	LLVMValueRef value = f8_llvm_intrinsic(&l->emit, name, NULL, 0, NULL, 0);
	return LLVMBuildZExt(l->emit.builder, value, l->emit.i64, "");
}

/* The shared arrays: NVPTX globals of the shared address space, one per block (named
 * NAME.shared.ARRAY, so that kernels of one module keep theirs apart); on the host, arrays
 * on the stack of each call. 16-byte aligned, so that a vector access may use them. */
static f8_status declare_shared(lowering *l) {
	f8_llvm_emit *e = &l->emit;
	const f8_kernel *k = l->kernel;
	for (uint32_t a = 0; a < k->n_shared; a++) {
		LLVMTypeRef storage = f8_llvm_storage_type(e, k->shared[a].dtype);
		l->shared_types[a] = LLVMArrayType2(storage, k->shared[a].count);
		if (e->target != F8_LLVM_TARGET_NVPTX) {
			l->shared[a] = LLVMBuildAlloca(e->builder, l->shared_types[a], "");
			LLVMSetAlignment(l->shared[a], 16);
			continue;
		}
		char suffix[96];
		snprintf(suffix, sizeof suffix, ".shared.%s", k->shared[a].name);
		char *name = suffixed(k->name, suffix);
		if (!name)
			return f8_llvm_fail(l, F8_ERR_NOMEM, "out of memory");
		l->shared[a] = LLVMAddGlobalInAddressSpace(e->module, l->shared_types[a], name,
							   SHARED_ADDRESS_SPACE);
		f8_free(name);
		LLVMSetLinkage(l->shared[a], LLVMInternalLinkage);
		LLVMSetInitializer(l->shared[a], LLVMGetUndef(l->shared_types[a]));
		LLVMSetAlignment(l->shared[a], 16);
	}
	return F8_OK;
}

/* NVPTX: the thread's coordinates and the block's reduction scratch. */
static f8_status begin_gpu_kernel(lowering *l) {
	f8_llvm_emit *e = &l->emit;
	l->thread = special_register(l, "llvm.nvvm.read.ptx.sreg.tid.x");
	l->block = special_register(l, "llvm.nvvm.read.ptx.sreg.ctaid.x");
	l->blocks = special_register(l, "llvm.nvvm.read.ptx.sreg.nctaid.x");
	if (!l->scratch_slots)
		return F8_OK;
	char *name = suffixed(l->kernel->name, ".scratch");
	if (!name)
		return f8_llvm_fail(l, F8_ERR_NOMEM, "out of memory");
	l->scratch_type = LLVMArrayType2(e->i64, l->scratch_slots);
	l->scratch = LLVMAddGlobalInAddressSpace(e->module, l->scratch_type, name,
						 SHARED_ADDRESS_SPACE);
	f8_free(name);
	LLVMSetLinkage(l->scratch, LLVMInternalLinkage);
	LLVMSetInitializer(l->scratch, LLVMGetUndef(l->scratch_type)); // shared memory has none
	LLVMSetAlignment(l->scratch, 8);
	return F8_OK;
}

static f8_status verify_module(LLVMModuleRef module, const char *what, f8_diag *diag) {
	char *message = NULL;
	bool broken = LLVMVerifyModule(module, LLVMReturnStatusAction, &message);
	f8_status status = F8_OK;
	if (broken)
		status = f8_diag_set(diag, F8_ERR_INVALID, "%s: LLVM IR does not verify: %s", what,
				     message ? message : "");
	LLVMDisposeMessage(message);
	return status;
}

static f8_status lower_kernel(lowering *l) {
	f8_status status = check_supported(l);
	if (!status)
		status = declare_kernel(l);
	if (status)
		return status;
	LLVMPositionBuilderAtEnd(l->emit.builder, f8_llvm_append_block(l, "entry"));
	if (l->emit.target == F8_LLVM_TARGET_NVPTX)
		status = begin_gpu_kernel(l);
	if (!status)
		status = declare_shared(l);
	if (!status)
		status = f8_llvm_lower_scope(l, l->kernel->top, l->kernel->n_top, F8_LLVM_SCOPE_TOP);
	if (status)
		return status;
	LLVMBuildRetVoid(l->emit.builder);
	return verify_module(l->emit.module, l->kernel->name, l->diag);
}

f8_status f8_llvm_lower(LLVMModuleRef module, const f8_kernel *kernel, f8_llvm_target target,
			f8_launch_geometry *geometry, f8_diag *diag) {
	f8_status status = f8_kir_verify(kernel, diag);
	if (status)
		return status;
	lowering l = {.kernel = kernel, .diag = diag};
	l.emit.context = LLVMGetModuleContext(module);
	l.emit.module = module;
	l.emit.target = target;
	f8_llvm_emit_types(&l.emit);
	l.args = f8_calloc(kernel->n_params + 1, sizeof *l.args);
	l.values = f8_calloc(kernel->n_insts + 1, sizeof *l.values);
	l.from_grid = f8_calloc(kernel->n_insts + 1, sizeof *l.from_grid);
	l.deferred = f8_calloc(kernel->n_insts + 1, sizeof *l.deferred);
	l.shared = f8_calloc(kernel->n_shared + 1, sizeof *l.shared);
	l.shared_types = f8_calloc(kernel->n_shared + 1, sizeof *l.shared_types);
	uint32_t grid_accumulators = 0;
	for (uint32_t i = 0; i < kernel->n_top; i++)
		grid_accumulators += kernel->stmts[kernel->top[i]].n_accumulators;
	l.grid_reduced = f8_calloc(grid_accumulators + 1, sizeof *l.grid_reduced);
	l.emit.builder = LLVMCreateBuilderInContext(l.emit.context);
	if (!l.args || !l.values || !l.from_grid || !l.deferred || !l.shared || !l.shared_types ||
	    !l.grid_reduced) {
		status = f8_llvm_fail(&l, F8_ERR_NOMEM, "out of memory");
	} else {
		analyse(&l);
		status = lower_kernel(&l);
	}
	LLVMDisposeBuilder(l.emit.builder);
	f8_free(l.args);
	f8_free(l.values);
	f8_free(l.from_grid);
	f8_free(l.deferred);
	f8_free(l.shared);
	f8_free(l.shared_types);
	f8_free(l.grid_reduced);
	bool gpu = target == F8_LLVM_TARGET_NVPTX;
	uint32_t shared = 0, divisor = kernel->grid_divisor ? kernel->grid_divisor : 1;
	for (uint32_t a = 0; a < kernel->n_shared; a++)
		shared += kernel->shared[a].count *
			  (uint32_t)f8_dtype_get_info(kernel->shared[a].dtype)->bytes;
	*geometry = (f8_launch_geometry){
		.threads_per_block = gpu ? F8_LLVM_GPU_THREADS : 1,
		.rows_per_block = gpu ? (l.row_per_thread ? F8_LLVM_GPU_THREADS : 1) * divisor : 1,
		.max_blocks = gpu ? GPU_MAX_BLOCKS : 1,
		.shared_bytes = gpu ? l.scratch_slots * 8 + shared : 0,
	};
	return status;
}

f8_status f8_llvm_optimize(LLVMModuleRef module, LLVMTargetMachineRef machine, f8_diag *diag) {
	f8_status status = verify_module(module, "module", diag);
	if (status)
		return status;
	LLVMPassBuilderOptionsRef options = LLVMCreatePassBuilderOptions();
	LLVMErrorRef error = LLVMRunPasses(module, F8_LLVM_PIPELINE, machine, options);
	LLVMDisposePassBuilderOptions(options);
	if (!error)
		return F8_OK;
	char *message = LLVMGetErrorMessage(error);
	status = f8_diag_set(diag, F8_ERR_INVALID, "LLVM's optimizer failed: %s", message);
	LLVMDisposeErrorMessage(message);
	return status;
}
