// argmax — greedy next token: the index of the largest logit of a row, written where the next
//          step reads it (next_token[slot], the embedding lookup's input) and into the token
//          history ring (history[(step.out_index + slot) mod history_len]) for batched readback
//
// Rows: the last row (n_tokens − 1) of a prefill or single-sequence decode, slot 0; or every
// row r < n_tokens, slot r (batched decode: one row per sequence), chosen by ALL_ROWS.
// Order: logits are compared as ordered u32 keys (sign-magnitude flipped; −0 as +0), so the
// comparison cannot be changed by fast-math float rules; ties go to the lowest index, NaN never
// competes, and a row with no number at all gives token 0.
// bindings: 0 logits (read) · 1 partials (read_write: vec2<u32> per row and chunk) · 2 next_token
//           (read_write u32) · 3 history (read_write u32) · 4 params (uniform) · 5 step (uniform)
// dispatch: `chunks` — (n_chunks, rows): a workgroup finds the best of CHUNK = WG·PER_INVOCATION
//           consecutive logits of its row (WG-strided loads, coalesced) into partials;
//           `finish` — (rows): a workgroup reduces the row's n_chunks partials and writes the id.
//           Two passes so a 248k vocabulary is read by ~60 workgroups, not one.
// variants: subgroup (argmax_subgroup.wgsl) | fallback (argmax_workgroup.wgsl).
// requires: reduce_*.wgsl (Lanes), argmax_*.wgsl, step.wgsl, view.wgsl.

struct Params {
    logits: View,
    vocab: u32,
    n_chunks: u32,
    history_len: u32,
    // Rows the logits binding holds (the binding's max_tokens): a Step asking for more reads
    // no further.
    max_rows: u32,
}

@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read_write> partials: array<vec2<u32>>;
@group(0) @binding(2) var<storage, read_write> next_token: array<u32>;
@group(0) @binding(3) var<storage, read_write> history: array<u32>;
@group(0) @binding(4) var<uniform> params: Params;
@group(0) @binding(5) var<uniform> step: Step;

override WG: u32 = 256u;
override PER_INVOCATION: u32 = 16u;
override ALL_ROWS: bool = false;

const NONE: vec2<u32> = vec2<u32>(0u, 0xffffffffu);

// The candidate of logit v at index i: an order-preserving key, or NONE for NaN.
fn candidate(v: f32, i: u32) -> vec2<u32> {
    var bits = bitcast<u32>(v);
    let magnitude = bits & 0x7fffffffu;
    if magnitude > 0x7f800000u {
        return NONE;
    }
    if magnitude == 0u {
        bits = 0u;
    }
    let key = select(bits | 0x80000000u, ~bits, (bits & 0x80000000u) != 0u);
    return vec2<u32>(key, i);
}

fn better(a: vec2<u32>, b: vec2<u32>) -> bool {
    return a.x > b.x || (a.x == b.x && a.y < b.y);
}

// The logits row of output slot `slot`, and how many slots this step has.
fn row_of(slot: u32) -> u32 {
    if ALL_ROWS {
        return slot;
    }
    return min(step.n_tokens, params.max_rows) - 1u;
}

fn slots() -> u32 {
    if ALL_ROWS {
        return min(step.n_tokens, params.max_rows);
    }
    return min(step.n_tokens, 1u);
}

@compute @workgroup_size(WG)
fn chunks(@builtin(workgroup_id) wg: vec3<u32>, lanes: Lanes) {
    let slot = wg.y;
    if slot >= slots() {
        return;
    }
    let base = view_index(params.logits, row_of(slot), 0u, 0u);
    let start = wg.x * WG * PER_INVOCATION;
    let end = min(start + WG * PER_INVOCATION, params.vocab);
    var best = NONE;
    for (var i = start + lanes.index; i < end; i += WG) {
        let c = candidate(logits[base + i], i);
        if better(c, best) {
            best = c;
        }
    }
    best = workgroup_best(best, lanes);
    if lanes.index == 0u {
        partials[slot * params.n_chunks + wg.x] = best;
    }
}

@compute @workgroup_size(WG)
fn finish(@builtin(workgroup_id) wg: vec3<u32>, lanes: Lanes) {
    let slot = wg.x;
    if slot >= slots() {
        return;
    }
    var best = NONE;
    for (var c = lanes.index; c < params.n_chunks; c += WG) {
        let other = partials[slot * params.n_chunks + c];
        if better(other, best) {
            best = other;
        }
    }
    best = workgroup_best(best, lanes);
    if lanes.index == 0u {
        let token = select(best.y, 0u, best.y == 0xffffffffu);
        next_token[slot] = token;
        history[(step.out_index + slot) % params.history_len] = token;
    }
}
