/*
 * The text printer. Its output is the canonical form: the parser reads it back into a graph
 * that prints the same text again (tests/ir checks this on every golden file).
 */
#define _POSIX_C_SOURCE 200809L // open_memstream

#include <inttypes.h> // PRId64, PRIu64
#include <math.h>     // isnan, isinf
#include <stdarg.h>   // va_list
#include <stdlib.h>   // strtod, strtof
#include <string.h>   // strlen, memcpy

#include "ir/alloc.h" // f8_malloc, f8_calloc, f8_free
#include "ir/fp8.h"   // f8_float_decode
#include "ir/text.h"  // f8_text_print

/* Where a dim's text goes: a FILE (the printer, whatever the length) or a buffer (messages,
 * truncated to fit). */
typedef struct sink {
	FILE *out;
	char *buffer;
	size_t size, used;
} sink;

static void sink_printf(sink *to, const char *format, ...) __attribute__((format(printf, 2, 3)));
static void sink_printf(sink *to, const char *format, ...) {
	va_list args;
	va_start(args, format);
	if (to->out) {
		vfprintf(to->out, format, args);
	} else if (to->used < to->size) {
		int n = vsnprintf(to->buffer + to->used, to->size - to->used, format, args);
		to->used += n > 0 ? (size_t)n : 0;
	}
	va_end(args);
}

static const char *symbol_name(const f8_graph *graph, uint16_t id) {
	return id < graph->n_symbols ? graph->symbols[id] : "?";
}

/* Orders two terms for printing: more symbols first, then by the symbols' names (each term's
 * names sorted). A dim's canonical form orders by symbol id, and ids follow the order symbols
 * were first met, which a reprinted text changes; names do not change. */
static int term_print_order(const f8_graph *graph, const f8_dim_term *a, const f8_dim_term *b) {
	if (a->n_symbols != b->n_symbols)
		return a->n_symbols > b->n_symbols ? -1 : 1;
	for (int i = 0; i < a->n_symbols; i++) {
		int c = strcmp(symbol_name(graph, a->symbols[i]), symbol_name(graph, b->symbols[i]));
		if (c)
			return c;
	}
	return 0;
}

static void sort_by_name(const f8_graph *graph, f8_dim_term *term) {
	for (int i = 1; i < term->n_symbols; i++)
		for (int j = i; j > 0 && strcmp(symbol_name(graph, term->symbols[j - 1]),
						 symbol_name(graph, term->symbols[j])) > 0; j--) {
			uint16_t swap = term->symbols[j];
			term->symbols[j] = term->symbols[j - 1];
			term->symbols[j - 1] = swap;
		}
}

static void write_dim(sink *to, const f8_graph *graph, f8_dim dim) {
	if (dim.n_terms == 0)
		sink_printf(to, "0");
	for (int t = 0; t < dim.n_terms; t++)
		sort_by_name(graph, &dim.terms[t]);
	for (int t = 1; t < dim.n_terms; t++)
		for (int j = t; j > 0 && term_print_order(graph, &dim.terms[j - 1], &dim.terms[j]) > 0;
		     j--) {
			f8_dim_term swap = dim.terms[j];
			dim.terms[j] = dim.terms[j - 1];
			dim.terms[j - 1] = swap;
		}
	for (int t = 0; t < dim.n_terms; t++) {
		const f8_dim_term *term = &dim.terms[t];
		int64_t coefficient = term->coefficient;
		const char *sign = coefficient < 0 ? "-" : t ? "+" : "";
		// |INT64_MIN| does not fit an int64_t: print its digits through uint64_t.
		uint64_t magnitude = coefficient < 0 ? 0 - (uint64_t)coefficient : (uint64_t)coefficient;
		if (term->n_symbols == 0 || magnitude != 1)
			sink_printf(to, "%s%" PRIu64 "%s", sign, magnitude, term->n_symbols ? "*" : "");
		else
			sink_printf(to, "%s", sign);
		for (int i = 0; i < term->n_symbols; i++)
			sink_printf(to, "%s%s", i ? "*" : "", symbol_name(graph, term->symbols[i]));
	}
}

