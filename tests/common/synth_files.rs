//! What tests/synth.rs (qwen3) and tests/synth_qwen35.rs check alike on `harness synth`'s files:
//! where they are written, the converter's tensor types and metadata frame, the tokenizer block
//! both converters copy from the checkpoint, and lavapipe's binding cap. Each test file keeps what
//! is particular to its architecture.

use crate::fixture;
use crate::harness::synth_model;
use crate::peer::tensor_table;
use fak::gguf::{Gguf, Metadata};
use fak::quant::GgmlType;
use std::collections::HashMap;
use std::path::PathBuf;

/// The `--quant` values of the tiny files, and the `general.file_type` (llama_ftype) each gets.
pub const QUANTS: [(&str, u32); 4] = [("f32", 0), ("f16", 1), ("q8_0", 7), ("q4_k_m", 15)];
pub const SEED: &str = "7";
/// lavapipe's `max_storage_buffer_binding_size`: a tiny tensor must fit one binding.
pub const MAX_BINDING: u64 = 128 << 20;

/// One architecture's synthetic files, written once per test process into a scratch folder.
pub struct SynthFiles {
    dir: PathBuf,
    arch: &'static str,
}

impl SynthFiles {
    /// `dir` is the test's own folder under `env!("CARGO_TARGET_TMPDIR")` (only test targets
    /// see that variable).
    pub fn new(dir: PathBuf, arch: &'static str) -> Self {
        std::fs::create_dir_all(&dir).unwrap();
        SynthFiles { dir, arch }
    }

    pub fn scratch(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// `harness synth --arch <arch> <args>` into the scratch folder, once per name.
    pub fn synth(&self, name: &str, args: &[&str]) -> PathBuf {
        let args: Vec<&str> = ["--arch", self.arch].iter().chain(args).copied().collect();
        synth_model(&self.dir, name, &args)
    }

    pub fn tiny(&self, quant: &str) -> PathBuf {
        let args = ["--preset", "tiny", "--quant", quant, "--seed", SEED];
        self.synth(&format!("tiny-{quant}.gguf"), &args)
    }

    /// The tiny f32 file together with its Hugging Face export (same seed, same floats).
    pub fn tiny_f32_with_hf(&self) -> (PathBuf, PathBuf) {
        let hf = self.scratch("tiny-hf");
        let hf_arg = hf.to_str().unwrap();
        let args = [
            "--preset", "tiny", "--quant", "f32", "--seed", SEED, "--hf-dir", hf_arg,
        ];
        (self.synth("tiny-f32-with-hf.gguf", &args), hf)
    }

    /// The tiny preset's Q4_K_M file of random blocks, seed [`SEED`] (shared with
    /// `fast_random_keeps_the_quantized_layout`).
    pub fn fast_random_tiny(&self) -> PathBuf {
        self.fast_random("tiny")
    }

    /// A preset's Q4_K_M file of random blocks (cheap to write and to run one token).
    pub fn fast_random(&self, preset: &str) -> PathBuf {
        self.fast_random_seeded(preset, SEED, &format!("{preset}-q4_k_m-fast.gguf"))
    }

    /// A preset's Q4_K_M file of random blocks from `seed`, written as `name`.
    pub fn fast_random_seeded(&self, preset: &str, seed: &str, name: &str) -> PathBuf {
        let args = [
            "--preset",
            preset,
            "--quant",
            "q4_k_m",
            "--seed",
            seed,
            "--fast-random",
        ];
        self.synth(name, &args)
    }
}

/// The converter's f32/f16/q8_0 outputs hold exactly the `expected` tensors with their shapes,
/// every one of the outtype except those the converter keeps F32 (`keeps_f32(name, shape)`).
pub fn assert_converter_tensors(
    files: &SynthFiles,
    expected: &HashMap<String, Vec<u64>>,
    keeps_f32: impl Fn(&str, &[u64]) -> bool,
) {
    for (quant, weight_type) in [
        ("f32", GgmlType::F32),
        ("f16", GgmlType::F16),
        ("q8_0", GgmlType::Q8_0),
    ] {
        let g = Gguf::open(files.tiny(quant)).unwrap();
        assert_eq!(g.tensors().len(), expected.len(), "{quant}");
        for (name, shape, ty) in tensor_table(&g) {
            assert_eq!(Some(&shape), expected.get(&name), "{quant} {name}");
            let want = if keeps_f32(&name, &shape) {
                GgmlType::F32
            } else {
                weight_type
            };
            assert_eq!(ty, want, "{quant} {name}");
        }
    }
}

pub fn assert_tiny_tensors_fit_one_binding(files: &SynthFiles) {
    for (quant, _) in QUANTS {
        let g = Gguf::open(files.tiny(quant)).unwrap();
        for t in g.tensors() {
            assert!(
                t.n_bytes <= MAX_BINDING,
                "{quant} {}: {} bytes",
                t.name,
                t.n_bytes
            );
        }
    }
}

/// Calls `check` with the metadata of each tiny file after checking the frame every converter
/// output has: exactly `keys` in the converter's order, the architecture and the file type.
pub fn for_each_tiny_metadata(
    files: &SynthFiles,
    keys: &[&str],
    mut check: impl FnMut(&str, &Metadata),
) {
    for (quant, file_type) in QUANTS {
        let g = Gguf::open(files.tiny(quant)).unwrap();
        let m = g.metadata();
        let got: Vec<&str> = m.entries().iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(got, keys, "{quant}");
        assert_eq!(m.str("general.architecture").unwrap(), files.arch);
        assert_eq!(m.u32("general.file_type").unwrap(), file_type, "{quant}");
        check(quant, m);
    }
}

/// The tokenizer block a converter copies from the checkpoint.
pub struct Tokenizer {
    /// The llama.cpp test vocabulary (`tests/fixtures/vocab/…`) whose BPE tokens and merges
    /// the file must carry.
    pub vocab: &'static str,
    /// The chat template fixture (`tests/fixtures/templates/…`).
    pub template: &'static str,
    pub n_vocab: u64,
    /// bos, eos and padding token ids.
    pub bos: u32,
    pub eos: u32,
    pub padding: u32,
}

/// Qwen's BPE tokens, the ids below its first added token.
const N_BPE: usize = 151_643;

impl Tokenizer {
    pub fn assert_in(&self, m: &Metadata) {
        let vocab = Gguf::open(fixture(self.vocab)).unwrap();
        let vocab = vocab.metadata();
        let tokens = m.str_array("tokenizer.ggml.tokens").unwrap();
        assert_eq!(tokens.len() as u64, self.n_vocab);
        assert_eq!(
            tokens[..N_BPE],
            vocab.str_array("tokenizer.ggml.tokens").unwrap()[..N_BPE],
            "the BPE tokens are the test vocabulary's"
        );
        let types = m.int_array("tokenizer.ggml.token_type").unwrap();
        assert!(
            types[..N_BPE].iter().all(|&t| t == 1),
            "BPE tokens are NORMAL"
        );
        assert_eq!(
            m.str_array("tokenizer.ggml.merges").unwrap(),
            vocab.str_array("tokenizer.ggml.merges").unwrap()
        );
        assert_eq!(m.u32("tokenizer.ggml.bos_token_id").unwrap(), self.bos);
        assert_eq!(m.u32("tokenizer.ggml.eos_token_id").unwrap(), self.eos);
        assert_eq!(
            m.u32("tokenizer.ggml.padding_token_id").unwrap(),
            self.padding
        );
        let template = std::fs::read_to_string(fixture(self.template)).unwrap();
        assert_eq!(m.str("tokenizer.chat_template").unwrap(), template);
    }
}
