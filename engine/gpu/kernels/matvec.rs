//! `matvec`: `y = W x` or `y += W x` for up to [`MAX_BATCH`] input vectors, reading the GGUF
//! blocks of W in place (wgsl/matvec.wgsl).
//!
//! # Use
//!
//! At load time: [`MatVec::new`] once per model, then [`MatVec::bind`] once per weight tensor
//! and use (it checks every shape and buffer size, splits a tensor larger than one binding into
//! row ranges and builds their bind groups). Per step: [`MatVec::encode`] records the dispatches.
//!
//! # Where the batch size comes from
//!
//! The kernel reads B, the number of input vectors, from the shared [`Step`](crate::gpu::Step)
//! uniform (`n_tokens`), so bind groups never change. `encode`'s `n_tokens` must be the same
//! number: it picks the pipeline compiled for at most 1, 2, 4 or 8 vectors (the accumulators are
//! unrolled for that capacity) and leaves the grid alone, which depends on the rows only (except
//! in the batched form's opt-in split, a multiple of it: [`MatVecLayout::split_by`]). A Step
//! asking for more vectors than the chosen pipeline holds computes only as many as it holds.
//!
//! # Fusions
//!
//! [`MatVec::bind_fused`] takes a [`MatVecFusion`]: an RMSNorm of x folded into the product (the
//! pre-norm of QKV and of the MLP: x is then the residual stream) and the gate/up pairing that
//! writes `silu(gate)·up` (W holds the gate rows followed by the up rows). Each saves the
//! dependent dispatches of the ops it folds in; the math is in wgsl/matvec.wgsl. (The
//! producer-side quantize, `FAK_DECODE_FUSE=pquant`, and a second weight of the same input in
//! the same dispatch, `FAK_DECODE_FUSE=merge`, lost on an H100 and were removed:
//! experiments/NOTES.md, "pqz", "prune" and "Third prune".)
//!
//! # The integer path
//!
//! On int-dot variants ([`KernelPaths::int_dot`]), [`MatVecFusion::q8`] makes a binding read x
//! as the 8-bit blocks [`QuantizeQ8`](super::quantize_q8::QuantizeQ8) wrote (the norm, if any,
//! folded into that quantization) and multiply with integer dot products (wgsl/matvec_q8.wgsl),
//! for the types of [`MatVec::Q8_TYPES`]. Same grid, rows, pairing and accumulation as the f32
//! path; the result is W·x̂ with x̂ the quantized x.
//!
//! # Layouts
//!
//! A [`MatVecLayout`] says how a workgroup covers rows: its invocations, how many teams of them
//! each stream 4 rows, and how many units an invocation loads before multiplying. Every layout
//! computes the same sums up to how a row is split between invocations;
//! [`MatVecLayout::CANDIDATES`] are the ones experiments/matvec-bench times and
//! tests/gpu_matvec.rs checks. A binding takes [`MatVecFusion::layout`], else the one
//! `FAK_MATVEC_LAYOUT` names (`MatVecLayout::from_env`; for a binding that accumulates into y,
//! `FAK_MATVEC_RESIDUAL_LAYOUT` first, opt-in), else its input's:
//! [`MatVecLayout::DEFAULT`] (f32) or [`MatVecLayout::INTEGER`] (q8). The wide form reads Q6_K
//! blocks with word loads and a funnel per 16-byte run, the −32 of the codes folded through x
//! (wgsl/matvec_q8_wide.wgsl's header; two other loads of the same bytes lost on an H100 and
//! were removed: experiments/NOTES.md, "Session 2026-12-07 #21").
//!
//! # By batch size
//!
//! The layout is chosen by (type, rows, cols) alone, never by B, and so is every row's order of
//! summation: a sequence's outputs do not depend on what else is in the batch (issue 21). What
//! changes with B is only how a wide layout reads x ([`MatVecLayout::at_capacity`]). (A staged
//! form, the batch's x copied into workgroup memory once per step, was slower in the model on an
//! H100 and removed: experiments/NOTES.md, "batch8" and "prune".) By default a q8 binding's wide
//! layout runs in the batched form
//! at every batch, one vector included (wgsl/matvec_q8_batched.wgsl; `FAK_MATVEC_BATCHED=0` for
//! the plain wide loop): the wide form's loop over vectors with each vector's codes read 16
//! bytes at a time (the codes bound again as x16) and no branch per vector — the same sums, bit
//! for bit. On an H100 (experiments/NOTES.md, "Session 2026-12-06 #8") the Qwen3.5-27B's step of
//! 8 sequences went from 48.6–48.8 to 35.1–36.1 ms with it and one sequence from 76.1 to 85.4
//! tok/s (measured with every binding in 256/4/1/batched); the one-vector figures of the 27B's
//! ffn_down: 30.2 → 25.0 µs (Q4_K), 62.3 → 46.0 (Q6_K): x's 16 scalar code loads a unit, 64
//! bytes apart across a warp, cost more L1 wavefronts than W's loads ("mvbw").
//! The batched form's split ([`MatVecLayout::split_by`], `…/splitG`, or `FAK_MATVEC_SPLIT=G` for
//! every batched binding; by default G = 2 on a GPU and none on a CPU adapter, `FAK_MATVEC_SPLIT=0`
//! for none): a step of more than G vectors runs on B / G times the grid, each workgroup taking
//! G of the vectors for its rows — the same bits (each vector's sums are the batched form's),
//! lighter lanes and more of them, W read again from L2 (experiments/NOTES.md, "b8"). On an
//! H100 the Qwen3.5-27B's step of 8
//! sequences went from 36.5 to 31.6–32.2 ms with G = 2 (G = 4: 35.2; "Session 2026-12-06 #10").
//! On a CPU adapter (lavapipe) the split only decodes W again for every G vectors, with no L2 to
//! serve the repeat: the gpu_matvec suite took 1039 s there with G = 2 against 365 s without
//! ("Session 2026-12-06 #11"), so [`MatVec::default_split`] gives CPU adapters none.
//! Q6_K bindings take a split of their own ([`MatVec::splits_vectors_of`]): G = 4 on a GPU
//! ([`MatVec::DEFAULT_SPLIT_Q6`]) where `FAK_MATVEC_SPLIT` names none, or what
//! `FAK_MATVEC_SPLIT_Q6=G` (0, 1, 2 or 4) names. A Q6_K unit's W side (loads, funnels, the
//! 6-bit assembly) costs ~3× a Q4_K unit's and the split repeats it B / G times, so the
//! occupancy of G = 2 does not pay for Q6_K as it does for Q4_K: on an H100 the Qwen3.5-27B's
//! step of 8 sequences took 27.0–28.9 ms with G = 4 for Q6_K against 27.8–29.3 with G = 2 (three
//! pairs interleaved, +1.5 to +4.4 % aggregate; G = 1: −11 %), the Qwen3-8B's the same within
//! its noise (experiments/NOTES.md, "Session 2026-12-07 #21"). Q6_K bindings of fewer than
//! [`MatVec::SPLIT_Q6_MIN_ROWS`] rows keep G = 2: the same runs profiled attn_v (1024 rows, whose
//! grid G = 4 halves to under one workgroup an SM at 8 vectors) at 178 µs a step with G = 2
//! against 226 with G = 4 on the 27B, 374 against 456 on the 8B ("Session 2026-12-07 #22").
//! The same bits at every split. [`ShortRows`] gives the q8 bindings of short rows
//! (`FAK_MATVEC_SHORT_MIN_COLS`, default 4097, to 8192 columns; ≥ `FAK_MATVEC_SHORT_MIN_ROWS`
//! rows, default 4096) that name no layout 64/4/1, or
//! the layout `FAK_MATVEC_SHORT_LAYOUT` names (`off`: none): other bits than
//! [`MatVecLayout::INTEGER`]'s for those products, at every batch alike.

use super::quantize_q8::{Q8_BLOCK, Q8Vectors};
use super::tensors::{bind_group, checked_row_bytes};
use crate::gpu::activations::Activations;
use crate::gpu::buffers::{Grid, Window, split_rows, storage_buffer, uniform};
use crate::gpu::context::GpuContext;
use crate::gpu::error::GpuError;
use crate::gpu::facts::AdapterFacts;
use crate::gpu::kernel::{
    Kernel, KernelSource, KernelVariant, PipelineSpec, WgslModule, build, wgsl,
};
use crate::gpu::layout::Slot;
use crate::gpu::paths::{Axes, KernelPaths};
use crate::gpu::profile::{OpBytes, Recorded};
use crate::gpu::step::{MAX_BATCH, StepBuffer};
use crate::quant::GgmlType;
use std::collections::HashMap;
use std::sync::Mutex;

