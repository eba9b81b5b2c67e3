//! One decode-attention case (wgsl/attn_decode.wgsl) against `fak::reference::ops::attend`
//! (f64): the GPU test (tests/gpu_attn_decode.rs) asserts it, `harness selftest` reports it
//! (`report`).

use super::compare::{Tolerance, assert_close};
use super::inputs::{step_buffer, uniform_f32, upload_f32, upload_u32};
use super::kv::{Pages, Sequences, read_cache, stored};
use super::{poisoned_f32, poisoned_q8, quantize_q8_of, rng};
use fak::gpu::kernels::attn_decode::{AttnDecode, AttnShape, DecodeIo, DecodeRopeIo};
use fak::gpu::kernels::kv_cache::KvCache;
use fak::gpu::kernels::quantize_q8::Q8Vectors;
use fak::gpu::kernels::rope::{RopePairing, RopeTable};
use fak::gpu::kernels::rope_kv::{HeadNorms, RopeKv, RopeKvIo};
use fak::gpu::step::{PageTable, TokenSlot};
use fak::reference::ops::{rms_norm, rope};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use fak::gpu::kernels::support::{Positions, View};
use fak::gpu::{GpuContext, Step, read_back_f32, storage_buffer};

/// Tokens per KV page.
pub const PAGE: u32 = 16;

/// Values are in [-1, 1] and every output is a convex combination of them. A weight
/// exp2(s − m) carries the f32 rounding of its score (hd products, ~hd·2^-24·|s|) and exp2's
/// error ((3 + 2|x|) ulp under Vulkan, ≤ 6e-6 relative for the |x| ≤ 20 of these scores); the
/// sums that follow add a few ulps. 3e-5 absolute bounds that with room; a wrong key, a missed
/// key or a mis-weighted split moves an output by ~1/len ≥ 1e-3.
pub const TOL: Tolerance = Tolerance {
    rel: 0.0,
    abs: 3e-5,
};

pub struct Case {
    pub shape: AttnShape,
    pub lens: Vec<u32>,
    pub n_split: u32,
    /// Positions from a token table (batched decode) rather than the Step.
    pub table: bool,
    /// Queries inside qwen35-style [q | gate] rows (head stride 2·hd), and the output gate
    /// applied as the model's decode step does: o ⊙= σ(gate).
    pub gated_q: bool,
}

impl Case {
    /// The cache's pages: shuffled over a table for a batched step, in order otherwise.
    fn pages(&self, rng: &mut ChaCha8Rng) -> Pages {
        if self.table {
            Pages::shuffled(rng, PAGE, &self.lens, 2)
        } else {
            Pages::identity(PAGE, self.lens[0] + 9)
        }
    }

    /// The token table of a batched step: each sequence's last position, on its own page row.
    fn slot_buffer(&self, ctx: &GpuContext) -> wgpu::Buffer {
        let slots: Vec<TokenSlot> = self
            .lens
            .iter()
            .enumerate()
            .map(|(row, &len)| TokenSlot {
                pos: len - 1,
                page_row: row as u32,
            })
            .collect();
        upload_u32(ctx, "slots", bytemuck::cast_slice(&slots))
    }
}

