//! The causal conv kernel (wgsl/ssm_conv.wgsl) against the CPU reference's
//! `causal_conv_silu` and its conv-state roll, for every supported kernel size, prompt lengths
//! across its token tiles, batches of several sequences on their own slots, and bad input.

use fak::gpu::kernels::delta_state::HeadMapping;
use fak::gpu::kernels::delta_state::{DeltaDims, DeltaState};
use fak::gpu::kernels::ssm_conv::{ConvBinding, ConvIo, SsmConv};
use fak::gpu::kernels::support::View;
use fak::gpu::step::SequenceTable;
use fak::gpu::{GpuContext, GpuError, KernelPaths};

use fak::quant::GgmlType;
use fak_tests::gdn::{CpuState, cpu_conv, dims, f32_buffer, f32_tensor, read, uniform_vec};
use fak_tests::{Tolerance, assert_close, gpu, poisoned_f32, rng, variants};

/// Conv + SiLU of K ≤ 4 products of |w| ≤ 0.6 and |x| ≤ 1: the f32 fma chain errs by at most
/// 4·2^-24·2.4 ≈ 6e-7 against the f64 sum, and SiLU's exp is accurate to a few ulps on Vulkan
/// drivers; 4e-6 absolute plus relative leaves room for both, while a wrong tap or a wrong
/// window row moves an output by ~0.1.
const CONV_TOL: Tolerance = Tolerance {
    rel: 4e-6,
    abs: 4e-6,
};

struct Conv {
    kernel: SsmConv,
    binding: ConvBinding,
    table: SequenceTable,
    state: DeltaState,
    m: wgpu::Buffer,
    y: wgpu::Buffer,
}

impl Conv {
    fn new(ctx: &GpuContext, paths: KernelPaths, d: DeltaDims, w: &[f32], max_tokens: u32) -> Conv {
        let slots = 4;
        let kernel = SsmConv::new(ctx, paths, d).expect("ssm_conv");
        let table = SequenceTable::new(ctx, slots, slots).expect("table");
        let state = DeltaState::new(ctx, d, slots).expect("state");
        let rows = u64::from(max_tokens) * u64::from(d.conv_dim());
        let m = poisoned_f32(ctx, "m", rows);
        let y = poisoned_f32(ctx, "y", rows);
        let w = f32_buffer(ctx, "conv weight", w);
        let binding = kernel
            .bind(
                ctx,
                ConvIo {
                    m: View::rows(&m, d.conv_dim()),
                    weight: f32_tensor("blk.0.ssm_conv1d.weight", &w),
                    table: &table,
                    state: &state,
                    y: &y,
                    max_tokens,
                },
            )
            .expect("bind");
        Conv {
            kernel,
            binding,
            table,
            state,
            m,
            y,
        }
    }

    /// Runs `slots.len()` sequences of `len` rows of `m`; returns y.
    fn run(&self, ctx: &GpuContext, m: &[f32], slots: &[u32], len: u32) -> Vec<f32> {
        fak::gpu::write(ctx, &self.m, 0, bytemuck::cast_slice(m)).expect("m");
        fak_tests::gdn::poison(ctx, &self.y);
        let batch = self.table.write(ctx, len, slots).expect("table");
        ctx.run_pass("conv", |pass| {
            self.kernel
                .encode(pass, &self.binding, batch)
                .expect("encode");
        })
        .expect("run");
        read(ctx, &self.y, m.len())
    }
}

fn cpu_run(
    d: &DeltaDims,
    w: &[f32],
    state: &mut CpuState,
    m: &[f32],
    slots: &[u32],
    len: usize,
) -> Vec<f32> {
    let cd = d.conv_dim() as usize;
    let mut y = Vec::new();
    for (s, &slot) in slots.iter().enumerate() {
        for t in 0..len {
            let r = s * len + t;
            y.extend(cpu_conv(
                d,
                w,
                &mut state.conv[slot as usize],
                &m[r * cd..(r + 1) * cd],
            ));
        }
    }
    y
}