const char *f8_dim_format(const f8_graph *graph, f8_dim dim, char *buffer, size_t size) {
	if (size == 0)
		return buffer;
	buffer[0] = '\0';
	sink to = {.buffer = buffer, .size = size};
	write_dim(&to, graph, dim);
	return buffer;
}

const char *f8_type_format(const f8_graph *graph, const f8_type *type, char *buffer, size_t size) {
	if (type->dtype == F8_DTYPE_UNDEFINED) {
		snprintf(buffer, size, "?");
		return buffer;
	}
	size_t used = (size_t)snprintf(buffer, size, "%s[", f8_dtype_name(type->dtype));
	for (int i = 0; i < type->shape.rank && used < size; i++) {
		char dim[64];
		used += (size_t)snprintf(buffer + used, size - used, "%s%s", i ? ", " : "",
					 f8_dim_format(graph, type->shape.dims[i], dim, sizeof dim));
	}
	if (used < size)
		snprintf(buffer + used, size - used, "]");
	return buffer;
}

/* A name prints bare when it is made of these characters, quoted otherwise. */
static bool is_bare_name(const char *name) {
	if (!*name)
		return false;
	for (const char *c = name; *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
		      *c == '_' || *c == '.'))
			return false;
	return true;
}

static void print_string(FILE *out, const char *text) {
	fputc('"', out);
	for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
		if (*c == '"' || *c == '\\')
			fprintf(out, "\\%c", *c);
		else if (*c == '\n')
			fputs("\\n", out);
		else if (*c == '\t')
			fputs("\\t", out);
		else if (*c < 0x20 || *c == 0x7f)
			fprintf(out, "\\x%02x", *c);
		else
			fputc(*c, out);
	}
	fputc('"', out);
}

static void print_name(FILE *out, const char *name) {
	if (is_bare_name(name))
		fputs(name, out);
	else
		print_string(out, name);
}

static void print_value_ref(FILE *out, const f8_graph *graph, f8_value_id id) {
	if (id == F8_NONE) {
		fputc('_', out);
		return;
	}
	fputc('%', out);
	print_name(out, graph->values[id].name);
}

/* The shortest decimal that reads back as exactly `value`. */
static void print_double(FILE *out, double value) {
	if (isnan(value)) {
		fputs("nan", out);
		return;
	}
	if (isinf(value)) {
		fputs(value < 0 ? "-inf" : "inf", out);
		return;
	}
	char text[40];
	for (int precision = 1; precision <= 17; precision++) {
		snprintf(text, sizeof text, "%.*g", precision, value);
		if (strtod(text, NULL) == value)
			break;
	}
	fputs(text, out);
}

static void print_float(FILE *out, float value) {
	if (isnan(value) || isinf(value)) {
		print_double(out, value);
		return;
	}
	char text[40];
	for (int precision = 1; precision <= 9; precision++) {
		snprintf(text, sizeof text, "%.*g", precision, (double)value);
		if (strtof(text, NULL) == value)
			break;
	}
	fputs(text, out);
}

static void print_dim(FILE *out, const f8_graph *graph, f8_dim dim) {
	sink to = {.out = out};
	write_dim(&to, graph, dim);
}

static void print_type(FILE *out, const f8_graph *graph, const f8_type *type) {
	fprintf(out, "%s[", f8_dtype_name(type->dtype));
	for (int i = 0; i < type->shape.rank; i++) {
		if (i)
			fputs(", ", out);
		print_dim(out, graph, type->shape.dims[i]);
	}
	fputc(']', out);
}

/* Tensor elements: integers and f32/f64 as numbers; 16- and 8-bit floats as their bit patterns
 * in hex, so that every code (NaN payloads included) reads back unchanged. */
