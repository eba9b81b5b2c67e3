#!/usr/bin/env python3
"""Dump a GGUF file's header, metadata and tensor table as JSON using gguf-py (the oracle).

Usage: gguf_dump.py <file.gguf>   (prints JSON on stdout)
Nested arrays are flattened, as gguf-py's ReaderField.contents() does.
"""
import json
import sys

try:
    import gguf
except ImportError:
    sys.exit("gguf-py is missing: pip install gguf")

reader = gguf.GGUFReader(sys.argv[1])
fields = []
version = None
for field in reader.fields.values():
    if field.name == "GGUF.version":
        version = int(field.parts[-1][0])
    if field.name.startswith("GGUF."):
        continue
    fields.append({
        "name": field.name,
        "types": [int(t) for t in field.types],
        "value": field.contents(),
    })
tensors = [{
    "name": t.name,
    "shape": [int(d) for d in t.shape],
    "type": int(t.tensor_type),
    "n_bytes": int(t.n_bytes),
    "data_offset": int(t.data_offset),
} for t in reader.tensors]
json.dump({
    "version": version,
    "alignment": int(reader.alignment),
    "data_offset": int(reader.data_offset),
    "fields": fields,
    "tensors": tensors,
}, sys.stdout)
