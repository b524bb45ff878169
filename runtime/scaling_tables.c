/*
 * Delayed scaling's tables found in a step, and each slot named by what it scales.
 */
#include "runtime/scaling_tables.h" // f8_rt_scaling_tables_find

#include <stdio.h>  // snprintf
#include <string.h> // memcpy, strcmp, strlen

#include "ir/alloc.h" // f8_calloc, f8_free, f8_strdup

enum { LABEL_MAX = 192 };

/* `reason` up to the GEMMs it feeds ("w of layers.0.attn.qkv (fwd, dgrad), HYBRID -> E4M3,
 * delayed: slot 0 of fp8.weights" gives "w of layers.0.attn.qkv") into buffer (LABEL_MAX), cut
 * at a whole UTF-8 character, without control characters (a checkpoint lists the labels a line
 * each) or trailing spaces. */
static void reason_label(const char *reason, char *buffer) {
	size_t len = 0;
	for (const char *c = reason; *c && *c != '(' && *c != ',' && len < LABEL_MAX - 40; c++)
		if ((unsigned char)*c >= 0x20)
			buffer[len++] = *c;
	buffer[len] = '\0';
	// A name cut inside a UTF-8 character loses that character, so that the label stays JSON.
	size_t lead = len;
	while (lead > 0 && ((unsigned char)buffer[lead - 1] & 0xC0) == 0x80)
		lead--;
	if (lead > 0 && (unsigned char)buffer[lead - 1] >= 0xC0) {
		unsigned char c = (unsigned char)buffer[lead - 1];
		size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
		if (len - (lead - 1) < need)
			buffer[len = lead - 1] = '\0';
	}
	while (len > 0 && buffer[len - 1] == ' ')
		buffer[--len] = '\0';
}

/* How many slots a cast node takes: the elements of its amax output (its last), f32[experts]
 * for a grouped cast. */
static uint32_t cast_slots(const f8_graph *graph, const f8_node *node) {
	const f8_shape *shape = &graph->values[node->outputs[node->n_outputs - 1]].type.shape;
	uint32_t n = 1;
	for (int d = 0; d < shape->rank; d++)
		n *= f8_dim_is_const(shape->dims[d]) ? (uint32_t)f8_dim_value(shape->dims[d]) : 1;
	return n;
}

/* The labels of `table`'s slots from the casts that read its scale (their output's annotation
 * names the slot and says why), then made unique. */
static f8_status label_slots(const f8_graph *graph, f8_rt_scaling_table *table, f8_diag *diag) {
	char buffer[LABEL_MAX], base[LABEL_MAX];
	for (uint32_t n = 0; n < graph->n_order; n++) {
		const f8_node *node = &graph->nodes[graph->order[n]];
		if (node->n_inputs < 2 || node->inputs[1] != table->scale || !node->n_outputs)
			continue;
		const f8_value *out = &graph->values[node->outputs[0]];
		const f8_precision *p = &out->precision;
		if (p->scaling_slot >= table->n_slots || table->labels[p->scaling_slot] || !p->reason)
			continue;
		reason_label(p->reason, base);
		uint32_t slots = cast_slots(graph, node);
		for (uint32_t e = 0; e < slots && p->scaling_slot + e < table->n_slots; e++) {
			uint32_t s = p->scaling_slot + e;
			if (slots > 1)
				snprintf(buffer, sizeof buffer, "%.*s [expert %u]", LABEL_MAX - 32, base,
					 e);
			else
				snprintf(buffer, sizeof buffer, "%s", base);
			table->formats[s] = out->type.dtype;
			if (!table->labels[s] && !(table->labels[s] = f8_strdup(buffer)))
				return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
		}
	}
	// Each label once: the second and later slots of a label (counted among the labels as
	// the casts gave them) take " #2", " #3"...; a slot no cast reads is "slot N".
	char **given = f8_calloc(table->n_slots + 1, sizeof *given);
	if (!given)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	memcpy(given, table->labels, table->n_slots * sizeof *given);
	f8_status status = F8_OK;
	for (uint32_t s = 0; !status && s < table->n_slots; s++) {
		uint32_t before = 0;
		for (uint32_t r = 0; given[s] && r < s; r++)
			before += given[r] && strcmp(given[r], given[s]) == 0;
		if (given[s] && !before)
			continue;
		if (!given[s])
			snprintf(buffer, sizeof buffer, "slot %u", s);
		else
			snprintf(buffer, sizeof buffer, "%.*s #%u", LABEL_MAX - 16, given[s],
				 before + 1);
		if (!(table->labels[s] = f8_strdup(buffer)))
			status = f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	}
	// The renamed slots' labels as given are freed with `given`; the others are the table's.
	for (uint32_t s = 0; s < table->n_slots; s++)
		if (given[s] && table->labels[s] != given[s])
			f8_free(given[s]);
	f8_free(given);
	return status;
}

f8_status f8_rt_scaling_tables_find(const f8_graph *graph, f8_rt_scaling_table *tables,
				    uint32_t *n, f8_diag *diag) {
	*n = 0;
	for (uint32_t i = 0; i < graph->n_inputs && *n < F8_RT_SCALING_TABLES_MAX; i++) {
		const f8_value *value = &graph->values[graph->inputs[i]];
		size_t len = strlen(value->name);
		f8_rt_scaling_table *table = &tables[*n];
		*table = (f8_rt_scaling_table){0};
		if (value->role != F8_ROLE_SCALE || value->type.shape.rank != 1 || len < 7 ||
		    len - 6 >= sizeof table->name || strcmp(value->name + len - 6, ".scale") != 0 ||
		    !f8_dim_is_const(value->type.shape.dims[0]))
			continue;
		char other[sizeof table->name + 16];
		snprintf(table->name, sizeof table->name, "%.*s", (int)(len - 6), value->name);
		snprintf(other, sizeof other, "%s.amax_history", table->name);
		table->history = f8_graph_find_value(graph, other, strlen(other));
		if (table->history == F8_NONE)
			continue;
		table->scale = graph->inputs[i];
		snprintf(other, sizeof other, "%s.nonfinite", table->name);
		table->nonfinite = f8_graph_find_value(graph, other, strlen(other));
		table->n_slots = (uint32_t)f8_dim_value(value->type.shape.dims[0]);
		table->labels = f8_calloc(table->n_slots + 1, sizeof *table->labels);
		table->formats = f8_calloc(table->n_slots + 1, sizeof *table->formats);
		(*n)++;
		if (!table->labels || !table->formats)
			return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
		f8_status status = label_slots(graph, table, diag);
		if (status)
			return status;
	}
	return F8_OK;
}

void f8_rt_scaling_tables_free(f8_rt_scaling_table *tables, uint32_t n) {
	for (uint32_t i = 0; i < n; i++) {
		for (uint32_t s = 0; tables[i].labels && s < tables[i].n_slots; s++)
			f8_free(tables[i].labels[s]);
		f8_free(tables[i].labels);
		f8_free(tables[i].formats);
	}
}
