"""FP8 against BF16 over a long run, on real text no one here wrote (issue 15's convergence
check), on the GPU machine (tools/gpu_checks.sh, section `convergence`).

  convergence.py F8C TEXT_ROOT OUT [--seeds N] [--first-seed S] PLAN...
      The text: every .py file under TEXT_ROOT (the Python standard library of the machine,
      without site-packages), in sorted order, one byte a token (f8c tokenize). Each PLAN (one
      per precision, the same model and schedule) trains for the iterations its name's last
      part gives (PLAN-1000: 1000) on the GPU, evaluating every 100 iterations, once per seed
      (S, S + 1, ...: N of them, default 1 from 1234), with --deterministic (cuDNN's deterministic
      engines; f8c's own kernels sum in a fixed order), so that a run is repeatable and two
      runs of one plan differ by their seed alone; the metrics go to OUT/<plan>-s<seed>.jsonl.
      Then, per plan, the mean over its seeds of the mean training loss over the last 50
      iterations and of the final eval loss, and their relative differences from the first
      plan's, into OUT/summary.json and on stdout, with the spread between seeds (how far one
      seed's run lies from the other's: the noise the limit must be read against). Exit 1 when
      a run fails, a loss is not finite, or a plan's mean final loss is more than LIMIT away
      from the first plan's.
"""
import json
import math
import os
import subprocess
import sys

LIMIT = 0.005  # the 0.5% (DeepSeek-V3 reports 0.25% for its FP8 run)
LAST = 50      # iterations the final training loss is the mean of


def make_tokens(f8c, root, out):
    files = []
    for folder, subfolders, names in os.walk(root):
        # The standard library only: not the packages installed beside it.
        subfolders[:] = [s for s in subfolders if s not in ("site-packages", "dist-packages")]
        files += [os.path.join(folder, f) for f in names if f.endswith(".py")]
    files.sort()
    text = os.path.join(out, "text.txt")
    with open(text, "wb") as sink:
        for path in files:
            with open(path, "rb") as source:
                sink.write(source.read())
    tokens = os.path.join(out, "tokens.bin")
    subprocess.run([f8c, "tokenize", text, "-o", tokens], check=True, capture_output=True)
    size = os.path.getsize(text)
    os.remove(text)
    return tokens, len(files), size


def train(f8c, plan, tokens, out, seed):
    name = os.path.basename(plan.rstrip("/"))
    iterations = int(name.rsplit("-", 1)[1])
    metrics = os.path.join(out, f"{name}-s{seed}.jsonl")
    command = [f8c, "train", plan, "--data", tokens, "--train-iters", str(iterations),
               "--eval-interval", "100", "--eval-iters", "20", "--log-interval", "1",
               "--metrics", metrics, "--seed", str(seed), "--deterministic",
               # F8C_CONVERGENCE_DEVICE=cpu: to try the script where there is no GPU.
               "--device", os.environ.get("F8C_CONVERGENCE_DEVICE", "cuda")]
    print("$", " ".join(command), flush=True)
    result = subprocess.run(command, capture_output=True, text=True)
    print(result.stderr[-1500:], flush=True)
    if result.returncode:
        raise SystemExit(f"{name}: f8c train failed ({result.returncode})")
    records = [json.loads(line) for line in open(metrics)]
    steps = [r for r in records if "loss" in r and not r.get("skipped")]
    evals = [r for r in records if "eval_loss" in r]
    losses = [r["loss"] for r in steps[-LAST:]]
    return name, {"iterations": iterations, "final_train_loss": sum(losses) / len(losses),
                  "final_eval_loss": evals[-1]["eval_loss"], "first_loss": steps[0]["loss"],
                  "skipped_iters": steps[-1].get("skipped_iters", 0),
                  "tokens_per_s_median": sorted(r["tokens_per_s"] for r in steps[10:])[
                      len(steps[10:]) // 2]}


def main():
    f8c, root, out, *rest = sys.argv[1:]
    seeds, first = 1, 1234
    while rest[:1] in (["--seeds"], ["--first-seed"]):
        if rest[0] == "--seeds":
            seeds = int(rest[1])
        else:
            first = int(rest[1])
        rest = rest[2:]
    plans = rest
    os.makedirs(out, exist_ok=True)
    tokens, n_files, size = make_tokens(f8c, root, out)
    summary = {"text": f"{n_files} .py files under {root}, {size} bytes",
               "seeds": [first + i for i in range(seeds)], "runs": {}}
    keys = ("final_train_loss", "final_eval_loss")
    for plan in plans:
        results = []
        for seed in summary["seeds"]:
            name, result = train(f8c, plan, tokens, out, seed)
            results.append(result)
        run = {"seeds": results}
        for key in keys:
            values = [r[key] for r in results]
            run[key] = sum(values) / len(values)
            run[key.replace("final", "seed_spread")] = (max(values) - min(values)) / run[key]
        summary["runs"][name] = run
    names = list(summary["runs"])
    base = summary["runs"][names[0]]
    failed = False
    for name in names:
        run = summary["runs"][name]
        for key in keys:
            value = run[key]
            difference = (value - base[key]) / base[key]
            run[key.replace("final", "relative")] = difference
            bad = not all(math.isfinite(r[key]) for r in run["seeds"]) or abs(difference) > LIMIT
            failed |= bad
            spread = run[key.replace("final", "seed_spread")]
            print(f"{'FAIL' if bad else 'ok'} {name} {key} {value:.5f} "
                  f"({difference:+.3%} against {names[0]}; its {seeds} seeds "
                  f"{spread:.3%} apart)")
    os.remove(tokens)
    json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
    print(json.dumps(summary, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
