/*
 * The kernel IR's tables, builder, verifier and printer (codegen/kir.h).
 */
#include "codegen/kir.h" // f8_kernel, f8_kir_*

#include <inttypes.h> // PRId64
#include <stdarg.h>   // va_list
#include <string.h>   // strcmp, memset

#include "ir/alloc.h" // f8_malloc, f8_realloc, f8_free

typedef enum type_rule { SAME, BOOL, I64, F32, TYPED } type_rule;

static const struct op_row {
	const char *name;
	uint8_t operands;
	type_rule rule;
} op_rows[] = {
#define F8_KIR_OP_ROW(e, name, operands, rule) {name, operands, rule},
	F8_KIR_OP_LIST(F8_KIR_OP_ROW)
#undef F8_KIR_OP_ROW
};
_Static_assert(sizeof op_rows / sizeof op_rows[0] == F8_KIR_OP_COUNT, "one row per op");

static const char *const type_names[] = {
#define F8_KIR_NAME(e, name) name,
	F8_KIR_TYPE_LIST(F8_KIR_NAME)
};
static const char *const combine_names[] = {F8_KIR_COMBINE_LIST(F8_KIR_NAME)};
static const char *const stmt_names[] = {F8_KIR_STMT_LIST(F8_KIR_NAME)};
#undef F8_KIR_NAME
_Static_assert(sizeof type_names / sizeof *type_names == F8_KIR_TYPE_COUNT, "type names");
_Static_assert(sizeof combine_names / sizeof *combine_names == F8_KIR_COMBINE_COUNT,
	       "combine names");
_Static_assert(sizeof stmt_names / sizeof *stmt_names == F8_KIR_STMT_COUNT, "statement names");

const char *f8_kir_type_name(f8_kir_type type) {
	return type < F8_KIR_TYPE_COUNT ? type_names[type] : "?";
}

const char *f8_kir_op_name(f8_kir_op op) {
	return op < F8_KIR_OP_COUNT ? op_rows[op].name : "?";
}

const char *f8_kir_combine_name(f8_kir_combine combine) {
	return combine < F8_KIR_COMBINE_COUNT ? combine_names[combine] : "?";
}

f8_kir_type f8_kir_type_of_dtype(f8_dtype dtype) {
	switch (dtype) {
	case F8_DTYPE_F32:
	case F8_DTYPE_BF16:
	case F8_DTYPE_F16:
	case F8_DTYPE_E4M3:
	case F8_DTYPE_E5M2:
	case F8_DTYPE_E8M0:
		return F8_KIR_TYPE_F32;
	case F8_DTYPE_I64:
	case F8_DTYPE_I32:
		return F8_KIR_TYPE_I64;
	case F8_DTYPE_BOOL:
		return F8_KIR_TYPE_BOOL;
	default:
		return F8_KIR_TYPE_COUNT;
	}
}

f8_kernel *f8_kir_create(const char *name) {
	f8_kernel *kernel = f8_calloc(1, sizeof *kernel);
	if (!kernel)
		return NULL;
	kernel->arena = f8_arena_create();
	kernel->name = kernel->arena ? f8_arena_strdup(kernel->arena, name) : NULL;
	if (!kernel->name) {
		f8_kir_destroy(kernel);
		return NULL;
	}
	kernel->current = F8_KIR_NONE;
	return kernel;
}

void f8_kir_destroy(f8_kernel *kernel) {
	if (!kernel)
		return;
	for (uint32_t i = 0; i < kernel->n_stmts; i++) {
		f8_free(kernel->stmts[i].body);
		f8_free(kernel->stmts[i].accumulators);
	}
	f8_free(kernel->params);
	f8_free(kernel->shared);
	f8_free(kernel->insts);
	f8_free(kernel->stmts);
	f8_free(kernel->top);
	if (kernel->arena)
		f8_arena_destroy(kernel->arena);
	f8_free(kernel);
}

/* Grows `*items` (of `size`-byte elements, `*capacity` of them) to hold one more. */
static bool grow(void **items, uint32_t count, uint32_t *capacity, size_t size) {
	if (count < *capacity)
		return true;
	uint32_t wanted = *capacity ? *capacity * 2 : 16;
	void *grown = f8_realloc(*items, (size_t)wanted * size);
	if (!grown)
		return false;
	*items = grown;
	*capacity = wanted;
	return true;
}

/* Records the first failure of an id-returning builder and returns F8_KIR_NONE. */
static f8_kir_id fail_id(f8_kernel *kernel, const char *format, ...)
	__attribute__((format(printf, 2, 3)));
static f8_kir_id fail_id(f8_kernel *kernel, const char *format, ...) {
	if (kernel->error[0] == '\0') {
		va_list args;
		va_start(args, format);
		vsnprintf(kernel->error, sizeof kernel->error, format, args);
		va_end(args);
	}
	return F8_KIR_NONE;
}

const char *f8_kir_error(const f8_kernel *kernel) {
	return kernel->error[0] ? kernel->error : NULL;
}

static f8_status fail(const f8_kernel *kernel, f8_diag *diag, const char *format, ...)
	__attribute__((format(printf, 3, 4)));
static f8_status fail(const f8_kernel *kernel, f8_diag *diag, const char *format, ...) {
	char message[F8_DIAG_MESSAGE_MAX];
	va_list args;
	va_start(args, format);
	vsnprintf(message, sizeof message, format, args);
	va_end(args);
	return f8_diag_set(diag, F8_ERR_INVALID, "kernel %s: %s", kernel->name, message);
}

static f8_status out_of_memory(const f8_kernel *kernel, f8_diag *diag) {
	return f8_diag_set(diag, F8_ERR_NOMEM, "kernel %s: out of memory", kernel->name);
}

/* Appends statement `index` to the insertion point's list. */
static bool place(f8_kernel *kernel, uint32_t index) {
	if (kernel->current == F8_KIR_NONE) {
		if (!grow((void **)&kernel->top, kernel->n_top, &kernel->top_capacity,
			  sizeof *kernel->top))
			return false;
		kernel->top[kernel->n_top++] = index;
		return true;
	}
	f8_kir_stmt *loop = &kernel->stmts[kernel->current];
	if (!grow((void **)&loop->body, loop->n_body, &loop->body_capacity, sizeof *loop->body))
		return false;
	loop->body[loop->n_body++] = index;
	return true;
}

