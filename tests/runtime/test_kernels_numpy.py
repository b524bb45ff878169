"""The forward reference kernels against NumPy (float64 references), on fresh random inputs and
sizes each run: one small text-IR graph per case, run by kernel_tool (the CPU executor, leaves
from .npy files, outputs to .npy files), compared by normalized error

    max |got - reference| / max(1, max |reference|)

with a tolerance per kind: 1e-6 for what is computed in double and rounded once to f32, 1e-4
for GEMMs (float32 accumulation in cblas_sgemm, as kernels.h specifies), 0 for ops that only
move elements. NaN and infinity must appear where the reference has them. Casts to BF16 and
FP8 are checked bit for bit against ml_dtypes.

The seed comes from the clock and is printed; F8C_TEST_SEED=N repeats a run.

usage: test_kernels_numpy.py KERNEL_TOOL
"""
import atexit
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from checks import check, finish  # noqa: E402  (tests/checks.py)

tool = os.path.abspath(sys.argv[1])
seed = int(os.environ.get("F8C_TEST_SEED", time.time_ns() % 2**31))
print(f"seed {seed} (F8C_TEST_SEED={seed} repeats this run)")
rng = np.random.default_rng(seed)
root = tempfile.mkdtemp(prefix="f8c-kernels-")
atexit.register(shutil.rmtree, root, True)

EXACT, ROUNDED, GEMM = 0.0, 1e-6, 1e-4
DTYPE_NAMES = {np.float32: "f32", np.float64: "f64", np.int64: "i64", np.int32: "i32",
               np.bool_: "bool", np.int8: "i8", np.uint8: "u8"}
cases = 0


def type_of(array, dtype=None):
    """The text-IR type of an array: f32[2, 3]."""
    name = dtype or DTYPE_NAMES[array.dtype.type]
    return f"{name}[{', '.join(str(d) for d in array.shape)}]"


def run_case(what, body, inputs, expected, tolerance=ROUNDED, types=None, outputs=None):
    """Runs `body` (node lines) with `inputs` (name -> array, declared as inputs, `types`
    overriding a dtype name) and checks each output against `expected` (name -> reference)."""
    global cases
    cases += 1
    folder = os.path.join(root, f"case{cases}")
    os.mkdir(folder)
    types = types or {}
    lines = [f"graph case {{"]
    for name, array in inputs.items():
        lines.append(f"  input %{name} : {type_of(array, types.get(name))}")
        np.save(os.path.join(folder, f"{name}.npy"), array)
    lines += [f"  {line}" for line in body.strip().splitlines()]
    lines.append(f"  output {', '.join('%' + name for name in (outputs or expected))}")
    lines.append("}")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(folder, "graph.f8t"), "w") as f:
        f.write(text)
    done = subprocess.run([tool, os.path.join(folder, "graph.f8t"), folder],
                          capture_output=True, text=True, timeout=300)
    sanitizer = "runtime error:" in done.stderr or "Sanitizer" in done.stderr
    if not check(done.returncode == 0 and not sanitizer, f"{what}: kernel_tool failed",
                 text + done.stderr):
        return
    for name, reference in expected.items():
        got = np.load(os.path.join(folder, f"{name}.npy")).astype(np.float64)
        reference = np.asarray(reference, dtype=np.float64)
        if not check(got.shape == reference.shape,
                     f"{what}: %{name} has shape {got.shape}, expected {reference.shape}", text):
            continue
        special = ~np.isfinite(reference)
        same_special = np.array_equal(np.isnan(got), np.isnan(reference)) and np.array_equal(
            got[special & ~np.isnan(reference)], reference[special & ~np.isnan(reference)])
        finite = np.isfinite(reference) & np.isfinite(got)
        error = 0.0
        if finite.any():
            error = np.max(np.abs(got[finite] - reference[finite])) / max(
                1.0, np.max(np.abs(reference[finite])))
        check(same_special and error <= tolerance,
              f"{what}: %{name} normalized error {error:.3g} (tolerance {tolerance:g})",
              f"{text}got {got.ravel()[:16]}\nexpected {reference.ravel()[:16]}")


def f32(*shape, low=-2.0, high=2.0):
    return rng.uniform(low, high, shape).astype(np.float32)


def size(low=1, high=6):
    return int(rng.integers(low, high + 1))


