//! The packet's fixed parts read from this machine: the hardware catalog entry (OS, CPU, memory,
//! the GPU adapter and its measured bandwidth from selftest), the toolchain, the selftest verdict.

use fak_harness::packet::{Bandwidth, Cores, Gpu, Hardware, Selftest, SelftestStatus};
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::Command;

/// The catalog entry; `adapter` is the selftest's (or fak's child's) adapter facts.
pub fn hardware(adapter: &Value, bandwidth: &Value) -> Hardware {
    let text = |v: &Value| v.as_str().unwrap_or("unknown").to_string();
    Hardware {
        host: super::models::host_name(),
        cpu_model: cpu_model(),
        cores: Cores {
            logical: std::thread::available_parallelism().map_or(0, |n| n.get() as u32),
            physical: sysctl("hw.physicalcpu").and_then(|s| s.parse().ok()),
            performance: sysctl("hw.perflevel0.physicalcpu").and_then(|s| s.parse().ok()),
            efficiency: sysctl("hw.perflevel1.physicalcpu").and_then(|s| s.parse().ok()),
        },
        memory_bytes: memory_bytes(),
        os: command_line("uname", &["-srm"]).unwrap_or_else(|| std::env::consts::OS.into()),
        gpu: Gpu {
            adapter: text(&adapter["name"]),
            backend: text(&adapter["backend"]),
            driver: text(&adapter["driver"]),
            driver_info: text(&adapter["driver_info"]),
            device_type: text(&adapter["device_type"]),
            cores: None,
        },
        bandwidth: bandwidth["best_bytes_per_s"].as_f64().map(|bytes_per_s| Bandwidth {
            bytes_per_s,
            how: format!(
                "selftest streaming-read kernel (wgsl/read_bandwidth.wgsl), {} bytes × {} dispatches per sample, best of {} samples, {}",
                bandwidth["bytes_per_dispatch"],
                bandwidth["dispatches_per_sample"],
                bandwidth["samples"],
                text(&bandwidth["method"])
            ),
        }),
    }
}

/// The selftest result as the packet states it.
pub fn selftest(result: &Value) -> Selftest {
    if let Some(why) = result["skipped"].as_str() {
        return Selftest {
            status: SelftestStatus::Skipped,
            reason: Some(why.into()),
            adapter: "not checked".into(),
            checks_run: 0,
            checks_failed: 0,
            failures: vec![],
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
    }
}

/// rustc and cargo versions where they are on PATH, and fak's own.
pub fn toolchain() -> BTreeMap<String, String> {
    let mut out = BTreeMap::from([("fak".to_string(), env!("CARGO_PKG_VERSION").to_string())]);
    for tool in ["rustc", "cargo"] {
        if let Some(v) = command_line(tool, &["--version"]) {
            out.insert(tool.into(), v);
        }
    }
    out
}

fn command_line(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn sysctl(key: &str) -> Option<String> {
    cfg!(target_os = "macos")
        .then(|| command_line("sysctl", &["-n", key]))
        .flatten()
}

fn cpu_model() -> String {
    if let Some(model) = sysctl("machdep.cpu.brand_string") {
        return model;
    }
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.into())
}

fn memory_bytes() -> u64 {
    if let Some(bytes) = sysctl("hw.memsize").and_then(|s| s.parse().ok()) {
        return bytes;
    }
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib * 1024)
        })
        .unwrap_or(0)
}
