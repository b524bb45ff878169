#!/usr/bin/env python3
"""Every supported ONNX operator, imported by f8c with shape inference, against onnxruntime.

For each operator a small model is built with onnx.helper: its input `x` has symbolic dims
`batch` and `seq`, and shape inputs come from constants or from Shape arithmetic on `x`, as
exporters write them. onnxruntime runs it on fresh random data (sizes drawn each run, seed
printed); f8c imports it twice: with the sizes bound by --dim, where its inferred output type
must equal onnxruntime's output exactly, and symbolic, where the output's symbolic dims must
evaluate to onnxruntime's sizes. An operator f8c lowers to several of its own (Tile,
RotaryEmbedding, GatherND of depth 1, GatherElements, Clip, a Max of three) or reads as one of its high-level ops (RMSNormalization)
also has its values checked: f8c infer gives onnxruntime's output (exactly where elements only move).

Usage: test_onnx_ops.py F8C
"""
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
I64 = TensorProto.INT64
D = 8  # the constant last dim of x


def const(name, values, dtype=np.int64):
    return numpy_helper.from_array(np.array(values, dtype=dtype), name)


def shape_of_x(prefix="s"):
    """Nodes computing [batch, seq] of x through Shape and Gather, as exporters do."""
    return [
        helper.make_node("Shape", ["x"], [f"{prefix}_shape"]),
        helper.make_node("Gather", [f"{prefix}_shape", "i0"], [f"{prefix}_batch"], axis=0),
        helper.make_node("Gather", [f"{prefix}_shape", "i1"], [f"{prefix}_seq"], axis=0),
    ]


INDEX_CONSTANTS = [const("i0", [0]), const("i1", [1]), const("i2", [2])]


def unary(op):
    return ([helper.make_node(op, ["x"], ["y"])], [])


def binary(op, scalar=1.5):
    return ([helper.make_node(op, ["x", "c"], ["y"])], [const("c", scalar, np.float32)])


def compare(op):
    return ([helper.make_node(op, ["x", "c"], ["y"])], [const("c", 0.0, np.float32)])


