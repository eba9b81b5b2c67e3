// strided_squares — one lane's share of a row's sum of squares, its loads in flight together
//
// Math: strided_squares(first, end, stride) = Σ v_c² over c = first, first + stride, … < end,
// added in that order (so a workgroup of lanes striding a row and then workgroup_sum computes
// exactly the bits of the plain loop `for c … { squares += v * v; }`), v_c = squares_value(c).
//
// Why the batches: the decode norms (quantize_q8's NORM pipeline, the mat-vec's folded
// quantize, rms_norm) sum a whole row with a few workgroups of 64 lanes — 80 values a lane on a
// 5120-wide row. In the plain loop each add waits for its load and a GPU issues in order, so a
// lane paid an L2 round trip per value or per few values; on an H200 each decode norm cost
// ~9 µs in place (the decode probe, experiments/NOTES.md, session 2026-12-06 #15), ~1.2 ms of
// the 27B's 10 ms token. Here a lane issues SQUARES_BATCH independent loads, then adds them in
// the same order: the same sums, a sixteenth of the round trips.
// requires: the including module's `fn squares_value(c: u32) -> f32` (element c of the row's
//           binding; c already includes the row's base).

const SQUARES_BATCH: u32 = 16u;

fn strided_squares(first: u32, end: u32, stride: u32) -> f32 {
    var squares = 0.0;
    var c = first;
    while c + (SQUARES_BATCH - 1u) * stride < end {
        var v: array<f32, SQUARES_BATCH>;
        for (var i = 0u; i < SQUARES_BATCH; i++) {
            v[i] = squares_value(c + i * stride);
        }
        for (var i = 0u; i < SQUARES_BATCH; i++) {
            squares += v[i] * v[i];
        }
        c += SQUARES_BATCH * stride;
    }
    for (; c < end; c += stride) {
        let v = squares_value(c);
        squares += v * v;
    }
    return squares;
}