static void print_tensor(FILE *out, const f8_graph *graph, const f8_tensor_data *tensor) {
	f8_type type = {.dtype = tensor->dtype, .shape = tensor->shape};
	print_type(out, graph, &type);
	fputc('(', out);
	const f8_dtype_info *info = f8_dtype_get_info(tensor->dtype);
	size_t count = info->bytes ? tensor->n_bytes / info->bytes : 0;
	const unsigned char *data = tensor->data;
	for (size_t i = 0; i < count; i++) {
		if (i)
			fputs(", ", out);
		const unsigned char *element = data + i * info->bytes;
		switch (tensor->dtype) {
		case F8_DTYPE_F64: {
			double v;
			memcpy(&v, element, sizeof v);
			print_double(out, v);
			break;
		}
		case F8_DTYPE_F32: {
			float v;
			memcpy(&v, element, sizeof v);
			print_float(out, v);
			break;
		}
		case F8_DTYPE_BF16:
		case F8_DTYPE_F16: {
			uint16_t bits;
			memcpy(&bits, element, sizeof bits);
			fprintf(out, "0x%04x", bits);
			break;
		}
		case F8_DTYPE_E4M3:
		case F8_DTYPE_E5M2:
		case F8_DTYPE_E8M0:
			fprintf(out, "0x%02x", *element);
			break;
		case F8_DTYPE_I64: {
			int64_t v;
			memcpy(&v, element, sizeof v);
			fprintf(out, "%" PRId64, v);
			break;
		}
		case F8_DTYPE_I32: {
			int32_t v;
			memcpy(&v, element, sizeof v);
			fprintf(out, "%" PRId32, v);
			break;
		}
		case F8_DTYPE_I8:
			fprintf(out, "%d", (int)(int8_t)*element);
			break;
		default: // U8, BOOL
			fprintf(out, "%u", (unsigned)*element);
			break;
		}
	}
	fputc(')', out);
}

static void print_attr(FILE *out, const f8_graph *graph, const f8_attr *attr) {
	fprintf(out, "%s=", attr->name);
	switch (attr->kind) {
	case F8_ATTR_INT:
		fprintf(out, "%" PRId64, attr->i);
		break;
	case F8_ATTR_FLOAT:
		print_double(out, attr->f);
		break;
	case F8_ATTR_STRING:
		print_string(out, attr->s);
		break;
	case F8_ATTR_INTS:
		fputc('[', out);
		for (uint32_t i = 0; i < attr->ints.n; i++)
			fprintf(out, "%s%" PRId64, i ? ", " : "", attr->ints.items[i]);
		fputc(']', out);
		break;
	case F8_ATTR_FLOATS:
		fputc('[', out);
		for (uint32_t i = 0; i < attr->floats.n; i++) {
			if (i)
				fputs(", ", out);
			print_double(out, attr->floats.items[i]);
		}
		fputc(']', out);
		break;
	case F8_ATTR_DTYPE:
		fputs(f8_dtype_name(attr->dtype), out);
		break;
	case F8_ATTR_DIM:
		print_dim(out, graph, attr->dim);
		break;
	case F8_ATTR_DIMS:
		fputc('[', out);
		for (uint32_t i = 0; i < attr->dims.n; i++) {
			if (i)
				fputs(", ", out);
			print_dim(out, graph, attr->dims.items[i]);
		}
		fputc(']', out);
		break;
	case F8_ATTR_TENSOR:
		print_tensor(out, graph, attr->tensor);
		break;
	default:
		fputs("?", out);
		break;
	}
}

/* The axes on which `value` is placed by `kind`, as `shard=tp:0,dp:1` after `separator`, in
 * mesh-axis order (a dimension split part by part with its parts: `shard=tp:0[128 64 64]`);
 * nothing when there are none. Returns the separator for what comes next. The
 * axes are joined by a bare ',' and the annotations by ", ", to show which is which (the parser
 * tells them apart by the ':' after an axis, not by the space). */
