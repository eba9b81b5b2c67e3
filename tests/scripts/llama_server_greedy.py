#!/usr/bin/env python3
"""Greedy continuation of token ids by the llama.cpp peer (llama-server), with top-2 logprobs.

Usage: llama_server_greedy.py <llama-server> <model.gguf> <prompt_ids.json> <n_predict>
Prints JSON on stdout: {"tokens": [...], "top2": [[[id, logprob], [id, logprob]], ...]}, one
entry per generated token. The prompt is given as ids (no tokenizer, no chat template, no BOS);
end-of-generation tokens do not stop it (ignore_eos); sampling is greedy (top_k 1). Logprobs are
of the full distribution before sampling, so the difference of the top two is their logit margin.
"""
import json
import sys

import llama_server


def main():
    server_bin, model, ids_path, n_predict = sys.argv[1:5]
    prompt = json.load(open(ids_path))
    with llama_server.running(server_bin, model) as base:
        out = llama_server.request(base + "/completion", {
            "prompt": prompt, "n_predict": int(n_predict), "ignore_eos": True,
            "top_k": 1, "temperature": 0.0, "samplers": ["top_k"], "n_probs": 2,
            "return_tokens": True, "cache_prompt": False,
        })
    top2 = [[[p["id"], p["logprob"]] for p in step["top_logprobs"][:2]]
            for step in out["completion_probabilities"]]
    json.dump({"tokens": out["tokens"], "top2": top2}, sys.stdout)


main()
