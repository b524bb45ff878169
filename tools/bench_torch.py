#!/usr/bin/env python3
"""PyTorch's training step for the models f8c trains: the baseline of f8c issue 15, that
tools/gpu_bench.py's figures for f8c are set against on the same GPU (an H200).

  bench_torch.py MODEL.json TOKENS --batch B --seq S --mode MODE [--iters 30] [--warmup 5]
                 [--out FILE.json]

MODEL.json is f8c's model description (frontend/README.md, "JSON model descriptions"); only
"arch": "gpt" is built. The model is f8c's GPT written with torch.nn, parameters named as f8c
names them: token and learned position embeddings, pre-LN layers (one fused qkv Linear, causal
F.scaled_dot_product_attention, proj; fc1, GELU (tanh), fc2), a final LayerNorm and the head
tied to embed.weight; mean cross-entropy over every token, no dropout. Initialized as f8c does
(Megatron-LM's defaults) from torch.manual_seed(1234), f32 master weights, and trained as f8c
trains by default: fused AdamW (lr 3e-4, betas 0.9/0.95, eps 1e-8, weight decay 0.1 on every
parameter), gradients clipped at 1.0, lr cosine to 3e-5 over 1000 iterations. TOKENS is an
llm.c token file (runtime/tokens.h); each batch is B windows of S+1 tokens at random offsets.

MODE:
  bf16-eager    autocast to bf16 around the forward and the loss
  bf16-compile  the same, the model under torch.compile (default mode)
  fp8-eager     bf16-eager with the blocks' Linears (qkv, proj, fc1, fc2; not the head) in FP8,
                tensorwise dynamic scaling as torchao's "tensorwise" recipe: e4m3 for inputs
                and weights, e5m2 for gradients, scale = fp8 max / amax, torch._scaled_mm
  fp8-compile   fp8-eager under torch.compile

Measured: ITERS iterations, each timed by the wall clock between torch.cuda.synchronize()
calls (sampling the batch, copying it, forward, backward, clipping, the optimizer step);
tokens/s is the median over the iterations after the first WARMUP (at least 20 must count).
The first step's time (the compile, in the compile modes) is reported on its own; so are the
peak memory as PyTorch's allocator saw it (allocated and reserved), the device memory in use
at the end as the driver sees it (what gpu_bench.py reports for f8c), the final loss, and the
model FLOPs utilization against the H200's dense BF16 peak.

Progress goes to stderr; the last line of stdout is one JSON object with the figures (also
written to --out). A failure, an out-of-memory included, is a message on stderr, a JSON line
with "error", and a non-zero exit.

`--device cpu` (not for benchmarking) runs the same code on the CPU for a smoke test, with
torch._scaled_mm emulated (see scaled_mm).
"""
import argparse
import json
import math
import os
import statistics
import sys
import time
import traceback

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

H200_BF16_DENSE_FLOPS = 989.4e12  # the datasheet's dense BF16 tensor-core peak
MIN_COUNTED = 20                  # fewer iterations than this make the median noise
SEED = 1234

E4M3_MAX = 448.0     # torch.finfo(torch.float8_e4m3fn).max
E5M2_MAX = 57344.0   # torch.finfo(torch.float8_e5m2).max
AMAX_FLOOR = 1e-12   # an all-zero tensor (a bias gradient at step 0, say) must not scale by inf

LLMC_MAGIC, LLMC_VERSION = 20240520, 1                # uint16 tokens
LLMC_MAGIC_UINT32, LLMC_VERSION_UINT32 = 20240801, 7  # llm.c's Llama 3 files: uint32 tokens
LLMC_HEADER_INTS = 256

MODES = ("bf16-eager", "bf16-compile", "fp8-eager", "fp8-compile")


class BenchError(Exception):
    """A failure with a message for the user and, where there is one, what to do about it."""

    def __init__(self, message, hint=None):
        super().__init__(message)
        self.hint = hint


def log(message):
    print(message, file=sys.stderr, flush=True)


# ---- the model description ----

