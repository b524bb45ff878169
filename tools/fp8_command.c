/*
 * f8c fp8: the FP8 numerics of ir/fp8.c from the command line, for people checking a value and
 * for tests that hold f8c against other implementations (tests/fp8/check_ml_dtypes.py).
 *   f8c fp8 table FORMAT       every code of e4m3, e5m2 or e8m0 with its fields and value
 *   f8c fp8 quantize FORMAT    little-endian float32 on stdin -> one code byte each on stdout
 * Exit status: 0 done, 1 the input is wrong or reading or writing failed, 2 the command line is
 * wrong (as for every f8c command, tools/f8c.c).
 */
#include <math.h>    // isnan, isinf, isfinite
#include <stdbool.h> // bool
#include <stdint.h>  // uint8_t, uint32_t
#include <stdio.h>   // printf, fprintf, fread, fwrite
#include <stdlib.h>  // strtof
#include <string.h>  // strcmp, strncmp, strlen, memcpy, memmove

#include "ir/dtype.h"       // f8_dtype, f8_dtype_get_info, f8_dtype_from_name
#include "ir/fp8.h"         // f8_float_encode, f8_float_decode, f8_e8m0_encode, f8_round
#include "tools/commands.h" // f8_tool_fp8

static const char f8_tool_fp8_usage[] =
	"usage: f8c fp8 table FORMAT\n"
	"       f8c fp8 quantize FORMAT [--no-saturate] [--scale S] [--round nearest|down|up]\n";

/* Prints the problem, the usage and a hint on stderr; returns the exit status for it, 2. */
static int f8_tool_fp8_usage_error(const char *problem, const char *detail, const char *hint) {
	fprintf(stderr, "f8c fp8: %s%s%s\n%sHINT: %s\n", problem, detail ? ": " : "",
		detail ? detail : "", f8_tool_fp8_usage, hint);
	return 2;
}

/* The formats the subcommands take, by name: e4m3, e5m2, e8m0; false for any other. */
static bool f8_tool_fp8_format_from_name(const char *name, f8_dtype *format) {
	if (!f8_dtype_from_name(name, strlen(name), format))
		return false;
	return f8_dtype_is_fp8(*format) || *format == F8_DTYPE_E8M0;
}

static int f8_tool_fp8_unknown_format(const char *name) {
	return f8_tool_fp8_usage_error("unknown format", name, "FORMAT is one of e4m3, e5m2, e8m0");
}

/*
 * The code's bits with the fields apart, sign.exponent.mantissa ("0.1111.110"); a format without
 * a sign bit (E8M0) leaves it out, and one without mantissa bits shows the exponent alone.
 */
static void f8_tool_fp8_format_bits(const f8_dtype_info *info, uint32_t code, char *out) {
	int width = (int)info->bytes * 8;
	bool has_sign = 1 + info->exponent_bits + info->mantissa_bits == width;
	for (int bit = width - 1; bit >= 0; bit--) {
		*out++ = (char)('0' + ((code >> bit) & 1));
		bool field_ends = (has_sign && bit == width - 1) ||
				  (info->mantissa_bits > 0 && bit == info->mantissa_bits);
		if (field_ends && bit > 0)
			*out++ = '.';
	}
	*out = '\0';
}

static void f8_tool_fp8_print_value(float value) {
	if (isnan(value))
		printf("nan\n");
	else if (isinf(value))
		printf("%s\n", value > 0 ? "inf" : "-inf");
	else
		printf("%.9g\n", value);
}

