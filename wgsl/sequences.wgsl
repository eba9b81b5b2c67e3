// sequences — the batch a Gated DeltaNet step runs, written by the host before each step
//
// `count` sequences: sequence s is the `seq[s].len` activation rows from row `seq[s].start` (a
// decode step: one row each, s; a prompt step: one prompt's rows, or several prompts' rows one
// after another with padding rows between them that no sequence reads), and it reads and writes
// the conv and recurrent state of slot `seq[s].slot`. The chunked delta rule keeps sequence s's
// chunk c in scratch block seq[s].chunk0 + c (the host counts them up). The slots of one batch
// are distinct (the host checks).
// engine: `gpu::step::SequenceTable`.
// provides: struct Sequences, struct SeqEntry, fn saves_midway. A kernel binds it as
//           `var<storage, read> seqs: Sequences`.
//
// A prefill may also take snapshots of its sequences' states partway through the step, where
// the prefix cache keeps one (a branch point inside the step): the state of sequence s after
// its first `seq[s].save_rows` rows (0: none) is written to slot `seq[s].save_slot` too. Each
// entry has its own, into a slot no sequence of the step uses (the host gives each prompt of a
// step a spare slot of its own), so every prompt of a step takes its due snapshot as the step
// passes it. In a prompt step the chunked delta rule puts `seq[s].lead` zero rows before
// sequence s's row 0: its first position modulo the chunk, so that its chunks are those of the
// absolute chunk grid (positions 64c ..< 64c + 64) whatever step, batch or row it runs in. Zero
// rows change neither outputs nor state, and a chunk's rows then sit at the same places in its
// tiles in every step, which keeps the cooperative-matrix kernels' sums in one order (issue 21:
// a request's bits do not depend on the batch). lead + save_rows is a multiple of the chunk
// (the snapshot is on the grid, where a chunk of the sequence ends).
struct SeqEntry {
    slot: u32,
    start: u32,
    len: u32,
    chunk0: u32,
    lead: u32,
    save_rows: u32,
    save_slot: u32,
    pad0: u32,
}

struct Sequences {
    count: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
    seq: array<SeqEntry>,
}

// Whether the entry takes a snapshot partway through its rows.
fn saves_midway(e: SeqEntry) -> bool {
    return e.save_rows > 0u;
}
