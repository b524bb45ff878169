/*
 * The loops of the LLVM lowering (codegen/llvm_internal.h): how a grid or block loop maps onto
 * the GPU's blocks and threads (codegen/llvm_lower.h), its accumulators and their block
 * reductions, and the vector form of a loop's body on NVPTX.
 *
 * A loop is a header with one phi for the variable and one per accumulator, the body, and a
 * latch that combines each accumulator with its per-iteration value.
 *
 * The vector form. On NVPTX, a block loop, or a grid loop that runs one row per thread, whose
 * body loads or stores a buffer at consecutive elements for consecutive iterations runs W
 * consecutive iterations a thread (a chunk; W from 2 to 16, the most that keeps the widest
 * such access within 16 bytes), then the iterations left over one a thread as the scalar loop
 * does. The chunk's W copies of the body ("lanes") are emitted statement by statement, the
 * lanes of each statement together: each iteration keeps its own order, and iterations are
 * independent (kir.h). A load or store whose index is the chunk's first index plus the lane
 * ("linear") is one access of W elements where its address is aligned to the access's size and
 * every lane's mask holds, both checked at run time, and W scalar accesses otherwise; FP8
 * stores convert two lanes with one cvt. Everything else is the scalar lowering once per lane.
 * Which indexes are linear is found from their instructions (lane_class below).
 */
#include "codegen/llvm_internal.h" // f8_llvm_lowering, f8_llvm_lower_inst

#include <stdbool.h> // bool
#include <string.h>  // strlen

#include "ir/alloc.h" // f8_calloc, f8_free

typedef f8_llvm_lowering lowering;

