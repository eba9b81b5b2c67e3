//! Qwen2 (GGUF arch `qwen2`: q/k/v biases, no q/k norms), the third architecture, on the GPU end
//! to end through `fak::runtime::Engine`, against the same three oracles as the dense Qwen3
//! suite: fak's CPU reference (every step, every kernel path, every step shape; the integer
//! path; a quantized greedy run), `mlx_lm` on the Hugging Face export of the same float weights
//! (its own Qwen2 code: biases included), and the llama.cpp peer's greedy tokens on the same
//! GGUF. The tiny preset carries the cut 4 096-token vocabulary, which keeps the suite cheap.

use fak::gguf::Gguf;
use fak::gpu::Forced;
use fak::reference::{Activations, DenseReference, Reference};
use fak::runtime::{Engine, SamplingParams};
use fak_tests::harness::synth_model;
use fak_tests::model::{
    assert_int_dot_logits, assert_plan_sizes_the_activations, engine, engine_min_cosine,
    every_path, options, random_ids, rewrite_gguf, rows_error,
};
use fak_tests::peer::{assert_rows_close, assert_same_greedy, llama_server_greedy, mlx_logits};
use std::path::{Path, PathBuf};

fn scratch() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("model_qwen2")
}

fn tiny(quant: &str, seed: u64) -> PathBuf {
    let seed = seed.to_string();
    let args = [
        "--arch", "qwen2", "--preset", "tiny", "--quant", quant, "--seed", &seed,
    ];
    synth_model(&scratch(), &format!("tiny-{quant}-{seed}.gguf"), &args)
}

fn n_vocab(path: &Path) -> usize {
    fak::model::blueprint(&Gguf::open(path).unwrap())
        .unwrap()
        .n_vocab
}

fn reference_logits(path: &Path, ids: &[u32]) -> Vec<Vec<f32>> {
    let gguf = Gguf::open(path).unwrap();
    DenseReference::new(&gguf)
        .unwrap()
        .forward_all(ids)
        .unwrap()
}

