// matmul_x16 — Y[t, r] (+)= Σ_k W[r, k] · X[t, k] for t < n_tokens on cooperative matrices, X
//   converted to f16 once per product rather than once per tile (W a GGUF weight of any decoded
//   type, X f32 [n_tokens, cols], Y f32 [n_tokens, rows]); f16 inputs, f32 accumulation
//
// bindings: those of matmul_load.wgsl and matmul_split.wgsl (1 x · 2 y · 3 params · 4 step ·
//           5 partials), with 0 w declared here as array<vec4<u32>> (16-byte loads of Q4_K
//           blocks; src_word reads single words of it for the other types), and 6 x16
//           (array<vec4<f16>>, read_write: X rounded to f16, [n_tokens, 4 · x16_stride], the
//           row padded with zeros to a multiple of 64), 7 norm_w (`to_f16_norm` only).
// dispatch: `to_f16` first: (ceil(x16_stride / CW), n_tokens, 1) workgroups of CW (or, folding
//           the op that produced X, `to_f16_swiglu` on that grid or `to_f16_norm` on (1, n_tokens,
//           1): below); then `main`:
//           (ceil(n_tokens / TILE_T), ceil(rows / TILE_R), Z) per row range of W: Z = 1, each
//           workgroup summing K's slices in order into a second set of accumulators, or Z = the
//           slice count (matmul_split.wgsl, and `reduce_partials` after it).
// pipelines: `main` one per ggml type (the type overrides of matmul_load.wgsl), `to_f16`,
//            `to_f16_swiglu` and `reduce_partials` once, `to_f16_norm` per NORM_WG.
// specialisation (consts the host puts before the files: engine `matmul::X16Tiling`): SG_T (the
//   workgroup's subgroup grid is SG_T × 2: 4 → 128 × 128 tiles of 256 invocations, 2 → 64 × 128
//   of 128), TILE_K (the K step: 32 or 64), STAGES (pairs of tiles in workgroup memory: 2,
//   one barrier per K step, or 1, two), RAW_Q6K (1: Q6_K weights take the raw path below,
//   as Q4_K always does; 2: the raw path in pairs of tasks that share their high bits, K steps
//   of 64 only; 0: they decode through dequant4 as they load) and SLICED (1: K summed
//   in the weight's fixed slices, matmul_split.wgsl, at the cost of a second set of
//   accumulators; 0: all of K in one run when the grid does not split it — a row's result then
//   depends on whether its step split K: for measuring what the slices cost, not for the
//   engine).
// variants: after the shape file matmul_coop16.wgsl (Vulkan) or matmul_coop8.wgsl (Metal); the
//           module gets `enable f16; enable wgpu_cooperative_matrix;` from the variant, which
//           requires SUBGROUP (for subgroup_id); subgroups are assumed 32 wide (the host offers
//           the variant only there).
//
// As matrices: Y_tile (tokens × rows) = X_tile (tokens × k) · W_tileᵀ (k × rows), X the A
// operand (row-major in the tile, coopLoadT) and W the B operand (a W row is a column of B,
// coopLoad). Subgroup s owns the 2 × 4 tiles (32 tokens × 64 rows for 16×16) at
// ((s / 2)·WARP_T, (s % 2)·WARP_R) of the workgroup's TILE_T × TILE_R block; its 8 accumulators
// are named values (an array of cooperative matrices indexed in a loop lived in local memory on
// the H200: experiments/NOTES.md, session 2026-12-03 #4 call 3).
//
// What differs from matmul_coop.wgsl, and why (experiments/NOTES.md, "gemm (session 2026-12-04
// #4)"): that kernel's rate stayed at ~35 TFLOP/s whatever its K loop did, and every variant of
// it (i) converted each X element to f16 once per row tile (TILE_R times over a product) from
// four scalar f32 loads, (ii) stored its tiles 2 bytes at a time, and (iii) waited for each K
// step's global loads before that step's MMAs: its "prefetch" decoded the next step's quads
// (which needs the loaded words) before the MMAs. Here:
// - X is converted once per product by `to_f16` into x16, and the tile loader moves 8-byte
//   vec4<f16> values from x16 into vec4<f16> tiles (whose rows are read by the fragment loads
//   with strides counted in vec4s, as SPIR-V counts a cooperative load's stride in elements of
//   the pointed-to type);
// - Q4_K weights are fetched 16 bytes at a time: a task of 16 consecutive k of one row is one
//   16-byte load of the block's head (d, dmin, the 12 scale bytes) and one of its 16 quant bytes
//   (Q6_K, whose 210-byte blocks are only 2-aligned: 12 word loads per task; in pairs, RAW_Q6K
//   = 2, 18 per two tasks: a K step of 64 holds two quarters of a block's half, whose elements
//   l and 32 + l take their two high bits from the same qh byte, and their scale bytes and d
//   from the same words);
// - the raw loads of step s + 1 are issued after step s - 1's tiles were written, so they are in
//   flight during step s's MMAs, and only then decoded and stored (the first use of a loaded
//   value comes after the MMAs). Other types decode through dequant4 after the MMAs (loaded and
//   decoded at once);
// - a workgroup whose block lies inside the matrix stores its accumulators straight to Y (or to
//   its slice's partial sums) with coopStoreT, adding Y's old values with coopLoadT when
//   accumulating; only ragged blocks go through matmul_coop_out.wgsl's staging tile.
// Rows and tokens past the matrix are loaded from the last row / token (their results are never
// stored), so the inner loads need no bounds; k past cols reads x16's zero padding, and W past
// cols is zero by w_quad's bounds (Q4_K rows are whole 256-element blocks, a multiple of TILE_K).
//
// Workgroup memory: STAGES · (TILE_R + TILE_T) · (TILE_K + 8) halves (rows padded by 8 halves so
// the 16-byte row segments of one fragment load fall in different banks) plus one f32 staging
// tile per subgroup; at most 48 KiB (NVIDIA's Vulkan limit): 128 × 128 with K steps of 32 in two
// stages is 40 KiB + 8 KiB.
//
// naga 30 workaround: coopLoad/coopStore pointers and strides are bound to `let`s first
// (wgpu-notes.md §7).
// requires: the specialisation consts, bytes.wgsl, blocks.wgsl, dequant_type.wgsl, step.wgsl,
//           reduce_subgroup.wgsl, strided_squares.wgsl (`to_f16_norm`), a shape file, then
//           matmul_load.wgsl, matmul_split.wgsl, matmul_coop_out.wgsl.

