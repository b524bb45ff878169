#!/usr/bin/env python3
"""Make the exporter fixtures under tests/data/onnx/ (run on a machine with PyTorch and
transformers; nothing is downloaded: every model is a tiny config with seeded random weights).

Each fixture is a folder with:
  model.onnx        written by torch.onnx.export(dynamo=True), weights in external data
  model.onnx.data   the external data
  input_ids.npy     int64 (batch, seq) tokens, seeded, not used at export time
  logits.npy        float32 logits onnxruntime computed for input_ids.npy (torch's where
                    onnxruntime cannot run the model; ops.txt says which)
  ops.txt           the op-type histogram and opset, for people reading a diff

Usage: python3 make_onnx_fixtures.py OUT_DIR [--opset N]
"""
import argparse
import collections
import os
import sys
import traceback

import numpy as np
import onnx
import onnxruntime
import torch
import transformers

VOCAB = 256
HIDDEN = 64
LAYERS = 2
HEADS = 4
KV_HEADS = 2
FFN = 128
MAX_POSITIONS = 64


class LogitsOnly(torch.nn.Module):
    """Hugging Face causal LM -> logits only, no cache, so the exported graph is one forward."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False).logits.float()


class MiniGPT(torch.nn.Module):
    """A GPT written the way people write their own: nn.GELU (erf form), nn.LayerNorm, fused qkv,
    scaled_dot_product_attention with is_causal, untied head with a bias-free Linear."""

    def __init__(self):
        super().__init__()
        self.wte = torch.nn.Embedding(VOCAB, HIDDEN)
        self.wpe = torch.nn.Embedding(MAX_POSITIONS, HIDDEN)
        self.blocks = torch.nn.ModuleList([MiniBlock() for _ in range(LAYERS)])
        self.ln_f = torch.nn.LayerNorm(HIDDEN)
        self.head = torch.nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, input_ids):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.wte(input_ids) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


class MiniBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(HIDDEN)
        self.qkv = torch.nn.Linear(HIDDEN, 3 * HIDDEN)
        self.proj = torch.nn.Linear(HIDDEN, HIDDEN)
        self.ln2 = torch.nn.LayerNorm(HIDDEN)
        self.fc1 = torch.nn.Linear(HIDDEN, FFN)
        self.act = torch.nn.GELU()
        self.fc2 = torch.nn.Linear(FFN, HIDDEN)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(HIDDEN, dim=2)
        q = q.view(b, t, HEADS, c // HEADS).transpose(1, 2)
        k = k.view(b, t, HEADS, c // HEADS).transpose(1, 2)
        v = v.view(b, t, HEADS, c // HEADS).transpose(1, 2)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.fc2(self.act(self.fc1(self.ln2(x))))


def hf(config_class, model_class, attention="eager", dtype=torch.float32, **fields):
    config = config_class(**fields)
    config._attn_implementation = attention
    return LogitsOnly(model_class(config)).to(dtype)


def randomize(model):
    """Every parameter gets its own random values: freshly initialized models have zero biases
    and unit norm weights, which exporters fold away or merge, hiding what real checkpoints
    look like."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)


