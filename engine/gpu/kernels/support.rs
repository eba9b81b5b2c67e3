//! What the kernels of a forward step (rms_norm, rope_kv, attention, elementwise, argmax)
//! share: their WGSL helper files, strided activation views, where token positions come from, and
//! the checks and bind-group entries every `bind()` makes.

use crate::gpu::buffers::{Grid, round_up};
use crate::gpu::context::GpuContext;
use crate::gpu::error::GpuError;
use crate::gpu::kernel::WgslFile;

macro_rules! step_wgsl {
    ($name:literal) => {
        WgslFile {
            name: $name,
            text: include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../wgsl/", $name)),
        }
    };
}
pub(crate) use step_wgsl;

/// Strided activation views (`struct View`, `view_index`).
pub const VIEW: WgslFile = step_wgsl!("view.wgsl");
/// Token positions and page-table rows from the Step or a token table (needs `TOKEN_TABLE`).
pub const POSITIONS: WgslFile = step_wgsl!("positions.wgsl");
/// Paged KV-cache addressing (`KvGeometry`, `kv_base`).
pub const KV_PAGED: WgslFile = step_wgsl!("kv_paged.wgsl");

/// The KV-cache element type file of a variant: f16 where the variant has f16.
pub fn kv_scalar(f16: bool) -> WgslFile {
    if f16 {
        step_wgsl!("kv_f16.wgsl")
    } else {
        step_wgsl!("kv_f32.wgsl")
    }
}

/// Where an activation operand's elements sit in its buffer, in f32 elements: element (t, h, i) —
/// token t, head (or sub-row) h, index i — is at `offset + t·token_stride + h·head_stride + i`
/// (wgsl/view.wgsl). The kernel that takes a view says how many heads and how wide they are.
#[derive(Clone, Copy, Debug)]
pub struct View<'a> {
    pub buffer: &'a wgpu::Buffer,
    pub offset: u32,
    pub token_stride: u32,
    pub head_stride: u32,
}

impl<'a> View<'a> {
    /// Rows of `width` values per token, back to back (`[n_tokens, width]`, one head per token).
    pub fn rows(buffer: &'a wgpu::Buffer, width: u32) -> Self {
        View {
            buffer,
            offset: 0,
            token_stride: width,
            head_stride: 0,
        }
    }

    /// `n_heads` contiguous heads of `head_dim` values per token (`[n_tokens, n_heads, head_dim]`).
    pub fn heads(buffer: &'a wgpu::Buffer, n_heads: u32, head_dim: u32) -> Self {
        View {
            buffer,
            offset: 0,
            token_stride: n_heads * head_dim,
            head_stride: head_dim,
        }
    }

    /// The same layout starting `offset` elements into the buffer.
    pub fn at(self, offset: u32) -> Self {
        View { offset, ..self }
    }

    /// The same start with other strides.
    pub fn strided(self, token_stride: u32, head_stride: u32) -> Self {
        View {
            token_stride,
            head_stride,
            ..self
        }
    }

    pub(crate) fn params(&self) -> ViewParams {
        ViewParams {
            offset: self.offset,
            token_stride: self.token_stride,
            head_stride: self.head_stride,
            pad: 0,
        }
    }

    /// One past the last element `tokens` tokens of `heads` heads of `width` values reach.
    fn extent(&self, tokens: u32, heads: u32, width: u32) -> u64 {
        if tokens == 0 || heads == 0 || width == 0 {
            return u64::from(self.offset);
        }
        u64::from(self.offset)
            + u64::from(tokens - 1) * u64::from(self.token_stride)
            + u64::from(heads - 1) * u64::from(self.head_stride)
            + u64::from(width)
    }
}

/// `struct View` of wgsl/view.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ViewParams {
    pub offset: u32,
    pub token_stride: u32,
    pub head_stride: u32,
    pub pad: u32,
}

/// Where the kernels of a step find each token's position (and page-table row).
#[derive(Clone, Copy, Debug)]
pub enum Positions<'a> {
    /// One sequence: token t sits at `step.pos + t` and uses page-table row 0.
    Step,
    /// A [`TokenSlot`] per token of the step, in this buffer: batched decode (one token per
    /// sequence, each with its own position and page-table row), or a prefill of one sequence
    /// (slots in order, ascending positions, one page-table row).
    Table(&'a wgpu::Buffer),
}

impl Positions<'_> {
    /// The value of the `TOKEN_TABLE` override that reads these positions.
    pub(crate) fn is_table(&self) -> bool {
        matches!(self, Positions::Table(_))
    }
}

/// A 16-byte storage buffer bound where a pipeline declares a binding it does not read (the
/// token table of `Positions::Step`, the source of an in-place op, the weight of a weightless
/// norm): bind groups must fill every slot of the shared layout.
pub(crate) fn placeholder(ctx: &GpuContext) -> wgpu::Buffer {
    ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("unused binding"),
        size: 16,
        usage: wgpu::BufferUsages::STORAGE,
        mapped_at_creation: false,
    })
}

