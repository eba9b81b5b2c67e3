// matvec_last_norm — a residual producer whose last-arriving workgroup writes the next norm's q8
// input (engine `LastNorm`, FAK_DECODE_FUSE=lastnorm; experiments/NOTES.md "decdisp")
//
// Math: the product is matvec.wgsl's y += W x̂ (accumulating: y is the residual stream x, `rows`
// long). After its outputs every workgroup that owns rows takes a ticket from arrivals[0]; the
// one drawing ticket T − 1 (T = ⌈rows / (4·TEAMS)⌉, the workgroups with rows) knows every row of
// y is final and runs norm_q8.wgsl's one-pass form over y's n vectors with the next RMSNorm's
// weight nw (binding 7) and eps (params.eps): vector b's codes into yq from word b·rows/4, its
// scales into yd from b·rows/32 (the layout of `Q8Vectors`). On NORM_Q8_LANES invocations that is
// quantize_q8.wgsl's ONEPASS pipeline bit for bit (the same lanes, order, sums and q8_block), so
// the q8 products after that norm read these blocks instead of a quantize dispatch's. The last
// workgroup then stores 0 back, so the binding's next dispatch counts from 0 again.
// Why: on an H100 a decode token is ~300 dependent dispatches whose boundaries (drain, barrier,
// launch) cost more than their bytes (experiments/NOTES.md "dec8b"); a norm's quantize is one
// or two workgroups' work anyway, so here it is the same serial work with no boundary before it,
// for one atomic and two barriers per producer workgroup.
// Memory order (what makes the last workgroup see every row): WGSL promises only relaxed
// atomics and workgroup-scope barriers, so this rests on what naga emits for Vulkan (checked
// with naga 30 → spirv-dis, as attn_decode's one-dispatch form): storageBarrier() is
// OpControlBarrier(Workgroup, Device, AcquireRelease | UniformMemory), atomicAdd OpAtomicIAdd at
// Device scope. Each workgroup: its rows' stores → storageBarrier (device-scope release after
// every invocation's stores) → invocation 0's atomicAdd; the last one: its atomicAdd reads the
// value every earlier add wrote (read-modify-writes on one counter form a release sequence) →
// workgroupUniformLoad → storageBarrier (device-scope acquire) → the loads of y. So every
// producer's rows happen-before the norm's loads, through a non-coherent L1 too. Elsewhere it
// is not backed: MSL's threadgroup_barrier(mem_device) orders within a threadgroup only, and
// HLSL's DeviceMemoryBarrierWithGroupSync does not make another group's writes visible through
// a UAV naga declares without `globallycoherent`; so the engine builds the form on Vulkan only.
// bindings: matvec.wgsl's (7 nw: the next norm's weight, rows values; 10 yq, 11 yd: the
//           vectors the norm writes), plus 13 arrivals (array<atomic<u32>>, read_write: one
//           counter, zero between dispatches).
// dispatch: matvec.wgsl's, one row range, one vector group, WG = NORM_Q8_LANES; params.accumulate
//           = 1, quantize_out = 0, no pairing, no second weight (the engine refuses the rest).
// requires: matvec.wgsl, matvec_q8.wgsl (LAST_NORM, the norm_q8 hooks), norm_q8.wgsl.
// provides: after_outputs (matvec.wgsl's hook)

@group(0) @binding(13) var<storage, read_write> arrivals: array<atomic<u32>>;

// Invocation 0's ticket, read by the whole workgroup.
var<workgroup> ticket: u32;

// Called by every workgroup that owns rows, after its outputs (uniform control flow).
fn after_outputs(n: u32, lanes: Lanes) {
    if !LAST_NORM {
        return;
    }
    storageBarrier();
    if lanes.index == 0u {
        ticket = atomicAdd(&arrivals[0], 1u);
    }
    let drawn = workgroupUniformLoad(&ticket);
    let owners = (p.rows + TEAMS * ROWS - 1u) / (TEAMS * ROWS);
    if drawn + 1u != owners {
        return;
    }
    storageBarrier();
    for (var b = 0u; b < MAX_B; b++) {
        if b < n {
            norm_q8_row(b, p.y_index + b * p.y_stride, p.rows, p.eps, lanes);
        }
    }
    if lanes.index == 0u {
        atomicStore(&arrivals[0], 0u);
    }
}
