#!/usr/bin/env python3
"""f8c's CPU FP8Gemm (the oracle the GPU backend will be checked against) against cuBLASLt's FP8
GEMM on an H200: tests/data/reference/fp8-gemm-h200.safetensors holds random FP8 operands, their
scale_invs and what torch._scaled_mm computed from them on sm_90 (made by
tests/data/make_fp8_gemm_reference.py). For each case (per-tensor E4M3 x E4M3 to f32, E5M2 x E4M3
to bf16, rowwise E4M3 to bf16) kernel_tool runs one FP8Gemm on the same codes and scales, and
the two must agree within the H200's accumulation error (its FP8 tensor cores keep about 14
bits while accumulating, far fewer than f8c's float32) plus a bf16 rounding on each side for bf16 outputs.
f8c is also held to float32 accumulation error against a float64 product of the decoded
operands, which neither computed.

Usage: test_fp8_gemm_h200.py KERNEL_TOOL SOURCE_DIR
"""
import os
import subprocess
import sys
import tempfile

import ml_dtypes
import numpy as np
from safetensors.numpy import load_file

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from checks import check, finish  # noqa: E402

CASES = {  # name: (a's format, output dtype, rowwise)
    "e4m3_e4m3_f32": ("e4m3", "f32", False),
    "e5m2_e4m3_bf16": ("e5m2", "bf16", False),
    "rowwise_bf16": ("e4m3", "bf16", True),
}
NUMPY_FP8 = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}


def decode(codes, fmt):
    return codes.view(NUMPY_FP8[fmt]).astype(np.float32)


def run_case(tool, folder, name, tensors):
    fmt, out, rowwise = CASES[name]
    a = decode(tensors[f"{name}.a"], fmt)
    b = decode(tensors[f"{name}.b"], "e4m3")
    sa, sb = tensors[f"{name}.a_scale_inv"], tensors[f"{name}.b_scale_inv"]
    reference = tensors[f"{name}.out"].astype(np.float64)
    for leaf, array in (("a", a), ("b", b), ("sa", sa), ("sb", sb)):
        np.save(os.path.join(folder, f"{leaf}.npy"), array)
    shape = lambda x: ", ".join(str(d) for d in x.shape)  # noqa: E731
    blocks = ", a_block=[1, 0], b_block=[1, 0]" if rowwise else ""
    graph = (f"graph gemm {{\n  input %a : {fmt}[{shape(a)}]\n  input %b : e4m3[{shape(b)}]\n"
             f"  input %sa : f32[{shape(sa)}]\n  input %sb : f32[{shape(sb)}]\n"
             f"  %y = FP8Gemm(%a, %b, %sa, %sb) {{to={out}, gemm=\"fwd\"{blocks}}}\n"
             f"  output %y\n}}\n")
    with open(os.path.join(folder, "graph.f8t"), "w") as f:
        f.write(graph)
    done = subprocess.run([tool, os.path.join(folder, "graph.f8t"), folder], capture_output=True,
                          text=True, timeout=120)
    if not check(done.returncode == 0, f"{name}: kernel_tool runs the FP8Gemm", graph + done.stderr):
        return
    got = np.load(os.path.join(folder, "y.npy")).astype(np.float64)
    scale_a = sa.astype(np.float64).reshape(-1, 1) if rowwise else float(sa)
    scale_b = sb.astype(np.float64).reshape(1, -1) if rowwise else float(sb)
    exact = (a.astype(np.float64) @ b.astype(np.float64).T) * scale_a * scale_b
    magnitude = (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64).T) * \
        np.abs(scale_a) * np.abs(scale_b)
    # f8c accumulates in float32: against float64, a few times K * 2^-24 of the sum of
    # magnitudes. Hopper's FP8 tensor cores keep fewer bits while accumulating (about 14, as the
    # DeepSeek-V3 report measured; this file's cases are 2^-11.2 of the magnitude sum off float64
    # at K = 256), so against the H200 the bound is 2^-9 of the magnitude sum. A bf16 output is
    # off by up to half an ulp, at most 2^-8 of its value: once against float64, on each side
    # against the H200.
    half_ulp = 2.0 ** -8 * np.abs(exact) if out == "bf16" else 0
    bounds = {"the H200": 2.0 ** -9 * magnitude + 2 * half_ulp,
              "float64": 4 * a.shape[1] * 2.0 ** -24 * magnitude + half_ulp}
    for what, value in (("the H200", reference), ("float64", exact)):
        bound = bounds[what]
        error = np.abs(got - value)
        worst = float(np.max(error / np.maximum(bound, 1e-30)))
        check(np.all(error <= bound) and got.shape == value.shape,
              f"{name}: f8c within the bound of {what} (worst {worst:.3f} of the bound; max "
              f"abs difference {float(np.max(error)):.3g})")
    print(f"{name}: max |f8c - H200| {float(np.max(np.abs(got - reference))):.3g}, "
          f"max |H200 - float64| {float(np.max(np.abs(reference - exact))):.3g}, "
          f"max |f8c - float64| {float(np.max(np.abs(got - exact))):.3g}")


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    tool, source = sys.argv[1], sys.argv[2]
    path = os.path.join(source, "tests", "data", "reference", "fp8-gemm-h200.safetensors")
    tensors = load_file(path)
    for name in CASES:
        with tempfile.TemporaryDirectory() as folder:
            run_case(tool, folder, name, tensors)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
