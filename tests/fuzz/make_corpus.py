#!/usr/bin/env python3
"""Makes the fuzz targets' seed corpora (committed; run again when the inputs they come from
change). Deterministic: the same files every time.

  corpus_onnx/  small models made with onnx.helper that f8c loads, covering the operators and
                the ways tensor data is stored (raw, typed, external, Constant nodes), two
                exporter fixtures with their doc strings and metadata stripped (their weights
                stay in model.onnx.data, which fuzz_onnx provides), and a truncated fixture
  corpus_text/  the input graph and the expected graph of each tests/ir/*.f8t golden file, and
                models/*.f8ir

Both keep the crash_* files: inputs that once crashed a target, added by hand as regressions.

usage: make_corpus.py [SOURCE_DIR]   (default: the repository this script is in)
"""
import glob
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

source = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
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

for folder in (onnx_dir, text_dir):
    files = os.listdir(folder)
    size = sum(os.path.getsize(os.path.join(folder, name)) for name in files)
    print(f"{os.path.relpath(folder, source)}: {len(files)} files, {size} bytes")
