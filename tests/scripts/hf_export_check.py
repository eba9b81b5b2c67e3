#!/usr/bin/env python3
"""Load a `harness synth --hf-dir` export in mlx_lm (and its tokenizer in transformers) and
compare it with the GGUF written beside it, read by gguf-py (the oracles).

Usage: hf_export_check.py <hf_dir> <file.gguf> <texts.json>
Prints JSON on stdout: the text-model config mlx_lm parsed, the number of parameters mlx_lm
loaded, for every GGUF tensor the Hugging Face name (llama.cpp's converter table, inverted here
independently of fak), both shapes and the largest absolute difference between the GGUF values
and what llama.cpp's converter makes of the checkpoint values (for qwen35: +1 on zero-centred
norm gains, A_log -> -exp(A_log), conv1d squeezed, value heads grouped -> tiled; reimplemented
here with numpy from conversion/qwen.py), the logits' finiteness, and per text the ids
transformers gives, its decoding, and the ids mlx_lm's tokenizer wrapper gives.
"""
import dataclasses
import json
import re
import sys

import numpy as np

try:
    import gguf
    import mlx.core as mx
    import mlx_lm
    from mlx.utils import tree_flatten
    from safetensors.numpy import load_file
    from transformers import AutoTokenizer
except ImportError as e:
    sys.exit(f"{e}: pip install gguf 'mlx[cpu]' mlx-lm safetensors transformers")

# llama.cpp's converter table (gguf-py TensorNameMap), inverted: GGUF name -> checkpoint name.
QWEN3 = {
    "global": {
        "token_embd.weight": "model.embed_tokens.weight",
        "output_norm.weight": "model.norm.weight",
        "output.weight": "lm_head.weight",
    },
    "block_prefix": "model.layers",
    "block": {
        "attn_norm.weight": "input_layernorm.weight",
        "attn_q.weight": "self_attn.q_proj.weight",
        "attn_k.weight": "self_attn.k_proj.weight",
        "attn_v.weight": "self_attn.v_proj.weight",
        "attn_output.weight": "self_attn.o_proj.weight",
        "attn_q_norm.weight": "self_attn.q_norm.weight",
        "attn_k_norm.weight": "self_attn.k_norm.weight",
        "ffn_norm.weight": "post_attention_layernorm.weight",
        "ffn_gate.weight": "mlp.gate_proj.weight",
        "ffn_up.weight": "mlp.up_proj.weight",
        "ffn_down.weight": "mlp.down_proj.weight",
    },
}
QWEN35 = {
    "global": {
        "token_embd.weight": "model.language_model.embed_tokens.weight",
        "output_norm.weight": "model.language_model.norm.weight",
        "output.weight": "lm_head.weight",
    },
    "block_prefix": "model.language_model.layers",
    "block": {
        "attn_norm.weight": "input_layernorm.weight",
        "post_attention_norm.weight": "post_attention_layernorm.weight",
        "attn_q.weight": "self_attn.q_proj.weight",
        "attn_k.weight": "self_attn.k_proj.weight",
        "attn_v.weight": "self_attn.v_proj.weight",
        "attn_output.weight": "self_attn.o_proj.weight",
        "attn_q_norm.weight": "self_attn.q_norm.weight",
        "attn_k_norm.weight": "self_attn.k_norm.weight",
        "attn_qkv.weight": "linear_attn.in_proj_qkv.weight",
        "attn_gate.weight": "linear_attn.in_proj_z.weight",
        "ssm_beta.weight": "linear_attn.in_proj_b.weight",
        "ssm_alpha.weight": "linear_attn.in_proj_a.weight",
        "ssm_conv1d.weight": "linear_attn.conv1d.weight",
        "ssm_dt.bias": "linear_attn.dt_bias",
        "ssm_a": "linear_attn.A_log",
        "ssm_norm.weight": "linear_attn.norm.weight",
        "ssm_out.weight": "linear_attn.out_proj.weight",
        "ffn_gate.weight": "mlp.gate_proj.weight",
        "ffn_up.weight": "mlp.up_proj.weight",
        "ffn_down.weight": "mlp.down_proj.weight",
    },
}
TABLES = {"qwen3": QWEN3, "qwen35": QWEN35}


