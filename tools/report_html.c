/*
 * f8c report's page (tools/report.h): one HTML file, no script and nothing fetched; every
 * chart an inline SVG drawn here, readable without colour (each series has its own marker and
 * dash, the high-precision cells a hatch and a label), with a table of its data beside it.
 *
 * What a test (tests/report/) reads from the DOM: each chart is <svg class="chart"
 * data-chart=ID>; each series of a chart a <g class="series" data-series=NAME data-points=N>
 * holding one marker (class "pt") per point; a heat map's cells <rect class="cell">
 * (data-rows x data-cols of them); the precision map's cells <rect class="cell gemm">, one
 * per GEMM; each chart's data also in <table class="data" data-chart=ID>.
 */
#include "tools/report.h"

#include <math.h>   // isfinite, log10, floor, pow, fabs
#include <stdarg.h> // va_list
#include <stdbool.h> // bool
#include <string.h> // strcmp, strlen

#include "ir/alloc.h"          // f8_calloc, f8_free
#include "tools/report_util.h" // f8_report_json_number

/* Okabe and Ito's palette, told apart by colour-blind readers too. */
static const char *const colors[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
				     "#E69F00", "#56B4E9", "#000000", "#F0E442"};
static const char *const dashes[] = {"", "6 3", "2 2", "8 3 2 3", "1 3", "10 4"};
enum { N_COLORS = 8, N_DASHES = 6 };

/* The page being written: the stream, and whether a write failed. */
typedef struct page {
	FILE *out;
} page;

static void put(page *p, const char *format, ...) __attribute__((format(printf, 2, 3)));
static void put(page *p, const char *format, ...) {
	va_list args;
	va_start(args, format);
	vfprintf(p->out, format, args);
	va_end(args);
}

/* Text with &, <, >, " and ' escaped (attributes and content alike). */
static void text(page *p, const char *s) {
	for (; s && *s; s++)
		switch (*s) {
		case '&': fputs("&amp;", p->out); break;
		case '<': fputs("&lt;", p->out); break;
		case '>': fputs("&gt;", p->out); break;
		case '"': fputs("&quot;", p->out); break;
		case '\'': fputs("&#39;", p->out); break;
		default:
			if ((unsigned char)*s >= 0x20 || *s == '\n')
				fputc(*s, p->out);
		}
}

/* A number for people: 4 significant digits. */
static const char *num(double x, char *buffer, size_t size) {
	if (!isfinite(x))
		snprintf(buffer, size, "%s", isnan(x) ? "NaN" : x > 0 ? "inf" : "-inf");
	else
		snprintf(buffer, size, "%.4g", x);
	return buffer;
}

/* ---- line charts ---- */

typedef struct series {
	char name[160];
	double *x, *y;
	uint32_t n;
	int style;     // colour, dash and marker
	bool right;    // on the right axis
} series;

typedef struct chart {
	const char *id, *title, *x_label, *y_label, *right_label;
	series *s;
	uint32_t n;
	bool percent_right; // the right axis is a percentage
} chart;

/* Round tick steps over [lo, hi]: 1, 2 or 5 times a power of ten, about 5 ticks. */
static double tick_step(double lo, double hi) {
	double span = hi > lo ? hi - lo : fabs(hi) > 0 ? fabs(hi) : 1;
	double raw = span / 5, power = pow(10, floor(log10(raw)));
	double f = raw / power;
	return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * power;
}

static void range(const chart *c, bool right, bool x, double *lo, double *hi) {
	*lo = INFINITY, *hi = -INFINITY;
	for (uint32_t i = 0; i < c->n; i++) {
		if (!x && c->s[i].right != right)
			continue;
		for (uint32_t k = 0; k < c->s[i].n; k++) {
			double v = x ? c->s[i].x[k] : c->s[i].y[k];
			if (isfinite(v)) {
				*lo = v < *lo ? v : *lo;
				*hi = v > *hi ? v : *hi;
			}
		}
	}
	if (*lo > *hi)
		*lo = 0, *hi = 1;
	// A span that overflows, or too narrow for a tick to move a double (two values an ulp
	// apart): a range around the values that a few ticks divide.
	if (!isfinite(*hi - *lo))
		*lo = -1e307, *hi = 1e307;
	double middle = *lo / 2 + *hi / 2, width = fabs(middle) * 1e-9;
	if (*hi - *lo < width || *lo == *hi) {
		width = width > 0 ? width : 0.5;
		*lo = middle - width, *hi = middle + width;
	}
	double step = tick_step(*lo, *hi);
	*lo = floor(*lo / step) * step;
	*hi = ceil(*hi / step) * step;
}

enum { W = 900, H = 320, LEFT = 70, RIGHT = 70, TOP = 30, BOTTOM = 60 };

static void marker(page *p, int style, double x, double y, const char *title) {
	const char *color = colors[style % N_COLORS];
	switch (style % 4) {
	case 0: put(p, "<circle class=\"pt\" cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\">", x, y,
		    color); break;
	case 1: put(p, "<rect class=\"pt\" x=\"%.1f\" y=\"%.1f\" width=\"5\" height=\"5\" "
		    "fill=\"%s\">", x - 2.5, y - 2.5, color); break;
	case 2: put(p, "<path class=\"pt\" d=\"M%.1f %.1fl3 5h-6z\" fill=\"%s\">", x, y - 3, color);
		break;
	default: put(p, "<path class=\"pt\" d=\"M%.1f %.1fl3 3l-3 3l-3 -3z\" fill=\"none\" "
		     "stroke=\"%s\">", x, y - 3, color);
	}
	put(p, "<title>");
	text(p, title);
	put(p, "</title>%s", style % 4 == 0 ? "</circle>" : style % 4 == 1 ? "</rect>" : "</path>");
}

static void axis_ticks(page *p, double lo, double hi, bool vertical, bool right, bool percent) {
	double step = tick_step(lo, hi);
	for (int i = 0; i <= 20 && lo + i * step <= hi + step / 2; i++) {
		double v = lo + i * step;
		char b[32];
		double t = (v - lo) / (hi - lo);
		if (percent)
			snprintf(b, sizeof b, "%.3g%%", fabs(v) < step / 1e6 ? 0.0 : v);
		else
			num(fabs(v) < step / 1e6 ? 0.0 : v, b, sizeof b);
		if (vertical) {
			double y = TOP + (1 - t) * (H - TOP - BOTTOM);
			double x = right ? W - RIGHT : LEFT;
			put(p, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>", LEFT,
			    W - RIGHT, y, y);
			put(p, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" class=\"tick\">%s</text>",
			    right ? x + 6 : x - 6, y + 4, right ? "start" : "end", b);
		} else {
			double x = LEFT + t * (W - LEFT - RIGHT);
			put(p, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" class=\"tick\">%s</text>",
			    x, H - BOTTOM + 18, b);
		}
	}
}