/* A new statement of `kind` placed at the insertion point; F8_KIR_NONE when memory runs out. */
static uint32_t new_stmt(f8_kernel *kernel, f8_kir_stmt_kind kind) {
	if (!grow((void **)&kernel->stmts, kernel->n_stmts, &kernel->stmts_capacity,
		  sizeof *kernel->stmts))
		return F8_KIR_NONE;
	uint32_t index = kernel->n_stmts;
	f8_kir_stmt *stmt = &kernel->stmts[index];
	memset(stmt, 0, sizeof *stmt);
	stmt->kind = kind;
	stmt->inst = stmt->var = stmt->extent = stmt->index = stmt->value = F8_KIR_NONE;
	stmt->mask = stmt->address = F8_KIR_NONE;
	stmt->param = F8_KIR_NONE;
	stmt->dtype = F8_DTYPE_UNDEFINED;
	kernel->n_stmts++;
	if (!place(kernel, index)) {
		kernel->n_stmts--;
		return F8_KIR_NONE;
	}
	return index;
}

/* A new instruction; `placed`: it is computed at the insertion point (an INST statement).
 * Loop variables and results are not placed: their loops define them. */
static f8_kir_id new_inst(f8_kernel *kernel, f8_kir_inst inst, bool placed) {
	if (!grow((void **)&kernel->insts, kernel->n_insts, &kernel->insts_capacity,
		  sizeof *kernel->insts))
		return fail_id(kernel, "out of memory");
	f8_kir_id id = kernel->n_insts++;
	kernel->insts[id] = inst;
	if (placed) {
		uint32_t stmt = new_stmt(kernel, F8_KIR_STMT_INST);
		if (stmt == F8_KIR_NONE) {
			kernel->n_insts--;
			return fail_id(kernel, "out of memory");
		}
		kernel->stmts[stmt].inst = id;
	}
	return id;
}

static f8_kir_inst blank(f8_kir_op op, f8_kir_type type) {
	return (f8_kir_inst){.op = op, .type = type, .a = F8_KIR_NONE, .b = F8_KIR_NONE,
			     .c = F8_KIR_NONE, .param = F8_KIR_NONE, .loop = F8_KIR_NONE,
			     .accumulator = F8_KIR_NONE, .dtype = F8_DTYPE_UNDEFINED};
}

f8_status f8_kir_add_param(f8_kernel *kernel, const char *name, f8_kernel_param_kind kind,
			   f8_dtype dtype, uint32_t *index, f8_diag *diag) {
	if (kernel->n_insts || kernel->n_stmts)
		return fail(kernel, diag, "parameter %%%s added after the body began", name);
	if (kind >= F8_KERNEL_PARAM_COUNT)
		return fail(kernel, diag, "parameter %%%s has no kind", name);
	if (kind == F8_KERNEL_PARAM_SIZE || kind == F8_KERNEL_PARAM_TABLE
		    ? dtype != F8_DTYPE_I64
		    : f8_kir_type_of_dtype(dtype) == F8_KIR_TYPE_COUNT)
		return fail(kernel, diag, "parameter %%%s cannot be of dtype %s", name,
			    f8_dtype_name(dtype));
	for (uint32_t i = 0; i < kernel->n_params; i++)
		if (strcmp(kernel->params[i].name, name) == 0)
			return fail(kernel, diag, "parameter %%%s defined twice", name);
	const char *copy = f8_arena_strdup(kernel->arena, name);
	if (!copy || !grow((void **)&kernel->params, kernel->n_params, &kernel->params_capacity,
			   sizeof *kernel->params))
		return out_of_memory(kernel, diag);
	kernel->params[kernel->n_params] = (f8_kir_param){.name = copy, .kind = kind, .dtype = dtype};
	*index = kernel->n_params++;
	return F8_OK;
}

f8_kir_id f8_kir_const_f32(f8_kernel *kernel, double value) {
	f8_kir_inst inst = blank(F8_KIR_OP_CONST, F8_KIR_TYPE_F32);
	inst.f = (float)value;
	return new_inst(kernel, inst, true);
}

f8_kir_id f8_kir_const_i64(f8_kernel *kernel, int64_t value) {
	f8_kir_inst inst = blank(F8_KIR_OP_CONST, F8_KIR_TYPE_I64);
	inst.i = value;
	return new_inst(kernel, inst, true);
}

f8_kir_id f8_kir_const_bool(f8_kernel *kernel, bool value) {
	f8_kir_inst inst = blank(F8_KIR_OP_CONST, F8_KIR_TYPE_BOOL);
	inst.f = value ? 1 : 0;
	return new_inst(kernel, inst, true);
}

f8_kir_id f8_kir_size(f8_kernel *kernel, uint32_t param) {
	if (param >= kernel->n_params || kernel->params[param].kind != F8_KERNEL_PARAM_SIZE)
		return fail_id(kernel, "size of parameter %u, which is not a size", param);
	f8_kir_inst inst = blank(F8_KIR_OP_SIZE, F8_KIR_TYPE_I64);
	inst.param = param;
	return new_inst(kernel, inst, true);
}

static bool is_type(const f8_kernel *kernel, f8_kir_id id, f8_kir_type type) {
	return id < kernel->n_insts && kernel->insts[id].type == type;
}

f8_kir_id f8_kir_load_if(f8_kernel *kernel, uint32_t param, f8_kir_id index, f8_kir_id mask) {
	if (param >= kernel->n_params || kernel->params[param].kind == F8_KERNEL_PARAM_SIZE ||
	    kernel->params[param].kind == F8_KERNEL_PARAM_ACCUMULATE)
		return fail_id(kernel, "load from parameter %u, which is not an in or out buffer "
			       "or a table", param);
	if (!is_type(kernel, index, F8_KIR_TYPE_I64))
		return fail_id(kernel, "load from %%%s with an index that is not an i64",
			       kernel->params[param].name);
	if (mask != F8_KIR_NONE && !is_type(kernel, mask, F8_KIR_TYPE_BOOL))
		return fail_id(kernel, "load from %%%s with a mask that is not an i1",
			       kernel->params[param].name);
	f8_kir_inst inst = blank(F8_KIR_OP_LOAD, f8_kir_type_of_dtype(kernel->params[param].dtype));
	inst.param = param;
	inst.a = index;
	inst.b = mask;
	return new_inst(kernel, inst, true);
}

f8_kir_id f8_kir_load(f8_kernel *kernel, uint32_t param, f8_kir_id index) {
	return f8_kir_load_if(kernel, param, index, F8_KIR_NONE);
}