@group(0) @binding(0) var<storage, read> w: array<vec4<u32>>;
@group(0) @binding(6) var<storage, read_write> x16: array<vec4<f16>>;

fn src_word(index: u32) -> u32 {
    return w[index >> 2u][index & 3u];
}

const SG_R: u32 = 2u;
const SUBGROUP_WIDTH: u32 = 32u;
const WARP_T: u32 = 2u * COOP;
const WARP_R: u32 = 4u * COOP;
const WG: u32 = SG_T * SG_R * SUBGROUP_WIDTH;
const TILE_T: u32 = SG_T * WARP_T;
const TILE_R: u32 = SG_R * WARP_R;
// Row stride of the tiles in vec4<f16>s.
const STRIDE4: u32 = (TILE_K + 8u) / 4u;
// vec4s of one tile row per K step.
const ROW_VECS: u32 = TILE_K / 4u;
// Per invocation and K step: vec4s of X, quads of W (other types), 16-element tasks of W (Q4_K).
const X_VECS: u32 = TILE_T * ROW_VECS / WG;
const W_QUADS: u32 = TILE_R * ROW_VECS / WG;
const TASKS_K: u32 = TILE_K / 16u;
const W_TASKS: u32 = TILE_R * TASKS_K / WG;
const Q4_K: u32 = 12u;
const Q6_K: u32 = 14u;
// Q6_K pair tasks (RAW_Q6K = 2) per row and per K step: each is the 16 l of the step's even
// quarter and the same 16 l of the odd one. The tile loops run W_TASKS tasks per invocation as
// for every raw type (so a module without pairs is what it was); task indices past PAIR_TASKS
// fetch and store nothing.
const PAIRS_K: u32 = TILE_K / 32u;
const PAIR_TASKS: u32 = TILE_R * PAIRS_K;
// vec4s of raw words per task: Q4_K 2 (+ one unused), Q6_K 12 words, Q6_K pairs 18 (+ 2 unused).
const RAW_VECS: u32 = select(3u, 5u, RAW_Q6K == 2u);
// The pair tasks' vec4s 3 and 4, clamped into the array where there are no pairs (3 vecs), so
// that such a module validates: only a pair pipeline runs the functions that use them.
const RAW_V3: u32 = min(3u, RAW_VECS - 1u);
const RAW_V4: u32 = min(4u, RAW_VECS - 1u);

const_assert TILE_T * ROW_VECS % WG == 0u;
const_assert TILE_R * TASKS_K % WG == 0u;
const_assert TILE_K % 16u == 0u && 64u % TILE_K == 0u;
const_assert STAGES == 1u || STAGES == 2u;
const_assert RAW_Q6K <= 2u;
const_assert RAW_Q6K != 2u || (TILE_K == 64u && PAIR_TASKS % WG == 0u);

var<workgroup> w_tile: array<vec4<f16>, STAGES * TILE_R * STRIDE4>;
var<workgroup> x_tile: array<vec4<f16>, STAGES * TILE_T * STRIDE4>;

