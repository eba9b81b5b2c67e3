//! Bind-group and pipeline layouts, shared between kernels by their binding signature.
//!
//! Layouts are explicit (never `layout: None`): a pipeline built with an auto layout only accepts
//! bind groups made for that very pipeline, while a shared layout lets one bind group serve every
//! variant of a kernel and every kernel with the same signature (wgpu-notes.md §3b).

use std::collections::HashMap;
use std::sync::Mutex;

/// What a binding slot holds, in binding order 0, 1, 2, … of group 0.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Slot {
    /// `var<storage, read>`: weights and inputs (read-only bindings cause no barriers).
    Read,
    /// `var<storage, read_write>`: outputs.
    ReadWrite,
    /// `var<uniform>`: small per-dispatch parameters.
    Uniform,
}

/// `slots` and one read-write slot past them (N = slots.len() + 1): the arrival counters a
/// kernel's last-arriving workgroup reads and resets (gdn_decode's wide split, attn_decode's
/// one-dispatch form).
pub const fn with_counters<const N: usize>(slots: &[Slot]) -> [Slot; N] {
    let mut with = [Slot::ReadWrite; N];
    let mut i = 0;
    while i < slots.len() {
        with[i] = slots[i];
        i += 1;
    }
    with
}

impl Slot {
    fn binding_type(self) -> wgpu::BindingType {
        let buffer = |ty| wgpu::BindingType::Buffer {
            ty,
            has_dynamic_offset: false,
            min_binding_size: None,
        };
        match self {
            Slot::Read => buffer(wgpu::BufferBindingType::Storage { read_only: true }),
            Slot::ReadWrite => buffer(wgpu::BufferBindingType::Storage { read_only: false }),
            Slot::Uniform => buffer(wgpu::BufferBindingType::Uniform),
        }
    }
}

/// Layouts by signature, created once per device.
#[derive(Default)]
pub struct LayoutCache {
    layouts: Mutex<HashMap<Vec<Slot>, (wgpu::BindGroupLayout, wgpu::PipelineLayout)>>,
}

impl LayoutCache {
    /// The bind-group layout and the pipeline layout (that one group, no immediates) for `slots`.
    pub fn get(
        &self,
        device: &wgpu::Device,
        slots: &[Slot],
    ) -> (wgpu::BindGroupLayout, wgpu::PipelineLayout) {
        let mut layouts = self.layouts.lock().unwrap_or_else(|e| e.into_inner());
        layouts
            .entry(slots.to_vec())
            .or_insert_with(|| create(device, slots))
            .clone()
    }
}

fn create(device: &wgpu::Device, slots: &[Slot]) -> (wgpu::BindGroupLayout, wgpu::PipelineLayout) {
    let entries: Vec<wgpu::BindGroupLayoutEntry> = slots
        .iter()
        .enumerate()
        .map(|(i, slot)| wgpu::BindGroupLayoutEntry {
            binding: i as u32,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: slot.binding_type(),
            count: None,
        })
        .collect();
    let label = format!("{slots:?}");
    let group = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some(&label),
        entries: &entries,
    });
    let pipeline = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some(&label),
        bind_group_layouts: &[Some(&group)],
        immediate_size: 0,
    });
    (group, pipeline)
}
