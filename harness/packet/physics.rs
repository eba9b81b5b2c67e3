//! What no machine can do, for `harness validate`: figures held to the packet's own measurements
//! (the selftest's read bandwidth, the engine's own decode steps) and to the published peaks of
//! the GPUs in [`GPU_PEAKS`]. A packet whose raw files were rewritten consistently passes every
//! arithmetic check; these catch the ones that claim more than the hardware can give:
//!
//! - **Decode above the memory bound.** One sequence's decode step reads every weight of a step
//!   (`envelope.decode_step_bytes`) at least once, so its rate is at most bandwidth ÷ bytes per
//!   step: the GPU's published peak where [`GPU_PEAKS`] has it, else the selftest's measured
//!   read rate with [`MEASURED_BANDWIDTH_SLACK`]. Per sequence: a batched step serves several
//!   sequences with one read, but each still advances one token per step. Applied where the
//!   step reads at least [`CACHE_RESIDENT_BYTES`] (a smaller model may sit in a last-level cache
//!   and beat DRAM) and only to arms on the measured adapter.
//! - **Prefill below the compute floor.** Each prompt token multiplies every block matrix
//!   (`envelope.prefill_flops_per_token`), so a prefill of n tokens takes at least n × that ÷
//!   the GPU's peak dense throughput (any data type, without sparsity). Only for GPUs in the
//!   table: a measured kernel rate bounds nothing from above.
//! - **A cached TTFT below one decode step.** A turn that computed at least one prompt token ran
//!   at least one forward pass, which costs at least a single-sequence decode step; that arm's
//!   own steps bound it from below: its fastest turn's mean step over the agents that step may
//!   have served (a batched step costs at most that many single steps).
//! - **Hardware the selftest did not measure.** The hardware entry's adapter and bandwidth, and
//!   the selftest summary, must be what the selftest's raw file says; a measured bandwidth above
//!   the GPU's published peak is itself impossible.
//!
//! A check that cannot apply (no bandwidth measured, a GPU not in the table, a packet written
//! before a field existed) is named in the validation's notes, never passed silently.

use super::comparison::{Hardware, Packet};
use super::raw::{ArmRaw, DeviceKind};
use super::scenario::ScenarioRaw;
use super::{FileDigest, NATIVE_ARM};

/// A GPU's published peaks (datasheet figures, dense, without sparsity).
#[derive(Clone, Copy, Debug)]
pub struct GpuPeak {
    /// Matched case-insensitively against the adapter name; the first match wins.
    pub name_contains: &'static str,
    /// Peak memory bandwidth (bytes/s) of the fastest variant under that name.
    pub memory_bytes_per_s: f64,
    /// Peak dense tensor throughput of any data type (FP8/INT8 ops/s) of that variant.
    pub dense_ops_per_s: f64,
    pub source: &'static str,
}

/// Published peaks, upper bounds for every variant sold under the name.
pub const GPU_PEAKS: &[GpuPeak] = &[
    GpuPeak {
        name_contains: "H200",
        memory_bytes_per_s: 4.8e12,
        dense_ops_per_s: 1979e12,
        source: "NVIDIA H200 datasheet: HBM3e 4.8 TB/s, FP8 1,979 TFLOPS dense",
    },
    GpuPeak {
        name_contains: "H100",
        memory_bytes_per_s: 3.9e12,
        dense_ops_per_s: 1979e12,
        source: "NVIDIA H100 datasheet: HBM3 3.35 TB/s (SXM), 3.9 TB/s (NVL); FP8 1,979 TFLOPS dense (SXM)",
    },
    GpuPeak {
        name_contains: "A100",
        memory_bytes_per_s: 2.039e12,
        dense_ops_per_s: 624e12,
        source: "NVIDIA A100 datasheet: 2,039 GB/s (80GB SXM), INT8 624 TOPS dense",
    },
];

/// A step reading fewer bytes may be served from a last-level cache faster than DRAM (AMD
/// MI300X: 256 MB of Infinity Cache, Apple's SoC caches, H200's 50 MB L2), so the memory bound
/// starts above the largest of them.
pub const CACHE_RESIDENT_BYTES: u64 = 512 << 20;

/// The selftest's probe is one streaming-read kernel, best of several passes; an engine's
/// kernels may read somewhat faster, not a quarter faster.
pub const MEASURED_BANDWIDTH_SLACK: f64 = 1.25;

