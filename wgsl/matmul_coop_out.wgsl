// matmul_coop_out — a subgroup's cooperative-matrix result tile out to Y (or to its K slice's
// partial sums) through workgroup memory, element by element, so ragged edges and the
// accumulate mode are handled by the guarded store (coopStore itself cannot skip elements
// outside the matrix). Shared by matmul_coop.wgsl and matmul_x16.wgsl.
//
// Every invocation of the workgroup must call store_tile the same number of times (it
// barriers).
// requires: the kernel's SG_T, SG_R, SUBGROUP_WIDTH, a shape file (COOP, CoopC) and
//           matmul_split.wgsl (KSlice, store_result).
// provides: STAGE, c_stage, store_tile.

const STAGE: u32 = COOP * COOP;

// One COOP × COOP result tile per subgroup, row-major (token-major), on its way to Y.
var<workgroup> c_stage: array<f32, SG_T * SG_R * STAGE>;

// The tile `acc` whose first token is t0 and first row r0 out to Y; `stage` is the subgroup's
// part of c_stage, `lane` its invocation's index in the subgroup.
fn store_tile(acc: CoopC, slice: KSlice, t0: u32, r0: u32, stage: u32, lane: u32) {
    let stride = COOP;
    coopStoreT(acc, &c_stage[stage], stride);
    workgroupBarrier();
    for (var e = lane; e < STAGE; e += SUBGROUP_WIDTH) {
        store_result(slice, t0 + e / COOP, r0 + e % COOP, c_stage[stage + e]);
    }
    // The next tile overwrites the stage only after it has been copied out.
    workgroupBarrier();
}