def broadcast_shapes():
    """An output shape and two shapes that broadcast to it (NumPy's rules)."""
    out = [size(1, 5) for _ in range(size(1, 4))]
    shapes = []
    for _ in range(2):
        rank = size(0, len(out)) if rng.random() < 0.3 else len(out)
        shape = [d if rng.random() < 0.7 else 1 for d in out[len(out) - rank:]]
        shapes.append(tuple(shape))
    return shapes


# Elementwise.

def test_binary():
    ops = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
           "Max": np.maximum, "Min": np.minimum, "Pow": np.power}
    for op, fn in ops.items():
        sa, sb = broadcast_shapes()
        a, b = f32(*sa), f32(*sb)
        if op == "Pow":
            a = np.abs(a) + 0.1
        if op == "Div":
            b = np.where(np.abs(b) < 0.1, 0.5, b).astype(np.float32)
        run_case(op, f"%y = {op}(%a, %b)", {"a": a, "b": b},
                 {"y": fn(a.astype(np.float64), b.astype(np.float64))})
    for op, fn in {"Equal": np.equal, "Less": np.less, "Greater": np.greater,
                   "LessOrEqual": np.less_equal, "GreaterOrEqual": np.greater_equal}.items():
        sa, sb = broadcast_shapes()
        a = rng.integers(-2, 3, sa).astype(np.float32)
        b = rng.integers(-2, 3, sb).astype(np.float32)
        run_case(op, f"%y = {op}(%a, %b)", {"a": a, "b": b}, {"y": fn(a, b)}, EXACT)
    sa, sb = broadcast_shapes()
    c, x, y = rng.random(sa) < 0.5, f32(*sb), f32(*sb)
    run_case("Where", "%y = Where(%c, %x, %z)", {"c": c, "x": x, "z": y},
             {"y": np.where(c, x, y)}, EXACT)
    a, b = rng.random(sa) < 0.5, rng.random(sb) < 0.5
    run_case("logic", "%and = And(%a, %b)\n%or = Or(%a, %b)\n%not = Not(%a)", {"a": a, "b": b},
             {"and": a & b, "or": a | b, "not": ~a}, EXACT)
    i, j = rng.integers(-50, 50, sa), rng.integers(1, 7, sb) * rng.choice([-1, 1], sb)
    run_case("integer Div truncates", "%y = Div(%i, %j)", {"i": i, "j": j},
             {"y": np.trunc(i / j)}, EXACT)


def test_unary():
    erf = np.vectorize(math.erf)
    ops = {"Sqrt": (np.sqrt, 0.01, 4), "Reciprocal": (lambda x: 1 / x, 0.1, 3),
           "Neg": (np.negative, -3, 3), "Abs": (np.abs, -3, 3), "Exp": (np.exp, -5, 5),
           "Log": (np.log, 0.01, 10), "Tanh": (np.tanh, -4, 4), "Cos": (np.cos, -9, 9),
           "Sin": (np.sin, -9, 9), "Erf": (erf, -3, 3),
           "Sigmoid": (lambda x: 1 / (1 + np.exp(-x)), -30, 30),
           "Relu": (lambda x: np.maximum(x, 0), -3, 3), "Identity": (lambda x: x, -3, 3)}
    for op, (fn, low, high) in ops.items():
        x = f32(size(1, 40), size(1, 40), low=low, high=high)
        run_case(op, f"%y = {op}(%x)", {"x": x}, {"y": fn(x.astype(np.float64))})
    x = f32(5, 7)
    x[0, 0] = np.nan
    run_case("IsNaN and Dropout", "%n = IsNaN(%x)\n%d, %m = Dropout(%x) {ratio=0.3}", {"x": x},
             {"n": np.isnan(x), "d": x, "m": np.ones(x.shape, bool)}, EXACT)
    x = f32(size(1, 8), size(1, 300), low=-6, high=6)
    x64 = x.astype(np.float64)
    run_case("Gelu", '%e = Gelu(%x)\n%t = Gelu(%x) {approximate="tanh"}', {"x": x},
             {"e": 0.5 * x64 * (1 + erf(x64 / math.sqrt(2))),
              "t": 0.5 * x64 * (1 + np.tanh(math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64**3)))})
    rows, n = size(1, 6), size(1, 40)
    packed, gate, up = f32(rows, 2 * n, low=-6, high=6), f32(rows, n), f32(rows, n)
    silu = lambda g: g / (1 + np.exp(-g))  # noqa: E731
    p64 = packed.astype(np.float64)
    run_case("SwiGLU", "%p = SwiGLU(%packed)\n%t = SwiGLU(%gate, %up)",
             {"packed": packed, "gate": gate, "up": up},
             {"p": silu(p64[:, :n]) * p64[:, n:],
              "t": silu(gate.astype(np.float64)) * up.astype(np.float64)})


