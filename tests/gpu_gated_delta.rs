//! The Gated DeltaNet kernels against the CPU reference (`fak::reference::gated_delta`,
//! `fak::reference::qwen35`): the gates and q/k norms, the recurrent form over batches of
//! sequences, the chunked prefill against the step-by-step recurrence, prefill then decode
//! against a longer prefill, sequences of any lengths in one step against each alone, the whole
//! layer, a fixed dispatch count, and the state utilities
//! (zeroing, snapshot and restore). Head ratios nk = 2, nv = 6 (and 4) in both head orders make a
//! wrong key head show; dk/dv 16 and 128 cover both lane-group widths of the decode kernel.
//! The chunked prefill's tests run each of its kernels the adapter has ([`chunk_variants`]): the
//! f32 one everywhere, the cooperative-matrix one (the engine's default there, `FAK_GDN_CHUNK=f32`
//! turns it off) where the adapter has 16×16 matrices — elsewhere (lavapipe) they say that they
//! skipped it — each in every form it has ([`ChunkForm`]).

use fak::gpu::kernels::delta_state::HeadMapping;
use fak::gpu::kernels::delta_state::{DeltaDims, DeltaState, Dispatch};
use fak::gpu::kernels::gated_delta::GatedDeltaDecode;
use fak::gpu::kernels::gated_delta_chunk::{
    CHUNK, ChunkEntry, ChunkForm, ChunkKernel, GatedDeltaChunked, Inverse, entries_named,
};
use fak::gpu::kernels::gdn_decode::{GdnDecode, Split, WORKGROUP_SIZES};
use fak::gpu::step::{MidSave, SeqRows, SequenceTable};
use fak::gpu::{GpuContext, GpuError, Kernel, KernelPaths, storage_buffer};

use fak_tests::gdn::{
    COOP_LAYER_TOL, CpuState, DELTA_TOL, Form, GpuLayer, LAYER_TOL, LayerWeights, Projections,
    STEP_TOL, cpu_delta, cpu_layer, cpu_prep, dims, random_prepared, uniform_vec,
};
use fak_tests::wgsl_module::{
    all_coop_paths, odd_sized_workgroup_vars, parse_valid, workgroup_bytes,
};
use fak_tests::{Tolerance, assert_close, gpu, quantize_q8_of, rng, variants};
use rand_chacha::ChaCha8Rng;

/// Shapes with both head orders, both decode lane widths (dk 16 → 4 lanes, dk ≥ 32 → 8) and a
/// value head narrower than a decode workgroup's rows (dv = 12).
fn small_shapes() -> Vec<DeltaDims> {
    vec![
        dims(2, 6, 16, 16, 4, HeadMapping::Tiled),
        dims(2, 6, 16, 16, 4, HeadMapping::Grouped),
        dims(2, 6, 32, 12, 3, HeadMapping::Grouped),
    ]
}

/// One value head per key head (nv / nk = 1, where chunk_prepare's key-head form has one value
/// head to finish) and a value head of whole 32-column blocks (where the coop kernel's `ustore`
/// form stores U from its accumulators), small.
fn one_value_head_per_key_head() -> DeltaDims {
    dims(2, 2, 16, 32, 4, HeadMapping::Tiled)
}

/// The family's head size, kept to few heads (lavapipe is slow).
fn wide_shape() -> DeltaDims {
    dims(2, 4, 128, 128, 4, HeadMapping::Tiled)
}

/// A chunked kernel to test: its paths and form.
#[derive(Clone, Copy, PartialEq, Debug)]
struct ChunkVariant {
    paths: KernelPaths,
    form: ChunkForm,
}

impl ChunkVariant {
    const F32: ChunkVariant = ChunkVariant {
        paths: KernelPaths::FALLBACK,
        form: ChunkForm::F32[0],
    };
}

impl std::fmt::Display for ChunkVariant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.paths, self.form.suffix())
    }
}

/// The chunked kernels to test on this adapter, each in every form it has: the f32 one, and the
/// cooperative-matrix one where the adapter has it (the tests always run it there). Where it
/// has not, says so on stderr: those tests skipped it.
fn chunk_variants(ctx: &GpuContext, test: &str) -> Vec<ChunkVariant> {
    let paths = KernelPaths::FALLBACK;
    let mut out: Vec<ChunkVariant> = ChunkForm::F32
        .map(|form| ChunkVariant { paths, form })
        .into();
    match GatedDeltaChunked::coop_paths(ctx.paths()) {
        Some(paths) => out.extend(ChunkForm::COOP.map(|form| ChunkVariant { paths, form })),
        None => eprintln!(
            "{test}: the cooperative-matrix gated_delta_chunk SKIPPED (the adapter has no 16×16 \
             f16 cooperative matrices on 32-wide subgroups)"
        ),
    }
    out
}

/// A layer on the engine's paths with the chunked kernel `chunk`.
fn layer_with(
    ctx: &GpuContext,
    chunk: ChunkVariant,
    d: DeltaDims,
    weights: &LayerWeights,
    limits: (u32, u32, u32),
) -> GpuLayer {
    let chunked =
        GatedDeltaChunked::with_form(ctx, chunk.paths, d, chunk.form).expect("gated_delta_chunk");
    assert_eq!(
        (chunked.variant(), chunked.form()),
        (chunk.paths, chunk.form)
    );
    GpuLayer::with_chunked(ctx, ctx.paths(), d, weights, limits, chunked)
}

/// CPU recurrence over `count = slots.len()` sequences of `len` prepared rows.
fn cpu_recurrence(
    d: &DeltaDims,
    state: &mut CpuState,
    mixed: &[f32],
    gates: &[f32],
    slots: &[u32],
    len: usize,
) -> Vec<f32> {
    let (cd, nv) = (d.conv_dim() as usize, d.nv as usize);
    let mut o = Vec::new();
    for (s, &slot) in slots.iter().enumerate() {
        for t in 0..len {
            let r = s * len + t;
            let g = &gates[r * 2 * nv..(r + 1) * 2 * nv];
            o.extend(cpu_delta(
                d,
                &mut state.recurrent[slot as usize],
                &mixed[r * cd..(r + 1) * cd],
                &g[..nv],
                &g[nv..],
            ));
        }
    }
    o
}

fn assert_states(what: &str, got: &CpuState, want: &CpuState, tol: Tolerance) {
    for slot in 0..got.recurrent.len() {
        assert_close(
            &format!("{what}: state of slot {slot}"),
            &got.flat(slot),
            &want.flat(slot),
            tol,
        );
    }
}

/// Runs the delta rule on random prepared rows from a random state and checks output and
/// state against the CPU recurrence.
#[allow(clippy::too_many_arguments)]
fn check_delta(
    ctx: &GpuContext,
    layer: &GpuLayer,
    rng: &mut ChaCha8Rng,
    slots: &[u32],
    len: u32,
    form: Form,
    what: &str,
) {
    let d = layer.dims;
    let n_slots = layer.state.slots() as usize;
    let mut want_state = CpuState::random(&d, n_slots, rng);
    layer.upload_state(ctx, &want_state);
    let (mixed, gates) = random_prepared(&d, slots.len() * len as usize, rng);
    let got = layer.delta_only(ctx, &mixed, &gates, slots, len, form);
    let want = cpu_recurrence(&d, &mut want_state, &mixed, &gates, slots, len as usize);
    assert_close(&format!("{what}: o"), &got, &want, DELTA_TOL);
    assert_states(what, &layer.download_state(ctx), &want_state, DELTA_TOL);
}