static LLVMTypeRef register_type(const lowering *l, f8_kir_type type) {
	return type == F8_KIR_TYPE_F32 ? l->emit.f32 : type == F8_KIR_TYPE_I64 ? l->emit.i64
									     : l->emit.i1;
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
	LLVMValueRef args[2] = {a, b};
	return f8_llvm_intrinsic(&l->emit, real ? "llvm.maximum" : "llvm.smax", &type, 1, args, 2);
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

/*
 * Combines each thread's `values` (n, one per accumulator) over the block: a butterfly over the
 * warp, lane 0 of each warp writes its warp's value to the scratch, a barrier, then every
 * thread combines the warps' values in warp order, so all get the same bits. The scratch is
 * free again after the next barrier: every block loop that reduces starts with one
 * (llvm_lower.c's analysis keeps them where a reduction follows), and the grid loop's
 * reduction comes after the last row.
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
		f8_llvm_begin_guard(l, LLVMBuildICmp(b, LLVMIntEQ, lane, f8_llvm_i64(e, 0), ""));
	for (uint32_t i = 0; i < n; i++) {
		LLVMValueRef slot = LLVMBuildAdd(b, f8_llvm_i64(e, i * F8_LLVM_GPU_WARPS), warp, "");
		LLVMSetAlignment(LLVMBuildStore(b, values[i], scratch_slot(l, slot)), 8);
	}
	f8_llvm_end_guard(l, merge);
	barrier(l);
	for (uint32_t i = 0; i < n; i++) {
		LLVMTypeRef type = register_type(l, accs[i].type);
		LLVMValueRef total = NULL;
		for (uint32_t w = 0; w < F8_LLVM_GPU_WARPS; w++) {
			LLVMValueRef slot = scratch_slot(l, f8_llvm_i64(e, i * F8_LLVM_GPU_WARPS + w));
			LLVMValueRef part = LLVMBuildLoad2(b, type, slot, "");
			LLVMSetAlignment(part, 8);
			total = total ? combine(l, &accs[i], total, part) : part;
		}
		values[i] = total;
	}
}

/* Reduces over the block those of the loop's accumulators that `chosen` marks (NULL: all). */
static f8_status reduce_chosen(lowering *l, const f8_kir_stmt *loop, const bool *chosen,
			       LLVMValueRef *partials) {
	uint32_t n = loop->n_accumulators, k = 0;
	f8_kir_accumulator *accs = f8_calloc(n + 1, sizeof *accs);
	LLVMValueRef *values = f8_calloc(n + 1, sizeof *values);
	if (!accs || !values) {
		f8_free(accs);
		f8_free(values);
		return f8_llvm_fail(l, F8_ERR_NOMEM, "out of memory");
	}
	for (uint32_t i = 0; i < n; i++)
		if (!chosen || chosen[i]) {
			accs[k] = loop->accumulators[i];
			values[k++] = partials[i];
		}
	if (k)
		block_reduce(l, accs, k, values);
	k = 0;
	for (uint32_t i = 0; i < n; i++)
		if (!chosen || chosen[i])
			partials[i] = values[k++];
	f8_free(accs);
	f8_free(values);
	return F8_OK;
}

/* ---- the vector form: which values are linear in the lane ---- */

/*
 * How a body instruction's value varies over the W lanes of a chunk whose first iteration is
 * a multiple of W: the same in every lane (UNIFORM), its value in lane 0 plus the lane
 * (LINEAR), that and a multiple of W in lane 0 (ALIGNED), or otherwise (OTHER).
 */
typedef enum lane_class { LANE_OTHER, LANE_UNIFORM, LANE_LINEAR, LANE_ALIGNED } lane_class;

typedef struct vector_body {
	uint32_t width;      // W: the iterations of a chunk
	uint32_t chunks;     // U: the chunks a thread runs at once (their lanes: W * U)
	uint32_t most;       // the most chunks at once the loop allows (choose_width)
	f8_kir_id var;       // the loop's variable
	bool *in_body;       // (n_insts) placed in the body, or the variable
	lane_class *classes; // (n_insts) of the body's instructions
	LLVMValueRef *lanes; // (n_insts * W * most) each body instruction's value in each lane
} vector_body;

/* The lanes of the chunks a thread runs at once: lane u W + j is iteration j of chunk u. */
static uint32_t lanes_of(const vector_body *v) {
	return v->width * v->chunks;
}

/* Where instruction `id`'s value in lane `lane` is kept in v->lanes. */
static size_t lane_slot(const vector_body *v, f8_kir_id id, uint32_t lane) {
	return (size_t)id * v->width * v->most + lane;
}

static lane_class class_of(const vector_body *v, f8_kir_id id) {
	return id == F8_KIR_NONE || !v->in_body[id] ? LANE_UNIFORM : v->classes[id];
}

/* Whether i64 value `id` is a known multiple of `w`, from constants and products. */
static bool multiple_of(const f8_kernel *k, f8_kir_id id, int64_t w, int depth) {
	const f8_kir_inst *inst = &k->insts[id];
	if (depth > 8 || inst->type != F8_KIR_TYPE_I64)
		return false;
	switch (inst->op) {
	case F8_KIR_OP_CONST:
		return inst->i % w == 0;
	case F8_KIR_OP_MUL:
		return multiple_of(k, inst->a, w, depth + 1) || multiple_of(k, inst->b, w, depth + 1);
	case F8_KIR_OP_ADD:
	case F8_KIR_OP_SUB:
		return multiple_of(k, inst->a, w, depth + 1) && multiple_of(k, inst->b, w, depth + 1);
	default:
		return false;
	}
}

/* A positive constant multiple of `w`: the divisor that keeps a chunk within one quotient. */
static bool chunk_divisor(const f8_kernel *k, f8_kir_id id, uint32_t w) {
	const f8_kir_inst *inst = &k->insts[id];
	return inst->op == F8_KIR_OP_CONST && inst->type == F8_KIR_TYPE_I64 && inst->i > 0 &&
	       inst->i % w == 0;
}

static lane_class classify(const f8_kernel *k, const vector_body *v, f8_kir_id id) {
	const f8_kir_inst *inst = &k->insts[id];
	lane_class a = class_of(v, inst->a), b = class_of(v, inst->b), c = class_of(v, inst->c);
	if (inst->op == F8_KIR_OP_LOOP_VAR || inst->op == F8_KIR_OP_RESULT)
		return LANE_OTHER;
	if (a == LANE_UNIFORM && b == LANE_UNIFORM && c == LANE_UNIFORM)
		return LANE_UNIFORM; // a function of what every lane shares, loads included
	if (inst->type != F8_KIR_TYPE_I64)
		return LANE_OTHER;
	bool linear_a = a == LANE_LINEAR || a == LANE_ALIGNED;
	switch (inst->op) {
	case F8_KIR_OP_ADD:
	case F8_KIR_OP_SUB: {
		bool swap = inst->op == F8_KIR_OP_ADD && !linear_a;
		lane_class lin = swap ? b : a;
		f8_kir_id other = swap ? inst->a : inst->b;
		if ((lin != LANE_LINEAR && lin != LANE_ALIGNED) || class_of(v, other) != LANE_UNIFORM)
			return LANE_OTHER;
		return lin == LANE_ALIGNED && multiple_of(k, other, v->width, 0) ? LANE_ALIGNED
										: LANE_LINEAR;
	}
	case F8_KIR_OP_DIV: // the variable's quotient and remainder by a multiple of W
		return inst->a == v->var && chunk_divisor(k, inst->b, v->width) ? LANE_UNIFORM
										 : LANE_OTHER;
	case F8_KIR_OP_REM:
		return inst->a == v->var && chunk_divisor(k, inst->b, v->width) ? LANE_ALIGNED
										 : LANE_OTHER;
	default:
		return LANE_OTHER;
	}
}

static bool is_linear(const vector_body *v, f8_kir_id index) {
	lane_class c = class_of(v, index);
	return c == LANE_LINEAR || c == LANE_ALIGNED;
}

/* The buffer a body statement loads or stores at a linear index (its bytes per element into
 * *bytes), or F8_KIR_NONE. */
static uint32_t linear_access(const f8_kernel *k, const vector_body *v, const f8_kir_stmt *stmt,
			      size_t *bytes) {
	uint32_t param = F8_KIR_NONE;
	if (stmt->kind == F8_KIR_STMT_INST && k->insts[stmt->inst].op == F8_KIR_OP_LOAD &&
	    is_linear(v, k->insts[stmt->inst].a))
		param = k->insts[stmt->inst].param;
	else if (stmt->kind == F8_KIR_STMT_STORE && is_linear(v, stmt->index))
		param = stmt->param;
	if (param != F8_KIR_NONE)
		*bytes = f8_dtype_get_info(k->params[param].dtype)->bytes;
	return param;
}

/* Classifies the body's instructions for width v->width; the widest linear access's bytes
 * per element (0: none). */
static size_t classify_body(const f8_kernel *k, const f8_kir_stmt *loop, vector_body *v) {
	v->classes[v->var] = LANE_ALIGNED;
	size_t widest = 0;
	for (uint32_t i = 0; i < loop->n_body; i++) {
		const f8_kir_stmt *stmt = &k->stmts[loop->body[i]];
		if (stmt->kind == F8_KIR_STMT_INST)
			v->classes[stmt->inst] = classify(k, v, stmt->inst);
		size_t bytes = 0;
		if (linear_access(k, v, stmt, &bytes) != F8_KIR_NONE && bytes > widest)
			widest = bytes;
	}
	return widest;
}

/* The most a vector form's body may weigh times its lanes: the lanes of a statement are live
 * together, and a long body (a norm gradient's) at 4 or more lanes runs out of registers and
 * spills, which costs more than the wide accesses gain. A statement weighs 1, the math
 * functions' sequences (llvm_math.c) 8 more (cos and sin, whose argument reduction is as long
 * again, 16), a division or square root 2 more. */
enum { MAX_LANE_WEIGHT = 768 };

static uint32_t body_weight(const f8_kernel *k, const f8_kir_stmt *loop) {
	uint32_t weight = 0;
	for (uint32_t i = 0; i < loop->n_body; i++) {
		const f8_kir_stmt *stmt = &k->stmts[loop->body[i]];
		f8_kir_op op = stmt->kind == F8_KIR_STMT_INST ? k->insts[stmt->inst].op : F8_KIR_OP_COUNT;
		weight += 1 + (op == F8_KIR_OP_EXP || op == F8_KIR_OP_LOG || op == F8_KIR_OP_TANH ||
			       op == F8_KIR_OP_ERF ? 8 : op == F8_KIR_OP_COS || op == F8_KIR_OP_SIN ? 16
			       : op == F8_KIR_OP_DIV || op == F8_KIR_OP_SQRT ? 2 : 0);
	}
	return weight;
}

/*
 * The most chunks a thread runs at once (all their loads issued before the first is used): up
 * to MAX_CHUNKS_AT_ONCE, no more than the block loop's constant extent gives each thread, in
 * block loops of a constant extent whose chunk weighs no more than MAX_CHUNK_WEIGHT (a tile's
 * casts); one elsewhere. Measured on the H200 (tools/bench_kernels.md, 2026-12-03): a tiled
 * cast's 4 chunks at once took it from 43-60% of copy bandwidth to 48-66%; in loops of a
 * heavier chunk (GELU's) or a row's extent (norms, cross-entropy, embedding) the wider code
 * held more registers, ran fewer blocks an SM and lost 5-20%.
 */
enum { MAX_CHUNKS_AT_ONCE = 4, MAX_CHUNK_WEIGHT = 128 };

static uint32_t chunks_at_once(const f8_kernel *k, const f8_kir_stmt *loop, uint32_t width) {
	const f8_kir_inst *extent = &k->insts[loop->extent];
	if (loop->kind != F8_KIR_STMT_BLOCK_LOOP || extent->op != F8_KIR_OP_CONST ||
	    body_weight(k, loop) * width > MAX_CHUNK_WEIGHT)
		return 1;
	uint32_t most = MAX_CHUNKS_AT_ONCE;
	while (most > 1 && most > extent->i / width / F8_LLVM_GPU_THREADS)
		most /= 2;
	return most;
}

/* The vector width of loop `index` (1: the scalar form), its classes filled for that width. */
static uint32_t choose_width(lowering *l, uint32_t index, vector_body *v) {
	const f8_kernel *k = l->kernel;
	const f8_kir_stmt *loop = &k->stmts[index];
	bool grid = loop->kind == F8_KIR_STMT_GRID_LOOP;
	if (l->emit.target != F8_LLVM_TARGET_NVPTX || (grid && !l->row_per_thread))
		return 1;
	// Accesses through an address (load.ptr, store.ptr) keep their loop scalar: the lanes
	// would each need the address, which the forms below do not carry.
	for (uint32_t i = 0; i < loop->n_body; i++) {
		const f8_kir_stmt *stmt = &k->stmts[loop->body[i]];
		if (stmt->kind == F8_KIR_STMT_STORE_PTR ||
		    (stmt->kind == F8_KIR_STMT_INST && k->insts[stmt->inst].op == F8_KIR_OP_LOAD_PTR))
			return 1;
	}
	v->var = loop->var;
	v->in_body[loop->var] = true;
	for (uint32_t i = 0; i < loop->n_body; i++)
		if (k->stmts[loop->body[i]].kind == F8_KIR_STMT_INST)
			v->in_body[k->stmts[loop->body[i]].inst] = true;
	for (uint32_t w = 16; w >= 2; w /= 2) {
		v->width = w;
		size_t widest = classify_body(k, loop, v);
		if (widest && widest * w <= 16 && body_weight(k, loop) * w <= MAX_LANE_WEIGHT) {
			v->most = chunks_at_once(k, loop, w);
			return w;
		}
	}
	return 1;
}

/* ---- the vector form: lowering a chunk ---- */

static LLVMValueRef lane_value(lowering *l, const vector_body *v, f8_kir_id id, uint32_t lane) {
	if (id == F8_KIR_NONE)
		return NULL;
	return v->in_body[id] ? v->lanes[lane_slot(v, id, lane)] : f8_llvm_operand(l, id);
}

/* Makes lane `lane`'s values of `ids` (n, F8_KIR_NONE skipped) the ones l->values holds, for
 * the scalar lowering of one lane. */
static void enter_lane(lowering *l, const vector_body *v, const f8_kir_id *ids, int n,
		       uint32_t lane) {
	for (int i = 0; i < n; i++)
		if (ids[i] != F8_KIR_NONE && v->in_body[ids[i]])
			l->values[ids[i]] = v->lanes[lane_slot(v, ids[i], lane)];
}

/* The i1 that holds where a W-element access of buffer `param` at linear `index` by the chunk
 * of lanes `first` .. `first` + W - 1 may be one: lane `first`'s element address aligned to the
 * access's size and every lane's mask (`mask`, F8_KIR_NONE: none) true. The address, not the
 * buffer and the index apart: a test of the buffer alone would be hoisted to the kernel's
 * entry and kept live through it, one a loop and buffer, more registers than a kernel of many
 * loops has. */
static LLVMValueRef whole_access(lowering *l, const vector_body *v, uint32_t param,
				 f8_kir_id index, f8_kir_id mask, uint32_t first) {
	f8_llvm_emit *e = &l->emit;
	LLVMBuilderRef b = e->builder;
	uint64_t bytes = v->width * f8_dtype_get_info(l->kernel->params[param].dtype)->bytes;
	LLVMValueRef pointer = f8_llvm_element_pointer(l, param, lane_value(l, v, index, first));
	LLVMValueRef address = LLVMBuildPtrToInt(b, pointer, e->i64, "");
	LLVMValueRef misaligned = LLVMBuildAnd(b, address, f8_llvm_i64(e, bytes - 1), "");
	LLVMValueRef ok = LLVMBuildICmp(b, LLVMIntEQ, misaligned, f8_llvm_i64(e, 0), "");
	for (uint32_t lane = first; mask != F8_KIR_NONE && lane < first + v->width; lane++)
		ok = LLVMBuildAnd(b, ok, lane_value(l, v, mask, lane), "");
	return ok;
}

/* The integer type of one access of `bytes` (2 to 16): i16, i32, <2 x i32> or <4 x i32>. */
static LLVMTypeRef access_type(const lowering *l, uint64_t bytes) {
	if (bytes <= 4)
		return bytes == 2 ? l->emit.i16 : l->emit.i32;
	return LLVMVectorType(l->emit.i32, (unsigned)(bytes / 4));
}

/*
 * NVPTX: `bytes` (2 to 16) at `pointer` in one ld.global, as the vector `type`. Inline PTX,
 * since LLVM turns a vector load whose only users are extracts back into scalar loads and
 * then, the scalar path loading the same addresses, keeps those alone. The asm may read and
 * write memory as far as LLVM knows, so it stays in its place among the loads and stores.
 */
static LLVMValueRef asm_load(lowering *l, LLVMValueRef pointer, uint64_t bytes,
			     LLVMTypeRef type) {
	f8_llvm_emit *e = &l->emit;
	LLVMBuilderRef b = e->builder;
	unsigned words = bytes >= 4 ? (unsigned)(bytes / 4) : 1;
	const char *text = bytes == 16 ? "ld.global.v4.u32 {$0, $1, $2, $3}, [$4];"
			   : bytes == 8 ? "ld.global.v2.u32 {$0, $1}, [$2];"
			   : bytes == 4 ? "ld.global.u32 $0, [$1];"
					: "ld.global.u16 $0, [$1];";
	const char *constraints = bytes == 16 ? "=r,=r,=r,=r,l"
				  : bytes == 8 ? "=r,=r,l"
				  : bytes == 4 ? "=r,l"
					       : "=h,l";
	LLVMTypeRef word = bytes >= 4 ? e->i32 : e->i16;
	LLVMTypeRef fields[4] = {word, word, word, word};
	LLVMTypeRef result = words == 1 ? word : LLVMStructTypeInContext(e->context, fields, words, false);
	LLVMTypeRef function = LLVMFunctionType(result, &e->i64, 1, false);
	LLVMValueRef code = LLVMGetInlineAsm(function, (char *)text, strlen(text), (char *)constraints,
					     strlen(constraints), false, false,
					     LLVMInlineAsmDialectATT, false);
	LLVMValueRef address = LLVMBuildPtrToInt(b, pointer, e->i64, "");
	LLVMValueRef loaded = LLVMBuildCall2(b, function, code, &address, 1, "");
	if (words == 1)
		return LLVMBuildBitCast(b, loaded, type, "");
	LLVMValueRef vector = LLVMGetUndef(LLVMVectorType(word, words));
	for (unsigned i = 0; i < words; i++)
		vector = LLVMBuildInsertElement(b, vector, LLVMBuildExtractValue(b, loaded, i, ""),
						f8_llvm_i32(e, i), "");
	return LLVMBuildBitCast(b, vector, type, "");
}

/* A linear load by the chunk of lanes `at` .. `at` + W - 1: W elements in one access where
 * whole_access holds, one a lane otherwise; each lane converted to its register value (0 where
 * its mask is false). */
static f8_status vector_load(lowering *l, vector_body *v, f8_kir_id id, uint32_t at) {
	f8_llvm_emit *e = &l->emit;
	LLVMBuilderRef b = e->builder;
	const f8_kir_inst *inst = &l->kernel->insts[id];
	uint32_t w = v->width, param = inst->param;
	LLVMTypeRef storage = f8_llvm_storage_type(e, l->kernel->params[param].dtype);
	LLVMTypeRef vector_type = LLVMVectorType(storage, w);
	uint64_t bytes = w * f8_dtype_get_info(l->kernel->params[param].dtype)->bytes;
	LLVMValueRef whole = whole_access(l, v, param, inst->a, inst->b, at);
	LLVMBasicBlockRef one = f8_llvm_append_block(l, "whole"), each = f8_llvm_append_block(l, "lanes");
	LLVMBasicBlockRef merge = f8_llvm_append_block(l, "loaded");
	LLVMBuildCondBr(b, whole, one, each);
	LLVMPositionBuilderAtEnd(b, one);
	LLVMValueRef first = lane_value(l, v, inst->a, at);
	LLVMValueRef from_one =
		asm_load(l, f8_llvm_element_pointer(l, param, first), bytes, vector_type);
	LLVMBuildBr(b, merge);
	LLVMPositionBuilderAtEnd(b, each);
	LLVMValueRef from_each = LLVMGetUndef(vector_type);
	for (uint32_t lane = 0; lane < w; lane++) {
		LLVMValueRef stored = f8_llvm_load_stored(l, param, lane_value(l, v, inst->a, at + lane),
							  lane_value(l, v, inst->b, at + lane));
		from_each = LLVMBuildInsertElement(b, from_each, stored, f8_llvm_i32(e, lane), "");
	}
	LLVMBasicBlockRef each_end = LLVMGetInsertBlock(b);
	LLVMBuildBr(b, merge);
	LLVMPositionBuilderAtEnd(b, merge);
	LLVMValueRef elements = LLVMBuildPhi(b, vector_type, "");
	LLVMValueRef incoming[2] = {from_one, from_each};
	LLVMBasicBlockRef from[2] = {one, each_end};
	LLVMAddIncoming(elements, incoming, from, 2);
	for (uint32_t lane = 0; lane < w; lane++) {
		LLVMValueRef stored = LLVMBuildExtractElement(b, elements, f8_llvm_i32(e, lane), "");
		v->lanes[lane_slot(v, id, at + lane)] =
			f8_llvm_load_value(l, param, stored, lane_value(l, v, inst->b, at + lane));
	}
	return l->status;
}

/* Each value of a linear store by the chunk of lanes `at` .. `at` + W - 1 converted to the
 * buffer's storage, into codes[lane - at]; FP8 on NVPTX two lanes a cvt, as the i16
 * pairs[(lane - at) / 2]. */
static void store_codes(lowering *l, const vector_body *v, const f8_kir_stmt *stmt, uint32_t at,
			LLVMValueRef *codes, LLVMValueRef *pairs) {
	f8_llvm_emit *e = &l->emit;
	f8_dtype dtype = l->kernel->params[stmt->param].dtype;
	bool paired = e->target == F8_LLVM_TARGET_NVPTX &&
		      (dtype == F8_DTYPE_E4M3 || dtype == F8_DTYPE_E5M2);
	for (uint32_t lane = 0; lane < v->width; lane++) {
		LLVMValueRef value = lane_value(l, v, stmt->value, at + lane);
		pairs[lane / 2] = NULL;
		if (!paired) {
			codes[lane] = f8_llvm_store_convert(e, dtype, value);
		} else if (lane % 2 == 1) {
			LLVMValueRef low = lane_value(l, v, stmt->value, at + lane - 1);
			LLVMValueRef pair = f8_llvm_store_convert_pair(e, dtype, low, value);
			pairs[lane / 2] = pair;
			codes[lane - 1] = LLVMBuildTrunc(e->builder, pair, e->i8, "");
			codes[lane] = LLVMBuildTrunc(
				e->builder, LLVMBuildLShr(e->builder, pair, LLVMConstInt(e->i16, 8, false), ""),
				e->i8, "");
		}
	}
}

/* A linear store by the chunk of lanes `at` .. `at` + W - 1: W elements in one access where
 * whole_access holds, else each lane under its own mask. */
static f8_status vector_store(lowering *l, const vector_body *v, const f8_kir_stmt *stmt,
			      uint32_t at) {
	f8_llvm_emit *e = &l->emit;
	LLVMBuilderRef b = e->builder;
	uint32_t w = v->width;
	f8_dtype dtype = l->kernel->params[stmt->param].dtype;
	LLVMTypeRef storage = f8_llvm_storage_type(e, dtype);
	uint64_t bytes = w * f8_dtype_get_info(dtype)->bytes;
	LLVMValueRef codes[16], pairs[8];
	store_codes(l, v, stmt, at, codes, pairs);
	LLVMValueRef whole = whole_access(l, v, stmt->param, stmt->index, stmt->mask, at);
	LLVMBasicBlockRef one = f8_llvm_append_block(l, "whole"), each = f8_llvm_append_block(l, "lanes");
	LLVMBasicBlockRef merge = f8_llvm_append_block(l, "stored");
	LLVMBuildCondBr(b, whole, one, each);
	LLVMPositionBuilderAtEnd(b, one);
	bool paired = pairs[0] != NULL;
	LLVMValueRef vector = LLVMGetUndef(LLVMVectorType(paired ? e->i16 : storage,
							  paired ? w / 2 : w));
	for (uint32_t i = 0; i < (paired ? w / 2 : w); i++)
		vector = LLVMBuildInsertElement(b, vector, paired ? pairs[i] : codes[i],
						f8_llvm_i32(e, i), "");
	LLVMValueRef pointer = f8_llvm_element_pointer(l, stmt->param,
						       lane_value(l, v, stmt->index, at));
	LLVMSetAlignment(LLVMBuildStore(b, LLVMBuildBitCast(b, vector, access_type(l, bytes), ""),
					pointer),
			 (unsigned)bytes);
	LLVMBuildBr(b, merge);
	LLVMPositionBuilderAtEnd(b, each);
	for (uint32_t lane = 0; lane < w; lane++) {
		LLVMValueRef mask = lane_value(l, v, stmt->mask, at + lane);
		LLVMBasicBlockRef done = mask ? f8_llvm_begin_guard(l, mask) : NULL;
		LLVMValueRef index = lane_value(l, v, stmt->index, at + lane);
		LLVMBuildStore(b, codes[lane], f8_llvm_element_pointer(l, stmt->param, index));
		if (done)
			f8_llvm_end_guard(l, done);
	}
	LLVMBuildBr(b, merge);
	LLVMPositionBuilderAtEnd(b, merge);
	return l->status;
}

/* One body statement for every lane: linear accesses whole a chunk, values the same in every
 * lane of a chunk or linear in the lane once a chunk, the rest one lane at a time. */
static f8_status lower_lanes(lowering *l, vector_body *v, uint32_t index, f8_llvm_scope where) {
	const f8_kir_stmt *stmt = &l->kernel->stmts[index];
	size_t bytes;
	if (linear_access(l->kernel, v, stmt, &bytes) != F8_KIR_NONE) {
		f8_status status = F8_OK;
		for (uint32_t at = 0; !status && at < lanes_of(v); at += v->width)
			status = stmt->kind == F8_KIR_STMT_STORE ? vector_store(l, v, stmt, at)
								 : vector_load(l, v, stmt->inst, at);
		return status;
	}
	f8_kir_id ids[3] = {stmt->index, stmt->value, stmt->mask};
	if (stmt->kind == F8_KIR_STMT_INST) {
		const f8_kir_inst *inst = &l->kernel->insts[stmt->inst];
		ids[0] = inst->a, ids[1] = inst->b, ids[2] = inst->c;
	}
	lane_class class = stmt->kind == F8_KIR_STMT_INST ? v->classes[stmt->inst] : LANE_OTHER;
	for (uint32_t at = 0; class != LANE_OTHER && at < lanes_of(v); at += v->width) {
		// Once a chunk: the same in every lane, or lane 0's value plus the lane (an index).
		enter_lane(l, v, ids, 3, at);
		f8_status status = f8_llvm_lower_statement(l, index, where);
		if (status)
			return status;
		LLVMValueRef first = l->values[stmt->inst];
		for (uint32_t lane = 0; lane < v->width; lane++)
			v->lanes[lane_slot(v, stmt->inst, at + lane)] =
				class == LANE_UNIFORM || lane == 0
					? first
					: LLVMBuildAdd(l->emit.builder, first, f8_llvm_i64(&l->emit, lane), "");
	}
	if (class != LANE_OTHER)
		return F8_OK;
	for (uint32_t lane = 0; lane < lanes_of(v); lane++) {
		enter_lane(l, v, ids, 3, lane);
		f8_status status = f8_llvm_lower_statement(l, index, where);
		if (status)
			return status;
		if (stmt->kind == F8_KIR_STMT_INST)
			v->lanes[lane_slot(v, stmt->inst, lane)] = l->values[stmt->inst];
	}
	return F8_OK;
}

/* ---- loops ---- */

/* A loop being emitted: the block before it, its header and the block after it, its
 * variable, and its accumulators' phis (n_accumulators, the partial results after it). */
typedef struct emitted_loop {
	LLVMBasicBlockRef entry, header, done;
	LLVMValueRef var;
	LLVMValueRef *phis;
} emitted_loop;

/* Emits the loop's header (the variable's and accumulators' phis) and the branch into its
 * body while the variable is below `end`; the builder left in the body. */
static void open_loop(lowering *l, const f8_kir_stmt *loop, LLVMValueRef end, emitted_loop *m) {
	LLVMBuilderRef b = l->emit.builder;
	m->entry = LLVMGetInsertBlock(b);
	m->header = f8_llvm_append_block(l, "loop");
	LLVMBasicBlockRef body = f8_llvm_append_block(l, "body");
	m->done = f8_llvm_append_block(l, "done");
	LLVMBuildBr(b, m->header);
	LLVMPositionBuilderAtEnd(b, m->header);
	m->var = LLVMBuildPhi(b, l->emit.i64, "");
	for (uint32_t i = 0; i < loop->n_accumulators; i++)
		m->phis[i] = LLVMBuildPhi(b, register_type(l, loop->accumulators[i].type), "");
	LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, m->var, end, ""), body, m->done);
	LLVMPositionBuilderAtEnd(b, body);
}

