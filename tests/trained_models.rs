//! The trained tiny models (tests/fixtures/trained/, made by experiments/trained-tiny/run.sh) and
//! the cut vocabulary they carry, held to what makes their quality receipts mean something:
//!
//! - the cut vocabulary is a working byte-level BPE (bytes kept, merges closed, Qwen's special
//!   tokens kept) on which llama.cpp's tokenizer and ours give the same ids;
//! - each model is trained enough: a median top-2 logit margin ≥ 1.0 over held-out text (a model
//!   of the same shape with seeded random weights is checked to fall short of it, so the check
//!   can fail), and greedy agreement on ≥ 30 of 32 tokens between llama.cpp's CPU build and
//!   fak's CPU reference on each of the f16, Q8_0, Q6_K and Q4_K_M files;
//! - each engine holds own-rounding parity v1 against the CPU reference rounding as that engine
//!   does (`harness threeway`'s own-rounding references), and fails it against another rounding;
//! - `harness quantize` makes those files as `llama-quantize` does: the same type for every
//!   tensor, weights and logits close to llama-quantize's own output of the same f16 file.

use fak::gguf::{Array, Gguf};
use fak::quant;
use fak::reference::{Activations, Reference, ops::argmax};
use fak::runtime::{Engine, EngineOptions};
use fak::tokenizer::Tokenizer;
use fak_harness::packet::rounding::{OwnRoundingPlan, own_rounding};
use fak_harness::packet::{
    ArmDevice, DeviceKind, EngineInfo, PositionReceipt, QualityRule, QualitySummary, summarize,
};
use fak_tests::harness::harness;
use fak_tests::peer::{
    check, llama_server_greedy, llama_server_rows, llama_tokenize, names_and_types, top2_margin,
};
use fak_tests::{cosine, fixture, llama_cpp_tool};
use std::path::{Path, PathBuf};
use std::process::Command;

const ARCHS: [&str; 2] = ["qwen3", "qwen35"];
const CUT_VOCAB: &str = "vocab/ggml-vocab-qwen-cut4k.gguf";
/// The bar for "trained enough".
const MIN_MEDIAN_MARGIN: f32 = 1.0;
const GREEDY_TOKENS: usize = 32;
const MIN_GREEDY_AGREEMENT: usize = 30;
const QUANTS: [&str; 3] = ["Q8_0", "Q6_K", "Q4_K_M"];

fn model(arch: &str) -> PathBuf {
    fixture(&format!("trained/{arch}-trained-f16.gguf"))
}

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("trained_models");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn heldout_text() -> String {
    std::fs::read_to_string(fixture("trained/heldout.txt")).unwrap()
}

/// The CPU reference of the model's architecture.
fn reference(gguf: &Gguf) -> Box<dyn Reference + '_> {
    fak::reference::for_model(gguf, Activations::F32).unwrap()
}

fn tokenizer(path: &Path) -> Tokenizer {
    Tokenizer::from_gguf(&Gguf::open(path).unwrap()).unwrap()
}

/// GPT-2's byte-level alphabet: printable Latin-1 bytes stand for themselves, the other 68 map
/// to U+0100 upwards in byte order.
fn byte_char(b: u8) -> char {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(b) {
        return char::from(b);
    }
    let shift = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + shift).unwrap()
}