static uint32_t shared_bytes(const f8_kernel *kernel) {
	uint32_t bytes = 0;
	for (uint32_t i = 0; i < kernel->n_shared; i++)
		bytes += kernel->shared[i].count *
			 (uint32_t)f8_dtype_get_info(kernel->shared[i].dtype)->bytes;
	return bytes;
}

f8_status f8_kir_add_shared(f8_kernel *kernel, const char *name, f8_dtype dtype, uint32_t count,
			    uint32_t *index, f8_diag *diag) {
	if (f8_kir_type_of_dtype(dtype) == F8_KIR_TYPE_COUNT || count == 0)
		return fail(kernel, diag, "shared array @%s of %u elements of %s", name, count,
			    f8_dtype_name(dtype));
	uint64_t bytes = (uint64_t)count * f8_dtype_get_info(dtype)->bytes;
	if (bytes + shared_bytes(kernel) > F8_KIR_SHARED_BYTES_MAX)
		return fail(kernel, diag, "shared array @%s: the arrays would take more than %d "
			    "bytes", name, F8_KIR_SHARED_BYTES_MAX);
	for (uint32_t i = 0; i < kernel->n_shared; i++)
		if (strcmp(kernel->shared[i].name, name) == 0)
			return fail(kernel, diag, "shared array @%s defined twice", name);
	const char *copy = f8_arena_strdup(kernel->arena, name);
	f8_kir_shared *grown = f8_realloc(kernel->shared, (kernel->n_shared + 1) * sizeof *grown);
	if (!copy || !grown)
		return out_of_memory(kernel, diag);
	kernel->shared = grown;
	kernel->shared[kernel->n_shared] = (f8_kir_shared){.name = copy, .dtype = dtype,
							   .count = count};
	*index = kernel->n_shared++;
	return F8_OK;
}

f8_kir_id f8_kir_load_shared(f8_kernel *kernel, uint32_t shared, f8_kir_id index) {
	if (shared >= kernel->n_shared)
		return fail_id(kernel, "load from shared array %u, which is not declared", shared);
	if (!is_type(kernel, index, F8_KIR_TYPE_I64))
		return fail_id(kernel, "load from @%s with an index that is not an i64",
			       kernel->shared[shared].name);
	f8_kir_inst inst =
		blank(F8_KIR_OP_LOAD_SHARED, f8_kir_type_of_dtype(kernel->shared[shared].dtype));
	inst.param = shared;
	inst.a = index;
	return new_inst(kernel, inst, true);
}

f8_kir_id f8_kir_load_ptr(f8_kernel *kernel, f8_dtype dtype, f8_kir_id address, f8_kir_id index) {
	f8_kir_type type = f8_kir_type_of_dtype(dtype);
	if (type == F8_KIR_TYPE_COUNT)
		return fail_id(kernel, "load.ptr of %s, which no buffer holds", f8_dtype_name(dtype));
	if (!is_type(kernel, address, F8_KIR_TYPE_I64) || !is_type(kernel, index, F8_KIR_TYPE_I64))
		return fail_id(kernel, "load.ptr with an address or an index that is not an i64");
	f8_kir_inst inst = blank(F8_KIR_OP_LOAD_PTR, type);
	inst.a = address;
	inst.b = index;
	inst.dtype = dtype;
	return new_inst(kernel, inst, true);
}

/* Which types an op's operands may have: float ops on f32, integer ops on i64, logical on i1. */
static bool operand_type_ok(f8_kir_op op, f8_kir_type type) {
	switch (op) {
	case F8_KIR_OP_ADD:
	case F8_KIR_OP_SUB:
	case F8_KIR_OP_MUL:
	case F8_KIR_OP_DIV:
	case F8_KIR_OP_MAX:
	case F8_KIR_OP_MIN:
	case F8_KIR_OP_NEG:
	case F8_KIR_OP_ABS:
	case F8_KIR_OP_LT:
	case F8_KIR_OP_LE:
	case F8_KIR_OP_EQ:
	case F8_KIR_OP_NE:
		return type == F8_KIR_TYPE_F32 || type == F8_KIR_TYPE_I64;
	case F8_KIR_OP_REM:
	case F8_KIR_OP_SHL:
	case F8_KIR_OP_SHR:
	case F8_KIR_OP_FROM_BITS:
		return type == F8_KIR_TYPE_I64;
	case F8_KIR_OP_FMA:
	case F8_KIR_OP_SQRT:
	case F8_KIR_OP_EXP:
	case F8_KIR_OP_LOG:
	case F8_KIR_OP_TANH:
	case F8_KIR_OP_ERF:
	case F8_KIR_OP_COS:
	case F8_KIR_OP_SIN:
	case F8_KIR_OP_EXP_TERM:
	case F8_KIR_OP_FLOOR:
	case F8_KIR_OP_IS_NAN:
	case F8_KIR_OP_IS_FINITE:
	case F8_KIR_OP_BITS:
		return type == F8_KIR_TYPE_F32;
	case F8_KIR_OP_AND:
	case F8_KIR_OP_OR:
	case F8_KIR_OP_NOT:
		return type == F8_KIR_TYPE_BOOL;
	case F8_KIR_OP_TO_F32:
		return type == F8_KIR_TYPE_I64 || type == F8_KIR_TYPE_BOOL;
	case F8_KIR_OP_TO_I64:
		return type == F8_KIR_TYPE_F32 || type == F8_KIR_TYPE_BOOL;
	default:
		return false;
	}
}

/* The type error of instruction `op` on operands `a, b, c`, or NULL when there is none; the
 * result type into *type. */