// matmul_load.wgsl's tile storage: quad v at k..k+3 of W row r (X token t) of the tiles, where
// a row index past TILE_R (TILE_T) is a row of the second stage.
fn put_w(r: u32, k: u32, v: vec4<f32>) {
    w_tile[r * STRIDE4 + k / 4u] = vec4<f16>(v);
}

fn put_x(t: u32, k: u32, v: vec4<f32>) {
    x_tile[t * STRIDE4 + k / 4u] = vec4<f16>(v);
}

// Invocations per workgroup of `to_f16`.
const CW: u32 = 256u;

// x16[t] = f16(X[t]), zero from cols to the padded row's end.
@compute @workgroup_size(CW)
fn to_f16(@builtin(global_invocation_id) id: vec3<u32>) {
    let t = id.y;
    if id.x >= params.x16_stride || t >= step.n_tokens {
        return;
    }
    x16[t * params.x16_stride + id.x] = vec4<f16>(x_quad(t, 4u * id.x));
}

// The prefill SwiGLU fold (engine `FAK_PREFILL_FOLD=swiglu`): X is [n_tokens, 2 · cols] rows of
// gate then up values (the gate/up product's output) and x16[t, k] = f16(silu(g) · u), with
// elementwise.wgsl's swiglu expression `g / (1 + e^−g) · u` in f32, then rounded as `to_f16`
// rounds that op's output: the unfolded bits (tests/gpu_matmul.rs pins it on the device).
// dispatch: as `to_f16`.
fn swiglu_value(t: u32, k: u32) -> f32 {
    if k >= params.cols {
        return 0.0;
    }
    let at = 2u * t * params.cols + k;
    let gate = x[at];
    let up = x[at + params.cols];
    return gate / (1.0 + exp(-gate)) * up;
}

@compute @workgroup_size(CW)
fn to_f16_swiglu(@builtin(global_invocation_id) id: vec3<u32>) {
    let t = id.y;
    if id.x >= params.x16_stride || t >= step.n_tokens {
        return;
    }
    let k = 4u * id.x;
    let v = vec4<f32>(swiglu_value(t, k), swiglu_value(t, k + 1u), swiglu_value(t, k + 2u),
                      swiglu_value(t, k + 3u));
    x16[t * params.x16_stride + id.x] = vec4<f16>(v);
}

// The prefill norm fold (engine `FAK_PREFILL_FOLD=norm`): x16[t] = f16(RMSNorm(X[t]) · norm_w)
// in one dispatch, for a product whose X is a norm's output (the norm's dispatch and its f32
// write and reread are gone). The f32 values are rms_norm.wgsl's for the same WG (the host picks
// its rule, `rms_norm::workgroup_size`): lane l sums the squares of X[t, l + j·NORM_WG] with
// strided_squares, workgroup_sum adds the lanes, scale = 1 / sqrt(total / cols + eps), and each
// value is (x · scale) · w; then rounded to f16 as `to_f16` rounds the norm's output. So the
// product's bits are the unfolded ones (tests/gpu_matmul.rs pins it on the device).
// bindings: 7 norm_w (read, f32 [cols]); eps in Params. dispatch: (1, n_tokens, 1) workgroups of
// NORM_WG, one per token row. requires (besides the above): reduce_*.wgsl, strided_squares.wgsl.
@group(0) @binding(7) var<storage, read> norm_w: array<f32>;

// The fold's workgroup size: rms_norm's WG for the row (its lane sums and their order). The
// reduction's partials array is sized by the product's WG (128 or 256: room for any NORM_WG here).
override NORM_WG: u32 = 256u;

// strided_squares.wgsl's element.
fn squares_value(c: u32) -> f32 {
    return x[c];
}

// norm_w[k] · (x[at] · scale), zero from cols on.
fn normed(at: u32, k: u32, scale: f32) -> f32 {
    if k >= params.cols {
        return 0.0;
    }
    return x[at] * scale * norm_w[k];
}

@compute @workgroup_size(NORM_WG)
fn to_f16_norm(@builtin(workgroup_id) wg: vec3<u32>, lanes: Lanes) {
    let t = wg.y;
    // Uniform per workgroup, so the reduction below stays in uniform control flow.
    if t >= step.n_tokens {
        return;
    }
    let row = t * params.cols;
    let squares = strided_squares(row + lanes.index, row + params.cols, NORM_WG);
    let total = workgroup_sum(squares, lanes);
    let scale = 1.0 / sqrt(total / f32(params.cols) + params.eps);
    for (var i = lanes.index; i < params.x16_stride; i += NORM_WG) {
        let k = 4u * i;
        let at = row + k;
        let v = vec4<f32>(normed(at, k, scale), normed(at + 1u, k + 1u, scale),
                          normed(at + 2u, k + 2u, scale), normed(at + 3u, k + 3u, scale));
        x16[t * params.x16_stride + i] = vec4<f16>(v);
    }
}

