//! The attention kernels as a model step uses them: `kv_cache` writes the step's k and v (slices
//! of a fused qkv projection whose q heads carry qwen35's interleaved gates) and, in the same
//! compute pass, `attn_prefill` (a 19-token prompt) or `attn_decode` (the next token, split in
//! two) reads them back. Against `fak::reference::ops::attend` on the same rows, for every
//! variant pair the device has (f32 and f16 caches).

use fak::gpu::kernels::attn_decode::{AttnDecode, AttnShape, DecodeIo};
use fak::gpu::kernels::attn_prefill::{AttnPrefill, PrefillIo};
use fak::gpu::kernels::kv_cache::{KvCache, KvDtype, KvLayout, KvWrite, PageTable};
use fak::gpu::kernels::support::{Positions, View};
use fak::gpu::{GpuContext, KernelPaths, Step, read_back_f32, storage_buffer};
use fak::reference::ops::attend;
use fak_tests::inputs::{step_buffer, uniform_f32, upload_f32};
use fak_tests::kv::stored;
use fak_tests::{Tolerance, assert_close, gpu, poisoned_f32, rng, variants};

/// As in tests/gpu_attn_decode.rs: convex combinations of values in [-1, 1], weights off by f32
/// score rounding and exp2's ulps.
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

/// Per token: n_head heads of [q | gate] (2·hd each), then k (n_kv·hd), then v.
fn width() -> u32 {
    SHAPE.n_head * 2 * SHAPE.head_dim + 2 * SHAPE.n_kv * SHAPE.head_dim
}

struct Views<'a> {
    q: View<'a>,
    k: View<'a>,
    v: View<'a>,
}

fn views(qkv: &wgpu::Buffer) -> Views<'_> {
    let AttnShape {
        n_head,
        n_kv,
        head_dim: hd,
    } = SHAPE;
    let q = View::heads(qkv, n_head, 2 * hd).strided(width(), 2 * hd);
    let k = View::heads(qkv, n_kv, hd)
        .at(n_head * 2 * hd)
        .strided(width(), hd);
    Views {
        q,
        k,
        v: k.at(n_head * 2 * hd + n_kv * hd),
    }
}

/// The reference output of every query head of token `t` of `rows` (qkv rows of all tokens so
/// far), attending to tokens 0..=t.
fn reference(rows: &[Vec<f32>], t: usize, cache_f16: bool) -> Vec<f32> {
    let AttnShape {
        n_head,
        n_kv,
        head_dim: hd,
    } = SHAPE;
    let (hd, group) = (hd as usize, (n_head / n_kv) as usize);
    let dtype = if cache_f16 {
        KvDtype::F16
    } else {
        KvDtype::F32
    };
    let k_at = n_head as usize * 2 * hd;
    let v_at = k_at + n_kv as usize * hd;
    let slice = |row: &Vec<f32>, at: usize| -> Vec<f32> {
        row[at..at + hd].iter().map(|&x| stored(x, dtype)).collect()
    };
    let mut out = Vec::new();
    for h in 0..n_head as usize {
        let g = h / group;
        let keys: Vec<Vec<f32>> = rows[..=t].iter().map(|r| slice(r, k_at + g * hd)).collect();
        let values: Vec<Vec<f32>> = rows[..=t].iter().map(|r| slice(r, v_at + g * hd)).collect();
        let keys: Vec<&[f32]> = keys.iter().map(|k| &k[..]).collect();
        let values: Vec<&[f32]> = values.iter().map(|v| &v[..]).collect();
        out.extend(attend(
            &rows[t][h * 2 * hd..h * 2 * hd + hd],
            &keys,
            &values,
            SHAPE.scale(),
        ));
    }
    out
}

fn run(ctx: &GpuContext, paths: KernelPaths) {
    let write = KvWrite::new(ctx, paths).unwrap();
    let prefill = AttnPrefill::new(ctx, paths, SHAPE).unwrap();
    let decode = AttnDecode::new(ctx, paths, SHAPE).unwrap();
    let mut rng = rng(77);
    let rows: Vec<Vec<f32>> = (0..=PROMPT)
        .map(|_| uniform_f32(&mut rng, width() as usize, -1.0, 1.0))
        .collect();
    let layout = KvLayout::contiguous(SHAPE.n_kv, SHAPE.head_dim, 16, 64, write.dtype());
    let cache = KvCache::new(ctx, layout).unwrap();
    let table = PageTable::identity(ctx, layout.pages_per_row).unwrap();
    let step = step_buffer(ctx, Step::new(0, PROMPT, 0));
    let o_width = SHAPE.n_head * SHAPE.head_dim;
    let what = format!("{paths}");

    // Prefill: the prompt's rows, written then attended in one pass.
    let prompt: Vec<f32> = rows[..PROMPT as usize].concat();
    let qkv = upload_f32(ctx, "qkv prompt", &prompt);
    let o = poisoned_f32(ctx, "o", u64::from(PROMPT * o_width));
    let v = views(&qkv);
    let w = write
        .bind(
            ctx,
            v.k,
            v.v,
            &cache,
            &table,
            Positions::Step,
            &step,
            PROMPT,
        )
        .unwrap();
    let io = PrefillIo {
        q: v.q,
        o: View::heads(&o, SHAPE.n_head, SHAPE.head_dim),
        cache: &cache,
        pages: &table,
        positions: Positions::Step,
        step: &step,
        max_tokens: PROMPT,
    };
    let p = prefill.bind(ctx, io).unwrap();
    ctx.run_pass("prefill", |pass| {
        write.encode(pass, &w, PROMPT);
        prefill.encode(pass, &p, PROMPT);
    })
    .unwrap();
    let got = read_back_f32(ctx, &o, 0..4 * u64::from(PROMPT * o_width)).unwrap();
    let want: Vec<f32> = (0..PROMPT as usize)
        .flat_map(|t| reference(&rows, t, paths.f16))
        .collect();
    assert_close(&format!("{what} prefill"), &got, &want, TOL);

    // Decode: the next token at position PROMPT.
    step.set(ctx, Step::new(PROMPT, 1, 0));
    let qkv = upload_f32(ctx, "qkv token", &rows[PROMPT as usize]);
    let o = poisoned_f32(ctx, "o", u64::from(o_width));
    let scratch = storage_buffer(ctx, "scratch", decode.scratch_bytes(1, 2)).unwrap();
    let v = views(&qkv);
    let w = write
        .bind(ctx, v.k, v.v, &cache, &table, Positions::Step, &step, 1)
        .unwrap();
    let io = DecodeIo {
        q: v.q,
        o: View::heads(&o, SHAPE.n_head, SHAPE.head_dim),
        cache: &cache,
        pages: &table,
        positions: Positions::Step,
        step: &step,
        n_split: 2,
        scratch: Some(&scratch),
        max_seqs: 1,
    };
    let d = decode.bind(ctx, io).unwrap();
    ctx.run_pass("decode", |pass| {
        write.encode(pass, &w, 1);
        decode.encode(pass, &d, 1);
    })
    .unwrap();
    let got = read_back_f32(ctx, &o, 0..4 * u64::from(o_width)).unwrap();
    assert_close(
        &format!("{what} decode"),
        &got,
        &reference(&rows, PROMPT as usize, paths.f16),
        TOL,
    );
}

#[test]
fn written_rows_are_attended_by_prefill_and_then_by_the_next_decode_step() {
    let ctx = gpu();
    for paths in variants::<AttnDecode>(ctx) {
        run(ctx, paths);
    }
}
