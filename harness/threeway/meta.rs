//! The packet's fixed parts read from this machine: the hardware entry (OS, CPU, memory, the GPU
//! adapter and its measured bandwidth from selftest, the catalog), the toolchain.

use super::catalog;
use fak_harness::packet::selftest_raw;
use fak_harness::packet::{Cores, Gpu, Hardware};
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::Command;

/// The catalog entry; `adapter` is the selftest's (or fak's child's) adapter facts.
pub fn hardware(adapter: &Value, bandwidth: &Value) -> Hardware {
    let catalog = catalog::read(adapter);
    Hardware {
        host: host_name(),
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
            cores: catalog.get("gpu_cores").and_then(|c| c.parse().ok()),
            ..selftest_raw::gpu_entry(adapter)
        },
        bandwidth: selftest_raw::bandwidth_entry(bandwidth),
        catalog,
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

/// The machine's host name.
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match std::str::from_utf8(&buf[..end]) {
        Ok(name) if ok && !name.is_empty() => name.to_string(),
        _ => "unknown-host".into(),
    }
}

/// UTC now as `YYYYMMDDTHHMMSSZ` (folder names).
pub fn utc_stamp() -> String {
    utc_now().replace(['-', ':'], "")
}

/// UTC now as ISO 8601 `YYYY-MM-DDTHH:MM:SSZ` (days from the civil calendar algorithm).
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
