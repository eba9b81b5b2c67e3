//! `harness validate`: checks a packet against its JSON Schema, then recomputes everything it can
//! from the raw files beside it and reports every disagreement.
//!
//! Unreadable (exit 2): packet, manifest, raw or quality file missing, not JSON, or not of its
//! type. Invalid (exit 1): anything else that does not hold — schema, digests, the matched
//! envelope, each request's clocks, every figure of the packet recomputed, the quality claims
//! under their rules, a schema newer than this harness.

use super::comparison::{
    MIN_BOOTSTRAP_RESAMPLES, PERCENTILE_METHOD, Packet, SelftestStatus, TOLERANCE_V1,
};
use super::metrics::{Tolerance, close};
use super::quality::{Against, ArmQuality, QualityComparison, QualityRule, summarize};
use super::raw::{ArmRaw, ArmStatus, BucketKind, Buckets, RequestSample, Runtime, Weights};
use super::rounding::own_rounding;
use super::scenario::{Scenario, ScenarioRaw, build_scenario, check_raw, scenario_raw_file_name};
use super::summary::{PacketMeta, build_packet};
use super::{
    FileDigest, MANIFEST_FILE, Manifest, PACKET_FILE, PACKET_JSON_SCHEMA, PACKET_SCHEMA,
    QUALITY_SCHEMA, RAW_SCHEMA, VALIDATION_SCHEMA, prompt_set_sha256, sha256_hex,
};
use super::{physics, selftest_raw};
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// `harness validate`'s answer.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Validation {
    pub schema: String,
    pub valid: bool,
    /// sha256 of packet.json's bytes; null when it could not be read.
    pub packet_sha256: Option<String>,
    pub errors: Vec<String>,
    /// Checks that could not apply to this packet, and why (nothing in them failed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// A file was missing or corrupt (exit 2 rather than 1).
    #[serde(skip)]
    pub unreadable: bool,
}

impl Validation {
    /// 0 valid, 1 not valid, 2 unreadable.
    pub fn exit_code(&self) -> i32 {
        match (self.valid, self.unreadable) {
            (true, _) => 0,
            (false, false) => 1,
            (false, true) => 2,
        }
    }
}

/// A file that could not be read or parsed: the validation stops there (exit 2).
struct Unreadable(String);

/// Validates `packet.json` at `path` and the files beside it.
pub fn validate(path: &Path) -> Validation {
    let mut v = Validation {
        schema: VALIDATION_SCHEMA.to_owned(),
        valid: false,
        packet_sha256: None,
        errors: Vec::new(),
        notes: Vec::new(),
        unreadable: false,
    };
    let mut errors = Vec::new();
    match check(path, &mut v.packet_sha256, &mut v.notes, &mut errors) {
        Ok(()) => {}
        Err(Unreadable(e)) => {
            errors.push(e);
            v.unreadable = true;
        }
    }
    v.valid = errors.is_empty();
    v.errors = errors;
    v
}

fn check(
    path: &Path,
    packet_sha256: &mut Option<String>,
    notes: &mut Vec<String>,
    errors: &mut Vec<String>,
) -> Result<(), Unreadable> {
    let bytes = read_capped(path, "packet", MAX_JSON_BYTES, JSON_CAP_WHY)?;
    *packet_sha256 = Some(sha256_hex(&bytes));
    let value: Value = serde_json::from_slice(&bytes)
        .map_err(|e| Unreadable(format!("{}: not JSON: {e}", path.display())))?;
    if let Err(e) = check_schema_version(&value) {
        errors.push(e);
        return Ok(());
    }
    let schema_errors = json_schema_errors(&value);
    if !schema_errors.is_empty() {
        errors.extend(schema_errors);
        return Ok(());
    }
    let packet: Packet = match serde_json::from_value(value.clone()) {
        Ok(p) => p,
        Err(e) => {
            errors.push(format!("packet.json does not match its types: {e}"));
            return Ok(());
        }
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let folder = check_manifest(dir, &packet, &bytes, errors)?;
    let raws = read_raw_files(&folder, &packet, errors)?;
    let qualities = read_quality_files(&folder, &packet, errors)?;
    check_method(&packet, errors);
    check_envelope(&packet, &raws, errors);
    for (raw, _) in &raws {
        check_arm(&packet, raw, errors);
    }
    check_quality(&packet, &qualities, errors);
    check_selftest(&packet, errors);
    check_selftest_file(&folder, &packet, notes, errors)?;
    let scenario_raws = match &packet.scenario {
        Some(scenario) => {
            let raws = read_scenario_files(&folder, scenario, errors)?;
            check_scenario(&packet, scenario, &raws, errors);
            raws
        }
        None => Vec::new(),
    };
    physics::check(&packet, &raws, &scenario_raws, notes, errors);
    // Every figure of the packet, rebuilt from the raw files with the same arithmetic.
    let mut rebuilt = build_packet(PacketMeta::of(&packet), &raws, &qualities);
    rebuilt.scenario = packet
        .scenario
        .as_ref()
        .map(|s| build_scenario(s.spec.clone(), &scenario_raws));
    let rebuilt = serde_json::to_value(&rebuilt).expect("a packet always serialises");
    diff_json("", &value, &rebuilt, errors);
    Ok(())
}

/// The most bytes read of packet.json and manifest.json (a real packet is a few MB).
const MAX_JSON_BYTES: u64 = 256 << 20;
const JSON_CAP_WHY: &str = "bytes allowed for a packet's JSON files";

/// Reads a regular file of at most `cap` bytes: a FIFO, a device (a link to /dev/zero) or an
/// oversized file is unreadable, never read until memory runs out.
fn read_capped(
    path: &Path,
    role: &'static str,
    cap: u64,
    why: &str,
) -> Result<Vec<u8>, Unreadable> {
    fak::files::read_capped(path, role, cap, why).map_err(|e| Unreadable(e.to_string()))
}

/// The run folder with the size manifest.json gives each file: no file is read past it.
struct Folder<'a> {
    dir: &'a Path,
    listed: BTreeMap<String, u64>,
}