#[test]
fn prep_normalises_q_and_k_and_computes_the_gates() {
    let ctx = gpu();
    let mut rng = rng(0x6d7_0001);
    for paths in variants::<fak::gpu::kernels::delta_prep::DeltaPrep>(ctx) {
        for d in small_shapes().into_iter().chain([wide_shape()]) {
            let weights = LayerWeights::random(&d, &mut rng);
            let layer = GpuLayer::new(ctx, paths, d, &weights, (5, 1, 1));
            let (cd, nv) = (d.conv_dim() as usize, d.nv as usize);
            let mixed = uniform_vec(&mut rng, 5 * cd, -2.0, 2.0);
            let b = uniform_vec(&mut rng, 5 * nv, -8.0, 8.0);
            // a + dt_bias spans softplus's linear region (> 20) and its exponential tail.
            let a = uniform_vec(&mut rng, 5 * nv, -40.0, 40.0);
            let (got_mixed, got_gates) = layer.prep_only(ctx, &mixed, &b, &a);
            let mut want_mixed = mixed.clone();
            let mut want_gates = Vec::new();
            for (r, row) in want_mixed.chunks_mut(cd).enumerate() {
                let (beta, g) = cpu_prep(
                    &d,
                    row,
                    &b[r * nv..(r + 1) * nv],
                    &a[r * nv..(r + 1) * nv],
                    &weights,
                );
                want_gates.extend(beta.iter().chain(&g));
            }
            // Σx² over ≤ 128 f32 terms and rsqrt: ≤ 1e-5 relative (worst case 128·2^-24);
            // sigmoid and softplus (exp, the log1p series) to a few 1e-6 relative, down to the
            // 1e-7-sized g of softplus's exponential tail. The floor covers q̂ entries near zero.
            let tol = Tolerance {
                rel: 1e-5,
                abs: 1e-8,
            };
            let what = format!("{paths} {d:?}");
            assert_close(&format!("{what}: mixed"), &got_mixed, &want_mixed, tol);
            assert_close(&format!("{what}: gates"), &got_gates, &want_gates, tol);
        }
    }
}

#[test]
fn recurrent_form_matches_cpu_for_batches_of_sequences_on_their_slots() {
    let ctx = gpu();
    let mut rng = rng(0x6d7_0002);
    for paths in variants::<GatedDeltaDecode>(ctx) {
        for d in small_shapes().into_iter().chain([wide_shape()]) {
            let weights = LayerWeights::random(&d, &mut rng);
            let layer = GpuLayer::new(ctx, paths, d, &weights, (10, 3, 4));
            let what = format!("{paths} {d:?}");
            // Decode: one token for each of three sequences, slot 1 left alone.
            check_delta(ctx, &layer, &mut rng, &[3, 0, 2], 1, Form::Recurrent, &what);
            // Several tokens per sequence, run token by token inside the kernel.
            check_delta(ctx, &layer, &mut rng, &[1, 2], 5, Form::Recurrent, &what);
        }
    }
}

#[test]
fn chunked_prefill_equals_the_step_by_step_recurrence() {
    let ctx = gpu();
    let mut rng = rng(0x6d7_0003);
    for chunk in chunk_variants(ctx, "chunked_prefill_equals_the_step_by_step_recurrence") {
        for d in small_shapes() {
            let weights = LayerWeights::random(&d, &mut rng);
            let layer = layer_with(ctx, chunk, d, &weights, (140, 2, 3));
            for len in [1, 2, 63, 64, 65, 130] {
                let what = format!("{chunk} {d:?} T={len}");
                check_delta(ctx, &layer, &mut rng, &[1], len, Form::Chunked, &what);
            }
            // Two prompts at once, each on its own slot.
            let what = format!("{chunk} {d:?} two sequences of 70");
            check_delta(ctx, &layer, &mut rng, &[2, 0], 70, Form::Chunked, &what);
        }
        let d = wide_shape();
        let weights = LayerWeights::random(&d, &mut rng);
        let layer = layer_with(ctx, chunk, d, &weights, (66, 1, 2));
        for len in [2, 65] {
            let what = format!("{chunk} {d:?} T={len}");
            check_delta(ctx, &layer, &mut rng, &[1], len, Form::Chunked, &what);
        }
    }
}

#[test]
fn chunked_and_recurrent_forms_agree_on_the_gpu() {
    let ctx = gpu();
    let mut rng = rng(0x6d7_0004);
    let d = small_shapes()[1];
    let weights = LayerWeights::random(&d, &mut rng);
    let layer = GpuLayer::new(ctx, ctx.paths(), d, &weights, (100, 1, 1));
    let start = CpuState::random(&d, 1, &mut rng);
    let (mixed, gates) = random_prepared(&d, 100, &mut rng);
    let mut results = Vec::new();
    for form in [Form::Recurrent, Form::Chunked] {
        layer.upload_state(ctx, &start);
        let o = layer.delta_only(ctx, &mixed, &gates, &[0], 100, form);
        results.push((o, layer.download_state(ctx)));
    }
    assert_close("o", &results[1].0, &results[0].0, DELTA_TOL);
    assert_states("state", &results[1].1, &results[0].1, DELTA_TOL);
}

/// The layer's outputs compared with the CPU layer: conv + prep outputs, o and y.
fn assert_layer(what: &str, got: &fak_tests::gdn::GpuOutputs, want: &fak_tests::gdn::CpuOutputs) {
    assert_layer_within(what, got, want, LAYER_TOL);
}

/// [`assert_layer`] with `tol` for o and y.
fn assert_layer_within(
    what: &str,
    got: &fak_tests::gdn::GpuOutputs,
    want: &fak_tests::gdn::CpuOutputs,
    tol: Tolerance,
) {
    assert_close(&format!("{what}: mixed"), &got.mixed, &want.mixed, STEP_TOL);
    assert_close(&format!("{what}: gates"), &got.gates, &want.gates, STEP_TOL);
    assert_close(&format!("{what}: o"), &got.o, &want.o, tol);
    assert_close(&format!("{what}: y"), &got.y, &want.y, tol);
}

#[test]
fn whole_layer_matches_cpu_through_prefill_and_batched_decode() {
    let ctx = gpu();
    let mut rng = rng(0x6d7_0005);
    for paths in variants::<GatedDeltaDecode>(ctx) {
        let d = small_shapes()[0];
        let weights = LayerWeights::random(&d, &mut rng);
        let layer = GpuLayer::new(ctx, paths, d, &weights, (70, 3, 3));
        let mut cpu = CpuState::zeros(&d, 3);
        // A new sequence on slot 2 (the state starts zeroed), prefilled in one step…
        let prompt = Projections::random(&d, 70, &mut rng);
        let got = layer.step(ctx, &prompt, &[2], 70, Form::Chunked);
        let want = cpu_layer(&d, &weights, &mut cpu, &prompt, &[2], 70);
        assert_layer(&format!("{paths} prefill"), &got, &want);
        // …then decoded together with a second sequence on slot 0.
        for step in 0..2 {
            let tokens = Projections::random(&d, 2, &mut rng);
            let got = layer.step(ctx, &tokens, &[2, 0], 1, Form::Recurrent);
            let want = cpu_layer(&d, &weights, &mut cpu, &tokens, &[2, 0], 1);
            assert_layer(&format!("{paths} decode step {step}"), &got, &want);
        }
        assert_states(
            &format!("{paths} after decode"),
            &layer.download_state(ctx),
            &cpu,
            LAYER_TOL,
        );
    }
}

