//! Per-op GPU timing of a forward step: every kernel wrapper's `encode` returns what it recorded
//! ([`Recorded`]: its dispatches, the bytes they move, their FLOPs), the model notes it under the
//! op's name in the step's [`StepMarks`], and, when profiling, a timestamp is written inside the
//! compute pass after each op. Profiles, `harness bench` and the roofline add up what the
//! kernels said they did.
//!
//! The GPU time of op i is `t[i] − t[i−1]`: it includes the barrier wgpu inserts before the op's
//! dependent dispatches, which is what the op costs a step. Timestamps inside a pass need
//! `TIMESTAMP_QUERY_INSIDE_PASSES` (Vulkan, DX12; not Apple GPUs); without it [`StepMarks`] only
//! names and counts the ops, and a caller times whole steps on the host instead
//! ([`StepMarks::timed`] says which).

use super::context::GpuContext;
use super::error::GpuError;
use super::step::StepKind;

/// The most timestamps one step may write (wgpu's query-set limit is 4096).
pub const MAX_MARKS: u32 = 4096;

/// One op of a step: its name (the model's) and what its kernels recorded.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct OpRecord {
    /// What the op is (`attn_q`, `ffn_norm`, `attn_decode`): ops of the same name are one row of
    /// a profile.
    pub name: &'static str,
    /// The kernel family that ran it (`matvec`, `rms_norm`).
    pub kernel: &'static str,
    /// Weight, KV-cache and recurrent-state bytes the op reads: the roofline's bytes.
    pub weight_bytes: u64,
    /// Activation bytes it reads and writes (inputs, outputs, scratch).
    pub activation_bytes: u64,
    /// Floating-point operations of a weight product (2 · rows · cols · tokens); 0 for other
    /// ops, whose work is not counted.
    pub flops: u64,
    pub dispatches: usize,
    /// Index of the timestamp written after the op, when profiling with timestamps.
    pub mark: Option<u32>,
    /// Index of the timestamp the op's time starts from.
    pub since: Option<u32>,
}

/// What a kernel's dispatches move (and, for a weight product, its FLOPs), as its `encode`
/// states it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpBytes {
    pub weights: u64,
    pub activations: u64,
    pub flops: u64,
}

impl OpBytes {
    pub fn new(weights: u64, activations: u64) -> Self {
        OpBytes {
            weights,
            activations,
            flops: 0,
        }
    }

    /// The same bytes for a product of `tokens` vectors with a `rows × cols` weight: one
    /// multiply and one add per weight and token.
    pub fn product(self, rows: u64, cols: u64, tokens: u32) -> Self {
        OpBytes {
            flops: 2 * rows * cols * u64::from(tokens),
            ..self
        }
    }
}

impl std::ops::Add for OpBytes {
    type Output = OpBytes;

    fn add(self, other: OpBytes) -> OpBytes {
        OpBytes {
            weights: self.weights + other.weights,
            activations: self.activations + other.activations,
            flops: self.flops + other.flops,
        }
    }
}

/// What one kernel's `encode` recorded: the kernel (family and input: `matvec`, `matvec_q8`),
/// its dispatches and what they move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recorded {
    pub kernel: &'static str,
    pub dispatches: usize,
    pub bytes: OpBytes,
}

impl Recorded {
    pub fn new(kernel: &'static str, dispatches: usize, bytes: OpBytes) -> Self {
        Recorded {
            kernel,
            dispatches,
            bytes,
        }
    }

    /// This record and `before` (recorded just before it and feeding it: a quantization of
    /// its input) as one op of this record's kernel.
    pub fn after(self, before: Recorded) -> Recorded {
        Recorded {
            kernel: self.kernel,
            dispatches: before.dispatches + self.dispatches,
            bytes: before.bytes + self.bytes,
        }
    }
}

/// A measurement knob, not a form: how many times a decode step records each named op's
/// dispatches (`FAK_DECODE_PROBE`, or `harness bench --probe`): `ffn_gate_up*2` records the
/// gate/up product twice back to back in every layer, `ffn_norm*0` leaves the quantize dispatch
/// before it out. The difference in the unprofiled decode rate is what that op costs in its
/// place in the model, without the timestamps that inflate a profile (experiments/NOTES.md,
/// "ingap"). Repeating an op that only reads the step's state and overwrites its own outputs
/// (a norm's quantize, a projection that does not add into the residual, the head) leaves the
/// step's bits unchanged; any other count changes what the model computes (timing only).
///
/// Keys are the op names a decode step notes (`ffn_gate_up`, `gdn_out`, `attention`), and a
/// norm's name (`ffn_norm`, `attn_norm`, `output_norm`) for its quantize dispatch, which the
/// profile notes with the product after it. Prompt steps are never probed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DecodeProbe {
    counts: Vec<(String, u32)>,
}