/// The batch capacities pipelines are compiled for; `encode` takes the smallest that holds the
/// step's vectors.
pub const BATCH_CAPACITIES: [u32; 4] = [1, 2, 4, 8];
/// Output rows per team (`const ROWS` of the WGSL).
const ROWS_PER_TEAM: u64 = 4;

/// How a workgroup covers rows (the `WG`, `TEAMS` and `UNROLL` overrides of wgsl/matvec.wgsl).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct MatVecLayout {
    /// Invocations per workgroup: a power of two, 32..=256.
    pub invocations: u32,
    /// Teams of `invocations / teams` invocations, each streaming 4 rows: a power of two, at
    /// most `invocations / 4`.
    pub teams: u32,
    /// Units an invocation loads before it multiplies them: 1 or 2.
    pub unroll: u32,
    /// The wide form (wgsl/matvec_q8_wide.wgsl): units of 64 elements, for q8 inputs and Q4_K or
    /// Q6_K weights; a binding of another input or type takes the same layout in the narrow
    /// form ([`MatVecLayout::narrowed`]).
    pub wide: bool,
    /// The wide form with its loop over input vectors in the batched form
    /// (wgsl/matvec_q8_batched.wgsl, override BATCHED; implies `wide`): each vector's codes read
    /// 16 bytes at a time, the vectors of a unit one branch-free block — the same sums, bit for
    /// bit. For q8 vectors read from global memory only (elsewhere it runs wide).
    pub batched: bool,
    /// The batched form's split (implies `batched`; 0: none): a step of more than `split`
    /// vectors runs on (capacity / `split`) times the grid, each workgroup taking `split` of them
    /// (1, 2 or 4) for its rows — the same bits (wgsl/matvec_q8_batched.wgsl, VECTOR_GROUPS).
    pub split: u32,
}

impl MatVecLayout {
    /// 64 invocations on 4 rows, one unit at a time (the layout of experiments/matvec-design.md):
    /// the f32 path's, fastest there for every decode product on the H200.
    pub const DEFAULT: MatVecLayout = MatVecLayout::new(64, 1, 1);
    /// The integer path's: 4 teams of 64 on 16 rows (on the H200 2.2–3× faster than the default
    /// layout for its Q4_K/Q6_K products).
    pub const INTEGER: MatVecLayout = MatVecLayout::new(256, 4, 1);
    /// Teams a layout needs for [`MatVecFusion::quantize_output`]: 16 teams of 2 paired outputs
    /// write one q8 block.
    pub const QUANTIZING_TEAMS: u32 = 16;
    /// The layout a gate/up pairing that quantizes its output takes unless told otherwise.
    pub const QUANTIZING: MatVecLayout = MatVecLayout::new(256, 16, 1);
    /// The short-row rule's ([`ShortRows::DEFAULT_LAYOUT`]): 4 teams of 16 on 16 rows.
    pub const SHORT: MatVecLayout = MatVecLayout::new(64, 4, 1);

    /// The layouts kept after the H200 (experiments/NOTES.md, decode-matvec): the f32 path's
    /// default, the integer path's, and the quantizing gate/up pairing's. experiments/matvec-bench
    /// times them (`--layouts` any others) and tests/gpu_matvec.rs checks them.
    pub const CANDIDATES: [MatVecLayout; 3] = [Self::DEFAULT, Self::INTEGER, Self::QUANTIZING];

    /// The wide form's layouts that tests/gpu_matvec.rs checks and experiments/matvec-bench
    /// times (issue 18): the integer path's two kept layouts, 8 teams of 16, and two units in
    /// flight.
    pub const WIDE_CANDIDATES: [MatVecLayout; 4] = [
        Self::INTEGER.widened(),
        Self::new(128, 8, 1).widened(),
        Self::new(128, 4, 2).widened(),
        Self::QUANTIZING.widened(),
    ];

    /// The batched form's layouts that tests/gpu_matvec.rs checks and experiments/matvec-bench
    /// times (issue 21's batched decode): the wide candidates' twins, the short-row rule's
    /// layout and 16 teams of 16 with two units in flight.
    pub const BATCHED_CANDIDATES: [MatVecLayout; 6] = [
        Self::INTEGER.batched_form(),
        Self::SHORT.batched_form(),
        Self::new(128, 8, 1).batched_form(),
        Self::new(128, 4, 2).batched_form(),
        Self::QUANTIZING.batched_form(),
        Self::new(256, 16, 2).batched_form(),
    ];

    /// The batched form's split layouts (opt-in) that tests/gpu_matvec.rs checks and
    /// experiments/matvec-bench times: the engine's projection and quantizing gate/up layouts
    /// with 4 vectors a workgroup, 256/4/1 and the short-row rule's layout with 2 (the
    /// engine's split on a GPU), and the two-units layout with 2.
    pub const SPLIT_CANDIDATES: [MatVecLayout; 5] = [
        Self::INTEGER.split_by(4),
        Self::INTEGER.split_by(2),
        Self::SHORT.split_by(2),
        Self::QUANTIZING.split_by(4),
        Self::new(256, 16, 2).split_by(2),
    ];

    /// Vectors a workgroup of a split layout may take.
    pub const SPLITS: [u32; 3] = [1, 2, 4];

    pub const fn new(invocations: u32, teams: u32, unroll: u32) -> MatVecLayout {
        MatVecLayout {
            invocations,
            teams,
            unroll,
            wide: false,
            batched: false,
            split: 0,
        }
    }

    /// This layout in the wide form.
    pub const fn widened(self) -> MatVecLayout {
        MatVecLayout { wide: true, ..self }
    }

    /// This layout in the batched form (the wide form's vector loop with 16-byte x loads).
    pub const fn batched_form(self) -> MatVecLayout {
        MatVecLayout {
            wide: true,
            batched: true,
            ..self
        }
    }

    /// This layout in the batched form split `vectors` to a workgroup (see `split`).
    pub const fn split_by(self, vectors: u32) -> MatVecLayout {
        MatVecLayout {
            wide: true,
            batched: true,
            split: vectors,
            ..self
        }
    }

    /// The batch capacity a pipeline of this layout for `capacity` vectors is compiled for
    /// (MAX_B) and how many workgroups share a row range's rows (VECTOR_GROUPS): (capacity, 1)
    /// unless split to fewer vectors than `capacity`.
    pub fn vector_groups(self, capacity: u32) -> (u32, u32) {
        match self.split {
            0 => (capacity, 1),
            s if capacity <= s => (capacity, 1),
            s => (s, capacity / s),
        }
    }

    /// The layout pipelines of batch capacity `capacity` run: this one, or where `batch` and a
    /// wide layout, its batched twin — which gives every row the same bits (only how x is read
    /// differs), so the choice cannot make a sequence's output depend on the batch; only for q8
    /// vectors (the batched form reads xq, xd).
    /// A batched layout splits where it names a split, else by `split` (FAK_MATVEC_SPLIT; 0:
    /// none), and only for capacities above it (a capacity it holds runs unsplit: the same bits).
    fn at_capacity(self, capacity: u32, input: Input, (batch, split): (bool, u32)) -> MatVecLayout {
        let batched = (self.batched || (batch && self.wide)) && input.is_q8();
        let split = match self.split {
            0 => split,
            named => named,
        };
        let split = match batched && split > 0 && capacity > split {
            true => split,
            false => 0,
        };
        MatVecLayout {
            batched,
            split,
            ..self
        }
    }

    /// Whether the wide form serves weights of `ty` multiplied by inputs `input`.
    fn wide_serves(ty: GgmlType, input: Input) -> bool {
        input.is_q8() && matches!(ty, GgmlType::Q4_K | GgmlType::Q6_K)
    }

    /// The layout a binding of `ty` and `input` runs: this one, in the narrow form where the
    /// wide one does not serve them (so one `FAK_MATVEC_LAYOUT` can name a wide layout for all).
    fn narrowed(self, ty: GgmlType, input: Input) -> MatVecLayout {
        let wide = self.wide && Self::wide_serves(ty, input);
        MatVecLayout {
            wide,
            batched: self.batched && wide,
            split: if self.batched && wide { self.split } else { 0 },
            ..self
        }
    }

    /// Output rows one workgroup takes (half as many when paired).
    fn rows_per_workgroup(self) -> u64 {
        ROWS_PER_TEAM * u64::from(self.teams)
    }

