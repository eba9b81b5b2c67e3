#!/usr/bin/env python3
"""Teacher-forced logits of a Hugging Face model directory in mlx_lm (the independent oracle).

Usage: mlx_logits.py <hf_dir> <ids.json> <out.f32>
Runs the ids through mlx_lm's model in one forward pass (causal, as mlx_lm's generation does
for a prompt) and writes the logits after every id as little-endian f32 [len(ids), n_vocab];
prints {"rows", "n_vocab"} as JSON on stdout.
"""
import json
import sys

import numpy as np

try:
    import mlx.core as mx
    import mlx_lm
except ImportError as e:
    sys.exit(f"{e}: pip install 'mlx[cpu]' mlx-lm")

hf_dir, ids_path, out_path = sys.argv[1:4]
ids = json.load(open(ids_path))
model, _ = mlx_lm.load(hf_dir)
logits = model(mx.array([ids]))[0].astype(mx.float32)
mx.eval(logits)
values = np.array(logits, dtype="<f4")
values.tofile(out_path)
json.dump({"rows": values.shape[0], "n_vocab": values.shape[1]}, sys.stdout)
