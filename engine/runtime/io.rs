//! Reading a step's small results (tokens, logits) back to the host.

use crate::gpu::{GpuContext, GpuError};

/// A reusable mappable buffer for reading small results back without allocating per step.
pub struct Staging {
    buffer: wgpu::Buffer,
    pending: Option<Pending>,
}

struct Pending {
    index: wgpu::SubmissionIndex,
    mapped: std::sync::mpsc::Receiver<Result<(), wgpu::BufferAsyncError>>,
}

impl Staging {
    pub fn new(ctx: &GpuContext, label: &str, bytes: u64) -> Staging {
        let buffer = ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes.max(4),
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        Staging {
            buffer,
            pending: None,
        }
    }

    /// Records a copy of `src[offset..offset + bytes]` into this buffer.
    pub fn record_copy(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        src: &wgpu::Buffer,
        offset: u64,
        bytes: u64,
    ) {
        encoder.copy_buffer_to_buffer(src, offset, &self.buffer, 0, bytes);
    }

    /// Marks the copy as submitted in `index` and asks for the mapping.
    pub fn submitted(&mut self, index: wgpu::SubmissionIndex, bytes: u64) {
        let (sender, mapped) = std::sync::mpsc::channel();
        self.buffer
            .slice(..bytes)
            .map_async(wgpu::MapMode::Read, move |result| {
                let _ = sender.send(result);
            });
        self.pending = Some(Pending { index, mapped });
    }

    /// Waits for the submitted copy and returns its bytes.
    pub fn wait(&mut self, ctx: &GpuContext, bytes: u64) -> Result<Vec<u8>, GpuError> {
        let Pending { index, mapped } = self
            .pending
            .take()
            .ok_or_else(|| GpuError::Readback("no copy was submitted".into()))?;
        ctx.device.poll(wgpu::PollType::Wait {
            submission_index: Some(index),
            timeout: None,
        })?;
        // The map callback runs inside poll; once the submission is done it has been called.
        mapped
            .recv()
            .map_err(|e| e.to_string())
            .and_then(|r| r.map_err(|e| e.to_string()))
            .map_err(GpuError::Readback)?;
        let slice = self.buffer.slice(..bytes);
        let out = slice
            .get_mapped_range()
            .map_err(|e| GpuError::Readback(e.to_string()))?
            .to_vec();
        self.buffer.unmap();
        Ok(out)
    }
}
