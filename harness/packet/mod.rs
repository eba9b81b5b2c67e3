//! The comparison packet: its types, writer, metrics, validator and JSON Schema.
//!
//! A run folder holds
//! - `<arm>-raw.json` ([`ArmRaw`]): every timed request of one arm as measured, written as each
//!   sample arrives;
//! - `<arm>-quality.json` ([`ArmQuality`]): the untimed, teacher-forced quality receipts;
//! - `packet.json` ([`Packet`], `schema: "fak.macbench.comparison.v1"`): the machine, the envelope,
//!   per-arm summaries and per-request decomposition, quality summaries, the selftest result and the
//!   sha256 of every raw file — everything in it can be recomputed from the raw files;
//! - `manifest.json` ([`Manifest`]): every file of the folder with its size and sha256.
//!
//! [`PacketWriter`] writes them; [`validate`] recomputes and checks them. No logits are stored
//! anywhere: the quality receipts keep per-position cosines, greedy ids and margins only.

pub mod comparison;
pub mod metrics;
pub mod physics;
pub mod quality;
pub mod raw;
pub mod rounding;
pub mod scenario;
pub mod selftest_raw;
pub mod summary;
pub mod validate;
pub mod writer;

#[cfg(test)]
pub(crate) mod testkit;

pub use comparison::*;
pub use metrics::{BootstrapSpec, RateDist, TimeDist, Tolerance};
pub use quality::*;
pub use raw::*;
pub use summary::PacketMeta;
pub use writer::{ArmRecorder, PacketWriter, ScenarioRecorder, WriteError};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The packet schema this harness writes and the newest it can validate.
pub const PACKET_SCHEMA: &str = "fak.macbench.comparison.v1";
/// The schema of `<arm>-raw.json`.
pub const RAW_SCHEMA: &str = "fak.macbench.raw.v1";
/// The schema of `<arm>-quality.json`.
pub const QUALITY_SCHEMA: &str = "fak.macbench.quality.v1";
/// The schema of `manifest.json`.
pub const MANIFEST_SCHEMA: &str = "fak.macbench.manifest.v1";
/// The schema of `harness validate`'s answer.
pub const VALIDATION_SCHEMA: &str = "fak.macbench.comparison.validation.v1";

/// The packet's JSON Schema (draft 2020-12), kept beside this module.
pub const PACKET_JSON_SCHEMA: &str = include_str!("schema.json");

pub const PACKET_FILE: &str = "packet.json";
pub const MANIFEST_FILE: &str = "manifest.json";

/// `<arm>-raw.json`.
pub fn raw_file_name(arm: &str) -> String {
    format!("{arm}-raw.json")
}

/// `<arm>-quality.json`.
pub fn quality_file_name(arm: &str) -> String {
    format!("{arm}-quality.json")
}

/// A file of the run folder, named relative to it, with its sha256 (lowercase hex).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDigest {
    pub name: String,
    pub bytes: u64,
    pub sha256: String,
}

impl FileDigest {
    pub fn of(name: &str, contents: &[u8]) -> Self {
        FileDigest {
            name: name.to_owned(),
            bytes: contents.len() as u64,
            sha256: sha256_hex(contents),
        }
    }
}

/// `manifest.json`: every file of the run folder (the packet included) and its digest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub schema: String,
    pub files: Vec<FileDigest>,
}

/// Lowercase hex sha256 of some bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Lowercase hex sha256 of a file, streamed (model weights can be tens of GB).
pub fn sha256_file(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

/// The digest of one prompt: sha256 of its token ids as little-endian u32.
pub fn prompt_sha256(ids: &[u32]) -> String {
    let bytes: Vec<u8> = ids.iter().flat_map(|id| id.to_le_bytes()).collect();
    sha256_hex(&bytes)
}

/// The digest of the prompt set: sha256 of the prompts' hex digests, in order, each followed by
/// a newline (so anyone can recompute it with `sha256sum` over a list).
pub fn prompt_set_sha256(prompt_digests: &[String]) -> String {
    let text: String = prompt_digests.iter().map(|d| format!("{d}\n")).collect();
    sha256_hex(text.as_bytes())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_abc_is_the_fips_vector() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn prompt_digest_hashes_little_endian_ids() {
        // [1, 256] → bytes 01 00 00 00 00 01 00 00.
        assert_eq!(
            prompt_sha256(&[1, 256]),
            sha256_hex(&[1, 0, 0, 0, 0, 1, 0, 0])
        );
        let set = prompt_set_sha256(&["aa".into(), "bb".into()]);
        assert_eq!(set, sha256_hex(b"aa\nbb\n"));
    }
}