static const char *check_operands(const f8_kernel *kernel, f8_kir_op op, f8_kir_id a,
				  f8_kir_id b, f8_kir_id c, f8_kir_type *type) {
	const f8_kir_id operands[3] = {a, b, c};
	unsigned n = op_rows[op].operands;
	for (unsigned i = 0; i < 3; i++) {
		if (i < n && operands[i] >= kernel->n_insts)
			return "an operand is missing";
		if (i >= n && operands[i] != F8_KIR_NONE)
			return "it has too many operands";
	}
	const f8_kir_inst *insts = kernel->insts;
	if (op == F8_KIR_OP_SELECT) {
		if (insts[a].type != F8_KIR_TYPE_BOOL)
			return "its condition is not an i1";
		if (insts[b].type != insts[c].type)
			return "its two values differ in type";
		*type = insts[b].type;
		return NULL;
	}
	f8_kir_type first = insts[a].type;
	if (!operand_type_ok(op, first))
		return "its operand's type is not one it takes";
	for (unsigned i = 1; i < n; i++) {
		f8_kir_type other = insts[operands[i]].type;
		if (other != first)
			return "its operands differ in type";
	}
	switch (op_rows[op].rule) {
	case SAME:
		*type = first;
		break;
	case BOOL:
		*type = F8_KIR_TYPE_BOOL;
		break;
	case I64:
		*type = F8_KIR_TYPE_I64;
		break;
	case F32:
		*type = F8_KIR_TYPE_F32;
		break;
	case TYPED:
		return "it is made by its own builder";
	}
	return NULL;
}

f8_kir_id f8_kir_emit(f8_kernel *kernel, f8_kir_op op, f8_kir_id a, f8_kir_id b, f8_kir_id c) {
	if (op >= F8_KIR_OP_COUNT || (op_rows[op].rule == TYPED && op != F8_KIR_OP_SELECT))
		return fail_id(kernel, "%s cannot be emitted as an operation", f8_kir_op_name(op));
	f8_kir_type type = F8_KIR_TYPE_COUNT;
	const char *problem = check_operands(kernel, op, a, b, c, &type);
	if (problem)
		return fail_id(kernel, "%s: %s", f8_kir_op_name(op), problem);
	f8_kir_inst inst = blank(op, type);
	inst.a = a, inst.b = b, inst.c = c;
	return new_inst(kernel, inst, true);
}

/* The statement index of the kernel's grid loop, F8_KIR_NONE when it has none. */
static uint32_t grid_loop_of(const f8_kernel *kernel) {
	for (uint32_t i = 0; i < kernel->n_top; i++)
		if (kernel->stmts[kernel->top[i]].kind == F8_KIR_STMT_GRID_LOOP)
			return kernel->top[i];
	return F8_KIR_NONE;
}

static f8_status begin_loop(f8_kernel *kernel, f8_kir_stmt_kind kind, f8_kir_id extent,
			    f8_kir_id *var, f8_diag *diag) {
	if (!is_type(kernel, extent, F8_KIR_TYPE_I64))
		return fail(kernel, diag, "%s with an extent that is not an i64",
			    stmt_names[kind]);
	uint32_t stmt = new_stmt(kernel, kind);
	if (stmt == F8_KIR_NONE)
		return out_of_memory(kernel, diag);
	kernel->stmts[stmt].extent = extent;
	f8_kir_inst inst = blank(F8_KIR_OP_LOOP_VAR, F8_KIR_TYPE_I64);
	inst.loop = stmt;
	f8_kir_id id = new_inst(kernel, inst, false);
	if (id == F8_KIR_NONE)
		return out_of_memory(kernel, diag);
	kernel->stmts[stmt].var = id;
	kernel->current = stmt;
	*var = id;
	return F8_OK;
}

f8_status f8_kir_begin_grid_loop(f8_kernel *kernel, f8_kir_id extent, f8_kir_id *var,
				 f8_diag *diag) {
	if (kernel->current != F8_KIR_NONE)
		return fail(kernel, diag, "a grid loop opened inside a loop");
	if (grid_loop_of(kernel) != F8_KIR_NONE)
		return fail(kernel, diag, "a second grid loop");
	return begin_loop(kernel, F8_KIR_STMT_GRID_LOOP, extent, var, diag);
}

f8_status f8_kir_begin_block_loop(f8_kernel *kernel, f8_kir_id extent, f8_kir_id *var,
				  f8_diag *diag) {
	if (kernel->current == F8_KIR_NONE ||
	    kernel->stmts[kernel->current].kind != F8_KIR_STMT_GRID_LOOP)
		return fail(kernel, diag, "a block loop opened outside a grid loop's body");
	return begin_loop(kernel, F8_KIR_STMT_BLOCK_LOOP, extent, var, diag);
}

f8_status f8_kir_add_accumulator(f8_kernel *kernel, f8_kir_combine combine, f8_kir_type type,
				 f8_kir_id *result, f8_diag *diag) {
	if (kernel->current == F8_KIR_NONE)
		return fail(kernel, diag, "an accumulator outside a loop");
	if (combine >= F8_KIR_COMBINE_COUNT || (type != F8_KIR_TYPE_F32 && type != F8_KIR_TYPE_I64))
		return fail(kernel, diag, "an accumulator must add or max an f32 or an i64");
	uint32_t loop_index = kernel->current;
	f8_kir_stmt *loop = &kernel->stmts[loop_index];
	f8_kir_accumulator *grown =
		f8_realloc(loop->accumulators, (loop->n_accumulators + 1) * sizeof *grown);
	if (!grown)
		return out_of_memory(kernel, diag);
	loop->accumulators = grown;
	f8_kir_inst inst = blank(F8_KIR_OP_RESULT, type);
	inst.loop = loop_index;
	inst.accumulator = loop->n_accumulators;
	f8_kir_id id = new_inst(kernel, inst, false);
	if (id == F8_KIR_NONE)
		return out_of_memory(kernel, diag);
	loop = &kernel->stmts[loop_index];
	loop->accumulators[loop->n_accumulators++] = (f8_kir_accumulator){
		.combine = combine, .type = type, .value = F8_KIR_NONE, .result = id};
	*result = id;
	return F8_OK;
}

f8_status f8_kir_end_loop(f8_kernel *kernel, const f8_kir_id *values, uint32_t n_values,
			  f8_diag *diag) {
	if (kernel->current == F8_KIR_NONE)
		return fail(kernel, diag, "a loop ended that was not open");
	if (f8_kir_error(kernel))
		return fail(kernel, diag, "%s", kernel->error);
	uint32_t loop_index = kernel->current;
	f8_kir_stmt *loop = &kernel->stmts[loop_index];
	if (n_values != loop->n_accumulators)
		return fail(kernel, diag, "%s ended with %u values for %u accumulators",
			    stmt_names[loop->kind], n_values, loop->n_accumulators);
	for (uint32_t i = 0; i < n_values; i++) {
		if (!is_type(kernel, values[i], loop->accumulators[i].type))
			return fail(kernel, diag, "%s: accumulator %u takes a value of another type",
				    stmt_names[loop->kind], i);
		loop->accumulators[i].value = values[i];
	}
	// A block loop lives in the grid loop's body, the grid loop at the top level.
	kernel->current = loop->kind == F8_KIR_STMT_BLOCK_LOOP ? grid_loop_of(kernel) : F8_KIR_NONE;
	return F8_OK;
}

