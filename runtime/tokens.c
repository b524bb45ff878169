/*
 * Token files (llm.c's and raw), the Megatron-style split, and the counter-based batch sampler.
 */
#define _POSIX_C_SOURCE 200809L // fileno, fstat

#include "runtime/tokens.h" // f8_tokens, f8_batch_sampler

#include <assert.h>   // static_assert
#include <errno.h>    // errno
#include <math.h>     // isfinite, rint
#include <stdio.h>    // FILE, fopen, fread, fclose
#include <string.h>   // strcmp, strerror
#include <sys/stat.h> // fstat, S_ISREG

#include "ir/alloc.h"            // f8_malloc, f8_free
#include "ir/diag.h"             // f8_diag_set_in_file
#include "runtime/atomic_file.h" // f8_atomic_file_*

enum {
	LLMC_HEADER_BYTES = F8_TOKENS_LLMC_HEADER_INTS * 4,
	CHUNK_TOKENS = 4096, // tokens converted at a time on their way in and out
};

static const char *const format_names[F8_TOKEN_FORMAT_COUNT] = {
	[F8_TOKEN_FORMAT_AUTO] = "auto",
	[F8_TOKEN_FORMAT_LLMC] = "llmc",
	[F8_TOKEN_FORMAT_UINT16] = "uint16",
	[F8_TOKEN_FORMAT_UINT32] = "uint32",
};
static_assert(sizeof format_names / sizeof format_names[0] == F8_TOKEN_FORMAT_COUNT,
	      "a name for each token format");

const char *f8_token_format_name(f8_token_format format) {
	return format >= 0 && format < F8_TOKEN_FORMAT_COUNT ? format_names[format] : "?";
}

bool f8_token_format_from_name(const char *name, f8_token_format *out) {
	for (int i = 0; i < F8_TOKEN_FORMAT_COUNT; i++)
		if (strcmp(name, format_names[i]) == 0) {
			*out = (f8_token_format)i;
			return true;
		}
	return false;
}

/* fail(diag, path, status, format, ...): every failure here is about the file at `path`. */
#define fail f8_diag_set_in_file

