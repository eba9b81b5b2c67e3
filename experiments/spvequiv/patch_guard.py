#!/usr/bin/env python3
"""Rewrites begin_scan's and end_chunk's `tid < SCAN_WG` as `(tid < SCAN_WG || threads ==
SCAN_WG)`: the same condition wherever tid < threads (every invocation of a workgroup of
`threads`), and one that folds to true in chunk_scan (threads = SCAN_WG, its workgroup size).
Usage: patch_guard.py IN.wgsl OUT.wgsl"""
import sys
text = open(sys.argv[1]).read()
def patch(fn, old, new):
    global text
    start = text.index(f"fn {fn}(")
    end = text.index("\n}\n", start)
    body = text[start:end]
    assert body.count(old) == 1, (fn, body.count(old))
    text = text[:start] + body.replace(old, new) + text[end:]
patch("begin_scan", "if tid < SCAN_WG {", "if tid < SCAN_WG || threads == SCAN_WG {")
patch("end_chunk", "if c == save && tid < SCAN_WG {", "if c == save && (tid < SCAN_WG || threads == SCAN_WG) {")
open(sys.argv[2], "w").write(text)
