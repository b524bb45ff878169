/*
 * Kernel IR -> LLVM IR (codegen/llvm_lower.h): the functions and their ABI, the loops and how
 * they map onto the GPU's blocks and threads, the block reductions, stores and atomics, and
 * each instruction. Element conversions are in llvm_convert.c, exp/log/tanh/erf in
 * llvm_math.c.
 *
 * The statements are lowered in order, scope by scope; `values[id]` holds each instruction's
 * LLVM value once its statement (or, for loop variables and results, its loop) has been
 * lowered. A loop is a header with one phi for the variable and one per accumulator, the body,
 * and a latch that combines each accumulator with its per-iteration value.
 */
#include "codegen/llvm_lower.h" // f8_llvm_lower, f8_llvm_optimize, f8_llvm_geometry

#include <stdarg.h>  // va_list
#include <stdbool.h> // bool
#include <stdio.h>   // vsnprintf, snprintf
#include <string.h>  // strlen

#include <llvm-c/Analysis.h>               // LLVMVerifyModule
#include <llvm-c/Transforms/PassBuilder.h> // LLVMRunPasses

#include "codegen/llvm_internal.h" // f8_llvm_emit, f8_llvm_load_convert, f8_llvm_math
#include "ir/alloc.h"              // f8_calloc, f8_malloc, f8_free