/// The file is what the spec says a Qwen2 is (biases on q, k and v, no q/k norms), the biases
/// matter (swapping two layers' biases moves the reference's logits far, so a GPU that dropped
/// or misplaced them could not pass the tests below), and a file without one is refused naming
/// it.
#[test]
fn biases_are_required_and_move_the_logits() {
    let path = tiny("f32", 11);
    let gguf = Gguf::open(&path).unwrap();
    assert!(gguf.tensor("blk.0.attn_q_norm.weight").is_none());
    let ids = random_ids(2, 8, n_vocab(&path));
    let want = reference_logits(&path, &ids);
    let swapped = scratch().join("swapped-biases.gguf");
    rewrite_gguf(
        &path,
        &swapped,
        |_| {},
        |tensors| {
            for (name, _) in tensors.iter_mut() {
                let swapped = match (name.strip_prefix("blk.0."), name.strip_prefix("blk.1.")) {
                    (Some(tail), _) => format!("blk.1.{tail}"),
                    (_, Some(tail)) => format!("blk.0.{tail}"),
                    _ => continue,
                };
                if name.ends_with(".bias") {
                    *name = swapped;
                }
            }
        },
    );
    let error = rows_error(&reference_logits(&swapped, &ids), &want);
    assert!(error.min_cosine < 0.999, "swapped biases: {error:?}");

    let missing = scratch().join("missing-bias.gguf");
    rewrite_gguf(
        &path,
        &missing,
        |_| {},
        |tensors| tensors.retain(|(name, _)| name != "blk.1.attn_k.bias"),
    );
    let err = match Engine::load(&missing, &options(16, Forced::default())) {
        Ok(_) => panic!("a qwen2 file without blk.1.attn_k.bias loaded"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("blk.1.attn_k.bias"), "{err}");
}

/// f32 weights: logits after every position equal the CPU reference's on every kernel path, for
/// steps of 1 token (the decode kernels), 5 (batched mat-vec, tiled attention) and 16 (mat-mul;
/// 40 tokens make chunks of 16, 16 and 8), as `model_qwen3` holds them.
#[test]
fn f32_logits_match_the_cpu_reference_on_every_path_and_step_shape() {
    let path = tiny("f32", 11);
    let ids = random_ids(1, 40, n_vocab(&path));
    let want = reference_logits(&path, &ids);
    for forced in every_path() {
        for chunk in [1, 5, 16] {
            let mut e = engine(&path, chunk, forced);
            let got = e.teacher_forced_logits(&ids).unwrap();
            assert_rows_close(
                &format!("{forced:?}, steps of {chunk}"),
                &got,
                &want,
                engine_min_cosine(&e),
            );
        }
    }
}

/// Greedy generation on the GPU gives the CPU reference's tokens on the Q4_K_M recipe, 48 steps
/// after a 12-token prompt.
#[test]
fn q4_k_m_greedy_equals_the_cpu_reference() {
    let path = tiny("q4_k_m", 1);
    let prompt = random_ids(101, 12, n_vocab(&path));
    let gguf = Gguf::open(&path).unwrap();
    let want = DenseReference::new(&gguf)
        .unwrap()
        .greedy(&prompt, 48)
        .unwrap();
    let got = engine(&path, 256, Forced::default())
        .generate(&prompt, 48, &SamplingParams::greedy(), true, &mut |_| {})
        .unwrap()
        .tokens;
    assert_eq!(got, want, "GPU greedy vs CPU reference");
}

/// The integer mat-vec path against a reference that rounds its inputs alike (as in
/// `model_qwen3`, whose bounds it shares).
#[test]
fn int_dot_logits_match_a_reference_that_rounds_its_inputs_alike() {
    let path = tiny("q4_k_m", 1);
    let ids = random_ids(3, 24, n_vocab(&path));
    let gguf = Gguf::open(&path).unwrap();
    let want = DenseReference::with_activations(&gguf, Activations::Q8Blocks)
        .unwrap()
        .forward_all(&ids)
        .unwrap();
    let want_f32 = reference_logits(&path, &ids);
    assert_int_dot_logits(
        &path,
        &ids,
        &want,
        &want_f32,
        [
            (false, true, 0.99999),
            (true, true, 0.99999),
            (false, false, 0.999),
        ],
    );
}

/// `mlx_lm` on the Hugging Face export of the same float weights.
#[test]
fn mlx_lm_on_the_hf_export_agrees_with_the_gpu_logits() {
    let hf = scratch().join("tiny-hf");
    let hf_arg = hf.to_str().unwrap();
    let args = [
        "--arch", "qwen2", "--preset", "tiny", "--quant", "f32", "--seed", "21", "--hf-dir", hf_arg,
    ];
    let path = synth_model(&scratch(), "tiny-f32-21-hf.gguf", &args);
    let n_vocab = n_vocab(&path);
    let ids = random_ids(22, 24, n_vocab);
    let mlx = mlx_logits(&hf, &ids, n_vocab, &scratch());
    let got = engine(&path, 256, Forced::default())
        .teacher_forced_logits(&ids)
        .unwrap();
    assert_rows_close("fak GPU vs mlx_lm", &got, &mlx, 0.9999);
}

/// The llama.cpp peer, given the same token ids on the same Q8_0 file, generates the same greedy
/// tokens (a parting only at a near-tie of the reference, as `model_qwen3` allows).
#[test]
fn llama_cpp_greedy_tokens_match_on_the_same_q8_0_file() {
    let path = tiny("q8_0", 31);
    let prompt = random_ids(32, 16, n_vocab(&path));
    let n = 32;
    let peer = llama_server_greedy(&path, &prompt, n, &scratch());
    let ours = engine(&path, 256, Forced::default())
        .generate(&prompt, n, &SamplingParams::greedy(), true, &mut |_| {})
        .unwrap()
        .tokens;
    assert_same_greedy(&prompt, &ours, &peer, |context| {
        reference_logits(&path, context).pop().unwrap()
    });
}

/// The memory plan's activations are what loading allocates.
#[test]
fn the_plan_sizes_the_activations_the_model_allocates() {
    assert_plan_sizes_the_activations(&tiny("f32", 11), &[1, 8, 100]);
}
