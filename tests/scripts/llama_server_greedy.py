#!/usr/bin/env python3
"""Greedy continuation of token ids by the llama.cpp peer (llama-server), with top-2 logprobs.

Usage: llama_server_greedy.py <llama-server> <model.gguf> <prompt_ids.json> <n_predict>
Prints JSON on stdout: {"tokens": [...], "top2": [[[id, logprob], [id, logprob]], ...]}, one
entry per generated token. The prompt is given as ids (no tokenizer, no chat template, no BOS);
end-of-generation tokens do not stop it (ignore_eos); sampling is greedy (top_k 1). Logprobs are
of the full distribution before sampling, so the difference of the top two is their logit margin.
"""
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(url, body=None, timeout=600):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


def main():
    server_bin, model, ids_path, n_predict = sys.argv[1:5]
    prompt = json.load(open(ids_path))
    port = free_port()
    server = subprocess.Popen(
        [server_bin, "-m", model, "--host", "127.0.0.1", "--port", str(port), "-c", "512",
         "-t", "2", "-np", "1", "--log-disable"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 300
        while True:
            if server.poll() is not None:
                sys.exit(f"llama-server exited ({server.returncode}): "
                         f"{server.stderr.read().decode(errors='replace')[-4000:]}")
            try:
                if request(base + "/health", timeout=5).get("status") == "ok":
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.time() > deadline:
                sys.exit("llama-server did not become ready in 300 s")
            time.sleep(0.2)
        out = request(base + "/completion", {
            "prompt": prompt, "n_predict": int(n_predict), "ignore_eos": True,
            "top_k": 1, "temperature": 0.0, "samplers": ["top_k"], "n_probs": 2,
            "return_tokens": True, "cache_prompt": False,
        })
    finally:
        server.terminate()
        server.wait(timeout=30)
    top2 = [[[p["id"], p["logprob"]] for p in step["top_logprobs"][:2]]
            for step in out["completion_probabilities"]]
    json.dump({"tokens": out["tokens"], "top2": top2}, sys.stdout)


main()