#[test]
fn conv_matches_cpu_for_every_kernel_size_length_and_batch() {
    let ctx = gpu();
    let mut rng = rng(0xc0_4701);
    for paths in variants::<SsmConv>(ctx) {
        for k in [2, 3, 4] {
            // conv_dim = 2·2·16 + 6·4 = 88: not a multiple of the 64-channel workgroup.
            let d = dims(2, 6, 16, 4, k, HeadMapping::Tiled);
            let cd = d.conv_dim() as usize;
            let w = uniform_vec(&mut rng, cd * k as usize, -0.6, 0.6);
            let conv = Conv::new(ctx, paths, d, &w, 20);
            // One prompt: shorter than K−1, one tile, across tiles of 8; then a batch.
            let cases: [(&[u32], u32); 6] = [
                (&[1], 1),
                (&[1], 2),
                (&[1], 3),
                (&[1], 9),
                (&[1], 17),
                (&[2, 0, 3], 5),
            ];
            for (slots, len) in cases {
                let what = format!("{paths} K={k} slots {slots:?} len {len}");
                let mut want_state = CpuState::random(&d, 4, &mut rng);
                want_state.upload(ctx, &d, &conv.state);
                let m = uniform_vec(&mut rng, slots.len() * len as usize * cd, -1.0, 1.0);
                let got = conv.run(ctx, &m, slots, len);
                let want = cpu_run(&d, &w, &mut want_state, &m, slots, len as usize);
                assert_close(&format!("{what}: y"), &got, &want, CONV_TOL);
                // The new conv state is raw rows moved, untouched slots stay: bit for bit.
                let got_state = CpuState::download(ctx, &d, &conv.state);
                for slot in 0..4 {
                    assert_close(
                        &format!("{what}: conv state of slot {slot}"),
                        &got_state.conv[slot].concat(),
                        &want_state.conv[slot].concat(),
                        Tolerance::EXACT,
                    );
                }
            }
        }
    }
}

#[test]
fn conv_decode_steps_reproduce_one_prefill_bit_for_bit() {
    let ctx = gpu();
    let mut rng = rng(0xc0_4702);
    let d = dims(2, 6, 16, 16, 4, HeadMapping::Tiled);
    let cd = d.conv_dim() as usize;
    let w = uniform_vec(&mut rng, cd * 4, -0.6, 0.6);
    let conv = Conv::new(ctx, KernelPaths::FALLBACK, d, &w, 11);
    let start = CpuState::random(&d, 4, &mut rng);
    let m = uniform_vec(&mut rng, 11 * cd, -1.0, 1.0);
    start.upload(ctx, &d, &conv.state);
    let prefill = conv.run(ctx, &m, &[3], 11);
    let prefill_state = CpuState::download(ctx, &d, &conv.state);
    start.upload(ctx, &d, &conv.state);
    let mut decoded = Vec::new();
    for row in m.chunks(cd) {
        decoded.extend(conv.run(ctx, row, &[3], 1));
    }
    // Each output is the same fma chain over the same values whichever tile computes it.
    assert_close("decode vs prefill y", &decoded, &prefill, Tolerance::EXACT);
    assert_eq!(CpuState::download(ctx, &d, &conv.state), prefill_state);
}

fn message(e: GpuError) -> String {
    e.to_string()
}

#[test]
fn conv_rejects_unsupported_kernel_sizes_and_inconsistent_input() {
    let ctx = gpu();
    for k in [1, 5] {
        let d = dims(2, 6, 16, 16, k, HeadMapping::Tiled);
        let e = SsmConv::new(ctx, KernelPaths::FALLBACK, d)
            .err()
            .expect("K outside 2..=4");
        assert!(message(e).contains("ssm.conv_kernel"), "K={k}");
    }
    let d = dims(2, 6, 16, 16, 4, HeadMapping::Tiled);
    let kernel = SsmConv::new(ctx, KernelPaths::FALLBACK, d).unwrap();
    let table = SequenceTable::new(ctx, 2, 2).unwrap();
    let state = DeltaState::new(ctx, d, 2).unwrap();
    let m = poisoned_f32(ctx, "m", 4 * u64::from(d.conv_dim()));
    let w = poisoned_f32(ctx, "w", 4 * u64::from(d.conv_dim()));
    let io = |ty, m_rows: u32| ConvIo {
        m: View::rows(&m, d.conv_dim()),
        weight: fak::gpu::kernels::delta_state::TensorRef {
            name: "blk.3.ssm_conv1d.weight",
            ty,
            buffer: &w,
        },
        table: &table,
        state: &state,
        y: &m,
        max_tokens: m_rows,
    };
    let e = kernel
        .bind(ctx, io(GgmlType::F16, 4))
        .err()
        .expect("F16 weight");
    assert!(message(e).contains("blk.3.ssm_conv1d.weight"));
    let e = kernel
        .bind(ctx, io(GgmlType::F32, 5))
        .err()
        .expect("5 rows in a 4-row buffer");
    assert!(message(e).contains("m (qkv projection)"));
    let binding = kernel.bind(ctx, io(GgmlType::F32, 4)).unwrap();
    let batch = table.write(ctx, 3, &[0, 1]).unwrap();
    assert!(
        kernel.plan(&binding, batch).is_err(),
        "6 tokens bound for 4"
    );
    assert!(table.write(ctx, 1, &[1, 1]).is_err(), "a slot twice");
    assert!(table.write(ctx, 1, &[2]).is_err(), "slot past the state");
    assert!(
        table.write(ctx, 1, &[0, 1, 0]).is_err(),
        "more sequences than the table holds"
    );
}
