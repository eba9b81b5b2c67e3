// matmul_words — the mat-mul's weight binding as u32 words (matmul.wgsl, matmul_coop.wgsl)
//
// bindings: 0 w (array<u32>, read: GGUF blocks as stored, this range's rows).
// provides: the binding and `src_word` for bytes.wgsl's byte-addressed reads.

@group(0) @binding(0) var<storage, read> w: array<u32>;

fn src_word(index: u32) -> u32 {
    return w[index];
}
