"""A plain llama-server client for `harness threeway`'s llama.cpp arm: Python's standard library
and nothing else, so that what it measures owes nothing to the harness's own HTTP code. The arm
runs it on each counted prompt right after its own request on that prompt.

Usage: python plain_client.py <port> <n_out> < prompts.json   (a JSON list of token-id lists)

For each prompt in turn: connect, then send the arm's own greedy streaming `/completion` body;
TTFT is the time from just before the request is written to the first streamed line that
carries a generated token (`tokens` non-empty or `tokens_predicted` ≥ 1), on the monotonic
clock; the rest of the stream is read to its end before the next prompt, and the final chunk's
`timings.prompt_ms` (the server's own prompt time) is kept beside it. Prints one JSON object:
{"ttft_s": [...], "prompt_s": [...]}.
"""
import http.client
import json
import sys
import time


def body(prompt, n_out):
    return json.dumps({
        "prompt": prompt, "n_predict": n_out, "ignore_eos": True, "cache_prompt": False,
        "temperature": 0.0, "top_k": 1, "samplers": ["top_k"], "repeat_penalty": 1.0,
        "presence_penalty": 0.0, "frequency_penalty": 0.0, "dry_multiplier": 0.0,
        "return_tokens": True, "stream": True,
        # The parser that cannot fail (llama_cpp.rs, NO_OUTPUT_PARSING: why).
        "chat_parser": '{"parsers":[{"type":"epsilon"}],"rules":{},"root":0}',
    })


def ttft(port, prompt, n_out):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
    conn.connect()
    payload = body(prompt, n_out)
    sent = time.perf_counter_ns()
    conn.request("POST", "/completion", payload, {"Content-Type": "application/json"})
    response = conn.getresponse()
    if response.status != 200:
        raise SystemExit(f"HTTP {response.status}: {response.read()[:300]!r}")
    first, prompt_ms = None, None
    for raw in response:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data: "):
            continue
        chunk = json.loads(line[len("data: "):])
        if first is None and (chunk.get("tokens") or chunk.get("tokens_predicted", 0) >= 1):
            first = time.perf_counter_ns()
        if chunk.get("stop"):
            prompt_ms = chunk.get("timings", {}).get("prompt_ms")
    conn.close()
    if first is None or prompt_ms is None:
        raise SystemExit("the stream carried no token or no timings.prompt_ms")
    return (first - sent) * 1e-9, prompt_ms * 1e-3


def main():
    port, n_out = int(sys.argv[1]), int(sys.argv[2])
    prompts = json.load(sys.stdin)
    measured = [ttft(port, p, n_out) for p in prompts]
    json.dump({"ttft_s": [t for t, _ in measured], "prompt_s": [p for _, p in measured]},
              sys.stdout)


main()