pub(crate) fn entry(binding: u32, resource: wgpu::BindingResource<'_>) -> wgpu::BindGroupEntry<'_> {
    wgpu::BindGroupEntry { binding, resource }
}

/// A shape error of `kernel`.
pub(crate) fn shape_error(kernel: &'static str, message: impl Into<String>) -> GpuError {
    GpuError::Shape {
        kernel,
        message: message.into(),
    }
}

/// The binding of the first `elements` 4-byte words of `buffer`, after checking that the buffer
/// holds them and that they fit one binding. `what` names the operand in errors.
pub(crate) fn words<'a>(
    ctx: &GpuContext,
    kernel: &'static str,
    what: &str,
    buffer: &'a wgpu::Buffer,
    elements: u64,
) -> Result<wgpu::BindingResource<'a>, GpuError> {
    let bytes = round_up(elements.max(1) * 4, 4);
    if bytes > buffer.size() {
        return Err(shape_error(
            kernel,
            format!(
                "{what} needs {bytes} bytes but its buffer has {}",
                buffer.size()
            ),
        ));
    }
    let limit = ctx.max_binding_size();
    if bytes > limit {
        return Err(GpuError::TooLarge {
            what: format!("{kernel}: {what} (bytes)"),
            size: bytes,
            limit,
            limit_name: "max_storage_buffer_binding_size",
        });
    }
    Ok(wgpu::BindingResource::Buffer(wgpu::BufferBinding {
        buffer,
        offset: 0,
        size: std::num::NonZeroU64::new(bytes),
    }))
}

/// [`view_binding`] for a view the kernel only reads, which may also be one token's values that
/// every token reads (`token_stride` 0: a bias).
pub(crate) fn read_binding<'a>(
    ctx: &GpuContext,
    kernel: &'static str,
    what: &str,
    view: &View<'a>,
    max_tokens: u32,
    heads: u32,
    width: u32,
) -> Result<wgpu::BindingResource<'a>, GpuError> {
    let tokens = if view.token_stride == 0 {
        1
    } else {
        max_tokens
    };
    view_binding(ctx, kernel, what, view, tokens, heads, width)
}

/// The binding of a view for up to `max_tokens` tokens of `heads` heads of `width` values.
pub(crate) fn view_binding<'a>(
    ctx: &GpuContext,
    kernel: &'static str,
    what: &str,
    view: &View<'a>,
    max_tokens: u32,
    heads: u32,
    width: u32,
) -> Result<wgpu::BindingResource<'a>, GpuError> {
    if heads > 1 && view.head_stride < width {
        return Err(shape_error(
            kernel,
            format!(
                "{what}: head stride {} is less than the head width {width}, so heads overlap",
                view.head_stride
            ),
        ));
    }
    let span = u64::from(heads.saturating_sub(1)) * u64::from(view.head_stride) + u64::from(width);
    if max_tokens > 1 && u64::from(view.token_stride) < span {
        return Err(shape_error(
            kernel,
            format!(
                "{what}: token stride {} is less than the {span} elements a token spans",
                view.token_stride
            ),
        ));
    }
    words(
        ctx,
        kernel,
        &format!("{what} ({max_tokens} tokens × {heads} × {width} at {view:?})"),
        view.buffer,
        view.extent(max_tokens, heads, width),
    )
}

/// The token-table binding of `positions` for up to `max_tokens` tokens (the placeholder when
/// positions come from the Step).
pub(crate) fn positions_binding<'a>(
    ctx: &GpuContext,
    kernel: &'static str,
    positions: Positions<'a>,
    placeholder: &'a wgpu::Buffer,
    max_tokens: u32,
) -> Result<wgpu::BindingResource<'a>, GpuError> {
    match positions {
        Positions::Step => Ok(placeholder.as_entire_binding()),
        Positions::Table(buffer) => words(
            ctx,
            kernel,
            &format!("the token table ({max_tokens} slots)"),
            buffer,
            2 * u64::from(max_tokens),
        ),
    }
}

/// The grid of `workgroups` 1-D workgroups, checked at bind time for the most a binding can be
/// asked to dispatch.
pub(crate) fn grid(workgroups: u64, max_per_dimension: u32) -> Result<Grid, GpuError> {
    Grid::for_workgroups(workgroups, max_per_dimension)
}

/// [`grid`] at encode time, for a count no larger than one [`grid`] accepted at bind time.
pub(crate) fn grid_within_bound(workgroups: u64, max_per_dimension: u32) -> Grid {
    Grid::for_workgroups(workgroups, max_per_dimension)
        .expect("bind() checked the grid of the largest step")
}
