#!/usr/bin/env python3
"""llama.cpp's greedy run with its top-k log-probabilities beside fak's CPU reference teacher-forced
on the same tokens: per generated position, the largest |Δ| of the logit gaps to the top-1 over
llama.cpp's top-k ids, and where the greedy choice differs.

Usage: topk_vs_reference.py <llama-server> <harness> <model.gguf> <prompt_ids.json> <n> <out_dir>
         [--activations f32,ggml-cpu] [-- <extra llama-server args>]
"""
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import numpy as np

K = 16


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body=None, timeout=600):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


def llama_greedy(server_bin, model, prompt, n, extra):
    port = free_port()
    server = subprocess.Popen(
        [server_bin, "-m", model, "--host", "127.0.0.1", "--port", str(port), "-c", "512",
         "-t", "2", "-np", "1", "--log-disable", *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(1500):
            try:
                if post(base + "/health", timeout=5).get("status") == "ok":
                    break
            except Exception:
                time.sleep(0.2)
        out = post(base + "/completion", {
            "prompt": prompt, "n_predict": n, "ignore_eos": True, "top_k": 1,
            "temperature": 0.0, "samplers": ["top_k"], "return_tokens": True,
            "cache_prompt": False})
        tokens = out["tokens"]
        # The streamed probabilities skip tokens that end in an incomplete UTF-8 fragment, so
        # each position's top-k comes from its own request on the context so far (prompt
        # processing, not decode); up to 4 tokens let llama-server complete a fragment.
        topk = []
        for i in range(n):
            step = post(base + "/completion", {
                "prompt": prompt + tokens[:i], "n_predict": 4, "ignore_eos": True, "top_k": 1,
                "temperature": 0.0, "samplers": ["top_k"], "n_probs": K,
                "return_tokens": True, "cache_prompt": False})["completion_probabilities"][0]
            topk.append([(p["id"], p["logprob"]) for p in step["top_logprobs"][:K]])
    finally:
        server.terminate()
        server.wait(timeout=30)
    return tokens, topk


def reference_rows(harness, model, ids, out_dir, activations):
    out = os.path.join(out_dir, f"reference-{activations}.f32")
    subprocess.run([harness, "reference", "--model", model, "--tokens",
                    ",".join(map(str, ids)), "--logits-out", out, "--activations", activations],
                   check=True, stdout=subprocess.DEVNULL)
    side = json.load(open(out + ".json"))
    return np.fromfile(out, dtype=np.float32).reshape(side["rows"], side["n_vocab"])


def main():
    args = sys.argv[1:]
    extra = args[args.index("--") + 1:] if "--" in args else []
    args = args[:args.index("--")] if "--" in args else args
    activations = ["f32", "ggml-cpu"]
    if "--activations" in args:
        i = args.index("--activations")
        activations = args[i + 1].split(",")
        del args[i:i + 2]
    server_bin, harness, model, ids_path, n, out_dir = args
    os.makedirs(out_dir, exist_ok=True)
    prompt = json.load(open(ids_path))
    tokens, topk = llama_greedy(server_bin, model, prompt, int(n), extra)
    report = {"model": model, "llama_server_args": extra, "prompt": prompt,
              "llama_tokens": tokens, "per_activations": {}}
    # Row len(prompt)-1+i predicts output i, teacher-forced on llama.cpp's own tokens.
    ids = prompt + tokens[:-1]
    for act in activations:
        rows = reference_rows(harness, model, ids, out_dir, act)
        steps = []
        for i, top in enumerate(topk):
            if top[0][0] != tokens[i]:
                # llama-server sent no probabilities for this token (an incomplete UTF-8
                # fragment): entry 0 is the next position's.
                continue
            row = rows[len(prompt) - 1 + i]
            top_ids = [t for t, _ in top]
            llama_gap = np.array([lp for _, lp in top]) - top[0][1]
            ours_gap = row[top_ids] - row[top_ids[0]]
            srt = np.sort(row)[::-1]
            steps.append({"output": i, "llama_token": tokens[i], "ours_top1": int(row.argmax()),
                          "ours_margin": float(srt[0] - srt[1]),
                          "llama_margin": float(llama_gap[1] * -1),
                          "max_abs_gap_diff": float(np.abs(llama_gap - ours_gap).max())})
        flips = [s["output"] for s in steps if s["llama_token"] != s["ours_top1"]]
        diffs = [s["max_abs_gap_diff"] for s in steps]
        report["per_activations"][act] = {
            "flips": flips, "median_max_abs_gap_diff": float(np.median(diffs)),
            "max_max_abs_gap_diff": float(np.max(diffs)), "steps": steps}
        report["positions_without_probabilities"] = [
            i for i, top in enumerate(topk) if top[0][0] != tokens[i]]
        print(f"{act}: greedy flips at {flips}; |Δ gap| over llama's top-{K}: "
              f"median {np.median(diffs):.2e}, max {np.max(diffs):.2e}")
    print(f"no probabilities from llama-server at {report['positions_without_probabilities']}")
    json.dump(report, open(os.path.join(out_dir, "report.json"), "w"), indent=1)


main()