impl Folder<'_> {
    /// The file `name` of the folder, read up to its listed size (an unlisted file — already an
    /// error — up to the JSON cap).
    fn read(&self, name: &str, role: &'static str) -> Result<(PathBuf, Vec<u8>), Unreadable> {
        let path = file_path(self.dir, name)?;
        let bytes = match self.listed.get(name) {
            Some(&cap) => read_capped(&path, role, cap, "bytes manifest.json lists")?,
            None => read_capped(&path, role, MAX_JSON_BYTES, JSON_CAP_WHY)?,
        };
        Ok((path, bytes))
    }
}

/// The packet's `schema` names a version this harness knows.
fn check_schema_version(value: &Value) -> Result<(), String> {
    let schema = value
        .get("schema")
        .and_then(Value::as_str)
        .ok_or("packet.json has no \"schema\" string")?;
    let (family, supported) = PACKET_SCHEMA.rsplit_once(".v").expect("vN suffix");
    let supported: u32 = supported.parse().expect("numeric version");
    let version = schema
        .strip_prefix(family)
        .and_then(|s| s.strip_prefix(".v"))
        .and_then(|v| v.parse::<u32>().ok())
        .ok_or_else(|| format!("schema {schema:?} is not a {family}.vN packet"))?;
    if version > supported {
        return Err(format!(
            "schema {schema} is newer than this harness supports ({PACKET_SCHEMA}): update the harness"
        ));
    }
    if version < supported {
        return Err(format!(
            "schema {schema} is older than {PACKET_SCHEMA} and no longer read"
        ));
    }
    Ok(())
}

/// The packet against `schema.json`, one error per violation with its JSON pointer.
pub fn json_schema_errors(value: &Value) -> Vec<String> {
    let schema: Value = serde_json::from_str(PACKET_JSON_SCHEMA).expect("schema.json is JSON");
    let validator = jsonschema::validator_for(&schema).expect("schema.json is a valid schema");
    validator
        .iter_errors(value)
        .map(|e| format!("schema: at {:?}: {e}", e.instance_path().to_string()))
        .collect()
}

fn check_manifest<'a>(
    dir: &'a Path,
    packet: &Packet,
    packet_bytes: &[u8],
    errors: &mut Vec<String>,
) -> Result<Folder<'a>, Unreadable> {
    let path = dir.join(MANIFEST_FILE);
    let manifest: Manifest = parse(
        &path,
        &read_capped(&path, "manifest", MAX_JSON_BYTES, JSON_CAP_WHY)?,
    )?;
    let folder = Folder {
        dir,
        listed: manifest
            .files
            .iter()
            .map(|f| (f.name.clone(), f.bytes))
            .collect(),
    };
    let listed: BTreeSet<&str> = manifest.files.iter().map(|f| f.name.as_str()).collect();
    let mut needed = vec![PACKET_FILE.to_owned()];
    needed.extend(packet.arms.iter().map(|a| a.raw_file.name.clone()));
    needed.extend(packet.quality.iter().map(|q| q.file.name.clone()));
    if let Some(scenario) = &packet.scenario {
        needed.extend(scenario.arms.iter().map(|a| a.raw_file.name.clone()));
    }
    needed.extend(packet.selftest.file.iter().map(|f| f.name.clone()));
    for name in needed {
        if !listed.contains(name.as_str()) {
            errors.push(format!("manifest.json does not list {name}"));
        }
    }
    for file in &manifest.files {
        let bytes = if file.name == PACKET_FILE {
            packet_bytes.to_vec()
        } else {
            folder.read(&file.name, "listed file")?.1
        };
        check_digest("manifest.json", file, &bytes, errors);
    }
    Ok(folder)
}