// vec4 i of the X tile of the K step at k0 (token t0 + i / ROW_VECS, k0 + 4 · (i % ROW_VECS)).
fn x_vec(i: u32, t0: u32, k0: u32) -> vec4<f16> {
    let t = min(t0 + i / ROW_VECS, step.n_tokens - 1u);
    return x16[t * params.x16_stride + k0 / 4u + i % ROW_VECS];
}

fn put_x_vec(b: u32, i: u32, v: vec4<f16>) {
    x_tile[(b * TILE_T + i / ROW_VECS) * STRIDE4 + i % ROW_VECS] = v;
}

// Whether the pipeline's type takes the raw path (a pipeline constant: the branch folds away).
fn raw_type() -> bool {
    return GGML_TYPE == Q4_K || (GGML_TYPE == Q6_K && RAW_Q6K != 0u);
}

// Whether it takes it in Q6_K pair tasks.
fn pair_type() -> bool {
    return GGML_TYPE == Q6_K && RAW_Q6K == 2u;
}


// Byte offset (in the w binding) of the block holding W task i of the K step at k0: 16
// consecutive k of row r0 + i / TASKS_K from k0 + 16 · (i % TASKS_K), inside one 256-element
// super-block (rows and tokens past the matrix read the last one).
fn task_block(i: u32, r0: u32, k0: u32) -> u32 {
    let r = min(r0 + i / TASKS_K, params.rows - 1u);
    let k = k0 + 16u * (i % TASKS_K);
    return params.w_byte + r * params.row_bytes + (k / 256u) * BLOCK_BYTES;
}

// The raw words of W task i, loaded now and decoded by put_raw after the next MMAs.
// Q4_K: the block's head (d, dmin: two f16; then the 12 packed scale bytes) and its 16 quant
// bytes, whose low (even sub-block j) or high (odd j) nibbles are the 16 elements: two 16-byte
// loads. Q6_K (blocks of 210 bytes, 2-aligned): the 5 words holding the 16 low-nibble bytes,
// the 5 holding the 16 high-bit bytes, the word with the task's scale byte and the one with d.
fn fetch_raw(i: u32, r0: u32, k0: u32) -> array<vec4<u32>, RAW_VECS> {
    var raw: array<vec4<u32>, RAW_VECS>;
    if pair_type() {
        if i < PAIR_TASKS {
            return fetch_pair(i, r0, k0);
        }
        return raw;
    }
    let block = task_block(i, r0, k0);
    let e = (k0 + 16u * (i % TASKS_K)) % 256u;
    if GGML_TYPE == Q4_K {
        let quants = (block + 16u + 32u * (e / 64u) + e % 32u) / 16u;
        raw[0] = w[block / 16u];
        raw[1] = w[quants];
        return raw;
    }
    let side = e / 128u;
    let quarter = (e % 128u) / 32u;
    let l = e % 32u;
    let ql = (block + 64u * side + 32u * (quarter & 1u) + l) / 4u;
    let qh = (block + 128u + 32u * side + l) / 4u;
    raw[0] = vec4<u32>(src_word(ql), src_word(ql + 1u), src_word(ql + 2u), src_word(ql + 3u));
    raw[1] = vec4<u32>(src_word(ql + 4u), src_word(qh), src_word(qh + 1u), src_word(qh + 2u));
    raw[2] = vec4<u32>(
        src_word(qh + 3u),
        src_word(qh + 4u),
        src_word((block + 192u + e / 16u) / 4u),
        src_word((block + 208u) / 4u),
    );
    return raw;
}

// Byte offset of the Q6_K block holding pair task i of the K step at k0 (row r0 + i / PAIRS_K;
// rows past the matrix read the last one).
fn pair_block(i: u32, r0: u32, k0: u32) -> u32 {
    let r = min(r0 + i / PAIRS_K, params.rows - 1u);
    return params.w_byte + r * params.row_bytes + (k0 / 256u) * BLOCK_BYTES;
}

