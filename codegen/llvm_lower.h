/*
 * Kernel IR -> LLVM IR through the LLVM-C API, for two targets: NVPTX (sm_90 PTX, through
 * codegen/nvptx.h) and the host (ORC JIT, through codegen/host_jit.h).
 *
 * The ABI is the same on both targets, so that a runtime marshals arguments once:
 *   - the kernel takes its parameters in order; a buffer is a pointer to its first element
 *     (NVPTX: `ptr addrspace(1)`), a size an i64;
 *   - NVPTX: NAME is a kernel entry (calling convention PTX_Kernel and nvvm.annotations);
 *   - HOST: NAME is `void NAME(void **args)`, args[i] pointing at parameter i's value (a
 *     `void *` for a buffer, an `int64_t` for a size): CUDA's cuLaunchKernel kernelParams
 *     convention. The kernel proper is NAME.body, internal.
 *
 * How the loops map (kir.h describes what they mean):
 *   NVPTX, a grid loop that holds block loops: one row per block at a time (grid-stride over
 *     rows by blockIdx.x); a block loop spreads the row's columns over threadIdx.x with stride
 *     blockDim.x; its accumulators are combined per thread, then over the block by warp
 *     shuffles and shared memory, in a fixed order, and every thread gets the same result;
 *     except where an accumulator's result is only the value of a grid accumulator of the same
 *     combine (a row's amax into the kernel's): then each thread keeps its share across rows
 *     and the grid accumulator is reduced over the block once, after the last row. A block loop
 *     starts with a barrier, so it sees what earlier block loops and the row's stores wrote,
 *     and the shared scratch and shared arrays are free again; a grid loop whose body is one
 *     block loop with no reduction of its own, no row stores and a kernel without shared
 *     arrays needs none and has none. Row-level stores and atomics run on thread 0. Shared
 *     arrays are shared memory, one per block.
 *   NVPTX, a grid loop without block loops: one row per thread, grid-stride over
 *     blockDim.x * gridDim.x; the grid loop's accumulators are combined per thread, then over
 *     the block.
 *   NVPTX, the vector form (codegen/llvm_loops.c): a block loop or a grid loop of one row per
 *     thread whose body loads or stores a buffer at consecutive elements for consecutive
 *     iterations runs 2-16 consecutive iterations a thread, such an access one 16-byte (or
 *     narrower) ld.global / st.global where the address is aligned and every lane's mask holds
 *     (checked at run time; one access a lane otherwise), then the iterations left over one a
 *     thread.
 *   Masked loads, stores and atomics are branches around the access, on both targets.
 *   NVPTX, the top level: instructions run on every thread; the epilogue's atomics of the grid
 *     loop's results run once per block (thread 0) with that block's share; any other top-level
 *     store or atomic runs once per kernel (thread 0 of block 0). A top-level store of a value
 *     computed from a grid loop's result, or an atomic of one other than the result itself with
 *     its accumulator's combine, has no per-block meaning: it is refused (on both targets, so
 *     that the host does not accept what the GPU cannot run).
 *   HOST: plain loops on one thread, accumulators in iteration order, atomics as plain
 *     read-modify-write, shared arrays on the stack of the call.
 * Arithmetic: IEEE f32 without fast-math flags and without contraction; max and min propagate
 * NaN (llvm.maximum/minimum); sqrt and division are correctly rounded; exp, log, tanh and erf
 * are codegen/llvm_math.c's own sequences, the same instructions on both targets. An atomic
 * max of f32 compares bit patterns as unsigned integers (atomicrmw umax; kir.h says why), and
 * one of -inf, the max accumulator's identity, does nothing.
 */
#ifndef F8_CODEGEN_LLVM_LOWER_H
#define F8_CODEGEN_LLVM_LOWER_H

#include <stdint.h> // uint32_t

#include <llvm-c/Core.h>          // LLVMModuleRef
#include <llvm-c/TargetMachine.h> // LLVMTargetMachineRef

#include "codegen/kir.h" // f8_kernel
#include "ir/diag.h"     // f8_status, f8_diag
#include "ir/launch.h"   // f8_launch_geometry

/* X(ENUM, name): the targets of the lowering. */
#define F8_LLVM_TARGET_LIST(X) \
	X(NVPTX, "nvptx")      \
	X(HOST, "host")

typedef enum f8_llvm_target {
#define F8_LLVM_TARGET_ENUM(e, name) F8_LLVM_TARGET_##e,
	F8_LLVM_TARGET_LIST(F8_LLVM_TARGET_ENUM)
#undef F8_LLVM_TARGET_ENUM
	F8_LLVM_TARGET_COUNT
} f8_llvm_target;

const char *f8_llvm_target_name(f8_llvm_target target);

/* How to launch one kernel: ir/launch.h's f8_launch_geometry, which f8_llvm_lower fills. */

/*
 * Lowers `kernel` (verified here with f8_kir_verify) into `module`, which the caller made for
 * `target` (its context, triple and data layout): defines NAME (and NAME.body for the host) and
 * the kernel's shared scratch, and fills *geometry. The module is verified after the kernel is
 * added. F8_ERR_INVALID when the kernel does not verify; F8_ERR_UNSUPPORTED (naming the kernel
 * and the statement) for what the targets cannot run: a remainder of f32, an atomic on a buffer
 * other than f32 or i64, a top-level use of a grid loop's result with no per-block meaning (see
 * above). The module may hold a partial function after a failure: discard it.
 */
f8_status f8_llvm_lower(LLVMModuleRef module, const f8_kernel *kernel, f8_llvm_target target,
			f8_launch_geometry *geometry, f8_diag *diag);

/* The optimizer's pipeline, in LLVM's pass-pipeline text (codegen/kernel_cache.h keys on it). */
#define F8_LLVM_PIPELINE "default<O2>"

/*
 * Verifies `module` and runs LLVM's F8_LLVM_PIPELINE on it for `machine` (NULL: no
 * target-specific information). No fast-math and no contraction come in: the passes only
 * keep what the IR allows. F8_ERR_INVALID with LLVM's message when the module does not verify
 * or the passes fail.
 */
f8_status f8_llvm_optimize(LLVMModuleRef module, LLVMTargetMachineRef machine, f8_diag *diag);

#endif
