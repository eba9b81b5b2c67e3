#!/usr/bin/env python3
"""Load a `harness synth --hf-dir` export in mlx_lm (and its tokenizer in transformers) and
compare it with the GGUF written beside it, read by gguf-py (the oracles).

Usage: hf_export_check.py <hf_dir> <file.gguf> <texts.json>
Prints JSON on stdout: the config mlx_lm parsed, for every GGUF tensor the Hugging Face name
(mapped here with llama.cpp's converter table, independently of fak), both shapes and the
largest absolute difference of the values, the logits' finiteness, and per text the ids
transformers gives, its decoding, and the ids mlx_lm's tokenizer wrapper gives.
"""
import json
import re
import sys

import numpy as np

try:
    import gguf
    import mlx.core as mx
    import mlx_lm
    from mlx.utils import tree_flatten
    from transformers import AutoTokenizer
except ImportError as e:
    sys.exit(f"{e}: pip install gguf 'mlx[cpu]' mlx-lm")

# llama.cpp's converter table (gguf-py TensorNameMap), inverted, for the qwen3 tensors.
GLOBAL = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
BLOCK = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def hf_name(gguf_name):
    if gguf_name in GLOBAL:
        return GLOBAL[gguf_name]
    m = re.fullmatch(r"blk\.(\d+)\.(\w+)\.weight", gguf_name)
    if not m or m.group(2) not in BLOCK:
        return None
    return f"model.layers.{m.group(1)}.{BLOCK[m.group(2)]}.weight"


hf_dir, gguf_path, texts_path = sys.argv[1:4]
texts = json.load(open(texts_path, encoding="utf-8"))

model, wrapper = mlx_lm.load(hf_dir)
params = dict(tree_flatten(model.parameters()))
reader = gguf.GGUFReader(gguf_path)

tensors = []
for t in reader.tensors:
    name = hf_name(t.name)
    entry = {"gguf": t.name, "hf": name, "gguf_shape": [int(d) for d in t.shape]}
    if name in params:
        p = np.array(params[name].astype(mx.float32))
        g = np.asarray(t.data, dtype=np.float32).reshape(p.shape)
        entry["hf_shape"] = list(p.shape)
        entry["max_abs_diff"] = float(np.max(np.abs(p - g)))
    tensors.append(entry)

ids = [wrapper.encode(text) for text in texts]
logits = model(mx.array([ids[0]]))
mx.eval(logits)

hf_tok = AutoTokenizer.from_pretrained(hf_dir)
args = model.args
json.dump({
    "config": {
        "hidden_size": args.hidden_size,
        "num_hidden_layers": args.num_hidden_layers,
        "num_attention_heads": args.num_attention_heads,
        "num_key_value_heads": args.num_key_value_heads,
        "head_dim": args.head_dim,
        "intermediate_size": args.intermediate_size,
        "vocab_size": args.vocab_size,
        "rope_theta": args.rope_theta,
        "rms_norm_eps": args.rms_norm_eps,
        "tie_word_embeddings": args.tie_word_embeddings,
    },
    "n_params": len(params),
    "tensors": tensors,
    "logits_shape": list(logits.shape),
    "logits_finite": bool(np.isfinite(np.array(logits)).all()),
    "eos_token": hf_tok.eos_token,
    "pad_token": hf_tok.pad_token,
    "texts": [{
        "ids": hf_tok.encode(text, add_special_tokens=True),
        "decoded": hf_tok.decode(hf_tok.encode(text, add_special_tokens=True)),
        "mlx_ids": mlx_ids,
    } for text, mlx_ids in zip(texts, ids)],
    "chat": hf_tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True),
}, sys.stdout)
