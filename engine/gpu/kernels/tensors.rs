//! Bind-time checks and helpers shared by the kernels that read GGUF weight tensors in place.

use crate::gpu::context::GpuContext;
use crate::gpu::error::GpuError;
use crate::quant::GgmlType;

/// The bytes of one row of `cols` elements of `ty`, after checking that `rows` such rows starting
/// at byte `offset` lie inside `buffer` (named `name` in errors).
pub fn checked_row_bytes(
    kernel: &'static str,
    name: &str,
    ty: GgmlType,
    rows: u64,
    cols: u64,
    buffer: &wgpu::Buffer,
    offset: u64,
) -> Result<u64, GpuError> {
    let shape_error = |message: String| GpuError::Shape { kernel, message };
    if cols == 0 {
        return Err(shape_error(format!("{name}: rows of 0 elements")));
    }
    let row_bytes = ty.row_bytes(cols).ok_or_else(|| {
        shape_error(format!(
            "{name}: a row of {cols} elements is not a whole number of {ty} blocks of {}",
            ty.block_elems()
        ))
    })?;
    match rows
        .checked_mul(row_bytes)
        .and_then(|n| n.checked_add(offset))
    {
        Some(end) if end <= buffer.size() => Ok(row_bytes),
        _ => Err(shape_error(format!(
            "{name}: {rows} rows of {cols} {ty} at byte {offset} need more than the {} bytes of \
             its buffer",
            buffer.size()
        ))),
    }
}

/// A bind group of `layout` with `resources` at bindings 0, 1, 2, … in order.
pub fn bind_group(
    ctx: &GpuContext,
    label: &str,
    layout: &wgpu::BindGroupLayout,
    resources: Vec<wgpu::BindingResource<'_>>,
) -> wgpu::BindGroup {
    let entries: Vec<wgpu::BindGroupEntry<'_>> = resources
        .into_iter()
        .enumerate()
        .map(|(i, resource)| wgpu::BindGroupEntry {
            binding: i as u32,
            resource,
        })
        .collect();
    ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some(label),
        layout,
        entries: &entries,
    })
}
