"""The memory estimate against the GPU (issue 18's check), on the GPU machine
(tools/gpu_checks.sh, section `memory`).

  memory_check.py F8C TOKENS OUT PLAN...
      Trains each PLAN (a plan folder compiled here, its plan.json holding the estimate:
      ir/memory.h) for ITERATIONS iterations on GPU 0 while nvidia-smi samples the device's used
      memory every 20 ms; the device's peak is the largest sample less the one taken before the
      run (what the idle GPU shows). Also f8c's own peak (--verbose: what the CUDA backend
      allocated) and tokens per second. One JSON line per plan into OUT/memory.jsonl and a
      table on stdout; exit 1 when a run fails, when an estimate is more than LIMIT from the
      device's peak, or when a plan named *-budget<GiB> peaks above its budget.
"""
import json
import os
import re
import statistics
import subprocess
import sys
import threading

LIMIT = 0.05      # the 5%
ITERATIONS = 6    # the first captures each kind of run as a CUDA graph; the rest replay it
GIB = 1 << 30


def used_mib():
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                          "--id=0"], capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


class Sampler:
    """nvidia-smi's memory.used every 20 ms, in a process of its own, until stop()."""

    def __init__(self):
        self.peak = 0
        self.process = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "--id=0",
             "-lms", "20"], stdout=subprocess.PIPE, text=True)
        self.thread = threading.Thread(target=self.read, daemon=True)
        self.thread.start()

    def read(self):
        for line in self.process.stdout:
            if line.strip().isdigit():
                self.peak = max(self.peak, int(line))

    def stop(self):
        self.process.terminate()
        self.thread.join(timeout=5)
        return self.peak


def check(f8c, tokens, out, plan):
    name = os.path.basename(plan.rstrip("/"))
    estimate = json.load(open(os.path.join(plan, "plan.json")))["memory"]
    metrics = os.path.join(out, name + ".jsonl")
    idle = used_mib()
    sampler = Sampler()
    command = [f8c, "train", plan, "--data", tokens, "--train-iters", str(ITERATIONS),
               "--eval-interval", "0", "--log-interval", "1", "--metrics", metrics,
               "--device", "cuda", "--verbose"]
    result = subprocess.run(command, capture_output=True, text=True)
    peak = sampler.stop()
    with open(os.path.join(out, name + ".log"), "w") as log:
        log.write("$ " + " ".join(command) + "\n" + result.stdout + result.stderr)
    if result.returncode:
        return {"plan": name, "failed": result.returncode, "stderr": result.stderr[-800:]}
    f8c_peak = re.search(r"the backend's peak (\d+) B", result.stderr)
    steps = [json.loads(line) for line in open(metrics)]
    rates = [s["tokens_per_s"] for s in steps if s["step"] > 2]
    device = (peak - idle) * (1 << 20)
    runtime = estimate["bytes"]["CUDA runtime"]
    record = {
        "plan": name,
        "estimate_gib": round(estimate["total"] / GIB, 3),
        "device_peak_gib": round(device / GIB, 3),
        "error": round(estimate["total"] / device - 1, 4),
        "f8c_estimate_gib": round((estimate["total"] - runtime) / GIB, 3),
        "f8c_peak_gib": round(int(f8c_peak.group(1)) / GIB, 3) if f8c_peak else None,
        "activations_gib": round(estimate["bytes"]["activations"] / GIB, 3),
        "recomputed_gib": round(estimate["recomputed_activations"] / GIB, 3),
        "idle_mib": idle,
        "tokens_per_s": round(statistics.median(rates)) if rates else None,
    }
    budget = re.search(r"-budget(\d+)$", name)
    if budget:
        record["budget_gib"] = int(budget.group(1))
    return record


def main():
    f8c, tokens, out, plans = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    os.makedirs(out, exist_ok=True)
    failed = False
    with open(os.path.join(out, "memory.jsonl"), "w") as sink:
        for plan in plans:
            record = check(f8c, tokens, out, plan)
            sink.write(json.dumps(record) + "\n")
            sink.flush()
            print(json.dumps(record), flush=True)
            bad = "failed" in record or abs(record["error"]) > LIMIT or (
                "budget_gib" in record and record["device_peak_gib"] > record["budget_gib"])
            failed |= bad
            if bad:
                print(f"{record['plan']}: FAILED", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
