//! [`PacketWriter`]: writes a run folder as the run goes.
//!
//! Each arm's `<arm>-raw.json` is rewritten (to a temporary file, synced, then renamed over the
//! old one) after every sample, fault and restart, so the file on disk is always complete JSON
//! holding everything measured so far: if the harness dies, nothing measured is lost, and the
//! arm's status still says `running`. [`PacketWriter::finish`] builds `packet.json` from what was
//! recorded and writes `manifest.json` last.
//!
//! ```text
//! let mut writer = PacketWriter::create(&out_dir)?;
//! let mut arm = writer.begin_arm(header)?;      // <arm>-raw.json, state "running"
//! arm.record(sample)?;                          // once per request, warm-up first
//! arm.fault(fault)?; arm.restarted()?;          // an engine died and was started again
//! arm.finish()?;                                // state "ran" (or "faulted")
//! writer.skip_arm(header, "llama-server not on PATH")?;
//! writer.write_quality(quality)?;               // <arm>-quality.json after the timing pass
//! let packet = writer.finish(meta)?;            // packet.json + manifest.json
//! ```

use super::quality::ArmQuality;
use super::raw::{
    ArmHeader, ArmRaw, ArmStatus, Fault, MemoryPeak, PlainClient, RequestSample, Runtime,
};
use super::scenario::{
    SCENARIO_RAW_SCHEMA, ScenarioArmHeader, ScenarioRaw, ScenarioSpec, TurnSample, build_scenario,
    scenario_raw_file_name,
};
use super::summary::{PacketMeta, build_packet};
use super::{
    FileDigest, MANIFEST_FILE, MANIFEST_SCHEMA, Manifest, PACKET_FILE, Packet, QUALITY_SCHEMA,
    RAW_SCHEMA, quality_file_name, raw_file_name,
};
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("writing {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("encoding {name}: {source}")]
    Json {
        name: String,
        source: serde_json::Error,
    },
    #[error("arm {arm}: {problem}")]
    Arm { arm: String, problem: String },
}

/// Writes one run folder: raw files as samples arrive, then the packet and manifest.
pub struct PacketWriter {
    dir: PathBuf,
    /// Arms begun, finished or not (a finished arm is also in `arms`).
    begun: Vec<String>,
    arms: Vec<(ArmRaw, FileDigest)>,
    quality: Vec<(ArmQuality, FileDigest)>,
    /// The scenario the run measures beside (or instead of) the envelope, and its arms.
    scenario: Option<ScenarioSpec>,
    scenario_arms: Vec<(ScenarioRaw, FileDigest)>,
    /// Other files of the run the manifest lists (the selftest's output, `command.txt`).
    files: Vec<FileDigest>,
}

