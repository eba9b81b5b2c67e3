//! `rope`: the rotary position embedding's frequency table, the host half of the exactly
//! reduced angle (wgsl/rope_angle.wgsl) that the fused `rope_kv` kernel rotates q and k with.

use super::rope_kv::RopeKv;
use super::support::{shape_error, step_wgsl, words};
use crate::gpu::buffers::upload;
use crate::gpu::context::GpuContext;
use crate::gpu::error::GpuError;
use crate::gpu::kernel::{Kernel, WgslFile};

/// The exactly reduced rotary angle (`angle`): positions below 2^24 (it splits them into two
/// 12-bit halves).
pub(crate) const ROPE_ANGLE: WgslFile = step_wgsl!("rope_angle.wgsl");

/// How RoPE pairs the dimensions of a head (model-spec.md §4.d).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum RopePairing {
    /// (v[2i], v[2i+1]): llama, whose converter permutes Q/K rows into this order.
    Adjacent,
    /// (v[i], v[i + n_rot/2]): qwen2, qwen3, qwen3.5.
    Neox,
}

/// The per-frequency table a rope_kv binding reads: for i < n_rot/2, f = base^(−2i/n_rot) /
/// (factor_i · 2π) computed in f64, stored as (f_hi, f_mid, f_lo, 0) with f_hi and f_mid holding
/// 12 significant bits each (wgsl/rope_angle.wgsl says why). One table serves every layer's q and k
/// with the same rotation.
pub struct RopeTable {
    buffer: wgpu::Buffer,
    n_rot: u32,
}

/// `v` rounded to f32 and then cut to its top 12 significant bits; the caller puts the remainder
/// (which may be negative when the rounding went up) in the next part.
fn twelve_bits(v: f64) -> f32 {
    f32::from_bits((v as f32).to_bits() & 0xffff_f000)
}

impl RopeTable {
    /// The table for `n_rot` rotated dims (even) with frequency base `base` and, for llama3-style
    /// scaling, the divisors `freq_factors` (`rope_freqs.weight`, n_rot/2 values).
    pub fn new(
        ctx: &GpuContext,
        n_rot: u32,
        base: f32,
        freq_factors: Option<&[f32]>,
    ) -> Result<Self, GpuError> {
        let table = Self::values(n_rot, base, freq_factors)?;
        let buffer = upload(ctx, "rope table", bytemuck::cast_slice(&table))?;
        Ok(RopeTable { buffer, n_rot })
    }

    /// The table's (f_hi, f_mid, f_lo, 0) entries, checked: n_rot even and positive, base > 1, factors
    /// positive and n_rot/2 of them.
    pub fn values(
        n_rot: u32,
        base: f32,
        freq_factors: Option<&[f32]>,
    ) -> Result<Vec<[f32; 4]>, GpuError> {
        let error = |message: String| shape_error(RopeKv::NAME, message);
        if n_rot == 0 || !n_rot.is_multiple_of(2) {
            return Err(error(format!("n_rot = {n_rot} must be even and positive")));
        }
        if !(base.is_finite() && base > 1.0) {
            return Err(error(format!(
                "the frequency base {base} must be finite and > 1"
            )));
        }
        let half = n_rot as usize / 2;
        if let Some(f) = freq_factors {
            if f.len() != half {
                return Err(error(format!(
                    "{} frequency factors for n_rot = {n_rot}: expected {half}",
                    f.len()
                )));
            }
            if let Some(bad) = f.iter().find(|v| !(v.is_finite() && **v > 0.0)) {
                return Err(error(format!(
                    "frequency factor {bad} must be finite and positive"
                )));
            }
        }
        Ok((0..half)
            .map(|i| {
                let inv = f64::from(base).powf(-2.0 * i as f64 / f64::from(n_rot));
                let factor = freq_factors.map_or(1.0, |f| f64::from(f[i]));
                let turns = inv / factor / std::f64::consts::TAU;
                let hi = twelve_bits(turns);
                let mid = twelve_bits(turns - f64::from(hi));
                let lo = (turns - f64::from(hi) - f64::from(mid)) as f32;
                [hi, mid, lo, 0.0]
            })
            .collect())
    }

    pub fn n_rot(&self) -> u32 {
        self.n_rot
    }

    /// The binding of the table's n_rot/2 entries.
    pub(crate) fn binding(
        &self,
        ctx: &GpuContext,
        kernel: &'static str,
    ) -> Result<wgpu::BindingResource<'_>, GpuError> {
        words(
            ctx,
            kernel,
            "the rope table",
            &self.buffer,
            2 * u64::from(self.n_rot),
        )
    }
}
