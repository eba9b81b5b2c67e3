//! The fused per-head norm + RoPE + KV write (wgsl/rope_kv.wgsl) against the CPU reference
//! (`fak::reference::ops::{rms_norm, rope}`, f64 angles) and a CPU placement of the cache by the
//! documented paged layout: the GPU test (tests/gpu_rope_kv.rs) asserts its cases, `harness
//! selftest` reports them (`report`).

use super::compare::{Bound, Output, Tolerance};
use super::inputs::{step_buffer, uniform_f32, upload_f32, upload_u32};
use super::kv::{Pages, poisoned_cache, read_cache, stored};
use super::{poisoned_f32, rng};
use fak::gpu::kernels::kv_cache::{KvDtype, PageTable};
use fak::gpu::kernels::rope::RopeTable;
use fak::gpu::kernels::rope_kv::{HeadNorms, RopeKv, RopeKvIo};
use fak::gpu::kernels::support::{Positions, TokenSlot, View};
use fak::gpu::{GpuContext, Step, read_back_f32};
use fak::model::RopePairing;
use fak::reference::ops::{rms_norm, rope};
use rand::Rng;

/// The norms' eps.
const EPS: f32 = 1e-6;

/// Normed heads reach |x| ≈ 6 (values in [-2, 2], weights in [0.5, 1.5]); the angle is within
/// ~3e-6 rad of the f64 one at any position below 2^24 (rope_angle.wgsl), ≤ 2e-5 on such a value,
/// and the norm and rotation add a few f32 roundings: 4e-5 absolute covers both. An f16 cache
/// adds its own rounding: Vulkan leaves the rounding mode of an f32 → f16 conversion to the
/// driver, so one f16 ulp (2^-10 of the value) either way.
pub fn tolerance(dtype: KvDtype) -> Tolerance {
    match dtype {
        KvDtype::F32 => Tolerance {
            rel: 0.0,
            abs: 4e-5,
        },
        KvDtype::F16 => Tolerance {
            rel: 1.0 / 1024.0,
            abs: 4e-5,
        },
    }
}

/// A model's attention-input shape.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub n_head: u32,
    pub n_kv: u32,
    pub head_dim: u32,
    pub n_rot: u32,
    pub pairing: RopePairing,
    pub base: f32,
    /// llama3-style per-frequency divisors (`rope_freqs.weight`), random in [1, 8).
    pub factors: bool,
    pub norms: bool,
    /// q, k, v side by side in one row per token (a fused QKV projection), or q heads at stride
    /// 2·head_dim inside [q | gate] rows with k and v in buffers of their own (qwen35).
    pub fused_qkv: bool,
}

impl Case {
    /// qwen3: per-head norms, full NeoX rotary, q/k/v from one fused projection row.
    pub const QWEN3: Case = Case {
        n_head: 4,
        n_kv: 2,
        head_dim: 64,
        n_rot: 64,
        pairing: RopePairing::Neox,
        base: 1e6,
        factors: false,
        norms: true,
        fused_qkv: true,
    };
    /// qwen35: 64 of 256 dims rotated, q heads inside [q | gate] rows (a head wider than WG).
    pub const QWEN35: Case = Case {
        n_head: 2,
        n_kv: 1,
        head_dim: 256,
        n_rot: 64,
        pairing: RopePairing::Neox,
        base: 1e7,
        factors: false,
        norms: true,
        fused_qkv: false,
    };
    /// llama: no norms, adjacent pairs, frequency divisors, partial rotary, an odd head count.
    pub const LLAMA: Case = Case {
        n_head: 3,
        n_kv: 1,
        head_dim: 48,
        n_rot: 40,
        pairing: RopePairing::Adjacent,
        base: 5e5,
        factors: true,
        norms: false,
        fused_qkv: true,
    };
}

/// One token of a step: its position and page-table row.
pub type Slot = (u32, u32);

/// One step's tokens, and whether their positions come from a token table (else from the Step:
/// consecutive from the first token's, on row 0).
pub struct StepTokens {
    pub tokens: Vec<Slot>,
    pub table: bool,
}

/// Random inputs of one step, the host copies of each token's q, k and v heads and the buffers
/// they sit in (laid out as `case` says).
struct Inputs {
    q_rows: Vec<Vec<f32>>,
    k_rows: Vec<Vec<f32>>,
    v_rows: Vec<Vec<f32>>,
    buffers: Vec<wgpu::Buffer>,
}

