#!/usr/bin/env python3
"""Checks `harness synth --mlx-4bit` against MLX itself.

Usage: mlx_4bit_check.py <hf_dir> <mlx_4bit_dir>
For every tensor MLX would quantize (a matrix whose rows are whole 64-groups), the written
weight/scales/biases must equal `mx.quantize(w, group_size=64, bits=4)` of the Hugging Face
export's float weights; the other tensors must equal the float weights. Then mlx_lm must load the
directory as a quantized model and give the same logits as mlx_lm's own `nn.quantize` of the
Hugging Face model (what `mlx_lm.convert -q` runs). Prints a JSON report; exits 1 on a mismatch.
"""
import json
import sys

import mlx.core as mx
import mlx.nn as nn
import mlx_lm

hf_dir, mlx_dir = sys.argv[1:3]
floats = mx.load(f"{hf_dir}/model.safetensors")
written = mx.load(f"{mlx_dir}/model.safetensors")
report = {"quantized": 0, "float": 0, "mismatches": []}
for name, w in sorted(floats.items()):
    if w.ndim == 2 and w.shape[-1] % 64 == 0:
        report["quantized"] += 1
        base = name[: -len(".weight")]
        want = mx.quantize(w, group_size=64, bits=4)
        for part, value in zip(["weight", "scales", "biases"], want):
            got = written.get(f"{base}.{part}")
            if got is None or got.dtype != value.dtype or not mx.array_equal(got, value).item():
                diff = None if got is None or got.shape != value.shape else \
                    mx.sum(got != value).item()
                report["mismatches"].append({"tensor": f"{base}.{part}", "differing": diff})
    else:
        report["float"] += 1
        if not mx.array_equal(written.get(name, mx.array([])), w).item():
            report["mismatches"].append({"tensor": name})
extra = set(written) - {k for k in written if k in floats or k.rsplit(".", 1)[0] + ".weight" in floats}
report["unexpected"] = sorted(extra)

model, _ = mlx_lm.load(mlx_dir)
reference, _ = mlx_lm.load(hf_dir)
nn.quantize(reference, group_size=64, bits=4)
ids = mx.array([[1, 200, 3000, 40000, 151000, 7, 77, 777]])
got, want = model(ids).astype(mx.float32), reference(ids).astype(mx.float32)
report["logits_max_abs_diff"] = mx.max(mx.abs(got - want)).item()
report["quantized_layers_loaded"] = sum(isinstance(m, (nn.QuantizedLinear, nn.QuantizedEmbedding))
                                        for _, m in model.named_modules())
json.dump(report, sys.stdout)
ok = not report["mismatches"] and not report["unexpected"] and report["logits_max_abs_diff"] == 0.0
sys.exit(0 if ok else 1)
