/*
 * The kernel table of the CPU backend, generated from ir/ops.def (one F8_CPU_KERNEL per op,
 * defined in runtime/cpu/kernels_*.c), and the helpers every kernel shares.
 */
#include "runtime/cpu/kernels.h" // f8_cpu_kernel_fn, f8_cpu_kernel_call

#include <stdarg.h> // va_list
#include <stdio.h>  // vsnprintf

static const f8_cpu_kernel_fn kernels[] = {
#define X(e, ...) [F8_OP_##e] = f8_cpu_kernel_##e,
#include "ir/ops.def"
#undef X
};
static_assert(sizeof kernels / sizeof kernels[0] == F8_OP_COUNT, "one kernel per op");

f8_cpu_kernel_fn f8_cpu_kernel_get(f8_op op) {
	assert((unsigned)op < F8_OP_COUNT);
	return kernels[op];
}

int64_t f8_cpu_dim(const f8_cpu_kernel_call *call, f8_dim dim) {
	int64_t value = 0;
	f8_dim_evaluate(dim, call->symbol_values, &value); // sizes checked when they were bound
	return value;
}

f8_status f8_cpu_fail(const f8_cpu_kernel_call *call, f8_diag *diag, const char *format, ...) {
	va_list args;
	va_start(args, format);
	f8_diag_setv(diag, F8_ERR_INVALID, format, args);
	va_end(args);
	if (diag)
		f8_diag_set_node(diag, call->graph, (f8_node_id)(call->node - call->graph->nodes));
	return F8_ERR_INVALID;
}
