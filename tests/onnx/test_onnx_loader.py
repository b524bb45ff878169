"""The ONNX loader as a user meets it, through `f8c dump-ir FILE.onnx` (frontend/frontend.c into
f8_onnx_import): the committed exporter fixtures and models built here with onnx.helper load and
verify; malformed files of every kind (truncated, bytes flipped, tensor data that disagrees with
its dims, external data that tries to leave the model's folder, operators and opsets f8c does not
read) exit 1 with a message that names the problem, never crash, and write nothing anywhere.

Every model is built in a fresh temporary folder with fresh random data: the seed comes from the
clock and is printed; F8C_TEST_SEED=N repeats a run. The sanitizer build runs this same script
with its own f8c, so ASan and UBSan see every malformed file; a sanitizer report is a failure.
There (--sanitizer-build) the random byte flips and the small model's truncations are a third as
many, for CI's time: the ONNX fuzzer (tests/fuzz/fuzz_onnx.c, under the same sanitizers) mutates
and cuts the same inputs thousands of times a second.

usage: test_onnx_loader.py F8C_BINARY SOURCE_DIR [--sanitizer-build]
"""
import atexit
import glob
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime
from google.protobuf.message import DecodeError
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from checks import check, finish  # noqa: E402  (tests/checks.py)

f8c, source = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
flips = 1 if "--sanitizer-build" in sys.argv[3:] else 3  # thirds of the flips below
seed = int(os.environ.get("F8C_TEST_SEED", time.time_ns() % 2**31))
print(f"seed {seed} (F8C_TEST_SEED={seed} repeats this run)")
rng = np.random.default_rng(seed)
pick = random.Random(seed)
root = tempfile.mkdtemp(prefix="f8c-onnx-")
atexit.register(shutil.rmtree, root, True)
cwd = os.path.join(root, "cwd")  # every run's working folder: must stay empty
os.mkdir(cwd)
fixtures = sorted(glob.glob(os.path.join(source, "tests", "data", "onnx", "*", "model.onnx")))
OPSET = 18




def tree(folder):
    """Every file and link under `folder` with its size and modification time."""
    entries = {}
    for parent, folders, files in os.walk(folder):
        for name in folders + files:
            path = os.path.join(parent, name)
            info = os.lstat(path)
            entries[path] = (info.st_size, info.st_mtime_ns, info.st_mode)
    return entries


def run(what, *args):
    """Runs f8c in an empty folder; a signal, a sanitizer report or a hang is a failure."""
    try:
        result = subprocess.run([f8c, *args], capture_output=True, timeout=120, cwd=cwd)
    except subprocess.TimeoutExpired:
        check(False, f"{what}: f8c {' '.join(args)} finishes within 120 s")
        return -1, "", ""
    out, err = result.stdout.decode(errors="replace"), result.stderr.decode(errors="replace")
    crashed = (result.returncode < 0 or result.returncode > 2 or "Sanitizer" in err
               or "runtime error:" in err)
    check(not crashed, f"{what}: f8c {' '.join(args)} does not crash (exit {result.returncode})",
          err)
    return result.returncode, out, err


def expect_ok(what, path, *args, want=()):
    code, out, err = run(what, "dump-ir", path, "--verify", *args)
    check(code == 0, f"{what}: loads and verifies", err)
    for text in want:
        check(text in out, f"{what}: the IR shows {text!r}", out[:3000])
    return out


def expect_error(what, path, keywords, *args, codes=(1,)):
    """f8c exits with one of `codes`, stderr names the file and holds every keyword, nothing is
    printed on stdout and nothing under the temporary folder changes."""
    places = (root, os.path.dirname(os.path.abspath(path)))  # the model's folder may be a fixture's
    before = [tree(place) for place in places]
    code, out, err = run(what, "dump-ir", path, *args)
    check(code in codes, f"{what}: exit {codes}, not {code}", err)
    check("error:" in err or (code == 2 and "usage:" in err), f"{what}: an error message", err)
    lowered = err.lower()
    for keyword in keywords:
        check(keyword.lower() in lowered, f"{what}: the message says {keyword!r}", err)
    check(out == "", f"{what}: nothing on stdout", out[:500])
    after = [tree(place) for place in places]
    check(after == before, f"{what}: nothing written", str(set(after[0]) ^ set(before[0])))
    return err