#[test]
fn prefill_then_decode_equals_prefill_of_one_more_token() {
    let ctx = gpu();
    let mut rng = rng(0x6d7_0006);
    for d in [small_shapes()[1], wide_shape()] {
        for n in [5, 64] {
            let weights = LayerWeights::random(&d, &mut rng);
            let x = Projections::random(&d, n + 1, &mut rng);
            let split = GpuLayer::new(ctx, ctx.paths(), d, &weights, (n as u32 + 1, 1, 1));
            split.step(ctx, &x.rows(&d, 0..n), &[0], n as u32, Form::Chunked);
            let last = split.step(ctx, &x.rows(&d, n..n + 1), &[0], 1, Form::Recurrent);
            let whole = GpuLayer::new(ctx, ctx.paths(), d, &weights, (n as u32 + 1, 1, 1));
            let all = whole.step(ctx, &x, &[0], n as u32 + 1, Form::Chunked);
            let vd = d.value_dim() as usize;
            let what = format!("{d:?} n={n}");
            assert_close(
                &format!("{what}: y of token n+1"),
                &last.y,
                &all.y[n * vd..],
                LAYER_TOL,
            );
            let (a, b) = (split.download_state(ctx), whole.download_state(ctx));
            // The conv state is raw projection rows either way: bit for bit.
            assert_eq!(a.conv, b.conv, "{what}: conv state");
            assert_states(&what, &a, &b, DELTA_TOL);
        }
    }
}

/// The fused decode step (gdn_decode: conv, prep, delta rule and gated norm in one dispatch)
/// against the CPU layer from a random state: two steps of three sequences on slots out of
/// order, slot 1 left alone (its state must stay as it was), on every variant and shape (both
/// head orders, both lane widths, dv of 12 and 32, the family's 128 × 128; that one in every
/// workgroup size, so one pass or several over its rows): y and every slot's state. Where dv is
/// whole q8 blocks the kernel also writes y's q8 blocks (W_out's integer-path input): held bit
/// for bit to what quantize_q8 makes of the y it wrote (both poisoned before every step).
#[test]
fn fused_decode_matches_cpu_for_several_sequences_on_their_slots() {
    let ctx = gpu();
    let mut rng = rng(0x6d7_000b);
    // Value heads of one q8 block in the grouped order too (the wide shape is tiled).
    let blocks = dims(2, 6, 16, 32, 4, HeadMapping::Grouped);
    let shapes = small_shapes().into_iter().chain([blocks]).map(|d| (d, 256));
    let sizes = WORKGROUP_SIZES.map(|wg| (wide_shape(), wg));
    let cases: Vec<(DeltaDims, u32)> = shapes.chain(sizes).collect();
    let mut quantized = 0;
    for paths in variants::<GdnDecode>(ctx) {
        for &(d, wg) in &cases {
            let weights = LayerWeights::random(&d, &mut rng);
            let layer = GpuLayer::with_fused_workgroup(ctx, paths, d, &weights, (3, 3, 4), wg);
            assert_eq!(layer.fused.variant(), paths, "{d:?}: the variant asked for");
            assert_eq!(layer.fused.workgroup(), wg);
            let mut cpu = CpuState::random(&d, 4, &mut rng);
            layer.upload_state(ctx, &cpu);
            for step in 0..2 {
                let what = format!("{paths} {d:?} wg {wg} fused step {step}");
                let x = Projections::random(&d, 3, &mut rng);
                let got = layer.step(ctx, &x, &[3, 0, 2], 1, Form::Fused);
                let want = cpu_layer(&d, &weights, &mut cpu, &x, &[3, 0, 2], 1);
                assert_close(&format!("{what}: y"), &got.y, &want.y, LAYER_TOL);
                assert_states(&what, &layer.download_state(ctx), &cpu, LAYER_TOL);
                assert_eq!(got.y_q8.is_some(), GdnDecode::quantizes(&d), "{what}");
                if let Some(q8) = &got.y_q8 {
                    let want = quantize_q8_of(ctx, &got.y, u64::from(d.value_dim()), 3);
                    assert!(
                        q8 == &want,
                        "{what}: y's q8 blocks are not quantize_q8 of y"
                    );
                    quantized += 1;
                }
            }
        }
    }
    assert!(quantized > 0, "no shape had whole q8 blocks");
}

/// The wide split of the fused decode (`FAK_GDN_DECODE=wide`: a workgroup per value head, the
/// last of a key head's workgroups rolling its q/k conv rows; with its first state rows loaded
/// ahead and, `wide-late`, without) against the CPU layer and against the default split bit for
/// bit, from the same random state: three steps of three sequences on
/// slots out of order (slot 1 left alone), so a counter left non-zero by one dispatch shows as an
/// unrolled conv state in the next; y, y's q8 blocks and every slot's state, on every variant, on
/// the small shapes (two and three value heads a key head, both head orders, dv 12 and 32) and
/// the family's 128 × 128 in one pass (256 invocations) and two (128).
#[test]
fn the_wide_split_matches_cpu_and_the_key_head_splits_bits() {
    let ctx = gpu();
    let mut rng = rng(0x6d7_000d);
    let blocks = dims(2, 6, 16, 32, 4, HeadMapping::Grouped);
    let shapes = small_shapes().into_iter().chain([blocks]).map(|d| (d, 256));
    let cases: Vec<(DeltaDims, u32)> = shapes
        .chain([(wide_shape(), 256), (wide_shape(), 128)])
        .collect();
    let slots = [3, 0, 2];
    for paths in variants::<GdnDecode>(ctx) {
        for &(d, wg) in &cases {
            let weights = LayerWeights::random(&d, &mut rng);
            let start = CpuState::random(&d, 4, &mut rng);
            let layer = |split| {
                let layer = GpuLayer::with_fused(ctx, paths, d, &weights, (3, 3, 4), (wg, split));
                assert_eq!(layer.fused.split(), split);
                layer.upload_state(ctx, &start);
                layer
            };
            let key = layer(Split::KeyHead);
            for wide in [Split::WIDE, Split::ValueHead { ahead: false }] {
                let wide = layer(wide);
                let mut cpu = start.clone();
                key.upload_state(ctx, &start);
                for step in 0..3 {
                    let what =
                        format!("{paths} {d:?} wg {wg} {:?} step {step}", wide.fused.split());
                    let x = Projections::random(&d, 3, &mut rng);
                    let got = wide.step(ctx, &x, &slots, 1, Form::Fused);
                    let want = cpu_layer(&d, &weights, &mut cpu, &x, &[3, 0, 2], 1);
                    assert_close(&format!("{what}: y"), &got.y, &want.y, LAYER_TOL);
                    let state = wide.download_state(ctx);
                    assert_states(&what, &state, &cpu, LAYER_TOL);
                    let same = key.step(ctx, &x, &slots, 1, Form::Fused);
                    assert_close(
                        &format!("{what}: y bits"),
                        &got.y,
                        &same.y,
                        Tolerance::EXACT,
                    );
                    assert!(got.y_q8 == same.y_q8, "{what}: y's q8 blocks");
                    let key_state = key.download_state(ctx);
                    for slot in 0..4 {
                        let (a, b) = (state.flat(slot), key_state.flat(slot));
                        assert_close(&format!("{what}: slot {slot}"), &a, &b, Tolerance::EXACT);
                    }
                }
            }
        }
    }
}