static uint32_t read_le32(const unsigned char *p) {
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* ---- loading ------------------------------------------------------------------------------- */

/* Where the tokens are in a file: after `offset` bytes, `n` of them, `size` bytes each. */
typedef struct token_layout {
	uint64_t offset;
	uint64_t n;
	int size;
} token_layout;

static f8_status not_llmc(const char *path, const char *why, f8_diag *diag) {
	f8_diag_hint(diag, "llm.c's files start with the magic %d; for a raw token file give its "
			   "format: --data-format uint16|uint32", F8_TOKENS_LLMC_MAGIC);
	return fail(diag, path, F8_ERR_PARSE, "not an llm.c token file: %s", why);
}

/* Reads and checks llm.c's header and finds the tokens after it. */
static f8_status llmc_layout(FILE *file, uint64_t file_size, const char *path,
			     token_layout *layout, f8_diag *diag) {
	unsigned char header[LLMC_HEADER_BYTES];
	size_t got = fread(header, 1, sizeof header, file);
	if (got < 4 || (read_le32(header) != F8_TOKENS_LLMC_MAGIC &&
			read_le32(header) != F8_TOKENS_LLMC_MAGIC_UINT32)) {
		if (ferror(file))
			return fail(diag, path, F8_ERR_IO, "cannot read %s: %s", path,
				    strerror(errno));
		return not_llmc(path, got < 4 ? "shorter than its magic" : "no magic 20240520 in "
				"its first 4 bytes", diag);
	}
	if (got < sizeof header) {
		f8_diag_hint(diag, "the file was cut short (an interrupted copy or write?): write "
				   "it again");
		return fail(diag, path, F8_ERR_PARSE, "the llm.c token file is torn: %zu bytes, "
			    "shorter than its %d-byte header", got, LLMC_HEADER_BYTES);
	}
	bool wide = read_le32(header) == F8_TOKENS_LLMC_MAGIC_UINT32;
	int32_t version = (int32_t)read_le32(header + 4), count = (int32_t)read_le32(header + 8);
	int expected = wide ? F8_TOKENS_LLMC_VERSION_UINT32 : F8_TOKENS_LLMC_VERSION;
	if (version != expected) {
		f8_diag_hint(diag, "write it again with llm.c's dev/data scripts or f8c tokenize");
		return fail(diag, path, F8_ERR_UNSUPPORTED, "the llm.c token file has version %d; "
			    "f8c reads version %d after the magic %u", (int)version, expected,
			    (unsigned)read_le32(header));
	}
	if (count < 0)
		return fail(diag, path, F8_ERR_PARSE, "the llm.c token file's header gives a "
			    "negative token count, %d", (int)count);
	*layout = (token_layout){LLMC_HEADER_BYTES, (uint64_t)count, wide ? 4 : 2};
	uint64_t data = file_size - LLMC_HEADER_BYTES, needed = layout->n * (uint64_t)layout->size;
	if (data < needed) {
		f8_diag_hint(diag, "the file was cut short (an interrupted copy or write?): write "
				   "it again");
		return fail(diag, path, F8_ERR_PARSE, "the llm.c token file is torn: its header "
			    "says %d tokens (%llu bytes), the file holds %llu bytes after the "
			    "header", (int)count, (unsigned long long)needed,
			    (unsigned long long)data);
	}
	if (data > needed)
		return fail(diag, path, F8_ERR_PARSE, "the llm.c token file holds %llu bytes of "
			    "tokens, but its header says %d tokens (%llu bytes)",
			    (unsigned long long)data, (int)count, (unsigned long long)needed);
	return F8_OK;
}

/* Where the tokens of the open `file` are, by `format`. */
static f8_status find_layout(FILE *file, uint64_t file_size, f8_token_format format,
			     const char *path, token_layout *layout, f8_diag *diag) {
	if (format == F8_TOKEN_FORMAT_AUTO || format == F8_TOKEN_FORMAT_LLMC)
		return llmc_layout(file, file_size, path, layout, diag);
	int size = format == F8_TOKEN_FORMAT_UINT16 ? 2 : 4;
	if (file_size % (uint64_t)size) {
		f8_diag_hint(diag, "the file is torn, or holds tokens of another size: "
				   "--data-format uint16|uint32");
		return fail(diag, path, F8_ERR_PARSE, "a file of raw %s tokens, %llu bytes, is not "
			    "a multiple of %d bytes", format_names[format],
			    (unsigned long long)file_size, size);
	}
	*layout = (token_layout){0, file_size / (uint64_t)size, size};
	return F8_OK;
}

/* Reads layout->n tokens of layout->size bytes from `file` (positioned at them) into `out`. */
static f8_status read_tokens(FILE *file, const token_layout *layout, const char *path,
			     uint32_t *out, f8_diag *diag) {
	unsigned char chunk[CHUNK_TOKENS * 4];
	for (uint64_t done = 0; done < layout->n;) {
		size_t n = layout->n - done < CHUNK_TOKENS ? (size_t)(layout->n - done)
							   : CHUNK_TOKENS;
		if (fread(chunk, (size_t)layout->size, n, file) != n)
			return fail(diag, path, F8_ERR_IO, "cannot read %s: %s", path,
				    ferror(file) ? strerror(errno)
						 : "the file became shorter while read");
		for (size_t i = 0; i < n; i++) {
			const unsigned char *p = chunk + i * (size_t)layout->size;
			out[done + i] = layout->size == 2 ? (uint32_t)p[0] | (uint32_t)p[1] << 8
							  : read_le32(p);
		}
		done += n;
	}
	return F8_OK;
}

static f8_status load_open(FILE *file, const char *path, f8_token_format format, f8_tokens *out,
			   f8_diag *diag) {
	struct stat info;
	if (fstat(fileno(file), &info) != 0)
		return fail(diag, path, F8_ERR_IO, "cannot read %s: %s", path, strerror(errno));
	if (!S_ISREG(info.st_mode))
		return fail(diag, path, F8_ERR_IO, "cannot read %s: not a regular file", path);
	token_layout layout;
	f8_status status = find_layout(file, (uint64_t)info.st_size, format, path, &layout, diag);
	if (status)
		return status;
	if (layout.n > SIZE_MAX / sizeof(uint32_t))
		return fail(diag, path, F8_ERR_NOMEM, "%llu tokens do not fit in memory",
			    (unsigned long long)layout.n);
	uint32_t *tokens = NULL;
	if (layout.n && !(tokens = f8_malloc((size_t)layout.n * sizeof *tokens)))
		return fail(diag, path, F8_ERR_NOMEM, "out of memory for %llu tokens",
			    (unsigned long long)layout.n);
	if ((status = read_tokens(file, &layout, path, tokens, diag))) {
		f8_free(tokens);
		return status;
	}
	*out = (f8_tokens){tokens, (size_t)layout.n};
	return F8_OK;
}

f8_status f8_tokens_load(const char *path, f8_token_format format, f8_tokens *out,
			 f8_diag *diag) {
	*out = (f8_tokens){0};
	if (format < 0 || format >= F8_TOKEN_FORMAT_COUNT)
		return fail(diag, path, F8_ERR_ARGUMENT, "no token format %d", (int)format);
	FILE *file = fopen(path, "rb");
	if (!file)
		return fail(diag, path, F8_ERR_IO, "cannot open %s: %s", path, strerror(errno));
	f8_status status = load_open(file, path, format, out, diag);
	fclose(file);
	return status;
}

void f8_tokens_destroy(f8_tokens *tokens) {
	if (!tokens)
		return;
	f8_free(tokens->tokens);
	*tokens = (f8_tokens){0};
}

f8_status f8_tokens_check_vocab(const f8_tokens *tokens, uint32_t vocab, f8_diag *diag) {
	for (size_t i = 0; i < tokens->n; i++)
		if (tokens->tokens[i] >= vocab) {
			f8_diag_hint(diag, "was the data tokenized for another model? Its tokens "
					   "need a vocabulary of at least %llu",
				     (unsigned long long)tokens->tokens[i] + 1);
			return f8_diag_set(diag, F8_ERR_INVALID, "token %lu at position %zu is not "
					   "below the model's vocabulary size %lu",
					   (unsigned long)tokens->tokens[i], i,
					   (unsigned long)vocab);
		}
	return F8_OK;
}

/* ---- writing ------------------------------------------------------------------------------- */

static void write_le32(unsigned char *p, uint32_t value) {
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(value >> (8 * i));
}

/* Writes the header and the tokens, as uint16, to `file`. */
static f8_status write_llmc_data(f8_atomic_file *file, const uint32_t *tokens, size_t n,
				 f8_diag *diag) {
	unsigned char header[LLMC_HEADER_BYTES] = {0};
	write_le32(header, F8_TOKENS_LLMC_MAGIC);
	write_le32(header + 4, F8_TOKENS_LLMC_VERSION);
	write_le32(header + 8, (uint32_t)n);
	f8_status status = f8_atomic_file_write(file, header, sizeof header, diag);
	unsigned char chunk[CHUNK_TOKENS * 2];
	for (size_t done = 0; !status && done < n;) {
		size_t count = n - done < CHUNK_TOKENS ? n - done : CHUNK_TOKENS;
		for (size_t i = 0; i < count; i++) {
			chunk[2 * i] = (unsigned char)tokens[done + i];
			chunk[2 * i + 1] = (unsigned char)(tokens[done + i] >> 8);
		}
		status = f8_atomic_file_write(file, chunk, 2 * count, diag);
		done += count;
	}
	return status;
}

f8_status f8_tokens_write_llmc(const char *path, const uint32_t *tokens, size_t n,
			       f8_diag *diag) {
	if (n > INT32_MAX) {
		f8_diag_hint(diag, "write the tokens as several files (shards)");
		return fail(diag, path, F8_ERR_ARGUMENT, "cannot write %s: %zu tokens, more than "
			    "the %d an llm.c file's header can count", path, n, INT32_MAX);
	}
	for (size_t i = 0; i < n; i++)
		if (tokens[i] > UINT16_MAX) {
			f8_diag_hint(diag, "llm.c's format holds uint16 tokens, for vocabularies "
					   "of at most 65536");
			return fail(diag, path, F8_ERR_ARGUMENT, "cannot write %s: token %lu at "
				    "position %zu does not fit in 16 bits", path,
				    (unsigned long)tokens[i], i);
		}
	f8_atomic_file *file;
	f8_status status = f8_atomic_file_open(path, &file, diag);
	if (status)
		return status;
	if ((status = write_llmc_data(file, tokens, n, diag))) {
		f8_atomic_file_abort(file);
		return status;
	}
	return f8_atomic_file_commit(file, diag);
}

/* ---- split --------------------------------------------------------------------------------- */

f8_status f8_tokens_split(size_t n_tokens, const double *weights, int n_weights,
			  f8_token_range *ranges, f8_diag *diag) {
	if (n_weights != 2 && n_weights != 3)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "a split has 2 or 3 weights (train, "
				   "valid[, test]), not %d", n_weights);
	double sum = 0;
	for (int i = 0; i < n_weights; i++) {
		if (!isfinite(weights[i]) || weights[i] < 0) {
			f8_diag_hint(diag, "give the split as proportions, like 969,30,1");
			return f8_diag_set(diag, F8_ERR_ARGUMENT, "split weight %d is %g; the "
					   "weights are finite and >= 0", i + 1, weights[i]);
		}
		sum += weights[i];
	}
	if (!(sum > 0) || !isfinite(sum))
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "the split weights add up to %g; give "
				   "at least one above 0", sum);
	// As megatron/core/datasets/utils.py: ends[i + 1] = ends[i] + round(w[i] / sum * n), then
	// all ends move by what the last overshoots. Python's round() is half to even, as rint.
	double n = (double)n_tokens;
	int64_t ends[4] = {0};
	for (int i = 0; i < n_weights; i++)
		ends[i + 1] = ends[i] + (int64_t)rint(weights[i] / sum * n);
	int64_t shift = ends[n_weights] - (int64_t)n_tokens;
	int64_t previous = 0;
	for (int i = 0; i < n_weights; i++) {
		int64_t end = ends[i + 1] - shift;
		end = end < previous ? previous : end > (int64_t)n_tokens ? (int64_t)n_tokens : end;
		ranges[i] = (f8_token_range){(size_t)previous, (size_t)end};
		previous = end;
	}
	return F8_OK;
}

