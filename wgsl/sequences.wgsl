// sequences — the batch a Gated DeltaNet step runs, written by the host before each step
//
// `count` sequences of `len` tokens each: token t of sequence s is row s·len + t of every
// activation ([n_tokens, width] with n_tokens = count·len), and sequence s reads and writes the
// conv and recurrent state of slot `slot[s]`. Decode is count = batch, len = 1; prefill is one
// (or several equal-length) prompts. The slots of one batch are distinct (the host checks).
// engine: `gpu::kernels::delta_state::SequenceTable`.
// provides: struct Sequences. A kernel binds it as `var<storage, read> seqs: Sequences`.

struct Sequences {
    count: u32,
    len: u32,
    pad0: u32,
    pad1: u32,
    slot: array<u32>,
}