# Every field f8c's JSON frontend takes; the ones a GPT may not set are refused below.
KNOWN_FIELDS = {"arch", "vocab", "seq", "layers", "hidden", "heads", "kv_heads", "ffn", "experts",
                "top_k", "norm", "norm_eps", "act", "pos", "rope_theta", "bias", "tie_embeddings",
                "dtype", "name", "comment", "make_vocab_size_divisible_by"}


def load_config(path):
    """The model description at `path` with f8c's defaults for a GPT filled in."""
    try:
        with open(path) as f:
            config = json.load(f)
    except (OSError, ValueError) as e:
        raise BenchError(f"{path}: {e}")
    if not isinstance(config, dict):
        raise BenchError(f"{path}: not a JSON object")
    unknown = sorted(set(config) - KNOWN_FIELDS)
    if unknown:
        raise BenchError(f"{path}: unknown fields {unknown}",
                         "the fields are frontend/README.md's 'JSON model descriptions' table")
    if config.get("arch") != "gpt":
        raise BenchError(f"{path}: arch {config.get('arch')!r}: this baseline builds \"gpt\" only",
                         "issue 15 compares the GPT models (models/gpt2-124m.json, gpt-1.3b.json)")
    for field in ("vocab", "seq", "layers", "hidden", "heads"):
        value = config.get(field)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise BenchError(f"{path}: {field} must be a positive integer (is {value!r})")
    # What f8c's GPT could be told to do differently and this baseline does not build.
    fixed = {"kv_heads": config["heads"], "norm": "layernorm", "act": "gelu_tanh",
             "pos": "learned", "dtype": "f32"}
    for field, value in fixed.items():
        if config.get(field, value) != value:
            raise BenchError(f"{path}: {field} {config[field]!r}: the baseline builds {value!r} only")
    for field in ("experts", "top_k", "rope_theta"):
        if field in config:
            raise BenchError(f"{path}: {field} is not a GPT field")
    if config["hidden"] % config["heads"]:
        raise BenchError(f"{path}: hidden {config['hidden']} is not a multiple of heads {config['heads']}")
    config.setdefault("ffn", 4 * config["hidden"])
    config.setdefault("norm_eps", 1e-5)
    config.setdefault("bias", True)
    config.setdefault("tie_embeddings", True)
    # The vocabulary padded as f8c (and Megatron-LM, and nanoGPT's 50304) pads it, so that
    # both sides' heads have the same, aligned, rows.
    multiple = config.setdefault("make_vocab_size_divisible_by", 128)
    if not isinstance(multiple, int) or isinstance(multiple, bool) or multiple <= 0:
        raise BenchError(f"{path}: make_vocab_size_divisible_by must be a positive integer")
    config["padded_vocab"] = -(-config["vocab"] // multiple) * multiple
    if not isinstance(config["ffn"], int) or isinstance(config["ffn"], bool) or config["ffn"] <= 0:
        raise BenchError(f"{path}: ffn must be a positive integer (is {config['ffn']!r})")
    if not isinstance(config["norm_eps"], (int, float)) or not 0 < config["norm_eps"] < 1:
        raise BenchError(f"{path}: norm_eps must be in (0, 1) (is {config['norm_eps']!r})")
    for field in ("bias", "tie_embeddings"):
        if not isinstance(config[field], bool):
            raise BenchError(f"{path}: {field} must be true or false (is {config[field]!r})")
    return config


# ---- FP8 linear, tensorwise dynamic scaling ----

def quantize(t, fp8_dtype, fp8_max):
    """t in fp8_dtype scaled so that its amax lands on fp8_max, and the f32 scalar that takes
    it back (1 / scale), which is what torch._scaled_mm takes as scale_a / scale_b. The product
    is formed in f32 and saturated, so nothing overflows to inf (e4m3fn has none; e5m2 would
    take it). The result is row-major whatever t's layout: elementwise ops keep their input's
    strides, and a transposed gradient would otherwise reach _scaled_mm column-major."""
    t = t.contiguous()  # no copy when it is already
    amax = t.abs().amax().float()
    scale = fp8_max / amax.clamp(min=AMAX_FLOOR)
    data = (t.float() * scale).clamp(-fp8_max, fp8_max).to(fp8_dtype)
    return data, scale.reciprocal()


def column_major(t):
    """The same matrix, laid out column-major (strides (1, rows)), as _scaled_mm's second
    operand must be."""
    return t.t().contiguous().t()


def scaled_mm(a, b, scale_a, scale_b, out_dtype, fast_accum):
    """a (m, k) row-major times b (k, n) column-major, both FP8, each times its inverse scale.

    On CUDA this is torch._scaled_mm and nothing else. On the CPU (the smoke test) it is
    emulated: the FP8 values dequantized and multiplied in f32, after the same layout checks
    cuBLASLt's FP8 GEMM imposes, so a layout mistake shows here too."""
    if a.is_cuda:
        return torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype,
                                use_fast_accum=fast_accum)
    # CPU smoke path: not a benchmark, an emulation of the GEMM above.
    assert a.dim() == 2 and b.dim() == 2 and a.shape[1] == b.shape[0], (a.shape, b.shape)
    assert a.stride(1) == 1, f"first operand not row-major: strides {a.stride()}"
    assert b.stride(0) == 1, f"second operand not column-major: strides {b.stride()}"
    assert all(d % 16 == 0 for d in (*a.shape, b.shape[1])), (a.shape, b.shape)
    return ((a.float() @ b.float()) * (scale_a * scale_b)).to(out_dtype)


