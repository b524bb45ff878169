#!/usr/bin/env python3
"""The committed exporter fixtures (tests/data/onnx/*, made by torch.onnx) import, fuse to the
high-level ops of their architecture with no primitive left where a pattern looks, and verify.

Usage: test_exporter_fixtures.py F8C SOURCE_DIR
"""
import collections
import os
import re
import subprocess
import sys

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
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
