"""The FP8 side of the f8c command as a user meets it: `f8c audit` on GPT-2 124M lists every GEMM
with its decision, the first/last-layer policy keeps layers 0 and 11 in high precision with that
reason, --json parses and agrees with itself, bad configurations fail with a hint that says what
to do, `f8c calibrate` writes statistics that `--calibration --fp8-cv-threshold` acts on with the
numbers in the reasons, and dump-ir shows the plan inline. --bf16 (Megatron-LM's mixed
precision) goes with the FP8 options or without them: the audit's head reason says BF16, dump-ir
shows the BF16 copies of the f32 master weights with their reasons, `"bf16": true` in --config
trains, a plan records it, it acts from --after bf16 on, and an MoE's router GEMM stays f32.
`f8c audit --all-ops` lists every op that is not a GEMM with its dtype and reason (attention not
FP8, norms, cross entropy and the optimizer in high precision), and a plan's plan.json carries
those reasons.

usage: test_fp8_cli.py F8C_BINARY SOURCE_DIR
"""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from checks import check, finish  # noqa: E402  (tests/checks.py)

f8c, source = sys.argv[1], sys.argv[2]
gpt2 = os.path.join(source, "models", "gpt2-124m.json")
tiny = os.path.join(source, "models", "gpt-tiny.json")
LINEARS = ["attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2"]
KINDS = ["fwd", "dgrad", "wgrad"]


def run(*args):
    result = subprocess.run([f8c, *args], capture_output=True, timeout=300)
    crashed = result.returncode < 0 or b"Sanitizer" in result.stderr
    check(not crashed, f"f8c {' '.join(args)} does not crash", result.stderr.decode(errors="replace"))
    return result.returncode, result.stdout.decode(errors="replace"), result.stderr.decode(errors="replace")


def audit_json(*args, model=gpt2):
    """The audit as a document, or None (with a failed check) when it does not parse."""
    code, out, err = run("audit", model, "--json", *args)
    try:
        document = json.loads(out)
    except json.JSONDecodeError as error:
        check(False, f"audit {' '.join(args)} --json parses", f"{error}\n{out[:400]}{err}")
        return None
    check(code == 0, f"audit {' '.join(args)} --json succeeds", err)
    return document


code, out, _ = run("help")
check(code == 0 and "audit" in out and "calibrate" in out, "help lists audit and calibrate", out)
code, out, _ = run("audit", "--help")
check(code == 0 and "--fp8-amax-history-len" in out and "Megatron" in out and "1024" in out,
      "audit --help lists the FP8 options, their defaults and Megatron-LM's", out)

# Every GEMM of GPT-2 124M, in the table: 12 layers x 4 Linear x (fwd, dgrad, wgrad) + the head's 3.
code, out, err = run("audit", gpt2)
rows = re.findall(r"^\s*\d+\s+(\S+)\s+(fwd|dgrad|wgrad)\s+\d+x\d+x\d+\s+(.*)$", out, re.M)
expected = {(f"layers.{i}.{name}", kind) for i in range(12) for name in LINEARS for kind in KINDS}
expected |= {("head", kind) for kind in KINDS}
check(code == 0 and len(rows) == 12 * 4 * 3 + 3 and {(s, k) for s, k, _ in rows} == expected,
      "audit lists every GEMM of gpt2-124m once", f"{len(rows)} rows\n{out[:2000]}{err}")
check(all(re.match(r"(x|dy) E[45]M[23] delayed per-tensor", what) for s, _, what in rows if s != "head"),
      "by default every layer GEMM is FP8, delayed, per tensor", out[:2000])
check(all(what.startswith("F32: ") and "head" in what for s, _, what in rows if s == "head"),
      "the head stays high precision by default, with the reason", out[-2000:])
# 147 GEMMs of the Linear layers, and the 72 MatMuls of f32 attention for sm_90 (q k^T and p v
# and their dgrads, 6 a layer: passes/attention_unfused.h), products of two activations in F32.
check(re.search(r"GEMMs in FP8: 144 of 219", out) and "scaling slots: fp8.weights 48" in out
      and re.search(r"amax all-reduce: 144 per-tensor amaxes, 576 bytes", out),
      "the summary counts GEMMs, slots and the amax payload", out[-800:])

