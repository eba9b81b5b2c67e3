//! The page table every attention layer shares: one row per sequence slot, mapping a
//! sequence's logical KV pages to physical pages of the shared pool (the layout is
//! `gpu::kernels::kv_cache`'s).

use crate::gpu::buffers::{upload, write};
use crate::gpu::context::GpuContext;
use crate::gpu::error::GpuError;
use crate::gpu::kernels::kv_cache::KvLayout;
use crate::gpu::kernels::support::{shape_error, words};

/// The name the table's own errors carry.
const NAME: &str = "kv_cache";

/// The page table: `rows` rows of `pages_per_row` physical page numbers (u32), one row per
/// sequence slot.
pub struct PageTable {
    pub buffer: wgpu::Buffer,
    pub rows: u32,
    pub pages_per_row: u32,
}

impl PageTable {
    /// One row mapping logical page i to physical page i: the table of a single sequence.
    pub fn identity(ctx: &GpuContext, pages_per_row: u32) -> Result<PageTable, GpuError> {
        let row: Vec<u32> = (0..pages_per_row).collect();
        Self::from_rows(ctx, pages_per_row, &[row])
    }

    /// A table holding `rows` (each at most `pages_per_row` pages; the rest of a row is 0).
    pub fn from_rows(
        ctx: &GpuContext,
        pages_per_row: u32,
        rows: &[Vec<u32>],
    ) -> Result<PageTable, GpuError> {
        let mut flat = vec![0u32; rows.len() * pages_per_row as usize];
        for (r, row) in rows.iter().enumerate() {
            if row.len() > pages_per_row as usize {
                return Err(shape_error(
                    NAME,
                    format!(
                        "page-table row {r} has {} pages, more than {pages_per_row}",
                        row.len()
                    ),
                ));
            }
            flat[r * pages_per_row as usize..][..row.len()].copy_from_slice(row);
        }
        Ok(PageTable {
            buffer: upload(ctx, "page table", bytemuck::cast_slice(&flat))?,
            rows: rows.len() as u32,
            pages_per_row,
        })
    }

    /// Queues a rewrite of row `row` from its first page (lands before the next submit).
    pub fn write_row(&self, ctx: &GpuContext, row: u32, pages: &[u32]) -> Result<(), GpuError> {
        if row >= self.rows || pages.len() > self.pages_per_row as usize {
            return Err(shape_error(
                NAME,
                format!(
                    "page-table row {row} of {} pages: the table has {} rows of {}",
                    pages.len(),
                    self.rows,
                    self.pages_per_row
                ),
            ));
        }
        let offset = u64::from(row) * u64::from(self.pages_per_row) * 4;
        write(ctx, &self.buffer, offset, bytemuck::cast_slice(pages))
    }

    /// Checks that the table fits `layout`, and returns its binding.
    pub(crate) fn binding(
        &self,
        ctx: &GpuContext,
        kernel: &'static str,
        layout: &KvLayout,
    ) -> Result<wgpu::BindingResource<'_>, GpuError> {
        if self.pages_per_row != layout.pages_per_row {
            return Err(shape_error(
                kernel,
                format!(
                    "the page table has rows of {} pages, the KV layout {}",
                    self.pages_per_row, layout.pages_per_row
                ),
            ));
        }
        words(
            ctx,
            kernel,
            "the page table",
            &self.buffer,
            u64::from(self.rows) * u64::from(self.pages_per_row),
        )
    }
}