/// `FAK_GDN_DECODE` names the split: `key` the key-head one, unset, empty or `wide` the
/// value-head one loading its state rows ahead, `wide-late` without, anything else an error
/// naming the variable.
#[test]
fn the_decode_split_is_chosen_by_name() {
    assert_eq!(Split::named("").unwrap(), Split::WIDE);
    assert_eq!(Split::named("key").unwrap(), Split::KeyHead);
    assert_eq!(Split::named("wide").unwrap(), Split::WIDE);
    let late = Split::ValueHead { ahead: false };
    assert_eq!(Split::named("wide-late").unwrap(), late);
    let message = Split::named("narrow").unwrap_err().to_string();
    assert!(message.contains("FAK_GDN_DECODE"), "{message}");
}

fn entries(plans: &[Vec<Dispatch>]) -> Vec<&'static str> {
    plans.iter().flatten().map(|d| d.entry).collect()
}

#[test]
fn prefill_dispatch_count_does_not_grow_with_the_token_count() {
    let ctx = gpu();
    let d = small_shapes()[0];
    let mut rng = rng(0x6d7_0007);
    let weights = LayerWeights::random(&d, &mut rng);
    let layer = GpuLayer::new(ctx, ctx.paths(), d, &weights, (1000, 4, 4));
    let k = &layer.bindings;
    let mut scan_grids = Vec::new();
    for len in [1u32, 2, 64, 65, 999] {
        let batch = layer.table.write(ctx, len, &[1]).unwrap();
        let plans = [
            layer.conv.plan(&k.conv, batch).unwrap(),
            layer.prep.plan(&k.prep, len).unwrap(),
            layer.chunked.plan(&k.chunked, batch).unwrap(),
            layer.norm.plan(&k.norm, len).unwrap(),
        ];
        // The scan's entry is the form's: the split scan is the default on cooperative-matrix
        // adapters (2026-12-07 #18: this test asserted `chunk_scan` and failed on an H100).
        let scan = layer.chunked.form().scan_entry();
        assert_eq!(
            entries(&plans),
            ["conv_silu", "prep", "chunk_prepare", scan, "gated_norm"],
            "T={len}"
        );
        // The chunk work is one batched grid over all chunks, not a dispatch per chunk or token.
        // (With room for the lead rows a mid-step snapshot may ask for.)
        assert_eq!(plans[2][0].workgroups, [(len + 63).div_ceil(64), d.nv, 1]);
        scan_grids.push(plans[2][1].workgroups);
    }
    assert!(
        scan_grids.windows(2).all(|w| w[0] == w[1]),
        "{scan_grids:?}"
    );
    // A decode step is one dispatch per kernel, however many sequences it serves.
    for count in 1..=4u32 {
        let slots: Vec<u32> = (0..count).collect();
        let batch = layer.table.write(ctx, 1, &slots).unwrap();
        let plans = [
            layer.conv.plan(&k.conv, batch).unwrap(),
            layer.prep.plan(&k.prep, count).unwrap(),
            layer.decode.plan(&k.decode, batch).unwrap(),
            layer.norm.plan(&k.norm, count).unwrap(),
        ];
        assert_eq!(
            entries(&plans),
            ["conv_silu", "prep", "decode", "gated_norm"],
            "{count} sequences"
        );
        // Or all four in one: a workgroup per (key head, sequence), or per (value head,
        // sequence) in the wide split.
        let fused = layer.fused.plan(&k.fused, batch).unwrap();
        assert_eq!(fused.len(), 1);
        let heads = match layer.fused.split() {
            Split::KeyHead => d.nk,
            Split::ValueHead { .. } => d.nv,
        };
        assert_eq!(fused[0].workgroups, [heads, count, 1]);
    }
    // The fused decode takes one token per sequence, nothing longer.
    let batch = layer.table.write(ctx, 2, &[1]).unwrap();
    assert!(layer.fused.plan(&k.fused, batch).is_err());
}

#[test]
fn a_restored_snapshot_resumes_exactly_like_the_uninterrupted_sequence() {
    let ctx = gpu();
    let mut rng = rng(0x6d7_0008);
    let d = small_shapes()[2];
    let weights = LayerWeights::random(&d, &mut rng);
    let prompt = Projections::random(&d, 40, &mut rng);
    let next = Projections::random(&d, 1, &mut rng);
    let other = Projections::random(&d, 23, &mut rng);

    // Uninterrupted: prompt then the next token on slot 0.
    let plain = GpuLayer::new(ctx, ctx.paths(), d, &weights, (40, 1, 3));
    plain.step(ctx, &prompt, &[0], 40, Form::Chunked);
    let want = plain.step(ctx, &next, &[0], 1, Form::Recurrent);

    // Snapshot after the prompt (at an offset that is a word but no binding alignment), slot 0
    // reused by another prompt, the snapshot restored into slot 2, and the next token there.
    let layer = GpuLayer::new(ctx, ctx.paths(), d, &weights, (40, 1, 3));
    layer.step(ctx, &prompt, &[0], 40, Form::Chunked);
    let offset = 12;
    let snapshot = storage_buffer(ctx, "snapshot", offset + layer.state.snapshot_bytes()).unwrap();
    record(ctx, |e| layer.state.save_slot(e, 0, &snapshot, offset));
    layer.step(ctx, &other, &[0], 23, Form::Chunked);
    record(ctx, |e| layer.state.restore_slot(e, &snapshot, offset, 2));
    let got = layer.step(ctx, &next, &[2], 1, Form::Recurrent);
    // The same kernels on the same values: bit for bit.
    assert_close("y after restore", &got.y, &want.y, Tolerance::EXACT);
    let (a, b) = (layer.download_state(ctx), plain.download_state(ctx));
    assert_close("restored slot", &a.flat(2), &b.flat(0), Tolerance::EXACT);

    // Zeroing a slot clears it and nothing else.
    record(ctx, |e| layer.state.zero_slot(e, 2));
    let cleared = layer.download_state(ctx);
    assert!(cleared.flat(2).iter().all(|&x| x == 0.0));
    assert_eq!(cleared.flat(0), a.flat(0));
    assert!(cleared.flat(0).iter().any(|&x| x != 0.0));

    // Out-of-range slots and snapshots are errors, not wgpu panics.
    let mut encoder = ctx.device.create_command_encoder(&Default::default());
    assert!(layer.state.zero_slot(&mut encoder, 3).is_err());
    assert!(
        layer
            .state
            .save_slot(&mut encoder, 0, &snapshot, offset + 4)
            .is_err()
    );
    assert!(
        layer
            .state
            .restore_slot(&mut encoder, &snapshot, 2, 0)
            .is_err()
    );
}

