//! From raw files to the packet: per-request decomposition, per-arm summaries, ratios against the
//! reference arm, quality summaries. The writer builds the packet with [`build_packet`]; the
//! validator rebuilds it from the raw files with the same function and compares.

use super::comparison::{
    ArmEntry, ArmRatios, ArmSummary, Envelope, Hardware, HarnessInfo, Method, PLAIN_CLIENT_RULE,
    Packet, PlainClientCheck, QualityEntry, QualityEntryComparison, Ratios, RequestRow, Selftest,
};
use super::metrics::{
    BootstrapSpec, TimeDist, decode_rate, itl_gaps, percentile, prefill_rate, rate_dist, ratio,
    singletons, time_dist,
};
use super::quality::ArmQuality;
use super::raw::{ArmRaw, Buckets, PlainClient, RequestSample};
use super::{FileDigest, PACKET_SCHEMA};
use std::collections::BTreeMap;

/// Everything of the packet that is not computed from the raw files.
#[derive(Clone, Debug, PartialEq)]
pub struct PacketMeta {
    pub created_utc: String,
    pub harness: HarnessInfo,
    pub hardware: Hardware,
    pub toolchain: BTreeMap<String, String>,
    pub envelope: Envelope,
    pub method: Method,
    pub selftest: Selftest,
}

impl PacketMeta {
    /// The fixed parts of an existing packet (what the validator rebuilds around).
    pub fn of(packet: &Packet) -> Self {
        PacketMeta {
            created_utc: packet.created_utc.clone(),
            harness: packet.harness.clone(),
            hardware: packet.hardware.clone(),
            toolchain: packet.toolchain.clone(),
            envelope: packet.envelope.clone(),
            method: packet.method.clone(),
            selftest: packet.selftest.clone(),
        }
    }
}

/// The packet from its fixed parts, the arms' raw files and the quality files, each with its
/// digest, in the order the arms ran.
pub fn build_packet(
    meta: PacketMeta,
    arms: &[(ArmRaw, FileDigest)],
    quality: &[(ArmQuality, FileDigest)],
) -> Packet {
    let entries: Vec<ArmEntry> = arms
        .iter()
        .map(|(raw, digest)| arm_entry(raw, digest, &meta.envelope, &meta.method.bootstrap))
        .collect();
    let ratios = ratios(&entries, &meta.method.reference_arm);
    Packet {
        schema: PACKET_SCHEMA.to_owned(),
        created_utc: meta.created_utc,
        harness: meta.harness,
        hardware: meta.hardware,
        toolchain: meta.toolchain,
        envelope: meta.envelope,
        method: meta.method,
        selftest: meta.selftest,
        arms: entries,
        ratios,
        quality: quality.iter().map(|(q, d)| quality_entry(q, d)).collect(),
        scenario: None,
    }
}

/// One arm's entry: its raw file's header and status, every request decomposed, the summary.
pub fn arm_entry(
    raw: &ArmRaw,
    digest: &FileDigest,
    envelope: &Envelope,
    bootstrap: &BootstrapSpec,
) -> ArmEntry {
    let h = &raw.header;
    ArmEntry {
        arm: h.arm.clone(),
        runtime: h.runtime,
        engine: h.engine.clone(),
        weights: h.weights.clone(),
        envelope: h.envelope.clone(),
        status: raw.status.clone(),
        bucket_methods: h.bucket_methods.clone(),
        memory: raw.memory.clone(),
        raw_file: digest.clone(),
        summary: arm_summary(raw, envelope, bootstrap),
        requests: raw
            .requests
            .iter()
            .map(|r| request_row(r, envelope))
            .collect(),
        device: h.device.clone(),
        plain_client: raw
            .plain_client
            .as_ref()
            .map(|p| plain_client_check(raw, p)),
    }
}

/// The arm's TTFT p50 (over its counted requests) against the plain client's.
fn plain_client_check(raw: &ArmRaw, plain: &PlainClient) -> PlainClientCheck {
    let arm: Vec<f64> = raw.counted().map(|r| r.buckets.ttft()).collect();
    let arm_p50 = percentile(&arm, 0.5);
    let plain_p50 = percentile(&plain.ttft_s, 0.5);
    PlainClientCheck {
        how: plain.how.clone(),
        rule: PLAIN_CLIENT_RULE.to_owned(),
        requests: plain.ttft_s.len(),
        plain_ttft_p50_s: plain_p50,
        arm_ttft_p50_s: arm_p50,
        within: arm_p50
            .zip(plain_p50)
            .map(|(a, p)| PlainClientCheck::within(a, p)),
        plain_beyond_prompt_p50_s: (plain.prompt_s.len() == plain.ttft_s.len())
            .then(|| {
                let beyond: Vec<f64> = plain
                    .ttft_s
                    .iter()
                    .zip(&plain.prompt_s)
                    .map(|(t, p)| t - p)
                    .collect();
                percentile(&beyond, 0.5)
            })
            .flatten(),
        arm_beyond_prompt_p50_s: percentile(
            &raw.counted()
                .map(|r| r.buckets.ttft() - r.buckets.prefill_s)
                .collect::<Vec<_>>(),
            0.5,
        ),
        error: plain.error.clone(),
    }
}