impl Inputs {
    fn random(ctx: &GpuContext, case: &Case, n: u32, rng: &mut rand_chacha::ChaCha8Rng) -> Inputs {
        let Case {
            n_head,
            n_kv,
            head_dim: hd,
            ..
        } = *case;
        let (q_dim, kv_dim) = (n_head * hd, n_kv * hd);
        if case.fused_qkv {
            let width = q_dim + 2 * kv_dim;
            let data = uniform_f32(rng, (n * width) as usize, -2.0, 2.0);
            let part = |from: u32, len: u32| -> Vec<Vec<f32>> {
                (0..n)
                    .map(|t| data[(t * width + from) as usize..][..len as usize].to_vec())
                    .collect()
            };
            return Inputs {
                q_rows: part(0, q_dim),
                k_rows: part(q_dim, kv_dim),
                v_rows: part(q_dim + kv_dim, kv_dim),
                buffers: vec![upload_f32(ctx, "qkv", &data)],
            };
        }
        let qg = uniform_f32(rng, (n * 2 * q_dim) as usize, -2.0, 2.0);
        let k = uniform_f32(rng, (n * kv_dim) as usize, -2.0, 2.0);
        let v = uniform_f32(rng, (n * kv_dim) as usize, -2.0, 2.0);
        let q_head =
            |t: u32, h: u32| qg[((t * n_head + h) * 2 * hd) as usize..][..hd as usize].to_vec();
        Inputs {
            q_rows: (0..n)
                .map(|t| (0..n_head).flat_map(|h| q_head(t, h)).collect())
                .collect(),
            k_rows: k.chunks(kv_dim as usize).map(<[f32]>::to_vec).collect(),
            v_rows: v.chunks(kv_dim as usize).map(<[f32]>::to_vec).collect(),
            buffers: vec![
                upload_f32(ctx, "q and gate", &qg),
                upload_f32(ctx, "k", &k),
                upload_f32(ctx, "v", &v),
            ],
        }
    }

    /// The q, k and v views over the buffers.
    fn views(&self, case: &Case) -> (View<'_>, View<'_>, View<'_>) {
        let (hd, q_dim, kv_dim) = (
            case.head_dim,
            case.n_head * case.head_dim,
            case.n_kv * case.head_dim,
        );
        if case.fused_qkv {
            let width = q_dim + 2 * kv_dim;
            let view = |offset| {
                View::heads(&self.buffers[0], 1, hd)
                    .strided(width, hd)
                    .at(offset)
            };
            return (view(0), view(q_dim), view(q_dim + kv_dim));
        }
        (
            View::heads(&self.buffers[0], case.n_head, hd).strided(2 * q_dim, 2 * hd),
            View::heads(&self.buffers[1], case.n_kv, hd),
            View::heads(&self.buffers[2], case.n_kv, hd),
        )
    }
}

