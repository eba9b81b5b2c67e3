// attn_scores_workgroup — the scores of one key tile for decode attention, one invocation per
// key (the no-subgroup fallback)
//
// Invocation i takes keys jj = i, i + WG, … of the tile and computes all GROUP dot products over
// the whole head dimension, reading its key row once:
//   scores[r·KEY_TILE + jj] = Σ_d q_tile[r·HEAD_DIM + d] · k(k0 + jj, d)     (r < GROUP)
//   key_base[jj] = the element index of key k0 + jj, d = 0 (kv_base), for the value pass
// Same interface as attn_scores_subgroup.wgsl:
//   tile_scores(page_row, g, k0, n_valid, lanes) — keys k0 .. k0 + n_valid of kv head g.
// requires: reduce_workgroup.wgsl (Lanes); attn_decode.wgsl's q_tile, scores, key_base, k_cache,
//           params and overrides (HEAD_DIM, GROUP, KEY_TILE, MAX_GROUP, WG).

fn tile_scores(page_row: u32, g: u32, k0: u32, n_valid: u32, lanes: Lanes) {
    for (var jj = lanes.index; jj < n_valid; jj += WG) {
        let base = kv_base(params.kv, page_row, k0 + jj, g);
        var part: array<f32, MAX_GROUP>;
        for (var r = 0u; r < GROUP; r++) {
            part[r] = 0.0;
        }
        for (var d = 0u; d < HEAD_DIM; d++) {
            let kd = f32(k_cache[base + d]);
            for (var r = 0u; r < GROUP; r++) {
                part[r] += q_tile[r * HEAD_DIM + d] * kd;
            }
        }
        for (var r = 0u; r < GROUP; r++) {
            scores[r * KEY_TILE + jj] = part[r];
        }
        key_base[jj] = base;
    }
}
