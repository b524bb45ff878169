"""f8c report in a real browser: the main job's run (gpt-tiny on the field notes, shortened) and
an FP8 run against it, their checkpoint and the model's audit, drawn into one HTML file that
headless Chromium loads with no console error and no request but the page's own; every chart's
series and points counted from the DOM against what the inputs hold (read here, independently);
the screenshot not blank; a GPU run's profile (committed, from an H200) draws the time. Also:
a report of a plan folder, malformed metrics lines reported
with file:line and skipped, and the errors (a missing input, no -o, an unwritable output).

usage: test_report.py F8C REPO_ROOT [--png OUT.png] [--synthetic]
  --png        keeps the screenshot (the README's)
  --synthetic  the sanitizer build's check: no training and no browser; f8c report reads
               metrics written here (non-finite amaxes, a skipped iteration, malformed lines)
               and the model's audit, and the page's cells are counted in its text
"""
import json
import math
import re
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import check, finish  # noqa: E402
import browser  # noqa: E402

F8C, ROOT = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
KEEP_PNG = sys.argv[sys.argv.index("--png") + 1] if "--png" in sys.argv else None
MODEL = os.path.join(ROOT, "models", "gpt-tiny.json")
CONFIG = os.path.join(ROOT, "models", "training", "gpt-tiny.json")
ITERS = 16
# A step-time breakdown measured on an H200 (f8c train --device cuda --profile, 2026-12-04):
# the CPU runs here record none.
PROFILE = os.path.join(ROOT, "tools", "gpu_results", "2026-12-04", "profile-gpt-tiny-fp8.json")
# A history longer than the run (TransformerEngine's, not f8c's default of Megatron-LM's 1), so
# that the checkpoint's amax history holds every iteration for its chart.
FP8 = ["--fp8-format", "hybrid", "--fp8-recipe", "delayed", "--fp8-amax-history-len", "1024",
       "--fp8-amax-compute-algo", "max"]


def run(args, timeout=600):
    return subprocess.run([F8C] + args, capture_output=True, text=True, timeout=timeout)


def records(path):
    """The metrics file's lines that are JSON objects with a step, as the report reads them."""
    out = []
    for line in open(path):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if isinstance(r, dict) and isinstance(r.get("step"), int):
            out.append(r)
    return out


def points(recs, key):
    """(step, value) of the records with a finite number at key, skipped iterations left out."""
    return [(r["step"], r[key]) for r in recs
            if isinstance(r.get(key), (int, float)) and math.isfinite(r[key]) and not r.get("skipped")]


# The DOM, as the test reads it: each chart's series with their declared and drawn points,
# heat maps' sizes and cells, the precision map's cells.
DOM = """(() => {
  const charts = {};
  for (const svg of document.querySelectorAll('svg.chart')) {
    const series = [...svg.querySelectorAll('g.series')].map(g => ({
      name: g.dataset.series, declared: +g.dataset.points,
      markers: g.querySelectorAll('.pt').length,
      line: (g.querySelector('polyline')?.getAttribute('points') || '').trim().split(/\\s+/)
              .filter(s => s).length}));
    charts[svg.dataset.chart] = {series, rows: +(svg.dataset.rows || 0),
      cols: +(svg.dataset.cols || 0), cells: svg.querySelectorAll('rect.cell').length,
      gemm_cells: svg.querySelectorAll('rect.cell.gemm').length,
      fp8_cells: svg.querySelectorAll('rect.cell.gemm[data-fp8=true]').length,
      table: svg.dataset.table || null, source: svg.dataset.source || null,
      marks: svg.querySelectorAll('.mark').length,
      width: svg.getBoundingClientRect().width, height: svg.getBoundingClientRect().height};
  }
  const tables = [...document.querySelectorAll('table.data')].map(t => t.dataset.chart);
  return {charts, tables, title: document.title,
          sections: [...document.querySelectorAll('section h2')].map(h => h.textContent)};
})()"""


