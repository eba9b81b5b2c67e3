//! The hardware catalog: what a reader of benchmarks expects to know about the machine, as the
//! OS states it. macOS: `sysctl` (machine model, chip, core counts, memory), `sw_vers` (version
//! and build), `system_profiler SPDisplaysDataType` (GPU cores, Metal family). Linux: DMI (machine
//! model), `/proc/cpuinfo` (chip, physical cores), `/etc/os-release` and `uname` (OS, kernel),
//! `nvidia-smi` (GPU, driver, CUDA version) and `vulkaninfo --summary` (Vulkan version) where
//! installed. Everywhere: the wgpu adapter's driver. A key the OS does not answer is left out,
//! never guessed.

use serde_json::Value;
use std::collections::BTreeMap;
use std::process::Command;

/// The catalog of this machine; `adapter` is the selftest's (or fak's child's) adapter facts.
pub fn read(adapter: &Value) -> BTreeMap<String, String> {
    let mut c = BTreeMap::new();
    let mut put = |key: &str, value: Option<String>| {
        if let Some(v) = value
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
        {
            c.insert(key.to_string(), v);
        }
    };
    if let (Some(driver), Some(info)) =
        (adapter["driver"].as_str(), adapter["driver_info"].as_str())
    {
        put("gpu_driver", Some(format!("{driver} {info}")));
    }
    if cfg!(target_os = "macos") {
        put("machine_model", sysctl("hw.model"));
        put("chip", sysctl("machdep.cpu.brand_string"));
        put("cpu_cores", mac_cores());
        put("os_version", run("sw_vers", &["-productVersion"]));
        put("os_build", run("sw_vers", &["-buildVersion"]));
        put("kernel", run("uname", &["-rv"]));
        let gpu = run("system_profiler", &["SPDisplaysDataType", "-json"])
            .and_then(|text| serde_json::from_str::<Value>(&text).ok())
            .map(|v| v["SPDisplaysDataType"][0].clone())
            .unwrap_or(Value::Null);
        put("gpu", gpu["sppci_model"].as_str().map(str::to_string));
        put("gpu_cores", gpu["sppci_cores"].as_str().map(str::to_string));
        put(
            "metal_family",
            gpu["spdisplays_mtlgpufamilysupport"]
                .as_str()
                .map(|f| f.trim_start_matches("spdisplays_").to_string()),
        );
    } else {
        put("machine_model", dmi_model());
        put("chip", cpuinfo_field("model name"));
        put("cpu_cores", linux_cores());
        put("os_version", os_release());
        put("kernel", run("uname", &["-rv"]));
        if let Some(line) = run(
            "nvidia-smi",
            &[
                "--query-gpu=name,driver_version,memory.total",
                "--format=csv,noheader",
            ],
        ) {
            let first = line.lines().next().unwrap_or_default().to_string();
            let mut parts = first.split(',').map(str::trim);
            put("gpu", parts.next().map(str::to_string));
            put("nvidia_driver", parts.next().map(str::to_string));
            put("gpu_memory", parts.next().map(str::to_string));
            put(
                "cuda",
                run("nvidia-smi", &[]).and_then(|t| after(&t, "CUDA Version:")),
            );
        }
        if let Some(summary) = run("vulkaninfo", &["--summary"]) {
            put("vulkan", after(&summary, "Vulkan Instance Version:"));
        }
    }
    c
}

/// The word after `key` in `text` (`CUDA Version: 12.8 |` → `12.8`).
fn after(text: &str, key: &str) -> Option<String> {
    let rest = &text[text.find(key)? + key.len()..];
    rest.split_whitespace().next().map(str::to_string)
}

fn run(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn sysctl(key: &str) -> Option<String> {
    run("sysctl", &["-n", key])
}

fn mac_cores() -> Option<String> {
    let n = |k: &str| sysctl(k).and_then(|s| s.parse::<u32>().ok());
    let mut text = format!("{} physical", n("hw.physicalcpu")?);
    if let (Some(p), Some(e)) = (
        n("hw.perflevel0.physicalcpu"),
        n("hw.perflevel1.physicalcpu"),
    ) {
        text.push_str(&format!(" ({p} performance + {e} efficiency)"));
    }
    if let Some(l) = n("hw.logicalcpu") {
        text.push_str(&format!(", {l} logical"));
    }
    Some(text)
}

fn dmi_model() -> Option<String> {
    let read = |f: &str| std::fs::read_to_string(format!("/sys/devices/virtual/dmi/id/{f}")).ok();
    let vendor = read("sys_vendor").unwrap_or_default();
    let product = read("product_name")?;
    Some(format!("{} {}", vendor.trim(), product.trim()))
}

fn cpuinfo_field(name: &str) -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

/// Physical cores: distinct (physical id, core id) pairs of /proc/cpuinfo.
fn linux_cores() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let mut cores = std::collections::BTreeSet::new();
    let (mut package, mut logical) = (String::new(), 0);
    for line in info.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        match key.trim() {
            "processor" => logical += 1,
            "physical id" => package = value.trim().to_string(),
            "core id" => {
                cores.insert((package.clone(), value.trim().to_string()));
            }
            _ => {}
        }
    }
    Some(match cores.len() {
        0 => format!("{logical} logical"),
        n => format!("{n} physical, {logical} logical"),
    })
}

fn os_release() -> Option<String> {
    let text = std::fs::read_to_string("/etc/os-release").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_word_after_a_key() {
        let smi = "| NVIDIA-SMI 580.159.04   Driver Version: 580.159.04   CUDA Version: 13.0     |";
        assert_eq!(after(smi, "CUDA Version:").as_deref(), Some("13.0"));
        assert_eq!(after(smi, "ROCm Version:"), None);
    }

    /// Whatever this machine is, the catalog states what the OS answers and nothing empty.
    #[test]
    fn the_catalog_holds_no_empty_values() {
        let adapter = serde_json::json!({"driver": "llvmpipe", "driver_info": "Mesa 25"});
        let c = read(&adapter);
        assert_eq!(c["gpu_driver"], "llvmpipe Mesa 25");
        assert!(c.values().all(|v| !v.is_empty()), "{c:?}");
        assert!(c.contains_key("kernel"), "{c:?}");
    }
}
