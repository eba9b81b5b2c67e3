//! Gated DeltaNet test utilities: seeded inputs in the layouts the kernels use, the CPU oracle of
//! one GDN layer after its projections (the steps of `fak::reference::qwen35`'s `delta_net`,
//! built from the same public functions), and conversions between the CPU and GPU state layouts.

use super::Tolerance;
use fak::gpu::KernelPaths;
use fak::gpu::kernels::delta_prep::{DeltaPrep, PrepBinding, PrepIo};
use fak::gpu::kernels::delta_state::HeadMapping;
use fak::gpu::kernels::delta_state::{DeltaDims, DeltaState, TensorRef};
use fak::gpu::kernels::gated_delta::{DecodeBinding, DecodeIo, GatedDeltaDecode};
use fak::gpu::kernels::gated_delta_chunk::{
    ChunkBinding, ChunkIo, ChunkScratch, GatedDeltaChunked,
};
use fak::gpu::kernels::gated_norm::{GatedNorm, NormBinding, NormIo};
use fak::gpu::kernels::gdn_decode::{GdnDecode, GdnDecodeBinding, GdnDecodeIo, Split};
use fak::gpu::kernels::quantize_q8::{CodesAndScales, Q8Vectors};
use fak::gpu::kernels::ssm_conv::{ConvBinding, ConvIo, SsmConv};
use fak::gpu::kernels::support::View;
use fak::gpu::step::{MidSave, SeqBatch, SeqRows, SequenceTable};
use fak::gpu::{GpuContext, GpuError, read_back_f32, upload, write};

use fak::quant::GgmlType;
use fak::reference::gated_delta::gated_delta_step;
use fak::reference::ops::{rms_norm, sigmoid, silu};
use fak::reference::qwen35::{causal_conv_silu, l2_norm, softplus};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// The delta rule's outputs o = Sᵀq̂ are sums of dk products of state entries (|S| ≲ 1) and q̂
/// (‖q̂‖ = 1/√dk); every f32 step rounds dk-term dot products and the rank-1 update, the state
/// carries those roundings from token to token (damped by e^g < 1), and the chunked form adds
/// the (I + A)⁻¹ solve. Measured on lavapipe over every shape and length here (T ≤ 130): under
/// 3e-6 relative to the f64 oracle for outputs and states. 3e-5 relative with a 3e-6 floor
/// leaves ten times that for other drivers' summation orders, while a wrong key head, gate or
/// chunk boundary moves outputs by more than 1e-2.
pub const DELTA_TOL: Tolerance = Tolerance {
    rel: 3e-5,
    abs: 3e-6,
};

/// Through the whole layer the delta rule starts from conv and prep outputs that already differ
/// from the CPU's by ~1e-7 relative, over up to 70 tokens, and y carries o's error times
/// silu(z)·w/RMS(o_h). Measured worst on lavapipe: |Δy| = 4e-6 on a y of 0.04 (a 1e-4 relative
/// error on an entry ~100 times below the largest), 0.14 of this tolerance.
pub const LAYER_TOL: Tolerance = Tolerance {
    rel: 2e-4,
    abs: 2e-5,
};

/// [`LAYER_TOL`] for a layer whose chunked delta rule runs on the matrix units: its products
/// split each f32 operand into an f16 pair (hi + lo), which keeps ~22 bits only inside f16's
/// normal range, fewer for smaller magnitudes, and y carries o's error over RMS(o_h). Measured
/// on an H100 (2026-12-06 #14, every coop form alike, from random start states): |Δy| = 3.2e-5 on
/// a y of 3.0e-2 (1.1e-3 relative) with o inside LAYER_TOL. Ten times LAYER_TOL's relative part
/// still sits far below the > 1e-2 a wrong key head, gate or chunk boundary moves an output by.
pub const COOP_LAYER_TOL: Tolerance = Tolerance {
    rel: 2e-3,
    abs: 2e-5,
};

/// The conv and prep outputs of a layer step (sums of K taps, one l2 norm, softplus and sigmoid
/// in f32 against the f64 oracle): 1e-5 relative with a 1e-5 floor.
pub const STEP_TOL: Tolerance = Tolerance {
    rel: 1e-5,
    abs: 1e-5,
};

/// A layer shape with the family's eps.
pub fn dims(nk: u32, nv: u32, dk: u32, dv: u32, conv_kernel: u32, map: HeadMapping) -> DeltaDims {
    DeltaDims {
        nk,
        nv,
        dk,
        dv,
        conv_kernel,
        head_mapping: map,
        eps: 1e-6,
    }
}