# --first-last-layers-bf16: layers 0 and 11 in high precision, citing the policy.
code, out, err = run("audit", gpt2, "--first-last-layers-bf16")
rows = re.findall(r"^\s*\d+\s+(\S+)\s+(fwd|dgrad|wgrad)\s+\d+x\d+x\d+\s+(.*)$", out, re.M)
ends = [what for s, _, what in rows if s.startswith(("layers.0.", "layers.11."))]
check(code == 0 and len(ends) == 24 and all(re.match(r"F32: the (first|last) 1 layer\(s\) in high "
                                                   r"precision by policy", w) for w in ends),
      "--first-last-layers-bf16 keeps layers 0 and 11 in high precision by policy", "\n".join(ends) + err)
middle = [what for s, _, what in rows if re.match(r"layers\.([1-9]|10)\.", s)]
check(len(middle) == 120 and all(not w.startswith("F32") for w in middle),
      "the layers between stay in FP8", "\n".join(middle[:5]))

# --json: the same audit as one document, consistent with itself.
document = audit_json("--first-last-layers-bf16")
if document:
    gemms, summary = document["gemms"], document["summary"]
    fp8 = [g for g in gemms if g["fp8"]]
    check(len(gemms) == 219 and summary["gemms"] == 219 and summary["fp8_gemms"] == len(fp8) == 120
          and all(not g["fp8"] and "a product of two activations" in g["reason"]
                  for g in gemms if g["gemm"] == "MatMul"),
          "--json has every GEMM and counts the FP8 ones", json.dumps(summary))
    check(all(g["reason"] and "by policy" in g["reason"] for g in gemms
              if g["scope"].startswith(("layers.0.", "layers.11.")) and g["gemm"] in KINDS),
          "--json carries the policy's reason", "")
    share = sum(g["flops"] for g in fp8) / sum(g["flops"] for g in gemms)
    check(abs(summary["fp8_flop_share"] - share) < 1e-12 and 0 < share < 1,
          "the FLOP share is the FP8 GEMMs' 2mnk over all", f"{share} {summary}")
    saved = sum(o["numel"] * 3 for g in fp8 for o in g["operands"])  # f32 operands: 4 - 1 bytes
    check(summary["operand_bytes_saved"] == saved, "bytes saved: numel x (4 - 1) per FP8 operand",
          f"{saved} {summary}")
    operand = fp8[0]["operands"][0]
    check(operand["format"] == "E4M3" and operand["recipe"] == "delayed"
          and operand["granularity"] == "per-tensor" and operand["scale_table"] == "fp8.activations.scale",
          "an operand has its format, recipe, granularity and slot", json.dumps(fp8[0]))
    check(summary["amax_allreduce_bytes"] == 4 * summary["per_tensor_amaxes"] > 0,
          "the amax payload is 4 bytes per per-tensor amax", json.dumps(summary))

document = audit_json("--fp8-recipe", "block")
if document:
    fwd = next(g for g in document["gemms"] if g["gemm"] == "fwd" and g["fp8"])
    check([o["granularity"] for o in fwd["operands"]] == ["1x128", "128x128"],
          "block: 1x128 activations, 128x128 weights", json.dumps(fwd))


# Megatron-LM's recipe names are its users' words for current and block scaling.
for megatron, ours in (("tensorwise", "current"), ("blockwise", "block")):
    theirs, mine = audit_json("--fp8-recipe", megatron), audit_json("--fp8-recipe", ours)
    check(theirs and mine and theirs["fp8_recipe"] == ours and theirs["gemms"] == mine["gemms"],
          f"--fp8-recipe {megatron} (Megatron-LM's) plans what --fp8-recipe {ours} does",
          json.dumps(theirs)[:300] if theirs else "no audit")


# FP8 asked for and none of it run (every GEMM fell back) is said on stderr, never silent.
with tempfile.TemporaryDirectory() as folder:
    shape = ["--micro-batch-size", "2", "--seq-length", "32", "--fp8-format", "hybrid"]
    for recipe, warned in (("mxfp8", True), ("delayed", False)):
        code, out, err = run("compile", tiny, "-o", os.path.join(folder, recipe), *shape,
                             "--fp8-recipe", recipe, "--allow-fallback")
        said = re.search(r"warning: FP8 was asked for .* but 0 of \d+ GEMMs run in FP8", err)
        check(code == 0 and bool(said) == warned,
              f"compile --fp8-recipe {recipe} --allow-fallback: "
              f"{'warns that no GEMM runs in FP8' if warned else 'no warning'}", err)