def render(html, png=None):
    result = browser.render(html, png_path=png, width=1280, scripts={"dom": DOM}, timeout=120)
    page = "file://" + os.path.abspath(html)
    check(not result["errors"], f"{html}: the page loads with no console error",
          json.dumps(result["errors"], indent=1))
    others = [u for u in result["requests"] if u.split("#")[0] != page]
    check(not others and not result["failed"], f"{html}: nothing is requested but the page",
          json.dumps({"requests": result["requests"], "failed": result["failed"]}, indent=1))
    return result["eval"]["dom"]


def check_series(dom, chart, expected, what):
    """expected: {series name: number of points}; every series drawn with that many markers and
    line vertices, no other series."""
    got = dom["charts"].get(chart)
    if not check(got is not None, f"{what}: chart {chart} is drawn", sorted(dom["charts"])):
        return
    names = {s["name"]: s for s in got["series"]}
    check(set(names) == set(expected), f"{what}: chart {chart} has the series {sorted(expected)}",
          sorted(names))
    for name, n in expected.items():
        s = names.get(name)
        if s:
            check(s["declared"] == n and s["markers"] == n and s["line"] in (0, n),
                  f"{what}: {chart} series {name!r} has {n} points", s)
    check(chart in dom["tables"], f"{what}: chart {chart} has its data table", dom["tables"])


def synthetic():
    """f8c report on metrics written here, under the sanitizers: every kind of line it reads."""
    work = tempfile.mkdtemp(prefix="f8c-report-")
    labels = {"fp8.weights": ["w of a", "w of b"], "fp8.gradients": ["dy of a", "dy of b"]}
    formats = {"fp8.weights": ["E4M3", "E4M3"], "fp8.gradients": ["E5M2", "E5M2"]}
    runs = []
    for name, shift in (("base", 0.0), ("fp8", 0.01)):
        path = os.path.join(work, name + ".jsonl")
        with open(path, "w") as f:
            f.write(json.dumps({"step": 0, "fp8_slots": labels, "fp8_formats": formats}) + "\n")
            for step in range(1, 11):
                rec = {"step": step, "loss": 5.0 / step + shift, "lr": 1e-3, "grad_norm": 1.0,
                       "tokens_per_s": 100.0, "skipped_iters": 0, "elapsed_s": step}
                if step == 6:
                    rec = {"step": 6, "skipped": True, "skipped_for": "loss", "loss": None,
                           "grad_norm": None, "skipped_iters": 1, "elapsed_s": 6}
                f.write(json.dumps(rec) + "\n")
                amax = [0.1 * step, None if step == 4 else 400.0 * step]
                f.write(json.dumps({"step": step, "fp8_stats": {
                    t: {"amax": amax, "scale": [448.0 / (0.1 * step), 1.0]} for t in labels}}) + "\n")
            f.write("{\"step\": 11, \"fp8_stats\": {\"fp8.weights\": {\"amax\": [1]}}}\n")
            f.write("{\"step\": 12, \"lo")
        runs.append(path)
    html = os.path.join(work, "r.html")
    r = run(["report"] + runs + [PROFILE, MODEL] + FP8 + ["--seq-length", "32", "-o", html])
    check(r.returncode == 0, "f8c report of written metrics and the model", r.stderr)
    check(r.stderr.count(":23: cut off") == 2 and "do not have one value per slot" in r.stderr,
          "the cut-off line and the short stats line are reported", r.stderr)
    text = open(html).read() if os.path.exists(html) else ""
    check(text.count('class="cell"') == 2 * 2 * 2 * 2 * 10, "the heat maps have a cell per slot "
          "and step (2 runs x 2 tables x amax and scale)", text.count('class="cell"'))
    check(text.count('class="mark nonfinite"') == 2 * 2, "the non-finite amaxes are marked",
          text.count('class="mark nonfinite"'))
    check('class="mark saturated"' in text, "the growing amaxes are marked saturated")
    check('data-chart="time"' in text and "gemm fp8" in text, "the profile's time is drawn")
    r = run(["report", os.path.join(work, "none.jsonl"), "-o", html])
    check(r.returncode != 0 and "none.jsonl" in r.stderr, "a missing input is named", r.stderr)
    hostile(work)
    return finish()