impl PacketWriter {
    /// Creates the folder (and its parents) if needed.
    pub fn create(dir: &Path) -> Result<Self, WriteError> {
        std::fs::create_dir_all(dir).map_err(|source| WriteError::Io {
            path: dir.to_owned(),
            source,
        })?;
        Ok(PacketWriter {
            dir: dir.to_owned(),
            begun: Vec::new(),
            arms: Vec::new(),
            quality: Vec::new(),
            scenario: None,
            scenario_arms: Vec::new(),
            files: Vec::new(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Starts an arm: writes its raw file with no samples and state `running`.
    pub fn begin_arm(&mut self, header: ArmHeader) -> Result<ArmRecorder<'_>, WriteError> {
        self.check_new_arm(&header)?;
        self.begun.push(header.arm.clone());
        let raw = ArmRaw {
            schema: RAW_SCHEMA.to_owned(),
            header,
            status: ArmStatus::Running {
                faults: Vec::new(),
                restarts: 0,
            },
            memory: None,
            requests: Vec::new(),
            plain_client: None,
        };
        let mut recorder = ArmRecorder { writer: self, raw };
        recorder.save()?;
        Ok(recorder)
    }

    /// Records an arm that could not run (engine not installed, …) with the reason.
    pub fn skip_arm(&mut self, header: ArmHeader, reason: &str) -> Result<(), WriteError> {
        self.check_new_arm(&header)?;
        self.begun.push(header.arm.clone());
        let raw = ArmRaw {
            schema: RAW_SCHEMA.to_owned(),
            header,
            status: ArmStatus::Skipped {
                reason: reason.to_owned(),
            },
            memory: None,
            requests: Vec::new(),
            plain_client: None,
        };
        let digest = self.write_json(&raw_file_name(&raw.header.arm), &raw)?;
        self.arms.push((raw, digest));
        Ok(())
    }

    /// Writes `<arm>-quality.json` (schema filled in) for an arm already finished or skipped.
    pub fn write_quality(&mut self, mut quality: ArmQuality) -> Result<(), WriteError> {
        if !self
            .arms
            .iter()
            .any(|(raw, _)| raw.header.arm == quality.arm)
        {
            return Err(arm_error(
                &quality.arm,
                "quality written for an arm never recorded",
            ));
        }
        if self.quality.iter().any(|(q, _)| q.arm == quality.arm) {
            return Err(arm_error(&quality.arm, "quality written twice"));
        }
        quality.schema = QUALITY_SCHEMA.to_owned();
        let digest = self.write_json(&quality_file_name(&quality.arm), &quality)?;
        self.quality.push((quality, digest));
        Ok(())
    }

    /// Writes a file of the run beside the raw files (the selftest's output, `command.txt`);
    /// the manifest lists it with its digest.
    pub fn write_file(&mut self, name: &str, bytes: &[u8]) -> Result<FileDigest, WriteError> {
        write_atomically(&self.dir.join(name), bytes)?;
        let digest = FileDigest::of(name, bytes);
        self.files.retain(|f| f.name != name);
        self.files.push(digest.clone());
        Ok(digest)
    }

    /// Builds and writes `packet.json` from everything recorded, then `manifest.json`. Every
    /// begun arm must have been finished (after a fault too: [`ArmRecorder::finish`] records it
    /// as `faulted`).
    pub fn finish(self, meta: PacketMeta) -> Result<Packet, WriteError> {
        let finished = |name: &String| {
            self.arms.iter().any(|(raw, _)| &raw.header.arm == name)
                || self
                    .scenario_arms
                    .iter()
                    .any(|(raw, _)| &raw.header.arm == name)
        };
        if let Some(open) = self.begun.iter().find(|name| !finished(name)) {
            return Err(arm_error(
                open,
                "begun but never finished: call ArmRecorder::finish (a fault included)",
            ));
        }
        let expected = meta.envelope.arm_envelope();
        for (raw, _) in &self.arms {
            if raw.header.envelope != expected {
                return Err(arm_error(
                    &raw.header.arm,
                    &format!(
                        "ran envelope {:?}, the packet's is {expected:?}",
                        raw.header.envelope
                    ),
                ));
            }
        }
        let mut packet = build_packet(meta, &self.arms, &self.quality);
        packet.scenario = self
            .scenario
            .clone()
            .map(|spec| build_scenario(spec, &self.scenario_arms));
        let packet_digest = self.write_json(PACKET_FILE, &packet)?;
        let mut files: Vec<FileDigest> = self.arms.iter().map(|(_, d)| d.clone()).collect();
        files.extend(self.quality.iter().map(|(_, d)| d.clone()));
        files.extend(self.scenario_arms.iter().map(|(_, d)| d.clone()));
        files.extend(self.files.iter().cloned());
        files.push(packet_digest);
        let manifest = Manifest {
            schema: MANIFEST_SCHEMA.to_owned(),
            files,
        };
        self.write_json(MANIFEST_FILE, &manifest)?;
        Ok(packet)
    }

    /// Declares the scenario this run measures; its arms follow with
    /// [`PacketWriter::begin_scenario_arm`] and the packet gets its `scenario` section.
    pub fn set_scenario(&mut self, spec: ScenarioSpec) {
        self.scenario = Some(spec);
    }

    /// Starts a scenario arm: writes `multi-agent-<arm>-raw.json` with no turns, `running`.
    pub fn begin_scenario_arm(
        &mut self,
        header: ScenarioArmHeader,
    ) -> Result<ScenarioRecorder<'_>, WriteError> {
        let raw = self.new_scenario_raw(
            header,
            ArmStatus::Running {
                faults: Vec::new(),
                restarts: 0,
            },
        )?;
        let mut recorder = ScenarioRecorder { writer: self, raw };
        recorder.save()?;
        Ok(recorder)
    }

    /// Records a scenario arm that could not run, with the reason.
    pub fn skip_scenario_arm(
        &mut self,
        header: ScenarioArmHeader,
        reason: &str,
    ) -> Result<(), WriteError> {
        let raw = self.new_scenario_raw(
            header,
            ArmStatus::Skipped {
                reason: reason.to_owned(),
            },
        )?;
        let digest = self.write_json(&scenario_raw_file_name(&raw.header.arm), &raw)?;
        self.scenario_arms.push((raw, digest));
        Ok(())
    }

    fn new_scenario_raw(
        &mut self,
        header: ScenarioArmHeader,
        status: ArmStatus,
    ) -> Result<ScenarioRaw, WriteError> {
        let Some(spec) = self.scenario.clone() else {
            return Err(arm_error(&header.arm, "a scenario arm before set_scenario"));
        };
        if self.begun.contains(&header.arm) {
            return Err(arm_error(&header.arm, "recorded twice"));
        }
        self.begun.push(header.arm.clone());
        Ok(ScenarioRaw {
            schema: SCENARIO_RAW_SCHEMA.to_owned(),
            header,
            spec,
            status,
            memory: None,
            warmup: None,
            turns: Vec::new(),
        })
    }

    fn check_new_arm(&self, header: &ArmHeader) -> Result<(), WriteError> {
        if self
            .arms
            .iter()
            .any(|(raw, _)| raw.header.arm == header.arm)
        {
            return Err(arm_error(&header.arm, "recorded twice"));
        }
        let runtime = Runtime::for_arm(&header.arm);
        if header.runtime != runtime {
            return Err(arm_error(
                &header.arm,
                &format!("runtime label must be {runtime:?}"),
            ));
        }
        Ok(())
    }

    /// Serialises `value` to `<dir>/<name>` atomically and returns its digest.
    fn write_json(&self, name: &str, value: &impl Serialize) -> Result<FileDigest, WriteError> {
        let bytes = serde_json::to_vec_pretty(value).map_err(|source| WriteError::Json {
            name: name.to_owned(),
            source,
        })?;
        write_atomically(&self.dir.join(name), &bytes)?;
        Ok(FileDigest::of(name, &bytes))
    }
}

/// One arm in progress; every call rewrites its raw file.
pub struct ArmRecorder<'w> {
    writer: &'w mut PacketWriter,
    raw: ArmRaw,
}

impl ArmRecorder<'_> {
    /// The index the next request gets (samples are recorded in order, warm-up first).
    pub fn next_index(&self) -> usize {
        self.raw.requests.len()
    }