#[test]
fn the_cut_vocabulary_is_a_closed_byte_level_bpe_with_qwens_special_tokens() {
    let g = Gguf::open(fixture(CUT_VOCAB)).unwrap();
    let m = g.metadata();
    let tokens = m.str_array("tokenizer.ggml.tokens").unwrap();
    let merges = m.str_array("tokenizer.ggml.merges").unwrap();
    let Array::I32(types) = m.array("tokenizer.ggml.token_type").unwrap() else {
        panic!("token types are not i32");
    };
    assert!(tokens.len() <= 8192, "{} tokens", tokens.len());
    let index: std::collections::HashMap<&str, usize> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.as_str(), i))
        .collect();
    assert_eq!(index.len(), tokens.len(), "every token once");

    for b in 0u8..=255 {
        let ch = byte_char(b).to_string();
        assert!(
            index.contains_key(ch.as_str()),
            "byte {b:#04x} ({ch}) has no token"
        );
    }

    // Closed: every merge's parts and result are tokens; every longer normal token is made by
    // some merge.
    let mut made = std::collections::HashSet::new();
    for merge in merges {
        let (a, b) = merge.split_once(' ').expect("a merge is two parts");
        let joined = format!("{a}{b}");
        for part in [a, b, joined.as_str()] {
            assert!(
                index.contains_key(part),
                "merge {merge:?}: {part:?} missing"
            );
        }
        made.insert(joined);
    }
    for (t, &ty) in tokens.iter().zip(types) {
        if ty == 1 && t.chars().count() > 1 {
            assert!(made.contains(t), "no merge makes {t:?}");
        }
    }

    for special in [
        "<|endoftext|>",
        "<|im_start|>",
        "<|im_end|>",
        "<think>",
        "</think>",
        "<tool_call>",
        "</tool_call>",
    ] {
        let id = index[special];
        assert_ne!(
            types[id], 1,
            "{special} is an added token, not a normal one"
        );
    }
    let id = |key: &str| m.u32(key).unwrap() as usize;
    assert_eq!(tokens[id("tokenizer.ggml.eos_token_id")], "<|im_end|>");
    assert_eq!(tokens[id("tokenizer.ggml.bos_token_id")], "<|endoftext|>");
}

#[test]
fn llama_cpp_tokenizes_like_fak_on_the_cut_vocabulary() {
    let texts = [
        heldout_text(),
        include_str!("../harness/threeway/corpus.txt").to_string(),
        "<|im_start|>user\nWhat is 17 × 23? Think first.<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>{\"name\": \"calc\"}</tool_call>".into(),
        "Ünïcödé: naïve café, Straße, 東京タワー, Привет мир, مرحبا, 🙂👍🏽 — “quotes” ‘too’…".into(),
        "fn main() {\n\tlet x = 0x1F; // tabs\tand   spaces\r\n    println!(\"{x}\");\n}\n\n\n".into(),
        "The committee met on Tuesday, 12/03/2024 at 10:45am; 3.14159 and 1e-9 and 123456789.".into(),
        "   leading spaces, trailing spaces   \n\n\n  ".into(),
    ];
    // The Qwen3 model carries the cut vocabulary with pre = qwen2, the Qwen3.5 one with qwen35.
    for path in [fixture(CUT_VOCAB), model("qwen3"), model("qwen35")] {
        let ours = tokenizer(&path);
        for text in &texts {
            let want: Vec<u64> = llama_tokenize(&path, text);
            let got: Vec<u64> = ours.encode(text, true).into_iter().map(u64::from).collect();
            assert_eq!(
                got,
                want,
                "{}: fak and llama-tokenize differ on {text:?}",
                path.display()
            );
        }
        eprintln!("{}: {} texts tokenize alike", path.display(), texts.len());
    }
}

/// The median over the held-out text of the reference's top-2 logit margin.
fn median_heldout_margin(path: &Path) -> f32 {
    let g = Gguf::open(path).unwrap();
    let ids = tokenizer(path).encode(&heldout_text(), false);
    let mut margins: Vec<f32> = reference(&g)
        .forward_all(&ids)
        .unwrap()
        .iter()
        .map(|row| top2_margin(row))
        .collect();
    margins.sort_by(f32::total_cmp);
    margins[margins.len() / 2]
}

#[test]
fn trained_models_are_confident_on_held_out_text_and_random_ones_are_not() {
    for arch in ARCHS {
        let trained = median_heldout_margin(&model(arch));
        // The same shape and vocabulary with seeded random weights: the bar must tell them apart.
        let random = scratch(&format!("{arch}-random-f16.gguf"));
        let out = harness()
            .args([
                "synth", "--arch", arch, "--preset", "trained", "--quant", "f16",
            ])
            .arg("--out")
            .arg(&random)
            .output()
            .unwrap();
        check(out, "harness synth --preset trained");
        let untrained = median_heldout_margin(&random);
        eprintln!(
            "{arch}: median held-out top-2 margin {trained:.3} (random weights: {untrained:.3})"
        );
        assert!(
            trained >= MIN_MEDIAN_MARGIN,
            "{arch}: median top-2 margin {trained} < {MIN_MEDIAN_MARGIN}: not trained enough"
        );
        assert!(
            untrained < MIN_MEDIAN_MARGIN,
            "{arch}: random weights reach a median margin of {untrained}: the bar tells nothing"
        );
    }
}