def fixtures():
    t = transformers
    common_llama = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN,
                        num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                        num_key_value_heads=KV_HEADS, max_position_embeddings=MAX_POSITIONS,
                        tie_word_embeddings=False)
    return {
        "gpt2-tiny": lambda: hf(t.GPT2Config, t.GPT2LMHeadModel, vocab_size=VOCAB,
                                n_positions=MAX_POSITIONS, n_embd=HIDDEN, n_layer=LAYERS,
                                n_head=HEADS, n_inner=FFN, resid_pdrop=0.0, embd_pdrop=0.0,
                                attn_pdrop=0.0),
        "llama-tiny": lambda: hf(t.LlamaConfig, t.LlamaForCausalLM, **common_llama),
        "mistral-tiny": lambda: hf(t.MistralConfig, t.MistralForCausalLM, sliding_window=None,
                                   **common_llama),
        "qwen2-tiny": lambda: hf(t.Qwen2Config, t.Qwen2ForCausalLM, **common_llama),
        "llama-sdpa-tiny": lambda: hf(t.LlamaConfig, t.LlamaForCausalLM, attention="sdpa",
                                      **common_llama),
        "gpt2-sdpa-tiny": lambda: hf(t.GPT2Config, t.GPT2LMHeadModel, attention="sdpa",
                                     vocab_size=VOCAB, n_positions=MAX_POSITIONS, n_embd=HIDDEN,
                                     n_layer=LAYERS, n_head=HEADS, n_inner=FFN, resid_pdrop=0.0,
                                     embd_pdrop=0.0, attn_pdrop=0.0),
        "llama-bf16-tiny": lambda: hf(t.LlamaConfig, t.LlamaForCausalLM, dtype=torch.bfloat16,
                                      **common_llama),
        "minigpt-tiny": MiniGPT,
    }


def export(name, make, out_dir, opset):
    torch.manual_seed(1234)
    model = make().eval()
    randomize(model)
    folder = os.path.join(out_dir, name)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "model.onnx")
    example = torch.randint(0, VOCAB, (2, 16))
    batch = torch.export.Dim("batch", min=1, max=64)
    seq = torch.export.Dim("seq", min=2, max=MAX_POSITIONS)
    program = torch.onnx.export(model, (example,), dynamo=True, opset_version=opset or None,
                                input_names=["input_ids"], output_names=["logits"],
                                dynamic_shapes={"input_ids": {0: batch, 1: seq}})
    program.save(path, external_data=True)
    onnx.checker.check_model(path, full_check=True)

    # Fresh tokens of another shape than the export example, so the dynamic dims are exercised.
    rng = np.random.default_rng(20261202)
    input_ids = rng.integers(0, VOCAB, size=(3, 11), dtype=np.int64)
    with torch.no_grad():
        expected = model(torch.from_numpy(input_ids)).float().numpy()
    try:
        session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        logits = session.run(["logits"], {"input_ids": input_ids})[0].astype(np.float32)
        reference = f"onnxruntime {onnxruntime.__version__}"
    except Exception as error:  # onnxruntime's CPU kernels do not cover every bf16 op
        print(f"{name}: onnxruntime cannot run it ({str(error)[:200]}); torch gives the "
              "reference logits", flush=True)
        logits, reference = expected, f"torch {torch.__version__} (onnxruntime cannot run it)"
    np.save(os.path.join(folder, "input_ids.npy"), input_ids)
    np.save(os.path.join(folder, "logits.npy"), logits)

    proto = onnx.load(path, load_external_data=False)
    histogram = collections.Counter(node.op_type for node in proto.graph.node)
    with open(os.path.join(folder, "ops.txt"), "w") as f:
        f.write(f"# {name}: torch {torch.__version__}, transformers {transformers.__version__}, "
                f"onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}\n")
        f.write(f"logits.npy from: {reference}\n")
        f.write("opset_import: " + ", ".join(f"{o.domain or 'ai.onnx'}:{o.version}"
                                             for o in proto.opset_import) + "\n")
        f.write(f"nodes: {len(proto.graph.node)}, initializers: {len(proto.graph.initializer)}\n")
        for op, count in sorted(histogram.items()):
            f.write(f"{op} {count}\n")
    print(f"{name}: {len(proto.graph.node)} nodes, ort vs torch max abs diff "
          f"{np.abs(logits - expected).max():.3g}", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--opset", type=int, default=18, help="0: the exporter's default")
    parser.add_argument("--only", default=None)
    args = parser.parse_args()
    failed = 0
    for name, make in fixtures().items():
        if args.only and name not in args.only.split(","):
            continue
        try:
            export(name, make, args.out_dir, args.opset)
        except Exception:
            failed += 1
            print(f"{name}: FAILED", flush=True)
            traceback.print_exc()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
