"""Plans on disk through the f8c command: `f8c compile` writes plan.json, kernels.ptx and
weights.safetensors for every model of the zoo the tests use, with and without FP8; every
kernel of every plan passes `ptxas -arch=sm_90` (with --ptxas, a test of its own, which exits
77 where there is no ptxas); plan.json carries the decision record (the graph with its reasons, the kernels, the
groups' launches, the estimates); `f8c dump-ir PLAN` prints the plan's graph; a plan edited in
any way (another f8c version, its graph, a kernel's parameters or launch geometry, a binding,
a compile option, kernels.ptx, the weights, slab offsets) is refused with an error that says
what, and a failed compile leaves no plan behind; `f8c train PLAN`, `f8c infer PLAN` and
`f8c audit PLAN` give what they give from the model compiled with the same options, with the
model file gone (a JSON description and an ONNX model with its weights), and refuse options
the plan fixes.

usage: test_plan_cli.py F8C_BINARY SOURCE_DIR [--ptxas PTXAS]
"""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from checks import check, finish  # noqa: E402  (tests/checks.py)

f8c, source = sys.argv[1], sys.argv[2]
ptxas_only = len(sys.argv) > 3 and sys.argv[3] == "--ptxas"
ptxas = sys.argv[4] if ptxas_only and len(sys.argv) > 4 and sys.argv[4] else None
if ptxas_only and not (ptxas and os.access(ptxas, os.X_OK)):
    print(f"SKIP: ptxas -arch=sm_90 on the plans needs the CUDA Toolkit's ptxas (none at "
          f"\"{ptxas or ''}\")")
    sys.exit(77)
models = os.path.join(source, "models")
seed = random.randrange(1 << 30)
print(f"seed {seed}")
rng = random.Random(seed)


def run(*args):
    result = subprocess.run([f8c, *args], capture_output=True, timeout=300)
    crashed = result.returncode < 0 or b"Sanitizer" in result.stderr
    check(not crashed, f"f8c {' '.join(args)} does not crash", result.stderr.decode(errors="replace"))
    return result.returncode, result.stdout.decode(errors="replace"), result.stderr.decode(errors="replace")


work = tempfile.mkdtemp(prefix="f8c-plans-")

# The zoo's test models, each with a fresh batch and sequence size, with and without FP8.
cases = [("gpt-tiny", []), ("gpt-tiny", ["--fp8-format", "hybrid"]),
         ("gpt-tiny", ["--fp8-format", "hybrid", "--fp8-recipe", "current", "--target", "cpu"]),
         ("llama-tiny", []), ("llama-tiny", ["--fp8-format", "hybrid"]),
         ("mixtral-tiny", []), ("gpt2-124m", ["--fp8-format", "hybrid"])]
plans = []
for i, (name, fp8) in enumerate(cases):
    batch, seq = rng.choice([1, 2, 4]), rng.choice([16, 32, 64])
    plan = os.path.join(work, f"{name}-{i}")
    code, out, err = run("compile", os.path.join(models, f"{name}.json"), "--micro-batch-size",
                         str(batch), "--seq-length", str(seq), *fp8, "-o", plan)
    ok = code == 0 and os.path.exists(os.path.join(plan, "plan.json"))
    check(ok, f"compile {name} {' '.join(fp8)} (batch {batch}, seq {seq})", out + err)
    if ok:
        plans.append((name, fp8, plan))

