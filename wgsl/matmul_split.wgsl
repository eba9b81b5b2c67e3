// matmul_split — split-K for the prefill mat-mul: the slices K is summed in, where a slice's
// partial sums go, and the entry point that adds the slices up
//
// Math: Y[t, y_col + r] (+)= Σ_s P_s[t, r], P_s[t, r] = Σ_{k in slice s} W[r, k] · X[t, k],
// the S = params.k_slices slices cutting K into runs of whole 64-element granules (the last ones
// may be short or empty), the sum over s taken in order s = 0, 1, … from 0.0 in f32.
// bindings: those of matmul_load.wgsl, plus 5 partials (array<f32>, read_write: the host's
//           scratch, S × n_tokens × rows of this range, slice-major).
// dispatch: the mat-mul's grid with z = S (workgroup z computes slice z into the partials; then
//           `reduce_partials`: (ceil(n_tokens · rows / (RW · S)), 1, S) workgroups of RW
//           invocations; workgroup (x, z) adds up the RW outputs starting at (x · S + z) · RW,
//           row-major over tokens × rows) or z = 1 (each workgroup sums the S slices itself, one
//           after another, into a running total: slice_run).
//
// Why slices fixed by the weight: S depends on the weight's shape only (the host's
// SplitK::weight_slices), and both forms add the same slices' sums in the same order, so an
// output is bit-for-bit the same whether its step split K across workgroups (few tiles: a short
// prompt) or not (many tiles) — a row's result does not depend on how many other rows share the
// step. The slice boundaries are granules of 64 whatever the kernel's K step (32 or 64), so the
// kernels of one adapter agree on them too.
//
// Why split at all: a product with few tiles (the 27B shape's ffn_down at 128 tokens: 40 tiles
// of 128 × 128 on an H200's 132 SMs; the Gated DeltaNet β/α projections: 1 tile) runs on a
// fraction of the GPU, each workgroup walking all of K at one K step's latency after another.
// Slices of K give the product more workgroups; the partial sums cost one write and one read of
// S × n_tokens × rows floats.
// requires: matmul_load.wgsl (Params, the bindings, store_output).
// provides: struct KSlice, k_slice, struct SliceRun, slice_run, store_result, the entry point
//           reduce_partials.

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

// The granule slices are cut in: a multiple of every kernel's K step.
const SLICE_GRANULE: u32 = 64u;

// Slice `index` of `count`: ⌈granules / count⌉ whole granules each, clamped to K.
fn k_slice(index: u32, count: u32) -> KSlice {
    let granules = (params.cols + SLICE_GRANULE - 1u) / SLICE_GRANULE;
    let per = (granules + count - 1u) / count * SLICE_GRANULE;
    let begin = min(index * per, params.cols);
    return KSlice(begin, min(begin + per, params.cols), index, count);
}

// The slices workgroup z of a grid `groups_z` deep sums, first..end of count, and where its
// result goes (`out`: slice z's partials when K is split across the grid, Y when it is not).
struct SliceRun {
    first: u32,
    end: u32,
    count: u32,
    out: KSlice,
}

fn slice_run(z: u32, groups_z: u32) -> SliceRun {
    let out = k_slice(z, groups_z);
    if groups_z > 1u {
        return SliceRun(z, z + 1u, groups_z, out);
    }
    return SliceRun(0u, params.k_slices, params.k_slices, out);
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