# Models built here.

def folder(name):
    path = os.path.join(root, name)
    os.makedirs(path)
    return path


def model_of(nodes, inputs, outputs, initializers=(), opset=OPSET, value_info=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers),
                              value_info=list(value_info))
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="f8c-test")
    model.ir_version = helper.find_min_ir_version_for(opsets) if 13 <= opset <= 24 else 8
    return model


def save(model, path):
    """Writes the model's bytes as they are (onnx.save would move or check external data)."""
    with open(path, "wb") as file:
        file.write(model.SerializeToString())
    return path


def is_valid(what, model, folder_path=None, feeds=None):
    """The test's own model is good ONNX: the checker passes and onnxruntime runs it."""
    try:
        if folder_path:
            onnx.checker.check_model(os.path.join(folder_path, "model.onnx"), full_check=True)
        else:
            onnx.checker.check_model(model, full_check=True)
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        path = os.path.join(folder_path, "model.onnx") if folder_path else model.SerializeToString()
        session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        session.run(None, feeds or {})
        check(True, f"{what}: onnxruntime runs the test's model")
    except Exception as error:  # the test itself is wrong: say so loudly
        check(False, f"{what}: the test's model is valid ONNX", repr(error))


K, N, L = (int(v) for v in rng.integers(2, 17, size=3))
x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", K])
y_info = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", N])
x_feed = {"x": rng.standard_normal((3, K)).astype(np.float32)}


def weights():
    return (rng.standard_normal((K, N)).astype(np.float32),
            rng.standard_normal(N).astype(np.float32))


