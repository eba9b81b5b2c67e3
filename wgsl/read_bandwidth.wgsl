// read_bandwidth — a streaming-read probe: out[g·WG + l] = XOR of the vec4 words workgroup g's
// lane l reads from src[g·PER_WG .. (g+1)·PER_WG), lane-strided so consecutive lanes read
// consecutive 16-byte words (coalesced). The XOR keeps every load live; the writes are
// WG·4 bytes per PER_WG·16 bytes read (1/64 at the defaults), not counted as traffic.
// bindings: 0 src (array<vec4<u32>>, read) · 1 out (array<u32>, read_write) · 2 Params (uniform)
// dispatch: one workgroup per PER_WG vec4s, on a 2-D grid past 65535 workgroups (grid.wgsl)
// variants: none (plain loads on every adapter)

override WG: u32 = 256u;
override PER_WG: u32 = 4096u;

struct Params {
    n_vec4: u32,
    n_groups: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@group(0) @binding(2) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) count: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    let group = flat_workgroup(wid, count);
    if (group >= params.n_groups) {
        return;
    }
    let begin = group * PER_WG;
    let end = min(begin + PER_WG, params.n_vec4);
    var acc = vec4<u32>(0u);
    for (var i = begin + lane; i < end; i += WG) {
        acc ^= src[i];
    }
    out[group * WG + lane] = acc.x ^ acc.y ^ acc.z ^ acc.w;
}