/* Closes the loop: accumulator i starts at initial[i] (NULL: the identities) and takes
 * value(i, lane) for each of `lanes` lanes in order; the variable goes from `start` by `step`.
 * The builder left after the loop. */
static void close_loop(lowering *l, const f8_kir_stmt *loop, emitted_loop *m, LLVMValueRef start,
		       LLVMValueRef step, const LLVMValueRef *initial, const vector_body *v) {
	LLVMBuilderRef b = l->emit.builder;
	LLVMBasicBlockRef from[2] = {m->entry, LLVMGetInsertBlock(b)};
	for (uint32_t i = 0; i < loop->n_accumulators; i++) {
		const f8_kir_accumulator *acc = &loop->accumulators[i];
		LLVMValueRef combined = m->phis[i];
		for (uint32_t lane = 0; lane < (v ? lanes_of(v) : 1); lane++)
			combined = combine(l, acc, combined,
					   v ? lane_value(l, v, acc->value, lane)
					     : f8_llvm_operand(l, acc->value));
		LLVMValueRef incoming[2] = {initial ? initial[i] : identity(l, acc), combined};
		LLVMAddIncoming(m->phis[i], incoming, from, 2);
	}
	LLVMValueRef incoming[2] = {start, LLVMBuildAdd(b, m->var, step, "")};
	LLVMAddIncoming(m->var, incoming, from, 2);
	LLVMBuildBr(b, m->header);
	LLVMPositionBuilderAtEnd(b, m->done);
}

