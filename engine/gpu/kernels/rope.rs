//! `rope`: rotary position embedding in place, NeoX or adjacent pairing, partial rotary, optional
//! per-frequency divisors (wgsl/rope.wgsl).

use super::support::{
    self, Positions, View, entry, positions_binding, shape_error, step_wgsl, view_binding, words,
};
use crate::gpu::buffers::{uniform, upload};
use crate::gpu::context::GpuContext;
use crate::gpu::error::GpuError;
use crate::gpu::kernel::{
    Kernel, KernelSource, KernelVariant, PipelineSpec, WgslFile, WgslModule, build, wgsl,
};
use crate::gpu::layout::Slot;
use crate::gpu::paths::{Axes, KernelPaths};
use crate::gpu::step::StepBuffer;
use crate::model::RopePairing;

const ROPE: WgslFile = step_wgsl!("rope.wgsl");
/// The exactly reduced rotary angle (`angle`), shared with the fused rope_kv kernel.
pub(crate) const ROPE_ANGLE: WgslFile = step_wgsl!("rope_angle.wgsl");
/// x, table, token_slots, params, step.
const SLOTS: &[Slot] = &[
    Slot::ReadWrite,
    Slot::Read,
    Slot::Read,
    Slot::Uniform,
    Slot::Uniform,
];
const WG: u32 = 64;
/// Positions must stay below 2^24 (the kernel splits them into two 12-bit halves).
pub const MAX_POSITION: u32 = 1 << 24;

/// `Params` of wgsl/rope.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    x: support::ViewParams,
    n_heads: u32,
    half_rot: u32,
    neox: u32,
    pad: u32,
}

/// The per-frequency table a rope binding reads: for i < n_rot/2, f = base^(−2i/n_rot) /
/// (factor_i · 2π) computed in f64, stored as (f_hi, f_mid, f_lo, 0) with f_hi and f_mid holding
/// 12 significant bits each (wgsl/rope.wgsl says why). One table serves every layer's q and k with the same rotation.
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
        let error = |message: String| shape_error(Rope::NAME, message);
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

/// The heads a rope binding rotates: `n_heads` heads of `head_dim` per token (the first `n_rot`
/// dims of each, n_rot from the table), for up to `max_tokens` tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RopeShape {
    pub n_heads: u32,
    pub head_dim: u32,
    pub pairing: RopePairing,
    pub max_tokens: u32,
}

/// The RoPE kernel: one pipeline per position source.
pub struct Rope {
    layout: wgpu::BindGroupLayout,
    /// Index: `TOKEN_TABLE`.
    pipelines: Vec<wgpu::ComputePipeline>,
    placeholder: wgpu::Buffer,
    max_per_dimension: u32,
}

/// Heads bound for [`Rope::encode`].
pub struct RopeBinding {
    group: wgpu::BindGroup,
    pipeline: usize,
    items_per_token: u64,
    max_tokens: u32,
}

impl Kernel for Rope {
    const NAME: &'static str = "rope";
    const AXES: Axes = Axes::NONE;

    fn source(variant: KernelPaths) -> KernelSource {
        let module = WgslModule::new(variant)
            .with(wgsl::GRID)
            .with(wgsl::STEP)
            .with(support::VIEW)
            .with(support::POSITIONS)
            .with(ROPE_ANGLE)
            .with(ROPE);
        let pipelines = [false, true]
            .map(|table| PipelineSpec {
                label: format!("rope token_table={table}"),
                entry_point: "main",
                constants: vec![("WG", f64::from(WG)), ("TOKEN_TABLE", f64::from(table))],
            })
            .to_vec();
        KernelSource {
            module,
            slots: SLOTS,
            pipelines,
        }
    }
}

impl Rope {
    /// Builds the kernel (it has one variant, so `paths` only has to be valid for the device).
    pub fn new(ctx: &GpuContext, paths: KernelPaths) -> Result<Self, GpuError> {
        let variant = KernelVariant::of::<Self>(Self::AXES.select(paths));
        let built = build(ctx, &variant)?;
        Ok(Rope {
            layout: built.layout,
            pipelines: built.pipelines,
            placeholder: support::placeholder(ctx),
            max_per_dimension: ctx.device.limits().max_compute_workgroups_per_dimension,
        })
    }

    /// Binds heads of `shape` in `x` (rotated in place) with the frequencies of `table`, the
    /// positions from `positions` and the token count from `step`.
    pub fn bind(
        &self,
        ctx: &GpuContext,
        shape: RopeShape,
        x: View<'_>,
        table: &RopeTable,
        positions: Positions<'_>,
        step: &StepBuffer,
    ) -> Result<RopeBinding, GpuError> {
        let RopeShape {
            n_heads,
            head_dim,
            pairing,
            max_tokens,
        } = shape;
        let n_rot = table.n_rot;
        if n_heads == 0 || n_rot > head_dim {
            return Err(shape_error(
                Self::NAME,
                format!(
                    "{n_heads} heads of {head_dim} with n_rot = {n_rot}: need heads and n_rot ≤ head_dim"
                ),
            ));
        }
        let x_binding = view_binding(ctx, Self::NAME, "x", &x, max_tokens, n_heads, head_dim)?;
        let table_binding = table.binding(ctx, Self::NAME)?;
        let slots = positions_binding(ctx, Self::NAME, positions, &self.placeholder, max_tokens)?;
        let params = uniform(
            ctx,
            "rope params",
            &Params {
                x: x.params(),
                n_heads,
                half_rot: n_rot / 2,
                neox: u32::from(pairing == RopePairing::Neox),
                pad: 0,
            },
        );
        let group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("rope"),
            layout: &self.layout,
            entries: &[
                entry(0, x_binding),
                entry(1, table_binding),
                entry(2, slots),
                entry(3, params.as_entire_binding()),
                entry(4, step.buffer.as_entire_binding()),
            ],
        });
        let items_per_token = u64::from(n_heads) * u64::from(n_rot / 2);
        let binding = RopeBinding {
            group,
            pipeline: usize::from(positions.is_table()),
            items_per_token,
            max_tokens,
        };
        support::grid(
            self.workgroups(&binding, max_tokens),
            self.max_per_dimension,
        )?;
        Ok(binding)
    }

    fn workgroups(&self, binding: &RopeBinding, n_tokens: u32) -> u64 {
        (u64::from(n_tokens.min(binding.max_tokens)) * binding.items_per_token)
            .div_ceil(u64::from(WG))
    }

    /// Records the dispatch for a step of `n_tokens` tokens (at most the binding's `max_tokens`).
    pub fn encode(&self, pass: &mut wgpu::ComputePass, binding: &RopeBinding, n_tokens: u32) {
        pass.set_pipeline(&self.pipelines[binding.pipeline]);
        pass.set_bind_group(0, &binding.group, &[]);
        support::grid_within_bound(self.workgroups(binding, n_tokens), self.max_per_dimension)
            .dispatch(pass);
    }
}
