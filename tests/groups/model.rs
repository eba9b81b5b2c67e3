//! Whole models on the GPU against the CPU reference and the peers (mlx_lm, llama.cpp).
//!
//! One test binary for the files below (they stay where they are): each binary links the engine,
//! wgpu and naga, so fewer of them keep the target small. CI runs one file's module at a time
//! (`ci/test.sh` `run_tests`); `tests/common/groups.rs` checks that every test file is in a group.

/// The dense model end to end on the GPU against the CPU reference, mlx_lm and llama.cpp.
#[path = "../model_qwen3.rs"]
mod model_qwen3;

/// Qwen2 (q/k/v biases) end to end on the GPU against the CPU reference, mlx_lm and llama.cpp.
#[path = "../model_qwen2.rs"]
mod model_qwen2;

/// The hybrid model (qwen35) end to end on the GPU against the CPU reference.
#[path = "../model_qwen35.rs"]
mod model_qwen35;

/// The Qwen3.5 CPU reference against mlx_lm (Hugging Face export) and the llama.cpp peer (same
/// GGUF), and clear errors for inconsistent qwen35 files.
#[path = "../reference_qwen35.rs"]
mod reference_qwen35;