/// A file named by the packet, which must sit in the packet's folder.
fn file_path(dir: &Path, name: &str) -> Result<PathBuf, Unreadable> {
    if name.contains(['/', '\\']) || name == ".." || name.is_empty() {
        return Err(Unreadable(format!(
            "file name {name:?} does not name a file beside the packet"
        )));
    }
    Ok(dir.join(name))
}

fn check_digest(who: &str, claimed: &FileDigest, bytes: &[u8], errors: &mut Vec<String>) {
    let actual = FileDigest::of(&claimed.name, bytes);
    if actual.sha256 != claimed.sha256 || actual.bytes != claimed.bytes {
        errors.push(format!(
            "{who}: {} has sha256 {} ({} bytes), listed as {} ({} bytes)",
            claimed.name, actual.sha256, actual.bytes, claimed.sha256, claimed.bytes
        ));
    }
}

fn parse<T: serde::de::DeserializeOwned>(path: &Path, bytes: &[u8]) -> Result<T, Unreadable> {
    serde_json::from_slice(bytes)
        .map_err(|e| Unreadable(format!("{}: corrupt: {e}", path.display())))
}

fn read_raw_files(
    folder: &Folder,
    packet: &Packet,
    errors: &mut Vec<String>,
) -> Result<Vec<(ArmRaw, FileDigest)>, Unreadable> {
    let mut out = Vec::new();
    for arm in &packet.arms {
        let (path, bytes) = folder.read(&arm.raw_file.name, "raw file")?;
        check_digest(&format!("arm {}", arm.arm), &arm.raw_file, &bytes, errors);
        let raw: ArmRaw = parse(&path, &bytes)?;
        if raw.schema != RAW_SCHEMA {
            errors.push(format!(
                "{}: schema {:?}, expected {RAW_SCHEMA}",
                arm.raw_file.name, raw.schema
            ));
        }
        out.push((raw, arm.raw_file.clone()));
    }
    Ok(out)
}

fn read_quality_files(
    folder: &Folder,
    packet: &Packet,
    errors: &mut Vec<String>,
) -> Result<Vec<(ArmQuality, FileDigest)>, Unreadable> {
    let mut out = Vec::new();
    for entry in &packet.quality {
        let (path, bytes) = folder.read(&entry.file.name, "quality file")?;
        check_digest(
            &format!("quality of {}", entry.arm),
            &entry.file,
            &bytes,
            errors,
        );
        let q: ArmQuality = parse(&path, &bytes)?;
        if q.schema != QUALITY_SCHEMA {
            errors.push(format!(
                "{}: schema {:?}, expected {QUALITY_SCHEMA}",
                entry.file.name, q.schema
            ));
        }
        out.push((q, entry.file.clone()));
    }
    Ok(out)
}

fn read_scenario_files(
    folder: &Folder,
    scenario: &Scenario,
    errors: &mut Vec<String>,
) -> Result<Vec<(ScenarioRaw, FileDigest)>, Unreadable> {
    let mut out = Vec::new();
    for arm in &scenario.arms {
        let (path, bytes) = folder.read(&arm.raw_file.name, "scenario raw file")?;
        check_digest(
            &format!("scenario arm {}", arm.arm),
            &arm.raw_file,
            &bytes,
            errors,
        );
        out.push((parse(&path, &bytes)?, arm.raw_file.clone()));
    }
    Ok(out)
}

