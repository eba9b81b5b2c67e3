"""`fak serve` through the official `openai` Python client (and raw HTTP where a client would
refuse to send what is tested): chat and completions, whole and streamed, stop strings, sampling,
logprobs, tools and the thinking switch through the chat template, the prefix cache's
cached_tokens, disconnects mid-stream and mid-prefill, every bad-input error, the full queue, a
bounded load test whose every greedy answer must equal the same request run alone, and last the
SIGTERM drain.

The engine's logits depend neither on the batch nor on how a prompt is cut into prefill steps or
resumed from the prefix cache (tests/batch_invariance.rs), so a greedy answer is the same whatever
the server is doing: each reference is run twice ([`twice`]), the second time with its prompt in
the cache, and the two answers must agree.

Run by tests/serve.rs against one server it started:
    python serve_openai.py --base-url http://127.0.0.1:PORT --model NAME --pid PID
        --context N --max-body BYTES --max-outstanding N
Exit status 0 when every test passed (unittest's report on stderr).
"""

import argparse
import http.client
import json
import os
import signal
import socket
import sys
import threading
import time
import unittest
import urllib.parse

import openai

ARGS = None


def client():
    return openai.OpenAI(base_url=ARGS.base_url + "/v1", api_key="unused", max_retries=0,
                         timeout=600)


