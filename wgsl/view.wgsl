// view — where an activation operand's elements sit in its f32 buffer
//
// Element (t, h, i) — token t, head (or sub-row) h of that token, index i inside the head — is at
//   offset + t·token_stride + h·head_stride + i.
// Contiguous [n_tokens, width] rows are (0, width, 0) with one head; contiguous heads of width hd
// are (0, n_heads·hd, hd). A strided view reads a slice of a wider row without a copy: qwen35's
// q projection holds [q | gate] per head, so its q heads are (0, 2·hd·n_head, 2·hd) and its gates
// (hd, 2·hd·n_head, 2·hd).
// provides: struct View (16 bytes, so it can sit inside a uniform struct), view_index.

struct View {
    offset: u32,
    token_stride: u32,
    head_stride: u32,
    pad: u32,
}

fn view_index(v: View, t: u32, h: u32, i: u32) -> u32 {
    return v.offset + t * v.token_stride + h * v.head_stride + i;
}