/// The fixtures are what `synth --preset trained --weights` writes: converting the f16 file's own
/// weights again gives the same bytes (metadata, tensor order, types, values), so the committed
/// models and synth's converter path cannot drift apart.
#[test]
fn synth_writes_the_committed_files_again_from_their_weights() {
    for arch in ARCHS {
        let again = scratch(&format!("{arch}-again-f16.gguf"));
        let out = harness()
            .args([
                "synth", "--arch", arch, "--preset", "trained", "--quant", "f16",
            ])
            .arg("--weights")
            .arg(model(arch))
            .arg("--out")
            .arg(&again)
            .output()
            .unwrap();
        check(out, "harness synth --weights");
        assert!(
            std::fs::read(&again).unwrap() == std::fs::read(model(arch)).unwrap(),
            "{arch}: synth --weights does not reproduce {}",
            model(arch).display()
        );
    }
}

/// `harness quantize <f16> <out> <ftype>` (once per file name). Two tests ask for the same
/// files at once: the lock keeps them from writing one `.partial` file together (the second
/// rename failed with "No such file or directory").
fn ours(arch: &str, ftype: &str) -> PathBuf {
    static WRITING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = WRITING.lock().unwrap_or_else(|e| e.into_inner());
    let out = scratch(&format!("{arch}-{ftype}-fak.gguf"));
    if !out.is_file() {
        let run = harness()
            .arg("quantize")
            .arg(model(arch))
            .arg(&out)
            .arg(ftype)
            .output()
            .unwrap();
        check(run, "harness quantize");
    }
    out
}

/// `llama-quantize <f16> <out> <ftype>`.
fn theirs(arch: &str, ftype: &str) -> PathBuf {
    let out = scratch(&format!("{arch}-{ftype}-llama.gguf"));
    let run = Command::new(llama_cpp_tool("llama-quantize"))
        .arg(model(arch))
        .arg(&out)
        .arg(ftype)
        .output()
        .unwrap();
    check(run, "llama-quantize");
    out
}

/// A prompt of held-out text the models never trained on.
fn heldout_prompt(path: &Path) -> Vec<u32> {
    tokenizer(path).encode(&heldout_text(), false)[..32].to_vec()
}

/// The reference's greedy choice after each prefix `prompt + tokens[..i]`, i < tokens.len()
/// (teacher-forced on `tokens`).
fn teacher_forced_argmax(g: &Gguf, prompt: &[u32], tokens: &[u32]) -> Vec<u32> {
    let mut ids = prompt.to_vec();
    ids.extend(&tokens[..tokens.len() - 1]);
    let rows = reference(g).forward_all(&ids).unwrap();
    rows[prompt.len() - 1..].iter().map(|r| argmax(r)).collect()
}