/*
 * The scalar loop `index` from `start` by `step` while the variable is below the extent, its
 * accumulators starting from `initial` (NULL: the identities); each one's value after the loop
 * (this thread's share on the GPU) into `partials`.
 */
static f8_status lower_loop(lowering *l, uint32_t index, LLVMValueRef start, LLVMValueRef step,
			    f8_llvm_scope where, const LLVMValueRef *initial,
			    LLVMValueRef *partials) {
	const f8_kir_stmt *loop = &l->kernel->stmts[index];
	LLVMValueRef extent = f8_llvm_operand(l, loop->extent);
	if (!extent)
		return l->status;
	emitted_loop m = {.phis = partials};
	open_loop(l, loop, extent, &m);
	l->values[loop->var] = m.var;
	f8_status status = f8_llvm_lower_scope(l, loop->body, loop->n_body, where);
	for (uint32_t i = 0; !status && i < loop->n_accumulators; i++)
		if (!f8_llvm_operand(l, loop->accumulators[i].value))
			status = l->status;
	if (status)
		return status;
	close_loop(l, loop, &m, start, step, initial, NULL);
	return F8_OK;
}

/*
 * One loop of the vector form: chunk c from `start` by `step` U (U = v->chunks) while the U
 * chunks c, c + step, ..., c + (U - 1) step are all below `chunks`, each thread running those U
 * together; the accumulators start from `initial` (NULL: the identities) and end in
 * `partials`; the first chunk it left into *next.
 */