/// The scenario against the envelope (its turn-1 prompts are the envelope's, one per agent),
/// and every arm's raw file against the scenario.
fn check_scenario(
    packet: &Packet,
    scenario: &Scenario,
    raws: &[(ScenarioRaw, FileDigest)],
    errors: &mut Vec<String>,
) {
    let (env, spec) = (&packet.envelope, &scenario.spec);
    let fields = [
        ("n_prompts (agents)", env.n_prompts, spec.agents),
        ("n_ctx (turn-1 prompt)", env.n_ctx, spec.prompt_tokens(1)),
        ("n_out", env.n_out, spec.n_out),
    ];
    for (what, envelope, scenario) in fields {
        if envelope != scenario {
            errors.push(format!(
                "envelope {what} is {envelope}, the scenario's is {scenario}"
            ));
        }
    }
    if spec.agents == 0 || spec.turns == 0 || spec.preamble_tokens == 0 || spec.n_out == 0 {
        errors.push(format!(
            "scenario of {} agents, {} turns, preamble {}, n_out {}: each must be at least 1",
            spec.agents, spec.turns, spec.preamble_tokens, spec.n_out
        ));
    }
    let mut names = BTreeSet::new();
    for (raw, digest) in raws {
        let arm = &raw.header.arm;
        if !names.insert(arm.as_str()) || packet.arms.iter().any(|a| &a.arm == arm) {
            errors.push(format!("scenario arm {arm} appears twice"));
        }
        if digest.name != scenario_raw_file_name(arm) {
            errors.push(format!(
                "scenario arm {arm}: raw file {}, expected {}",
                digest.name,
                scenario_raw_file_name(arm)
            ));
        }
        if let Some(e) = weights_without_digest(arm, &raw.header.weights, &raw.status) {
            errors.push(e);
        }
        if raw.header.weights.same_as_envelope && raw.header.weights.sha256 != env.model_sha256 {
            errors.push(format!(
                "scenario arm {arm}: claims the envelope's weights but ran sha256 {}",
                raw.header.weights.sha256
            ));
        }
        errors.extend(check_raw(spec, &env.prompt_sha256, raw));
    }
}

fn check_method(packet: &Packet, errors: &mut Vec<String>) {
    let m = &packet.method;
    if m.percentiles != PERCENTILE_METHOD {
        errors.push(format!(
            "method.percentiles is {:?}; v1 computes {PERCENTILE_METHOD:?}",
            m.percentiles
        ));
    }
    if m.tolerance != TOLERANCE_V1 {
        errors.push(format!(
            "method.tolerance is {:?}; v1 holds requests to {TOLERANCE_V1:?}",
            m.tolerance
        ));
    }
    if m.bootstrap.resamples < MIN_BOOTSTRAP_RESAMPLES {
        errors.push(format!(
            "method.bootstrap.resamples is {}; at least {MIN_BOOTSTRAP_RESAMPLES} are needed",
            m.bootstrap.resamples
        ));
    }
    if packet.arms.is_empty() {
        if packet.scenario.is_none() {
            errors.push("the packet has no arms and no scenario".into());
        }
    } else if !packet.arms.iter().any(|a| a.arm == m.reference_arm) {
        errors.push(format!(
            "method.reference_arm {} is not an arm of the packet",
            m.reference_arm
        ));
    }
}

/// The envelope is self-consistent and every arm ran exactly it.
fn check_envelope(packet: &Packet, raws: &[(ArmRaw, FileDigest)], errors: &mut Vec<String>) {
    let env = &packet.envelope;
    if env.prompt_sha256.len() != env.n_prompts {
        errors.push(format!(
            "envelope lists {} prompt digests for n_prompts {}",
            env.prompt_sha256.len(),
            env.n_prompts
        ));
    }
    let set = prompt_set_sha256(&env.prompt_sha256);
    if set != env.prompt_set_sha256 {
        errors.push(format!(
            "envelope.prompt_set_sha256 is {}, its prompt digests give {set}",
            env.prompt_set_sha256
        ));
    }
    let expected = env.arm_envelope();
    let mut names = BTreeSet::new();
    for (raw, _) in raws {
        let h = &raw.header;
        if !names.insert(h.arm.as_str()) {
            errors.push(format!("arm {} appears twice", h.arm));
        }
        let e = &h.envelope;
        let fields = [
            ("n_ctx", e.n_ctx, expected.n_ctx),
            ("n_out", e.n_out, expected.n_out),
            ("N (n_prompts)", e.n_prompts, expected.n_prompts),
            (
                "warm-up requests",
                e.warmup_requests,
                expected.warmup_requests,
            ),
        ];
        for (what, ran, want) in fields {
            if ran != want {
                errors.push(format!(
                    "arm {}: ran {what} {ran}, the envelope says {want}",
                    h.arm
                ));
            }
        }
        if e.prompt_set_sha256 != expected.prompt_set_sha256 {
            errors.push(format!(
                "arm {}: ran prompt set {}, the envelope's is {}",
                h.arm, e.prompt_set_sha256, expected.prompt_set_sha256
            ));
        }
        if let Some(e) = weights_without_digest(&h.arm, &h.weights, &raw.status) {
            errors.push(e);
        }
        if h.weights.same_as_envelope && h.weights.sha256 != env.model_sha256 {
            errors.push(format!(
                "arm {}: claims the envelope's weights but ran sha256 {}, the model is {}",
                h.arm, h.weights.sha256, env.model_sha256
            ));
        }
        let runtime = Runtime::for_arm(&h.arm);
        if h.runtime != runtime {
            errors.push(format!(
                "arm {}: runtime label {}, must be {}",
                h.arm,
                h.runtime.label(),
                runtime.label()
            ));
        }
    }
}

