// gated_delta_chunk_quads — the f16 cells of gated_delta_chunk_coop.wgsl four halves each
// (`FAK_GDN_CHUNK=coop+quads`): the f16 scratch `halves` and the workgroup tiles h16, s16 and
// d16 are arrays of vec4<f16>, stored 8 bytes at a time, and cooperative loads point at a
// vec4<f16> and count strides in vec4s — as matmul_x16.wgsl's and attn_prefill_coop.wgsl's
// tiles, where the staged mat-mul's f16 arrays (2-byte stores, scalar loads) were several times
// slower (experiments/NOTES.md, gemm). The same interface as gated_delta_chunk_halves.wgsl, the
// same values in the same places: the kernel's results are bit for bit those of that layout.
// requires: gated_delta_chunk_coop.wgsl (the tiles' sizes).

alias HalfCell = vec4<f16>;
// Halves per cell.
const CELL: u32 = 4u;

@group(0) @binding(7) var<storage, read_write> halves: array<HalfCell>;

fn put_halves4(at: u32, x: vec4<f16>) {
    halves[at / 4u] = x;
}

fn put_h16_4(at: u32, x: vec4<f16>) {
    h16[at / 4u] = x;
}

fn put_s16_4(at: u32, x: vec4<f16>) {
    s16[at / 4u] = x;
}

fn put_d16_4(at: u32, x: vec4<f16>) {
    d16[at / 4u] = x;
}