static f8_status lower_chunk_loop(lowering *l, uint32_t index, vector_body *v, LLVMValueRef start,
				  LLVMValueRef step, LLVMValueRef chunks, f8_llvm_scope where,
				  const LLVMValueRef *initial, LLVMValueRef *partials,
				  LLVMValueRef *next) {
	const f8_kir_stmt *loop = &l->kernel->stmts[index];
	f8_llvm_emit *e = &l->emit;
	LLVMBuilderRef b = e->builder;
	LLVMValueRef width = f8_llvm_i64(e, v->width), at_once = f8_llvm_i64(e, v->chunks);
	LLVMValueRef spread = LLVMBuildMul(b, step, LLVMBuildSub(b, at_once, f8_llvm_i64(e, 1), ""), "");
	emitted_loop m = {.phis = partials};
	open_loop(l, loop, LLVMBuildSub(b, chunks, spread, ""), &m);
	for (uint32_t u = 0; u < v->chunks; u++) {
		LLVMValueRef chunk = LLVMBuildAdd(b, m.var, LLVMBuildMul(b, step, f8_llvm_i64(e, u), ""), "");
		LLVMValueRef first = LLVMBuildMul(b, chunk, width, "");
		for (uint32_t lane = 0; lane < v->width; lane++)
			v->lanes[lane_slot(v, loop->var, u * v->width + lane)] =
				LLVMBuildAdd(b, first, f8_llvm_i64(e, lane), "");
	}
	f8_status status = F8_OK;
	for (uint32_t i = 0; !status && i < loop->n_body; i++)
		status = lower_lanes(l, v, loop->body[i], where);
	for (uint32_t i = 0; !status && i < loop->n_accumulators; i++)
		for (uint32_t lane = 0; lane < lanes_of(v); lane++)
			if (!lane_value(l, v, loop->accumulators[i].value, lane))
				status = f8_llvm_fail(l, F8_ERR_INVALID, "an accumulator's value "
						      "is not computed");
	if (status)
		return status;
	close_loop(l, loop, &m, start, LLVMBuildMul(b, step, at_once, ""), initial, v);
	*next = m.var; // the header's phi: the chunk that failed the test
	return F8_OK;
}

