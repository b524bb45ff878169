#!/usr/bin/env python3
"""Makes the fuzz targets' seed corpora (committed; run again when the inputs they come from
change). Deterministic: the same files every time.

  corpus_onnx/  small models made with onnx.helper that f8c loads, covering the operators and
                the ways tensor data is stored (raw, typed, external, Constant nodes), two
                exporter fixtures with their doc strings and metadata stripped (their weights
                stay in model.onnx.data, which fuzz_onnx provides), and a truncated fixture
  corpus_text/  the input graph and the expected graph of each tests/ir/*.f8t golden file, and
                models/*.f8ir
  corpus_npy/   numpy.save's files of every dtype f8c reads, 0-d, empty and rank 8, versions 2.0
                and 3.0, and the ones f8c refuses (big-endian, Fortran order, bf16 as '<V2',
                structured, objects, a torn file)
  corpus_safetensors/  safetensors.numpy's files of every dtype f8c reads (bf16 and FP8 through
                ml_dtypes), 0-d and empty tensors, metadata, a dtype f8c refuses, a torn file,
                and the weights file of an f8c checkpoint (one step of a 1-layer GPT)
  corpus_plan/  plans f8c compile writes (gpt-tiny's inference plan; a 1-layer GPT's training
                plans, f32 and FP8, and an inference plan with --weights seed; ONNX models with
                weights; a text IR graph), framed as fuzz_plan.c reads them; each kernels.ptx
                cut to its .entry lines (all the loader looks for), the plan's record of it and
                its digest written again to match, so the seeds load

All keep the crash_* files: inputs that once crashed a target, added by hand as regressions.
The plan and checkpoint seeds need a built f8c (F8C, default SOURCE_DIR/build/f8c); without
one, corpus_plan/ and the checkpoint seed are left as they are.

usage: make_corpus.py [SOURCE_DIR [F8C]]   (default: the repository this script is in)
"""
import glob
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from safetensors.numpy import save as safetensors_bytes

source = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
f8c = sys.argv[2] if len(sys.argv) > 2 else os.path.join(source, "build", "f8c")
here = os.path.join(source, "tests", "fuzz")
rng = np.random.default_rng(0)
F, I64 = TensorProto.FLOAT, TensorProto.INT64


def fresh(name):
    """The corpus folder, emptied of what this script made before; the inputs that once crashed
    a target (crash_*, added by hand) stay."""
    path = os.path.join(here, name)
    os.makedirs(path, exist_ok=True)
    for entry in os.listdir(path):
        if not entry.startswith("crash_"):
            os.remove(os.path.join(path, entry))
    return path


def info(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def weight(name, *shape):
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)


def ints(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def node(op, inputs, outputs, **attrs):
    return helper.make_node(op, inputs, outputs, name=f"{op.lower()}_{outputs[0]}", **attrs)


def model(nodes, inputs, outputs, initializers=(), opset=18):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    opsets = [helper.make_opsetid("", opset)]
    result = helper.make_model(graph, opset_imports=opsets, producer_name="f8c-fuzz-corpus")
    result.ir_version = helper.find_min_ir_version_for(opsets)
    return result


def external(tensor, location, offset):
    data = tensor.raw_data
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(len(data)))):
        tensor.external_data.add(key=key, value=value)
    return tensor


x = info("x", F, ["batch", "seq", 16])
models = {}

models["linear_raw"] = model(
    [node("MatMul", ["x", "w"], ["xw"]), node("Add", ["xw", "b"], ["xwb"]),
     node("Relu", ["xwb"], ["y"])],
    [x], [info("y", F, ["batch", "seq", 8])], [weight("w", 16, 8), weight("b", 8)])

w = rng.standard_normal((16, 8)).astype(np.float32)
models["linear_typed"] = model(
    [node("MatMul", ["x", "w"], ["xw"]), node("Add", ["ids", "offsets"], ["shifted"]),
     node("Cast", ["shifted"], ["shifted_f"], to=F), node("Tanh", ["xw"], ["y"])],
    [x, info("ids", I64, ["batch", 4])],
    [info("y", F, ["batch", "seq", 8]), info("shifted_f", F, ["batch", 4])],
    [helper.make_tensor("w", F, [16, 8], w.flatten().tolist()),
     helper.make_tensor("offsets", I64, [4], [3, -1, 7, 1 << 40])])

