"""f8c export-onnx end to end: for gpt-tiny, llama-tiny, a tiny MoE and two random small
configurations made fresh each run (their seed is printed; F8C_TEST_SEED repeats a run), the
written model passes onnx.checker (full check), onnxruntime runs it at two shapes and agrees with
a NumPy forward pass of the description (reference.py), the same seed gives the same bytes and
another seed other weights, the weights follow Megatron-LM's initialization, and f8c imports the
ONNX model back and fuses it to the same high-level ops as the JSON graph. Then bf16, other
opsets, and the errors: each exits non-zero with a clear message and leaves no file behind.

usage: test_export.py F8C_BINARY SOURCE_DIR
"""
import collections
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from checks import check, finish  # noqa: E402  (tests/checks.py)

f8c, source = sys.argv[1], sys.argv[2]
HIGH_LEVEL = ["Embedding", "Linear", "Attention", "LayerNorm", "RMSNorm", "Gelu", "SwiGLU", "Rope"]




def run(*args, timeout=120):
    result = subprocess.run([f8c, *args], capture_output=True, timeout=timeout)
    crashed = result.returncode < 0 or b"Sanitizer" in result.stderr
    check(not crashed, f"f8c {' '.join(args)} does not crash", result.stderr.decode(errors="replace"))
    return result.returncode, result.stdout.decode(errors="replace"), result.stderr.decode(errors="replace")


def write_json(folder, name, config):
    path = os.path.join(folder, name + ".json")
    with open(path, "w") as file:
        json.dump(config, file)
    return path


def export(description, output, *options):
    code, _, err = run("export-onnx", description, "-o", output, *options)
    check(code == 0 and os.path.exists(output) and os.path.exists(output + ".data"),
          f"export-onnx {os.path.basename(description)} {' '.join(options)}", err)
    return code == 0


def files_in(folder):
    return sorted(os.listdir(folder))


def weights_of(path):
    """The weights (the initializers in external data) by name, as float32."""
    header = onnx.load(path, load_external_data=False)
    external = {t.name for t in header.graph.initializer
                if t.data_location == onnx.TensorProto.EXTERNAL}
    model = onnx.load(path)  # external data loaded from next to the model
    return {t.name: numpy_helper.to_array(t).astype(np.float32) for t in model.graph.initializer
            if t.name in external}


def high_level_ops(path, after):
    code, out, err = run("dump-ir", path, "--after", after, "--report")
    check(code == 0, f"dump-ir {os.path.basename(path)} --after {after}", err)
    return collections.Counter(re.findall(r"= ([A-Za-z]+)\(", out)), err


def check_round_trip(name, description, model_path, config):
    """f8c reads the ONNX model back and fuses it to the JSON graph's high-level ops."""
    json_ops, _ = high_level_ops(description, "canonicalize")
    onnx_ops, report = high_level_ops(model_path, "fuse-patterns")
    for op in HIGH_LEVEL:
        check(json_ops[op] == onnx_ops[op], f"{name}: {op} x{json_ops[op]} round-trips",
              f"JSON graph {json_ops[op]}, ONNX graph {onnx_ops[op]}\n{report}")
    left = re.search(r"(\d+) primitive nodes? left", report)
    # A dense MoE layer leaves its router's Softmax and the two expert products (3-D weights).
    expected = 3 * config["layers"] if config["arch"] == "moe" else 0
    check(left and int(left.group(1)) == expected,
          f"{name}: {expected} primitive nodes left where patterns look", report)


