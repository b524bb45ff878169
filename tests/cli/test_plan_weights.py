"""Plans that make their weights from a seed (`f8c compile --weights seed`): plan.json records
the rule, its version, the seed (compile's --seed) and every parameter's rule and dtype, and no
weights travel with the plan; training from it gives the metrics of the same model compiled
with the default `--weights file` and trained with that seed, and its parameters are the same
bytes (compiled with --lr 0, the checkpoint after the run holds the initial leaves), the bytes
`f8c export-onnx` writes for the same seed; the run's --seed then orders the data only, an
inference plan infers the same logits; a model with weights of its own (an ONNX model with
initializers) is refused, and so is a plan whose record was edited: the seed (the digest), or,
with the digest made anew, another rule version, dtype or std, a parameter dropped or twice.

usage: test_plan_weights.py F8C_BINARY SOURCE_DIR
"""
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from checks import check, finish  # noqa: E402  (tests/checks.py)

f8c, source = sys.argv[1], sys.argv[2]
model = os.path.join(source, "models", "gpt-tiny.json")
seed = random.randrange(1 << 30)
print(f"seed {seed}")
rng = random.Random(seed)
work = tempfile.mkdtemp(prefix="f8c-plan-weights-")


def run(*args):
    result = subprocess.run([f8c, *args], capture_output=True, timeout=300)
    crashed = result.returncode < 0 or b"Sanitizer" in result.stderr
    check(not crashed, f"f8c {' '.join(args)} does not crash", result.stderr.decode(errors="replace"))
    return result.returncode, result.stdout.decode(errors="replace"), result.stderr.decode(errors="replace")


def tensors(path):
    """The tensors of a safetensors file by name, as bytes."""
    with open(path, "rb") as file:
        data = file.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    return {name: data[8 + n + t["data_offsets"][0]:8 + n + t["data_offsets"][1]]
            for name, t in header.items()}


def metrics(path):
    """The metrics lines without their timings (tokens/s and seconds differ run to run)."""
    with open(path) as file:
        return [{k: v for k, v in json.loads(line).items() if k not in ("tokens_per_s", "elapsed_s")}
                for line in file]


def digest_of(document):
    """plan.json's digest: FNV-1a 64 of the compact dump, keys sorted, without "digest"."""
    text = json.dumps({k: v for k, v in document.items() if k != "digest"}, sort_keys=True,
                      separators=(",", ":"), ensure_ascii=True)
    value = 14695981039346656037
    for byte in text.encode():
        value = ((value ^ byte) * 1099511628211) & ((1 << 64) - 1)
    return f"{value:016x}"


tokens = os.path.join(work, "tokens.bin")
code, out, err = run("tokenize", os.path.join(source, "data", "fp8-notes.txt"), "-o", tokens)
check(code == 0, "tokenize", err)
weights_seed = str(rng.randrange(1 << 20))
batch, seq = rng.choice([1, 2]), rng.choice([16, 32])
shape = ["--micro-batch-size", str(batch), "--seq-length", str(seq)]