for name, fp8, plan in plans:
    with open(os.path.join(plan, "plan.json")) as file:
        document = json.load(file)
    with open(os.path.join(plan, "kernels.ptx")) as file:
        ptx = file.read()
    what = f"{name} {' '.join(fp8)}"
    check(document["format"] == "f8c-plan" and document["format_version"] == 2 and
          len(document["digest"]) == 16 and
          os.path.exists(os.path.join(plan, document["weights"]["file"])),
          f"{what}: plan.json says its format", str(document.get("format")))
    check(document["graph"].startswith("graph ") and (not fp8 or "reason=" in document["graph"]),
          f"{what}: the graph is in the plan, with its FP8 reasons", document["graph"][:300])
    groups, kernels = document["groups"], document["kernels"]
    check(len(groups) > 0 and all(g["reason"] and g["launches"] for g in groups),
          f"{what}: every group has a reason and its launches", json.dumps(groups[:2]))
    check(all(f".entry {k['name']}(" in ptx for k in kernels),
          f"{what}: kernels.ptx has every kernel plan.json lists", "")
    check(all(k["threads_per_block"] > 0 and k["max_blocks"] > 0 for k in kernels),
          f"{what}: every kernel has its launch geometry", json.dumps(kernels[:1]))
    check(document["estimates"]["gemm_flops"] is not None and document["estimates"]["gemm_flops"] > 0,
          f"{what}: the estimates have the GEMM FLOPs", json.dumps(document["estimates"]))
    buffers = document["buffers"]
    check(buffers["planned"] and 0 < buffers["slab_bytes"] and "offset=" in document["graph"],
          f"{what}: the buffer plan: one slab, each value's offset in the graph", json.dumps(buffers))
    if ptxas_only:
        result = subprocess.run([ptxas, "-arch=sm_90", os.path.join(plan, "kernels.ptx"), "-o",
                                 os.path.join(plan, "kernels.cubin")], capture_output=True)
        check(result.returncode == 0, f"{what}: ptxas -arch=sm_90 accepts every kernel",
              result.stderr.decode(errors="replace")[:2000])
if ptxas_only:
    shutil.rmtree(work)
    sys.exit(finish())

# dump-ir of a plan prints its graph; --after with a plan is refused.
name, fp8, plan = plans[1]
with open(os.path.join(plan, "plan.json")) as file:
    document = json.load(file)
code, out, err = run("dump-ir", plan)
check(code == 0 and out == document["graph"], "dump-ir PLAN prints the plan's graph", err[:400])
code, out, err = run("dump-ir", plan, "--after", "fuse")
check(code == 2 and "is a plan" in err, "dump-ir PLAN --after is refused", err)


def edited(change, digest=True):
    """A copy of the FP8 plan with `change(document, ptx)` applied; its folder. With `digest`,
    the digest is made anew over the edit (as an editor who knows the format would), so that
    the check behind it is what refuses the plan."""
    copy = os.path.join(work, f"edited-{rng.randrange(1 << 20)}")
    shutil.copytree(plan, copy)
    with open(os.path.join(copy, "plan.json")) as file:
        document = json.load(file)
    with open(os.path.join(copy, "kernels.ptx")) as file:
        ptx = file.read()
    document, ptx = change(document, ptx)
    if digest:
        document["digest"] = digest_of(document)
    with open(os.path.join(copy, "plan.json"), "w") as file:
        json.dump(document, file)
    with open(os.path.join(copy, "kernels.ptx"), "w") as file:
        file.write(ptx)
    return copy


def digest_of(document):
    """plan.json's digest: FNV-1a 64 of the compact dump, keys sorted, without "digest"."""
    text = json.dumps({k: v for k, v in document.items() if k != "digest"}, sort_keys=True,
                      separators=(",", ":"), ensure_ascii=True)
    value = 14695981039346656037
    for byte in text.encode():
        value = ((value ^ byte) * 1099511628211) & ((1 << 64) - 1)
    return f"{value:016x}"


def refused(change, words, what, digest=True):
    copy = edited(change, digest)
    code, out, err = run("dump-ir", copy)
    check(code != 0 and not out and all(w in err for w in words), f"a plan {what} is refused", err)


def version(d, p):
    d["f8c_version"] = "0.0." + str(rng.randrange(1, 99))
    return d, p


def no_node(d, p):
    lines = d["graph"].split("\n")
    victims = [i for i, line in enumerate(lines) if " = Gelu(" in line or " = LayerNorm(" in line]
    del lines[rng.choice(victims)]
    d["graph"] = "\n".join(lines)
    return d, p


def other_kernel(d, p):
    k = rng.randrange(len(d["kernels"]))
    d["kernels"][k]["params"][0]["dtype"] = "f64"
    return d, p


def other_table(d, p):
    """Swaps the parameter and its gradient in a row of the optimizer's table."""
    tables = [a for g in d["groups"] for launch in g["launches"] for a in launch["args"]
              if isinstance(a, dict) and a["rows"]
              and "param" in [c["name"] for c in a["columns"]]]  # not GlobalNorm's, a Constant's
    check(len(tables) > 0, "the FP8 plan's optimizer launch has its table", "")
    rows = tables[0]["rows"]
    r = rng.randrange(len(rows))
    cells = rows[r].split(" ")
    names = [c["name"] for c in tables[0]["columns"]]
    i, j = names.index("param"), names.index("grad")
    cells[i], cells[j] = cells[j], cells[i]
    rows[r] = " ".join(cells)
    return d, p