/// Weights without a digest (`"none"`) are only for an arm skipped for want of them.
fn weights_without_digest(arm: &str, weights: &Weights, status: &ArmStatus) -> Option<String> {
    let skipped = matches!(status, ArmStatus::Skipped { .. });
    (weights.sha256 == "none" && !skipped).then(|| {
        format!("arm {arm}: ran weights without a digest (sha256 \"none\"); only a skipped arm may")
    })
}

/// One arm's status and requests: sequence, prompts, lengths, clocks, and buckets stated as set
/// to 0 holding exactly 0.
fn check_arm(packet: &Packet, raw: &ArmRaw, errors: &mut Vec<String>) {
    let env = &packet.envelope;
    let arm = &raw.header.arm;
    if let Some(kinds) = &raw.header.bucket_methods.kinds {
        for r in &raw.requests {
            for ((name, kind), v) in Buckets::NAMES
                .iter()
                .zip(kinds.values())
                .zip(r.buckets.values())
            {
                if kind == BucketKind::Zero && v != 0.0 {
                    errors.push(format!(
                        "arm {arm}, request {}: bucket {name} is stated as set to 0 but holds {v}",
                        r.index
                    ));
                }
            }
        }
    }
    let counted: Vec<&RequestSample> = raw.counted().collect();
    match &raw.status {
        ArmStatus::Running { .. } => errors.push(format!(
            "arm {arm}: raw file still says running (the run never finished this arm)"
        )),
        ArmStatus::Skipped { .. } if !raw.requests.is_empty() => errors.push(format!(
            "arm {arm}: skipped but holds {} requests",
            raw.requests.len()
        )),
        ArmStatus::Ran => {
            if counted.len() != env.n_prompts {
                errors.push(format!(
                    "arm {arm}: ran {} counted requests, the envelope has N = {}",
                    counted.len(),
                    env.n_prompts
                ));
            }
            let warmups = raw.requests.len() - counted.len();
            if warmups != env.warmup_requests {
                errors.push(format!(
                    "arm {arm}: {warmups} warm-up requests, the envelope says {}",
                    env.warmup_requests
                ));
            }
            let prompts: BTreeSet<usize> = counted.iter().map(|r| r.prompt_index).collect();
            if prompts.len() != counted.len() {
                errors.push(format!("arm {arm}: a prompt was counted twice"));
            }
        }
        _ => {}
    }
    if counted.len() > env.n_prompts {
        errors.push(format!(
            "arm {arm}: {} counted requests, more than N = {}",
            counted.len(),
            env.n_prompts
        ));
    }
    let mut seen_counted = false;
    for (i, r) in raw.requests.iter().enumerate() {
        if r.index != i {
            errors.push(format!(
                "arm {arm}: request at position {i} has index {}",
                r.index
            ));
        }
        if r.warmup && seen_counted {
            errors.push(format!(
                "arm {arm}: warm-up request {i} after a counted one"
            ));
        }
        seen_counted |= !r.warmup;
        for e in check_request(packet, r) {
            errors.push(format!("arm {arm}, request {i}: {e}"));
        }
    }
}

/// One request against the envelope and its own clocks.
fn check_request(packet: &Packet, r: &RequestSample) -> Vec<String> {
    let env = &packet.envelope;
    let tol = &packet.method.tolerance;
    let mut errs = Vec::new();
    match env.prompt_sha256.get(r.prompt_index) {
        None => errs.push(format!(
            "prompt index {} outside the envelope's {} prompts",
            r.prompt_index, env.n_prompts
        )),
        Some(d) if *d != r.prompt_sha256 => errs.push(format!(
            "sent prompt {} but the envelope's prompt {} is {d}",
            r.prompt_sha256, r.prompt_index
        )),
        _ => {}
    }
    if r.token_ids.len() != env.n_out || r.token_times_s.len() != env.n_out {
        errs.push(format!(
            "{} token ids and {} timestamps, the envelope says n_out {}",
            r.token_ids.len(),
            r.token_times_s.len(),
            env.n_out
        ));
    }
    let b = &r.buckets;
    for (name, v) in super::raw::Buckets::NAMES.iter().zip(b.values()) {
        if !v.is_finite() || v < 0.0 {
            errs.push(format!("bucket {name} is {v}"));
        }
    }
    if !(r.wall_s.is_finite() && r.wall_s > 0.0) {
        errs.push(format!("wall clock {}", r.wall_s));
    }
    if b.prefill_s <= 0.0 {
        errs.push("prefill bucket is not positive".into());
    }
    if env.n_out >= 2 && b.decode_s <= 0.0 {
        errs.push("decode bucket is not positive".into());
    }
    if let Err(e) = super::metrics::check_total(b, r.wall_s, tol) {
        errs.push(e);
    }
    errs.extend(check_token_times(r, tol));
    errs
}