pub fn f32_buffer(ctx: &GpuContext, label: &str, data: &[f32]) -> wgpu::Buffer {
    upload(ctx, label, bytemuck::cast_slice(data)).expect("upload")
}

pub fn read(ctx: &GpuContext, buffer: &wgpu::Buffer, n: usize) -> Vec<f32> {
    read_back_f32(ctx, buffer, 0..4 * n as u64).expect("readback")
}

/// A GGUF F32 tensor held in `buffer`.
pub fn f32_tensor<'a>(name: &'a str, buffer: &'a wgpu::Buffer) -> TensorRef<'a> {
    TensorRef {
        name,
        ty: GgmlType::F32,
        buffer,
    }
}

pub fn uniform_vec(rng: &mut ChaCha8Rng, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(lo..hi)).collect()
}

/// One layer's state for every slot in the CPU reference's layouts: conv rows oldest first, and
/// per value head S row-major over key dims (`s[i·dv + j]`).
#[derive(Clone, Debug, PartialEq)]
pub struct CpuState {
    pub conv: Vec<Vec<Vec<f32>>>,
    pub recurrent: Vec<Vec<Vec<f32>>>,
}

impl CpuState {
    pub fn zeros(d: &DeltaDims, slots: usize) -> CpuState {
        let (nv, dk, dv) = (d.nv as usize, d.dk as usize, d.dv as usize);
        CpuState {
            conv: vec![vec![vec![0.0; d.conv_dim() as usize]; d.conv_kernel as usize - 1]; slots],
            recurrent: vec![vec![vec![0.0; dk * dv]; nv]; slots],
        }
    }

    /// A state as a sequence would leave it: conv rows like raw projections, recurrent states
    /// of moderate size.
    pub fn random(d: &DeltaDims, slots: usize, rng: &mut ChaCha8Rng) -> CpuState {
        let mut s = CpuState::zeros(d, slots);
        for row in s.conv.iter_mut().flatten() {
            *row = uniform_vec(rng, row.len(), -1.0, 1.0);
        }
        for head in s.recurrent.iter_mut().flatten() {
            *head = uniform_vec(rng, head.len(), -0.5, 0.5);
        }
        s
    }

    /// Writes every slot into the GPU state (recurrent heads transposed to dv rows of dk).
    pub fn upload(&self, ctx: &GpuContext, d: &DeltaDims, state: &DeltaState) {
        let conv: Vec<f32> = self.conv.iter().flatten().flatten().copied().collect();
        let mut rec = Vec::new();
        for head in self.recurrent.iter().flatten() {
            rec.extend(transpose(head, d.dk as usize, d.dv as usize));
        }
        write(ctx, &state.conv, 0, bytemuck::cast_slice(&conv)).expect("conv state");
        write(ctx, &state.recurrent, 0, bytemuck::cast_slice(&rec)).expect("recurrent state");
    }

    pub fn download(ctx: &GpuContext, d: &DeltaDims, state: &DeltaState) -> CpuState {
        let slots = state.slots() as usize;
        let (nv, dk, dv) = (d.nv as usize, d.dk as usize, d.dv as usize);
        let cd = d.conv_dim() as usize;
        let conv = read(ctx, &state.conv, slots * (d.conv_kernel as usize - 1) * cd);
        let rec = read(ctx, &state.recurrent, slots * nv * dk * dv);
        CpuState {
            conv: conv
                .chunks(cd * (d.conv_kernel as usize - 1))
                .map(|slot| slot.chunks(cd).map(<[f32]>::to_vec).collect())
                .collect(),
            recurrent: rec
                .chunks(nv * dk * dv)
                .map(|slot| slot.chunks(dk * dv).map(|h| transpose(h, dv, dk)).collect())
                .collect(),
        }
    }

    /// Every value of slot `slot`, conv first, for comparisons.
    pub fn flat(&self, slot: usize) -> Vec<f32> {
        let conv = self.conv[slot].iter().flatten();
        conv.chain(self.recurrent[slot].iter().flatten())
            .copied()
            .collect()
    }
}

/// `rows × cols` row-major to `cols × rows` row-major.
pub fn transpose(m: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    (0..rows * cols)
        .map(|k| m[(k % rows) * cols + k / rows])
        .collect()
}

/// The F32 weights of one GDN layer that the kernels read.
pub struct LayerWeights {
    /// `[conv_dim][K]`, tap 0 the oldest.
    pub conv: Vec<f32>,
    pub ssm_a: Vec<f32>,
    pub dt_bias: Vec<f32>,
    pub norm: Vec<f32>,
}

