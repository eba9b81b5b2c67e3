//! Buffers: storage buffers, chunked uploads, readback, and binding windows for tensors larger
//! than one binding.

use super::context::GpuContext;
use super::error::GpuError;
use std::ops::Range;

/// Bytes per `write_buffer` call: each call stages its data in a fresh host-visible allocation.
const UPLOAD_CHUNK: usize = 64 << 20;
/// Submit and wait after this many staged bytes, so staging memory is freed as the upload goes
/// instead of piling up until the next submit (wgpu-notes.md §4).
const UPLOAD_FLUSH: usize = 256 << 20;

/// `n` rounded up to a whole number of `align`.
pub fn round_up(n: u64, align: u64) -> u64 {
    n.div_ceil(align) * align
}

/// A storage buffer of at least `bytes` (rounded up to whole words), usable as a kernel binding
/// and as a copy source and destination.
pub fn storage_buffer(ctx: &GpuContext, label: &str, bytes: u64) -> Result<wgpu::Buffer, GpuError> {
    let size = round_up(bytes.max(4), 4);
    let limit = ctx.device.limits().max_buffer_size;
    if size > limit {
        return Err(GpuError::TooLarge {
            what: format!("buffer {label:?} (bytes)"),
            size,
            limit,
            limit_name: "max_buffer_size",
        });
    }
    Ok(ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        size,
        usage: wgpu::BufferUsages::STORAGE
            | wgpu::BufferUsages::COPY_DST
            | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    }))
}

/// A storage buffer holding `data` (padded with zeros to whole words).
pub fn upload(ctx: &GpuContext, label: &str, data: &[u8]) -> Result<wgpu::Buffer, GpuError> {
    let buffer = storage_buffer(ctx, label, data.len() as u64)?;
    write(ctx, &buffer, 0, data)?;
    Ok(buffer)
}

/// Checks that `start..end` is whole words inside `buffer` before wgpu sees it (wgpu would panic).
fn check_range(
    op: &'static str,
    buffer: &wgpu::Buffer,
    start: u64,
    end: u64,
) -> Result<(), GpuError> {
    let problem = if !start.is_multiple_of(4) || !end.is_multiple_of(4) {
        "is not whole words"
    } else if start > end {
        "is reversed"
    } else if end > buffer.size() {
        "runs past the end"
    } else {
        return Ok(());
    };
    Err(GpuError::BufferRange {
        op,
        start,
        end,
        buffer_size: buffer.size(),
        problem,
    })
}

/// Writes `data` at byte `offset` (a multiple of 4) in chunks, flushing staging memory as it
/// goes; a ragged tail is padded with zeros to a whole word, so the buffer must have room for it.
pub fn write(
    ctx: &GpuContext,
    buffer: &wgpu::Buffer,
    offset: u64,
    data: &[u8],
) -> Result<(), GpuError> {
    check_range(
        "write",
        buffer,
        offset,
        offset + round_up(data.len() as u64, 4),
    )?;
    let whole = data.len() - data.len() % 4;
    let mut staged = 0;
    for (i, chunk) in data[..whole].chunks(UPLOAD_CHUNK).enumerate() {
        ctx.queue
            .write_buffer(buffer, offset + (i * UPLOAD_CHUNK) as u64, chunk);
        staged += chunk.len();
        if staged >= UPLOAD_FLUSH {
            flush(ctx)?;
            staged = 0;
        }
    }
    if whole < data.len() {
        let mut tail = [0u8; 4];
        tail[..data.len() - whole].copy_from_slice(&data[whole..]);
        ctx.queue.write_buffer(buffer, offset + whole as u64, &tail);
    }
    flush(ctx)
}

/// Fills the whole of `buffer` with `value` (NaN poisoning: an element a kernel should have
/// written but did not cannot pass for a right answer).
pub fn fill_f32(ctx: &GpuContext, buffer: &wgpu::Buffer, value: f32) -> Result<(), GpuError> {
    let len = buffer.size().min(UPLOAD_CHUNK as u64) as usize;
    let chunk: Vec<u8> = value.to_le_bytes().into_iter().cycle().take(len).collect();
    let mut offset = 0;
    while offset < buffer.size() {
        let n = (buffer.size() - offset).min(len as u64) as usize;
        write(ctx, buffer, offset, &chunk[..n])?;
        offset += n as u64;
    }
    Ok(())
}

