//! Where each arm computed, from what the engine said about itself once started: fak's wgpu
//! adapter, the devices llama-server's build lists (`--list-devices`, in its facts), MLX's
//! default device. The packet records it so that a reader (and `harness validate`'s physical
//! bounds, which hold only an arm on the measured adapter) knows which arms shared a device.

use fak_harness::packet::{ArmDevice, DeviceKind};
use serde_json::Value;

/// The device arm `name` ran on; `adapter` is the name of the adapter the packet's hardware
/// entry describes (the selftest's), when there is one. None when the arm never started.
pub fn of(name: &str, facts: &Value, adapter: Option<&str>) -> Option<ArmDevice> {
    if facts.is_null() {
        return None;
    }
    Some(match name {
        "fak-native" => fak(&facts["adapter"]),
        "llama.cpp" => llama_cpp(&facts["devices"], adapter),
        _ => mlx(facts, adapter),
    })
}

/// fak's own adapter: the one the hardware entry describes whenever fak ran (the selftest
/// opens the same adapter from the same environment; without a selftest the hardware entry is
/// fak's).
fn fak(adapter: &Value) -> ArmDevice {
    let name = adapter["name"].as_str().unwrap_or("unknown adapter");
    let backend = adapter["backend"].as_str().unwrap_or("?");
    let software = adapter["device_type"] == "cpu" || is_software(name);
    ArmDevice {
        name: format!("{name} ({backend})"),
        kind: if software {
            DeviceKind::SoftwareGpu
        } else {
            DeviceKind::Gpu
        },
        selftest_adapter: true,
    }
}

/// llama-server's device list (`--list-devices`, one `NAME: description` per device): none is
/// a CPU-only build, which runs the model on the CPU whatever `-ngl` says.
fn llama_cpp(devices: &Value, adapter: Option<&str>) -> ArmDevice {
    let list: Vec<&str> = devices
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if list.is_empty() {
        return ArmDevice {
            name: "CPU (the llama.cpp build lists no GPU device)".into(),
            kind: DeviceKind::Cpu,
            selftest_adapter: false,
        };
    }
    let joined = list.join("; ");
    ArmDevice {
        kind: if list.iter().all(|d| is_software(d)) {
            DeviceKind::SoftwareGpu
        } else {
            DeviceKind::Gpu
        },
        selftest_adapter: adapter.is_some_and(|a| list.iter().any(|d| same_device(d, a))),
        name: joined,
    }
}

/// MLX's default device: its GPU is the machine's (Metal, or CUDA on Linux), its CPU the CPU.
fn mlx(facts: &Value, adapter: Option<&str>) -> ArmDevice {
    let device = facts["device"].as_str().unwrap_or("unknown");
    let device_name = facts["device_name"].as_str().unwrap_or("");
    if device.contains("cpu") {
        return ArmDevice {
            name: format!("CPU ({device_name})"),
            kind: DeviceKind::Cpu,
            selftest_adapter: false,
        };
    }
    ArmDevice {
        name: format!("{device} {device_name}").trim().to_string(),
        kind: DeviceKind::Gpu,
        selftest_adapter: adapter.is_some_and(|a| same_device(device_name, a)),
    }
}

/// A GPU API implemented on the CPU.
fn is_software(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    [
        "llvmpipe",
        "lavapipe",
        "swiftshader",
        "basic render",
        "softpipe",
    ]
    .iter()
    .any(|s| n.contains(s))
}

/// One device named two ways (`CUDA0: NVIDIA H200 (143166 MiB, …)` and `NVIDIA H200`).
fn same_device(description: &str, adapter: &str) -> bool {
    let (d, a) = (
        description.to_ascii_lowercase(),
        adapter.to_ascii_lowercase(),
    );
    !a.is_empty() && !d.is_empty() && (d.contains(&a) || a.contains(d.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_engine_says_where_it_ran() {
        let lavapipe = json!({"adapter": {"name": "llvmpipe (LLVM 15.0.6, 256 bits)",
                                          "backend": "vulkan", "device_type": "cpu"}});
        let d = of(
            "fak-native",
            &lavapipe,
            Some("llvmpipe (LLVM 15.0.6, 256 bits)"),
        )
        .unwrap();
        assert_eq!(
            (d.kind, d.selftest_adapter),
            (DeviceKind::SoftwareGpu, true)
        );

        let cpu_build = json!({"devices": []});
        let d = of("llama.cpp", &cpu_build, Some("llvmpipe")).unwrap();
        assert_eq!((d.kind, d.selftest_adapter), (DeviceKind::Cpu, false));

        let cuda = json!({"devices": ["CUDA0: NVIDIA H200 (143166 MiB, 142525 MiB free)"]});
        let d = of("llama.cpp", &cuda, Some("NVIDIA H200")).unwrap();
        assert_eq!((d.kind, d.selftest_adapter), (DeviceKind::Gpu, true));
        assert!(
            !of("llama.cpp", &cuda, Some("AMD Radeon"))
                .unwrap()
                .selftest_adapter
        );

        let mlx_cpu = json!({"device": "Device(cpu, 0)", "device_name": "Intel Xeon"});
        assert_eq!(of("mlx", &mlx_cpu, None).unwrap().kind, DeviceKind::Cpu);
        let mlx_gpu = json!({"device": "Device(gpu, 0)", "device_name": "Apple M3 Max"});
        assert!(
            of("mlx", &mlx_gpu, Some("Apple M3 Max"))
                .unwrap()
                .selftest_adapter
        );
        assert!(of("mlx", &Value::Null, None).is_none());
    }
}