def test_casts():
    x = f32(size(2, 30), size(2, 30), low=-600, high=600)  # room for the four specials
    x.ravel()[:4] = [np.nan, np.inf, -1e6, 3e-3]
    reference = {"b": x.astype(ml_dtypes.bfloat16), "e4": None, "e5": None,
                 "n4": x.astype(ml_dtypes.float8_e4m3fn), "n5": x.astype(ml_dtypes.float8_e5m2)}
    # Saturating: a finite value or infinity beyond the largest finite one clamps to it.
    reference["e4"] = np.clip(x, -448, 448).astype(ml_dtypes.float8_e4m3fn)
    reference["e5"] = np.clip(x, -57344, 57344).astype(ml_dtypes.float8_e5m2)
    body = ("%b = Cast(%x) {to=bf16}\n%e4 = Cast(%x) {to=e4m3}\n%e5 = Cast(%x) {to=e5m2}\n"
            "%n4 = Cast(%x) {to=e4m3, saturate=0}\n%n5 = Cast(%x) {to=e5m2, saturate=0}\n"
            "%i = Cast(%x) {to=i32}\n%back = Cast(%b) {to=f32}")
    expected = {name: ref.astype(np.float64) for name, ref in reference.items()}
    expected["back"] = expected["b"]
    # To i32: truncation toward zero (NumPy's cast of NaN and inf is undefined: left out).
    x_int = np.where(np.isfinite(x), x, 0).astype(np.float32)
    expected["i"] = np.trunc(x_int)
    run_case("Cast", body.replace("%i = Cast(%x)", "%i = Cast(%xi)"), {"x": x, "xi": x_int},
             expected, EXACT)


# Matrix products.

def test_gemms():
    batch_a, batch_b = broadcast_shapes()
    m, k, n = size(1, 9), size(1, 40), size(1, 9)
    a, b = f32(*batch_a, m, k), f32(*batch_b, k, n)
    v = f32(k)
    run_case("MatMul", "%y = MatMul(%a, %b)\n%av = MatMul(%a, %v)\n%vb = MatMul(%v, %b)",
             {"a": a, "b": b, "v": v},
             {"y": np.matmul(a.astype(np.float64), b), "av": np.matmul(a.astype(np.float64), v),
              "vb": np.matmul(v.astype(np.float64), b)}, GEMM)
    trans_a, trans_b = int(rng.integers(0, 2)), int(rng.integers(0, 2))
    a, b = f32(*((k, m) if trans_a else (m, k))), f32(*((n, k) if trans_b else (k, n)))
    c = f32(*[(n,), (m, 1), (m, n), (1, n)][int(rng.integers(0, 4))])
    alpha, beta = float(rng.uniform(-2, 2)), float(rng.uniform(-2, 2))
    ref = alpha * ((a.T if trans_a else a).astype(np.float64) @ (b.T if trans_b else b)) + beta * c
    run_case("Gemm", f"%y = Gemm(%a, %b, %c) {{alpha={alpha!r}, beta={beta!r}, transA={trans_a}, "
             f"transB={trans_b}}}", {"a": a, "b": b, "c": c}, {"y": ref}, GEMM)
    lead = [size(1, 4) for _ in range(size(0, 2))]
    x, w, wt, bias = f32(*lead, k), f32(n, k), f32(k, n), f32(n)
    x64 = x.astype(np.float64)
    run_case("Linear", "%y = Linear(%x, %w, %bias)\n%t = Linear(%x, %wt) {transpose_weight=1}",
             {"x": x, "w": w, "wt": wt, "bias": bias},
             {"y": x64 @ w.T.astype(np.float64) + bias, "t": x64 @ wt.astype(np.float64)}, GEMM)


# Normalizations, Rope, attention, embedding, loss.

