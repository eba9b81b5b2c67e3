"""The MLX arm's engine process for `harness threeway` (embedded in the harness, written to a
temporary file and run with the chosen Python).

Usage: python mlx_driver.py <mlx_model_dir> [--prompt-cache N]

Loads the model with mlx_lm and answers JSON lines on stdin/stdout (the protocol of
harness/arms/jsonl.rs): `generate` runs mlx-lm's own generation loop (`generate_step`, greedy,
which never stops at end-of-sequence: EOS handling lives in `stream_generate`) and timestamps each
token as the loop yields it; `logits` runs one teacher-forced forward pass and writes every
position's logits as little-endian f32. Timestamps are CLOCK_MONOTONIC, the clock the harness
reads.

`submit` (the multi-agent scenario) is `generate` with an id, answered in order: the driver is
one loop, so requests sent together wait their turn. With `--prompt-cache N` it keeps mlx_lm's
own `LRUPromptCache(max_size=N)` the way `mlx_lm.server` does (fetch the nearest cached prefix,
trimmed where the cache can be; prefill the rest; insert prompt + reply afterwards), except that
an exact hit still recomputes the prompt's last token, so every first token comes from logits
computed in its own request.
"""
import json
import os
import platform
import sys
import time


def now():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def load(model_dir):
    try:
        import mlx.core as mx
        import mlx_lm
        from mlx_lm.generate import generate_step
        from mlx_lm.models import cache as mlx_cache
        import numpy as np
    except ImportError as e:
        say({"ready": False, "error": f"{e} (pip install 'mlx[cpu]' mlx-lm)"})
        sys.exit(2)
    try:
        model, _ = mlx_lm.load(model_dir)
    except Exception as e:  # mlx_lm raises ValueError for an unknown model_type, OSError, ...
        say({"ready": False, "error": f"mlx_lm.load({model_dir}): {type(e).__name__}: {e}"})
        sys.exit(3)
    facts = {
        "engine": "mlx",
        "mlx": getattr(mx, "__version__", "unknown"),
        "mlx_lm": getattr(mlx_lm, "__version__", "unknown"),
        "device": str(mx.default_device()),
        "device_name": device_name(mx),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "precision": precision(mx, model),
    }
    return mx, np, generate_step, mlx_cache, model, facts


def device_name(mx):
    """The default device's name where this MLX says it (mx.device_info, MLX 0.29 and later)."""
    try:
        return mx.device_info().get("device_name")
    except Exception:  # an MLX without device_info, or a device it cannot describe
        return None


def precision(mx, model):
    """The precision MLX computes in here, stated and measured. Activations take the dtype of the
    model's float parameters. MLX runs float32 matmuls as TF32 (inputs rounded to 10 mantissa
    bits) on hardware that has it (CUDA tensor cores, Apple M5) unless MLX_ENABLE_TF32=0; its
    default is 1. `a @ eye(n)` is exact in float32, so any error it shows is that rounding."""
    from mlx.utils import tree_flatten

    floats = sorted({str(v.dtype) for _, v in tree_flatten(model.parameters())
                     if mx.issubdtype(v.dtype, mx.floating)})
    a = mx.random.normal((256, 256), key=mx.random.key(0))
    error = (mx.max(mx.abs(a @ mx.eye(256) - a)) / mx.max(mx.abs(a))).item()
    return {
        "float_parameters": floats,
        "MLX_ENABLE_TF32": os.environ.get("MLX_ENABLE_TF32", "unset (MLX's default: 1)"),
        "f32_matmul_probe_rel_error": error,
        "f32_matmul": "full float32" if error == 0.0 else
                      f"reduced (TF32-class): a @ eye(256) off by {error:.1e} of max|a|",
    }


def start_cache(mlx_cache, model, lru, prompt):
    """The KV cache to resume `prompt` from and the ids still to prefill (never none)."""
    cache, rest = (None, prompt) if lru is None else lru.fetch_nearest_cache("model", prompt)
    if cache is not None and not rest:
        if mlx_cache.can_trim_prompt_cache(cache):
            mlx_cache.trim_prompt_cache(cache, 1)
            rest = prompt[-1:]
        else:
            cache = None
    if cache is None:
        cache, rest = mlx_cache.make_prompt_cache(model), prompt
    return cache, rest


def main():
    mx, np, generate_step, mlx_cache, model, facts = load(sys.argv[1])
    lru = None
    if "--prompt-cache" in sys.argv:
        size = int(sys.argv[sys.argv.index("--prompt-cache") + 1])
        lru = mlx_cache.LRUPromptCache(max_size=size)
    facts["prompt_cache"] = None if lru is None else f"LRUPromptCache(max_size={lru.max_size})"
    say({"ready": True, "facts": facts})
    for line in sys.stdin:
        recv_ns = now()
        req = None
        try:
            req = json.loads(line)
            if req["op"] == "generate":
                prompt = mx.array(req["prompt"], dtype=mx.uint32)
                n_out = int(req["n_out"])
                tokens, token_ns = [], []
                start_ns = now()
                for token, _ in generate_step(prompt, model, max_tokens=n_out):
                    token_ns.append(now())
                    tokens.append(int(token))
                reply_ns = now()
                say({"ok": True, "tokens": tokens, "recv_ns": recv_ns, "start_ns": start_ns,
                     "token_ns": token_ns, "reply_ns": reply_ns})
            elif req["op"] == "submit":
                prompt = [int(t) for t in req["prompt"]]
                n_out = int(req["n_out"])
                tokens, token_ns = [], []
                start_ns = now()
                cache, rest = start_cache(mlx_cache, model, lru, prompt)
                ids = mx.array(rest, dtype=mx.uint32)
                for token, _ in generate_step(ids, model, max_tokens=n_out, prompt_cache=cache):
                    token_ns.append(now())
                    tokens.append(int(token))
                reply_ns = now()
                if lru is not None:
                    lru.insert_cache("model", prompt + tokens, cache)
                say({"ok": True, "id": req["id"], "tokens": tokens, "recv_ns": recv_ns,
                     "start_ns": start_ns, "token_ns": token_ns, "reply_ns": reply_ns,
                     "prompt_tokens": len(prompt), "computed_tokens": len(rest),
                     "cached_tokens": len(prompt) - len(rest),
                     "prompt_cache_entries": 0 if lru is None else len(lru)})
            elif req["op"] == "logits":
                ids = mx.array([req["ids"]], dtype=mx.uint32)
                logits = model(ids)[0].astype(mx.float32)
                mx.eval(logits)
                values = np.array(logits, dtype="<f4")
                values.tofile(req["out"])
                say({"ok": True, "rows": int(values.shape[0]), "n_vocab": int(values.shape[1])})
            else:
                say({"ok": False, "error": f"unknown op {req['op']!r}"})
        except Exception as e:
            say({"ok": False, "id": req.get("id") if isinstance(req, dict) else None,
                 "error": f"{type(e).__name__}: {e}"})


main()
