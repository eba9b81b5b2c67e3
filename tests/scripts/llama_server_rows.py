#!/usr/bin/env python3
"""Teacher-forced top-k log-probabilities from the llama.cpp peer (llama-server), one row per id,
asked for as the threeway llama.cpp arm's quality pass asks: row i from a request of its own
holding ids[:i + 1] (prompt cache off), one micro-batch, flash attention auto, no host-RAM prompt
cache, no context checkpoints.

Usage: llama_server_rows.py <llama-server> <model.gguf> <ids.json> <n_probs>
Prints JSON on stdout: [[[id, logprob], ...], ...], one list per id (empty where the server
withheld the position's probabilities).
"""
import json
import sys

import llama_server


def main():
    server_bin, model, ids_path, n_probs = sys.argv[1:5]
    ids = json.load(open(ids_path))
    rows = []
    flags = ["-fa", "auto", "--cache-ram", "0", "--ctx-checkpoints", "0"]
    with llama_server.running(server_bin, model, flags) as base:
        for end in range(1, len(ids) + 1):
            out = llama_server.request(base + "/completion", {
                "prompt": ids[:end], "n_predict": 1, "ignore_eos": True, "samplers": [],
                "n_probs": int(n_probs), "post_sampling_probs": False, "cache_prompt": False,
            })
            probs = out.get("completion_probabilities") or [{}]
            rows.append([[p["id"], p["logprob"]] for p in probs[0].get("top_logprobs", [])])
    json.dump(rows, sys.stdout)


main()
