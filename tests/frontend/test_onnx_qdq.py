"""ONNX models that quantize themselves to FP8 (QuantizeLinear / DequantizeLinear, opset 19):
f8c reads each QDQ product as an FP8Gemm at the model's own scales, its decision and its
operands' recorded "from the model" (recipe=model), and computes what onnxruntime computes on
fresh inputs; a product Hopper's FP8 GEMMs cannot take (K or N not a multiple of 16) runs
dequantized, and the report says why.

usage: test_onnx_qdq.py F8C
"""
import os
import subprocess
import sys
import tempfile

import ml_dtypes
import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from checks import check, finish  # noqa: E402

F8C = sys.argv[1]
E4M3, E5M2 = TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2


def model(k, n, x_format, weight, x_scale, w_scale):
    """x (batch, seq, k) @ w (k, n), both through QDQ; weight "fake" quantizes an f32 weight in
    the graph, "stored" keeps the weight's FP8 codes as the initializer."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", k])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", n])
    w = np.random.randn(k, n).astype(np.float32)
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["qx"]),
             helper.make_node("DequantizeLinear", ["qx", "sx", "zx"], ["dx"]),
             helper.make_node("DequantizeLinear", ["qw", "sw", "zw"], ["dw"]),
             helper.make_node("MatMul", ["dx", "dw"], ["y"])]
    inits = [numpy_helper.from_array(np.array(x_scale, np.float32), "sx"),
             numpy_helper.from_array(np.array(w_scale, np.float32), "sw"),
             helper.make_tensor("zx", x_format, [], [0]), helper.make_tensor("zw", E4M3, [], [0])]
    if weight == "fake":
        nodes.insert(2, helper.make_node("QuantizeLinear", ["w", "sw", "zw"], ["qw"]))
        inits.append(numpy_helper.from_array(w, "w"))
    else:  # the weight's codes (saturated, rounded by ml_dtypes), stored
        codes = np.clip(w / w_scale, -448, 448).astype(ml_dtypes.float8_e4m3fn)
        inits.append(helper.make_tensor("qw", E4M3, [k, n], codes.view(np.uint8).tobytes(),
                                        raw=True))
    graph = helper.make_graph(nodes, "qdq", [x], [y], initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 9
    onnx.checker.check_model(m)
    return m


def run_case(name, folder, m, k, fused):
    path = os.path.join(folder, name.replace(" ", "_") + ".onnx")
    onnx.save(m, path)
    x = (np.random.randn(2, 5, k) * 2).astype(np.float32)
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    expected = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"]) \
        .run(None, {"x": x})[0]
    np.save(os.path.join(folder, "x.npy"), x)
    out = os.path.join(folder, "out")
    r = subprocess.run([F8C, "infer", path, "--input", f"x={folder}/x.npy", "--output-dir", out],
                       capture_output=True, text=True)
    if check(r.returncode == 0, f"{name}: f8c infer runs", r.stderr):
        got = np.load(os.path.join(out, "y.npy"))
        error = float(np.abs(got - expected).max() / np.abs(expected).max())
        check(got.shape == expected.shape and error < 1e-5,
              f"{name}: the values are onnxruntime's (max error {error:.1e} of the largest)")
    d = subprocess.run([F8C, "dump-ir", path, "--after", "fuse-patterns", "--report"],
                       capture_output=True, text=True)
    gemms = [line for line in d.stdout.splitlines() if "= FP8Gemm(" in line]
    if fused:
        check(len(gemms) == 1 and "recipe=model" in gemms[0] and "FP8 from the model" in gemms[0]
              and d.stdout.count("recipe=model") == 3 and "= MatMul(" not in d.stdout,
              f"{name}: an FP8Gemm at the model's scales, it and its operands from the model",
              d.stdout + d.stderr)
    else:
        check(not gemms and "not multiples of 16" in d.stderr,
              f"{name}: runs dequantized, and the report says why", d.stderr)


def main():
    seed = int(os.environ.get("F8C_TEST_SEED", np.random.SeedSequence().entropy % 2**31))
    print(f"seed {seed}")
    np.random.seed(seed)
    folder = tempfile.mkdtemp(prefix="f8c-qdq-")
    run_case("fake-quantized weight", folder, model(32, 16, E4M3, "fake", 0.02, 0.004), 32, True)
    run_case("stored FP8 weight", folder, model(64, 32, E4M3, "stored", 0.015, 0.003), 64, True)
    run_case("E5M2 activations", folder, model(32, 48, E5M2, "fake", 0.01, 0.005), 32, True)
    run_case("K of 24", folder, model(24, 16, E4M3, "fake", 0.02, 0.004), 24, False)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