class Fp8LinearFunction(torch.autograd.Function):
    """y = x w^T + bias with both GEMMs' operands in FP8, scaled per tensor from their
    current amax. x (m, k) bf16, weight (n, k) the f32 master, bias (n) f32 or None.

    forward: x and weight (cast to bf16 first, as autocast would feed a Linear) to e4m3,
    fast accumulation as torchao's forward. backward: the output gradient to e5m2; dgrad
    go (m, n) x w (n, k) and wgrad go^T (n, m) x x (m, k) with full-precision accumulation;
    wgrad comes out in f32, the master's dtype, so it is never rounded to bf16 on the way."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        x_fp8, x_inv = quantize(x, torch.float8_e4m3fn, E4M3_MAX)
        w_fp8, w_inv = quantize(weight.to(torch.bfloat16), torch.float8_e4m3fn, E4M3_MAX)
        # w_fp8 is (n, k) row-major, so its transpose (k, n) is column-major as it must be.
        y = scaled_mm(x_fp8, w_fp8.t(), x_inv, w_inv, torch.bfloat16, fast_accum=True)
        if bias is not None:
            y = y + bias.to(torch.bfloat16)
        ctx.save_for_backward(x_fp8, x_inv, w_fp8, w_inv)
        ctx.has_bias = bias is not None
        return y

    @staticmethod
    def backward(ctx, grad_output):
        x_fp8, x_inv, w_fp8, w_inv = ctx.saved_tensors
        go_fp8, go_inv = quantize(grad_output, torch.float8_e5m2, E5M2_MAX)
        # dgrad (m, k) = go (m, n) x w (n, k): w's bytes are row-major, the GEMM wants them
        # column-major.
        grad_x = scaled_mm(go_fp8, column_major(w_fp8), go_inv, w_inv, torch.bfloat16,
                           fast_accum=False)
        # wgrad (n, k) = go^T (n, m) x x (m, k): both need a transposed copy.
        grad_w = scaled_mm(go_fp8.t().contiguous(), column_major(x_fp8), go_inv, x_inv,
                           torch.float32, fast_accum=False)
        grad_b = grad_output.sum(0, dtype=torch.float32) if ctx.has_bias else None
        return grad_x, grad_w, grad_b


class Fp8Linear(nn.Linear):
    """An nn.Linear (same parameters, same init) whose GEMMs run in FP8."""

    def forward(self, x):
        shape = x.shape
        # Autocast leaves a LayerNorm's output in f32; a bf16 Linear would take it in bf16.
        x = x.to(torch.bfloat16).reshape(-1, shape[-1])
        y = Fp8LinearFunction.apply(x, self.weight, self.bias)
        return y.reshape(*shape[:-1], self.out_features)


# ---- the model ----

class Attention(nn.Module):
    def __init__(self, config, linear):
        super().__init__()
        hidden = config["hidden"]
        self.heads = config["heads"]
        self.qkv = linear(hidden, 3 * hidden, bias=config["bias"])  # [q | k | v], one GEMM
        self.proj = linear(hidden, hidden, bias=config["bias"])

    def forward(self, x):
        batch, seq, hidden = x.shape
        q, k, v = self.qkv(x).split(hidden, dim=2)
        # (batch, seq, hidden) -> (batch, heads, seq, head_dim), as SDPA takes it
        q, k, v = (t.view(batch, seq, self.heads, hidden // self.heads).transpose(1, 2)
                   for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(batch, seq, hidden))


class Mlp(nn.Module):
    def __init__(self, config, linear):
        super().__init__()
        self.fc1 = linear(config["hidden"], config["ffn"], bias=config["bias"])
        self.fc2 = linear(config["ffn"], config["hidden"], bias=config["bias"])

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class Layer(nn.Module):
    def __init__(self, config, linear):
        super().__init__()
        norm = lambda: nn.LayerNorm(config["hidden"], eps=config["norm_eps"], bias=config["bias"])
        self.attn_norm = norm()
        self.attn = Attention(config, linear)
        self.mlp_norm = norm()
        self.mlp = Mlp(config, linear)

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Gpt(nn.Module):
    """f8c's GPT (frontend/json/model_build.c), its parameters named as f8c names them.
    forward returns the loss, so that torch.compile sees the head and the cross-entropy too."""

    def __init__(self, config, fp8=False):
        super().__init__()
        self.config = config
        linear = Fp8Linear if fp8 else nn.Linear
        hidden = config["hidden"]
        self.embed = nn.Embedding(config["padded_vocab"], hidden)
        self.pos_embed = nn.Embedding(config["seq"], hidden)
        self.layers = nn.ModuleList(Layer(config, linear) for _ in range(config["layers"]))
        self.final_norm = nn.LayerNorm(hidden, eps=config["norm_eps"], bias=config["bias"])
        # A tied head is no module of its own: it reads embed.weight, counted once.
        self.head = None if config["tie_embeddings"] else nn.Linear(hidden, config["padded_vocab"], bias=False)
        self.init_weights()

    def init_weights(self):
        """Megatron-LM's defaults, as f8c's: N(0, 0.02) for every matrix and both embeddings,
        the residual branches' output projections scaled down by sqrt(2 * layers) so the
        residual stream's variance does not grow with depth; biases 0, LayerNorm 1 and 0."""
        residual_std = 0.02 / math.sqrt(2 * self.config["layers"])
        for name, p in self.named_parameters():
            if name.endswith("attn.proj.weight") or name.endswith("mlp.fc2.weight"):
                nn.init.normal_(p, 0.0, residual_std)
            elif name.endswith("norm.weight"):
                nn.init.ones_(p)
            elif name.endswith(".bias"):
                nn.init.zeros_(p)
            else:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, tokens, labels):
        seq = tokens.shape[1]
        x = self.embed(tokens) + self.pos_embed.weight[:seq]
        for layer in self.layers:
            x = layer(x)
        x = self.final_norm(x)
        head = self.embed.weight if self.head is None else self.head.weight
        logits = F.linear(x, head)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.reshape(-1))