    /// Refuses layouts the kernel was not written for.
    pub fn check(self) -> Result<MatVecLayout, GpuError> {
        let MatVecLayout {
            invocations,
            teams,
            unroll,
            batched,
            split,
            ..
        } = self;
        let ok = invocations.is_power_of_two()
            && (32..=256).contains(&invocations)
            && teams.is_power_of_two()
            && teams <= invocations / 4
            && (1..=2).contains(&unroll)
            && (split == 0 || (batched && Self::SPLITS.contains(&split)));
        match ok {
            true => Ok(self),
            false => Err(GpuError::Shape {
                kernel: MatVec::NAME,
                message: format!(
                    "a layout of {invocations} invocations, {teams} teams, {unroll} units in \
                     flight (expected a power of two in 32..=256, teams a power of two ≤ \
                     invocations / 4, 1 or 2 units; a split of 1, 2 or 4 vectors, batched)"
                ),
            }),
        }
    }

    /// `FAK_MATVEC_LAYOUT` (`invocations/teams/unroll[/wide|/batched|/splitG]`, e.g.
    /// `256/4/1`): one layout for every binding that names none; None when unset or empty.
    pub fn from_env() -> Result<Option<MatVecLayout>, GpuError> {
        Self::from_var("FAK_MATVEC_LAYOUT")
    }

    /// The layout environment variable `name` writes in [`MatVecLayout::parse`]'s syntax; None
    /// when unset or empty.
    pub fn from_var(name: &str) -> Result<Option<MatVecLayout>, GpuError> {
        match std::env::var(name) {
            Ok(text) if !text.is_empty() => Self::parse(&text).map(Some),
            _ => Ok(None),
        }
    }

    /// `FAK_MATVEC_RESIDUAL_LAYOUT` (opt-in; [`MatVecLayout::parse`]'s syntax): the layout of
    /// every binding that accumulates into its output and names none — a decode step's residual
    /// adds (ffn_down, gdn_out, attn_output) — ahead of `FAK_MATVEC_LAYOUT`, so those products
    /// alone can be timed in another layout (experiments/NOTES.md, "pqz").
    pub fn residual_from_env() -> Result<Option<MatVecLayout>, GpuError> {
        Self::from_var("FAK_MATVEC_RESIDUAL_LAYOUT")
    }

    /// `invocations/teams/unroll`, or with `/wide`, `/batched` or `/splitG` (the
    /// batched form split G vectors to a workgroup) for those forms, as
    /// [`Display`](std::fmt::Display) writes it.
    pub fn parse(text: &str) -> Result<MatVecLayout, GpuError> {
        let text = text.trim();
        // `/splitG`: the batched form, G vectors a workgroup.
        let split = Self::SPLITS
            .into_iter()
            .find_map(|g| Some((text.strip_suffix(format!("/split{g}").as_str())?, g)));
        let (numbers, form): (&str, fn(MatVecLayout) -> MatVecLayout) =
            if let Some((numbers, _)) = split {
                (numbers, MatVecLayout::batched_form)
            } else if let Some(numbers) = text.strip_suffix("/wide") {
                (numbers, MatVecLayout::widened)
            } else if let Some(numbers) = text.strip_suffix("/batched") {
                (numbers, MatVecLayout::batched_form)
            } else {
                (text, |layout| layout)
            };
        let numbers: Vec<u32> = numbers
            .split('/')
            .map(|part| part.trim().parse::<u32>())
            .collect::<Result<_, _>>()
            .unwrap_or_default();
        match numbers[..] {
            [invocations, teams, unroll] => {
                let layout = form(Self::new(invocations, teams, unroll));
                let split = split.map_or(0, |(_, g)| g);
                MatVecLayout { split, ..layout }.check()
            }
            _ => Err(GpuError::Shape {
                kernel: MatVec::NAME,
                message: format!(
                    "FAK_MATVEC_LAYOUT={text:?} (expected \
                     invocations/teams/unroll[/wide|/batched|/split1|/split2|/split4], \
                     e.g. 128/4/2, 256/4/1/wide or 256/4/1/split4)"
                ),
            }),
        }
    }
}

/// A layout for the integer products of short rows (on by default; `FAK_MATVEC_SHORT_LAYOUT`
/// names another or `off`): q8
/// bindings of at least `min_cols` (by default more than [`ShortRows::NARROW_COLS`]) and at most
/// [`ShortRows::MAX_COLS`] columns and at least `min_rows` rows that name no
/// layout. Why (experiments/NOTES.md, "mvb8"): [`MatVecLayout::INTEGER`]'s teams of 64 lanes
/// give a row of 5120 columns (80 wide units) 1.25 units a lane, so a lane's reduction and
/// bookkeeping weigh as much as its products; 16 teams of 16 lanes give it 5, and on an H100
/// the 27B's gate/up (5120 columns) runs 1.6× faster in 256/16/1 than in 256/4/1 at 8 vectors
/// (split 2), 5 % faster at one. A layout is a property of the binding's shape, never of the
/// batch, so every sequence's bits stay independent of what shares its step (issue 21).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ShortRows {
    /// The layout such a binding takes (before widening).
    pub layout: MatVecLayout,
    /// Bindings of fewer rows keep theirs: a 16-team layout gives them too few workgroups.
    pub min_rows: u64,
    /// Bindings of shorter rows keep theirs.
    pub min_cols: u64,
}

impl ShortRows {
    /// The longest rows the rule takes: the 8B's and 27B's attention and GDN projections, the
    /// head and gate/up (4096–6144 columns); not ffn_down (12288, 17408).
    pub const MAX_COLS: u64 = 8192;
    /// Rows this short or shorter keep their layout: the Qwen3-8B's 4096-column products lost
    /// 3.3 % of its one-sequence decode in 64/4/1 on an H100 (233.5 against 241.4 tok/s, for
    /// +3–6 % at 8 sequences), where the 27B's 5120 and 6144 lost 0.1–0.8 % for +9–11 %
    /// (experiments/NOTES.md, session 2026-12-06 #15, calls 1 and 2).
    pub const NARROW_COLS: u64 = 4096;
    /// `min_rows` unless `FAK_MATVEC_SHORT_MIN_ROWS` says otherwise.
    pub const MIN_ROWS: u64 = 4096;
    /// `min_cols` unless `FAK_MATVEC_SHORT_MIN_COLS` says otherwise: rows longer than
    /// [`ShortRows::NARROW_COLS`].
    pub const MIN_COLS: u64 = Self::NARROW_COLS + 1;

    /// The layout the rule gives where `FAK_MATVEC_SHORT_LAYOUT` names none: 64 invocations in
    /// 4 teams of 16 lanes (16 rows a workgroup), each lane 5 wide units of a 5120-column row
    /// against [`MatVecLayout::INTEGER`]'s 1.25. On an H200 (2026-12-06 #15,
    /// shortab) it took the 27B's 8-sequence aggregate from 258–259 to 282–283 tok/s (+9 %) at
    /// 0.1–0.2 % of the one-sequence step.
    pub const DEFAULT_LAYOUT: MatVecLayout = MatVecLayout::SHORT;

    /// `FAK_MATVEC_SHORT_LAYOUT` ([`MatVecLayout::parse`]'s syntax; unset or empty:
    /// [`ShortRows::DEFAULT_LAYOUT`]; `off`: no rule, every binding keeps the layouts above) with
    /// `FAK_MATVEC_SHORT_MIN_ROWS` (default [`ShortRows::MIN_ROWS`]) and
    /// `FAK_MATVEC_SHORT_MIN_COLS` (default [`ShortRows::MIN_COLS`]).
    pub fn from_env() -> Result<Option<ShortRows>, GpuError> {
        let text = std::env::var("FAK_MATVEC_SHORT_LAYOUT").unwrap_or_default();
        let layout = match text.trim() {
            "off" => return Ok(None),
            "" => Self::DEFAULT_LAYOUT,
            named => MatVecLayout::parse(named)?,
        };
        Ok(Some(ShortRows {
            layout,
            min_rows: Self::count_from_env("FAK_MATVEC_SHORT_MIN_ROWS", Self::MIN_ROWS)?,
            min_cols: Self::count_from_env("FAK_MATVEC_SHORT_MIN_COLS", Self::MIN_COLS)?,
        }))
    }

    /// The count the variable `name` gives, `default` when unset or empty.
    fn count_from_env(name: &str, default: u64) -> Result<u64, GpuError> {
        let text = std::env::var(name).unwrap_or_default();
        match text.trim() {
            "" => Ok(default),
            n => n.parse().map_err(|_| GpuError::Shape {
                kernel: MatVec::NAME,
                message: format!("{name}={text:?} (expected a count)"),
            }),
        }
    }

    /// The layout of a binding of `rows` × `cols` under this rule, None where it does not apply.
    pub fn layout_of(self, rows: u64, cols: u64) -> Option<MatVecLayout> {
        (cols >= self.min_cols && cols <= Self::MAX_COLS && rows >= self.min_rows)
            .then_some(self.layout)
    }
}

