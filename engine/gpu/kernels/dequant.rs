//! `dequant`: GGUF tensors to f32 on the GPU (wgsl/dequant.wgsl).

use crate::gpu::buffers::{Grid, Window, split_rows, uniform};
use crate::gpu::context::GpuContext;
use crate::gpu::error::GpuError;
use crate::gpu::kernel::{
    Kernel, KernelSource, KernelVariant, PipelineSpec, WgslModule, build, wgsl,
};
use crate::gpu::kernels::type_constants;
use crate::gpu::layout::Slot;
use crate::gpu::paths::{Axes, KernelPaths};
use crate::gpu::profile::{OpBytes, Recorded};
use crate::quant::GgmlType;

/// Invocations per workgroup (`override WG`).
const WG: u32 = 64;
/// Elements each invocation writes.
const PER_INVOCATION: u64 = 4;
/// src, dst, params.
const SLOTS: &[Slot] = &[Slot::Read, Slot::ReadWrite, Slot::Uniform];

/// `Params` of wgsl/dequant.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    src_byte: u32,
    dst_index: u32,
    pad: u32,
}

/// The tensor a [`DequantBinding`] covers: `rows` rows of `row_len` elements of type `ty`, stored
/// as GGUF stores them (rows of whole blocks, back to back).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct DequantShape {
    pub ty: GgmlType,
    pub rows: u64,
    pub row_len: u64,
}

/// The dequantize kernel: one pipeline per supported type.
pub struct Dequant {
    variant: KernelPaths,
    layout: wgpu::BindGroupLayout,
    /// Parallel to [`Dequant::TYPES`].
    pipelines: Vec<wgpu::ComputePipeline>,
}

/// A tensor bound for [`Dequant::encode`]: one bind group per row range that fits a binding.
pub struct DequantBinding {
    ty: GgmlType,
    ranges: Vec<(wgpu::BindGroup, Grid)>,
    /// Bytes of the tensor read and of the f32 values written.
    bytes: OpBytes,
}

impl DequantBinding {
    /// The grid of each dispatch, one per row range (several when the tensor exceeds a binding).
    pub fn grids(&self) -> impl Iterator<Item = Grid> + '_ {
        self.ranges.iter().map(|(_, grid)| *grid)
    }
}

impl Kernel for Dequant {
    const NAME: &'static str = "dequant";
    const AXES: Axes = Axes::NONE;

    fn source(variant: KernelPaths) -> KernelSource {
        let module = WgslModule::new(variant)
            .with(wgsl::BYTES)
            .with(wgsl::BLOCKS)
            .with(wgsl::DEQUANT_TYPE)
            .with(wgsl::GRID)
            .with(wgsl::DEQUANT);
        let pipelines = Self::TYPES
            .iter()
            .map(|&ty| {
                let mut constants = vec![("WG", f64::from(WG))];
                constants.extend(type_constants(ty));
                PipelineSpec {
                    label: format!("dequant {ty}"),
                    entry_point: if ty.block_elems() == 1 {
                        "dequant_elements"
                    } else {
                        "dequant_blocks"
                    },
                    constants,
                }
            })
            .collect();
        KernelSource {
            module,
            slots: SLOTS,
            pipelines,
        }
    }
}

