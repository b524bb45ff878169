/*
 * Training data as token files, their train/valid/test split, and the batch samplers that cut
 * (input, label) windows out of them.
 *
 * Files:
 *   llm.c     a header of 256 little-endian int32 (magic 20240520, version 1, the token count,
 *             the rest 0), then the tokens as uint16; llm.c's Llama 3 files (magic 20240801,
 *             version 7) hold uint32 tokens and are read too
 *   uint16    raw little-endian uint16 tokens, no header (nanoGPT's train.bin)
 *   uint32    raw little-endian uint32 tokens, no header
 * Tokens are held as uint32 whatever the file.
 *
 * Sampling is counter-based (splitmix64): a sampler's whole state is one uint64 that a
 * checkpoint saves and restores, after which the batches continue bit for bit as if the run
 * had never stopped.
 */
#ifndef F8_RUNTIME_TOKENS_H
#define F8_RUNTIME_TOKENS_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // uint32_t, uint64_t, int64_t

#include "ir/diag.h" // f8_status, f8_diag

enum {
	F8_TOKENS_LLMC_MAGIC = 20240520,        // llm.c's GPT-2 files: uint16 tokens
	F8_TOKENS_LLMC_VERSION = 1,
	F8_TOKENS_LLMC_MAGIC_UINT32 = 20240801, // llm.c's Llama 3 files: uint32 tokens
	F8_TOKENS_LLMC_VERSION_UINT32 = 7,
	F8_TOKENS_LLMC_HEADER_INTS = 256,       // the header: 256 int32, 1024 bytes
};

typedef enum f8_token_format {
	F8_TOKEN_FORMAT_AUTO,   // llm.c's, known by its magic; anything else is an error
	F8_TOKEN_FORMAT_LLMC,   // llm.c's header, then uint16 (or uint32, by the magic)
	F8_TOKEN_FORMAT_UINT16, // raw uint16
	F8_TOKEN_FORMAT_UINT32, // raw uint32
	F8_TOKEN_FORMAT_COUNT
} f8_token_format;

/* The format's name as --data-format takes it: "auto", "llmc", "uint16", "uint32". */
const char *f8_token_format_name(f8_token_format format);

/* Looks a format up by its name; false when there is none by that name. */
bool f8_token_format_from_name(const char *name, f8_token_format *out);

/* Tokens in memory. */
typedef struct f8_tokens {
	uint32_t *tokens; // (n) owned: f8_tokens_destroy frees them
	size_t n;
} f8_tokens;

/*
 * Reads the token file at `path` in `format` into *out. AUTO takes a file with llm.c's magic
 * as llm.c's and refuses any other (its hint names --data-format uint16|uint32: a raw file has
 * nothing to know it by). llm.c headers are checked: the version, and the count against the
 * file's size (a shorter file is torn, a longer one is refused too); a raw file's size must be
 * a multiple of its token size. Errors: F8_ERR_IO, F8_ERR_PARSE, F8_ERR_UNSUPPORTED (an llm.c
 * version f8c does not know), F8_ERR_NOMEM; the diagnostic's file is `path`, and *out is left
 * empty.
 */
f8_status f8_tokens_load(const char *path, f8_token_format format, f8_tokens *out,
			 f8_diag *diag);

/* Frees the tokens and empties `tokens`. NULL and empty are allowed. */
void f8_tokens_destroy(f8_tokens *tokens);

/*
 * Checks that every token is below `vocab`, the model's vocabulary size. F8_ERR_INVALID naming
 * the first token that is not and its position.
 */
f8_status f8_tokens_check_vocab(const f8_tokens *tokens, uint32_t vocab, f8_diag *diag);

/*
 * Writes `n` tokens to `path` in llm.c's format (magic 20240520, version 1, uint16 tokens),
 * atomically. F8_ERR_ARGUMENT for a token >= 65536 (named with its position) or more than
 * INT32_MAX tokens; F8_ERR_IO; F8_ERR_NOMEM.
 */
f8_status f8_tokens_write_llmc(const char *path, const uint32_t *tokens, size_t n,
			       f8_diag *diag);

/* A contiguous range of tokens: [begin, end). */
typedef struct f8_token_range {
	size_t begin, end;
} f8_token_range;

/*
 * Splits `n_tokens` tokens into `n_weights` (2 or 3) contiguous ranges, train, valid[, test],
 * in proportion to `weights`, with Megatron's --split semantics ("969,30,1"): the weights are
 * normalized, each range's end is the previous end plus round(weight * n_tokens) (half to
 * even), and all the ends move by the same amount so that the last is n_tokens. Where that
 * arithmetic would make a range negative (Megatron's can, with a first weight of 0), the range
 * is empty. `ranges` receives n_weights ranges. F8_ERR_ARGUMENT for weights that are negative,
 * not finite or all 0, and for n_weights other than 2 or 3.
 */
f8_status f8_tokens_split(size_t n_tokens, const double *weights, int n_weights,
			  f8_token_range *ranges, f8_diag *diag);

/*
 * A sampler of training batches: each row a window at a uniformly random start. Its state is
 * a plain integer: save `state` in a checkpoint and put it back to continue bit for bit.
 */
typedef struct f8_batch_sampler {
	const f8_tokens *tokens; // not owned: must outlive the sampler
	uint64_t seed;           // where the state starts: f8_batch_sampler_rewind goes back to it
	uint64_t state;          // the counter of the random stream; saved and restored as is
} f8_batch_sampler;

/* The seed of eval samplers: every evaluation of every run sees the same windows. */
#define F8_EVAL_SAMPLER_SEED UINT64_C(0x65766131) // "eva1"

/* Starts a training sampler over `tokens` at `seed`. */
void f8_batch_sampler_init(f8_batch_sampler *sampler, const f8_tokens *tokens, uint64_t seed);

/*
 * Starts an eval sampler over `tokens`: fixed seed, a state of its own (sampling it does not
 * move a training sampler). Call f8_batch_sampler_rewind before each evaluation, and each
 * evaluation gets the same batches.
 */
void f8_batch_sampler_init_eval(f8_batch_sampler *sampler, const f8_tokens *tokens);

/* Puts the state back to where the seed starts it. */
void f8_batch_sampler_rewind(f8_batch_sampler *sampler);

/*
 * Fills one batch: for each of `batch` rows, a window start o uniform in
 * [range.begin, range.end - seq - 1], inputs[row, :] = tokens[o : o + seq] and
 * labels[row, :] = tokens[o + 1 : o + seq + 1]. inputs and labels are (batch, seq). Advances
 * the state. F8_ERR_ARGUMENT when the range holds fewer than seq + 1 tokens (the message says
 * how many a window needs), lies outside the tokens, or batch or seq is 0.
 */
f8_status f8_batch_sample(f8_batch_sampler *sampler, f8_token_range range, size_t batch,
			  size_t seq, int64_t *inputs, int64_t *labels, f8_diag *diag);

#endif