impl std::fmt::Display for MatVecLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.invocations, self.teams, self.unroll)?;
        match (self.batched, self.wide) {
            (true, _) if self.split > 0 => write!(f, "/split{}", self.split),
            (true, _) => write!(f, "/batched"),
            (false, true) => write!(f, "/wide"),
            (false, false) => Ok(()),
        }
    }
}
/// w, x, y, params, step, w and x again as 16-byte words (`w16`, `x16`), the norm weight (`nw`),
/// the q8 codes and scales of the integer path (`xq`, `xd`), the quantized output's codes and
/// scales (`yq`, `yd`).
const SLOTS: &[Slot] = &[
    Slot::Read,
    Slot::Read,
    Slot::ReadWrite,
    Slot::Uniform,
    Slot::Uniform,
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::ReadWrite,
    Slot::ReadWrite,
];
/// `Params::wide` bits (WIDE_X, WIDE_W of the WGSL).
const WIDE_X: u32 = 1;
const WIDE_W: u32 = 2;

/// `Params` of wgsl/matvec.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    cols: u32,
    units: u32,
    row_bytes: u32,
    w_byte: u32,
    x_index: u32,
    x_stride: u32,
    y_index: u32,
    y_stride: u32,
    accumulate: u32,
    wide: u32,
    eps: f32,
    pair_byte: u32,
    quantize_out: u32,
    /// To 64 bytes, a multiple of 16.
    pad: [u32; 2],
}

/// The index in [`BATCH_CAPACITIES`] of the smallest capacity that holds `n_tokens` vectors.
fn capacity_index(n_tokens: u32) -> usize {
    BATCH_CAPACITIES
        .iter()
        .position(|&c| c >= n_tokens)
        .expect("n_tokens ≤ max_batch ≤ MAX_BATCH")
}

/// How a row is cut into units (the part of a block one invocation decodes):
/// (elements per unit, units per block, elements per block, bytes per block). The wide form's
/// units are 64 elements (wgsl/matvec_q8_wide.wgsl).
fn unit_geometry(ty: GgmlType, wide: bool) -> (u64, u64, u64, u64) {
    let (elems, bytes) = ty.block_geometry();
    if wide {
        return (64, elems / 64, elems, bytes);
    }
    match ty {
        // One unit is 4 consecutive elements, treated as a "block" of 4.
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => (4, 1, 4, 4 * bytes),
        GgmlType::Q4_K | GgmlType::Q5_K => (32, 8, elems, bytes),
        GgmlType::Q6_K => (16, 16, elems, bytes),
        // Q8_0 and the 32-element legacy blocks.
        _ => (8, 4, elems, bytes),
    }
}

/// `window` grown to whole 16-byte words, for a `array<vec4<_>>` view of the same bytes; None when
/// the buffer or the binding limit has no room for the growth.
fn wide_window(window: Window, buffer: &wgpu::Buffer, max_binding: u64) -> Option<Window> {
    let size = window.size.next_multiple_of(16);
    (window.offset + size <= buffer.size() && size <= max_binding)
        .then_some(Window { size, ..window })
}

/// The weight tensor of a [`MatVecBinding`]: `rows` rows (outputs) of `cols` elements (inputs) of
/// type `ty`, stored as GGUF stores them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct MatVecShape {
    pub ty: GgmlType,
    pub rows: u64,
    pub cols: u64,
}

/// What a mat-vec binding reads and writes.
#[derive(Clone, Copy)]
pub struct MatVecIo<'a> {
    /// The buffer holding W, whose first row starts at byte `weights_offset`, a multiple of 4
    /// (GGUF aligns tensor data to 32): several tensors may share one buffer, and tensors of one
    /// type and width stored back to back can be bound as one (a fused gate+up projection).
    pub weights: &'a wgpu::Buffer,
    pub weights_offset: u64,
    /// `[B, cols]` inputs; must not be the buffer `y` is in (wgpu rejects a buffer bound
    /// read-only and read-write in one dispatch).
    pub x: Activations<'a>,
    /// `[B, rows]` outputs.
    pub y: Activations<'a>,
    /// The model's step uniform; its `n_tokens` is B.
    pub step: &'a StepBuffer,
    /// `y += W x` (a residual add fused into the product) instead of `y = W x`.
    pub accumulate: bool,
    /// The largest B this binding will be encoded with (≤ [`MAX_BATCH`]): x and y are checked
    /// for this many rows.
    pub max_batch: u32,
}

impl<'a> MatVecIo<'a> {
    /// W from byte 0 of `weights`, x `[B, shape.cols]` and y `[B, shape.rows]` contiguous from
    /// their buffers' starts, for up to `max_tokens` vectors (capped at [`MAX_BATCH`]).
    pub fn contiguous(
        shape: MatVecShape,
        weights: &'a wgpu::Buffer,
        x: &'a wgpu::Buffer,
        y: &'a wgpu::Buffer,
        step: &'a StepBuffer,
        accumulate: bool,
        max_tokens: u32,
    ) -> Self {
        MatVecIo {
            weights,
            weights_offset: 0,
            x: Activations::contiguous(x, shape.cols),
            y: Activations::contiguous(y, shape.rows),
            step,
            accumulate,
            max_batch: max_tokens.min(MAX_BATCH),
        }
    }
}

/// An RMSNorm folded into a mat-vec: x is normed (`x / sqrt(mean x² + eps) · weight`) inside
/// the product.
#[derive(Clone, Copy)]
pub struct InputNorm<'a> {
    /// `cols` f32 values.
    pub weight: &'a wgpu::Buffer,
    pub eps: f32,
    /// The weight is read by an earlier dispatch of the step too (one norm folded into several
    /// products, or into the quantization before them): recorded as an activation read, so a
    /// step's weight bytes (the roofline's) count the tensor once.
    pub shared: bool,
}

/// What [`MatVec::bind_fused`] folds into the product.
#[derive(Clone, Copy, Default)]
pub struct MatVecFusion<'a> {
    /// Norm x first (`cols` must be a multiple of 4).
    pub norm: Option<InputNorm<'a>>,
    /// W holds `2·rows` rows, the gate rows then the up rows, and `y = silu(W_gate x) ⊙ W_up x`
    /// (`rows` outputs). Refused with `accumulate`, or when W does not fit one binding.
    pub swiglu: bool,
    /// Multiply the 8-bit quantization of x held here (written by `QuantizeQ8` before the
    /// mat-vec runs; the vectors of `cols` columns) instead of x: the integer path. Needs an
    /// int-dot variant, a type of [`MatVec::Q8_TYPES`] and no `norm` (fold it into the
    /// quantization). `MatVecIo::x` is still checked but not read.
    pub q8: Option<&'a Q8Vectors>,
    /// The layout of this binding's pipelines; None: the kernel's.
    pub layout: Option<MatVecLayout>,
    /// Also write the paired outputs (`swiglu`) as 8-bit blocks here, the vectors of `rows`
    /// columns: the next product's integer-path input, rounded as `QuantizeQ8` would round y.
    /// Needs `rows` a multiple of 32 and a layout of [`MatVecLayout::QUANTIZING_TEAMS`] teams
    /// (a workgroup's outputs are then one block).
    pub quantize_output: Option<&'a Q8Vectors>,
}

/// The mat-vec kernel: one pipeline per (type, batch capacity, input: f32, normed or q8, layout),
/// each built when a binding first needs it (a model needs few of them, and every pipeline costs
/// build time: seconds on lavapipe).
pub struct MatVec {
    variant: KernelPaths,
    /// The layout of every binding that names none; None: [`MatVecLayout::DEFAULT`] for f32
    /// inputs, [`MatVecLayout::INTEGER`] for q8 ones.
    rows: Option<MatVecLayout>,
    /// The layout of every accumulating binding that names none, ahead of `rows`
    /// ([`MatVecLayout::residual_from_env`]); None: `rows`'s.
    residual: Option<MatVecLayout>,
    /// The layout of every q8 binding of short rows that names none ([`ShortRows::from_env`]);
    /// None: the layouts above.
    short: Option<ShortRows>,
    /// Every binding's layout (named or not) in the wide form where that serves it
    /// (on unless `FAK_MATVEC_WIDE=0`: the wide form of every layout that has one).
    widen: bool,
    /// A wide layout's pipelines for several vectors run its batched twin (same bits; see
    /// [`MatVec::batches_vectors`]).
    batch: bool,
    /// Vectors a workgroup of a batched pipeline takes where a step has more (0: all; see
    /// [`MatVec::splits_vectors`]).
    split: u32,
    /// `split` for Q6_K bindings where it differs ([`MatVec::splits_vectors_of`]): for bindings
    /// of fewer rows than [`MatVec::SPLIT_Q6_MIN_ROWS`], then for the others.
    split_q6: Option<(u32, u32)>,
    layout: wgpu::BindGroupLayout,
    /// Bound as `w16`/`x16` where the data is not 16-byte aligned (the kernel then reads w, x).
    placeholder: wgpu::Buffer,
    /// Bound as `yq`/`yd` where the output is not quantized.
    placeholder_out: wgpu::Buffer,
    /// The pipelines built so far.
    pipelines: Mutex<HashMap<PipelineKey, wgpu::ComputePipeline>>,
}