/// A snapshot written partway through a prefill step (where the prefix cache keeps a branch
/// point) is the state the rows before it leave (conv and recurrent, against those rows run as
/// a step of their own), and the step's outputs and final state are those of the same step
/// without it: at the first row, inside a chunk, on a chunk boundary, and at the last row but
/// one, for a conv kernel of 4 and 3. (The step starts off the chunk grid so that the snapshot
/// is on it: its lead rows move the chunk boundaries, so sums run in another order: y, past the
/// gated RMSNorm, is held to the layer tolerance.)
#[test]
fn a_mid_step_snapshot_is_the_state_the_rows_before_it_leave() {
    let ctx = gpu();
    let mut rng = rng(0x6d7_0009);
    let chunks = chunk_variants(
        ctx,
        "a_mid_step_snapshot_is_the_state_the_rows_before_it_leave",
    );
    for (chunk, d) in chunks
        .into_iter()
        .flat_map(|c| [(c, small_shapes()[0]), (c, small_shapes()[2])])
    {
        let weights = LayerWeights::random(&d, &mut rng);
        let prompt = Projections::random(&d, 150, &mut rng);
        let whole = layer_with(ctx, chunk, d, &weights, (150, 1, 3));
        let want = whole.step(ctx, &prompt, &[0], 150, Form::Chunked);
        let want_state = whole.download_state(ctx);
        for rows in [1u32, 37, 64, 100, 149] {
            let what = format!("{chunk} {d:?}, snapshot after {rows} of 150 rows");
            let head = layer_with(ctx, chunk, d, &weights, (150, 1, 3));
            head.step(
                ctx,
                &prompt.rows(&d, 0..rows as usize),
                &[1],
                rows,
                Form::Chunked,
            );
            let layer = layer_with(ctx, chunk, d, &weights, (150, 1, 3));
            let save = MidSave { rows, slot: 2 };
            // From the position that puts the snapshot on the chunk grid (as the engine's are).
            let pos = (CHUNK - rows % CHUNK) % CHUNK;
            let got = layer.prefill_at(ctx, &prompt, 0, 150, pos, Some(save));
            let state = layer.download_state(ctx);
            let head_state = head.download_state(ctx);
            assert_close(
                &format!("{what}: saved"),
                &state.flat(2),
                &head_state.flat(1),
                DELTA_TOL,
            );
            assert_close(&format!("{what}: y"), &got.y, &want.y, LAYER_TOL);
            assert_close(
                &format!("{what}: final"),
                &state.flat(0),
                &want_state.flat(0),
                DELTA_TOL,
            );
        }
    }
}

/// A prompt step of three sequences (60, 130 and 20 rows on shuffled slots, padding between
/// them): the first and the last from positions off the chunk grid (lead rows), the second
/// from one on it; each crosses a grid point (after 45, 64 and 16 of its rows: where
/// [`with_snapshots`] takes its snapshot).
fn ragged_batch() -> [SeqRows; 3] {
    let seq = |slot, row, len, pos| SeqRows {
        slot,
        row,
        len,
        pos,
        save: None,
    };
    [
        seq(2, 0, 60, 19),
        seq(0, 64, 130, 128),
        seq(1, 224, 20, 240),
    ]
}

/// `seqs` with each sequence's state at its first chunk-grid point inside it snapshot in
/// passing, sequence i's into slot `first_slot + i` (as a step of several prompts gives each
/// its own spare slot).
fn with_snapshots(seqs: &[SeqRows], first_slot: u32) -> Vec<SeqRows> {
    let saving = |(i, s): (usize, &SeqRows)| SeqRows {
        save: Some(MidSave {
            rows: CHUNK - s.pos % CHUNK,
            slot: first_slot + i as u32,
        }),
        ..*s
    };
    seqs.iter().enumerate().map(saving).collect()
}

/// Several sequences of different lengths at rows of their own in one step, as a prompt step of
/// several prompts runs them (`SequenceTable::write_ragged`: not multiples of the 64-row chunk,
/// padding rows between them, slots out of order, two of them from positions off the chunk
/// grid): each sequence's outputs and final state are those of its rows run as a step alone
/// from the same position, bit for bit (the same kernels sum the same values in the same order,
/// their rows at the same places in the same chunks), in both forms; and in the chunked form,
/// where every sequence also takes a snapshot in passing (each into a spare slot of its own),
/// each snapshot is the state its rows before it leave when they run alone from the same
/// position, bit for bit.
#[test]
fn sequences_of_any_lengths_in_one_step_each_compute_as_alone() {
    let ctx = gpu();
    let mut rng = rng(0x6d7_000a);
    let d = small_shapes()[2];
    let weights = LayerWeights::random(&d, &mut rng);
    let x = Projections::random(&d, 256, &mut rng);
    // Slots 0..3 the sequences', 3..6 their snapshots' (random: each must be overwritten).
    let start = CpuState::random(&d, 6, &mut rng);
    let vd = d.value_dim() as usize;
    let chunks = chunk_variants(
        ctx,
        "sequences_of_any_lengths_in_one_step_each_compute_as_alone",
    );
    let forms = chunks
        .into_iter()
        .map(|c| (Form::Chunked, c))
        .chain([(Form::Recurrent, ChunkVariant::F32)]);
    for (form, chunk) in forms {
        let layer = || {
            let layer = layer_with(ctx, chunk, d, &weights, (256, 3, 6));
            layer.upload_state(ctx, &start);
            layer
        };
        // The recurrent form takes no snapshots (the engine's prompt steps run the chunked).
        let seqs = match form {
            Form::Chunked => with_snapshots(&ragged_batch(), 3),
            _ => ragged_batch().to_vec(),
        };
        let together = layer();
        let got = together.step_ragged(ctx, &x, &seqs, form);
        let state = together.download_state(ctx);
        for (
            i,
            &SeqRows {
                slot,
                row,
                len,
                pos,
                save,
            },
        ) in seqs.iter().enumerate()
        {
            let what = format!("{form:?} {chunk}: sequence {i} ({len} rows from row {row})");
            let rows = row as usize..(row + len) as usize;
            let alone = layer();
            let own = x.rows(&d, rows.clone());
            let want = match form {
                Form::Chunked => alone.prefill_at(ctx, &own, slot, len, pos, None),
                _ => alone.step(ctx, &own, &[slot], len, form),
            };
            let got_y = &got.y[rows.start * vd..rows.end * vd];
            assert_close(&format!("{what}: y"), got_y, &want.y, Tolerance::EXACT);
            let want_state = alone.download_state(ctx).flat(slot as usize);
            assert_close(
                &format!("{what}: state"),
                &state.flat(slot as usize),
                &want_state,
                Tolerance::EXACT,
            );
            if let Some(MidSave { rows, slot: spare }) = save {
                let head = layer();
                let own = x.rows(&d, row as usize..(row + rows) as usize);
                head.prefill_at(ctx, &own, slot, rows, pos, None);
                let want = head.download_state(ctx).flat(slot as usize);
                let what = format!("{what}: its snapshot after {rows} rows in slot {spare}");
                assert_close(&what, &state.flat(spare as usize), &want, Tolerance::EXACT);
            }
        }
    }
}

/// The table takes a snapshot per sequence only where the kernels can write it without a race
/// or a state the step never computes: each into a slot of its own (not a sequence's of the
/// batch, not another snapshot's, within the slots), inside its sequence on the chunk grid.
#[test]
fn a_table_refuses_snapshots_that_would_race_or_leave_the_grid() {
    let ctx = gpu();
    let table = SequenceTable::new(ctx, 3, 6).expect("table");
    let save = |rows, slot| Some(MidSave { rows, slot });
    let seqs = with_snapshots(&ragged_batch(), 3);
    assert!(table.write_ragged(ctx, &seqs).is_ok(), "{seqs:?}");
    let refused = |what: &str, i: usize, s: Option<MidSave>| {
        let mut bad = seqs.clone();
        bad[i].save = s;
        let e = table.write_ragged(ctx, &bad).expect_err(what).to_string();
        assert!(e.contains("no other snapshot uses"), "{what}: {e}");
    };
    refused("two snapshots into one slot", 2, save(16, 4));
    refused("a snapshot into a sequence's slot", 1, save(64, 0));
    refused("a snapshot past the slots", 1, save(64, 6));
    refused("a snapshot off the chunk grid", 0, save(40, 3));
    refused("a snapshot after none of its rows", 0, save(0, 3));
}