def raw(method, path, body=None, headers=None):
    """(status, headers, parsed JSON or text) of one request, whatever the status."""
    url = urllib.parse.urlparse(ARGS.base_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=600)
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    conn.request(method, path, body=body, headers=headers or {"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read().decode()
    conn.close()
    try:
        data = json.loads(data)
    except ValueError:
        pass
    # Header names in lower case (HTTP/1.1 names are case-insensitive; hyper writes them so).
    return r.status, {k.lower(): v for k, v in r.getheaders()}, data


def metric(name):
    _, _, text = raw("GET", "/metrics")
    total = 0.0
    found = False
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
            found = True
    assert found, f"no metric {name} in /metrics"
    return total


def wait_for(what, check, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def greedy_completion(prompt, n, **extra):
    r = client().completions.create(model=ARGS.model, prompt=prompt, max_tokens=n, temperature=0,
                                    extra_body={"return_token_ids": True, **extra})
    return r


def twice(request):
    """Runs `request` twice, the second time with its prompt in the prefix cache the first left:
    both answers must be the same; returns the second."""
    first, second = request(), request()
    assert first.choices[0].model_dump() == second.choices[0].model_dump(), (
        f"a cached prompt changed the answer: {first.choices[0]} then {second.choices[0]}")
    return second


def ids_of(r):
    return r.choices[0].model_extra["token_ids"]


def user(text):
    return [{"role": "user", "content": text}]


class A_Endpoints(unittest.TestCase):
    def test_models_and_health(self):
        models = client().models.list()
        self.assertEqual([m.id for m in models.data], [ARGS.model])
        status, _, body = raw("GET", "/health")
        self.assertEqual((status, body["status"]), (200, "ok"))

    def test_completion_whole_and_streamed_agree(self):
        whole = twice(lambda: greedy_completion("The quick brown fox", 6))
        choice = whole.choices[0]
        self.assertEqual(choice.finish_reason, "length")
        self.assertEqual(whole.usage.completion_tokens, 6)
        self.assertEqual(len(ids_of(whole)), 6)
        self.assertGreater(whole.usage.prompt_tokens, 0)
        stream = client().completions.create(
            model=ARGS.model, prompt="The quick brown fox", max_tokens=6, temperature=0,
            stream=True, stream_options={"include_usage": True},
            extra_body={"return_token_ids": True})
        text, ids, finish, usage = "", [], None, None
        for chunk in stream:
            if chunk.usage:
                usage = chunk.usage
            for c in chunk.choices:
                text += c.text
                ids += c.model_extra.get("token_ids", [])
                finish = c.finish_reason or finish
        self.assertEqual(ids, ids_of(whole))
        self.assertEqual(text, choice.text)
        self.assertEqual(finish, "length")
        self.assertEqual(usage.completion_tokens, 6)

    def test_token_id_prompt(self):
        ids = ids_of(greedy_completion("Once upon a time", 3))
        prompt = [1000, 11, 1879] + ids  # ids of the test model's cut 4 096-token vocabulary
        r = greedy_completion(prompt, 3)
        self.assertEqual(r.usage.prompt_tokens, len(prompt))
        self.assertEqual(len(ids_of(r)), 3)

    def test_chat_whole_and_streamed_agree(self):
        c = client()
        whole = twice(lambda: c.chat.completions.create(
            model=ARGS.model, messages=user("Hello"), max_tokens=5, temperature=0))
        msg = whole.choices[0].message
        self.assertEqual(msg.role, "assistant")
        self.assertEqual(whole.usage.completion_tokens, 5)
        stream = c.chat.completions.create(model=ARGS.model, messages=user("Hello"), max_tokens=5,
                                           temperature=0, stream=True)
        content, reasoning, finish = "", "", None
        for chunk in stream:
            d = chunk.choices[0].delta
            content += d.content or ""
            reasoning += (d.model_extra or {}).get("reasoning_content") or ""
            finish = chunk.choices[0].finish_reason or finish
        self.assertEqual(content, msg.content or "")
        self.assertEqual(reasoning, (msg.model_extra or {}).get("reasoning_content") or "")
        self.assertEqual(finish, whole.choices[0].finish_reason)

    def test_every_role_goes_through_the_template(self):
        messages = [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "{\"celsius\": 21}"},
        ]
        r = client().chat.completions.create(model=ARGS.model, messages=messages, max_tokens=2,
                                             temperature=0)
        self.assertEqual(r.usage.completion_tokens, 2)

    def test_tools_reach_the_template(self):
        tools = [{"type": "function", "function": {
            "name": "get_weather", "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
        c = client()
        plain = c.chat.completions.create(model=ARGS.model, messages=user("Weather?"),
                                          max_tokens=1, temperature=0)
        with_tools = c.chat.completions.create(model=ARGS.model, messages=user("Weather?"),
                                               max_tokens=1, temperature=0, tools=tools)
        # The template writes the tool's JSON into the system prompt.
        self.assertGreater(with_tools.usage.prompt_tokens, plain.usage.prompt_tokens + 30)
        # tool_choice none: no tools in the prompt.
        none = c.chat.completions.create(model=ARGS.model, messages=user("Weather?"),
                                         max_tokens=1, temperature=0, tools=tools,
                                         tool_choice="none")
        self.assertEqual(none.usage.prompt_tokens, plain.usage.prompt_tokens)

    def test_thinking_switch(self):
        c = client()
        on = c.chat.completions.create(model=ARGS.model, messages=user("Hi"), max_tokens=2,
                                       temperature=0)
        off = c.chat.completions.create(model=ARGS.model, messages=user("Hi"), max_tokens=2,
                                        temperature=0,
                                        extra_body={"chat_template_kwargs":
                                                    {"enable_thinking": False}})
        # Qwen3's template closes an empty think block after the generation prompt:
        # "<think>\n\n</think>\n\n" is 4 tokens.
        self.assertEqual(off.usage.prompt_tokens, on.usage.prompt_tokens + 4)
        self.assertIn("reasoning_content", off.choices[0].message.model_extra)

    def test_logprobs(self):
        r = client().chat.completions.create(model=ARGS.model, messages=user("Count"),
                                             max_tokens=3, temperature=0, logprobs=True,
                                             top_logprobs=3)
        entries = r.choices[0].logprobs.content
        self.assertEqual(len(entries), 3)
        for e in entries:
            tops = [t.logprob for t in e.top_logprobs]
            self.assertEqual(len(tops), 3)
            self.assertEqual(tops, sorted(tops, reverse=True))
            self.assertTrue(all(lp <= 0 for lp in tops))
            # Greedy: the chosen token is the most likely one.
            self.assertAlmostEqual(e.logprob, tops[0], places=5)
        legacy = client().completions.create(model=ARGS.model, prompt="Count", max_tokens=2,
                                             temperature=0, logprobs=2)
        lp = legacy.choices[0].logprobs
        self.assertEqual(len(lp.tokens), 2)
        # A dict by token text: two alternatives may decode to the same text.
        self.assertIn(len(lp.top_logprobs[0]), (1, 2))

    def test_sampling_is_seeded(self):
        def sample(seed):
            return ids_of(client().completions.create(
                model=ARGS.model, prompt="Random words:", max_tokens=5, temperature=1.5,
                top_p=0.95, presence_penalty=0.5, frequency_penalty=0.2, seed=seed,
                extra_body={"return_token_ids": True, "repetition_penalty": 1.1, "top_k": 100,
                            "min_p": 0.01}))
        a, b, other = sample(7), sample(7), sample(8)
        self.assertEqual(a, b)
        self.assertNotEqual(a, other)

    def test_stop_strings(self):
        whole = twice(lambda: greedy_completion("A list of things:", 8)).choices[0].text
        # A stop string from the middle of the greedy answer cuts it right there.
        stop = whole[len(whole) // 2:len(whole) // 2 + 3]
        self.assertTrue(stop.strip(), f"the greedy text {whole!r} has no usable stop string")
        cut = whole[:whole.index(stop)]
        r = greedy_completion("A list of things:", 8, stop=[stop, "never appears 123"])
        self.assertEqual(r.choices[0].text, cut)
        self.assertEqual(r.choices[0].finish_reason, "stop")
        stream = client().completions.create(model=ARGS.model, prompt="A list of things:",
                                             max_tokens=8, temperature=0, stop=stop, stream=True)
        chunks = list(stream)
        self.assertEqual("".join(c.choices[0].text for c in chunks if c.choices), cut)
        self.assertEqual(chunks[-1].choices[0].finish_reason, "stop")

    def test_prefix_cache_reports_cached_tokens(self):
        preamble = "You are a careful assistant. " * 12
        first = client().completions.create(model=ARGS.model, prompt=preamble + "First.",
                                            max_tokens=1, temperature=0)
        second = client().completions.create(model=ARGS.model, prompt=preamble + "Second.",
                                             max_tokens=1, temperature=0)
        cached = second.usage.prompt_tokens_details.cached_tokens
        self.assertGreaterEqual(cached, 32, "the shared preamble's whole pages are reused")
        self.assertLess(cached, second.usage.prompt_tokens)
        self.assertGreater(metric("fak_prefix_cache_hit_tokens_total"), 0)


class B_Errors(unittest.TestCase):
    def expect(self, status, body, param=None, code=None, raw_body=None, path="/v1/completions"):
        got, headers, answer = raw("POST", path, raw_body if raw_body is not None else body)
        self.assertEqual(got, status, answer)
        err = answer["error"]
        self.assertTrue(err["message"], answer)
        self.assertIn("type", err)
        if param is not None:
            self.assertEqual(err["param"], param, answer)
        if code is not None:
            self.assertEqual(err["code"], code, answer)
        return err, headers

    def test_malformed_json(self):
        err, _ = self.expect(400, None, raw_body='{"prompt": "x", ')
        self.assertIn("JSON", err["message"])
        self.expect(400, None, raw_body="[1, 2]")

    def test_mistyped_and_out_of_range_fields(self):
        base = {"model": ARGS.model, "prompt": "x", "max_tokens": 1}
        for field, value in [("temperature", "hot"), ("max_tokens", -1), ("stream", "yes"),
                             ("temperature", 2.5), ("top_p", 0), ("min_p", 1.5),
                             ("presence_penalty", 3), ("frequency_penalty", -9),
                             ("repetition_penalty", 0), ("top_k", -5), ("max_tokens", 0),
                             ("n", 2), ("logprobs", 50), ("stop", [1, 2])]:
            with self.subTest(field=field, value=value):
                self.expect(400, {**base, field: value}, param=field)
        self.expect(400, {"model": ARGS.model, "messages": [], "max_tokens": 1},
                    param="messages", path="/v1/chat/completions")
        self.expect(400, {"model": ARGS.model, "messages": [{"role": "wizard", "content": "x"}]},
                    param="messages[0].role", path="/v1/chat/completions")
        self.expect(400, {"model": ARGS.model, "messages": user("x"), "logprobs": True,
                          "top_logprobs": 21},
                    param="top_logprobs", path="/v1/chat/completions")
        self.expect(400, {"model": ARGS.model, "prompt": [1, 999999999]}, param="prompt")

    def test_unknown_fields_are_ignored(self):
        status, _, answer = raw("POST", "/v1/completions", {
            "model": ARGS.model, "prompt": "x", "max_tokens": 1, "temperature": 0,
            "a_field_from_the_future": {"nested": [1, 2]}, "user": "someone"})
        self.assertEqual(status, 200, answer)

    def test_body_over_the_limit(self):
        big = {"model": ARGS.model, "prompt": "x" * (ARGS.max_body + 10), "max_tokens": 1}
        self.expect(413, big)

    def test_lengths_beyond_the_context(self):
        long_prompt = list(range(100, 100 + ARGS.context))
        self.expect(400, {"model": ARGS.model, "prompt": long_prompt, "max_tokens": 1},
                    code="context_length_exceeded")
        self.expect(400, {"model": ARGS.model, "prompt": "x", "max_tokens": ARGS.context},
                    param="max_tokens", code="context_length_exceeded")
        self.expect(400, {"model": ARGS.model, "messages": user("x"),
                          "max_completion_tokens": ARGS.context},
                    param="max_completion_tokens", path="/v1/chat/completions")

    def test_unknown_model_and_endpoint(self):
        self.expect(404, {"model": "no-such-model", "prompt": "x"}, param="model",
                    code="model_not_found")
        status, _, answer = raw("GET", "/v1/nothing-here")
        self.assertEqual(status, 404)
        self.assertIn("error", answer)

    def test_the_client_raises_the_right_errors(self):
        with self.assertRaises(openai.NotFoundError):
            client().chat.completions.create(model="gpt-x", messages=user("x"), max_tokens=1)
        with self.assertRaises(openai.BadRequestError):
            client().chat.completions.create(model=ARGS.model, messages=user("x"),
                                             temperature=-1)

    def test_a_full_queue_answers_429_with_retry_after(self):
        n = ARGS.max_outstanding + 2
        results = [None] * n

        def one(i):
            results[i] = raw("POST", "/v1/completions", {
                "model": ARGS.model, "prompt": f"Request {i}", "max_tokens": 3,
                "temperature": 0})

        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        statuses = [r[0] for r in results]
        self.assertIn(429, statuses)
        self.assertLessEqual(statuses.count(200), n)
        self.assertEqual(set(statuses), {200, 429}, statuses)
        for status, headers, body in results:
            if status == 429:
                self.assertGreaterEqual(int(headers["retry-after"]), 1)
                self.assertEqual(body["error"]["type"], "rate_limit_error")


class C_Disconnects(unittest.TestCase):
    def test_a_client_leaving_mid_stream_frees_its_sequence(self):
        # Another client's stream runs throughout and must be unaffected.
        want = ids_of(twice(lambda: greedy_completion("Steady", 6)))
        got = []
        steady = threading.Thread(target=lambda: got.extend(ids_of(greedy_completion("Steady", 6))))
        steady.start()
        stream = client().completions.create(model=ARGS.model, prompt="Leaving early",
                                             max_tokens=200, temperature=0, stream=True)
        for i, _ in enumerate(stream):
            if i == 2:
                break
        stream.close()
        steady.join()
        self.assertEqual(got, want)
        wait_for("the left sequence to be freed", lambda: metric("fak_requests_running") == 0)

    def test_a_client_leaving_mid_prefill(self):
        url = urllib.parse.urlparse(ARGS.base_url)
        body = json.dumps({"model": ARGS.model, "prompt": list(range(1000, 1200)),
                           "max_tokens": 50, "stream": True}).encode()
        s = socket.create_connection((url.hostname, url.port))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                  b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        time.sleep(0.05)
        s.close()
        wait_for("the abandoned request to be dropped",
                 lambda: metric("fak_requests_running") == 0 and
                 metric("fak_requests_waiting") == 0)
        self.assertEqual(len(ids_of(greedy_completion("Still serving", 2))), 2)


class D_Load(unittest.TestCase):
    def test_every_answer_under_load_equals_the_request_alone(self):
        clients, rounds, n = 4, 2, 4
        prompts = [[f"Agent {c} turn {r}: report." for r in range(rounds)] for c in range(clients)]
        alone = [[ids_of(twice(lambda: greedy_completion(p, n))) for p in row] for row in prompts]
        got = [[None] * rounds for _ in range(clients)]
        errors = []

        def agent(c):
            try:
                for r in range(rounds):
                    got[c][r] = ids_of(greedy_completion(prompts[c][r], n))
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(f"client {c}: {e!r}")

        threads = [threading.Thread(target=agent, args=(c,)) for c in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(got, alone)
        self.assertGreaterEqual(metric("fak_time_to_first_token_seconds_count"), clients * rounds)


class E_Drain(unittest.TestCase):
    def test_sigterm_drains_in_flight_requests_and_refuses_new_ones(self):
        stream = client().completions.create(model=ARGS.model, prompt="Drain me", max_tokens=8,
                                             temperature=0, stream=True,
                                             extra_body={"return_token_ids": True})
        chunks = [next(iter(stream))]
        os.kill(ARGS.pid, signal.SIGTERM)
        # New requests: refused (503 on a live connection, or the connection refused).
        deadline = time.time() + 30
        refused = False
        while time.time() < deadline and not refused:
            try:
                status, headers, _ = raw("GET", "/health")
                refused = status == 503
            except OSError:
                refused = True
            time.sleep(0.05)
        self.assertTrue(refused, "the server kept taking requests after SIGTERM")
        chunks += list(stream)
        self.assertEqual(chunks[-1].choices[0].finish_reason, "length")
        ids = [i for c in chunks for i in c.choices[0].model_extra.get("token_ids", [])]
        self.assertEqual(len(ids), 8)


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--base-url", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--context", type=int, required=True)
    p.add_argument("--max-body", type=int, required=True)
    p.add_argument("--max-outstanding", type=int, required=True)
    p.add_argument("--only", help="run only tests whose name contains this")
    ARGS, rest = p.parse_known_args()
    loader = unittest.TestLoader()
    suite = unittest.TestSuite()
    for case in [A_Endpoints, B_Errors, C_Disconnects, D_Load, E_Drain]:
        for test in loader.loadTestsFromTestCase(case):
            if ARGS.only is None or ARGS.only in test.id():
                suite.addTest(test)
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stderr).run(suite)
    sys.exit(0 if result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
