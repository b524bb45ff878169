"""The forward pass of an f8c JSON model description in NumPy (float64), written from the
semantics of f8c's high-level ops (ir/infer_fused.c) and frontend/json/model_build.c, to hold the
ONNX graphs f8c export-onnx writes against, through onnxruntime.

MoE layers are routed here (top_k experts per token, gathered one by one) while the export is
dense: the two must agree.
"""
import math

import numpy as np

DEFAULTS = {  # frontend/README.md, by architecture
    "gpt": {"norm": "layernorm", "act": "gelu_tanh", "pos": "learned", "bias": True,
            "tie_embeddings": True},
    "llama": {"norm": "rmsnorm", "act": "swiglu", "pos": "rope", "bias": False,
              "tie_embeddings": False},
    "moe": {"norm": "rmsnorm", "act": "swiglu", "pos": "rope", "bias": False,
            "tie_embeddings": False},
}


def complete(config):
    """The description with f8c's defaults filled in (the fields the forward pass reads)."""
    full = dict(DEFAULTS[config["arch"]])
    full.update({"norm_eps": 1e-5, "rope_theta": 10000.0, "kv_heads": config["heads"],
                 "top_k": min(2, config.get("experts", 2))})
    full.update(config)
    return full


def norm(c, w, name, x):
    eps = c["norm_eps"]
    if c["norm"] == "layernorm":
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        y = (x - mean) / np.sqrt(var + eps) * w[name + ".weight"]
        return y + w[name + ".bias"] if name + ".bias" in w else y
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w[name + ".weight"]


def linear(w, name, x):
    y = x @ w[name + ".weight"].T
    return y + w[name + ".bias"] if name + ".bias" in w else y


def activation(c, x):
    if c["act"] == "swiglu":
        gate, up = np.split(x, 2, axis=-1)
        return gate / (1 + np.exp(-gate)) * up
    if c["act"] == "gelu_tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def rope_tables(c, seq, head_dim):
    exponents = np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim)
    inv_freq = (np.float32(1) / np.float32(c["rope_theta"]) ** exponents).astype(np.float64)
    angles = np.arange(seq)[:, None] * inv_freq[None, :]
    angles = np.concatenate([angles, angles], axis=-1)
    return np.cos(angles), np.sin(angles)


def rope(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


def attention(c, w, prefix, x, tables):
    batch, seq, hidden = x.shape
    heads, kv_heads = c["heads"], c["kv_heads"]
    d = hidden // heads
    qkv = linear(w, prefix + ".attn.qkv", norm(c, w, prefix + ".attn_norm", x))
    q, k, v = np.split(qkv, [heads * d, heads * d + kv_heads * d], axis=-1)
    q, k, v = (t.reshape(batch, seq, -1, d).transpose(0, 2, 1, 3) for t in (q, k, v))
    if tables is not None:
        q, k = rope(q, *tables), rope(k, *tables)
    group = heads // kv_heads
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d)
    scores = np.where(np.tril(np.ones((seq, seq), dtype=bool)), scores, -np.inf)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    merged = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, seq, hidden)
    return x + linear(w, prefix + ".attn.proj", merged)


def moe(c, w, prefix, h):
    tokens = h.reshape(-1, h.shape[-1])
    logits = tokens @ w[prefix + ".mlp.router.weight"].T
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    out = np.zeros_like(tokens)
    for t in range(tokens.shape[0]):
        chosen = np.argsort(-probs[t], kind="stable")[: c["top_k"]]
        gates = probs[t, chosen] / probs[t, chosen].sum()
        for gate, e in zip(gates, chosen):
            up = tokens[t] @ w[prefix + ".mlp.experts.fc1.weight"][e].T
            out[t] += gate * (activation(c, up) @ w[prefix + ".mlp.experts.fc2.weight"][e].T)
    return out.reshape(h.shape)


def forward(config, weights, tokens):
    """Logits (batch, seq, vocab) of the description `config` with `weights` (by parameter
    name) for `tokens` (batch, seq)."""
    c = complete(config)
    w = {name: np.asarray(value, dtype=np.float64) for name, value in weights.items()}
    seq = tokens.shape[1]
    x = w["embed.weight"][tokens]
    tables = None
    if c["pos"] == "learned":
        x = x + w["pos_embed.weight"][:seq]
    else:
        tables = rope_tables(c, seq, c["hidden"] // c["heads"])
    for layer in range(c["layers"]):
        prefix = f"layers.{layer}"
        x = attention(c, w, prefix, x, tables)
        h = norm(c, w, prefix + ".mlp_norm", x)
        if c["arch"] == "moe":
            x = x + moe(c, w, prefix, h)
        else:
            x = x + linear(w, prefix + ".mlp.fc2", activation(c, linear(w, prefix + ".mlp.fc1", h)))
    head = w["embed.weight"] if c["tie_embeddings"] else w["head.weight"]
    return norm(c, w, "final_norm", x) @ head.T