def linear_model(w, b, extra_nodes=(), extra_inputs=(), extra_outputs=(), extra_inits=()):
    """y = relu(x @ w + b), plus whatever a test adds."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"], name="matmul"),
             helper.make_node("Add", ["xw", "b"], ["xwb"], name="add"),
             helper.make_node("Relu", ["xwb"], ["y"], name="relu"), *extra_nodes]
    return model_of(nodes, [x_info, *extra_inputs], [y_info, *extra_outputs], [w, b, *extra_inits])


def raw_model():
    w, b = weights()
    return linear_model(numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"))


def float_text(value):
    """A float32 as ir/text_print.c writes it: the shortest %g that reads back exactly."""
    for precision in range(1, 10):
        text = "%.*g" % (precision, value)
        if np.float32(float(text)) == np.float32(value):
            return text
    return text


def ints_text(values):
    return "(" + ", ".join(str(int(v)) for v in values) + ")"


# 1. Good models.

for fixture in fixtures:
    name = os.path.basename(os.path.dirname(fixture))
    expect_ok(f"fixture {name}", fixture, want=("input %input_ids : i64[batch, seq]",))
    expect_ok(f"fixture {name} --dim", fixture, "--dim", "batch=2", "--dim", "seq=8",
              want=("input %input_ids : i64[2, 8]",))
check(len(fixtures) >= 5, "the exporter fixtures are there", str(fixtures))

# Inline raw_data.
here = folder("raw")
model = raw_model()
check(model.graph.initializer[0].HasField("raw_data"), "numpy_helper writes raw_data")
is_valid("raw_data", model, feeds=x_feed)
expect_ok("raw_data", save(model, os.path.join(here, "model.onnx")),
          want=(f"param %w : f32[{K}, {N}]", f"param %b : f32[{N}]", f"input %x : f32[batch, {K}]",
                f"%y : f32[batch, {N}] = Relu"))
small_model = model.SerializeToString()

# Typed fields: float_data for the weights, int64_data for integer constants that show in the IR.
here = folder("typed")
w, b = weights()
offsets = rng.integers(-1000, 1000, size=L)
ids_info = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", L])
shifted_info = helper.make_tensor_value_info("shifted", TensorProto.INT64, ["batch", L])
model = linear_model(
    helper.make_tensor("w", TensorProto.FLOAT, [K, N], w.flatten().tolist()),
    helper.make_tensor("b", TensorProto.FLOAT, [N], b.tolist()),
    extra_nodes=[helper.make_node("Add", ["ids", "offsets"], ["shifted"], name="shift")],
    extra_inputs=[ids_info], extra_outputs=[shifted_info],
    extra_inits=[helper.make_tensor("offsets", TensorProto.INT64, [L], offsets.tolist())])
check(len(model.graph.initializer[0].float_data) == K * N, "make_tensor writes float_data")
check(len(model.graph.initializer[2].int64_data) == L, "make_tensor writes int64_data")
feeds = dict(x_feed, ids=rng.integers(0, 100, size=(3, L)).astype(np.int64))
is_valid("typed data", model, feeds=feeds)
expect_ok("typed data", save(model, os.path.join(here, "model.onnx")),
          want=(f"param %w : f32[{K}, {N}]", ints_text(offsets), f"i64[batch, {L}] = Add"))


def external_tensor(name, array, location, offset, length=True):
    """A tensor whose data is in external file `location` at `offset`."""
    tensor = numpy_helper.from_array(array, name)
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    entries = [("location", location), ("offset", str(offset))]
    if length is True:
        entries.append(("length", str(array.nbytes)))
    elif length is not None:
        entries.append(("length", str(length)))
    for key, value in entries:
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return tensor


def external_model(here, location="weights/params.bin", w_offset=None, **overrides):
    """The linear model and an int64 constant with every tensor in one external file under a
    subfolder, at random aligned offsets. `overrides` replaces fields of w's reference."""
    w, b = weights()
    offsets = rng.integers(-1000, 1000, size=L)
    blob = bytearray()
    placed = {}
    for name, array in (("w", w), ("b", b), ("offsets", offsets)):
        blob += bytes(-len(blob) % 64 + 64 * int(rng.integers(0, 3)))  # aligned, a random gap
        placed[name] = (len(blob), array)
        blob += array.tobytes()
    data_path = os.path.join(here, "weights", "params.bin")
    os.makedirs(os.path.dirname(data_path), exist_ok=True)
    with open(data_path, "wb") as file:
        file.write(blob)
    tensors = []
    for name, (offset, array) in placed.items():
        if name == "w":
            tensors.append(external_tensor(name, array, overrides.get("location", location),
                                           overrides.get("offset", offset),
                                           overrides.get("length", True)))
        else:
            tensors.append(external_tensor(name, array, "weights/params.bin", offset))
    model = linear_model(tensors[0], tensors[1],
                         extra_nodes=[helper.make_node("Add", ["ids", "offsets"], ["shifted"])],
                         extra_inputs=[ids_info], extra_outputs=[shifted_info],
                         extra_inits=[tensors[2]])
    save(model, os.path.join(here, "model.onnx"))
    return model, offsets, len(blob)


here = folder("external")
model, offsets, _ = external_model(here)
is_valid("external data", model, here, feeds=feeds)
expect_ok("external data in a subfolder", os.path.join(here, "model.onnx"),
          want=(f"param %w : f32[{K}, {N}]", ints_text(offsets)))

