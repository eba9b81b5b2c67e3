//! Every kernel on the test GPU against the CPU, and every variant's naga translation.
//!
//! One test binary for the files below (they stay where they are): each binary links the engine,
//! wgpu and naga, so fewer of them keep the target small. CI runs one file's module at a time
//! (`ci/test.sh` `run_tests`); `tests/common/groups.rs` checks that every test file is in a group.

/// The wgpu context: adapter choice, limits, features, runnable paths.
#[path = "../gpu_context.rs"]
mod gpu_context;

/// The shared workgroup reductions, through the reduce_probe test kernel, on every variant.
#[path = "../gpu_reduce.rs"]
mod gpu_reduce;

/// The dequantize kernel against fak::quant::dequantize on every type and variant.
#[path = "../gpu_dequant.rs"]
mod gpu_dequant;

/// The mat-vec kernel against dequantize-then-f64-dot on every type, variant and batch size.
#[path = "../gpu_matvec.rs"]
mod gpu_matvec;

/// The prefill mat-mul against dequantize-then-f64 on every type, variant and ragged shape.
#[path = "../gpu_matmul.rs"]
mod gpu_matmul;

/// The embedding lookup against the CPU dequantizer on every type, ids at an offset, invalid ids.
#[path = "../gpu_embed.rs"]
mod gpu_embed;

/// RMSNorm against fak::reference::ops::rms_norm: strided per-head rows, in place, weightless.
#[path = "../gpu_rms_norm.rs"]
mod gpu_rms_norm;

/// Per-head norm + RoPE + KV write in one dispatch against the reference ops and the paged layout:
/// pairings, partial rotary, divisors, positions to 2^20, prefill continuation across pages,
/// batched decode on shuffled pages, dropped tokens, f32/f16 caches.
#[path = "../gpu_rope_kv.rs"]
mod gpu_rope_kv;

/// SwiGLU, residual add and the sigmoid gate against fak::reference::ops on strided views.
#[path = "../gpu_elementwise.rs"]
mod gpu_elementwise;

/// Greedy argmax against fak::reference::ops::argmax: ties, NaN, ±0, last row and every row.
#[path = "../gpu_argmax.rs"]
mod gpu_argmax;

/// The KV cache's page copy (copy-on-write of a cached page), f32/f16.
#[path = "../gpu_kv_cache.rs"]
mod gpu_kv_cache;

/// Decode attention against fak::reference::ops::attend: GQA, splits, batched sequences, f16.
#[path = "../gpu_attn_decode.rs"]
mod gpu_attn_decode;

/// Causal prefill attention (flash) against fak::reference::ops::attend, continuing a cache.
#[path = "../gpu_attn_prefill.rs"]
mod gpu_attn_prefill;

/// rope_kv's cache write feeding prefill and then decode attention in one pass each, vs the reference.
#[path = "../gpu_attention_step.rs"]
mod gpu_attention_step;

/// The Gated DeltaNet causal conv (ssm_conv) against the CPU reference.
#[path = "../gpu_conv.rs"]
mod gpu_conv;

/// The gated RMSNorm of Gated DeltaNet outputs against the CPU reference.
#[path = "../gpu_gated_norm.rs"]
mod gpu_gated_norm;

/// Gated DeltaNet: gates and q/k norms, the delta rule (recurrent and chunked) against the CPU
/// recurrence, prefill then decode, the whole layer, dispatch counts, state snapshots.
#[path = "../gpu_gated_delta.rs"]
mod gpu_gated_delta;

/// Every kernel variant translates with naga to SPIR-V (spirv-val), MSL and HLSL.
#[path = "../portability.rs"]
mod portability;