/// Timestamps are finite, ordered, inside the request, and agree with TTFT and decode.
fn check_token_times(r: &RequestSample, tol: &Tolerance) -> Vec<String> {
    let t = &r.token_times_s;
    let mut errs = Vec::new();
    let (Some(&first), Some(&last)) = (t.first(), t.last()) else {
        return errs;
    };
    if t.iter().any(|x| !x.is_finite() || *x < 0.0) {
        errs.push("a token timestamp is negative or not finite".into());
    }
    if t.windows(2).any(|w| w[1] < w[0]) {
        errs.push("token timestamps go backwards".into());
    }
    if last > r.wall_s + tol.abs_s + tol.rel * r.wall_s {
        errs.push(format!(
            "last token at {last:.6} s, after the request ended at {:.6} s",
            r.wall_s
        ));
    }
    let ttft = r.buckets.ttft();
    if !tol.allows(ttft, first) {
        errs.push(format!(
            "TTFT (queue + setup + prefill) {ttft:.6} s, first token at {first:.6} s"
        ));
    }
    let span = last - first;
    if !tol.allows(r.buckets.decode_s, span) {
        errs.push(format!(
            "decode bucket {:.6} s, first to last token {span:.6} s",
            r.buckets.decode_s
        ));
    }
    errs
}

/// Quality files: claims recomputed under their rules, rules at their versioned thresholds,
/// parity only between arms on the very same weights.
fn check_quality(
    packet: &Packet,
    qualities: &[(ArmQuality, FileDigest)],
    errors: &mut Vec<String>,
) {
    let same_weights = |arm: &str| {
        packet
            .arms
            .iter()
            .find(|a| a.arm == arm)
            .map(|a| a.weights.same_as_envelope)
    };
    for (q, _) in qualities {
        let who = format!("quality of {}", q.arm);
        if same_weights(&q.arm).is_none() {
            errors.push(format!("{who}: no such arm in the packet"));
        }
        for (i, c) in q.comparisons.iter().enumerate() {
            let who = format!("{who}, comparison {i}");
            let recomputed = summarize(&c.rule, &c.receipts);
            let (claimed, recomputed) = (
                serde_json::to_value(&c.summary).expect("serialises"),
                serde_json::to_value(&recomputed).expect("serialises"),
            );
            diff_json(&format!("{who}: summary"), &claimed, &recomputed, errors);
            check_quality_rule(packet, q, c, &who, errors);
            for w in &c.withheld {
                let receipted = c
                    .receipts
                    .iter()
                    .any(|r| (r.prompt_index, r.position) == (w.prompt_index, w.position));
                if w.prompt_index >= packet.envelope.n_prompts || receipted {
                    errors.push(format!(
                        "{who}: withheld position {} of prompt {} is out of the envelope or has a receipt",
                        w.position, w.prompt_index
                    ));
                }
            }
            for r in &c.receipts {
                if r.prompt_index >= packet.envelope.n_prompts || !r.cosine.is_finite() {
                    errors.push(format!(
                        "{who}: receipt at prompt {} position {} is out of the envelope or not finite",
                        r.prompt_index, r.position
                    ));
                }
            }
        }
    }
}

