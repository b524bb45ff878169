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

Usage: python3 make_onnx_fixtures.py OUT_DIR [--opset N] [--set core|families] [--only A,B]

`--set core` (the default) makes tests/data/onnx/, which the tests read. `--set families` makes
tests/data/onnx-families/: the other decoder families and exporter variants of issue 19
(Mistral with a sliding window and with one KV head, Qwen3, Phi-3, Gemma and Gemma 2, GPT-NeoX,
Falcon, OPT, GPT-J, StableLM, Mixtral, Qwen2-MoE; the TorchScript exporter, opsets 17 and 23,
attention_mask and position_ids inputs, use_cache outputs, fp16 weights), which f8c's patterns
are to learn; a family the exporter cannot export is said in the run's output and left out.
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


class WithMask(torch.nn.Module):
    """A causal LM fed an attention_mask (left padding on the first row) and position_ids, as a
    serving stack exports it."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, position_ids):
        return self.model(input_ids=input_ids, attention_mask=attention_mask,
                          position_ids=position_ids, use_cache=False).logits.float()


class WithCache(torch.nn.Module):
    """A causal LM exported with use_cache: the logits and each layer's key and value."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        out = self.model(input_ids=input_ids, use_cache=True)
        cache = out.past_key_values
        keys = [layer.keys for layer in cache.layers] if hasattr(cache, "layers") else \
            [k for k, _ in cache]
        values = [layer.values for layer in cache.layers] if hasattr(cache, "layers") else \
            [v for _, v in cache]
        return (out.logits.float(), *keys, *values)


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


def hf(config_class, model_class, attention="eager", dtype=torch.float32, wrap=LogitsOnly,
       experts=None, **fields):
    config = config_class(**fields)
    config._attn_implementation = attention
    model = model_class(config)
    if experts:  # transformers' MoE backend (its default grouped_mm has no ONNX translation)
        model.set_experts_implementation(experts)
    return wrap(model).to(dtype)


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


def families():
    """The other decoder families and exporter variants (--set families): name -> (make,
    options), options: dynamo (default True), opset, inputs ("ids" or "mask")."""
    t = transformers
    llama = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN,
                 num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                 max_position_embeddings=MAX_POSITIONS, tie_word_embeddings=False)
    moe = dict(llama, num_local_experts=4, num_experts_per_tok=2)
    plain = dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                 num_attention_heads=HEADS, max_position_embeddings=MAX_POSITIONS)
    return {
        "mistral-sliding-tiny": (lambda: hf(t.MistralConfig, t.MistralForCausalLM,
                                            sliding_window=8, **llama), {}),
        "mistral-mqa-tiny": (lambda: hf(t.MistralConfig, t.MistralForCausalLM,
                                        sliding_window=None,
                                        **dict(llama, num_key_value_heads=1)), {}),
        "qwen3-tiny": (lambda: hf(t.Qwen3Config, t.Qwen3ForCausalLM, head_dim=HIDDEN // HEADS,
                                  **llama), {}),
        "phi3-tiny": (lambda: hf(t.Phi3Config, t.Phi3ForCausalLM, pad_token_id=0, **llama), {}),
        "gemma-tiny": (lambda: hf(t.GemmaConfig, t.GemmaForCausalLM, head_dim=HIDDEN // HEADS,
                                  hidden_activation="gelu_pytorch_tanh",
                                  **dict(llama, tie_word_embeddings=True)), {}),
        "gemma2-tiny": (lambda: hf(t.Gemma2Config, t.Gemma2ForCausalLM, head_dim=HIDDEN // HEADS,
                                   attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                                   sliding_window=8, query_pre_attn_scalar=HIDDEN // HEADS,
                                   **dict(llama, tie_word_embeddings=True)), {}),
        "neox-tiny": (lambda: hf(t.GPTNeoXConfig, t.GPTNeoXForCausalLM, intermediate_size=FFN,
                                 rotary_pct=0.25, use_parallel_residual=True,
                                 hidden_dropout=0.0, attention_dropout=0.0, **plain), {}),
        "falcon-tiny": (lambda: hf(t.FalconConfig, t.FalconForCausalLM, vocab_size=VOCAB,
                                   hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                                   num_attention_heads=HEADS, multi_query=True,
                                   parallel_attn=True, bias=False, alibi=False,
                                   new_decoder_architecture=False,
                                   max_position_embeddings=MAX_POSITIONS), {}),
        "opt-tiny": (lambda: hf(t.OPTConfig, t.OPTForCausalLM, vocab_size=VOCAB,
                                hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                                num_attention_heads=HEADS, ffn_dim=FFN,
                                max_position_embeddings=MAX_POSITIONS, word_embed_proj_dim=HIDDEN,
                                dropout=0.0, attention_dropout=0.0), {}),
        "gptj-tiny": (lambda: hf(t.GPTJConfig, t.GPTJForCausalLM, vocab_size=VOCAB,
                                 n_positions=MAX_POSITIONS, n_embd=HIDDEN, n_layer=LAYERS,
                                 n_head=HEADS, n_inner=FFN, rotary_dim=8, resid_pdrop=0.0,
                                 embd_pdrop=0.0, attn_pdrop=0.0), {}),
        "stablelm-tiny": (lambda: hf(t.StableLmConfig, t.StableLmForCausalLM,
                                     partial_rotary_factor=0.25, **llama), {}),
        "mixtral-tiny": (lambda: hf(t.MixtralConfig, t.MixtralForCausalLM, sliding_window=None,
                                    experts="batched_mm", **moe), {}),
        "mixtral-eager-tiny": (lambda: hf(t.MixtralConfig, t.MixtralForCausalLM,
                                          sliding_window=None, experts="eager", **moe), {}),
        "qwen2moe-tiny": (lambda: hf(t.Qwen2MoeConfig, t.Qwen2MoeForCausalLM,
                                     num_experts=4, num_experts_per_tok=2,
                                     moe_intermediate_size=FFN // 2,
                                     shared_expert_intermediate_size=FFN,
                                     experts="batched_mm", **llama), {}),
        "llama-torchscript-tiny": (lambda: hf(t.LlamaConfig, t.LlamaForCausalLM, **llama),
                                   {"dynamo": False, "opset": 17}),
        "llama-opset17-tiny": (lambda: hf(t.LlamaConfig, t.LlamaForCausalLM, **llama),
                               {"opset": 17}),
        "llama-opset23-tiny": (lambda: hf(t.LlamaConfig, t.LlamaForCausalLM, **llama),
                               {"opset": 23}),
        "llama-mask-tiny": (lambda: hf(t.LlamaConfig, t.LlamaForCausalLM, wrap=WithMask,
                                       **llama), {"inputs": "mask"}),
        "llama-cache-tiny": (lambda: hf(t.LlamaConfig, t.LlamaForCausalLM, wrap=WithCache,
                                        **llama), {}),
        "llama-fp16-tiny": (lambda: hf(t.LlamaConfig, t.LlamaForCausalLM, dtype=torch.float16,
                                       **llama), {}),
    }