/// What a pipeline is specialised for: type, input, batch capacity, layout.
type PipelineKey = (GgmlType, Input, u32, MatVecLayout);

/// Which pipeline family a binding runs.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Input {
    F32,
    /// x RMS-normed inside the product.
    Normed,
    /// x as q8 blocks; the index in `MatVec::Q8_TYPES`.
    Q8(usize),
}

impl Input {
    /// Whether the product multiplies q8 codes (the integer path's kernels).
    fn is_q8(self) -> bool {
        matches!(self, Input::Q8(_))
    }
}

/// One weight tensor bound for [`MatVec::encode`]: its pipelines (by batch capacity, up to the
/// one its `max_batch` needs), a bind group and grid per row range.
pub struct MatVecBinding {
    pipelines: Vec<wgpu::ComputePipeline>,
    /// The layout of each of `pipelines` (a wide layout's batched twin where it runs one).
    layouts: Vec<MatVecLayout>,
    max_batch: u32,
    /// Per row range its bind group and, per pipeline, its grid (a split pipeline's is a
    /// multiple of the row workgroups: [`MatVecLayout::vector_groups`]).
    ranges: Vec<(wgpu::BindGroup, Vec<Grid>)>,
    /// What one encode moves: W (and a folded norm's weight) once, and per input vector.
    work: MatVecWork,
}

impl MatVecBinding {
    /// The most input vectors one encode takes (`MatVecIo::max_batch`).
    pub fn max_batch(&self) -> u32 {
        self.max_batch
    }
}

/// The traffic of a [`MatVecBinding`], fixed at bind time.
#[derive(Clone, Copy, Debug)]
struct MatVecWork {
    kernel: &'static str,
    /// W (and a folded norm's weight, unless shared) once per step.
    weight_bytes: u64,
    /// A shared norm's weight, read once per step as an activation.
    step_bytes: u64,
    /// x read, y written (and read when accumulating), quantized outputs written, per vector.
    vector_bytes: u64,
    /// FLOPs per vector: 2 · W's rows · cols.
    vector_flops: u64,
}

impl MatVecBinding {
    /// The layout a step of `n_tokens` vectors runs (≤ the binding's batch).
    pub fn layout(&self, n_tokens: u32) -> MatVecLayout {
        self.layouts[capacity_index(n_tokens.max(1))]
    }

    /// The grid of each dispatch, one per row range (several when W exceeds a binding), for one
    /// vector (a split pipeline's is a multiple of it).
    pub fn grids(&self) -> impl Iterator<Item = Grid> + '_ {
        self.ranges.iter().map(|(_, grids)| grids[0])
    }
}

/// The pipeline of one type, input (f32, normed f32 or q8), batch capacity and layout.
fn spec(ty: GgmlType, input: Input, capacity: u32, rows: MatVecLayout) -> PipelineSpec {
    let (_, lanes, block_elems, block_bytes) = unit_geometry(ty, rows.wide);
    let norm = input == Input::Normed;
    let (entry_point, what) = match input {
        Input::Q8(_) if rows.wide => ("matvec_q8_wide", "q8"),
        Input::Q8(_) => ("matvec_q8", "q8"),
        Input::Normed => ("matvec", "normed f32"),
        Input::F32 => ("matvec", "f32"),
    };
    let constants = vec![
        ("WG", f64::from(rows.invocations)),
        ("TEAMS", f64::from(rows.teams)),
        ("UNROLL", f64::from(rows.unroll)),
        ("MAX_B", f64::from(rows.vector_groups(capacity).0)),
        ("NORM", f64::from(u8::from(norm))),
        ("GGML_TYPE", f64::from(ty.id())),
        ("UNIT_LANES", lanes as f64),
        ("BLOCK_ELEMS", block_elems as f64),
        ("BLOCK_BYTES", block_bytes as f64),
    ];
    let mut spec = PipelineSpec {
        label: format!("matvec {ty} batch {capacity} x {what} layout {rows}"),
        entry_point,
        constants,
    };
    // Only the int-dot module declares BATCHED (matvec_q8_batched.wgsl); at_capacity gives it
    // q8 inputs alone.
    if rows.batched {
        spec.constants.push(("BATCHED", 1.0));
    }
    // The split: MAX_B of the capacity's vectors a workgroup (matvec_q8_batched.wgsl).
    let (_, groups) = rows.vector_groups(capacity);
    if groups > 1 {
        spec.constants.push(("VECTOR_GROUPS", f64::from(groups)));
    }
    spec
}

/// The pipelines of one type and input, one per batch capacity.
fn specs(ty: GgmlType, input: Input, rows: MatVecLayout) -> Vec<PipelineSpec> {
    BATCH_CAPACITIES
        .into_iter()
        .map(|capacity| spec(ty, input, capacity, rows))
        .collect()
}

impl Kernel for MatVec {
    const NAME: &'static str = "matvec";
    const AXES: Axes = Axes {
        subgroup: true,
        int_dot: true,
        ..Axes::NONE
    };

    fn source(variant: KernelPaths) -> KernelSource {
        let mut module = WgslModule::new(variant)
            .with(wgsl::BYTES)
            .with(wgsl::BLOCKS)
            .with(wgsl::BYTE_FLOATS)
            .with(wgsl::GRID)
            .with(wgsl::STEP)
            .with(wgsl::Q8_BLOCK)
            .with(wgsl::reduction(variant))
            .with(wgsl::row_reduction(variant))
            .with(wgsl::MATVEC);
        // Every pipeline of the default layout, and one type's in the other kept layouts, for
        // translation;
        // bindings build the ones they need.
        let rows = MatVecLayout::DEFAULT;
        let mut pipelines: Vec<PipelineSpec> = [Input::F32, Input::Normed]
            .into_iter()
            .flat_map(|input| {
                Self::TYPES
                    .into_iter()
                    .flat_map(move |ty| specs(ty, input, rows))
            })
            .collect();
        pipelines.extend(specs(
            GgmlType::Q4_K,
            Input::Normed,
            MatVecLayout::QUANTIZING,
        ));
        if variant.int_dot {
            module = module.with(wgsl::MATVEC_Q8);
            pipelines.extend(
                Self::Q8_TYPES
                    .into_iter()
                    .enumerate()
                    .flat_map(|(i, ty)| specs(ty, Input::Q8(i), rows)),
            );
            for rows in [MatVecLayout::INTEGER, MatVecLayout::QUANTIZING] {
                pipelines.extend(specs(GgmlType::Q4_K, Input::Q8(1), rows));
            }
            // The wide form: both of its types in one layout, and its unrolled loop (its batched
            // vector loop lives in a file of its own, which the wide form's loop calls).
            module = module
                .with(wgsl::MATVEC_Q8_WIDE)
                .with(wgsl::MATVEC_Q8_BATCHED);
            let wide = MatVecLayout::WIDE_CANDIDATES;
            pipelines.extend(specs(GgmlType::Q4_K, Input::Q8(1), wide[0]));
            pipelines.extend(specs(GgmlType::Q6_K, Input::Q8(3), wide[0]));
            pipelines.extend(specs(GgmlType::Q6_K, Input::Q8(3), wide[2]));
            // The batched form: both types, and the unrolled loop.
            let batched = MatVecLayout::BATCHED_CANDIDATES;
            pipelines.extend(specs(GgmlType::Q4_K, Input::Q8(1), batched[0]));
            pipelines.push(spec(GgmlType::Q6_K, Input::Q8(3), 8, batched[0]));
            pipelines.extend(specs(GgmlType::Q6_K, Input::Q8(3), batched[2]));
            // Its split (G = 2 on GPUs by default): the quantizing gate/up's and the unrolled
            // loop's.
            let split = MatVecLayout::SPLIT_CANDIDATES;
            pipelines.extend(specs(GgmlType::Q4_K, Input::Q8(1), split[2]));
            pipelines.extend(specs(GgmlType::Q6_K, Input::Q8(3), split[3]));
        }
        KernelSource {
            module,
            slots: SLOTS,
            pipelines,
        }
    }
}

