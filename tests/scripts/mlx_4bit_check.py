#!/usr/bin/env python3
"""Checks `harness synth --mlx-4bit` against MLX itself.

Usage: mlx_4bit_check.py <hf_dir> <mlx_4bit_dir>
mlx_lm must load the directory as a quantized model, and every parameter it holds must equal, bit
for bit, what `mlx_lm.convert -q` makes of the Hugging Face export: the export loaded by mlx_lm
(whose `sanitize` maps a checkpoint to MLX's layout: qwen35's conv weights to [C, K, 1], its
zero-centred norm gains + 1) and quantized by `nn.quantize` (affine, group 64, 4 bits) wherever a
layer has a quantized form and whole groups. The two must give the same logits. Prints a JSON
report; exits 1 on a mismatch.
"""
import json
import sys

import mlx.core as mx
import mlx.nn as nn
import mlx_lm
from mlx.utils import tree_flatten

hf_dir, mlx_dir = sys.argv[1:3]
model, _ = mlx_lm.load(mlx_dir)
reference, _ = mlx_lm.load(hf_dir)
nn.quantize(
    reference,
    group_size=64,
    bits=4,
    class_predicate=lambda _, m: hasattr(m, "to_quantized") and m.weight.shape[-1] % 64 == 0,
)
got = dict(tree_flatten(model.parameters()))
want = dict(tree_flatten(reference.parameters()))
report = {"mismatches": [], "missing": sorted(set(want) - set(got)),
          "unexpected": sorted(set(got) - set(want))}
for name in sorted(set(got) & set(want)):
    g, w = got[name], want[name]
    if g.dtype != w.dtype or g.shape != w.shape or not mx.array_equal(g, w).item():
        diff = mx.sum(g != w).item() if g.shape == w.shape else None
        report["mismatches"].append({"tensor": name, "got": [str(g.dtype), list(g.shape)],
                                     "want": [str(w.dtype), list(w.shape)], "differing": diff})


def quantized(m):
    return sum(isinstance(x, (nn.QuantizedLinear, nn.QuantizedEmbedding))
               for _, x in m.named_modules())


report["quantized"] = quantized(reference)
report["quantized_layers_loaded"] = quantized(model)
# Ids spread over the cut 4 096-token vocabulary the test models carry.
ids = mx.array([[1, 200, 3000, 4000, 4095, 7, 77, 777]])
logits, expected = model(ids).astype(mx.float32), reference(ids).astype(mx.float32)
report["logits_max_abs_diff"] = mx.max(mx.abs(logits - expected)).item()
json.dump(report, sys.stdout)
ok = (not report["mismatches"] and not report["missing"] and not report["unexpected"]
      and report["quantized_layers_loaded"] == report["quantized"]
      and report["logits_max_abs_diff"] == 0.0)
sys.exit(0 if ok else 1)