// The raw words of Q6_K pair task i: the step's elements e0 + l .. + 15 (its even quarter) and
// e0 + 32 + l .. + 15 (the odd one), l = 16 · (i % PAIRS_K), e0 = k0 % 256 (a multiple of 64):
// the 5 words of each quarter's 16 low-nibble bytes, the 5 of their shared high-bit bytes, the
// words holding the two scale bytes (2 apart) and the one with d.
fn fetch_pair(i: u32, r0: u32, k0: u32) -> array<vec4<u32>, RAW_VECS> {
    let block = pair_block(i, r0, k0);
    let e0 = k0 % 256u;
    let side = e0 / 128u;
    let l = 16u * (i % PAIRS_K);
    let ql = (block + 64u * side + l) / 4u;
    let ql_odd = ql + 8u;
    let qh = (block + 128u + 32u * side + l) / 4u;
    let scale_at = block + 192u + (e0 + l) / 16u;
    var raw: array<vec4<u32>, RAW_VECS>;
    raw[0] = vec4<u32>(src_word(ql), src_word(ql + 1u), src_word(ql + 2u), src_word(ql + 3u));
    raw[1] = vec4<u32>(
        src_word(ql + 4u),
        src_word(ql_odd),
        src_word(ql_odd + 1u),
        src_word(ql_odd + 2u),
    );
    raw[2] = vec4<u32>(src_word(ql_odd + 3u), src_word(ql_odd + 4u), src_word(qh), src_word(qh + 1u));
    raw[RAW_V3] = vec4<u32>(
        src_word(qh + 2u),
        src_word(qh + 3u),
        src_word(qh + 4u),
        src_word(scale_at / 4u),
    );
    raw[RAW_V4] = vec4<u32>(src_word((scale_at + 2u) / 4u), src_word((block + 208u) / 4u), 0u, 0u);
    return raw;
}

// The 4 bytes at byte `shift / 8` of the 8 bytes lo, hi (shift 0 or 16).
fn funnel(lo: u32, hi: u32, shift: u32) -> u32 {
    return select((lo >> shift) | (hi << (32u - shift)), lo, shift == 0u);
}

// Byte i (0..11) of a Q4_K block's packed scales (words 1..3 of its head).
fn q4k_scale_byte(head: vec4<u32>, i: u32) -> u32 {
    let word = select(select(head.w, head.z, i < 8u), head.y, i < 4u);
    return (word >> (8u * (i & 3u))) & 0xffu;
}

// W task i's 16 elements, decoded from its raw words as blocks.wgsl decodes them, into tile
// stage b.
fn put_raw(b: u32, i: u32, r0: u32, k0: u32, raw: array<vec4<u32>, RAW_VECS>) {
    if GGML_TYPE == Q4_K {
        put_q4k(b, i, k0, raw[0], raw[1]);
    } else if pair_type() {
        if i < PAIR_TASKS {
            put_q6k_pair(b, i, r0, k0, raw);
        }
    } else {
        put_q6k(b, i, r0, k0, raw);
    }
}

// The signed scale byte at byte `at` of the block, from the word holding it.
fn q6k_scale(word: u32, at: u32) -> f32 {
    return f32(bitcast<i32>(((word >> (8u * (at & 3u))) & 0xffu) << 24u) >> 24u);
}

// Q6_K pair task i into tile stage b: put_q6k's arithmetic per element, (d · scale) · (q − 32),
// for the even quarter's 16 elements at l and the odd one's at 32 + l of the step.
fn put_q6k_pair(b: u32, i: u32, r0: u32, k0: u32, raw: array<vec4<u32>, RAW_VECS>) {
    let block = pair_block(i, r0, k0);
    let e0 = k0 % 256u;
    let l = 16u * (i % PAIRS_K);
    // The even quarter: 0 or 2 (its high bits at 2 · quarter, the odd one's 2 above); 2 and 3
    // take the low nibbles' high halves.
    let quarter = (e0 % 128u) / 32u;
    let nibble = select(0u, 4u, quarter >= 2u);
    let shift = 8u * (block & 3u);
    var ql = array<u32, 5>(raw[0].x, raw[0].y, raw[0].z, raw[0].w, raw[1].x);
    var ql_odd = array<u32, 5>(raw[1].y, raw[1].z, raw[1].w, raw[2].x, raw[2].y);
    var qh = array<u32, 5>(raw[2].z, raw[2].w, raw[RAW_V3].x, raw[RAW_V3].y, raw[RAW_V3].z);
    let scale_at = block + 192u + (e0 + l) / 16u;
    let d = unpack2x16float(raw[RAW_V4].y)[((block + 208u) >> 1u) & 1u];
    let a = d * q6k_scale(raw[RAW_V3].w, scale_at);
    let a_odd = d * q6k_scale(raw[RAW_V4].x, scale_at + 2u);
    let at = (b * TILE_R + i / PAIRS_K) * STRIDE4 + l / 4u;
    for (var c = 0u; c < 4u; c++) {
        let high = funnel(qh[c], qh[c + 1u], shift);
        let low = (funnel(ql[c], ql[c + 1u], shift) >> nibble) & 0x0f0f0f0fu;
        let high_even = ((high >> (2u * quarter)) & 0x03030303u) << 4u;
        w_tile[at + c] = vec4<f16>(a * (vec4<f32>(unpack4xU8(low | high_even)) - 32.0));
        let low_odd = (funnel(ql_odd[c], ql_odd[c + 1u], shift) >> nibble) & 0x0f0f0f0fu;
        let high_odd = ((high >> (2u * quarter + 2u)) & 0x03030303u) << 4u;
        w_tile[at + 8u + c] = vec4<f16>(a_odd * (vec4<f32>(unpack4xU8(low_odd | high_odd)) - 32.0));
    }
}