/* ---- sampling ------------------------------------------------------------------------------ */

/* splitmix64: the state is a counter, each output a mix of it. */
static uint64_t next_random(uint64_t *state) {
	uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* Uniform in [0, count), without the bias of a plain modulo: draws below 2^64 mod count are
 * drawn again. */
static uint64_t uniform_below(uint64_t *state, uint64_t count) {
	uint64_t threshold = (0 - count) % count;
	for (;;) {
		uint64_t x = next_random(state);
		if (x >= threshold)
			return x % count;
	}
}

void f8_batch_sampler_init(f8_batch_sampler *sampler, const f8_tokens *tokens, uint64_t seed) {
	*sampler = (f8_batch_sampler){.tokens = tokens, .seed = seed, .state = seed};
}

void f8_batch_sampler_init_eval(f8_batch_sampler *sampler, const f8_tokens *tokens) {
	f8_batch_sampler_init(sampler, tokens, F8_EVAL_SAMPLER_SEED);
}

void f8_batch_sampler_rewind(f8_batch_sampler *sampler) {
	sampler->state = sampler->seed;
}

f8_status f8_batch_sample(f8_batch_sampler *sampler, f8_token_range range, size_t batch,
			  size_t seq, int64_t *inputs, int64_t *labels, f8_diag *diag) {
	const f8_tokens *tokens = sampler->tokens;
	if (batch == 0 || seq == 0)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "a batch of %zu rows of %zu tokens; both "
				   "must be at least 1", batch, seq);
	if (range.begin > range.end || range.end > tokens->n)
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "the token range [%zu, %zu) is not "
				   "inside the %zu tokens", range.begin, range.end, tokens->n);
	size_t held = range.end - range.begin;
	if (held <= seq) {
		f8_diag_hint(diag, "use more data, a shorter sequence, or a larger share of the "
				   "split for this range");
		return f8_diag_set(diag, F8_ERR_ARGUMENT, "the token range [%zu, %zu) holds %zu "
				   "tokens; a window of seq %zu needs at least %zu (inputs and the "
				   "labels one token on)", range.begin, range.end, held, seq,
				   seq + 1);
	}
	uint64_t starts = held - seq; // window starts begin .. end - seq - 1
	for (size_t row = 0; row < batch; row++) {
		size_t start = range.begin + (size_t)uniform_below(&sampler->state, starts);
		const uint32_t *window = tokens->tokens + start;
		for (size_t j = 0; j < seq; j++) {
			inputs[row * seq + j] = window[j];
			labels[row * seq + j] = window[j + 1];
		}
	}
	return F8_OK;
}
