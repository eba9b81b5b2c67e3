// positions — the absolute position and page-table row of token t of a step
//
// Two sources, chosen per pipeline by `override TOKEN_TABLE: bool`:
//   false — one sequence: token t sits at step.pos + t and uses page-table row 0;
//   true  — a per-token table written by the host each step (`TokenSlot` per token): batched
//           decode puts one token per sequence there (each at its own position, with its own
//           page-table row); a prefill lists its tokens in order, all of one sequence.
// requires: `var<uniform> step: Step` (step.wgsl), `var<storage, read> token_slots:
//           array<TokenSlot>` (any buffer when TOKEN_TABLE is false), `override TOKEN_TABLE: bool`.
// provides: struct TokenSlot, token_pos(t), token_page_row(t).

struct TokenSlot {
    pos: u32,
    page_row: u32,
}

fn token_pos(t: u32) -> u32 {
    if TOKEN_TABLE {
        return token_slots[t].pos;
    }
    return step.pos + t;
}

fn token_page_row(t: u32) -> u32 {
    if TOKEN_TABLE {
        return token_slots[t].page_row;
    }
    return 0u;
}