# A Constant node (a random float tensor, exactly printable) and Constant value_ints.
here = folder("constant")
scale = rng.integers(-64, 64, size=N) / 4.0
model = model_of(
    [helper.make_node("Constant", [], ["scale"], name="scale",
                      value=numpy_helper.from_array(scale.astype(np.float32))),
     helper.make_node("Constant", [], ["shape"], name="shape", value_ints=[-1, N]),
     helper.make_node("Mul", ["x", "scale"], ["scaled"], name="mul"),
     helper.make_node("Reshape", ["scaled", "shape"], ["y"], name="reshape")],
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", N])], [y_info])
is_valid("Constant", model, feeds={"x": rng.standard_normal((3, N)).astype(np.float32)})
printed = "(" + ", ".join(float_text(v) for v in scale) + ")"
expect_ok("Constant nodes", save(model, os.path.join(here, "model.onnx")),
          want=(printed, f"f32[batch, {N}] = Mul"))

# --dim binds symbolic sizes, and the shape arithmetic an exporter writes folds to constants.
here = folder("dims")
w, _ = weights()
model = model_of(
    [helper.make_node("Shape", ["x"], ["x_shape"], name="shape"),
     helper.make_node("Gather", ["x_shape", "zero"], ["batch_size"], name="gather_batch", axis=0),
     helper.make_node("Gather", ["x_shape", "one"], ["seq_len"], name="gather_seq", axis=0),
     helper.make_node("Mul", ["batch_size", "seq_len"], ["rows"], name="rows"),
     helper.make_node("Unsqueeze", ["rows", "axes"], ["rows_1d"], name="unsqueeze"),
     helper.make_node("Concat", ["rows_1d", "k"], ["flat_shape"], name="concat", axis=0),
     helper.make_node("Reshape", ["x", "flat_shape"], ["flat"], name="reshape"),
     helper.make_node("MatMul", ["flat", "w"], ["y"], name="matmul")],
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", K])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", N])],
    [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(0, np.int64), "zero"),
     numpy_helper.from_array(np.array(1, np.int64), "one"),
     numpy_helper.from_array(np.array([0], np.int64), "axes"),
     numpy_helper.from_array(np.array([K], np.int64), "k")])
is_valid("--dim", model, feeds={"x": rng.standard_normal((2, 8, K)).astype(np.float32)})
path = save(model, os.path.join(here, "model.onnx"))
expect_ok("symbolic dims", path, want=(f"f32[batch*seq, {N}] = MatMul",))
expect_ok("--dim batch=2 --dim seq=8", path, "--dim", "batch=2", "--dim", "seq=8",
          want=(f"input %x : f32[2, 8, {K}]", f"f32[16, {N}] = MatMul"))
dims_model = model

# Shape arithmetic folded at import, held against onnxruntime on random and extreme operands
# (steps of INT64_MIN and INT64_MAX, ranges near 2^60, where doubles are not exact).
folded_re = re.compile(r"%out : i64\[([^\]]*)\] = Constant\(\) \{value=i64\[[^\]]*\]\(([^)]*)\)\}")


def expect_folded(what, nodes, initializers):
    here = os.path.join(root, "fold")
    os.makedirs(here, exist_ok=True)
    model = model_of(nodes, [], [helper.make_tensor_value_info("out", TensorProto.INT64, None)],
                     initializers)
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    expected = session.run(None, {})[0]
    out = expect_ok(what, save(model, os.path.join(here, f"{len(os.listdir(here))}.onnx")))
    match = folded_re.search(out)
    if check(match is not None, f"{what}: folds to a Constant", out[:2000]):
        shape = [int(d) for d in match.group(1).split(",") if d.strip()]
        values = [int(v) for v in match.group(2).split(",") if v.strip()]
        check(shape == list(expected.shape) and values == expected.flatten().tolist(),
              f"{what}: folds as onnxruntime computes",
              f"f8c {shape} {values}\n"
              f"onnxruntime {list(expected.shape)} {expected.flatten().tolist()}")


