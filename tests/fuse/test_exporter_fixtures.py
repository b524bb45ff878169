#!/usr/bin/env python3
"""The committed exporter fixtures (tests/data/onnx/*, made by torch.onnx) import, fuse to the
high-level ops of their architecture with no primitive left where a pattern looks, and verify.
Their attention masks, which the exporters build from positions (transformers' CumSum, GatherND
and Equal), are proven causal by their value at the bound sizes and replaced by the Attention's
causal flag, the mask's arithmetic gone; a sliding window, a mask read from an input, and
unbound sizes keep the mask, each with its reason in the report. Integer arithmetic of the
compiled sizes alone (OPT's positions) is folded into constants.

Usage: test_exporter_fixtures.py F8C SOURCE_DIR
"""
import collections
import os
import re
import subprocess
import sys
import tempfile

# What each fixture must fuse to: two layers each (tests/data/make_onnx_fixtures.py).
GPT = {"Embedding": 2, "LayerNorm": 5, "Linear": 9, "Gelu": 2, "Attention": 2}
LLAMA = {"Embedding": 1, "RMSNorm": 5, "Linear": 15, "SwiGLU": 2, "Rope": 4, "Attention": 2}
EXPECTED = {
    "gpt2-tiny": GPT,
    "gpt2-sdpa-tiny": GPT,
    "llama-sdpa-tiny": LLAMA,
    "llama-bf16-tiny": LLAMA,
    "minigpt-tiny": GPT,
    "llama-tiny": LLAMA,
    "mistral-tiny": LLAMA,
    "qwen2-tiny": LLAMA,
}
# Primitives that mean a pattern was missed when they survive on float tensors.
PATTERN_PRIMITIVES = {"MatMul", "Gemm", "Softmax", "Erf", "Tanh", "Sigmoid", "Pow", "ReduceMean",
                      "LayerNormalization", "Neg"}


def main():
    f8c, source = sys.argv[1], sys.argv[2]
    failures = 0
    found = sorted(os.listdir(os.path.join(source, "tests", "data", "onnx")))
    if found != sorted(EXPECTED):
        print(f"FAIL the fixtures are {found}, the test expects {sorted(EXPECTED)}")
        failures += 1
    for name, expected in sorted(EXPECTED.items()):
        model = os.path.join(source, "tests", "data", "onnx", name, "model.onnx")
        run = subprocess.run([f8c, "dump-ir", model, "--after", "fuse-patterns", "--verify",
                              "--report"], capture_output=True, text=True)
        problems = []
        if run.returncode != 0:
            problems.append(f"exit {run.returncode}: {run.stderr.strip()}")
        ops = collections.Counter()
        leftovers = []
        for line in run.stdout.splitlines():
            m = re.match(r"\s+%.*?: (\w+)\[.*?\] = (\w+)\(", line)
            if not m:
                continue
            dtype, op = m.groups()
            ops[op] += 1
            if op in PATTERN_PRIMITIVES and dtype in ("f32", "bf16", "f16"):
                leftovers.append(line.strip()[:120])
        for op, count in expected.items():
            if ops[op] != count:
                problems.append(f"{op}: {ops[op]}, expected {count}")
        if leftovers:
            problems.append("primitives left: " + "; ".join(leftovers))
        if "0 primitive nodes left where patterns look" not in run.stderr:
            problems.append("the report does not say every pattern site fused:\n" + run.stderr)
        status = "ok" if not problems else "FAIL"
        print(f"{status} {name}: " + ", ".join(f"{op} {ops[op]}" for op in expected))
        for problem in problems:
            print(f"  {problem}")
        failures += bool(problems)
    return failures


MASK_OPS = {"Equal", "CumSum", "GatherND", "Where", "Trilu", "LessOrEqual", "And"}


def dump(f8c, model, *args):
    run = subprocess.run([f8c, "dump-ir", model, "--after", "fuse-patterns", "--verify", "--report"]
                         + list(args), capture_output=True, text=True)
    attentions = [line for line in run.stdout.splitlines() if "= Attention(" in line]
    ops = {m.group(1) for m in re.finditer(r"= (\w+)\(", run.stdout)}
    verdicts = [line.strip() for line in run.stderr.splitlines() if "attention mask %" in line]
    return run, attentions, ops, verdicts


