"""What a plan's training step costs on the GPU (tools/gpu_checks.sh, run.sh bench).

  gpu_bench.py F8C PLAN TOKENS WORK

Two runs of `f8c train PLAN --device cuda`, one after the other:
  - ITERATIONS iterations as f8c trains by default (each kind of run replayed as a CUDA graph),
    logged every iteration: tokens/s is the median of the iterations after the first
    WARMUP (the first captures the graphs, the heuristics and cuDNN's plans are made at
    load), so at least 20 iterations count;
  - PROFILED iterations with --profile (every launch timed by CUDA events, no CUDA graphs):
    the share of the step's time in the GEMMs by precision, attention, the generated kernels
    by family, and idle, and the 25 launches (the layers' alike summed) with the most time; the device memory's peak (cuMemGetInfo at each run's end) and what
    f8c's own buffers came to.
Prints one JSON object (and writes it to WORK/bench.json): the plan, tokens/s, the step time,
the GEMM FLOPs the plan counts per second (and against the H200's dense BF16 datasheet peak,
about 990 TFLOP/s), peak memory, and the profile's categories.
"""
import json
import os
import statistics
import subprocess
import sys

ITERATIONS = 30
WARMUP = 5
PROFILED = 12


def run(command):
    print("$", " ".join(command), flush=True)
    result = subprocess.run(command, capture_output=True, text=True)
    print(result.stderr[-4000:], flush=True)
    if result.returncode:
        raise SystemExit(f"f8c train failed ({result.returncode})")
    return result.stderr


def main(f8c, plan, tokens, work):
    os.makedirs(work, exist_ok=True)
    metrics = os.path.join(work, "metrics.jsonl")
    base = [f8c, "train", plan, "--data", tokens, "--device", "cuda", "--eval-interval", "0",
            "--log-interval", "1"]
    run(base + ["--train-iters", str(ITERATIONS), "--metrics", metrics, "--verbose"])
    lines = [json.loads(line) for line in open(metrics)]
    counted = [line["tokens_per_s"] for line in lines if line["step"] > WARMUP]
    tokens_per_s = statistics.median(counted)
    profile = os.path.join(work, "profile.json")
    run(base + ["--train-iters", str(PROFILED), "--profile", profile])
    breakdown = json.load(open(profile))
    document = json.load(open(os.path.join(plan, "plan.json")))
    estimates = document.get("estimates", {})
    options = document.get("compile_args", [])
    if "--global-batch-size" not in options:
        options += ["--global-batch-size", options[options.index("--micro-batch-size") + 1]]
    value = lambda key: float(options[options.index(key) + 1]) if key in options else None
    tokens_per_iteration = value("--global-batch-size") * value("--seq-length")
    micro_batches = value("--global-batch-size") / value("--micro-batch-size")
    step_seconds = tokens_per_iteration / tokens_per_s
    # The GEMMs' FLOPs the plan counts (2 m n k, forward and backward, per micro-batch;
    # attention's are not among them) per second, and against the dense BF16 datasheet peak.
    gemm_tflops = estimates.get("gemm_flops", 0) * micro_batches / step_seconds / 1e12
    result = {
        "plan": os.path.basename(os.path.normpath(plan)),
        "compile_args": options,
        "tokens_per_s": round(tokens_per_s),
        "tokens_per_s_min_max": [round(min(counted)), round(max(counted))],
        "iterations_counted": len(counted),
        "step_ms": round(step_seconds * 1e3, 3),
        "gemm_tflops_per_s": round(gemm_tflops, 1),
        "gemm_share_of_bf16_peak_990": round(gemm_tflops / 990, 3),
        "profiled_ms_per_step": breakdown["wall_ms_per_step"],
        "device_peak_gib": round(breakdown["device_peak_bytes"] / 2**30, 2),
        "f8c_peak_gib": round(breakdown["f8c_peak_bytes"] / 2**30, 2),
        "idle_share": round(breakdown["idle_ms_per_step"] / breakdown["wall_ms_per_step"], 4),
        "shares": {c["name"]: round(c["share"], 4) for c in breakdown["categories"]},
        # The launches with the most time, the layers' alike summed (profile.h's "top").
        "top": [{"what": f'{t["category"]}: {t["name"]} x{t["items"]}',
                 "ms_per_step": round(t["ms_per_step"], 3), "share": round(t["share"], 4)}
                for t in breakdown.get("top", [])[:25]],
        "estimates": estimates,
    }
    json.dump(result, open(os.path.join(work, "bench.json"), "w"), indent=1)
    print(json.dumps(result))


if __name__ == "__main__":
    main(*sys.argv[1:5])