impl DecodeProbe {
    /// `name*count` pairs, comma-separated (`ffn_gate_up*2,ffn_norm*0`); empty is no probe.
    pub fn parse(spec: &str) -> Result<DecodeProbe, String> {
        let mut counts = Vec::new();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let parsed = part
                .split_once('*')
                .and_then(|(name, n)| Some((name.trim(), n.trim().parse::<u32>().ok()?)))
                .filter(|(name, n)| !name.is_empty() && *n <= 8);
            match parsed {
                Some((name, n)) => counts.push((name.to_string(), n)),
                None => return Err(format!("`{part}`: expected op*count, count 0 to 8")),
            }
        }
        Ok(DecodeProbe { counts })
    }

    /// `FAK_DECODE_PROBE`'s probe (none when unset).
    pub fn from_env() -> Result<DecodeProbe, String> {
        Self::parse(&std::env::var("FAK_DECODE_PROBE").unwrap_or_default())
    }

    /// How many times a decode step records op `name` (1 unless named).
    pub fn times(&self, name: &str) -> u32 {
        self.counts
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map_or(1, |&(_, n)| n)
    }

    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// Whether a step under this probe computes the default's bits: every op it names is left
    /// out nowhere, and each repeated one only reads the step's state and overwrites its own
    /// outputs (a norm's quantize dispatch, a projection that does not add into the residual,
    /// the attention, the head's product and argmax) — not `ffn_down`, `gdn_out`,
    /// `attn_output` (they add into x), `gdn_decode` (it advances the recurrent state), nor a
    /// norm in place.
    pub fn keeps_bits(&self) -> bool {
        const OVERWRITING: [&str; 6] = [
            "ffn_norm",
            "attn_norm",
            "ffn_gate_up",
            "attention",
            "output",
            "argmax",
        ];
        let projection = |n: &str| {
            (n.starts_with("gdn_") && n != "gdn_out" && n != "gdn_decode")
                || (n.starts_with("attn_") && n != "attn_output")
        };
        self.counts
            .iter()
            .all(|(n, c)| *c >= 1 && (OVERWRITING.contains(&n.as_str()) || projection(n)))
    }
}

impl std::fmt::Display for DecodeProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .counts
            .iter()
            .map(|(n, c)| format!("{n}*{c}"))
            .collect();
        match parts.is_empty() {
            true => f.write_str("default"),
            false => f.write_str(&parts.join(",")),
        }
    }
}

/// The ops of one step, and the timestamps between them when profiling.
pub struct StepMarks<'q> {
    queries: Option<&'q wgpu::QuerySet>,
    next: u32,
    last: Option<u32>,
    /// KV positions the step attends over (its first token's position + its tokens): what an
    /// attention op reads.
    pub kv_len: u32,
    /// The role of the step's tokens, which picks every kernel the step records.
    pub kind: StepKind,
    pub ops: Vec<OpRecord>,
    /// How many times a decode step records each op ([`DecodeProbe`]; none by default).
    probe: DecodeProbe,
}

impl<'q> StepMarks<'q> {
    /// Records names and counts only.
    pub fn counting(kv_len: u32, kind: StepKind) -> Self {
        StepMarks {
            queries: None,
            next: 0,
            last: None,
            kv_len,
            kind,
            ops: Vec::new(),
            probe: DecodeProbe::default(),
        }
    }

    /// These marks with `probe`'s counts applied to a decode step's ops.
    pub fn probing(self, probe: &DecodeProbe) -> Self {
        StepMarks {
            probe: probe.clone(),
            ..self
        }
    }

    /// Records op `name`'s dispatches through `encode` as many times as the probe says (once
    /// without one, and always in a prompt step), and returns what they recorded together.
    pub fn probed(
        &self,
        name: &str,
        pass: &mut wgpu::ComputePass,
        mut encode: impl FnMut(&mut wgpu::ComputePass) -> Result<Recorded, GpuError>,
    ) -> Result<Recorded, GpuError> {
        let times = match self.kind {
            StepKind::Decode => self.probe.times(name),
            StepKind::Prompt => 1,
        };
        if times == 1 {
            return encode(pass);
        }
        let mut all: Option<Recorded> = None;
        for _ in 0..times {
            let r = encode(pass)?;
            all = Some(all.map_or(r, |before| r.after(before)));
        }
        Ok(all.unwrap_or(Recorded::new("probe_skipped", 0, OpBytes::default())))
    }

    /// Records a timestamp after every op into `queries` (made by [`Profiler`]).
    pub fn timed(queries: &'q wgpu::QuerySet, kv_len: u32, kind: StepKind) -> Self {
        StepMarks {
            queries: Some(queries),
            ..Self::counting(kv_len, kind)
        }
    }

    /// Whether timestamps are being written.
    pub fn is_timed(&self) -> bool {
        self.queries.is_some()
    }

    fn stamp(&mut self, pass: &mut wgpu::ComputePass) -> Option<u32> {
        let queries = self.queries?;
        let index = self.next;
        if index >= MAX_MARKS {
            return None;
        }
        pass.write_timestamp(queries, index);
        self.next += 1;
        Some(index)
    }