/// Records one encoder's copies and waits for them.
fn record(ctx: &GpuContext, f: impl FnOnce(&mut wgpu::CommandEncoder) -> Result<(), GpuError>) {
    let mut encoder = ctx.device.create_command_encoder(&Default::default());
    f(&mut encoder).expect("recording state copies");
    let index = ctx.queue.submit([encoder.finish()]);
    ctx.device
        .poll(wgpu::PollType::Wait {
            submission_index: Some(index),
            timeout: None,
        })
        .expect("poll");
}

#[test]
fn shapes_the_kernels_cannot_run_are_rejected_naming_the_key() {
    let ctx = gpu();
    let cases = [
        (dims(2, 6, 20, 16, 4, HeadMapping::Tiled), "ssm.state_size"),
        (dims(2, 6, 512, 16, 4, HeadMapping::Tiled), "ssm.state_size"),
        (
            dims(2, 5, 16, 16, 4, HeadMapping::Tiled),
            "ssm.time_step_rank",
        ),
        (dims(2, 6, 16, 6, 4, HeadMapping::Tiled), "value head size"),
        (dims(2, 6, 16, 16, 5, HeadMapping::Tiled), "ssm.conv_kernel"),
    ];
    for (d, key) in cases {
        let errors = [
            GatedDeltaDecode::new(ctx, KernelPaths::FALLBACK, d).err(),
            GatedDeltaChunked::new(ctx, KernelPaths::FALLBACK, d).err(),
            DeltaState::new(ctx, d, 1).err(),
        ];
        for e in errors {
            let message = e.expect("rejected").to_string();
            assert!(message.contains(key), "{d:?}: {message}");
        }
    }
}

#[test]
fn tests_cover_the_subgroup_path_and_its_fallback_where_the_adapter_has_subgroups() {
    let ctx = gpu();
    let paths = variants::<GatedDeltaDecode>(ctx);
    assert!(paths.iter().any(|p| !p.subgroup));
    if ctx.device.features().contains(wgpu::Features::SUBGROUP) {
        assert!(paths.iter().any(|p| p.subgroup));
        // The subgroup variant is really built (not silently the fallback) for both widths.
        for d in [small_shapes()[0], wide_shape()] {
            let sub = paths.iter().find(|p| p.subgroup).unwrap();
            let kernel = GatedDeltaDecode::new(ctx, *sub, d).unwrap();
            assert!(kernel.variant().subgroup, "{d:?}");
            assert!(kernel.row_lanes() <= ctx.facts().subgroup_min_size);
        }
    }
    assert!(
        paths
            .iter()
            .all(|p| GatedDeltaDecode::AXES.select(*p) == *p)
    );
}

#[test]
fn kernels_build_for_the_largest_supported_head_within_the_workgroup_memory_limit() {
    let ctx = gpu();
    // dk = 256 puts 29.5 KB in chunk_scan's workgroup memory and 16 vec4s per decode lane.
    let d = dims(1, 2, 256, 256, 4, HeadMapping::Tiled);
    for paths in variants::<GatedDeltaDecode>(ctx) {
        GatedDeltaDecode::new(ctx, paths, d).expect("decode, dk = 256");
        GdnDecode::new(ctx, paths, d).expect("fused decode, dk = 256");
    }
    let test = "kernels_build_for_the_largest_supported_head_within_the_workgroup_memory_limit";
    let limit = ctx.device.limits().max_compute_workgroup_storage_size;
    for chunk in chunk_variants(ctx, test) {
        let built = GatedDeltaChunked::with_form(ctx, chunk.paths, d, chunk.form);
        // A coop form whose workgroup memory exceeds the limit there (the split scan's two vst
        // tiles at dk = 256 on 48 KiB) is refused by name, not built.
        let coop = chunk.paths.coop_matrix.is_some();
        if coop && GatedDeltaChunked::coop_workgroup_bytes(d.dk, chunk.form) > limit {
            assert!(
                matches!(built, Err(GpuError::TooLarge { .. })),
                "{chunk}: must be refused"
            );
            continue;
        }
        let kernel = built.expect("chunked, dk = 256");
        assert_eq!(kernel.on_matrix_units(), coop);
    }
}

/// Every form of a chunked kernel computes the same values in the same order: its outputs and
/// final states equal the kernel's default form's bit for bit — but the split scan's forms,
/// whose new sum order the f64-reference tests hold instead (`ChunkForm::same_bits`), and which
/// equal the first of them bit for bit — whole chunks, a partial one,
/// two sequences, dk 16 (a coop subgroup with no state tile of its own), dv 12 and dk 128 (two
/// rounds of the coop state update, which the fused scan takes in one pass). The f32 kernel's
/// forms run everywhere; the coop kernel's where the adapter has 16×16 matrices (elsewhere the
/// test says that it skipped them).
#[test]
fn every_form_computes_its_kernels_default_bits() {
    let ctx = gpu();
    let test = "every_form_computes_its_kernels_default_bits";
    let variants = chunk_variants(ctx, test);
    let mut rng = rng(0x6d7_000c);
    let shapes = [small_shapes()[0], small_shapes()[2], wide_shape()];
    for d in shapes {
        let weights = LayerWeights::random(&d, &mut rng);
        let start = CpuState::random(&d, 3, &mut rng);
        let (mixed, gates) = random_prepared(&d, 2 * 130, &mut rng);
        let run = |chunk: ChunkVariant| {
            let layer = layer_with(ctx, chunk, d, &weights, (2 * 130, 2, 3));
            layer.upload_state(ctx, &start);
            let o = layer.delta_only(ctx, &mixed, &gates, &[2, 0], 130, Form::Chunked);
            let state = layer.download_state(ctx);
            (o, [state.flat(2), state.flat(0)].concat())
        };
        let kernels = [KernelPaths::FALLBACK]
            .into_iter()
            .chain(GatedDeltaChunked::coop_paths(ctx.paths()));
        for kernel in kernels {
            let mut forms = variants.iter().filter(|c| c.paths == kernel);
            let default = *forms.next().expect("the default form first");
            assert_eq!(default.form, ChunkForm::default());
            let (want_o, want_state) = run(default);
            let finite = want_o.iter().chain(&want_state).all(|x| x.is_finite());
            assert!(finite, "{default} {d:?}: not finite");
            // The split scan's forms against the first of them (its run, kept).
            let mut split_first: Option<(ChunkVariant, Vec<f32>, Vec<f32>)> = None;
            for &chunk in forms {
                let (o, state) = run(chunk);
                let (reference, want_o, want_state) = match (chunk.form.same_bits(), &split_first) {
                    (true, _) => (default, &want_o, &want_state),
                    (false, Some((first, o, state))) => (*first, o, state),
                    (false, None) => {
                        split_first = Some((chunk, o, state));
                        continue;
                    }
                };
                let what = format!("{chunk} against {reference}, {d:?}");
                assert_close(&format!("{what}: o"), &o, want_o, Tolerance::EXACT);
                assert_close(
                    &format!("{what}: state"),
                    &state,
                    want_state,
                    Tolerance::EXACT,
                );
            }
        }
    }
}