def overlapping_offset(d, p):
    """Moves one value's slab offset onto another's that is alive at the same time: the one
    just before it in the graph that reads it (an operand and the result of one node)."""
    import re
    lines = d["graph"].split("\n")
    offset = re.compile(r"offset=(\d+)")
    for i, line in enumerate(lines):
        defined = re.match(r"\s*(%\S+) :", line)
        if not defined or not offset.search(line):
            continue
        for j in range(i + 1, len(lines)):
            reader = offset.search(lines[j])
            if reader and defined.group(1) + ")" in lines[j] or reader and defined.group(1) + "," in lines[j]:
                mine = offset.search(line).group(1)
                if reader.group(1) != mine:
                    lines[j] = offset.sub("offset=" + mine, lines[j], count=1)
                    d["graph"] = "\n".join(lines)
                    return d, p
    check(False, "the FP8 plan has a value and a reader with offsets", "")
    return d, p


def other_geometry(d, p):
    k = rng.randrange(len(d["kernels"]))
    d["kernels"][k]["threads_per_block"] *= 2
    return d, p


def other_option(d, p):
    d["compile_args"] = d["compile_args"] + ["--lr", "1e-2"]
    return d, p


def no_geometry(d, p):
    del d["kernels"][rng.randrange(len(d["kernels"]))]["max_blocks"]
    return d, p


def unknown_binding(d, p):
    for g in d["groups"]:
        for launch in g["launches"]:
            for i, a in enumerate(launch["args"]):
                if isinstance(a, str) and a.startswith("%"):
                    launch["args"][i] = "%no_such_value"
                    return d, p
    return d, p


def other_annotation(d, p):
    """Turns a GEMM's FP8 annotation to another recipe, as if to change what it runs in."""
    import re
    annotated = re.compile(r"recipe=delayed")
    check(annotated.search(d["graph"]) is not None, "the FP8 plan has recipe annotations", "")
    d["graph"] = annotated.sub("recipe=current", d["graph"], count=1)
    return d, p


def other_learning_rate(d, p):
    """The learning rate in the graph itself (LearningRate's attribute), not the options."""
    import re
    rate = re.compile(r"(= LearningRate\(%[^)]*\) \{lr=)([0-9.e+-]+)")
    check(rate.search(d["graph"]) is not None, "the FP8 plan has its LearningRate", "")
    d["graph"] = rate.sub(lambda m: m.group(1) + "0.5", d["graph"], count=1)
    return d, p


def other_weights(d, p):
    d["weights"]["fnv1a64"] = "0" * 16
    return d, p


def other_ptx(d, p):
    at = rng.randrange(len(p))
    return d, p[:at] + " " + p[at:]


refused(version, ["written by f8c", "compile the model again"], "from another f8c version")
refused(no_node, ["graph does not", "compile the model again"], "with a node taken out of its graph")
refused(other_kernel, ["digest", "changed since it was written"],
        "with a kernel's parameter edited", digest=False)
refused(other_table, ["digest", "changed since it was written"],
        "whose optimizer table names other buffers", digest=False)
refused(other_geometry, ["digest", "compile the model again"], "with a launch geometry edited",
        digest=False)
refused(other_option, ["digest"], "with a compile option edited", digest=False)
refused(other_annotation, ["digest", "changed since it was written"],
        "with a value's FP8 annotation edited", digest=False)
refused(other_learning_rate, ["digest", "changed since it was written"],
        "with its learning rate edited in the graph", digest=False)
refused(no_geometry, ["launch", "geometry"], "with a kernel's launch geometry taken out")
refused(unknown_binding, ["no value of the graph"], "with a binding to a value it lacks")
refused(other_weights, ["weights.safetensors is not the file"], "with edited weights")
refused(other_ptx, ["kernels.ptx is not the file"], "with an edited kernels.ptx")
refused(overlapping_offset, ["overlap", "in the slab", "compile the model again"],
        "whose slab offsets overlap")

# A compile that fails leaves no plan behind; a second compile into a plan folder replaces it.
failed = os.path.join(work, "failed")
code, out, err = run("compile", os.path.join(models, "gpt-tiny.json"), "--micro-batch-size", "2",
                     "--seq-length", "100000", "-o", failed)