pub fn request_row(r: &RequestSample, envelope: &Envelope) -> RequestRow {
    RequestRow {
        index: r.index,
        prompt_index: r.prompt_index,
        warmup: r.warmup,
        buckets: r.buckets,
        total_s: r.buckets.total(),
        wall_s: r.wall_s,
        ttft_s: r.buckets.ttft(),
        prefill_tok_s: prefill_rate(envelope.n_ctx, r.buckets.prefill_s),
        decode_tok_s: decode_rate(envelope.n_out, r.buckets.decode_s),
    }
}

/// The summary over counted requests; `None` when there are none.
pub fn arm_summary(
    raw: &ArmRaw,
    envelope: &Envelope,
    bootstrap: &BootstrapSpec,
) -> Option<ArmSummary> {
    let counted: Vec<&RequestSample> = raw.counted().collect();
    if counted.is_empty() {
        return None;
    }
    let per_request = |f: &dyn Fn(&RequestSample) -> f64| -> Option<TimeDist> {
        time_dist(&singletons(counted.iter().map(|r| f(r))), bootstrap)
    };
    let ttft_s = per_request(&|r| r.buckets.ttft())?;
    let prefill_s = per_request(&|r| r.buckets.prefill_s)?;
    let decode_s = per_request(&|r| r.buckets.decode_s)?;
    let total_s = per_request(&|r| r.buckets.total())?;
    let gaps: Vec<Vec<f64>> = counted.iter().map(|r| itl_gaps(&r.token_times_s)).collect();
    let multi_token = envelope.n_out >= 2;
    let itl_s = if multi_token {
        time_dist(&gaps, bootstrap)
    } else {
        None
    };
    let bucket_stat = |f: &dyn Fn(&[f64]) -> f64| -> Buckets {
        let mut out = [0.0; 7];
        for (i, slot) in out.iter_mut().enumerate() {
            let column: Vec<f64> = counted.iter().map(|r| r.buckets.values()[i]).collect();
            *slot = f(&column);
        }
        Buckets::from_values(out)
    };
    Some(ArmSummary {
        requests: counted.len(),
        prefill_tok_s: rate_dist(envelope.n_ctx as f64, &prefill_s),
        decode_tok_s: multi_token.then(|| rate_dist((envelope.n_out - 1) as f64, &decode_s)),
        ttft_s,
        prefill_s,
        decode_s,
        total_s,
        itl_s,
        buckets_p50: bucket_stat(&|c| percentile(c, 0.5).unwrap_or(0.0)),
        buckets_mean: bucket_stat(&|c| c.iter().sum::<f64>() / c.len() as f64),
    })
}

/// Every summarised arm's p50s against the reference arm's.
pub fn ratios(arms: &[ArmEntry], reference_arm: &str) -> Ratios {
    let reference = arms
        .iter()
        .find(|a| a.arm == reference_arm)
        .and_then(|a| a.summary.as_ref());
    let Some(reference) = reference else {
        return Ratios {
            reference_arm: reference_arm.to_owned(),
            note: Some(format!(
                "no ratios: the reference arm {reference_arm} has no counted request"
            )),
            by_arm: BTreeMap::new(),
        };
    };
    let by_arm = arms
        .iter()
        .filter_map(|a| a.summary.as_ref().map(|s| (a.arm.clone(), s)))
        .map(|(arm, s)| {
            let both = |a: Option<f64>, b: Option<f64>| Some(ratio(a?, b?));
            let r = ArmRatios {
                ttft_p50: ratio(s.ttft_s.p50, reference.ttft_s.p50),
                prefill_tok_s_p50: ratio(s.prefill_tok_s.p50, reference.prefill_tok_s.p50),
                decode_tok_s_p50: both(
                    s.decode_tok_s.as_ref().map(|d| d.p50),
                    reference.decode_tok_s.as_ref().map(|d| d.p50),
                ),
                itl_p50: both(
                    s.itl_s.as_ref().map(|d| d.p50),
                    reference.itl_s.as_ref().map(|d| d.p50),
                ),
            };
            (arm, r)
        })
        .collect();
    Ratios {
        reference_arm: reference_arm.to_owned(),
        note: None,
        by_arm,
    }
}

pub fn quality_entry(q: &ArmQuality, digest: &FileDigest) -> QualityEntry {
    QualityEntry {
        arm: q.arm.clone(),
        file: digest.clone(),
        status: q.status.clone(),
        comparisons: q
            .comparisons
            .iter()
            .map(|c| QualityEntryComparison {
                against: c.against.clone(),
                rule: c.rule.clone(),
                top_k: c.top_k,
                summary: c.summary.clone(),
                withheld_positions: c.withheld.len(),
            })
            .collect(),
        own_rounding_skipped: q.own_rounding_skipped.clone(),
    }
}
