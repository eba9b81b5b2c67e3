//! fak: a portable GPU inference engine for Qwen3-class language models.
//!
//! GGUF files in, WGSL kernels run through wgpu (Metal, Vulkan, DX12) out. The modules follow the
//! layout of `docs/DESIGN.md`: `gguf` reads and writes the container, `quant` holds the block
//! formats, `gpu` owns the wgpu context and one typed wrapper per kernel.

pub mod cache;
pub mod files;
pub mod gguf;
pub mod gpu;
pub mod model;
pub mod quant;
pub mod reference;
pub mod runtime;
pub mod tokenizer;

#[cfg(test)]
mod layers;