def count_parameters(model):
    return sum(p.numel() for p in model.parameters())  # parameters() yields a tied one once


def flops_per_token(n_params, config, seq):
    """PaLM's estimate (Chowdhery et al. 2022, appendix B): 6 N for the forward and backward
    matmuls of N parameters, plus 12 L H S for attention's scores and weighted sum (causal
    masking not discounted, as PaLM does not). N is every parameter, the embeddings included,
    as nanoGPT counts it: the tied head's GEMM stands in for the embedding lookup that costs
    nothing."""
    return 6 * n_params + 12 * config["layers"] * config["hidden"] * seq


# ---- data ----

def load_tokens(path, vocab):
    """The tokens of llm.c's token file at `path` (a 1,024-byte header of int32: magic,
    version, count; then the tokens), mapped rather than read."""
    try:
        header = np.fromfile(path, dtype="<i4", count=LLMC_HEADER_INTS)
    except OSError as e:
        raise BenchError(f"{path}: {e}")
    if header.size < LLMC_HEADER_INTS:
        raise BenchError(f"{path}: shorter than llm.c's 1,024-byte header")
    kinds = {(LLMC_MAGIC, LLMC_VERSION): "<u2", (LLMC_MAGIC_UINT32, LLMC_VERSION_UINT32): "<u4"}
    dtype = kinds.get((int(header[0]), int(header[1])))
    if dtype is None:
        raise BenchError(f"{path}: magic {header[0]} version {header[1]} is no llm.c token file",
                         "f8c tokenize writes one (magic 20240520, version 1)")
    count = int(header[2])
    expected = LLMC_HEADER_INTS * 4 + count * np.dtype(dtype).itemsize
    if os.path.getsize(path) != expected:
        raise BenchError(f"{path}: the header says {count} tokens, the file's size "
                         f"{os.path.getsize(path)} bytes is not {expected}")
    tokens = np.memmap(path, dtype=dtype, mode="r", offset=LLMC_HEADER_INTS * 4, shape=(count,))
    if count and int(tokens.max()) >= vocab:
        raise BenchError(f"{path}: token {int(tokens.max())} is outside the model's vocab {vocab}")
    return tokens