def test_norms():
    shape = [size(1, 4), size(1, 4), size(1, 60)]
    axis = -1 if rng.random() < 0.7 else -2
    x, eps = f32(*shape, low=-3, high=3), float(rng.choice([1e-5, 1e-6, 0.1]))
    gamma, beta = f32(*shape[axis:]), f32(*shape[axis:])
    x64 = x.astype(np.float64)
    axes = tuple(range(len(shape) + axis, len(shape)))
    mean = x64.mean(axis=axes, keepdims=True)
    rstd = 1 / np.sqrt(((x64 - mean) ** 2).mean(axis=axes, keepdims=True) + eps)
    run_case("LayerNorm", f"%y, %mean, %rstd = LayerNorm(%x, %g, %b) {{axis={axis}, "
             f"epsilon={eps!r}}}", {"x": x, "g": gamma, "b": beta},
             {"y": (x64 - mean) * rstd * gamma + beta, "mean": mean, "rstd": rstd})
    rms = 1 / np.sqrt((x64**2).mean(axis=axes, keepdims=True) + eps)
    normalized = (x64 * rms).astype(np.float32).astype(np.float64)  # rounded to x's dtype
    run_case("RMSNorm", f"%y, %rstd = RMSNorm(%x, %g) {{axis={axis}, epsilon={eps!r}}}",
             {"x": x, "g": gamma}, {"y": normalized * gamma, "rstd": rms})


def rope_reference(x, cos, sin, interleaved):
    rotary = cos.shape[-1]
    out = x.astype(np.float64).copy()
    part = out[..., :rotary].copy()
    if interleaved:
        first, second = part[..., 0::2], part[..., 1::2]
        rotated = np.empty_like(part)
        rotated[..., 0::2], rotated[..., 1::2] = -second, first
    else:
        half = rotary // 2
        rotated = np.concatenate([-part[..., half:], part[..., :half]], axis=-1)
    out[..., :rotary] = part * cos + rotated * sin
    return out


def test_rope():
    batch, heads, seq, head_dim = size(1, 3), size(1, 3), size(1, 7), 2 * size(1, 8)
    rotary = head_dim if rng.random() < 0.6 else 2 * size(1, head_dim // 2)
    x = f32(batch, heads, seq, head_dim)
    tables = [(seq, rotary), (1, 1, seq, rotary), (batch, 1, seq, rotary)]
    table_shape = tables[int(rng.integers(0, 3))]
    angles = rng.uniform(-4, 4, table_shape)
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    run_case(f"Rope {table_shape} rotary {rotary}/{head_dim}",
             "%h = Rope(%x, %c, %s)\n%i = Rope(%x, %c, %s) {interleaved=1}",
             {"x": x, "c": cos, "s": sin},
             {"h": rope_reference(x, cos.astype(np.float64), sin.astype(np.float64), False),
              "i": rope_reference(x, cos.astype(np.float64), sin.astype(np.float64), True)})


def attention_reference(q, k, v, mask, causal, scale):
    batch, heads, seq_q, _ = q.shape
    kv_heads, seq_kv = k.shape[1], k.shape[2]
    group = heads // kv_heads
    k = np.repeat(k.astype(np.float64), group, axis=1)
    v = np.repeat(v.astype(np.float64), group, axis=1)
    scores = scale * np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k)
    allowed = np.ones(scores.shape, bool)
    if causal:
        allowed &= np.arange(seq_kv)[None, :] <= np.arange(seq_q)[:, None] + (seq_kv - seq_q)
    if mask is not None and mask.dtype == np.bool_:
        allowed &= np.broadcast_to(mask, scores.shape)
    elif mask is not None:
        scores = scores + mask
    scores = np.where(allowed, scores, -np.inf)
    top = scores.max(axis=-1, keepdims=True)
    empty = ~np.isfinite(top)
    weights = np.where(empty, 0.0, np.exp(scores - np.where(empty, 0, top)))
    total = weights.sum(axis=-1, keepdims=True)
    out = np.einsum("bhqk,bhkd->bhqd", weights / np.where(empty, 1, total), v)
    lse = np.where(empty, -np.inf, top + np.log(np.where(empty, 1, total)))[..., 0]
    return out, lse