check(code != 0 and not os.path.exists(os.path.join(failed, "plan.json")),
      "a failed compile writes no plan.json", err)
code, out, err = run("compile", os.path.join(models, "gpt-tiny.json"), "--micro-batch-size", "1",
                     "--seq-length", "16", "-o", plan)
code2, out2, err2 = run("dump-ir", plan)
check(code == 0 and code2 == 0 and "i64[1, 16]" in out2, "a plan folder compiled again is the new plan",
      err + err2)
code, out, err = run("compile", os.path.join(models, "gpt-tiny.json"), "--seq-length", "16")
check(code == 2 and "-o PLAN_DIR" in err, "compile without -o says what is missing", err)

# f8c train, infer and audit take a plan as they take a model, with the same results.
tokens = os.path.join(work, "tokens.bin")
run("tokenize", os.path.join(source, "data", "fp8-notes.txt"), "-o", tokens)
fp8_plan = os.path.join(work, "train-plan")
compiled = ["--micro-batch-size", "2", "--seq-length", "32", "--lr", "1e-3", "--fp8-format", "hybrid"]
# The plan runs without its model: compiled from a copy that is gone before it trains.
copy = os.path.join(work, "gpt-tiny-copy.json")
shutil.copy(os.path.join(models, "gpt-tiny.json"), copy)
code, out, err = run("compile", copy, *compiled, "-o", fp8_plan)
check(code == 0, "compile gpt-tiny for training", err)
os.remove(copy)
steps = ["--data", tokens, "--train-iters", "3", "--log-interval", "1", "--seed", str(seed % 1000)]
code, out, from_plan = run("train", fp8_plan, *steps)  # f8c train reports on stderr
code2, out2, from_model = run("train", os.path.join(models, "gpt-tiny.json"), *compiled, *steps)


def losses(text):
    """Each logged iteration's loss, as printed."""
    return [line.split("loss ")[1].split(",")[0] for line in text.splitlines()
            if line.startswith("iteration") and "loss " in line]


check(code == 0 and code2 == 0 and len(losses(from_plan)) == 3 and losses(from_plan) == losses(from_model),
      "train PLAN gives the losses train MODEL gives with the same options", from_plan + from_model)
code, out, err = run("train", fp8_plan, *steps, "--lr", "3e-4")
check(code == 2 and "compiled into the plan" in err and "HINT" in err, "train PLAN --lr is refused", err)
code, out, err = run("train", fp8_plan, *steps, "--fp8-recipe", "current")
check(code == 2 and "FP8 options" in err, "train PLAN with FP8 options is refused", err)
code, out, err = run("audit", fp8_plan)
code2, out2, err2 = run("audit", os.path.join(models, "gpt-tiny.json"), "--micro-batch-size", "2",
                        "--seq-length", "32")
check(code == 0 and code2 == 0 and out.split("\n", 1)[1] == out2.split("\n", 1)[1],
      "audit PLAN lists what audit MODEL lists", out[:600] + err + err2)
inference_plan = os.path.join(work, "infer-plan")
shutil.copy(os.path.join(models, "gpt-tiny.json"), copy)
code, out, err = run("compile", copy, "--inference", "--dim", "batch=2", "--dim", "seq=16", "-o",
                     inference_plan)
check(code == 0, "compile gpt-tiny --inference", err)
os.remove(copy)
# An ONNX model's weights travel in the plan: compiled from a copy of the exporter fixture
# (model.onnx and its external data), which is gone when the plan runs.
onnx_source = os.path.join(source, "tests", "data", "onnx", "gpt2-tiny")
onnx_copy = os.path.join(work, "gpt2-tiny-copy")
shutil.copytree(onnx_source, onnx_copy)
onnx_plan = os.path.join(work, "onnx-plan")
code, out, err = run("compile", os.path.join(onnx_copy, "model.onnx"), "--inference", "--dim",
                     "batch=2", "--dim", "seq=16", "-o", onnx_plan)
