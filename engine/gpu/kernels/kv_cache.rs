//! `kv_cache`: the paged KV cache of the attention layers — its layout, buffers and page table.
//! `rope_kv` writes a step's k and v rows into it, `attn_prefill` and `attn_decode` read them
//! (addressing in wgsl/kv_paged.wgsl).
//!
//! A layer's K cache and V cache are each `n_pages` physical pages of `page_size` token slots,
//! laid out `[page][kv head][slot][head_dim]` in f32 or f16. A sequence reaches its tokens through
//! a row of the [`PageTable`]: logical page `pos / page_size` of row r is physical page
//! `table[r][pos / page_size]`. One sequence with the identity table is a plain contiguous cache;
//! the radix prefix cache (issue 7) gives sequences rows that share physical pages. The table is
//! shared by every layer (all layers place a token in the same page).

use super::support::shape_error;
use crate::gpu::buffers::storage_buffer;
use crate::gpu::context::GpuContext;
use crate::gpu::error::GpuError;
use crate::gpu::paths::KernelPaths;

/// The name the cache's own errors carry.
const NAME: &str = "kv_cache";

/// The element type of the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KvDtype {
    F32,
    /// Half the memory and bandwidth (llama.cpp's default); needs SHADER_F16.
    F16,
}

impl KvDtype {
    /// The cache type the kernels of `variant` read and write (the f16 path → f16).
    pub fn of(variant: KernelPaths) -> KvDtype {
        if variant.f16 {
            KvDtype::F16
        } else {
            KvDtype::F32
        }
    }

    pub fn bytes(self) -> u64 {
        match self {
            KvDtype::F32 => 4,
            KvDtype::F16 => 2,
        }
    }
}

/// The shape of one layer's paged cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KvLayout {
    pub n_kv: u32,
    pub head_dim: u32,
    /// Token slots per page, a power of two.
    pub page_size: u32,
    /// Physical pages in the cache.
    pub n_pages: u32,
    /// Entries per page-table row: the most pages one sequence can use.
    pub pages_per_row: u32,
    pub dtype: KvDtype,
}

/// `struct KvGeometry` of wgsl/kv_paged.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct KvGeometry {
    n_kv: u32,
    head_dim: u32,
    page_shift: u32,
    pages_per_row: u32,
}

impl KvLayout {
    /// A layout for one sequence of up to `max_positions` tokens in pages of `page_size`, with
    /// exactly the pages it needs (use it with [`PageTable::identity`]).
    pub fn contiguous(
        n_kv: u32,
        head_dim: u32,
        page_size: u32,
        max_positions: u32,
        dtype: KvDtype,
    ) -> KvLayout {
        let pages = max_positions.div_ceil(page_size.max(1)).max(1);
        KvLayout {
            n_kv,
            head_dim,
            page_size,
            n_pages: pages,
            pages_per_row: pages,
            dtype,
        }
    }

    /// Checks the layout: positive sizes, a power-of-two page, and a cache every element of
    /// which a u32 index can reach.
    pub fn check(&self, kernel: &'static str) -> Result<(), GpuError> {
        let KvLayout {
            n_kv,
            head_dim,
            page_size,
            n_pages,
            pages_per_row,
            ..
        } = *self;
        if n_kv == 0 || head_dim == 0 || n_pages == 0 || pages_per_row == 0 {
            return Err(shape_error(
                kernel,
                format!("KV layout {self:?}: every size must be positive"),
            ));
        }
        if !page_size.is_power_of_two() {
            return Err(shape_error(
                kernel,
                format!("KV page size {page_size} is not a power of two"),
            ));
        }
        if self.elements() > u64::from(u32::MAX) {
            return Err(shape_error(
                kernel,
                format!(
                    "KV layout {self:?}: {} elements per cache exceed u32 indexing",
                    self.elements()
                ),
            ));
        }
        Ok(())
    }

    /// Elements of one cache (K or V) of one layer.
    pub fn elements(&self) -> u64 {
        u64::from(self.n_pages)
            * u64::from(self.n_kv)
            * u64::from(self.page_size)
            * u64::from(self.head_dim)
    }