    /// Starts timing in a new pass (the time before it — copies, pass changes — is not
    /// attributed to any op).
    pub fn begin(&mut self, pass: &mut wgpu::ComputePass) {
        self.last = self.stamp(pass);
    }

    /// Notes op `name`, which the caller has just recorded into `pass` (what its kernels'
    /// `encode` returned).
    pub fn op(&mut self, pass: &mut wgpu::ComputePass, name: &'static str, recorded: Recorded) {
        let Recorded {
            kernel,
            dispatches,
            bytes,
        } = recorded;
        let since = self.last;
        let mark = since.and_then(|_| self.stamp(pass));
        self.last = mark;
        self.ops.push(OpRecord {
            name,
            kernel,
            weight_bytes: bytes.weights,
            activation_bytes: bytes.activations,
            flops: bytes.flops,
            dispatches,
            mark,
            since,
        });
    }

    /// Dispatches recorded so far.
    pub fn dispatches(&self) -> usize {
        self.ops.iter().map(|op| op.dispatches).sum()
    }

    /// Timestamps written so far.
    pub fn marks(&self) -> u32 {
        self.next
    }
}

/// The query set and readback of a profiled step.
pub struct Profiler {
    pub queries: wgpu::QuerySet,
    resolved: wgpu::Buffer,
    /// Nanoseconds per timestamp tick.
    period_ns: f64,
}

impl Profiler {
    /// `None` when the device cannot write timestamps inside a pass.
    pub fn new(ctx: &GpuContext) -> Option<Profiler> {
        let needed =
            wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES;
        if !ctx.device.features().contains(needed) {
            return None;
        }
        let queries = ctx.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("step profile"),
            ty: wgpu::QueryType::Timestamp,
            count: MAX_MARKS,
        });
        let resolved = ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("step profile timestamps"),
            size: u64::from(MAX_MARKS) * 8,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        Some(Profiler {
            queries,
            resolved,
            period_ns: f64::from(ctx.queue.get_timestamp_period()),
        })
    }

    /// Records the resolve of the first `marks` timestamps; call after the step's passes.
    pub fn resolve(&self, encoder: &mut wgpu::CommandEncoder, marks: u32) {
        if marks > 0 {
            encoder.resolve_query_set(&self.queries, 0..marks, &self.resolved, 0);
        }
    }

    /// Each op's GPU time in nanoseconds (None for ops recorded without a timestamp), once the
    /// resolving submit has been made.
    pub fn op_times(
        &self,
        ctx: &GpuContext,
        marks: u32,
        ops: &[OpRecord],
    ) -> Result<Vec<Option<f64>>, GpuError> {
        let raw = super::read_back(ctx, &self.resolved, 0..u64::from(marks) * 8)?;
        let ticks: Vec<u64> = bytemuck::pod_collect_to_vec(&raw);
        Ok(ops
            .iter()
            .map(|op| match (op.since, op.mark) {
                (Some(a), Some(b)) => {
                    let (a, b) = (ticks[a as usize], ticks[b as usize]);
                    Some(b.saturating_sub(a) as f64 * self.period_ns)
                }
                _ => None,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::DecodeProbe;

    #[test]
    fn a_probe_parses_its_counts_and_says_which_keep_the_defaults_bits() {
        let p = DecodeProbe::parse(" ffn_gate_up*2, ffn_norm*0 ,").unwrap();
        assert_eq!((p.times("ffn_gate_up"), p.times("ffn_norm")), (2, 0));
        assert_eq!(p.times("ffn_down"), 1, "an op not named is recorded once");
        assert_eq!(p.to_string(), "ffn_gate_up*2,ffn_norm*0");
        assert!(!p.keeps_bits(), "a quantize left out");
        assert!(DecodeProbe::parse("").unwrap().is_empty());
        assert_eq!(DecodeProbe::default().to_string(), "default");
        let keeping = "ffn_gate_up*3,attn_norm*2,gdn_qkvzba*2,attn_qk*2,attention*2,output*2";
        assert!(DecodeProbe::parse(keeping).unwrap().keeps_bits());
        for changing in [
            "ffn_down*2",
            "gdn_out*2",
            "attn_output*2",
            "gdn_decode*2",
            "output_norm*2",
        ] {
            assert!(
                !DecodeProbe::parse(changing).unwrap().keeps_bits(),
                "{changing}"
            );
        }
        for bad in [
            "ffn_gate_up",
            "*2",
            "ffn_gate_up*x",
            "ffn_gate_up*9",
            "a*-1",
        ] {
            assert!(DecodeProbe::parse(bad).is_err(), "{bad}");
        }
        // The last count of a name holds.
        assert_eq!(
            DecodeProbe::parse("output*2,output*3")
                .unwrap()
                .times("output"),
            3
        );
    }
}