def refused(args, what, must_say, model=gpt2):
    code, out, err = run("audit", model, *args)
    check(code != 0 and "HINT:" in err and all(s in err for s in must_say),
          f"{what}: an error that says what to do", f"exit {code}\n{err}")
    check(out == "", f"{what}: nothing on stdout", out[:200])


refused(["--fp8-format", "e5m2"], "pure E5M2", ["E5M2 x E5M2", "--fp8-format hybrid"])
refused(["--fp8-recipe", "mxfp8"], "mxfp8 on sm_90", ["sm_100", "--allow-fallback"])
refused(["--fp8-amax-history-len", "0"], "history length 0", ["--fp8-amax-history-len", "at least 1"])
refused(["--fp8-exclude", "layers.99.*"], "an exclude matching nothing", ["layers.99.*", "matches no"])
refused(["--fp8-recipe", "fastest"], "an unknown recipe", ["delayed|current|rowwise|block|mxfp8"])
refused(["--fp8-cv-threshold", "0.5"], "a threshold without statistics", ["--calibration", "f8c calibrate"])

document = audit_json("--fp8-recipe", "mxfp8", "--allow-fallback")
if document:
    layers = [g for g in document["gemms"] if g["scope"] != "head" and g["gemm"] in KINDS]
    check(layers and all(not g["fp8"] and "fallback by --allow-fallback" in g["reason"]
                         and "sm_100" in g["reason"] for g in layers),
          "--allow-fallback records each fallback with its reason", json.dumps(layers[:1]))

