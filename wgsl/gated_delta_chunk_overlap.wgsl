// gated_delta_chunk_overlap — the chunked delta rule's prepare under its scan, in one dispatch
// (`FAK_GDN_CHUNK=f32+overlap+blocks`)
//
// Math: that of the kernel it joins (gated_delta_chunk.wgsl): chunk_prepare's items — one
// (chunk c, value head h, sequence s) each, what one chunk_prepare workgroup computes — and
// chunk_scan's workgroups, which need item (c, h, s) written before their chunk c. Two
// dispatches put a barrier between all of the prepare and all of the scan (wgpu records one
// between dispatches that share a read-write buffer, over every earlier compute dispatch:
// experiments/NOTES.md "gdnover"), so the scan's serial walk over the chunks starts only when
// the last chunk is prepared. Here the scan's workgroups start at once and the items are
// prepared in chunk order while the scans walk.
//
// Roles, by arrival (a ticket taken on entry, not the workgroup id, so the scans are the first to
// start whatever order the device starts workgroups in): the first tiles·nv·count arrivals are
// scan workgroups (tile = ROWS state rows of a head of a sequence), the rest prepare helpers.
// Items are handed out by a second ticket in chunk-major order (item j: c = j / (nv·count),
// s = (j / nv) mod count, h = j mod nv), run by whoever takes them, each published by a flag.
// - a helper takes items until none is left, then leaves;
// - a scan workgroup, before chunk c, checks its item's flag: set, it goes on; unset and not yet
//   handed out (the ticket ≤ j), it takes the next item itself (the earliest unprepared: j or
//   one before it) and runs it; handed out, it waits for it.
// No workgroup waits while it holds an item, and a workgroup waits only on an item that one
// that has started holds and runs to its end without waiting: no forward-progress promise
// between workgroups is needed, only that one that has started goes on (what any device
// scheduling gives, lavapipe's one-thread-a-workgroup included).
// The handoff: the item's scratch stores → storageBarrier() → invocation 0's atomicStore of
// the flag; the reader's invocation 0 atomicLoad → workgroupUniformLoad → storageBarrier() →
// the scratch loads. On Vulkan naga emits device-scope AcquireRelease control barriers around
// relaxed device-scope atomics (NOTES "decdisp": "WGSL's memory model"), which order the
// stores before the loads; WGSL alone promises no more than relaxed atomics, so the host
// builds this form on the Vulkan backend only.
// The counters come back to zero for the next dispatch (the next layer binds the same buffer):
// the last workgroup to leave (a third ticket) zeroes them after every other has left.
//
// bindings: those of gated_delta_chunk.wgsl and 7 overlap (array<atomic<u32>>, read_write:
//           ARRIVED, TICKET, LEFT, pad, then one flag per item; zero between dispatches).
// dispatch: chunk_overlap (tiles + n_chunks, nv, count) × 256, tiles = ⌈dv / ROWS⌉, n_chunks
//           chunk_prepare's: tiles·nv·count scan workgroups and as many helpers as items.
// workgroup memory: the sum of both roles' (WGSL has no unions; 38.3 KB at dk = 128).
// requires: sequences.wgsl, gated_delta_chunk_io.wgsl, gated_delta_chunk.wgsl (prepare_chunk,
//           scan_step, its workgroup arrays).

@group(0) @binding(7) var<storage, read_write> overlap: array<atomic<u32>>;

const ARRIVED: u32 = 0u;
const TICKET: u32 = 1u;
const LEFT: u32 = 2u;
const FLAGS: u32 = 4u;
// What invocation 0 tells its workgroup besides an item to run.
const ITEM_READY: u32 = 0xffffffffu;
const ITEM_HELD: u32 = 0xfffffffeu;

var<workgroup> overlap_sh: u32;

// The grid's shape, as the host dispatches it.
struct OverlapGrid {
    tiles: u32,
    scans: u32,
    items: u32,
    workgroups: u32,
}

