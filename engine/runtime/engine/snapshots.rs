//! [`SnapshotPool`]: the buffers recurrent-state snapshots (hybrid models) are written to, reused
//! instead of created per snapshot.
//!
//! A snapshot of the 27B shape's Gated DeltaNet state is 157 MB, and a request that uses the
//! prefix cache takes one to three (its branch point, its prompt's last page, its end). Creating
//! a buffer that size is a device allocation on the request's path, and dropping an evicted
//! snapshot frees it again; here the buffers the prefix cache lets go come back and the next
//! snapshot is written to one of them. Idle buffers count in the cache budget: the pool keeps
//! only as many as fit beside the bytes the tree holds, so snapshots never take more device
//! memory than the budget allowed when each was a buffer of its own.

use crate::gpu::{GpuContext, GpuError, fill_f32, storage_buffer};

/// What the snapshot pool has done since load.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SnapshotStats {
    /// Snapshot buffers created (a device allocation each).
    pub created: u64,
    /// Snapshots written to a buffer a previous snapshot had used.
    pub reused: u64,
    /// Bytes of the buffers idle in the pool now.
    pub idle_bytes: u64,
}

pub(super) struct SnapshotPool {
    /// Bytes of one snapshot (the model's state bytes).
    bytes: u64,
    idle: Vec<wgpu::Buffer>,
    /// NaN-fill each buffer as it goes idle (tests): a snapshot written to a reused buffer only
    /// in part, or read before it was written, cannot pass for the right state.
    poison: bool,
    stats: SnapshotStats,
}

impl SnapshotPool {
    pub(super) fn new(bytes: u64, poison: bool) -> SnapshotPool {
        SnapshotPool {
            bytes,
            idle: Vec::new(),
            poison,
            stats: SnapshotStats::default(),
        }
    }

    /// A buffer for one snapshot: an idle one, else a new one. An idle buffer may still be read
    /// or written by work already submitted; what the caller records into it is submitted
    /// later, so it runs after, in queue order.
    pub(super) fn take(&mut self, ctx: &GpuContext) -> Result<wgpu::Buffer, GpuError> {
        if let Some(buffer) = self.idle.pop() {
            self.stats.reused += 1;
            return Ok(buffer);
        }
        self.stats.created += 1;
        storage_buffer(ctx, "state snapshot", self.bytes)
    }

    /// Takes back buffers no snapshot lives in any more, keeping at most `room` bytes of idle
    /// ones (the budget the prefix cache does not use now); the rest are dropped.
    pub(super) fn give_back(
        &mut self,
        ctx: &GpuContext,
        buffers: Vec<wgpu::Buffer>,
        room: u64,
    ) -> Result<(), GpuError> {
        let keep = usize::try_from(room / self.bytes.max(1)).unwrap_or(usize::MAX);
        self.idle.truncate(keep);
        for buffer in buffers.into_iter().take(keep - self.idle.len()) {
            if self.poison {
                fill_f32(ctx, &buffer, f32::NAN)?;
            }
            self.idle.push(buffer);
        }
        Ok(())
    }

    pub(super) fn stats(&self) -> SnapshotStats {
        SnapshotStats {
            idle_bytes: self.idle.len() as u64 * self.bytes,
            ..self.stats
        }
    }
}