/* The value type a buffer parameter stores, or F8_KIR_TYPE_COUNT for a size. */
static f8_kir_type buffer_type(const f8_kernel *kernel, uint32_t param) {
	const f8_kir_param *p = &kernel->params[param];
	return p->kind == F8_KERNEL_PARAM_SIZE ? F8_KIR_TYPE_COUNT : f8_kir_type_of_dtype(p->dtype);
}

/* The name (with its sigil) and value type of what a write statement of `kind` writes to:
 * parameter or shared array `target`. False when there is none that it may write. */
static bool write_target(const f8_kernel *kernel, f8_kir_stmt_kind kind, uint32_t target,
			 char *name, size_t size, f8_kir_type *type) {
	if (kind == F8_KIR_STMT_STORE_SHARED) {
		if (target >= kernel->n_shared)
			return false;
		snprintf(name, size, "@%s", kernel->shared[target].name);
		*type = f8_kir_type_of_dtype(kernel->shared[target].dtype);
		return true;
	}
	f8_kernel_param_kind wanted = kind == F8_KIR_STMT_STORE ? F8_KERNEL_PARAM_OUT
							     : F8_KERNEL_PARAM_ACCUMULATE;
	if (target >= kernel->n_params || kernel->params[target].kind != wanted)
		return false;
	snprintf(name, size, "%%%s", kernel->params[target].name);
	*type = buffer_type(kernel, target);
	return true;
}

static f8_status write_stmt(f8_kernel *kernel, f8_kir_stmt_kind kind, uint32_t target,
			    f8_kir_id index, f8_kir_id value, f8_kir_id mask,
			    f8_kir_combine combine, f8_diag *diag) {
	char name[80];
	f8_kir_type type;
	if (!write_target(kernel, kind, target, name, sizeof name, &type))
		return fail(kernel, diag, "%s to %u, which is not a %s", stmt_names[kind], target,
			    kind == F8_KIR_STMT_STORE	     ? "out buffer"
			    : kind == F8_KIR_STMT_ATOMIC ? "acc buffer"
							 : "shared array");
	if (f8_kir_error(kernel))
		return fail(kernel, diag, "%s", kernel->error);
	if (!is_type(kernel, index, F8_KIR_TYPE_I64))
		return fail(kernel, diag, "%s to %s with an index that is not an i64",
			    stmt_names[kind], name);
	if (!is_type(kernel, value, type))
		return fail(kernel, diag, "%s to %s of a value of another type", stmt_names[kind],
			    name);
	if (mask != F8_KIR_NONE && !is_type(kernel, mask, F8_KIR_TYPE_BOOL))
		return fail(kernel, diag, "%s to %s with a mask that is not an i1",
			    stmt_names[kind], name);
	if (kind == F8_KIR_STMT_ATOMIC && type == F8_KIR_TYPE_BOOL)
		return fail(kernel, diag, "atomic on %s, a bool buffer", name);
	uint32_t stmt = new_stmt(kernel, kind);
	if (stmt == F8_KIR_NONE)
		return out_of_memory(kernel, diag);
	kernel->stmts[stmt].param = target;
	kernel->stmts[stmt].index = index;
	kernel->stmts[stmt].value = value;
	kernel->stmts[stmt].mask = mask;
	kernel->stmts[stmt].combine = combine;
	return F8_OK;
}

f8_status f8_kir_store_if(f8_kernel *kernel, uint32_t param, f8_kir_id index, f8_kir_id value,
			  f8_kir_id mask, f8_diag *diag) {
	return write_stmt(kernel, F8_KIR_STMT_STORE, param, index, value, mask,
			  F8_KIR_COMBINE_ADD, diag);
}

f8_status f8_kir_store(f8_kernel *kernel, uint32_t param, f8_kir_id index, f8_kir_id value,
		       f8_diag *diag) {
	return f8_kir_store_if(kernel, param, index, value, F8_KIR_NONE, diag);
}

f8_status f8_kir_atomic_if(f8_kernel *kernel, f8_kir_combine combine, uint32_t param,
			   f8_kir_id index, f8_kir_id value, f8_kir_id mask, f8_diag *diag) {
	if (combine >= F8_KIR_COMBINE_COUNT)
		return fail(kernel, diag, "an atomic that neither adds nor takes the max");
	return write_stmt(kernel, F8_KIR_STMT_ATOMIC, param, index, value, mask, combine, diag);
}

f8_status f8_kir_atomic(f8_kernel *kernel, f8_kir_combine combine, uint32_t param,
			f8_kir_id index, f8_kir_id value, f8_diag *diag) {
	return f8_kir_atomic_if(kernel, combine, param, index, value, F8_KIR_NONE, diag);
}

f8_status f8_kir_store_shared(f8_kernel *kernel, uint32_t shared, f8_kir_id index,
			      f8_kir_id value, f8_diag *diag) {
	if (kernel->current == F8_KIR_NONE ||
	    kernel->stmts[kernel->current].kind != F8_KIR_STMT_BLOCK_LOOP)
		return fail(kernel, diag, "a store to a shared array outside a block loop");
	return write_stmt(kernel, F8_KIR_STMT_STORE_SHARED, shared, index, value, F8_KIR_NONE,
			  F8_KIR_COMBINE_ADD, diag);
}

f8_status f8_kir_store_ptr(f8_kernel *kernel, f8_dtype dtype, f8_kir_id address, f8_kir_id index,
			   f8_kir_id value, f8_diag *diag) {
	f8_kir_type type = f8_kir_type_of_dtype(dtype);
	if (f8_kir_error(kernel))
		return fail(kernel, diag, "%s", kernel->error);
	if (type == F8_KIR_TYPE_COUNT)
		return fail(kernel, diag, "store.ptr of %s, which no buffer holds", f8_dtype_name(dtype));
	if (!is_type(kernel, address, F8_KIR_TYPE_I64) || !is_type(kernel, index, F8_KIR_TYPE_I64))
		return fail(kernel, diag, "store.ptr with an address or an index that is not an i64");
	if (!is_type(kernel, value, type))
		return fail(kernel, diag, "store.ptr to %s of a value of another type",
			    f8_dtype_name(dtype));
	uint32_t stmt = new_stmt(kernel, F8_KIR_STMT_STORE_PTR);
	if (stmt == F8_KIR_NONE)
		return out_of_memory(kernel, diag);
	kernel->stmts[stmt].address = address;
	kernel->stmts[stmt].dtype = dtype;
	kernel->stmts[stmt].index = index;
	kernel->stmts[stmt].value = value;
	return F8_OK;
}