impl MatVec {
    /// Vectors a workgroup of a batched pipeline takes on a GPU where a step has more, unless
    /// `FAK_MATVEC_SPLIT` says otherwise ([`MatVec::splits_vectors`]).
    pub const DEFAULT_SPLIT: u32 = 2;
    /// [`MatVec::DEFAULT_SPLIT`] for Q6_K weights of at least [`MatVec::SPLIT_Q6_MIN_ROWS`]
    /// rows (module doc).
    pub const DEFAULT_SPLIT_Q6: u32 = 4;
    /// Q6_K bindings of fewer rows keep [`MatVec::DEFAULT_SPLIT`]: at capacity 8 the split by 4
    /// gives a 1024-row binding (attn_v of both Qwen shapes: 64 row workgroups of 16) 128
    /// workgroups, under one per SM of an H100, where the split by 2 gives 256 (module doc).
    pub const SPLIT_Q6_MIN_ROWS: u64 = 4096;
    /// The weight types the kernel multiplies.
    pub const TYPES: [GgmlType; 11] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ];

    /// The weight types the integer path multiplies (their blocks split into groups of 32, 16
    /// or 8 elements inside one 32-element block of x).
    pub const Q8_TYPES: [GgmlType; 4] = [
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ];

    /// Builds the variant `paths` selects (subgroup reduction or the workgroup-memory tree; with
    /// the integer path or without) in the layout `FAK_MATVEC_LAYOUT` names, else each input's
    /// default ([`MatVecLayout::DEFAULT`] for f32, [`MatVecLayout::INTEGER`] for q8).
    /// Every binding's layout is taken in the wide form where it serves the binding (q8 inputs,
    /// Q4_K/Q6_K weights): on an H200 the Qwen3.5-27B decodes 14.47 → 12.12 ms/token with it
    /// (experiments/NOTES.md, session 2026-12-05 #4). `FAK_MATVEC_WIDE=0` keeps the narrow form.
    pub fn new(ctx: &GpuContext, paths: KernelPaths) -> Result<Self, GpuError> {
        let widen = std::env::var("FAK_MATVEC_WIDE").as_deref() != Ok("0");
        let mut kernel = Self::build_in(ctx, paths, MatVecLayout::from_env()?)?;
        kernel.residual = MatVecLayout::residual_from_env()?;
        kernel.short = ShortRows::from_env()?;
        kernel.widen = widen;
        kernel.batch = Self::batches_vectors();
        kernel.split = Self::splits_vectors(ctx.facts())?;
        let q6 = |rows| Self::splits_vectors_of(GgmlType::Q6_K, rows, ctx.facts());
        kernel.split_q6 = Some((q6(0)?, q6(Self::SPLIT_Q6_MIN_ROWS)?));
        Ok(kernel)
    }

    /// Whether [`MatVec::new`]'s pipelines run a wide layout of a q8 binding in the batched form
    /// at every batch (same bits; x in 16-byte loads, no branch per vector:
    /// wgsl/matvec_q8_batched.wgsl): the default, `FAK_MATVEC_BATCHED=0` for the plain wide
    /// loop (module doc, "By batch size").
    pub fn batches_vectors() -> bool {
        std::env::var("FAK_MATVEC_BATCHED").as_deref() != Ok("0")
    }

    /// Whether a binding without a quantized output binds `yq`/`yd` to a 16-byte buffer of its
    /// own instead of the kernel's shared placeholder (`FAK_MATVEC_OWN_OUT=1`, opt-in; the same
    /// bits: nothing writes it). The shared one is a read-write binding of every such dispatch,
    /// so wgpu puts a barrier between any two of them, even where the second does not read what
    /// the first wrote — a GDN layer's qkv run and its z, β, α run, an attention layer's q, k
    /// run and its v run: with a buffer of its own each, the second may start while the first's
    /// last workgroups drain (experiments/NOTES.md, "ingap").
    pub fn owns_placeholder_out() -> bool {
        std::env::var("FAK_MATVEC_OWN_OUT").as_deref() == Ok("1")
    }

    /// `FAK_MATVEC_SPLIT=G` (1, 2 or 4; unset or empty: [`MatVec::default_split`]; 0: none):
    /// [`MatVec::new`]'s batched pipelines for more than G vectors take G of them a workgroup on
    /// a grid B / G times as large ([`MatVecLayout::split_by`]; the same bits). A layout naming
    /// a split keeps its own.
    pub fn splits_vectors(facts: &AdapterFacts) -> Result<u32, GpuError> {
        Ok(Self::split_from_env("FAK_MATVEC_SPLIT")?.unwrap_or(Self::default_split(facts)))
    }

    /// The split [`MatVec::new`]'s batched pipelines of weight type `ty` and `rows` output rows
    /// take: for Q6_K `FAK_MATVEC_SPLIT_Q6=G` (0, 1, 2 or 4) where set, else
    /// [`MatVec::DEFAULT_SPLIT_Q6`] where the binding has at least
    /// [`MatVec::SPLIT_Q6_MIN_ROWS`] rows, the adapter splits by default and `FAK_MATVEC_SPLIT`
    /// names no split; else (and for every other type) [`MatVec::splits_vectors`]'s. Every
    /// split gives a vector the same bits, so a rule by type and shape keeps a sequence's output
    /// independent of the batch.
    pub fn splits_vectors_of(
        ty: GgmlType,
        rows: u64,
        facts: &AdapterFacts,
    ) -> Result<u32, GpuError> {
        let named = Self::split_from_env("FAK_MATVEC_SPLIT")?;
        let tall = rows >= Self::SPLIT_Q6_MIN_ROWS;
        match (ty, Self::split_from_env("FAK_MATVEC_SPLIT_Q6")?, named) {
            (GgmlType::Q6_K, Some(split), _) => Ok(split),
            (GgmlType::Q6_K, None, None) if tall && Self::default_split(facts) > 0 => {
                Ok(Self::DEFAULT_SPLIT_Q6)
            }
            (_, _, named) => Ok(named.unwrap_or(Self::default_split(facts))),
        }
    }

    /// The split the variable `name` names (0, 1, 2 or 4); None when unset or empty.
    fn split_from_env(name: &str) -> Result<Option<u32>, GpuError> {
        let text = std::env::var(name).unwrap_or_default();
        match text.trim() {
            "" => Ok(None),
            g => g
                .parse::<u32>()
                .ok()
                .filter(|g| *g == 0 || MatVecLayout::SPLITS.contains(g))
                .map(Some)
                .ok_or_else(|| GpuError::Shape {
                    kernel: Self::NAME,
                    message: format!("{name}={text:?} (expected 0, 1, 2 or 4)"),
                }),
        }
    }

    /// The split this kernel's batched pipelines of weight type `ty` and `rows` output rows take
    /// (see [`MatVec::splits_vectors_of`]).
    fn split_of(&self, ty: GgmlType, rows: u64) -> u32 {
        match (ty, self.split_q6) {
            (GgmlType::Q6_K, Some((short, _))) if rows < Self::SPLIT_Q6_MIN_ROWS => short,
            (GgmlType::Q6_K, Some((_, tall))) => tall,
            _ => self.split,
        }
    }

    /// The split an adapter runs unless `FAK_MATVEC_SPLIT` names one: [`MatVec::DEFAULT_SPLIT`]
    /// on a GPU, none on a CPU adapter (where the split's repeated decoding of W is pure cost:
    /// module doc).
    pub fn default_split(facts: &AdapterFacts) -> u32 {
        match facts.device_type.as_str() {
            "cpu" => 0,
            _ => Self::DEFAULT_SPLIT,
        }
    }

    /// [`MatVec::new`] with every binding that names no layout in `rows`.
    pub fn with_layout(
        ctx: &GpuContext,
        paths: KernelPaths,
        rows: MatVecLayout,
    ) -> Result<Self, GpuError> {
        Self::build_in(ctx, paths, Some(rows.check()?))
    }

    fn build_in(
        ctx: &GpuContext,
        paths: KernelPaths,
        rows: Option<MatVecLayout>,
    ) -> Result<Self, GpuError> {
        let mut variant = KernelVariant::of::<Self>(Self::AXES.select(paths));
        // The layout only: pipelines come with the bindings that need them.
        variant.source.pipelines = Vec::new();
        let built = build(ctx, &variant)?;
        Ok(MatVec {
            variant: variant.paths,
            rows,
            residual: None,
            short: None,
            widen: false,
            batch: false,
            split: 0,
            split_q6: None,
            layout: built.layout,
            placeholder: storage_buffer(ctx, "matvec wide placeholder", 16)?,
            placeholder_out: storage_buffer(ctx, "matvec output placeholder", 16)?,
            pipelines: Mutex::new(HashMap::new()),
        })
    }

    /// The pipelines of `ty`, `input` and `rows` for steps of up to `max_batch` vectors, by
    /// capacity, the batched ones split by `split` ([`MatVecLayout::at_capacity`]); those not
    /// built yet are built here.
    fn pipelines_for(
        &self,
        ctx: &GpuContext,
        (ty, input, rows): (GgmlType, Input, MatVecLayout),
        (max_batch, split): (u32, u32),
    ) -> Result<Vec<(wgpu::ComputePipeline, MatVecLayout)>, GpuError> {
        let keys: Vec<PipelineKey> = BATCH_CAPACITIES
            .into_iter()
            .filter(|&c| c <= max_batch.next_power_of_two())
            .map(|c| {
                let forms = (self.batch, split);
                let rows = rows.at_capacity(c, input, forms);
                (ty, input, c, rows)
            })
            .collect();
        let mut built = self.pipelines.lock().expect("no panic while holding it");
        let missing: Vec<PipelineKey> = keys
            .iter()
            .filter(|k| !built.contains_key(k))
            .copied()
            .collect();
        if !missing.is_empty() {
            let mut variant = KernelVariant::of::<Self>(self.variant);
            variant.source.pipelines = missing
                .iter()
                .map(|&(ty, input, c, rows)| spec(ty, input, c, rows))
                .collect();
            built.extend(missing.into_iter().zip(build(ctx, &variant)?.pipelines));
        }
        Ok(keys.iter().map(|k| (built[k].clone(), k.3)).collect())
    }

    /// The variant that was built.
    pub fn variant(&self) -> KernelPaths {
        self.variant
    }

    /// Binds one weight tensor with its inputs and outputs, checking every shape and size first.
    pub fn bind(
        &self,
        ctx: &GpuContext,
        shape: MatVecShape,
        io: &MatVecIo<'_>,
    ) -> Result<MatVecBinding, GpuError> {
        self.bind_within(ctx, shape, io, ctx.max_binding_size())
    }

    /// [`MatVec::bind`] with bindings of at most `max_binding` bytes (at most the device's
    /// limit), so a test splits W into row ranges the same way on every device.
    pub fn bind_within(
        &self,
        ctx: &GpuContext,
        shape: MatVecShape,
        io: &MatVecIo<'_>,
        max_binding: u64,
    ) -> Result<MatVecBinding, GpuError> {
        self.bind_fused_within(ctx, shape, io, MatVecFusion::default(), max_binding)
    }

    /// [`MatVec::bind`] with the ops `fusion` folds into the product.
    pub fn bind_fused(
        &self,
        ctx: &GpuContext,
        shape: MatVecShape,
        io: &MatVecIo<'_>,
        fusion: MatVecFusion<'_>,
    ) -> Result<MatVecBinding, GpuError> {
        self.bind_fused_within(ctx, shape, io, fusion, ctx.max_binding_size())
    }

    /// Whether `fusion` fits a weight of `shape` on this device, decided from the shape and the
    /// binding limit: a folded norm needs rows of whole vec4s, a gate/up pairing both halves of
    /// W in one binding. A fusion that fits binds ([`MatVec::bind_fused`]); one that does not is
    /// for the caller to leave unfused.
    pub fn fusion_fits(ctx: &GpuContext, shape: MatVecShape, fusion: &MatVecFusion<'_>) -> bool {
        let max_binding = ctx.max_binding_size();
        if fusion.norm.is_some() && (!shape.cols.is_multiple_of(4) || 4 * shape.cols > max_binding)
        {
            return false;
        }
        if !fusion.swiglu {
            return true;
        }
        let Some(row_bytes) = shape.ty.row_bytes(shape.cols) else {
            return false;
        };
        let align = ctx.binding_alignment();
        split_rows("", 2 * shape.rows, &[row_bytes], max_binding, align)
            .is_ok_and(|ranges| ranges.len() == 1)
    }

    /// [`MatVec::bind_fused`] with bindings of at most `max_binding` bytes.
    pub fn bind_fused_within(
        &self,
        ctx: &GpuContext,
        shape: MatVecShape,
        io: &MatVecIo<'_>,
        fusion: MatVecFusion<'_>,
        max_binding: u64,
    ) -> Result<MatVecBinding, GpuError> {
        let MatVecShape { ty, rows, cols } = shape;
        let max_binding = max_binding.min(ctx.max_binding_size());
        if !Self::TYPES.contains(&ty) {
            return Err(GpuError::UnsupportedType {
                kernel: Self::NAME,
                ty,
            });
        }
        let shape_error = |message: String| GpuError::Shape {
            kernel: Self::NAME,
            message,
        };
        if io.max_batch == 0 || io.max_batch > MAX_BATCH {
            return Err(shape_error(format!(
                "a batch of up to {} vectors (expected 1..={MAX_BATCH})",
                io.max_batch
            )));
        }
        if rows == 0 {
            return Err(shape_error("a weight tensor of 0 rows".into()));
        }
        if !io.weights_offset.is_multiple_of(4) {
            return Err(shape_error(format!(
                "W starts at byte {}, not a multiple of 4",
                io.weights_offset
            )));
        }
        if fusion.swiglu && io.accumulate {
            return Err(shape_error(
                "a gate/up pairing cannot accumulate into y".into(),
            ));
        }
        let w_rows = if fusion.swiglu { 2 * rows } else { rows };
        let row_bytes = checked_row_bytes(
            Self::NAME,
            "W",
            ty,
            w_rows,
            cols,
            io.weights,
            io.weights_offset,
        )?;
        let q8_index = || {
            if !self.variant.int_dot {
                return Err(shape_error(format!(
                    "q8 inputs need an int-dot variant, not {}",
                    self.variant
                )));
            }
            Self::Q8_TYPES
                .iter()
                .position(|&t| t == ty)
                .ok_or(GpuError::UnsupportedType {
                    kernel: "matvec_q8",
                    ty,
                })
        };
        let input = match (fusion.norm, fusion.q8) {
            (None, None) => Input::F32,
            (Some(_), None) => Input::Normed,
            (None, Some(q8)) => {
                let index = q8_index()?;
                q8.check(Self::NAME, cols, io.max_batch)?;
                Input::Q8(index)
            }
            (Some(_), Some(_)) => {
                return Err(shape_error(
                    "a norm is folded into the quantization of q8 inputs, not the product".into(),
                ));
            }
        };
        let by_input = match input.is_q8() {
            true => MatVecLayout::INTEGER,
            false => MatVecLayout::DEFAULT,
        };
        let named = match io.accumulate {
            true => self.residual.or(self.rows),
            false => self.rows,
        };
        // Short rows: q8 vectors from global memory.
        let short = match input {
            Input::Q8(_) => self.short.and_then(|s| s.layout_of(rows, cols)),
            _ => None,
        };
        let rows_layout = fusion
            .layout
            .or(named)
            .or(short)
            .unwrap_or(by_input)
            .check()?;
        let rows_layout = match self.widen {
            true => rows_layout.widened(),
            false => rows_layout,
        }
        .narrowed(ty, input);
        if let Some(q8) = fusion.quantize_output {
            if !fusion.swiglu || rows_layout.teams != MatVecLayout::QUANTIZING_TEAMS {
                return Err(shape_error(format!(
                    "a quantized output needs the gate/up pairing and a layout of {} teams, not \
                     {rows_layout}",
                    MatVecLayout::QUANTIZING_TEAMS
                )));
            }
            q8.check(Self::NAME, rows, io.max_batch)?;
            if q8.cols != rows {
                return Err(shape_error(format!(
                    "a quantized output of {rows} columns into q8 vectors of {}",
                    q8.cols
                )));
            }
        }
        let max_batch = io.max_batch;
        let (pipelines, layouts): (_, Vec<MatVecLayout>) = self
            .pipelines_for(
                ctx,
                (ty, input, rows_layout),
                (max_batch, self.split_of(ty, rows)),
            )?
            .into_iter()
            .unzip();
        // A batched pipeline reads the q8 codes as x16 (wgsl/matvec_q8_batched.wgsl).
        let codes_as_x16 = layouts.iter().any(|l| l.batched);
        let norm = fusion
            .norm
            .map(|norm| {
                if !cols.is_multiple_of(4) {
                    return Err(shape_error(format!(
                        "a folded norm needs rows of a multiple of 4 elements, not {cols}"
                    )));
                }
                let bytes = 4 * cols;
                if norm.weight.size() < bytes || bytes > max_binding {
                    return Err(shape_error(format!(
                        "the norm weight needs {bytes} bytes in one binding; its buffer has {}",
                        norm.weight.size()
                    )));
                }
                Ok((
                    norm,
                    Window {
                        offset: 0,
                        size: bytes,
                        skip: 0,
                    },
                ))
            })
            .transpose()?;
        let align = ctx.binding_alignment();
        let batch = u64::from(io.max_batch);
        let x =
            io.x.bind(Self::NAME, "x", batch, cols, max_binding, align)?;
        let y =
            io.y.bind(Self::NAME, "y", batch, rows, max_binding, align)?;
        let step = io.step.buffer.as_entire_binding();
        // x16: the x window again, whole 16-byte words, when every row starts on one.
        let x_wide = (x.window.offset.is_multiple_of(16)
            && x.index.is_multiple_of(4)
            && (io.max_batch == 1 || x.stride.is_multiple_of(4)))
        .then(|| wide_window(x.window, io.x.buffer, max_binding))
        .flatten();
        let (unit_elems, ..) = unit_geometry(ty, rows_layout.wide);
        let units = cols.div_ceil(unit_elems);
        let max_per_dimension = ctx.device.limits().max_compute_workgroups_per_dimension;
        let ranges = split_rows("a matvec weight", w_rows, &[row_bytes], max_binding, align)?;
        if fusion.swiglu && ranges.len() > 1 {
            return Err(GpuError::TooLarge {
                what: "a gate/up pairing's weights (bytes)".into(),
                size: w_rows * row_bytes,
                limit: max_binding,
                limit_name: "max_storage_buffer_binding_size",
            });
        }
        // A pairing's single range holds the gate and the up rows; it writes `rows` outputs.
        let (pair_byte, outputs_per_workgroup) = match fusion.swiglu {
            true => (rows * row_bytes, rows_layout.rows_per_workgroup() / 2),
            false => (0, rows_layout.rows_per_workgroup()),
        };
        let own_out = match fusion.quantize_output {
            None if Self::owns_placeholder_out() => {
                Some(storage_buffer(ctx, "matvec output placeholder (own)", 16)?)
            }
            _ => None,
        };
        let ranges = ranges
            .into_iter()
            .map(|range| {
                let range = match fusion.swiglu {
                    true => 0..rows,
                    false => range,
                };
                let len = range.end - range.start;
                let w = Window::around(
                    io.weights_offset + range.start * row_bytes,
                    pair_byte + len * row_bytes,
                    align,
                );
                // w16: Q4_K reads it when every block starts on 16 bytes.
                let w_aligned = ty == GgmlType::Q4_K
                    && w.offset.is_multiple_of(16)
                    && w.skip.is_multiple_of(16)
                    && row_bytes.is_multiple_of(16);
                let w_wide = w_aligned
                    .then(|| wide_window(w, io.weights, max_binding))
                    .flatten();
                let wide =
                    u32::from(x_wide.is_some()) * WIDE_X + u32::from(w_wide.is_some()) * WIDE_W;
                let placeholder = self.placeholder.as_entire_binding();
                // xq, xd: the whole q8 vectors of a q8 binding (vector b at b·cols/4, b·cols/32).
                let batch = u64::from(io.max_batch);
                let (xq, xd) = match fusion.q8 {
                    Some(q8) => (
                        Window::around(0, batch * cols, align).binding(&q8.codes),
                        Window::around(0, 4 * batch * cols / Q8_BLOCK, align).binding(&q8.scales),
                    ),
                    None => (placeholder.clone(), placeholder.clone()),
                };
                // x16: the x window as 16-byte words, or for a batched binding the q8 codes
                // (whole 16-byte words: a wide type's rows are multiples of 256 elements).
                let x16 = match fusion.q8 {
                    Some(q8) if codes_as_x16 => {
                        Window::around(0, batch * cols, align).binding(&q8.codes)
                    }
                    _ => x_wide.map_or(placeholder.clone(), |x| x.binding(io.x.buffer)),
                };
                // yq, yd: the quantized output's whole vectors (vector b at b·rows/4, b·rows/32).
                let out = own_out
                    .as_ref()
                    .unwrap_or(&self.placeholder_out)
                    .as_entire_binding();
                let (yq, yd) = match fusion.quantize_output {
                    Some(q8) => (
                        Window::around(0, batch * rows, align).binding(&q8.codes),
                        Window::around(0, 4 * batch * rows / Q8_BLOCK, align).binding(&q8.scales),
                    ),
                    None => (out.clone(), out),
                };
                // split_rows keeps each range inside one binding (< 2^31 bytes): these fit u32.
                let params = Params {
                    rows: len as u32,
                    cols: cols as u32,
                    units: units as u32,
                    row_bytes: row_bytes as u32,
                    w_byte: w.skip as u32,
                    x_index: x.index,
                    x_stride: x.stride,
                    y_index: y.index + range.start as u32,
                    y_stride: y.stride,
                    accumulate: u32::from(io.accumulate),
                    wide,
                    eps: norm.map_or(0.0, |(n, _)| n.eps),
                    pair_byte: pair_byte as u32,
                    quantize_out: u32::from(fusion.quantize_output.is_some()),
                    pad: [0; 2],
                };
                let params = uniform(ctx, "matvec params", &params);
                let group = bind_group(
                    ctx,
                    "matvec",
                    &self.layout,
                    vec![
                        w.binding(io.weights),
                        x.window.binding(io.x.buffer),
                        y.window.binding(io.y.buffer),
                        params.as_entire_binding(),
                        step.clone(),
                        w_wide.map_or(placeholder.clone(), |w| w.binding(io.weights)),
                        x16,
                        norm.map_or(placeholder, |(n, window)| window.binding(n.weight)),
                        xq,
                        xd,
                        yq,
                        yd,
                    ],
                );
                let workgroups = len.div_ceil(outputs_per_workgroup);
                let grids = layouts
                    .iter()
                    .zip(BATCH_CAPACITIES)
                    .map(|(layout, capacity)| {
                        let (_, groups) = layout.vector_groups(capacity);
                        Grid::for_workgroups(workgroups * u64::from(groups), max_per_dimension)
                    })
                    .collect::<Result<Vec<_>, GpuError>>()?;
                Ok((group, grids))
            })
            .collect::<Result<Vec<_>, GpuError>>()?;
        let x_bytes = match fusion.q8 {
            Some(_) => Q8Vectors::bytes_per_vector(cols),
            None => 4 * cols,
        };
        let y_bytes = 4 * rows * if io.accumulate { 2 } else { 1 };
        let q8_out = fusion
            .quantize_output
            .map_or(0, |_| Q8Vectors::bytes_per_vector(rows));
        let (norm_weight, norm_reread) = match fusion.norm {
            Some(n) if n.shared => (0, 4 * cols),
            Some(_) => (4 * cols, 0),
            None => (0, 0),
        };
        let work = MatVecWork {
            kernel: match input.is_q8() {
                true => "matvec_q8",
                false => Self::NAME,
            },
            weight_bytes: w_rows * row_bytes + norm_weight,
            step_bytes: norm_reread,
            vector_bytes: x_bytes + y_bytes + q8_out,
            vector_flops: 2 * w_rows * cols,
        };
        Ok(MatVecBinding {
            pipelines,
            layouts,
            max_batch,
            ranges,
            work,
        })
    }

    /// Records the dispatches of `binding` for a step of `n_tokens` input vectors (the Step's
    /// `n_tokens`): the pipeline of the smallest capacity that holds them, one dispatch per row
    /// range. Refuses more vectors than the binding was checked for. Returns what it recorded:
    /// W read once, each vector's input read and output written, the product's FLOPs.
    pub fn encode(
        &self,
        pass: &mut wgpu::ComputePass,
        binding: &MatVecBinding,
        n_tokens: u32,
    ) -> Result<Recorded, GpuError> {
        if n_tokens > binding.max_batch {
            return Err(GpuError::Shape {
                kernel: Self::NAME,
                message: format!(
                    "a step of {n_tokens} vectors on a binding checked for at most {}",
                    binding.max_batch
                ),
            });
        }
        let pipeline = capacity_index(n_tokens);
        pass.set_pipeline(&binding.pipelines[pipeline]);
        for (group, grids) in &binding.ranges {
            pass.set_bind_group(0, group, &[]);
            grids[pipeline].dispatch(pass);
        }
        let (work, n) = (binding.work, u64::from(n_tokens));
        let bytes = OpBytes {
            weights: work.weight_bytes,
            activations: work.step_bytes + n * work.vector_bytes,
            flops: n * work.vector_flops,
        };
        Ok(Recorded::new(work.kernel, binding.ranges.len(), bytes))
    }
}
