#!/usr/bin/env python3
"""Holds f8c's FP8 numerics against ml_dtypes, an independent implementation, on fresh inputs.

Usage: check_ml_dtypes.py PATH/TO/f8c [SEED]

Each run draws new random float32 inputs (the seed is printed; pass it back to replay a run):
  - `f8c fp8 table` for e4m3, e5m2 and e8m0: every code's value against ml_dtypes' decoding,
    and the printed fields against the code;
  - `f8c fp8 quantize` for e4m3 and e5m2, non-saturating against numpy's astype to the ml_dtypes
    type (round to nearest even, overflow to NaN or inf), saturating against the same cast after
    np.clip to +-max, with and without --scale, on ~1e6 values: random bit patterns, magnitudes
    in and around the format's range, float32 subnormals, every midpoint between neighbouring
    values and one float32 ulp either side of it, and the special values;
  - `f8c fp8 quantize e8m0` for the three roundings: nearest against ml_dtypes where both follow
    the same definition, down and up against a definition computed here with frexp;
  - malformed command lines and inputs end with exit status 2 and a HINT, never a crash.
NaN results are compared by NaN-ness, not by bits: ml_dtypes keeps the input NaN's sign and
writes 0x7E for E5M2, where f8c writes sm_90's canonical NaN (0x7F, sign dropped).
Exits 1 on any mismatch, after printing the first few of each kind.
"""

import subprocess
import sys
import time

import ml_dtypes
import numpy as np

SHOW = 8  # mismatches printed per comparison

FORMATS = {
    "e4m3": ml_dtypes.float8_e4m3fn,
    "e5m2": ml_dtypes.float8_e5m2,
    "e8m0": ml_dtypes.float8_e8m0fnu,
}


class Report:
    """Counts comparisons and mismatches, and prints the first mismatches of each check."""

    def __init__(self):
        self.checks = 0
        self.failures = 0

    def compare(self, name, ok, describe):
        """ok: a boolean array; describe(i) gives the text of mismatch i."""
        ok = np.asarray(ok, dtype=bool)
        bad = np.flatnonzero(~ok)
        self.checks += ok.size
        self.failures += bad.size
        status = "ok" if bad.size == 0 else f"{bad.size} MISMATCHES"
        print(f"  {name}: {ok.size} compared, {status}")
        for i in bad[:SHOW]:
            print(f"    {describe(i)}")

    def expect(self, name, condition, text):
        self.compare(name, np.array([condition]), lambda i: text)


def run_f8c(f8c, args, data=b""):
    return subprocess.run([f8c, "fp8", *args], input=data, capture_output=True, timeout=120)


def hex32(x):
    return f"0x{np.float32(x).view(np.uint32):08x}"


def check_assumptions(report):
    """What this test relies on ml_dtypes for, checked rather than assumed (ml_dtypes 0.5+)."""
    e4m3, e5m2, e8m0 = (FORMATS[k] for k in ("e4m3", "e5m2", "e8m0"))
    cast = lambda x, t: np.array(x, dtype=np.float32).astype(t).astype(np.float64)
    facts = [
        ("e4m3 rounds ties to even", cast([464.0, 0.0029296875], e4m3), [448.0, 0.00390625]),
        ("e4m3 does not saturate", np.isnan(cast([465.0, np.inf], e4m3)), [True, True]),
        ("e5m2 overflow gives inf", cast([61440.0, 61439.99], e5m2), [np.inf, 57344.0]),
        ("e5m2 ties to even", cast([40960.0, 1.125], e5m2), [40960.0, 1.0]),
        ("e8m0 ties go up", cast([1.5, 3.0, 6.0], e8m0), [2.0, 4.0, 8.0]),
    ]
    for name, got, want in facts:
        report.expect(f"ml_dtypes assumption: {name}", np.array_equal(got, want),
                      f"got {list(got)}, want {list(want)}")


def check_table(report, f8c, name):
    result = run_f8c(f8c, ["table", name])
    if result.returncode != 0:
        report.expect(f"table {name}", False, result.stderr.decode(errors="replace"))
        return
    lines = [l for l in result.stdout.decode().splitlines() if l and not l.startswith("#")]
    codes = np.array([int(l.split()[0], 16) for l in lines])
    # %.9g is exact for float32, which holds every value of these formats: compare as float32.
    values = np.array([float(l.split()[2]) for l in lines]).astype(np.float32)
    fields = [l.split()[1] for l in lines]
    report.expect(f"table {name}: 256 codes in order", np.array_equal(codes, np.arange(256)),
                  f"codes {codes[:4]}... ({codes.size})")
    if codes.size != 256:
        return
    want = np.arange(256, dtype=np.uint8).view(FORMATS[name]).astype(np.float32)
    same = np.where(np.isnan(want), np.isnan(values),
                    (values == want) & (np.signbit(values) == np.signbit(want)))
    report.compare(f"table {name}: values vs ml_dtypes", same,
                   lambda i: f"code 0x{i:02x}: f8c {values[i]!r}, ml_dtypes {want[i]!r}")
    widths = {"e4m3": [1, 4, 3], "e5m2": [1, 5, 2], "e8m0": [8]}[name]
    fields_ok = [[len(p) for p in f.split(".")] == widths and int(f.replace(".", ""), 2) == c
                 for c, f in zip(codes, fields)]
    report.compare(f"table {name}: bit fields", fields_ok,
                   lambda i: f"code 0x{i:02x}: fields {fields[i]}, want widths {widths}")