/* A line chart of `c`, then its data table. */
static void line_chart(page *p, const chart *c) {
	double x0, x1, y0, y1, r0 = 0, r1 = 1;
	range(c, false, true, &x0, &x1);
	range(c, false, false, &y0, &y1);
	bool has_right = false;
	for (uint32_t i = 0; i < c->n; i++)
		has_right |= c->s[i].right && c->s[i].n;
	if (has_right)
		range(c, true, false, &r0, &r1);
	put(p, "<figure><svg class=\"chart\" data-chart=\"%s\" viewBox=\"0 0 %d %d\" role=\"img\" "
	    "aria-labelledby=\"%s-title\"><title id=\"%s-title\">", c->id, W, H, c->id, c->id);
	text(p, c->title);
	put(p, "</title>");
	axis_ticks(p, y0, y1, true, false, false);
	if (has_right)
		axis_ticks(p, r0, r1, true, true, c->percent_right);
	axis_ticks(p, x0, x1, false, false, false);
	put(p, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" class=\"frame\"/>", LEFT, TOP,
	    W - LEFT - RIGHT, H - TOP - BOTTOM);
	put(p, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" class=\"label\">", (LEFT + W - RIGHT) / 2,
	    H - 22);
	text(p, c->x_label);
	put(p, "</text><text transform=\"translate(16 %d) rotate(-90)\" text-anchor=\"middle\" "
	    "class=\"label\">", (TOP + H - BOTTOM) / 2);
	text(p, c->y_label);
	put(p, "</text>");
	if (has_right) {
		put(p, "<text transform=\"translate(%d %d) rotate(90)\" text-anchor=\"middle\" "
		    "class=\"label\">", W - 12, (TOP + H - BOTTOM) / 2);
		text(p, c->right_label);
		put(p, "</text>");
	}
	for (uint32_t i = 0; i < c->n; i++) {
		const series *s = &c->s[i];
		double lo = s->right ? r0 : y0, hi = s->right ? r1 : y1;
		put(p, "<g class=\"series\" data-series=\"");
		text(p, s->name);
		put(p, "\" data-points=\"%u\" data-axis=\"%s\"><polyline fill=\"none\" stroke=\"%s\" "
		    "stroke-width=\"1.5\" stroke-dasharray=\"%s\" points=\"", s->n,
		    s->right ? "right" : "left", colors[s->style % N_COLORS],
		    dashes[s->style % N_DASHES]);
		for (uint32_t k = 0; k < s->n; k++)
			put(p, "%s%.1f,%.1f", k ? " " : "",
			    LEFT + (s->x[k] - x0) / (x1 - x0) * (W - LEFT - RIGHT),
			    TOP + (1 - (s->y[k] - lo) / (hi - lo)) * (H - TOP - BOTTOM));
		put(p, "\"/>");
		for (uint32_t k = 0; k < s->n; k++) {
			char title[256], a[32], b[32];
			snprintf(title, sizeof title, "%s, %s %s: %s", s->name, c->x_label,
				 num(s->x[k], a, sizeof a), num(s->y[k], b, sizeof b));
			marker(p, s->style, LEFT + (s->x[k] - x0) / (x1 - x0) * (W - LEFT - RIGHT),
			       TOP + (1 - (s->y[k] - lo) / (hi - lo)) * (H - TOP - BOTTOM), title);
		}
		put(p, "</g>");
	}
	put(p, "</svg><figcaption>");
	// The legend: a sample of each series' line and marker, with its name.
	for (uint32_t i = 0; i < c->n; i++) {
		put(p, "<span class=\"key\"><svg width=\"34\" height=\"12\" aria-hidden=\"true\">"
		    "<line x1=\"1\" x2=\"33\" y1=\"6\" y2=\"6\" stroke=\"%s\" stroke-width=\"2\" "
		    "stroke-dasharray=\"%s\"/></svg>", colors[c->s[i].style % N_COLORS],
		    dashes[c->s[i].style % N_DASHES]);
		text(p, c->s[i].name);
		put(p, "%s</span> ", c->s[i].right ? " (right axis)" : "");
	}
	put(p, "</figcaption></figure>\n<details><summary>");
	text(p, c->title);
	put(p, ": the data</summary><table class=\"data\" data-chart=\"%s\"><tr><th>series</th>"
	    "<th>", c->id);
	text(p, c->x_label);
	put(p, "</th><th>value</th></tr>");
	for (uint32_t i = 0; i < c->n; i++)
		for (uint32_t k = 0; k < c->s[i].n; k++) {
			char a[32], b[32];
			put(p, "<tr><td>");
			text(p, c->s[i].name);
			put(p, "</td><td>%s</td><td>%s</td></tr>", num(c->s[i].x[k], a, sizeof a),
			    num(c->s[i].y[k], b, sizeof b));
		}
	put(p, "</table></details>\n");
}

/* A series of run `r`'s records that hold a number at `key` (and are not skipped iterations
 * unless `skipped`); false when out of memory. */
static bool run_series(const f8_report_run *r, const char *key, bool skipped, series *s) {
	size_t n = json_array_size(r->records);
	s->x = f8_calloc(n + 1, sizeof *s->x);
	s->y = f8_calloc(n + 1, sizeof *s->y);
	s->n = 0;
	if (!s->x || !s->y)
		return false;
	for (size_t i = 0; i < n; i++) {
		json_t *record = json_array_get(r->records, i);
		json_t *value = json_object_get(record, key);
		bool was_skipped = json_is_true(json_object_get(record, "skipped"));
		if (!json_is_number(value) || was_skipped != skipped ||
		    !isfinite(json_number_value(value)))
			continue;
		s->x[s->n] = (double)json_integer_value(json_object_get(record, "step"));
		s->y[s->n++] = json_number_value(value);
	}
	return true;
}

static void free_series(series *s, uint32_t n) {
	for (uint32_t i = 0; i < n; i++) {
		f8_free(s[i].x);
		f8_free(s[i].y);
	}
}

