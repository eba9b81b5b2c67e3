//! Where an f32 activation tensor `[tokens, width]` sits in a buffer, and the binding window a
//! kernel reads or writes it through.

use super::buffers::Window;
use super::error::GpuError;

/// An f32 activation tensor inside a buffer: token t's row starts at element
/// `offset + t·stride`. A kernel reads or writes `width` elements of each of its tokens' rows, so
/// several tensors can share one buffer (Q, K and V side by side in rows of their summed width).
#[derive(Clone, Copy, Debug)]
pub struct Activations<'a> {
    pub buffer: &'a wgpu::Buffer,
    /// Element index of token 0's first element.
    pub offset: u64,
    /// Elements from one token's row to the next.
    pub stride: u64,
}

/// An activation tensor as a kernel binds it: the window and the element index of token 0's
/// first element inside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BoundActivations {
    pub window: Window,
    pub index: u32,
    pub stride: u32,
}

impl<'a> Activations<'a> {
    /// Rows of `width` elements back to back from the start of `buffer`.
    pub fn contiguous(buffer: &'a wgpu::Buffer, width: u64) -> Self {
        Activations {
            buffer,
            offset: 0,
            stride: width,
        }
    }

    /// The window a kernel binds to touch `width` elements of each of `tokens` rows (at least one
    /// row is covered), after checking that the rows do not overlap, lie inside the buffer and
    /// fit one binding of `max_binding` bytes at offset alignment `align`.
    pub fn bind(
        &self,
        kernel: &'static str,
        name: &str,
        tokens: u64,
        width: u64,
        max_binding: u64,
        align: u64,
    ) -> Result<BoundActivations, GpuError> {
        let shape_error = |message: String| GpuError::Shape { kernel, message };
        if tokens > 1 && self.stride < width {
            return Err(shape_error(format!(
                "{name}: a row stride of {} elements is shorter than the {width} elements of a row",
                self.stride
            )));
        }
        let elements = (tokens.max(1) - 1)
            .checked_mul(self.stride)
            .and_then(|n| n.checked_add(width))
            .and_then(|n| n.checked_add(self.offset));
        let end = elements.and_then(|n| n.checked_mul(4));
        match end {
            Some(end) if end <= self.buffer.size() => {}
            _ => {
                return Err(shape_error(format!(
                    "{name}: {tokens} rows of {width} f32 at element {} with stride {} need more \
                     than the {} bytes of its buffer",
                    self.offset,
                    self.stride,
                    self.buffer.size()
                )));
            }
        }
        let start = self.offset * 4;
        let window = Window::around(start, end.unwrap_or(0) - start, align);
        if window.size > max_binding {
            return Err(GpuError::TooLarge {
                what: format!("kernel {kernel}: the {name} rows (bytes)"),
                size: window.size,
                limit: max_binding,
                limit_name: "max_storage_buffer_binding_size",
            });
        }
        let stride = u32::try_from(self.stride).map_err(|_| {
            shape_error(format!("{name}: row stride {} overflows u32", self.stride))
        })?;
        Ok(BoundActivations {
            window,
            // The window is at most one binding (< 2^31 bytes), so the index fits.
            index: (window.skip / 4) as u32,
            stride,
        })
    }
}
