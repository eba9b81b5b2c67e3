// matmul_split — split-K for the prefill mat-mul: the slice of K one workgroup sums, where its
// partial sums go, and the entry point that adds the slices up
//
// Math: Y[t, y_col + r] (+)= Σ_s P_s[t, r], P_s[t, r] = Σ_{k in slice s} W[r, k] · X[t, k],
// the S slices cutting K into runs of whole K steps (the last ones may be short or empty).
// bindings: those of matmul_load.wgsl, plus 5 partials (array<f32>, read_write: the host's
//           scratch, S × n_tokens × rows of this range, slice-major).
// dispatch: the mat-mul's grid with z = S (workgroup z computes slice z); S = 1 is the plain
//           product, written straight to Y. With S > 1, `reduce_partials` after it:
//           (ceil(n_tokens · rows / (RW · S)), 1, S) workgroups of RW invocations; workgroup
//           (x, z) adds up the RW outputs starting at (x · S + z) · RW (row-major over
//           tokens × rows), so both dispatches read S from num_workgroups.z and no uniform
//           has to change between steps.
//
// Why: a product with few tiles (the 27B shape's ffn_down at 128 tokens: 40 tiles of 128 ×
// 128 on an H200's 132 SMs; the Gated DeltaNet β/α projections: 1 tile) runs on a fraction
// of the GPU, each workgroup walking all of K at one K step's latency after another. Slices of
// K give the product more workgroups; the partial sums cost one write and one read of
// S × n_tokens × rows floats.
// requires: matmul_load.wgsl (Params, the bindings, store_output) and the kernel's TILE_K.
// provides: struct KSlice, k_slice, store_result, the entry point reduce_partials.

@group(0) @binding(5) var<storage, read_write> partials: array<f32>;

// Invocations per workgroup of reduce_partials.
const RW: u32 = 256u;

// The K range [begin, end) of slice `index` of `count`.
struct KSlice {
    begin: u32,
    end: u32,
    index: u32,
    count: u32,
}

// Slice `index` of `count`: ⌈steps / count⌉ whole K steps each, clamped to K.
fn k_slice(index: u32, count: u32) -> KSlice {
    let steps = (params.cols + TILE_K - 1u) / TILE_K;
    let per = (steps + count - 1u) / count * TILE_K;
    let begin = min(index * per, params.cols);
    return KSlice(begin, min(begin + per, params.cols), index, count);
}

// The slice's sum for output (t, r): Y itself when K is not split, else its partial.
fn store_result(slice: KSlice, t: u32, r: u32, value: f32) {
    if slice.count == 1u {
        store_output(t, r, value);
    } else if t < step.n_tokens && r < params.rows {
        partials[(slice.index * step.n_tokens + t) * params.rows + r] = value;
    }
}

@compute @workgroup_size(RW)
fn reduce_partials(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let count = groups.z;
    let e = (wg.x * count + wg.z) * RW + lid;
    let outputs = step.n_tokens * params.rows;
    if e >= outputs {
        return;
    }
    var sum = 0.0;
    for (var s = 0u; s < count; s++) {
        sum += partials[s * outputs + e];
    }
    store_output(e / params.rows, e % params.rows, sum);
}