def int64s(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


EXTREMES = [2**63 - 1, -2**63, 2**62, -2**62]
for trial in range(12):
    n = pick.randint(1, 12)
    data = rng.integers(-100, 100, size=n)
    start, end = (pick.choice([pick.randint(-n - 3, n + 3)] * 3 + EXTREMES) for _ in range(2))
    step = pick.choice([1, 2, 3, -1, -2, -3, 2**63 - 1, -2**63, pick.randint(-2**40, 2**40) or 1])
    if step < 0 and end == 2**63 - 1:
        end = -2**63  # onnxruntime reads INT64_MAX as "to the start" here; the spec clamps it
    expect_folded(f"Slice [{start}:{end}:{step}] of {n}", [helper.make_node(
        "Slice", ["data", "starts", "ends", "axes", "steps"], ["out"])],
        [int64s("data", data), int64s("starts", [start]), int64s("ends", [end]),
         int64s("axes", [0]), int64s("steps", [step])])
for trial in range(10):
    base = pick.choice([0, pick.randint(-50, 50), 2**60, -2**62, 2**63 - 200])
    delta = pick.choice([1, 2, 3, -1, -4, 7])
    limit = base + delta * pick.randint(-3, 40) + pick.randint(-2, 2)
    limit = max(-2**63, min(2**63 - 1, limit))
    expect_folded(f"Range({base}, {limit}, {delta})", [helper.make_node(
        "Range", ["start", "limit", "delta"], ["out"])],
        [int64s("start", base), int64s("limit", limit), int64s("delta", delta)])
for trial in range(6):
    rows, cols, extra = pick.randint(1, 6), pick.randint(1, 6), pick.randint(0, 5)  # 0: empty
    a, b = rng.integers(-9, 9, size=(rows, cols)), rng.integers(-9, 9, size=(extra, cols))
    expect_folded(f"Concat {rows}x{cols} {extra}x{cols}", [
        helper.make_node("Concat", ["a", "b"], ["joined"], axis=0),
        helper.make_node("Gather", ["joined", "rows"], ["out"], axis=0)],
        [int64s("a", a), int64s("b", b),
         int64s("rows", rng.integers(-(rows + extra), rows + extra, size=pick.randint(1, 5)))])
here = folder("concat_mismatch")
rows, cols = pick.randint(1, 6), pick.randint(1, 6)
model = model_of([helper.make_node("Concat", ["a", "b"], ["out"], name="joined", axis=0)], [],
                 [helper.make_tensor_value_info("out", TensorProto.INT64, None)],
                 [int64s("a", np.zeros((rows, cols))), int64s("b", np.zeros((40, cols + 10)))])
expect_error("Concat of constants that disagree", save(model, os.path.join(here, "model.onnx")),
             ["Concat", "dimension 1"])

# 2. Truncated files: every prefix of a small model, sampled cut points of the fixtures.


def expect_truncated(what, data, here):
    path = os.path.join(here, "model.onnx")
    with open(path, "wb") as file:
        file.write(data)
    try:
        parsed = onnx.ModelProto.FromString(data)
    except DecodeError:
        parsed = None
    if parsed is None:  # the protobuf encoding itself is cut
        expect_error(what, path, ["malformed or truncated"])
        return
    complete = parsed.HasField("graph") and any(opset.domain in ("", "ai.onnx")
                                                 for opset in parsed.opset_import)
    if complete:  # cut at a field boundary after everything f8c needs: may load
        code, out, err = run(what, "dump-ir", path)
        check(code in (0, 1), f"{what}: exit 0 or 1", err)
    else:
        expect_error(what, path, ["model"])


here = folder("truncated_small")
# Every prefix; in the sanitizer build every third, and the last ten (CI's time, as the flips).
prefixes = sorted(set(range(0, len(small_model), 4 - flips)) |
                  set(range(max(0, len(small_model) - 10), len(small_model))))
for cut in prefixes:
    expect_truncated(f"small model cut at {cut}/{len(small_model)}", small_model[:cut], here)

for fixture in fixtures:
    name = os.path.basename(os.path.dirname(fixture))
    here = folder(f"truncated_{name}")
    shutil.copyfile(fixture + ".data", os.path.join(here, "model.onnx.data"))
    with open(fixture, "rb") as file:
        data = file.read()
    cuts = {0, 1, 2, len(data) // 2, len(data) - 1} | {pick.randrange(len(data)) for _ in range(25)}
    for cut in sorted(cuts):
        expect_truncated(f"{name} cut at {cut}/{len(data)}", data[:cut], here)


# 3. Random byte flips: any outcome but a crash; a failure is a clean error.

def flipped(what, data, here, count):
    path = os.path.join(here, "model.onnx")
    for trial in range(count):
        mutated = bytearray(data)
        for _ in range(pick.randint(1, 4)):
            mutated[pick.randrange(len(mutated))] = pick.randrange(256)
        with open(path, "wb") as file:
            file.write(mutated)
        before = tree(root)
        code, out, err = run(f"{what} flip {trial}", "dump-ir", path)
        check(code in (0, 1), f"{what} flip {trial}: exit 0 or 1", err)
        if code == 1:
            check("error:" in err and out == "", f"{what} flip {trial}: a clean error", err + out)
            check(tree(root) == before, f"{what} flip {trial}: nothing written")


flipped("small model", small_model, folder("flip_small"), 50 * flips)
flipped("--dim model", dims_model.SerializeToString(), folder("flip_dims"), 33 * flips)
for fixture in fixtures:
    name = os.path.basename(os.path.dirname(fixture))
    here = folder(f"flip_{name}")
    shutil.copyfile(fixture + ".data", os.path.join(here, "model.onnx.data"))
    with open(fixture, "rb") as file:
        flipped(name, file.read(), here, 10 * flips)


# 4. Tensors whose data disagrees with their dims and type.

def bad_initializer(what, tensor, keywords):
    here = folder(what.replace(" ", "_"))
    w, b = weights()
    model = linear_model(tensor, numpy_helper.from_array(b, "b"))
    expect_error(what, save(model, os.path.join(here, "model.onnx")), keywords)


w, _ = weights()
tensor = numpy_helper.from_array(w, "w")
cut = int(rng.integers(1, w.nbytes))
tensor.raw_data = tensor.raw_data[:cut]
bad_initializer("raw_data short", tensor, ["'w'", "raw_data", f"{cut} bytes", f"need {w.nbytes}"])
tensor = numpy_helper.from_array(w, "w")
tensor.raw_data += bytes(int(rng.integers(1, 9)))
bad_initializer("raw_data long", tensor, ["'w'", "raw_data", f"need {w.nbytes}"])
values = w.flatten().tolist()
tensor = helper.make_tensor("w", TensorProto.FLOAT, [K, N], values)
del tensor.float_data[-1]
bad_initializer("float_data short", tensor, ["'w'", f"{K * N - 1} elements", f"dims say {K * N}"])
tensor = helper.make_tensor("w", TensorProto.FLOAT, [K, N], values)
tensor.float_data.extend([1.0, 2.0])
bad_initializer("float_data long", tensor, ["'w'", f"{K * N + 2} elements"])
tensor = helper.make_tensor("w", TensorProto.INT64, [L], list(range(L)))
tensor.int64_data.append(L)
bad_initializer("int64_data count", tensor, ["'w'", f"{L + 1} elements", f"dims say {L}"])
tensor = helper.make_tensor("w", TensorProto.FLOAT, [K, N], values)
tensor.int64_data.extend([1, 2])
bad_initializer("data in two typed fields", tensor, ["'w'", "another type"])
tensor = numpy_helper.from_array(w, "w")
tensor.float_data.extend(values)
bad_initializer("raw_data and typed data", tensor, ["'w'", "both raw_data and typed"])
tensor = numpy_helper.from_array(w, "w")
tensor.dims[0] = -K
bad_initializer("negative dim", tensor, ["'w'", f"negative dimension {-K}"])
tensor = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2**40, 2**40])
bad_initializer("element count overflow", tensor, ["'w'", "element count overflows"])
tensor = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2**62, 4, 0])
bad_initializer("element count overflow before a zero", tensor, ["'w'", "overflows"])
tensor = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2**31, 2**31, 8])
tensor.data_location = TensorProto.EXTERNAL
tensor.external_data.add(key="location", value="weights.bin")
bad_initializer("element count overflow, external", tensor, ["'w'", "overflows"])
tensor = helper.make_tensor("w", TensorProto.STRING, [1], [b"text"])
bad_initializer("string tensor", tensor, ["'w'", "STRING"])
tensor = numpy_helper.from_array(w, "w")
tensor.data_type = 99
bad_initializer("unknown data type", tensor, ["'w'", "unknown data type"])
tensor = numpy_helper.from_array(np.zeros([1] * 9, np.float32), "w")
bad_initializer("rank 9", tensor, ["'w'", "too many dimensions"])


