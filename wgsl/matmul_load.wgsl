// matmul_load — what every mat-mul variant shares: bindings, parameters, the loaders that fill
// a workgroup's W and X tiles for one K step, and the guarded output store
//
// Math (per row range of W, see matmul.wgsl): Y[t, y_col + r] (+)= Σ_k W[r, k] · X[t, k]
// bindings: 0 w (read: GGUF blocks as stored, this range's rows; declared by the kernel with its
//           `src_word`: matmul_words.wgsl as u32 words, matmul_x16.wgsl as vec4<u32>) · 1 x
//           (array<f32>, read: [n_tokens, cols]) · 2 y (array<f32>, read_write: [n_tokens,
//           y_stride]) · 3 params (uniform Params, per range) · 4 step (uniform Step: n_tokens)
// Loaders work in quads: four consecutive k of one W row or one X row, which is what
// `dequant4` returns for every block type (block rows are whole blocks of 32 or 256, so a quad
// never straddles two). Neighbouring invocations take neighbouring quads of the same row, so the
// TILE_K elements of a row in one K step are read by TILE_K / 4 adjacent invocations.
// Everything outside the matrix (rows ≥ rows, tokens ≥ n_tokens, k ≥ cols) loads as zero, so
// ragged edges need no special case in the inner loops.
// requires: bytes.wgsl, blocks.wgsl, dequant_type.wgsl, step.wgsl, the weight binding and its
//           src_word (matmul_words.wgsl or the kernel's); the kernel's consts WG,
//           TILE_T, TILE_R, TILE_K (a multiple of 4) and its tile storage:
//           fn put_w(r, k, v: vec4<f32>) and fn put_x(t, k, v: vec4<f32>) store a quad at
//           k..k+3 of tile row r (token t).
// provides: the type overrides, struct Params, the other bindings, load_tiles (and its parts
//           w_tile_quad / put_w_quad / x_tile_quad / put_x_quad), store_output.

// The ggml type of W (dequant_type.wgsl) and its block geometry (engine `kernels::type_constants`).
override GGML_TYPE: u32;
override BLOCK_ELEMS: u32 = 1u;
override BLOCK_BYTES: u32;

struct Params {
    // W rows in this range (this dispatch's outputs per token).
    rows: u32,
    // Row length of W and X (the input width).
    cols: u32,
    // Byte offset of the range's first row inside the w binding.
    w_byte: u32,
    // Bytes per W row.
    row_bytes: u32,
    // Y column of the range's first row.
    y_col: u32,
    // Y row length: every row of W, all ranges together.
    y_stride: u32,
    // 1: Y += W·X (residual fusion); 0: Y = W·X.
    accumulate: u32,
    // Row length of the f16 copy of X (matmul_x16.wgsl), in vec4s: cols rounded up to 64, /4.
    x16_stride: u32,
    // Slices K is summed in (matmul_split.wgsl), fixed by the weight's shape: 1 is all of K.
    k_slices: u32,
    // The RMSNorm eps of matmul_x16.wgsl's `to_f16_norm` (unread elsewhere).
    eps: f32,
}

@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;
@group(0) @binding(4) var<uniform> step: Step;

const QUADS_K: u32 = TILE_K / 4u;

// W[r, k..k+3] of this range, zero outside the matrix.
fn w_quad(r: u32, k: u32) -> vec4<f32> {
    if r >= params.rows || k >= params.cols {
        return vec4<f32>(0.0);
    }
    let base = params.w_byte + r * params.row_bytes;
    if BLOCK_ELEMS == 1u {
        // F32/F16/BF16 rows may end inside a quad.
        var v = vec4<f32>(0.0);
        for (var j = 0u; j < min(4u, params.cols - k); j++) {
            v[j] = dequant1(base, k + j);
        }
        return v;
    }
    // Block rows are whole blocks of at least 32 elements: the quad is inside the row.
    return dequant4(base + (k / BLOCK_ELEMS) * BLOCK_BYTES, k % BLOCK_ELEMS);
}

// X[t, k..k+3], zero outside the matrix.
fn x_quad(t: u32, k: u32) -> vec4<f32> {
    if t >= step.n_tokens || k >= params.cols {
        return vec4<f32>(0.0);
    }
    let at = t * params.cols + k;
    if k + 4u <= params.cols {
        return vec4<f32>(x[at], x[at + 1u], x[at + 2u], x[at + 3u]);
    }
    var v = vec4<f32>(0.0);
    for (var j = 0u; j < params.cols - k; j++) {
        v[j] = x[at + j];
    }
    return v;
}

// Quad i (0 ≤ i < TILE_R · QUADS_K) of the W tile for the K step at k0, and where it goes: row
// i / QUADS_K, k = (i % QUADS_K) · 4. Consecutive i are consecutive quads of one row.
fn w_tile_quad(i: u32, r0: u32, k0: u32) -> vec4<f32> {
    return w_quad(r0 + i / QUADS_K, k0 + (i % QUADS_K) * 4u);
}

fn put_w_quad(i: u32, v: vec4<f32>) {
    put_w(i / QUADS_K, (i % QUADS_K) * 4u, v);
}

// The same for the X tile (tokens instead of rows).
fn x_tile_quad(i: u32, t0: u32, k0: u32) -> vec4<f32> {
    return x_quad(t0 + i / QUADS_K, k0 + (i % QUADS_K) * 4u);
}

fn put_x_quad(i: u32, v: vec4<f32>) {
    put_x(i / QUADS_K, (i % QUADS_K) * 4u, v);
}

// Fills the tiles for the K step at k0: W rows r0..r0+TILE_R, X tokens t0..t0+TILE_T, elements
// k0..k0+TILE_K. Called by every invocation; the caller barriers before reading the tiles.
fn load_tiles(lid: u32, r0: u32, t0: u32, k0: u32) {
    for (var i = lid; i < TILE_R * QUADS_K; i += WG) {
        put_w_quad(i, w_tile_quad(i, r0, k0));
    }
    for (var i = lid; i < TILE_T * QUADS_K; i += WG) {
        put_x_quad(i, x_tile_quad(i, t0, k0));
    }
}

// Y[t, y_col + r] = value (or += value), for outputs inside the matrix only.
fn store_output(t: u32, r: u32, value: f32) {
    if t >= step.n_tokens || r >= params.rows {
        return;
    }
    let at = t * params.y_stride + params.y_col + r;
    if params.accumulate != 0u {
        y[at] = y[at] + value;
    } else {
        y[at] = value;
    }
}
