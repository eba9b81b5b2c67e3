"""What the scripts that drive the llama.cpp peer's llama-server share: a server on a free
loopback port, up until its /health says ok, stopped on the way out; and a JSON request to it.

    with llama_server.running(server_bin, model, ["-fa", "auto"]) as base:
        out = llama_server.request(base + "/completion", {...})
"""
import contextlib
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


@contextlib.contextmanager
def running(server_bin, model, extra_args=(), ready_s=300):
    """llama-server on `model` (512-token context, 2 threads, one slot, `extra_args`), yielding
    its base URL once ready; exits the script with the server's stderr if it dies first."""
    port = free_port()
    server = subprocess.Popen(
        [server_bin, "-m", model, "--host", "127.0.0.1", "--port", str(port), "-c", "512",
         "-t", "2", "-np", "1", *extra_args, "--log-disable"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + ready_s
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
                sys.exit(f"llama-server did not become ready in {ready_s} s")
            time.sleep(0.2)
        yield base
    finally:
        server.terminate()
        server.wait(timeout=30)