def padded_vocab(config):
    """The logits' width: vocab padded to make_vocab_size_divisible_by (frontend/README.md)."""
    multiple = config.get("make_vocab_size_divisible_by", 128)
    return -(-config["vocab"] // multiple) * multiple


def check_runtime(name, model_path, config, weights):
    """onnxruntime runs the model at two shapes; the logits are finite and the reference's."""
    session = onnxruntime.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(7)
    for batch, seq in ((2, 5), (1, config["seq"])):
        tokens = rng.integers(0, config["vocab"], size=(batch, seq), dtype=np.int64)
        logits = session.run(["logits"], {"tokens": tokens})[0]
        rows = padded_vocab(config)
        check(logits.shape == (batch, seq, rows) and np.isfinite(logits).all(),
              f"{name}: onnxruntime gives finite logits {batch}x{seq}", str(logits.shape))
        expected = reference.forward(config, weights, tokens)
        error = np.abs(logits - expected).max() / max(np.abs(expected).max(), 1e-6)
        check(error < 2e-4, f"{name}: onnxruntime agrees with the NumPy forward pass at "
              f"{batch}x{seq}", f"normalized error {error:.3g}")


MASK = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15


def splitmix64_mix(z):
    """splitmix64's output function on uint64 arrays (wrapping arithmetic)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def made_up_weight(name, count, seed, std):
    """The generator onnx_export.h documents, written again from its description."""
    fnv = 0xCBF29CE484222325
    for byte in name.encode():
        fnv = ((fnv ^ byte) * 0x100000001B3) & MASK
    key = int(splitmix64_mix(np.array([seed], dtype=np.uint64))[0]) ^ fnv
    pairs = np.arange((count + 1) // 2, dtype=np.uint64)
    with np.errstate(over="ignore"):
        def uniform(j):
            return (splitmix64_mix(np.uint64(key) + (j + np.uint64(1)) * np.uint64(GAMMA))
                    >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
        u1, u2 = 1.0 - uniform(2 * pairs), uniform(2 * pairs + np.uint64(1))
    radius, angle = np.sqrt(-2.0 * np.log(u1)), 2.0 * np.pi * u2
    z = np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1).reshape(-1)[:count]
    return (z * std).astype(np.float32)


def check_initialization(name, weights, config, seed=1234):
    """Megatron-LM's initialization, number for number: norms' scales 1, biases 0, the residual
    branches' output projections normal(0, 0.02 / sqrt(2 layers)), the rest normal(0, 0.02)."""
    scaled = 0.02 / math.sqrt(2 * config["layers"])
    for key, value in weights.items():
        if key.endswith("norm.weight"):
            expected = np.ones_like(value)
        elif key.endswith(".bias"):
            expected = np.zeros_like(value)
        else:
            output_projection = key.endswith(("attn.proj.weight", "fc2.weight"))
            std = scaled if output_projection else 0.02
            expected = made_up_weight(key, value.size, seed, std).reshape(value.shape)
        # libm's log, cos and sin may differ from NumPy's in the last bit
        check(np.allclose(value, expected, rtol=1e-6, atol=0),
              f"{name}: {key} is initialized as documented",
              f"largest difference {np.abs(value - expected).max()}")


def check_determinism(name, description, model_path, folder):
    """The same seed writes the same bytes; another seed other weights of the same shapes."""
    again = os.path.join(folder, "again")
    os.mkdir(again)
    same = os.path.join(again, os.path.basename(model_path))
    if not export(description, same):
        return
    for suffix in ("", ".data"):
        with open(model_path + suffix, "rb") as a, open(same + suffix, "rb") as b:
            check(a.read() == b.read(), f"{name}: the same seed writes the same {suffix or '.onnx'}")
    other = os.path.join(folder, "other.onnx")
    if export(description, other, "--seed", "99"):
        first, second = weights_of(model_path), weights_of(other)
        check(first.keys() == second.keys(), f"{name}: another seed, the same weights' names")
        random_ones = [k for k in first if first[k].std() > 0]
        check(all(first[k].shape == second[k].shape and not np.array_equal(first[k], second[k])
                  for k in random_ones), f"{name}: another seed, other weights")


def check_model(name, config, root):
    folder = os.path.join(root, name)
    os.mkdir(folder)
    description = write_json(folder, name, config)
    model_path = os.path.join(folder, "model.onnx")
    if not export(description, model_path):
        return
    check(files_in(folder) == sorted([name + ".json", "model.onnx", "model.onnx.data"]),
          f"{name}: the model and its data, no other file", str(files_in(folder)))
    try:
        onnx.checker.check_model(model_path, full_check=True)
        check(True, f"{name}: onnx.checker")
    except Exception as error:  # the checker's errors have no common type
        check(False, f"{name}: onnx.checker", str(error))
    weights = weights_of(model_path)
    check_runtime(name, model_path, config, weights)
    check_initialization(name, weights, config)
    check_round_trip(name, description, model_path, config)
    check_determinism(name, description, model_path, folder)


def random_config(rng, index):
    """A small description with every field chosen at random (and written out)."""
    heads = rng.choice([1, 2, 4])
    arch = rng.choice(["gpt", "llama", "moe"])
    config = {"name": f"random{index}", "arch": arch, "vocab": rng.randrange(40, 100),
              "seq": rng.randrange(8, 24), "layers": rng.randrange(1, 3),
              "hidden": heads * rng.choice([8, 16]), "heads": heads,
              "kv_heads": rng.choice([k for k in (1, 2, 4) if heads % k == 0]),
              "ffn": 8 * rng.randrange(2, 9), "norm": rng.choice(["layernorm", "rmsnorm"]),
              "act": rng.choice(["gelu", "gelu_tanh", "swiglu"]),
              "pos": rng.choice(["learned", "rope"]),
              "bias": arch != "moe" and rng.random() < 0.5,
              "tie_embeddings": rng.random() < 0.5}
    multiple = rng.choice([None, 1, 8, 64])  # None: the default, 128
    if multiple:
        config["make_vocab_size_divisible_by"] = multiple
    if arch == "moe":
        config["experts"] = rng.randrange(2, 5)
        config["top_k"] = rng.randrange(1, config["experts"] + 1)
    return config


def load_model(name):
    with open(os.path.join(source, "models", name + ".json")) as file:
        return json.load(file)


def check_variants(root):
    """bf16 weights (onnx.checker and the round trip; onnxruntime's CPU lacks bf16 kernels)
    and the lowest and a newer opset (onnxruntime too)."""
    config = {"arch": "llama", "vocab": 64, "seq": 16, "layers": 2, "hidden": 32, "heads": 4,
              "kv_heads": 2, "ffn": 48, "dtype": "bf16"}
    folder = os.path.join(root, "variants")
    os.mkdir(folder)
    description = write_json(folder, "bf16", config)
    path = os.path.join(folder, "bf16.onnx")
    if export(description, path):
        onnx.checker.check_model(path, full_check=True)
        model = onnx.load(path, load_external_data=False)
        check(all(t.data_type == onnx.TensorProto.BFLOAT16 for t in model.graph.initializer
                  if t.data_location == onnx.TensorProto.EXTERNAL), "bf16: the weights are bf16")
        check_round_trip("bf16", description, path, config)
    llama = os.path.join(source, "models", "llama-tiny.json")
    for opset in ("17", "23"):
        path = os.path.join(folder, f"opset{opset}.onnx")
        if export(llama, path, "--opset", opset):
            model = onnx.load(path, load_external_data=False)
            check(model.opset_import[0].version == int(opset), f"opset {opset} is declared")
            onnx.checker.check_model(path, full_check=True)
            check_runtime(f"opset {opset}", path, load_model("llama-tiny"), weights_of(path))


def check_errors(root):
    folder = os.path.join(root, "errors")
    os.mkdir(folder)
    good = os.path.join(source, "models", "gpt-tiny.json")
    cases = [
        ("a missing output folder", [good, "-o", os.path.join(folder, "no", "such", "m.onnx")],
         2, "does not exist"),
        ("an unwritable output folder", [good, "-o", "/proc/f8c-export-test.onnx"], 1, "cannot"),
        ("an output that is a folder", [good, "-o", folder], 2, "not a regular file"),
        ("a text IR model", [os.path.join(source, "models", "gpt2-block.f8ir"), "-o",
                             os.path.join(folder, "m.onnx")], 2, ".json"),
        ("a model that is not there", [os.path.join(folder, "none.json"), "-o",
                                       os.path.join(folder, "m.onnx")], 1, "none.json"),
        ("no -o", [good], 2, "-o"),
        ("an opset out of range", [good, "-o", os.path.join(folder, "m.onnx"), "--opset", "16"],
         2, "--opset"),
    ]
    for seed in ("-1", "abc", "1e3", "18446744073709551616", ""):
        cases.append((f"--seed '{seed}'", [good, "-o", os.path.join(folder, "m.onnx"), "--seed",
                                           seed], 2, "--seed"))
    broken = os.path.join(folder, "broken.json")
    with open(broken, "w") as file:
        file.write('{"arch": "gpt", "vocab": 64,\n "seq": }\n')
    cases.append(("malformed JSON", [broken, "-o", os.path.join(folder, "m.onnx")], 1,
                  "broken.json:2:"))
    copy = write_json(folder, "input", load_model("gpt-tiny"))
    cases.append(("the input as the output", [copy, "-o", copy], 2, "overwrite"))
    for what, args, expected, words in cases:
        before = files_in(folder)
        code, out, err = run("export-onnx", *args)
        check(code == expected and words in err and out == "",
              f"{what}: exit {expected}, a message naming the problem", f"exit {code}\n{err}")
        check(files_in(folder) == before, f"{what}: no file left behind", str(files_in(folder)))
    with open(copy) as file:
        check(json.load(file)["arch"] == "gpt", "the input is not overwritten")
    check_interrupted(folder)


def check_interrupted(folder):
    """SIGINT while a big model's weights are written: exit 1, every file removed."""
    before = files_in(folder)
    process = subprocess.Popen([f8c, "export-onnx", os.path.join(source, "models", "llama3-8b.json"),
                                "-o", os.path.join(folder, "big.onnx")], stderr=subprocess.PIPE)
    time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    check(process.returncode == 1 and files_in(folder) == before,
          "an interrupted export exits 1 and leaves no file", f"exit {process.returncode}\n"
          f"{err.decode(errors='replace')}\n{files_in(folder)}")


def main():
    start = time.time()
    seed = int(os.environ.get("F8C_TEST_SEED", random.randrange(1 << 30)))
    print(f"random configurations from seed {seed} (F8C_TEST_SEED={seed} repeats them)")
    rng = random.Random(seed)
    moe = {"arch": "moe", "vocab": 64, "seq": 16, "layers": 2, "hidden": 32, "heads": 4,
           "kv_heads": 2, "ffn": 32, "experts": 4, "top_k": 2}
    models = [("gpt-tiny", load_model("gpt-tiny")), ("llama-tiny", load_model("llama-tiny")),
              ("moe-tiny", moe)]
    models += [(f"random{i}", random_config(rng, i)) for i in range(2)]
    with tempfile.TemporaryDirectory() as root:
        for name, config in models:
            if name.startswith("random"):
                print(f"{name}: {json.dumps(config)}")
            check_model(name, config, root)
        check_variants(root)
        check_errors(root)
    print(f"{time.time() - start:.1f} s")
    sys.exit(finish())


main()
