#!/usr/bin/env python3
"""Trains one tiny model with Hugging Face transformers' own classes (Qwen3ForCausalLM, or
Qwen3_5ForCausalLM for the hybrid: Gated DeltaNet + gated attention), so the math trained is
the math the GGUF means, and writes the checkpoint `harness synth --weights` turns into GGUF.

Input: token ids of the training text as `harness tokenize --json` gives them (fak's tokenizer on
the cut vocabulary, which llama.cpp's agrees with), and the held-out text's ids for the report.
Output (in --out): model.safetensors (the Hugging Face tensor names synth's `trained` preset
expects, f32 values that are all exactly f16 where the GGUF stores f16: the f16 GGUF is then
the true unquantized weights, not a rounding of them), config.json, train.json (the run: steps,
losses, held-out loss and median top-2 margin, seconds), and probe.f32/probe.f32.json (torch's
logits on the first held-out ids, in `harness reference --logits-out`'s format, to compare
against fak's CPU reference on the GGUF).

Deterministic on one machine and thread count (seeded init and batches, 1 thread by default).
"""

import argparse
import json
import math
import os
import time

import numpy as np
import torch
from safetensors.torch import save_file

# The shapes of synth's `trained` presets (harness/synth/qwen3.rs, qwen35.rs): d = 256 so every
# projection's rows are whole Q4_K/Q6_K blocks, a tied 4096 × 256 embedding, 2 layers, and the
# f16 file under 4 MiB.
SHAPES = {
    "qwen3": dict(hidden_size=256, num_hidden_layers=2, intermediate_size=256,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=64),
    "qwen35": dict(hidden_size=256, num_hidden_layers=2, intermediate_size=256,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                   linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=64,
                   linear_value_head_dim=64, linear_conv_kernel_dim=4, full_attention_interval=2),
}


def model_for(arch, n_vocab):
    if arch == "qwen3":
        from transformers import Qwen3Config, Qwen3ForCausalLM
        cfg = Qwen3Config(vocab_size=n_vocab, tie_word_embeddings=True, rms_norm_eps=1e-6,
                          rope_theta=1e6, max_position_embeddings=40960, **SHAPES[arch])
        return Qwen3ForCausalLM(cfg)
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
    rope = {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
            "mrope_section": [3, 3, 2], "mrope_interleaved": True}
    cfg = Qwen3_5TextConfig(vocab_size=n_vocab, tie_word_embeddings=True, rms_norm_eps=1e-6,
                            rope_parameters=rope, attn_output_gate=True,
                            max_position_embeddings=262144, **SHAPES[arch])
    return Qwen3_5ForCausalLM(cfg)


def read_ids(path):
    with open(path) as f:
        return torch.tensor(json.load(f)["inputs"][0]["ids"], dtype=torch.long)


def round_to_f16(model):
    """Rounds every matrix the GGUF stores as f16 (2-D weights; conv1d is 3-D and stays f32,
    like the norms and per-head scalars) to an f16 value, in place."""
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.copy_(p.to(torch.float16).to(torch.float32))


def evaluate(model, ids, seq):
    """Mean loss and median top-2 logit margin over `ids` in windows of `seq`."""
    model.eval()
    losses, margins = [], []
    with torch.no_grad():
        for start in range(0, len(ids) - 1, seq):
            window = ids[start:start + seq + 1]
            if len(window) < 2:
                break
            logits = model(window[None, :-1]).logits[0]
            losses.append(torch.nn.functional.cross_entropy(logits, window[1:], reduction="sum"))
            top2 = logits.topk(2, dim=-1).values
            margins.append(top2[:, 0] - top2[:, 1])
    model.train()
    n = sum(len(m) for m in margins)
    return float(sum(losses) / n), float(torch.cat(margins).median())


def checkpoint_names(arch, state):
    """The Hugging Face names synth's plan gives these tensors: Qwen3.5's text model lives
    under `model.language_model` in a published (composite) checkpoint; a tied head has no
    tensor of its own."""
    out = {}
    for name, value in state.items():
        if name == "lm_head.weight":
            continue
        if arch == "qwen35":
            name = name.replace("model.", "model.language_model.", 1)
        out[name] = value.contiguous()
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", choices=SHAPES, required=True)
    p.add_argument("--train-ids", required=True)
    p.add_argument("--heldout-ids", required=True)
    p.add_argument("--n-vocab", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=1200)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--probe", type=int, default=64, help="held-out ids in the logits probe")
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    train, heldout = read_ids(args.train_ids), read_ids(args.heldout_ids)
    model = model_for(args.arch, args.n_vocab)
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    warmup = max(1, args.steps // 20)

    def lr_at(step):
        if step < warmup:
            return args.lr * (step + 1) / warmup
        t = (step - warmup) / max(1, args.steps - warmup)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))

    gen = torch.Generator().manual_seed(args.seed)
    log, started = [], time.time()
    for step in range(args.steps):
        starts = torch.randint(0, len(train) - args.seq - 1, (args.batch,), generator=gen)
        batch = torch.stack([train[s:s + args.seq + 1] for s in starts.tolist()])
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        logits = model(batch[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, args.n_vocab),
                                                 batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == args.steps - 1:
            entry = {"step": step, "loss": round(loss.item(), 4),
                     "seconds": round(time.time() - started, 1)}
            log.append(entry)
            print(json.dumps(entry), flush=True)

    round_to_f16(model)
    heldout_loss, heldout_margin = evaluate(model, heldout, args.seq)
    print(f"held-out: loss {heldout_loss:.3f}, median top-2 margin {heldout_margin:.3f}")

    os.makedirs(args.out, exist_ok=True)
    save_file(checkpoint_names(args.arch, model.state_dict()),
              os.path.join(args.out, "model.safetensors"), metadata={"format": "pt"})
    model.config.to_json_file(os.path.join(args.out, "config.json"))
    probe = heldout[:args.probe]
    with torch.no_grad():
        model.eval()
        logits = model(probe[None]).logits[0].to(torch.float32).numpy()
    logits.astype("<f4").tofile(os.path.join(args.out, "probe.f32"))
    with open(os.path.join(args.out, "probe.f32.json"), "w") as f:
        json.dump({"n_vocab": args.n_vocab, "rows": len(probe),
                   "token_ids": probe.tolist()}, f)
    with open(os.path.join(args.out, "train.json"), "w") as f:
        json.dump({"arch": args.arch, "args": vars(args), "log": log,
                   "train_tokens": len(train), "heldout_tokens": len(heldout),
                   "heldout_loss": heldout_loss, "heldout_median_top2_margin": heldout_margin,
                   "seconds": round(time.time() - started, 1),
                   "cpu_seconds": round(time.process_time(), 1),
                   "torch": torch.__version__, "numpy": np.__version__}, f, indent=1)


if __name__ == "__main__":
    main()
