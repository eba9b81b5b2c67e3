#!/usr/bin/env python3
"""Compares two logits files of `harness reference --logits-out`'s format (raw little-endian f32
rows of n_vocab): per row cosine, largest absolute difference, argmax agreement.

    compare_logits.py torch.f32 fak.f32 4096
"""

import sys

import numpy as np


def main():
    a_path, b_path, n_vocab = sys.argv[1], sys.argv[2], int(sys.argv[3])
    a = np.fromfile(a_path, dtype="<f4").reshape(-1, n_vocab).astype(np.float64)
    b = np.fromfile(b_path, dtype="<f4").reshape(-1, n_vocab).astype(np.float64)
    assert a.shape == b.shape, f"{a.shape} vs {b.shape}"
    cos = (a * b).sum(1) / np.sqrt((a * a).sum(1) * (b * b).sum(1))
    diff = np.abs(a - b).max(1)
    same = (a.argmax(1) == b.argmax(1)).sum()
    scale = np.abs(a).max()
    print(f"{len(a)} rows: min cosine {cos.min():.9f}, max |diff| {diff.max():.3e} "
          f"(largest |logit| {scale:.2f}), argmax agrees on {same}/{len(a)}")
    if not (cos.min() > 0.99999 and same == len(a)):
        sys.exit("the logits differ more than f32 rounding explains")


if __name__ == "__main__":
    main()
