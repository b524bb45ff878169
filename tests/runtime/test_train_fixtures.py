#!/usr/bin/env python3
"""FP8 training of the committed exporter fixtures (tests/data/onnx/*): their training graphs
build and their FP8 GEMMs compute what the high-precision ones do.

An export stores a Linear's weight (K, N) (ONNX MatMul, GPT-2's Conv1D), so its forward GEMM
reads w transposed and its weight gradient is x^T dy; the JSON models store (N, K). For every
fixture:
(a) `f8c audit` plans the training step in FP8 (hybrid, delayed): it exits 0, keeps the output
    head in high precision by default (found through the Cast a bf16 export puts after it),
    and lists FP8 fwd, dgrad and wgrad GEMMs;
(b) one training iteration on byte tokens of data/fp8-notes.txt with every Linear in FP8
    (--fp8-head), with the current and with the block recipe, logs a loss within 1% and a
    global gradient norm within 5% of the same iteration without FP8: every weight's gradient
    is an FP8 GEMM of the right operands with the right scales (block scales, unlike a
    per-tensor pair, are not symmetric in the two operands).

With `families`, the same for tests/data/onnx-families/*, but for the families in GAPS, where
the test asserts the error that stops them (and fails when one trains: take it off the list);
and llama-mask-tiny, one Llama's weights exported with attention_mask and position_ids inputs,
starts from the loss of the same weights exported without them (llama-opset17-tiny): f8c train
fills them as Megatron-LM feeds a pretraining batch.

Usage: test_train_fixtures.py F8C SOURCE_DIR [families]
"""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from checks import check, finish  # noqa: E402

# The reference kernels: what is checked here is the graph (the GEMMs' operands and scales),
# and the generated kernels' JIT would take ten times the run (runtime.train_fp8 holds them to
# the reference).
SIZES = ["--micro-batch-size", "4", "--global-batch-size", "4", "--seq-length", "32",
         "--kernels", "reference"]
RUNS = {"high precision": [],
        "FP8 current": ["--fp8-format", "hybrid", "--fp8-recipe", "current", "--fp8-head"],
        "FP8 block": ["--fp8-format", "hybrid", "--fp8-recipe", "block", "--fp8-head"]}
# family -> what stops its training graph (issue 19)
GAPS = {}
LOSS_TOLERANCE = 0.01
NORM_TOLERANCE = 0.05


def run(command):
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def check_audit(f8c, model, name):
    audit = run([f8c, "audit", model, "--micro-batch-size", "2", "--seq-length", "16",
                 "--fp8-format", "hybrid"])
    if name in GAPS:
        ok = check(audit.returncode != 0 and GAPS[name] in audit.stderr, f"{name}: the known gap",
                   f"GAPS says: {GAPS[name]}; f8c audit exited {audit.returncode}: "
                   f"{audit.stderr[-400:]} (trains now? take it off GAPS)")
        print(f"{'ok  ' if ok else 'FAIL'} {name}: refused, as GAPS says: {GAPS[name]}")
        return False
    if not check(audit.returncode == 0, f"{name}: f8c audit exited {audit.returncode}",
                 audit.stdout + audit.stderr):
        return False
    rows = [line for line in audit.stdout.splitlines() if re.match(r"\s+\d+\s", line)]
    heads = [row for row in rows if "output head stays in high precision" in row]
    check(len(heads) == 3, f"{name}: the head's fwd, dgrad and wgrad stay high precision",
          "\n".join(rows))
    for kind in ("fwd", "dgrad", "wgrad"):
        check(any(re.search(rf"\s{kind}\s.*E4M3", row) for row in rows),
              f"{name}: an FP8 {kind} GEMM", "\n".join(rows))
    return True


def first_iteration(f8c, model, tokens, flags):
    """(loss, grad norm) of iteration 1, or the run's output when it failed."""
    train = run([f8c, "train", model, "--data", tokens, *SIZES, "--train-iters", "1",
                 "--lr", "3e-3", "--log-interval", "1", "--seed", "7", *flags])
    found = re.search(r"iteration 1/1: loss ([0-9.]+), lr [^,]+, grad norm ([0-9.]+)",
                      train.stdout + train.stderr)
    if train.returncode != 0 or not found:
        return None, train.stdout + train.stderr
    return (float(found.group(1)), float(found.group(2))), ""


def check_training(f8c, model, tokens, name):
    results = {}
    for label, flags in RUNS.items():
        results[label], output = first_iteration(f8c, model, tokens, flags)
        if not check(results[label] is not None, f"{name}: {label} trains", output):
            return None
    loss, norm = results["high precision"]
    for label in ("FP8 current", "FP8 block"):
        fp8_loss, fp8_norm = results[label]
        loss_error, norm_error = abs(fp8_loss - loss) / loss, abs(fp8_norm - norm) / norm
        ok = check(loss_error <= LOSS_TOLERANCE and norm_error <= NORM_TOLERANCE,
                   f"{name}: {label} against high precision",
                   f"loss {fp8_loss} vs {loss}, grad norm {fp8_norm} vs {norm}")
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {label}: loss {fp8_loss:.4f} vs {loss:.4f} "
              f"({loss_error:.2%}), grad norm {fp8_norm:.4f} vs {norm:.4f} ({norm_error:.2%})")
    return results["high precision"]


def main():
    f8c, source = sys.argv[1], sys.argv[2]
    families = len(sys.argv) > 3 and sys.argv[3] == "families"
    root = os.path.join(source, "tests", "data", "onnx-families" if families else "onnx")
    fixtures = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    check(len(fixtures) >= (18 if families else 8), "fixtures", f"only {fixtures}")
    first = {}  # name -> (loss, grad norm) of the high-precision iteration
    with tempfile.TemporaryDirectory() as work:
        tokens = os.path.join(work, "tokens.bin")
        made = run([f8c, "tokenize", os.path.join(source, "data", "fp8-notes.txt"), "-o", tokens])
        if not check(made.returncode == 0, "tokenize", made.stdout + made.stderr):
            return finish()
        for name in fixtures:
            model = os.path.join(root, name, "model.onnx")
            if check_audit(f8c, model, name):
                first[name] = check_training(f8c, model, tokens, name)
    if families:  # one Llama's weights, exported with and without the mask and position inputs
        plain, masked = first.get("llama-opset17-tiny"), first.get("llama-mask-tiny")
        check(plain and masked and abs(plain[0] - masked[0]) <= 1e-4 * plain[0],
              "llama-mask-tiny: f8c train fills attention_mask with ones and position_ids "
              "with 0..seq-1", f"its first loss {masked} against llama-opset17-tiny's {plain}")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
