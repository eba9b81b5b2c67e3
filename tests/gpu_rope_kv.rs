//! The fused per-head norm + RoPE + KV write (wgsl/rope_kv.wgsl) against the CPU reference
//! (`fak::reference::ops::{rms_norm, rope}`, f64) and a CPU placement of the cache by the
//! documented paged layout: q, k, v as slices of one fused QKV row and as separate buffers with
//! qwen35's [q | gate] heads, norms on and off, NeoX and adjacent pairs, partial rotary, a
//! prefill across page boundaries and batched decode tokens on shuffled page tables (one past
//! its row, which must write no k or v); every variant (subgroup or not, f32 or f16 cache).

use fak::gpu::kernels::kv_cache::{KvDtype, PageTable};
use fak::gpu::kernels::rope::RopeTable;
use fak::gpu::kernels::rope_kv::{HeadNorms, RopeKv, RopeKvIo};
use fak::gpu::kernels::support::{Positions, TokenSlot, View};
use fak::gpu::{GpuContext, Step, read_back_f32};
use fak::model::RopePairing;
use fak::reference::ops::{rms_norm, rope};
use fak_tests::inputs::{step_buffer, uniform_f32, upload_f32, upload_u32};
use fak_tests::kv::{Pages, poisoned_cache, read_cache, stored};
use fak_tests::{Tolerance, assert_close, gpu, poisoned_f32, rng, variants};