def format_ladder(ml_type):
    """Non-negative finite values of a format, ascending, and the virtual one past the max."""
    values = np.arange(256, dtype=np.uint8).view(ml_type).astype(np.float64)
    values = np.unique(values[np.isfinite(values) & (values >= 0)])
    return np.append(values, 2 * values[-1] - values[-2])


def random_inputs(rng, ml_type, count):
    """~count float32: mixed magnitudes, subnormals, midpoints and their neighbours, specials."""
    info = ml_dtypes.finfo(ml_type)
    low, high = int(np.log2(float(info.smallest_subnormal))) - 3, int(np.log2(float(info.max))) + 3
    signs = lambda n: rng.choice(np.float32([-1.0, 1.0]), n)
    parts = [rng.integers(0, 2**32, count // 5, dtype=np.uint64).astype(np.uint32).view(np.float32)]
    n = count // 2
    with np.errstate(over="ignore"):  # e8m0's range reaches past float32's: those become inf
        parts.append((signs(n) * np.exp2(rng.uniform(low, high, n))).astype(np.float32))
    n = count // 20
    subnormals = rng.integers(1, 2**23, n, dtype=np.uint32) | rng.choice(np.uint32([0, 2**31]), n)
    parts.append(subnormals.view(np.float32))
    ladder = format_ladder(ml_type)
    midpoints = ((ladder[:-1] + ladder[1:]) / 2).astype(np.float32)
    assert np.array_equal(midpoints.astype(np.float64), (ladder[:-1] + ladder[1:]) / 2)
    exact = np.concatenate([ladder[:-1].astype(np.float32), midpoints])
    near = [exact]
    for steps in (1, 2, 3):
        for direction in (np.inf, 0.0):
            moved = exact
            for _ in range(steps):
                moved = np.nextafter(moved, np.float32(direction))
            near.append(moved)
    near = np.concatenate(near)
    near = np.concatenate([near, -near])
    parts.append(np.tile(near, max(1, count // 5 // near.size)))
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.finfo(np.float32).max, -np.finfo(
        np.float32).max, np.finfo(np.float32).tiny, np.finfo(np.float32).smallest_subnormal],
                        dtype=np.float32)
    nans = np.uint32([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF, 0x7FBFFFFF]).view(np.float32)
    parts += [specials, nans]
    values = np.concatenate(parts).astype(np.float32)
    rng.shuffle(values)
    return values


def quantize(report, f8c, name, args, x):
    """Runs f8c fp8 quantize; returns the codes, or None after recording the failure."""
    result = run_f8c(f8c, ["quantize", name, *args], x.astype("<f4").tobytes())
    if result.returncode != 0 or len(result.stdout) != x.size:
        report.expect(f"quantize {name} {' '.join(args)}", False,
                      f"exit {result.returncode}, {len(result.stdout)} bytes for {x.size} values: "
                      + result.stderr.decode(errors="replace"))
        return None
    return np.frombuffer(result.stdout, dtype=np.uint8)


def check_quantize(report, f8c, rng, name):
    ml_type = FORMATS[name]
    fmax = np.float32(ml_dtypes.finfo(ml_type).max)
    x = random_inputs(rng, ml_type, 1_000_000)
    scale = np.float32(np.exp2(rng.uniform(-6, 6)) * rng.uniform(1, 2))
    one = np.float32(1)
    runs = [([], one), (["--no-saturate"], one), (["--scale", f"{scale:.9g}"], scale),
            (["--no-saturate", "--scale", f"{scale:.9g}"], scale)]
    for args, s in runs:
        saturate = "--no-saturate" not in args
        codes = quantize(report, f8c, name, args, x)
        if codes is None:
            continue
        with np.errstate(over="ignore", invalid="ignore"):
            y = x * s  # float32, as f8c computes it
            want_codes = (np.clip(y, -fmax, fmax) if saturate else y).astype(ml_type).view(np.uint8)
        got = codes.view(ml_type).astype(np.float64)
        want = want_codes.view(ml_type).astype(np.float64)
        ok = np.where(np.isnan(want), np.isnan(got), codes == want_codes)
        report.compare(
            f"quantize {name} {' '.join(args) or '(saturating)'}", ok,
            lambda i: f"x = {x[i]!r} ({hex32(x[i])}) * {s!r}: f8c 0x{codes[i]:02x} ({got[i]!r}), "
            f"ml_dtypes 0x{want_codes[i]:02x} ({want[i]!r})")


def e8m0_reference(x, rounding):
    """E8M0 by the contract: powers of two clamped to 2^-127..2^127, for positive finite x."""
    mantissa, exponent = np.frexp(x.astype(np.float64))  # x = mantissa * 2^exponent, [0.5, 1)
    k = exponent - 1
    if rounding == "up":
        k = k + (mantissa != 0.5)
    elif rounding == "nearest":
        k = k + (mantissa >= 0.75)
    return (np.clip(k, -127, 127) + 127).astype(np.uint8)


def check_e8m0(report, f8c, rng):
    x = random_inputs(rng, FORMATS["e8m0"], 600_000)
    positive = np.isfinite(x) & (x > 0)
    big = np.float32(1.5 * 2.0**127)
    for rounding in ("nearest", "down", "up"):
        codes = quantize(report, f8c, "e8m0", ["--round", rounding], x)
        if codes is None:
            continue
        # The definition in ir/fp8.h, for every input: NaN and negatives (not -0) give NaN,
        # zero and +inf clamp to the ends of the range.
        want = np.full(x.shape, 0xFF, dtype=np.uint8)
        want[positive] = e8m0_reference(x[positive], rounding)
        want[x == 0] = 0x00
        want[x == np.inf] = 0xFE
        report.compare(f"quantize e8m0 --round {rounding} vs the definition", codes == want,
                       lambda i: f"x = {x[i]!r} ({hex32(x[i])}): f8c 0x{codes[i]:02x}, "
                       f"want 0x{want[i]:02x}")
        if rounding != "nearest":
            continue
        # ml_dtypes' cast is not saturating and has no zero, so by design f8c differs there:
        # +-0 gives 0x00 in f8c (the smallest scale; a zero block needs one) and NaN in
        # ml_dtypes; +inf and values rounding above 2^127 give 0xFE in f8c (E8M0 saturates
        # like every f8c scale) and NaN in ml_dtypes. Everywhere else both must agree.
        agree = ~((x == 0) | (x == np.inf) | (np.isfinite(x) & (x >= big)))
        with np.errstate(over="ignore", invalid="ignore"):
            ml = x.astype(FORMATS["e8m0"]).view(np.uint8)
        report.compare("quantize e8m0 --round nearest vs ml_dtypes", (codes == ml)[agree],
                       lambda i: f"x = {x[agree][i]!r} ({hex32(x[agree][i])}): f8c "
                       f"0x{codes[agree][i]:02x}, ml_dtypes 0x{ml[agree][i]:02x}")


def check_usage_errors(report, f8c):
    cases = [
        (["table", "e4m4"], b""),
        (["quantize", "bf16"], b""),
        (["quantize", "e4m3", "--scale"], b""),
        (["quantize", "e4m3", "--scale", "0"], b""),
        (["quantize", "e4m3", "--scale", "inf"], b""),
        (["quantize", "e4m3", "--round", "up"], b""),
        (["quantize", "e8m0", "--no-saturate"], b""),
        (["frobnicate"], b""),
    ]
    for args, data in cases:
        result = run_f8c(f8c, args, data)
        stderr = result.stderr.decode(errors="replace")
        report.expect(f"usage error: f8c fp8 {' '.join(args)} ({len(data)} bytes in)",
                      result.returncode == 2 and "HINT:" in stderr,
                      f"exit {result.returncode}, stderr {stderr!r}")
    # A partial float32 value at the end is wrong input, not a wrong command line: exit 1.
    result = run_f8c(f8c, ["quantize", "e4m3"], b"\x00\x00\x80\x3f\x00")
    stderr = result.stderr.decode(errors="replace")
    report.expect("input error: 5 bytes in is not whole float32 values",
                  result.returncode == 1 and "HINT:" in stderr and result.stdout == b"\x38",
                  f"exit {result.returncode}, stdout {result.stdout!r}, stderr {stderr!r}")


def main():
    if len(sys.argv) not in (2, 3):
        print("usage: check_ml_dtypes.py PATH/TO/f8c [SEED]", file=sys.stderr)
        return 2
    f8c = sys.argv[1]
    seed = int(sys.argv[2]) if len(sys.argv) == 3 else time.time_ns() % 2**63
    print(f"seed {seed} (replay: {sys.argv[0]} {f8c} {seed}); ml_dtypes {ml_dtypes.__version__}, "
          f"numpy {np.__version__}")
    rng = np.random.default_rng(seed)
    report = Report()
    check_assumptions(report)
    for name in FORMATS:
        check_table(report, f8c, name)
    for name in ("e4m3", "e5m2"):
        check_quantize(report, f8c, rng, name)
    check_e8m0(report, f8c, rng)
    check_usage_errors(report, f8c)
    print(f"{report.checks - report.failures} passed, {report.failures} failed")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