fn flush(ctx: &GpuContext) -> Result<(), GpuError> {
    let index = ctx.queue.submit([]);
    ctx.device.poll(wgpu::PollType::Wait {
        submission_index: Some(index),
        timeout: None,
    })?;
    Ok(())
}

/// A uniform buffer holding one plain-old-data value (kernel parameters), zero-padded to the
/// 16-byte multiple uniform layouts round to.
pub fn uniform<T: bytemuck::Pod>(ctx: &GpuContext, label: &str, value: &T) -> wgpu::Buffer {
    let mut bytes = bytemuck::bytes_of(value).to_vec();
    bytes.resize(round_up(bytes.len().max(1) as u64, 16) as usize, 0);
    let buffer = ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        size: bytes.len() as u64,
        usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    ctx.queue.write_buffer(&buffer, 0, &bytes);
    buffer
}

/// Copies `range` (whole words) of `buffer` back to the CPU, waiting for the GPU.
pub fn read_back(
    ctx: &GpuContext,
    buffer: &wgpu::Buffer,
    range: Range<u64>,
) -> Result<Vec<u8>, GpuError> {
    check_range("readback", buffer, range.start, range.end)?;
    let len = range.end - range.start;
    if len == 0 {
        return Ok(Vec::new());
    }
    let staging = ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("readback"),
        size: len,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut encoder = ctx
        .device
        .create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("readback"),
        });
    encoder.copy_buffer_to_buffer(buffer, range.start, &staging, 0, len);
    ctx.queue.submit([encoder.finish()]);
    let slice = staging.slice(..len);
    let (sender, receiver) = std::sync::mpsc::channel();
    slice.map_async(wgpu::MapMode::Read, move |result| {
        let _ = sender.send(result);
    });
    ctx.device.poll(wgpu::PollType::wait_indefinitely())?;
    receiver
        .recv()
        .map_err(|e| e.to_string())
        .and_then(|mapped| mapped.map_err(|e| e.to_string()))
        .map_err(GpuError::Readback)?;
    let view = slice
        .get_mapped_range()
        .map_err(|e| GpuError::Readback(e.to_string()))?;
    let bytes = view.to_vec();
    drop(view);
    staging.unmap();
    Ok(bytes)
}

/// [`read_back`] as f32 values.
pub fn read_back_f32(
    ctx: &GpuContext,
    buffer: &wgpu::Buffer,
    range: Range<u64>,
) -> Result<Vec<f32>, GpuError> {
    Ok(bytemuck::pod_collect_to_vec(&read_back(
        ctx, buffer, range,
    )?))
}

/// A byte range of a buffer as a kernel binds it: the binding starts at an aligned `offset` at or
/// below the data and covers `size` bytes (whole words); the data starts `skip` bytes into it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Window {
    pub offset: u64,
    pub size: u64,
    pub skip: u64,
}

impl Window {
    /// The window around bytes `start..start + len`, for a binding-offset alignment `align`.
    pub fn around(start: u64, len: u64, align: u64) -> Window {
        let offset = start - start % align;
        let skip = start - offset;
        Window {
            offset,
            size: round_up(skip + len, 4),
            skip,
        }
    }

    pub fn binding<'a>(&self, buffer: &'a wgpu::Buffer) -> wgpu::BindingResource<'a> {
        wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer,
            offset: self.offset,
            size: std::num::NonZeroU64::new(self.size),
        })
    }
}

