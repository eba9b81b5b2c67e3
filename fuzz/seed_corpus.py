#!/usr/bin/env python3
"""Writes the fuzz seed corpus with gguf-py's own writer (an independent producer of GGUF bytes).

Seeds: real tokenizer metadata from tests/fixtures/vocab (arrays cut to their first entries so
seeds stay small), every value type incl. nested arrays, and tensors of every block geometry the
engine reads. Usage: python3 fuzz/seed_corpus.py <out-dir>
"""
import sys
from pathlib import Path

import numpy as np
import gguf

Q = gguf.GGMLQuantizationType
root = Path(__file__).resolve().parent.parent
out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)


def real_metadata(writer, vocab_file, keep=40):
    reader = gguf.GGUFReader(vocab_file)
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        value = field.contents()
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            writer.add_array(field.name, value[:keep])
        elif vtype == gguf.GGUFValueType.STRING:
            writer.add_string(field.name, value)
        else:
            writer.add_key_value(field.name, value, vtype)


def tensors(writer, types):
    rng = np.random.default_rng(7)
    floats = {Q.F32: np.float32, Q.F16: np.float16}
    for i, qtype in enumerate(types):
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        if qtype in floats:
            writer.add_tensor(f"blk.{i}.w", rng.standard_normal((2, 16)).astype(floats[qtype]))
            continue
        n = 256 if block > 1 else 16
        raw = rng.integers(0, 256, size=(2, n // block * size), dtype=np.uint8)
        writer.add_tensor(f"blk.{i}.w", raw, raw_dtype=qtype)


def write(name, arch, fill):
    path = out / name
    writer = gguf.GGUFWriter(str(path), arch)
    fill(writer)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


for vocab in ["ggml-vocab-qwen2.gguf", "ggml-vocab-llama-bpe.gguf"]:
    write(f"real-{vocab}", "qwen2",
          lambda w, v=vocab: real_metadata(w, str(root / "tests/fixtures/vocab" / v)))
write("tensors.gguf", "qwen3", lambda w: tensors(w, [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0,
                                                     Q.Q5_0, Q.Q5_1, Q.Q4_K, Q.Q5_K, Q.Q6_K]))


def every_type(w):
    w.add_uint8("t.u8", 1); w.add_int8("t.i8", -1); w.add_uint16("t.u16", 2); w.add_int16("t.i16", -2)
    w.add_uint32("t.u32", 3); w.add_int32("t.i32", -3); w.add_float32("t.f32", 0.5); w.add_bool("t.b", True)
    w.add_uint64("t.u64", 4); w.add_int64("t.i64", -4); w.add_float64("t.f64", 0.25)
    w.add_string("t.s", "héllo"); w.add_array("t.a", [1, 2, 3]); w.add_array("t.sa", ["x", "y"])
    w.add_array("t.nested", [[1, 2], [3]])
    tensors(w, [Q.Q4_K])


write("every-type.gguf", "llama", every_type)
