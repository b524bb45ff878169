"""Every node of a training plan runs on the device: in gpt-tiny's training plans (without FP8,
and HYBRID with delayed, current, rowwise and block scaling), compiled by `f8c compile`, every
node of plan.json's graph is a member of a fused kernel (`kernel=kN`) or a library call (the
GEMMs through cuBLASLt, attention through cuDNN, collectives through NCCL), so that a GPU
backend needs no host code for any other node (DESIGN.md: device kernels come from codegen
only). Prints the ops left outside where one is not a library op. gpt-tiny's and llama-tiny's
f32 plans (no --bf16, default target sm_90) hold no Attention: cuDNN has no f32 fused attention,
so attention-unfused spells it in MatMuls and Softmax (passes/attention_unfused.h), whose
kernels are generated; their --bf16 plans keep cuDNN's attention (gpt-tiny's as AttentionPacked
and AttentionPackedGrad, passes/attention_layout.h; llama-tiny's, with RoPE, as Attention and
AttentionGrad). mixtral-tiny's plans (f32 and
--bf16) add the MoE ops, generated kernels too (codegen/lower_moe.c), between GroupedLinears.
gpt-tiny under TP2, with sequence parallelism and without, FP8 current scaling: no node
outside a kernel besides collectives (LocalShard included), GEMMs and attention: the Amax and
ScaleFromAmax the shard pass adds around the amax's AllReduce (codegen/lower_amax.c), the
vocabulary-parallel Embedding and EmbeddingGrad (codegen/lower_embedding.c) and the loss's
CrossEntropyShard, CrossEntropyMerge and their gradients (codegen/lower_cross_entropy_shard.c)
are generated kernels. gpt-tiny and llama-tiny under DP2, FP8 delayed scaling: the NanToInf the
shard pass puts on each amax before its max over dp is in the kernel that computes the amax.

usage: test_plan_kernels.py F8C_BINARY SOURCE_DIR
"""
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from checks import check, finish  # noqa: E402  (tests/checks.py)

# The ops a backend runs as library calls (codegen/target.c runs_in_library: GEMMs, attention,
# collectives).
LIBRARY = {"Linear", "LinearWgrad", "MatMul", "Gemm", "FP8Gemm", "GroupedLinear",
           "GroupedLinearWgrad", "Attention", "AttentionGrad", "AttentionPacked",
           "AttentionPackedGrad", "AllReduce", "AllGather",
           "ReduceScatter", "Send", "Recv"}

# A node line of the graph's text: "  %a : f32[..] <..>, %b ... = Op(%x, ...) {...} ... kernel=k3".
NODE = re.compile(r"^\s+(?:%.*?)?=\s*([A-Za-z][A-Za-z0-9]*)\(")

f8c, source = sys.argv[1], sys.argv[2]
options = ["--micro-batch-size", "2", "--seq-length", "32", "--train-iters", "250", "--lr",
           "3e-3", "--clip-grad", "1.0"]
recipes = [("gpt-tiny", "f32", []), ("gpt-tiny", "delayed", ["--fp8-format", "hybrid"])] + [
    ("gpt-tiny", recipe, ["--fp8-format", "hybrid", "--fp8-recipe", recipe])
    for recipe in ("current", "rowwise", "block")] + [
    ("llama-tiny", "f32", []), ("gpt-tiny", "bf16", ["--bf16"]), ("llama-tiny", "bf16", ["--bf16"]),
    # Router, MoEDispatch, MoECombine and their gradients: codegen/lower_moe.c's kernels.
    ("mixtral-tiny", "f32", []), ("mixtral-tiny", "bf16", ["--bf16"])]