// Q6_K: x = (d · scale) · (q − 32), q = low nibble | two high bits << 4 (dequant4_q6_k).
fn put_q6k(b: u32, i: u32, r0: u32, k0: u32, raw: array<vec4<u32>, RAW_VECS>) {
    let block = task_block(i, r0, k0);
    let e = (k0 + 16u * (i % TASKS_K)) % 256u;
    let quarter = (e % 128u) / 32u;
    let shift = 8u * (block & 3u);
    var ql = array<u32, 5>(raw[0].x, raw[0].y, raw[0].z, raw[0].w, raw[1].x);
    var qh = array<u32, 5>(raw[1].y, raw[1].z, raw[1].w, raw[2].x, raw[2].y);
    let scale_at = block + 192u + e / 16u;
    let scale = f32(bitcast<i32>(((raw[2].z >> (8u * (scale_at & 3u))) & 0xffu) << 24u) >> 24u);
    let d = unpack2x16float(raw[2].w)[((block + 208u) >> 1u) & 1u];
    let a = d * scale;
    let at = (b * TILE_R + i / TASKS_K) * STRIDE4 + 4u * (i % TASKS_K);
    for (var c = 0u; c < 4u; c++) {
        let low = (funnel(ql[c], ql[c + 1u], shift) >> select(0u, 4u, quarter >= 2u)) & 0x0f0f0f0fu;
        let high = ((funnel(qh[c], qh[c + 1u], shift) >> (2u * quarter)) & 0x03030303u) << 4u;
        let q = vec4<f32>(unpack4xU8(low | high));
        w_tile[at + c] = vec4<f16>(a * (q - 32.0));
    }
}

// Q4_K: x = (d · scale_j) · q − dmin · min_j (dequant4_q4_k).
fn put_q4k(b: u32, i: u32, k0: u32, head: vec4<u32>, quants: vec4<u32>) {
    let k = k0 + 16u * (i % TASKS_K);
    let j = (k % 256u) / 32u;
    var scale: f32;
    var offset: f32;
    if j < 4u {
        scale = f32(q4k_scale_byte(head, j) & 63u);
        offset = f32(q4k_scale_byte(head, j + 4u) & 63u);
    } else {
        let packed = q4k_scale_byte(head, j + 4u);
        scale = f32((packed & 15u) | ((q4k_scale_byte(head, j - 4u) >> 6u) << 4u));
        offset = f32((packed >> 4u) | ((q4k_scale_byte(head, j) >> 6u) << 4u));
    }
    let dm = unpack2x16float(head.x);
    let a = dm.x * scale;
    let m = dm.y * offset;
    let shift = 4u * (j & 1u);
    let at = (b * TILE_R + i / TASKS_K) * STRIDE4 + 4u * (i % TASKS_K);
    for (var c = 0u; c < 4u; c++) {
        let q = vec4<f32>(unpack4xU8((quants[c] >> shift) & 0x0f0f0f0fu));
        w_tile[at + c] = vec4<f16>(a * q - m);
    }
}

// One accumulator tile straight to Y (or to its slice's partials): the tile lies inside the
// matrix and every row of it starts 16-byte aligned (the caller checks both). Three functions,
// branched between by the caller: naga 30 rejects a cooperative op under a branch on a
// function's argument (uniformity), and every caller's condition is workgroup-uniform.
fn put_partial(acc: CoopC, slice: KSlice, t: u32, r: u32) {
    let at = (slice.index * step.n_tokens + t) * params.rows + r;
    let stride = params.rows;
    coopStoreT(acc, &partials[at], stride);
}

fn put_added(acc: CoopC, t: u32, r: u32) {
    let at = t * params.y_stride + params.y_col + r;
    let stride = params.y_stride;
    let old = coopLoadT<CoopC>(&y[at], stride);
    let sum = old + acc;
    coopStoreT(sum, &y[at], stride);
}