/// `FAK_GDN_CHUNK` names the chunked kernel: `f32` the f32 one, unset or empty the
/// cooperative-matrix one (where the adapter has it) in the default form (the split scan's with
/// U stored from the accumulators, `coop+quads+fused+lean+splitk+ustore+blocks`), the former
/// default by its name, `coop` the plain
/// form, anything else an error naming the variable. And where the adapter
/// has 16×16 cooperative matrices the coop kernel is among the tested ones and fits at every
/// test shape; where it has not, the test says it skipped.
#[test]
fn the_chunk_kernel_is_chosen_by_name_and_the_coop_one_tested_where_the_adapter_has_it() {
    assert_eq!(ChunkKernel::named("").unwrap(), ChunkKernel::DEFAULT);
    let all = ChunkKernel::named("coop+quads+fused+lean+splitk+ustore+blocks").unwrap();
    assert_eq!(all, ChunkKernel::DEFAULT);
    let unsplit = ChunkKernel::named("coop+quads+fused+lean+blocks").unwrap();
    assert_eq!(unsplit, ChunkKernel::DEFAULT_UNSPLIT);
    let split_of_unsplit = ChunkForm {
        split_k: true,
        u_direct: true,
        ..unsplit.form
    };
    assert_eq!(ChunkKernel::DEFAULT.form, split_of_unsplit);
    assert_ne!(
        ChunkKernel::named("coop+quads+fused+columns").unwrap(),
        ChunkKernel::DEFAULT
    );
    assert_eq!(ChunkKernel::named("f32").unwrap(), ChunkKernel::F32);
    assert_eq!(ChunkKernel::named("coop").unwrap(), ChunkKernel::COOP);
    for form in ChunkForm::COOP {
        let name = format!("coop{}", form.suffix());
        let kernel = ChunkKernel { coop: true, form };
        assert_eq!(ChunkKernel::named(&name).unwrap(), kernel);
    }
    let columns = ChunkKernel::named("f32+columns").unwrap();
    assert_eq!((columns.coop, columns.form), (false, ChunkForm::F32[1]));
    let blocks = ChunkKernel::named("coop+quads+fused+blocks").unwrap();
    assert_eq!((blocks.coop, blocks.form.inverse), (true, Inverse::Blocks));
    assert!(blocks.form.quads && blocks.form.fused);
    let lean = ChunkKernel::named("coop+quads+fused+lean+blocks").unwrap();
    assert_eq!(lean.form, ChunkForm::COOP[6]);
    assert!(lean.form.lean && !blocks.form.lean);
    let split = ChunkKernel::named("coop+quads+fused+lean+splitk+blocks").unwrap();
    assert_eq!(split.form, ChunkForm::COOP[7]);
    assert!(split.form.split_k && !split.form.same_bits() && !lean.form.split_k);
    assert_eq!(split.form.scan_entry(), "chunk_scan_split");
    let split_after_v = ChunkKernel::named("coop+quads+lean+splitk+blocks").unwrap();
    assert_eq!(split_after_v.form, ChunkForm::COOP[8]);
    assert!(split_after_v.form.split_k && !split_after_v.form.fused);
    assert!(ChunkForm::COOP[..7].iter().all(|f| f.same_bits()));
    // The default with the Gram phase once per key head, U from the accumulators, and both.
    let key_heads = ChunkKernel::named("coop+quads+fused+lean+splitk+keyheads+blocks").unwrap();
    let u_direct = ChunkKernel::named("coop+quads+fused+lean+splitk+ustore+blocks").unwrap();
    let both = ChunkKernel::named("coop+quads+fused+lean+splitk+keyheads+ustore+blocks").unwrap();
    assert_eq!(
        [key_heads.form, u_direct.form, both.form],
        [ChunkForm::COOP[9], ChunkForm::COOP[10], ChunkForm::COOP[11]]
    );
    let default_with = |key_heads, u_direct| ChunkForm {
        key_heads,
        u_direct,
        ..ChunkKernel::DEFAULT.form
    };
    assert_eq!(key_heads.form, default_with(true, false));
    assert_eq!(u_direct.form, default_with(false, true));
    assert_eq!(both.form, default_with(true, true));
    assert_eq!(default_with(false, true), ChunkKernel::DEFAULT.form);
    let blocks = ChunkKernel::named("f32+blocks").unwrap();
    assert_eq!((blocks.coop, blocks.form), (false, ChunkForm::F32[2]));
    let f32_key_heads = ChunkKernel::named("f32+keyheads+blocks").unwrap();
    assert_eq!(
        f32_key_heads.form,
        ChunkForm {
            key_heads: true,
            ..blocks.form
        }
    );
    assert_eq!(f32_key_heads.form, ChunkForm::F32[3]);
    let bad_names = [
        "Coop",
        "coop+fused+quads",
        "coop+quads+quads",
        "quads",
        "f32+quads",
        "coop+quads+fused+columns+blocks",
        "coop+quads+fused+blocks+columns",
        "f32+blocks+columns",
        "coop+lean",
        "coop+quads+lean+fused+blocks",
        "f32+lean+blocks",
        // gdnchunk's forms, measured losing or neutral and removed.
        "coop+quads+fused+lean+ahead+blocks",
        "coop+quads+fused+lean+deep+blocks",
        "coop+quads+fused+lean+ahead+deep+blocks",
        "f32+ahead+blocks",
        // gdnchunk2's forms, measured neutral and removed.
        "coop+quads+fused+lean+pairs+blocks",
        "coop+quads+fused+lean+lower+blocks",
        "coop+quads+fused+lean+pairs+lower+blocks",
        "f32+splitk+blocks",
        "coop+splitk",
        "coop+quads+fused+splitk+blocks",
        "coop+quads+fused+lean+blocks+splitk",
        "coop+quads+fused+lean+splitk+ustore+keyheads+blocks",
        "coop+quads+fused+lean+splitk+blocks+keyheads",
        "coop+quads+fused+lean+keyheads+blocks",
        "coop+keyheads",
        "f32+keyheads",
        "f32+ustore+blocks",
        "f32+keyheads+ustore+blocks",
    ];
    for bad in bad_names {
        let e = ChunkKernel::named(bad).unwrap_err().to_string();
        assert!(e.contains("FAK_GDN_CHUNK"), "{bad}: {e}");
    }
    let ctx = gpu();
    let test =
        "the_chunk_kernel_is_chosen_by_name_and_the_coop_one_tested_where_the_adapter_has_it";
    let tested = chunk_variants(ctx, test);
    let coop16 = ctx.paths().coop_matrix == Some(fak::gpu::CoopShape::M16x16);
    assert_eq!(tested.iter().any(|c| c.paths.coop_matrix.is_some()), coop16);
    let forms: Vec<ChunkForm> = tested.iter().map(|c| c.form).collect();
    let mut want = ChunkForm::F32.to_vec();
    if coop16 {
        want.extend(ChunkForm::COOP);
    }
    assert_eq!(forms, want);
    let limit = ctx.device.limits().max_compute_workgroup_storage_size;
    if coop16 {
        for d in small_shapes().into_iter().chain([wide_shape()]) {
            for form in ChunkForm::COOP {
                let bytes = GatedDeltaChunked::coop_workgroup_bytes(d.dk, form);
                assert!(bytes <= limit, "{d:?} {form:?}");
            }
        }
    }
}