/*
 * The vector form of loop `index` (llvm_loops.c's header): its chunks U at a time a thread
 * (v->most), then one at a time, from `start` by `step`, while within the extent; then the
 * iterations left over by the scalar loop from W * chunks + start by `step`; the accumulators'
 * partial results into `partials`.
 */
static f8_status lower_vector_loop(lowering *l, uint32_t index, vector_body *v,
				   LLVMValueRef start, LLVMValueRef step, f8_llvm_scope where,
				   LLVMValueRef *partials) {
	const f8_kir_stmt *loop = &l->kernel->stmts[index];
	f8_llvm_emit *e = &l->emit;
	LLVMBuilderRef b = e->builder;
	LLVMValueRef extent = f8_llvm_operand(l, loop->extent);
	if (!extent)
		return l->status;
	LLVMValueRef width = f8_llvm_i64(e, v->width);
	LLVMValueRef chunks = LLVMBuildSDiv(b, extent, width, "");
	uint32_t n = loop->n_accumulators;
	LLVMValueRef *so_far = f8_calloc(n + 1, sizeof *so_far);
	if (!so_far)
		return f8_llvm_fail(l, F8_ERR_NOMEM, "out of memory");
	f8_status status = F8_OK;
	LLVMValueRef next = start;
	const LLVMValueRef *initial = NULL;
	for (uint32_t at_once = v->most; !status && at_once >= 1; at_once = at_once > 1 ? 1 : 0) {
		v->chunks = at_once;
		status = lower_chunk_loop(l, index, v, next, step, chunks, where, initial, partials,
					  &next);
		for (uint32_t i = 0; i < n; i++)
			so_far[i] = partials[i];
		initial = so_far;
	}
	LLVMValueRef rest = LLVMBuildAdd(b, LLVMBuildMul(b, chunks, width, ""), start, "");
	if (!status)
		status = lower_loop(l, index, rest, step, where, so_far, partials);
	f8_free(so_far);
	return status;
}