def test_attention():
    for _ in range(3):
        batch, kv_heads, group = size(1, 2), size(1, 2), size(1, 3)
        seq_q, seq_kv, d, dv = size(1, 9), size(1, 9), size(1, 16), size(1, 16)
        causal = int(rng.integers(0, 2))
        q = f32(batch, kv_heads * group, seq_q, d)
        k, v = f32(batch, kv_heads, seq_kv, d), f32(batch, kv_heads, seq_kv, dv)
        kind = ["none", "bool", "additive"][int(rng.integers(0, 3))]
        mask_shape = [(seq_q, seq_kv), (batch, 1, 1, seq_kv), (1, kv_heads * group, seq_q, seq_kv)][
            int(rng.integers(0, 3))]
        inputs = {"q": q, "k": k, "v": v}
        mask = None
        if kind == "bool":
            mask = rng.random(mask_shape) < 0.7
        elif kind == "additive":
            mask = np.where(rng.random(mask_shape) < 0.2, -np.inf, rng.uniform(-1, 1, mask_shape))
            mask = mask.astype(np.float32)
        operands = "%q, %k, %v"
        if mask is not None:
            inputs["m"] = mask
            operands += ", %m"
        scale = 1 / math.sqrt(d) if rng.random() < 0.5 else float(rng.uniform(0.1, 1))
        attr = f"causal={causal}" + ("" if scale == 1 / math.sqrt(d) else f", scale={scale!r}")
        out, lse = attention_reference(q, k, v, mask, causal, scale)
        run_case(f"Attention causal={causal} mask={kind} {mask_shape}",
                 f"%o, %lse = Attention({operands}) {{{attr}}}", inputs, {"o": out, "lse": lse})


def test_embedding_and_loss():
    vocab, hidden = size(2, 50), size(1, 20)
    ids = rng.integers(0, vocab, (size(1, 4), size(1, 6)))
    table = f32(vocab, hidden)
    run_case("Embedding", "%e = Embedding(%ids, %w)", {"ids": ids, "w": table},
             {"e": table[ids]}, EXACT)
    rows = size(1, 12)
    logits = f32(rows, vocab, low=-20, high=20)
    labels = rng.integers(0, vocab, rows)
    labels[rng.random(rows) < 0.3] = -100
    l64 = logits.astype(np.float64)
    top = l64.max(axis=-1)
    lse = top + np.log(np.exp(l64 - top[:, None]).sum(axis=-1))
    counted = labels != -100
    per_row = np.where(counted, lse - l64[np.arange(rows), np.where(counted, labels, 0)], 0.0)
    run_case("CrossEntropy",
             '%mean, %lse = CrossEntropy(%x, %y)\n%sum = CrossEntropy(%x, %y) {reduction="sum"}\n'
             '%none = CrossEntropy(%x, %y) {reduction="none"}', {"x": logits, "y": labels},
             {"mean": per_row.sum() / counted.sum() if counted.any() else 0.0, "lse": lse,
              "sum": per_row.sum(), "none": per_row})


# Reductions and softmax.

def test_reductions():
    shape = [size(1, 5) for _ in range(size(1, 4))]
    x = f32(*shape)
    normalized = tuple(sorted({int(a) for a in rng.integers(0, len(shape), size(1, len(shape)))}))
    axes = [a - len(shape) if rng.random() < 0.5 else a for a in normalized]
    keep = int(rng.integers(0, 2))
    body = "\n".join(f"%{name} = {op}(%x) {{axes=[{', '.join(map(str, axes))}], keepdims={keep}}}"
                     for name, op in [("s", "ReduceSum"), ("m", "ReduceMean"), ("mx", "ReduceMax")])
    x64 = x.astype(np.float64)
    run_case(f"Reduce axes={axes} keepdims={keep}", body + "\n%all = ReduceSum(%x)", {"x": x},
             {"s": x64.sum(axis=normalized, keepdims=bool(keep)),
              "m": x64.mean(axis=normalized, keepdims=bool(keep)),
              "mx": x64.max(axis=normalized, keepdims=bool(keep)),
              "all": x64.sum(keepdims=True)})
    axis = int(rng.integers(-len(shape), len(shape)))
    top = x64.max(axis=axis, keepdims=True)
    log_sum = np.log(np.exp(x64 - top).sum(axis=axis, keepdims=True))
    run_case(f"Softmax axis={axis}", f"%s = Softmax(%x) {{axis={axis}}}\n"
             f"%l = LogSoftmax(%x) {{axis={axis}}}\n%c = CumSum(%x) {{axis={axis}}}\n"
             f"%ce = CumSum(%x) {{axis={axis}, exclusive=1, reverse=1}}", {"x": x},
             {"s": np.exp(x64 - top - log_sum), "l": x64 - top - log_sum,
              "c": np.cumsum(x64, axis=axis),
              "ce": np.flip(np.cumsum(np.flip(x64, axis), axis=axis), axis) - x64})