/// Where the default's split scan does not fit the workgroup memory (its two result tiles at
/// dk = 256 on NVIDIA's 48 KiB) the engine builds the coop kernel in the former default's form
/// (`coop+quads+fused+lean+blocks`) with no error; where neither fits, the f32 kernel in its
/// plain form; a named coop form that does not fit (the split scan's twin), the f32 kernel in
/// that form's inverse, as before; an adapter without 16×16 matrices, the f32 kernel. Host side:
/// [`GatedDeltaChunked::chosen`] on the coop paths and the limits, no device.
#[test]
fn the_default_falls_back_to_the_unsplit_scan_where_the_split_one_does_not_fit() {
    let (_, coop) = all_coop_paths()
        .find(|(shape, _)| *shape == fak::gpu::CoopShape::M16x16)
        .unwrap();
    let f32 = KernelPaths::FALLBACK;
    let nvidia = 48 * 1024;
    let (split, unsplit) = (ChunkKernel::DEFAULT, ChunkKernel::DEFAULT_UNSPLIT);
    let twin = ChunkKernel::named("coop+quads+lean+splitk+blocks").unwrap();
    let bytes = |dk, kernel: ChunkKernel| GatedDeltaChunked::coop_workgroup_bytes(dk, kernel.form);
    assert!(bytes(128, split) <= nvidia && bytes(256, split) > nvidia);
    assert!(bytes(256, twin) > nvidia && bytes(256, unsplit) <= nvidia);
    let chosen = GatedDeltaChunked::chosen;
    assert_eq!(chosen(split, coop, 128, nvidia), (coop, split.form));
    assert_eq!(chosen(split, coop, 256, nvidia), (coop, unsplit.form));
    assert_eq!(chosen(unsplit, coop, 256, nvidia), (coop, unsplit.form));
    assert_eq!(chosen(twin, coop, 128, nvidia), (coop, twin.form));
    assert_eq!(chosen(twin, coop, 256, nvidia), (f32, twin.form));
    assert_eq!(
        chosen(split, coop, 256, 32 * 1024),
        (f32, ChunkForm::default())
    );
    assert_eq!(chosen(split, f32, 128, nvidia), (f32, ChunkForm::default()));
    assert_eq!(
        chosen(ChunkKernel::F32, coop, 128, nvidia),
        (f32, ChunkForm::default())
    );
}

/// `FAK_GDN_PROFILE` says how a profile notes the chunked kernel: unset or empty as one op,
/// `entries` as its two dispatches apart, anything else an error naming the variable.
#[test]
fn the_chunked_profile_split_is_chosen_by_name() {
    assert!(!entries_named("").unwrap());
    assert!(entries_named("entries").unwrap());
    for bad in ["Entries", "entries,", "1", "prepare"] {
        let e = entries_named(bad).unwrap_err().to_string();
        assert!(e.contains("FAK_GDN_PROFILE"), "{bad}: {e}");
    }
    assert_eq!(
        [ChunkEntry::Prepare as usize, ChunkEntry::Scan as usize],
        [0, 1]
    );
}

/// The host refuses the cooperative-matrix kernel by [`GatedDeltaChunked::coop_workgroup_bytes`]:
/// it must be what the WGSL declares for the larger of its two entry points (naga's layouter,
/// with the DK override applied as a pipeline would), and every workgroup variable a whole
/// number of 16 bytes (the H200 broke the tiles beside a lone u32: experiments/coop-probe), at
/// every test shape, on adapters that cannot run it too.
#[test]
fn the_coop_kernel_declares_the_workgroup_memory_the_host_counts() {
    let (_, paths) = all_coop_paths()
        .find(|(coop, _)| *coop == fak::gpu::CoopShape::M16x16)
        .unwrap();
    let shapes = small_shapes().into_iter().chain([wide_shape()]);
    for (d, form) in shapes.flat_map(|d| ChunkForm::COOP.map(|form| (d, form))) {
        let source = GatedDeltaChunked::source_with(paths, &d, form);
        let (module, info) = parse_valid(&source.module.text());
        let mut constants = naga::back::PipelineConstants::default();
        for &(name, value) in &source.pipelines[0].constants {
            constants.insert(name.to_owned(), value);
        }
        let bytes = ["chunk_prepare", form.scan_entry()].map(|entry| {
            let stage = Some((naga::ShaderStage::Compute, entry));
            let (pipeline, _) = naga::back::pipeline_constants::process_overrides(
                &module, &info, stage, &constants,
            )
            .unwrap();
            assert_eq!(
                odd_sized_workgroup_vars(&pipeline),
                [],
                "{d:?} {form:?} {entry}"
            );
            workgroup_bytes(&pipeline, None)
        });
        let larger = bytes[0].max(bytes[1]);
        assert_eq!(
            larger,
            GatedDeltaChunked::coop_workgroup_bytes(d.dk, form),
            "{d:?} {form:?} {bytes:?}"
        );
    }
}

/// Every chunked form reads only what its dispatches wrote: with the scratch (W, U, P, γ, the
/// coop kernel's f16 halves) filled with NaN before each step, a ragged batch of three
/// sequences (45, 130 and 20 rows on shuffled slots), then one sequence of 70, match the CPU
/// layer — o, y and the states — within the layer's tolerance. dv = 12 leaves the
/// coop kernel's U blocks part-wide and dk = 16 a subgroup without a state tile; nv = nk with
/// dv = 32 gives the key-head forms one value head a workgroup and `ustore` a whole U block.
#[test]
fn every_chunked_form_on_a_poisoned_scratch_matches_the_cpu_layer() {
    let ctx = gpu();
    let test = "every_chunked_form_on_a_poisoned_scratch_matches_the_cpu_layer";
    let mut rng = rng(0x6d7_000e);
    let vd = |d: &DeltaDims| d.value_dim() as usize;
    let mut failed = Vec::new();
    for d in [
        small_shapes()[0],
        small_shapes()[2],
        one_value_head_per_key_head(),
    ] {
        let weights = LayerWeights::random(&d, &mut rng);
        let x = Projections::random(&d, 256, &mut rng);
        let alone = Projections::random(&d, 70, &mut rng);
        let seqs = ragged_batch();
        let start = CpuState::random(&d, 4, &mut rng);
        for chunk in chunk_variants(ctx, test) {
            // Every form is checked before the test fails, so one run names all that fail.
            let tol = match chunk.paths.coop_matrix {
                Some(_) => COOP_LAYER_TOL,
                None => LAYER_TOL,
            };
            let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let layer = layer_with(ctx, chunk, d, &weights, (256, 3, 4));
                layer.upload_state(ctx, &start);
                let mut cpu = start.clone();
                layer.poison_chunk_scratch(ctx);
                let got = layer.step_ragged(ctx, &x, &seqs, Form::Chunked);
                for (i, &SeqRows { slot, row, len, .. }) in seqs.iter().enumerate() {
                    let what = format!("{chunk} {d:?}: sequence {i} ({len} rows from row {row})");
                    let rows = row as usize..(row + len) as usize;
                    let part = x.rows(&d, rows.clone());
                    let want = cpu_layer(
                        &d,
                        &weights,
                        &mut cpu,
                        &part,
                        &[slot as usize],
                        len as usize,
                    );
                    let span = rows.start * vd(&d)..rows.end * vd(&d);
                    assert_close(&format!("{what}: o"), &got.o[span.clone()], &want.o, tol);
                    assert_close(&format!("{what}: y"), &got.y[span], &want.y, tol);
                }
                layer.poison_chunk_scratch(ctx);
                let got = layer.step(ctx, &alone, &[3], 70, Form::Chunked);
                let want = cpu_layer(&d, &weights, &mut cpu, &alone, &[3], 70);
                assert_layer_within(&format!("{chunk} {d:?}: 70 rows alone"), &got, &want, tol);
                let what = format!("{chunk} {d:?}: after both steps");
                assert_states(&what, &layer.download_state(ctx), &cpu, tol);
            }));
            if checked.is_err() {
                failed.push(format!("{chunk} {d:?}"));
            }
        }
    }
    assert!(
        failed.is_empty(),
        "forms that failed (messages above): {failed:?}"
    );
}
