// matvec_q8_batched — matvec_q8_wide's product (y[b, r] (+)= Σ_c W[r, c]·x̂[b, c], x̂ the q8
// blocks of x) with its vector loop for several input vectors rewritten: each input vector's share
// of a unit read as four 16-byte loads, and the loop over vectors spelled out to constant indices
// with no branch, so one unit's step is one straight block.
//
// Math: matvec_q8_wide.wgsl's, operation for operation: the same wide units of W (load_wide_rows,
// once per unit for every vector), the same units in the same order per invocation, the same
// `wide_products` and `with_code_sums`, the same `finish`. Only how x's codes are loaded differs
// (the same words, 16 bytes per load), so each row's output has the wide form's bits at every
// batch size and composition (issue 21's determinism: a sequence's output does not depend on
// what else is in the batch), and the engine may run this form for several vectors and the
// wide one for one.
// Why (experiments/NOTES.md, "mvbatch (2026-12-06 #8)"): per unit and vector the wide form issues
// 16 scalar code-word loads, 64 bytes apart across the lanes of a warp (each touching ~16 cache
// lines), and guards each vector by `if b < n`, so a vector's loads cannot be issued before the
// previous vector's products and `acc[b]` is indexed by a loop counter. Here a vector's codes are
// 4 vec4 loads (a quarter of the load instructions and L1 wavefronts), and the B vectors of a
// unit are one branch-free block: a vector past the step's n reads vector n − 1 again (valid
// memory) and adds into its own accumulator, which no output reads (finish writes b < n only).
// bindings: matvec_q8_wide.wgsl's, except that x16 (binding 6, array<vec4<f32>>) is bound to the
//           q8 codes of xq (the engine binds them there for a batched binding; the integer path
//           reads no f32 x): code word i is component i % 4 of x16[i / 4], read as bits. Every
//           unit's code words start on a multiple of 4 words (vector b at b·cols/4, cols a
//           multiple of 256; a unit's groups at multiples of 16 elements). xd as there.
// dispatch, rows, teams, pairing, accumulate, quantized output, reduction: matvec_q8_wide.wgsl's.
// pipelines: the wide form's, with BATCHED on (engine `MatVecLayout::batched`, written
//           `…/batched`; the engine's default at every batch, FAK_MATVEC_BATCHED=0 off): only for q8
//           vectors read from global memory.
// variants: the split (VECTOR_GROUPS > 1; engine `MatVecLayout::split`, written `…/splitG`, or
//           FAK_MATVEC_SPLIT=G, opt-in): a step of up to VECTOR_GROUPS·MAX_B vectors on
//           VECTOR_GROUPS times the grid, each workgroup taking the MAX_B (= G) vectors from
//           first_vector = (flat workgroup index % VECTOR_GROUPS)·MAX_B for its rows (neighbouring
//           workgroups share rows, so W's second read comes from L2) — a workgroup past the step's
//           vectors returns at once. Each vector's products, reduction and output are this form's
//           with MAX_B = G, so its bits are the unsplit form's (every slot, every capacity gives a
//           vector the same bits). Why (experiments/NOTES.md, "b8 (2026-12-06 #9)"): on an H100
//           the form issues at ~16 % of the SMs' rate, and its time doubles from 4 to 8 vectors
//           where 1 to 4 costs 1.6–2.1× — the shape of a register cliff (a lane carries 8
//           vectors' accumulators and x: fewer warps an SM, or spills); G vectors a lane trade
//           W's loads and decode, repeated from L2, for more and lighter warps.
// requires: matvec.wgsl, matvec_q8.wgsl, matvec_q8_wide.wgsl (and what they require).

// matvec_q8_wide's vector loop in this form (see the header).
override BATCHED: bool = false;
// The split: workgroups per row range, each taking MAX_B of the step's vectors (1: unsplit).
override VECTOR_GROUPS: u32 = 1u;

// The split's share of a step of `n_tokens` vectors for flat workgroup `flat`: sets first_vector
// and returns the row workgroup index (flat / VECTOR_GROUPS) and the vectors it takes (0: none).
// Unsplit: (flat, min(n_tokens, MAX_B)), first_vector 0.
fn split_vectors(flat: u32, n_tokens: u32) -> vec2<u32> {
    if VECTOR_GROUPS == 1u {
        return vec2<u32>(flat, min(n_tokens, MAX_B));
    }
    first_vector = (flat % VECTOR_GROUPS) * MAX_B;
    let taken = select(0u, min(n_tokens - first_vector, MAX_B), n_tokens > first_vector);
    // Outputs are written at p.y_index + b·y_stride for the workgroup's slot b.
    p.y_index += first_vector * p.y_stride;
    return vec2<u32>(flat / VECTOR_GROUPS, taken);
}

// Code words w..w + 3 of vector b's share of wide unit u (w a multiple of 4): one 16-byte load.
fn batched_words(b: u32, u: u32, w: u32) -> vec4<u32> {
    return bitcast<vec4<u32>>(x16[wide_x_code(b, u, w) / 4u]);
}

// Vector b's share of wide unit u: load_wide_x's values, its codes read 16 bytes at a time.
fn batched_x(b: u32, u: u32) -> WideX {
    var v: WideX;
    v.words = array<vec4<u32>, 4>(batched_words(b, u, 0u), batched_words(b, u, 4u),
                                  batched_words(b, u, 8u), batched_words(b, u, 12u));
    let k = wide_x_scale(b, u, 0u);
    v.d = vec4<f32>(xd[k], xd[k + 1u], 0.0, 0.0);
    if wide_q6() {
        v.d = vec4<f32>(v.d.xy, xd[k + 2u], xd[k + 3u]);
    }
    return with_code_sums(v);
}

// Unit u's products of the 4 rows `w` with the workgroup's vector min(b, n − 1) (the step's
// first_vector + that), added to acc[b] (b constant at every call: acc stays in registers).
fn add_vector(acc: ptr<function, array<vec4<f32>, 8>>, w: array<Wide, 4>, u: u32, b: u32,
              n: u32) {
    (*acc)[b] += wide_products(w, batched_x(first_vector + min(b, n - 1u), u));
}

// add_products_wide's work for MAX_B vectors: each vector's products in the same order as there.
fn add_products_batched(acc: ptr<function, array<vec4<f32>, 8>>, w: array<Wide, 4>, u: u32,
                        n: u32) {
    add_vector(acc, w, u, 0u, n);
    if MAX_B >= 2u {
        add_vector(acc, w, u, 1u, n);
    }
    if MAX_B >= 4u {
        add_vector(acc, w, u, 2u, n);
        add_vector(acc, w, u, 3u, n);
    }
    if MAX_B >= 8u {
        add_vector(acc, w, u, 4u, n);
        add_vector(acc, w, u, 5u, n);
        add_vector(acc, w, u, 6u, n);
        add_vector(acc, w, u, 7u, n);
    }
}
