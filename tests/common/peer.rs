//! The external oracles the model tests share: the llama.cpp peer's tools (`llama-quantize
//! --dry-run`, `llama-cli`, `llama-tokenize`, `llama-server` through
//! `tests/scripts/llama_server_greedy.py`), `mlx_lm` through `tests/scripts/mlx_logits.py`, and
//! the measures the model tests compare logits with.

use crate::{cosine, fixture, llama_cpp_tool, python};
use fak::gguf::Gguf;
use fak::quant::GgmlType;
use std::path::Path;
use std::process::{Command, Output};

/// `out` if its process succeeded, else a panic showing what it printed.
pub fn check(out: Output, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// llama-quantize's own choice, in its own order: `--dry-run` prints one line per tensor,
/// `[ i/ n] name - [ne0, ne1, …], type = <src>, size = … [-> … (<new type>)]`.
pub fn llama_quantize_plan(source: &Path) -> Vec<(String, GgmlType)> {
    let out = Command::new(llama_cpp_tool("llama-quantize"))
        .args(["--dry-run", "--allow-requantize"])
        .arg(source)
        .arg("Q4_K_M")
        .output()
        .unwrap();
    let out = check(out, "llama-quantize --dry-run");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let plan: Vec<(String, GgmlType)> = text
        .lines()
        .filter(|l| l.starts_with('[') && l.contains("type ="))
        .map(|line| {
            let name = line
                .split(']')
                .nth(1)
                .unwrap()
                .split_whitespace()
                .next()
                .unwrap();
            let source_type = line
                .split("type =")
                .nth(1)
                .unwrap()
                .split(',')
                .next()
                .unwrap();
            let ty = match line.rsplit_once('(') {
                Some((_, new)) if line.contains("->") => new.trim_end_matches(')'),
                _ => source_type.trim(),
            };
            let ty = GgmlType::from_name(ty).unwrap_or_else(|| panic!("type {ty:?} in {line:?}"));
            (name.to_string(), ty)
        })
        .collect();
    assert!(
        !plan.is_empty(),
        "no tensor lines in llama-quantize output:\n{text}"
    );
    plan
}

/// Every tensor's name, shape and type, in file order.
pub fn tensor_table(g: &Gguf) -> Vec<(String, Vec<u64>, GgmlType)> {
    g.tensors()
        .iter()
        .map(|t| (t.name.clone(), t.shape.clone(), t.ty))
        .collect()
}

/// Every tensor's name and type, in file order (what [`llama_quantize_plan`] returns).
pub fn names_and_types(g: &Gguf) -> Vec<(String, GgmlType)> {
    g.tensors().iter().map(|t| (t.name.clone(), t.ty)).collect()
}

/// Greedy generation of a few tokens with the peer's `llama-cli` (single turn, chat template):
/// it loads the model, runs the prompt and replies with something.
pub fn llama_cli_generates(model: &Path) {
    let out = Command::new(llama_cpp_tool("llama-cli"))
        .arg("-m")
        .arg(model)
        .args([
            "-p", "Hello", "-n", "4", "-st", "-c", "256", "--temp", "0", "-t", "2",
        ])
        .args(["--no-display-prompt", "--log-colors", "off"])
        .output()
        .unwrap();
    let out = check(out, &format!("llama-cli on {}", model.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let reply = stdout
        .split_once("> Hello")
        .and_then(|(_, rest)| rest.split_once("[ Prompt:"))
        .map(|(reply, _)| reply.trim())
        .unwrap_or_else(|| panic!("no reply in llama-cli output:\n{stdout}"));
    assert!(
        !reply.is_empty(),
        "llama-cli generated nothing for {}",
        model.display()
    );
    assert!(
        stdout.contains("Generation:"),
        "no generation stats:\n{stdout}"
    );
}

/// Token ids llama.cpp's tokenizer gives for `text` on the GGUF's vocabulary (special tokens
/// parsed, no BOS: add_bos_token is false).
pub fn llama_tokenize(model: &Path, text: &str) -> Vec<u64> {
    let out = Command::new(llama_cpp_tool("llama-tokenize"))
        .arg("-m")
        .arg(model)
        .args(["-p", text, "--ids", "--log-disable"])
        .output()
        .unwrap();
    let out = check(out, "llama-tokenize");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let list = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('['))
        .unwrap_or("[]");
    serde_json::from_str(list).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// The peer's greedy continuation of `prompt` (ids, no template, no BOS) on `model`, `n`
/// tokens, end-of-generation ignored (`llama-server` through llama_server_greedy.py).
pub fn llama_server_greedy(model: &Path, prompt: &[u32], n: usize, scratch: &Path) -> Vec<u32> {
    let ids_file = scratch.join("llama-greedy-ids.json");
    std::fs::write(&ids_file, serde_json::to_vec(prompt).unwrap()).unwrap();
    let out = Command::new(python())
        .arg(fixture("../scripts/llama_server_greedy.py"))
        .arg(llama_cpp_tool("llama-server"))
        .args([model, &ids_file])
        .arg(n.to_string())
        .output()
        .unwrap();
    let out = check(out, "llama_server_greedy.py");
    let peer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    serde_json::from_value(peer["tokens"].clone()).unwrap()
}

/// The peer's teacher-forced top-`n_probs` log-probabilities over `ids` on `model`, one row per
/// id, each from a request of its own as the threeway llama.cpp arm asks (llama_server_rows.py).
pub fn llama_server_rows(
    model: &Path,
    ids: &[u32],
    n_probs: usize,
    scratch: &Path,
) -> Vec<Vec<(u32, f32)>> {
    let ids_file = scratch.join("llama-rows-ids.json");
    std::fs::write(&ids_file, serde_json::to_vec(ids).unwrap()).unwrap();
    let out = Command::new(python())
        .arg(fixture("../scripts/llama_server_rows.py"))
        .arg(llama_cpp_tool("llama-server"))
        .args([model, &ids_file])
        .arg(n_probs.to_string())
        .output()
        .unwrap();
    let out = check(out, "llama_server_rows.py");
    let rows: Vec<Vec<(u32, f32)>> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows.len(), ids.len(), "llama-server rows");
    rows
}

/// `mlx_lm`'s teacher-forced logits on a Hugging Face directory: one row per id.
pub fn mlx_logits(hf_dir: &Path, ids: &[u32], n_vocab: usize, scratch: &Path) -> Vec<Vec<f32>> {
    let ids_file = scratch.join("mlx-ids.json");
    std::fs::write(&ids_file, serde_json::to_vec(ids).unwrap()).unwrap();
    let out_file = scratch.join("mlx-logits.f32");
    let out = Command::new(python())
        .arg(fixture("../scripts/mlx_logits.py"))
        .args([hf_dir, &ids_file, &out_file])
        .output()
        .unwrap();
    check(out, "mlx_logits.py (pip install 'mlx[cpu]' mlx-lm)");
    let rows = read_f32_rows(&out_file, n_vocab);
    assert_eq!(rows.len(), ids.len(), "mlx_lm rows");
    rows
}

/// A raw little-endian f32 file as rows of `row_len`.
pub fn read_f32_rows(path: &Path, row_len: usize) -> Vec<Vec<f32>> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let flat: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert_eq!(flat.len() % row_len, 0, "{}: ragged rows", path.display());
    flat.chunks(row_len).map(<[f32]>::to_vec).collect()
}

/// The gap between the largest and second-largest logit.
pub fn top2_margin(logits: &[f32]) -> f32 {
    let mut sorted = logits.to_vec();
    sorted.sort_by(|a, b| b.total_cmp(a));
    sorted[0] - sorted[1]
}

/// Every row of `got` has cosine ≥ `min_cosine` with the same row of `want`; returns the
/// smallest cosine.
pub fn assert_rows_close(what: &str, got: &[Vec<f32>], want: &[Vec<f32>], min_cosine: f64) -> f64 {
    assert_eq!(got.len(), want.len(), "{what}: rows");
    let mut worst = f64::INFINITY;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let c = cosine(g, w);
        assert!(
            c >= min_cosine,
            "{what}: position {i}: cosine {c} < {min_cosine}"
        );
        worst = worst.min(c);
    }
    worst
}