def check_masks(f8c, source):
    failures = 0

    def expect(ok, what, detail=""):
        nonlocal failures
        print(f"{'ok' if ok else 'FAIL'} {what}")
        if not ok:
            print(f"  {detail}"[:3000])
            failures += 1

    data = os.path.join(source, "tests", "data")
    for name in sorted(EXPECTED):
        model = os.path.join(data, "onnx", name, "model.onnx")
        run, attentions, ops, verdicts = dump(f8c, model, "--dim", "batch=2", "--dim", "seq=8")
        expect(run.returncode == 0 and attentions and
               all("causal=1" in a and a.count("%") == 4 for a in attentions) and
               verdicts and all("is causal, evaluated at its sizes" in v for v in verdicts) and
               not ops & MASK_OPS,
               f"{name}: the mask is proven causal at batch 2, seq 8 and its arithmetic is gone",
               "\n".join(attentions + verdicts + sorted(ops & MASK_OPS)) + run.stderr[-800:])
    # Unbound sizes: nothing to evaluate; the mask stays.
    run, attentions, ops, verdicts = dump(f8c, os.path.join(data, "onnx", "llama-tiny", "model.onnx"))
    expect(run.returncode == 0 and all("causal=0" in a for a in attentions) and
           any("is not bound" in v for v in verdicts),
           "llama-tiny with unbound sizes keeps its mask, saying why", "\n".join(verdicts))
    # Mistral's sliding window of 8: causal at 8 tokens, a window at 32.
    sliding = os.path.join(data, "onnx-families", "mistral-sliding-tiny", "model.onnx")
    run, attentions, ops, verdicts = dump(f8c, sliding, "--dim", "batch=2", "--dim", "seq=32")
    expect(run.returncode == 0 and all("causal=0" in a and a.count("%") == 5 for a in attentions)
           and any("a causal sliding window of 8 tokens" in v for v in verdicts),
           "mistral-sliding-tiny at seq 32 keeps its window's mask, naming the window",
           "\n".join(attentions + verdicts))
    run, attentions, ops, verdicts = dump(f8c, sliding, "--dim", "batch=2", "--dim", "seq=8")
    expect(run.returncode == 0 and all("causal=1" in a for a in attentions),
           "mistral-sliding-tiny at seq 8 (within its window) is causal", "\n".join(verdicts))
    # OPT's learned positions come from a CumSum: integer arithmetic of the compiled sizes only,
    # folded into a constant (no kernel runs it); with unbound sizes it stays.
    opt = os.path.join(data, "onnx-families", "opt-tiny", "model.onnx")
    run, attentions, ops, verdicts = dump(f8c, opt, "--dim", "batch=2", "--dim", "seq=8")
    expect(run.returncode == 0 and "CumSum" not in ops and
           "is folded into a constant: it depends only on the compiled sizes" in run.stderr,
           "opt-tiny's positions are folded into a constant at bound sizes", run.stderr[-800:])
    run, attentions, ops, verdicts = dump(f8c, opt)
    expect(run.returncode == 0 and "CumSum" in ops and "folded" not in run.stderr,
           "opt-tiny's positions stay computed with unbound sizes", run.stderr[-800:])
    # GPT-J's sinusoidal position table, exported as a weight no one marked a buffer: a buffer.
    gptj = os.path.join(data, "onnx-families", "gptj-tiny", "model.onnx")
    run = subprocess.run([f8c, "dump-ir", gptj], capture_output=True, text=True)
    expect(run.returncode == 0 and "buffer %repeat : f32[1, 64, 8]" in run.stdout and
           run.stdout.count("  buffer %") == 1,
           "gpt-j's sinusoidal table reads as a buffer, and nothing else does",
           "\n".join(line for line in run.stdout.splitlines() if "buffer %" in line))
    # A mask computed from the attention_mask input: kept for inference; in a training step,
    # which f8c train feeds with ones, proven causal with that said.
    masked = os.path.join(data, "onnx-families", "llama-mask-tiny", "model.onnx")
    run, attentions, ops, verdicts = dump(f8c, masked, "--dim", "batch=2", "--dim", "seq=8")
    expect(run.returncode == 0 and all("causal=0" in a for a in attentions) and
           any("reads the input %attention_mask" in v for v in verdicts),
           "llama-mask-tiny's inference graph keeps the mask it reads from attention_mask",
           "\n".join(verdicts))
    with tempfile.TemporaryDirectory() as work:
        plan = os.path.join(work, "plan")
        run = subprocess.run([f8c, "compile", masked, "-o", plan, "--micro-batch-size", "2",
                              "--seq-length", "8"], capture_output=True, text=True)
        text = open(os.path.join(plan, "plan.json")).read() if run.returncode == 0 else ""
        expect(run.returncode == 0 and "input %attention_mask" in text and
               not any(f"= {op}(" in text for op in ("Equal", "CumSum", "GatherND", "LessOrEqual", "And")),
               "llama-mask-tiny's training step (attention_mask all ones) has no mask arithmetic",
               run.stderr[-800:])
    return failures


if __name__ == "__main__":
    sys.exit(1 if main() + check_masks(sys.argv[1], sys.argv[2]) else 0)