# 5. External data that is not where it may be read.

def bad_external(what, keywords, prepare=None, **overrides):
    here = folder("external_" + what.replace(" ", "_").replace("/", "_"))
    _, _, size = external_model(here, **overrides)
    if prepare:
        prepare(here, size)
    return expect_error(f"external data: {what}", os.path.join(here, "model.onnx"), keywords)


outside = os.path.join(root, "outside.bin")
with open(outside, "wb") as file:
    file.write(bytes(1 << 16))
bad_external("absolute path", ["'w'", "absolute path", outside], location=outside)
bad_external("../ escaping", ["'w'", "leaves the model's folder"], location="../outside.bin")
bad_external("../ inside a path", ["'w'", "leaves the model's folder"],
             location="weights/../../outside.bin")
bad_external("./ then ..", ["'w'", "leaves the model's folder"], location="./weights/../params.bin")


def symlink_file(here, size):
    os.symlink(os.path.join(here, "weights", "params.bin"),
               os.path.join(here, "weights", "link.bin"))


bad_external("a symbolic link", ["'w'", "symbolic link"], symlink_file, location="weights/link.bin")


def symlink_outside(here, size):
    os.symlink(outside, os.path.join(here, "escape.bin"))


bad_external("a symbolic link out", ["'w'", "symbolic link"], symlink_outside,
             location="escape.bin")


