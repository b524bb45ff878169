#!/usr/bin/env python3
"""FP8 training on the CPU, end to end through `f8c train`:

(a) convergence: gpt-tiny trained 300 iterations on data/fp8-notes.txt in FP8 (HYBRID, with the
    delayed and with the current recipe) ends within 2% of the FP32 run's loss on the same data
    and seed: the final evaluation loss, and the mean training loss of the last 20 iterations;
    no amax was non-finite (the metrics' fp8_nonfinite_amax stays 0) and the FP8 runs' losses
    are not the FP32 run's (FP8 really ran);
(c) MoE: mixtral-tiny (top-2 of 4 experts) as `f8c train models/mixtral-tiny.json
    --fp8-format hybrid` runs it, with the delayed and the current recipe, its experts' grouped
    GEMMs in FP8 scaled per expert (the audit says so for each of them, and keeps the router in
    high precision), ends within 2% of the FP32 run as in (a) over 300 iterations (micro-batch
    8, lr 1e-3: at gpt-tiny's micro-batch 4 and lr 3e-3 two FP32 runs of different seeds end 8%
    apart, and so do FP8 and FP32 runs of one seed, either way); and (b) on mixtral-tiny, whose
    per-expert slots the checkpoint carries;
(b) resume: in FP8 with delayed scaling, 12 iterations in one run log the same losses as 6
    iterations saved then resumed to 12, so the scaling state (scales, amax histories,
    counters) survives a checkpoint; the checkpoint holds the three scaling tables and no
    weight caches.

Each part is a test of its own (tests/runtime/CMakeLists.txt). The convergence runs take about a
minute each; in the sanitizer build, where ASan makes them several minutes long, --sanitizer-build
makes (a) say so and exit with SKIP_STATUS, which ctest counts as skipped.

Usage: test_fp8_train.py F8C SOURCE_DIR convergence|moe|resume [--sanitizer-build]
"""
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from checks import check, finish  # noqa: E402

ITERS = 300
TOLERANCE = 0.02
# Small batches keep three 300-iteration runs to about a minute on two cores.
SIZES = ["--micro-batch-size", "4", "--global-batch-size", "4", "--seq-length", "64"]
RECIPES = ["delayed", "current"]
SKIP_STATUS = 77  # ctest's SKIP_RETURN_CODE for these tests


def f8c(binary, args, timeout=900):
    start = time.monotonic()
    run = subprocess.run([binary] + args, capture_output=True, text=True, timeout=timeout)
    run.seconds = time.monotonic() - start
    return run