/* The relative difference of `run` to `base` in percent, at the steps both logged. */
static bool relative_series(const series *run, const series *base, series *out) {
	out->x = f8_calloc(run->n + 1, sizeof *out->x);
	out->y = f8_calloc(run->n + 1, sizeof *out->y);
	out->n = 0;
	if (!out->x || !out->y)
		return false;
	for (uint32_t i = 0, j = 0; i < run->n; i++) {
		while (j < base->n && base->x[j] < run->x[i])
			j++;
		if (j < base->n && base->x[j] == run->x[i] && base->y[j] != 0) {
			out->x[out->n] = run->x[i];
			out->y[out->n++] = 100 * (run->y[i] - base->y[j]) / fabs(base->y[j]);
		}
	}
	return true;
}

static bool training_section(page *p, const f8_report *r) {
	put(p, "<section id=\"training\"><h2>Training</h2>\n");
	if (!r->n_runs) {
		put(p, "<p class=\"none\">No metrics file was given: f8c train --metrics FILE "
		    "writes one.</p></section>\n");
		return true;
	}
	put(p, "<p>Runs: ");
	for (uint32_t i = 0; i < r->n_runs; i++) {
		put(p, "%s<b>", i ? ", " : "");
		text(p, r->runs[i].label);
		put(p, "</b> (");
		text(p, r->runs[i].path);
		put(p, "%s)", i == 0 && r->n_runs > 1 ? ", the baseline" : "");
		if (r->runs[i].skipped)
			put(p, " <span class=\"warn\">%u line%s skipped: malformed</span>",
			    r->runs[i].skipped, r->runs[i].skipped == 1 ? "" : "s");
	}
	put(p, ".</p>\n");
	uint32_t n = 3 * r->n_runs;
	series *s = f8_calloc(n + 1, sizeof *s);
	bool ok = s != NULL;
	uint32_t used = 0;
	// Loss: each run's train loss and eval loss; each run's relative difference to the
	// baseline's train loss on the right axis.
	for (uint32_t i = 0; ok && i < r->n_runs; i++) {
		series *loss = &s[used++];
		ok = run_series(&r->runs[i], "loss", false, loss);
		snprintf(loss->name, sizeof loss->name, "%s loss", r->runs[i].label);
		loss->style = (int)i;
		series *eval = &s[used++];
		ok = ok && run_series(&r->runs[i], "eval_loss", false, eval);
		snprintf(eval->name, sizeof eval->name, "%s eval loss", r->runs[i].label);
		eval->style = (int)(r->n_runs + i);
		if (ok && !eval->n)
			used--, free_series(eval, 1), *eval = (series){0};
		if (ok && i > 0) {
			series *diff = &s[used++];
			ok = relative_series(loss, &s[0], diff);
			snprintf(diff->name, sizeof diff->name, "%s vs %s, train loss",
				 r->runs[i].label, r->runs[0].label);
			diff->style = (int)(2 * r->n_runs + i);
			diff->right = true;
		}
	}
	if (ok)
		line_chart(p, &(chart){.id = "loss", .title = "Loss", .x_label = "iteration",
				       .y_label = "loss (nats per token)",
				       .right_label = "relative difference to the baseline (%)",
				       .percent_right = true, .s = s, .n = used});
	free_series(s, used);
	// The learning rate and the gradient norm, beneath.
	const char *keys[2] = {"lr", "grad_norm"}, *titles[2] = {"Learning rate", "Gradient norm"};
	const char *units[2] = {"learning rate", "global gradient norm (before clipping)"};
	for (int k = 0; ok && k < 2; k++) {
		used = 0;
		for (uint32_t i = 0; ok && i < r->n_runs; i++) {
			ok = run_series(&r->runs[i], keys[k], false, &s[used]);
			snprintf(s[used].name, sizeof s[used].name, "%s", r->runs[i].label);
			s[used].style = (int)i;
			s[used].right = false;
			used++;
		}
		if (ok)
			line_chart(p, &(chart){.id = keys[k], .title = titles[k],
					       .x_label = "iteration", .y_label = units[k], .s = s,
					       .n = used});
		free_series(s, used);
	}
	// Skipped iterations, if any: a table.
	for (uint32_t i = 0; ok && i < r->n_runs; i++) {
		bool heading = false;
		for (size_t k = 0; k < json_array_size(r->runs[i].records); k++) {
			json_t *record = json_array_get(r->runs[i].records, k);
			if (!json_is_true(json_object_get(record, "skipped")))
				continue;
			if (!heading) {
				put(p, "<table class=\"skips\"><caption>");
				text(p, r->runs[i].label);
				put(p, ": iterations skipped for a non-finite value</caption><tr><th>"
				    "iteration</th><th>not finite</th></tr>");
				heading = true;
			}
			put(p, "<tr><td>%lld</td><td>",
			    (long long)json_integer_value(json_object_get(record, "step")));
			text(p, json_string_value(json_object_get(record, "skipped_for")));
			put(p, "</td></tr>");
		}
		if (heading)
			put(p, "</table>\n");
	}
	f8_free(s);
	put(p, "</section>\n");
	return ok;
}

/* ---- the precision map ---- */

/* The fill of a GEMM cell: its recipe's colour in FP8, a hatch in high precision. */
static const char *recipe_color(const char *recipe) {
	static const char *const names[] = {"delayed", "current", "rowwise", "block", "mxfp8"};
	for (int i = 0; i < 5; i++)
		if (recipe && strcmp(recipe, names[i]) == 0)
			return colors[i];
	return colors[5];
}

