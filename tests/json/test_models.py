"""The model zoo (models/*.json) through `f8c dump-ir --format json`: every model loads and
verifies; its parameters are exactly those an independent reading of its description expects
(names, shapes, dtype, and so the count, held against the published counts where there are
some, less Megatron-LM's dummy tokens of the padded vocabulary); every node has a scope and every layer its scopes; symbolic sizes bind with --dim; the
text form round-trips; and the 96-layer GPT-3 175B builds in well under a second.

usage: test_models.py F8C_BINARY SOURCE_DIR
"""
import glob
import json
import math
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from checks import check, finish  # noqa: E402  (tests/checks.py)

f8c, source = sys.argv[1], sys.argv[2]

# Published parameter counts (tied embeddings for the GPTs).
PUBLISHED = {
    "gpt2-124m": 124_439_808,
    "gpt3-175b": 174_604_259_328,
    "llama3-8b": 8_030_261_248,
    "llama3-70b": 70_553_706_496,
    "mixtral-8x7b": 46_702_792_704,
}




def run(*args):
    result = subprocess.run([f8c, *args], capture_output=True, timeout=120)
    crashed = result.returncode < 0 or b"Sanitizer" in result.stderr
    check(not crashed, f"f8c {' '.join(args)} does not crash",
          result.stderr.decode(errors="replace"))
    return result.returncode, result.stdout.decode(), result.stderr.decode(errors="replace")


