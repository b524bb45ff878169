/*
 * Kernels -> PTX text (codegen/nvptx.h): each kernel in an LLVM context and module of its own,
 * compiled on as many threads as the machine has processors (up to 16), each thread with an
 * NVPTX target machine of its own (its creation is cheap next to the code generation); the
 * kernels' texts are then joined in their order under one header, so that the module is the same
 * bytes whatever the number of threads. GPT-1.3B's FP8 step has 51 distinct kernels, whose
 * optimization and code generation were 3.3 s of its 3.4 s compile on one thread.
 */
#include "codegen/nvptx.h" // f8_nvptx_compile

#include <pthread.h>   // pthread_once, pthread_create, pthread_join
#include <stdatomic.h> // atomic_uint, atomic_fetch_add
#include <string.h>    // memcpy, memcmp, strlen, strstr, strchr
#include <unistd.h>    // sysconf

#include <llvm-c/Core.h>          // LLVMContextCreate, LLVMModuleCreateWithNameInContext
#include <llvm-c/Target.h>        // LLVMInitializeNVPTXTarget, LLVMCreateTargetDataLayout
#include <llvm-c/TargetMachine.h> // LLVMCreateTargetMachine, LLVMTargetMachineEmitToMemoryBuffer

#include "codegen/kernel_cache.h" // f8_kernel_cache_open, f8_kernel_cache_load
#include "ir/alloc.h"              // f8_malloc, f8_calloc, f8_free

static pthread_once_t nvptx_once = PTHREAD_ONCE_INIT;

static void nvptx_initialize(void) {
	LLVMInitializeNVPTXTargetInfo();
	LLVMInitializeNVPTXTarget();
	LLVMInitializeNVPTXTargetMC();
	LLVMInitializeNVPTXAsmPrinter();
}

/* The NVPTX target machine into *machine. */
static f8_status nvptx_machine(LLVMTargetMachineRef *machine, f8_diag *diag) {
	pthread_once(&nvptx_once, nvptx_initialize);
	LLVMTargetRef target;
	char *message = NULL;
	if (LLVMGetTargetFromTriple(F8_NVPTX_TRIPLE, &target, &message)) {
		f8_status status = f8_diag_set(diag, F8_ERR_UNSUPPORTED,
					       "no NVPTX target in this LLVM: %s",
					       message ? message : "");
		f8_diag_hint(diag, "f8c needs LLVM 19 built with the NVPTX back end (llvm-19-dev)");
		LLVMDisposeMessage(message);
		return status;
	}
	*machine = LLVMCreateTargetMachine(target, F8_NVPTX_TRIPLE, F8_NVPTX_CPU,
					   F8_NVPTX_FEATURES, LLVMCodeGenLevelDefault,
					   LLVMRelocDefault, LLVMCodeModelDefault);
	if (!*machine)
		return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "LLVM made no NVPTX target machine "
				   "for %s", F8_NVPTX_CPU);
	return F8_OK;
}

/* A buffer of PTX (the back end's, or a cached entry's) as a terminated string, or NULL (out
 * of memory). Takes the buffer. */
static char *text_of(LLVMMemoryBufferRef buffer) {
	size_t size = LLVMGetBufferSize(buffer);
	char *text = f8_malloc(size + 1);
	if (text) {
		memcpy(text, LLVMGetBufferStart(buffer), size);
		text[size] = '\0';
	}
	LLVMDisposeMemoryBuffer(buffer);
	return text;
}

/* The module's PTX text into *text, in memory of f8_malloc. */
static f8_status emit_ptx(LLVMTargetMachineRef machine, LLVMModuleRef module, char **text,
			  f8_diag *diag) {
	LLVMMemoryBufferRef buffer = NULL;
	char *message = NULL;
	if (LLVMTargetMachineEmitToMemoryBuffer(machine, module, LLVMAssemblyFile, &message,
						&buffer)) {
		f8_status status = f8_diag_set(diag, F8_ERR_INVALID,
					       "the NVPTX back end failed: %s",
					       message ? message : "");
		LLVMDisposeMessage(message);
		return status;
	}
	return (*text = text_of(buffer)) ? F8_OK
					 : f8_diag_set(diag, F8_ERR_NOMEM, "out of memory for a "
						       "kernel's PTX");
}