/// llama.cpp's CPU build greedy on each file (f16, and `harness quantize`'s Q8_0, Q6_K and
/// Q4_K_M of it) against fak's CPU reference on the same file, teacher-forced on llama.cpp's
/// tokens: at ≥ 30 of 32 output positions fak's reference picks llama.cpp's token. (Free-running
/// agreement is printed too: one near-tie flipped early changes every token after it, so it
/// says less.) How far each quantization's greedy path stays with the true weights (fak's
/// reference on the f16, teacher-forced the same way) is printed: what quantization costs.
#[test]
fn llama_cpp_and_fak_agree_on_greedy_tokens_on_every_quantization() {
    for arch in ARCHS {
        let f16 = model(arch);
        let prompt = heldout_prompt(&f16);
        let truth = Gguf::open(&f16).unwrap();
        let free_truth = reference(&truth).greedy(&prompt, GREEDY_TOKENS).unwrap();
        let files: Vec<(String, PathBuf)> = std::iter::once(("F16".to_string(), f16.clone()))
            .chain(QUANTS.iter().map(|q| (q.to_string(), ours(arch, q))))
            .collect();
        for (name, path) in files {
            let g = Gguf::open(&path).unwrap();
            let peer = llama_server_greedy(&path, &prompt, GREEDY_TOKENS, &scratch(""));
            let count = |ours: &[u32]| peer.iter().zip(ours).filter(|(a, b)| a == b).count();
            let same_file = count(&teacher_forced_argmax(&g, &prompt, &peer));
            let true_weights = count(&teacher_forced_argmax(&truth, &prompt, &peer));
            let free_same_file = count(&reference(&g).greedy(&prompt, GREEDY_TOKENS).unwrap());
            eprintln!(
                "{arch} {name}: fak's reference on the same file picks llama.cpp's greedy token at \
                 {same_file}/{GREEDY_TOKENS} positions ({free_same_file}/{GREEDY_TOKENS} \
                 free-running); on the f16 (true weights) at {true_weights}/{GREEDY_TOKENS} \
                 ({}/{GREEDY_TOKENS} free-running)",
                count(&free_truth)
            );
            assert!(
                same_file >= MIN_GREEDY_AGREEMENT,
                "{arch} {name}: fak and llama.cpp agree on {same_file} of llama.cpp's greedy tokens {peer:?}"
            );
        }
    }
}

/// Root-mean-square of `a − b` over root-mean-square of `b`.
fn relative_rms(a: &[f32], b: &[f32]) -> f64 {
    let (mut diff, mut norm) = (0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        diff += f64::from(x - y).powi(2);
        norm += f64::from(y).powi(2);
    }
    (diff / norm).sqrt()
}

fn values(g: &Gguf, name: &str) -> Vec<f32> {
    let t = g.require_tensor(name).unwrap();
    quant::dequantize(t.ty, g.tensor_data(t), t.n_elements() as usize).unwrap()
}

#[test]
fn harness_quantize_makes_what_llama_quantize_makes() {
    for arch in ARCHS {
        let truth = Gguf::open(model(arch)).unwrap();
        let prompt = heldout_prompt(&model(arch));
        for ftype in QUANTS {
            let (ours_path, theirs_path) = (ours(arch, ftype), theirs(arch, ftype));
            let (a, b) = (
                Gguf::open(&ours_path).unwrap(),
                Gguf::open(&theirs_path).unwrap(),
            );
            assert_eq!(
                names_and_types(&a),
                names_and_types(&b),
                "{arch} {ftype}: tensor order or types differ from llama-quantize's"
            );
            assert_eq!(
                a.metadata().u32("general.file_type").unwrap(),
                b.metadata().u32("general.file_type").unwrap()
            );
            let (mut identical, mut worst) = (0, 0f64);
            for t in a.tensors() {
                let tb = b.require_tensor(&t.name).unwrap();
                if a.tensor_data(t) == b.tensor_data(tb) {
                    identical += 1;
                    continue;
                }
                // Not byte for byte: then no further from llama-quantize's than a rounding step
                // of the type allows, measured against the true weights.
                let (ours_v, theirs_v, true_v) = (
                    values(&a, &t.name),
                    values(&b, &t.name),
                    values(&truth, &t.name),
                );
                let (e_ours, e_theirs) = (
                    relative_rms(&ours_v, &true_v),
                    relative_rms(&theirs_v, &true_v),
                );
                worst = worst.max(relative_rms(&ours_v, &theirs_v));
                assert!(
                    e_ours <= 1.05 * e_theirs + 1e-7,
                    "{arch} {ftype} {}: our error {e_ours} vs llama-quantize's {e_theirs}",
                    t.name
                );
            }
            let (mut ra, mut rb) = (reference(&a), reference(&b));
            let (la, lb) = (
                ra.forward_all(&prompt).unwrap(),
                rb.forward_all(&prompt).unwrap(),
            );
            let min_cos = la
                .iter()
                .zip(&lb)
                .map(|(x, y)| cosine(x, y))
                .fold(f64::INFINITY, f64::min);
            let same_argmax = la
                .iter()
                .zip(&lb)
                .filter(|(x, y)| argmax(x) == argmax(y))
                .count();
            eprintln!(
                "{arch} {ftype}: {identical}/{} tensors byte-identical to llama-quantize's (worst relative RMS difference {worst:.2e}); logits min cosine {min_cos:.6}, argmax {same_argmax}/{}",
                a.tensors().len(),
                la.len()
            );
            assert!(min_cos >= 0.9999, "{arch} {ftype}: logits cosine {min_cos}");
            assert_eq!(same_argmax, la.len(), "{arch} {ftype}: argmax differs");
        }
    }
}