with tempfile.TemporaryDirectory() as folder:
    # Precision configs: a good one acts, a malformed one names the file and the rule.
    good = os.path.join(folder, "good.json")
    with open(good, "w") as file:
        json.dump({"rules": [{"scope": "layers.0.*", "gemms": ["wgrad"], "fp8": False,
                              "reason": "keep the first wgrad wide"},
                             {"scope": "head", "fp8": True, "recipe": "current"}]}, file)
    document = audit_json("--precision-config", good, model=tiny)
    if document:
        first = [g for g in document["gemms"]
                 if g["scope"].startswith("layers.0.") and g["gemm"] in KINDS]
        head = [g for g in document["gemms"] if g["scope"] == "head"]
        check(all(g["fp8"] == (g["gemm"] != "wgrad") for g in first)
              and all("good.json: rule 1: keep the first wgrad wide" in g["reason"]
                      for g in first if not g["fp8"]),
              "a config rule keeps the wgrads it names, with its reason", json.dumps(first[:2]))
        check(all(g["fp8"] and g["operands"][0]["recipe"] == "current" for g in head),
              "a config rule puts the head in FP8 with its own recipe", json.dumps(head[:1]))
    for name, text, must_say in [
            ("unknown_key.json", '{"rules": [{"scope": "head", "fp8": false, "colour": 1}]}',
             ["rule 1", 'unknown key "colour"']),
            ("bad_value.json", '{"rules": [{"scope": "head", "fp8": "no"}]}', ["rule 1", '"fp8"']),
            ("bad_gemm.json", '{"rules": [{"scope": "head", "fp8": false, "gemms": ["bwd"]}]}',
             ["rule 1", "fwd, dgrad and wgrad"]),
            ("truncated.json", '{"rules": [{"scope": ', ["malformed JSON"]),
            ("no_match.json", '{"rules": [{"scope": "layers.9.*", "fp8": false}]}',
             ["rule 1", "layers.9.*", "matches no"])]:
        path = os.path.join(folder, name)
        with open(path, "w") as file:
            file.write(text)
        refused(["--precision-config", path], f"precision config {name}", [name] + must_say, model=tiny)

    # FP8 options in f8c train need --fp8-format, on the command line and in --config.
    tokens = os.path.join(folder, "notes.bin")
    code, _, err = run("tokenize", os.path.join(source, "data", "fp8-notes.txt"), "-o", tokens)
    check(code == 0, "tokenize makes the calibration data", err)
    code, _, err = run("train", tiny, "--data", tokens, "--train-iters", "1", "--seq-length", "16",
                       "--fp8-recipe", "current")
    check(code == 2 and "without --fp8-format" in err and "HINT:" in err,
          "train: an FP8 option without --fp8-format is an error saying so", err)
    config = os.path.join(folder, "config.json")
    with open(config, "w") as file:
        json.dump({"train-iters": 1, "seq-length": 16, "fp8_exclude": ["layers.0.*"]}, file)
    code, _, err = run("train", tiny, "--data", tokens, "--config", config)
    check(code == 2 and "--fp8-exclude without --fp8-format" in err,
          "train --config: the FP8 keys follow the same rule", err)

    # Calibration: statistics written, read back, acted on.
    stats = os.path.join(folder, "stats.json")
    code, _, err = run("calibrate", tiny, "--data", tokens, "--steps", "3", "--seq-length", "32",
                       "--micro-batch-size", "2", "-o", stats)
    check(code == 0 and os.path.exists(stats), "calibrate writes STATS.json", err)
    code, _, err = run("calibrate", tiny, "--data", tokens, "--seq-length", "32", "-o", stats)
    check(code == 2 and "--steps" in err, "calibrate without --steps is a usage error", err)
    entries = []
    try:
        with open(stats) as file:
            calibration = json.load(file)
        entries = calibration["tensors"]
        check(calibration["format"] == "f8c-calibration" and calibration["version"] == 2
              and calibration["steps"] == 3 and calibration["fp8_format"] == "hybrid"
              and re.fullmatch(r"[0-9a-f]{16}", calibration["model_digest"])
              and calibration["linear_layers"] == 17,
              "the statistics' header", json.dumps({k: v for k, v in calibration.items() if k != "tensors"}))
        scopes = {f"layers.{i}.{name}" for i in range(4) for name in LINEARS} | {"head"}
        check({(e["scope"], e["role"]) for e in entries} == {(s, r) for s in scopes for r in ("x", "w", "dy")}
              and len(entries) == 3 * len(scopes),
              "one entry per Linear layer and role", str([(e["scope"], e["role"]) for e in entries]))
        check(all(e["steps"] == 3 and e["amax_mean"] > 0 and e["amax_std"] >= 0 and e["max_step_ratio"] >= 1
                  and abs(e["amax_cv"] - e["amax_std"] / e["amax_mean"]) < 1e-12
                  and 0 <= e["underflow"] <= 1 and 0 <= e["saturate"] <= 1 for e in entries),
              "each entry's statistics are in range and agree", json.dumps(entries[:2]))
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as error:
        check(False, "STATS.json is a calibration document", str(error))

    # A threshold between two layers' worst CVs keeps the unsteady ones in high precision.
    worst = {}
    for e in entries:
        if e["scope"] != "head" and e["amax_cv"] >= worst.get(e["scope"], (-1,))[0]:
            worst[e["scope"]] = (e["amax_cv"], e)
    values = sorted({cv for cv, _ in worst.values()})
    if len(values) >= 2:
        middle = len(values) // 2
        threshold = (values[middle - 1] + values[middle]) / 2
        document = audit_json("--calibration", stats, "--fp8-cv-threshold", repr(threshold), model=tiny)
        above = {s for s, (cv, _) in worst.items() if cv > threshold}
        check(above and len(above) < len(worst), "the threshold splits the layers", str(values))
        for g in document["gemms"] if document else []:
            if g["scope"] not in worst:
                continue
            cv, entry = worst[g["scope"]]
            if g["scope"] in above:
                check(not g["fp8"] and "calibration" in g["reason"] and f"{cv:.3g}" in g["reason"]
                      and f"--fp8-cv-threshold {threshold:g}" in g["reason"] and entry["role"] in g["reason"],
                      f"{g['scope']} {g['gemm']} (CV {cv:.3g}) stays high precision, citing the numbers",
                      g["reason"])
            else:
                check(g["fp8"], f"{g['scope']} {g['gemm']} (CV {cv:.3g}) stays FP8", g["reason"])
    else:
        check(False, "the calibration tells the layers apart", str(values))
    refused(["--calibration", stats], "statistics without a threshold", ["--fp8-cv-threshold"], model=tiny)
    broken = os.path.join(folder, "broken.json")
    with open(broken, "w") as file:
        json.dump({"format": "f8c-calibration", "version": 1, "tensors": []}, file)
    refused(["--calibration", broken, "--fp8-cv-threshold", "1"], "a malformed calibration file",
            ["broken.json", "f8c calibrate"], model=tiny)
    # Statistics are bound to the model they were taken of: gpt2-124m shares gpt-tiny's scopes
    # (layers.0-3) but has more layers; llama-tiny has as many Linear layers, of the same
    # names and other shapes.
    for other, lacking in (("gpt2-124m", "it has none of layers.4.attn.qkv"),
                           ("llama-tiny", "17 Linear layers, of other scopes or shapes")):
        refused(["--calibration", stats, "--fp8-cv-threshold", "1"],
                f"gpt-tiny's statistics for {other}",
                ["holds the statistics of", "gpt-tiny.json", "not of this model", lacking,
                 "calibrate this model"], model=os.path.join(source, "models", other + ".json"))
    with open(stats) as file:
        moved = json.load(file)
    moved["model_digest"] = "%016x" % (int(moved["model_digest"], 16) ^ 1)
    edited = os.path.join(folder, "edited.json")
    with open(edited, "w") as file:
        json.dump(moved, file)
    refused(["--calibration", edited, "--fp8-cv-threshold", "1"],
            "statistics whose digest is not the model's, though every scope matches",
            ["not of this model (17 Linear layers, of other scopes or shapes)"], model=tiny)