def settings(config):
    """The description with the defaults of frontend/README.md filled in."""
    gpt = config["arch"] == "gpt"
    hidden = config["hidden"]
    llama_ffn = 256 * math.ceil((8 * hidden // 3) / 256)
    full = {
        "kv_heads": config["heads"], "ffn": 4 * hidden if gpt else llama_ffn,
        "norm": "layernorm" if gpt else "rmsnorm", "act": "gelu_tanh" if gpt else "swiglu",
        "pos": "learned" if gpt else "rope", "bias": gpt, "tie_embeddings": gpt, "dtype": "f32",
        "make_vocab_size_divisible_by": 128,
    }
    full.update(config)
    return full


def padded_vocab(config):
    """The embedding's and the head's rows: vocab rounded up to make_vocab_size_divisible_by."""
    c = settings(config)
    multiple = c["make_vocab_size_divisible_by"]
    return -(-c["vocab"] // multiple) * multiple


def expected_parameters(config):
    """{name: shape} of every parameter, as PyTorch would name them."""
    c = settings(config)
    hidden, heads, kv_heads, ffn = c["hidden"], c["heads"], c["kv_heads"], c["ffn"]
    head_dim = hidden // heads
    fc1 = 2 * ffn if c["act"] == "swiglu" else ffn
    params = {"embed.weight": [padded_vocab(config), hidden]}
    if c["pos"] == "learned":
        params["pos_embed.weight"] = [c["seq"], hidden]

    def norm(name):
        params[f"{name}.weight"] = [hidden]
        if c["norm"] == "layernorm" and c["bias"]:
            params[f"{name}.bias"] = [hidden]

    def linear(name, n, k):
        params[f"{name}.weight"] = [n, k]
        if c["bias"]:
            params[f"{name}.bias"] = [n]

    for i in range(c["layers"]):
        layer = f"layers.{i}"
        norm(f"{layer}.attn_norm")
        linear(f"{layer}.attn.qkv", (heads + 2 * kv_heads) * head_dim, hidden)
        linear(f"{layer}.attn.proj", hidden, heads * head_dim)
        norm(f"{layer}.mlp_norm")
        if c["arch"] == "moe":
            experts = c["experts"]
            params[f"{layer}.mlp.router.weight"] = [experts, hidden]
            params[f"{layer}.mlp.experts.fc1.weight"] = [experts, fc1, hidden]
            params[f"{layer}.mlp.experts.fc2.weight"] = [experts, hidden, ffn]
        else:
            linear(f"{layer}.mlp.fc1", fc1, hidden)
            linear(f"{layer}.mlp.fc2", hidden, ffn)
    norm("final_norm")
    if not c["tie_embeddings"]:
        params["head.weight"] = [padded_vocab(config), hidden]
    return params


def expected_scopes(config):
    c = settings(config)
    scopes = {"embed", "final_norm", "head"} | ({"rope"} if c["pos"] == "rope" else {"pos_embed"})
    per_layer = ["attn_norm", "attn.qkv", "attn", "attn.core", "attn.proj", "mlp_norm"]
    if c["arch"] == "moe":
        per_layer += ["mlp.router", "mlp.dispatch", "mlp.experts.fc1", "mlp.experts",
                      "mlp.experts.fc2", "mlp.combine"]
    else:
        per_layer += ["mlp.fc1", "mlp", "mlp.fc2"]
    for i in range(c["layers"]):
        scopes |= {f"layers.{i}"} | {f"layers.{i}.{s}" for s in per_layer}
    return scopes


def check_model(path):
    name = os.path.basename(path)[:-len(".json")]
    with open(path) as file:
        config = json.load(file)
    code, out, err = run("dump-ir", path, "--format", "json")
    check(code == 0, f"{name} loads", err)
    if code:
        return
    graph = json.loads(out)
    params = {v["name"]: v for v in graph["inputs"] if v["role"] == "param"}
    expected = expected_parameters(config)
    got = {n: v["shape"] for n, v in params.items()}
    missing, extra = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
    check(not missing and not extra, f"{name}: the parameters by name",
          f"missing {missing[:5]}, unexpected {extra[:5]}")
    wrong = [n for n in expected if n in got and got[n] != expected[n]]
    check(not wrong, f"{name}: the parameters' shapes",
          str([(n, got[n], expected[n]) for n in wrong[:5]]))
    dtype = settings(config)["dtype"]
    check(all(v["dtype"] == dtype for v in params.values()), f"{name}: parameters are {dtype}")
    count = sum(math.prod(v["shape"]) for v in params.values())
    check(count == sum(math.prod(s) for s in expected.values()), f"{name}: {count:,} parameters")
    if name in PUBLISHED:
        c = settings(config)
        tables = 1 if c["tie_embeddings"] else 2
        dummy = (padded_vocab(config) - c["vocab"]) * c["hidden"] * tables
        check(count - dummy == PUBLISHED[name],
              f"{name}: {count:,} parameters, {dummy:,} of them dummy tokens' rows; published "
              f"{PUBLISHED[name]:,}")
    print(f"{name}: {count:,} parameters, {len(graph['nodes'])} nodes")

    tokens = graph["inputs"][0]
    check((tokens["name"], tokens["dtype"], tokens["shape"]) == ("tokens", "i64", ["batch", "seq"]),
          f"{name}: input %tokens : i64[batch, seq]", str(tokens))
    logits = [o for n in graph["nodes"] for o in n["outputs"] if o["name"] == "logits"]
    logits_shape = logits[0]["shape"] if logits else None
    check(graph["outputs"] == ["logits"] and
          logits_shape == ["batch", "seq", padded_vocab(config)],
          f"{name}: output %logits : [batch, seq, padded vocab]", str(logits))
    scopes = [n.get("scope") for n in graph["nodes"]]
    check(all(scopes), f"{name}: every node has a scope")
    absent = sorted(expected_scopes(config) - set(scopes))
    check(not absent, f"{name}: every layer has its scopes", str(absent[:8]))
    attention = [n for n in graph["nodes"] if n["op"] == "Attention"]
    causal = all(n["attrs"].get("causal") == 1 for n in attention)
    check(len(attention) == config["layers"] and causal,
          f"{name}: one causal Attention per layer")


for path in sorted(glob.glob(os.path.join(source, "models", "*.json"))):
    check_model(path)
check(len(glob.glob(os.path.join(source, "models", "*.json"))) >= 9, "the zoo has its nine models")

# Symbolic sizes bind to numbers.
code, out, err = run("dump-ir", os.path.join(source, "models", "gpt-tiny.json"), "--dim", "batch=8",
                     "--dim", "seq=128", "--format", "json")
if code == 0:
    shapes = {o["name"]: o["shape"] for n in json.loads(out)["nodes"] for o in n["outputs"]}
    check(shapes["logits"] == [8, 128, 256] and shapes["pos_embed"] == [128, 128],
          "--dim binds batch and seq", str(shapes["logits"]))
else:
    check(False, "--dim batch=8 --dim seq=128 works on gpt-tiny", err)

# The padded vocabulary: Megatron-LM's 128 by default, the description's
# make_vocab_size_divisible_by, or --make-vocab-size-divisible-by on the command line (which wins).
with tempfile.TemporaryDirectory() as folder:
    described = os.path.join(folder, "gpt-odd.json")
    with open(described, "w") as file:
        json.dump({"arch": "gpt", "vocab": 1001, "seq": 32, "layers": 1, "hidden": 64, "heads": 4,
                   "make_vocab_size_divisible_by": 100}, file)
    code, out, err = run("dump-ir", described, "--format", "json")
    rows = {v["name"]: v["shape"] for v in json.loads(out)["inputs"]}["embed.weight"] if not code \
        else None
    check(rows == [1100, 64], "the description's make_vocab_size_divisible_by 100 pads 1001 to 1100",
          err or str(rows))
    model = os.path.join(source, "models", "gpt2-124m.json")
    for given, n, said in [([], 50304, True), (["--make-vocab-size-divisible-by", "1"], 50257, False),
                           (["--make-vocab-size-divisible-by", "1000"], 51000, True)]:
        code, out, err = run("audit", model, "--seq-length", "64", *given)
        head = [line for line in out.splitlines() if " head " in line and " fwd " in line]
        line = "padded vocab (size: 50257) with"
        check(code == 0 and head and f"x{n}x768" in head[0] and (line in out) == said,
              f"audit {' '.join(given) or '(default)'}: the head's n is {n}, padding "
              f"{'said' if said else 'not said'}", err + (head[0] if head else out[-400:]))
    code, out, err = run("audit", model, "--make-vocab-size-divisible-by", "0")
    check(code == 2 and "--make-vocab-size-divisible-by needs a positive integer" in err,
          "--make-vocab-size-divisible-by 0 is refused", err)

# The text form round-trips: print, parse, print.
with tempfile.TemporaryDirectory() as folder:
    for name in ["gpt-tiny", "llama-tiny", "mixtral-8x7b"]:
        code, first, err = run("dump-ir", os.path.join(source, "models", f"{name}.json"))
        text_path = os.path.join(folder, f"{name}.f8ir")
        with open(text_path, "w") as file:
            file.write(first)
        code2, second, err2 = run("dump-ir", text_path, "--verify")
        check(code == 0 and code2 == 0 and first == second, f"{name}: the text form round-trips",
              err + err2)

sys.exit(finish())