/// The table's entry for `adapter`.
pub fn peak_of(adapter: &str) -> Option<&'static GpuPeak> {
    let a = adapter.to_ascii_lowercase();
    GPU_PEAKS
        .iter()
        .find(|p| a.contains(&p.name_contains.to_ascii_lowercase()))
}

/// The bytes/s a decode step can read on the packet's adapter, and whence.
fn read_bound(hw: &Hardware) -> Option<(f64, String)> {
    if let Some(p) = peak_of(&hw.gpu.adapter) {
        return Some((p.memory_bytes_per_s, format!("{} (published)", p.source)));
    }
    let b = hw.bandwidth.as_ref()?;
    Some((
        b.bytes_per_s * MEASURED_BANDWIDTH_SLACK,
        format!(
            "the selftest's {:.1} GB/s × {MEASURED_BANDWIDTH_SLACK}",
            b.bytes_per_s / 1e9
        ),
    ))
}

/// Whether an envelope arm ran on the adapter the hardware entry describes: its recorded device
/// says so; a packet written before devices were recorded vouches only for fak's own arm.
fn on_adapter(raw: &ArmRaw) -> bool {
    match &raw.header.device {
        Some(d) => d.selftest_adapter && d.kind != DeviceKind::Cpu,
        None => raw.header.arm == NATIVE_ARM,
    }
}

/// Every physical bound on the packet; `notes` names the ones that could not apply.
pub fn check(
    packet: &Packet,
    raws: &[(ArmRaw, FileDigest)],
    scenario_raws: &[(ScenarioRaw, FileDigest)],
    notes: &mut Vec<String>,
    errors: &mut Vec<String>,
) {
    check_bandwidth_claim(&packet.hardware, errors);
    decode_within_memory_bound(packet, raws, scenario_raws, notes, errors);
    prefill_above_compute_floor(packet, raws, scenario_raws, notes, errors);
    cached_ttft_above_one_step(packet, scenario_raws, notes, errors);
}

/// A measured bandwidth above the GPU's published peak.
fn check_bandwidth_claim(hw: &Hardware, errors: &mut Vec<String>) {
    if let (Some(b), Some(p)) = (&hw.bandwidth, peak_of(&hw.gpu.adapter))
        && b.bytes_per_s > p.memory_bytes_per_s
    {
        errors.push(format!(
            "hardware.bandwidth {:.1} GB/s exceeds the {} peak ({})",
            b.bytes_per_s / 1e9,
            hw.gpu.adapter,
            p.source
        ));
    }
}

fn decode_within_memory_bound(
    packet: &Packet,
    raws: &[(ArmRaw, FileDigest)],
    scenario_raws: &[(ScenarioRaw, FileDigest)],
    notes: &mut Vec<String>,
    errors: &mut Vec<String>,
) {
    let what = "decode within the memory bound";
    let Some(bytes) = packet.envelope.decode_step_bytes else {
        notes.push(format!("{what}: not checked (no decode_step_bytes)"));
        return;
    };
    if bytes < CACHE_RESIDENT_BYTES {
        notes.push(format!(
            "{what}: not checked (a step reads {bytes} bytes, under {CACHE_RESIDENT_BYTES}: it may stay in a cache)"
        ));
        return;
    }
    let Some((bytes_per_s, whence)) = read_bound(&packet.hardware) else {
        notes.push(format!("{what}: not checked (no bandwidth measured)"));
        return;
    };
    let max_rate = bytes_per_s / bytes as f64;
    let n_out = packet.envelope.n_out;
    for (raw, _) in raws.iter().filter(|(r, _)| on_adapter(r)) {
        for r in raw.counted() {
            let rate = (n_out.saturating_sub(1)) as f64 / r.buckets.decode_s;
            if n_out >= 2 && rate > max_rate {
                errors.push(format!(
                    "arm {}, request {}: decode {rate:.1} tok/s, above the {max_rate:.1} tok/s one sequence can reach reading {bytes} bytes a step at {:.1} GB/s ({whence})",
                    raw.header.arm,
                    r.index,
                    bytes_per_s / 1e9
                ));
            }
        }
    }
    for (raw, _) in scenario_raws
        .iter()
        .filter(|(r, _)| r.header.engine.name == NATIVE_ARM)
    {
        for t in &raw.turns {
            let (Some(first), Some(last)) = (t.token_times_s.first(), t.token_times_s.last())
            else {
                continue;
            };
            let rate = (t.token_times_s.len() - 1) as f64 / (last - first);
            if t.token_times_s.len() >= 2 && rate > max_rate {
                errors.push(format!(
                    "scenario arm {}, agent {} turn {}: {rate:.1} tok/s per sequence, above the {max_rate:.1} tok/s a step reading {bytes} bytes allows ({whence})",
                    raw.header.arm, t.agent, t.turn
                ));
            }
        }
    }
}