fn put_stored(acc: CoopC, t: u32, r: u32) {
    let at = t * params.y_stride + params.y_col + r;
    let stride = params.y_stride;
    coopStoreT(acc, &y[at], stride);
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_id) subgroup: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    var run = slice_run(wg.z, groups.z);
    if SLICED == 0u && groups.z == 1u {
        run = SliceRun(0u, 1u, 1u, run.out);
    }
    // With SLICED = 0 the loop runs once, so the totals need no registers of their own.
    let end = select(run.end, run.first + 1u, SLICED == 0u);
    let t0 = wg.x * TILE_T;
    let r0 = wg.y * TILE_R;
    let st = (subgroup / SG_R) * WARP_T;
    let sr = (subgroup % SG_R) * WARP_R;
    // totIJ: tokens t0 + st + COOP·I.., rows r0 + sr + COOP·J..: the slices' sums added in order
    // (matmul_split.wgsl), each slice's own sum in accIJ.
    var tot00 = CoopC();
    var tot01 = CoopC();
    var tot02 = CoopC();
    var tot03 = CoopC();
    var tot10 = CoopC();
    var tot11 = CoopC();
    var tot12 = CoopC();
    var tot13 = CoopC();
    // The next K step's X values and (Q4_K) raw W words, loaded one step ahead of their stores.
    var x_raw: array<vec4<f16>, X_VECS>;
    var w_raw: array<array<vec4<u32>, RAW_VECS>, W_TASKS>;
    let stride = STRIDE4;
    for (var s = run.first; s < end; s++) {
        let slice = k_slice(s, run.count);
        var acc00 = CoopC();
        var acc01 = CoopC();
        var acc02 = CoopC();
        var acc03 = CoopC();
        var acc10 = CoopC();
        var acc11 = CoopC();
        var acc12 = CoopC();
        var acc13 = CoopC();
        // Prologue: step 0 fetched and stored into stage 0, step 1 fetched.
        var k_fetched = slice.begin;
        for (var step_ahead = 0u; step_ahead < 2u; step_ahead++) {
            if k_fetched < slice.end {
                for (var q = 0u; q < X_VECS; q++) {
                    x_raw[q] = x_vec(lid + q * WG, t0, k_fetched);
                }
                if raw_type() {
                    for (var q = 0u; q < W_TASKS; q++) {
                        w_raw[q] = fetch_raw(lid + q * WG, r0, k_fetched);
                    }
                }
            }
            if step_ahead == 0u && k_fetched < slice.end {
                for (var q = 0u; q < X_VECS; q++) {
                    put_x_vec(0u, lid + q * WG, x_raw[q]);
                }
                if raw_type() {
                    for (var q = 0u; q < W_TASKS; q++) {
                        put_raw(0u, lid + q * WG, r0, k_fetched, w_raw[q]);
                    }
                } else {
                    for (var q = 0u; q < W_QUADS; q++) {
                        put_w_quad(lid + q * WG, w_tile_quad(lid + q * WG, r0, k_fetched));
                    }
                }
            }
            k_fetched += TILE_K;
        }
        workgroupBarrier();

        // The stage this step reads.
        var cur = 0u;
        for (var k0 = slice.begin; k0 < slice.end; k0 += TILE_K) {
            let w_row = (cur * TILE_R + sr) * STRIDE4;
            let x_row = (cur * TILE_T + st) * STRIDE4;
            for (var kk = 0u; kk < ROW_VECS; kk += COOP / 4u) {
                let w_at = w_row + kk;
                let b0 = coopLoad<CoopB>(&w_tile[w_at], stride);
                let w_at1 = w_at + COOP * STRIDE4;
                let b1 = coopLoad<CoopB>(&w_tile[w_at1], stride);
                let w_at2 = w_at + 2u * COOP * STRIDE4;
                let b2 = coopLoad<CoopB>(&w_tile[w_at2], stride);
                let w_at3 = w_at + 3u * COOP * STRIDE4;
                let b3 = coopLoad<CoopB>(&w_tile[w_at3], stride);
                let x_at = x_row + kk;
                let a0 = coopLoadT<CoopA>(&x_tile[x_at], stride);
                let x_at1 = x_at + COOP * STRIDE4;
                let a1 = coopLoadT<CoopA>(&x_tile[x_at1], stride);
                acc00 = coopMultiplyAdd(a0, b0, acc00);
                acc01 = coopMultiplyAdd(a0, b1, acc01);
                acc02 = coopMultiplyAdd(a0, b2, acc02);
                acc03 = coopMultiplyAdd(a0, b3, acc03);
                acc10 = coopMultiplyAdd(a1, b0, acc10);
                acc11 = coopMultiplyAdd(a1, b1, acc11);
                acc12 = coopMultiplyAdd(a1, b2, acc12);
                acc13 = coopMultiplyAdd(a1, b3, acc13);
            }
            // One stage: every subgroup is done reading it before it is overwritten. Two: the next
            // step goes into the stage no subgroup reads now, which every subgroup finished reading
            // before the barrier that ended the previous step.
            if STAGES == 1u {
                workgroupBarrier();
            }
            let next = (cur + 1u) % STAGES;
            let k_next = k0 + TILE_K;
            if k_next < slice.end {
                for (var q = 0u; q < X_VECS; q++) {
                    put_x_vec(next, lid + q * WG, x_raw[q]);
                }
                if raw_type() {
                    for (var q = 0u; q < W_TASKS; q++) {
                        put_raw(next, lid + q * WG, r0, k_next, w_raw[q]);
                    }
                } else {
                    for (var q = 0u; q < W_QUADS; q++) {
                        let i = lid + q * WG;
                        put_w_quad(next * TILE_R * ROW_VECS + i, w_tile_quad(i, r0, k_next));
                    }
                }
                // The step after: its loads stay in flight through the next step's MMAs.
                let k_ahead = k_next + TILE_K;
                if k_ahead < slice.end {
                    for (var q = 0u; q < X_VECS; q++) {
                        x_raw[q] = x_vec(lid + q * WG, t0, k_ahead);
                    }
                    if raw_type() {
                        for (var q = 0u; q < W_TASKS; q++) {
                            w_raw[q] = fetch_raw(lid + q * WG, r0, k_ahead);
                        }
                    }
                }
            }
            workgroupBarrier();
            cur = next;
        }
        tot00 = tot00 + acc00;
        tot01 = tot01 + acc01;
        tot02 = tot02 + acc02;
        tot03 = tot03 + acc03;
        tot10 = tot10 + acc10;
        tot11 = tot11 + acc11;
        tot12 = tot12 + acc12;
        tot13 = tot13 + acc13;
        // The K loop's last barrier has every subgroup done with the tiles before the next
        // slice's prologue writes stage 0.
    }

    let t_sub = t0 + st;
    let r_sub = r0 + sr;
    let inside = t0 + TILE_T <= step.n_tokens && r0 + TILE_R <= params.rows;
    let aligned = select(
        params.y_stride % 4u == 0u && params.y_col % 4u == 0u,
        params.rows % 4u == 0u,
        run.out.count > 1u,
    );
    // Workgroup-uniform, so the staged path's barriers are reached by every invocation.
    if inside && aligned && run.out.count > 1u {
        put_partial(tot00, run.out, t_sub, r_sub);
        put_partial(tot01, run.out, t_sub, r_sub + COOP);
        put_partial(tot02, run.out, t_sub, r_sub + 2u * COOP);
        put_partial(tot03, run.out, t_sub, r_sub + 3u * COOP);
        put_partial(tot10, run.out, t_sub + COOP, r_sub);
        put_partial(tot11, run.out, t_sub + COOP, r_sub + COOP);
        put_partial(tot12, run.out, t_sub + COOP, r_sub + 2u * COOP);
        put_partial(tot13, run.out, t_sub + COOP, r_sub + 3u * COOP);
    } else if inside && aligned && params.accumulate != 0u {
        put_added(tot00, t_sub, r_sub);
        put_added(tot01, t_sub, r_sub + COOP);
        put_added(tot02, t_sub, r_sub + 2u * COOP);
        put_added(tot03, t_sub, r_sub + 3u * COOP);
        put_added(tot10, t_sub + COOP, r_sub);
        put_added(tot11, t_sub + COOP, r_sub + COOP);
        put_added(tot12, t_sub + COOP, r_sub + 2u * COOP);
        put_added(tot13, t_sub + COOP, r_sub + 3u * COOP);
    } else if inside && aligned {
        put_stored(tot00, t_sub, r_sub);
        put_stored(tot01, t_sub, r_sub + COOP);
        put_stored(tot02, t_sub, r_sub + 2u * COOP);
        put_stored(tot03, t_sub, r_sub + 3u * COOP);
        put_stored(tot10, t_sub + COOP, r_sub);
        put_stored(tot11, t_sub + COOP, r_sub + COOP);
        put_stored(tot12, t_sub + COOP, r_sub + 2u * COOP);
        put_stored(tot13, t_sub + COOP, r_sub + 3u * COOP);
    } else {
        let stage = subgroup * STAGE;
        store_tile(tot00, run.out, t_sub, r_sub, stage, lane);
        store_tile(tot01, run.out, t_sub, r_sub + COOP, stage, lane);
        store_tile(tot02, run.out, t_sub, r_sub + 2u * COOP, stage, lane);
        store_tile(tot03, run.out, t_sub, r_sub + 3u * COOP, stage, lane);
        store_tile(tot10, run.out, t_sub + COOP, r_sub, stage, lane);
        store_tile(tot11, run.out, t_sub + COOP, r_sub + COOP, stage, lane);
        store_tile(tot12, run.out, t_sub + COOP, r_sub + 2u * COOP, stage, lane);
        store_tile(tot13, run.out, t_sub + COOP, r_sub + 3u * COOP, stage, lane);
    }
}
