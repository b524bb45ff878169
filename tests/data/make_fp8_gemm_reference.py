#!/usr/bin/env python3
"""Make the FP8 GEMM reference that tests/runtime/test_fp8_gemm_h200.py holds f8c's CPU FP8Gemm
against: torch._scaled_mm on an H200 (cuBLASLt's FP8 GEMM on sm_90), on random FP8 operands.

Cases (a is M x K, b is N x K, both K-major as FP8Gemm and cuBLASLt take them):
  e4m3_e4m3_f32   per-tensor scales, E4M3 x E4M3, float32 output
  e5m2_e4m3_bf16  per-tensor scales, E5M2 x E4M3 (a gradient times a weight), bf16 output
  rowwise_bf16    one scale per row of a and per row of b (E4M3), bf16 output
Each case stores, in ONE safetensors file OUT_DIR/fp8-gemm-h200.safetensors:
  <case>.a, <case>.b          uint8 FP8 codes
  <case>.a_scale_inv, .b_scale_inv   float32, scalars or (M, 1) / (N, 1) for rowwise
  <case>.out                  float32 (the bf16 output widened exactly)
with metadata: format "f8c-fp8-gemm-reference", version "1", the device, torch's version, the
date. Operand codes are random finite values (no NaN codes), so every output is finite.

It imports nothing of f8c: the two must agree because both compute (a * sa)(b * sb)^T.

Usage: python3 make_fp8_gemm_reference.py OUT_DIR   (needs a CUDA GPU with FP8: sm_89 or later)
"""
import datetime
import os
import sys

import torch
from safetensors.torch import save_file

M, N, K = 128, 192, 256


def random_codes(generator, rows, cols, dtype):
    """Random finite FP8 values of `dtype` (as torch tensors of that dtype) on the GPU."""
    bits = torch.randint(0, 256, (rows, cols), generator=generator, dtype=torch.int32).to(torch.uint8)
    values = bits.view(dtype)
    finite = torch.isfinite(values.float())
    return torch.where(finite, values.float(), torch.zeros_like(values.float())).to(dtype)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    out_dir = sys.argv[1]
    generator = torch.Generator().manual_seed(20261202)
    tensors = {}
    cases = [("e4m3_e4m3_f32", torch.float8_e4m3fn, torch.float32, False),
             ("e5m2_e4m3_bf16", torch.float8_e5m2, torch.bfloat16, False),
             ("rowwise_bf16", torch.float8_e4m3fn, torch.bfloat16, True)]
    for name, a_dtype, out_dtype, rowwise in cases:
        a = random_codes(generator, M, K, a_dtype)
        b = random_codes(generator, N, K, torch.float8_e4m3fn)
        if rowwise:
            sa = torch.rand((M, 1), generator=generator) * 2 ** -6 + 2 ** -8
            sb = torch.rand((N, 1), generator=generator) * 2 ** -6 + 2 ** -8
        else:
            sa = torch.rand((), generator=generator) * 2 ** -6 + 2 ** -8
            sb = torch.rand((), generator=generator) * 2 ** -6 + 2 ** -8
        device_a, device_b = a.cuda(), b.cuda()
        out = torch._scaled_mm(device_a, device_b.t(), scale_a=sa.float().cuda(),
                               scale_b=(sb.float().t() if rowwise else sb.float()).cuda(),
                               out_dtype=out_dtype)
        tensors[f"{name}.a"] = a.view(torch.uint8).contiguous()
        tensors[f"{name}.b"] = b.view(torch.uint8).contiguous()
        tensors[f"{name}.a_scale_inv"] = sa.float().contiguous()
        tensors[f"{name}.b_scale_inv"] = sb.float().contiguous()
        tensors[f"{name}.out"] = out.float().cpu().contiguous()
    metadata = {"format": "f8c-fp8-gemm-reference", "version": "1",
                "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                "date": datetime.date.today().isoformat()}
    os.makedirs(out_dir, exist_ok=True)
    save_file(tensors, os.path.join(out_dir, "fp8-gemm-h200.safetensors"), metadata=metadata)
    print("wrote", os.path.join(out_dir, "fp8-gemm-h200.safetensors"), metadata)
    return 0


if __name__ == "__main__":
    sys.exit(main())