impl LayerWeights {
    pub fn random(d: &DeltaDims, rng: &mut ChaCha8Rng) -> LayerWeights {
        let nv = d.nv as usize;
        LayerWeights {
            conv: uniform_vec(rng, (d.conv_dim() * d.conv_kernel) as usize, -0.6, 0.6),
            // −exp(A_log) with A_log ∈ (−2, 1).
            ssm_a: (0..nv)
                .map(|_| -rng.random_range(-2.0f32..1.0).exp())
                .collect(),
            dt_bias: uniform_vec(rng, nv, -1.0, 1.0),
            norm: uniform_vec(rng, d.dv as usize, 0.5, 1.5),
        }
    }
}

/// The projections of T tokens, row-major per token: `m` (qkv), `b`, `a`, `z`.
pub struct Projections {
    pub m: Vec<f32>,
    pub b: Vec<f32>,
    pub a: Vec<f32>,
    pub z: Vec<f32>,
}

impl Projections {
    pub fn random(d: &DeltaDims, tokens: usize, rng: &mut ChaCha8Rng) -> Projections {
        let nv = d.nv as usize;
        Projections {
            m: uniform_vec(rng, tokens * d.conv_dim() as usize, -1.0, 1.0),
            b: uniform_vec(rng, tokens * nv, -3.0, 3.0),
            a: uniform_vec(rng, tokens * nv, -3.0, 3.0),
            z: uniform_vec(rng, tokens * d.value_dim() as usize, -2.0, 2.0),
        }
    }

    /// Token rows `range` of every projection.
    pub fn rows(&self, d: &DeltaDims, range: std::ops::Range<usize>) -> Projections {
        let cut = |v: &[f32], w: usize| v[range.start * w..range.end * w].to_vec();
        let (cd, nv, vd) = (d.conv_dim() as usize, d.nv as usize, d.value_dim() as usize);
        Projections {
            m: cut(&self.m, cd),
            b: cut(&self.b, nv),
            a: cut(&self.a, nv),
            z: cut(&self.z, vd),
        }
    }
}

/// Conv + SiLU of one raw row against a slot's conv rows, which it then rolls.
pub fn cpu_conv(d: &DeltaDims, w: &[f32], conv: &mut Vec<Vec<f32>>, m: &[f32]) -> Vec<f32> {
    let mut window: Vec<&[f32]> = conv.iter().map(Vec::as_slice).collect();
    window.push(m);
    let out = causal_conv_silu(&window, w);
    debug_assert_eq!(out.len(), d.conv_dim() as usize);
    conv.remove(0);
    conv.push(m.to_vec());
    out
}

/// q̂, k̂ (in place of q, k in a conv-output row) and the gates of one token.
pub fn cpu_prep(
    d: &DeltaDims,
    mixed: &mut [f32],
    b: &[f32],
    a: &[f32],
    w: &LayerWeights,
) -> (Vec<f32>, Vec<f32>) {
    let dk = d.dk as usize;
    let q_scale = 1.0 / (dk as f32).sqrt();
    for p in 0..2 * d.nk as usize {
        let head = &mut mixed[p * dk..(p + 1) * dk];
        let normed = l2_norm(head, d.eps);
        let scale = if p < d.nk as usize { q_scale } else { 1.0 };
        for (x, n) in head.iter_mut().zip(normed) {
            *x = n * scale;
        }
    }
    let beta = b.iter().map(|&x| sigmoid(x)).collect();
    let g = (0..d.nv as usize)
        .map(|h| w.ssm_a[h] * softplus(a[h] + w.dt_bias[h]))
        .collect();
    (beta, g)
}

/// One recurrent step of every value head of a slot, from a prepared `mixed` row.
pub fn cpu_delta(
    d: &DeltaDims,
    heads: &mut [Vec<f32>],
    mixed: &[f32],
    beta: &[f32],
    g: &[f32],
) -> Vec<f32> {
    let (nk, nv, dk, dv) = (d.nk as usize, d.nv as usize, d.dk as usize, d.dv as usize);
    let key_dim = nk * dk;
    let mut o = Vec::with_capacity(nv * dv);
    for (h, state) in heads.iter_mut().enumerate() {
        let kh = d.head_mapping.key_head(h, nk, nv);
        o.extend(gated_delta_step(
            state,
            &mixed[kh * dk..(kh + 1) * dk],
            &mixed[key_dim + kh * dk..key_dim + (kh + 1) * dk],
            &mixed[2 * key_dim + h * dv..2 * key_dim + (h + 1) * dv],
            beta[h],
            g[h],
        ));
    }
    o
}

