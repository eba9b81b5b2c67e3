// step — the scalars that change every forward step, shared by every kernel of a step
//
// One small uniform buffer per model holds a Step; the host writes it (queue.write_buffer) before
// each step's submit, so every bind group can be built once at load time and the number of
// dispatches of a step never depends on its token count (engine `gpu::step`).
//   n_tokens  — tokens this step processes (1 for decode, the prompt chunk for prefill)
//   pos       — absolute position of the step's first token (tokens already in the KV cache)
//   kv_len    — pos + n_tokens: cache rows attention reads after this step's writes
//   out_index — slot of the token-history ring the step's sampled token goes to
// provides: struct Step. A kernel binds it as `var<uniform> step: Step` at a binding of its own.

struct Step {
    n_tokens: u32,
    pos: u32,
    kv_len: u32,
    out_index: u32,
}
