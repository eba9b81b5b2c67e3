"""Conversations through nginx to two `fak serve` replicas (docs/SCALE-OUT.md), checked through
each replica's /metrics: every turn of a conversation lands on the replica of its first turn, that
replica's prefix cache supplies the earlier turn to the next (its cache-hit counter grows by what
the answer's usage reports), and both replicas get conversations.

Run by tests/scale_out.rs:
    python scale_out.py --proxy URL --replicas URL_A URL_B --model NAME
"""

import argparse
import sys
import urllib.request

import openai


def metrics(url):
    """{name: value} of a replica's unlabelled metrics, and its answered completions."""
    text = urllib.request.urlopen(url + "/metrics", timeout=60).read().decode()
    out = {"completions": 0.0}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, value = line.rsplit(" ", 1)
        if name.startswith("fak_requests_total{") and 'endpoint="completions"' in name:
            out["completions"] += float(value)
        elif "{" not in name:
            out[name] = float(value)
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--proxy", required=True)
    p.add_argument("--replicas", nargs=2, required=True)
    p.add_argument("--model", required=True)
    args = p.parse_args()
    served = {url: [] for url in args.replicas}
    # Four conversations, then more until both replicas have one (where a key lands depends on
    # the replicas' ports, which the OS picks).
    for c in range(16):
        if c >= 4 and all(served.values()):
            break
        conversation = f"conversation-{c}"
        client = openai.OpenAI(base_url=args.proxy + "/v1", api_key="unused", max_retries=0,
                               timeout=600,
                               default_headers={"X-Conversation-Id": conversation})
        prompt = f"Conversation {c}. " + "Keep notes of everything said here. " * 5
        where = []
        for turn in range(2):
            before = {url: metrics(url) for url in args.replicas}
            r = client.completions.create(model=args.model, prompt=prompt, max_tokens=1,
                                          temperature=0)
            after = {url: metrics(url) for url in args.replicas}
            moved = [url for url in args.replicas
                     if after[url]["completions"] > before[url]["completions"]]
            assert len(moved) == 1, f"{conversation} turn {turn}: answered by {moved}"
            url = moved[0]
            where.append(url)
            cached = r.usage.prompt_tokens_details.cached_tokens
            hit = (after[url]["fak_prefix_cache_hit_tokens_total"]
                   - before[url]["fak_prefix_cache_hit_tokens_total"])
            assert hit == cached, f"{conversation} turn {turn}: /metrics {hit}, usage {cached}"
            if turn > 0:
                # The previous turn's prompt and answer, in whole pages at least.
                assert cached >= previous_prompt_tokens // 16 * 16, \
                    f"{conversation} turn {turn}: {cached} cached of {r.usage.prompt_tokens}"
            previous_prompt_tokens = r.usage.prompt_tokens
            prompt += r.choices[0].text + f" Turn {turn + 1}: go on."
        assert len(set(where)) == 1, f"{conversation} moved between replicas: {where}"
        served[where[0]].append(conversation)
        print(f"{conversation}: replica {where[0]}", file=sys.stderr)
    assert all(served.values()), f"a replica got no conversation: {served}"
    print("affinity held:", served, file=sys.stderr)


if __name__ == "__main__":
    main()
