// attn_decode_read — the decode attention's caches, read-only: the default module's bindings 1
// and 2 (rope_kv wrote the step's k and v in an earlier dispatch). attn_decode_rope.wgsl binds
// them read_write instead, for the form that writes them itself.
// bindings: 1 k_cache (read) · 2 v_cache (read), as vec4 rows of KvScalar.
// requires: kv_f32.wgsl | kv_f16.wgsl.

@group(0) @binding(1) var<storage, read> k_cache: array<vec4<KvScalar>>;
@group(0) @binding(2) var<storage, read> v_cache: array<vec4<KvScalar>>;