# Element moves: exact.

def onnx_slice(size, start, end, step):
    """The indices ONNX's Slice takes along a dim: unlike Python's slices, a negative step
    clamps a start before the beginning to 0 (so x[-7:-8:-1] of 4 elements is [x[0]])."""
    start, end = start + size if start < 0 else start, end + size if end < 0 else end
    if step > 0:
        start, end = min(max(start, 0), size), min(max(end, 0), size)
    else:
        start, end = min(max(start, 0), size - 1), min(max(end, -1), size - 1)
    return np.arange(start, end, step)


def test_moves():
    shape = [size(1, 5) for _ in range(size(2, 4))]
    x = f32(*shape)
    perm = [int(p) for p in rng.permutation(len(shape))]
    starts, ends, steps, slices = [], [], [], []
    for d in shape:
        start, end = int(rng.integers(-2 * d, 2 * d)), int(rng.integers(-2 * d, 2 * d))
        step = int(rng.choice([-3, -2, -1, 1, 2, 3]))
        starts.append(start), ends.append(end), steps.append(step)
        slices.append(onnx_slice(d, start, end, step))
    axis = int(rng.integers(0, len(shape)))
    other = list(shape)
    other[axis] = size(1, 4)
    y = f32(*other)
    parts = [int(p) for p in np.diff(np.sort(np.concatenate(
        [[0, shape[axis]], rng.integers(0, shape[axis] + 1, 2)])))]
    split_outputs = ", ".join(f"%p{i}" for i in range(len(parts)))
    indices = rng.integers(-shape[axis], shape[axis], (size(1, 3), size(1, 3)))
    body = (f"%t = Transpose(%x) {{perm=[{', '.join(map(str, perm))}]}}\n"
            f"%s = Slice(%x) {{starts=[{', '.join(map(str, starts))}], "
            f"ends=[{', '.join(map(str, ends))}], steps=[{', '.join(map(str, steps))}]}}\n"
            f"%c = Concat(%x, %y, %x) {{axis={axis}}}\n"
            f"{split_outputs} = Split(%x) {{axis={axis}, split=[{', '.join(map(str, parts))}]}}\n"
            f"%g = Gather(%x, %i) {{axis={axis}}}\n"
            f"%r = Reshape(%x) {{shape=[-1]}}\n%u = Unsqueeze(%x) {{axes=[0, -1]}}\n"
            f"%tr = Trilu(%x) {{upper=0, k={int(rng.integers(-2, 3))}}}")
    k = int(body.rsplit("k=", 1)[1].split("}")[0])
    bounds = np.cumsum([0] + parts)
    expected = {"t": np.transpose(x, perm), "s": x[np.ix_(*slices)],
                "c": np.concatenate([x, y, x], axis=axis),
                "g": np.take(x, indices, axis=axis), "r": x.ravel(), "u": x[None, ..., None],
                "tr": np.tril(x, k)}
    for i in range(len(parts)):
        expected[f"p{i}"] = np.take(x, range(bounds[i], bounds[i + 1]), axis=axis)
    run_case("moves", body, {"x": x, "y": y, "i": indices}, expected, EXACT)
    target = [size(1, 3)] + [d if rng.random() < 0.5 else 1 for d in shape]
    small = f32(*[d if rng.random() < 0.5 else 1 for d in target[1:]])
    nd_indices = np.stack([rng.integers(0, shape[0], 4), rng.integers(0, shape[1], 4)], axis=-1)
    run_case("Expand and GatherND",
             f"%e = Expand(%z) {{shape=[{', '.join(map(str, target))}]}}\n%n = GatherND(%x, %j)",
             {"z": small, "x": x, "j": nd_indices},
             {"e": np.broadcast_to(small, np.broadcast_shapes(small.shape, target)),
              "n": x[nd_indices[:, 0], nd_indices[:, 1]]}, EXACT)


