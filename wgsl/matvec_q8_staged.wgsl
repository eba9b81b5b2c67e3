// matvec_q8_staged — matvec_q8_wide's product (y[b, r] (+)= Σ_c W[r, c]·x̂[b, c], x̂ the q8 blocks
// of x) for several input vectors: the batch's x is staged in workgroup memory once per step of
// the workgroup, instead of every invocation loading every vector's x from global memory.
//
// Math: matvec_q8_wide.wgsl's, operation for operation: the same wide units, the same unit of a
// row for each invocation in the same order, the same dot_wide and the same reduction (finish).
// Only where x comes from differs, and x is integers and scales copied bit for bit, so a row's
// result has the wide form's bits at every batch size and composition (a sequence's output does
// not depend on what else is in the batch: issue 21's determinism).
// Why (experiments/NOTES.md, "batch8 (2026-12-05 #6)"): in the wide form each invocation loads
// 16 code words and 2–4 scales per vector and unit as scalar loads 64 bytes apart across the
// invocations of a warp: at 8 vectors that is 144 load instructions, each touching ~16 cache
// lines, per 192 weight bytes, and the L1's wavefronts, not DRAM, set the time (a step of 8
// costs 3.4–5× a step of 1). Here the workgroup copies each step's x once with coalesced word
// loads (consecutive invocations, consecutive words) into slots of 80 bytes per (vector, unit):
// 16 code words and 4 scale words, 5 vec4 that an invocation reads as 16-byte loads, conflict-free
// across a quarter warp (slots 80 bytes apart fall on distinct banks); one copy serves the
// workgroup's TEAMS teams, each of 4 rows.
// bindings, dispatch, rows, teams, pairing, accumulate, quantized output, reduction:
//           matvec_q8_wide.wgsl's (params.units = 4 wide units per super-block). Only q8
//           inputs (xq, xd read from global memory): no QUANTIZE_X, no MIXED pipeline.
// variants: Q6_ALIGNED, matvec_q8_wide.wgsl's: W is read through its load_wide_rows, so the
//           aligned Q6_K loads (W16_VIEW set by the host) serve this form unchanged.
// dispatch: every invocation runs ceil(units / (TEAM·UNROLL)) steps (the barriers need all of
//           them): a step's unit past the row's end is loaded clamped and its products dropped.
// pipelines: one per (ggml type ∈ {Q4_K, Q6_K}, MAX_B, STAGE_B) and layout, entry point
//           matvec_q8_staged. STAGE_B (a power of two ≤ MAX_B) vectors are staged per fill:
//           the host picks the most that fit the adapter's workgroup memory beside the
//           reductions' (engine `MatVecLayout::stage_vectors`); a step of n vectors fills
//           ceil(n / STAGE_B) times, two barriers each.
// requires: matvec.wgsl, matvec_q8.wgsl, matvec_q8_wide.wgsl (and what they require).

// Vectors staged per fill.
override STAGE_B: u32 = 1u;
// Units of one step: the TEAM·UNROLL units every team of the workgroup takes (slot s = unit
// base + s), so a team's invocation lane reads slots lane and lane + TEAM.
override STAGE_UNITS: u32 = TEAM * UNROLL;
// 5 vec4 per (vector, unit): code words 0..15, then the group scales as bits (Q4_K: 2, zeros).
override STAGE_SLOTS: u32 = 5u * TEAM * UNROLL * STAGE_B;

var<workgroup> x_stage: array<vec4<u32>, STAGE_SLOTS>;

// Word w < 20 of vector b's slot of unit u: a code word, or a group's scale as bits.
fn wide_x_word(b: u32, u: u32, w: u32) -> u32 {
    if w < 16u {
        return xq[wide_x_code(b, u, w)];
    }
    if w - 16u < wide_x_groups() {
        return bitcast<u32>(xd[wide_x_scale(b, u, w - 16u)]);
    }
    return 0u;
}

// Stages vectors first..first + STAGE_B − 1 (those < n) of the step whose units start at
// `base`: word i of the fill is word i % 20 of slot i / 20 = j·STAGE_UNITS + s (vector
// first + j, unit base + s), so consecutive invocations load consecutive words of x.
fn stage_x(base: u32, first: u32, n: u32, lanes: Lanes) {
    for (var i = lanes.index; i < 20u * STAGE_UNITS * STAGE_B; i += WG) {
        let slot = i / 20u;
        let w = i % 20u;
        let b = first + slot / STAGE_UNITS;
        let u = base + slot % STAGE_UNITS;
        if b < n && u < p.units {
            x_stage[5u * slot + w / 4u][w % 4u] = wide_x_word(b, u, w);
        }
    }
}

// The staged share of vector j of the fill for slot s: load_wide_x's values.
fn staged_x(j: u32, s: u32) -> WideX {
    let at = 5u * (j * STAGE_UNITS + s);
    var v: WideX;
    v.words = array<vec4<u32>, 4>(x_stage[at], x_stage[at + 1u], x_stage[at + 2u],
                                  x_stage[at + 3u]);
    v.d = bitcast<vec4<f32>>(x_stage[at + 4u]);
    return with_code_sums(v);
}

@compute @workgroup_size(WG)
fn matvec_q8_staged(@builtin(workgroup_id) wg: vec3<u32>,
                    @builtin(num_workgroups) count: vec3<u32>, lanes: Lanes) {
    let part_wg = enter_part(wg, count);
    let paired = p.pair_byte != 0u;
    let at = place_of(part_wg, lanes, paired);
    if at.first >= p.rows {
        return;
    }
    let n = min(step.n_tokens, MAX_B);
    if Q8_NORM {
        norm_scales_of_sums(n, lanes);
    }
    let starts = row_starts(at.team_first, paired);
    let last = p.units - 1u;
    var acc: array<vec4<f32>, 8>;
    for (var base = 0u; base < p.units; base += STAGE_UNITS) {
        // The weights first: in flight while x is staged.
        let u = base + at.lane;
        let first = load_wide_rows(starts, min(u, last));
        var second: array<Wide, 4>;
        if UNROLL == 2u {
            second = load_wide_rows(starts, min(u + TEAM, last));
        }
        // Fills of STAGE_B vectors; both loops run to constants, so unrolled b = g + j is
        // known and acc stays in registers; g < n and the fills are uniform, as the barriers
        // need. With STAGE_B = MAX_B (the usual case) one fill, then the wide form's loop.
        for (var g = 0u; g < MAX_B; g += STAGE_B) {
            if g < n {
                workgroupBarrier();
                stage_x(base, g, n, lanes);
                workgroupBarrier();
                for (var j = 0u; j < STAGE_B; j++) {
                    let b = g + j;
                    // Per vector: unit u, then u + TEAM, as the wide form adds them.
                    if b < n && u < p.units {
                        acc[b] += wide_products(first, staged_x(j, at.lane));
                    }
                    if b < n && UNROLL == 2u && u + TEAM < p.units {
                        acc[b] += wide_products(second, staged_x(j, at.lane + TEAM));
                    }
                }
            }
        }
    }
    finish(&acc, at, n, lanes, paired);
}