/// The comparison's rule holds its own thresholds and is claimed against what it may judge:
/// strict token parity against another arm on the same weights or the arm's own-rounding
/// reference (the one `harness threeway` runs for that arm, recomputed here from the arm's
/// engine and device), the cross-engine rounding budget against another arm whose every receipt
/// carries one.
fn check_quality_rule(
    packet: &Packet,
    q: &ArmQuality,
    c: &QualityComparison,
    who: &str,
    errors: &mut Vec<String>,
) {
    let arm_entry = |arm: &str| packet.arms.iter().find(|a| a.arm == arm);
    let same_weights = |arm: &str| arm_entry(arm).map(|a| a.weights.same_as_envelope);
    let against_same_weights_arm = |errors: &mut Vec<String>| match &c.against {
        Against::Arm { arm } => {
            if same_weights(arm) != Some(true) || same_weights(&q.arm) != Some(true) {
                errors.push(format!(
                    "{who}: token parity claimed against {arm}, but the two arms did not both run the envelope's weights"
                ));
            }
        }
        _ => errors.push(format!(
            "{who}: {} is claimed against something other than an arm",
            rule_name(&c.rule)
        )),
    };
    match &c.rule {
        QualityRule::QuantizationCost => {}
        QualityRule::StrictTokenParityV1 { .. } => {
            if c.rule != QualityRule::parity_v1() {
                errors.push(format!(
                    "{who}: strict-token-parity-v1 with thresholds {:?}, v1's are {:?}",
                    c.rule,
                    QualityRule::parity_v1()
                ));
            }
            match &c.against {
                Against::Reference { .. } => errors.push(format!(
                    "{who}: token parity claimed against the unquantized reference; that comparison is quantization-cost"
                )),
                Against::Arm { .. } => against_same_weights_arm(errors),
                Against::OwnRounding { .. } => errors.push(format!(
                    "{who}: an own-rounding reference is judged by own-rounding-parity-v1, not strict-token-parity-v1"
                )),
            }
        }
        QualityRule::OwnRoundingParityV1 { .. } => {
            if c.rule != QualityRule::own_rounding_v1() {
                errors.push(format!(
                    "{who}: own-rounding-parity-v1 with thresholds {:?}, v1's are {:?}",
                    c.rule,
                    QualityRule::own_rounding_v1()
                ));
            }
            match &c.against {
                Against::OwnRounding {
                    weights_sha256,
                    rounds_as,
                    rounding,
                    ..
                } => {
                    if rounds_as != &q.arm || same_weights(&q.arm) != Some(true) {
                        errors.push(format!(
                            "{who}: an own-rounding reference rounding as {rounds_as} judges {}, which must be that arm on the envelope's weights",
                            q.arm
                        ));
                    }
                    if weights_sha256 != &packet.envelope.model_sha256 {
                        errors.push(format!(
                            "{who}: the own-rounding reference ran weights {weights_sha256}, not the envelope's"
                        ));
                    }
                    let max_ids = packet.envelope.n_ctx.saturating_add(q.output_positions);
                    match arm_entry(&q.arm).map(|a| {
                        own_rounding(&a.arm, &a.engine, a.device.as_ref(), max_ids)
                    }) {
                        // The rules, not the `why` prose: it is rendered from the same facts,
                        // and its wording changed after packets were committed (2026-12-05).
                        Some(Ok(plan)) if &plan.rules() == rounding => {}
                        Some(Ok(plan)) => errors.push(format!(
                            "{who}: the own-rounding reference's rounding {rounding:?} is not what {}'s engine and device give: {:?}",
                            q.arm,
                            plan.rules()
                        )),
                        Some(Err(e)) => errors.push(format!(
                            "{who}: an own-rounding reference is claimed for {}, whose engine has none: {e}",
                            q.arm
                        )),
                        None => {}
                    }
                }
                _ => errors.push(format!(
                    "{who}: own-rounding-parity-v1 judges an arm against its own-rounding reference only"
                )),
            }
        }
        QualityRule::CrossEngineWithinRoundingV1 { .. } => {
            if c.rule != QualityRule::cross_engine_v1() {
                errors.push(format!(
                    "{who}: cross-engine-within-rounding-v1 with thresholds {:?}, v1's are {:?}",
                    c.rule,
                    QualityRule::cross_engine_v1()
                ));
            }
            against_same_weights_arm(errors);
        }
    }
}

fn rule_name(rule: &QualityRule) -> &'static str {
    match rule {
        QualityRule::StrictTokenParityV1 { .. } => "strict-token-parity-v1",
        QualityRule::QuantizationCost => "quantization-cost",
        QualityRule::CrossEngineWithinRoundingV1 { .. } => "cross-engine-within-rounding-v1",
        QualityRule::OwnRoundingParityV1 { .. } => "own-rounding-parity-v1",
    }
}

fn check_selftest(packet: &Packet, errors: &mut Vec<String>) {
    let s = &packet.selftest;
    let consistent = match s.status {
        SelftestStatus::Passed => s.checks_run > 0 && s.checks_failed == 0 && s.failures.is_empty(),
        SelftestStatus::Failed => s.checks_failed > 0 && !s.failures.is_empty(),
        SelftestStatus::Skipped => s.reason.is_some(),
    };
    if !consistent {
        errors.push(format!(
            "selftest says {:?} with {} checks run, {} failed, failures {:?}, reason {:?}",
            s.status, s.checks_run, s.checks_failed, s.failures, s.reason
        ));
    }
    if s.checks_failed > s.checks_run {
        errors.push("selftest: more checks failed than ran".into());
    }
}

