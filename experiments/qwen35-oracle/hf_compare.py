#!/usr/bin/env python3
"""Hugging Face `transformers` as the oracle for fak's Qwen3.5 logits.

Usage: hf_compare.py --hf-dir DIR --logits FILE.f32 [--min-cosine 0.9999] [--device cuda]
                     [--report report.json]

FILE.f32 is what `harness run --logits-out FILE.f32` (the GPU engine) or `harness reference
--logits-out FILE.f32` (fak's CPU reference) wrote on the GGUF of a `harness synth --arch qwen35
--hf-dir DIR` model: raw little-endian f32 [rows, n_vocab] and the sidecar FILE.f32.json
({"n_vocab", "rows", "token_ids"}; row i holds the logits after token_ids[i]).

The script loads DIR with transformers (AutoModelForCausalLM: Qwen3_5ForCausalLM from the
checkpoint's text_config, dropping the `language_model` prefix), in float32 with TF32 off,
checks that every parameter is the checkpoint's tensor (no silently re-initialised weight),
runs token_ids teacher-forced in one forward pass and compares each position's logits with
fak's: cosine, argmax agreement, largest absolute difference. It prints one JSON report and
exits 1 if any position's cosine is below --min-cosine (or anything is NaN).
"""
import argparse
import json
import sys

import numpy as np

try:
    import torch
    import transformers
    from safetensors.numpy import load_file
    from transformers import AutoModelForCausalLM
except ImportError as e:
    sys.exit(f"{e}: this needs torch, transformers (with qwen3_5) and safetensors")


def load_model(hf_dir, device):
    """The checkpoint in transformers: the Auto path a user takes, or, where this transformers
    does not map a composite qwen3_5 checkpoint to Qwen3_5ForCausalLM, the class built from
    text_config with the `language_model` prefix dropped by hand. Returns the model, how it was
    loaded and the number of checkpoint tensors."""
    checkpoint = load_file(f"{hf_dir}/model.safetensors")
    try:
        model = AutoModelForCausalLM.from_pretrained(
            hf_dir, dtype=torch.float32, attn_implementation="eager")
        loader = f"AutoModelForCausalLM -> {type(model).__name__}"
    except Exception as e:  # noqa: BLE001 - reported, then the explicit path is taken
        from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
        text = dict(json.load(open(f"{hf_dir}/config.json")).get("text_config"))
        text.pop("model_type", None)
        model = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**text)).to(torch.float32)
        state = {k.replace("model.language_model.", "model.", 1): torch.from_numpy(v)
                 for k, v in checkpoint.items()}
        model.load_state_dict(state, strict=True)
        model.config._attn_implementation = "eager"
        loader = f"Qwen3_5ForCausalLM + load_state_dict (Auto path failed: {e!r:.200})"
    model.to(device).eval()
    # Every parameter must hold the checkpoint's values: a name transformers did not map would
    # be initialised at random and still run.
    params = dict(model.named_parameters())
    differing = []
    for name, value in checkpoint.items():
        p = params.pop(name.replace("model.language_model.", "model.", 1), None)
        if p is None or not np.array_equal(p.detach().cpu().numpy(), value):
            differing.append(name)
    if differing or params:
        sys.exit(f"transformers did not load the checkpoint as is ({loader}): differing "
                 f"{differing[:5]}, not in the checkpoint {list(params)[:5]}")
    return model, loader, len(checkpoint)


def cosine(a, b):
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hf-dir", required=True)
    ap.add_argument("--logits", required=True, help="fak's logits file (with its .json sidecar)")
    ap.add_argument("--min-cosine", type=float, default=0.9999)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--report", help="also write the JSON report here")
    args = ap.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    meta = json.load(open(args.logits + ".json"))
    ids, n_vocab = meta["token_ids"], meta["n_vocab"]
    fak = np.fromfile(args.logits, dtype="<f4").reshape(meta["rows"], n_vocab)

    model, loader, n_tensors = load_model(args.hf_dir, args.device)
    with torch.no_grad():
        hf = model(torch.tensor([ids], device=args.device)).logits[0].float().cpu().numpy()
    assert hf.shape == fak.shape, f"transformers {hf.shape} vs fak {fak.shape}"

    cosines = [cosine(f, h) for f, h in zip(fak, hf)]
    argmax_same = [int(f.argmax()) == int(h.argmax()) for f, h in zip(fak, hf)]
    finite = bool(np.isfinite(fak).all() and np.isfinite(hf).all())
    text = model.config
    report = {
        "hf_dir": args.hf_dir,
        "logits": args.logits,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
        "loader": loader,
        "checkpoint_tensors": n_tensors,
        "shape": {k: getattr(text, k) for k in (
            "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "head_dim", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
            "linear_value_head_dim", "vocab_size")},
        "positions": len(ids),
        "min_cosine": min(cosines),
        "cosines": cosines,
        "argmax_agree": sum(argmax_same),
        "max_abs_diff": float(np.abs(fak - hf).max()),
        "max_abs_logit": float(np.abs(hf).max()),
        "finite": finite,
        "pass": finite and min(cosines) >= args.min_cosine,
        "min_cosine_required": args.min_cosine,
    }
    text_out = json.dumps(report, indent=1)
    print(text_out)
    if args.report:
        with open(args.report, "w") as f:
            f.write(text_out + "\n")
    sys.exit(0 if report["pass"] else 1)


main()