/* What the cache's key takes besides the module (codegen/kernel_cache.h): the target, and that
 * the entry is PTX text, not an object file. */
#define NVPTX_CACHE_TARGET F8_NVPTX_TRIPLE " " F8_NVPTX_CPU " " F8_NVPTX_FEATURES " ptx"

/*
 * One kernel alone -> its PTX text: a context and a module of its own, so that kernels compile
 * on several threads at once and each kernel's text is the same whatever the others are. With
 * a cache folder, the text of a kernel compiled before is taken from it: the kernel is still
 * lowered (its launch geometry comes from there, and its bitcode is the key), but not
 * optimized and emitted again.
 */
static f8_status compile_kernel(LLVMTargetMachineRef machine, const f8_kernel *kernel,
				const char *cache_folder, char **text,
				f8_launch_geometry *geometry, f8_diag *diag) {
	LLVMContextRef context = LLVMContextCreate();
	LLVMModuleRef module = LLVMModuleCreateWithNameInContext("f8c", context);
	LLVMSetTarget(module, F8_NVPTX_TRIPLE);
	LLVMTargetDataRef layout = LLVMCreateTargetDataLayout(machine);
	LLVMSetModuleDataLayout(module, layout);
	LLVMDisposeTargetData(layout);
	f8_status status = f8_llvm_lower(module, kernel, F8_LLVM_TARGET_NVPTX, geometry, diag);
	f8_kernel_cache_entry entry = {.lock = -1};
	bool cached = !status && cache_folder &&
		      f8_kernel_cache_open(cache_folder, module, NVPTX_CACHE_TARGET, &entry);
	LLVMMemoryBufferRef hit = cached ? f8_kernel_cache_load(&entry) : NULL;
	if (hit && !(*text = text_of(hit)))
		status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory for a kernel's PTX");
	if (!status && !hit)
		status = f8_llvm_optimize(module, machine, diag);
	if (!status && !hit)
		status = emit_ptx(machine, module, text, diag);
	if (!status && !hit && cached)
		f8_kernel_cache_store(&entry, *text, strlen(*text));
	f8_kernel_cache_close(&entry);
	LLVMDisposeModule(module);
	LLVMContextDispose(context);
	return status;
}

/* The kernels of one call, shared by its worker threads: each takes the next kernel not yet
 * taken. */
typedef struct compile_work {
	const f8_kernel *const *kernels;
	uint32_t n;
	const char *cache_folder;     // NULL: none
	char **texts;                 // (n) each kernel's PTX
	f8_launch_geometry *geometry; // (n)
	atomic_uint next;             // the next kernel to take
	f8_status *statuses;          // (n) each kernel's
	f8_diag *diags;               // (n) a failed kernel's diagnostic
} compile_work;

static void *compile_worker(void *argument) {
	compile_work *work = argument;
	LLVMTargetMachineRef machine = NULL;
	f8_diag machine_diag = {0};
	f8_status made = nvptx_machine(&machine, &machine_diag);
	for (uint32_t i; (i = atomic_fetch_add(&work->next, 1)) < work->n;) {
		work->statuses[i] = made ? made
				   : compile_kernel(machine, work->kernels[i], work->cache_folder,
						    &work->texts[i], &work->geometry[i],
						    &work->diags[i]);
		if (made)
			work->diags[i] = machine_diag;
	}
	if (!made)
		LLVMDisposeTargetMachine(machine);
	return NULL;
}

/* Threads to compile on: one per processor online, at most MAX_THREADS and one per kernel. */
enum { MAX_THREADS = 16 };

