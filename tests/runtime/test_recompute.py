#!/usr/bin/env python3
"""Recompute and the memory estimate through the f8c command (issue 18), on the CPU:

(a) bit-identity: gpt-tiny trained with each granularity and method (full uniform, full block,
    selective with Megatron-LM's default module and with layernorm + mlp) logs the losses and
    gradient norms of the run without recompute bit for bit, and its checkpoint (parameters,
    moments, the FP8 scaling tables: scales and amax histories) is the same bytes: under
    --bf16 with FP8 delayed and current, and in f32. Two micro-batches a step, so that the
    activations' scaling update, which recompute moves behind the last recomputed cast, runs
    between micro-batches as it does without recompute;
(b) the audit: recompute's decisions with their reasons, and --memory's table, whose parts add
    up to the total; the activations (the slab) fall with each granularity as expected, and
    full recompute drops more than selective;
(c) the memory budget: a budget between the smallest plan and the plan without recompute is
    met (the audit's total within it); one below the smallest plan is refused with its size;
(d) the options: Megatron-LM's rules (full needs a method and a layer count, a module the
    model lacks, an unknown module) refused with exit 2; the keys in --config; a plan
    compiled with recompute trains, and refuses the options given again.

Usage: test_recompute.py F8C SOURCE_DIR [--sanitizer-build]
"""
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from checks import check, finish  # noqa: E402

SIZES = ["--micro-batch-size", "2", "--global-batch-size", "4", "--seq-length", "64"]
ITERS = 4
FP8 = {"delayed": ["--bf16", "--fp8-format", "hybrid"],
       "current": ["--bf16", "--fp8-format", "hybrid", "--fp8-recipe", "current"],
       "f32": []}
RECOMPUTE = {
    "full-uniform-2": ["--recompute-granularity", "full", "--recompute-method", "uniform",
                       "--recompute-num-layers", "2"],
    "full-block-3": ["--recompute-granularity", "full", "--recompute-method", "block",
                     "--recompute-num-layers", "3"],
    "selective": ["--recompute-granularity", "selective"],
    "selective-ln-mlp": ["--recompute-granularity", "selective", "--recompute-modules",
                         "layernorm", "mlp"],
}


def f8c(binary, args):
    return subprocess.run([binary] + args, capture_output=True, text=True, timeout=900)


def tensors(path):
    """name -> raw bytes of each tensor of a safetensors file."""
    with open(path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
        data = f.read()
    return {name: data[t["data_offsets"][0]:t["data_offsets"][1]]
            for name, t in header.items() if name != "__metadata__"}


def train(binary, model, data, work, name, extra):
    folder = os.path.join(work, name)
    metrics = folder + ".jsonl"
    run = f8c(binary, ["train", model, "--data", data, "--train-iters", str(ITERS),
                       "--log-interval", "1", "--metrics", metrics, "--save", folder,
                       "--save-interval", str(ITERS)] + SIZES + extra)
    result = {"name": name, "run": run, "steps": [], "tensors": {}}
    if run.returncode == 0:
        with open(metrics) as f:
            result["steps"] = [(r["loss"], r["grad_norm"]) for r in map(json.loads, f)
                               if "loss" in r]
        last = os.path.join(folder, "iter_%07d" % ITERS)
        for file in ("weights.safetensors", "optimizer.safetensors"):
            result["tensors"].update(tensors(os.path.join(last, file)))
    return result


def bit_identity(binary, source, data, work, precisions):
    model = os.path.join(source, "models", "gpt-tiny.json")
    jobs = []
    for precision in precisions:
        variants = RECOMPUTE if precision != "f32" else {"full-uniform-2": RECOMPUTE["full-uniform-2"]}
        jobs.append((precision, "none", FP8[precision]))
        jobs += [(precision, v, FP8[precision] + args) for v, args in variants.items()]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda j: train(binary, model, data, work, f"{j[0]}-{j[1]}", j[2]),
                                jobs))
    by = {r["name"]: r for r in results}
    for r in results:
        check(r["run"].returncode == 0, f"{r['name']} trains", r["run"].stderr[-1500:])
    for precision, variant, _ in jobs:
        if variant == "none":
            continue
        base, other = by[f"{precision}-none"], by[f"{precision}-{variant}"]
        check(len(base["steps"]) == ITERS and other["steps"] == base["steps"],
              f"{precision}: {variant} logs the losses and gradient norms of the run without "
              "recompute bit for bit", f"{other['steps']}\nagainst\n{base['steps']}")
        differ = sorted(n for n in base["tensors"] if base["tensors"][n] != other["tensors"].get(n))
        check(base["tensors"] and not differ and base["tensors"].keys() == other["tensors"].keys(),
              f"{precision}: {variant}'s checkpoint is the same bytes (parameters, moments, "
              f"scaling tables)", f"differ: {differ[:10]}")
        if precision != "f32":
            check(any(n.endswith("amax_history") for n in base["tensors"]) or precision == "current",
                  f"{precision}: the checkpoint holds the amax histories it compares")