def symlink_folder(here, size):
    os.symlink(os.path.join(here, "weights"), os.path.join(here, "linked"))


bad_external("a symlinked folder", ["'w'", "symbolic link"], symlink_folder,
             location="linked/params.bin")


def symlink_folder_out(here, size):
    os.symlink(root, os.path.join(here, "up"))


bad_external("a symlinked folder out", ["'w'", "symbolic link"], symlink_folder_out,
             location="up/outside.bin")


def hard_link(here, size):
    os.link(outside, os.path.join(here, "hard.bin"))


bad_external("a hard link", ["'w'", "hard link"], hard_link, location="hard.bin")
bad_external("a folder", ["'w'", "regular file"], location="weights")
bad_external("a folder/", ["'w'", "folder"], location="weights/")
bad_external("a file as a folder", ["'w'", "not a path to a file"],
             location="weights/params.bin/x")
bad_external("a missing file", ["'w'", "cannot open", "missing.bin"], location="missing.bin")
bad_external("an empty location", ["'w'", "without a location"], location="")
bad_external("past the end", ["'w'", "outside its file"], offset=10**6)
bad_external("offset + length past the end", ["'offsets'", "outside its file"],
             lambda here, size: os.truncate(os.path.join(here, "weights", "params.bin"), size - 1))
bad_external("offset overflows", ["'w'", "outside its file"], offset=2**64 - 4)
bad_external("offset past 2^64", ["'w'", "offset is not a number"], offset="18446744073709551616")
bad_external("non-numeric offset", ["'w'", "offset is not a number", "12ab"], offset="12ab")
bad_external("negative offset", ["'w'", "offset is not a number"], offset="-64")
bad_external("empty offset", ["'w'", "offset is not a number"], offset="")
bad_external("non-numeric length", ["'w'", "length is not a number"], length="many")
bad_external("length disagrees", ["'w'", "length is", "bytes, but its dims and type need"],
             length=K * N * 4 + 4)


# 6. What f8c does not read: operators, opsets, inputs without shapes, --dim of no input.

here = folder("unsupported_op")
w, b = weights()
model = linear_model(numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"))
model.graph.node[1].CopyFrom(helper.make_node("FancyAdd", ["xw", "b"], ["xwb"],
                                              name="my_fancy_node", domain="com.example"))
model.opset_import.append(helper.make_opsetid("com.example", 1))
err = expect_error("unsupported op", save(model, os.path.join(here, "model.onnx")),
                   ["node 1", "my_fancy_node", "FancyAdd", "com.example", "does not support",
                    "HINT:", "supported", "MatMul", "Add"])
here = folder("unsupported_default_op")
model.graph.node[1].CopyFrom(helper.make_node("Conv", ["xw", "b"], ["xwb"], name="conv_3"))
expect_error("unsupported default-domain op", save(model, os.path.join(here, "model.onnx")),
             ["node 1", "conv_3", "operator Conv", "HINT:", "Softmax"])

# Operators f8c lowers to several of its own refuse what their lowering cannot hold, cleanly:
# a Tile that spreads past the rank limit (a rank-8 input with a repeated axis), and rotary
# caches narrower than half the head without rotary_embedding_dim.
here = folder("tile_rank")
x8 = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2] * 8)
model = model_of([helper.make_node("Tile", ["x", "reps"], ["y"], name="tile_8")], [x8],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                 [numpy_helper.from_array(np.array([2] + [1] * 7, np.int64), "reps")])
expect_error("Tile past the rank limit", save(model, os.path.join(here, "model.onnx")),
             ["tile_8", "Tile", "rank 9", "limit of 8"])
