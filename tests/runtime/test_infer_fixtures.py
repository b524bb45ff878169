#!/usr/bin/env python3
"""`f8c infer` on the committed exporter fixtures (tests/data/onnx/*, and with `families` the
other decoder families and exporter variants of tests/data/onnx-families/*, made by
tests/data/make_onnx_fixtures.py): each model's logits on its inputs (input_ids.npy, and
attention_mask.npy and position_ids.npy where the model takes them) against the logits the
fixture ships (onnxruntime's, or torch's where onnxruntime cannot run the model; ops.txt says
which). A model with more outputs (a use_cache export's keys and values) is held to its logits.
A family f8c cannot read yet is in GAPS with the operator it lacks: the test asserts that
error, and fails when the model reads, so that the list shrinks as f8c grows.

The error is max |f8c - reference| / max |reference| over the whole output. f32 models: 1e-4
(f8c's CPU kernels round once per stored element and accumulate GEMMs in f32, as onnxruntime
does; two layers and a 256-way head stay around 1e-6). bf16 models: 2e-2, since their
reference comes from torch in bf16, where every activation is rounded to 8 bits of mantissa
(2^-8 = 4e-3 relative) and the two implementations round at different places. fp16 models:
5e-3 (2^-11 = 5e-4 relative per rounding; 8e-4 measured).

Usage: test_infer_fixtures.py F8C SOURCE_DIR [families]
"""
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from checks import check, finish  # noqa: E402

TOLERANCE = 1e-4
HALF_TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3}
# family -> the operator f8c does not read yet (issue 19)
GAPS = {}


def model_info(path):
    """The graph's input names, output names, and its weights' half type (bf16, fp16 or
    None)."""
    model = onnx.load(path, load_external_data=False)
    initializers = {i.name for i in model.graph.initializer}
    inputs = [i.name for i in model.graph.input if i.name not in initializers]
    outputs = [o.name for o in model.graph.output]
    types = {i.data_type for i in model.graph.initializer}
    half = "bf16" if onnx.TensorProto.BFLOAT16 in types else \
        "fp16" if onnx.TensorProto.FLOAT16 in types else None
    return inputs, outputs, half


def check_fixture(f8c, folder, name):
    model = os.path.join(folder, "model.onnx")
    inputs, outputs, half = model_info(model)
    feeds = {i: os.path.join(folder, i + ".npy") for i in inputs}
    missing = [i for i, path in feeds.items() if not os.path.exists(path)]
    if not check(not missing and outputs[:1] == ["logits"], f"{name}: interface",
                 f"inputs {inputs} (no .npy for {missing}), outputs {outputs}: expected the "
                 "logits first"):
        return
    with tempfile.TemporaryDirectory() as out_dir:
        command = [f8c, "infer", model, "--output-dir", out_dir]
        for feed, path in feeds.items():
            command += ["--input", f"{feed}={path}"]
        start = time.monotonic()
        run = subprocess.run(command, capture_output=True, text=True, timeout=600)
        seconds = time.monotonic() - start
        if name in GAPS:
            wanted = f"does not support operator {GAPS[name]}"
            ok = check(run.returncode != 0 and wanted in run.stderr, f"{name}: the known gap",
                       f"GAPS says f8c refuses {GAPS[name]}; it exited {run.returncode}: "
                       f"{run.stderr[-400:]} (reads now? take it off GAPS)")
            print(f"{'ok  ' if ok else 'FAIL'} {name}: refused, as GAPS says: {wanted}")
            return
        if not check(run.returncode == 0, f"{name}: f8c infer exited {run.returncode}",
                     f"{' '.join(command)}\n{run.stdout}{run.stderr}"):
            return
        path = os.path.join(out_dir, "logits.npy")
        if not check(os.path.exists(path), f"{name}: no logits.npy",
                     f"f8c infer wrote {sorted(os.listdir(out_dir))}"):
            return
        got = np.load(path)
    want = np.load(os.path.join(folder, "logits.npy"))
    if not check(got.shape == want.shape, f"{name}: shape",
                 f"f8c {got.shape}, reference {want.shape}"):
        return
    tolerance = HALF_TOLERANCE[half] if half else TOLERANCE
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    error = np.abs(got64 - want64).max() / np.abs(want64).max()
    ok = check(bool(np.isfinite(got64).all()) and error <= tolerance, f"{name}: logits",
               f"max relative error {error:.3e} > {tolerance:.0e}")
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {half or 'f32'} {got.dtype} "
          f"{tuple(got.shape)}, max relative error {error:.2e} (tolerance {tolerance:.0e}), "
          f"{seconds:.2f} s")


def main():
    f8c, source = sys.argv[1], sys.argv[2]
    families = len(sys.argv) > 3 and sys.argv[3] == "families"
    root = os.path.join(source, "tests", "data", "onnx-families" if families else "onnx")
    fixtures = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    check(len(fixtures) >= (18 if families else 8), "fixtures", f"only {fixtures}")
    for name in fixtures:
        check_fixture(f8c, os.path.join(root, name), name)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
