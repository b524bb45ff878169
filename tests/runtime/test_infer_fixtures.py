#!/usr/bin/env python3
"""`f8c infer` on the committed exporter fixtures (tests/data/onnx/*, made by
tests/data/make_onnx_fixtures.py): each model's logits on its input_ids.npy against the logits
the fixture ships (onnxruntime's, or torch's where onnxruntime cannot run the model; ops.txt says
which).

The error is max |f8c - reference| / max |reference| over the whole output. f32 models: 1e-4
(f8c's CPU kernels round once per stored element and accumulate GEMMs in f32, as onnxruntime
does; two layers and a 256-way head stay around 1e-6). bf16 models: 2e-2, since their
reference comes from torch in bf16, where every activation is rounded to 8 bits of mantissa
(2^-8 = 4e-3 relative) and the two implementations round at different places.

Usage: test_infer_fixtures.py F8C SOURCE_DIR
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
BF16_TOLERANCE = 2e-2


def model_info(path):
    """The graph's input names, output names, and whether its weights are bf16."""
    model = onnx.load(path, load_external_data=False)
    initializers = {i.name for i in model.graph.initializer}
    inputs = [i.name for i in model.graph.input if i.name not in initializers]
    outputs = [o.name for o in model.graph.output]
    bf16 = any(i.data_type == onnx.TensorProto.BFLOAT16 for i in model.graph.initializer)
    return inputs, outputs, bf16


def check_fixture(f8c, folder, name):
    model = os.path.join(folder, "model.onnx")
    inputs, outputs, bf16 = model_info(model)
    if not check(inputs == ["input_ids"] and len(outputs) == 1, f"{name}: interface",
                 f"inputs {inputs}, outputs {outputs}: expected input_ids and one output"):
        return
    with tempfile.TemporaryDirectory() as out_dir:
        command = [f8c, "infer", model, "--input", "input_ids=" +
                   os.path.join(folder, "input_ids.npy"), "--output-dir", out_dir]
        start = time.monotonic()
        run = subprocess.run(command, capture_output=True, text=True, timeout=600)
        seconds = time.monotonic() - start
        if not check(run.returncode == 0, f"{name}: f8c infer exited {run.returncode}",
                     f"{' '.join(command)}\n{run.stdout}{run.stderr}"):
            return
        path = os.path.join(out_dir, outputs[0] + ".npy")
        if not check(os.path.exists(path), f"{name}: no {outputs[0]}.npy",
                     f"f8c infer wrote {sorted(os.listdir(out_dir))}"):
            return
        got = np.load(path)
    want = np.load(os.path.join(folder, "logits.npy"))
    if not check(got.shape == want.shape, f"{name}: shape",
                 f"f8c {got.shape}, reference {want.shape}"):
        return
    tolerance = BF16_TOLERANCE if bf16 else TOLERANCE
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    error = np.abs(got64 - want64).max() / np.abs(want64).max()
    ok = check(bool(np.isfinite(got64).all()) and error <= tolerance, f"{name}: logits",
               f"max relative error {error:.3e} > {tolerance:.0e}")
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {'bf16' if bf16 else 'f32'} {got.dtype} "
          f"{tuple(got.shape)}, max relative error {error:.2e} (tolerance {tolerance:.0e}), "
          f"{seconds:.2f} s")


def main():
    f8c, source = sys.argv[1], sys.argv[2]
    root = os.path.join(source, "tests", "data", "onnx")
    fixtures = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    check(len(fixtures) >= 8, "fixtures", f"only {fixtures}")
    for name in fixtures:
        check_fixture(f8c, os.path.join(root, name), name)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
