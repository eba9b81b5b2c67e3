//! Utilities shared by the integration tests.

pub mod fuzz;
pub mod gpu;
#[cfg(test)]
mod groups;
pub mod model;
pub mod pin;
pub mod reduce_probe;
pub mod synth_files;
pub mod wgsl_module;

// The kernel checks (cases, CPU answers, tolerances) live in the harness, whose selftest runs
// them on a user's adapter; the GPU tests assert the same cases.
pub use fak_harness::checks::{
    Bound, Measured, Output, Tolerance, argmax, assert_close, assert_dequantized, assert_within,
    attn_decode, attn_prefill, compare, dequant, elementwise, embed, gdn, inputs, kv, matmul,
    matvec, measure, poisoned_f32, poisoned_q8, quantize_q8_of, rms_norm, rng, rope_kv, variants,
};
pub use fak_harness::packet::metrics::cosine;
pub use gpu::gpu;
pub mod harness;
pub mod peer;
pub mod serve;

use std::path::PathBuf;

/// `tests/fixtures/<rel>`; every fixture says where it came from in `tests/fixtures/README.md`.
pub fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(rel)
}

/// The llama.cpp version CI builds as the peer engine (the source the `llama-cpp-python` sdist
/// of this version carries; llama.cpp commit 0c1e57098).
pub const LLAMA_CPP_PEER_VERSION: &str = "0.3.36";

/// Where `ci/build-llama-cpp.sh` installs the peer's binaries: `$FAK_LLAMA_CPP_BIN` if set,
/// else `${FAK_CACHE:-~/.cache/fak}/llama.cpp-<version>/bin`.
pub fn llama_cpp_bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("FAK_LLAMA_CPP_BIN") {
        return dir.into();
    }
    let cache = std::env::var_os("FAK_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/fak")
        });
    cache
        .join(format!("llama.cpp-{LLAMA_CPP_PEER_VERSION}"))
        .join("bin")
}

/// A peer binary (`llama-quantize`, `llama-tokenize`, …). Tests that need the peer fail, loudly,
/// when it is missing: the README's test command (`ci/test.sh`) builds it first.
pub fn llama_cpp_tool(name: &str) -> PathBuf {
    let path = llama_cpp_bin_dir().join(name);
    assert!(
        path.is_file(),
        "llama.cpp peer tool {} not found: build it with ci/build-llama-cpp.sh \
         (or point FAK_LLAMA_CPP_BIN at a directory holding it)",
        path.display()
    );
    path
}

/// The Python interpreter that has the test oracles installed (`gguf`, later `mlx_lm`):
/// `$FAK_PYTHON`, else `python3`.
pub fn python() -> String {
    std::env::var("FAK_PYTHON").unwrap_or_else(|_| "python3".into())
}
