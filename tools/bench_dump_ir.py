#!/usr/bin/env python3
"""Benchmark: how long f8c takes to build and print the zoo's largest models, and to import and
fuse the exporter fixtures (the frontends issue asks for gpt3-175b under a second).

Each row is the best of REPEATS runs of the f8c command, wall clock, output to /dev/null. The
result table goes to stdout; commit it, with the date and machine it prints, in
tools/bench_dump_ir.md.

Usage: python3 tools/bench_dump_ir.py [F8C] [REPEATS]
"""
import datetime
import os
import platform
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = [
    ("models/gpt-1.3b.json", []),
    ("models/gpt3-175b.json", []),
    ("models/gpt3-175b.json", ["--after", "fuse-patterns", "--verify"]),
    ("models/llama3-70b.json", ["--after", "fuse-patterns", "--verify"]),
    ("models/mixtral-8x7b.json", ["--after", "fuse-patterns", "--verify"]),
    ("tests/data/onnx/llama-tiny/model.onnx", ["--after", "fuse-patterns", "--verify"]),
    ("tests/data/onnx/gpt2-tiny/model.onnx", ["--after", "fuse-patterns", "--verify"]),
]


def best_time(command, repeats):
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        best = min(best, time.perf_counter() - start)
    return best


def main():
    f8c = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "f8c")
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    cpus = os.cpu_count()
    print(f"f8c dump-ir, best of {repeats}, {datetime.date.today()}, {platform.machine()}, "
          f"{cpus} CPUs, {platform.platform()}")
    print()
    print("| model | options | seconds |")
    print("| --- | --- | --- |")
    for model, options in CASES:
        seconds = best_time([f8c, "dump-ir", os.path.join(ROOT, model)] + options, repeats)
        print(f"| {model} | {' '.join(options) or '-'} | {seconds:.3f} |")


if __name__ == "__main__":
    main()