def cases():
    """name -> (nodes, initializers, opset, output elem type)."""
    c = {}
    for op in ["Sqrt", "Reciprocal", "Neg", "Exp", "Tanh", "Erf", "Sigmoid", "Relu", "Abs",
               "Cos", "Sin", "Log", "Identity"]:
        c[op] = unary(op)
    for op in ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"]:
        c[op] = binary(op, 2.0 if op == "Pow" else 1.5)
    for op in ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]:
        c[op] = compare(op)
    c["IsNaN"] = unary("IsNaN")
    c["Max (three inputs)"] = ([helper.make_node("Max", ["x", "lo", "row"], ["y"])],
                               [const("lo", -0.5, np.float32),
                                const("row", np.random.randn(D), np.float32)])
    c["Clip"] = ([helper.make_node("Clip", ["x", "lo", "hi"], ["y"])],
                 [const("lo", -0.5, np.float32), const("hi", 0.75, np.float32)])
    c["Clip (max only)"] = ([helper.make_node("Clip", ["x", "", "hi"], ["y"])],
                            [const("hi", 0.75, np.float32)])
    c["Not/And/Or"] = ([
        helper.make_node("Greater", ["x", "z"], ["p"]),
        helper.make_node("Less", ["x", "z"], ["q"]),
        helper.make_node("Not", ["p"], ["np"]),
        helper.make_node("And", ["np", "q"], ["a"]),
        helper.make_node("Or", ["a", "p"], ["y"]),
    ], [const("z", 0.0, np.float32)])
    c["Where"] = ([
        helper.make_node("Greater", ["x", "z"], ["p"]),
        helper.make_node("Where", ["p", "x", "z"], ["y"]),
    ], [const("z", 0.0, np.float32)])
    c["MatMul"] = ([helper.make_node("MatMul", ["x", "w"], ["y"])],
                   [const("w", np.random.rand(D, 5), np.float32)])
    c["Gemm"] = ([
        helper.make_node("Reshape", ["x", "flat"], ["x2"]),
        helper.make_node("Gemm", ["x2", "w", "b"], ["y"], transB=1, alpha=0.5),
    ], [const("flat", [-1, D]), const("w", np.random.rand(6, D), np.float32),
        const("b", np.random.rand(6), np.float32)])
    c["Gather"] = ([helper.make_node("Gather", ["w", "ids"], ["y"], axis=0)],
                   [const("w", np.random.rand(10, D), np.float32), const("ids", [[1, 2], [3, 9]])])
    c["GatherND"] = ([
        helper.make_node("Slice", ["x", "i0", "i2", "i2"], ["x2"]),  # x[..., 0:2] as indices
        helper.make_node("Cast", ["x2"], ["raw"], to=I64),
        helper.make_node("Abs", ["raw"], ["pos"]),
        helper.make_node("Min", ["pos", "zero"], ["idx"]),
        helper.make_node("GatherND", ["table", "idx"], ["y"], batch_dims=0),
    ], INDEX_CONSTANTS + [const("zero", 0), const("table", np.random.rand(3, 4, 5), np.float32)])
    c["GatherElements (axis 1, negative indices)"] = ([
        helper.make_node("Cast", ["x"], ["raw"], to=I64),
        helper.make_node("Abs", ["raw"], ["pos"]),
        helper.make_node("Min", ["pos", "one"], ["small"]),
        helper.make_node("Neg", ["small"], ["idx"]),  # 0 and -1: inside any seq
        helper.make_node("GatherElements", ["x", "idx"], ["y"], axis=1),
    ], [const("one", 1)])
    c["GatherElements (last axis, fewer indices)"] = ([
        helper.make_node("Slice", ["x", "i0", "three", "last"], ["x3"]),
        helper.make_node("Cast", ["x3"], ["raw"], to=I64),
        helper.make_node("Abs", ["raw"], ["pos"]),
        helper.make_node("Min", ["pos", "seven"], ["idx"]),
        helper.make_node("GatherElements", ["x", "idx"], ["y"], axis=-1),
    ], INDEX_CONSTANTS + [const("three", [3]), const("last", [-1]), const("seven", 7)])
    c["TopK (values, last axis)"] = ([
        helper.make_node("TopK", ["x", "k"], ["y", "idx"]),
    ], [const("k", [3])])
    c["TopK (indices, smallest, axis 1)"] = ([
        helper.make_node("TopK", ["x", "k"], ["v", "idx"], axis=1, largest=0),
        helper.make_node("Cast", ["idx"], ["y"], to=F),
    ], [const("k", [2])])
    c["GatherND (depth 1, read as Gather)"] = ([
        helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
        helper.make_node("GatherND", ["t", "rows"], ["y"]),
    ], [const("rows", [[[-1]], [[0]]])])
    c["Reshape (Shape arithmetic)"] = (shape_of_x() + [
        helper.make_node("Mul", ["s_batch", "s_seq"], ["rows"]),
        helper.make_node("Concat", ["rows", "two", "half"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ], INDEX_CONSTANTS + [const("two", [2]), const("half", [D // 2])])
    c["Reshape 0 and -1"] = ([helper.make_node("Reshape", ["x", "t"], ["y"])],
                             [const("t", [0, -1])])
    c["Transpose"] = ([helper.make_node("Transpose", ["x"], ["y"], perm=[2, 0, 1])], [])
    c["Unsqueeze/Squeeze"] = ([
        helper.make_node("Unsqueeze", ["x", "axes"], ["u"]),
        helper.make_node("Squeeze", ["u", "sq"], ["y"]),
    ], [const("axes", [1, -1]), const("sq", [1])])
    c["Concat"] = ([helper.make_node("Concat", ["x", "x"], ["y"], axis=1)], [])
    c["Split (sizes)"] = ([helper.make_node("Split", ["x", "sizes"], ["y", "y2"], axis=2)],
                          [const("sizes", [3, D - 3])])
    c["Split (num_outputs)"] = ([helper.make_node("Split", ["x"], ["y", "y2"], axis=2,
                                                  num_outputs=2)], [])
    c["Slice (seq-1)"] = ([helper.make_node("Slice", ["x", "one", "big", "i1"], ["y"])],
                          INDEX_CONSTANTS + [const("one", [1]), const("big", [2**62])])
    c["Slice (step 2)"] = ([helper.make_node("Slice", ["x", "i0", "big", "i2", "two"], ["y"])],
                           INDEX_CONSTANTS + [const("big", [2**62]), const("two", [2])])
    c["Expand"] = (shape_of_x() + [
        helper.make_node("Concat", ["s_batch", "s_seq", "dd"], ["target"], axis=0),
        helper.make_node("Expand", ["row", "target"], ["y"]),
    ], INDEX_CONSTANTS + [const("dd", [D]), const("row", np.random.rand(1, 1, D), np.float32)])
    c["Cast"] = ([helper.make_node("Cast", ["x"], ["b"], to=TensorProto.BFLOAT16),
                  helper.make_node("Cast", ["b"], ["y"], to=F)], [])
    c["CastLike"] = ([helper.make_node("CastLike", ["x", "like"], ["y"])],
                     [const("like", [1], np.int32)])
    c["Constant"] = ([
        helper.make_node("Constant", [], ["k"], value_float=0.25),
        helper.make_node("Mul", ["x", "k"], ["y"]),
    ], [])
    c["ConstantOfShape"] = (shape_of_x() + [
        helper.make_node("Concat", ["s_seq", "s_seq"], ["sq"], axis=0),
        helper.make_node("ConstantOfShape", ["sq"], ["y"],
                         value=numpy_helper.from_array(np.array([1.0], np.float32))),
    ], INDEX_CONSTANTS)
    c["Range"] = (shape_of_x() + [
        helper.make_node("Squeeze", ["s_seq"], ["n"]),
        helper.make_node("Range", ["start", "n", "step"], ["y"]),
    ], INDEX_CONSTANTS + [const("start", 0), const("step", 1)])
    c["Trilu"] = ([helper.make_node("Trilu", ["x", "k"], ["y"], upper=0)], [const("k", 1)])
    c["Tile (a size-1 axis)"] = ([
        helper.make_node("Unsqueeze", ["x", "i2"], ["u"]),
        helper.make_node("Tile", ["u", "reps"], ["y"]),
    ], INDEX_CONSTANTS + [const("reps", [1, 1, 3, 1])])
    c["Tile (copies)"] = ([helper.make_node("Tile", ["x", "reps"], ["y"])],
                          [const("reps", [2, 1, 3])])
    c["RMSNormalization"] = ([helper.make_node("RMSNormalization", ["x", "g"], ["y"], axis=-1,
                                               epsilon=1e-6)],
                             [const("g", np.random.rand(D), np.float32)], 23)
    # RotaryEmbedding: caches of half the rotary width from x itself (angles of any size).
    caches = [helper.make_node("Slice", ["x", "i0", "i2", "last"], ["angles"]),
              helper.make_node("Cos", ["angles"], ["cos"]),
              helper.make_node("Sin", ["angles"], ["sin"])]
    c["RotaryEmbedding (batch, heads, seq, head)"] = (caches + [
        helper.make_node("Reshape", ["x", "heads"], ["split"]),
        helper.make_node("Transpose", ["split"], ["x4"], perm=[0, 2, 1, 3]),
        helper.make_node("RotaryEmbedding", ["x4", "cos", "sin"], ["y"]),
    ], INDEX_CONSTANTS + [const("last", [-1]), const("heads", [0, 0, 2, 4])], 23)
    c["RotaryEmbedding (batch, seq, hidden), interleaved"] = (caches + [
        helper.make_node("RotaryEmbedding", ["x", "cos", "sin"], ["y"], num_heads=2,
                         interleaved=1),
    ], INDEX_CONSTANTS + [const("last", [-1])], 23)
    c["RotaryEmbedding (position_ids, partial)"] = (shape_of_x() + [
        helper.make_node("Squeeze", ["s_seq"], ["n"]),
        helper.make_node("Range", ["start", "n", "step"], ["positions"]),
        helper.make_node("Concat", ["s_batch", "s_seq"], ["bs"], axis=0),
        helper.make_node("Expand", ["positions", "bs"], ["ids"]),
        helper.make_node("RotaryEmbedding", ["x", "cos_cache", "sin_cache", "ids"], ["y"],
                         num_heads=1, rotary_embedding_dim=4),
    ], INDEX_CONSTANTS + [const("start", 0), const("step", 1),
                          const("cos_cache", np.random.randn(16, 2), np.float32),
                          const("sin_cache", np.random.randn(16, 2), np.float32)], 23)
    c["Softmax"] = ([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [])
    c["LogSoftmax"] = ([helper.make_node("LogSoftmax", ["x"], ["y"], axis=1)], [])
    c["LayerNormalization"] = ([helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"],
                                                 axis=-1, epsilon=1e-5)],
                               [const("g", np.random.rand(D), np.float32),
                                const("b", np.random.rand(D), np.float32)])
    for op in ["ReduceMean", "ReduceSum", "ReduceMax"]:
        c[op] = ([helper.make_node(op, ["x", "ax"], ["y"], keepdims=0)], [const("ax", [1])])
    c["Dropout"] = ([helper.make_node("Dropout", ["x", "r"], ["y"])],
                    [const("r", 0.1, np.float32)])
    c["CumSum"] = ([helper.make_node("CumSum", ["x", "ax"], ["y"], reverse=1)],
                   [const("ax", 1)])
    c["Gelu"] = ([helper.make_node("Gelu", ["x"], ["y"], approximate="tanh")], [], 20)
    c["QuantizeLinear/DequantizeLinear e4m3"] = ([
        helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"], saturate=1),
        helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"]),
    ], [const("s", 0.05, np.float32),
        helper.make_tensor("zp", TensorProto.FLOAT8E4M3FN, [], [0.0])], 19)
    c["QuantizeLinear e5m2"] = ([
        helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"], saturate=1),
        helper.make_node("Cast", ["q"], ["y"], to=F),
    ], [const("s", 0.01, np.float32),
        helper.make_tensor("zp", TensorProto.FLOAT8E5M2, [], [0.0])], 19)
    return c


# Cases whose values f8c infer must also give, within a relative tolerance (0: exactly, for
# what only moves elements): the operators f8c lowers to several of its own, or reads as one of
# its high-level ops.
VALUE_CASES = {"TopK (values, last axis)": 0, "TopK (indices, smallest, axis 1)": 0,
               "Tile (a size-1 axis)": 0, "Tile (copies)": 0, "Clip": 0, "Clip (max only)": 0,
               "Max (three inputs)": 0,
               "GatherND (depth 1, read as Gather)": 0,
               "GatherElements (axis 1, negative indices)": 0,
               "GatherElements (last axis, fewer indices)": 0, "RMSNormalization": 1e-5,
               "RotaryEmbedding (batch, heads, seq, head)": 1e-5,
               "RotaryEmbedding (batch, seq, hidden), interleaved": 1e-5,
               "RotaryEmbedding (position_ids, partial)": 1e-5}


def run_f8c_values(f8c, path, data, folder):
    """y from f8c infer on x = data, or the error."""
    np.save(os.path.join(folder, "x.npy"), data)
    out = os.path.join(folder, "out")
    run = subprocess.run([f8c, "infer", path, "--input", f"x={os.path.join(folder, 'x.npy')}",
                          "--output-dir", out], capture_output=True, text=True)
    if run.returncode != 0:
        return None, run.stderr.strip()
    return np.load(os.path.join(out, "y.npy")), None


def run_f8c(f8c, path, dims):
    args = [f8c, "dump-ir", path, "--format", "json", "--verify"]
    for name, value in dims.items():
        args += ["--dim", f"{name}={value}"]
    run = subprocess.run(args, capture_output=True, text=True)
    if run.returncode != 0:
        return None, run.stderr.strip()
    graph = json.loads(run.stdout)
    types = {}
    for value in graph["inputs"]:
        types[value["name"]] = value
    for node in graph["nodes"]:
        for value in node["outputs"]:
            types[value["name"]] = value
    types["<output>"] = types.get(graph["outputs"][0])
    return types, None


DTYPES = {np.dtype(np.float32): "f32", np.dtype(np.int64): "i64", np.dtype(np.bool_): "bool",
          np.dtype(np.int32): "i32"}


def onnx_dtype_name(elem_type):
    return {F: "f32", I64: "i64", TensorProto.BOOL: "bool", TensorProto.INT32: "i32",
            TensorProto.BFLOAT16: "bf16", TensorProto.FLOAT8E4M3FN: "e4m3",
            TensorProto.FLOAT8E5M2: "e5m2"}[elem_type]


def evaluate(dim, sizes):
    """A symbolic dim as f8c prints it ("seq+1", "2*batch*seq") for the given sizes."""
    if isinstance(dim, int):
        return dim
    return eval(re.sub(r"[A-Za-z_]\w*", lambda m: str(sizes[m.group(0)]), dim))


def main():
    f8c = sys.argv[1]
    seed = int(os.environ.get("F8C_TEST_SEED", time.time_ns() % 2**31))
    print(f"seed {seed}")
    random.seed(seed)
    np.random.seed(seed)
    sizes = {"batch": random.randint(1, 4), "seq": random.randint(2, 9)}
    failures = 0
    folder = tempfile.mkdtemp(prefix="f8c-onnx-ops-")
    for name, case in cases().items():
        nodes, inits = case[0], case[1]
        opset = case[2] if len(case) > 2 else 18
        x = helper.make_tensor_value_info("x", F, ["batch", "seq", D])
        y = helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)
        graph = helper.make_graph(nodes, "case", [x], [y], initializer=inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 10
        model = onnx.shape_inference.infer_shapes(model)
        path = os.path.join(folder, re.sub(r"\W+", "_", name) + ".onnx")
        onnx.save(model, path)
        problems = []
        data = np.random.randn(sizes["batch"], sizes["seq"], D).astype(np.float32)
        try:
            options = onnxruntime.SessionOptions()
            options.log_severity_level = 3
            session = onnxruntime.InferenceSession(path, options,
                                                   providers=["CPUExecutionProvider"])
            expected = session.run(None, {"x": data})[0]
            expected_dtype = onnx_dtype_name(model.graph.output[0].type.tensor_type.elem_type)
        except Exception as error:
            problems.append(f"onnxruntime: {error}")
            expected = None
        bound_types, error = run_f8c(f8c, path, sizes)
        symbolic_types, error2 = run_f8c(f8c, path, {})
        bound = bound_types and bound_types.get("<output>")
        symbolic = symbolic_types and symbolic_types.get("<output>")
        if error or error2:
            problems.append(f"f8c: {error or error2}")
        else:
            # Every intermediate's dtype as ONNX's own shape inference has it.
            for info in model.graph.value_info:
                mine = symbolic_types.get(info.name)
                theirs = onnx_dtype_name(info.type.tensor_type.elem_type)
                if mine and mine["dtype"] != theirs:
                    problems.append(f"{info.name}: f8c {mine['dtype']}, onnx {theirs}")
        if not (error or error2) and expected is not None:
            if bound["dtype"] != expected_dtype or bound["shape"] != list(expected.shape):
                problems.append(f"bound: f8c {bound['dtype']}{bound['shape']}, onnxruntime "
                                f"{expected_dtype}{list(expected.shape)}")
            evaluated = [evaluate(dim, sizes) for dim in symbolic["shape"]]
            if evaluated != list(expected.shape):
                problems.append(f"symbolic: f8c {symbolic['shape']} = {evaluated}, onnxruntime "
                                f"{list(expected.shape)}")
        if name in VALUE_CASES and expected is not None and not (error or error2):
            got, error = run_f8c_values(f8c, path, data, folder)
            if error:
                problems.append(f"f8c infer: {error}")
            elif got.shape != expected.shape or not np.allclose(
                    got, expected, rtol=VALUE_CASES[name], atol=VALUE_CASES[name]):
                problems.append(f"values: f8c {got.shape} differs from onnxruntime "
                                f"{expected.shape} beyond {VALUE_CASES[name]}")
        print(("ok  " if not problems else "FAIL") + f" {name}: "
              + (f"{symbolic['shape']}" if symbolic else ""))
        for problem in problems:
            print(f"     {problem}")
        failures += bool(problems)
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