    /// Bytes of one cache (K or V) of one layer.
    pub fn cache_bytes(&self) -> u64 {
        self.elements() * self.dtype.bytes()
    }

    /// The most positions one sequence can hold.
    pub fn max_positions(&self) -> u64 {
        u64::from(self.pages_per_row) * u64::from(self.page_size)
    }

    /// The element index of (physical `page`, kv head `g`, `slot` in the page, dim 0).
    pub fn element_index(&self, page: u32, g: u32, slot: u32) -> u64 {
        ((u64::from(page) * u64::from(self.n_kv) + u64::from(g)) * u64::from(self.page_size)
            + u64::from(slot))
            * u64::from(self.head_dim)
    }

    pub(crate) fn geometry(&self) -> KvGeometry {
        KvGeometry {
            n_kv: self.n_kv,
            head_dim: self.head_dim,
            page_shift: self.page_size.trailing_zeros(),
            pages_per_row: self.pages_per_row,
        }
    }
}

/// One layer's K and V caches.
pub struct KvCache {
    pub layout: KvLayout,
    pub k: wgpu::Buffer,
    pub v: wgpu::Buffer,
}

impl KvCache {
    /// Allocates both caches (contents undefined until written; wgpu zeroes them on first use).
    pub fn new(ctx: &GpuContext, layout: KvLayout) -> Result<KvCache, GpuError> {
        layout.check(NAME)?;
        let limit = ctx.max_binding_size();
        if layout.cache_bytes() > limit {
            return Err(GpuError::TooLarge {
                what: format!("a KV cache of {layout:?} (bytes)"),
                size: layout.cache_bytes(),
                limit,
                limit_name: "max_storage_buffer_binding_size",
            });
        }
        Ok(KvCache {
            layout,
            k: storage_buffer(ctx, "k cache", layout.cache_bytes())?,
            v: storage_buffer(ctx, "v cache", layout.cache_bytes())?,
        })
    }

    /// Bytes of one physical page of one cache (K or V): every kv head's slots.
    pub fn page_bytes(&self) -> u64 {
        let l = &self.layout;
        u64::from(l.n_kv) * u64::from(l.page_size) * u64::from(l.head_dim) * l.dtype.bytes()
    }

    /// Records copying physical page `src` of both caches into page `dst` (copy-on-write of a
    /// shared page). A page is one contiguous run of the layout; wgpu never copies within one
    /// buffer, so each run goes through `bounce` (at least [`KvCache::page_bytes`], COPY_SRC
    /// and COPY_DST), in order on the encoder.
    pub fn copy_page(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        src: u32,
        dst: u32,
        bounce: &wgpu::Buffer,
    ) -> Result<(), GpuError> {
        let bytes = self.page_bytes();
        let n_pages = self.layout.n_pages;
        let problem = if src >= n_pages || dst >= n_pages {
            Some(format!("pages {src} → {dst} of a cache of {n_pages}"))
        } else if src == dst {
            Some(format!("page {src} onto itself"))
        } else if !bytes.is_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT) || bounce.size() < bytes {
            Some(format!(
                "pages of {bytes} bytes through a bounce buffer of {} (whole words needed)",
                bounce.size()
            ))
        } else {
            None
        };
        if let Some(problem) = problem {
            return Err(shape_error("kv page copy", problem));
        }
        let at = |page: u32| self.layout.element_index(page, 0, 0) * self.layout.dtype.bytes();
        for cache in [&self.k, &self.v] {
            encoder.copy_buffer_to_buffer(cache, at(src), bounce, 0, bytes);
            encoder.copy_buffer_to_buffer(bounce, 0, cache, at(dst), bytes);
        }
        Ok(())
    }
}

/// A shape error unless the cache holds the type the kernel variant reads or writes.
pub(crate) fn check_dtype(
    kernel: &'static str,
    layout: &KvLayout,
    dtype: KvDtype,
) -> Result<(), GpuError> {
    if layout.dtype == dtype {
        Ok(())
    } else {
        Err(shape_error(
            kernel,
            format!(
                "the cache holds {:?} but this variant uses {dtype:?}",
                layout.dtype
            ),
        ))
    }
}
