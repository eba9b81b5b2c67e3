// sequences — the batch a Gated DeltaNet step runs, written by the host before each step
//
// `count` sequences of `len` tokens each: token t of sequence s is row s·len + t of every
// activation ([n_tokens, width] with n_tokens = count·len), and sequence s reads and writes the
// conv and recurrent state of slot `slot[s]`. Decode is count = batch, len = 1; prefill is one
// (or several equal-length) prompts. The slots of one batch are distinct (the host checks).
// engine: `gpu::kernels::delta_state::SequenceTable`.
// provides: struct Sequences. A kernel binds it as `var<storage, read> seqs: Sequences`.

//
// A prefill (count = 1) may also take a snapshot of the state partway through the step, where
// the prefix cache keeps one (a branch point inside the step): the state after the first
// `save_rows` rows (0: none) is written to slot `save_slot` too, and the chunked delta rule puts
// `lead` zero rows before row 0 so that one of its chunk boundaries falls there
// (lead + save_rows is a multiple of the chunk; zero rows change neither outputs nor state).
struct Sequences {
    count: u32,
    len: u32,
    lead: u32,
    save_rows: u32,
    save_slot: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
    slot: array<u32>,
}