def records(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def safetensors_names(path):
    """The tensor names in a safetensors file's header."""
    with open(path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        return set(json.loads(f.read(size))) - {"__metadata__"}


def train(binary, model, data, metrics, iters, extra, warmup=10, decay=None, sizes=SIZES,
          lr=3e-3):
    args = ["train", model, "--data", data, "--train-iters", str(iters), "--lr", str(lr),
            "--min-lr", str(lr / 10), "--lr-warmup-iters", str(warmup),
            "--lr-decay-iters", str(decay or iters), "--lr-decay-style", "cosine",
            "--weight-decay", "0.1", "--adam-beta2", "0.95", "--log-interval", "1",
            "--seed", "1234", "--metrics", metrics] + sizes + extra
    return f8c(binary, args)


def convergence(binary, source, work, data, model="gpt-tiny.json", sizes=SIZES, lr=3e-3,
                eval_iters=8, target=("--target", "cpu")):
    """Trains `model` in FP32 and in FP8 under each recipe and holds the FP8 runs to 2%."""
    model = os.path.join(source, "models", model)
    evaluation = ["--eval-interval", str(ITERS), "--eval-iters", str(eval_iters)]
    runs = {"fp32": []}
    for recipe in RECIPES:
        runs[recipe] = ["--fp8-format", "hybrid", "--fp8-recipe", recipe] + list(target)
    train_one = lambda name, extra: train(binary, model, data, os.path.join(work, name + ".jsonl"),
                                          ITERS, extra + evaluation, sizes=sizes, lr=lr)
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(train_one, name, extra) for name, extra in runs.items()}
        results = {name: future.result() for name, future in futures.items()}
    summary = {}
    for name, run in results.items():
        if not check(run.returncode == 0, f"{name}: f8c train succeeds ({run.seconds:.0f} s)"):
            print(run.stderr[-2000:])
            return
        lines = records(os.path.join(work, name + ".jsonl"))
        steps = [r for r in lines if "loss" in r and "step" in r and "eval_loss" not in r]
        evals = [r["eval_loss"] for r in lines if "eval_loss" in r]
        tail = [r["loss"] for r in steps[-20:]]
        summary[name] = (evals[-1] if evals else None, sum(tail) / len(tail), steps)
        print(f"{name}: eval loss {summary[name][0]}, last-20 train loss {summary[name][1]:.4f}, "
              f"{run.seconds:.0f} s")
    reference_eval, reference_tail, reference_steps = summary["fp32"]
    for recipe in RECIPES:
        evaluation_loss, tail, steps = summary[recipe]
        check(evaluation_loss is not None and
              abs(evaluation_loss - reference_eval) <= TOLERANCE * reference_eval,
              f"{recipe}: eval loss {evaluation_loss} within 2% of FP32's {reference_eval}")
        check(abs(tail - reference_tail) <= TOLERANCE * reference_tail,
              f"{recipe}: last-20 training loss {tail:.4f} within 2% of FP32's "
              f"{reference_tail:.4f}")
        check(all(r.get("fp8_nonfinite_amax", 0) == 0 for r in steps),
              f"{recipe}: every step reports fp8_nonfinite_amax 0")
        check(any(a["loss"] != b["loss"] for a, b in zip(steps, reference_steps)),
              f"{recipe}: the losses differ from FP32's (FP8 ran)")


def moe(binary, source, work, data):
    """mixtral-tiny: the experts' GEMMs planned in FP8 per expert, then part (a)'s runs."""
    model = os.path.join(source, "models", "mixtral-tiny.json")
    for recipe in RECIPES:
        run = f8c(binary, ["audit", model, "--json", "--fp8-format", "hybrid", "--fp8-recipe",
                           recipe])
        if not check(run.returncode == 0, f"moe: f8c audit --fp8-recipe {recipe}"):
            print(run.stderr[-2000:])
            return
        gemms = json.loads(run.stdout)["gemms"]
        experts = [g for g in gemms if ".experts." in g["scope"]]
        routers = [g for g in gemms if g["scope"].endswith(".router")]
        check(len(experts) == 12 and all(
            g["fp8"] and all(o["granularity"] == "per-expert" for o in g["operands"])
            for g in experts),
            f"moe, {recipe}: the 12 GEMMs of the experts (2 layers x fc1, fc2 x fwd, dgrad, "
            f"wgrad) are FP8, scaled per expert")
        check(routers and not any(g["fp8"] for g in routers),
              f"moe, {recipe}: the router's GEMMs stay in high precision")
        if recipe == "delayed":
            slots = [o["slots"] for g in experts for o in g["operands"]]
            check(all(n == 4 for n in slots),
                  "moe, delayed: each expert operand takes 4 slots, one per expert")
    convergence(binary, source, work, data, "mixtral-tiny.json",
                ["--micro-batch-size", "4", "--global-batch-size", "4", "--seq-length", "64"],
                lr=1e-3, eval_iters=16, target=())
    resume(binary, source, work, data, "mixtral-tiny.json")


def resume(binary, source, work, data, model="gpt-tiny.json"):
    model = os.path.join(source, "models", model)
    work = os.path.join(work, os.path.splitext(os.path.basename(model))[0])
    os.makedirs(work, exist_ok=True)
    fp8 = ["--fp8-format", "hybrid", "--fp8-recipe", "delayed", "--fp8-amax-history-len", "4",
           "--target", "cpu"]
    whole = train(binary, model, data, os.path.join(work, "whole.jsonl"), 12, fp8, 2, 12)
    save = os.path.join(work, "ckpt")
    first = train(binary, model, data, os.path.join(work, "first.jsonl"), 6,
                  fp8 + ["--save", save], 2, 12)
    second = train(binary, model, data, os.path.join(work, "second.jsonl"), 12,
                   fp8 + ["--load", save], 2, 12)
    for name, run in (("12 iterations", whole), ("6 and save", first), ("load and 6", second)):
        if not check(run.returncode == 0, f"resume: {name} succeeds"):
            print(run.stderr[-2000:])
            return
    losses = [r["loss"] for r in records(os.path.join(work, "whole.jsonl")) if "step" in r and "loss" in r]
    resumed = [r["loss"] for r in records(os.path.join(work, "first.jsonl")) +
               records(os.path.join(work, "second.jsonl")) if "step" in r and "loss" in r]
    check(len(losses) == 12 and losses == resumed,
          "resume: the losses of 6 + 6 iterations equal those of 12, bit for bit")
    folder = os.path.join(save, "iter_0000006")
    try:
        header = safetensors_names(os.path.join(folder, "optimizer.safetensors"))
        weight_names = safetensors_names(os.path.join(folder, "weights.safetensors"))
    except (OSError, ValueError) as error:
        check(False, f"resume: the checkpoint's safetensors headers read ({error})")
        return
    for table in ("fp8.weights", "fp8.activations", "fp8.gradients"):
        for leaf in ("scale", "amax_history", "nonfinite"):
            check(f"{table}.{leaf}" in header, f"resume: the checkpoint holds {table}.{leaf}")
    check(not any(".fp8" in name and not name.startswith("fp8.") for name in header | weight_names),
          "resume: no weight cache (<param>.fp8*) is checkpointed")


def main():
    parts = {"convergence": convergence, "moe": moe, "resume": resume}
    if len(sys.argv) < 4 or sys.argv[3] not in parts:
        print(__doc__)
        return 2
    binary, source, part = sys.argv[1:4]
    if part in ("convergence", "moe") and "--sanitizer-build" in sys.argv[4:]:
        print("SKIP: the 300-iteration convergence runs are for the normal build: ASan makes "
              "them several minutes long (runtime.fp8_train_resume runs in this build)")
        return SKIP_STATUS
    with tempfile.TemporaryDirectory() as work:
        data = os.path.join(work, "notes.bin")
        run = f8c(binary, ["tokenize", os.path.join(source, "data", "fp8-notes.txt"), "-o", data])
        if check(run.returncode == 0, "f8c tokenize data/fp8-notes.txt"):
            parts[part](binary, source, work, data)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
