"""Each part of f8c's training step inside the step against the same part alone (issue 15).

  step_alone.py PROFILE STEP_ALONE [OUT_JSON]

PROFILE: the JSON that `f8c train --profile FILE` writes (runtime/cuda/profile.h; gpu_bench.py
leaves it in its WORK folder as profile.json): per launch item, the layers alike summed, its
time per step. STEP_ALONE: the JSON lines that tests/gpu/step_alone.c printed for the same
plan on the same GPU: each distinct GEMM alone, a device-to-device copy, each fused group's
bytes. Prints two Markdown tables, and writes their figures to OUT_JSON when given:

  - each GEMM: its time per launch inside the step (the profile's events around it, over its
    launches per step) against its median alone (back to back, and with L2 flushed before each
    run), and their ratio;
  - each generated kernel family: the bytes its launches bind per step (step_alone.c's count:
    every buffer argument once per launch at its value's size, the least a kernel must move)
    over its time per step, against the 1 GiB copy's bandwidth (bytes read plus written).
"""
import json
import re
import sys


def load_lines(path):
    lines = []
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            lines.append(json.loads(line))
    return lines


def gemm_rows(top, gemms):
    by_name = {t["name"]: t for t in top if t["category"].startswith("gemm")}
    rows = []
    for g in gemms:
        t = by_name.get(g["gemm"])
        if not t or not t["launches_per_step"]:
            continue
        in_step = t["ms_per_step"] / t["launches_per_step"]
        scope = re.sub(r"layers\.\d+", "layers.*", g["scope"])
        rows.append({
            "gemm": g["gemm"], "scope": scope, "kind": g["kind"], "m": g["m"], "n": g["n"],
            "k": g["k"], "dtypes": f'{g["a"]} x {g["b"]} -> {g["y"]}',
            "launches_per_step": t["launches_per_step"],
            "in_step_ms": round(in_step, 4), "alone_ms": g["median_ms"],
            "alone_flushed_ms": g["flushed_median_ms"],
            "ratio": round(in_step / g["median_ms"], 3),
            "ratio_flushed": round(in_step / g["flushed_median_ms"], 3),
            "in_step_tflop_per_s": round(2.0 * g["m"] * g["n"] * g["k"] / in_step / 1e9, 1),
            "alone_tflop_per_s": g["tflop_per_s"],
        })
    return rows


def family_rows(top, groups, copy_gb_per_s):
    # The groups' bytes by (family, name as the profile sums them).
    classes = {}
    for g in groups:
        key = ("kernels: " + g["family"], g["group"])
        bytes_sum, count = classes.get(key, (0.0, 0))
        classes[key] = (bytes_sum + max(g["bytes"], 0), count + 1)
    families, items = {}, []
    for t in top:
        key = (t["category"], t["name"])
        if not t["category"].startswith("kernels: "):
            continue
        bytes_sum, count = classes.get(key, (0.0, 0))
        per_step = bytes_sum / count * t["launches_per_step"] if count else 0.0
        family = t["category"][len("kernels: "):]
        f = families.setdefault(family, {"family": family, "ms_per_step": 0.0,
                                         "bytes_per_step": 0.0, "launches_per_step": 0.0,
                                         "unmatched_ms": 0.0})
        f["ms_per_step"] += t["ms_per_step"]
        f["launches_per_step"] += t["launches_per_step"]
        f["bytes_per_step"] += per_step
        if not count:
            f["unmatched_ms"] += t["ms_per_step"]
        if t["ms_per_step"] > 0:
            items.append({"family": family, "name": t["name"], "items": t["items"],
                          "ms_per_step": t["ms_per_step"], "bytes_per_step": per_step,
                          "gb_per_s": round(per_step / t["ms_per_step"] / 1e6, 1),
                          "share_of_copy": round(per_step / t["ms_per_step"] / 1e6
                                                 / copy_gb_per_s, 3)})
    rows = []
    for f in sorted(families.values(), key=lambda f: -f["ms_per_step"]):
        gb_per_s = f["bytes_per_step"] / f["ms_per_step"] / 1e6 if f["ms_per_step"] else 0
        rows.append({**f, "ms_per_step": round(f["ms_per_step"], 4),
                     "gb_per_step": round(f["bytes_per_step"] / 1e9, 3),
                     "gb_per_s": round(gb_per_s, 1),
                     "share_of_copy": round(gb_per_s / copy_gb_per_s, 3)})
    return rows, sorted(items, key=lambda i: -i["ms_per_step"])


def main(profile_path, alone_path, out_path=None):
    profile = json.load(open(profile_path))
    lines = load_lines(alone_path)
    device = next((l for l in lines if "device" in l), {})
    copies = [l["copy"] for l in lines if "copy" in l]
    copy = max(copies, key=lambda c: c["size_bytes"])
    gemms = gemm_rows(profile["top"], [l for l in lines if "gemm" in l])
    families, items = family_rows(profile["top"], [l for l in lines if "group" in l],
                                  copy["gb_per_s"])
    print(f'device {device.get("device")}, cuBLASLt {device.get("cublaslt")}; copy '
          f'{copy["size_bytes"] >> 20} MiB: {copy["gb_per_s"]} GB/s (read + written)\n')
    print("| GEMM (output) | scope | kind | m x n x k | dtypes | in step ms | alone ms | ratio "
          "| alone, L2 flushed, ms | ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in gemms:
        print(f'| {r["gemm"]} | {r["scope"]} | {r["kind"]} | {r["m"]} x {r["n"]} x {r["k"]} | '
              f'{r["dtypes"]} | {r["in_step_ms"]:.3f} | {r["alone_ms"]:.3f} | {r["ratio"]:.2f} | '
              f'{r["alone_flushed_ms"]:.3f} | {r["ratio_flushed"]:.2f} |')
    print("\n| family | launches per step | GB moved per step | ms per step | GB/s | "
          "of the copy's |")
    print("| --- | --- | --- | --- | --- | --- |")
    for f in families:
        print(f'| {f["family"]} | {f["launches_per_step"]:.0f} | {f["gb_per_step"]:.2f} | '
              f'{f["ms_per_step"]:.2f} | {f["gb_per_s"]:.0f} | {100 * f["share_of_copy"]:.0f}% |')
    result = {"device": device, "copy": copies, "gemms": gemms, "families": families,
              "items": items, "profile_wall_ms_per_step": profile["wall_ms_per_step"]}
    if out_path:
        json.dump(result, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:4])