/* The loop in its vector form where it has one (choose_width), else the scalar loop. */
static f8_status lower_any_loop(lowering *l, uint32_t index, LLVMValueRef start,
				LLVMValueRef step, f8_llvm_scope where, LLVMValueRef *partials) {
	uint32_t n = l->kernel->n_insts;
	vector_body v = {.in_body = f8_calloc(n + 1, sizeof *v.in_body),
			 .classes = f8_calloc(n + 1, sizeof *v.classes)};
	f8_status status = F8_OK;
	if (!v.in_body || !v.classes)
		status = f8_llvm_fail(l, F8_ERR_NOMEM, "out of memory");
	uint32_t width = status ? 1 : choose_width(l, index, &v);
	if (!status && width > 1) {
		v.lanes = f8_calloc((size_t)n * width * v.most + 1, sizeof *v.lanes);
		status = v.lanes ? lower_vector_loop(l, index, &v, start, step, where, partials)
				 : f8_llvm_fail(l, F8_ERR_NOMEM, "out of memory");
	} else if (!status) {
		status = lower_loop(l, index, start, step, where, NULL, partials);
	}
	f8_free(v.in_body);
	f8_free(v.classes);
	f8_free(v.lanes);
	return status;
}

/*
 * A grid or block loop: where it starts and how it strides on this target, and its results.
 * NVPTX: a block loop's accumulators are reduced over the block, the deferred ones aside
 * (f8_llvm_lowering.deferred), which the grid loop reduces once at its end (grid_reduced); a
 * grid loop of one row per thread reduces all of its own.
 */