static int f8_tool_fp8_table(int argc, char **argv) {
	if (argc != 2)
		return f8_tool_fp8_usage_error(
			argc < 2 ? "table needs a FORMAT" : "table takes one FORMAT", NULL,
			"f8c fp8 table e4m3 lists the 256 codes of E4M3");
	f8_dtype format;
	if (!f8_tool_fp8_format_from_name(argv[1], &format))
		return f8_tool_fp8_unknown_format(argv[1]);
	const f8_dtype_info *info = f8_dtype_get_info(format);
	printf("# %s: %d exponent bits, %d mantissa bits, bias %d, max %.9g; code bits value\n",
	       info->name, info->exponent_bits, info->mantissa_bits, info->bias, info->max);
	char bits[16];
	for (uint32_t code = 0; code < 256; code++) {
		f8_tool_fp8_format_bits(info, code, bits);
		printf("0x%02x %s ", (unsigned)code, bits);
		f8_tool_fp8_print_value(f8_float_decode(format, code));
	}
	if (fflush(stdout) != 0) {
		fprintf(stderr,
			"f8c fp8: cannot write the table\nHINT: is the disk or pipe closed?\n");
		return 1;
	}
	return 0;
}

/* How `quantize` encodes: the format and its options. */
typedef struct f8_tool_fp8_quantize_options {
	f8_dtype format;
	bool saturate;
	float scale;
	f8_round round;
} f8_tool_fp8_quantize_options;

/* Parses a scale: all of the argument, a finite number above 0. */
static bool f8_tool_fp8_parse_scale(const char *text, float *scale) {
	char *end;
	float value = strtof(text, &end);
	if (end == text || *end != '\0' || !isfinite(value) || !(value > 0.0f))
		return false;
	*scale = value;
	return true;
}

static bool f8_tool_fp8_parse_round(const char *text, f8_round *round) {
	static const char *const names[F8_ROUND_COUNT] = {[F8_ROUND_NEAREST_EVEN] = "nearest",
							  [F8_ROUND_DOWN] = "down",
							  [F8_ROUND_UP] = "up"};
	for (int i = 0; i < F8_ROUND_COUNT; i++)
		if (strcmp(text, names[i]) == 0) {
			*round = (f8_round)i;
			return true;
		}
	return false;
}

/*
 * Reads the quantize arguments (argv[0] is "quantize"); options may come before or after the
 * format, and take their value as the next argument or after '='. Returns 0, or the exit
 * status of the usage error it printed.
 */
static int f8_tool_fp8_quantize_parse(int argc, char **argv,
				      f8_tool_fp8_quantize_options *options) {
	const char *format_name = NULL;
	bool saturate_given = false, round_given = false;
	*options = (f8_tool_fp8_quantize_options){F8_DTYPE_UNDEFINED, true, 1.0f,
						  F8_ROUND_NEAREST_EVEN};
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i], *value = NULL;
		bool is_scale =
			strncmp(arg, "--scale", 7) == 0 && (arg[7] == '\0' || arg[7] == '=');
		bool is_round =
			strncmp(arg, "--round", 7) == 0 && (arg[7] == '\0' || arg[7] == '=');
		if (is_scale || is_round) {
			if (arg[7] == '=')
				value = arg + 8;
			else if (i + 1 < argc)
				value = argv[++i];
			else
				return f8_tool_fp8_usage_error(
					is_scale ? "--scale needs a value" : "--round needs a value",
					NULL,
					is_scale ? "--scale takes a number, e.g. --scale 448"
						 : "--round takes nearest, down or up");
		}
		if (is_scale) {
			if (!f8_tool_fp8_parse_scale(value, &options->scale))
				return f8_tool_fp8_usage_error(
					"the scale must be a positive finite number", value,
					"e.g. --scale 0.5 or --scale 1e3");
		} else if (is_round) {
			if (!f8_tool_fp8_parse_round(value, &options->round))
				return f8_tool_fp8_usage_error("unknown rounding", value,
							       "--round takes nearest, down or up");
			round_given = true;
		} else if (strcmp(arg, "--no-saturate") == 0) {
			options->saturate = false;
			saturate_given = true;
		} else if (arg[0] == '-' && arg[1] != '\0') {
			return f8_tool_fp8_usage_error(
				"unknown option", arg,
				"the options are --no-saturate, --scale S, --round R");
		} else if (format_name) {
			return f8_tool_fp8_usage_error("unexpected argument", arg,
						       "give one FORMAT; the values come on stdin");
		} else {
			format_name = arg;
		}
	}
	if (!format_name)
		return f8_tool_fp8_usage_error(
			"quantize needs a FORMAT", NULL,
			"e.g. f8c fp8 quantize e4m3 < values.f32 > codes.bin");
	if (!f8_tool_fp8_format_from_name(format_name, &options->format))
		return f8_tool_fp8_unknown_format(format_name);
	if (round_given && options->format != F8_DTYPE_E8M0)
		return f8_tool_fp8_usage_error(
			"--round is for e8m0 only", NULL,
			"e4m3 and e5m2 always round to nearest, ties to even");
	if (saturate_given && options->format == F8_DTYPE_E8M0)
		return f8_tool_fp8_usage_error("--no-saturate is not for e8m0", NULL,
					       "e8m0 always clamps to 2^-127 .. 2^127");
	return 0;
}

