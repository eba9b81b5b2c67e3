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
    server_bin, model, ids_path, n_probs = sys.argv[1:5]
    ids = json.load(open(ids_path))
    port = free_port()
    server = subprocess.Popen(
        [server_bin, "-m", model, "--host", "127.0.0.1", "--port", str(port), "-c", "512",
         "-t", "2", "-np", "1", "-fa", "auto", "--cache-ram", "0", "--ctx-checkpoints", "0",
         "--log-disable"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    rows = []
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
        for end in range(1, len(ids) + 1):
            out = request(base + "/completion", {
                "prompt": ids[:end], "n_predict": 1, "ignore_eos": True, "samplers": [],
                "n_probs": int(n_probs), "post_sampling_probs": False, "cache_prompt": False,
            })
            probs = out.get("completion_probabilities") or [{}]
            rows.append([[p["id"], p["logprob"]] for p in probs[0].get("top_logprobs", [])])
    finally:
        server.terminate()
        server.wait(timeout=30)
    json.dump(rows, sys.stdout)


main()