static void precision_section(page *p, const f8_report *r) {
	put(p, "<section id=\"precision\"><h2>Precision map</h2>\n");
	if (!r->audit) {
		put(p, "<p class=\"none\">No model, plan or audit was given: add a plan folder, or "
		    "the model with its options last among the inputs.</p></section>\n");
		return;
	}
	json_t *gemms = json_object_get(r->audit, "gemms");
	json_t *summary = json_object_get(r->audit, "summary");
	put(p, "<p>");
	text(p, r->audit_source);
	put(p, ": <b>%lld of %lld GEMMs in FP8, %.1f%% of the GEMM FLOPs</b> (format ",
	    (long long)json_integer_value(json_object_get(summary, "fp8_gemms")),
	    (long long)json_integer_value(json_object_get(summary, "gemms")),
	    100 * json_number_value(json_object_get(summary, "fp8_flop_share")));
	text(p, json_string_value(json_object_get(r->audit, "fp8_format")));
	put(p, ", recipe ");
	text(p, json_string_value(json_object_get(r->audit, "fp8_recipe")));
	put(p, "). Rows are layers, columns the GEMMs of each; a cell's tooltip says why.</p>\n");
	// Layers in order of first appearance; the columns fwd, dgrad, wgrad, then other kinds.
	size_t n = json_array_size(gemms);
	const char **scopes = f8_calloc(n + 1, sizeof *scopes);
	uint32_t n_scopes = 0;
	static const char *const kinds[] = {"fwd", "dgrad", "wgrad", "other"};
	for (size_t i = 0; scopes && i < n; i++) {
		const char *scope = json_string_value(json_object_get(json_array_get(gemms, i),
								      "scope"));
		uint32_t k = 0;
		while (k < n_scopes && strcmp(scopes[k], scope ? scope : "") != 0)
			k++;
		if (k == n_scopes)
			scopes[n_scopes++] = scope ? scope : "";
	}
	enum { ROW = 22, NAME = 260, CELL = 150 };
	int height = TOP + ROW * (int)n_scopes + 10;
	put(p, "<figure><svg class=\"chart precision-map\" data-chart=\"precision\" "
	    "data-gemms=\"%zu\" viewBox=\"0 0 %d %d\" role=\"img\" aria-labelledby=\"prec-title\">"
	    "<title id=\"prec-title\">Which GEMMs run in FP8, by layer</title>"
	    "<defs><pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
	    "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#eee\"/>"
	    "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#999\" stroke-width=\"2\"/>"
	    "</pattern></defs>", n, NAME + 4 * CELL + 10, height);
	for (int k = 0; k < 4; k++)
		put(p, "<text x=\"%d\" y=\"20\" text-anchor=\"middle\" class=\"label\">%s</text>",
		    NAME + k * CELL + CELL / 2, kinds[k]);
	for (uint32_t row = 0; row < n_scopes; row++) {
		put(p, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\" class=\"tick\">", NAME - 8,
		    TOP + (int)row * ROW + 15);
		text(p, scopes[row]);
		put(p, "</text>");
	}
	for (size_t i = 0; scopes && i < n; i++) {
		json_t *g = json_array_get(gemms, i);
		const char *scope = json_string_value(json_object_get(g, "scope"));
		const char *kind = json_string_value(json_object_get(g, "gemm"));
		uint32_t row = 0;
		while (row < n_scopes && strcmp(scopes[row], scope ? scope : "") != 0)
			row++;
		int col = 3;
		for (int k = 0; k < 3; k++)
			if (kind && strcmp(kind, kinds[k]) == 0)
				col = k;
		bool fp8 = json_is_true(json_object_get(g, "fp8"));
		json_t *ops = json_object_get(g, "operands");
		char label[64];
		const char *recipe = json_string_value(json_object_get(json_array_get(ops, 0),
								       "recipe"));
		const char *a = json_string_value(json_object_get(json_array_get(ops, 0), "format"));
		const char *b = json_string_value(json_object_get(json_array_get(ops, 1), "format"));
		const char *dtype = json_string_value(json_object_get(g, "dtype"));
		if (fp8)
			snprintf(label, sizeof label, "%s x %s %s", a ? a : "?", b ? b : "?",
				 recipe ? recipe : "");
		else
			snprintf(label, sizeof label, "%s", dtype ? dtype : "?");
		int x = NAME + col * CELL, y = TOP + (int)row * ROW;
		put(p, "<g><rect class=\"cell gemm\" data-fp8=\"%s\" x=\"%d\" y=\"%d\" width=\"%d\" "
		    "height=\"%d\" fill=\"%s\" fill-opacity=\"%s\" stroke=\"#fff\"><title>",
		    fp8 ? "true" : "false", x + 1, y + 1, CELL - 2, ROW - 2,
		    fp8 ? recipe_color(recipe) : "url(#hatch)", fp8 ? "0.35" : "1");
		text(p, scope);
		put(p, " ");
		text(p, kind);
		put(p, ": ");
		text(p, json_string_value(json_object_get(g, "reason")));
		put(p, "</title></rect><text x=\"%d\" y=\"%d\" text-anchor=\"middle\" "
		    "class=\"cell-label\">", x + CELL / 2, y + 15);
		text(p, label);
		put(p, "</text></g>");
	}
	put(p, "</svg><figcaption>Filled: FP8, coloured by recipe (");
	static const char *const recipes[] = {"delayed", "current", "rowwise", "block", "mxfp8"};
	for (int k = 0; k < 5; k++)
		put(p, "%s<span style=\"color:%s\">&#9632;</span> %s", k ? ", " : "", colors[k],
		    recipes[k]);
	put(p, "), the label giving both operands' formats; hatched: high precision, the label "
	    "giving its dtype.</figcaption></figure>\n");
	// The data: every GEMM with its reason, then every other op's decision.
	put(p, "<details><summary>Precision map: the data</summary><table class=\"data\" "
	    "data-chart=\"precision\"><tr><th>layer</th><th>GEMM</th><th>m x n x k</th>"
	    "<th>precision</th><th>why</th></tr>");
	for (size_t i = 0; i < n; i++) {
		json_t *g = json_array_get(gemms, i);
		put(p, "<tr><td>");
		text(p, json_string_value(json_object_get(g, "scope")));
		put(p, "</td><td>");
		text(p, json_string_value(json_object_get(g, "gemm")));
		put(p, "</td><td>%lld x %lld x %lld</td><td>%s</td><td>",
		    (long long)json_integer_value(json_object_get(g, "m")),
		    (long long)json_integer_value(json_object_get(g, "n")),
		    (long long)json_integer_value(json_object_get(g, "k")),
		    json_is_true(json_object_get(g, "fp8")) ? "FP8" : "high");
		text(p, json_string_value(json_object_get(g, "reason")));
		put(p, "</td></tr>");
	}
	put(p, "</table></details>\n");
	json_t *others = json_object_get(r->audit, "ops");
	if (json_array_size(others)) {
		put(p, "<details><summary>The other ops' precision (attention, norms, softmax, "
		    "embedding, optimizer ...)</summary><table class=\"ops\"><tr><th>layer</th>"
		    "<th>op</th><th>phase</th><th>dtype</th><th>why</th></tr>");
		for (size_t i = 0; i < json_array_size(others); i++) {
			json_t *o = json_array_get(others, i);
			const char *keys[] = {"scope", "op", "phase", "dtype", "reason"};
			put(p, "<tr>");
			for (int k = 0; k < 5; k++) {
				put(p, "<td>");
				text(p, json_string_value(json_object_get(o, keys[k])));
				put(p, "</td>");
			}
			put(p, "</tr>");
		}
		put(p, "</table></details>\n");
	}
	f8_free(scopes);
	put(p, "</section>\n");
}

