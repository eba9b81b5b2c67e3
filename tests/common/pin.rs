//! Bit-exact fingerprints of a model's logits: the "before" of a behaviour-preserving change to
//! the engine (issue 17 moves the models into shared blocks and one registry; the GPU must then
//! compute exactly what it computed before, on every kernel path and step shape).
//!
//! The model suites fingerprint the logits their tests already compute (every path, every step
//! shape, the integer path, a quantized prefill) and hold them to tables recorded on the engine
//! before the move: the one place a hard-coded result is right. A change that means to alter
//! what the GPU computes (a kernel's summation order, the synth recipe) re-records them from
//! the table the failing test prints.

use sha2::{Digest, Sha256};

/// The first 8 bytes of the SHA-256 of `rows`' f32 bytes, in order, as hex.
pub fn fingerprint(rows: &[Vec<f32>]) -> String {
    let mut hash = Sha256::new();
    for row in rows {
        hash.update(bytemuck::cast_slice(row));
    }
    hash.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The adapter the tables were recorded on: CI's lavapipe. Another adapter computes other bits
/// by design (its subgroup width, its matrix units and integer dot products pick other kernels
/// and summation orders; on the H200 every pin differs while every cosine check passes,
/// 2026-12-05), so there the table is printed, not compared.
const PINNED_ON: &str = "llvmpipe";

/// Checks `got` ((what was run, fingerprint), in order) against `pinned` on the adapter the
/// pins were recorded on ([`PINNED_ON`]); on a difference the message holds the table to paste.
pub fn assert_pinned(got: &[(String, String)], pinned: &[(&str, &str)]) {
    let same = got.len() == pinned.len()
        && got
            .iter()
            .zip(pinned)
            .all(|((what, hash), (w, h))| what == w && hash == h);
    let table: String = got
        .iter()
        .map(|(what, hash)| format!("    (\"{what}\", \"{hash}\"),\n"))
        .collect();
    let adapter = &crate::gpu().facts().name;
    if !adapter.starts_with(PINNED_ON) {
        eprintln!(
            "pins not compared on {adapter} (recorded on {PINNED_ON}); this engine computes:\n{table}"
        );
        return;
    }
    assert!(
        same,
        "the logits differ from the pinned fingerprints; what this engine computes:\n{table}"
    );
}

/// A short name of the fast paths `forced` leaves on: `sg` subgroups, `f16` (`-` where off).
pub fn path_name(forced: fak::gpu::Forced) -> String {
    let on = |off: bool, name: &'static str| if off { "-" } else { name };
    format!(
        "{}/{}",
        on(forced.no_subgroup, "sg"),
        on(forced.no_f16, "f16")
    )
}