work = tempfile.mkdtemp(prefix="f8c-plan-kernels-")
try:
    for stem, name, fp8 in recipes:
        model = os.path.join(source, "models", stem + ".json")
        plan = os.path.join(work, stem + "-" + name)
        result = subprocess.run([f8c, "compile", model, "-o", plan, *options, *fp8],
                                capture_output=True, text=True, timeout=300)
        check(result.returncode == 0, f"compile {stem} ({name})", result.stdout + result.stderr)
        if result.returncode:
            continue
        with open(os.path.join(plan, "plan.json")) as f:
            graph = json.load(f)["graph"]
        outside, in_kernels, library = collections.Counter(), 0, 0
        attention = 0
        for line in graph.splitlines():
            stripped = line.strip()
            if stripped.startswith(("kernel ", "update ", "input ", "param ", "state ",
                                    "output ", "scale ", "amax_history ", "graph ", "}")):
                continue
            match = NODE.match(line)
            if not match:
                continue
            op = match.group(1)
            attention += op in ("Attention", "AttentionGrad", "AttentionPacked",
                                "AttentionPackedGrad")
            if re.search(r"\skernel=k\d+", line):
                in_kernels += 1
            elif op in LIBRARY:
                library += 1
            else:
                outside[op] += 1
        check(in_kernels > 0 and library > 0,
              f"{stem} ({name}): {in_kernels} nodes in kernels, {library} library calls")
        check(not outside, f"{stem} ({name}): no other node outside a kernel",
              ", ".join(f"{n} {op}" for op, n in outside.most_common()))
        if "--bf16" in fp8:  # cuDNN's fused attention takes bf16
            check(attention > 0, f"{stem} ({name}): attention through cuDNN ({attention} nodes)")
        else:  # f32 attention in MatMuls and Softmax for sm_90
            check(attention == 0, f"{stem} ({name}): no Attention in an f32 plan for sm_90",
                  f"{attention} Attention and AttentionGrad nodes")
    # Tensor parallelism under FP8 current scaling, with sequence parallelism and without:
    # nothing but collectives (LocalShard among them: the ranks' vocabulary starts), GEMMs and
    # attention outside kernels. The shard pass's Amax and ScaleFromAmax around the amax's
    # AllReduce {op="max"} (passes/shard_fp8_gather.c, under SP) are generated kernels
    # (codegen/lower_amax.c), and so are the vocabulary-parallel embedding, its gradient and
    # the loss's four ops (codegen/lower_embedding.c, lower_cross_entropy_shard.c).
    vocabulary = ("Embedding", "EmbeddingGrad", "CrossEntropyShard", "CrossEntropyMerge",
                  "CrossEntropyMergeGrad", "CrossEntropyShardGrad")
    for name, sequence in (("TP2 + SP", ["--sequence-parallel"]), ("TP2", [])):
        plan = os.path.join(work, "gpt-tiny-" + name.replace(" + ", "-").lower())
        result = subprocess.run(
            [f8c, "compile", os.path.join(source, "models", "gpt-tiny.json"), "-o", plan,
             "--world-size", "2", "--tensor-model-parallel-size", "2", *sequence,
             "--micro-batch-size", "2", "--global-batch-size", "2", "--seq-length", "32",
             "--bf16", "--fp8-format", "hybrid", "--fp8-recipe", "current"],
            capture_output=True, text=True, timeout=300)
        title = f"gpt-tiny ({name}, FP8 current)"
        check(result.returncode == 0, f"compile {title}", result.stdout + result.stderr)
        if result.returncode:
            continue
        with open(os.path.join(plan, "plan.json")) as f:
            graph = json.load(f)["graph"]
        seen, lacking = collections.Counter(), []
        for line in graph.splitlines():
            match = NODE.match(line)
            if not match:
                continue
            op, fused = match.group(1), re.search(r"\skernel=k\d+", line) is not None
            seen[op] += 1
            if not fused and op not in LIBRARY and op != "LocalShard":
                lacking.append(line.strip())
        if sequence:
            check(seen["Amax"] > 0 and seen["ScaleFromAmax"] > 0,
                  f"{title}: {seen['Amax']} Amax and {seen['ScaleFromAmax']} ScaleFromAmax "
                  "nodes")
        check(all(seen[op] == 1 for op in vocabulary),
              f"{title}: the vocabulary-parallel embedding and loss, one node of each op",
              ", ".join(f"{seen[op]} {op}" for op in vocabulary))
        check(not lacking, f"{title}: no node outside a kernel besides collectives, GEMMs "
              "and attention", "\n".join(lacking[:6]))
    # Data parallelism under FP8 delayed scaling (gpt-tiny's LayerNorm, GeluGrad and
    # LayerNormGrad kernels, llama-tiny's RMSNorm, SwiGLU and their gradients): each amax
    # reaches its AllReduce {op="max"} over dp through the shard pass's NanToInf (MPI's and
    # NCCL's max drop a NaN), which the fuse pass puts in the kernel that computes the amax, so
    # that it costs no launch of its own.
    VALUE = re.compile(r"%([\w.]+) :")
    for stem in ("gpt-tiny", "llama-tiny"):
        plan = os.path.join(work, stem + "-dp2-delayed")
        result = subprocess.run(
            [f8c, "compile", os.path.join(source, "models", stem + ".json"), "-o", plan,
             "--world-size", "2", "--micro-batch-size", "2", "--global-batch-size", "4",
             "--seq-length", "32", "--bf16", "--fp8-format", "hybrid"],
            capture_output=True, text=True, timeout=300)
        title = f"{stem} (DP2, FP8 delayed)"
        check(result.returncode == 0, f"compile {title}", result.stdout + result.stderr)
        if result.returncode:
            continue
        with open(os.path.join(plan, "plan.json")) as f:
            graph = json.load(f)["graph"]
        kernel_of, guards = {}, []
        for line in graph.splitlines():
            match = NODE.match(line)
            if not match:
                continue
            kernel = re.search(r"\skernel=(k\d+)", line)
            for value in VALUE.findall(line.split(" = ")[0]):
                kernel_of[value] = kernel.group(1) if kernel else None
            guard = re.search(r"=\s*NanToInf\(%([\w.]+)\)", line)
            if guard:
                guards.append((guard.group(1), kernel.group(1) if kernel else None))
        apart = [f"{amax}: {kernel} against {kernel_of.get(amax)}" for amax, kernel in guards
                 if kernel is None or kernel_of.get(amax) != kernel]
        reduced = graph.count('op="max"')
        check(guards and reduced and not apart,
              f"{title}: {len(guards)} NanToInf before {reduced} max all-reduces, each in "
              "the kernel of its amax", "\n".join(apart[:6]))
finally:
    shutil.rmtree(work, ignore_errors=True)
sys.exit(finish())