static const char *print_placements(FILE *out, const f8_value *value, f8_placement_kind kind,
				    const char *separator) {
	bool first = true;
	for (int axis = 0; axis < F8_MESH_AXIS_COUNT; axis++) {
		const f8_placement *placement = &value->placement[axis];
		if (placement->kind != kind)
			continue;
		if (first)
			fprintf(out, "%s%s=", separator, f8_placement_kind_name(kind));
		else
			fputc(',', out);
		first = false;
		fprintf(out, "%s%s", f8_mesh_axis_name((f8_mesh_axis)axis),
			kind == F8_PLACEMENT_KIND_TIED ? "" : ":");
		if (kind == F8_PLACEMENT_KIND_TIED) {
			continue;
		} else if (kind == F8_PLACEMENT_KIND_SHARD) {
			fprintf(out, "%u", (unsigned)placement->dim);
			for (unsigned i = 0; placement->n_parts > 1 && i < placement->n_parts; i++)
				fprintf(out, "%s%lld", i ? " " : "[", (long long)placement->parts[i]);
			if (placement->n_parts > 1)
				fputc(']', out);
		} else
			fputs(f8_reduction_name(placement->reduction), out);
	}
	return first ? separator : ", ";
}

/* The annotations of a value that differ from their defaults, as <key=value, ...>. */
static void print_annotations(FILE *out, const f8_value *value, bool print_role) {
	const char *separator = " <";
	if (print_role) {
		fprintf(out, "%srole=%s", separator, f8_role_name(value->role));
		separator = ", ";
	}
	const f8_precision *precision = &value->precision;
	if (precision->format != F8_DTYPE_UNDEFINED) {
		fprintf(out, "%sformat=%s", separator, f8_dtype_name(precision->format));
		separator = ", ";
	}
	if (precision->recipe != F8_RECIPE_NONE) {
		fprintf(out, "%srecipe=%s", separator, f8_recipe_name(precision->recipe));
		separator = ", ";
	}
	if (precision->scaling_slot != F8_NONE) {
		fprintf(out, "%sslot=%u", separator, precision->scaling_slot);
		separator = ", ";
	}
	if (precision->reason) {
		fprintf(out, "%sreason=", separator);
		print_string(out, precision->reason);
		separator = ", ";
	}
	separator = print_placements(out, value, F8_PLACEMENT_KIND_SHARD, separator);
	separator = print_placements(out, value, F8_PLACEMENT_KIND_PARTIAL, separator);
	separator = print_placements(out, value, F8_PLACEMENT_KIND_TIED, separator);
	if (value->buffer_offset >= 0) {
		fprintf(out, "%soffset=%" PRId64, separator, value->buffer_offset);
		separator = ", ";
	}
	if (value->recompute) {
		fprintf(out, "%srecompute", separator);
		separator = ", ";
	}
	if (separator[0] == ',')
		fputc('>', out);
}

static void print_node(FILE *out, const f8_graph *graph, const f8_node *node) {
	fputs("  ", out);
	for (uint32_t i = 0; i < node->n_outputs; i++) {
		const f8_value *value = &graph->values[node->outputs[i]];
		if (i)
			fputs(", ", out);
		print_value_ref(out, graph, node->outputs[i]);
		if (value->type.dtype != F8_DTYPE_UNDEFINED) {
			fputs(" : ", out);
			print_type(out, graph, &value->type);
		}
		print_annotations(out, value, value->role != F8_ROLE_ACTIVATION);
	}
	fprintf(out, "%s%s(", node->n_outputs ? " = " : "", f8_op_name(node->op));
	for (uint32_t i = 0; i < node->n_inputs; i++) {
		if (i)
			fputs(", ", out);
		print_value_ref(out, graph, node->inputs[i]);
	}
	fputc(')', out);
	if (node->n_attrs) {
		fputs(" {", out);
		for (uint32_t i = 0; i < node->n_attrs; i++) {
			if (i)
				fputs(", ", out);
			print_attr(out, graph, &node->attrs[i]);
		}
		fputc('}', out);
	}
	if (node->scope) {
		fputs(" scope=", out);
		print_string(out, node->scope);
	}
	if (node->phase != F8_PHASE_FWD)
		fprintf(out, " phase=%s", f8_phase_name(node->phase));
	if (node->recompute) {
		fputs(" recompute=", out);
		print_string(out, node->recompute);
	}
	if (node->name) {
		fputs(" name=", out);
		print_string(out, node->name);
	}
	if (node->location.file) {
		fputs(" loc=", out);
		print_string(out, node->location.file);
		if (node->location.index != F8_NONE)
			fprintf(out, "[%u]", node->location.index);
		else
			fprintf(out, ":%u:%u", node->location.line, node->location.column);
	}
	if (node->group < graph->n_groups)
		fprintf(out, " kernel=%s", graph->groups[node->group].name);
	fputc('\n', out);
}

