// sequences — the batch a Gated DeltaNet step runs, written by the host before each step
//
// `count` sequences: sequence s is the `seq[s].len` activation rows from row `seq[s].start` (a
// decode step: one row each, s; a prompt step: one prompt's rows, or several prompts' rows one
// after another with padding rows between them that no sequence reads), and it reads and writes
// the conv and recurrent state of slot `seq[s].slot`. The chunked delta rule keeps sequence s's
// chunk c in scratch block seq[s].chunk0 + c (the host counts them up). The slots of one batch
// are distinct (the host checks).
// engine: `gpu::step::SequenceTable`.
// provides: struct Sequences, struct SeqEntry. A kernel binds it as `var<storage, read> seqs:
//           Sequences`.
//
// A prefill may also take a snapshot of one sequence's state partway through the step, where
// the prefix cache keeps one (a branch point inside the step): the state of sequence `save_seq`
// after its first `save_rows` rows (0: none) is written to slot `save_slot` too. With one
// prompt step the chunked delta rule puts `seq[s].lead` zero rows before sequence s's row 0:
// its first position modulo the chunk, so that its chunks are those of the absolute chunk grid
// (positions 64c ..< 64c + 64) whatever step, batch or row it runs in. Zero rows change neither
// outputs nor state, and a chunk's rows then sit at the same places in its tiles in every step,
// which keeps the cooperative-matrix kernels' sums in one order (issue 21: a request's bits do
// not depend on the batch). lead + save_rows is a multiple of the chunk (the snapshot is on the
// grid).
struct SeqEntry {
    slot: u32,
    start: u32,
    len: u32,
    chunk0: u32,
    lead: u32,
}

struct Sequences {
    count: u32,
    pad3: u32,
    save_rows: u32,
    save_slot: u32,
    save_seq: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
    seq: array<SeqEntry>,
}
