// gated_delta_chunk_halves — the f16 cells of gated_delta_chunk_coop.wgsl one half each (its
// first layout, the engine's default): the f16 scratch `halves` and the workgroup tiles h16, s16
// and d16 are arrays of f16, cooperative loads point at an f16 and count strides in halves.
// gated_delta_chunk_quads.wgsl is the same interface over vec4<f16> cells; the kernel is written
// once against it: it stores four consecutive halves at a time (`put_*4`, `at` a multiple of 4)
// and loads fragments at &array[at / CELL] with strides / CELL (every fragment offset and
// stride of the kernel is a multiple of 4 halves).
// requires: gated_delta_chunk_coop.wgsl (the tiles' sizes).

alias HalfCell = f16;
// Halves per cell.
const CELL: u32 = 1u;

@group(0) @binding(7) var<storage, read_write> halves: array<HalfCell>;

fn put_halves4(at: u32, x: vec4<f16>) {
    halves[at] = x.x;
    halves[at + 1u] = x.y;
    halves[at + 2u] = x.z;
    halves[at + 3u] = x.w;
}

fn put_h16_4(at: u32, x: vec4<f16>) {
    h16[at] = x.x;
    h16[at + 1u] = x.y;
    h16[at + 2u] = x.z;
    h16[at + 3u] = x.w;
}

fn put_s16_4(at: u32, x: vec4<f16>) {
    s16[at] = x.x;
    s16[at + 1u] = x.y;
    s16[at + 2u] = x.z;
    s16[at + 3u] = x.w;
}

fn put_d16_4(at: u32, x: vec4<f16>) {
    d16[at] = x.x;
    d16[at + 1u] = x.y;
    d16[at + 2u] = x.z;
    d16[at + 3u] = x.w;
}