/// `y_h = w ⊙ RMSNorm₀(o_h) ⊙ silu(z_h)` for every head of one token.
pub fn cpu_gated_norm(d: &DeltaDims, o: &[f32], z: &[f32], w: &[f32]) -> Vec<f32> {
    let dv = d.dv as usize;
    o.chunks(dv)
        .zip(z.chunks(dv))
        .flat_map(|(oh, zh)| {
            let normed = rms_norm(oh, Some(w), d.eps);
            normed
                .into_iter()
                .zip(zh)
                .map(|(n, &zv)| n * silu(zv))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// What the CPU layer produced for a run of tokens, row-major per token.
pub struct CpuOutputs {
    /// Conv outputs after prep (q̂, k̂ normalised).
    pub mixed: Vec<f32>,
    /// β then g per token.
    pub gates: Vec<f32>,
    pub o: Vec<f32>,
    pub y: Vec<f32>,
}

/// The whole layer on the CPU for `count` sequences of `len` tokens (row s·len + t) on
/// `slots[s]`, token by token.
pub fn cpu_layer(
    d: &DeltaDims,
    w: &LayerWeights,
    state: &mut CpuState,
    x: &Projections,
    slots: &[usize],
    len: usize,
) -> CpuOutputs {
    let (cd, nv, vd) = (d.conv_dim() as usize, d.nv as usize, d.value_dim() as usize);
    let mut out = CpuOutputs {
        mixed: Vec::new(),
        gates: Vec::new(),
        o: Vec::new(),
        y: Vec::new(),
    };
    for (s, &slot) in slots.iter().enumerate() {
        for t in 0..len {
            let r = s * len + t;
            let mut mixed = cpu_conv(
                d,
                &w.conv,
                &mut state.conv[slot],
                &x.m[r * cd..(r + 1) * cd],
            );
            let (beta, g) = cpu_prep(
                d,
                &mut mixed,
                &x.b[r * nv..(r + 1) * nv],
                &x.a[r * nv..(r + 1) * nv],
                w,
            );
            let o = cpu_delta(d, &mut state.recurrent[slot], &mixed, &beta, &g);
            out.y
                .extend(cpu_gated_norm(d, &o, &x.z[r * vd..(r + 1) * vd], &w.norm));
            out.mixed.extend(mixed);
            out.gates.extend(beta.iter().chain(&g));
            out.o.extend(o);
        }
    }
    out
}

/// Prepared delta-rule inputs for `tokens` rows: random conv outputs with q̂, k̂ normalised as
/// DeltaPrep leaves them, and gates with β ∈ (0, 1), g ≤ 0.
pub fn random_prepared(d: &DeltaDims, tokens: usize, rng: &mut ChaCha8Rng) -> (Vec<f32>, Vec<f32>) {
    let (cd, nv) = (d.conv_dim() as usize, d.nv as usize);
    let mut mixed = uniform_vec(rng, tokens * cd, -1.0, 1.0);
    let weights = LayerWeights::random(d, rng);
    let zeros = vec![0.0; nv];
    for row in mixed.chunks_mut(cd) {
        cpu_prep(d, row, &zeros, &zeros, &weights);
    }
    let mut gates = Vec::with_capacity(tokens * 2 * nv);
    for _ in 0..tokens {
        gates.extend((0..nv).map(|_| rng.random_range(0.02f32..0.98)));
        gates.extend((0..nv).map(|_| -rng.random_range(0.0f32..1.2)));
    }
    (mixed, gates)
}

/// Which form of the delta rule a [`GpuLayer`] step uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// GatedDeltaDecode: token by token.
    Recurrent,
    /// GatedDeltaChunked: chunks of 64.
    Chunked,
    /// GdnDecode: the whole layer of a decode step in one dispatch (one token per sequence). It
    /// writes y (and, where dv is whole q8 blocks, y's q8 blocks) and the state only: mixed,
    /// gates and o stay poisoned.
    Fused,
}

/// One GDN layer on the GPU as the model runs it (after the projections): conv, prep, the delta
/// rule in either form, gated norm, all recorded in one compute pass; the buffers are bound
/// once, inputs uploaded per step and outputs poisoned (NaN) before every step.
pub struct GpuLayer {
    pub dims: DeltaDims,
    pub state: DeltaState,
    pub table: SequenceTable,
    pub conv: SsmConv,
    pub prep: DeltaPrep,
    pub decode: GatedDeltaDecode,
    pub chunked: GatedDeltaChunked,
    pub norm: GatedNorm,
    pub fused: GdnDecode,
    pub bindings: LayerBindings,
    buffers: LayerBuffers,
    /// What chunk_prepare hands to chunk_scan, bound in `bindings.chunked`.
    chunk_scratch: ChunkScratch,
    max_tokens: u32,
}

pub struct LayerBindings {
    pub conv: ConvBinding,
    pub prep: PrepBinding,
    pub decode: DecodeBinding,
    pub chunked: ChunkBinding,
    pub norm: NormBinding,
    pub fused: GdnDecodeBinding,
}

struct LayerBuffers {
    /// The projections as the model stacks them: per token [m | z | b | a], so the kernels
    /// read m, z, b and a through strided views.
    proj: wgpu::Buffer,
    mixed: wgpu::Buffer,
    gates: wgpu::Buffer,
    o: wgpu::Buffer,
    y: wgpu::Buffer,
    /// y's q8 blocks, which the fused decode writes where [`GdnDecode::quantizes`] the shape.
    y_q8: Option<Q8Vectors>,
}

/// The GPU layer's outputs of one step, row-major per token.
pub struct GpuOutputs {
    pub mixed: Vec<f32>,
    pub gates: Vec<f32>,
    pub o: Vec<f32>,
    pub y: Vec<f32>,
    /// The fused decode's q8 blocks of y, one vector per row (None for the other forms, or
    /// where the shape is not whole blocks).
    pub y_q8: Option<Vec<CodesAndScales>>,
}

impl GpuLayer {
    /// Every kernel on `paths` (each keeps the axes it has), state for `slots` sequences,
    /// buffers for steps of up to `max_tokens` tokens in up to `max_seqs` sequences.
    pub fn new(
        ctx: &GpuContext,
        paths: KernelPaths,
        dims: DeltaDims,
        weights: &LayerWeights,
        limits: (u32, u32, u32),
    ) -> GpuLayer {
        let chunked = GatedDeltaChunked::new(ctx, paths, dims).expect("gated_delta_chunk");
        Self::with_chunked(ctx, paths, dims, weights, limits, chunked)
    }

    /// [`GpuLayer::new`] with this chunked kernel (a variant the tests build themselves).
    pub fn with_chunked(
        ctx: &GpuContext,
        paths: KernelPaths,
        dims: DeltaDims,
        weights: &LayerWeights,
        limits: (u32, u32, u32),
        chunked: GatedDeltaChunked,
    ) -> GpuLayer {
        let wg = fak::gpu::kernels::gdn_decode::workgroup_from_env().expect("FAK_GDN_DECODE_WG");
        let split = Split::from_env().expect("FAK_GDN_DECODE");
        Self::with_kernels(ctx, paths, dims, weights, limits, chunked, (wg, split))
    }

    /// [`GpuLayer::new`] with the fused decode in workgroups of `fused_wg` invocations.
    pub fn with_fused_workgroup(
        ctx: &GpuContext,
        paths: KernelPaths,
        dims: DeltaDims,
        weights: &LayerWeights,
        limits: (u32, u32, u32),
        fused_wg: u32,
    ) -> GpuLayer {
        let split = Split::from_env().expect("FAK_GDN_DECODE");
        Self::with_fused(ctx, paths, dims, weights, limits, (fused_wg, split))
    }

    /// [`GpuLayer::new`] with the fused decode in workgroups of `fused.0` invocations, split as
    /// `fused.1` says.
    pub fn with_fused(
        ctx: &GpuContext,
        paths: KernelPaths,
        dims: DeltaDims,
        weights: &LayerWeights,
        limits: (u32, u32, u32),
        fused: (u32, Split),
    ) -> GpuLayer {
        let chunked = GatedDeltaChunked::new(ctx, paths, dims).expect("gated_delta_chunk");
        Self::with_kernels(ctx, paths, dims, weights, limits, chunked, fused)
    }

    fn with_kernels(
        ctx: &GpuContext,
        paths: KernelPaths,
        dims: DeltaDims,
        weights: &LayerWeights,
        limits: (u32, u32, u32),
        chunked: GatedDeltaChunked,
        (fused_wg, split): (u32, Split),
    ) -> GpuLayer {
        let (max_tokens, max_seqs, slots) = limits;
        let d = dims;
        let rows = |w: u32| u64::from(max_tokens) * u64::from(w);
        let poisoned = |label: &str, w: u32| super::poisoned_f32(ctx, label, rows(w));
        let buffers = LayerBuffers {
            proj: poisoned("projections", proj_width(&d)),
            mixed: poisoned("mixed", d.conv_dim()),
            gates: poisoned("gates", 2 * d.nv),
            o: poisoned("o", d.value_dim()),
            y: poisoned("y", d.value_dim()),
            y_q8: GdnDecode::quantizes(&d)
                .then(|| super::poisoned_q8(ctx, "y q8", u64::from(d.value_dim()), max_seqs)),
        };
        let state = DeltaState::new(ctx, d, slots).expect("state");
        let table = SequenceTable::new(ctx, max_seqs, slots).expect("table");
        let conv_w = f32_buffer(ctx, "ssm_conv1d", &weights.conv);
        let ssm_a = f32_buffer(ctx, "ssm_a", &weights.ssm_a);
        let dt_bias = f32_buffer(ctx, "ssm_dt.bias", &weights.dt_bias);
        let norm_w = f32_buffer(ctx, "ssm_norm", &weights.norm);
        let conv = SsmConv::new(ctx, paths, d).expect("ssm_conv");
        let prep = DeltaPrep::new(ctx, paths, d).expect("delta_prep");
        let decode = GatedDeltaDecode::new(ctx, paths, d).expect("gated_delta");
        let scratch = ChunkScratch::new(ctx, &chunked, max_tokens, max_seqs).expect("scratch");
        let norm = GatedNorm::new(ctx, paths, d).expect("gated_norm");
        let fused = GdnDecode::with_split(ctx, paths, d, fused_wg, split).expect("gdn_decode");
        let b = &buffers;
        let proj = View::rows(&b.proj, proj_width(&d));
        let bindings = LayerBindings {
            conv: conv
                .bind(
                    ctx,
                    ConvIo {
                        m: proj,
                        weight: f32_tensor("blk.0.ssm_conv1d.weight", &conv_w),
                        table: &table,
                        state: &state,
                        y: &b.mixed,
                        max_tokens,
                    },
                )
                .expect("bind ssm_conv"),
            prep: prep
                .bind(
                    ctx,
                    PrepIo {
                        mixed: &b.mixed,
                        b: proj.at(d.conv_dim() + d.value_dim()),
                        a: proj.at(d.conv_dim() + d.value_dim() + d.nv),
                        ssm_a: f32_tensor("blk.0.ssm_a", &ssm_a),
                        dt_bias: f32_tensor("blk.0.ssm_dt.bias", &dt_bias),
                        gates: &b.gates,
                        max_tokens,
                    },
                )
                .expect("bind delta_prep"),
            decode: decode
                .bind(
                    ctx,
                    DecodeIo {
                        mixed: &b.mixed,
                        gates: &b.gates,
                        table: &table,
                        state: &state,
                        o: &b.o,
                        max_tokens,
                    },
                )
                .expect("bind gated_delta"),
            chunked: chunked
                .bind(
                    ctx,
                    ChunkIo {
                        mixed: &b.mixed,
                        gates: &b.gates,
                        table: &table,
                        state: &state,
                        scratch: &scratch,
                        o: &b.o,
                        max_tokens,
                    },
                )
                .expect("bind gated_delta_chunk"),
            norm: norm
                .bind(
                    ctx,
                    NormIo {
                        o: &b.o,
                        z: proj.strided(proj_width(&d), d.dv).at(d.conv_dim()),
                        weight: f32_tensor("blk.0.ssm_norm.weight", &norm_w),
                        y: &b.y,
                        max_tokens,
                    },
                )
                .expect("bind gated_norm"),
            fused: fused
                .bind(
                    ctx,
                    GdnDecodeIo {
                        m: proj,
                        z: proj.strided(proj_width(&d), d.dv).at(d.conv_dim()),
                        b: proj.at(d.conv_dim() + d.value_dim()),
                        a: proj.at(d.conv_dim() + d.value_dim() + d.nv),
                        conv_weight: f32_tensor("blk.0.ssm_conv1d.weight", &conv_w),
                        ssm_a: f32_tensor("blk.0.ssm_a", &ssm_a),
                        dt_bias: f32_tensor("blk.0.ssm_dt.bias", &dt_bias),
                        norm_weight: f32_tensor("blk.0.ssm_norm.weight", &norm_w),
                        table: &table,
                        state: &state,
                        y: &b.y,
                        y_q8: b.y_q8.as_ref(),
                        max_tokens,
                    },
                )
                .expect("bind gdn_decode"),
        };
        GpuLayer {
            dims: d,
            state,
            table,
            conv,
            prep,
            decode,
            chunked,
            norm,
            fused,
            bindings,
            buffers,
            chunk_scratch: scratch,
            max_tokens,
        }
    }

    /// Fills the chunked delta rule's scratch (both buffers) with NaN: a region a kernel reads
    /// before anything wrote it then shows in its outputs.
    pub fn poison_chunk_scratch(&self, ctx: &GpuContext) {
        let s = &self.chunk_scratch;
        for buffer in std::iter::once(&s.buffer).chain(&s.halves) {
            poison(ctx, buffer);
        }
    }

    /// One step over `count = slots.len()` sequences of `len` tokens with projections `x`.
    pub fn step(
        &self,
        ctx: &GpuContext,
        x: &Projections,
        slots: &[u32],
        len: u32,
        form: Form,
    ) -> GpuOutputs {
        self.run(ctx, x, form, |table| table.write(ctx, len, slots))
    }

    /// Several sequences at rows of their own in one step ([`SequenceTable::write_ragged`]: slot,
    /// first row, tokens, first position, and the mid-step snapshot each takes, if any; `x` holds
    /// every row, padding between them included). The outputs are read over all the step's rows.
    pub fn step_ragged(
        &self,
        ctx: &GpuContext,
        x: &Projections,
        seqs: &[SeqRows],
        form: Form,
    ) -> GpuOutputs {
        self.run(ctx, x, form, |table| table.write_ragged(ctx, seqs))
    }

    /// A chunked prefill of `len` tokens on `slot` from position `pos` (its chunks on the
    /// absolute grid: lead rows where `pos` is off it), with the state after `save.rows` of them
    /// also written to `save.slot` (a mid-step snapshot, at a position on the grid).
    pub fn prefill_at(
        &self,
        ctx: &GpuContext,
        x: &Projections,
        slot: u32,
        len: u32,
        pos: u32,
        save: Option<MidSave>,
    ) -> GpuOutputs {
        self.run(ctx, x, Form::Chunked, |table| {
            table.write_prefill(ctx, len, slot, pos, save)
        })
    }

    fn run(
        &self,
        ctx: &GpuContext,
        x: &Projections,
        form: Form,
        write_table: impl FnOnce(&SequenceTable) -> Result<SeqBatch, GpuError>,
    ) -> GpuOutputs {
        let d = self.dims;
        let b = &self.buffers;
        for buffer in [&b.mixed, &b.gates, &b.o, &b.y] {
            poison(ctx, buffer);
        }
        if let Some(q8) = &b.y_q8 {
            poison(ctx, &q8.codes);
            poison(ctx, &q8.scales);
        }
        self.write_proj(ctx, [Some(&x.m), Some(&x.z), Some(&x.b), Some(&x.a)]);
        let batch = write_table(&self.table).expect("sequence table");
        self.record_step(ctx, batch, form);
        let n = batch.rows as usize;
        GpuOutputs {
            mixed: read(ctx, &b.mixed, n * d.conv_dim() as usize),
            gates: read(ctx, &b.gates, n * 2 * d.nv as usize),
            o: read(ctx, &b.o, n * d.value_dim() as usize),
            y: read(ctx, &b.y, n * d.value_dim() as usize),
            y_q8: match (&b.y_q8, form) {
                (Some(q8), Form::Fused) => Some(
                    q8.read_back(ctx, u64::from(d.value_dim()), batch.rows)
                        .expect("read back y's q8 blocks"),
                ),
                _ => None,
            },
        }
    }

    fn record_step(&self, ctx: &GpuContext, batch: SeqBatch, form: Form) {
        let n = batch.rows;
        let k = &self.bindings;
        ctx.run_pass("gdn layer", |pass| {
            if form == Form::Fused {
                let fused = self.fused.encode(pass, &k.fused, batch);
                fused.expect("encode gdn_decode");
                return;
            }
            self.conv.encode(pass, &k.conv, batch).expect("encode conv");
            self.prep.encode(pass, &k.prep, n).expect("encode prep");
            self.encode_delta(pass, batch, form)
                .expect("encode delta rule");
            self.norm.encode(pass, &k.norm, n).expect("encode norm");
        })
        .expect("gdn step");
    }

    /// The delta rule alone in `form` (the fused decode is a whole layer, not a form of it).
    fn encode_delta(
        &self,
        pass: &mut wgpu::ComputePass,
        batch: SeqBatch,
        form: Form,
    ) -> Result<fak::gpu::profile::Recorded, GpuError> {
        let k = &self.bindings;
        match form {
            Form::Recurrent => self.decode.encode(pass, &k.decode, batch),
            Form::Chunked => self.chunked.encode(pass, &k.chunked, batch),
            Form::Fused => panic!("gdn_decode runs the whole layer, not the delta rule alone"),
        }
    }

    /// DeltaPrep alone on conv outputs `mixed` with projections `b`, `a`: (mixed, gates).
    pub fn prep_only(
        &self,
        ctx: &GpuContext,
        mixed: &[f32],
        b: &[f32],
        a: &[f32],
    ) -> (Vec<f32>, Vec<f32>) {
        let (bufs, d) = (&self.buffers, &self.dims);
        poison(ctx, &bufs.gates);
        write(ctx, &bufs.mixed, 0, bytemuck::cast_slice(mixed)).expect("mixed");
        self.write_proj(ctx, [None, None, Some(b), Some(a)]);
        let n = (mixed.len() / d.conv_dim() as usize) as u32;
        ctx.run_pass("prep", |pass| {
            self.prep
                .encode(pass, &self.bindings.prep, n)
                .expect("encode prep");
        })
        .expect("prep");
        (
            read(ctx, &bufs.mixed, mixed.len()),
            read(ctx, &bufs.gates, n as usize * 2 * d.nv as usize),
        )
    }

    /// The delta rule alone on prepared `mixed` and `gates`: `o` of `slots.len()` sequences of
    /// `len` tokens.
    pub fn delta_only(
        &self,
        ctx: &GpuContext,
        mixed: &[f32],
        gates: &[f32],
        slots: &[u32],
        len: u32,
        form: Form,
    ) -> Vec<f32> {
        let bufs = &self.buffers;
        poison(ctx, &bufs.o);
        write(ctx, &bufs.mixed, 0, bytemuck::cast_slice(mixed)).expect("mixed");
        write(ctx, &bufs.gates, 0, bytemuck::cast_slice(gates)).expect("gates");
        let batch = self.table.write(ctx, len, slots).expect("sequence table");
        ctx.run_pass("delta rule", |pass| {
            self.encode_delta(pass, batch, form)
                .expect("encode delta rule");
        })
        .expect("delta rule");
        read(
            ctx,
            &bufs.o,
            batch.tokens() as usize * self.dims.value_dim() as usize,
        )
    }

    /// GatedNorm alone: `y` of outputs `o` gated by `z`.
    pub fn norm_only(&self, ctx: &GpuContext, o: &[f32], z: &[f32]) -> Vec<f32> {
        let bufs = &self.buffers;
        poison(ctx, &bufs.y);
        write(ctx, &bufs.o, 0, bytemuck::cast_slice(o)).expect("o");
        self.write_proj(ctx, [None, Some(z), None, None]);
        let n = (o.len() / self.dims.value_dim() as usize) as u32;
        ctx.run_pass("gated norm", |pass| {
            self.norm
                .encode(pass, &self.bindings.norm, n)
                .expect("encode norm");
        })
        .expect("norm");
        read(ctx, &bufs.y, o.len())
    }

    /// Writes the projections' rows (m, z, b, a: each row-major per token, or None to leave
    /// NaN) into their places of the stacked projection rows.
    fn write_proj(&self, ctx: &GpuContext, parts: [Option<&[f32]>; 4]) {
        let d = &self.dims;
        let widths = [d.conv_dim(), d.value_dim(), d.nv, d.nv].map(|w| w as usize);
        let tokens = parts
            .iter()
            .zip(widths)
            .find_map(|(p, w)| p.map(|p| p.len() / w))
            .expect("some projection");
        let stride = proj_width(d) as usize;
        let mut rows = vec![f32::NAN; tokens * stride];
        let mut first = 0;
        for (part, width) in parts.iter().zip(widths) {
            if let Some(part) = part {
                for (t, row) in part.chunks(width).enumerate() {
                    rows[t * stride + first..][..width].copy_from_slice(row);
                }
            }
            first += width;
        }
        write(ctx, &self.buffers.proj, 0, bytemuck::cast_slice(&rows)).expect("projections");
    }

    pub fn max_tokens(&self) -> u32 {
        self.max_tokens
    }

    pub fn upload_state(&self, ctx: &GpuContext, state: &CpuState) {
        state.upload(ctx, &self.dims, &self.state);
    }

    pub fn download_state(&self, ctx: &GpuContext) -> CpuState {
        CpuState::download(ctx, &self.dims, &self.state)
    }
}

/// Values per token of the stacked projections [m | z | b | a].
fn proj_width(d: &DeltaDims) -> u32 {
    d.conv_dim() + d.value_dim() + 2 * d.nv
}

/// Refills `buffer` with NaN.
pub fn poison(ctx: &GpuContext, buffer: &wgpu::Buffer) {
    let nan = f32::NAN.to_bits().to_le_bytes();
    let fill: Vec<u8> = nan
        .iter()
        .copied()
        .cycle()
        .take(buffer.size() as usize)
        .collect();
    write(ctx, buffer, 0, &fill).expect("poisoning");
}