    /// The samples recorded so far.
    pub fn samples(&self) -> &[RequestSample] {
        &self.raw.requests
    }

    /// Adds one request's sample; its index must be [`Self::next_index`].
    pub fn record(&mut self, sample: RequestSample) -> Result<(), WriteError> {
        if sample.index != self.next_index() {
            return Err(arm_error(
                &self.raw.header.arm,
                &format!(
                    "sample index {} recorded where {} was next",
                    sample.index,
                    self.next_index()
                ),
            ));
        }
        self.raw.requests.push(sample);
        self.save().map(drop)
    }

    /// Records a fault of the engine (the samples before it stay).
    pub fn fault(&mut self, fault: Fault) -> Result<(), WriteError> {
        if let ArmStatus::Running { faults, .. } = &mut self.raw.status {
            faults.push(fault);
        }
        self.save().map(drop)
    }

    /// Records that the engine was started again after a fault.
    pub fn restarted(&mut self) -> Result<(), WriteError> {
        if let ArmStatus::Running { restarts, .. } = &mut self.raw.status {
            *restarts += 1;
        }
        self.save().map(drop)
    }

    /// Records the engine's peak memory.
    pub fn set_memory(&mut self, memory: MemoryPeak) -> Result<(), WriteError> {
        self.raw.memory = Some(memory);
        self.save().map(drop)
    }

    /// Records what a plain client measured against the arm's server.
    pub fn set_plain_client(&mut self, plain: PlainClient) -> Result<(), WriteError> {
        self.raw.plain_client = Some(plain);
        self.save().map(drop)
    }

    /// Closes the arm: `ran` without faults, else `faulted` with them and the restart count.
    pub fn finish(mut self) -> Result<(), WriteError> {
        let status = std::mem::replace(&mut self.raw.status, ArmStatus::Ran);
        if let ArmStatus::Running { faults, restarts } = status
            && !faults.is_empty()
        {
            self.raw.status = ArmStatus::Faulted { faults, restarts };
        }
        let digest = self.save()?;
        self.writer.arms.push((self.raw, digest));
        Ok(())
    }

    fn save(&mut self) -> Result<FileDigest, WriteError> {
        self.writer
            .write_json(&raw_file_name(&self.raw.header.arm), &self.raw)
    }
}

