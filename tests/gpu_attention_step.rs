//! The attention kernels as a model step uses them: `rope_kv` rotates the step's q (heads inside
//! qwen35's [q | gate] rows of a fused qkv projection) and writes its k and v into a poisoned
//! cache and, in the same compute pass, `attn_prefill` (a 19-token prompt) or `attn_decode` (the
//! next token, split in two) reads them back. Against `fak::reference::ops::attend` over the q
//! and cache rope_kv left (read back after the pass; rope_kv's own values are tests/gpu_rope_kv.rs'
//! business), so a read that misses a write of the same pass, or lands elsewhere, fails: for
//! every variant triple the device has (f32 and f16 caches).

use fak::gpu::kernels::attn_decode::{AttnDecode, AttnShape, DecodeIo};
use fak::gpu::kernels::attn_prefill::{AttnPrefill, PrefillIo};
use fak::gpu::kernels::kv_cache::{KvCache, KvLayout};
use fak::gpu::kernels::rope::RopePairing;
use fak::gpu::kernels::rope::RopeTable;
use fak::gpu::kernels::rope_kv::{RopeKv, RopeKvIo};
use fak::gpu::kernels::support::{Positions, View};
use fak::gpu::step::PageTable;
use fak::gpu::{GpuContext, KernelPaths, Step, StepBuffer, read_back_f32, storage_buffer};

use fak::reference::ops::attend;
use fak_tests::attn_prefill;
use fak_tests::inputs::{step_buffer, uniform_f32, upload_f32};
use fak_tests::kv::{Pages, poisoned_cache, read_cache};
use fak_tests::{Tolerance, assert_close, gpu, poisoned_f32, rng, variants};

/// As in tests/gpu_attn_decode.rs: convex combinations of values in [-1, 1], weights off by f32
/// score rounding and exp2's ulps (rotated q and k stay within √2, scores within 16).
const TOL: Tolerance = Tolerance {
    rel: 0.0,
    abs: 3e-5,
};
const SHAPE: AttnShape = AttnShape {
    n_head: 6,
    n_kv: 2,
    head_dim: 64,
};
const PROMPT: u32 = 19;
const PAGE: u32 = 16;

/// Per token: n_head heads of [q | gate] (2·hd each), then k (n_kv·hd), then v.
fn width() -> u32 {
    SHAPE.n_head * 2 * SHAPE.head_dim + 2 * SHAPE.n_kv * SHAPE.head_dim
}

/// The kernels of one variant and what they share.
struct Kernels<'a> {
    ctx: &'a GpuContext,
    rope_kv: RopeKv,
    rope_table: RopeTable,
    pages: Pages,
    layout: KvLayout,
    cache: KvCache,
    table: PageTable,
    step: StepBuffer,
}

impl Kernels<'_> {
    /// rope_kv on `rows` (qwen35-style fused qkv rows) at the Step's positions: its binding's
    /// input, written before `attend` runs in the same pass; returns the rotated q buffer.
    fn run(
        &self,
        rows: &[f32],
        n_tokens: u32,
        attend: impl FnOnce(&mut wgpu::ComputePass, View<'_>),
    ) -> wgpu::Buffer {
        let AttnShape {
            n_head,
            n_kv,
            head_dim: hd,
        } = SHAPE;
        let qkv = upload_f32(self.ctx, "qkv", rows);
        let q_out = poisoned_f32(self.ctx, "q out", u64::from(n_tokens * n_head * hd));
        let k = View::heads(&qkv, n_kv, hd)
            .at(n_head * 2 * hd)
            .strided(width(), hd);
        let io = RopeKvIo {
            q: View::heads(&qkv, n_head, hd).strided(width(), 2 * hd),
            k,
            v: k.at(n_head * 2 * hd + n_kv * hd),
            q_out: View::heads(&q_out, n_head, hd),
            n_head,
            norms: None,
            pairing: RopePairing::Neox,
            table: &self.rope_table,
            cache: &self.cache,
            pages: &self.table,
            positions: Positions::Step,
            step: &self.step,
            max_tokens: n_tokens,
        };
        let binding = self.rope_kv.bind(self.ctx, &io).unwrap();
        self.ctx
            .run_pass("attention step", |pass| {
                self.rope_kv.encode(pass, &binding, n_tokens).unwrap();
                attend(pass, View::heads(&q_out, n_head, hd));
            })
            .unwrap();
        q_out
    }

    /// The reference output of every query head of the tokens at `positions`, their rotated q
    /// read from `q_out`, attending to the cache's positions 0..=p as the step left them.
    fn reference(&self, q_out: &wgpu::Buffer, positions: std::ops::Range<u32>) -> Vec<f32> {
        let AttnShape {
            n_head,
            n_kv,
            head_dim: hd,
        } = SHAPE;
        let hd = hd as usize;
        let n = positions.len() as u64;
        let q = read_back_f32(self.ctx, q_out, 0..4 * n * u64::from(n_head) * hd as u64).unwrap();
        let k = read_cache(self.ctx, &self.cache.k, &self.layout);
        let v = read_cache(self.ctx, &self.cache.v, &self.layout);
        let mut out = Vec::new();
        for (t, pos) in positions.enumerate() {
            for h in 0..n_head {
                let g = h / (n_head / n_kv);
                let rows = |cache: &'_ [f32]| -> Vec<Vec<f32>> {
                    (0..=pos)
                        .map(|p| {
                            let at = self.pages.index(&self.layout, 0, p, g);
                            cache[at..at + hd].to_vec()
                        })
                        .collect()
                };
                let (keys, values) = (rows(&k), rows(&v));
                let keys: Vec<&[f32]> = keys.iter().map(|r| &r[..]).collect();
                let values: Vec<&[f32]> = values.iter().map(|r| &r[..]).collect();
                let at = (t * n_head as usize + h as usize) * hd;
                out.extend(attend(&q[at..at + hd], &keys, &values, SHAPE.scale()));
            }
        }
        out
    }
}

