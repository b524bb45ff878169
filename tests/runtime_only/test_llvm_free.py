"""The f8c built without LLVM (-DF8C_LLVM=OFF) against a full build: `ldd` of it shows no
libLLVM and no protobuf-c; it trains a plan the full build compiled (from a copy of the model
that is gone by then) to the same losses as the full build trains the plan and the model, on the
reference kernels (the CPU backend's generated kernels need LLVM); it runs `infer`, `audit` and
`dump-ir` of plans as the full build does; it refuses to compile a model, to train or audit one,
and the generated kernels, each with a hint.

usage: test_llvm_free.py F8C_WITHOUT_LLVM FULL_F8C SOURCE_DIR   (exit 77 without FULL_F8C)
"""
import os
import random
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, finish  # noqa: E402  (tests/checks.py)

lean, full, source = sys.argv[1], sys.argv[2], sys.argv[3]
if not os.access(full, os.X_OK):
    print(f"SKIP: no full build of f8c at {full} to compile plans with (cmake --workflow "
          "--preset default builds it)")
    sys.exit(77)
seed = random.randrange(1 << 30)
print(f"seed {seed}")
rng = random.Random(seed)
work = tempfile.mkdtemp(prefix="f8c-llvm-free-")


def run(f8c, *args):
    result = subprocess.run([f8c, *args], capture_output=True, timeout=600)
    crashed = result.returncode < 0 or b"Sanitizer" in result.stderr
    check(not crashed, f"{os.path.basename(os.path.dirname(f8c))}/f8c {' '.join(args)} does not "
          "crash", result.stderr.decode(errors="replace"))
    return result.returncode, result.stdout.decode(errors="replace"), result.stderr.decode(errors="replace")


libraries = subprocess.run(["ldd", lean], capture_output=True, text=True).stdout
check("libLLVM" not in libraries and "protobuf-c" not in libraries and "libopenblas" in libraries,
      "ldd: no libLLVM, no protobuf-c (OpenBLAS for the CPU backend)", libraries)
full_libraries = subprocess.run(["ldd", full], capture_output=True, text=True).stdout
check("libLLVM" in full_libraries, "ldd: the full build does link libLLVM (the check can fail)",
      full_libraries)

tokens = os.path.join(work, "tokens.bin")
code, out, err = run(lean, "tokenize", os.path.join(source, "data", "fp8-notes.txt"), "-o", tokens)
check(code == 0, "tokenize runs without LLVM", err)
model = os.path.join(work, "gpt-tiny.json")
shutil.copy(os.path.join(source, "models", "gpt-tiny.json"), model)
batch, seq = rng.choice([1, 2, 4]), rng.choice([16, 32])
compiled = ["--micro-batch-size", str(batch), "--seq-length", str(seq), "--fp8-format", "hybrid"]
plan = os.path.join(work, "plan")
code, out, err = run(full, "compile", model, *compiled, "-o", plan)
check(code == 0, f"the full build compiles gpt-tiny (batch {batch}, seq {seq}, FP8)", err)
steps = ["--data", tokens, "--train-iters", "4", "--log-interval", "1", "--seed", str(seed % 1000)]
code2, out2, from_model = run(full, "train", model, *compiled, *steps, "--kernels", "reference")
os.remove(model)


def losses(text):
    return [line.split("loss ")[1].split(",")[0] for line in text.splitlines()
            if line.startswith("iteration") and "loss " in line]


code, out, lean_plan = run(lean, "train", plan, *steps, "--kernels", "reference", "--verbose")
code3, out3, full_plan = run(full, "train", plan, *steps, "--kernels", "reference")
check(code == 0 and code2 == 0 and code3 == 0 and len(losses(lean_plan)) == 4 and
      losses(lean_plan) == losses(full_plan) == losses(from_model),
      "without LLVM, train PLAN gives the full build's losses (of the plan and of the model)",
      lean_plan + full_plan + from_model)
check("memory: the plan's slab" in lean_plan, "train --verbose prints the slab and the peak",
      lean_plan)
code, out, err = run(lean, "train", plan, *steps)
check(code == 0 and losses(err) == losses(lean_plan),
      "without LLVM, train PLAN runs the reference kernels by default", err)
code, out, err = run(lean, "train", plan, *steps, "--kernels", "generated")
check(code != 0 and "without LLVM" in err and "HINT" in err,
      "the generated kernels are refused with a hint", err)

for args in (["dump-ir", plan], ["audit", plan]):
    code, out, err = run(lean, *args)
    code2, out2, err2 = run(full, *args)
    check(code == 0 and out == out2, f"{' '.join(args[:1])} PLAN prints what the full build "
          "prints", err + err2)

for args in (["compile", os.path.join(source, "models", "gpt-tiny.json"), "--seq-length", "16",
              "-o", os.path.join(work, "p2")],
             ["train", os.path.join(source, "models", "gpt-tiny.json"), *steps, "--seq-length",
              "16"],
             ["audit", os.path.join(source, "models", "gpt-tiny.json")],
             ["dump-ir", os.path.join(source, "models", "gpt-tiny.json")],
             ["export-onnx", os.path.join(source, "models", "gpt-tiny.json"), "-o",
              os.path.join(work, "m.onnx")]):
    code, out, err = run(lean, *args)
    check(code != 0 and "built without LLVM" in err and "f8c compile MODEL" in err,
          f"without LLVM, f8c {args[0]} of a model is refused with a hint", err)

shutil.rmtree(work)
sys.exit(finish())