check(code == 0, "compile the gpt2-tiny ONNX fixture --inference", err)
shutil.rmtree(onnx_copy)
import numpy  # noqa: E402  (tools/install-deps.sh installs it)
array = os.path.join(work, "tokens.npy")
numpy.save(array, numpy.random.default_rng(seed).integers(0, 256, (2, 16)).astype(numpy.int64))
for folder, model in ((os.path.join(work, "out-plan"), inference_plan),
                      (os.path.join(work, "out-model"), os.path.join(models, "gpt-tiny.json"))):
    code, out, err = run("infer", model, "--input", f"tokens={array}", "--output-dir", folder)
    check(code == 0, f"infer {os.path.basename(model)}", err)
# Sequences longer than gpt-tiny's 128 positions: refused naming both, by the model's
# description, and by the executor for a plan (whose sequence is bound by the arrays), where a
# generated kernel would read past the position table.
longer = os.path.join(work, "tokens-200.npy")
numpy.save(longer, numpy.random.default_rng(seed).integers(0, 256, (1, 200)).astype(numpy.int64))
symbolic_plan = os.path.join(work, "infer-plan-symbolic")  # batch and seq left to the arrays
code, out, err = run("compile", os.path.join(models, "gpt-tiny.json"), "--inference", "-o",
                     symbolic_plan)
check(code == 0, "compile gpt-tiny --inference with symbolic batch and seq", err)
for model, words in ((symbolic_plan, ["Slice", "size 128", "has 200", "positions"]),
                     (os.path.join(models, "gpt-tiny.json"), ["200 tokens", '"seq": 128'])):
    folder = os.path.join(work, "out-longer")
    code, out, err = run("infer", model, "--input", f"tokens={longer}", "--output-dir", folder)
    check(code == 2 and all(w in err for w in words) and not os.path.exists(folder),
          f"infer {os.path.basename(model)} refuses 200 tokens, naming the sizes", err)
# A token id past the vocabulary: named with its position and the vocabulary, before any run.
outside = os.path.join(work, "tokens-outside.npy")
ids = numpy.random.default_rng(seed).integers(0, 256, (2, 16)).astype(numpy.int64)
at = int(numpy.random.default_rng(seed + 2).integers(0, ids.size))
ids.flat[at] = 256 + at
numpy.save(outside, ids)
for model in (symbolic_plan, os.path.join(models, "gpt-tiny.json")):
    folder = os.path.join(work, "out-outside")
    code, out, err = run("infer", model, "--input", f"tokens={outside}", "--output-dir", folder)
    words = [f"token {256 + at} at position {at}", "vocabulary of 256"]
    check(code == 2 and all(w in err for w in words) and not os.path.exists(folder),
          f"infer {os.path.basename(model)} names an id outside the vocabulary", err)
a = numpy.load(os.path.join(work, "out-plan", "logits.npy"))
b = numpy.load(os.path.join(work, "out-model", "logits.npy"))
check(a.shape == b.shape and numpy.array_equal(a, b), "infer PLAN gives infer MODEL's logits",
      f"{a.shape} {b.shape}")
inputs = [line.split(":")[0].split("%")[1].strip() for line in
          json.load(open(os.path.join(onnx_plan, "plan.json")))["graph"].splitlines()
          if line.strip().startswith("input %")]
onnx_array = os.path.join(work, "onnx-tokens.npy")
numpy.save(onnx_array, numpy.random.default_rng(seed + 1).integers(0, 64, (2, 16)).astype(
    numpy.int64))
given = [f"{name}={onnx_array}" for name in inputs]
for folder, model in ((os.path.join(work, "onnx-out-plan"), onnx_plan),
                      (os.path.join(work, "onnx-out-model"), os.path.join(onnx_source, "model.onnx"))):
    code, out, err = run("infer", model, *sum((["--input", g] for g in given), []),
                         "--output-dir", folder, *([] if model == onnx_plan else
                                                   ["--dim", "batch=2", "--dim", "seq=16"]))
    check(code == 0, f"infer {model} (ONNX)", err)
outputs = sorted(os.listdir(os.path.join(work, "onnx-out-plan")))
same = outputs and all(numpy.array_equal(numpy.load(os.path.join(work, "onnx-out-plan", o)),
                                         numpy.load(os.path.join(work, "onnx-out-model", o)))
                       for o in outputs)
check(same, "infer of an ONNX plan, its model gone, gives infer of the model's outputs",
      str(outputs))
code, out, err = run("infer", fp8_plan, "--input", "tokens=x.npy", "--output-dir", work)
check(code == 2 and "training plan" in err, "infer with a training plan is refused", err)

shutil.rmtree(work)
sys.exit(finish())
