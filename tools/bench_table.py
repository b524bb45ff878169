#!/usr/bin/env python3
"""The benchmark's table: f8c's runs (gpu_bench.py's bench-PLAN.json) and PyTorch's
(bench_torch.py's torch-MODEL-MODE.json) of one GPU session, side by side, each against
PyTorch's BF16 torch.compile of the same model from the same session.

  bench_table.py RESULTS_FOLDER      (tools/gpu_results/DATE-bench: what run.sh bench and
                                      run.sh torch wrote to $OUT, and the plans' compile logs)

Prints a Markdown table: tokens/s (the median of the counted iterations) and its ratio, the
step, the device memory in use at the peak (the driver's view for both, cuMemGetInfo) and its
ratio, model FLOPs utilization (bench_torch.py's formula for both: 6 N + 12 L H S FLOPs per
token, N every parameter, against the H200's dense BF16 989.4 TFLOP/s), and the time to the
first step: f8c compile's (on the machine that compiled the plan) and torch.compile's first
step.
"""
import glob
import json
import os
import re
import sys

PEAK = 989.4e12


def load(path):
    with open(path) as file:
        return json.load(file)


def main(folder):
    torch_runs = {}
    for path in sorted(glob.glob(os.path.join(folder, "torch-*.json"))):
        run = load(path)
        torch_runs[(run["model"].removesuffix(".json"), run["mode"])] = run
    rows = []
    for model in ("gpt2-124m", "gpt-1.3b"):
        baseline = torch_runs.get((model, "bf16-compile"))
        if not baseline:
            continue
        base_tps, base_mem = baseline["tokens_per_s"], baseline["device_used_gib"]
        flops = baseline["flops_per_token"]
        for mode in ("bf16-eager", "bf16-compile", "fp8-compile"):
            run = torch_runs.get((model, mode))
            if run:
                rows.append((model, f"PyTorch {mode}", run["tokens_per_s"], base_tps,
                             run["step_ms"], run["device_used_gib"], base_mem, run["mfu"],
                             f'{run["first_step_s"]:.0f} s (first step)'))
        for path in sorted(glob.glob(os.path.join(folder, f"bench-{model}-*.json"))):
            run = load(path)
            plan = run["plan"]
            compile_log = os.path.join(folder, f"compile-{plan}.log")
            compiled = "?"
            if os.path.exists(compile_log):
                found = re.search(r"([\d.]+) s in all", open(compile_log).read())
                compiled = f"{float(found.group(1)):.1f} s (f8c compile)" if found else "?"
            rows.append((model, f"f8c {plan.removeprefix(model + '-')}", run["tokens_per_s"],
                         base_tps, run["step_ms"], run["device_peak_gib"], base_mem,
                         run["tokens_per_s"] * flops / PEAK, compiled))
    print("| model | run | tokens/s | vs PyTorch BF16 compile | step ms | device memory GiB | "
          "vs PyTorch BF16 compile | MFU | to the first step |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for model, name, tps, base_tps, step, mem, base_mem, mfu, first in rows:
        print(f"| {model} | {name} | {tps:,} | {tps / base_tps:.2f}x | {step:.1f} | {mem:.2f} | "
              f"{mem / base_mem:.2f}x | {100 * mfu:.1f}% | {first} |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