static uint8_t f8_tool_fp8_quantize_one(const f8_tool_fp8_quantize_options *options, float value) {
	value *= options->scale;
	if (options->format == F8_DTYPE_E8M0)
		return f8_e8m0_encode(value, options->round);
	return (uint8_t)f8_float_encode(options->format, value, options->saturate);
}

/*
 * Streams stdin to stdout in chunks, so input of any size runs in constant memory. The bytes of
 * a value split across two reads are carried over; a trailing part of a value is an error
 * reported once all whole values before it are written.
 */
static int f8_tool_fp8_quantize(int argc, char **argv) {
	f8_tool_fp8_quantize_options options;
	int status = f8_tool_fp8_quantize_parse(argc, argv, &options);
	if (status != 0)
		return status;
	enum { CHUNK = 1 << 16 };
	static unsigned char input[CHUNK + 4];
	static uint8_t output[CHUNK / 4 + 1];
	size_t pending = 0, total = 0, got;
	while ((got = fread(input + pending, 1, CHUNK, stdin)) > 0) {
		total += got;
		size_t bytes = pending + got, values = bytes / 4;
		for (size_t i = 0; i < values; i++) {
			const unsigned char *b = input + 4 * i;
			uint32_t bits = (uint32_t)b[0] | (uint32_t)b[1] << 8 |
					(uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
			float value;
			memcpy(&value, &bits, sizeof value);
			output[i] = f8_tool_fp8_quantize_one(&options, value);
		}
		if (fwrite(output, 1, values, stdout) != values)
			break;
		pending = bytes - 4 * values;
		memmove(input, input + 4 * values, pending);
	}
	if (ferror(stdin)) {
		fprintf(stderr, "f8c fp8: cannot read stdin\nHINT: pipe float32 values in, e.g. "
				"f8c fp8 quantize e4m3 < values.f32\n");
		return 1;
	}
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr,
			"f8c fp8: cannot write the codes\nHINT: is the disk or pipe closed?\n");
		return 1;
	}
	if (pending != 0) {
		fprintf(stderr,
			"f8c fp8: the input is %zu bytes, not a whole number of float32 values "
			"(%zu byte(s) left over)\nHINT: the input is raw little-endian float32, 4 "
			"bytes each, with no header; the codes of the whole values were written\n",
			total, pending);
		return 1; // the input is wrong, not the command line (see tools/f8c.c)
	}
	return 0;
}

int f8_tool_fp8(int argc, char **argv) {
	if (argc < 2)
		return f8_tool_fp8_usage_error("no subcommand", NULL, "use table or quantize");
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		printf("%s", f8_tool_fp8_usage);
		return 0;
	}
	if (strcmp(argv[1], "table") == 0)
		return f8_tool_fp8_table(argc - 1, argv + 1);
	if (strcmp(argv[1], "quantize") == 0)
		return f8_tool_fp8_quantize(argc - 1, argv + 1);
	return f8_tool_fp8_usage_error("unknown subcommand", argv[1], "use table or quantize");
}
