// kv_f16 — the KV-cache element type of the f16 variants (`KvScalar`, see kv_paged.wgsl); the
// module gets `enable f16;` from its variant. Values are rounded to f16 when written and widened
// to f32 when read: all arithmetic stays f32.
alias KvScalar = f16;
