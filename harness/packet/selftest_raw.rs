//! `selftest.json`: what `harness selftest --json` printed on the run's machine, kept in the run
//! folder as a raw file of the packet. The packet's hardware entry (adapter, read bandwidth) and
//! its selftest summary are built from it, and `harness validate` builds them again from it.

use super::FileDigest;
use super::comparison::{Bandwidth, Gpu, Selftest, SelftestStatus};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The read bandwidth as the selftest's JSON states it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SelftestBandwidth {
    pub method: String,
    pub bytes_per_pass: u64,
    /// Timed passes with a positive duration.
    pub passes: usize,
    pub best_bytes_per_s: f64,
    pub median_bytes_per_s: f64,
}

/// The hardware entry's GPU from the selftest's (or fak's child's) adapter facts; GPU cores
/// come from the catalog where the OS states them.
pub fn gpu_entry(adapter: &Value) -> Gpu {
    let text = |v: &Value| v.as_str().unwrap_or("unknown").to_string();
    Gpu {
        adapter: text(&adapter["name"]),
        backend: text(&adapter["backend"]),
        driver: text(&adapter["driver"]),
        driver_info: text(&adapter["driver_info"]),
        device_type: text(&adapter["device_type"]),
        cores: None,
    }
}

/// The selftest's measured read bandwidth and how it was measured; none where the selftest was
/// skipped or did not get that far.
pub fn bandwidth_entry(selftest_bandwidth: &Value) -> Option<Bandwidth> {
    let b: SelftestBandwidth = serde_json::from_value(selftest_bandwidth.clone()).ok()?;
    Some(Bandwidth {
        bytes_per_s: b.best_bytes_per_s,
        how: format!(
            "selftest streaming-read kernel (wgsl/read_probe.wgsl), {} bytes read per pass, best of {} timed passes (median {:.1} GB/s), {}",
            b.bytes_per_pass,
            b.passes,
            b.median_bytes_per_s / 1e9,
            b.method
        ),
    })
}

/// The selftest result as the packet states it.
pub fn summary(result: &Value, file: Option<FileDigest>) -> Selftest {
    if let Some(why) = result["skipped"].as_str() {
        return Selftest {
            status: SelftestStatus::Skipped,
            reason: Some(why.into()),
            adapter: "not checked".into(),
            checks_run: 0,
            checks_failed: 0,
            failures: vec![],
            file,
        };
    }
    let checks = result["checks"].as_array().cloned().unwrap_or_default();
    let kernels = result["kernels"].as_array().cloned().unwrap_or_default();
    let failed = |c: &&Value| c["pass"] != Value::Bool(true);
    let failures: Vec<String> = checks
        .iter()
        .filter(failed)
        .map(|c| format!("{} {} {}", c["model"], c["paths"], c["check"]))
        .chain(
            kernels
                .iter()
                .filter(failed)
                .map(|k| format!("kernel {} {} {}", k["kernel"], k["variant"], k["case"])),
        )
        .map(|f| f.replace('"', ""))
        .collect();
    let passed = result["pass"] == Value::Bool(true) && !checks.is_empty();
    Selftest {
        status: if passed {
            SelftestStatus::Passed
        } else {
            SelftestStatus::Failed
        },
        reason: (!passed).then(|| {
            result["error"]
                .as_str()
                .unwrap_or("checks failed")
                .to_string()
        }),
        adapter: result["adapter"]["name"]
            .as_str()
            .unwrap_or("unknown")
            .into(),
        checks_run: (checks.len() + kernels.len()) as u64,
        checks_failed: failures.len() as u64,
        failures,
        file,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hardware entry reads the selftest's own JSON: a renamed field would make it say
    /// "null bytes" (as the first H200 packet did) rather than fail to build.
    #[test]
    fn the_bandwidth_entry_states_the_selftests_measurement() {
        let measured = SelftestBandwidth {
            method: "timestamp queries".into(),
            bytes_per_pass: 1 << 30,
            passes: 20,
            best_bytes_per_s: 4.4e12,
            median_bytes_per_s: 4.3e12,
        };
        let entry = bandwidth_entry(&serde_json::to_value(&measured).unwrap()).unwrap();
        assert_eq!(entry.bytes_per_s, 4.4e12);
        for part in [
            "wgsl/read_probe.wgsl",
            "1073741824 bytes",
            "best of 20",
            "4300.0 GB/s",
            "timestamp queries",
        ] {
            assert!(entry.how.contains(part), "{part} in {}", entry.how);
        }
        assert!(!entry.how.contains("null"), "{}", entry.how);
        let probe = concat!(env!("CARGO_MANIFEST_DIR"), "/../wgsl/read_probe.wgsl");
        assert!(std::path::Path::new(probe).exists(), "{probe}");
        assert!(bandwidth_entry(&Value::Null).is_none());
    }
}
