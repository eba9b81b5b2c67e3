// kv_paged — addressing of the paged KV cache
//
// A layer's K (and, separately, V) cache is an array of physical pages of PAGE = 2^page_shift
// token slots. Inside a page, kv head g's slots are contiguous ([page][kv head][slot][head_dim]),
// so attention streams PAGE·head_dim consecutive elements per head per page. A sequence's tokens
// are found through its row of the page table: logical page p = pos >> page_shift of row r lives
// at physical page page_table[r·pages_per_row + p]. One sequence with the identity table is the
// plain contiguous cache; the radix prefix cache shares physical pages between rows.
// Element type: `KvScalar` (kv_f32.wgsl or kv_f16.wgsl).
// requires: `var<storage, read> page_table: array<u32>`.
// provides: struct KvGeometry (16 bytes, for uniform structs), kv_base(geometry, row, pos, g):
//           the element index of (pos, head g, d = 0).

struct KvGeometry {
    n_kv: u32,
    head_dim: u32,
    page_shift: u32,
    pages_per_row: u32,
}

fn kv_base(kv: KvGeometry, page_row: u32, pos: u32, g: u32) -> u32 {
    let page = page_table[page_row * kv.pages_per_row + (pos >> kv.page_shift)];
    let slot = pos & ((1u << kv.page_shift) - 1u);
    return (((page * kv.n_kv + g) << kv.page_shift) + slot) * kv.head_dim;
}
