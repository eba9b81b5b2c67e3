#!/usr/bin/env python3
"""Cuts the Qwen vocabulary (llama.cpp's ggml-vocab-qwen2.gguf: 151,643 byte-level BPE tokens,
151,387 merges, and Qwen's added tokens) down to a vocabulary small enough for a tiny model's
embedding, keeping it a working byte-level BPE:

- the 256 byte tokens are all kept, so every text still encodes;
- the kept tokens are closed under their merges: a kept token that is not a byte keeps the
  merge that makes it (the lowest-ranked merge whose two parts join to it) and, recursively,
  both parts; the kept merges are every merge of the original whose two parts and result are
  all kept, in the original order (so ranks keep their order);
- Qwen3's 26 added tokens (<|endoftext|>, <|im_start|>, <|im_end|>, <think>, </think>,
  <tool_call>, …) follow the BPE tokens.

Which tokens: first those the training text uses most (its encoding with the full vocabulary,
by count, ties by id), each with its merge closure, then the original's merges in rank order
(the most common pieces of Qwen's own training data) until the budget is full. Kept tokens
keep their original order (bytes first). Deterministic: same inputs, same bytes out.

    cut_vocab.py --vocab ggml-vocab-qwen2.gguf --text train.txt --n-vocab 4096 --out cut.gguf
"""

import argparse
import collections

import gguf
import regex

# The Qwen2 pre-tokenizer split (its tokenizer.json; llama.cpp's `qwen2` pre-tokenizer).
SPLIT = regex.compile(
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+")
NORMAL, CONTROL, USER_DEFINED = 1, 3, 4
# Qwen3's added tokens in id order, with Hugging Face's `special` flag (Qwen/Qwen3-0.6B
# tokenizer_config.json); the fixture predates Qwen3 and carries only the first three. The GGUF
# type follows llama.cpp's converter: CONTROL when special or shaped <|…|>, else USER_DEFINED
# (harness/synth/vocab.rs writes the same table).
ADDED = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
    ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
    ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False),
    ("</tool_call>", False), ("<|fim_prefix|>", False), ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False), ("<|fim_pad|>", False), ("<|repo_name|>", False),
    ("<|file_sep|>", False), ("<tool_response>", False), ("</tool_response>", False),
    ("<think>", False), ("</think>", False),
]


def byte_to_unicode():
    """GPT-2's map from bytes to printable characters (the token text of byte-level BPE)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


class Bpe:
    def __init__(self, merges):
        self.ranks = {tuple(m.split(" ")): i for i, m in enumerate(merges)}
        self.cache = {}

    def word(self, text):
        """The BPE pieces of one pre-tokenized word (already in byte-to-unicode form)."""
        if text in self.cache:
            return self.cache[text]
        parts = list(text)
        while len(parts) > 1:
            pairs = [(self.ranks.get((a, b), 1 << 62), i)
                     for i, (a, b) in enumerate(zip(parts, parts[1:]))]
            rank, i = min(pairs)
            if rank == 1 << 62:
                break
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        self.cache[text] = parts
        return parts


def read_vocab(path):
    r = gguf.GGUFReader(path)
    fields = {k: f for k, f in r.fields.items()}
    tokens = fields["tokenizer.ggml.tokens"].contents()
    types = fields["tokenizer.ggml.token_type"].contents()
    merges = fields["tokenizer.ggml.merges"].contents()
    return r, fields, tokens, types, merges


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vocab", required=True, help="ggml-vocab-qwen2.gguf")
    p.add_argument("--text", required=True, nargs="+", help="the training text")
    p.add_argument("--n-vocab", type=int, required=True, help="tokens in all, added included")
    p.add_argument("--out", required=True)
    args = p.parse_args()

    reader, fields, tokens, types, merges = read_vocab(args.vocab)
    n_bpe = types.index(CONTROL)  # <|endoftext|>: the first added token
    assert all(t == NORMAL for t in types[:n_bpe])
    assert tokens[n_bpe:n_bpe + 3] == [t for t, _ in ADDED[:3]]
    added = [(t, CONTROL if special or (t.startswith("<|") and t.endswith("|>")) else USER_DEFINED)
             for t, special in ADDED]
    bytes_map = byte_to_unicode()
    byte_tokens = set(bytes_map.values())
    assert set(tokens[:256]) == byte_tokens, "the first 256 tokens are the byte tokens"
    token_id = {t: i for i, t in enumerate(tokens[:n_bpe])}

    # The merge that makes each token: the lowest-ranked one joining to it.
    maker = {}
    for m in merges:
        a, b = m.split(" ")
        maker.setdefault(a + b, (a, b))

    budget = args.n_vocab - len(added)
    kept = set(byte_tokens)

    def closure(token, into):
        stack = [token]
        while stack:
            t = stack.pop()
            if t in kept or t in into:
                continue
            into.add(t)
            stack.extend(maker[t])
        return into

    def take(token):
        more = closure(token, set())
        if len(kept) + len(more) <= budget:
            kept.update(more)

    bpe = Bpe(merges)
    counts = collections.Counter()
    for path in args.text:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for piece in SPLIT.findall(text):
            word = "".join(bytes_map[b] for b in piece.encode("utf-8"))
            counts.update(bpe.word(word))
    used = sorted(counts, key=lambda t: (-counts[t], token_id[t]))
    for t in used:
        take(t)
    n_from_text = len(kept)
    for m in merges:
        if len(kept) >= budget:
            break
        a, b = m.split(" ")
        take(a + b)
    assert len(kept) == budget, f"{len(kept)} tokens kept, budget {budget}"

    out_tokens = sorted(kept, key=token_id.__getitem__)
    out_merges = [m for m in merges
                  if all(x in kept for x in (*m.split(" "), m.replace(" ", "")))]
    for t in out_tokens:
        assert t in byte_tokens or maker[t][0] + " " + maker[t][1] in out_merges
    first_added = len(out_tokens)
    out_types = [NORMAL] * first_added + [ty for _, ty in added]
    out_tokens += [t for t, _ in added]
    added_id = {t: first_added + i for i, (t, _) in enumerate(added)}

    w = gguf.GGUFWriter(args.out, arch=reader.fields["general.architecture"].contents())
    skip = {"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count", "general.architecture"}
    for key, field in fields.items():
        if key in skip or key.startswith("tokenizer."):
            continue
        value = field.contents()
        if key == "general.name":
            value = f"{value} cut to {args.n_vocab} tokens (fak experiments/trained-tiny)"
        w.add_key_value(key, value, field.types[0] if len(field.types) == 1 else field.types[0],
                        sub_type=field.types[-1] if len(field.types) > 1 else None)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(fields["tokenizer.ggml.pre"].contents())
    w.add_token_list(out_tokens)
    w.add_token_types(out_types)
    w.add_token_merges(out_merges)
    w.add_eos_token_id(added_id["<|im_end|>"])
    w.add_pad_token_id(added_id["<|endoftext|>"])
    w.add_bos_token_id(added_id["<|endoftext|>"])
    w.add_add_bos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{args.out}: {len(out_tokens)} tokens ({n_from_text} from the text's encoding, "
          f"{first_added} BPE, {len(added)} added), {len(out_merges)} merges")


if __name__ == "__main__":
    main()
