// attn_scores_subgroup — the scores of one key tile for decode attention, one subgroup per key
//
// Each subgroup takes keys jj = subgroup, subgroup + n_subgroups, … of the tile; its lanes split
// the head dimension (lane, lane + width, …), so one key row is read with consecutive lanes on
// consecutive elements, and subgroupAdd finishes each of the GROUP dot products.
//   scores[r·KEY_TILE + jj] = Σ_d q_tile[r·HEAD_DIM + d] · k(k0 + jj, d)     (r < GROUP)
//   key_base[jj] = the element index of key k0 + jj, d = 0 (kv_base), for the value pass
// Same interface as attn_scores_workgroup.wgsl:
//   tile_scores(page_row, g, k0, n_valid, lanes) — keys k0 .. k0 + n_valid of kv head g.
// requires: reduce_subgroup.wgsl (Lanes); attn_decode.wgsl's q_tile, scores, key_base, k_cache,
//           params and overrides (HEAD_DIM, GROUP, KEY_TILE, MAX_GROUP).

fn tile_scores(page_row: u32, g: u32, k0: u32, n_valid: u32, lanes: Lanes) {
    for (var jj = lanes.subgroup; jj < n_valid; jj += lanes.subgroups) {
        let base = kv_base(params.kv, page_row, k0 + jj, g);
        var part: array<f32, MAX_GROUP>;
        for (var r = 0u; r < GROUP; r++) {
            part[r] = 0.0;
        }
        for (var d = lanes.lane; d < HEAD_DIM; d += lanes.width) {
            let kd = f32(k_cache[base + d]);
            for (var r = 0u; r < GROUP; r++) {
                part[r] += q_tile[r * HEAD_DIM + d] * kd;
            }
        }
        for (var r = 0u; r < GROUP; r++) {
            let s = subgroupAdd(part[r]);
            if lanes.lane == 0u {
                scores[r * KEY_TILE + jj] = s;
            }
        }
        if lanes.lane == 0u {
            key_base[jj] = base;
        }
    }
}