models["external"] = model(
    [node("MatMul", ["x", "w"], ["xw"]), node("Add", ["xw", "b"], ["y"]),
     node("Add", ["ids", "offsets"], ["shifted"])],
    [x, info("ids", I64, ["batch", 4])],
    [info("y", F, ["batch", "seq", 8]), info("shifted", I64, ["batch", 4])],
    [external(weight("w", 16, 8), "model.onnx.data", 0),
     external(weight("b", 8), "model.onnx.data", 4096),
     external(ints("offsets", [0, 0, 0, 0]), "weights/params.bin", 64)])

models["constants"] = model(
    [node("Constant", [], ["scale"],
          value=numpy_helper.from_array(np.array([0.5, 2.0], np.float32))),
     node("Constant", [], ["shape"], value_ints=[-1, 2]),
     node("Constant", [], ["eps"], value_float=1e-5),
     node("Constant", [], ["bias"], value_floats=[1.0, -1.0]),
     node("Reshape", ["x", "shape"], ["pairs"]), node("Mul", ["pairs", "scale"], ["scaled"]),
     node("Add", ["scaled", "eps"], ["shifted"]), node("Sub", ["shifted", "bias"], ["y"])],
    [x], [info("y", F, ["rows", 2])])

models["shape_arithmetic"] = model(
    [node("Shape", ["x"], ["shape"]), node("Gather", ["shape", "zero"], ["b"], axis=0),
     node("Gather", ["shape", "one"], ["s"], axis=0), node("Mul", ["b", "s"], ["rows"]),
     node("Unsqueeze", ["rows", "axes"], ["rows_1d"]),
     node("Concat", ["rows_1d", "width"], ["flat_shape"], axis=0),
     node("Reshape", ["x", "flat_shape"], ["flat"]), node("MatMul", ["flat", "w"], ["y"]),
     node("Range", ["zero", "s", "one"], ["positions"]),
     node("Equal", ["s", "s"], ["same"]), node("Where", ["same", "b", "s"], ["pick"]),
     node("Reshape", ["y", "pick_shape"], ["y2"]),
     node("Slice", ["shape", "one", "big", "zero_1d", "one_1d"], ["tail"]),
     node("ConstantOfShape", ["tail"], ["zeros"],
          value=numpy_helper.from_array(np.array([0.0], np.float32)))],
    [x], [info("y2", F, ["rows", 8]), info("positions", I64, ["seq"]),
          info("zeros", F, ["seq", 16])],
    [weight("w", 16, 8), ints("zero", 0), ints("one", 1), ints("axes", [0]), ints("width", [16]),
     ints("big", [2**63 - 1]), ints("zero_1d", [0]), ints("one_1d", [1]),
     ints("pick_shape", [-1, 8])])