/// One scenario arm in progress; every call rewrites its raw file.
pub struct ScenarioRecorder<'w> {
    writer: &'w mut PacketWriter,
    raw: ScenarioRaw,
}

impl ScenarioRecorder<'_> {
    pub fn record_warmup(&mut self, sample: TurnSample) -> Result<(), WriteError> {
        self.raw.warmup = Some(sample);
        self.save().map(drop)
    }

    /// Adds one agent's turn, in the order answers arrive.
    pub fn record(&mut self, sample: TurnSample) -> Result<(), WriteError> {
        self.raw.turns.push(sample);
        self.save().map(drop)
    }

    pub fn fault(&mut self, fault: Fault) -> Result<(), WriteError> {
        if let ArmStatus::Running { faults, .. } = &mut self.raw.status {
            faults.push(fault);
        }
        self.save().map(drop)
    }

    pub fn set_memory(&mut self, memory: MemoryPeak) -> Result<(), WriteError> {
        self.raw.memory = Some(memory);
        self.save().map(drop)
    }

    /// Closes the arm: `ran` without faults, else `faulted` with them.
    pub fn finish(mut self) -> Result<(), WriteError> {
        let status = std::mem::replace(&mut self.raw.status, ArmStatus::Ran);
        if let ArmStatus::Running { faults, restarts } = status
            && !faults.is_empty()
        {
            self.raw.status = ArmStatus::Faulted { faults, restarts };
        }
        let digest = self.save()?;
        self.writer.scenario_arms.push((self.raw, digest));
        Ok(())
    }

    fn save(&mut self) -> Result<FileDigest, WriteError> {
        self.writer
            .write_json(&scenario_raw_file_name(&self.raw.header.arm), &self.raw)
    }
}

fn arm_error(arm: &str, problem: &str) -> WriteError {
    WriteError::Arm {
        arm: arm.to_owned(),
        problem: problem.to_owned(),
    }
}

