// kv_f32 — the KV-cache element type of the f32 variants (`KvScalar`, see kv_paged.wgsl)
alias KvScalar = f32;