/// fak's greedy tokens `ours` equal the peer's `peer` after `prompt`; where they part, the
/// reference's top-2 margin there (`logits_after(context)`: the reference's logits after the
/// context) must be below 1e-3, a near-tie either engine may break either way. Prints the
/// outcome and the margin.
pub fn assert_same_greedy(
    prompt: &[u32],
    ours: &[u32],
    peer: &[u32],
    logits_after: impl FnOnce(&[u32]) -> Vec<f32>,
) {
    assert_eq!(
        peer.len(),
        ours.len(),
        "the peer generated {} tokens",
        peer.len()
    );
    match ours.iter().zip(peer).position(|(a, b)| a != b) {
        None => eprintln!(
            "llama.cpp and fak agree on all {} greedy tokens",
            ours.len()
        ),
        Some(i) => {
            let mut context = prompt.to_vec();
            context.extend(&ours[..i]);
            let margin = top2_margin(&logits_after(&context));
            eprintln!("llama.cpp and fak part at output {i}: reference top-2 margin {margin}");
            assert!(
                margin < 1e-3,
                "fak {ours:?} vs llama.cpp {peer:?} part at output {i} with a top-2 margin of {margin}"
            );
        }
    }
}

/// The reference teacher-forced on the peer's own greedy continuation: at every output
/// position the reference's argmax (`rows[i]`, the logits before `peer[i]`) is the peer's token,
/// or the reference's top-2 margin there is below `noise` (a choice last-bit differences can
/// flip). Returns the positions that differ, each with its margin, for the caller to print;
/// panics naming every difference above `noise`.
pub fn assert_teacher_forced_greedy(
    what: &str,
    peer: &[u32],
    rows: &[Vec<f32>],
    noise: f32,
) -> Vec<(usize, f32)> {
    assert_eq!(rows.len(), peer.len(), "{what}: one row per peer token");
    let differ: Vec<(usize, f32)> = peer
        .iter()
        .zip(rows)
        .enumerate()
        .filter(|(_, (token, row))| fak::reference::ops::argmax(row) != **token)
        .map(|(i, (_, row))| (i, top2_margin(row)))
        .collect();
    let real: Vec<_> = differ
        .iter()
        .filter(|(_, m)| m.is_nan() || *m >= noise)
        .collect();
    assert!(
        real.is_empty(),
        "{what}: the reference's argmax differs from the peer's token at (output, margin) {real:?} with margins ≥ {noise}; all differences {differ:?}"
    );
    differ
}