# Mixture of experts.

def test_moe():
    tokens, experts, hidden, out = size(1, 8), size(1, 5), size(1, 6), size(1, 6)
    top_k = size(1, experts)
    logits = f32(tokens, experts, low=-3, high=3)
    logits[0, :] = 1.0  # a tie: lower expert index first
    l64 = logits.astype(np.float64)
    scores = np.exp(l64 - l64.max(axis=1, keepdims=True))
    scores /= scores.sum(axis=1, keepdims=True)
    order = np.argsort(-scores, axis=1, kind="stable")[:, :top_k]
    probs = np.take_along_axis(scores, order, axis=1)
    probs /= probs.sum(axis=1, keepdims=True)
    x, w, wt = f32(tokens, hidden), f32(experts, out, hidden), f32(experts, hidden, out)
    flat = order.ravel()
    sort = np.argsort(flat, kind="stable")
    dispatched = x[sort // top_k].astype(np.float64)
    counts = np.bincount(flat, minlength=experts)
    starts = np.concatenate([[0], np.cumsum(counts)])
    grouped = np.zeros((tokens * top_k, out))
    grouped_t = np.zeros((tokens * top_k, out))
    for e in range(experts):
        rows = slice(starts[e], starts[e + 1])
        grouped[rows] = dispatched[rows] @ w[e].T.astype(np.float64)
        grouped_t[rows] = dispatched[rows] @ wt[e].astype(np.float64)
    row_of = np.empty(tokens * top_k, int)
    row_of[sort] = np.arange(tokens * top_k)
    grouped32 = grouped.astype(np.float32).astype(np.float64)  # the GEMM's output is f32
    copies = grouped32[row_of].reshape(tokens, top_k, out)
    combined = (copies * probs.astype(np.float32)[..., None]).sum(1)
    run_case("MoE",
             f"%p, %i = Router(%l) {{top_k={top_k}, normalize=1}}\n"
             f"%d, %n = MoEDispatch(%x, %i) {{experts={experts}}}\n"
             "%g = GroupedLinear(%d, %w, %n)\n"
             "%gt = GroupedLinear(%d, %wt, %n) {transpose_weight=1}\n"
             "%y = MoECombine(%g, %p, %i)",
             {"l": logits, "x": x, "w": w, "wt": wt},
             {"p": probs, "i": order, "d": dispatched, "n": counts, "g": grouped, "gt": grouped_t,
              "y": combined}, GEMM)


# FP8 and linear quantization.

def test_quantization():
    x = f32(size(1, 6), size(1, 40), low=-50, high=50)
    amax = np.abs(x).max()
    scale = np.float32(448.0) / np.float32(amax)
    codes = (x * scale).astype(ml_dtypes.float8_e4m3fn)
    scale_in = np.array(float(rng.uniform(0.5, 4)), np.float32)
    codes5 = np.clip(x * scale_in, -57344, 57344).astype(ml_dtypes.float8_e5m2)
    run_case("Quantize, Dequantize, Amax, CastTranspose",
             "%q, %si = Quantize(%x) {to=e4m3}\n%dq = Dequantize(%q, %si) {to=f32}\n"
             "%q5 = Quantize(%x, %s) {to=e5m2}\n%am = Amax(%x)\n"
             "%c, %ct, %csi, %ctsi, %ca = CastTranspose(%x, %s) {to=e5m2}",
             {"x": x, "s": scale_in},
             {"q": codes.astype(np.float64), "si": np.float32(1) / scale,
              "dq": codes.astype(np.float32) * (np.float32(1) / scale),
              "q5": codes5.astype(np.float64),
              "am": amax, "c": codes5.astype(np.float64),
              "ct": codes5.astype(np.float64).reshape(-1, x.shape[-1]).T,
              "csi": np.float32(1) / scale_in, "ctsi": np.float32(1) / scale_in, "ca": amax},
             EXACT)
    per_axis = rng.uniform(0.1, 1, x.shape[1]).astype(np.float32)
    zero = rng.integers(-5, 5, x.shape[1]).astype(np.int8)
    q = np.clip(np.round(x.astype(np.float64) / per_axis) + zero, -128, 127)
    run_case("QuantizeLinear", "%q = QuantizeLinear(%x, %s, %z) {to=i8, axis=1}\n"
             "%d = DequantizeLinear(%q, %s, %z) {axis=1}",
             {"x": x, "s": per_axis, "z": zero},
             {"q": q, "d": ((q - zero) * per_axis).astype(np.float32)}, ROUNDED)


FP8_TYPES = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}