/// The hardware entry's adapter and bandwidth, and the selftest summary, against what the
/// selftest's own output says.
fn check_selftest_file(
    folder: &Folder,
    packet: &Packet,
    notes: &mut Vec<String>,
    errors: &mut Vec<String>,
) -> Result<(), Unreadable> {
    let Some(file) = &packet.selftest.file else {
        if packet.selftest.status != SelftestStatus::Skipped {
            notes.push(
                "hardware: not checked against the selftest's output (no selftest file: the packet predates it)"
                    .into(),
            );
        }
        return Ok(());
    };
    let (path, bytes) = folder.read(&file.name, "selftest file")?;
    check_digest("selftest", file, &bytes, errors);
    let output: Value = parse(&path, &bytes)?;
    let hw = &packet.hardware;
    let gpu = selftest_raw::gpu_entry(&output["adapter"]);
    let fields = [
        ("adapter", &hw.gpu.adapter, &gpu.adapter),
        ("backend", &hw.gpu.backend, &gpu.backend),
        ("driver", &hw.gpu.driver, &gpu.driver),
        ("driver_info", &hw.gpu.driver_info, &gpu.driver_info),
        ("device_type", &hw.gpu.device_type, &gpu.device_type),
    ];
    for (what, claimed, measured) in fields {
        if claimed != measured {
            errors.push(format!(
                "hardware.gpu.{what} is {claimed:?}, the selftest ran on {measured:?}"
            ));
        }
    }
    let bandwidth = selftest_raw::bandwidth_entry(&output["bandwidth"]);
    diff_json(
        "hardware.bandwidth (against the selftest's output)",
        &serde_json::to_value(&hw.bandwidth).expect("serialises"),
        &serde_json::to_value(&bandwidth).expect("serialises"),
        errors,
    );
    let summary = selftest_raw::summary(&output, Some(file.clone()));
    diff_json(
        "selftest (against its output)",
        &serde_json::to_value(&packet.selftest).expect("serialises"),
        &serde_json::to_value(&summary).expect("serialises"),
        errors,
    );
    Ok(())
}

/// Reports every place where `claimed` and `recomputed` differ (numbers within [`close`]).
fn diff_json(path: &str, claimed: &Value, recomputed: &Value, errors: &mut Vec<String>) {
    match (claimed, recomputed) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                let p = format!("{path}.{k}");
                match (a.get(k), b.get(k)) {
                    (Some(x), Some(y)) => diff_json(&p, x, y, errors),
                    (Some(_), None) => errors.push(format!(
                        "{p}: in the packet, not derivable from the raw files"
                    )),
                    (None, Some(_)) => errors.push(format!("{p}: missing from the packet")),
                    (None, None) => unreachable!("key from one side"),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                diff_json(&format!("{path}[{i}]"), x, y, errors);
            }
        }
        (Value::Number(a), Value::Number(b)) => {
            let (x, y) = (
                a.as_f64().unwrap_or(f64::NAN),
                b.as_f64().unwrap_or(f64::NAN),
            );
            if !close(x, y) {
                errors.push(format!("{path}: packet says {a}, the raw files give {b}"));
            }
        }
        _ if claimed == recomputed => {}
        _ => errors.push(format!(
            "{path}: packet says {}, the raw files give {}",
            short(claimed),
            short(recomputed)
        )),
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 120 {
        format!("{}…", s.chars().take(120).collect::<String>())
    } else {
        s
    }
}

/// `harness validate <packet.json> [--json]`.
#[derive(clap::Args)]
pub struct Args {
    /// The packet (its raw files and manifest sit beside it).
    pub packet: PathBuf,
    /// Print the validation object as JSON (the default prints one line per error).
    #[arg(long)]
    pub json: bool,
}

/// Runs the command; returns the process exit code.
pub fn run(args: &Args) -> i32 {
    let v = validate(&args.packet);
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&v).expect("validation serialises")
        );
    } else if v.valid {
        println!("{}: valid", args.packet.display());
    } else {
        for e in &v.errors {
            eprintln!("{}: {e}", args.packet.display());
        }
        eprintln!(
            "{}: {} ({} errors)",
            args.packet.display(),
            if v.unreadable {
                "unreadable"
            } else {
                "not valid"
            },
            v.errors.len()
        );
    }
    v.exit_code()
}

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;