# The same step trained from both kinds of plan, with FP8 (its scales come from the plan's
# weights.safetensors either way) and without. Both are compiled with --seed, which a plan's
# compile arguments then fix for the run: the file plan makes its weights from it at run time,
# the seed plan from its record.
for fp8 in ([], ["--fp8-format", "hybrid"]):
    what = f"gpt-tiny {' '.join(fp8)}".strip()
    folders = {}
    for mode in ("file", "seed"):
        folders[mode] = os.path.join(work, f"{mode}{len(fp8)}")
        code, out, err = run("compile", model, *shape, "--lr", "1e-3", *fp8, "--seed", weights_seed,
                             "--weights", mode, "-o", folders[mode])
        check(code == 0, f"{what}: compile --weights {mode}", err)
    with open(os.path.join(folders["seed"], "plan.json")) as file:
        document = json.load(file)
    record = document.get("weight_init", {})
    params = [line.split("%")[1].split(" ")[0].split(":")[0] for line in document["graph"].splitlines()
              if line.strip().startswith("param %")]
    check(record.get("rule") == "megatron-lm-default" and record.get("rule_version") == 1 and
          record.get("seed") == int(weights_seed) and
          sorted(w["name"] for w in record.get("weights", [])) == sorted(params) and
          all(w["dtype"] == "f32" and w["init"] in ("normal", "ones", "zeros") and
              (w["init"] != "normal" or w["std"] > 0) for w in record["weights"]),
          f"{what}: plan.json records the rule, its version, the seed and every parameter's rule",
          json.dumps({k: v for k, v in record.items() if k != "weights"}))
    with open(os.path.join(folders["file"], "plan.json")) as file:
        check("weight_init" not in json.load(file), f"{what}: --weights file records no rule")
    weights_bytes = os.path.getsize(os.path.join(folders["seed"], "weights.safetensors"))
    check(weights_bytes < 4096, f"{what}: a seed plan carries no parameters ({weights_bytes} bytes of "
          "weights.safetensors: the scaling tables' first scales)")
    runs = {}
    for mode, folder in folders.items():
        runs[mode] = os.path.join(work, f"{mode}{len(fp8)}.jsonl")
        code, out, err = run("train", folder, "--data", tokens, "--train-iters", "4", "--log-interval",
                             "1", "--metrics", runs[mode], "--save", folder + "-save")
        check(code == 0, f"{what}: train the --weights {mode} plan", err)
    if all(os.path.exists(path) for path in runs.values()):
        a, b = metrics(runs["file"]), metrics(runs["seed"])
        check(len(a) == 4 and a == b, f"{what}: both plans train to the same metrics", f"{a}\n{b}")
        last = [tensors(os.path.join(f + "-save", "iter_0000004", "weights.safetensors"))
                for f in folders.values()]
        check(last[0] == last[1], f"{what}: both plans train to the same parameters")

# The initial leaves byte for byte: with --lr 0 the parameters do not move, so the checkpoint
# after one iteration holds them. Compiled without --seed, a seed plan records the default,
# 1234, and the run's --seed is free: from a seed plan with another run seed; from a file plan
# and from the model with 1234; and export-onnx's data for 1234.
weights_seed, run_seeds = "1234", {"file": "1234", "seed": str(1235 + rng.randrange(1000))}
initial = {}
for mode in ("file", "seed"):
    folder = os.path.join(work, f"lr0-{mode}")
    code, out, err = run("compile", model, *shape, "--lr", "0", "--weight-decay", "0", "--weights",
                         mode, "-o", folder)
    check(code == 0, f"compile --lr 0 --weights {mode}", err)
    run_seed = run_seeds[mode]
    code, out, err = run("train", folder, "--data", tokens, "--train-iters", "1", "--seed", run_seed,
                         "--save", folder + "-save")
    check(code == 0, f"train the --lr 0 --weights {mode} plan", err)
    initial[mode] = tensors(os.path.join(folder + "-save", "iter_0000001", "weights.safetensors"))
code, out, err = run("train", model, *shape, "--lr", "0", "--weight-decay", "0", "--seed", weights_seed,
                     "--data", tokens, "--train-iters", "1", "--save", os.path.join(work, "lr0-model"))
check(code == 0, "train the model with --lr 0", err)
initial["model"] = tensors(os.path.join(work, "lr0-model", "iter_0000001", "weights.safetensors"))
check(len(initial["seed"]) > 10 and initial["seed"] == initial["file"] == initial["model"],
      "a seed plan's parameters are the bytes a file plan and the model make from that seed "
      "(the run's --seed does not change them)", str(sorted(initial["seed"])[:5]))
onnx = os.path.join(work, "gpt-tiny.onnx")
code, out, err = run("export-onnx", model, "-o", onnx, "--seed", weights_seed)
check(code == 0, "export-onnx gpt-tiny", err)
with open(onnx + ".data", "rb") as file:
    exported = file.read()
normal = [name for name, data in initial["seed"].items() if len(set(data)) > 2]
check(normal and all(initial["seed"][name] in exported for name in normal),
      "a seed plan's random parameters are in export-onnx's weights, byte for byte",
      str([name for name in normal if initial["seed"][name] not in exported][:5]))
code, out, err = run("train", os.path.join(work, "lr0-file"), "--data", tokens, "--train-iters", "1",
                     "--seed", run_seeds["seed"], "--save", os.path.join(work, "lr0-file-other"))
other = tensors(os.path.join(work, "lr0-file-other", "iter_0000001", "weights.safetensors"))
check(code == 0 and other != initial["file"], "a file plan's parameters follow the run's --seed", err)