def hf_name(table, gguf_name):
    if gguf_name in table["global"]:
        return table["global"][gguf_name]
    m = re.fullmatch(r"blk\.(\d+)\.(.+)", gguf_name)
    if not m or m.group(2) not in table["block"]:
        return None
    return f"{table['block_prefix']}.{m.group(1)}.{table['block'][m.group(2)]}"


def tiled(x, axis, n_k, per_k, head_len):
    """conversion/qwen.py _reorder_v_heads: view the axis as [n_k, per_k, head_len] and swap
    the first two factors (grouped -> tiled)."""
    shape = list(x.shape)
    x = x.reshape(shape[:axis] + [n_k, per_k, head_len] + shape[axis + 1:])
    return np.swapaxes(x, axis, axis + 1).reshape(shape)


def qwen35_convert(name, x, text):
    """What llama.cpp's Qwen3_5TextModel.modify_tensors makes of checkpoint tensor `name`."""
    if name.endswith(".A_log"):
        x = -np.exp(x)
    elif "conv1d" in name:
        x = x.squeeze()
    elif name.endswith("norm.weight") and not name.endswith("linear_attn.norm.weight"):
        x = x + np.float32(1)
    n_k, n_v = text["linear_num_key_heads"], text["linear_num_value_heads"]
    if n_k == n_v or "linear_attn." not in name:
        return x
    per_k, dk, dv = n_v // n_k, text["linear_key_head_dim"], text["linear_value_head_dim"]
    if ".in_proj_qkv." in name or ".conv1d" in name:
        qk = 2 * n_k * dk
        return np.concatenate([x[:qk], tiled(x[qk:], 0, n_k, per_k, dv)], axis=0)
    if ".in_proj_z." in name:
        return tiled(x, 0, n_k, per_k, dv)
    if ".in_proj_a." in name or ".in_proj_b." in name or ".A_log" in name or ".dt_bias" in name:
        return tiled(x, 0, n_k, per_k, 1)
    if ".out_proj." in name:
        return tiled(x, 1, n_k, per_k, dv)
    return x


def jsonable(args):
    return {k: v for k, v in dataclasses.asdict(args).items()
            if isinstance(v, (int, float, str, bool, list, dict, type(None)))}


hf_dir, gguf_path, texts_path = sys.argv[1:4]
texts = json.load(open(texts_path, encoding="utf-8"))
config = json.load(open(f"{hf_dir}/config.json"))
text_config = config.get("text_config", config)

model, wrapper = mlx_lm.load(hf_dir)
params = dict(tree_flatten(model.parameters()))
checkpoint = load_file(f"{hf_dir}/model.safetensors")
reader = gguf.GGUFReader(gguf_path)
arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
table = TABLES[arch]

tensors = []
for t in reader.tensors:
    name = hf_name(table, t.name)
    entry = {"gguf": t.name, "hf": name, "gguf_shape": [int(d) for d in t.shape]}
    if name in checkpoint:
        hf = checkpoint[name]
        converted = hf if arch == "qwen3" else qwen35_convert(name, hf, text_config)
        g = np.asarray(t.data, dtype=np.float32).reshape(converted.shape)
        entry["hf_shape"] = list(hf.shape)
        entry["max_abs_diff"] = float(np.max(np.abs(converted - g)))
        entry["max_abs"] = float(np.max(np.abs(g)))
    tensors.append(entry)

ids = [wrapper.encode(text) for text in texts]
logits = model(mx.array([ids[0]]))
mx.eval(logits)

text_model = getattr(model, "language_model", model)
hf_tok = AutoTokenizer.from_pretrained(hf_dir)
json.dump({
    "config": jsonable(text_model.args),
    "n_params": len(params),
    "n_checkpoint": len(checkpoint),
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