/* ---- the scaling state ---- */

/* A colour for t in [0, 1] along viridis (a perceptually even ramp), as #rrggbb. */
static void ramp(double t, char out[8]) {
	static const unsigned char stops[5][3] = {
		{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
	t = t < 0 ? 0 : t > 1 ? 1 : t;
	double f = t * 4;
	int i = f >= 4 ? 3 : (int)f;
	double u = f - i;
	snprintf(out, 8, "#%02x%02x%02x", (int)(stops[i][0] + u * (stops[i + 1][0] - stops[i][0])),
		 (int)(stops[i][1] + u * (stops[i + 1][1] - stops[i][1])),
		 (int)(stops[i][2] + u * (stops[i + 1][2] - stops[i][2])));
}

/* The largest finite value and the smallest normal of an FP8 format. */
static bool format_range(const char *format, double *max, double *min_normal) {
	if (format && strcmp(format, "E4M3") == 0)
		return *max = 448, *min_normal = 0x1p-6, true;
	if (format && strcmp(format, "E5M2") == 0)
		return *max = 57344, *min_normal = 0x1p-14, true;
	return false;
}

/* One table's amaxes (or scales) as a heat map: slots down, steps across, log10 colour. */
static void heat_map(page *p, const f8_report_table *t, bool scales, uint32_t index) {
	const double *v = scales ? t->scale : t->amax;
	double lo = INFINITY, hi = -INFINITY;
	for (size_t i = 0; i < (size_t)t->n_steps * t->n_slots; i++)
		if (isfinite(v[i]) && v[i] > 0) {
			double l = log10(v[i]);
			lo = l < lo ? l : lo;
			hi = l > hi ? l : hi;
		}
	if (lo > hi)
		lo = 0, hi = 1;
	if (hi - lo < 1e-9)
		lo -= 0.5, hi += 0.5;
	enum { NAME = 230, ROW = 14, PLOT = 640 };
	double cell = (double)PLOT / (t->n_steps ? t->n_steps : 1);
	int height = TOP + ROW * (int)t->n_slots + 50;
	char id[64];
	snprintf(id, sizeof id, "%s-%u", scales ? "scale" : "amax", index);
	put(p, "<figure><svg class=\"chart heatmap\" data-chart=\"%s\" data-table=\"", id);
	text(p, t->name);
	put(p, "\" data-source=\"");
	text(p, t->source);
	put(p, "\" data-rows=\"%u\" data-cols=\"%u\" viewBox=\"0 0 %d %d\" role=\"img\" "
	    "aria-labelledby=\"%s-title\"><title id=\"%s-title\">", t->n_slots, t->n_steps,
	    NAME + PLOT + 120, height, id, id);
	text(p, t->name);
	put(p, " %s over iterations, ", scales ? "scale" : "amax");
	text(p, t->source);
	put(p, "</title>");
	uint32_t nonfinite = 0, saturated = 0, underflow = 0, skipped = 0;
	const char *unit = t->updates ? "update" : "iteration";
	// Above a column: the table skipped non-finite amaxes since the record before (its
	// count grew; the slots' own rows keep their last finite amax).
	for (uint32_t k = 0; !scales && t->nonfinite && k < t->n_steps; k++) {
		int64_t before = k ? t->nonfinite[k - 1] : 0, now = t->nonfinite[k];
		if (now < 0 || before < 0 || now <= before)
			continue;
		skipped++;
		put(p, "<text class=\"mark skipped\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" "
		    "font-size=\"11\">&#215;<title>%s %lld: %lld non-finite amax%s skipped</title>"
		    "</text>", NAME + k * cell + cell / 2, TOP - 4, unit, (long long)t->steps[k],
		    (long long)(now - before), now - before == 1 ? "" : "es");
	}
	for (uint32_t s = 0; s < t->n_slots; s++) {
		int y = TOP + (int)s * ROW;
		put(p, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\" class=\"tick\">", NAME - 6,
		    y + 11);
		text(p, t->labels[s]);
		put(p, "</text>");
		double max = 0, min_normal = 0;
		bool known = format_range(t->formats[s], &max, &min_normal);
		for (uint32_t k = 0; k < t->n_steps; k++) {
			double x = v[(size_t)k * t->n_slots + s];
			char color[8] = "#ffffff", a[32], title[320];
			if (isfinite(x) && x > 0)
				ramp((log10(x) - lo) / (hi - lo), color);
			// Marks: not finite; and for amaxes, with the scale in force (the one recorded
			// before), values past the format's largest (saturated) or a largest value
			// below its smallest normal (underflow).
			const char *mark = NULL, *why = "";
			// Only a step recorded right after another knows the scale it ran with.
			double before = !scales && t->scale && k > 0 &&
						t->steps[k] == t->steps[k - 1] + 1
						? t->scale[(size_t)(k - 1) * t->n_slots + s]
						: NAN;
			if (!isfinite(x))
				mark = "nonfinite", why = " (not finite)", nonfinite++;
			else if (known && isfinite(before) && x * before > max)
				mark = "saturated", why = " (saturated: amax x scale past the format's "
							  "largest)", saturated++;
			else if (known && isfinite(before) && x > 0 && x * before < min_normal)
				mark = "underflow", why = " (underflow: amax x scale below the "
							  "format's smallest normal)", underflow++;
			snprintf(title, sizeof title, "%s, %s %lld: %s%s", t->labels[s], unit,
				 (long long)t->steps[k], num(x, a, sizeof a), why);
			double cx = NAME + k * cell;
			put(p, "<rect class=\"cell\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" "
			    "fill=\"%s\"><title>", cx, y, cell + 0.05, ROW - 1, color);
			text(p, title);
			put(p, "</title></rect>");
			if (mark)
				put(p, "<text class=\"mark %s\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" "
				    "font-size=\"11\">%s</text>", mark, cx + cell / 2, y + 11,
				    mark[0] == 'n' ? "&#215;" : mark[0] == 's' ? "&#9650;" : "&#9660;");
		}
	}
	// The colour scale and the iteration axis.
	int y = TOP + ROW * (int)t->n_slots + 6;
	if (t->n_steps) {
		put(p, "<text x=\"%d\" y=\"%d\" class=\"tick\">%s %lld</text>", NAME, y + 12, unit,
		    (long long)t->steps[0]);
		put(p, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\" class=\"tick\">%lld</text>",
		    NAME + PLOT, y + 12, (long long)t->steps[t->n_steps - 1]);
	}
	for (int i = 0; i < 10; i++) {
		char color[8];
		ramp(i / 9.0, color);
		put(p, "<rect x=\"%d\" y=\"%d\" width=\"10\" height=\"10\" fill=\"%s\"/>",
		    NAME + PLOT + 12, TOP + i * 10, color);
	}
	char a[32], b[32];
	put(p, "<text x=\"%d\" y=\"%d\" class=\"tick\">%s</text><text x=\"%d\" y=\"%d\" "
	    "class=\"tick\">%s</text>", NAME + PLOT + 26, TOP + 9, num(pow(10, lo), a, sizeof a),
	    NAME + PLOT + 26, TOP + 99, num(pow(10, hi), b, sizeof b));
	put(p, "</svg><figcaption>");
	text(p, t->name);
	put(p, " %s per slot (rows) and %s (columns), colour on a log scale from %s to %s; "
	    "white: zero. Marked: &#215; not finite (%u)", scales ? "scale" : "amax",
	    t->updates ? "update of the table, the newest last (one an iteration for weights, one "
			 "a micro-batch for activations and gradients; a slot whose amax was not "
			 "finite skips its update)"
		       : "recorded iteration", a, b, nonfinite);
	if (!scales && t->nonfinite)
		put(p, "; &#215; above a column: the table skipped non-finite amaxes since the record "
		    "before (%u), the slots keeping their last finite amax", skipped);
	if (!scales && t->scale)
		put(p, ", &#9650; saturated (%u), &#9660; underflow (%u), against the scale "
		    "recorded the iteration before (so only where the iterations before were "
		    "recorded too: --log-fp8-stats 1 marks every one)", saturated, underflow);
	put(p, ".</figcaption></figure>\n<details><summary>");
	text(p, t->name);
	put(p, " %s: the data</summary><table class=\"data\" data-chart=\"%s\"><tr><th>slot</th>",
	    scales ? "scale" : "amax", id);
	for (uint32_t k = 0; k < t->n_steps; k++)
		put(p, "<th>%lld</th>", (long long)t->steps[k]);
	put(p, "</tr>");
	for (uint32_t s = 0; s < t->n_slots; s++) {
		put(p, "<tr><td>");
		text(p, t->labels[s]);
		put(p, "</td>");
		for (uint32_t k = 0; k < t->n_steps; k++)
			put(p, "<td>%s</td>", num(v[(size_t)k * t->n_slots + s], a, sizeof a));
		put(p, "</tr>");
	}
	put(p, "</table></details>\n");
}

/* The calibration's amax variation per layer: a bar per operand. */
static void calibration_chart(page *p, const f8_report *r) {
	json_t *tensors = json_object_get(r->calibration, "tensors");
	size_t n = json_array_size(tensors);
	enum { NAME = 260, BAR = 12, PLOT = 520 };
	double hi = 0;
	for (size_t i = 0; i < n; i++) {
		double cv = json_number_value(json_object_get(json_array_get(tensors, i), "amax_cv"));
		hi = cv > hi ? cv : hi;
	}
	if (hi <= 0)
		hi = 1;
	put(p, "<h3>Calibration: how much each amax moves from step to step</h3><p>");
	text(p, r->calibration_path);
	put(p, " (model ");
	text(p, json_string_value(json_object_get(r->calibration, "model")));
	put(p, ", %lld steps): the coefficient of variation of each GEMM operand's amax; a large "
	    "one is where delayed scaling lags.</p>\n",
	    (long long)json_integer_value(json_object_get(r->calibration, "steps")));
	put(p, "<figure><svg class=\"chart\" data-chart=\"calibration\" viewBox=\"0 0 %d %zu\" "
	    "role=\"img\" aria-labelledby=\"cal-title\"><title id=\"cal-title\">Coefficient of "
	    "variation of the amax per layer and operand</title>", NAME + PLOT + 80,
	    TOP + n * BAR + 30);
	static const char *const roles[] = {"x", "w", "dy"};
	for (int role = 0; role < 3; role++) {
		uint32_t count = 0;
		for (size_t i = 0; i < n; i++)
			count += strcmp(json_string_value(json_object_get(json_array_get(tensors, i),
									  "role")) ?: "", roles[role]) == 0;
		put(p, "<g class=\"series\" data-series=\"%s\" data-points=\"%u\">", roles[role],
		    count);
		for (size_t i = 0; i < n; i++) {
			json_t *e = json_array_get(tensors, i);
			if (strcmp(json_string_value(json_object_get(e, "role")) ?: "", roles[role]))
				continue;
			double cv = json_number_value(json_object_get(e, "amax_cv"));
			double width = isfinite(cv) && cv > 0 ? PLOT * (cv < hi ? cv : hi) / hi : 0;
			char a[32], title[256];
			snprintf(title, sizeof title, "%s %s: %s", json_string_value(json_object_get(
				 e, "scope")) ?: "", roles[role], num(cv, a, sizeof a));
			int y = TOP + (int)i * BAR;
			put(p, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\" class=\"tick\">", NAME - 6,
			    y + 10);
			text(p, title);
			put(p, "</text><rect class=\"pt\" x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" "
			    "fill=\"%s\"><title>", NAME, y + 1, width, BAR - 2, colors[role]);
			text(p, title);
			put(p, "</title></rect>");
		}
		put(p, "</g>");
	}
	put(p, "</svg></figure>\n<details><summary>Calibration: the data</summary><table "
	    "class=\"data\" data-chart=\"calibration\"><tr><th>layer</th><th>operand</th>"
	    "<th>amax mean</th><th>cv</th><th>largest step ratio</th><th>underflow</th>"
	    "<th>saturated</th></tr>");
	for (size_t i = 0; i < n; i++) {
		json_t *e = json_array_get(tensors, i);
		char a[32], b[32], c[32], d[32], f[32];
		put(p, "<tr><td>");
		text(p, json_string_value(json_object_get(e, "scope")));
		put(p, "</td><td>");
		text(p, json_string_value(json_object_get(e, "role")));
		put(p, "</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>",
		    num(json_number_value(json_object_get(e, "amax_mean")), a, sizeof a),
		    num(json_number_value(json_object_get(e, "amax_cv")), b, sizeof b),
		    num(json_number_value(json_object_get(e, "max_step_ratio")), c, sizeof c),
		    num(json_number_value(json_object_get(e, "underflow")), d, sizeof d),
		    num(json_number_value(json_object_get(e, "saturate")), f, sizeof f));
	}
	put(p, "</table></details>\n");
}

static void scaling_section(page *p, const f8_report *r) {
	put(p, "<section id=\"scaling\"><h2>Scaling state</h2>\n");
	if (!r->n_tables && !r->calibration)
		put(p, "<p class=\"none\">No scaling state was given: f8c train --log-fp8-stats N "
		    "records it in the metrics (delayed scaling), a checkpoint folder holds its "
		    "amax history, and f8c calibrate writes a STATS.json.</p>\n");
	for (uint32_t i = 0; i < r->n_tables; i++) {
		const f8_report_table *t = &r->tables[i];
		put(p, "<h3>");
		text(p, t->name);
		put(p, " of ");
		text(p, t->source);
		put(p, "</h3>\n");
		if (!t->n_steps) {
			put(p, "<p class=\"none\">No step recorded.</p>\n");
			continue;
		}
		heat_map(p, t, false, i);
		if (t->scale && t->n_steps > 1)
			heat_map(p, t, true, i);
	}
	if (r->calibration)
		calibration_chart(p, r);
	put(p, "</section>\n");
}

/* ---- memory ---- */

/* Bytes in GiB, or MiB below one GiB. */
static const char *bytes_text(double bytes, char *buffer, size_t size) {
	if (bytes >= 1073741824.0)
		snprintf(buffer, size, "%.3f GiB", bytes / 1073741824.0);
	else
		snprintf(buffer, size, "%.2f MiB", bytes / 1048576.0);
	return buffer;
}

static void memory_section(page *p, const f8_report *r) {
	put(p, "<section id=\"memory\"><h2>Memory</h2>\n");
	json_t *memory = r->audit ? json_object_get(r->audit, "memory") : NULL;
	json_t *bytes = json_object_get(memory, "bytes");
	if (!json_is_object(bytes)) {
		put(p, "<p class=\"none\">No memory audit: it comes with a model or plan given to "
		    "the report (f8c audit --memory).</p></section>\n");
		return;
	}
	double total = (double)json_integer_value(json_object_get(memory, "total"));
	size_t n = json_object_size(bytes);
	enum { NAME = 200, BAR = 22, PLOT = 560 };
	char a[32];
	put(p, "<p>One GPU, one training step: %s in all%s.</p>\n", bytes_text(total, a, sizeof a),
	    json_is_true(json_object_get(memory, "planned")) ? ""
							     : " (the model's sizes are not all bound: "
							       "no activations planned)");
	put(p, "<figure><svg class=\"chart\" data-chart=\"memory\" viewBox=\"0 0 %d %zu\" "
	    "role=\"img\" aria-labelledby=\"mem-title\"><title id=\"mem-title\">Device memory by "
	    "part</title><g class=\"series\" data-series=\"bytes\" data-points=\"%zu\">",
	    NAME + PLOT + 110, TOP + n * BAR, n);
	const char *key;
	json_t *value;
	int i = 0;
	json_object_foreach(bytes, key, value) {
		double b = (double)json_integer_value(value);
		double width = total > 0 && b > 0 ? PLOT * (b < total ? b : total) / total : 0;
		int y = TOP / 2 + i * BAR;
		char title[128];
		snprintf(title, sizeof title, "%s: %s (%.1f%%)", key, bytes_text(b, a, sizeof a),
			 total > 0 ? 100 * b / total : 0);
		put(p, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\" class=\"tick\">", NAME - 6,
		    y + 15);
		text(p, key);
		put(p, "</text><rect class=\"pt\" x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" "
		    "fill=\"%s\"><title>", NAME, y + 2, width, BAR - 4, colors[i % N_COLORS]);
		text(p, title);
		put(p, "</title></rect><text x=\"%.1f\" y=\"%d\" class=\"tick\">%s</text>",
		    NAME + width + 6, y + 15, bytes_text(b, a, sizeof a));
		i++;
	}
	put(p, "</g></svg></figure>\n<details><summary>Memory: the data</summary><table "
	    "class=\"data\" data-chart=\"memory\"><tr><th>part</th><th>bytes</th><th>GiB</th>"
	    "</tr>");
	json_object_foreach(bytes, key, value) {
		put(p, "<tr><td>");
		text(p, key);
		put(p, "</td><td>%lld</td><td>%.3f</td></tr>", (long long)json_integer_value(value),
		    (double)json_integer_value(value) / 1073741824.0);
	}
	put(p, "<tr><td>total</td><td>%.0f</td><td>%.3f</td></tr></table></details>\n", total,
	    total / 1073741824.0);
	put(p, "</section>\n");
}

/* ---- time ---- */

/* A number of a JSON object's key, NAN when absent. */
static double key_number(const json_t *object, const char *key) {
	return f8_report_json_number(json_object_get(object, key));
}

/* The step-time breakdown of a GPU run's profile: a bar per category and one for idle. */
static void time_section(page *p, const f8_report *r) {
	put(p, "<section id=\"time\"><h2>Time</h2>\n");
	if (!r->profile) {
		put(p, "<p class=\"none\">No step-time breakdown was given: f8c train --device cuda "
		    "--profile FILE records one.</p></section>\n");
		return;
	}
	json_t *categories = json_object_get(r->profile, "categories");
	size_t n = json_array_size(categories);
	double wall = key_number(r->profile, "wall_ms_per_step");
	double idle = key_number(r->profile, "idle_ms_per_step");
	char a[32], b[32], c[32];
	put(p, "<p>");
	text(p, r->profile_path);
	put(p, ": %lld steps timed, %s ms a step, of which %s ms idle (the GPU waiting on the "
	    "host); device peak %.3f GiB.</p>\n",
	    (long long)json_integer_value(json_object_get(r->profile, "steps")),
	    num(wall, a, sizeof a), num(idle, b, sizeof b),
	    key_number(r->profile, "device_peak_bytes") / 1073741824.0);
	enum { NAME = 220, BAR = 20, PLOT = 560 };
	double hi = 0;
	for (size_t i = 0; i < n; i++) {
		double ms = key_number(json_array_get(categories, i), "ms_per_step");
		hi = isfinite(ms) && ms > hi ? ms : hi;
	}
	hi = isfinite(idle) && idle > hi ? idle : hi;
	if (hi <= 0)
		hi = 1;
	put(p, "<figure><svg class=\"chart\" data-chart=\"time\" viewBox=\"0 0 %d %zu\" "
	    "role=\"img\" aria-labelledby=\"time-title\"><title id=\"time-title\">Where a "
	    "step's time goes (ms per step)</title><g class=\"series\" data-series=\"ms per "
	    "step\" data-points=\"%zu\">", NAME + PLOT + 130, TOP / 2 + (n + 1) * BAR + 10, n + 1);
	for (size_t i = 0; i <= n; i++) {
		json_t *category = i < n ? json_array_get(categories, i) : NULL;
		const char *name = i < n ? json_string_value(json_object_get(category, "name"))
					 : "idle";
		double ms = i < n ? key_number(category, "ms_per_step") : idle;
		double share = i < n ? key_number(category, "share") : idle / wall;
		if (!isfinite(ms) || ms < 0)
			ms = 0;
		ms = ms < hi ? ms : hi;
		int y = TOP / 2 + (int)i * BAR;
		char title[200];
		snprintf(title, sizeof title, "%s: %s ms a step, %.1f%% of the step", name ? name : "?",
			 num(ms, c, sizeof c), 100 * share);
		put(p, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\" class=\"tick\">", NAME - 6,
		    y + 14);
		text(p, name ? name : "?");
		put(p, "</text><rect class=\"pt\" x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" "
		    "fill=\"%s\"%s><title>", NAME, y + 2, PLOT * ms / hi, BAR - 4,
		    i < n ? colors[0] : "#999", i < n ? "" : " fill-opacity=\"0.6\"");
		text(p, title);
		put(p, "</title></rect><text x=\"%.1f\" y=\"%d\" class=\"tick\">%s ms (%.1f%%)"
		    "</text>", NAME + PLOT * ms / hi + 6, y + 14, num(ms, c, sizeof c), 100 * share);
	}
	put(p, "</g></svg></figure>\n<details><summary>Time: the data</summary><table "
	    "class=\"data\" data-chart=\"time\"><tr><th>what</th><th>ms per step</th>"
	    "<th>launches per step</th><th>share of the step</th></tr>");
	for (size_t i = 0; i < n; i++) {
		json_t *category = json_array_get(categories, i);
		put(p, "<tr><td>");
		text(p, json_string_value(json_object_get(category, "name")));
		put(p, "</td><td>%s</td><td>%s</td><td>%.2f%%</td></tr>",
		    num(key_number(category, "ms_per_step"), a, sizeof a),
		    num(key_number(category, "launches_per_step"), b, sizeof b),
		    100 * key_number(category, "share"));
	}
	put(p, "<tr><td>idle</td><td>%s</td><td></td><td>%.2f%%</td></tr></table></details>\n",
	    num(idle, a, sizeof a), 100 * idle / wall);
	json_t *top = json_object_get(r->profile, "top");
	if (json_array_size(top)) {
		put(p, "<details><summary>The kernels and library calls that take longest</summary>"
		    "<table class=\"top\"><tr><th>what</th><th>kind</th><th>ms per step</th>"
		    "<th>share</th></tr>");
		for (size_t i = 0; i < json_array_size(top) && i < 40; i++) {
			json_t *t = json_array_get(top, i);
			put(p, "<tr><td>");
			text(p, json_string_value(json_object_get(t, "name")));
			put(p, "</td><td>");
			text(p, json_string_value(json_object_get(t, "category")));
			put(p, "</td><td>%s</td><td>%.2f%%</td></tr>",
			    num(key_number(t, "ms_per_step"), a, sizeof a), 100 * key_number(t, "share"));
		}
		put(p, "</table></details>\n");
	}
	put(p, "</section>\n");
}

static const char style[] =
	"body{font:15px/1.45 system-ui,sans-serif;max-width:1000px;margin:2em auto;padding:0 1em;"
	"color:#222}h1{font-size:1.6em}h2{border-bottom:1px solid #ccc;margin-top:2em}"
	"figure{margin:1em 0}svg.chart{width:100%;height:auto;background:#fff}"
	".grid{stroke:#e4e4e4}.frame{fill:none;stroke:#888}.tick{font-size:11px;fill:#333}"
	".label{font-size:12px;fill:#111}.cell-label{font-size:11px;fill:#111}"
	".key{margin-right:1.2em;white-space:nowrap}.key svg{vertical-align:middle;margin-right:4px}"
	"table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:2px 6px;"
	"text-align:left}details{margin:0.5em 0 1.5em}.none{color:#555;font-style:italic}"
	".warn{color:#a40}.mark{fill:#fff;stroke:#000;stroke-width:0.6px}"
	"figcaption{font-size:13px;color:#333}";

f8_status f8_report_write_html(const f8_report *report, const char *title, FILE *out,
			       f8_diag *diag) {
	page p = {.out = out};
	put(&p, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>");
	text(&p, title);
	put(&p, "</title><style>%s</style></head><body>\n<h1>", style);
	text(&p, title);
	put(&p, "</h1>\n<nav><a href=\"#training\">Training</a> &middot; <a href=\"#precision\">"
	    "Precision map</a> &middot; <a href=\"#scaling\">Scaling state</a> &middot; "
	    "<a href=\"#memory\">Memory</a> &middot; <a href=\"#time\">Time</a></nav>\n");
	bool ok = training_section(&p, report);
	precision_section(&p, report);
	scaling_section(&p, report);
	memory_section(&p, report);
	time_section(&p, report);
	put(&p, "<footer><p>Written by f8c report.</p></footer></body></html>\n");
	if (!ok)
		return f8_diag_set(diag, F8_ERR_NOMEM, "out of memory");
	if (ferror(out))
		return f8_diag_set(diag, F8_ERR_IO, "cannot write the report");
	return F8_OK;
}