f8_status f8_llvm_lower_loop_statement(lowering *l, uint32_t index) {
	const f8_kir_stmt *loop = &l->kernel->stmts[index];
	f8_llvm_emit *e = &l->emit;
	LLVMBuilderRef b = e->builder;
	bool grid = loop->kind == F8_KIR_STMT_GRID_LOOP;
	bool gpu = e->target == F8_LLVM_TARGET_NVPTX;
	LLVMValueRef start = f8_llvm_i64(e, 0), step = f8_llvm_i64(e, 1);
	LLVMValueRef threads = f8_llvm_i64(e, F8_LLVM_GPU_THREADS);
	if (gpu && grid && l->row_per_thread) {
		start = LLVMBuildAdd(b, LLVMBuildMul(b, l->block, threads, ""), l->thread, "");
		step = LLVMBuildMul(b, l->blocks, threads, "");
	} else if (gpu && grid) {
		start = l->block;
		step = l->blocks;
	} else if (gpu) {
		if (l->barriers)
			barrier(l);
		start = l->thread;
		step = threads;
	}
	uint32_t n = loop->n_accumulators;
	LLVMValueRef *partials = f8_calloc(n + 1, sizeof *partials);
	bool *chosen = f8_calloc(n + 1, sizeof *chosen);
	f8_status status = partials && chosen ? F8_OK : f8_llvm_fail(l, F8_ERR_NOMEM, "out of memory");
	if (!status)
		status = lower_any_loop(l, index, start, step,
					grid ? F8_LLVM_SCOPE_GRID : F8_LLVM_SCOPE_BLOCK, partials);
	// Rows per block: every thread ran every row of its block, so each holds the block's share
	// of a grid accumulator already, but for the deferred block results it took.
	for (uint32_t i = 0; !status && i < n; i++)
		chosen[i] = !grid ? !l->deferred[loop->accumulators[i].result]
			    : l->row_per_thread || l->grid_reduced[i];
	if (!status && gpu && n)
		status = reduce_chosen(l, loop, chosen, partials);
	for (uint32_t i = 0; !status && i < n; i++)
		l->values[loop->accumulators[i].result] = partials[i];
	f8_free(partials);
	f8_free(chosen);
	return status;
}