def hostile(work):
    """Inputs that broke an earlier f8c report: each now drawn or refused, promptly."""
    html = os.path.join(work, "h.html")
    # A learning rate that moves by one ulp (the axis once looped forever); a resumed run that
    # logs iterations 3 and 4 again (the later records replace the earlier); scales recorded
    # from the third step on; a table's non-finite count that grows.
    path = os.path.join(work, "odd.jsonl")
    slots = {"fp8.weights": ["w of a", "w of b"]}
    with open(path, "w") as f:
        f.write(json.dumps({"step": 0, "fp8_slots": slots}) + "\n")
        for step in (1, 2, 3, 4, 3, 4, 5):
            f.write(json.dumps({"step": step, "loss": 2.0 + step / 10, "lr": 0.0003 if step % 2
                                else 0.00030000000000000003, "grad_norm": 1.0}) + "\n")
            stats = {"amax": [0.5, 0.25], "nonfinite": 0 if step < 4 else 2}
            if step >= 3:
                stats["scale"] = [800.0, 1600.0]
            f.write(json.dumps({"step": step, "fp8_stats": {"fp8.weights": stats}}) + "\n")
    r = run(["report", path, "-o", html], timeout=60)
    text = open(html).read() if r.returncode == 0 else ""
    loss = re.search(r'data-series="odd loss" data-points="(\d+)"', text)
    check(r.returncode == 0 and loss and loss.group(1) == "5", "a resumed run's repeated "
          "iterations replace the earlier ones (5 points), and an lr an ulp apart draws",
          (r.stderr, loss and loss.group(1)))
    check(text.count('class="mark skipped"') == 1, "the step whose non-finite count grew is "
          "marked above its column", text.count('class="mark skipped"'))
    scale_table = re.search(r'data-chart="scale-0"><tr>.*?</tr><tr><td>w of a</td>(.*?)</tr>', text)
    check(scale_table and scale_table.group(1).startswith("<td>NaN</td><td>NaN</td><td>800"),
          "scales first recorded at the third step leave the steps before empty",
          scale_table and scale_table.group(1)[:80])
    # An audit document whose strings carry markup: escaped.
    audit = {"model": "<b>m</b>", "fp8_format": "hybrid", "fp8_recipe": "delayed",
             "summary": {"gemms": 1, "fp8_gemms": 0, "fp8_flop_share": 0},
             "gemms": [{"scope": "<i>s</i>", "gemm": "</title><img src=x onerror=alert(1)>",
                        "m": 1, "n": 1, "k": 1, "fp8": False, "reason": "<script>x</script>"}]}
    audit_path = os.path.join(work, "audit.json")
    with open(audit_path, "w") as f:
        json.dump(audit, f)
    r = run(["report", audit_path, "-o", html], timeout=60)
    text = open(html).read() if r.returncode == 0 else ""
    check(r.returncode == 0 and "<img" not in text and "<script" not in text and
          "&lt;img src=x" in text, "an audit's strings are escaped", r.stderr)
    # A checkpoint whose amax history has no slots, at a huge iteration: refused at once.
    ckpt = os.path.join(work, "ckpt")
    os.makedirs(os.path.join(ckpt, "iter_100000000"), exist_ok=True)
    with open(os.path.join(ckpt, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("100000000\n")
    header = json.dumps({"fp8.weights.amax_history": {"dtype": "F32", "shape": [1000000, 0],
                                                      "data_offsets": [0, 0]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(os.path.join(ckpt, "iter_100000000", "optimizer.safetensors"), "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header)
    r = run(["report", ckpt, "-o", html], timeout=60)
    check(r.returncode != 0 and "not an amax history" in r.stderr,
          "a history of no slots is refused", r.stderr)


def main():
    if "--synthetic" in sys.argv:
        return synthetic()
    if not os.path.exists(browser.CHROMIUM):
        print(f"SKIP: f8c report's browser test needs Chromium at {browser.CHROMIUM} "
              "(tools/install-deps.sh installs Debian's chromium)")
        return 77
    work = tempfile.mkdtemp(prefix="f8c-report-")
    tokens = os.path.join(work, "notes.bin")
    r = run(["tokenize", os.path.join(ROOT, "data", "fp8-notes.txt"), "-o", tokens])
    check(r.returncode == 0, "tokenize the field notes", r.stderr)

    # The main job's run, shortened, and an FP8 run against it (scaling stats every iteration,
    # a checkpoint at the end): the two at once, one per core.
    common = ["train", MODEL, "--data", tokens, "--config", CONFIG, "--train-iters", str(ITERS),
              "--log-interval", "2", "--eval-interval", "8"]
    bf16_metrics, fp8_metrics = os.path.join(work, "bf16.jsonl"), os.path.join(work, "fp8.jsonl")
    ckpt = os.path.join(work, "ckpt")
    a = subprocess.Popen([F8C] + common + ["--metrics", bf16_metrics], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    b = run(common + FP8 + ["--metrics", fp8_metrics, "--log-fp8-stats", "1", "--save", ckpt])
    a_out, a_err = a.communicate(timeout=600)
    check(a.returncode == 0 and b.returncode == 0, "both runs train", a_err + b.stderr)

    # --log-fp8-stats: a line naming each table's slots, then one per iteration.
    fp8_recs = records(fp8_metrics)
    named = [r for r in fp8_recs if "fp8_slots" in r]
    stats = [r for r in fp8_recs if "fp8_stats" in r]
    check(len(named) == 1 and len(stats) == ITERS, "--log-fp8-stats 1 names the slots once and "
          f"records {ITERS} iterations", f"{len(named)} naming lines, {len(stats)} stats lines")
    slots = named[0]["fp8_slots"] if named else {}
    check(sorted(slots) == ["fp8.activations", "fp8.gradients", "fp8.weights"] and
          all(len(v) == 16 for v in slots.values()), "three tables of 16 slots (4 layers x 4 "
          "Linears)", slots)
    check(any(label == "w of layers.0.attn.qkv" for label in slots.get("fp8.weights", [])),
          "a weight slot is named after its layer", slots.get("fp8.weights"))
    check(all(len(s["fp8_stats"][t]["amax"]) == 16 and len(s["fp8_stats"][t]["scale"]) == 16
              for s in stats for t in slots), "every stats line has an amax and a scale per slot")
    check(all(a > 0 for s in stats for a in s["fp8_stats"]["fp8.weights"]["amax"]),
          "the weights' amaxes are recorded (nonzero)")

    # Malformed lines in a copy of the baseline: reported with file:line, skipped.
    bad = os.path.join(work, "bf16-bad.jsonl")
    lines = open(bf16_metrics).read().splitlines(keepends=True)
    with open(bad, "w") as f:
        f.writelines(lines[:2] + ["{\"step\": 3, \"loss\": \n", "[1, 2]\n"] + lines[2:] +
                     ["{\"step\": 99, \"lo"])
    n = len(lines)
    audit = run(["audit", MODEL, "--json", "--memory", "--all-ops"] + FP8 +
                ["--micro-batch-size", "8", "--seq-length", "128"])
    check(audit.returncode == 0, "f8c audit of the model", audit.stderr)
    audit_doc = json.loads(audit.stdout) if audit.returncode == 0 else {"gemms": [], "summary": {},
                                                                         "memory": {"bytes": {}}}
    html = os.path.join(work, "report.html")
    r = run(["report", bad, fp8_metrics, ckpt, PROFILE, MODEL] + FP8 +
            ["--micro-batch-size", "8", "--seq-length", "128", "-o", html, "--title", "gpt-tiny"])
    check(r.returncode == 0 and os.path.exists(html), "f8c report of two runs, a checkpoint and "
          "the model", r.stderr)
    for line_no, why in ((3, "bf16-bad.jsonl:3:"), (4, "bf16-bad.jsonl:4:"),
                         (n + 3, f"bf16-bad.jsonl:{n + 3}: cut off")):
        check(why in r.stderr, f"the malformed line {line_no} is reported with file:line", r.stderr)
    if r.returncode != 0:
        return finish()

    png = KEEP_PNG or os.path.join(work, "report.png")
    dom = render(html, png)
    blank, detail = browser.png_is_blank(png)
    check(not blank, "the screenshot is not blank", detail)
    check(browser.png_size(png)[0] == 1280, "the screenshot is the page's width",
          browser.png_size(png))
    check(dom["sections"] == ["Training", "Precision map", "Scaling state", "Memory", "Time"],
          "the page has its five sections", dom["sections"])

    # Training: each run's loss and eval loss; FP8's relative difference to the baseline.
    base, other = records(bad), fp8_recs
    base_loss, fp8_loss = points(base, "loss"), points(other, "loss")
    common_steps = set(s for s, _ in base_loss) & set(s for s, _ in fp8_loss)
    check_series(dom, "loss", {"bf16-bad loss": len(base_loss), "fp8 loss": len(fp8_loss),
                               "bf16-bad eval loss": len(points(base, "eval_loss")),
                               "fp8 eval loss": len(points(other, "eval_loss")),
                               "fp8 vs bf16-bad, train loss": len(common_steps)}, "loss")
    check(len(base_loss) == ITERS // 2 and len(common_steps) == ITERS // 2,
          "the charts hold every logged iteration", (len(base_loss), len(common_steps)))
    for key in ("lr", "grad_norm"):
        check_series(dom, key, {"bf16-bad": len(points(base, key)),
                                "fp8": len(points(other, key))}, key)

    # The precision map: a cell per GEMM, the FP8 ones marked.
    prec = dom["charts"].get("precision", {})
    check(prec.get("gemm_cells") == len(audit_doc["gemms"]) and
          prec.get("fp8_cells") == audit_doc["summary"].get("fp8_gemms"),
          "the precision map has a cell per GEMM, the FP8 ones marked",
          (prec.get("gemm_cells"), prec.get("fp8_cells"), len(audit_doc["gemms"]),
           audit_doc["summary"].get("fp8_gemms")))

    # The scaling state: from the run, amax and scale per table, slots x iterations; from the
    # checkpoint, its amax history (ITERS iterations, fewer than the history's length).
    heat = {k: v for k, v in dom["charts"].items() if v["rows"]}
    from_run = [v for v in heat.values() if v["source"] == "fp8"]
    from_ckpt = [v for v in heat.values() if v["source"] and v["source"].startswith(ckpt)]
    check(len(from_run) == 6 and all(v["rows"] == 16 and v["cols"] == ITERS and
                                     v["cells"] == 16 * ITERS for v in from_run),
          "the run's scaling state: amax and scale of 3 tables, 16 slots x every iteration",
          from_run)
    check(len(from_ckpt) == 3 and all(v["rows"] == 16 and v["cols"] == ITERS and
                                      v["cells"] == 16 * ITERS for v in from_ckpt),
          "the checkpoint's amax histories: 3 tables, 16 slots x the iterations run", from_ckpt)
    check(sorted(v["table"] for v in from_ckpt) == sorted(slots),
          "the checkpoint's tables are the run's", [v["table"] for v in from_ckpt])

    # Time: a bar per category of the profile, and idle.
    profile = json.load(open(PROFILE))
    check_series(dom, "time", {"ms per step": len(profile["categories"]) + 1}, "time")

    # Memory: a bar per part of the audit.
    check_series(dom, "memory", {"bytes": len(audit_doc["memory"]["bytes"])}, "memory")
    with open(html) as f:
        text = f.read()
    check("<script" not in text.lower() and "http://" not in text and "https://" not in text,
          "the page has no script and no external address")
    check("w of layers.0.attn.qkv" in text, "the checkpoint's slots are named from the audit")

    # A plan folder: its precision map and memory; and a calibration beside it.
    plan = os.path.join(work, "plan")
    r = run(["compile", MODEL, "-o", plan, "--micro-batch-size", "4", "--seq-length", "64"] + FP8)
    check(r.returncode == 0, "compile a plan", r.stderr)
    stats_file = os.path.join(work, "stats.json")
    r = run(["calibrate", MODEL, "--data", tokens, "--steps", "3", "-o", stats_file,
             "--micro-batch-size", "2", "--seq-length", "64"])
    check(r.returncode == 0, "calibrate three steps", r.stderr)
    plan_html = os.path.join(work, "plan.html")
    r = run(["report", plan, stats_file, "-o", plan_html])
    check(r.returncode == 0, "f8c report of a plan and a calibration", r.stderr)
    if r.returncode == 0:
        dom = render(plan_html)
        plan_audit = json.loads(run(["audit", plan, "--json"]).stdout)
        check(dom["charts"].get("precision", {}).get("gemm_cells") == len(plan_audit["gemms"]),
              "the plan's precision map has a cell per GEMM",
              (dom["charts"].get("precision"), len(plan_audit["gemms"])))
        cal = json.load(open(stats_file))
        check_series(dom, "calibration", {role: sum(t["role"] == role for t in cal["tensors"])
                                          for role in ("x", "w", "dy")}, "calibration")
        check("loss" not in dom["charts"] and "No metrics file was given" in open(plan_html).read(),
              "without runs the training section says what to give")

    # Errors: each a message naming what and a non-zero exit, nothing written.
    missing = os.path.join(work, "nope.jsonl")
    out = os.path.join(work, "x.html")
    r = run(["report", missing, "-o", out])
    check(r.returncode != 0 and missing in r.stderr and not os.path.exists(out),
          "a missing metrics file is named", r.stderr)
    r = run(["report", fp8_metrics])
    check(r.returncode == 2 and "-o" in r.stderr, "no output is refused with the hint", r.stderr)
    r = run(["report", "-o", out])
    check(r.returncode == 2 and "nothing to report" in r.stderr, "no input is refused", r.stderr)
    junk = os.path.join(work, "junk.jsonl")
    with open(junk, "w") as f:
        f.write("not json\n")
    r = run(["report", junk, "-o", out])
    check(r.returncode != 0 and "junk.jsonl:1:" in r.stderr and "no line to draw" in r.stderr
          and not os.path.exists(out), "a metrics file with nothing to draw is refused", r.stderr)
    r = run(["report", fp8_metrics, "-o", os.path.join(work, "no-such-dir", "r.html")])
    check(r.returncode != 0 and "no-such-dir" in r.stderr, "an unwritable output is named",
          r.stderr)
    r = run(["report", fp8_metrics, "--bogus", "-o", out])
    check(r.returncode == 2 and "--bogus" in r.stderr, "an unknown option is refused", r.stderr)
    r = run(["train", MODEL, "--data", tokens, "--config", CONFIG, "--train-iters", "1",
             "--lr-warmup-iters", "0", "--fp8-format", "hybrid", "--fp8-recipe", "current", "--metrics",
             os.path.join(work, "c.jsonl"), "--log-fp8-stats", "1"])
    check(r.returncode == 2 and "--log-fp8-stats" in r.stderr and "delayed" in r.stderr,
          "--log-fp8-stats without a scaling table says what it needs", r.stderr)
    r = run(["train", MODEL, "--data", tokens, "--config", CONFIG, "--train-iters", "1",
             "--lr-warmup-iters", "0", "--log-fp8-stats", "1"] + FP8)
    check(r.returncode == 2 and "--metrics" in r.stderr, "--log-fp8-stats needs --metrics",
          r.stderr)
    check(all("nonfinite" in s["fp8_stats"][t] for s in stats for t in slots),
          "every stats line has each table's non-finite count")
    hostile(work)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