impl Dequant {
    /// The types this kernel decodes.
    pub const TYPES: [GgmlType; 11] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ];

    /// Builds the kernel (it has one variant, so `paths` only has to be valid for the device).
    pub fn new(ctx: &GpuContext, paths: KernelPaths) -> Result<Self, GpuError> {
        let variant = KernelVariant::of::<Self>(Self::AXES.select(paths));
        let built = build(ctx, &variant)?;
        Ok(Dequant {
            variant: variant.paths,
            layout: built.layout,
            pipelines: built.pipelines,
        })
    }

    /// The variant that was built.
    pub fn variant(&self) -> KernelPaths {
        self.variant
    }

    /// Binds `src` (the tensor's bytes from offset 0) and `dst` (f32 output from offset 0),
    /// splitting the rows so every binding fits the device. Checks the shape and both buffer
    /// sizes first.
    pub fn bind(
        &self,
        ctx: &GpuContext,
        shape: DequantShape,
        src: &wgpu::Buffer,
        dst: &wgpu::Buffer,
    ) -> Result<DequantBinding, GpuError> {
        self.bind_within(ctx, shape, src, dst, ctx.max_binding_size())
    }

    /// [`Dequant::bind`] with bindings of at most `max_binding` bytes (at most the device's
    /// limit): lets a test split tensors the same way on a device with 2 GiB bindings as on one
    /// with 128 MiB.
    pub fn bind_within(
        &self,
        ctx: &GpuContext,
        shape: DequantShape,
        src: &wgpu::Buffer,
        dst: &wgpu::Buffer,
        max_binding: u64,
    ) -> Result<DequantBinding, GpuError> {
        let DequantShape { ty, rows, row_len } = shape;
        let max_binding = max_binding.min(ctx.max_binding_size());
        if !Self::TYPES.contains(&ty) {
            return Err(GpuError::UnsupportedType {
                kernel: Self::NAME,
                ty,
            });
        }
        let shape_error = |message: String| GpuError::Shape {
            kernel: Self::NAME,
            message,
        };
        let row_bytes = ty.row_bytes(row_len).ok_or_else(|| {
            shape_error(format!(
                "a row of {row_len} elements is not a whole number of {ty} blocks of {}",
                ty.block_elems()
            ))
        })?;
        let dst_row_bytes = row_len
            .checked_mul(4)
            .ok_or_else(|| shape_error(format!("a row of {row_len} f32 overflows")))?;
        for (name, buffer, need) in [
            ("source", src, rows.checked_mul(row_bytes)),
            ("destination", dst, rows.checked_mul(dst_row_bytes)),
        ] {
            match need {
                Some(need) if need <= buffer.size() => {}
                _ => {
                    return Err(shape_error(format!(
                        "{rows} rows of {row_len} {ty} need more than the {} bytes of the {name} buffer",
                        buffer.size()
                    )));
                }
            }
        }
        let align = ctx.binding_alignment();
        let ranges = split_rows(
            &format!("a {ty} tensor"),
            rows,
            &[row_bytes, dst_row_bytes],
            max_binding,
            align,
        )?;
        let max_per_dimension = ctx.device.limits().max_compute_workgroups_per_dimension;
        let ranges = ranges
            .into_iter()
            .map(|range| {
                let len = range.end - range.start;
                let src_window = Window::around(range.start * row_bytes, len * row_bytes, align);
                let dst_window =
                    Window::around(range.start * dst_row_bytes, len * dst_row_bytes, align);
                let n = len * row_len;
                let params = Params {
                    // split_rows keeps every range inside one binding (< 2^31 bytes): these fit.
                    n: n as u32,
                    src_byte: src_window.skip as u32,
                    dst_index: (dst_window.skip / 4) as u32,
                    pad: 0,
                };
                let params = uniform(ctx, "dequant params", &params);
                let group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some("dequant"),
                    layout: &self.layout,
                    entries: &[
                        entry(0, src_window.binding(src)),
                        entry(1, dst_window.binding(dst)),
                        entry(2, params.as_entire_binding()),
                    ],
                });
                let workgroups = n.div_ceil(PER_INVOCATION * u64::from(WG));
                Ok((group, Grid::for_workgroups(workgroups, max_per_dimension)?))
            })
            .collect::<Result<_, GpuError>>()?;
        let bytes = OpBytes::new(rows * row_bytes, 4 * rows * row_len);
        Ok(DequantBinding { ty, ranges, bytes })
    }

    /// Records the dispatches of `binding` into `pass`; returns what it recorded (the tensor
    /// read, its values written).
    pub fn encode(
        &self,
        pass: &mut wgpu::ComputePass,
        binding: &DequantBinding,
    ) -> Result<Recorded, GpuError> {
        let index = Self::TYPES
            .iter()
            .position(|&t| t == binding.ty)
            .expect("bind() accepts only TYPES");
        pass.set_pipeline(&self.pipelines[index]);
        for (group, grid) in &binding.ranges {
            pass.set_bind_group(0, group, &[]);
            grid.dispatch(pass);
        }
        Ok(Recorded::new(
            Self::NAME,
            binding.ranges.len(),
            binding.bytes,
        ))
    }
}

fn entry(binding: u32, resource: wgpu::BindingResource<'_>) -> wgpu::BindGroupEntry<'_> {
    wgpu::BindGroupEntry { binding, resource }
}
