#!/usr/bin/env python3
"""Make the PyTorch reference dump of two training steps of gpt-tiny (llm.c style), which
tests/runtime/test_reference_gpt_tiny.c compares f8c's CPU training steps with.

The model is models/gpt-tiny.json written out in plain torch ops, with f8c's parameter names and
layouts (`f8c dump-ir models/gpt-tiny.json` shows them), in float64 on the CPU so that the
reference is exact to far below f8c's float32 tolerance. It imports nothing of f8c on purpose:
the two must agree because both follow the model's definition, not because they share code.

One step: logits, the cross-entropy loss (mean over labels that are not -100), the gradients,
the global gradient norm, then one torch.optim.AdamW step in float32 after clip_grad_norm_
(param groups as f8c's training pass makes them: weight decay 0.1, except 0 for parameters of
rank 1 and the embeddings). Then a second step on the same batch from the float32 parameters
the first one left, with the same optimizer: at step 1 Adam's bias correction cancels beta1 and
beta2 out of the update, at step 2 it no longer does, so the second step is what tests them.

Output: ONE safetensors file, OUT_DIR/gpt-tiny.safetensors, float32 unless said otherwise:
  param.<name>   the parameters before the step (generated in float32, so the float64 reference
                 computes with exactly the values stored)
  tokens         i64 (batch, seq)
  labels         i64 (batch, seq), about 10% set to -100
  logits         (batch, seq, vocab)
  loss           scalar
  grad_norm      scalar: the norm of all gradients before clipping
  grad.<name>    the gradients (before clipping)
  step1.<name>   the parameters after the AdamW step
  loss2, grad_norm2  the second step's loss and gradient norm (at the step-1 parameters)
  step2.<name>   the parameters after the second AdamW step
with metadata: format "f8c-reference-dump", magic "20261202", version "2", the model, batch,
seq, the hyperparameters, ignore_index, torch's version and the date it was made.

Deterministic: every run gives the same tensors and metadata (safetensors may order the header's
keys differently). The committed dump was made with torch 2.11.0 on the CPU of a GPU machine.

Usage: python3 make_reference_dump.py OUT_DIR   (about 10 MB; seconds on any CPU)
"""
import argparse
import datetime
import math
import os
import sys

import numpy as np
import safetensors.numpy
import torch
import torch.nn.functional as F

FORMAT, MAGIC, VERSION = "f8c-reference-dump", "20261202", "2"
SEED = 20261202
# models/gpt-tiny.json
VOCAB, MAX_POSITIONS, LAYERS, HIDDEN, HEADS = 256, 128, 4, 128, 4
HEAD_DIM = HIDDEN // HEADS
FFN = 4 * HIDDEN
EPS = 1e-5
BATCH, SEQ = 4, 64
IGNORE_INDEX = -100
LR, BETA1, BETA2, ADAM_EPS, WEIGHT_DECAY, CLIP_GRAD = 1e-3, 0.9, 0.95, 1e-8, 0.1, 1.0


def parameter_shapes():
    """f8c's parameters of gpt-tiny, in its declaration order: name -> shape ((out, in) weights)."""
    shapes = {"embed.weight": (VOCAB, HIDDEN), "pos_embed.weight": (MAX_POSITIONS, HIDDEN)}
    for layer in range(LAYERS):
        p = f"layers.{layer}."
        shapes.update({
            p + "attn_norm.weight": (HIDDEN,), p + "attn_norm.bias": (HIDDEN,),
            p + "attn.qkv.weight": (3 * HIDDEN, HIDDEN), p + "attn.qkv.bias": (3 * HIDDEN,),
            p + "attn.proj.weight": (HIDDEN, HIDDEN), p + "attn.proj.bias": (HIDDEN,),
            p + "mlp_norm.weight": (HIDDEN,), p + "mlp_norm.bias": (HIDDEN,),
            p + "mlp.fc1.weight": (FFN, HIDDEN), p + "mlp.fc1.bias": (FFN,),
            p + "mlp.fc2.weight": (HIDDEN, FFN), p + "mlp.fc2.bias": (HIDDEN,),
        })
    shapes.update({"final_norm.weight": (HIDDEN,), "final_norm.bias": (HIDDEN,)})
    return shapes