/*
 * The verifier walks the scopes in order with `visible[id]` true for each instruction that may
 * be used at the current point: defined earlier in this scope or in one around it.
 */
typedef struct verifier {
	const f8_kernel *kernel;
	bool *visible;      // (n_insts)
	uint32_t *scope_of; // (n_insts) the loop whose body placed it, F8_KIR_NONE: the top level
	f8_diag *diag;
} verifier;

static f8_status check_used(verifier *v, f8_kir_id id, const char *what) {
	if (id >= v->kernel->n_insts || !v->visible[id])
		return fail(v->kernel, v->diag, "%s uses %%%u, which is not defined in its scope",
			    what, id);
	return F8_OK;
}

static f8_status verify_scope(verifier *v, const uint32_t *list, uint32_t n, int depth,
			     uint32_t owner);

/* A mask is absent (F8_KIR_NONE) or an i1 defined in scope. */
static f8_status check_mask(verifier *v, f8_kir_id mask, const char *what) {
	if (mask == F8_KIR_NONE)
		return F8_OK;
	f8_status status = check_used(v, mask, what);
	if (!status && v->kernel->insts[mask].type != F8_KIR_TYPE_BOOL)
		status = fail(v->kernel, v->diag, "%s: its mask is not an i1", what);
	return status;
}

/* A block loop either loads or stores each shared array (kir.h): another thread's store in
 * the same loop is unordered with a load. */
static f8_status check_shared_uses(verifier *v, const f8_kir_stmt *loop) {
	const f8_kernel *kernel = v->kernel;
	for (uint32_t a = 0; a < kernel->n_shared; a++) {
		bool loads = false, stores = false;
		for (uint32_t i = 0; i < loop->n_body; i++) {
			const f8_kir_stmt *stmt = &kernel->stmts[loop->body[i]];
			stores |= stmt->kind == F8_KIR_STMT_STORE_SHARED && stmt->param == a;
			loads |= stmt->kind == F8_KIR_STMT_INST &&
				 kernel->insts[stmt->inst].op == F8_KIR_OP_LOAD_SHARED &&
				 kernel->insts[stmt->inst].param == a;
		}
		if (loads && stores)
			return fail(kernel, v->diag, "a block loop both loads and stores @%s",
				    kernel->shared[a].name);
	}
	return F8_OK;
}

/* Whether value `id` (in scope) is made inside a block loop: its variable, or placed in its
 * body. A loop's result is made in the scope around the loop. */
static bool in_block_loop(const verifier *v, f8_kir_id id) {
	const f8_kernel *kernel = v->kernel;
	const f8_kir_inst *inst = &kernel->insts[id];
	uint32_t loop = inst->op == F8_KIR_OP_LOOP_VAR ? inst->loop
			: inst->op == F8_KIR_OP_RESULT ? F8_KIR_NONE
						       : v->scope_of[id];
	return loop != F8_KIR_NONE && kernel->stmts[loop].kind == F8_KIR_STMT_BLOCK_LOOP;
}

/* A pointer access's address and index: i64s in scope, the address not made in a block loop
 * (kir.h: it is uniform over one); its dtype one a buffer may have. */
static f8_status check_pointer(verifier *v, f8_kir_id address, f8_kir_id index, f8_dtype dtype,
			       const char *what) {
	const f8_kernel *kernel = v->kernel;
	f8_status status = check_used(v, address, what);
	if (!status)
		status = check_used(v, index, what);
	if (status)
		return status;
	if (kernel->insts[address].type != F8_KIR_TYPE_I64 ||
	    kernel->insts[index].type != F8_KIR_TYPE_I64)
		return fail(kernel, v->diag, "%s: an address or index that is not an i64", what);
	if (in_block_loop(v, address))
		return fail(kernel, v->diag, "%s: its address %%%u is made in a block loop", what,
			    address);
	if (f8_kir_type_of_dtype(dtype) == F8_KIR_TYPE_COUNT)
		return fail(kernel, v->diag, "%s: of dtype %s, which no buffer holds", what,
			    f8_dtype_name(dtype));
	return F8_OK;
}

static f8_status verify_inst(verifier *v, f8_kir_id id, uint32_t owner) {
	const f8_kernel *kernel = v->kernel;
	const f8_kir_inst *inst = &kernel->insts[id];
	char what[64];
	snprintf(what, sizeof what, "%%%u = %s", id, f8_kir_op_name(inst->op));
	if (v->visible[id])
		return fail(kernel, v->diag, "%s is placed twice", what);
	if (inst->op == F8_KIR_OP_LOOP_VAR || inst->op == F8_KIR_OP_RESULT)
		return fail(kernel, v->diag, "%s is placed as a statement; its loop defines it", what);
	const f8_kir_id operands[3] = {inst->a, inst->b, inst->c};
	for (unsigned i = 0; i < op_rows[inst->op].operands; i++) {
		f8_status status = check_used(v, operands[i], what);
		if (status)
			return status;
	}
	if (inst->op == F8_KIR_OP_LOAD) {
		if (inst->param >= kernel->n_params || buffer_type(kernel, inst->param) != inst->type ||
		    kernel->params[inst->param].kind == F8_KERNEL_PARAM_ACCUMULATE)
			return fail(kernel, v->diag, "%s reads no in or out buffer of its type", what);
		f8_status status = check_mask(v, inst->b, what);
		if (status)
			return status;
	} else if (inst->op == F8_KIR_OP_LOAD_SHARED) {
		if (inst->param >= kernel->n_shared ||
		    f8_kir_type_of_dtype(kernel->shared[inst->param].dtype) != inst->type)
			return fail(kernel, v->diag, "%s reads no shared array of its type", what);
		if (owner == F8_KIR_NONE || kernel->stmts[owner].kind != F8_KIR_STMT_BLOCK_LOOP)
			return fail(kernel, v->diag, "%s outside a block loop", what);
	} else if (inst->op == F8_KIR_OP_LOAD_PTR) {
		f8_status status = check_pointer(v, inst->a, inst->b, inst->dtype, what);
		if (status)
			return status;
		if (f8_kir_type_of_dtype(inst->dtype) != inst->type)
			return fail(kernel, v->diag, "%s: its type is not its dtype's", what);
	} else if (inst->op == F8_KIR_OP_SIZE) {
		if (inst->param >= kernel->n_params ||
		    kernel->params[inst->param].kind != F8_KERNEL_PARAM_SIZE)
			return fail(kernel, v->diag, "%s names no size parameter", what);
	} else if (op_rows[inst->op].rule != TYPED || inst->op == F8_KIR_OP_SELECT) {
		f8_kir_type type;
		const char *problem = check_operands(kernel, inst->op, inst->a, inst->b, inst->c, &type);
		if (problem || type != inst->type)
			return fail(kernel, v->diag, "%s: %s", what,
				    problem ? problem : "its type is not its operands'");
	}
	v->visible[id] = true;
	v->scope_of[id] = owner;
	return F8_OK;
}

