//! Files and text from outside: GGUF, quant codecs, tokenizers, synth's files, hostile input.
//!
//! One test binary for the files below (they stay where they are): each binary links the engine,
//! wgpu and naga, so fewer of them keep the target small. CI runs one file's module at a time
//! (`ci/test.sh` `run_tests`); `tests/common/groups.rs` checks that every test file is in a group.

/// The GGUF reader and writer: agreement with gguf-py, split models, typed metadata errors, and
/// hostile input (every truncation, forged counts, lengths, shapes and offsets).
#[path = "../gguf.rs"]
mod gguf;

/// CPU quant codecs against gguf-py (bit-exact) and llama-quantize (K-quant error).
#[path = "../quant.rs"]
mod quant;

/// The tokenizer against llama.cpp (test vectors, llama-tokenize) and chat templates against jinja2.
#[path = "../tokenizer.rs"]
mod tokenizer;

/// harness synth: converter-faithful GGUFs llama.cpp runs, and the Hugging Face export.
#[path = "../synth.rs"]
mod synth;

/// harness synth --arch qwen35: the converter's keys, tensors and Q4_K_M recipe at every
/// preset (llama.cpp loads each), and the Hugging Face checkpoint with the transforms undone.
#[path = "../synth_qwen35.rs"]
mod synth_qwen35;

/// Hostile input past the parser (issue 22): crafted settings, tensors, templates, CLI values,
/// files and packets each end in a clear error; built from a tiny byte-vocabulary model.
#[path = "../hostile_input.rs"]
mod hostile_input;