def audit(binary, model, extra):
    run = f8c(binary, ["audit", model, "--json", "--memory", "--micro-batch-size", "8",
                       "--seq-length", "128", "--bf16", "--fp8-format", "hybrid"] + extra)
    return run, json.loads(run.stdout) if run.returncode == 0 else None


def audits(binary, source):
    model = os.path.join(source, "models", "gpt-tiny.json")
    plans = {name: audit(binary, model, args) for name, args in
             [("none", []), ("selective", RECOMPUTE["selective-ln-mlp"]),
              ("full", RECOMPUTE["full-uniform-2"][:5] + ["1"])]}
    for name, (run, document) in plans.items():
        if not check(document is not None, f"audit --memory with recompute {name}",
                     run.stderr[-1500:]):
            return None
        memory = document["memory"]
        check(sum(memory["bytes"].values()) == memory["total"],
              f"{name}: the memory parts add up to the total", json.dumps(memory))
    none, selective, full = (plans[n][1] for n in ("none", "selective", "full"))
    activations = [d["memory"]["bytes"]["activations"] for d in (none, selective, full)]
    check(activations[0] > activations[1] > activations[2],
          "the slab falls: none > selective layernorm+mlp > full", str(activations))
    check(none["recompute"] == [] and none["memory"]["recomputed_activations"] == 0,
          "without recompute the audit lists no recompute", json.dumps(none["recompute"]))
    units = [u["reason"] for u in full["recompute"]]
    check(len(units) == 4 and all("full recompute, uniform" in u for u in units),
          "full uniform 1 on gpt-tiny: one unit a layer, each with its reason", str(units))
    check(all(u["gemm_flops"] > 0 and u["nodes"] > 0 for u in full["recompute"]),
          "each unit counts its nodes and GEMM FLOPs", json.dumps(full["recompute"]))
    reasons = [u["reason"] for u in selective["recompute"]]
    check(any("layernorm" in r for r in reasons) and any("mlp" in r for r in reasons),
          "selective layernorm mlp: units of both modules", str(reasons))
    check(none["summary"]["fp8_gemms"] == full["summary"]["fp8_gemms"] and
          none["summary"]["per_tensor_amaxes"] == full["summary"]["per_tensor_amaxes"],
          "the GEMM rows and the amaxes reduced leave the recomputed nodes out",
          f"{none['summary']} against {full['summary']}")
    return none["memory"]["total"], full["memory"]["total"]


def budgets(binary, source, totals):
    model = os.path.join(source, "models", "gpt-tiny.json")
    none, full = totals
    budget = (none + full) / 2 / 2**30
    run, document = audit(binary, model, ["--memory-budget", f"{budget:.6f}"])
    if check(document is not None, "a budget between the smallest plan and none is met",
             run.stderr[-1500:]):
        check(document["memory"]["total"] <= budget * 2**30 and document["recompute"],
              "the budget's plan fits and recomputes", f"{document['memory']['total']} "
              f"against {budget * 2**30}")
        check(all("--memory-budget" in u["reason"] and "FLOP a byte" in u["reason"]
                  for u in document["recompute"]),
              "each unit the budget chose says why", json.dumps(document["recompute"]))
    run, _ = audit(binary, model, ["--memory-budget", "0.001"])
    check(run.returncode == 2 and "smallest plan recompute can make" in run.stderr,
          "a budget below the smallest plan is refused with its size", run.stderr)