# dump-ir shows the plan inline, with the same options.
code, out, err = run("dump-ir", tiny, "--after", "fp8-cast", "--first-last-layers-bf16")
check(code == 0 and "FP8Gemm" in out and "CastTranspose" in out and "ScalingUpdate" in out
      and 'reason="kept F32: the first 1 layer(s)' in out and "phase=cast" in out,
      "dump-ir --after fp8-cast shows the casts, the GEMMs and the decisions", err + out[:400])
code, out, err = run("dump-ir", tiny, "--after", "training", "--fp8-recipe", "current")
check(code == 2 and "--after precision" in err, "dump-ir: FP8 options before precision are an error", err)

# --bf16: the FP8 passes as they are, on a BF16 forward over f32 master weights.
code, out, err = run("audit", tiny, "--bf16")
heads = re.findall(r"^\s*\d+\s+head\s+(?:fwd|dgrad|wgrad)\s+\S+\s+(.*)$", out, re.M)
check(code == 0 and "--bf16: BF16 activations" in out and len(heads) == 3
      and all(h.startswith("BF16: the output head") for h in heads),
      "audit --bf16: the head is kept BF16, and the heading says --bf16", err + out[:600])
document = audit_json("--bf16", model=tiny)
if document:
    check(document["bf16"] is True and all(g["dtype"] == "BF16" for g in document["gemms"]),
          "audit --bf16 --json: every GEMM computes in BF16 (FP8 ones write BF16)", str(document)[:400])
code, out, err = run("dump-ir", tiny, "--after", "training", "--bf16")
check(code == 0 and 'embed.weight.bf16 : bf16[256, 128] <format=bf16, reason="kept BF16: --bf16: '
      "the forward's copy of the f32 master weight embed.weight\"> = Cast(%embed.weight)" in out
      and "param %embed.weight : f32[256, 128]" in out
      and re.search(r"%loss : f32\[\]", out) and "state %embed.weight.main_grad : f32[256, 128]" in out,
      "dump-ir --bf16: BF16 copies of the f32 parameters, the loss and main_grad f32", err + out[:400])
mixtral = os.path.join(source, "models", "mixtral-tiny.json")
code, out, err = run("dump-ir", mixtral, "--after", "bf16", "--bf16")
routers = re.findall(r"^\s*%(layers\.\d+\.mlp\.router) : (\w+)\[batch\*seq, 4\] = Linear\(%(\S+), "
                     r"%layers\.\d+\.mlp\.router\.weight\)", out, re.M)
check(code == 0 and len(routers) == 2 and all(d == "f32" and x.endswith("tokens.f32") for _, d, x in routers)
      and "param %layers.0.mlp.router.weight : f32[4, 128]" in out
      and "reason=\"kept F32: --bf16: the router's logits of layers.0.mlp.router in f32" in out
      and re.search(r"dispatch\.rows : bf16\[", out),
      "dump-ir --bf16 on an MoE: the router's GEMM reads f32 (Megatron's --moe-router-dtype fp32), "
      "the experts BF16", err + str(routers))