/// Runs `steps` one after the other on one poisoned cache of `pages`, with seeded random inputs:
/// every step's rotated q (one output), then the k and v caches, every slot some token owns
/// against the reference and the rest required to stay NaN. A token whose position is past its
/// row, or whose row names a page past the cache, must write no k or v.
pub fn run(
    ctx: &GpuContext,
    kernel: &RopeKv,
    case: &Case,
    pages: &Pages,
    steps: &[StepTokens],
    seed: u64,
) -> [Output; 3] {
    let mut rng = rng(seed);
    let Case {
        n_head,
        n_kv,
        head_dim: hd,
        n_rot,
        ..
    } = *case;
    let dtype = kernel.dtype();
    let layout = pages.layout(n_kv, hd, dtype);
    let cache = poisoned_cache(ctx, layout);
    let page_table = PageTable::from_rows(ctx, pages.pages_per_row, &pages.rows).unwrap();
    let factors: Vec<f32> = (0..n_rot / 2).map(|_| rng.random_range(1.0..8.0)).collect();
    let factors = case.factors.then_some(&factors[..]);
    let rope_table = RopeTable::new(ctx, n_rot, case.base, factors).unwrap();
    let q_norm = uniform_f32(&mut rng, hd as usize, 0.5, 1.5);
    let k_norm = uniform_f32(&mut rng, hd as usize, 0.5, 1.5);
    let (qn, kn) = (
        upload_f32(ctx, "q norm", &q_norm),
        upload_f32(ctx, "k norm", &k_norm),
    );
    let prepare = |head: &[f32], w: &[f32], pos: u32| {
        let mut x = match case.norms {
            true => rms_norm(head, Some(w), EPS),
            false => head.to_vec(),
        };
        rope(
            &mut x,
            pos as usize,
            n_rot as usize,
            case.base,
            case.pairing,
            factors,
        );
        x
    };
    let (mut got_q, mut want_q) = (Vec::new(), Vec::new());
    let mut want_k = vec![f32::NAN; layout.elements() as usize];
    let mut want_v = want_k.clone();
    for step_tokens in steps {
        let tokens = &step_tokens.tokens;
        let n = tokens.len() as u32;
        let inputs = Inputs::random(ctx, case, n, &mut rng);
        let (q, k, v) = inputs.views(case);
        let q_out = poisoned_f32(ctx, "q out", u64::from(n * n_head * hd));
        let slots: Vec<TokenSlot> = tokens
            .iter()
            .map(|&(pos, page_row)| TokenSlot { pos, page_row })
            .collect();
        let slot_buf = upload_u32(ctx, "slots", bytemuck::cast_slice(&slots));
        let positions = if step_tokens.table {
            Positions::Table(&slot_buf)
        } else {
            Positions::Step
        };
        let step = step_buffer(ctx, Step::new(tokens[0].0, n, 0));
        let io = RopeKvIo {
            q,
            k,
            v,
            q_out: View::heads(&q_out, n_head, hd),
            n_head,
            norms: case.norms.then_some(HeadNorms {
                q: &qn,
                k: &kn,
                eps: EPS,
            }),
            pairing: case.pairing,
            table: &rope_table,
            cache: &cache,
            pages: &page_table,
            positions,
            step: &step,
            max_tokens: n,
        };
        let binding = kernel.bind(ctx, &io).unwrap();
        ctx.run_pass("rope_kv", |pass| kernel.encode(pass, &binding, n))
            .unwrap();
        got_q.extend(read_back_f32(ctx, &q_out, 0..4 * u64::from(n * n_head * hd)).unwrap());
        for (t, &(pos, row)) in tokens.iter().enumerate() {
            for h in 0..n_head as usize {
                let head = &inputs.q_rows[t][h * hd as usize..][..hd as usize];
                want_q.extend(prepare(head, &q_norm, pos));
            }
            if pages.page(row as usize, pos).is_none() {
                continue;
            }
            for g in 0..n_kv {
                let at = pages.index(&layout, row as usize, pos, g);
                let head = g as usize * hd as usize..(g as usize + 1) * hd as usize;
                let kh = prepare(&inputs.k_rows[t][head.clone()], &k_norm, pos);
                for d in 0..hd as usize {
                    want_k[at + d] = stored(kh[d], dtype);
                    want_v[at + d] = stored(inputs.v_rows[t][head.start + d], dtype);
                }
            }
        }
    }
    let tokens: Vec<&[Slot]> = steps.iter().map(|s| &s.tokens[..]).collect();
    let what = |part: &str| {
        format!(
            "{part}: {case:?}, tokens {tokens:?}, table {} ({})",
            steps.iter().any(|s| s.table),
            kernel.variant()
        )
    };
    let cache_part = |part: &'static str, buffer: &wgpu::Buffer, want: &[f32]| {
        let got = read_cache(ctx, buffer, &layout);
        let (owned, free): (Vec<usize>, Vec<usize>) =
            (0..got.len()).partition(|&i| !want[i].is_nan());
        let pick = |v: &[f32]| owned.iter().map(|&i| v[i]).collect::<Vec<_>>();
        Output {
            part,
            what: what(part),
            got: pick(&got),
            want: pick(want),
            bound: Bound::Within(tolerance(dtype)),
            wrote_outside: free.iter().any(|&i| !got[i].is_nan()),
        }
    };
    [
        Output {
            part: "q",
            what: what("q"),
            got: got_q,
            want: want_q,
            bound: Bound::Within(tolerance(KvDtype::F32)),
            wrote_outside: false,
        },
        cache_part("k cache", &cache.k, &want_k),
        cache_part("v cache", &cache.v, &want_v),
    ]
}

/// Positions 13..18 of one sequence (from the Step) on pages of 8: across a page boundary.
pub fn prefill_across_pages() -> (Pages, Vec<StepTokens>) {
    let steps = vec![StepTokens {
        tokens: (13..18).map(|p| (p, 0)).collect(),
        table: false,
    }];
    (Pages::identity(8, 24), steps)
}

/// One decode token for each of three sequences on shuffled pages of 8 (positions from a token
/// table), one of them past its row (row 1 holds 2 pages, 16 slots: position 40 is past it), and
/// a fourth sequence whose row names a page past the cache: only the first and third write k, v.
/// The pages are shuffled by `seed`.
pub fn batched_decode(seed: u64) -> (Pages, Vec<StepTokens>) {
    let mut pages = Pages::shuffled(&mut rng(seed), 8, &[30, 9, 17], 2);
    pages.rows.push(vec![pages.n_pages + 4]);
    let steps = vec![StepTokens {
        tokens: vec![(29, 0), (40, 1), (16, 2), (3, 3)],
        table: true,
    }];
    (pages, steps)
}