static f8_status verify_loop(verifier *v, uint32_t index, int depth) {
	const f8_kernel *kernel = v->kernel;
	const f8_kir_stmt *loop = &kernel->stmts[index];
	const char *name = stmt_names[loop->kind];
	bool grid = loop->kind == F8_KIR_STMT_GRID_LOOP;
	if (grid ? depth != 0 : depth != 1)
		return fail(kernel, v->diag, "%s %s", name,
			    grid ? "below the top level" : "outside a grid loop's body");
	f8_status status = check_used(v, loop->extent, name);
	if (status)
		return status;
	if (kernel->insts[loop->extent].type != F8_KIR_TYPE_I64)
		return fail(kernel, v->diag, "%s: its extent is not an i64", name);
	if (loop->var >= kernel->n_insts || kernel->insts[loop->var].op != F8_KIR_OP_LOOP_VAR ||
	    kernel->insts[loop->var].loop != index)
		return fail(kernel, v->diag, "%s has no variable of its own", name);
	v->visible[loop->var] = true;
	status = grid ? F8_OK : check_shared_uses(v, loop);
	if (!status)
		status = verify_scope(v, loop->body, loop->n_body, depth + 1, index);
	for (uint32_t i = 0; !status && i < loop->n_accumulators; i++) {
		const f8_kir_accumulator *acc = &loop->accumulators[i];
		status = check_used(v, acc->value, name);
		if (!status && kernel->insts[acc->value].type != acc->type)
			status = fail(kernel, v->diag, "%s: accumulator %u takes another type", name, i);
	}
	// Leaving the body: its values go out of scope; the results come into it.
	for (f8_kir_id id = 0; id < kernel->n_insts; id++)
		if (v->visible[id] && v->scope_of[id] == index)
			v->visible[id] = false;
	v->visible[loop->var] = false;
	for (uint32_t i = 0; !status && i < loop->n_accumulators; i++)
		v->visible[loop->accumulators[i].result] = true;
	return status;
}

static f8_status verify_write(verifier *v, const f8_kir_stmt *stmt, int depth) {
	const f8_kernel *kernel = v->kernel;
	const char *name = stmt_names[stmt->kind];
	char target[80];
	f8_kir_type type;
	if (!write_target(kernel, stmt->kind, stmt->param, target, sizeof target, &type))
		return fail(kernel, v->diag, "%s to nothing it may write", name);
	if (stmt->kind == F8_KIR_STMT_STORE_SHARED && depth != 2)
		return fail(kernel, v->diag, "%s to %s outside a block loop", name, target);
	f8_status status = check_used(v, stmt->index, name);
	if (!status)
		status = check_used(v, stmt->value, name);
	if (!status && stmt->kind != F8_KIR_STMT_STORE_SHARED)
		status = check_mask(v, stmt->mask, name);
	if (status)
		return status;
	if (stmt->kind == F8_KIR_STMT_STORE_SHARED && stmt->mask != F8_KIR_NONE)
		return fail(kernel, v->diag, "%s to %s with a mask", name, target);
	if (kernel->insts[stmt->index].type != F8_KIR_TYPE_I64 ||
	    kernel->insts[stmt->value].type != type)
		return fail(kernel, v->diag, "%s to %s: an index or value of the wrong type", name,
			    target);
	return F8_OK;
}

static f8_status verify_store_ptr(verifier *v, const f8_kir_stmt *stmt) {
	const f8_kernel *kernel = v->kernel;
	f8_status status = check_pointer(v, stmt->address, stmt->index, stmt->dtype, "store.ptr");
	if (!status)
		status = check_used(v, stmt->value, "store.ptr");
	if (status)
		return status;
	if (stmt->mask != F8_KIR_NONE)
		return fail(kernel, v->diag, "store.ptr with a mask");
	if (kernel->insts[stmt->value].type != f8_kir_type_of_dtype(stmt->dtype))
		return fail(kernel, v->diag, "store.ptr of a value of another type than %s's",
			    f8_dtype_name(stmt->dtype));
	return F8_OK;
}

static f8_status verify_scope(verifier *v, const uint32_t *list, uint32_t n, int depth,
			      uint32_t owner) {
	f8_status status = F8_OK;
	for (uint32_t i = 0; !status && i < n; i++) {
		if (list[i] >= v->kernel->n_stmts)
			return fail(v->kernel, v->diag, "a statement out of range");
		const f8_kir_stmt *stmt = &v->kernel->stmts[list[i]];
		switch (stmt->kind) {
		case F8_KIR_STMT_INST:
			status = stmt->inst < v->kernel->n_insts
					 ? verify_inst(v, stmt->inst, owner)
					 : fail(v->kernel, v->diag, "an instruction out of range");
			break;
		case F8_KIR_STMT_GRID_LOOP:
		case F8_KIR_STMT_BLOCK_LOOP:
			status = verify_loop(v, list[i], depth);
			break;
		case F8_KIR_STMT_STORE:
		case F8_KIR_STMT_ATOMIC:
		case F8_KIR_STMT_STORE_SHARED:
			status = verify_write(v, stmt, depth);
			break;
		case F8_KIR_STMT_STORE_PTR:
			status = verify_store_ptr(v, stmt);
			break;
		default:
			status = fail(v->kernel, v->diag, "a statement of no kind");
		}
	}
	return status;
}