/* The `kernel` line of group `index`: its name, family and reason. */
static void print_kernel(FILE *out, const f8_graph *graph, uint32_t index) {
	const f8_kernel_group *group = &graph->groups[index];
	fprintf(out, "  kernel %s : %s ", group->name, f8_kernel_family_name(group->family));
	print_string(out, group->reason ? group->reason : "");
	fputc('\n', out);
}

/* The program: each kernel's line before its first member, then the nodes. `declared` (one
 * flag per kernel) says which lines are written; a verified graph's kernels are contiguous,
 * but the printer also shows a graph that is not (the verifier's message names the node). */
static void print_program(FILE *out, const f8_graph *graph, bool *declared) {
	for (uint32_t i = 0; i < graph->n_order; i++) {
		const f8_node *node = &graph->nodes[graph->order[i]];
		if (node->group < graph->n_groups && !declared[node->group]) {
			print_kernel(out, graph, node->group);
			declared[node->group] = true;
		}
		print_node(out, graph, node);
	}
}

f8_status f8_text_print(const f8_graph *graph, FILE *out) {
	bool *declared = f8_calloc(graph->n_groups ? graph->n_groups : 1, sizeof *declared);
	if (!declared)
		return F8_ERR_NOMEM;
	fputs("graph ", out);
	print_name(out, graph->name);
	fputs(" {\n", out);
	const char *separator = "  mesh ";
	for (int axis = 0; axis < F8_MESH_AXIS_COUNT; axis++)
		if (graph->mesh[axis] > 1) {
			fprintf(out, "%s%s=%u", separator, f8_mesh_axis_name((f8_mesh_axis)axis),
				graph->mesh[axis]);
			separator = ", ";
		}
	if (separator[0] == ',')
		fputc('\n', out);
	for (uint32_t i = 0; i < graph->n_inputs; i++) {
		const f8_value *value = &graph->values[graph->inputs[i]];
		fprintf(out, "  %s ", f8_role_name(value->role));
		print_value_ref(out, graph, graph->inputs[i]);
		fputs(" : ", out);
		print_type(out, graph, &value->type);
		print_annotations(out, value, false);
		fputc('\n', out);
	}
	print_program(out, graph, declared);
	f8_free(declared);
	if (graph->n_outputs) {
		fputs("  output ", out);
		for (uint32_t i = 0; i < graph->n_outputs; i++) {
			if (i)
				fputs(", ", out);
			print_value_ref(out, graph, graph->outputs[i]);
		}
		fputc('\n', out);
	}
	for (uint32_t i = 0; i < graph->n_updates; i++) {
		fputs("  update ", out);
		print_value_ref(out, graph, graph->updates[i].target);
		fputs(" <- ", out);
		print_value_ref(out, graph, graph->updates[i].source);
		fputc('\n', out);
	}
	fputs("}\n", out);
	return ferror(out) ? F8_ERR_IO : F8_OK;
}

f8_status f8_text_print_string(const f8_graph *graph, char **out, size_t *len) {
	// Print to a growing memory stream, then copy into allocator-owned memory so that the
	// caller frees it like everything else with f8_free.
	char *text = NULL;
	size_t size = 0;
	FILE *stream = open_memstream(&text, &size);
	if (!stream)
		return F8_ERR_NOMEM;
	f8_status status = f8_text_print(graph, stream);
	if (fclose(stream) != 0 && !status)
		status = F8_ERR_NOMEM;
	if (!status) {
		*out = f8_malloc(size + 1);
		if (*out) {
			memcpy(*out, text, size + 1);
			*len = size;
		} else {
			status = F8_ERR_NOMEM;
		}
	}
	free(text);
	return status;
}