# An inference plan made from the seed infers what the model infers with that seed.
import numpy  # noqa: E402  (tools/install-deps.sh installs it)
array = os.path.join(work, "tokens.npy")
numpy.save(array, numpy.random.default_rng(seed).integers(0, 256, (2, 16)).astype(numpy.int64))
inference = os.path.join(work, "infer-seed")
weights_seed = str(rng.randrange(1 << 20))
code, out, err = run("compile", model, "--inference", "--dim", "batch=2", "--dim", "seq=16", "--seed",
                     weights_seed, "--weights", "seed", "-o", inference)
check(code == 0, "compile --inference --weights seed", err)
for folder, what in ((os.path.join(work, "out-plan"), inference), (os.path.join(work, "out-model"), model)):
    code, out, err = run("infer", what, "--input", f"tokens={array}", "--output-dir", folder,
                         *(["--seed", weights_seed] if what == model else []))
    check(code == 0, f"infer {os.path.basename(what)}", err)
if all(os.path.exists(os.path.join(work, f, "logits.npy")) for f in ("out-plan", "out-model")):
    a = numpy.load(os.path.join(work, "out-plan", "logits.npy"))
    b = numpy.load(os.path.join(work, "out-model", "logits.npy"))
    check(numpy.array_equal(a, b), "infer of a seed plan gives the model's logits for that seed")

# A model with weights of its own is refused, and leaves no plan; so is a mode f8c lacks.
onnx_model = os.path.join(source, "tests", "data", "onnx", "gpt2-tiny", "model.onnx")
refused_plan = os.path.join(work, "onnx-seed")
code, out, err = run("compile", onnx_model, "--inference", "--dim", "batch=2", "--dim", "seq=16",
                     "--weights", "seed", "-o", refused_plan)
check(code == 2 and "without weights of its own" in err and "model.onnx" in err and "%" in err and
      "HINT" in err and not os.path.exists(os.path.join(refused_plan, "plan.json")),
      "--weights seed for an ONNX model with initializers is refused, naming a parameter", err)
code, out, err = run("compile", model, *shape, "--weights", "random", "-o", refused_plan)
check(code == 2 and "--weights" in err and "'random'" in err and "HINT" in err,
      "--weights random is refused", err)

# Edited records are refused: the seed by the digest; the rest, with the digest made anew (as
# an editor who knows the format would), by the record's own checks.
plan = os.path.join(work, "seed0")


def refused(change, words, what, digest=True):
    copy = os.path.join(work, f"edited-{rng.randrange(1 << 20)}")
    shutil.copytree(plan, copy)
    with open(os.path.join(copy, "plan.json")) as file:
        document = json.load(file)
    change(document["weight_init"])
    if digest:
        document["digest"] = digest_of(document)
    with open(os.path.join(copy, "plan.json"), "w") as file:
        json.dump(document, file)
    code, out, err = run("train", copy, "--data", tokens, "--train-iters", "1")
    check(code != 0 and all(w in err for w in words), f"a seed plan {what} is refused", err)


def other_seed(record):
    record["seed"] += 1


def dropped(record):
    record["weights"].pop(rng.randrange(len(record["weights"])))


def twice(record):
    record["weights"].append(record["weights"][0])


def other_std(record):
    next(w for w in record["weights"] if w["init"] == "normal")["std"] = -0.02


refused(other_seed, ["digest", "changed since it was written", "compile the model again"],
        "whose seed was edited", digest=False)
refused(lambda r: r.update(rule_version=r["rule_version"] + 1), ["weight_init", "version"],
        "of another rule version")
refused(lambda r: r["weights"][0].update(dtype="bf16"), ["weight_init", "bf16", "f32"],
        "with a parameter's dtype edited")
refused(lambda r: r["weights"][0].update(init="uniform"), ["weight_init", "uniform"],
        "with an unknown init")
refused(other_std, ["weight_init", "std"], "with a negative std")
refused(dropped, ["weight_init", "neither"], "with a parameter dropped from its record")
refused(twice, ["weight_init", "twice"], "with a parameter listed twice")
refused(lambda r: r["weights"][0].update(name="no.such.weight"), ["no parameter of the graph"],
        "naming a parameter its graph lacks")

shutil.rmtree(work)
sys.exit(finish())
