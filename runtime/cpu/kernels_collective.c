/*
 * Reference kernels of the collectives, for a single process: a group of one rank, where
 * AllReduce, AllGather and ReduceScatter give back their input. Anything that needs a second
 * rank (ranks > 1, Send, Recv) is refused: the CPU backend's collectives are MPI's (DESIGN.md,
 * "Distributed"), and they come with the distributed work.
 */
#include <string.h> // memcpy

#include "runtime/cpu/kernel_util.h" // f8_cpu_fail_unsupported
#include "runtime/cpu/kernels.h"     // F8_CPU_KERNEL

/* Refuses a collective that needs other ranks. */
static f8_status needs_ranks(const f8_cpu_kernel_call *call, f8_diag *diag, const char *what) {
	f8_status status = f8_cpu_fail_unsupported(call, diag, "%s needs more than one rank; the "
							       "CPU backend runs a single process",
						   what);
	f8_diag_hint(diag, "the CPU backend's MPI collectives come with the distributed issue; "
			   "until then run the plan without sharding (one rank)");
	return status;
}

/* Each input's bytes as its output: the collective over a group of one rank. */
static f8_status copy_input(const f8_cpu_kernel_call *call) {
	for (uint32_t i = 0; i < call->node->n_outputs; i++)
		if (call->outputs[i].n_bytes)
			memcpy(call->outputs[i].data, call->inputs[i]->data, call->outputs[i].n_bytes);
	return F8_OK;
}

/* AllReduce has no rank count of its own: in one process its group has one rank; each input
 * is its output. */
F8_CPU_KERNEL(ALL_REDUCE) {
	(void)diag;
	for (uint32_t i = 0; i < call->node->n_outputs; i++)
		if (call->outputs[i].n_bytes)
			memcpy(call->outputs[i].data, call->inputs[i]->data, call->outputs[i].n_bytes);
	return F8_OK;
}

F8_CPU_KERNEL(ALL_GATHER) {
	if (f8_node_attr_int(call->node, "ranks", 1) != 1)
		return needs_ranks(call, diag, "AllGather over several ranks");
	return copy_input(call);
}

F8_CPU_KERNEL(REDUCE_SCATTER) {
	if (f8_node_attr_int(call->node, "ranks", 1) != 1)
		return needs_ranks(call, diag, "ReduceScatter over several ranks");
	return copy_input(call);
}

F8_CPU_KERNEL(LOCAL_SHARD) {
	if (f8_node_attr_int(call->node, "ranks", 1) != 1)
		return needs_ranks(call, diag, "LocalShard over several ranks");
	return copy_input(call);
}

F8_CPU_KERNEL(SEND) {
	return needs_ranks(call, diag, "Send");
}

F8_CPU_KERNEL(RECV) {
	return needs_ranks(call, diag, "Recv");
}