/// Runs `case` on seeded random caches and queries (output poisoned first): what ran, the
/// kernel's output and the reference's. Where the heads are whole q8 blocks the kernel also
/// writes o's q8 blocks (poisoned first too), which must be bit for bit what quantize_q8 makes of
/// the o it wrote (else it panics: the test fails, the selftest reports the case failed).
pub fn run_case(
    ctx: &GpuContext,
    kernel: &AttnDecode,
    case: &Case,
    seed: u64,
) -> (String, Vec<f32>, Vec<f32>) {
    let mut rng = rng(seed);
    let AttnShape {
        n_head,
        n_kv,
        head_dim: hd,
    } = case.shape;
    let dtype = kernel.dtype();
    let n_seqs = case.lens.len() as u32;
    let pages = case.pages(&mut rng);
    let layout = pages.layout(n_kv, hd, dtype);
    let seqs = Sequences::random(&mut rng, &case.lens, n_kv * hd, dtype);
    let cache = seqs.cache(ctx, &pages, layout);
    let table = PageTable::from_rows(ctx, pages.pages_per_row, &pages.rows).unwrap();

    let q_head_stride = if case.gated_q { 2 * hd } else { hd };
    let q_data = uniform_f32(
        &mut rng,
        (n_seqs * n_head * q_head_stride) as usize,
        -1.5,
        1.5,
    );
    let q_buf = upload_f32(ctx, "q", &q_data);
    let q =
        View::heads(&q_buf, n_head, q_head_stride).strided(n_head * q_head_stride, q_head_stride);
    let o_buf = poisoned_f32(ctx, "o", u64::from(n_seqs * n_head * hd));
    let cols = u64::from(n_head * hd);
    let o_q8 = AttnDecode::quantizes(&case.shape).then(|| poisoned_q8(ctx, "o q8", cols, n_seqs));
    let slot_buf = case.slot_buffer(ctx);
    let positions = if case.table {
        Positions::Table(&slot_buf)
    } else {
        Positions::Step
    };
    let step = step_buffer(ctx, Step::new(case.lens[0] - 1, n_seqs, 0));
    let scratch =
        storage_buffer(ctx, "scratch", kernel.scratch_bytes(n_seqs, case.n_split)).unwrap();
    let io = DecodeIo {
        q,
        o: View::heads(&o_buf, n_head, hd),
        gate: case.gated_q.then(|| q.at(hd)),
        o_q8: o_q8.as_ref(),
        cache: &cache,
        pages: &table,
        positions,
        step: &step,
        n_split: case.n_split,
        scratch: Some(&scratch),
        max_seqs: n_seqs,
    };
    let binding = kernel.bind(ctx, io).unwrap();
    let keys = case.lens.iter().sum();
    ctx.run_pass("attn_decode", |pass| {
        kernel.encode(pass, &binding, n_seqs, keys).unwrap();
    })
    .unwrap();
    let got = read_back_f32(ctx, &o_buf, 0..u64::from(4 * n_seqs * n_head * hd)).unwrap();
    let what = format!(
        "{} {:?} lens {:?} splits {} table {} gated q {}",
        kernel.variant(),
        case.shape,
        case.lens,
        case.n_split,
        case.table,
        case.gated_q
    );
    if let Some(q8) = &o_q8 {
        let blocks = q8.read_back(ctx, cols, n_seqs).unwrap();
        let want = quantize_q8_of(ctx, &got, cols, n_seqs);
        assert!(
            blocks == want,
            "{what}: o's q8 blocks are not quantize_q8 of o"
        );
    }

    let mut want = Vec::new();
    for (b, &len) in case.lens.iter().enumerate() {
        for h in 0..n_head {
            let at = (b as u32 * n_head * q_head_stride + h * q_head_stride) as usize;
            let o = seqs.attend(b, len - 1, &q_data[at..at + hd as usize], h, n_head, n_kv);
            if case.gated_q {
                let gate = &q_data[at + hd as usize..at + 2 * hd as usize];
                let sigmoid = |g: f32| 1.0 / (1.0 + (-f64::from(g)).exp());
                want.extend(
                    o.iter()
                        .zip(gate)
                        .map(|(&x, &g)| (f64::from(x) * sigmoid(g)) as f32),
                );
            } else {
                want.extend(o);
            }
        }
    }
    (what, got, want)
}

/// The rope form's CPU bound: [`TOL`] plus what rope_kv's rounding of q (≤ 4e-5 on normed values
/// of a few units, `rope_kv::tolerance`) moves a score by, ~4e-5·Σ|k_i|/√hd ≤ 1e-4 with keys in
/// [-1, 1] after the norm; a query left unrotated or a key not written moves an output by far
/// more (and the bits are held to the default's as well).
pub const ROPE_TOL: Tolerance = Tolerance {
    rel: 0.0,
    abs: 2e-4,
};

/// A decode step in the rope form: [`Case`]'s sequences (each attending to its `lens` positions,
/// the last one the step's new key), from raw q, k, v with rope_kv's options.
pub struct RopeCase {
    pub case: Case,
    pub n_rot: u32,
    pub pairing: RopePairing,
    pub norms: bool,
    /// llama3-style per-frequency divisors, random in [1, 8).
    pub factors: bool,
}

/// The buffers of one form's run: o, its q8 blocks (where the heads are whole blocks) and a
/// cache holding every position before the new one.
struct FormRun {
    o: wgpu::Buffer,
    o_q8: Option<Q8Vectors>,
    cache: KvCache,
}