def export(name, make, out_dir, opset, dynamo=True, inputs="ids"):
    torch.manual_seed(1234)
    model = make().eval()
    randomize(model)
    folder = os.path.join(out_dir, name)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "model.onnx")
    def feeds(ids):
        """The model's inputs for tokens `ids`: with masks, the first row left-padded by 2."""
        if inputs == "ids":
            return {"input_ids": ids}
        mask = np.ones_like(ids)
        mask[0, :2] = 0
        positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0).astype(np.int64)
        return {"input_ids": ids, "attention_mask": mask, "position_ids": positions}

    example = feeds(np.random.default_rng(1).integers(0, VOCAB, size=(2, 16), dtype=np.int64))
    names = list(example)
    args = tuple(torch.from_numpy(v) for v in example.values())
    batch = torch.export.Dim("batch", min=1, max=64)
    seq = torch.export.Dim("seq", min=3, max=MAX_POSITIONS)
    with torch.no_grad():
        outputs = model(*args)
    n_outputs = len(outputs) if isinstance(outputs, tuple) else 1
    output_names = ["logits"] + [f"present.{i}" for i in range(n_outputs - 1)]
    if dynamo:
        program = torch.onnx.export(model, args, dynamo=True, opset_version=opset or None,
                                    input_names=names, output_names=output_names,
                                    dynamic_shapes={n: {0: batch, 1: seq} for n in names})
        program.save(path, external_data=True)
    else:
        torch.onnx.export(model, args, path, dynamo=False, opset_version=opset or 17,
                          input_names=names, output_names=output_names,
                          dynamic_axes={n: {0: "batch", 1: "seq"} for n in names})
    onnx.checker.check_model(path, full_check=True)

    # Fresh tokens of another shape than the export example, so the dynamic dims are exercised.
    rng = np.random.default_rng(20261202)
    input_ids = rng.integers(0, VOCAB, size=(3, 11), dtype=np.int64)
    fed = feeds(input_ids)
    with torch.no_grad():
        result = model(*(torch.from_numpy(v) for v in fed.values()))
        expected = (result[0] if isinstance(result, tuple) else result).float().numpy()
    try:
        session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        logits = session.run(["logits"], fed)[0].astype(np.float32)
        reference = f"onnxruntime {onnxruntime.__version__}"
    except Exception as error:  # onnxruntime's CPU kernels do not cover every bf16 op
        print(f"{name}: onnxruntime cannot run it ({str(error)[:200]}); torch gives the "
              "reference logits", flush=True)
        logits, reference = expected, f"torch {torch.__version__} (onnxruntime cannot run it)"
    for input_name, value in fed.items():
        np.save(os.path.join(folder, f"{input_name}.npy"), value)
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
    parser.add_argument("--set", choices=["core", "families"], default="core")
    args = parser.parse_args()
    failed = 0
    chosen = {name: (make, {}) for name, make in fixtures().items()} if args.set == "core" \
        else families()
    for name, (make, options) in chosen.items():
        if args.only and name not in args.only.split(","):
            continue
        try:
            export(name, make, args.out_dir, options.get("opset", args.opset),
                   dynamo=options.get("dynamo", True), inputs=options.get("inputs", "ids"))
        except Exception:
            failed += 1
            print(f"{name}: FAILED", flush=True)
            traceback.print_exc()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
