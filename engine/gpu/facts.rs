//! What an adapter is and can do, as plain data: the hardware-catalog entry of a packet and the
//! rows of `harness devices`.

use serde::{Deserialize, Serialize};

/// The facts about one adapter that a hardware catalog records.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdapterFacts {
    pub name: String,
    /// PCI vendor id (0x10de NVIDIA, 0x106b Apple, 0x10005 Mesa's software rasteriser, …).
    pub vendor_id: u32,
    pub device_id: u32,
    /// `vulkan`, `metal`, `dx12`, `gl`, …
    pub backend: String,
    /// `discrete`, `integrated`, `virtual`, `cpu`, `other`.
    pub device_type: String,
    pub driver: String,
    pub driver_info: String,
    /// wgpu feature names the adapter offers (`SHADER_F16`, `SUBGROUP`, …), sorted.
    pub features: Vec<String>,
    pub limits: KeyLimits,
    pub subgroup_min_size: u32,
    pub subgroup_max_size: u32,
    /// Cooperative-matrix configurations the driver reports (empty when none).
    pub cooperative_matrix: Vec<CoopMatrixConfig>,
    /// Bytes of the largest device-local memory heap, where the backend reports it
    /// (`gpu::memory`); `None` when unknown.
    #[serde(default)]
    pub memory_bytes: Option<u64>,
}

/// The limits that shape kernels and buffers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyLimits {
    pub max_buffer_size: u64,
    pub max_storage_buffer_binding_size: u64,
    pub max_uniform_buffer_binding_size: u64,
    pub max_storage_buffers_per_shader_stage: u32,
    pub max_bind_groups: u32,
    pub max_compute_invocations_per_workgroup: u32,
    pub max_compute_workgroup_size: [u32; 3],
    pub max_compute_workgroup_storage_size: u32,
    pub max_compute_workgroups_per_dimension: u32,
    pub max_immediate_size: u32,
    pub min_storage_buffer_offset_alignment: u32,
    pub min_uniform_buffer_offset_alignment: u32,
}

/// One cooperative-matrix configuration: an M×K by K×N product accumulated into M×N.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoopMatrixConfig {
    pub m: u32,
    pub n: u32,
    pub k: u32,
    /// Element type of the A and B inputs (`f16`, `f32`, `i32`, `u32`).
    pub ab_type: String,
    /// Element type of the C accumulator and the result.
    pub cr_type: String,
    pub saturating_accumulation: bool,
}

impl AdapterFacts {
    pub fn of(adapter: &wgpu::Adapter) -> AdapterFacts {
        let info = adapter.get_info();
        AdapterFacts {
            name: info.name,
            vendor_id: info.vendor,
            device_id: info.device,
            backend: info.backend.to_str().to_string(),
            device_type: device_type_name(info.device_type).to_string(),
            driver: info.driver,
            driver_info: info.driver_info,
            features: feature_names(adapter.features()),
            limits: KeyLimits::of(&adapter.limits()),
            subgroup_min_size: info.subgroup_min_size,
            subgroup_max_size: info.subgroup_max_size,
            cooperative_matrix: adapter
                .cooperative_matrix_properties()
                .iter()
                .map(CoopMatrixConfig::of)
                .collect(),
            memory_bytes: super::memory::device_memory_bytes(adapter),
        }
    }

    /// Whether the adapter offers a wgpu feature, by its name in [`AdapterFacts::features`].
    pub fn has_feature(&self, name: &str) -> bool {
        self.features.iter().any(|f| f == name)
    }
}

impl KeyLimits {
    pub fn of(limits: &wgpu::Limits) -> KeyLimits {
        KeyLimits {
            max_buffer_size: limits.max_buffer_size,
            max_storage_buffer_binding_size: limits.max_storage_buffer_binding_size,
            max_uniform_buffer_binding_size: limits.max_uniform_buffer_binding_size,
            max_storage_buffers_per_shader_stage: limits.max_storage_buffers_per_shader_stage,
            max_bind_groups: limits.max_bind_groups,
            max_compute_invocations_per_workgroup: limits.max_compute_invocations_per_workgroup,
            max_compute_workgroup_size: [
                limits.max_compute_workgroup_size_x,
                limits.max_compute_workgroup_size_y,
                limits.max_compute_workgroup_size_z,
            ],
            max_compute_workgroup_storage_size: limits.max_compute_workgroup_storage_size,
            max_compute_workgroups_per_dimension: limits.max_compute_workgroups_per_dimension,
            max_immediate_size: limits.max_immediate_size,
            min_storage_buffer_offset_alignment: limits.min_storage_buffer_offset_alignment,
            min_uniform_buffer_offset_alignment: limits.min_uniform_buffer_offset_alignment,
        }
    }
}

impl CoopMatrixConfig {
    pub fn of(p: &wgpu::CooperativeMatrixProperties) -> CoopMatrixConfig {
        CoopMatrixConfig {
            m: p.m_size,
            n: p.n_size,
            k: p.k_size,
            ab_type: coop_scalar_name(p.ab_type).to_string(),
            cr_type: coop_scalar_name(p.cr_type).to_string(),
            saturating_accumulation: p.saturating_accumulation,
        }
    }
}

/// Sorted wgpu feature names.
pub fn feature_names(features: wgpu::Features) -> Vec<String> {
    let mut names: Vec<String> = features
        .iter_names()
        .map(|(name, _)| name.to_string())
        .collect();
    names.sort();
    names
}

fn device_type_name(t: wgpu::DeviceType) -> &'static str {
    match t {
        wgpu::DeviceType::DiscreteGpu => "discrete",
        wgpu::DeviceType::IntegratedGpu => "integrated",
        wgpu::DeviceType::VirtualGpu => "virtual",
        wgpu::DeviceType::Cpu => "cpu",
        wgpu::DeviceType::Other => "other",
    }
}

fn coop_scalar_name(t: wgpu::CooperativeScalarType) -> &'static str {
    match t {
        wgpu::CooperativeScalarType::F32 => "f32",
        wgpu::CooperativeScalarType::F16 => "f16",
        wgpu::CooperativeScalarType::I32 => "i32",
        wgpu::CooperativeScalarType::U32 => "u32",
    }
}