enum {
	GPU_THREADS = 256,             // threads per block
	GPU_WARPS = GPU_THREADS / 32,  // warps per block: the reductions' shared slots per value
	GPU_MAX_BLOCKS = 132 * 8,      // the H200's SMs, 8 resident blocks of 256 threads each
	PTX_KERNEL_CALLING_CONV = 71,  // LLVM's CallingConv::PTX_Kernel
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

/* Where a statement is: it decides which threads of a block run a store or an atomic. */
typedef enum scope { SCOPE_TOP, SCOPE_GRID, SCOPE_BLOCK } scope;

typedef struct lowering {
	f8_llvm_emit emit;
	const f8_kernel *kernel;
	f8_diag *diag;
	f8_status status;        // the first failure
	LLVMValueRef function;   // the kernel proper (NVPTX: the entry; host: NAME.body)
	LLVMValueRef *args;      // (n_params) its parameters
	LLVMValueRef *values;    // (n_insts) the lowered instructions, NULL until lowered
	bool *from_grid;         // (n_insts) computed from a result of the grid loop
	uint32_t grid_loop;      // its statement index
	bool row_per_thread;     // NVPTX: the grid loop holds no block loop
	LLVMValueRef thread;     // NVPTX: threadIdx.x, blockIdx.x, gridDim.x as i64
	LLVMValueRef block, blocks;
	LLVMValueRef scratch;    // NVPTX: [scratch_slots x i64] in shared memory, or NULL
	LLVMTypeRef scratch_type;
	uint32_t scratch_slots;
} lowering;

static f8_status fail(lowering *l, f8_status status, const char *format, ...)
	__attribute__((format(printf, 3, 4)));
static f8_status fail(lowering *l, f8_status status, const char *format, ...) {
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

static LLVMBasicBlockRef append_block(lowering *l, const char *name) {
	return LLVMAppendBasicBlockInContext(l->emit.context, l->function, name);
}

/* The value of instruction `id`, lowered before; NULL (and the failure) when it was not. */
static LLVMValueRef operand(lowering *l, f8_kir_id id) {
	if (id < l->kernel->n_insts && l->values[id])
		return l->values[id];
	fail(l, F8_ERR_INVALID, "%%%u is used before it is computed", id);
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
		return f8_llvm_math(e, inst->op, a);
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
	fail(l, F8_ERR_UNSUPPORTED, "no lowering of %s", f8_kir_op_name(inst->op));
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

static LLVMValueRef element_pointer(lowering *l, uint32_t param, LLVMValueRef index) {
	f8_dtype dtype = l->kernel->params[param].dtype;
	return LLVMBuildInBoundsGEP2(l->emit.builder, f8_llvm_storage_type(&l->emit, dtype),
				     l->args[param], &index, 1, "");
}

static f8_status lower_inst(lowering *l, f8_kir_id id) {
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
		LLVMValueRef index = operand(l, inst->a);
		if (!index)
			return l->status;
		f8_dtype dtype = l->kernel->params[inst->param].dtype;
		LLVMValueRef stored = LLVMBuildLoad2(e->builder, f8_llvm_storage_type(e, dtype),
						     element_pointer(l, inst->param, index), "");
		value = f8_llvm_load_convert(e, dtype, stored);
		break;
	}
	case F8_KIR_OP_LOOP_VAR:
	case F8_KIR_OP_RESULT:
		return fail(l, F8_ERR_INVALID, "%%%u = %s is placed as a statement", id,
			    f8_kir_op_name(inst->op));
	default: {
		const f8_kir_id ids[3] = {inst->a, inst->b, inst->c};
		LLVMValueRef operands[3] = {NULL, NULL, NULL};
		for (int i = 0; i < 3 && ids[i] != F8_KIR_NONE; i++)
			if (!(operands[i] = operand(l, ids[i])))
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

/* ---- accumulators and reductions ---- */

static LLVMValueRef identity(lowering *l, const f8_kir_accumulator *acc) {
	bool real = acc->type == F8_KIR_TYPE_F32;
	if (acc->combine == F8_KIR_COMBINE_ADD)
		return real ? f8_llvm_f32(&l->emit, 0.0f) : f8_llvm_i64(&l->emit, 0);
	return real ? f8_llvm_f32(&l->emit, -__builtin_inff())
		    : f8_llvm_i64(&l->emit, (uint64_t)1 << 63);
}

static LLVMValueRef combine(lowering *l, const f8_kir_accumulator *acc, LLVMValueRef a,
			    LLVMValueRef b) {
	bool real = acc->type == F8_KIR_TYPE_F32;
	LLVMTypeRef type = register_type(l, acc->type);
	if (acc->combine == F8_KIR_COMBINE_ADD)
		return real ? LLVMBuildFAdd(l->emit.builder, a, b, "")
			    : LLVMBuildAdd(l->emit.builder, a, b, "");
	return call2(l, real ? "llvm.maximum" : "llvm.smax", type, a, b);
}

static LLVMValueRef nvvm(lowering *l, const char *name, LLVMValueRef *args, unsigned n_args) {
	return f8_llvm_intrinsic(&l->emit, name, NULL, 0, args, n_args);
}

static void barrier(lowering *l) {
	nvvm(l, "llvm.nvvm.barrier0", NULL, 0);
}

/* `value` of the lane `offset` away in a butterfly (lane ^ offset) of the whole warp. */
static LLVMValueRef shuffle(lowering *l, LLVMValueRef value, uint32_t offset) {
	f8_llvm_emit *e = &l->emit;
	LLVMBuilderRef b = e->builder;
	LLVMValueRef args[4] = {f8_llvm_i32(e, 0xFFFFFFFFu), value, f8_llvm_i32(e, offset),
				f8_llvm_i32(e, 0x1F)};
	if (LLVMTypeOf(value) == e->f32)
		return nvvm(l, "llvm.nvvm.shfl.sync.bfly.f32", args, 4);
	// An i64 travels as its two halves.
	LLVMValueRef low = LLVMBuildTrunc(b, value, e->i32, "");
	LLVMValueRef high = LLVMBuildLShr(b, value, f8_llvm_i64(e, 32), "");
	high = LLVMBuildTrunc(b, high, e->i32, "");
	args[1] = low;
	low = LLVMBuildZExt(b, nvvm(l, "llvm.nvvm.shfl.sync.bfly.i32", args, 4), e->i64, "");
	args[1] = high;
	high = LLVMBuildZExt(b, nvvm(l, "llvm.nvvm.shfl.sync.bfly.i32", args, 4), e->i64, "");
	return LLVMBuildOr(b, LLVMBuildShl(b, high, f8_llvm_i64(e, 32), ""), low, "");
}

static LLVMValueRef scratch_slot(lowering *l, LLVMValueRef slot) {
	LLVMValueRef indexes[2] = {f8_llvm_i64(&l->emit, 0), slot};
	return LLVMBuildInBoundsGEP2(l->emit.builder, l->scratch_type, l->scratch, indexes, 2, "");
}

/* Opens `if (condition) {`; end_guard closes it. Stores and atomics make no values, so
 * nothing flows out of the guarded block. */
static LLVMBasicBlockRef begin_guard(lowering *l, LLVMValueRef condition) {
	LLVMBasicBlockRef then = append_block(l, "then"), merge = append_block(l, "merge");
	LLVMBuildCondBr(l->emit.builder, condition, then, merge);
	LLVMPositionBuilderAtEnd(l->emit.builder, then);
	return merge;
}

static void end_guard(lowering *l, LLVMBasicBlockRef merge) {
	LLVMBuildBr(l->emit.builder, merge);
	LLVMPositionBuilderAtEnd(l->emit.builder, merge);
}

/*
 * Combines each thread's `values` (n, one per accumulator) over the block: a butterfly over the
 * warp, lane 0 of each warp writes its warp's value to the scratch, a barrier, then every
 * thread combines the warps' values in warp order, so all get the same bits. The scratch is
 * free again after the next barrier, which every block loop starts with.
 */
static void block_reduce(lowering *l, const f8_kir_accumulator *accs, uint32_t n,
			 LLVMValueRef *values) {
	f8_llvm_emit *e = &l->emit;
	LLVMBuilderRef b = e->builder;
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t offset = 16; offset >= 1; offset /= 2)
			values[i] = combine(l, &accs[i], values[i], shuffle(l, values[i], offset));
	LLVMValueRef lane = LLVMBuildAnd(b, l->thread, f8_llvm_i64(e, 31), "");
	LLVMValueRef warp = LLVMBuildLShr(b, l->thread, f8_llvm_i64(e, 5), "");
	LLVMBasicBlockRef merge =
		begin_guard(l, LLVMBuildICmp(b, LLVMIntEQ, lane, f8_llvm_i64(e, 0), ""));
	for (uint32_t i = 0; i < n; i++) {
		LLVMValueRef slot = LLVMBuildAdd(b, f8_llvm_i64(e, i * GPU_WARPS), warp, "");
		LLVMSetAlignment(LLVMBuildStore(b, values[i], scratch_slot(l, slot)), 8);
	}
	end_guard(l, merge);
	barrier(l);
	for (uint32_t i = 0; i < n; i++) {
		LLVMTypeRef type = register_type(l, accs[i].type);
		LLVMValueRef total = NULL;
		for (uint32_t w = 0; w < GPU_WARPS; w++) {
			LLVMValueRef slot = scratch_slot(l, f8_llvm_i64(e, i * GPU_WARPS + w));
			LLVMValueRef part = LLVMBuildLoad2(b, type, slot, "");
			LLVMSetAlignment(part, 8);
			total = total ? combine(l, &accs[i], total, part) : part;
		}
		values[i] = total;
	}
}

/* ---- statements ---- */

static f8_status lower_scope(lowering *l, const uint32_t *list, uint32_t n, scope where);

/*
 * Lowers loop `index` from `start` by `step` while the variable is below the extent; each
 * accumulator's combined value after the loop (this thread's share on the GPU) into
 * `partials`.
 */
static f8_status lower_loop(lowering *l, uint32_t index, LLVMValueRef start, LLVMValueRef step,
			    scope body_scope, LLVMValueRef *partials) {
	const f8_kir_stmt *loop = &l->kernel->stmts[index];
	f8_llvm_emit *e = &l->emit;
	LLVMBuilderRef b = e->builder;
	LLVMValueRef extent = operand(l, loop->extent);
	if (!extent)
		return l->status;
	LLVMBasicBlockRef entry = LLVMGetInsertBlock(b);
	LLVMBasicBlockRef header = append_block(l, "loop"), body = append_block(l, "body");
	LLVMBasicBlockRef done = append_block(l, "done");
	LLVMBuildBr(b, header);
	LLVMPositionBuilderAtEnd(b, header);
	LLVMValueRef var = LLVMBuildPhi(b, e->i64, "");
	for (uint32_t i = 0; i < loop->n_accumulators; i++)
		partials[i] = LLVMBuildPhi(b, register_type(l, loop->accumulators[i].type), "");
	LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, var, extent, ""), body, done);
	LLVMPositionBuilderAtEnd(b, body);
	l->values[loop->var] = var;
	f8_status status = lower_scope(l, loop->body, loop->n_body, body_scope);
	if (status)
		return status;
	LLVMBasicBlockRef latch = LLVMGetInsertBlock(b);
	for (uint32_t i = 0; i < loop->n_accumulators; i++) {
		const f8_kir_accumulator *acc = &loop->accumulators[i];
		LLVMValueRef value = operand(l, acc->value);
		if (!value)
			return l->status;
		LLVMValueRef incoming[2] = {identity(l, acc), combine(l, acc, partials[i], value)};
		LLVMBasicBlockRef from[2] = {entry, latch};
		LLVMAddIncoming(partials[i], incoming, from, 2);
	}
	LLVMValueRef incoming[2] = {start, LLVMBuildAdd(b, var, step, "")};
	LLVMBasicBlockRef from[2] = {entry, latch};
	LLVMAddIncoming(var, incoming, from, 2);
	LLVMBuildBr(b, header);
	LLVMPositionBuilderAtEnd(b, done);
	return F8_OK;
}

/* A grid or block loop: where it starts and how it strides on this target, and its results. */
static f8_status lower_loop_statement(lowering *l, uint32_t index) {
	const f8_kir_stmt *loop = &l->kernel->stmts[index];
	f8_llvm_emit *e = &l->emit;
	LLVMBuilderRef b = e->builder;
	bool grid = loop->kind == F8_KIR_STMT_GRID_LOOP;
	bool gpu = e->target == F8_LLVM_TARGET_NVPTX;
	LLVMValueRef start = f8_llvm_i64(e, 0), step = f8_llvm_i64(e, 1);
	LLVMValueRef threads = f8_llvm_i64(e, GPU_THREADS);
	if (gpu && grid && l->row_per_thread) {
		start = LLVMBuildAdd(b, LLVMBuildMul(b, l->block, threads, ""), l->thread, "");
		step = LLVMBuildMul(b, l->blocks, threads, "");
	} else if (gpu && grid) {
		start = l->block;
		step = l->blocks;
	} else if (gpu) {
		barrier(l);
		start = l->thread;
		step = threads;
	}
	LLVMValueRef *partials = f8_calloc(loop->n_accumulators + 1, sizeof *partials);
	if (!partials)
		return fail(l, F8_ERR_NOMEM, "out of memory");
	f8_status status =
		lower_loop(l, index, start, step, grid ? SCOPE_GRID : SCOPE_BLOCK, partials);
	// Rows per block: every thread ran every row of its block, so each holds the block's share
	// of a grid accumulator already; the threads' shares differ where they split the work.
	bool split = gpu && (grid ? l->row_per_thread : true);
	if (!status && split && loop->n_accumulators)
		block_reduce(l, loop->accumulators, loop->n_accumulators, partials);
	for (uint32_t i = 0; !status && i < loop->n_accumulators; i++)
		l->values[loop->accumulators[i].result] = partials[i];
	f8_free(partials);
	return status;
}

/*
 * The threads of a block that run a store or an atomic at `where` (NVPTX; NULL: all). One per
 * row where all threads run the row; the epilogue's atomics of grid results on one thread of
 * every block; other top-level writes once per kernel.
 */
static LLVMValueRef writers(lowering *l, scope where, f8_kir_id value) {
	f8_llvm_emit *e = &l->emit;
	LLVMBuilderRef b = e->builder;
	if (e->target != F8_LLVM_TARGET_NVPTX || where == SCOPE_BLOCK ||
	    (where == SCOPE_GRID && l->row_per_thread))
		return NULL;
	LLVMValueRef first = l->thread;
	if (where == SCOPE_TOP && !l->from_grid[value])
		first = LLVMBuildOr(b, l->thread, l->block, "");
	return LLVMBuildICmp(b, LLVMIntEQ, first, f8_llvm_i64(e, 0), "");
}

static f8_status lower_store(lowering *l, const f8_kir_stmt *stmt, scope where) {
	LLVMValueRef index = operand(l, stmt->index), value = operand(l, stmt->value);
	if (!index || !value)
		return l->status;
	LLVMValueRef condition = writers(l, where, stmt->value);
	LLVMBasicBlockRef merge = condition ? begin_guard(l, condition) : NULL;
	f8_dtype dtype = l->kernel->params[stmt->param].dtype;
	LLVMBuildStore(l->emit.builder, f8_llvm_store_convert(&l->emit, dtype, value),
		       element_pointer(l, stmt->param, index));
	if (merge)
		end_guard(l, merge);
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
	LLVMValueRef index = operand(l, stmt->index), value = operand(l, stmt->value);
	if (!index || !value)
		return l->status;
	bool real = l->kernel->params[stmt->param].dtype == F8_DTYPE_F32;
	bool max = stmt->combine == F8_KIR_COMBINE_MAX;
	LLVMValueRef condition = writers(l, where, stmt->value);
	if (real && max) {
		value = f8_llvm_bits(e, value);
		LLVMValueRef useful =
			LLVMBuildICmp(b, LLVMIntNE, value, f8_llvm_i32(e, 0xFF800000u), "");
		condition = condition ? LLVMBuildAnd(b, condition, useful, "") : useful;
	}
	LLVMBasicBlockRef merge = condition ? begin_guard(l, condition) : NULL;
	LLVMValueRef pointer = element_pointer(l, stmt->param, index);
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
		end_guard(l, merge);
	return F8_OK;
}

static f8_status lower_scope(lowering *l, const uint32_t *list, uint32_t n, scope where) {
	f8_status status = F8_OK;
	for (uint32_t i = 0; !status && i < n; i++) {
		const f8_kir_stmt *stmt = &l->kernel->stmts[list[i]];
		switch (stmt->kind) {
		case F8_KIR_STMT_INST:
			status = lower_inst(l, stmt->inst);
			break;
		case F8_KIR_STMT_GRID_LOOP:
		case F8_KIR_STMT_BLOCK_LOOP:
			status = lower_loop_statement(l, list[i]);
			break;
		case F8_KIR_STMT_STORE:
			status = lower_store(l, stmt, where);
			break;
		case F8_KIR_STMT_ATOMIC:
			status = lower_atomic(l, stmt, where);
			break;
		default:
			status = fail(l, F8_ERR_INVALID, "a statement of no kind");
		}
	}
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
	const char *name = k->params[stmt->param].name;
	if (l->from_grid[stmt->index])
		return fail(l, F8_ERR_UNSUPPORTED, "statement %u writes %%%s at an index computed "
			    "from the grid loop's results", index, name);
	if (!l->from_grid[stmt->value])
		return F8_OK;
	const f8_kir_inst *value = &k->insts[stmt->value];
	const f8_kir_stmt *grid = &k->stmts[l->grid_loop];
	if (stmt->kind == F8_KIR_STMT_ATOMIC && value->op == F8_KIR_OP_RESULT &&
	    grid->accumulators[value->accumulator].combine == stmt->combine)
		return F8_OK;
	fail(l, F8_ERR_UNSUPPORTED, "statement %u %s %%%s a value computed from the grid loop's "
	     "results, which the GPU has only per block", index,
	     stmt->kind == F8_KIR_STMT_STORE ? "stores to" : "combines into", name);
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
			fail(l, F8_ERR_UNSUPPORTED, "statement %u is an atomic on %%%s of dtype %s",
			     i, k->params[stmt->param].name, f8_dtype_name(dtype));
			f8_diag_hint(l->diag, "accumulate into an f32 or i64 buffer");
			return l->status;
		}
	}
	for (uint32_t i = 0; i < k->n_top; i++) {
		f8_kir_stmt_kind kind = k->stmts[k->top[i]].kind;
		if (kind == F8_KIR_STMT_STORE || kind == F8_KIR_STMT_ATOMIC) {
			f8_status status = check_top_write(l, k->top[i]);
			if (status)
				return status;
		}
	}
	return F8_OK;
}