/// Normed heads reach |x| ≈ 6 (values in [-2, 2], weights in [0.5, 1.5]); the angle is within
/// ~3e-6 rad of the f64 one (rope_angle.wgsl) and the norm and rotation add a few f32 roundings:
/// 4e-5 absolute covers both with room. An f16 cache adds its own rounding (one f16 ulp either
/// way, as tests/gpu_kv_cache.rs allows).
fn tolerance(dtype: KvDtype) -> Tolerance {
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

struct Case {
    n_head: u32,
    n_kv: u32,
    head_dim: u32,
    n_rot: u32,
    pairing: RopePairing,
    norms: bool,
    /// q, k, v side by side in one row per token (a fused QKV projection), or q heads at stride
    /// 2·head_dim inside [q | gate] rows with k and v in buffers of their own (qwen35).
    fused_qkv: bool,
}

/// One token of a step: its position and page-table row.
type Slot = (u32, u32);

fn run(
    ctx: &GpuContext,
    kernel: &RopeKv,
    case: &Case,
    pages: &Pages,
    tokens: &[Slot],
    table: bool,
    seed: u64,
) {
    let mut rng = rng(seed);
    let Case {
        n_head,
        n_kv,
        head_dim: hd,
        n_rot,
        ..
    } = *case;
    let n = tokens.len() as u32;
    let (q_dim, kv_dim) = (n_head * hd, n_kv * hd);
    let dtype = kernel.dtype();
    let layout = pages.layout(n_kv, hd, dtype);
    let cache = poisoned_cache(ctx, layout);
    let page_table = PageTable::from_rows(ctx, pages.pages_per_row, &pages.rows).unwrap();
    let rope_table = RopeTable::new(ctx, n_rot, 1e6, None).unwrap();
    let q_norm = uniform_f32(&mut rng, hd as usize, 0.5, 1.5);
    let k_norm = uniform_f32(&mut rng, hd as usize, 0.5, 1.5);
    let (qn, kn) = (
        upload_f32(ctx, "q norm", &q_norm),
        upload_f32(ctx, "k norm", &k_norm),
    );
    // Host copies of each token's q heads, k heads and v heads, and the buffers they sit in.
    let (q_rows, k_rows, v_rows, buffers);
    if case.fused_qkv {
        let width = q_dim + 2 * kv_dim;
        let data = uniform_f32(&mut rng, (n * width) as usize, -2.0, 2.0);
        let row = |t: u32, from: u32, len: u32| {
            data[(t * width + from) as usize..][..len as usize].to_vec()
        };
        q_rows = (0..n).map(|t| row(t, 0, q_dim)).collect::<Vec<_>>();
        k_rows = (0..n).map(|t| row(t, q_dim, kv_dim)).collect::<Vec<_>>();
        v_rows = (0..n)
            .map(|t| row(t, q_dim + kv_dim, kv_dim))
            .collect::<Vec<_>>();
        buffers = vec![upload_f32(ctx, "qkv", &data)];
    } else {
        let qg = uniform_f32(&mut rng, (n * 2 * q_dim) as usize, -2.0, 2.0);
        q_rows = (0..n)
            .map(|t| {
                (0..n_head)
                    .flat_map(|h| {
                        qg[((t * n_head + h) * 2 * hd) as usize..][..hd as usize].to_vec()
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        let k = uniform_f32(&mut rng, (n * kv_dim) as usize, -2.0, 2.0);
        let v = uniform_f32(&mut rng, (n * kv_dim) as usize, -2.0, 2.0);
        k_rows = k.chunks(kv_dim as usize).map(<[f32]>::to_vec).collect();
        v_rows = v.chunks(kv_dim as usize).map(<[f32]>::to_vec).collect();
        buffers = vec![
            upload_f32(ctx, "q and gate", &qg),
            upload_f32(ctx, "k", &k),
            upload_f32(ctx, "v", &v),
        ];
    }
    let (q, k, v) = if case.fused_qkv {
        let width = q_dim + 2 * kv_dim;
        let view = |offset| {
            View::heads(&buffers[0], 1, hd)
                .strided(width, hd)
                .at(offset)
        };
        (view(0), view(q_dim), view(q_dim + kv_dim))
    } else {
        (
            View::heads(&buffers[0], n_head, hd).strided(2 * q_dim, 2 * hd),
            View::heads(&buffers[1], n_kv, hd),
            View::heads(&buffers[2], n_kv, hd),
        )
    };
    let q_out = poisoned_f32(ctx, "q out", u64::from(n * q_dim));
    let slots: Vec<TokenSlot> = tokens
        .iter()
        .map(|&(pos, page_row)| TokenSlot { pos, page_row })
        .collect();
    let slot_buf = upload_u32(ctx, "slots", bytemuck::cast_slice(&slots));
    let positions = if table {
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
            eps: 1e-6,
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

    let prepare = |head: &[f32], w: &[f32], pos: u32| {
        let mut x = match case.norms {
            true => rms_norm(head, Some(w), 1e-6),
            false => head.to_vec(),
        };
        rope(
            &mut x,
            pos as usize,
            n_rot as usize,
            1e6,
            case.pairing,
            None,
        );
        x
    };
    let mut want_q = Vec::new();
    let mut want_k = vec![f32::NAN; layout.elements() as usize];
    let mut want_v = want_k.clone();
    for (t, &(pos, row)) in tokens.iter().enumerate() {
        for h in 0..n_head as usize {
            want_q.extend(prepare(
                &q_rows[t][h * hd as usize..][..hd as usize],
                &q_norm,
                pos,
            ));
        }
        if pos / pages.page_size >= pages.pages_per_row {
            continue;
        }
        for g in 0..n_kv {
            let at = pages.index(&layout, row as usize, pos, g);
            let head = g as usize * hd as usize..(g as usize + 1) * hd as usize;
            let kh = prepare(&k_rows[t][head.clone()], &k_norm, pos);
            for d in 0..hd as usize {
                want_k[at + d] = stored(kh[d], dtype);
                want_v[at + d] = stored(v_rows[t][head.start + d], dtype);
            }
        }
    }
    let what = |part: &str| {
        format!(
            "{part}: {n_head}/{n_kv} heads × {hd}, n_rot {n_rot}, {:?}, norms {}, fused qkv {}, tokens {tokens:?}, table {table} ({})",
            case.pairing,
            case.norms,
            case.fused_qkv,
            kernel.variant()
        )
    };
    let got_q = read_back_f32(ctx, &q_out, 0..4 * u64::from(n * q_dim)).unwrap();
    assert_close(&what("q"), &got_q, &want_q, tolerance(KvDtype::F32));
    for (part, buffer, want) in [
        ("k cache", &cache.k, &want_k),
        ("v cache", &cache.v, &want_v),
    ] {
        let got = read_cache(ctx, buffer, &layout);
        let (written, untouched): (Vec<usize>, Vec<usize>) =
            (0..got.len()).partition(|&i| !want[i].is_nan());
        let pick = |v: &[f32], idx: &[usize]| idx.iter().map(|&i| v[i]).collect::<Vec<_>>();
        assert_close(
            &what(part),
            &pick(&got, &written),
            &pick(want, &written),
            tolerance(dtype),
        );
        assert!(
            untouched.iter().all(|&i| got[i].is_nan()),
            "{}: elements outside the step's slots were written",
            what(part)
        );
    }
}

fn cases() -> Vec<Case> {
    let case = |n_head, n_kv, head_dim, n_rot, pairing, norms, fused_qkv| Case {
        n_head,
        n_kv,
        head_dim,
        n_rot,
        pairing,
        norms,
        fused_qkv,
    };
    vec![
        // qwen3: per-head norms, full NeoX rotary, q/k/v from one fused projection row.
        case(4, 2, 64, 64, RopePairing::Neox, true, true),
        // qwen35: 64 of 256 dims rotated, q heads inside [q | gate] rows (a head wider than WG).
        case(2, 1, 256, 64, RopePairing::Neox, true, false),
        // llama: no norms, adjacent pairs, partial rotary, an odd head count.
        case(3, 1, 48, 40, RopePairing::Adjacent, false, true),
    ]
}

#[test]
fn a_prefill_across_pages_matches_norm_then_rope_then_cache_write() {
    let ctx = gpu();
    for paths in variants::<RopeKv>(ctx) {
        let kernel = RopeKv::new(ctx, paths).unwrap();
        for (i, case) in cases().iter().enumerate() {
            // Positions 13..18 on pages of 8: three pages, identity table, from the Step.
            let pages = Pages::identity(8, 24);
            let tokens: Vec<Slot> = (13..18).map(|p| (p, 0)).collect();
            run(
                ctx,
                &kernel,
                case,
                &pages,
                &tokens,
                false,
                0x40be_0000 + i as u64,
            );
        }
    }
}

#[test]
fn batched_decode_tokens_land_in_their_own_rows_and_a_token_past_its_row_writes_no_kv() {
    let ctx = gpu();
    for paths in variants::<RopeKv>(ctx) {
        let kernel = RopeKv::new(ctx, paths).unwrap();
        for (i, case) in cases().iter().enumerate() {
            let mut r = rng(0x40be_1000 + i as u64);
            let pages = Pages::shuffled(&mut r, 8, &[30, 9, 17], 2);
            // Row 1 holds 2 pages (16 slots): position 40 is past it.
            let tokens = [(29, 0), (40, 1), (16, 2)];
            run(
                ctx,
                &kernel,
                case,
                &pages,
                &tokens,
                true,
                0x40be_2000 + i as u64,
            );
        }
    }
}
