"""gguf-py as an oracle for the quant tests (tests/quant.rs).

Usage: python3 gguf_quants.py JOBS.json

JOBS.json is a list of jobs, each exchanging raw little-endian bytes through files:
  {"op": "dequantize", "type": "Q4_K", "input": "blocks.bin", "output": "f32.bin"}
  {"op": "quantize", "type": "Q8_0", "row_len": 256, "input": "f32.bin", "output": "blocks.bin"}
`dequantize` reads the type's blocks and writes f32 values; `quantize` reads f32 rows of
`row_len` elements and writes the type's blocks, both through `gguf.quants`.

Exits 3 with a message naming `pip install gguf` when the package is missing, so the Rust
test fails loudly instead of passing without its oracle.
"""

import json
import sys

try:
    import numpy as np
    from gguf import GGMLQuantizationType, quants
except ImportError as e:  # the test prints this and fails
    print(f"gguf-py oracle unavailable ({e}): pip install gguf", file=sys.stderr)
    sys.exit(3)


def run(job):
    qtype = GGMLQuantizationType[job["type"]]
    raw = np.fromfile(job["input"], dtype=np.uint8)
    if job["op"] == "dequantize":
        out = quants.dequantize(raw, qtype).astype(np.float32, copy=False)
    elif job["op"] == "quantize":
        rows = raw.view(np.float32).reshape(-1, job["row_len"])
        out = quants.quantize(rows, qtype)
    else:
        raise ValueError(f"unknown op {job['op']!r}")
    np.ascontiguousarray(out).tofile(job["output"])


def main():
    with open(sys.argv[1]) as f:
        jobs = json.load(f)
    with np.errstate(all="ignore"):  # NaN/Inf scale fields are the point of some inputs
        for job in jobs:
            run(job)


if __name__ == "__main__":
    main()