here = folder("rotary_narrow")
x4 = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 8])
model = model_of([helper.make_node("RotaryEmbedding", ["x", "c", "s"], ["y"], name="rope_0")],
                 [x4], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                 [numpy_helper.from_array(np.ones((1, 3, 2), np.float32), "c"),
                  numpy_helper.from_array(np.ones((1, 3, 2), np.float32), "s")], opset=23)
expect_error("RotaryEmbedding caches narrower than half the head",
             save(model, os.path.join(here, "model.onnx")),
             ["rope_0", "RotaryEmbedding", "half the head"])
# An attribute string that is empty (protobuf gives it no pointer; the fuzzer found the copy).
here = folder("gelu_empty")
model = model_of([helper.make_node("Gelu", ["x"], ["y"], name="gelu_0", approximate="")], [x4],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [], opset=20)
expect_error("Gelu's approximate empty", save(model, os.path.join(here, "model.onnx")),
             ["gelu_0", "approximate", "not one of its values"])

for opset in (1, 12, 25, 10**12):
    here = folder(f"opset_{opset}")
    model = raw_model()
    model.opset_import[0].version = opset
    expect_error(f"opset {opset}", save(model, os.path.join(here, "model.onnx")),
                 ["opset", "13 to 24", "HINT:"])
here = folder("negative_opset")
model = raw_model()
model.opset_import[0].version = -3
expect_error("a negative opset", save(model, os.path.join(here, "model.onnx")), ["opset", "HINT:"])
here = folder("no_opset")
model = raw_model()
del model.opset_import[:]
expect_error("no opset", save(model, os.path.join(here, "model.onnx")), ["no opset"])

here = folder("no_shape")
model = raw_model()
model.graph.input[0].type.tensor_type.ClearField("shape")
expect_error("an input without a shape", save(model, os.path.join(here, "model.onnx")),
             ["'x'", "no shape"])
here = folder("unnamed_dim")
model = raw_model()
model.graph.input[0].type.tensor_type.shape.dim[0].Clear()
expect_error("a dim with neither size nor name", save(model, os.path.join(here, "model.onnx")),
             ["'x'", "neither a size nor a name"])
here = folder("negative_input_dim")
model = raw_model()
model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = -2
expect_error("a negative input dim", save(model, os.path.join(here, "model.onnx")),
             ["'x'", "negative"])
here = folder("no_graph")
model = raw_model()
model.ClearField("graph")
expect_error("no graph", save(model, os.path.join(here, "model.onnx")), ["no graph"])

path = os.path.join(root, "dims", "model.onnx")
expect_error("--dim of no input dim", path, ["--dim", "nope", "no dimension called 'nope'"],
             "--dim", "nope=3", codes=(1, 2))
expect_error("--dim of a fixture", fixtures[0], ["--dim", "heads", "no dimension"],
             "--dim", "batch=2", "--dim", "heads=4", codes=(1, 2))
expect_error("--dim zero", path, ["--dim"], "--dim", "batch=0", codes=(1, 2))

# Files that are not models at all.
here = folder("not_models")
for name, data in (("empty", b""), ("text", b"graph g {\n}\n"), ("zeros", bytes(4096)),
                   ("random", rng.integers(0, 256, size=4096, dtype=np.uint8).tobytes())):
    path = os.path.join(here, f"{name}.onnx")
    with open(path, "wb") as file:
        file.write(data)
    code, out, err = run(f"not a model: {name}", "dump-ir", path)
    check(code == 1 and "error:" in err and out == "", f"not a model: {name}: a clean error", err)
expect_error("a folder named .onnx", folder("folder.onnx"), ["folder.onnx"])
expect_error("a missing file", os.path.join(here, "missing.onnx"), ["cannot open", "missing.onnx"])

sys.exit(finish())