def options(binary, source, data, work):
    model = os.path.join(source, "models", "gpt-tiny.json")
    refused = [
        (["--recompute-granularity", "full", "--recompute-num-layers", "1"],
         "needs --recompute-method"),
        (["--recompute-granularity", "full", "--recompute-method", "uniform"],
         "needs --recompute-num-layers"),
        (["--recompute-method", "block"], "--recompute-method is for"),
        (["--recompute-granularity", "selective", "--recompute-modules", "moe"],
         "has no moe in any layer"),
        (["--recompute-granularity", "selective", "--recompute-modules", "attention"],
         "there is no module 'attention'"),
        (["--recompute-granularity", "full", "--recompute-method", "uniform",
          "--recompute-num-layers", "5"], "more than the 4 layers"),
        (["--memory-budget", "-3"], "--memory-budget: cannot use '-3'"),
    ]
    for args, said in refused:
        run = f8c(binary, ["train", model, "--data", data, "--train-iters", "1"] + SIZES + args)
        check(run.returncode == 2 and said in run.stderr, f"train {' '.join(args)} is refused",
              run.stderr[-800:])
    config = os.path.join(work, "config.json")
    with open(config, "w") as f:
        json.dump({"recompute_granularity": "selective", "recompute-modules": ["mlp"]}, f)
    memory = {}
    for name, extra in (("plain", []), ("config", ["--config", config])):
        run = f8c(binary, ["train", model, "--data", data, "--train-iters", "1", "--verbose"] +
                  SIZES + extra)
        check(run.returncode == 0, f"train with {name} options", run.stderr[-800:])
        line = [l for l in run.stderr.splitlines() if l.startswith("memory: the plan's slab")]
        memory[name] = int(line[0].split()[4]) if line else None
    check(memory["plain"] and memory["config"] and memory["config"] < memory["plain"],
          "--config's recompute keys recompute (the slab falls)", str(memory))
    plan = os.path.join(work, "plan")
    run = f8c(binary, ["compile", model, "-o", plan] + SIZES + RECOMPUTE["selective"])
    check(run.returncode == 0, "compile with recompute", run.stderr[-800:])
    with open(os.path.join(plan, "plan.json")) as f:
        document = json.load(f)
    check(document["memory"]["recomputed_activations"] > 0 and "recompute=" in document["graph"],
          "plan.json records the recompute and its memory", json.dumps(document["memory"]))
    run = f8c(binary, ["train", plan, "--data", data, "--train-iters", "2"])
    check(run.returncode == 0, "a plan compiled with recompute trains", run.stderr[-800:])
    run = f8c(binary, ["train", plan, "--data", data, "--train-iters", "2"] + RECOMPUTE["selective"])
    check(run.returncode == 2 and "recompute options are compiled into the plan" in run.stderr,
          "a plan refuses the recompute options given again", run.stderr[-800:])


def main():
    binary, source = sys.argv[1], sys.argv[2]
    sanitizer = "--sanitizer-build" in sys.argv[3:]
    with tempfile.TemporaryDirectory() as work:
        data = os.path.join(work, "tokens.bin")
        run = f8c(binary, ["tokenize", os.path.join(source, "data", "fp8-notes.txt"), "-o", data])
        if not check(run.returncode == 0, "tokenize", run.stderr):
            return finish()
        # Under the sanitizers, delayed FP8 alone: the other runs take minutes there.
        bit_identity(binary, source, data, work, ["delayed"] if sanitizer else list(FP8))
        totals = audits(binary, source)
        if totals:
            budgets(binary, source, totals)
        options(binary, source, data, work)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
