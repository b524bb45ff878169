"""FP8 against BF16 over a long run, on real text no one here wrote (issue 15's convergence
check), on the GPU machine (tools/gpu_checks.sh, section `convergence`).

  convergence.py F8C TEXT_ROOT OUT PLAN...
      The text: every .py file under TEXT_ROOT (the Python standard library of the machine,
      without site-packages), in sorted order, one byte a token (f8c tokenize). Each PLAN (one per precision, the same
      model, schedule and seed) trains for the iterations its name's last part gives
      (PLAN-1000: 1000) on the GPU, evaluating every 100 iterations; the metrics go to
      OUT/<plan>.jsonl. Then, against the first plan: the mean training loss over the last 50
      iterations and the final eval loss, and their relative differences, into OUT/summary.json
      and on stdout. Exit 1 when a run fails, a loss is not finite, or a final loss is more than
      LIMIT away from the first plan's.
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


def train(f8c, plan, tokens, out):
    name = os.path.basename(plan.rstrip("/"))
    iterations = int(name.rsplit("-", 1)[1])
    metrics = os.path.join(out, name + ".jsonl")
    command = [f8c, "train", plan, "--data", tokens, "--train-iters", str(iterations),
               "--eval-interval", "100", "--eval-iters", "20", "--log-interval", "1",
               "--metrics", metrics, "--seed", "1234",
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
    f8c, root, out, *plans = sys.argv[1:]
    os.makedirs(out, exist_ok=True)
    tokens, n_files, size = make_tokens(f8c, root, out)
    summary = {"text": f"{n_files} .py files under {root}, {size} bytes", "runs": {}}
    for plan in plans:
        name, result = train(f8c, plan, tokens, out)
        summary["runs"][name] = result
    names = list(summary["runs"])
    base = summary["runs"][names[0]]
    failed = False
    for name in names:
        run = summary["runs"][name]
        for key in ("final_train_loss", "final_eval_loss"):
            value = run[key]
            difference = (value - base[key]) / base[key]
            run[key.replace("final", "relative")] = difference
            bad = not math.isfinite(value) or abs(difference) > LIMIT
            failed |= bad
            print(f"{'FAIL' if bad else 'ok'} {name} {key} {value:.5f} "
                  f"({difference:+.3%} against {names[0]})")
    os.remove(tokens)
    json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
    print(json.dumps(summary, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