def make_parameters(generator):
    """Weights normal(0, 0.02); norm scales 1 + 0.1 normal and every bias 0.02 normal, so that no
    gradient is trivially zero or one. Drawn in float32, returned in float64 (exact)."""
    params = {}
    for name, shape in parameter_shapes().items():
        noise = torch.randn(shape, generator=generator, dtype=torch.float32)
        if "norm" in name and name.endswith(".weight"):
            value = 1.0 + 0.1 * noise
        else:
            value = 0.02 * noise
        params[name] = value.to(torch.float64).requires_grad_()
    return params


def layer_norm(x, weight, bias):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # biased, as LayerNorm's
    return (x - mean) / torch.sqrt(var + EPS) * weight + bias


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def linear(x, weight, bias=None):
    y = x @ weight.transpose(0, 1)
    return y if bias is None else y + bias


def attention(x, p):
    """Causal self-attention: qkv split into q, k, v in that order, heads (b, s, h, d) -> (b, h,
    s, d), softmax(q k^T / sqrt(head_dim)) v, heads merged back."""
    batch, seq, _ = x.shape
    qkv = linear(x, p["attn.qkv.weight"], p["attn.qkv.bias"])
    q, k, v = qkv.split(HIDDEN, dim=-1)
    q, k, v = (t.reshape(batch, seq, HEADS, HEAD_DIM).transpose(1, 2) for t in (q, k, v))
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(HEAD_DIM))
    future = torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=1)
    scores = scores.masked_fill(future, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    out = (weights @ v).transpose(1, 2).reshape(batch, seq, HIDDEN)
    return linear(out, p["attn.proj.weight"], p["attn.proj.bias"])


def forward(params, tokens):
    """gpt-tiny's logits (batch, seq, vocab), in plain ops."""
    seq = tokens.shape[1]
    x = params["embed.weight"][tokens] + params["pos_embed.weight"][:seq]
    for layer in range(LAYERS):
        p = {k[len(f"layers.{layer}."):]: v for k, v in params.items()
             if k.startswith(f"layers.{layer}.")}
        x = x + attention(layer_norm(x, p["attn_norm.weight"], p["attn_norm.bias"]), p)
        h = layer_norm(x, p["mlp_norm.weight"], p["mlp_norm.bias"])
        x = x + linear(gelu_tanh(linear(h, p["mlp.fc1.weight"], p["mlp.fc1.bias"])),
                       p["mlp.fc2.weight"], p["mlp.fc2.bias"])
    x = layer_norm(x, params["final_norm.weight"], params["final_norm.bias"])
    return x @ params["embed.weight"].transpose(0, 1)  # tied head, no bias


def forward_with_torch_modules(params, tokens):
    """The same model through torch.nn.functional's own layers: a check that the plain-ops
    version above means what f8c's ops mean (LayerNorm, tanh Gelu, causal attention)."""
    seq = tokens.shape[1]
    x = F.embedding(tokens, params["embed.weight"]) + params["pos_embed.weight"][:seq]
    for layer in range(LAYERS):
        p = {k[len(f"layers.{layer}."):]: v for k, v in params.items()
             if k.startswith(f"layers.{layer}.")}
        h = F.layer_norm(x, (HIDDEN,), p["attn_norm.weight"], p["attn_norm.bias"], EPS)
        q, k, v = F.linear(h, p["attn.qkv.weight"], p["attn.qkv.bias"]).split(HIDDEN, dim=-1)
        q, k, v = (t.unflatten(-1, (HEADS, HEAD_DIM)).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + F.linear(a.transpose(1, 2).flatten(2), p["attn.proj.weight"], p["attn.proj.bias"])
        h = F.layer_norm(x, (HIDDEN,), p["mlp_norm.weight"], p["mlp_norm.bias"], EPS)
        h = F.gelu(F.linear(h, p["mlp.fc1.weight"], p["mlp.fc1.bias"]), approximate="tanh")
        x = x + F.linear(h, p["mlp.fc2.weight"], p["mlp.fc2.bias"])
    x = F.layer_norm(x, (HIDDEN,), params["final_norm.weight"], params["final_norm.bias"], EPS)
    return F.linear(x, params["embed.weight"])


def make_optimizer(params):
    """f8c's f32 master weights (copies of `params` in float32) and a torch.optim.AdamW over them
    with f8c's parameter groups."""
    params32 = {name: p.detach().to(torch.float32).clone().requires_grad_()
                for name, p in params.items()}
    no_decay = {"embed.weight", "pos_embed.weight"}
    decay = [p for n, p in params32.items() if p.dim() > 1 and n not in no_decay]
    plain = [p for n, p in params32.items() if p.dim() == 1 or n in no_decay]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": plain, "weight_decay": 0.0}],
        lr=LR, betas=(BETA1, BETA2), eps=ADAM_EPS, foreach=False, fused=False)
    return params32, optimizer


def adamw_step(params32, optimizer, grads):
    """One AdamW step in float32, as f8c's f32 master weights take it: the float64 gradients
    rounded to float32, clipped by clip_grad_norm_, then the single-tensor AdamW."""
    for name, p in params32.items():
        p.grad = grads[name].to(torch.float32).clone()
    # clip_coef_clamped = min(1, clip / (norm + 1e-6)): the coefficient f8c applies too.
    torch.nn.utils.clip_grad_norm_(list(params32.values()), CLIP_GRAD, foreach=False)
    optimizer.step()
    return {name: p.detach().clone() for name, p in params32.items()}


def loss_and_grads(params, tokens, labels):
    """The loss and the float64 gradients at `params` (float64 leaves requiring grad)."""
    logits = forward(params, tokens)
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1),
                           ignore_index=IGNORE_INDEX, reduction="mean")
    loss.backward()
    grads = {name: p.grad.detach() for name, p in params.items()}
    grad_norm = torch.sqrt(sum((g * g).sum() for g in grads.values()))
    return logits, loss, grads, grad_norm


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir")
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(SEED)

    params = make_parameters(generator)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=generator, dtype=torch.int64)
    labels = torch.randint(0, VOCAB, (BATCH, SEQ), generator=generator, dtype=torch.int64)
    ignored = torch.rand((BATCH, SEQ), generator=generator) < 0.1
    labels[ignored] = IGNORE_INDEX

    logits, loss, grads, grad_norm = loss_and_grads(params, tokens, labels)
    with torch.no_grad():
        check = forward_with_torch_modules(params, tokens)
    difference = (logits.detach() - check).abs().max().item()
    if difference > 1e-12:
        sys.exit(f"the plain-ops model and torch's layers disagree by {difference}")
    params32, optimizer = make_optimizer(params)
    after = adamw_step(params32, optimizer, grads)
    # The second step: gradients (in float64) at the float32 parameters the first step left.
    params2 = {name: p.to(torch.float64).clone().requires_grad_() for name, p in after.items()}
    _, loss2, grads2, grad_norm2 = loss_and_grads(params2, tokens, labels)
    after2 = adamw_step(params32, optimizer, grads2)

    def f32(t):
        # np.array, not np.ascontiguousarray: that one turns a scalar into shape (1,).
        return np.array(t.detach().to(torch.float32).numpy(), order="C")

    tensors = {"tokens": tokens.numpy(), "labels": labels.numpy(), "logits": f32(logits),
               "loss": f32(loss), "grad_norm": f32(grad_norm), "loss2": f32(loss2),
               "grad_norm2": f32(grad_norm2)}
    for name in params:
        tensors["param." + name] = f32(params[name])
        tensors["grad." + name] = f32(grads[name])
        tensors["step1." + name] = f32(after[name])
        tensors["step2." + name] = f32(after2[name])
    metadata = {
        "format": FORMAT, "magic": MAGIC, "version": VERSION, "model": "gpt-tiny",
        "batch": str(BATCH), "seq": str(SEQ), "lr": repr(LR), "beta1": repr(BETA1),
        "beta2": repr(BETA2), "eps": repr(ADAM_EPS), "weight_decay": repr(WEIGHT_DECAY),
        "clip_grad": repr(CLIP_GRAD), "ignore_index": str(IGNORE_INDEX),
        "seed": str(SEED), "torch": torch.__version__,
        "made": datetime.date.today().isoformat(),
    }
    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, "gpt-tiny.safetensors")
    safetensors.numpy.save_file(tensors, path, metadata=metadata)
    print(f"{path}: loss {loss.item():.9f}, grad_norm {grad_norm.item():.9f}, "
          f"{int(labels.ne(IGNORE_INDEX).sum())} labels, plain vs torch layers {difference:.3g}, "
          f"{os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