# An MoE router's Linear stays high precision by default (DeepSeek-V3 and Megatron-LM keep the
# gating so), so an MoE plans FP8 with no --allow-fallback: mixtral-tiny's N=4 router would
# otherwise be refused on sm_90.
document = audit_json(model=mixtral)
if document:
    routers = [g for g in document["gemms"] if g["scope"].endswith(".router")]
    check(len(routers) == 6 and all(not g["fp8"] and "MoE router's gating stays in high precision"
                                    in g["reason"] for g in routers),
          "audit of an MoE: its routers' fwd, dgrad and wgrad stay high precision, with the reason",
          json.dumps(routers)[:600])
# --all-ops: every op that is not a GEMM has its decision, attention's saying it is not FP8.
llama = os.path.join(source, "models", "llama-tiny.json")
document = audit_json("--bf16", "--fp8-format", "hybrid", "--all-ops", model=llama)
if document:
    ops = document.get("ops", [])
    count = {op: sum(1 for o in ops if o["op"] == op) for op in
             ["Attention", "AttentionGrad", "RMSNorm", "RMSNormGrad", "CrossEntropy",
              "CrossEntropyGrad", "Embedding", "EmbeddingGrad", "GlobalNorm", "AdamW"]}
    layers = json.load(open(llama))["layers"]
    check(count["Attention"] == layers and count["AttentionGrad"] == layers
          and count["RMSNorm"] == 2 * layers + 1 and count["RMSNormGrad"] == 2 * layers + 1
          and all(count[op] == 1 for op in ["CrossEntropy", "CrossEntropyGrad", "Embedding",
                                            "EmbeddingGrad", "GlobalNorm"])
          and count["AdamW"] > 0 and all(o["reason"] for o in ops)
          and all("not FP8" in o["reason"] for o in ops if o["op"] == "Attention")
          and all(o["dtype"] == "F32" for o in ops if o["op"] in ("CrossEntropy", "AdamW")),
          "audit --all-ops: each attention, norm, cross entropy, embedding and optimizer op "
          "with its dtype and reason", f"{count}\n{json.dumps(ops[:4])[:800]}")
code, out, err = run("audit", llama, "--bf16", "--fp8-format", "hybrid", "--all-ops")
check(code == 0 and re.search(r"^\s*\d+\s+layers\.0\.attn\.core\s+Attention\s+fwd\s+BF16: "
                              r"softmax statistics in f32; not FP8", out, re.M),
      "audit --all-ops: the table lists attention in BF16, not FP8, with why", err + out[-600:])
code, out, err = run("dump-ir", tiny, "--after", "fuse-patterns", "--bf16")
check(code == 2 and "--after bf16" in err, "dump-ir: --bf16 before the bf16 pass is an error", err)
with tempfile.TemporaryDirectory() as folder:
    data = os.path.join(folder, "tokens.bin")
    config = os.path.join(folder, "config.json")
    plan = os.path.join(folder, "plan")
    with open(os.path.join(folder, "text.txt"), "w") as file:
        file.write("bf16 master weights and main_grad in f32. " * 400)
    run("tokenize", os.path.join(folder, "text.txt"), "-o", data)
    with open(config, "w") as file:
        json.dump({"bf16": True, "micro_batch_size": 2, "seq_length": 32, "train_iters": 2}, file)
    code, out, err = run("train", tiny, "--data", data, "--config", config)
    check(code == 0 and "done: iteration 2" in err, 'train with "bf16": true in --config', err)
    code, out, err = run("compile", tiny, "-o", plan, "--bf16", "--micro-batch-size", "2",
                         "--seq-length", "32")
    with open(os.path.join(plan, "plan.json")) as file:
        text = file.read() if code == 0 else "{}"
    recorded = json.loads(text).get("compile_args", [])
    check(code == 0 and "--bf16" in recorded, "a plan records --bf16", err + str(recorded))
    check("norms stay out of FP8" in text and "log-sum-exp over the vocabulary" in text
          and "not FP8: f8c plans no FP8 attention" in text,
          "plan.json carries the norms', the loss's and attention's precision reasons",
          text[:400])
    code, out, err = run("train", plan, "--data", data, "--train-iters", "2", "--bf16")
    check(code == 2 and "compiled into the plan" in err, "train PLAN --bf16 is refused", err)

sys.exit(finish())