static uint32_t thread_count(uint32_t n) {
	long online = sysconf(_SC_NPROCESSORS_ONLN);
	uint32_t threads = online < 1 ? 1 : online > MAX_THREADS ? MAX_THREADS : (uint32_t)online;
	return threads < n ? threads : n ? n : 1;
}

/* The lines every kernel's module begins with (the back end's comment, .version, .target,
 * .address_size): the length of `text`'s, through the ".address_size" line; 0 when it has
 * none. */
static size_t header_length(const char *text) {
	const char *at = strstr(text, "\n.address_size ");
	if (!at)
		return 0;
	const char *end = strchr(at + 1, '\n');
	return end ? (size_t)(end + 1 - text) : 0;
}

/* The kernels' texts as one module: the first's header, then each text without its own (all
 * headers must be the same: one target, one PTX version). */
static f8_status join_texts(char *const *texts, uint32_t n, char **ptx, f8_diag *diag) {
	size_t header = header_length(texts[0]), size = header + 1;
	if (!header)
		return f8_diag_set(diag, F8_ERR_INVALID, "the NVPTX back end's PTX has no "
				   ".address_size line to join kernels' modules after");
	for (uint32_t i = 0; i < n; i++) {
		if (header_length(texts[i]) != header || memcmp(texts[i], texts[0], header))
			return f8_diag_set(diag, F8_ERR_INVALID, "the NVPTX back end began kernel %u's "
					   "PTX otherwise than kernel 0's (%.*s)", i, (int)header,
					   texts[i]);
		size += strlen(texts[i]) - header;
	}
	char *at = *ptx = f8_malloc(size);
	if (!at)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory for %zu bytes of PTX", size);
	memcpy(at, texts[0], header);
	at += header;
	for (uint32_t i = 0; i < n; i++) {
		size_t length = strlen(texts[i]) - header;
		memcpy(at, texts[i] + header, length);
		at += length;
	}
	*at = '\0';
	return F8_OK;
}

f8_status f8_nvptx_compile(const f8_kernel *const *kernels, uint32_t n, const char *cache_folder,
			   char **ptx, f8_launch_geometry *geometry, f8_diag *diag) {
	*ptx = NULL;
	LLVMTargetMachineRef machine = NULL;
	f8_status status = nvptx_machine(&machine, diag); // no NVPTX back end: said once, here
	if (status)
		return status;
	LLVMDisposeTargetMachine(machine);
	compile_work work = {.kernels = kernels, .n = n, .cache_folder = cache_folder};
	work.texts = f8_calloc(n + 1, sizeof *work.texts);
	work.statuses = f8_calloc(n + 1, sizeof *work.statuses);
	work.diags = f8_calloc(n + 1, sizeof *work.diags);
	work.geometry = geometry;
	atomic_init(&work.next, 0);
	if (!work.texts || !work.statuses || !work.diags)
		status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	pthread_t threads[MAX_THREADS];
	uint32_t started = 0, wanted = status ? 0 : thread_count(n);
	// The calling thread is a worker too; the others, as many as start.
	while (started + 1 < wanted && !pthread_create(&threads[started], NULL, compile_worker,
						      &work))
		started++;
	if (!status)
		compile_worker(&work);
	for (uint32_t t = 0; t < started; t++)
		pthread_join(threads[t], NULL);
	// The first failed kernel's diagnostic, whichever thread met it first.
	for (uint32_t i = 0; !status && i < n; i++)
		if ((status = work.statuses[i]))
			*diag = work.diags[i];
	if (!status && n)
		status = join_texts(work.texts, n, ptx, diag);
	else if (!status && !(*ptx = f8_calloc(1, 1)))
		status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	for (uint32_t i = 0; work.texts && i < n; i++)
		f8_free(work.texts[i]);
	f8_free(work.texts);
	f8_free(work.statuses);
	f8_free(work.diags);
	return status;
}