fn overlap_grid(grid: vec3<u32>) -> OverlapGrid {
    let tiles = (params.dv + ROWS - 1u) / ROWS;
    let heads_seqs = grid.y * grid.z;
    return OverlapGrid(tiles, tiles * heads_seqs, (grid.x - tiles) * heads_seqs,
                       grid.x * heads_seqs);
}

@compute @workgroup_size(256)
fn chunk_overlap(@builtin(num_workgroups) grid_size: vec3<u32>,
                 @builtin(local_invocation_index) tid: u32) {
    let grid = overlap_grid(grid_size);
    let role = broadcast(tid, ARRIVED);
    if role < grid.scans {
        scan_tile(role, grid, tid);
    } else {
        help(grid, tid);
    }
    leave(grid, tid);
}

// Invocation 0's atomicAdd on counter `at`, for the whole workgroup.
fn broadcast(tid: u32, at: u32) -> u32 {
    if tid == 0u {
        overlap_sh = atomicAdd(&overlap[at], 1u);
    }
    return workgroupUniformLoad(&overlap_sh);
}

// Item j's (chunk, head, sequence), as chunk_prepare's workgroup id.
fn item_workgroup(j: u32) -> vec3<u32> {
    let heads_seqs = params.nv * seqs.count;
    return vec3(j / heads_seqs, j % params.nv, (j / params.nv) % seqs.count);
}

fn item_of(c: u32, h: u32, s: u32) -> u32 {
    return (c * seqs.count + s) * params.nv + h;
}

// Runs item j (chunk_prepare's code) and publishes it.
fn run_item(j: u32, tid: u32) {
    prepare_chunk(item_workgroup(j), tid);
    storageBarrier();
    if tid == 0u {
        atomicStore(&overlap[FLAGS + j], 1u);
    }
}

fn help(grid: OverlapGrid, tid: u32) {
    loop {
        let j = broadcast(tid, TICKET);
        if j >= grid.items {
            break;
        }
        run_item(j, tid);
    }
}

// Scan workgroup `role`'s tile: chunk_scan's, each chunk after its item.
fn scan_tile(role: u32, grid: OverlapGrid, tid: u32) {
    let rows_tile = role % grid.tiles;
    let h = (role / grid.tiles) % params.nv;
    let s = role / (grid.tiles * params.nv);
    let at = state_at(seqs.seq[s].slot, h);
    if tid < SCAN_WG {
        load_state(at, rows_tile, tid);
    }
    for (var c = 0u; c < chunks(s); c++) {
        await_item(item_of(c, h, s), grid, tid);
        scan_step(c, rows_tile, h, s, tid);
    }
    if tid < SCAN_WG {
        store_state(at, rows_tile, tid);
    }
}

// Returns once item j is published (and its stores visible to this workgroup), having run any
// item not yet handed out up to it.
fn await_item(j: u32, grid: OverlapGrid, tid: u32) {
    loop {
        if tid == 0u {
            overlap_sh = next_move(j, grid);
        }
        let next = workgroupUniformLoad(&overlap_sh);
        if next == ITEM_READY {
            break;
        }
        if next != ITEM_HELD {
            run_item(next, tid);
        }
    }
    storageBarrier();
}

// Invocation 0: ITEM_READY if item j is published, ITEM_HELD if another workgroup runs it (or
// every item is handed out), else the next item to hand out, taken (j or an earlier one).
fn next_move(j: u32, grid: OverlapGrid) -> u32 {
    if atomicLoad(&overlap[FLAGS + j]) != 0u {
        return ITEM_READY;
    }
    if atomicLoad(&overlap[TICKET]) > j {
        return ITEM_HELD;
    }
    let k = atomicAdd(&overlap[TICKET], 1u);
    return select(ITEM_HELD, k, k < grid.items);
}

// Counts this workgroup out; the last one zeroes every counter for the next dispatch.
fn leave(grid: OverlapGrid, tid: u32) {
    storageBarrier();
    let left = broadcast(tid, LEFT);
    if left + 1u == grid.workgroups {
        storageBarrier();
        for (var i = tid; i < FLAGS + grid.items; i += 256u) {
            atomicStore(&overlap[i], 0u);
        }
    }
}