/* The grid loop, whether it holds block loops, and the reductions' scratch size. */
static void analyse(lowering *l) {
	const f8_kernel *k = l->kernel;
	for (uint32_t i = 0; i < k->n_top; i++)
		if (k->stmts[k->top[i]].kind == F8_KIR_STMT_GRID_LOOP)
			l->grid_loop = k->top[i];
	const f8_kir_stmt *grid = &k->stmts[l->grid_loop];
	l->row_per_thread = true;
	uint32_t reduced = 0; // the most accumulators one block reduction combines
	for (uint32_t i = 0; i < grid->n_body; i++) {
		const f8_kir_stmt *stmt = &k->stmts[grid->body[i]];
		if (stmt->kind != F8_KIR_STMT_BLOCK_LOOP)
			continue;
		l->row_per_thread = false;
		if (stmt->n_accumulators > reduced)
			reduced = stmt->n_accumulators;
	}
	if (l->row_per_thread)
		reduced = grid->n_accumulators;
	l->scratch_slots = l->emit.target == F8_LLVM_TARGET_NVPTX ? reduced * GPU_WARPS : 0;
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
		return fail(l, F8_ERR_INVALID, "a second kernel of this name in one module");
	LLVMTypeRef *params = f8_calloc(k->n_params + 1, sizeof *params);
	if (!params)
		return fail(l, F8_ERR_NOMEM, "out of memory");
	for (uint32_t i = 0; i < k->n_params; i++)
		params[i] = k->params[i].kind == F8_KIR_PARAM_SIZE ? e->i64 : e->ptr;
	LLVMTypeRef type = LLVMFunctionType(LLVMVoidTypeInContext(e->context), params, k->n_params,
					    false);
	if (e->target == F8_LLVM_TARGET_NVPTX) {
		l->function = LLVMAddFunction(e->module, k->name, type);
		LLVMSetFunctionCallConv(l->function, PTX_KERNEL_CALLING_CONV);
		annotate(l, "kernel", 1);
		annotate(l, "maxntidx", GPU_THREADS); // what the reductions assume; lets ptxas plan
	} else {
		char *name = suffixed(k->name, ".body");
		if (!name) {
			f8_free(params);
			return fail(l, F8_ERR_NOMEM, "out of memory");
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
	return LLVMBuildZExt(l->emit.builder, nvvm(l, name, NULL, 0), l->emit.i64, "");
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
		return fail(l, F8_ERR_NOMEM, "out of memory");
	l->scratch_type = LLVMArrayType2(e->i64, l->scratch_slots);
	l->scratch = LLVMAddGlobalInAddressSpace(e->module, l->scratch_type, name, 3);
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
	LLVMPositionBuilderAtEnd(l->emit.builder, append_block(l, "entry"));
	if (l->emit.target == F8_LLVM_TARGET_NVPTX)
		status = begin_gpu_kernel(l);
	if (!status)
		status = lower_scope(l, l->kernel->top, l->kernel->n_top, SCOPE_TOP);
	if (status)
		return status;
	LLVMBuildRetVoid(l->emit.builder);
	return verify_module(l->emit.module, l->kernel->name, l->diag);
}

f8_status f8_llvm_lower(LLVMModuleRef module, const f8_kernel *kernel, f8_llvm_target target,
			f8_llvm_geometry *geometry, f8_diag *diag) {
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
	l.emit.builder = LLVMCreateBuilderInContext(l.emit.context);
	if (!l.args || !l.values || !l.from_grid) {
		status = fail(&l, F8_ERR_NOMEM, "out of memory");
	} else {
		analyse(&l);
		status = lower_kernel(&l);
	}
	LLVMDisposeBuilder(l.emit.builder);
	f8_free(l.args);
	f8_free(l.values);
	f8_free(l.from_grid);
	bool gpu = target == F8_LLVM_TARGET_NVPTX;
	*geometry = (f8_llvm_geometry){
		.threads_per_block = gpu ? GPU_THREADS : 1,
		.rows_per_block = gpu && l.row_per_thread ? GPU_THREADS : 1,
		.max_blocks = gpu ? GPU_MAX_BLOCKS : 1,
		.shared_bytes = l.scratch_slots * 8,
	};
	return status;
}

f8_status f8_llvm_optimize(LLVMModuleRef module, LLVMTargetMachineRef machine, f8_diag *diag) {
	f8_status status = verify_module(module, "module", diag);
	if (status)
		return status;
	LLVMPassBuilderOptionsRef options = LLVMCreatePassBuilderOptions();
	LLVMErrorRef error = LLVMRunPasses(module, "default<O2>", machine, options);
	LLVMDisposePassBuilderOptions(options);
	if (!error)
		return F8_OK;
	char *message = LLVMGetErrorMessage(error);
	status = f8_diag_set(diag, F8_ERR_INVALID, "LLVM's optimizer failed: %s", message);
	LLVMDisposeErrorMessage(message);
	return status;
}