fn run(ctx: &GpuContext, paths: KernelPaths) {
    let rope_kv = RopeKv::new(ctx, paths).unwrap();
    let prefill = AttnPrefill::new(ctx, paths, SHAPE).unwrap();
    let decode = AttnDecode::new(ctx, paths, SHAPE).unwrap();
    let mut rng = rng(77);
    let rows: Vec<Vec<f32>> = (0..=PROMPT)
        .map(|_| uniform_f32(&mut rng, width() as usize, -1.0, 1.0))
        .collect();
    let pages = Pages::identity(PAGE, 64);
    let layout = pages.layout(SHAPE.n_kv, SHAPE.head_dim, rope_kv.dtype());
    let s = Kernels {
        ctx,
        rope_table: RopeTable::new(ctx, SHAPE.head_dim / 2, 1e4, None).unwrap(),
        cache: poisoned_cache(ctx, layout),
        table: PageTable::from_rows(ctx, pages.pages_per_row, &pages.rows).unwrap(),
        step: step_buffer(ctx, Step::new(0, PROMPT, 0)),
        rope_kv,
        pages,
        layout,
    };
    let o_width = SHAPE.n_head * SHAPE.head_dim;
    let what = format!("{paths}");

    // Prefill: the prompt's rows, written then attended in one pass.
    let o = poisoned_f32(ctx, "o", u64::from(PROMPT * o_width));
    let q_out = s.run(&rows[..PROMPT as usize].concat(), PROMPT, |pass, q| {
        let io = PrefillIo {
            q,
            o: View::heads(&o, SHAPE.n_head, SHAPE.head_dim),
            cache: &s.cache,
            pages: &s.table,
            positions: Positions::Step,
            step: &s.step,
            max_tokens: PROMPT,
            scratch: None,
        };
        let binding = prefill.bind(ctx, io).unwrap();
        prefill.encode(pass, &binding, PROMPT, PROMPT).unwrap();
    });
    let got = read_back_f32(ctx, &o, 0..4 * u64::from(PROMPT * o_width)).unwrap();
    let want = s.reference(&q_out, 0..PROMPT);
    // The cooperative-matrix kernel (the engine's choice where the adapter has one) rounds q, k,
    // v and the weights to f16: its bound is the prefill test's.
    let tol = if prefill.variant().coop_matrix.is_some() {
        attn_prefill::COOP_TOL
    } else {
        TOL
    };
    assert_close(&format!("{what} prefill"), &got, &want, tol);

    // Decode: the next token at position PROMPT.
    s.step.set(ctx, Step::new(PROMPT, 1, 0));
    let o = poisoned_f32(ctx, "o", u64::from(o_width));
    let scratch = storage_buffer(ctx, "scratch", decode.scratch_bytes(1, 2)).unwrap();
    let q_out = s.run(&rows[PROMPT as usize], 1, |pass, q| {
        let io = DecodeIo {
            q,
            o: View::heads(&o, SHAPE.n_head, SHAPE.head_dim),
            gate: None,
            o_q8: None,
            cache: &s.cache,
            pages: &s.table,
            positions: Positions::Step,
            step: &s.step,
            n_split: 2,
            scratch: Some(&scratch),
            max_seqs: 1,
        };
        let binding = decode.bind(ctx, io).unwrap();
        decode.encode(pass, &binding, 1, PROMPT + 1).unwrap();
    });
    let got = read_back_f32(ctx, &o, 0..4 * u64::from(o_width)).unwrap();
    let want = s.reference(&q_out, PROMPT..PROMPT + 1);
    assert_close(&format!("{what} decode"), &got, &want, TOL);
}

#[test]
fn rows_rope_kv_writes_are_attended_by_prefill_and_then_by_the_next_decode_step() {
    let ctx = gpu();
    for paths in variants::<AttnDecode>(ctx) {
        run(ctx, paths);
    }
}