/// Splits `rows` rows into consecutive ranges such that, for every tensor a kernel binds (one
/// entry of `row_bytes` per tensor, all indexed by the same rows), a range's window
/// ([`Window::around`]) fits in `max_binding` bytes. One range when everything fits.
pub fn split_rows(
    what: &str,
    rows: u64,
    row_bytes: &[u64],
    max_binding: u64,
    align: u64,
) -> Result<Vec<Range<u64>>, GpuError> {
    // A window adds at most align - 1 bytes of skip and 3 of padding in front of the data.
    let room = max_binding.saturating_sub(align + 3);
    let mut rows_per_range = rows.max(1);
    for &bytes in row_bytes.iter().filter(|&&b| b > 0) {
        if bytes > room {
            return Err(GpuError::TooLarge {
                what: format!("one row of {what} (bytes)"),
                size: bytes,
                limit: max_binding,
                limit_name: "max_storage_buffer_binding_size",
            });
        }
        rows_per_range = rows_per_range.min(room / bytes);
    }
    Ok((0..rows)
        .step_by(rows_per_range as usize)
        .map(|start| start..(start + rows_per_range).min(rows))
        .collect())
}

/// A dispatch grid for `workgroups` workgroups of 1-D work: (x, y) with x at most the
/// per-dimension limit; the kernel recovers its flat index with `flat_workgroup` (wgsl/grid.wgsl)
/// and guards the overshoot of the last row.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Grid {
    pub x: u32,
    pub y: u32,
}

impl Grid {
    pub fn for_workgroups(workgroups: u64, max_per_dimension: u32) -> Result<Grid, GpuError> {
        let max = u64::from(max_per_dimension);
        let x = workgroups.min(max);
        let y = if x == 0 { 0 } else { workgroups.div_ceil(x) };
        if y > max {
            return Err(GpuError::TooLarge {
                what: format!("a dispatch of {workgroups} workgroups"),
                size: workgroups,
                limit: max * max,
                limit_name: "max_compute_workgroups_per_dimension squared",
            });
        }
        Ok(Grid {
            x: x as u32,
            y: y as u32,
        })
    }

    pub fn dispatch(&self, pass: &mut wgpu::ComputePass) {
        pass.dispatch_workgroups(self.x, self.y, 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_start_aligned_and_cover_the_data() {
        let w = Window::around(1000, 210, 256);
        assert_eq!(w.offset, 768);
        assert_eq!(w.skip, 232);
        assert_eq!(w.size, 444);
        assert!(w.offset + w.skip + 210 <= w.offset + w.size);
    }

    #[test]
    fn split_rows_keeps_every_window_inside_the_binding() {
        let (max, align) = (1 << 20, 256);
        let row_bytes = [4 * 1000, 1000 / 32 * 34];
        let ranges = split_rows("t", 777, &row_bytes, max, align).unwrap();
        assert!(ranges.len() > 1);
        assert_eq!(ranges.first().unwrap().start, 0);
        assert_eq!(ranges.last().unwrap().end, 777);
        for pair in ranges.windows(2) {
            assert_eq!(pair[0].end, pair[1].start);
        }
        for r in &ranges {
            for &b in &row_bytes {
                // The worst-placed start: one byte short of an alignment boundary.
                let w = Window::around(align - 1, (r.end - r.start) * b, align);
                assert!(w.size <= max, "{r:?} row bytes {b}: {w:?}");
            }
        }
    }

    #[test]
    fn split_rows_rejects_a_row_larger_than_a_binding() {
        assert!(split_rows("t", 2, &[1 << 21], 1 << 20, 256).is_err());
        assert_eq!(split_rows("t", 0, &[4], 1 << 20, 256).unwrap(), vec![]);
    }

    #[test]
    fn grids_wrap_into_a_second_dimension_past_the_limit() {
        assert_eq!(
            Grid::for_workgroups(10, 65535).unwrap(),
            Grid { x: 10, y: 1 }
        );
        assert_eq!(
            Grid::for_workgroups(65536, 65535).unwrap(),
            Grid { x: 65535, y: 2 }
        );
        assert_eq!(Grid::for_workgroups(0, 65535).unwrap(), Grid { x: 0, y: 0 });
        assert!(Grid::for_workgroups(65535 * 65535 + 1, 65535).is_err());
    }
}