/// Writes `<path>.tmp`, syncs it and renames it over `path`: readers see the old or the new
/// file whole, never half of one.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    let io = |source| WriteError::Io {
        path: path.to_owned(),
        source,
    };
    let tmp = path.with_extension("json.tmp");
    let mut file = std::fs::File::create(&tmp).map_err(io)?;
    file.write_all(bytes).map_err(io)?;
    file.sync_data().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::testkit::{self, Scratch};
    use crate::packet::{NATIVE_ARM, sha256_hex};

    fn read_raw(dir: &Path, arm: &str) -> ArmRaw {
        serde_json::from_slice(&std::fs::read(dir.join(raw_file_name(arm))).unwrap()).unwrap()
    }

    #[test]
    fn raw_file_holds_every_sample_so_far_when_the_run_dies() {
        let scratch = Scratch::new("dies");
        let mut writer = PacketWriter::create(scratch.path()).unwrap();
        let samples = testkit::samples(4000.0, 0.01, 1);
        {
            let mut arm = writer.begin_arm(testkit::header(NATIVE_ARM)).unwrap();
            assert!(read_raw(scratch.path(), NATIVE_ARM).requests.is_empty());
            arm.record(samples[0].clone()).unwrap();
            arm.record(samples[1].clone()).unwrap();
            arm.fault(Fault {
                request_index: Some(2),
                what: "exit status 139".into(),
                stderr_tail: None,
            })
            .unwrap();
            // The harness "dies" here: the recorder is dropped without finish.
        }
        let raw = read_raw(scratch.path(), NATIVE_ARM);
        assert_eq!(raw.requests, samples[..2]);
        match raw.status {
            ArmStatus::Running { faults, restarts } => {
                assert_eq!((faults.len(), restarts), (1, 0));
            }
            other => panic!("status {other:?}"),
        }
        assert!(!scratch.path().join("fak-native-raw.json.tmp").exists());
    }

    #[test]
    fn a_faulted_arm_keeps_its_samples_faults_and_restarts() {
        let scratch = Scratch::new("faulted");
        let mut writer = PacketWriter::create(scratch.path()).unwrap();
        let mut arm = writer.begin_arm(testkit::header("llama.cpp")).unwrap();
        let samples = testkit::samples(3000.0, 0.012, 2);
        arm.record(samples[0].clone()).unwrap();
        arm.fault(Fault {
            request_index: Some(1),
            what: "llama-server exited".into(),
            stderr_tail: Some("oom".into()),
        })
        .unwrap();
        arm.restarted().unwrap();
        arm.record(samples[1].clone()).unwrap();
        arm.finish().unwrap();
        let raw = read_raw(scratch.path(), "llama.cpp");
        assert_eq!(raw.requests.len(), 2);
        assert!(
            matches!(raw.status, ArmStatus::Faulted { ref faults, restarts: 1 } if faults.len() == 1)
        );
    }

    #[test]
    fn finish_writes_packet_and_a_manifest_of_true_digests() {
        let scratch = Scratch::new("finish");
        let packet = testkit::write_run(scratch.path());
        let manifest: Manifest =
            serde_json::from_slice(&std::fs::read(scratch.path().join(MANIFEST_FILE)).unwrap())
                .unwrap();
        let names: Vec<&str> = manifest.files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "fak-native-raw.json",
                "llama.cpp-raw.json",
                "mlx-raw.json",
                "fak-native-quality.json",
                "packet.json"
            ]
        );
        for f in &manifest.files {
            let bytes = std::fs::read(scratch.path().join(&f.name)).unwrap();
            assert_eq!(
                (f.sha256.as_str(), f.bytes),
                (sha256_hex(&bytes).as_str(), bytes.len() as u64),
                "{}",
                f.name
            );
        }
        let on_disk: Packet =
            serde_json::from_slice(&std::fs::read(scratch.path().join(PACKET_FILE)).unwrap())
                .unwrap();
        assert_eq!(on_disk, packet);
        assert_eq!(packet.arms.len(), 3);
        assert_eq!(packet.arms[0].raw_file, manifest.files[0]);
        // The quality file's digest in the packet is the file's.
        assert_eq!(packet.quality[0].file, manifest.files[3]);
        let text = std::fs::read_to_string(scratch.path().join(PACKET_FILE)).unwrap();
        assert!(!text.contains("logits\""), "no logits in the packet");
    }

    #[test]
    fn a_skipped_arm_is_recorded_with_its_reason() {
        let scratch = Scratch::new("skipped");
        let mut writer = PacketWriter::create(scratch.path()).unwrap();
        writer
            .skip_arm(testkit::header("mlx"), "python3 cannot import mlx_lm")
            .unwrap();
        let raw = read_raw(scratch.path(), "mlx");
        assert_eq!(
            raw.status,
            ArmStatus::Skipped {
                reason: "python3 cannot import mlx_lm".into()
            }
        );
    }

    #[test]
    fn writer_refuses_mislabelled_duplicate_or_out_of_order_arms() {
        let scratch = Scratch::new("refuses");
        let mut writer = PacketWriter::create(scratch.path()).unwrap();
        let mut native_as_reference = testkit::header(NATIVE_ARM);
        native_as_reference.runtime = Runtime::Reference;
        let err = writer.begin_arm(native_as_reference).err().unwrap();
        assert!(err.to_string().contains("runtime label"), "{err}");
        {
            let mut arm = writer.begin_arm(testkit::header("llama.cpp")).unwrap();
            let mut s = testkit::samples(3000.0, 0.01, 1)[0].clone();
            s.index = 3;
            let err = arm.record(s).unwrap_err();
            assert!(err.to_string().contains("sample index 3"), "{err}");
            arm.finish().unwrap();
        }
        let err = writer
            .skip_arm(testkit::header("llama.cpp"), "x")
            .unwrap_err();
        assert!(err.to_string().contains("recorded twice"), "{err}");
        let mut q = testkit::fak_quality();
        q.arm = "nobody".into();
        assert!(writer.write_quality(q).is_err());
    }

    #[test]
    fn finish_refuses_an_arm_left_unfinished() {
        let scratch = Scratch::new("unfinished");
        let mut writer = PacketWriter::create(scratch.path()).unwrap();
        drop(writer.begin_arm(testkit::header("llama.cpp")).unwrap());
        let err = writer.finish(testkit::meta()).unwrap_err();
        assert!(
            err.to_string().contains("begun but never finished"),
            "{err}"
        );
    }

    #[test]
    fn finish_refuses_an_arm_that_ran_another_envelope() {
        let scratch = Scratch::new("envelope");
        let mut writer = PacketWriter::create(scratch.path()).unwrap();
        let mut header = testkit::header("llama.cpp");
        header.envelope.n_ctx += 1;
        writer.begin_arm(header).unwrap().finish().unwrap();
        let err = writer.finish(testkit::meta()).unwrap_err();
        assert!(err.to_string().contains("ran envelope"), "{err}");
    }
}