fn prefill_above_compute_floor(
    packet: &Packet,
    raws: &[(ArmRaw, FileDigest)],
    scenario_raws: &[(ScenarioRaw, FileDigest)],
    notes: &mut Vec<String>,
    errors: &mut Vec<String>,
) {
    let what = "prefill above the compute floor";
    let Some(flops) = packet.envelope.prefill_flops_per_token else {
        notes.push(format!("{what}: not checked (no prefill_flops_per_token)"));
        return;
    };
    let Some(peak) = peak_of(&packet.hardware.gpu.adapter) else {
        notes.push(format!(
            "{what}: not checked ({} has no published peak in the table)",
            packet.hardware.gpu.adapter
        ));
        return;
    };
    let floor = |tokens: usize| tokens as f64 * flops as f64 / peak.dense_ops_per_s;
    let n_ctx = packet.envelope.n_ctx;
    for (raw, _) in raws.iter().filter(|(r, _)| on_adapter(r)) {
        for r in raw.counted() {
            if r.buckets.prefill_s < floor(n_ctx) {
                errors.push(format!(
                    "arm {}, request {}: prefill {:.3} ms for {n_ctx} tokens, below the {:.3} ms that {flops} FLOPs a token take at {}'s peak ({})",
                    raw.header.arm,
                    r.index,
                    r.buckets.prefill_s * 1e3,
                    floor(n_ctx) * 1e3,
                    packet.hardware.gpu.adapter,
                    peak.source
                ));
            }
        }
    }
    for (raw, _) in scenario_raws
        .iter()
        .filter(|(r, _)| r.header.engine.name == NATIVE_ARM)
    {
        for t in &raw.turns {
            if t.ttft_s < floor(t.prefill_computed) {
                errors.push(format!(
                    "scenario arm {}, agent {} turn {}: TTFT {:.3} ms for {} computed tokens, below the compute floor {:.3} ms ({})",
                    raw.header.arm,
                    t.agent,
                    t.turn,
                    t.ttft_s * 1e3,
                    t.prefill_computed,
                    floor(t.prefill_computed) * 1e3,
                    peak.source
                ));
            }
        }
    }
}

/// A scenario turn that computed at least one prompt token ran at least one forward pass, which
/// reads every weight a decode step reads: its TTFT is at least one memory-bound step, bytes ÷
/// bandwidth (for fak's arms, on the measured adapter, steps beyond any cache).
fn cached_ttft_above_one_step(
    packet: &Packet,
    scenario_raws: &[(ScenarioRaw, FileDigest)],
    notes: &mut Vec<String>,
    errors: &mut Vec<String>,
) {
    if scenario_raws.is_empty() {
        return;
    }
    let what = "a cached TTFT at least one decode step";
    let Some(bytes) = packet
        .envelope
        .decode_step_bytes
        .filter(|&b| b >= CACHE_RESIDENT_BYTES)
    else {
        notes.push(format!(
            "{what}: not checked (no decode_step_bytes of at least {CACHE_RESIDENT_BYTES})"
        ));
        return;
    };
    let Some((bytes_per_s, whence)) = read_bound(&packet.hardware) else {
        notes.push(format!("{what}: not checked (no bandwidth measured)"));
        return;
    };
    let step = bytes as f64 / bytes_per_s;
    for (raw, _) in scenario_raws
        .iter()
        .filter(|(r, _)| r.header.engine.name == NATIVE_ARM)
    {
        for t in raw.turns.iter().filter(|t| t.prefill_computed >= 1) {
            if t.ttft_s < step {
                errors.push(format!(
                    "scenario arm {}, agent {} turn {}: TTFT {:.3} ms with {} tokens computed, below one decode step: reading {bytes} bytes at {:.1} GB/s takes {:.3} ms ({whence})",
                    raw.header.arm,
                    t.agent,
                    t.turn,
                    t.ttft_s * 1e3,
                    t.prefill_computed,
                    bytes_per_s / 1e9,
                    step * 1e3
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_finds_gpus_by_name() {
        assert_eq!(peak_of("NVIDIA H200").unwrap().name_contains, "H200");
        assert_eq!(
            peak_of("NVIDIA H100 80GB HBM3").unwrap().name_contains,
            "H100"
        );
        assert!(peak_of("llvmpipe (LLVM 15.0.6, 256 bits)").is_none());
    }
}