f8_status f8_kir_verify(const f8_kernel *kernel, f8_diag *diag) {
	if (f8_kir_error(kernel))
		return fail(kernel, diag, "%s", kernel->error);
	if (kernel->current != F8_KIR_NONE)
		return fail(kernel, diag, "a loop is still open");
	uint32_t grid_loops = 0;
	for (uint32_t i = 0; i < kernel->n_top; i++)
		grid_loops += kernel->stmts[kernel->top[i]].kind == F8_KIR_STMT_GRID_LOOP;
	if (grid_loops != 1)
		return fail(kernel, diag, "%u grid loops; a kernel has one", grid_loops);
	verifier v = {.kernel = kernel, .diag = diag};
	v.visible = f8_calloc(kernel->n_insts + 1, sizeof *v.visible);
	v.scope_of = f8_calloc(kernel->n_insts + 1, sizeof *v.scope_of);
	f8_status status = v.visible && v.scope_of
				   ? verify_scope(&v, kernel->top, kernel->n_top, 0, F8_KIR_NONE)
				   : out_of_memory(kernel, diag);
	f8_free(v.visible);
	f8_free(v.scope_of);
	return status;
}

/* The printer: `%N` names instruction N; loop variables and results print as their ids too, so
 * that the text reads back to the table. Operands are printed by id, not inlined. */
static void print_inst(const f8_kernel *kernel, f8_kir_id id, FILE *out) {
	const f8_kir_inst *inst = &kernel->insts[id];
	fprintf(out, "%%%u = ", id);
	switch (inst->op) {
	case F8_KIR_OP_CONST:
		if (inst->type == F8_KIR_TYPE_I64)
			fprintf(out, "const.i64 %" PRId64, inst->i);
		else if (inst->type == F8_KIR_TYPE_BOOL)
			fprintf(out, "const.i1 %s", inst->f != 0 ? "true" : "false");
		else
			fprintf(out, "const.f32 %.9g", inst->f);
		return;
	case F8_KIR_OP_SIZE:
		fprintf(out, "size %%%s", kernel->params[inst->param].name);
		return;
	case F8_KIR_OP_LOAD:
		fprintf(out, "load.%s %%%s[%%%u]", f8_kir_type_name(inst->type),
			kernel->params[inst->param].name, inst->a);
		if (inst->b != F8_KIR_NONE)
			fprintf(out, " if %%%u", inst->b);
		return;
	case F8_KIR_OP_LOAD_SHARED:
		fprintf(out, "load.%s @%s[%%%u]", f8_kir_type_name(inst->type),
			kernel->shared[inst->param].name, inst->a);
		return;
	case F8_KIR_OP_LOAD_PTR:
		fprintf(out, "load.ptr.%s %s %%%u[%%%u]", f8_kir_type_name(inst->type),
			f8_dtype_name(inst->dtype), inst->a, inst->b);
		return;
	default:
		break;
	}
	fprintf(out, "%s.%s", f8_kir_op_name(inst->op), f8_kir_type_name(inst->type));
	const f8_kir_id operands[3] = {inst->a, inst->b, inst->c};
	for (unsigned i = 0; i < op_rows[inst->op].operands; i++)
		fprintf(out, "%s%%%u", i ? ", " : " ", operands[i]);
}

static void indent(int depth, FILE *out) {
	for (int i = 0; i < depth; i++)
		fputs("  ", out);
}

static void print_scope(const f8_kernel *kernel, const uint32_t *list, uint32_t n, int depth,
			FILE *out) {
	for (uint32_t i = 0; i < n; i++) {
		const f8_kir_stmt *stmt = &kernel->stmts[list[i]];
		indent(depth, out);
		switch (stmt->kind) {
		case F8_KIR_STMT_INST:
			print_inst(kernel, stmt->inst, out);
			break;
		case F8_KIR_STMT_GRID_LOOP:
		case F8_KIR_STMT_BLOCK_LOOP:
			fprintf(out, "%s %%%u < %%%u", stmt_names[stmt->kind], stmt->var, stmt->extent);
			for (uint32_t a = 0; a < stmt->n_accumulators; a++) {
				const f8_kir_accumulator *acc = &stmt->accumulators[a];
				fprintf(out, " %s.%s(%%%u -> %%%u)", combine_names[acc->combine],
					f8_kir_type_name(acc->type), acc->value, acc->result);
			}
			fputs(" {\n", out);
			print_scope(kernel, stmt->body, stmt->n_body, depth + 1, out);
			indent(depth, out);
			fputc('}', out);
			break;
		case F8_KIR_STMT_STORE:
			fprintf(out, "store %%%s[%%%u], %%%u", kernel->params[stmt->param].name,
				stmt->index, stmt->value);
			break;
		case F8_KIR_STMT_ATOMIC:
			fprintf(out, "atomic.%s %%%s[%%%u], %%%u", combine_names[stmt->combine],
				kernel->params[stmt->param].name, stmt->index, stmt->value);
			break;
		case F8_KIR_STMT_STORE_SHARED:
			fprintf(out, "store @%s[%%%u], %%%u", kernel->shared[stmt->param].name,
				stmt->index, stmt->value);
			break;
		case F8_KIR_STMT_STORE_PTR:
			fprintf(out, "store.ptr %s %%%u[%%%u], %%%u", f8_dtype_name(stmt->dtype),
				stmt->address, stmt->index, stmt->value);
			break;
		default:
			fputs("?", out);
		}
		if (stmt->kind != F8_KIR_STMT_INST && stmt->mask != F8_KIR_NONE)
			fprintf(out, " if %%%u", stmt->mask);
		fputc('\n', out);
	}
}

void f8_kir_print(const f8_kernel *kernel, FILE *out) {
	fprintf(out, "kernel %s(", kernel->name);
	for (uint32_t i = 0; i < kernel->n_params; i++) {
		const f8_kir_param *p = &kernel->params[i];
		fprintf(out, "%s%s %%%s", i ? ", " : "", f8_kernel_param_kind_name(p->kind), p->name);
		if (p->kind != F8_KERNEL_PARAM_SIZE)
			fprintf(out, ": %s", f8_dtype_name(p->dtype));
	}
	fputs(") {\n", out);
	for (uint32_t i = 0; i < kernel->n_shared; i++)
		fprintf(out, "  shared @%s: %s[%u]\n", kernel->shared[i].name,
			f8_dtype_name(kernel->shared[i].dtype), kernel->shared[i].count);
	print_scope(kernel, kernel->top, kernel->n_top, 1, out);
	fputs("}\n", out);
}