def fp8_values(format, *shape):
    """Random finite FP8 values of every magnitude (random codes, NaN and inf codes drawn
    again), decoded exactly to float32: kernel_tool stores them into an FP8 leaf unchanged."""
    codes = rng.integers(0, 256, shape).astype(np.uint8)
    values = codes.view(FP8_TYPES[format]).astype(np.float32)
    while not np.isfinite(values).all():
        bad = ~np.isfinite(values)
        codes[bad] = rng.integers(0, 256, int(bad.sum())).astype(np.uint8)
        values = codes.view(FP8_TYPES[format]).astype(np.float32)
    return values


def grid(rows, cols, block):
    """The scale grid's shape of a (rows, cols) operand under block [r, c] (0: the whole axis)."""
    return tuple(-(-extent // (size or extent)) for extent, size in zip((rows, cols), block))


def expand(scales, rows, cols, block):
    """Each element's scale: the grid repeated over its blocks, cut to (rows, cols)."""
    r, c = (size or extent for extent, size in zip((rows, cols), block))
    return np.repeat(np.repeat(scales, r, axis=0), c, axis=1)[:rows, :cols]


def test_fp8_gemm():
    """FP8Gemm per tensor, rowwise, 1x128 by 128x128 blocks and MX (e8m0 scales), E5M2 by E4M3:
    codes decoded by ml_dtypes, each times its block's scale_inv, multiplied in float64. The
    per-row recipes accumulate in float32 (GEMM tolerance), the block ones in double."""
    recipes = [("per tensor", None, None, "f32", GEMM), ("rowwise", [1, 0], [1, 0], "f32", GEMM),
               ("blocks", [1, 128], [128, 128], "f32", ROUNDED),
               ("MX", [1, 32], [1, 32], "e8m0", ROUNDED)]
    for name, a_block, b_block, scale_type, tolerance in recipes:
        lead = [size(1, 3) for _ in range(size(0, 1))] + [size(1, 40)]
        m, n = int(np.prod(lead)), size(1, 40)
        k = size(130, 300) if a_block and a_block[1] else size(1, 80)
        a_format = "e5m2" if rng.random() < 0.5 else "e4m3"
        a, b = fp8_values(a_format, m, k), fp8_values("e4m3", n, k)
        scales = []
        for rows, block in ((m, a_block), (n, b_block)):
            shape = grid(rows, k, block) if block else ()
            if scale_type == "e8m0":
                scales.append(np.exp2(rng.integers(-4, 5, shape)).astype(np.float32))
            else:
                scales.append(rng.uniform(0.01, 2, shape).astype(np.float32))
        full = [expand(np.atleast_2d(s), rows, k, block or [0, 0])
                for s, rows, block in ((scales[0], m, a_block), (scales[1], n, b_block))]
        bias = rng.uniform(-100, 100, n).astype(np.float32)
        reference = (a.astype(np.float64) * full[0]) @ (b.astype(np.float64) * full[1]).T + bias
        attrs = "".join(f", {key}=[{block[0]}, {block[1]}]"
                        for key, block in (("a_block", a_block), ("b_block", b_block)) if block)
        run_case(f"FP8Gemm {name}, {a_format} x e4m3",
                 f"%y = FP8Gemm(%a, %b, %sa, %sb, %bias) {{to=f32, gemm=\"fwd\"{attrs}}}",
                 {"a": a.reshape(*lead, k), "b": b, "sa": scales[0], "sb": scales[1], "bias": bias},
                 {"y": reference.reshape(*lead, n)}, tolerance,
                 types={"a": a_format, "b": "e4m3", "sa": scale_type, "sb": scale_type})


for test in [test_binary, test_unary, test_casts, test_gemms, test_norms, test_rope,
             test_attention, test_embedding_and_loss, test_reductions, test_moves, test_moe,
             test_quantization, test_fp8_gemm]:
    test()
sys.exit(finish())
