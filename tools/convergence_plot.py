#!/usr/bin/env python3
"""The convergence runs' curves as one SVG file, without a plotting library (the product and its
tools need none): the training loss of each run (f8c train's --metrics lines, a mean over a
window of iterations) and its eval losses as points, then, per seed, FP8's training loss
against --bf16's of the same seed in percent, the figure issue 15's 0.5% is about.

  convergence_plot.py OUT.svg RUN.jsonl...

A run's name is its file's: PLAN-ITERS-sSEED.jsonl (tools/convergence.py's; without -sSEED,
one seed). The runs whose
plan has "bf16" in its name are the baselines; each other run is set against the baseline of
its seed. From iteration FIRST on (the first hundred fall from 10.8 to 2.6 and would flatten
the rest).
"""
import json
import os
import re
import sys

FIRST = 100
WINDOW = 25  # iterations a point of the training curve is the mean of
WIDTH, HEIGHT, MARGIN = 760, 300, 56
COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf",
           "#7f7f7f"]


def load(path):
    train, evals = {}, {}
    with open(path) as lines:
        for line in lines:
            record = json.loads(line)
            if "loss" in record and not record.get("skipped"):
                train[record["step"]] = record["loss"]
            if "eval_loss" in record:
                evals[record["step"]] = record["eval_loss"]
    return train, evals


def smoothed(train):
    steps = sorted(s for s in train if s >= FIRST)
    points = []
    for i in range(0, len(steps) - WINDOW + 1, 5):
        window = steps[i:i + WINDOW]
        points.append((window[-1], sum(train[s] for s in window) / WINDOW))
    return points


class Panel:
    """A plot area at vertical offset `top`: data to pixels, axes, ticks, a polyline."""

    def __init__(self, out, top, x_range, y_range, y_label, y_format):
        self.out, self.top = out, top
        self.x0, self.x1 = x_range
        self.y0, self.y1 = y_range
        left, bottom = MARGIN, top + HEIGHT - MARGIN // 2
        out.append(f'<rect x="{left}" y="{top + 10}" width="{WIDTH - MARGIN - 10}" '
                   f'height="{HEIGHT - MARGIN // 2 - 10}" fill="none" stroke="#444"/>')
        tick = 100 * max(1, round((self.x1 - self.x0) / 1000))
        for x in range(self.x0 - self.x0 % tick, self.x1 + 1, tick):
            if x >= self.x0:
                out.append(f'<text x="{self.px(x):.1f}" y="{bottom + 16}" '
                           f'text-anchor="middle">{x}</text>')
        for k in range(6):
            y = self.y0 + (self.y1 - self.y0) * k / 5
            out.append(f'<text x="{left - 6}" y="{self.py(y) + 4:.1f}" text-anchor="end">'
                       f'{y_format(y)}</text>')
            out.append(f'<line x1="{left}" x2="{WIDTH - 10}" y1="{self.py(y):.1f}" '
                       f'y2="{self.py(y):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="14" y="{top + HEIGHT / 2:.0f}" transform="rotate(-90 14 '
                   f'{top + HEIGHT / 2:.0f})" text-anchor="middle">{y_label}</text>')

    def px(self, x):
        return MARGIN + (x - self.x0) / (self.x1 - self.x0) * (WIDTH - MARGIN - 10)

    def py(self, y):
        span = HEIGHT - MARGIN // 2 - 10
        clipped = min(max(y, self.y0), self.y1)
        return self.top + 10 + span - (clipped - self.y0) / (self.y1 - self.y0) * span

    def line(self, points, colour, dashed=False):
        path = " ".join(f"{self.px(x):.1f},{self.py(y):.1f}" for x, y in points)
        dash = ' stroke-dasharray="5,3"' if dashed else ""
        self.out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" '
                        f'stroke-width="1.4"{dash}/>')

    def dots(self, points, colour):
        for x, y in points:
            self.out.append(f'<circle cx="{self.px(x):.1f}" cy="{self.py(y):.1f}" r="2.6" '
                            f'fill="{colour}"/>')


def main(out_path, paths):
    runs = {}
    for path in paths:
        name = os.path.basename(path)[:-len(".jsonl")]
        found = re.fullmatch(r"(.+)-(\d+)(?:-s(\d+))?", name)
        if not found:
            raise SystemExit(f"{path}: not PLAN-ITERS[-sSEED].jsonl")
        runs[name] = {"plan": found.group(1), "seed": found.group(3), "data": load(path)}
    curves = {name: smoothed(run["data"][0]) for name, run in runs.items()}
    last = -(-max(x for points in curves.values() for x, _ in points) // 100) * 100
    values = [y for points in curves.values() for _, y in points]
    values += [v for run in runs.values() for s, v in run["data"][1].items() if s >= FIRST]
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" '
           f'height="{2 * HEIGHT + 40 + 16 * len(runs)}" font-family="sans-serif" '
           f'font-size="11">', '<rect width="100%" height="100%" fill="white"/>']
    loss = Panel(svg, 0, (FIRST, last), (min(values) - 0.05, max(values) + 0.05),
                 f"loss (train: mean of {WINDOW}; eval: points)", lambda y: f"{y:.2f}")
    colours = {}
    for i, (name, run) in enumerate(sorted(runs.items())):
        colours[name] = COLOURS[i % len(COLOURS)]
        dashed = "bf16" not in run["plan"]
        loss.line(curves[name], colours[name], dashed)
        loss.dots(sorted((s, v) for s, v in run["data"][1].items() if s >= FIRST),
                  colours[name])
    # FP8 against --bf16 of the same seed, in percent.
    pairs = []
    for name, run in sorted(runs.items()):
        if "bf16" in run["plan"]:
            continue
        base = [n for n, r in runs.items() if "bf16" in r["plan"] and r["seed"] == run["seed"]]
        if base:
            reference = dict(curves[base[0]])
            pairs.append((name, [(x, 100 * (y - reference[x]) / reference[x])
                                 for x, y in curves[name] if x in reference]))
    spread = max([abs(y) for _, points in pairs for _, y in points] + [1.0])
    relative = Panel(svg, HEIGHT + 10, (FIRST, last), (-spread, spread),
                     "FP8 against --bf16, same seed (%)", lambda y: f"{y:+.1f}")
    for limit in (-0.5, 0.5):
        relative.line([(FIRST, limit), (last, limit)], "#999", True)
    for name, points in pairs:
        relative.line(points, colours[name])
    y = 2 * HEIGHT + 30
    for name in sorted(runs):
        svg.append(f'<text x="{MARGIN}" y="{y}" fill="{colours[name]}">{name}'
                   f'{" (dashed above)" if "bf16" not in runs[name]["plan"] else ""}</text>')
        y += 16
    svg.append("</svg>")
    temporary = out_path + ".tmp"
    with open(temporary, "w") as out:
        out.write("\n".join(svg) + "\n")
    os.replace(temporary, out_path)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2:])