models["attention"] = model(
    [node("LayerNormalization", ["x", "gamma", "beta"], ["h"], axis=-1, epsilon=1e-5),
     node("MatMul", ["h", "wqkv"], ["qkv"]),
     node("Split", ["qkv", "split"], ["q", "k", "v"], axis=-1),
     node("Reshape", ["q", "heads"], ["q4"]), node("Reshape", ["k", "heads"], ["k4"]),
     node("Reshape", ["v", "heads"], ["v4"]),
     node("Transpose", ["q4"], ["qt"], perm=[0, 2, 1, 3]),
     node("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]),
     node("Transpose", ["v4"], ["vt"], perm=[0, 2, 1, 3]),
     node("MatMul", ["qt", "kt"], ["scores"]), node("Div", ["scores", "sqrt_d"], ["scaled"]),
     node("Shape", ["x"], ["x_shape"]), node("Gather", ["x_shape", "one"], ["seq_len"], axis=0),
     node("Unsqueeze", ["seq_len", "axes0"], ["seq_1d"]),
     node("Concat", ["seq_1d", "seq_1d"], ["mask_shape"], axis=0),
     node("ConstantOfShape", ["mask_shape"], ["ones"],
          value=numpy_helper.from_array(np.array([1.0], np.float32))),
     node("Trilu", ["ones"], ["lower"], upper=0),
     node("Cast", ["lower"], ["keep"], to=TensorProto.BOOL),
     node("Where", ["keep", "scaled", "minus_inf"], ["masked"]),
     node("Softmax", ["masked"], ["probs"], axis=-1), node("MatMul", ["probs", "vt"], ["ctx"]),
     node("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
     node("Reshape", ["ctx_t", "merge"], ["merged"]), node("MatMul", ["merged", "wo"], ["o"]),
     node("Gelu", ["o"], ["g"], approximate="tanh"), node("Add", ["g", "x"], ["y"])],
    [x], [info("y", F, ["batch", "seq", 16])],
    [weight("gamma", 16), weight("beta", 16), weight("wqkv", 16, 48), ints("split", [16, 16, 16]),
     ints("heads", [0, 0, 2, 8]), ints("merge", [0, 0, 16]), weight("wo", 16, 16),
     numpy_helper.from_array(np.array(8 ** 0.5, np.float32), "sqrt_d"), ints("one", 1),
     ints("axes0", [0]), numpy_helper.from_array(np.array(-np.inf, np.float32), "minus_inf")],
    opset=20)

models["elementwise"] = model(
    [node("Pow", ["x", "two"], ["sq"]), node("ReduceMean", ["sq", "last"], ["ms"], keepdims=1),
     node("Add", ["ms", "eps"], ["mse"]), node("Sqrt", ["mse"], ["rms"]),
     node("Reciprocal", ["rms"], ["inv"]), node("Mul", ["x", "inv"], ["normed"]),
     node("Sigmoid", ["normed"], ["sig"]), node("Mul", ["normed", "sig"], ["silu"]),
     node("Erf", ["silu"], ["erf"]), node("Exp", ["erf"], ["exp"]), node("Log", ["exp"], ["log"]),
     node("Abs", ["log"], ["abs"]), node("Neg", ["abs"], ["neg"]), node("Cos", ["neg"], ["cos"]),
     node("Sin", ["cos"], ["sin"]), node("Max", ["sin", "cos", "neg"], ["max"]),
     node("Min", ["max", "sin"], ["min"]), node("IsNaN", ["min"], ["nan"]),
     node("Not", ["nan"], ["ok"]),
     node("Less", ["min", "max"], ["less"]), node("And", ["ok", "less"], ["both"]),
     node("Or", ["both", "nan"], ["either"]), node("Where", ["either", "min", "max"], ["picked"]),
     node("ReduceSum", ["picked", "last"], ["sum"], keepdims=0),
     node("ReduceMax", ["picked", "last"], ["top"], keepdims=0),
     node("GreaterOrEqual", ["sum", "top"], ["ge"]), node("Cast", ["ge"], ["gef"], to=F),
     node("LogSoftmax", ["picked"], ["ls"], axis=-1), node("Identity", ["ls"], ["ident"]),
     node("Dropout", ["ident"], ["y"]), node("CumSum", ["gef", "one"], ["cs"])],
    [x], [info("y", F, ["batch", "seq", 16]), info("cs", F, ["batch", "seq"])],
    [numpy_helper.from_array(np.array(2.0, np.float32), "two"), ints("last", [-1]),
     numpy_helper.from_array(np.array(1e-6, np.float32), "eps"), ints("one", 1)])

models["quantize"] = model(
    [node("QuantizeLinear", ["x", "scale", "zero"], ["q"], axis=1, saturate=1),
     node("DequantizeLinear", ["q", "scale"], ["dq"], axis=1),
     node("Reshape", ["dq", "flat_shape"], ["flat"]),
     node("Gemm", ["flat", "w", "b"], ["y"], transB=1, alpha=0.5),
     node("CastLike", ["y", "x"], ["z"]),
     node("Expand", ["b", "b_shape"], ["be"]), node("GatherND", ["be", "idx"], ["picked"])],
    [info("x", F, [4, 16])],
    [info("z", F, [4, 8]), info("picked", F, [2])],
    [numpy_helper.from_array(np.array(0.25, np.float32), "scale"),
     helper.make_tensor("zero", TensorProto.FLOAT8E4M3FN, [], [0.0]), weight("w", 8, 16),
     weight("b", 8), ints("flat_shape", [4, 16]), ints("b_shape", [3, 8]),
     ints("idx", [[0, 1], [2, 7]])],
    opset=21)

onnx_dir = fresh("corpus_onnx")
for name, proto in models.items():
    with open(os.path.join(onnx_dir, f"{name}.onnx"), "wb") as file:
        file.write(proto.SerializeToString())

for fixture in ("minigpt-tiny", "llama-tiny"):
    proto = onnx.load(os.path.join(source, "tests", "data", "onnx", fixture, "model.onnx"),
                      load_external_data=False)
    for item in proto.graph.node:
        item.ClearField("metadata_props")
        item.ClearField("doc_string")
    proto.graph.ClearField("value_info")
    with open(os.path.join(onnx_dir, f"fixture_{fixture}.onnx"), "wb") as file:
        file.write(proto.SerializeToString())
with open(os.path.join(source, "tests", "data", "onnx", "gpt2-tiny", "model.onnx"), "rb") as file:
    truncated = file.read()[:8192]
with open(os.path.join(onnx_dir, "fixture_gpt2-tiny_truncated.onnx"), "wb") as file:
    file.write(truncated)

text_dir = fresh("corpus_text")
for path in sorted(glob.glob(os.path.join(source, "tests", "ir", "*.f8t"))):
    name = os.path.splitext(os.path.basename(path))[0]
    with open(path, encoding="utf-8") as file:
        text = file.read()
    given, _, expected = text.partition("# expect:\n")
    with open(os.path.join(text_dir, f"{name}.f8ir"), "w", encoding="utf-8") as file:
        file.write(given)
    if expected.lstrip().startswith("graph"):
        with open(os.path.join(text_dir, f"{name}.expect.f8ir"), "w", encoding="utf-8") as file:
            file.write(expected)
for path in sorted(glob.glob(os.path.join(source, "models", "*.f8ir"))):
    shutil.copyfile(path, os.path.join(text_dir, os.path.basename(path)))


# ---- corpus_npy: what numpy.save writes -------------------------------------------------------


def npy_bytes(array, version=None, allow_pickle=False):
    buffer = io.BytesIO()
    if version:
        np.lib.format.write_array(buffer, array, version=version)
    else:
        np.save(buffer, array, allow_pickle=allow_pickle)
    return buffer.getvalue()


def npy_header(header, data=b""):
    """A version 1.0 file of `header` (a dict literal, padded here) and `data`, by hand."""
    text = header + " " * (63 - (10 + len(header)) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode() + data


small = rng.standard_normal((3, 4))
arrays = {
    "f32": small.astype(np.float32), "f64": small[:2], "f16": small.astype(np.float16),
    "i64": np.arange(6, dtype=np.int64).reshape(2, 3) - 3, "i32": np.arange(5, dtype=np.int32),
    "i8": np.array([-128, 0, 127], np.int8), "u8": np.arange(4, dtype=np.uint8),
    "bool": np.array([[True, False], [False, True]]), "scalar_0d": np.array(3.5, np.float32),
    "empty": np.zeros((0, 4), np.float32), "rank8": np.ones((1, 2, 1, 1, 2, 1, 1, 2), np.int32),
    "big_endian": small.astype(">f4"), "fortran_order": np.asfortranarray(small.astype(np.float32)),
    "bf16_v2": small.astype(ml_dtypes.bfloat16),
    "structured": np.zeros(2, dtype=[("a", "<f4"), ("b", "<i8")]),
}
npy_dir = fresh("corpus_npy")
for name, array in arrays.items():
    with open(os.path.join(npy_dir, f"{name}.npy"), "wb") as file:
        file.write(npy_bytes(array))
npy_files = {
    "version2.npy": npy_bytes(small.astype(np.float32), version=(2, 0)),
    "version3.npy": npy_bytes(np.arange(3, dtype=np.int64), version=(3, 0)),
    "objects.npy": npy_bytes(np.array([1, "a"], dtype=object), allow_pickle=True),
    "torn.npy": npy_bytes(small.astype(np.float32))[:-5],
    "python2_dims.npy": npy_header("{'descr': '<i4', 'fortran_order': False, 'shape': (2L, 1L), }",
                                   struct.pack("<2i", 7, -7)),
    "native_order.npy": npy_header("{'shape': (2,), 'descr': '=f4', 'fortran_order': False}",
                                   struct.pack("<2f", 1.5, -2.0)),
}
for name, data in npy_files.items():
    with open(os.path.join(npy_dir, name), "wb") as file:
        file.write(data)

# ---- corpus_safetensors: what safetensors.numpy writes, and an f8c checkpoint ----------------



def safetensors_in_order(tensors, metadata):
    """A safetensors file laid out as the reference writes one, but with the metadata and the
    tensors in the given order (safetensors' own writer orders metadata by a hash map: a file
    of two keys comes out differently from run to run)."""
    header, data = {"__metadata__": metadata}, b""
    for name, array in tensors.items():
        header[name] = {"dtype": {"float32": "F32"}[array.dtype.name], "shape": list(array.shape),
                        "data_offsets": [len(data), len(data) + array.nbytes]}
        data += array.tobytes()
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


st_files = {
    "bf16": ({"w": small.astype(ml_dtypes.bfloat16)}, None),
    "fp8": ({"e4m3": small.astype(ml_dtypes.float8_e4m3fn),
             "e5m2": small.astype(ml_dtypes.float8_e5m2)}, None),
    "i64_0d": ({"iteration": np.array(7, np.int64), "ids": np.arange(3, dtype=np.int64)}, None),
    "every_dtype": ({"f64": small[0], "f16": small[1].astype(np.float16),
                     "i32": np.arange(2, dtype=np.int32), "i8": np.array([-1, 1], np.int8),
                     "u8": np.array([255], np.uint8), "bool": np.array([True, False])}, None),
    "empties": ({"a": np.zeros((0, 3), np.float32), "b": np.zeros(0, np.int64),
                 "c": np.ones(2, np.float32)}, None),
    "no_tensors": ({}, {"only": "metadata"}),
    "foreign_u16": ({"u": np.arange(3, dtype=np.uint16)}, None),
}
st_dir = fresh("corpus_safetensors")
for name, (tensors, metadata) in st_files.items():
    with open(os.path.join(st_dir, f"{name}.safetensors"), "wb") as file:
        file.write(safetensors_bytes(tensors, metadata=metadata))
f32 = {"w": small.astype(np.float32), "b": np.zeros(4, np.float32)}
with open(os.path.join(st_dir, "f32_metadata.safetensors"), "wb") as file:
    file.write(safetensors_in_order(f32, {"format": "pt", "note": "caf\u00e9"}))
with open(os.path.join(st_dir, "torn.safetensors"), "wb") as file:
    file.write(safetensors_bytes(f32)[:-6])

# ---- corpus_plan: the plans f8c compile writes -----------------------------------------------

# A GPT of one layer, 16 wide: a training plan of it is ~120 KB of plan.json (gpt-tiny's, four
# layers 128 wide, is ~310 KB, too big a seed); the vocabulary is bytes, for the checkpoint.
gpt_1layer = {"arch": "gpt", "vocab": 256, "seq": 16, "layers": 1, "hidden": 16, "heads": 2}
tiny_graph = """graph tiny {
  input %x : f32[batch, seq, 16]
  param %w : f32[16, 16]
  param %b : f32[16]
  %h = Linear(%x, %w, %b) scope="fc"
  %y = Gelu(%h) scope="act"
  output %y
}
"""
SIZES = ["--micro-batch-size", "2", "--seq-length", "16"]
plans = [  # (seed name, model, f8c compile options, mended)
    ("gpt-tiny_inference", "models/gpt-tiny.json", ["--inference"], True),
    ("gpt-1layer_training", "gpt-1layer.json", [], True),
    ("gpt-1layer_training_fp8", "gpt-1layer.json", ["--fp8-format", "hybrid"], True),
    ("gpt-1layer_inference_weights_seed", "gpt-1layer.json", ["--inference", "--weights", "seed"],
     True),
    ("onnx_linear_training", "tests/fuzz/corpus_onnx/linear_raw.onnx", [], True),
    ("onnx_attention_inference", "tests/fuzz/corpus_onnx/attention.onnx", ["--inference"], True),
    ("tiny_inference", "tiny.f8ir", ["--inference"], True),
    ("tiny_inference_fp8", "tiny.f8ir", ["--inference", "--fp8-format", "hybrid"], True),
    ("tiny_inference_as_is", "tiny.f8ir", ["--inference"], False),
]


def fnv1a64(data):
    value = 14695981039346656037
    for byte in data:
        value = ((value ^ byte) * 1099511628211) & ((1 << 64) - 1)
    return f"{value:016x}"


def digest_of(document):
    """plan.json's digest: FNV-1a 64 of the compact dump, keys sorted, without "digest"."""
    return fnv1a64(json.dumps({k: v for k, v in document.items() if k != "digest"},
                              sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode())


def entries_only(ptx):
    """kernels.ptx's header and an empty body for each .entry: all that the loader reads."""
    lines = ptx.decode().splitlines()
    header = [line for line in lines if line.startswith((".version", ".target", ".address_size"))]
    entries = [f"{line}\n)\n{{\n\tret;\n}}" for line in lines
               if line.startswith(".visible .entry ")]
    return ("\n".join(header) + "\n\n" + "\n\n".join(entries) + "\n").encode()


def plan_seed(folder, model_name, mended):
    """The plan in `folder` as fuzz_plan.c's input, kernels.ptx cut and the record to match."""
    with open(os.path.join(folder, "plan.json"), encoding="utf-8") as file:
        document = json.load(file)
    assert digest_of(document) == document["digest"], "the digest is not reproduced here"
    with open(os.path.join(folder, "kernels.ptx"), "rb") as file:
        ptx = entries_only(file.read())
    with open(os.path.join(folder, "weights.safetensors"), "rb") as file:
        weights = file.read()
    document["model"] = model_name  # for people only, never opened: no temporary path
    document["kernels_ptx"].update(bytes=len(ptx), fnv1a64=fnv1a64(ptx))
    document["digest"] = digest_of(document)
    text = json.dumps(document, indent=1, ensure_ascii=True).encode()
    return (b"1" if mended else b"0") + text + b"\0" + ptx + b"\0" + weights


def run_f8c(*args, cwd):
    done = subprocess.run([os.path.abspath(f8c), *args], cwd=cwd, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit(f"make_corpus: f8c {' '.join(args)} failed:\n{done.stderr}")


folders = [onnx_dir, text_dir, npy_dir, st_dir]
if os.access(f8c, os.X_OK):
    plan_dir = fresh("corpus_plan")
    folders.append(plan_dir)
    with tempfile.TemporaryDirectory() as work:
        with open(os.path.join(work, "gpt-1layer.json"), "w", encoding="utf-8") as file:
            json.dump(gpt_1layer, file)
        with open(os.path.join(work, "tiny.f8ir"), "w", encoding="utf-8") as file:
            file.write(tiny_graph)
        for name, model_path, options, mended in plans:
            model_file = model_path if os.path.exists(os.path.join(work, model_path)) \
                else os.path.join(os.path.abspath(source), model_path)
            run_f8c("compile", model_file, "-o", name, *SIZES, *options, cwd=work)
            with open(os.path.join(plan_dir, f"{name}.plan"), "wb") as file:
                file.write(plan_seed(os.path.join(work, name), model_path, mended))

        # One training step of the 1-layer GPT saved: its weights file, the metadata that
        # changes from run to run (the save's id, the model's path) made fixed.
        run_f8c("tokenize", os.path.join(os.path.abspath(source), "data", "fp8-notes.txt"),
                "-o", "tokens.bin", cwd=work)
        run_f8c("train", "gpt-1layer.json", *SIZES, "--train-iters", "1", "--data",
                "tokens.bin", "--save", "checkpoint", cwd=work)
        with open(os.path.join(work, "checkpoint", "iter_0000001", "weights.safetensors"),
                  "rb") as file:
            saved = file.read()
        length = struct.unpack("<Q", saved[:8])[0]
        header = json.loads(saved[8:8 + length])
        header["__metadata__"].update(save_id="0", model="gpt-1layer.json")
        text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
        text += b" " * (-len(text) % 8)
        with open(os.path.join(st_dir, "f8c_checkpoint_weights.safetensors"), "wb") as file:
            file.write(struct.pack("<Q", len(text)) + text + saved[8 + length:])
else:
    print(f"{f8c}: no f8c to compile plans with; corpus_plan/ and the checkpoint seed are left "
          "as they are", file=sys.stderr)

for folder in folders:
    files = os.listdir(folder)
    size = sum(os.path.getsize(os.path.join(folder, name)) for name in files)
    print(f"{os.path.relpath(folder, source)}: {len(files)} files, {size} bytes")