/// Ids the own-rounding checks run: held-out text, long enough that llama.cpp's requests reach
/// ggml-cpu's tiled flash attention (64 ids and more) as well as its one-chunk kernel.
const OWN_ROUNDING_IDS: usize = 72;
/// Top log-probabilities asked of llama-server per row (the threeway arm asks as many).
const N_PROBS: usize = 64;
/// Reference entries the top-k-only comparison covers (the threeway quality pass's).
const TOP_K: usize = 16;

fn engine_info(flags: Vec<String>, build: Option<serde_json::Value>) -> EngineInfo {
    EngineInfo {
        name: "test".into(),
        version: "test".into(),
        flags,
        build,
        tuning: Vec::new(),
    }
}

/// The own-rounding reference the threeway quality pass runs for the llama.cpp arm on the CPU
/// with its envelope flags.
fn llama_cpp_plan(max_ids: usize) -> OwnRoundingPlan {
    let args = ["-fa", "auto", "--cache-ram", "0", "--ctx-checkpoints", "0"];
    let flags = vec![format!("args={}", serde_json::json!(args))];
    let device = ArmDevice {
        name: "CPU".into(),
        kind: DeviceKind::Cpu,
        selftest_adapter: false,
    };
    own_rounding(
        "llama.cpp",
        &engine_info(flags, None),
        Some(&device),
        max_ids,
    )
    .unwrap()
}

/// Receipts of top-k rows (llama-server's log-probabilities) against reference logits, as the
/// threeway quality pass makes them: the centred cosine over the reference's top-16 ids.
fn top_k_receipts(reference: &[Vec<f32>], peer: &[Vec<(u32, f32)>]) -> Vec<PositionReceipt> {
    let centred = |v: &[f64]| {
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        v.iter().map(|x| x - mean).collect::<Vec<f64>>()
    };
    reference
        .iter()
        .zip(peer)
        .enumerate()
        .filter(|(_, (_, row))| !row.is_empty())
        .map(|(position, (want, row))| {
            let mut top: Vec<u32> = (0..want.len() as u32).collect();
            top.sort_by(|&a, &b| want[b as usize].total_cmp(&want[a as usize]));
            let (a, b): (Vec<f64>, Vec<f64>) = top[..TOP_K]
                .iter()
                .filter_map(|id| {
                    let got = row.iter().find(|e| e.0 == *id)?;
                    Some((f64::from(got.1), f64::from(want[*id as usize])))
                })
                .unzip();
            let (a, b) = (centred(&a), centred(&b));
            let dot = |x: &[f64], y: &[f64]| x.iter().zip(y).map(|(p, q)| p * q).sum::<f64>();
            let greedy_arm = row.iter().max_by(|x, y| x.1.total_cmp(&y.1)).unwrap().0;
            PositionReceipt {
                prompt_index: 0,
                position,
                cosine: dot(&a, &b) / (dot(&a, &a) * dot(&b, &b)).sqrt(),
                greedy_reference: argmax(want),
                greedy_arm,
                reference_top2_margin: f64::from(top2_margin(want)),
                rounding_budget: None,
            }
        })
        .collect()
}

fn describe(s: &QualitySummary) -> String {
    format!(
        "median 1 − cosine {:.1e}, min cosine {:.6}, mean {:.7}, {} mismatches over {} positions",
        s.median_gap.unwrap_or(f64::NAN),
        s.min_cosine,
        s.mean_cosine,
        s.mismatches,
        s.positions
    )
}