class Batches:
    """(input, label) batches of `batch` windows of seq + 1 tokens at offsets drawn from
    numpy's default_rng(1234), put on `device` through a pinned host buffer."""

    def __init__(self, tokens, batch, seq, device):
        if len(tokens) < seq + 1:
            raise BenchError(f"the token file holds {len(tokens)} tokens, fewer than seq + 1 = {seq + 1}")
        self.tokens, self.batch, self.seq, self.device = tokens, batch, seq, device
        self.rng = np.random.default_rng(SEED)
        self.windows = np.arange(seq + 1)
        self.pinned = device.type == "cuda"

    def next(self):
        starts = self.rng.integers(0, len(self.tokens) - self.seq, size=self.batch)
        window = torch.from_numpy(self.tokens[starts[:, None] + self.windows].astype(np.int64))
        if self.pinned:
            window = window.pin_memory()
        window = window.to(self.device, non_blocking=True)
        return window[:, :-1], window[:, 1:]


# ---- training ----

def learning_rate(step, peak=3e-4, floor=3e-5, decay_iters=1000):
    """f8c's default schedule: cosine from peak to floor over decay_iters, floor after."""
    progress = min(step, decay_iters) / decay_iters
    return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * progress))


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train(args, config, device):
    """Runs the iterations; the figures as the JSON object reports them."""
    torch.manual_seed(SEED)
    fp8 = args.mode.startswith("fp8")
    if fp8:
        # cuBLASLt's FP8 GEMMs take only dimensions that are multiples of 16.
        dims = {"batch * seq": args.batch * args.seq, "hidden": config["hidden"], "ffn": config["ffn"]}
        for name, value in dims.items():
            if value % 16:
                raise BenchError(f"{name} = {value} is not a multiple of 16, as FP8 GEMMs need")
    model = Gpt(config, fp8=fp8).to(device)
    n_params = count_parameters(model)
    log(f"{args.model}: {n_params:,} parameters, mode {args.mode}, batch {args.batch} x seq {args.seq}")
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate(0), betas=(0.9, 0.95),
                                  eps=1e-8, weight_decay=0.1, fused=device.type == "cuda")
    step_model = torch.compile(model) if args.mode.endswith("compile") else model
    batches = Batches(load_tokens(args.tokens, config["vocab"]), args.batch, args.seq, device)

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times, losses = [], []
    for step in range(args.iters):
        synchronize(device)
        start = time.perf_counter()
        tokens, labels = batches.next()
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = step_model(tokens, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        synchronize(device)
        times.append(time.perf_counter() - start)
        losses.append(loss.item())  # already synchronized: costs nothing
        log(f"step {step + 1}/{args.iters}: loss {losses[-1]:.4f}, {times[-1] * 1e3:.1f} ms, "
            f"{args.batch * args.seq / times[-1]:,.0f} tokens/s")
        if not math.isfinite(losses[-1]):
            raise BenchError(f"the loss is {losses[-1]} at step {step + 1}")

    counted = times[args.warmup:]
    step_s = statistics.median(counted)
    tokens_per_s = args.batch * args.seq / step_s
    result = {
        "tokens_per_s": round(tokens_per_s),
        "tokens_per_s_min_max": [round(args.batch * args.seq / max(counted)),
                                 round(args.batch * args.seq / min(counted))],
        "iterations_counted": len(counted),
        "step_ms": round(step_s * 1e3, 3),
        "first_step_s": round(times[0], 3),
        "params": n_params,
        "flops_per_token": flops_per_token(n_params, config, args.seq),
        "mfu": round(flops_per_token(n_params, config, args.seq) * tokens_per_s
                     / H200_BF16_DENSE_FLOPS, 4),
        "first_loss": round(losses[0], 4),
        "final_loss": round(losses[-1], 4),
    }
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        result["peak_allocated_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
        result["peak_reserved_gib"] = round(torch.cuda.max_memory_reserved(device) / 2**30, 2)
        result["device_used_gib"] = round((total - free) / 2**30, 2)
    else:
        result.update(peak_allocated_gib=None, peak_reserved_gib=None, device_used_gib=None)
    return result


def parse_args(argv):
    parser = argparse.ArgumentParser(description="PyTorch's training step for f8c issue 15's baseline.")
    parser.add_argument("model", help="f8c's model description, e.g. models/gpt-1.3b.json")
    parser.add_argument("tokens", help="an llm.c token file")
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--seq", type=int, help="the sequence length (default: the model's seq)")
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--out", help="also write the JSON object here")
    parser.add_argument("--device", default="cuda", help=argparse.SUPPRESS)  # cpu: smoke test only
    return parser.parse_args(argv)


def run(args):
    config = load_config(args.model)
    args.seq = args.seq or config["seq"]
    if not 0 < args.seq <= config["seq"]:
        raise BenchError(f"--seq {args.seq} is outside 1..{config['seq']}, the model's position table")
    if args.batch <= 0 or args.warmup < 0 or args.iters <= args.warmup:
        raise BenchError("--batch must be positive and --iters greater than --warmup")
    device = torch.device(args.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise BenchError("no CUDA device", "this benchmark is for the GPU machine")
        if args.iters - args.warmup < MIN_COUNTED:
            raise BenchError(f"{args.iters - args.warmup} iterations would count, fewer than {MIN_COUNTED}",
                             "raise --iters or lower --warmup")
        # Under autocast every matmul is bf16 or fp8; should an f32 one remain, let it use TF32
        # as any tuned PyTorch run would.
        torch.set_float32_matmul_precision("high")
    result = train(args, config, device)
    result["torch"] = torch.__version__
    result["cuda"] = torch.version.cuda
    result["device"] = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return result


def out_of_memory(e):
    """The allocator's out-of-memory error in e, also where torch.compile wrapped it in one of
    its own (an OOM while autotuning, say); None when there is none."""
    while e is not None:
        if isinstance(e, torch.cuda.OutOfMemoryError) or "CUDA out of memory" in str(e):
            return e
        e = e.__cause__
    return None


def main(argv):
    args = parse_args(argv)
    status = 0
    try:
        result = run(args)
        error = None
    except BenchError as e:
        log(f"error: {e}")
        if e.hint:
            log(f"HINT: {e.hint}")
        error, status = str(e), 2
    except Exception as e:  # a failure inside torch (a compile error, an OOM): reported all the same
        oom = out_of_memory(e)
        if oom:
            log(f"error: out of device memory: {oom}")
            log("HINT: a smaller --batch; the figure for this batch is that it does not fit")
            error, status = f"out of memory: {(str(oom).splitlines() or [''])[0]}", 3
        else:
            traceback.print_exc()
            log(f"error: {type(e).__name__}: {e}")
            error, status = f"{type(e).__name__}: {e}"[:500], 1  # the traceback went to stderr
    # args.seq is the model's where --seq was not given, once run() has read the model.
    head = {"baseline": "pytorch", "mode": args.mode, "model": os.path.basename(args.model),
            "batch": args.batch, "seq": args.seq}
    result = {**head, "error": error} if error else {**head, **result}
    line = json.dumps(result)
    if args.out:
        with open(args.out, "w") as f:
            f.write(line + "\n")
    print(line, flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
