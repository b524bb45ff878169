/*
 * Host kernels' machine code kept on disk between runs (codegen/host_jit.h uses it). LLVM's
 * O2 pipeline and its code generator take about 1.3 s of a 1.8 s gpt-tiny FP8 run on the CPU
 * backend (2 cores, 2026-12-07), and every run of a plan, every rank of a parallel run, compiles
 * the same kernels again: the cache keeps each module's object file under a key of everything
 * that decides its machine code, so that a run whose kernels were compiled before only links
 * them.
 *
 * The key (XXH3's 128 bits) hashes the cache's format, LLVM's version, the optimizer's pipeline,
 * the target's triple, CPU and features, and the module's bitcode before optimization (the
 * lowered kernels themselves: a change to any kernel, or to how f8c lowers it, is another key).
 * An entry is one file, DIR/KEY.o, written under another name and renamed into place, with a
 * header that repeats the key and holds the object's length and hash: a torn or foreign file is
 * a miss, never code. Processes that compile the same key at once (the ranks of one run) take
 * a lock on DIR/KEY.lock so that one compiles and the others load. The folder is held under a
 * size (F8_KERNEL_CACHE_MAX_BYTES): the least recently used entries go first.
 *
 * The PTX of each GPU kernel (codegen/nvptx.c) is kept the same way, under a key whose target
 * says NVPTX and PTX: f8c compile then lowers a kernel it compiled before (its geometry and its
 * key), but neither optimizes nor emits it again.
 *
 * The cache only saves time: a folder that cannot be made, read or written, or that another
 * user owns or may write into, leaves the kernels to be compiled as without it, and the
 * functions here return no error. Only the cache's own files (named by their key) are ever
 * removed from the folder.
 */
#ifndef F8_CODEGEN_KERNEL_CACHE_H
#define F8_CODEGEN_KERNEL_CACHE_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // uint8_t

#include <llvm-c/Types.h> // LLVMModuleRef, LLVMMemoryBufferRef

/* The folder's largest size before its least recently used entries are removed. */
#define F8_KERNEL_CACHE_MAX_BYTES ((uint64_t)1 << 30)

/* One key's place in the cache: its name in hex and the lock that the compiling process
 * holds. */
typedef struct f8_kernel_cache_entry {
	const char *folder; // the caller's, outlives the entry
	char key[33];       // 128 bits in hex
	uint8_t digest[16];
	int lock; // the lock file's descriptor, -1 when none is held
} f8_kernel_cache_entry;

/*
 * The entry of `module` (lowered, not yet optimized) compiled for `target` (a description of
 * everything the code generator is told besides the module: triple, CPU, features) in
 * `folder`, which is made if missing. Takes the entry's lock, waiting while another process
 * holds it (it is compiling the same kernels). False when there is no usable cache (no folder,
 * no bitcode): the caller compiles as without one.
 */
bool f8_kernel_cache_open(const char *folder, LLVMModuleRef module, const char *target,
			  f8_kernel_cache_entry *entry);

/* The entry's object file, checked against its header, or NULL on a miss. The buffer is the
 * caller's (LLVMDisposeMemoryBuffer, or an LLVM call that takes it). */
LLVMMemoryBufferRef f8_kernel_cache_load(const f8_kernel_cache_entry *entry);

/* Writes `object` (`size` bytes) as the entry, then, at the first store of the process and at
 * most once a minute after it, holds the folder to F8_KERNEL_CACHE_MAX_BYTES
 * (f8_kernel_cache_trim). Safe from several threads. */
void f8_kernel_cache_store(const f8_kernel_cache_entry *entry, const void *object, size_t size);

/* When `folder`'s entries (and lock files) pass `max_bytes`, removes the least recently used
 * (loaded or stored) until they are under three quarters of it; and, whatever the size, the
 * temporary files of writers that died more than an hour ago. */
void f8_kernel_cache_trim(const char *folder, uint64_t max_bytes);

/* Releases the entry's lock; the entry may be closed more than once. */
void f8_kernel_cache_close(f8_kernel_cache_entry *entry);

#endif