/// llama.cpp's CPU build, asked row by row as the threeway arm asks, passes own-rounding parity
/// v1 against the CPU reference rounding as ggml-cpu does (`harness threeway`'s own-rounding
/// reference for it) on the trained models' Q8_0 and Q4_K_M files — and fails it against the
/// reference that rounds nothing: the budget is tight enough to see ggml's rounding.
#[test]
fn llama_cpp_holds_parity_with_its_own_rounding_and_not_without() {
    let rule = QualityRule::own_rounding_v1();
    for arch in ARCHS {
        let ids =
            tokenizer(&model(arch)).encode(&heldout_text(), false)[..OWN_ROUNDING_IDS].to_vec();
        for ftype in ["Q8_0", "Q4_K_M"] {
            let path = ours(arch, ftype);
            let g = Gguf::open(&path).unwrap();
            let peer = llama_server_rows(&path, &ids, N_PROBS, &scratch(""));
            let own = llama_cpp_plan(ids.len()).logits(&g, &ids).unwrap();
            let plain = reference(&g).forward_all(&ids).unwrap();
            let (s_own, s_plain) = (
                summarize(&rule, &top_k_receipts(&own, &peer)),
                summarize(&rule, &top_k_receipts(&plain, &peer)),
            );
            eprintln!(
                "{arch} {ftype}: llama.cpp vs its own-rounding reference: {}; vs the unrounded \
                 reference: {}",
                describe(&s_own),
                describe(&s_plain)
            );
            assert_eq!(s_own.passed, Some(true), "{arch} {ftype}: {s_own:?}");
            assert_eq!(s_plain.passed, Some(false), "{arch} {ftype}: {s_plain:?}");
        }
    }
}

/// fak's engine (this adapter's default paths, as `harness serve-arm` loads it) passes
/// own-rounding parity v1 (over the reference's top-16, as the threeway quality pass judges it)
/// against the CPU reference rounding as its own
/// `teacher_forced_rounding` says, on the trained models' Q4_K_M — and fails it against the
/// reference rounding as llama.cpp's CPU backend does: the budget tells two roundings apart.
#[test]
fn fak_holds_parity_with_its_own_rounding_and_not_with_ggmls() {
    let rule = QualityRule::own_rounding_v1();
    for arch in ARCHS {
        let ids =
            tokenizer(&model(arch)).encode(&heldout_text(), false)[..OWN_ROUNDING_IDS].to_vec();
        let path = ours(arch, "Q4_K_M");
        let g = Gguf::open(&path).unwrap();
        let mut options = EngineOptions::from_env().unwrap();
        options.context.shared = true;
        options.max_context = Some(256);
        options.poison = true;
        let mut engine = Engine::load(&path, &options).unwrap();
        let build = serde_json::json!({
            "kernel_paths": engine.ctx.paths().name(),
            "teacher_forced_rounding": engine.teacher_forced_rounding(),
        });
        let plan = own_rounding(
            "fak-native",
            &engine_info(Vec::new(), Some(build)),
            None,
            ids.len(),
        )
        .unwrap();
        // Judged as the threeway quality pass judges it: over the reference's top-16.
        let got: Vec<Vec<(u32, f32)>> = engine
            .teacher_forced_logits(&ids)
            .unwrap()
            .into_iter()
            .map(|row| (0..).zip(row).collect())
            .collect();
        let receipts = |want: &[Vec<f32>]| top_k_receipts(want, &got);
        let own = summarize(&rule, &receipts(&plan.logits(&g, &ids).unwrap()));
        let ggml = summarize(
            &rule,
            &receipts(&llama_cpp_plan(ids.len()).logits(&g, &ids).unwrap()),
        );
        eprintln!(
            "{arch} Q4_K_M on {}: fak vs its own-rounding reference ({:?}): {}; vs ggml-cpu's \
             rounding: {}",
            engine.ctx.paths().name(),
            plan.rules(),
            describe(&own),
            describe(&ggml)
        );
        assert_eq!(own.passed, Some(true), "{arch}: {own:?}");
        assert_eq!(ggml.passed, Some(false), "{arch}: {ggml:?}");
    }
}