/// Runs `rc` twice on the same seeded raw q, k, v and caches (every position before the new one
/// filled, the rest NaN; outputs poisoned): rope_kv then the default decode (`kernel.bind`) in
/// one pass, and the rope form (`kernel.bind_rope`) alone. Panics unless the rope form's o, o's
/// q8 blocks and both whole caches are the default's bits, or its new cache rows are not the
/// reference's (rope_kv's bound). Returns what ran, the rope form's o and the reference's: the
/// CPU's normed and rotated q (`fak::reference::ops::{rms_norm, rope}`) attending over the cache
/// the step left.
pub fn run_rope_case(
    ctx: &GpuContext,
    kernel: &AttnDecode,
    rope_kv: &RopeKv,
    rc: &RopeCase,
    seed: u64,
) -> (String, Vec<f32>, Vec<f32>) {
    let case = &rc.case;
    let mut rng = rng(seed);
    let AttnShape {
        n_head,
        n_kv,
        head_dim: hd,
    } = case.shape;
    let dtype = kernel.dtype();
    let n_seqs = case.lens.len() as u32;
    let pages = case.pages(&mut rng);
    let layout = pages.layout(n_kv, hd, dtype);
    let before: Vec<u32> = case.lens.iter().map(|&l| l - 1).collect();
    let seqs = Sequences::random(&mut rng, &before, n_kv * hd, dtype);
    let page_table = PageTable::from_rows(ctx, pages.pages_per_row, &pages.rows).unwrap();

    let q_stride = if case.gated_q { 2 * hd } else { hd };
    let kv_dim = n_kv * hd;
    let q_data = uniform_f32(&mut rng, (n_seqs * n_head * q_stride) as usize, -1.5, 1.5);
    let k_data = uniform_f32(&mut rng, (n_seqs * kv_dim) as usize, -1.5, 1.5);
    let v_data = uniform_f32(&mut rng, (n_seqs * kv_dim) as usize, -1.0, 1.0);
    let (q_buf, k_buf, v_buf) = (
        upload_f32(ctx, "q", &q_data),
        upload_f32(ctx, "k", &k_data),
        upload_f32(ctx, "v", &v_data),
    );
    let q = View::heads(&q_buf, n_head, q_stride).strided(n_head * q_stride, q_stride);
    let (k, v) = (View::heads(&k_buf, n_kv, hd), View::heads(&v_buf, n_kv, hd));
    let factors: Vec<f32> = (0..rc.n_rot / 2)
        .map(|_| rng.random_range(1.0..8.0))
        .collect();
    let factors = rc.factors.then_some(&factors[..]);
    let base = 1e6;
    let table = RopeTable::new(ctx, rc.n_rot, base, factors).unwrap();
    let q_norm = uniform_f32(&mut rng, hd as usize, 0.5, 1.5);
    let k_norm = uniform_f32(&mut rng, hd as usize, 0.5, 1.5);
    let (qn, kn) = (
        upload_f32(ctx, "q norm", &q_norm),
        upload_f32(ctx, "k norm", &k_norm),
    );
    let norms = rc.norms.then_some(HeadNorms {
        q: &qn,
        k: &kn,
        eps: ROPE_EPS,
    });
    let slot_buf = case.slot_buffer(ctx);
    let positions = if case.table {
        Positions::Table(&slot_buf)
    } else {
        Positions::Step
    };
    let step = step_buffer(ctx, Step::new(case.lens[0] - 1, n_seqs, 0));
    let scratch =
        storage_buffer(ctx, "scratch", kernel.scratch_bytes(n_seqs, case.n_split)).unwrap();
    let cols = u64::from(n_head * hd);
    let keys: u32 = case.lens.iter().sum();
    let new_run = || FormRun {
        o: poisoned_f32(ctx, "o", u64::from(n_seqs) * cols),
        o_q8: AttnDecode::quantizes(&case.shape).then(|| poisoned_q8(ctx, "o q8", cols, n_seqs)),
        cache: seqs.cache(ctx, &pages, layout),
    };

    // The default: rope_kv, then the decode pass over its q_out and cache.
    let default = new_run();
    let q_out = poisoned_f32(ctx, "q out", u64::from(n_seqs) * cols);
    let prepare = rope_kv
        .bind(
            ctx,
            &RopeKvIo {
                q,
                k,
                v,
                q_out: View::heads(&q_out, n_head, hd),
                n_head,
                norms,
                pairing: rc.pairing,
                table: &table,
                cache: &default.cache,
                pages: &page_table,
                positions,
                step: &step,
                max_tokens: n_seqs,
            },
        )
        .unwrap();
    let default_io = DecodeIo {
        q: View::heads(&q_out, n_head, hd),
        o: View::heads(&default.o, n_head, hd),
        gate: case.gated_q.then(|| q.at(hd)),
        o_q8: default.o_q8.as_ref(),
        cache: &default.cache,
        pages: &page_table,
        positions,
        step: &step,
        n_split: case.n_split,
        scratch: Some(&scratch),
        max_seqs: n_seqs,
    };
    let binding = kernel.bind(ctx, default_io).unwrap();
    ctx.run_pass("rope_kv + attn_decode", |pass| {
        rope_kv.encode(pass, &prepare, n_seqs).unwrap();
        kernel.encode(pass, &binding, n_seqs, keys).unwrap();
    })
    .unwrap();

    // The rope form, from the raw projections.
    let fused = new_run();
    let io = DecodeIo {
        q,
        o: View::heads(&fused.o, n_head, hd),
        o_q8: fused.o_q8.as_ref(),
        cache: &fused.cache,
        ..default_io
    };
    let rope_io = DecodeRopeIo {
        k,
        v,
        norms,
        pairing: rc.pairing,
        table: &table,
    };
    let binding = kernel.bind_rope(ctx, io, rope_io).unwrap();
    ctx.run_pass("attn_decode_rope", |pass| {
        kernel.encode(pass, &binding, n_seqs, keys).unwrap();
    })
    .unwrap();

    let what = format!(
        "rope form {} {:?} lens {:?} splits {} table {} gated q {} n_rot {} {:?} norms {} \
         factors {}",
        kernel.variant(),
        case.shape,
        case.lens,
        case.n_split,
        case.table,
        case.gated_q,
        rc.n_rot,
        rc.pairing,
        rc.norms,
        rc.factors
    );
    let floats = |buffer: &wgpu::Buffer| {
        read_back_f32(ctx, buffer, 0..4 * u64::from(n_seqs) * cols)
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect::<Vec<u32>>()
    };
    let got = read_back_f32(ctx, &fused.o, 0..4 * u64::from(n_seqs) * cols).unwrap();
    assert!(
        floats(&fused.o) == floats(&default.o),
        "{what}: o differs from rope_kv + the default's bits"
    );
    if let (Some(a), Some(b)) = (&fused.o_q8, &default.o_q8) {
        assert!(
            a.read_back(ctx, cols, n_seqs).unwrap() == b.read_back(ctx, cols, n_seqs).unwrap(),
            "{what}: o's q8 blocks differ from the default's"
        );
    }
    let (fused_k, fused_v) = (
        read_cache(ctx, &fused.cache.k, &layout),
        read_cache(ctx, &fused.cache.v, &layout),
    );
    let same = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
    assert!(
        same(&fused_k, &read_cache(ctx, &default.cache.k, &layout))
            && same(&fused_v, &read_cache(ctx, &default.cache.v, &layout)),
        "{what}: the cache differs from rope_kv's"
    );

    // The reference: the CPU's rope of q and k; the new rows against it, then attention over the
    // cache as the step left it.
    let prepared = |head: &[f32], w: &[f32], pos: u32| {
        let mut x = match rc.norms {
            true => rms_norm(head, Some(w), ROPE_EPS),
            false => head.to_vec(),
        };
        rope(
            &mut x,
            pos as usize,
            rc.n_rot as usize,
            base,
            rc.pairing,
            factors,
        );
        x
    };
    let hd_us = hd as usize;
    let (mut new_got, mut new_want) = (Vec::new(), Vec::new());
    let mut want = Vec::new();
    for (b, &len) in case.lens.iter().enumerate() {
        let pos = len - 1;
        for g in 0..n_kv {
            let at = pages.index(&layout, b, pos, g);
            let from = (b as u32 * kv_dim + g * hd) as usize;
            let k_rot = prepared(&k_data[from..from + hd_us], &k_norm, pos);
            new_got.extend_from_slice(&fused_k[at..at + hd_us]);
            new_want.extend(k_rot.iter().map(|&x| stored(x, dtype)));
            new_got.extend_from_slice(&fused_v[at..at + hd_us]);
            new_want.extend(v_data[from..from + hd_us].iter().map(|&x| stored(x, dtype)));
        }
        for h in 0..n_head {
            let g = h / (n_head / n_kv);
            let rows = |cache: &[f32]| -> Vec<Vec<f32>> {
                (0..len)
                    .map(|p| {
                        let at = pages.index(&layout, b, p, g);
                        cache[at..at + hd_us].to_vec()
                    })
                    .collect()
            };
            let (krows, vrows) = (rows(&fused_k), rows(&fused_v));
            let krefs: Vec<&[f32]> = krows.iter().map(|r| &r[..]).collect();
            let vrefs: Vec<&[f32]> = vrows.iter().map(|r| &r[..]).collect();
            let at = (b as u32 * n_head * q_stride + h * q_stride) as usize;
            let q_rot = prepared(&q_data[at..at + hd_us], &q_norm, pos);
            let o = fak::reference::ops::attend(&q_rot, &krefs, &vrefs, case.shape.scale());
            if case.gated_q {
                let gate = &q_data[at + hd_us..at + 2 * hd_us];
                let sigmoid = |g: f32| 1.0 / (1.0 + (-f64::from(g)).exp());
                want.extend(
                    o.iter()
                        .zip(gate)
                        .map(|(&x, &g)| (f64::from(x) * sigmoid(g)) as f32),
                );
            } else {
                want.extend(o);
            }
        }
    }
    assert_close(
        &format!("{what}: the new k, v rows"),
        &new_got,
        &new_want,
        super::rope_kv::tolerance(dtype),
    );
    (what, got, want)
}

/// The rope form's norm eps.
const ROPE_EPS: f32 = 1e-6;
